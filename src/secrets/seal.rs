//! Sealed Secrets: the Secrets the Cluster API providers read, built from the Talos secrets
//! bundle and stored in the cluster's directory as SOPS files (age recipients, values
//! encrypted, keys and metadata readable), and the checks render makes on them.
//!
//! Sealing needs the plaintext bundle (an identity, or the import that holds it in memory);
//! rendering never does: it passes the sealed documents through verbatim after checking,
//! from their readable annotations, that they were sealed from the current `secrets.age`
//! and carry the CA fingerprints recorded in `cluster.yaml`. Re-sealing unchanged plaintext
//! returns the previous file byte for byte (see [`crate::secrets::sops::encrypt`]).
//!
//! Layout in `clusters/<name>/secrets/`:
//! - `<name>-talos.yaml`: Secret `<name>-talos`, key `bundle` (the secrets bundle YAML);
//! - `<name>-ca.yaml`: Secret `<name>-ca`, keys `tls.crt`, `tls.key` (the Kubernetes CA);
//! - `workload/bootstrap-token-<id>.yaml`: the join token Secret for the *workload*
//!   cluster's `kube-system` (kept apart: never part of the management-cluster bundle).
//!
//! Any other `*.yaml` directly in `secrets/` must be a SOPS-encrypted Secret (for example
//! the vSphere credentials) and is passed through too.

use crate::inputs::{SealedFile, SEALED_DIR, WORKLOAD_DIR};
use crate::model::ClusterConfig;
use crate::resource::{self, Resource};
use crate::secrets::sops::{self, CryptRule, Plain, SopsFile};
use crate::secrets::talos::SecretsBundle;
use crate::yaml;
use crate::yaml::Scrubbed;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::{json, Map, Value};

/// Annotation: sha256 of the `secrets.age` a file was sealed from.
pub const ANN_BUNDLE: &str = "capstan.dev/secrets-age-sha256";
/// Annotations with the CA fingerprints (public), checked against `cluster.yaml`.
pub const ANN_FINGERPRINTS: [(&str, FingerprintField); 4] = [
    ("capstan.dev/kubernetes-ca", FingerprintField::KubernetesCa),
    ("capstan.dev/etcd-ca", FingerprintField::EtcdCa),
    ("capstan.dev/front-proxy-ca", FingerprintField::FrontProxyCa),
    (
        "capstan.dev/service-account-key",
        FingerprintField::ServiceAccountKey,
    ),
];
/// The label that makes `clusterctl move` save an object whatever its owners and name
/// (cluster-api v1.10.10 `cmd/clusterctl/api/v1alpha3/labels.go:35`,
/// `cmd/clusterctl/client/cluster/objectgraph.go:317-318` sets `forceMove`, `:679-688`
/// `getMoveNodes` keeps every node with it). Without it `<cluster>-talos` is never saved (no
/// owner in the graph, and `talos` is no purpose suffix of `util/secret/consts.go:55`), nor
/// is `<cluster>-ca` once the sops-secrets-operator owns it (`objectgraph.go:705-710`: a
/// Secret with an owner is never linked to its Cluster by name, and a SopsSecret is not in
/// the graph).
pub const MOVE_LABEL: &str = "clusterctl.cluster.x-k8s.io/move";

/// The values SOPS encrypts: everything under `data` and `stringData`.
pub const ENCRYPTED_REGEX: &str = "^(data|stringData)$";

/// Which fingerprint an annotation holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FingerprintField {
    /// Kubernetes CA.
    KubernetesCa,
    /// etcd CA.
    EtcdCa,
    /// Front-proxy CA.
    FrontProxyCa,
    /// Service-account public key.
    ServiceAccountKey,
}

fn fingerprint_of(f: &crate::model::Fingerprints, which: FingerprintField) -> &str {
    match which {
        FingerprintField::KubernetesCa => &f.kubernetes_ca,
        FingerprintField::EtcdCa => &f.etcd_ca,
        FingerprintField::FrontProxyCa => &f.front_proxy_ca,
        FingerprintField::ServiceAccountKey => &f.service_account_key,
    }
}

/// Why sealing or the render-time check failed. Never contains secret material.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// The cluster has no imported bundle.
    #[error("{dir}/secrets.age is missing: import the cluster first (`capstan import kubeadm`); rendering without the imported secrets would let the providers generate a new PKI and lock the cluster out")]
    NoBundle {
        /// The cluster directory.
        dir: String,
    },
    /// A sealed file is missing.
    #[error("{path} is missing: run `capstan secrets seal {dir}`")]
    Missing {
        /// The expected file.
        path: String,
        /// The cluster directory.
        dir: String,
    },
    /// A sealed file was sealed from another `secrets.age`.
    #[error("{path} is stale: it was sealed from another secrets.age (sha256 {found}, now {expected}); run `capstan secrets seal {dir}`")]
    Stale {
        /// The file.
        path: String,
        /// Recorded digest.
        found: String,
        /// Current digest.
        expected: String,
        /// The cluster directory.
        dir: String,
    },
    /// The sealed CA fingerprints differ from `cluster.yaml`'s provenance.
    #[error("{path}: metadata.annotations.{annotation} is {found} but {cluster_file} spec.provenance records {expected}: these secrets come from a different import, and applying them would replace the cluster's CA and lock it out; restore the original secrets.age, or fix the provenance only if the CA really changed")]
    Fingerprint {
        /// The file.
        path: String,
        /// The annotation.
        annotation: String,
        /// What the file says.
        found: String,
        /// What `cluster.yaml` says.
        expected: String,
        /// The cluster file.
        cluster_file: String,
    },
    /// A file in `secrets/` is not what it must be.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// No recipients to seal to.
    #[error("{file}: spec.recipients: at least one age recipient is required to seal secrets")]
    NoRecipients {
        /// The cluster file.
        file: String,
    },
    /// A SOPS error.
    #[error(transparent)]
    Sops(#[from] sops::SopsError),
    /// A recipient error.
    #[error(transparent)]
    Secrets(#[from] crate::secrets::SecretsError),
    /// A bundle error.
    #[error(transparent)]
    Bundle(#[from] crate::secrets::talos::SecretsBundleError),
}

/// The Secrets a restore of the management cluster needs, in the cluster's namespace: the
/// Talos secrets bundle, the Kubernetes CA and the vSphere identity Secret
/// (`spec.vsphere.identityRef` of kind `Secret`). Each carries [`MOVE_LABEL`] on the live
/// object so `clusterctl move` saves it; `backup check` requires each of them.
pub fn restore_secret_names(config: &ClusterConfig) -> Vec<String> {
    let name = &config.metadata.name;
    let mut out = vec![format!("{name}-talos"), format!("{name}-ca")];
    if let Some(identity) = identity_secret_name(config) {
        if !out.iter().any(|n| n == identity) {
            out.push(identity.to_string());
        }
    }
    out
}

/// The file names sealing produces for a cluster (relative to the cluster directory).
pub fn management_files(name: &str) -> [String; 2] {
    [
        format!("{SEALED_DIR}/{name}-talos.yaml"),
        format!("{SEALED_DIR}/{name}-ca.yaml"),
    ]
}

fn annotations(
    secrets_age_sha256: &str,
    fps: &crate::secrets::talos::CaFingerprints,
) -> Map<String, Value> {
    let mut a = Map::new();
    a.insert(ANN_BUNDLE.into(), json!(secrets_age_sha256));
    a.insert(ANN_FINGERPRINTS[0].0.into(), json!(fps.k8s));
    a.insert(ANN_FINGERPRINTS[1].0.into(), json!(fps.etcd));
    a.insert(ANN_FINGERPRINTS[2].0.into(), json!(fps.k8saggregator));
    a.insert(ANN_FINGERPRINTS[3].0.into(), json!(fps.k8sserviceaccount));
    a
}

fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

/// Everything sealing needs.
pub struct SealRequest<'a> {
    /// The cluster.
    pub config: &'a ClusterConfig,
    /// `cluster.yaml` as the user can find it.
    pub cluster_file: &'a str,
    /// sha256 (hex) of the `secrets.age` bytes.
    pub secrets_age_sha256: &'a str,
    /// The decrypted bundle.
    pub bundle: &'a SecretsBundle,
    /// Previous sealed files, decrypted, by relative path (for stable ciphertext).
    pub previous: Vec<(String, SopsFile, Plain)>,
    /// RFC 3339 UTC time for `sops.lastmodified` of files whose content changes.
    pub lastmodified: &'a str,
}

/// Seal the provider Secrets and the workload join-token Secret. Returns (relative path,
/// text) per file; files whose plaintext did not change come back byte-identical.
pub fn seal(req: SealRequest<'_>) -> Result<Vec<(String, String)>, SealError> {
    let cfg = req.config;
    if cfg.spec.recipients.is_empty() {
        return Err(SealError::NoRecipients {
            file: req.cluster_file.into(),
        });
    }
    let recipients = crate::secrets::parse_spec_recipients(req.cluster_file, &cfg.spec.recipients)?;
    let fps = req.bundle.fingerprints()?;
    let ann = annotations(req.secrets_age_sha256, &fps);
    let name = &cfg.metadata.name;
    // The move label is added where the sealed files are passed on (`sealed_resources`), not
    // here: re-sealing unchanged plaintext keeps every existing file byte for byte.
    let labels = json!({"cluster.x-k8s.io/cluster-name": name});
    let bundle_yaml = req.bundle.to_yaml();
    let invalid = |message: &str| SealError::Invalid {
        path: "secrets.age".into(),
        message: message.into(),
    };
    let certs = req
        .bundle
        .certs
        .as_ref()
        .ok_or_else(|| invalid("the bundle has no certs"))?;
    let k8s = certs
        .k8s
        .as_ref()
        .ok_or_else(|| invalid("the bundle has no certs.k8s"))?;
    let token = req
        .bundle
        .secrets
        .as_ref()
        .map(|s| s.bootstraptoken.clone())
        .ok_or_else(|| invalid("the bundle has no secrets.bootstraptoken"))?;
    let (token_id, token_secret) = token
        .split_once('.')
        .ok_or_else(|| invalid("malformed bootstrap token"))?;

    // Plaintext trees live only for the duration of this function.
    let talos = Scrubbed(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": format!("{name}-talos"), "namespace": cfg.metadata.namespace, "labels": labels, "annotations": ann},
        "type": "Opaque",
        "data": {"bundle": b64(bundle_yaml.as_bytes())},
    }));
    let ca = Scrubbed(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": format!("{name}-ca"), "namespace": cfg.metadata.namespace, "labels": labels, "annotations": ann},
        "type": "cluster.x-k8s.io/secret",
        "data": {"tls.crt": b64(&k8s.crt), "tls.key": b64(&k8s.key)},
    }));
    let join = Scrubbed(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": format!("bootstrap-token-{token_id}"), "namespace": "kube-system", "annotations": ann},
        "type": "bootstrap.kubernetes.io/token",
        "data": {
            "auth-extra-groups": b64(b"system:bootstrappers:nodes"),
            "token-id": b64(token_id.as_bytes()),
            "token-secret": b64(token_secret.as_bytes()),
            "usage-bootstrap-authentication": b64(b"true"),
            "usage-bootstrap-signing": b64(b"true"),
        },
    }));
    let [talos_path, ca_path] = management_files(name);
    let join_path = format!("{SEALED_DIR}/{WORKLOAD_DIR}/bootstrap-token-{token_id}.yaml");
    let mut out = Vec::with_capacity(3);
    for (rel, tree) in [(talos_path, &talos), (ca_path, &ca), (join_path, &join)] {
        let prev = req
            .previous
            .iter()
            .find(|(p, _, _)| *p == rel)
            .map(|(_, f, p)| (f, p));
        // When only the readable digest annotation moves (another Secret of the bundle
        // changed), the MAC (over encrypted values only) is unchanged, so sops::encrypt keeps
        // `lastmodified`: values, MAC and age stanzas stay byte-identical.
        let text = encrypt_secret(&rel, &tree.0, &recipients, req.lastmodified, prev)?;
        out.push((rel, text));
    }
    Ok(out)
}

/// The name of the Secret `spec.vsphere.identityRef` names, when its kind is `Secret`.
pub fn identity_secret_name(config: &ClusterConfig) -> Option<&str> {
    config
        .spec
        .vsphere
        .as_ref()
        .and_then(|v| v.identity_ref.as_ref())
        .filter(|r| r.kind == crate::model::IdentityKind::Secret)
        .map(|r| r.name.as_str())
}

/// The data keys CAPV reads from a vSphere identity Secret (`identityRef.kind: Secret`).
pub const IDENTITY_KEYS: [&str; 2] = ["password", "username"];

/// Seal the vSphere credentials as the Secret `spec.vsphere.identityRef` names (kind
/// `Secret`): keys `username` and `password`, in the cluster's namespace, encrypted to
/// `spec.recipients`. Returns (relative path, text). CAPV takes ownership of the Secret and
/// deletes it with the Cluster; Argo CD recreates it from this file.
pub fn identity_secret(
    config: &ClusterConfig,
    cluster_file: &str,
    username: &str,
    password: &str,
    lastmodified: &str,
) -> Result<(String, String), SealError> {
    let invalid = |message: String| SealError::Invalid {
        path: cluster_file.into(),
        message,
    };
    let name = match config.spec.vsphere.as_ref().and_then(|v| v.identity_ref.as_ref()) {
        Some(r) if r.kind == crate::model::IdentityKind::Secret => r.name.clone(),
        Some(_) => {
            return Err(invalid(
                "spec.vsphere.identityRef: kind `VSphereClusterIdentity` names a cluster-scoped identity whose Secret \
                 lives in CAPV's namespace: create it there; only kind `Secret` is sealed with the cluster"
                    .into(),
            ))
        }
        None => {
            return Err(invalid(
                "spec.vsphere.identityRef: expected `{kind: Secret, name: …}` naming the Secret to seal".into(),
            ))
        }
    };
    if username.is_empty() || password.is_empty() {
        return Err(invalid(
            "the vSphere username and password must not be empty".into(),
        ));
    }
    if config.spec.recipients.is_empty() {
        return Err(SealError::NoRecipients {
            file: cluster_file.into(),
        });
    }
    let recipients = crate::secrets::parse_spec_recipients(cluster_file, &config.spec.recipients)?;
    let tree = Scrubbed(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": config.metadata.namespace,
            "labels": {"cluster.x-k8s.io/cluster-name": config.metadata.name},
        },
        "type": "Opaque",
        "data": {"password": b64(password.as_bytes()), "username": b64(username.as_bytes())},
    }));
    let rel = format!("{SEALED_DIR}/{name}.yaml");
    let text = encrypt_secret(&rel, &tree.0, &recipients, lastmodified, None)?;
    Ok((rel, text))
}

/// A Secret's tree as a sealed file: its `data`/`stringData` values encrypted to
/// `recipients`, the MAC over encrypted values only (so readable metadata may move).
fn encrypt_secret(
    rel: &str,
    tree: &Value,
    recipients: &[age::x25519::Recipient],
    lastmodified: &str,
    previous: Option<(&SopsFile, &Plain)>,
) -> Result<String, SealError> {
    Ok(sops::encrypt(
        rel,
        tree,
        recipients,
        CryptRule::EncryptedRegex(ENCRYPTED_REGEX.into()),
        true,
        lastmodified,
        previous,
    )?)
}

/// Set the bundle digest annotation of a decrypted sealed file's tree (for rekey).
pub fn with_bundle_digest(tree: &Value, sha256: &str) -> Value {
    let mut t = tree.clone();
    if let Some(ann) = t
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        if ann.contains_key(ANN_BUNDLE) {
            ann.insert(ANN_BUNDLE.into(), json!(sha256));
        }
    }
    t
}

/// What the providers need of the `i`-th of [`management_files`]: its type, its data keys
/// (exactly those sealing writes) and the cluster-name label sealing writes.
fn check_provider_secret(doc: &Value, i: usize, cluster: &str) -> Result<(), String> {
    let (ty, keys): (&str, &[&str]) = if i == 0 {
        ("Opaque", &["bundle"])
    } else {
        ("cluster.x-k8s.io/secret", &["tls.crt", "tls.key"])
    };
    let found = resource::field(doc, "type").and_then(Value::as_str);
    if found != Some(ty) {
        return Err(format!(
            "type: expected `{ty}`, found {}",
            found.map_or("nothing".to_string(), |t| format!("`{t}`"))
        ));
    }
    if resource::field(doc, "stringData").is_some() {
        return Err(
            "stringData: not expected; the providers read `data` as sealing writes it".into(),
        );
    }
    let mut data: Vec<&str> = resource::field(doc, "data")
        .and_then(Value::as_object)
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    data.sort_unstable();
    if data != keys {
        return Err(format!(
            "data: expected the keys {}, found {}",
            keys.join(", "),
            if data.is_empty() {
                "none".to_string()
            } else {
                data.join(", ")
            }
        ));
    }
    let label = resource::at(
        doc,
        &["metadata", "labels", "cluster.x-k8s.io/cluster-name"],
    )
    .and_then(Value::as_str);
    if label != Some(cluster) {
        return Err(format!(
            "metadata.labels.cluster.x-k8s.io/cluster-name: expected `{cluster}`, found {}",
            label.map_or("nothing".to_string(), |l| format!("`{l}`"))
        ));
    }
    Ok(())
}

/// One warning per sealed file whose `sops.age` stanzas lack a recipient listed in
/// `spec.recipients` (that recipient's holder cannot decrypt it), naming the file, the
/// missing recipients and the fix. Files that do not parse as SOPS are left to
/// [`sealed_resources`], which refuses them.
pub fn missing_recipients(config: &ClusterConfig, dir: &str, sealed: &[SealedFile]) -> Vec<String> {
    let mut out = Vec::new();
    for s in sealed {
        let Ok(file) = SopsFile::parse(&s.path, &s.text) else {
            continue;
        };
        let has: std::collections::BTreeSet<String> = file
            .recipients()
            .iter()
            .map(|r| r.trim().to_string())
            .collect();
        let missing: Vec<String> = config
            .spec
            .recipients
            .iter()
            .map(|r| r.trim())
            .filter(|r| !has.contains(*r))
            .map(|r| crate::printable::line(r).into_owned())
            .collect();
        if !missing.is_empty() {
            out.push(format!(
                "{}: not encrypted to {} listed in spec.recipients: {}; run `capstan secrets rekey {}` \
                 to re-encrypt it to every listed recipient",
                crate::printable::line(&s.path),
                if missing.len() == 1 { "a recipient" } else { "recipients" },
                missing.join(", "),
                crate::printable::line(dir)
            ));
        }
    }
    out
}

/// The sealed management-cluster Secrets of a cluster, checked without any key: present,
/// SOPS-encrypted, sealed from `secrets_age_sha256`, with the CA fingerprints recorded in
/// `cluster.yaml`. Returns them as verbatim resources, expected files first.
pub fn sealed_resources(
    config: &ClusterConfig,
    cluster_file: &str,
    dir: &str,
    secrets_age_sha256: Option<&str>,
    sealed: &[SealedFile],
) -> Result<Vec<Resource>, SealError> {
    let Some(digest) = secrets_age_sha256 else {
        return Err(SealError::NoBundle { dir: dir.into() });
    };
    let expected = management_files(&config.metadata.name);
    let mut ordered: Vec<&SealedFile> = Vec::with_capacity(sealed.len());
    for rel in &expected {
        match sealed.iter().find(|s| &s.rel == rel) {
            Some(s) => ordered.push(s),
            None => {
                return Err(SealError::Missing {
                    path: format!("{dir}/{rel}"),
                    dir: dir.into(),
                })
            }
        }
    }
    ordered.extend(sealed.iter().filter(|s| !expected.contains(&s.rel)));
    let mut out = Vec::with_capacity(ordered.len());
    let mut names = std::collections::BTreeMap::new();
    let restore = restore_secret_names(config);
    for s in ordered {
        let invalid = |message: String| SealError::Invalid {
            path: s.path.clone(),
            message,
        };
        let mut doc =
            yaml::parse_one(&s.text).map_err(|e| invalid(format!("invalid YAML: {e}")))?;
        if resource::field(&doc, "sops").is_none() {
            return Err(invalid(
                "not SOPS-encrypted: a plaintext Secret must never be committed; encrypt it with sops \
                 (encrypted_regex `^(data|stringData)$`) or let `capstan secrets seal` write it"
                    .into(),
            ));
        }
        let top = |k: &str| resource::field(&doc, k).and_then(Value::as_str);
        if top("apiVersion") != Some("v1") || top("kind") != Some("Secret") {
            return Err(invalid("expected a v1 Secret".into()));
        }
        let ns = resource::at(&doc, &["metadata", "namespace"]).and_then(Value::as_str);
        if ns != Some(config.metadata.namespace.as_str()) {
            return Err(invalid(format!(
                "metadata.namespace: expected `{}` (the cluster's namespace), found {}",
                config.metadata.namespace,
                ns.map_or("nothing".to_string(), |n| format!("`{n}`"))
            )));
        }
        let stem = s
            .rel
            .rsplit('/')
            .next()
            .and_then(|f| f.strip_suffix(".yaml").or_else(|| f.strip_suffix(".yml")))
            .unwrap_or_default();
        let name = resource::at(&doc, &["metadata", "name"]).and_then(Value::as_str);
        if name != Some(stem) {
            return Err(invalid(format!(
                "metadata.name: expected `{stem}` (a sealed Secret is named as its file), found {}; \
                 metadata is outside the SOPS MAC, so a renamed Secret is refused rather than applied \
                 under another name",
                name.map_or("nothing".to_string(), |n| format!("`{n}`"))
            )));
        }
        if let Some(first) = names.insert(stem, &s.path) {
            return Err(invalid(format!(
                "metadata.name: `{stem}` is also the Secret of {first}: one Secret, one file"
            )));
        }
        if let Some(i) = expected.iter().position(|e| e == &s.rel) {
            check_provider_secret(&doc, i, &config.metadata.name).map_err(invalid)?;
        }
        if identity_secret_name(config) == Some(stem) {
            let missing: Vec<&str> = IDENTITY_KEYS
                .into_iter()
                .filter(|k| {
                    resource::at(&doc, &["data", k]).is_none()
                        && resource::at(&doc, &["stringData", k]).is_none()
                })
                .collect();
            if !missing.is_empty() {
                return Err(invalid(format!(
                    "the vSphere identity Secret (spec.vsphere.identityRef) lacks {}: CAPV reads `username` and \
                     `password`; seal it with `capstan secrets vsphere-identity`",
                    missing.join(", ")
                )));
            }
        }
        sops::SopsFile::parse(&s.path, &s.text)?
            .check_ciphertext(&s.path, &["data", "stringData"])?;
        if expected.contains(&s.rel) {
            let ann = |k: &str| {
                resource::at(&doc, &["metadata", "annotations", k]).and_then(Value::as_str)
            };
            match ann(ANN_BUNDLE) {
                Some(d) if d == digest => {}
                found => {
                    return Err(SealError::Stale {
                        path: s.path.clone(),
                        found: found.unwrap_or("none").into(),
                        expected: digest.into(),
                        dir: dir.into(),
                    })
                }
            }
            if let Some(fps) = config
                .spec
                .provenance
                .as_ref()
                .and_then(|p| p.fingerprints.as_ref())
            {
                for (key, which) in ANN_FINGERPRINTS {
                    let want = fingerprint_of(fps, which);
                    let found = ann(key).unwrap_or("none");
                    if found != want {
                        return Err(SealError::Fingerprint {
                            path: s.path.clone(),
                            annotation: key.into(),
                            found: found.into(),
                            expected: want.into(),
                            cluster_file: cluster_file.into(),
                        });
                    }
                }
            }
        }
        let raw = if restore.iter().any(|n| n == stem) && !has_move_label(&doc) {
            let (text, labelled) = with_move_label(&s.path, &s.text, &doc, dir, config)?;
            doc = labelled;
            resource::Verbatim::new(text)
        } else {
            resource::Verbatim {
                text: s.text.clone(),
                sha256: s.sha256.clone(),
            }
        };
        out.push(Resource {
            value: doc,
            origin: s.path.clone(),
            raw: Some(raw),
            template: false,
        });
    }
    Ok(out)
}

/// Whether an object carries [`MOVE_LABEL`] (any value: clusterctl tests for the key).
pub fn has_move_label(doc: &Value) -> bool {
    resource::at(doc, &["metadata", "labels"])
        .and_then(Value::as_object)
        .is_some_and(|l| l.contains_key(MOVE_LABEL))
}

/// A sealed Secret a restore needs, sealed before sealing wrote [`MOVE_LABEL`]: the label
/// added to its `metadata.labels` in the text as passed on (render, `argocd generate`), every
/// other line kept. Labels are readable metadata outside the SOPS MAC when the file says
/// `mac_only_encrypted: true` (as every file capstan seals does: the MAC then covers the
/// encrypted values only, getsops/sops v3.13.2 `sops.go` `Tree.Encrypt`), so the file still
/// decrypts and verifies with sops, KSOPS and Flux, and no sealed file in git needs
/// re-sealing. A file whose MAC covers its metadata cannot be changed without the key:
/// refused, naming the command that re-seals it.
fn with_move_label(
    path: &str,
    text: &str,
    doc: &Value,
    dir: &str,
    config: &ClusterConfig,
) -> Result<(String, Value), SealError> {
    let reseal = if identity_secret_name(config).is_some_and(|n| {
        resource::at(doc, &["metadata", "name"]).and_then(Value::as_str) == Some(n)
    }) {
        format!("`capstan secrets vsphere-identity {dir}`")
    } else {
        format!("`capstan secrets seal {dir}`")
    };
    let invalid = |why: &str| {
        SealError::Invalid {
        path: path.to_string(),
        message: format!(
            "metadata.labels lacks `{MOVE_LABEL}: \"\"`, which makes `clusterctl move` save this Secret \
             into a backup (a restore without it loses the cluster's PKI); {why}: re-seal it with {reseal}, \
             or add the label under metadata.labels with `sops edit`"
        ),
    }
    };
    let mac_only =
        resource::at(doc, &["sops", "mac_only_encrypted"]).and_then(Value::as_bool) == Some(true);
    if !mac_only {
        return Err(invalid(
            "its SOPS MAC covers the metadata (no `mac_only_encrypted: true`), so adding the label needs the key",
        ));
    }
    let mut labels = resource::at(doc, &["metadata", "labels"])
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if resource::at(doc, &["metadata", "labels"]).is_some_and(|l| !l.is_object()) {
        return Err(invalid("metadata.labels is not a mapping"));
    }
    labels.insert(MOVE_LABEL.into(), Value::String(String::new()));
    let mut expected = doc.clone();
    if let Some(meta) = expected.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("labels".into(), Value::Object(labels.clone()));
    }
    let labelled = yaml::replace_block(text, "metadata", "labels", &Value::Object(labels))
        .ok_or_else(|| invalid("its metadata is not a block mapping indented two spaces"))?;
    // The edit must change nothing but the label.
    match yaml::parse_one(&labelled) {
        Ok(back) if back == expected => Ok((labelled, back)),
        _ => Err(invalid(
            "the label could not be added without changing another line",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_annotation_is_replaced_only_where_present() {
        let t = json!({"metadata": {"annotations": {ANN_BUNDLE: "old", "x": "y"}}});
        assert_eq!(
            with_bundle_digest(&t, "new")
                .pointer("/metadata/annotations")
                .unwrap(),
            &json!({ANN_BUNDLE: "new", "x": "y"})
        );
        let u = json!({"metadata": {"annotations": {"x": "y"}}});
        assert_eq!(with_bundle_digest(&u, "new"), u);
    }
}
