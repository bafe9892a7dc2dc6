//! A rendered Kubernetes object (`Resource`), its identity (`ResId`) and the fixed output
//! order of kinds. Objects are plain JSON values, like kube-core's `DynamicObject`.

use serde_json::Value;
use std::fmt;

/// A rendered object holds a string kustomize cannot build.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {object}: {path} holds {character}: kustomize cannot build it (its YAML writer emits DEL and C1 control characters raw; its reader then refuses them, or reads NEL as a space, even when capstan writes them escaped); remove it")]
pub struct Unbuildable {
    /// Where the object came from.
    pub origin: String,
    /// The object.
    pub object: String,
    /// The field.
    pub path: String,
    /// The character, escaped (`U+007F`).
    pub character: String,
}

/// DEL and the C1 control characters: what kustomize cannot carry in a string (it refuses
/// DEL and C1, and turns NEL into a space).
fn unbuildable(c: char) -> bool {
    matches!(c, '\u{7f}'..='\u{9f}')
}

/// Refuse an object with a string (key or value) that kustomize cannot build. A byte scan
/// first (DEL is 0x7F, every C1 character starts with 0xC2), so clean strings cost little.
pub fn check_buildable(r: &Resource) -> Result<(), Unbuildable> {
    use crate::yaml::{path_text as spell, PathStep as Step};
    /// The path is spelled out only for a finding.
    fn walk<'a>(v: &'a Value, steps: &mut Vec<Step<'a>>, found: &mut Option<(String, char)>) {
        let bad = |s: &str| {
            memchr::memchr2(0x7f, 0xc2, s.as_bytes())
                .and_then(|_| s.chars().find(|&c| unbuildable(c)))
        };
        match v {
            Value::String(s) => {
                if let Some(c) = bad(s) {
                    *found = Some((spell(steps), c));
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    steps.push(Step::Index(i));
                    walk(item, steps, found);
                    steps.pop();
                    if found.is_some() {
                        return;
                    }
                }
            }
            Value::Object(m) => {
                for (k, item) in m {
                    if let Some(c) = bad(k) {
                        *found = Some((format!("{} (a key)", spell(steps)), c));
                        return;
                    }
                    steps.push(Step::Key(k));
                    walk(item, steps, found);
                    steps.pop();
                    if found.is_some() {
                        return;
                    }
                }
            }
            _ => {}
        }
    }
    let mut found = None;
    walk(&r.value, &mut Vec::new(), &mut found);
    match found {
        None => Ok(()),
        Some((path, c)) => Err(Unbuildable {
            origin: r.origin.clone(),
            object: r.id().to_string(),
            path,
            character: format!("U+{:04X}", c as u32),
        }),
    }
}

/// One Kubernetes object.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    /// The whole object.
    pub value: Value,
    /// Where it came from (template name or file), for error messages.
    pub origin: String,
    /// The exact text to emit instead of serializing `value` (sealed SOPS files pass through
    /// verbatim: re-serializing would break nothing in SOPS, but byte-identity is the point).
    pub raw: Option<Verbatim>,
    /// Rendered from a template (built in, or an override of a template capstan knows);
    /// `origin` is then `template <name>`. A file's origin is its path, which a repository
    /// names as it likes: only this flag says an object came from a template.
    pub template: bool,
}

/// A document's text, emitted as it was read.
#[derive(Debug, Clone, PartialEq)]
pub struct Verbatim {
    /// The text.
    pub text: String,
    /// sha256 (lowercase hex) of `text`, when the reader computed it already (the lock file
    /// then reuses it instead of hashing the same bytes again).
    pub sha256: Option<String>,
}

impl Verbatim {
    /// Text whose digest is not known.
    pub fn new(text: String) -> Verbatim {
        Verbatim { text, sha256: None }
    }
}

/// Group, kind, namespace and name: what identifies an object in a cluster.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResId {
    /// API group (`""` for the core group).
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Namespace (`""` when cluster-scoped or unset).
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl fmt::Display for ResId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        if self.namespace.is_empty() {
            write!(f, "{}.{}/{}", self.kind, group, self.name)
        } else {
            write!(
                f,
                "{}.{} {}/{}",
                self.kind, group, self.namespace, self.name
            )
        }
    }
}

/// The value at `path` (mapping keys, outermost first), or `None`. Unlike
/// `Value::pointer`, which unescapes each token into a new string, this allocates nothing:
/// it runs several times for every object rendered.
pub fn at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| field(v, key))
}

/// The Cluster Autoscaler's node-group size annotations (min, max) of an object, when both
/// are set (Cluster API's MachineDeployment webhook uses them only together).
pub fn autoscaler_sizes(value: &Value) -> Option<(&str, &str)> {
    let size = |key: &str| at(value, &["metadata", "annotations", key]).and_then(Value::as_str);
    size("cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size").zip(size(
        "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size",
    ))
}

/// The value of `key` in a mapping, or `None` (also for non-mappings).
pub fn field<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    value.as_object().and_then(|m| map_get(m, key))
}

/// `map.get(key)`, faster for small mappings (most of an object's: its top level,
/// `metadata`, references), which are scanned in order rather than hashed: comparing a few
/// short keys costs less than hashing the one looked for.
pub fn map_get<'a>(map: &'a serde_json::Map<String, Value>, key: &str) -> Option<&'a Value> {
    if map.len() <= 8 {
        map.iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v)
    } else {
        map.get(key)
    }
}

/// The API group of an `apiVersion` (`cluster.x-k8s.io/v1beta2` → `cluster.x-k8s.io`, `v1` → ``).
pub fn group_of(api_version: &str) -> &str {
    match api_version.rsplit_once('/') {
        Some((g, _)) => g,
        None => "",
    }
}

impl Resource {
    /// The template it was rendered from (`v1beta1/cluster.yaml`), if it was.
    pub fn template_name(&self) -> Option<&str> {
        if !self.template {
            return None;
        }
        self.origin.strip_prefix("template ")
    }

    /// One of capstan's migration objects: rendered from `templates/migration/`, which no
    /// override can replace.
    pub fn migration_object(&self) -> bool {
        self.template_name()
            .is_some_and(|t| t.starts_with("migration/"))
    }

    /// `apiVersion`, or `""`.
    pub fn api_version(&self) -> &str {
        field(&self.value, "apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
    /// `kind`, or `""`.
    pub fn kind(&self) -> &str {
        field(&self.value, "kind")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
    /// `metadata.name`, or `""`.
    pub fn name(&self) -> &str {
        at(&self.value, &["metadata", "name"])
            .and_then(Value::as_str)
            .unwrap_or("")
    }
    /// `metadata.namespace`, or `""`.
    pub fn namespace(&self) -> &str {
        at(&self.value, &["metadata", "namespace"])
            .and_then(Value::as_str)
            .unwrap_or("")
    }
    /// The object's identity, borrowed: (group, kind, namespace, name).
    pub fn id_ref(&self) -> (&str, &str, &str, &str) {
        (
            group_of(self.api_version()),
            self.kind(),
            self.namespace(),
            self.name(),
        )
    }
    /// The object's identity.
    pub fn id(&self) -> ResId {
        ResId {
            group: group_of(self.api_version()).to_string(),
            kind: self.kind().to_string(),
            namespace: self.namespace().to_string(),
            name: self.name().to_string(),
        }
    }
    /// The object as YAML text: `raw` when set, else the canonical serialization.
    pub fn to_yaml(&self) -> String {
        let mut out = String::with_capacity(self.yaml_len_hint());
        self.write_yaml(&mut out);
        out
    }

    /// About how long [`Self::to_yaml`] is: exact for verbatim text, else a size that holds
    /// a typical object, so the text is allocated once.
    pub fn yaml_len_hint(&self) -> usize {
        self.raw.as_ref().map_or(1024, |raw| raw.text.len() + 1)
    }

    /// sha256 of [`Self::to_yaml`], when it is already known.
    pub fn yaml_sha256(&self) -> Option<&str> {
        self.raw
            .as_ref()
            .filter(|raw| raw.text.ends_with('\n'))
            .and_then(|raw| raw.sha256.as_deref())
    }

    /// Append the object as YAML text to `out`.
    pub fn write_yaml(&self, out: &mut String) {
        match &self.raw {
            Some(Verbatim { text: raw, .. }) => {
                out.push_str(raw);
                if !raw.ends_with('\n') {
                    out.push('\n');
                }
            }
            None => crate::yaml::write_document(out, &self.value),
        }
    }

    /// Set `metadata.name`.
    pub fn set_name(&mut self, name: &str) {
        if let Some(meta) = self
            .value
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
        {
            meta.insert("name".into(), Value::String(name.to_string()));
        }
    }
}

/// The objects of `kubectl get … -o yaml` output or of a manifest file, each with its kind:
/// every document, and every item of a `List` or `<Kind>List` in its place (an item without
/// `kind` takes the typed list's, which the API server leaves out). An object without a kind
/// has the kind `""`; a list without an `items` array is named in `malformed`.
#[derive(Debug, Default)]
pub struct Listed {
    /// `(kind, object)` in file order.
    pub objects: Vec<(String, Value)>,
    /// The kinds of the lists that had no `items` array.
    pub malformed: Vec<String>,
}

/// Flatten `docs` into [`Listed`].
pub fn list_items(docs: Vec<Value>) -> Listed {
    let mut out = Listed::default();
    for mut doc in docs {
        let kind = doc
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let Some(item_kind) = kind.strip_suffix("List") else {
            out.objects.push((kind, doc));
            continue;
        };
        match doc.get_mut("items").map(Value::take) {
            Some(Value::Array(items)) => {
                for item in items {
                    let k = item
                        .get("kind")
                        .and_then(Value::as_str)
                        .unwrap_or(item_kind)
                        .to_string();
                    out.objects.push((k, item));
                }
            }
            _ => out.malformed.push(kind),
        }
    }
    out
}

/// API groups served by Kubernetes itself (core, `apps`, `*.k8s.io` but not Cluster API's
/// `*.x-k8s.io`): objects in them have no CRD.
pub fn builtin_group(group: &str) -> bool {
    group.is_empty()
        || !group.contains('.')
        || group.ends_with(".k8s.io") && !group.ends_with(".x-k8s.io")
}

/// Position of a kind in the output: secrets first, then the Cluster, its infrastructure, the
/// machine templates, the control plane, the worker bootstrap templates and the
/// MachineDeployments; any other kind after them, in the order it was rendered.
pub fn kind_rank(kind: &str) -> u8 {
    match kind {
        "Namespace" => 0,
        "ServiceAccount"
        | "Role"
        | "RoleBinding"
        | "ClusterRole"
        | "ClusterRoleBinding"
        | "ValidatingAdmissionPolicy"
        | "ValidatingAdmissionPolicyBinding" => 1,
        "Secret" => 2,
        "Cluster" => 3,
        "VSphereCluster" => 4,
        "VSphereMachineTemplate" => 5,
        "TalosControlPlane" => 6,
        "TalosConfigTemplate" => 7,
        "MachineDeployment" => 8,
        _ => 9,
    }
}

/// What keeps a parsed document from being a Kubernetes object: `None` when it is a mapping
/// with a non-empty `apiVersion`, `kind` and `metadata.name`; else `Some(reason)`, which is
/// "not a mapping" or the first missing field (`apiVersion`, `kind`, `metadata.name`).
pub fn missing_identity(doc: &Value) -> Option<&'static str> {
    if !doc.is_object() {
        return Some("not a mapping");
    }
    let empty = |v: Option<&Value>| v.and_then(Value::as_str).is_none_or(str::is_empty);
    [
        ("apiVersion", field(doc, "apiVersion")),
        ("kind", field(doc, "kind")),
        ("metadata.name", at(doc, &["metadata", "name"])),
    ]
    .into_iter()
    .find(|(_, v)| empty(*v))
    .map(|(field, _)| field)
}

/// About how many bytes [`write_stream`] writes for `resources` (each object's
/// [`Resource::yaml_len_hint`] and its separator), so the text can be allocated once.
pub fn stream_capacity(resources: &[Resource]) -> usize {
    resources.iter().map(|r| r.yaml_len_hint() + 4).sum()
}

/// Append objects to `out` as a YAML stream: documents separated by `---` (also from what
/// `out` already holds).
pub fn write_stream(resources: &[Resource], out: &mut String) {
    for r in resources {
        if !out.is_empty() {
            out.push_str("---\n");
        }
        r.write_yaml(out);
    }
}

/// Sort by [`kind_rank`], keeping render order within a rank (a stable sort).
pub fn sort(resources: &mut [Resource]) {
    // Stable; each object's rank is computed once.
    resources.sort_by_cached_key(|r| kind_rank(r.kind()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn list_items_flattens_lists_in_place_and_gives_typed_items_their_kind() {
        let docs = vec![
            json!({"kind": "Node", "metadata": {"name": "a"}}),
            json!({"kind": "List", "items": [{"kind": "DaemonSet"}, {"metadata": {}}]}),
            json!({"kind": "NodeList", "items": [{"metadata": {"name": "b"}}]}),
            json!({"kind": "DaemonSetList"}),
            json!({"metadata": {}}),
        ];
        let l = list_items(docs);
        let kinds: Vec<&str> = l.objects.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds, ["Node", "DaemonSet", "", "Node", ""]);
        assert_eq!(l.objects[3].1["metadata"]["name"], "b");
        assert_eq!(l.malformed, ["DaemonSetList"]);
    }

    #[test]
    fn at_follows_mapping_keys_literally() {
        let v = json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": "true"}}, "a": [1]});
        assert_eq!(
            at(&v, &["metadata", "annotations", "cluster.x-k8s.io/paused"]),
            Some(&json!("true"))
        );
        assert_eq!(at(&v, &[]), Some(&v));
        assert_eq!(at(&v, &["metadata", "nope"]), None);
        assert_eq!(at(&v, &["a", "0"]), None, "keys only, no array indices");
        // Large mappings are hashed, small ones scanned: both find the same keys.
        let big: serde_json::Map<String, Value> =
            (0..20).map(|i| (format!("k{i}"), json!(i))).collect();
        let big = Value::Object(big);
        for i in 0..20 {
            assert_eq!(field(&big, &format!("k{i}")), Some(&json!(i)));
        }
        assert_eq!(field(&big, "k20"), None);
        assert_eq!(field(&json!({"k": 1}), "k"), Some(&json!(1)));
        assert_eq!(field(&json!([1]), "0"), None);
    }

    #[test]
    fn identity_and_order() {
        let r = |kind: &str, api: &str, name: &str| Resource {
            value: json!({"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": "ns"}}),
            origin: "t".into(),
            raw: None,
            template: false,
        };
        let mut v = vec![
            r("MachineDeployment", "cluster.x-k8s.io/v1beta2", "a"),
            r("Widget", "example.com/v1", "w"),
            r("Cluster", "cluster.x-k8s.io/v1beta2", "c"),
            r("Secret", "v1", "s"),
        ];
        sort(&mut v);
        let kinds: Vec<&str> = v.iter().map(Resource::kind).collect();
        assert_eq!(kinds, ["Secret", "Cluster", "MachineDeployment", "Widget"]);
        assert_eq!(v[0].id().group, "");
        assert_eq!(v[1].id().to_string(), "Cluster.cluster.x-k8s.io ns/c");
    }
}
