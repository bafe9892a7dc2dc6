//! The provider model: what Cluster API, the Talos control-plane provider (CACPPT), CAPV,
//! the in-cluster IPAM provider, Talos and Kubernetes do with one cluster's objects, second
//! by second. Every behaviour is a row of `assumptions.md` (next to this file), cited here as
//! `[A<n>]`; a behaviour without a row is a bug of the model.
//!
//! The state is deliberately small: names, counts, versions and the few fields the
//! controllers read. The controllers run in a fixed order once per simulated second
//! ([`World::tick`]); nothing depends on wall-clock time or hash order, so a run is
//! deterministic.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use super::admission::{self, Policy, Request};

/// Cluster API's pause annotation (`annotations.HasPaused`: the key, whatever its value).
pub const ANN_PAUSED: &str = "cluster.x-k8s.io/paused";
/// Argo CD's server-side apply field manager.
pub const MANAGER_ARGO: &str = "argocd-controller";
/// The field manager of `kubectl annotate` (an Update).
pub const MANAGER_ANNOTATE: &str = "kubectl-annotate";

/// Seconds from a VM's creation to its address (vSphere clone and boot) \[A20].
pub const IP_AFTER: u64 = 90;
/// Seconds from creation to joining etcd as a learner through the `kubernetes` endpoints
/// \[A21].
pub const JOIN_AFTER: u64 = 150;
/// Seconds from joining to the learner's promotion to voter \[A21].
pub const PROMOTE_AFTER: u64 = 10;
/// Seconds from creation to the kubelet's Node \[A20].
pub const NODE_AFTER: u64 = 170;
/// Seconds a drain takes when every PodDisruptionBudget allows it \[A15].
pub const DRAIN_SECONDS: u64 = 30;
/// Seconds CAPV takes to power off and delete a VM \[A16].
pub const VM_DELETE_SECONDS: u64 = 20;
/// The longest a VIP has no holder after its holder left etcd or stopped \[A24].
pub const VIP_FAILOVER: u64 = 60;

/// Which control-plane provider the flavour runs [A1, A9].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ControlPlaneProvider {
    /// Sidero Labs CACPPT v0.5.12 (flavour `v1beta1`).
    #[default]
    SideroV05,
    /// The community fork (flavour `v1beta2`): v0.5.12's reconcile, plus KCP-style preflight
    /// checks before every scale-up \[A9].
    CommunityV09,
}

/// What the model knows of the cluster besides its objects.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// The cluster's name (Machines carry it in `cluster.x-k8s.io/cluster-name`).
    pub cluster: String,
    /// Its namespace in the management cluster.
    pub namespace: String,
    /// The TalosControlPlane's name.
    pub control_plane: String,
    /// The TalosControlPlane's apiVersion (admission parameters carry it).
    pub control_plane_api_version: String,
    /// The control-plane provider.
    pub provider: ControlPlaneProvider,
    /// Whether a vSphere cloud provider sets `Node.spec.providerID` (without one no Machine
    /// ever gets a nodeRef, B2) \[A13].
    pub cpi: bool,
}

/// A VM and the Talos (or kubeadm) node on it.
#[derive(Debug, Clone)]
pub struct Vm {
    /// VM name = Machine name = hostname = etcd member name \[A16].
    pub name: String,
    /// A control-plane VM.
    pub control_plane: bool,
    /// When CAPV created it.
    pub created: u64,
    /// Its address once the IPAM claim is bound (a pool) or DHCP answered.
    pub address: Option<String>,
    /// Joined the existing etcd (has `/var/lib/etcd/member`).
    pub joined: bool,
    /// When it joined.
    pub joined_at: u64,
    /// Was sent the Bootstrap RPC before joining: runs an etcd of its own.
    pub own_etcd: bool,
    /// Powered off and deleted (its Machine is gone).
    pub gone: bool,
    /// Failed (powered off by a fault): no etcd, no kubelet, the VM object still there.
    pub failed: bool,
    /// When it failed.
    pub failed_at: u64,
    /// Seconds from creation to its Node (VMs boot at slightly different speeds).
    pub node_after: u64,
    /// The Kubernetes version its kubelet runs.
    #[cfg_attr(not(any(test, feature = "testkit")), expect(dead_code, reason = "read by the tests only"))]
    pub kubernetes: String,
    /// Its machine config carries the VIP.
    pub vip_config: bool,
    /// The infrastructure template it was cloned from and its bootstrap config (what
    /// `clusterctl move` restores with its Machine: the VSphereMachine's cloned-from
    /// annotation and the TalosConfig).
    #[cfg_attr(not(any(test, feature = "testkit")), expect(dead_code, reason = "read by the tests only"))]
    pub origin: (String, String),
}

/// An etcd member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its name (the node's hostname).
    pub name: String,
    /// A kubeadm member (a static Pod on a kubeadm control-plane node).
    pub kubeadm: bool,
    /// Still a learner (not yet a voter).
    pub learner: bool,
}

/// A Cluster API Machine.
#[derive(Debug, Clone)]
pub struct Machine {
    /// Its name (and its VM's).
    pub name: String,
    /// The MachineDeployment it belongs to; `None` for a control-plane Machine.
    pub deployment: Option<String>,
    /// The MachineSet that owns it (workers).
    pub machine_set: Option<String>,
    /// `spec.providerID`, set by CAPV from the VM.
    pub provider_id: String,
    /// `status.nodeRef`.
    pub node_ref: Option<String>,
    /// `status.addresses` copied from the infrastructure machine \[A12].
    pub addresses: bool,
    /// `spec.version`.
    pub version: String,
    /// The infrastructure template it was cloned from (CAPI's cloned-from annotation).
    pub infra_template: String,
    /// Control plane: a digest of the TalosControlPlane's `controlPlaneConfig` it was made
    /// with; workers: the bootstrap config template's name.
    pub config: String,
    /// When it was created.
    pub created: u64,
    /// When its deletion started.
    pub deleting: Option<u64>,
    /// Marked for remediation by a MachineHealthCheck.
    pub remediate: bool,
    /// The last refusal of Cluster API's status patch (admission message).
    pub status_refused: Option<String>,
}

impl Machine {
    /// A new Machine (no status yet) of a pool's MachineSet, or of the control plane
    /// (`owner` `None`), stamped from a template: (version, infrastructure template,
    /// config).
    pub fn new(
        name: &str,
        owner: Option<(&str, &str)>,
        (version, infra_template, config): (&str, &str, &str),
        created: u64,
    ) -> Machine {
        Machine {
            name: name.to_string(),
            deployment: owner.map(|(d, _)| d.to_string()),
            machine_set: owner.map(|(_, ms)| ms.to_string()),
            provider_id: format!("vsphere://{name}"),
            node_ref: None,
            addresses: false,
            version: version.to_string(),
            infra_template: infra_template.to_string(),
            config: config.to_string(),
            created,
            deleting: None,
            remediate: false,
            status_refused: None,
        }
    }

    /// The same Machine after Cluster API found its node.
    fn with_node(mut self) -> Machine {
        self.node_ref = Some(self.name.clone());
        self.addresses = true;
        self
    }
}

/// The TalosControlPlane as the management cluster holds it.
#[derive(Debug, Clone, Default)]
pub struct Tcp {
    /// `spec.replicas`.
    pub replicas: u64,
    /// `spec.version`.
    pub version: String,
    /// The infrastructure template's name.
    pub infra_template: String,
    /// A digest of `spec.controlPlaneConfig`.
    pub config: String,
    /// `rolloutStrategy.rollingUpdate.maxSurge`.
    pub max_surge: u64,
    /// Its machine config carries the VIP.
    pub vip_config: bool,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// Field managers of each annotation (server-side apply bookkeeping) \[A30].
    pub owners: BTreeMap<String, BTreeSet<String>>,
    /// Annotation keys in kubectl's last-applied configuration (client-side apply) \[A32].
    pub last_applied: BTreeSet<String>,
    /// `status.bootstrapped`.
    pub bootstrapped: bool,
    /// `status.version`: the lowest version of its Machines \[A5].
    pub status_version: Option<String>,
    /// `status.ready`.
    pub ready: bool,
    /// The `EtcdClusterHealthy` condition \[A6].
    pub etcd_healthy: bool,
    /// Why the provider's last reconcile waited, if it did.
    pub waiting: Option<String>,
}

/// A MachineDeployment.
#[derive(Debug, Clone, Default)]
pub struct Md {
    /// `spec.replicas` (defaulted at creation when git leaves it to the autoscaler).
    pub replicas: u64,
    /// The infrastructure template's name.
    pub infra_template: String,
    /// The bootstrap config template's name.
    pub bootstrap_template: String,
    /// `spec.template.spec.version`.
    pub version: String,
    /// The autoscaler's (min, max) annotations.
    pub autoscaler: Option<(u64, u64)>,
    /// `nodeDrainTimeout`, in seconds (`None`: wait for the drain).
    #[cfg_attr(not(any(test, feature = "testkit")), expect(dead_code, reason = "read by the tests only"))]
    pub drain_timeout: Option<u64>,
}

/// A MachineSet.
#[derive(Debug, Clone, Default)]
pub struct Ms {
    /// Its name.
    pub name: String,
    /// Its MachineDeployment.
    pub deployment: String,
    /// The template it stamps Machines from: (infrastructure, bootstrap, version).
    pub template: (String, String, String),
    /// `spec.replicas`.
    pub replicas: u64,
    /// The preflight check holding its scale-up or remediation, if one does \[A8].
    pub hold: Option<String>,
}

/// A MachineHealthCheck's `maxUnhealthy` (`unhealthyLessThanOrEqualTo` in v1beta2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxUnhealthy {
    /// A number of Machines.
    Count(u64),
    /// A percentage of the Machines it targets, rounded down \[A18].
    Percent(u64),
}

impl Default for MaxUnhealthy {
    fn default() -> MaxUnhealthy {
        MaxUnhealthy::Percent(100)
    }
}

impl MaxUnhealthy {
    /// How many of `machines` may be unhealthy.
    pub fn allowed(self, machines: u64) -> u64 {
        match self {
            MaxUnhealthy::Count(n) => n,
            MaxUnhealthy::Percent(p) => p * machines / 100,
        }
    }
}

impl std::fmt::Display for MaxUnhealthy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MaxUnhealthy::Count(n) => write!(f, "{n}"),
            MaxUnhealthy::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// A MachineHealthCheck (workers only, as capstan renders them).
#[derive(Debug, Clone, Default)]
pub struct Mhc {
    /// The MachineDeployment its selector names.
    pub deployment: String,
    /// Seconds a node may be NotReady before remediation.
    pub unhealthy: u64,
    /// Seconds a Machine may wait for its node.
    pub startup: u64,
    /// `maxUnhealthy`.
    pub max_unhealthy: MaxUnhealthy,
    /// Why its last check did not remediate (more unhealthy Machines than allowed).
    pub short_circuit: Option<String>,
}

/// An object Argo CD (or kubectl) applied and tracks, for prune and for the report.
#[derive(Debug, Clone, Default)]
pub struct LiveObject {
    /// `kind`.
    #[cfg_attr(not(any(test, feature = "testkit")), expect(dead_code, reason = "read by the tests only"))]
    pub kind: String,
    /// `metadata.namespace` (empty: cluster-scoped).
    #[cfg_attr(not(any(test, feature = "testkit")), expect(dead_code, reason = "read by the tests only"))]
    pub namespace: String,
    /// `metadata.name`.
    #[cfg_attr(not(any(test, feature = "testkit")), expect(dead_code, reason = "read by the tests only"))]
    pub name: String,
    /// The object as last applied (what admission sees as `oldObject`).
    pub value: Value,
}

/// The control-plane endpoint and what answers behind it [A23, A24].
#[derive(Debug, Clone, Default)]
pub struct Endpoint {
    /// The control plane's own address pool (strategy `external`), lowest first.
    pub pool: Vec<String>,
    /// The VIP (strategy `vip`).
    pub vip: Option<String>,
    /// The endpoint's name resolves to the VIP (the hand-over happened).
    pub on_vip: bool,
    /// The load balancer's backends: addresses, or kubeadm node names.
    pub backends: Vec<String>,
    /// The VM holding the VIP.
    pub holder: Option<String>,
    /// When the VIP's lease can be taken again after its holder went.
    pub free_at: u64,
}

/// A fault injected into one kubectl call of a Job (1-based index among the calls), or a
/// way the Job's pod ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The API answers 429.
    #[cfg_attr(not(any(test, feature = "testkit")), expect(dead_code, reason = "read by the tests only"))]
    Fail(usize),
    /// The request times out after 20 s.
    #[cfg_attr(not(any(test, feature = "testkit")), expect(dead_code, reason = "read by the tests only"))]
    Timeout(usize),
    /// Exit 0 with output that is not what was asked (a proxy's error page).
    #[cfg_attr(not(any(test, feature = "testkit")), expect(dead_code, reason = "read by the tests only"))]
    Garbage(usize),
    /// The Job's pod is killed right after the call that removes the pause.
    KillAfterUnpause,
    /// Every call whose arguments contain this answers 429, this many times in a row.
    #[cfg_attr(not(any(test, feature = "testkit")), expect(dead_code, reason = "read by the tests only"))]
    FailMatching(&'static str, usize),
    /// Exit 0 with nothing: a stale, empty read.
    #[cfg_attr(not(any(test, feature = "testkit")), expect(dead_code, reason = "read by the tests only"))]
    Empty(usize),
    /// Exit 0 with one word that is not a name.
    #[cfg_attr(not(any(test, feature = "testkit")), expect(dead_code, reason = "read by the tests only"))]
    GarbageWord(usize),
}

/// The management cluster, the workload cluster and vSphere, as the controllers see them.
#[derive(Debug, Clone, Default)]
pub struct World {
    /// What the model knows of the cluster.
    pub facts: Facts,
    /// Simulated seconds.
    pub t: u64,
    /// The TalosControlPlane.
    pub tcp: Option<Tcp>,
    /// `Cluster.spec.paused` (set by `clusterctl move` while it runs).
    pub cluster_paused: bool,
    /// `Cluster.status.controlPlaneReady`: set once the control plane reports ready, and
    /// kept \[A34].
    pub control_plane_ready: bool,
    /// MachineDeployments by name.
    pub deployments: BTreeMap<String, Md>,
    /// MachineSets, in creation order.
    pub machine_sets: Vec<Ms>,
    /// Machines, in creation order.
    pub machines: Vec<Machine>,
    /// VMs, in creation order (add them with [`World::push_vm`]: it keeps the index).
    pub vms: Vec<Vm>,
    /// Each VM's position in `vms`, by name.
    pub vm_index: std::collections::HashMap<String, usize>,
    /// Secrets that exist in the cluster's namespace.
    pub secrets: BTreeSet<String>,
    /// Admission policies by name.
    pub policies: BTreeMap<String, Policy>,
    /// MachineHealthChecks by name.
    pub health_checks: BTreeMap<String, Mhc>,
    /// Objects applied from git, by (kind, namespace, name).
    pub live: BTreeMap<(String, String, String), LiveObject>,
    /// etcd members.
    pub members: Vec<Member>,
    /// kubeadm control-plane nodes still running (each with its etcd static Pod).
    pub kubeadm_nodes: Vec<String>,
    /// kubeadm workers still running.
    pub kubeadm_workers: Vec<String>,
    /// kubeadm etcd Pods that keep running after their member was removed from the list.
    pub stray_etcd_pods: Vec<String>,
    /// The control-plane endpoint.
    pub endpoint: Endpoint,
    /// Pods the autoscaler sees pending, per MachineDeployment (in nodes' worth).
    pub pending: BTreeMap<String, u64>,
    /// Seconds from a VM's creation to its Node (default [`NODE_AFTER`]).
    pub node_after: u64,
    /// The infrastructure fails every control-plane machine after this many.
    pub cp_create_limit: Option<usize>,
    /// The shell the Jobs run under (the image's `/bin/sh`).
    pub shell: String,
    /// A fault for the Jobs' kubectl calls.
    pub fault: Option<Fault>,
    /// kubectl calls answered since the counter was reset.
    pub calls: usize,
    /// Every kubectl call's arguments, in order.
    pub trace: Vec<String>,
    /// Set when the kill fault fired.
    pub kill_now: bool,
    /// How many `FailMatching` failures were answered.
    pub failed_matching: usize,
    /// Sequence for generated names.
    pub seq: u64,
    // What happened.
    /// Seconds the TalosControlPlane was unpaused with replicas while kubeadm etcd members
    /// existed: the window the scale Job opens.
    pub unpaused_with_kubeadm: u64,
    /// VMs sent the Bootstrap RPC (a second, empty etcd).
    pub second_etcd: Vec<String>,
    /// kubeadm members the etcd audit removed.
    pub audit_removed_kubeadm: Vec<String>,
    /// Running Talos members the etcd audit removed.
    pub audit_removed_talos: Vec<String>,
    /// Machines for which the bootstrap provider generated a new Talos PKI (no
    /// `<cluster>-talos` Secret when their TalosConfig was reconciled) \[A10].
    pub generated_pki: Vec<String>,
    /// Machine creations admission refused.
    pub denied: usize,
    /// The last creation refusal's message.
    pub denied_message: Option<String>,
    /// Status patches admission refused.
    pub node_refs_denied: usize,
    /// When quorum was first lost, and the members then.
    pub quorum_lost: Option<(u64, String)>,
    /// Every second the API was unreachable, as (start, length) runs.
    pub api_gaps: Vec<(u64, u64)>,
    /// The lowest worker count per MachineDeployment seen since the counter was reset.
    pub lowest_workers: BTreeMap<String, u64>,
    /// Events, in order.
    pub log: Vec<String>,
}

/// The model behind its mutex (a Job's thread that panicked leaves it usable).
pub(super) fn lock(world: &std::sync::Mutex<World>) -> std::sync::MutexGuard<'_, World> {
    world.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn semver(v: &str) -> (u64, u64, u64) {
    let mut it = v.trim_start_matches('v').split('.').map(|p| {
        p.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse::<u64>()
            .unwrap_or(0)
    });
    (
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
    )
}

impl World {
    /// A kubeadm cluster with these control-plane nodes (each an etcd member) and workers,
    /// and a management cluster that holds nothing of it yet.
    pub fn kubeadm(facts: Facts, control_plane: &[String], workers: &[String]) -> World {
        World {
            facts,
            members: control_plane
                .iter()
                .map(|n| Member {
                    name: n.clone(),
                    kubeadm: true,
                    learner: false,
                })
                .collect(),
            kubeadm_nodes: control_plane.to_vec(),
            kubeadm_workers: workers.to_vec(),
            endpoint: Endpoint {
                backends: control_plane.to_vec(),
                ..Endpoint::default()
            },
            node_after: NODE_AFTER,
            shell: "sh".into(),
            ..World::default()
        }
    }

    pub(super) fn note(&mut self, what: String) {
        self.log.push(format!("t={} {what}", self.t));
    }

    /// Cluster API's HasPaused on the TalosControlPlane.
    pub fn paused(&self) -> bool {
        self.tcp
            .as_ref()
            .is_some_and(|t| t.annotations.contains_key(ANN_PAUSED))
    }

    /// Control-plane Machines, deleting ones included.
    pub fn cp_machines(&self) -> usize {
        self.machines
            .iter()
            .filter(|m| m.deployment.is_none())
            .count()
    }

    /// Talos etcd members.
    pub fn talos_members(&self) -> usize {
        self.members.iter().filter(|m| !m.kubeadm).count()
    }

    /// The VM of a name.
    pub fn vm(&self, name: &str) -> Option<&Vm> {
        self.vm_index.get(name).and_then(|&i| self.vms.get(i))
    }

    /// The VM of a name, to change.
    pub fn vm_mut(&mut self, name: &str) -> Option<&mut Vm> {
        let i = *self.vm_index.get(name)?;
        self.vms.get_mut(i)
    }

    /// Add a VM.
    pub fn push_vm(&mut self, vm: Vm) {
        self.vm_index.insert(vm.name.clone(), self.vms.len());
        self.vms.push(vm);
    }

    /// Whether a VM's kubelet has registered its Node and runs.
    pub fn node_up(&self, vm: &Vm) -> bool {
        !vm.gone && !vm.failed && vm.address.is_some() && self.t >= vm.created + vm.node_after
    }

    /// Whether an etcd member runs.
    pub fn member_alive(&self, m: &Member) -> bool {
        if m.kubeadm {
            return self.kubeadm_nodes.contains(&m.name) || self.stray_etcd_pods.contains(&m.name);
        }
        self.vm(&m.name)
            .is_some_and(|v| !v.gone && !v.failed && v.joined && !v.own_etcd)
    }

    /// (voters, voters alive, learners): etcd's quorum is voters / 2 + 1.
    pub fn etcd_counts(&self) -> (usize, usize, usize) {
        let voters: Vec<&Member> = self.members.iter().filter(|m| !m.learner).collect();
        let alive = voters.iter().filter(|m| self.member_alive(m)).count();
        (voters.len(), alive, self.members.len() - voters.len())
    }

    /// Whether etcd has quorum.
    pub fn etcd_has_quorum(&self) -> bool {
        let (voters, alive, _) = self.etcd_counts();
        voters > 0 && alive > voters / 2
    }

    /// Whether an address (or a kubeadm node name) serves the Kubernetes API: a running
    /// kubeadm control-plane node, or a Talos control-plane VM whose etcd member is a voter
    /// (Talos starts kube-apiserver only once its etcd is healthy) \[A22].
    pub fn serves(&self, backend: &str) -> bool {
        if !self.etcd_has_quorum() {
            return false;
        }
        if self.kubeadm_nodes.iter().any(|n| n == backend) {
            return true;
        }
        self.vms.iter().any(|v| {
            v.control_plane
                && !v.gone
                && !v.failed
                && v.address.as_deref() == Some(backend)
                && self
                    .members
                    .iter()
                    .any(|m| m.name == v.name && !m.learner && !m.kubeadm)
        })
    }

    /// Whether the API answers through the endpoint.
    pub fn api_up(&self) -> bool {
        if self.endpoint.on_vip {
            return self.endpoint.holder.is_some() && self.etcd_has_quorum();
        }
        self.endpoint.backends.iter().any(|b| self.serves(b))
    }

    /// One reconcile of every controller.
    pub fn tick(&mut self) {
        self.vms_progress();
        self.capi_machines();
        self.cacppt();
        self.machine_deployments();
        self.machine_sets_reconcile();
        self.health_checks_reconcile();
        self.autoscaler();
        self.vip();
    }

    /// Advance the clock second by second, every controller reconciling each second.
    pub fn advance(&mut self, secs: u64) {
        for _ in 0..secs {
            if self.tcp.as_ref().is_some_and(|t| t.replicas > 0)
                && !self.paused()
                && self.members.iter().any(|m| m.kubeadm)
            {
                self.unpaused_with_kubeadm += 1;
            }
            self.t += 1;
            self.tick();
            self.watch();
        }
    }

    /// What is recorded each second: quorum, the API, the workers per pool.
    fn watch(&mut self) {
        if self.quorum_lost.is_none() && !self.members.is_empty() && !self.etcd_has_quorum() {
            let (voters, alive, _) = self.etcd_counts();
            let names: Vec<String> = self
                .members
                .iter()
                .map(|m| {
                    let state = if self.member_alive(m) { "up" } else { "down" };
                    format!("{} ({state})", m.name)
                })
                .collect();
            self.quorum_lost = Some((
                self.t,
                format!("{alive} of {voters} voters up: {}", names.join(", ")),
            ));
        }
        if !self.api_up() && (self.tcp.is_some() || !self.kubeadm_nodes.is_empty()) {
            match self.api_gaps.last_mut() {
                Some((start, len)) if *start + *len == self.t => *len += 1,
                _ => self.api_gaps.push((self.t, 1)),
            }
        }
        let counts: Vec<(String, u64)> = self
            .deployments
            .keys()
            .map(|d| {
                let n = self
                    .machines
                    .iter()
                    .filter(|m| m.deployment.as_deref() == Some(d) && m.node_ref.is_some())
                    .filter(|m| self.vm(&m.name).is_some_and(|v| self.node_up(v)))
                    .count() as u64;
                (d.clone(), n)
            })
            .collect();
        for (d, n) in counts {
            if let Some(low) = self.lowest_workers.get_mut(&d) {
                *low = (*low).min(n);
            }
        }
    }

    /// Start counting the lowest number of running workers per pool from now.
    pub fn count_workers_from_now(&mut self) {
        self.lowest_workers = self
            .deployments
            .keys()
            .map(|d| (d.clone(), u64::MAX))
            .collect();
        self.watch();
    }

    /// vSphere and Talos: addresses, etcd joins and promotions [A20, A21].
    fn vms_progress(&mut self) {
        let t = self.t;
        // IPAM: a control-plane VM's claim is bound to the pool's lowest free address; the
        // address is held until its Machine is gone [A23].
        let held: BTreeSet<String> = self
            .vms
            .iter()
            .filter(|v| !v.gone)
            .filter_map(|v| v.address.clone())
            .collect();
        let mut taken = held;
        let pool = self.endpoint.pool.clone();
        let etcd_ok = self.etcd_has_quorum();
        let mut joins = Vec::new();
        let mut dhcp = 0u64;
        for vm in self.vms.iter_mut().filter(|v| !v.gone && !v.failed) {
            if vm.address.is_none() && t >= vm.created + IP_AFTER.min(vm.node_after) {
                if vm.control_plane && !pool.is_empty() {
                    if let Some(a) = pool.iter().find(|a| !taken.contains(*a)) {
                        taken.insert(a.clone());
                        vm.address = Some(a.clone());
                    }
                } else {
                    dhcp += 1;
                    vm.address = Some(format!("dhcp:{}", vm.name));
                }
            }
            if vm.control_plane
                && !vm.joined
                && !vm.own_etcd
                && vm.address.is_some()
                && etcd_ok
                && t >= vm.created + JOIN_AFTER
            {
                vm.joined = true;
                vm.joined_at = t;
                joins.push(vm.name.clone());
            }
        }
        let _ = dhcp;
        for name in joins {
            // Talos joins as a learner and removes a same-named member first [A21].
            self.members.retain(|m| m.name != name);
            self.members.push(Member {
                name: name.clone(),
                kubeadm: false,
                learner: true,
            });
            self.note(format!("{name} joined etcd as a learner"));
        }
        let promote: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.learner)
            .filter(|m| {
                self.vm(&m.name)
                    .is_some_and(|v| !v.failed && !v.gone && t >= v.joined_at + PROMOTE_AFTER)
            })
            .map(|m| m.name.clone())
            .collect();
        if !promote.is_empty() && etcd_ok {
            for m in self
                .members
                .iter_mut()
                .filter(|m| promote.contains(&m.name))
            {
                m.learner = false;
            }
        }
    }

    /// The Machine JSON admission sees.
    pub fn machine_json(&self, m: &Machine, status: Option<(&str, &str)>) -> Value {
        let mut labels = json!({"cluster.x-k8s.io/cluster-name": self.facts.cluster});
        match &m.deployment {
            None => labels["cluster.x-k8s.io/control-plane"] = json!(""),
            Some(d) => labels["cluster.x-k8s.io/deployment-name"] = json!(d),
        }
        let mut v = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": m.name, "namespace": self.facts.namespace, "labels": labels},
            "spec": {"clusterName": self.facts.cluster, "providerID": m.provider_id, "version": m.version},
            "status": {"phase": "Provisioned"}
        });
        if let Some((node, address)) = status {
            v["status"] = json!({
                "phase": "Running",
                "nodeRef": {"kind": "Node", "name": node},
                "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": node}],
            });
        }
        v
    }

    /// The TalosControlPlane as an admission parameter.
    pub fn tcp_json(&self) -> Option<Value> {
        let t = self.tcp.as_ref()?;
        let mut v = json!({
            "apiVersion": self.facts.control_plane_api_version,
            "kind": "TalosControlPlane",
            "metadata": {"name": self.facts.control_plane, "namespace": self.facts.namespace, "annotations": t.annotations},
            "spec": {"replicas": t.replicas, "version": t.version},
        });
        if t.bootstrapped {
            v["status"] = json!({"bootstrapped": true});
        }
        Some(v)
    }

    /// The admission policies judge one request \[A11].
    pub fn admit(
        &self,
        (group, resource, operation): (&str, &str, &str),
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), String> {
        let tcp = self.tcp_json();
        let cp_name = self.facts.control_plane.clone();
        let params = move |kind: &str, name: &str| -> Option<Value> {
            (kind == "TalosControlPlane" && name == cp_name)
                .then(|| tcp.clone())
                .flatten()
        };
        admission::admit(
            &self.policies,
            &Request {
                group,
                resource,
                operation,
                object,
                old,
            },
            &params,
        )
    }

    /// Cluster API's Machine controller: the nodeRef, with the addresses and the phase, in
    /// one status patch that admission accepts or refuses whole [A12, A13]; deletion: drain,
    /// then the VM, then the Machine [A15, A16].
    fn capi_machines(&mut self) {
        let t = self.t;
        for i in 0..self.machines.len() {
            let m = &self.machines[i];
            if m.deleting.is_some() || m.node_ref.is_some() || !self.facts.cpi {
                continue;
            }
            let Some(vm) = self.vm(&m.name) else { continue };
            if !self.node_up(vm) {
                continue;
            }
            let address = vm.address.clone().unwrap_or_default();
            let old = self.machine_json(m, None);
            let new = self.machine_json(m, Some((&m.name, &address)));
            match self.admit(
                ("cluster.x-k8s.io", "machines/status", "UPDATE"),
                &new,
                Some(&old),
            ) {
                Ok(()) => {
                    let m = &mut self.machines[i];
                    m.node_ref = Some(m.name.clone());
                    m.addresses = true;
                    m.status_refused = None;
                }
                Err(e) => {
                    self.node_refs_denied += 1;
                    self.machines[i].status_refused = Some(e);
                }
            }
        }
        // Deletion.
        let mut gone = Vec::new();
        for m in &self.machines {
            let Some(since) = m.deleting else { continue };
            // An unreachable node is drained without waiting [A15].
            let reachable = self.vm(&m.name).is_some_and(|v| self.node_up(v));
            let drain = if m.node_ref.is_some() && reachable {
                DRAIN_SECONDS
            } else {
                0
            };
            if t >= since + drain + VM_DELETE_SECONDS {
                gone.push(m.name.clone());
            }
        }
        for name in gone {
            if let Some(v) = self.vm_mut(&name) {
                v.gone = true;
            }
            self.machines.retain(|m| m.name != name);
            self.note(format!("Machine {name} deleted, its VM powered off"));
            // Talos does not leave etcd on power-off [A17]: a member that did not leave
            // before stays, down.
        }
    }

    fn outdated(&self, tcp: &Tcp, m: &Machine) -> bool {
        m.version != tcp.version || m.infra_template != tcp.infra_template || m.config != tcp.config
    }

    /// CACPPT's reconcile of the TalosControlPlane (v0.5.12 `Reconcile`, `reconcile`) [A1-A9].
    fn cacppt(&mut self) {
        let Some(tcp) = self.tcp.clone() else { return };
        if tcp.annotations.contains_key(ANN_PAUSED) || self.cluster_paused {
            return; // [A1]
        }
        // reconcileKubeconfig: the workload kubeconfig, from the cluster CA.
        let ca = format!("{}-ca", self.facts.cluster);
        if self.secrets.contains(&ca) {
            self.secrets
                .insert(format!("{}-kubeconfig", self.facts.cluster));
        }
        let cp: Vec<Machine> = self
            .machines
            .iter()
            .filter(|m| m.deployment.is_none())
            .cloned()
            .collect();
        // reconcileEtcdMembers: the audit [A2], then the health check [A6].
        if !cp.is_empty() && cp.iter().all(|m| m.node_ref.is_some()) {
            let hosts: BTreeSet<String> = cp.iter().filter_map(|m| m.node_ref.clone()).collect();
            let (keep, removed): (Vec<Member>, Vec<Member>) = self
                .members
                .drain(..)
                .partition(|m| hosts.contains(&m.name));
            self.members = keep;
            for m in removed {
                self.note(format!("the etcd audit removed member {}", m.name));
                if m.kubeadm {
                    self.audit_removed_kubeadm.push(m.name);
                } else {
                    self.audit_removed_talos.push(m.name);
                }
            }
        }
        let live: Vec<&Machine> = cp.iter().filter(|m| m.deleting.is_none()).collect();
        let healthy = !live.is_empty()
            && live.iter().all(|m| {
                m.addresses
                    && self
                        .vm(&m.name)
                        .is_some_and(|v| v.joined && !v.failed && !v.gone && !v.own_etcd)
            })
            && self.members.len() == live.len()
            && self.etcd_has_quorum();
        let mut waiting = None;
        // reconcileMachines [A3, A4].
        let need_rollout: Vec<&Machine> = live
            .iter()
            .copied()
            .filter(|m| self.outdated(&tcp, m))
            .collect();
        let n = cp.len() as u64;
        let scale_down_cp = |w: &mut World, outdated: &[&Machine], waiting: &mut Option<String>| {
            if n <= 1 {
                return;
            }
            // ensureNodesBooted, EtcdClusterHealthy, every Machine with a nodeRef [A4].
            if let Some(m) = cp
                .iter()
                .find(|m| w.vm(&m.name).is_none_or(|v| !w.node_up(v)))
            {
                *waiting = Some(format!(
                    "waiting for all nodes to finish boot sequence ({})",
                    m.name
                ));
                return;
            }
            if !healthy {
                *waiting = Some("waiting for etcd to become healthy before scaling down".into());
                return;
            }
            if let Some(m) = cp.iter().find(|m| m.node_ref.is_none()) {
                *waiting = Some(format!(
                    "one of machines does not have NodeRef ({})",
                    m.name
                ));
                return;
            }
            if cp.iter().any(|m| m.deleting.is_some()) {
                *waiting = Some("a machine is in process of deletion".into());
                return;
            }
            let pick = if outdated.is_empty() {
                cp.iter().min_by_key(|m| (m.created, m.name.clone()))
            } else {
                outdated
                    .iter()
                    .copied()
                    .min_by_key(|m| (m.created, m.name.clone()))
            };
            let Some(pick) = pick else { return };
            let name = pick.name.clone();
            // gracefulEtcdLeave, then delete (a failed leave does not stop the delete) [A4].
            if w.vm(&name).is_some_and(|v| !v.failed && v.joined) {
                w.members.retain(|m| m.name != name);
                w.note(format!("{name} left etcd"));
            }
            if let Some(m) = w.machines.iter_mut().find(|m| m.name == name) {
                m.deleting = Some(w.t);
            }
            w.note(format!("the control-plane provider deletes Machine {name}"));
        };
        if !need_rollout.is_empty() {
            let max = tcp.replicas + tcp.max_surge;
            if n < max {
                self.cp_scale_up(healthy, &mut waiting);
            } else {
                scale_down_cp(self, &need_rollout, &mut waiting);
            }
        } else if n < tcp.replicas {
            self.cp_scale_up(healthy, &mut waiting);
        } else if n > tcp.replicas {
            scale_down_cp(self, &[], &mut waiting);
        } else if n > 0 && !tcp.bootstrapped {
            self.cacppt_bootstrap(&cp);
        }
        // updateStatus [A5].
        let version = self
            .machines
            .iter()
            .filter(|m| m.deployment.is_none())
            .map(|m| m.version.clone())
            .min_by_key(|v| semver(v));
        let ready = self
            .machines
            .iter()
            .filter(|m| m.deployment.is_none())
            .any(|m| self.vm(&m.name).is_some_and(|v| self.node_up(v)));
        self.control_plane_ready |= ready;
        if let Some(t) = &mut self.tcp {
            if version.is_some() {
                t.status_version = version;
            }
            t.ready = ready;
            t.etcd_healthy = healthy;
            t.waiting = waiting;
        }
    }

    /// bootControlPlane, with the fork's preflight first [A3, A9].
    fn cp_scale_up(&mut self, healthy: bool, waiting: &mut Option<String>) {
        if self.facts.provider == ControlPlaneProvider::CommunityV09 {
            let cp: Vec<&Machine> = self
                .machines
                .iter()
                .filter(|m| m.deployment.is_none())
                .collect();
            if !cp.is_empty() && (!healthy || cp.iter().any(|m| m.node_ref.is_none())) {
                *waiting = Some(
                    "scale up on hold: preflight checks (every machine with a node, etcd healthy)"
                        .into(),
                );
                return;
            }
        }
        self.create_machine(None);
    }

    /// With as many Machines as replicas and `status.bootstrapped` false: the Bootstrap RPC
    /// unless a machine has `/var/lib/etcd/member` \[A7].
    fn cacppt_bootstrap(&mut self, cp: &[Machine]) {
        let vms: Vec<Vm> = cp
            .iter()
            .filter_map(|m| self.vm(&m.name).cloned())
            .collect();
        if vms.iter().any(|v| v.address.is_none()) {
            return; // "machine … doesn't have an any InternalIP or ExternalIP address yet"
        }
        if vms.iter().any(|v| v.joined) {
            if let Some(t) = &mut self.tcp {
                t.bootstrapped = true;
            }
            return;
        }
        let mut names: Vec<String> = vms.iter().map(|v| v.name.clone()).collect();
        names.sort();
        let Some(first) = names.first().cloned() else {
            return;
        };
        if let Some(v) = self.vm_mut(&first) {
            v.own_etcd = true;
        }
        self.note(format!("Bootstrap RPC to {first}"));
        self.second_etcd.push(first);
        if let Some(t) = &mut self.tcp {
            t.bootstrapped = true;
        }
    }

    /// Create a machine as the providers do: the VSphereMachine first, then the Machine, each
    /// through admission \[A11]. `deployment` and its MachineSet for a worker.
    pub(super) fn create_machine(&mut self, worker: Option<(&str, &Ms)>) -> bool {
        let control_plane = worker.is_none();
        if control_plane
            && self
                .cp_create_limit
                .is_some_and(|n| self.cp_machines() >= n)
        {
            self.note("VSphereMachine clone failed".into());
            return false;
        }
        let (version, infra, config) = match worker {
            None => {
                let Some(t) = &self.tcp else { return false };
                (
                    t.version.clone(),
                    t.infra_template.clone(),
                    t.config.clone(),
                )
            }
            Some((_, ms)) => (
                ms.template.2.clone(),
                ms.template.0.clone(),
                ms.template.1.clone(),
            ),
        };
        self.seq += 1;
        let name = match worker {
            Some((_, ms)) => format!("{}-{:05}", ms.name, self.seq),
            None => format!("{}-{:05}", self.facts.control_plane, self.seq),
        };
        let mut labels = json!({"cluster.x-k8s.io/cluster-name": self.facts.cluster});
        match worker {
            None => labels["cluster.x-k8s.io/control-plane"] = json!(""),
            Some((d, _)) => labels["cluster.x-k8s.io/deployment-name"] = json!(d),
        }
        let infra_obj = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "VSphereMachine",
            "metadata": {"name": name, "namespace": self.facts.namespace, "labels": labels},
            "spec": {"template": "talos"}
        });
        let machine_obj = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": name, "namespace": self.facts.namespace, "labels": labels},
            "spec": {"clusterName": self.facts.cluster, "version": version}
        });
        let admitted = self
            .admit(
                (
                    "infrastructure.cluster.x-k8s.io",
                    "vspheremachines",
                    "CREATE",
                ),
                &infra_obj,
                None,
            )
            .and_then(|()| {
                self.admit(
                    ("cluster.x-k8s.io", "machines", "CREATE"),
                    &machine_obj,
                    None,
                )
            });
        if let Err(e) = admitted {
            self.denied += 1;
            self.denied_message = Some(e);
            return false;
        }
        // CABPT: a TalosConfig whose cluster has no secrets bundle gets a new one [A10].
        let bundle = format!("{}-talos", self.facts.cluster);
        if !self.secrets.contains(&bundle) {
            self.note(format!(
                "the bootstrap provider generated a new Talos PKI for {name}"
            ));
            self.secrets.insert(bundle);
            self.generated_pki.push(name.clone());
        }
        // writeK8sCASecret: `<cluster>-ca` from the bundle it has, only when absent; the
        // Secret it writes carries none of capstan's annotations [A10].
        let ca = format!("{}-ca", self.facts.cluster);
        if !self.secrets.contains(&ca) {
            self.note(format!(
                "the bootstrap provider created {ca} from its own bundle for {name}"
            ));
            self.secrets.insert(ca);
        }
        let node_after = self.node_after + 3 * (self.vms.len() as u64 % 3);
        let vip_config = control_plane && self.tcp.as_ref().is_some_and(|t| t.vip_config);
        self.push_vm(Vm {
            name: name.clone(),
            control_plane,
            created: self.t,
            address: None,
            joined: false,
            joined_at: 0,
            own_etcd: false,
            gone: false,
            failed: false,
            failed_at: 0,
            node_after,
            kubernetes: version.clone(),
            vip_config,
            origin: (infra.clone(), config.clone()),
        });
        self.machines.push(Machine::new(
            &name,
            worker.map(|(d, ms)| (d, ms.name.as_str())),
            (&version, &infra, &config),
            self.t,
        ));
        self.note(format!("created Machine {name}"));
        true
    }

    /// Talos's VIP: an etcd election among the control-plane nodes whose config carries it,
    /// first come first served; the holder drops it when its etcd stops, and a holder that
    /// could not revoke its lease blocks the next one for up to [`VIP_FAILOVER`] \[A24].
    fn vip(&mut self) {
        if self.endpoint.vip.is_none() {
            return;
        }
        if let Some(h) = self.endpoint.holder.clone() {
            let holding = self.etcd_has_quorum()
                && self.vm(&h).is_some_and(|v| !v.gone && !v.failed)
                && self.members.iter().any(|m| m.name == h);
            if holding {
                return;
            }
            self.endpoint.holder = None;
            self.endpoint.free_at = self.t + VIP_FAILOVER;
            self.note(format!("{h} dropped the VIP"));
        }
        if self.t < self.endpoint.free_at || !self.etcd_has_quorum() {
            return;
        }
        let next = self
            .vms
            .iter()
            .filter(|v| v.control_plane && v.vip_config && !v.gone && !v.failed)
            .filter(|v| self.members.iter().any(|m| m.name == v.name && !m.learner))
            .min_by_key(|v| (v.joined_at, v.name.clone()))
            .map(|v| v.name.clone());
        if let Some(n) = next {
            self.note(format!("{n} holds the VIP"));
            self.endpoint.holder = Some(n);
        }
    }

    /// A kubeadm control-plane node removed as the runbook says: `kubeadm reset` removes its
    /// etcd member, the node is deleted, the load balancer no longer lists it.
    pub fn remove_kubeadm_node(&mut self, name: &str) {
        self.members.retain(|m| m.name != name);
        self.kubeadm_nodes.retain(|n| n != name);
        self.endpoint.backends.retain(|b| b != name);
    }

    /// A VM fails: powered off, its etcd member (if any) down, its node NotReady.
    pub fn fail_vm(&mut self, name: &str) {
        let t = self.t;
        if let Some(v) = self.vm_mut(name) {
            v.failed = true;
            v.failed_at = t;
        }
        self.note(format!("VM {name} failed"));
    }

    /// The management cluster is lost and rebuilt: the workload cluster runs on, the new
    /// management cluster holds nothing of it.
    #[cfg(any(test, feature = "testkit"))]
    pub fn rebuild_management(&mut self) {
        self.tcp = None;
        self.machines.clear();
        self.machine_sets.clear();
        self.deployments.clear();
        self.secrets.clear();
        self.policies.clear();
        self.health_checks.clear();
        self.live.clear();
    }

    /// `clusterctl move` brings back what its object graph holds: the Machines with their
    /// providerID and spec, not their status (so no `status.bootstrapped` either) \[A33].
    #[cfg(any(test, feature = "testkit"))]
    pub fn restore_machines(&mut self) {
        let vms: Vec<Vm> = self
            .vms
            .iter()
            .filter(|v| !v.gone && v.control_plane)
            .cloned()
            .collect();
        for vm in vms {
            self.machines.push(Machine::new(
                &vm.name,
                None,
                (&vm.kubernetes, &vm.origin.0, &vm.origin.1),
                self.t,
            ));
        }
    }

    /// The steady state of a cluster that has run for a while: the TalosControlPlane's and
    /// every MachineDeployment's Machines as git declares them, with nodes, nodeRefs and
    /// etcd members; `status.bootstrapped` and `status.version` set. Used when a rehearsal
    /// starts from phase `complete` (or a cluster without a migration).
    pub fn settle_as_declared(&mut self) {
        let Some(tcp) = self.tcp.clone() else { return };
        // What the controllers tried before the cluster was settled is forgotten.
        self.machine_sets.clear();
        self.denied = 0;
        self.denied_message = None;
        let past = self.t.saturating_sub(3600);
        for _ in 0..tcp.replicas {
            self.seq += 1;
            let name = format!("{}-{:05}", self.facts.control_plane, self.seq);
            self.settled_vm(
                &name,
                true,
                (
                    &tcp.version,
                    (tcp.infra_template.clone(), tcp.config.clone()),
                ),
                tcp.vip_config,
                past,
            );
            self.machines.push(
                Machine::new(
                    &name,
                    None,
                    (&tcp.version, &tcp.infra_template, &tcp.config),
                    past,
                )
                .with_node(),
            );
            self.members.push(Member {
                name,
                kubeadm: false,
                learner: false,
            });
        }
        if let Some(t) = &mut self.tcp {
            t.bootstrapped = true;
            t.status_version = Some(tcp.version.clone());
            t.ready = true;
        }
        self.control_plane_ready = true;
        let deployments: Vec<(String, Md)> = self
            .deployments
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (d, md) in deployments {
            self.seq += 1;
            let ms = Ms {
                name: format!("{d}-{:05}", self.seq),
                deployment: d.clone(),
                template: (
                    md.infra_template.clone(),
                    md.bootstrap_template.clone(),
                    md.version.clone(),
                ),
                replicas: md.replicas,
                hold: None,
            };
            for _ in 0..md.replicas {
                self.seq += 1;
                let name = format!("{}-{:05}", ms.name, self.seq);
                self.settled_vm(
                    &name,
                    false,
                    (
                        &md.version,
                        (md.infra_template.clone(), md.bootstrap_template.clone()),
                    ),
                    false,
                    past,
                );
                self.machines.push(
                    Machine::new(
                        &name,
                        Some((&d, &ms.name)),
                        (&md.version, &md.infra_template, &md.bootstrap_template),
                        past,
                    )
                    .with_node(),
                );
            }
            self.machine_sets.push(ms);
        }
        self.kubeadm_nodes.clear();
        self.kubeadm_workers.clear();
        self.members.retain(|m| !m.kubeadm);
        let pool = self.endpoint.pool.clone();
        self.endpoint.backends = pool;
        self.vip();
    }

    fn settled_vm(
        &mut self,
        name: &str,
        control_plane: bool,
        (version, origin): (&str, (String, String)),
        vip: bool,
        past: u64,
    ) {
        let address = if control_plane && !self.endpoint.pool.is_empty() {
            let held: BTreeSet<String> =
                self.vms.iter().filter_map(|v| v.address.clone()).collect();
            self.endpoint
                .pool
                .iter()
                .find(|a| !held.contains(*a))
                .cloned()
        } else {
            Some(format!("dhcp:{name}"))
        };
        self.push_vm(Vm {
            name: name.to_string(),
            control_plane,
            created: past,
            address,
            joined: control_plane,
            joined_at: past,
            own_etcd: false,
            gone: false,
            failed: false,
            failed_at: 0,
            node_after: self.node_after,
            kubernetes: version.to_string(),
            vip_config: vip,
            origin,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn world() -> World {
        let facts = Facts {
            cluster: "c".into(),
            namespace: "c".into(),
            control_plane: "c-cp".into(),
            control_plane_api_version: "controlplane.cluster.x-k8s.io/v1alpha3".into(),
            provider: ControlPlaneProvider::SideroV05,
            cpi: true,
        };
        World::kubeadm(facts, &[], &[])
    }

    #[test]
    fn versions_compare_numerically() {
        assert!(semver("v1.30.10") > semver("v1.30.9"));
        assert!(semver("v1.31.0") > semver("v1.30.99"));
    }

    #[test]
    fn a_control_plane_rolls_one_machine_at_a_time_and_ends_as_declared() {
        let mut w = world();
        w.tcp = Some(Tcp {
            replicas: 3,
            version: "v1.30.4".into(),
            infra_template: "a".into(),
            config: "x".into(),
            max_surge: 1,
            ..Tcp::default()
        });
        w.settle_as_declared();
        assert_eq!(w.members.len(), 3);
        if let Some(t) = &mut w.tcp {
            t.infra_template = "b".into();
        }
        let mut most = 0;
        for _ in 0..3600 {
            w.advance(1);
            most = most.max(w.cp_machines());
        }
        assert_eq!(most, 4, "replicas + maxSurge at most");
        assert_eq!(w.cp_machines(), 3);
        assert!(w
            .machines
            .iter()
            .all(|m| m.infra_template == "b" && m.node_ref.is_some()));
        assert_eq!(w.members.len(), 3, "{:?}", w.log);
        assert!(w.members.iter().all(|m| !m.learner));
        assert!(w.quorum_lost.is_none());
    }

    #[test]
    fn an_upgrading_control_plane_holds_worker_scale_ups() {
        let mut w = world();
        w.tcp = Some(Tcp {
            replicas: 1,
            version: "v1.31.0".into(),
            status_version: Some("v1.30.4".into()),
            ..Tcp::default()
        });
        let ms = Ms {
            template: ("i".into(), "b".into(), "v1.30.4".into()),
            ..Ms::default()
        };
        assert!(w.preflight(&ms).unwrap().contains("is upgrading"));
        if let Some(t) = &mut w.tcp {
            t.status_version = Some("v1.31.0".into());
        }
        assert_eq!(w.preflight(&ms), None);
        let newer = Ms {
            template: ("i".into(), "b".into(), "v1.32.0".into()),
            ..Ms::default()
        };
        assert!(w
            .preflight(&newer)
            .unwrap()
            .contains("KubernetesVersionSkew"));
    }
}
