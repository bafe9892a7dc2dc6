//! SOPS-format YAML files encrypted for age recipients: parse, decrypt (with MAC check), encrypt with stable ciphertext, and re-key.
//!
//! The format is the one getsops/sops 3.13.2 reads and writes (see the facts file, E.1–E.3):
//! every leaf selected by the file's crypt rule becomes
//! `ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]` (AES-256-GCM, 32-byte IV, 16-byte tag,
//! AAD = the map keys on the path joined by `:` plus a trailing `:`, list indices left out),
//! the 32-byte data key is wrapped once per age recipient as an ASCII-armored age file, and a
//! SHA-512 MAC over the leaves' plaintext is stored encrypted with the `lastmodified` string as
//! its AAD.
//!
//! Scope: one YAML document per file (a sealed file is one Secret), except
//! [`decrypt_stream`], which reads the multi-document files sops writes; a top-level map,
//! age X25519 recipients. Other key
//! sources (pgp, kms, …) are kept verbatim next to age stanzas but cannot be used; a file
//! with no age stanza, with key groups (Shamir) or with a comment-based crypt rule is rejected.
//! YAML comments are dropped by [`crate::yaml`], so they are neither encrypted nor kept.
//!
//! Secrets never reach an error message or a `Debug` output: value errors name the file and
//! the key path with a fixed description, [`Plain`] prints as `[redacted]`, and the data key
//! lives in [`Zeroizing`] memory. Nothing here implements a primitive: AES-GCM comes from
//! `aes-gcm`, the data-key wrap from `age`, the hashes from `sha2`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::io::Read;

use aes_gcm::aead::consts::U32;
use aes_gcm::aead::generic_array::GenericArray;
use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::aes::Aes256;
use aes_gcm::AesGcm;
use age::x25519;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256, Sha512};

mod stream;
pub use stream::decrypt_stream;
#[cfg(any(test, feature = "testkit"))]
mod rekey;
#[cfg(any(test, feature = "testkit"))]
pub use rekey::{rekey, Rekeyed};
use zeroize::Zeroizing;

use crate::digest::upper_hex;

/// The sops release whose file format this module writes (the `version` metadata key).
pub const SOPS_VERSION: &str = "3.13.2";

/// The suffix sops applies as `unencrypted_suffix` when a file names no crypt rule.
pub const DEFAULT_UNENCRYPTED_SUFFIX: &str = "_unencrypted";

/// AES-256-GCM with sops' 32-byte nonce.
type ValueCipher = AesGcm<Aes256, U32>;

const IV_LEN: usize = 32;
const TAG_LEN: usize = 16;
const KEY_LEN: usize = 32;

/// Why a SOPS operation failed. No variant carries a plaintext value or key material:
/// problems with a value are fixed descriptions next to the file label and key path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SopsError {
    /// The text is not YAML (the parser's message carries no source text).
    #[error("{label}: not valid YAML: {message}")]
    Yaml {
        /// The file.
        label: String,
        /// Parser message with line and column.
        message: String,
    },
    /// More than one YAML document.
    #[error(
        "{label}: holds {count} YAML documents; a sealed file holds exactly one Secret (render \
         applies each sealed file as one object, and one file per Secret keeps a review's diff to \
         the Secret that changed): split it, one `sops --encrypt` per Secret; `capstan secrets \
         decrypt` reads it as sops does"
    )]
    MultiDocument {
        /// The file.
        label: String,
        /// How many documents it holds.
        count: usize,
    },
    /// No top-level `sops` map.
    #[error("{label}: not a SOPS file (no top-level `sops` map)")]
    NotSops {
        /// The file.
        label: String,
    },
    /// The `sops` map is malformed.
    #[error("{label}: sops metadata: {message}")]
    Metadata {
        /// The file.
        label: String,
        /// What is wrong (metadata keys only, never values of the tree).
        message: String,
    },
    /// More than one of the suffix/regex crypt rules is set.
    #[error("{label}: sops metadata sets more than one crypt rule ({rules}); sops allows one")]
    ConflictingRules {
        /// The file.
        label: String,
        /// The rule keys found.
        rules: String,
    },
    /// A valid SOPS file using a feature this module does not implement.
    #[error("{label}: unsupported SOPS file: {message}")]
    Unsupported {
        /// The file.
        label: String,
        /// Which feature.
        message: String,
    },
    /// None of the given identities opens any age stanza.
    #[error("{label}: no identity matches any of its age recipients ({recipients})")]
    NoMatchingIdentity {
        /// The file.
        label: String,
        /// The file's age recipients, comma-separated (public keys).
        recipients: String,
    },
    /// An age stanza that an identity matches could not be opened.
    #[error("{label}: sops.age stanza for {recipient}: {message}")]
    DataKey {
        /// The file.
        label: String,
        /// The stanza's recipient.
        recipient: String,
        /// What failed (age's message; never key material).
        message: String,
    },
    /// A value could not be decrypted, decoded or encrypted.
    #[error("{label}: {path}: {problem}")]
    Value {
        /// The file.
        label: String,
        /// The key path, e.g. `data.password` or `items[2].value`.
        path: String,
        /// A fixed description (never the value).
        problem: &'static str,
    },
    /// The recomputed MAC differs from the stored one.
    #[error("{label}: MAC mismatch: the file was changed after it was encrypted")]
    MacMismatch {
        /// The file.
        label: String,
    },
    /// A regex crypt rule does not compile.
    #[error("{label}: invalid {rule} pattern: {message}")]
    Regex {
        /// The file.
        label: String,
        /// `encrypted_regex` or `unencrypted_regex`.
        rule: &'static str,
        /// The regex crate's message (it quotes the pattern, which is public metadata).
        message: String,
    },
    /// A caller-side problem with the input to encrypt/rekey.
    #[error("{label}: {message}")]
    Input {
        /// The file.
        label: String,
        /// What is wrong.
        message: String,
    },
    /// age wrapping or the system random source failed.
    #[error("{label}: {message}")]
    Crypto {
        /// The file.
        label: String,
        /// What failed (never key material).
        message: String,
    },
}

/// Which leaves a file encrypts. At most one rule is set in a file; sops treats a file
/// naming none as `unencrypted_suffix: _unencrypted`, which [`CryptRule::None`] means too.
/// Each rule is tested against every map key on a leaf's path: a match anywhere applies.
/// Regexes are unanchored unless the pattern anchors itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CryptRule {
    /// Leave a leaf in plain text if a key on its path ends with this; encrypt the rest.
    UnencryptedSuffix(String),
    /// Encrypt a leaf only if a key on its path ends with this.
    EncryptedSuffix(String),
    /// Leave a leaf in plain text if a key on its path matches; encrypt the rest.
    UnencryptedRegex(String),
    /// Encrypt a leaf only if a key on its path matches.
    EncryptedRegex(String),
    /// No rule given: sops' default, `unencrypted_suffix: _unencrypted`.
    #[default]
    None,
}

impl CryptRule {
    /// The rule in force: [`CryptRule::None`] and empty patterns become the default suffix.
    pub fn effective(&self) -> CryptRule {
        match self {
            CryptRule::UnencryptedSuffix(s)
            | CryptRule::EncryptedSuffix(s)
            | CryptRule::UnencryptedRegex(s)
            | CryptRule::EncryptedRegex(s)
                if !s.is_empty() =>
            {
                self.clone()
            }
            _ => CryptRule::UnencryptedSuffix(DEFAULT_UNENCRYPTED_SUFFIX.to_string()),
        }
    }

    /// The metadata key and pattern this rule is written as (after [`Self::effective`]).
    fn entry(&self) -> (&'static str, String) {
        match self.effective() {
            CryptRule::EncryptedSuffix(s) => ("encrypted_suffix", s),
            CryptRule::UnencryptedRegex(s) => ("unencrypted_regex", s),
            CryptRule::EncryptedRegex(s) => ("encrypted_regex", s),
            CryptRule::UnencryptedSuffix(s) => ("unencrypted_suffix", s),
            CryptRule::None => ("unencrypted_suffix", DEFAULT_UNENCRYPTED_SUFFIX.to_string()),
        }
    }
}

/// One `sops.age` entry: a recipient and the armored age file wrapping the data key for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgeStanza {
    /// The `age1…` recipient.
    pub recipient: String,
    /// The ASCII-armored age file holding the 32-byte data key.
    pub enc: String,
}

/// The parsed `sops` map.
#[derive(Debug, Clone, PartialEq)]
pub struct Metadata {
    /// Age stanzas, in file order.
    pub age: Vec<AgeStanza>,
    /// RFC 3339 timestamp; the AAD of the stored MAC.
    pub lastmodified: String,
    /// The encrypted MAC, an `ENC[…]` string.
    pub mac: String,
    /// The crypt rule ([`CryptRule::None`] when the file names none).
    pub rule: CryptRule,
    /// Whether the MAC covers only encrypted leaves.
    pub mac_only_encrypted: bool,
    /// The sops version that wrote the file, if recorded.
    pub version: Option<String>,
    /// Non-empty metadata keys not interpreted here (other key sources such as `pgp`),
    /// kept verbatim and written back when the data key is kept.
    pub other: Map<String, Value>,
}

/// A parsed SOPS file: the document without its `sops` key, the metadata, and the text.
#[derive(Debug, Clone)]
pub struct SopsFile {
    tree: Map<String, Value>,
    metadata: Metadata,
    text: String,
}

/// A decrypted SOPS file: the plaintext tree plus what re-encryption needs (the data key
/// and the IVs of the current values). `Debug` prints `[redacted]`.
pub struct Plain {
    tree: Value,
    data_key: Zeroizing<[u8; KEY_LEN]>,
    /// Digest of (AAD, type, plaintext) → IVs seen for it, in document order.
    stash: HashMap<[u8; 32], Vec<[u8; IV_LEN]>>,
    /// The `mac` string of the file this came from, to pair it with its [`SopsFile`].
    source_mac: String,
}

impl fmt::Debug for Plain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl Plain {
    /// The plaintext document (without the `sops` key).
    pub fn tree(&self) -> &Value {
        &self.tree
    }

    /// Take the plaintext document.
    pub fn into_tree(self) -> Value {
        self.tree
    }
}


impl SopsFile {
    /// Parse a SOPS YAML file. `label` names it in errors.
    pub fn parse(label: &str, text: &str) -> Result<SopsFile, SopsError> {
        let mut docs = crate::yaml::parse_stream(text).map_err(|e| SopsError::Yaml {
            label: label.to_string(),
            message: e.message,
        })?;
        if docs.len() > 1 {
            return Err(SopsError::MultiDocument {
                label: label.to_string(),
                count: docs.len(),
            });
        }
        let not_sops = || SopsError::NotSops {
            label: label.to_string(),
        };
        let Some(Value::Object(mut tree)) = docs.pop() else {
            return Err(not_sops());
        };
        let sops = tree.shift_remove("sops").ok_or_else(not_sops)?;
        let Value::Object(sops) = sops else {
            return Err(meta_err(label, "`sops` is not a map"));
        };
        let metadata = parse_metadata(label, sops)?;
        Ok(SopsFile {
            tree,
            metadata,
            text: text.to_string(),
        })
    }

    /// The parsed metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The encrypted document without the `sops` key.
    #[cfg(any(test, feature = "testkit"))]
    pub fn tree(&self) -> &Map<String, Value> {
        &self.tree
    }

    /// The text this was parsed from.
    #[cfg(any(test, feature = "testkit"))]
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The age recipients the data key is wrapped for, in file order.
    pub fn recipients(&self) -> Vec<String> {
        self.metadata
            .age
            .iter()
            .map(|s| s.recipient.clone())
            .collect()
    }

    /// Check without any key what can be checked: every age stanza's `enc` is a
    /// well-formed ASCII-armored age file (armor lines, base64, end line, an age header
    /// that parses), the MAC and every leaf the crypt rule encrypts are well-formed
    /// `ENC[…]` strings (base64, 32-byte IV, 16-byte tag, a known type; sops leaves an empty
    /// string as it is), and every leaf under the top-level keys `sealed` is one of them: a
    /// plaintext value there is refused, not passed on.
    pub fn check_ciphertext(&self, label: &str, sealed: &[&str]) -> Result<(), SopsError> {
        for (i, stanza) in self.metadata.age.iter().enumerate() {
            check_armor(&stanza.enc).map_err(|problem| SopsError::Value {
                label: label.to_string(),
                path: format!("sops.age[{i}].enc"),
                problem,
            })?;
        }
        fn walk<'a>(
            v: &'a Value,
            segs: &mut Vec<Seg<'a>>,
            visit: &mut LeafCheck<'a, '_>,
        ) -> Result<(), SopsError> {
            match v {
                Value::Object(m) => {
                    for (k, child) in m {
                        segs.push(Seg::Key(k));
                        walk(child, segs, visit)?;
                        segs.pop();
                    }
                    Ok(())
                }
                Value::Array(items) => {
                    for (i, child) in items.iter().enumerate() {
                        segs.push(Seg::Index(i));
                        walk(child, segs, visit)?;
                        segs.pop();
                    }
                    Ok(())
                }
                leaf => visit(leaf, segs),
            }
        }
        let value_err = |segs: &[Seg<'_>], problem: &'static str| SopsError::Value {
            label: label.to_string(),
            path: crate::yaml::path_text(segs),
            problem,
        };
        parse_enc(&self.metadata.mac).map_err(|p| SopsError::Value {
            label: label.to_string(),
            path: "sops.mac".into(),
            problem: p,
        })?;
        let rule = Matcher::new(label, &self.metadata.rule)?;
        let mut visit = |leaf: &Value, segs: &[Seg<'_>]| -> Result<(), SopsError> {
            let under_sealed = matches!(segs.first(), Some(Seg::Key(k)) if sealed.contains(k));
            let encrypted = rule.encrypts(segs);
            if under_sealed && !encrypted {
                return Err(value_err(
                    segs,
                    "is not covered by the file's crypt rule: it would be applied as it is written",
                ));
            }
            if !encrypted || leaf.is_null() {
                return Ok(());
            }
            match leaf {
                Value::String(enc) if enc.is_empty() => Ok(()),
                Value::String(enc) => parse_enc(enc).map(|_| ()).map_err(|p| value_err(segs, p)),
                _ => Err(value_err(
                    segs,
                    "is not an ENC[…] string but the crypt rule says it is encrypted",
                )),
            }
        };
        let mut segs = Vec::new();
        for (k, v) in &self.tree {
            segs.push(Seg::Key(k));
            walk(v, &mut segs, &mut visit)?;
            segs.pop();
        }
        Ok(())
    }

    /// Decrypt with any of `identities`: unwrap the data key, decrypt every encrypted leaf
    /// (restoring its type), and verify the MAC. Leaves outside the rule stay as they are.
    pub fn decrypt(
        &self,
        label: &str,
        identities: &[x25519::Identity],
    ) -> Result<Plain, SopsError> {
        let (mut trees, data_key, stash) =
            self.decrypt_branches(label, identities, &[&self.tree])?;
        Ok(Plain {
            tree: Value::Object(trees.pop().unwrap_or_default()),
            data_key,
            stash,
            source_mac: self.metadata.mac.clone(),
        })
    }

    /// Decrypt `branches` (this file's tree, or every document of a stream sops wrote
    /// together) with this file's metadata: one MAC over the values of every branch in
    /// order, as sops computes it (getsops/sops `sops.go` `Tree.Decrypt`: one `sha512`
    /// for `range tree.Branches`).
    #[allow(clippy::type_complexity, reason = "one private helper's result")]
    fn decrypt_branches(
        &self,
        label: &str,
        identities: &[x25519::Identity],
        branches: &[&Map<String, Value>],
    ) -> Result<
        (
            Vec<Map<String, Value>>,
            Zeroizing<[u8; KEY_LEN]>,
            HashMap<[u8; 32], Vec<[u8; IV_LEN]>>,
        ),
        SopsError,
    > {
        let data_key = self.unwrap_data_key(label, identities)?;
        let rule = Matcher::new(label, &self.metadata.rule)?;
        let mut walk = Walk {
            label,
            cipher: cipher(label, &data_key)?,
            rule,
            mac_only: self.metadata.mac_only_encrypted,
            hash: mac_hasher(self.metadata.mac_only_encrypted),
            stash: HashMap::new(),
            used: HashMap::new(),
        };
        let mut trees = Vec::with_capacity(branches.len());
        for branch in branches {
            let mut segs = Vec::new();
            let mut out = Map::new();
            for (k, v) in *branch {
                segs.push(Seg::Key(k));
                out.insert(k.clone(), walk.decrypt(v, &mut segs)?);
                segs.pop();
            }
            trees.push(out);
        }
        let computed = upper_hex(&walk.hash.finalize_reset());
        let mac_aad = mac_aad(&self.metadata.lastmodified);
        let (stored, iv, _) =
            open(&walk.cipher, &self.metadata.mac, mac_aad.as_bytes()).map_err(|problem| {
                SopsError::Value {
                    label: label.to_string(),
                    path: "sops.mac".into(),
                    problem: if problem == OPEN_FAILED {
                        "cannot be decrypted (the mac or lastmodified was changed)"
                    } else {
                        problem
                    },
                }
            })?;
        if stored.as_slice() != computed.as_bytes() {
            return Err(SopsError::MacMismatch {
                label: label.to_string(),
            });
        }
        walk.remember(&mac_aad, "str", computed.as_bytes(), iv);
        Ok((trees, data_key, walk.stash))
    }

    fn unwrap_data_key(
        &self,
        label: &str,
        identities: &[x25519::Identity],
    ) -> Result<Zeroizing<[u8; KEY_LEN]>, SopsError> {
        let ours: BTreeSet<String> = identities
            .iter()
            .map(|i| i.to_public().to_string())
            .collect();
        let mut hard_error = None;
        for stanza in &self.metadata.age {
            let fail = |message: String| SopsError::DataKey {
                label: label.to_string(),
                recipient: stanza.recipient.clone(),
                message,
            };
            match unwrap_stanza(&stanza.enc, identities) {
                Ok(bytes) => {
                    let key = <[u8; KEY_LEN]>::try_from(bytes.as_slice())
                        .map_err(|_| fail("does not hold a 32-byte data key".into()))?;
                    return Ok(Zeroizing::new(key));
                }
                Err(age::DecryptError::NoMatchingKeys) => {}
                Err(e) => {
                    if hard_error.is_none() && ours.contains(stanza.recipient.trim()) {
                        hard_error = Some(fail(e.to_string()));
                    }
                }
            }
        }
        Err(hard_error.unwrap_or_else(|| SopsError::NoMatchingIdentity {
            label: label.to_string(),
            recipients: self.recipients().join(", "),
        }))
    }
}

/// Encrypt `plain_tree` (a map, without a `sops` key) as a SOPS YAML document for
/// `recipients`, returning its text.
///
/// With `previous` (a file and its decryption) the result is stable: the data key is reused,
/// a leaf whose plaintext, type and path are unchanged keeps its IV (so its `ENC[…]` string
/// is byte-identical, as sops' own stash does), its age stanzas are kept for recipients that
/// remain, and when the tree, the recipient set, the rule and `mac_only_encrypted` are all
/// unchanged the previous text is returned verbatim (so `lastmodified` does not move).
/// Otherwise `lastmodified` (RFC 3339 UTC, `YYYY-MM-DDTHH:MM:SSZ`) is written.
pub fn encrypt(
    label: &str,
    plain_tree: &Value,
    recipients: &[x25519::Recipient],
    rule: CryptRule,
    mac_only_encrypted: bool,
    lastmodified: &str,
    previous: Option<(&SopsFile, &Plain)>,
) -> Result<String, SopsError> {
    let input = |message: &str| SopsError::Input {
        label: label.to_string(),
        message: message.to_string(),
    };
    let Value::Object(tree) = plain_tree else {
        return Err(input("the document to encrypt must be a map"));
    };
    if tree.contains_key("sops") {
        return Err(input(
            "the document to encrypt has a top-level `sops` key, which SOPS reserves",
        ));
    }
    if !is_canonical_timestamp(lastmodified) {
        return Err(input(
            "lastmodified must be RFC 3339 UTC without fractional seconds (YYYY-MM-DDTHH:MM:SSZ)",
        ));
    }
    let wanted = dedup_recipients(label, recipients)?;
    // Same recipients, rule and MAC scope as the previous file.
    let mut same_setup = false;
    if let Some((file, plain)) = previous {
        check_pair(label, file, plain)?;
        let old: BTreeSet<&str> = file
            .metadata
            .age
            .iter()
            .map(|s| s.recipient.as_str())
            .collect();
        let new: BTreeSet<&str> = wanted.iter().map(|(s, _)| s.as_str()).collect();
        same_setup = old == new
            && file.metadata.rule.effective() == rule.effective()
            && file.metadata.mac_only_encrypted == mac_only_encrypted;
        if same_setup && same_tree(&plain.tree, plain_tree) {
            return Ok(file.text.clone());
        }
    }

    let data_key = match previous {
        Some((_, plain)) => plain.data_key.clone(),
        None => {
            let mut key = Zeroizing::new([0u8; KEY_LEN]);
            random(label, &mut key[..])?;
            key
        }
    };
    let mut walk = Walk {
        label,
        cipher: cipher(label, &data_key)?,
        rule: Matcher::new(label, &rule)?,
        mac_only: mac_only_encrypted,
        hash: mac_hasher(mac_only_encrypted),
        stash: previous.map(|(_, p)| p.stash.clone()).unwrap_or_default(),
        used: HashMap::new(),
    };
    let mut segs = Vec::new();
    let mut out = Map::new();
    for (k, v) in tree {
        segs.push(Seg::Key(k));
        out.insert(k.clone(), walk.encrypt(v, &mut segs)?);
        segs.pop();
    }
    let mac_hex = upper_hex(&walk.hash.finalize_reset());
    // With the same recipients, rule and MAC scope, when nothing the MAC covers changed (for
    // example only an unencrypted value under `mac_only_encrypted`), keep `lastmodified`:
    // the stashed IV then reproduces the encrypted MAC byte for byte.
    let lastmodified = match previous {
        Some((file, _))
            if same_setup
                && walk.stash.contains_key(&stash_key(
                    &mac_aad(&file.metadata.lastmodified),
                    "str",
                    mac_hex.as_bytes(),
                )) =>
        {
            file.metadata.lastmodified.as_str()
        }
        _ => lastmodified,
    };
    let mac = walk.seal_leaf(
        &mac_aad(lastmodified),
        "str",
        mac_hex.as_bytes(),
        "sops.mac",
    )?;

    let (age, _, _) = stanzas(
        label,
        &data_key,
        &wanted,
        previous.map(|(f, _)| f.metadata.age.as_slice()),
    )?;
    let metadata = Metadata {
        age,
        lastmodified: lastmodified.to_string(),
        mac,
        rule,
        mac_only_encrypted,
        version: Some(SOPS_VERSION.to_string()),
        // Other key sources wrap the data key; they stay valid only while it is reused.
        other: previous
            .map(|(f, _)| f.metadata.other.clone())
            .unwrap_or_default(),
    };
    Ok(render(&out, &metadata))
}

/// Format seconds since the Unix epoch as sops' `lastmodified` (`YYYY-MM-DDTHH:MM:SSZ`).
pub fn rfc3339_utc(unix_seconds: u64) -> String {
    let days = (unix_seconds / 86_400) as i64;
    let rem = unix_seconds % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

/// The current time as sops' `lastmodified`.
pub fn lastmodified_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339_utc(secs)
}

// ---------------------------------------------------------------------------------------
// Metadata

fn meta_err(label: &str, message: impl Into<String>) -> SopsError {
    SopsError::Metadata {
        label: label.to_string(),
        message: message.into(),
    }
}

/// Key sources other than age that sops may write flat into `sops`.
const OTHER_KEY_SOURCES: &[&str] = &["pgp", "kms", "gcp_kms", "azure_kv", "hc_vault", "hckms"];

fn is_empty_value(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

fn meta_string(label: &str, key: &str, v: Value) -> Result<String, SopsError> {
    match v {
        Value::String(s) => Ok(s),
        Value::Null => Ok(String::new()),
        Value::Number(n) => Ok(n.to_string()),
        _ => Err(meta_err(label, format!("`{key}` is not a string"))),
    }
}

fn parse_metadata(label: &str, sops: Map<String, Value>) -> Result<Metadata, SopsError> {
    let mut age = Vec::new();
    let mut lastmodified = String::new();
    let mut mac = String::new();
    let mut rules: Vec<(&'static str, String)> = Vec::new();
    let mut mac_only_encrypted = false;
    let mut version = None;
    let mut other = Map::new();
    for (key, value) in sops {
        match key.as_str() {
            "age" => age = parse_age(label, value)?,
            "lastmodified" => lastmodified = meta_string(label, &key, value)?,
            "mac" => mac = meta_string(label, &key, value)?,
            "version" => {
                let v = meta_string(label, &key, value)?;
                version = (!v.is_empty()).then_some(v);
            }
            "mac_only_encrypted" => {
                mac_only_encrypted = match value {
                    Value::Bool(b) => b,
                    Value::Null => false,
                    Value::String(s) => parse_go_bool(&s)
                        .ok_or_else(|| meta_err(label, "`mac_only_encrypted` is not a boolean"))?,
                    _ => return Err(meta_err(label, "`mac_only_encrypted` is not a boolean")),
                }
            }
            "unencrypted_suffix"
            | "encrypted_suffix"
            | "unencrypted_regex"
            | "encrypted_regex"
            | "unencrypted_comment_regex"
            | "encrypted_comment_regex" => {
                let name = match key.as_str() {
                    "unencrypted_suffix" => "unencrypted_suffix",
                    "encrypted_suffix" => "encrypted_suffix",
                    "unencrypted_regex" => "unencrypted_regex",
                    "encrypted_regex" => "encrypted_regex",
                    "unencrypted_comment_regex" => "unencrypted_comment_regex",
                    _ => "encrypted_comment_regex",
                };
                let pattern = meta_string(label, &key, value)?;
                if !pattern.is_empty() {
                    rules.push((name, pattern));
                }
            }
            "shamir_threshold" => {}
            _ => {
                if !is_empty_value(&value) {
                    other.insert(key, value);
                }
            }
        }
    }
    if rules.len() > 1 {
        return Err(SopsError::ConflictingRules {
            label: label.to_string(),
            rules: rules.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", "),
        });
    }
    let unsupported = |message: String| SopsError::Unsupported {
        label: label.to_string(),
        message,
    };
    if other.contains_key("key_groups") {
        return Err(unsupported(
            "key groups (Shamir secret sharing) are not supported".into(),
        ));
    }
    let rule = match rules.pop() {
        None => CryptRule::None,
        Some(("unencrypted_suffix", p)) => CryptRule::UnencryptedSuffix(p),
        Some(("encrypted_suffix", p)) => CryptRule::EncryptedSuffix(p),
        Some(("unencrypted_regex", p)) => CryptRule::UnencryptedRegex(p),
        Some(("encrypted_regex", p)) => CryptRule::EncryptedRegex(p),
        Some((name, _)) => {
            return Err(unsupported(format!(
                "`{name}` depends on YAML comments, which are not kept"
            )))
        }
    };
    if age.is_empty() {
        let sources: Vec<&str> = OTHER_KEY_SOURCES
            .iter()
            .copied()
            .filter(|k| other.contains_key(*k))
            .collect();
        if sources.is_empty() {
            return Err(meta_err(label, "no age recipients (`sops.age` is empty)"));
        }
        return Err(unsupported(format!(
            "its data key is wrapped only for {} keys, not age",
            sources.join(", ")
        )));
    }
    if mac.is_empty() {
        return Err(meta_err(label, "`mac` is missing"));
    }
    if lastmodified.is_empty() {
        return Err(meta_err(label, "`lastmodified` is missing"));
    }
    Ok(Metadata {
        age,
        lastmodified,
        mac,
        rule,
        mac_only_encrypted,
        version,
        other,
    })
}

fn parse_age(label: &str, value: Value) -> Result<Vec<AgeStanza>, SopsError> {
    let items = match value {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items,
        _ => return Err(meta_err(label, "`age` is not a list")),
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let Value::Object(mut m) = item else {
            return Err(meta_err(label, format!("`age[{i}]` is not a map")));
        };
        let mut field = |name: &str| match m.shift_remove(name) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s),
            _ => Err(meta_err(label, format!("`age[{i}].{name}` is missing"))),
        };
        let recipient = field("recipient")?;
        let enc = field("enc")?;
        out.push(AgeStanza { recipient, enc });
    }
    Ok(out)
}

/// sops writes the metadata map with sorted keys (3.13); stanzas as `recipient`, `enc`.
fn metadata_value(meta: &Metadata) -> Value {
    let mut sorted: BTreeMap<String, Value> = BTreeMap::new();
    for (k, v) in &meta.other {
        sorted.insert(k.clone(), v.clone());
    }
    let age: Vec<Value> = meta
        .age
        .iter()
        .map(|s| {
            let mut m = Map::new();
            m.insert("recipient".into(), Value::String(s.recipient.clone()));
            m.insert("enc".into(), Value::String(s.enc.clone()));
            Value::Object(m)
        })
        .collect();
    sorted.insert("age".into(), Value::Array(age));
    let (rule_key, pattern) = meta.rule.entry();
    sorted.insert(rule_key.into(), Value::String(pattern));
    sorted.insert(
        "lastmodified".into(),
        Value::String(meta.lastmodified.clone()),
    );
    sorted.insert("mac".into(), Value::String(meta.mac.clone()));
    if meta.mac_only_encrypted {
        sorted.insert("mac_only_encrypted".into(), Value::Bool(true));
    }
    if let Some(v) = &meta.version {
        sorted.insert("version".into(), Value::String(v.clone()));
    }
    Value::Object(sorted.into_iter().collect())
}

fn render(tree: &Map<String, Value>, meta: &Metadata) -> String {
    let mut doc = tree.clone();
    doc.insert("sops".into(), metadata_value(meta));
    crate::yaml::to_string(&Value::Object(doc))
}

// ---------------------------------------------------------------------------------------
// Keys and recipients

fn check_pair(label: &str, file: &SopsFile, plain: &Plain) -> Result<(), SopsError> {
    if plain.source_mac != file.metadata.mac {
        return Err(SopsError::Input {
            label: label.to_string(),
            message: "the decrypted content passed in does not belong to this file".into(),
        });
    }
    Ok(())
}

fn dedup_recipients<'r>(
    label: &str,
    recipients: &'r [x25519::Recipient],
) -> Result<Vec<(String, &'r x25519::Recipient)>, SopsError> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for r in recipients {
        let s = r.to_string();
        if seen.insert(s.clone()) {
            out.push((s, r));
        }
    }
    if out.is_empty() {
        return Err(SopsError::Input {
            label: label.to_string(),
            message: "at least one age recipient is required".into(),
        });
    }
    Ok(out)
}

type StanzaPlan = (Vec<AgeStanza>, Vec<String>, Vec<String>);

/// Keep previous stanzas of remaining recipients (in their order), then wrap the data key
/// for new recipients (in the order given). Returns (stanzas, added, removed).
fn stanzas(
    label: &str,
    data_key: &[u8; KEY_LEN],
    wanted: &[(String, &x25519::Recipient)],
    previous: Option<&[AgeStanza]>,
) -> Result<StanzaPlan, SopsError> {
    let wanted_set: BTreeSet<&str> = wanted.iter().map(|(s, _)| s.as_str()).collect();
    let mut out: Vec<AgeStanza> = Vec::new();
    let mut removed = Vec::new();
    for stanza in previous.unwrap_or_default() {
        let r = stanza.recipient.as_str();
        if out.iter().any(|s| s.recipient == r) {
            continue;
        }
        if wanted_set.contains(r) {
            out.push(stanza.clone());
        } else if !removed.iter().any(|x: &String| x == r) {
            removed.push(r.to_string());
        }
    }
    let mut added = Vec::new();
    for (s, r) in wanted {
        if out.iter().any(|st| &st.recipient == s) {
            continue;
        }
        let enc = age::encrypt_and_armor(*r, &data_key[..]).map_err(|e| SopsError::Crypto {
            label: label.to_string(),
            message: format!("wrapping the data key for {s}: {e}"),
        })?;
        out.push(AgeStanza {
            recipient: s.clone(),
            enc,
        });
        added.push(s.clone());
    }
    Ok((out, added, removed))
}

/// Whether `enc` is an ASCII-armored age file as far as can be told without a key: the
/// armor is read whole (begin and end lines, 64-column lines of canonical base64, as the
/// age crate's `ArmoredReader` enforces) and the age header parses. A stanza that fails
/// here could never be unwrapped, by any identity.
fn check_armor(enc: &str) -> Result<(), &'static str> {
    const BEGIN: &str = "-----BEGIN AGE ENCRYPTED FILE-----";
    let text = enc.trim_start();
    if !text.starts_with(BEGIN) {
        return Err("is not an ASCII-armored age file");
    }
    let mut bytes = Vec::with_capacity(text.len());
    age::armor::ArmoredReader::new(text.as_bytes())
        .read_to_end(&mut bytes)
        .map_err(|_| "is not a well-formed ASCII-armored age file (broken armor)")?;
    age::Decryptor::new_buffered(&bytes[..]).map_err(|_| "holds no age header that parses")?;
    Ok(())
}

fn unwrap_stanza(
    enc: &str,
    identities: &[x25519::Identity],
) -> Result<Zeroizing<Vec<u8>>, age::DecryptError> {
    let reader = age::armor::ArmoredReader::new(enc.trim_start().as_bytes());
    let decryptor = age::Decryptor::new_buffered(reader)?;
    let mut stream = decryptor.decrypt(identities.iter().map(|i| i as &dyn age::Identity))?;
    let mut out = Zeroizing::new(Vec::with_capacity(KEY_LEN));
    stream.read_to_end(&mut out)?;
    Ok(out)
}

fn random(label: &str, buf: &mut [u8]) -> Result<(), SopsError> {
    getrandom::fill(buf).map_err(|e| SopsError::Crypto {
        label: label.to_string(),
        message: format!("no system randomness: {e}"),
    })
}

fn cipher(label: &str, key: &[u8; KEY_LEN]) -> Result<ValueCipher, SopsError> {
    ValueCipher::new_from_slice(&key[..]).map_err(|_| SopsError::Crypto {
        label: label.to_string(),
        message: "invalid data key length".into(),
    })
}

// ---------------------------------------------------------------------------------------
// Values

// A step on a leaf's path: map keys form the AAD and feed the rule; indices only show in
// error paths.
use crate::yaml::PathStep as Seg;

fn aad(segs: &[Seg<'_>]) -> String {
    let mut out = String::new();
    for seg in segs {
        if let Seg::Key(k) = seg {
            out.push_str(k);
            out.push(':');
        }
    }
    out
}

/// A crypt-rule regex, compiled once per process: every sealed file of a repository
/// usually carries the same rule, and compiling it costs more than checking the file. At
/// most `KEEP` patterns are kept (a repository is untrusted input); others compile each time.
fn compiled(pattern: &str) -> Result<regex::Regex, regex::Error> {
    const KEEP: usize = 16;
    static CACHE: std::sync::Mutex<Vec<(String, regex::Regex)>> = std::sync::Mutex::new(Vec::new());
    let cached = |cache: &[(String, regex::Regex)]| {
        cache
            .iter()
            .find(|(p, _)| p == pattern)
            .map(|(_, re)| re.clone())
    };
    if let Some(re) = CACHE.lock().ok().and_then(|c| cached(&c)) {
        return Ok(re);
    }
    let re = regex::Regex::new(pattern)?;
    if let Ok(mut cache) = CACHE.lock() {
        if cache.len() < KEEP && cached(&cache).is_none() {
            cache.push((pattern.to_string(), re.clone()));
        }
    }
    Ok(re)
}

/// sops' `shouldBeEncrypted` for the four path rules.
enum Matcher {
    Suffix { suffix: String, encrypt: bool },
    Regex { re: regex::Regex, encrypt: bool },
}

impl Matcher {
    fn new(label: &str, rule: &CryptRule) -> Result<Matcher, SopsError> {
        let regex = |p: &str, rule: &'static str| {
            compiled(p).map_err(|e| SopsError::Regex {
                label: label.to_string(),
                rule,
                message: e.to_string(),
            })
        };
        Ok(match rule.effective() {
            CryptRule::EncryptedSuffix(suffix) => Matcher::Suffix {
                suffix,
                encrypt: true,
            },
            CryptRule::UnencryptedRegex(p) => Matcher::Regex {
                re: regex(&p, "unencrypted_regex")?,
                encrypt: false,
            },
            CryptRule::EncryptedRegex(p) => Matcher::Regex {
                re: regex(&p, "encrypted_regex")?,
                encrypt: true,
            },
            CryptRule::UnencryptedSuffix(suffix) => Matcher::Suffix {
                suffix,
                encrypt: false,
            },
            CryptRule::None => Matcher::Suffix {
                suffix: DEFAULT_UNENCRYPTED_SUFFIX.to_string(),
                encrypt: false,
            },
        })
    }

    fn encrypts(&self, segs: &[Seg<'_>]) -> bool {
        let mut keys = segs.iter().filter_map(|s| match s {
            Seg::Key(k) => Some(*k),
            Seg::Index(_) => None,
        });
        match self {
            Matcher::Suffix { suffix, encrypt } => {
                keys.any(|k| k.ends_with(suffix.as_str())) == *encrypt
            }
            Matcher::Regex { re, encrypt } => keys.any(|k| re.is_match(k)) == *encrypt,
        }
    }
}

fn mac_hasher(mac_only_encrypted: bool) -> Sha512 {
    let mut h = Sha512::new();
    if mac_only_encrypted {
        // sops' MACOnlyEncryptedInitialization: SHA-256("sops").
        h.update(Sha256::digest(b"sops"));
    }
    h
}

fn mac_aad(lastmodified: &str) -> String {
    // sops re-formats the parsed time with RFC 3339 (no fractional seconds) for the AAD.
    match (lastmodified.find('.'), lastmodified.get(..10)) {
        (Some(dot), Some(_)) if dot > 10 => {
            let rest = &lastmodified[dot + 1..];
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            format!("{}{}", &lastmodified[..dot], &rest[digits..])
        }
        _ => lastmodified.to_string(),
    }
}

fn is_canonical_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// Go's `strconv.FormatFloat(v, 'f', -1, 64)`: shortest round-trip digits, no exponent.
/// Rust's `Display` for `f64` has the same contract.
fn go_float(f: f64) -> String {
    format!("{f}")
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// The typed plaintext encoding sops uses for both the cipher input and the MAC
/// (`ToBytes`). `None` for null and containers.
fn leaf_bytes(v: &Value) -> Option<(Zeroizing<Vec<u8>>, &'static str)> {
    match v {
        Value::String(s) => Some((Zeroizing::new(s.as_bytes().to_vec()), "str")),
        Value::Bool(b) => Some((
            Zeroizing::new(if *b {
                b"True".to_vec()
            } else {
                b"False".to_vec()
            }),
            "bool",
        )),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Some((Zeroizing::new(i.to_string().into_bytes()), "int"))
            } else if let Some(u) = n.as_u64() {
                Some((Zeroizing::new(u.to_string().into_bytes()), "int"))
            } else {
                let f = n.as_f64().unwrap_or(0.0);
                Some((Zeroizing::new(go_float(f).into_bytes()), "float"))
            }
        }
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

const OPEN_FAILED: &str =
    "cannot be decrypted (wrong data key, tampered ciphertext, or value moved to another key)";

/// A decrypted `ENC[…]` string: (plaintext, IV, type).
type Opened = (Zeroizing<Vec<u8>>, [u8; IV_LEN], String);

/// A check of one leaf of a SOPS tree, with its key path.
type LeafCheck<'a, 'f> = dyn FnMut(&'a Value, &[Seg<'a>]) -> Result<(), SopsError> + 'f;

/// The parts of an `ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]` string, decoded and
/// length-checked (no key needed).
struct EncParts<'a> {
    data: Vec<u8>,
    iv: [u8; IV_LEN],
    tag: [u8; TAG_LEN],
    ty: &'a str,
}

fn parse_enc(enc: &str) -> Result<EncParts<'_>, &'static str> {
    const MALFORMED: &str = "not a well-formed ENC[AES256_GCM,…] value";
    let body = enc
        .strip_prefix("ENC[AES256_GCM,data:")
        .and_then(|s| s.strip_suffix(']'))
        .ok_or(MALFORMED)?;
    let (data, rest) = body.split_once(",iv:").ok_or(MALFORMED)?;
    let (iv, rest) = rest.split_once(",tag:").ok_or(MALFORMED)?;
    let (tag, ty) = rest.split_once(",type:").ok_or(MALFORMED)?;
    let data = B64.decode(data).map_err(|_| MALFORMED)?;
    let iv = B64.decode(iv).map_err(|_| MALFORMED)?;
    let iv = <[u8; IV_LEN]>::try_from(iv.as_slice()).map_err(|_| "IV is not 32 bytes")?;
    let tag = B64.decode(tag).map_err(|_| MALFORMED)?;
    let tag = <[u8; TAG_LEN]>::try_from(tag.as_slice()).map_err(|_| "tag is not 16 bytes")?;
    if !matches!(ty, "str" | "int" | "float" | "bool" | "bytes" | "time") {
        return Err("unknown value type in ENC[…]");
    }
    Ok(EncParts { data, iv, tag, ty })
}

/// Decrypt one `ENC[…]` string.
fn open(cipher: &ValueCipher, enc: &str, aad: &[u8]) -> Result<Opened, &'static str> {
    let parts = parse_enc(enc)?;
    let mut buf = Zeroizing::new(parts.data);
    cipher
        .decrypt_in_place_detached(
            GenericArray::from_slice(&parts.iv),
            aad,
            buf.as_mut_slice(),
            GenericArray::from_slice(&parts.tag),
        )
        .map_err(|_| OPEN_FAILED)?;
    Ok((buf, parts.iv, parts.ty.to_string()))
}

fn seal(
    cipher: &ValueCipher,
    plaintext: &[u8],
    aad: &[u8],
    ty: &str,
    iv: &[u8; IV_LEN],
) -> Option<String> {
    let mut buf = Zeroizing::new(plaintext.to_vec());
    let tag = cipher
        .encrypt_in_place_detached(GenericArray::from_slice(iv), aad, buf.as_mut_slice())
        .ok()?;
    Some(format!(
        "ENC[AES256_GCM,data:{},iv:{},tag:{},type:{ty}]",
        B64.encode(buf.as_slice()),
        B64.encode(iv),
        B64.encode(tag.as_slice())
    ))
}

/// Restore a decrypted leaf's type (sops' `aes.Cipher.Decrypt`).
fn typed_value(plain: &[u8], ty: &str) -> Result<Value, &'static str> {
    let text = std::str::from_utf8(plain).map_err(|_| "decrypted value is not UTF-8")?;
    match ty {
        "str" | "bytes" | "time" => Ok(Value::String(text.to_string())),
        "int" => text
            .parse::<i64>()
            .map(Value::from)
            .or_else(|_| text.parse::<u64>().map(Value::from))
            .map_err(|_| "decrypted value of type int is not an integer"),
        "float" => text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or("decrypted value of type float is not a finite number"),
        "bool" => parse_go_bool(text)
            .map(Value::Bool)
            .ok_or("decrypted value of type bool is not a boolean"),
        "comment" => Err("encrypted comments are not supported"),
        _ => Err("unknown value type in ENC[…]"),
    }
}

fn stash_key(aad: &str, ty: &str, plaintext: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update((aad.len() as u64).to_be_bytes());
    h.update(aad.as_bytes());
    h.update((ty.len() as u64).to_be_bytes());
    h.update(ty.as_bytes());
    h.update(plaintext);
    let mut out = [0u8; 32];
    out.copy_from_slice(&h.finalize());
    out
}

/// Strict equality: like `==` but map key order matters too.
fn same_tree(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y.iter())
                    .all(|((ka, va), (kb, vb))| ka == kb && same_tree(va, vb))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_tree(p, q))
        }
        _ => a == b,
    }
}

/// State of one walk over a tree (decrypting or encrypting).
struct Walk<'l> {
    label: &'l str,
    cipher: ValueCipher,
    rule: Matcher,
    mac_only: bool,
    hash: Sha512,
    stash: HashMap<[u8; 32], Vec<[u8; IV_LEN]>>,
    /// How many stashed IVs each key has handed out in this walk.
    used: HashMap<[u8; 32], usize>,
}

impl Walk<'_> {
    fn value_err(&self, segs: &[Seg<'_>], problem: &'static str) -> SopsError {
        SopsError::Value {
            label: self.label.to_string(),
            path: crate::yaml::path_text(segs),
            problem,
        }
    }

    fn remember(&mut self, aad: &str, ty: &str, plaintext: &[u8], iv: [u8; IV_LEN]) {
        self.stash
            .entry(stash_key(aad, ty, plaintext))
            .or_default()
            .push(iv);
    }

    /// Rebuild a tree with the same maps and lists, each leaf replaced by `leaf(self, value,
    /// path)`; `segs` holds the path of the node being visited.
    fn map_tree<'a>(
        &mut self,
        v: &'a Value,
        segs: &mut Vec<Seg<'a>>,
        leaf: fn(&mut Self, &'a Value, &[Seg<'a>]) -> Result<Value, SopsError>,
    ) -> Result<Value, SopsError> {
        match v {
            Value::Null => Ok(Value::Null),
            Value::Object(m) => {
                let mut out = Map::new();
                for (k, child) in m {
                    segs.push(Seg::Key(k));
                    out.insert(k.clone(), self.map_tree(child, segs, leaf)?);
                    segs.pop();
                }
                Ok(Value::Object(out))
            }
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, child) in items.iter().enumerate() {
                    segs.push(Seg::Index(i));
                    out.push(self.map_tree(child, segs, leaf)?);
                    segs.pop();
                }
                Ok(Value::Array(out))
            }
            scalar => leaf(self, scalar, segs),
        }
    }

    fn decrypt<'a>(&mut self, v: &'a Value, segs: &mut Vec<Seg<'a>>) -> Result<Value, SopsError> {
        self.map_tree(v, segs, Self::decrypt_leaf)
    }

    fn encrypt<'a>(&mut self, v: &'a Value, segs: &mut Vec<Seg<'a>>) -> Result<Value, SopsError> {
        self.map_tree(v, segs, Self::encrypt_leaf)
    }

    fn decrypt_leaf(&mut self, leaf: &Value, segs: &[Seg<'_>]) -> Result<Value, SopsError> {
        let encrypted = self.rule.encrypts(segs);
        let value = if !encrypted {
            leaf.clone()
        } else {
            let Value::String(enc) = leaf else {
                return Err(self.value_err(
                    segs,
                    "is not an ENC[…] string but the crypt rule says it is encrypted",
                ));
            };
            if enc.is_empty() {
                Value::String(String::new())
            } else {
                let aad = aad(segs);
                let (plain, iv, ty) =
                    open(&self.cipher, enc, aad.as_bytes()).map_err(|p| self.value_err(segs, p))?;
                let value = typed_value(&plain, &ty).map_err(|p| self.value_err(segs, p))?;
                self.remember(&aad, &ty, &plain, iv);
                value
            }
        };
        if encrypted || !self.mac_only {
            if let Some((bytes, _)) = leaf_bytes(&value) {
                self.hash.update(bytes.as_slice());
            }
        }
        Ok(value)
    }

    fn encrypt_leaf(&mut self, leaf: &Value, segs: &[Seg<'_>]) -> Result<Value, SopsError> {
        let encrypted = self.rule.encrypts(segs);
        let Some((bytes, ty)) = leaf_bytes(leaf) else {
            return Ok(leaf.clone());
        };
        if encrypted || !self.mac_only {
            self.hash.update(bytes.as_slice());
        }
        if !encrypted || bytes.is_empty() && ty == "str" {
            return Ok(leaf.clone());
        }
        let path = crate::yaml::path_text(segs);
        let sealed = self.seal_leaf(&aad(segs), ty, &bytes, &path)?;
        Ok(Value::String(sealed))
    }

    /// Encrypt one leaf, reusing a stashed IV for an identical (AAD, type, plaintext).
    fn seal_leaf(
        &mut self,
        aad: &str,
        ty: &str,
        plaintext: &[u8],
        path: &str,
    ) -> Result<String, SopsError> {
        let key = stash_key(aad, ty, plaintext);
        let n = self.used.entry(key).or_insert(0);
        let reused = self.stash.get(&key).and_then(|ivs| ivs.get(*n)).copied();
        *n += 1;
        let iv = match reused {
            Some(iv) => iv,
            None => {
                let mut iv = [0u8; IV_LEN];
                random(self.label, &mut iv)?;
                iv
            }
        };
        seal(&self.cipher, plaintext, aad.as_bytes(), ty, &iv).ok_or_else(|| SopsError::Value {
            label: self.label.to_string(),
            path: path.to_string(),
            problem: "cannot be encrypted (value too large for AES-GCM)",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use age::secrecy::ExposeSecret;
    use serde_json::json;
    use std::path::{Path, PathBuf};

    const LM: &str = "2026-01-01T00:00:00Z";
    const LM2: &str = "2026-02-02T12:34:56Z";

    /// The SOPS vectors (`tests/fixtures/sops-vectors`, from gibbz00/rops; see SOURCES.md).
    fn vectors_dir() -> PathBuf {
        crate::secrets::pki::testkit::fixture_path("sops-vectors")
    }

    /// (dir, identity) of the vectors.
    fn vectors() -> (PathBuf, x25519::Identity) {
        let dir = vectors_dir();
        let text = std::fs::read_to_string(dir.join("identity.txt")).unwrap();
        let id = text
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("AGE-SECRET-KEY-"))
            .unwrap()
            .parse::<x25519::Identity>()
            .unwrap();
        (dir, id)
    }

    fn read(dir: &Path, name: &str) -> String {
        std::fs::read_to_string(dir.join(name)).unwrap()
    }

    fn one_doc(text: &str) -> Value {
        let mut docs = crate::yaml::parse_stream(text).unwrap();
        assert_eq!(docs.len(), 1);
        docs.remove(0)
    }

    fn secret() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": "x",
                "namespace": "y",
                "labels": {"app.kubernetes.io/name": "x", "tier": "db"}
            },
            "type": "Opaque",
            "data": {"a": "c2VjcmV0LWE=", "b": "aHVudGVyMg=="},
            "stringData": {"c": "multi\nline"}
        })
    }

    fn regex_rule() -> CryptRule {
        CryptRule::EncryptedRegex("^(data|stringData)$".into())
    }

    /// Lines that differ between two texts of equal line count, as (line index, old line).
    fn changed_lines(a: &str, b: &str) -> Vec<String> {
        let (la, lb): (Vec<_>, Vec<_>) = (a.lines().collect(), b.lines().collect());
        assert_eq!(la.len(), lb.len(), "line count differs:\n{a}\n---\n{b}");
        la.iter()
            .zip(&lb)
            .filter(|(x, y)| x != y)
            .map(|(x, _)| x.to_string())
            .collect()
    }

    fn age_section(text: &str) -> (String, String) {
        // Everything before `  age:` plus everything from the next `  <key>:` at indent 2.
        let lines: Vec<&str> = text.lines().collect();
        let start = lines.iter().position(|l| *l == "  age:").unwrap();
        let end = lines[start + 1..]
            .iter()
            .position(|l| l.starts_with("  ") && !l.starts_with("   ") && !l.starts_with("  -"))
            .map(|p| p + start + 1)
            .unwrap();
        let outside = [&lines[..start], &lines[end..]].concat().join("\n");
        (outside, lines[start..end].join("\n"))
    }

    #[test]
    fn every_vector_decrypts_to_its_twin() {
        let (dir, id) = vectors();
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let Some(stem) = name.strip_suffix(".sops.yaml") else {
                continue;
            };
            let file = SopsFile::parse(&name, &read(&dir, &name)).unwrap();
            let plain = file
                .decrypt(&name, std::slice::from_ref(&id))
                .unwrap_or_else(|e| panic!("{e}"));
            let want = one_doc(&read(&dir, &format!("{stem}.plain.yaml")));
            assert!(same_tree(plain.tree(), &want), "{name}: {:?}", plain.tree());
            assert_eq!(file.recipients(), vec![id.to_public().to_string()]);
            n += 1;
        }
        assert!(n >= 7, "only {n} vectors found");
    }

    #[test]
    fn vector_metadata_is_read() {
        let (dir, _) = vectors();
        let parse = |n: &str| SopsFile::parse(n, &read(&dir, n)).unwrap().metadata;
        let m = parse("age_mac_only_encrypted.sops.yaml");
        assert!(m.mac_only_encrypted);
        assert_eq!(m.rule, CryptRule::UnencryptedSuffix("_unencrypted".into()));
        assert_eq!(
            parse("age_encrypted_regex.sops.yaml").rule,
            CryptRule::EncryptedRegex("^encrypted".into())
        );
        assert_eq!(parse("age_example.sops.yaml").rule, CryptRule::None);
        assert_eq!(parse("age_example.sops.yaml").version, None);
        assert_eq!(
            parse("age_example.sops.yaml").lastmodified,
            "2023-12-25T10:31:01Z"
        );
    }

    #[test]
    fn tampered_ciphertext_fails_without_leaking() {
        let (dir, id) = vectors();
        let text = read(&dir, "age_example.sops.yaml");
        let needle = "data:8qKuCV7Hk";
        assert!(text.contains(needle));
        let bad = text.replacen(needle, "data:8qKuCV7Hj", 1);
        let err = SopsFile::parse("f.yaml", &bad)
            .unwrap()
            .decrypt("f.yaml", &[id])
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(err, SopsError::Value { ref path, .. } if path == "hello"),
            "{msg}"
        );
        assert!(
            msg.starts_with("f.yaml: hello: cannot be decrypted"),
            "{msg}"
        );
        assert!(!msg.contains("Welcome") && !msg.contains("8qKu"), "{msg}");
        assert!(!format!("{err:?}").contains("Welcome"));
    }

    #[test]
    fn changed_unencrypted_value_is_a_mac_mismatch() {
        let (dir, id) = vectors();
        let text = read(&dir, "age_encrypted_regex.sops.yaml");
        let bad = text.replacen("\nb: aaa\n", "\nb: aab\n", 1);
        assert_ne!(bad, text);
        let err = SopsFile::parse("r.yaml", &bad)
            .unwrap()
            .decrypt("r.yaml", std::slice::from_ref(&id))
            .unwrap_err();
        assert!(matches!(err, SopsError::MacMismatch { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("r.yaml") && msg.contains("MAC mismatch"),
            "{msg}"
        );
        assert!(!msg.contains("aab") && !msg.contains("xxx"), "{msg}");

        // Moving lastmodified breaks the MAC's AAD.
        let bad = text.replacen("2023-12-26T17:50:08Z", "2023-12-26T17:50:09Z", 1);
        let err = SopsFile::parse("r.yaml", &bad)
            .unwrap()
            .decrypt("r.yaml", std::slice::from_ref(&id))
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("r.yaml: sops.mac: cannot be decrypted"),
            "{err}"
        );

        // With mac_only_encrypted, unencrypted values are outside the MAC …
        let text = read(&dir, "age_mac_only_encrypted.sops.yaml");
        let edited = text.replacen("d_unencrypted: aaa", "d_unencrypted: bbb", 1);
        assert_ne!(edited, text);
        let plain = SopsFile::parse("m", &edited)
            .unwrap()
            .decrypt("m", std::slice::from_ref(&id))
            .unwrap();
        assert_eq!(plain.tree()["d_unencrypted"], "bbb");
        // … but dropping the flag changes the MAC.
        let edited = text.replacen("  mac_only_encrypted: true\n", "", 1);
        let err = SopsFile::parse("m", &edited)
            .unwrap()
            .decrypt("m", &[id])
            .unwrap_err();
        assert!(matches!(err, SopsError::MacMismatch { .. }), "{err}");
    }

    #[test]
    fn wrong_identity_is_reported() {
        let (dir, _) = vectors();
        let file = SopsFile::parse("e.yaml", &read(&dir, "age_example.sops.yaml")).unwrap();
        let err = file
            .decrypt("e.yaml", &[x25519::Identity::generate()])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "e.yaml: no identity matches any of its age recipients (age1se5ghfycr4n8kcwc3qwf234ymvmr2lex2a99wh8gpfx97glwt9hqch4569)"
        );
    }

    #[test]
    fn secret_round_trip_with_encrypted_regex() {
        let id = x25519::Identity::generate();
        let text = encrypt(
            "s.yaml",
            &secret(),
            &[id.to_public()],
            regex_rule(),
            false,
            LM,
            None,
        )
        .unwrap();
        assert!(
            text.contains("\nmetadata:\n  name: x\n  namespace: \"y\"\n"),
            "{text}"
        );
        assert!(text.contains("\ntype: Opaque\n"));
        for secret_text in ["c2VjcmV0LWE=", "aHVudGVyMg==", "multi", "line"] {
            assert!(!text.contains(secret_text), "{secret_text} leaked:\n{text}");
        }
        let doc = one_doc(&text);
        for (k, inner) in [("data", "a"), ("data", "b"), ("stringData", "c")] {
            let v = doc[k][inner].as_str().unwrap();
            assert!(
                v.starts_with("ENC[AES256_GCM,data:") && v.ends_with(",type:str]"),
                "{v}"
            );
        }
        let sops = doc["sops"].as_object().unwrap();
        let keys: Vec<&str> = sops.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["age", "encrypted_regex", "lastmodified", "mac", "version"]
        );
        assert_eq!(sops["version"], SOPS_VERSION);
        assert_eq!(sops["lastmodified"], LM);
        assert!(
            text.contains("    enc: |\n      -----BEGIN AGE ENCRYPTED FILE-----\n"),
            "{text}"
        );
        let stanza = sops["age"][0].as_object().unwrap();
        assert_eq!(stanza.keys().collect::<Vec<_>>(), ["recipient", "enc"]);

        let file = SopsFile::parse("s.yaml", &text).unwrap();
        let plain = file.decrypt("s.yaml", std::slice::from_ref(&id)).unwrap();
        assert!(same_tree(plain.tree(), &secret()));
        assert_eq!(format!("{plain:?}"), "[redacted]");

        // Tampering with a readable label breaks the MAC.
        let bad = text.replacen("tier: db", "tier: web", 1);
        let err = SopsFile::parse("s.yaml", &bad)
            .unwrap()
            .decrypt("s.yaml", &[id])
            .unwrap_err();
        assert!(matches!(err, SopsError::MacMismatch { .. }));
    }

    #[test]
    fn types_rules_and_mac_only_round_trip() {
        let id = x25519::Identity::generate();
        let tree = json!({
            "s": "text", "empty": "", "n": null, "i": -42, "u": 18446744073709551615u64,
            "f": 1234.56789, "whole": 3.0, "tiny": 1e-7, "t": true, "fa": false,
            "list": ["a", "a", 1, [2.5, {"deep": "x"}]],
            "keep_unencrypted": {"x": "plain", "n": 7},
        });
        for mac_only in [false, true] {
            let text = encrypt(
                "t",
                &tree,
                &[id.to_public()],
                CryptRule::None,
                mac_only,
                LM,
                None,
            )
            .unwrap();
            let doc = one_doc(&text);
            assert_eq!(doc["keep_unencrypted"], json!({"x": "plain", "n": 7}));
            assert_eq!(doc["empty"], "");
            assert_eq!(doc["n"], Value::Null);
            assert!(doc["f"].as_str().unwrap().ends_with("type:float]"));
            assert!(doc["t"].as_str().unwrap().ends_with("type:bool]"));
            assert!(doc["i"].as_str().unwrap().ends_with("type:int]"));
            assert_ne!(
                doc["list"][0], doc["list"][1],
                "equal list items must get distinct IVs"
            );
            assert_eq!(doc["sops"]["unencrypted_suffix"], "_unencrypted");
            assert_eq!(doc["sops"].get("mac_only_encrypted").is_some(), mac_only);
            let file = SopsFile::parse("t", &text).unwrap();
            let plain = file.decrypt("t", std::slice::from_ref(&id)).unwrap();
            assert!(same_tree(plain.tree(), &tree), "{:?}", plain.tree());
            // Unencrypted values are MAC-covered only without mac_only_encrypted.
            let edited = text.replacen("x: plain", "x: other", 1);
            let r = SopsFile::parse("t", &edited)
                .unwrap()
                .decrypt("t", std::slice::from_ref(&id));
            assert_eq!(r.is_ok(), mac_only);
        }
    }

    #[test]
    fn values_are_bound_to_their_path() {
        let id = x25519::Identity::generate();
        let tree = json!({"a": "one", "b": "two"});
        let text = encrypt(
            "p",
            &tree,
            &[id.to_public()],
            CryptRule::None,
            false,
            LM,
            None,
        )
        .unwrap();
        let doc = one_doc(&text);
        let (a, b) = (doc["a"].as_str().unwrap(), doc["b"].as_str().unwrap());
        let swapped = text
            .replacen(a, "@A@", 1)
            .replacen(b, a, 1)
            .replacen("@A@", b, 1);
        let err = SopsFile::parse("p", &swapped)
            .unwrap()
            .decrypt("p", &[id])
            .unwrap_err();
        assert_eq!(err.to_string(), format!("p: a: {OPEN_FAILED}"));
    }

    #[test]
    fn rules_follow_should_be_encrypted() {
        let segs = |keys: &[&'static str]| keys.iter().map(|k| Seg::Key(k)).collect::<Vec<_>>();
        let m = |r: CryptRule| Matcher::new("l", &r).unwrap();
        let enc_re = m(regex_rule());
        assert!(enc_re.encrypts(&segs(&["data", "a"])));
        assert!(enc_re.encrypts(&segs(&["x", "data"])));
        assert!(!enc_re.encrypts(&segs(&["metadata", "name"])));
        assert!(!enc_re.encrypts(&segs(&["database"])));
        let unanchored = m(CryptRule::EncryptedRegex("pass".into()));
        assert!(unanchored.encrypts(&segs(&["db", "my_password"])));
        let un_re = m(CryptRule::UnencryptedRegex("^meta".into()));
        assert!(!un_re.encrypts(&segs(&["metadata", "labels", "x"])));
        assert!(un_re.encrypts(&segs(&["data", "x"])));
        let enc_suf = m(CryptRule::EncryptedSuffix("_enc".into()));
        assert!(enc_suf.encrypts(&segs(&["a_enc", "inner"])));
        assert!(!enc_suf.encrypts(&segs(&["a", "inner"])));
        let default = m(CryptRule::None);
        assert!(!default.encrypts(&segs(&["x_unencrypted", "y"])));
        assert!(default.encrypts(&segs(&["x", "y"])));
        assert_eq!(
            CryptRule::EncryptedRegex(String::new()).effective(),
            CryptRule::UnencryptedSuffix("_unencrypted".into())
        );
        assert!(matches!(
            Matcher::new("l", &CryptRule::EncryptedRegex("(".into())),
            Err(SopsError::Regex { .. })
        ));
        assert_eq!(
            aad(&[Seg::Key("data"), Seg::Index(3), Seg::Key("pw")]),
            "data:pw:"
        );
        assert_eq!(
            crate::yaml::path_text(&[Seg::Key("data"), Seg::Index(3), Seg::Key("pw")]),
            "data[3].pw"
        );
    }

    #[test]
    fn encodings_match_go() {
        assert_eq!(go_float(1234.56789), "1234.56789");
        assert_eq!(go_float(3.0), "3");
        assert_eq!(go_float(1e21), "1000000000000000000000");
        assert_eq!(go_float(1e-7), "0.0000001");
        assert_eq!(go_float(-0.5), "-0.5");
        assert_eq!(go_float(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(parse_go_bool("True"), Some(true));
        assert_eq!(parse_go_bool("yes"), None);
        assert_eq!(upper_hex(&[0x0a, 0xff]), "0AFF");
        assert_eq!(
            upper_hex(&Sha256::digest(b"sops")),
            "8A3FD2AD54CE66527B1034F3D147BE0B0B975B3BF44F72C6FDADEC8176F27D69"
        );
        assert_eq!(mac_aad("2026-01-01T00:00:00.123Z"), "2026-01-01T00:00:00Z");
        assert_eq!(mac_aad(LM), LM);
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(1_703_500_261), "2023-12-25T10:31:01Z");
        assert_eq!(rfc3339_utc(951_825_600), "2000-02-29T12:00:00Z");
        assert!(is_canonical_timestamp(&lastmodified_now()));
        assert!(!is_canonical_timestamp("2026-01-01 00:00:00Z"));
    }

    #[test]
    fn stable_ciphertext_with_previous() {
        let id = x25519::Identity::generate();
        let rs = [id.to_public()];
        let first = encrypt("s", &secret(), &rs, regex_rule(), false, LM, None).unwrap();
        let file = SopsFile::parse("s", &first).unwrap();
        let plain = file.decrypt("s", std::slice::from_ref(&id)).unwrap();

        // Same plaintext: the previous text verbatim, even with a newer timestamp.
        let again = encrypt(
            "s",
            &secret(),
            &rs,
            regex_rule(),
            false,
            LM2,
            Some((&file, &plain)),
        )
        .unwrap();
        assert_eq!(again, first);
        // Without previous, everything is fresh.
        let fresh = encrypt("s", &secret(), &rs, regex_rule(), false, LM, None).unwrap();
        assert_ne!(fresh, first);

        // One changed value: its line, mac and lastmodified change; nothing else.
        let mut edited = secret();
        edited["data"]["b"] = json!("bmV3LXZhbHVl");
        let second = encrypt(
            "s",
            &edited,
            &rs,
            regex_rule(),
            false,
            LM2,
            Some((&file, &plain)),
        )
        .unwrap();
        let changed = changed_lines(&first, &second);
        assert_eq!(changed.len(), 3, "{changed:#?}");
        assert!(changed[0].starts_with("  b: "), "{changed:#?}");
        assert!(changed[1].starts_with("  lastmodified: "));
        assert!(changed[2].starts_with("  mac: "));
        let back = SopsFile::parse("s", &second)
            .unwrap()
            .decrypt("s", std::slice::from_ref(&id))
            .unwrap();
        assert!(same_tree(back.tree(), &edited));

        // A changed readable value (MAC-covered) changes only itself, mac and lastmodified.
        let mut relabeled = secret();
        relabeled["metadata"]["labels"]["tier"] = json!("web");
        let third = encrypt(
            "s",
            &relabeled,
            &rs,
            regex_rule(),
            false,
            LM2,
            Some((&file, &plain)),
        )
        .unwrap();
        assert_eq!(changed_lines(&first, &third).len(), 3);

        // Key order is part of "unchanged".
        let mut reordered = Map::new();
        for k in [
            "kind",
            "apiVersion",
            "metadata",
            "type",
            "data",
            "stringData",
        ] {
            reordered.insert(k.into(), secret()[k].clone());
        }
        let fourth = encrypt(
            "s",
            &Value::Object(reordered),
            &rs,
            regex_rule(),
            false,
            LM,
            Some((&file, &plain)),
        )
        .unwrap();
        assert_ne!(fourth, first);

        // A Plain from another file is refused.
        let other = SopsFile::parse("o", &fresh).unwrap();
        let err = encrypt(
            "s",
            &secret(),
            &rs,
            regex_rule(),
            false,
            LM,
            Some((&other, &plain)),
        )
        .unwrap_err();
        assert!(matches!(err, SopsError::Input { .. }));
    }

    #[test]
    fn rekey_touches_only_age_stanzas() {
        let a = x25519::Identity::generate();
        let b = x25519::Identity::generate();
        let text = encrypt(
            "k",
            &secret(),
            &[a.to_public()],
            regex_rule(),
            false,
            LM,
            None,
        )
        .unwrap();
        let file = SopsFile::parse("k", &text).unwrap();
        let plain = file.decrypt("k", std::slice::from_ref(&a)).unwrap();

        let same = rekey("k", &file, &plain, &[a.to_public()]).unwrap();
        assert_eq!(same.text, text);
        assert!(same.added.is_empty() && same.removed.is_empty());

        let grown = rekey("k", &file, &plain, &[a.to_public(), b.to_public()]).unwrap();
        assert_eq!(grown.added, vec![b.to_public().to_string()]);
        assert!(grown.removed.is_empty());
        let (outside_old, age_old) = age_section(&text);
        let (outside_new, age_new) = age_section(&grown.text);
        assert_eq!(outside_old, outside_new);
        assert!(
            age_new.starts_with(&age_old),
            "old stanza must stay byte-identical"
        );
        let grown_file = SopsFile::parse("k", &grown.text).unwrap();
        for id in [&a, &b] {
            let p = grown_file.decrypt("k", std::slice::from_ref(id)).unwrap();
            assert!(same_tree(p.tree(), &secret()));
        }

        // Removing `a` drops exactly its stanza lines.
        let plain_b = grown_file.decrypt("k", std::slice::from_ref(&b)).unwrap();
        let shrunk = rekey("k", &grown_file, &plain_b, &[b.to_public()]).unwrap();
        assert_eq!(shrunk.removed, vec![a.to_public().to_string()]);
        assert!(shrunk.added.is_empty());
        let (outside_s, age_s) = age_section(&shrunk.text);
        assert_eq!(outside_s, outside_old);
        assert_eq!(format!("{age_old}{}", &age_s["  age:".len()..]), age_new);
        let err = SopsFile::parse("k", &shrunk.text)
            .unwrap()
            .decrypt("k", &[a])
            .unwrap_err();
        assert!(matches!(err, SopsError::NoMatchingIdentity { .. }));
        SopsFile::parse("k", &shrunk.text)
            .unwrap()
            .decrypt("k", &[b])
            .unwrap();
    }

    #[test]
    fn encrypt_with_new_recipient_keeps_old_stanza() {
        let a = x25519::Identity::generate();
        let b = x25519::Identity::generate();
        let text = encrypt(
            "k",
            &secret(),
            &[a.to_public()],
            regex_rule(),
            false,
            LM,
            None,
        )
        .unwrap();
        let file = SopsFile::parse("k", &text).unwrap();
        let plain = file.decrypt("k", std::slice::from_ref(&a)).unwrap();
        let out = encrypt(
            "k",
            &secret(),
            &[a.to_public(), b.to_public()],
            regex_rule(),
            false,
            LM2,
            Some((&file, &plain)),
        )
        .unwrap();
        let new = SopsFile::parse("k", &out).unwrap();
        assert_eq!(new.metadata().age[0], file.metadata().age[0]);
        assert_eq!(new.metadata().lastmodified, LM2);
        new.decrypt("k", &[b]).unwrap();
    }

    #[test]
    fn parse_rejections() {
        let err = |t: &str| SopsFile::parse("f", t).unwrap_err();
        assert!(matches!(
            err("a: 1\n---\nb: 2\n"),
            SopsError::MultiDocument { count: 2, .. }
        ));
        assert_eq!(
            err("a: 1\n").to_string(),
            "f: not a SOPS file (no top-level `sops` map)"
        );
        assert!(matches!(err(""), SopsError::NotSops { .. }));
        assert!(matches!(err("- a\n"), SopsError::NotSops { .. }));
        assert!(matches!(err("a: [1\n"), SopsError::Yaml { .. }));
        let base = "a: ENC[x]\nsops:\n  lastmodified: 2026-01-01T00:00:00Z\n  mac: ENC[x]\n";
        let with_age = format!("{base}  age:\n  - recipient: age1x\n    enc: x\n");
        let e = err(&format!(
            "{with_age}  encrypted_regex: ^a$\n  unencrypted_suffix: _u\n"
        ));
        assert_eq!(e.to_string(), "f: sops metadata sets more than one crypt rule (encrypted_regex, unencrypted_suffix); sops allows one");
        let e = err(&format!("{base}  pgp:\n  - fp: ABC\n    enc: x\n"));
        assert!(matches!(e, SopsError::Unsupported { .. }), "{e}");
        assert!(e.to_string().contains("pgp"));
        assert!(matches!(err(base), SopsError::Metadata { .. }));
        assert!(matches!(
            err(&format!("{with_age}  encrypted_comment_regex: x\n")),
            SopsError::Unsupported { .. }
        ));
        // Age plus another (kept) key source is fine; empty rule strings are ignored.
        let ok = SopsFile::parse(
            "f",
            &format!("{with_age}  pgp:\n  - fp: ABC\n  kms: []\n  unencrypted_regex: ''\n"),
        )
        .unwrap();
        assert_eq!(ok.metadata().other.keys().collect::<Vec<_>>(), ["pgp"]);
        assert_eq!(ok.metadata().rule, CryptRule::None);
        assert_eq!(ok.recipients(), ["age1x"]);
    }

    #[test]
    fn encrypt_rejections() {
        let r = [x25519::Identity::generate().to_public()];
        let e = |t: Value, rs: &[x25519::Recipient], lm: &str| {
            encrypt("f", &t, rs, CryptRule::None, false, lm, None).unwrap_err()
        };
        assert!(matches!(e(json!([1]), &r, LM), SopsError::Input { .. }));
        assert!(matches!(
            e(json!({"sops": 1}), &r, LM),
            SopsError::Input { .. }
        ));
        assert!(matches!(
            e(json!({"a": 1}), &[], LM),
            SopsError::Input { .. }
        ));
        assert!(matches!(
            e(json!({"a": 1}), &r, "2026-01-01T00:00:00+01:00"),
            SopsError::Input { .. }
        ));
    }

    #[test]
    fn errors_and_debug_carry_no_secrets() {
        let id = x25519::Identity::generate();
        let text = encrypt(
            "s",
            &secret(),
            &[id.to_public()],
            regex_rule(),
            false,
            LM,
            None,
        )
        .unwrap();
        let file = SopsFile::parse("s", &text).unwrap();
        let plain = file.decrypt("s", std::slice::from_ref(&id)).unwrap();
        let dbg = format!("{plain:?}{file:?}");
        assert!(!dbg.contains("c2VjcmV0LWE=") && !dbg.contains("multi"));
        assert!(!dbg.contains(id.to_string().expose_secret()));
        // A plaintext value where the rule expects ciphertext: the error must not echo it.
        let bad = text.replacen(
            one_doc(&text)["data"]["a"].as_str().unwrap(),
            "topsecretvalue",
            1,
        );
        let err = SopsFile::parse("s", &bad)
            .unwrap()
            .decrypt("s", &[id])
            .unwrap_err();
        let msg = format!("{err} {err:?}");
        assert!(
            msg.contains("data.a") && !msg.contains("topsecret"),
            "{msg}"
        );
    }
}
