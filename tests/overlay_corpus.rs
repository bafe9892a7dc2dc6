//! The differential corpus of strategic-merge and RFC 6902 patches (`tests/overlay-corpus/`):
//! every case run through capstan's overlay engine and compared, as JSON, with what
//! `kubectl kustomize` (v5.5) gives for the same object and patch, recorded in
//! `<file>.expected.json` so that `cargo test` needs no kubectl. A case that lists a
//! `divergence` (its reason; the README lists them too) records capstan's result beside
//! kustomize's, and must still differ from it (a divergence that disappears is reported).
//!
//! - `corpus_agrees_with_recorded_kustomize`: capstan against the recording.
//! - `recorded_output_is_kustomize_output`: the recording against `kubectl kustomize` run
//!   now, one directory per case; `#[ignore = "needs kubectl"]` (`.ci/run` runs it with
//!   `--include-ignored`). `CAPSTAN_BLESS=1` rewrites the recordings (kustomize's outputs, and
//!   capstan's for the divergences).
//! - `no_directive_reaches_output`: no `$`-directive key in any golden file nor in any of
//!   capstan's corpus outputs, each strategic patch also applied as a `merge` patch (where a
//!   `$` key is refused).
//! - `merge_key_table_is_generated_from_its_inputs`: the generated merge-key table is current.

use crate::util::root;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One case of a corpus file.
struct Case {
    file: String,
    name: String,
    object: Value,
    patch_type: String,
    patch: Value,
    divergence: Option<String>,
}

fn corpus_dir() -> PathBuf {
    root().join("tests/overlay-corpus")
}

fn corpus_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn load(file: &Path) -> Vec<Case> {
    let text = std::fs::read_to_string(file).unwrap();
    let doc = capstan::yaml::parse_one(&text).unwrap();
    let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
    let objects = doc["objects"].as_object().cloned().unwrap_or_default();
    let mut names = Vec::new();
    doc["cases"]
        .as_array()
        .unwrap_or_else(|| panic!("{stem}: no `cases`"))
        .iter()
        .map(|c| {
            let name = c["name"].as_str().expect("case name").to_string();
            assert!(
                !names.contains(&name),
                "{stem}: case `{name}` appears twice"
            );
            names.push(name.clone());
            let object = match &c["object"] {
                Value::String(key) => objects
                    .get(key)
                    .unwrap_or_else(|| panic!("{stem}/{name}: no object `{key}`"))
                    .clone(),
                v => v.clone(),
            };
            Case {
                file: stem.clone(),
                name,
                object,
                patch_type: c["type"].as_str().unwrap_or("strategic").to_string(),
                patch: c["patch"].clone(),
                divergence: c["divergence"].as_str().map(str::to_string),
            }
        })
        .collect()
}

fn all_cases() -> Vec<Case> {
    corpus_files().iter().flat_map(|f| load(f)).collect()
}

/// capstan's result: the objects after the patch, or `{"error": message}`.
fn run_capstan(case: &Case) -> Value {
    let kind = case.object["kind"].as_str().unwrap_or_default();
    let name = case.object["metadata"]["name"].as_str().unwrap_or_default();
    let overlay = json!({
        "apiVersion": "capstan.dev/v1alpha1",
        "kind": "Overlay",
        "patches": [{"target": {"kind": kind, "name": name}, "type": case.patch_type, "patch": case.patch}],
    });
    let file = format!("{}/{}", case.file, case.name);
    let spec = match capstan::model::OverlayFile::from_value(&file, overlay) {
        Ok(s) => s,
        Err(e) => return json!({"error": e.to_string()}),
    };
    let built = match capstan::overlay::build(&file, &spec, Vec::new(), |_, _| {
        unreachable!("patches are inline")
    }) {
        Ok(o) => o,
        Err(e) => return json!({"error": e.to_string()}),
    };
    let mut objects = vec![capstan::resource::Resource {
        value: case.object.clone(),
        origin: "corpus".into(),
        raw: None,
        template: false,
    }];
    let budget = capstan::overlay::Budget::new();
    let cluster = capstan::overlay::ClusterContext {
        namespace: "default",
        pools: &[],
        budget: &budget,
    };
    match capstan::overlay::apply(&built, &cluster, &mut objects) {
        Ok(()) => Value::Array(objects.into_iter().map(|r| r.value).collect()),
        Err(e) => json!({"error": e.to_string()}),
    }
}

/// The same patch for kustomize: a strategic patch carries the object's identity.
fn run_kustomize(case: &Case, kubectl: &Path) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let obj = &case.object;
    std::fs::write(dir.path().join("object.yaml"), obj.to_string()).unwrap();
    let patch = if case.patch_type == "strategic" {
        let mut p = case.patch.as_object().cloned().unwrap_or_default();
        let mut out = Map::new();
        out.insert("apiVersion".into(), obj["apiVersion"].clone());
        out.insert("kind".into(), obj["kind"].clone());
        let mut meta = p
            .shift_remove("metadata")
            .and_then(|m| m.as_object().cloned())
            .unwrap_or_default();
        if !meta.contains_key("name") {
            meta.insert("name".into(), obj["metadata"]["name"].clone());
        }
        out.insert("metadata".into(), Value::Object(meta));
        for (k, v) in p {
            if k != "apiVersion" && k != "kind" {
                out.insert(k, v);
            }
        }
        Value::Object(out)
    } else {
        case.patch.clone()
    };
    std::fs::write(dir.path().join("patch.yaml"), patch.to_string()).unwrap();
    let k = json!({
        "resources": ["object.yaml"],
        "patches": [{"path": "patch.yaml", "target": {"kind": obj["kind"], "name": obj["metadata"]["name"]}}],
    });
    std::fs::write(dir.path().join("kustomization.yaml"), k.to_string()).unwrap();
    let o = std::process::Command::new(kubectl)
        .arg("kustomize")
        .arg(dir.path())
        .output()
        .expect("kubectl runs");
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        let msg = err
            .split_once("err=")
            .map_or(err.as_ref(), |(_, m)| m)
            .replace(&dir.path().display().to_string(), "CASE");
        let msg: String = msg.trim().chars().take(300).collect();
        return json!({"error": msg});
    }
    Value::Array(capstan::yaml::parse_stream(&String::from_utf8_lossy(&o.stdout)).unwrap())
}

/// Where two results first differ, and what each holds there.
fn difference(a: &Value, b: &Value, at: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.keys()
                .chain(y.keys())
                .find_map(|k| match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => difference(p, q, &format!("{at}/{k}")),
                    (p, q) => Some(format!("{at}/{k}: {p:?} vs {q:?}")),
                })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| difference(p, q, &format!("{at}/{i}"))),
        _ if a == b => None,
        _ => Some(format!("{at}: {a} vs {b}")),
    }
}

fn is_error(v: &Value) -> bool {
    v.get("error").is_some()
}

/// Two results agree when both are errors, or both are the same objects.
fn agree(a: &Value, b: &Value) -> bool {
    (is_error(a) && is_error(b)) || (!is_error(a) && !is_error(b) && a == b)
}

type Recording = BTreeMap<String, BTreeMap<String, Value>>;

fn expected_path(file: &str) -> PathBuf {
    corpus_dir().join(format!("{file}.expected.json"))
}

fn recording(file: &str) -> Recording {
    std::fs::read_to_string(expected_path(file))
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or_default()
}

fn write_recording(file: &str, rec: &Recording) {
    let mut text = serde_json::to_string_pretty(rec).unwrap();
    text.push('\n');
    std::fs::write(expected_path(file), text).unwrap();
}

fn bless() -> bool {
    std::env::var("CAPSTAN_BLESS").is_ok_and(|v| v == "1")
}

#[test]
fn corpus_agrees_with_recorded_kustomize() {
    let cases = all_cases();
    if bless() {
        match kubectl() {
            Some(kubectl) => {
                check_kustomize(&cases, &kubectl);
            }
            None => eprintln!(
                "notice: kubectl is not on the PATH: kustomize's recordings are not re-recorded"
            ),
        }
    }
    let mut failures = Vec::new();
    let (mut agreements, mut divergences) = (0, 0);
    let mut by_file: BTreeMap<String, Recording> = BTreeMap::new();
    for case in &cases {
        let rec = by_file
            .entry(case.file.clone())
            .or_insert_with(|| recording(&case.file));
        let entry = rec.entry(case.name.clone()).or_default();
        let Some(kustomize) = entry.get("kustomize").cloned() else {
            failures.push(format!(
                "{}/{}: no recorded kustomize output (run with kubectl and CAPSTAN_BLESS=1)",
                case.file, case.name
            ));
            continue;
        };
        let ours = run_capstan(case);
        match &case.divergence {
            None => {
                agreements += 1;
                entry.remove("capstan");
                if !agree(&ours, &kustomize) {
                    failures.push(format!(
                        "{}/{}: capstan differs from kustomize (capstan vs kustomize): {}",
                        case.file,
                        case.name,
                        difference(&ours, &kustomize, "").unwrap_or_default()
                    ));
                }
            }
            Some(reason) => {
                divergences += 1;
                if agree(&ours, &kustomize) {
                    failures.push(format!(
                        "{}/{}: listed as a divergence ({reason}) but capstan now agrees with kustomize: remove `divergence`",
                        case.file, case.name
                    ));
                }
                if bless() {
                    entry.insert("capstan".into(), ours);
                } else if entry.get("capstan") != Some(&ours) {
                    failures.push(format!(
                        "{}/{}: capstan's result changed (now vs recorded): {}",
                        case.file,
                        case.name,
                        difference(&ours, entry.get("capstan").unwrap_or(&Value::Null), "")
                            .unwrap_or_default()
                    ));
                }
            }
        }
    }
    if bless() {
        for (file, rec) in &by_file {
            write_recording(file, rec);
        }
    }
    eprintln!(
        "overlay corpus: {} cases, {agreements} agree with kustomize, {divergences} documented divergences",
        cases.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        cases.len() >= 150,
        "the corpus holds {} cases, fewer than 150",
        cases.len()
    );
}

/// kubectl on the PATH, if there is one.
fn kubectl() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("kubectl"))
            .find(|p| p.is_file())
    })
}

#[test]
#[ignore = "needs kubectl"]
fn recorded_output_is_kustomize_output() {
    if bless() {
        return; // corpus_agrees_with_recorded_kustomize records kustomize's output first
    }
    crate::util::need("kubectl", &["version", "--client"]);
    let kubectl = kubectl().expect("kubectl ran, so it is on the PATH");
    let failures = check_kustomize(&all_cases(), &kubectl);
    let version = std::process::Command::new(&kubectl)
        .args(["version", "--client", "-o", "json"])
        .output()
        .ok()
        .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok())
        .and_then(|v| v["kustomizeVersion"].as_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
    assert!(
        failures.is_empty(),
        "{}\n(the recordings come from kustomize v5.5.0; this kubectl has kustomize {version})",
        failures.join("\n")
    );
}

/// Run every case through `kubectl kustomize` and compare with the recording (rewritten
/// when blessing); the differences.
fn check_kustomize(cases: &[Case], kubectl: &Path) -> Vec<String> {
    let results: Vec<Value> = std::thread::scope(|s| {
        let chunks: Vec<_> = cases
            .chunks(cases.len().div_ceil(8).max(1))
            .map(|chunk| {
                let kubectl = &kubectl;
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|c| run_kustomize(c, kubectl))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        chunks.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let mut failures = Vec::new();
    let mut by_file: BTreeMap<String, Recording> = BTreeMap::new();
    for (case, actual) in cases.iter().zip(results) {
        let rec = by_file
            .entry(case.file.clone())
            .or_insert_with(|| recording(&case.file));
        let entry = rec.entry(case.name.clone()).or_default();
        let recorded = entry.get("kustomize").cloned().unwrap_or(Value::Null);
        if !agree(&recorded, &actual) {
            failures.push(format!(
                "{}/{}: kubectl kustomize differs from the recording (now vs recorded): {}",
                case.file,
                case.name,
                difference(&actual, &recorded, "").unwrap_or_default()
            ));
        }
        if bless() {
            entry.insert("kustomize".into(), actual);
        }
    }
    if bless() {
        for (file, rec) in &mut by_file {
            let names: Vec<&String> = cases
                .iter()
                .filter(|c| &c.file == file)
                .map(|c| &c.name)
                .collect();
            rec.retain(|k, _| names.contains(&k));
            write_recording(file, rec);
        }
    }
    failures
}

fn directive_keys(v: &Value, at: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k.starts_with('$') || capstan::overlay::is_directive(k) {
                    out.push(format!("{at}.{k}"));
                }
                directive_keys(x, &format!("{at}.{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                directive_keys(x, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn no_directive_reaches_output() {
    let mut found = Vec::new();
    for entry in walkdir::WalkDir::new(root().join("tests/golden")) {
        let entry = entry.unwrap();
        let p = entry.path();
        if p.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(p).unwrap();
            for (i, doc) in capstan::yaml::parse_stream(&text)
                .unwrap()
                .iter()
                .enumerate()
            {
                directive_keys(doc, &format!("{}#{i}", p.display()), &mut found);
            }
        }
    }
    let cases = all_cases();
    let mut merged = 0;
    for case in &cases {
        let ours = run_capstan(case);
        if !is_error(&ours) {
            directive_keys(&ours, &format!("{}/{}", case.file, case.name), &mut found);
        }
        // The same patch as an RFC 7396 merge patch: directives are data there, so a patch
        // holding one is refused, never written out.
        if case.patch_type == "strategic" {
            let as_merge = Case {
                file: case.file.clone(),
                name: case.name.clone(),
                object: case.object.clone(),
                patch_type: "merge".into(),
                patch: case.patch.clone(),
                divergence: None,
            };
            let ours = run_capstan(&as_merge);
            let mut in_patch = Vec::new();
            directive_keys(&case.patch, "", &mut in_patch);
            if is_error(&ours) {
                let message = ours["error"].as_str().unwrap_or_default();
                assert!(
                    in_patch.is_empty() || message.contains("need `type: strategic`"),
                    "{}/{} as a merge patch: {message}",
                    case.file,
                    case.name
                );
            } else {
                merged += 1;
                directive_keys(
                    &ours,
                    &format!("{}/{} (as a merge patch)", case.file, case.name),
                    &mut found,
                );
            }
        }
    }
    assert!(found.is_empty(), "directives in output: {found:?}");
    assert!(
        merged > 100,
        "only {merged} corpus patches applied as merge patches"
    );
}

/// `src/overlay/merge_keys.rs` is what `tools/merge-keys.py` generates from its
/// inputs (Kubernetes' OpenAPI definitions from `kubernetes-validate`, the CRDs vendored in
/// `tests/fixtures/crds`).
#[test]
#[ignore = "needs python3 with pyyaml and kubernetes-validate"]
fn merge_key_table_is_generated_from_its_inputs() {
    crate::util::generated_by("merge-keys.py");
}
