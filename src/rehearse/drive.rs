//! The rehearsal: a cluster's renders driven through the model as the runbook drives the real
//! cluster (each phase's commit synced, the kubeadm nodes removed one at a time, the endpoint
//! moved), then one Day-2 operation, each step run until the cluster settles, stalls, loses
//! quorum or loses its API. A stall names the object and the condition it waits on, with the
//! fix.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::argo::{self, SyncMode, SyncResult};
use super::model::{lock, World, ANN_PAUSED, VIP_FAILOVER};
use super::RehearseError;
use crate::model::Phase;

/// A Day-2 operation the rehearsal runs after the phases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// The next Talos minor (VM template and install image follow it).
    TalosUpgrade,
    /// The next Kubernetes patch release.
    KubernetesPatch,
    /// The next Kubernetes minor.
    KubernetesMinor,
    /// A content-hash change of the control plane's machines (a rolling replacement).
    Rollout,
    /// The endpoint handed over to the VIP, then a control-plane rollout behind it.
    VipHandover,
    /// A failed control-plane machine replaced.
    ReplaceControlPlane,
    /// A content-hash change of the first worker pool (a MachineDeployment rollout).
    WorkerRollout,
    /// A worker fails; its MachineHealthCheck remediates it.
    MhcRemediation,
    /// Pending Pods make the autoscaler grow an autoscaled pool.
    AutoscalerScaleUp,
    /// The last phase commit reverted.
    PhaseRevert,
}

impl Operation {
    /// Every operation, in the order the README lists them.
    #[cfg(any(test, feature = "testkit"))]
    pub const ALL: [Operation; 10] = [
        Operation::TalosUpgrade,
        Operation::KubernetesPatch,
        Operation::KubernetesMinor,
        Operation::Rollout,
        Operation::VipHandover,
        Operation::ReplaceControlPlane,
        Operation::WorkerRollout,
        Operation::MhcRemediation,
        Operation::AutoscalerScaleUp,
        Operation::PhaseRevert,
    ];

    /// The name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::TalosUpgrade => "talos-upgrade",
            Operation::KubernetesPatch => "kubernetes-patch",
            Operation::KubernetesMinor => "kubernetes-minor",
            Operation::Rollout => "rollout",
            Operation::VipHandover => "vip-handover",
            Operation::ReplaceControlPlane => "replace-control-plane",
            Operation::WorkerRollout => "worker-rollout",
            Operation::MhcRemediation => "mhc-remediation",
            Operation::AutoscalerScaleUp => "autoscaler-scale-up",
            Operation::PhaseRevert => "phase-revert",
        }
    }
}

/// Why a step stopped the rehearsal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    /// What kind of stop: `stall`, `quorum`, `api`, `unsafe`, `sync`.
    pub kind: &'static str,
    /// The object it names (`Kind/name`).
    pub object: String,
    /// The condition it waits on, or what happened.
    pub condition: String,
    /// What fixes it.
    pub fix: String,
}

/// The state after a step, for the table.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Simulated seconds.
    pub t: u64,
    /// Voters, voters up, learners.
    pub etcd: (usize, usize, usize),
    /// The members: name, `kubeadm`/`talos`, `voter`/`learner`, up.
    pub members: Vec<(String, &'static str, &'static str, bool)>,
    /// Machine groups: name (`control plane` or the MachineDeployment), Machines not being
    /// deleted, desired replicas, Machines with a nodeRef, versions.
    pub machines: Vec<(String, usize, u64, usize, Vec<String>)>,
    /// The TalosControlPlane's pause annotation and its field managers.
    pub paused: Option<Vec<String>>,
    /// Live admission policies (bound).
    pub policies: Vec<String>,
    /// The endpoint: `load balancer` or `VIP <address>`, and its backends with whether each
    /// serves.
    pub endpoint: (String, Vec<(String, bool)>),
    /// The longest time without the API during the step, in seconds.
    pub longest_gap: u64,
}

/// One step of the rehearsal.
#[derive(Debug, Clone)]
pub struct Step {
    /// What the step does (a commit synced, a runbook action).
    pub title: String,
    /// Seconds it took in the model.
    pub seconds: u64,
    /// What the sync did, when the step synced.
    pub sync: Option<SyncSummary>,
    /// The state at its end.
    pub snapshot: Snapshot,
    /// Why it stopped the rehearsal, if it did.
    pub stop: Option<Stop>,
    /// Notes (what the operator does by hand, what the model assumed).
    pub notes: Vec<String>,
}

/// What a sync did, for the report.
#[derive(Debug, Clone, Default)]
pub struct SyncSummary {
    /// Objects applied.
    pub applied: usize,
    /// Objects pruned.
    pub pruned: Vec<String>,
    /// Objects left although git dropped them.
    pub kept: Vec<String>,
    /// Applies refused.
    pub refused: Vec<String>,
    /// Jobs: name, exit code of the last pod, its last lines.
    pub jobs: Vec<(String, Option<i32>, String)>,
}

impl From<&SyncResult> for SyncSummary {
    fn from(r: &SyncResult) -> SyncSummary {
        SyncSummary {
            applied: r.applied,
            pruned: r.pruned.clone(),
            kept: r.kept.clone(),
            refused: r.refused.clone(),
            jobs: r
                .jobs
                .iter()
                .map(|(name, runs)| {
                    let last = runs.last();
                    let tail: Vec<&str> = last
                        .map(|r| r.output.lines().rev().take(3).collect())
                        .unwrap_or_default();
                    let tail: Vec<&str> = tail.into_iter().rev().collect();
                    (name.clone(), last.and_then(|r| r.code), tail.join("\n"))
                })
                .collect(),
        }
    }
}

/// The whole rehearsal.
#[derive(Debug, Clone, Default)]
pub struct Rehearsal {
    /// The cluster.
    pub cluster: String,
    /// How git was applied.
    pub sync: String,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

impl Rehearsal {
    /// The stop, if a step stopped the rehearsal.
    pub fn stop(&self) -> Option<&Stop> {
        self.steps.iter().find_map(|s| s.stop.as_ref())
    }
}

/// The rehearsal in progress: the model and the steps so far.
pub struct Driver {
    /// The model.
    pub world: Arc<Mutex<World>>,
    /// How git is applied.
    pub mode: SyncMode,
    /// The steps so far.
    pub rehearsal: Rehearsal,
    /// The longest API gap tolerated (a VIP's failover; none for a load balancer).
    pub gap_tolerance: u64,
    /// The next step injects a failure: it may end with etcd tolerating none.
    pub degraded_step: bool,
    started: std::time::Instant,
    step_start: u64,
    gaps_seen: usize,
}

/// The fix for the leftover nodeRef policy (D1).
pub const NODE_REF_POLICY_FIX: &str = "the phase-control-plane nodeRef policy outlived its phase (day-2 review D1): \
delete it and its binding (`kubectl delete validatingadmissionpolicy,validatingadmissionpolicybinding <name>`); \
capstan renders it in phase control-plane only, inert outside it and pruned by Argo CD, and the unpause Job of \
phases workers and complete deletes a leftover (`capstan check --management-objects` names it)";

impl Driver {
    /// A driver over a world.
    pub fn new(cluster: &str, world: World, mode: SyncMode) -> Driver {
        let gap_tolerance = if world.endpoint.vip.is_some() {
            VIP_FAILOVER
        } else {
            0
        };
        Driver {
            world: Arc::new(Mutex::new(world)),
            mode,
            rehearsal: Rehearsal {
                cluster: cluster.to_string(),
                sync: mode.as_str().to_string(),
                steps: Vec::new(),
            },
            gap_tolerance,
            degraded_step: false,
            started: std::time::Instant::now(),
            step_start: 0,
            gaps_seen: 0,
        }
    }

    /// Whether a step stopped the rehearsal.
    pub fn stopped(&self) -> bool {
        self.rehearsal.stop().is_some()
    }

    fn begin(&mut self) {
        let mut w = lock(&self.world);
        w.denied_message = None;
        self.step_start = w.t;
        self.gaps_seen = w.api_gaps.len();
    }

    /// Sync objects as the mode does.
    pub fn sync(&mut self, objects: &[Value]) -> Result<SyncResult, RehearseError> {
        argo::sync(&self.world, objects, self.mode)
    }

    /// A step: sync `objects` (if any), run `action`, then advance until `settled` says
    /// nothing is missing, at most `deadline` seconds. Returns whether the rehearsal goes on.
    pub fn step(
        &mut self,
        title: &str,
        objects: Option<&[Value]>,
        action: &mut dyn FnMut(&mut World) -> Vec<String>,
        settled: &dyn Fn(&World) -> Option<String>,
        deadline: u64,
    ) -> Result<bool, RehearseError> {
        if self.stopped() {
            return Ok(false);
        }
        self.begin();
        let mut notes = Vec::new();
        let mut sync = None;
        let mut stop = None;
        if let Some(objects) = objects {
            let r = self.sync(objects)?;
            if !r.ok() {
                stop = Some(sync_stop(&r));
            }
            sync = Some(SyncSummary::from(&r));
        }
        notes.extend(action(&mut lock(&self.world)));
        if stop.is_none() {
            stop = self.run_until(settled, deadline)?;
        }
        if stop.is_none() && !std::mem::take(&mut self.degraded_step) {
            stop = quorum_risk(&lock(&self.world));
        }
        let snapshot = snapshot(&lock(&self.world), self.gaps_seen);
        let seconds = snapshot.t - self.step_start;
        self.rehearsal.steps.push(Step {
            title: title.to_string(),
            seconds,
            sync,
            snapshot,
            stop,
            notes,
        });
        Ok(!self.stopped())
    }

    /// Advance until settled, or a stop.
    /// Advance until settled, a stop, or no progress: a step stalls when nothing a
    /// controller changes (Machines, nodeRefs, deletions, members, MachineSet sizes) moved
    /// for [`NO_PROGRESS`] seconds, or at `deadline` (raised to what the cluster's size
    /// needs: one machine's replacement per 600 s).
    fn run_until(
        &self,
        settled: &dyn Fn(&World) -> Option<String>,
        deadline: u64,
    ) -> Result<Option<Stop>, RehearseError> {
        let mut w = lock(&self.world);
        let end = w.t + deadline.max(600 * w.machines.len() as u64);
        let mut last = (progress(&w), w.t);
        loop {
            if let Some(s) = hazard(&w, self.gaps_seen, self.gap_tolerance) {
                return Ok(Some(s));
            }
            let Some(missing) = settled(&w) else {
                return Ok(None);
            };
            let now = progress(&w);
            if now != last.0 {
                last = (now, w.t);
            }
            if w.t >= end || w.t >= last.1 + NO_PROGRESS {
                return Ok(Some(diagnose(&w, &missing)));
            }
            if self.started.elapsed() > REAL_TIME_BUDGET {
                return Err(RehearseError::Budget {
                    seconds: REAL_TIME_BUDGET.as_secs(),
                });
            }
            w.advance(10);
        }
    }
}

/// Seconds of model time without progress after which a step has stalled.
pub const NO_PROGRESS: u64 = 1800;

/// The most real time one rehearsal may take.
pub const REAL_TIME_BUDGET: std::time::Duration = std::time::Duration::from_secs(300);

/// What moves while a cluster makes progress.
fn progress(w: &World) -> (usize, usize, usize, Vec<(String, bool)>, u64, usize) {
    (
        w.machines.len(),
        w.machines.iter().filter(|m| m.node_ref.is_some()).count(),
        w.machines.iter().filter(|m| m.deleting.is_some()).count(),
        w.members
            .iter()
            .map(|m| (m.name.clone(), m.learner))
            .collect(),
        w.machine_sets.iter().map(|m| m.replicas).sum(),
        w.vms
            .iter()
            .filter(|v| v.address.is_some() && !v.gone)
            .count(),
    )
}

fn sync_stop(r: &SyncResult) -> Stop {
    if let Some(first) = r.refused.first() {
        let (object, why) = first.split_once(": ").unwrap_or((first.as_str(), ""));
        return Stop {
            kind: "sync",
            object: object.to_string(),
            condition: format!("the apply was refused: {why}"),
            fix: "the sync failed and its later waves and hooks did not run: read the refusal, fix git (or acknowledge what it guards) and sync again".into(),
        };
    }
    let (name, runs) = r
        .jobs
        .iter()
        .find(|(_, runs)| runs.last().is_none_or(|p| p.code != Some(0)))
        .cloned()
        .unwrap_or_default();
    let last = runs
        .last()
        .map(|p| p.output.trim_end().lines().last().unwrap_or("").to_string());
    Stop {
        kind: "sync",
        object: format!("Job/{name}"),
        condition: format!(
            "the hook failed after {} pod(s): {}",
            runs.len(),
            last.unwrap_or_default()
        ),
        fix: "the sync failed: read the Job's log (`kubectl logs job/<name>`), fix what it names and sync again (capstan plan)".into(),
    }
}

/// A step that ends one failure from losing etcd's quorum (two voters or more, as many up
/// as the quorum): the next machine lost takes the API down.
fn quorum_risk(w: &World) -> Option<Stop> {
    let (voters, up, _) = w.etcd_counts();
    if voters < 2 || up > voters / 2 + 1 {
        return None;
    }
    Some(Stop {
        kind: "quorum",
        object: "etcd".into(),
        condition: format!(
            "the step ends with etcd tolerating no failure: {voters} voters, {up} up, quorum {}",
            voters / 2 + 1
        ),
        fix: "bring the missing members back (or remove the dead ones and let the control plane replace them) before the next step; `talosctl -n <node IP> etcd members`".into(),
    })
}

/// A stop that does not wait for the deadline: quorum lost, the API gone longer than the
/// endpoint allows, a second etcd, the audit removing kubeadm members.
fn hazard(w: &World, gaps_seen: usize, tolerance: u64) -> Option<Stop> {
    if let Some(first) = w.second_etcd.first() {
        return Some(Stop {
            kind: "unsafe",
            object: format!("Machine/{first}"),
            condition: "the control-plane provider sent the Talos Bootstrap RPC: a second, empty etcd".into(),
            fix: "status.bootstrapped must be set before any control-plane machine exists (capstan plan, phase prepare)".into(),
        });
    }
    if let Some(first) = w.generated_pki.first() {
        return Some(Stop {
            kind: "unsafe",
            object: format!("Machine/{first}"),
            condition: format!(
                "the bootstrap provider generated a new Talos PKI: Secret {}-talos was missing when the machine's TalosConfig was reconciled",
                w.facts.cluster
            ),
            fix: "the imported Secrets must exist before any machine is created (the guard policy and the phase Job; after a restore, apply the sealed Secrets before anything is unpaused)".into(),
        });
    }
    if let Some(first) = w.audit_removed_kubeadm.first() {
        return Some(Stop {
            kind: "unsafe",
            object: format!("TalosControlPlane/{}", w.facts.control_plane),
            condition: format!("the etcd audit removed the kubeadm member {first}"),
            fix: "keep the control plane paused until every kubeadm member is removed by hand (capstan plan, phase control-plane)".into(),
        });
    }
    if let Some((t, members)) = &w.quorum_lost {
        return Some(Stop {
            kind: "quorum",
            object: "etcd".into(),
            condition: format!("quorum lost at t={t} s: {members}"),
            fix: "restore quorum (capstan plan: Restore etcd quorum); remove a member only while the others keep a majority".into(),
        });
    }
    if let Some((start, len)) = w.api_gaps[gaps_seen.min(w.api_gaps.len())..]
        .iter()
        .find(|(_, len)| *len > tolerance)
    {
        let what = if w.endpoint.on_vip {
            format!("VIP {}", w.endpoint.vip.clone().unwrap_or_default())
        } else {
            format!("load balancer ({})", w.endpoint.backends.join(", "))
        };
        return Some(Stop {
            kind: "api",
            object: format!("endpoint {what}"),
            condition: format!("no API server answered for {len} s from t={start} s (allowed: {tolerance} s)"),
            fix: "keep a serving control-plane address behind the endpoint at every step (capstan plan: the load balancer's backends, or the VIP's prerequisites)".into(),
        });
    }
    None
}

/// Name the object and condition a stalled step waits on.
pub fn diagnose(w: &World, missing: &str) -> Stop {
    let cp = &w.facts.control_plane;
    for m in w
        .machines
        .iter()
        .filter(|m| m.deleting.is_none() && m.node_ref.is_none())
    {
        if let Some(why) = &m.status_refused {
            let policy = why.split(':').next().unwrap_or_default();
            let fix = if policy.ends_with("paused-node-refs.capstan.dev") {
                NODE_REF_POLICY_FIX.replace("<name>", policy)
            } else {
                format!("the admission policy {policy} refuses Cluster API's status patch of this Machine: read its message and fix what it guards")
            };
            return Stop {
                kind: "stall",
                object: format!("Machine/{}", m.name),
                condition: format!("no nodeRef: ValidatingAdmissionPolicy {why} (Cluster API's whole status patch refused: nodeRef, addresses, phase)"),
                fix,
            };
        }
    }
    if let Some(t) = &w.tcp {
        if t.annotations.contains_key(ANN_PAUSED) {
            let owners: Vec<String> = t
                .owners
                .get(ANN_PAUSED)
                .map(|o| o.iter().cloned().collect())
                .unwrap_or_default();
            return Stop {
                kind: "stall",
                object: format!("TalosControlPlane/{cp}"),
                condition: format!("paused (cluster.x-k8s.io/paused, managed by {})", owners.join(", ")),
                fix: format!("the unpause Job of phase workers lifts it once no kubeadm etcd is left; by hand: `kubectl -n {} annotate taloscontrolplanes.controlplane.cluster.x-k8s.io {cp} cluster.x-k8s.io/paused-`", w.facts.namespace),
            };
        }
        if let Some(why) = &t.waiting {
            return Stop {
                kind: "stall",
                object: format!("TalosControlPlane/{cp}"),
                condition: why.clone(),
                fix: "the control-plane provider scales down only with every machine booted, with a nodeRef and etcd healthy: find the machine that is not".into(),
            };
        }
    }
    if let Some(ms) = w.machine_sets.iter().find(|m| m.hold.is_some()) {
        return Stop {
            kind: "stall",
            object: format!("MachineSet/{}", ms.name),
            condition: ms.hold.clone().unwrap_or_default(),
            fix: "Cluster API holds worker scale-ups and remediations while the control plane is provisioning or upgrading: the control plane's rollout must finish first".into(),
        };
    }
    if let Some((name, why)) = w
        .health_checks
        .iter()
        .find_map(|(n, c)| c.short_circuit.as_ref().map(|s| (n, s)))
    {
        return Stop {
            kind: "stall",
            object: format!("MachineHealthCheck/{name}"),
            condition: why.clone(),
            fix: "Cluster API rounds maxUnhealthy down: a pool of fewer than 3 Machines at 40% never remediates one; set the pool's `healthCheck.maxUnhealthy` to 100% or grow the pool".into(),
        };
    }
    if let Some(v) = w.vms.iter().find(|v| {
        v.control_plane
            && !v.gone
            && v.address.is_none()
            && w.t >= v.created + super::model::IP_AFTER
    }) {
        return Stop {
            kind: "stall",
            object: format!("IPAddressClaim/{}", v.name),
            condition: "waits: the control-plane pool has no free address".into(),
            fix: "the control plane's pool needs replicas + 1 addresses (capstan check: endpoint-strategy)".into(),
        };
    }
    if let Some(why) = &w.denied_message {
        return Stop {
            kind: "stall",
            object: "Machine (new)".into(),
            condition: format!("its creation was refused: {why}"),
            fix: "read the admission policy's message (capstan plan)".into(),
        };
    }
    Stop {
        kind: "stall",
        object: format!("Cluster/{}", w.facts.cluster),
        condition: format!("not settled: {missing}"),
        fix: "the model found no single object to blame: run again with --format json and read the machines and members".into(),
    }
}

/// What keeps a cluster from its steady state (every phase from `workers` on): `None` when
/// the control plane and every pool run as declared, etcd members are the control-plane
/// Machines, and nothing waits.
pub fn unsettled(w: &World) -> Option<String> {
    let Some(tcp) = w.tcp.as_ref() else {
        return Some("no TalosControlPlane".into());
    };
    if tcp.annotations.contains_key(ANN_PAUSED) {
        return Some("the control plane is paused".into());
    }
    if !w.api_up() {
        return Some("the API does not answer through the endpoint".into());
    }
    let cp: Vec<_> = w
        .machines
        .iter()
        .filter(|m| m.deployment.is_none())
        .collect();
    if cp.len() as u64 != tcp.replicas || cp.iter().any(|m| m.deleting.is_some()) {
        return Some(format!(
            "{} control-plane Machines for {} replicas",
            cp.len(),
            tcp.replicas
        ));
    }
    if let Some(m) = cp.iter().find(|m| {
        m.version != tcp.version || m.infra_template != tcp.infra_template || m.config != tcp.config
    }) {
        return Some(format!("control-plane Machine {} is outdated", m.name));
    }
    if let Some(m) = cp.iter().find(|m| m.node_ref.is_none()) {
        return Some(format!("control-plane Machine {} has no nodeRef", m.name));
    }
    let names: BTreeSet<&str> = cp.iter().map(|m| m.name.as_str()).collect();
    let members: BTreeSet<&str> = w.members.iter().map(|m| m.name.as_str()).collect();
    if names != members || w.members.iter().any(|m| m.learner) {
        return Some(format!(
            "etcd members {:?} are not the control-plane Machines {:?}",
            members, names
        ));
    }
    for (d, md) in &w.deployments {
        let mine: Vec<_> = w
            .machines
            .iter()
            .filter(|m| m.deployment.as_deref() == Some(d.as_str()))
            .collect();
        if mine.len() as u64 != md.replicas || mine.iter().any(|m| m.deleting.is_some()) {
            return Some(format!(
                "{d}: {} Machines for {} replicas",
                mine.len(),
                md.replicas
            ));
        }
        if let Some(m) = mine.iter().find(|m| {
            m.infra_template != md.infra_template
                || m.config != md.bootstrap_template
                || m.version != md.version
        }) {
            return Some(format!("{d}: Machine {} is outdated", m.name));
        }
        if let Some(m) = mine.iter().find(|m| m.node_ref.is_none()) {
            return Some(format!("{d}: Machine {} has no nodeRef", m.name));
        }
    }
    None
}

/// The state for the table.
pub fn snapshot(w: &World, gaps_from: usize) -> Snapshot {
    let mut machines = Vec::new();
    let mut groups: Vec<(String, Option<String>, u64)> = Vec::new();
    if let Some(t) = &w.tcp {
        groups.push(("control plane".into(), None, t.replicas));
    }
    for (d, md) in &w.deployments {
        groups.push((d.clone(), Some(d.clone()), md.replicas));
    }
    for (label, dep, want) in groups {
        let mine: Vec<_> = w
            .machines
            .iter()
            .filter(|m| m.deployment == dep && m.deleting.is_none())
            .collect();
        let versions: BTreeSet<String> = mine.iter().map(|m| m.version.clone()).collect();
        machines.push((
            label,
            mine.len(),
            want,
            mine.iter().filter(|m| m.node_ref.is_some()).count(),
            versions.into_iter().collect(),
        ));
    }
    let endpoint = if w.endpoint.on_vip {
        let vip = w.endpoint.vip.clone().unwrap_or_default();
        let holder = w.endpoint.holder.clone();
        (
            format!("VIP {vip}"),
            holder.map(|h| vec![(h, true)]).unwrap_or_default(),
        )
    } else {
        (
            "load balancer".into(),
            w.endpoint
                .backends
                .iter()
                .map(|b| (b.clone(), w.serves(b)))
                .collect(),
        )
    };
    Snapshot {
        t: w.t,
        etcd: w.etcd_counts(),
        members: w
            .members
            .iter()
            .map(|m| {
                (
                    m.name.clone(),
                    if m.kubeadm { "kubeadm" } else { "talos" },
                    if m.learner { "learner" } else { "voter" },
                    w.member_alive(m),
                )
            })
            .collect(),
        machines,
        paused: w.tcp.as_ref().and_then(|t| {
            t.annotations.contains_key(ANN_PAUSED).then(|| {
                t.owners
                    .get(ANN_PAUSED)
                    .map(|o| o.iter().cloned().collect())
                    .unwrap_or_default()
            })
        }),
        policies: w
            .policies
            .values()
            .filter(|p| p.bound)
            .map(|p| p.name.clone())
            .collect(),
        endpoint,
        longest_gap: w.api_gaps[gaps_from.min(w.api_gaps.len())..]
            .iter()
            .map(|(_, l)| *l)
            .max()
            .unwrap_or(0),
    }
}

/// Which phases come after `phase`, and `phase` itself, up to `until`.
pub fn phases_from(phase: Phase, until: Phase) -> Vec<Phase> {
    let all = [
        Phase::Prepare,
        Phase::ControlPlane,
        Phase::Workers,
        Phase::Complete,
    ];
    let rank = |p: Phase| all.iter().position(|x| *x == p).unwrap_or(0);
    all.iter()
        .copied()
        .filter(|p| rank(*p) >= rank(phase) && rank(*p) <= rank(until))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rehearse::model::{Facts, World};

    fn world(voters: &[&str], down: &[&str]) -> World {
        let nodes: Vec<String> = voters
            .iter()
            .filter(|n| !down.contains(n))
            .map(|n| n.to_string())
            .collect();
        let mut w = World::kubeadm(Facts::default(), &nodes, &[]);
        for d in down {
            w.members.push(crate::rehearse::model::Member {
                name: d.to_string(),
                kubeadm: true,
                learner: false,
            });
        }
        w
    }

    #[test]
    fn a_step_one_failure_from_losing_quorum_is_a_stop() {
        assert_eq!(quorum_risk(&world(&["a", "b", "c"], &[])), None);
        let stop = quorum_risk(&world(&["a", "b", "c"], &["c"])).unwrap();
        assert_eq!(stop.kind, "quorum");
        assert!(
            stop.condition.contains("3 voters, 2 up, quorum 2"),
            "{stop:?}"
        );
        // Five voters, one down: still one failure to spare.
        assert_eq!(
            quorum_risk(&world(&["a", "b", "c", "d", "e"], &["e"])),
            None
        );
        // A single voter tolerates nothing by design: not a risk a step took.
        assert_eq!(quorum_risk(&world(&["a"], &[])), None);
    }
}
