//! Content-hash names for immutable templates and the rewriting of every reference to them.
//!
//! CAPV rejects changes to `VSphereMachineTemplate.spec.template.spec` and CAPI expects
//! bootstrap/infrastructure templates to be replaced, not edited. So each immutable template
//! is named `<name>-<first 10 hex of sha256(spec)>`: a spec change yields a new object and
//! the owners roll their machines. kustomize does not rewrite CAPI references, so this
//! module does: any JSON object anywhere that has `kind` + `name` and an `apiVersion` or
//! `apiGroup` naming a renamed template is pointed at the new name.

use crate::resource::{field, group_of, map_get, Resource};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// Kinds whose spec is immutable and whose names therefore carry a content hash.
/// (A Job's pod template is immutable too.)
pub const IMMUTABLE_KINDS: &[&str] = &["VSphereMachineTemplate", "TalosConfigTemplate", "Job"];

/// Hex characters of the spec digest appended to names.
pub const HASH_LEN: usize = 10;

/// A rename performed: (group, kind, old name) → new name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rename {
    /// API group.
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Name as rendered by the template.
    pub from: String,
    /// Name with the content hash.
    pub to: String,
}

/// The short content hash of a value (its canonical JSON bytes).
pub fn content_hash(value: &Value) -> String {
    let mut hasher = HashWriter(Sha256::new());
    // Writing into a hasher cannot fail, and a Value always serializes.
    let _ = serde_json::to_writer(&mut hasher, value);
    let digest = hasher.0.finalize();
    let mut out = String::with_capacity(HASH_LEN);
    crate::digest::push_hex(&digest[..HASH_LEN / 2], &mut out);
    out
}

/// Feeds serialized bytes straight into the digest (no intermediate buffer).
struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Give immutable templates content-hash names and rewrite every reference to them.
pub fn apply(resources: &mut [Resource]) -> Vec<Rename> {
    let mut renames = Vec::new();
    for r in resources.iter_mut() {
        if !IMMUTABLE_KINDS.contains(&r.kind()) {
            continue;
        }
        let hash = content_hash(field(&r.value, "spec").unwrap_or(&Value::Null));
        let to = format!("{}-{hash}", r.name());
        renames.push(Rename {
            group: group_of(r.api_version()).to_string(),
            kind: r.kind().to_string(),
            from: r.name().to_string(),
            to: to.clone(),
        });
        r.set_name(&to);
    }
    if renames.is_empty() {
        return renames;
    }
    let map: HashMap<(&str, &str, &str), &str> = renames
        .iter()
        .map(|r| {
            (
                (r.group.as_str(), r.kind.as_str(), r.from.as_str()),
                r.to.as_str(),
            )
        })
        .collect();
    for r in resources.iter_mut() {
        if let Some(spec) = r.value.get_mut("spec") {
            rewrite_refs(spec, &map);
        }
    }
    renames
}

fn rewrite_refs(value: &mut Value, map: &HashMap<(&str, &str, &str), &str>) {
    match value {
        Value::Object(obj) => {
            // `kind` first: most objects in a spec are not references to a renamed kind.
            let get = |k: &str| map_get(obj, k).and_then(Value::as_str);
            let target = get("kind")
                .filter(|k| IMMUTABLE_KINDS.contains(k))
                .and_then(|kind| {
                    let name = get("name")?;
                    let group = get("apiGroup").or_else(|| get("apiVersion").map(group_of))?;
                    map.get(&(group, kind, name)).map(|s| s.to_string())
                });
            if let Some(new_name) = target {
                obj.insert("name".into(), Value::String(new_name));
            }
            for v in obj.values_mut() {
                rewrite_refs(v, map);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| rewrite_refs(v, map)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn res(v: Value) -> Resource {
        Resource {
            value: v,
            origin: "test".into(),
            raw: None,
            template: false,
        }
    }

    #[test]
    fn renames_and_rewrites_both_reference_styles() {
        let mut rs = vec![
            res(
                json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "VSphereMachineTemplate",
                "metadata": {"name": "c-cp"}, "spec": {"template": {"spec": {"numCPUs": 4}}}}),
            ),
            res(
                json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1alpha3", "kind": "TalosControlPlane",
                "metadata": {"name": "c-cp"}, "spec": {"infrastructureTemplate": {
                    "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "VSphereMachineTemplate", "name": "c-cp"}}}),
            ),
            res(
                json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
                "metadata": {"name": "c-a"}, "spec": {"template": {"spec": {"infrastructureRef": {
                    "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "VSphereMachineTemplate", "name": "c-cp"}}}}}),
            ),
        ];
        let renames = apply(&mut rs);
        assert_eq!(renames.len(), 1);
        let new = &renames[0].to;
        assert!(
            new.starts_with("c-cp-") && new.len() == "c-cp-".len() + HASH_LEN,
            "{new}"
        );
        assert_eq!(rs[0].name(), new);
        assert_eq!(
            rs[1]
                .value
                .pointer("/spec/infrastructureTemplate/name")
                .unwrap(),
            new.as_str()
        );
        assert_eq!(
            rs[2]
                .value
                .pointer("/spec/template/spec/infrastructureRef/name")
                .unwrap(),
            new.as_str()
        );
        // The TalosControlPlane shares the base name but is not a template: untouched.
        assert_eq!(rs[1].name(), "c-cp");
    }

    #[test]
    fn hash_follows_spec_only() {
        let a = json!({"template": {"spec": {"numCPUs": 4}}});
        let b = json!({"template": {"spec": {"numCPUs": 8}}});
        assert_ne!(content_hash(&a), content_hash(&b));
        assert_eq!(content_hash(&a), content_hash(&a.clone()));
    }
}
