//! A rehearsal as text for people (one short table per step) and as JSON for CI. Names
//! and messages come from a repository (a cluster, an object, a Job's output): each value
//! of the text stays on its line, escaped ([`crate::printable::line`]); the caller's
//! printer escapes the JSON.

use crate::printable::line;
use serde_json::{json, Value};

use super::drive::{Rehearsal, Snapshot, Step};

fn endpoint_line(s: &Snapshot) -> String {
    let (kind, backends) = &s.endpoint;
    let list: Vec<String> = backends
        .iter()
        .map(|(b, up)| format!("{b} {}", if *up { "up" } else { "down" }))
        .collect();
    let list = if list.is_empty() {
        "none".to_string()
    } else {
        list.join(", ")
    };
    format!("{kind}: {list}; longest gap {} s", s.longest_gap)
}

fn machines_line(s: &Snapshot) -> String {
    s.machines
        .iter()
        .map(|(name, have, want, refs, versions)| {
            format!(
                "{name} {have}/{want} ({refs} with nodeRef) {}",
                if versions.is_empty() {
                    "-".to_string()
                } else {
                    versions.join("+")
                }
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn etcd_line(s: &Snapshot) -> String {
    let (voters, up, learners) = s.etcd;
    let quorum = voters / 2 + 1;
    let members: Vec<String> = s
        .members
        .iter()
        .map(|(n, k, r, alive)| {
            format!(
                "{n} ({k}{}{})",
                if *r == "learner" { ", learner" } else { "" },
                if *alive { "" } else { ", down" }
            )
        })
        .collect();
    let tolerates = up.saturating_sub(quorum);
    format!(
        "{voters} voters ({up} up, quorum {quorum}, tolerates {tolerates} failure{}), {learners} learners: {}",
        if tolerates == 1 { "" } else { "s" },
        if members.is_empty() {
            "none".to_string()
        } else {
            members.join(", ")
        }
    )
}

/// The text report.
pub fn text(r: &Rehearsal) -> String {
    let mut out = format!(
        "capstan rehearse {} (a model of the providers, synced with {}: see README \"Rehearse\")\n",
        line(&r.cluster.to_string()),
        r.sync
    );
    for (i, step) in r.steps.iter().enumerate() {
        out.push_str(&step_text(i + 1, step));
    }
    match r.stop() {
        None => out.push_str("\nresult: every step reached its end state\n"),
        Some(s) => out.push_str(&format!(
            "\nresult: stopped ({}) at {}: {}\nfix: {}\n",
            s.kind,
            line(&s.object.to_string()),
            line(&s.condition.to_string()),
            line(&s.fix.to_string())
        )),
    }
    out
}

fn step_text(n: usize, step: &Step) -> String {
    let s = &step.snapshot;
    let state = match &step.stop {
        None => "done".to_string(),
        Some(stop) => format!("STOPPED ({})", stop.kind),
    };
    let mut out = format!(
        "\n{n}. {} [t={} s, {} s: {state}]\n",
        line(&step.title.to_string()),
        s.t,
        step.seconds
    );
    let row = |k: &str, v: String| format!("   {k:<9} {}\n", line(&v));
    if let Some(sync) = &step.sync {
        let mut parts = vec![format!("{} applied", sync.applied)];
        if !sync.pruned.is_empty() {
            parts.push(format!("pruned {}", sync.pruned.join(", ")));
        }
        if !sync.kept.is_empty() {
            parts.push(format!("kept {}", sync.kept.join(", ")));
        }
        if !sync.refused.is_empty() {
            parts.push(format!("refused {}", sync.refused.join("; ")));
        }
        for (name, code, _) in &sync.jobs {
            let code = code.map_or("killed".to_string(), |c| format!("exit {c}"));
            parts.push(format!("Job {name} {code}"));
        }
        out.push_str(&row("sync", parts.join("; ")));
    }
    out.push_str(&row("etcd", etcd_line(s)));
    out.push_str(&row("machines", machines_line(s)));
    out.push_str(&row(
        "pause",
        match &s.paused {
            None => "not paused".into(),
            Some(owners) => format!("paused (managed by {})", owners.join(", ")),
        },
    ));
    out.push_str(&row(
        "policies",
        if s.policies.is_empty() {
            "none".into()
        } else {
            s.policies.join(", ")
        },
    ));
    out.push_str(&row("endpoint", endpoint_line(s)));
    for note in &step.notes {
        out.push_str(&row("note", note.clone()));
    }
    if let Some(stop) = &step.stop {
        out.push_str(&row(
            "stopped",
            format!("{}: {}", stop.object, stop.condition),
        ));
        out.push_str(&row("fix", stop.fix.clone()));
    }
    out
}

fn snapshot_json(s: &Snapshot) -> Value {
    let (voters, up, learners) = s.etcd;
    json!({
        "t": s.t,
        "etcd": {
            "voters": voters, "up": up, "learners": learners, "quorum": voters / 2 + 1,
            "tolerates": up.saturating_sub(voters / 2 + 1),
            "members": s.members.iter().map(|(n, k, r, alive)| json!({"name": n, "kind": k, "role": r, "up": alive})).collect::<Vec<_>>(),
        },
        "machines": s.machines.iter().map(|(n, have, want, refs, v)| json!({"group": n, "machines": have, "replicas": want, "nodeRefs": refs, "versions": v})).collect::<Vec<_>>(),
        "paused": s.paused.is_some(),
        "pauseManagers": s.paused.clone().unwrap_or_default(),
        "policies": s.policies,
        "endpoint": {
            "kind": s.endpoint.0,
            "backends": s.endpoint.1.iter().map(|(b, up)| json!({"address": b, "serving": up})).collect::<Vec<_>>(),
            "longestGapSeconds": s.longest_gap,
        },
    })
}

/// The JSON report.
pub fn json(r: &Rehearsal) -> Value {
    json!({
        "cluster": r.cluster,
        "sync": r.sync,
        "result": if r.stop().is_some() { "stopped" } else { "done" },
        "stop": r.stop().map(|s| json!({"kind": s.kind, "object": s.object, "condition": s.condition, "fix": s.fix})),
        "steps": r.steps.iter().map(|st| json!({
            "title": st.title,
            "seconds": st.seconds,
            "sync": st.sync.as_ref().map(|s| json!({
                "applied": s.applied, "pruned": s.pruned, "kept": s.kept, "refused": s.refused,
                "jobs": s.jobs.iter().map(|(n, c, tail)| json!({"name": n, "exit": c, "tail": tail})).collect::<Vec<_>>(),
            })),
            "state": snapshot_json(&st.snapshot),
            "notes": st.notes,
            "stop": st.stop.as_ref().map(|s| json!({"kind": s.kind, "object": s.object, "condition": s.condition, "fix": s.fix})),
        })).collect::<Vec<_>>(),
    })
}
