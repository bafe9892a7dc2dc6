//! CLI glue of `capstan rehearse`: the arguments to [`crate::rehearse::Options`], the
//! rehearsal of the cluster directory, the report printed (every line escaped).

use std::io::Write;

use anyhow::Result;

use crate::cli::terminal::Status;
use crate::cli::{RehearseArgs, RehearseOperation, RehearsePhase, RehearseSync, ReportFormat};
use crate::model::Phase;
use crate::rehearse::drive::Operation;
use crate::rehearse::{self, Options, SyncMode};

fn operation(op: RehearseOperation) -> Operation {
    match op {
        RehearseOperation::TalosUpgrade => Operation::TalosUpgrade,
        RehearseOperation::KubernetesPatch => Operation::KubernetesPatch,
        RehearseOperation::KubernetesMinor => Operation::KubernetesMinor,
        RehearseOperation::Rollout => Operation::Rollout,
        RehearseOperation::VipHandover => Operation::VipHandover,
        RehearseOperation::ReplaceControlPlane => Operation::ReplaceControlPlane,
        RehearseOperation::WorkerRollout => Operation::WorkerRollout,
        RehearseOperation::MhcRemediation => Operation::MhcRemediation,
        RehearseOperation::AutoscalerScaleUp => Operation::AutoscalerScaleUp,
        RehearseOperation::PhaseRevert => Operation::PhaseRevert,
    }
}

/// `capstan rehearse`.
pub fn run(args: RehearseArgs) -> Result<Status> {
    let options = Options {
        then: args.then.map(operation),
        until: match args.until {
            RehearsePhase::Workers => Phase::Workers,
            RehearsePhase::Complete => Phase::Complete,
        },
        sync: match args.sync {
            RehearseSync::Argocd => SyncMode::ArgoPrune,
            RehearseSync::ArgocdNoPrune => SyncMode::ArgoNoPrune,
            RehearseSync::Kubectl => SyncMode::KubectlApply,
        },
        ..Options::default()
    };
    let r = rehearse::cluster(&args.dir, &options)?;
    let text = match args.format {
        ReportFormat::Text => rehearse::report::text(&r),
        ReportFormat::Json => {
            let mut s = serde_json::to_string_pretty(&rehearse::report::json(&r))?;
            s.push('\n');
            crate::printable::json(&s).into_owned()
        }
    };
    // Names and messages came from a repository: each value is escaped on its line by the
    // report, and every line is bounded as errors are.
    let mut out = std::io::stdout().lock();
    for line in text.lines() {
        writeln!(out, "{}", crate::review::report::error_message(line))?;
    }
    out.flush()?;
    Ok(if r.stop().is_some() {
        Status::Findings
    } else {
        Status::Success
    })
}
