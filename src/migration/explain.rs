//! `capstan explain`: maps an error message seen during a kubeadm → Talos migration to its
//! cause, the `capstan check` finding that catches it beforehand, and the fix.
//!
//! The knowledge is a static table ([`ENTRIES`]), one [`Entry`] per error string that the
//! kube-apiserver, etcd, the kubelet, Talos, `talosctl` and the Cluster API Talos providers
//! (CABPT, CACPPT) print when the two sides of a migration disagree. [`explain`] is pure: it
//! normalises the text and returns every entry whose message fragments it contains.
//!
//! # Matching
//!
//! The text is split into logical lines (a line that starts with a blank continues the one
//! before, so `talosctl`'s `1 error occurred:` / `\t* …` lists and wrapped `kubectl describe`
//! messages stay together). Each line is normalised: JSON/klog escapes (`\"`, `\\\"`, `\n`,
//! `\t`) and typographic quotes become plain characters, runs of whitespace become one
//! space. Patterns are case-insensitive regular expressions searched anywhere in a line, so
//! klog, JSON (zap/logr) and `talosctl logs` prefixes, timestamps, and the names, IPs and
//! keys that vary between clusters do not matter. A pattern never spans two logical lines,
//! so a whole log can be piped in without unrelated lines combining into a false match.
//!
//! # Order
//!
//! The table order is the priority order: where two entries can match the same line, the
//! more specific one comes first (the audience mismatch before the `invalid bearer token`
//! that wraps it, too many learners before `error adding member`). [`explain`] returns
//! matches in table order.
//!
//! # The contract with `capstan check`
//!
//! Each entry names the findings (stable ids, [`FINDINGS`]) that report the condition before
//! the cluster shows the error: most are `capstan check` findings (`check` uses exactly these
//! ids, tested against `check::IDS`); `etcd-audit`, `guarded-unpause`, `bootstrapped-status` and
//! `secrets-bundle` are guarded by `capstan render`, which refuses the unsafe state:
//!
//! | finding id | what `check` verifies |
//! |---|---|
//! | `service-account-issuer` | the Talos apiservers accept the kubeadm signing issuer and the kubeadm apiservers accept Talos's (several issuers need Talos ≥ 1.13) |
//! | `service-account-audiences` | each side's `--api-audiences` accepts the audiences of the tokens the other side issues |
//! | `encryption-key-name` | the provider and key name Talos renders (secretbox `key2`, aescbc `key1`; aescbc is dropped for Talos ≥ 1.3) are the ones kubeadm writes with |
//! | `encryption-key-value` | the encryption secret carried into the Talos bundle is the kubeadm key, byte for byte |
//! | `encryption-missing` | both sides encrypt Secrets or neither does (no invented Talos key on a plaintext cluster, no kubeadm key left behind) |
//! | `etcd-version-skew` | the kubeadm etcd is ≥ v3.5.20 (blocking) and ≥ v3.5.26 (advised) before a Talos ≥ 1.11 (etcd 3.6) member joins |
//! | `etcd-member-name` | no Talos hostname equals a kubeadm etcd member name |
//! | `etcd-audit` | the TalosControlPlane (or Cluster) stays paused while kubeadm etcd members exist |
//! | `guarded-unpause` | phases `workers` and `complete` run the Job that lifts the pause once no kubeadm etcd member is left |
//! | `provider-releases` | the migration phases run only on verified provider releases, the ones the management cluster runs |
//! | `bootstrapped-status` | `status.bootstrapped=true` is set before any machine of an existing cluster exists (admission policy and phase Job, every phase) |
//! | `bootstrap-token` | the bundle's bootstrap token has a non-expiring `kube-system/bootstrap-token-<id>` Secret |
//! | `kube-proxy-labels` | the kube-proxy DaemonSet selector carries `tier: node` and `k8s-app: kube-proxy` |
//! | `ca-intermediate` | the kubeadm CAs are self-signed roots (Talos cannot carry intermediate CAs) |
//! | `encryption-provider` | the kubeadm provider for Secrets is the one Talos renders, first, with no provider after it that Talos would not list |
//! | `encryption-resources` | kubeadm encrypts Secrets only, as Talos does |
//! | `endpoint-certificate-san` | the kubeadm apiserver certificate holds the endpoint host |
//! | `apiserver-cert-sans` | every name the kubeadm apiserver certificate answers to is in the Talos apiserver certificate |
//! | `apiserver-flags` | every kube-apiserver flag kubeadm runs with is run the same by Talos |
//! | `apiserver-uncarried` | nothing the kubeadm apiservers run that Talos cannot carry: the listening port, several service-account keys, a structured authorization configuration |
//! | `kubeadm-bind-port` | the kubeadm InitConfiguration's `localAPIEndpoint.bindPort` is `spec.endpoint.backendPort` |
//! | `kubeadm-config` | nothing of kubeadm's ClusterConfiguration that changes the migration is dropped: image repository, kube-proxy disabled |
//! | `anonymous-auth` | Talos allows anonymous requests when kubeadm does |
//! | `pod-security` | Talos enforces the Pod Security level the kubeadm apiservers enforce |
//! | `controller-manager-flags` | every kube-controller-manager flag kubeadm runs with is run the same by Talos (node CIDR mask, grace period, pod GC, signing duration, controllers), whichever instance holds the lease |
//! | `scheduler-flags` | every kube-scheduler flag kubeadm runs with is run the same by Talos; a `--config` of kubeadm's is refused with where profiles go |
//! | `addresses-in-use` | no running node holds an address of an IPAM pool of the render, or the VIP |
//! | `etcd-topology` | kubeadm runs etcd on its control-plane nodes (stacked): external etcd is refused |
//! | `etcd-args` | the Talos etcd members run with the kubeadm members' quota, timeouts and snapshot settings |
//! | `cloud-provider` | the vSphere CPI initialises nodes, so Talos nodes get the `vsphere://` providerID Cluster API matches Machines by |
//! | `etcd-db-size` | the kubeadm etcd database fits the quota a Talos member runs with |
//! | `etcd-snapshot` | a whole etcd snapshot (a bbolt database with etcd's SHA-256 after it) of the kubeadm cluster exists before phase `control-plane` |
//! | `control-plane-hosts` | no ESXi host runs more etcd voters (control-plane VMs, and the kubeadm members during phase `control-plane`) than etcd can lose (`govc vm.info -json`), and a vSphere tag keeps new control-plane VMs apart |
//! | `kubelet-config` | the Talos kubelets run with the kubeadm kubelets' clusterDNS, cluster domain, pod limit, reserved resources and eviction |
//! | `node-labels` | every kubeadm worker's own labels and taints are those of a worker pool |
//! | `worker-local-volumes` | no PersistentVolume in use is pinned to a kubeadm worker (a local or hostPath volume, a nodeAffinity naming it) |
//! | `worker-bare-pods` | every Pod on the kubeadm workers has a controller that recreates it elsewhere |
//! | `worker-pdb-no-disruption` | every PodDisruptionBudget over the kubeadm workers' Pods allows an eviction |
//! | `worker-pool-capacity` | the Talos worker pools hold the requests of the Pods the kubeadm workers run |
//! | `cni-daemonset` | the CNI DaemonSet asks for no capability Talos drops (`SYS_MODULE`, `SYS_BOOT`) and uses Talos's cgroup root |
//! | `secrets-bundle` | the imported bundle and its sealed Secrets exist, are current and come from this cluster's PKI (CAs, service-account key) |
//! | `phase-leftovers` | nothing an earlier phase added is left on the management cluster: phase control-plane's nodeRef policy, the pause in phase complete, the phase annotation, migration Jobs of other phases |

use regex::{Regex, RegexSet, RegexSetBuilder};
use std::sync::LazyLock;

/// One known error message: how to recognise it and what to do about it.
#[derive(Debug)]
pub struct Entry {
    /// Stable kebab-case id, e.g. `invalid-bearer-token`.
    pub id: &'static str,
    /// One-line title.
    pub title: &'static str,
    /// Case-insensitive regular expressions over a normalised line; any one identifies the
    /// entry.
    pub patterns: &'static [&'static str],
    /// Regular expressions that veto a match on the same line (another entry owns it).
    pub unless: &'static [&'static str],
    /// Where the message is printed.
    pub source: &'static str,
    /// Why it happens: what differs between the kubeadm side and Talos.
    pub cause: &'static str,
    /// The findings ([`FINDINGS`]) that catch it beforehand, by `check` or `render` (see
    /// [`guard_of`]); empty for runtime conditions no input file shows.
    pub caught_by: &'static [&'static str],
    /// The fix, one step per item, with commands (by Talos version where it matters).
    pub fix: &'static [&'static str],
    /// Procedures ([`crate::procedure`] ids) the fix refers to, printed after it.
    pub procedures: &'static [&'static str],
}

/// An entry found in a text.
#[derive(Debug, Clone, Copy)]
pub struct Match {
    /// The entry.
    pub entry: &'static Entry,
    /// The first input line (1-based) of the first logical line it matched.
    pub line: usize,
    /// How many logical lines matched it.
    pub occurrences: usize,
}

/// Which command catches a condition before the cluster shows the error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// A `capstan check` finding (its id is one of `check::IDS`).
    Check,
    /// `capstan render` refuses to produce the state (migration interlocks, sealed-secret
    /// checks).
    Render,
}

/// Which command guards a finding id of [`FINDINGS`] (`None` for an unknown id).
pub fn guard_of(id: &str) -> Option<Guard> {
    FINDINGS
        .iter()
        .find(|(f, _, _)| *f == id)
        .map(|(_, g, _)| *g)
}

/// The finding ids entries refer to, with the command that guards each and what it verifies
/// (the contract documented at the top of this module).
pub const FINDINGS: &[(&str, Guard, &str)] = &[
    ("service-account-issuer", Guard::Check, "the Talos apiservers accept the kubeadm signing issuer and the kubeadm apiservers accept Talos's"),
    ("service-account-audiences", Guard::Check, "each side's --api-audiences accepts the audiences of the tokens the other side issues"),
    ("encryption-key-name", Guard::Check, "the provider and key name Talos renders (secretbox key2, aescbc key1) are the ones kubeadm writes with"),
    ("encryption-key-value", Guard::Check, "the encryption secret carried into the Talos bundle is the kubeadm key"),
    ("encryption-missing", Guard::Check, "both sides encrypt Secrets or neither does"),
    ("etcd-version-skew", Guard::Check, "the kubeadm etcd is >= v3.5.20 (>= v3.5.26 advised) before a Talos >= 1.11 member joins"),
    ("etcd-member-name", Guard::Check, "no Talos hostname equals a kubeadm etcd member name"),
    ("etcd-audit", Guard::Render, "the TalosControlPlane stays paused while kubeadm etcd members exist"),
    ("guarded-unpause", Guard::Render, "phases workers and complete run the Job that lifts the pause once the workload cluster has no kubeadm etcd member left"),
    ("provider-releases", Guard::Check, "the migration phases run only on the provider releases capstan verified, and the management cluster runs the declared ones"),
    ("bootstrapped-status", Guard::Render, "status.bootstrapped=true is set before any machine of an existing cluster exists (admission policy and phase Job, every phase)"),
    ("bootstrap-token", Guard::Check, "the bundle's bootstrap token has a non-expiring bootstrap-token-<id> Secret"),
    ("kube-proxy-labels", Guard::Check, "the kube-proxy DaemonSet selector carries tier: node and k8s-app: kube-proxy"),
    ("ca-intermediate", Guard::Check, "the kubeadm CAs are self-signed roots"),
    ("encryption-provider", Guard::Check, "the kubeadm provider for Secrets is the one Talos renders, first, with no provider after it that Talos would not list"),
    ("encryption-resources", Guard::Check, "kubeadm encrypts Secrets only, as Talos does"),
    ("endpoint-strategy", Guard::Check, "phase complete (and a cluster not migrating) declares how the endpoint follows the control-plane machines: a Talos VIP, or a load balancer whose backends are the control plane's own pool of replicas + 1 addresses"),
    ("endpoint-certificate-san", Guard::Check, "the kubeadm apiserver certificate holds the endpoint host"),
    ("apiserver-cert-sans", Guard::Check, "every name the kubeadm apiserver certificate answers to is in the Talos apiserver certificate"),
    ("apiserver-flags", Guard::Check, "every kube-apiserver flag kubeadm runs with is run the same by Talos (OIDC, webhook authn/authz, admission plugins, feature gates)"),
    ("apiserver-uncarried", Guard::Check, "the Talos apiservers listen on the kubeadm apiservers' port (spec.endpoint.backendPort), and kubeadm verifies with one service-account key and no structured authorization configuration, which Talos cannot carry"),
    ("kubeadm-bind-port", Guard::Check, "the kubeadm InitConfiguration's localAPIEndpoint.bindPort is the port the Talos apiservers listen on (spec.endpoint.backendPort)"),
    ("kubeadm-config", Guard::Check, "nothing of kubeadm's ClusterConfiguration that changes the migration is dropped (an image repository of the fleet's own needs a registry.k8s.io mirror; kube-proxy disabled stays disabled)"),
    ("anonymous-auth", Guard::Check, "Talos allows anonymous requests when kubeadm does (LB health checks on /healthz)"),
    ("pod-security", Guard::Check, "Talos enforces the Pod Security level the kubeadm apiservers enforce"),
    ("controller-manager-flags", Guard::Check, "every kube-controller-manager flag kubeadm runs with is run the same by Talos (node CIDR mask size, node grace period, terminated-pod GC, signing duration, controllers), so nothing flips when the leader lease moves"),
    ("scheduler-flags", Guard::Check, "every kube-scheduler flag kubeadm runs with is run the same by Talos; a kubeadm --config is refused (profiles go in Talos's cluster.scheduler.config)"),
    ("addresses-in-use", Guard::Check, "no running node holds an address of an IPAM pool of the render (the machines' pools, the control-plane pool) or the VIP"),
    ("etcd-topology", Guard::Check, "kubeadm runs etcd on its control-plane nodes (stacked), the topology the migration joins; external etcd is refused"),
    ("etcd-args", Guard::Check, "the Talos etcd members run with the kubeadm members' quota, timeouts and snapshot settings"),
    ("cloud-provider", Guard::Check, "the vSphere CPI runs and initialises nodes, so Talos nodes get the vsphere:// providerID Cluster API matches Machines by"),
    ("etcd-db-size", Guard::Check, "the kubeadm etcd database fits the quota a Talos member runs with"),
    ("etcd-snapshot", Guard::Check, "a whole etcd snapshot (a bbolt database with etcd's SHA-256 after it) of the kubeadm cluster exists before phase control-plane"),
    ("control-plane-hosts", Guard::Check, "no ESXi host runs more etcd voters (control-plane VMs, and the kubeadm members during phase control-plane) than etcd can lose, and a vSphere tag keeps new control-plane VMs apart"),
    ("kubelet-config", Guard::Check, "the Talos kubelets run with the kubeadm kubelets' clusterDNS, cluster domain, pod limit, reserved resources and eviction"),
    ("node-labels", Guard::Check, "every kubeadm worker's own labels and taints are those of a worker pool"),
    ("worker-local-volumes", Guard::Check, "no PersistentVolume in use is pinned to a kubeadm worker (a local or hostPath volume, a nodeAffinity naming it)"),
    ("worker-bare-pods", Guard::Check, "every Pod on the kubeadm workers has a controller that recreates it elsewhere"),
    ("worker-pdb-no-disruption", Guard::Check, "every PodDisruptionBudget over the kubeadm workers' Pods allows an eviction"),
    ("worker-pool-capacity", Guard::Check, "the Talos worker pools hold the requests of the Pods the kubeadm workers run"),
    ("cni-daemonset", Guard::Check, "the CNI DaemonSet asks for no capability Talos drops (SYS_MODULE, SYS_BOOT) and uses Talos's cgroup root"),
    ("secrets-bundle", Guard::Render, "the imported bundle and its sealed Secrets exist, are current and come from this cluster's PKI"),
    ("phase-leftovers", Guard::Check, "nothing an earlier phase added is left on the management cluster: phase control-plane's nodeRef policy, the pause in phase complete, the phase annotation, migration Jobs of other phases"),
];

/// `etcdctl` run inside a kubeadm etcd static pod, with the kubeadm client certificate.
macro_rules! etcdctl {
    ($rest:literal) => {
        concat!(
            "kubectl -n kube-system exec etcd-<kubeadm-node> -- etcdctl --endpoints https://127.0.0.1:2379 ",
            "--cacert /etc/kubernetes/pki/etcd/ca.crt --cert /etc/kubernetes/pki/etcd/server.crt ",
            "--key /etc/kubernetes/pki/etcd/server.key ",
            $rest
        )
    };
}

/// Restarting one kubeadm kube-apiserver static pod (the kubelet recreates it).
const RESTART_KUBEADM_APISERVER: &str = "restart one kubeadm apiserver at a time: `mv /etc/kubernetes/manifests/kube-apiserver.yaml /root/ && sleep 20 && mv /root/kube-apiserver.yaml /etc/kubernetes/manifests/` (a changed manifest restarts it by itself; a changed EncryptionConfiguration does not)";

/// Every known error message, most specific first (see the module documentation).
pub static ENTRIES: &[Entry] = &[
    // ---- service-account tokens -------------------------------------------------
    Entry {
        id: "service-account-key-mismatch",
        title: "Service-account token signed with a key this apiserver does not have",
        patterns: &[r"error in cryptographic primitive"],
        unless: &[],
        source: "kube-apiserver log (`authentication.go`, `Unable to authenticate the request`), usually inside `[invalid bearer token, …]`",
        cause: "The token's issuer is accepted but its signature does not verify: the Talos apiservers sign with `certs.k8sserviceaccount.key` from the Talos secrets bundle, the kubeadm apiservers with `/etc/kubernetes/pki/sa.key`. They differ when the bundle was generated fresh (plain `talosctl gen secrets`, or CABPT creating `<cluster>-talos` because the imported Secret was not there first) instead of imported from the kubeadm PKI.",
        caught_by: &["secrets-bundle"],
        fix: &[
            "import the kubeadm key into the bundle: `capstan import kubeadm --pki /etc/kubernetes/pki …` (or `talosctl gen secrets --from-kubernetes-pki /etc/kubernetes/pki`), which carries `sa.key` as `certs.k8sserviceaccount.key`",
            "with Cluster API, apply the sealed `<cluster>-talos` Secret before any TalosConfig is reconciled; if CABPT already generated one, replace it and re-create the Talos machines that booted with it",
            "compare the public keys: `openssl rsa -in /etc/kubernetes/pki/sa.key -pubout | sha256sum` on a kubeadm node against the key in the bundle (`capstan secrets decrypt clusters/<name>/secrets.age`)",
        ],
        procedures: &[],
    },
    Entry {
        id: "token-audience-mismatch",
        title: "Service-account token audience not accepted (issuer accepted)",
        patterns: &[r"token audiences .*?is invalid for the target audiences"],
        unless: &[],
        source: "kube-apiserver log (`authentication.go`), often joined as `[invalid bearer token, token audiences … is invalid for the target audiences …]`",
        cause: "The apiserver knows the token's issuer but not its audience. Talos sets `--api-audiences` to its control-plane endpoint (`https://<endpoint>:6443`); kubeadm sets none, so its audience is its first `--service-account-issuer` (`https://kubernetes.default.svc.<dnsDomain>`). Tokens issued by one side carry that side's audience. Typical after the Talos guide's step 8 (new first issuer on kubeadm): kubeadm's implicit audience moves to the new issuer and every older token fails.",
        caught_by: &["service-account-audiences"],
        fix: &[
            "accept both audiences on both sides (the two URLs below are examples; use your endpoint and dnsDomain)",
            "kubeadm: add `--api-audiences=https://kubernetes.default.svc.cluster.local,https://<endpoint>:6443` to `/etc/kubernetes/manifests/kube-apiserver.yaml` on every control-plane node (and to `apiServer.extraArgs` in the kubeadm ClusterConfiguration, so upgrades keep it)",
            "Talos (every version): `cluster.apiServer.extraArgs.api-audiences: \"https://kubernetes.default.svc.cluster.local,https://<endpoint>:6443\"` (a comma-separated string); in capstan list both in `spec.serviceAccount.audiences` and re-render",
            "Talos 1.14 multi-document config: `KubeServiceAccountConfig` `accepted.audiences: [both URLs]`",
            "restart pods still failing so the kubelet requests fresh projected tokens",
        ],
        procedures: &[],
    },
    Entry {
        id: "invalid-bearer-token",
        title: "Bearer token rejected: service-account issuer mismatch between kubeadm and Talos",
        patterns: &[r"invalid bearer token"],
        unless: &[],
        source: "kube-apiserver log: `\"Unable to authenticate the request\" err=\"invalid bearer token\"` (`authentication.go`)",
        cause: "No authenticator accepted the token; an unknown `iss` makes the service-account authenticator skip it silently, so during a migration this is usually the issuer mismatch. Talos sets `--service-account-issuer` to `cluster.controlPlane.endpoint` (`https://<endpoint>:6443`), kubeadm to `https://kubernetes.default.svc.<dnsDomain>`. Tokens issued by one side are rejected by the other, so pods fail intermittently depending on which apiserver answers. The other cause: the kubeadm apiservers verify with several `--service-account-key-file` keys and Talos with one (the bundle's), so tokens signed by the older keys fail on Talos apiservers. If the message also names audiences or a cryptographic primitive, see those entries.",
        caught_by: &["service-account-issuer", "apiserver-uncarried"],
        fix: &[
            "see which issuer a token carries: `kubectl create token default | cut -d. -f2 | base64 -d 2>/dev/null; echo` and compare `iss`/`aud` with `kubectl -n kube-system get pod kube-apiserver-<node> -o yaml | grep -e service-account-issuer -e api-audiences` on a kubeadm and on a Talos node",
            "any Talos version, no kubeadm change: make Talos keep the kubeadm issuer: `cluster.apiServer.extraArgs: {service-account-issuer: https://kubernetes.default.svc.cluster.local, api-audiences: https://kubernetes.default.svc.cluster.local}`; in capstan `spec.serviceAccount.issuers: [https://kubernetes.default.svc.<dnsDomain>]` (and the same audience), then re-render",
            "Talos >= 1.13: accept both, kubeadm's first (the first one signs): `service-account-issuer: [https://kubernetes.default.svc.cluster.local, https://<endpoint>:6443]` and `api-audiences: \"https://kubernetes.default.svc.cluster.local,https://<endpoint>:6443\"`; Talos 1.14 multi-document config: `KubeServiceAccountConfig` `issuer.issuerURL` plus `accepted.issuers`/`accepted.audiences`",
            "the Talos guide's way (kubeadm change): on every kubeadm apiserver add `--service-account-issuer=https://<endpoint>:6443` before the existing one and set `--api-audiences` to both URLs, one node at a time; without the audiences, old tokens fail with `token audiences … is invalid`",
        ],
        procedures: &[],
    },
    // ---- encryption at rest ----------------------------------------------------
    Entry {
        id: "encryption-wrong-key",
        title: "Secret encrypted with a different key under the same provider and key name",
        patterns: &[r"output array was not large enough for encryption"],
        unless: &[],
        source: "kube-apiserver log: `\"failed to decrypt data\" err=\"output array was not large enough for encryption\"` (`transformer.go`, secretbox provider)",
        cause: "The stored value carries the same provider and key name (Talos: secretbox `key2`) as this apiserver's key, but the secret differs, so secretbox cannot open it. `talosctl gen secrets --from-kubernetes-pki` always invents a new secretbox key; unless the kubeadm key is carried over, the Talos apiservers write Secrets the kubeadm ones cannot read, and the reverse.",
        caught_by: &["encryption-key-value"],
        fix: &[
            "carry the kubeadm key over: `capstan import kubeadm --encryption-config <the file kube-apiserver's --encryption-provider-config names>`; with talosctl, set `cluster.secretboxEncryptionSecret` to the kubeadm `key2` secret",
            "compare: the `secret:` of the secretbox key in the kubeadm EncryptionConfiguration against `talosctl -n <talos-cp> get machineconfig -o yaml | grep -i encryptionsecret`",
            "Secrets already written with the wrong key (their paths are in the log, `/registry/secrets/<ns>/<name>`) can be read only with that key: add it as a second secretbox key on the kubeadm apiservers, restart them, rewrite the Secrets (`kubectl get secrets -A -o json | kubectl replace -f -`), then remove it; or delete and recreate those Secrets",
        ],
        procedures: &[],
    },
    Entry {
        id: "encryption-short-data",
        title: "Stored Secret too short for its encryption provider",
        patterns: &[r"the stored data was shorter than the required size"],
        unless: &[],
        source: "kube-apiserver log: `\"failed to decrypt data\" err=\"the stored data was shorter than the required size\"` (secretbox/aescbc provider)",
        cause: "The value in etcd has this apiserver's provider prefix and key name but is shorter than a nonce/IV, so it was not written by this key: a value written by something else under the same prefix, truncated, or restored from elsewhere. During a migration it goes with a key mismatch between the kubeadm and Talos apiservers.",
        caught_by: &["encryption-key-value"],
        fix: &[
            "make both sides use the same key under the same name (see `encryption-wrong-key`: `capstan import kubeadm --encryption-config …`)",
            concat!("find the object from the log (`/registry/secrets/<ns>/<name>`) and look at its prefix: ", etcdctl!("get /registry/secrets/<ns>/<name> --print-value-only"), " `| head -c 64 | od -c`"),
            "recreate it: `kubectl -n <ns> delete secret <name>`, then re-apply it from its source",
        ],
        procedures: &[],
    },
    Entry {
        id: "encryption-no-matching-prefix",
        title: "Secret encrypted with a provider or key name this apiserver does not know",
        patterns: &[r"no matching prefix found"],
        unless: &[],
        source: "kube-apiserver log: `unable to transform key \"/registry/secrets/<ns>/<name>\": no matching prefix found`, usually inside `failed to list *core.Secret` (`storage/cacher.go`, `reflector.go`)",
        cause: "Every encrypted value starts with `k8s:enc:<provider>:v1:<key name>:`; the reader has no key with that provider and name. Talos hard-codes the names: secretbox `key2`, aescbc `key1` (and drops an aescbc-only bundle for Talos >= 1.3). A kubeadm key named anything else (for example `key0`), or a Talos key the kubeadm config lacks, cannot be read by the other side.",
        caught_by: &["encryption-key-name", "encryption-provider", "encryption-missing"],
        fix: &[
            "Talos (<= 1.13) cannot rename its key (`encryption-provider-config` is a denied extra arg), so rename on the kubeadm side and re-encrypt before any Talos node joins",
            "on every kubeadm control plane add a secretbox key `key2` (with the secret the Talos bundle will carry) as the second key of the EncryptionConfiguration; restart every apiserver",
            "make `key2` the first key; restart every apiserver; re-encrypt: `kubectl get secrets -A -o json | kubectl replace -f -`",
            "remove the old key; restart; then import with `capstan import kubeadm --encryption-config …` (cluster.yaml `spec.encryption: {provider: secretbox, keyName: key2}`)",
            "Talos 1.14 multi-document config: a `KubeEtcdEncryptionConfig` document can hold the kubeadm providers as they are",
            RESTART_KUBEADM_APISERVER,
        ],
        procedures: &["rotate-key-name"],
    },
    Entry {
        id: "encryption-identity-reads-encrypted",
        title: "Apiserver without encryption reads a Secret Talos encrypted",
        patterns: &[r"identity transformer tried to read encrypted data"],
        unless: &[],
        source: "kube-apiserver log: `unable to transform key \"/registry/secrets/…\": identity transformer tried to read encrypted data`",
        cause: "This apiserver has no EncryptionConfiguration (or `identity` first without the key), but the value starts with `k8s:enc:`: a Talos apiserver wrote it encrypted. `talosctl gen secrets --from-kubernetes-pki` (and the generated config) always adds a secretbox key, so Talos encrypts a cluster kubeadm never encrypted.",
        caught_by: &["encryption-missing", "encryption-provider", "encryption-resources"],
        fix: &[
            "kubeadm not encrypting: run Talos without encryption: remove `cluster.secretboxEncryptionSecret` (Talos guide step 7; 1.14: remove the `KubeEtcdEncryptionConfig` document); in capstan `spec.encryption.provider: none`, re-render",
            "then rewrite the Secrets Talos already encrypted (their paths are in the log) through an apiserver that still has the key, or delete and recreate them",
            "or, to keep encryption: give every kubeadm apiserver an EncryptionConfiguration with `identity` first and the Talos secretbox `key2` second, restart them, then plan the switch to encrypting everywhere",
        ],
        procedures: &[],
    },
    Entry {
        id: "encryption-illegal-base64",
        title: "Older apiserver without encryption reads a Secret Talos encrypted",
        patterns: &[r"illegal base64 data at input byte"],
        unless: &[r"secrets bundle", r"talosconfig"],
        source: "kube-apiserver log of older releases (v1.25 in siderolabs/talos#7475): `failed to list *core.Secret: illegal base64 data at input byte 3`",
        cause: "Same as `identity transformer tried to read encrypted data` on newer apiservers: this apiserver has no encryption config and decodes the `k8s:enc:…` value a Talos apiserver wrote as plain data. Talos encrypts because `talosctl gen secrets` added a secretbox key the kubeadm cluster does not use.",
        caught_by: &["encryption-missing"],
        fix: &[
            "remove `cluster.secretboxEncryptionSecret` from the Talos config when kubeadm does not encrypt (capstan: `spec.encryption.provider: none`, re-render), or give the kubeadm apiservers the same key",
            "rewrite or recreate the Secrets the Talos apiservers already wrote encrypted",
        ],
        procedures: &[],
    },
    Entry {
        id: "encryption-config-conflict",
        title: "Talos 1.14: encryption set both in v1alpha1 and in KubeEtcdEncryptionConfig",
        patterns: &[r"etcd encryption config is already set in v1alpha1 config"],
        unless: &[],
        source: "Talos 1.14 machine-config validation",
        cause: "A `KubeEtcdEncryptionConfig` document replaces the fixed template, so it conflicts with `cluster.secretboxEncryptionSecret`/`cluster.aescbcEncryptionSecret` in the v1alpha1 document.",
        caught_by: &["encryption-key-name"],
        fix: &[
            "keep one: delete `cluster.secretboxEncryptionSecret` and `cluster.aescbcEncryptionSecret` from the v1alpha1 document when using `KubeEtcdEncryptionConfig`, or drop the document",
        ],
        procedures: &[],
    },
    // ---- denied extra args ------------------------------------------------------
    Entry {
        id: "extra-arg-encryption-provider-config",
        title: "Talos does not let `encryption-provider-config` be overridden",
        patterns: &[r#"extra arg "?encryption-provider-config"? is not allowed"#],
        unless: &[],
        source: "Talos (argsbuilder) when rendering the kube-apiserver static pod",
        cause: "Talos (<= 1.13) renders its own EncryptionConfiguration from `cluster.secretboxEncryptionSecret` (key `key2`) and `cluster.aescbcEncryptionSecret` (key `key1`); the flag cannot point at the kubeadm file.",
        caught_by: &["encryption-key-name"],
        fix: &[
            "remove `encryption-provider-config` from `cluster.apiServer.extraArgs`",
            "carry the kubeadm key as `cluster.secretboxEncryptionSecret`, named `key2` on the kubeadm side (rename and re-encrypt first if it is not; see `encryption-no-matching-prefix`)",
            "Talos 1.14: put the kubeadm providers in a `KubeEtcdEncryptionConfig` document instead",
        ],
        procedures: &[],
    },
    Entry {
        id: "extra-arg-ca-files",
        title: "Talos manages the apiserver/controller-manager CA flags",
        patterns: &[
            r#"extra arg "?(cluster-signing-cert-file|cluster-signing-key-file|root-ca-file|client-ca-file)"? is not allowed"#,
        ],
        unless: &[],
        source: "Talos (argsbuilder) when rendering a control-plane static pod",
        cause: "Talos uses one root CA per cluster (`cluster.ca`) for signing and as root CA; these flags point at it and cannot be overridden. A kubeadm PKI whose `ca.crt` is an intermediate CA cannot be carried over this way.",
        caught_by: &["ca-intermediate"],
        fix: &[
            "remove the flag from `cluster.apiServer.extraArgs` / `cluster.controllerManager.extraArgs`",
            "check the kubeadm CA is self-signed: `openssl x509 -noout -subject -issuer -in /etc/kubernetes/pki/ca.crt` (subject = issuer); with an intermediate CA the certificates must be regenerated from a root before migrating",
        ],
        procedures: &[],
    },
    Entry {
        id: "extra-arg-service-account-keys",
        title: "Talos manages the service-account key flags",
        patterns: &[
            r#"extra arg "?(service-account-key-file|service-account-signing-key-file)"? is not allowed"#,
        ],
        unless: &[],
        source: "Talos (argsbuilder) when rendering the kube-apiserver static pod",
        cause: "Talos writes the service-account key from `cluster.serviceAccount.key` (the bundle's `certs.k8sserviceaccount.key`) and points both flags at it.",
        caught_by: &["secrets-bundle"],
        fix: &[
            "remove the flag; carry the kubeadm `sa.key` in the bundle instead (`capstan import kubeadm --pki …`, or `talosctl gen secrets --from-kubernetes-pki`)",
        ],
        procedures: &[],
    },
    Entry {
        id: "extra-arg-scheduler-config",
        title: "Talos refuses a kube-scheduler configuration file",
        patterns: &[r#"extra arg "?config"? is not allowed"#],
        unless: &[],
        source: "Talos (argsbuilder) when rendering the kube-scheduler static pod from `cluster.scheduler.extraArgs`",
        cause: "Talos writes its own KubeSchedulerConfiguration and refuses `--config` (MergeDenied, Talos `control_plane_static_pod.go` v1.13.9:777). A kubeadm scheduler started with `--config` runs profiles, plugins or weights the Talos schedulers would not.",
        caught_by: &["scheduler-flags"],
        fix: &[
            "remove `config` from `cluster.scheduler.extraArgs`; put the file's profiles in Talos's `cluster.scheduler.config` with a Talos patch overlay (Talos sets its `apiVersion` and `clientConnection.kubeconfig` itself)",
            "`capstan check <cluster-dir> --scheduler-manifest kube-scheduler.yaml` names the kubeadm flags that differ",
        ],
        procedures: &[],
    },
    Entry {
        id: "extra-arg-not-allowed",
        title: "Talos refuses an extra argument it manages itself",
        patterns: &[r#"extra arg "?[a-z0-9-]+"? is not allowed"#],
        unless: &[],
        source: "Talos (argsbuilder) when rendering a control-plane static pod from `cluster.*.extraArgs`",
        cause: "Some flags are owned by Talos (merge policy denied): among them `encryption-provider-config`, `service-account-key-file`, `service-account-signing-key-file`, and the CA files. Copying a kubeadm manifest's flags into `extraArgs` hits them.",
        caught_by: &[],
        fix: &[
            "remove the named flag from `cluster.apiServer.extraArgs` (or `controllerManager`/`scheduler`) and use the Talos setting that feeds it (encryption secrets, the bundle's keys and CAs)",
            "`service-account-issuer` and `api-audiences` are allowed and replace Talos's values (lists from Talos 1.13)",
        ],
        procedures: &[],
    },
    // ---- etcd join ----------------------------------------------------------------
    Entry {
        id: "etcd-too-many-learners",
        title: "etcd 3.5 refused a 3.6 learner (etcd version skew)",
        patterns: &[r"too many learner members? in cluster"],
        unless: &[],
        source: "etcd / Talos etcd service log when the joining Talos node is added as a learner",
        cause: "Talos >= 1.11 runs etcd 3.6 (Talos 1.14: 3.7). A kubeadm etcd 3.5 below v3.5.20 has a learner-promotion bug and refuses; etcd requires >= v3.5.20 and recommends >= v3.5.26 (zombie members) before any 3.6 member joins.",
        caught_by: &["etcd-version-skew"],
        fix: &[
            "see the versions: `kubectl -n kube-system get pods -l component=etcd -o jsonpath='{range .items[*]}{.spec.containers[0].image}{\"\\n\"}{end}'`",
            "upgrade the kubeadm etcd to >= v3.5.26 first, one member at a time (image in `/etc/kubernetes/manifests/etcd.yaml`), waiting for health in between",
            "or pin Talos to a 3.5 etcd until the kubeadm members are gone: `cluster.etcd.image: gcr.io/etcd-development/etcd:v3.5.26`",
            concat!("remove a stuck learner: ", etcdctl!("member list -w table"), ", then `… member remove <hex id>`"),
        ],
        procedures: &[],
    },
    Entry {
        id: "address-conflict",
        title: "A new machine took an address a running node already holds",
        patterns: &[r"(?i)(duplicate (ip )?address|ip address conflict|address conflict)"],
        unless: &[],
        source: "the new VM's console, a switch or firewall log, or `arping -D` on the segment",
        cause: "The in-cluster IPAM provider hands out the lowest free address of its own books (its IPAddress objects) and never probes the wire: an address a running node (a kubeadm node, a VM created after the last backup) holds but no IPAddress books is handed out again, and two hosts answer ARP for it.",
        caught_by: &["addresses-in-use"],
        fix: &[
            "find both holders: `kubectl get nodes -o wide` and `kubectl get ipaddresses -A`",
            "exclude the running node's address from the pool (`excludedAddresses` on the InClusterIPPool), delete the new machine so it is replaced with a free address, and run `capstan check <cluster-dir> --nodes nodes.yaml`",
        ],
        procedures: &[],
    },
    Entry {
        id: "etcd-add-member-failed",
        title: "A Talos node could not add itself to the kubeadm etcd",
        patterns: &[r"error adding member"],
        unless: &[],
        source: "Talos etcd service (`talosctl -n <node> logs etcd`, service events)",
        cause: "Talos joins by calling MemberAddAsLearner on the kubeadm etcd (client port 2379, etcd-CA client certificate). etcd refuses when a learner is already pending (a previous attempt), when 3.5 below v3.5.20 meets a 3.6 learner, when it has no quorum, or when the etcd CA differs from the bundle's. With external etcd nothing listens on the apiserver nodes' 2379, where Talos looks for members: that topology is not supported.",
        caught_by: &["etcd-version-skew", "etcd-topology"],
        fix: &[
            "read the rest of the message; `too many learner` is the version skew",
            concat!("list members and learners: ", etcdctl!("member list -w table"), "; remove stale learners of earlier attempts with `member remove <hex id>`"),
            "make sure the bundle's `certs.etcd` is the kubeadm `/etc/kubernetes/pki/etcd/ca.crt` (`capstan import kubeadm` records its fingerprint in `spec.provenance`)",
        ],
        procedures: &[],
    },
    Entry {
        id: "etcd-remove-self-failed",
        title: "A Talos node tried to remove an etcd member with its own name",
        patterns: &[r"error removing self from the member list"],
        unless: &[],
        source: "Talos etcd service on join",
        cause: "Before joining, Talos removes any etcd member named like its own hostname (a leftover of itself). If the hostname equals a kubeadm member's name it removes that live kubeadm member; this error means the removal was attempted and failed.",
        caught_by: &["etcd-member-name"],
        fix: &[
            concat!("compare names: ", etcdctl!("member list -w table"), " against the Talos hostnames"),
            "give Talos machines names no kubeadm member uses (CABPT `hostname.source: MachineName` with a distinct machine name prefix) before booting them",
        ],
        procedures: &[],
    },
    Entry {
        id: "etcd-member-removed",
        title: "An etcd member was removed from the cluster",
        patterns: &[r"the member has been permanently removed from the cluster"],
        unless: &[],
        source: "etcd log of the removed member (a kubeadm etcd pod)",
        cause: "Something removed this member: CACPPT's etcd audit force-removes every member not named after a CP Machine (all kubeadm members) once all Talos CP machines have a NodeRef, and a joining Talos node removes a member named like its hostname.",
        caught_by: &["etcd-audit", "etcd-member-name"],
        fix: &[
            "stop further removals now: pause the control plane (below)",
            concat!("check quorum: ", etcdctl!("endpoint status --cluster -w table")),
            "a removed kubeadm member cannot come back as it is: move its etcd manifest away, empty `/var/lib/etcd`, `member add` it again and start it with `--initial-cluster-state=existing`, or finish migrating that node",
        ],
        procedures: &["pause"],
    },
    Entry {
        id: "etcd-peer-san",
        title: "etcd rejected a peer whose certificate does not name the address it connects from",
        patterns: &[
            r"does not match any of dnsnames",
            r"rejected connection from .*certificate is valid for",
        ],
        unless: &[],
        source: "etcd log (`rejected connection from \"<ip>:<port>\"`, zap: `\"msg\":\"rejected connection\"`)",
        cause: "etcd checks that a peer's certificate covers the address the connection comes from. Talos etcd certificates carry the hostname as DNS name and the node addresses as IP SANs; kubeadm's carry the addresses kubeadm knew. A node with several addresses, a VIP or NAT dials from an address its certificate does not list.",
        caught_by: &[],
        fix: &[
            "compare the IP in the message with the SANs: `openssl x509 -noout -ext subjectAltName -in /etc/kubernetes/pki/etcd/peer.crt` (kubeadm)",
            "Talos: pin etcd to the node network: `cluster.etcd.advertisedSubnets: [<node CIDR>]` (and `listenSubnets`), so the VIP or a second NIC is not used",
            "kubeadm: add the address to `etcd.local.peerCertSANs`, reissue with `kubeadm init phase certs etcd-peer --config <file>` (after moving the old peer.crt/key away) and restart etcd",
        ],
        procedures: &[],
    },
    Entry {
        id: "etcd-no-endpoints",
        title: "A joining Talos node cannot find the existing etcd members",
        patterns: &[r"no controlplane endpoints discovered yet"],
        unless: &[],
        source: "Talos etcd service on a joining control-plane node",
        cause: "Talos discovers etcd peers from the `default/kubernetes` EndpointSlice (the apiserver IPs), read with its admin credentials through `cluster.controlPlane.endpoint`. Nothing was found: the endpoint is unreachable from the node, the apiservers do not trust Talos's client certificate (a different Kubernetes CA), or the slice is empty.",
        caught_by: &[],
        fix: &[
            "`kubectl -n default get endpointslice -l kubernetes.io/service-name=kubernetes -o wide`",
            "from the node's network: `curl -k https://<endpoint>:6443/healthz`",
            "make sure `cluster.ca` is the kubeadm `ca.crt` (an imported bundle; compare fingerprints with `spec.provenance`)",
        ],
        procedures: &[],
    },
    Entry {
        id: "etcd-waiting-to-join",
        title: "Talos waits to join etcd: never run `talosctl bootstrap` in a migration",
        patterns: &[r"etcd is waiting to join the cluster"],
        unless: &[],
        source: "Talos console/log on a control-plane node with an empty `/var/lib/etcd`",
        cause: "Normal for a moment on a joining node. The printed advice (`please run talosctl bootstrap`) is for new clusters: bootstrapping a migrating node starts a new, empty single-member etcd behind the same load balancer. CACPPT does exactly that by itself unless `status.bootstrapped=true` is set on the TalosControlPlane.",
        caught_by: &["bootstrapped-status"],
        fix: &[
            "do not run `talosctl bootstrap`",
            "make sure `status.bootstrapped` is true (capstan's phase Job sets it; by hand: below)",
            "if it persists, `talosctl -n <node> logs etcd` shows why (no endpoints, `error adding member`, certificates)",
        ],
        procedures: &["set-bootstrapped"],
    },
    Entry {
        id: "talos-bootstrap-refused",
        title: "Talos refused to bootstrap etcd because the node already has etcd data",
        patterns: &[r"etcd data directory is not empty"],
        unless: &[],
        source: "Talos Bootstrap API (`talosctl bootstrap`, CACPPT)",
        cause: "Something asked this node to bootstrap a new etcd cluster (usually CACPPT with `status.bootstrapped` false); Talos refused because it already holds etcd data. Good for this node, but a node that has not joined yet would have accepted.",
        caught_by: &["bootstrapped-status"],
        fix: &[
            "set `status.bootstrapped=true` now (below)",
        ],
        procedures: &["set-bootstrapped"],
    },
    // ---- CACPPT -------------------------------------------------------------------
    Entry {
        id: "cacppt-bootstrap-retry",
        title: "CACPPT is trying to bootstrap a new etcd cluster",
        patterns: &[
            r"bootstrap failed, retrying in 20 seconds",
            r"at least one machine should be provided",
        ],
        unless: &[],
        source: "CACPPT (TalosControlPlane controller) log",
        cause: "`status.bootstrapped` is false, so CACPPT calls the Talos Bootstrap API on the first control-plane Machine unless a machine already has `/var/lib/etcd/member`. With `replicas: 0` it fails harmlessly (`at least one machine should be provided`); the first Talos control-plane machine that has not joined etcd yet would be bootstrapped into a second, empty etcd cluster. Status is a subresource: Argo CD cannot set it from git.",
        caught_by: &["bootstrapped-status"],
        fix: &[
            "set `status.bootstrapped` before any machine exists (below): capstan's phase Job does it in every phase once the imported Secrets exist, and capstan's admission policy refuses the cluster's machines until it is set",
            "it is not preserved by `clusterctl move`: the phase Job sets it again on the next sync",
            "if a node was bootstrapped already: take it out of the load balancer, reset it (`talosctl -n <node> reset`), and check with `etcdctl member list` that the original members are intact",
        ],
        procedures: &["set-bootstrapped"],
    },
    Entry {
        id: "cacppt-noderef",
        title: "CACPPT's etcd audit is waiting: it removes kubeadm etcd members next",
        patterns: &[r"some cp machines do not have a noderef"],
        unless: &[],
        source: "CACPPT `auditEtcd` (every reconcile of an unpaused TalosControlPlane)",
        cause: "The audit only waits while some control-plane Machine lacks a NodeRef. As soon as all have one it force-removes every etcd member whose name is not a CP Machine's node name: every kubeadm member. It runs before scale-up in the same reconcile.",
        caught_by: &["etcd-audit"],
        fix: &[
            "pause before the NodeRefs appear (below)",
            "lift the pause only when no kubeadm etcd member is left (below)",
        ],
        procedures: &["pause", "unpause"],
    },
    Entry {
        id: "node-ref-policy",
        title: "capstan's phase control-plane admission policy refuses a control-plane Machine its nodeRef",
        patterns: &[r"a control-plane machine gets its noderef only while taloscontrolplane"],
        unless: &[],
        source: "Cluster API Machine controller (`Reconciler error`: the Machine's status patch denied by the ValidatingAdmissionPolicy `<cluster>.<namespace>.paused-node-refs.capstan.dev`)",
        cause: "In phase control-plane this is the guard at work: the control plane is unpaused inside the scale Job's window, and a Machine with a nodeRef then would let the provider's etcd audit remove every kubeadm member; Cluster API sets it once the Job has paused again. After the phase it is a leftover: the policy outlived its phase (a sync without prune, `kubectl apply`, or a render of capstan before the policy depended on the TalosControlPlane's `capstan.dev/migration-phase` annotation, which gave it `Prune=false`), and it refuses every new control-plane Machine its nodeRef: every rollout stops at replicas + 1, the etcd audit never runs, and no `clusterctl move` backup can be taken.",
        caught_by: &["phase-leftovers"],
        fix: &[
            "in phase control-plane: nothing to do",
            "after it: sync the phase (its Job deletes the policy and its binding before it lifts the pause), or delete them by hand: `kubectl delete validatingadmissionpolicybindings.admissionregistration.k8s.io/<cluster>.<namespace>.paused-node-refs.capstan.dev validatingadmissionpolicies.admissionregistration.k8s.io/<cluster>.<namespace>.paused-node-refs.capstan.dev --ignore-not-found`",
            "`capstan check <cluster-dir> --management-objects objects.yaml` (with `kubectl get validatingadmissionpolicies,validatingadmissionpolicybindings,taloscontrolplanes,jobs -A -o yaml > objects.yaml`) names every leftover of an earlier phase",
        ],
        procedures: &["unpause"],
    },
    Entry {
        id: "cacppt-foreign-etcd-member",
        title: "CACPPT's etcd audit found (and removes) a kubeadm etcd member",
        patterns: &[r"found etcd member that doesn'?t exist as controlplane machine"],
        unless: &[],
        source: "CACPPT `auditEtcd`",
        cause: "The TalosControlPlane is unpaused and all its machines have NodeRefs, so the audit force-removes members not named after a CP Machine: the kubeadm members. etcd refuses only to remove the last voter.",
        caught_by: &["etcd-audit"],
        fix: &[
            "pause now (below)",
            concat!("check what is left: ", etcdctl!("member list -w table")),
            "re-add removed kubeadm members (empty data dir, `member add`, `--initial-cluster-state=existing`) or finish migrating those nodes",
        ],
        procedures: &["pause"],
    },
    Entry {
        id: "cacppt-etcd-member-count",
        title: "CACPPT's etcd health check counts the kubeadm members",
        patterns: &[
            r"expected to have \d+ members?, got \d+",
            r"error checking etcd health on machine",
        ],
        unless: &[],
        source: "CACPPT `etcdHealthcheck` (condition `EtcdClusterHealthy`)",
        cause: "CACPPT requires as many etcd members as it owns machines, with identical member lists. While kubeadm members exist the count differs, so the check stays red and scale-down waits. Expected during the migration.",
        caught_by: &["etcd-audit"],
        fix: &[
            "expected while kubeadm members exist; do not unpause the TalosControlPlane to make it green: that runs the etcd audit, which removes the kubeadm members",
            "it clears once the last kubeadm member is removed (`kubeadm reset` on that node)",
        ],
        procedures: &[],
    },
    Entry {
        id: "cacppt-paused",
        title: "The TalosControlPlane is paused",
        patterns: &[r"reconciliation is paused for this object"],
        unless: &[],
        source: "CACPPT (TalosControlPlane controller) log, on every requeue of a paused control plane",
        cause: "Expected during phase control-plane: the provider must not reconcile while kubeadm etcd members exist. After it, the pause annotation that the scale Job re-asserted belongs to that Job's field manager, and server-side apply (Argo CD) never removes a field another manager owns: git dropping it does not unpause, so the kubeconfig client certificate is never rotated and, after a version bump, CAPI holds every worker MachineSet.",
        caught_by: &["guarded-unpause", "phase-leftovers"],
        fix: &[
            "in phase control-plane: nothing to do",
            "after it: lift the pause (below)",
        ],
        procedures: &["unpause"],
    },
    Entry {
        id: "cacppt-preflight-hold",
        title: "The control-plane provider holds scale-up on preflight checks",
        patterns: &[r"waiting for control plane to pass preflight checks"],
        unless: &[],
        source: "Warning event `ControlPlaneUnhealthy` on the TalosControlPlane (the community control-plane provider v0.9 and later)",
        cause: "Releases of the community control-plane provider run KCP-style preflight checks before scale-up: every Machine with a Node and etcd members equal to machines. While kubeadm members exist that never passes, so the migration's one-window design creates one machine, and the etcd audit can remove the kubeadm members as soon as that machine has a node.",
        caught_by: &["provider-releases"],
        fix: &[
            "pause now (below); if a Talos machine was created, roll the phase back (below)",
            "migrate on the provider releases capstan verified (`capstan check --providers FILE`), then upgrade after phase complete",
        ],
        procedures: &["pause", "rollback-control-plane"],
    },
    Entry {
        id: "etcd-quorum-lost",
        title: "etcd lost quorum",
        patterns: &[
            r"etcdserver: no leader",
            r"etcdserver: request timed out",
            r"raft: .*lost leader",
        ],
        unless: &[],
        source: "kube-apiserver and etcd logs, `etcdctl endpoint health`",
        cause: "Fewer than a majority of etcd voters are up. During phase control-plane etcd has the kubeadm and the Talos members (3 + 3 = 6 voters, quorum 4): deleting the Talos control-plane Machines before removing their members (Talos does not leave etcd when powered off), or one ESXi host holding several control-plane VMs, takes 3 of 6 down. After the migration one host holding 2 of 3 control-plane VMs is enough; with a Talos VIP the endpoint goes too (only a node with a healthy etcd announces it).",
        caught_by: &["control-plane-hosts"],
        fix: &[
            "in phase control-plane before the first kubeadm member was removed: restore quorum from one kubeadm member, then roll the phase back in the documented order (below)",
            "once a kubeadm member was removed, and in phases workers and complete: restore quorum on the Talos side from a snapshot, talking to the nodes at their own addresses (below)",
            "afterwards keep the control-plane VMs on separate hosts (below; `capstan check --vsphere-inventory` shows where they run)",
        ],
        procedures: &["restore-quorum", "rollback-control-plane", "recover-talos-quorum", "anti-affinity"],
    },
    Entry {
        id: "etcd-snapshot-unusable",
        title: "An etcd snapshot that etcd will not restore",
        patterns: &[
            r"snapshot missing hash but --skip-hash-check=false",
            r"expected sha256 \[[^\]]*\], got \[",
            r"sha256 checksum not found",
        ],
        unless: &[],
        source: "`etcdutl snapshot restore`, `etcdctl snapshot restore`, `talosctl bootstrap --recover-from` (the node's log), `talosctl etcd snapshot`",
        cause: "etcd's snapshot is the database followed by its SHA-256, and the restore checks it. A file without it is a copy of a member's data file (`member/snap/db`, what `talosctl cp` copies when the snapshot API fails) or was cut off; a SHA-256 that does not match means the file was damaged or truncated on its way off the node.",
        caught_by: &["etcd-snapshot"],
        fix: &[
            "a copy of the data file: restore it with `--skip-hash-check` (`etcdutl`) or `--recover-skip-hash-check` (`talosctl bootstrap`), and only such a copy",
            "otherwise take the snapshot again (below) and check it before you rely on it: `capstan check <cluster directory> --etcd-snapshot <file>`",
        ],
        procedures: &["etcd-snapshot", "recover-talos-quorum"],
    },
    // ---- control-plane endpoint -------------------------------------------------------
    Entry {
        id: "endpoint-stale-backends",
        title: "The control-plane endpoint refuses connections after a control-plane rollout",
        patterns: &[r"dial tcp \S+:\d+: connect: (connection refused|no route to host)"],
        unless: &[],
        source: "kubectl, Argo CD, the management cluster's controllers (`Get \"https://<endpoint>:6443/...\": dial tcp …`)",
        cause: "Cluster API replaced the control-plane VMs (every content-hash change rolls them: a Talos or Kubernetes upgrade, a template or patch change), and the new machines took new addresses. A load balancer whose backends were the old machines points only at deleted VMs once the rollout has replaced them all (provider review B7). Also seen when a Talos VIP's interface name is wrong (no node announces it) or, briefly, while the VIP moves off a machine being replaced (up to 60 s).",
        caught_by: &["endpoint-strategy", "apiserver-uncarried", "kubeadm-bind-port"],
        fix: &[
            "if the Talos apiservers refuse on the load balancer's backend port: they listen on `spec.endpoint.backendPort` (Talos's `cluster.controlPlane.localAPIServerPort`, 6443 when absent), which must be the port kubeadm's apiservers bound (`--secure-port`, `localAPIEndpoint.bindPort`); `capstan check --apiserver-manifest … --kubeadm-config …` compares them",
            "now: add the control-plane machines' current addresses to the load balancer (`kubectl get nodes -l node-role.kubernetes.io/control-plane -o wide`; on the management cluster `kubectl get machines -o wide`), each with a TCP health check",
            "for good: set `spec.endpoint.strategy` in `cluster.yaml`: `external` with `controlPlanePool` (exactly replicas + 1 addresses, which the load balancer lists), or `vip` with `vip: {address, link}`; `capstan plan` gives the hand-over",
            "with a VIP: `talosctl -n <cp-node> get links` must list `spec.endpoint.vip.link`, and `talosctl -n <cp-node> get addresses` shows the VIP on the node holding it",
        ],
        procedures: &[],
    },
    // ---- images ----------------------------------------------------------------------
    Entry {
        id: "image-pull-registry",
        title: "Talos control-plane or kube-proxy images cannot be pulled",
        patterns: &[r"\b(ErrImagePull|ImagePullBackOff)\b"],
        unless: &[],
        source: "`kubectl get pods -n kube-system` on the workload cluster, `talosctl -n <node> containers -k`",
        cause: "Talos pulls its control-plane images from registry.k8s.io (and ghcr.io for Talos's own), not from kubeadm's `imageRepository`; a fleet that reaches only its own registry needs a mirror for each in `spec.talos.registryMirrors`.",
        caught_by: &["kubeadm-config"],
        fix: &[
            "see what is pulled from where: `kubectl -n kube-system describe pod <pod>` (the Events name the image and the error)",
            "add a mirror for the registry in `spec.talos.registryMirrors` of cluster.yaml (`registry.k8s.io: [https://<your registry>/v2/registry.k8s.io]`), render and sync",
        ],
        procedures: &[],
    },
    // ---- bootstrap token -----------------------------------------------------------
    Entry {
        id: "kubelet-csr-unauthorized",
        title: "Kubelet bootstrap token rejected (expired or missing token Secret)",
        patterns: &[
            r"cannot create certificate signing request: unauthorized",
            r"failed while requesting a signed certificate from the control plane.*unauthorized",
        ],
        unless: &[],
        source: "kubelet log (`certificate_manager.go`) on a new Talos node",
        cause: "Talos kubelets authenticate with `cluster.token` (the bundle's `secrets.bootstraptoken`). The cluster has no matching `kube-system/bootstrap-token-<id>` Secret: a kubeadm token expires after 24 h by default and the token cleaner deletes it, and Talos does not recreate an object it already applied once.",
        caught_by: &["bootstrap-token"],
        fix: &[
            "check: `kubectl -n kube-system get secret bootstrap-token-<id> -o jsonpath='{.data.expiration}'` (no Secret, or a past date, is the problem)",
            "recreate the same token without expiry on a kubeadm control plane: `kubeadm token create <id>.<secret> --ttl 0`, or apply the Secret capstan sealed at import: `capstan secrets decrypt -i IDENTITY clusters/<cluster>/secrets/workload/bootstrap-token-<id>.yaml | kubectl apply -f -` (against the workload cluster)",
        ],
        procedures: &[],
    },
    // ---- kube-proxy ---------------------------------------------------------------------
    Entry {
        id: "kube-proxy-selector-immutable",
        title: "kube-proxy DaemonSet selector differs from Talos's",
        patterns: &[
            r"kube-proxy.*field is immutable",
            r"field is immutable.*kube-proxy",
        ],
        unless: &[],
        source: "Talos Kubernetes upgrade (`talosctl upgrade-k8s`) or manifest sync updating `kube-system/kube-proxy`",
        cause: "Talos manages kube-proxy with the selector `k8s-app: kube-proxy` + `tier: node`; the kubeadm DaemonSet selects only `k8s-app: kube-proxy`, and `spec.selector` is immutable.",
        caught_by: &["kube-proxy-labels"],
        fix: &[
            "export: `kubectl -n kube-system get ds kube-proxy -o yaml > kube-proxy.yaml`; add `tier: node` and `k8s-app: kube-proxy` to `metadata.labels`, `spec.selector.matchLabels` and `spec.template.metadata.labels`; drop `status`, `resourceVersion`, `uid`, `creationTimestamp`",
            "replace it: `kubectl -n kube-system delete ds kube-proxy && kubectl apply -f kube-proxy.yaml` (service rules already programmed stay in place meanwhile)",
        ],
        procedures: &[],
    },
    // ---- secrets bundle (talosctl, CABPT) ----------------------------------------
    Entry {
        id: "bundle-encryption-secret-required",
        title: "talosctl wants an encryption secret in the bundle",
        patterns: &[
            r"one of \[secrets\.secretboxencryptionsecret, secrets\.aescbcencryptionsecret\] is required",
        ],
        unless: &[],
        source: "`talosctl gen config --with-secrets` (Talos >= 1.11 validates the bundle)",
        cause: "The bundle has neither `secrets.secretboxencryptionsecret` nor `secrets.aescbcencryptionsecret`, as for a kubeadm cluster that does not encrypt. talosctl >= 1.11 requires exactly one; CABPT does not validate and accepts it.",
        caught_by: &["encryption-missing"],
        fix: &[
            "for talosctl: put any secretbox secret in the bundle for validation, then remove it from the generated config (Talos guide step 7): `talosctl gen config … --with-secrets secrets.yaml --config-patch-control-plane '[{\"op\":\"remove\",\"path\":\"/cluster/secretboxEncryptionSecret\"}]'`",
            "with capstan and Cluster API: `spec.encryption.provider: none`; the bundle is used by CABPT as is",
        ],
        procedures: &[],
    },
    Entry {
        id: "bundle-encryption-secret-both",
        title: "The bundle holds both a secretbox and an aescbc secret",
        patterns: &[
            r"only one of \[secrets\.secretboxencryptionsecret, secrets\.aescbcencryptionsecret\] is allowed",
        ],
        unless: &[],
        source: "`talosctl gen config --with-secrets` (Talos >= 1.11)",
        cause: "Talos takes exactly one encryption secret. For talosVersion >= 1.3 only the secretbox secret is copied into the machine config; an aescbc key is silently dropped.",
        caught_by: &["encryption-key-name"],
        fix: &[
            "keep the one the kubeadm cluster writes with: secretbox `key2` (delete `aescbcencryptionsecret`); an aescbc kubeadm key must be moved to secretbox `key2` and everything re-encrypted first, or patched in as `cluster.aescbcEncryptionSecret` (key `key1`)",
        ],
        procedures: &[],
    },
    Entry {
        id: "secrets-bundle-invalid",
        title: "talosctl cannot load or validate the secrets bundle",
        patterns: &[
            r"failed to (load|validate) secrets bundle",
            r"certs\.(etcd|k8s|k8saggregator|k8sserviceaccount|os)(\.key)? is (required|invalid)",
            r"(cluster\.id|cluster\.secret|secrets\.bootstraptoken|trustdinfo\.token) is required",
        ],
        unless: &[],
        source: "`talosctl gen config --with-secrets` and other talosctl commands reading `secrets.yaml`",
        cause: "The bundle file is not what Talos expects: a missing field (`cluster.id`, `cluster.secret`, `secrets.bootstraptoken`, `trustdinfo.token`, a CA), a certificate or key that is not base64 of a PEM file, or a key type Talos does not read.",
        caught_by: &["secrets-bundle"],
        fix: &[
            "regenerate it from the kubeadm PKI instead of editing it: `capstan import kubeadm …` (then `capstan secrets decrypt clusters/<name>/secrets.age > secrets.yaml` for talosctl), or `talosctl gen secrets --from-kubernetes-pki <dir> --kubernetes-bootstrap-token <token>`",
            "every `crt`/`key` value is standard base64 of the whole PEM file; the field named in the message is the one to fix",
        ],
        procedures: &[],
    },
    Entry {
        id: "talosctl-pki-import-failed",
        title: "`talosctl gen secrets --from-kubernetes-pki` cannot read the kubeadm PKI",
        patterns: &[r"failed to create secrets bundle"],
        unless: &[],
        source: "`talosctl gen secrets --from-kubernetes-pki DIR`",
        cause: "It reads exactly `ca.crt`/`ca.key`, `etcd/ca.crt`/`etcd/ca.key`, `front-proxy-ca.crt`/`front-proxy-ca.key` and `sa.key` from DIR; one is missing (an external etcd, an incomplete copy) or DIR is not a directory.",
        caught_by: &[],
        fix: &[
            "copy the whole `/etc/kubernetes/pki` of a kubeadm control-plane node, keeping `etcd/`",
            "`capstan import kubeadm --pki <dir> …` reads the same files and names the one missing",
        ],
        procedures: &[],
    },
    Entry {
        id: "cabpt-bundle-missing",
        title: "CABPT found no secrets bundle yet (it may generate a new one)",
        patterns: &[r"secrets bundle is missing"],
        unless: &[],
        source: "CABPT (TalosConfig controller), writing the talosconfig",
        cause: "The `<cluster>-talos` Secret (key `bundle`) does not exist yet. CABPT creates it when missing, with new CAs and keys, on the first TalosConfig it renders: machines booted from it cannot join the kubeadm cluster.",
        caught_by: &["secrets-bundle"],
        fix: &[
            "apply the sealed `<cluster>-talos` and `<cluster>-ca` Secrets (decrypted by your SOPS tooling) before any TalosConfig: `kubectl -n <ns> get secret <cluster>-talos <cluster>-ca`",
            "if CABPT generated its own: replace both Secrets with the imported ones before any machine boots, and delete the bootstrap data of machines that used it",
        ],
        procedures: &[],
    },
    Entry {
        id: "cabpt-bundle-unmarshal",
        title: "CABPT cannot parse the `<cluster>-talos` Secret",
        patterns: &[r"error unmarshal(l)?ing secrets bundle"],
        unless: &[],
        source: "CABPT (TalosConfig controller)",
        cause: "The `bundle` key of `<cluster>-talos` is not a Talos secrets bundle YAML: the wrong key name, base64 applied twice (`stringData` vs `data`), still SOPS ciphertext, or fields with the wrong encoding.",
        caught_by: &["secrets-bundle"],
        fix: &[
            "look at it: `kubectl -n <ns> get secret <cluster>-talos -o jsonpath='{.data.bundle}' | base64 -d | head` must show `cluster:`, `secrets:`, `trustdinfo:`, `certs:`",
            "re-apply the Secret capstan sealed, decrypted (`capstan render --decrypt` or your SOPS tooling)",
        ],
        procedures: &[],
    },
    Entry {
        id: "cabpt-none-without-data",
        title: "TalosConfig with `generateType: none` but no `data`",
        patterns: &[r"failed to specify config data with none generate type"],
        unless: &[],
        source: "CABPT (TalosConfig controller)",
        cause: "`generateType: none` means \"use `spec.data` as the whole machine config\", and `spec.data` is empty.",
        caught_by: &[],
        fix: &[
            "use `generateType: controlplane` or `worker` (what capstan renders), or put the full machine config in `spec.data`",
        ],
        procedures: &[],
    },
    // ---- kubeadm ↔ Talos parity (check::parity, check::nodes) -------------------------------
    Entry {
        id: "apiserver-certificate-name",
        title: "A client reaches an apiserver by a name its certificate lacks",
        patterns: &[r"x509: certificate is valid for .*, not "],
        unless: &[r"rejected connection"],
        source: "any client of the apiserver (kubectl, kubelet, controllers, CI) connecting through the load balancer or the `kubernetes` Service",
        cause: "The client connects by a name or address (a DNS alias, the LB's IP, an old endpoint) that the kubeadm apiserver certificate holds (kubeadm `apiServer.certSANs`) but the Talos apiserver certificate does not: Talos puts in only the endpoint host, `cluster.apiServer.certSANs`, the `kubernetes` Service names, the node's own names and loopback. It fails whenever the request lands on a Talos apiserver, so it looks intermittent while both run.",
        caught_by: &["endpoint-certificate-san", "apiserver-cert-sans"],
        fix: &[
            "list the names the kubeadm certificate holds: `openssl x509 -noout -ext subjectAltName -in /etc/kubernetes/pki/apiserver.crt`",
            "add every name clients use (less the kubeadm nodes' own) to `spec.apiServer.certSANs` in cluster.yaml and sync: the Talos control-plane machines reissue their certificates with it",
        ],
        procedures: &[],
    },
    Entry {
        id: "client-unauthorized",
        title: "A credential the kubeadm apiservers accept is refused by a Talos apiserver",
        patterns: &[r"You must be logged in to the server \(Unauthorized\)"],
        unless: &[],
        source: "`kubectl` and other clients using OIDC, webhook token or client credentials, when the request reaches a Talos apiserver",
        cause: "The Talos apiservers do not authenticate the way the kubeadm ones do: kubeadm runs `--oidc-*`, `--authentication-token-webhook-config-file` or other authentication flags that were not carried into `spec.apiServer.extraArgs` (with the files they name), or the token's issuer or audience is not accepted. It fails whenever the request lands on a Talos apiserver.",
        caught_by: &["apiserver-flags", "apiserver-uncarried", "service-account-issuer", "service-account-audiences"],
        fix: &[
            "compare the flags: `capstan check <cluster-dir> --apiserver-manifest kube-apiserver.yaml` lists every kube-apiserver flag Talos would run differently",
            "carry them in `spec.apiServer.extraArgs` (a file a flag names goes onto the Talos control-plane nodes with a Talos patch overlay: `machine.files` and `cluster.apiServer.extraVolumes`)",
        ],
        procedures: &[],
    },
    Entry {
        id: "cluster-info-unsigned",
        title: "kubeadm join finds no signature for its token in cluster-info",
        patterns: &[r"no JWS signed token in the cluster-info ConfigMap", r"there is no JWS signed token"],
        unless: &[],
        source: "`kubeadm join` with token discovery, during or after phase `control-plane`",
        cause: "The bootstrapsigner controller of kube-controller-manager signs `kube-public/cluster-info` for each bootstrap token. kubeadm runs `--controllers=*,bootstrapsigner,tokencleaner`; Talos runs `*,tokencleaner`, so while a Talos instance holds the `kube-system/kube-controller-manager` lease a new token is never signed.",
        caught_by: &["controller-manager-flags"],
        fix: &[
            "set `spec.controllerManager.extraArgs: {controllers: bootstrapsigner}` in cluster.yaml (appended to Talos's list; `import kubeadm --controller-manager-manifest` writes it) and sync",
            "`capstan check <cluster-dir> --controller-manager-manifest kube-controller-manager.yaml` lists every other flag that differs",
        ],
        procedures: &[],
    },
    Entry {
        id: "healthz-unauthorized",
        title: "Load-balancer health checks get 401 from the Talos apiservers",
        patterns: &[r"/(?:healthz|livez|readyz)\b.*\b401\b", r"\b401\b.*/(?:healthz|livez|readyz)\b"],
        unless: &[],
        source: "the load balancer's HTTP health check, or an apiserver audit/access log",
        cause: "Talos runs kube-apiserver with `--anonymous-auth=false`; kubeadm runs kube-apiserver's default (`true`), so unauthenticated `GET /healthz` (`/livez`, `/readyz`) worked. The load balancer marks every Talos apiserver down, and once the kubeadm ones are gone the API is unreachable.",
        caught_by: &["anonymous-auth"],
        fix: &[
            "set `spec.apiServer.extraArgs: {anonymous-auth: \"true\"}` in cluster.yaml (what kubeadm ran; RBAC still grants anonymous users only the health endpoints), or switch the health check to TCP or to authenticated HTTPS",
        ],
        procedures: &[],
    },
    Entry {
        id: "pod-security-violation",
        title: "Pods refused by Pod Security admission on a Talos apiserver",
        patterns: &[r#"violates PodSecurity ""#],
        unless: &[],
        source: "kube-apiserver admission, in the events of a ReplicaSet, DaemonSet or Job (`FailedCreate`), or `kubectl apply`",
        cause: "Talos's generated configuration enforces the Pod Security level `baseline` on every namespace but kube-system; a kubeadm apiserver without an admission configuration enforces nothing (`privileged`). Pods that ran for years are refused whenever their creation reaches a Talos apiserver.",
        caught_by: &["pod-security"],
        fix: &[
            "set `spec.apiServer.podSecurity` to the level the kubeadm apiservers enforce (`privileged` when they have no admission configuration) and sync; label namespaces (`pod-security.kubernetes.io/enforce`) to tighten them one at a time afterwards",
        ],
        procedures: &[],
    },
    Entry {
        id: "etcd-space-exceeded",
        title: "etcd is out of space (NOSPACE alarm): the API is read-only",
        patterns: &[r"mvcc: database space exceeded", r"alarm:NOSPACE"],
        unless: &[],
        source: "kube-apiserver and etcd logs, `etcdctl alarm list`, any write to the API",
        cause: "A Talos etcd member runs with etcd's default 2 GiB backend quota (Talos sets no `--quota-backend-bytes`) while the kubeadm members ran with a larger one, and the database outgrew the smaller quota: the member raises the cluster-wide NOSPACE alarm and etcd refuses every write.",
        caught_by: &["etcd-args", "etcd-db-size"],
        fix: &[
            "set `spec.etcd.extraArgs.quota-backend-bytes` to the kubeadm value (`capstan check --kubeadm-config` names it) and sync, so the Talos members restart with it",
            "then compact and defragment one member at a time and clear the alarm: `talosctl -n <node> etcd defrag`, `talosctl -n <node> etcd alarm disarm`",
        ],
        procedures: &[],
    },
    Entry {
        id: "node-not-initialized-by-cloud-provider",
        title: "Talos nodes wait for a cloud controller manager; their Machines get no nodeRef",
        patterns: &[
            r"node\.cloudprovider\.kubernetes\.io/uninitialized",
            r"Waiting for a Node with spec\.providerID",
        ],
        unless: &[],
        source: "Node taints and pending pods' events (`untolerated taint`), Machine conditions (`kubectl describe machine`)",
        cause: "Talos nodes run kubelet `--cloud-provider=external` and register tainted `node.cloudprovider.kubernetes.io/uninitialized` until a cloud controller manager initialises them; only the vSphere CPI sets the `vsphere://` providerID Cluster API matches Machines by. Without it the taint stays, ordinary pods do not schedule, Machines never get a nodeRef, and rollouts and scale-down wait forever.",
        caught_by: &["cloud-provider"],
        fix: &[
            "install the vSphere cloud controller manager (kubernetes/cloud-provider-vsphere, the release for the cluster's Kubernetes minor) configured for the cluster's vCenter, tolerating the taint; it then initialises the waiting nodes",
            "verify: `kubectl get nodes -o custom-columns=NAME:.metadata.name,ID:.spec.providerID` shows `vsphere://…` for every Talos node; `capstan check <cluster-dir> --nodes nodes.yaml` checks it beforehand",
        ],
        procedures: &[],
    },
    Entry {
        id: "strategic-patch-load-failed",
        title: "The Talos bootstrap provider cannot load the rendered config patch",
        patterns: &[r"failure loading StrategicPatch"],
        unless: &[],
        source: "CABPT (`talosconfig` controller) Reconciler error, TalosConfig status",
        cause: "The patch uses a Talos config field or value type the provider's Talos machinery does not know: for example a list-valued `service-account-issuer` (Talos 1.13) with CABPT below v0.6.12, built with the v1.12 machinery where extraArgs values are strings.",
        caught_by: &["provider-releases"],
        fix: &[
            "upgrade CABPT to a release built for the Talos minor in `spec.versions.talos` (`capstan check --providers` names the release), or drop the field the patch cannot carry",
        ],
        procedures: &[],
    },
    Entry {
        id: "container-caps-not-permitted",
        title: "A container asks for a capability Talos never grants (the CNI does not start)",
        patterns: &[r"unable to apply caps: operation not permitted"],
        unless: &[],
        source: "kubelet and containerd on a Talos node: the pod's events (`StartError`, `CrashLoopBackOff`), `talosctl logs cri`",
        cause: "Talos starts containerd with `CAP_SYS_MODULE` and `CAP_SYS_BOOT` dropped from its bounding set, so runc cannot give them to any container that lists them in `securityContext.capabilities.add`. Default Cilium asks for `SYS_MODULE` (agent and clean-cilium-state), so the CNI never starts on Talos nodes and they stay NotReady.",
        caught_by: &["cni-daemonset"],
        fix: &[
            "drop `SYS_MODULE` (and `SYS_BOOT`) from the container's `capabilities.add`: for Cilium set the Helm values `securityContext.capabilities.ciliumAgent` and `securityContext.capabilities.cleanCiliumState` as Talos's Cilium guide lists them, with `cgroup.autoMount.enabled=false` and `cgroup.hostRoot=/sys/fs/cgroup`",
            "roll the DaemonSet out on the kubeadm nodes first and check again: `capstan check <cluster-dir> --cni-daemonset cni.yaml`",
        ],
        procedures: &[],
    },
    Entry {
        id: "node-selector-unmatched",
        title: "Pods select node labels no (Talos) node carries",
        patterns: &[r"didn't match Pod's node affinity/selector"],
        unless: &[],
        source: "the scheduler, in a pending pod's events (`FailedScheduling`)",
        cause: "During and after the worker migration, pods keep selecting the labels the kubeadm workers had (a role such as `node-role.kubernetes.io/ingress`, or a label of the operator's own), but the worker pool that replaced them does not set them: once the kubeadm workers are drained, nothing matches.",
        caught_by: &["node-labels"],
        fix: &[
            "compare: `kubectl get nodes --show-labels` (the kubeadm workers' labels and `spec.taints`) with `spec.workers[].labels` and `taints` in cluster.yaml",
            "add them to the pool and sync: `node-role.kubernetes.io/*` reach the Nodes through the Machines (in place), the others through Talos's `machine.nodeLabels` (a new TalosConfigTemplate: the pool's machines roll)",
        ],
        procedures: &[],
    },
    Entry {
        id: "too-many-pods",
        title: "Nodes are full at the kubelet's pod limit",
        patterns: &[r"Too many pods"],
        unless: &[],
        source: "the scheduler, in a pending pod's events (`FailedScheduling`)",
        cause: "Every node has as many pods as its kubelet's `maxPods` allows. Talos kubelets run the kubelet's default (110) unless `machine.kubelet.extraConfig.maxPods` says otherwise; kubeadm kubelets configured for more (the `kubelet-config` ConfigMap) held pods the Talos workers that replace them cannot.",
        caught_by: &["kubelet-config"],
        fix: &[
            "compare: `kubectl -n kube-system get cm kubelet-config -o yaml` (maxPods) with `spec.kubelet.extraConfig.maxPods` in cluster.yaml",
            "set `spec.kubelet.extraConfig.maxPods` to the kubeadm value (within what the pod CIDR's per-node range allows) and sync",
        ],
        procedures: &[],
    },
    Entry {
        id: "pdb-eviction-refused",
        title: "A drain waits on a PodDisruptionBudget that allows no eviction",
        patterns: &[r"Cannot evict pod as it would violate the pod.s disruption budget"],
        unless: &[],
        source: "`kubectl drain` (`error when evicting pods/\"…\" (will retry after 5s)`), Cluster API's Machine controller (`DrainingSucceeded` False, the Machine stays `Deleting`)",
        cause: "Draining a node evicts its pods through the Eviction API, which refuses an eviction its PodDisruptionBudget does not allow. A budget with `maxUnavailable: 0`, or `minAvailable` equal to its pods, never allows one; one at `disruptionsAllowed: 0` for now (a pod unhealthy) allows one once its pods are healthy. `kubectl drain` retries until its `--timeout`; Cluster API's drain retries without limit unless `spec.deletion.nodeDrainTimeoutSeconds` is set, and past a set timeout it deletes the machine with the protected pods.",
        caught_by: &["worker-pdb-no-disruption"],
        fix: &[
            "find it: `kubectl get pdb -A` (ALLOWED DISRUPTIONS 0) and the pods it selects on the node being drained",
            "with the workload's owners: scale it up by one first (the new pod starts on another node and the budget then allows one eviction), or relax the budget for the move (`maxUnavailable: 1`); a budget at 0 only because a pod is unhealthy clears once it is healthy",
            "never `kubectl drain --disable-eviction` (it deletes past the budget); before the worker phase, `capstan check <cluster-dir> --workloads workloads.json` (`kubectl get pv,pdb,pods -A -o json > workloads.json`) lists these budgets",
        ],
        procedures: &[],
    },
    Entry {
        id: "drain-unmanaged-pods",
        title: "A drain stops at Pods no controller owns",
        patterns: &[r"cannot delete Pods that declare no controller"],
        unless: &[],
        source: "`kubectl drain` (k8s.io/kubectl `pkg/drain/filters.go`)",
        cause: "A Pod created directly (no Deployment, StatefulSet, Job… owning it) is not recreated anywhere once it is deleted, so `kubectl drain` refuses to delete it unless `--force` is given; with `--force` it is gone for good.",
        caught_by: &["worker-bare-pods"],
        fix: &[
            "list them: `kubectl get pods -A --field-selector spec.nodeName=<node> -o json | jq -r '.items[] | select(.metadata.ownerReferences == null) | .metadata.namespace + \"/\" + .metadata.name'`",
            "recreate each under a controller on the other nodes, or delete it once its owner agrees; then drain again without `--force`",
        ],
        procedures: &[],
    },
    Entry {
        id: "volume-node-affinity-conflict",
        title: "A pod's volume is pinned to a node that is gone",
        patterns: &[r"volume node affinity conflict"],
        unless: &[],
        source: "the scheduler, in a pending pod's events (`FailedScheduling`)",
        cause: "The pod's PersistentVolume has a required nodeAffinity (a `local` volume, or a provisioner that pins volumes to one node) naming a node no longer there, such as a kubeadm worker drained and removed during the worker phase: the pod can never schedule, and the data stayed on the removed VM's disk.",
        caught_by: &["worker-local-volumes"],
        fix: &[
            "if the node's VM still exists, bring it back (uncordon it) and move the data first",
            "a replicated store: delete the stuck replica's PVC and pod so it is recreated on a volume the Talos workers can mount (vSphere CSI) and resyncs from the others; anything else: restore from a backup into such a volume",
            "before the worker phase, `capstan check <cluster-dir> --workloads workloads.json` lists the volumes pinned to kubeadm workers",
        ],
        procedures: &[],
    },
    Entry {
        id: "insufficient-resources",
        title: "No node has room for a pod's requests",
        patterns: &[r"Insufficient (cpu|memory)"],
        unless: &[],
        source: "the scheduler, in a pending pod's events (`FailedScheduling`)",
        cause: "The pods evicted from the kubeadm workers need more CPU or memory (their requests) than the Talos worker pools offer, after what each node keeps for the kubelet, Talos and its DaemonSets.",
        caught_by: &["worker-pool-capacity"],
        fix: &[
            "raise the pools' `replicas`, or their machines' `numCPUs`/`memoryMiB`, in cluster.yaml (or the autoscaler's maximum) and sync; uncordon a kubeadm worker not yet removed meanwhile",
            "before the worker phase, `capstan check <cluster-dir> --workloads workloads.json` compares the kubeadm workers' requests with the pools",
        ],
        procedures: &[],
    },
    Entry {
        id: "field-is-immutable",
        title: "An update changes a field Kubernetes does not allow to change",
        patterns: &[r"field is immutable"],
        unless: &[r"kube-proxy"],
        source: "`kubectl apply`, Argo CD sync, Talos manifest sync: any update of an existing object",
        cause: "The update changes an immutable field: a DaemonSet's or Deployment's `spec.selector`, a Service's `clusterIP`, a Job's template, a provider's immutable template spec (CAPV's VSphereMachineTemplate, whose changes capstan renders as a new template name instead). A manifest written for one cluster is applied over an object another tool created with other values.",
        caught_by: &[],
        fix: &[
            "find the object and field in the message; compare `kubectl get <kind> <name> -o yaml` with the manifest",
            "make the manifest keep the existing value; or replace the object (`kubectl delete` then apply: its pods or machines go with it, so do it where that is safe); for a Cluster API template, render a new name rather than editing it in place",
        ],
        procedures: &[],
    },
    // ---- PKI -------------------------------------------------------------------------------
    Entry {
        id: "x509-unknown-authority",
        title: "A TLS peer does not trust the other side's CA",
        patterns: &[r"x509: certificate signed by unknown authority"],
        unless: &[],
        source: "any TLS client: kubelet, apiserver, etcd, talosctl, kubectl",
        cause: "In a migration this means the two sides do not share a CA: the Talos machines run from a bundle that was not imported from the kubeadm PKI (generated fresh, or by CABPT before the imported Secret existed), or the kubeadm CA is an intermediate that Talos uses as a root.",
        caught_by: &["secrets-bundle", "ca-intermediate"],
        fix: &[
            "compare fingerprints: `openssl x509 -noout -fingerprint -sha256 -in /etc/kubernetes/pki/ca.crt` (and `etcd/ca.crt`, `front-proxy-ca.crt`) with `spec.provenance` in cluster.yaml and with `kubectl -n <ns> get secret <cluster>-ca -o jsonpath='{.data.tls\\.crt}' | base64 -d | openssl x509 -noout -fingerprint -sha256`",
            "check the kubeadm CA is self-signed: `openssl x509 -noout -subject -issuer -in /etc/kubernetes/pki/ca.crt`",
        ],
        procedures: &[],
    },
];

/// The compiled patterns: one set over every entry's patterns, and each entry's vetoes.
struct Compiled {
    set: RegexSet,
    /// Entry index of each pattern in `set`.
    owner: Vec<usize>,
    /// Per entry, the compiled `unless` patterns.
    unless: Vec<Vec<Regex>>,
}

fn compile(pattern: &str) -> Result<Regex, regex::Error> {
    regex::RegexBuilder::new(pattern)
        .case_insensitive(true)
        .build()
}

static COMPILED: LazyLock<Compiled> = LazyLock::new(|| {
    let mut owner = Vec::new();
    let mut sources = Vec::new();
    for (i, e) in ENTRIES.iter().enumerate() {
        for p in e.patterns {
            owner.push(i);
            sources.push(*p);
        }
    }
    // The patterns are static; `tests::every_pattern_compiles` proves these cannot fail.
    let set = RegexSetBuilder::new(&sources)
        .case_insensitive(true)
        .build()
        .expect("explain patterns compile");
    let unless = ENTRIES
        .iter()
        .map(|e| {
            e.unless
                .iter()
                .map(|p| compile(p).expect("explain patterns compile"))
                .collect()
        })
        .collect();
    Compiled { set, owner, unless }
});

/// Normalise one physical line: escaped and typographic quotes become `"`, the escapes
/// `\n`/`\t` become spaces, runs of whitespace one space; trimmed.
fn normalise(line: &str) -> String {
    /// Append `c`, turning whitespace into one pending space.
    fn push(out: &mut String, c: char, space: &mut bool) {
        if c.is_whitespace() {
            *space = !out.is_empty();
        } else {
            if *space {
                out.push(' ');
                *space = false;
            }
            out.push(c);
        }
    }
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    let mut space = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                // Skip a run of backslashes; keep what it escapes.
                while chars.peek() == Some(&'\\') {
                    chars.next();
                }
                match chars.peek() {
                    Some('"') => {}
                    Some('n' | 't' | 'r') => {
                        chars.next();
                        push(&mut out, ' ', &mut space);
                    }
                    _ => push(&mut out, '\\', &mut space),
                }
            }
            '\u{201c}' | '\u{201d}' | '\u{201e}' | '\u{2033}' => push(&mut out, '"', &mut space),
            '\u{2018}' | '\u{2019}' => push(&mut out, '\'', &mut space),
            c => push(&mut out, c, &mut space),
        }
    }
    out
}

/// Split text into logical lines (1-based number of their first line, normalised text).
/// A line starting with a blank continues the previous one; an empty line ends it.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut open = false;
    for (i, raw) in text.lines().enumerate() {
        let norm = normalise(raw);
        if norm.is_empty() {
            open = false;
            continue;
        }
        match out.last_mut() {
            Some((_, last)) if open && raw.starts_with([' ', '\t']) => {
                last.push(' ');
                last.push_str(&norm);
            }
            _ => out.push((i + 1, norm)),
        }
        open = true;
    }
    out
}

/// Every entry the text matches, in table order (most specific first), with where it was
/// first seen and on how many logical lines. Empty when nothing is known.
pub fn explain(text: &str) -> Vec<Match> {
    let compiled = &*COMPILED;
    let mut found: Vec<Option<(usize, usize)>> = vec![None; ENTRIES.len()];
    for (line_no, line) in logical_lines(text) {
        let mut hit = vec![false; ENTRIES.len()];
        for p in compiled.set.matches(&line).iter() {
            hit[compiled.owner[p]] = true;
        }
        for (i, h) in hit.into_iter().enumerate() {
            if !h || compiled.unless[i].iter().any(|r| r.is_match(&line)) {
                continue;
            }
            let slot = found[i].get_or_insert((line_no, 0));
            slot.1 += 1;
        }
    }
    found
        .into_iter()
        .enumerate()
        .filter_map(|(i, f)| {
            f.map(|(line, occurrences)| Match {
                entry: &ENTRIES[i],
                line,
                occurrences,
            })
        })
        .collect()
}

/// The entry with this id.
#[cfg(any(test, feature = "testkit"))]
pub fn entry(id: &str) -> Option<&'static Entry> {
    ENTRIES.iter().find(|e| e.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn ids(text: &str) -> Vec<&'static str> {
        explain(text).iter().map(|m| m.entry.id).collect()
    }

    /// One test per error string (realistic pasted log lines), plus the table of all cases
    /// for the coverage test.
    macro_rules! cases {
        ($($name:ident: $text:expr => [$($id:expr),* $(,)?];)*) => {
            $(
                #[test]
                fn $name() {
                    let want: &[&str] = &[$($id),*];
                    assert_eq!(ids($text), want, "{}", $text);
                }
            )*
            const CASES: &[(&str, &[&str])] = &[$(($text, &[$($id),*])),*];
        };
    }

    cases! {
        cluster_info_unsigned:
            r#"error execution phase preflight: couldn't validate the identity of the API Server: there is no JWS signed token in the cluster-info ConfigMap. This token id "abcdef" is invalid for this cluster, can't connect"#
            => ["cluster-info-unsigned"];
        image_pull_on_the_talos_control_plane:
            r#"Failed to pull image "registry.k8s.io/kube-apiserver:v1.30.4": rpc error: code = Unknown desc = failed to pull and unpack image: dial tcp 34.96.108.209:443: i/o timeout; Warning Failed ErrImagePull"#
            => ["image-pull-registry"];
        address_conflict:
            "IPv4: 10.20.30.150: duplicate address detected on ens192 (hwaddr 00:50:56:aa:bb:cc)"
            => ["address-conflict"];
        endpoint_refused_after_a_rollout:
            r#"The connection to the server lab-f.example.internal:6443 was refused - did you specify the right host or port? Get "https://lab-f.example.internal:6443/api?timeout=32s": dial tcp 10.20.30.5:6443: connect: connection refused"#
            => ["endpoint-stale-backends"];
        endpoint_no_route:
            r#"E1205 10:00:00.000000 1 controller.go:316] "Reconciler error" err="failed to create cluster accessor: Get \"https://10.30.40.10:6443/api?timeout=10s\": dial tcp 10.30.40.10:6443: connect: no route to host""#
            => ["endpoint-stale-backends"];
        invalid_bearer_token:
            r#"E0601 12:00:00.000000       1 authentication.go:73] "Unable to authenticate the request" err="invalid bearer token""#
            => ["invalid-bearer-token"];
        token_audiences_joined_with_invalid_bearer_token:
            r#"E0601 12:00:01.123456       1 authentication.go:73] "Unable to authenticate the request" err="[invalid bearer token, token audiences [\"https://kubernetes.default.svc.cluster.local\"] is invalid for the target audiences [\"https://10.0.0.10:6443\"]]""#
            => ["token-audience-mismatch", "invalid-bearer-token"];
        token_audiences_in_json_log:
            r#"{"ts":1748779200.1,"caller":"authentication.go:73","msg":"Unable to authenticate the request","err":"token audiences [\\\"https://lb.example.net:6443\\\"] is invalid for the target audiences [\\\"https://kubernetes.default.svc.cluster.local\\\"]"}"#
            => ["token-audience-mismatch"];
        service_account_key_mismatch:
            r#"E0601 12:00:02.000000       1 authentication.go:73] "Unable to authenticate the request" err="[invalid bearer token, square/go-jose: error in cryptographic primitive]""#
            => ["service-account-key-mismatch", "invalid-bearer-token"];
        output_array_not_large_enough:
            r#"E0601 12:00:03.000000       1 transformer.go:163] "failed to decrypt data" err="output array was not large enough for encryption""#
            => ["encryption-wrong-key"];
        stored_data_shorter:
            r#"E0601 12:00:04.000000       1 transformer.go:163] "failed to decrypt data" err="the stored data was shorter than the required size""#
            => ["encryption-short-data"];
        no_matching_prefix:
            r#"W0601 12:00:05.000000       1 reflector.go:547] storage/cacher.go:/secrets: failed to list *core.Secret: unable to transform key "/registry/secrets/kube-system/bootstrap-token-abcdef": no matching prefix found"#
            => ["encryption-no-matching-prefix"];
        identity_transformer:
            r#"E0601 12:00:06.000000       1 cacher.go:475] cacher (secrets): unexpected ListAndWatch error: failed to list *core.Secret: unable to transform key "/registry/secrets/default/db-password": identity transformer tried to read encrypted data; reinitializing..."#
            => ["encryption-identity-reads-encrypted"];
        illegal_base64_secret_list:
            r#"E0601 12:00:07.000000       1 reflector.go:138] storage/cacher.go:/secrets: Failed to watch *core.Secret: failed to list *core.Secret: illegal base64 data at input byte 3"#
            => ["encryption-illegal-base64"];
        encryption_config_conflict:
            "error: 1 error occurred:\n\t* etcd encryption config is already set in v1alpha1 config"
            => ["encryption-config-conflict"];
        no_controlplane_endpoints:
            "172.20.0.5: user: warning: [2026-06-01T12:00:00.000000000Z]: [talos] service[etcd](Preparing): Failed to run pre stage: no controlplane endpoints discovered yet"
            => ["etcd-no-endpoints"];
        error_adding_member:
            "[talos] service[etcd](Failed): Failed to run pre stage: error adding member: context deadline exceeded"
            => ["etcd-add-member-failed"];
        too_many_learners:
            "[talos] service[etcd](Failed): Failed to run pre stage: error adding member: etcdserver: membership: too many learner member in cluster"
            => ["etcd-too-many-learners", "etcd-add-member-failed"];
        error_removing_self:
            "172.20.0.6: [talos] service[etcd](Failed): Failed to run pre stage: error removing self from the member list: etcdserver: re-configuration failed due to not enough started members"
            => ["etcd-remove-self-failed"];
        waiting_to_join:
            "172.20.0.5: user: warning: [2026-06-01T12:00:00.000Z]: [talos] etcd is waiting to join the cluster, if this node is the first node in the cluster, please run `talosctl bootstrap` against one of the following IPs:"
            => ["etcd-waiting-to-join"];
        rejected_connection_dnsnames:
            r#"2026-06-01 12:00:00.000000 I | embed: rejected connection from "10.0.0.21:40112" (error "tls: \"10.0.0.21\" does not match any of DNSNames [\"talos-cp-1\"]", ServerName "", IPAddresses [], DNSNames ["talos-cp-1"])"#
            => ["etcd-peer-san"];
        rejected_connection_zap:
            r#"{"level":"warn","ts":"2026-06-01T12:00:00.000Z","caller":"embed/config_logging.go:160","msg":"rejected connection","remote-addr":"10.0.0.22:51234","server-name":"","ip-addresses":["10.0.0.9"],"dns-names":["kubeadm-cp-2"],"error":"tls: \"10.0.0.22\" does not match any of DNSNames [\"kubeadm-cp-2\"]"}"#
            => ["etcd-peer-san"];
        rejected_connection_ip_sans:
            r#"rejected connection from "10.0.0.23:40000" (error "x509: certificate is valid for 10.0.0.9, 127.0.0.1, not 10.0.0.23", ServerName "")"#
            => ["etcd-peer-san"];
        member_removed:
            r#"{"level":"warn","ts":"2026-06-01T12:00:00Z","caller":"rafthttp/http.go:500","msg":"request sender was removed","error":"the member has been permanently removed from the cluster"}"#
            => ["etcd-member-removed"];
        csr_unauthorized:
            "E0601 12:00:00.000000    2345 certificate_manager.go:562] kubernetes.io/kube-apiserver-client-kubelet: Failed while requesting a signed certificate from the control plane: cannot create certificate signing request: Unauthorized"
            => ["kubelet-csr-unauthorized"];
        extra_arg_encryption_provider_config:
            r#"[talos] controller failed {"component": "controller-runtime", "controller": "k8s.ControlPlaneStaticPodController", "error": "error updating static pod: extra arg \"encryption-provider-config\" is not allowed"}"#
            => ["extra-arg-encryption-provider-config", "extra-arg-not-allowed"];
        extra_arg_root_ca_file:
            r#"error: extra arg "root-ca-file" is not allowed"#
            => ["extra-arg-ca-files", "extra-arg-not-allowed"];
        extra_arg_sa_key:
            r#"extra arg "service-account-signing-key-file" is not allowed"#
            => ["extra-arg-service-account-keys", "extra-arg-not-allowed"];
        extra_arg_scheduler_config:
            r#"[talos] controller failed {"controller": "k8s.ControlPlaneStaticPodController", "error": "error updating static pod: extra arg \"config\" is not allowed"}"#
            => ["extra-arg-scheduler-config", "extra-arg-not-allowed"];
        extra_arg_other:
            r#"extra arg "cloud-provider" is not allowed"#
            => ["extra-arg-not-allowed"];
        failed_to_load_bundle:
            r#"error: failed to load secrets bundle: yaml: line 3: mapping values are not allowed in this context"#
            => ["secrets-bundle-invalid"];
        failed_to_validate_bundle_encryption_required:
            "error: failed to validate secrets bundle: 1 error occurred:\n\t* one of [secrets.secretboxencryptionsecret, secrets.aescbcencryptionsecret] is required\n\n"
            => ["bundle-encryption-secret-required", "secrets-bundle-invalid"];
        failed_to_validate_bundle_both:
            "failed to validate secrets bundle: 1 error occurred:\n  * only one of [secrets.secretboxencryptionsecret, secrets.aescbcencryptionsecret] is allowed"
            => ["bundle-encryption-secret-both", "secrets-bundle-invalid"];
        bundle_field_required:
            "* certs.k8saggregator is required"
            => ["secrets-bundle-invalid"];
        failed_to_create_bundle:
            "error: failed to create secrets bundle: open pki/front-proxy-ca.crt: no such file or directory"
            => ["talosctl-pki-import-failed"];
        some_cp_machines_no_noderef:
            r#"I0601 12:00:00.000000       1 etcd.go:172] "some CP machines do not have a noderef" controller="taloscontrolplane" controllerGroup="controlplane.cluster.x-k8s.io" namespace="lab-f" name="lab-f-cp""#
            => ["cacppt-noderef"];
        foreign_etcd_member:
            r#"{"level":"info","ts":"2026-06-01T12:00:00Z","logger":"controllers.TalosControlPlane","msg":"found etcd member that doesn't exist as controlplane machine","member":"kubeadm-cp-1","cluster":"lab-f"}"#
            => ["cacppt-foreign-etcd-member"];
        etcd_member_count:
            r#"E0601 12:00:00.000000       1 controller.go:324] "Reconciler error" err="error checking etcd health on machine \"lab-f-cp-abcde\": talos-cp-1: expected to have 3 members, got 5" controller="taloscontrolplane""#
            => ["cacppt-etcd-member-count"];
        node_ref_refused:
            r#"E1205 10:00:00.000000       1 controller.go:316] "Reconciler error" err="failed to patch Machine lab-f/lab-f-cp-7x2kq: machines.cluster.x-k8s.io \"lab-f-cp-7x2kq\" is forbidden: ValidatingAdmissionPolicy 'lab-f.lab-f.paused-node-refs.capstan.dev' with binding 'lab-f.lab-f.paused-node-refs.capstan.dev' denied request: capstan: phase control-plane of lab-f/lab-f: a control-plane Machine gets its nodeRef only while TalosControlPlane lab-f-cp is paused, or the provider's etcd audit removes every kubeadm etcd member (capstan plan)" controller="machine""#
            => ["node-ref-policy"];
        tcp_paused:
            r#"I1205 10:00:00.000000       1 taloscontrolplane_controller.go:118] "reconciliation is paused for this object" namespace="lab-f" talosControlPlane="lab-f-cp" cluster="lab-f""#
            => ["cacppt-paused"];
        preflight_hold_event:
            "  Warning  ControlPlaneUnhealthy  12s  taloscontrolplane-controller  Waiting for control plane to pass preflight checks to continue reconciliation: Machine lab-g-cp-x4k2m does not have a Node"
            => ["cacppt-preflight-hold"];
        apiserver_etcd_request_timed_out:
            r#"E1205 10:00:00.000000       1 status.go:71] apiserver received an error that is not an metav1.Status: &errors.errorString{s:"etcdserver: request timed out"}: etcdserver: request timed out"#
            => ["etcd-quorum-lost"];
        etcdutl_missing_hash:
            "Error: snapshot missing hash but --skip-hash-check=false"
            => ["etcd-snapshot-unusable"];
        etcdutl_sha_mismatch:
            "Error: expected sha256 [12 34 56], got [65 43 21]"
            => ["etcd-snapshot-unusable"];
        talosctl_snapshot_no_checksum:
            "error: sha256 checksum not found (size 4096)"
            => ["etcd-snapshot-unusable"];
        etcd_no_leader:
            r#"{"level":"warn","ts":"2026-12-05T10:00:00.000Z","caller":"etcdserver/util.go:170","msg":"apply request took too long","error":"etcdserver: no leader"}"#
            => ["etcd-quorum-lost"];
        bootstrap_failed_retrying:
            r#"I0601 12:00:00.000000       1 taloscontrolplane_controller.go:790] "bootstrap failed, retrying in 20 seconds" controller="taloscontrolplane" error="at least one machine should be provided""#
            => ["cacppt-bootstrap-retry"];
        talos_bootstrap_refused:
            "rpc error: code = AlreadyExists desc = etcd data directory is not empty"
            => ["talos-bootstrap-refused"];
        cabpt_bundle_missing:
            r#"E0601 12:00:00.000000       1 controller.go:324] "Reconciler error" err="secrets bundle is missing" controller="talosconfig" namespace="lab-f" name="lab-f-cp-x7k2p""#
            => ["cabpt-bundle-missing"];
        cabpt_bundle_unmarshal:
            r#"E0601 12:00:00.000000       1 controller.go:324] "Reconciler error" err="error unmarshaling secrets bundle: illegal base64 data at input byte 4" controller="talosconfig""#
            => ["cabpt-bundle-unmarshal"];
        cabpt_none_without_data:
            r#"E0601 12:00:00.000000       1 controller.go:324] "Reconciler error" err="failed to specify config data with none generate type" controller="talosconfig""#
            => ["cabpt-none-without-data"];
        kube_proxy_selector_immutable:
            r#"error updating manifests: error updating object kube-system/kube-proxy: DaemonSet.apps "kube-proxy" is invalid: spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{"k8s-app":"kube-proxy"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"#
            => ["kube-proxy-selector-immutable"];
        x509_name_through_lb:
            r#"Unable to connect to the server: tls: failed to verify certificate: x509: certificate is valid for kubernetes, kubernetes.default, lab-f.example.internal, not api.lab-f.example.internal"#
            => ["apiserver-certificate-name"];
        kubectl_unauthorized:
            "error: You must be logged in to the server (Unauthorized)"
            => ["client-unauthorized"];
        healthz_401:
            r#"10.0.0.5 - - [05/Dec/2026:10:00:00 +0000] "GET /healthz HTTP/1.1" 401 157"#
            => ["healthz-unauthorized"];
        pod_security_violation:
            r#"Warning  FailedCreate  3s  daemonset-controller  Error creating: pods "node-exporter-x7k2p" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true, hostPID=true)"#
            => ["pod-security-violation"];
        etcd_space_exceeded:
            r#"E1205 10:00:00.000000       1 status.go:71] apiserver received an error that is not an metav1.Status: rpctypes.EtcdError{code:0x8, desc:"etcdserver: mvcc: database space exceeded"}"#
            => ["etcd-space-exceeded"];
        node_uninitialized:
            r#"Warning  FailedScheduling  10s  default-scheduler  0/7 nodes are available: 1 node(s) had untolerated taint {node.cloudprovider.kubernetes.io/uninitialized: true}."#
            => ["node-not-initialized-by-cloud-provider"];
        strategic_patch_failure:
            r#"E1205 10:00:00.000000       1 controller.go:324] "Reconciler error" err="failure loading StrategicPatch: unknown keys found during decoding" controller="talosconfig""#
            => ["strategic-patch-load-failed"];
        caps_not_permitted:
            r#"Warning  Failed  2s  kubelet  Error: failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: unable to apply caps: operation not permitted"#
            => ["container-caps-not-permitted"];
        node_selector_unmatched:
            "Warning  FailedScheduling  5s  default-scheduler  0/9 nodes are available: 3 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 6 node(s) didn't match Pod's node affinity/selector. preemption: 0/9 nodes are available: 9 Preemption is not helpful for scheduling."
            => ["node-selector-unmatched"];
        too_many_pods:
            "Warning  FailedScheduling  3s  default-scheduler  0/9 nodes are available: 3 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 6 Too many pods. preemption: 0/9 nodes are available: 3 Preemption is not helpful for scheduling, 6 No preemption victims found for incoming pod."
            => ["too-many-pods"];
        pdb_eviction_refused:
            r#"error when evicting pods/"db-0" -n "shop" (will retry after 5s): Cannot evict pod as it would violate the pod's disruption budget."#
            => ["pdb-eviction-refused"];
        drain_unmanaged_pods:
            r#"error: unable to drain node "lab-f-w-1" due to error: cannot delete cannot delete Pods that declare no controller (use --force to override): default/debug, continuing command..."#
            => ["drain-unmanaged-pods"];
        volume_node_affinity_conflict:
            "Warning  FailedScheduling  4s  default-scheduler  0/9 nodes are available: 3 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 6 node(s) had volume node affinity conflict. preemption: 0/9 nodes are available: 9 Preemption is not helpful for scheduling."
            => ["volume-node-affinity-conflict"];
        insufficient_resources:
            "Warning  FailedScheduling  2s  default-scheduler  0/9 nodes are available: 3 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 6 Insufficient memory. preemption: 0/9 nodes are available: 3 Preemption is not helpful for scheduling, 6 No preemption victims found for incoming pod."
            => ["insufficient-resources"];
        service_cluster_ip_immutable:
            r#"The Service "web" is invalid: spec.clusterIPs[0]: Invalid value: []string{"10.96.0.20"}: may not change once set; spec.clusterIP: Invalid value: "10.96.0.20": field is immutable"#
            => ["field-is-immutable"];
        x509_unknown_authority:
            r#"E0601 12:00:00.000000    2345 reflector.go:150] Failed to watch *v1.Node: Get "https://10.0.0.10:6443/api/v1/nodes": tls: failed to verify certificate: x509: certificate signed by unknown authority"#
            => ["x509-unknown-authority"];
    }

    #[test]
    fn every_pattern_compiles() {
        for e in ENTRIES {
            for p in e.patterns.iter().chain(e.unless) {
                assert!(compile(p).is_ok(), "{}: bad pattern {p}", e.id);
            }
        }
        assert!(!COMPILED.set.is_empty());
    }

    #[test]
    fn entries_are_well_formed_and_use_only_contract_findings() {
        let findings: BTreeSet<&str> = FINDINGS.iter().map(|(id, _, _)| *id).collect();
        for (id, guard, _) in FINDINGS {
            assert_eq!(
                *guard == Guard::Check,
                crate::migration::check::IDS.contains(id),
                "{id}: guarded by check exactly when `capstan check` implements it"
            );
        }
        let mut seen = BTreeSet::new();
        let mut used = BTreeSet::new();
        for e in ENTRIES {
            assert!(seen.insert(e.id), "duplicate id {}", e.id);
            assert!(
                e.id.split('-').all(|w| !w.is_empty()
                    && w.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())),
                "{} is not kebab-case",
                e.id
            );
            assert!(!e.patterns.is_empty() && !e.title.is_empty() && !e.cause.is_empty());
            assert!(!e.fix.is_empty() && !e.source.is_empty(), "{}", e.id);
            for f in e.caught_by {
                assert!(findings.contains(f), "{}: {f} is not in FINDINGS", e.id);
                used.insert(*f);
            }
            for p in e.procedures {
                assert!(
                    crate::procedure::by_id(p).is_some(),
                    "{}: no procedure {p}",
                    e.id
                );
            }
            // A fix that pauses or sets the status by hand says so through the procedure,
            // the one text of it (no second copy of the command here).
            for step in e.fix {
                assert!(
                    !step.contains("cluster.x-k8s.io/paused=true")
                        && !step.contains("--subresource=status"),
                    "{}: write the command in crate::procedure, not here: {step}",
                    e.id
                );
            }
        }
        assert_eq!(used, findings, "every contract finding is used by an entry");
    }

    #[test]
    fn every_entry_has_a_case_where_it_comes_first() {
        for e in ENTRIES {
            assert!(
                CASES.iter().any(|(_, want)| want.first() == Some(&e.id)),
                "no test case for {}",
                e.id
            );
        }
    }

    /// Every message README's `capstan check` table says the cluster would show is one
    /// `explain` knows, and the entry names that row's finding as the one that catches it.
    #[test]
    fn every_message_of_the_readme_check_table_is_explained() {
        let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"));
        let start = readme
            .find("| id | blocking when | the cluster would show |")
            .expect("README's check id table");
        let mut rows = 0;
        for row in readme[start..]
            .lines()
            .skip(2)
            .take_while(|l| l.starts_with('|'))
        {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            assert_eq!(cells.len(), 5, "{row}");
            let ids: Vec<&str> = cells[1].split('`').skip(1).step_by(2).collect();
            assert!(!ids.is_empty(), "{row}");
            for id in &ids {
                assert!(
                    crate::migration::check::IDS.contains(id),
                    "{id} is not a check id"
                );
            }
            let shown = cells[3];
            if shown.is_empty() {
                continue;
            }
            rows += 1;
            let message = shown
                .replace('`', "")
                .replace("[...]", "[\"x\"]")
                .replace('…', "x");
            let got = explain(&message);
            assert!(
                !got.is_empty(),
                "explain knows nothing of `{message}` ({row})"
            );
            assert!(
                got.iter()
                    .any(|m| m.entry.caught_by.iter().any(|f| ids.contains(f))),
                "no entry for `{message}` names {ids:?} as its guard: {:?}",
                got.iter().map(|m| m.entry.id).collect::<Vec<_>>()
            );
        }
        assert!(rows >= 15, "{rows} rows with messages");
        // And the table lists every finding `check` reports.
        let table: String = readme[start..]
            .lines()
            .take_while(|l| l.starts_with('|'))
            .map(|l| l.split('|').nth(1).unwrap_or(""))
            .collect();
        for id in crate::migration::check::IDS {
            assert!(
                table.contains(&format!("`{id}`")),
                "README's check table lacks `{id}`"
            );
        }
    }

    #[test]
    fn nothing_matches_unrelated_text() {
        assert!(explain("").is_empty());
        assert!(
            explain("I0601 12:00:00.000000 1 controller.go:100] \"Reconciled\" ok=true").is_empty()
        );
        assert!(
            explain("Unauthorized").is_empty(),
            "a bare 401 is not the CSR entry"
        );
        assert_eq!(
            ids(
                r#"The Deployment "web" is invalid: spec.selector: Invalid value: ...: field is immutable"#
            ),
            ["field-is-immutable"],
            "immutable selectors of other objects are not the kube-proxy entry"
        );
    }

    #[test]
    fn several_matches_come_most_specific_first() {
        let got = ids(
            r#"err="[invalid bearer token, token audiences [\"a\"] is invalid for the target audiences [\"b\"], square/go-jose: error in cryptographic primitive]""#,
        );
        assert_eq!(
            got,
            [
                "service-account-key-mismatch",
                "token-audience-mismatch",
                "invalid-bearer-token"
            ]
        );
    }

    #[test]
    fn a_whole_log_reports_each_entry_once_with_first_line_and_count() {
        let log = "\
I0601 starting kube-apiserver
E0601 12:00:00.0 1 authentication.go:73] \"Unable to authenticate the request\" err=\"invalid bearer token\"
E0601 12:00:01.0 1 transformer.go:163] \"failed to decrypt data\" err=\"output array was not large enough for encryption\"
E0601 12:00:02.0 1 authentication.go:73] \"Unable to authenticate the request\" err=\"invalid bearer token\"
";
        let got = explain(log);
        let summary: Vec<(&str, usize, usize)> = got
            .iter()
            .map(|m| (m.entry.id, m.line, m.occurrences))
            .collect();
        assert_eq!(
            summary,
            [
                ("invalid-bearer-token", 2, 2),
                ("encryption-wrong-key", 3, 1)
            ]
        );
    }

    #[test]
    fn patterns_stay_within_a_logical_line() {
        // `kube-proxy` and `field is immutable` on different log lines are unrelated.
        let log = "I0601 synced kube-proxy\nE0601 Deployment \"web\": spec.selector: field is immutable\n";
        assert_eq!(ids(log), ["field-is-immutable"]);
        // An indented continuation belongs to the line before.
        let wrapped = "DaemonSet.apps \"kube-proxy\" is invalid: spec.selector:\n    Invalid value: ...: field is immutable";
        assert_eq!(ids(wrapped), ["kube-proxy-selector-immutable"]);
    }

    #[test]
    fn normalisation_handles_case_whitespace_and_quotes() {
        assert_eq!(ids("INVALID   BEARER\tTOKEN"), ["invalid-bearer-token"]);
        assert_eq!(
            ids("extra arg \u{201c}encryption-provider-config\u{201d} is not allowed"),
            [
                "extra-arg-encryption-provider-config",
                "extra-arg-not-allowed"
            ]
        );
        assert_eq!(normalise(r#"a \\\"b\\\"  \n c"#), r#"a "b" c"#);
        assert_eq!(normalise(r"C:\dir"), r"C:\dir");
    }

    #[test]
    fn bundle_base64_errors_are_not_encryption_errors() {
        assert_eq!(
            ids("error: failed to load secrets bundle: illegal base64 data at input byte 0"),
            ["secrets-bundle-invalid"]
        );
    }

    #[test]
    fn entry_lookup() {
        assert_eq!(
            entry("invalid-bearer-token").map(|e| e.id),
            Some("invalid-bearer-token")
        );
        assert!(entry("nope").is_none());
    }
}
