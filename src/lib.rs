//! capstan: renders Cluster API + Talos manifests for kubeadm clusters migrated in place.
pub mod model;
pub mod yaml;
