//! kubeadm ↔ Talos parity beyond identity: what a long-lived kubeadm cluster runs that
//! Talos would run differently from the moment its first apiserver joins the `kubernetes`
//! Service endpoints: resources encrypted
//! besides Secrets, etcd settings, the apiserver certificate's names, linked clones.

use std::net::IpAddr;

use super::{errors, list, no_placement, not_compared, CheckError, Cx, Finding, Severity};
use crate::model::CloneMode;

/// The etcd flags a mixed etcd must agree on, and what Talos runs without them (etcd's own
/// defaults: Talos's `services/etcd.go` sets none of them).
pub const ETCD_PARITY_FLAGS: &[(&str, &str)] = &[
    ("quota-backend-bytes", "2147483648 (2 GiB, etcd's default)"),
    ("election-timeout", "1000 (ms, etcd's default)"),
    ("heartbeat-interval", "100 (ms, etcd's default)"),
    ("snapshot-count", "10000 (etcd 3.5's default; 3.6: 10000)"),
    ("max-request-bytes", "1572864 (1.5 MiB, etcd's default)"),
    ("auto-compaction-mode", "periodic (etcd's default)"),
    (
        "auto-compaction-retention",
        "0 (off: the apiserver compacts)",
    ),
    ("max-snapshots", "5 (etcd's default)"),
    ("max-wals", "5 (etcd's default)"),
];

const MIB: u64 = 1024 * 1024;

/// One member's `etcdctl endpoint status -w json` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdMemberStatus {
    /// `Endpoint`.
    pub endpoint: String,
    /// `Status.dbSize`: the backend file's size, which the quota applies to.
    pub db_size: u64,
    /// `Status.dbSizeInUse`, when reported (0 otherwise).
    pub db_size_in_use: u64,
}

/// Reads `etcdctl endpoint status -w json` (a JSON list of `{Endpoint, Status}`; one
/// document, or several from several runs).
pub fn parse_etcd_status(
    file: &str,
    docs: &[serde_json::Value],
) -> Result<Vec<EtcdMemberStatus>, CheckError> {
    use serde_json::Value;
    let bad = |problem: String| CheckError::EtcdStatus {
        file: file.to_string(),
        problem,
    };
    let mut out = Vec::new();
    for doc in docs {
        let items: Vec<&Value> = match doc {
            Value::Array(a) => a.iter().collect(),
            Value::Object(_) => vec![doc],
            _ => {
                return Err(bad(
                    "expected the JSON list `etcdctl endpoint status -w json` prints".into(),
                ))
            }
        };
        for (i, item) in items.into_iter().enumerate() {
            let endpoint = item
                .get("Endpoint")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string();
            let db_size = item
                .pointer("/Status/dbSize")
                .and_then(Value::as_u64)
                .ok_or_else(|| bad(format!("[{i}].Status.dbSize: expected a number of bytes")))?;
            let db_size_in_use = item
                .pointer("/Status/dbSizeInUse")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            out.push(EtcdMemberStatus {
                endpoint,
                db_size,
                db_size_in_use,
            });
        }
    }
    if out.is_empty() {
        return Err(bad(
            "no member status found; expected `etcdctl endpoint status --cluster -w json`".into(),
        ));
    }
    Ok(out)
}

/// etcd's default backend quota, which a Talos member runs without `quota-backend-bytes`.
pub const ETCD_DEFAULT_QUOTA: u64 = 2 * 1024 * 1024 * 1024;

/// The first address of each service CIDR: the `kubernetes` Service's ClusterIP, which
/// every apiserver certificate carries.
pub fn first_service_ips(cidrs: &[String]) -> Vec<IpAddr> {
    nth_ips(cidrs, 1)
}

/// The `n`-th address after the network address of each CIDR (Talos's `NthIPInNetwork`).
pub fn nth_ips(cidrs: &[String], n: u8) -> Vec<IpAddr> {
    cidrs
        .iter()
        .filter_map(|c| {
            let (net, _) = c.split_once('/')?;
            match net.parse::<IpAddr>().ok()? {
                IpAddr::V4(a) => Some(IpAddr::V4(u32::from(a).checked_add(n.into())?.into())),
                IpAddr::V6(a) => Some(IpAddr::V6(u128::from(a).checked_add(n.into())?.into())),
            }
        })
        .collect()
}

/// A SAN (DNS name or IP) as compared: lower case, no trailing dot, IPs canonical.
pub fn canonical_san(san: &str) -> String {
    match san.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => san.trim_end_matches('.').to_ascii_lowercase(),
    }
}

use canonical_san as canonical;

/// The names Talos puts in its apiserver certificate without being told (Talos
/// `kubernetes_cert_sans.go` v1.10.6:118-148): the endpoint host, the `kubernetes`
/// Service's names and loopback, as [`canonical_san`]s. The first address of each service
/// CIDR ([`first_service_ips`]) is in it too.
pub fn talos_named_sans(endpoint_host: &str, dns_domain: &str) -> Vec<String> {
    let domain = dns_domain.trim_end_matches('.');
    [
        "kubernetes".to_string(),
        "kubernetes.default".into(),
        "kubernetes.default.svc".into(),
        format!("kubernetes.default.svc.{domain}"),
        "localhost".into(),
        "127.0.0.1".into(),
        "::1".into(),
        endpoint_host.to_string(),
    ]
    .iter()
    .map(|n| canonical(n))
    .collect()
}

impl Cx<'_> {
    /// B10: Talos encrypts `secrets` only; anything else kubeadm encrypts is unreadable
    /// to a Talos apiserver.
    pub(super) fn encryption_resources(&self, out: &mut Vec<Finding>) {
        let id = "encryption-resources";
        let Some(e) = &self.i.encryption else {
            out.push(not_compared(
                id,
                "kubeadm EncryptionConfiguration resources",
                "what kubeadm encrypts besides Secrets",
                "--encryption-config",
            ));
            return;
        };
        let field = format!("{} resources[].resources", e.file);
        if e.value.other_encrypted.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Pass,
                field,
                "kubeadm encrypts no resource but Secrets, as Talos does".into(),
            ));
            return;
        }
        let named: Vec<String> = e
            .value
            .other_encrypted
            .iter()
            .map(|(i, r)| format!("`{r}` (resources[{i}])"))
            .collect();
        let plain: Vec<&str> = e
            .value
            .other_encrypted
            .iter()
            .map(|(_, r)| r.as_str())
            .filter(|r| !r.contains('*'))
            .collect();
        let rewrite = if plain.is_empty() {
            "every object of the resources it covered".to_string()
        } else {
            format!(
                "every object of them (`kubectl get {} -A -o json | kubectl replace -f -`)",
                plain.join(",")
            )
        };
        out.push(
            Finding::new(
                id,
                Severity::Blocking,
                field,
                format!(
                    "kubeadm encrypts {} besides Secrets; Talos encrypts only `secrets` (its \
                     EncryptionConfiguration is fixed, `encryption-provider-config` a denied flag), so a \
                     Talos apiserver cannot read those objects and writes them in plaintext",
                    named.join(", ")
                ),
            )
            .error(errors::IDENTITY_TRANSFORMER)
            .fix(format!(
                "before any Talos node joins, decrypt them on the kubeadm side: in {} give those \
                 resources their own entry with `identity` first and the current provider second, restart \
                 every kubeadm apiserver one at a time, rewrite {rewrite}, then remove the entry's \
                 encrypting provider and restart again; check again with the new file (Talos 1.14's \
                 `KubeEtcdEncryptionConfig` can carry them instead)",
                e.file
            )),
        );
    }

    /// B12: Talos's apiserver certificate holds the endpoint, the service names and
    /// `cluster.apiServer.certSANs`; every other name kubeadm's certificate answered to
    /// fails with `x509: certificate is valid for …` on a Talos apiserver.
    pub(super) fn apiserver_cert_sans(&self, out: &mut Vec<Finding>) {
        let id = "apiserver-cert-sans";
        let s = &self.i.config.spec;
        let mut sources = Vec::new();
        let mut kubeadm: Vec<String> = Vec::new();
        if let Some(c) = &self.i.cluster_config {
            sources.push(format!("{} apiServer.certSANs", c.file));
            kubeadm.extend(c.value.api_server_cert_sans.iter().cloned());
        }
        if let Some(c) = &self.i.apiserver_cert {
            sources.push(format!("{} subjectAltName", c.file));
            let node_local: Vec<String> = self
                .i
                .apiserver
                .iter()
                .filter_map(|a| a.value.advertise_address().map(canonical))
                .chain(
                    s.migration
                        .iter()
                        .flat_map(|m| m.kubeadm.control_plane_nodes.iter().map(|n| canonical(n))),
                )
                // kubeadm puts the node's name in its certificate; Talos puts its own.
                .chain(
                    self.i
                        .nodes
                        .iter()
                        .flat_map(|n| n.value.nodes.iter().map(|x| canonical(&x.name))),
                )
                .collect();
            for san in c.value.sans() {
                if !node_local.contains(&canonical(&san)) {
                    kubeadm.push(san);
                }
            }
        }
        if sources.is_empty() {
            out.push(not_compared(
                id,
                "spec.apiServer.certSANs",
                "the names kubeadm's apiserver certificate answers to",
                "--kubeadm-config or --apiserver-cert",
            ));
            return;
        }
        // What Talos puts in its certificate without being told.
        let mut talos = talos_named_sans(&s.endpoint.host, &s.network.dns_domain);
        talos.extend(
            first_service_ips(&s.network.services)
                .iter()
                .map(ToString::to_string),
        );
        talos.extend(s.api_server.cert_sans.iter().map(|n| canonical(n)));
        let mut missing: Vec<String> = Vec::new();
        for san in &kubeadm {
            let c = canonical(san);
            if !talos.contains(&c) && !missing.contains(&c) {
                missing.push(c);
            }
        }
        let field = format!("spec.apiServer.certSANs vs {}", sources.join(" and "));
        if missing.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Pass,
                field,
                "the Talos apiserver certificate will answer to every name the kubeadm one does"
                    .into(),
            ));
            return;
        }
        let mut want: Vec<String> = s.api_server.cert_sans.clone();
        want.extend(missing.iter().cloned());
        out.push(
            Finding::new(
                id,
                Severity::Blocking,
                field,
                format!(
                    "clients reach the kubeadm apiservers by {} too, which the Talos apiserver certificate \
                     would not hold: their requests fail whenever the load balancer or the `kubernetes` \
                     Service sends them to a Talos apiserver",
                    list(&missing)
                ),
            )
            .error(errors::X509_NAME)
            .fix(format!(
                "set `spec.apiServer.certSANs: [{}]` in cluster.yaml (rendered into Talos's \
                 cluster.apiServer.certSANs)",
                want.join(", ")
            )),
        );
    }

    /// B11: the etcd settings a mixed etcd must agree on; Talos sets none of them.
    /// `etcd-db-size`: the largest kubeadm member's database against the quota a Talos
    /// member will run with (`spec.etcd.extraArgs.quota-backend-bytes`, else etcd's 2 GiB):
    /// a joining member over its quota raises the cluster-wide NOSPACE alarm.
    pub(super) fn etcd_db_size(&self, out: &mut Vec<Finding>) {
        let id = "etcd-db-size";
        let spec = &self.i.config.spec.etcd.extra_args;
        let (quota, quota_from) = match spec.get("quota-backend-bytes").map(|q| q.parse::<u64>()) {
            Some(Ok(q)) if q > 0 => (q, "spec.etcd.extraArgs.quota-backend-bytes"),
            _ => (ETCD_DEFAULT_QUOTA, "etcd's default, no quota-backend-bytes"),
        };
        let Some(st) = &self.i.etcd_status else {
            out.push(not_compared(
                id,
                "etcd database size",
                &format!(
                    "the kubeadm etcd database size against the Talos quota ({} MiB, {quota_from})",
                    quota / MIB
                ),
                "--etcd-status",
            ));
            return;
        };
        let Some(big) = st.value.iter().max_by_key(|m| m.db_size) else {
            return;
        };
        let field = format!("{} Status.dbSize vs {quota_from}", st.file);
        let pct = big.db_size.saturating_mul(100) / quota;
        let sizes = format!(
            "the largest kubeadm member ({}) holds {} MiB ({} MiB in use), {pct}% of the {} MiB quota a Talos member runs with",
            big.endpoint,
            big.db_size / MIB,
            big.db_size_in_use / MIB,
            quota / MIB
        );
        let fix = "raise the quota the Talos members run with: spec.etcd.extraArgs.quota-backend-bytes (at least the \
                   kubeadm members' own, see `etcd-args`), or compact and defragment the kubeadm members first \
                   (`etcdctl compact`, `etcdctl defrag`, one member at a time)";
        let f = if big.db_size >= quota {
            Finding::new(
                id,
                Severity::Blocking,
                field,
                format!("{sizes}: a Talos member that joins is over its quota at once and raises the NOSPACE alarm, which makes etcd refuse every write"),
            )
            .error(errors::NOSPACE)
            .fix(fix)
        } else if pct >= 80 {
            Finding::new(
                id,
                Severity::Warning,
                field,
                format!("{sizes}: little room before the NOSPACE alarm"),
            )
            .error(errors::NOSPACE)
            .fix(fix)
        } else {
            Finding::new(id, Severity::Pass, field, sizes)
        };
        out.push(f);
    }

    /// D15: the migration joins Talos members to the etcd the kubeadm control plane runs
    /// on its own nodes (stacked etcd). With external etcd Talos still runs etcd on every
    /// control-plane node and looks for its peers at the apiservers' addresses (Talos
    /// v1.10.6 `internal/app/machined/pkg/system/services/etcd.go:267-283`), and `kubeadm
    /// reset` removes no external member, so the runbook's member removals are false.
    pub(super) fn etcd_topology(&self, out: &mut Vec<Finding>) {
        let id = "etcd-topology";
        let external_config = self
            .i
            .cluster_config
            .as_ref()
            .filter(|c| c.value.etcd_external)
            .map(|c| format!("{} etcd.external", c.file));
        // kubeadm's stacked etcd is always reached on the node itself.
        let external_servers = self.i.apiserver.as_ref().and_then(|a| {
            let servers = a.value.args.get_all("etcd-servers");
            let remote: Vec<&str> = servers
                .iter()
                .flat_map(|v| v.split(','))
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .filter(|u| {
                    let host = u
                        .split_once("://")
                        .map_or(*u, |(_, rest)| rest)
                        .rsplit_once(':')
                        .map_or(*u, |(h, _)| h);
                    !matches!(host, "127.0.0.1" | "localhost" | "[::1]")
                })
                .collect();
            (!remote.is_empty()).then(|| (format!("{} --etcd-servers", a.file), remote.join(", ")))
        });
        if self.i.cluster_config.is_none() && self.i.apiserver.is_none() {
            out.push(not_compared(
                id,
                "the kubeadm etcd topology",
                "whether kubeadm runs etcd on its control-plane nodes",
                "--kubeadm-config or --apiserver-manifest",
            ));
            return;
        }
        let mut fields = Vec::new();
        let mut seen = Vec::new();
        if let Some(f) = external_config {
            fields.push(f);
            seen.push("kubeadm's ClusterConfiguration sets `etcd.external`".to_string());
        }
        if let Some((f, servers)) = external_servers {
            fields.push(f);
            seen.push(format!("the apiserver reaches etcd at {servers}"));
        }
        if fields.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Pass,
                "the kubeadm etcd topology",
                "kubeadm runs etcd on its control-plane nodes (stacked), the topology the migration joins".into(),
            ));
            return;
        }
        out.push(
            Finding::new(
                id,
                Severity::Blocking,
                fields.join("; "),
                format!(
                    "external etcd ({}): the migration joins Talos members to an etcd on the kubeadm \
                     control-plane nodes; Talos runs its own etcd on every control-plane node and looks for peers \
                     at the apiservers' addresses, and `kubeadm reset` does not remove external members, so the \
                     phases would build a second etcd beside the cluster's and remove nothing",
                    seen.join("; ")
                ),
            )
            .fix(
                "not supported: move the cluster to stacked etcd first (kubeadm cannot convert in place: add \
                 kubeadm control-plane nodes with local etcd members joined to the external cluster, move the \
                 apiservers to them, then remove the external members with `etcdctl member remove`), or build a \
                 new Talos cluster and move the workloads",
            ),
        );
    }

    pub(super) fn etcd_args(&self, out: &mut Vec<Finding>) {
        let id = "etcd-args";
        let spec = &self.i.config.spec.etcd.extra_args;
        let Some(c) = &self.i.cluster_config else {
            out.push(not_compared(
                id,
                "spec.etcd.extraArgs",
                "kubeadm's etcd settings (quota, timeouts)",
                "--kubeadm-config",
            ));
            return;
        };
        let field = format!("spec.etcd.extraArgs vs {} etcd.local.extraArgs", c.file);
        // What differs, and the extra args that make Talos run as kubeadm does.
        let (mut differ, mut carry) = (Vec::new(), Vec::new());
        for (name, talos_default) in ETCD_PARITY_FLAGS {
            let kubeadm = c.value.etcd_extra_args.get(name);
            let talos = spec.get(*name).map(String::as_str);
            match (kubeadm, talos) {
                (Some(k), Some(t)) if k == t => {}
                (None, None) => {}
                (Some(k), t) => {
                    differ.push(format!(
                        "`{name}`: kubeadm {k}, Talos {}",
                        t.unwrap_or(talos_default)
                    ));
                    carry.push(format!("{name}: \"{k}\""));
                }
                (None, Some(t)) => {
                    differ.push(format!("`{name}`: kubeadm runs etcd's default, Talos {t}"))
                }
            }
        }
        if differ.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Pass,
                field,
                "the Talos etcd members will run with kubeadm's quota and timeouts".into(),
            ));
            return;
        }
        let quota_lower = c
            .value
            .etcd_extra_args
            .get("quota-backend-bytes")
            .and_then(|q| q.parse::<u64>().ok())
            .is_some_and(|q| {
                let talos = spec
                    .get("quota-backend-bytes")
                    .and_then(|t| t.parse::<u64>().ok())
                    .unwrap_or(ETCD_DEFAULT_QUOTA);
                q > talos
            });
        out.push(
            Finding::new(
                id,
                Severity::Blocking,
                field,
                format!(
                    "the etcd members would disagree: {}{}",
                    differ.join("; "),
                    if quota_lower {
                        ". A Talos member with a smaller quota raises a NOSPACE alarm once the database \
                         outgrows it, and an etcd alarm makes the whole API read-only"
                    } else {
                        ". Mismatched election timeouts and heartbeats destabilise a mixed etcd"
                    }
                ),
            )
            .error_if(quota_lower, errors::NOSPACE)
            .fix(if carry.is_empty() {
                "remove from spec.etcd.extraArgs what the kubeadm members do not run".to_string()
            } else {
                format!(
                    "add to cluster.yaml `spec.etcd.extraArgs: {{{}}}` (rendered into Talos's \
                     cluster.etcd.extraArgs)",
                    carry.join(", ")
                )
            }),
        );
    }

    /// M1: CAPV grows a clone's disk only for full clones; a linked clone keeps the
    /// template's disk whatever `diskGiB` says.
    pub(super) fn clone_disk(&self, out: &mut Vec<Finding>) {
        let id = "clone-disk-size";
        let s = &self.i.config.spec;
        let Some(vs) = &s.vsphere else {
            out.push(no_placement(
                id,
                "spec.vsphere.cloneMode",
                "the clone mode and disk sizes were",
            ));
            return;
        };
        let sized: Vec<String> = s
            .control_plane
            .iter()
            .filter(|c| c.machine.disk_gib.is_some())
            .map(|_| "spec.controlPlane.machine.diskGiB".to_string())
            .chain(
                s.workers
                    .iter()
                    .enumerate()
                    .filter(|(_, w)| w.machine.disk_gib.is_some())
                    .map(|(i, _)| format!("spec.workers[{i}].machine.diskGiB")),
            )
            .collect();
        if vs.clone_mode != CloneMode::LinkedClone || sized.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Pass,
                "spec.vsphere.cloneMode",
                if vs.clone_mode == CloneMode::LinkedClone {
                    "linked clones keep the template's disk; no diskGiB is set".into()
                } else {
                    "full clones are grown to diskGiB".into()
                },
            ));
            return;
        }
        out.push(
            Finding::new(
                id,
                Severity::Warning,
                format!("spec.vsphere.cloneMode vs {}", sized.join(", ")),
                "cloneMode `linkedClone` keeps the template's disk: CAPV grows the disk only for full \
                 clones, so the machines run on the template's disk size whatever diskGiB says (EPHEMERAL, \
                 images, etcd)"
                    .into(),
            )
            .fix(
                "set `spec.vsphere.cloneMode: fullClone` for the sizes to apply, or remove diskGiB and size \
                 the template's disk",
            ),
        );
    }
}

/// How Talos treats a kube-apiserver flag given to it as an extra arg: its `manageAPIServer`
/// (`internal/app/machined/pkg/controllers/k8s/control_plane_static_pod.go`, v1.8.4:344-431,
/// v1.9.6:344-435, v1.10.9:344-435, v1.11.6:344-435, v1.12.11:344-431, v1.13.9:344-436)
/// builds the flags, then merges the extra args into them (`pkg/argsbuilder/argsbuilder_args.go`
/// v1.9.6:46-80: MergeDenied refuses, MergeAdditive appends what is not there yet, every other
/// flag is replaced).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TalosFlag {
    /// Compared by another finding (issuer, audiences, service CIDR, encryption,
    /// anonymous auth, the admission configuration, the authorization configuration).
    ComparedElsewhere,
    /// A node-local file or address Talos sets itself (most are MergeDenied).
    Managed,
    /// Talos sets this value; an extra arg replaces it.
    Fixed(&'static str),
    /// Talos sets these comma-separated values; an extra arg is appended to them, never
    /// removes one.
    Additive(&'static str),
    /// Talos does not set it: kube-apiserver's default unless an extra arg sets it.
    Unset,
}

/// The cipher suites Talos v1.8 to v1.11 pass: v1.8.4:379, v1.9.6:378, v1.10.9:378,
/// v1.11.6:378 (with RSA key exchange, `TLS_RSA_WITH_*`).
const TALOS_CIPHER_SUITES_1_8: &str = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_RSA_WITH_AES_256_GCM_SHA384,TLS_RSA_WITH_AES_128_GCM_SHA256";

/// The cipher suites Talos v1.12 and later pass: v1.12.11:374, v1.13.9:374 (the TLS 1.3
/// suites and ECDHE only, no RSA key exchange).
const TALOS_CIPHER_SUITES_1_12: &str = "TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256";

/// What a kubeadm apiserver port other than `spec.endpoint.backendPort` does (D2), said
/// after the kubeadm side's port (`apiserver-uncarried`, `kubeadm-bind-port`).
pub(super) fn backend_port_consequence(e: &crate::model::Endpoint) -> String {
    format!(
        "the Talos apiservers would listen on {} (spec.endpoint.backendPort{}): the load balancer's health \
         checks of the backends fail on every Talos machine, and the API is gone once the kubeadm backends \
         are removed",
        e.backend_port(),
        if e.backend_port.is_none() {
            format!(", absent: {}", crate::model::DEFAULT_BACKEND_PORT)
        } else {
            String::new()
        }
    )
}

/// The fix for [`backend_port_consequence`]: carry the kubeadm port, or move the backends.
pub(super) fn backend_port_fix(kubeadm_port: u16, e: &crate::model::Endpoint) -> String {
    format!(
        "set `spec.endpoint.backendPort: {kubeadm_port}` (rendered as Talos's \
         cluster.controlPlane.localAPIServerPort), or move the load balancer's backends to port {} first",
        e.backend_port()
    )
}

/// How Talos 1.`minor` treats `name` (see [`TalosFlag`]; every row below holds in each
/// minor v1.8 to v1.13 unless it names minors). `None` (a version that does not parse) and a
/// minor above 13 (not read: v1.14 is a pre-release in the mirror) take v1.13.9's rows.
fn talos_flag(name: &str, minor: Option<u32>) -> TalosFlag {
    use crate::model::{apiserver_arg_denied, APISERVER_ARGS_FROM_FIELDS};
    use TalosFlag::*;
    let minor = minor.unwrap_or(13);
    if APISERVER_ARGS_FROM_FIELDS.iter().any(|(n, _)| *n == name)
        || matches!(name, "encryption-provider-config" | "anonymous-auth")
    {
        return ComparedElsewhere;
    }
    // MergeDenied (v1.8.4:417-431 … v1.13.9:421-436).
    if apiserver_arg_denied(name, Some(minor)) {
        return Managed;
    }
    match name {
        // The node's address and Talos's listening port (v1.13.9:361, 388, 398-400).
        "advertise-address" | "bind-address" | "secure-port" => Managed,
        // Builder values, replaced by an extra arg (v1.8.4:359-400, v1.13.9:355-396).
        "allow-privileged" => Fixed("true"),
        "enable-bootstrap-token-auth" => Fixed("true"),
        "requestheader-allowed-names" => Fixed("front-proxy-client"),
        "requestheader-extra-headers-prefix" => Fixed("X-Remote-Extra-"),
        "requestheader-group-headers" => Fixed("X-Remote-Group"),
        "requestheader-username-headers" => Fixed("X-Remote-User"),
        "kubelet-preferred-address-types" => Fixed("InternalIP,ExternalIP,Hostname"),
        "tls-min-version" => Fixed("VersionTLS12"),
        "profiling" => Fixed("false"),
        "audit-policy-file" => Fixed("/system/config/kubernetes/kube-apiserver/auditpolicy.yaml"),
        "audit-log-path" => Fixed("/var/log/audit/kube/kube-apiserver.log"),
        "audit-log-maxage" => Fixed("30"),
        "audit-log-maxbackup" => Fixed("10"),
        "audit-log-maxsize" => Fixed("100"),
        // MergeAdditive (v1.8.4:412-415, v1.9.6:415-418, v1.12.11:411-414, v1.13.9:416-419).
        "enable-admission-plugins" => Additive("NodeRestriction"),
        // v1.8: a builder value (v1.8.4:365). From v1.9 Talos passes `Node,RBAC` when an
        // extra arg sets `authorization-mode` or an `authorization-webhook-*` flag (or
        // Kubernetes is older than 1.29), and otherwise its own authorization configuration,
        // which always holds Node and RBAC (v1.9.6:934-965, v1.13.9:947-978;
        // `control_plane.go` v1.9.6:143-159): Node and RBAC either way.
        "authorization-mode" => Additive("Node,RBAC"),
        "feature-gates" => Additive(""),
        "tls-cipher-suites" if minor >= 12 => Additive(TALOS_CIPHER_SUITES_1_12),
        "tls-cipher-suites" => Additive(TALOS_CIPHER_SUITES_1_8),
        _ => Unset,
    }
}

/// Flags whose difference changes what is logged, not what is served.
fn observability_only(name: &str) -> bool {
    name.starts_with("audit-") || name == "profiling" || name == "v" || name.starts_with("log")
}

/// One flag's difference as the findings say it: kubeadm's value, then Talos's, or the
/// component's default when Talos sets none.
pub(super) fn describe_difference(
    name: &str,
    kubeadm: &str,
    talos: Option<&str>,
    component: &str,
) -> String {
    format!(
        "`--{name}`: kubeadm `{kubeadm}`, Talos {}",
        talos.map_or(format!("{component}'s default"), |t| format!("`{t}`"))
    )
}

/// The items of a comma-separated flag value, trimmed, empty ones left out.
pub(super) fn items(list: &str) -> Vec<&str> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// One kube-apiserver flag on which the kubeadm and Talos apiservers differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlagDifference {
    /// The flag, without `--`.
    pub name: String,
    /// kubeadm's value.
    pub kubeadm: String,
    /// What Talos will run (`None`: not set, kube-apiserver's default).
    pub talos: Option<String>,
    /// The value that makes Talos run as kubeadm does, to put in
    /// `spec.apiServer.extraArgs`; `None` when an extra arg cannot (a file on the
    /// kubeadm node), or when the difference is Talos's own default.
    pub carry: Option<String>,
    /// Only logging differs (audit, profiling).
    pub observability: bool,
    /// Talos runs values of an additive flag kubeadm does not (e.g. cipher suites kubeadm
    /// left out): every value kubeadm runs is there too, so nothing kubeadm served breaks,
    /// and no extra arg can remove them.
    pub widens: bool,
}

/// Compare the kubeadm kube-apiserver's flags with what Talos 1.`talos_minor` will run
/// given `extra_args` (`spec.apiServer.extraArgs`). Flags other findings compare are left to
/// them.
pub fn apiserver_flag_differences(
    kubeadm: &crate::inputs::kubeadm::FlagMap,
    extra_args: &std::collections::BTreeMap<String, String>,
    talos_minor: Option<u32>,
) -> Vec<FlagDifference> {
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (name, _) in kubeadm.iter() {
        if !seen.insert(name) {
            continue;
        }
        let values = kubeadm.get_all(name);
        let k = values.join(",");
        let extra = extra_args.get(name).map(String::as_str);
        let is_file = values.iter().any(|v| v.starts_with('/'));
        let mut widens = false;
        let (talos, same, carry) = match talos_flag(name, talos_minor) {
            TalosFlag::ComparedElsewhere | TalosFlag::Managed => continue,
            TalosFlag::Additive(default) => {
                let mut effective: Vec<&str> = items(default);
                for v in extra.map(items).unwrap_or_default() {
                    if !effective.contains(&v) {
                        effective.push(v);
                    }
                }
                let missing: Vec<&str> = items(&k)
                    .into_iter()
                    .filter(|v| !effective.contains(v))
                    .collect();
                let kubeadm_items = items(&k);
                let added = effective.iter().any(|v| !kubeadm_items.contains(v));
                let mut want: Vec<&str> = extra.map(items).unwrap_or_default();
                want.extend(missing.iter().copied());
                // Only what kubeadm lacks and Talos adds: nothing to carry, a warning.
                widens = missing.is_empty() && added;
                (
                    Some(effective.join(",")),
                    missing.is_empty() && !added,
                    (!missing.is_empty()).then(|| want.join(",")),
                )
            }
            TalosFlag::Fixed(default) => {
                let t = extra.unwrap_or(default);
                (Some(t.to_string()), t == k, Some(k.clone()))
            }
            TalosFlag::Unset => (
                extra.map(str::to_string),
                extra == Some(k.as_str()),
                Some(k.clone()),
            ),
        };
        if same {
            continue;
        }
        out.push(FlagDifference {
            name: name.to_string(),
            kubeadm: k,
            talos,
            // A file on the kubeadm node is not on the Talos nodes: an extra arg alone
            // would point at nothing.
            carry: carry.filter(|_| !is_file || extra.is_some()),
            observability: observability_only(name),
            widens,
        });
    }
    out
}

/// The node-local kubeconfig file a webhook authorizer reads
/// (`webhook.connectionInfo.kubeConfigFile`, with `type: KubeConfigFile`).
fn webhook_kubeconfig(a: &crate::inputs::kubeadm::KubeadmAuthorizer) -> Option<String> {
    let c = a.webhook.as_ref()?.get("connectionInfo")?;
    (c.get("type").and_then(serde_json::Value::as_str) == Some("KubeConfigFile"))
        .then(|| c.get("kubeConfigFile").and_then(serde_json::Value::as_str))
        .flatten()
        .map(|p| crate::printable::line(p).into_owned())
}

/// kube-apiserver's `--anonymous-auth` as the kubeadm apiserver runs it (default true).
fn kubeadm_anonymous(a: &crate::inputs::kubeadm::ApiServerFacts) -> bool {
    a.args.get("anonymous-auth").is_none_or(|v| v != "false")
}

/// What `import kubeadm` records so Talos runs as kubeadm does: the extra args that carry
/// a difference, anonymous auth as kubeadm has it, and the Pod Security level
/// (`privileged` when kubeadm has no admission configuration; unknown otherwise).
pub fn carried_apiserver_settings(
    a: &crate::inputs::kubeadm::ApiServerFacts,
    talos_minor: Option<u32>,
) -> (
    std::collections::BTreeMap<String, String>,
    Option<crate::model::PodSecurityLevel>,
) {
    let mut extra = std::collections::BTreeMap::new();
    for d in apiserver_flag_differences(&a.args, &Default::default(), talos_minor) {
        if let Some(v) = d.carry {
            extra.insert(d.name, v);
        }
    }
    if kubeadm_anonymous(a) {
        extra.insert("anonymous-auth".to_string(), "true".to_string());
    }
    let pod_security = a
        .args
        .get("admission-control-config-file")
        .is_none()
        .then_some(crate::model::PodSecurityLevel::Privileged);
    (extra, pod_security)
}

impl Cx<'_> {
    /// B6(c): every kube-apiserver flag kubeadm runs with, against what Talos will run.
    pub(super) fn apiserver_flags(&self, out: &mut Vec<Finding>) {
        let id = "apiserver-flags";
        let Some(a) = &self.i.apiserver else {
            out.push(not_compared(
                id,
                "spec.apiServer.extraArgs",
                "the kubeadm apiserver's flags",
                "--apiserver-manifest",
            ));
            return;
        };
        let extra = &self.i.config.spec.api_server.extra_args;
        let field = format!("spec.apiServer.extraArgs vs {} command", a.file);
        let diffs = apiserver_flag_differences(
            &a.value.args,
            extra,
            self.talos.filter(|t| t.major == 1).map(|t| t.minor),
        );
        if diffs.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Pass,
                field,
                format!(
                    "the Talos apiservers will run every one of the kubeadm apiserver's {} flags as it does",
                    a.value.args.len()
                ),
            ));
            return;
        }
        let describe = |d: &FlagDifference| {
            describe_difference(&d.name, &d.kubeadm, d.talos.as_deref(), "kube-apiserver")
        };
        let blocking: Vec<&FlagDifference> = diffs
            .iter()
            .filter(|d| !d.observability && !d.widens)
            .collect();
        let carry: Vec<String> = diffs
            .iter()
            .filter_map(|d| d.carry.as_ref().map(|v| format!("{}: \"{v}\"", d.name)))
            .collect();
        let files: Vec<String> = diffs
            .iter()
            .filter(|d| d.carry.is_none() && !d.widens)
            .map(|d| format!("`--{}`", d.name))
            .collect();
        let widened: Vec<String> = diffs
            .iter()
            .filter(|d| d.widens)
            .map(|d| format!("`--{}`", d.name))
            .collect();
        let mut fix = String::new();
        if !carry.is_empty() {
            fix.push_str(&format!(
                "add to cluster.yaml `spec.apiServer.extraArgs: {{{}}}` (rendered into Talos's \
                 cluster.apiServer.extraArgs)",
                carry.join(", ")
            ));
        }
        if !files.is_empty() {
            if !fix.is_empty() {
                fix.push_str("; ");
            }
            fix.push_str(&format!(
                "{} name files on the kubeadm nodes, which the Talos nodes lack: put each file on the \
                 Talos control-plane nodes (`machine.files` in a Talos patch overlay) and mount its \
                 directory (`cluster.apiServer.extraVolumes`), then add the flag to \
                 spec.apiServer.extraArgs; for an audit policy use Talos's `cluster.apiServer.auditPolicy`",
                files.join(", ")
            ));
        }
        if !widened.is_empty() {
            if !fix.is_empty() {
                fix.push_str("; ");
            }
            fix.push_str(&format!(
                "{} also hold values Talos {} always passes (it merges these flags additively, so no extra \
                 arg removes one): accept them, or check that the policy that chose kubeadm's list allows them",
                widened.join(", "),
                self.talos_str()
            ));
        }
        let (severity, what) = if !blocking.is_empty() {
            (
                Severity::Blocking,
                "requests the kubeadm apiservers serve would be authenticated, authorised or admitted \
                 differently whenever they reach a Talos apiserver",
            )
        } else if widened.is_empty() {
            (
                Severity::Warning,
                "the Talos apiservers would log differently",
            )
        } else {
            (
                Severity::Warning,
                "the Talos apiservers would accept more than the kubeadm ones (nothing the kubeadm \
                 apiservers serve breaks)",
            )
        };
        out.push(
            Finding::new(
                id,
                severity,
                field,
                format!(
                    "{what}: {}",
                    diffs.iter().map(describe).collect::<Vec<_>>().join("; ")
                ),
            )
            .fix(fix),
        );
    }

    /// D9, D2: what the kubeadm apiservers run that Talos cannot carry as they run it, so
    /// `apiserver-flags` (which skips the flags Talos manages) must not pass it: the
    /// listening port, several service-account verification keys, a structured
    /// authorization configuration.
    pub(super) fn apiserver_uncarried(&self, out: &mut Vec<Finding>) {
        let id = "apiserver-uncarried";
        let Some(a) = &self.i.apiserver else {
            out.push(not_compared(
                id,
                "spec.endpoint.backendPort, the service-account keys and the authorization configuration",
                "the kubeadm apiserver's flags",
                "--apiserver-manifest",
            ));
            return;
        };
        let endpoint = &self.i.config.spec.endpoint;
        let mut problems: Vec<String> = Vec::new();
        let mut fixes: Vec<String> = Vec::new();
        let mut fields: Vec<String> = Vec::new();
        let mut token_error = false;
        // D2: Talos runs `--secure-port` from `cluster.controlPlane.localAPIServerPort`
        // (Talos v1.10.6 `k8s/control_plane_static_pod.go:392`), which capstan renders from
        // spec.endpoint.backendPort; CABPT passes only the endpoint URL (v0.6.12
        // `talosconfig_controller.go:522-527`).
        let kubeadm_port = a
            .value
            .secure_port()
            .unwrap_or(crate::model::DEFAULT_BACKEND_PORT);
        if kubeadm_port != endpoint.backend_port() {
            fields.push(format!(
                "spec.endpoint.backendPort vs {} --secure-port",
                a.file
            ));
            problems.push(format!(
                "the kubeadm apiservers listen on port {kubeadm_port}, {}",
                backend_port_consequence(endpoint)
            ));
            fixes.push(backend_port_fix(kubeadm_port, endpoint));
        }
        // D9: Talos mounts one `service-account.pub` and refuses the flag as an extra arg
        // (Talos v1.10.6 `control_plane_static_pod.go:394`, MergeDenied `:431`).
        let sa_keys = a.value.args.get_all("service-account-key-file");
        if sa_keys.len() > 1 {
            fields.push(format!("{} --service-account-key-file", a.file));
            token_error = true;
            problems.push(format!(
                "the kubeadm apiservers verify service-account tokens with {} keys ({}), Talos verifies with \
                 one, the bundle's service-account key: every token signed by another key (a rotated-out \
                 signing key, a second issuer's key) is refused by the Talos apiservers",
                sa_keys.len(),
                sa_keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
            ));
            fixes.push(
                "retire the older keys on the kubeadm side first: keep signing with the key the bundle holds \
                 (`--service-account-signing-key-file`, imported as the bundle's service-account key), wait until \
                 every projected token was re-issued (the kubelet renews at 80% of its lifetime: one hour for \
                 default tokens, longer for tokens requested with a longer `expirationSeconds`), delete and \
                 recreate the legacy `kubernetes.io/service-account-token` Secrets signed by the older keys, then \
                 remove the older `--service-account-key-file` flags from every kubeadm apiserver and watch for \
                 `invalid bearer token` before migrating"
                    .into(),
            );
        }
        // D9: Talos writes its own authorization configuration and refuses the flag from
        // v1.9 (MergeDenied, v1.9.6:435 … v1.13.9:436); its carrier,
        // `cluster.apiServer.authorizationConfig`, is in the config schemas of v1.9 to v1.13,
        // not v1.8's (Talos v1.8.4 passes `--authorization-mode=Node,RBAC`, :365).
        let notes = self.authorization_gaps(a, &mut fields, &mut problems, &mut fixes);
        if problems.is_empty() && notes.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Pass,
                format!("spec.endpoint.backendPort vs {} --secure-port", a.file),
                format!(
                    "both sides listen on port {kubeadm_port}, verify service-account tokens with one key and \
                     authorise {}",
                    if a.value.args.contains("authorization-config") {
                        "with the same authorizers (spec.apiServer.authorizationConfig)"
                    } else {
                        "without a structured authorization configuration"
                    }
                ),
            ));
            return;
        }
        if problems.is_empty() {
            out.push(
                Finding::new(
                    id,
                    Severity::Warning,
                    format!(
                        "spec.apiServer.authorizationConfig vs {} --authorization-config",
                        a.file
                    ),
                    format!(
                        "both sides listen on port {kubeadm_port} and verify service-account tokens with one key; \
                         the authorizers are carried, but {}",
                        notes.join("; ")
                    ),
                )
                .fix("see above: Talos carries the configuration, not the files it names"),
            );
            return;
        }
        fixes.extend(notes);
        out.push(
            Finding::new(
                id,
                Severity::Blocking,
                fields.join("; "),
                problems.join("; "),
            )
            .error_if(
                token_error,
                crate::migration::check::errors::INVALID_BEARER_TOKEN,
            )
            .fix(fixes.join("; ")),
        );
    }

    /// D9: the structured authorization configuration the kubeadm apiservers run, against
    /// what spec.apiServer.authorizationConfig carries: its problems (with their fields and
    /// fixes) pushed, its notes returned.
    fn authorization_gaps(
        &self,
        a: &crate::migration::check::Input<crate::inputs::kubeadm::ApiServerFacts>,
        fields: &mut Vec<String>,
        problems: &mut Vec<String>,
        fixes: &mut Vec<String>,
    ) -> Vec<String> {
        let mut notes: Vec<String> = Vec::new();
        if let Some(file) = a.value.args.get("authorization-config") {
            let carried = &self.i.config.spec.api_server.authorization_config;
            let field = format!(
                "spec.apiServer.authorizationConfig vs {} --authorization-config",
                a.file
            );
            let lost = format!(
                "the kubeadm apiservers authorise with the structured authorization configuration `{file}` \
                 (webhook authorizers, CEL match conditions); Talos writes its own and refuses the flag, so \
                 requests only a kubeadm authorizer allows get 403 from the Talos apiservers"
            );
            if !self.talos_at_least(9) {
                fields.push(field);
                problems.push(lost);
                fixes.push(format!(
                    "Talos {} has no `cluster.apiServer.authorizationConfig` (from v1.9 on): migrate to Talos \
                     v1.9 or later and set spec.apiServer.authorizationConfig, or move the kubeadm apiservers to \
                     `--authorization-mode` with `--authorization-webhook-config-file` first",
                    self.talos_str()
                ));
            } else if carried.is_empty() {
                fields.push(field);
                problems.push(lost);
                fixes.push(format!(
                    "set spec.apiServer.authorizationConfig to the `authorizers` of `{file}` (rendered into \
                     Talos's cluster.apiServer.authorizationConfig; Talos adds Node first and RBAC second when \
                     they are missing){}",
                    self.i.authorization.as_ref().map_or_else(
                        || format!(", and check again with `--authorization-config {file}` to compare them"),
                        |k| format!(
                            ": {}",
                            k.value
                                .iter()
                                .map(|x| {
                                    format!(
                                        "{{type: {}, name: {}{}}}",
                                        crate::printable::line(&x.kind),
                                        crate::printable::line(&x.name),
                                        if x.webhook.is_some() { ", webhook: …" } else { "" }
                                    )
                                })
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    )
                ));
            } else if let Some(k) = &self.i.authorization {
                let talos = crate::model::talos_authorizers(carried);
                let same = talos.len() == k.value.len()
                    && talos.iter().zip(&k.value).all(|(t, x)| {
                        t.kind.as_str() == x.kind && t.name == x.name && t.webhook == x.webhook
                    });
                if same {
                    for (i, x) in k.value.iter().enumerate() {
                        if let Some(path) = webhook_kubeconfig(x) {
                            notes.push(format!(
                                "the webhook authorizer `{}` (spec.apiServer.authorizationConfig[{i}]) reads \
                                 `{path}` on the node, which Talos does not write: put it on the Talos control-plane \
                                 nodes (`machine.files` in a Talos patch overlay) and mount its directory \
                                 (`cluster.apiServer.extraVolumes`), or every request that reaches the webhook \
                                 fails on a Talos apiserver",
                                crate::printable::line(&x.name)
                            ));
                        }
                    }
                } else {
                    let show = |kind: &str, name: &str| {
                        format!("{kind} `{}`", crate::printable::line(name))
                    };
                    fields.push(format!("{field} ({})", k.file));
                    problems.push(format!(
                        "the kubeadm apiservers authorise with {} in that order (`{}`), the Talos apiservers \
                         would with {} (spec.apiServer.authorizationConfig, Node and RBAC added where missing, \
                         webhooks compared field by field): requests are decided differently whenever they reach \
                         a Talos apiserver",
                        k.value.iter().map(|x| show(&x.kind, &x.name)).collect::<Vec<_>>().join(", "),
                        k.file,
                        talos.iter().map(|x| show(x.kind.as_str(), &x.name)).collect::<Vec<_>>().join(", "),
                    ));
                    fixes.push(format!(
                        "make spec.apiServer.authorizationConfig the `authorizers` of `{}` as written (same order, \
                         names and webhook settings; Talos takes only Node, RBAC and Webhook)",
                        k.file
                    ));
                }
            } else {
                notes.push(format!(
                    "spec.apiServer.authorizationConfig is set but was not compared with `{file}`: pass \
                     `--authorization-config` with a copy of it"
                ));
            }
        }
        notes
    }

    /// B6(b): Talos runs `--anonymous-auth=false`; a load balancer's HTTP health check of
    /// `/healthz` or `/readyz` then gets 401 and takes the Talos apiservers out.
    pub(super) fn anonymous_auth(&self, out: &mut Vec<Finding>) {
        let id = "anonymous-auth";
        let extra = self
            .i
            .config
            .spec
            .api_server
            .extra_args
            .get("anonymous-auth");
        let talos = extra.map_or("false", String::as_str);
        let field = "spec.apiServer.extraArgs.anonymous-auth";
        let Some(a) = &self.i.apiserver else {
            if extra.is_some() {
                out.push(Finding::new(
                    id,
                    Severity::Pass,
                    field,
                    format!("set explicitly: the Talos apiservers run `--anonymous-auth={talos}`"),
                ));
            } else {
                out.push(
                    Finding::new(
                        id,
                        Severity::Warning,
                        field,
                        "Talos runs `--anonymous-auth=false` and the kubeadm side was not read: a load \
                         balancer health check of `/healthz` or `/readyz` gets 401 from Talos apiservers"
                            .into(),
                    )
                    .fix(
                        "pass --apiserver-manifest, or set spec.apiServer.extraArgs.anonymous-auth \
                         (\"true\" as kube-apiserver's default, or \"false\" with TCP health checks)",
                    ),
                );
            }
            return;
        };
        let kubeadm = kubeadm_anonymous(&a.value);
        let field = format!("{field} vs {} --anonymous-auth", a.file);
        if kubeadm == (talos == "true") {
            out.push(Finding::new(
                id,
                Severity::Pass,
                field,
                format!("both sides run `--anonymous-auth={talos}`"),
            ));
            return;
        }
        out.push(
            Finding::new(
                id,
                if kubeadm { Severity::Blocking } else { Severity::Warning },
                field,
                if kubeadm {
                    "kubeadm's apiservers allow anonymous requests (kube-apiserver's default), Talos's \
                     refuse them (`--anonymous-auth=false`): a load balancer's HTTP health check of \
                     `/healthz` or `/readyz` gets 401 and marks every Talos apiserver down, and the API is \
                     gone once the kubeadm backends are removed"
                        .to_string()
                } else {
                    format!("kubeadm refuses anonymous requests, the Talos apiservers would run `--anonymous-auth={talos}`")
                },
            )
            .fix(if kubeadm {
                "set spec.apiServer.extraArgs.anonymous-auth: \"true\" (as kubeadm runs), or switch the \
                 load balancer to TCP health checks and set it to \"false\" explicitly"
            } else {
                "set spec.apiServer.extraArgs.anonymous-auth: \"false\", or remove it"
            }),
        );
    }

    /// B6(a): Talos's generated config enforces Pod Security `baseline` on every namespace
    /// but kube-system; kubeadm configures none, so everything is `privileged`.
    pub(super) fn pod_security(&self, out: &mut Vec<Finding>) {
        use crate::model::PodSecurityLevel;
        let id = "pod-security";
        let level = self.i.config.spec.api_server.pod_security;
        let field = "spec.apiServer.podSecurity";
        let kubeadm = self.i.apiserver.as_ref().map(|a| {
            (
                a.file.clone(),
                a.value
                    .args
                    .get("admission-control-config-file")
                    .map(str::to_string),
            )
        });
        match (kubeadm, level) {
            (Some((file, None)), Some(PodSecurityLevel::Privileged)) => out.push(Finding::new(
                id,
                Severity::Pass,
                format!("{field} vs {file}"),
                "kubeadm configures no Pod Security admission (privileged); Talos will enforce `privileged` too".into(),
            )),
            (Some((file, None)), l) => out.push(
                Finding::new(
                    id,
                    Severity::Blocking,
                    format!("{field} vs {file}"),
                    format!(
                        "kubeadm configures no Pod Security admission, so every namespace is `privileged`; \
                         Talos would enforce `{}` on every namespace but kube-system: pods needing hostPath, \
                         hostNetwork, hostPID or privileged (node exporters, CSI node plugins, agents) are \
                         rejected whenever their creation reaches a Talos apiserver",
                        l.map_or("baseline", PodSecurityLevel::as_str)
                    ),
                )
                .fix("set `spec.apiServer.podSecurity: privileged` (label namespaces to tighten them later)"),
            ),
            (Some((file, Some(config))), None) => out.push(
                Finding::new(
                    id,
                    Severity::Blocking,
                    format!("{field} vs {file} --admission-control-config-file"),
                    format!(
                        "kubeadm reads its admission configuration from `{config}` on its nodes, which capstan \
                         cannot see; Talos would enforce `baseline`"
                    ),
                )
                .fix(format!(
                    "read the PodSecurity `defaults.enforce` in `{config}` and set spec.apiServer.podSecurity \
                     to it; carry other plugins' configuration with a Talos patch of \
                     cluster.apiServer.admissionControl"
                )),
            ),
            (Some((file, Some(config))), Some(l)) => out.push(Finding::new(
                id,
                Severity::Info,
                format!("{field} vs {file} --admission-control-config-file"),
                format!(
                    "Talos will enforce `{}`; kubeadm's level is in `{config}` on its nodes: compare by hand",
                    l.as_str()
                ),
            )),
            (None, Some(l)) => out.push(Finding::new(
                id,
                Severity::Pass,
                field,
                format!("set explicitly: Talos will enforce `{}`", l.as_str()),
            )),
            (None, None) => out.push(
                Finding::new(
                    id,
                    Severity::Warning,
                    field,
                    "not set: Talos would enforce `baseline` on every namespace but kube-system, where kubeadm \
                     enforces nothing unless configured"
                        .into(),
                )
                .fix("pass --apiserver-manifest, or set spec.apiServer.podSecurity (kubeadm's default: `privileged`)"),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::kubeadm::FlagMap;

    fn flags(pairs: &[(&str, &str)]) -> FlagMap {
        let mut m = FlagMap::new();
        for (k, v) in pairs {
            m.push(k, v);
        }
        m
    }

    /// Talos merges `tls-cipher-suites` additively into a list that changed in v1.12
    /// (v1.11.6:378 with RSA key exchange, v1.12.11:374 without).
    #[test]
    fn cipher_suites_are_additive_with_the_minor_s_list() {
        let kubeadm = flags(&[("tls-cipher-suites", TALOS_CIPHER_SUITES_1_8)]);
        let none = Default::default();
        // v1.8-v1.11 run exactly this list: nothing differs.
        for minor in [8, 9, 10, 11] {
            assert!(
                apiserver_flag_differences(&kubeadm, &none, Some(minor)).is_empty(),
                "v1.{minor}"
            );
        }
        // v1.12+ lack the two RSA suites: they must be carried.
        for minor in [12, 13] {
            let d = apiserver_flag_differences(&kubeadm, &none, Some(minor));
            assert_eq!(d.len(), 1, "v1.{minor}: {d:?}");
            assert_eq!(d[0].name, "tls-cipher-suites");
            assert!(!d[0].widens);
            assert_eq!(
                d[0].carry.as_deref(),
                Some("TLS_RSA_WITH_AES_256_GCM_SHA384,TLS_RSA_WITH_AES_128_GCM_SHA256")
            );
            assert!(d[0]
                .talos
                .as_deref()
                .is_some_and(|t| t.starts_with("TLS_AES_128_GCM_SHA256,")));
        }
        // The carried extra arg (appended to Talos's list) leaves only what v1.12 adds (the
        // TLS 1.3 and `_SHA256` ChaCha names): widened, nothing missing.
        let carried = [(
            "tls-cipher-suites".to_string(),
            "TLS_RSA_WITH_AES_256_GCM_SHA384,TLS_RSA_WITH_AES_128_GCM_SHA256".to_string(),
        )]
        .into_iter()
        .collect();
        let d = apiserver_flag_differences(&kubeadm, &carried, Some(12));
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].widens && d[0].carry.is_none());
    }

    /// A kubeadm list narrower than Talos's: every suite kubeadm runs is there, Talos runs
    /// more, and no extra arg removes them (MergeAdditive): a warning, nothing to carry.
    #[test]
    fn a_narrower_kubeadm_cipher_list_is_widened_not_carried() {
        let kubeadm = flags(&[("tls-cipher-suites", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256")]);
        for minor in [8, 11, 12, 13] {
            let d = apiserver_flag_differences(&kubeadm, &Default::default(), Some(minor));
            assert_eq!(d.len(), 1, "v1.{minor}: {d:?}");
            assert!(d[0].widens);
            assert_eq!(d[0].carry, None);
        }
        // v1.8-v1.11 add the RSA key-exchange suites, v1.12+ do not.
        let t = |minor| {
            apiserver_flag_differences(&kubeadm, &Default::default(), Some(minor))[0]
                .talos
                .clone()
                .unwrap_or_default()
        };
        assert!(t(11).contains("TLS_RSA_WITH_AES_128_GCM_SHA256"));
        assert!(!t(12).contains("TLS_RSA_WITH_AES_128_GCM_SHA256"));
    }

    /// `authorization-config`: MergeDenied from v1.9 (v1.9.6:435), not in v1.8.4's list; the
    /// file flags in every minor. `check` leaves it to `apiserver-uncarried` in each.
    #[test]
    fn authorization_config_is_denied_from_v1_9() {
        use crate::model::apiserver_arg_denied;
        assert!(!apiserver_arg_denied("authorization-config", Some(8)));
        for minor in 9..=13 {
            assert!(apiserver_arg_denied("authorization-config", Some(minor)));
        }
        for minor in 8..=13 {
            assert!(apiserver_arg_denied(
                "service-account-key-file",
                Some(minor)
            ));
            assert!(!apiserver_arg_denied("tls-cipher-suites", Some(minor)));
            assert_eq!(
                talos_flag("authorization-config", Some(minor)),
                TalosFlag::ComparedElsewhere
            );
        }
    }
}
