//! How git reaches the management cluster in the model: an Argo CD sync as gitops-engine runs
//! it (server-side apply in wave order, prune unless the live object says `Prune=false`,
//! then the `Sync` hooks; a refused apply fails the sync and stops its later waves) or a
//! plain `kubectl apply` (client-side, no prune, hooks are ordinary Jobs created once)
//! [A25-A32]. Each applied object is read into the [`World`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::admission::Policy;
use super::jobs::{self, PodRun};
use super::model::{lock, MaxUnhealthy, Md, Mhc, Tcp, World, MANAGER_ARGO};
use super::RehearseError;

/// How git is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// Argo CD with automated sync and prune (capstan's ApplicationSet).
    ArgoPrune,
    /// Argo CD syncing without prune (manual sync, or `prune: false`).
    ArgoNoPrune,
    /// `kubectl apply -f` of the rendered stream (client-side).
    KubectlApply,
}

impl SyncMode {
    /// The name used on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncMode::ArgoPrune => "argocd",
            SyncMode::ArgoNoPrune => "argocd-no-prune",
            SyncMode::KubectlApply => "kubectl",
        }
    }
}

/// What one sync did.
#[derive(Debug, Clone, Default)]
pub struct SyncResult {
    /// Objects applied.
    pub applied: usize,
    /// Objects pruned, by `Kind/name`.
    pub pruned: Vec<String>,
    /// Objects left although git no longer has them, with why.
    pub kept: Vec<String>,
    /// Objects whose apply was refused, with the message.
    pub refused: Vec<String>,
    /// Each Job run: its name and its pods.
    pub jobs: Vec<(String, Vec<PodRun>)>,
}

impl SyncResult {
    /// Whether the sync operation succeeded: every object applied, every hook's last pod
    /// exited 0.
    pub fn ok(&self) -> bool {
        self.refused.is_empty()
            && self
                .jobs
                .iter()
                .all(|(_, runs)| runs.last().is_some_and(|r| r.code == Some(0)))
    }
}

fn kind(v: &Value) -> &str {
    v["kind"].as_str().unwrap_or_default()
}

/// An Argo CD hook (`argocd.argoproj.io/hook`).
pub fn is_hook(v: &Value) -> bool {
    v.pointer("/metadata/annotations/argocd.argoproj.io~1hook")
        .is_some()
}

fn key(v: &Value) -> (String, String, String) {
    (
        kind(v).to_string(),
        v["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

fn wave(v: &Value) -> i64 {
    v.pointer("/metadata/annotations/argocd.argoproj.io~1sync-wave")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn sync_options(v: &Value) -> &str {
    v.pointer("/metadata/annotations/argocd.argoproj.io~1sync-options")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// A canonical digest of a JSON value (for "did the config change").
fn digest(v: &Value) -> String {
    crate::digest::sha256_hex(v.to_string().as_bytes())
}

/// The (group, resource) admission sees for an object applied from git.
fn resource_of(v: &Value) -> Option<(String, String)> {
    let group = crate::resource::group_of(v["apiVersion"].as_str().unwrap_or_default()).to_string();
    let resource = match kind(v) {
        "MachineDeployment" => "machinedeployments",
        "TalosControlPlane" => "taloscontrolplanes",
        "Cluster" => "clusters",
        _ => return None,
    };
    Some((group, resource.to_string()))
}

/// Merge `new` over `old` as server-side apply merges maps (lists replaced): what the
/// object looks like after the apply.
fn merged(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let mut out = a.clone();
            for (k, v) in b {
                let m = match a.get(k) {
                    Some(o) => merged(o, v),
                    None => v.clone(),
                };
                out.insert(k.clone(), m);
            }
            Value::Object(out)
        }
        (_, n) => n.clone(),
    }
}

/// A sync wave's tasks: objects to apply, live objects to prune.
type Wave<'a> = (Vec<&'a Value>, Vec<(String, String, String)>);

/// One sync of the rendered (and annotated) objects.
pub fn sync(
    world: &Arc<Mutex<World>>,
    objects: &[Value],
    mode: SyncMode,
) -> Result<SyncResult, RehearseError> {
    let mut result = SyncResult::default();
    let wanted: BTreeMap<(String, String, String), &Value> = objects
        .iter()
        .filter(|o| !is_hook(o))
        .map(|o| (key(o), o))
        .collect();
    // The tasks: every object to apply, and (Argo CD) every live object git dropped.
    let mut waves: BTreeMap<i64, Wave<'_>> = BTreeMap::new();
    for o in objects.iter().filter(|o| !is_hook(o) && kind(o) != "Job") {
        waves.entry(wave(o)).or_default().0.push(o);
    }
    if mode != SyncMode::KubectlApply {
        let w = lock(world);
        for (k, live) in &w.live {
            if !wanted.contains_key(k) && k.0 != "Job" {
                waves
                    .entry(wave(&live.value))
                    .or_default()
                    .1
                    .push(k.clone());
            }
        }
    }
    let hook_wave = objects
        .iter()
        .filter(|o| is_hook(o))
        .map(wave)
        .min()
        .unwrap_or(0);
    for (n, (apply, prune)) in waves {
        let mut w = lock(world);
        for k in prune {
            let Some(live) = w.live.get(&k).cloned() else {
                continue;
            };
            let what = format!("{}/{}", k.0, k.2);
            // gitops-engine `pruneObject`: skipped without prune, or when the live object
            // carries Prune=false [A26].
            if mode == SyncMode::ArgoNoPrune {
                result
                    .kept
                    .push(format!("{what}: ignored (requires pruning)"));
                continue;
            }
            if sync_options(&live.value)
                .split(',')
                .any(|o| o == "Prune=false")
            {
                result.kept.push(format!("{what}: ignored (no prune)"));
                continue;
            }
            w.live.remove(&k);
            forget(&mut w, &live.value);
            result.pruned.push(what);
        }
        for o in apply {
            match apply_one(&mut w, o, mode) {
                Ok(()) => result.applied += 1,
                Err(e) => result
                    .refused
                    .push(format!("{}/{}: {e}", kind(o), key(o).2)),
            }
            w.tick();
        }
        if !result.refused.is_empty() && mode != SyncMode::KubectlApply {
            // A failed wave fails the operation: later waves do not run, nor hooks of a
            // later wave; the failing wave's own hooks were created with it [A27].
            if n < hook_wave {
                return Ok(result);
            }
            break;
        }
    }
    // Hooks (Argo CD), or Jobs created once (kubectl).
    for job in objects.iter().filter(|o| kind(o) == "Job") {
        let name = job["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if mode == SyncMode::KubectlApply {
            // kubectl ignores the hook annotations: the Job is created once and not run
            // again while it exists (a Job's template is immutable) [A32].
            let k = key(job);
            let mut w = lock(world);
            if w.live.contains_key(&k) {
                continue;
            }
            w.live.insert(
                k.clone(),
                super::model::LiveObject {
                    kind: k.0.clone(),
                    namespace: k.1.clone(),
                    name: k.2.clone(),
                    value: job.clone(),
                },
            );
        } else if !is_hook(job) {
            continue;
        }
        let runs = jobs::run_job(world, job)?;
        result.jobs.push((name, runs));
    }
    Ok(result)
}

/// Apply one object as the mode applies it, through admission for the kinds the rendered
/// policies match.
fn apply_one(w: &mut World, o: &Value, mode: SyncMode) -> Result<(), String> {
    let k = key(o);
    let old = w.live.get(&k).map(|l| l.value.clone());
    let after = match &old {
        Some(old) => merged(old, o),
        None => o.clone(),
    };
    if let Some((group, resource)) = resource_of(o) {
        let op = if old.is_some() { "UPDATE" } else { "CREATE" };
        let current = w.current_json(o, old.as_ref());
        w.admit((&group, &resource, op), &after, current.as_ref())?;
    }
    w.live.insert(
        k.clone(),
        super::model::LiveObject {
            kind: k.0.clone(),
            namespace: k.1.clone(),
            name: k.2.clone(),
            value: o.clone(),
        },
    );
    read_object(w, o, mode);
    Ok(())
}

/// Remove what a pruned object was in the model.
fn forget(w: &mut World, o: &Value) {
    let name = o["metadata"]["name"].as_str().unwrap_or_default();
    match kind(o) {
        "ValidatingAdmissionPolicy" => {
            w.policies.remove(name);
        }
        "ValidatingAdmissionPolicyBinding" => {
            if let Some(p) = w.policies.get_mut(
                o.pointer("/spec/policyName")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            ) {
                p.bound = false;
            }
        }
        "MachineDeployment" => {
            w.deployments.remove(name);
        }
        "MachineHealthCheck" => {
            w.health_checks.remove(name);
        }
        "Secret" => {
            w.secrets.remove(name);
        }
        _ => {}
    }
}

fn seconds(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim_end_matches('s').parse().ok(),
        _ => None,
    }
}

impl World {
    /// The live object as the API server holds it (admission's `oldObject`), from the
    /// model's state where controllers changed it (a MachineDeployment's replicas).
    fn current_json(&self, o: &Value, old: Option<&Value>) -> Option<Value> {
        let mut old = old?.clone();
        if kind(o) == "MachineDeployment" {
            let name = o["metadata"]["name"].as_str().unwrap_or_default();
            if let Some(md) = self.deployments.get(name) {
                old["spec"]["replicas"] = Value::from(md.replicas);
            }
        }
        if kind(o) == "TalosControlPlane" {
            if let Some(t) = &self.tcp {
                old["spec"]["replicas"] = Value::from(t.replicas);
                old["metadata"]["annotations"] = serde_json::json!(t.annotations);
            }
        }
        Some(old)
    }
}

/// Read an applied object into the model.
fn read_object(w: &mut World, o: &Value, mode: SyncMode) {
    let name = o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    match kind(o) {
        "Secret" => {
            w.secrets.insert(name);
        }
        "ValidatingAdmissionPolicy" => {
            let mut p = Policy::from_object(o);
            if let Some(old) = w.policies.get(&name) {
                p.param = old.param.clone();
                p.deny_without_param = old.deny_without_param;
                p.bound = old.bound;
            }
            w.policies.insert(name, p);
        }
        "ValidatingAdmissionPolicyBinding" => {
            let policy = o
                .pointer("/spec/policyName")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if let Some(p) = w.policies.get_mut(policy) {
                p.bind(o);
            }
        }
        "TalosControlPlane" => read_tcp(w, o, mode),
        "MachineDeployment" => {
            let spec = &o["spec"]["template"]["spec"];
            let autoscaler = crate::resource::autoscaler_sizes(o)
                .and_then(|(min, max)| Some((min.parse().ok()?, max.parse().ok()?)));
            let replicas = match (
                o.pointer("/spec/replicas").and_then(Value::as_u64),
                w.deployments.get(&name),
            ) {
                (Some(r), _) => r,
                // Server-side apply keeps what another manager set (the autoscaler) [A19];
                // at creation CAPI defaults to the autoscaler's minimum, else 1.
                (None, Some(md)) => md.replicas,
                (None, None) => autoscaler.map_or(1, |(min, _)| min),
            };
            let drain = seconds(spec.get("nodeDrainTimeout"))
                .or_else(|| seconds(spec.pointer("/deletion/nodeDrainTimeoutSeconds")));
            w.deployments.insert(
                name,
                Md {
                    replicas,
                    infra_template: spec["infrastructureRef"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .into(),
                    bootstrap_template: spec["bootstrap"]["configRef"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .into(),
                    version: spec["version"].as_str().unwrap_or_default().into(),
                    autoscaler,
                    drain_timeout: drain,
                },
            );
        }
        "MachineHealthCheck" => {
            let s = &o["spec"];
            let deployment = s
                .pointer("/selector/matchLabels/cluster.x-k8s.io~1deployment-name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let unhealthy = s
                .pointer("/unhealthyConditions/0/timeout")
                .or_else(|| s.pointer("/checks/unhealthyNodeConditions/0/timeoutSeconds"));
            let startup = s
                .get("nodeStartupTimeout")
                .or_else(|| s.pointer("/checks/nodeStartupTimeoutSeconds"));
            // An int-or-string: a count, or a percentage of the Machines (rounded down).
            let max = match s
                .get("maxUnhealthy")
                .or_else(|| s.pointer("/remediation/triggerIf/unhealthyLessThanOrEqualTo"))
            {
                Some(Value::Number(n)) => MaxUnhealthy::Count(n.as_u64().unwrap_or(0)),
                Some(Value::String(t)) => match t.strip_suffix('%') {
                    Some(p) => MaxUnhealthy::Percent(p.parse().unwrap_or(100)),
                    None => MaxUnhealthy::Count(t.parse().unwrap_or(0)),
                },
                _ => MaxUnhealthy::Percent(100),
            };
            w.health_checks.insert(
                name,
                Mhc {
                    deployment,
                    unhealthy: seconds(unhealthy).unwrap_or(300),
                    startup: seconds(startup).unwrap_or(600),
                    max_unhealthy: max,
                    short_circuit: None,
                },
            );
        }
        _ => {}
    }
}

/// The TalosControlPlane's annotations under the mode's field ownership, and its spec.
fn read_tcp(w: &mut World, o: &Value, mode: SyncMode) {
    let annotations: BTreeMap<String, String> = o
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(k, _)| !k.starts_with("argocd.argoproj.io/"))
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect();
    let spec = &o["spec"];
    let infra = spec
        .pointer("/infrastructureTemplate/name")
        .or_else(|| spec.pointer("/machineTemplate/spec/infrastructureRef/name"))
        .or_else(|| spec.pointer("/machineTemplate/infrastructureRef/name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let config = &spec["controlPlaneConfig"];
    let vip = w
        .endpoint
        .vip
        .as_ref()
        .is_some_and(|a| config.to_string().contains(a.as_str()));
    let tcp = w.tcp.get_or_insert_with(Tcp::default);
    tcp.replicas = spec["replicas"].as_u64().unwrap_or(1);
    tcp.version = spec["version"].as_str().unwrap_or_default().to_string();
    tcp.infra_template = infra;
    tcp.config = digest(config);
    tcp.max_surge = spec
        .pointer("/rolloutStrategy/rollingUpdate/maxSurge")
        .and_then(Value::as_u64)
        .unwrap_or(1);
    tcp.vip_config = vip;
    match mode {
        SyncMode::KubectlApply => {
            // Client-side apply: a key in the last-applied configuration that git dropped is
            // deleted, whoever set it since [A32].
            let dropped: Vec<String> = tcp
                .last_applied
                .iter()
                .filter(|k| !annotations.contains_key(*k))
                .cloned()
                .collect();
            for k in dropped {
                tcp.annotations.remove(&k);
                tcp.owners.remove(&k);
            }
            for (k, v) in &annotations {
                tcp.annotations.insert(k.clone(), v.clone());
            }
            tcp.last_applied = annotations.keys().cloned().collect();
        }
        _ => {
            // Server-side apply: a forced apply takes a changed field over; a field git
            // dropped goes only if no other manager owns it [A30].
            for (k, v) in &annotations {
                let owners = tcp.owners.entry(k.clone()).or_default();
                if tcp.annotations.get(k) != Some(v) {
                    owners.clear();
                }
                owners.insert(MANAGER_ARGO.to_string());
                tcp.annotations.insert(k.clone(), v.clone());
            }
            let mine: Vec<String> = tcp
                .owners
                .iter()
                .filter(|(k, o)| o.contains(MANAGER_ARGO) && !annotations.contains_key(*k))
                .map(|(k, _)| k.clone())
                .collect();
            for k in mine {
                if let Some(owners) = tcp.owners.get_mut(&k) {
                    owners.remove(MANAGER_ARGO);
                    if owners.is_empty() {
                        tcp.owners.remove(&k);
                        tcp.annotations.remove(&k);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_merge_keeps_what_the_apply_leaves_out() {
        let old = json!({"spec": {"replicas": 6, "template": {"a": 1}}});
        let new = json!({"spec": {"template": {"a": 2}}});
        assert_eq!(
            merged(&old, &new),
            json!({"spec": {"replicas": 6, "template": {"a": 2}}})
        );
    }
}
