//! The migration Jobs are the interlocks that keep production safe, so their scripts are
//! run here, extracted from a real render, under `sh` against a fake `kubectl` that
//! simulates the TalosControlPlane (`status.bootstrapped`, `spec.replicas`, the pause
//! annotation) and the provider creating Machines while unpaused.

use crate::util::*;
use std::path::Path;

const FAKE_KUBECTL: &str = r#"#!/bin/sh
# Fake kubectl: state in $STATE/{exists,bootstrapped,replicas,paused,machines,create}.
st() { cat "$STATE/$1" 2>/dev/null; }
echo "kubectl $*" >> "$STATE/log"
[ "$1" = "-n" ] && shift 2
verb=$1; shift
case "$verb" in
  get)
    if [ "$1" = machines.cluster.x-k8s.io ]; then
      n=$(st machines); i=0; while [ "$i" -lt "${n:-0}" ]; do echo "machine/m$i"; i=$((i + 1)); done; exit 0
    fi
    [ -f "$STATE/exists" ] || { echo "NotFound" >&2; exit 1; }
    case "$*" in
      *status.bootstrapped*) printf '%s' "$(st bootstrapped)";;
      *spec.replicas*) printf '%s' "$(st replicas)";;
    esac;;
  patch)
    case "$*" in *--subresource=status*) echo true > "$STATE/bootstrapped";; *) exit 3;; esac;;
  annotate)
    case "$*" in
      *cluster.x-k8s.io/paused=true*) echo true > "$STATE/paused";;
      *cluster.x-k8s.io/paused-*) echo false > "$STATE/paused"; cp "$STATE/create" "$STATE/machines" 2>/dev/null || true;;
      *) exit 3;;
    esac;;
  *) exit 3;;
esac
"#;

struct Sim {
    _t: tempfile::TempDir,
    state: std::path::PathBuf,
    bin: std::path::PathBuf,
}

fn sim(files: &[(&str, &str)]) -> Sim {
    let t = tempfile::tempdir().unwrap();
    let state = t.path().join("state");
    let bin = t.path().join("bin");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    for (f, v) in files {
        std::fs::write(state.join(f), format!("{v}\n")).unwrap();
    }
    use std::os::unix::fs::PermissionsExt;
    for (name, body) in [("kubectl", FAKE_KUBECTL), ("sleep", "#!/bin/sh\nexit 0\n")] {
        std::fs::write(bin.join(name), body).unwrap();
        std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    Sim { _t: t, state, bin }
}

impl Sim {
    fn get(&self, f: &str) -> String {
        std::fs::read_to_string(self.state.join(f))
            .unwrap_or_default()
            .trim()
            .to_string()
    }
    fn run(&self, script: &str) -> (i32, String) {
        let path = format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let o = std::process::Command::new("sh")
            .args(["-ec", script])
            .env("PATH", path)
            .env("STATE", &self.state)
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )
    }
}

/// Render lab-f in a phase and return the named Job's script.
fn job_script(phase: &str, job: &str) -> String {
    let (_t, repo) = example_copy();
    let file = repo.join("clusters/lab-f/cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let text = text.replace(
        "phase: prepare",
        &format!("phase: {phase}\n    acknowledge: [etcd-audit]"),
    );
    std::fs::write(&file, text).unwrap();
    let o = capstan(&["render", "clusters/lab-f"], &repo);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let docs = capstan::yaml::parse_stream(&stdout(&o)).unwrap();
    let job = docs
        .iter()
        .find(|d| d["kind"] == "Job" && d["metadata"]["name"].as_str().unwrap().contains(job))
        .unwrap_or_else(|| panic!("no {job} Job in phase {phase}"));
    let _ = Path::new("");
    job.pointer("/spec/template/spec/containers/0/command/2")
        .unwrap()
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn bootstrapped_job_sets_status_only_without_machines() {
    let script = job_script("prepare", "bootstrapped");
    let s = sim(&[("exists", "1"), ("bootstrapped", ""), ("replicas", "0")]);
    let (code, out) = s.run(&script);
    assert_eq!(code, 0, "{out}");
    assert_eq!(s.get("bootstrapped"), "true");
    // Idempotent: already true, nothing patched.
    let (code, out) = s.run(&script);
    assert_eq!(code, 0, "{out}");
    assert_eq!(s.get("log").matches("--subresource=status").count(), 1);
    // Refuses once the control plane has replicas.
    let s = sim(&[("exists", "1"), ("bootstrapped", ""), ("replicas", "3")]);
    let (code, out) = s.run(&script);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("refusing") && s.get("bootstrapped").is_empty(),
        "{out}"
    );
    // Waits for the object, then gives up with a clear message.
    let s = sim(&[("bootstrapped", ""), ("replicas", "0")]);
    let (code, out) = s.run(&script);
    assert_eq!(code, 1);
    assert!(out.contains("does not exist after 5 minutes"), "{out}");
}

#[test]
fn scale_job_creates_all_machines_in_one_window_and_always_repauses() {
    let script = job_script("control-plane", "scale-control-plane");
    // Happy path: bootstrapped, no machine yet, the provider creates all three.
    let s = sim(&[
        ("exists", "1"),
        ("bootstrapped", "true"),
        ("replicas", "3"),
        ("paused", "true"),
        ("machines", "0"),
        ("create", "3"),
    ]);
    let (code, out) = s.run(&script);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        (s.get("machines").as_str(), s.get("paused").as_str()),
        ("3", "true")
    );
    let log = s.get("log");
    let unpause = log.find("paused-").unwrap();
    assert!(
        log[unpause..].contains("paused=true"),
        "re-paused after unpausing:\n{log}"
    );
    // Rerun (Argo CD hooks run every sync): machines exist, it only keeps the pause.
    let (code, out) = s.run(&script);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        s.get("log").matches("paused-").count(),
        1,
        "never unpaused twice"
    );

    // Not bootstrapped: refuse and stay paused, nothing created.
    let s = sim(&[
        ("exists", "1"),
        ("bootstrapped", ""),
        ("replicas", "3"),
        ("paused", "true"),
        ("machines", "0"),
        ("create", "3"),
    ]);
    let (code, out) = s.run(&script);
    assert_eq!(code, 1);
    assert!(
        out.contains("status.bootstrapped is not true")
            && out.contains("second, empty etcd cluster"),
        "{out}"
    );
    assert_eq!(
        (s.get("machines").as_str(), s.get("paused").as_str()),
        ("0", "true")
    );
    assert!(!s.get("log").contains("paused-"));

    // Some machines already exist: never unpause again (the etcd audit would run).
    let s = sim(&[
        ("exists", "1"),
        ("bootstrapped", "true"),
        ("replicas", "3"),
        ("paused", "true"),
        ("machines", "1"),
        ("create", "3"),
    ]);
    let (code, out) = s.run(&script);
    assert_eq!(code, 1);
    assert!(
        out.contains("1 of 3") && out.contains("etcd audit"),
        "{out}"
    );
    assert!(!s.get("log").contains("paused-"));

    // The provider creates too few machines: time out and pause again anyway.
    let s = sim(&[
        ("exists", "1"),
        ("bootstrapped", "true"),
        ("replicas", "3"),
        ("paused", "true"),
        ("machines", "0"),
        ("create", "2"),
    ]);
    let (code, out) = s.run(&script);
    assert_eq!(code, 1);
    assert!(out.contains("only 2 of 3"), "{out}");
    assert_eq!(s.get("paused"), "true", "paused again on failure");
}

/// lab-f rendered in each migration phase; the golden files show replicas, the pause and
/// the mechanisms per phase (`.ci/run` validates the same renders against the CRDs).
pub fn phase_variant(repo: &Path, phase: &str) {
    let file = repo.join("clusters/lab-f/cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let text = match phase {
        "prepare" => text,
        "control-plane" => text.replace("phase: prepare", "phase: control-plane\n    acknowledge: [etcd-audit]"),
        _ => text
            .replace("phase: prepare", &format!("phase: {phase}"))
            .replace("      controlPlaneNodes: [lab-f-cp-1, lab-f-cp-2, lab-f-cp-3]\n      etcdMembers: [lab-f-cp-1, lab-f-cp-2, lab-f-cp-3]\n", ""),
    };
    std::fs::write(&file, text).unwrap();
}

#[test]
fn golden_per_phase() {
    for phase in ["prepare", "control-plane", "workers", "complete"] {
        let (_t, repo) = example_copy();
        phase_variant(&repo, phase);
        let o = capstan(&["render", "clusters/lab-f"], &repo);
        assert_eq!(o.status.code(), Some(0), "{phase}: {}", stderr(&o));
        assert_golden(&format!("phase-{phase}-lab-f.yaml"), &stdout(&o));
        let o = capstan(&["plan", "clusters/lab-f"], &repo);
        assert_eq!(o.status.code(), Some(0), "{phase}: {}", stderr(&o));
        assert_golden(&format!("plan-{phase}-lab-f.md"), &stdout(&o));
    }
    let o = capstan(&["plan", "clusters/nope"], &root());
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("clusters/nope"), "{}", stderr(&o));
}

/// The runbook describes the pools as rendered: with the autoscaler overlay there are no
/// replicas in git, and the runbook says who sizes the pools instead of quoting
/// `spec.workers[].replicas`.
#[test]
fn plan_follows_the_autoscaler_overlay() {
    let (_t, repo) = example_copy();
    phase_variant(&repo, "workers");
    let o = capstan(&["plan", "clusters/lab-f"], &repo);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("Scales the worker pools: `lab-f-general` to 6 replicas; `lab-f-ingress` to 2 replicas."),
        "{}",
        stdout(&o)
    );
    let file = repo.join("clusters/lab-f/cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let text = text.replace(
        "  - overlays/talos-vmware\n",
        "  - overlays/talos-vmware\n  - overlays/autoscaler\n",
    );
    std::fs::write(&file, text).unwrap();
    let o = capstan(&["plan", "clusters/lab-f"], &repo);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let md = stdout(&o);
    assert!(
        md.contains("`lab-f-general` by the Cluster Autoscaler, between 1 and 10 machines (no replicas in git, so `spec.workers[].replicas` (6) is not applied")
            && md.contains("`lab-f-ingress` by the Cluster Autoscaler, between 1 and 10 machines")
            && !md.contains("to 6 replicas"),
        "{md}"
    );
    // An overlay that does not load fails the runbook, naming it.
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replace("  - overlays/autoscaler\n", "  - overlays/nope\n"),
    )
    .unwrap();
    let o = capstan(&["plan", "clusters/lab-f"], &repo);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("overlays/nope"), "{}", stderr(&o));
}
