//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};
use std::process::Output;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The example GitOps repository.
pub fn example() -> PathBuf {
    root().join("examples/gitops")
}

/// The tool check of a test marked `#[ignore = "needs …"]`: `program args` must run and exit 0.
/// A plain `cargo test` reports such a test as ignored; asked to run it (`cargo test --
/// --include-ignored`, as `.ci/run` does), a missing tool fails the test instead of letting
/// it pass without having run.
pub fn need(program: &str, args: &[&str]) {
    let ran = std::process::Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    assert!(
        ran.as_ref().is_ok_and(std::process::ExitStatus::success),
        "this test needs `{program}`, and `{program} {}` did not succeed ({ran:?}): install it \
         (.ci/run installs every tool the ignored tests need), or run without --include-ignored",
        args.join(" ")
    );
}

/// Run the capstan binary with arguments in a working directory.
pub fn capstan(args: &[&str], cwd: &Path) -> Output {
    assert_cmd::Command::cargo_bin("capstan")
        .expect("binary built")
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("capstan runs")
}

/// Run capstan in `cwd` as a reviewer's terminal would not colour it, with no identity
/// from the environment and without `CI` (`--compare-sealed` is refused where it is set),
/// plus `env`.
pub fn capstan_plain(args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> Output {
    let mut c = assert_cmd::Command::cargo_bin("capstan").expect("binary built");
    c.args(args).current_dir(cwd).env("NO_COLOR", "1");
    for v in [
        "CAPSTAN_AGE_KEY_FILE",
        "SOPS_AGE_KEY_FILE",
        "SOPS_AGE_KEY",
        "SOPS_AGE_KEY_CMD",
        "CI",
    ] {
        c.env_remove(v);
    }
    // sops' default key file is read too: none of the machine's.
    c.env("XDG_CONFIG_HOME", "/nonexistent/capstan-tests");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("capstan runs")
}

/// stdout as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Copy a directory tree.
pub fn copy_tree(from: &Path, to: &Path) {
    for entry in walkdir::WalkDir::new(from) {
        let entry = entry.unwrap();
        let rel = entry.path().strip_prefix(from).unwrap();
        let dest = to.join(rel);
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else {
            std::fs::copy(entry.path(), &dest).unwrap();
        }
    }
}

/// Copy lab-f into `dest` as cluster `name`: `cluster.yaml` (renamed, then passed through
/// `edit`), `secrets.age` and the sealed files renamed ("-" never occurs in base64
/// ciphertext, and the sealed files' MAC covers only the encrypted values).
pub fn lab_f_as(dest: &Path, name: &str, edit: impl FnOnce(String) -> String) {
    let ex = example().join("clusters/lab-f");
    std::fs::create_dir_all(dest.join("secrets")).unwrap();
    let yaml = std::fs::read_to_string(ex.join("cluster.yaml")).unwrap();
    std::fs::write(dest.join("cluster.yaml"), edit(yaml.replace("lab-f", name))).unwrap();
    std::fs::copy(ex.join("secrets.age"), dest.join("secrets.age")).unwrap();
    for f in ["lab-f-talos.yaml", "lab-f-ca.yaml"] {
        let text = std::fs::read_to_string(ex.join("secrets").join(f)).unwrap();
        std::fs::write(
            dest.join("secrets").join(f.replace("lab-f", name)),
            text.replace("lab-f", name),
        )
        .unwrap();
    }
}

/// A repository of `n` copies of lab-f (`c001`…), each with `numCPUs: cpus` for its
/// control plane.
pub fn fleet(root: &Path, n: usize, cpus: u32) {
    copy_tree(&example().join("overlays"), &root.join("overlays"));
    for i in 1..=n {
        let name = format!("c{i:03}");
        lab_f_as(&root.join("clusters").join(&name), &name, |yaml| {
            yaml.replacen("numCPUs: 4", &format!("numCPUs: {cpus}"), 1)
        });
    }
}

/// A temporary copy of the example repository.
pub fn example_copy() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    copy_tree(&example(), &repo);
    (tmp, repo)
}

/// Every file under a directory with its bytes, sorted by relative path.
pub fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    if !dir.exists() {
        return Vec::new();
    }
    let mut out: Vec<(String, Vec<u8>)> = walkdir::WalkDir::new(dir)
        .into_iter()
        .map(Result::unwrap)
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            let rel = e
                .path()
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (rel, std::fs::read(e.path()).unwrap())
        })
        .collect();
    out.sort();
    out
}

/// Write a fresh age identity to `path`; returns its public recipient.
pub fn write_identity(path: &Path) -> String {
    use age::secrecy::ExposeSecret;
    let id = age::x25519::Identity::generate();
    std::fs::write(path, format!("{}\n", id.to_string().expose_secret())).unwrap();
    id.to_public().to_string()
}

/// `capstan import kubeadm` arguments for the files `testkit::write_kubeadm_dir` wrote
/// under `kubeadm/` (add the Talos version, recipients and `--out`).
pub const IMPORT_ARGS: &[&str] = &[
    "import",
    "kubeadm",
    "--pki",
    "kubeadm/pki",
    "--apiserver-manifest",
    "kubeadm/kube-apiserver.yaml",
    "--kubeadm-config",
    "kubeadm/kubeadm-config.yaml",
    "--encryption-config",
    "kubeadm/encryption-config.yaml",
];

/// Compare text with a golden file; `CAPSTAN_BLESS=1` rewrites the golden file instead.
pub fn assert_golden(name: &str, actual: &str) {
    let path = root().join("tests/golden").join(name);
    if std::env::var_os("CAPSTAN_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "{} is missing: run with CAPSTAN_BLESS=1 and review it",
            path.display()
        )
    });
    if expected != actual {
        let diff = similar::TextDiff::from_lines(&expected, actual);
        panic!(
            "{name} differs from the golden file (review, then CAPSTAN_BLESS=1 to accept):\n{}",
            diff.unified_diff().header("golden", "actual")
        );
    }
}

/// What a hostile input puts in a name, a value or a file name, one piece each: ESC (a
/// screen clear), OSC (a window title), CR (overwrites the line), LF (starts a line),
/// U+202E (reverses what follows), and a Markdown fence then a heading. Every line the
/// input would start begins with `forged`.
pub const HOSTILE: &[&str] = &[
    "\u{1b}[2J",
    "\u{1b}]0;x\u{7}",
    "\rforged",
    "\nerror: forged",
    "\u{202e}",
    "\n```\n## forged",
];

/// Every piece of [`HOSTILE`] in one name, after `prefix`.
pub fn hostile(prefix: &str) -> String {
    format!("{prefix}{}", HOSTILE.concat())
}

/// `out` (stdout or stderr of a printer fed [`HOSTILE`]) holds no control or bidirectional
/// character but line breaks and tabs, and no line the input started (one beginning with
/// `forged` once spaces and Markdown marks are stripped). A multi-line value's lines in a
/// diff hunk start with the printer's `+` or `-`, which the input cannot forge.
pub fn assert_terminal_safe(what: &str, out: &str) {
    if let Some(c) = out.chars().find(|&c| capstan::printable::unsafe_char(c)) {
        panic!("{what}: {c:?} reaches the output raw:\n{out}");
    }
    for l in out.lines() {
        let t = l.trim_start_matches(|c: char| " \t#>|`*_".contains(c));
        assert!(
            !t.starts_with("forged") && !t.starts_with("error: forged"),
            "{what}: the input started a line: {l:?}\n{out}"
        );
    }
}

/// A command's exit code, stdout and stderr as one text, for a golden file.
pub fn transcript(o: &Output) -> String {
    format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        o.status
            .code()
            .map_or("signal".to_string(), |c| c.to_string()),
        stdout(o),
        stderr(o)
    )
}

/// A generated file is what its generator writes from its inputs: `tools/TOOL --check`
/// (python3 with pyyaml and kubernetes-validate) exits 0.
pub fn generated_by(tool: &str) {
    need("python3", &["-c", "import yaml, kubernetes_validate"]);
    let o = std::process::Command::new("python3")
        .args([&format!("tools/{tool}"), "--check"])
        .current_dir(root())
        .output()
        .expect("python3 runs");
    assert!(
        o.status.success(),
        "tools/{tool} --check: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Run git in `cwd`; its stdout (a failure fails the test, with git's stderr).
pub fn git(args: &[&str], cwd: &Path) -> String {
    let o = std::process::Command::new("git")
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}
