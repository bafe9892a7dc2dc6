//! Resource-level diff of two sets of rendered clusters, secret-safe and risk-aware.
//!
//! Pure: two [`ResourceSet`]s (and optionally age identities) in, a [`Diff`] out; no IO.
//! [`crate::report`] renders it as terminal text, Markdown or JSON.
//!
//! - Objects are matched per cluster by group, kind, namespace and name. A removed and an
//!   added content-hash-named template ([`crate::names::IMMUTABLE_KINDS`]) with the same
//!   group, kind, namespace and base name (the name without `-<10 hex>`) are paired as
//!   *replaced*, with their field changes and every object that now references the new name.
//! - Field changes are YAML paths (`spec.template.spec.numCPUs`) with before/after values;
//!   multi-line strings get a unified diff (`similar`), certificates a decoded summary.
//! - Secret values are never part of the model. For each key of a Secret it records only
//!   whether the value changed: identical strings are unchanged; otherwise, with identities,
//!   the SOPS files are decrypted and the plaintexts compared (equal means re-encrypted);
//!   without, a different ciphertext is reported as such. Decoded certificates (public) are
//!   summarized; of a Talos secrets bundle only the names of its fixed fields that changed.
//!   Values elsewhere that look secret (private keys, SOPS ciphertext, `token:` lines) are
//!   masked.
//! - [`Risk`] notes (high/medium/low, one line of why) cover replica and etcd-quorum
//!   changes, template rotations, version changes and skew, issuer/audience/encryption/
//!   network changes inside the Talos patches, `status.bootstrapped`, pausing, the migration
//!   phase, CA and key rotations, and deletions of Cluster API objects.

use crate::model::{SemVer, TALOS_SUPPORT};
use crate::names::{HASH_LEN, IMMUTABLE_KINDS};
use crate::resource::{group_of, kind_rank, ResId, Resource};
use crate::yaml::scrub;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use zeroize::Zeroizing;

/// The objects of one cluster on one side of a diff.
#[derive(Debug, Clone, Default)]
pub struct ClusterSet {
    /// The objects, in render order.
    pub resources: Vec<Resource>,
    /// The migration phase from `cluster.yaml` (`(none)` without a migration block) when
    /// the side was rendered from inputs; `None` when unknown (rendered output, streams).
    pub phase: Option<String>,
    /// The kubeadm etcd members `cluster.yaml` declares (0 when unknown).
    pub kubeadm_etcd_members: usize,
}

/// One side of a diff: clusters by name.
#[derive(Debug, Clone, Default)]
pub struct ResourceSet {
    /// Cluster name → its objects.
    pub clusters: BTreeMap<String, ClusterSet>,
}

/// How serious a risk note is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Can break the cluster or lose data.
    High,
    /// Replaces machines or changes behaviour; review it.
    Medium,
    /// Worth knowing.
    Low,
}

impl Severity {
    /// `high`, `medium` or `low`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::High => "high",
            Severity::Medium => "medium",
            Severity::Low => "low",
        }
    }
}

/// One risk note.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Risk {
    /// Severity.
    pub severity: Severity,
    /// The object it is about (`Kind namespace/name`), or empty for the cluster.
    pub object: String,
    /// One line: what changes and why it matters.
    pub message: String,
}

/// What happened to a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClusterStatus {
    /// Only on side B.
    Added,
    /// Only on side A.
    Removed,
    /// On both sides, with differences.
    Changed,
    /// On both sides, no differences (re-encrypted Secrets at most).
    Unchanged,
}

impl ClusterStatus {
    /// Lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterStatus::Added => "added",
            ClusterStatus::Removed => "removed",
            ClusterStatus::Changed => "changed",
            ClusterStatus::Unchanged => "unchanged",
        }
    }
}

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectStatus {
    /// Only on side B.
    Added,
    /// Only on side A.
    Removed,
    /// Fields or secret values differ.
    Changed,
    /// A content-hash-named template replaced by one with another hash.
    Replaced,
    /// A Secret whose ciphertext changed but whose plaintext did not (not a difference).
    Reencrypted,
}

impl ObjectStatus {
    /// Lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectStatus::Added => "added",
            ObjectStatus::Removed => "removed",
            ObjectStatus::Changed => "changed",
            ObjectStatus::Replaced => "replaced",
            ObjectStatus::Reencrypted => "re-encrypted",
        }
    }
}

/// An object's identity in the report.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ObjectId {
    /// API group (`""` for core).
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl From<ResId> for ObjectId {
    fn from(r: ResId) -> ObjectId {
        ObjectId {
            group: r.group,
            kind: r.kind,
            namespace: r.namespace,
            name: r.name,
        }
    }
}

impl fmt::Display for ObjectId {
    /// `Kind namespace/name` (the group is in the JSON form).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// Public facts about a certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CertInfo {
    /// Subject (RFC 4514).
    pub subject: String,
    /// Issuer (RFC 4514).
    pub issuer: String,
    /// notAfter, RFC 3339 UTC.
    pub not_after: String,
    /// `sha256:<hex>` of the DER.
    pub sha256: String,
    /// Whether it is a CA.
    pub is_ca: bool,
}

/// A certificate before and after (either may be absent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CertChange {
    /// Where inside the value (`""` for the value itself, `certs.k8s.crt` in a bundle).
    pub path: String,
    /// Before.
    pub before: Option<CertInfo>,
    /// After.
    pub after: Option<CertInfo>,
}

/// How a field changed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Delta {
    /// A value (scalar, or a container when one side is absent or the type differs).
    Value {
        /// Before (absent when `None`).
        before: Option<Value>,
        /// After (absent when `None`).
        after: Option<Value>,
    },
    /// A multi-line string: a unified diff (lines starting with ` `, `-`, `+`, `@@`).
    Text {
        /// The unified diff, without file headers.
        diff: String,
    },
    /// Certificates, decoded.
    Certificate {
        /// One entry per certificate position.
        certificates: Vec<CertChange>,
    },
    /// A value that looks secret: never shown.
    Masked,
}

/// One changed field.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FieldChange {
    /// YAML path (`spec.template.spec.numCPUs`, `metadata.annotations["a/b"]`, `x[0]`).
    pub path: String,
    /// The change.
    #[serde(flatten)]
    pub delta: Delta,
}

/// What is known about one Secret value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SecretStatus {
    /// Identical value (identical ciphertext, or identical plaintext).
    Unchanged,
    /// Different ciphertext, same plaintext.
    Reencrypted,
    /// The plaintext differs.
    Changed,
    /// Different ciphertext, and no identity to tell why.
    CiphertextDiffers,
    /// Only on side B.
    Added,
    /// Only on side A.
    Removed,
}

impl SecretStatus {
    /// How the report says it.
    pub fn describe(self) -> &'static str {
        match self {
            SecretStatus::Unchanged => "unchanged",
            SecretStatus::Reencrypted => "unchanged (re-encrypted)",
            SecretStatus::Changed => "changed",
            SecretStatus::CiphertextDiffers => {
                "changed (ciphertext differs; pass an identity to tell re-encryption from a new value)"
            }
            SecretStatus::Added => "added",
            SecretStatus::Removed => "removed",
        }
    }

    /// Whether this is a difference.
    pub fn differs(self) -> bool {
        !matches!(self, SecretStatus::Unchanged | SecretStatus::Reencrypted)
    }
}

/// One key of a Secret (`data["tls.crt"]`), without its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecretKey {
    /// `data["<key>"]` or `stringData["<key>"]`.
    pub key: String,
    /// What changed.
    pub status: SecretStatus,
    /// Names of the changed fields inside a Talos secrets bundle (never their values).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
    /// Certificates in the value, decoded (needs the plaintext).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<CertChange>,
}

/// An object now pointing at a replaced template's new name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reference {
    /// The referencing object.
    pub object: ObjectId,
    /// The path of the reference's `name`.
    pub path: String,
}

/// One object that differs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ObjectDiff {
    /// The object (side B's name for a replacement).
    pub id: ObjectId,
    /// What happened.
    pub status: ObjectStatus,
    /// Side A's name, for a replacement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
    /// Changed fields (Secret values excluded).
    pub fields: Vec<FieldChange>,
    /// Secret keys, for Secrets.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secret_keys: Vec<SecretKey>,
    /// For a replacement: the objects whose reference moved to the new name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub referenced_by: Vec<Reference>,
    /// Remarks (for example a SOPS file that could not be decrypted).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Why side B's sealed file cannot be opened or verified (a wrong MAC, a value that
    /// does not decrypt, a MAC that changed while no value did): never "unchanged".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broken: Option<String>,
}

/// One cluster's differences.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterDiff {
    /// Cluster name.
    pub name: String,
    /// What happened.
    pub status: ClusterStatus,
    /// Objects that differ (and re-encrypted Secrets), in output order.
    pub objects: Vec<ObjectDiff>,
    /// Risk notes, high first.
    pub risks: Vec<Risk>,
}

impl ClusterDiff {
    /// Number of objects with the status.
    pub fn count(&self, status: ObjectStatus) -> usize {
        self.objects.iter().filter(|o| o.status == status).count()
    }

    /// Number of risks of a severity.
    pub fn risk_count(&self, severity: Severity) -> usize {
        self.risks.iter().filter(|r| r.severity == severity).count()
    }
}

/// The whole diff.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diff {
    /// Side A's label (as given).
    pub a: String,
    /// Side B's label.
    pub b: String,
    /// Whether identities were given (secret plaintexts compared).
    pub decrypted: bool,
    /// Every cluster on either side, by name.
    pub clusters: Vec<ClusterDiff>,
}

impl Diff {
    /// Whether anything differs (re-encryption alone does not).
    pub fn has_differences(&self) -> bool {
        self.clusters
            .iter()
            .any(|c| c.status != ClusterStatus::Unchanged)
    }
}

/// Options of [`diff`].
#[derive(Default)]
pub struct Options<'a> {
    /// Side A's label.
    pub a: String,
    /// Side B's label.
    pub b: String,
    /// age identities to decrypt SOPS-encrypted Secrets with.
    pub identities: Option<&'a [age::x25519::Identity]>,
}

/// Compare two sides.
pub fn diff(a: &ResourceSet, b: &ResourceSet, opts: &Options<'_>) -> Diff {
    let names: BTreeSet<&String> = a.clusters.keys().chain(b.clusters.keys()).collect();
    let empty = ClusterSet::default();
    let clusters = names
        .into_iter()
        .map(|name| {
            let ca = a.clusters.get(name);
            let cb = b.clusters.get(name);
            let mut d = diff_cluster(
                name,
                ca.unwrap_or(&empty),
                cb.unwrap_or(&empty),
                opts.identities,
            );
            d.status = match (ca, cb) {
                (None, Some(_)) => ClusterStatus::Added,
                (Some(_), None) => ClusterStatus::Removed,
                _ if d
                    .objects
                    .iter()
                    .any(|o| o.status != ObjectStatus::Reencrypted) =>
                {
                    ClusterStatus::Changed
                }
                _ => ClusterStatus::Unchanged,
            };
            if d.status == ClusterStatus::Removed {
                d.risks.insert(
                    0,
                    Risk {
                        severity: Severity::High,
                        object: String::new(),
                        message: format!(
                            "cluster `{name}` is no longer rendered: with pruning, Argo CD deletes its Cluster API objects \
                             and Cluster API deletes its machines"
                        ),
                    },
                );
            }
            d
        })
        .collect();
    Diff {
        a: opts.a.clone(),
        b: opts.b.clone(),
        decrypted: opts.identities.is_some(),
        clusters,
    }
}

// ---------------------------------------------------------------------------------------
// Matching

/// The base name of a content-hash name (`lab-f-cp-000a16310e` → `lab-f-cp`).
pub fn base_name(name: &str) -> Option<&str> {
    let (base, hash) = name.rsplit_once('-')?;
    (hash.len() == HASH_LEN
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && !base.is_empty())
    .then_some(base)
}

fn pair_key(id: &ResId) -> Option<(String, String, String, String)> {
    if !IMMUTABLE_KINDS.contains(&id.kind.as_str()) {
        return None;
    }
    base_name(&id.name).map(|b| {
        (
            id.group.clone(),
            id.kind.clone(),
            id.namespace.clone(),
            b.to_string(),
        )
    })
}

fn diff_cluster(
    name: &str,
    a: &ClusterSet,
    b: &ClusterSet,
    ids: Option<&[age::x25519::Identity]>,
) -> ClusterDiff {
    let index = |rs: &[Resource]| -> HashMap<ResId, usize> {
        rs.iter().enumerate().map(|(i, r)| (r.id(), i)).collect()
    };
    let ia = index(&a.resources);
    let ib = index(&b.resources);
    let mut objects: Vec<(u8, usize, ObjectDiff)> = Vec::new();
    let mut risks: Vec<Risk> = Vec::new();
    let mut pairs: Vec<(Option<&Resource>, Option<&Resource>)> = Vec::new();

    // Removed candidates for pairing, by (group, kind, namespace, base name).
    let mut removed_by_base: BTreeMap<(String, String, String, String), Vec<usize>> =
        BTreeMap::new();
    let mut removed: Vec<usize> = Vec::new();
    for (i, r) in a.resources.iter().enumerate() {
        let id = r.id();
        if ib.contains_key(&id) {
            continue;
        }
        match pair_key(&id) {
            Some(k) => removed_by_base.entry(k).or_default().push(i),
            None => removed.push(i),
        }
    }
    for r in &b.resources {
        let id = r.id();
        match ia.get(&id) {
            Some(&i) => pairs.push((Some(&a.resources[i]), Some(r))),
            None => {
                let partner = pair_key(&id)
                    .and_then(|k| removed_by_base.get_mut(&k))
                    .and_then(|v| (!v.is_empty()).then(|| v.remove(0)));
                match partner {
                    Some(i) => pairs.push((Some(&a.resources[i]), Some(r))),
                    None => pairs.push((None, Some(r))),
                }
            }
        }
    }
    let mut leftover: Vec<usize> = removed;
    leftover.extend(removed_by_base.into_values().flatten());
    leftover.sort_unstable();
    for i in leftover {
        pairs.push((Some(&a.resources[i]), None));
    }

    for (ra, rb) in pairs {
        let Some(od) = diff_object(ra, rb, ids) else {
            continue;
        };
        let mut od = od;
        if od.status == ObjectStatus::Replaced {
            if let Some(rb) = rb {
                od.referenced_by = references_to(&b.resources, &rb.id());
            }
        }
        object_risks(&od, ra, rb, b, &mut risks);
        let rank = kind_rank(&od.id.kind);
        let order = rb
            .map(|r| ib.get(&r.id()).copied().unwrap_or(0))
            .or_else(|| ra.map(|r| ia.get(&r.id()).copied().unwrap_or(0) + b.resources.len()))
            .unwrap_or(0);
        objects.push((rank, order, od));
    }
    objects.sort_by_key(|(rank, order, _)| (*rank, *order));
    cluster_risks(a, b, &mut risks);
    risks.sort_by_key(|r| r.severity);
    ClusterDiff {
        name: name.to_string(),
        status: ClusterStatus::Unchanged,
        objects: objects.into_iter().map(|(_, _, o)| o).collect(),
        risks,
    }
}

/// Every place in `resources` referencing `target` (by kind, group and name).
fn references_to(resources: &[Resource], target: &ResId) -> Vec<Reference> {
    fn walk(v: &Value, path: &str, target: &ResId, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                let kind = m.get("kind").and_then(Value::as_str);
                let name = m.get("name").and_then(Value::as_str);
                let group = m
                    .get("apiGroup")
                    .and_then(Value::as_str)
                    .or_else(|| m.get("apiVersion").and_then(Value::as_str).map(group_of));
                if kind == Some(target.kind.as_str())
                    && name == Some(target.name.as_str())
                    && group == Some(target.group.as_str())
                {
                    out.push(push_key(path, "name"));
                }
                for (k, c) in m {
                    walk(c, &push_key(path, k), target, out);
                }
            }
            Value::Array(items) => {
                for (i, c) in items.iter().enumerate() {
                    walk(c, &format!("{path}[{i}]"), target, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for r in resources {
        if r.id() == *target {
            continue;
        }
        if let Some(spec) = r.value.get("spec") {
            let mut paths = Vec::new();
            walk(spec, "spec", target, &mut paths);
            for path in paths {
                out.push(Reference {
                    object: r.id().into(),
                    path,
                });
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Objects and fields

fn is_secret(r: &Resource) -> bool {
    r.kind() == "Secret" && group_of(r.api_version()).is_empty()
}

fn diff_object(
    a: Option<&Resource>,
    b: Option<&Resource>,
    ids: Option<&[age::x25519::Identity]>,
) -> Option<ObjectDiff> {
    let any = b.or(a)?;
    let secret = a.is_some_and(is_secret) || b.is_some_and(is_secret);
    // The `sops` block holds ciphertext (values, MAC, wrapped data keys): recipients only.
    let skip: &[&str] = if secret {
        &["data", "stringData", "sops"]
    } else {
        &["sops"]
    };
    let mut fields = Vec::new();
    match (a, b) {
        (Some(ra), Some(rb)) => {
            walk_fields("", Some(&ra.value), Some(&rb.value), skip, &mut fields);
            // A replacement's new name is in its title.
            fields.retain(|f| f.path != "metadata.name");
        }
        (None, Some(rb)) => walk_fields("", None, Some(&rb.value), skip, &mut fields),
        _ => {}
    }
    let (mut secret_keys, mut notes) = (Vec::new(), Vec::new());
    let mut sops_changed = false;
    let mut broken = None;
    if secret {
        let sa = a.map(|r| SecretView::new(r, ids));
        let sb = b.map(|r| SecretView::new(r, ids));
        for v in sa.iter().chain(sb.iter()) {
            if let Some(e) = &v.error {
                notes.push(e.clone());
            }
        }
        if let (Some(e), true) = (sa.as_ref().and_then(|v| v.broken.as_ref()), sb.is_some()) {
            notes.push(format!("the file before could not be opened ({e})"));
        }
        secret_keys = compare_secrets(sa.as_ref(), sb.as_ref());
        broken = sb.as_ref().and_then(|v| v.broken.clone());
        if let (Some(va), Some(vb), None) = (&sa, &sb, &broken) {
            broken = unverifiable_mac(va, vb);
        }
        if let (Some(va), Some(vb)) = (&sa, &sb) {
            if va.recipients != vb.recipients {
                fields.push(FieldChange {
                    path: "sops.age[*].recipient".into(),
                    delta: Delta::Value {
                        before: Some(Value::from(va.recipients.clone())),
                        after: Some(Value::from(vb.recipients.clone())),
                    },
                });
            }
            sops_changed = va.sops != vb.sops;
        }
    }
    let id: ObjectId = any.id().into();
    let status = match (a, b) {
        (None, Some(_)) => ObjectStatus::Added,
        (Some(_), None) => ObjectStatus::Removed,
        (Some(ra), Some(rb)) => {
            let differs = !fields.is_empty()
                || secret_keys.iter().any(|k| k.status.differs())
                || broken.is_some();
            if ra.name() != rb.name() {
                ObjectStatus::Replaced
            } else if differs {
                ObjectStatus::Changed
            } else if secret
                && (sops_changed
                    || secret_keys
                        .iter()
                        .any(|k| k.status == SecretStatus::Reencrypted))
            {
                ObjectStatus::Reencrypted
            } else {
                return None;
            }
        }
        (None, None) => return None,
    };
    if status == ObjectStatus::Removed {
        fields.clear();
    }
    if status == ObjectStatus::Reencrypted {
        notes.push(if ids.is_some() {
            "ciphertext changed, every decrypted value is identical".into()
        } else {
            "only SOPS metadata changed (mac, lastmodified or data-key wrapping)".into()
        });
    }
    Some(ObjectDiff {
        id,
        status,
        replaces: match (a, b) {
            (Some(ra), Some(rb)) if ra.name() != rb.name() => Some(ra.name().to_string()),
            _ => None,
        },
        fields,
        secret_keys,
        referenced_by: Vec::new(),
        notes,
        broken,
    })
}

/// Without a key for side B: a MAC (or `lastmodified`, its AAD) that changed while every
/// encrypted value stayed is something neither sops nor capstan writes (a re-seal keeps the
/// file, a rekey keeps the MAC, a new value changes ciphertext), and a MAC that does not
/// verify makes sops, KSOPS, Flux and the sops-secrets-operator refuse the file.
fn unverifiable_mac(a: &SecretView, b: &SecretView) -> Option<String> {
    if b.decrypted || a.stored != b.stored {
        return None;
    }
    let get = |v: &SecretView, k: &str| v.sops.as_ref().and_then(|s| s.get(k)).cloned();
    let moved: Vec<&str> = ["mac", "lastmodified"]
        .into_iter()
        .filter(|k| get(a, k) != get(b, k))
        .collect();
    (!moved.is_empty()).then(|| {
        format!(
            "sops.{} changed while no encrypted value did (neither sops nor capstan writes that; \
             pass an identity to verify the MAC)",
            moved.join(" and sops.")
        )
    })
}

fn simple_key(k: &str) -> bool {
    !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Append a map key to a YAML path.
pub fn push_key(path: &str, key: &str) -> String {
    if simple_key(key) {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    } else {
        let quoted = serde_json::to_string(key).unwrap_or_default();
        format!("{path}[{quoted}]")
    }
}

fn is_container(v: &Value) -> bool {
    matches!(v, Value::Object(m) if !m.is_empty()) || matches!(v, Value::Array(a) if !a.is_empty())
}

fn walk_fields(
    path: &str,
    a: Option<&Value>,
    b: Option<&Value>,
    skip_top: &[&str],
    out: &mut Vec<FieldChange>,
) {
    match (a, b) {
        (Some(Value::Object(ma)), Some(Value::Object(mb))) => {
            for (k, va) in ma {
                if path.is_empty() && skip_top.contains(&k.as_str()) {
                    continue;
                }
                walk_fields(&push_key(path, k), Some(va), mb.get(k), skip_top, out);
            }
            for (k, vb) in mb {
                if ma.contains_key(k) || (path.is_empty() && skip_top.contains(&k.as_str())) {
                    continue;
                }
                walk_fields(&push_key(path, k), None, Some(vb), skip_top, out);
            }
        }
        (Some(Value::Array(xa)), Some(Value::Array(xb))) => {
            for i in 0..xa.len().max(xb.len()) {
                walk_fields(&format!("{path}[{i}]"), xa.get(i), xb.get(i), skip_top, out);
            }
        }
        (Some(x), Some(y)) if x == y => {}
        (None, Some(y)) if is_container(y) => walk_into(path, y, true, skip_top, out),
        (Some(x), None) if is_container(x) => walk_into(path, x, false, skip_top, out),
        (None, None) => {}
        _ => out.push(leaf_change(path, a, b)),
    }
}

fn walk_into(path: &str, v: &Value, added: bool, skip_top: &[&str], out: &mut Vec<FieldChange>) {
    let (a, b) = if added {
        (None, Some(v))
    } else {
        (Some(v), None)
    };
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                if path.is_empty() && skip_top.contains(&k.as_str()) {
                    continue;
                }
                let p = push_key(path, k);
                if added {
                    walk_fields(&p, None, Some(c), skip_top, out);
                } else {
                    walk_fields(&p, Some(c), None, skip_top, out);
                }
            }
        }
        Value::Array(items) => {
            for (i, c) in items.iter().enumerate() {
                let p = format!("{path}[{i}]");
                if added {
                    walk_fields(&p, None, Some(c), skip_top, out);
                } else {
                    walk_fields(&p, Some(c), None, skip_top, out);
                }
            }
        }
        _ => out.push(leaf_change(path, a, b)),
    }
}

fn last_key(path: &str) -> &str {
    let tail = path.rsplit(['.', '[']).next().unwrap_or(path);
    tail.trim_end_matches(']').trim_matches('"')
}

fn sensitive_name(key: &str) -> bool {
    let k = key.to_ascii_lowercase().replace(['-', '_'], "");
    k.ends_with("token")
        || k.ends_with("password")
        || k.ends_with("passwd")
        || k.ends_with("secret")
        || k.ends_with("privatekey")
        || k == "key"
        || k.ends_with("encryptionsecret")
}

fn looks_secret(v: &Value) -> bool {
    let Some(s) = v.as_str() else {
        return false;
    };
    if s.starts_with("ENC[") || s.contains("PRIVATE KEY") || s.contains("AGE ENCRYPTED FILE") {
        return true;
    }
    decode_b64(s).is_some_and(|d| d.windows(11).any(|w| w == b"PRIVATE KEY"))
}

fn leaf_change(path: &str, a: Option<&Value>, b: Option<&Value>) -> FieldChange {
    let masked = a.is_some_and(looks_secret)
        || b.is_some_and(looks_secret)
        || ((a.is_some_and(Value::is_string) || b.is_some_and(Value::is_string))
            && sensitive_name(last_key(path)))
        || path.ends_with("last-applied-configuration\"]");
    let delta = if masked {
        Delta::Masked
    } else {
        let ca = a.and_then(Value::as_str).map(certificates_in);
        let cb = b.and_then(Value::as_str).map(certificates_in);
        let has_certs = ca.as_ref().is_some_and(|c| !c.is_empty())
            || cb.as_ref().is_some_and(|c| !c.is_empty());
        let sa = a.and_then(Value::as_str);
        let sb = b.and_then(Value::as_str);
        if has_certs {
            Delta::Certificate {
                certificates: zip_certs("", ca.unwrap_or_default(), cb.unwrap_or_default()),
            }
        } else if sa.is_some_and(|s| s.contains('\n')) || sb.is_some_and(|s| s.contains('\n')) {
            Delta::Text {
                diff: text_diff(sa.unwrap_or(""), sb.unwrap_or("")),
            }
        } else {
            Delta::Value {
                before: a.cloned(),
                after: b.cloned(),
            }
        }
    };
    FieldChange {
        path: path.to_string(),
        delta,
    }
}

fn zip_certs(path: &str, a: Vec<CertInfo>, b: Vec<CertInfo>) -> Vec<CertChange> {
    let n = a.len().max(b.len());
    let mut a = a.into_iter();
    let mut b = b.into_iter();
    (0..n)
        .map(|i| CertChange {
            path: if n > 1 {
                format!("{path}#{}", i + 1)
            } else {
                path.to_string()
            },
            before: a.next(),
            after: b.next(),
        })
        .collect()
}

fn secret_line() -> &'static regex::Regex {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        regex::Regex::new(
            r#"(?i)^(\s*-?\s*"?[A-Za-z0-9_.-]*(token|secret|password|passwd|privatekey|private-key|private_key|\bkey|\bcrt)"?\s*:\s*)(\S.*)$"#,
        )
        .expect("a constant, valid regex")
    })
}

/// Mask the value of any line that looks like `token: …`, `…secret: …` or a key block.
fn redact_line(line: &str) -> String {
    if line.contains("PRIVATE KEY") || line.contains("ENC[") {
        return "(masked)".into();
    }
    match secret_line().captures(line) {
        Some(c) => format!("{}(masked)", &c[1]),
        None => line.to_string(),
    }
}

/// A unified diff of two texts (3 lines of context, no file headers), secret-looking values
/// masked.
pub fn text_diff(a: &str, b: &str) -> String {
    let a: String = a.lines().map(|l| redact_line(l) + "\n").collect();
    let b: String = b.lines().map(|l| redact_line(l) + "\n").collect();
    let d = similar::TextDiff::from_lines(&a, &b);
    let mut u = d.unified_diff();
    u.context_radius(3).missing_newline_hint(false);
    let mut out = String::new();
    for hunk in u.iter_hunks() {
        out.push_str(&hunk.to_string());
    }
    out
}

// ---------------------------------------------------------------------------------------
// Certificates

fn decode_b64(s: &str) -> Option<Vec<u8>> {
    let t: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    if t.len() < 16 || !t.len().is_multiple_of(4) {
        return None;
    }
    B64.decode(t.as_bytes()).ok()
}

/// Every PEM certificate in a text, directly or base64-encoded, summarized.
pub fn certificates_in(s: &str) -> Vec<CertInfo> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let decoded;
    let text: &str = if s.contains(BEGIN) {
        s
    } else {
        match decode_b64(s).and_then(|d| String::from_utf8(d).ok()) {
            Some(d) if d.contains(BEGIN) => {
                decoded = d;
                &decoded
            }
            _ => return Vec::new(),
        }
    };
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(BEGIN) {
        let Some(end) = rest[start..].find(END) else {
            break;
        };
        let block = &rest[start..start + end + END.len()];
        if let Ok(c) = crate::pki::certificate_summary("certificate", block.as_bytes()) {
            out.push(CertInfo {
                subject: c.subject.clone(),
                issuer: c.issuer.clone(),
                not_after: c.not_after_rfc3339(),
                sha256: c.sha256.clone(),
                is_ca: c.is_ca,
            });
        }
        rest = &rest[start + end + END.len()..];
    }
    out
}

// ---------------------------------------------------------------------------------------
// Secrets

/// A plaintext value, overwritten when dropped.
type Secret = Zeroizing<Vec<u8>>;

struct SecretView {
    /// `data["k"]` → the value as stored (ciphertext for SOPS files).
    stored: Vec<(String, String)>,
    /// `data["k"]` → decoded plaintext, when known.
    plain: HashMap<String, Secret>,
    recipients: Vec<String>,
    /// The SOPS metadata other than recipients (mac, lastmodified…), compared only.
    sops: Option<Value>,
    error: Option<String>,
    /// Whether the values were decrypted (and so the MAC verified).
    decrypted: bool,
    /// Why the file cannot be opened (tampered or malformed): not a missing key.
    broken: Option<String>,
}

fn value_bytes(section: &str, v: &Value) -> Secret {
    let s = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let s = Zeroizing::new(s);
    if section == "data" {
        if let Ok(d) = B64.decode(s.trim().as_bytes()) {
            return Zeroizing::new(d);
        }
    }
    Zeroizing::new(s.as_bytes().to_vec())
}

impl SecretView {
    fn new(r: &Resource, ids: Option<&[age::x25519::Identity]>) -> SecretView {
        let mut view = SecretView {
            stored: Vec::new(),
            plain: HashMap::new(),
            recipients: Vec::new(),
            sops: r.value.get("sops").cloned(),
            error: None,
            decrypted: false,
            broken: None,
        };
        for section in ["data", "stringData"] {
            if let Some(Value::Object(m)) = r.value.get(section) {
                for (k, v) in m {
                    let key = push_key(section, k);
                    let text = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    view.stored.push((key, text));
                }
            }
        }
        let Some(sops) = &view.sops else {
            // A plaintext Secret: its values are the plaintext.
            for section in ["data", "stringData"] {
                if let Some(Value::Object(m)) = r.value.get(section) {
                    for (k, v) in m {
                        view.plain
                            .insert(push_key(section, k), value_bytes(section, v));
                    }
                }
            }
            return view;
        };
        if let Some(Value::Array(age)) = sops.get("age") {
            view.recipients = age
                .iter()
                .filter_map(|s| s.get("recipient").and_then(Value::as_str))
                .map(str::to_string)
                .collect();
        }
        if let Some(s) = view.sops.as_mut().and_then(Value::as_object_mut) {
            s.remove("age");
        }
        let label = r.id().to_string();
        let text = r
            .raw
            .as_ref()
            .map(|raw| raw.text.clone())
            .unwrap_or_else(|| crate::yaml::to_string(&r.value));
        // What can be verified without a key: the file's shape and its ciphertext's.
        let file = match crate::sops::SopsFile::parse(&label, &text).and_then(|f| {
            f.check_ciphertext(&label, &["data", "stringData"])?;
            Ok(f)
        }) {
            Ok(f) => f,
            Err(e) => {
                view.broken = Some(e.to_string());
                return view;
            }
        };
        let Some(ids) = ids else {
            return view;
        };
        match file.decrypt(&label, ids) {
            Ok(plain) => {
                view.decrypted = true;
                let mut tree = plain.into_tree();
                for section in ["data", "stringData"] {
                    if let Some(Value::Object(m)) = tree.get(section) {
                        for (k, v) in m {
                            view.plain
                                .insert(push_key(section, k), value_bytes(section, v));
                        }
                    }
                }
                scrub(&mut tree);
            }
            // No key for it here: compared by ciphertext.
            Err(e @ crate::sops::SopsError::NoMatchingIdentity { .. }) => {
                view.error = Some(format!(
                    "not decrypted ({e}); values compared by ciphertext"
                ))
            }
            // A key opened it and something else failed: a wrong MAC, a value that does
            // not decrypt, a data key that does not unwrap.
            Err(e) => view.broken = Some(e.to_string()),
        }
        view
    }
}

/// Field names of a Talos secrets bundle (fixed by Talos); only these are ever named.
const BUNDLE_FIELDS: &[&str] = &[
    "cluster",
    "id",
    "secret",
    "secrets",
    "bootstraptoken",
    "secretboxencryptionsecret",
    "aescbcencryptionsecret",
    "trustdinfo",
    "token",
    "certs",
    "etcd",
    "k8s",
    "k8saggregator",
    "k8sserviceaccount",
    "os",
    "crt",
    "key",
];

fn parse_bundle(bytes: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(bytes).ok()?;
    let v = crate::yaml::parse_one(text).ok()?;
    let m = v.as_object()?;
    (m.contains_key("certs") && (m.contains_key("secrets") || m.contains_key("cluster")))
        .then_some(v)
}

/// Changed leaves of two bundles: (path, before, after) with both leaves as strings.
fn bundle_changes(a: &Value, b: &Value) -> Vec<(String, Option<String>, Option<String>)> {
    fn leaves(v: &Value, path: &str, out: &mut BTreeMap<String, String>) {
        match v {
            Value::Object(m) => {
                for (k, c) in m {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    leaves(c, &p, out);
                }
            }
            Value::Null => {}
            Value::String(s) => {
                out.insert(path.to_string(), s.clone());
            }
            other => {
                out.insert(path.to_string(), other.to_string());
            }
        }
    }
    let (mut la, mut lb) = (BTreeMap::new(), BTreeMap::new());
    leaves(a, "", &mut la);
    leaves(b, "", &mut lb);
    let keys: BTreeSet<&String> = la.keys().chain(lb.keys()).collect();
    let mut out = Vec::new();
    for k in keys {
        let (x, y) = (la.get(k), lb.get(k));
        if x != y && k.split('.').all(|s| BUNDLE_FIELDS.contains(&s)) {
            out.push((k.clone(), x.cloned(), y.cloned()));
        }
    }
    let scrub_map = |m: &mut BTreeMap<String, String>| {
        m.values_mut().for_each(zeroize::Zeroize::zeroize);
    };
    scrub_map(&mut la);
    scrub_map(&mut lb);
    out
}

fn certs_of(bytes: Option<&Secret>) -> Vec<CertInfo> {
    bytes
        .and_then(|b| std::str::from_utf8(b).ok())
        .map(certificates_in)
        .unwrap_or_default()
}

fn compare_secrets(a: Option<&SecretView>, b: Option<&SecretView>) -> Vec<SecretKey> {
    let empty = Vec::new();
    let sa = a.map_or(&empty, |v| &v.stored);
    let sb = b.map_or(&empty, |v| &v.stored);
    let mut keys: Vec<&String> = sa.iter().map(|(k, _)| k).collect();
    for (k, _) in sb {
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let plain_a = |k: &str| a.and_then(|v| v.plain.get(k));
    let plain_b = |k: &str| b.and_then(|v| v.plain.get(k));
    let mut out = Vec::new();
    for key in keys {
        let xa = sa.iter().find(|(k, _)| k == key).map(|(_, v)| v);
        let xb = sb.iter().find(|(k, _)| k == key).map(|(_, v)| v);
        let (pa, pb) = (plain_a(key), plain_b(key));
        let mut entry = SecretKey {
            key: key.clone(),
            status: SecretStatus::Unchanged,
            fields: Vec::new(),
            certificates: Vec::new(),
        };
        entry.status = match (xa, xb) {
            (None, Some(_)) => SecretStatus::Added,
            (Some(_), None) => SecretStatus::Removed,
            (Some(x), Some(y)) if x == y => SecretStatus::Unchanged,
            _ => match (pa, pb) {
                (Some(p), Some(q)) if p.as_slice() == q.as_slice() => SecretStatus::Reencrypted,
                (Some(_), Some(_)) => SecretStatus::Changed,
                _ => SecretStatus::CiphertextDiffers,
            },
        };
        if matches!(
            entry.status,
            SecretStatus::Changed | SecretStatus::Added | SecretStatus::Removed
        ) {
            let (ca, cb) = (certs_of(pa), certs_of(pb));
            if !ca.is_empty() || !cb.is_empty() {
                let changed = ca != cb;
                if changed {
                    entry.certificates = zip_certs("", ca, cb);
                }
            }
            let bundles = (
                pa.and_then(|p| parse_bundle(p)),
                pb.and_then(|p| parse_bundle(p)),
            );
            if let (Some(mut ba), Some(mut bb)) = bundles {
                for (path, x, y) in bundle_changes(&ba, &bb) {
                    let cx = x.as_deref().map(certificates_in).unwrap_or_default();
                    let cy = y.as_deref().map(certificates_in).unwrap_or_default();
                    if (!cx.is_empty() || !cy.is_empty()) && cx != cy {
                        entry.certificates.extend(zip_certs(&path, cx, cy));
                    }
                    let mut x = x;
                    let mut y = y;
                    x.iter_mut().for_each(zeroize::Zeroize::zeroize);
                    y.iter_mut().for_each(zeroize::Zeroize::zeroize);
                    entry.fields.push(path);
                }
                scrub(&mut ba);
                scrub(&mut bb);
            }
        }
        out.push(entry);
    }
    out
}

// ---------------------------------------------------------------------------------------
// Risks

fn risk(severity: Severity, object: &ObjectId, message: String) -> Risk {
    Risk {
        severity,
        object: object.to_string(),
        message,
    }
}

fn is_capi_group(group: &str) -> bool {
    group == "cluster.x-k8s.io" || group.ends_with(".cluster.x-k8s.io")
}

fn replicas(r: Option<&Resource>) -> Option<i64> {
    r.and_then(|r| r.value.pointer("/spec/replicas"))
        .and_then(Value::as_i64)
}

fn is_control_plane(kind: &str) -> bool {
    kind.ends_with("ControlPlane")
}

/// etcd quorum for `n` members.
fn quorum(n: i64) -> i64 {
    n / 2 + 1
}

/// Failures an etcd cluster of `n` members tolerates.
fn tolerance(n: i64) -> i64 {
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
fn defaulted_replicas(kind: &str, n: i64, b: Option<&Resource>) -> (i64, String) {
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

fn replica_risks(
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
                "deletes every machine of the pool: its workloads are evicted with nowhere to go in this pool"
                    .to_string(),
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

fn str_at<'a>(r: Option<&'a Resource>, ptr: &str) -> Option<&'a str> {
    r.and_then(|r| r.value.pointer(ptr)).and_then(Value::as_str)
}

fn kubernetes_version(r: &Resource) -> Option<&str> {
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
fn talos_version(r: &Resource) -> Option<&str> {
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

fn version_risks(what: &str, id: &ObjectId, a: &str, b: &str, out: &mut Vec<Risk>) {
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
fn patch_risk(path: &str) -> Option<(Severity, &'static str)> {
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
    } else {
        None
    }
}

fn yaml_leaves(v: &Value, path: &str, out: &mut BTreeMap<String, Value>) {
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

fn patch_values(r: Option<&Resource>) -> BTreeMap<String, Value> {
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
                    let prefix = if j == 0 {
                        format!("patch[{i}]")
                    } else {
                        format!("patch[{i}]#{j}")
                    };
                    yaml_leaves(doc, &prefix, &mut out);
                }
            }
        }
    }
    out
}

fn short(v: Option<&Value>) -> String {
    match v {
        None => "(absent)".into(),
        Some(v) if looks_secret(v) => "(masked)".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn object_risks(
    od: &ObjectDiff,
    ra: Option<&Resource>,
    rb: Option<&Resource>,
    cb: &ClusterSet,
    out: &mut Vec<Risk>,
) {
    let id = &od.id;
    let capi = is_capi_group(&id.group);
    match od.status {
        ObjectStatus::Removed => {
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
                        "deleting the control plane deletes its machines and etcd members"
                            .to_string(),
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
                        "a Cluster API object is deleted (with pruning, Argo CD deletes it)"
                            .to_string(),
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
        ObjectStatus::Replaced => {
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
                    out.push(risk(
                        Severity::Medium,
                        id,
                        format!(
                            "the control-plane machine configuration changes ({other} patch field(s)): the provider \
                             rolls the control-plane machines to apply it"
                        ),
                    ));
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

fn field_risk(id: &ObjectId, f: &FieldChange, out: &mut Vec<Risk>) {
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
    }
    if let Delta::Certificate { certificates } = &f.delta {
        for c in certificates {
            cert_risk(id, &format!("{p}{}", c.path), c, out);
        }
    }
}

fn cert_risk(id: &ObjectId, what: &str, c: &CertChange, out: &mut Vec<Risk>) {
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

fn secret_risk(id: &ObjectId, k: &SecretKey, out: &mut Vec<Risk>) {
    match k.status {
        SecretStatus::Changed => {
            for c in &k.certificates {
                let what = if c.path.is_empty() {
                    k.key.clone()
                } else {
                    format!("{} {}", k.key, c.path)
                };
                cert_risk(id, &what, c, out);
            }
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

/// Risks that need the whole cluster: version skew after the change, the migration phase.
fn cluster_risks(a: &ClusterSet, b: &ClusterSet, out: &mut Vec<Risk>) {
    if let (Some(pa), Some(pb)) = (&a.phase, &b.phase) {
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

    fn res(v: Value) -> Resource {
        Resource {
            value: v,
            origin: "t".into(),
            raw: None,
        }
    }

    fn set(rs: Vec<Value>) -> ResourceSet {
        let mut s = ResourceSet::default();
        s.clusters.insert(
            "c".into(),
            ClusterSet {
                resources: rs.into_iter().map(res).collect(),
                phase: None,
                kubeadm_etcd_members: 0,
            },
        );
        s
    }

    fn tcp(replicas: i64, version: &str, talos: &str, template: &str) -> Value {
        json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1alpha3", "kind": "TalosControlPlane",
            "metadata": {"name": "c-cp", "namespace": "c"},
            "spec": {"version": version, "replicas": replicas,
                "infrastructureTemplate": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                    "kind": "VSphereMachineTemplate", "name": template},
                "controlPlaneConfig": {"controlplane": {"talosVersion": talos, "strategicPatches": [
                    "cluster:\n  apiServer:\n    extraArgs:\n      service-account-issuer: https://a\n"]}}}})
    }

    fn vmt(name: &str, cpus: i64) -> Value {
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "VSphereMachineTemplate",
            "metadata": {"name": name, "namespace": "c"}, "spec": {"template": {"spec": {"numCPUs": cpus}}}})
    }

    fn run(a: ResourceSet, b: ResourceSet) -> ClusterDiff {
        diff(&a, &b, &Options::default()).clusters.remove(0)
    }

    #[test]
    fn identical_sides_have_no_differences() {
        let a = set(vec![tcp(3, "v1.30.4", "v1.10.6", "c-cp-000a16310e")]);
        let d = diff(&a, &a.clone(), &Options::default());
        assert!(!d.has_differences());
        assert_eq!(d.clusters[0].status, ClusterStatus::Unchanged);
    }

    #[test]
    fn renames_pair_as_replaced_and_list_references() {
        let a = set(vec![
            vmt("c-cp-000a16310e", 4),
            tcp(3, "v1.30.4", "v1.10.6", "c-cp-000a16310e"),
        ]);
        let b = set(vec![
            vmt("c-cp-1111111111", 8),
            tcp(3, "v1.30.4", "v1.10.6", "c-cp-1111111111"),
        ]);
        let c = run(a, b);
        let t = &c.objects[0];
        assert_eq!(t.status, ObjectStatus::Replaced);
        assert_eq!(t.replaces.as_deref(), Some("c-cp-000a16310e"));
        assert_eq!(t.fields[0].path, "spec.template.spec.numCPUs");
        assert_eq!(t.referenced_by[0].path, "spec.infrastructureTemplate.name");
        assert_eq!(c.objects[1].status, ObjectStatus::Changed);
        assert!(c.risks.iter().any(|r| r.severity == Severity::High
            && r.message.contains("replaces every control-plane machine")));
    }

    #[test]
    fn quorum_and_versions() {
        let a = set(vec![tcp(5, "v1.30.4", "v1.10.6", "t")]);
        let b = set(vec![tcp(2, "v1.32.0", "v1.10.6", "t")]);
        let c = run(a, b);
        let msgs: Vec<String> = c
            .risks
            .iter()
            .map(|r| format!("{} {}", r.severity.as_str(), r.message))
            .collect();
        assert!(
            msgs.iter()
                .any(|m| m.starts_with("high control-plane replicas 5 → 2: removes a majority")),
            "{msgs:?}"
        );
        assert!(
            msgs.iter()
                .any(|m| m.starts_with("high Kubernetes v1.30.4 → v1.32.0: skips 1 minor")),
            "{msgs:?}"
        );
        // Talos 1.10 supports Kubernetes up to 1.33: fine; 1.34 is not.
        let c = run(
            set(vec![tcp(3, "v1.33.0", "v1.10.6", "t")]),
            set(vec![tcp(3, "v1.34.0", "v1.10.6", "t")]),
        );
        assert!(c
            .risks
            .iter()
            .any(|r| r.message.contains("not supported by Talos v1.10.6")));
    }

    #[test]
    fn patch_issuer_change_is_high() {
        let a = set(vec![tcp(3, "v1.30.4", "v1.10.6", "t")]);
        let mut v = tcp(3, "v1.30.4", "v1.10.6", "t");
        v["spec"]["controlPlaneConfig"]["controlplane"]["strategicPatches"][0] = json!(
            "cluster:\n  apiServer:\n    extraArgs:\n      service-account-issuer: https://b\n"
        );
        let c = run(a, set(vec![v]));
        assert!(matches!(c.objects[0].fields[0].delta, Delta::Text { .. }));
        assert!(c.risks.iter().any(|r| r.severity == Severity::High
            && r.message
                .contains("service-account-issuer: https://a → https://b")));
    }

    #[test]
    fn secrets_never_carry_values() {
        let s = |v: &str| {
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "c"},
                "stringData": {"token": v, "same": "x"}})
        };
        let c = run(set(vec![s("hunter2")]), set(vec![s("hunter3")]));
        let json = serde_json::to_string(&c).unwrap();
        assert!(!json.contains("hunter"), "{json}");
        assert_eq!(c.objects[0].secret_keys[0].status, SecretStatus::Changed);
        assert_eq!(c.objects[0].secret_keys[1].status, SecretStatus::Unchanged);
    }

    #[test]
    fn pause_bootstrap_and_phase() {
        let cluster = |ann: Value, paused: bool| {
            json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
                "metadata": {"name": "c", "namespace": "c", "annotations": ann}, "spec": {"paused": paused}})
        };
        let a = set(vec![cluster(
            json!({"cluster.x-k8s.io/paused": "true"}),
            true,
        )]);
        let b = set(vec![cluster(json!({}), false)]);
        let c = run(a.clone(), b);
        let high: Vec<&str> = c
            .risks
            .iter()
            .filter(|r| r.severity == Severity::High)
            .map(|r| r.message.as_str())
            .collect();
        assert!(
            high.iter().any(
                |m| m.contains("[\"cluster.x-k8s.io/paused\"] removed: reconciliation resumes")
            ),
            "{high:?}"
        );
        assert!(
            high.iter()
                .any(|m| m.starts_with("spec.paused true → false")),
            "{high:?}"
        );
        let job = |cmd: &str| {
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "c"},
                "spec": {"template": {"spec": {"containers": [{"name": "x", "args": [cmd]}]}}}})
        };
        let c = run(
            set(vec![job("patch status")]),
            set(vec![job(
                "patch --subresource status -p {\"status\":{\"bootstrapped\":true}}",
            )]),
        );
        assert!(c
            .risks
            .iter()
            .any(|r| r.severity == Severity::High && r.message.contains("status.bootstrapped")));
        let mut pa = a.clone();
        let mut pb = a.clone();
        pa.clusters.get_mut("c").unwrap().phase = Some("prepare".into());
        pb.clusters.get_mut("c").unwrap().phase = Some("control-plane".into());
        let c = run(pa, pb.clone());
        assert!(c.risks[0]
            .message
            .starts_with("spec.migration.phase prepare → control-plane"));
        // Unknown on one side (a rendered directory): no note.
        assert!(run(a, pb).risks.is_empty());
        // Into phase control-plane with 3 kubeadm members and 3 Talos replicas: the whole
        // etcd membership is stated, not only the Talos machines'.
        let mut pa = set(vec![tcp(0, "v1.30.4", "v1.10.6", "t")]);
        let mut pb = set(vec![tcp(3, "v1.30.4", "v1.10.6", "t")]);
        pa.clusters.get_mut("c").unwrap().phase = Some("prepare".into());
        let b = pb.clusters.get_mut("c").unwrap();
        b.phase = Some("control-plane".into());
        b.kubeadm_etcd_members = 3;
        let c = run(pa, pb);
        assert!(
            c.risks.iter().any(|r| r.message.starts_with(
                "etcd has the 3 kubeadm and the 3 Talos control-plane members in phase control-plane: 6 voters, quorum 4, so 3 members down lose it"
            )),
            "{:?}",
            c.risks
        );
    }

    #[test]
    fn masking_and_paths() {
        assert_eq!(
            push_key("metadata.annotations", "a/b"),
            "metadata.annotations[\"a/b\"]"
        );
        assert_eq!(base_name("lab-f-cp-000a16310e"), Some("lab-f-cp"));
        assert_eq!(base_name("lab-f-cp"), None);
        let d = text_diff("a: 1\ntoken: abc\n", "a: 2\ntoken: abd\n");
        assert!(
            !d.contains("abc") && !d.contains("abd") && d.contains("+a: 2"),
            "{d}"
        );
        let f = leaf_change("spec.x", Some(&json!("ENC[AES256_GCM,data:x]")), None);
        assert_eq!(f.delta, Delta::Masked);
    }
}
