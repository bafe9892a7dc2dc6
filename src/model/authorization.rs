//! `spec.apiServer.authorizationConfig` of `cluster.yaml`: the kubeadm apiservers'
//! structured authorizers as Talos v1.9+ takes them, and the list Talos then runs.

use serde::{Deserialize, Serialize};

/// One authorizer of `spec.apiServer.authorizationConfig`, as Talos takes it
/// (`cluster.apiServer.authorizationConfig[]`: `{type, name, webhook}`, in the config schemas
/// of v1.9 to v1.13, not v1.8's; `v1alpha1_authorizaationconfigauthorizer.go` v1.9.6:12-44).
///
/// What Talos does with the list (Talos v1.9.6 and v1.13.9
/// `internal/app/machined/pkg/controllers/k8s/control_plane.go:116-163`): nothing when
/// Kubernetes is older than 1.29 (it then passes `--authorization-mode=Node,RBAC`; siderolabs
/// go-kubernetes v0.2.38 `kubernetes/compatibility/features.go:59-63`); otherwise the
/// authorizers in this order, a `Node` authorizer inserted first and an `RBAC` one second when
/// the list has none, written as the apiserver's AuthorizationConfiguration
/// (`render_config_static_pods.go` v1.9.6:293-321, each `webhook` read as the apiserver's
/// `WebhookConfiguration`). Talos refuses the list beside an `authorization-mode` or
/// `authorization-webhook-*` extra arg (`v1alpha1_apiserverconfig.go` v1.9.6:105-115). A
/// webhook's `connectionInfo.kubeConfigFile` names a file on the node: Talos does not write
/// it; it must come with a `machine.files` patch and an `extraVolumes` mount.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Authorizer {
    /// `Node`, `RBAC` or `Webhook`.
    #[serde(rename = "type")]
    pub kind: AuthorizerType,
    /// The authorizer's name (`node`, `rbac`, the webhook's name), unique in the list.
    pub name: String,
    /// A `Webhook` authorizer's configuration, as in the kubeadm file (`timeout`,
    /// `authorizedTTL`, `unauthorizedTTL`, `subjectAccessReviewVersion`, `failurePolicy`,
    /// `connectionInfo`, `matchConditions`…), passed to Talos unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<serde_json::Value>,
}

/// The authorizer types Talos accepts (`allowedAuthorizationAuthorizerTypes`, Talos v1.9.6
/// `v1alpha1_authorizaationconfigauthorizer.go:12`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum AuthorizerType {
    /// The Node authorizer (kubelets).
    Node,
    /// Role-based access control.
    #[serde(rename = "RBAC")]
    Rbac,
    /// A SubjectAccessReview webhook.
    Webhook,
}

impl AuthorizerType {
    /// The type as written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthorizerType::Node => "Node",
            AuthorizerType::Rbac => "RBAC",
            AuthorizerType::Webhook => "Webhook",
        }
    }
}

/// The authorizers Talos 1.9+ runs for `configured` (`spec.apiServer.authorizationConfig`):
/// the list, `Node` (name `node`) inserted at 0 and `RBAC` (name `rbac`) at 1 when missing
/// (Talos v1.13.9 `control_plane.go:125-159`; none configured: exactly those two, `:125-128`,
/// `v1alpha1_apiserverconfig.go:32-41`).
pub fn talos_authorizers(configured: &[Authorizer]) -> Vec<Authorizer> {
    let mut out = configured.to_vec();
    let plain = |kind: AuthorizerType, name: &str| Authorizer {
        kind,
        name: name.to_string(),
        webhook: None,
    };
    if !out.iter().any(|a| a.kind == AuthorizerType::Node) {
        out.insert(0, plain(AuthorizerType::Node, "node"));
    }
    if !out.iter().any(|a| a.kind == AuthorizerType::Rbac) {
        out.insert(1.min(out.len()), plain(AuthorizerType::Rbac, "rbac"));
    }
    out
}
