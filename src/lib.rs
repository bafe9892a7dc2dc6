//! capstan renders the Cluster API + Talos manifests that migrate a long-lived kubeadm
//! cluster on vSphere in place, and manage it afterwards through GitOps.
//!
//! The modules are grouped by domain, each importing only from itself, the domains listed
//! before it and the shared vocabulary (`tests/architecture.rs` enforces it):
//!
//! - shared vocabulary: [`yaml`] (the one YAML crate boundary), [`digest`], [`resource`]
//!   (Kubernetes objects), [`argocd`] (the Argo CD contract) and [`procedure`] (the
//!   operator procedures that messages name), [`printable`] (untrusted text escaped for
//!   printing);
//! - [`inputs`]: the only reader of project files, and what it reads: `cluster.yaml`
//!   ([`inputs::model`]), overlays, provider inventories and the kubeadm files;
//! - [`secrets`]: age, the PKI, the Talos secrets bundle, SOPS files and sealing;
//! - [`migration`]: the checks, the import, the phase plan and `explain`;
//! - [`render`]: the pipeline of a repository ([`render::pipeline`]): templates, overlays,
//!   content-hash names, sealed Secrets, and the one writer ([`render::bundle`]);
//! - [`review`]: the secret-safe diff of two renders and its reports;
//! - [`rehearse`]: a cluster's renders walked through a model of the providers (`capstan
//!   rehearse`, and the provider-model tests);
//! - [`backup`]: encrypted backups of the management cluster's state that git does not hold;
//! - [`cli`]: argument types and the commands (the edge; `main.rs` only calls it).
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(clippy::too_many_lines)]

pub mod argocd;
pub mod backup;
pub mod cli;
pub mod digest;
pub mod inputs;
pub mod migration;
pub mod printable;
pub mod procedure;
pub mod rehearse;
pub mod render;
pub mod resource;
pub mod review;
pub mod secrets;
pub mod yaml;
