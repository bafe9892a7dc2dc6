//! `phase-leftovers`: what a migration phase added to the management cluster that outlives
//! it (`--management-objects`, the live admission policies, TalosControlPlanes and Jobs).
//! Argo CD never prunes a live object annotated `Prune=false` (gitops-engine v3.5.1
//! `sync_context.go:333-342, 1453-1458`) nor a hook (`:966-970`), and `kubectl apply` never
//! prunes: so phase control-plane's nodeRef policy from a render that gave it
//! `Prune=false`, a pause no Job lifted, the phase annotation held by another field manager
//! and the Jobs of past phases can stay. Each is named, with the command that removes it.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{errors, CheckError, Cx, Finding, Severity};
use crate::model::Phase;
use crate::procedure::{delete_node_ref_policy_command, Names, PHASE_ANNOTATION};

/// The command whose output `--management-objects` reads.
pub const MANAGEMENT_OBJECTS_COMMAND: &str = "kubectl get validatingadmissionpolicies,validatingadmissionpolicybindings,taloscontrolplanes,jobs -A -o yaml";

/// The pause annotation Cluster API and the control-plane provider honour (its key: any value).
const PAUSED: &str = "cluster.x-k8s.io/paused";

/// The finalizer gitops-engine puts on a hook while a sync runs it (`hook.HookFinalizer`).
const HOOK_FINALIZER: &str = "argocd.argoproj.io/hook-finalizer";

/// The most objects read from one file (a bound on untrusted input).
const MAX_OBJECTS: usize = 100_000;

/// What a Job is doing, from its conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Neither `Complete` nor `Failed`.
    Running,
    /// Condition `Complete` is `True`.
    Succeeded,
    /// Condition `Failed` is `True`.
    Failed,
}

/// One live object of the kinds `--management-objects` reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveObject {
    /// `ValidatingAdmissionPolicy`, `ValidatingAdmissionPolicyBinding`, `TalosControlPlane`
    /// or `Job`.
    pub kind: String,
    /// `metadata.namespace` (empty for cluster-scoped objects).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.annotations` (string values).
    pub annotations: BTreeMap<String, String>,
    /// `metadata.finalizers`.
    pub finalizers: Vec<String>,
    /// A policy's validation expressions.
    pub validations: Vec<String>,
    /// A Job's state.
    pub job: Option<JobState>,
    /// A Job's `spec.ttlSecondsAfterFinished`.
    pub ttl: Option<u64>,
}

/// The `--management-objects` input.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ManagementObjects {
    /// Every object of the kinds read, in file order.
    pub objects: Vec<LiveObject>,
}

const KINDS: [&str; 4] = [
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "TalosControlPlane",
    "Job",
];

/// Reads the admission policies and bindings, TalosControlPlanes and Jobs from the
/// documents of `file` (objects, or `List` items). Other kinds are skipped; none of these
/// at all is an error naming what was found.
pub fn find_management_objects(
    file: &str,
    docs: Vec<Value>,
) -> Result<ManagementObjects, CheckError> {
    let listed = crate::resource::list_items(docs);
    let mut found: Vec<String> = listed
        .malformed
        .iter()
        .map(|k| format!("{k} without items"))
        .collect();
    let mut input = ManagementObjects::default();
    for (index, (kind, item)) in listed.objects.iter().enumerate() {
        if !KINDS.contains(&kind.as_str()) {
            let k = if kind.is_empty() { "(no kind)" } else { kind };
            if !found.iter().any(|x| x == k) {
                found.push(k.to_string());
            }
            continue;
        }
        if input.objects.len() >= MAX_OBJECTS {
            return Err(problem(file, format!("more than {MAX_OBJECTS} objects")));
        }
        input.objects.push(live_object(file, index, kind, item)?);
    }
    if input.objects.is_empty() {
        return Err(problem(
            file,
            format!(
                "no ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, TalosControlPlane or Job found \
                 (found {}); expected `{MANAGEMENT_OBJECTS_COMMAND}`",
                if found.is_empty() {
                    "nothing".to_string()
                } else {
                    found.join(", ")
                }
            ),
        ));
    }
    Ok(input)
}

fn problem(file: &str, problem: String) -> CheckError {
    CheckError::ManagementObjects {
        file: file.to_string(),
        problem,
    }
}

fn live_object(
    file: &str,
    index: usize,
    kind: &str,
    item: &Value,
) -> Result<LiveObject, CheckError> {
    let bad = |field: &str, expected: &str| {
        problem(
            file,
            format!("{kind} #{} {field}: expected {expected}", index + 1),
        )
    };
    let text = |p: &str| -> Result<String, CheckError> {
        match item.pointer(p) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(bad(&p[1..].replace('/', "."), "a string")),
        }
    };
    let name = text("/metadata/name")?;
    if name.is_empty() {
        return Err(bad("metadata.name", "a string"));
    }
    let annotations = match item.pointer("/metadata/annotations") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(v) => Ok((k.clone(), v.clone())),
                _ => Err(bad(&format!("metadata.annotations.{k}"), "a string")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad("metadata.annotations", "a map")),
    };
    let strings = |p: &str, key: Option<&str>| -> Vec<String> {
        item.pointer(p)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|x| match key {
                Some(k) => x.get(k).and_then(Value::as_str),
                None => x.as_str(),
            })
            .map(str::to_string)
            .collect()
    };
    let job = (kind == "Job").then(|| {
        let condition = |t: &str| {
            item.pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|c| c["type"] == t && c["status"] == "True")
        };
        if condition("Failed") {
            JobState::Failed
        } else if condition("Complete") {
            JobState::Succeeded
        } else {
            JobState::Running
        }
    });
    Ok(LiveObject {
        kind: kind.to_string(),
        namespace: text("/metadata/namespace")?,
        name,
        annotations,
        finalizers: strings("/metadata/finalizers", None),
        validations: strings("/spec/validations", Some("expression")),
        job,
        ttl: item
            .pointer("/spec/ttlSecondsAfterFinished")
            .and_then(Value::as_u64),
    })
}

impl Cx<'_> {
    /// `phase-leftovers`: every object of another phase on the management cluster, by name.
    pub(super) fn phase_leftovers(&self, out: &mut Vec<Finding>) {
        let id = "phase-leftovers";
        let Some(input) = &self.i.management else {
            out.push(Finding::new(
                id,
                Severity::Info,
                "--management-objects",
                format!(
                    "what earlier phases left on the management cluster (phase control-plane's nodeRef policy, the \
                     pause, the phase annotation, migration Jobs) not checked: pass --management-objects with \
                     `{MANAGEMENT_OBJECTS_COMMAND}`"
                ),
            ));
            return;
        };
        let file = &input.file;
        let objects = &input.value.objects;
        let c = &self.i.config;
        let names = Names {
            namespace: c.metadata.namespace.clone(),
            cluster: c.metadata.name.clone(),
        };
        let ns = &names.namespace;
        let tcp = format!("{}-cp", names.cluster);
        // A cluster that is not migrating renders no phase objects: as after `complete`.
        let phase = c
            .spec
            .migration
            .as_ref()
            .map_or(Phase::Complete, |m| m.phase);
        let in_phase = format!("in phase `{}`", phase.as_str());
        let before = out.len();
        let policy = names.node_ref_policy();
        let live_tcp = objects
            .iter()
            .find(|o| o.kind == "TalosControlPlane" && o.namespace == *ns && o.name == tcp);
        let tcp_phase = live_tcp.and_then(|t| t.annotations.get(PHASE_ANNOTATION));
        if live_tcp.is_none() {
            out.push(Finding::new(
                id,
                Severity::Info,
                file.to_string(),
                format!(
                    "TalosControlPlane {ns}/{tcp} is not in it (not synced yet?): its pause and `{PHASE_ANNOTATION}` \
                     not compared"
                ),
            ));
        }
        let policies: Vec<&LiveObject> = objects
            .iter()
            .filter(|o| o.kind.starts_with("ValidatingAdmissionPolicy") && o.name == policy)
            .collect();
        let live = Live {
            file,
            ns,
            tcp: &tcp,
            in_phase: &in_phase,
            names: &names,
            policy: &policy,
            live_tcp,
            tcp_phase,
        };
        node_ref_policy(out, phase, &live, &policies);
        if let Some(t) = live_tcp.filter(|t| t.annotations.contains_key(PAUSED)) {
            let unpause = format!(
                "`kubectl -n {ns} annotate taloscontrolplanes.controlplane.cluster.x-k8s.io {tcp} {PAUSED}-` (only once \
                 no kubeadm etcd member is left: README procedure \"Lift the pause after phase control-plane\")"
            );
            match phase {
                Phase::Complete => out.push(
                    Finding::new(
                        id,
                        Severity::Blocking,
                        format!("{file} TalosControlPlane {ns}/{} metadata.annotations.{PAUSED}", t.name),
                        format!(
                            "{tcp} is paused {in_phase}: the provider reconciles nothing (no rollout, no \
                             remediation, no kubeconfig rotation), and after a version bump CAPI holds every worker \
                             MachineSet"
                        ),
                    )
                    .fix(format!("sync: the phase's Job lifts it; or by hand {unpause}")),
                ),
                Phase::Workers => out.push(
                    Finding::new(
                        id,
                        Severity::Warning,
                        format!("{file} TalosControlPlane {ns}/{} metadata.annotations.{PAUSED}", t.name),
                        format!(
                            "{tcp} is still paused {in_phase}: the phase's Job lifts it once the workload cluster \
                             shows no kubeadm etcd member"
                        ),
                    )
                    .fix(format!("sync, and read the Job's log if it stays; by hand {unpause}")),
                ),
                Phase::Prepare | Phase::ControlPlane => {}
            }
        }
        other_phase_jobs(out, phase, &live, objects);
        if out.len() == before && live_tcp.is_some() {
            out.push(Finding::new(
                id,
                Severity::Pass,
                file.to_string(),
                format!(
                    "nothing of another phase is left {in_phase}: {}{tcp} {}, no migration Job of another phase",
                    if phase == Phase::ControlPlane {
                        format!("the admission policy {policy} applies under `{PHASE_ANNOTATION}`; ")
                    } else {
                        format!("no admission policy {policy}; ")
                    },
                    match phase {
                        Phase::ControlPlane | Phase::Prepare => "as rendered",
                        Phase::Workers | Phase::Complete => "unpaused, without the phase annotation",
                    }
                ),
            ));
        }
    }
}

/// Seconds as days or hours, for a summary.
fn duration(secs: u64) -> String {
    match secs {
        86_400 => "1 day".to_string(),
        3_600 => "1 hour".to_string(),
        s if s >= 86_400 && s % 86_400 == 0 => format!("{} days", s / 86_400),
        s if s >= 3_600 && s % 3_600 == 0 => format!("{} hours", s / 3_600),
        s => format!("{s} seconds"),
    }
}

/// The migration Jobs of other phases still there: running, failed or kept, each with what
/// deletes it (or that nothing does).
fn other_phase_jobs(out: &mut Vec<Finding>, phase: Phase, live: &Live<'_>, objects: &[LiveObject]) {
    let id = "phase-leftovers";
    let Live {
        file,
        ns,
        in_phase,
        names,
        ..
    } = *live;
    let prefix = format!("{}-capstan-migration-", names.cluster);
    let current = phase.job_suffix();
    for j in objects
        .iter()
        .filter(|o| o.kind == "Job" && o.namespace == *ns)
    {
        let Some((suffix, _hash)) = j
            .name
            .strip_prefix(&prefix)
            .and_then(|r| r.rsplit_once('-'))
        else {
            continue;
        };
        if suffix == current {
            continue;
        }
        let state = j.job.unwrap_or(JobState::Running);
        let (severity, what) = match state {
            JobState::Running => (
                Severity::Warning,
                "still running: it acts for a phase the cluster has left",
            ),
            JobState::Failed => (Severity::Warning, "failed"),
            JobState::Succeeded => (Severity::Info, "succeeded"),
        };
        let removal = match (j.ttl, state) {
            (Some(ttl), JobState::Succeeded | JobState::Failed) => format!(
                "Kubernetes deletes it {} after it finished (ttlSecondsAfterFinished)",
                duration(ttl)
            ),
            (Some(_), JobState::Running) => {
                "Kubernetes deletes it once it has finished (ttlSecondsAfterFinished)".to_string()
            }
            (None, _) => "nothing deletes it: Argo CD never prunes a hook, and its delete policy acts only \
                          on the hooks of the sync under way"
                .to_string(),
        };
        let mut fix = format!("`kubectl -n {ns} delete job {}`", j.name);
        if j.finalizers.iter().any(|f| f == HOOK_FINALIZER) {
            fix = format!(
                "`kubectl -n {ns} patch job {} --type=json -p '[{{\"op\":\"remove\",\"path\":\"/metadata/finalizers\"}}]'` \
                 (Argo CD's hook finalizer, left by an interrupted sync), then {fix}",
                j.name
            );
        }
        out.push(
            Finding::new(
                id,
                severity,
                object_field(file, j),
                format!(
                    "migration Job {} is not this phase's (`{current}`) and {what} {in_phase}; {removal}",
                    j.name
                ),
            )
            .fix(fix),
        );
    }
}

/// How a finding names a live object of `file`.
fn object_field(file: &str, o: &LiveObject) -> String {
    if o.namespace.is_empty() {
        format!("{file} {} {}", o.kind, o.name)
    } else {
        format!("{file} {} {}/{}", o.kind, o.namespace, o.name)
    }
}

/// What `phase-leftovers` compares of one live cluster.
struct Live<'a> {
    file: &'a str,
    ns: &'a str,
    tcp: &'a str,
    in_phase: &'a str,
    names: &'a Names,
    policy: &'a str,
    live_tcp: Option<&'a LiveObject>,
    tcp_phase: Option<&'a String>,
}

/// Phase control-plane's nodeRef policy: there, and holding, in its phase; left over, with
/// the phase annotation, in every other.
fn node_ref_policy(out: &mut Vec<Finding>, phase: Phase, live: &Live<'_>, policies: &[&LiveObject]) {
    let id = "phase-leftovers";
    let Live {
        file,
        ns,
        tcp,
        in_phase,
        names,
        policy,
        live_tcp,
        tcp_phase,
    } = *live;
    if phase == Phase::ControlPlane {
        // The policy belongs to this phase; it must hold while the phase runs.
        let conditioned = policies
            .iter()
            .any(|p| p.validations.iter().any(|v| v.contains(PHASE_ANNOTATION)));
        if policies.is_empty() {
            out.push(
                Finding::new(
                    id,
                    Severity::Blocking,
                    format!("{file} ValidatingAdmissionPolicy {policy}"),
                    format!(
                        "phase control-plane's admission policy {policy} is not there {in_phase}: nothing keeps \
                         the provider's etcd audit out of the scale Job's window"
                    ),
                )
                .fix("sync the phase's render (the policy and its binding are in it) before the scale Job runs"),
            );
        } else if conditioned && tcp_phase.is_none() && live_tcp.is_some() {
            out.push(
                Finding::new(
                    id,
                    Severity::Blocking,
                    format!("{file} TalosControlPlane {ns}/{tcp} metadata.annotations"),
                    format!(
                        "{tcp} lacks `{PHASE_ANNOTATION}` {in_phase}: the admission policy {policy} refuses \
                         nothing without it, so the provider's etcd audit could run inside the scale Job's window"
                    ),
                )
                .fix("sync the phase's render: it renders the annotation on the TalosControlPlane"),
            );
        }
    } else {
        for p in policies {
            let no_prune = p
                .annotations
                .get("argocd.argoproj.io/sync-options")
                .is_some_and(|o| o.split(',').any(|x| x.trim() == "Prune=false"));
            let inert = p.kind == "ValidatingAdmissionPolicy"
                && p.validations.iter().any(|v| v.contains(PHASE_ANNOTATION))
                && tcp_phase.is_none();
            out.push(
                Finding::new(
                    id,
                    Severity::Blocking,
                    object_field(file, p),
                    format!(
                        "{} {} is left from phase control-plane {in_phase}{}: {}",
                        p.kind,
                        p.name,
                        if no_prune {
                            " (it carries `Prune=false`: Argo CD never prunes it)"
                        } else {
                            ""
                        },
                        if inert {
                            format!(
                                "inert while {tcp} lacks `{PHASE_ANNOTATION}`, but it refuses nodeRefs again the \
                                 moment the annotation comes back"
                            )
                        } else {
                            "with the control plane unpaused it refuses every new control-plane Machine its \
                             nodeRef: the next rollout (Talos or Kubernetes upgrade, machine template change) \
                             stops at replicas + 1, and no `clusterctl move` backup can be taken"
                                .to_string()
                        }
                    ),
                )
                .error(errors::NODE_REF_REFUSED)
                .fix(format!(
                    "the phase's Job deletes it on its next sync; by hand: `{}`",
                    delete_node_ref_policy_command(names)
                )),
            );
        }
        if let Some(value) = tcp_phase {
            out.push(
                Finding::new(
                    id,
                    Severity::Warning,
                    format!("{file} TalosControlPlane {ns}/{tcp} metadata.annotations.{PHASE_ANNOTATION}"),
                    format!(
                        "{tcp} still carries `{PHASE_ANNOTATION}: {value}` {in_phase}: git dropped it, so another \
                         field manager than Argo CD holds it; with it, phase control-plane's nodeRef policy \
                         applies wherever it is left"
                    ),
                )
                .fix(format!(
                    "`kubectl -n {ns} annotate taloscontrolplanes.controlplane.cluster.x-k8s.io {tcp} {PHASE_ANNOTATION}-`"
                )),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_lists_and_refuses_what_it_cannot_use() {
        let docs = vec![json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "n", "finalizers": [HOOK_FINALIZER]},
             "spec": {"ttlSecondsAfterFinished": 60}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
            {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "p"},
             "spec": {"validations": [{"expression": "true"}]}},
        ]})];
        let m = find_management_objects("f.yaml", docs).unwrap();
        assert_eq!(m.objects.len(), 2);
        assert_eq!(m.objects[0].job, Some(JobState::Succeeded));
        assert_eq!(m.objects[0].ttl, Some(60));
        assert_eq!(m.objects[0].finalizers, [HOOK_FINALIZER]);
        assert_eq!(m.objects[1].validations, ["true"]);
        let e = find_management_objects(
            "f.yaml",
            vec![json!({"kind": "Job", "metadata": {"name": "j", "annotations": {"a": 1}}})],
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "f.yaml: Job #1 metadata.annotations.a: expected a string"
        );
        let e = find_management_objects(
            "f.yaml",
            vec![json!({"kind": "Secret", "metadata": {"name": "s"}})],
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("f.yaml: no ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, TalosControlPlane or Job found (found Secret)"), "{e}");
    }

    #[test]
    fn durations_read_as_an_operator_says_them() {
        assert_eq!(duration(604_800), "7 days");
        assert_eq!(duration(86_400), "1 day");
        assert_eq!(duration(7_200), "2 hours");
        assert_eq!(duration(90), "90 seconds");
    }
}
