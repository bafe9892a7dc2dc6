//! `capstan check` as a pure function ("config matching"): compares what the kubeadm
//! cluster runs (recorded in `cluster.yaml`, and read again from the kubeadm files when
//! they are given) with what the Talos nodes will run, and returns one [`Finding`] per
//! comparison, passing ones included, so the report is a complete record for a change
//! ticket. Comparisons whose inputs were not given are reported as [`Severity::Info`]
//! naming the flag that enables them.
//!
//! Each failing finding names the error the cluster would show (the exact text kube-apiserver,
//! etcd, the kubelet or Talos print, quoted from their source in [`errors`]) and
//! the fix. Finding ids are stable (a contract with `capstan explain`): see [`IDS`].
//! Secret values (the encryption key, the bootstrap token secret) are compared, never
//! copied into a finding.

use std::time::SystemTime;

use base64::Engine as _;
use serde::Serialize;
use serde_json::{json, Value};
use zeroize::Zeroizing;

use crate::inputs::kubeadm::{
    ApiServerFacts, ClusterConfigFacts, EncryptionFacts, KeyedProvider, StaticPodFacts,
};
use crate::model::{self, ClusterConfig, EncryptionProvider, Phase, SemVer, TALOS_SUPPORT};
use crate::printable::line;
use crate::secrets::pki::{self, CertSummary, PkiError};
use crate::secrets::talos::SecretsBundle;

mod cni;
mod credentials;
mod encryption;
mod endpoint;
pub use endpoint::{VIP_FAILOVER_SECONDS};
#[cfg(any(test, feature = "testkit"))]
pub use endpoint::{CONTROL_PLANE_SURGE};
mod identity;
mod kubeadm_config;
mod kubelet;
mod leftovers;
pub use leftovers::{find_management_objects, ManagementObjects, MANAGEMENT_OBJECTS_COMMAND};
#[cfg(any(test, feature = "testkit"))]
pub use leftovers::{JobState, LiveObject};
mod machines;
mod network;
mod nodes;
use cni::cni_daemonset;
pub use cni::{find_cni_daemonsets, replaces_kube_proxy, CniInput};
pub use kubelet::{carried_kubelet_settings, parse_kubelet_config, KubeletFacts};
#[cfg(any(test, feature = "testkit"))]
pub use kubelet::{talos_cluster_dns, KUBELET_PARITY_KEYS};
mod control_plane_parity;
pub use control_plane_parity::{carried_component_args, Component};
#[cfg(any(test, feature = "testkit"))]
pub use control_plane_parity::{component_flag_differences, ComponentFlagDifference, LEADER_LEASE_NOTE};
mod parity;
mod placement;
mod readiness;
mod snapshot;
mod versions;
mod workloads;
pub use nodes::{find_nodes, NodesInput, PoolFacts};
#[cfg(any(test, feature = "testkit"))]
pub use nodes::{CpiWorkload, NodeFacts, UNINITIALIZED_TAINT};
pub use parity::{canonical_san, carried_apiserver_settings, parse_etcd_status, talos_named_sans, EtcdMemberStatus, ETCD_PARITY_FLAGS};
#[cfg(any(test, feature = "testkit"))]
pub use parity::{apiserver_flag_differences, first_service_ips, FlagDifference, ETCD_DEFAULT_QUOTA};
pub use placement::{parse_vm_inventory, VmPlacement};
#[cfg(any(test, feature = "testkit"))]
pub use placement::{is_control_plane_machine};
pub use readiness::{full_command};
#[cfg(any(test, feature = "testkit"))]
pub use readiness::{CheckInput, INPUTS};
pub use snapshot::{etcd_snapshot_facts, EtcdSnapshotFacts};
#[cfg(any(test, feature = "testkit"))]
pub use snapshot::{BboltMeta};
pub use workloads::{find_workloads, WorkloadsInput};
#[cfg(any(test, feature = "testkit"))]
pub use workloads::{quantity, CAPACITY_RESERVE_PERCENT};

/// Every finding id, in report order. Stable: `capstan explain` refers to them.
pub const IDS: &[&str] = &[
    "flavour-talos-version",
    "provider-releases",
    "kubernetes-version",
    "etcd-version-skew",
    "control-plane-replicas",
    "control-plane-hosts",
    "cloud-provider",
    "service-account-issuer",
    "service-account-audiences",
    "encryption-provider",
    "encryption-key-name",
    "encryption-missing",
    "encryption-key-value",
    "encryption-resources",
    "pod-cidr",
    "service-cidr",
    "dns-domain",
    "endpoint",
    "endpoint-certificate-san",
    "endpoint-strategy",
    "apiserver-cert-sans",
    "apiserver-flags",
    "apiserver-uncarried",
    "anonymous-auth",
    "pod-security",
    "controller-manager-flags",
    "scheduler-flags",
    "etcd-topology",
    "kubeadm-bind-port",
    "kubeadm-config",
    "etcd-args",
    "etcd-db-size",
    "etcd-snapshot",
    "kubelet-config",
    "clone-disk-size",
    "talos-image",
    "air-gap",
    "vsphere-identity",
    "recipients",
    "ca-intermediate",
    "ca-expiry",
    "bootstrap-token",
    "kube-proxy-labels",
    "cni-daemonset",
    "kube-proxy-replacement",
    "node-labels",
    "addresses-in-use",
    "worker-local-volumes",
    "worker-bare-pods",
    "worker-pdb-no-disruption",
    "worker-pool-capacity",
    "etcd-member-name",
    "phase-leftovers",
    "check-inputs",
];

/// The error text each kind of mismatch produces in the cluster (kube-apiserver's
/// authenticator and storage transformers, etcd's membership checks, the kubelet's certificate
/// manager).
pub mod errors {
    /// kube-apiserver, token issuer not accepted.
    pub const INVALID_BEARER_TOKEN: &str = "invalid bearer token";
    /// kube-apiserver, token audience not accepted.
    pub const TOKEN_AUDIENCES: &str =
        "token audiences [\"…\"] is invalid for the target audiences [\"…\"]";
    /// kube-apiserver, the key or provider that wrote the data is missing.
    pub const NO_MATCHING_PREFIX: &str = "no matching prefix found";
    /// kube-apiserver without encryption reading encrypted data.
    pub const IDENTITY_TRANSFORMER: &str = "identity transformer tried to read encrypted data";
    /// kube-apiserver, same key name, different key.
    pub const WRONG_KEY: &str = "output array was not large enough for encryption";
    /// etcd 3.5 below 3.5.20 joined by etcd 3.6.
    pub const TOO_MANY_LEARNERS: &str = "too many learner member in cluster";
    /// kubelet whose bootstrap token is gone.
    pub const UNAUTHORIZED: &str = "cannot create certificate signing request: Unauthorized";
    /// etcd over its backend quota (the NOSPACE alarm: every write refused).
    pub const NOSPACE: &str = "etcdserver: mvcc: database space exceeded";
    /// TLS client connecting through a name the serving certificate lacks.
    pub const X509_NAME: &str = "x509: certificate is valid for …, not …";
    /// Applying a DaemonSet whose `spec.selector` changed.
    pub const FIELD_IMMUTABLE: &str = "spec.selector: Invalid value: …: field is immutable";
    /// Cluster API setting a control-plane Machine's nodeRef under phase control-plane's
    /// admission policy (`templates/migration/node-ref-policy.yaml`).
    pub const NODE_REF_REFUSED: &str = "ValidatingAdmissionPolicy '…paused-node-refs.capstan.dev' … denied request: capstan: phase control-plane of …: a control-plane Machine gets its nodeRef only while TalosControlPlane … is paused";
    /// The scheduler, for a pod whose volume is pinned to a node that is gone.
    pub const VOLUME_NODE_AFFINITY: &str =
        "0/… nodes are available: … node(s) had volume node affinity conflict";
    /// `kubectl drain` without `--force`, at a Pod no controller owns (k8s.io/kubectl
    /// `pkg/drain/filters.go` `unmanagedFatal`).
    pub const DRAIN_UNMANAGED: &str =
        "cannot delete Pods that declare no controller (use --force to override)";
    /// The Eviction API (kube-apiserver `pkg/registry/core/pod/storage/eviction.go`), which
    /// `kubectl drain` and Cluster API's drain retry.
    pub const PDB_EVICTION: &str =
        "Cannot evict pod as it would violate the pod's disruption budget.";
    /// The scheduler, for pods no node has room for.
    pub const INSUFFICIENT: &str =
        "0/… nodes are available: … Insufficient cpu, … Insufficient memory";
    /// etcd without a majority of its voters (etcd `server/etcdserver/errors.go` ErrNoLeader).
    pub const ETCD_NO_LEADER: &str = "etcdserver: no leader";
    /// `etcdutl snapshot restore` (and Talos's recovery) of a file without etcd's SHA-256.
    pub const SNAPSHOT_MISSING_HASH: &str = "snapshot missing hash but --skip-hash-check=false";
    /// `etcdutl snapshot restore` of a file whose SHA-256 does not match.
    pub const SNAPSHOT_SHA_MISMATCH: &str = "expected sha256 […], got […]";
}

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The migration would break the cluster: fix before any Talos node joins (exit 1).
    Blocking,
    /// Works now, but is a risk or breaks a later step.
    Warning,
    /// Compared and equal.
    Pass,
    /// Not compared (an input is missing), or a fact to record.
    Info,
}

impl Severity {
    /// The lowercase name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Blocking => "blocking",
            Severity::Warning => "warning",
            Severity::Pass => "pass",
            Severity::Info => "info",
        }
    }
}

/// One comparison and its outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// Stable kebab-case id (one of `IDS`).
    pub id: &'static str,
    /// How serious it is.
    pub severity: Severity,
    /// The `cluster.yaml` field path, or input file and flag, compared.
    pub field: String,
    /// What was compared and what was found.
    pub summary: String,
    /// The exact error the cluster would show (`migration::check::errors`).
    pub cluster_error: Option<&'static str>,
    /// How to fix it.
    pub fix: Option<String>,
}

impl Finding {
    fn new(
        id: &'static str,
        severity: Severity,
        field: impl Into<String>,
        summary: String,
    ) -> Self {
        Finding {
            id,
            severity,
            field: field.into(),
            summary,
            cluster_error: None,
            fix: None,
        }
    }
    fn error(mut self, e: &'static str) -> Self {
        self.cluster_error = Some(e);
        self
    }
    fn error_if(self, cond: bool, e: &'static str) -> Self {
        if cond {
            self.error(e)
        } else {
            self
        }
    }
    fn fix(mut self, f: impl Into<String>) -> Self {
        self.fix = Some(f.into());
        self
    }
}

/// Why check inputs could not be used (bad input, exit 2). Names the file or flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// The kube-proxy file holds no kube-proxy DaemonSet.
    #[error("{file}: no DaemonSet found (found {found}); expected the kube-proxy DaemonSet (`kubectl -n kube-system get ds kube-proxy -o yaml`)")]
    NoDaemonSet {
        /// The file.
        file: String,
        /// The kinds found.
        found: String,
    },
    /// The `--nodes` file holds no usable Node list.
    #[error("{file}: {problem}")]
    Nodes {
        /// The file.
        file: String,
        /// What is wrong, naming the Node and field.
        problem: String,
    },
    /// The `--workloads` file holds no usable PersistentVolume, PodDisruptionBudget or Pod.
    #[error("{file}: {problem}")]
    Workloads {
        /// The file.
        file: String,
        /// What is wrong, naming the object.
        problem: String,
    },
    /// The CNI file holds no usable CNI DaemonSet.
    #[error("{file}: {found}; expected {expected}")]
    CniDaemonSet {
        /// The file.
        file: String,
        /// What was found instead.
        found: String,
        /// What was expected.
        expected: String,
    },
    /// The `--kubelet-config` file holds no KubeletConfiguration.
    #[error("{file}: {problem}")]
    KubeletConfig {
        /// The file.
        file: String,
        /// What is wrong.
        problem: String,
    },
    /// The `--etcd-status` file is not `etcdctl endpoint status -w json` output.
    #[error("{file}: {problem}")]
    EtcdStatus {
        /// The file.
        file: String,
        /// What is wrong.
        problem: String,
    },
    /// The `--management-objects` file holds none of the objects it is for.
    #[error("{file}: {problem}")]
    ManagementObjects {
        /// The file.
        file: String,
        /// What is wrong.
        problem: String,
    },
    /// The `--vsphere-inventory` file is not `govc vm.info -json` output.
    #[error("{file}: {problem}")]
    VmInventory {
        /// The file.
        file: String,
        /// What is wrong.
        problem: String,
    },
    /// An etcd version that does not parse.
    #[error(
        "{source_name}: expected an etcd version such as `3.5.15` or `3.5.15-0`, found `{value}`"
    )]
    EtcdVersion {
        /// The flag or field it came from.
        source_name: String,
        /// The text given.
        value: String,
    },
}

/// An input read from a file: its label (the path) and its parsed facts.
#[derive(Debug)]
pub struct Input<T> {
    /// The file, as the user named it.
    pub file: String,
    /// What was read from it.
    pub value: T,
}

/// A Secret sealed in the cluster's directory, as far as its readable parts go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedSecretFacts {
    /// The file, as the user can find it.
    pub file: String,
    /// `metadata.name`.
    pub name: String,
    /// The keys under `data` and `stringData` (values stay encrypted).
    pub keys: Vec<String>,
}

impl SealedSecretFacts {
    /// The facts of a sealed file's text; `None` when it is not a readable Secret (render
    /// reports that).
    pub fn read(file: &str, text: &str) -> Option<SealedSecretFacts> {
        let doc = crate::yaml::parse_one(text).ok()?;
        let name = doc.pointer("/metadata/name")?.as_str()?.to_string();
        let mut keys = Vec::new();
        for section in ["data", "stringData"] {
            if let Some(Value::Object(m)) = doc.get(section) {
                keys.extend(m.keys().cloned());
            }
        }
        Some(SealedSecretFacts {
            file: file.to_string(),
            name,
            keys,
        })
    }
}

/// Whether a kubeadm CA can be carried into Talos as the single root of its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaShape {
    /// A self-signed root CA.
    Root,
    /// A CA signed by another CA (why: the loader's reason).
    Intermediate(String),
    /// Not a CA at all (why).
    NotCa(String),
}

/// One kubeadm CA from `--pki`.
#[derive(Debug, Clone)]
pub struct CaInput {
    /// Which CA (`Kubernetes CA`, `etcd CA`, `front-proxy CA`).
    pub role: &'static str,
    /// The certificate file.
    pub file: String,
    /// Public facts about the certificate.
    pub summary: CertSummary,
    /// Root, intermediate or not a CA.
    pub shape: CaShape,
}

/// Load a CA for checking: like [`pki::load_ca`], but an intermediate, a non-CA, an expired
/// or a not-yet-valid certificate becomes a fact to report rather than an error. Unreadable
/// files and keys that do not belong to the certificate are errors.
pub fn ca_input(
    role: &'static str,
    crt_label: &str,
    crt: &[u8],
    key_label: &str,
    key: &[u8],
    now: SystemTime,
) -> Result<CaInput, PkiError> {
    let summary = pki::certificate_summary(crt_label, crt)?;
    let shape = match pki::load_ca(crt_label, crt, key_label, key, now) {
        Ok(_) | Err(PkiError::Expired { .. } | PkiError::NotYetValid { .. }) => CaShape::Root,
        Err(PkiError::Intermediate { reason, .. }) => CaShape::Intermediate(reason),
        Err(PkiError::NotCa { reason, .. }) => CaShape::NotCa(reason),
        Err(e) => return Err(e),
    };
    Ok(CaInput {
        role,
        file: crt_label.to_string(),
        summary,
        shape,
    })
}

/// The kube-proxy DaemonSet among the documents of a file: a DaemonSet document, or a
/// `List` item (preferring one named `kube-proxy`).
pub fn find_kube_proxy(file: &str, docs: Vec<Value>) -> Result<Value, CheckError> {
    let listed = crate::resource::list_items(docs);
    let mut candidates = Vec::new();
    let mut kinds: Vec<String> = listed
        .malformed
        .iter()
        .map(|k| format!("{k} without items"))
        .collect();
    for (kind, doc) in listed.objects {
        if kind == "DaemonSet" {
            candidates.push(doc);
        } else {
            let k = if kind.is_empty() {
                "(no kind)".to_string()
            } else {
                kind
            };
            if !kinds.contains(&k) {
                kinds.push(k);
            }
        }
    }
    let named = candidates
        .iter()
        .position(|d| d.pointer("/metadata/name").and_then(Value::as_str) == Some("kube-proxy"));
    match named {
        Some(i) => Ok(candidates.swap_remove(i)),
        None if candidates.len() == 1 => Ok(candidates.swap_remove(0)),
        None => Err(CheckError::NoDaemonSet {
            file: file.to_string(),
            found: if candidates.is_empty() {
                if kinds.is_empty() {
                    "nothing".into()
                } else {
                    kinds.join(", ")
                }
            } else {
                format!("{} DaemonSets, none named kube-proxy", candidates.len())
            },
        }),
    }
}

/// An etcd version: `3.5.15`, `v3.5.15`, or an image tag `3.5.15-0`.
pub fn parse_etcd_version(s: &str) -> Option<(u32, u32, u32)> {
    let s = s.trim();
    let body = s.strip_prefix('v').unwrap_or(s);
    let core = body.split(['-', '+']).next().unwrap_or("");
    let mut parts = core.split('.');
    let mut num = || -> Option<u32> {
        let p = parts.next()?;
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        p.parse().ok()
    };
    let v = (num()?, num()?, num()?);
    if parts.next().is_some() {
        return None;
    }
    Some(v)
}

/// Everything `check` compares. Only `config` is required; every other input enables more
/// comparisons.
#[derive(Debug)]
pub struct CheckInputs {
    /// The parsed `cluster.yaml` (not validated: the import stub must be checkable).
    pub config: ClusterConfig,
    /// `cluster.yaml`'s path, for messages.
    pub config_file: String,
    /// `--apiserver-manifest`: the kubeadm kube-apiserver static Pod.
    pub apiserver: Option<Input<ApiServerFacts>>,
    /// `--controller-manager-manifest`: the kubeadm kube-controller-manager static Pod.
    pub controller_manager: Option<Input<StaticPodFacts>>,
    /// `--scheduler-manifest`: the kubeadm kube-scheduler static Pod.
    pub scheduler: Option<Input<StaticPodFacts>>,
    /// `--kubeadm-config`: kubeadm's ClusterConfiguration.
    pub cluster_config: Option<Input<ClusterConfigFacts>>,
    /// `--encryption-config`: the kubeadm EncryptionConfiguration.
    pub encryption: Option<Input<EncryptionFacts>>,
    /// `--authorization-config`: the kubeadm apiservers' AuthorizationConfiguration (the
    /// file their `--authorization-config` names), its authorizers in order.
    pub authorization: Option<Input<Vec<crate::inputs::kubeadm::KubeadmAuthorizer>>>,
    /// `--apiserver-cert`: the kubeadm apiserver serving certificate.
    pub apiserver_cert: Option<Input<CertSummary>>,
    /// `--kube-proxy`: the kube-proxy DaemonSet.
    pub kube_proxy: Option<Input<Value>>,
    /// `--etcd-version`: the running etcd version (overrides the recorded one).
    pub etcd_version: Option<String>,
    /// `--pki`: the kubeadm CAs.
    pub cas: Option<Vec<CaInput>>,
    /// `secrets.age`, decrypted with `--identity`.
    pub bundle: Option<SecretsBundle>,
    /// `--providers`: the provider releases the management cluster runs.
    pub providers: Option<Input<crate::inputs::providers::Inventory>>,
    /// The cluster's Nodes (`kubectl get nodes -o yaml`), and a vSphere CPI workload.
    pub nodes: Option<Input<NodesInput>>,
    /// The render's IPAM pools (filled with `--nodes`, to compare with the nodes' addresses).
    pub pools: Vec<PoolFacts>,
    /// A kubeadm kubelet's configuration (`--kubelet-config`).
    pub kubelet: Option<Input<KubeletFacts>>,
    /// The live PersistentVolumes, PodDisruptionBudgets and Pods (`--workloads`: `kubectl
    /// get pv,pdb,pods -A -o json`).
    pub workloads: Option<Input<WorkloadsInput>>,
    /// The kubeadm etcd members' status (`etcdctl endpoint status -w json`).
    pub etcd_status: Option<Input<Vec<EtcdMemberStatus>>>,
    /// The CNI DaemonSet(s) and their ConfigMaps (`--cni-daemonset`).
    pub cni: Option<CniInput>,
    /// The management cluster's admission policies, TalosControlPlanes and Jobs
    /// (`--management-objects`).
    pub management: Option<Input<ManagementObjects>>,
    /// The etcd snapshot taken before phase control-plane (`--etcd-snapshot`).
    pub etcd_snapshot: Option<Input<EtcdSnapshotFacts>>,
    /// The VMs and their ESXi hosts (`--vsphere-inventory`, `govc vm.info -json`).
    pub vsphere_inventory: Option<Input<Vec<VmPlacement>>>,
    /// The Secrets sealed in the cluster's `secrets/` directory: file, name and data keys
    /// (readable without a key).
    pub sealed_secrets: Vec<SealedSecretFacts>,
    /// The `--pki` directory, as named (the CAs are in `cas`).
    pub pki_dir: Option<String>,
    /// The `--identity` file, as named (the opened bundle is in `bundle`).
    pub identity_file: Option<String>,
    /// The time CA validity is checked against.
    pub now: SystemTime,
}

impl CheckInputs {
    /// Inputs holding only `cluster.yaml`.
    pub fn new(config: ClusterConfig, config_file: &str, now: SystemTime) -> Self {
        CheckInputs {
            config,
            config_file: config_file.to_string(),
            apiserver: None,
            controller_manager: None,
            scheduler: None,
            cluster_config: None,
            encryption: None,
            authorization: None,
            apiserver_cert: None,
            kube_proxy: None,
            etcd_version: None,
            cas: None,
            bundle: None,
            providers: None,
            nodes: None,
            cni: None,
            management: None,
            etcd_status: None,
            etcd_snapshot: None,
            vsphere_inventory: None,
            kubelet: None,
            pools: Vec::new(),
            workloads: None,
            sealed_secrets: Vec::new(),
            pki_dir: None,
            identity_file: None,
            now,
        }
    }

    /// Inputs holding a cluster directory's `cluster.yaml` and the facts of its sealed
    /// files: what `capstan check DIR` compares before any other file is named.
    pub fn for_cluster(c: &crate::inputs::ClusterInput, now: SystemTime) -> Self {
        let mut ci = CheckInputs::new(c.config.clone(), &c.file, now);
        ci.sealed_secrets = c
            .sealed
            .iter()
            .filter_map(|s| SealedSecretFacts::read(&s.path, &s.text))
            .collect();
        ci
    }
}

/// Compare everything that can be compared; one finding per comparison, in [`IDS`] order.
pub fn check(inputs: &CheckInputs) -> Vec<Finding> {
    let cx = Cx::new(inputs);
    let mut out = Vec::new();
    cx.flavour_talos_version(&mut out);
    cx.provider_releases(&mut out);
    cx.kubernetes_version(&mut out);
    cx.etcd_version_skew(&mut out);
    cx.control_plane_replicas(&mut out);
    cx.control_plane_hosts(&mut out);
    cx.cloud_provider(&mut out);
    cx.service_account_issuer(&mut out);
    cx.service_account_audiences(&mut out);
    cx.encryption(&mut out);
    cx.encryption_resources(&mut out);
    cx.network(&mut out);
    cx.endpoint(&mut out);
    cx.endpoint_certificate_san(&mut out);
    cx.endpoint_strategy(&mut out);
    cx.apiserver_cert_sans(&mut out);
    cx.apiserver_flags(&mut out);
    cx.apiserver_uncarried(&mut out);
    cx.anonymous_auth(&mut out);
    cx.pod_security(&mut out);
    cx.controller_manager_flags(&mut out);
    cx.scheduler_flags(&mut out);
    cx.etcd_topology(&mut out);
    cx.kubeadm_bind_port(&mut out);
    cx.kubeadm_config(&mut out);
    cx.etcd_args(&mut out);
    cx.etcd_db_size(&mut out);
    cx.etcd_snapshot(&mut out);
    cx.kubelet_config(&mut out);
    cx.clone_disk(&mut out);
    cx.talos_image(&mut out);
    cx.air_gap(&mut out);
    cx.vsphere_identity(&mut out);
    cx.recipients(&mut out);
    cx.cas(&mut out);
    cx.bootstrap_token(&mut out);
    cx.kube_proxy_labels(&mut out);
    cx.cni(&mut out);
    cx.kube_proxy_replacement(&mut out);
    cx.node_labels(&mut out);
    cx.addresses_in_use(&mut out);
    cx.worker_local_volumes(&mut out);
    cx.worker_bare_pods(&mut out);
    cx.worker_pdb_no_disruption(&mut out);
    cx.worker_pool_capacity(&mut out);
    cx.etcd_member_name(&mut out);
    cx.phase_leftovers(&mut out);
    cx.check_inputs(&mut out);
    out.sort_by_key(|f| IDS.iter().position(|id| *id == f.id).unwrap_or(IDS.len()));
    out
}

/// The blocking findings `cluster.yaml` alone shows: `render` refuses to render them (a
/// check that would block the migration is not left to be run by hand). No other input is
/// read, so the result depends on `cluster.yaml` only (not on the time).
pub fn refusals(config: &ClusterConfig, file: &str) -> Vec<Finding> {
    let inputs = CheckInputs::new(config.clone(), file, SystemTime::UNIX_EPOCH);
    check(&inputs)
        .into_iter()
        // `check-inputs` is about what `check` was given, not about cluster.yaml.
        .filter(|f| f.severity == Severity::Blocking && f.id != "check-inputs")
        .collect()
}

/// Counts per severity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    /// Blocking findings.
    pub blocking: usize,
    /// Warnings.
    pub warning: usize,
    /// Passed comparisons.
    pub pass: usize,
    /// Comparisons not made and notes.
    pub info: usize,
}

impl Counts {
    /// Count findings by severity.
    pub fn of(findings: &[Finding]) -> Counts {
        let mut c = Counts::default();
        for f in findings {
            match f.severity {
                Severity::Blocking => c.blocking += 1,
                Severity::Warning => c.warning += 1,
                Severity::Pass => c.pass += 1,
                Severity::Info => c.info += 1,
            }
        }
        c
    }
}

/// The report as JSON: the cluster, counts, and every finding in order.
pub fn report_json(inputs: &CheckInputs, findings: &[Finding]) -> Value {
    json!({
        "cluster": inputs.config.metadata.name,
        "file": inputs.config_file,
        "talosVersion": inputs.config.spec.versions.talos,
        "kubernetesVersion": inputs.config.spec.versions.kubernetes,
        "counts": Counts::of(findings),
        "findings": findings,
    })
}

/// The report as text, grouped (blocking, warnings, passed, not checked), one finding per
/// entry naming its id and field; failures add `cluster would show:` and `fix:`. With
/// `colour`, group headings and ids carry ANSI colours.
pub fn report_text(inputs: &CheckInputs, findings: &[Finding], colour: bool) -> String {
    let paint = |code: &str, s: &str| {
        if colour {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    };
    let c = inputs;
    let mut out = format!(
        "capstan check {} (cluster {}, Talos {}, Kubernetes {})\n",
        line(&c.config_file),
        line(&c.config.metadata.name),
        line(&c.config.spec.versions.talos),
        line(&c.config.spec.versions.kubernetes)
    );
    let groups = [
        (Severity::Blocking, "blocking", "1;31", "BLOCK"),
        (Severity::Warning, "warnings", "1;33", "WARN"),
        (Severity::Pass, "passed", "1;32", "PASS"),
        (Severity::Info, "not checked / notes", "1;36", "INFO"),
    ];
    for (severity, title, code, tag) in groups {
        let items: Vec<&Finding> = findings.iter().filter(|f| f.severity == severity).collect();
        if items.is_empty() {
            continue;
        }
        out.push('\n');
        out.push_str(&paint(code, &format!("{title} ({})", items.len())));
        out.push('\n');
        for f in items {
            // Findings quote their inputs (names from kubectl, govc, etcdctl, the repository):
            // each stays on its line, escaped.
            out.push_str(&format!(
                "  {} {}  {}\n      {}\n",
                paint(code, tag),
                paint("1", f.id),
                line(&f.field),
                line(&f.summary)
            ));
            if let Some(e) = f.cluster_error {
                out.push_str(&format!("      cluster would show: {e}\n"));
            }
            if let Some(fix) = &f.fix {
                // A fix may span lines; each of them stays indented under its finding.
                let fix = crate::printable::escape(fix).replace('\n', "\n      ");
                out.push_str(&format!("      fix: {fix}\n"));
            }
        }
    }
    let n = Counts::of(findings);
    let verdict = if n.blocking > 0 {
        paint(
            "1;31",
            "NOT READY: fix the blocking findings before any Talos node joins",
        )
    } else {
        paint("1;32", "no blocking findings")
    };
    out.push_str(&format!(
        "\nsummary: {} blocking, {} warning{}, {} passed, {} not checked/notes: {verdict}\n",
        n.blocking,
        n.warning,
        if n.warning == 1 { "" } else { "s" },
        n.pass,
        n.info
    ));
    out
}

// ---------------------------------------------------------------------------------------

/// Derived facts shared by the checks.
struct Cx<'a> {
    i: &'a CheckInputs,
    talos: Option<SemVer>,
    endpoint_url: String,
}

fn list(items: &[impl AsRef<str>]) -> String {
    let v: Vec<String> = items.iter().map(|s| format!("`{}`", s.as_ref())).collect();
    if v.is_empty() {
        "nothing".into()
    } else {
        v.join(", ")
    }
}

impl<'a> Cx<'a> {
    fn new(i: &'a CheckInputs) -> Self {
        Cx {
            i,
            talos: SemVer::parse(&i.config.spec.versions.talos).filter(|v| v.major == 1),
            endpoint_url: i.config.spec.endpoint.url(),
        }
    }

    fn talos_str(&self) -> &str {
        &self.i.config.spec.versions.talos
    }

    /// Talos ≥ 1.`minor` (false when the version does not parse).
    fn talos_at_least(&self, minor: u32) -> bool {
        self.talos.is_some_and(|t| t.minor >= minor)
    }

    fn kube_proxy_labels(&self, out: &mut Vec<Finding>) {
        let id = "kube-proxy-labels";
        let Some(k) = &self.i.kube_proxy else {
            if self.i.config.spec.kube_proxy.disabled {
                out.push(Finding::new(
                    id,
                    Severity::Info,
                    "spec.kubeProxy.disabled",
                    "the cluster runs no kube-proxy: its labels do not matter".into(),
                ));
                return;
            }
            out.push(not_compared(
                id,
                "kube-proxy DaemonSet labels",
                "`tier: node`, `k8s-app: kube-proxy`",
                "--kube-proxy",
            ));
            return;
        };
        let want = [("tier", "node"), ("k8s-app", "kube-proxy")];
        let mut missing = Vec::new();
        for (path, what) in [
            ("/spec/selector/matchLabels", "spec.selector.matchLabels"),
            (
                "/spec/template/metadata/labels",
                "spec.template.metadata.labels",
            ),
        ] {
            let labels = k.value.pointer(path);
            for (key, value) in want {
                if labels.and_then(|l| l.get(key)).and_then(Value::as_str) != Some(value) {
                    missing.push(format!("{what}.{key}: {value}"));
                }
            }
        }
        let field = format!(
            "{} spec.selector.matchLabels, spec.template.metadata.labels",
            k.file
        );
        if missing.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Pass,
                field,
                "selector and pod template carry `tier: node` and `k8s-app: kube-proxy`, as Talos's kube-proxy does".into(),
            ));
        } else {
            out.push(
                Finding::new(
                    id,
                    Severity::Warning,
                    field,
                    format!(
                        "missing {}: the migration works, but Talos Kubernetes upgrades apply kube-proxy with \
                         Talos's selector and fail (a DaemonSet selector is immutable)",
                        missing.join(", ")
                    ),
                )
                .error(errors::FIELD_IMMUTABLE)
                .fix(
                    "export the DaemonSet (`kubectl -n kube-system get ds kube-proxy -o yaml > kube-proxy.yaml`), add \
                     `tier: node` and `k8s-app: kube-proxy` to spec.selector.matchLabels and spec.template.metadata.labels, \
                     drop status, resourceVersion, uid and creationTimestamp, then replace it with its pods: \
                     `kubectl -n kube-system delete ds kube-proxy && kubectl apply -f kube-proxy.yaml` (the Service rules \
                     already programmed stay meanwhile; `--cascade=orphan` would leave the old pods running beside the \
                     new ones, which the new selector does not adopt)",
                ),
            );
        }
    }

    /// `vsphere-identity` (M10): the Secret `spec.vsphere.identityRef` names is sealed with the
    /// cluster (CAPV reads it, takes ownership and deletes it with the Cluster).
    fn vsphere_identity(&self, out: &mut Vec<Finding>) {
        let id = "vsphere-identity";
        let field = "spec.vsphere.identityRef";
        let s = &self.i.config.spec;
        let Some(v) = &s.vsphere else {
            out.push(no_placement(id, "spec.vsphere", "the credentials were"));
            return;
        };
        let seal = format!(
            "`capstan secrets vsphere-identity {} --username <user>` (password on stdin)",
            self.cluster_dir()
        );
        let f = match &v.identity_ref {
            None => Finding::new(
                id,
                Severity::Info,
                field,
                "not set: CAPV logs in to vCenter with its own manager credentials (the `capv-manager-bootstrap-credentials` Secret)".into(),
            ),
            Some(r) if r.kind == model::IdentityKind::VSphereClusterIdentity => Finding::new(
                id,
                Severity::Info,
                field,
                format!(
                    "VSphereClusterIdentity `{}`: a cluster-scoped identity whose Secret lives in CAPV's namespace, \
                     created by the management cluster's owners; not checked",
                    r.name
                ),
            ),
            Some(r) => match self.i.sealed_secrets.iter().find(|x| x.name == r.name) {
                Some(sealed) => {
                    let missing: Vec<&str> = crate::secrets::seal::IDENTITY_KEYS
                        .into_iter()
                        .filter(|k| !sealed.keys.iter().any(|x| x == k))
                        .collect();
                    if missing.is_empty() {
                        Finding::new(
                            id,
                            Severity::Pass,
                            format!("{field} vs {}", sealed.file),
                            format!("Secret `{}` is sealed with the cluster (`username`, `password`)", r.name),
                        )
                    } else {
                        Finding::new(
                            id,
                            Severity::Blocking,
                            format!("{field} vs {}", sealed.file),
                            format!(
                                "Secret `{}` lacks {}: CAPV cannot log in to vCenter, so no VSphereCluster becomes ready \
                                 and no machine is created",
                                r.name,
                                missing.join(", ")
                            ),
                        )
                        .fix(format!("seal it again: {seal}"))
                    }
                }
                None => Finding::new(
                    id,
                    Severity::Warning,
                    field,
                    format!(
                        "Secret `{}` (namespace `{}`) is not sealed with the cluster: unless it is created in the \
                         management cluster by other means, CAPV cannot log in to vCenter (the VSphereCluster never \
                         becomes ready). CAPV takes ownership of it and deletes it with the Cluster, so a copy made by \
                         hand is gone after a rebuild",
                        r.name, self.i.config.metadata.namespace
                    ),
                )
                .fix(format!(
                    "seal it with the cluster: {seal}; or create it out of band (keys `username`, `password`) \
                     before the cluster syncs"
                )),
            },
        };
        out.push(f);
    }

    fn cni(&self, out: &mut Vec<Finding>) {
        match &self.i.cni {
            None => out.push(not_compared(
                "cni-daemonset",
                "CNI DaemonSet",
                "the CNI's capabilities, cgroup and host mounts and apiserver address",
                "--cni-daemonset",
            )),
            Some(c) => out.push(cni_daemonset(
                c,
                &self.i.config.spec.endpoint.host,
                self.i.config.spec.endpoint.port,
            )),
        }
    }

    /// `kube-proxy-replacement`: a CNI that replaces kube-proxy needs `spec.kubeProxy.disabled`,
    /// or the first Talos control plane creates a kube-proxy DaemonSet where none runs (Talos
    /// applies its bootstrap manifests create-only: `manifest_apply.go`).
    fn kube_proxy_replacement(&self, out: &mut Vec<Finding>) {
        let id = "kube-proxy-replacement";
        let disabled = self.i.config.spec.kube_proxy.disabled;
        let Some(cni) = &self.i.cni else {
            if disabled {
                out.push(Finding::new(
                    id,
                    Severity::Info,
                    "spec.kubeProxy.disabled",
                    "Talos creates no kube-proxy (`cluster.proxy.disabled`); not compared with the CNI: pass --cni-daemonset".into(),
                ));
            } else {
                out.push(not_compared(
                    id,
                    "spec.kubeProxy.disabled",
                    "whether the CNI replaces kube-proxy",
                    "--cni-daemonset",
                ));
            }
            return;
        };
        let field = format!("spec.kubeProxy.disabled vs {}", cni.file);
        let f = match (replaces_kube_proxy(cni), disabled, &self.i.kube_proxy) {
            (Some(true), false, None) => Finding::new(
                id,
                Severity::Blocking,
                field,
                "the CNI replaces kube-proxy and no kube-proxy DaemonSet was given, but Talos's control plane creates \
                 its kube-proxy DaemonSet when none exists: every node would then run kube-proxy's iptables rules \
                 beside the CNI's own service handling"
                    .into(),
            )
            .fix("set `spec.kubeProxy.disabled: true` in cluster.yaml (rendered as Talos's `cluster.proxy.disabled`); if the cluster does run kube-proxy, check again with --kube-proxy"),
            (Some(true), false, Some(k)) => Finding::new(
                id,
                Severity::Pass,
                field,
                format!(
                    "the CNI replaces kube-proxy and kube-proxy runs too ({}), as on the kubeadm nodes: Talos keeps the \
                     existing DaemonSet",
                    k.file
                ),
            ),
            (Some(false), true, _) => Finding::new(
                id,
                Severity::Warning,
                field,
                "the CNI relies on kube-proxy, but `spec.kubeProxy.disabled` is set: Talos neither creates nor upgrades \
                 kube-proxy, so only the kubeadm DaemonSet (if it still exists) routes Service traffic on Talos nodes"
                    .into(),
            )
            .fix("remove `spec.kubeProxy.disabled`, or switch the CNI to kube-proxy replacement first"),
            (Some(true), true, _) => Finding::new(
                id,
                Severity::Pass,
                field,
                "the CNI replaces kube-proxy and Talos creates none (`cluster.proxy.disabled`)".into(),
            ),
            (None, true, _) => Finding::new(
                id,
                Severity::Info,
                field,
                "Talos creates no kube-proxy (`cluster.proxy.disabled`); whether the CNI replaces it is not known from \
                 its DaemonSet (e.g. Calico's eBPF mode set in a FelixConfiguration)"
                    .into(),
            ),
            (Some(false), false, _) => Finding::new(
                id,
                Severity::Pass,
                field,
                "the CNI relies on kube-proxy, and Talos keeps (or creates) the kube-proxy DaemonSet".into(),
            ),
            (None, false, _) => Finding::new(
                id,
                Severity::Info,
                field,
                "whether the CNI replaces kube-proxy is not known from its DaemonSet (e.g. Calico's eBPF mode set in a \
                 FelixConfiguration): Talos creates a kube-proxy DaemonSet when none exists; set `spec.kubeProxy.disabled: \
                 true` if the cluster runs none"
                    .into(),
            ),
        };
        out.push(f);
    }

    fn etcd_member_name(&self, out: &mut Vec<Finding>) {
        let id = "etcd-member-name";
        let field = "spec.migration.kubeadm.etcdMembers";
        let members: &[String] = self
            .i
            .config
            .spec
            .migration
            .as_ref()
            .map_or(&[], |m| m.kubeadm.etcd_members.as_slice());
        if members.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Info,
                field,
                "no kubeadm etcd members listed: list them (`etcdctl member list`) so capstan can check they \
                 cannot collide with Talos hostnames"
                    .into(),
            ));
            return;
        }
        let name = &self.i.config.metadata.name;
        let cp_prefix = format!("{name}-cp-");
        let pool_prefixes: Vec<String> = self
            .i
            .config
            .spec
            .workers
            .iter()
            .map(|p| format!("{name}-{}-", p.name))
            .collect();
        let mut flagged = false;
        for (i, m) in members.iter().enumerate() {
            let lower = m.to_ascii_lowercase();
            let mfield = format!("{field}[{i}]");
            if let Some(rest) = lower.strip_prefix(&cp_prefix) {
                flagged = true;
                let capi_like = rest.len() == 5
                    && rest
                        .bytes()
                        .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b));
                let f = Finding::new(
                    id,
                    if capi_like { Severity::Blocking } else { Severity::Warning },
                    mfield,
                    format!(
                        "kubeadm etcd member `{m}` has the prefix `{cp_prefix}` of the Talos control-plane \
                         machines (named `{cp_prefix}<5 random characters>`{}); a Talos node removes the etcd \
                         member with its own hostname when it joins",
                        if capi_like { ", and this name has that exact form" } else { "; this name cannot be generated, but it is easily confused in the etcd audit and runbooks" }
                    ),
                )
                .fix(format!(
                    "rename the cluster in cluster.yaml (machine names follow metadata.name) or replace the kubeadm \
                     node `{m}` under another name before Talos nodes join"
                ));
                out.push(f);
            } else if let Some(p) = pool_prefixes.iter().find(|p| lower.starts_with(p.as_str())) {
                flagged = true;
                out.push(
                    Finding::new(
                        id,
                        Severity::Warning,
                        mfield,
                        format!(
                            "kubeadm etcd member `{m}` has the prefix `{p}` of a Talos worker pool's machines: a \
                             Talos node with that hostname would collide with it"
                        ),
                    )
                    .fix("rename the worker pool, or replace the kubeadm node under another name"),
                );
            }
        }
        if !flagged {
            out.push(Finding::new(
                id,
                Severity::Pass,
                field,
                format!(
                    "{} cannot be a Talos hostname (Talos machines are named `{cp_prefix}…`{})",
                    list(members),
                    if pool_prefixes.is_empty() {
                        String::new()
                    } else {
                        format!(
                            " and {}",
                            list(
                                &pool_prefixes
                                    .iter()
                                    .map(|p| format!("{p}…"))
                                    .collect::<Vec<_>>()
                            )
                        )
                    }
                ),
            ));
        }
    }
}

/// The finding of a comparison that needs `spec.vsphere`, which the stub of an import
/// does not have yet.
fn no_placement(id: &'static str, field: &str, what: &str) -> Finding {
    Finding::new(
        id,
        Severity::Info,
        field,
        format!("no vSphere placement in cluster.yaml yet: {what} not compared"),
    )
}

impl Cx<'_> {
    /// The cluster directory, as the user named it (for commands printed in fixes).
    fn cluster_dir(&self) -> String {
        std::path::Path::new(&self.i.config_file)
            .parent()
            .map(|p| p.display().to_string())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| ".".into())
    }
}

fn not_compared(id: &'static str, field: &str, what: &str, flag: &str) -> Finding {
    Finding::new(
        id,
        Severity::Info,
        field,
        format!("{what} not compared with the kubeadm side: pass {flag}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::kubeadm;
    use crate::model::tests::MINIMAL;
    use crate::secrets::pki::testkit::{self, Alg, TestKey};

    const KUBEADM_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
    const ENDPOINT_URL: &str = "https://lab-f.example.internal:6443";
    const BUNDLE: &[u8] = include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/talos/secrets.yaml"
    ));

    fn config(text: &str) -> ClusterConfig {
        ClusterConfig::from_value("cluster.yaml", crate::yaml::parse_one(text).unwrap()).unwrap()
    }

    fn inputs(text: &str) -> CheckInputs {
        CheckInputs::new(config(text), "cluster.yaml", testkit::now())
    }

    fn with_manifest(mut i: CheckInputs, manifest: &str) -> CheckInputs {
        i.apiserver = Some(Input {
            file: "kube-apiserver.yaml".into(),
            value: kubeadm::parse_apiserver_manifest("kube-apiserver.yaml", manifest.as_bytes())
                .unwrap(),
        });
        i
    }

    fn with_encryption(mut i: CheckInputs, text: &str) -> CheckInputs {
        i.encryption = Some(Input {
            file: "encryption-config.yaml".into(),
            value: kubeadm::parse_encryption_config("encryption-config.yaml", text.as_bytes())
                .unwrap(),
        });
        i
    }

    fn with_bundle(mut i: CheckInputs, text: &[u8]) -> CheckInputs {
        i.bundle = Some(SecretsBundle::parse("secrets.age", text).unwrap());
        i
    }

    fn of<'a>(fs: &'a [Finding], id: &str) -> Vec<&'a Finding> {
        fs.iter().filter(|f| f.id == id).collect()
    }

    /// The most serious severity reported for `id`.
    fn worst(i: &CheckInputs, id: &str) -> Severity {
        let fs = check(i);
        of(&fs, id)
            .iter()
            .map(|f| f.severity)
            .min()
            .unwrap_or_else(|| panic!("no {id} finding in {fs:#?}"))
    }

    fn blocking_with(i: &CheckInputs, id: &str, error: Option<&str>) -> Finding {
        let fs = check(i);
        let f = of(&fs, id)
            .into_iter()
            .find(|f| f.severity == Severity::Blocking)
            .unwrap_or_else(|| panic!("no blocking {id} in {fs:#?}"))
            .clone();
        assert_eq!(f.cluster_error, error, "{f:#?}");
        assert!(f.fix.is_some(), "{f:#?}");
        f
    }

    fn replace(text: &str, from: &str, to: &str) -> String {
        assert!(text.contains(from), "`{from}` not in the fixture");
        text.replace(from, to)
    }

    #[test]
    fn every_id_is_reported_for_the_minimal_config() {
        let fs = check(&inputs(MINIMAL));
        for id in IDS {
            assert!(!of(&fs, id).is_empty(), "{id} missing: {fs:#?}");
        }
        assert!(fs.iter().all(|f| IDS.contains(&f.id)));
        // Findings come in IDS order.
        let pos: Vec<usize> = fs
            .iter()
            .map(|f| IDS.iter().position(|id| *id == f.id).unwrap())
            .collect();
        assert!(pos.windows(2).all(|w| w[0] <= w[1]), "{pos:?}");
        assert!(
            fs.iter().all(|f| f.severity != Severity::Blocking),
            "{fs:#?}"
        );
        for id in IDS {
            let kebab = id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'-' || b.is_ascii_digit());
            assert!(kebab, "{id}");
        }
    }

    fn with_nodes(docs: Vec<Value>) -> CheckInputs {
        let mut i = inputs(MINIMAL);
        i.nodes = Some(Input {
            file: "nodes.yaml".into(),
            value: find_nodes("nodes.yaml", docs.clone()).unwrap(),
        });
        i
    }

    fn node(name: &str, provider_id: Option<&str>, taints: &[&str]) -> Value {
        json!({"kind": "Node", "metadata": {"name": name},
            "spec": {"providerID": provider_id, "taints": taints.iter().map(|k| json!({"key": k})).collect::<Vec<_>>()}})
    }

    #[test]
    fn cloud_provider() {
        assert_eq!(worst(&inputs(MINIMAL), "cloud-provider"), Severity::Info);
        // Every node initialised by the vSphere CPI, or some kubeadm nodes from before it.
        for docs in [
            vec![node("cp-1", Some("vsphere://4237"), &[])],
            vec![
                node("cp-1", Some("vsphere://4237"), &[]),
                node("w-1", None, &[]),
            ],
        ] {
            let fs = check(&with_nodes(docs));
            let f = of(&fs, "cloud-provider")[0];
            assert_eq!(f.severity, Severity::Pass, "{f:#?}");
            assert_eq!(f.field, "nodes.yaml spec.providerID");
        }
        // No providerID anywhere and no CPI: Machines would never get a nodeRef.
        let f = blocking_with(
            &with_nodes(vec![node("cp-1", None, &[]), node("w-1", None, &[])]),
            "cloud-provider",
            None,
        );
        assert!(f.summary.contains("none of the 2 nodes"), "{f:#?}");
        assert!(f.summary.contains("never get a nodeRef"), "{f:#?}");
        let fix = f.fix.unwrap();
        assert!(fix.contains("vSphere cloud controller manager"), "{fix}");
        assert!(fix.contains("vcenter.example"), "{fix}");
        // A CPI DaemonSet with ready pods passes; one with none ready blocks.
        let cpi = |ready: u64| {
            json!({"kind": "DaemonSet", "metadata": {"name": "vsphere-cloud-controller-manager", "namespace": "kube-system"},
                "spec": {"template": {"spec": {"containers": [{"image": "registry.k8s.io/cloud-pv-vsphere/cloud-provider-vsphere:v1.30.1"}]}}},
                "status": {"numberReady": ready}})
        };
        let fs = check(&with_nodes(vec![node("cp-1", None, &[]), cpi(2)]));
        let f = of(&fs, "cloud-provider")[0];
        assert_eq!(f.severity, Severity::Pass, "{f:#?}");
        assert!(f
            .summary
            .contains("DaemonSet/kube-system/vsphere-cloud-controller-manager"));
        let f = blocking_with(
            &with_nodes(vec![node("cp-1", None, &[]), cpi(0)]),
            "cloud-provider",
            None,
        );
        assert!(f.summary.contains("has no ready pod"), "{f:#?}");
        // Saved without its status: not known to run.
        let mut no_status = cpi(1);
        no_status.as_object_mut().unwrap().remove("status");
        let fs = check(&with_nodes(vec![node("cp-1", None, &[]), no_status]));
        assert_eq!(of(&fs, "cloud-provider")[0].severity, Severity::Warning);
        // A node that no CPI initialised; another cloud provider's IDs.
        let f = blocking_with(
            &with_nodes(vec![
                node("cp-1", Some("vsphere://1"), &[]),
                node("w-9", None, &[UNINITIALIZED_TAINT]),
            ]),
            "cloud-provider",
            None,
        );
        assert!(
            f.summary.contains("1 of 2 nodes are still tainted"),
            "{f:#?}"
        );
        assert!(f.summary.contains("w-9"), "{f:#?}");
        let f = blocking_with(
            &with_nodes(vec![node("cp-1", Some("openstack:///abc"), &[])]),
            "cloud-provider",
            None,
        );
        assert!(f.summary.contains("scheme openstack"), "{f:#?}");
    }

    #[test]
    fn kube_proxy_replacement() {
        let cni = |text: &str| {
            let docs = crate::yaml::parse_stream(text).unwrap();
            find_cni_daemonsets("cni.yaml", docs).unwrap()
        };
        let kpr = cni(include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/cni/cilium-1.15.6-talos-list.yaml"
        )));
        let flannel = cni(include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/cni/flannel-0.26.7.yaml"
        )));
        let disabled = format!("{MINIMAL}  kubeProxy: {{disabled: true}}\n");
        assert_eq!(
            worst(&inputs(MINIMAL), "kube-proxy-replacement"),
            Severity::Info
        );
        // Cilium replaces kube-proxy, no kube-proxy runs: Talos would create one.
        let mut i = inputs(MINIMAL);
        i.cni = Some(kpr.clone());
        let f = blocking_with(&i, "kube-proxy-replacement", None);
        assert!(f.fix.unwrap().contains("spec.kubeProxy.disabled: true"));
        // ... unless kube-proxy runs too, or cluster.yaml disables it.
        i.kube_proxy = Some(Input {
            file: "kube-proxy.yaml".into(),
            value: json!({}),
        });
        assert_eq!(worst(&i, "kube-proxy-replacement"), Severity::Pass);
        let mut i = inputs(&disabled);
        i.cni = Some(kpr);
        assert_eq!(worst(&i, "kube-proxy-replacement"), Severity::Pass);
        // kube-proxy disabled under a CNI that needs it: a warning.
        i.cni = Some(flannel.clone());
        assert_eq!(worst(&i, "kube-proxy-replacement"), Severity::Warning);
        let mut i = inputs(MINIMAL);
        i.cni = Some(flannel);
        assert_eq!(worst(&i, "kube-proxy-replacement"), Severity::Pass);
        // Without kube-proxy the kube-proxy input is not needed for readiness.
        let prepare = format!("{disabled}  migration:\n    phase: prepare\n");
        let f = blocking_with(&inputs(&prepare), "check-inputs", None);
        assert!(!f.summary.contains("--kube-proxy"), "{f:#?}");
        assert!(
            !f.fix.unwrap().contains("--kube-proxy"),
            "the command asks for no kube-proxy either"
        );
        assert_eq!(
            worst(&inputs(&prepare), "kube-proxy-labels"),
            Severity::Info
        );
    }

    #[test]
    fn etcd_db_size() {
        let with_status = |text: &str, json: &str| {
            let mut i = inputs(text);
            let docs = crate::yaml::parse_stream(json).unwrap();
            i.etcd_status = Some(Input {
                file: "status.json".into(),
                value: parse_etcd_status("status.json", &docs).unwrap(),
            });
            i
        };
        assert_eq!(worst(&inputs(MINIMAL), "etcd-db-size"), Severity::Info);
        let gib = 1u64 << 30;
        // Against etcd's default 2 GiB quota: 1 GiB passes, 1.8 GiB warns, 3 GiB blocks.
        let at = |size: u64, text: &str| {
            check(&with_status(text, &pki::testkit::etcd_status_json(size)))
                .into_iter()
                .find(|f| f.id == "etcd-db-size")
                .unwrap()
        };
        assert_eq!(at(gib, MINIMAL).severity, Severity::Pass);
        let f = at(gib * 18 / 10, MINIMAL);
        assert_eq!(f.severity, Severity::Warning, "{f:#?}");
        let f = at(3 * gib, MINIMAL);
        assert_eq!(
            (f.severity, f.cluster_error),
            (Severity::Blocking, Some(errors::NOSPACE))
        );
        assert!(f.summary.contains("https://192.0.2.11:2379"), "{f:#?}");
        assert!(f.field.contains("etcd's default"), "{f:#?}");
        // A raised quota in cluster.yaml is what the Talos members run with.
        let raised =
            format!("{MINIMAL}  etcd:\n    extraArgs: {{quota-backend-bytes: \"8589934592\"}}\n");
        let f = at(3 * gib, &raised);
        assert_eq!(f.severity, Severity::Pass, "{f:#?}");
        assert!(f.summary.contains("37% of the 8192 MiB quota"), "{f:#?}");
        // Not etcdctl's output.
        let docs = crate::yaml::parse_stream("[{\"Endpoint\": \"x\"}]").unwrap();
        let e = parse_etcd_status("s.json", &docs).unwrap_err();
        assert!(e.to_string().contains("s.json: [0].Status.dbSize"), "{e}");
        let docs = crate::yaml::parse_stream("hello").unwrap();
        assert!(parse_etcd_status("s.json", &docs).is_err());
    }

    #[test]
    fn recipients_one_lost_identity_must_not_lose_the_sealed_secrets() {
        let mut i = inputs(MINIMAL);
        let key = "age1uhh4sjky7uv75cdmgk5vjarsd9dv6kxkvjnf7zspu3v4crp0udgq47fxk5";
        i.config.spec.recipients = vec![];
        assert_eq!(of(&check(&i), "recipients")[0].severity, Severity::Info);
        i.config.spec.recipients = vec![key.into(), key.into()];
        let fs = check(&i);
        let f = of(&fs, "recipients")[0];
        assert_eq!(
            f.severity,
            Severity::Warning,
            "the same key twice is one: {f:#?}"
        );
        assert!(
            f.fix
                .as_deref()
                .unwrap_or("")
                .contains("capstan secrets rekey"),
            "{f:#?}"
        );
        i.config.spec.recipients = vec![
            key.into(),
            "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p".into(),
        ];
        assert_eq!(of(&check(&i), "recipients")[0].severity, Severity::Pass);
    }

    #[test]
    fn vsphere_identity() {
        assert_eq!(worst(&inputs(MINIMAL), "vsphere-identity"), Severity::Info);
        let with_ref = MINIMAL.replace(
            "    cloneMode: linkedClone\n",
            "    cloneMode: linkedClone\n    identityRef: {kind: Secret, name: lab-f-vsphere}\n",
        );
        let fs = check(&inputs(&with_ref));
        let f = of(&fs, "vsphere-identity")[0];
        assert_eq!(f.severity, Severity::Warning, "{f:#?}");
        assert!(
            f.fix
                .as_ref()
                .unwrap()
                .contains("capstan secrets vsphere-identity"),
            "{f:#?}"
        );
        let sealed = |keys: &[&str]| {
            let mut i = inputs(&with_ref);
            i.sealed_secrets = vec![SealedSecretFacts {
                file: "secrets/lab-f-vsphere.yaml".into(),
                name: "lab-f-vsphere".into(),
                keys: keys.iter().map(ToString::to_string).collect(),
            }];
            i
        };
        assert_eq!(
            worst(&sealed(&["password", "username"]), "vsphere-identity"),
            Severity::Pass
        );
        let f = blocking_with(&sealed(&["username"]), "vsphere-identity", None);
        assert!(f.summary.contains("lacks password"), "{f:#?}");
        let cluster_identity = with_ref.replace("kind: Secret", "kind: VSphereClusterIdentity");
        assert_eq!(
            worst(&inputs(&cluster_identity), "vsphere-identity"),
            Severity::Info
        );
        // The facts read from a sealed file's readable parts.
        let text = "apiVersion: v1\nkind: Secret\nmetadata: {name: x}\ndata:\n  username: ENC[a]\n  password: ENC[b]\nsops: {}\n";
        let facts = SealedSecretFacts::read("f.yaml", text).unwrap();
        assert_eq!((facts.name.as_str(), facts.keys.len()), ("x", 2));
        assert!(SealedSecretFacts::read("f.yaml", "- not a map").is_none());
    }

    #[test]
    fn talos_image_and_air_gap() {
        assert_eq!(worst(&inputs(MINIMAL), "talos-image"), Severity::Pass);
        // A version bump without a new template: the machines would boot the old release.
        let bumped = MINIMAL.replace("talos: v1.10.6", "talos: v1.10.7");
        let f = blocking_with(&inputs(&bumped), "talos-image", None);
        assert!(
            f.summary.contains("`talos-v1.10.6` (Talos v1.10.6)"),
            "{f:#?}"
        );
        assert!(refusals(&config(&bumped), "c")
            .iter()
            .any(|f| f.id == "talos-image"));
        let pool = "  workers:\n  - name: a\n    replicas: 1\n    machine: {numCPUs: 2, memoryMiB: 4096, template: talos-v1.9.0}\n";
        let f = blocking_with(&inputs(&format!("{MINIMAL}{pool}")), "talos-image", None);
        assert!(
            f.summary.contains("spec.workers[0].machine.template"),
            "{f:#?}"
        );
        let unnamed = MINIMAL.replace("template: talos-v1.10.6", "template: talos-latest");
        assert_eq!(worst(&inputs(&unnamed), "talos-image"), Severity::Warning);
        // A fleet with its own registry names mirrors and time servers.
        let mirror = format!("{MINIMAL}  migration:\n    phase: complete\n    jobImage: registry.example.internal/mirror/alpine/k8s:1.33.4\n");
        let fs = check(&inputs(&mirror));
        let f = of(&fs, "air-gap")[0];
        assert_eq!(f.severity, Severity::Warning, "{f:#?}");
        assert!(
            f.summary.contains("`registry.example.internal`")
                && f.summary.contains("time.cloudflare.com"),
            "{f:#?}"
        );
        let named = format!("{mirror}  talos:\n    timeServers: [ntp.example.internal]\n    registryMirrors: {{ghcr.io: [https://registry.example.internal/v2/ghcr.io]}}\n");
        // MINIMAL's endpoint is a VIP: without a discovery service of its own, KubePrism on
        // the workers has the VIP as its only upstream (D3).
        let f = of(&check(&inputs(&named)), "air-gap")[0].clone();
        assert_eq!(f.severity, Severity::Warning, "{f:#?}");
        assert!(f.summary.contains("discovery"), "{f:#?}");
        let named =
            format!("{named}    discovery: {{endpoint: https://discovery.example.internal/}}\n");
        assert_eq!(worst(&inputs(&named), "air-gap"), Severity::Pass);
        assert_eq!(worst(&inputs(MINIMAL), "air-gap"), Severity::Info);
    }

    #[test]
    fn check_inputs() {
        // Not migrating: nothing to be ready for.
        assert_eq!(worst(&inputs(MINIMAL), "check-inputs"), Severity::Info);
        let phase = |p: &str| {
            format!(
                "{MINIMAL}  migration:\n    phase: {p}\n    kubeadm:\n      etcdMembers: [cp-1]\n"
            )
        };
        // Before the Talos control plane joins, a missing input blocks and the fix is the
        // whole command, placeholders where nothing was given.
        for p in ["prepare", "control-plane"] {
            let f = blocking_with(&inputs(&phase(p)), "check-inputs", None);
            assert!(f.summary.contains(&format!("phase `{p}`")), "{f:#?}");
            for i in INPUTS {
                // The etcd snapshot is phase control-plane's own input (D11).
                let wanted = i.flag != "--etcd-snapshot" || p == "control-plane";
                assert_eq!(f.summary.contains(i.flag), wanted, "{} in {f:#?}", i.flag);
            }
            let fix = f.fix.unwrap();
            assert!(fix.starts_with("run `capstan check . --apiserver-manifest kube-apiserver.yaml --controller-manager-manifest kube-controller-manager.yaml --scheduler-manifest kube-scheduler.yaml --kubeadm-config kubeadm-config.yaml"), "{fix}");
            assert!(
                fix.contains(
                    "--nodes nodes.yaml --providers providers.yaml --identity age-identity.txt`"
                ),
                "{fix}"
            );
        }
        for p in ["workers", "complete"] {
            assert_eq!(worst(&inputs(&phase(p)), "check-inputs"), Severity::Info);
        }
        // render does not refuse for what check was given.
        let c = config(&phase("prepare"));
        assert!(refusals(&c, "cluster.yaml")
            .iter()
            .all(|f| f.id != "check-inputs"));
        // A given input is named by its file; encryption is not needed when the kubeadm
        // apiserver encrypts nothing.
        let mut i = with_manifest(
            inputs(&phase("prepare")),
            &pki::testkit::apiserver_manifest("https://kubernetes.default.svc.cluster.local")
                .replace(
                "    - --encryption-provider-config=/etc/kubernetes/enc/encryption-config.yaml\n",
                "",
            ),
        );
        i.config_file = "clusters/lab-f/cluster.yaml".into();
        let f = blocking_with(&i, "check-inputs", None);
        assert!(!f.summary.contains("--encryption-config"), "{f:#?}");
        assert!(!f.summary.contains("--apiserver-manifest"), "{f:#?}");
        assert!(f.fix.unwrap().starts_with("run `capstan check clusters/lab-f --apiserver-manifest kube-apiserver.yaml --controller-manager-manifest kube-controller-manager.yaml --scheduler-manifest kube-scheduler.yaml --kubeadm-config"));
    }

    #[test]
    fn flavour_talos_version() {
        assert_eq!(
            worst(&inputs(MINIMAL), "flavour-talos-version"),
            Severity::Pass
        );
        let text = replace(MINIMAL, "flavour: v1beta1", "flavour: v1beta2")
            .replace("talos: v1.10.6", "talos: v1.8.3");
        let f = blocking_with(&inputs(&text), "flavour-talos-version", None);
        assert!(f.summary.contains("support Talos v1.9 to v1.13"), "{f:#?}");
        let text = replace(MINIMAL, "talos: v1.10.6", "talos: v1.7.0");
        blocking_with(&inputs(&text), "flavour-talos-version", None);
        let text = replace(MINIMAL, "talos: v1.10.6", "talos: \"1.10\"");
        blocking_with(&inputs(&text), "flavour-talos-version", None);
    }

    #[test]
    fn kubernetes_version() {
        assert_eq!(
            worst(&inputs(MINIMAL), "kubernetes-version"),
            Severity::Pass
        );
        let text = replace(MINIMAL, "kubernetes: v1.30.4", "kubernetes: v1.34.1");
        let f = blocking_with(&inputs(&text), "kubernetes-version", None);
        assert!(f.summary.contains("v1.28 to v1.33"), "{f:#?}");
        // Against the running version.
        let m = testkit::apiserver_manifest(KUBEADM_ISSUER);
        let i = with_manifest(inputs(MINIMAL), &m);
        assert_eq!(worst(&i, "kubernetes-version"), Severity::Pass);
        let i = with_manifest(inputs(MINIMAL), &m.replace("v1.30.4", "v1.30.2"));
        assert_eq!(worst(&i, "kubernetes-version"), Severity::Warning);
        let i = with_manifest(inputs(MINIMAL), &m.replace("v1.30.4", "v1.29.9"));
        let f = blocking_with(&i, "kubernetes-version", None);
        assert!(f.field.contains("kube-apiserver.yaml image"), "{f:#?}");
    }

    fn with_etcd(talos: &str, etcd: &str) -> CheckInputs {
        let mut i = inputs(&replace(
            MINIMAL,
            "talos: v1.10.6",
            &format!("talos: {talos}"),
        ));
        i.etcd_version = Some(etcd.into());
        i
    }

    #[test]
    fn etcd_version_skew() {
        assert_eq!(worst(&inputs(MINIMAL), "etcd-version-skew"), Severity::Info);
        let f = blocking_with(
            &with_etcd("v1.11.3", "3.5.15-0"),
            "etcd-version-skew",
            Some(errors::TOO_MANY_LEARNERS),
        );
        assert!(f.field.starts_with("--etcd-version"), "{f:#?}");
        assert!(f.fix.unwrap().contains("3.5.26"));
        assert_eq!(
            worst(&with_etcd("v1.11.3", "3.5.21"), "etcd-version-skew"),
            Severity::Warning
        );
        assert_eq!(
            worst(&with_etcd("v1.11.3", "v3.5.26"), "etcd-version-skew"),
            Severity::Pass
        );
        assert_eq!(
            worst(&with_etcd("v1.11.3", "3.6.4"), "etcd-version-skew"),
            Severity::Pass
        );
        // M11: the 3.5.20 floor is moot while Talos runs 3.5 (no kubeadm member is left
        // when Talos moves to 3.6).
        let fs = check(&with_etcd("v1.10.6", "3.5.15-0"));
        let f = of(&fs, "etcd-version-skew")[0];
        assert_eq!(f.severity, Severity::Pass, "{f:#?}");
        assert!(f.summary.contains("no kubeadm member is left"), "{f:#?}");
        assert_eq!(
            worst(&with_etcd("v1.10.6", "3.5.21-0"), "etcd-version-skew"),
            Severity::Pass
        );
        blocking_with(&with_etcd("v1.14.0", "3.5.26"), "etcd-version-skew", None);
        blocking_with(&with_etcd("v1.10.6", "3.6.4"), "etcd-version-skew", None);
        // The recorded version is used when no flag is given; the flag wins.
        let text = format!("{MINIMAL}  provenance: {{etcdVersion: \"3.5.15-0\"}}\n")
            .replace("talos: v1.10.6", "talos: v1.12.1");
        let f = blocking_with(
            &inputs(&text),
            "etcd-version-skew",
            Some(errors::TOO_MANY_LEARNERS),
        );
        assert!(f.field.starts_with("spec.provenance.etcdVersion"), "{f:#?}");
        let mut i = inputs(&text);
        i.etcd_version = Some("3.5.26".into());
        assert_eq!(worst(&i, "etcd-version-skew"), Severity::Pass);
        // Unknown while kubeadm members join a Talos >= 1.11 etcd: blocking (render refuses).
        let unknown = MINIMAL.replace("talos: v1.10.6", "talos: v1.11.2")
            + "  migration:\n    phase: control-plane\n    kubeadm:\n      etcdMembers: [cp-1]\n";
        let f = blocking_with(
            &inputs(&unknown),
            "etcd-version-skew",
            Some(errors::TOO_MANY_LEARNERS),
        );
        assert!(f.fix.unwrap().contains("spec.provenance.etcdVersion"));
        assert_eq!(
            worst(
                &inputs(
                    &unknown
                        .replace("phase: control-plane", "phase: complete")
                        .replace("      etcdMembers: [cp-1]\n", "")
                ),
                "etcd-version-skew"
            ),
            Severity::Info
        );
        assert_eq!(parse_etcd_version("3.5.15-0"), Some((3, 5, 15)));
        assert_eq!(parse_etcd_version("v3.6.4"), Some((3, 6, 4)));
        assert_eq!(parse_etcd_version("3.6"), None);
        assert_eq!(parse_etcd_version("latest"), None);
    }

    #[test]
    fn control_plane_replicas() {
        assert_eq!(
            worst(&inputs(MINIMAL), "control-plane-replicas"),
            Severity::Pass
        );
        let text = replace(MINIMAL, "replicas: 3", "replicas: 2");
        let f = blocking_with(&inputs(&text), "control-plane-replicas", None);
        assert_eq!(f.field, "spec.controlPlane.replicas");
        let stub = MINIMAL.split("  vsphere:").next().unwrap();
        assert_eq!(
            worst(&inputs(stub), "control-plane-replicas"),
            Severity::Info
        );
    }

    #[test]
    fn service_account_issuer() {
        let i = inputs(MINIMAL);
        assert_eq!(worst(&i, "service-account-issuer"), Severity::Info);
        let i = with_manifest(
            inputs(MINIMAL),
            &testkit::apiserver_manifest(KUBEADM_ISSUER),
        );
        assert_eq!(worst(&i, "service-account-issuer"), Severity::Pass);
        // cluster.yaml renders the endpoint URL, kubeadm signs with its default.
        let text = replace(
            MINIMAL,
            &format!("issuers: [{KUBEADM_ISSUER}]"),
            &format!("issuers: [{ENDPOINT_URL}]"),
        );
        let i = with_manifest(inputs(&text), &testkit::apiserver_manifest(KUBEADM_ISSUER));
        let f = blocking_with(
            &i,
            "service-account-issuer",
            Some(errors::INVALID_BEARER_TOKEN),
        );
        assert!(
            f.field
                .contains("kube-apiserver.yaml --service-account-issuer"),
            "{f:#?}"
        );
        let fix = f.fix.unwrap();
        assert!(fix.contains("(b) set spec.serviceAccount.issuers to [https://kubernetes.default.svc.cluster.local]"), "{fix}");
        assert!(
            fix.contains("(a) add https://lab-f.example.internal:6443 as the first"),
            "{fix}"
        );
        assert!(fix.contains("Talos v1.13 or later"), "{fix}");
        // Two issuers before Talos 1.13.
        let two = replace(
            MINIMAL,
            &format!("issuers: [{KUBEADM_ISSUER}]"),
            &format!("issuers: [{KUBEADM_ISSUER}, {ENDPOINT_URL}]"),
        );
        let f = blocking_with(
            &inputs(&two),
            "service-account-issuer",
            Some(errors::INVALID_BEARER_TOKEN),
        );
        assert!(
            f.summary.contains("takes a single service-account issuer"),
            "{f:#?}"
        );
        // From Talos 1.13 both are accepted; kubeadm's first keeps tokens valid both ways.
        let v113 = two
            .replace("talos: v1.10.6", "talos: v1.13.2")
            .replace("kubernetes: v1.30.4", "kubernetes: v1.31.4");
        let i = with_manifest(inputs(&v113), &testkit::apiserver_manifest(KUBEADM_ISSUER));
        assert_eq!(worst(&i, "service-account-issuer"), Severity::Pass);
        // Talos signing with the endpoint while kubeadm does not accept it.
        let flipped = v113.replace(
            &format!("[{KUBEADM_ISSUER}, {ENDPOINT_URL}]"),
            &format!("[{ENDPOINT_URL}, {KUBEADM_ISSUER}]"),
        );
        let i = with_manifest(
            inputs(&flipped),
            &testkit::apiserver_manifest(KUBEADM_ISSUER),
        );
        let f = blocking_with(
            &i,
            "service-account-issuer",
            Some(errors::INVALID_BEARER_TOKEN),
        );
        assert!(
            f.summary
                .contains("kubeadm apiservers reject tokens signed by Talos"),
            "{f:#?}"
        );
        assert!(f.fix.unwrap().contains("(c) list both"));
        // A kubeadm apiserver already listing the endpoint first accepts it.
        let m = testkit::apiserver_manifest(ENDPOINT_URL).replace(
            "    - --service-account-key-file",
            &format!(
                "    - --service-account-issuer={KUBEADM_ISSUER}\n    - --service-account-key-file"
            ),
        );
        let i = with_manifest(inputs(&flipped), &m);
        assert_eq!(worst(&i, "service-account-issuer"), Severity::Pass);
    }

    #[test]
    fn service_account_audiences() {
        let m = testkit::apiserver_manifest(KUBEADM_ISSUER);
        assert_eq!(
            worst(&inputs(MINIMAL), "service-account-audiences"),
            Severity::Info
        );
        let i = with_manifest(inputs(MINIMAL), &m);
        assert_eq!(worst(&i, "service-account-audiences"), Severity::Pass);
        let text = replace(
            MINIMAL,
            &format!("audiences: [{KUBEADM_ISSUER}]"),
            &format!("audiences: [{ENDPOINT_URL}]"),
        );
        let i = with_manifest(inputs(&text), &m);
        let f = blocking_with(
            &i,
            "service-account-audiences",
            Some(errors::TOKEN_AUDIENCES),
        );
        assert!(f.field.contains("--api-audiences"), "{f:#?}");
        // kubeadm accepting more than Talos: a warning.
        let m2 = m.replace(
            "    - --secure-port",
            &format!("    - --api-audiences={KUBEADM_ISSUER},vault\n    - --secure-port"),
        );
        let i = with_manifest(inputs(MINIMAL), &m2);
        assert_eq!(worst(&i, "service-account-audiences"), Severity::Warning);
    }

    #[test]
    fn encryption_provider() {
        assert_eq!(
            worst(&inputs(MINIMAL), "encryption-provider"),
            Severity::Info
        );
        let enc = testkit::encryption_configuration("secretbox", "key2");
        let i = with_encryption(inputs(MINIMAL), &enc);
        assert_eq!(worst(&i, "encryption-provider"), Severity::Pass);
        // aescbc only with Talos >= 1.3.
        let text = replace(
            MINIMAL,
            "provider: secretbox, keyName: key2",
            "provider: aescbc, keyName: key1",
        );
        let f = blocking_with(
            &inputs(&text),
            "encryption-provider",
            Some(errors::IDENTITY_TRANSFORMER),
        );
        assert!(f.summary.contains("drops the aescbc key"), "{f:#?}");
        // The fix follows the two-step order: secretbox added after aescbc everywhere, then first.
        let fix = f.fix.as_deref().unwrap_or("");
        let (after, first) = (
            fix.find("with key `key2` after aescbc on every kubeadm apiserver"),
            fix.find("then move it first"),
        );
        assert!(after.is_some() && first.is_some() && after < first, "{fix}");
        // Another provider still listed after the first.
        let extra = enc.replace(
            "  - identity: {}\n",
            "  - aescbc:\n      keys:\n      - name: key1\n        secret: MDEyMzQ1Njc4OWFiY2RlZg==\n  - identity: {}\n",
        );
        let i = with_encryption(inputs(MINIMAL), &extra);
        let f = blocking_with(&i, "encryption-provider", Some(errors::NO_MATCHING_PREFIX));
        assert!(
            f.field
                .contains("encryption-config.yaml resources[0].providers"),
            "{f:#?}"
        );
        // The file says aescbc, cluster.yaml secretbox: stale import.
        let i = with_encryption(
            inputs(MINIMAL),
            &testkit::encryption_configuration("aescbc", "key1"),
        );
        blocking_with(&i, "encryption-provider", Some(errors::NO_MATCHING_PREFIX));
    }

    #[test]
    fn encryption_key_name() {
        assert_eq!(
            worst(&inputs(MINIMAL), "encryption-key-name"),
            Severity::Pass
        );
        let text = replace(MINIMAL, "keyName: key2", "keyName: key0");
        let f = blocking_with(
            &inputs(&text),
            "encryption-key-name",
            Some(errors::NO_MATCHING_PREFIX),
        );
        assert_eq!(f.field, "spec.encryption.keyName");
        let i = with_encryption(
            inputs(&text),
            &testkit::encryption_configuration("secretbox", "key0"),
        );
        let f = blocking_with(&i, "encryption-key-name", Some(errors::NO_MATCHING_PREFIX));
        assert!(
            f.field.contains(
                "encryption-config.yaml resources[0].providers[0].secretbox.keys[0].name"
            ),
            "{f:#?}"
        );
        let i = with_encryption(
            inputs(MINIMAL),
            &testkit::encryption_configuration("secretbox", "key2"),
        );
        assert_eq!(worst(&i, "encryption-key-name"), Severity::Pass);
        // cluster.yaml out of date with the file: a warning.
        let i = with_encryption(
            inputs(&text),
            &testkit::encryption_configuration("secretbox", "key2"),
        );
        assert_eq!(worst(&i, "encryption-key-name"), Severity::Warning);
    }

    #[test]
    fn encryption_missing() {
        let m = testkit::apiserver_manifest(KUBEADM_ISSUER);
        let plain = m.replace(
            "    - --encryption-provider-config=/etc/kubernetes/enc/encryption-config.yaml\n",
            "",
        );
        assert_eq!(
            worst(&inputs(MINIMAL), "encryption-missing"),
            Severity::Info
        );
        assert_eq!(
            worst(&with_manifest(inputs(MINIMAL), &m), "encryption-missing"),
            Severity::Pass
        );
        // kubeadm without encryption, Talos with a key.
        let f = blocking_with(
            &with_manifest(inputs(MINIMAL), &plain),
            "encryption-missing",
            Some(errors::IDENTITY_TRANSFORMER),
        );
        assert!(f.field.contains("--encryption-provider-config"), "{f:#?}");
        // kubeadm encrypting, Talos without a key.
        let none = replace(
            MINIMAL,
            "encryption: {provider: secretbox, keyName: key2}",
            "encryption: {provider: none}",
        );
        blocking_with(
            &with_manifest(inputs(&none), &m),
            "encryption-missing",
            Some(errors::IDENTITY_TRANSFORMER),
        );
        assert_eq!(
            worst(&with_manifest(inputs(&none), &plain), "encryption-missing"),
            Severity::Pass
        );
        // cluster.yaml says none, but the bundle carries a secretbox key.
        let f = blocking_with(
            &with_bundle(inputs(&none), BUNDLE),
            "encryption-missing",
            Some(errors::IDENTITY_TRANSFORMER),
        );
        assert!(f.field.contains("secrets.age"), "{f:#?}");
    }

    #[test]
    fn encryption_key_value() {
        let enc = testkit::encryption_configuration("secretbox", "key2");
        assert_eq!(
            worst(
                &with_encryption(inputs(MINIMAL), &enc),
                "encryption-key-value"
            ),
            Severity::Info
        );
        let i = with_bundle(with_encryption(inputs(MINIMAL), &enc), BUNDLE);
        assert_eq!(worst(&i, "encryption-key-value"), Severity::Pass);
        let other = "akw4W8o32vFLesbKdZXKlOG4968NaUIOVDHBeA0Dsro=";
        let bundle = String::from_utf8(BUNDLE.to_vec())
            .unwrap()
            .replace(testkit::ENCRYPTION_SECRET, other);
        let i = with_bundle(with_encryption(inputs(MINIMAL), &enc), bundle.as_bytes());
        let f = blocking_with(&i, "encryption-key-value", Some(errors::WRONG_KEY));
        assert!(
            f.field.contains("secrets.secretboxencryptionsecret"),
            "{f:#?}"
        );
        // Values never reach the report.
        let fs = check(&i);
        let text = report_text(&i, &fs, false) + &report_json(&i, &fs).to_string();
        for secret in [testkit::ENCRYPTION_SECRET, other, "lry8e9gycdix3bpa"] {
            assert!(!text.contains(secret), "secret leaked: {text}");
        }
    }

    fn with_cluster_configuration(text: &str) -> CheckInputs {
        let mut i = inputs(text);
        i.cluster_config = Some(Input {
            file: "kubeadm-config.yaml".into(),
            value: kubeadm::parse_cluster_configuration(
                "kubeadm-config.yaml",
                testkit::cluster_configuration("v1beta3").as_bytes(),
            )
            .unwrap(),
        });
        i
    }

    #[test]
    fn network_and_endpoint() {
        let i = with_cluster_configuration(MINIMAL);
        for id in ["pod-cidr", "service-cidr", "dns-domain", "endpoint"] {
            assert_eq!(worst(&inputs(MINIMAL), id), Severity::Info, "{id}");
            assert_eq!(worst(&i, id), Severity::Pass, "{id}");
        }
        let f = blocking_with(
            &with_cluster_configuration(&replace(
                MINIMAL,
                "pods: [10.244.0.0/16]",
                "pods: [10.42.0.0/16]",
            )),
            "pod-cidr",
            None,
        );
        assert!(
            f.field.contains("networking.podSubnet")
                && f.fix.as_ref().unwrap().contains("10.244.0.0/16"),
            "{f:#?}"
        );
        let f = blocking_with(
            &with_cluster_configuration(&replace(
                MINIMAL,
                "services: [10.96.0.0/12]",
                "services: [10.43.0.0/16]",
            )),
            "service-cidr",
            None,
        );
        assert!(f.field.contains("networking.serviceSubnet"), "{f:#?}");
        let f = blocking_with(
            &with_cluster_configuration(&replace(
                MINIMAL,
                "dnsDomain: cluster.local",
                "dnsDomain: lab.internal",
            )),
            "dns-domain",
            None,
        );
        assert!(f.fix.unwrap().contains("`cluster.local`"));
        let f = blocking_with(
            &with_cluster_configuration(&replace(
                MINIMAL,
                "host: lab-f.example.internal",
                "host: other.example.internal",
            )),
            "endpoint",
            None,
        );
        assert!(f.summary.contains("lab-f.example.internal:6443"), "{f:#?}");
        // The manifest's --service-cluster-ip-range is compared too.
        let i = with_manifest(
            inputs(&replace(
                MINIMAL,
                "services: [10.96.0.0/12]",
                "services: [10.43.0.0/16]",
            )),
            &testkit::apiserver_manifest(KUBEADM_ISSUER),
        );
        let f = blocking_with(&i, "service-cidr", None);
        assert!(f.field.contains("--service-cluster-ip-range"), "{f:#?}");
    }

    fn leaf() -> CertSummary {
        let root = TestKey::new(Alg::P256, 0);
        let params = testkit::ca_params(
            "kubernetes",
            testkit::days_from_now(-1),
            testkit::days_from_now(100),
        );
        let crt = testkit::signed_by(
            &TestKey::new(Alg::P256, 1),
            "kube-apiserver",
            false,
            &params,
            &root,
        );
        pki::certificate_summary("apiserver.crt", &crt).unwrap()
    }

    #[test]
    fn endpoint_certificate_san() {
        assert_eq!(
            worst(&inputs(MINIMAL), "endpoint-certificate-san"),
            Severity::Info
        );
        let mut i = inputs(MINIMAL);
        i.apiserver_cert = Some(Input {
            file: "apiserver.crt".into(),
            value: leaf(),
        });
        let f = blocking_with(&i, "endpoint-certificate-san", Some(errors::X509_NAME));
        assert!(f.summary.contains("`*.lb.example`"), "{f:#?}");
        let mut i = inputs(&replace(
            MINIMAL,
            "host: lab-f.example.internal",
            "host: api.lb.example",
        ));
        i.apiserver_cert = Some(Input {
            file: "apiserver.crt".into(),
            value: leaf(),
        });
        assert_eq!(worst(&i, "endpoint-certificate-san"), Severity::Pass);
        let mut i = inputs(&replace(
            MINIMAL,
            "host: lab-f.example.internal",
            "host: 192.0.2.10",
        ));
        i.apiserver_cert = Some(Input {
            file: "apiserver.crt".into(),
            value: leaf(),
        });
        assert_eq!(worst(&i, "endpoint-certificate-san"), Severity::Pass);
    }

    fn ca(role: &'static str, crt: &[u8], key: &TestKey) -> CaInput {
        ca_input(
            role,
            "ca.crt",
            crt,
            "ca.key",
            &key.traditional_pem(),
            testkit::now(),
        )
        .unwrap()
    }

    #[test]
    fn ca_intermediate_and_expiry() {
        assert_eq!(worst(&inputs(MINIMAL), "ca-intermediate"), Severity::Info);
        assert_eq!(worst(&inputs(MINIMAL), "ca-expiry"), Severity::Info);
        let k = TestKey::new(Alg::P256, 0);
        let mut i = inputs(MINIMAL);
        i.cas = Some(vec![ca(
            "Kubernetes CA",
            &testkit::self_signed_ca(&k, "kubernetes", 3650),
            &k,
        )]);
        assert_eq!(worst(&i, "ca-intermediate"), Severity::Pass);
        assert_eq!(worst(&i, "ca-expiry"), Severity::Pass);
        // Intermediate.
        let root = TestKey::new(Alg::P256, 1);
        let params = testkit::ca_params(
            "root",
            testkit::days_from_now(-1),
            testkit::days_from_now(100),
        );
        let sub = TestKey::new(Alg::P256, 2);
        let crt = testkit::signed_by(&sub, "kubernetes", true, &params, &root);
        i.cas = Some(vec![ca("Kubernetes CA", &crt, &sub)]);
        let f = blocking_with(&i, "ca-intermediate", None);
        assert!(
            f.summary.contains("intermediate") && f.field == "ca.crt",
            "{f:#?}"
        );
        // Not a CA.
        let crt = testkit::signed_by(&sub, "kubernetes", false, &params, &root);
        i.cas = Some(vec![ca("Kubernetes CA", &crt, &sub)]);
        blocking_with(&i, "ca-intermediate", None);
        // Expiring soon, expired.
        let soon = testkit::ca_params(
            "etcd-ca",
            testkit::days_from_now(-10),
            testkit::days_from_now(30),
        );
        let crt = pki::encode_certificate_pem(soon.self_signed(&k).unwrap().der());
        i.cas = Some(vec![ca("etcd CA", &crt, &k)]);
        assert_eq!(worst(&i, "ca-expiry"), Severity::Warning);
        let gone = testkit::ca_params(
            "etcd-ca",
            testkit::days_from_now(-400),
            testkit::days_from_now(-2),
        );
        let crt = pki::encode_certificate_pem(gone.self_signed(&k).unwrap().der());
        i.cas = Some(vec![ca("etcd CA", &crt, &k)]);
        let f = blocking_with(&i, "ca-expiry", None);
        assert!(f.summary.contains("etcd CA expired"), "{f:#?}");
        assert_eq!(worst(&i, "ca-intermediate"), Severity::Pass);
        // A key that does not belong to the certificate is an input error.
        let other = TestKey::new(Alg::P256, 3);
        let good = testkit::self_signed_ca(&k, "kubernetes", 3650);
        assert!(matches!(
            ca_input(
                "Kubernetes CA",
                "ca.crt",
                &good,
                "ca.key",
                &other.traditional_pem(),
                testkit::now()
            ),
            Err(PkiError::KeyMismatch { .. })
        ));
    }

    #[test]
    fn bootstrap_token() {
        assert_eq!(
            worst(&inputs(MINIMAL), "bootstrap-token"),
            Severity::Warning
        );
        let text = format!("{MINIMAL}  provenance: {{bootstrapTokenId: 2psnp2}}\n");
        let fs = check(&inputs(&text));
        let f = of(&fs, "bootstrap-token")[0];
        assert_eq!(
            (f.severity, f.cluster_error),
            (Severity::Info, Some(errors::UNAUTHORIZED))
        );
        assert!(f.fix.as_ref().unwrap().contains("--ttl 0"), "{f:#?}");
        assert_eq!(
            worst(&with_bundle(inputs(&text), BUNDLE), "bootstrap-token"),
            Severity::Info
        );
        let other = text.replace("2psnp2", "abcdef");
        assert_eq!(
            worst(&with_bundle(inputs(&other), BUNDLE), "bootstrap-token"),
            Severity::Warning
        );
        let broken = String::from_utf8(BUNDLE.to_vec())
            .unwrap()
            .replace("2psnp2.lry8e9gycdix3bpa", "nope");
        blocking_with(
            &with_bundle(inputs(&text), broken.as_bytes()),
            "bootstrap-token",
            Some(errors::UNAUTHORIZED),
        );
    }

    const KUBE_PROXY: &str = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: kube-proxy\n  namespace: kube-system\n  labels:\n    k8s-app: kube-proxy\nspec:\n  selector:\n    matchLabels:\n      k8s-app: kube-proxy\n  template:\n    metadata:\n      labels:\n        k8s-app: kube-proxy\n    spec:\n      containers:\n      - name: kube-proxy\n        image: registry.k8s.io/kube-proxy:v1.30.4\n";

    fn with_kube_proxy(text: &str) -> CheckInputs {
        let mut i = inputs(MINIMAL);
        let docs = crate::yaml::parse_stream(text).unwrap();
        i.kube_proxy = Some(Input {
            file: "kube-proxy.yaml".into(),
            value: find_kube_proxy("kube-proxy.yaml", docs).unwrap(),
        });
        i
    }

    #[test]
    fn kube_proxy_labels() {
        assert_eq!(worst(&inputs(MINIMAL), "kube-proxy-labels"), Severity::Info);
        let fs = check(&with_kube_proxy(KUBE_PROXY));
        let f = of(&fs, "kube-proxy-labels")[0];
        assert_eq!(
            (f.severity, f.cluster_error),
            (Severity::Warning, Some(errors::FIELD_IMMUTABLE))
        );
        assert!(
            f.summary.contains("spec.selector.matchLabels.tier: node"),
            "{f:#?}"
        );
        assert!(
            f.summary
                .contains("spec.template.metadata.labels.tier: node"),
            "{f:#?}"
        );
        let good = KUBE_PROXY
            .replace(
                "      k8s-app: kube-proxy\n  template",
                "      k8s-app: kube-proxy\n      tier: node\n  template",
            )
            .replace(
                "        k8s-app: kube-proxy\n    spec",
                "        k8s-app: kube-proxy\n        tier: node\n    spec",
            );
        assert_eq!(
            worst(&with_kube_proxy(&good), "kube-proxy-labels"),
            Severity::Pass
        );
        // A List from `kubectl get ds -o yaml` works too; other kinds are an input error.
        let list = format!(
            "apiVersion: v1\nkind: List\nitems:\n- {}",
            good.replace('\n', "\n  ").trim_end()
        );
        assert_eq!(
            worst(&with_kube_proxy(&list), "kube-proxy-labels"),
            Severity::Pass
        );
        let e = find_kube_proxy(
            "cm.yaml",
            crate::yaml::parse_stream("apiVersion: v1\nkind: ConfigMap\n").unwrap(),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cm.yaml: no DaemonSet found (found ConfigMap)"),
            "{e}"
        );
    }

    #[test]
    fn etcd_member_name() {
        assert_eq!(worst(&inputs(MINIMAL), "etcd-member-name"), Severity::Info);
        let members = |names: &str| {
            inputs(&format!("{MINIMAL}  workers:\n  - {{name: general, replicas: 1, machine: {{numCPUs: 2, memoryMiB: 4096}}}}\n  migration:\n    phase: prepare\n    kubeadm:\n      etcdMembers: [{names}]\n"))
        };
        assert_eq!(
            worst(
                &members("kube-cp-1, kube-cp-2, kube-cp-3"),
                "etcd-member-name"
            ),
            Severity::Pass
        );
        let f = blocking_with(
            &members("kube-cp-1, lab-f-cp-x7k2p"),
            "etcd-member-name",
            None,
        );
        assert_eq!(f.field, "spec.migration.kubeadm.etcdMembers[1]");
        assert_eq!(
            worst(&members("lab-f-cp-1"), "etcd-member-name"),
            Severity::Warning
        );
        assert_eq!(
            worst(&members("lab-f-general-abc"), "etcd-member-name"),
            Severity::Warning
        );
    }

    #[test]
    fn what_a_finding_quotes_is_printed_escaped() {
        let i = inputs(MINIMAL);
        let evil = "a\u{1b}[2J\rPASS \u{202e}x";
        let fs = vec![Finding::new(
            "etcd-snapshot",
            Severity::Blocking,
            evil.to_string(),
            evil.to_string(),
        )
        .fix(evil)];
        let plain = report_text(&i, &fs, false);
        assert!(
            !plain.contains('\u{1b}') && !plain.contains('\r') && !plain.contains('\u{202e}'),
            "{plain:?}"
        );
        assert_eq!(
            plain.matches("a\\u{1b}[2J\\u{d}PASS \\u{202e}x").count(),
            3,
            "{plain}"
        );
    }

    #[test]
    fn reports() {
        let text = replace(MINIMAL, "keyName: key2", "keyName: key0");
        let i = inputs(&text);
        let fs = check(&i);
        let plain = report_text(&i, &fs, false);
        assert!(!plain.contains('\x1b'));
        assert!(
            plain
                .contains("\nblocking (1)\n  BLOCK encryption-key-name  spec.encryption.keyName\n"),
            "{plain}"
        );
        assert!(
            plain.contains("      cluster would show: no matching prefix found\n"),
            "{plain}"
        );
        assert!(
            plain.contains("      fix: move the key to `key2` in two steps (README procedure"),
            "{plain}"
        );
        assert!(plain.contains("\npassed ("), "{plain}");
        assert!(plain.contains("summary: 1 blocking,"), "{plain}");
        let blocking_at = plain.find("\nblocking").unwrap();
        let passed_at = plain.find("\npassed").unwrap();
        assert!(blocking_at < passed_at);
        assert!(report_text(&i, &fs, true).contains("\x1b[1;31m"));
        let json = report_json(&i, &fs);
        assert_eq!(json["counts"]["blocking"], 1);
        let first = json["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["severity"] == "blocking")
            .unwrap();
        assert_eq!(first["id"], "encryption-key-name");
        assert_eq!(first["clusterError"], "no matching prefix found");
        assert_eq!(Counts::of(&fs).blocking, 1);
    }
}
