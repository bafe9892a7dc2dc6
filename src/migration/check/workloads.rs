//! Before the worker phase: what the kubeadm workers (`spec.migration.kubeadm.workerNodes`)
//! run, read from the live PersistentVolumes, PodDisruptionBudgets and Pods (`kubectl get
//! pv,pdb,pods -A -o json`, the `--workloads` input), against what draining them needs:
//! volumes pinned to a kubeadm worker (`worker-local-volumes`), Pods no controller recreates
//! (`worker-bare-pods`), budgets that allow no eviction (`worker-pdb-no-disruption`), and
//! Talos pools large enough for what the kubeadm workers run (`worker-pool-capacity`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{not_compared, CheckError, Cx, Finding, Severity};

/// The share of each Talos worker's CPU and memory kept out of the capacity compared with
/// the kubeadm workers' requests: the kubelet's and Talos's system reservation, the
/// eviction threshold and the DaemonSet pods every node runs (their requests are not
/// counted as demand).
pub const CAPACITY_RESERVE_PERCENT: u64 = 20;

/// The most objects read from one `--workloads` file (a bound on untrusted input).
const MAX_OBJECTS: usize = 200_000;

/// At most this many names in a summary.
const SHOWN: usize = 5;

/// A label selector (`matchLabels`, `matchExpressions`), as a PodDisruptionBudget has one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    /// `matchLabels`.
    pub labels: BTreeMap<String, String>,
    /// `matchExpressions`: key, operator, values.
    pub expressions: Vec<(String, String, Vec<String>)>,
}

impl Selector {
    /// Whether `labels` satisfy the selector (an empty selector selects everything; an
    /// unknown operator selects nothing).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.expressions.iter().all(|(k, op, values)| {
                let v = labels.get(k);
                match op.as_str() {
                    "In" => v.is_some_and(|v| values.contains(v)),
                    "NotIn" => v.is_none_or(|v| !values.contains(v)),
                    "Exists" => v.is_some(),
                    "DoesNotExist" => v.is_none(),
                    _ => false,
                }
            })
    }
}

/// A PersistentVolume, as far as the drain needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeFacts {
    /// `metadata.name`.
    pub name: String,
    /// `spec.claimRef` as `namespace/name`.
    pub claim: Option<String>,
    /// The volume source when it lives on one node's disk: `local` or `hostPath`.
    pub on_node: Option<&'static str>,
    /// The node names its required nodeAffinity pins it to (`kubernetes.io/hostname In`,
    /// `metadata.name` field `In`).
    pub pinned_to: Vec<String>,
    /// It has a required nodeAffinity at all.
    pub required_affinity: bool,
}

/// A PodDisruptionBudget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetFacts {
    /// `namespace/name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `spec.selector` (`None`: a null selector, which selects no pod).
    pub selector: Option<Selector>,
    /// `spec.minAvailable` as written (`2`, `"100%"`).
    pub min_available: Option<String>,
    /// `spec.maxUnavailable` as written.
    pub max_unavailable: Option<String>,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: Option<u64>,
    /// `status.expectedPods`.
    pub expected_pods: Option<u64>,
}

/// A Pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodFacts {
    /// `namespace/name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `spec.nodeName`.
    pub node: Option<String>,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// The kind of its controller (`ownerReferences[].controller: true`), if any.
    pub controller: Option<String>,
    /// A static Pod's mirror (`kubernetes.io/config.mirror`): the kubelet runs it.
    pub mirror: bool,
    /// `status.phase` is `Succeeded` or `Failed`: it holds nothing.
    pub finished: bool,
    /// The claims it mounts (`persistentVolumeClaim.claimName`), as `namespace/name`.
    pub claims: Vec<String>,
    /// Its effective requests: CPU in millicores, memory in bytes.
    pub requests: (f64, f64),
}

impl PodFacts {
    /// A Pod the drain moves: not a DaemonSet's (it runs on the Talos workers too), not a
    /// mirror, not finished.
    fn moves(&self) -> bool {
        !self.mirror && !self.finished && self.controller.as_deref() != Some("DaemonSet")
    }
}

/// The `--workloads` input.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WorkloadsInput {
    /// Every PersistentVolume.
    pub volumes: Vec<VolumeFacts>,
    /// Every PodDisruptionBudget.
    pub budgets: Vec<BudgetFacts>,
    /// Every Pod.
    pub pods: Vec<PodFacts>,
}

/// A Kubernetes quantity (`100m`, `1.5`, `512Mi`, `1G`, `2e3`) in base units; `None` when
/// it does not parse.
pub fn quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    let v = number * scale;
    (v.is_finite() && v >= 0.0).then_some(v)
}

/// An int-or-string field as written.
fn int_or_string(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn volume_facts(item: &Value) -> Option<VolumeFacts> {
    let name = item.pointer("/metadata/name")?.as_str()?.to_string();
    let claim = item.pointer("/spec/claimRef").and_then(|c| {
        Some(format!(
            "{}/{}",
            c.get("namespace")?.as_str()?,
            c.get("name")?.as_str()?
        ))
    });
    let on_node = if item.pointer("/spec/local").is_some() {
        Some("local")
    } else if item.pointer("/spec/hostPath").is_some() {
        Some("hostPath")
    } else {
        None
    };
    let terms = item
        .pointer("/spec/nodeAffinity/required/nodeSelectorTerms")
        .and_then(Value::as_array);
    let mut pinned_to = Vec::new();
    for t in terms.into_iter().flatten() {
        for (list, key) in [
            ("matchExpressions", "kubernetes.io/hostname"),
            ("matchFields", "metadata.name"),
        ] {
            for e in t.get(list).and_then(Value::as_array).into_iter().flatten() {
                if e.get("key").and_then(Value::as_str) == Some(key)
                    && e.get("operator").and_then(Value::as_str) == Some("In")
                {
                    pinned_to.extend(strings(e.get("values")));
                }
            }
        }
    }
    Some(VolumeFacts {
        name,
        claim,
        on_node,
        pinned_to,
        required_affinity: terms.is_some_and(|t| !t.is_empty()),
    })
}

fn budget_facts(item: &Value) -> Option<BudgetFacts> {
    let namespace = item.pointer("/metadata/namespace")?.as_str()?.to_string();
    let name = item.pointer("/metadata/name")?.as_str()?;
    let selector = match item.pointer("/spec/selector") {
        None | Some(Value::Null) => None,
        Some(s) => Some(Selector {
            labels: string_map(s.get("matchLabels")),
            expressions: s
                .get("matchExpressions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|e| {
                    (
                        e.get("key").and_then(Value::as_str).unwrap_or("").into(),
                        e.get("operator")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .into(),
                        strings(e.get("values")),
                    )
                })
                .collect(),
        }),
    };
    Some(BudgetFacts {
        name: format!("{namespace}/{name}"),
        namespace,
        selector,
        min_available: int_or_string(item.pointer("/spec/minAvailable")),
        max_unavailable: int_or_string(item.pointer("/spec/maxUnavailable")),
        disruptions_allowed: item
            .pointer("/status/disruptionsAllowed")
            .and_then(Value::as_u64),
        expected_pods: item.pointer("/status/expectedPods").and_then(Value::as_u64),
    })
}

/// The requests of a container list: CPU millicores and memory bytes, summed or the largest.
fn requests(containers: Option<&Value>, sum: bool, only: impl Fn(&Value) -> bool) -> (f64, f64) {
    let mut total = (0.0f64, 0.0f64);
    for c in containers
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| only(c))
    {
        let r = |k: &str| {
            c.pointer(&format!("/resources/requests/{k}"))
                .and_then(Value::as_str)
                .and_then(quantity)
                .unwrap_or(0.0)
        };
        let (cpu, mem) = (r("cpu") * 1000.0, r("memory"));
        total = if sum {
            (total.0 + cpu, total.1 + mem)
        } else {
            (total.0.max(cpu), total.1.max(mem))
        };
    }
    total
}

fn pod_facts(item: &Value) -> Option<PodFacts> {
    let namespace = item.pointer("/metadata/namespace")?.as_str()?.to_string();
    let name = item.pointer("/metadata/name")?.as_str()?;
    let controller = item
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
        .map(|o| {
            o.get("kind")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        });
    let spec = item.get("spec");
    let claims = spec
        .and_then(|s| s.get("volumes"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.pointer("/persistentVolumeClaim/claimName")?.as_str())
        .map(|c| format!("{namespace}/{c}"))
        .collect();
    // Effective requests (the scheduler's): the app containers and restartable init
    // containers (sidecars) together, or the largest other init container if more.
    let sidecar = |c: &Value| c.get("restartPolicy").and_then(Value::as_str) == Some("Always");
    let app = requests(spec.and_then(|s| s.get("containers")), true, |_| true);
    let sidecars = requests(spec.and_then(|s| s.get("initContainers")), true, sidecar);
    let init = requests(spec.and_then(|s| s.get("initContainers")), false, |c| {
        !sidecar(c)
    });
    let running = (app.0 + sidecars.0, app.1 + sidecars.1);
    Some(PodFacts {
        name: format!("{namespace}/{name}"),
        namespace,
        node: item
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(str::to_string),
        labels: string_map(item.pointer("/metadata/labels")),
        controller,
        mirror: item
            .pointer("/metadata/annotations/kubernetes.io~1config.mirror")
            .is_some(),
        finished: matches!(
            item.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        ),
        claims,
        requests: (running.0.max(init.0), running.1.max(init.1)),
    })
}

/// Reads the PersistentVolumes, PodDisruptionBudgets and Pods of `file` (`kubectl get
/// pv,pdb,pods -A -o json`: a `List`, or the objects one by one). Other kinds are skipped;
/// a file with none of the three, or an object without its name, is an error naming it.
pub fn find_workloads(file: &str, docs: Vec<Value>) -> Result<WorkloadsInput, CheckError> {
    let bad = |problem: String| CheckError::Workloads {
        file: file.to_string(),
        problem,
    };
    let listed = crate::resource::list_items(docs);
    if listed.objects.len() > MAX_OBJECTS {
        return Err(bad(format!("more than {MAX_OBJECTS} objects")));
    }
    let mut input = WorkloadsInput::default();
    let mut kinds: BTreeSet<String> = listed
        .malformed
        .iter()
        .map(|k| format!("{k} without items"))
        .collect();
    for (index, (kind, item)) in listed.objects.iter().enumerate() {
        let missing = |what: &str| bad(format!("{kind} #{}: expected {what}", index + 1));
        match kind.as_str() {
            "PersistentVolume" => input
                .volumes
                .push(volume_facts(item).ok_or_else(|| missing("metadata.name"))?),
            "PodDisruptionBudget" => input.budgets.push(
                budget_facts(item)
                    .ok_or_else(|| missing("metadata.name and metadata.namespace"))?,
            ),
            "Pod" => input.pods.push(
                pod_facts(item).ok_or_else(|| missing("metadata.name and metadata.namespace"))?,
            ),
            other => {
                kinds.insert(if other.is_empty() {
                    "(no kind)".into()
                } else {
                    other.into()
                });
            }
        }
    }
    if input.volumes.is_empty() && input.budgets.is_empty() && input.pods.is_empty() {
        return Err(bad(format!(
            "no PersistentVolume, PodDisruptionBudget or Pod found (found {}); expected `kubectl get pv,pdb,pods -A -o json`",
            if kinds.is_empty() {
                "nothing".to_string()
            } else {
                kinds.into_iter().collect::<Vec<_>>().join(", ")
            }
        )));
    }
    Ok(input)
}

fn names<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let all: Vec<&str> = items.into_iter().collect();
    let mut s = all
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if all.len() > SHOWN {
        s.push_str(&format!(" and {} more", all.len() - SHOWN));
    }
    s
}

/// Why a budget allows no eviction, if it does not: `maxUnavailable: 0`, `minAvailable`
/// equal to its pods (or 100%), or no disruption allowed now while it has pods.
fn no_disruption(b: &BudgetFacts, pods: u64) -> Option<String> {
    let zero = |v: &str| matches!(v.trim(), "0" | "0%");
    if let Some(m) = b.max_unavailable.as_deref().filter(|m| zero(m)) {
        return Some(format!("maxUnavailable: {m}"));
    }
    if let Some(m) = b.min_available.as_deref() {
        let expected = b.expected_pods.unwrap_or(pods);
        if m.trim() == "100%"
            || (expected > 0 && m.trim().parse::<u64>().is_ok_and(|n| n >= expected))
        {
            return Some(format!("minAvailable: {m} with {expected} pod(s)"));
        }
    }
    match (b.disruptions_allowed, b.expected_pods) {
        (Some(0), Some(n)) if n > 0 => Some(format!(
            "status.disruptionsAllowed: 0 with {n} pod(s) (a pod unhealthy now, or a budget as tight as its pods)"
        )),
        _ => None,
    }
}

impl Cx<'_> {
    /// The kubeadm workers still listed in cluster.yaml.
    fn kubeadm_workers(&self) -> BTreeSet<&str> {
        self.i
            .config
            .spec
            .migration
            .as_ref()
            .map(|m| m.kubeadm.worker_nodes.iter().map(String::as_str).collect())
            .unwrap_or_default()
    }

    /// Whether the `--workloads` findings have something to compare; pushes the Info
    /// finding when not.
    fn workloads_input(
        &self,
        id: &'static str,
        field: &str,
        what: &str,
        out: &mut Vec<Finding>,
    ) -> Option<&WorkloadsInput> {
        let Some(w) = &self.i.workloads else {
            out.push(not_compared(id, field, what, "--workloads"));
            return None;
        };
        Some(&w.value)
    }

    fn workloads_file(&self) -> &str {
        self.i.workloads.as_ref().map_or("", |w| w.file.as_str())
    }

    /// `worker-local-volumes`: no PersistentVolume is pinned to a kubeadm worker (a `local`
    /// or `hostPath` volume, or a required nodeAffinity naming the node): once the node is
    /// drained and removed, its pod never schedules again and the data goes with the VM.
    pub(super) fn worker_local_volumes(&self, out: &mut Vec<Finding>) {
        let id = "worker-local-volumes";
        let Some(w) = self.workloads_input(
            id,
            "PersistentVolume spec.nodeAffinity",
            "volumes pinned to the kubeadm workers",
            out,
        ) else {
            return;
        };
        let field = format!(
            "{} PersistentVolume spec.nodeAffinity vs spec.migration.kubeadm.workerNodes",
            self.workloads_file()
        );
        let workers = self.kubeadm_workers();
        if workers.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Info,
                field,
                "no kubeadm worker listed in spec.migration.kubeadm.workerNodes: no volume to move"
                    .into(),
            ));
            return;
        }
        // The claims mounted by pods on the kubeadm workers.
        let mounted: BTreeMap<&str, &str> = w
            .pods
            .iter()
            .filter(|p| !p.finished)
            .filter_map(|p| Some((p.node.as_deref()?, p)))
            .filter(|(n, _)| workers.contains(n))
            .flat_map(|(n, p)| p.claims.iter().map(move |c| (c.as_str(), n)))
            .collect();
        let mut pinned: Vec<String> = Vec::new();
        for v in &w.volumes {
            let named = v.pinned_to.iter().find(|n| workers.contains(n.as_str()));
            let used_on = v.claim.as_deref().and_then(|c| mounted.get(c));
            // A volume nothing claims holds no data yet (a local provisioner's spare disk).
            if v.claim.is_none() {
                continue;
            }
            let node = match (named, used_on, v.on_node) {
                (Some(n), _, _) => n.as_str(),
                (None, Some(n), Some(_)) => n,
                _ => continue,
            };
            pinned.push(format!(
                "{} ({}{} on {node})",
                v.name,
                v.on_node.unwrap_or("nodeAffinity"),
                v.claim
                    .as_deref()
                    .map(|c| format!(", claim {c}"))
                    .unwrap_or_default()
            ));
        }
        if pinned.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Pass,
                field,
                format!(
                    "none of the {} PersistentVolumes is pinned to one of the {} kubeadm workers",
                    w.volumes.len(),
                    workers.len()
                ),
            ));
            return;
        }
        out.push(
            Finding::new(
                id,
                Severity::Blocking,
                field,
                format!(
                    "{} PersistentVolume(s) live on a kubeadm worker: {}. Once the node is drained and removed their \
                     pods never schedule again and the data goes with the VM",
                    pinned.len(),
                    names(pinned.iter().map(String::as_str))
                ),
            )
            .error(super::errors::VOLUME_NODE_AFFINITY)
            .fix(
                "move the data before the node is drained: a replicated store (a StatefulSet that resyncs) gets a new \
                 replica on a Talos worker first (delete that replica's PVC and pod once the others are healthy, so it \
                 is recreated on a volume the Talos workers can mount, e.g. vSphere CSI), anything else is backed up \
                 and restored into such a volume; local volumes on Talos need a local provisioner and a disk of the \
                 pool's own",
            ),
        );
    }

    /// `worker-bare-pods`: no Pod on a kubeadm worker lacks a controller: the drain stops at
    /// it (`cannot delete Pods that declare no controller`), and deleted it never returns.
    pub(super) fn worker_bare_pods(&self, out: &mut Vec<Finding>) {
        let id = "worker-bare-pods";
        let Some(w) = self.workloads_input(
            id,
            "Pod metadata.ownerReferences",
            "Pods without a controller on the kubeadm workers",
            out,
        ) else {
            return;
        };
        let field = format!(
            "{} Pod metadata.ownerReferences on spec.migration.kubeadm.workerNodes",
            self.workloads_file()
        );
        let workers = self.kubeadm_workers();
        if workers.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Info,
                field,
                "no kubeadm worker listed in spec.migration.kubeadm.workerNodes: no Pod to move"
                    .into(),
            ));
            return;
        }
        let bare: Vec<&PodFacts> = w
            .pods
            .iter()
            .filter(|p| {
                p.controller.is_none()
                    && !p.mirror
                    && !p.finished
                    && p.node.as_deref().is_some_and(|n| workers.contains(n))
            })
            .collect();
        if bare.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Pass,
                field,
                format!(
                    "every running Pod on the {} kubeadm workers has a controller that recreates it elsewhere",
                    workers.len()
                ),
            ));
            return;
        }
        out.push(
            Finding::new(
                id,
                Severity::Warning,
                field,
                format!(
                    "{} Pod(s) on the kubeadm workers have no controller: {}. `kubectl drain` stops at them, and \
                     deleted (`--force`) they are gone for good",
                    bare.len(),
                    names(bare.iter().map(|p| p.name.as_str()))
                ),
            )
            .error(super::errors::DRAIN_UNMANAGED)
            .fix(
                "before the drain, recreate each under a controller (a Deployment, StatefulSet or Job), or delete it \
                 deliberately once its owner agrees; never drain with `--force`",
            ),
        );
    }

    /// `worker-pdb-no-disruption`: no PodDisruptionBudget over the kubeadm workers' Pods
    /// allows no eviction: `kubectl drain` (Eviction API) then waits until its timeout, and
    /// Cluster API's drains (no timeout by default) wait for ever.
    pub(super) fn worker_pdb_no_disruption(&self, out: &mut Vec<Finding>) {
        let id = "worker-pdb-no-disruption";
        let Some(w) = self.workloads_input(
            id,
            "PodDisruptionBudget spec.minAvailable, spec.maxUnavailable",
            "PodDisruptionBudgets that allow no eviction",
            out,
        ) else {
            return;
        };
        let field = format!(
            "{} PodDisruptionBudget spec.minAvailable, spec.maxUnavailable, status.disruptionsAllowed",
            self.workloads_file()
        );
        let workers = self.kubeadm_workers();
        let (mut on_kubeadm, mut elsewhere) = (Vec::new(), Vec::new());
        for b in &w.budgets {
            let covered: Vec<&PodFacts> = w
                .pods
                .iter()
                .filter(|p| {
                    p.namespace == b.namespace
                        && !p.finished
                        && b.selector.as_ref().is_some_and(|s| s.matches(&p.labels))
                })
                .collect();
            let Some(why) = no_disruption(b, covered.len() as u64) else {
                continue;
            };
            let kubeadm: Vec<&str> = covered
                .iter()
                .filter_map(|p| p.node.as_deref())
                .filter(|n| workers.contains(n))
                .collect();
            let entry = format!("{} ({why})", b.name);
            if kubeadm.is_empty() {
                elsewhere.push(entry);
            } else {
                on_kubeadm.push(format!(
                    "{entry}, pods on {}",
                    names(kubeadm.iter().copied().collect::<BTreeSet<_>>())
                ));
            }
        }
        let fix = "with the workload's owners, before draining: scale it up by one (the new pod starts on a Talos \
                   worker and the budget then allows one eviction), or relax the budget for the move (`maxUnavailable: \
                   1`); a budget at 0 only now clears once its pods are healthy. Never drain with \
                   `--disable-eviction`, which deletes past the budget";
        if !on_kubeadm.is_empty() {
            out.push(
                Finding::new(
                    id,
                    Severity::Blocking,
                    field,
                    format!(
                        "{} PodDisruptionBudget(s) over the kubeadm workers' Pods allow no eviction: {}. `kubectl drain` \
                         retries until its timeout and the node never empties; Cluster API's own drains (no \
                         `spec.deletion.nodeDrainTimeoutSeconds`) wait for ever{}",
                        on_kubeadm.len(),
                        names(on_kubeadm.iter().map(String::as_str)),
                        if elsewhere.is_empty() {
                            String::new()
                        } else {
                            format!(", as for {} more elsewhere", elsewhere.len())
                        }
                    ),
                )
                .error(super::errors::PDB_EVICTION)
                .fix(fix),
            );
        } else if !elsewhere.is_empty() {
            out.push(
                Finding::new(
                    id,
                    Severity::Warning,
                    field,
                    format!(
                        "{} PodDisruptionBudget(s) allow no eviction: {}. None covers a Pod on a kubeadm worker, but \
                         every later drain of their nodes (a rollout, a scale-down, a remediation) waits for them: \
                         Cluster API without `spec.deletion.nodeDrainTimeoutSeconds` waits for ever, with one deletes \
                         the machine anyway once it passes",
                        elsewhere.len(),
                        names(elsewhere.iter().map(String::as_str))
                    ),
                )
                .error(super::errors::PDB_EVICTION)
                .fix(fix),
            );
        } else {
            out.push(Finding::new(
                id,
                Severity::Pass,
                field,
                format!(
                    "each of the {} PodDisruptionBudgets allows an eviction now",
                    w.budgets.len()
                ),
            ));
        }
    }

    /// `worker-pool-capacity`: the Talos pools (`numCPUs`, `memoryMiB` × `replicas`, less
    /// [`CAPACITY_RESERVE_PERCENT`]) hold the requests of every Pod the kubeadm workers run
    /// (DaemonSet, mirror and finished Pods left out), and the largest such Pod fits one
    /// machine of some pool.
    pub(super) fn worker_pool_capacity(&self, out: &mut Vec<Finding>) {
        let id = "worker-pool-capacity";
        let Some(w) = self.workloads_input(
            id,
            "spec.workers[].machine, spec.workers[].replicas",
            "the Talos pools' capacity for the kubeadm workers' Pods",
            out,
        ) else {
            return;
        };
        let field = format!(
            "spec.workers[].machine.numCPUs, memoryMiB × replicas vs {} Pod spec.containers[].resources.requests",
            self.workloads_file()
        );
        let workers = self.kubeadm_workers();
        let moving: Vec<&PodFacts> = w
            .pods
            .iter()
            .filter(|p| p.moves() && p.node.as_deref().is_some_and(|n| workers.contains(n)))
            .collect();
        if workers.is_empty() || moving.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Info,
                field,
                if workers.is_empty() {
                    "no kubeadm worker listed in spec.migration.kubeadm.workerNodes: nothing to move".into()
                } else {
                    "no Pod to move runs on the kubeadm workers".into()
                },
            ));
            return;
        }
        let keep = (100 - CAPACITY_RESERVE_PERCENT) as f64 / 100.0;
        let mib = 1024.0 * 1024.0;
        let pools = &self.i.config.spec.workers;
        let (cpu, mem) = pools.iter().fold((0.0, 0.0), |(c, m), p| {
            (
                c + f64::from(p.machine.num_cpus) * 1000.0 * f64::from(p.replicas) * keep,
                m + (p.machine.memory_mib as f64) * mib * f64::from(p.replicas) * keep,
            )
        });
        let (need_cpu, need_mem) = moving
            .iter()
            .fold((0.0, 0.0), |(c, m), p| (c + p.requests.0, m + p.requests.1));
        let one = pools.iter().fold((0.0f64, 0.0f64), |(c, m), p| {
            (
                c.max(f64::from(p.machine.num_cpus) * 1000.0 * keep),
                m.max((p.machine.memory_mib as f64) * mib * keep),
            )
        });
        let too_big: Vec<&PodFacts> = moving
            .iter()
            .copied()
            .filter(|p| p.requests.0 > one.0 || p.requests.1 > one.1)
            .collect();
        let show = |millis: f64, bytes: f64| {
            format!("{:.1} CPUs and {:.0} MiB", millis / 1000.0, bytes / mib)
        };
        let summary = format!(
            "the {} Pods to move from the {} kubeadm workers request {}; the Talos pools offer {} ({}% of each \
             machine kept for the kubelet, Talos, eviction thresholds and DaemonSets)",
            moving.len(),
            workers.len(),
            show(need_cpu, need_mem),
            show(cpu, mem),
            CAPACITY_RESERVE_PERCENT
        );
        if need_cpu > cpu || need_mem > mem || !too_big.is_empty() {
            let mut s = summary;
            if need_cpu > cpu || need_mem > mem {
                s.push_str(": the evicted Pods would stay Pending");
            }
            if !too_big.is_empty() {
                s.push_str(&format!(
                    "; {} Pod(s) request more than one machine of any pool offers ({}): {}",
                    too_big.len(),
                    show(one.0, one.1),
                    names(too_big.iter().map(|p| p.name.as_str()))
                ));
            }
            out.push(
                Finding::new(id, Severity::Blocking, field, s)
                    .error(super::errors::INSUFFICIENT)
                    .fix(
                        "raise the pools' `replicas` or their machines' `numCPUs`/`memoryMiB` (or the autoscaler's \
                         maximum) before draining the kubeadm workers, and add the Pods already running on Talos \
                         workers to the sum",
                    ),
            );
        } else {
            out.push(Finding::new(id, Severity::Pass, field, summary));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_in_base_units() {
        for (q, want) in [
            ("100m", Some(0.1)),
            ("2", Some(2.0)),
            ("1.5", Some(1.5)),
            ("512Mi", Some(512.0 * 1024.0 * 1024.0)),
            ("1Gi", Some(1024.0 * 1024.0 * 1024.0)),
            ("1G", Some(1e9)),
            ("2e3", Some(2000.0)),
            ("128974848", Some(128974848.0)),
            ("1x", None),
            ("", None),
            ("-1", None),
        ] {
            assert_eq!(quantity(q), want, "{q}");
        }
    }

    #[test]
    fn selectors_match_as_kubernetes_does() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "db".to_string())]
            .into_iter()
            .collect();
        let s = |l: &[(&str, &str)], e: &[(&str, &str, &[&str])]| Selector {
            labels: l
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            expressions: e
                .iter()
                .map(|(k, o, v)| {
                    (
                        k.to_string(),
                        o.to_string(),
                        v.iter().map(|x| x.to_string()).collect(),
                    )
                })
                .collect(),
        };
        assert!(s(&[], &[]).matches(&labels), "empty selects all");
        assert!(s(&[("app", "db")], &[]).matches(&labels));
        assert!(!s(&[("app", "web")], &[]).matches(&labels));
        assert!(s(&[], &[("app", "In", &["db", "x"])]).matches(&labels));
        assert!(!s(&[], &[("app", "NotIn", &["db"])]).matches(&labels));
        assert!(s(&[], &[("tier", "DoesNotExist", &[])]).matches(&labels));
        assert!(!s(&[], &[("app", "Bogus", &[])]).matches(&labels));
    }

    #[test]
    fn pods_read_with_their_effective_requests() {
        let pod = json!({"kind": "Pod", "metadata": {"name": "p", "namespace": "ns",
            "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "controller": true}]},
            "spec": {"nodeName": "w-1",
                "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
                "initContainers": [
                    {"name": "big-init", "resources": {"requests": {"cpu": "2", "memory": "64Mi"}}},
                    {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}],
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}}}]},
            "status": {"phase": "Running"}});
        let w = find_workloads("w.json", vec![json!({"kind": "List", "items": [pod]})]).unwrap();
        let p = &w.pods[0];
        assert_eq!(p.name, "ns/p");
        assert_eq!(p.controller.as_deref(), Some("ReplicaSet"));
        assert_eq!(p.claims, ["ns/data"]);
        // CPU: the init container's 2 against 0.6 running; memory: 256 Mi running.
        assert_eq!(p.requests.0, 2000.0);
        assert_eq!(p.requests.1, 256.0 * 1024.0 * 1024.0);
    }

    #[test]
    fn refuses_files_without_workloads() {
        let e = find_workloads("w.json", vec![json!({"kind": "ConfigMap"})]).unwrap_err();
        assert!(
            e.to_string().contains(
                "w.json: no PersistentVolume, PodDisruptionBudget or Pod found (found ConfigMap)"
            ),
            "{e}"
        );
        let e = find_workloads(
            "w.json",
            vec![json!({"kind": "Pod", "metadata": {"name": "x"}})],
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("Pod #1: expected metadata.name and metadata.namespace"),
            "{e}"
        );
    }

    #[test]
    fn budgets_that_allow_no_eviction() {
        let b = |min: Option<&str>, max: Option<&str>, allowed: u64, expected: u64| BudgetFacts {
            name: "ns/b".into(),
            namespace: "ns".into(),
            selector: Some(Selector::default()),
            min_available: min.map(str::to_string),
            max_unavailable: max.map(str::to_string),
            disruptions_allowed: Some(allowed),
            expected_pods: Some(expected),
        };
        assert!(no_disruption(&b(None, Some("0"), 0, 3), 3).is_some());
        assert!(no_disruption(&b(None, Some("0%"), 0, 3), 3).is_some());
        assert!(no_disruption(&b(Some("3"), None, 0, 3), 3).is_some());
        assert!(no_disruption(&b(Some("100%"), None, 0, 3), 3).is_some());
        assert!(no_disruption(&b(Some("2"), None, 1, 3), 3).is_none());
        assert!(no_disruption(&b(None, Some("1"), 1, 3), 3).is_none());
        // At 0 now (a pod unhealthy): flagged, with its pods.
        let now = no_disruption(&b(Some("2"), None, 0, 3), 3).unwrap();
        assert!(
            now.contains("status.disruptionsAllowed: 0 with 3 pod(s)"),
            "{now}"
        );
        // No pods: nothing to evict.
        assert!(no_disruption(&b(Some("2"), None, 0, 0), 0).is_none());
    }
}
