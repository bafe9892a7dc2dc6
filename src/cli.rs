//! The command-line interface: clap derive types only. Doc comments are the help text.

use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Render Cluster API + Talos manifests for kubeadm clusters migrated in place to Talos on
/// vSphere, and manage them through GitOps.
///
/// Exit codes: 0 success, 1 differences or blocking findings, 2 error.
#[derive(Debug, Parser)]
#[command(name = "capstan", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// capstan's commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Render clusters into Cluster API objects: a YAML stream on stdout, or a bundle
    /// directory per cluster with `-o`.
    Render(RenderArgs),
    /// Validate objects strictly against CRD schemas (unknown fields are errors).
    Validate(ValidateArgs),
}

/// Arguments of `capstan render`.
#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    /// Cluster directories (holding `cluster.yaml`), or repositories whose `clusters/*/`
    /// hold them. Defaults to the current directory.
    #[arg(value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Write one directory per cluster under OUT (objects, kustomization.yaml, capstan.lock)
    /// instead of printing a YAML stream.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Template overrides directory (default: `templates/` at each repository root).
    #[arg(long, value_name = "DIR")]
    pub templates: Option<PathBuf>,
}

/// Arguments of `capstan validate`.
#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// Directory of CRD YAML files (searched recursively).
    #[arg(long, value_name = "DIR", required = true)]
    pub crds: Vec<PathBuf>,
    /// YAML files or rendered bundle directories to validate; `-` or nothing reads stdin.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Also fail on kinds no CRD describes (built-in kinds such as Secret are always skipped).
    #[arg(long)]
    pub strict_kinds: bool,
}
