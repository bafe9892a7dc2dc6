//! A test model of what the providers and Kubernetes do with capstan's migration objects,
//! written from their source (the files and lines are cited below), with the rendered Job
//! scripts run for real under `sh` against it.
//!
//! What is modelled, and from where:
//! - CACPPT v0.5.12 `taloscontrolplane_controller.go`: a paused TalosControlPlane (or
//!   Cluster) is not reconciled (117-120); each reconcile runs the etcd audit first, then
//!   the machines (226-239); the audit waits while any control-plane Machine lacks a
//!   nodeRef, then force-removes every etcd member not named after one (`etcd.go`
//!   164-257); machines are created one per reconcile, infrastructure first, then the
//!   bootstrap config, then the Machine (333-410); with as many Machines as replicas and
//!   `status.bootstrapped` false it lists `/var/lib/etcd/member` on every machine (all need
//!   an address) and, if none has it, sends the Bootstrap RPC to the first address, which
//!   starts a second, empty etcd on a node that has not joined yet (412-495, 778-818).
//! - CAPI: a Machine gets its nodeRef only from a Node with its providerID
//!   (`machine_controller_noderef.go` 71-117), and a Talos node on vSphere has one only
//!   with a cloud provider (B2); CAPV sets the Machine's providerID from the VM.
//! - Kubernetes: the ValidatingAdmissionPolicy as rendered, its CEL evaluated by the `cel`
//!   crate with the TalosControlPlane as `params` (missing: denied, failurePolicy Fail);
//!   server-side apply field ownership of annotations (structured-merge-diff
//!   `merge/update.go`: an Update that changes a field takes it from every other manager;
//!   one that removes it removes it from all; an apply drops only fields no other manager
//!   owns).
//! - Argo CD: an Application sync applies the rendered objects with server-side apply
//!   (manager `argocd-controller`), then runs the `Sync` hook Jobs, with the Job
//!   controller's retries (`backoffLimit`); self-heal re-applies what drifted from git.
//!
//! The Job scripts reach the model through `kubectl` and `sleep` shims that pass each call
//! over a FIFO to a thread holding the model: calls are answered one at a time, the
//! controllers run between calls, and `sleep` advances the model's clock, so every run is
//! deterministic. Faults are injected per call (an error, a timeout, unparsable output) or
//! by killing the Job's process group right after a given call.

use crate::util::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

const NS: &str = "lab-f";
const CLUSTER: &str = "lab-f";
const TCP: &str = "lab-f-cp";
const ANN_PAUSED: &str = "cluster.x-k8s.io/paused";
const ARGO: &str = "argocd-controller";
const KUBECTL_ANNOTATE: &str = "kubectl-annotate";
/// The kubeadm control-plane nodes (and etcd members) of the modelled cluster.
const KUBEADM: [&str; 3] = ["lab-f-cp-1", "lab-f-cp-2", "lab-f-cp-3"];

/// When a VM created at t reaches each stage (seconds): vSphere clone and boot give an
/// address, Talos joins etcd through the `kubernetes` endpoints, the kubelet registers.
const IP_AFTER: u64 = 90;
const JOIN_AFTER: u64 = 150;
const NODE_AFTER: u64 = 170;

#[derive(Debug, Clone)]
struct Vm {
    name: String,
    control_plane: bool,
    created: u64,
    /// Joined the existing etcd (has `/var/lib/etcd/member`).
    joined: bool,
    /// Was sent the Bootstrap RPC before joining: runs an etcd of its own.
    own_etcd: bool,
    /// Its Machine was deleted: the VM is powered off.
    gone: bool,
    /// Seconds from creation to its Node: VMs boot at slightly different speeds.
    node_after: u64,
}

#[derive(Debug, Clone)]
struct Machine {
    name: String,
    control_plane: bool,
    vm: String,
    provider_id: String,
    node_ref: Option<String>,
}

#[derive(Debug, Clone, Default)]
struct Tcp {
    replicas: u64,
    annotations: BTreeMap<String, String>,
    /// Field managers of each annotation (server-side apply bookkeeping).
    owners: BTreeMap<String, BTreeSet<String>>,
    bootstrapped: bool,
}

/// A rendered admission policy: what it matches, its CEL, and its binding's parameter.
#[derive(Debug, Clone, Default)]
struct Policy {
    namespace: String,
    /// (API group, resource, operation).
    rules: Vec<(String, String, String)>,
    /// objectSelector: label key and the value it must have (`None`: must exist).
    labels: Vec<(String, Option<String>)>,
    conditions: Vec<String>,
    validations: Vec<String>,
    param: String,
    deny_without_param: bool,
    fail_closed: bool,
}

/// A fault injected into one kubectl call (1-based index among the Job's calls).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The API answers 429.
    Fail(usize),
    /// The request times out after 20 s.
    Timeout(usize),
    /// Exit 0 with output that is not what was asked (a proxy's error page).
    Garbage(usize),
    /// The Job's pod is killed right after the call that removes the pause.
    KillAfterUnpause,
    /// Every call whose arguments contain this answers 429, this many times in a row (a
    /// throttled API, not one dropped request).
    FailMatching(&'static str, usize),
    /// Exit 0 with nothing: a stale, empty read (a restarted API server's cache).
    Empty(usize),
    /// Exit 0 with one word that is not a name.
    GarbageWord(usize),
}

#[derive(Debug, Default, Clone)]
struct World {
    t: u64,
    tcp: Option<Tcp>,
    machines: Vec<Machine>,
    vms: Vec<Vm>,
    secrets: BTreeSet<String>,
    /// Admission policies by name.
    policies: BTreeMap<String, Policy>,
    pools: BTreeMap<String, u64>,
    /// Whether a vSphere cloud provider sets Node.spec.providerID (without it no Machine
    /// ever gets a nodeRef, and the audit never runs).
    cpi: bool,
    /// etcd members: (name, is kubeadm).
    members: Vec<(String, bool)>,
    /// kubeadm control-plane nodes still running (each with its etcd static Pod).
    kubeadm_nodes: Vec<String>,
    /// kubeadm etcd Pods that keep running after their member was removed from the list
    /// (an operator error the unpause Job must catch).
    stray_etcd_pods: Vec<String>,
    seq: u64,
    calls: usize,
    /// Every kubectl call's arguments, in order.
    trace: Vec<String>,
    fault: Option<Fault>,
    /// Set when the kill fault fired.
    kill_now: bool,
    /// How many `FailMatching` failures were answered.
    failed_matching: usize,
    /// Seconds from a VM's creation to its Node (default [`NODE_AFTER`]).
    node_after: u64,
    /// The infrastructure fails every control-plane machine after this many (a vSphere
    /// clone error): the provider keeps trying.
    cp_create_limit: Option<usize>,
    /// The shell the Jobs run under (the image's `/bin/sh`).
    shell: String,
    /// Seconds the TalosControlPlane was unpaused with replicas while kubeadm etcd members
    /// existed: the window the scale Job opens.
    unpaused_with_kubeadm: u64,
    // What happened.
    second_etcd: Vec<String>,
    audit_removed_kubeadm: Vec<String>,
    audit_removed_talos: Vec<String>,
    denied: usize,
    /// nodeRef updates the admission policy refused.
    node_refs_denied: usize,
    log: Vec<String>,
}

impl World {
    /// A kubeadm cluster with three control-plane nodes, and a management cluster that
    /// holds nothing of it yet.
    fn kubeadm(cpi: bool) -> World {
        let names: Vec<String> = (1..=3).map(|i| format!("lab-f-cp-{i}")).collect();
        World {
            cpi,
            members: names.iter().map(|n| (n.clone(), true)).collect(),
            kubeadm_nodes: names,
            node_after: NODE_AFTER,
            shell: "sh".into(),
            ..World::default()
        }
    }

    /// Cluster API's HasPaused: the annotation is there, whatever its value.
    fn paused(&self) -> bool {
        self.tcp
            .as_ref()
            .is_some_and(|t| t.annotations.contains_key(ANN_PAUSED))
    }

    fn cp_machines(&self) -> usize {
        self.machines.iter().filter(|m| m.control_plane).count()
    }

    fn talos_members(&self) -> usize {
        self.members.iter().filter(|(_, k)| !k).count()
    }

    /// One reconcile of every controller, then the clock.
    fn tick(&mut self) {
        self.vms_progress();
        self.capi_node_refs();
        self.cacppt();
        self.machinesets();
    }

    fn advance(&mut self, secs: u64) {
        for _ in 0..secs {
            if self.tcp.as_ref().is_some_and(|t| t.replicas > 0)
                && !self.paused()
                && self.members.iter().any(|(_, kubeadm)| *kubeadm)
            {
                self.unpaused_with_kubeadm += 1;
            }
            self.t += 1;
            self.tick();
        }
    }

    fn vms_progress(&mut self) {
        let t = self.t;
        let etcd_exists = !self.members.is_empty();
        for vm in self.vms.iter_mut().filter(|v| !v.gone) {
            if vm.control_plane
                && !vm.joined
                && !vm.own_etcd
                && etcd_exists
                && t >= vm.created + JOIN_AFTER
            {
                vm.joined = true;
                self.members.push((vm.name.clone(), false));
            }
        }
    }

    fn node_registered(&self, vm: &Vm) -> bool {
        !vm.gone && self.t >= vm.created + vm.node_after
    }

    fn capi_node_refs(&mut self) {
        if !self.cpi {
            return; // no Node.spec.providerID, so no Machine ever matches a Node
        }
        let registered: BTreeSet<String> = self
            .vms
            .iter()
            .filter(|v| self.node_registered(v))
            .map(|v| format!("vsphere://{}", v.name))
            .collect();
        for i in 0..self.machines.len() {
            let m = &self.machines[i];
            if m.node_ref.is_some() || !registered.contains(&m.provider_id) {
                continue;
            }
            // CAPI patches the Machine's status subresource: admission sees old and new.
            let old = self.machine_json(m, None);
            let new = self.machine_json(m, Some(&m.vm));
            if self.admit(
                &new,
                Some(&old),
                ("cluster.x-k8s.io", "machines/status", "UPDATE"),
            ) {
                let vm = self.machines[i].vm.clone();
                self.machines[i].node_ref = Some(vm);
            } else {
                self.node_refs_denied += 1;
            }
        }
    }

    fn machine_json(&self, m: &Machine, node_ref: Option<&str>) -> Value {
        let mut labels = json!({"cluster.x-k8s.io/cluster-name": CLUSTER});
        if m.control_plane {
            labels["cluster.x-k8s.io/control-plane"] = json!("");
        }
        let mut v = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": m.name, "namespace": NS, "labels": labels},
            "spec": {"clusterName": CLUSTER, "providerID": m.provider_id},
            "status": {"phase": "Provisioned"}
        });
        if let Some(n) = node_ref {
            v["status"]["nodeRef"] = json!({"kind": "Node", "name": n});
        }
        v
    }

    /// CACPPT v0.5.12's reconcile of the TalosControlPlane.
    fn cacppt(&mut self) {
        let Some(tcp) = &self.tcp else { return };
        if tcp.annotations.contains_key(ANN_PAUSED) {
            return;
        }
        // reconcileKubeconfig (647-696): the workload kubeconfig, from the cluster CA.
        if self.secrets.contains("lab-f-ca") {
            self.secrets.insert("lab-f-kubeconfig".into());
        }
        let Some(tcp) = &self.tcp else { return };
        let replicas = tcp.replicas as usize;
        let bootstrapped = tcp.bootstrapped;
        // reconcileEtcdMembers: the audit.
        let cp: Vec<Machine> = self
            .machines
            .iter()
            .filter(|m| m.control_plane)
            .cloned()
            .collect();
        if !cp.is_empty() && cp.iter().all(|m| m.node_ref.is_some()) {
            let hosts: BTreeSet<String> = cp.iter().filter_map(|m| m.node_ref.clone()).collect();
            let (keep, removed): (Vec<_>, Vec<_>) = self
                .members
                .drain(..)
                .partition(|(name, _)| hosts.contains(name));
            self.members = keep;
            for (name, kubeadm) in removed {
                self.log
                    .push(format!("t={} audit removed member {name}", self.t));
                if kubeadm {
                    self.audit_removed_kubeadm.push(name);
                } else {
                    self.audit_removed_talos.push(name);
                }
            }
        }
        // reconcileMachines.
        let n = cp.len();
        if n < replicas {
            self.create_machine(true, None);
        } else if n == replicas && n > 0 && !bootstrapped {
            let vms: Vec<&Vm> = cp
                .iter()
                .filter_map(|m| self.vms.iter().find(|v| v.name == m.vm))
                .collect();
            if vms.iter().any(|v| self.t < v.created + IP_AFTER) {
                return; // "machine … doesn't have an any InternalIP or ExternalIP address yet"
            }
            if vms.iter().any(|v| v.joined) {
                self.set_bootstrapped(); // /var/lib/etcd/member exists: already bootstrapped
                return;
            }
            let mut names: Vec<String> = vms.iter().map(|v| v.name.clone()).collect();
            names.sort();
            let first = names[0].clone();
            if let Some(v) = self.vms.iter_mut().find(|v| v.name == first) {
                v.own_etcd = true;
            }
            self.log
                .push(format!("t={} Bootstrap RPC to {first}", self.t));
            self.second_etcd.push(first);
            self.set_bootstrapped();
        }
    }

    fn set_bootstrapped(&mut self) {
        if let Some(t) = &mut self.tcp {
            t.bootstrapped = true;
        }
    }

    /// The MachineSet controller: one worker Machine per reconcile below the pool's size.
    fn machinesets(&mut self) {
        let pools: Vec<(String, u64)> = self.pools.iter().map(|(k, v)| (k.clone(), *v)).collect();
        for (pool, replicas) in pools {
            let have = self
                .machines
                .iter()
                .filter(|m| !m.control_plane && m.name.starts_with(&format!("{pool}-")))
                .count() as u64;
            if have < replicas {
                self.create_machine(false, Some(&pool));
            }
        }
    }

    /// Create a machine as the providers do: the VSphereMachine first, then the Machine;
    /// each passes admission.
    fn create_machine(&mut self, control_plane: bool, pool: Option<&str>) {
        if control_plane
            && self
                .cp_create_limit
                .is_some_and(|n| self.cp_machines() >= n)
        {
            self.log
                .push(format!("t={} VSphereMachine clone failed", self.t));
            return;
        }
        self.seq += 1;
        let name = match pool {
            Some(p) => format!("{p}-{:05}", self.seq),
            None => format!("{TCP}-{:05}", self.seq),
        };
        let mut labels = json!({"cluster.x-k8s.io/cluster-name": CLUSTER});
        if control_plane {
            labels["cluster.x-k8s.io/control-plane"] = json!("");
        }
        let infra = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "VSphereMachine",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"template": "talos"}
        });
        let machine = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"clusterName": CLUSTER}
        });
        if !self.admit(
            &infra,
            None,
            (
                "infrastructure.cluster.x-k8s.io",
                "vspheremachines",
                "CREATE",
            ),
        ) || !self.admit(&machine, None, ("cluster.x-k8s.io", "machines", "CREATE"))
        {
            self.denied += 1;
            return;
        }
        let node_after = self.node_after + 3 * (self.vms.len() as u64 % 3);
        self.vms.push(Vm {
            name: name.clone(),
            control_plane,
            created: self.t,
            joined: false,
            own_etcd: false,
            gone: false,
            node_after,
        });
        self.machines.push(Machine {
            name: name.clone(),
            control_plane,
            vm: name.clone(),
            provider_id: format!("vsphere://{name}"),
            node_ref: None,
        });
        self.log
            .push(format!("t={} created Machine {name}", self.t));
    }

    /// The admission policies as the API server evaluates them for one request.
    fn admit(
        &self,
        object: &Value,
        old: Option<&Value>,
        (group, resource, op): (&str, &str, &str),
    ) -> bool {
        self.policies
            .values()
            .all(|p| self.admit_one(p, object, old, (group, resource, op)))
    }

    fn admit_one(
        &self,
        p: &Policy,
        object: &Value,
        old: Option<&Value>,
        (group, resource, op): (&str, &str, &str),
    ) -> bool {
        let matches_rule = p
            .rules
            .iter()
            .any(|(g, r, o)| g == group && r == resource && o == op);
        if !matches_rule || object["metadata"]["namespace"] != json!(p.namespace) {
            return true;
        }
        let labels = &object["metadata"]["labels"];
        let selected = p.labels.iter().all(|(k, v)| match v {
            Some(v) => labels[k] == json!(v),
            None => labels.get(k).is_some(),
        });
        if !selected {
            return true;
        }
        let params = if p.param == TCP {
            self.tcp.as_ref().map(|t| {
                let mut v = json!({
                    "apiVersion": "controlplane.cluster.x-k8s.io/v1alpha3",
                    "kind": "TalosControlPlane",
                    "metadata": {"name": TCP, "namespace": NS, "annotations": t.annotations},
                    "spec": {"replicas": t.replicas},
                });
                if t.bootstrapped {
                    v["status"] = json!({"bootstrapped": true});
                }
                v
            })
        } else {
            None
        };
        let eval = |expr: &str| -> Option<bool> {
            let program = cel::Program::compile(expr).ok()?;
            let mut cx = cel::Context::default();
            cx.add_variable("object", object.clone()).ok()?;
            cx.add_variable("oldObject", old.cloned().unwrap_or(Value::Null))
                .ok()?;
            cx.add_variable("params", params.clone().unwrap_or(Value::Null))
                .ok()?;
            match program.execute(&cx).ok()? {
                cel::Value::Bool(b) => Some(b),
                _ => None,
            }
        };
        for c in &p.conditions {
            match eval(c) {
                Some(true) => {}
                Some(false) => return true,
                None => return !p.fail_closed,
            }
        }
        if params.is_none() {
            return !p.deny_without_param;
        }
        p.validations
            .iter()
            .all(|v| eval(v).unwrap_or(!p.fail_closed))
    }

    /// Server-side apply of the TalosControlPlane's annotations and replicas by `manager`.
    fn apply_tcp(&mut self, manager: &str, annotations: &BTreeMap<String, String>, replicas: u64) {
        let tcp = self.tcp.get_or_insert_with(Tcp::default);
        tcp.replicas = replicas;
        for (k, v) in annotations {
            let owners = tcp.owners.entry(k.clone()).or_default();
            if tcp.annotations.get(k) != Some(v) {
                owners.clear(); // a forced apply takes a changed field over
            }
            owners.insert(manager.to_string());
            tcp.annotations.insert(k.clone(), v.clone());
        }
        let mine: Vec<String> = tcp
            .owners
            .iter()
            .filter(|(k, o)| o.contains(manager) && !annotations.contains_key(*k))
            .map(|(k, _)| k.clone())
            .collect();
        for k in mine {
            let owners = tcp.owners.get_mut(&k).expect("owned");
            owners.remove(manager);
            if owners.is_empty() {
                tcp.owners.remove(&k);
                tcp.annotations.remove(&k);
            }
        }
    }

    /// An Update (`kubectl annotate`): a changed or added field is the updater's alone; a
    /// removed one leaves every manager's set.
    fn update_annotation(&mut self, manager: &str, key: &str, value: Option<&str>) {
        let Some(tcp) = &mut self.tcp else { return };
        match value {
            Some(v) => {
                if tcp.annotations.get(key).map(String::as_str) != Some(v) {
                    tcp.annotations.insert(key.to_string(), v.to_string());
                    tcp.owners
                        .insert(key.to_string(), BTreeSet::from([manager.to_string()]));
                }
            }
            None => {
                tcp.annotations.remove(key);
                tcp.owners.remove(key);
            }
        }
    }

    /// A kubeadm control-plane node removed as the runbook says: `kubeadm reset` removes
    /// its etcd member, the node is deleted.
    fn remove_kubeadm_node(&mut self, name: &str) {
        self.members.retain(|(n, _)| n != name);
        self.kubeadm_nodes.retain(|n| n != name);
    }

    /// The management cluster is lost and rebuilt: the workload cluster (VMs, etcd, nodes)
    /// runs on, the new management cluster holds nothing of it.
    fn rebuild_management(&mut self) {
        self.tcp = None;
        self.machines.clear();
        self.secrets.clear();
        self.policies.clear();
        self.pools.clear();
    }

    /// `clusterctl move` brings the Machines back (with their providerID; without status,
    /// so `status.bootstrapped` is gone too).
    fn restore_machines(&mut self) {
        for vm in self.vms.iter().filter(|v| !v.gone && v.control_plane) {
            self.machines.push(Machine {
                name: vm.name.clone(),
                control_plane: true,
                vm: vm.name.clone(),
                provider_id: format!("vsphere://{}", vm.name),
                node_ref: None,
            });
        }
    }

    /// One kubectl call of a Job.
    fn kubectl(&mut self, args: &[String]) -> Reply {
        self.calls += 1;
        self.trace.push(args.join(" "));
        self.tick();
        let call = self.calls;
        match self.fault {
            Some(Fault::Fail(n)) if n == call => {
                return Reply::err(1, "Error from server (TooManyRequests): the server has received too many requests and has asked us to try again later");
            }
            Some(Fault::Timeout(n)) if n == call => {
                self.advance(20);
                return Reply::err(
                    1,
                    "Unable to connect to the server: context deadline exceeded",
                );
            }
            Some(Fault::Empty(n)) if n == call => return Reply::ok(""),
            Some(Fault::GarbageWord(n)) if n == call => return Reply::ok("Unauthorized\n"),
            Some(Fault::Garbage(n)) if n == call => {
                return Reply::ok("<html><body>502 Bad Gateway</body></html>\n");
            }
            Some(Fault::FailMatching(needle, times))
                if self.failed_matching < times && args.iter().any(|a| a.contains(needle)) =>
            {
                self.failed_matching += 1;
                return Reply::err(1, "Error from server (TooManyRequests): the server has received too many requests and has asked us to try again later");
            }
            _ => {}
        }
        let reply = self.kubectl_answer(args);
        if self.fault == Some(Fault::KillAfterUnpause)
            && args.iter().any(|a| a == "cluster.x-k8s.io/paused-")
            && !self.kill_now
        {
            self.kill_now = true;
            return Reply::kill();
        }
        reply
    }

    fn kubectl_answer(&mut self, args: &[String]) -> Reply {
        let mut rest: Vec<&str> = Vec::new();
        let mut workload = false;
        let mut it = args.iter().map(String::as_str).peekable();
        while let Some(a) = it.next() {
            if a.starts_with("--request-timeout=") {
                continue;
            }
            if a.starts_with("--kubeconfig=") {
                workload = true;
                continue;
            }
            if a == "-n" {
                let ns = it.next().unwrap_or_default();
                if ns != NS && ns != "kube-system" {
                    return Reply::err(1, &format!("unexpected namespace {ns}"));
                }
                continue;
            }
            rest.push(a);
        }
        let not_found = |what: &str| {
            Reply::err(
                1,
                &format!("Error from server (NotFound): {what} not found"),
            )
        };
        let tcp_res = "taloscontrolplanes.controlplane.cluster.x-k8s.io";
        match rest.as_slice() {
            ["get", "pods", "-l", "component=etcd", "-o", jsonpath] if workload => {
                assert_eq!(
                    *jsonpath,
                    "jsonpath={range .items[*]}{.metadata.name}{\"\\n\"}{end}"
                );
                let mut out = String::new();
                for n in self.kubeadm_nodes.iter().chain(&self.stray_etcd_pods) {
                    out.push_str(&format!("etcd-{n}\n"));
                }
                Reply::ok(&out)
            }
            ["get", "nodes", "-l", "node-role.kubernetes.io/control-plane", "-o", jsonpath]
                if workload =>
            {
                assert_eq!(
                    *jsonpath,
                    "jsonpath={range .items[*]}{.metadata.name}{\"|\"}{.status.nodeInfo.osImage}{\"\\n\"}{end}"
                );
                let mut out = String::new();
                for n in &self.kubeadm_nodes {
                    out.push_str(&format!("{n}|Ubuntu 22.04.4 LTS\n"));
                }
                for v in self
                    .vms
                    .iter()
                    .filter(|v| v.control_plane && self.node_registered(v))
                {
                    out.push_str(&format!("{}|Talos (v1.10.6)\n", v.name));
                }
                Reply::ok(&out)
            }
            _ if workload => Reply::err(
                3,
                &format!("fake kubectl: unexpected workload call {rest:?}"),
            ),
            ["get", res, name, "-o", template]
                if *res == tcp_res && template.starts_with("go-template=") =>
            {
                assert_eq!(*name, TCP);
                assert_eq!(
                    *template,
                    "go-template={{range $k, $v := .metadata.annotations}}{{if eq $k \"cluster.x-k8s.io/paused\"}}paused{{end}}{{end}}"
                );
                match &self.tcp {
                    None => {
                        not_found("taloscontrolplanes.controlplane.cluster.x-k8s.io \"lab-f-cp\"")
                    }
                    Some(t) => Reply::ok(if t.annotations.contains_key(ANN_PAUSED) {
                        "paused"
                    } else {
                        ""
                    }),
                }
            }
            ["get", res, name, "-o", jsonpath] if *res == tcp_res => {
                assert_eq!(*name, TCP);
                let Some(tcp) = &self.tcp else {
                    return not_found(
                        "taloscontrolplanes.controlplane.cluster.x-k8s.io \"lab-f-cp\"",
                    );
                };
                match *jsonpath {
                    "jsonpath={.metadata.name}" => Reply::ok(TCP),
                    "jsonpath={.status.bootstrapped}" => {
                        Reply::ok(if tcp.bootstrapped { "true" } else { "" })
                    }
                    "jsonpath={.metadata.annotations.cluster\\.x-k8s\\.io/paused}" => Reply::ok(
                        tcp.annotations
                            .get(ANN_PAUSED)
                            .map(String::as_str)
                            .unwrap_or(""),
                    ),
                    other => Reply::err(3, &format!("fake kubectl: unexpected jsonpath {other}")),
                }
            }
            ["get", "machines.cluster.x-k8s.io", "-l", selector, "-o", "name"] => {
                assert_eq!(
                    *selector,
                    "cluster.x-k8s.io/cluster-name=lab-f,cluster.x-k8s.io/control-plane"
                );
                let mut out = String::new();
                for m in self.machines.iter().filter(|m| m.control_plane) {
                    out.push_str(&format!("machine.cluster.x-k8s.io/{}\n", m.name));
                }
                Reply::ok(&out)
            }
            ["get", "machines.cluster.x-k8s.io", "-l", selector, "-o", jsonpath] => {
                assert_eq!(
                    *selector,
                    "cluster.x-k8s.io/cluster-name=lab-f,cluster.x-k8s.io/control-plane"
                );
                assert_eq!(
                    *jsonpath,
                    "jsonpath={range .items[*]}{.metadata.name}{\" \"}{.status.nodeRef.name}{\"\\n\"}{end}"
                );
                let mut out = String::new();
                for m in self.machines.iter().filter(|m| m.control_plane) {
                    out.push_str(&format!(
                        "{} {}\n",
                        m.name,
                        m.node_ref.clone().unwrap_or_default()
                    ));
                }
                Reply::ok(&out)
            }
            ["get", "secret", names @ .., "-o", "name"] => {
                let mut out = String::new();
                for n in names {
                    if !self.secrets.contains(*n) {
                        return not_found(&format!("secrets \"{n}\""));
                    }
                    out.push_str(&format!("secret/{n}\n"));
                }
                Reply::ok(&out)
            }
            ["get", "secret", name, "-o", template] if template.starts_with("go-template=") => {
                assert_eq!(*template, "go-template={{.data.value | base64decode}}");
                if !self.secrets.contains(*name) {
                    return not_found(&format!("secrets \"{name}\""));
                }
                Reply::ok("apiVersion: v1\nkind: Config\n")
            }
            ["patch", res, name, "--subresource=status", "--type=merge", "-p", patch]
                if *res == tcp_res =>
            {
                assert_eq!(
                    (*name, *patch),
                    (TCP, "{\"status\":{\"bootstrapped\":true}}")
                );
                match &mut self.tcp {
                    None => not_found("lab-f-cp"),
                    Some(t) => {
                        t.bootstrapped = true;
                        Reply::ok(
                            "taloscontrolplane.controlplane.cluster.x-k8s.io/lab-f-cp patched\n",
                        )
                    }
                }
            }
            ["annotate", res, name, "cluster.x-k8s.io/paused=true", "--overwrite"]
                if *res == tcp_res =>
            {
                assert_eq!(*name, TCP);
                if self.tcp.is_none() {
                    return not_found("lab-f-cp");
                }
                self.update_annotation(KUBECTL_ANNOTATE, ANN_PAUSED, Some("true"));
                Reply::ok("taloscontrolplane.controlplane.cluster.x-k8s.io/lab-f-cp annotated\n")
            }
            ["annotate", res, name, "cluster.x-k8s.io/paused-"] if *res == tcp_res => {
                assert_eq!(*name, TCP);
                if self.tcp.is_none() {
                    return not_found("lab-f-cp");
                }
                self.update_annotation(KUBECTL_ANNOTATE, ANN_PAUSED, None);
                Reply::ok("taloscontrolplane.controlplane.cluster.x-k8s.io/lab-f-cp annotated\n")
            }
            _ => Reply::err(3, &format!("fake kubectl: unexpected call {rest:?}")),
        }
    }
}

/// A shim's answer.
struct Reply {
    code: String,
    out: String,
    err: String,
}

impl Reply {
    fn ok(out: &str) -> Reply {
        Reply {
            code: "0".into(),
            out: out.into(),
            err: String::new(),
        }
    }
    fn err(code: i32, err: &str) -> Reply {
        Reply {
            code: code.to_string(),
            out: String::new(),
            err: format!("{err}\n"),
        }
    }
    fn kill() -> Reply {
        Reply {
            code: "kill".into(),
            out: String::new(),
            err: String::new(),
        }
    }
}

const SHIM: &str = r#"#!/bin/sh
# Forwards this call to the test's model over a FIFO and replays the answer.
printf '%s\0' "${0##*/}" "$@" > "$SIM/req"
read -r _ < "$SIM/resp"
cat "$SIM/out"
cat "$SIM/err" >&2
code=$(cat "$SIM/code")
if [ "$code" = kill ]; then kill -KILL 0; fi
exit "$code"
"#;

/// How a Job's pod ended.
#[derive(Debug, Clone)]
struct PodRun {
    /// Exit code; `None` when killed.
    code: Option<i32>,
    output: String,
}

/// Run one Job script (one pod) against the model.
fn run_pod(world: &Arc<Mutex<World>>, script: &str) -> PodRun {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let sim = dir.path().to_path_buf();
    let bin = sim.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for name in ["kubectl", "sleep"] {
        std::fs::write(bin.join(name), SHIM).unwrap();
        std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for fifo in ["req", "resp"] {
        let s = std::process::Command::new("mkfifo")
            .arg(sim.join(fifo))
            .status()
            .unwrap();
        assert!(s.success());
    }
    let log = sim.join("pod.log");
    // Only the shims and the shell's own utilities: a Job image has no more.
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let shell = world.lock().unwrap().shell.clone();
    let mut child = std::process::Command::new(&shell)
        .args(["-ec", script])
        .env_clear()
        .env("PATH", path)
        .env("SIM", &sim)
        .env("HOME", &sim)
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(sim.join("pod.err")).unwrap())
        .process_group(0)
        .spawn()
        .unwrap();
    let server = {
        let world = Arc::clone(world);
        let sim = sim.clone();
        std::thread::spawn(move || loop {
            let mut req = Vec::new();
            std::fs::File::open(sim.join("req"))
                .unwrap()
                .read_to_end(&mut req)
                .unwrap();
            let mut args: Vec<String> = req
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            if args.last().is_some_and(String::is_empty) {
                args.pop();
            }
            if args.first().map(String::as_str) == Some("quit") {
                return;
            }
            // A model assertion that fails must not leave the shim waiting forever: it is
            // answered (exit 99) and reported by the test.
            let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut w = world.lock().unwrap_or_else(|e| e.into_inner());
                match args[0].as_str() {
                    "sleep" => {
                        let secs: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
                        w.advance(secs);
                        Reply::ok("")
                    }
                    _ => w.kubectl(&args[1..]),
                }
            }))
            .unwrap_or_else(|e| {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Reply::err(99, &format!("MODEL PANIC on {args:?}: {msg}"))
            });
            std::fs::write(sim.join("out"), &reply.out).unwrap();
            std::fs::write(sim.join("err"), &reply.err).unwrap();
            std::fs::write(sim.join("code"), &reply.code).unwrap();
            std::fs::OpenOptions::new()
                .write(true)
                .open(sim.join("resp"))
                .unwrap()
                .write_all(b"1\n")
                .unwrap();
        })
    };
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > std::time::Duration::from_secs(120) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &format!("-{}", child.id())])
                .status();
            panic!(
                "a Job script ran for over 2 minutes of real time:\n{}{}",
                std::fs::read_to_string(&log).unwrap_or_default(),
                std::fs::read_to_string(sim.join("pod.err")).unwrap_or_default()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    std::fs::OpenOptions::new()
        .write(true)
        .open(sim.join("req"))
        .unwrap()
        .write_all(b"quit\0")
        .unwrap();
    server.join().unwrap();
    let output = format!(
        "{}{}",
        std::fs::read_to_string(&log).unwrap_or_default(),
        std::fs::read_to_string(sim.join("pod.err")).unwrap_or_default()
    );
    assert!(!output.contains("MODEL PANIC"), "{output}");
    PodRun {
        code: status.code(),
        output,
    }
}

/// A Job as the Job controller runs it: a new pod after a failed or killed one, up to
/// `backoffLimit` retries. Returns every pod's run.
fn run_job(world: &Arc<Mutex<World>>, job: &Value) -> Vec<PodRun> {
    let script = job
        .pointer("/spec/template/spec/containers/0/command/2")
        .and_then(Value::as_str)
        .expect("a Job's script");
    let retries = job
        .pointer("/spec/backoffLimit")
        .and_then(Value::as_u64)
        .unwrap_or(6);
    let mut runs = Vec::new();
    for _ in 0..=retries {
        let run = run_pod(world, script);
        world.lock().unwrap().advance(10); // the Job controller's back-off
        let done = run.code == Some(0);
        runs.push(run);
        if done {
            break;
        }
    }
    runs
}

/// lab-f's rendered objects in a phase, with the kubeadm nodes still declared (rendered
/// once per distinct input: the fault tests replay the same phases many times).
fn render_phase(phase: &str, kubeadm: &[&str], templates: &[(&str, &str)]) -> Vec<Value> {
    static CACHE: Mutex<BTreeMap<String, Vec<Value>>> = Mutex::new(BTreeMap::new());
    let key = format!("{phase}|{kubeadm:?}|{templates:?}");
    if let Some(v) = CACHE.lock().unwrap().get(&key) {
        return v.clone();
    }
    let v = render_phase_uncached(phase, kubeadm, templates);
    CACHE.lock().unwrap().insert(key, v.clone());
    v
}

fn render_phase_uncached(phase: &str, kubeadm: &[&str], templates: &[(&str, &str)]) -> Vec<Value> {
    let (_t, repo) = example_copy();
    let file = repo.join("clusters/lab-f/cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let list = |v: &[&str]| format!("[{}]", v.join(", "));
    let mut text = text
        .replace("phase: prepare", &format!("phase: {phase}"))
        .replace(
            "controlPlaneNodes: [lab-f-cp-1, lab-f-cp-2, lab-f-cp-3]",
            &format!("controlPlaneNodes: {}", list(kubeadm)),
        )
        .replace(
            "etcdMembers: [lab-f-cp-1, lab-f-cp-2, lab-f-cp-3]",
            &format!("etcdMembers: {}", list(kubeadm)),
        );
    if phase == "control-plane" {
        text = text.replace(
            "phase: control-plane",
            "phase: control-plane\n    acknowledge: [etcd-audit, control-plane-anti-affinity]",
        );
    }
    std::fs::write(&file, text).unwrap();
    for (name, source) in templates {
        let p = repo.join("templates").join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, source).unwrap();
    }
    let o = capstan(&["render", "clusters/lab-f"], &repo);
    assert_eq!(o.status.code(), Some(0), "{phase}: {}", stderr(&o));
    capstan::yaml::parse_stream(&stdout(&o)).unwrap()
}

fn kind(v: &Value) -> &str {
    v["kind"].as_str().unwrap_or_default()
}

fn is_hook(v: &Value) -> bool {
    v.pointer("/metadata/annotations/argocd.argoproj.io~1hook")
        .is_some()
}

/// Argo CD applies an Application's objects (server-side apply), then runs its hooks.
fn argo_apply(world: &Arc<Mutex<World>>, objects: &[Value]) {
    let mut w = world.lock().unwrap();
    for o in objects.iter().filter(|o| !is_hook(o)) {
        let name = o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match kind(o) {
            "Secret" => {
                w.secrets.insert(name);
            }
            "ValidatingAdmissionPolicy" => {
                let strings = |ptr: &str, key: &str| -> Vec<String> {
                    o.pointer(ptr)
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|c| c[key].as_str().map(str::to_string))
                        .collect()
                };
                let list = |v: &Value| -> Vec<String> {
                    v.as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                };
                let mut rules = Vec::new();
                for r in o
                    .pointer("/spec/matchConstraints/resourceRules")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    for g in list(&r["apiGroups"]) {
                        for res in list(&r["resources"]) {
                            for op in list(&r["operations"]) {
                                rules.push((g.clone(), res.clone(), op));
                            }
                        }
                    }
                }
                let mut labels: Vec<(String, Option<String>)> = o
                    .pointer("/spec/matchConstraints/objectSelector/matchLabels")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.as_str().map(str::to_string)))
                    .collect();
                for e in o
                    .pointer("/spec/matchConstraints/objectSelector/matchExpressions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    assert_eq!(e["operator"], "Exists", "the model knows Exists only");
                    labels.push((e["key"].as_str().unwrap_or_default().to_string(), None));
                }
                let entry = w.policies.entry(name).or_default();
                entry.namespace = o
                    .pointer("/spec/matchConstraints/namespaceSelector/matchLabels/kubernetes.io~1metadata.name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                entry.rules = rules;
                entry.labels = labels;
                entry.conditions = strings("/spec/matchConditions", "expression");
                entry.validations = strings("/spec/validations", "expression");
                entry.fail_closed = o.pointer("/spec/failurePolicy") == Some(&json!("Fail"));
            }
            "ValidatingAdmissionPolicyBinding" => {
                let policy = o
                    .pointer("/spec/policyName")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let p = w
                    .policies
                    .get_mut(policy)
                    .expect("the policy is applied before its binding");
                p.param = o
                    .pointer("/spec/paramRef/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .into();
                p.deny_without_param =
                    o.pointer("/spec/paramRef/parameterNotFoundAction") == Some(&json!("Deny"));
            }
            "TalosControlPlane" => {
                let annotations: BTreeMap<String, String> = o
                    .pointer("/metadata/annotations")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect();
                let replicas = o
                    .pointer("/spec/replicas")
                    .and_then(Value::as_u64)
                    .unwrap_or(1);
                w.apply_tcp(ARGO, &annotations, replicas);
            }
            "MachineDeployment" => {
                let replicas = o
                    .pointer("/spec/replicas")
                    .and_then(Value::as_u64)
                    .unwrap_or(1);
                w.pools.insert(name, replicas);
            }
            _ => {}
        }
        w.tick();
    }
}

fn argo_sync(world: &Arc<Mutex<World>>, objects: &[Value]) -> Vec<PodRun> {
    argo_apply(world, objects);
    let mut runs = Vec::new();
    for job in objects.iter().filter(|o| is_hook(o)) {
        runs.extend(run_job(world, job));
    }
    runs
}

fn assert_no_model_panic(runs: &[PodRun]) {
    for r in runs {
        assert!(!r.output.contains("MODEL PANIC"), "{}", r.output);
    }
}

fn last_ok(runs: &[PodRun]) -> bool {
    assert_no_model_panic(runs);
    runs.last().is_some_and(|r| r.code == Some(0))
}

fn show(runs: &[PodRun]) -> String {
    runs.iter()
        .map(|r| format!("--- pod exit {:?}\n{}", r.code, r.output))
        .collect()
}

/// The control plane after the control-plane phase's first sync: three Talos machines,
/// the kubeadm members present.
fn through_control_plane(cpi: bool, fault: Option<Fault>) -> (Arc<Mutex<World>>, Vec<PodRun>) {
    into_control_plane(World::kubeadm(cpi), fault)
}

/// `world` synced through phase prepare, then into phase control-plane with `fault`.
fn into_control_plane(world: World, fault: Option<Fault>) -> (Arc<Mutex<World>>, Vec<PodRun>) {
    let world = Arc::new(Mutex::new(world));
    let runs = argo_sync(&world, &render_phase("prepare", &KUBEADM, &[]));
    assert!(last_ok(&runs), "{}", show(&runs));
    let cp = render_phase("control-plane", &KUBEADM, &[]);
    {
        let mut w = world.lock().unwrap();
        // The control-plane provider reconciled unpaused in phase prepare: it wrote the
        // workload kubeconfig.
        assert!(w.secrets.contains("lab-f-kubeconfig"));
        w.calls = 0;
        w.fault = fault;
    }
    let runs = argo_sync(&world, &cp);
    world.lock().unwrap().fault = None;
    (world, runs)
}

/// Phase control-plane ten minutes after its first sync: three Talos machines joined, with
/// nodeRefs, the kubeadm members still there, the control plane paused.
fn established() -> Arc<Mutex<World>> {
    let (world, runs) = through_control_plane(true, None);
    assert!(last_ok(&runs), "{}", show(&runs));
    world.lock().unwrap().advance(600);
    world
}

/// A finished migration (only Talos members and nodes) whose management cluster was lost
/// and rebuilt empty.
fn migrated_then_management_lost() -> Arc<Mutex<World>> {
    let world = established();
    {
        let mut w = world.lock().unwrap();
        for n in KUBEADM {
            w.remove_kubeadm_node(n);
        }
        w.rebuild_management();
    }
    world
}

fn assert_safe(w: &World, context: &str) {
    assert!(
        w.second_etcd.is_empty(),
        "{context}: the provider bootstrapped a second etcd on {:?}\n{}",
        w.second_etcd,
        w.log.join("\n")
    );
    assert!(
        w.audit_removed_kubeadm.is_empty(),
        "{context}: the etcd audit removed kubeadm members {:?}\n{}",
        w.audit_removed_kubeadm,
        w.log.join("\n")
    );
    assert!(
        w.audit_removed_talos.is_empty(),
        "{context}: the etcd audit removed running Talos members {:?} (a second control plane)\n{}",
        w.audit_removed_talos,
        w.log.join("\n")
    );
}

#[test]
fn every_phase_of_the_runbook_under_argo_cd() {
    let kubeadm = KUBEADM;
    let (world, runs) = through_control_plane(true, None);
    assert!(last_ok(&runs), "{}", show(&runs));
    {
        let mut w = world.lock().unwrap();
        assert_eq!(w.cp_machines(), 3, "all machines in one window");
        assert!(w.paused(), "paused again");
        assert!(runs[0].output.contains("created in"), "{}", show(&runs));
        assert!(
            w.unpaused_with_kubeadm <= 5,
            "unpaused for {}s: one reconcile per machine takes seconds",
            w.unpaused_with_kubeadm
        );
        // The VMs boot, join etcd as learners and get nodeRefs (a cloud provider is there);
        // the provider stays paused, so its audit never runs.
        w.advance(600);
        assert_eq!((w.talos_members(), w.members.len()), (3, 6));
        assert!(w.machines.iter().all(|m| m.node_ref.is_some()));
        assert_safe(&w, "control-plane, joined");
    }
    // The runbook: one kubeadm control-plane node at a time, each a commit and a sync.
    for (i, node) in kubeadm.iter().enumerate() {
        world.lock().unwrap().remove_kubeadm_node(node);
        let left = &kubeadm[i + 1..];
        if left.is_empty() {
            break;
        }
        let runs = argo_sync(&world, &render_phase("control-plane", left, &[]));
        assert!(last_ok(&runs), "{}", show(&runs));
        let w = world.lock().unwrap();
        assert!(w.paused() && w.cp_machines() == 3, "{}", show(&runs));
        assert_safe(&w, node);
    }
    // Phase workers: git drops the pause, but the Job's re-pause belongs to the
    // kubectl-annotate manager, so server-side apply keeps it (B3) ...
    let workers = render_phase("workers", &[], &[]);
    argo_apply(&world, &workers);
    assert!(
        world.lock().unwrap().paused(),
        "SSA cannot remove a field another manager owns"
    );
    // ... until the Job lifts it, having found no kubeadm etcd in the workload cluster.
    let runs = argo_sync(&world, &workers);
    assert!(last_ok(&runs), "{}", show(&runs));
    {
        let mut w = world.lock().unwrap();
        assert!(!w.paused(), "{}", show(&runs));
        w.advance(600);
        assert_eq!(w.members.len(), 3, "only the Talos members");
        assert!(w.audit_removed_talos.is_empty());
        assert_eq!(
            w.machines.iter().filter(|m| !m.control_plane).count(),
            8,
            "the worker pools scaled (6 + 2)"
        );
        assert_safe(&w, "workers");
    }
    let runs = argo_sync(&world, &render_phase("complete", &[], &[]));
    assert!(
        last_ok(&runs) && runs[0].output.contains("is not paused"),
        "{}",
        show(&runs)
    );
    assert_safe(&world.lock().unwrap(), "complete");
}

#[test]
fn every_kubectl_call_failing_in_turn_keeps_the_control_plane_paused() {
    // How many calls the control-plane Job makes when nothing fails.
    let (world, runs) = through_control_plane(true, None);
    assert!(last_ok(&runs));
    let calls = world.lock().unwrap().calls;
    assert!(calls > 10, "{calls}");
    let mut failed_jobs = 0;
    for n in 1..=calls {
        for fault in [Fault::Fail(n), Fault::Timeout(n), Fault::Garbage(n)] {
            let (world, runs) = through_control_plane(true, Some(fault));
            let mut w = world.lock().unwrap();
            let first = &runs[0];
            if first.code != Some(0) {
                failed_jobs += 1;
            }
            assert!(
                w.paused(),
                "{fault:?}: not paused after the Job\n{}",
                show(&runs)
            );
            // A successful pod created every machine; a failed one never leaves it unpaused.
            if last_ok(&runs) {
                assert_eq!(w.cp_machines(), 3, "{fault:?}\n{}", show(&runs));
            }
            w.advance(900);
            assert_safe(&w, &format!("{fault:?}"));
            assert!(w.paused());
        }
    }
    // Most faults fail the pod: only the waits (for the object, the Secrets, the pause's
    // read-back) absorb a failed call by retrying it.
    assert!(
        failed_jobs > calls,
        "{failed_jobs} of {} runs failed",
        3 * calls
    );
}

/// The unpause Job refuses while the workload cluster still runs a kubeadm etcd, whatever
/// call fails.
#[test]
fn the_unpause_job_never_unpauses_with_kubeadm_etcd_left_whatever_fails() {
    let (world, runs) = through_control_plane(true, None);
    assert!(last_ok(&runs));
    let workers = render_phase("workers", &[], &[]);
    let job = workers.iter().find(|o| is_hook(o)).unwrap().clone();
    {
        let mut w = world.lock().unwrap();
        w.advance(600);
        for n in ["lab-f-cp-1", "lab-f-cp-2"] {
            w.remove_kubeadm_node(n);
        }
        // cluster.yaml says none is left, but lab-f-cp-3's etcd still runs.
        w.stray_etcd_pods.push("lab-f-cp-3".into());
        w.calls = 0;
    }
    argo_apply(&world, &workers);
    let runs = run_job(&world, &job);
    assert!(!last_ok(&runs));
    assert!(
        runs[0]
            .output
            .contains("whose etcd members the audit would force-remove"),
        "{}",
        show(&runs)
    );
    let calls = world.lock().unwrap().calls;
    for n in 1..=calls {
        for fault in [Fault::Fail(n), Fault::Garbage(n)] {
            let mut w = world.lock().unwrap();
            w.fault = Some(fault);
            drop(w);
            let runs = run_job(&world, &job);
            let mut w = world.lock().unwrap();
            w.fault = None;
            assert!(!last_ok(&runs) && w.paused(), "{fault:?}\n{}", show(&runs));
            w.advance(60);
            assert_safe(&w, &format!("{fault:?}"));
        }
    }
}

/// B5: the Job of `main` at 14f394d counted a failed `kubectl get machines` as 0 machines
/// and unpaused an established control plane: the audit then removed every kubeadm member.
/// The fail-closed Job keeps the pause under the same fault.
#[test]
fn a_throttled_api_no_longer_unpauses_an_established_control_plane() {
    let old = include_str!("fixtures/migration/scale-job-14f394d.sh");
    for (old_job, expect_safe) in [(true, false), (false, true)] {
        let world = established(); // every machine has a nodeRef
                                   // The next commit (one kubeadm member gone) syncs and re-runs the Job; the first
                                   // Machine list answers 429.
        world.lock().unwrap().remove_kubeadm_node("lab-f-cp-1");
        let objects = render_phase("control-plane", &KUBEADM[1..], &[]);
        {
            let mut w = world.lock().unwrap();
            w.calls = 0;
            w.fault = None;
        }
        argo_apply(&world, &objects);
        let mut job = objects.iter().find(|o| is_hook(o)).unwrap().clone();
        if old_job {
            job["spec"]["template"]["spec"]["containers"][0]["command"][2] = json!(old);
            job["spec"]["backoffLimit"] = json!(0);
        }
        let script = job
            .pointer("/spec/template/spec/containers/0/command/2")
            .unwrap()
            .as_str()
            .unwrap()
            .to_string();
        let machine_call = script_call_index(&world, &script, "machines.cluster.x-k8s.io");
        world.lock().unwrap().fault = Some(Fault::Fail(machine_call));
        let runs = run_job(&world, &job);
        let mut w = world.lock().unwrap();
        w.fault = None;
        w.advance(60);
        if expect_safe {
            assert_safe(&w, "fail-closed Job");
            assert!(w.paused() && !last_ok(&runs[..1]), "{}", show(&runs));
        } else {
            assert!(
                !w.audit_removed_kubeadm.is_empty(),
                "the old Job was expected to fail open\n{}",
                show(&runs)
            );
        }
    }
}

/// The index (1-based) of the first kubectl call of a script whose arguments contain
/// `needle`, found by a dry run on a copy of the world.
fn script_call_index(world: &Arc<Mutex<World>>, script: &str, needle: &str) -> usize {
    let mut copy = world.lock().unwrap().clone();
    copy.calls = 0;
    copy.fault = None;
    copy.trace.clear();
    let copy = Arc::new(Mutex::new(copy));
    run_pod(&copy, script);
    let trace = copy.lock().unwrap().trace.clone();
    trace
        .iter()
        .position(|args| args.contains(needle))
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("no call with {needle}: {trace:#?}"))
}

/// The pod is killed right after it lifted the pause. The Job controller's next pod finds
/// the machines and re-asserts the pause; with no retry left, Argo CD's self-heal does.
#[test]
fn a_pod_killed_between_unpause_and_repause() {
    let (world, runs) = through_control_plane(true, Some(Fault::KillAfterUnpause));
    assert_eq!(runs[0].code, None, "killed: {}", show(&runs));
    assert!(runs.len() >= 2, "a new pod ran: {}", show(&runs));
    {
        let mut w = world.lock().unwrap();
        assert!(w.paused(), "{}", show(&runs));
        w.advance(900);
        assert_safe(&w, "after the kill");
    }
    // The same kill with no new pod (backoffLimit 0, or a node lost: the pod stays
    // non-terminal for minutes) and nothing re-applying git's pause (Argo CD does not
    // auto-sync a revision whose sync failed): the TalosControlPlane stays unpaused. The
    // nodeRef policy keeps every control-plane Machine without a nodeRef meanwhile, so the
    // etcd audit never runs.
    let world = Arc::new(Mutex::new(World::kubeadm(true)));
    argo_sync(&world, &render_phase("prepare", &KUBEADM, &[]));
    let mut cp = render_phase("control-plane", &KUBEADM, &[]);
    for o in cp.iter_mut().filter(|o| is_hook(o)) {
        o["spec"]["backoffLimit"] = json!(0);
    }
    world.lock().unwrap().fault = Some(Fault::KillAfterUnpause);
    let runs = argo_sync(&world, &cp);
    assert_eq!((runs.len(), runs[0].code), (1, None));
    {
        let mut w = world.lock().unwrap();
        assert!(!w.paused());
        w.advance(1800);
        assert!(!w.paused(), "nothing paused it");
        assert!(w.node_refs_denied > 0 && w.machines.iter().all(|m| m.node_ref.is_none()));
        assert_safe(&w, "unpaused for 30 minutes");
    }
    // When the sync is retried, server-side apply restores git's pause (the Job's Update
    // removed the field from every manager), and the nodeRefs follow.
    argo_apply(&world, &cp);
    let mut w = world.lock().unwrap();
    assert!(w.paused());
    w.advance(60);
    assert!(w.machines.iter().all(|m| m.node_ref.is_some()));
    assert_safe(&w, "retried sync");
}

/// B8: a management cluster rebuilt from git, in every phase of the migration and after
/// it, never bootstraps a second etcd nor removes kubeadm members. Without the guard (the
/// policy and the Job), the provider does exactly that.
#[test]
fn a_management_cluster_rebuilt_from_git() {
    let kubeadm = KUBEADM;
    // Mid control-plane: the Talos machines joined, kubeadm members still there.
    let (world, _) = through_control_plane(true, None);
    world.lock().unwrap().advance(600);
    world.lock().unwrap().rebuild_management();
    let runs = argo_sync(&world, &render_phase("control-plane", &kubeadm, &[]));
    {
        let mut w = world.lock().unwrap();
        assert!(!last_ok(&runs), "{}", show(&runs));
        assert!(w.paused() && w.cp_machines() == 0, "{}", show(&runs));
        w.advance(900);
        assert_safe(&w, "rebuilt in control-plane");
    }
    // With the kubeconfig restored too, the Job sees the Talos nodes and refuses to make a
    // second set of control-plane machines.
    world
        .lock()
        .unwrap()
        .secrets
        .insert("lab-f-kubeconfig".into());
    let runs = argo_sync(&world, &render_phase("control-plane", &kubeadm, &[]));
    assert!(
        !last_ok(&runs) && runs[0].output.contains("lost its Machines"),
        "{}",
        show(&runs)
    );
    assert_eq!(world.lock().unwrap().cp_machines(), 0);

    // After the migration (phase complete), the Secrets arriving late (an operator decrypts
    // them): the policy refuses every machine until the Job has set status.bootstrapped.
    let world = migrated_then_management_lost();
    let complete = render_phase("complete", &[], &[]);
    let without_secrets: Vec<Value> = complete
        .iter()
        .filter(|o| kind(o) != "Secret")
        .cloned()
        .collect();
    argo_apply(&world, &without_secrets);
    {
        let mut w = world.lock().unwrap();
        w.advance(300);
        assert_eq!(w.machines.len(), 0, "no machine before status.bootstrapped");
        assert!(w.denied > 0, "the provider tried and was refused");
    }
    // The Secrets arrive: the Job finds Talos control-plane Nodes but no Machine and
    // refuses, so the policy keeps every new machine out (no second control plane).
    let runs = argo_sync(&world, &complete);
    assert!(
        !last_ok(&runs) && runs[0].output.contains("lost its Machines"),
        "{}",
        show(&runs)
    );
    {
        let mut w = world.lock().unwrap();
        w.advance(900);
        assert_safe(&w, "rebuilt in complete");
        assert_eq!(w.cp_machines(), 0);
    }
    // Restored with `clusterctl move`: the Machines come back (with their providerID, so
    // the policy admits them) without status. The unpaused provider finds etcd data on them
    // and marks the control plane bootstrapped itself, without the RPC; the Job passes.
    world.lock().unwrap().restore_machines();
    let runs = argo_sync(&world, &complete);
    assert!(
        last_ok(&runs) && world.lock().unwrap().tcp.as_ref().unwrap().bootstrapped,
        "{}",
        show(&runs)
    );
    {
        let mut w = world.lock().unwrap();
        w.advance(900);
        assert_safe(&w, "restored in complete");
        assert_eq!(w.cp_machines(), 3);
    }

    // The same rebuild with the render of main at 14f394d (phase complete: no policy, no
    // Job): the provider creates three machines and sends the Bootstrap RPC to one that has
    // not joined yet.
    let world = migrated_then_management_lost();
    let unguarded: Vec<Value> = complete
        .iter()
        .filter(|o| !is_hook(o) && !kind(o).starts_with("ValidatingAdmissionPolicy"))
        .cloned()
        .collect();
    argo_apply(&world, &unguarded);
    let mut w = world.lock().unwrap();
    w.advance(900);
    assert!(
        !w.second_etcd.is_empty(),
        "the model shows B8 without the guard"
    );
}

/// M12: a first sync straight into a phase that makes machines, with the imported
/// Secrets not there yet (sops-secrets-operator still working): the Job does not set
/// status.bootstrapped without them, so the policy refuses every machine and the bootstrap
/// provider never generates a PKI of its own.
#[test]
fn no_machine_before_the_imported_secrets_exist() {
    let complete = render_phase("complete", &[], &[]);
    let no_secrets: Vec<Value> = complete
        .iter()
        .filter(|o| kind(o) != "Secret")
        .cloned()
        .collect();
    let world = Arc::new(Mutex::new(World::kubeadm(true)));
    {
        let mut w = world.lock().unwrap();
        for n in ["lab-f-cp-1", "lab-f-cp-2", "lab-f-cp-3"] {
            w.remove_kubeadm_node(n);
        }
        w.members.push(("talos-a".into(), false)); // a running cluster's etcd
    }
    let runs = argo_sync(&world, &no_secrets);
    {
        let w = world.lock().unwrap();
        assert!(!last_ok(&runs), "{}", show(&runs));
        assert!(
            runs[0]
                .output
                .contains("lab-f-talos and lab-f/lab-f-ca are not both there"),
            "{}",
            show(&runs)
        );
        assert!(
            !w.tcp.as_ref().unwrap().bootstrapped,
            "not set without the Secrets"
        );
        assert_eq!(w.machines.len(), 0);
        assert!(w.denied > 0);
    }
    // The operator creates them; the next sync's Job sets the status, machines follow.
    let runs = argo_sync(&world, &complete);
    assert!(last_ok(&runs), "{}", show(&runs));
    let mut w = world.lock().unwrap();
    w.advance(60);
    assert_eq!(w.cp_machines(), 3);
    assert_safe(&w, "secrets late");
}

/// The policies' CEL, evaluated as the API server would. The bootstrapped guard: the
/// cluster's new machines are refused until status.bootstrapped is true; machines of other
/// clusters and machines moved with a providerID pass; a missing TalosControlPlane refuses.
/// Phase control-plane's nodeRef policy: a control-plane Machine gets its nodeRef only while
/// the TalosControlPlane is paused (whatever the annotation's value); other status updates,
/// workers and Machines that had one pass.
#[test]
fn the_admission_policies_as_the_api_server_evaluates_them() {
    let world = Arc::new(Mutex::new(World::kubeadm(true)));
    argo_apply(&world, &render_phase("control-plane", &KUBEADM, &[]));
    let mut w = world.lock().unwrap().clone();
    let create_machine = ("cluster.x-k8s.io", "machines", "CREATE");
    let create_vsm = (
        "infrastructure.cluster.x-k8s.io",
        "vspheremachines",
        "CREATE",
    );
    let status = ("cluster.x-k8s.io", "machines/status", "UPDATE");
    let machine = |cluster: &str, provider_id: Option<&str>| {
        let mut m = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "m", "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
            "spec": {"clusterName": cluster}});
        if let Some(p) = provider_id {
            m["spec"]["providerID"] = json!(p);
        }
        m
    };
    let vsm = |cluster: &str| {
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "VSphereMachine",
            "metadata": {"name": "m", "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
            "spec": {}})
    };
    assert!(!w.admit(&machine(CLUSTER, None), None, create_machine));
    assert!(!w.admit(&vsm(CLUSTER), None, create_vsm));
    assert!(w.admit(&machine("other", None), None, create_machine));
    assert!(w.admit(&vsm("other"), None, create_vsm));
    assert!(
        w.admit(
            &machine(CLUSTER, Some("vsphere://4203")),
            None,
            create_machine
        ),
        "moved"
    );
    assert!(!w.admit(&machine(CLUSTER, Some("")), None, create_machine));
    w.set_bootstrapped();
    assert!(w.admit(&machine(CLUSTER, None), None, create_machine));
    assert!(w.admit(&vsm(CLUSTER), None, create_vsm));
    let missing = World {
        policies: w.policies.clone(),
        ..World::default()
    };
    assert!(
        !missing.admit(&machine(CLUSTER, None), None, create_machine),
        "no TalosControlPlane: denied"
    );
    // nodeRefs (the TalosControlPlane is paused in git in this phase).
    let cp = Machine {
        name: "lab-f-cp-abcde".into(),
        control_plane: true,
        vm: "lab-f-cp-abcde".into(),
        provider_id: "vsphere://lab-f-cp-abcde".into(),
        node_ref: None,
    };
    let (before, after) = (
        w.machine_json(&cp, None),
        w.machine_json(&cp, Some("lab-f-cp-abcde")),
    );
    assert!(w.paused());
    assert!(
        w.admit(&after, Some(&before), status),
        "paused: the nodeRef is set"
    );
    w.update_annotation(KUBECTL_ANNOTATE, ANN_PAUSED, Some("false"));
    assert!(
        w.admit(&after, Some(&before), status),
        "any value pauses (HasPaused tests the key)"
    );
    w.update_annotation(KUBECTL_ANNOTATE, ANN_PAUSED, None);
    assert!(!w.admit(&after, Some(&before), status), "unpaused: refused");
    assert!(
        w.admit(&before, Some(&before), status),
        "other status updates pass"
    );
    assert!(w.admit(&after, Some(&after), status), "a nodeRef it had");
    let worker = Machine {
        control_plane: false,
        ..cp.clone()
    };
    assert!(w.admit(
        &w.machine_json(&worker, Some("n")),
        Some(&w.machine_json(&worker, None)),
        status
    ));
    // The policy is phase control-plane's only.
    let w2 = Arc::new(Mutex::new(World::kubeadm(true)));
    argo_apply(&w2, &render_phase("workers", &[], &[]));
    assert_eq!(w2.lock().unwrap().policies.len(), 1);
}

/// Without a cloud provider no Machine gets a nodeRef (B2), so the audit never runs: the
/// model reproduces today's accidental safety net, and the happy path holds either way.
#[test]
fn without_a_cloud_provider_no_machine_gets_a_node_ref() {
    let (world, runs) = through_control_plane(false, None);
    assert!(last_ok(&runs));
    let mut w = world.lock().unwrap();
    w.advance(900);
    assert!(w.machines.iter().all(|m| m.node_ref.is_none()));
    assert_eq!(w.talos_members(), 3);
    assert_safe(&w, "no CPI");
}

/// B5 again, as it happens: the API throttles every Machine list for a while. Both reads
/// fail, and the Job keeps the pause instead of reading "no machine".
#[test]
fn a_throttled_machine_list_never_reads_as_no_machine() {
    let world = established();
    world.lock().unwrap().remove_kubeadm_node("lab-f-cp-1");
    let objects = render_phase("control-plane", &["lab-f-cp-2", "lab-f-cp-3"], &[]);
    {
        let mut w = world.lock().unwrap();
        w.fault = Some(Fault::FailMatching("machines.cluster.x-k8s.io", 12));
    }
    let runs = argo_sync(&world, &objects);
    let mut w = world.lock().unwrap();
    assert!(w.failed_matching >= 2, "the fault fired");
    assert!(w.paused(), "{}", show(&runs));
    w.advance(300);
    assert_safe(&w, "throttled");
}

/// The VMs boot in seconds and the third clone fails, so two machines could get nodeRefs
/// inside the window and let the audit run. The nodeRef policy refuses them while the
/// control plane is unpaused; and without the policy (a management cluster where it did
/// not load), the Job's own check closes the window at the first nodeRef.
#[test]
fn no_node_ref_inside_the_window() {
    let fast = || World {
        node_after: 8,
        cp_create_limit: Some(2),
        ..World::kubeadm(true)
    };
    let (world, runs) = into_control_plane(fast(), None);
    {
        let mut w = world.lock().unwrap();
        assert!(w.paused() && w.node_refs_denied > 0, "{}", show(&runs));
        assert!(runs[0].output.contains("only 2 of 3"), "{}", show(&runs));
        w.advance(600);
        assert_safe(&w, "fast boot, policy");
    }
    let world = Arc::new(Mutex::new(fast()));
    argo_sync(&world, &render_phase("prepare", &KUBEADM, &[]));
    let cp: Vec<Value> = render_phase("control-plane", &KUBEADM, &[])
        .into_iter()
        .filter(|o| {
            !o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .contains("paused-node-refs")
        })
        .collect();
    let runs = argo_sync(&world, &cp);
    let mut w = world.lock().unwrap();
    assert!(
        runs[0].output.contains("has a nodeRef") && w.paused(),
        "{}",
        show(&runs)
    );
    w.advance(600);
    assert_safe(&w, "fast boot, no policy");
}

/// A management cluster restored with `clusterctl move` has the Machines but not the
/// status: the guard sets `status.bootstrapped` (the provider would otherwise list the
/// machines' etcd directories, and on a node still joining send the RPC) and says so
/// loudly; the next pod goes on.
#[test]
fn machines_restored_without_status_are_reported_and_guarded() {
    let (world, _) = through_control_plane(true, None);
    {
        let mut w = world.lock().unwrap();
        w.advance(600);
        w.rebuild_management();
        w.secrets.insert("lab-f-kubeconfig".into());
        w.restore_machines();
    }
    let runs = argo_sync(&world, &render_phase("control-plane", &KUBEADM, &[]));
    let mut w = world.lock().unwrap();
    assert!(
        runs[0].code == Some(1)
            && runs[0]
                .output
                .contains("3 control-plane Machines existed before status.bootstrapped was set"),
        "{}",
        show(&runs)
    );
    assert!(
        last_ok(&runs) && w.tcp.as_ref().unwrap().bootstrapped && w.paused(),
        "{}",
        show(&runs)
    );
    w.advance(600);
    assert_safe(&w, "restored");
}

/// The Job image is the user's (alpine/k8s: busybox ash): the whole runbook again under
/// busybox's shell when it is installed (`.ci/run` installs it).
#[test]
fn the_jobs_run_under_busybox_ash_too() {
    if std::process::Command::new("busybox")
        .arg("true")
        .status()
        .is_err()
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "busybox is required in CI (.ci/run installs it)"
        );
        eprintln!("notice: busybox is not installed: the Jobs were run under sh only");
        return;
    }
    let world = Arc::new(Mutex::new(World::kubeadm(true)));
    // busybox runs `sh` as an applet: `busybox sh -ec SCRIPT`.
    let dir = tempfile::tempdir().unwrap();
    let wrapper = dir.path().join("busybox-sh");
    std::fs::write(&wrapper, "#!/bin/sh\nexec busybox sh \"$@\"\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    world.lock().unwrap().shell = wrapper.display().to_string();
    let kubeadm = KUBEADM;
    let runs = argo_sync(&world, &render_phase("prepare", &kubeadm, &[]));
    assert!(last_ok(&runs), "{}", show(&runs));
    world
        .lock()
        .unwrap()
        .secrets
        .insert("lab-f-kubeconfig".into());
    let runs = argo_sync(&world, &render_phase("control-plane", &kubeadm, &[]));
    assert!(
        last_ok(&runs) && world.lock().unwrap().cp_machines() == 3,
        "{}",
        show(&runs)
    );
    {
        let mut w = world.lock().unwrap();
        w.advance(600);
        for n in kubeadm {
            w.remove_kubeadm_node(n);
        }
    }
    let runs = argo_sync(&world, &render_phase("workers", &[], &[]));
    assert!(
        last_ok(&runs) && !world.lock().unwrap().paused(),
        "{}",
        show(&runs)
    );
    assert_safe(&world.lock().unwrap(), "busybox");
}

/// The window is as short as the provider needs: when a clone fails and the provider
/// cannot create every machine, the Job gives up after 30 seconds, pauses, and says how to
/// go on, instead of leaving the control plane unpaused for minutes.
#[test]
fn the_window_is_seconds_even_when_a_machine_cannot_be_created() {
    let (world, runs) = into_control_plane(
        World {
            cp_create_limit: Some(2),
            ..World::kubeadm(true)
        },
        None,
    );
    let mut w = world.lock().unwrap();
    assert!(
        runs[0]
            .output
            .contains("only 2 of 3 control-plane Machines after 30s")
            && runs[0]
                .output
                .contains("replace a failed Talos control-plane machine"),
        "{}",
        show(&runs)
    );
    assert!(w.paused());
    assert!(
        (30..=40).contains(&w.unpaused_with_kubeadm),
        "unpaused for {}s",
        w.unpaused_with_kubeadm
    );
    w.advance(900);
    assert_safe(&w, "clone failure");
}

/// The shell library's functions one by one: each fails on an error, a timeout, output it
/// cannot parse or two reads that disagree, instead of reading them as "nothing there".
#[test]
fn the_job_library_fails_on_every_bad_answer() {
    let world = established();
    let prepare = render_phase("prepare", &KUBEADM, &[]);
    let script = prepare
        .iter()
        .find(|o| is_hook(o))
        .and_then(|j| j.pointer("/spec/template/spec/containers/0/command/2"))
        .and_then(Value::as_str)
        .unwrap();
    let lib = script.rsplit_once("guard || exit 1").unwrap().0.to_string();
    let run = |body: &str, fault: Option<Fault>| {
        let mut copy = world.lock().unwrap().clone();
        copy.calls = 0;
        copy.fault = fault;
        copy.update_annotation(KUBECTL_ANNOTATE, ANN_PAUSED, None);
        let copy = Arc::new(Mutex::new(copy));
        let r = run_pod(&copy, &format!("{lib}\n{body}"));
        let w = copy.lock().unwrap().clone();
        (r, w)
    };
    // Baselines.
    let (r, _) = run(
        "machines || exit 7\necho \"count=$count joined=$joined\"",
        None,
    );
    assert!(r.output.contains("count=3 joined=3"), "{}", r.output);
    let (r, _) = run(
        "workload_kubeconfig && workload || exit 7\necho \"$kubeadm_etcd/$kubeadm_cp/$talos_cp\"",
        None,
    );
    assert!(r.output.contains("3/3/3"), "{}", r.output);
    for fault in [
        Fault::Fail(1),
        Fault::Timeout(1),
        Fault::Garbage(1),
        Fault::GarbageWord(1),
    ] {
        let (r, _) = run("machines || exit 7\necho reached", Some(fault));
        assert_eq!(r.code, Some(7), "machines, {fault:?}: {}", r.output);
        let (r, _) = run(
            "workload_kubeconfig || exit 7\nworkload || exit 8\necho reached",
            Some(match fault {
                Fault::Fail(_) => Fault::Fail(2),
                Fault::Timeout(_) => Fault::Timeout(2),
                Fault::GarbageWord(_) => Fault::GarbageWord(2),
                _ => Fault::Garbage(2),
            }),
        );
        assert_eq!(r.code, Some(8), "workload, {fault:?}: {}", r.output);
        let (r, _) = run(
            "tcp_get '{.status.bootstrapped}' || exit 7\necho reached",
            Some(fault),
        );
        assert!(
            r.code == Some(7) || matches!(fault, Fault::Garbage(_) | Fault::GarbageWord(_)),
            "tcp_get, {fault:?}: {}",
            r.output
        );
    }
    // A stale empty read, first or second: the two reads disagree.
    for n in [1, 2] {
        let (r, _) = run(
            "machines_twice || exit 7\necho reached",
            Some(Fault::Empty(n)),
        );
        assert_eq!(
            r.code,
            Some(7),
            "machines_twice, stale read {n}: {}",
            r.output
        );
        assert!(r.output.contains("disagree"), "{}", r.output);
        let (r, _) = run(
            "workload_kubeconfig || exit 6\nworkload_twice || exit 7\necho reached",
            Some(Fault::Empty(n + 1)),
        );
        assert_eq!(
            r.code,
            Some(7),
            "workload_twice, stale read {n}: {}",
            r.output
        );
    }
    // The pause is retried until it holds: the annotate fails 5 times, then succeeds.
    let (r, w) = run(
        "pause || exit 7\necho held",
        Some(Fault::FailMatching("paused=true", 5)),
    );
    assert!(
        r.output.contains("held") && w.paused() && w.failed_matching == 5,
        "{}",
        r.output
    );
    // ... and reports loudly when it never does.
    let (r, w) = run(
        "pause || exit 7\necho held",
        Some(Fault::FailMatching("paused=true", 100)),
    );
    assert_eq!(r.code, Some(7));
    assert!(
        r.output.contains("COULD NOT PAUSE") && !w.paused(),
        "{}",
        r.output
    );
}

/// The guard alone (phase prepare) under a failure of each of its kubectl calls in turn:
/// a pod that exits 0 has set and read back `status.bootstrapped`; one that fails says so,
/// and the policy keeps every machine out until a later pod sets it.
#[test]
fn every_guard_call_failing_in_turn_never_reports_a_status_it_did_not_set() {
    let prepare = render_phase("prepare", &KUBEADM, &[]);
    let job = prepare.iter().find(|o| is_hook(o)).unwrap().clone();
    let calls = {
        let world = Arc::new(Mutex::new(World::kubeadm(true)));
        argo_apply(&world, &prepare);
        world.lock().unwrap().calls = 0;
        assert!(last_ok(&run_job(&world, &job)));
        let n = world.lock().unwrap().calls;
        n
    };
    assert!(calls >= 5, "{calls}");
    for n in 1..=calls {
        for fault in [
            Fault::Fail(n),
            Fault::Timeout(n),
            Fault::Garbage(n),
            Fault::GarbageWord(n),
            Fault::Empty(n),
        ] {
            let world = Arc::new(Mutex::new(World::kubeadm(true)));
            argo_apply(&world, &prepare);
            {
                let mut w = world.lock().unwrap();
                w.calls = 0;
                w.fault = Some(fault);
            }
            let mut one = job.clone();
            one["spec"]["backoffLimit"] = json!(0);
            let runs = run_job(&world, &one);
            let w = world.lock().unwrap();
            if runs[0].code == Some(0) {
                assert!(
                    w.tcp.as_ref().unwrap().bootstrapped,
                    "{fault:?}: exit 0 without the status\n{}",
                    show(&runs)
                );
            }
            assert!(
                w.machines.is_empty() && w.second_etcd.is_empty(),
                "{fault:?}"
            );
        }
    }
}

/// Phase workers reached without phase control-plane having removed the kubeadm members
/// (the lists emptied in git, the etcd still running): the TalosControlPlane arrives
/// unpaused and the provider creates machines at once, but the Job reads the workload
/// cluster whatever the pause state, finds the kubeadm etcd, and pauses long before the new
/// machines get nodeRefs.
#[test]
fn skipping_phase_control_plane_is_caught_by_the_workers_job() {
    let world = Arc::new(Mutex::new(World::kubeadm(true)));
    let runs = argo_sync(&world, &render_phase("prepare", &KUBEADM, &[]));
    assert!(last_ok(&runs));
    let runs = argo_sync(&world, &render_phase("workers", &[], &[]));
    let mut w = world.lock().unwrap();
    assert!(!last_ok(&runs), "{}", show(&runs));
    assert!(
        runs[0].output.contains("3 kubeadm etcd Pods") && w.paused(),
        "{}",
        show(&runs)
    );
    w.advance(900);
    assert_safe(&w, "phase skipped");
}

/// Back to phase prepare with the control-plane Machines still there (a revert of the
/// phase commits): prepare renders 0 replicas, so the Job pauses the control plane and
/// fails instead of letting the provider scale it down.
#[test]
fn back_to_prepare_with_machines_pauses_and_fails() {
    let world = migrated_then_management_lost();
    world.lock().unwrap().restore_machines();
    let runs = argo_sync(&world, &render_phase("complete", &[], &[]));
    assert!(last_ok(&runs), "{}", show(&runs));
    let runs = argo_sync(&world, &render_phase("prepare", &KUBEADM, &[]));
    let w = world.lock().unwrap();
    assert!(!last_ok(&runs), "{}", show(&runs));
    assert!(
        runs[0].output.contains("3 control-plane Machines exist") && w.paused(),
        "{}",
        show(&runs)
    );
}
