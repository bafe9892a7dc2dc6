//! What `clusterctl move --to-directory` saves of the model's management cluster and what a
//! restore (`--from-directory`) brings back: it refuses while the control plane is not ready
//! or a Machine has no nodeRef, saves a Secret only by an owner in its object graph, a
//! Cluster API purpose suffix after a Cluster's name, or the move label ([`saves_secret`],
//! the one rule the model and the backup tests apply), and objects come back without their
//! status [A33, A34].

use std::collections::BTreeSet;

use serde_json::Value;

use super::model::{Md, Ms, Tcp, World};

/// The label that makes `clusterctl move` save any object.
pub use crate::secrets::seal::MOVE_LABEL;

/// The suffixes of Secrets Cluster API links to a Cluster by name (cluster-api v1.10.10
/// `util/secret/consts.go:55`, `allSecretPurposes`).
const PURPOSES: [&str; 6] = [
    "kubeconfig",
    "ca",
    "etcd",
    "sa",
    "proxy",
    "apiserver-etcd-client",
];

/// A `clusterctl move --to-directory` dump of one cluster, as the model holds it.
#[derive(Debug, Clone, Default)]
pub struct MoveDump {
    /// The TalosControlPlane (spec and metadata).
    pub tcp: Option<Tcp>,
    /// MachineDeployments.
    pub deployments: Vec<(String, Md)>,
    /// MachineSets.
    pub machine_sets: Vec<Ms>,
    /// The Machines (spec; their status is not restored).
    pub machines: Vec<super::model::Machine>,
    /// The Secrets saved, by name.
    pub secrets: BTreeSet<String>,
    /// The saved Secrets as applied (their metadata: `backupTargetObject` writes each
    /// object whole, `mover.go:1031-1080`), for those the model holds an object of.
    pub secret_objects: Vec<super::model::LiveObject>,
    /// Secrets of the namespace the dump does not hold.
    pub left_out: BTreeSet<String>,
}

/// Whether `clusterctl move` (cluster-api v1.10.10) saves a Secret of a namespace whose
/// Clusters are `clusters`, from its live metadata; `in_graph` says whether an owner's kind
/// is one the move discovers and links to a Cluster (a Cluster API provider's type; not a
/// SopsSecret, whose CRD has no clusterctl label, `objectgraph.go:424`):
/// - the move label saves it whatever else (`cmd/clusterctl/client/cluster/objectgraph.go:317-318`
///   sets `forceMove`; `getMoveNodes`, `:679-688`, keeps every node with a tenant or it);
/// - a Secret with an owner is saved only through that owner: `setSoftOwnership` skips it
///   (`:705-710`), and `setTenants` (`:762-780`) reaches it only down an owner chain from a
///   Cluster, so an owner outside the graph (a virtual node) leaves it out;
/// - one without an owner is saved when `util/secret.ParseSecretName` (`util/secret/secret.go:58-71`:
///   the text after the last `-` is a purpose) names a Cluster of its namespace (`:712-725`).
pub fn saves_secret(secret: &Value, clusters: &[&str], in_graph: &dyn Fn(&str) -> bool) -> bool {
    let labelled = secret
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .is_some_and(|l| l.contains_key(MOVE_LABEL));
    if labelled {
        return true;
    }
    let owners = secret
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .filter(|o| !o.is_empty());
    if let Some(owners) = owners {
        return owners
            .iter()
            .any(|o| in_graph(o.get("kind").and_then(Value::as_str).unwrap_or("")));
    }
    let name = secret
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    name.rsplit_once('-').is_some_and(|(cluster, purpose)| {
        PURPOSES.contains(&purpose) && clusters.contains(&cluster)
    })
}

impl World {
    /// `clusterctl move --to-directory`: the dump, or why it is refused
    /// (`checkProvisioningCompleted`).
    pub fn clusterctl_move_to_directory(&self) -> Result<MoveDump, Vec<String>> {
        let mut refused = Vec::new();
        let cluster = format!("Cluster {}/{}", self.facts.namespace, self.facts.cluster);
        if !self.control_plane_ready {
            refused.push(format!(
                "cannot start the move operation while the control plane for {cluster} is not yet ready"
            ));
        }
        for m in self.machines.iter().filter(|m| m.node_ref.is_none()) {
            refused.push(format!(
                "cannot start the move operation while Machine {}/{} is still provisioning the node",
                self.facts.namespace, m.name
            ));
        }
        if !refused.is_empty() {
            return Err(refused);
        }
        let (secrets, left_out): (BTreeSet<String>, BTreeSet<String>) = self
            .secrets
            .iter()
            .cloned()
            .partition(|name| self.moved_secret(name));
        Ok(MoveDump {
            tcp: self.tcp.clone(),
            deployments: self
                .deployments
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            machine_sets: self.machine_sets.clone(),
            machines: self.machines.clone(),
            secret_objects: secrets
                .iter()
                .filter_map(|n| {
                    self.live
                        .get(&("Secret".into(), self.facts.namespace.clone(), n.clone()))
                        .cloned()
                })
                .collect(),
            secrets,
            left_out,
        })
    }

    /// Whether `clusterctl move` saves a Secret of the cluster ([`saves_secret`] on the
    /// applied object; a Secret a controller made is known by name only, with no owner the
    /// model tracks).
    fn moved_secret(&self, name: &str) -> bool {
        let fallback = serde_json::json!({"metadata": {"name": name}});
        let live = self
            .live
            .get(&("Secret".into(), self.facts.namespace.clone(), name.into()))
            .map_or(&fallback, |o| &o.value);
        saves_secret(live, &[self.facts.cluster.as_str()], &|_| false)
    }

    /// `clusterctl move --from-directory` into an empty management cluster: the objects
    /// come back without their status (no nodeRef, no `status.bootstrapped`), the Cluster
    /// unpaused.
    pub fn restore_from_move(&mut self, dump: &MoveDump) {
        self.tcp = dump.tcp.clone().map(|mut t| {
            t.bootstrapped = false;
            t.status_version = None;
            t.ready = false;
            t.etcd_healthy = false;
            t.waiting = None;
            t
        });
        self.deployments = dump.deployments.iter().cloned().collect();
        self.machine_sets = dump
            .machine_sets
            .iter()
            .cloned()
            .map(|mut m| {
                m.hold = None;
                m
            })
            .collect();
        self.machines = dump
            .machines
            .iter()
            .cloned()
            .map(|mut m| {
                m.node_ref = None;
                m.addresses = false;
                m.status_refused = None;
                m
            })
            .collect();
        self.secrets = dump.secrets.clone();
        for o in &dump.secret_objects {
            self.live.insert(
                (o.kind.clone(), o.namespace.clone(), o.name.clone()),
                o.clone(),
            );
        }
        self.control_plane_ready = false;
        self.cluster_paused = false;
    }
}
