//! What `clusterctl move --to-directory` saves of the model's management cluster and what a
//! restore (`--from-directory`) brings back: it refuses while the control plane is not ready
//! or a Machine has no nodeRef, saves a Secret only when its name carries a Cluster API
//! purpose suffix or it has the move label (owners aside), and objects come back without
//! their status [A33, A34].

use std::collections::BTreeSet;

use serde_json::Value;

use super::model::{Md, Ms, Tcp, World};

/// The label that makes `clusterctl move` save any object.
pub const MOVE_LABEL: &str = "clusterctl.cluster.x-k8s.io/move";

/// The suffixes of Secrets Cluster API links to a Cluster by name (`util/secret/consts.go`).
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
    /// Secrets of the namespace the dump does not hold.
    pub left_out: BTreeSet<String>,
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
        let (secrets, left_out) = self
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
            secrets,
            left_out,
        })
    }

    /// Whether `clusterctl move` saves a Secret of the cluster: a Cluster API purpose suffix
    /// after the cluster's name, or the move label on the applied object.
    fn moved_secret(&self, name: &str) -> bool {
        let by_name = name.rsplit_once('-').is_some_and(|(cluster, purpose)| {
            cluster == self.facts.cluster && PURPOSES.contains(&purpose)
        });
        let labelled = self
            .live
            .get(&("Secret".into(), self.facts.namespace.clone(), name.into()))
            .is_some_and(|o| {
                o.value
                    .pointer("/metadata/labels")
                    .and_then(Value::as_object)
                    .is_some_and(|l| l.contains_key(MOVE_LABEL))
            });
        by_name || labelled
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
        self.control_plane_ready = false;
        self.cluster_paused = false;
    }
}
