//! CLI glue of `capstan rehearse`: the cluster read and rendered as `argocd generate` renders
//! it (every phase's commit from its `cluster.yaml`), the model run, the report printed.

use std::io::Write;

use anyhow::Result;
use serde_json::Value;

use crate::cli::terminal::Status;
use crate::cli::{RehearseArgs, RehearseFormat, RehearseOperation, RehearsePhase, RehearseSync};
use crate::inputs::{self, model::ClusterConfig, model::Phase};
use crate::rehearse::drive::Operation;
use crate::rehearse::{self, Options, SyncMode};
use crate::render::Renderer;

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
    let c = inputs::load_cluster_with(&args.dir, inputs::Digests::NotWanted)?;
    let root = inputs::repo_root(&c.dir);
    let (overrides, _) = inputs::load_templates(&root.join("templates"), &root, false)?;
    let overlays = inputs::load_overlays(&c, &inputs::OverlayCache::default())?;
    let renderer = Renderer::new(&overrides)?;
    let mut render = |config: &ClusterConfig| -> std::result::Result<Vec<Value>, String> {
        let mut input = c.clone();
        input.config = config.clone();
        let rendered = crate::render::pipeline::build(&input, &overlays, &renderer)
            .map_err(|e| format!("{:#}", anyhow::Error::from(e)))?;
        Ok(rendered
            .resources
            .into_iter()
            .map(|mut r| {
                crate::argocd::annotate(&mut r);
                r.value
            })
            .collect())
    };
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
    let r = rehearse::rehearse(&c.file, &c.config, &mut render, &options)?;
    let text = match args.format {
        RehearseFormat::Text => rehearse::report::text(&r),
        RehearseFormat::Json => {
            let mut s = serde_json::to_string_pretty(&rehearse::report::json(&r))?;
            s.push('\n');
            s
        }
    };
    // Names and messages came from a repository: every line escaped as errors are.
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
