//! The scripting conventions of issue 42 items 5 and 6, end to end with snapshots of exit
//! code, stdout and stderr: `render -o`'s summary and `--quiet`, and render's warning for a
//! sealed file that lacks a recipient of `spec.recipients`.

use crate::util::*;

/// A recipient no sealed file of the example is encrypted to (a fresh key's public half,
/// fixed so the snapshot is stable).
const NEW_RECIPIENT: &str = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p";

#[test]
fn render_output_prints_a_summary_and_quiet_drops_it() {
    let (_t, repo) = example_copy();
    let o = capstan_plain(
        &["render", "clusters/lab-f", "clusters/lab-g", "-o", "out"],
        &repo,
        &[],
    );
    assert_golden("render-o-summary.txt", &transcript(&o));
    let before = snapshot(&repo.join("out"));
    let o = capstan_plain(
        &["render", "clusters/lab-f", "-o", "out", "--quiet"],
        &repo,
        &[],
    );
    assert_golden("render-o-quiet.txt", &transcript(&o));
    // `--quiet` is about the report only: the same files are written.
    let after: Vec<_> = snapshot(&repo.join("out"))
        .into_iter()
        .filter(|(p, _)| p.starts_with("lab-f/"))
        .collect();
    let lab_f: Vec<_> = before
        .into_iter()
        .filter(|(p, _)| p.starts_with("lab-f/"))
        .collect();
    assert_eq!(after, lab_f);
    // Without -o there is nothing to be quiet about: refused as a usage error.
    let o = capstan_plain(&["render", "clusters/lab-f", "--quiet"], &repo, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", transcript(&o));
    assert!(stdout(&o).is_empty());
}

#[test]
fn render_warns_of_a_sealed_file_missing_a_listed_recipient() {
    let (_t, repo) = example_copy();
    let file = repo.join("clusters/lab-f/cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let at = "  recipients:\n";
    assert!(text.contains(at));
    std::fs::write(
        &file,
        text.replacen(at, &format!("{at}  - {NEW_RECIPIENT}\n"), 1),
    )
    .unwrap();
    let o = capstan_plain(&["render", "clusters/lab-f", "-o", "out", "-q"], &repo, &[]);
    assert_golden("render-missing-recipient.txt", &transcript(&o));
    // The stream flavour warns the same way, on stderr only.
    let o = capstan_plain(&["render", "clusters/lab-f"], &repo, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stderr(&o)
            .matches(&format!(
                "not encrypted to a recipient listed in spec.recipients: {NEW_RECIPIENT}"
            ))
            .count(),
        3,
        "{}",
        stderr(&o)
    );
    // The fix the warning names clears it.
    let o = capstan_plain(
        &[
            "secrets",
            "rekey",
            "clusters/lab-f",
            "-i",
            "testdata/age-identity.txt",
        ],
        &repo,
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = capstan_plain(&["render", "clusters/lab-f", "-o", "out", "-q"], &repo, &[]);
    assert_eq!(transcript(&o), "exit: 0\n--- stdout\n--- stderr\n");
}

/// The roff names `capstan\-x(1)` a page refers to, as file names (`capstan-x.1`).
fn referenced_pages(roff: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = roff;
    while let Some(at) = rest.find("capstan\\-") {
        let tail = &rest[at..];
        let end = tail.find("(1)").unwrap_or(0);
        let name = &tail[..end];
        if end > 0
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '\\' || c == '-')
        {
            out.push(format!("{}.1", name.replace("\\-", "-")));
        }
        rest = &tail[1..];
    }
    out
}

#[test]
fn every_subcommand_has_a_man_page_with_environment_exit_status_and_examples() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("man1");
    // A dry run names every page and writes nothing, not even the directory.
    let o = capstan_plain(&["man", "--out-dir", "man1", "--dry-run"], t.path(), &[]);
    assert!(!dir.exists(), "a dry run created {}", dir.display());
    let masked: String = transcript(&o)
        .lines()
        .map(|l| {
            // Byte counts follow the help texts; the snapshot holds the page list.
            let words: Vec<String> = l
                .split(' ')
                .map(|w| {
                    if w.chars().all(|c| c.is_ascii_digit()) && !w.is_empty() && l.contains("bytes")
                    {
                        "N".to_string()
                    } else {
                        w.to_string()
                    }
                })
                .collect();
            words.join(" ") + "\n"
        })
        .collect();
    assert_golden("man-dry-run.txt", &masked);
    let o = capstan_plain(&["man", "--out-dir", "man1"], t.path(), &[]);
    assert!(o.status.success(), "{}", transcript(&o));
    let pages: Vec<(String, Vec<u8>)> = snapshot(&dir);
    let names: Vec<&str> = pages.iter().map(|p| p.0.as_str()).collect();
    for want in [
        "capstan.1",
        "capstan-render.1",
        "capstan-secrets-decrypt.1",
        "capstan-backup-check.1",
        "capstan-import-kubeadm.1",
    ] {
        assert!(names.contains(&want), "{want} not generated: {names:?}");
    }
    for (name, text) in &pages {
        let text = String::from_utf8_lossy(text);
        for s in [".SH ENVIRONMENT", ".SH \"EXIT STATUS\"", ".SH EXAMPLES"] {
            assert!(text.contains(s), "{name} lacks {s}");
        }
        // Every page a page names (the top page's SUBCOMMANDS, a group's) is generated.
        for r in referenced_pages(&text) {
            assert!(
                names.contains(&r.as_str()),
                "{name} names {r}, not generated"
            );
        }
    }
    let top =
        String::from_utf8_lossy(&pages.iter().find(|p| p.0 == "capstan.1").unwrap().1).into_owned();
    assert!(referenced_pages(&top).contains(&"capstan-render.1".to_string()));
    // `capstan man` alone prints the top page as written.
    let o = capstan_plain(&["man"], t.path(), &[]);
    assert_eq!(stdout(&o), top);
}

#[test]
fn render_dry_run_says_what_it_would_write_and_writes_nothing() {
    let (_t, repo) = example_copy();
    let before = snapshot(&repo);
    let o = capstan_plain(
        &[
            "render",
            "clusters/lab-f",
            "clusters/lab-g",
            "-o",
            "out",
            "--dry-run",
        ],
        &repo,
        &[],
    );
    assert_golden("render-o-dry-run.txt", &transcript(&o));
    assert_eq!(snapshot(&repo), before, "a dry run changed the tree");
    assert!(!repo.join("out").exists());
    // Over an existing output too: nothing rewritten, no lock left behind.
    let o = capstan_plain(&["render", "clusters/lab-f", "-o", "out"], &repo, &[]);
    assert!(o.status.success(), "{}", transcript(&o));
    let before = snapshot(&repo);
    let o = capstan_plain(
        &["render", "clusters/lab-f", "-o", "out", "--dry-run"],
        &repo,
        &[],
    );
    assert!(o.status.success(), "{}", transcript(&o));
    assert_eq!(snapshot(&repo), before, "a dry run changed the tree");
}

/// Every object key of a JSON document that is not camelCase, with where it is.
fn not_camel_case(v: &serde_json::Value, at: &str, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                let camel = k.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                    && k.chars().all(|c| c.is_ascii_alphanumeric());
                if !camel {
                    out.push(format!("{at}.{k}"));
                }
                not_camel_case(x, &format!("{at}.{k}"), out);
            }
        }
        serde_json::Value::Array(a) => {
            for x in a {
                not_camel_case(x, &format!("{at}[]"), out);
            }
        }
        _ => {}
    }
}

/// Run a command whose `--format json` report is on stdout; its parsed JSON, every key
/// checked to be camelCase.
fn json_report(args: &[&str], cwd: &std::path::Path, codes: &[i32]) -> serde_json::Value {
    let o = capstan_plain(args, cwd, &[]);
    let code = o.status.code().unwrap_or(-1);
    assert!(codes.contains(&code), "{args:?}: {}", transcript(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", transcript(&o)));
    let mut bad = Vec::new();
    not_camel_case(&v, "", &mut bad);
    assert!(bad.is_empty(), "{args:?}: keys not in camelCase: {bad:?}");
    v
}

#[test]
fn every_json_report_has_camel_case_keys() {
    let (_t, repo) = example_copy();
    let o = capstan_plain(&["render", "clusters/lab-f", "-o", "out", "-q"], &repo, &[]);
    assert!(o.status.success(), "{}", transcript(&o));
    let stream = capstan_plain(&["render", "clusters/lab-f"], &repo, &[]);
    std::fs::write(repo.join("a.yaml"), stdout(&stream)).unwrap();
    std::fs::write(
        repo.join("b.yaml"),
        stdout(&stream).replace("numCPUs: 4", "numCPUs: 8"),
    )
    .unwrap();
    let explain = r#"err="[invalid bearer token, token audiences [\"https://kubernetes.default.svc.cluster.local\"] is invalid for the target audiences [\"https://10.0.0.10:6443\"]]""#;
    let runs: &[(&[&str], &[i32])] = &[
        (&["check", "clusters/lab-f", "--format", "json"], &[0, 1]),
        (&["plan", "clusters/lab-f", "--format", "json"], &[0]),
        (&["validate", "out/lab-f", "--format", "json"], &[0]),
        (&["version", "--format", "json"], &[0]),
        (&["rehearse", "clusters/lab-f", "--format", "json"], &[0]),
        (&["explain", "--format", "json", explain], &[0]),
        (&["diff", "a.yaml", "b.yaml", "--format", "json"], &[1]),
        (
            &[
                "secrets",
                "seal",
                "clusters/lab-f",
                "-i",
                "testdata/age-identity.txt",
                "--dry-run",
                "--format",
                "json",
            ],
            &[0],
        ),
        (
            &[
                "init",
                "fleet",
                "--dry-run",
                "--format",
                "json",
                "-r",
                NEW_RECIPIENT,
            ],
            &[0],
        ),
    ];
    for (args, codes) in runs {
        json_report(args, &repo, codes);
    }
    // restore plan: the same sections as its Markdown.
    std::fs::create_dir(repo.join("store")).unwrap();
    let store = format!("file://{}", repo.join("store").display());
    let v = json_report(
        &[
            "restore", "plan", ".", "--backup", &store, "--format", "json",
        ],
        &repo,
        &[0],
    );
    let md = stdout(&capstan_plain(
        &["restore", "plan", ".", "--backup", &store],
        &repo,
        &[],
    ));
    let titles: Vec<&str> = md.lines().filter_map(|l| l.strip_prefix("## ")).collect();
    let json_titles: Vec<&str> = v["sections"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["title"].as_str())
        .collect();
    assert!(!titles.is_empty());
    assert_eq!(titles, json_titles);
    assert_eq!(v["store"], store.as_str());
    // Reports whose keys were snake_case before: the names they have now.
    let v = json_report(&["plan", "clusters/lab-f", "--format", "json"], &repo, &[0]);
    assert_eq!(v["nextPhase"], "control-plane");
    let v = json_report(&["validate", "out/lab-f", "--format", "json"], &repo, &[0]);
    assert_eq!(
        (v["invalid"].as_u64(), v["skipped"].as_u64()),
        (Some(0), Some(0))
    );
    assert!(v["validated"].as_u64().unwrap() > 10, "{v}");
    let v = json_report(&["version", "--format", "json"], &repo, &[0]);
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert!(v["kubernetesSchemas"]
        .as_array()
        .is_some_and(|a| !a.is_empty()));
}

#[test]
fn validate_json_names_each_violation_with_its_object_and_path() {
    let (_t, repo) = example_copy();
    let stream = stdout(&capstan_plain(&["render", "clusters/lab-f"], &repo, &[]));
    let broken = stream.replacen("numCPUs: 4", "numCPUs: four", 1);
    assert_ne!(broken, stream);
    std::fs::write(repo.join("broken.yaml"), broken).unwrap();
    let o = capstan_plain(&["validate", "broken.yaml", "--format", "json"], &repo, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", transcript(&o));
    assert!(
        stderr(&o).is_empty(),
        "JSON mode keeps stderr for errors: {}",
        stderr(&o)
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["invalid"], 1);
    let found = &v["violations"][0];
    assert_eq!(found["source"], "broken.yaml");
    assert_eq!(found["kind"], "VSphereMachineTemplate");
    assert_eq!(found["path"], "spec.template.spec.numCPUs");
    // The text report says the same on stderr.
    let o = capstan_plain(&["validate", "broken.yaml"], &repo, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("broken.yaml: VSphereMachineTemplate/"),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("spec.template.spec.numCPUs: "),
        "{}",
        stderr(&o)
    );
}

/// The `files` of a writer's JSON report, as (path, action) pairs.
fn files_of(v: &serde_json::Value) -> Vec<(String, String)> {
    v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["action"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Run a writer with `--dry-run` and then without: the dry run changes nothing under
/// `repo` and names exactly the files and actions of the real run. Returns the dry run's
/// report.
fn dry_run_then_real(repo: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let before = snapshot(repo);
    let mut dry = args.to_vec();
    dry.extend_from_slice(&["--dry-run", "--format", "json"]);
    let d = json_report(&dry, repo, &[0]);
    assert_eq!(d["dryRun"], true);
    assert!(
        snapshot(repo) == before,
        "{args:?} --dry-run changed the repository"
    );
    let mut real = args.to_vec();
    real.extend_from_slice(&["--format", "json"]);
    let r = json_report(&real, repo, &[0]);
    assert_eq!(r["dryRun"], false);
    assert_eq!(
        files_of(&d),
        files_of(&r),
        "{args:?}: the dry run and the run differ"
    );
    d
}

#[test]
fn every_writer_has_a_dry_run_that_writes_nothing_and_says_what_the_run_does() {
    let (_t, repo) = example_copy();
    // A new recipient: rekey rewraps every file.
    let file = repo.join("clusters/lab-f/cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replacen(
            "  recipients:\n",
            &format!("  recipients:\n  - {NEW_RECIPIENT}\n"),
            1,
        ),
    )
    .unwrap();
    let id = ["-i", "testdata/age-identity.txt"];
    let o = capstan_plain(
        &[
            "secrets",
            "rekey",
            "clusters/lab-f",
            id[0],
            id[1],
            "--dry-run",
        ],
        &repo,
        &[],
    );
    assert_golden("rekey-dry-run.txt", &transcript(&o));
    let d = dry_run_then_real(&repo, &["secrets", "rekey", "clusters/lab-f", id[0], id[1]]);
    let written = files_of(&d).iter().filter(|(_, a)| a == "written").count();
    assert_eq!(written, 5, "secrets.age and the four sealed files: {d}");
    // Rekeyed: a seal now has nothing to change, and says so.
    let d = dry_run_then_real(&repo, &["secrets", "seal", "clusters/lab-f", id[0], id[1]]);
    assert!(files_of(&d).iter().all(|(_, a)| a == "unchanged"), "{d}");
    dry_run_then_real(
        &repo,
        &["secrets", "seal-operator", "clusters/lab-f", id[0], id[1]],
    );
    // init: nothing, not even the directory, before the run.
    let d = dry_run_then_real(&repo, &["init", "fleet", "-r", NEW_RECIPIENT]);
    assert!(files_of(&d).iter().all(|(_, a)| a == "created"), "{d}");
    // The example copy is no git repository, and `fleet` does not exist yet.
    assert_eq!(d["gitRepository"], "would be initialized", "{d}");
    let d = dry_run_then_real(&repo, &["init", "fleet", "-r", NEW_RECIPIENT]);
    assert!(files_of(&d).iter().all(|(_, a)| a == "kept"), "{d}");
    assert_eq!(
        d["gitRepository"], "existing",
        "the first run made it one: {d}"
    );
}

#[test]
fn import_dry_run_checks_everything_and_writes_nothing() {
    use capstan::secrets::pki::testkit::{self, Alg};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    testkit::write_kubeadm_dir(&dir.join("kubeadm"), Alg::P256, "secretbox", "key2");
    let recipient = write_identity(&dir.join("identity.txt"));
    let mut args = IMPORT_ARGS.to_vec();
    args.extend_from_slice(&[
        "--talos-version",
        "v1.10.6",
        "--out",
        "clusters/lab-f",
        "--name",
        "lab-f",
        "--bootstrap-token",
        "abcdef.0123456789abcdef",
        "--recipient",
        &recipient,
    ]);
    let mut dry = args.clone();
    dry.push("--dry-run");
    let o = capstan_plain(&dry, dir, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", transcript(&o));
    assert!(!dir.join("clusters").exists(), "a dry run creates nothing");
    let text = stderr(&o);
    for f in [
        "secrets.age",
        "cluster.yaml",
        "secrets/workload/bootstrap-token-abcdef.yaml",
    ] {
        assert!(
            text.contains(&format!("clusters/lab-f/{f}: would be created")),
            "{text}"
        );
    }
    assert!(text.ends_with("dry run: nothing was written\n"), "{text}");
    let d = dry_run_then_real(dir, &args);
    assert_eq!(d["cluster"], "lab-f");
    assert_eq!(d["bootstrapTokenId"], "abcdef");
    // A refusal is the same with --dry-run: the bundle exists now.
    let o = capstan_plain(&dry, dir, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", transcript(&o));
    assert!(
        stderr(&o).contains("secrets.age: already exists"),
        "{}",
        stderr(&o)
    );
    // And --update --dry-run says what it would replace, writing nothing.
    let before = snapshot(dir);
    let mut update = dry.clone();
    update.push("--update");
    let o = capstan_plain(&update, dir, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", transcript(&o));
    assert!(snapshot(dir) == before);
    assert!(
        stderr(&o).contains("would update clusters/lab-f"),
        "{}",
        stderr(&o)
    );
    // The bootstrap Secret is printed by a real import only.
    let mut both = dry.clone();
    both.push("--print-bootstrap-secret");
    let o = capstan_plain(&both, dir, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", transcript(&o));
}

#[test]
fn the_old_json_flag_of_backup_list_and_check_is_kept_hidden_as_format_json() {
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("file://{}", tmp.path().display());
    let new = capstan_plain(
        &["backup", "list", &url, "--format", "json"],
        tmp.path(),
        &[],
    );
    let old = capstan_plain(&["backup", "list", &url, "--json"], tmp.path(), &[]);
    assert_eq!(transcript(&new), transcript(&old));
    assert_eq!(stdout(&new), "[]\n", "{}", transcript(&new));
    let both = capstan_plain(
        &["backup", "list", &url, "--json", "--format", "text"],
        tmp.path(),
        &[],
    );
    assert_eq!(both.status.code(), Some(2), "{}", transcript(&both));
    let help = capstan_plain(&["backup", "check", "--help"], tmp.path(), &[]);
    assert!(stdout(&help).contains("--format"), "{}", stdout(&help));
    assert!(
        !stdout(&help).contains("--json"),
        "hidden: {}",
        stdout(&help)
    );
}

#[test]
fn the_example_checks_without_a_warning() {
    let repo = example();
    for (cluster, blocking) in [("lab-f", 1), ("lab-g", 0)] {
        let v = json_report(
            &["check", &format!("clusters/{cluster}"), "--format", "json"],
            &repo,
            &[0, 1],
        );
        assert_eq!(v["counts"]["warning"], 0, "{cluster}: {v}");
        // lab-f is in phase prepare, where check-inputs blocks until every kubeadm input
        // is given: the one blocking finding, and the one its runbook says how to clear.
        assert_eq!(v["counts"]["blocking"], blocking, "{cluster}: {v}");
        if blocking > 0 {
            let ids: Vec<&str> = v["findings"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["severity"] == "blocking")
                .filter_map(|f| f["id"].as_str())
                .collect();
            assert_eq!(ids, ["check-inputs"], "{cluster}");
        }
    }
}

#[test]
fn vsphere_identity_dry_run_reads_the_password_and_writes_nothing() {
    let (_t, repo) = example_copy();
    let run = |extra: &[&str]| {
        let mut c = assert_cmd::Command::cargo_bin("capstan").unwrap();
        c.args([
            "secrets",
            "vsphere-identity",
            "clusters/lab-f",
            "--username",
            "capv@vsphere.local",
        ])
        .args(extra)
        .current_dir(&repo)
        .env("NO_COLOR", "1")
        .write_stdin("a new password\n");
        c.output().unwrap()
    };
    let before = snapshot(&repo);
    let o = run(&["--dry-run"]);
    assert_eq!(
        transcript(&o),
        "exit: 0\n--- stdout\n--- stderr\nclusters/lab-f/secrets/lab-f-vsphere.yaml: would be written\n\
         dry run: nothing was written\n"
    );
    assert!(
        snapshot(&repo) == before,
        "--dry-run changed the repository"
    );
    let o = run(&["--format", "json"]);
    assert!(o.status.success(), "{}", transcript(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["files"][0]["action"], "written", "{v}");
    assert!(snapshot(&repo) != before);
    assert!(!stdout(&o).contains("a new password"));
}

#[test]
fn backup_push_and_pull_dry_runs_check_everything_and_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir(dir.join("moved")).unwrap();
    std::fs::write(
        dir.join("moved/Cluster_lab-f_lab-f.yaml"),
        r#"{"apiVersion":"cluster.x-k8s.io/v1beta1","kind":"Cluster","metadata":{"name":"lab-f","namespace":"lab-f"}}"#,
    )
    .unwrap();
    std::fs::create_dir(dir.join("store")).unwrap();
    let recipient = write_identity(&dir.join("id.txt"));
    let url = format!("file://{}", dir.join("store").display());
    let push = ["backup", "push", "moved", &url, "-r", &recipient];
    let mut dry = push.to_vec();
    dry.push("--dry-run");
    let o = capstan_plain(&dry, dir, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", transcript(&o));
    assert!(
        stderr(&o).contains("1 objects encrypted to 1 recipient(s); nothing uploaded (--dry-run"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_dir(dir.join("store")).unwrap().count(), 0);
    // Refused as the push would be: an empty directory.
    std::fs::create_dir(dir.join("empty")).unwrap();
    let o = capstan_plain(
        &[
            "backup",
            "push",
            "empty",
            &url,
            "-r",
            &recipient,
            "--dry-run",
        ],
        dir,
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", transcript(&o));
    let o = capstan_plain(&push, dir, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", transcript(&o));
    // pull --dry-run opens and verifies the backup, and writes nothing.
    let pull = ["backup", "pull", &url, "out", "-i", "id.txt", "--dry-run"];
    let o = capstan_plain(&pull, dir, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", transcript(&o));
    assert!(
        stderr(&o).contains("verified and decrypted: 1 objects would be written to out"),
        "{}",
        stderr(&o)
    );
    assert!(!dir.join("out").exists());
    // With another identity it does not open: refused, as the pull would be.
    write_identity(&dir.join("other.txt"));
    let o = capstan_plain(
        &[
            "backup",
            "pull",
            &url,
            "out",
            "-i",
            "other.txt",
            "--dry-run",
        ],
        dir,
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", transcript(&o));
    assert!(!dir.join("out").exists());
}

#[test]
fn render_output_reports_as_json_too() {
    let (_t, repo) = example_copy();
    let text = capstan_plain(&["render", ".", "-o", "out", "--dry-run"], &repo, &[]);
    let dry = json_report(
        &["render", ".", "-o", "out", "--dry-run", "--format", "json"],
        &repo,
        &[0],
    );
    assert!(!repo.join("out").exists());
    assert_eq!(dry["dryRun"], true);
    // The same totals as the text summary.
    let (objects, bytes) = (
        dry["objects"].as_u64().unwrap(),
        dry["bytes"].as_u64().unwrap(),
    );
    assert!(
        stderr(&text).contains(&format!(
            "2 clusters, {objects} objects, {bytes} bytes into out"
        )),
        "{}",
        stderr(&text)
    );
    let run = json_report(
        &["render", ".", "-o", "out", "--format", "json"],
        &repo,
        &[0],
    );
    assert_eq!(
        (run["objects"].clone(), run["bytes"].clone()),
        (dry["objects"].clone(), dry["bytes"].clone())
    );
    let outcomes: Vec<&str> = run["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["outcome"].as_str())
        .collect();
    assert_eq!(outcomes, ["created", "created"]);
    let again = json_report(
        &["render", ".", "-o", "out", "--format", "json"],
        &repo,
        &[0],
    );
    assert_eq!(again["clusters"][0]["outcome"], "unchanged");
    // --quiet says nothing at all; a JSON report with it is a contradiction, refused.
    let o = capstan_plain(
        &["render", ".", "-o", "out", "-q", "--format", "json"],
        &repo,
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", transcript(&o));
}
