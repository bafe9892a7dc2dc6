//! Backups of the management-cluster state that git does not hold: what `clusterctl move
//! --to-directory` writes (Machines, VSphereMachines, TalosConfigs, IP address claims, the
//! providers' Secrets: kubeconfigs and CA keys in plaintext), kept as one age-encrypted
//! object per backup on an S3-compatible store or in a local directory ([`store`]).
//!
//! A backup is two objects under the URL's prefix: `<id>.age`, a tar stream inside an age
//! stream ([`payload`]: `manifest.json` first, every file's name, size and sha256, then
//! `move/<file>` for each), then `<id>.json`, a public [`Index`] (time, size and sha256 of
//! the encrypted object, objects per kind, cluster names). The index is written last and a
//! backup is listed only through it, so an upload that was killed or failed never appears
//! as a backup. Nothing of a file's content is in the index; files are read, encrypted and
//! uploaded one at a time, and pulled into a staging directory ([`staging`]).
#![warn(unreachable_pub)]

#![cfg_attr(
    not(feature = "backup"),
    allow(
        dead_code,
        unused_imports,
        reason = "without the store (the plugin image) only `backup dump` and `restore check` use this module"
    )
)]

pub(crate) mod check;
pub(crate) mod custody;
pub(crate) mod dump;
pub(crate) mod inventory;
pub(crate) mod objects;
pub(crate) mod payload;
pub(crate) mod restore;
pub(crate) mod staging;
#[cfg(feature = "backup")]
pub(crate) mod store;

pub(crate) use payload::{open, seal};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The largest encrypted object read: the largest `clusterctl move` directory read, and
/// age's overhead (a 16-byte tag per 64 KiB chunk, the header) and tar's (512 bytes of
/// header per file, padding to 512, the manifest).
pub(crate) const MAX_OBJECT: u64 = (1 << 30) + (256 << 20);

/// The format of the encrypted payload's manifest: v2 is a tar stream (`payload`).
pub(crate) const FORMAT: &str = "capstan.dev/backup/v2";
/// The v1 payload (a JSON manifest line, then the files' bytes), still read.
pub(crate) const FORMAT_V1: &str = "capstan.dev/backup/v1";
/// The format of a backup's public index.
pub(crate) const INDEX_FORMAT: &str = "capstan.dev/backup-index/v1";

/// Why a backup could not be made, listed or restored.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BackupError {
    /// The object manifest: a file that is no object, an index that lists other objects.
    #[error(transparent)]
    Objects(#[from] objects::ObjectsError),
    /// The object store.
    #[error("{url}: {message}")]
    Store {
        /// The backup URL.
        url: String,
        /// What failed, and what to do.
        message: String,
    },
    /// Encryption or decryption.
    #[error(transparent)]
    Secrets(#[from] crate::secrets::SecretsError),
    /// A backup that does not verify: tampered, truncated or not capstan's.
    #[error("backup {id}: {message}; nothing was written")]
    Corrupt {
        /// The backup.
        id: String,
        /// What does not verify.
        message: String,
    },
    /// No backup (or not the one asked for) under the URL.
    #[error("{url}: {message}")]
    NotFound {
        /// The backup URL.
        url: String,
        /// What is missing.
        message: String,
    },
    /// The directory to back up holds nothing to back up.
    #[error("{dir}: no `clusterctl move` objects (`<Kind>_<namespace>_<name>.yaml`)")]
    Empty {
        /// The directory.
        dir: String,
    },
    /// Live objects that cannot be dumped.
    #[error(transparent)]
    Dump(#[from] dump::DumpError),
    /// A file of the directory backed up, or of the pull's output.
    #[error(transparent)]
    Input(#[from] crate::inputs::InputError),
    /// Writing the pulled files.
    #[error("{path}: {message}")]
    Io {
        /// The file or directory (escaped).
        path: String,
        /// What failed.
        message: String,
    },
}

/// A backup's public index (`<id>.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Index {
    /// [`INDEX_FORMAT`].
    pub format: String,
    /// `20261205T083000Z-1a2b3c4d`: the UTC time, then 8 random hex digits (v1: the
    /// encrypted object's sha256 prefix).
    pub id: String,
    /// RFC 3339 UTC time of the backup.
    pub created: String,
    /// Bytes of the encrypted object.
    pub size: u64,
    /// sha256 (lowercase hex) of the encrypted object.
    pub sha256: String,
    /// The number of files.
    pub files: usize,
    /// Objects per kind.
    pub kinds: BTreeMap<String, usize>,
    /// The Cluster objects, `namespace/name`.
    pub clusters: Vec<String>,
    /// The age recipients the backup is encrypted to.
    pub recipients: Vec<String>,
    /// Those of [`Index::recipients`] the pushing operator marked as kept offline
    /// ([`custody::OFFLINE_MARK`]), so that `backup check` applies the custody policy
    /// without a key; absent in indexes written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offline_recipients: Option<Vec<String>>,
    /// The non-secret object manifest, one entry per object ([`objects`]); absent in
    /// indexes written before it existed (then `backup check` needs the identity), and in
    /// a backup whose manifest would not fit an index ([`objects::MAX_MANIFEST_JSON`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects: Option<Vec<objects::Entry>>,
}

impl Index {
    /// The name of the encrypted object.
    pub(crate) fn object(&self) -> String {
        format!("{}.age", self.id)
    }

    /// The index as `backup list --format json` prints it: the stored fields with their keys
    /// in camelCase, the one key case of capstan's reports (the stored `<id>.json` keeps
    /// `offline_recipients`, which every release reads).
    pub(crate) fn report(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(map) = v.as_object_mut() {
            if let Some(r) = map.remove("offline_recipients") {
                map.insert("offlineRecipients".to_string(), r);
            }
        }
        v
    }
}

/// The one place an [`Index`] is built: each file is added as it is read (`add`), the
/// encrypted object's size and sha256 when the upload is done (`finish`).
#[derive(Debug)]
pub(crate) struct IndexBuilder {
    files: usize,
    kinds: BTreeMap<String, usize>,
    clusters: Vec<String>,
    /// The object manifest so far, `None` once it outgrew [`objects::MAX_MANIFEST_JSON`].
    objects: Option<Vec<objects::Entry>>,
    objects_json: usize,
}

impl Default for IndexBuilder {
    fn default() -> Self {
        IndexBuilder {
            files: 0,
            kinds: BTreeMap::new(),
            clusters: Vec::new(),
            objects: Some(Vec::new()),
            objects_json: 2,
        }
    }
}

impl IndexBuilder {
    /// Count one file of the backup and describe it for the object manifest (its content
    /// is not kept: only kind, names, labels, key names and a CA's fingerprint).
    pub(crate) fn add(&mut self, name: &str, bytes: &[u8]) -> Result<(), BackupError> {
        if let Some(list) = &mut self.objects {
            if let Some(e) = objects::described(name, bytes)? {
                self.objects_json += serde_json::to_vec(&e).map_or(usize::MAX / 2, |v| v.len()) + 1;
                list.push(e);
            }
            if self.objects_json > objects::MAX_MANIFEST_JSON {
                self.objects = None;
            }
        }
        self.files += 1;
        if let Some((kind, ns, name)) = object_of(name) {
            *self.kinds.entry(kind.to_string()).or_default() += 1;
            if kind == "Cluster" {
                self.clusters.push(format!("{ns}/{name}"));
            }
        }
        Ok(())
    }

    /// The index of backup `id` made at `created`, whose encrypted object has `size`
    /// bytes and `sha256`.
    pub(crate) fn finish(
        self,
        id: &str,
        created: &str,
        size: u64,
        sha256: String,
        recipients: &[age::x25519::Recipient],
    ) -> Index {
        Index {
            format: INDEX_FORMAT.into(),
            id: id.to_string(),
            created: created.to_string(),
            size,
            sha256,
            files: self.files,
            kinds: self.kinds,
            clusters: self.clusters,
            recipients: recipients.iter().map(ToString::to_string).collect(),
            offline_recipients: None,
            objects: self.objects,
        }
    }
}

/// The kind, namespace and name of a `clusterctl move` file (`Cluster_lab-f_lab-f.yaml`):
/// none of the three holds `_` (Kubernetes names and kinds cannot).
pub(crate) fn object_of(file: &str) -> Option<(&str, &str, &str)> {
    let stem = file.strip_suffix(".yaml")?;
    let mut parts = stem.split('_');
    let (kind, ns, name) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || kind.is_empty() || name.is_empty() {
        return None;
    }
    Some((kind, ns, name))
}

/// Whether `s` is a backup id: `YYYYMMDDTHHMMSSZ-` and 8 lowercase hex digits.
pub(crate) fn is_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 25
        && b[8] == b'T'
        && b[15] == b'Z'
        && b[16] == b'-'
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[9..15].iter().all(u8::is_ascii_digit)
        && b[17..]
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// A new backup id for a backup made at `unix`: its time, then 8 random hex digits (the
/// object is named before its bytes exist: it is streamed).
pub(crate) fn new_id(unix: i64) -> Result<(String, String), BackupError> {
    let (created, stamp) = times(unix);
    let mut r = [0u8; 4];
    getrandom::fill(&mut r).map_err(|e| BackupError::Io {
        path: "the random number generator".into(),
        message: e.to_string(),
    })?;
    let hex: String = r.iter().map(|b| format!("{b:02x}")).collect();
    Ok((format!("{stamp}-{hex}"), created))
}

/// Whether a file name may be written into a directory: no path, no dotfile, no control
/// character (a name from the bucket never reaches a terminal or a disk raw).
fn safe_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && !name.contains(['/', '\\', '\0'])
        && !name.chars().any(char::is_control)
        && name.len() <= 255
}

/// `YYYY-MM-DDTHH:MM:SSZ` (the PKI's RFC 3339 writer) and `YYYYMMDDTHHMMSSZ` for a Unix time.
fn times(unix: i64) -> (String, String) {
    let created = crate::secrets::pki::format_unix(unix);
    let stamp = created.replace(['-', ':'], "");
    (created, stamp)
}

/// The `YYYYMMDDTHHMMSSZ` stamp of an RFC 3339 UTC time.
pub(crate) fn stamp_of(created: &str) -> String {
    created.replace(['-', ':'], "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            object_of("Cluster_lab-f_lab-f.yaml"),
            Some(("Cluster", "lab-f", "lab-f"))
        );
        assert_eq!(
            object_of("ClusterClass__x.yaml"),
            Some(("ClusterClass", "", "x"))
        );
        assert_eq!(object_of("README.md"), None);
        assert_eq!(object_of("a_b_c_d.yaml"), None);
        assert!(!safe_name("../x") && !safe_name(".hidden") && safe_name("Machine_a_b.yaml"));
        assert!(!safe_name("Secret_a_b\u{1b}[2J.yaml") && !safe_name("a\nb"));
        let (id, created) = new_id(1_796_460_000).unwrap();
        assert!(is_id(&id) && id.starts_with("20261205T084000Z-"), "{id}");
        assert_eq!(created, "2026-12-05T08:40:00Z");
        assert_eq!(stamp_of(&created), id[..16]);
    }
}
