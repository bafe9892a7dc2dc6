//! SopsSecret objects for an in-cluster SOPS operator: secrets mode `operator` of
//! `capstan argocd generate`.
//!
//! The operator is isindir/sops-secrets-operator. What was verified in its repository
//! (`api/v1alpha3/sopssecret_types.go`, `config/crd/bases/isindir.github.com_sopssecrets.yaml`,
//! `internal/controllers/sopssecret_controller.go`, `README.md`):
//! - kind `SopsSecret`, `apiVersion: isindir.github.com/v1alpha3` (the storage version;
//!   v1alpha1/v1alpha2 are deprecated), namespaced;
//! - `spec.secretTemplates[]` (required, at least one): `name` (required), `type`,
//!   `labels`, `annotations`, `data` and `stringData` (string maps); `spec.suspend`;
//! - a top-level `sops` map with `age[]{recipient, enc}`, `lastmodified`, `mac`, `version`,
//!   `encrypted_regex`, `encrypted_suffix` (and other key sources). The CRD has no
//!   `mac_only_encrypted`: the API server would prune it and Argo CD would show the
//!   object OutOfSync forever, so these files are written without it (the MAC covers every
//!   value);
//! - the controller JSON-encodes the *whole* object and decrypts it with the sops library,
//!   ignoring the MAC (the API server mutates the object); the Secret it creates takes the
//!   SopsSecret's namespace, the template's name, type, labels and annotations, and its
//!   data from both `data` and `stringData` **as given** (`[]byte(value)`: `data` is not
//!   base64-decoded), so values are written as `stringData`, plain text;
//! - it manages a pre-existing Secret of the same name only if that Secret carries the
//!   annotation `sopssecret/managed: "true"` (switching an Application from `decrypt` to
//!   `operator` needs it on the Secrets Argo CD created).
//!
//! Why a sealed Secret cannot simply be wrapped: SOPS binds each value to its key path
//! (the AES-GCM additional data is `data:tls.key:`), and in a SopsSecret the path is
//! `spec:secretTemplates:stringData:tls.key:`; moving ciphertext breaks it, and a Secret's
//! `data` holds base64 where the operator wants plain text. Re-encrypting needs the
//! plaintext, so `capstan secrets seal-operator` (which has an identity) writes
//! `secrets/operator/<file>` next to each sealed file, encrypted to `spec.recipients` with
//! `encrypted_regex: ^(data|stringData)$` (names, labels and annotations stay readable), and
//! `argocd generate` only passes those files through verbatim after checking, without any
//! key, that each one was made from the current sealed file (the annotation
//! [`ANN_SEALED_VALUES`], a digest of the sealed file's encrypted values, which re-sealing
//! unchanged plaintext and `secrets rekey` keep). Emitting the sealed `v1` Secret itself
//! ("Flux-style" pass-through) is not offered: under Argo CD nothing decrypts it, and the
//! API server would be sent SOPS ciphertext as Secret data.

use crate::inputs::OPERATOR_DIR;
use crate::resource::Resource;
pub use crate::yaml::Scrubbed;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::{json, Map, Value};

/// The operator's API version.
pub const API_VERSION: &str = "isindir.github.com/v1alpha3";
/// The operator's kind.
pub const KIND: &str = "SopsSecret";
/// The annotation with which the operator manages a pre-existing Secret it did not create
/// (`api/v1alpha3/sopssecret_types.go`: `SopsSecretManagedAnnotation`; compared
/// case-sensitively, `isAnnotatedToBeManaged` in `internal/controllers/sopssecret_controller.go`).
pub const MANAGED_ANNOTATION: (&str, &str) = ("sopssecret/managed", "true");
/// Annotation: digest of the sealed Secret a SopsSecret was made from (see [`sealed_values_digest`]).
pub const ANN_SEALED_VALUES: &str = "capstan.dev/sealed-values-sha256";

/// Why a SopsSecret could not be made or used. Never contains secret material.
#[derive(Debug, thiserror::Error)]
pub enum SopsSecretError {
    /// The SopsSecret file for a sealed Secret is missing.
    #[error(
        "{path} is missing (secrets mode `operator`): run `capstan secrets seal-operator {dir}`"
    )]
    Missing {
        /// The expected file.
        path: String,
        /// The cluster directory.
        dir: String,
    },
    /// The SopsSecret was made from another version of the sealed Secret.
    #[error("{path} is stale: it was made from another version of {sealed}; run `capstan secrets seal-operator {dir}`")]
    Stale {
        /// The SopsSecret file.
        path: String,
        /// The sealed file.
        sealed: String,
        /// The cluster directory.
        dir: String,
    },
    /// A file or Secret is not what it must be.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// The SopsSecret file for a sealed file: `secrets/x.yaml` → `secrets/operator/x.yaml`
/// (any path separator style kept as given).
pub fn operator_path(sealed_path: &str) -> Option<String> {
    let (dir, file) = sealed_path.rsplit_once('/')?;
    Some(format!("{dir}/{OPERATOR_DIR}/{file}"))
}

/// A digest of what a sealed Secret holds, from its encrypted form: name, namespace, type
/// and the `ENC[…]` values of `data` and `stringData`. Re-sealing unchanged plaintext and
/// re-keying keep the ciphertext of every value, so the digest stays; any value change
/// moves it. Annotations are left out (rekey rewrites the bundle digest).
pub fn sealed_values_digest(sealed: &Value) -> String {
    let pick = |p: &str| sealed.pointer(p).cloned().unwrap_or(Value::Null);
    let canonical = json!({
        "name": pick("/metadata/name"),
        "namespace": pick("/metadata/namespace"),
        "type": pick("/type"),
        "data": pick("/data"),
        "stringData": pick("/stringData"),
    });
    crate::digest::sha256_hex(canonical.to_string().as_bytes())
}

/// The SopsSecret (plaintext, to be encrypted) standing for a decrypted Secret. `label`
/// names the source in errors; `digest` is [`sealed_values_digest`] of its sealed form.
pub fn from_secret(label: &str, secret: &Value, digest: &str) -> Result<Scrubbed, SopsSecretError> {
    let invalid = |message: String| SopsSecretError::Invalid {
        path: label.to_string(),
        message,
    };
    if secret.get("apiVersion").and_then(Value::as_str) != Some("v1")
        || secret.get("kind").and_then(Value::as_str) != Some("Secret")
    {
        return Err(invalid("expected a v1 Secret".into()));
    }
    let text = |p: &str| {
        secret
            .pointer(p)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let name = text("/metadata/name").ok_or_else(|| invalid("metadata.name is missing".into()))?;
    let namespace = text("/metadata/namespace")
        .ok_or_else(|| invalid("metadata.namespace is missing".into()))?;
    let labels = secret.pointer("/metadata/labels").cloned();
    let annotations: Map<String, Value> = secret
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .map(|a| {
            a.iter()
                .filter(|(k, _)| !k.starts_with("capstan.dev/"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    let mut string_data = Map::new();
    if let Some(data) = secret.get("data").and_then(Value::as_object) {
        for (k, v) in data {
            let b64 = v
                .as_str()
                .ok_or_else(|| invalid(format!("data.{k}: expected a string")))?;
            let bytes = zeroize::Zeroizing::new(
                B64.decode(b64)
                    .map_err(|_| invalid(format!("data.{k}: not base64")))?,
            );
            let s = std::str::from_utf8(&bytes).map_err(|_| {
                invalid(format!(
                    "data.{k}: binary data; the operator's templates hold text (stringData)"
                ))
            })?;
            string_data.insert(k.clone(), Value::String(s.to_string()));
        }
    }
    if let Some(sd) = secret.get("stringData").and_then(Value::as_object) {
        for (k, v) in sd {
            string_data.insert(k.clone(), v.clone());
        }
    }
    let mut template = Map::new();
    template.insert("name".into(), json!(name));
    if let Some(t) = text("/type") {
        template.insert("type".into(), json!(t));
    }
    if let Some(l) = &labels {
        template.insert("labels".into(), l.clone());
    }
    if !annotations.is_empty() {
        template.insert("annotations".into(), Value::Object(annotations));
    }
    template.insert("stringData".into(), Value::Object(string_data));
    let mut meta = Map::new();
    meta.insert("name".into(), json!(name));
    meta.insert("namespace".into(), json!(namespace));
    if let Some(l) = labels {
        meta.insert("labels".into(), l);
    }
    let mut ann = Map::new();
    ann.insert(
        crate::argocd::ANN_SYNC_WAVE.into(),
        json!(crate::argocd::sync_wave(KIND).to_string()),
    );
    if let Some(opts) =
        crate::argocd::sync_options(KIND, crate::resource::group_of(API_VERSION), "")
    {
        ann.insert(crate::argocd::ANN_SYNC_OPTIONS.into(), json!(opts));
    }
    ann.insert(ANN_SEALED_VALUES.into(), json!(digest));
    meta.insert("annotations".into(), Value::Object(ann));
    Ok(Scrubbed(json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": meta,
        "spec": {"secretTemplates": [Value::Object(template)]},
    })))
}

/// Check, without any key, that `text` (the SopsSecret file at `path`) stands for the
/// sealed Secret `sealed` (from `sealed_path`) and return it as a verbatim resource.
pub fn check(
    sealed: &Value,
    sealed_path: &str,
    path: &str,
    text: &str,
    cluster_dir: &str,
) -> Result<Resource, SopsSecretError> {
    let invalid = |message: String| SopsSecretError::Invalid {
        path: path.to_string(),
        message,
    };
    let doc = crate::yaml::parse_one(text).map_err(|e| invalid(format!("invalid YAML: {e}")))?;
    if doc.get("apiVersion").and_then(Value::as_str) != Some(API_VERSION)
        || doc.get("kind").and_then(Value::as_str) != Some(KIND)
    {
        return Err(invalid(format!(
            "expected `apiVersion: {API_VERSION}`, `kind: {KIND}`"
        )));
    }
    if doc.get("sops").is_none() {
        return Err(invalid(
            "not SOPS-encrypted: let `capstan secrets seal-operator` write it".into(),
        ));
    }
    for p in ["/metadata/name", "/metadata/namespace"] {
        if doc.pointer(p) != sealed.pointer(p) {
            return Err(invalid(format!(
                "{} differs from {sealed_path}",
                p.trim_start_matches('/').replace('/', ".")
            )));
        }
    }
    let recorded = doc
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(ANN_SEALED_VALUES))
        .and_then(Value::as_str);
    if recorded != Some(sealed_values_digest(sealed).as_str()) {
        return Err(SopsSecretError::Stale {
            path: path.to_string(),
            sealed: sealed_path.to_string(),
            dir: cluster_dir.to_string(),
        });
    }
    // The label that makes `clusterctl move` save the Secret the operator creates (see
    // `crate::secrets::seal::MOVE_LABEL`) must be on its template: the operator copies the
    // template's labels to the Secret. The template is covered by this file's MAC (no
    // `mac_only_encrypted` here), so it cannot be added without the key.
    let move_label = crate::secrets::seal::MOVE_LABEL;
    if crate::secrets::seal::has_move_label(sealed) {
        let templated = doc
            .pointer("/spec/secretTemplates/0/labels")
            .and_then(Value::as_object)
            .is_some_and(|l| l.contains_key(move_label));
        if !templated {
            return Err(SopsSecretError::Invalid {
                path: path.to_string(),
                message: format!(
                    "spec.secretTemplates[0].labels lacks `{move_label}: \"\"`: without it `clusterctl move` \
                     does not save the Secret the operator owns, and no backup holds it; the label is under this \
                     file's SOPS MAC, so re-seal it: run `capstan secrets seal-operator {cluster_dir}`"
                ),
            });
        }
    }
    Ok(Resource {
        value: doc,
        origin: path.to_string(),
        raw: Some(crate::resource::Verbatim::new(text.to_string())),
        template: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_a_secret_to_a_sopssecret() {
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "c-ca", "namespace": "c", "labels": {"l": "v"},
                         "annotations": {"capstan.dev/secrets-age-sha256": "x", "keep": "y"}},
            "type": "cluster.x-k8s.io/secret",
            "data": {"tls.crt": B64.encode("CERT")},
        });
        let s = from_secret("f", &secret, "d1").unwrap();
        assert_eq!(s.0["apiVersion"], API_VERSION);
        assert_eq!(
            s.0.pointer("/metadata/annotations/capstan.dev~1sealed-values-sha256")
                .unwrap(),
            "d1"
        );
        assert_eq!(
            s.0.pointer("/metadata/annotations/argocd.argoproj.io~1sync-wave")
                .unwrap(),
            "-2"
        );
        let t = &s.0["spec"]["secretTemplates"][0];
        assert_eq!(t["name"], "c-ca");
        assert_eq!(t["type"], "cluster.x-k8s.io/secret");
        assert_eq!(t["stringData"]["tls.crt"], "CERT");
        assert_eq!(t["annotations"], json!({"keep": "y"}));
        let binary = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "b", "namespace": "c"}, "data": {"k": B64.encode([0xff, 0xfe])}});
        assert!(from_secret("f", &binary, "d").is_err());
        assert_eq!(
            operator_path("c/secrets/x.yaml").unwrap(),
            "c/secrets/operator/x.yaml"
        );
    }

    #[test]
    fn an_operator_file_without_the_move_label_names_the_re_seal() {
        let label = crate::secrets::seal::MOVE_LABEL;
        let sealed = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "c-talos", "namespace": "c", "labels": {label: ""}},
            "data": {"bundle": "ENC[x]"}});
        let digest = sealed_values_digest(&sealed);
        let file = |labels: &str| {
            format!(
                "apiVersion: {API_VERSION}\nkind: {KIND}\nmetadata:\n  name: c-talos\n  namespace: c\n  annotations:\n    \
                 {ANN_SEALED_VALUES}: {digest}\nspec:\n  secretTemplates:\n  - name: c-talos\n    labels: {labels}\n    \
                 stringData:\n      bundle: ENC[y]\nsops:\n  version: 3.13.2\n"
            )
        };
        let e = check(&sealed, "s", "op", &file("{a: b}"), "clusters/c").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("lacks `clusterctl.cluster.x-k8s.io/move")
                && msg.contains("run `capstan secrets seal-operator clusters/c`"),
            "{msg}"
        );
        check(
            &sealed,
            "s",
            "op",
            &file(&format!("{{\"{label}\": \"\"}}")),
            "clusters/c",
        )
        .unwrap();
    }

    #[test]
    fn digest_ignores_annotations_only() {
        let a = json!({"metadata": {"name": "n", "namespace": "s", "annotations": {"a": "1"}}, "data": {"k": "ENC[x]"}});
        let mut b = a.clone();
        b["metadata"]["annotations"]["a"] = json!("2");
        assert_eq!(sealed_values_digest(&a), sealed_values_digest(&b));
        b["data"]["k"] = json!("ENC[y]");
        assert_ne!(sealed_values_digest(&a), sealed_values_digest(&b));
    }
}
