//! The kube-controller-manager and kube-scheduler settings of `cluster.yaml`
//! (`spec.controllerManager`, `spec.scheduler`), rendered into Talos's
//! `cluster.controllerManager` and `cluster.scheduler`, and the flags Talos will not take as
//! extra args, each with its reason and source.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// kube-controller-manager flags carried from kubeadm into Talos's `cluster.controllerManager`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ControllerManager {
    /// kube-controller-manager flags (without `--`) the Talos control plane must run with, as
    /// kubeadm's does (`cluster.controllerManager.extraArgs`): `node-cidr-mask-size`,
    /// `node-monitor-grace-period`, `terminated-pod-gc-threshold`, `controllers`…; the flags
    /// Talos manages itself are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_args: BTreeMap<String, String>,
}

impl ControllerManager {
    /// Nothing set (the section is then not written).
    pub fn is_empty(&self) -> bool {
        self.extra_args.is_empty()
    }
}

/// kube-scheduler flags carried from kubeadm into Talos's `cluster.scheduler`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Scheduler {
    /// kube-scheduler flags (without `--`) the Talos control plane must run with
    /// (`cluster.scheduler.extraArgs`); the flags Talos manages itself are refused, `config`
    /// among them (profiles go in Talos's `cluster.scheduler.config`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_args: BTreeMap<String, String>,
}

impl Scheduler {
    /// Nothing set (the section is then not written).
    pub fn is_empty(&self) -> bool {
        self.extra_args.is_empty()
    }
}

/// kube-controller-manager flags capstan does not take in `spec.controllerManager.extraArgs`,
/// and why. Talos refuses the MergeDenied ones (`control_plane_static_pod.go`
/// `manageControllerManager`, the same six in every supported minor: v1.8.4:600-605,
/// v1.9.6:609-614, v1.10.9:611-616, v1.11.6:611-616, v1.12.11:607-612, v1.13.9:612-617).
pub const CONTROLLER_MANAGER_ARGS_REFUSED: &[(&str, &str)] = &[
    (
        "cluster-signing-cert-file",
        "Talos signs with the bundle's Kubernetes CA and refuses the flag (MergeDenied)",
    ),
    (
        "cluster-signing-key-file",
        "Talos signs with the bundle's Kubernetes CA and refuses the flag (MergeDenied)",
    ),
    (
        "authentication-kubeconfig",
        "Talos writes its own kubeconfig and refuses the flag (MergeDenied)",
    ),
    (
        "authorization-kubeconfig",
        "Talos writes its own kubeconfig and refuses the flag (MergeDenied)",
    ),
    (
        "root-ca-file",
        "Talos mounts the bundle's CA and refuses the flag (MergeDenied)",
    ),
    (
        "service-account-private-key-file",
        "Talos mounts the bundle's service-account key and refuses the flag (MergeDenied)",
    ),
    // Talos sets these from the config (v1.13.9 :586-587); an extra arg of the additive
    // `service-cluster-ip-range` (:609) would be appended to them.
    ("cluster-cidr", "set spec.network.pods"),
    ("service-cluster-ip-range", "set spec.network.services"),
    // Talos probes /healthz on 10257 whatever the flag says (v1.8.4:674,688; v1.13.9:696,710).
    (
        "secure-port",
        "Talos's startup and liveness probes use port 10257, so the pod would be restarted",
    ),
];

/// kube-scheduler flags capstan does not take in `spec.scheduler.extraArgs`, and why. Talos
/// refuses the MergeDenied ones (`control_plane_static_pod.go` `manageScheduler`, the same
/// four in every supported minor: v1.8.4:752-755, v1.9.6:766-769, v1.10.9:768-771,
/// v1.11.6:768-771, v1.12.11:764-767, v1.13.9:774-777).
pub const SCHEDULER_ARGS_REFUSED: &[(&str, &str)] = &[
    (
        "config",
        "Talos writes its own KubeSchedulerConfiguration and refuses the flag (MergeDenied); \
         scheduler profiles go in Talos's cluster.scheduler.config",
    ),
    (
        "kubeconfig",
        "Talos writes its own kubeconfig and refuses the flag (MergeDenied)",
    ),
    (
        "authentication-kubeconfig",
        "Talos writes its own kubeconfig and refuses the flag (MergeDenied)",
    ),
    (
        "authorization-kubeconfig",
        "Talos writes its own kubeconfig and refuses the flag (MergeDenied)",
    ),
    // Talos probes on 10259 whatever the flag says (v1.8.4:781-803, v1.13.9:808-830).
    (
        "secure-port",
        "Talos's probes use port 10259, so the pod would be restarted",
    ),
];

/// Why `name` is refused in a component's extra args, if it is.
pub fn refused_arg(table: &[(&str, &'static str)], name: &str) -> Option<&'static str> {
    table.iter().find(|(n, _)| *n == name).map(|(_, why)| *why)
}
