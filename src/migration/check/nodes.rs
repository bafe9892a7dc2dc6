//! What the cluster's Node objects say about the cloud provider: Cluster API matches a Node to its Machine only by `spec.providerID`, and Talos on
//! VMware sets none itself, so the vSphere cloud controller manager (CPI) must run in the
//! cluster and initialise the Talos nodes (which capstan renders with
//! `cluster.externalCloudProvider.enabled`, so their kubelets run `--cloud-provider=external`).

use serde_json::Value;

use super::{not_compared, CheckError, Cx, Finding, Severity};

/// The taint a kubelet with `--cloud-provider=external` registers its Node with, until a
/// cloud controller manager initialises it.
pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// The providerID scheme of the vSphere CPI and of CAPV's `VSphereMachine.spec.providerID`.
pub const VSPHERE_PROVIDER_ID: &str = "vsphere://";

/// One Node, as far as the checks need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    /// `metadata.name`.
    pub name: String,
    /// `spec.providerID`, when set.
    pub provider_id: Option<String>,
    /// `spec.taints[]` as `(key, value, effect)`.
    pub taints: Vec<(String, String, String)>,
    /// `metadata.labels`.
    pub labels: std::collections::BTreeMap<String, String>,
    /// `status.addresses[]` of type InternalIP or ExternalIP that parse as IP addresses.
    pub addresses: Vec<std::net::IpAddr>,
}

impl NodeFacts {
    /// A control-plane node (kubeadm's role label or taint).
    pub fn is_control_plane(&self) -> bool {
        [
            "node-role.kubernetes.io/control-plane",
            "node-role.kubernetes.io/master",
        ]
        .iter()
        .any(|k| self.labels.contains_key(*k) || self.taints.iter().any(|t| t.0 == *k))
    }
}

/// A vSphere cloud controller manager workload found beside the Nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpiWorkload {
    /// `<kind>/<namespace>/<name>`.
    pub name: String,
    /// `status.numberReady` (DaemonSet) or `status.readyReplicas` (Deployment), when given.
    pub ready: Option<u64>,
}

/// The `--nodes` input: the Nodes (`kubectl get nodes -o yaml`) and any vSphere CPI
/// workload saved with them (`kubectl get nodes,ds,deploy -A -o yaml`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodesInput {
    /// Every Node, in file order.
    pub nodes: Vec<NodeFacts>,
    /// vSphere CPI DaemonSets or Deployments.
    pub cpi: Vec<CpiWorkload>,
}

/// The most Nodes read from one file (a bound on untrusted input; fleets are far smaller).
const MAX_NODES: usize = 10_000;

/// Reads the Nodes (and a vSphere CPI workload, if present) from the documents of `file`:
/// `Node` documents, or `List`/`NodeList` items. Anything else is skipped; no Node at all
/// is an error naming what was found.
pub fn find_nodes(file: &str, docs: Vec<Value>) -> Result<NodesInput, CheckError> {
    let mut input = NodesInput::default();
    let mut kinds = Vec::new();
    let listed = crate::resource::list_items(docs);
    kinds.extend(
        listed
            .malformed
            .iter()
            .map(|k| format!("{k} without items")),
    );
    for (index, (kind, item)) in listed.objects.iter().enumerate() {
        let kind = kind.as_str();
        match kind {
            "Node" => {
                if input.nodes.len() >= MAX_NODES {
                    return Err(CheckError::Nodes {
                        file: file.to_string(),
                        problem: format!("more than {MAX_NODES} Nodes"),
                    });
                }
                input.nodes.push(node_facts(file, index, item)?);
            }
            "DaemonSet" | "Deployment" if is_vsphere_cpi(item) => {
                let name = |p: &str| {
                    item.pointer(p)
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                        .to_string()
                };
                let ready = if kind == "DaemonSet" {
                    "/status/numberReady"
                } else {
                    "/status/readyReplicas"
                };
                input.cpi.push(CpiWorkload {
                    name: format!(
                        "{kind}/{}/{}",
                        name("/metadata/namespace"),
                        name("/metadata/name")
                    ),
                    ready: item.pointer(ready).and_then(Value::as_u64).or_else(|| {
                        // A workload with a status but no ready count has none ready.
                        item.get("status").map(|_| 0)
                    }),
                });
            }
            other => {
                let k = if other.is_empty() { "(no kind)" } else { other };
                if !kinds.iter().any(|x| x == k) {
                    kinds.push(k.to_string());
                }
            }
        }
    }
    if input.nodes.is_empty() {
        return Err(CheckError::Nodes {
            file: file.to_string(),
            problem: format!(
                "no Node found (found {}); expected `kubectl get nodes -o yaml`",
                if kinds.is_empty() {
                    "nothing".to_string()
                } else {
                    kinds.join(", ")
                }
            ),
        });
    }
    Ok(input)
}

fn node_facts(file: &str, index: usize, item: &Value) -> Result<NodeFacts, CheckError> {
    let bad = |field: &str, expected: &str| CheckError::Nodes {
        file: file.to_string(),
        problem: format!("Node #{} {field}: expected {expected}", index + 1),
    };
    let name = item
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("metadata.name", "a string"))?
        .to_string();
    let provider_id = match item.pointer("/spec/providerID") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(bad("spec.providerID", "a string")),
    };
    let taints = match item.pointer("/spec/taints") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(ts)) => ts
            .iter()
            .map(|t| {
                let s = |k: &str| t.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                t.get("key")
                    .and_then(Value::as_str)
                    .map(|k| (k.to_string(), s("value"), s("effect")))
                    .ok_or_else(|| bad("spec.taints[].key", "a string"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad("spec.taints", "a list")),
    };
    let labels = match item.pointer("/metadata/labels") {
        None | Some(Value::Null) => Default::default(),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(v) => Ok((k.clone(), v.clone())),
                _ => Err(bad(&format!("metadata.labels.{k}"), "a string")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad("metadata.labels", "a map")),
    };
    // Addresses that are not IPs (a Hostname entry) or of another type are not compared.
    let addresses = item
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|a| {
            matches!(
                a.get("type").and_then(Value::as_str),
                Some("InternalIP" | "ExternalIP")
            )
        })
        .filter_map(|a| a.get("address")?.as_str()?.parse().ok())
        .collect();
    Ok(NodeFacts {
        name,
        provider_id,
        taints,
        labels,
        addresses,
    })
}

/// A DaemonSet or Deployment running the vSphere cloud controller manager
/// (`kubernetes/cloud-provider-vsphere`, image `…/cloud-provider-vsphere/cpi/…:…` or
/// `…/vsphere-cloud-controller-manager:…`).
fn is_vsphere_cpi(item: &Value) -> bool {
    let Some(Value::Array(containers)) = item.pointer("/spec/template/spec/containers") else {
        return false;
    };
    containers.iter().any(|c| {
        c.get("image").and_then(Value::as_str).is_some_and(|i| {
            i.contains("cloud-provider-vsphere") || i.contains("vsphere-cloud-controller-manager")
        })
    })
}

/// At most this many node names in a summary.
const SHOWN: usize = 5;

fn names(nodes: &[&NodeFacts]) -> String {
    let mut s = nodes
        .iter()
        .take(SHOWN)
        .map(|n| n.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    if nodes.len() > SHOWN {
        s.push_str(&format!(" and {} more", nodes.len() - SHOWN));
    }
    s
}

/// An IPAM pool of the render (`InClusterIPPool`): the addresses the provider hands out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolFacts {
    /// `<kind> <name>`.
    pub name: String,
    /// The addresses, lowest first, or why they cannot be listed.
    pub addresses: Result<Vec<std::net::IpAddr>, String>,
}

impl Cx<'_> {
    /// D14: the in-cluster IPAM provider hands out the lowest address free in its own books,
    /// without probing the wire (cluster-api-ipam-provider-in-cluster v1.0.3
    /// `internal/poolutil/pool.go:86-100` `FindFreeAddress`; `src/rehearse/assumptions.md`
    /// A20, A23), so an address a running node holds must not be in any pool the machines
    /// take addresses from; nor may the VIP.
    pub(super) fn addresses_in_use(&self, out: &mut Vec<Finding>) {
        let id = "addresses-in-use";
        let Some(n) = &self.i.nodes else {
            out.push(not_compared(
                id,
                "the IPAM pools and spec.endpoint.vip",
                "the running nodes' addresses",
                "--nodes",
            ));
            return;
        };
        let field = format!(
            "the IPAM pools and spec.endpoint.vip vs {} status.addresses",
            n.file
        );
        let mut held: Vec<String> = Vec::new();
        let mut unknown: Vec<String> = Vec::new();
        let mut sets: Vec<(String, std::collections::BTreeSet<std::net::IpAddr>)> = Vec::new();
        for p in &self.i.pools {
            match &p.addresses {
                Ok(a) => sets.push((p.name.clone(), a.iter().copied().collect())),
                Err(e) => unknown.push(format!("{}: {e}", p.name)),
            }
        }
        if let Some(v) = self.i.config.spec.endpoint.active_vip() {
            if let Ok(a) = v.address.parse::<std::net::IpAddr>() {
                sets.push(("the VIP (spec.endpoint.vip.address)".into(), [a].into()));
            }
        }
        for node in &n.value.nodes {
            for a in &node.addresses {
                for (pool, set) in &sets {
                    if set.contains(a) {
                        held.push(format!("node `{}` holds {a}, in {pool}", node.name));
                    }
                }
            }
        }
        if held.is_empty() {
            let compared = match (sets.is_empty(), unknown.is_empty()) {
                (true, true) => "an IPAM pool or the VIP (the render has neither)".to_string(),
                (true, false) => "a pool listed".to_string(),
                (false, _) => sets
                    .iter()
                    .map(|(p, _)| p.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            };
            let summary = format!(
                "no address of the {} running nodes is in {compared}",
                n.value.nodes.len()
            );
            if unknown.is_empty() {
                out.push(Finding::new(id, Severity::Pass, field, summary));
            } else {
                out.push(
                    Finding::new(
                        id,
                        Severity::Info,
                        field,
                        format!("{summary}; not compared: {}", unknown.join("; ")),
                    )
                    .fix(
                        "run check again once the cluster renders, or compare the pools' addresses with \
                         `kubectl get nodes -o wide` by hand",
                    ),
                );
            }
            return;
        }
        out.push(
            Finding::new(
                id,
                Severity::Blocking,
                field,
                format!(
                    "{}: the IPAM provider books addresses without probing the wire and hands out the lowest free \
                     one, so a new machine would take a running node's address (a duplicate IP on the segment)",
                    held.join("; ")
                ),
            )
            .fix(
                "exclude the addresses from the pool (`excludedAddresses` on the InClusterIPPool, or smaller \
                 `addresses`), or choose a VIP no node holds",
            ),
        );
    }

    /// `cloud-provider`: the vSphere CPI initialises nodes, so Talos nodes get the
    /// `vsphere://` providerID Cluster API matches Machines by.
    pub(super) fn cloud_provider(&self, out: &mut Vec<Finding>) {
        let id = "cloud-provider";
        let Some(n) = &self.i.nodes else {
            out.push(not_compared(
                id,
                "Node spec.providerID",
                "the vSphere cloud provider (`vsphere://` providerIDs)",
                "--nodes",
            ));
            return;
        };
        let field = format!("{} spec.providerID", n.file);
        let nodes = &n.value.nodes;
        let vsphere: Vec<&NodeFacts> = nodes
            .iter()
            .filter(|x| {
                x.provider_id
                    .as_deref()
                    .is_some_and(|p| p.starts_with(VSPHERE_PROVIDER_ID))
            })
            .collect();
        let foreign: Vec<&NodeFacts> = nodes
            .iter()
            .filter(|x| {
                x.provider_id
                    .as_deref()
                    .is_some_and(|p| !p.starts_with(VSPHERE_PROVIDER_ID))
            })
            .collect();
        let uninitialized: Vec<&NodeFacts> = nodes
            .iter()
            .filter(|x| x.taints.iter().any(|t| t.0 == UNINITIALIZED_TAINT))
            .collect();
        let server = self
            .i
            .config
            .spec
            .vsphere
            .as_ref()
            .map(|v| {
                format!(
                    " for vCenter `{}` (datacenter `{}`)",
                    v.server, v.datacenter
                )
            })
            .unwrap_or_default();
        let install = format!(
            "install the vSphere cloud controller manager (kubernetes/cloud-provider-vsphere, the release for \
             Kubernetes {}){server}, tolerating `{UNINITIALIZED_TAINT}`, and check again with its DaemonSet \
             saved beside the Nodes (`kubectl get nodes -o yaml; echo ---; kubectl -n kube-system get ds \
             vsphere-cloud-controller-manager -o yaml`)",
            self.i.config.spec.versions.kubernetes
        );
        let consequence = "Talos nodes run kubelet `--cloud-provider=external` (capstan renders \
             `cluster.externalCloudProvider.enabled: true`), register tainted `node.cloudprovider.kubernetes.io/uninitialized` \
             and get no providerID without it; Cluster API matches Nodes to Machines only by providerID, so Machines \
             never get a nodeRef and rollouts, scale-down and the migration's own checks wait forever";
        if !foreign.is_empty() {
            let schemes: Vec<String> = foreign
                .iter()
                .filter_map(|x| x.provider_id.as_deref())
                .map(|p| p.split("://").next().unwrap_or(p).to_string())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            out.push(
                Finding::new(
                    id,
                    Severity::Blocking,
                    field,
                    format!(
                        "{} of {} nodes carry a providerID that is not `{VSPHERE_PROVIDER_ID}` (scheme {}: {}): CAPV \
                         gives each Machine `{VSPHERE_PROVIDER_ID}<BIOS UUID>`, so another cloud provider's IDs \
                         never match and Machines never get a nodeRef",
                        foreign.len(),
                        nodes.len(),
                        schemes.join(", "),
                        names(&foreign)
                    ),
                )
                .fix(format!(
                    "run the vSphere cloud controller manager as the cluster's only cloud provider; {install}"
                )),
            );
            return;
        }
        if !uninitialized.is_empty() {
            out.push(
                Finding::new(
                    id,
                    Severity::Blocking,
                    field.replace("spec.providerID", "spec.taints"),
                    format!(
                        "{} of {} nodes are still tainted `{UNINITIALIZED_TAINT}` ({}): no cloud controller manager \
                         initialises nodes, and every Talos node would stay so — {consequence}",
                        uninitialized.len(),
                        nodes.len(),
                        names(&uninitialized)
                    ),
                )
                .fix(format!(
                    "{install}; it then initialises the tainted nodes (check its logs if they stay tainted)"
                )),
            );
            return;
        }
        if !vsphere.is_empty() {
            let rest = nodes.len() - vsphere.len();
            out.push(Finding::new(
                id,
                Severity::Pass,
                field,
                format!(
                    "{} of {} nodes carry a `{VSPHERE_PROVIDER_ID}` providerID: the vSphere CPI runs and initialises \
                     the Talos nodes (kubelet `--cloud-provider=external`), which then match their Machines{}",
                    vsphere.len(),
                    nodes.len(),
                    if rest == 0 {
                        String::new()
                    } else {
                        format!(
                            " ({rest} kubeadm node{} joined before it and carr{} none: harmless, Cluster API does not manage them)",
                            if rest == 1 { "" } else { "s" },
                            if rest == 1 { "ies" } else { "y" }
                        )
                    }
                ),
            ));
            return;
        }
        cpi_status(out, &n.value, field, install, consequence);
    }
}

/// `cloud-provider` when no node carries a providerID yet: whether the vSphere CPI runs,
/// from its saved workload.
fn cpi_status(out: &mut Vec<Finding>, n: &NodesInput, field: String, install: String, consequence: &str) {
    let id = "cloud-provider";
    let ready: Vec<&CpiWorkload> = n
        .cpi
        .iter()
        .filter(|w| w.ready.is_some_and(|r| r > 0))
        .collect();
    let unknown = n.cpi.iter().find(|w| w.ready.is_none());
    if let (None, Some(w)) = (ready.first(), unknown) {
        out.push(
            Finding::new(
                id,
                Severity::Warning,
                field,
                format!(
                    "no node carries a providerID yet and the vSphere CPI ({}) was saved without its status, so \
                     whether it runs is not known",
                    w.name
                ),
            )
            .fix("save it with its status (`kubectl -n kube-system get ds vsphere-cloud-controller-manager -o yaml`) and check again"),
        );
        return;
    }
    if let Some(w) = ready.first() {
        out.push(Finding::new(
            id,
            Severity::Pass,
            field,
            format!(
                "no node carries a providerID yet (the kubeadm kubelets run without `--cloud-provider=external`), \
                 but the vSphere CPI runs ({}): it initialises the Talos nodes, which register with \
                 `--cloud-provider=external`",
                w.name
            ),
        ));
        return;
    }
    let summary = match n.cpi.first() {
        Some(w) => format!(
            "none of the {} nodes carries a `{VSPHERE_PROVIDER_ID}` providerID and the vSphere CPI ({}) has no ready \
             pod: {consequence}",
            n.nodes.len(),
            w.name
        ),
        None => format!(
            "none of the {} nodes carries a `{VSPHERE_PROVIDER_ID}` providerID and no vSphere CPI workload was given: \
             {consequence}",
            n.nodes.len()
        ),
    };
    out.push(Finding::new(id, Severity::Blocking, field, summary).fix(install));
}

/// A label of a kubeadm worker a pool must carry: not one of the labels Kubernetes, the
/// kubelet or a cloud provider set themselves (the `kubernetes.io`/`k8s.io` domains), except
/// the role labels admins set (`node-role.kubernetes.io/*`).
fn significant_label(key: &str) -> bool {
    use crate::model::{kubernetes_label, label_route, LabelRoute};
    !kubernetes_label(key) || label_route(key) == LabelRoute::Machine
}

/// A taint a pool must carry: not the conditions Kubernetes, cloud providers and the
/// autoscaler set and clear themselves.
fn significant_taint(key: &str) -> bool {
    !(key.starts_with("node.kubernetes.io/")
        || key.starts_with("node.cloudprovider.kubernetes.io/")
        || key == "ToBeDeletedByClusterAutoscaler"
        || key == "DeletionCandidateOfClusterAutoscaler")
}

impl Cx<'_> {
    /// `node-labels` (M7): every kubeadm worker's own labels and taints are those of a worker
    /// pool, so what schedules on it today schedules on the Talos nodes that replace it.
    pub(super) fn node_labels(&self, out: &mut Vec<Finding>) {
        let id = "node-labels";
        let Some(n) = &self.i.nodes else {
            out.push(not_compared(
                id,
                "spec.workers[].labels, spec.workers[].taints",
                "the kubeadm workers' labels and taints",
                "--nodes",
            ));
            return;
        };
        let pools = &self.i.config.spec.workers;
        let field = format!(
            "spec.workers[].labels, spec.workers[].taints vs {} metadata.labels, spec.taints",
            n.file
        );
        let workers: Vec<&NodeFacts> = n
            .value
            .nodes
            .iter()
            .filter(|x| !x.is_control_plane())
            .collect();
        if workers.is_empty() || pools.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Info,
                field,
                if workers.is_empty() {
                    "no kubeadm worker node in the file: nothing to compare".into()
                } else {
                    "no worker pool declared yet: the kubeadm workers' labels and taints were not compared".into()
                },
            ));
            return;
        }
        type Signature = (Vec<(String, String)>, Vec<(String, String, String)>);
        let mut unmatched: std::collections::BTreeMap<Signature, Vec<&str>> = Default::default();
        for node in &workers {
            let labels: Vec<(String, String)> = node
                .labels
                .iter()
                .filter(|(k, _)| significant_label(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let mut taints: Vec<(String, String, String)> = node
                .taints
                .iter()
                .filter(|t| significant_taint(&t.0))
                .cloned()
                .collect();
            taints.sort();
            let fits = pools.iter().any(|p| {
                let mut pool_taints: Vec<(String, String, String)> = p
                    .taints
                    .iter()
                    .map(|t| {
                        (
                            t.key.clone(),
                            t.value.clone(),
                            t.effect.as_str().to_string(),
                        )
                    })
                    .collect();
                pool_taints.sort();
                labels.iter().all(|(k, v)| p.labels.get(k) == Some(v)) && pool_taints == taints
            });
            if !fits {
                unmatched
                    .entry((labels, taints))
                    .or_default()
                    .push(&node.name);
            }
        }
        if unmatched.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Pass,
                field,
                format!(
                    "the labels and taints of each of the {} kubeadm workers are those of a worker pool",
                    workers.len()
                ),
            ));
            return;
        }
        let groups: Vec<String> = unmatched
            .iter()
            .take(SHOWN)
            .map(|((labels, taints), nodes)| {
                let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                let t: Vec<String> = taints
                    .iter()
                    .map(|(k, v, e)| {
                        if v.is_empty() {
                            format!("{k}:{e}")
                        } else {
                            format!("{k}={v}:{e}")
                        }
                    })
                    .collect();
                format!(
                    "{} ({}): labels [{}], taints [{}]",
                    nodes
                        .iter()
                        .take(SHOWN)
                        .copied()
                        .collect::<Vec<_>>()
                        .join(", "),
                    nodes.len(),
                    l.join(", "),
                    t.join(", ")
                )
            })
            .collect();
        let example = unmatched.keys().next().map(|(labels, taints)| {
            let l: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}: \"{v}\""))
                .collect();
            let t: Vec<String> = taints
                .iter()
                .map(|(k, v, e)| {
                    if v.is_empty() {
                        format!("{{key: {k}, effect: {e}}}")
                    } else {
                        format!("{{key: {k}, value: \"{v}\", effect: {e}}}")
                    }
                })
                .collect();
            format!("labels: {{{}}}, taints: [{}]", l.join(", "), t.join(", "))
        });
        out.push(
            Finding::new(
                id,
                Severity::Blocking,
                field,
                format!(
                    "kubeadm workers whose own labels and taints no worker pool gives its Talos nodes: {}. Pods that \
                     select these labels would not schedule on the Talos workers that replace them, and pods that do \
                     not tolerate these taints would land where they never ran",
                    groups.join("; ")
                ),
            )
            .fix(format!(
                "give the pool that replaces them the same labels and taints in cluster.yaml, e.g. `{}` \
                 (`node-role.kubernetes.io/*` reach the Node through the Machine, the others through Talos)",
                example.unwrap_or_default()
            )),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, provider_id: Option<&str>, taints: &[&str]) -> Value {
        let mut n =
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {}});
        if let Some(p) = provider_id {
            n["spec"]["providerID"] = json!(p);
        }
        if !taints.is_empty() {
            n["spec"]["taints"] = json!(taints
                .iter()
                .map(|k| json!({"key": k, "effect": "NoSchedule"}))
                .collect::<Vec<_>>());
        }
        n
    }

    #[test]
    fn reads_a_typed_node_list_whose_items_have_no_kind() {
        // The API server's NodeList (`kubectl get --raw /api/v1/nodes`) leaves out the items' kind.
        let mut n = node("w-9", None, &[]);
        n.as_object_mut().unwrap().remove("kind");
        let list = json!({"apiVersion": "v1", "kind": "NodeList", "items": [n]});
        let got = find_nodes("nodes.yaml", vec![list]).unwrap();
        assert_eq!(got.nodes.len(), 1);
        assert_eq!(got.nodes[0].name, "w-9");
    }

    #[test]
    fn reads_nodes_from_lists_and_documents() {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": [
            node("cp-1", Some("vsphere://4237-aa"), &[]),
            node("w-1", None, &[UNINITIALIZED_TAINT]),
        ]});
        let cpi = json!({"kind": "DaemonSet", "metadata": {"name": "vsphere-cloud-controller-manager", "namespace": "kube-system"},
            "spec": {"template": {"spec": {"containers": [{"name": "cpi", "image": "registry.k8s.io/cloud-pv-vsphere/cloud-provider-vsphere:v1.30.1"}]}}},
            "status": {"numberReady": 3}});
        let got = find_nodes("nodes.yaml", vec![list, node("w-2", None, &[]), cpi]).unwrap();
        assert_eq!(
            got.nodes
                .iter()
                .map(|n| n.name.as_str())
                .collect::<Vec<_>>(),
            ["cp-1", "w-1", "w-2"]
        );
        assert_eq!(
            got.nodes[0].provider_id.as_deref(),
            Some("vsphere://4237-aa")
        );
        assert_eq!(got.nodes[1].taints[0].0, UNINITIALIZED_TAINT);
        assert_eq!(
            got.cpi,
            [CpiWorkload {
                name: "DaemonSet/kube-system/vsphere-cloud-controller-manager".into(),
                ready: Some(3)
            }]
        );
    }

    #[test]
    fn only_labels_and_taints_people_set_are_compared() {
        for (key, significant) in [
            ("example.com/tier", true),
            ("tier", true),
            ("node-role.kubernetes.io/ingress", true),
            ("node-restriction.kubernetes.io/pci", true),
            ("kubernetes.io/hostname", false),
            ("topology.kubernetes.io/zone", false),
            ("node.kubernetes.io/instance-type", false),
            ("feature.node.kubernetes.io/cpu-cpuid.AVX", false),
        ] {
            assert_eq!(significant_label(key), significant, "{key}");
        }
        for (key, significant) in [
            ("dedicated", true),
            ("node.kubernetes.io/unschedulable", false),
            (UNINITIALIZED_TAINT, false),
            ("ToBeDeletedByClusterAutoscaler", false),
        ] {
            assert_eq!(significant_taint(key), significant, "{key}");
        }
    }

    #[test]
    fn refuses_files_without_nodes_and_malformed_nodes() {
        let e = find_nodes("x.yaml", vec![json!({"kind": "ConfigMap"})]).unwrap_err();
        assert!(
            e.to_string()
                .contains("x.yaml: no Node found (found ConfigMap)"),
            "{e}"
        );
        let e = find_nodes("x.yaml", vec![]).unwrap_err();
        assert!(e.to_string().contains("found nothing"), "{e}");
        let mut bad = node("a", None, &[]);
        bad["spec"]["providerID"] = json!(7);
        let e = find_nodes("x.yaml", vec![bad]).unwrap_err();
        assert!(
            e.to_string()
                .contains("x.yaml: Node #1 spec.providerID: expected a string"),
            "{e}"
        );
        let mut bad = node("a", None, &[]);
        bad["spec"]["taints"] = json!({"key": "k"});
        assert!(find_nodes("x.yaml", vec![bad]).is_err());
        let e = find_nodes("x.yaml", vec![json!({"kind": "Node", "metadata": {}})]).unwrap_err();
        assert!(e.to_string().contains("metadata.name"), "{e}");
    }
}
