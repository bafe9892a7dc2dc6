//! The rendered migration Jobs run for real under a POSIX shell against the model: `kubectl`
//! and `sleep` are shims that pass each call over a FIFO to a thread holding the
//! [`World`]; calls are answered one at a time, the controllers run between calls, and
//! `sleep` advances the model's clock, so a run is deterministic. The script is capstan's
//! own (the migration templates cannot be overridden and an overlay cannot change a
//! migration object); it runs with an empty environment, a private temporary directory as
//! its home, and a `PATH` of the shims and the system's utilities.
//!
//! The model holds both FIFOs open for reading and writing for the whole pod, so a FIFO
//! never reaches end-of-file and its buffer never goes away between calls. A FIFO opened
//! and closed per call is not safe in a test binary: another thread's `fork` copies the
//! model's descriptor into a child until that child's `exec`, and a request written while
//! only that copy read the FIFO was dropped with it (the kernel frees a FIFO's buffer when
//! its last descriptor closes), or a shim read end-of-file before its answer, so the model
//! waited for a request that never came (a CI run hung so). Each request is framed by its
//! field count, each answer is one line; a shim's `read` takes exactly one.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::kubectl::Reply;
use super::model::{lock, World};
use super::RehearseError;

const SHIM: &str = r#"#!/bin/sh
# Forwards this call to the model over a FIFO and replays the answer.
printf '%s\0' "$#" "${0##*/}" "$@" > "$SIM/req"
read -r _ < "$SIM/resp"
cat "$SIM/out"
cat "$SIM/err" >&2
code=$(cat "$SIM/code")
if [ "$code" = kill ]; then kill -KILL 0; fi
exit "$code"
"#;

/// The field that stops the model's thread wherever it is in a request: a pod killed inside
/// its `printf` leaves a partial request, and the model must still stop.
const QUIT: &str = "\u{1}capstan-quit";

/// The longest one pod may run in real time.
const POD_REAL_TIME: Duration = Duration::from_secs(120);

/// How long the model's thread may take to stop once its pod ended.
const MODEL_STOP: Duration = Duration::from_secs(30);

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
    // Linux opens a FIFO for reading and writing without waiting for a peer (fifo(7)).
    let fifo = |name: &str| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(sim.join(name))
            .map_err(job_io("a FIFO"))
    };
    let (req, resp) = (fifo("req")?, fifo("resp")?);
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
    // What the model's thread is doing, for the message when a pod or the thread hangs.
    let doing = Arc::new(Mutex::new(String::from("waiting for the first call")));
    let (done, served) = std::sync::mpsc::channel();
    {
        let world = Arc::clone(world);
        let sim = sim.clone();
        let doing = Arc::clone(&doing);
        std::thread::spawn(move || {
            let _ = done.send(serve(&world, &sim, req, resp, &doing));
        });
    }
    let doing_now = || doing.lock().map(|d| d.clone()).unwrap_or_default();
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
    // Stop the server: it waits for a request. The model holds the FIFO open, so this
    // open never waits for a reader.
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .write(true)
        .open(sim.join("req"))
    {
        let _ = f.write_all(format!("{QUIT}\0").as_bytes());
    }
    match served.recv_timeout(MODEL_STOP) {
        Ok(served) => served?,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            return Err(RehearseError::Job {
                message: format!(
                    "the model's thread did not stop within {} s of the pod's end; it was {}",
                    MODEL_STOP.as_secs(),
                    doing_now()
                ),
            })
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            return Err(RehearseError::Job {
                message: format!("the model's thread panicked; it was {}", doing_now()),
            })
        }
    }
    let output = format!(
        "{}{}",
        std::fs::read_to_string(&log).unwrap_or_default(),
        std::fs::read_to_string(&errlog).unwrap_or_default()
    );
    let Some(status) = status else {
        return Err(RehearseError::Job {
            message: format!(
                "a Job script ran for over {} s of real time (the model was {}):\n{output}",
                POD_REAL_TIME.as_secs(),
                doing_now()
            ),
        });
    };
    Ok(PodRun {
        code: status.code(),
        output,
    })
}

/// Answer the shims' calls until told to quit: each request is its argument count, then the
/// shim's name and its arguments, every field ended by a NUL.
fn serve(
    world: &Arc<Mutex<World>>,
    sim: &Path,
    req: std::fs::File,
    mut resp: std::fs::File,
    doing: &Mutex<String>,
) -> Result<(), RehearseError> {
    let set = |what: String| {
        if let Ok(mut d) = doing.lock() {
            *d = what;
        }
    };
    use std::io::BufRead;
    let mut req = std::io::BufReader::new(req);
    // `None` for the quit field.
    let mut field = || -> Result<Option<String>, RehearseError> {
        let mut f = Vec::new();
        req.read_until(0, &mut f)
            .map_err(job_io("the request FIFO"))?;
        if f.pop() != Some(0) {
            return Err(RehearseError::Job {
                message: "the request FIFO ended inside a request".into(),
            });
        }
        let f = String::from_utf8_lossy(&f).into_owned();
        Ok((f != QUIT).then_some(f))
    };
    loop {
        let Some(count) = field()? else {
            return Ok(());
        };
        let Ok(count) = count.parse::<usize>() else {
            return Err(RehearseError::Job {
                message: format!("a request without its field count: {count:?}"),
            });
        };
        let Some(shim) = field()? else {
            return Ok(());
        };
        let mut args = Vec::with_capacity(count.min(64));
        for _ in 0..count {
            let Some(a) = field()? else {
                return Ok(());
            };
            args.push(a);
        }
        let call = crate::printable::line(&format!("{shim} {}", args.join(" "))).into_owned();
        set(format!("answering `{call}`"));
        let reply = {
            let mut w = lock(world);
            match shim.as_str() {
                "sleep" => {
                    let secs: u64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(1);
                    w.advance(secs);
                    Reply::ok("")
                }
                _ => w.kubectl(&args),
            }
        };
        std::fs::write(sim.join("out"), &reply.out).map_err(job_io("a reply"))?;
        std::fs::write(sim.join("err"), &reply.err).map_err(job_io("a reply"))?;
        std::fs::write(sim.join("code"), &reply.code).map_err(job_io("a reply"))?;
        resp.write_all(b"1\n").map_err(job_io("the reply FIFO"))?;
        set(format!("waiting for the call after `{call}`"));
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
