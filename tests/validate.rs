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
fn valid_objects_pass_and_builtin_kinds_are_skipped() {
    let tmp = setup();
    std::fs::write(
        tmp.path().join("ok.yaml"),
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {size: 3, mode: fast}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n",
    )
    .unwrap();
    let o = capstan(&["validate", "--crds", "crds", "ok.yaml"], tmp.path());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("validated 1 objects against 1 CRD versions: 0 invalid, 1 skipped"),
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
    // A kind with no CRD at all stays a notice.
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
