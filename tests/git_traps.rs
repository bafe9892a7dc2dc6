//! `diff --git` in a repository armed with every trap git offers a pull request: its own
//! configuration and an embedded bare repository's name an fsmonitor, hooks, an external
//! diff, a diff driver with textconv, clean/smudge and process filters and a promisor
//! remote whose upload-pack is a command, and a `.git` file points into the embedded one.
//! Plain git runs each trap (proved first); capstan runs none and reviews the real change.

use crate::util::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Every hook githooks(5) names.
const HOOKS: [&str; 28] = [
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "proc-receive",
    "post-receive",
    "post-update",
    "reference-transaction",
    "push-to-checkout",
    "pre-auto-gc",
    "post-rewrite",
    "sendemail-validate",
    "fsmonitor-watchman",
    "p4-changelist",
    "p4-prepare-changelist",
    "p4-post-changelist",
    "p4-pre-submit",
    "post-index-change",
];

struct Traps {
    _tmp: tempfile::TempDir,
    repo: PathBuf,
    markers: PathBuf,
}

impl Traps {
    /// The names of the traps that ran since the last call, forgotten.
    fn fired(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for e in std::fs::read_dir(&self.markers).unwrap() {
            let e = e.unwrap();
            out.insert(e.file_name().to_string_lossy().into_owned());
            std::fs::remove_file(e.path()).unwrap();
        }
        out
    }

    /// Rewrite every file of the reviewed clusters with its own bytes: their stat no
    /// longer matches the index, so git must read (and filter) them again.
    fn touch(&self) {
        for e in walkdir::WalkDir::new(self.repo.join("clusters")) {
            let e = e.unwrap();
            if e.file_type().is_file() && e.file_name() != ".git" {
                let bytes = std::fs::read(e.path()).unwrap();
                std::fs::write(e.path(), bytes).unwrap();
            }
        }
    }
}

/// Plain git in `cwd` (the test's own environment), its output whatever the exit code.
fn plain_git(args: &[&str], cwd: &Path) -> std::process::Output {
    std::process::Command::new("git")
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

fn git_ok(args: &[&str], cwd: &Path) -> String {
    let o = plain_git(args, cwd);
    assert!(o.status.success(), "git {args:?}: {}", stderr(&o));
    stdout(&o)
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert_eq!(text.matches(from).count(), 1, "{}: {from}", path.display());
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

/// Arm the configuration file `file`: every trap writes the marker `<prefix><trap>`.
fn arm(file: &Path, prefix: &str, trap: &Path, hooks: &Path, upstream: &Path) {
    let t = |name: &str| format!("{} {prefix}{name}", trap.display());
    let settings = [
        ("core.repositoryformatversion", "1".to_string()),
        ("extensions.partialClone", "origin".to_string()),
        ("core.fsmonitor", t("fsmonitor")),
        ("core.hooksPath", hooks.display().to_string()),
        ("diff.external", t("diff-external")),
        ("diff.evil.textconv", t("textconv")),
        ("diff.evil.command", t("diff-command")),
        ("filter.evil.clean", t("clean")),
        ("filter.evil.smudge", t("smudge")),
        ("filter.evilproc.process", t("process")),
        ("remote.origin.url", upstream.display().to_string()),
        ("remote.origin.promisor", "true".to_string()),
        ("remote.origin.partialclonefilter", "blob:none".to_string()),
        ("remote.origin.uploadpack", t("uploadpack")),
    ];
    let f = file.display().to_string();
    for (k, v) in settings {
        git_ok(&["config", "-f", &f, k, &v], file.parent().unwrap());
    }
}

/// The example repository as `main`, and `pr` on top: lab-f and lab-g changed, a
/// `.gitattributes` that gives every file the trapped drivers, and lab-f made an embedded
/// bare repository (`HEAD`, `config`, `objects/`, `refs/`: what a pull request can
/// commit), armed; then, on disk, `clusters/lab-g/.git` pointing at it and the real
/// repository's own configuration armed (the worst case: a pull request cannot write it).
fn armed() -> Traps {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    let markers = tmp.path().join("markers");
    std::fs::create_dir(&markers).unwrap();
    std::fs::create_dir(tmp.path().join("upstream")).unwrap();
    let trap = tmp.path().join("trap.sh");
    std::fs::write(
        &trap,
        format!(
            "#!/bin/sh\nname=$1; shift\ntouch '{}'/\"$name\"\ncase $name in\n*textconv) cat \"$1\" ;;\n*clean|*smudge) cat ;;\n*diff-*) exit 0 ;;\n*) exit 1 ;;\nesac\n",
            markers.display()
        ),
    )
    .unwrap();
    let exec = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    exec(&trap);
    let hooks = |prefix: &str| {
        let dir = tmp.path().join(format!("{prefix}hooks"));
        std::fs::create_dir(&dir).unwrap();
        for h in HOOKS {
            let p = dir.join(h);
            std::fs::write(
                &p,
                format!(
                    "#!/bin/sh\ntouch '{}/{prefix}hook-{h}'\n",
                    markers.display()
                ),
            )
            .unwrap();
            exec(&p);
        }
        dir
    };
    copy_tree(&example(), &repo);
    git_ok(&["init", "-q", "-b", "main"], &repo);
    for (k, v) in [
        ("user.name", "capstan tests"),
        ("user.email", "tests@capstan.invalid"),
        ("commit.gpgsign", "false"),
    ] {
        git_ok(&["config", k, v], &repo);
    }
    git_ok(&["add", "-A"], &repo);
    git_ok(&["commit", "-q", "-m", "main"], &repo);
    git_ok(&["checkout", "-q", "-b", "pr"], &repo);
    edit(
        &repo.join("clusters/lab-f/cluster.yaml"),
        "numCPUs: 8",
        "numCPUs: 12",
    );
    edit(
        &repo.join("clusters/lab-g/cluster.yaml"),
        "numCPUs: 8",
        "numCPUs: 16",
    );
    std::fs::write(
        repo.join(".gitattributes"),
        "* filter=evil\n*.yaml diff=evil\n*.age filter=evilproc\n",
    )
    .unwrap();
    // A working bare repository (a clone of main), committed as lab-f's content.
    let clone = tmp.path().join("clone.git");
    git_ok(
        &["clone", "-q", "--bare", ".", clone.to_str().unwrap()],
        &repo,
    );
    let bare = repo.join("clusters/lab-f");
    copy_tree(&clone, &bare);
    // Its own work tree: git run again from the top that `rev-parse --show-toplevel` gave
    // opens it again (the attack on capstan before its own discovery).
    std::fs::write(
        bare.join("config"),
        "[core]\n\tbare = false\n\tworktree = .\n",
    )
    .unwrap();
    arm(
        &bare.join("config"),
        "embedded-",
        &trap,
        &hooks("embedded-"),
        &tmp.path().join("upstream"),
    );
    git_ok(&["add", "-A"], &repo);
    git_ok(&["commit", "-q", "-m", "pr"], &repo);
    std::fs::write(repo.join("clusters/lab-g/.git"), "gitdir: ../lab-f\n").unwrap();
    arm(
        &repo.join(".git/config"),
        "repo-",
        &trap,
        &hooks("repo-"),
        &tmp.path().join("upstream"),
    );
    Traps {
        _tmp: tmp,
        repo,
        markers,
    }
}

/// capstan in the repository, with a caller's environment that names the embedded
/// repository and a trap of its own (both must be ignored).
fn review(t: &Traps, args: &[&str]) -> std::process::Output {
    assert_cmd::Command::cargo_bin("capstan")
        .unwrap()
        .args(args)
        .current_dir(&t.repo)
        .env("NO_COLOR", "1")
        .env("GIT_DIR", t.repo.join("clusters/lab-f"))
        .env("GIT_WORK_TREE", &t.repo)
        .env(
            "GIT_EXTERNAL_DIFF",
            format!("{} env-external-diff", t.repo.join("../trap.sh").display()),
        )
        .env(
            "GIT_CONFIG_PARAMETERS",
            format!(
                "'core.fsmonitor'='{} env-fsmonitor'",
                t.repo.join("../trap.sh").display()
            ),
        )
        .output()
        .unwrap()
}

fn json(o: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(o), stderr(o)))
}

/// The cluster `name` of a JSON report: changed, with `cluster.yaml` among its inputs.
fn assert_changed(o: &std::process::Output, name: &str) {
    assert_eq!(o.status.code(), Some(1), "{}\n{}", stdout(o), stderr(o));
    let j = json(o);
    let c = j["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {name}: {j}"));
    assert_eq!(c["status"], "changed", "{c}");
    let text = c.to_string();
    assert!(
        text.contains(&format!("clusters/{name}/cluster.yaml")),
        "{text}"
    );
}

#[test]
fn git_review_runs_no_trap_and_reads_the_real_repository() {
    let t = armed();
    // The traps are armed: plain git runs them.
    t.touch();
    plain_git(&["status"], &t.repo);
    let fired = t.fired();
    for m in ["repo-fsmonitor", "repo-clean", "repo-process"] {
        assert!(fired.contains(m), "{m}: {fired:?}");
    }
    // (The process filter, which only touches its marker, makes `git diff` die: left out.)
    let no_process = "filter.evilproc.process=";
    plain_git(&["-c", no_process, "diff", "main"], &t.repo);
    plain_git(
        &["-c", no_process, "diff", "--no-ext-diff", "main"],
        &t.repo,
    );
    let fired = t.fired();
    for m in ["repo-diff-command", "repo-diff-external", "repo-textconv"] {
        assert!(fired.contains(m), "{m}: {fired:?}");
    }
    let cluster = t.repo.join("clusters/lab-f/cluster.yaml");
    let text = std::fs::read_to_string(&cluster).unwrap();
    std::fs::write(&cluster, format!("{text}# local edit\n")).unwrap();
    plain_git(
        &["checkout", "HEAD", "--", "clusters/lab-f/cluster.yaml"],
        &t.repo,
    );
    plain_git(
        &[
            "-c",
            no_process,
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "hooks",
        ],
        &t.repo,
    );
    let fired = t.fired();
    for m in [
        "repo-smudge",
        "repo-hook-pre-commit",
        "repo-hook-post-commit",
    ] {
        assert!(fired.contains(m), "{m}: {fired:?}");
    }
    // git's own discovery takes the committed bare layout, and the `.git` file into it.
    let lab_f = t.repo.join("clusters/lab-f");
    let lab_g = t.repo.join("clusters/lab-g");
    for dir in [&lab_f, &lab_g] {
        assert_eq!(
            Path::new(git_ok(&["rev-parse", "--absolute-git-dir"], dir).trim()),
            std::fs::canonicalize(&lab_f).unwrap()
        );
    }
    t.touch();
    plain_git(&["status"], &lab_f);
    let fired = t.fired();
    assert!(fired.contains("embedded-fsmonitor"), "{fired:?}");
    t.touch();
    plain_git(&["status"], &lab_g);
    let fired = t.fired();
    assert!(fired.contains("embedded-fsmonitor"), "{fired:?}");

    // capstan runs none of them, and reviews the real repository's change.
    t.touch();
    for (range, path, name) in [
        ("main", "clusters/lab-f", "lab-f"),
        ("main", "clusters/lab-g", "lab-g"),
        ("main..HEAD~1", "clusters/lab-f", "lab-f"),
        ("main..HEAD~1", "clusters/lab-g", "lab-g"),
    ] {
        let o = review(&t, &["diff", "--git", range, path, "--format", "json"]);
        assert_eq!(t.fired(), BTreeSet::new(), "{range} {path}: {}", stderr(&o));
        assert_changed(&o, name);
        t.touch();
    }

    // A partial clone's missing object: plain git fetches it (running the remote's
    // upload-pack command); capstan refuses, and runs nothing.
    let oid = git_ok(&["rev-parse", "main:clusters/lab-f/cluster.yaml"], &t.repo);
    let oid = oid.trim();
    std::fs::remove_file(t.repo.join(".git/objects").join(&oid[..2]).join(&oid[2..])).unwrap();
    plain_git(&["cat-file", "-p", oid], &t.repo);
    let fired = t.fired();
    assert!(fired.contains("repo-uploadpack"), "{fired:?}");
    let o = review(&t, &["diff", "--git", "main..HEAD", "clusters/lab-f"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("object {oid} is not in the repository")),
        "{}",
        stderr(&o)
    );
    assert_eq!(t.fired(), BTreeSet::new());
}
