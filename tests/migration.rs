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
