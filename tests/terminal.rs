//! Terminal-safe output, printer by printer through the CLI: each is fed ESC, OSC, CR, LF,
//! U+202E and a Markdown fence and heading ([`HOSTILE`]) in the names and values it prints
//! (object names, label and annotation values, file and directory names, bucket keys and
//! index fields, cluster names), and neither stdout nor stderr carries a raw control or
//! bidirectional character or a line the input started.

use crate::util::*;
use std::path::Path;
use std::process::Output;

/// Run capstan without colour and without identities from the environment.
fn run(args: &[&str], cwd: &Path) -> Output {
    capstan_plain(args, cwd, &[])
}

/// Both streams of `o` are terminal-safe, and its exit code is one of `codes`.
fn safe(what: &str, o: &Output, codes: &[i32]) {
    assert!(
        codes.contains(&o.status.code().unwrap_or(-1)),
        "{what}: exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        stdout(o),
        stderr(o)
    );
    assert_terminal_safe(&format!("{what} (stdout)"), &stdout(o));
    assert_terminal_safe(&format!("{what} (stderr)"), &stderr(o));
}

fn config_map(name: &str, value: &str) -> String {
    serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default",
            "labels": {"app": value, hostile("k"): value}, "annotations": {"note": value}},
        "data": {"k": value},
    })
    .to_string()
}

#[test]
fn diff_of_two_streams_escapes_names_values_and_file_names() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("a.yaml"), config_map("cm", "plain")).unwrap();
    let b = hostile("b");
    std::fs::write(
        t.join(&b),
        format!(
            "{}\n---\n{}\n",
            config_map("cm", &hostile("v")),
            config_map(&hostile("n"), &hostile("v"))
        ),
    )
    .unwrap();
    for format in ["text", "markdown", "json"] {
        let o = run(&["diff", "--format", format, "a.yaml", &b], t);
        safe(&format!("diff --format {format}"), &o, &[1]);
        if format != "json" {
            // The file name and the new object are there, escaped.
            assert!(stdout(&o).contains("\\u{1b}"), "{format}: {}", stdout(&o));
        }
    }
}

/// A `clusterctl move` directory whose Cluster object is named by a hostile input.
fn moved(dir: &Path, cluster: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("Cluster_lab-g_x.yaml"),
        serde_json::json!({"kind": "Cluster", "metadata": {"namespace": "lab-g", "name": cluster}})
            .to_string(),
    )
    .unwrap();
}

fn recipient() -> String {
    let text =
        std::fs::read_to_string(root().join("examples/gitops/testdata/age-identity.txt")).unwrap();
    text.lines()
        .find_map(|l| l.split_whitespace().find(|w| w.starts_with("age1")))
        .unwrap()
        .to_string()
}

#[test]
fn backup_list_and_check_escape_bucket_keys_and_index_fields() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let url = format!("file://{}/store", t.display());
    moved(&t.join("move"), &hostile("c"));
    let o = run(&["backup", "push", "move", &url, "-r", &recipient()], t);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let id = stdout(&o).trim().to_string();
    // The index edited in the bucket: its kinds and clusters carry the hostile strings
    // (neither is covered by the encrypted payload's check).
    let index = t.join("store").join(format!("{id}.json"));
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&index).unwrap()).unwrap();
    v["kinds"] = serde_json::json!({ hostile("K"): 1 });
    v["clusters"] = serde_json::json!([hostile("ns/")]);
    std::fs::write(&index, v.to_string()).unwrap();
    for json in [false, true] {
        let mut args = vec!["backup", "list", url.as_str()];
        if json {
            args.push("--json");
        }
        let o = run(&args, t);
        safe(&format!("backup list (json: {json})"), &o, &[0]);
        assert!(stdout(&o).contains(&id), "{}", stdout(&o));
    }
    let identity = root()
        .join("examples/gitops/testdata/age-identity.txt")
        .display()
        .to_string();
    let example = example().display().to_string();
    for json in [false, true] {
        let mut args = vec!["backup", "check", &example, &url, "-i", &identity];
        if json {
            args.push("--json");
        }
        let o = run(&args, t);
        safe(&format!("backup check (json: {json})"), &o, &[1]);
    }
    // An object named by a hostile key: the local store (object_store's LocalFileSystem)
    // refuses to list a path segment with a control character, and the refusal quotes the
    // key escaped, on one line. (An S3 bucket's listing of such a key is not run here.)
    std::fs::write(t.join("store").join(hostile("o") + ".age"), b"x").unwrap();
    let o = run(&["backup", "list", &url], t);
    safe("backup list (a hostile key)", &o, &[2]);
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
}

/// A copy of the example repository in `t/repo`.
fn repo(t: &Path) -> std::path::PathBuf {
    let r = t.join("repo");
    copy_tree(&example(), &r);
    r
}

#[test]
fn rehearse_escapes_a_hostile_cluster_directory_and_refuses_a_hostile_name_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let r = repo(tmp.path());
    let dir = format!("clusters/{}", hostile("lab"));
    std::fs::rename(r.join("clusters/lab-f"), r.join(&dir)).unwrap();
    let o = run(&["rehearse", &dir], &r);
    safe("rehearse (a hostile directory)", &o, &[0, 1]);
    // A cluster name is validated before anything prints it: the refusal is escaped.
    let file = r.join(&dir).join("cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replacen("name: lab-f", &format!("name: {:?}", hostile("lab")), 1),
    )
    .unwrap();
    let o = run(&["rehearse", &dir], &r);
    safe("rehearse (a hostile cluster name)", &o, &[2]);
}

/// `render` of a cluster directory named with a line break and an ESC, its cluster.yaml
/// broken: one escaped name in a one-line error, no line starting `error: forged`.
#[test]
fn render_and_validate_errors_quote_a_hostile_file_name_on_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let r = repo(tmp.path());
    let dir = format!("clusters/{}", hostile("lab"));
    std::fs::rename(r.join("clusters/lab-f"), r.join(&dir)).unwrap();
    let file = r.join(&dir).join("cluster.yaml");
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("x: [\n");
    std::fs::write(&file, text).unwrap();
    for args in [vec!["render", "."], vec!["render", dir.as_str()]] {
        let o = run(&args, &r);
        safe(&format!("{args:?}"), &o, &[2]);
        let e = stderr(&o);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(
            e.contains("lab\\u{1b}[2J\\u{1b}]0;x\\u{7}\\u{d}forged\\u{a}error: forged"),
            "{e}"
        );
    }
    // A directory that is not a cluster, named the same way.
    let o = run(&["render", &hostile("ov")], &r);
    safe("render (a hostile directory)", &o, &[2]);
    // validate: a hostile file name whose YAML is broken.
    let bad = hostile("v") + ".yaml";
    std::fs::write(r.join(&bad), "x: [\n").unwrap();
    let crds = root().join("tests/fixtures/crds").display().to_string();
    let o = run(&["validate", "--crds", &crds, &bad], &r);
    safe("validate", &o, &[2]);
    assert!(stderr(&o).contains("v\\u{1b}[2J"), "{}", stderr(&o));
}
