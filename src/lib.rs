//! capstan renders the Cluster API + Talos manifests that migrate a long-lived kubeadm
//! cluster on vSphere in place, and manage it afterwards through GitOps.
//!
//! The pipeline (see `ARCHITECTURE.md`): [`inputs`] reads files once, [`model`] parses and
//! validates `cluster.yaml`, [`render`] turns it into objects (with [`overlay`] applying the
//! cluster's overlays and [`names`] giving immutable templates content-hash names),
//! [`pipeline`] runs that for every cluster of a repository (with the sealed Secrets),
//! [`bundle`] lays them out and is the only writer; [`schema`] validates objects against
//! CRDs; [`explain`] maps error messages seen in the field to cause, check and fix;
//! [`diff`] compares two renders and [`report`] formats the result; [`commands`] and
//! `main.rs` are the CLI edge.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod argocd;
pub mod bundle;
pub mod check;
pub mod cli;
pub mod cmd_argocd;
pub mod commands;
pub mod diff;
pub mod digest;
pub mod explain;
pub mod import;
pub mod inputs;
pub mod kubeadm;
pub mod model;
pub mod names;
pub mod overlay;
pub mod pipeline;
pub mod pki;
pub mod plan;
pub mod procedure;
pub mod providers;
pub mod render;
pub mod report;
pub mod resource;
pub mod scaffold;
pub mod schema;
pub mod seal;
pub mod secrets;
pub mod sops;
pub mod sopssecret;
pub mod talos;
pub mod terminal;
pub mod yaml;
