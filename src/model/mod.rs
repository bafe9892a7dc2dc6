//! The declarative per-cluster input, `clusters/<name>/cluster.yaml`: strict serde types
//! (unknown fields are errors), the version table, and cross-field validation.
//!
//! Parsing ([`ClusterConfig::from_value`]) checks shape: every unknown field, wrong type and
//! missing required field is reported with its field path. Validation
//! ([`ClusterConfig::validate`]) checks meaning and reports every problem at once. Nothing that
//! touches the cluster's identity (issuer, audiences, encryption, endpoint, CIDRs) has a
//! default. Fields needed only to render (vSphere placement, machine sizes) are optional at
//! parse time so that `check` can run on the stub `import kubeadm` writes; render requires
//! them ([`Purpose::Render`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeSet;
use std::fmt;

mod authorization;
mod components;
mod endpoint;
mod lifecycle;
mod validate;
pub use authorization::{talos_authorizers, Authorizer, AuthorizerType};
pub use components::{
    refused_arg, ControllerManager, Scheduler, CONTROLLER_MANAGER_ARGS_REFUSED,
    SCHEDULER_ARGS_REFUSED,
};
pub use endpoint::{AddressPool, Endpoint, EndpointStrategy, IpamPool, Vip, DEFAULT_BACKEND_PORT};
#[cfg(any(test, feature = "testkit"))]
pub use endpoint::{POOL_LISTED_MAX};
pub use lifecycle::{Deletion, HealthCheck};

/// The `apiVersion` of `cluster.yaml`.
pub const API_VERSION: &str = "capstan.dev/v1alpha1";
/// The `kind` of `cluster.yaml`.
pub const KIND: &str = "ClusterConfig";

/// One problem in an input file: where (field path) and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Field path such as `spec.network.pods[0]`.
    pub path: String,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// An input file that does not parse or validate; lists every problem found.
#[derive(Debug, Clone, thiserror::Error)]
pub struct ModelError {
    /// The file, as the user named it.
    pub file: String,
    /// Every problem, in field order.
    pub problems: Vec<Problem>,
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.problems.len() == 1 {
            write!(f, "{}: {}", self.file, self.problems[0])
        } else {
            write!(f, "{}: {} problems", self.file, self.problems.len())?;
            for p in &self.problems {
                write!(f, "\n  - {p}")?;
            }
            Ok(())
        }
    }
}

/// The whole `cluster.yaml` document.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterConfig {
    /// Must be [`API_VERSION`].
    pub api_version: String,
    /// Must be [`KIND`].
    pub kind: String,
    /// Name and management-cluster namespace.
    pub metadata: Metadata,
    /// Everything else.
    pub spec: ClusterSpec,
}

/// Name and namespace of the cluster's Cluster API objects.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Metadata {
    /// The cluster name: a DNS-1123 label; prefixes every object name.
    pub name: String,
    /// The management-cluster namespace the objects live in.
    pub namespace: String,
}

/// Which Cluster API contract the objects are rendered for.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
pub enum Flavour {
    /// CAPI `v1beta1`, TalosControlPlane `v1alpha3`, CABPT `v1alpha3`, CAPV `v1beta1`
    /// (Sidero Labs CACPPT v0.5 / CABPT v0.6).
    #[serde(rename = "v1beta1")]
    V1beta1,
    /// CAPI `v1beta2`, TalosControlPlane `v1beta1`, CABPT `v1beta1`, CAPV `v1beta2`
    /// (community CACPPT v0.6+).
    #[serde(rename = "v1beta2")]
    V1beta2,
}

impl Flavour {
    /// Every flavour (a test requires each to have every object template).
    pub const ALL: [Flavour; 2] = [Flavour::V1beta1, Flavour::V1beta2];

    /// The name used in `cluster.yaml` and for the template directory.
    pub fn as_str(self) -> &'static str {
        match self {
            Flavour::V1beta1 => "v1beta1",
            Flavour::V1beta2 => "v1beta2",
        }
    }
}

/// The cluster's desired state.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterSpec {
    /// Provider flavour.
    pub flavour: Flavour,
    /// Talos and Kubernetes versions.
    pub versions: Versions,
    /// The control-plane endpoint (the existing load balancer).
    pub endpoint: Endpoint,
    /// Pod and service CIDRs and DNS domain, exactly as the kubeadm cluster has them.
    pub network: Network,
    /// Service-account issuers and audiences.
    pub service_account: ServiceAccount,
    /// etcd encryption at rest, as the kubeadm cluster has it.
    pub encryption: Encryption,
    /// kube-apiserver settings the kubeadm cluster has and Talos must carry
    /// (`cluster.apiServer`).
    #[serde(default, skip_serializing_if = "ApiServer::is_empty")]
    pub api_server: ApiServer,
    /// etcd settings the kubeadm cluster has and Talos must carry (`cluster.etcd`).
    #[serde(default, skip_serializing_if = "Etcd::is_empty")]
    pub etcd: Etcd,
    /// kube-controller-manager settings the kubeadm cluster has and Talos must carry
    /// (`cluster.controllerManager`).
    #[serde(default, skip_serializing_if = "ControllerManager::is_empty")]
    pub controller_manager: ControllerManager,
    /// kube-scheduler settings the kubeadm cluster has and Talos must carry
    /// (`cluster.scheduler`).
    #[serde(default, skip_serializing_if = "Scheduler::is_empty")]
    pub scheduler: Scheduler,
    /// kube-proxy as Talos manages it (`cluster.proxy`).
    #[serde(default, skip_serializing_if = "KubeProxy::is_default")]
    pub kube_proxy: KubeProxy,
    /// Talos machine settings of every machine: install image, time servers, nameservers,
    /// registry mirrors (what an air-gapped fleet needs).
    #[serde(default, skip_serializing_if = "TalosSettings::is_empty")]
    pub talos: TalosSettings,
    /// kubelet settings the kubeadm kubelets have and Talos must carry (`machine.kubelet`).
    #[serde(default, skip_serializing_if = "Kubelet::is_empty")]
    pub kubelet: Kubelet,
    /// The worker pools' MachineHealthChecks, rendered once the migration is complete.
    #[serde(default, skip_serializing_if = "HealthCheck::is_default")]
    pub health_check: HealthCheck,
    /// How long Cluster API waits when it deletes a machine (drain, volume detach, Node).
    #[serde(default, skip_serializing_if = "Deletion::is_default")]
    pub deletion: Deletion,
    /// vSphere placement; required to render.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vsphere: Option<VSphere>,
    /// Control-plane machines; required to render.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ControlPlane>,
    /// Worker pools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<WorkerPool>,
    /// The in-place migration from kubeadm, while it is under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration: Option<Migration>,
    /// Overlays applied after the templates, in this order (each after its bases): directories
    /// holding an `overlay.yaml`, relative to the repository root (the parent of `clusters/`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overlays: Vec<String>,
    /// age recipients (`age1…`) that secrets are encrypted to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recipients: Vec<String>,
    /// Public facts recorded by `import kubeadm`: CA fingerprints and the like.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
}

/// Versions; both `vX.Y.Z`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Versions {
    /// Talos version, e.g. `v1.10.6`.
    pub talos: String,
    /// Kubernetes version, e.g. `v1.30.4`.
    pub kubernetes: String,
}

/// Cluster networking.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Network {
    /// Pod CIDRs.
    pub pods: Vec<String>,
    /// Service CIDRs.
    pub services: Vec<String>,
    /// Cluster DNS domain, e.g. `cluster.local`.
    pub dns_domain: String,
}

/// Service-account token issuers and audiences.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServiceAccount {
    /// Issuers; the first signs new tokens, all are accepted.
    pub issuers: Vec<String>,
    /// Accepted audiences (`--api-audiences`).
    pub audiences: Vec<String>,
}

/// kube-apiserver settings carried from kubeadm into Talos's `cluster.apiServer`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApiServer {
    /// Names and addresses clients reach the apiserver by, beyond the endpoint host and
    /// the service names Talos adds itself (kubeadm's `apiServer.certSANs`).
    #[serde(rename = "certSANs", default, skip_serializing_if = "Vec::is_empty")]
    pub cert_sans: Vec<String>,
    /// kube-apiserver flags (without `--`) Talos must run with, as kubeadm's apiservers do
    /// (`cluster.apiServer.extraArgs`); the flags Talos manages itself are refused.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub extra_args: std::collections::BTreeMap<String, String>,
    /// The Pod Security level enforced on namespaces without a label: kubeadm configures
    /// none (`privileged`), Talos's generated config enforces `baseline`. Rendered into
    /// `cluster.apiServer.admissionControl` (PodSecurity `defaults`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security: Option<PodSecurityLevel>,
    /// The authorizers of the kubeadm apiservers' structured authorization configuration
    /// (their `--authorization-config` file's `authorizers`), rendered into Talos's
    /// `cluster.apiServer.authorizationConfig` (Talos v1.9 and later; see [`Authorizer`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub authorization_config: Vec<Authorizer>,
}

impl ApiServer {
    /// Nothing set (the section is then not written).
    pub fn is_empty(&self) -> bool {
        self.cert_sans.is_empty()
            && self.extra_args.is_empty()
            && self.pod_security.is_none()
            && self.authorization_config.is_empty()
    }
}

/// Talos machine settings of every machine (`machine.install`, `machine.time`,
/// `machine.network`, `machine.registries`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TalosSettings {
    /// The installer image (`machine.install.image`, what `talosctl upgrade` installs), e.g.
    /// `factory.talos.dev/installer/<schematic>:v1.10.6`; its tag must be `versions.talos`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_image: Option<String>,
    /// NTP servers (`machine.time.servers`); Talos's default is `time.cloudflare.com`, and it
    /// waits for time sync without limit before starting etcd and the kubelet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub time_servers: Vec<String>,
    /// DNS servers (`machine.network.nameservers`) when DHCP gives none; Talos falls back to
    /// 1.1.1.1 and 8.8.8.8.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    /// Registry mirrors (`machine.registries.mirrors`): registry host → mirror endpoints,
    /// e.g. `docker.io: [https://registry.example.internal/v2/docker.io]`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub registry_mirrors: std::collections::BTreeMap<String, Vec<String>>,
    /// The Talos discovery service the machines register with (`cluster.discovery`). Talos
    /// uses the public `https://discovery.talos.dev/` without it; KubePrism learns the
    /// control-plane addresses only from discovery members (see [`Discovery`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<Discovery>,
}

/// Talos cluster discovery (`cluster.discovery`, rendered on every machine).
///
/// Why it matters: KubePrism, the API load balancer every Talos kubelet uses, takes as
/// upstreams the cluster endpoint, `localhost` on control-plane nodes and the addresses of
/// the discovery `Member`s that run a control plane (Talos v1.10.6
/// `internal/app/machined/pkg/controllers/k8s/kubeprism_endpoints.go:44-79`). Members come
/// only from a discovery registry: Talos enables discovery with the public service by default
/// (`pkg/machinery/config/generate/generate.go:94-95`, `constants.go:988`
/// `https://discovery.talos.dev/`), and disables the Kubernetes registry for every config
/// contract above 1.1 (`generate/init.go:202-209`, `config/contract.go:109-111`); that
/// registry is deprecated, incompatible with Kubernetes 1.32+ (Talos v1.10.6
/// `website/content/v1.10/talos-guides/discovery.md:23`), so capstan does not offer it. A
/// fleet that cannot reach the public service therefore gives workers the endpoint as their
/// only upstream, unless it names a discovery service of its own here.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Discovery {
    /// The discovery service's URL (`cluster.discovery.registries.service.endpoint`), e.g.
    /// a self-hosted `https://discovery.example.internal/`, or the public
    /// `https://discovery.talos.dev/` named to say the machines reach it.
    pub endpoint: String,
}

/// Talos's default discovery service (Talos v1.10.6 `pkg/machinery/constants/constants.go:988`).
pub const PUBLIC_DISCOVERY_ENDPOINT: &str = "https://discovery.talos.dev/";

impl TalosSettings {
    /// Nothing set (the section is then not written).
    pub fn is_empty(&self) -> bool {
        self.install_image.is_none()
            && self.time_servers.is_empty()
            && self.nameservers.is_empty()
            && self.registry_mirrors.is_empty()
            && self.discovery.is_none()
    }
}

/// Whether a registry mirror endpoint names a path (`https://host/v2/docker.io`): containerd
/// then must use it as it is (`overridePath`) instead of appending `/v2` to it.
pub fn endpoint_has_path(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split_once('/')
        .is_some_and(|(_, path)| !path.trim_matches('/').is_empty())
}

/// The tag of an image reference (`repo:tag` or `repo:tag@digest`), if any.
pub fn image_tag(image: &str) -> Option<&str> {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last.split_once(':').map(|(_, t)| t)
}

/// kubelet settings carried from kubeadm into Talos's `machine.kubelet` (every machine).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Kubelet {
    /// The DNS servers pods use (`machine.kubelet.clusterDNS`), when not the 10th address
    /// of the service CIDR Talos would use: a node-local DNS cache, another kube-dns IP.
    #[serde(rename = "clusterDNS", default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_dns: Vec<String>,
    /// KubeletConfiguration fields (`machine.kubelet.extraConfig`): `maxPods`,
    /// `systemReserved`, `kubeReserved`, `evictionHard`…; the fields Talos manages are refused.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub extra_config: std::collections::BTreeMap<String, serde_json::Value>,
}

impl Kubelet {
    /// Nothing set (the section is then not written).
    pub fn is_empty(&self) -> bool {
        self.cluster_dns.is_empty() && self.extra_config.is_empty()
    }
}

/// KubeletConfiguration fields Talos refuses in `machine.kubelet.extraConfig`
/// (`pkg/machinery/kubelet/kubelet.go` v1.10.6:10-24), and those other fields set.
pub const KUBELET_CONFIG_DENIED: &[(&str, &str)] = &[
    ("apiVersion", "Talos manages it"),
    ("kind", "Talos manages it"),
    ("authentication", "Talos manages it"),
    ("authorization", "Talos manages it"),
    ("cgroupRoot", "Talos manages it"),
    ("kubeletCgroups", "Talos manages it"),
    ("systemCgroups", "Talos manages it"),
    ("port", "Talos manages it"),
    ("protectKernelDefaults", "Talos manages it"),
    ("resolvConf", "Talos manages it"),
    ("rotateCertificates", "Talos manages it"),
    ("staticPodPath", "Talos manages it"),
    ("seccompDefault", "Talos manages it"),
    ("clusterDNS", "set spec.kubelet.clusterDNS"),
    ("clusterDomain", "set spec.network.dnsDomain"),
    ("registerWithTaints", "set spec.workers[].taints"),
];

/// kube-proxy as Talos manages it (`cluster.proxy`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeProxy {
    /// The cluster runs no kube-proxy (its CNI replaces it, e.g. Cilium's kube-proxy
    /// replacement): Talos must not create its kube-proxy DaemonSet
    /// (`cluster.proxy.disabled: true`; Talos applies its bootstrap manifests create-only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
}

impl KubeProxy {
    /// Talos's default (kube-proxy enabled): the section is not written.
    pub fn is_default(&self) -> bool {
        !self.disabled
    }
}

/// A Pod Security Standards level.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PodSecurityLevel {
    /// No restriction (kube-apiserver's default without an admission configuration).
    Privileged,
    /// Talos's generated default.
    Baseline,
    /// The strictest level.
    Restricted,
}

impl PodSecurityLevel {
    /// The level as written in YAML and in PodSecurityConfiguration.
    pub fn as_str(self) -> &'static str {
        match self {
            PodSecurityLevel::Privileged => "privileged",
            PodSecurityLevel::Baseline => "baseline",
            PodSecurityLevel::Restricted => "restricted",
        }
    }
}

/// kube-apiserver flags Talos refuses in `cluster.apiServer.extraArgs` (its MergeDenied
/// policy), each with the first Talos minor that denies it. Read in the newest patch of every
/// supported minor, `internal/app/machined/pkg/controllers/k8s/control_plane_static_pod.go`
/// `manageAPIServer`: v1.8.4:417-431, v1.9.6:420-435, v1.10.9:420-435, v1.11.6:420-435,
/// v1.12.11:416-431, v1.13.9:421-436. The fifteen file and etcd flags are denied in every
/// one; `authorization-config` from v1.9 (v1.9.6:435, v1.12.11:431, v1.13.9:436), when Talos
/// began writing its own authorization configuration (`handleKubeAPIServerAuthorizationFlags`,
/// v1.9.6:934-965). Talos v1.14 is only a pre-release in the mirror (its `manageAPIServer` was
/// restructured) and was not read: a minor above 13 takes v1.13.9's list.
pub const APISERVER_ARGS_DENIED: &[(&str, u32)] = &[
    ("etcd-servers", 8),
    ("client-ca-file", 8),
    ("requestheader-client-ca-file", 8),
    ("proxy-client-cert-file", 8),
    ("proxy-client-key-file", 8),
    ("encryption-provider-config", 8),
    ("etcd-cafile", 8),
    ("etcd-certfile", 8),
    ("etcd-keyfile", 8),
    ("kubelet-client-certificate", 8),
    ("kubelet-client-key", 8),
    ("service-account-key-file", 8),
    ("service-account-signing-key-file", 8),
    ("tls-cert-file", 8),
    ("tls-private-key-file", 8),
    ("authorization-config", 9),
];

/// Whether Talos 1.`talos_minor` refuses `name` in `cluster.apiServer.extraArgs`
/// ([`APISERVER_ARGS_DENIED`]). A Talos version that does not parse (`None`) is taken as the
/// newest minor read.
pub fn apiserver_arg_denied(name: &str, talos_minor: Option<u32>) -> bool {
    let minor = talos_minor.unwrap_or(u32::MAX);
    APISERVER_ARGS_DENIED
        .iter()
        .any(|(n, from)| *n == name && minor >= *from)
}

/// kube-apiserver flags capstan renders from other fields of `cluster.yaml` (so not taken
/// as extra args), and the field that sets each.
pub const APISERVER_ARGS_FROM_FIELDS: &[(&str, &str)] = &[
    ("service-account-issuer", "set spec.serviceAccount.issuers"),
    ("api-audiences", "set spec.serviceAccount.audiences"),
    ("service-cluster-ip-range", "set spec.network.services"),
    (
        "admission-control-config-file",
        "set spec.apiServer.podSecurity (Talos writes the file)",
    ),
    (
        "authorization-config",
        "set spec.apiServer.authorizationConfig (Talos v1.9 and later write the file from it)",
    ),
];

/// etcd flags Talos refuses in `cluster.etcd.extraArgs` (its deny list: Talos
/// `services/etcd.go` v1.10.6:379-457, v1.13.2:386-467).
pub const ETCD_ARGS_DENIED: &[&str] = &[
    "name",
    "auto-tls",
    "peer-auto-tls",
    "data-dir",
    "listen-peer-urls",
    "listen-client-urls",
    "client-cert-auth",
    "peer-client-cert-auth",
    "cert-file",
    "key-file",
    "trusted-ca-file",
    "peer-trusted-ca-file",
    "peer-cert-file",
    "peer-key-file",
    "experimental-initial-corrupt-check",
    "experimental-watch-progress-notify-interval",
    "experimental-compact-hash-check-enabled",
];

/// etcd settings carried from kubeadm into Talos's `cluster.etcd`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Etcd {
    /// etcd flags (without `--`) the Talos members must run with, as the kubeadm members do
    /// (`cluster.etcd.extraArgs`): `quota-backend-bytes`, `election-timeout`,
    /// `heartbeat-interval`, `snapshot-count`…; the flags Talos manages itself are refused.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub extra_args: std::collections::BTreeMap<String, String>,
}

impl Etcd {
    /// Nothing set (the section is then not written).
    pub fn is_empty(&self) -> bool {
        self.extra_args.is_empty()
    }
}

/// etcd encryption provider.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum EncryptionProvider {
    /// secretbox (Talos names its key `key2`).
    Secretbox,
    /// aescbc (Talos names its key `key1`).
    Aescbc,
    /// No encryption at rest (identity).
    None,
}

/// etcd encryption at rest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Encryption {
    /// The first provider for `secrets` in the kubeadm EncryptionConfiguration.
    pub provider: EncryptionProvider,
    /// That provider's first key name; absent for `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_name: Option<String>,
}

/// VM clone mode.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum CloneMode {
    /// Linked clone (needs a template snapshot; disk size is ignored).
    #[serde(rename = "linkedClone")]
    LinkedClone,
    /// Full clone.
    #[serde(rename = "fullClone")]
    FullClone,
}

/// Reference to the vSphere credentials.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IdentityRef {
    /// `Secret` or `VSphereClusterIdentity`.
    pub kind: IdentityKind,
    /// Its name.
    pub name: String,
}

/// Kinds of vSphere identity.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum IdentityKind {
    /// A Secret in the cluster's namespace (owned and deleted with the cluster).
    Secret,
    /// A cluster-scoped VSphereClusterIdentity.
    VSphereClusterIdentity,
}

/// vSphere placement shared by every machine.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct VSphere {
    /// vCenter address.
    pub server: String,
    /// SHA-1 thumbprint of the vCenter certificate (colon-separated hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thumbprint: Option<String>,
    /// Datacenter.
    pub datacenter: String,
    /// Datastore.
    pub datastore: String,
    /// VM folder.
    pub folder: String,
    /// Resource pool.
    pub resource_pool: String,
    /// Port group the VMs attach to.
    pub network: String,
    /// The Talos VM template to clone.
    pub template: String,
    /// Clone mode.
    pub clone_mode: CloneMode,
    /// Storage policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_policy_name: Option<String>,
    /// Credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_ref: Option<IdentityRef>,
}

/// The largest value of a CRD field of `format: int32`.
const INT32_MAX: u64 = i32::MAX as u64;
/// The largest value of a CRD field of `format: int64`.
const INT64_MAX: u64 = i64::MAX as u64;

/// VM size.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Machine {
    /// vCPUs (at least 2).
    #[serde(rename = "numCPUs")]
    pub num_cpus: u32,
    /// Memory in MiB.
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u64,
    /// Disk size in GiB (ignored by linked clones).
    #[serde(rename = "diskGiB", default, skip_serializing_if = "Option::is_none")]
    pub disk_gib: Option<u32>,
    /// A VM template for these machines instead of `spec.vsphere.template`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
}

/// Control-plane machines.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ControlPlane {
    /// Target number of Talos control-plane machines.
    pub replicas: u32,
    /// Their size.
    pub machine: Machine,
    /// What keeps the control-plane VMs on separate ESXi hosts through every rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anti_affinity: Option<AntiAffinity>,
}

/// Anti-affinity of the control-plane VMs that survives rollouts: a vSphere tag CAPV
/// attaches to every control-plane VM it creates (the VSphereMachineTemplate's `tagIDs`,
/// CAPV v1.13.1 `apis/v1beta1/types.go:189-192`, attached by `pkg/services/govmomi/service.go:754-767`
/// on every VM reconcile), which a VM-VM anti-affinity compute policy in vCenter matches.
/// CAPV makes cluster modules only for KubeadmControlPlane and MachineDeployments
/// (`controllers/clustermodule_reconciler.go:244-320`), and CACPPT picks failure domains at
/// random, so without it nothing spreads the control plane after a rollout.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AntiAffinity {
    /// The tag's ID in URN notation (`urn:vmomi:InventoryServiceTag:<uuid>:GLOBAL`, as
    /// `govc tags.create` prints it); CAPV takes IDs, not display names.
    #[serde(rename = "tagID")]
    pub tag_id: String,
}

/// How a vSphere tag ID starts (URN notation; CAPV's `tagIDs` takes no display names).
pub const TAG_ID_PREFIX: &str = "urn:vmomi:InventoryServiceTag:";

/// A pool of worker machines (one MachineDeployment).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkerPool {
    /// Pool name: a DNS-1123 label, unique in the cluster.
    pub name: String,
    /// Target number of machines.
    pub replicas: u32,
    /// Their size.
    pub machine: Machine,
    /// Node labels every machine of the pool gets (as its kubeadm nodes had them):
    /// `node-role.kubernetes.io/*` and `node.cluster.x-k8s.io/*` through the Machine (Cluster
    /// API syncs them to the Node), the others through Talos's `machine.nodeLabels` (set
    /// with the node's own credentials, so NodeRestriction's rules apply).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// Taints the pool's nodes register with (kubelet `registerWithTaints`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

/// A node taint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(deny_unknown_fields)]
pub struct Taint {
    /// The taint key (a qualified name).
    pub key: String,
    /// Its value (may be empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: TaintEffect,
}

/// A taint's effect.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub enum TaintEffect {
    /// Pods without a toleration are not scheduled.
    NoSchedule,
    /// The scheduler avoids the node.
    PreferNoSchedule,
    /// Running pods without a toleration are evicted.
    NoExecute,
}

impl TaintEffect {
    /// The name as Kubernetes writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

/// How a node label reaches the Node of a Talos machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelRoute {
    /// Cluster API syncs it from the Machine (`node-role.kubernetes.io/*`,
    /// `node.cluster.x-k8s.io/*`).
    Machine,
    /// Talos sets it with the node's own credentials (`machine.nodeLabels`).
    Talos,
    /// Neither may set it: NodeRestriction refuses a kubelet the `kubernetes.io` and
    /// `k8s.io` labels outside its allowed set, and Cluster API does not sync it.
    Refused,
}

/// The labels in `kubernetes.io`/`k8s.io` domains a kubelet may set on its own Node
/// (Kubernetes `pkg/kubelet/apis/well_known_labels.go`, enforced by NodeRestriction).
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
];

/// Whether a label key is in the `kubernetes.io` or `k8s.io` domains (Kubernetes's own).
pub fn kubernetes_label(key: &str) -> bool {
    let domain = key.split_once('/').map(|(d, _)| d).unwrap_or("");
    domain == "kubernetes.io"
        || domain.ends_with(".kubernetes.io")
        || domain == "k8s.io"
        || domain.ends_with(".k8s.io")
}

/// Which way a pool label reaches its nodes.
pub fn label_route(key: &str) -> LabelRoute {
    let domain = key.split_once('/').map(|(d, _)| d).unwrap_or("");
    let within = |d: &str, ns: &str| d == ns || d.ends_with(&format!(".{ns}"));
    // Cluster API syncs these from the Machine to the Node (its `util/labels` helpers).
    if domain == "node-role.kubernetes.io"
        || within(domain, "node-restriction.kubernetes.io")
        || within(domain, "node.cluster.x-k8s.io")
    {
        LabelRoute::Machine
    } else if !kubernetes_label(key)
        || KUBELET_LABELS.contains(&key)
        || within(domain, "kubelet.kubernetes.io")
        || within(domain, "node.kubernetes.io")
    {
        LabelRoute::Talos
    } else {
        LabelRoute::Refused
    }
}

/// A label value: empty, or at most 63 alphanumerics, `-`, `_`, `.`, alphanumeric at both ends.
fn is_label_value(v: &str) -> bool {
    let b = v.as_bytes();
    v.is_empty()
        || (b.len() <= 63
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
            && b.first().is_some_and(u8::is_ascii_alphanumeric)
            && b.last().is_some_and(u8::is_ascii_alphanumeric))
}

/// A qualified name (label or taint key): `[prefix/]name`, the prefix a DNS subdomain of at
/// most 253 characters, the name a non-empty label value.
fn is_qualified_name(k: &str) -> bool {
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                let b = l.as_bytes();
                !b.is_empty()
                    && b.len() <= 63
                    && b.iter()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                    && b.first().is_some_and(u8::is_ascii_alphanumeric)
                    && b.last().is_some_and(u8::is_ascii_alphanumeric)
            })
    });
    prefix_ok && !name.is_empty() && !name.contains('/') && is_label_value(name)
}

/// Phases of an in-place migration from kubeadm.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Objects and secrets exist; no Talos machine yet (every replica count is 0).
    Prepare,
    /// Talos control-plane machines join the kubeadm etcd and control plane.
    ControlPlane,
    /// Worker pools move over.
    Workers,
    /// kubeadm is gone; Cluster API manages the cluster normally.
    Complete,
}

impl Phase {
    /// The name used in `cluster.yaml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Prepare => "prepare",
            Phase::ControlPlane => "control-plane",
            Phase::Workers => "workers",
            Phase::Complete => "complete",
        }
    }

    /// The phase after this one (`None` after `complete`).
    pub fn next(self) -> Option<Phase> {
        match self {
            Phase::Prepare => Some(Phase::ControlPlane),
            Phase::ControlPlane => Some(Phase::Workers),
            Phase::Workers => Some(Phase::Complete),
            Phase::Complete => None,
        }
    }

    /// The name of the phase's migration Job after `<cluster>-capstan-migration-` (before
    /// its content hash).
    pub fn job_suffix(self) -> &'static str {
        match self {
            Phase::Prepare => "bootstrapped",
            Phase::ControlPlane => "scale-control-plane",
            Phase::Workers | Phase::Complete => "unpause-control-plane",
        }
    }
}

/// The migration state.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Migration {
    /// Current phase.
    pub phase: Phase,
    /// kubeadm machines still present (an empty `kubeadm:` means none).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "KubeadmNodes::is_empty"
    )]
    pub kubeadm: KubeadmNodes,
    /// Image for the migration Jobs (needs `kubectl` ≥ 1.27 and a POSIX `sh`), e.g. a mirror
    /// of `docker.io/alpine/k8s:1.33.4`. Required while Jobs are rendered (`prepare`,
    /// `control-plane`); no default, so air-gapped fleets name their own mirror.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_image: Option<String>,
    /// Hazards the operator has read about in `capstan plan` and accepts; `control-plane`
    /// requires `etcd-audit` and `control-plane-anti-affinity`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acknowledge: Vec<Acknowledgement>,
    /// The provider releases the management cluster runs (`clusterctl` inventory names).
    /// Required in the phases that migrate (`prepare`, `control-plane`, `workers`): they
    /// run only on releases whose behaviour capstan verified (`capstan check --providers`
    /// compares these with the management cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub providers: Option<ProviderReleases>,
}

/// The releases of the Cluster API providers in the management cluster, named as
/// `clusterctl` names its inventory (`kubectl get providers -A`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProviderReleases {
    /// Cluster API core (`cluster-api`).
    #[serde(rename = "cluster-api")]
    pub cluster_api: String,
    /// The Talos bootstrap provider, CABPT (`bootstrap-talos`).
    #[serde(rename = "bootstrap-talos")]
    pub bootstrap_talos: String,
    /// The Talos control-plane provider, CACPPT (`control-plane-talos`).
    #[serde(rename = "control-plane-talos")]
    pub control_plane_talos: String,
    /// The vSphere infrastructure provider, CAPV (`infrastructure-vsphere`).
    #[serde(rename = "infrastructure-vsphere")]
    pub infrastructure_vsphere: String,
    /// The in-cluster IPAM provider (`ipam-in-cluster`), when the cluster uses it.
    #[serde(
        rename = "ipam-in-cluster",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ipam_in_cluster: Option<String>,
}

impl ProviderReleases {
    /// `(inventory name, release)` of each provider declared, in inventory order.
    pub fn entries(&self) -> Vec<(&'static str, &str)> {
        let mut v = vec![
            ("cluster-api", self.cluster_api.as_str()),
            ("bootstrap-talos", self.bootstrap_talos.as_str()),
            ("control-plane-talos", self.control_plane_talos.as_str()),
            (
                "infrastructure-vsphere",
                self.infrastructure_vsphere.as_str(),
            ),
        ];
        if let Some(i) = &self.ipam_in_cluster {
            v.push(("ipam-in-cluster", i.as_str()));
        }
        v
    }
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A hazard an operator acknowledges explicitly.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Acknowledgement {
    /// The control-plane provider's etcd audit removes every etcd member that is not a
    /// Cluster API machine once all control-plane machines have a node: the
    /// TalosControlPlane stays paused until every kubeadm etcd member is removed by hand.
    EtcdAudit,
    /// During phase `control-plane` etcd has the kubeadm and the Talos members (3 + 3 = 6
    /// voters, quorum 4), and CAPV makes no vSphere cluster module (anti-affinity) for a
    /// TalosControlPlane: the operator keeps the control-plane VMs on separate hosts, or one
    /// host failure loses quorum. `spec.controlPlane.antiAffinity` renders only the tag;
    /// the compute policy that acts on it lives in vCenter, where neither git nor `render`
    /// sees it, and the kubeadm VMs carry no tag: the acknowledgement says the policy (or a
    /// DRS rule) exists and the placement is checked (`check --vsphere-inventory`) before
    /// the first kubeadm node is removed.
    ControlPlaneAntiAffinity,
    /// A worker pool with running machines is scaled to 0: a phase regression (`workers` or
    /// `complete` back to `control-plane` or `prepare`, which render every pool at 0, such
    /// as a revert of a phase commit) or a pool declared with `replicas: 0`. Cluster API
    /// drains and deletes every machine of those pools. Without it, capstan's admission
    /// policy (every phase of an existing cluster) refuses the update that lowers a
    /// MachineDeployment's replicas from more than 0 to 0. Accepted only while a pool is
    /// rendered at 0, so it never outlives the change it acknowledges.
    ScaleWorkersToZero,
}

impl Acknowledgement {
    /// The name used in `cluster.yaml`.
    #[cfg(any(test, feature = "testkit"))]
    pub fn as_str(self) -> &'static str {
        match self {
            Acknowledgement::EtcdAudit => "etcd-audit",
            Acknowledgement::ControlPlaneAntiAffinity => "control-plane-anti-affinity",
            Acknowledgement::ScaleWorkersToZero => "scale-workers-to-zero",
        }
    }
}

/// The annotation render puts on a MachineDeployment rendered at 0 replicas when
/// `spec.migration.acknowledge` lists `scale-workers-to-zero` (value `acknowledged`, spelled
/// by the templates and the keep-workers policy): capstan's admission policy then lets an update lower its
/// replicas from running machines to 0.
pub const SCALE_TO_ZERO_ANNOTATION: &str = "capstan.dev/scale-to-zero";


impl Phase {
    /// Whether the phase migrates (kubeadm is still part of the cluster): `prepare`,
    /// `control-plane` and `workers`. These run only on verified provider releases.
    pub fn migrates(self) -> bool {
        !matches!(self, Phase::Complete)
    }
}

impl Migration {
    /// Whether the kubeadm side still has control-plane nodes or etcd members.
    pub fn kubeadm_control_plane_present(&self) -> bool {
        !self.kubeadm.etcd_members.is_empty() || !self.kubeadm.control_plane_nodes.is_empty()
    }
}

impl KubeadmNodes {
    /// No kubeadm node or member is listed.
    pub fn is_empty(&self) -> bool {
        self.control_plane_nodes.is_empty()
            && self.etcd_members.is_empty()
            && self.worker_nodes.is_empty()
    }
}

/// The kubeadm side that still exists.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeadmNodes {
    /// kubeadm control-plane node names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub control_plane_nodes: Vec<String>,
    /// kubeadm etcd member names (`etcdctl member list`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub etcd_members: Vec<String>,
    /// kubeadm worker node names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub worker_nodes: Vec<String>,
}

/// Public facts recorded at import, used to detect an accidental re-import.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Provenance {
    /// Where the secrets came from (`kubeadm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported_from: Option<String>,
    /// sha256 fingerprints of the CA certificates and the service-account public key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprints: Option<Fingerprints>,
    /// The public id of the bootstrap token (the part before the dot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_token_id: Option<String>,
    /// The kubeadm etcd image tag, e.g. `3.5.15-0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_version: Option<String>,
}

/// sha256 fingerprints, `sha256:<hex>`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Fingerprints {
    /// Kubernetes CA certificate (DER).
    pub kubernetes_ca: String,
    /// etcd CA certificate (DER).
    pub etcd_ca: String,
    /// Front-proxy (aggregator) CA certificate (DER).
    pub front_proxy_ca: String,
    /// Service-account public key (SubjectPublicKeyInfo DER).
    pub service_account_key: String,
}

/// The `kind` of an overlay's `overlay.yaml` (its `apiVersion` is [`API_VERSION`]).
pub const OVERLAY_KIND: &str = "Overlay";

/// An overlay's `overlay.yaml`: what it builds on, the objects it adds and the patches it
/// applies (see [`crate::overlay`] for the semantics). Strict like `cluster.yaml`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OverlayFile {
    /// Must be [`API_VERSION`].
    pub api_version: String,
    /// Must be [`OVERLAY_KIND`].
    pub kind: String,
    /// Overlays applied before this one (depth-first, each once), relative to this
    /// overlay's directory; none may be at or above it, or outside the repository.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bases: Vec<String>,
    /// YAML files of extra objects, relative to this overlay's directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// Patches, applied in order after this overlay's resources are added.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<PatchSpec>,
    /// Talos machine-config strategic patches, appended after the patches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub talos: Option<TalosPatchSpec>,
}

/// The three patch kinds.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PatchType {
    /// RFC 6902 JSON patch: a list of operations.
    Json,
    /// RFC 7396 merge patch: a partial object; `null` deletes; lists are replaced.
    Merge,
    /// A merge patch whose known lists merge by key or append ([`crate::overlay`]).
    Strategic,
}

impl PatchType {
    /// The name used in `overlay.yaml`.
    pub fn as_str(self) -> &'static str {
        match self {
            PatchType::Json => "json",
            PatchType::Merge => "merge",
            PatchType::Strategic => "strategic",
        }
    }
}

/// One patch of an overlay.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PatchSpec {
    /// Which objects it applies to.
    pub target: TargetSpec,
    /// `json`, `merge` or `strategic`.
    #[serde(rename = "type")]
    pub patch_type: PatchType,
    /// The patch itself, inline (exactly one of `patch` and `path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<Value>,
    /// A YAML file holding the patch, relative to the overlay's directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A patch that matches no object is an error unless this is `true`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

/// A target selector; every field given must match, at least one must be given.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TargetSpec {
    /// API group (`""` for the core group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// API version without the group, e.g. `v1beta1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name as rendered, before content-hash naming; `*` and `?` are wildcards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// A Kubernetes label selector: `k=v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
}

/// Talos machine-config strategic patches (YAML maps, no JSON pointers), appended to the
/// `strategicPatches` of the TalosControlPlane and of the worker pools' TalosConfigTemplates.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TalosPatchSpec {
    /// Patches for the control-plane machines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub control_plane: Vec<Value>,
    /// Patches per worker pool name; `"*"` applies to every pool (before the named ones).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub workers: std::collections::BTreeMap<String, Vec<Value>>,
}

impl OverlayFile {
    /// Parse a YAML-derived value strictly. `file` names the source in errors.
    pub fn from_value(file: &str, value: Value) -> Result<OverlayFile, ModelError> {
        strict(file, value, OVERLAY_KIND)
    }
}

/// Deserialize a versioned input document: header first, then every field with its path.
fn strict<T: serde::de::DeserializeOwned>(
    file: &str,
    value: Value,
    want_kind: &str,
) -> Result<T, ModelError> {
    let fail = |path: String, message: String| ModelError {
        file: file.to_string(),
        problems: vec![Problem { path, message }],
    };
    // Check the header first so a wrong file gets a clear message, not a list of fields.
    let api = value.get("apiVersion").and_then(Value::as_str);
    let kind = value.get("kind").and_then(Value::as_str);
    if api != Some(API_VERSION) {
        return Err(fail(
            "apiVersion".into(),
            format!(
                "expected `{API_VERSION}`, found {}",
                describe(value.get("apiVersion"))
            ),
        ));
    }
    if kind != Some(want_kind) {
        return Err(fail(
            "kind".into(),
            format!(
                "expected `{want_kind}`, found {}",
                describe(value.get("kind"))
            ),
        ));
    }
    // Most files are valid: deserialize straight from the borrowed value, and only on an error
    // again with the path tracker (slower: it records every step) to name the field.
    if let Ok(t) = T::deserialize(&value) {
        return Ok(t);
    }
    // Every missing field in one run: each is noted and stood in for by a placeholder of the
    // type the field takes (tried in turn), until what is left is another error or none.
    let shown = |p: &str| {
        if p == "." {
            "(document)".to_string()
        } else {
            p.to_string()
        }
    };
    let mut value = value;
    let mut problems: Vec<Problem> = Vec::new();
    let mut stand_ins: Vec<(String, usize)> = Vec::new();
    for _ in 0..256 {
        let e = match serde_path_to_error::deserialize::<_, T>(&value) {
            Ok(_) => break,
            Err(e) => e,
        };
        let path = e.path().to_string();
        let message = e.inner().to_string();
        let segments: Vec<String> = e
            .path()
            .iter()
            .map(|s| match s {
                serde_path_to_error::Segment::Map { key } => key.clone(),
                other => other.to_string(),
            })
            .collect();
        let under_stand_in = |p: &str| {
            stand_ins.iter().any(|(s, _)| {
                p == s || p.starts_with(&format!("{s}.")) || p.starts_with(&format!("{s}["))
            })
        };
        if let Some(field) = message
            .strip_prefix("missing field `")
            .and_then(|m| m.strip_suffix('`'))
        {
            let full = if path == "." {
                field.to_string()
            } else {
                format!("{path}.{field}")
            };
            // A field missing inside a stand-in follows from the stand-in: not reported.
            if !under_stand_in(&full) {
                problems.push(Problem {
                    path: full.clone(),
                    message: "required, missing".into(),
                });
            }
            match stand_in_at(&mut value, &segments, field, 0) {
                true => stand_ins.push((full, 0)),
                false => break,
            }
            continue;
        }
        if let Some(i) = stand_ins.iter().position(|(s, _)| *s == path) {
            // The stand-in has the wrong type: the next one.
            let next = stand_ins[i].1 + 1;
            let (parent, field) = segments.split_at(segments.len().saturating_sub(1));
            match field.first() {
                Some(f) if stand_in_at(&mut value, parent, f, next) => {
                    stand_ins[i].1 = next;
                    continue;
                }
                _ => break,
            }
        }
        if !under_stand_in(&path) {
            problems.push(Problem {
                path: shown(&path),
                message,
            });
        }
        break;
    }
    if problems.is_empty() {
        problems.push(Problem {
            path: "(document)".into(),
            message: "does not parse".into(),
        });
    }
    Err(ModelError {
        file: file.to_string(),
        problems,
    })
}

/// Put the `n`th stand-in value (string, number, mapping, sequence, boolean) at key `field`
/// of the mapping at `parent`; false when there is no such mapping or no `n`th stand-in.
fn stand_in_at(value: &mut Value, parent: &[String], field: &str, n: usize) -> bool {
    let stand_in = match n {
        0 => Value::String(String::new()),
        1 => Value::from(0),
        2 => Value::Object(serde_json::Map::new()),
        3 => Value::Array(Vec::new()),
        4 => Value::Bool(false),
        _ => return false,
    };
    let mut at = value;
    for seg in parent {
        let next = match at {
            Value::Object(m) => m.get_mut(seg.as_str()),
            Value::Array(a) => seg
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<usize>()
                .ok()
                .and_then(|i| a.get_mut(i)),
            _ => None,
        };
        match next {
            Some(v) => at = v,
            None => return false,
        }
    }
    match at {
        Value::Object(m) => {
            m.insert(field.to_string(), stand_in);
            true
        }
        _ => false,
    }
}

/// What a validation is for: render needs more fields than check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Identity fields only (the stub written by import).
    Check,
    /// Everything needed to render objects.
    Render,
}

/// One row of the Talos ↔ Kubernetes support table (Talos support matrix: siderolabs/talos `website/content/v1.X/introduction/support-matrix.md`).
#[derive(Debug, Clone, Copy)]
pub struct TalosSupport {
    /// Talos minor (1, minor).
    pub talos_minor: u32,
    /// Lowest Kubernetes minor supported.
    pub k8s_min: u32,
    /// Highest Kubernetes minor supported.
    pub k8s_max: u32,
}

/// Kubernetes versions accepted per Talos minor (upper bound inclusive, minor-level).
pub const TALOS_SUPPORT: &[TalosSupport] = &[
    TalosSupport {
        talos_minor: 8,
        k8s_min: 26,
        k8s_max: 31,
    },
    TalosSupport {
        talos_minor: 9,
        k8s_min: 27,
        k8s_max: 32,
    },
    TalosSupport {
        talos_minor: 10,
        k8s_min: 28,
        k8s_max: 33,
    },
    TalosSupport {
        talos_minor: 11,
        k8s_min: 29,
        k8s_max: 34,
    },
    TalosSupport {
        talos_minor: 12,
        k8s_min: 30,
        k8s_max: 35,
    },
    TalosSupport {
        talos_minor: 13,
        k8s_min: 31,
        k8s_max: 36,
    },
    TalosSupport {
        talos_minor: 14,
        k8s_min: 32,
        k8s_max: 37,
    },
];

/// A parsed `vX.Y.Z` version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SemVer {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

impl SemVer {
    /// Parse `vX.Y.Z` (the `v` is required; no pre-release suffix).
    pub fn parse(s: &str) -> Option<SemVer> {
        let rest = s.strip_prefix('v')?;
        let mut parts = rest.split('.');
        let num = |p: Option<&str>| -> Option<u32> {
            let p = p?;
            if p.is_empty()
                || (p.len() > 1 && p.starts_with('0'))
                || !p.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            p.parse().ok()
        };
        let v = SemVer {
            major: num(parts.next())?,
            minor: num(parts.next())?,
            patch: num(parts.next())?,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(v)
    }
}

impl fmt::Display for SemVer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Talos minors each flavour's providers support (the compatibility tables of the CABPT and CACPPT READMEs).
pub fn flavour_talos_range(flavour: Flavour) -> (u32, u32) {
    match flavour {
        // CACPPT v0.5 (v0.5.13 added Talos 1.13) + CABPT v0.6 (Talos 1.2–1.13); the table starts at 1.8.
        Flavour::V1beta1 => (8, 13),
        // CABPT v0.7 (Talos 1.9–1.13).
        Flavour::V1beta2 => (9, 13),
    }
}

impl ClusterConfig {
    /// The name of the control plane's own address pool (strategy `external`):
    /// `<cluster>-cp-addresses`.
    pub fn control_plane_pool_name(&self) -> String {
        format!("{}-cp-addresses", self.metadata.name)
    }

    /// Parse a YAML-derived value strictly. `file` names the source in errors.
    pub fn from_value(file: &str, value: Value) -> Result<ClusterConfig, ModelError> {
        strict(file, value, KIND)
    }

    /// Whether `import kubeadm` wrote this file: any of `spec.provenance` (only the import
    /// writes it: where the PKI came from, the CA fingerprints, the bootstrap-token id, the
    /// etcd version). The cluster exists, and the provider must never bootstrap it.
    pub fn imported(&self) -> bool {
        self.spec.provenance.as_ref().is_some_and(|p| {
            p.imported_from.is_some()
                || p.fingerprints.is_some()
                || p.bootstrap_token_id.is_some()
                || p.etcd_version.is_some()
        })
    }

    /// Whether the cluster exists already (imported, or migrating): its TalosControlPlane is
    /// guarded against the Talos Bootstrap RPC in every phase. A cluster that does not exist
    /// yet is bootstrapped by the control-plane provider.
    #[cfg(any(test, feature = "testkit"))]
    pub fn exists(&self) -> bool {
        self.imported() || self.spec.migration.is_some()
    }
}

fn describe(v: Option<&Value>) -> String {
    match v {
        None => "nothing".into(),
        Some(Value::String(s)) => format!("`{s}`"),
        Some(other) => format!("`{other}`"),
    }
}

/// The YAML name of a provider.
pub fn provider_name(p: EncryptionProvider) -> &'static str {
    match p {
        EncryptionProvider::Secretbox => "secretbox",
        EncryptionProvider::Aescbc => "aescbc",
        EncryptionProvider::None => "none",
    }
}

/// The key name Talos hard-codes for a provider (Talos `internal/app/machined/pkg/controllers/k8s/templates/kube-system-encryption-config-template.yaml` up to v1.11, `k8stemplates/apiserver.go` from v1.12: secretbox `key2`, aescbc `key1`).
pub fn talos_key_name(p: EncryptionProvider) -> &'static str {
    match p {
        EncryptionProvider::Secretbox => "key2",
        EncryptionProvider::Aescbc => "key1",
        EncryptionProvider::None => "",
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::yaml;

    pub(crate) const MINIMAL: &str = r#"
apiVersion: capstan.dev/v1alpha1
kind: ClusterConfig
metadata: {name: lab-f, namespace: lab-f}
spec:
  flavour: v1beta1
  versions: {talos: v1.10.6, kubernetes: v1.30.4}
  endpoint:
    host: lab-f.example.internal
    port: 6443
    strategy: vip
    vip: {address: 10.0.0.50, link: ens192}
  network: {pods: [10.244.0.0/16], services: [10.96.0.0/12], dnsDomain: cluster.local}
  serviceAccount:
    issuers: [https://kubernetes.default.svc.cluster.local]
    audiences: [https://kubernetes.default.svc.cluster.local]
  encryption: {provider: secretbox, keyName: key2}
  vsphere:
    server: vcenter.example.internal
    datacenter: dc1
    datastore: ds1
    folder: /dc1/vm/lab-f
    resourcePool: /dc1/host/c1/Resources/lab-f
    network: vm-net
    template: talos-v1.10.6
    cloneMode: linkedClone
  controlPlane:
    replicas: 3
    machine: {numCPUs: 4, memoryMiB: 8192, diskGiB: 40}
"#;

    /// `spec.migration.providers` with the releases flavour `v1beta1` was verified against.
    pub(crate) const PROVIDERS: &str = "    providers: {cluster-api: v1.10.10, bootstrap-talos: v0.6.12, control-plane-talos: v0.5.12, infrastructure-vsphere: v1.13.1}\n";

    fn parse(text: &str) -> Result<ClusterConfig, ModelError> {
        ClusterConfig::from_value("cluster.yaml", yaml::parse_one(text).unwrap())
    }

    #[test]
    fn mirror_endpoints_with_a_path() {
        for (url, has) in [
            ("https://registry.example.internal/v2/docker.io", true),
            ("https://registry.example.internal/", false),
            ("https://registry.example.internal", false),
            ("http://10.0.0.5:5000/mirror", true),
        ] {
            assert_eq!(endpoint_has_path(url), has, "{url}");
        }
    }

    #[test]
    fn minimal_parses_and_validates() {
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.validate(Purpose::Render), vec![]);
        assert_eq!(c.spec.endpoint.url(), "https://lab-f.example.internal:6443");
    }

    #[test]
    fn unknown_field_names_its_path() {
        let text = MINIMAL.replace(
            "dnsDomain: cluster.local}",
            "dnsDomain: cluster.local, podCidr: x}",
        );
        let e = parse(&text).unwrap_err();
        assert_eq!(e.problems[0].path, "spec.network.podCidr");
        assert!(
            e.problems[0].message.contains("unknown field `podCidr`"),
            "{e}"
        );
        assert!(
            e.to_string()
                .starts_with("cluster.yaml: spec.network.podCidr: unknown field"),
            "{e}"
        );
    }

    #[test]
    fn wrong_type_and_missing_field() {
        let e = parse(&MINIMAL.replace("port: 6443", "port: high")).unwrap_err();
        assert_eq!(e.problems[0].path, "spec.endpoint.port", "{e}");
        let e = parse(&MINIMAL.replace(
            "    audiences: [https://kubernetes.default.svc.cluster.local]\n",
            "",
        ))
        .unwrap_err();
        assert_eq!(e.problems[0].path, "spec.serviceAccount.audiences", "{e}");
        assert_eq!(e.problems[0].message, "required, missing", "{e}");
    }

    #[test]
    fn every_missing_field_in_one_run() {
        // Three vSphere fields, and the first other error after them.
        let text = MINIMAL
            .replace("    server: vcenter.example.internal\n", "")
            .replace("    datacenter: dc1\n", "")
            .replace("    folder: /dc1/vm/lab-f\n", "")
            .replace("replicas: 3", "replicas: three");
        let e = parse(&text).unwrap_err();
        let got: Vec<String> = e
            .problems
            .iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect();
        assert_eq!(
            got,
            [
                "spec.vsphere.server: required, missing",
                "spec.vsphere.datacenter: required, missing",
                "spec.vsphere.folder: required, missing",
                "spec.controlPlane.replicas: invalid type: string \"three\", expected u32",
            ],
            "{e}"
        );
    }

    #[test]
    fn header_is_checked_first() {
        let e = parse(&MINIMAL.replace("kind: ClusterConfig", "kind: Cluster")).unwrap_err();
        assert_eq!(e.problems[0].path, "kind");
        assert!(e.problems[0].message.contains("expected `ClusterConfig`"));
    }

    fn problems(text: &str) -> Vec<String> {
        parse(text)
            .unwrap()
            .validate(Purpose::Render)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn controller_manager_and_scheduler_extra_args_refuse_what_talos_manages() {
        let with = |block: &str| MINIMAL.replace("  vsphere:\n", &format!("{block}  vsphere:\n"));
        let ok = with(
            "  controllerManager:\n    extraArgs: {node-cidr-mask-size: \"25\", controllers: bootstrapsigner}\n  scheduler:\n    extraArgs: {kube-api-qps: \"100\"}\n",
        );
        assert_eq!(problems(&ok), Vec::<String>::new());
        let c = parse(&ok).unwrap();
        assert_eq!(
            c.spec.controller_manager.extra_args["node-cidr-mask-size"],
            "25"
        );
        let p = problems(&with(
            "  controllerManager:\n    extraArgs: {root-ca-file: /x, cluster-cidr: 10.0.0.0/8, secure-port: \"1\"}\n  scheduler:\n    extraArgs: {config: /etc/s.yaml}\n",
        ));
        assert_eq!(p.len(), 4, "{p:?}");
        assert!(p.iter().any(|m| m.starts_with("spec.controllerManager.extraArgs.root-ca-file: capstan does not carry `root-ca-file` as an extra arg: Talos mounts the bundle's CA and refuses the flag (MergeDenied)")), "{p:?}");
        assert!(
            p.iter()
                .any(|m| m.contains("cluster-cidr") && m.contains("set spec.network.pods")),
            "{p:?}"
        );
        assert!(
            p.iter()
                .any(|m| m.contains("secure-port") && m.contains("10257")),
            "{p:?}"
        );
        assert!(
            p.iter()
                .any(|m| m.starts_with("spec.scheduler.extraArgs.config:")
                    && m.contains("cluster.scheduler.config")),
            "{p:?}"
        );
        // Unknown fields of the sections are refused like any other.
        assert!(parse(&with("  scheduler:\n    profiles: []\n")).is_err());
    }

    #[test]
    fn version_rules() {
        let p = problems(&MINIMAL.replace("kubernetes: v1.30.4", "kubernetes: 1.30.4"));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].starts_with("spec.versions.kubernetes: expected a version `vX.Y.Z`"));
        let p = problems(&MINIMAL.replace("kubernetes: v1.30.4", "kubernetes: v1.34.1"));
        assert!(p[0].contains("Kubernetes v1.34.1 is not supported by Talos v1.10: it supports Kubernetes v1.28 to v1.33"), "{p:?}");
        let p = problems(&MINIMAL.replace("talos: v1.10.6", "talos: v1.7.0"));
        assert!(p[0].contains("not in capstan's support table"), "{p:?}");
        let p = problems(
            &MINIMAL
                .replace("flavour: v1beta1", "flavour: v1beta2")
                .replace("talos: v1.10.6", "talos: v1.8.3"),
        );
        assert!(
            p.iter()
                .any(|m| m.contains("flavour `v1beta2` providers support Talos v1.9 to v1.13")),
            "{p:?}"
        );
    }

    #[test]
    fn identity_rules() {
        let p = problems(&MINIMAL.replace("keyName: key2", "keyName: key0"));
        assert!(
            p[0].starts_with("spec.encryption.keyName: Talos names its secretbox key `key2`"),
            "{p:?}"
        );
        let p = problems(&MINIMAL.replace(
            "provider: secretbox, keyName: key2",
            "provider: aescbc, keyName: key1",
        ));
        assert!(
            p[0].contains("drops an aescbc-only secrets bundle"),
            "{p:?}"
        );
        let p = problems(&MINIMAL.replace(
            "issuers: [https://kubernetes.default.svc.cluster.local]",
            "issuers: [https://lab-f.example.internal:6443, https://kubernetes.default.svc.cluster.local]",
        ));
        assert!(
            p[0].contains("accepts a single service-account issuer"),
            "{p:?}"
        );
        let p = problems(&MINIMAL.replace("pods: [10.244.0.0/16]", "pods: [10.244.0.1/16, nope]"));
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("spec.network.pods[0]: `10.244.0.1/16` has host bits set"));
        assert!(p[1].contains("spec.network.pods[1]: expected a CIDR"));
    }

    #[test]
    fn render_needs_placement_but_check_does_not() {
        let stub: String = MINIMAL.split("  vsphere:").next().unwrap().to_string();
        let c = parse(&stub).unwrap();
        assert_eq!(c.validate(Purpose::Check), vec![]);
        let p: Vec<String> = c
            .validate(Purpose::Render)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].starts_with("spec.vsphere: required to render"));
    }

    #[test]
    fn machine_and_pool_rules() {
        let text = MINIMAL.replace("numCPUs: 4", "numCPUs: 1").replace("replicas: 3", "replicas: 2")
            + "  workers:\n  - {name: a, replicas: 1, machine: {numCPUs: 2, memoryMiB: 4096}}\n  - {name: a, replicas: 1, machine: {numCPUs: 2, memoryMiB: 4096}}\n";
        let p = problems(&text);
        assert!(
            p.iter()
                .any(|m| m == "spec.controlPlane.replicas: must be odd to keep etcd quorum, got 2"),
            "{p:?}"
        );
        assert!(
            p.iter()
                .any(|m| m == "spec.controlPlane.machine.numCPUs: must be at least 2, got 1"),
            "{p:?}"
        );
        assert!(
            p.iter()
                .any(|m| m == "spec.workers[1].name: duplicate pool name `a`"),
            "{p:?}"
        );
    }

    #[test]
    fn semver_parse() {
        assert_eq!(
            SemVer::parse("v1.30.4"),
            Some(SemVer {
                major: 1,
                minor: 30,
                patch: 4
            })
        );
        for bad in [
            "1.30.4",
            "v1.30",
            "v1.30.4.1",
            "v01.2.3",
            "v1.2.x",
            "v1.2.3-rc.1",
        ] {
            assert_eq!(SemVer::parse(bad), None, "{bad}");
        }
    }
}
