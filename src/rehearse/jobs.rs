//! The rendered migration Jobs run for real under a POSIX shell against the model: `kubectl`
//! and `sleep` are shims that pass each call over a FIFO to a thread holding the
//! [`World`]; calls are answered one at a time, the controllers run between calls, and
//! `sleep` advances the model's clock, so a run is deterministic. The script is capstan's
//! own (the migration templates cannot be overridden and an overlay cannot change a
//! migration object); it runs with an empty environment, a private temporary directory as
//! its home, and a `PATH` of the shims and the system's utilities.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::kubectl::Reply;
use super::model::{lock, World};
use super::RehearseError;

const SHIM: &str = r#"#!/bin/sh
# Forwards this call to the model over a FIFO and replays the answer.
printf '%s\0' "${0##*/}" "$@" > "$SIM/req"
read -r _ < "$SIM/resp"
cat "$SIM/out"
cat "$SIM/err" >&2
code=$(cat "$SIM/code")
if [ "$code" = kill ]; then kill -KILL 0; fi
exit "$code"
"#;

/// The longest one pod may run in real time.
const POD_REAL_TIME: Duration = Duration::from_secs(120);

/// How a Job's pod ended.
#[derive(Debug, Clone)]
pub struct PodRun {
    /// Exit code; `None` when killed.
    pub code: Option<i32>,
    /// What it printed (stdout, then stderr).
    pub output: String,
}

fn job_io(what: &str) -> impl Fn(std::io::Error) -> RehearseError + '_ {
    move |e| RehearseError::Job {
        message: format!("{what}: {e}"),
    }
}

/// Run one Job script (one pod) against the model.
pub fn run_pod(world: &Arc<Mutex<World>>, script: &str) -> Result<PodRun, RehearseError> {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().map_err(job_io("a temporary directory"))?;
    let sim = dir.path().to_path_buf();
    let bin = sim.join("bin");
    std::fs::create_dir_all(&bin).map_err(job_io("the shim directory"))?;
    for name in ["kubectl", "sleep"] {
        std::fs::write(bin.join(name), SHIM).map_err(job_io("a shim"))?;
        std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755))
            .map_err(job_io("a shim"))?;
    }
    for fifo in ["req", "resp"] {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            sim.join(fifo),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .map_err(|e| RehearseError::Job {
            message: format!("a FIFO: {e}"),
        })?;
    }
    let log = sim.join("pod.log");
    let errlog = sim.join("pod.err");
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let shell = lock(world).shell.clone();
    let mut child = std::process::Command::new(&shell)
        .args(["-ec", script])
        .env_clear()
        .env("PATH", path)
        .env("SIM", &sim)
        .env("HOME", &sim)
        .current_dir(&sim)
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&log).map_err(job_io("the pod log"))?)
        .stderr(std::fs::File::create(&errlog).map_err(job_io("the pod log"))?)
        .process_group(0)
        .spawn()
        .map_err(job_io(&shell))?;
    let server = {
        let world = Arc::clone(world);
        let sim = sim.clone();
        std::thread::spawn(move || serve(&world, &sim))
    };
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().map_err(job_io("the pod"))? {
            break Some(s);
        }
        if started.elapsed() > POD_REAL_TIME {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    // Stop the server: it waits for a request.
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .write(true)
        .open(sim.join("req"))
    {
        let _ = f.write_all(b"quit\0");
    }
    let served = server.join().map_err(|_| RehearseError::Job {
        message: "the model thread panicked".into(),
    })?;
    served?;
    let output = format!(
        "{}{}",
        std::fs::read_to_string(&log).unwrap_or_default(),
        std::fs::read_to_string(&errlog).unwrap_or_default()
    );
    let Some(status) = status else {
        return Err(RehearseError::Job {
            message: format!(
                "a Job script ran for over {} s of real time:\n{output}",
                POD_REAL_TIME.as_secs()
            ),
        });
    };
    Ok(PodRun {
        code: status.code(),
        output,
    })
}

/// Answer the shims' calls until told to quit.
fn serve(world: &Arc<Mutex<World>>, sim: &Path) -> Result<(), RehearseError> {
    loop {
        let mut req = Vec::new();
        std::fs::File::open(sim.join("req"))
            .and_then(|mut f| f.read_to_end(&mut req))
            .map_err(job_io("the request FIFO"))?;
        let mut args: Vec<String> = req
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.last().is_some_and(String::is_empty) {
            args.pop();
        }
        if args.first().map(String::as_str) == Some("quit") || args.is_empty() {
            return Ok(());
        }
        let reply = {
            let mut w = lock(world);
            match args[0].as_str() {
                "sleep" => {
                    let secs: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
                    w.advance(secs);
                    Reply::ok("")
                }
                _ => w.kubectl(&args[1..]),
            }
        };
        std::fs::write(sim.join("out"), &reply.out).map_err(job_io("a reply"))?;
        std::fs::write(sim.join("err"), &reply.err).map_err(job_io("a reply"))?;
        std::fs::write(sim.join("code"), &reply.code).map_err(job_io("a reply"))?;
        std::fs::OpenOptions::new()
            .write(true)
            .open(sim.join("resp"))
            .and_then(|mut f| f.write_all(b"1\n"))
            .map_err(job_io("the reply FIFO"))?;
    }
}

/// The script of a rendered Job (its container's `sh -ec` argument).
pub fn script(job: &Value) -> Option<&str> {
    job.pointer("/spec/template/spec/containers/0/command/2")
        .and_then(Value::as_str)
}

/// A Job as the Job controller runs it: a new pod after a failed or killed one, up to
/// `backoffLimit` retries, the controller's back-off between them \[A31]. Every pod's run.
pub fn run_job(world: &Arc<Mutex<World>>, job: &Value) -> Result<Vec<PodRun>, RehearseError> {
    let name = job["metadata"]["name"].as_str().unwrap_or("a Job");
    let Some(script) = script(job) else {
        return Err(RehearseError::Job {
            message: format!("{name} has no script"),
        });
    };
    let retries = job
        .pointer("/spec/backoffLimit")
        .and_then(Value::as_u64)
        .unwrap_or(6);
    let mut runs = Vec::new();
    for _ in 0..=retries {
        let run = run_pod(world, script)?;
        lock(world).advance(10);
        let done = run.code == Some(0);
        runs.push(run);
        if done {
            break;
        }
    }
    Ok(runs)
}
