//! The library's facade, called as an embedding program calls it: the same results as the
//! commands it stands for (`render`, `diff --git`, `check`), on the example repository.

use crate::util;
use std::path::Path;

#[test]
fn render_repository_is_what_capstan_render_prints() {
    let example = util::example();
    let o = util::capstan(&["render", "."], &example);
    assert!(o.status.success(), "{}", util::stderr(&o));
    let stream = capstan::render_repository(&example).unwrap();
    assert_eq!(stream, util::stdout(&o));
    // An error names the file, as the command does.
    let e = capstan::render_repository(Path::new("/nonexistent/capstan-repo")).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/capstan-repo"), "{e}");
}

#[test]
fn check_cluster_finds_what_capstan_check_finds_without_inputs() {
    let dir = util::example().join("clusters/lab-g");
    let findings = capstan::check_cluster(&dir).unwrap();
    let o = util::capstan(
        &["check", "clusters/lab-g", "--format", "json"],
        &util::example(),
    );
    let report: serde_json::Value = serde_json::from_str(&util::stdout(&o)).unwrap();
    let ids: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert!(!ids.is_empty());
    assert_eq!(findings.iter().map(|f| f.id).collect::<Vec<_>>(), ids);
}

#[test]
fn review_revisions_reports_what_capstan_diff_git_reports() {
    util::need("git", &["--version"]);
    let (_tmp, repo) = util::example_copy();
    util::git(&["init", "-q", "-b", "main"], &repo);
    util::git(&["config", "user.name", "capstan tests"], &repo);
    util::git(&["config", "user.email", "tests@capstan.invalid"], &repo);
    util::git(&["config", "commit.gpgsign", "false"], &repo);
    util::git(&["add", "-A"], &repo);
    util::git(&["commit", "-qm", "base"], &repo);
    let unchanged = capstan::review_revisions(&repo, "HEAD").unwrap();
    assert!(!unchanged.has_differences(), "{}", unchanged.text());
    let file = repo.join("clusters/lab-g/cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let edited = text.replacen("numCPUs: 4", "numCPUs: 6", 1);
    assert_ne!(edited, text, "the example has no `numCPUs: 4` to edit");
    std::fs::write(&file, edited).unwrap();
    util::git(&["commit", "-qam", "bigger"], &repo);
    let review = capstan::review_revisions(&repo, "HEAD~1..HEAD").unwrap();
    assert!(review.has_differences());
    let o = util::capstan(
        &["diff", "--git", "HEAD~1..HEAD", "--format", "json"],
        &repo,
    );
    assert_eq!(review.json(), util::stdout(&o));
    assert!(review.markdown(60_000).contains("lab-g"));
}
