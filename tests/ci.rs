//! The CI templates (`deploy/ci/`) run as their runners run them, without a docker engine:
//! the `ci` image's stage of `deploy/image/Dockerfile` checked as data (no ENTRYPOINT, its
//! user), the GitLab job's script and the GitHub review step's `run` taken from the YAML and
//! run through a shell as the image's UID (`setpriv`, so these tests need root, as CI runs)
//! in a runner-shaped directory with the variables the runner sets, the built capstan, real
//! git, curl and jq, and the GitLab API served by a mock on 127.0.0.1; and the GitHub
//! comment workflow's github-script run by node against a mocked API.

use crate::util::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};

const MARKER: &str = "<!-- capstan-diff -->";

fn parse_yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("template readable");
    serde_saphyr::from_str(&text).expect("template is YAML")
}

fn ci_file(name: &str) -> Value {
    parse_yaml(&root().join("deploy/ci").join(name))
}

/// The `ci` stage of the Dockerfile: its instructions, continuation lines joined.
fn ci_stage() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("deploy/image/Dockerfile")).unwrap();
    let mut out = Vec::new();
    let mut inside = false;
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("FROM ") {
            inside = t.ends_with(" AS ci");
            continue;
        }
        if !inside || t.starts_with('#') || t.is_empty() {
            continue;
        }
        current.push_str(t.trim_end_matches('\\'));
        if !t.ends_with('\\') {
            out.push(std::mem::take(&mut current));
        }
    }
    assert!(!out.is_empty(), "the Dockerfile has a stage `AS ci`");
    out
}

/// The UID the `ci` image runs as (its last USER).
fn image_uid() -> u32 {
    let user = ci_stage()
        .into_iter()
        .rev()
        .find_map(|i| i.strip_prefix("USER ").map(str::to_string))
        .expect("the ci stage sets a USER");
    let uid = user.split(':').next().unwrap();
    uid.parse()
        .expect("USER is numeric (runners compare UIDs, not names)")
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").map(|m| m.uid()).ok() == Some(0)
}

/// These tests switch to the image's UID with setpriv: they need root (CI runs as root).
fn need_root() {
    need("setpriv", &["--version"]);
    need("curl", &["--version"]);
    need("jq", &["--version"]);
    assert!(
        is_root(),
        "needs root: the CI template tests run the job scripts as the image's UID with setpriv"
    );
}

fn sh(cmd: &str, cwd: &Path) {
    let o = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(cwd)
        .output()
        .unwrap();
    assert!(o.status.success(), "{cmd}: {}{}", stdout(&o), stderr(&o));
}

fn chown(path: &Path, uid: u32) {
    sh(
        &format!("chown -R {uid}:{uid} '{}'", path.display()),
        Path::new("/"),
    );
}

/// A temporary directory every UID can traverse (tempfile makes it 0700).
fn open_tempdir() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    sh(
        &format!("chmod 755 '{}'", t.path().display()),
        Path::new("/"),
    );
    t
}

/// A directory with the built capstan (copied: the target directory need not be readable
/// by the image's UID) and the PATH the job sees.
fn job_path(t: &Path) -> String {
    let bin = t.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_capstan"), bin.join("capstan")).unwrap();
    sh(&format!("chmod -R 755 '{}'", bin.display()), Path::new("/"));
    format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display())
}

/// The origin repository: the example at `base`, then `head` with `change` applied.
fn origin(t: &Path, change: &str) -> (PathBuf, String, String) {
    let work = t.join("origin-work");
    copy_tree(&example(), &work);
    let g = "git -c user.name=ci -c user.email=ci@capstan.invalid -c commit.gpgsign=false";
    sh(
        &format!("git init -q -b main && git add -A && {g} commit -qm base"),
        &work,
    );
    let base = git_head(&work);
    sh(&format!("{change} && {g} commit -qam change"), &work);
    let head = git_head(&work);
    let bare = t.join("origin.git");
    sh(
        &format!(
            "git clone -q --bare '{}' '{}'",
            work.display(),
            bare.display()
        ),
        t,
    );
    (bare, base, head)
}

fn git_head(dir: &Path) -> String {
    let o = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(dir)
        .output()
        .unwrap();
    stdout(&o).trim().to_string()
}

const LOW_RISK: &str = "sed -i 's/numCPUs: 8/numCPUs: 12/' clusters/lab-f/cluster.yaml";
const HIGH_RISK: &str = "git rm -rq clusters/lab-g";

/// Run `script` through `shell` as `uid` with exactly `env`, in `cwd`.
fn run_as(
    uid: u32,
    shell: &[&str],
    script: &str,
    cwd: &Path,
    env: &BTreeMap<String, String>,
) -> Output {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid",
        &uid.to_string(),
        "--regid",
        &uid.to_string(),
        "--clear-groups",
    ])
    .args(shell)
    .arg(script)
    .current_dir(cwd)
    .env_clear()
    .envs(env)
    .stdin(Stdio::null());
    c.output().expect("setpriv runs")
}

// ---------------------------------------------------------------- the image and the users

#[test]
fn ci_image_has_no_entrypoint_and_every_template_runs_as_its_user() {
    let stage = ci_stage();
    assert!(
        !stage.iter().any(|i| i.starts_with("ENTRYPOINT")),
        "the ci image must start the runner's shell, not capstan: {stage:?}"
    );
    let uid = image_uid();
    assert_ne!(uid, 0, "the ci image runs as a user, not root");
    // GitHub-hosted runners own the workspace and HOME they mount as UID 1001.
    assert_eq!(uid, 1001, "the ci image's user is the GitHub runner's UID");

    let gitlab = ci_file("gitlab-ci.yml");
    let image = &gitlab["capstan-review"]["image"];
    assert_eq!(
        image["entrypoint"],
        json!([""]),
        "the GitLab job overrides the image's entrypoint as GitLab documents"
    );
    let github = ci_file("github-actions.yml");
    let container = &github["jobs"]["review"]["container"];
    assert_eq!(
        container["options"].as_str(),
        Some(format!("--user {uid}").as_str()),
        "the GitHub job container runs as the runner's UID"
    );
    assert!(container["image"]
        .as_str()
        .is_some_and(|i| i.contains("capstan-ci")));
}

#[test]
fn no_template_gives_the_review_of_a_pull_request_a_secret() {
    // GitHub: the review job (which reads the pull request) has a read-only token and no
    // secrets; the poster (default branch, workflow_run) reads no repository content of the
    // pull request and holds only a token that comments.
    let review = std::fs::read_to_string(root().join("deploy/ci/github-actions.yml")).unwrap();
    assert!(
        !review.contains("secrets."),
        "the review job gets no secret"
    );
    let y = ci_file("github-actions.yml");
    assert_eq!(
        y["on"]
            .as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["pull_request".to_string()])
    );
    assert_eq!(y["permissions"], json!({"contents": "read"}));
    let poster = ci_file("github-actions-comment.yml");
    assert_eq!(
        poster["on"]["workflow_run"]["workflows"],
        json!(["capstan review"])
    );
    assert_eq!(poster["on"]["workflow_run"]["workflows"][0], y["name"]);
    let steps = poster["jobs"]["comment"]["steps"].as_array().unwrap();
    assert!(
        steps.iter().all(|s| !s["uses"]
            .as_str()
            .unwrap_or("")
            .starts_with("actions/checkout")),
        "the poster checks out nothing"
    );
    let text =
        std::fs::read_to_string(root().join("deploy/ci/github-actions-comment.yml")).unwrap();
    assert!(
        !text.contains("secrets."),
        "the poster uses only GITHUB_TOKEN"
    );
    // GitLab: no age identity in the job.
    let gitlab = std::fs::read_to_string(root().join("deploy/ci/gitlab-ci.yml")).unwrap();
    let script = gitlab_script();
    assert!(
        !script.contains("SOPS_AGE_KEY"),
        "the GitLab job is given no identity"
    );
    assert!(!gitlab.contains("secrets:"));
}

// ---------------------------------------------------------------- GitLab

fn gitlab_script() -> String {
    let y = ci_file("gitlab-ci.yml");
    let lines = y["capstan-review"]["script"]
        .as_array()
        .expect("a script list");
    lines
        .iter()
        .map(|l| l.as_str().expect("script lines are strings").to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    token: Option<String>,
    body: String,
}

/// A GitLab API on 127.0.0.1: `GET /user` is the token's user (id 42), the notes list is
/// `notes` (paged by 100, `page` from the query), and PUT/POST are recorded.
fn mock_gitlab(notes: Vec<Value>) -> (String, Arc<Mutex<Vec<Request>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/api/v4", listener.local_addr().unwrap());
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = log.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut first = String::new();
            if reader.read_line(&mut first).is_err() {
                continue;
            }
            let mut parts = first.split_whitespace();
            let method = parts.next().unwrap_or("").to_string();
            let target = parts.next().unwrap_or("").to_string();
            let (mut length, mut token) = (0usize, None);
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                    break;
                }
                let (k, v) = h.split_once(':').unwrap_or((&h, ""));
                match k.to_ascii_lowercase().as_str() {
                    "content-length" => length = v.trim().parse().unwrap_or(0),
                    "private-token" => token = Some(v.trim().to_string()),
                    _ => {}
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let (path, query) = target.split_once('?').unwrap_or((&target, ""));
            seen.lock().unwrap().push(Request {
                method: method.clone(),
                path: path.to_string(),
                token: token.clone(),
                body: String::from_utf8_lossy(&body).into_owned(),
            });
            let page: usize = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("page="))
                .and_then(|p| p.parse().ok())
                .unwrap_or(1);
            let (status, reply) = if token.as_deref() != Some("glpat-test") {
                (401, json!({"message": "401 Unauthorized"}))
            } else {
                match (method.as_str(), path) {
                    ("GET", "/api/v4/user") => (
                        200,
                        json!({"id": 42, "username": "project_7_bot_1", "bot": true}),
                    ),
                    ("GET", "/api/v4/projects/7/merge_requests/3/notes") => {
                        let start = (page - 1) * 100;
                        (
                            200,
                            Value::Array(notes.iter().skip(start).take(100).cloned().collect()),
                        )
                    }
                    ("PUT", p) if p.starts_with("/api/v4/projects/7/merge_requests/3/notes/") => {
                        (200, json!({"id": 1}))
                    }
                    ("POST", "/api/v4/projects/7/merge_requests/3/notes") => {
                        (201, json!({"id": 1}))
                    }
                    _ => (404, json!({"message": "404 Not Found"})),
                }
            };
            let text = reply.to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
        }
    });
    (url, log)
}

fn note(id: u64, author: u64, system: bool, body: &str) -> Value {
    json!({"id": id, "author": {"id": author, "username": format!("user{author}")}, "system": system, "body": body})
}

/// The GitLab clone layouts of the docker executor: the helper clones as root under
/// `umask 0000` (default), or chowns the clone to the image's user
/// (FF_DISABLE_UMASK_FOR_DOCKER_EXECUTOR).
#[derive(Clone, Copy, Debug)]
enum Layout {
    RootUmask0000,
    ChownedToImageUser,
}

struct GitlabRun {
    out: Output,
    report: String,
    requests: Vec<Request>,
}

fn run_gitlab(
    layout: Layout,
    change: &str,
    notes: Vec<Value>,
    token: bool,
    shell: &[&str],
) -> GitlabRun {
    need_root();
    let uid = image_uid();
    let t = open_tempdir();
    let (bare, base, head) = origin(t.path(), change);
    let project = t.path().join("builds/group/project");
    std::fs::create_dir_all(project.parent().unwrap()).unwrap();
    // The helper's clone: a merge request pipeline checks out the source branch's commit
    // detached, and has origin to fetch the base from.
    sh(
        &format!(
            "umask 0000 && git clone -q '{}' '{}' && git -C '{}' checkout -q --detach {head}",
            bare.display(),
            project.display(),
            project.display()
        ),
        t.path(),
    );
    // The remote is a server: its files belong to no one the job knows.
    chown(&bare, uid);
    if let Layout::ChownedToImageUser = layout {
        chown(&project, uid);
    }
    let home = t.path().join("home/capstan");
    std::fs::create_dir_all(&home).unwrap();
    chown(&home, uid);
    let (api, log) = mock_gitlab(notes);
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in [
        ("PATH", job_path(t.path())),
        ("HOME", home.display().to_string()),
        ("CI", "true".into()),
        ("GITLAB_CI", "true".into()),
        ("CI_PIPELINE_SOURCE", "merge_request_event".into()),
        ("CI_PROJECT_DIR", project.display().to_string()),
        ("CI_PROJECT_ID", "7".into()),
        ("CI_MERGE_REQUEST_IID", "3".into()),
        ("CI_MERGE_REQUEST_DIFF_BASE_SHA", base.clone()),
        ("CI_COMMIT_SHA", head.clone()),
        ("CI_API_V4_URL", api),
        ("GIT_DEPTH", "0".into()),
    ] {
        env.insert(k.to_string(), v);
    }
    if token {
        env.insert("CAPSTAN_GITLAB_TOKEN".into(), "glpat-test".into());
    }
    // The runner hands the job's script lines to the shell in one session, stopping at the
    // first failing line.
    let script = format!("set -e\n{}", gitlab_script());
    let out = run_as(uid, shell, &script, &project, &env);
    let report = std::fs::read_to_string(project.join("capstan.md")).unwrap_or_default();
    let requests = log.lock().unwrap().clone();
    GitlabRun {
        out,
        report,
        requests,
    }
}

fn posted_body(r: &Request) -> String {
    let v: Value = serde_json::from_str(&r.body).expect("a JSON body");
    v["body"].as_str().expect("body is a string").to_string()
}

#[test]
#[ignore = "needs root, setpriv, git, curl and jq (run by .ci/run with --include-ignored)"]
fn gitlab_job_creates_its_note_beside_a_fake_one_and_never_touches_another_users_note() {
    let fake = format!("{MARKER}\n## capstan diff\n\nNothing to see: all clusters unchanged.\n");
    for layout in [Layout::RootUmask0000, Layout::ChownedToImageUser] {
        for shell in [&["sh", "-c"][..], &["bash", "-c"][..]] {
            let notes = vec![
                note(100, 5, false, &fake),
                note(
                    101,
                    5,
                    false,
                    "## capstan diff\n\nold style, by someone else",
                ),
                // GitLab writes system notes in the bot's name too: never one of ours.
                note(102, 42, true, &format!("{MARKER} added 1 commit")),
            ];
            let r = run_gitlab(layout, LOW_RISK, notes, true, shell);
            let ctx = format!("{layout:?} {shell:?}: {}{}", stdout(&r.out), stderr(&r.out));
            assert_eq!(r.out.status.code(), Some(0), "{ctx}");
            assert!(
                r.report.starts_with("## capstan diff\n"),
                "{ctx}\n{}",
                r.report
            );
            assert!(
                r.report.contains("rendered 1 of 2 cluster(s); 1 skipped"),
                "{}",
                r.report
            );
            let writes: Vec<_> = r.requests.iter().filter(|q| q.method != "GET").collect();
            assert_eq!(writes.len(), 1, "{ctx}\n{writes:?}");
            assert_eq!(
                (writes[0].method.as_str(), writes[0].path.as_str()),
                ("POST", "/api/v4/projects/7/merge_requests/3/notes")
            );
            assert_eq!(posted_body(writes[0]), format!("{MARKER}\n{}", r.report));
            assert!(r.requests.iter().any(|q| q.path == "/api/v4/user"), "{ctx}");
            assert!(r
                .requests
                .iter()
                .all(|q| q.token.as_deref() == Some("glpat-test")));
        }
    }
}

#[test]
#[ignore = "needs root, setpriv, git, curl and jq (run by .ci/run with --include-ignored)"]
fn gitlab_job_updates_its_own_note_found_on_a_later_page_and_fails_on_a_high_risk() {
    let fake = format!("{MARKER}\n## capstan diff\n\nfake");
    let mut notes: Vec<Value> = (0..150)
        .map(|i| note(1000 + i, 5, false, "a comment"))
        .collect();
    notes.insert(3, note(100, 5, false, &fake));
    notes.push(note(
        777,
        42,
        false,
        &format!("{MARKER}\n## capstan diff\n\nthe previous push's report"),
    ));
    let r = run_gitlab(Layout::RootUmask0000, HIGH_RISK, notes, true, &["sh", "-c"]);
    let ctx = format!("{}{}", stdout(&r.out), stderr(&r.out));
    assert_eq!(
        r.out.status.code(),
        Some(1),
        "a high risk fails the job: {ctx}"
    );
    assert!(stdout(&r.out).contains("capstan diff exited 1"), "{ctx}");
    assert!(r.report.contains("no longer rendered"), "{}", r.report);
    let writes: Vec<_> = r.requests.iter().filter(|q| q.method != "GET").collect();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(
        (writes[0].method.as_str(), writes[0].path.as_str()),
        ("PUT", "/api/v4/projects/7/merge_requests/3/notes/777")
    );
    assert!(posted_body(writes[0]).starts_with(&format!("{MARKER}\n## capstan diff\n")));
    let pages: Vec<_> = r
        .requests
        .iter()
        .filter(|q| q.path.ends_with("/notes") && q.method == "GET")
        .collect();
    assert_eq!(pages.len(), 2, "the second page holds the job's note");
}

#[test]
#[ignore = "needs root, setpriv, git, curl and jq (run by .ci/run with --include-ignored)"]
fn gitlab_job_without_a_token_reviews_and_leaves_the_report_as_its_artifact() {
    let r = run_gitlab(
        Layout::RootUmask0000,
        LOW_RISK,
        vec![],
        false,
        &["sh", "-c"],
    );
    let ctx = format!("{}{}", stdout(&r.out), stderr(&r.out));
    assert_eq!(r.out.status.code(), Some(0), "{ctx}");
    assert!(r.requests.is_empty(), "{:?}", r.requests);
    assert!(stdout(&r.out).contains("no note posted"), "{ctx}");
    assert!(r.report.starts_with("## capstan diff\n"));
    // No identity was given: the report says sealed values were compared by ciphertext.
    assert!(r.report.contains("compared by ciphertext"), "{}", r.report);
}

// ---------------------------------------------------------------- GitHub

/// The review step's `run` and `env` from github-actions.yml.
fn github_review_step() -> (String, Vec<(String, String)>) {
    let y = ci_file("github-actions.yml");
    let step = y["jobs"]["review"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "diff")
        .expect("a step with id diff")
        .clone();
    let env = step["env"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect();
    (step["run"].as_str().unwrap().to_string(), env)
}

/// The runner's directories as a job container sees them, owned by the runner's UID:
/// the workspace (checked out by actions/checkout as the container's user), RUNNER_TEMP,
/// HOME (/github/home) and the file commands (GITHUB_OUTPUT).
fn run_github_review(container_uid: u32, change: &str) -> (Output, Option<String>, String) {
    need_root();
    let runner_uid = 1001;
    let t = open_tempdir();
    let (bare, base, head) = origin(t.path(), change);
    let work = t.path().join("_work");
    let ws = work.join("repo/repo");
    sh(
        &format!(
            "git clone -q '{}' '{}' && git -C '{}' checkout -q --detach {head}",
            bare.display(),
            ws.display(),
            ws.display()
        ),
        t.path(),
    );
    let temp = work.join("_temp");
    let home = temp.join("_github_home");
    let commands = temp.join("_runner_file_commands");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&commands).unwrap();
    let output = commands.join("set_output_1");
    std::fs::write(&output, "").unwrap();
    chown(&work, runner_uid);
    let (run, step_env) = github_review_step();
    let script = temp.join("step.sh");
    std::fs::write(&script, &run).unwrap();
    chown(&script, runner_uid);
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in [
        ("PATH", job_path(t.path())),
        ("HOME", home.display().to_string()),
        ("CI", "true".into()),
        ("GITHUB_ACTIONS", "true".into()),
        ("GITHUB_EVENT_NAME", "pull_request".into()),
        ("GITHUB_WORKSPACE", ws.display().to_string()),
        ("RUNNER_TEMP", temp.display().to_string()),
        ("GITHUB_OUTPUT", output.display().to_string()),
    ] {
        env.insert(k.to_string(), v);
    }
    for (k, v) in step_env {
        let v = match v.as_str() {
            "${{ github.event.pull_request.base.sha }}" => base.clone(),
            "${{ github.event.pull_request.head.sha }}" => head.clone(),
            other => panic!("unexpected step env {k}: {other}"),
        };
        env.insert(k, v);
    }
    // A `run` step in a job container: `sh -e FILE` (the default shell in a container,
    // actions/runner src/Runner.Worker/Handlers/ScriptHandlerHelpers.cs).
    let out = Command::new("setpriv")
        .args([
            "--reuid",
            &container_uid.to_string(),
            "--regid",
            &container_uid.to_string(),
            "--clear-groups",
        ])
        .args(["sh", "-e"])
        .arg(&script)
        .current_dir(&ws)
        .env_clear()
        .envs(&env)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let outputs = std::fs::read_to_string(&output).unwrap_or_default();
    let report = std::fs::read_to_string(temp.join("capstan-review/capstan.md")).ok();
    (out, report, outputs)
}

#[test]
#[ignore = "needs root and setpriv (run by .ci/run with --include-ignored)"]
fn github_review_step_runs_as_the_image_user_in_the_runners_workspace_and_not_as_another() {
    let uid = image_uid();
    for (change, code) in [(LOW_RISK, "0"), (HIGH_RISK, "1")] {
        let (out, report, outputs) = run_github_review(uid, change);
        let ctx = format!("{}{}", stdout(&out), stderr(&out));
        assert_eq!(
            out.status.code(),
            Some(0),
            "the step records the exit code and goes on: {ctx}"
        );
        assert_eq!(outputs.trim(), format!("code={code}"), "{ctx}");
        let text = report.expect("the report the artifact step uploads");
        assert!(text.starts_with("## capstan diff\n"), "{text}");
    }
    // The artifact step uploads exactly that file.
    let y = ci_file("github-actions.yml");
    let upload = y["jobs"]["review"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("actions/upload-artifact@"))
        })
        .expect("an upload-artifact step")
        .clone();
    assert_eq!(
        upload["with"]["path"],
        "${{ runner.temp }}/capstan-review/capstan.md"
    );
    assert_eq!(upload["with"]["name"], "capstan-review");
    // The previous image's user (999) cannot write what the runner (1001) owns.
    let (out, report, outputs) = run_github_review(999, LOW_RISK);
    assert_ne!(
        out.status.code(),
        Some(0),
        "UID 999 must fail in a 1001-owned workspace"
    );
    assert!(
        outputs.is_empty() && report.is_none(),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
}

/// The comment workflow's github-script.
fn comment_script() -> String {
    let y = ci_file("github-actions-comment.yml");
    y["jobs"]["comment"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("actions/github-script@"))
        })
        .expect("a github-script step")["with"]["script"]
        .as_str()
        .unwrap()
        .to_string()
}

fn comment_env() -> BTreeMap<String, String> {
    let y = ci_file("github-actions-comment.yml");
    let step = y["jobs"]["comment"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("actions/github-script@"))
        })
        .unwrap()
        .clone();
    step["env"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect()
}

const HEAD_SHA: &str = "1111111111111111111111111111111111111111";

/// A workflow_run payload of a completed `capstan review` run.
fn workflow_run(pull_requests: Value, head_owner: &str) -> Value {
    json!({
        "repository": {"id": 10, "full_name": "acme/fleet", "default_branch": "main"},
        "workflow_run": {
            "id": 555, "event": "pull_request", "conclusion": "failure",
            "path": ".github/workflows/capstan.yml",
            "head_sha": HEAD_SHA, "head_branch": "feature",
            "head_repository": {"name": "fleet", "owner": {"login": head_owner}},
            "html_url": "https://github.com/acme/fleet/actions/runs/555",
            "pull_requests": pull_requests,
        }
    })
}

fn comment(id: u64, login: &str, kind: &str, body: &str) -> Value {
    json!({"id": id, "user": {"login": login, "type": kind}, "body": body})
}

/// Run the comment script with `report` as the downloaded artifact (None: no artifact).
fn run_comment(scenario: Value, report: Option<&str>) -> Value {
    let t = tempfile::tempdir().unwrap();
    let script = t.path().join("script.js");
    std::fs::write(&script, comment_script()).unwrap();
    let file = t.path().join("scenario.json");
    let mut scenario = scenario;
    scenario["repo"] = json!({"owner": "acme", "repo": "fleet"});
    std::fs::write(&file, scenario.to_string()).unwrap();
    let dir = t.path().join("capstan-review");
    std::fs::create_dir_all(&dir).unwrap();
    if let Some(r) = report {
        std::fs::write(dir.join("capstan.md"), r).unwrap();
    }
    let mut env = comment_env();
    assert_eq!(
        env.get("REVIEW_DIR").map(String::as_str),
        Some("${{ runner.temp }}/capstan-review")
    );
    env.insert("REVIEW_DIR".into(), dir.display().to_string());
    need("node", &["--version"]);
    let out = Command::new("node")
        .arg(root().join("tests/fixtures/ci/github-script.js"))
        .args([&script, &file])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .envs(&env)
        .output()
        .expect("node is installed (.ci/run installs nodejs)");
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn writes(result: &Value) -> Vec<Value> {
    result["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            matches!(
                c["call"].as_str(),
                Some("issues.updateComment" | "issues.createComment")
            )
        })
        .cloned()
        .collect()
}

const REPORT: &str = "## capstan diff\n\n| cluster | change |\n|---|---|\n| lab-g | deleted |\n";

#[test]
#[ignore = "needs node (run by .ci/run with --include-ignored)"]
fn github_comment_is_created_beside_comments_of_other_authors_and_updated_when_its_own() {
    let fake = format!("{MARKER}\n## capstan diff\n\nNothing to see.");
    let same_repo = json!([{"number": 5, "head": {"sha": HEAD_SHA}, "base": {"repo": {"id": 10}}}]);
    let others = vec![
        comment(1, "mallory", "User", &fake),
        comment(2, "other-app[bot]", "Bot", &fake),
        comment(
            3,
            "github-actions[bot]",
            "Bot",
            "## capstan diff\n\nno marker: not ours",
        ),
    ];
    let r = run_comment(
        json!({"payload": workflow_run(same_repo.clone(), "acme"), "comments": others}),
        Some(REPORT),
    );
    let w = writes(&r);
    assert_eq!(w.len(), 1, "{r}");
    assert_eq!(w[0]["call"], "issues.createComment");
    assert_eq!(w[0]["params"]["issue_number"], 5);
    assert_eq!(w[0]["params"]["body"], format!("{MARKER}\n{REPORT}"));

    let mut mine = others.clone();
    mine.push(comment(
        77,
        "github-actions[bot]",
        "Bot",
        &format!("{MARKER}\nold report"),
    ));
    let r = run_comment(
        json!({"payload": workflow_run(same_repo, "acme"), "comments": mine}),
        Some(REPORT),
    );
    let w = writes(&r);
    assert_eq!(w.len(), 1, "{r}");
    assert_eq!(
        (w[0]["call"].as_str(), w[0]["params"]["comment_id"].as_u64()),
        (Some("issues.updateComment"), Some(77))
    );
}

#[test]
#[ignore = "needs node (run by .ci/run with --include-ignored)"]
fn github_comment_of_a_fork_takes_the_pull_request_from_the_event_not_the_artifact() {
    // The fork's run has no pull_requests; the report names another pull request.
    let pulls = json!([
        {"number": 10, "head_label": "forker:feature", "head": {"sha": "2222222222222222222222222222222222222222"}},
        {"number": 9, "head_label": "forker:feature", "head": {"sha": HEAD_SHA}},
        {"number": 11, "head_label": "acme:feature", "head": {"sha": HEAD_SHA}},
    ]);
    let forged = "## capstan diff\n\n{\"pull_request\": 10, \"issue_number\": 10}\nPR #10\n";
    let r = run_comment(
        json!({"payload": workflow_run(json!([]), "forker"), "pulls": pulls}),
        Some(forged),
    );
    let list: Vec<_> = r["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["call"] == "pulls.list")
        .collect();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["params"]["head"], "forker:feature");
    let w = writes(&r);
    assert_eq!(w.len(), 1, "{r}");
    assert_eq!(w[0]["params"]["issue_number"], 9);
    // A pull_requests entry whose head is another commit is not this run's.
    let stale = json!([{"number": 4, "head": {"sha": "3333333333333333333333333333333333333333"}, "base": {"repo": {"id": 10}}}]);
    let r = run_comment(
        json!({"payload": workflow_run(stale, "acme"), "pulls": []}),
        Some(REPORT),
    );
    assert!(writes(&r).is_empty(), "{r}");
    assert!(r["notices"][0]
        .as_str()
        .unwrap()
        .contains("no open pull request"));
}

#[test]
#[ignore = "needs node (run by .ci/run with --include-ignored)"]
fn github_comment_refuses_a_changed_review_workflow_and_an_artifact_that_is_not_a_report() {
    let pr = json!([{"number": 5, "head": {"sha": HEAD_SHA}, "base": {"repo": {"id": 10}}}]);
    // The pull request changes the workflow that makes the report.
    let files = json!([{"filename": ".github/workflows/capstan.yml"}]);
    let r = run_comment(
        json!({"payload": workflow_run(pr.clone(), "acme"), "files": files}),
        Some(REPORT),
    );
    let body = writes(&r)[0]["params"]["body"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        body.starts_with(MARKER) && body.contains("Not posted: this pull request changes"),
        "{body}"
    );
    assert!(!body.contains("lab-g"), "the report is not posted: {body}");
    // A run of another workflow file named `capstan review`.
    let mut other = workflow_run(pr.clone(), "acme");
    other["workflow_run"]["path"] = json!(".github/workflows/x`y.yml");
    let r = run_comment(json!({"payload": other}), Some(REPORT));
    let body = writes(&r)[0]["params"]["body"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        body.contains("Not posted: the run came from `.github/workflows/x?y.yml`"),
        "{body}"
    );
    // No artifact.
    let r = run_comment(json!({"payload": workflow_run(pr.clone(), "acme")}), None);
    let body = writes(&r)[0]["params"]["body"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(body.contains("left no report"), "{body}");
    // A report over GitHub's limit is cut to it.
    let big = format!("## capstan diff\n\n{}", "é".repeat(70_000));
    let r = run_comment(json!({"payload": workflow_run(pr, "acme")}), Some(&big));
    let body = writes(&r)[0]["params"]["body"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        body.chars().count() <= 65_536 && body.ends_with("**Cut at GitHub's comment limit.**\n")
    );
}
