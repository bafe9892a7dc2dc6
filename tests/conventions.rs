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
