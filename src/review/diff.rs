//! Resource-level diff of two sets of rendered clusters, secret-safe and risk-aware.
//!
//! Pure: two [`ResourceSet`]s (and optionally age identities) in, a [`Diff`] out; no IO.
//! [`crate::review::report`] renders it as terminal text, Markdown or JSON.
//!
//! - Objects are matched per cluster by group, kind, namespace and name. A removed and an
//!   added content-hash-named template ([`crate::pipeline::names::IMMUTABLE_KINDS`]) with the same
//!   group, kind, namespace and base name (the name without `-<10 hex>`) are paired as
//!   *replaced*, with their field changes and every object that now references the new name.
//! - Field changes are YAML paths (`spec.template.spec.numCPUs`) with before/after values;
//!   multi-line strings get a unified diff (`similar`), certificates a decoded summary.
//! - Secret values are never part of the model. For each key of a Secret it records only
//!   whether the value changed: identical strings are unchanged. A sealed (SOPS) value whose
//!   ciphertext changed is *re-sealed* ([`SealedValues::Resealed`], the default): the same
//!   report whatever the plaintexts, so a pull request's author who re-seals a guess learns
//!   nothing from it; an identity still verifies side B's MAC and decodes certificates
//!   (public). Only [`SealedValues::Compared`] (a key holder's terminal) compares the
//!   plaintexts (equal means re-encrypted) and names the changed fixed fields of a Talos
//!   secrets bundle. Values elsewhere that look secret (private keys, SOPS ciphertext,
//!   `token:` lines) are masked.
//! - [`Risk`] notes (high/medium/low, one line of why) cover replica and etcd-quorum
//!   changes, template rotations, version changes and skew, issuer/audience/encryption/
//!   network changes inside the Talos patches, `status.bootstrapped`, pausing, the migration
//!   phase, CA and key rotations, and deletions of Cluster API objects.

use crate::model::{SemVer, TALOS_SUPPORT};
use crate::pipeline::names::{HASH_LEN, IMMUTABLE_KINDS};
use crate::resource::{group_of, kind_rank, ResId, Resource};
use crate::yaml::scrub;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use zeroize::Zeroizing;

mod risks;
use risks::*;

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
#[serde(rename_all = "camelCase")]
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
#[serde(rename_all = "camelCase")]
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
#[serde(rename_all = "camelCase")]
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
#[serde(rename_all = "camelCase")]
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
#[serde(rename_all = "camelCase")]
pub struct FieldChange {
    /// YAML path (`spec.template.spec.numCPUs`, `metadata.annotations["a/b"]`, `x[0]`).
    pub path: String,
    /// The change.
    #[serde(flatten)]
    pub delta: Delta,
}

/// How sealed (SOPS) values whose ciphertext changed are compared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SealedValues {
    /// Never by plaintext: each is [`SecretStatus::Resealed`], the same report whatever the
    /// plaintexts are, with or without an identity. What `diff` does by default, and what a
    /// report a pull request's author can read must do: any output that depends on both
    /// sides' plaintexts tells that author whether a value they re-sealed is the old one.
    #[default]
    #[serde(rename = "re-sealed")]
    Resealed,
    /// By plaintext (`--compare-sealed`, a key holder's terminal): re-encrypted or changed,
    /// the changed fields of a Talos secrets bundle and their risks.
    Compared,
}

/// What is known about one Secret value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SecretStatus {
    /// Identical value (identical ciphertext, or identical plaintext).
    Unchanged,
    /// A sealed value with another ciphertext, its plaintext not compared
    /// ([`SealedValues::Resealed`]): a difference, whatever the plaintexts.
    #[serde(rename = "re-sealed")]
    Resealed,
    /// Different ciphertext, same plaintext ([`SealedValues::Compared`], or a plaintext
    /// Secret written differently).
    Reencrypted,
    /// The plaintext differs.
    Changed,
    /// Different ciphertext, and no identity to tell why ([`SealedValues::Compared`]).
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
            SecretStatus::Resealed => {
                "re-sealed (new ciphertext; values are not compared here: a key holder runs `capstan diff --compare-sealed`)"
            }
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
#[serde(rename_all = "camelCase")]
pub struct SecretKey {
    /// `data["<key>"]` or `stringData["<key>"]`.
    pub key: String,
    /// What changed.
    pub status: SecretStatus,
    /// Names of the changed fields inside a Talos secrets bundle (never their values;
    /// [`SealedValues::Compared`] only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
    /// Certificates in the value, decoded (needs the plaintext).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<CertChange>,
}

/// An object now pointing at a replaced template's new name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reference {
    /// The referencing object.
    pub object: ObjectId,
    /// The path of the reference's `name`.
    pub path: String,
}

/// One object that differs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
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
#[serde(rename_all = "camelCase")]
pub struct ClusterDiff {
    /// Cluster name.
    pub name: String,
    /// What happened.
    pub status: ClusterStatus,
    /// Objects that differ (and re-encrypted Secrets), in output order.
    pub objects: Vec<ObjectDiff>,
    /// Risk notes, high first.
    pub risks: Vec<Risk>,
    /// The changed input paths that made `diff --git` render this cluster (empty when the
    /// sides were given whole).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<String>,
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
#[serde(rename_all = "camelCase")]
pub struct Diff {
    /// Side A's label (as given).
    pub a: String,
    /// Side B's label.
    pub b: String,
    /// Whether identities were given (MACs verified, certificates decoded; plaintexts
    /// compared only with [`SealedValues::Compared`]).
    pub decrypted: bool,
    /// How sealed values whose ciphertext changed were compared.
    pub sealed: SealedValues,
    /// Every cluster on either side, by name.
    pub clusters: Vec<ClusterDiff>,
    /// What `diff --git` rendered (`None` when the sides were given whole).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
}

/// What `diff --git` rendered: only the clusters whose inputs differ between the revisions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Scope {
    /// Cluster directories on either side.
    pub clusters: usize,
    /// Those rendered on both sides (their inputs changed).
    pub rendered: usize,
    /// Those not rendered: none of their inputs changed, so neither did their objects.
    pub skipped: usize,
    /// Why every cluster rendered, when a shared input (the templates) changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub everything: Option<String>,
    /// Changed paths that no cluster reads.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unused: Vec<String>,
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
    /// How sealed values whose ciphertext changed are compared.
    pub sealed: SealedValues,
    /// What was rendered, when only the clusters whose inputs changed were.
    pub scope: Option<Scope>,
    /// Cluster name → the changed input paths that made it render.
    pub inputs: BTreeMap<String, Vec<String>>,
}

/// Compare two sides.
///
/// # Example
///
/// A render compared with itself has no differences:
///
/// ```
/// use capstan::inputs::{self, Digests};
/// use capstan::pipeline::{self, Options, PipelineError, Session, Source};
/// use capstan::review::diff::{self, ClusterSet, ResourceSet};
///
/// let dirs = inputs::discover("examples/gitops".as_ref())?;
/// let opts = Options { templates: None, digests: Digests::NotWanted };
/// let mut set = ResourceSet::default();
/// for (name, resources) in pipeline::render::<_, PipelineError>(
///     &mut Session::default(), Source::Disk, &dirs, &opts,
///     |_, r, _| Ok((r.name, r.resources)),
/// )? {
///     set.clusters.insert(name, ClusterSet { resources, ..ClusterSet::default() });
/// }
/// let d = diff::diff(&set, &set, &diff::Options::default());
/// assert_eq!(d.clusters.len(), 2);
/// assert!(!d.has_differences());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn diff(a: &ResourceSet, b: &ResourceSet, opts: &Options<'_>) -> Diff {
    let names: Vec<&String> = a
        .clusters
        .keys()
        .chain(b.clusters.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let one = |name: &String| -> ClusterDiff {
        let empty = ClusterSet::default();
        let ca = a.clusters.get(name);
        let cb = b.clusters.get(name);
        let mut d = diff_cluster(
            name,
            ca.unwrap_or(&empty),
            cb.unwrap_or(&empty),
            opts.identities,
            opts.sealed,
        );
        d.inputs = opts.inputs.get(name).cloned().unwrap_or_default();
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
    };
    // Clusters are compared on every core, in chunks; the result keeps the names' order.
    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    let clusters: Vec<ClusterDiff> = if workers <= 1 || names.len() < 16 {
        names.iter().map(|n| one(n)).collect()
    } else {
        map_on_every_core(&names, |n| one(n))
    };
    Diff {
        a: opts.a.clone(),
        b: opts.b.clone(),
        decrypted: opts.identities.is_some(),
        sealed: opts.sealed,
        clusters,
        scope: opts.scope.clone(),
    }
}

/// `f` of every item, in the items' order, computed in one chunk per core (a panic in `f`
/// is passed on).
pub fn map_on_every_core<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    let chunk = items.len().div_ceil(workers).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| {
                let f = &f;
                s.spawn(move || part.iter().map(f).collect::<Vec<_>>())
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| match h.join() {
                Ok(v) => v,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
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
    sealed: SealedValues,
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
        let Some(od) = diff_object(ra, rb, ids, sealed) else {
            continue;
        };
        let mut od = od;
        if od.status == ObjectStatus::Replaced {
            if let Some(rb) = rb {
                od.referenced_by = references_to(&b.resources, &rb.id());
            }
        }
        object_risks(&od, ra, rb, (a, b), &mut risks);
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
        inputs: Vec::new(),
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
    sealed: SealedValues,
) -> Option<ObjectDiff> {
    let any = b.or(a)?;
    let secret = a.is_some_and(is_secret) || b.is_some_and(is_secret);
    // The same object on both sides (most of a fleet's, when a shared input changed): no
    // field walk, and, with an identity, a sealed Secret opened once, to be sure it still
    // opens and verifies.
    if let (Some(ra), Some(rb)) = (a, b) {
        if ra.value == rb.value {
            // Without an identity, an identical file cannot be told broken (its MAC and
            // values moved together, or neither did).
            if !secret || ids.is_none() {
                return None;
            }
            let v = SecretView::new(ra, ids);
            if v.broken.is_none() && v.error.is_none() {
                return None;
            }
        }
    }
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
        secret_keys = compare_secrets(sa.as_ref(), sb.as_ref(), sealed);
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
        if let Ok(c) = crate::secrets::pki::certificate_summary("certificate", block.as_bytes()) {
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
        let file = match crate::secrets::sops::SopsFile::parse(&label, &text).and_then(|f| {
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
            Err(e @ crate::secrets::sops::SopsError::NoMatchingIdentity { .. }) => {
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

/// The certificates of two values that differ, decoded (public material: a CA certificate
/// is in every kubeconfig and TLS handshake): of the value itself, and of each field of a
/// Talos secrets bundle. With `fields`, every changed fixed field of the bundle is named
/// too ([`SealedValues::Compared`]); without, only the bundle's `…crt` fields are read, so
/// nothing returned depends on a secret field.
fn value_changes(
    pa: Option<&Secret>,
    pb: Option<&Secret>,
    fields: bool,
) -> (Vec<String>, Vec<CertChange>) {
    let (mut names, mut certificates) = (Vec::new(), Vec::new());
    let (ca, cb) = (certs_of(pa), certs_of(pb));
    if ca != cb {
        certificates = zip_certs("", ca, cb);
    }
    let bundles = (
        pa.and_then(|p| parse_bundle(p)),
        pb.and_then(|p| parse_bundle(p)),
    );
    if let (Some(mut ba), Some(mut bb)) = bundles {
        for (path, mut x, mut y) in bundle_changes(&ba, &bb) {
            let public = fields || path.rsplit('.').next() == Some("crt");
            if public {
                let cx = x.as_deref().map(certificates_in).unwrap_or_default();
                let cy = y.as_deref().map(certificates_in).unwrap_or_default();
                if (!cx.is_empty() || !cy.is_empty()) && cx != cy {
                    certificates.extend(zip_certs(&path, cx, cy));
                }
            }
            x.iter_mut().for_each(zeroize::Zeroize::zeroize);
            y.iter_mut().for_each(zeroize::Zeroize::zeroize);
            if fields {
                names.push(path);
            }
        }
        scrub(&mut ba);
        scrub(&mut bb);
    }
    (names, certificates)
}

fn compare_secrets(
    a: Option<&SecretView>,
    b: Option<&SecretView>,
    sealed: SealedValues,
) -> Vec<SecretKey> {
    let empty = Vec::new();
    let sa = a.map_or(&empty, |v| &v.stored);
    let sb = b.map_or(&empty, |v| &v.stored);
    let mut keys: Vec<&String> = sa.iter().map(|(k, _)| k).collect();
    for (k, _) in sb {
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    // A value sealed on either side is never compared by plaintext unless asked: a
    // plaintext Secret's values are in the repository already, a sealed one's are not.
    let resealed = sealed == SealedValues::Resealed
        && (a.is_some_and(|v| v.sops.is_some()) || b.is_some_and(|v| v.sops.is_some()));
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
            _ if resealed => SecretStatus::Resealed,
            _ => match (pa, pb) {
                (Some(p), Some(q)) if p.as_slice() == q.as_slice() => SecretStatus::Reencrypted,
                (Some(_), Some(_)) => SecretStatus::Changed,
                _ => SecretStatus::CiphertextDiffers,
            },
        };
        match entry.status {
            SecretStatus::Changed | SecretStatus::Added | SecretStatus::Removed => {
                (entry.fields, entry.certificates) = value_changes(pa, pb, true);
            }
            // Certificates only, and only when both sides were opened: "no certificate
            // before" is not a rotation.
            SecretStatus::Resealed if pa.is_some() && pb.is_some() => {
                (_, entry.certificates) = value_changes(pa, pb, false);
            }
            _ => {}
        }
        out.push(entry);
    }
    out
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
            template: false,
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
    fn a_control_plane_config_change_rolls_nothing_at_0_replicas() {
        let with_patch = |replicas: i64, ntp: &str| {
            let mut v = tcp(replicas, "v1.30.4", "v1.10.6", "t");
            v["spec"]["controlPlaneConfig"]["controlplane"]["strategicPatches"]
                .as_array_mut()
                .unwrap()
                .push(json!(format!("machine:\n  time:\n    servers: [{ntp}]\n")));
            v
        };
        let phase = |mut s: ResourceSet, p: &str| {
            s.clusters.get_mut("c").unwrap().phase = Some(p.into());
            s
        };
        let rolls = |c: &ClusterDiff| {
            c.risks
                .iter()
                .filter(|r| r.message.contains("rolls the control-plane machines"))
                .count()
        };
        // Phase prepare renders the control plane at 0 replicas: nothing to roll.
        let c = run(
            phase(set(vec![with_patch(0, "a")]), "prepare"),
            phase(set(vec![with_patch(0, "b")]), "prepare"),
        );
        assert_eq!(rolls(&c), 0, "{:?}", c.risks);
        assert!(
            c.risks.iter().any(|r| r.severity == Severity::Low
                && r.message.contains(
                    "no control-plane machine is rolled (replicas 0 → 0, phase `prepare`)"
                )),
            "{:?}",
            c.risks
        );
        // Running machines on both sides: they roll.
        let c = run(set(vec![with_patch(3, "a")]), set(vec![with_patch(3, "b")]));
        assert_eq!(rolls(&c), 1, "{:?}", c.risks);
        assert!(c.risks.iter().any(|r| r.severity == Severity::Medium));
    }

    #[test]
    fn sealed_values_are_resealed_unless_compared() {
        // A plaintext Secret's values are in the repository: compared as ever.
        let plain = |v: &str| {
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "c"},
                "stringData": {"token": v}})
        };
        let c = run(set(vec![plain("a")]), set(vec![plain("b")]));
        assert_eq!(c.objects[0].secret_keys[0].status, SecretStatus::Changed);
        // A sealed one (a `sops` block on either side) is re-sealed, a difference, with one
        // risk from its name: high for the provider Secrets, medium for any other.
        for (name, severity) in [("c-talos", Severity::High), ("c-vsphere", Severity::Medium)] {
            let sealed = |v: &str| {
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "c"},
                    "data": {"k": v}, "sops": {"mac": "x"}})
            };
            let d = diff(
                &set(vec![sealed("ENC[a]")]),
                &set(vec![sealed("ENC[b]")]),
                &Options::default(),
            );
            assert!(d.has_differences());
            let c = &d.clusters[0];
            assert_eq!(c.objects[0].status, ObjectStatus::Changed);
            assert_eq!(c.objects[0].secret_keys[0].status, SecretStatus::Resealed);
            // (The made-up file is also broken: that risk is its own.)
            let resealed: Vec<&Risk> = c
                .risks
                .iter()
                .filter(|r| r.message.contains("re-sealed"))
                .collect();
            assert_eq!(resealed.len(), 1, "{:?}", c.risks);
            assert_eq!(resealed[0].severity, severity);
            assert!(resealed[0].message.contains("--compare-sealed"));
        }
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
