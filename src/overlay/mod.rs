//! Overlays: kustomize-style layering of a cluster's rendered objects. Pure: the files are
//! read by [`crate::inputs`] into [`Overlay`]s, and [`apply`] changes objects in memory.
//!
//! A cluster lists overlays in `spec.overlays`; each is a directory with an `overlay.yaml`
//! ([`crate::model::OverlayFile`]). They apply in declared order, each after its `bases`
//! (depth-first, each overlay once), after the templates are rendered and before
//! content-hash naming ([`crate::pipeline::names`]): a patched machine template gets a new name and
//! every reference follows. Within one overlay: its `resources` are added first (objects
//! without a namespace get the cluster's, unless their kind is cluster-scoped), then its
//! `patches` run in order, each on every object its target selects, then its `talos`
//! patches are appended. Sealed Secrets are added after rendering and are never patched;
//! an overlay may not add a Secret (secrets come from `capstan secrets seal`).
//!
//! Patch kinds:
//! - `json`: RFC 6902 (the `json-patch` crate), operations applied in order; an operation
//!   that fails names its index, its JSON pointer and what the object holds there instead
//!   (`json.rs`; an index with leading zeros is named as such).
//! - `merge`: RFC 7396: maps merge, `null` deletes, lists are replaced; a key starting with
//!   `$` is refused (a directive there would be written out as data).
//! - `strategic`: kustomize's strategic merge (`strategic.rs`): lists merge by the patch
//!   strategy and merge keys Kubernetes publishes for built-in kinds, by
//!   `x-kubernetes-list-map-keys` for custom resources whose CRD declares them (both in the
//!   generated `merge_keys.rs`), and by capstan's rules for these lists, which win:
//!
//! | kind | list (field path) | merge |
//! |---|---|---|
//! | VSphereMachineTemplate | `spec.template.spec.network.devices` | by `networkName` |
//! | VSphereMachineTemplate | `spec.template.spec.network.devices[].addressesFromPools` | by `name` |
//! | TalosControlPlane | `spec.controlPlaneConfig.controlplane.strategicPatches`, `.configPatches` | appended |
//! | TalosConfigTemplate | `spec.template.spec.strategicPatches`, `.configPatches` | appended |
//!
//!   Every other list is replaced. Directives (`$patch`, `$retainKeys`,
//!   `$setElementOrder/…`, `$deleteFromPrimitiveList/…`) are applied or refused, never
//!   copied into the output; a `$patch: delete` at the top removes the object, if overlays
//!   added it and nothing references it (never what the templates render, see
//!   `undeletable`).
//!
//! Every cost is bounded: merges are linear, and the overlays of one render share a
//! [`Budget`] of work.
//!
//! Deleting a key (`remove`, `move`, `null`) keeps the order of the remaining keys, so a
//! patch changes only the lines it touches in the output.
//!
//! A patch may not change an object's kind, name or namespace (references would not
//! follow; kustomize v5.5.0 renames with a JSON patch and silently keeps the name for a
//! strategic patch by target: README, differences from kustomize), and on capstan's migration objects (origin
//! `template migration/…`) it may only set labels and add annotations.
//!
//! Targets select by group, version, kind, name (a glob with `*` and `?`, matched against
//! the name as rendered, before the content hash), namespace and label selector; a patch
//! that selects nothing is an error unless it is `optional`.
//!
//! `talos` patches are Talos machine-config strategic patches written as YAML maps: they are
//! appended, in canonical YAML ([`crate::yaml::to_string`]), to the `strategicPatches` of
//! the TalosControlPlane (`controlPlane`) and of the worker pools' TalosConfigTemplates
//! (`workers`, by pool name; `"*"` means every pool and comes before the named pools).
//! Talos applies strategic patches in order, so an overlay's patch wins over capstan's.

mod json;
#[rustfmt::skip]
mod merge_keys;
mod strategic;

#[cfg(any(test, feature = "testkit"))]
pub use strategic::is_directive;

use crate::model::PatchType;
use crate::resource::{self, group_of, Resource};
use json::{apply_op, explain, merge_7396, op_cost, op_name, short};
use serde_json::{Map, Value};
use std::fmt;

/// An overlay as read from disk, ready to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Overlay {
    /// Its `overlay.yaml`, as the user can find it (for messages).
    pub file: String,
    /// Extra objects, each with the file it came from as `origin`.
    pub resources: Vec<Resource>,
    /// Patches in declared order.
    pub patches: Vec<Patch>,
    /// Talos machine-config patches.
    pub talos: TalosPatches,
}

/// One patch.
#[derive(Debug, Clone, PartialEq)]
pub struct Patch {
    /// Its index in `patches`.
    pub index: usize,
    /// The file holding it, when given by `path`.
    pub source: Option<String>,
    /// Which objects it applies to.
    pub target: Target,
    /// Whether matching nothing is allowed.
    pub optional: bool,
    /// The patch.
    pub body: PatchBody,
}

/// The patch itself.
#[derive(Debug, Clone, PartialEq)]
pub enum PatchBody {
    /// RFC 6902 operations.
    Json(Vec<json_patch::PatchOperation>),
    /// RFC 7396 merge patch.
    Merge(Value),
    /// Merge patch with keyed and appended lists.
    Strategic(Value),
}

impl PatchBody {
    fn patch_type(&self) -> PatchType {
        match self {
            PatchBody::Json(_) => PatchType::Json,
            PatchBody::Merge(_) => PatchType::Merge,
            PatchBody::Strategic(_) => PatchType::Strategic,
        }
    }
}

/// Talos patches in canonical YAML text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TalosPatches {
    /// For the TalosControlPlane.
    pub control_plane: Vec<String>,
    /// Per pool name (`*` first), for the pools' TalosConfigTemplates.
    pub workers: Vec<(String, Vec<String>)>,
}

/// Why an overlay could not be built or applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverlayError {
    /// Something in `overlay.yaml` or a file it names is not usable.
    #[error("{file}: {field}: {message}")]
    Invalid {
        /// The file.
        file: String,
        /// The field path, e.g. `patches[1].target.labelSelector`.
        field: String,
        /// What is wrong and what was expected.
        message: String,
    },
    /// A patch selects no object.
    #[error("{file}: patches[{patch}]: target {target} matches no object{}; set `optional: true` if the overlay is meant to apply to clusters without one", if objects.is_empty() { String::new() } else { format!(" (this cluster renders {objects})") })]
    NoMatch {
        /// The overlay file.
        file: String,
        /// Patch index.
        patch: usize,
        /// The selector, as text.
        target: String,
        /// The kinds rendered, comma-separated.
        objects: String,
    },
    /// A patch failed on an object.
    #[error("{file}: patches[{patch}]{}{}: {message}", source_file.as_ref().map(|s| format!(" ({s})")).unwrap_or_default(), operation.as_ref().map(|o| format!(", operation {o}")).unwrap_or_default())]
    Patch {
        /// The overlay file.
        file: String,
        /// Patch index.
        patch: usize,
        /// The patch file, when the patch came from `path`.
        source_file: Option<String>,
        /// The failing operation (JSON patch) as `N (`op` /pointer)`.
        operation: Option<String>,
        /// What went wrong, on which object, and what was there instead.
        message: String,
    },
    /// A Talos patch has nowhere to go.
    #[error("{file}: talos.{field}: {message}")]
    Talos {
        /// The overlay file.
        file: String,
        /// `controlPlane` or `workers.<pool>`.
        field: String,
        /// What is missing.
        message: String,
    },
}

/// The objects of an overlay's `resources` files, each with its file label: no Secret (an
/// overlay carries no plaintext), every object with its kind and name.
fn extra_objects(
    file: &str,
    resources: Vec<(String, Value)>,
) -> Result<Vec<Resource>, OverlayError> {
    let invalid = |field: String, message: String| OverlayError::Invalid {
        file: file.to_string(),
        field,
        message,
    };
    let mut objects = Vec::with_capacity(resources.len());
    for (origin, doc) in resources {
        let problem = match crate::resource::missing_identity(&doc) {
            Some("not a mapping") => Some("a document that is not a mapping".to_string()),
            Some(field) => Some(format!("an object without `{field}`")),
            None => None,
        }
        .or_else(|| {
            (doc.get("kind").and_then(Value::as_str) == Some("Secret") || doc.get("sops").is_some())
                .then(|| {
                    "a Secret: overlays may not carry secrets (plaintext would reach the \
                         output); seal them with `capstan secrets seal`"
                        .to_string()
                })
        });
        if let Some(message) = problem {
            return Err(invalid(
                "resources".into(),
                format!("{origin} holds {message}"),
            ));
        }
        objects.push(Resource {
            value: doc,
            origin,
            raw: None,
            template: false,
        });
    }
    Ok(objects)
}

/// An overlay's Talos machine-config patches, each a non-empty mapping, canonical YAML.
fn talos_patches(
    file: &str,
    t: &crate::model::TalosPatchSpec,
) -> Result<TalosPatches, OverlayError> {
    let invalid = |field: String, message: String| OverlayError::Invalid {
        file: file.to_string(),
        field,
        message,
    };
    let mut talos = TalosPatches::default();
    let canon = |field: String, list: &[Value]| -> Result<Vec<String>, OverlayError> {
        list.iter()
            .enumerate()
            .map(|(j, v)| match v {
                Value::Object(m) if !m.is_empty() => Ok(crate::yaml::to_string(v)),
                _ => Err(invalid(
                    format!("talos.{field}[{j}]"),
                    format!(
                        "expected a Talos machine-config patch (a non-empty mapping such as \
                         `machine: {{install: {{disk: /dev/sda}}}}`), found {}",
                        kind_of(v)
                    ),
                )),
            })
            .collect()
    };
    talos.control_plane = canon("controlPlane".into(), &t.control_plane)?;
    if let Some(all) = t.workers.get("*") {
        talos
            .workers
            .push(("*".into(), canon("workers.*".into(), all)?));
    }
    for (pool, list) in t.workers.iter().filter(|(k, _)| k.as_str() != "*") {
        talos
            .workers
            .push((pool.clone(), canon(format!("workers.{pool}"), list)?));
    }
    Ok(talos)
}

/// Build an [`Overlay`] from its parsed file. `patch_file` is called for a patch given by
/// `path` and returns the file's label and parsed YAML value; `resources` are the objects
/// of the `resources` files, already read, each with its file label.
pub fn build(
    file: &str,
    spec: &crate::model::OverlayFile,
    resources: Vec<(String, Value)>,
    mut patch_file: impl FnMut(usize, &str) -> Result<(String, Value), OverlayError>,
) -> Result<Overlay, OverlayError> {
    let invalid = |field: String, message: String| OverlayError::Invalid {
        file: file.to_string(),
        field,
        message,
    };
    let objects = extra_objects(file, resources)?;
    let mut patches = Vec::with_capacity(spec.patches.len());
    for (i, p) in spec.patches.iter().enumerate() {
        let field = format!("patches[{i}]");
        let target = Target::from_spec(&p.target)
            .map_err(|(f, m)| invalid(format!("{field}.target{f}"), m))?;
        let (source, value) = match (&p.patch, &p.path) {
            (Some(v), None) => (None, v.clone()),
            (None, Some(path)) => {
                let (label, v) = patch_file(i, path)?;
                (Some(label), v)
            }
            (Some(_), Some(_)) => {
                return Err(invalid(
                    field,
                    "give the patch inline (`patch`) or as a file (`path`), not both".into(),
                ))
            }
            (None, None) => {
                return Err(invalid(
                    field,
                    "missing the patch: give `patch` (inline) or `path` (a file)".into(),
                ))
            }
        };
        let where_ = |sub: &str| match &source {
            Some(s) => format!("{field} ({s}){sub}"),
            None => format!("{field}.patch{sub}"),
        };
        let body = match p.patch_type {
            PatchType::Json => {
                let ops: Vec<json_patch::PatchOperation> =
                    serde_path_to_error::deserialize(value).map_err(|e| {
                        let path = e.path().to_string();
                        let sub = if path == "." {
                            String::new()
                        } else if path.starts_with('[') {
                            path
                        } else {
                            format!(".{path}")
                        };
                        invalid(
                            where_(&sub),
                            format!(
                                "expected a list of RFC 6902 operations \
                                 (`{{op: add|remove|replace|move|copy|test, path: /json/pointer, …}}`): {}",
                                e.inner()
                            ),
                        )
                    })?;
                PatchBody::Json(ops)
            }
            PatchType::Merge | PatchType::Strategic => {
                if !value.is_object() {
                    return Err(invalid(
                        where_(""),
                        format!(
                            "a {} patch is a partial object (a mapping), found {}",
                            p.patch_type.as_str(),
                            kind_of(&value)
                        ),
                    ));
                }
                if p.patch_type == PatchType::Merge {
                    if let Some(at) = json::dollar_key(&value) {
                        return Err(invalid(
                            where_(&format!(".{at}")),
                            "a key starting with `$` in a merge patch (RFC 7396) would be written \
                             into the object as data: strategic directives (`$patch`, \
                             `$retainKeys`, …) need `type: strategic`; a key that really starts \
                             with `$` needs a `json` patch"
                                .into(),
                        ));
                    }
                    PatchBody::Merge(value)
                } else {
                    PatchBody::Strategic(value)
                }
            }
        };
        patches.push(Patch {
            index: i,
            source,
            target,
            optional: p.optional,
            body,
        });
    }
    let talos = match &spec.talos {
        Some(t) => talos_patches(file, t)?,
        None => TalosPatches::default(),
    };
    Ok(Overlay {
        file: file.to_string(),
        resources: objects,
        patches,
        talos,
    })
}

pub(super) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing (null)",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// A compiled target selector.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    group: Option<String>,
    version: Option<String>,
    kind: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
    labels: Option<LabelSelector>,
    text: String,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Target {
    /// Compile a selector; errors carry the sub-field (`.labelSelector`) and message.
    pub fn from_spec(t: &crate::model::TargetSpec) -> Result<Target, (String, String)> {
        let mut parts = Vec::new();
        for (k, v) in [
            ("group", &t.group),
            ("version", &t.version),
            ("kind", &t.kind),
            ("name", &t.name),
            ("namespace", &t.namespace),
            ("labelSelector", &t.label_selector),
        ] {
            if let Some(v) = v {
                parts.push(format!("{k}={v}"));
            }
        }
        if parts.is_empty() {
            return Err((
                String::new(),
                "select at least one of group, version, kind, name, namespace, labelSelector"
                    .into(),
            ));
        }
        let labels = t
            .label_selector
            .as_deref()
            .map(LabelSelector::parse)
            .transpose()
            .map_err(|m| (".labelSelector".to_string(), m))?;
        Ok(Target {
            group: t.group.clone(),
            version: t.version.clone(),
            kind: t.kind.clone(),
            name: t.name.clone(),
            namespace: t.namespace.clone(),
            labels,
            text: format!("`{}`", parts.join(", ")),
        })
    }

    /// Whether the selector selects an object.
    pub fn matches(&self, r: &Resource) -> bool {
        let api = r.api_version();
        let version = api.rsplit_once('/').map_or(api, |(_, v)| v);
        self.kind.as_deref().is_none_or(|k| k == r.kind())
            && self.group.as_deref().is_none_or(|g| g == group_of(api))
            && self.version.as_deref().is_none_or(|v| v == version)
            && self.namespace.as_deref().is_none_or(|n| n == r.namespace())
            && self.name.as_deref().is_none_or(|n| glob(n, r.name()))
            && self.labels.as_ref().is_none_or(|l| {
                l.matches(
                    resource::at(&r.value, &["metadata", "labels"]).and_then(Value::as_object),
                )
            })
    }
}

/// `*` matches any run of characters, `?` one character; everything else itself.
pub fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// A Kubernetes label selector (equality- and set-based requirements, comma = and).
#[derive(Debug, Clone, PartialEq)]
pub struct LabelSelector(Vec<Requirement>);

#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

impl LabelSelector {
    /// Parse `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`, comma-separated.
    pub fn parse(text: &str) -> Result<LabelSelector, String> {
        let mut parts = Vec::new();
        let (mut depth, mut start) = (0i32, 0usize);
        for (i, c) in text.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&text[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&text[start..]);
        let bad = |p: &str| {
            format!(
                "`{}` is not a label requirement (expected `key=value`, `key!=value`, `key`, `!key`, \
                 `key in (a,b)` or `key notin (a,b)`)",
                p.trim()
            )
        };
        let key_ok = |k: &str| {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        };
        let mut reqs = Vec::new();
        for raw in parts {
            let p = raw.trim();
            let req = if let Some(k) = p.strip_prefix('!') {
                Requirement::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = p.split_once("!=") {
                Requirement::NotIn(k.trim().into(), vec![v.trim().into()])
            } else if let Some((k, v)) = p.split_once("==").or_else(|| p.split_once('=')) {
                Requirement::In(k.trim().into(), vec![v.trim().into()])
            } else if let Some((k, rest)) = split_set(p, " notin ") {
                Requirement::NotIn(k, set_values(rest).ok_or_else(|| bad(p))?)
            } else if let Some((k, rest)) = split_set(p, " in ") {
                Requirement::In(k, set_values(rest).ok_or_else(|| bad(p))?)
            } else {
                Requirement::Exists(p.to_string())
            };
            let key = match &req {
                Requirement::Exists(k)
                | Requirement::NotExists(k)
                | Requirement::In(k, _)
                | Requirement::NotIn(k, _) => k,
            };
            if !key_ok(key) {
                return Err(bad(p));
            }
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
            Requirement::In(k, vs) => get(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|v| !vs.iter().any(|x| x == v)),
        })
    }
}

fn split_set<'a>(p: &'a str, op: &str) -> Option<(String, &'a str)> {
    let (k, rest) = p.split_once(op)?;
    Some((k.trim().to_string(), rest.trim()))
}

fn set_values(rest: &str) -> Option<Vec<String>> {
    let inner = rest.strip_prefix('(')?.strip_suffix(')')?;
    let vs: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    (!vs.iter().any(String::is_empty)).then_some(vs)
}

/// What an overlay needs to know about the cluster it is applied to.
#[derive(Debug, Clone, Copy)]
pub struct ClusterContext<'a> {
    /// The cluster's namespace, for extra objects that name none.
    pub namespace: &'a str,
    /// Worker pools: (pool name, its TalosConfigTemplate's name before hashing).
    pub pools: &'a [(String, String)],
    /// The work the overlays of this render may still do, shared by all of them.
    pub budget: &'a Budget,
}

/// The units of work one render's overlays may do: [`Budget::new`]'s limit.
pub const WORK_LIMIT: u64 = 5_000_000;

/// The work the overlays of one render may do, counted in units: a node a patch creates
/// or copies (RFC 6902 `add`, `copy`, `replace`, `move`, `test` count the nodes of their
/// value, and an item shifted in a list one each; a merge patch counts its own nodes), a
/// key or list item a strategic merge visits, an object tried against a patch's target.
/// Merges are linear in the sizes of the object and the patch, so the budget bounds both
/// time and the memory a patch can make (a `copy` that doubles a list, repeated, would
/// otherwise exhaust memory).
#[derive(Debug)]
pub struct Budget {
    used: std::cell::Cell<u64>,
    limit: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new()
    }
}

impl Budget {
    /// A budget of [`WORK_LIMIT`] units.
    pub fn new() -> Budget {
        Budget::with_limit(WORK_LIMIT)
    }

    /// A budget of `limit` units.
    pub fn with_limit(limit: u64) -> Budget {
        Budget {
            used: std::cell::Cell::new(0),
            limit,
        }
    }

    /// The units used so far.
    #[cfg(any(test, feature = "testkit"))]
    pub fn used(&self) -> u64 {
        self.used.get()
    }

    /// Count `n` units; `Err(limit)` once the total passes the limit.
    fn charge(&self, n: usize) -> Result<(), u64> {
        let used = self
            .used
            .get()
            .saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
        self.used.set(used);
        if used > self.limit {
            Err(self.limit)
        } else {
            Ok(())
        }
    }

    fn message(limit: u64) -> String {
        format!(
            "the overlays of this render exceed their budget of {limit} units of work (nodes \
             created or copied, list items and keys merged): a patch this large, or repeated \
             this often, is refused; split the change or write the objects as overlay resources"
        )
    }
}

/// The nodes of a value (itself, and every item and member, recursively).
fn nodes(v: &Value) -> usize {
    match v {
        Value::Object(m) => m.values().map(nodes).fold(1, usize::saturating_add),
        Value::Array(a) => a.iter().map(nodes).fold(1, usize::saturating_add),
        _ => 1,
    }
}

/// Kinds that are cluster-scoped: extra objects of these kinds get no namespace.
pub const CLUSTER_SCOPED_KINDS: &[&str] = &[
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PriorityClass",
    "StorageClass",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "GlobalInClusterIPPool",
    "VSphereClusterIdentity",
    "VSphereDeploymentZone",
    "VSphereFailureDomain",
];

/// Why an overlay may not delete this object, if it may not: an overlay deletes only what
/// overlays added (their `resources`). capstan's templates render what the running cluster
/// is (the Cluster, its control plane, the worker pools and their health checks, …):
/// dropping one from the render would have Argo CD prune it, so it is removed in
/// `cluster.yaml`, where capstan removes what refers to it too. Sealed Secrets are never
/// patched, let alone deleted.
fn undeletable(r: &Resource) -> Option<String> {
    if r.raw.is_some() || matches!(r.kind(), "Secret" | "SopsSecret") {
        return Some("it is a sealed Secret (from `capstan secrets seal`)".into());
    }
    r.template_name().map(|t| {
        format!(
            "it is rendered from capstan's template `{t}`, and an overlay may delete only objects \
             that overlays add (their `resources`)"
        )
    })
}

/// For each object deleted (indexes into `out`), the first other object whose `spec` names
/// it (by kind and name, as Cluster API references do, in its namespace or any for a
/// cluster-scoped one), as `Kind/name`. One walk of every object.
fn referenced_by(out: &[Resource], deleted: &[usize]) -> Vec<Option<String>> {
    use std::collections::HashMap;
    fn walk<'a>(v: &'a Value, found: &mut Vec<(&'a str, &'a str)>) {
        match v {
            Value::Object(m) => {
                if let (Some(k), Some(n)) = (
                    m.get("kind").and_then(Value::as_str),
                    m.get("name").and_then(Value::as_str),
                ) {
                    found.push((k, n));
                }
                m.values().for_each(|c| walk(c, found));
            }
            Value::Array(a) => a.iter().for_each(|c| walk(c, found)),
            _ => {}
        }
    }
    let wanted: HashMap<(&str, &str), Vec<usize>> =
        deleted.iter().fold(HashMap::new(), |mut m, &i| {
            m.entry((out[i].kind(), out[i].name())).or_default().push(i);
            m
        });
    let mut by: Vec<Option<String>> = vec![None; out.len()];
    let mut found = Vec::new();
    for (j, r) in out.iter().enumerate() {
        found.clear();
        if let Some(spec) = r.value.get("spec") {
            walk(spec, &mut found);
        }
        for key in &found {
            for &i in wanted.get(key).map(Vec::as_slice).unwrap_or_default() {
                let t = &out[i];
                if i != j
                    && by[i].is_none()
                    && (t.namespace().is_empty() || t.namespace() == r.namespace())
                {
                    by[i] = Some(format!("{}/{}", r.kind(), r.name()));
                }
            }
        }
    }
    deleted.iter().map(|&i| by[i].take()).collect()
}

/// Apply one overlay to the objects of a cluster, in place.
pub fn apply(
    overlay: &Overlay,
    cluster: &ClusterContext<'_>,
    out: &mut Vec<Resource>,
) -> Result<(), OverlayError> {
    for r in &overlay.resources {
        let mut r = r.clone();
        if r.namespace().is_empty() && !CLUSTER_SCOPED_KINDS.contains(&r.kind()) {
            if let Some(meta) = r.value.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.insert("namespace".into(), Value::String(cluster.namespace.into()));
            }
        }
        out.push(r);
    }
    for p in &overlay.patches {
        // Every object is tried against every patch's target.
        if let Err(limit) = cluster.budget.charge(out.len()) {
            return Err(OverlayError::Patch {
                file: overlay.file.clone(),
                patch: p.index,
                source_file: p.source.clone(),
                operation: None,
                message: Budget::message(limit),
            });
        }
        let mut matched = 0usize;
        let mut deleted = Vec::new();
        for (i, r) in out.iter_mut().enumerate() {
            if r.raw.is_some() || !p.target.matches(r) {
                continue;
            }
            matched += 1;
            if apply_patch(overlay, p, r, cluster.budget)? == strategic::Outcome::Deleted {
                deleted.push(i);
            }
        }
        // Only what overlays added may go, and only when nothing still refers to it: the
        // render must not drop what the running cluster is (Argo CD would prune it).
        let refs = if deleted.is_empty() {
            Vec::new()
        } else {
            referenced_by(out, &deleted)
        };
        for (&i, by) in deleted.iter().zip(refs) {
            let r = &out[i];
            let why = undeletable(r)
                .map(|why| format!("{why}: change cluster.yaml instead (capstan removes what refers to it too)"))
                .or_else(|| {
                    by.map(|by| {
                        format!(
                            "{by} references it: remove the reference first, or leave the object \
                             out of the overlay's `resources`"
                        )
                    })
                });
            if let Some(why) = why {
                return Err(OverlayError::Patch {
                    file: overlay.file.clone(),
                    patch: p.index,
                    source_file: p.source.clone(),
                    operation: None,
                    message: format!(
                        "on {}: the patch deletes it (`$patch: delete`), but {why}",
                        r.id()
                    ),
                });
            }
        }
        if !deleted.is_empty() {
            let gone: std::collections::HashSet<usize> = deleted.into_iter().collect();
            let mut j = 0usize;
            out.retain(|_| {
                j += 1;
                !gone.contains(&(j - 1))
            });
        }
        if matched == 0 && !p.optional {
            let mut kinds: Vec<&str> = Vec::new();
            for r in out.iter() {
                if !kinds.contains(&r.kind()) {
                    kinds.push(r.kind());
                }
            }
            return Err(OverlayError::NoMatch {
                file: overlay.file.clone(),
                patch: p.index,
                target: p.target.to_string(),
                objects: kinds.join(", "),
            });
        }
    }
    apply_talos(overlay, cluster, out)
}

/// Apply one patch to one object; [`strategic::Outcome::Deleted`] when a strategic
/// `$patch: delete` removes it.
fn apply_patch(
    overlay: &Overlay,
    p: &Patch,
    r: &mut Resource,
    budget: &Budget,
) -> Result<strategic::Outcome, OverlayError> {
    let before = r.id();
    let id = before.to_string();
    // capstan's migration objects (the Jobs that guard the bootstrap and the etcd audit,
    // and their RBAC) are checked as a whole afterwards: kept to compare with.
    let migration = r.migration_object().then(|| r.value.clone());
    let fail = |operation: Option<String>, message: String| OverlayError::Patch {
        file: overlay.file.clone(),
        patch: p.index,
        source_file: p.source.clone(),
        operation,
        message,
    };
    match &p.body {
        PatchBody::Json(ops) => {
            for (i, op) in ops.iter().enumerate() {
                let operation = || Some(format!("{i} (`{} {}`)", op_name(op), op.path()));
                if let Err(limit) = budget.charge(op_cost(&r.value, op)) {
                    return Err(fail(
                        operation(),
                        format!("on {id}: {}", Budget::message(limit)),
                    ));
                }
                if let Err(e) = apply_op(&mut r.value, op) {
                    return Err(fail(
                        operation(),
                        format!("on {id}: {}", explain(&r.value, op, &e)),
                    ));
                }
            }
        }
        PatchBody::Merge(m) => {
            if let Err(limit) = budget.charge(nodes(m)) {
                return Err(fail(None, format!("on {id}: {}", Budget::message(limit))));
            }
            merge_7396(&mut r.value, m)
        }
        PatchBody::Strategic(s) => {
            let kind = r.kind().to_string();
            let api_version = r.api_version().to_string();
            let outcome =
                strategic::apply(&mut r.value, s, &api_version, &kind, budget).map_err(|m| {
                    fail(
                        None,
                        format!("{} patch on {id}: {m}", p.body.patch_type().as_str()),
                    )
                })?;
            if outcome == strategic::Outcome::Deleted {
                return match migration {
                    Some(_) => Err(fail(
                        None,
                        format!(
                            "on {id}: this is one of capstan's migration objects ({}), and the patch deletes it: \
                             overlays may add labels and annotations to them, nothing else",
                            r.origin
                        ),
                    )),
                    None => Ok(outcome),
                };
            }
        }
    }
    let problem = if !r.value.is_object() {
        Some("the object is no longer a mapping".to_string())
    } else {
        ["apiVersion", "kind"]
            .iter()
            .find(|k| {
                resource::field(&r.value, k)
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
            })
            .map(|k| format!("the object lost `{k}`"))
            .or_else(|| {
                resource::at(&r.value, &["metadata", "name"])
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                    .then(|| "the object lost `metadata.name`".to_string())
            })
    };
    let problem = problem.or_else(|| {
        let after = r.id();
        let changed = [
            ("apiVersion's API group", &before.group, after.group.as_str()),
            ("kind", &before.kind, r.kind()),
            ("metadata.name", &before.name, r.name()),
            ("metadata.namespace", &before.namespace, r.namespace()),
        ]
        .into_iter()
        .find(|(_, b, a)| b.as_str() != *a)
            .map(|(field, b, a)| {
                format!(
                    "the patch changes `{field}` from `{b}` to `{a}`: a patch may not rename an object or change its kind, \
                     as references to it would not follow; name objects in cluster.yaml, \
                     or add the object under its own name as an overlay resource"
                )
            });
        changed
    });
    let problem = problem.or_else(|| {
        migration_change(migration.as_ref()?, &r.value).map(|what| {
            format!(
                "this is one of capstan's migration objects ({}), and the patch changes {what}: overlays may add \
                 labels and annotations to them, nothing else (a template override in `templates/` is the deliberate way)",
                r.origin
            )
        })
    });
    match problem {
        Some(m) => Err(fail(None, format!("on {id}: {m}"))),
        None => Ok(strategic::Outcome::Patched),
    }
}

/// What a patch changed in a migration object beyond what overlays may touch: labels
/// (any), and annotations that were not there before. `None` when nothing else changed.
fn migration_change(before: &Value, after: &Value) -> Option<String> {
    let (Some(b), Some(a)) = (before.as_object(), after.as_object()) else {
        return Some("its shape".into());
    };
    type Map = serde_json::Map<String, Value>;
    fn object<'a>(m: &'a Map, k: &str, empty: &'a Map) -> &'a Map {
        m.get(k).and_then(Value::as_object).unwrap_or(empty)
    }
    let empty = Map::new();
    let (mb, ma) = (object(b, "metadata", &empty), object(a, "metadata", &empty));
    if let Some(k) = first_difference(b, a, &["metadata"]) {
        return Some(format!("`{k}`"));
    }
    if let Some(k) = first_difference(mb, ma, &["labels", "annotations"]) {
        return Some(format!("`metadata.{k}`"));
    }
    let (ab, aa) = (
        object(mb, "annotations", &empty),
        object(ma, "annotations", &empty),
    );
    ab.iter()
        .find(|(key, v)| aa.get(*key) != Some(*v))
        .map(|(key, _)| format!("the annotation `{key}`"))
}

/// The first key, of either mapping and not in `skip`, whose values differ.
fn first_difference<'a>(
    b: &'a serde_json::Map<String, Value>,
    a: &'a serde_json::Map<String, Value>,
    skip: &[&str],
) -> Option<&'a str> {
    b.keys()
        .chain(a.keys())
        .map(String::as_str)
        .filter(|k| !skip.contains(k))
        .find(|k| b.get(*k) != a.get(*k))
}

fn apply_talos(
    overlay: &Overlay,
    cluster: &ClusterContext<'_>,
    out: &mut [Resource],
) -> Result<(), OverlayError> {
    let t = &overlay.talos;
    let fail = |field: String, message: String| OverlayError::Talos {
        file: overlay.file.clone(),
        field,
        message,
    };
    if !t.control_plane.is_empty() {
        let tcp = out
            .iter_mut()
            .find(|r| r.kind() == "TalosControlPlane" && r.raw.is_none())
            .ok_or_else(|| {
                fail(
                    "controlPlane".into(),
                    "this cluster renders no TalosControlPlane".into(),
                )
            })?;
        append_strings(
            &mut tcp.value,
            &[
                "spec",
                "controlPlaneConfig",
                "controlplane",
                "strategicPatches",
            ],
            &t.control_plane,
        )
        .map_err(|m| fail("controlPlane".into(), m))?;
    }
    for (pool, patches) in &t.workers {
        let field = format!("workers.{pool}");
        let names: Vec<&str> = if pool == "*" {
            cluster.pools.iter().map(|(_, n)| n.as_str()).collect()
        } else {
            match cluster.pools.iter().find(|(p, _)| p == pool) {
                Some((_, n)) => vec![n.as_str()],
                None => {
                    let known: Vec<&str> = cluster.pools.iter().map(|(p, _)| p.as_str()).collect();
                    return Err(fail(
                        field,
                        format!(
                            "this cluster has no worker pool `{pool}` (its pools: {}); use `\"*\"` for every pool",
                            if known.is_empty() { "none".to_string() } else { known.join(", ") }
                        ),
                    ));
                }
            }
        };
        for name in names {
            let tct = out
                .iter_mut()
                .find(|r| r.kind() == "TalosConfigTemplate" && r.name() == name)
                .ok_or_else(|| {
                    fail(
                        field.clone(),
                        format!("no TalosConfigTemplate `{name}` was rendered"),
                    )
                })?;
            append_strings(
                &mut tct.value,
                &["spec", "template", "spec", "strategicPatches"],
                patches,
            )
            .map_err(|m| fail(field.clone(), m))?;
        }
    }
    Ok(())
}

fn append_strings(doc: &mut Value, path: &[&str], add: &[String]) -> Result<(), String> {
    let mut cur = doc;
    for (i, key) in path.iter().enumerate() {
        let Value::Object(m) = cur else {
            return Err(format!("`{}` is not a mapping", path[..i].join(".")));
        };
        let last = i + 1 == path.len();
        cur = m.entry(key.to_string()).or_insert_with(|| {
            if last {
                Value::Array(Vec::new())
            } else {
                Value::Object(Map::new())
            }
        });
    }
    match cur {
        Value::Array(items) => {
            items.extend(add.iter().cloned().map(Value::String));
            Ok(())
        }
        other => Err(format!(
            "`{}` holds {}, not a list of patches",
            path.join("."),
            short(other)
        )),
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
            template: false,
        }
    }

    fn vmt(name: &str) -> Resource {
        res(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "VSphereMachineTemplate",
            "metadata": {"name": name, "namespace": "ns", "labels": {"pool": name}},
            "spec": {"template": {"spec": {"numCPUs": 2, "network": {"devices": [
                {"networkName": "a", "dhcp4": true},
                {"networkName": "b", "dhcp4": true, "addressesFromPools": [{"name": "p1", "kind": "InClusterIPPool"}]}
            ]}}}}
        }))
    }

    fn overlay(yaml_text: &str) -> Result<Overlay, OverlayError> {
        let v = crate::yaml::parse_one(yaml_text).unwrap();
        let spec = crate::model::OverlayFile::from_value("o/overlay.yaml", v).unwrap();
        build("o/overlay.yaml", &spec, Vec::new(), |_, _| unreachable!())
    }

    fn run(yaml_text: &str, objects: &mut Vec<Resource>) -> Result<(), OverlayError> {
        let o = overlay(yaml_text)?;
        let pools = vec![("general".to_string(), "c-general".to_string())];
        apply(
            &o,
            &ClusterContext {
                namespace: "ns",
                pools: &pools,
                budget: &Budget::new(),
            },
            objects,
        )
    }

    const HEAD: &str = "apiVersion: capstan.dev/v1alpha1\nkind: Overlay\n";

    #[test]
    fn globs() {
        assert!(glob("lab-*", "lab-f-cp"));
        assert!(glob("*-cp", "lab-f-cp"));
        assert!(glob("l?b-*-c?", "lab-f-cp"));
        assert!(!glob("lab-*-x", "lab-f-cp"));
        assert!(glob("*", ""));
        assert!(!glob("?", ""));
    }

    #[test]
    fn label_selectors() {
        let labels = json!({"a": "1", "b": "2"});
        let m = labels.as_object();
        let ok = |s: &str| LabelSelector::parse(s).unwrap().matches(m);
        assert!(ok("a=1"));
        assert!(ok("a==1,b"));
        assert!(ok("a in (1, 3),!c"));
        assert!(ok("b notin (1,3),a!=2"));
        assert!(!ok("a=2"));
        assert!(!ok("c"));
        assert!(!ok("a notin (1)"));
        assert!(LabelSelector::parse("a in 1").is_err());
        assert!(LabelSelector::parse("a b").is_err());
    }

    #[test]
    fn strategic_merges_devices_by_network_name_and_pools_by_name() {
        let mut objs = vec![vmt("x")];
        run(
            &format!(
                "{HEAD}patches:\n- target: {{kind: VSphereMachineTemplate}}\n  type: strategic\n  patch:\n    spec:\n      template:\n        spec:\n          numCPUs: 4\n          network:\n            devices:\n            - networkName: b\n              dhcp4: false\n              addressesFromPools:\n              - {{name: p2, kind: InClusterIPPool}}\n              - {{name: p1, kind: GlobalInClusterIPPool}}\n            - networkName: c\n              dhcp4: null\n              dhcp6: true\n            - {{networkName: a, $patch: delete}}\n"
            ),
            &mut objs,
        )
        .unwrap();
        assert_eq!(
            objs[0].value["spec"]["template"]["spec"],
            json!({"numCPUs": 4, "network": {"devices": [
                {"networkName": "b", "dhcp4": false, "addressesFromPools": [
                    {"name": "p1", "kind": "GlobalInClusterIPPool"}, {"name": "p2", "kind": "InClusterIPPool"}]},
                {"networkName": "c", "dhcp6": true}
            ]}})
        );
    }

    #[test]
    fn merge_replaces_lists_and_json_reports_what_is_there() {
        let mut objs = vec![vmt("x"), vmt("y")];
        run(
            &format!("{HEAD}patches:\n- target: {{name: x}}\n  type: merge\n  patch: {{spec: {{template: {{spec: {{network: {{devices: [{{networkName: z}}]}}}}}}}}}}\n"),
            &mut objs,
        )
        .unwrap();
        assert_eq!(
            objs[0].value.pointer("/spec/template/spec/network/devices"),
            Some(&json!([{"networkName": "z"}]))
        );
        assert_eq!(objs[1], vmt("y"), "the selector picked x only");
        let e = run(
            &format!("{HEAD}patches:\n- target: {{kind: VSphereMachineTemplate}}\n  type: json\n  patch:\n  - {{op: test, path: /spec/template/spec/numCPUs, value: 2}}\n  - {{op: remove, path: /spec/template/spec/memoryMiB}}\n"),
            &mut vec![vmt("x")],
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "o/overlay.yaml: patches[0], operation 1 (`remove /spec/template/spec/memoryMiB`): on \
             VSphereMachineTemplate.infrastructure.cluster.x-k8s.io ns/x: nothing at \
             `/spec/template/spec/memoryMiB`: `/spec/template/spec` has keys numCPUs, network"
        );
        let e = run(
            &format!("{HEAD}patches:\n- target: {{kind: VSphereMachineTemplate}}\n  type: json\n  patch:\n  - {{op: add, path: /spec/template/spec/network/devices/5, value: {{}}}}\n"),
            &mut vec![vmt("x")],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("operation 0 (`add /spec/template/spec/network/devices/5`)"),
            "{e}"
        );
        assert!(e.contains("(2 items: use 0 to 2 or `-` to append)"), "{e}");
        let e = run(
            &format!("{HEAD}patches:\n- target: {{kind: VSphereMachineTemplate}}\n  type: json\n  patch:\n  - {{op: test, path: /spec/template/spec/numCPUs, value: 8}}\n"),
            &mut vec![vmt("x")],
        )
        .unwrap_err()
        .to_string();
        assert!(e.ends_with("test failed: expected `8`, found `2`"), "{e}");
    }

    #[test]
    fn deleting_keeps_the_order_of_the_other_keys() {
        let md = || {
            res(
                json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment",
                "metadata": {"name": "m"}, "spec": {"a": 1, "replicas": 2, "b": 3, "c": 4, "d": 5}}),
            )
        };
        let keys = |r: &Resource| -> Vec<String> {
            r.value["spec"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect()
        };
        for patch in [
            "type: json\n  patch: [{op: remove, path: /spec/replicas}]",
            "type: merge\n  patch: {spec: {replicas: null}}",
            "type: strategic\n  patch: {spec: {replicas: null}}",
        ] {
            let mut objs = vec![md()];
            run(
                &format!("{HEAD}patches:\n- target: {{kind: MachineDeployment}}\n  {patch}\n"),
                &mut objs,
            )
            .unwrap();
            assert_eq!(keys(&objs[0]), ["a", "b", "c", "d"], "{patch}");
        }
        let mut objs = vec![md()];
        run(
            &format!("{HEAD}patches:\n- target: {{kind: MachineDeployment}}\n  type: json\n  patch: [{{op: move, from: /spec/b, path: /spec/z}}]\n"),
            &mut objs,
        )
        .unwrap();
        assert_eq!(keys(&objs[0]), ["a", "replicas", "c", "d", "z"]);
    }

    /// A `copy` that doubles a list, repeated, would need 2^26 nodes: the render's budget
    /// refuses it, naming the patch and the operation, long before memory runs out.
    #[test]
    fn the_budget_refuses_a_patch_that_doubles_a_value() {
        let ops: String = (0..26)
            .map(|_| "  - {op: copy, from: /spec/a, path: /spec/a/-}\n".to_string())
            .collect();
        let o = overlay(&format!(
            "{HEAD}patches:\n- target: {{kind: ConfigMap}}\n  type: json\n  patch:\n{ops}"
        ))
        .unwrap();
        let mut objs = vec![res(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}, "spec": {"a": [1]}}),
        )];
        let budget = Budget::new();
        let started = std::time::Instant::now();
        let e = apply(
            &o,
            &ClusterContext {
                namespace: "ns",
                pools: &[],
                budget: &budget,
            },
            &mut objs,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("o/overlay.yaml: patches[0], operation 21 (`copy /spec/a/-`): on ConfigMap.core ns/c: the overlays of this render exceed their budget of 5000000 units"),
            "{e}"
        );
        assert!(budget.used() < 2 * WORK_LIMIT);
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        // Merge patches and the target checks count too, across the overlays of a render.
        let o = overlay(&format!(
            "{HEAD}patches:\n- target: {{kind: ConfigMap}}\n  type: merge\n  patch: {{spec: {{b: [1, 2, 3]}}}}\n"
        ))
        .unwrap();
        let budget = Budget::with_limit(12);
        let cluster = ClusterContext {
            namespace: "ns",
            pools: &[],
            budget: &budget,
        };
        let mut objs = vec![res(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}}),
        )];
        apply(&o, &cluster, &mut objs).unwrap();
        let e = apply(&o, &cluster, &mut objs).unwrap_err().to_string();
        assert!(e.contains("exceed their budget of 12 units"), "{e}");
    }

    #[test]
    fn no_match_is_an_error_unless_optional() {
        let e = run(
            &format!("{HEAD}patches:\n- target: {{kind: Nope, name: a*}}\n  type: merge\n  patch: {{a: 1}}\n"),
            &mut vec![vmt("x")],
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("o/overlay.yaml: patches[0]: target `kind=Nope, name=a*` matches no object (this cluster renders VSphereMachineTemplate)"), "{e}");
        run(
            &format!("{HEAD}patches:\n- target: {{kind: Nope}}\n  type: merge\n  optional: true\n  patch: {{a: 1}}\n"),
            &mut vec![vmt("x")],
        )
        .unwrap();
    }

    #[test]
    fn talos_patches_append_canonical_yaml() {
        let tct = res(
            json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1alpha3", "kind": "TalosConfigTemplate",
            "metadata": {"name": "c-general"}, "spec": {"template": {"spec": {"strategicPatches": ["base\n"]}}}}),
        );
        let tcp = res(
            json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1alpha3", "kind": "TalosControlPlane",
            "metadata": {"name": "c-cp"}, "spec": {}}),
        );
        let mut objs = vec![tct, tcp];
        run(
            &format!("{HEAD}talos:\n  controlPlane:\n  - {{machine: {{install: {{disk: /dev/sda}}}}}}\n  workers:\n    general: [{{machine: {{b: 2}}}}]\n    \"*\": [{{machine: {{a: 1}}}}]\n"),
            &mut objs,
        )
        .unwrap();
        assert_eq!(
            objs[0]
                .value
                .pointer("/spec/template/spec/strategicPatches"),
            Some(&json!([
                "base\n",
                "machine:\n  a: 1\n",
                "machine:\n  b: 2\n"
            ]))
        );
        assert_eq!(
            objs[1]
                .value
                .pointer("/spec/controlPlaneConfig/controlplane/strategicPatches"),
            Some(&json!(["machine:\n  install:\n    disk: /dev/sda\n"]))
        );
        let e = run(
            &format!("{HEAD}talos:\n  workers:\n    gpu: [{{machine: {{a: 1}}}}]\n"),
            &mut objs,
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("o/overlay.yaml: talos.workers.gpu: this cluster has no worker pool `gpu` (its pools: general)"), "{e}");
        let e = overlay(&format!(
            "{HEAD}talos:\n  controlPlane: [\"machine: {{}}\"]\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with(
                "o/overlay.yaml: talos.controlPlane[0]: expected a Talos machine-config patch"
            ),
            "{e}"
        );
    }

    #[test]
    fn build_checks_shapes() {
        let e = overlay(&format!(
            "{HEAD}patches:\n- target: {{}}\n  type: merge\n  patch: {{}}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("patches[0].target: select at least one of"),
            "{e}"
        );
        let e = overlay(&format!("{HEAD}patches:\n- target: {{kind: A}}\n  type: json\n  patch: [{{op: remove, path: spec}}]\n"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("o/overlay.yaml: patches[0].patch[0]"), "{e}");
        let e = overlay(&format!("{HEAD}patches:\n- target: {{kind: A}}\n  type: json\n  patch: [{{op: frobnicate, path: /spec}}]\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("patches[0].patch[0]"), "{e}");
        let e = overlay(&format!(
            "{HEAD}patches:\n- target: {{kind: A}}\n  type: merge\n  patch: [1]\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(
                "patches[0].patch: a merge patch is a partial object (a mapping), found a list"
            ),
            "{e}"
        );
        let e = overlay(&format!("{HEAD}patches:\n- target: {{kind: A}}\n  type: merge\n  patch: {{spec: {{template: {{metadata: {{labels: {{$patch: replace, a: b}}}}}}}}}}\n"))
            .unwrap_err()
            .to_string();
        let e2 = overlay(&format!("{HEAD}patches:\n- target: {{kind: A}}\n  type: merge\n  patch: {{spec: {{containers: [{{name: a}}, {{name: b, $patch: delete}}]}}}}\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e2.starts_with("o/overlay.yaml: patches[0].patch.spec.containers[1].$patch: a key"),
            "{e2}"
        );
        assert!(
            e.starts_with("o/overlay.yaml: patches[0].patch.spec.template.metadata.labels.$patch: a key starting with `$` in a merge patch (RFC 7396) would be written into the object as data: strategic directives (`$patch`, `$retainKeys`, …) need `type: strategic`"),
            "{e}"
        );
        let e = overlay(&format!("{HEAD}patches:\n- target: {{kind: A, labelSelector: \"a in b\"}}\n  type: merge\n  patch: {{}}\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("patches[0].target.labelSelector: `a in b` is not a label requirement"),
            "{e}"
        );
    }
}
