//! `capstan backup check`: does the newest backup hold what a restore needs for every
//! cluster in git? Per cluster: its Cluster, its TalosControlPlane, as many Machines as the
//! rendered replicas ask for (control plane and every pool; an autoscaled pool its minimum),
//! every Machine's infrastructure object, when its machine templates take addresses from an
//! IPAM pool an IPAddressClaim and an IPAddress per Machine, and the Secrets a restore needs
//! (`<cluster>-talos`, `<cluster>-ca`, the vSphere identity Secret), the CA's certificate
//! the one `spec.provenance` records; and no Cluster that a `capstan backup dump` found paused
//! on the live cluster (a killed `clusterctl move`). A backup older than the allowed age is stale. Pure:
//! rendered objects and the backup's object manifest ([`super::objects`]) in, a report out;
//! no Secret value is needed, so no private key.

use super::objects::Entry;
use crate::resource::Resource;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// What git says one cluster must have in a backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Expected {
    /// The cluster's name.
    pub name: String,
    /// Its namespace on the management cluster.
    pub namespace: String,
    /// The TalosControlPlane's name.
    pub control_plane: Option<String>,
    /// Machines the rendered replicas ask for.
    pub machines: u64,
    /// Whether its machines take addresses from an IPAM pool.
    pub ipam: bool,
    /// The Secrets a restore needs, in its namespace
    /// ([`crate::secrets::seal::restore_secret_names`]).
    pub secrets: Vec<String>,
    /// `spec.provenance.fingerprints.kubernetesCa`: the certificate `<cluster>-ca` must hold.
    pub ca_fingerprint: Option<String>,
}

/// The expectation of one rendered cluster (the Secrets and the CA fingerprint are the
/// caller's, from its `cluster.yaml`).
pub(crate) fn expected(name: &str, namespace: &str, resources: &[Resource]) -> Expected {
    let mut e = Expected {
        name: name.to_string(),
        namespace: namespace.to_string(),
        control_plane: None,
        machines: 0,
        ipam: false,
        secrets: Vec::new(),
        ca_fingerprint: None,
    };
    for r in resources {
        let kind = r.value.get("kind").and_then(Value::as_str).unwrap_or("");
        let replicas = r.value.pointer("/spec/replicas").and_then(Value::as_u64);
        match kind {
            "TalosControlPlane" => {
                e.control_plane = r
                    .value
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                e.machines += replicas.unwrap_or(0);
            }
            "MachineDeployment" => {
                let min = crate::resource::autoscaler_sizes(&r.value)
                    .and_then(|(min, _)| min.parse::<u64>().ok());
                e.machines += replicas.or(min).unwrap_or(0);
            }
            "VSphereMachineTemplate" => {
                let devices = r
                    .value
                    .pointer("/spec/template/spec/network/devices")
                    .and_then(Value::as_array);
                if devices.into_iter().flatten().any(|d| {
                    d.get("addressesFromPools")
                        .and_then(Value::as_array)
                        .is_some_and(|p| !p.is_empty())
                }) {
                    e.ipam = true;
                }
            }
            _ => {}
        }
    }
    e
}

/// One cluster's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterCheck {
    /// The cluster.
    pub name: String,
    /// What the backup lacks for it (empty: complete).
    pub missing: Vec<String>,
}

/// The whole check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Report {
    /// The backup checked.
    pub backup: String,
    /// Its time.
    pub created: String,
    /// Its age in seconds at the check.
    pub age_seconds: i64,
    /// Whether it is older than allowed.
    pub stale: bool,
    /// Every cluster in git.
    pub clusters: Vec<ClusterCheck>,
    /// Where its key custody falls short ([`super::custody::index_policy`]; empty: it holds).
    pub custody: Vec<String>,
}

impl Report {
    /// Whether anything is missing or the backup is stale.
    pub(crate) fn failed(&self) -> bool {
        self.stale
            || !self.custody.is_empty()
            || self.clusters.iter().any(|c| !c.missing.is_empty())
    }
}

/// Seconds since the Unix epoch of an RFC 3339 UTC time `YYYY-MM-DDTHH:MM:SSZ`.
pub(crate) fn unix_of(rfc3339: &str) -> Option<i64> {
    let b = rfc3339.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[10] != b'T' || b[19] != b'Z' {
        return None;
    }
    let n = |r: std::ops::Range<usize>| rfc3339.get(r)?.parse::<u32>().ok();
    let month = time::Month::try_from(u8::try_from(n(5..7)?).ok()?).ok()?;
    let date = time::Date::from_calendar_date(
        i32::try_from(n(0..4)?).ok()?,
        month,
        u8::try_from(n(8..10)?).ok()?,
    )
    .ok()?;
    let t = time::Time::from_hms(
        u8::try_from(n(11..13)?).ok()?,
        u8::try_from(n(14..16)?).ok()?,
        u8::try_from(n(17..19)?).ok()?,
    )
    .ok()?;
    Some(date.with_time(t).assume_utc().unix_timestamp())
}

/// A duration `90s`, `30m`, `24h` or `7d`, in seconds.
pub(crate) fn parse_duration(s: &str) -> Option<i64> {
    let unit = s.chars().last()?;
    let mul = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return None,
    };
    let n: i64 = s[..s.len() - 1].parse().ok()?;
    n.checked_mul(mul).filter(|v| *v > 0)
}

/// Why a Secret a restore needs matters, for the report.
fn why(cluster: &str, secret: &str) -> &'static str {
    match secret.strip_prefix(cluster) {
        Some("-talos") => {
            "the Talos secrets bundle; without it a restored bootstrap provider generates a new Talos PKI \
             for the first new Machine and the control-plane provider loses every node. `clusterctl move` \
             saves it only with the label clusterctl.cluster.x-k8s.io/move: render it from this capstan \
             (the sealed Secrets carry the label) and back up again; in secrets mode operator its SopsSecret \
             owns it and `clusterctl move` never saves it: back up with `capstan backup dump`"
        }
        Some("-ca") => {
            "the Kubernetes CA; `clusterctl move` saves it by its name when nothing owns it, and never when \
             its SopsSecret owns it (secrets mode operator): back up with `capstan backup dump`, which saves \
             it without that owner"
        }
        _ => {
            "the vSphere identity (spec.vsphere.identityRef); `clusterctl move` saves it only with the label \
             clusterctl.cluster.x-k8s.io/move or CAPV's ownership: render it from this capstan and back up again; \
             in secrets mode operator, back up with `capstan backup dump`"
        }
    }
}

/// Check a backup's object manifest against what git expects.
pub(crate) fn check(
    backup: &super::Index,
    objects: &[Entry],
    expected: &[Expected],
    now_unix: i64,
    max_age_seconds: i64,
) -> Report {
    let have: BTreeSet<(&str, &str, &str)> = objects
        .iter()
        .map(|o| (o.kind.as_str(), o.namespace.as_str(), o.name.as_str()))
        .collect();
    let age = unix_of(&backup.created).map_or(i64::MAX, |t| now_unix - t);
    let mut clusters = Vec::new();
    for e in expected {
        let mut missing = Vec::new();
        let ns = e.namespace.as_str();
        if !have.contains(&("Cluster", ns, e.name.as_str())) {
            missing.push(format!("Cluster {ns}/{}", e.name));
        }
        // D6: a Cluster a killed `clusterctl move` left paused (cluster-api v1.10.10
        // `mover.go:393-436`): nothing of the cluster reconciles. capstan's phases pause the
        // TalosControlPlane (its `cluster.x-k8s.io/paused` annotation), never the Cluster, so
        // no phase expects it. Known from a `capstan backup dump` record only.
        let key = format!("{ns}/{}", e.name);
        if objects
            .iter()
            .filter_map(|o| o.paused_clusters.as_ref())
            .any(|p| p.contains(&key))
        {
            missing.push(format!(
                "Cluster {key} was paused (spec.paused: true) on the management cluster when this backup was dumped: a \
                 `clusterctl move` killed between pausing and unpausing leaves it so, and nothing of the cluster \
                 reconciles (capstan's phases pause only the TalosControlPlane). Make sure no move runs, then \
                 `kubectl -n {ns} patch clusters.cluster.x-k8s.io {} --type merge -p '{{\"spec\":{{\"paused\":false}}}}'` \
                 and dump again",
                e.name
            ));
        }
        if let Some(cp) = &e.control_plane {
            if !have.contains(&("TalosControlPlane", ns, cp.as_str())) {
                missing.push(format!("TalosControlPlane {ns}/{cp}"));
            }
        }
        for secret in &e.secrets {
            let found = objects
                .iter()
                .find(|o| o.kind == "Secret" && o.namespace == ns && &o.name == secret);
            let Some(found) = found else {
                missing.push(format!("Secret {ns}/{secret} ({})", why(&e.name, secret)));
                continue;
            };
            if *secret == format!("{}-ca", e.name) {
                if let Some(want) = &e.ca_fingerprint {
                    match found.secret.as_ref().and_then(|s| s.ca_fingerprint.as_ref()) {
                        Some(fp) if fp == want => {}
                        Some(fp) => missing.push(format!(
                            "Secret {ns}/{secret} holds the CA {fp}, but spec.provenance records {want}: the backup \
                             holds another PKI than git (one a provider generated, e.g. after a restore without the \
                             Secrets); restoring it would lock the cluster out"
                        )),
                        None => missing.push(format!(
                            "Secret {ns}/{secret}: no tls.crt certificate to compare with spec.provenance ({want})"
                        )),
                    }
                }
            }
        }
        let machines: Vec<&Entry> = objects
            .iter()
            .filter(|o| {
                o.kind == "Machine"
                    && o.namespace == e.namespace
                    && o.cluster.as_deref() == Some(e.name.as_str())
            })
            .collect();
        if (machines.len() as u64) < e.machines {
            missing.push(format!(
                "Machines: {} in the backup, the rendered replicas ask for {}",
                machines.len(),
                e.machines
            ));
        }
        let mut infra_missing = BTreeMap::new();
        for m in &machines {
            match m.infrastructure.as_deref().and_then(|i| i.split_once('/')) {
                Some((k, n)) if have.contains(&(k, ns, n)) => {}
                Some((k, n)) => {
                    infra_missing.insert(m.name.clone(), format!("{k} {ns}/{n}"));
                }
                None => {
                    infra_missing.insert(m.name.clone(), "no infrastructureRef".into());
                }
            }
        }
        for (machine, what) in infra_missing {
            missing.push(format!("Machine {ns}/{machine}'s infrastructure: {what}"));
        }
        if e.ipam {
            // Claims are counted per namespace, against every Machine in it (clusters may
            // share a namespace).
            let count = |kind: &str| {
                objects
                    .iter()
                    .filter(|o| o.kind == kind && o.namespace == e.namespace)
                    .count()
            };
            let (claims, addresses) = (count("IPAddressClaim"), count("IPAddress"));
            let in_namespace = count("Machine");
            if claims < in_namespace || addresses < claims {
                missing.push(format!(
                    "IP allocations: {claims} IPAddressClaim(s) and {addresses} IPAddress(es) for {in_namespace} \
                     Machine(s) in namespace {ns}; a restore without them hands running nodes' addresses out again"
                ));
            }
        }
        clusters.push(ClusterCheck {
            name: e.name.clone(),
            missing,
        });
    }
    Report {
        backup: backup.id.clone(),
        created: backup.created.clone(),
        age_seconds: age,
        // A time more than five minutes ahead is not believed either.
        stale: age > max_age_seconds || age < -300,
        clusters,
        custody: super::custody::index_policy(backup),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::MovedFile;
    use serde_json::json;

    fn file(name: &str, v: Value) -> MovedFile {
        MovedFile {
            name: name.into(),
            bytes: zeroize::Zeroizing::new(v.to_string().into_bytes()),
        }
    }

    fn manifest(files: &[MovedFile]) -> Vec<Entry> {
        super::super::objects::manifest(files).unwrap()
    }

    fn index(created: &str) -> super::super::Index {
        super::super::Index {
            format: super::super::INDEX_FORMAT.into(),
            id: "x".into(),
            created: created.into(),
            size: 0,
            sha256: String::new(),
            files: 0,
            kinds: BTreeMap::new(),
            clusters: Vec::new(),
            // Two recipients, the DR one marked offline: the custody policy holds.
            recipients: vec!["age1operator".into(), "age1dr".into()],
            offline_recipients: Some(vec!["age1dr".into()]),
            objects: None,
        }
    }

    /// D16: the keyless check fails a backup whose index shows one recipient, none kept
    /// offline, or no record of it.
    #[test]
    fn custody_is_checked_from_the_index() {
        let ok = index("2026-12-05T08:00:00Z");
        assert!(super::super::custody::index_policy(&ok).is_empty());
        let one = super::super::Index {
            recipients: vec!["age1dr".into(), "age1dr".into()],
            ..ok.clone()
        };
        let p = super::super::custody::index_policy(&one);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("1 distinct recipient"), "{p:?}");
        let online = super::super::Index {
            offline_recipients: Some(vec!["age1someone-else".into()]),
            ..ok.clone()
        };
        let p = super::super::custody::index_policy(&online);
        assert!(
            p.len() == 1 && p[0].contains("none of its recipients is marked offline"),
            "{p:?}"
        );
        let old = super::super::Index {
            offline_recipients: None,
            ..ok.clone()
        };
        assert!(super::super::custody::index_policy(&old)[0].contains("does not record"));
        let now = unix_of("2026-12-05T08:00:00Z").unwrap() + 60;
        let r = check(&one, &[], &[], now, 3600);
        assert!(!r.stale && !r.custody.is_empty() && r.failed(), "{r:?}");
        assert!(!check(&ok, &[], &[], now, 3600).failed());
    }

    #[test]
    fn a_backup_must_hold_what_the_rendered_replicas_ask_for() {
        let e = Expected {
            name: "lab-f".into(),
            namespace: "lab-f".into(),
            control_plane: Some("lab-f-cp".into()),
            machines: 2,
            ipam: true,
            secrets: vec!["lab-f-talos".into()],
            ca_fingerprint: None,
        };
        let label = json!({"cluster.x-k8s.io/cluster-name": "lab-f"});
        let mut files = vec![
            file(
                "Cluster_lab-f_lab-f.yaml",
                json!({"kind": "Cluster", "metadata": {"namespace": "lab-f", "name": "lab-f"}}),
            ),
            file(
                "TalosControlPlane_lab-f_lab-f-cp.yaml",
                json!({"kind": "TalosControlPlane", "metadata": {"namespace": "lab-f", "name": "lab-f-cp"}}),
            ),
            file(
                "Machine_lab-f_m1.yaml",
                json!({"kind": "Machine", "metadata": {"namespace": "lab-f", "name": "m1", "labels": label},
                "spec": {"infrastructureRef": {"kind": "VSphereMachine", "name": "v1"}}}),
            ),
        ];
        let t0 = unix_of("2026-12-05T08:00:00Z").unwrap();
        let r = check(
            &index("2026-12-05T08:00:00Z"),
            &manifest(&files),
            std::slice::from_ref(&e),
            t0 + 60,
            86_400,
        );
        assert!(!r.stale && r.failed());
        let m = &r.clusters[0].missing;
        assert!(
            m.iter()
                .any(|s| s.contains("Machines: 1 in the backup, the rendered replicas ask for 2")),
            "{m:?}"
        );
        assert!(
            m.iter()
                .any(|s| s.contains("m1's infrastructure: VSphereMachine lab-f/v1")),
            "{m:?}"
        );
        assert!(
            m.iter()
                .any(|s| s.starts_with("IP allocations: 0 IPAddressClaim(s)")),
            "{m:?}"
        );
        assert!(
            m.iter()
                .any(|s| s.starts_with("Secret lab-f/lab-f-talos (the Talos secrets bundle")),
            "{m:?}"
        );
        files.push(file(
            "Secret_lab-f_lab-f-talos.yaml",
            json!({"kind": "Secret", "metadata": {"namespace": "lab-f", "name": "lab-f-talos"}, "data": {"bundle": "eA=="}}),
        ));
        files.push(file(
            "VSphereMachine_lab-f_v1.yaml",
            json!({"kind": "VSphereMachine", "metadata": {"namespace": "lab-f", "name": "v1"}}),
        ));
        files.push(file("Machine_lab-f_m2.yaml", json!({"kind": "Machine", "metadata": {"namespace": "lab-f", "name": "m2", "labels": label},
            "spec": {"infrastructureRef": {"kind": "VSphereMachine", "name": "v1"}}})));
        for i in 0..2 {
            files.push(file(&format!("IPAddressClaim_lab-f_c{i}.yaml"), json!({"kind": "IPAddressClaim", "metadata": {"namespace": "lab-f", "name": format!("c{i}")}})));
            files.push(file(&format!("IPAddress_lab-f_a{i}.yaml"), json!({"kind": "IPAddress", "metadata": {"namespace": "lab-f", "name": format!("a{i}")}})));
        }
        let r = check(
            &index("2026-12-05T08:00:00Z"),
            &manifest(&files),
            std::slice::from_ref(&e),
            t0 + 60,
            86_400,
        );
        assert!(!r.failed(), "{r:?}");
        // Too old.
        let r = check(
            &index("2026-12-05T08:00:00Z"),
            &manifest(&files),
            std::slice::from_ref(&e),
            t0 + 90_000,
            86_400,
        );
        assert!(r.stale && r.failed());
        // A time in the future is not believed.
        let r = check(
            &index("2026-12-05T08:00:00Z"),
            &manifest(&files),
            &[e],
            t0 - 600,
            86_400,
        );
        assert!(r.stale);
    }

    /// D6: a Cluster a `capstan backup dump` found paused fails the check, by its record;
    /// the record of another namespace, or one that lists nothing, does not.
    #[test]
    fn a_cluster_the_dump_found_paused_fails_the_check() {
        let e = Expected {
            name: "lab-f".into(),
            namespace: "lab-f".into(),
            control_plane: None,
            machines: 0,
            ipam: false,
            secrets: Vec::new(),
            ca_fingerprint: None,
        };
        let cluster = || {
            file(
                "Cluster_lab-f_lab-f.yaml",
                json!({"kind": "Cluster", "metadata": {"namespace": "lab-f", "name": "lab-f"}, "spec": {"paused": true}}),
            )
        };
        let record = |ns: &str, paused: &[String]| {
            file(
                &format!("ConfigMap_{ns}_capstan-backup-dump.yaml"),
                super::super::dump::record(ns, paused),
            )
        };
        let t0 = unix_of("2026-12-05T08:00:00Z").unwrap();
        let run = |files: &[MovedFile]| {
            check(
                &index("2026-12-05T08:00:00Z"),
                &manifest(files),
                std::slice::from_ref(&e),
                t0,
                86_400,
            )
        };
        // clusterctl's own dump: every Cluster saved paused, nothing to tell.
        assert!(!run(&[cluster()]).failed());
        assert!(!run(&[cluster(), record("lab-f", &[])]).failed());
        assert!(!run(&[cluster(), record("lab-g", &["lab-f".into()])]).failed());
        let r = run(&[cluster(), record("lab-f", &["lab-f".into()])]);
        assert!(r.failed());
        assert!(
            r.clusters[0].missing[0].starts_with(
                "Cluster lab-f/lab-f was paused (spec.paused: true) on the management cluster when this backup was dumped"
            ),
            "{r:?}"
        );
    }

    #[test]
    fn durations_and_times() {
        assert_eq!(parse_duration("24h"), Some(86_400));
        assert_eq!(parse_duration("7d"), Some(604_800));
        assert_eq!(parse_duration("90s"), Some(90));
        assert_eq!(parse_duration("0h"), None);
        assert_eq!(parse_duration("h"), None);
        assert_eq!(parse_duration("5w"), None);
        assert_eq!(parse_duration("5µ"), None);
        assert_eq!(parse_duration("µ"), None);
        assert_eq!(unix_of("1970-01-01T00:01:00Z"), Some(60));
        assert_eq!(unix_of("2026-13-01T00:00:00Z"), None);
    }
}
