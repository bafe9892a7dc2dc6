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
