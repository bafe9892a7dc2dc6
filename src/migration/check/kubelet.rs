//! kubelet parity: the kubeadm kubelets' configuration (the
//! `kubelet-config` ConfigMap) against what a Talos kubelet runs. Talos fills `clusterDNS`
//! with the 10th address of each service CIDR and `clusterDomain` with the DNS domain
//! unless `machine.kubelet.clusterDNS`/`extraConfig` say otherwise, and sets its own
//! `systemReserved` (Talos `kubelet_spec.go` v1.10.6:344-381); everything else is the
//! kubelet's default unless `machine.kubelet.extraConfig` sets it.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{not_compared, CheckError, Cx, Finding, Severity};

/// The kubelet settings that shape what a node runs (capacity, eviction, resource
/// managers), compared key by key, with what a Talos kubelet runs without them.
pub const KUBELET_PARITY_KEYS: &[(&str, &str)] = &[
    ("maxPods", "110 (the kubelet's default)"),
    (
        "systemReserved",
        "Talos's: cpu 50m, memory 384Mi (workers) or 512Mi (control plane), pid 100, ephemeral-storage 256Mi",
    ),
    ("kubeReserved", "none"),
    (
        "evictionHard",
        "the kubelet's: memory.available<100Mi, nodefs.available<10%, imagefs.available<15%, nodefs.inodesFree<5%",
    ),
    ("evictionSoft", "none"),
    ("evictionSoftGracePeriod", "none"),
    ("evictionMinimumReclaim", "none"),
    ("podPidsLimit", "none"),
    ("cpuManagerPolicy", "none"),
    ("memoryManagerPolicy", "None"),
    ("topologyManagerPolicy", "none"),
    ("reservedSystemCPUs", "none"),
    ("featureGates", "none"),
    ("imageGCHighThresholdPercent", "85"),
    ("imageGCLowThresholdPercent", "80"),
    ("containerLogMaxSize", "10Mi"),
    ("containerLogMaxFiles", "5"),
];

/// The kubelet's default `maxPods`.
const DEFAULT_MAX_PODS: u64 = 110;

/// A kubeadm kubelet's configuration, as read.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeletFacts {
    /// The KubeletConfiguration's fields.
    pub config: Map<String, Value>,
}

impl KubeletFacts {
    /// `clusterDNS`, as given (empty when unset).
    pub fn cluster_dns(&self) -> Vec<String> {
        self.config
            .get("clusterDNS")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Reads a KubeletConfiguration: the `kubelet-config` ConfigMap (`kubectl -n kube-system get
/// cm kubelet-config -o yaml`, key `kubelet`) or the file itself (`/var/lib/kubelet/config.yaml`).
pub fn parse_kubelet_config(file: &str, docs: &[Value]) -> Result<KubeletFacts, CheckError> {
    let bad = |problem: String| CheckError::KubeletConfig {
        file: file.to_string(),
        problem,
    };
    for doc in docs {
        match doc.get("kind").and_then(Value::as_str) {
            Some("KubeletConfiguration") => {
                if let Value::Object(m) = doc {
                    return Ok(KubeletFacts { config: m.clone() });
                }
            }
            Some("ConfigMap") => {
                let text = doc
                    .pointer("/data/kubelet")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        bad("data.kubelet: expected the KubeletConfiguration as a string".into())
                    })?;
                let inner = crate::yaml::parse_one(text)
                    .map_err(|e| bad(format!("data.kubelet: not YAML: {e}")))?;
                return match inner {
                    Value::Object(m)
                        if m.get("kind").and_then(Value::as_str)
                            == Some("KubeletConfiguration") =>
                    {
                        Ok(KubeletFacts { config: m })
                    }
                    _ => Err(bad("data.kubelet: expected a KubeletConfiguration".into())),
                };
            }
            _ => {}
        }
    }
    Err(bad(
        "no KubeletConfiguration found; expected `kubectl -n kube-system get cm kubelet-config -o yaml` \
         or /var/lib/kubelet/config.yaml"
            .into(),
    ))
}

/// The 10th address of each service CIDR: what Talos gives the kubelet as `clusterDNS`
/// (`NthIPInCIDRSet(serviceCIDRs, 10)`, `v1alpha1_clusterconfig.go` v1.10.6:258-265).
pub fn talos_cluster_dns(service_cidrs: &[String]) -> Vec<String> {
    super::parity::nth_ips(service_cidrs, 10)
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// A value a kubeadm KubeletConfiguration writes for "unset": kubeadm spells out many
/// fields as `0s`, `0`, `{}` or `""`, which the kubelet then defaults.
fn is_unset(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty() || s == "0s",
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Bool(_) => false,
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// What `import kubeadm` records in `spec.kubelet` from a kubeadm kubelet's configuration:
/// its `clusterDNS` when Talos would use another, and every [`KUBELET_PARITY_KEYS`] field it
/// sets (so `kubelet-config` then passes).
pub fn carried_kubelet_settings(
    facts: &KubeletFacts,
    service_cidrs: &[String],
) -> crate::model::Kubelet {
    let dns = facts.cluster_dns();
    crate::model::Kubelet {
        cluster_dns: if dns.is_empty() || dns == talos_cluster_dns(service_cidrs) {
            Vec::new()
        } else {
            dns
        },
        extra_config: KUBELET_PARITY_KEYS
            .iter()
            .filter_map(|(k, _)| {
                facts
                    .config
                    .get(*k)
                    .filter(|v| !is_unset(v))
                    .map(|v| (k.to_string(), v.clone()))
            })
            .collect(),
    }
}

impl Cx<'_> {
    /// `kubelet-config`: clusterDNS, clusterDomain and the capacity and eviction settings of
    /// the kubeadm kubelets against what the Talos kubelets will run.
    pub(super) fn kubelet_config(&self, out: &mut Vec<Finding>) {
        let id = "kubelet-config";
        let s = &self.i.config.spec;
        let Some(k) = &self.i.kubelet else {
            out.push(not_compared(
                id,
                "spec.kubelet",
                "the kubeadm kubelets' clusterDNS, maxPods, reserved resources and eviction",
                "--kubelet-config",
            ));
            return;
        };
        let field = format!("spec.kubelet vs {} (KubeletConfiguration)", k.file);
        let cfg = &k.value.config;
        let mut blocking = Vec::new();
        let mut warning = Vec::new();
        let mut carry: BTreeMap<&str, Value> = BTreeMap::new();
        // clusterDNS: what pods' resolv.conf points at.
        let kubeadm_dns = k.value.cluster_dns();
        let talos_dns = if s.kubelet.cluster_dns.is_empty() {
            talos_cluster_dns(&s.network.services)
        } else {
            s.kubelet.cluster_dns.clone()
        };
        let mut dns_fix = None;
        if !kubeadm_dns.is_empty() && kubeadm_dns != talos_dns {
            blocking.push(format!(
                "`clusterDNS`: kubeadm {}, Talos {} — pods on Talos nodes would send DNS queries to another address{}",
                kubeadm_dns.join(", "),
                talos_dns.join(", "),
                if kubeadm_dns.iter().any(|d| d.starts_with("169.254.")) {
                    " (kubeadm's is a node-local DNS cache)"
                } else {
                    ""
                }
            ));
            dns_fix = Some(format!("clusterDNS: [{}]", kubeadm_dns.join(", ")));
        }
        if let Some(d) = cfg.get("clusterDomain").and_then(Value::as_str) {
            if !d.is_empty()
                && d.trim_end_matches('.') != s.network.dns_domain.trim_end_matches('.')
            {
                blocking.push(format!(
                    "`clusterDomain`: kubeadm {d}, Talos {} (spec.network.dnsDomain)",
                    s.network.dns_domain
                ));
            }
        }
        for (key, talos_default) in KUBELET_PARITY_KEYS {
            let kubeadm = cfg.get(*key).filter(|v| !is_unset(v));
            let talos = s.kubelet.extra_config.get(*key);
            match (kubeadm, talos) {
                (Some(a), Some(b)) if a == b => {}
                (None, None) => {}
                (Some(a), t) => {
                    let line = format!(
                        "`{key}`: kubeadm {}, Talos {}",
                        show(a),
                        t.map_or_else(|| talos_default.to_string(), show)
                    );
                    let fewer_pods = *key == "maxPods"
                        && a.as_u64().unwrap_or(DEFAULT_MAX_PODS)
                            > t.and_then(Value::as_u64).unwrap_or(DEFAULT_MAX_PODS);
                    if fewer_pods {
                        blocking.push(format!("{line} — Talos nodes would hold fewer pods"));
                    } else {
                        warning.push(line);
                    }
                    carry.insert(key, a.clone());
                }
                (None, Some(t)) => warning.push(format!(
                    "`{key}`: kubeadm runs the default, Talos {} (spec.kubelet.extraConfig)",
                    show(t)
                )),
            }
        }
        if blocking.is_empty() && warning.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Pass,
                field,
                format!(
                    "the Talos kubelets will run with the kubeadm kubelets' clusterDNS ({}), cluster domain, pod limit, \
                     reserved resources and eviction thresholds",
                    talos_dns.join(", ")
                ),
            ));
            return;
        }
        let mut fix = Vec::new();
        if let Some(d) = dns_fix {
            fix.push(d);
        }
        if !carry.is_empty() {
            let json = Value::Object(carry.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
            fix.push(format!("extraConfig: {json}"));
        }
        let severity = if blocking.is_empty() {
            Severity::Warning
        } else {
            Severity::Blocking
        };
        let all: Vec<String> = blocking.into_iter().chain(warning).collect();
        out.push(
            Finding::new(
                id,
                severity,
                field,
                format!(
                    "the Talos kubelets would run differently from the kubeadm ones: {}",
                    all.join("; ")
                ),
            )
            .fix(if fix.is_empty() {
                "remove from spec.kubelet what the kubeadm kubelets do not run".to_string()
            } else {
                format!(
                    "set in cluster.yaml `spec.kubelet: {{{}}}` (rendered into Talos's machine.kubelet of every machine)",
                    fix.join(", ")
                )
            }),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn talos_cluster_dns_is_the_tenth_address() {
        assert_eq!(
            talos_cluster_dns(&["10.96.0.0/12".into(), "fd00:10:96::/112".into()]),
            ["10.96.0.10", "fd00:10:96::a"]
        );
    }

    #[test]
    fn reads_the_config_map_or_the_file() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kubelet-config"},
            "data": {"kubelet": "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 250\n"}});
        let k = parse_kubelet_config("cm.yaml", &[cm]).unwrap();
        assert_eq!(k.config["maxPods"], 250);
        let file = json!({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "clusterDNS": ["169.254.20.10"]});
        let k = parse_kubelet_config("config.yaml", &[file]).unwrap();
        assert_eq!(k.config["clusterDNS"][0], "169.254.20.10");
        for (doc, needle) in [
            (json!({"kind": "Pod"}), "no KubeletConfiguration found"),
            (
                json!({"kind": "ConfigMap", "data": {}}),
                "data.kubelet: expected",
            ),
            (
                json!({"kind": "ConfigMap", "data": {"kubelet": "kind: Other\n"}}),
                "expected a KubeletConfiguration",
            ),
        ] {
            let e = parse_kubelet_config("x.yaml", &[doc])
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("x.yaml: ") && e.contains(needle), "{e}");
        }
    }

    #[test]
    fn kubeadm_zero_values_are_unset() {
        for v in [
            json!("0s"),
            json!(0),
            json!({}),
            json!([]),
            json!(""),
            Value::Null,
        ] {
            assert!(is_unset(&v), "{v}");
        }
        for v in [json!("1m"), json!(250), json!({"cpu": "1"}), json!(false)] {
            assert!(!is_unset(&v), "{v}");
        }
    }
}
