//! The Talos secrets bundle (`talosctl gen secrets` → `secrets.yaml`): strict parsing,
//! byte-exact writing in talosctl's layout, Talos's own `Bundle.Validate` checks, CA
//! fingerprints, and building a bundle from kubeadm's PKI the way
//! `talosctl gen secrets --from-kubernetes-pki` does.
//!
//! The file keeps certificates and keys as standard base64 of the whole PEM file; in memory
//! they are the PEM bytes. Everything secret is zeroized on drop and redacted from `Debug`.
//! Depends on [`crate::secrets::pki`] for key and certificate parsing and generation.

use crate::yaml::scrub;
use crate::yaml::{join_path as join, kind_of};
use std::fmt;
use std::time::SystemTime;

use base64::Engine as _;
use serde_json::{Map, Value};
use zeroize::Zeroizing;

use crate::secrets::pki::{self, CertAndKey, PkiError, PrivateKeyPem};

/// Errors from reading, checking or building a bundle. Each names the file (`label`) and
/// the YAML path; none carries secret material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretsBundleError {
    /// The file is not UTF-8 text.
    #[error("{label}: not UTF-8 text; expected a YAML secrets bundle")]
    NotUtf8 {
        /// The file the problem is in.
        label: String,
    },
    /// YAML syntax error (the parser's message, with line and column, no source text).
    #[error("{label}: invalid YAML: {message}")]
    Yaml {
        /// The file the problem is in.
        label: String,
        /// The YAML parser's message.
        message: String,
    },
    /// A mapping has a key talosctl's layout does not know.
    #[error("{label}: {path}: unknown key; expected one of {expected}")]
    UnknownKey {
        /// The file the problem is in.
        label: String,
        /// The YAML path of the unknown key.
        path: String,
        /// The keys allowed there, comma-separated.
        expected: String,
    },
    /// A field holds a value of the wrong YAML type.
    #[error("{label}: {path}: expected {expected}, found {found}")]
    WrongType {
        /// The file the problem is in.
        label: String,
        /// The YAML path of the field (`certs.k8s`).
        path: String,
        /// What the field should hold (`a mapping`, `a string`).
        expected: &'static str,
        /// The YAML type found instead (`a sequence`, `null`, …).
        found: &'static str,
    },
    /// A `crt` or `key` field is not valid standard base64.
    #[error("{label}: {path}: expected standard base64 (with padding) of a PEM file")]
    Base64 {
        /// The file the problem is in.
        label: String,
        /// The YAML path of the field (`certs.os.key`).
        path: String,
    },
    /// A section needed for fingerprints is absent.
    #[error("{label}: {path} is missing")]
    Missing {
        /// The file the problem is in.
        label: String,
        /// The YAML path of the missing section.
        path: String,
    },
    /// A certificate or key in the bundle does not parse.
    // The message names the cause, so it is not also `source()`: a printed chain would
    // repeat it.
    #[error("{label}: {path}: {error}")]
    Pki {
        /// The file the problem is in.
        label: String,
        /// The YAML path of the certificate or key (`certs.k8s.crt`).
        path: String,
        /// Why it does not parse.
        error: Box<PkiError>,
    },
    /// `Bundle.Validate` failed; `problems` are Talos's messages joined with `; `.
    #[error("{label}: failed to validate secrets bundle: {problems}")]
    Invalid {
        /// The file the problem is in.
        label: String,
        /// Talos's messages, joined with `; `.
        problems: String,
    },
    /// Generating a certificate, token or secret for a new bundle failed.
    // The message names the cause, so it is not also `source()`: a printed chain would
    // repeat it.
    #[error("{label}: cannot generate {what}: {error}")]
    Generate {
        /// The bundle being built.
        label: String,
        /// What was being generated (`the Talos OS CA`, `cluster.id`, …).
        what: &'static str,
        /// Why generation failed.
        error: Box<PkiError>,
    },
}

/// One problem found by [`SecretsBundle::validate`], worded as Talos words it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleProblem {
    /// The YAML path concerned (`cluster.secret`, `certs.os`, …).
    pub path: String,
    /// Talos's message, e.g. `cluster.secret is required`.
    pub message: String,
}

impl fmt::Display for BundleProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// `cluster:`
pub struct ClusterSecrets {
    /// Cluster id (not secret); URL-safe base64 before Talos 1.14, standard after. Never
    /// decoded.
    pub id: String,
    /// The cluster secret (never decoded).
    pub secret: Zeroizing<String>,
}

impl fmt::Debug for ClusterSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterSecrets")
            .field("id", &self.id)
            .field("secret", &format_args!("[redacted]"))
            .finish()
    }
}

/// `secrets:`
pub struct KubeSecrets {
    /// The Kubernetes bootstrap token, `<id>.<secret>`.
    pub bootstraptoken: Zeroizing<String>,
    /// The secretbox encryption-at-rest key (base64), `None` when absent or empty.
    pub secretboxencryptionsecret: Option<Zeroizing<String>>,
    /// The aescbc encryption-at-rest key (base64), `None` when absent or empty.
    pub aescbcencryptionsecret: Option<Zeroizing<String>>,
}

impl fmt::Debug for KubeSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// `trustdinfo:`
pub struct TrustdInfo {
    /// The token machines use to authenticate to trustd.
    pub token: Zeroizing<String>,
}

impl fmt::Debug for TrustdInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// A `crt`/`key` pair as PEM bytes (empty when absent from the file, as in Talos).
pub struct CertKeyPem {
    /// The certificate PEM bytes.
    pub crt: Vec<u8>,
    /// The private key PEM bytes.
    pub key: Zeroizing<Vec<u8>>,
}

impl fmt::Debug for CertKeyPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertKeyPem")
            .field("crt", &format_args!("<{} bytes>", self.crt.len()))
            .field("key", &format_args!("[redacted]"))
            .finish()
    }
}

impl From<CertAndKey> for CertKeyPem {
    fn from(ca: CertAndKey) -> Self {
        let (crt, key) = ca.into_parts();
        CertKeyPem { crt, key }
    }
}

/// A `key` alone as PEM bytes (the service-account key).
pub struct KeyPem {
    /// The private key PEM bytes.
    pub key: Zeroizing<Vec<u8>>,
}

impl fmt::Debug for KeyPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// `certs:`
#[derive(Debug)]
pub struct Certs {
    /// The etcd CA.
    pub etcd: Option<CertKeyPem>,
    /// The Kubernetes CA.
    pub k8s: Option<CertKeyPem>,
    /// The front-proxy (aggregation layer) CA.
    pub k8saggregator: Option<CertKeyPem>,
    /// The service-account signing key.
    pub k8sserviceaccount: Option<KeyPem>,
    /// The Talos OS CA.
    pub os: Option<CertKeyPem>,
}

/// A Talos secrets bundle, mirroring talosctl's `secrets.yaml`. A section absent from the
/// file (or `null`) is `None`, a string absent is empty, as in Talos's Go structs; use
/// [`SecretsBundle::validate`] to find what is missing.
pub struct SecretsBundle {
    label: String,
    /// `cluster:` (id and secret).
    pub cluster: Option<ClusterSecrets>,
    /// `secrets:` (bootstrap token and encryption secret).
    pub secrets: Option<KubeSecrets>,
    /// `trustdinfo:` (trustd token).
    pub trustdinfo: Option<TrustdInfo>,
    /// `certs:` (CAs and the service-account key).
    pub certs: Option<Certs>,
}

impl fmt::Debug for SecretsBundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// SHA-256 fingerprints (`sha256:<hex>`) of the bundle's CA certificates (DER) and of the
/// service-account public key (SubjectPublicKeyInfo DER derived from the private key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaFingerprints {
    /// The Kubernetes CA certificate.
    pub k8s: String,
    /// The etcd CA certificate.
    pub etcd: String,
    /// The front-proxy (aggregator) CA certificate.
    pub k8saggregator: String,
    /// The Talos OS CA certificate.
    pub os: String,
    /// The service-account public key.
    pub k8sserviceaccount: String,
}

/// The kubeadm CAs and service-account key, already checked by [`crate::secrets::pki`].
pub struct KubernetesPki {
    /// `ca.crt` + `ca.key`.
    pub k8s: CertAndKey,
    /// `etcd/ca.crt` + `etcd/ca.key`.
    pub etcd: CertAndKey,
    /// `front-proxy-ca.crt` + `front-proxy-ca.key`.
    pub k8saggregator: CertAndKey,
    /// `sa.key`.
    pub k8sserviceaccount: PrivateKeyPem,
}

/// The encryption-at-rest secret to carry over.
pub enum EncryptionSecret {
    /// Becomes `secrets.secretboxencryptionsecret` (Talos names the key `key2`).
    Secretbox(Zeroizing<String>),
    /// Becomes `secrets.aescbcencryptionsecret` (Talos names the key `key1`).
    Aescbc(Zeroizing<String>),
}

impl fmt::Debug for EncryptionSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncryptionSecret::Secretbox(_) => f.write_str("Secretbox([redacted])"),
            EncryptionSecret::Aescbc(_) => f.write_str("Aescbc([redacted])"),
        }
    }
}

const TOP_KEYS: &[&str] = &["cluster", "secrets", "trustdinfo", "certs"];
const CLUSTER_KEYS: &[&str] = &["id", "secret"];
const SECRETS_KEYS: &[&str] = &[
    "bootstraptoken",
    "aescbcencryptionsecret",
    "secretboxencryptionsecret",
];
const TRUSTD_KEYS: &[&str] = &["token"];
const CERTS_KEYS: &[&str] = &["etcd", "k8s", "k8saggregator", "k8sserviceaccount", "os"];
const PAIR_KEYS: &[&str] = &["crt", "key"];
const KEY_KEYS: &[&str] = &["key"];

impl SecretsBundle {
    /// The label (file name) given to [`Self::parse`] or [`Self::from_kubernetes_pki`].
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Parse a bundle strictly: unknown keys and wrong types are errors naming the path;
    /// missing fields are allowed (see [`Self::validate`]).
    pub fn parse(label: &str, bytes: &[u8]) -> Result<Self, SecretsBundleError> {
        let text = std::str::from_utf8(bytes).map_err(|_| SecretsBundleError::NotUtf8 {
            label: label.to_string(),
        })?;
        let mut docs = crate::yaml::parse_stream(text).map_err(|e| SecretsBundleError::Yaml {
            label: label.to_string(),
            message: e.message,
        })?;
        let mut root: Value = if docs.len() == 1 {
            docs.remove(0)
        } else {
            Value::Null
        };
        let result = Reader { label }.bundle(&root);
        scrub(&mut root);
        result
    }

    /// Write the bundle exactly as talosctl does: keys in Go struct order, 4-space
    /// indentation, `crt`/`key` as standard base64 of the PEM bytes, absent encryption
    /// secrets omitted, scalars quoted only where Go's YAML encoder quotes them.
    pub fn to_yaml(&self) -> Zeroizing<String> {
        let b64 =
            |bytes: &[u8]| Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(bytes));
        let mut out = Zeroizing::new(String::with_capacity(8192));
        let w = &mut *out;
        match &self.cluster {
            None => w.push_str("cluster: null\n"),
            Some(c) => {
                w.push_str("cluster:\n");
                entry(w, 1, "id", &c.id);
                entry(w, 1, "secret", &c.secret);
            }
        }
        match &self.secrets {
            None => w.push_str("secrets: null\n"),
            Some(s) => {
                w.push_str("secrets:\n");
                entry(w, 1, "bootstraptoken", &s.bootstraptoken);
                // Go struct order: AESCBCEncryptionSecret before SecretboxEncryptionSecret.
                if let Some(v) = &s.aescbcencryptionsecret {
                    entry(w, 1, "aescbcencryptionsecret", v);
                }
                if let Some(v) = &s.secretboxencryptionsecret {
                    entry(w, 1, "secretboxencryptionsecret", v);
                }
            }
        }
        match &self.trustdinfo {
            None => w.push_str("trustdinfo: null\n"),
            Some(t) => {
                w.push_str("trustdinfo:\n");
                entry(w, 1, "token", &t.token);
            }
        }
        match &self.certs {
            None => w.push_str("certs: null\n"),
            Some(c) => {
                w.push_str("certs:\n");
                let pair = |w: &mut String, name: &str, p: &Option<CertKeyPem>| match p {
                    None => null_entry(w, 1, name),
                    Some(p) => {
                        section(w, 1, name);
                        entry(w, 2, "crt", &b64(&p.crt));
                        entry(w, 2, "key", &b64(&p.key));
                    }
                };
                pair(w, "etcd", &c.etcd);
                pair(w, "k8s", &c.k8s);
                pair(w, "k8saggregator", &c.k8saggregator);
                match &c.k8sserviceaccount {
                    None => null_entry(w, 1, "k8sserviceaccount"),
                    Some(k) => {
                        section(w, 1, "k8sserviceaccount");
                        entry(w, 2, "key", &b64(&k.key));
                    }
                }
                pair(w, "os", &c.os);
            }
        }
        out
    }

    /// Talos's `Bundle.Validate` (v1.11+), with its messages: every missing section or
    /// field, exactly one encryption secret, and each CA pair / the service-account key
    /// parseable. Also reports a CA key that does not belong to its certificate.
    pub fn validate(&self) -> Result<(), Vec<BundleProblem>> {
        let mut problems = Vec::new();
        let mut add = |path: &str, message: String| {
            problems.push(BundleProblem {
                path: path.to_string(),
                message,
            })
        };
        match &self.cluster {
            None => add("cluster", "cluster is required".into()),
            Some(c) => {
                if c.id.is_empty() {
                    add("cluster.id", "cluster.id is required".into());
                }
                if c.secret.is_empty() {
                    add("cluster.secret", "cluster.secret is required".into());
                }
            }
        }
        match &self.secrets {
            None => add("secrets", "secrets is required".into()),
            Some(s) => {
                if s.bootstraptoken.is_empty() {
                    add(
                        "secrets.bootstraptoken",
                        "secrets.bootstraptoken is required".into(),
                    );
                }
                let has = |v: &Option<Zeroizing<String>>| v.as_ref().is_some_and(|s| !s.is_empty());
                match (has(&s.secretboxencryptionsecret), has(&s.aescbcencryptionsecret)) {
                    (false, false) => add(
                        "secrets",
                        "one of [secrets.secretboxencryptionsecret, secrets.aescbcencryptionsecret] is required".into(),
                    ),
                    (true, true) => add(
                        "secrets",
                        "only one of [secrets.secretboxencryptionsecret, secrets.aescbcencryptionsecret] is allowed".into(),
                    ),
                    _ => {}
                }
            }
        }
        match &self.trustdinfo {
            None => add("trustdinfo", "trustdinfo is required".into()),
            Some(t) if t.token.is_empty() => {
                add("trustdinfo.token", "trustdinfo.token is required".into())
            }
            Some(_) => {}
        }
        match &self.certs {
            None => add("certs", "certs is required".into()),
            Some(c) => {
                for (name, pair) in [
                    ("etcd", &c.etcd),
                    ("k8s", &c.k8s),
                    ("k8saggregator", &c.k8saggregator),
                    ("os", &c.os),
                ] {
                    let path = format!("certs.{name}");
                    match pair {
                        None => add(&path, format!("{path} is required")),
                        Some(p) => {
                            if let Err(reason) = check_pair(&path, p) {
                                add(&path, format!("{path} is invalid: {reason}"));
                            }
                        }
                    }
                }
                match &c.k8sserviceaccount {
                    None => add(
                        "certs.k8sserviceaccount",
                        "certs.k8sserviceaccount is required".into(),
                    ),
                    Some(k) => {
                        let path = "certs.k8sserviceaccount.key";
                        if let Err(e) = pki::parse_private_key(path, &k.key) {
                            add(path, format!("{path} is invalid: {e}"));
                        }
                    }
                }
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// [`Self::validate`] as an error naming the file, as talosctl reports it.
    #[cfg(any(test, feature = "testkit"))]
    pub fn check(&self) -> Result<(), SecretsBundleError> {
        self.validate()
            .map_err(|problems| SecretsBundleError::Invalid {
                label: self.label.clone(),
                problems: problems
                    .iter()
                    .map(|p| p.message.as_str())
                    .collect::<Vec<_>>()
                    .join("; "),
            })
    }

    /// Fingerprints of the k8s, etcd, aggregator and OS CA certificates and of the
    /// service-account public key.
    pub fn fingerprints(&self) -> Result<CaFingerprints, SecretsBundleError> {
        let missing = |path: &str| SecretsBundleError::Missing {
            label: self.label.clone(),
            path: path.to_string(),
        };
        let certs = self.certs.as_ref().ok_or_else(|| missing("certs"))?;
        let cert_fp =
            |name: &str, pair: &Option<CertKeyPem>| -> Result<String, SecretsBundleError> {
                let path = format!("certs.{name}.crt");
                let pair = pair
                    .as_ref()
                    .ok_or_else(|| missing(&format!("certs.{name}")))?;
                let der = pki::parse_certificate_pem(&path, &pair.crt).map_err(|source| {
                    SecretsBundleError::Pki {
                        label: self.label.clone(),
                        path: path.clone(),
                        error: Box::new(source),
                    }
                })?;
                Ok(pki::sha256_fingerprint_der(&der))
            };
        let sa = certs
            .k8sserviceaccount
            .as_ref()
            .ok_or_else(|| missing("certs.k8sserviceaccount"))?;
        let sa_path = "certs.k8sserviceaccount.key";
        let sa_key =
            pki::parse_private_key(sa_path, &sa.key).map_err(|source| SecretsBundleError::Pki {
                label: self.label.clone(),
                path: sa_path.to_string(),
                error: Box::new(source),
            })?;
        Ok(CaFingerprints {
            k8s: cert_fp("k8s", &certs.k8s)?,
            etcd: cert_fp("etcd", &certs.etcd)?,
            k8saggregator: cert_fp("k8saggregator", &certs.k8saggregator)?,
            os: cert_fp("os", &certs.os)?,
            k8sserviceaccount: sa_key.public_key_fingerprint(),
        })
    }

    /// Build a bundle from kubeadm's PKI as `talosctl gen secrets --from-kubernetes-pki`
    /// does: the kubeadm CAs and service-account key are taken as they are; the OS CA,
    /// cluster id (URL-safe base64) and secret, and trustd token are generated; the
    /// bootstrap token is taken when given, generated otherwise; the encryption secret is
    /// the one given, or a fresh secretbox secret when `None` (talosctl's behaviour, which
    /// turns on encryption kubeadm apiservers cannot read: pass the kubeadm secret when it
    /// has one). `label` names the bundle in later errors.
    pub fn from_kubernetes_pki(
        label: &str,
        pki_files: KubernetesPki,
        bootstrap_token: Option<Zeroizing<String>>,
        encryption: Option<EncryptionSecret>,
        now: SystemTime,
    ) -> Result<Self, SecretsBundleError> {
        let gen = |what: &'static str| {
            let label = label.to_string();
            move |source: PkiError| SecretsBundleError::Generate {
                label,
                what,
                error: Box::new(source),
            }
        };
        let os = pki::generate_os_ca(now).map_err(gen("the Talos OS CA"))?;
        let bootstraptoken = match bootstrap_token {
            Some(t) => t,
            None => pki::generate_token().map_err(gen("secrets.bootstraptoken"))?,
        };
        let (secretbox, aescbc) = match encryption {
            Some(EncryptionSecret::Secretbox(s)) => (Some(s), None),
            Some(EncryptionSecret::Aescbc(s)) => (None, Some(s)),
            None => (
                Some(pki::random_base64_32().map_err(gen("secrets.secretboxencryptionsecret"))?),
                None,
            ),
        };
        Ok(SecretsBundle {
            label: label.to_string(),
            cluster: Some(ClusterSecrets {
                id: pki::random_cluster_id().map_err(gen("cluster.id"))?,
                secret: pki::random_base64_32().map_err(gen("cluster.secret"))?,
            }),
            secrets: Some(KubeSecrets {
                bootstraptoken,
                secretboxencryptionsecret: secretbox,
                aescbcencryptionsecret: aescbc,
            }),
            trustdinfo: Some(TrustdInfo {
                token: pki::generate_token().map_err(gen("trustdinfo.token"))?,
            }),
            certs: Some(Certs {
                etcd: Some(pki_files.etcd.into()),
                k8s: Some(pki_files.k8s.into()),
                k8saggregator: Some(pki_files.k8saggregator.into()),
                k8sserviceaccount: Some(KeyPem {
                    key: pki_files.k8sserviceaccount.into_pem(),
                }),
                os: Some(os.into()),
            }),
        })
    }
}

/// Talos's pair check (key then certificate must parse), plus key/certificate agreement.
fn check_pair(path: &str, pair: &CertKeyPem) -> Result<(), String> {
    let key = pki::parse_private_key(&format!("{path}.key"), &pair.key);
    let crt = pki::certificate_public_key_der(&format!("{path}.crt"), &pair.crt);
    match (key, crt) {
        (Ok(k), Ok(spki)) if k.public_key_der() == spki.as_slice() => Ok(()),
        (Ok(_), Ok(_)) => Err(format!("{path}.key does not belong to {path}.crt")),
        (Err(k), Ok(_)) => Err(k.to_string()),
        (Ok(_), Err(c)) => Err(c.to_string()),
        (Err(k), Err(c)) => Err(format!("{k}; {c}")),
    }
}

// ---------------------------------------------------------------------------------------
// Reading

struct Reader<'a> {
    label: &'a str,
}

impl Reader<'_> {
    fn wrong(&self, path: &str, expected: &'static str, v: &Value) -> SecretsBundleError {
        SecretsBundleError::WrongType {
            label: self.label.to_string(),
            path: path.to_string(),
            expected,
            found: kind_of(v),
        }
    }

    /// A mapping whose keys are all in `allowed`; `null` or absent is `None`.
    fn section<'v>(
        &self,
        v: Option<&'v Value>,
        path: &str,
        allowed: &[&str],
    ) -> Result<Option<&'v Map<String, Value>>, SecretsBundleError> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(m)) => {
                if let Some(k) = m.keys().find(|k| !allowed.contains(&k.as_str())) {
                    return Err(SecretsBundleError::UnknownKey {
                        label: self.label.to_string(),
                        path: join(path, k),
                        expected: allowed.join(", "),
                    });
                }
                Ok(Some(m))
            }
            Some(other) => Err(self.wrong(path, "a mapping", other)),
        }
    }

    /// A string field; absent or `null` reads as empty (Go's zero value).
    fn string(
        &self,
        m: &Map<String, Value>,
        parent: &str,
        key: &str,
    ) -> Result<Zeroizing<String>, SecretsBundleError> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(Zeroizing::new(String::new())),
            Some(Value::String(s)) => Ok(Zeroizing::new(s.clone())),
            Some(other) => Err(self.wrong(&join(parent, key), "a string", other)),
        }
    }

    /// A base64 PEM field; absent reads as empty.
    fn pem(
        &self,
        m: &Map<String, Value>,
        parent: &str,
        key: &str,
    ) -> Result<Zeroizing<Vec<u8>>, SecretsBundleError> {
        let text = self.string(m, parent, key)?;
        // Go's base64 decoder skips CR and LF.
        let compact: Zeroizing<String> =
            Zeroizing::new(text.chars().filter(|c| *c != '\r' && *c != '\n').collect());
        base64::engine::general_purpose::STANDARD
            .decode(compact.as_bytes())
            .map(Zeroizing::new)
            .map_err(|_| SecretsBundleError::Base64 {
                label: self.label.to_string(),
                path: join(parent, key),
            })
    }

    fn pair(
        &self,
        v: Option<&Value>,
        path: &str,
    ) -> Result<Option<CertKeyPem>, SecretsBundleError> {
        let Some(m) = self.section(v, path, PAIR_KEYS)? else {
            return Ok(None);
        };
        Ok(Some(CertKeyPem {
            crt: self.pem(m, path, "crt")?.to_vec(),
            key: self.pem(m, path, "key")?,
        }))
    }

    fn bundle(&self, root: &Value) -> Result<SecretsBundle, SecretsBundleError> {
        let top = match root {
            Value::Object(_) => self.section(Some(root), "", TOP_KEYS)?,
            other => return Err(self.wrong("(document)", "a mapping", other)),
        };
        let top = top.ok_or_else(|| self.wrong("(document)", "a mapping", root))?;

        let cluster = match self.section(top.get("cluster"), "cluster", CLUSTER_KEYS)? {
            None => None,
            Some(m) => Some(ClusterSecrets {
                id: self.string(m, "cluster", "id")?.to_string(),
                secret: self.string(m, "cluster", "secret")?,
            }),
        };
        let secrets = match self.section(top.get("secrets"), "secrets", SECRETS_KEYS)? {
            None => None,
            Some(m) => {
                let opt = |key: &str| -> Result<Option<Zeroizing<String>>, SecretsBundleError> {
                    let s = self.string(m, "secrets", key)?;
                    Ok(if s.is_empty() { None } else { Some(s) })
                };
                Some(KubeSecrets {
                    bootstraptoken: self.string(m, "secrets", "bootstraptoken")?,
                    secretboxencryptionsecret: opt("secretboxencryptionsecret")?,
                    aescbcencryptionsecret: opt("aescbcencryptionsecret")?,
                })
            }
        };
        let trustdinfo = match self.section(top.get("trustdinfo"), "trustdinfo", TRUSTD_KEYS)? {
            None => None,
            Some(m) => Some(TrustdInfo {
                token: self.string(m, "trustdinfo", "token")?,
            }),
        };
        let certs = match self.section(top.get("certs"), "certs", CERTS_KEYS)? {
            None => None,
            Some(m) => Some(Certs {
                etcd: self.pair(m.get("etcd"), "certs.etcd")?,
                k8s: self.pair(m.get("k8s"), "certs.k8s")?,
                k8saggregator: self.pair(m.get("k8saggregator"), "certs.k8saggregator")?,
                k8sserviceaccount: match self.section(
                    m.get("k8sserviceaccount"),
                    "certs.k8sserviceaccount",
                    KEY_KEYS,
                )? {
                    None => None,
                    Some(k) => Some(KeyPem {
                        key: self.pem(k, "certs.k8sserviceaccount", "key")?,
                    }),
                },
                os: self.pair(m.get("os"), "certs.os")?,
            }),
        };
        Ok(SecretsBundle {
            label: self.label.to_string(),
            cluster,
            secrets,
            trustdinfo,
            certs,
        })
    }
}

// ---------------------------------------------------------------------------------------
// Writing (Go yaml.v3 / go.yaml.in/yaml/v4 conventions)

const INDENT: &str = "    ";

fn indent(w: &mut String, level: usize) {
    for _ in 0..level {
        w.push_str(INDENT);
    }
}

fn section(w: &mut String, level: usize, key: &str) {
    indent(w, level);
    w.push_str(key);
    w.push_str(":\n");
}

fn null_entry(w: &mut String, level: usize, key: &str) {
    indent(w, level);
    w.push_str(key);
    w.push_str(": null\n");
}

fn entry(w: &mut String, level: usize, key: &str, value: &str) {
    indent(w, level);
    w.push_str(key);
    w.push_str(": ");
    write_scalar(w, value);
    w.push('\n');
}

/// Write a string the way Go's YAML encoder does: plain when it reads back as the same
/// string, double-quoted when a plain scalar would resolve to another type (number, bool,
/// null, timestamp, YAML 1.1 bool, base-60 float) or holds special characters, and
/// single-quoted when the plain form is not allowed (indicators, `: `, ` #`, edge spaces).
fn write_scalar(w: &mut String, s: &str) {
    let special = s.chars().any(|c| !is_printable(c)) || s.contains('\n');
    if special || resolves_to_non_string(s) {
        write_double_quoted(w, s);
    } else if !plain_allowed(s) {
        w.push('\'');
        w.push_str(&s.replace('\'', "''"));
        w.push('\'');
    } else {
        w.push_str(s);
    }
}

fn is_printable(c: char) -> bool {
    matches!(c, '\n' | '\u{20}'..='\u{7e}' | '\u{85}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
        && c != '\u{feff}'
}

fn write_double_quoted(w: &mut String, s: &str) {
    w.push('"');
    for c in s.chars() {
        match c {
            '"' => w.push_str("\\\""),
            '\\' => w.push_str("\\\\"),
            '\0' => w.push_str("\\0"),
            '\u{7}' => w.push_str("\\a"),
            '\u{8}' => w.push_str("\\b"),
            '\t' => w.push_str("\\t"),
            '\n' => w.push_str("\\n"),
            '\u{b}' => w.push_str("\\v"),
            '\u{c}' => w.push_str("\\f"),
            '\r' => w.push_str("\\r"),
            '\u{1b}' => w.push_str("\\e"),
            '\u{85}' => w.push_str("\\N"),
            '\u{a0}' => w.push_str("\\_"),
            '\u{2028}' => w.push_str("\\L"),
            '\u{2029}' => w.push_str("\\P"),
            c if !is_printable(c) => {
                let n = u32::from(c);
                if n <= 0xff {
                    w.push_str(&format!("\\x{n:02X}"));
                } else if n <= 0xffff {
                    w.push_str(&format!("\\u{n:04X}"));
                } else {
                    w.push_str(&format!("\\U{n:08X}"));
                }
            }
            c => w.push(c),
        }
    }
    w.push('"');
}

/// Whether the emitter may write `s` plain as a block mapping value.
fn plain_allowed(s: &str) -> bool {
    if s.is_empty() || s.starts_with("---") || s.starts_with("...") {
        return false;
    }
    let b = s.as_bytes();
    let blank_at = |i: usize| i >= b.len() || matches!(b[i], b' ' | b'\t' | b'\r' | b'\n');
    if matches!(b[0], b' ' | b'\t') || matches!(b[b.len() - 1], b' ' | b'\t') {
        return false;
    }
    for (i, &c) in b.iter().enumerate() {
        if i == 0 {
            match c {
                b'#' | b',' | b'[' | b']' | b'{' | b'}' | b'&' | b'*' | b'!' | b'|' | b'>'
                | b'\'' | b'"' | b'%' | b'@' | b'`' => return false,
                b'?' | b':' | b'-' if blank_at(1) => return false,
                _ => {}
            }
        } else {
            if c == b':' && blank_at(i + 1) {
                return false;
            }
            if c == b'#' && matches!(b[i - 1], b' ' | b'\t') {
                return false;
            }
        }
    }
    true
}

/// Whether Go's YAML resolver would read the plain scalar `s` as something other than a
/// string (or the encoder quotes it for YAML 1.1 compatibility).
fn resolves_to_non_string(s: &str) -> bool {
    const SPECIAL: &[&str] = &[
        "", "~", "null", "Null", "NULL", "true", "True", "TRUE", "false", "False", "FALSE", ".nan",
        ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf",
        "-.INF", "<<",
    ];
    const OLD_BOOLS: &[&str] = &[
        "y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "n", "N", "no", "No", "NO", "off", "Off",
        "OFF",
    ];
    if SPECIAL.contains(&s) || OLD_BOOLS.contains(&s) || is_base60_float(s) {
        return true;
    }
    let first = s.as_bytes()[0];
    if first == b'.' {
        return is_yaml_float(s);
    }
    if !(first.is_ascii_digit() || first == b'+' || first == b'-') {
        return false;
    }
    if is_timestamp(s) {
        return true;
    }
    let plain: String = s.chars().filter(|c| *c != '_').collect();
    is_go_int(&plain) || is_yaml_float(&plain)
}

fn all_digits(s: &str, radix: u32) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_digit(radix))
}

/// `strconv.ParseInt/ParseUint(s, 0, 64)` succeeds.
fn is_go_int(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (digits, radix) =
        if let Some(r) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
            (r, 16)
        } else if let Some(r) = body.strip_prefix("0o").or_else(|| body.strip_prefix("0O")) {
            (r, 8)
        } else if let Some(r) = body.strip_prefix("0b").or_else(|| body.strip_prefix("0B")) {
            (r, 2)
        } else if body.len() > 1 && body.starts_with('0') {
            (&body[1..], 8)
        } else {
            (body, 10)
        };
    all_digits(digits, radix) && u64::from_str_radix(digits, radix).is_ok()
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$` and finite as an f64.
fn is_yaml_float(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => all_digits(frac, 10),
        Some((int, frac)) => all_digits(int, 10) && (frac.is_empty() || all_digits(frac, 10)),
        None => all_digits(mantissa, 10),
    };
    let exponent_ok =
        exponent.is_none_or(|e| all_digits(e.strip_prefix(['+', '-']).unwrap_or(e), 10));
    mantissa_ok && exponent_ok && s.parse::<f64>().is_ok_and(f64::is_finite)
}

/// `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`
fn is_base60_float(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (main, frac) = match body.split_once('.') {
        Some((m, f)) => (m, Some(f)),
        None => (body, None),
    };
    let mut parts = main.split(':');
    let head = parts.next().unwrap_or("");
    let head_ok = head.starts_with(|c: char| c.is_ascii_digit())
        && head.chars().all(|c| c.is_ascii_digit() || c == '_');
    let rest: Vec<&str> = parts.collect();
    let rest_ok = !rest.is_empty()
        && rest.iter().all(|p| {
            let b = p.as_bytes();
            match b.len() {
                1 => b[0].is_ascii_digit(),
                2 => (b'0'..=b'5').contains(&b[0]) && b[1].is_ascii_digit(),
                _ => false,
            }
        });
    let frac_ok = frac.is_none_or(|f| f.chars().all(|c| c.is_ascii_digit() || c == '_'));
    head_ok && rest_ok && frac_ok
}

/// `YYYY-M-D`, optionally followed by `T`, `t` or a space and a time (Go's timestamp
/// formats; the time part is taken on trust).
fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 8 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return false;
    }
    let rest = &s[5..];
    let (date, time) = match rest.find(['T', 't', ' ']) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let Some((m, d)) = date.split_once('-') else {
        return false;
    };
    let field_ok = |f: &str| (1..=2).contains(&f.len()) && all_digits(f, 10);
    field_ok(m) && field_ok(d) && time.is_none_or(|t| t.starts_with(|c: char| c.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::pki::testkit::{self, Alg, TestKey};

    const VECTOR: &[u8] = include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/talos/secrets.yaml"
    ));
    const INVALID: &[u8] = include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/talos/invalid-secrets.yaml"
    ));

    #[test]
    fn vector_round_trips_byte_for_byte() {
        let bundle = SecretsBundle::parse("secrets.yaml", VECTOR).unwrap();
        assert_eq!(bundle.to_yaml().as_bytes(), VECTOR);
        assert_eq!(bundle.validate(), Ok(()));
        let c = bundle.cluster.as_ref().unwrap();
        assert_eq!(c.id, "cgvhCbucls-WqkESDTRqykFgb4hROI4cBpgB0YJLLtM=");
        let s = bundle.secrets.as_ref().unwrap();
        assert_eq!(s.bootstraptoken.as_str(), "2psnp2.lry8e9gycdix3bpa");
        assert!(s.aescbcencryptionsecret.is_none());
        let certs = bundle.certs.as_ref().unwrap();
        let os = certs.os.as_ref().unwrap();
        assert!(os.key.starts_with(b"-----BEGIN ED25519 PRIVATE KEY-----\n"));
        assert!(os.crt.starts_with(b"-----BEGIN CERTIFICATE-----\n"));
    }

    #[test]
    fn vector_fingerprints_match_openssl() {
        // Expected values computed once by hand from the vector:
        //   base64 -d the crt field > x.crt;  openssl x509 -in x.crt -outform der | sha256sum
        //   base64 -d the sa key   > sa.key; openssl pkey -in sa.key -pubout -outform der | sha256sum
        let fp = SecretsBundle::parse("secrets.yaml", VECTOR)
            .unwrap()
            .fingerprints()
            .unwrap();
        assert_eq!(
            fp.k8s,
            "sha256:a156616cbe3b5e1074c2ceb0b9ac8b418c4c6a170b03805fa1b7e0d1ca665cb2"
        );
        assert_eq!(
            fp.etcd,
            "sha256:345b62bfc775ed18170a073daee8068cfe2ee821897f996598cdd712a56c2d3f"
        );
        assert_eq!(
            fp.k8saggregator,
            "sha256:a3ea5c792511093a053272b07194ca0813ecd97ea039206b5be53d5c4c086e1a"
        );
        assert_eq!(
            fp.os,
            "sha256:3481473438531edaf8c210ce320d234bd94f6b4cecd29d5cfb2d4715d66243a2"
        );
        assert_eq!(
            fp.k8sserviceaccount,
            "sha256:a317b64362e2f4f0fad59cd8659eecab7951c8cab7b27e2704d4d4447c45d1f0"
        );
    }

    #[test]
    fn vector_cas_pass_load_ca() {
        // The real talosctl CAs pass the same checks kubeadm CAs go through.
        let bundle = SecretsBundle::parse("secrets.yaml", VECTOR).unwrap();
        let certs = bundle.certs.as_ref().unwrap();
        // The vector was made 2023-05-25 and expires 2033-05-22: check inside that window.
        let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        for (name, p) in [
            ("etcd", &certs.etcd),
            ("k8s", &certs.k8s),
            ("agg", &certs.k8saggregator),
            ("os", &certs.os),
        ] {
            let p = p.as_ref().unwrap();
            pki::load_ca(name, &p.crt, name, &p.key, when)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn invalid_vector_names_every_missing_field() {
        let bundle = SecretsBundle::parse("invalid-secrets.yaml", INVALID).unwrap();
        let problems = bundle.validate().unwrap_err();
        let messages: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
        assert_eq!(messages[0], "cluster.secret is required");
        assert_eq!(
            messages[1],
            "one of [secrets.secretboxencryptionsecret, secrets.aescbcencryptionsecret] is required"
        );
        assert_eq!(messages[2], "trustdinfo is required");
        // etcd has a `crt` but no `key`.
        assert_eq!(
            messages[3],
            "certs.etcd is invalid: certs.etcd.key: private key: no PEM block found; expected one private key block"
        );
        assert_eq!(messages[4], "certs.k8saggregator is required");
        // os has only a `key`, and it holds a certificate: both halves are reported.
        assert!(
            messages[5].starts_with("certs.os is invalid: "),
            "{}",
            messages[5]
        );
        assert!(
            messages[5].contains(
                "certs.os.key: private key: PEM block type \"CERTIFICATE\" is not supported"
            ),
            "{}",
            messages[5]
        );
        assert!(
            messages[5].contains("certs.os.crt: certificate: no PEM block found"),
            "{}",
            messages[5]
        );
        assert_eq!(messages.len(), 6, "{messages:?}");
        let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "cluster.secret",
                "secrets",
                "trustdinfo",
                "certs.etcd",
                "certs.k8saggregator",
                "certs.os"
            ]
        );

        let err = bundle.check().unwrap_err().to_string();
        assert!(err.starts_with("invalid-secrets.yaml: failed to validate secrets bundle: cluster.secret is required; "), "{err}");

        // Writing it keeps Go's shape for what is missing.
        let yaml = bundle.to_yaml();
        assert!(yaml.contains(
            "cluster:\n    id: cgvhCbucls-WqkESDTRqykFgb4hROI4cBpgB0YJLLtM=\n    secret: \"\"\n"
        ));
        assert!(yaml.contains("trustdinfo: null\n"));
        assert!(yaml.contains("    k8saggregator: null\n"));
        assert!(yaml.contains("    os:\n        crt: \"\"\n        key: LS0t"));
        let again = SecretsBundle::parse("again", yaml.as_bytes()).unwrap();
        assert_eq!(again.to_yaml().as_str(), yaml.as_str());
    }

    #[test]
    fn validate_reports_each_rule() {
        let mut b = SecretsBundle::parse("s", VECTOR).unwrap();
        b.secrets.as_mut().unwrap().aescbcencryptionsecret = Some(Zeroizing::new("x".into()));
        assert_eq!(
            b.validate().unwrap_err()[0].message,
            "only one of [secrets.secretboxencryptionsecret, secrets.aescbcencryptionsecret] is allowed"
        );
        let mut b = SecretsBundle::parse("s", VECTOR).unwrap();
        b.cluster = None;
        b.secrets.as_mut().unwrap().bootstraptoken = Zeroizing::new(String::new());
        b.trustdinfo.as_mut().unwrap().token = Zeroizing::new(String::new());
        let certs = b.certs.as_mut().unwrap();
        certs.etcd = None;
        certs.k8sserviceaccount = Some(KeyPem {
            key: Zeroizing::new(b"junk".to_vec()),
        });
        // Swap keys between two CAs: both parse, but no longer belong together.
        std::mem::swap(
            &mut certs.k8s.as_mut().unwrap().key,
            &mut certs.k8saggregator.as_mut().unwrap().key,
        );
        let messages: Vec<String> = b
            .validate()
            .unwrap_err()
            .into_iter()
            .map(|p| p.message)
            .collect();
        assert_eq!(messages[0], "cluster is required");
        assert_eq!(messages[1], "secrets.bootstraptoken is required");
        assert_eq!(messages[2], "trustdinfo.token is required");
        assert_eq!(messages[3], "certs.etcd is required");
        assert_eq!(
            messages[4],
            "certs.k8s is invalid: certs.k8s.key does not belong to certs.k8s.crt"
        );
        assert!(messages[5].starts_with("certs.k8saggregator is invalid"));
        assert!(
            messages[6].starts_with("certs.k8sserviceaccount.key is invalid: "),
            "{}",
            messages[6]
        );
        assert_eq!(messages.len(), 7);
        b.certs = None;
        assert_eq!(
            b.validate().unwrap_err().last().unwrap().message,
            "certs is required"
        );
    }

    #[test]
    fn strict_parsing_names_paths() {
        let text = String::from_utf8(VECTOR.to_vec()).unwrap();
        let extra = text.replace("trustdinfo:\n", "trustdinfo:\n    extra: 1\n");
        let err = SecretsBundle::parse("s.yaml", extra.as_bytes()).unwrap_err();
        assert_eq!(
            err,
            SecretsBundleError::UnknownKey {
                label: "s.yaml".into(),
                path: "trustdinfo.extra".into(),
                expected: "token".into()
            }
        );
        let extra = text.replace("    os:\n", "    os:\n        pem: x\n");
        let err = SecretsBundle::parse("s.yaml", extra.as_bytes()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("s.yaml: certs.os.pem: unknown key"),
            "{err}"
        );
        let top = format!("{text}extra: {{}}\n");
        let err = SecretsBundle::parse("s.yaml", top.as_bytes()).unwrap_err();
        assert!(
            err.to_string().starts_with("s.yaml: extra: unknown key"),
            "{err}"
        );

        let wrong = text.replace(
            "bootstraptoken: 2psnp2.lry8e9gycdix3bpa",
            "bootstraptoken: [a]",
        );
        let err = SecretsBundle::parse("s.yaml", wrong.as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "s.yaml: secrets.bootstraptoken: expected a string, found a sequence"
        );
        let wrong = text.replace("certs:\n", "certs: 3\nx:\n");
        assert!(SecretsBundle::parse("s.yaml", wrong.as_bytes()).is_err());

        let secret = "Wiu0qx68V3MKhFDr8+OFwGCNOOPBiQCDsLpRa3MdxEQ=";
        let bad64 = text.replace(
            "crt: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJmRENDQVNPZ0F3",
            "crt: abc",
        );
        let err = SecretsBundle::parse("s.yaml", bad64.as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "s.yaml: certs.etcd.crt: expected standard base64 (with padding) of a PEM file"
        );

        let broken = text.replace("cluster:\n", "cluster: [\n");
        let err = SecretsBundle::parse("s.yaml", broken.as_bytes()).unwrap_err();
        assert!(matches!(err, SecretsBundleError::Yaml { .. }), "{err}");
        assert!(!err.to_string().contains(secret), "{err}");

        let err = SecretsBundle::parse("s.yaml", b"- a\n").unwrap_err();
        assert!(
            err.to_string()
                .contains("expected a mapping, found a sequence"),
            "{err}"
        );
        let err = SecretsBundle::parse("s.yaml", &[0xff, 0xfe]).unwrap_err();
        assert_eq!(
            err,
            SecretsBundleError::NotUtf8 {
                label: "s.yaml".into()
            }
        );
    }

    #[test]
    fn debug_is_redacted() {
        let b = SecretsBundle::parse("s", VECTOR).unwrap();
        assert_eq!(format!("{b:?}"), "[redacted]");
        let s = format!(
            "{:?} {:?} {:?} {:?}",
            b.cluster, b.secrets, b.trustdinfo, b.certs
        );
        for secret in [
            "Wiu0qx68", "2psnp2", "lry8e9", "6zWBpno8", "oamejv", "LS0t", "BEGIN",
        ] {
            assert!(!s.contains(secret), "{secret} leaked: {s}");
        }
        assert!(
            s.contains("cgvhCbucls"),
            "the cluster id is not secret: {s}"
        );
    }

    #[test]
    fn scalars_are_quoted_like_go() {
        let q = |s: &str| {
            let mut w = String::new();
            write_scalar(&mut w, s);
            w
        };
        for plain in [
            "2psnp2.lry8e9gycdix3bpa",
            "cgvhCbucls-WqkESDTRqykFgb4hROI4cBpgB0YJLLtM=",
            "+abc/def=",
            "-abc",
            "/x",
            "a:b",
            "a#b",
            "1e999",
            "123456.123456789012e999",
            "0xZZ",
            "1.2.3",
            "12:60",
        ] {
            assert_eq!(q(plain), plain, "{plain}");
        }
        for doubled in [
            "",
            "123456.1234567890123456",
            "123456.1234567890123e45",
            "true",
            "NULL",
            "~",
            "yes",
            "off",
            "Y",
            "0x1F",
            "0o17",
            "017",
            "-12",
            "+12",
            "1_000",
            ".5",
            ".inf",
            "12:30",
            "190:20:30.15",
            "2001-12-14",
            "2001-12-14t21:59:43.10-05:00",
            "1e5",
            "<<",
        ] {
            assert_eq!(q(doubled), format!("\"{doubled}\""), "{doubled}");
        }
        for single in [
            "*alias", "&a", "!tag", "- x", "-", "a: b", "a #b", " lead", "trail ", "---x", "#c",
            "'q", "\"d", "%x", "@x", "`x", "|x", ">x", "[x", "{x", ",x", "? x", ":",
        ] {
            let expected = format!("'{}'", single.replace('\'', "''"));
            assert_eq!(q(single), expected, "{single}");
        }
        assert_eq!(q("a\tb"), "\"a\\tb\"");
        assert_eq!(q("a\"b\\"), "a\"b\\");
        assert_eq!(q("\u{1}"), "\"\\x01\"");
    }

    #[test]
    fn quoted_token_round_trips() {
        // A numeric-looking token is double-quoted on write and read back as a string.
        let mut b = SecretsBundle::parse("s", VECTOR).unwrap();
        b.secrets.as_mut().unwrap().bootstraptoken =
            Zeroizing::new("123456.1234567890123456".into());
        let yaml = b.to_yaml();
        assert!(yaml.contains("    bootstraptoken: \"123456.1234567890123456\"\n"));
        let again = SecretsBundle::parse("s", yaml.as_bytes()).unwrap();
        assert_eq!(
            again.secrets.unwrap().bootstraptoken.as_str(),
            "123456.1234567890123456"
        );
    }

    #[test]
    fn both_encryption_secrets_follow_go_field_order() {
        let mut b = SecretsBundle::parse("s", VECTOR).unwrap();
        b.secrets.as_mut().unwrap().aescbcencryptionsecret = Some(Zeroizing::new("QUJD".into()));
        let yaml = b.to_yaml();
        assert!(yaml.contains(
            "    bootstraptoken: 2psnp2.lry8e9gycdix3bpa\n    aescbcencryptionsecret: QUJD\n    secretboxencryptionsecret: 6zWB"
        ));
    }

    #[test]
    fn bundle_from_kubernetes_pki() {
        let now = testkit::now();
        let load = |alg, slot, cn: &str| {
            let key = TestKey::new(alg, slot);
            let crt = testkit::self_signed_ca(&key, cn, 3650);
            pki::load_ca("ca.crt", &crt, "ca.key", &key.traditional_pem(), now)
                .unwrap()
                .0
        };
        let k8s = load(Alg::Rsa, 0, "kubernetes");
        let etcd = load(Alg::P256, 0, "etcd-ca");
        let agg = load(Alg::P256, 0, "front-proxy-ca");
        let k8s_fp = k8s.fingerprint();
        let k8s_pem = k8s.cert_pem().to_vec();
        let sa_key = TestKey::new(Alg::Rsa, 1);
        let sa = pki::load_service_account_key("sa.key", &sa_key.traditional_pem()).unwrap();
        let sa_fp = sa.public_key_fingerprint();
        let files = KubernetesPki {
            k8s,
            etcd,
            k8saggregator: agg,
            k8sserviceaccount: sa,
        };
        let b = SecretsBundle::from_kubernetes_pki(
            "secrets.yaml",
            files,
            Some(Zeroizing::new("abcdef.0123456789abcdef".into())),
            Some(EncryptionSecret::Aescbc(Zeroizing::new(
                "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0MTI=".into(),
            ))),
            now,
        )
        .unwrap();
        assert_eq!(b.validate(), Ok(()));
        let fp = b.fingerprints().unwrap();
        assert_eq!(fp.k8s, k8s_fp);
        assert_eq!(fp.k8sserviceaccount, sa_fp);
        let s = b.secrets.as_ref().unwrap();
        assert_eq!(s.bootstraptoken.as_str(), "abcdef.0123456789abcdef");
        assert!(s.secretboxencryptionsecret.is_none());
        assert_eq!(b.cluster.as_ref().unwrap().id.len(), 44);
        assert_eq!(b.certs.as_ref().unwrap().k8s.as_ref().unwrap().crt, k8s_pem);

        let yaml = b.to_yaml();
        let again = SecretsBundle::parse("secrets.yaml", yaml.as_bytes()).unwrap();
        assert_eq!(again.to_yaml().as_str(), yaml.as_str());
        assert_eq!(again.fingerprints().unwrap(), fp);
    }

    /// Runs the project's fixture script (`tests/fixtures/kubeadm/make-kubeadm-pki.sh`: real
    /// openssl-made kubeadm files) through all three modules. Ignored by a plain `cargo
    /// test`; run (`--include-ignored`, as `.ci/run` does), a missing openssl fails it.
    #[test]
    #[ignore = "needs openssl"]
    #[expect(clippy::too_many_lines, reason = "a test scenario read top to bottom")]
    fn kubeadm_pki_script_fixtures() {
        use std::io::Write as _;
        use std::process::{Command, Stdio};

        use crate::inputs::kubeadm;

        let script = crate::secrets::pki::testkit::fixture_path("kubeadm/make-kubeadm-pki.sh");
        let version = Command::new("openssl").arg("version").output();
        assert!(
            version.as_ref().is_ok_and(|o| o.status.success()),
            "this test needs `openssl`, and `openssl version` did not succeed ({version:?}): \
             install it, or run without --include-ignored"
        );
        let openssl = |args: &[&str], stdin: Option<&[u8]>| -> Vec<u8> {
            let mut child = Command::new("openssl")
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(stdin.unwrap_or_default())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "openssl {args:?}");
            out.stdout
        };
        // `openssl ... -outform der | openssl dgst -sha256 -r` as `sha256:<hex>`.
        let openssl_fp = |args: &[&str]| -> String {
            let der = openssl(args, None);
            let digest = openssl(&["dgst", "-sha256", "-r"], Some(&der));
            let hex = String::from_utf8(digest).unwrap();
            format!("sha256:{}", hex.split_whitespace().next().unwrap())
        };

        let base =
            std::env::temp_dir().join(format!("capstan-import-fixtures-{}", std::process::id()));
        let cases: [(&str, &[&str], &str, &str); 2] = [
            ("rsa", &["rsa"], "aescbc", "kubeadm.k8s.io/v1beta3"),
            (
                "ecdsa",
                &[
                    "ecdsa",
                    "https://lb.example:6443",
                    "secretbox",
                    "key2",
                    "v1beta4",
                ],
                "secretbox",
                "kubeadm.k8s.io/v1beta4",
            ),
        ];
        for (name, args, provider, api_version) in cases {
            let dir = base.join(name);
            let status = Command::new("bash")
                .arg(&script)
                .arg(&dir)
                .args(args)
                .status()
                .unwrap();
            assert!(status.success(), "{name}: fixture script failed");
            let path = |p: &str| dir.join(p).to_string_lossy().into_owned();
            let read = |p: &str| std::fs::read(dir.join(p)).unwrap();
            let now = SystemTime::now();

            let mut cas = Vec::new();
            for ca in ["pki/ca", "pki/etcd/ca", "pki/front-proxy-ca"] {
                let (crt, key) = (format!("{ca}.crt"), format!("{ca}.key"));
                let (loaded, warnings) =
                    pki::load_ca(&path(&crt), &read(&crt), &path(&key), &read(&key), now)
                        .unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(warnings.is_empty(), "{warnings:?}");
                assert_eq!(loaded.cert_pem(), read(&crt).as_slice());
                assert_eq!(loaded.key_pem(), read(&key).as_slice());
                let expected = openssl_fp(&["x509", "-in", &path(&crt), "-outform", "der"]);
                assert_eq!(loaded.fingerprint(), expected, "{name} {crt}");
                cas.push(loaded);
            }
            let sa =
                pki::load_service_account_key(&path("pki/sa.key"), &read("pki/sa.key")).unwrap();
            let sa_fp = openssl_fp(&[
                "pkey",
                "-pubin",
                "-in",
                &path("pki/sa.pub"),
                "-outform",
                "der",
            ]);
            assert_eq!(sa.public_key_fingerprint(), sa_fp, "{name} sa");

            // Leaf certificates and mismatched pairs are refused.
            let err = pki::load_ca(
                "apiserver.crt",
                &read("pki/apiserver.crt"),
                "apiserver.key",
                &read("pki/apiserver.key"),
                now,
            )
            .unwrap_err();
            assert!(matches!(err, PkiError::NotCa { .. }), "{name}: {err}");
            let err = pki::load_ca(
                "ca.crt",
                &read("pki/ca.crt"),
                "front-proxy-ca.key",
                &read("pki/front-proxy-ca.key"),
                now,
            )
            .unwrap_err();
            assert!(matches!(err, PkiError::KeyMismatch { .. }), "{name}: {err}");
            let summary =
                pki::certificate_summary("apiserver.crt", &read("pki/apiserver.crt")).unwrap();
            assert!(summary.covers_host("lab-f.example.internal"));
            assert!(summary.covers_host("192.0.2.10"));
            assert!(!summary.covers_host("lb.example"));

            // kubeadm's own files.
            let enc = kubeadm::parse_encryption_config(
                "encryption-config.yaml",
                &read("encryption-config.yaml"),
            )
            .unwrap();
            let key = enc.active.as_ref().unwrap();
            assert_eq!(key.provider.name(), provider);
            assert_eq!(
                key.secret().as_str(),
                String::from_utf8(read("encryption-secret.txt"))
                    .unwrap()
                    .trim()
            );
            assert!(
                enc.talos_layout().matches,
                "{name}: {:?}",
                enc.talos_layout()
            );
            let api = kubeadm::parse_apiserver_manifest(
                "kube-apiserver.yaml",
                &read("manifests/kube-apiserver.yaml"),
            )
            .unwrap();
            assert_eq!(api.kubernetes_version(), Some("v1.30.4"));
            assert_eq!(
                api.encryption_provider_config(),
                Some("/etc/kubernetes/enc/encryption-config.yaml")
            );
            assert_eq!(api.service_account_issuers().len(), 1);
            let cc = kubeadm::parse_cluster_configuration(
                "kubeadm-config.yaml",
                &read("kubeadm-config.yaml"),
            )
            .unwrap();
            assert_eq!(cc.api_version, api_version);
            assert_eq!(cc.cluster_name.as_deref(), Some("lab-f"));
            assert_eq!(
                cc.control_plane_endpoint.as_ref().unwrap().url(),
                "https://lab-f.example.internal:6443"
            );
            assert_eq!(
                cc.api_server_extra_args.get_all("service-account-issuer"),
                api.service_account_issuers()
            );
            assert_eq!(cc.etcd_image_tag.as_deref(), Some("3.5.15-0"));

            // The bundle carries them, validates, round-trips and keeps the fingerprints.
            let fps: Vec<String> = cas.iter().map(|c| c.fingerprint()).collect();
            let mut cas = cas.into_iter();
            let files = KubernetesPki {
                k8s: cas.next().unwrap(),
                etcd: cas.next().unwrap(),
                k8saggregator: cas.next().unwrap(),
                k8sserviceaccount: sa,
            };
            let secret = key.secret().clone();
            let encryption = match key.provider {
                kubeadm::KeyedProvider::Secretbox => EncryptionSecret::Secretbox(secret),
                kubeadm::KeyedProvider::Aescbc => EncryptionSecret::Aescbc(secret),
            };
            let bundle = SecretsBundle::from_kubernetes_pki(
                "secrets.yaml",
                files,
                None,
                Some(encryption),
                now,
            )
            .unwrap();
            assert_eq!(bundle.validate(), Ok(()));
            let yaml = bundle.to_yaml();
            let again = SecretsBundle::parse("secrets.yaml", yaml.as_bytes()).unwrap();
            assert_eq!(again.to_yaml().as_str(), yaml.as_str());
            let fp = again.fingerprints().unwrap();
            assert_eq!(
                [fp.k8s, fp.etcd, fp.k8saggregator],
                [fps[0].clone(), fps[1].clone(), fps[2].clone()]
            );
            assert_eq!(fp.k8sserviceaccount, sa_fp);
        }
        let _ = std::fs::remove_dir_all(&base);
    }
}
