//! The migration phases as rendered: the golden render and runbook of lab-f in every phase,
//! and the runbook following the overlays. What the phases' Jobs and objects do against the
//! providers is modelled in `provider_model.rs`.

use crate::util::*;
use std::path::Path;

/// lab-f rendered in each migration phase; the golden files show replicas, the pause and
/// the mechanisms per phase (`.ci/run` validates the same renders against the CRDs).
pub fn phase_variant(repo: &Path, phase: &str) {
    let file = repo.join("clusters/lab-f/cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let text = match phase {
        "prepare" => text,
        "control-plane" => text.replace(
            "phase: prepare",
            "phase: control-plane\n    acknowledge: [etcd-audit, control-plane-anti-affinity]",
        ),
        _ => text
            .replace("phase: prepare", &format!("phase: {phase}"))
            .replace("      controlPlaneNodes: [lab-f-master-1, lab-f-master-2, lab-f-master-3]\n      etcdMembers: [lab-f-master-1, lab-f-master-2, lab-f-master-3]\n", ""),
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

/// The README carries the operator procedures exactly as `plan` and `explain` print them
/// (one source: `capstan::procedure`). `CAPSTAN_BLESS=1` rewrites the section.
#[test]
fn readme_procedures_are_the_code_s() {
    let path = root().join("README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let (open, close) = (
        "<!-- procedures: capstan::procedure::readme_section -->\n",
        "<!-- /procedures -->",
    );
    let start = readme
        .find(open)
        .expect("README has the procedures section")
        + open.len();
    let end = readme[start..].find(close).expect("closed") + start;
    let want = format!("\n{}", capstan::procedure::readme_section());
    if readme[start..end] != want {
        if std::env::var_os("CAPSTAN_BLESS").is_some() {
            std::fs::write(
                &path,
                format!("{}{want}{}", &readme[..start], &readme[end..]),
            )
            .unwrap();
            return;
        }
        panic!(
            "README.md's procedures differ from capstan::procedure (CAPSTAN_BLESS=1 rewrites them)"
        );
    }
}

/// D13: the keep-workers admission policy as rendered (lab-f reverted to phase
/// `control-plane`, every pool at 0), its CEL evaluated with the `cel` crate as the API
/// server would: Argo CD's apply of the revert (a server-side-apply PATCH, admitted as an
/// UPDATE of `machinedeployments`) is refused while a pool runs machines, unless the new
/// object carries render's acknowledgement; and the rule does not reach the scale
/// subresource the Cluster Autoscaler writes.
#[test]
fn keep_workers_policy_refuses_a_revert_to_zero_replicas() {
    let (_t, repo) = example_copy();
    phase_variant(&repo, "control-plane");
    let o = capstan(&["render", "clusters/lab-f"], &repo);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let docs: Vec<serde_json::Value> = stdout(&o).split("\n---\n").map(doc_value).collect();
    let name = "lab-f.lab-f.keep-workers.capstan.dev";
    let policy = docs
        .iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicy" && d["metadata"]["name"] == name)
        .expect("the keep-workers policy in phase control-plane");
    let binding = docs
        .iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicyBinding" && d["metadata"]["name"] == name)
        .expect("its binding");
    assert_eq!(binding["spec"]["policyName"], name);
    assert_eq!(
        binding["spec"]["validationActions"],
        serde_json::json!(["Deny"])
    );
    assert!(binding["spec"].get("paramRef").is_none());
    assert_eq!(policy["spec"]["failurePolicy"], "Fail");
    // UPDATE of machinedeployments only: `machinedeployments` does not name a subresource,
    // and `machinedeployments/scale` (the autoscaler's SetSize, a PATCH of the scale
    // subresource) is a resource of its own for admission rules.
    assert_eq!(
        policy["spec"]["matchConstraints"]["resourceRules"],
        serde_json::json!([{"apiGroups": ["cluster.x-k8s.io"], "apiVersions": ["*"],
            "operations": ["UPDATE"], "resources": ["machinedeployments"]},
            {"apiGroups": ["controlplane.cluster.x-k8s.io"], "apiVersions": ["*"],
            "operations": ["UPDATE"], "resources": ["taloscontrolplanes"]}])
    );
    let expressions = |key: &str| -> Vec<String> {
        policy["spec"][key]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["expression"].as_str().unwrap().to_string())
            .collect()
    };
    let (conditions, validations) = (expressions("matchConditions"), expressions("validations"));
    assert!(!validations.is_empty());
    let eval = |expr: &str, object: &serde_json::Value, old: &serde_json::Value| -> bool {
        let program = cel::Program::compile(expr).unwrap_or_else(|e| panic!("{expr}: {e:?}"));
        let mut cx = cel::Context::default();
        cx.add_variable("object", object.clone()).unwrap();
        cx.add_variable("oldObject", old.clone()).unwrap();
        match program
            .execute(&cx)
            .unwrap_or_else(|e| panic!("{expr}: {e:?}"))
        {
            cel::Value::Bool(b) => b,
            other => panic!("{expr}: not a bool: {other:?}"),
        }
    };
    // Admitted: a condition false (not this policy's object), or every validation true.
    let admitted = |object: &serde_json::Value, old: &serde_json::Value| -> bool {
        !conditions.iter().all(|c| eval(c, object, old))
            || validations.iter().all(|v| eval(v, object, old))
    };
    // The live MachineDeployment and what the rendered revert makes of it.
    let md = |cluster: &str, replicas: Option<i64>, ack: Option<&str>| {
        let mut v = serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "MachineDeployment",
            "metadata": {"name": "lab-f-general", "namespace": "lab-f",
                         "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
            "spec": {"clusterName": cluster},
        });
        if let Some(n) = replicas {
            v["spec"]["replicas"] = serde_json::json!(n);
        }
        if let Some(a) = ack {
            v["metadata"]["annotations"] = serde_json::json!({"capstan.dev/scale-to-zero": a});
        }
        v
    };
    // The TalosControlPlane: a running, unpaused control plane is never scaled to 0 (a revert
    // of both phase commits to prepare); a paused one may be (the control-plane rollback).
    let tcp = |name: &str, replicas: i64, paused: bool| {
        let mut v = serde_json::json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1alpha3",
            "kind": "TalosControlPlane",
            "metadata": {"name": name, "namespace": "lab-f", "annotations": {}},
            "spec": {"replicas": replicas},
        });
        if paused {
            v["metadata"]["annotations"]["cluster.x-k8s.io/paused"] = "true".into();
        }
        v
    };
    assert!(
        !admitted(&tcp("lab-f-cp", 0, false), &tcp("lab-f-cp", 3, false)),
        "an unpaused control plane of 3 scaled to 0 is refused"
    );
    assert!(
        admitted(&tcp("lab-f-cp", 0, false), &tcp("lab-f-cp", 3, true)),
        "a paused one may go to 0 (the rollback)"
    );
    assert!(admitted(
        &tcp("lab-f-cp", 5, false),
        &tcp("lab-f-cp", 3, false)
    ));
    assert!(
        admitted(&tcp("other-cp", 0, false), &tcp("other-cp", 3, false)),
        "another cluster's control plane"
    );
    let running = md("lab-f", Some(6), None);
    assert!(
        !admitted(&md("lab-f", Some(0), None), &running),
        "a revert scaling 6 running workers to 0 is refused"
    );
    assert!(
        admitted(&md("lab-f", Some(0), Some("acknowledged")), &running),
        "acknowledged in cluster.yaml: render's annotation lets it through"
    );
    assert!(
        !admitted(&md("lab-f", Some(0), Some("yes")), &running),
        "only render's value"
    );
    for (new, old) in [
        (md("lab-f", Some(0), None), md("lab-f", Some(0), None)), // phases prepare/control-plane
        (md("lab-f", Some(4), None), running.clone()),            // a scale-down, not to 0
        (md("lab-f", Some(6), None), md("lab-f", Some(0), None)), // phase workers: scale up
        (md("lab-f", Some(0), None), md("lab-f", None, None)),    // nothing known before
        (md("other", Some(0), None), md("other", Some(6), None)), // another cluster's pool
    ] {
        assert!(admitted(&new, &old), "{new} after {old}");
    }
    // And render gives the annotation once cluster.yaml acknowledges it.
    let file = repo.join("clusters/lab-f/cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replace(
            "acknowledge: [etcd-audit, control-plane-anti-affinity]",
            "acknowledge: [etcd-audit, control-plane-anti-affinity, scale-workers-to-zero]",
        ),
    )
    .unwrap();
    let o = capstan(&["render", "clusters/lab-f"], &repo);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mds: Vec<serde_json::Value> = stdout(&o)
        .split("\n---\n")
        .map(doc_value)
        .filter(|d| d["kind"] == "MachineDeployment")
        .collect();
    assert_eq!(mds.len(), 2);
    for d in &mds {
        assert_eq!(d["spec"]["replicas"], 0);
        assert!(admitted(d, &running), "{d}");
    }
}

/// A document of a render as JSON (capstan's output is YAML that `capstan validate` and
/// kubectl read; the library's own reader).
fn doc_value(doc: &str) -> serde_json::Value {
    capstan::yaml::parse_one(doc.trim_start_matches("---\n")).unwrap()
}
