//! What `clusterctl move --to-directory` saves of the model's management cluster and what a
//! restore (`--from-directory`) brings back: it refuses while the control plane is not ready
//! or a Machine has no nodeRef, saves an object only down an owner chain from a Cluster, a
//! Secret also by a Cluster API purpose suffix after a Cluster's name, or the move label, and
//! never one with an owner outside its graph ([`move_graph`], the one rule the model, the
//! backup tests and `capstan backup dump` apply; [`saves_secret`] for one Secret), and
//! objects come back without their status [A33, A34].

#[cfg(any(test, feature = "testkit"))]
use std::collections::BTreeSet;

use serde_json::Value;

use super::model::World;
#[cfg(any(test, feature = "testkit"))]
use super::model::{Md, Ms, Tcp};

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
#[cfg(any(test, feature = "testkit"))]
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

/// The label that makes `clusterctl move` save an object with everything it owns
/// (cluster-api v1.10.10 `cmd/clusterctl/api/v1alpha3/labels.go:37-38`).
pub const MOVE_HIERARCHY_LABEL: &str = "clusterctl.cluster.x-k8s.io/move-hierarchy";

/// The kinds (API group, kind) of the providers capstan installs whose CRD carries
/// [`MOVE_HIERARCHY_LABEL`], so the move saves each object with what it owns: the in-cluster
/// IPAM pools (cluster-api-ipam-provider-in-cluster v1.0.3
/// `config/crd/patches/clusterctl-label_in_inclusterippools.yaml`,
/// `…_globalinclusterippools.yaml`, applied by `config/crd/kustomization.yaml:13-14`). No
/// CRD of cluster-api v1.10.10, CAPV v1.13.1, CABPT or CACPPT carries either label.
pub const CRD_HIERARCHY: [(&str, &str); 2] = [
    ("ipam.cluster.x-k8s.io", "InClusterIPPool"),
    ("ipam.cluster.x-k8s.io", "GlobalInClusterIPPool"),
];

/// What `clusterctl move` (cluster-api v1.10.10) saves of a set of live objects: the one
/// rule of this module, which [`saves_secret`], the model and `capstan backup dump` apply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MoveGraph {
    /// The indexes of the objects saved, in the move's order (owners first).
    pub saved: Vec<usize>,
    /// The objects left out, each with why.
    pub left_out: Vec<(usize, String)>,
}

/// One object of the graph.
struct GraphNode {
    uid: String,
    kind: String,
    namespace: String,
    name: String,
    owners: Vec<String>,
    soft_owners: Vec<usize>,
    force_move: bool,
    hierarchy: bool,
}

fn text<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or("")
}

/// The move's object graph of `objects` (each a live object with `metadata.uid`, as
/// `kubectl get -o json` lists them), and what it saves, read from
/// `cmd/clusterctl/client/cluster/objectgraph.go` at v1.10.10:
/// - a node per object, keyed by uid; an owner reference names its owner by uid, and an
///   owner not among the objects is a virtual node (`addObj`, `processOwnerReferences`,
///   `ownerToVirtualNode`, `:198-268`);
/// - a Cluster, ClusterClass or ClusterResourceSet, or an object labelled
///   [`MOVE_HIERARCHY_LABEL`], is saved with its hierarchy; the move label
///   ([`MOVE_LABEL`]) saves the object itself (`objMetaToNode`, `:315-340`); so does either
///   label on the kind's CRD (`getDiscoveryTypes`, `:361-383`: [`CRD_HIERARCHY`]);
/// - a Secret without an owner is soft-owned by the Cluster of its namespace that
///   `util/secret.ParseSecretName` names: the text before the last `-`, when the text
///   after it is a purpose (`setSoftOwnership`, `:702-725`; `util/secret/secret.go:58-71`);
/// - the tenants: every object reached from a hierarchy node down owner and soft-owner
///   links (`setTenants`, `:762-781`); `getMoveNodes` (`:680-688`) keeps those with a
///   tenant or the move label;
/// - the sequence (`mover.go:509-554`, `getMoveSequence`, which `toDirectory` saves by,
///   `:418-426`): a node joins once every owner and soft owner has joined, so an object
///   with an owner outside the graph (a virtual node never joins) is never saved, move
///   label or not.
pub fn move_graph(objects: &[Value]) -> MoveGraph {
    let mut nodes: Vec<GraphNode> = objects
        .iter()
        .map(|o| {
            let labels = o.pointer("/metadata/labels").and_then(Value::as_object);
            let kind = text(o, "/kind").to_string();
            let group = text(o, "/apiVersion").split('/').next().unwrap_or("");
            let hierarchy = labels.is_some_and(|l| l.contains_key(MOVE_HIERARCHY_LABEL))
                || (group == "cluster.x-k8s.io" && (kind == "Cluster" || kind == "ClusterClass"))
                || (group == "addons.cluster.x-k8s.io" && kind == "ClusterResourceSet")
                || CRD_HIERARCHY.contains(&(group, kind.as_str()));
            GraphNode {
                uid: text(o, "/metadata/uid").to_string(),
                namespace: text(o, "/metadata/namespace").to_string(),
                name: text(o, "/metadata/name").to_string(),
                owners: o
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|r| text(r, "/uid").to_string())
                    .collect(),
                soft_owners: Vec::new(),
                force_move: hierarchy || labels.is_some_and(|l| l.contains_key(MOVE_LABEL)),
                hierarchy,
                kind,
            }
        })
        .collect();
    let by_uid: std::collections::BTreeMap<String, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.uid.clone(), i))
        .collect();
    let clusters: Vec<usize> = (0..nodes.len())
        .filter(|&i| nodes[i].kind == "Cluster" && nodes[i].hierarchy)
        .collect();
    for i in 0..nodes.len() {
        if nodes[i].kind != "Secret" || !nodes[i].owners.is_empty() {
            continue;
        }
        let soft: Vec<usize> = match nodes[i].name.rsplit_once('-') {
            Some((cluster, purpose)) if PURPOSES.contains(&purpose) => clusters
                .iter()
                .copied()
                .filter(|&c| nodes[c].name == cluster && nodes[c].namespace == nodes[i].namespace)
                .collect(),
            _ => Vec::new(),
        };
        nodes[i].soft_owners = soft;
    }
    // Tenants: down from every hierarchy node.
    let mut tenant = vec![false; nodes.len()];
    let mut stack: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].hierarchy).collect();
    while let Some(i) = stack.pop() {
        if std::mem::replace(&mut tenant[i], true) {
            continue;
        }
        for (j, n) in nodes.iter().enumerate() {
            let owned = n.owners.iter().any(|u| by_uid.get(u) == Some(&i));
            if !tenant[j] && (owned || n.soft_owners.contains(&i)) {
                stack.push(j);
            }
        }
    }
    let moves: Vec<bool> = (0..nodes.len())
        .map(|i| tenant[i] || nodes[i].force_move)
        .collect();
    let mut joined = vec![false; nodes.len()];
    let mut saved = Vec::new();
    loop {
        let group: Vec<usize> = (0..nodes.len())
            .filter(|&i| moves[i] && !joined[i])
            .filter(|&i| {
                nodes[i]
                    .owners
                    .iter()
                    .all(|u| by_uid.get(u).is_some_and(|&o| joined[o]))
                    && nodes[i].soft_owners.iter().all(|&o| joined[o])
            })
            .collect();
        if group.is_empty() {
            break;
        }
        for &i in &group {
            joined[i] = true;
        }
        saved.extend(group);
    }
    let left_out = (0..nodes.len())
        .filter(|&i| !joined[i])
        .map(|i| {
            let n = &nodes[i];
            let missing = n.owners.iter().find(|u| !by_uid.contains_key(*u));
            let why = if let Some(u) = missing {
                let r = objects[i]
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .and_then(|a| a.iter().find(|r| text(r, "/uid") == u.as_str()));
                format!(
                    "its owner {} {} (uid {u}) is not among the objects: the move never saves an object whose owner is \
                     outside its graph (a kind without the clusterctl CRD label, or not listed)",
                    r.map_or("", |r| text(r, "/kind")),
                    r.map_or("", |r| text(r, "/name"))
                )
            } else if moves[i] {
                "an owner of it is not saved".to_string()
            } else {
                "no owner chain to a Cluster, no Cluster API purpose suffix after a Cluster's name, no label \
                 clusterctl.cluster.x-k8s.io/move"
                    .to_string()
            };
            (i, why)
        })
        .collect();
    MoveGraph { saved, left_out }
}

/// Whether `clusterctl move` (cluster-api v1.10.10) saves a Secret of a namespace whose
/// Clusters are `clusters`, from its live metadata; `in_graph` says whether an owner's kind
/// is one the move discovers and links to a Cluster (a Cluster API provider's type; not a
/// SopsSecret, whose CRD has no clusterctl label, `objectgraph.go:424`). [`move_graph`]
/// decides, on the Secret, its Clusters and an owner object (linked to a Cluster) for each
/// owner reference whose kind is in the graph:
/// - the move label saves it when every owner is in the graph (`objectgraph.go:317-318`
///   sets `forceMove`; `getMoveNodes`, `:679-688`);
/// - a Secret with an owner is saved only through that owner: `setSoftOwnership` skips it
///   (`:705-710`), `setTenants` (`:762-780`) reaches it only down an owner chain from a
///   Cluster, and `getMoveSequence` (`mover.go:509-554`) never takes an object with an owner
///   outside the graph (a virtual node), the move label notwithstanding;
/// - one without an owner is saved when `util/secret.ParseSecretName` (`util/secret/secret.go:58-71`:
///   the text after the last `-` is a purpose) names a Cluster of its namespace (`:712-725`).
#[cfg(any(test, feature = "testkit"))]
pub fn saves_secret(secret: &Value, clusters: &[&str], in_graph: &dyn Fn(&str) -> bool) -> bool {
    let ns = text(secret, "/metadata/namespace");
    let mut objects: Vec<Value> = clusters
        .iter()
        .map(|c| {
            serde_json::json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
                "metadata": {"namespace": ns, "name": c, "uid": format!("capstan-model/cluster/{c}")}})
        })
        .collect();
    let anchor = "capstan-model/anchor";
    objects.push(
        serde_json::json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
        "metadata": {"namespace": ns, "name": anchor, "uid": anchor}}),
    );
    let mut s = secret.clone();
    let refs = s
        .pointer_mut("/metadata/ownerReferences")
        .and_then(Value::as_array_mut);
    for (i, r) in refs.into_iter().flatten().enumerate() {
        let uid = format!("capstan-model/owner/{i}");
        if in_graph(text(r, "/kind")) {
            objects.push(serde_json::json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": text(r, "/kind"),
                "metadata": {"namespace": ns, "name": text(r, "/name"), "uid": uid,
                    "ownerReferences": [{"kind": "Cluster", "name": anchor, "uid": anchor}]}}));
        }
        if let Some(o) = r.as_object_mut() {
            o.insert("uid".into(), Value::String(uid));
        }
    }
    if let Some(o) = s.as_object_mut() {
        // It is a Secret whatever its text says (the model knows some by name only).
        o.insert("apiVersion".into(), Value::String("v1".into()));
        o.insert("kind".into(), Value::String("Secret".into()));
    }
    if let Some(m) = s.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("uid".into(), Value::String("capstan-model/secret".into()));
    }
    objects.push(s);
    let last = objects.len() - 1;
    move_graph(&objects).saved.contains(&last)
}

/// The admission webhooks with `failurePolicy: Fail` on CREATE that refuse an object of a
/// kind while the provider serving them runs no pod \[A36]: `clusterctl move --from-directory`
/// creates each object with a plain `Create` (`restoreTargetObject`, cluster-api v1.10.10
/// `mover.go:1126`), which the API server refuses when the webhook's Service has no
/// endpoint. Kind, then the provider (its `cluster.x-k8s.io/provider` label).
#[cfg(any(test, feature = "testkit"))]
pub const CREATE_WEBHOOKS: &[(&str, &str)] = &[
    // CABPT v0.6.12 `config/webhook/manifests.yaml:7-26` (vtalosconfig; templates: UPDATE only).
    ("TalosConfig", "bootstrap-talos"),
    // CACPPT v0.5.12 `config/webhook/manifests.yaml:7-28` (defaulting), `:35-55` (validating).
    ("TalosControlPlane", "control-plane-talos"),
    // CAPV v1.13.1 `config/govmomi/webhook/manifests.yaml`.
    ("VSphereVM", "infrastructure-vsphere"),
    ("VSphereMachine", "infrastructure-vsphere"),
    // ipam-in-cluster v1.0.3 `config/webhook/manifests.yaml:7-102` (pools only).
    ("InClusterIPPool", "ipam-in-cluster"),
    // cluster-api v1.10.10 `config/webhook/manifests.yaml:455-500`.
    ("IPAddress", "cluster-api"),
    ("IPAddressClaim", "cluster-api"),
    ("Machine", "cluster-api"),
    ("Cluster", "cluster-api"),
];

/// The creates of `kinds` the API server refuses while the providers `stopped` run no pod
/// ([`CREATE_WEBHOOKS`]): each as `Kind: provider`.
#[cfg(any(test, feature = "testkit"))]
pub fn refused_creates(kinds: &[&str], stopped: &[&str]) -> Vec<String> {
    kinds
        .iter()
        .filter_map(|k| {
            CREATE_WEBHOOKS
                .iter()
                .find(|(kind, p)| kind == k && stopped.contains(p))
                .map(|(kind, p)| format!("{kind}: {p}"))
        })
        .collect()
}

impl World {
    /// `clusterctl move --to-directory`: the dump, or why it is refused
    /// (`checkProvisioningCompleted`).
    #[cfg(any(test, feature = "testkit"))]
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
    #[cfg(any(test, feature = "testkit"))]
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
    #[cfg(any(test, feature = "testkit"))]
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(kind: &str, name: &str, owners: &[&str], labels: Value) -> Value {
        let api = match kind {
            "Secret" | "ConfigMap" => "v1",
            "InClusterIPPool" | "IPAddress" | "IPAddressClaim" => "ipam.cluster.x-k8s.io/v1beta1",
            _ => "cluster.x-k8s.io/v1beta1",
        };
        let refs: Vec<Value> = owners
            .iter()
            .map(|o| json!({"kind": "X", "name": o, "uid": o}))
            .collect();
        json!({"apiVersion": api, "kind": kind, "metadata": {"namespace": "ns", "name": name, "uid": name,
            "labels": labels, "ownerReferences": refs}})
    }

    #[test]
    fn the_move_saves_owner_chains_from_a_cluster_and_never_an_object_with_an_owner_outside_it() {
        let none = json!({});
        let moved = json!({MOVE_LABEL: ""});
        let objects = vec![
            obj("Machine", "m1", &["tcp"], none.clone()),
            obj("Cluster", "c", &[], none.clone()),
            obj("TalosControlPlane", "tcp", &["c"], none.clone()),
            // A purpose suffix after the Cluster's name, no owner.
            obj("Secret", "c-kubeconfig", &[], none.clone()),
            // Neither: left out; with the label: saved.
            obj("Secret", "c-talos", &[], none.clone()),
            obj("Secret", "c-vsphere", &[], moved.clone()),
            // The label does not save an object whose owner is outside the graph (a
            // SopsSecret: getMoveSequence never takes it).
            obj("Secret", "c-ca", &["sopssecret-uid"], moved.clone()),
            // The IPAM pool's CRD carries move-hierarchy: an address owned by its claim
            // and its pool is saved once both are.
            obj("InClusterIPPool", "pool", &[], none.clone()),
            obj("IPAddressClaim", "claim", &["m1"], none.clone()),
            obj("IPAddress", "addr", &["claim", "pool"], none.clone()),
            obj("ConfigMap", "kube-root-ca.crt", &[], none),
        ];
        let g = move_graph(&objects);
        let names: Vec<&str> = g
            .saved
            .iter()
            .map(|&i| objects[i]["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "c",
                "c-vsphere",
                "pool",
                "tcp",
                "c-kubeconfig",
                "m1",
                "claim",
                "addr"
            ]
        );
        let out: Vec<(&str, &str)> = g
            .left_out
            .iter()
            .map(|(i, why)| {
                (
                    objects[*i]["metadata"]["name"].as_str().unwrap(),
                    why.as_str(),
                )
            })
            .collect();
        assert_eq!(out.len(), 3, "{out:?}");
        assert!(
            out[0].0 == "c-talos" && out[0].1.starts_with("no owner chain"),
            "{out:?}"
        );
        assert!(
            out[1].0 == "c-ca" && out[1].1.contains("sopssecret-uid"),
            "{out:?}"
        );
        // saves_secret is the same rule on one Secret.
        let in_graph = |k: &str| k == "TalosControlPlane";
        let owned = |kind: &str, labels: Value| {
            json!({"kind": "Secret", "metadata": {"name": "x", "namespace": "ns", "labels": labels,
                "ownerReferences": [{"kind": kind, "name": "o", "uid": "u"}]}})
        };
        assert!(saves_secret(
            &owned("TalosControlPlane", json!({})),
            &["c"],
            &in_graph
        ));
        assert!(!saves_secret(
            &owned("SopsSecret", moved.clone()),
            &["c"],
            &in_graph
        ));
        assert!(saves_secret(
            &json!({"kind": "Secret", "metadata": {"name": "c-ca", "namespace": "ns"}}),
            &["c"],
            &in_graph
        ));
        assert!(!saves_secret(
            &json!({"kind": "Secret", "metadata": {"name": "c-talos", "namespace": "ns"}}),
            &["c"],
            &in_graph
        ));
        assert!(saves_secret(
            &json!({"kind": "Secret", "metadata": {"name": "c-talos", "namespace": "ns", "labels": moved}}),
            &["c"],
            &in_graph
        ));
        // `apiserver-etcd-client` splits at the last `-`: never a purpose.
        assert!(!saves_secret(
            &json!({"kind": "Secret", "metadata": {"name": "c-apiserver-etcd-client", "namespace": "ns"}}),
            &["c"],
            &in_graph
        ));
    }
}
