//! The life after the migration on the provider model (`capstan::rehearse`, the model
//! `capstan rehearse` runs): lab-f (`external`) and lab-g (`vip`) from phase `prepare`
//! through `complete`, then every Day-2 operation, in phase `complete` and in phase
//! `workers`, under Argo CD with and without prune and under `kubectl apply`; each must reach
//! its end state (declared replicas and versions, every Machine with a nodeRef, etcd members
//! = Machines, the API answering). The render of 4706974, kept as a fixture, stops at D1.

use crate::util::*;
use capstan::model::Phase;
use capstan::rehearse::drive::{Operation, Rehearsal};
use capstan::rehearse::{self, Options, SyncMode};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn options(then: Option<Operation>, until: Phase, sync: SyncMode) -> Options {
    Options {
        then,
        until,
        sync,
        ..Options::default()
    }
}

fn rehearse_dir(dir: &Path, o: &Options) -> Rehearsal {
    rehearse::cluster(dir, o).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

fn assert_done(r: &Rehearsal, context: &str) {
    assert!(
        r.stop().is_none(),
        "{context}: stopped\n{}",
        rehearse::report::text(r)
    );
}

/// The last step's machine groups: (group, machines, replicas, with nodeRef, versions).
fn groups(r: &Rehearsal) -> Vec<(String, usize, u64, usize, Vec<String>)> {
    r.steps
        .last()
        .map(|s| s.snapshot.machines.clone())
        .unwrap_or_default()
}

/// lab-g (`vip`) as a cluster being migrated: lab-g's endpoint and versions on the v1beta1
/// flavour (flavour v1beta2 has no verified provider releases, so render refuses its
/// migration phases), without the autoscaler overlay (the migration phases render explicit
/// replicas), with kubeadm nodes and an etcd the Talos 1.13 join accepts.
fn lab_g_migrating(repo: &Path) -> PathBuf {
    let file = repo.join("clusters/lab-g/cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let text = text
        .replace("flavour: v1beta2", "flavour: v1beta1")
        .replace("  - overlays/autoscaler\n", "")
        .replace("etcdVersion: \"3.5.15-0\"", "etcdVersion: \"3.5.26-0\"")
        .replace(
            "    phase: complete\n",
            "    phase: prepare\n    kubeadm:\n      controlPlaneNodes: [lab-g-cp-1, lab-g-cp-2, lab-g-cp-3]\n      etcdMembers: [lab-g-cp-1, lab-g-cp-2, lab-g-cp-3]\n    providers:\n      cluster-api: v1.10.10\n      bootstrap-talos: v0.6.12\n      control-plane-talos: v0.5.12\n      infrastructure-vsphere: v1.13.1\n",
        );
    assert!(text.contains("phase: prepare") && text.contains("flavour: v1beta1"));
    std::fs::write(&file, text).unwrap();
    repo.join("clusters/lab-g")
}

/// lab-f in phase complete with the shipped autoscaler overlay on its pools (for the
/// autoscaler operation: render refuses the overlay in the phases that render explicit
/// replicas).
fn lab_f_autoscaled(repo: &Path) -> PathBuf {
    let file = repo.join("clusters/lab-f/cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replace(
            "  - overlays/talos-vmware\n",
            "  - overlays/talos-vmware\n  - overlays/autoscaler\n",
        )
        .replace("phase: prepare", "phase: complete")
        .replace(
            "      controlPlaneNodes: [lab-f-master-1, lab-f-master-2, lab-f-master-3]\n",
            "",
        )
        .replace(
            "      etcdMembers: [lab-f-master-1, lab-f-master-2, lab-f-master-3]\n",
            "",
        ),
    )
    .unwrap();
    repo.join("clusters/lab-f")
}

const DAY2: [Operation; 8] = [
    Operation::TalosUpgrade,
    Operation::KubernetesPatch,
    Operation::KubernetesMinor,
    Operation::Rollout,
    Operation::ReplaceControlPlane,
    Operation::WorkerRollout,
    Operation::MhcRemediation,
    Operation::PhaseRevert,
];

/// lab-f (`external`): from phase prepare through complete, then each Day-2 operation, in
/// phase complete and in phase workers. The end state is checked beyond "settled": the
/// versions the operation asked for.
#[test]
fn lab_f_from_prepare_through_every_day2_operation() {
    let (_t, repo) = example_copy();
    let dir = repo.join("clusters/lab-f");
    for until in [Phase::Complete, Phase::Workers] {
        for op in DAY2 {
            let r = rehearse_dir(&dir, &options(Some(op), until, SyncMode::ArgoPrune));
            let context = format!("lab-f, {} in phase {}", op.as_str(), until.as_str());
            assert_done(&r, &context);
            let g = groups(&r);
            let cp = &g[0];
            assert_eq!((cp.1, cp.2, cp.3), (3, 3, 3), "{context}: {g:?}");
            match op {
                Operation::KubernetesPatch => {
                    assert!(g.iter().all(|x| x.4 == ["v1.30.5"]), "{context}: {g:?}")
                }
                Operation::KubernetesMinor => {
                    assert!(g.iter().all(|x| x.4 == ["v1.31.0"]), "{context}: {g:?}")
                }
                _ => {}
            }
            if op != Operation::PhaseRevert || until == Phase::Complete {
                for pool in &g[1..] {
                    assert_eq!(pool.1 as u64, pool.2, "{context}: {g:?}");
                    assert_eq!(pool.1, pool.3, "{context}: {g:?}");
                }
            }
        }
    }
    // The autoscaler grows a pool that carries its size annotations.
    let (_t, repo) = example_copy();
    let dir = lab_f_autoscaled(&repo);
    let r = rehearse_dir(
        &dir,
        &options(
            Some(Operation::AutoscalerScaleUp),
            Phase::Complete,
            SyncMode::ArgoPrune,
        ),
    );
    assert_done(&r, "lab-f, autoscaler");
}

/// lab-g (`vip`) in phase complete, as it is: every operation, the VIP handed from holder
/// to holder with one gap of at most 60 s per replaced holder, never longer.
#[test]
fn lab_g_in_phase_complete_through_every_day2_operation() {
    let (_t, repo) = example_copy();
    let dir = repo.join("clusters/lab-g");
    let mut ops = DAY2.to_vec();
    ops.retain(|o| *o != Operation::PhaseRevert);
    ops.extend([Operation::VipHandover, Operation::AutoscalerScaleUp]);
    for op in ops {
        let r = rehearse_dir(
            &dir,
            &options(Some(op), Phase::Complete, SyncMode::ArgoPrune),
        );
        let context = format!("lab-g, {}", op.as_str());
        assert_done(&r, &context);
        let last = &r.steps.last().unwrap().snapshot;
        assert!(
            last.endpoint.0.starts_with("VIP"),
            "{context}: {:?}",
            last.endpoint
        );
        assert!(last.longest_gap <= 60, "{context}: {}", last.longest_gap);
        if matches!(
            op,
            Operation::Rollout | Operation::VipHandover | Operation::TalosUpgrade
        ) {
            assert!(
                last.longest_gap > 0,
                "{context}: the holder was replaced, a gap is expected"
            );
        }
    }
}

/// lab-g's VIP on a cluster being migrated: prepare through complete (the hand-over to the
/// VIP in phase complete), then the operations, in complete and in workers.
#[test]
fn lab_g_vip_from_prepare_through_every_day2_operation() {
    let (_t, repo) = example_copy();
    let dir = lab_g_migrating(&repo);
    for until in [Phase::Complete, Phase::Workers] {
        for op in DAY2 {
            let r = rehearse_dir(&dir, &options(Some(op), until, SyncMode::ArgoPrune));
            assert_done(
                &r,
                &format!("lab-g migrating, {} in {}", op.as_str(), until.as_str()),
            );
        }
    }
    let r = rehearse_dir(
        &dir,
        &options(
            Some(Operation::VipHandover),
            Phase::Complete,
            SyncMode::ArgoPrune,
        ),
    );
    assert_done(&r, "lab-g migrating, vip-handover");
}

/// Nothing a phase adds outlives it, whatever applies git: under Argo CD without prune and
/// under `kubectl apply` the phase-control-plane nodeRef policy is gone or inert from phase
/// workers on, so a control-plane rollout after the migration completes.
#[test]
fn the_node_ref_policy_does_not_outlive_its_phase_under_any_sync() {
    let (_t, repo) = example_copy();
    let dir = repo.join("clusters/lab-f");
    for sync in [
        SyncMode::ArgoPrune,
        SyncMode::ArgoNoPrune,
        SyncMode::KubectlApply,
    ] {
        for until in [Phase::Workers, Phase::Complete] {
            let r = rehearse_dir(&dir, &options(Some(Operation::Rollout), until, sync));
            assert_done(&r, &format!("{} in {}", sync.as_str(), until.as_str()));
        }
    }
}

/// The fixture of 4706974: every phase rendered by `argocd generate` then.
fn fixture(name: &str) -> Vec<Value> {
    let text =
        std::fs::read_to_string(root().join("tests/fixtures/rehearse-4706974").join(name)).unwrap();
    capstan::yaml::parse_stream(&text).unwrap()
}

/// The rehearsal of the render of 4706974 (lab-f's phases as `argocd generate` printed them
/// then, Secrets applied outside Argo CD: mode `omit`), the Day-2 commit made by renaming the
/// control plane's template as a content-hash change does.
fn rehearse_4706974(op: Operation, sync: SyncMode) -> Rehearsal {
    let text = std::fs::read_to_string(example().join("clusters/lab-f/cluster.yaml")).unwrap();
    let config = capstan::model::ClusterConfig::from_value(
        "cluster.yaml",
        capstan::yaml::parse_one(&text).unwrap(),
    )
    .unwrap();
    let base_memory = config
        .spec
        .control_plane
        .as_ref()
        .unwrap()
        .machine
        .memory_mib;
    let base_k8s = config.spec.versions.kubernetes.clone();
    let mut render = |c: &capstan::model::ClusterConfig| -> Result<Vec<Value>, String> {
        let m = c.spec.migration.as_ref().unwrap();
        let mut objects = match (m.phase, m.kubeadm.control_plane_nodes.len()) {
            (Phase::Prepare, _) => fixture("prepare.yaml"),
            (Phase::ControlPlane, 3) => fixture("control-plane.yaml"),
            (Phase::ControlPlane, 2) => fixture("control-plane-2.yaml"),
            (Phase::ControlPlane, _) => fixture("control-plane-1.yaml"),
            (Phase::Workers, _) => fixture("workers.yaml"),
            (Phase::Complete, _) => fixture("complete.yaml"),
        };
        let rolled = c.spec.control_plane.as_ref().unwrap().machine.memory_mib != base_memory;
        let bumped = c.spec.versions.kubernetes != base_k8s;
        for o in objects.iter_mut() {
            if o["kind"] == "TalosControlPlane" && rolled {
                o["spec"]["infrastructureTemplate"]["name"] = "lab-f-cp-0123456789".into();
            }
            if bumped && matches!(o["kind"].as_str(), Some("TalosControlPlane")) {
                o["spec"]["version"] = c.spec.versions.kubernetes.clone().into();
            }
            if bumped && o["kind"] == "MachineDeployment" {
                o["spec"]["template"]["spec"]["version"] =
                    c.spec.versions.kubernetes.clone().into();
            }
        }
        // Secrets mode `omit`: the sealed Secrets are applied by other means.
        objects.push(serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "lab-f-talos", "namespace": "lab-f"}}));
        objects.push(serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "lab-f-ca", "namespace": "lab-f"}}));
        Ok(objects)
    };
    rehearse::rehearse(
        "cluster.yaml",
        &config,
        &mut render,
        &options(Some(op), Phase::Complete, sync),
    )
    .unwrap()
}

/// D1 at 4706974: the migration completes, then the first control-plane rollout stalls at
/// replicas + 1 with the new Machine refused its nodeRef by the leftover policy, named with
/// its fix; a Kubernetes bump also holds the workers' MachineSets (ControlPlaneIsStable).
#[test]
fn the_render_of_4706974_stops_at_d1() {
    let r = rehearse_4706974(Operation::Rollout, SyncMode::ArgoPrune);
    let stop = r
        .stop()
        .unwrap_or_else(|| panic!("expected D1\n{}", rehearse::report::text(&r)));
    assert_eq!(stop.kind, "stall", "{}", rehearse::report::text(&r));
    assert!(stop.object.starts_with("Machine/lab-f-cp-"), "{stop:?}");
    assert!(
        stop.condition
            .contains("lab-f.lab-f.paused-node-refs.capstan.dev")
            && stop.condition.contains("whole status patch refused"),
        "{stop:?}"
    );
    assert!(
        stop.fix.contains("D1")
            && stop
                .fix
                .contains("kubectl delete validatingadmissionpolicy"),
        "{stop:?}"
    );
    // Every phase before the rollout completed; workers synced with the policy kept.
    let steps = &r.steps;
    assert!(steps[..steps.len() - 1].iter().all(|s| s.stop.is_none()));
    let workers = steps
        .iter()
        .find(|s| s.title.starts_with("phase workers"))
        .unwrap();
    assert!(
        workers
            .sync
            .as_ref()
            .unwrap()
            .kept
            .iter()
            .any(|k| k.contains("paused-node-refs") && k.contains("ignored (no prune)")),
        "{:?}",
        workers.sync
    );
    // At replicas + 1.
    let cp = &steps.last().unwrap().snapshot.machines[0];
    assert_eq!((cp.1, cp.2), (4, 3), "{cp:?}");

    let r = rehearse_4706974(Operation::KubernetesMinor, SyncMode::ArgoPrune);
    let stop = r.stop().expect("D1 on a Kubernetes bump");
    assert!(stop.condition.contains("paused-node-refs"), "{stop:?}");
}

/// The model holds the workers' scale-ups while the control plane upgrades: with the
/// leftover policy (4706974) a Kubernetes bump never finishes, `status.version` stays at the
/// lowest Machine's, and every MachineSet that must grow says why it waits.
#[test]
fn an_unfinished_control_plane_upgrade_holds_every_worker_machine_set() {
    use capstan::rehearse::model::World;
    let text = std::fs::read_to_string(example().join("clusters/lab-f/cluster.yaml")).unwrap();
    let config = capstan::model::ClusterConfig::from_value(
        "cluster.yaml",
        capstan::yaml::parse_one(&text).unwrap(),
    )
    .unwrap();
    let complete = {
        let mut v = fixture("complete.yaml");
        v.push(serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "lab-f-talos", "namespace": "lab-f"}}));
        v.push(serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "lab-f-ca", "namespace": "lab-f"}}));
        v
    };
    let (facts, pool, _) = rehearse::facts(&config, &complete);
    let mut w = World::kubeadm(facts, &[], &[]);
    w.endpoint.pool = pool;
    let world = std::sync::Arc::new(std::sync::Mutex::new(w));
    // The leftover policy, as phase control-plane left it.
    let cp = fixture("control-plane.yaml");
    let leftover: Vec<Value> = cp
        .iter()
        .filter(|o| {
            o["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.contains("paused-node-refs"))
        })
        .cloned()
        .collect();
    let plain: Vec<Value> = complete
        .iter()
        .filter(|o| o["kind"] != "Job")
        .cloned()
        .collect();
    rehearse::argo::sync(
        &world,
        &[plain.clone(), leftover].concat(),
        SyncMode::ArgoPrune,
    )
    .unwrap();
    world.lock().unwrap().settle_as_declared();
    // The Kubernetes minor bump, and a worker that fails meanwhile.
    let bumped: Vec<Value> = plain
        .iter()
        .cloned()
        .map(|mut o| {
            if o["kind"] == "TalosControlPlane" {
                o["spec"]["version"] = "v1.31.0".into();
            }
            o
        })
        .collect();
    rehearse::argo::sync(&world, &bumped, SyncMode::ArgoNoPrune).unwrap();
    let mut w = world.lock().unwrap();
    w.advance(600);
    let victim = w
        .machines
        .iter()
        .find(|m| m.deployment.is_some())
        .unwrap()
        .name
        .clone();
    w.fail_vm(&victim);
    w.advance(1800);
    let tcp = w.tcp.as_ref().unwrap();
    assert_eq!(tcp.status_version.as_deref(), Some("v1.30.4"));
    let held: Vec<String> = w
        .machine_sets
        .iter()
        .filter_map(|m| m.hold.clone())
        .collect();
    assert!(
        held.iter()
            .any(|h| h.contains("Machine remediation on hold") && h.contains("is upgrading")),
        "{held:?}\n{}",
        w.log.join("\n")
    );
}

/// `capstan rehearse`: the text report (golden), JSON, exit codes, and the error paths.
#[test]
fn rehearse_cli() {
    let (_t, repo) = example_copy();
    let o = capstan(&["rehearse", "clusters/lab-f", "--then", "rollout"], &repo);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert_golden("rehearse-lab-f-rollout.txt", &stdout(&o));
    let again = capstan(&["rehearse", "clusters/lab-f", "--then", "rollout"], &repo);
    assert_eq!(stdout(&o), stdout(&again), "deterministic");

    let o = capstan(
        &[
            "rehearse",
            "clusters/lab-g",
            "--then",
            "vip-handover",
            "--format",
            "json",
        ],
        &repo,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["result"], "done");
    assert!(v["steps"].as_array().unwrap().len() >= 2);
    assert_eq!(
        v["steps"][0]["state"]["endpoint"]["kind"],
        "VIP 10.30.40.10"
    );

    // Not applicable: exit 2, one message naming the file and why.
    let o = capstan(
        &["rehearse", "clusters/lab-f", "--then", "vip-handover"],
        &repo,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--then vip-handover: the cluster's endpoint strategy is not `vip`"),
        "{}",
        stderr(&o)
    );
    assert!(stdout(&o).is_empty());
    let o = capstan(&["rehearse", "clusters/nowhere"], &repo);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));

    // A stop: exit 1 with the object, the condition and the fix. lab-f's pool one address
    // short: the surge machine's claim waits.
    let file = repo.join("clusters/lab-f/cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replace("10.20.30.150-10.20.30.153", "10.20.30.150-10.20.30.152"),
    )
    .unwrap();
    let o = capstan(&["rehearse", "clusters/lab-f", "--then", "rollout"], &repo);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("result: stopped (render)"),
        "{}",
        stdout(&o)
    );
}

/// A Job an overlay adds (a pull request's code, annotated as an Argo CD hook) is never run
/// by the rehearsal: only capstan's migration Jobs run against the model.
#[test]
fn a_job_from_an_overlay_is_never_run() {
    let (_t, repo) = example_copy();
    let marker = repo.join("ran");
    // A directory named like capstan's template origins (`template migration/…`): an
    // overlay file's origin is its path, relative when the command runs at the root.
    let dir = repo.join("template migration");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("overlay.yaml"),
        "apiVersion: capstan.dev/v1alpha1\nkind: Overlay\nresources:\n- job.yaml\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("job.yaml"),
        format!(
            "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: lab-f-capstan-migration-evil\n  namespace: lab-f\n  annotations:\n    argocd.argoproj.io/hook: Sync\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: x\n        image: x\n        command: [/bin/sh, -ec, \"touch {}\"]\n",
            marker.display()
        ),
    )
    .unwrap();
    let file = repo.join("clusters/lab-f/cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replace(
            "  - overlays/talos-vmware\n",
            "  - overlays/talos-vmware\n  - template migration\n",
        ),
    )
    .unwrap();
    let o = capstan(&["render", "clusters/lab-f"], &repo);
    assert!(
        stdout(&o).contains("lab-f-capstan-migration-evil"),
        "the overlay's Job renders: {}",
        stderr(&o)
    );
    let r = rehearse_dir(
        &repo.join("clusters/lab-f"),
        &options(None, Phase::Complete, SyncMode::ArgoPrune),
    );
    assert!(!marker.exists(), "the overlay's Job ran");
    let o = capstan(&["rehearse", "clusters/lab-f"], &repo);
    assert!(!marker.exists(), "the overlay's Job ran: {}", stdout(&o));
    assert!(!stdout(&o).contains("migration-evil"), "{}", stdout(&o));
    assert!(r.steps.iter().all(|s| s
        .sync
        .as_ref()
        .is_none_or(|y| y.jobs.iter().all(|(n, _, _)| !n.contains("evil")))));
}

/// Every operation is on the command line and in README's `--then` table.
#[test]
fn every_operation_is_documented_and_on_the_command_line() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let o = capstan(&["rehearse", "--help"], &root());
    for op in Operation::ALL {
        let name = op.as_str();
        assert!(
            readme.contains(&format!("| `{name}`"))
                || readme.contains(&format!("`{name}`, `"))
                || readme.contains(&format!(", `{name}` |")),
            "README's --then table lacks {name}"
        );
        assert!(stdout(&o).contains(name), "--help lacks {name}");
    }
}

/// Review findings: the model's cost is bounded (a pull request cannot make it run for
/// ever), a MachineHealthCheck's count is read as a count, and a large pool's rollout is
/// progress, not a stall.
#[test]
fn costs_counts_and_large_pools() {
    let (_t, repo) = example_copy();
    let file = repo.join("clusters/lab-g/cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let without_autoscaler = text.replace("  - overlays/autoscaler\n", "");
    // More Machines than the model runs: exit 2, naming the file, at once.
    std::fs::write(
        &file,
        without_autoscaler.replace("    replicas: 4\n", "    replicas: 2147483647\n"),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let o = capstan(&["rehearse", "clusters/lab-g"], &repo);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("clusters/lab-g/cluster.yaml: a rehearsal models at most 300 Machines"),
        "{}",
        stderr(&o)
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    // maxUnhealthy 0 (a count): one failed worker is never remediated, and the rehearsal
    // says so.
    std::fs::write(
        &file,
        without_autoscaler.replace("    maxUnhealthy: 1\n", "    maxUnhealthy: 0\n"),
    )
    .unwrap();
    let r = rehearse_dir(
        &repo.join("clusters/lab-g"),
        &options(
            Some(Operation::MhcRemediation),
            Phase::Complete,
            SyncMode::ArgoPrune,
        ),
    );
    let stop = r.stop().expect("no remediation at maxUnhealthy 0");
    assert!(
        stop.object == "MachineHealthCheck/lab-g-general"
            && stop.condition.contains("maxUnhealthy 0 allows 0"),
        "{stop:?}"
    );
    // A pool of 45 rolls one machine at a time for hours of model time: done, not a stall.
    std::fs::write(
        &file,
        without_autoscaler.replace("    replicas: 4\n", "    replicas: 45\n"),
    )
    .unwrap();
    let r = rehearse_dir(
        &repo.join("clusters/lab-g"),
        &options(
            Some(Operation::WorkerRollout),
            Phase::Complete,
            SyncMode::ArgoPrune,
        ),
    );
    assert_done(&r, "lab-g, 45 workers rolled");
}
