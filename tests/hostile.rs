//! The hostile corpus (`tests/hostile/corpus.json`): each case changes a copy of the
//! example repository the way a pull request could (a file rewritten, a FIFO, a link out
//! of the repository, a huge file, a template that never ends…), runs one capstan
//! command on it, and requires: no panic or signal, the expected exit code (2 for every
//! refusal) with the file and field named on stderr, nothing on stdout on a refusal, the
//! previous `-o` output untouched, no plaintext secret in any output, and bounded time and
//! memory (each run under `ulimit -v`, its peak RSS sampled from `/proc`; both asserted).
//!
//! A case is `{name, kind, setup: [op…], run: [arg…], cwd?, env?, expect: {exit?, stderr:
//! […], stdout?: […], one_line?}}`. Ops (paths relative to the repository copy; `{outside}` is a
//! directory beside it holding `identity.txt`, the example's age identity, and a copy of
//! `cluster.yaml`; `{repo}` the copy itself):
//! `replace {file, from, to}` (exactly one occurrence), `write {file, text}`,
//! `repeat {file, text, times}`, `size {file, bytes}` (a sparse file), `fifo {file}`,
//! `dir {file}`, `symlink {file, to}`, `hex {file, hex}` (raw bytes), `copy {from, to}` (a tree),
//! `remove {file}`, `render_out` (render the whole
//! repository into `out/` first: the untouched-output check then covers it).
//!
//! `CAPSTAN_HOSTILE_BIN=/path/to/capstan` runs the corpus against another build (an older
//! release, to see which cases it fails).

use crate::util::*;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// Per run: wall time and peak resident memory allowed.
const TIME_LIMIT: Duration = Duration::from_secs(30);
const RSS_LIMIT_KIB: u64 = 512 * 1024;
/// Address space per run (`ulimit -v`, KiB).
const VM_LIMIT_KIB: u64 = 2 * 1024 * 1024;

fn corpus() -> Vec<Value> {
    let text = std::fs::read_to_string(root().join("tests/hostile/corpus.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v.as_array().unwrap().clone()
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str()
        .unwrap_or_else(|| panic!("`{k}` missing in {v}"))
}

fn expand(text: &str, repo: &Path, outside: &Path) -> String {
    text.replace("{outside}", &outside.display().to_string())
        .replace("{repo}", &repo.display().to_string())
}

fn apply(op: &Value, repo: &Path, outside: &Path) {
    let file = || repo.join(s(op, "file"));
    let parent = |p: &Path| std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    let clear = |p: &Path| {
        if let Ok(m) = std::fs::symlink_metadata(p) {
            if m.is_dir() {
                std::fs::remove_dir_all(p).unwrap();
            } else {
                std::fs::remove_file(p).unwrap();
            }
        }
    };
    match s(op, "op") {
        "replace" => {
            let p = file();
            let text = std::fs::read_to_string(&p).unwrap();
            let (from, to) = (s(op, "from"), expand(s(op, "to"), repo, outside));
            assert_eq!(
                text.matches(from).count(),
                1,
                "{}: `{from}` once",
                p.display()
            );
            std::fs::write(&p, text.replacen(from, &to, 1)).unwrap();
        }
        "write" => {
            let p = file();
            parent(&p);
            clear(&p);
            std::fs::write(&p, expand(s(op, "text"), repo, outside)).unwrap();
        }
        "repeat" => {
            let p = file();
            parent(&p);
            clear(&p);
            let n = op["times"].as_u64().unwrap() as usize;
            std::fs::write(&p, s(op, "text").repeat(n)).unwrap();
        }
        "size" => {
            let p = file();
            parent(&p);
            clear(&p);
            let f = std::fs::File::create(&p).unwrap();
            f.set_len(op["bytes"].as_u64().unwrap()).unwrap();
        }
        "fifo" => {
            let p = file();
            parent(&p);
            clear(&p);
            let st = std::process::Command::new("mkfifo")
                .arg(&p)
                .status()
                .unwrap();
            assert!(st.success());
        }
        "dir" => {
            let p = file();
            clear(&p);
            std::fs::create_dir_all(&p).unwrap();
        }
        "symlink" => {
            let p = file();
            parent(&p);
            clear(&p);
            std::os::unix::fs::symlink(expand(s(op, "to"), repo, outside), &p).unwrap();
        }
        "hex" => {
            let p = file();
            parent(&p);
            clear(&p);
            let h = s(op, "hex");
            let bytes: Vec<u8> = (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
                .collect();
            std::fs::write(&p, bytes).unwrap();
        }
        "copy" => copy_tree(&repo.join(s(op, "from")), &repo.join(s(op, "to"))),
        "remove" => clear(&file()),
        "render_out" => {
            let o = capstan(&["render", ".", "-o", "out"], repo);
            assert!(o.status.success(), "render_out: {}", stderr(&o));
        }
        other => panic!("unknown op `{other}`"),
    }
}

/// The peak resident set (`VmHWM`, KiB) of a running process, if it can be read.
fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    wall: Duration,
    rss_kib: u64,
}

/// Run capstan under `ulimit -v`, sampling its peak RSS until it exits.
fn run(args: &[String], cwd: &Path, env: &[(String, String)]) -> Run {
    let mut c = std::process::Command::new("sh");
    c.arg("-c")
        .arg(format!("ulimit -v {VM_LIMIT_KIB}; exec \"$0\" \"$@\""))
        .arg(
            std::env::var_os("CAPSTAN_HOSTILE_BIN").unwrap_or(env!("CARGO_BIN_EXE_capstan").into()),
        )
        .args(args)
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for v in [
        "CAPSTAN_AGE_KEY_FILE",
        "SOPS_AGE_KEY_FILE",
        "SOPS_AGE_KEY",
        "NO_COLOR",
    ] {
        c.env_remove(v);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let started = Instant::now();
    let mut child = c.spawn().unwrap();
    let pid = child.id();
    // Drain the pipes on threads so a chatty child never blocks on a full pipe.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut b).unwrap();
        b
    });
    let t_err = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut err, &mut b).unwrap();
        b
    });
    let mut rss = 0;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if let Some(r) = peak_rss(pid) {
            rss = rss.max(r);
        }
        if started.elapsed() > TIME_LIMIT {
            let _ = child.kill();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let wall = started.elapsed();
    Run {
        code: status.and_then(|s| s.code()),
        stdout: String::from_utf8_lossy(&t_out.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&t_err.join().unwrap()).into_owned(),
        wall,
        rss_kib: rss,
    }
}

/// Strings that must never be printed: the identity, and every decrypted value (less
/// anything the repository itself holds in the clear, such as the sealed files' ciphertext).
fn plaintext_needles(repo: &Path, identity: &Path) -> Vec<String> {
    let id_text = std::fs::read_to_string(identity).unwrap();
    let mut out: Vec<String> = id_text
        .lines()
        .filter(|l| l.starts_with("AGE-SECRET-KEY-"))
        .map(|l| l[..40].to_string())
        .collect();
    out.extend(crate::diff::secret_needles(
        &[repo.to_path_buf()],
        &identity.display().to_string(),
    ));
    let ids = capstan::secrets::parse_identities("id", &id_text).unwrap();
    for cluster in ["lab-f", "lab-g"] {
        let p = repo.join("clusters").join(cluster).join("secrets.age");
        let plain = capstan::secrets::decrypt("s", &std::fs::read(&p).unwrap(), &ids).unwrap();
        for line in String::from_utf8_lossy(&plain).lines() {
            let v = line.split_once(": ").map_or(line, |(_, v)| v).trim();
            if v.len() >= 24 {
                out.push(v.to_string());
            }
        }
    }
    let public: Vec<String> = walkdir::WalkDir::new(repo)
        .into_iter()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .collect();
    out.retain(|n| !public.iter().any(|text| text.contains(n.as_str())));
    out
}

#[test]
fn the_hostile_corpus_is_refused_cleanly() {
    let cases = corpus();
    assert!(cases.len() >= 100, "{} cases", cases.len());
    let base = tempfile::tempdir().unwrap();
    let pristine = base.path().join("pristine");
    copy_tree(&example(), &pristine);
    let identity = pristine.join("testdata/age-identity.txt");
    let needles = plaintext_needles(&pristine, &identity);
    assert!(needles.len() > 30, "{} needles", needles.len());
    eprintln!("hostile corpus: {} plaintext needles", needles.len());
    let (mut worst_wall, mut worst_rss) = ((Duration::ZERO, ""), (0u64, ""));
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    let mut commands = std::collections::BTreeSet::<String>::new();
    let mut failures = Vec::new();
    for case in &cases {
        let name = s(case, "name");
        *kinds.entry(s(case, "kind").to_string()).or_default() += 1;
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        let outside = tmp.path().join("outside");
        copy_tree(&example(), &repo);
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::copy(&identity, outside.join("identity.txt")).unwrap();
        std::fs::copy(
            repo.join("clusters/lab-f/cluster.yaml"),
            outside.join("cluster.yaml"),
        )
        .unwrap();
        for op in case["setup"].as_array().into_iter().flatten() {
            apply(op, &repo, &outside);
        }
        let args: Vec<String> = case["run"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| expand(a.as_str().unwrap(), &repo, &outside))
            .collect();
        commands.insert(args.iter().take(2).cloned().collect::<Vec<_>>().join(" "));
        let env: Vec<(String, String)> = case["env"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), expand(v.as_str().unwrap(), &repo, &outside)))
            .collect();
        let cwd = repo.join(case["cwd"].as_str().unwrap_or("."));
        let out_before = snapshot(&repo.join("out"));
        let r = run(&args, &cwd, &env);
        let expect = &case["expect"];
        let want = expect["exit"].as_i64().unwrap_or(2) as i32;
        let mut problems = Vec::new();
        match r.code {
            None => problems.push(format!(
                "no exit code: killed after {:?} (hang) or died of a signal",
                r.wall
            )),
            Some(c) if c != want => problems.push(format!("exit {c}, expected {want}")),
            _ => {}
        }
        if r.stderr.contains("panicked") || r.stderr.contains("RUST_BACKTRACE") {
            problems.push("a panic".into());
        }
        for needle in expect["stderr"].as_array().into_iter().flatten() {
            let n = expand(needle.as_str().unwrap(), &repo, &outside);
            if !r.stderr.contains(&n) {
                problems.push(format!("stderr lacks `{n}`"));
            }
        }
        for needle in expect["stdout"].as_array().into_iter().flatten() {
            let n = expand(needle.as_str().unwrap(), &repo, &outside);
            if !r.stdout.contains(&n) {
                problems.push(format!("stdout lacks `{n}`"));
            }
        }
        if want == 2 && !r.stdout.is_empty() {
            problems.push(format!("stdout on a refusal: {} bytes", r.stdout.len()));
        }
        if expect["one_line"].as_bool() == Some(true) && r.stderr.lines().count() != 1 {
            problems.push("stderr is not one line".into());
        }
        if snapshot(&repo.join("out")) != out_before && want == 2 {
            problems.push("out/ changed by a refused run".into());
        }
        for n in &needles {
            if r.stdout.contains(n.as_str()) || r.stderr.contains(n.as_str()) {
                problems.push(format!(
                    "plaintext in the output: {}…",
                    &n[..8.min(n.len())]
                ));
                break;
            }
        }
        if r.rss_kib > RSS_LIMIT_KIB {
            problems.push(format!("peak RSS {} MiB", r.rss_kib / 1024));
        }
        if r.wall > worst_wall.0 {
            worst_wall = (r.wall, name);
        }
        if r.rss_kib > worst_rss.0 {
            worst_rss = (r.rss_kib, name);
        }
        if !problems.is_empty() {
            failures.push(format!(
                "{name}: {}\n    stderr: {}",
                problems.join("; "),
                r.stderr.trim().chars().take(400).collect::<String>()
            ));
        }
    }
    eprintln!(
        "hostile corpus: {} cases over {} input kinds and {} commands; slowest {:?} ({}), largest peak RSS {} MiB ({})",
        cases.len(),
        kinds.len(),
        commands.len(),
        worst_wall.0,
        worst_wall.1,
        worst_rss.0 / 1024,
        worst_rss.1
    );
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
