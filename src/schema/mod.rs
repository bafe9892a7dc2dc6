//! Strict validation of rendered Kubernetes objects against CRD `openAPIV3Schema`s, rejecting what
//! `kubectl apply --validate=strict` (the API server's structural-schema validation) would reject.
//!
//! [`CrdSet::from_documents`] compiles `apiextensions.k8s.io/v1` CustomResourceDefinitions (already
//! parsed into JSON values) into validation trees, one per (group, version, kind); every `pattern` is
//! compiled once at load time (shared between identical patterns) so that [`CrdSet::validate`] never
//! compiles a regex. [`CrdSet::validate`] returns every violation, each with the JSON path of the
//! offending node (`spec.template.spec.network.devices[0].networkName`, map entries as `labels[key]`).
//!
//! Validated: `type` (with `nullable`), `properties`, `required`, `additionalProperties` (bool or
//! schema), unknown fields (a node with `properties` or a bare `type: object` prunes, so strict
//! validation rejects, every field it does not declare unless `x-kubernetes-preserve-unknown-fields`
//! is set), `items`, `enum`, `pattern`, `minLength`/`maxLength` (in Unicode characters), `minimum`/
//! `maximum` (with `exclusiveMinimum`/`exclusiveMaximum`), `minItems`/`maxItems`, `uniqueItems`,
//! `minProperties`/`maxProperties`, `format` `int32`/`int64` (range) and `date-time` (RFC 3339),
//! `anyOf`/`allOf`/`oneOf`/`not`, `x-kubernetes-int-or-string`, `x-kubernetes-embedded-resource`,
//! `x-kubernetes-list-type` `set` (unique items) and `map` (unique `x-kubernetes-list-map-keys`).
//! The top-level `metadata` is always checked as ObjectMeta (name a DNS-1123 subdomain, namespace a
//! DNS-1123 label, labels/annotations string maps with valid keys and label values, only standard
//! ObjectMeta fields), whatever the CRD's own (usually empty) `metadata` schema says.
//!
//! Not validated: CEL rules (`x-kubernetes-validations`) are NOT evaluated; `default` is not applied
//! (a null in a non-nullable field is reported even where the API server would prune it and default
//! it); other `format`s are ignored; `pattern`s use Rust `regex` syntax, which accepts the RE2 subset
//! used by CRDs but treats `\d`, `\w` and `\s` as Unicode classes; `x-kubernetes-map-type` and
//! `description` are ignored; `status` is checked against the schema like any other field.
#![warn(unreachable_pub)]

pub(crate) mod embedded;
mod names;
use names::{is_date_time, is_dns1123_label, is_dns1123_subdomain, is_label_value, is_qualified_name};


use regex::Regex;
use serde_json::{Map, Number, Value};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// Deepest schema nesting accepted when loading a CRD (guards recursion on hostile input).
const MAX_SCHEMA_DEPTH: usize = 64;
/// Longest value excerpt quoted in a message, in characters.
const MAX_EXCERPT: usize = 80;
/// The API server's limit on the total size of a object's annotations (keys plus values), in bytes.
const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// A CRD document that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SchemaError {
    /// The document is not an `apiextensions.k8s.io/v1` CustomResourceDefinition.
    #[error("{file}: expected a CustomResourceDefinition (apiVersion `apiextensions.k8s.io/v1`), found {found}")]
    NotACrd {
        /// Where the document came from.
        file: String,
        /// What the document is instead.
        found: String,
    },
    /// A field of the CRD does not have the shape the schema language requires.
    #[error("{file}: {path}: expected {expected}, found {found}")]
    Malformed {
        /// Where the document came from.
        file: String,
        /// JSON path inside the CRD document.
        path: String,
        /// What was expected there.
        expected: String,
        /// What was found instead.
        found: String,
    },
    /// A `pattern` that the regex engine cannot compile.
    #[error("{file}: {path}: pattern `{pattern}` does not compile: {reason}")]
    BadPattern {
        /// Where the document came from.
        file: String,
        /// JSON path of the `pattern` keyword inside the CRD document.
        path: String,
        /// The pattern text.
        pattern: String,
        /// The regex engine's complaint.
        reason: String,
    },
    /// The same (group, version, kind) defined twice.
    #[error("{file}: {kind} {group}/{version} is already defined by {first_file}")]
    Duplicate {
        /// Where the second definition came from.
        file: String,
        /// API group.
        group: String,
        /// API version name.
        version: String,
        /// Kind.
        kind: String,
        /// Where the first definition came from.
        first_file: String,
    },
}

/// One way in which an object breaks its schema.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Violation {
    /// JSON path of the offending node, e.g. `spec.template.spec.numCPUs`; empty for the object itself.
    pub path: String,
    /// What was expected and what was found.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "<root>: {}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Compiled schemas of a set of CRDs, keyed by (group, version, kind).
#[derive(Debug, Clone, Default)]
pub(crate) struct CrdSet {
    /// kind -> every (group, version) defined for it.
    by_kind: HashMap<String, Vec<Entry>>,
    count: usize,
}

#[derive(Debug, Clone)]
struct Entry {
    group: String,
    version: String,
    served: bool,
    file: String,
    root: Node,
}

impl CrdSet {
    /// Build from already-parsed CRD documents; `source` names the file each came from (for error messages).
    /// Non-CRD documents are an error naming the source. Later duplicate (group,version,kind) is an error.
    pub(crate) fn from_documents(docs: Vec<(String, Value)>) -> Result<CrdSet, SchemaError> {
        let mut set = CrdSet::default();
        let mut regexes = HashMap::new();
        for (file, doc) in &docs {
            set.add_crd(file, doc, &mut regexes)?;
        }
        Ok(set)
    }

    /// True if a schema exists for this apiVersion ("group/version") and kind (served or not: an
    /// unserved version is still worth validating, to report that it is not served).
    pub(crate) fn knows(&self, api_version: &str, kind: &str) -> bool {
        let (group, version) = split_api_version(api_version);
        self.lookup(group, version, kind).is_some()
    }

    /// Whether the set has a CRD for `kind` in `api_version`'s group, in any version.
    pub(crate) fn knows_kind(&self, api_version: &str, kind: &str) -> bool {
        let (group, _) = split_api_version(api_version);
        self.by_kind
            .get(kind)
            .is_some_and(|entries| entries.iter().any(|e| e.group == group))
    }

    /// Validate one object. Returns all violations (empty = valid). An object whose apiVersion/kind has
    /// no CRD in the set yields one violation saying so; a version that is defined but not served
    /// yields one violation too.
    pub(crate) fn validate(&self, obj: &Value) -> Vec<Violation> {
        let mut v = Validator::default();
        let Some(map) = obj.as_object() else {
            v.report(type_message("object", obj));
            return v.out;
        };
        let api_version = v.top_string(map, "apiVersion");
        let kind = v.top_string(map, "kind");
        let (Some(api_version), Some(kind)) = (api_version, kind) else {
            return v.out;
        };
        let (group, version) = split_api_version(api_version);
        match self.lookup(group, version, kind) {
            Some(entry) if entry.served => {
                if !map.contains_key("metadata") {
                    v.report_at("metadata", "required field missing".to_string());
                }
                v.node(&entry.root, obj, true, true);
            }
            Some(entry) => v.report_at(
                "apiVersion",
                format!(
                    "version `{version}` of kind `{kind}` is defined (in {}) but not served",
                    entry.file
                ),
            ),
            None => {
                let versions: Vec<&str> = self
                    .by_kind
                    .get(kind)
                    .map(|es| {
                        es.iter()
                            .filter(|e| e.group == group)
                            .map(|e| e.version.as_str())
                            .collect()
                    })
                    .unwrap_or_default();
                let message = if versions.is_empty() {
                    format!("no CRD schema for kind `{kind}` in apiVersion `{api_version}`")
                } else {
                    format!(
                        "no CRD schema for kind `{kind}` in apiVersion `{api_version}`; defined versions: [{}]",
                        versions.join(", ")
                    )
                };
                v.report_at("apiVersion", message);
            }
        }
        v.out
    }

    /// Number of (group, version, kind) schemas held, served or not.
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// True when no schema is held.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn lookup(&self, group: &str, version: &str, kind: &str) -> Option<&Entry> {
        self.by_kind
            .get(kind)?
            .iter()
            .find(|e| e.group == group && e.version == version)
    }

    fn add_crd(
        &mut self,
        file: &str,
        doc: &Value,
        regexes: &mut HashMap<String, Arc<Regex>>,
    ) -> Result<(), SchemaError> {
        let not_a_crd = |found: String| SchemaError::NotACrd {
            file: file.to_string(),
            found,
        };
        let Some(obj) = doc.as_object() else {
            return Err(not_a_crd(describe(doc)));
        };
        let api_version = obj.get("apiVersion").and_then(Value::as_str);
        let kind = obj.get("kind").and_then(Value::as_str);
        if api_version != Some("apiextensions.k8s.io/v1")
            || kind != Some("CustomResourceDefinition")
        {
            return Err(not_a_crd(format!(
                "apiVersion {}, kind {}",
                describe_opt(obj.get("apiVersion")),
                describe_opt(obj.get("kind"))
            )));
        }
        let mut c = Compiler { file, regexes };
        let spec = c.field_object(obj, "spec", "")?;
        let group = c.field_str(spec, "group", "spec")?.to_string();
        let names = c.field_object(spec, "names", "spec")?;
        let kind = c.field_str(names, "kind", "spec.names")?.to_string();
        let versions = match spec.get("versions") {
            Some(Value::Array(a)) if !a.is_empty() => a,
            other => {
                return Err(c.malformed_opt("spec.versions", "a non-empty array", other));
            }
        };
        for (i, ver) in versions.iter().enumerate() {
            let vpath = format!("spec.versions[{i}]");
            let Some(ver) = ver.as_object() else {
                return Err(c.malformed(&vpath, "an object", ver));
            };
            let name = c.field_str(ver, "name", &vpath)?.to_string();
            let served = match ver.get("served") {
                Some(Value::Bool(b)) => *b,
                other => {
                    return Err(c.malformed_opt(&format!("{vpath}.served"), "a boolean", other))
                }
            };
            let schema = c.field_object(ver, "schema", &vpath)?;
            let spath = format!("{vpath}.schema.openAPIV3Schema");
            let Some(root) = schema.get("openAPIV3Schema") else {
                return Err(c.malformed_opt(&spath, "a schema object", None));
            };
            let root = c.compile(root, &spath, 0)?;
            if let Some(first) = self.lookup(&group, &name, &kind) {
                return Err(SchemaError::Duplicate {
                    file: file.to_string(),
                    group,
                    version: name,
                    kind,
                    first_file: first.file.clone(),
                });
            }
            self.by_kind.entry(kind.clone()).or_default().push(Entry {
                group: group.clone(),
                version: name,
                served,
                file: file.to_string(),
                root,
            });
            self.count += 1;
        }
        Ok(())
    }
}

/// Split `group/version` (or a core `version`) into (group, version).
fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

// ---------------------------------------------------------------------------------------------
// Compiled schema tree

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::Object => "object",
            Ty::Array => "array",
            Ty::String => "string",
            Ty::Integer => "integer",
            Ty::Number => "number",
            Ty::Boolean => "boolean",
        }
    }

    fn accepts(self, v: &Value) -> bool {
        match self {
            Ty::Object => v.is_object(),
            Ty::Array => v.is_array(),
            Ty::String => v.is_string(),
            Ty::Integer => is_integer(v),
            Ty::Number => v.is_number(),
            Ty::Boolean => v.is_boolean(),
        }
    }
}

#[derive(Debug, Clone, Default)]
enum Additional {
    /// Keyword absent.
    #[default]
    Unspecified,
    /// `additionalProperties: true`.
    Allow,
    /// `additionalProperties: false`.
    Deny,
    /// `additionalProperties: {schema}`.
    Schema(Box<Node>),
}

#[derive(Debug, Clone, Default)]
enum ListType {
    #[default]
    Atomic,
    Set,
    Map(Vec<String>),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Format {
    #[default]
    Other,
    Int32,
    Int64,
    DateTime,
}

#[derive(Debug, Clone)]
struct Bound {
    value: f64,
    shown: Number,
    exclusive: bool,
}

#[derive(Debug, Clone)]
struct Pattern {
    text: String,
    re: Arc<Regex>,
}

#[derive(Debug, Clone, Default)]
struct Node {
    ty: Option<Ty>,
    nullable: bool,
    int_or_string: bool,
    preserve_unknown: bool,
    embedded: bool,
    properties: Option<HashMap<String, Node>>,
    required: Vec<String>,
    additional: Additional,
    items: Option<Box<Node>>,
    enumeration: Option<Vec<Value>>,
    pattern: Option<Pattern>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    minimum: Option<Bound>,
    maximum: Option<Bound>,
    min_items: Option<u64>,
    max_items: Option<u64>,
    unique_items: bool,
    min_properties: Option<u64>,
    max_properties: Option<u64>,
    format: Format,
    any_of: Vec<Node>,
    all_of: Vec<Node>,
    one_of: Vec<Node>,
    not: Option<Box<Node>>,
    list_type: ListType,
}

impl Node {
    fn expected_type(&self) -> &'static str {
        if self.int_or_string {
            "integer` or `string"
        } else {
            self.ty.map_or("any", Ty::name)
        }
    }
}

struct Compiler<'a> {
    file: &'a str,
    regexes: &'a mut HashMap<String, Arc<Regex>>,
}

impl Compiler<'_> {
    fn malformed(&self, path: &str, expected: &str, found: &Value) -> SchemaError {
        self.malformed_opt(path, expected, Some(found))
    }

    fn malformed_opt(&self, path: &str, expected: &str, found: Option<&Value>) -> SchemaError {
        SchemaError::Malformed {
            file: self.file.to_string(),
            path: path.to_string(),
            expected: expected.to_string(),
            found: describe_opt(found),
        }
    }

    fn field_object<'v>(
        &self,
        obj: &'v Map<String, Value>,
        key: &str,
        parent: &str,
    ) -> Result<&'v Map<String, Value>, SchemaError> {
        match obj.get(key) {
            Some(Value::Object(m)) => Ok(m),
            other => Err(self.malformed_opt(&join(parent, key), "an object", other)),
        }
    }

    fn field_str<'v>(
        &self,
        obj: &'v Map<String, Value>,
        key: &str,
        parent: &str,
    ) -> Result<&'v str, SchemaError> {
        match obj.get(key) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s),
            other => Err(self.malformed_opt(&join(parent, key), "a non-empty string", other)),
        }
    }

    fn flag(&self, o: &Map<String, Value>, key: &str, path: &str) -> Result<bool, SchemaError> {
        match o.get(key) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(self.malformed(&join(path, key), "a boolean", other)),
        }
    }

    fn count(
        &self,
        o: &Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Result<Option<u64>, SchemaError> {
        match o.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) => Ok(Some(n)),
                None => Err(self.malformed(&join(path, key), "a non-negative integer", v)),
            },
        }
    }

    fn bound(
        &self,
        o: &Map<String, Value>,
        key: &str,
        exclusive_key: &str,
        path: &str,
    ) -> Result<Option<Bound>, SchemaError> {
        let exclusive = self.flag(o, exclusive_key, path)?;
        match o.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => match n.as_f64() {
                Some(value) => Ok(Some(Bound {
                    value,
                    shown: n.clone(),
                    exclusive,
                })),
                None => {
                    Err(self.malformed(&join(path, key), "a number", &Value::Number(n.clone())))
                }
            },
            Some(other) => Err(self.malformed(&join(path, key), "a number", other)),
        }
    }

    fn schema_list(
        &mut self,
        o: &Map<String, Value>,
        key: &str,
        path: &str,
        depth: usize,
    ) -> Result<Vec<Node>, SchemaError> {
        match o.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, s)| self.compile(s, &format!("{path}.{key}[{i}]"), depth + 1))
                .collect(),
            Some(other) => Err(self.malformed(&join(path, key), "an array of schemas", other)),
        }
    }

    fn compile_pattern(&mut self, text: &str, path: &str) -> Result<Pattern, SchemaError> {
        if let Some(re) = self.regexes.get(text) {
            return Ok(Pattern {
                text: text.to_string(),
                re: Arc::clone(re),
            });
        }
        let re = Regex::new(text).map_err(|e| SchemaError::BadPattern {
            file: self.file.to_string(),
            path: path.to_string(),
            pattern: text.to_string(),
            reason: e.to_string(),
        })?;
        let re = Arc::new(re);
        self.regexes.insert(text.to_string(), Arc::clone(&re));
        Ok(Pattern {
            text: text.to_string(),
            re,
        })
    }

    fn compile(&mut self, v: &Value, path: &str, depth: usize) -> Result<Node, SchemaError> {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(self.malformed(
                path,
                "a schema nested at most 64 levels deep",
                &Value::String("a deeper one".into()),
            ));
        }
        let Some(o) = v.as_object() else {
            return Err(self.malformed(path, "a schema object", v));
        };
        let mut n = Node {
            nullable: self.flag(o, "nullable", path)?,
            int_or_string: self.flag(o, "x-kubernetes-int-or-string", path)?,
            preserve_unknown: self.flag(o, "x-kubernetes-preserve-unknown-fields", path)?,
            embedded: self.flag(o, "x-kubernetes-embedded-resource", path)?,
            unique_items: self.flag(o, "uniqueItems", path)?,
            min_length: self.count(o, "minLength", path)?,
            max_length: self.count(o, "maxLength", path)?,
            min_items: self.count(o, "minItems", path)?,
            max_items: self.count(o, "maxItems", path)?,
            min_properties: self.count(o, "minProperties", path)?,
            max_properties: self.count(o, "maxProperties", path)?,
            minimum: self.bound(o, "minimum", "exclusiveMinimum", path)?,
            maximum: self.bound(o, "maximum", "exclusiveMaximum", path)?,
            ..Node::default()
        };
        if let Some(t) = o.get("type") {
            n.ty = Some(self.ty(t, path)?);
        }
        if let Some(p) = o.get("properties") {
            let Some(p) = p.as_object() else {
                return Err(self.malformed(&join(path, "properties"), "an object of schemas", p));
            };
            let mut props = HashMap::with_capacity(p.len());
            for (k, s) in p {
                let child = self.compile(s, &format!("{path}.properties.{k}"), depth + 1)?;
                props.insert(k.clone(), child);
            }
            n.properties = Some(props);
        }
        if let Some(r) = o.get("required") {
            let names = r.as_array().and_then(|a| {
                a.iter()
                    .map(|x| x.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
            });
            let Some(names) = names else {
                return Err(self.malformed(&join(path, "required"), "an array of strings", r));
            };
            n.required = names;
        }
        n.additional = match o.get("additionalProperties") {
            None => Additional::Unspecified,
            Some(Value::Bool(true)) => Additional::Allow,
            Some(Value::Bool(false)) => Additional::Deny,
            Some(s @ Value::Object(_)) => Additional::Schema(Box::new(self.compile(
                s,
                &join(path, "additionalProperties"),
                depth + 1,
            )?)),
            Some(other) => {
                return Err(self.malformed(
                    &join(path, "additionalProperties"),
                    "a boolean or a schema object",
                    other,
                ))
            }
        };
        if let Some(i) = o.get("items") {
            if !i.is_object() {
                return Err(self.malformed(
                    &join(path, "items"),
                    "a schema object (tuple-form items are not supported)",
                    i,
                ));
            }
            n.items = Some(Box::new(self.compile(
                i,
                &join(path, "items"),
                depth + 1,
            )?));
        }
        if let Some(e) = o.get("enum") {
            let Some(e) = e.as_array() else {
                return Err(self.malformed(&join(path, "enum"), "an array", e));
            };
            n.enumeration = Some(e.clone());
        }
        if let Some(p) = o.get("pattern") {
            let Some(text) = p.as_str() else {
                return Err(self.malformed(&join(path, "pattern"), "a string", p));
            };
            n.pattern = Some(self.compile_pattern(text, &join(path, "pattern"))?);
        }
        if let Some(f) = o.get("format") {
            n.format = match f.as_str() {
                Some("int32") => Format::Int32,
                Some("int64") => Format::Int64,
                Some("date-time") => Format::DateTime,
                Some(_) => Format::Other,
                None => return Err(self.malformed(&join(path, "format"), "a string", f)),
            };
        }
        n.any_of = self.schema_list(o, "anyOf", path, depth)?;
        n.all_of = self.schema_list(o, "allOf", path, depth)?;
        n.one_of = self.schema_list(o, "oneOf", path, depth)?;
        if let Some(s) = o.get("not") {
            n.not = Some(Box::new(self.compile(s, &join(path, "not"), depth + 1)?));
        }
        if let Some(lt) = o.get("x-kubernetes-list-type") {
            n.list_type = self.list_type(o, lt, path)?;
        }
        Ok(n)
    }

    /// A schema's `type`.
    fn ty(&self, t: &Value, path: &str) -> Result<Ty, SchemaError> {
        Ok(match t.as_str() {
            Some("object") => Ty::Object,
            Some("array") => Ty::Array,
            Some("string") => Ty::String,
            Some("integer") => Ty::Integer,
            Some("number") => Ty::Number,
            Some("boolean") => Ty::Boolean,
            _ => {
                return Err(self.malformed(
                    &join(path, "type"),
                    "one of object, array, string, integer, number, boolean",
                    t,
                ))
            }
        })
    }

    /// A schema's `x-kubernetes-list-type` `lt` (and, for `map`, its keys).
    fn list_type(
        &self,
        o: &Map<String, Value>,
        lt: &Value,
        path: &str,
    ) -> Result<ListType, SchemaError> {
        let lt_path = join(path, "x-kubernetes-list-type");
        Ok(match lt.as_str() {
            Some("atomic") => ListType::Atomic,
            Some("set") => ListType::Set,
            Some("map") => {
                let keys_path = join(path, "x-kubernetes-list-map-keys");
                let keys = o.get("x-kubernetes-list-map-keys");
                let parsed = keys.and_then(Value::as_array).and_then(|a| {
                    a.iter()
                        .map(|x| x.as_str().map(str::to_string))
                        .collect::<Option<Vec<_>>>()
                });
                match parsed {
                    Some(k) if !k.is_empty() => ListType::Map(k),
                    _ => {
                        return Err(self.malformed_opt(
                            &keys_path,
                            "a non-empty array of strings (required by list-type map)",
                            keys,
                        ))
                    }
                }
            }
            _ => return Err(self.malformed(&lt_path, "one of atomic, set, map", lt)),
        })
    }
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

// ---------------------------------------------------------------------------------------------
// Validation

#[derive(Default)]
struct Validator {
    out: Vec<Violation>,
    path: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Special {
    None,
    Root,
    Embedded,
}

impl Validator {
    fn report(&mut self, message: String) {
        self.out.push(Violation {
            path: self.path.clone(),
            message,
        });
    }

    fn report_at(&mut self, field: &str, message: String) {
        let len = self.push_field(field);
        self.report(message);
        self.path.truncate(len);
    }

    fn push_field(&mut self, field: &str) -> usize {
        let len = self.path.len();
        if len > 0 {
            self.path.push('.');
        }
        self.path.push_str(field);
        len
    }

    fn push_key(&mut self, key: &str) -> usize {
        let len = self.path.len();
        self.path.push('[');
        self.path.push_str(key);
        self.path.push(']');
        len
    }

    fn push_index(&mut self, i: usize) -> usize {
        use std::fmt::Write as _;
        let len = self.path.len();
        // Writing to a String cannot fail.
        let _ = write!(self.path, "[{i}]");
        len
    }

    /// Check a required top-level string field (`apiVersion`, `kind`) and return it.
    fn top_string<'v>(&mut self, map: &'v Map<String, Value>, field: &str) -> Option<&'v str> {
        match map.get(field) {
            Some(Value::String(s)) if !s.is_empty() => Some(s),
            Some(Value::String(_)) => {
                self.report_at(field, "must not be empty".to_string());
                None
            }
            Some(other) => {
                self.report_at(field, type_message("string", other));
                None
            }
            None => {
                self.report_at(field, "required field missing".to_string());
                None
            }
        }
    }

    /// Validate `v` against `n`. `strict` is false inside `anyOf`/`allOf`/`oneOf`/`not` branches,
    /// which constrain values but do not decide which fields exist.
    fn node(&mut self, n: &Node, v: &Value, strict: bool, root: bool) {
        if v.is_null() {
            if !n.nullable && (n.ty.is_some() || n.int_or_string) {
                self.report(format!("must be type `{}`, got null", n.expected_type()));
            }
            return;
        }
        let type_ok = if n.int_or_string {
            is_integer(v) || v.is_string()
        } else {
            n.ty.is_none_or(|t| t.accepts(v))
        };
        if !type_ok {
            self.report(type_message(n.expected_type(), v));
            return;
        }
        if let Some(allowed) = &n.enumeration {
            if !allowed.iter().any(|a| json_eq(a, v)) {
                let list: Vec<String> = allowed.iter().map(enum_item).collect();
                self.report(format!(
                    "must be one of [{}], got {}",
                    list.join(", "),
                    excerpt(v)
                ));
            }
        }
        match v {
            Value::String(s) => self.string(n, s),
            Value::Number(num) => self.number(n, num),
            Value::Array(a) => self.array(n, a, strict),
            Value::Object(m) => {
                let special = if root {
                    Special::Root
                } else if n.embedded {
                    Special::Embedded
                } else {
                    Special::None
                };
                self.object(n, m, strict, special);
            }
            Value::Null | Value::Bool(_) => {}
        }
        for branch in &n.all_of {
            self.node(branch, v, false, false);
        }
        if !n.any_of.is_empty() {
            let mut failures = Vec::new();
            for branch in &n.any_of {
                let sub = self.branch(branch, v);
                if sub.is_empty() {
                    failures.clear();
                    break;
                }
                failures.push(sub);
            }
            if !failures.is_empty() {
                let msg = self.combine(&failures);
                self.report(format!("must match at least one anyOf schema: {msg}"));
            }
        }
        if !n.one_of.is_empty() {
            let mut failures = Vec::new();
            let mut matched = 0usize;
            for branch in &n.one_of {
                let sub = self.branch(branch, v);
                if sub.is_empty() {
                    matched += 1;
                } else {
                    failures.push(sub);
                }
            }
            if matched == 0 {
                let msg = self.combine(&failures);
                self.report(format!("must match exactly one oneOf schema: {msg}"));
            } else if matched > 1 {
                self.report(format!(
                    "must match exactly one oneOf schema, matched {matched}"
                ));
            }
        }
        if let Some(not) = &n.not {
            if self.branch(not, v).is_empty() {
                self.report("must not match the `not` schema".to_string());
            }
        }
    }

    fn branch(&self, n: &Node, v: &Value) -> Vec<Violation> {
        let mut sub = Validator {
            out: Vec::new(),
            path: self.path.clone(),
        };
        sub.node(n, v, false, false);
        sub.out
    }

    /// Summarise failing branches: "[1] msg; msg2 | [2] msg".
    fn combine(&self, failures: &[Vec<Violation>]) -> String {
        failures
            .iter()
            .enumerate()
            .map(|(i, vs)| {
                let parts: Vec<String> = vs
                    .iter()
                    .map(|x| {
                        if x.path == self.path {
                            x.message.clone()
                        } else {
                            x.to_string()
                        }
                    })
                    .collect();
                format!("[{}] {}", i + 1, parts.join("; "))
            })
            .collect::<Vec<_>>()
            .join(" | ")
    }

    fn string(&mut self, n: &Node, s: &str) {
        if n.min_length.is_some() || n.max_length.is_some() {
            let len = s.chars().count() as u64;
            if let Some(min) = n.min_length {
                if len < min {
                    self.report(format!("must be at least {min} characters long, got {len}"));
                }
            }
            if let Some(max) = n.max_length {
                if len > max {
                    self.report(format!("must be at most {max} characters long, got {len}"));
                }
            }
        }
        if let Some(p) = &n.pattern {
            if !p.re.is_match(s) {
                self.report(format!(
                    "must match pattern `{}`, got {}",
                    p.text,
                    excerpt_str(s)
                ));
            }
        }
        if n.format == Format::DateTime && !is_date_time(s) {
            self.report(format!(
                "must be an RFC 3339 date-time (format date-time), got {}",
                excerpt_str(s)
            ));
        }
    }

    fn number(&mut self, n: &Node, num: &Number) {
        match n.format {
            Format::Int32 if is_integer_number(num) => {
                let fits = num.as_i64().is_some_and(|x| i32::try_from(x).is_ok());
                if !fits {
                    self.report(format!(
                        "must fit in a 32-bit signed integer (format int32), got {num}"
                    ));
                }
            }
            Format::Int64 if is_integer_number(num) && num.as_i64().is_none() => {
                self.report(format!(
                    "must fit in a 64-bit signed integer (format int64), got {num}"
                ));
            }
            _ => {}
        }
        let Some(x) = num.as_f64() else { return };
        if let Some(b) = &n.minimum {
            if b.exclusive && x <= b.value {
                self.report(format!("must be > {}, got {num}", b.shown));
            } else if !b.exclusive && x < b.value {
                self.report(format!("must be >= {}, got {num}", b.shown));
            }
        }
        if let Some(b) = &n.maximum {
            if b.exclusive && x >= b.value {
                self.report(format!("must be < {}, got {num}", b.shown));
            } else if !b.exclusive && x > b.value {
                self.report(format!("must be <= {}, got {num}", b.shown));
            }
        }
    }

    fn array(&mut self, n: &Node, a: &[Value], strict: bool) {
        let len = a.len() as u64;
        if let Some(min) = n.min_items {
            if len < min {
                self.report(format!("must have at least {min} items, got {len}"));
            }
        }
        if let Some(max) = n.max_items {
            if len > max {
                self.report(format!("must have at most {max} items, got {len}"));
            }
        }
        if let Some(items) = &n.items {
            for (i, item) in a.iter().enumerate() {
                let saved = self.push_index(i);
                self.node(items, item, strict, false);
                self.path.truncate(saved);
            }
        }
        match &n.list_type {
            ListType::Set => self.unique(a, "duplicate entry in list of type set"),
            ListType::Map(keys) => self.unique_map_keys(a, keys),
            ListType::Atomic if n.unique_items => self.unique(a, "duplicate item (uniqueItems)"),
            ListType::Atomic => {}
        }
    }

    fn unique(&mut self, a: &[Value], what: &str) {
        for (i, item) in a.iter().enumerate() {
            if let Some(j) = a[..i].iter().position(|prev| json_eq(prev, item)) {
                let saved = self.push_index(i);
                self.report(format!("{what} (same as [{j}]): {}", excerpt(item)));
                self.path.truncate(saved);
            }
        }
    }

    fn unique_map_keys(&mut self, a: &[Value], keys: &[String]) {
        let key_of = |item: &Value| -> Option<Vec<Option<Value>>> {
            let m = item.as_object()?;
            Some(keys.iter().map(|k| m.get(k).cloned()).collect())
        };
        let tuples: Vec<Option<Vec<Option<Value>>>> = a.iter().map(key_of).collect();
        for (i, t) in tuples.iter().enumerate() {
            let Some(t) = t else { continue };
            let dup = tuples[..i].iter().position(|prev| {
                prev.as_ref().is_some_and(|p| {
                    p.iter().zip(t.iter()).all(|(x, y)| match (x, y) {
                        (Some(x), Some(y)) => json_eq(x, y),
                        (None, None) => true,
                        _ => false,
                    })
                })
            });
            if let Some(j) = dup {
                let shown: Vec<String> = keys
                    .iter()
                    .zip(t.iter())
                    .map(|(k, v)| match v {
                        Some(v) => format!("{k}={}", excerpt(v)),
                        None => format!("{k}=<absent>"),
                    })
                    .collect();
                let saved = self.push_index(i);
                self.report(format!(
                    "duplicate entry in list of type map for keys ({}) (same as [{j}])",
                    shown.join(", ")
                ));
                self.path.truncate(saved);
            }
        }
    }

    fn object(&mut self, n: &Node, m: &Map<String, Value>, strict: bool, special: Special) {
        let len = m.len() as u64;
        if let Some(min) = n.min_properties {
            if len < min {
                self.report(format!("must have at least {min} properties, got {len}"));
            }
        }
        if let Some(max) = n.max_properties {
            if len > max {
                self.report(format!("must have at most {max} properties, got {len}"));
            }
        }
        for r in &n.required {
            let handled_by_caller = special == Special::Root
                && matches!(r.as_str(), "apiVersion" | "kind" | "metadata");
            if !m.contains_key(r) && !handled_by_caller {
                self.report_at(r, "required field missing".to_string());
            }
        }
        if special == Special::Embedded {
            for r in ["apiVersion", "kind"] {
                if !m.contains_key(r) && !n.required.iter().any(|x| x == r) {
                    self.report_at(r, "required field missing".to_string());
                }
            }
        }
        let prunes = strict
            && !n.preserve_unknown
            && (n.ty == Some(Ty::Object)
                || n.properties.is_some()
                || !matches!(n.additional, Additional::Unspecified));
        for (k, child) in m {
            let declared = n.properties.as_ref().and_then(|p| p.get(k));
            match (special, k.as_str()) {
                (Special::Root, "apiVersion" | "kind") => continue,
                (Special::Root | Special::Embedded, "metadata") => {
                    let saved = self.push_field(k);
                    self.object_meta(child, special == Special::Root);
                    self.path.truncate(saved);
                    continue;
                }
                (Special::Embedded, "apiVersion" | "kind") if declared.is_none() => {
                    if !child.is_string() {
                        self.report_at(k, type_message("string", child));
                    }
                    continue;
                }
                _ => {}
            }
            if let Some(cn) = declared {
                let saved = self.push_field(k);
                self.node(cn, child, strict, false);
                self.path.truncate(saved);
                continue;
            }
            match &n.additional {
                Additional::Schema(s) => {
                    let saved = self.push_key(k);
                    self.node(s, child, strict, false);
                    self.path.truncate(saved);
                }
                Additional::Allow => {}
                Additional::Deny | Additional::Unspecified => {
                    if prunes {
                        self.report_at(k, "unknown field".to_string());
                    }
                }
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // ObjectMeta

    fn object_meta(&mut self, v: &Value, name_required: bool) {
        let Some(m) = v.as_object() else {
            self.report(type_message("object", v));
            return;
        };
        if name_required && !m.contains_key("name") {
            self.report_at("name", "required field missing".to_string());
        }
        for (k, val) in m {
            let saved = self.push_field(k);
            match k.as_str() {
                "name" => {
                    if let Some(s) = self.expect_str(val) {
                        if !is_dns1123_subdomain(s) {
                            self.report(format!("must be a DNS-1123 subdomain (lowercase alphanumerics, '-' or '.', starting and ending with an alphanumeric, at most 253 characters), got {}", excerpt_str(s)));
                        }
                    }
                }
                "namespace" => {
                    if let Some(s) = self.expect_str(val) {
                        if !is_dns1123_label(s) {
                            self.report(format!("must be a DNS-1123 label (lowercase alphanumerics or '-', starting and ending with an alphanumeric, at most 63 characters), got {}", excerpt_str(s)));
                        }
                    }
                }
                "labels" => self.string_map(val, true),
                "annotations" => self.string_map(val, false),
                "generateName" | "uid" | "resourceVersion" | "selfLink" => {
                    self.expect_str(val);
                }
                "generation" | "deletionGracePeriodSeconds" => {
                    if !is_integer(val) {
                        self.report(type_message("integer", val));
                    }
                }
                "creationTimestamp" | "deletionTimestamp" => match val {
                    Value::Null => {}
                    Value::String(s) if is_date_time(s) => {}
                    Value::String(s) => self.report(format!(
                        "must be an RFC 3339 date-time, got {}",
                        excerpt_str(s)
                    )),
                    other => self.report(type_message("string", other)),
                },
                "finalizers" => self.finalizers(val),
                "ownerReferences" => self.owner_references(val),
                "managedFields" => match val {
                    Value::Array(a) => {
                        for (i, e) in a.iter().enumerate() {
                            if !e.is_object() {
                                let s = self.push_index(i);
                                self.report(type_message("object", e));
                                self.path.truncate(s);
                            }
                        }
                    }
                    other => self.report(type_message("array", other)),
                },
                _ => self.report("unknown field".to_string()),
            }
            self.path.truncate(saved);
        }
    }

    fn expect_str<'v>(&mut self, v: &'v Value) -> Option<&'v str> {
        match v {
            Value::String(s) => Some(s),
            other => {
                self.report(type_message("string", other));
                None
            }
        }
    }

    fn string_map(&mut self, v: &Value, labels: bool) {
        let Some(m) = v.as_object() else {
            self.report(type_message("object", v));
            return;
        };
        let mut total = 0usize;
        for (k, val) in m {
            let saved = self.push_key(k);
            let key_ok = if labels {
                is_qualified_name(k)
            } else {
                is_qualified_name(&k.to_ascii_lowercase())
            };
            if !key_ok {
                self.report(format!("{} key must be a qualified name (optional DNS-1123 subdomain prefix and '/', then at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric), got {}", if labels { "label" } else { "annotation" }, excerpt_str(k)));
            }
            if let Some(s) = self.expect_str(val) {
                total += k.len() + s.len();
                if labels && !is_label_value(s) {
                    self.report(format!("label value must be empty or at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric, got {}", excerpt_str(s)));
                }
            }
            self.path.truncate(saved);
        }
        if !labels && total > MAX_ANNOTATIONS_BYTES {
            self.report(format!(
                "annotations must total at most {MAX_ANNOTATIONS_BYTES} bytes, got {total}"
            ));
        }
    }

    fn finalizers(&mut self, v: &Value) {
        let Some(a) = v.as_array() else {
            self.report(type_message("array", v));
            return;
        };
        for (i, f) in a.iter().enumerate() {
            let saved = self.push_index(i);
            if let Some(s) = self.expect_str(f) {
                if !is_qualified_name(s) {
                    self.report(format!(
                        "finalizer must be a qualified name, got {}",
                        excerpt_str(s)
                    ));
                }
            }
            self.path.truncate(saved);
        }
    }

    fn owner_references(&mut self, v: &Value) {
        let Some(a) = v.as_array() else {
            self.report(type_message("array", v));
            return;
        };
        for (i, r) in a.iter().enumerate() {
            let saved = self.push_index(i);
            match r.as_object() {
                None => self.report(type_message("object", r)),
                Some(m) => {
                    for req in ["apiVersion", "kind", "name", "uid"] {
                        if !m.contains_key(req) {
                            self.report_at(req, "required field missing".to_string());
                        }
                    }
                    for (k, val) in m {
                        let s = self.push_field(k);
                        match k.as_str() {
                            "apiVersion" | "kind" | "name" | "uid" => {
                                self.expect_str(val);
                            }
                            "controller" | "blockOwnerDeletion" => {
                                if !val.is_boolean() {
                                    self.report(type_message("boolean", val));
                                }
                            }
                            _ => self.report("unknown field".to_string()),
                        }
                        self.path.truncate(s);
                    }
                }
            }
            self.path.truncate(saved);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Value helpers

fn is_integer_number(n: &Number) -> bool {
    n.is_i64() || n.is_u64()
}

fn is_integer(v: &Value) -> bool {
    matches!(v, Value::Number(n) if is_integer_number(n))
}

/// JSON equality where numbers compare by value (`1` equals `1.0`).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if is_integer_number(x) && is_integer_number(y) {
                x == y
            } else {
                x.as_f64() == y.as_f64()
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, p)| y.get(k).is_some_and(|q| json_eq(p, q)))
        }
        _ => a == b,
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if is_integer_number(n) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_message(expected: &str, v: &Value) -> String {
    format!("must be type `{expected}`, got {}", describe(v))
}

/// "string \"abc\"", "integer 5", "null", "object".
fn describe(v: &Value) -> String {
    match v {
        Value::Null | Value::Array(_) | Value::Object(_) => json_kind(v).to_string(),
        _ => format!("{} {}", json_kind(v), excerpt(v)),
    }
}

fn describe_opt(v: Option<&Value>) -> String {
    v.map_or_else(|| "nothing".to_string(), describe)
}

/// Compact JSON for a message, truncated.
fn excerpt(v: &Value) -> String {
    match v {
        Value::String(s) => excerpt_str(s),
        Value::Array(_) | Value::Object(_) => {
            let s = serde_json::to_string(v).unwrap_or_else(|_| json_kind(v).to_string());
            truncate(&s)
        }
        other => other.to_string(),
    }
}

fn excerpt_str(s: &str) -> String {
    let quoted = serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"));
    truncate(&quoted)
}

fn truncate(s: &str) -> String {
    if s.chars().count() <= MAX_EXCERPT {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(MAX_EXCERPT).collect();
        t.push('…');
        t
    }
}

fn enum_item(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => excerpt(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // -----------------------------------------------------------------------------------------
    // Helpers for inline schemas

    fn crd(group: &str, kind: &str, versions: Value) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{}s.{group}", kind.to_lowercase())},
            "spec": {
                "group": group,
                "names": {"kind": kind, "plural": format!("{}s", kind.to_lowercase())},
                "scope": "Namespaced",
                "versions": versions,
            }
        })
    }

    fn root_schema(spec: Value) -> Value {
        json!({
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": spec,
            }
        })
    }

    /// A set with one CRD `Widget` in `example.com/v1` whose `spec` has the given schema.
    fn widget_set(spec: Value) -> CrdSet {
        let doc = crd(
            "example.com",
            "Widget",
            json!([{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": root_schema(spec)}}]),
        );
        CrdSet::from_documents(vec![("widget.yaml".into(), doc)]).unwrap()
    }

    fn widget(spec: Value) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": "w1", "namespace": "ns"}, "spec": spec})
    }

    /// Violations of `spec` against a spec schema, as "path: message" strings.
    fn check(schema: Value, spec: Value) -> Vec<String> {
        widget_set(schema)
            .validate(&widget(spec))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn load_err(schema: Value) -> SchemaError {
        let doc = crd(
            "example.com",
            "Widget",
            json!([{"name": "v1", "served": true, "schema": {"openAPIV3Schema": schema}}]),
        );
        CrdSet::from_documents(vec![("bad.yaml".into(), doc)]).unwrap_err()
    }

    // -----------------------------------------------------------------------------------------
    // Keywords

    #[test]
    fn type_checks_each_type() {
        let schema = json!({"type": "object", "properties": {
            "s": {"type": "string"}, "i": {"type": "integer"}, "n": {"type": "number"},
            "b": {"type": "boolean"}, "a": {"type": "array"}, "o": {"type": "object"}}});
        let ok = json!({"s": "x", "i": 3, "n": 1.5, "b": false, "a": [], "o": {}});
        assert!(check(schema.clone(), ok).is_empty());
        let bad = json!({"s": 1, "i": "3", "n": "1", "b": "true", "a": {}, "o": []});
        assert_eq!(
            check(schema, bad),
            vec![
                "spec.s: must be type `string`, got integer 1",
                "spec.i: must be type `integer`, got string \"3\"",
                "spec.n: must be type `number`, got string \"1\"",
                "spec.b: must be type `boolean`, got string \"true\"",
                "spec.a: must be type `array`, got object",
                "spec.o: must be type `object`, got array",
            ]
        );
    }

    #[test]
    fn integer_is_strict_and_number_accepts_both() {
        let schema = json!({"type": "object", "properties": {
            "i": {"type": "integer"}, "j": {"type": "integer"}, "n": {"type": "number"}, "m": {"type": "number"}}});
        assert_eq!(
            check(schema, json!({"i": 1.5, "j": 1.0, "n": 2, "m": 2.5})),
            vec![
                "spec.i: must be type `integer`, got number 1.5",
                "spec.j: must be type `integer`, got number 1.0",
            ]
        );
    }

    #[test]
    fn null_needs_nullable() {
        let schema = json!({"type": "object", "properties": {
            "s": {"type": "string"}, "t": {"type": "string", "nullable": true},
            "u": {"x-kubernetes-preserve-unknown-fields": true}}});
        assert_eq!(
            check(schema, json!({"s": null, "t": null, "u": null})),
            vec!["spec.s: must be type `string`, got null"]
        );
    }

    #[test]
    fn int32_and_int64_ranges() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "integer", "format": "int32"}, "b": {"type": "integer", "format": "int32"},
            "c": {"type": "integer", "format": "int64"}, "d": {"type": "integer", "format": "int64"},
            "e": {"type": "integer", "format": "int32"}, "f": {"type": "string", "format": "hostname"}}});
        let spec = json!({"a": 2147483647, "b": 2147483648u64, "c": 9223372036854775807i64,
                          "d": 9223372036854775808u64, "e": -2147483649i64, "f": "not checked!"});
        assert_eq!(
            check(schema, spec),
            vec![
                "spec.b: must fit in a 32-bit signed integer (format int32), got 2147483648",
                "spec.d: must fit in a 64-bit signed integer (format int64), got 9223372036854775808",
                "spec.e: must fit in a 32-bit signed integer (format int32), got -2147483649",
            ]
        );
    }

    #[test]
    fn date_time_format() {
        let schema = json!({"type": "object", "properties": {"t": {
            "type": "array", "items": {"type": "string", "format": "date-time"}}}});
        let good = json!({"t": ["2024-01-02T03:04:05Z", "2024-01-02T03:04:05.123+02:00", "2024-12-31t23:59:60z"]});
        assert!(check(schema.clone(), good).is_empty());
        let bad = json!({"t": ["2024-01-02", "2024-13-02T03:04:05Z", "2024-01-02T03:04:05", "2024-01-02T03:04:05.Z", "2024-01-02T03:04:05+0200", "x"]});
        let v = check(schema, bad);
        assert_eq!(v.len(), 6, "{v:?}");
        assert!(v[0].starts_with(
            "spec.t[0]: must be an RFC 3339 date-time (format date-time), got \"2024-01-02\""
        ));
        assert!(v[5].starts_with("spec.t[5]: "));
    }

    #[test]
    fn int_or_string_with_any_of_and_pattern() {
        let schema = json!({"type": "object", "properties": {"q": {"type": "array", "items": {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": "^[0-9]+(Mi|Gi)?$",
            "x-kubernetes-int-or-string": true}}}});
        assert!(check(schema.clone(), json!({"q": [1, "2Gi", -5]})).is_empty());
        assert_eq!(
            check(schema, json!({"q": [true, 1.5, "lots", null]})),
            vec![
                "spec.q[0]: must be type `integer` or `string`, got boolean true",
                "spec.q[1]: must be type `integer` or `string`, got number 1.5",
                "spec.q[2]: must match pattern `^[0-9]+(Mi|Gi)?$`, got \"lots\"",
                "spec.q[3]: must be type `integer` or `string`, got null",
            ]
        );
    }

    #[test]
    fn any_of_reports_combined_message() {
        let schema = json!({"type": "object", "properties": {"x": {
            "anyOf": [{"type": "integer", "minimum": 10}, {"type": "string", "maxLength": 2}]}}});
        assert!(check(schema.clone(), json!({"x": 11})).is_empty());
        assert!(check(schema.clone(), json!({"x": "ab"})).is_empty());
        assert_eq!(
            check(schema, json!({"x": 3})),
            vec!["spec.x: must match at least one anyOf schema: [1] must be >= 10, got 3 | [2] must be type `string`, got integer 3"]
        );
    }

    #[test]
    fn all_of_one_of_not() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "integer", "allOf": [{"minimum": 1}, {"maximum": 5}]},
            "o": {"type": "integer", "oneOf": [{"minimum": 0}, {"maximum": 10}]},
            "n": {"type": "string", "not": {"enum": ["forbidden"]}}}});
        assert!(check(schema.clone(), json!({"a": 3, "o": 20, "n": "fine"})).is_empty());
        assert_eq!(
            check(schema, json!({"a": 9, "o": 5, "n": "forbidden"})),
            vec![
                "spec.a: must be <= 5, got 9",
                "spec.o: must match exactly one oneOf schema, matched 2",
                "spec.n: must not match the `not` schema",
            ]
        );
    }

    #[test]
    fn branches_do_not_report_unknown_fields() {
        let schema = json!({"type": "object", "properties": {"x": {"type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
            "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}}});
        assert!(check(schema.clone(), json!({"x": {"b": "1"}})).is_empty());
        assert_eq!(
            check(schema, json!({"x": {}})),
            vec!["spec.x: must match at least one anyOf schema: [1] spec.x.a: required field missing | [2] spec.x.b: required field missing"]
        );
    }

    #[test]
    fn enum_lists_allowed_values() {
        let schema = json!({"type": "object", "properties": {
            "m": {"type": "string", "enum": ["fullClone", "linkedClone"]},
            "k": {"type": "integer", "enum": [1, 2]}}});
        assert!(check(schema.clone(), json!({"m": "linkedClone", "k": 2})).is_empty());
        assert_eq!(
            check(schema, json!({"m": "linked", "k": 3})),
            vec![
                "spec.m: must be one of [fullClone, linkedClone], got \"linked\"",
                "spec.k: must be one of [1, 2], got 3",
            ]
        );
    }

    #[test]
    fn pattern_is_unanchored_like_re2_and_shared() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "string", "pattern": "b+"},
            "c": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?\\/[a-z]+$"},
            "d": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?\\/[a-z]+$"}}});
        assert!(check(
            schema.clone(),
            json!({"a": "abba", "c": "x-1/y", "d": "q/r"})
        )
        .is_empty());
        assert_eq!(
            check(schema.clone(), json!({"a": "aaa", "c": "X/y"})),
            vec![
                "spec.a: must match pattern `b+`, got \"aaa\"",
                "spec.c: must match pattern `^[a-z0-9]([-a-z0-9]*[a-z0-9])?\\/[a-z]+$`, got \"X/y\"",
            ]
        );
        // Identical patterns share one compiled regex.
        let set = widget_set(schema);
        let entry = &set.by_kind["Widget"][0];
        let props = entry.root.properties.as_ref().unwrap()["spec"]
            .properties
            .as_ref()
            .unwrap();
        let (c, d) = (
            props["c"].pattern.as_ref().unwrap(),
            props["d"].pattern.as_ref().unwrap(),
        );
        assert!(Arc::ptr_eq(&c.re, &d.re));
    }

    #[test]
    fn bad_pattern_is_a_load_error_naming_source_and_path() {
        let err = load_err(root_schema(json!({"type": "object", "properties": {
            "a": {"type": "string", "pattern": "([a-z"}}})));
        assert!(matches!(err, SchemaError::BadPattern { .. }));
        let text = err.to_string();
        assert!(text.starts_with("bad.yaml: spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.a.pattern: pattern `([a-z` does not compile"), "{text}");
    }

    #[test]
    fn lengths_count_characters() {
        let schema = json!({"type": "object", "properties": {
            "s": {"type": "string", "minLength": 2, "maxLength": 3}}});
        assert!(check(schema.clone(), json!({"s": "éé"})).is_empty());
        assert!(check(schema.clone(), json!({"s": "ééé"})).is_empty());
        assert_eq!(
            check(schema.clone(), json!({"s": "é"})),
            vec!["spec.s: must be at least 2 characters long, got 1"]
        );
        assert_eq!(
            check(schema, json!({"s": "éééé"})),
            vec!["spec.s: must be at most 3 characters long, got 4"]
        );
    }

    #[test]
    fn minimum_maximum_inclusive_and_exclusive() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "integer", "minimum": 2, "maximum": 4},
            "b": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 1.5, "exclusiveMaximum": true}}});
        assert!(check(schema.clone(), json!({"a": 2, "b": 1.2})).is_empty());
        assert!(check(schema.clone(), json!({"a": 4, "b": 0.1})).is_empty());
        assert_eq!(
            check(schema.clone(), json!({"a": 1, "b": 0})),
            vec!["spec.a: must be >= 2, got 1", "spec.b: must be > 0, got 0"]
        );
        assert_eq!(
            check(schema, json!({"a": 5, "b": 1.5})),
            vec![
                "spec.a: must be <= 4, got 5",
                "spec.b: must be < 1.5, got 1.5"
            ]
        );
    }

    #[test]
    fn item_and_property_counts() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string"}},
            "o": {"type": "object", "minProperties": 1, "maxProperties": 1,
                  "additionalProperties": {"type": "string"}}}});
        assert!(check(schema.clone(), json!({"a": ["x"], "o": {"k": "v"}})).is_empty());
        assert_eq!(
            check(schema.clone(), json!({"a": [], "o": {}})),
            vec![
                "spec.a: must have at least 1 items, got 0",
                "spec.o: must have at least 1 properties, got 0"
            ]
        );
        assert_eq!(
            check(schema, json!({"a": ["x", "y", 3], "o": {"k": "v", "l": 1}})),
            vec![
                "spec.a: must have at most 2 items, got 3",
                "spec.a[2]: must be type `string`, got integer 3",
                "spec.o: must have at most 1 properties, got 2",
                "spec.o[l]: must be type `string`, got integer 1",
            ]
        );
    }

    #[test]
    fn required_fields() {
        let schema = json!({"type": "object", "required": ["clusterName", "x"], "properties": {
            "clusterName": {"type": "string"}, "x": {"type": "string", "nullable": true}}});
        assert!(check(schema.clone(), json!({"clusterName": "c", "x": null})).is_empty());
        assert_eq!(
            check(schema, json!({})),
            vec![
                "spec.clusterName: required field missing",
                "spec.x: required field missing"
            ]
        );
    }

    #[test]
    fn unknown_fields_and_additional_properties() {
        let schema = json!({"type": "object", "properties": {
            "strict": {"type": "object", "properties": {"a": {"type": "string"}}},
            "denied": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": false},
            "open": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": true},
            "map": {"type": "object", "additionalProperties": {"type": "integer"}},
            "pruned": {"type": "object"}}});
        let spec = json!({
            "strict": {"a": "x", "foo": 1},
            "denied": {"bar": 1},
            "open": {"a": "x", "anything": {"goes": true}},
            "map": {"one": 1, "two.x/y": "2"},
            "pruned": {"gone": 1},
            "top": true});
        assert_eq!(
            check(schema, spec),
            vec![
                "spec.strict.foo: unknown field",
                "spec.denied.bar: unknown field",
                "spec.map[two.x/y]: must be type `integer`, got string \"2\"",
                "spec.pruned.gone: unknown field",
                "spec.top: unknown field",
            ]
        );
    }

    #[test]
    fn preserve_unknown_fields_still_checks_declared_properties() {
        let schema = json!({"type": "object", "properties": {
            "p": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                  "properties": {"n": {"type": "integer"}, "child": {"type": "object", "properties": {"a": {"type": "string"}}}}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}});
        let spec = json!({"p": {"n": "no", "whatever": {"deep": [1, 2]}, "child": {"a": "x", "b": 1}},
                          "free": {"x": {"y": null}}});
        assert_eq!(
            check(schema, spec),
            vec![
                "spec.p.n: must be type `integer`, got string \"no\"",
                "spec.p.child.b: unknown field",
            ]
        );
    }

    #[test]
    fn nested_array_paths() {
        let schema = json!({"type": "object", "properties": {"network": {"type": "object", "properties": {
            "devices": {"type": "array", "items": {"type": "object", "required": ["networkName"],
                "properties": {"networkName": {"type": "string", "minLength": 1}, "dhcp4": {"type": "boolean"}}}}}}}});
        assert_eq!(
            check(
                schema,
                json!({"network": {"devices": [{"networkName": "a"}, {"dhcp4": "yes", "networkName": ""}, {"dhcp4": true}]}})
            ),
            vec![
                "spec.network.devices[1].dhcp4: must be type `boolean`, got string \"yes\"",
                "spec.network.devices[1].networkName: must be at least 1 characters long, got 0",
                "spec.network.devices[2].networkName: required field missing",
            ]
        );
    }

    #[test]
    fn list_type_set_and_unique_items() {
        let schema = json!({"type": "object", "properties": {
            "s": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
            "u": {"type": "array", "items": {"type": "integer"}, "uniqueItems": true},
            "a": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "atomic"}}});
        assert!(check(
            schema.clone(),
            json!({"s": ["a", "b"], "u": [1, 2], "a": ["x", "x"]})
        )
        .is_empty());
        assert_eq!(
            check(schema, json!({"s": ["a", "b", "a"], "u": [1, 1], "a": []})),
            vec![
                "spec.s[2]: duplicate entry in list of type set (same as [0]): \"a\"",
                "spec.u[1]: duplicate item (uniqueItems) (same as [0]): 1",
            ]
        );
    }

    #[test]
    fn list_type_map_keys_unique() {
        let schema = json!({"type": "object", "properties": {"taints": {"type": "array",
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["key", "effect"],
            "items": {"type": "object", "properties": {"key": {"type": "string"}, "effect": {"type": "string"}, "value": {"type": "string"}}}}}});
        let ok = json!({"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoExecute"}]});
        assert!(check(schema.clone(), ok).is_empty());
        let bad = json!({"taints": [{"key": "a", "effect": "NoSchedule", "value": "1"}, {"key": "b", "effect": "NoSchedule"},
                                    {"key": "a", "effect": "NoSchedule", "value": "2"}]});
        assert_eq!(
            check(schema, bad),
            vec!["spec.taints[2]: duplicate entry in list of type map for keys (key=\"a\", effect=\"NoSchedule\") (same as [0])"]
        );
    }

    #[test]
    fn list_type_map_without_keys_is_a_load_error() {
        let err = load_err(root_schema(
            json!({"type": "array", "x-kubernetes-list-type": "map", "items": {"type": "object"}}),
        ));
        assert!(err.to_string().contains("openAPIV3Schema.properties.spec.x-kubernetes-list-map-keys: expected a non-empty array of strings"), "{err}");
    }

    #[test]
    fn embedded_resource() {
        let schema = json!({"type": "object", "properties": {"obj": {"type": "object",
            "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}}});
        let ok = json!({"obj": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}}});
        assert!(check(schema.clone(), ok).is_empty());
        assert_eq!(
            check(
                schema,
                json!({"obj": {"kind": 3, "metadata": {"labels": {"a": 1}}}})
            ),
            vec![
                "spec.obj.apiVersion: required field missing",
                "spec.obj.kind: must be type `string`, got integer 3",
                "spec.obj.metadata.labels[a]: must be type `string`, got integer 1",
            ]
        );
    }

    // -----------------------------------------------------------------------------------------
    // Top level and ObjectMeta

    fn meta_violations(metadata: Value) -> Vec<String> {
        let set = widget_set(json!({"type": "object"}));
        let mut obj = widget(json!({}));
        obj["metadata"] = metadata;
        set.validate(&obj).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn metadata_standard_fields_accepted() {
        let meta = json!({"name": "a.b-c", "namespace": "kube-system", "generateName": "a-",
            "uid": "123", "resourceVersion": "7", "generation": 2, "creationTimestamp": null,
            "deletionTimestamp": "2024-01-01T00:00:00Z", "finalizers": ["example.com/cleanup"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "u", "controller": true}],
            "managedFields": [{"manager": "kubectl"}],
            "labels": {"app.kubernetes.io/name": "x", "tier": "", "a_b.c": "V-1"},
            "annotations": {"Example.COM/Note": "any text at all: {}\n"}});
        assert!(meta_violations(meta).is_empty());
    }

    #[test]
    fn metadata_violations() {
        let long = "a".repeat(64);
        let meta = json!({"namespace": "Bad_NS", "labels": {"ok": "yes", "bad key!": "v", long.clone(): "v", "k": "-bad", "n": 5},
            "annotations": {"x": 1}, "color": "blue", "generation": "1", "ownerReferences": [{"kind": "K", "extra": 1}]});
        let v = meta_violations(meta);
        let expected_prefixes = [
            "metadata.name: required field missing",
            "metadata.namespace: must be a DNS-1123 label",
            "metadata.labels[bad key!]: label key must be a qualified name",
            &format!("metadata.labels[{long}]: label key must be a qualified name"),
            "metadata.labels[k]: label value must be empty or at most 63",
            "metadata.labels[n]: must be type `string`, got integer 5",
            "metadata.annotations[x]: must be type `string`, got integer 1",
            "metadata.color: unknown field",
            "metadata.generation: must be type `integer`, got string \"1\"",
            "metadata.ownerReferences[0].apiVersion: required field missing",
            "metadata.ownerReferences[0].name: required field missing",
            "metadata.ownerReferences[0].uid: required field missing",
            "metadata.ownerReferences[0].extra: unknown field",
        ];
        assert_eq!(v.len(), expected_prefixes.len(), "{v:#?}");
        for (got, want) in v.iter().zip(expected_prefixes) {
            assert!(got.starts_with(want), "{got:?} should start with {want:?}");
        }
    }

    #[test]
    fn metadata_name_syntax() {
        for bad in [
            "Upper",
            "-lead",
            "trail-",
            "a..b",
            "",
            "under_score",
            &"a".repeat(254),
        ] {
            let v = meta_violations(json!({"name": bad}));
            assert_eq!(v.len(), 1, "{bad:?}: {v:?}");
            assert!(
                v[0].starts_with("metadata.name: must be a DNS-1123 subdomain"),
                "{v:?}"
            );
        }
        for good in ["a", "a.b", "a-b.c-d", "0", &"a".repeat(63)] {
            assert!(
                meta_violations(json!({"name": good})).is_empty(),
                "{good:?}"
            );
        }
        assert_eq!(
            meta_violations(json!({"name": 3})),
            vec!["metadata.name: must be type `string`, got integer 3"]
        );
        assert_eq!(
            meta_violations(json!("x")),
            vec!["metadata: must be type `object`, got string \"x\""]
        );
        assert_eq!(
            meta_violations(json!({"name": "a", "namespace": "a.b"})).len(),
            1
        );
    }

    #[test]
    fn annotations_total_size_limit() {
        let big = "x".repeat(MAX_ANNOTATIONS_BYTES);
        let v = meta_violations(json!({"name": "a", "annotations": {"k": big}}));
        assert_eq!(
            v,
            vec![format!(
                "metadata.annotations: annotations must total at most 262144 bytes, got {}",
                MAX_ANNOTATIONS_BYTES + 1
            )]
        );
    }

    #[test]
    fn metadata_checked_even_without_metadata_in_schema() {
        let doc = crd(
            "example.com",
            "Bare",
            json!([{"name": "v1", "served": true,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"}}}}}]),
        );
        let set = CrdSet::from_documents(vec![("bare.yaml".into(), doc)]).unwrap();
        let v = set.validate(&json!({"apiVersion": "example.com/v1", "kind": "Bare", "metadata": {"name": "X"}, "spec": {}}));
        let v: Vec<String> = v.iter().map(ToString::to_string).collect();
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].starts_with("metadata.name: must be a DNS-1123 subdomain"));
        assert_eq!(v[1], "spec: unknown field");
    }

    #[test]
    fn top_level_api_version_and_kind() {
        let set = widget_set(json!({"type": "object"}));
        let strs =
            |v: Vec<Violation>| -> Vec<String> { v.iter().map(ToString::to_string).collect() };
        assert_eq!(
            strs(set.validate(&json!([]))),
            vec!["<root>: must be type `object`, got array"]
        );
        assert_eq!(
            strs(set.validate(&json!({"apiVersion": 1, "metadata": {"name": "a"}}))),
            vec![
                "apiVersion: must be type `string`, got integer 1",
                "kind: required field missing"
            ]
        );
        assert_eq!(
            strs(set.validate(
                &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}})
            )),
            vec!["apiVersion: no CRD schema for kind `Secret` in apiVersion `v1`"]
        );
        assert_eq!(
            strs(set.validate(&json!({"apiVersion": "example.com/v2", "kind": "Widget", "metadata": {"name": "a"}}))),
            vec!["apiVersion: no CRD schema for kind `Widget` in apiVersion `example.com/v2`; defined versions: [v1]"]
        );
        assert_eq!(
            strs(set.validate(&json!({"apiVersion": "example.com/v1", "kind": "Widget"}))),
            vec!["metadata: required field missing"]
        );
        assert!(set.knows("example.com/v1", "Widget"));
        assert!(!set.knows("example.com/v2", "Widget"));
        assert!(!set.knows("v1", "Secret"));
        assert!(!set.knows("example.com/v1/extra", "Widget"));
    }

    #[test]
    fn unserved_version_is_a_violation() {
        let schema = json!({"openAPIV3Schema": root_schema(json!({"type": "object"}))});
        let doc = crd(
            "example.com",
            "Widget",
            json!([
            {"name": "v1alpha1", "served": false, "storage": false, "schema": schema.clone()},
            {"name": "v1", "served": true, "storage": true, "schema": schema}]),
        );
        let set = CrdSet::from_documents(vec![("w.yaml".into(), doc)]).unwrap();
        assert_eq!(set.len(), 2);
        assert!(!set.is_empty());
        assert!(set.knows("example.com/v1alpha1", "Widget"));
        let mut obj = widget(json!({}));
        assert!(set.validate(&obj).is_empty());
        obj["apiVersion"] = json!("example.com/v1alpha1");
        assert_eq!(
            set.validate(&obj),
            vec![Violation {
                path: "apiVersion".into(),
                message:
                    "version `v1alpha1` of kind `Widget` is defined (in w.yaml) but not served"
                        .into()
            }]
        );
    }

    #[test]
    fn reports_all_violations_at_once() {
        let schema = json!({"type": "object", "required": ["need"], "properties": {
            "need": {"type": "string"}, "n": {"type": "integer", "minimum": 2}, "e": {"type": "string", "enum": ["a"]}}});
        let set = widget_set(schema);
        let mut obj = widget(json!({"n": 1, "e": "b", "x": 1}));
        obj["metadata"]["name"] = json!("Bad");
        obj["extra"] = json!(1);
        let v = set.validate(&obj);
        let paths: Vec<&str> = v.iter().map(|x| x.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "metadata.name",
                "spec.need",
                "spec.n",
                "spec.e",
                "spec.x",
                "extra"
            ]
        );
    }

    #[test]
    fn violation_display() {
        let v = Violation {
            path: "spec.a".into(),
            message: "unknown field".into(),
        };
        assert_eq!(v.to_string(), "spec.a: unknown field");
    }

    #[test]
    fn no_panic_on_odd_objects() {
        let set = widget_set(
            json!({"type": "object", "properties": {"a": {"type": "array",
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"], "items": {"type": "object"}}}}),
        );
        for obj in [
            json!(null),
            json!(1),
            json!("s"),
            json!({}),
            json!({"apiVersion": "", "kind": ""}),
            json!({"apiVersion": "/", "kind": "Widget"}),
            json!({"apiVersion": "example.com/v1", "kind": "Widget"}),
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": null, "spec": null}),
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "a"}, "spec": {"a": [1, null, {}, {}]}}),
        ] {
            let v = set.validate(&obj);
            assert!(!v.is_empty(), "{obj}");
        }
    }

    // -----------------------------------------------------------------------------------------
    // Loading

    #[test]
    fn non_crd_document_names_its_source() {
        let err = CrdSet::from_documents(vec![(
            "secrets.yaml".into(),
            json!({"apiVersion": "v1", "kind": "Secret"}),
        )])
        .unwrap_err();
        assert!(matches!(err, SchemaError::NotACrd { .. }));
        assert_eq!(err.to_string(), "secrets.yaml: expected a CustomResourceDefinition (apiVersion `apiextensions.k8s.io/v1`), found apiVersion string \"v1\", kind string \"Secret\"");
        let err = CrdSet::from_documents(vec![("list.yaml".into(), json!([1]))]).unwrap_err();
        assert_eq!(err.to_string(), "list.yaml: expected a CustomResourceDefinition (apiVersion `apiextensions.k8s.io/v1`), found array");
        let mut old = crd("example.com", "W", json!([]));
        old["apiVersion"] = json!("apiextensions.k8s.io/v1beta1");
        assert!(matches!(
            CrdSet::from_documents(vec![("old.yaml".into(), old)]),
            Err(SchemaError::NotACrd { .. })
        ));
    }

    #[test]
    fn duplicate_gvk_is_an_error() {
        let versions = json!([{"name": "v1", "served": true, "schema": {"openAPIV3Schema": {"type": "object"}}}]);
        let a = crd("example.com", "Widget", versions.clone());
        let b = crd("example.com", "Widget", versions);
        let err = CrdSet::from_documents(vec![("a.yaml".into(), a.clone()), ("b.yaml".into(), b)])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "b.yaml: Widget example.com/v1 is already defined by a.yaml"
        );
        // Same kind in another group is fine.
        let c = crd(
            "other.io",
            "Widget",
            json!([{"name": "v1", "served": true, "schema": {"openAPIV3Schema": {"type": "object"}}}]),
        );
        let set = CrdSet::from_documents(vec![("a.yaml".into(), a), ("c.yaml".into(), c)]).unwrap();
        assert_eq!(set.len(), 2);
        assert!(set.knows("other.io/v1", "Widget"));
    }

    #[test]
    fn malformed_crds_are_errors_with_paths() {
        let cases = [
            (json!({"type": "thing"}), "openAPIV3Schema.type: expected one of object, array, string, integer, number, boolean, found string \"thing\""),
            (json!({"required": "a"}), "openAPIV3Schema.required: expected an array of strings, found string \"a\""),
            (json!({"properties": {"a": {"minLength": -1}}}), "openAPIV3Schema.properties.a.minLength: expected a non-negative integer, found integer -1"),
            (json!({"properties": {"a": {"items": [{}]}}}), "openAPIV3Schema.properties.a.items: expected a schema object (tuple-form items are not supported), found array"),
            (json!({"additionalProperties": 1}), "openAPIV3Schema.additionalProperties: expected a boolean or a schema object, found integer 1"),
            (json!({"nullable": "yes"}), "openAPIV3Schema.nullable: expected a boolean, found string \"yes\""),
            (json!({"anyOf": {}}), "openAPIV3Schema.anyOf: expected an array of schemas, found object"),
            (json!({"x-kubernetes-list-type": "bag"}), "openAPIV3Schema.x-kubernetes-list-type: expected one of atomic, set, map, found string \"bag\""),
            (json!(true), "openAPIV3Schema: expected a schema object, found boolean true"),
        ];
        for (schema, want) in cases {
            let err = load_err(schema).to_string();
            assert_eq!(err, format!("bad.yaml: spec.versions[0].schema.{want}"));
        }
        let mut no_versions = crd("example.com", "W", json!([]));
        assert_eq!(
            CrdSet::from_documents(vec![("x.yaml".into(), no_versions.clone())])
                .unwrap_err()
                .to_string(),
            "x.yaml: spec.versions: expected a non-empty array, found array"
        );
        no_versions["spec"]["versions"] =
            json!([{"name": "v1", "schema": {"openAPIV3Schema": {}}}]);
        assert_eq!(
            CrdSet::from_documents(vec![("x.yaml".into(), no_versions)])
                .unwrap_err()
                .to_string(),
            "x.yaml: spec.versions[0].served: expected a boolean, found nothing"
        );
    }

    #[test]
    fn too_deep_schema_is_rejected_not_overflowed() {
        let mut schema = json!({"type": "string"});
        for _ in 0..(MAX_SCHEMA_DEPTH + 5) {
            schema = json!({"type": "object", "properties": {"a": schema}});
        }
        let err = load_err(schema);
        assert!(
            err.to_string()
                .contains("expected a schema nested at most 64 levels deep"),
            "{err}"
        );
    }

    #[test]
    fn empty_set() {
        let set = CrdSet::from_documents(Vec::new()).unwrap();
        assert!(set.is_empty());
        assert_eq!(set.len(), 0);
        assert_eq!(
            set.validate(&json!({"apiVersion": "a/b", "kind": "C"}))
                .len(),
            1
        );
    }

    /// A trimmed VSphereMachineTemplate-like CRD written as YAML, parsed like the real files.
    const MINI_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: machinetemplates.infra.example.com
spec:
  group: infra.example.com
  names: {kind: MachineTemplate, plural: machinetemplates}
  scope: Namespaced
  versions:
  - name: v1beta2
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          spec:
            type: object
            required: [template]
            properties:
              template:
                type: object
                minProperties: 1
                properties:
                  spec:
                    type: object
                    required: [template]
                    properties:
                      template: {type: string, minLength: 1, maxLength: 128}
                      thumbprint: {type: string, minLength: 1}
                      numCPUs: {type: integer, format: int32, minimum: 2}
                      cloneMode: {type: string, enum: [fullClone, linkedClone]}
                      resources:
                        type: object
                        additionalProperties:
                          anyOf: [{type: integer}, {type: string}]
                          pattern: ^[0-9]+(Mi|Gi)?$
                          x-kubernetes-int-or-string: true
                      network:
                        type: object
                        properties:
                          devices:
                            type: array
                            items:
                              type: object
                              required: [networkName]
                              properties:
                                networkName: {type: string}
                                dhcp4: {type: boolean}
                                nameservers:
                                  type: array
                                  items: {type: string}
                                  x-kubernetes-list-type: set
---
"#;

    #[test]
    fn yaml_crd_end_to_end() {
        let docs = crate::yaml::parse_stream(MINI_CRD).unwrap();
        assert_eq!(docs.len(), 1, "trailing empty document is skipped");
        let set = CrdSet::from_documents(
            docs.into_iter()
                .map(|d| ("mini.yaml".to_string(), d))
                .collect(),
        )
        .unwrap();
        let good = crate::yaml::parse_stream(
            "
apiVersion: infra.example.com/v1beta2
kind: MachineTemplate
metadata: {name: m, namespace: ns}
spec:
  template:
    spec:
      template: ubuntu
      numCPUs: 4
      cloneMode: linkedClone
      resources: {memory: 8Gi, cpu: 2}
      network:
        devices: [{networkName: vm-net, dhcp4: true, nameservers: [1.1.1.1]}]
",
        )
        .unwrap();
        assert_eq!(set.validate(&good[0]), Vec::new());
        let bad = crate::yaml::parse_stream(
            "
apiVersion: infra.example.com/v1beta2
kind: MachineTemplate
metadata: {name: m}
spec:
  template:
    spec:
      numCPUs: 1
      thumbprint: ''
      foo: bar
      cloneMode: linked
      resources: {memory: lots}
      network:
        devices: [{dhcp4: 'yes', nameservers: [a, a]}]
",
        )
        .unwrap();
        let v: Vec<String> = set
            .validate(&bad[0])
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            v,
            vec![
                "spec.template.spec.template: required field missing",
                "spec.template.spec.numCPUs: must be >= 2, got 1",
                "spec.template.spec.thumbprint: must be at least 1 characters long, got 0",
                "spec.template.spec.foo: unknown field",
                "spec.template.spec.cloneMode: must be one of [fullClone, linkedClone], got \"linked\"",
                "spec.template.spec.resources[memory]: must match pattern `^[0-9]+(Mi|Gi)?$`, got \"lots\"",
                "spec.template.spec.network.devices[0].networkName: required field missing",
                "spec.template.spec.network.devices[0].dhcp4: must be type `boolean`, got string \"yes\"",
                "spec.template.spec.network.devices[0].nameservers[1]: duplicate entry in list of type set (same as [0]): \"a\"",
            ]
        );
    }

    // -----------------------------------------------------------------------------------------
    // Real CRDs, vendored in tests/fixtures/crds (SOURCES.md there names their upstream)

    fn crds_dir() -> std::path::PathBuf {
        crate::secrets::pki::testkit::fixture_path("crds")
    }

    const BASE_FILES: [&str; 6] = [
        "cluster.x-k8s.io_clusters.yaml",
        "cluster.x-k8s.io_machinedeployments.yaml",
        "controlplane.cluster.x-k8s.io_taloscontrolplanes.yaml",
        "bootstrap.cluster.x-k8s.io_talosconfigtemplates.yaml",
        "infrastructure.cluster.x-k8s.io_vsphereclusters.yaml",
        "infrastructure.cluster.x-k8s.io_vspheremachinetemplates.yaml",
    ];
    const V1BETA2_TCP: &str =
        "cacppt-v1beta2-contract/controlplane.cluster.x-k8s.io_taloscontrolplanes.yaml";

    fn load(dir: &std::path::Path, files: &[&str]) -> Result<CrdSet, SchemaError> {
        let mut docs = Vec::new();
        for f in files {
            let text = std::fs::read_to_string(dir.join(f)).unwrap();
            for d in crate::yaml::parse_stream(&text).unwrap() {
                docs.push((f.to_string(), d));
            }
        }
        CrdSet::from_documents(docs)
    }

    fn base_set() -> CrdSet {
        load(&crds_dir(), &BASE_FILES).unwrap()
    }

    fn yaml_obj(text: &str) -> Value {
        crate::yaml::parse_stream(text).unwrap().remove(0)
    }

    fn strings(v: &[Violation]) -> Vec<String> {
        v.iter().map(ToString::to_string).collect()
    }

    const CLUSTER_V1BETA2: &str = "
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: c1, namespace: ns}
spec:
  clusterNetwork:
    pods: {cidrBlocks: [10.244.0.0/16]}
    services: {cidrBlocks: [10.96.0.0/12]}
    serviceDomain: cluster.local
  controlPlaneRef: {apiGroup: controlplane.cluster.x-k8s.io, kind: TalosControlPlane, name: c1-cp}
  infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: VSphereCluster, name: c1}
";

    const VSMT_V1BETA2: &str = "
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: VSphereMachineTemplate
metadata: {name: c1-cp, namespace: ns}
spec:
  template:
    spec:
      server: vcenter.example.com
      datacenter: dc1
      datastore: ds1
      folder: vm/c1
      resourcePool: rp1
      template: talos-1.10
      cloneMode: linkedClone
      numCPUs: 4
      memoryMiB: 8192
      diskGiB: 40
      network:
        devices:
        - {networkName: vm-net, dhcp4: true}
";

    const TCP_V1ALPHA3: &str = "
apiVersion: controlplane.cluster.x-k8s.io/v1alpha3
kind: TalosControlPlane
metadata: {name: c1-cp, namespace: ns}
spec:
  replicas: 3
  version: v1.30.0
  infrastructureTemplate: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta2, kind: VSphereMachineTemplate, name: c1-cp}
  controlPlaneConfig:
    controlplane:
      generateType: controlplane
      talosVersion: v1.10
      configPatches:
      - {op: add, path: /machine/install, value: {disk: /dev/sda}}
  rolloutStrategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1}}
";

    #[test]
    fn real_crds_load_and_count() {
        let dir = crds_dir();
        let set = load(&dir, &BASE_FILES).unwrap();
        // Cluster, MachineDeployment, VSphereCluster, VSphereMachineTemplate, TalosConfigTemplate: 2 versions each; TCP: 1.
        assert_eq!(set.len(), 11);
        assert!(set.knows("cluster.x-k8s.io/v1beta1", "Cluster"));
        assert!(set.knows(
            "controlplane.cluster.x-k8s.io/v1alpha3",
            "TalosControlPlane"
        ));
        assert!(!set.knows("controlplane.cluster.x-k8s.io/v1beta1", "TalosControlPlane"));
        assert!(!set.knows("v1", "Secret"));
        let mut files: Vec<&str> = BASE_FILES
            .iter()
            .copied()
            .filter(|f| !f.starts_with("controlplane"))
            .collect();
        files.push(V1BETA2_TCP);
        let set = load(&dir, &files).unwrap();
        assert!(set.knows("controlplane.cluster.x-k8s.io/v1beta1", "TalosControlPlane"));
    }

    #[test]
    fn real_crds_both_talos_flavours_collide() {
        let dir = crds_dir();
        let mut files = BASE_FILES.to_vec();
        files.push(V1BETA2_TCP);
        let err = load(&dir, &files).unwrap_err();
        assert!(matches!(err, SchemaError::Duplicate { .. }));
        assert_eq!(
            err.to_string(),
            format!("{V1BETA2_TCP}: TalosControlPlane controlplane.cluster.x-k8s.io/v1alpha3 is already defined by controlplane.cluster.x-k8s.io_taloscontrolplanes.yaml")
        );
    }

    #[test]
    fn real_crds_accept_valid_objects() {
        let set = base_set();
        let v1beta1 = "
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: {name: c1, namespace: ns, labels: {cluster.x-k8s.io/cluster-name: c1}}
spec:
  clusterNetwork:
    pods: {cidrBlocks: [10.244.0.0/16]}
  controlPlaneRef: {apiVersion: controlplane.cluster.x-k8s.io/v1alpha3, kind: TalosControlPlane, name: c1-cp}
  infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta2, kind: VSphereCluster, name: c1}
";
        let talos_config_template = "
apiVersion: bootstrap.cluster.x-k8s.io/v1alpha3
kind: TalosConfigTemplate
metadata: {name: c1-md-0, namespace: ns}
spec:
  template:
    spec:
      generateType: worker
      talosVersion: v1.10
      configPatches:
      - {op: add, path: /machine/network, value: {nameservers: [10.0.0.1]}}
";
        let vsphere_cluster = "
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: VSphereCluster
metadata: {name: c1, namespace: ns}
spec:
  server: vcenter.example.com
  thumbprint: 'AA:BB'
  controlPlaneEndpoint: {host: 10.0.0.10, port: 6443}
  identityRef: {kind: Secret, name: c1-vsphere}
";
        for text in [
            CLUSTER_V1BETA2,
            v1beta1,
            VSMT_V1BETA2,
            TCP_V1ALPHA3,
            talos_config_template,
            vsphere_cluster,
        ] {
            let obj = yaml_obj(text);
            assert_eq!(strings(&set.validate(&obj)), Vec::<String>::new(), "{text}");
        }
    }

    #[test]
    fn real_crds_vsphere_machine_template_violations() {
        let set = base_set();
        let mut obj = yaml_obj(VSMT_V1BETA2);
        let spec = &mut obj["spec"]["template"]["spec"];
        spec["numCPUs"] = json!(1);
        spec["thumbprint"] = json!("");
        spec["foo"] = json!("bar");
        spec["cloneMode"] = json!("linked");
        let v = strings(&set.validate(&obj));
        assert_eq!(
            v,
            vec![
                "spec.template.spec.cloneMode: must be one of [fullClone, linkedClone], got \"linked\"",
                "spec.template.spec.numCPUs: must be >= 2, got 1",
                "spec.template.spec.thumbprint: must be at least 1 characters long, got 0",
                "spec.template.spec.foo: unknown field",
            ]
        );
    }

    #[test]
    fn real_crds_cluster_v1beta2_rejects_api_version_in_ref() {
        let set = base_set();
        let mut obj = yaml_obj(CLUSTER_V1BETA2);
        obj["spec"]["controlPlaneRef"]["apiVersion"] =
            json!("controlplane.cluster.x-k8s.io/v1alpha3");
        assert_eq!(
            strings(&set.validate(&obj)),
            vec!["spec.controlPlaneRef.apiVersion: unknown field"]
        );
        // ...and the v1beta1 shape (apiVersion without apiGroup) is missing apiGroup.
        obj["spec"]["controlPlaneRef"]
            .as_object_mut()
            .unwrap()
            .remove("apiGroup");
        let v = strings(&set.validate(&obj));
        assert!(
            v.contains(&"spec.controlPlaneRef.apiGroup: required field missing".to_string()),
            "{v:?}"
        );
    }

    #[test]
    fn real_crds_talos_control_plane_version() {
        let set = base_set();
        let mut obj = yaml_obj(TCP_V1ALPHA3);
        obj["spec"].as_object_mut().unwrap().remove("version");
        assert_eq!(
            strings(&set.validate(&obj)),
            vec!["spec.version: required field missing"]
        );
        obj["spec"]["version"] = json!("1.30.0");
        let v = strings(&set.validate(&obj));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].starts_with("spec.version: must match pattern `^v(0|[1-9][0-9]*)"),
            "{v:?}"
        );
        assert!(v[0].ends_with("got \"1.30.0\""), "{v:?}");
        obj["spec"]["version"] = json!("v1.30.0");
        obj["spec"]["rolloutStrategy"]["rollingUpdate"]["maxSurge"] = json!(true);
        assert_eq!(
            strings(&set.validate(&obj)),
            vec!["spec.rolloutStrategy.rollingUpdate.maxSurge: must be type `integer` or `string`, got boolean true"]
        );
    }

    #[test]
    fn real_crds_machine_deployment_missing_cluster_name() {
        let set = base_set();
        let obj = yaml_obj(
            "
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata: {name: c1-md-0, namespace: ns}
spec:
  clusterName: c1
  replicas: 2
  selector: {matchLabels: {pool: md-0}}
  template:
    metadata: {labels: {pool: md-0}}
    spec:
      clusterName: c1
      version: v1.30.0
      bootstrap:
        configRef: {apiGroup: bootstrap.cluster.x-k8s.io, kind: TalosConfigTemplate, name: c1-md-0}
      infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: VSphereMachineTemplate, name: c1-md-0}
",
        );
        assert_eq!(strings(&set.validate(&obj)), Vec::<String>::new());
        let mut bad = obj.clone();
        bad["spec"]["template"]["spec"]
            .as_object_mut()
            .unwrap()
            .remove("clusterName");
        assert_eq!(
            strings(&set.validate(&bad)),
            vec!["spec.template.spec.clusterName: required field missing"]
        );
    }

    #[test]
    fn real_crds_v1beta2_talos_control_plane() {
        let dir = crds_dir();
        let set = load(&dir, &[V1BETA2_TCP]).unwrap();
        let obj = yaml_obj("
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: TalosControlPlane
metadata: {name: c1-cp, namespace: ns}
spec:
  replicas: 3
  version: v1.30.0
  machineTemplate:
    spec:
      infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: VSphereMachineTemplate, name: c1-cp}
  controlPlaneConfig:
    controlplane: {generateType: controlplane, talosVersion: v1.10}
");
        assert_eq!(strings(&set.validate(&obj)), Vec::<String>::new());
        let mut bad = obj.clone();
        bad["spec"]["machineTemplate"]["spec"]["infrastructureRef"]["apiVersion"] = json!("x/v1");
        assert_eq!(
            strings(&set.validate(&bad)),
            vec!["spec.machineTemplate.spec.infrastructureRef.apiVersion: unknown field"]
        );
    }

    #[test]
    fn real_crds_timing() {
        let dir = crds_dir();
        let t0 = std::time::Instant::now();
        let set = load(&dir, &BASE_FILES).unwrap();
        let loaded = t0.elapsed();
        let objs: Vec<Value> = [
            CLUSTER_V1BETA2,
            VSMT_V1BETA2,
            TCP_V1ALPHA3,
            CLUSTER_V1BETA2,
            VSMT_V1BETA2,
        ]
        .iter()
        .cycle()
        .take(10)
        .map(|t| yaml_obj(t))
        .collect();
        let t1 = std::time::Instant::now();
        let mut total = 0;
        for o in &objs {
            total += set.validate(o).len();
        }
        let validated = t1.elapsed();
        assert_eq!(total, 0);
        println!("timing: parsed+compiled {} schemas in {loaded:?}; validated {} objects in {validated:?}", set.len(), objs.len());
    }
}
