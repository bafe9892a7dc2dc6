//! Nothing a phase adds outlives it (D1): phase control-plane's nodeRef policy is inert
//! without the TalosControlPlane's phase annotation (its CEL evaluated as the API server
//! would), the `workers`/`complete` Job deletes it before it lifts the pause (its script run
//! under `sh`, and under busybox's ash in an ignored test, against a fake `kubectl`), and the
//! README's audit table lists exactly what each phase renders.

use crate::migration::phase_variant;
use crate::util::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;

const PHASES: [&str; 4] = ["prepare", "control-plane", "workers", "complete"];
const POLICY: &str = "lab-f.lab-f.paused-node-refs.capstan.dev";
const PHASE_ANNOTATION: &str = "capstan.dev/migration-phase";

/// lab-f's objects in a phase, as `capstan render` prints them.
fn render(phase: &str) -> Vec<Value> {
    let (_t, repo) = example_copy();
    phase_variant(&repo, phase);
    let o = capstan(&["render", "clusters/lab-f"], &repo);
    assert_eq!(o.status.code(), Some(0), "{phase}: {}", stderr(&o));
    capstan::yaml::parse_stream(&stdout(&o)).unwrap()
}

fn kind(v: &Value) -> &str {
    v["kind"].as_str().unwrap_or_default()
}

fn name(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or_default()
}

// ---- the policy's CEL ----------------------------------------------------------------

/// The rendered nodeRef policy's validations, evaluated with the `cel` crate for a Machine
/// status UPDATE (`old` → `new`) with `params` as the TalosControlPlane (`None`: missing).
/// `true` when every validation admits it; an error or a non-boolean refuses
/// (`failurePolicy: Fail`).
fn admits(validations: &[String], old: &Value, new: &Value, params: Option<&Value>) -> bool {
    validations.iter().all(|expr| {
        let program = cel::Program::compile(expr).expect("the expression compiles");
        let mut cx = cel::Context::default();
        cx.add_variable("object", new.clone()).unwrap();
        cx.add_variable("oldObject", old.clone()).unwrap();
        cx.add_variable("params", params.cloned().unwrap_or(Value::Null))
            .unwrap();
        matches!(program.execute(&cx), Ok(cel::Value::Bool(true)))
    })
}

fn tcp(annotations: &[(&str, &str)]) -> Value {
    let a: serde_json::Map<String, Value> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1alpha3",
        "kind": "TalosControlPlane",
        "metadata": {"name": "lab-f-cp", "namespace": "lab-f", "annotations": a},
        "spec": {"replicas": 3},
    })
}

#[test]
fn the_node_ref_policy_applies_only_under_the_phase_annotation() {
    let objects = render("control-plane");
    let policy = objects
        .iter()
        .find(|o| kind(o) == "ValidatingAdmissionPolicy" && name(o) == POLICY)
        .expect("phase control-plane renders the nodeRef policy");
    let validations: Vec<String> = policy["spec"]["validations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["expression"].as_str().unwrap().to_string())
        .collect();
    let machine = |node_ref: bool| {
        let mut m = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "Machine",
            "metadata": {"name": "lab-f-cp-x", "namespace": "lab-f", "labels": {"cluster.x-k8s.io/cluster-name": "lab-f", "cluster.x-k8s.io/control-plane": ""}},
            "status": {"phase": "Provisioned"},
        });
        if node_ref {
            m["status"]["nodeRef"] = json!({"kind": "Node", "name": "lab-f-cp-x"});
        }
        m
    };
    let (without, with) = (machine(false), machine(true));
    let phase = (PHASE_ANNOTATION, "control-plane");
    let paused = ("cluster.x-k8s.io/paused", "true");
    let other = ("capstan.dev/talos-version", "v1.10.6");
    // After the phase: the TalosControlPlane unpaused, without the phase annotation (git
    // dropped it). A policy left behind admits the nodeRef: rollouts go on.
    assert!(admits(&validations, &without, &with, Some(&tcp(&[other]))));
    assert!(admits(&validations, &without, &with, Some(&tcp(&[]))));
    let mut bare = tcp(&[]);
    bare["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    assert!(admits(&validations, &without, &with, Some(&bare)));
    // In the phase: unpaused with the annotation, the nodeRef is refused (the audit
    // cannot run inside the scale Job's window); paused, it is admitted.
    assert!(!admits(
        &validations,
        &without,
        &with,
        Some(&tcp(&[phase, other]))
    ));
    // Whatever the annotation's value.
    assert!(!admits(
        &validations,
        &without,
        &with,
        Some(&tcp(&[(PHASE_ANNOTATION, "x")]))
    ));
    assert!(admits(
        &validations,
        &without,
        &with,
        Some(&tcp(&[phase, paused]))
    ));
    // Updates that do not add a nodeRef pass.
    assert!(admits(&validations, &with, &with, Some(&tcp(&[phase]))));
    assert!(admits(
        &validations,
        &without,
        &without,
        Some(&tcp(&[phase]))
    ));
    // Fail-closed without the TalosControlPlane (the binding's parameterNotFoundAction
    // denies first; the expression does too).
    assert!(!admits(&validations, &without, &with, None));
}

// ---- the unpause Job deletes the policy first ------------------------------------------

/// A fake `kubectl` for the `workers`/`complete` Job: the state lives in files of `dir`
/// (`policy`, `binding`: the nodeRef policy and binding exist; `paused`: the pause
/// annotation; `kubeadm`: a kubeadm etcd Pod runs), every call is appended to `dir/log`, and
/// `dir/fault` names a fault: `delete-fails`, `delete-garbage`, `finalizer` (deleted, but
/// still there).
const FAKE_KUBECTL: &str = r#"#!/bin/sh
d="$FAKE_DIR"
printf '%s\n' "$*" >> "$d/log"
fault=$(cat "$d/fault" 2>/dev/null || true)
vap=validatingadmissionpolicies.admissionregistration.k8s.io/lab-f.lab-f.paused-node-refs.capstan.dev
vapb=validatingadmissionpolicybindings.admissionregistration.k8s.io/lab-f.lab-f.paused-node-refs.capstan.dev
case "$*" in
  *"get clusters.cluster.x-k8s.io lab-f -o name") echo cluster.cluster.x-k8s.io/lab-f ;;
  *"get clusters.cluster.x-k8s.io lab-f -o jsonpath={.spec.paused}") ;;
  *"get taloscontrolplanes.controlplane.cluster.x-k8s.io lab-f-cp -o jsonpath={.metadata.name}") echo lab-f-cp ;;
  *"get taloscontrolplanes.controlplane.cluster.x-k8s.io lab-f-cp -o jsonpath={.status.bootstrapped}") echo true ;;
  *"get secret lab-f-talos lab-f-ca -o name") printf 'secret/lab-f-talos\nsecret/lab-f-ca\n' ;;
  *"get secret lab-f-ca -o jsonpath={.metadata.annotations.capstan\\.dev/kubernetes-ca}") printf 'sha256:932dfdf44a914fa6ad405e06cebc7388a0ce96519f7aa2855838db8d96cd8400' ;;
  *"get secret lab-f-kubeconfig -o go-template="*) echo "apiVersion: v1" ;;
  *"get pods -n kube-system -l component=etcd -o jsonpath="*)
    if [ -e "$d/kubeadm" ]; then echo etcd-lab-f-master-1; fi ;;
  *"get nodes -l node-role.kubernetes.io/control-plane -o jsonpath="*)
    if [ -e "$d/kubeadm" ]; then echo "lab-f-master-1|Ubuntu 22.04.4 LTS"; fi
    printf 'lab-f-cp-abcde|Talos (v1.10.6)\n' ;;
  *"delete $vapb $vap --ignore-not-found --wait=false -o name")
    case "$fault" in
      delete-fails) echo 'Error from server (Forbidden): forbidden' >&2; exit 1 ;;
      delete-garbage) echo '<html>502 Bad Gateway</html>'; exit 0 ;;
    esac
    if [ -e "$d/binding" ]; then
      echo validatingadmissionpolicybinding.admissionregistration.k8s.io/lab-f.lab-f.paused-node-refs.capstan.dev
      [ "$fault" = finalizer ] || rm -f "$d/binding"
    fi
    if [ -e "$d/policy" ]; then
      echo validatingadmissionpolicy.admissionregistration.k8s.io/lab-f.lab-f.paused-node-refs.capstan.dev
      [ "$fault" = finalizer ] || rm -f "$d/policy"
    fi ;;
  *"get $vapb $vap --ignore-not-found -o name")
    if [ -e "$d/binding" ]; then echo validatingadmissionpolicybinding.admissionregistration.k8s.io/lab-f.lab-f.paused-node-refs.capstan.dev; fi
    if [ -e "$d/policy" ]; then echo validatingadmissionpolicy.admissionregistration.k8s.io/lab-f.lab-f.paused-node-refs.capstan.dev; fi ;;
  *"get taloscontrolplanes.controlplane.cluster.x-k8s.io lab-f-cp -o go-template="*)
    if [ -e "$d/paused" ]; then echo paused; fi ;;
  *"annotate taloscontrolplanes.controlplane.cluster.x-k8s.io lab-f-cp cluster.x-k8s.io/paused-") rm -f "$d/paused"; echo annotated ;;
  *"annotate taloscontrolplanes.controlplane.cluster.x-k8s.io lab-f-cp cluster.x-k8s.io/paused=true --overwrite") touch "$d/paused"; echo annotated ;;
  *) echo "fake kubectl: unexpected call: $*" >&2; exit 3 ;;
esac
"#;

struct Run {
    code: Option<i32>,
    calls: Vec<String>,
    output: String,
    dir: tempfile::TempDir,
}

impl Run {
    fn exists(&self, f: &str) -> bool {
        self.dir.path().join(f).exists()
    }
    fn position(&self, needle: &str) -> Option<usize> {
        self.calls.iter().position(|c| c.contains(needle))
    }
}

/// The phase's Job script run by `shell` against the fake kubectl, with `state` files set.
fn run_unpause(job: &Value, shell: &str, state: &[&str], fault: Option<&str>) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let write_exec = |p: &Path, text: &str| {
        std::fs::write(p, text).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    write_exec(&bin.join("kubectl"), FAKE_KUBECTL);
    write_exec(&bin.join("sleep"), "#!/bin/sh\nexit 0\n");
    for f in state {
        std::fs::write(dir.path().join(f), "").unwrap();
    }
    if let Some(f) = fault {
        std::fs::write(dir.path().join("fault"), f).unwrap();
    }
    let script = job
        .pointer("/spec/template/spec/containers/0/command/2")
        .and_then(Value::as_str)
        .expect("the Job's script")
        .replace(
            "kubeconfig=/tmp/workload.kubeconfig",
            &format!("kubeconfig={}/workload.kubeconfig", dir.path().display()),
        );
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut cmd = std::process::Command::new(shell);
    if shell == "busybox" {
        cmd.arg("sh");
    }
    let o = cmd
        .args(["-ec", &script])
        .env("PATH", path)
        .env("FAKE_DIR", dir.path())
        .output()
        .unwrap();
    let calls = std::fs::read_to_string(dir.path().join("log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    Run {
        code: o.status.code(),
        calls,
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        dir,
    }
}

#[test]
fn the_unpause_job_deletes_the_node_ref_policy_before_it_lifts_the_pause() {
    unpause_job_under("sh");
}

/// The same under busybox's ash, the Job image's shell (alpine/k8s).
#[test]
#[ignore = "needs busybox"]
fn the_unpause_job_deletes_the_node_ref_policy_under_busybox_ash_too() {
    need("busybox", &["true"]);
    unpause_job_under("busybox");
}

/// The `workers` and `complete` Jobs' unpause step run by `shell` (`sh`, or `busybox` for
/// its ash) against the fake kubectl, in every state and fault.
fn unpause_job_under(shell: &str) {
    for phase in ["workers", "complete"] {
        let objects = render(phase);
        let job = objects
            .iter()
            .find(|o| kind(o) == "Job")
            .expect("the phase's Job");
        let at = format!("{phase} under {shell}");
        // A cluster synced in phase control-plane by a render that gave the policy
        // `Prune=false`: the policy and binding are left, the control plane is paused.
        let r = run_unpause(job, shell, &["policy", "binding", "paused"], None);
        assert_eq!(r.code, Some(0), "{at}: {}\n{:#?}", r.output, r.calls);
        assert!(!r.exists("policy") && !r.exists("binding"), "{at}");
        assert!(!r.exists("paused"), "{at}");
        let delete = r.position(" delete ").expect("the policy is deleted");
        let unpause = r
            .position("cluster.x-k8s.io/paused-")
            .expect("the pause is lifted");
        assert!(delete < unpause, "{at}: {:#?}", r.calls);
        assert!(
            r.output.contains(&format!(
                "deleted validatingadmissionpolicy.admissionregistration.k8s.io/{POLICY}"
            )),
            "{at}: {}",
            r.output
        );
        // Already unpaused (the pause lifted by hand, or kubectl's last-applied): the
        // policy still goes.
        let r = run_unpause(job, shell, &["policy", "binding"], None);
        assert_eq!(r.code, Some(0), "{at}: {}", r.output);
        assert!(!r.exists("policy") && !r.exists("binding"), "{at}");
        // Nothing left (Argo CD pruned them): the delete finds nothing, and the pause goes.
        let r = run_unpause(job, shell, &["paused"], None);
        assert_eq!(r.code, Some(0), "{at}: {}", r.output);
        assert!(!r.exists("paused"), "{at}");
        // Fail closed: the delete refused, its output unreadable, or the policy still
        // there afterwards (a finalizer): the pause stays, the Job fails.
        for fault in ["delete-fails", "delete-garbage", "finalizer"] {
            let r = run_unpause(job, shell, &["policy", "binding", "paused"], Some(fault));
            assert_ne!(r.code, Some(0), "{at} {fault}: {}", r.output);
            assert!(r.exists("paused"), "{at} {fault}");
            assert_eq!(r.position("cluster.x-k8s.io/paused-"), None, "{at} {fault}");
            assert!(
                r.output
                    .contains("cannot delete phase control-plane's nodeRef policy"),
                "{at} {fault}: {}",
                r.output
            );
        }
        // kubeadm etcd left: the Job pauses and fails, and keeps the policy (it still
        // protects the kubeadm members).
        let r = run_unpause(job, shell, &["policy", "binding", "kubeadm"], None);
        assert_ne!(r.code, Some(0), "{at}: {}", r.output);
        assert!(r.exists("paused") && r.exists("policy"), "{at}");
        assert_eq!(r.position(" delete "), None, "{at}");
    }
}

// ---- the README's audit table -----------------------------------------------------------

/// One row of README's "What each phase adds, and what removes it": kinds, name patterns,
/// and the annotation (or status field) it is about, if any; the phases it names.
struct Row {
    line: String,
    kinds: Vec<String>,
    names: Vec<regex::Regex>,
    annotation: Option<String>,
    status: bool,
    phases: BTreeSet<String>,
}

fn audit_rows() -> Vec<Row> {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = readme
        .find("### What each phase adds, and what removes it")
        .expect("README has the audit section");
    let table = readme[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .skip(2)
        .take_while(|l| l.starts_with('|'));
    let mut rows = Vec::new();
    for line in table {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 8, "six columns: {line}");
        let object = cells[1];
        let (kinds, rest) = object.split_once('`').expect("a name in backticks");
        let kinds: Vec<String> = kinds
            .split([',', ' '])
            .filter(|k| !k.is_empty())
            .map(str::to_string)
            .collect();
        assert!(!kinds.is_empty(), "{line}");
        let rest = format!("`{rest}");
        let (named, part) = match rest.find(" annotation ").or_else(|| rest.find(" status ")) {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest.as_str(), None),
        };
        let names = named
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|n| {
                let p = regex::escape(n)
                    .replace("<cluster>", "lab-f")
                    .replace("<namespace>", "lab-f")
                    .replace("<identity>", "lab-f-vsphere")
                    .replace("<hash>", "[0-9a-f]{10}")
                    .replace("<pool>", "[a-z0-9-]+");
                regex::Regex::new(&format!("^{p}$")).unwrap()
            })
            .collect();
        let part_name = |p: &str| p.split('`').nth(1).map(str::to_string);
        let phases: BTreeSet<String> = if cells[2].contains("every phase") {
            PHASES.iter().map(|p| p.to_string()).collect()
        } else {
            cells[2]
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect()
        };
        rows.push(Row {
            line: line.to_string(),
            kinds,
            names,
            annotation: part
                .filter(|p| p.starts_with("annotation"))
                .and_then(part_name),
            status: part.is_some_and(|p| p.starts_with("status")),
            phases,
        });
    }
    rows
}

/// Every object `capstan render` gives lab-f in each phase is in the table, in the phases it
/// names and only those; every annotation row's annotation is rendered in exactly its
/// phases. A table row that matches nothing rendered fails too.
#[test]
fn the_phase_audit_table_lists_every_rendered_object() {
    let rows = audit_rows();
    assert!(rows.len() >= 15, "{} rows", rows.len());
    let matches = |r: &Row, o: &Value| {
        r.kinds.iter().any(|k| k == kind(o)) && r.names.iter().any(|n| n.is_match(name(o)))
    };
    let mut seen: Vec<BTreeSet<String>> = vec![BTreeSet::new(); rows.len()];
    let mut missing = Vec::new();
    for phase in PHASES {
        for o in render(phase) {
            let objects: Vec<usize> = rows
                .iter()
                .enumerate()
                .filter(|(_, r)| r.annotation.is_none() && !r.status && matches(r, &o))
                .map(|(i, _)| i)
                .collect();
            if objects.is_empty() {
                missing.push(format!("{phase}: {} {}", kind(&o), name(&o)));
            }
            for i in objects {
                seen[i].insert(phase.to_string());
            }
            for (i, r) in rows.iter().enumerate() {
                let Some(a) = &r.annotation else { continue };
                if matches(r, &o) && o["metadata"]["annotations"].get(a).is_some() {
                    seen[i].insert(phase.to_string());
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "rendered but not in README's audit table: {missing:#?}"
    );
    for (r, phases) in rows.iter().zip(&seen) {
        if r.status {
            // A status field is set by the Jobs, never rendered.
            assert!(phases.is_empty(), "{}", r.line);
            continue;
        }
        assert_eq!(&r.phases, phases, "the phases of: {}", r.line);
    }
}
