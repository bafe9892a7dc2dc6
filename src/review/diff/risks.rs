//! The risks of a change, per object and per cluster: replica changes against etcd quorum
//! and the autoscaler, version skew, the Talos patches' fields, certificates and Secrets,
//! the migration's interlocks; each with its severity and a sentence for the reviewer.

use super::*;

pub(super) fn risk(severity: Severity, object: &ObjectId, message: String) -> Risk {
    Risk {
        severity,
        object: object.to_string(),
        message,
    }
}

pub(super) fn is_capi_group(group: &str) -> bool {
    group == "cluster.x-k8s.io" || group.ends_with(".cluster.x-k8s.io")
}

pub(super) fn replicas(r: Option<&Resource>) -> Option<i64> {
    r.and_then(|r| r.value.pointer("/spec/replicas"))
        .and_then(Value::as_i64)
}

pub(super) fn is_control_plane(kind: &str) -> bool {
    kind.ends_with("ControlPlane")
}

/// etcd quorum for `n` members.
pub(super) fn quorum(n: i64) -> i64 {
    n / 2 + 1
}

/// Failures an etcd cluster of `n` members tolerates.
pub(super) fn tolerance(n: i64) -> i64 {
    if n <= 0 {
        0
    } else {
        (n - 1) / 2
    }
}

/// What Cluster API's webhooks set when `spec.replicas` leaves git, from `n` (its value
/// before): a MachineDeployment with both autoscaler size annotations is clamped into
/// [min, max], anything else gets 1 (Cluster API's MachineDeployment webhook, `machinedeployment_webhook.go`: the autoscaler annotations `cluster.x-k8s.io/cluster-api-autoscaler-node-group-{min,max}-size`). Returns the count
/// and how it came about.
pub(super) fn defaulted_replicas(kind: &str, n: i64, b: Option<&Resource>) -> (i64, String) {
    let parse = |v: &str| v.trim().parse::<i64>().ok();
    let sizes = b
        .and_then(|r| crate::resource::autoscaler_sizes(&r.value))
        .map(|(lo, hi)| (parse(lo), parse(hi)));
    match (kind, sizes) {
        ("MachineDeployment", Some((Some(lo), Some(hi)))) if lo <= hi => (
            n.clamp(lo, hi),
            format!("the Cluster Autoscaler owns it; the webhook clamps {n} into [{lo}, {hi}]"),
        ),
        _ => (
            1,
            "the webhook defaults a missing spec.replicas to 1".to_string(),
        ),
    }
}

pub(super) fn replica_risks(
    od: &ObjectDiff,
    (a, b): (Option<i64>, Option<i64>),
    rb: Option<&Resource>,
    out: &mut Vec<Risk>,
) {
    let id = &od.id;
    let what = if is_control_plane(&id.kind) {
        "control-plane replicas"
    } else {
        "worker replicas"
    };
    let (n, m, shown) = match (a, b) {
        (Some(n), Some(m)) => (n, m, m.to_string()),
        (Some(n), None) => {
            let (m, how) = defaulted_replicas(&id.kind, n, rb);
            if m == n {
                out.push(risk(
                    Severity::Low,
                    id,
                    format!("{what} {n} → not in git: {how}, which keeps {n}"),
                ));
                return;
            }
            (n, m, format!("not in git ({how}: {m})"))
        }
        (None, Some(0)) if !is_control_plane(&id.kind) => {
            out.push(risk(
                Severity::High,
                id,
                format!(
                    "{what} return to git at 0: every running machine of the pool (the count the webhook or the \
                     autoscaler set) is drained and deleted; {}",
                    scale_to_zero_note(rb)
                ),
            ));
            return;
        }
        (None, Some(m)) => {
            out.push(risk(
                Severity::Medium,
                id,
                format!(
                    "{what} return to git at {m}: the count on the cluster (set by the webhook or \
                     the autoscaler) is replaced by {m}, which creates or deletes machines to match"
                ),
            ));
            return;
        }
        (None, None) => return,
    };
    if n == m {
        return;
    }
    if is_control_plane(&id.kind) {
        let (sev, why) = if m == 0 {
            (
                Severity::High,
                "removes every control-plane machine: no API server and no etcd member left"
                    .to_string(),
            )
        } else if m < n && m < quorum(n) {
            (
                Severity::High,
                format!(
                    "removes a majority of the {n} etcd members (quorum of {n} is {}): if the removed members stop before \
                     etcd membership shrinks, etcd loses quorum; scale down one member at a time",
                    quorum(n)
                ),
            )
        } else if m == 1 {
            (
                Severity::High,
                "a single control-plane machine: etcd tolerates no failure and every upgrade is an outage".to_string(),
            )
        } else if m % 2 == 0 {
            (
                Severity::Medium,
                format!(
                    "an even number of etcd members: {m} need a quorum of {} and tolerate {} failure(s), no more than {}",
                    quorum(m),
                    tolerance(m),
                    m - 1
                ),
            )
        } else if m < n {
            (
                Severity::Medium,
                format!(
                    "removes etcd members: fault tolerance drops from {} to {} failure(s)",
                    tolerance(n),
                    tolerance(m)
                ),
            )
        } else {
            (
                Severity::Medium,
                format!(
                    "adds etcd members (joined one at a time; quorum becomes {}, tolerating {} failure(s))",
                    quorum(m),
                    tolerance(m)
                ),
            )
        };
        out.push(risk(sev, id, format!("{what} {n} → {shown}: {why}")));
    } else {
        let (sev, why) = if m == 0 {
            (
                Severity::High,
                format!(
                    "deletes every machine of the pool: its workloads are evicted with nowhere to go in this pool; {}",
                    scale_to_zero_note(rb)
                ),
            )
        } else if m < n {
            (
                Severity::Medium,
                format!("drains and deletes {} machine(s)", n - m),
            )
        } else {
            (Severity::Low, format!("creates {} machine(s)", m - n))
        };
        out.push(risk(sev, id, format!("{what} {n} → {shown}: {why}")));
    }
}

/// Whether capstan's keep-workers admission policy (an existing cluster, every phase) lets a
/// pool with running machines go to 0: only with render's acknowledgement annotation.
fn scale_to_zero_note(rb: Option<&Resource>) -> &'static str {
    let ack = rb
        .and_then(|r| {
            r.value
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(crate::model::SCALE_TO_ZERO_ANNOTATION))
        })
        .is_some();
    if ack {
        "acknowledged in cluster.yaml (`scale-workers-to-zero`): capstan's admission policy lets it through"
    } else {
        "on a migrated cluster capstan's admission policy refuses it until `spec.migration.acknowledge` lists \
         `scale-workers-to-zero`"
    }
}

pub(super) fn str_at<'a>(r: Option<&'a Resource>, ptr: &str) -> Option<&'a str> {
    r.and_then(|r| r.value.pointer(ptr)).and_then(Value::as_str)
}

pub(super) fn kubernetes_version(r: &Resource) -> Option<&str> {
    let k = r.kind();
    if is_control_plane(k) {
        str_at(Some(r), "/spec/version")
    } else if k == "MachineDeployment" || k == "MachineSet" || k == "MachinePool" {
        str_at(Some(r), "/spec/template/spec/version")
    } else {
        None
    }
}

/// The Talos release an object says its machines run: capstan's annotation on the control
/// plane (`talosVersion` is only the minor, the config contract), else a full `talosVersion`.
pub(super) fn talos_version(r: &Resource) -> Option<&str> {
    let contract = match r.kind() {
        "TalosControlPlane" => {
            if let Some(v) = str_at(Some(r), "/metadata/annotations/capstan.dev~1talos-version") {
                return Some(v);
            }
            str_at(
                Some(r),
                "/spec/controlPlaneConfig/controlplane/talosVersion",
            )
        }
        "TalosConfigTemplate" => str_at(Some(r), "/spec/template/spec/talosVersion"),
        "TalosConfig" => str_at(Some(r), "/spec/talosVersion"),
        _ => None,
    };
    // A minor alone (`v1.10`) is a contract, not a release: nothing to compare.
    contract.filter(|v| SemVer::parse(v).is_some())
}

pub(super) fn version_risks(what: &str, id: &ObjectId, a: &str, b: &str, out: &mut Vec<Risk>) {
    let (Some(va), Some(vb)) = (SemVer::parse(a), SemVer::parse(b)) else {
        out.push(risk(
            Severity::Medium,
            id,
            format!("{what} version {a} → {b}: not `vX.Y.Z`, skew cannot be checked"),
        ));
        return;
    };
    if va == vb {
        return;
    }
    let jump = i64::from(vb.minor) - i64::from(va.minor);
    let (sev, why) = if vb.major != va.major {
        (Severity::High, "a major version change".to_string())
    } else if vb < va {
        (
            Severity::High,
            format!("a downgrade: {what} does not support going back"),
        )
    } else if jump > 1 {
        (
            Severity::High,
            format!(
                "skips {} minor version(s): {what} upgrades one minor version at a time",
                jump - 1
            ),
        )
    } else if jump == 1 {
        (
            Severity::Medium,
            "a minor upgrade: the machines running it are replaced or upgraded".to_string(),
        )
    } else {
        (Severity::Low, "a patch upgrade".to_string())
    };
    out.push(risk(sev, id, format!("{what} {a} → {b}: {why}")));
    if what == "Talos" && va.minor < 11 && vb.minor >= 11 && va.major == 1 {
        out.push(risk(
            Severity::Medium,
            id,
            format!(
                "Talos {b} runs etcd 3.6: every etcd 3.5 member still in the cluster must be v3.5.20 or newer \
                 before a 3.6 member joins (`membership: too many learner member in cluster`)"
            ),
        ));
    }
}

/// Keys inside a Talos machine-config patch whose change is an identity change.
pub(super) fn patch_risk(path: &str) -> Option<(Severity, &'static str)> {
    let p = path.to_ascii_lowercase();
    if p.contains("service-account-issuer") || p.contains("serviceaccountissuer") {
        Some((
            Severity::High,
            "service-account issuer: tokens signed by an issuer the apiservers no longer accept fail with \
             `invalid bearer token`",
        ))
    } else if p.contains("api-audiences") || p.contains("audience") {
        Some((
            Severity::High,
            "API audiences: tokens for an audience no longer accepted fail with `invalid bearer token`",
        ))
    } else if p.contains("encryption") {
        Some((
            Severity::High,
            "etcd encryption: data written with a key the apiservers no longer have is unreadable \
             (`no matching prefix found`)",
        ))
    } else if p.contains("podsubnets")
        || p.contains("servicesubnets")
        || p.contains("dnsdomain")
        || p.contains("cni")
    {
        Some((
            Severity::High,
            "cluster network: it must match the running cluster's CIDRs, DNS domain and CNI",
        ))
    } else if p.contains("etcd") {
        Some((
            Severity::Medium,
            "etcd configuration of the control-plane machines",
        ))
    } else if p.contains("vip") || p.contains("layer2vipconfig") {
        Some((
            Severity::High,
            "the control-plane VIP: the address the endpoint is reached by; the nodes announce the new one \
             while clients and DNS may still use the old",
        ))
    } else {
        None
    }
}

pub(super) fn yaml_leaves(v: &Value, path: &str, out: &mut BTreeMap<String, Value>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, c) in m {
                yaml_leaves(c, &push_key(path, k), out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, c) in items.iter().enumerate() {
                yaml_leaves(c, &format!("{path}[{i}]"), out);
            }
        }
        other => {
            out.insert(path.to_string(), other.clone());
        }
    }
}

pub(super) fn patch_values(r: Option<&Resource>) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let Some(r) = r else {
        return out;
    };
    let patches = match r.kind() {
        "TalosControlPlane" => r
            .value
            .pointer("/spec/controlPlaneConfig/controlplane/strategicPatches"),
        "TalosConfigTemplate" => r.value.pointer("/spec/template/spec/strategicPatches"),
        _ => None,
    };
    if let Some(Value::Array(items)) = patches {
        for (i, p) in items.iter().enumerate() {
            if let Some(text) = p.as_str() {
                for (j, doc) in crate::yaml::parse_stream(text)
                    .unwrap_or_default()
                    .iter()
                    .enumerate()
                {
                    let mut prefix = if j == 0 {
                        format!("patch[{i}]")
                    } else {
                        format!("patch[{i}]#{j}")
                    };
                    // A Talos document of its own (1.12 and later) is named by its kind, so a
                    // change inside it is judged by what it configures (the VIP's document).
                    if let Some(kind) = doc.get("kind").and_then(Value::as_str) {
                        prefix.push_str(&format!("<{kind}>"));
                    }
                    yaml_leaves(doc, &prefix, &mut out);
                }
            }
        }
    }
    out
}

pub(super) fn short(v: Option<&Value>) -> String {
    match v {
        None => "(absent)".into(),
        Some(v) if looks_secret(v) => "(masked)".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// A deleted object: still referenced, a Cluster API object (what its deletion deletes), a
/// provider Secret.
fn removed_risks(od: &ObjectDiff, ra: Option<&Resource>, cb: &ClusterSet, out: &mut Vec<Risk>) {
    let id = &od.id;
    let capi = is_capi_group(&id.group);
    let rep = replicas(ra);
    let referenced = ra
        .map(|r| references_to(&cb.resources, &r.id()))
        .unwrap_or_default();
    if !referenced.is_empty() {
        out.push(risk(
            Severity::High,
            id,
            format!(
                "deleted but still referenced by {}: those objects cannot reconcile",
                referenced[0].object
            ),
        ));
    } else if capi {
        let (sev, why) = match id.kind.as_str() {
            "Cluster" => (
                Severity::High,
                "deleting a Cluster deletes every machine of the cluster".to_string(),
            ),
            k if is_control_plane(k) => (
                Severity::High,
                "deleting the control plane deletes its machines and etcd members".to_string(),
            ),
            "MachineDeployment" | "MachineSet" | "MachinePool" => match rep {
                Some(n) if n > 0 => (
                    Severity::High,
                    format!("deleting it deletes its {n} machine(s)"),
                ),
                _ => (
                    Severity::Medium,
                    "deleting it deletes its machines (none at replicas 0)".to_string(),
                ),
            },
            k if k.ends_with("Template") => (
                Severity::Low,
                "a template nothing references any more (its machines keep running until replaced)"
                    .to_string(),
            ),
            k if k.ends_with("Cluster") => (
                Severity::High,
                "deleting the infrastructure cluster breaks the Cluster that points at it"
                    .to_string(),
            ),
            _ => (
                Severity::Medium,
                "a Cluster API object is deleted (with pruning, Argo CD deletes it)".to_string(),
            ),
        };
        out.push(risk(sev, id, format!("deleted: {why}")));
    } else if id.kind == "Secret" {
        let provider = id.name.ends_with("-ca") || id.name.ends_with("-talos");
        out.push(risk(
            if provider { Severity::High } else { Severity::Medium },
            id,
            if provider {
                "deleted: the providers would generate a new CA and secrets bundle and lock the cluster out"
                    .to_string()
            } else {
                "a Secret is deleted".to_string()
            },
        ));
    }
}

/// A template replaced by a new one (a content-hash rename): who rolls, and how far.
fn rotation_risks(od: &ObjectDiff, cb: &ClusterSet, out: &mut Vec<Risk>) {
    let id = &od.id;
    // Who rolls: the objects now pointing at the new template.
    let mut rolled = false;
    for r in &od.referenced_by {
        let owner = cb
            .resources
            .iter()
            .find(|x| ObjectId::from(x.id()) == r.object);
        let rep = replicas(owner);
        let (sev, why) = if is_control_plane(&r.object.kind) {
            match rep {
                Some(0) => (
                    Severity::Low,
                    "no control-plane machine exists yet (replicas 0), nothing rolls".to_string(),
                ),
                _ => (
                    Severity::High,
                    format!(
                        "replaces every control-plane machine (replicas: {}), one at a time: etcd membership \
                         changes with each machine",
                        rep.map_or("?".into(), |n| n.to_string())
                    ),
                ),
            }
        } else {
            match rep {
                Some(0) => (
                    Severity::Low,
                    "no machine of the pool exists (replicas 0), nothing rolls".to_string(),
                ),
                _ => (
                    Severity::Medium,
                    format!(
                        "rolls every machine of the pool (replicas: {}): drained and replaced",
                        rep.map_or("?".into(), |n| n.to_string())
                    ),
                ),
            }
        };
        rolled = true;
        out.push(risk(
            sev,
            id,
            format!(
                "template rotation {} → {} (used by {}): {why}",
                od.replaces.as_deref().unwrap_or("?"),
                id.name,
                r.object
            ),
        ));
    }
    if !rolled {
        out.push(risk(
            Severity::Low,
            id,
            format!(
                "template rotation {} → {}: nothing references the new template",
                od.replaces.as_deref().unwrap_or("?"),
                id.name
            ),
        ));
    }
}

pub(super) fn object_risks(
    od: &ObjectDiff,
    ra: Option<&Resource>,
    rb: Option<&Resource>,
    (ca, cb): (&ClusterSet, &ClusterSet),
    out: &mut Vec<Risk>,
) {
    let id = &od.id;
    match od.status {
        ObjectStatus::Removed => removed_risks(od, ra, cb, out),
        ObjectStatus::Added => {
            if is_control_plane(&id.kind) || id.kind == "MachineDeployment" {
                if let Some(n) = replicas(rb).filter(|n| *n > 0) {
                    out.push(risk(
                        Severity::Medium,
                        id,
                        format!("new: creates {n} machine(s)"),
                    ));
                }
            }
        }
        ObjectStatus::Replaced => rotation_risks(od, cb, out),
        ObjectStatus::Changed | ObjectStatus::Reencrypted => {}
    }

    if matches!(od.status, ObjectStatus::Changed | ObjectStatus::Replaced) {
        if od.fields.iter().any(|f| f.path == "spec.replicas") {
            replica_risks(od, (replicas(ra), replicas(rb)), rb, out);
        }
        if let (Some(x), Some(y)) = (ra, rb) {
            if let (Some(va), Some(vb)) = (kubernetes_version(x), kubernetes_version(y)) {
                if va != vb {
                    version_risks("Kubernetes", id, va, vb, out);
                }
            }
            if let (Some(va), Some(vb)) = (talos_version(x), talos_version(y)) {
                if va != vb {
                    version_risks("Talos", id, va, vb, out);
                }
            }
            // Inside the Talos machine-config patches.
            let (pa, pb) = (patch_values(Some(x)), patch_values(Some(y)));
            if pa != pb {
                let keys: BTreeSet<&String> = pa.keys().chain(pb.keys()).collect();
                let mut seen: BTreeSet<&'static str> = BTreeSet::new();
                let mut other = 0usize;
                for k in keys {
                    let (u, v) = (pa.get(k), pb.get(k));
                    if u == v {
                        continue;
                    }
                    match patch_risk(k) {
                        Some((sev, why)) => {
                            if seen.insert(why) {
                                out.push(risk(
                                    sev,
                                    id,
                                    format!("{k}: {} → {}: {why}", short(u), short(v)),
                                ));
                            }
                        }
                        None => other += 1,
                    }
                }
                if other > 0 && id.kind == "TalosControlPlane" {
                    out.push(control_plane_config_risk(id, other, (ra, rb), (ca, cb)));
                }
            }
        }
        for f in &od.fields {
            field_risk(id, f, out);
        }
    }
    if matches!(od.status, ObjectStatus::Added) {
        for f in &od.fields {
            if f.path.contains("bootstrapped") || f.path.contains("cluster.x-k8s.io/paused") {
                field_risk(id, f, out);
            }
        }
    }
    for k in &od.secret_keys {
        secret_risk(id, k, out);
    }
    if let Some(why) = &od.broken {
        out.push(risk(
            Severity::High,
            id,
            format!(
                "the sealed file cannot be opened or verified: {why}; a file that does not verify is \
                 refused by every deployment path (sops, KSOPS, Flux, the sops-secrets-operator)"
            ),
        ));
    }
}

/// A change of the control plane's machine configuration (patch fields no other rule
/// names): the provider rolls the control-plane machines only when there are some before
/// and after. With 0 replicas on either side (phase `prepare` renders 0; a scale from or to
/// 0 has its own replica risk) no machine is rolled, and the machines created later get the
/// new configuration.
fn control_plane_config_risk(
    id: &ObjectId,
    other: usize,
    (ra, rb): (Option<&Resource>, Option<&Resource>),
    (ca, cb): (&ClusterSet, &ClusterSet),
) -> Risk {
    let (na, nb) = (replicas(ra), replicas(rb));
    if na == Some(0) || nb == Some(0) {
        let phase = match (ca.phase.as_deref(), cb.phase.as_deref()) {
            (Some(pa), Some(pb)) if pa == pb => format!(", phase `{pb}`"),
            (Some(pa), Some(pb)) => format!(", phase `{pa}` → `{pb}`"),
            _ => String::new(),
        };
        let (na, nb) = (
            na.map_or("?".into(), |n| n.to_string()),
            nb.map_or("?".into(), |n| n.to_string()),
        );
        return risk(
            Severity::Low,
            id,
            format!(
                "the control-plane machine configuration changes ({other} patch field(s)): no control-plane machine \
                 is rolled (replicas {na} → {nb}{phase}); the machines created later get it"
            ),
        );
    }
    risk(
        Severity::Medium,
        id,
        format!(
            "the control-plane machine configuration changes ({other} patch field(s)): the provider rolls the \
             control-plane machines to apply it"
        ),
    )
}

pub(super) fn field_risk(id: &ObjectId, f: &FieldChange, out: &mut Vec<Risk>) {
    let p = f.path.as_str();
    let text_mentions = |needle: &str| match &f.delta {
        Delta::Text { diff } => diff
            .lines()
            .any(|l| (l.starts_with('+') || l.starts_with('-')) && l.contains(needle)),
        Delta::Value { before, after } => [before, after].iter().any(|v| {
            v.as_ref()
                .and_then(Value::as_str)
                .is_some_and(|s| s.contains(needle))
        }),
        _ => false,
    };
    let (before, after) = match &f.delta {
        Delta::Value { before, after } => (short(before.as_ref()), short(after.as_ref())),
        _ => ("…".into(), "…".into()),
    };
    if p.contains("bootstrapped") || text_mentions("bootstrapped") {
        out.push(risk(
            Severity::High,
            id,
            format!(
                "{p}: touches `status.bootstrapped`: it must be true before any Talos control-plane machine exists, \
                 or the provider bootstraps a second, empty etcd cluster"
            ),
        ));
    } else if p.ends_with("[\"cluster.x-k8s.io/paused\"]") {
        let unpause = after == "(absent)";
        out.push(risk(
            if unpause { Severity::High } else { Severity::Medium },
            id,
            if unpause {
                format!("{p} removed: reconciliation resumes; with kubeadm etcd members present the control-plane \
                         provider's etcd audit removes them")
            } else {
                format!("{p}: {before} → {after}: reconciliation of this object stops")
            },
        ));
    } else if p == "spec.paused" {
        let unpause = after == "false" || after == "(absent)";
        out.push(risk(
            if unpause { Severity::High } else { Severity::Medium },
            id,
            format!(
                "spec.paused {before} → {after}: {}",
                if unpause {
                    "reconciliation resumes; with kubeadm etcd members present the control-plane provider's etcd \
                     audit removes them"
                } else {
                    "reconciliation stops"
                }
            ),
        ));
    } else if p.to_ascii_lowercase().contains("migration") || last_key(p).ends_with("phase") {
        out.push(risk(
            Severity::High,
            id,
            format!(
                "{p}: {before} → {after}: the migration phase decides which machines exist; follow `capstan plan` \
                 for the new phase"
            ),
        ));
    } else if p.contains(crate::pipeline::render::endpoint::STRATEGY_ANNOTATION) {
        out.push(risk(
            Severity::High,
            id,
            format!(
                "{p}: {before} → {after}: how the endpoint follows the control-plane machines changed: the load \
                 balancer's backends, or the VIP and DNS, must change with it (`capstan plan`, \"Control-plane \
                 endpoint\")"
            ),
        ));
    } else if (id.kind == "InClusterIPPool" || id.kind == "GlobalInClusterIPPool")
        && p.starts_with("spec.")
    {
        let control_plane = id.name.ends_with("-cp-addresses");
        out.push(risk(
            if control_plane { Severity::High } else { Severity::Medium },
            id,
            if control_plane {
                format!(
                    "{p}: {before} → {after}: the control-plane pool is the load balancer's backend list, but \
                     running machines keep their addresses until a rollout replaces them: the load balancer lists \
                     the old and the new addresses until then; keep exactly replicas + 1 addresses"
                )
            } else {
                format!(
                    "{p}: {before} → {after}: the addresses new machines get; one that no machine may hold any more \
                     is not taken back from a running machine"
                )
            },
        ));
    } else if p.contains("controlPlaneEndpoint") {
        out.push(risk(
            Severity::High,
            id,
            format!(
                "{p}: {before} → {after}: the endpoint every node and client uses (and the apiserver certificate's SANs)"
            ),
        ));
    } else if p.starts_with("spec.clusterNetwork") {
        out.push(risk(
            Severity::High,
            id,
            format!(
                "{p}: {before} → {after}: the running cluster's network cannot change in place"
            ),
        ));
    } else if matches!(last_key(p), "nodeDrainTimeout" | "nodeDrainTimeoutSeconds") {
        if let Delta::Value {
            before: b,
            after: a,
        } = &f.delta
        {
            drain_timeout_risk(id, p, (b.as_ref(), a.as_ref()), out);
        }
    } else if p.ends_with(&format!("[\"{}\"]", crate::model::SCALE_TO_ZERO_ANNOTATION))
        && after != "(absent)"
    {
        out.push(risk(
            Severity::High,
            id,
            format!(
                "{p}: {before} → {after}: scaling this pool from running machines to 0 is acknowledged \
                 (`spec.migration.acknowledge: [scale-workers-to-zero]`): capstan's admission policy lets it \
                 through, and Cluster API drains and deletes every machine of the pool"
            ),
        ));
    }
    if let Delta::Certificate { certificates } = &f.delta {
        for c in certificates {
            cert_risk(id, &format!("{p}{}", c.path), c, out);
        }
    }
}

/// A drain timeout in seconds: `nodeDrainTimeoutSeconds` (an integer) or v1beta1's
/// `nodeDrainTimeout` (a Go duration such as `900s`, `15m`, `1h30m`). `Some(0)` for an
/// absent field or 0 (Cluster API: no timeout), `None` when it does not parse.
fn drain_seconds(v: Option<&Value>) -> Option<u64> {
    match v {
        None | Some(Value::Null) => Some(0),
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => {
            let mut total = 0f64;
            let mut rest = s.trim();
            if rest == "0" {
                return Some(0);
            }
            if rest.is_empty() {
                return None;
            }
            while !rest.is_empty() {
                let digits = rest
                    .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                    .unwrap_or(rest.len());
                let number: f64 = rest[..digits].parse().ok()?;
                rest = &rest[digits..];
                let unit_len = rest
                    .find(|c: char| c.is_ascii_digit() || c == '.')
                    .unwrap_or(rest.len());
                let scale = match &rest[..unit_len] {
                    "h" => 3600.0,
                    "m" => 60.0,
                    "s" => 1.0,
                    "ms" => 0.001,
                    "us" | "µs" => 0.000_001,
                    "ns" => 0.000_000_001,
                    _ => return None,
                };
                total += number * scale;
                rest = &rest[unit_len..];
            }
            Some(total.ceil() as u64)
        }
        Some(_) => None,
    }
}

/// A drain timeout set, shortened, lengthened or removed: what Cluster API then does to a
/// PodDisruptionBudget (cluster-api v1.10.10 `internal/controllers/machine/machine_controller.go`
/// 642-658, 680-694: once the timeout has passed it skips the drain and deletes the machine).
fn drain_timeout_risk(
    id: &ObjectId,
    p: &str,
    (before, after): (Option<&Value>, Option<&Value>),
    out: &mut Vec<Risk>,
) {
    let (b, a) = (short(before), short(after));
    let (Some(x), Some(y)) = (drain_seconds(before), drain_seconds(after)) else {
        out.push(risk(
            Severity::Medium,
            id,
            format!("{p}: {b} → {a}: a drain timeout capstan cannot read; once it passes, Cluster API deletes the machine even where a PodDisruptionBudget still refuses an eviction"),
        ));
        return;
    };
    let pdb = "once it has passed, Cluster API stops draining and deletes the machine with the pods a \
               PodDisruptionBudget still protects (a quorum StatefulSet whose replaced replica resyncs slower \
               loses a second member)";
    match (x, y) {
        (0, 0) => {}
        (0, y) => out.push(risk(
            Severity::High,
            id,
            format!("{p}: {b} → {a}: sets a drain timeout of {y} s where the drain waited for every PodDisruptionBudget: {pdb}"),
        )),
        (x, 0) => out.push(risk(
            Severity::Low,
            id,
            format!("{p}: {b} → {a}: no drain timeout (was {x} s): drains wait for as long as a PodDisruptionBudget refuses, so a PDB that never allows a disruption holds the machine in deletion (and a rollout) until it is fixed (`capstan plan`)"),
        )),
        (x, y) if y < x => out.push(risk(
            Severity::Medium,
            id,
            format!("{p}: {b} → {a}: shortens the drain timeout from {x} s to {y} s: {pdb}"),
        )),
        (x, y) if y > x => out.push(risk(
            Severity::Low,
            id,
            format!("{p}: {b} → {a}: lengthens the drain timeout from {x} s to {y} s: PodDisruptionBudgets get longer before Cluster API deletes the machine anyway"),
        )),
        _ => {}
    }
}

pub(super) fn cert_risk(id: &ObjectId, what: &str, c: &CertChange, out: &mut Vec<Risk>) {
    let ca =
        c.before.as_ref().is_some_and(|x| x.is_ca) || c.after.as_ref().is_some_and(|x| x.is_ca);
    let same_key = match (&c.before, &c.after) {
        (Some(x), Some(y)) => x.sha256 == y.sha256,
        _ => false,
    };
    if same_key {
        return;
    }
    out.push(risk(
        if ca { Severity::High } else { Severity::Medium },
        id,
        if ca {
            format!(
                "{what}: CA certificate rotated: certificates signed by the old CA stop being trusted unless both are \
                 trusted during the rotation"
            )
        } else {
            format!("{what}: certificate replaced")
        },
    ));
}

/// The risks of the certificates a Secret key's value holds (public material).
fn certificate_risks(id: &ObjectId, k: &SecretKey, out: &mut Vec<Risk>) {
    for c in &k.certificates {
        let what = if c.path.is_empty() {
            k.key.clone()
        } else {
            format!("{} {}", k.key, c.path)
        };
        cert_risk(id, &what, c, out);
    }
}

pub(super) fn secret_risk(id: &ObjectId, k: &SecretKey, out: &mut Vec<Risk>) {
    match k.status {
        SecretStatus::Changed => {
            certificate_risks(id, k, out);
            for f in &k.fields {
                let why = if f.contains("encryptionsecret") {
                    Some((
                        Severity::High,
                        "the etcd encryption key changes: data written with the old key becomes unreadable \
                         (`no matching prefix found`)",
                    ))
                } else if f.starts_with("certs.k8sserviceaccount") {
                    Some((
                        Severity::High,
                        "the service-account signing key changes: every issued token fails with `invalid bearer token`",
                    ))
                } else if f.starts_with("cluster.") {
                    Some((
                        Severity::High,
                        "the Talos cluster identity changes: nodes of the old and new identity do not discover each other",
                    ))
                } else if f.ends_with(".key") && f.starts_with("certs.") {
                    Some((
                        Severity::High,
                        "a CA private key changes: certificates it signs no longer match the CA certificate",
                    ))
                } else if f.contains("bootstraptoken") {
                    Some((
                        Severity::Medium,
                        "the bootstrap token changes: kubelets joining with the old one are `Unauthorized`",
                    ))
                } else {
                    None
                };
                if let Some((sev, why)) = why {
                    out.push(risk(sev, id, format!("{} {f}: {why}", k.key)));
                }
            }
            if k.certificates.is_empty() && k.fields.is_empty() {
                out.push(risk(
                    Severity::Medium,
                    id,
                    format!("{}: the secret value changes", k.key),
                ));
            }
        }
        SecretStatus::Resealed => {
            // Certificates are public: decoded and compared as always.
            certificate_risks(id, k, out);
            let (severity, message) = resealed_risk(id, &k.key);
            out.push(risk(severity, id, message));
        }
        SecretStatus::CiphertextDiffers => out.push(risk(
            Severity::Low,
            id,
            format!(
                "{}: the ciphertext changed; without an identity capstan cannot tell a re-encryption from a new value",
                k.key
            ),
        )),
        SecretStatus::Removed => out.push(risk(
            Severity::Medium,
            id,
            format!("{}: a secret value is removed", k.key),
        )),
        _ => {}
    }
}

/// The one risk of a re-sealed value ([`SecretStatus::Resealed`]): from the Secret's name and
/// key alone (the provider Secrets `secrets::seal` names `<cluster>-talos` and `<cluster>-ca`),
/// never from a plaintext, so it reads the same for any value. Its severity is that of the
/// worst change the value could carry, which the report cannot rule out: high for the Talos
/// secrets bundle (its etcd encryption key, service-account key, CA keys, cluster secret)
/// and the cluster CA, medium for any other value (as a changed value is).
pub(super) fn resealed_risk(id: &ObjectId, key: &str) -> (Severity, String) {
    const CONFIRM: &str =
        "the report reads the same for any value; a key holder compares the values with \
                           `capstan diff --compare-sealed` on their own terminal";
    if id.name.ends_with("-talos") {
        (
            Severity::High,
            format!(
                "{key}: the Talos secrets bundle is re-sealed, its values not compared: if its etcd encryption key, \
                 service-account key, a CA key or the cluster secret changed, data written with the old encryption key \
                 becomes unreadable, issued tokens fail with `invalid bearer token` and nodes of the old identity no \
                 longer join; {CONFIRM}"
            ),
        )
    } else if id.name.ends_with("-ca") {
        (
            Severity::High,
            format!(
                "{key}: the cluster CA is re-sealed, its values not compared: if its key changed, certificates it signs \
                 no longer match the CA certificate (a changed certificate is decoded and reported when an identity is \
                 given); {CONFIRM}"
            ),
        )
    } else {
        (
            Severity::Medium,
            format!(
                "{key}: re-sealed, its value not compared: if it changed, whatever reads it gets the new one; {CONFIRM}"
            ),
        )
    }
}

/// A migration phase going backwards (a revert of a phase commit): what happens to the
/// running worker pools, and whether capstan's keep-workers policy will let it.
fn phase_regression(pa: &str, pb: &str, b: &ClusterSet) -> String {
    let mut msg = format!("spec.migration.phase {pa} → {pb} goes backwards");
    if matches!(pb, "prepare" | "control-plane") && matches!(pa, "workers" | "complete") {
        let pools: Vec<&Resource> = b
            .resources
            .iter()
            .filter(|r| r.kind() == "MachineDeployment")
            .collect();
        let acknowledged = pools.iter().any(|r| {
            str_at(
                Some(r),
                &format!(
                    "/metadata/annotations/{}",
                    crate::model::SCALE_TO_ZERO_ANNOTATION.replace('/', "~1")
                ),
            )
            .is_some()
        });
        msg.push_str(&format!(
            ": phase `{pb}` renders every worker pool at 0 replicas ({}), so Cluster API would drain and delete every \
             Talos worker, by now usually the cluster's only workers (the kubeadm workers drained and reset); {}",
            if pools.is_empty() {
                "none declared".to_string()
            } else {
                pools.iter().map(|r| r.name()).collect::<Vec<_>>().join(", ")
            },
            if acknowledged {
                "acknowledged (`spec.migration.acknowledge: [scale-workers-to-zero]`): capstan's admission policy lets \
                 the MachineDeployments go to 0"
                    .to_string()
            } else {
                let policy = b
                    .resources
                    .iter()
                    .find(|r| {
                        r.kind() == "ValidatingAdmissionPolicy"
                            && r.name().ends_with(".keep-workers.capstan.dev")
                    })
                    .map_or("keep-workers", |r| r.name());
                format!(
                    "capstan's admission policy `{policy}` refuses the sync of those MachineDeployments while they run \
                     machines, until `spec.migration.acknowledge` lists `scale-workers-to-zero`; to undo a phase \
                     change, move forward again instead (`capstan plan`)"
                )
            }
        ));
    } else {
        msg.push_str(": follow `capstan plan` for the new phase; phases are meant to move forward");
    }
    msg
}

/// Risks that need the whole cluster: version skew after the change, the migration phase.
pub(super) fn cluster_risks(a: &ClusterSet, b: &ClusterSet, out: &mut Vec<Risk>) {
    if let (Some(pa), Some(pb)) = (&a.phase, &b.phase) {
        let rank = |p: &str| {
            ["prepare", "control-plane", "workers", "complete"]
                .iter()
                .position(|x| *x == p)
        };
        if let (Some(ra), Some(rb)) = (rank(pa), rank(pb)) {
            if rb < ra {
                out.push(Risk {
                    severity: Severity::High,
                    object: "cluster.yaml".into(),
                    message: phase_regression(pa, pb, b),
                });
            }
        }
        if pa != pb {
            out.push(Risk {
                severity: Severity::High,
                object: "cluster.yaml".into(),
                message: format!(
                    "spec.migration.phase {pa} → {pb}: the migration phase decides which machines exist; follow \
                     `capstan plan` for the new phase"
                ),
            });
        }
    }
    // During phase control-plane etcd has the kubeadm and the Talos members: the replica
    // note counts only the Talos ones, so state the whole membership.
    let kubeadm = b.kubeadm_etcd_members as i64;
    if b.phase.as_deref() == Some("control-plane") && kubeadm > 0 {
        let talos = b
            .resources
            .iter()
            .filter(|r| is_control_plane(r.kind()))
            .find_map(|r| replicas(Some(r)))
            .unwrap_or(0);
        if talos > 0 {
            let v = kubeadm + talos;
            out.push(Risk {
                severity: Severity::Medium,
                object: "cluster.yaml".into(),
                message: format!(
                    "etcd has the {kubeadm} kubeadm and the {talos} Talos control-plane members in phase control-plane: \
                     {v} voters, quorum {}, so {} members down lose it; keep the Talos VMs on separate ESXi hosts and \
                     remove the kubeadm members one at a time (`capstan plan`: Quorum during this phase)",
                    quorum(v),
                    v - quorum(v) + 1
                ),
            });
        }
    }
    let versions = |s: &ClusterSet| {
        let mut cp = None;
        let mut workers = Vec::new();
        let mut talos = None;
        for r in &s.resources {
            if let Some(v) = kubernetes_version(r) {
                if is_control_plane(r.kind()) {
                    cp = Some((r.id(), v.to_string()));
                } else {
                    workers.push((r.id(), v.to_string()));
                }
            }
            if let Some(t) = talos_version(r) {
                if talos.is_none() || is_control_plane(r.kind()) {
                    talos = Some(t.to_string());
                }
            }
        }
        (cp, workers, talos)
    };
    let before = versions(a);
    let after = versions(b);
    if before == after || b.resources.is_empty() {
        return;
    }
    let (cp, workers, talos) = after;
    if let Some(t) = talos.as_deref().and_then(SemVer::parse) {
        let row = TALOS_SUPPORT
            .iter()
            .find(|r| t.major == 1 && r.talos_minor == t.minor);
        let mut ks: Vec<(ResId, String)> = workers.clone();
        if let Some(c) = &cp {
            ks.insert(0, c.clone());
        }
        for (rid, kv) in &ks {
            let Some(k) = SemVer::parse(kv) else { continue };
            let ok =
                row.is_some_and(|r| k.major == 1 && k.minor >= r.k8s_min && k.minor <= r.k8s_max);
            if !ok {
                out.push(risk(
                    Severity::High,
                    &ObjectId::from(rid.clone()),
                    match row {
                        Some(r) => format!(
                            "Kubernetes {kv} is not supported by Talos {t}: it supports Kubernetes v1.{} to v1.{}",
                            r.k8s_min, r.k8s_max
                        ),
                        None => format!("Talos {t} is not in capstan's support table (Talos v1.8 to v1.14)"),
                    },
                ));
            }
        }
    }
    if let Some((_, cv)) = &cp {
        if let Some(c) = SemVer::parse(cv) {
            for (rid, wv) in &workers {
                let Some(w) = SemVer::parse(wv) else { continue };
                if w.major != c.major {
                    continue;
                }
                if w.minor > c.minor {
                    out.push(risk(
                        Severity::High,
                        &ObjectId::from(rid.clone()),
                        format!(
                            "workers on Kubernetes {wv} are newer than the control plane ({cv}): kubelets must never be \
                             newer than the apiserver; upgrade the control plane first"
                        ),
                    ));
                } else if c.minor - w.minor > 3 {
                    out.push(risk(
                        Severity::High,
                        &ObjectId::from(rid.clone()),
                        format!(
                            "workers on Kubernetes {wv} are {} minor versions behind the control plane ({cv}): kubelets \
                             may be at most 3 behind",
                            c.minor - w.minor
                        ),
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn drain_timeouts_read_as_seconds() {
        for (v, want) in [
            (None, Some(0)),
            (Some(json!(null)), Some(0)),
            (Some(json!(900)), Some(900)),
            (Some(json!("900s")), Some(900)),
            (Some(json!("15m")), Some(900)),
            (Some(json!("1h30m")), Some(5400)),
            (Some(json!("1.5h")), Some(5400)),
            (Some(json!("0s")), Some(0)),
            (Some(json!("0")), Some(0)),
            (Some(json!("10")), None),
            (Some(json!("ten minutes")), None),
            (Some(json!("")), None),
            (Some(json!(true)), None),
        ] {
            assert_eq!(drain_seconds(v.as_ref()), want, "{v:?}");
        }
    }
}
