//! The worker pools' lifecycle settings of `cluster.yaml`: the MachineHealthChecks
//! (`spec.healthCheck`) and what Cluster API waits for when it deletes a machine
//! (`spec.deletion`).

use serde::{Deserialize, Serialize};

/// The MachineHealthCheck of every worker pool (phase `complete`, or a cluster that is
/// not migrating): a machine whose Node stays NotReady is replaced.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HealthCheck {
    /// Render them (default `true`).
    #[serde(default = "HealthCheck::yes")]
    pub enabled: bool,
    /// Seconds a Node may be NotReady (or unknown) before its machine is replaced (300).
    #[serde(default = "HealthCheck::default_unhealthy")]
    pub unhealthy_timeout_seconds: u32,
    /// Seconds a new machine's Node may take to join (1800).
    #[serde(default = "HealthCheck::default_startup")]
    pub node_startup_timeout_seconds: u32,
    /// No remediation while more of the pool than this is unhealthy: a count or a
    /// percentage (`40%`).
    #[serde(
        default = "HealthCheck::default_max_unhealthy",
        deserialize_with = "int_or_string"
    )]
    pub max_unhealthy: String,
}

/// An int-or-string field (`40%` or `2`), kept as its text.
fn int_or_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum IntOrString {
        Int(u64),
        Str(String),
    }
    Ok(match IntOrString::deserialize(d)? {
        IntOrString::Int(n) => n.to_string(),
        IntOrString::Str(s) => s,
    })
}

impl HealthCheck {
    fn yes() -> bool {
        true
    }
    fn default_unhealthy() -> u32 {
        300
    }
    fn default_startup() -> u32 {
        1800
    }
    fn default_max_unhealthy() -> String {
        "40%".into()
    }
    /// The defaults (the section is then not written).
    pub fn is_default(&self) -> bool {
        *self == HealthCheck::default()
    }
}

impl Default for HealthCheck {
    fn default() -> Self {
        HealthCheck {
            enabled: true,
            unhealthy_timeout_seconds: Self::default_unhealthy(),
            node_startup_timeout_seconds: Self::default_startup(),
            max_unhealthy: Self::default_max_unhealthy(),
        }
    }
}

/// What Cluster API waits for when it deletes a machine (rendered as `nodeDrainTimeout`…
/// in v1beta1, `deletion.*Seconds` in v1beta2, each only when set).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Deletion {
    /// Seconds Cluster API spends draining a node before it deletes the machine anyway.
    /// Unset (the default) is Cluster API's own default: the drain waits without limit, so a
    /// PodDisruptionBudget holds the machine's deletion until it allows the eviction. Once a
    /// set timeout has passed, Cluster API stops draining and deletes the machine with the
    /// pods a PodDisruptionBudget still protects (cluster-api v1.10.10
    /// `internal/controllers/machine/machine_controller.go:642-658, 680-694`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_drain_timeout_seconds: Option<u32>,
    /// Seconds Cluster API waits for the node's volumes to detach; unset (the default)
    /// waits without limit, so a vSphere VM is never deleted with a volume still attached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_volume_detach_timeout_seconds: Option<u32>,
    /// Seconds Cluster API tries to delete the Node object (Cluster API's default: 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_deletion_timeout_seconds: Option<u32>,
}

impl Deletion {
    /// The defaults (the section is then not written).
    pub fn is_default(&self) -> bool {
        *self == Deletion::default()
    }
}
