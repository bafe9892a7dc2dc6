//! The migration phases on the provider model (`capstan::rehearse`, the same model
//! `capstan rehearse` runs; its assumptions, each with its upstream source, are
//! `src/rehearse/assumptions.md`), with the rendered Job scripts run for real under `sh`
//! against it, and faults injected into the Jobs' kubectl calls.
//!
//! The Job scripts reach the model through `kubectl` and `sleep` shims that pass each call
//! over a FIFO to a thread holding the model: calls are answered one at a time, the
//! controllers run between calls, and `sleep` advances the model's clock, so every run is
//! deterministic. Faults are injected per call (an error, a timeout, unparsable output) or
//! by killing the Job's process group right after a given call.

use crate::util::*;
use capstan::rehearse::argo::{self, SyncMode};
use capstan::rehearse::jobs::{self, PodRun};
use capstan::rehearse::model::{
    ControlPlaneProvider, Facts, Fault, Machine, Member, World, ANN_PAUSED, MANAGER_ANNOTATE,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

const NS: &str = "lab-f";
const CLUSTER: &str = "lab-f";
const KUBECTL_ANNOTATE: &str = MANAGER_ANNOTATE;
/// The kubeadm control-plane nodes (and etcd members) of the modelled cluster.
const KUBEADM: [&str; 3] = ["lab-f-master-1", "lab-f-master-2", "lab-f-master-3"];

/// lab-f's kubeadm cluster, its management cluster empty.
fn lab_f(cpi: bool) -> World {
    let facts = Facts {
        cluster: CLUSTER.into(),
        namespace: NS.into(),
        control_plane: "lab-f-cp".into(),
        control_plane_api_version: "controlplane.cluster.x-k8s.io/v1alpha3".into(),
        provider: ControlPlaneProvider::SideroV05,
        cpi,
    };
    let nodes: Vec<String> = KUBEADM.iter().map(|n| n.to_string()).collect();
    World::kubeadm(facts, &nodes, &[])
}

fn admits(w: &World, object: &Value, old: Option<&Value>, rule: (&str, &str, &str)) -> bool {
    w.admit(rule, object, old).is_ok()
}

fn machine(name: &str, control_plane: bool) -> Machine {
    let owner = (!control_plane).then_some(("lab-f-general", "lab-f-general-1"));
    Machine::new(name, owner, ("v1.30.4", "", ""), 0)
}

fn run_pod(world: &Arc<Mutex<World>>, script: &str) -> PodRun {
    jobs::run_pod(world, script).expect("the pod ran")
}

fn run_job(world: &Arc<Mutex<World>>, job: &Value) -> Vec<PodRun> {
    jobs::run_job(world, job).expect("the Job ran")
}

/// lab-f's objects in a phase as `argocd generate` gives them (sync waves and options),
/// with the kubeadm nodes still declared (rendered once per distinct input: the fault tests
/// replay the same phases many times).
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
            "controlPlaneNodes: [lab-f-master-1, lab-f-master-2, lab-f-master-3]",
            &format!("controlPlaneNodes: {}", list(kubeadm)),
        )
        .replace(
            "etcdMembers: [lab-f-master-1, lab-f-master-2, lab-f-master-3]",
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
    argocd_annotated(capstan::yaml::parse_stream(&stdout(&o)).unwrap())
}

/// Objects with the sync waves and options `argocd generate` gives them.
fn argocd_annotated(objects: Vec<Value>) -> Vec<Value> {
    objects
        .into_iter()
        .map(|value| {
            let mut r = capstan::resource::Resource {
                value,
                origin: String::new(),
                raw: None,
                template: false,
            };
            capstan::argocd::annotate(&mut r);
            r.value
        })
        .collect()
}

fn kind(v: &Value) -> &str {
    v["kind"].as_str().unwrap_or_default()
}

fn is_hook(v: &Value) -> bool {
    argo::is_hook(v)
}

/// Argo CD applies an Application's objects (server-side apply, with prune), without its
/// hooks.
fn argo_apply(world: &Arc<Mutex<World>>, objects: &[Value]) {
    let plain: Vec<Value> = objects.iter().filter(|o| !is_hook(o)).cloned().collect();
    argo::sync(world, &plain, SyncMode::ArgoPrune).expect("the sync ran");
}

/// Argo CD syncs: the objects, then the hooks. Every hook pod's run.
fn argo_sync(world: &Arc<Mutex<World>>, objects: &[Value]) -> Vec<PodRun> {
    let r = argo::sync(world, objects, SyncMode::ArgoPrune).expect("the sync ran");
    r.jobs.into_iter().flat_map(|(_, runs)| runs).collect()
}

fn assert_no_model_panic(runs: &[PodRun]) {
    for r in runs {
        assert!(!r.output.contains("model: unexpected"), "{}", r.output);
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
    into_control_plane(lab_f(cpi), fault)
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
        "{context}: the provider bootstrapped a second etcd on {:?}
{}",
        w.second_etcd,
        w.log.join("\n")
    );
    assert!(
        w.audit_removed_kubeadm.is_empty(),
        "{context}: the etcd audit removed kubeadm members {:?}
{}",
        w.audit_removed_kubeadm,
        w.log.join("\n")
    );
    assert!(
        w.generated_pki.is_empty(),
        "{context}: the bootstrap provider generated a new Talos PKI for {:?}\n{}",
        w.generated_pki,
        w.log.join("\n")
    );
    assert!(
        w.audit_removed_talos.is_empty(),
        "{context}: the etcd audit removed running Talos members {:?} (a second control plane)
{}",
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
            w.machines.iter().filter(|m| m.deployment.is_some()).count(),
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
        for n in ["lab-f-master-1", "lab-f-master-2"] {
            w.remove_kubeadm_node(n);
        }
        // cluster.yaml says none is left, but lab-f-master-3's etcd still runs.
        w.stray_etcd_pods.push("lab-f-master-3".into());
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
        world.lock().unwrap().remove_kubeadm_node("lab-f-master-1");
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
    let world = Arc::new(Mutex::new(lab_f(true)));
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
/// D4: a `<cluster>-ca` the bootstrap provider wrote from its own bundle (it reconciled
/// before the sealed Secret existed, and the sops-secrets-operator never adopts it), or one
/// from another import, is refused by the guard: no machine joins a foreign PKI.
#[test]
fn the_guard_refuses_a_ca_git_did_not_seal() {
    let complete = render_phase("complete", &[], &[]);
    let is_ca = |o: &Value| kind(o) == "Secret" && o["metadata"]["name"] == "lab-f-ca";
    let without_ca: Vec<Value> = complete.iter().filter(|o| !is_ca(o)).cloned().collect();
    let running = || {
        let mut w = lab_f(true);
        for n in KUBEADM {
            w.remove_kubeadm_node(n);
        }
        w.members.push(Member {
            name: "talos-a".into(),
            kubeadm: false,
            learner: false,
        });
        w
    };
    // The CA Secret a controller wrote: known by name, with none of capstan's annotations.
    let world = Arc::new(Mutex::new(running()));
    world.lock().unwrap().secrets.insert("lab-f-ca".into());
    let runs = argo_sync(&world, &without_ca);
    assert!(!last_ok(&runs), "{}", show(&runs));
    assert!(
        runs[0].output.contains(
            "Secret lab-f/lab-f-ca was not applied from git (no capstan.dev/kubernetes-ca annotation)"
        ),
        "{}",
        show(&runs)
    );
    {
        let w = world.lock().unwrap();
        assert!(!w.tcp.as_ref().unwrap().bootstrapped);
        assert_eq!(w.machines.len(), 0);
    }
    // Another import's CA (its annotation differs from spec.provenance).
    let other = "sha256:".to_string() + &"0".repeat(64);
    let foreign: Vec<Value> = complete
        .iter()
        .cloned()
        .map(|mut o| {
            if is_ca(&o) {
                o["metadata"]["annotations"]["capstan.dev/kubernetes-ca"] =
                    Value::from(other.clone());
            }
            o
        })
        .collect();
    let world = Arc::new(Mutex::new(running()));
    let runs = argo_sync(&world, &foreign);
    assert!(!last_ok(&runs), "{}", show(&runs));
    assert!(
        runs[0].output.contains(&format!(
            "holds the Kubernetes CA {other}, but git (spec.provenance) records sha256:932dfdf4"
        )),
        "{}",
        show(&runs)
    );
    assert!(!world.lock().unwrap().tcp.as_ref().unwrap().bootstrapped);
    // The sealed Secret from git: the guard sets the status, machines follow.
    let runs = argo_sync(&world, &complete);
    assert!(last_ok(&runs), "{}", show(&runs));
    let mut w = world.lock().unwrap();
    w.advance(60);
    assert_eq!(w.cp_machines(), 3);
    assert!(w.generated_pki.is_empty(), "{:?}", w.generated_pki);
    assert_safe(&w, "the CA from git");
}

#[test]
fn no_machine_before_the_imported_secrets_exist() {
    let complete = render_phase("complete", &[], &[]);
    let no_secrets: Vec<Value> = complete
        .iter()
        .filter(|o| kind(o) != "Secret")
        .cloned()
        .collect();
    let world = Arc::new(Mutex::new(lab_f(true)));
    {
        let mut w = world.lock().unwrap();
        for n in ["lab-f-master-1", "lab-f-master-2", "lab-f-master-3"] {
            w.remove_kubeadm_node(n);
        }
        w.members.push(Member {
            name: "talos-a".into(),
            kubeadm: false,
            learner: false,
        }); // a running cluster's etcd
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
    {
        let mut w = world.lock().unwrap();
        w.advance(60);
        assert_eq!(w.cp_machines(), 3);
        assert_safe(&w, "secrets late");
    }
    // Without the guard (no policy, no Job, status.bootstrapped set by hand), the first
    // machine's TalosConfig makes the bootstrap provider generate a PKI of its own.
    let unguarded: Vec<Value> = no_secrets
        .iter()
        .filter(|o| !is_hook(o) && !kind(o).starts_with("ValidatingAdmissionPolicy"))
        .cloned()
        .collect();
    let world = Arc::new(Mutex::new(lab_f(true)));
    argo_apply(&world, &unguarded);
    let mut w = world.lock().unwrap();
    w.tcp.as_mut().unwrap().bootstrapped = true;
    w.advance(60);
    assert!(
        !w.generated_pki.is_empty(),
        "the model shows M12 without the guard"
    );
}

/// The policies' CEL, evaluated as the API server would. The bootstrapped guard: the
/// cluster's new machines are refused until status.bootstrapped is true; machines of other
/// clusters and machines moved with a providerID pass; a missing TalosControlPlane refuses.
/// Phase control-plane's nodeRef policy: a control-plane Machine gets its nodeRef only while
/// the TalosControlPlane is paused (whatever the annotation's value); other status updates,
/// workers and Machines that had one pass.
#[test]
fn the_admission_policies_as_the_api_server_evaluates_them() {
    let world = Arc::new(Mutex::new(lab_f(true)));
    argo_apply(&world, &render_phase("control-plane", &KUBEADM, &[]));
    let mut w = world.lock().unwrap().clone();
    let create_machine = ("cluster.x-k8s.io", "machines", "CREATE");
    let create_vsm = (
        "infrastructure.cluster.x-k8s.io",
        "vspheremachines",
        "CREATE",
    );
    let status = ("cluster.x-k8s.io", "machines/status", "UPDATE");
    let mk_machine = |cluster: &str, provider_id: Option<&str>| {
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
    assert!(!admits(
        &w,
        &mk_machine(CLUSTER, None),
        None,
        create_machine
    ));
    assert!(!admits(&w, &vsm(CLUSTER), None, create_vsm));
    assert!(admits(&w, &mk_machine("other", None), None, create_machine));
    assert!(admits(&w, &vsm("other"), None, create_vsm));
    assert!(
        admits(
            &w,
            &mk_machine(CLUSTER, Some("vsphere://4203")),
            None,
            create_machine
        ),
        "moved"
    );
    assert!(!admits(
        &w,
        &mk_machine(CLUSTER, Some("")),
        None,
        create_machine
    ));
    w.tcp.as_mut().unwrap().bootstrapped = true;
    assert!(admits(&w, &mk_machine(CLUSTER, None), None, create_machine));
    assert!(admits(&w, &vsm(CLUSTER), None, create_vsm));
    let missing = World {
        policies: w.policies.clone(),
        ..World::default()
    };
    assert!(
        !admits(&missing, &mk_machine(CLUSTER, None), None, create_machine),
        "no TalosControlPlane: denied"
    );
    // nodeRefs (the TalosControlPlane is paused in git in this phase).
    let cp = machine("lab-f-cp-abcde", true);
    let (before, after) = (
        w.machine_json(&cp, None),
        w.machine_json(&cp, Some(("lab-f-cp-abcde", "10.20.30.150"))),
    );
    assert!(w.paused());
    assert!(
        admits(&w, &after, Some(&before), status),
        "paused: the nodeRef is set"
    );
    w.update_annotation(KUBECTL_ANNOTATE, ANN_PAUSED, Some("false"));
    assert!(
        admits(&w, &after, Some(&before), status),
        "any value pauses (HasPaused tests the key)"
    );
    w.update_annotation(KUBECTL_ANNOTATE, ANN_PAUSED, None);
    assert!(
        !admits(&w, &after, Some(&before), status),
        "unpaused: refused"
    );
    assert!(
        admits(&w, &before, Some(&before), status),
        "other status updates pass"
    );
    assert!(admits(&w, &after, Some(&after), status), "a nodeRef it had");
    let worker = machine("lab-f-general-abcde", false);
    assert!(admits(
        &w,
        &w.machine_json(&worker, Some(("n", "10.0.0.2"))),
        Some(&w.machine_json(&worker, None)),
        status
    ));
    // The policy is phase control-plane's only.
    let w2 = Arc::new(Mutex::new(lab_f(true)));
    argo_apply(&w2, &render_phase("workers", &[], &[]));
    let names: Vec<String> = w2.lock().unwrap().policies.keys().cloned().collect();
    assert!(
        names
            .iter()
            .any(|n| n.ends_with(".bootstrapped.capstan.dev"))
            && !names.iter().any(|n| n.contains("paused-node-refs")),
        "{names:?}"
    );
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
    world.lock().unwrap().remove_kubeadm_node("lab-f-master-1");
    let objects = render_phase("control-plane", &["lab-f-master-2", "lab-f-master-3"], &[]);
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
        ..lab_f(true)
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
/// busybox's shell (ignored by a plain `cargo test`; `.ci/run` installs busybox and runs it).
#[test]
#[ignore = "needs busybox"]
fn the_jobs_run_under_busybox_ash_too() {
    crate::util::need("busybox", &["true"]);
    let world = Arc::new(Mutex::new(lab_f(true)));
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
            ..lab_f(true)
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
        let world = Arc::new(Mutex::new(lab_f(true)));
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
            let world = Arc::new(Mutex::new(lab_f(true)));
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
    let world = Arc::new(Mutex::new(lab_f(true)));
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

/// D6: a Cluster a killed `clusterctl move` left paused (`spec.paused: true`; cluster-api
/// v1.10.10 `mover.go:393-436`) is noticed by every phase's Job: it refuses, naming the
/// patch, and changes nothing (no phase pauses the Cluster; they pause the
/// TalosControlPlane). Unpaused, the same sync goes past it.
#[test]
fn a_cluster_left_paused_by_a_killed_move_is_refused_by_every_job() {
    for (phase, kubeadm) in [("prepare", &KUBEADM[..]), ("complete", &[][..])] {
        let world = if phase == "prepare" {
            Arc::new(Mutex::new(lab_f(true)))
        } else {
            established()
        };
        world.lock().unwrap().cluster_paused = true;
        let bootstrapped = |w: &Arc<Mutex<World>>| {
            w.lock()
                .unwrap()
                .tcp
                .as_ref()
                .is_some_and(|t| t.bootstrapped)
        };
        let before = bootstrapped(&world);
        let runs = argo_sync(&world, &render_phase(phase, kubeadm, &[]));
        assert!(!last_ok(&runs), "{phase}: {}", show(&runs));
        assert!(
            runs[0]
                .output
                .contains("Cluster lab-f/lab-f is paused (spec.paused: true), which no phase does")
                && runs[0]
                    .output
                    .contains("patch clusters.cluster.x-k8s.io lab-f --type merge"),
            "{phase}: {}",
            show(&runs)
        );
        assert_eq!(bootstrapped(&world), before, "{phase}");
        world.lock().unwrap().cluster_paused = false;
        let runs = argo_sync(&world, &render_phase(phase, kubeadm, &[]));
        assert!(
            !show(&runs).contains("is paused (spec.paused"),
            "{phase}: {}",
            show(&runs)
        );
        // Phase complete over kubeadm members left refuses for them, as it must.
        assert_eq!(
            last_ok(&runs),
            phase == "prepare",
            "{phase}: {}",
            show(&runs)
        );
    }
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

/// What `clusterctl move --to-directory` really saves (day-2 review D4, D6): no dump while
/// the control plane has never been ready or a Machine has no nodeRef (phase control-plane);
/// after the migration a dump without `<cluster>-talos` (no owner, no Cluster API purpose
/// suffix, no move label). Restored into a rebuilt management cluster, the objects come
/// back without status; with the sealed Secrets applied from git the cluster goes on,
/// without them the first new machine gets a PKI of its own.
#[test]
fn what_clusterctl_move_really_saves() {
    let world = established();
    let refused = world
        .lock()
        .unwrap()
        .clusterctl_move_to_directory()
        .expect_err("no dump in phase control-plane");
    assert!(
        refused.iter().any(|e| e.contains("is not yet ready")),
        "{refused:?}"
    );
    // Through phases workers and complete.
    {
        let mut w = world.lock().unwrap();
        for n in KUBEADM {
            w.remove_kubeadm_node(n);
        }
    }
    for phase in ["workers", "complete"] {
        let runs = argo_sync(&world, &render_phase(phase, &[], &[]));
        assert!(last_ok(&runs), "{}", show(&runs));
        world.lock().unwrap().advance(900);
    }
    let dump = world
        .lock()
        .unwrap()
        .clusterctl_move_to_directory()
        .unwrap();
    assert!(dump.secrets.contains("lab-f-ca") && dump.secrets.contains("lab-f-kubeconfig"));
    // D4: the render carries the move label on the Secrets a restore needs, so the bundle
    // is saved; the render of main before it (the same objects without the label) loses it.
    assert!(
        dump.secrets.contains("lab-f-talos") && dump.secrets.contains("lab-f-vsphere"),
        "{:?} / {:?}",
        dump.secrets,
        dump.left_out
    );
    let unlabelled: Vec<Value> = render_phase("complete", &[], &[])
        .into_iter()
        .map(|mut o| {
            if let Some(l) = o
                .pointer_mut("/metadata/labels")
                .and_then(Value::as_object_mut)
            {
                l.remove(capstan::rehearse::clusterctl::MOVE_LABEL);
            }
            o
        })
        .collect();
    let before = Arc::new(Mutex::new(world.lock().unwrap().clone()));
    let runs = argo_sync(&before, &unlabelled);
    assert!(last_ok(&runs), "{}", show(&runs));
    let d4 = before
        .lock()
        .unwrap()
        .clusterctl_move_to_directory()
        .unwrap();
    assert!(
        d4.left_out.contains("lab-f-talos") && !d4.secrets.contains("lab-f-talos"),
        "D4: {:?} / {:?}",
        d4.secrets,
        d4.left_out
    );
    // Restored, then git synced (the sealed Secrets with it): nodeRefs and the status come
    // back, nothing generated.
    let restored = |w: &mut World| {
        w.rebuild_management();
        w.restore_from_move(&dump);
        assert!(w.machines.iter().all(|m| m.node_ref.is_none()));
        assert!(!w.tcp.as_ref().unwrap().bootstrapped);
    };
    restored(&mut world.lock().unwrap());
    let runs = argo_sync(&world, &render_phase("complete", &[], &[]));
    assert!(last_ok(&runs), "{}", show(&runs));
    {
        let mut w = world.lock().unwrap();
        w.advance(600);
        assert!(w.machines.iter().all(|m| m.node_ref.is_some()));
        assert_safe(&w, "restored with the Secrets from git");
    }
    // Restored from the unlabelled dump without them (nothing synced yet, no admission
    // policy: the dump holds none) and a worker's Machine deleted: its replacement's
    // TalosConfig gets a new PKI.
    {
        let mut w = world.lock().unwrap();
        w.rebuild_management();
        w.restore_from_move(&d4);
    }
    let mut w = world.lock().unwrap();
    let worker = w
        .machines
        .iter()
        .find(|m| m.deployment.is_some())
        .unwrap()
        .name
        .clone();
    let t = w.t;
    w.machines
        .iter_mut()
        .find(|m| m.name == worker)
        .unwrap()
        .deleting = Some(t);
    w.advance(600);
    assert!(
        !w.generated_pki.is_empty(),
        "the model shows D4\n{}",
        w.log.join("\n")
    );
}

/// A revert of both phase commits after the migration (git says `prepare`: 0 replicas, no
/// pause) must not scale the running control plane down before the prepare Job can pause
/// it: the keep-workers policy refuses an unpaused TalosControlPlane going to 0, the sync
/// fails, and the control plane keeps its machines and its members.
#[test]
fn a_revert_to_prepare_never_scales_the_running_control_plane_down() {
    let world = established();
    {
        let mut w = world.lock().unwrap();
        for n in KUBEADM {
            w.remove_kubeadm_node(n);
        }
    }
    for phase in ["workers", "complete"] {
        let runs = argo_sync(&world, &render_phase(phase, &[], &[]));
        assert!(last_ok(&runs), "{}", show(&runs));
        world.lock().unwrap().advance(900);
    }
    let members = world.lock().unwrap().members.len();
    let plain: Vec<Value> = render_phase("prepare", &KUBEADM, &[])
        .into_iter()
        .filter(|o| !is_hook(o))
        .collect();
    let r = argo::sync(&world, &plain, SyncMode::ArgoPrune).unwrap();
    assert!(
        r.refused
            .iter()
            .any(|e| e.starts_with("TalosControlPlane/lab-f-cp") && e.contains("keep-workers")),
        "{:?}",
        r.refused
    );
    let mut w = world.lock().unwrap();
    w.advance(600);
    assert_eq!(w.tcp.as_ref().unwrap().replicas, 3);
    assert_eq!((w.cp_machines(), w.members.len()), (3, members));
    assert_safe(&w, "revert to prepare");
}

/// The shims' calls survive other threads' `fork`s: a forked child holds a copy of every
/// descriptor the model has open until its `exec`, which once dropped a request (the FIFO's
/// buffer went with the copy) or ended a shim's read before its answer, and a CI run hung.
/// Two threads spawn processes while a pod makes 400 calls; each must reach the model in
/// order and get its own answer back.
#[test]
fn every_call_gets_its_own_answer_while_other_threads_fork() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let world = Arc::new(Mutex::new(lab_f(false)));
    let stop = Arc::new(AtomicBool::new(false));
    let forkers: Vec<_> = (0..2)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut spawned = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let _ = std::process::Command::new("true").status();
                    spawned += 1;
                }
                spawned
            })
        })
        .collect();
    let script = r#"i=0
while [ "$i" -lt 400 ]; do
  i=$((i + 1))
  out=$(kubectl get "call-$i" 2>&1) && exit 8
  case "$out" in
    *"\"call-$i\""*) ;;
    *) echo "call $i was answered: $out"; exit 9 ;;
  esac
done"#;
    let run = jobs::run_pod(&world, script);
    stop.store(true, Ordering::Relaxed);
    let spawned: u32 = forkers.into_iter().map(|f| f.join().unwrap_or(0)).sum();
    let run = run.expect("the pod ran");
    assert_eq!(run.code, Some(0), "{}", run.output);
    let w = world.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(w.calls, 400, "every call reached the model once");
    assert!(
        w.trace
            .iter()
            .enumerate()
            .all(|(n, t)| t == &format!("get call-{}", n + 1)),
        "in order: {:?}",
        &w.trace[..w.trace.len().min(5)]
    );
    assert!(spawned > 0, "the other threads spawned processes meanwhile");
}
