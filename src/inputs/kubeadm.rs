//! Reading kubeadm's control-plane files for `capstan import kubeadm`: the apiserver's
//! EncryptionConfiguration, the kube-apiserver static Pod manifest, kubeadm's
//! ClusterConfiguration (a file, or the `kubeadm-config` ConfigMap), and bootstrap tokens.
//!
//! Facts only, no policy and no file IO: every function takes a `label` (the file name,
//! used in errors) and the bytes. Errors name the file and the YAML path and never carry
//! secret values; encryption secrets and token secrets are zeroized and redacted.

use crate::yaml::scrub;
use crate::yaml::{join_path as join, kind_of};
use std::fmt;
use std::net::Ipv6Addr;

use base64::Engine as _;
use serde_json::{Map, Value};
use zeroize::Zeroizing;

/// Talos names its secretbox key `key2`.
pub const TALOS_SECRETBOX_KEY_NAME: &str = "key2";
/// Talos names its aescbc key `key1`.
pub const TALOS_AESCBC_KEY_NAME: &str = "key1";
/// kube-apiserver's and kubeadm's default secure port.
pub const DEFAULT_API_PORT: u16 = 6443;
/// kubeadm's default `networking.dnsDomain`.
pub const DEFAULT_DNS_DOMAIN: &str = "cluster.local";

/// Errors from reading kubeadm files. Each names the file (`label`) and the field path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeadmError {
    /// The file is not UTF-8 text.
    #[error("{label}: not UTF-8 text; expected YAML")]
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
    /// A field holds a value of the wrong YAML type.
    #[error("{label}: {path}: expected {expected}, found {found}")]
    WrongType {
        /// The file the problem is in.
        label: String,
        /// The YAML path of the field (`resources[1].providers`).
        path: String,
        /// What the field should hold (`a mapping`, `a string`, …).
        expected: &'static str,
        /// The YAML type found instead (`a sequence`, `null`, …).
        found: &'static str,
    },
    /// A required field is absent or empty.
    #[error("{label}: {path} is missing; expected {expected}")]
    Missing {
        /// The file the problem is in.
        label: String,
        /// The YAML path of the missing field.
        path: String,
        /// What the field should hold.
        expected: &'static str,
    },
    /// A field has the right type but an unusable value.
    #[error("{label}: {path}: {problem}")]
    Invalid {
        /// The file the problem is in.
        label: String,
        /// The YAML path of the field.
        path: String,
        /// What is wrong with the value (never the value itself when it is secret).
        problem: String,
    },
    /// The first provider for secrets is one Talos cannot carry (kms, aesgcm, …).
    #[error(
        "{label}: {path}: provider {provider} cannot be carried into Talos; only aescbc, \
         secretbox or identity can be the first provider for secrets"
    )]
    UnsupportedProvider {
        /// The file the problem is in.
        label: String,
        /// The YAML path of the provider entry.
        path: String,
        /// The provider's name.
        provider: String,
    },
    /// The file holds the wrong documents (wrong kind or apiVersion, none, or too many).
    #[error("{label}: {problem}")]
    Document {
        /// The file the problem is in.
        label: String,
        /// What is wrong with the file's documents.
        problem: String,
    },
    /// The text is not a bootstrap token (`[a-z0-9]{6}.[a-z0-9]{16}`).
    #[error(
        "{label}: not a bootstrap token; expected <6 characters [a-z0-9]>.<16 characters [a-z0-9]>"
    )]
    InvalidToken {
        /// The file or flag the token came from.
        label: String,
    },
}

// ---------------------------------------------------------------------------------------
// Shared YAML reading

fn parse_yaml_stream(label: &str, bytes: &[u8]) -> Result<Vec<Value>, KubeadmError> {
    let text = std::str::from_utf8(bytes).map_err(|_| KubeadmError::NotUtf8 {
        label: label.to_string(),
    })?;
    crate::yaml::parse_stream(text).map_err(|e| KubeadmError::Yaml {
        label: label.to_string(),
        message: e.message,
    })
}

/// Typed access to a parsed document, with errors that name the path.
struct Doc<'a> {
    label: &'a str,
}

impl Doc<'_> {
    fn wrong(&self, path: &str, expected: &'static str, v: &Value) -> KubeadmError {
        KubeadmError::WrongType {
            label: self.label.to_string(),
            path: path.to_string(),
            expected,
            found: kind_of(v),
        }
    }

    fn missing(&self, path: &str, expected: &'static str) -> KubeadmError {
        KubeadmError::Missing {
            label: self.label.to_string(),
            path: path.to_string(),
            expected,
        }
    }

    fn invalid(&self, path: &str, problem: impl Into<String>) -> KubeadmError {
        KubeadmError::Invalid {
            label: self.label.to_string(),
            path: path.to_string(),
            problem: problem.into(),
        }
    }

    fn as_map<'v>(&self, v: &'v Value, path: &str) -> Result<&'v Map<String, Value>, KubeadmError> {
        match v {
            Value::Object(m) => Ok(m),
            other => Err(self.wrong(path, "a mapping", other)),
        }
    }

    fn opt_map<'v>(
        &self,
        m: &'v Map<String, Value>,
        parent: &str,
        key: &str,
    ) -> Result<Option<&'v Map<String, Value>>, KubeadmError> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => self.as_map(v, &join(parent, key)).map(Some),
        }
    }

    fn opt_seq<'v>(
        &self,
        m: &'v Map<String, Value>,
        parent: &str,
        key: &str,
    ) -> Result<Option<&'v Vec<Value>>, KubeadmError> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(other) => Err(self.wrong(&join(parent, key), "a sequence", other)),
        }
    }

    fn opt_str<'v>(
        &self,
        m: &'v Map<String, Value>,
        parent: &str,
        key: &str,
    ) -> Result<Option<&'v str>, KubeadmError> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.wrong(&join(parent, key), "a string", other)),
        }
    }

    /// A scalar read as text (numbers and booleans as YAML wrote them, roughly: Go's
    /// sigs.k8s.io/yaml does the same for string fields).
    fn scalar_text(&self, v: &Value, path: &str) -> Result<String, KubeadmError> {
        match v {
            Value::String(s) => Ok(s.clone()),
            Value::Number(n) => Ok(n.to_string()),
            Value::Bool(b) => Ok(b.to_string()),
            Value::Null => Ok(String::new()),
            other => Err(self.wrong(path, "a string", other)),
        }
    }

    fn string_list(&self, items: &[Value], path: &str) -> Result<Vec<String>, KubeadmError> {
        items
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(self.wrong(&format!("{path}[{i}]"), "a string", other)),
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------------------
// AuthorizationConfiguration

/// One authorizer of a kubeadm apiserver's `--authorization-config` file, as written.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeadmAuthorizer {
    /// `type` (`Node`, `RBAC`, `Webhook`, or a type Talos does not take).
    pub kind: String,
    /// `name`.
    pub name: String,
    /// `webhook`, as written (a mapping), when present.
    pub webhook: Option<Value>,
}

/// The API versions of `AuthorizationConfiguration` read.
pub const AUTHORIZATION_CONFIG_VERSIONS: &[&str] = &[
    "apiserver.config.k8s.io/v1",
    "apiserver.config.k8s.io/v1beta1",
];

/// Read a kube-apiserver `AuthorizationConfiguration` (the file `--authorization-config`
/// names): its authorizers in order.
pub fn parse_authorization_config(
    label: &str,
    bytes: &[u8],
) -> Result<Vec<KubeadmAuthorizer>, KubeadmError> {
    let docs = parse_yaml_stream(label, bytes)?;
    let d = Doc { label };
    let doc = docs
        .iter()
        .find(|v| v.get("kind").and_then(Value::as_str) == Some("AuthorizationConfiguration"))
        .ok_or_else(|| d.missing("kind", "an AuthorizationConfiguration document"))?;
    let m = d.as_map(doc, "")?;
    let version = d.opt_str(m, "", "apiVersion")?.unwrap_or("");
    if !AUTHORIZATION_CONFIG_VERSIONS.contains(&version) {
        return Err(d.invalid(
            "apiVersion",
            format!(
                "`{version}`: expected {}",
                AUTHORIZATION_CONFIG_VERSIONS.join(" or ")
            ),
        ));
    }
    let items = d
        .opt_seq(m, "", "authorizers")?
        .ok_or_else(|| d.missing("authorizers", "a sequence of authorizers"))?;
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("authorizers[{i}]");
        let a = d.as_map(item, &path)?;
        let kind = d
            .opt_str(a, &path, "type")?
            .ok_or_else(|| d.missing(&join(&path, "type"), "the authorizer's type"))?;
        let name = d
            .opt_str(a, &path, "name")?
            .ok_or_else(|| d.missing(&join(&path, "name"), "the authorizer's name"))?;
        let webhook = d.opt_map(a, &path, "webhook")?.cloned().map(Value::Object);
        out.push(KubeadmAuthorizer {
            kind: kind.to_string(),
            name: name.to_string(),
            webhook,
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Flags

/// Command-line flags in order, names without leading dashes. A flag may repeat.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlagMap {
    entries: Vec<(String, String)>,
}

impl FlagMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append `name=value` (a leading `--` or `-` on `name` is dropped).
    pub fn push(&mut self, name: &str, value: &str) {
        let name = name.trim_start_matches('-');
        self.entries.push((name.to_string(), value.to_string()));
    }

    /// All `(name, value)` pairs in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// Every value given for `name`, in order.
    pub fn get_all(&self, name: &str) -> Vec<&str> {
        self.iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| v)
            .collect()
    }

    /// The value that takes effect for a single-valued flag: the last one given.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| v)
            .last()
    }

    /// Whether `name` was given at least once.
    pub fn contains(&self, name: &str) -> bool {
        self.iter().any(|(n, _)| n == name)
    }

    /// The number of flags given, counting repeats.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no flags were given.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Parse `--flag=value`, `--flag value` and bare `--flag` (= `true`) items; items that
    /// are not flags (the binary name) are skipped.
    fn from_args(items: &[String]) -> Self {
        let mut flags = FlagMap::new();
        let mut i = 0;
        while i < items.len() {
            let item = &items[i];
            let body = item.trim_start_matches('-');
            if item.starts_with('-') && !body.is_empty() {
                if let Some((name, value)) = body.split_once('=') {
                    flags.push(name, value);
                } else if let Some(next) = items.get(i + 1).filter(|n| !n.starts_with('-')) {
                    flags.push(body, next);
                    i += 1;
                } else {
                    flags.push(body, "true");
                }
            }
            i += 1;
        }
        flags
    }
}

/// Split a comma-separated flag or field value, dropping blanks.
fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

// ---------------------------------------------------------------------------------------
// EncryptionConfiguration

/// An encryption provider that holds keys and that Talos can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyedProvider {
    /// `aescbc` (16-, 24- or 32-byte key; Talos names it `key1`).
    Aescbc,
    /// `secretbox` (32-byte key; Talos names it `key2`).
    Secretbox,
}

impl KeyedProvider {
    /// The provider's name in EncryptionConfiguration.
    pub fn name(self) -> &'static str {
        match self {
            KeyedProvider::Aescbc => "aescbc",
            KeyedProvider::Secretbox => "secretbox",
        }
    }

    /// The key name Talos uses for this provider.
    pub fn talos_key_name(self) -> &'static str {
        match self {
            KeyedProvider::Aescbc => TALOS_AESCBC_KEY_NAME,
            KeyedProvider::Secretbox => TALOS_SECRETBOX_KEY_NAME,
        }
    }
}

/// The key kube-apiserver writes with: the first key of the first provider.
pub struct ActiveKey {
    /// The provider the key belongs to (the first provider for secrets).
    pub provider: KeyedProvider,
    /// The key's name (`key2`, …).
    pub name: String,
    secret: Zeroizing<String>,
    /// Names of all keys of that provider, in order (the first is `name`).
    pub all_key_names: Vec<String>,
}

impl ActiveKey {
    /// The base64 secret, as written in the file (checked to decode to a valid key size).
    pub fn secret(&self) -> &Zeroizing<String> {
        &self.secret
    }
}

impl fmt::Debug for ActiveKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActiveKey")
            .field("provider", &self.provider)
            .field("name", &self.name)
            .field("secret", &format_args!("[redacted]"))
            .field("all_key_names", &self.all_key_names)
            .finish()
    }
}

/// How Secrets are stored by the kubeadm apiservers, as read from their
/// EncryptionConfiguration.
#[derive(Debug)]
pub struct EncryptionFacts {
    /// Index of the `resources[]` entry that covers secrets; `None` when no entry does
    /// (secrets are then stored unencrypted).
    pub resource_index: Option<usize>,
    /// Provider names of that entry, in order (`["secretbox", "identity"]`).
    pub providers: Vec<String>,
    /// `None` when the first provider is identity (or no entry covers secrets).
    pub active: Option<ActiveKey>,
    /// Resources other than `secrets` that an entry encrypts (its first provider is not
    /// `identity`), with the entry's index: `configmaps`, `*.*`… Talos encrypts `secrets`
    /// only, so its apiservers cannot read them.
    pub other_encrypted: Vec<(usize, String)>,
}

/// How a kubeadm encryption setup compares with Talos's fixed one (secretbox key `key2`,
/// then aescbc key `key1`, then identity; a bundle carries one of the two).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TalosLayoutCheck {
    /// Whether the setup matches Talos's layout (`differences` is empty).
    pub matches: bool,
    /// Why not, one sentence each.
    pub differences: Vec<String>,
}

impl EncryptionFacts {
    /// Whether new Secrets are written encrypted.
    pub fn encrypts_secrets(&self) -> bool {
        self.active.is_some()
    }

    /// The providers after the first one, `identity` left out: data they still hold or
    /// write is unreadable to Talos, which lists only its one provider then identity.
    pub fn later_providers(&self) -> Vec<&str> {
        self.providers
            .iter()
            .skip(1)
            .map(String::as_str)
            .filter(|p| *p != "identity")
            .collect()
    }

    /// Compare with Talos's fixed layout without failing: the active key must carry
    /// Talos's name for its provider, be the provider's only key, and only identity may
    /// follow the provider (Talos cannot read data written by other keys or providers).
    pub fn talos_layout(&self) -> TalosLayoutCheck {
        let mut differences = Vec::new();
        let first = self.providers.first().map(String::as_str);
        let rest = self.later_providers();
        match &self.active {
            None => {
                if !rest.is_empty() {
                    differences.push(format!(
                        "identity is first but {} follow{} to read older data; Talos without an \
                         encryption secret lists only identity and cannot read that data",
                        rest.join(", "),
                        if rest.len() == 1 { "s" } else { "" }
                    ));
                }
            }
            Some(key) => {
                let provider = key.provider.name();
                let expected = key.provider.talos_key_name();
                if key.name != expected {
                    differences.push(format!(
                        "the {provider} key is named {}, Talos names its {provider} key \
                         {expected}; data written by one side is unreadable to the other \
                         until the key is renamed and all Secrets are re-encrypted",
                        key.name
                    ));
                }
                if key.all_key_names.len() > 1 {
                    differences.push(format!(
                        "{provider} lists {} keys ({}); Talos carries only the first, so data \
                         still encrypted with the others is unreadable to Talos",
                        key.all_key_names.len(),
                        key.all_key_names.join(", ")
                    ));
                }
                if !rest.is_empty() {
                    differences.push(format!(
                        "providers after {}: {}; Talos lists only {provider} then identity, so \
                         data still written by those is unreadable to Talos",
                        first.unwrap_or(provider),
                        rest.join(", ")
                    ));
                }
            }
        }
        TalosLayoutCheck {
            matches: differences.is_empty(),
            differences,
        }
    }
}

/// Parse the apiserver's `--encryption-provider-config` file
/// (`apiserver.config.k8s.io/v1` `EncryptionConfiguration`, or the old `v1`
/// `EncryptionConfig`): find the first `resources[]` entry covering secrets (`secrets`,
/// `*.` or `*.*`), record its providers in order, and the first provider's active key.
/// A first provider other than aescbc, secretbox or identity is an error.
pub fn parse_encryption_config(label: &str, bytes: &[u8]) -> Result<EncryptionFacts, KubeadmError> {
    let mut docs = parse_yaml_stream(label, bytes)?;
    let result = read_encryption_config(label, &docs);
    docs.iter_mut().for_each(scrub);
    result
}

fn read_encryption_config(label: &str, docs: &[Value]) -> Result<EncryptionFacts, KubeadmError> {
    let d = Doc { label };
    let root = match docs {
        [one] => d.as_map(one, "(document)")?,
        [] => {
            return Err(KubeadmError::Document {
                label: label.to_string(),
                problem: "empty file; expected an EncryptionConfiguration".into(),
            })
        }
        _ => {
            return Err(KubeadmError::Document {
                label: label.to_string(),
                problem: format!(
                    "{} YAML documents; expected one EncryptionConfiguration",
                    docs.len()
                ),
            })
        }
    };
    let api_version = d.opt_str(root, "", "apiVersion")?.unwrap_or("");
    let kind = d.opt_str(root, "", "kind")?.unwrap_or("");
    match (api_version, kind) {
        ("apiserver.config.k8s.io/v1", "EncryptionConfiguration") | ("v1", "EncryptionConfig") => {}
        _ => {
            return Err(KubeadmError::Document {
                label: label.to_string(),
                problem: format!(
                    "apiVersion {api_version:?} kind {kind:?}; expected apiserver.config.k8s.io/v1 \
                     EncryptionConfiguration (or v1 EncryptionConfig)"
                ),
            })
        }
    }
    let resources = d
        .opt_seq(root, "", "resources")?
        .ok_or_else(|| d.missing("resources", "a list of resources and their providers"))?;

    let other_encrypted = other_encrypted_resources(&d, resources)?;
    for (i, entry) in resources.iter().enumerate() {
        let path = format!("resources[{i}]");
        let entry = d.as_map(entry, &path)?;
        let names = match d.opt_seq(entry, &path, "resources")? {
            Some(items) => d.string_list(items, &join(&path, "resources"))?,
            None => return Err(d.missing(&join(&path, "resources"), "a list of resource names")),
        };
        if !names
            .iter()
            .any(|n| matches!(n.as_str(), "secrets" | "*." | "*.*"))
        {
            continue;
        }
        let providers_path = join(&path, "providers");
        let providers = d
            .opt_seq(entry, &path, "providers")?
            .ok_or_else(|| d.missing(&providers_path, "a list of providers"))?;
        if providers.is_empty() {
            return Err(d.missing(&format!("{providers_path}[0]"), "at least one provider"));
        }
        let mut provider_names = Vec::new();
        for (j, p) in providers.iter().enumerate() {
            let ppath = format!("{providers_path}[{j}]");
            let m = d.as_map(p, &ppath)?;
            let mut keys = m.keys();
            match (keys.next(), keys.next()) {
                (Some(name), None) => provider_names.push(name.clone()),
                _ => {
                    return Err(d.invalid(
                        &ppath,
                        format!(
                            "expected exactly one provider name as the key, found {}",
                            m.len()
                        ),
                    ))
                }
            }
        }
        let first_path = format!("{providers_path}[0]");
        let first_map = d.as_map(&providers[0], &first_path)?;
        let active = match provider_names[0].as_str() {
            "identity" => None,
            "aescbc" => Some(read_active_key(
                &d,
                first_map,
                &first_path,
                KeyedProvider::Aescbc,
            )?),
            "secretbox" => Some(read_active_key(
                &d,
                first_map,
                &first_path,
                KeyedProvider::Secretbox,
            )?),
            other => {
                return Err(KubeadmError::UnsupportedProvider {
                    label: label.to_string(),
                    path: first_path,
                    provider: other.to_string(),
                })
            }
        };
        return Ok(EncryptionFacts {
            resource_index: Some(i),
            providers: provider_names,
            active,
            other_encrypted,
        });
    }
    Ok(EncryptionFacts {
        resource_index: None,
        providers: Vec::new(),
        active: None,
        other_encrypted,
    })
}

/// The resources other than `secrets` whose entry's first provider encrypts (the
/// apiserver writes them encrypted), in file order.
fn other_encrypted_resources(
    d: &Doc<'_>,
    resources: &[Value],
) -> Result<Vec<(usize, String)>, KubeadmError> {
    let mut out = Vec::new();
    for (i, entry) in resources.iter().enumerate() {
        let path = format!("resources[{i}]");
        let entry = d.as_map(entry, &path)?;
        let names = match d.opt_seq(entry, &path, "resources")? {
            Some(items) => d.string_list(items, &join(&path, "resources"))?,
            None => continue,
        };
        let first = d
            .opt_seq(entry, &path, "providers")?
            .and_then(|p| p.first())
            .and_then(Value::as_object)
            .and_then(|m| m.keys().next().cloned());
        if matches!(first.as_deref(), None | Some("identity")) {
            continue;
        }
        out.extend(names.into_iter().filter(|n| n != "secrets").map(|n| (i, n)));
    }
    Ok(out)
}

fn read_active_key(
    d: &Doc<'_>,
    provider_map: &Map<String, Value>,
    path: &str,
    provider: KeyedProvider,
) -> Result<ActiveKey, KubeadmError> {
    let ppath = join(path, provider.name());
    let body = d
        .opt_map(provider_map, path, provider.name())?
        .ok_or_else(|| d.missing(&ppath, "a mapping with keys"))?;
    let keys = d
        .opt_seq(body, &ppath, "keys")?
        .ok_or_else(|| d.missing(&join(&ppath, "keys"), "a list of keys"))?;
    if keys.is_empty() {
        return Err(d.missing(&format!("{ppath}.keys[0]"), "at least one key"));
    }
    let mut names = Vec::new();
    for (k, key) in keys.iter().enumerate() {
        let kpath = format!("{ppath}.keys[{k}]");
        let m = d.as_map(key, &kpath)?;
        let name = d
            .opt_str(m, &kpath, "name")?
            .filter(|n| !n.is_empty())
            .ok_or_else(|| d.missing(&join(&kpath, "name"), "the key's name"))?;
        names.push(name.to_string());
    }
    let kpath = format!("{ppath}.keys[0]");
    let first = d.as_map(&keys[0], &kpath)?;
    let spath = join(&kpath, "secret");
    let secret = d
        .opt_str(first, &kpath, "secret")?
        .filter(|s| !s.is_empty())
        .ok_or_else(|| d.missing(&spath, "a base64 secret"))?;
    let decoded = Zeroizing::new(
        base64::engine::general_purpose::STANDARD
            .decode(secret.trim().as_bytes())
            .map_err(|_| d.invalid(&spath, "not valid standard base64"))?,
    );
    let ok = match provider {
        KeyedProvider::Secretbox => decoded.len() == 32,
        KeyedProvider::Aescbc => matches!(decoded.len(), 16 | 24 | 32),
    };
    if !ok {
        let expected = match provider {
            KeyedProvider::Secretbox => "32",
            KeyedProvider::Aescbc => "16, 24 or 32",
        };
        return Err(d.invalid(
            &spath,
            format!(
                "expected base64 of a {expected}-byte {} key, found {} bytes",
                provider.name(),
                decoded.len()
            ),
        ));
    }
    Ok(ActiveKey {
        provider,
        name: names[0].clone(),
        secret: Zeroizing::new(secret.trim().to_string()),
        all_key_names: names,
    })
}

// ---------------------------------------------------------------------------------------
// kube-apiserver static Pod

/// What capstan needs from `/etc/kubernetes/manifests/kube-apiserver.yaml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiServerFacts {
    /// The container read (`kube-apiserver`, or the first one).
    pub container: String,
    /// The container's `image` reference, when set.
    pub image: Option<String>,
    /// `--flag=value` arguments from `command` then `args`, in order.
    pub args: FlagMap,
    secure_port: Option<u16>,
}

impl ApiServerFacts {
    /// `--service-account-issuer` values in order; the first signs new tokens.
    pub fn service_account_issuers(&self) -> Vec<&str> {
        self.args.get_all("service-account-issuer")
    }

    /// `--api-audiences` (comma-separated, repeatable); empty when unset, in which case
    /// kube-apiserver uses the first issuer.
    pub fn api_audiences(&self) -> Vec<String> {
        self.args
            .get_all("api-audiences")
            .into_iter()
            .flat_map(split_list)
            .collect()
    }

    /// `--service-cluster-ip-range` as given (may be a dual-stack `a,b` list).
    pub fn service_cluster_ip_range(&self) -> Option<&str> {
        self.args.get("service-cluster-ip-range")
    }

    /// `--advertise-address`.
    pub fn advertise_address(&self) -> Option<&str> {
        self.args.get("advertise-address")
    }

    /// `--secure-port`, when given (kube-apiserver's default is [`DEFAULT_API_PORT`]).
    pub fn secure_port(&self) -> Option<u16> {
        self.secure_port
    }

    /// `--encryption-provider-config` (a path on the control-plane node).
    pub fn encryption_provider_config(&self) -> Option<&str> {
        self.args.get("encryption-provider-config")
    }

    /// The image tag (`registry.k8s.io/kube-apiserver:v1.30.4` → `v1.30.4`).
    pub fn kubernetes_version(&self) -> Option<&str> {
        self.image.as_deref().and_then(image_tag)
    }
}

/// The tag of an image reference (a registry port is not a tag; a digest is dropped).
fn image_tag(image: &str) -> Option<&str> {
    let name = image.split('@').next().unwrap_or(image);
    let last = &name[name.rfind('/').map_or(0, |i| i + 1)..];
    last.rsplit_once(':')
        .map(|(_, t)| t)
        .filter(|t| !t.is_empty())
}

/// Parse the kube-apiserver static Pod manifest: the container named `kube-apiserver` (or
/// the first), its image, and its flags from `command` and `args`.
pub fn parse_apiserver_manifest(label: &str, bytes: &[u8]) -> Result<ApiServerFacts, KubeadmError> {
    let (pod, path) = read_static_pod(label, bytes, "kube-apiserver")?;
    let d = Doc { label };
    let secure_port = match pod.args.get("secure-port") {
        None => None,
        Some(p) => Some(p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
            d.invalid(
                &format!("{path} --secure-port"),
                format!("expected a port number 1-65535, found {p:?}"),
            )
        })?),
    };
    Ok(ApiServerFacts {
        container: pod.container,
        image: pod.image,
        args: pod.args,
        secure_port,
    })
}

/// What capstan reads from a kubeadm control-plane static Pod other than the apiserver's
/// (`/etc/kubernetes/manifests/kube-controller-manager.yaml`, `kube-scheduler.yaml`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticPodFacts {
    /// The container read (the one named after the component, or the first).
    pub container: String,
    /// The container's `image` reference, when set.
    pub image: Option<String>,
    /// `--flag=value` arguments from `command` then `args`, in order.
    pub args: FlagMap,
}

/// Parse the kube-controller-manager static Pod manifest kubeadm writes.
pub fn parse_controller_manager_manifest(
    label: &str,
    bytes: &[u8],
) -> Result<StaticPodFacts, KubeadmError> {
    read_static_pod(label, bytes, "kube-controller-manager").map(|(p, _)| p)
}

/// Parse the kube-scheduler static Pod manifest kubeadm writes.
pub fn parse_scheduler_manifest(label: &str, bytes: &[u8]) -> Result<StaticPodFacts, KubeadmError> {
    read_static_pod(label, bytes, "kube-scheduler").map(|(p, _)| p)
}

/// One v1 Pod document: the container named `component` (or the first), its image and its
/// flags from `command` then `args`; with the container's field path, for messages.
fn read_static_pod(
    label: &str,
    bytes: &[u8],
    component: &str,
) -> Result<(StaticPodFacts, String), KubeadmError> {
    let docs = parse_yaml_stream(label, bytes)?;
    let d = Doc { label };
    let root = match docs.as_slice() {
        [one] => d.as_map(one, "(document)")?,
        _ => {
            return Err(KubeadmError::Document {
                label: label.to_string(),
                problem: format!("{} YAML documents; expected one Pod", docs.len()),
            })
        }
    };
    let kind = d.opt_str(root, "", "kind")?.unwrap_or("");
    let api_version = d.opt_str(root, "", "apiVersion")?.unwrap_or("");
    if kind != "Pod" || api_version != "v1" {
        return Err(KubeadmError::Document {
            label: label.to_string(),
            problem: format!("apiVersion {api_version:?} kind {kind:?}; expected a v1 Pod"),
        });
    }
    let spec = d
        .opt_map(root, "", "spec")?
        .ok_or_else(|| d.missing("spec", "the Pod spec"))?;
    let containers = d
        .opt_seq(spec, "spec", "containers")?
        .ok_or_else(|| d.missing("spec.containers", "a list of containers"))?;
    let mut chosen = None;
    for (i, c) in containers.iter().enumerate() {
        let path = format!("spec.containers[{i}]");
        let m = d.as_map(c, &path)?;
        let name = d.opt_str(m, &path, "name")?;
        if name == Some(component) {
            chosen = Some((i, m));
            break;
        }
        if chosen.is_none() {
            chosen = Some((i, m));
        }
    }
    let (index, container) = chosen.ok_or_else(|| {
        d.missing(
            "spec.containers[0]",
            match component {
                "kube-apiserver" => "the kube-apiserver container",
                "kube-controller-manager" => "the kube-controller-manager container",
                _ => "the kube-scheduler container",
            },
        )
    })?;
    let path = format!("spec.containers[{index}]");
    let mut items = Vec::new();
    for field in ["command", "args"] {
        if let Some(list) = d.opt_seq(container, &path, field)? {
            items.extend(d.string_list(list, &join(&path, field))?);
        }
    }
    let args = FlagMap::from_args(&items);
    let facts = StaticPodFacts {
        container: d
            .opt_str(container, &path, "name")?
            .unwrap_or("")
            .to_string(),
        image: d.opt_str(container, &path, "image")?.map(str::to_string),
        args,
    };
    Ok((facts, path))
}

// ---------------------------------------------------------------------------------------
// ClusterConfiguration

/// `host:port` of `controlPlaneEndpoint`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// A DNS name or IP address (IPv6 without brackets).
    pub host: String,
    /// The port, 6443 when the endpoint gives none.
    pub port: u16,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl Endpoint {
    /// `https://host:port`, the form Talos uses for `cluster.controlPlane.endpoint`.
    #[cfg(any(test, feature = "testkit"))]
    pub fn url(&self) -> String {
        format!("https://{self}")
    }
}

/// What capstan needs from kubeadm's ClusterConfiguration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfigFacts {
    /// `kubeadm.k8s.io/v1beta3` or `kubeadm.k8s.io/v1beta4`.
    pub api_version: String,
    /// `clusterName`, when set and not empty.
    pub cluster_name: Option<String>,
    /// Port defaults to 6443 when absent.
    pub control_plane_endpoint: Option<Endpoint>,
    /// Normalised to `vX.Y.Z` (a pre-release or build suffix is kept).
    pub kubernetes_version: Option<String>,
    /// Defaults to `cluster.local`.
    pub dns_domain: String,
    /// `networking.podSubnet`, split at commas (dual-stack).
    pub pod_subnets: Vec<String>,
    /// `networking.serviceSubnet`, split at commas (dual-stack).
    pub service_subnets: Vec<String>,
    /// `apiServer.extraArgs` in file order (a v1beta4 name may repeat).
    pub api_server_extra_args: FlagMap,
    /// `apiServer.certSANs`, in order.
    pub api_server_cert_sans: Vec<String>,
    /// `etcd.local.imageTag` (`3.5.15-0`).
    pub etcd_image_tag: Option<String>,
    /// `etcd.external` is set (kubeadm does not run etcd).
    pub etcd_external: bool,
    /// `etcd.local.extraArgs` in file order.
    pub etcd_extra_args: FlagMap,
    /// `InitConfiguration.localAPIEndpoint.bindPort`, when the file holds an
    /// InitConfiguration document that sets it (the `kubeadm-config` ConfigMap holds only
    /// the ClusterConfiguration): the port `kubeadm init` gave the apiservers' `--secure-port`.
    pub local_api_bind_port: Option<u16>,
    /// The fields below change what the migration means and are not carried as such:
    /// `check` (finding `kubeadm-config`) refuses or warns about each. See the table in
    /// [`parse_cluster_configuration`].
    pub extras: ClusterConfigExtras,
}

mod cluster_configuration;
pub use cluster_configuration::parse_cluster_configuration;

/// ClusterConfiguration fields read only so that `check` can say what they change (finding
/// `kubeadm-config`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterConfigExtras {
    /// `imageRepository`, when set and not empty (kubeadm's default is `registry.k8s.io`).
    pub image_repository: Option<String>,
    /// `dns.disabled` (v1beta4): kubeadm installed no CoreDNS.
    pub dns_disabled: bool,
    /// `proxy.disabled` (v1beta4): kubeadm installed no kube-proxy.
    pub proxy_disabled: bool,
    /// `apiServer.extraVolumes` as `hostPath → mountPath`, in file order.
    pub api_server_extra_volumes: Vec<String>,
    /// The names of `apiServer.extraEnvs` and `etcd.local.extraEnvs` (v1beta4), as
    /// `apiServer.extraEnvs.NAME` / `etcd.local.extraEnvs.NAME`.
    pub extra_envs: Vec<String>,
    /// `etcd.local.serverCertSANs` then `etcd.local.peerCertSANs`, as `server: SAN` / `peer: SAN`.
    pub etcd_cert_sans: Vec<String>,
    /// `controllerManager.extraArgs` in file order.
    pub controller_manager_extra_args: FlagMap,
    /// `scheduler.extraArgs` in file order.
    pub scheduler_extra_args: FlagMap,
}

/// The names of a v1beta4 `extraEnvs` list (`[{name, value}]`), as `PATH.NAME`.
fn env_names(
    d: &Doc<'_>,
    parent: &serde_json::Map<String, Value>,
    path: &str,
) -> Result<Vec<String>, KubeadmError> {
    let key = path.rsplit('.').next().unwrap_or(path);
    let Some(items) = d.opt_seq(parent, path.rsplit_once('.').map_or("", |(p, _)| p), key)? else {
        return Ok(Vec::new());
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let ipath = format!("{path}[{i}]");
            let m = d.as_map(item, &ipath)?;
            let name = d
                .opt_str(m, &ipath, "name")?
                .filter(|n| !n.is_empty())
                .ok_or_else(|| d.missing(&join(&ipath, "name"), "the variable's name"))?;
            Ok(format!("{path}.{name}"))
        })
        .collect()
}

/// Whether a `controlPlaneEndpoint` names a port (`host:port`, `[v6]:port`).
fn endpoint_has_port(s: &str) -> bool {
    match s.strip_prefix('[') {
        Some(rest) => rest
            .split_once(']')
            .is_some_and(|(_, after)| after.starts_with(':')),
        None => s.matches(':').count() == 1,
    }
}

/// A kubeadm `extraArgs`: a mapping in v1beta3, a list of `{name, value}` in v1beta4 (where
/// a name may repeat), in file order.
fn extra_args(
    d: &Doc<'_>,
    parent: &serde_json::Map<String, Value>,
    path: &str,
    v1beta4: bool,
) -> Result<FlagMap, KubeadmError> {
    let mut out = FlagMap::new();
    match parent.get("extraArgs") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) if !v1beta4 => {
            for (name, value) in map {
                let text = d.scalar_text(value, &join(path, name))?;
                out.push(name, &text);
            }
        }
        Some(Value::Array(items)) if v1beta4 => {
            for (i, item) in items.iter().enumerate() {
                let ipath = format!("{path}[{i}]");
                let m = d.as_map(item, &ipath)?;
                let name = d
                    .opt_str(m, &ipath, "name")?
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| d.missing(&join(&ipath, "name"), "the argument's name"))?;
                let value = match m.get("value") {
                    None => String::new(),
                    Some(v) => d.scalar_text(v, &join(&ipath, "value"))?,
                };
                out.push(name, &value);
            }
        }
        Some(other) => {
            let expected = if v1beta4 {
                "a list of {name, value} (v1beta4)"
            } else {
                "a mapping of name: value (v1beta3)"
            };
            return Err(d.wrong(path, expected, other));
        }
    }
    Ok(out)
}

/// `host[:port]`, `[v6]:port` or a bare IPv6 address; the port defaults to 6443.
fn parse_endpoint(s: &str) -> Result<Endpoint, String> {
    let bad = || format!("expected host[:port], found {s:?}");
    if s.contains("://") || s.contains('/') {
        return Err(format!(
            "expected host[:port] without a scheme or path, found {s:?}"
        ));
    }
    let port = |p: &str| p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(bad);
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(bad)?;
        host.parse::<Ipv6Addr>().map_err(|_| bad())?;
        match after {
            "" => (host, DEFAULT_API_PORT),
            _ => (host, port(after.strip_prefix(':').ok_or_else(bad)?)?),
        }
    } else if s.matches(':').count() > 1 {
        s.parse::<Ipv6Addr>().map_err(|_| bad())?;
        (s, DEFAULT_API_PORT)
    } else if let Some((host, p)) = s.split_once(':') {
        (host, port(p)?)
    } else {
        (s, DEFAULT_API_PORT)
    };
    if host.is_empty() {
        return Err(bad());
    }
    Ok(Endpoint {
        host: host.to_string(),
        port,
    })
}

/// `1.30.4` / `v1.30.4` → `v1.30.4` (a `-pre` or `+build` suffix is kept).
fn normalize_version(s: &str) -> Result<String, String> {
    let body = s.strip_prefix('v').unwrap_or(s);
    let core = body.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    if parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    {
        Ok(format!("v{body}"))
    } else {
        Err(format!(
            "expected a version like v1.30.4, found {s:?} (release labels such as stable-1.30 \
             cannot be resolved offline)"
        ))
    }
}

// ---------------------------------------------------------------------------------------
// Bootstrap tokens

/// A kubeadm bootstrap token `<id>.<secret>`. The id is public (it names the
/// `bootstrap-token-<id>` Secret); the secret part is redacted and zeroized.
pub struct BootstrapToken {
    id: String,
    secret: Zeroizing<String>,
}

impl BootstrapToken {
    /// The public part before the dot.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The secret part after the dot.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The whole token, `id.secret`.
    pub fn token(&self) -> Zeroizing<String> {
        let mut t = Zeroizing::new(String::with_capacity(23));
        t.push_str(&self.id);
        t.push('.');
        t.push_str(&self.secret);
        t
    }
}

impl fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BootstrapToken")
            .field("id", &self.id)
            .field("secret", &format_args!("[redacted]"))
            .finish()
    }
}

/// Check a bootstrap token against kubeadm's format `[a-z0-9]{6}\.[a-z0-9]{16}`
/// (surrounding whitespace, e.g. a file's trailing newline, is ignored). `label` says where
/// it came from (a flag or file name); the error never repeats the token.
pub fn parse_bootstrap_token(label: &str, s: &str) -> Result<BootstrapToken, KubeadmError> {
    let s = s.trim();
    let ok_part = |p: &str, n: usize| {
        p.len() == n
            && p.bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
    };
    match s.split_once('.') {
        Some((id, secret)) if ok_part(id, 6) && ok_part(secret, 16) => Ok(BootstrapToken {
            id: id.to_string(),
            secret: Zeroizing::new(secret.to_string()),
        }),
        _ => Err(KubeadmError::InvalidToken {
            label: label.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET32: &str = "akw4W8o32vFLesbKdZXKlOG4968NaUIOVDHBeA0Dsro=";
    const SECRET16: &str = "MDEyMzQ1Njc4OWFiY2RlZg==";

    fn enc(provider: &str, keys: &str, rest: &str) -> String {
        format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  \
             - resources:\n      - configmaps\n    providers:\n      - identity: {{}}\n  \
             - resources:\n      - secrets\n    providers:\n      - {provider}:\n          keys:\n{keys}{rest}"
        )
    }

    fn key(name: &str, secret: &str) -> String {
        format!("            - name: {name}\n              secret: {secret}\n")
    }

    #[test]
    fn secretbox_key2_matches_talos() {
        let text = enc(
            "secretbox",
            &key("key2", SECRET32),
            "      - identity: {}\n",
        );
        let f = parse_encryption_config("enc.yaml", text.as_bytes()).unwrap();
        assert_eq!(f.resource_index, Some(1));
        assert_eq!(f.providers, ["secretbox", "identity"]);
        let k = f.active.as_ref().unwrap();
        assert_eq!(k.provider, KeyedProvider::Secretbox);
        assert_eq!(k.name, "key2");
        assert_eq!(k.secret().as_str(), SECRET32);
        assert!(f.encrypts_secrets());
        assert_eq!(
            f.talos_layout(),
            TalosLayoutCheck {
                matches: true,
                differences: vec![]
            }
        );
        let dbg = format!("{f:?}");
        assert!(!dbg.contains(SECRET32), "{dbg}");
        assert!(dbg.contains("[redacted]"));
    }

    #[test]
    fn aescbc_key1_matches_and_key0_does_not() {
        let text = enc("aescbc", &key("key1", SECRET16), "      - identity: {}\n");
        let f = parse_encryption_config("enc.yaml", text.as_bytes()).unwrap();
        assert_eq!(f.active.as_ref().unwrap().provider, KeyedProvider::Aescbc);
        assert!(f.talos_layout().matches);

        let text = enc("aescbc", &key("key0", SECRET32), "      - identity: {}\n");
        let f = parse_encryption_config("enc.yaml", text.as_bytes()).unwrap();
        let check = f.talos_layout();
        assert!(!check.matches);
        assert_eq!(check.differences.len(), 1);
        assert!(
            check.differences[0]
                .starts_with("the aescbc key is named key0, Talos names its aescbc key key1"),
            "{check:?}"
        );
    }

    #[test]
    fn extra_keys_and_providers_are_differences() {
        let keys = format!("{}{}", key("key2", SECRET32), key("old", SECRET32));
        let text = enc(
            "secretbox",
            &keys,
            &format!(
                "      - aescbc:\n          keys:\n{}      - identity: {{}}\n",
                key("key1", SECRET16)
            ),
        );
        let f = parse_encryption_config("enc.yaml", text.as_bytes()).unwrap();
        assert_eq!(f.providers, ["secretbox", "aescbc", "identity"]);
        assert_eq!(f.active.as_ref().unwrap().all_key_names, ["key2", "old"]);
        let check = f.talos_layout();
        assert!(!check.matches);
        assert_eq!(check.differences.len(), 2, "{check:?}");
        assert!(check.differences[0].contains("secretbox lists 2 keys (key2, old)"));
        assert!(check.differences[1].contains("providers after secretbox: aescbc"));
    }

    #[test]
    fn kms_first_is_an_error_naming_the_provider() {
        let text = "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - kms:\n      apiVersion: v2\n      name: vault\n      endpoint: unix:///kms.sock\n  - identity: {}\n";
        let err =
            parse_encryption_config("/etc/kubernetes/enc/enc.yaml", text.as_bytes()).unwrap_err();
        assert_eq!(
            err,
            KubeadmError::UnsupportedProvider {
                label: "/etc/kubernetes/enc/enc.yaml".into(),
                path: "resources[0].providers[0]".into(),
                provider: "kms".into()
            }
        );
        assert!(err
            .to_string()
            .contains("only aescbc, secretbox or identity"));
        let aesgcm = text.replace("kms:", "aesgcm:");
        let err = parse_encryption_config("e", aesgcm.as_bytes()).unwrap_err();
        assert!(
            matches!(err, KubeadmError::UnsupportedProvider { ref provider, .. } if provider == "aesgcm")
        );
    }

    #[test]
    fn identity_first_means_no_encryption() {
        let text = "apiVersion: v1\nkind: EncryptionConfig\nresources:\n- resources: [secrets]\n  providers:\n  - identity: {}\n  - aescbc:\n      keys:\n      - name: key1\n        secret: MDEyMzQ1Njc4OWFiY2RlZg==\n";
        let f = parse_encryption_config("enc.yaml", text.as_bytes()).unwrap();
        assert!(!f.encrypts_secrets());
        assert!(f.active.is_none());
        assert_eq!(f.providers, ["identity", "aescbc"]);
        // Talos without a secret lists only identity: the aescbc-encrypted data is unreadable.
        assert!(!f.talos_layout().matches);

        let only = "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: ['*.*']\n  providers:\n  - identity: {}\n";
        let f = parse_encryption_config("enc.yaml", only.as_bytes()).unwrap();
        assert!(!f.encrypts_secrets());
        assert!(f.talos_layout().matches);

        // No entry covers secrets.
        let none = "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [configmaps]\n  providers:\n  - secretbox:\n      keys:\n      - {name: k, secret: akw4W8o32vFLesbKdZXKlOG4968NaUIOVDHBeA0Dsro=}\n";
        let f = parse_encryption_config("enc.yaml", none.as_bytes()).unwrap();
        assert_eq!(f.resource_index, None);
        assert!(!f.encrypts_secrets());
    }

    #[test]
    fn encryption_config_errors_name_paths_not_secrets() {
        let short = "c2hvcnQ="; // 5 bytes
        let text = enc("secretbox", &key("key2", short), "");
        let err = parse_encryption_config("enc.yaml", text.as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "enc.yaml: resources[1].providers[0].secretbox.keys[0].secret: expected base64 of a 32-byte secretbox key, found 5 bytes"
        );
        assert!(!err.to_string().contains(short));
        let text = enc(
            "aescbc",
            &key("key1", SECRET32.replace('=', "!").as_str()),
            "",
        );
        let err = parse_encryption_config("enc.yaml", text.as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "enc.yaml: resources[1].providers[0].aescbc.keys[0].secret: not valid standard base64"
        );
        let text = enc("aescbc", "            - name: key1\n", "");
        let err = parse_encryption_config("enc.yaml", text.as_bytes()).unwrap_err();
        assert!(
            matches!(err, KubeadmError::Missing { ref path, .. } if path == "resources[1].providers[0].aescbc.keys[0].secret"),
            "{err}"
        );
        let err =
            parse_encryption_config("enc.yaml", b"apiVersion: v1\nkind: ConfigMap\n").unwrap_err();
        assert!(
            err.to_string()
                .contains("expected apiserver.config.k8s.io/v1 EncryptionConfiguration"),
            "{err}"
        );
        let err = parse_encryption_config("enc.yaml", b"apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources: {}\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "enc.yaml: resources: expected a sequence, found a mapping"
        );
    }

    const MANIFEST: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: kube-apiserver
  namespace: kube-system
spec:
  containers:
  - name: sidecar
    image: busybox
  - command:
    - kube-apiserver
    - --advertise-address=192.0.2.10
    - --service-account-issuer=https://lb.example:6443
    - --service-account-issuer=https://kubernetes.default.svc.cluster.local
    - --api-audiences=https://lb.example:6443,https://kubernetes.default.svc.cluster.local
    - --secure-port=6443
    - --service-cluster-ip-range=10.96.0.0/12,fd00:10:96::/112
    - --encryption-provider-config=/etc/kubernetes/enc/encryption-config.yaml
    - --allow-privileged
    args:
    - --v=2
    - --api-audiences
    - extra-aud
    image: registry.k8s.io/kube-apiserver:v1.30.4
    name: kube-apiserver
"#;

    #[test]
    fn apiserver_manifest_flags() {
        let f = parse_apiserver_manifest("kube-apiserver.yaml", MANIFEST.as_bytes()).unwrap();
        assert_eq!(f.container, "kube-apiserver");
        assert_eq!(
            f.service_account_issuers(),
            [
                "https://lb.example:6443",
                "https://kubernetes.default.svc.cluster.local"
            ]
        );
        assert_eq!(
            f.api_audiences(),
            [
                "https://lb.example:6443",
                "https://kubernetes.default.svc.cluster.local",
                "extra-aud"
            ]
        );
        assert_eq!(
            f.service_cluster_ip_range(),
            Some("10.96.0.0/12,fd00:10:96::/112")
        );
        assert_eq!(f.advertise_address(), Some("192.0.2.10"));
        assert_eq!(f.secure_port(), Some(6443));
        assert_eq!(
            f.encryption_provider_config(),
            Some("/etc/kubernetes/enc/encryption-config.yaml")
        );
        assert_eq!(f.kubernetes_version(), Some("v1.30.4"));
        assert_eq!(f.args.get("allow-privileged"), Some("true"));
        assert_eq!(f.args.get("v"), Some("2"));
        assert_eq!(
            f.args.iter().next(),
            Some(("advertise-address", "192.0.2.10"))
        );
        assert_eq!(f.args.len(), 10);
    }

    #[test]
    fn apiserver_manifest_defaults_and_errors() {
        let minimal = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: apiserver\n    image: my.registry:5000/kube-apiserver@sha256:abc\n    command: [kube-apiserver]\n";
        let f = parse_apiserver_manifest("m.yaml", minimal.as_bytes()).unwrap();
        assert_eq!(f.container, "apiserver");
        assert!(f.service_account_issuers().is_empty());
        assert!(f.api_audiences().is_empty());
        assert_eq!(f.secure_port(), None);
        assert_eq!(f.kubernetes_version(), None);
        assert_eq!(
            image_tag("my.registry:5000/kube-apiserver:v1.31.0@sha256:abc"),
            Some("v1.31.0")
        );

        let bad = MANIFEST.replace("--secure-port=6443", "--secure-port=http");
        let err = parse_apiserver_manifest("m.yaml", bad.as_bytes()).unwrap_err();
        assert_eq!(err.to_string(), "m.yaml: spec.containers[1] --secure-port: expected a port number 1-65535, found \"http\"");
        let bad = MANIFEST.replace("    - --v=2\n", "    - {v: 2}\n");
        let err = parse_apiserver_manifest("m.yaml", bad.as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "m.yaml: spec.containers[1].args[0]: expected a string, found a mapping"
        );
        let err = parse_apiserver_manifest("m.yaml", b"apiVersion: apps/v1\nkind: Deployment\n")
            .unwrap_err();
        assert!(err.to_string().contains("expected a v1 Pod"), "{err}");
        let err = parse_apiserver_manifest(
            "m.yaml",
            b"apiVersion: v1\nkind: Pod\nspec:\n  containers: []\n",
        )
        .unwrap_err();
        assert!(matches!(err, KubeadmError::Missing { .. }), "{err}");
        let err = parse_apiserver_manifest("m.yaml", b"kind: [").unwrap_err();
        assert!(
            matches!(err, KubeadmError::Yaml { ref label, .. } if label == "m.yaml"),
            "{err}"
        );
    }

    const V1BETA3: &str = r#"apiVersion: kubeadm.k8s.io/v1beta3
kind: InitConfiguration
bootstrapTokens:
- token: abcdef.0123456789abcdef
---
apiVersion: kubeadm.k8s.io/v1beta3
kind: ClusterConfiguration
clusterName: lab-f
controlPlaneEndpoint: lab-f.example.internal:8443
kubernetesVersion: 1.30.4
apiServer:
  certSANs:
  - lab-f.example.internal
  - 192.0.2.10
  extraArgs:
    service-account-issuer: https://lb.example:6443
    secure-port: 6443
    anonymous-auth: false
  timeoutForControlPlane: 4m0s
etcd:
  local:
    dataDir: /var/lib/etcd
    imageTag: 3.5.15-0
networking:
  podSubnet: 10.244.0.0/16,fd00:10:244::/56
  serviceSubnet: 10.96.0.0/12
scheduler: {}
"#;

    const V1BETA4: &str = r#"apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: lab-g
controlPlaneEndpoint: "[2001:db8::10]"
kubernetesVersion: v1.31.2
apiServer:
  extraArgs:
  - name: service-account-issuer
    value: https://lb.example:6443
  - name: service-account-issuer
    value: https://kubernetes.default.svc.cluster.local
  - name: api-audiences
    value: https://lb.example:6443
etcd:
  external:
    endpoints: [https://etcd:2379]
networking:
  dnsDomain: corp.local
  serviceSubnet: 10.96.0.0/12, fd00:10:96::/112
"#;

    #[test]
    fn cluster_configuration_v1beta3() {
        let f = parse_cluster_configuration("kubeadm.yaml", V1BETA3.as_bytes()).unwrap();
        assert_eq!(f.api_version, "kubeadm.k8s.io/v1beta3");
        assert_eq!(f.cluster_name.as_deref(), Some("lab-f"));
        let ep = f.control_plane_endpoint.as_ref().unwrap();
        assert_eq!(
            (ep.host.as_str(), ep.port),
            ("lab-f.example.internal", 8443)
        );
        assert_eq!(ep.url(), "https://lab-f.example.internal:8443");
        assert_eq!(f.kubernetes_version.as_deref(), Some("v1.30.4"));
        assert_eq!(f.dns_domain, "cluster.local");
        assert_eq!(f.pod_subnets, ["10.244.0.0/16", "fd00:10:244::/56"]);
        assert_eq!(f.service_subnets, ["10.96.0.0/12"]);
        assert_eq!(
            f.api_server_cert_sans,
            ["lab-f.example.internal", "192.0.2.10"]
        );
        let args: Vec<(&str, &str)> = f.api_server_extra_args.iter().collect();
        assert_eq!(
            args,
            [
                ("service-account-issuer", "https://lb.example:6443"),
                ("secure-port", "6443"),
                ("anonymous-auth", "false")
            ]
        );
        assert_eq!(f.etcd_image_tag.as_deref(), Some("3.5.15-0"));
        assert!(!f.etcd_external);
    }

    #[test]
    fn cluster_configuration_v1beta4() {
        let f = parse_cluster_configuration("kubeadm.yaml", V1BETA4.as_bytes()).unwrap();
        assert_eq!(f.api_version, "kubeadm.k8s.io/v1beta4");
        let ep = f.control_plane_endpoint.as_ref().unwrap();
        assert_eq!((ep.host.as_str(), ep.port), ("2001:db8::10", 6443));
        assert_eq!(ep.to_string(), "[2001:db8::10]:6443");
        assert_eq!(f.kubernetes_version.as_deref(), Some("v1.31.2"));
        assert_eq!(f.dns_domain, "corp.local");
        assert!(f.pod_subnets.is_empty());
        assert_eq!(f.service_subnets, ["10.96.0.0/12", "fd00:10:96::/112"]);
        assert_eq!(
            f.api_server_extra_args.get_all("service-account-issuer"),
            [
                "https://lb.example:6443",
                "https://kubernetes.default.svc.cluster.local"
            ]
        );
        assert_eq!(f.api_server_extra_args.len(), 3);
        assert_eq!(f.etcd_image_tag, None);
        assert!(f.etcd_external);
    }

    #[test]
    fn init_configuration_bind_port_and_endpoint_without_port() {
        let init = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\nlocalAPIEndpoint:\n  advertiseAddress: 10.0.0.11\n  bindPort: 443\n---\n";
        let f =
            parse_cluster_configuration("k.yaml", format!("{init}{V1BETA4}").as_bytes()).unwrap();
        assert_eq!(f.local_api_bind_port, Some(443));
        // kubeadm completes a controlPlaneEndpoint without a port with the bind port.
        assert_eq!(f.control_plane_endpoint.unwrap().port, 443);
        let f =
            parse_cluster_configuration("k.yaml", format!("{init}{V1BETA3}").as_bytes()).unwrap();
        assert_eq!(
            f.control_plane_endpoint.unwrap().port,
            8443,
            "a given port stays"
        );
        let f = parse_cluster_configuration("k.yaml", V1BETA3.as_bytes()).unwrap();
        assert_eq!(
            f.local_api_bind_port, None,
            "the InitConfiguration sets none"
        );
        let bad = format!("{}{V1BETA4}", init.replace("443", "http"));
        let err = parse_cluster_configuration("k.yaml", bad.as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "k.yaml: InitConfiguration.localAPIEndpoint.bindPort: expected a port number, found a string"
        );
        let bad = format!("{}{V1BETA4}", init.replace("443", "70000"));
        let err = parse_cluster_configuration("k.yaml", bad.as_bytes()).unwrap_err();
        assert!(
            err.to_string()
                .contains("expected a port number 1-65535, found 70000"),
            "{err}"
        );
        assert!(endpoint_has_port("[fd00::1]:6443") && endpoint_has_port("lb:443"));
        assert!(
            !endpoint_has_port("fd00::1")
                && !endpoint_has_port("[fd00::1]")
                && !endpoint_has_port("lb")
        );
    }

    #[test]
    fn cluster_configuration_extras() {
        let f = parse_cluster_configuration("k.yaml", V1BETA4.as_bytes()).unwrap();
        assert_eq!(f.extras, ClusterConfigExtras::default());
        let text = V1BETA4.replace(
            "etcd:\n",
            "imageRepository: registry.example.internal/k8s\ndns: {disabled: true}\nproxy: {disabled: true}\ncontrollerManager:\n  extraArgs:\n  - {name: node-cidr-mask-size, value: \"25\"}\nscheduler:\n  extraArgs:\n  - {name: config, value: /etc/kubernetes/sched.yaml}\netcd:\n",
        )
        .replace(
            "  - name: api-audiences\n    value: https://lb.example:6443\n",
            "  - name: api-audiences\n    value: https://lb.example:6443\n  extraVolumes:\n  - {name: audit, hostPath: /etc/kubernetes/audit, mountPath: /etc/audit}\n  extraEnvs:\n  - {name: HTTPS_PROXY, value: http://proxy:3128}\n",
        )
        .replace(
            "  external:\n    endpoints: [https://etcd:2379]\n",
            "  local:\n    serverCertSANs: [etcd.example.internal]\n    peerCertSANs: [10.0.0.5]\n",
        );
        let x = parse_cluster_configuration("k.yaml", text.as_bytes())
            .unwrap()
            .extras;
        assert_eq!(
            x.image_repository.as_deref(),
            Some("registry.example.internal/k8s")
        );
        assert!(x.dns_disabled && x.proxy_disabled);
        assert_eq!(
            x.api_server_extra_volumes,
            ["/etc/kubernetes/audit → /etc/audit"]
        );
        assert_eq!(x.extra_envs, ["apiServer.extraEnvs.HTTPS_PROXY"]);
        assert_eq!(
            x.etcd_cert_sans,
            ["server: etcd.example.internal", "peer: 10.0.0.5"]
        );
        assert_eq!(
            x.controller_manager_extra_args.get("node-cidr-mask-size"),
            Some("25")
        );
        assert_eq!(x.scheduler_extra_args.len(), 1);
        let bad = V1BETA4.replace("etcd:\n", "proxy: {disabled: yes please}\netcd:\n");
        let err = parse_cluster_configuration("k.yaml", bad.as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "k.yaml: proxy.disabled: expected a boolean, found a string"
        );
    }

    #[test]
    fn cluster_configuration_from_configmap() {
        let indented: String = V1BETA4.lines().map(|l| format!("    {l}\n")).collect();
        let cm = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kubeadm-config\n  namespace: kube-system\ndata:\n  ClusterConfiguration: |\n{indented}");
        let f = parse_cluster_configuration("kubeadm-config.yaml", cm.as_bytes()).unwrap();
        assert_eq!(f.cluster_name.as_deref(), Some("lab-g"));
    }

    #[test]
    fn cluster_configuration_errors_name_fields() {
        let e = |text: &str| {
            parse_cluster_configuration("k.yaml", text.as_bytes())
                .unwrap_err()
                .to_string()
        };
        // v1beta4 extraArgs must be a list; v1beta3 a map.
        let wrong = V1BETA4.replace("  extraArgs:\n  - name: service-account-issuer\n    value: https://lb.example:6443\n", "  extraArgs:\n    a: b\n  x:\n  - name: service-account-issuer\n    value: https://lb.example:6443\n");
        assert_eq!(e(&wrong), "k.yaml: apiServer.extraArgs: expected a list of {name, value} (v1beta4), found a mapping");
        let wrong = V1BETA3.replace(
            "kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration",
            "kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration",
        );
        assert_eq!(e(&wrong), "k.yaml: apiServer.extraArgs: expected a list of {name, value} (v1beta4), found a mapping");
        let wrong = V1BETA4.replace("  - name: api-audiences\n", "  - nom: api-audiences\n");
        assert_eq!(
            e(&wrong),
            "k.yaml: apiServer.extraArgs[2].name is missing; expected the argument's name"
        );
        let wrong = V1BETA3.replace(
            "  certSANs:\n  - lab-f.example.internal\n",
            "  certSANs:\n  - [a]\n",
        );
        assert_eq!(
            e(&wrong),
            "k.yaml: apiServer.certSANs[0]: expected a string, found a sequence"
        );
        let wrong = V1BETA3.replace("networking:\n", "networking:\n  dnsDomain: [x]\n");
        assert_eq!(
            e(&wrong),
            "k.yaml: networking.dnsDomain: expected a string, found a sequence"
        );
        let wrong = V1BETA3.replace("1.30.4", "stable-1.30");
        assert!(e(&wrong).starts_with("k.yaml: kubernetesVersion: expected a version like v1.30.4"));
        let wrong = V1BETA3.replace("lab-f.example.internal:8443", "https://lab-f:6443");
        assert!(e(&wrong)
            .starts_with("k.yaml: controlPlaneEndpoint: expected host[:port] without a scheme"));
        let wrong = V1BETA3.replace("lab-f.example.internal:8443", "lab-f:99999");
        assert_eq!(
            e(&wrong),
            "k.yaml: controlPlaneEndpoint: expected host[:port], found \"lab-f:99999\""
        );
        let wrong = V1BETA3.replace(
            "kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration",
            "kubeadm.k8s.io/v1beta2\nkind: ClusterConfiguration",
        );
        assert!(e(&wrong).contains("apiVersion \"kubeadm.k8s.io/v1beta2\" is not supported"));
        assert!(e("apiVersion: v1\nkind: Pod\n")
            .contains("no ClusterConfiguration document (found Pod)"));
        let twice = format!("{V1BETA4}---\n{V1BETA4}");
        assert!(e(&twice).contains("2 ClusterConfiguration documents"));
    }

    #[test]
    fn endpoints_and_versions() {
        let ep = |s: &str| parse_endpoint(s).map(|e| (e.host, e.port));
        assert_eq!(ep("lb"), Ok(("lb".into(), 6443)));
        assert_eq!(ep("10.0.0.1:443"), Ok(("10.0.0.1".into(), 443)));
        assert_eq!(ep("[fd00::1]:7443"), Ok(("fd00::1".into(), 7443)));
        assert_eq!(ep("fd00::1"), Ok(("fd00::1".into(), 6443)));
        assert!(ep(":6443").is_err());
        assert!(ep("[fd00::1]x").is_err());
        assert!(ep("lb:0").is_err());
        assert_eq!(normalize_version("v1.30.4"), Ok("v1.30.4".into()));
        assert_eq!(normalize_version("1.29.0-rc.1"), Ok("v1.29.0-rc.1".into()));
        assert!(normalize_version("v1.30").is_err());
        assert!(normalize_version("latest").is_err());
    }

    #[test]
    fn bootstrap_tokens() {
        let t = parse_bootstrap_token("--kubernetes-bootstrap-token", "abcdef.0123456789abcdef\n")
            .unwrap();
        assert_eq!(t.id(), "abcdef");
        assert_eq!(t.secret(), "0123456789abcdef");
        assert_eq!(t.token().as_str(), "abcdef.0123456789abcdef");
        let dbg = format!("{t:?}");
        assert_eq!(dbg, "BootstrapToken { id: \"abcdef\", secret: [redacted] }");
        for bad in [
            "ABCDEF.0123456789abcdef",
            "abcde.0123456789abcdef",
            "abcdef.0123456789abcde",
            "abcdef0123456789abcdef",
            "abcdef.0123456789abcdef.x",
            "abcdef-0123456789abcdef",
            "",
        ] {
            let err = parse_bootstrap_token("token.txt", bad).unwrap_err();
            let msg = err.to_string();
            assert!(msg.starts_with("token.txt: not a bootstrap token"), "{msg}");
            if !bad.is_empty() {
                assert!(!msg.contains(bad), "{msg}");
            }
        }
    }
}
