//! `capstan backup dump`: the directory `clusterctl move --to-directory` would write, built
//! from live objects (`kubectl get … -o json`), for the phases in which clusterctl refuses
//! (D6: a Cluster not `controlPlaneReady`, a Machine without a nodeRef, cluster-api v1.10.10
//! `cmd/clusterctl/client/cluster/mover.go:225-279`). capstan never talks to a cluster: it
//! reads the List kubectl wrote, one per namespace.
//!
//! What it writes is what clusterctl writes for the same objects, so `clusterctl move
//! --from-directory` restores it the same way (cluster-api v1.10.10):
//! - the objects the move saves, by its own rule ([`crate::rehearse::clusterctl::move_graph`]:
//!   owner chains by uid from a Cluster, purpose suffixes, the move label, never an object
//!   whose owner is outside the graph);
//! - one file each, `<Kind>_<namespace>_<name>.yaml` (`objectgraph.go:141-143`), holding the
//!   object as JSON with its uid, owner references, resourceVersion and status, as
//!   `backupTargetObject` writes `obj.MarshalJSON()` (`mover.go:1031-1080`), mode 0600;
//! - one deliberate difference, for secrets mode `operator`: a move-labelled Secret owned by
//!   a SopsSecret, which clusterctl never saves, is saved without that owner and annotated
//!   for the operator to adopt back ([`detach_from_sopssecret`]);
//! - every Cluster with `spec.paused: true`: clusterctl saves the Clusters after pausing
//!   them (`mover.go:402-406`), so `--from-directory` creates them paused and unpauses them
//!   once every object exists (`:468-478`).
//!
//! `--from-directory` parses every file of the directory as an object and keys it by uid
//! (`mover.go:156-185`, `objectgraph.go:213-232`), so the dump holds objects only, each
//! uid once. It creates each object without its status (`restoreTargetObject`,
//! `mover.go:1082-1137`: a create; the API server drops `status` of a resource with a
//! status subresource), so `status.bootstrapped` of a TalosControlPlane and a Machine's
//! nodeRef come back only as the restore runbook sets them (`restore plan`).
//!
//! One more object per namespace, the dump's record: a ConfigMap [`RECORD`] (labelled
//! `app.kubernetes.io/managed-by: capstan`) naming its writer and the Clusters that were
//! paused on the live cluster (a `clusterctl move` killed between pausing and unpausing
//! leaves them so, `mover.go:393-436`). It has no owner, no purpose suffix and no move label:
//! `--from-directory` parses it and does not create it (`getMoveNodes`, `objectgraph.go:680-688`),
//! so no restored cluster carries a stale record into a later backup.

use crate::rehearse::clusterctl::move_graph;
use crate::yaml::Scrubbed;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use zeroize::Zeroizing;

/// The kinds `kubectl get -n NAMESPACE <KINDS> -o json` lists for a dump: every kind of a
/// capstan cluster the move saves (cluster-api, CABPT, CACPPT, CAPV, in-cluster IPAM), and
/// the Secrets and ConfigMaps, which the move's own rule sorts (`objectgraph.go:402-406`
/// adds both core kinds to every discovery).
pub(crate) const KINDS: &str = "clusters.cluster.x-k8s.io,machinedeployments.cluster.x-k8s.io,machinesets.cluster.x-k8s.io,\
machines.cluster.x-k8s.io,machinehealthchecks.cluster.x-k8s.io,\
taloscontrolplanes.controlplane.cluster.x-k8s.io,talosconfigs.bootstrap.cluster.x-k8s.io,\
talosconfigtemplates.bootstrap.cluster.x-k8s.io,vsphereclusters.infrastructure.cluster.x-k8s.io,\
vspheremachines.infrastructure.cluster.x-k8s.io,vspheremachinetemplates.infrastructure.cluster.x-k8s.io,\
vspherevms.infrastructure.cluster.x-k8s.io,ipaddressclaims.ipam.cluster.x-k8s.io,\
ipaddresses.ipam.cluster.x-k8s.io,inclusterippools.ipam.cluster.x-k8s.io,secrets,configmaps";

/// The shell commands that back up `namespaces` to `url` in any phase: the live objects
/// go through a pipe (their Secrets never reach a disk before the dump, which is as
/// plaintext as clusterctl's and removed once pushed).
pub(crate) fn commands(namespaces: &[&str], url: &str) -> String {
    let gets: Vec<String> = namespaces
        .iter()
        .map(|ns| format!("  kubectl get -n {ns} {KINDS} -o json &&\n"))
        .collect();
    format!(
        "set -o pipefail  # bash, zsh: a kubectl that fails fails the dump\nrm -rf dump && (\n{}  true) | capstan backup dump - --to dump &&\n  capstan backup push dump {url} -R recipients.txt; rm -rf dump\n",
        gets.concat()
    )
}

/// The name of the dump's record ConfigMap, one per namespace.
pub(crate) const RECORD: &str = "capstan-backup-dump";

/// The label that marks the record as capstan's.
pub(crate) const RECORD_LABEL: (&str, &str) = ("app.kubernetes.io/managed-by", "capstan");

/// Why live objects could not be dumped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DumpError {
    /// Not the JSON List `kubectl get -o json` writes.
    #[error("{file}: {message}; expected the output of `kubectl get -n NAMESPACE <kinds> -o json` (a List with `items`)")]
    NotAList {
        /// The input file.
        file: String,
        /// What is wrong (never a value of the file).
        message: String,
    },
    /// An item without what `--from-directory` needs.
    #[error("{file}: items[{index}]: {field}: {expected}")]
    Item {
        /// The input file.
        file: String,
        /// The item's index.
        index: usize,
        /// The field path.
        field: String,
        /// What was expected.
        expected: String,
    },
    /// Two items with one uid: `--from-directory` keys objects by uid.
    #[error("{file}: {first} and {second} have the same metadata.uid `{uid}`: `clusterctl move --from-directory` keys objects by uid (objectgraph.go:213-232); list each object once")]
    DuplicateUid {
        /// The input file.
        file: String,
        /// The uid (escaped).
        uid: String,
        /// The first object.
        first: String,
        /// The second.
        second: String,
    },
    /// Two items that would be one file.
    #[error("{file}: {object} is listed twice (or under two API groups): a dump holds one file per kind, namespace and name")]
    DuplicateObject {
        /// The input file.
        file: String,
        /// The object.
        object: String,
    },
    /// No Cluster: nothing the move would save.
    #[error("{files}: no Cluster (clusters.cluster.x-k8s.io): the move saves the objects linked to a Cluster; list every kind the README's `kubectl get` command names")]
    NoCluster {
        /// The input files.
        files: String,
    },
}

/// A dump: the files to write, and what the move leaves out.
pub(crate) struct Dump {
    /// `<Kind>_<namespace>_<name>.yaml` and the object's JSON, in the move's order (owners
    /// first), then the records.
    pub files: Vec<(String, Zeroizing<Vec<u8>>)>,
    /// The Clusters, `namespace/name`.
    pub clusters: Vec<String>,
    /// The Clusters that were paused on the live cluster, `namespace/name`.
    pub paused: Vec<String>,
    /// The objects left out because an owner is not among the objects (`Kind
    /// namespace/name` and why): a kind missing from the kubectl command, or one the move
    /// never saves.
    pub orphans: Vec<String>,
    /// How many objects are left out as linked to no Cluster (Secrets and ConfigMaps of
    /// the namespace that are no cluster's).
    pub unlinked: usize,
    /// The move-labelled Secrets owned by a SopsSecret, saved without that owner and
    /// annotated for the operator to adopt back ([`detach_from_sopssecret`]),
    /// `namespace/name`.
    pub detached: Vec<String>,
}

/// The annotation with which isindir/sops-secrets-operator manages a Secret it did not create.
pub(crate) use crate::secrets::sopssecret::MANAGED_ANNOTATION as SOPS_MANAGED;

/// Secrets mode `operator`: the Secrets a restore needs (`<cluster>-talos`, `<cluster>-ca`,
/// the vSphere identity: move-labelled) are created by sops-secrets-operator with their
/// SopsSecret as controller (`internal/controllers/sopssecret_controller.go`,
/// `newKubeSecretFromTemplate`: `SetControllerReference`). A SopsSecret is no kind the move
/// discovers (its CRD carries no clusterctl label, `objectgraph.go:424`), and the move never
/// saves an object whose owner is outside its graph, label or not (`mover.go:509-554`), so
/// `clusterctl move` never saves them. capstan's dump saves such a Secret **without** its
/// SopsSecret owner references and with [`SOPS_MANAGED`]: `--from-directory` creates it
/// ownerless (or leaves the copy the runbook applied first: `restoreTargetObject` skips an
/// object that exists, `mover.go:1100-1108`), and once Argo CD brings the SopsSecret back
/// the operator adopts it instead of failing "Child secret is not owned by controller"
/// (`isKubeSecretManagedOrAnnotatedToBeManaged`; `refreshKubeSecretIfNeeded` then writes
/// its template's owner references, labels and annotations). A Secret with any other owner,
/// or without the move label, is left as the move leaves it. Whether `v` was changed.
pub(crate) fn detach_from_sopssecret(v: &mut Value) -> bool {
    let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("");
    if s("/apiVersion") != "v1" || s("/kind") != "Secret" {
        return false;
    }
    let labelled = v
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .is_some_and(|l| l.contains_key(crate::rehearse::clusterctl::MOVE_LABEL));
    let refs = v
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array);
    let by_operator = refs.is_some_and(|r| {
        !r.is_empty()
            && r.iter().all(|o| {
                o.get("kind").and_then(Value::as_str) == Some(crate::secrets::sopssecret::KIND)
                    && o.get("apiVersion")
                        .and_then(Value::as_str)
                        .is_some_and(|a| a.starts_with("isindir.github.com/"))
            })
    });
    if !labelled || !by_operator {
        return false;
    }
    let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) else {
        return false;
    };
    meta.remove("ownerReferences");
    let ann = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if let Some(ann) = ann.as_object_mut() {
        ann.insert(SOPS_MANAGED.0.into(), Value::String(SOPS_MANAGED.1.into()));
    }
    true
}

/// The file name of an object, `None` when a part would not make one file name.
fn file_name(kind: &str, ns: &str, name: &str) -> Option<String> {
    let n = format!("{kind}_{ns}_{name}.yaml");
    let ok = |s: &str| !s.contains(['_', '/', '\\', '\0']) && !s.chars().any(char::is_control);
    (ok(kind) && ok(ns) && ok(name) && !kind.is_empty() && !name.is_empty() && n.len() <= 255)
        .then_some(n)
}

/// The record of namespace `ns`: its writer and the Clusters paused on the live cluster.
pub(crate) fn record(ns: &str, paused: &[String]) -> Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": RECORD,
            "namespace": ns,
            "uid": format!("{RECORD}.{ns}"),
            "labels": {RECORD_LABEL.0: RECORD_LABEL.1},
        },
        "data": {
            "writer": "capstan backup dump",
            "pausedClusters": paused.join(","),
        },
    })
}

/// Every item of the Lists of `inputs`, checked: an object with apiVersion, kind, name and
/// uid, a name that makes a file name, each uid and each object once.
fn listed_objects(inputs: &[(String, Scrubbed)]) -> Result<Vec<&Value>, DumpError> {
    let mut objects: Vec<&Value> = Vec::new();
    let mut names: BTreeSet<String> = BTreeSet::new();
    let mut uids: BTreeMap<&str, String> = BTreeMap::new();
    for (file, list) in inputs {
        let not_list = |message: &str| DumpError::NotAList {
            file: file.clone(),
            message: message.to_string(),
        };
        let list = &list.0;
        if list.get("kind").and_then(Value::as_str) != Some("List") {
            return Err(not_list("`kind` is not `List`"));
        }
        let items = list
            .get("items")
            .and_then(Value::as_array)
            .ok_or_else(|| not_list("no `items` array"))?;
        for (index, item) in items.iter().enumerate() {
            let bad = |field: &str, expected: &str| DumpError::Item {
                file: file.clone(),
                index,
                field: field.to_string(),
                expected: expected.to_string(),
            };
            let s = |p: &str| item.pointer(p).and_then(Value::as_str).unwrap_or("");
            if !item.is_object() {
                return Err(bad("", "an object"));
            }
            for (p, f) in [
                ("/apiVersion", "apiVersion"),
                ("/kind", "kind"),
                ("/metadata/name", "metadata.name"),
            ] {
                if s(p).is_empty() {
                    return Err(bad(f, "a non-empty string"));
                }
            }
            if s("/metadata/uid").is_empty() {
                return Err(bad(
                    "metadata.uid",
                    "the object's uid, as the API server lists it: `clusterctl move --from-directory` links owners by uid",
                ));
            }
            let (kind, ns, name) = (s("/kind"), s("/metadata/namespace"), s("/metadata/name"));
            let object = format!("{kind} {ns}/{name}");
            let Some(fname) = file_name(kind, ns, name) else {
                return Err(bad(
                    "metadata",
                    "a kind, namespace and name without `_`, `/` or control characters (they make the file name)",
                ));
            };
            if let Some(first) = uids.insert(s("/metadata/uid"), object.clone()) {
                return Err(DumpError::DuplicateUid {
                    file: file.clone(),
                    uid: crate::printable::line(s("/metadata/uid")).into_owned(),
                    first: crate::printable::line(&first).into_owned(),
                    second: crate::printable::line(&object).into_owned(),
                });
            }
            if !names.insert(fname) {
                return Err(DumpError::DuplicateObject {
                    file: file.clone(),
                    object: crate::printable::line(&object).into_owned(),
                });
            }
            objects.push(item);
        }
    }
    Ok(objects)
}

/// The dump of the objects of `inputs` (each an input file's label and its parsed List).
pub(crate) fn dump(inputs: &[(String, Scrubbed)]) -> Result<Dump, DumpError> {
    let objects = listed_objects(inputs)?;
    let mut detached = Vec::new();
    let owned: Vec<Value> = objects
        .iter()
        .map(|v| {
            let mut v = (*v).clone();
            if detach_from_sopssecret(&mut v) {
                let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("");
                detached.push(format!(
                    "{}/{}",
                    s("/metadata/namespace"),
                    s("/metadata/name")
                ));
            }
            v
        })
        .collect();
    let owned = Scrubbed(Value::Array(owned));
    let all = owned.0.as_array().map_or(&[][..], Vec::as_slice);
    let graph = move_graph(all);
    let mut files = Vec::with_capacity(graph.saved.len() + 1);
    let mut clusters = Vec::new();
    let mut paused_by_ns: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for &i in &graph.saved {
        let mut v = Scrubbed(all[i].clone());
        let s = |p: &str| {
            all[i]
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let (kind, ns, name) = (s("/kind"), s("/metadata/namespace"), s("/metadata/name"));
        if kind == "Cluster" && s("/apiVersion").starts_with("cluster.x-k8s.io/") {
            clusters.push(format!("{ns}/{name}"));
            let entry = paused_by_ns.entry(ns.clone()).or_default();
            if all[i].pointer("/spec/paused").and_then(Value::as_bool) == Some(true) {
                entry.push(name.clone());
            }
            if let Some(spec) = v.0.as_object_mut().map(|o| {
                o.entry("spec")
                    .or_insert_with(|| Value::Object(serde_json::Map::new()))
            }) {
                if let Some(spec) = spec.as_object_mut() {
                    spec.insert("paused".into(), Value::Bool(true));
                }
            }
        }
        let name = file_name(&kind, &ns, &name).unwrap_or_default();
        let bytes = Zeroizing::new(serde_json::to_vec(&v.0).unwrap_or_default());
        files.push((name, bytes));
    }
    if clusters.is_empty() {
        return Err(DumpError::NoCluster {
            files: inputs
                .iter()
                .map(|(f, _)| f.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let mut paused = Vec::new();
    for (ns, names) in &paused_by_ns {
        paused.extend(names.iter().map(|n| format!("{ns}/{n}")));
        let name = file_name("ConfigMap", ns, RECORD).unwrap_or_default();
        // The input's own record (from an earlier dump restored by hand) is replaced.
        files.retain(|(f, _)| *f != name);
        let bytes = Zeroizing::new(serde_json::to_vec(&record(ns, names)).unwrap_or_default());
        files.push((name, bytes));
    }
    let mut orphans = BTreeSet::new();
    let mut unlinked = 0;
    for (i, why) in &graph.left_out {
        let s = |p: &str| all[*i].pointer(p).and_then(Value::as_str).unwrap_or("");
        let is_record = s("/kind") == "ConfigMap" && s("/metadata/name") == RECORD;
        let has_owner = all[*i]
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if has_owner {
            orphans.insert(format!(
                "{} {}/{}: {why}",
                s("/kind"),
                s("/metadata/namespace"),
                s("/metadata/name")
            ));
        } else if !is_record {
            unlinked += 1;
        }
    }
    detached.sort();
    Ok(Dump {
        files,
        clusters,
        paused,
        detached,
        orphans: orphans.into_iter().collect(),
        unlinked,
    })
}

/// The Clusters a record lists as paused on the live cluster, `namespace/name`, or `None`
/// when `doc` is no capstan dump record.
pub(crate) fn paused_in_record(doc: &Value) -> Option<Vec<String>> {
    let s = |p: &str| doc.pointer(p).and_then(Value::as_str);
    let ours = s("/kind") == Some("ConfigMap")
        && s("/metadata/name") == Some(RECORD)
        && doc
            .pointer("/metadata/labels")
            .and_then(|l| l.get(RECORD_LABEL.0))
            .and_then(Value::as_str)
            == Some(RECORD_LABEL.1);
    if !ours {
        return None;
    }
    let ns = s("/metadata/namespace").unwrap_or("");
    Some(
        s("/data/pausedClusters")
            .unwrap_or("")
            .split(',')
            .filter(|n| !n.is_empty())
            .map(|n| format!("{ns}/{n}"))
            .collect(),
    )
}
