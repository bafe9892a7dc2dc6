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
        stderr(&o).contains("validated 3000 objects against 1 CRD versions: 0 invalid"),
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
