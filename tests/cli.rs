//! CLI conventions: `--version` names the commit, subcommands call themselves `capstan`,
//! completions for bash, zsh and fish, and a man page.

use crate::util::*;

#[test]
fn version_names_the_release_and_the_commit_everywhere() {
    let o = capstan(&["--version"], &root());
    assert_eq!(o.status.code(), Some(0));
    let v = stdout(&o);
    assert!(
        v.starts_with(&format!("capstan {} (", env!("CARGO_PKG_VERSION"))),
        "{v}"
    );
    // A 12-digit commit, or "unknown" outside a git checkout.
    let inner = v.trim().rsplit_once('(').unwrap().1.trim_end_matches(')');
    let commit = inner.split(',').next().unwrap();
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
        "{v}"
    );
    let o = capstan(&["render", "--version"], &root());
    assert_eq!(stdout(&o), v, "a subcommand's --version is the program's");
}

#[test]
fn completions_and_the_man_page() {
    let o = capstan(&["completions", "bash"], &root());
    assert_eq!(o.status.code(), Some(0));
    let bash = stdout(&o);
    assert!(
        bash.contains("complete -F _capstan") || bash.contains("-F _capstan"),
        "{bash}"
    );
    assert!(bash.contains("backup") && bash.contains("render"));
    // bash accepts the script.
    let status = std::process::Command::new("bash")
        .args(["-c", "source /dev/stdin && complete -p capstan"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            c.stdin.take().unwrap().write_all(bash.as_bytes())?;
            c.wait()
        });
    // bash is no optional tool here: the kubeadm fixture script needs it as well.
    let status = status.expect("bash runs");
    assert!(status.success(), "bash refused the completion script");
    for shell in ["zsh", "fish"] {
        let o = capstan(&["completions", shell], &root());
        assert_eq!(o.status.code(), Some(0));
        assert!(stdout(&o).contains("capstan"));
    }
    let o = capstan(&["completions", "tcsh"], &root());
    assert_eq!(o.status.code(), Some(2));
    let o = capstan(&["man"], &root());
    assert_eq!(o.status.code(), Some(0));
    let man = stdout(&o);
    assert!(man.contains(".TH capstan 1"), "{man}");
    assert!(man.contains("render"));
}

#[test]
fn a_file_where_a_cluster_directory_is_expected_is_named_as_such() {
    let (_tmp, repo) = example_copy();
    let ids = repo.join("testdata/age-identity.txt");
    let ids = ids.to_str().unwrap();
    for cmd in [
        &["plan"][..],
        &["check"][..],
        &["secrets", "seal", "-i", ids][..],
    ] {
        let mut args = cmd.to_vec();
        args.push("clusters/lab-f/cluster.yaml");
        let o = capstan(&args, &repo);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&o).contains("clusters/lab-f/cluster.yaml: not a directory (a cluster directory, the one holding cluster.yaml, must be a directory)"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
}
