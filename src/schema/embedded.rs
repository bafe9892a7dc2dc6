//! The schemas built into the binary, so that `capstan validate` needs no `--crds`: the CRDs of
//! the provider releases capstan pins, and the Kubernetes OpenAPI schemas of the built-in kinds it
//! renders, per supported Kubernetes minor.
//!
//! `embedded.json` beside this file is written by `tools/embed-schemas.py` (its header names the
//! inputs; a test checks it is up to date): the CRD sets come from `tests/fixtures/crds`
//! (upstream tags, commits and paths in its `SOURCES.md`), the built-in kinds from the PyPI
//! package `kubernetes-validate` (`kubernetes-json-schema/v1.N.0-local-strict`, generated from
//! kubernetes/kubernetes `api/openapi-spec`), turned into the CRD schema dialect
//! [`super::CrdSet`] reads. The `-local-strict` schemas declare `additionalProperties: false` on
//! every object, so an unknown field anywhere is refused, as `kubectl apply --validate=strict`
//! refuses it; their `$ref`s are local (to their `_definitions.json`) and inlined by the script.
//! Only what validation reads is kept; every sub-schema of 256 bytes or more is stored once
//! and referenced as `{"$s": index}`, which `expand` resolves.

use super::{Compiler, CrdSet, Entry, SchemaError};
use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// The generated file (minified JSON).
const EMBEDDED: &str = include_str!("embedded.json");

/// What the errors of this module name as their file.
const LABEL: &str = "the embedded schemas (src/schema/embedded.json)";

/// Deepest `{"$s": n}` nesting expanded (the generator writes at most the schemas' own depth).
const MAX_DEPTH: usize = 128;

/// One provider release whose CRDs are embedded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Release {
    /// The `clusterctl` inventory name, e.g. `cluster-api`.
    pub provider: String,
    /// The release, e.g. `v1.10.10`.
    pub release: String,
}

/// The CRDs of one set of provider releases (one per flavour).
#[derive(Debug, Clone)]
pub(crate) struct ProviderSet {
    /// The flavour whose objects it validates: `v1beta1` (the releases `inputs::providers`
    /// pins) or `v1beta2` (the CAPI v1beta2-contract releases of `tests/fixtures/crds`).
    pub name: String,
    /// The releases, in inventory order.
    pub releases: Vec<Release>,
    /// Their CRDs, compiled.
    pub crds: CrdSet,
}

impl ProviderSet {
    /// `cluster-api v1.10.10, bootstrap-talos v0.6.12, …`.
    pub(crate) fn describe(&self) -> String {
        self.releases
            .iter()
            .map(|r| format!("{} {}", r.provider, r.release))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The parsed file, before any schema is compiled.
pub(crate) struct Embedded {
    doc: Value,
}

fn malformed(path: &str, expected: &str) -> SchemaError {
    SchemaError::Malformed {
        file: LABEL.into(),
        path: path.into(),
        expected: expected.into(),
        found: "something else (regenerate it: python3 tools/embed-schemas.py)".into(),
    }
}

impl Embedded {
    /// Parse the embedded file.
    pub(crate) fn load() -> Result<Embedded, SchemaError> {
        let doc: Value =
            serde_json::from_str(EMBEDDED).map_err(|_| malformed("", "a JSON document"))?;
        Ok(Embedded { doc })
    }

    fn schemas(&self) -> Result<&[Value], SchemaError> {
        self.doc
            .get("schemas")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .ok_or_else(|| malformed("schemas", "an array"))
    }

    fn schema(&self, v: &Value, path: &str) -> Result<Value, SchemaError> {
        let schemas = self.schemas()?;
        let i = v
            .as_u64()
            .and_then(|i| usize::try_from(i).ok())
            .ok_or_else(|| malformed(path, "a schema index"))?;
        let s = schemas
            .get(i)
            .ok_or_else(|| malformed(path, "an index into `schemas`"))?;
        expand(s, schemas, 0)
    }

    /// The CRD sets, compiled, in the file's order (`v1beta1`, then `v1beta2`).
    pub(crate) fn provider_sets(&self) -> Result<Vec<ProviderSet>, SchemaError> {
        let sets = self
            .doc
            .get("crdSets")
            .and_then(Value::as_array)
            .ok_or_else(|| malformed("crdSets", "an array"))?;
        let mut out = Vec::new();
        for (i, set) in sets.iter().enumerate() {
            let at = format!("crdSets[{i}]");
            let text = |v: Option<&Value>, p: &str| -> Result<String, SchemaError> {
                v.and_then(Value::as_str)
                    .map(str::to_string)
                    .ok_or_else(|| malformed(p, "a string"))
            };
            let name = text(set.get("name"), &format!("{at}.name"))?;
            let mut releases = Vec::new();
            for (j, r) in set
                .get("releases")
                .and_then(Value::as_array)
                .ok_or_else(|| malformed(&format!("{at}.releases"), "an array"))?
                .iter()
                .enumerate()
            {
                let p = format!("{at}.releases[{j}]");
                releases.push(Release {
                    provider: text(r.get("provider"), &format!("{p}.provider"))?,
                    release: text(r.get("release"), &format!("{p}.release"))?,
                });
            }
            let mut docs = Vec::new();
            for (j, c) in set
                .get("crds")
                .and_then(Value::as_array)
                .ok_or_else(|| malformed(&format!("{at}.crds"), "an array"))?
                .iter()
                .enumerate()
            {
                let p = format!("{at}.crds[{j}]");
                let file = text(c.get("file"), &format!("{p}.file"))?;
                let provider = text(c.get("provider"), &format!("{p}.provider"))?;
                let release = releases
                    .iter()
                    .find(|r| r.provider == provider)
                    .map_or("?", |r| r.release.as_str());
                let mut versions = Vec::new();
                for (k, v) in c
                    .get("versions")
                    .and_then(Value::as_array)
                    .ok_or_else(|| malformed(&format!("{p}.versions"), "an array"))?
                    .iter()
                    .enumerate()
                {
                    let vp = format!("{p}.versions[{k}]");
                    versions.push(json!({
                        "name": text(v.get("name"), &format!("{vp}.name"))?,
                        "served": v.get("served").and_then(Value::as_bool).unwrap_or(false),
                        "schema": {"openAPIV3Schema": self.schema(v.get("schema").unwrap_or(&Value::Null), &format!("{vp}.schema"))?},
                    }));
                }
                let crd = json!({
                    "apiVersion": "apiextensions.k8s.io/v1",
                    "kind": "CustomResourceDefinition",
                    "spec": {
                        "group": text(c.get("group"), &format!("{p}.group"))?,
                        "names": {"kind": text(c.get("kind"), &format!("{p}.kind"))?},
                        "versions": versions,
                    }
                });
                docs.push((format!("{file} ({provider} {release}, embedded)"), crd));
            }
            out.push(ProviderSet {
                name,
                releases,
                crds: CrdSet::from_documents(docs)?,
            });
        }
        Ok(out)
    }

    /// The Kubernetes minors (`1.N`) whose built-in kinds are embedded, ascending.
    pub(crate) fn kubernetes_minors(&self) -> Vec<u32> {
        let mut m: Vec<u32> = self
            .doc
            .get("kubernetes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|m| m.get("minor")?.as_u64()?.try_into().ok())
            .collect();
        m.sort_unstable();
        m
    }

    /// The built-in kinds of Kubernetes v1.`minor` as a schema set (each kind a CRD-like
    /// entry named `Kubernetes v1.N`), and the kinds it holds (`apiVersion` and kind);
    /// `None` when that minor is not embedded.
    #[allow(clippy::type_complexity)]
    pub(crate) fn kubernetes(
        &self,
        minor: u32,
    ) -> Result<Option<(CrdSet, Vec<(String, String)>)>, SchemaError> {
        let minors = self
            .doc
            .get("kubernetes")
            .and_then(Value::as_array)
            .ok_or_else(|| malformed("kubernetes", "an array"))?;
        let Some((i, m)) = minors
            .iter()
            .enumerate()
            .find(|(_, m)| m.get("minor").and_then(Value::as_u64) == Some(u64::from(minor)))
        else {
            return Ok(None);
        };
        let mut docs = Vec::new();
        let mut kinds = Vec::new();
        for (j, k) in m
            .get("kinds")
            .and_then(Value::as_array)
            .ok_or_else(|| malformed(&format!("kubernetes[{i}].kinds"), "an array"))?
            .iter()
            .enumerate()
        {
            let p = format!("kubernetes[{i}].kinds[{j}]");
            let (Some(api_version), Some(kind)) = (
                k.get("apiVersion").and_then(Value::as_str),
                k.get("kind").and_then(Value::as_str),
            ) else {
                return Err(malformed(&p, "apiVersion and kind strings"));
            };
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            docs.push(SchemaEntry {
                file: format!("the Kubernetes v1.{minor} OpenAPI schema (embedded)"),
                group: group.to_string(),
                version: version.to_string(),
                kind: kind.to_string(),
                schema: self.schema(k.get("schema").unwrap_or(&Value::Null), &p)?,
            });
            kinds.push((api_version.to_string(), kind.to_string()));
        }
        Ok(Some((CrdSet::from_schemas(docs)?, kinds)))
    }
}

/// One schema for [`CrdSet::from_schemas`].
#[derive(Debug, Clone)]
pub(crate) struct SchemaEntry {
    /// Where it came from (for messages).
    pub file: String,
    /// API group (`""` for the core group).
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// The `openAPIV3Schema`-dialect schema of the whole object.
    pub schema: Value,
}

impl CrdSet {
    /// Build from schemas given directly, one per (group, version, kind), all served: the
    /// built-in kinds, whose core group `""` no CRD may have. `file` names each one's source
    /// for messages; a (group, version, kind) given twice is an error.
    pub(crate) fn from_schemas(entries: Vec<SchemaEntry>) -> Result<CrdSet, SchemaError> {
        let mut set = CrdSet::default();
        let mut regexes = HashMap::new();
        for e in entries {
            let mut c = Compiler {
                file: &e.file,
                regexes: &mut regexes,
            };
            let root = c.compile(&e.schema, "openAPIV3Schema", 0)?;
            if let Some(first) = set.lookup(&e.group, &e.version, &e.kind) {
                return Err(SchemaError::Duplicate {
                    file: e.file.clone(),
                    group: e.group,
                    version: e.version,
                    kind: e.kind,
                    first_file: first.file.clone(),
                });
            }
            set.by_kind.entry(e.kind).or_default().push(Entry {
                group: e.group,
                version: e.version,
                served: true,
                file: e.file,
                root,
            });
            set.count += 1;
        }
        Ok(set)
    }
}

/// `v` with every `{"$s": n}` replaced by `schemas[n]`, expanded in turn.
fn expand(v: &Value, schemas: &[Value], depth: usize) -> Result<Value, SchemaError> {
    if depth > MAX_DEPTH {
        return Err(malformed("schemas", "references nested at most 128 deep"));
    }
    Ok(match v {
        Value::Object(o) => {
            if let (Some(i), 1) = (o.get("$s"), o.len()) {
                let s = i
                    .as_u64()
                    .and_then(|i| usize::try_from(i).ok())
                    .and_then(|i| schemas.get(i))
                    .ok_or_else(|| malformed("schemas", "`$s` an index into `schemas`"))?;
                return expand(s, schemas, depth + 1);
            }
            let mut out = Map::with_capacity(o.len());
            for (k, c) in o {
                out.insert(k.clone(), expand(c, schemas, depth + 1)?);
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(
            a.iter()
                .map(|c| expand(c, schemas, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        other => other.clone(),
    })
}

/// The Kubernetes version a rendered stream names for its cluster: a Cluster's
/// `spec.topology.version` or a TalosControlPlane's `spec.version`, as (minor, the version
/// as written, where it was read: `TalosControlPlane lab-f-cp spec.version`). With several,
/// the lowest minor (a field a newer release added is then refused; the kinds and fields
/// capstan renders exist in every minor it supports).
pub(crate) fn rendered_version<'a>(
    objects: impl IntoIterator<Item = &'a Value>,
) -> Option<(u32, String, String)> {
    let mut best: Option<(u32, String, String)> = None;
    for o in objects {
        let kind = o.get("kind").and_then(Value::as_str).unwrap_or("");
        let (field, pointer) = match kind {
            "Cluster" => ("spec.topology.version", "/spec/topology/version"),
            "TalosControlPlane" => ("spec.version", "/spec/version"),
            _ => continue,
        };
        let Some(version) = o.pointer(pointer).and_then(Value::as_str) else {
            continue;
        };
        let Some(minor) = kubernetes_minor(version) else {
            continue;
        };
        let name = o
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        if best.as_ref().is_none_or(|(m, _, _)| minor < *m) {
            best = Some((minor, version.to_string(), format!("{kind} {name} {field}")));
        }
    }
    best
}

/// The minor of a Kubernetes version `v1.N[.P…]` (`v` optional, as `--kubernetes-version`
/// takes it too): `N`.
pub(crate) fn kubernetes_minor(version: &str) -> Option<u32> {
    let v = version.strip_prefix('v').unwrap_or(version);
    let mut parts = v.split(['.', '-', '+']);
    if parts.next()? != "1" {
        return None;
    }
    let minor = parts.next()?;
    if minor.is_empty() || !minor.bytes().all(|b| b.is_ascii_digit()) || minor.len() > 3 {
        return None;
    }
    minor.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_sets_compile_and_name_their_releases() {
        let e = Embedded::load().unwrap();
        let sets = e.provider_sets().unwrap();
        let names: Vec<&str> = sets.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["v1beta1", "v1beta2"]);
        assert_eq!(
            sets[0].describe(),
            "cluster-api v1.10.10, bootstrap-talos v0.6.12, control-plane-talos v0.5.12, \
             infrastructure-vsphere v1.13.1, ipam-in-cluster v1.0.3"
        );
        assert!(sets[0].crds.knows(
            "controlplane.cluster.x-k8s.io/v1alpha3",
            "TalosControlPlane"
        ));
        assert!(!sets[0].crds.knows("cluster.x-k8s.io/v1beta2", "Cluster"));
        assert!(sets[1].crds.knows("cluster.x-k8s.io/v1beta2", "Cluster"));
        assert_eq!(e.kubernetes_minors(), (26..=37).collect::<Vec<_>>());
        // Validating admission policies are GA (admissionregistration.k8s.io/v1) from 1.30.
        let (k29, kinds29) = e.kubernetes(29).unwrap().unwrap();
        assert!(!k29.knows(
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicy"
        ));
        assert_eq!(kinds29.len(), 9);
        let (k34, _) = e.kubernetes(34).unwrap().unwrap();
        assert!(k34.knows(
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicy"
        ));
        assert!(k34.knows("batch/v1", "Job"));
        assert!(e.kubernetes(25).unwrap().is_none());
    }

    #[test]
    fn builtin_schemas_refuse_unknown_fields_and_wrong_types() {
        let e = Embedded::load().unwrap();
        let (k, _) = e.kubernetes(34).unwrap().unwrap();
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {"backoffLimit": 1, "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "x", "imagePullPolicy": "IfNotPresent",
                    "resources": {"limits": {"cpu": "100m", "memory": 1024}},
                    "ports": [{"containerPort": 80}]}]}}}});
        assert_eq!(k.validate(&job), []);
        let mut bad = job.clone();
        bad["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = json!("Always");
        bad["spec"]["backoffLimit"] = json!("one");
        let v: Vec<String> = k.validate(&bad).iter().map(ToString::to_string).collect();
        assert!(
            v.iter()
                .any(|m| m
                    .starts_with("spec.template.spec.containers[0].imagePullPolcy: unknown field")),
            "{v:?}"
        );
        assert!(
            v.iter().any(|m| m.starts_with("spec.backoffLimit: ")),
            "{v:?}"
        );
        let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "r"}, "rules": [{"apiGroups": [""], "resources": "pods", "verbs": ["get"]}]});
        let v: Vec<String> = k.validate(&role).iter().map(ToString::to_string).collect();
        assert!(
            v.iter().any(|m| m.starts_with("rules[0].resources: ")),
            "{v:?}"
        );
        // An IntOrString takes both; null where the schema allows it.
        let svc_port = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {"template": {"spec": {"containers": [{"name": "c",
                "livenessProbe": {"httpGet": {"port": "http"}}, "readinessProbe": {"httpGet": {"port": 8080}}}]}}}});
        assert_eq!(k.validate(&svc_port), []);
    }

    #[test]
    fn the_rendered_version_is_the_lowest_minor_named() {
        let objs = [
            json!({"kind": "TalosControlPlane", "metadata": {"name": "g-cp"}, "spec": {"version": "v1.34.1"}}),
            json!({"kind": "Cluster", "metadata": {"name": "f"}, "spec": {"topology": {"version": "v1.30.4"}}}),
            json!({"kind": "Job", "spec": {"version": "v1.20.0"}}),
        ];
        assert_eq!(
            rendered_version(&objs),
            Some((
                30,
                "v1.30.4".into(),
                "Cluster f spec.topology.version".into()
            ))
        );
        assert_eq!(rendered_version(&objs[2..]), None);
        assert_eq!(kubernetes_minor("1.33"), Some(33));
        assert_eq!(kubernetes_minor("v1.34.1"), Some(34));
        assert_eq!(kubernetes_minor("v2.1.0"), None);
        assert_eq!(kubernetes_minor("v1.x"), None);
    }
}
