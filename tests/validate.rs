//! `capstan validate` from the command line, with a small CRD written by the test (the real
//! provider CRDs are exercised by `.ci/run`, which has them).

use crate::util::*;

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 2}
              mode: {type: string, enum: [fast, slow]}
"#;

fn setup() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("crds")).unwrap();
    std::fs::write(tmp.path().join("crds/widget.yaml"), CRD).unwrap();
    tmp
}

#[test]
fn valid_objects_pass_and_builtin_kinds_are_validated_too() {
    let tmp = setup();
    std::fs::write(
        tmp.path().join("ok.yaml"),
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {size: 3, mode: fast}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n",
    )
    .unwrap();
    let o = capstan(&["validate", "--crds", "crds", "ok.yaml"], tmp.path());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "validated 2 objects against 1 CRD versions from --crds and the Kubernetes v1.37 schemas of 11 \
             built-in kinds (no Cluster or TalosControlPlane names a version: the newest supported): 0 invalid, \
             0 skipped"
        ),
        "{}",
        stderr(&o)
    );
}

#[test]
fn violations_name_file_object_and_path_and_exit_1() {
    let tmp = setup();
    std::fs::write(
        tmp.path().join("bad.yaml"),
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {size: 1, mode: medium, colour: red}\n",
    )
    .unwrap();
    let o = capstan(&["validate", "--crds", "crds", "bad.yaml"], tmp.path());
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("bad.yaml: Widget/w: spec.size: "), "{err}");
    assert!(err.contains("bad.yaml: Widget/w: spec.mode: "), "{err}");
    assert!(
        err.contains("bad.yaml: Widget/w: spec.colour: unknown field"),
        "{err}"
    );
}

#[test]
fn reads_stdin_and_fails_on_bad_crd() {
    let tmp = setup();
    let o = assert_cmd::Command::cargo_bin("capstan")
        .unwrap()
        .args(["validate", "--crds", "crds"])
        .current_dir(tmp.path())
        .write_stdin("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {}\n")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("<stdin>: Widget/w: spec.size: required field missing"),
        "{}",
        stderr(&o)
    );
    std::fs::write(
        tmp.path().join("crds/bad.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
    )
    .unwrap();
    let o = capstan(&["validate", "--crds", "crds", "-"], tmp.path());
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("crds/bad.yaml"), "{}", stderr(&o));
}

/// The example's renders against the providers' real CRDs (vendored in `tests/fixtures/crds`).
#[test]
fn rendered_examples_validate_against_the_real_crds() {
    let crds = capstan::secrets::pki::testkit::fixture_path("crds");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    assert!(capstan(
        &["render", "examples/gitops", "-o", out.to_str().unwrap()],
        &root()
    )
    .status
    .success());
    let o = capstan(
        &[
            "validate",
            "--crds",
            crds.to_str().unwrap(),
            out.join("lab-f").to_str().unwrap(),
        ],
        &root(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let contract = crds.join("cacppt-v1beta2-contract");
    let o = capstan(
        &[
            "validate",
            "--crds",
            crds.to_str().unwrap(),
            "--crds",
            contract.to_str().unwrap(),
            out.join("lab-g").to_str().unwrap(),
        ],
        &root(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // And a broken object is caught by the real schema.
    let file = out.join("lab-g").join(
        std::fs::read_dir(out.join("lab-g"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .find(|n| n.starts_with("vspheremachinetemplate-"))
            .unwrap(),
    );
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("numCPUs: 4", "numCPUs: 1");
    std::fs::write(&file, text).unwrap();
    let o = capstan(
        &[
            "validate",
            "--crds",
            crds.to_str().unwrap(),
            "--crds",
            contract.to_str().unwrap(),
            file.to_str().unwrap(),
        ],
        &root(),
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("spec.template.spec.numCPUs"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_version_the_crd_does_not_define_is_an_error_and_empty_input_too() {
    let tmp = setup();
    std::fs::write(
        tmp.path().join("v2.yaml"),
        "apiVersion: example.com/v2\nkind: Widget\nmetadata: {name: w}\nspec: {size: 3}\n---\napiVersion: other.example.com/v1\nkind: Gadget\nmetadata: {name: g}\n",
    )
    .unwrap();
    let o = capstan(&["validate", "--crds", "crds", "v2.yaml"], tmp.path());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("v2.yaml: Widget/w: apiVersion: no CRD schema for kind `Widget` in apiVersion `example.com/v2`"), "{}", stderr(&o));
    // A kind with no schema at all stays a notice.
    assert!(
        stderr(&o).contains("1 invalid, 1 skipped"),
        "{}",
        stderr(&o)
    );
    std::fs::write(tmp.path().join("empty.yaml"), "# nothing\n").unwrap();
    let o = capstan(&["validate", "--crds", "crds", "empty.yaml"], tmp.path());
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no objects to validate in empty.yaml"),
        "{}",
        stderr(&o)
    );
}

/// A stream longer than one parse may be (3,000 documents: beyond serde-saphyr's 1,024 and
/// the subset reader's 1,000) is read whole; at the byte limit the message names the limit
/// and how to raise it (issue 42: a fleet's saved render could not be read back).
#[test]
fn long_streams_are_read_and_the_byte_limit_says_how_to_raise_it() {
    let tmp = setup();
    let doc = |i: usize| {
        format!("---\napiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w{i}\nspec:\n  size: 3\n")
    };
    let text: String = (0..3000).map(doc).collect();
    std::fs::write(tmp.path().join("fleet.yaml"), &text).unwrap();
    let o = capstan(&["validate", "--crds", "crds", "fleet.yaml"], tmp.path());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("validated 3000 objects against 1 CRD versions from --crds"),
        "{}",
        stderr(&o)
    );
    // 1 MiB and more, under a 1 MiB limit.
    let big: String = (0..16_000).map(doc).collect();
    assert!(big.len() > 1 << 20);
    std::fs::write(tmp.path().join("big.yaml"), &big).unwrap();
    let o = capstan_plain(
        &["validate", "--crds", "crds", "big.yaml"],
        tmp.path(),
        &[("CAPSTAN_MAX_YAML_MIB", "1")],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "error: big.yaml: larger than 1048576 bytes, the limit for a YAML input (README: Safety); raise it with \
         the environment variable CAPSTAN_MAX_YAML_MIB (MiB, up to 4096; memory grows with it, about 10 times the \
         stream)\n"
    );
    let o = capstan(&["validate", "--crds", "crds", "big.yaml"], tmp.path());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// Render the example into `tmp/out` (bundles `lab-f`, flavour v1beta1, and `lab-g`, v1beta2).
fn render_example(tmp: &std::path::Path) -> std::path::PathBuf {
    let out = tmp.join("out");
    let o = capstan(
        &["render", "examples/gitops", "-o", out.to_str().unwrap()],
        &root(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    out
}

/// Without `--crds`, the CRDs embedded for the pinned provider releases and the built-in
/// kinds' Kubernetes schemas validate every object of the example's render: none skipped
/// (issue 42 item 7: validation that needs no assembly).
#[test]
fn the_rendered_example_validates_with_the_embedded_schemas_and_nothing_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let out = render_example(tmp.path());
    let o = capstan(&["validate", "lab-f", "lab-g"], &out);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("0 invalid, 0 skipped"),
        "{}",
        stderr(&o)
    );
    assert_golden("validate-embedded-example.txt", &transcript(&o));
    // The same from a stream, with the Kubernetes version given.
    let stream = capstan(&["render", "examples/gitops"], &root());
    assert!(stream.status.success());
    let o = assert_cmd::Command::cargo_bin("capstan")
        .unwrap()
        .args(["validate", "--kubernetes-version", "v1.34.2"])
        .current_dir(tmp.path())
        .write_stdin(stream.stdout)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the Kubernetes v1.34 schemas of 11 built-in kinds (--kubernetes-version v1.34.2): 0 invalid, 0 skipped"),
        "{}",
        stderr(&o)
    );
}

const BAD_BUILTINS: &str = "apiVersion: batch/v1
kind: Job
metadata: {name: migrate, namespace: lab-f}
spec:
  template:
    spec:
      restartPolcy: Never
      containers:
      - {name: run, image: alpine, command: [sh, -c, 'true']}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reader}
rules:
- apiGroups: ['']
  resources: [pods]
  verbs: get
";

/// A Job with a misspelt field and a ClusterRole with a wrong type are refused against the
/// Kubernetes schema, each message naming the file, the object and the field path.
#[test]
fn builtin_kinds_are_refused_naming_file_object_and_field_path() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("bad.yaml"), BAD_BUILTINS).unwrap();
    let o = capstan(
        &["validate", "--kubernetes-version", "v1.33", "bad.yaml"],
        tmp.path(),
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("bad.yaml: Job/migrate: spec.template.spec.restartPolcy: unknown field"),
        "{err}"
    );
    assert!(
        err.contains("bad.yaml: ClusterRole/reader: rules[0].verbs: "),
        "{err}"
    );
    assert_golden("validate-builtin-violations.txt", &transcript(&o));
    // With --crds (today's way) the built-in kinds are validated all the same.
    let crds = tmp.path().join("crds");
    std::fs::create_dir(&crds).unwrap();
    std::fs::write(crds.join("widget.yaml"), CRD).unwrap();
    let o = capstan(&["validate", "--crds", "crds", "bad.yaml"], tmp.path());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("restartPolcy: unknown field"),
        "{}",
        stderr(&o)
    );
    // A kind Kubernetes serves only from a later minor is refused at an earlier one.
    let out = render_example(tmp.path());
    let o = capstan(&["validate", "--kubernetes-version", "1.29", "lab-f"], &out);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("ValidatingAdmissionPolicy/lab-f.lab-f.bootstrapped.capstan.dev: apiVersion: kind `ValidatingAdmissionPolicy` in apiVersion `admissionregistration.k8s.io/v1` is not served by Kubernetes v1.29 (--kubernetes-version 1.29; the embedded schemas have it for v1.30 to v1.37)"), "{}", stderr(&o));
    // A version outside the embedded range, and one that is not a version.
    let o = capstan(
        &["validate", "--kubernetes-version", "v1.24.0", "lab-f"],
        &out,
    );
    assert_eq!(o.status.code(), Some(2));
    assert_golden(
        "validate-kubernetes-version-unsupported.txt",
        &transcript(&o),
    );
    let o = capstan(
        &["validate", "--kubernetes-version", "latest", "lab-f"],
        &out,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o)
            .contains("--kubernetes-version latest: expected a Kubernetes version such as v1.34"),
        "{}",
        stderr(&o)
    );
}

/// A kind with no schema at all (no CRD, no embedded built-in kind) is counted as skipped, and
/// refused with `--strict-kinds`.
#[test]
fn a_kind_without_any_schema_is_skipped_unless_strict_kinds() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("other.yaml"),
        "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n",
    )
    .unwrap();
    let o = capstan(&["validate", "other.yaml"], tmp.path());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("validated 1 objects against"),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("0 invalid, 2 skipped"),
        "{}",
        stderr(&o)
    );
    let o = capstan(&["validate", "--strict-kinds", "other.yaml"], tmp.path());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_golden("validate-strict-kinds.txt", &transcript(&o));
}

/// A cluster whose `cluster.yaml` declares a provider release other than the embedded one is
/// reported, with the way out (`--crds`); a patch release of a series capstan pins as a
/// series counts as embedded; `--crds` skips the comparison.
#[test]
fn a_declared_release_that_is_not_embedded_is_reported() {
    let (tmp, repo) = example_copy();
    let out = tmp.path().join("out");
    let o = capstan(
        &[
            "render",
            repo.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        &root(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let file = repo.join("clusters/lab-f/cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    // v1.10.3 is of the pinned v1.10 series: still embedded.
    std::fs::write(
        &file,
        text.replace("cluster-api: v1.10.10", "cluster-api: v1.10.3"),
    )
    .unwrap();
    let o = capstan(&["validate", out.join("lab-f").to_str().unwrap()], &repo);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    std::fs::write(
        &file,
        text.replace("cluster-api: v1.10.10", "cluster-api: v1.11.2")
            .replace(
                "control-plane-talos: v0.5.12",
                "control-plane-talos: v0.5.14",
            ),
    )
    .unwrap();
    // Found from a directory inside the repository, and with --repo-root.
    let o = capstan(
        &["validate", out.join("lab-f").to_str().unwrap()],
        &repo.join("clusters/lab-f"),
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_golden("validate-release-not-embedded.txt", &transcript(&o));
    let o = capstan(
        &[
            "--repo-root",
            repo.to_str().unwrap(),
            "validate",
            out.join("lab-f").to_str().unwrap(),
        ],
        tmp.path(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let crds = capstan::secrets::pki::testkit::fixture_path("crds");
    let o = capstan(
        &[
            "validate",
            "--crds",
            crds.to_str().unwrap(),
            out.join("lab-f").to_str().unwrap(),
        ],
        &repo,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// The embedded schemas are what `tools/embed-schemas.py` generates from their inputs
/// (`tests/fixtures/crds`, kubernetes-validate's Kubernetes schemas).
#[test]
#[ignore = "needs python3 with pyyaml and kubernetes-validate"]
fn the_embedded_schemas_are_generated_from_their_inputs() {
    crate::util::generated_by("embed-schemas.py");
}

/// Our verdict on the built-in kinds agrees with `kubernetes-validate --strict` (the package
/// the schemas come from): the rendered example passes both, the broken Job and ClusterRole
/// fail both.
#[test]
#[ignore = "needs kubernetes-validate"]
fn the_builtin_verdict_agrees_with_kubernetes_validate() {
    need("kubernetes-validate", &["--version"]);
    let tmp = tempfile::tempdir().unwrap();
    let out = render_example(tmp.path());
    std::fs::write(tmp.path().join("bad.yaml"), BAD_BUILTINS).unwrap();
    for (k, dir) in [("1.30.0", "lab-f"), ("1.34.0", "lab-g")] {
        let d = out.join(dir);
        let mut files: Vec<String> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| {
                [
                    "validatingadmissionpolicy",
                    "job-",
                    "role",
                    "clusterrole",
                    "serviceaccount-",
                ]
                .iter()
                .any(|p| n.starts_with(p))
            })
            .collect();
        files.sort();
        assert!(files.len() >= 6, "{files:?}");
        let theirs = std::process::Command::new("kubernetes-validate")
            .args(["--strict", "--quiet", "-k", k])
            .args(&files)
            .current_dir(&d)
            .output()
            .unwrap();
        let ours = capstan(
            &[
                &["validate", "--kubernetes-version", k][..],
                &files.iter().map(String::as_str).collect::<Vec<_>>()[..],
            ]
            .concat(),
            &d,
        );
        assert_eq!(theirs.status.code(), Some(0), "{}", stdout(&theirs));
        assert_eq!(ours.status.code(), Some(0), "{}", stderr(&ours));
    }
    let theirs = std::process::Command::new("kubernetes-validate")
        .args(["--strict", "--quiet", "-k", "1.33.0", "bad.yaml"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let ours = capstan(
        &["validate", "--kubernetes-version", "1.33.0", "bad.yaml"],
        tmp.path(),
    );
    assert_ne!(theirs.status.code(), Some(0), "{}", stdout(&theirs));
    assert_eq!(ours.status.code(), Some(1), "{}", stderr(&ours));
}
