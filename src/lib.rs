//! capstan renders the Cluster API + Talos manifests that migrate a long-lived kubeadm
//! cluster on vSphere in place, and manage it afterwards through GitOps.
//!
//! A program that embeds capstan calls its facade: [`render_repository`] (what `capstan
//! render` prints), [`review_revisions`] (what `capstan diff --git` reports) and
//! [`check_cluster`] (what `capstan check` finds without kubeadm files):
//!
//! ```
//! let stream = capstan::render_repository("examples/gitops".as_ref())?;
//! assert!(stream.starts_with("apiVersion: "));
//! let findings = capstan::check_cluster("examples/gitops/clusters/lab-g".as_ref())?;
//! assert!(findings.iter().all(|f| f.severity != capstan::Severity::Blocking));
//! # Ok::<(), capstan::Error>(())
//! ```
//!
//! The modules are folders in pipeline order, each importing only from itself, the folders
//! listed before it and the shared vocabulary (`tests/architecture.rs` enforces it, and that
//! `ARCHITECTURE.md`'s folder table says the same):
//!
//! - shared vocabulary: `yaml` (the one YAML crate boundary), `digest`, `resource`
//!   (Kubernetes objects), `argocd` (the Argo CD contract), `procedure` (the operator
//!   procedures that messages name) and `printable` (untrusted text escaped for printing);
//!   `schema`, the CRD validator, imports nothing of capstan;
//! - `model`: `cluster.yaml` and `overlay.yaml` types and their validation;
//! - `overlay`: the overlay engine (compile, select, patch);
//! - `inputs`: the only reader of project files, over a `inputs::Tree` (disk, git, memory);
//! - `secrets`: age, the PKI, the Talos secrets bundle, SOPS files and sealing;
//! - `migration`: the checks (whose refusals gate rendering), the import, the phase plan
//!   and `explain`;
//! - `pipeline`: the one composer: gate → render → overlay → names → interlocks → seal →
//!   sort, for every cluster of a repository;
//! - `output`: the only writer (bundle layout, lock file, atomic output);
//! - `review`: the secret-safe diff of two renders and its reports;
//! - `rehearse`: a cluster's renders walked through a model of the providers;
//! - `backup`: encrypted backups of the management cluster's state that git does not hold;
//! - `cli`: argument types and the commands (the edge; `main.rs` only calls it).
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(clippy::too_many_lines)]

/// The modules behind the facade: private, so that rustc sees what nothing uses, and
/// public (hidden from the documentation) only with the `testkit` feature, which the
/// integration tests and the benchmarks turn on for themselves (`[dev-dependencies]`).
macro_rules! internal {
    ($($name:ident),* $(,)?) => {$(
        #[cfg(feature = "testkit")]
        #[doc(hidden)]
        pub mod $name;
        #[cfg(not(feature = "testkit"))]
        mod $name;
    )*};
}

internal!(
    argocd, backup, cli, digest, inputs, migration, model, output, overlay, pipeline, printable,
    procedure, rehearse, resource, review, schema, secrets, yaml,
);

/// What `main.rs` runs: the command line (`capstan --help`). Not a library interface.
#[doc(hidden)]
pub use cli::main as run_command_line;
mod facade;

pub use facade::{
    check_cluster, render_repository, review_revisions, Error, Finding, Review, Severity,
};
