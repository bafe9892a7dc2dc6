//! Backups of the management-cluster state that git does not hold: what `clusterctl move
//! --to-directory` writes (Machines, VSphereMachines, TalosConfigs, IP address claims, the
//! providers' Secrets: kubeconfigs and CA keys in plaintext), kept as one age-encrypted
//! object per backup on an S3-compatible store or in a local directory ([`store`]).
//!
//! A backup is two objects under the URL's prefix: `<id>.age`, the files and a manifest of
//! their sizes and sha256 encrypted to the recipients, then `<id>.json`, a public index
//! (time, size and sha256 of the encrypted object, objects per kind, cluster names). The
//! index is written last and a backup is listed only through it, so an upload that was
//! killed or failed never appears as a backup. Nothing of a file's content is in the
//! index, and plaintext never leaves memory on the way to the store.

pub mod check;
pub mod objects;
pub mod restore;
pub mod store;

use crate::inputs::MovedFile;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use zeroize::Zeroizing;

/// The largest encrypted object read: the largest `clusterctl move` directory read, and
/// age's overhead (a 16-byte tag per 64 KiB chunk, the header).
pub const MAX_OBJECT: u64 = (1 << 30) + (1 << 20);

/// The format of the encrypted payload's manifest.
pub const FORMAT: &str = "capstan.dev/backup/v1";
/// The format of a backup's public index.
pub const INDEX_FORMAT: &str = "capstan.dev/backup-index/v1";

/// Why a backup could not be made, listed or restored.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The object store.
    #[error("{url}: {message}")]
    Store {
        /// The backup URL.
        url: String,
        /// What failed.
        message: String,
    },
    /// Encryption or decryption.
    #[error(transparent)]
    Secrets(#[from] crate::secrets::SecretsError),
    /// The object manifest: a file that is no object, an index that lists other objects.
    #[error(transparent)]
    Objects(#[from] objects::ObjectsError),
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
}

/// One file in the encrypted manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestFile {
    name: String,
    size: u64,
    sha256: String,
}

/// The first line of the encrypted payload; the files' bytes follow, in its order.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    format: String,
    id: String,
    created: String,
    files: Vec<ManifestFile>,
}

/// A backup's public index (`<id>.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Index {
    /// [`INDEX_FORMAT`].
    pub format: String,
    /// `20261205T083000Z-1a2b3c4d`: the UTC time, then the encrypted object's sha256 prefix.
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
    /// The non-secret object manifest, one entry per object ([`objects`]); absent in
    /// indexes written before it existed (then `backup check` needs the identity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects: Option<Vec<objects::Entry>>,
}

impl Index {
    /// The name of the encrypted object.
    pub fn object(&self) -> String {
        format!("{}.age", self.id)
    }
}

/// The kind, namespace and name of a `clusterctl move` file (`Cluster_lab-f_lab-f.yaml`):
/// none of the three holds `_` (Kubernetes names and kinds cannot).
pub fn object_of(file: &str) -> Option<(&str, &str, &str)> {
    let stem = file.strip_suffix(".yaml")?;
    let mut parts = stem.split('_');
    let (kind, ns, name) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || kind.is_empty() || name.is_empty() {
        return None;
    }
    Some((kind, ns, name))
}

/// Whether `s` is a backup id: `YYYYMMDDTHHMMSSZ-` and 8 lowercase hex digits.
pub fn is_id(s: &str) -> bool {
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

/// Whether a file name may be written into a directory: no path, no dotfile.
fn safe_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && !name.contains(['/', '\\', '\0'])
        && name.len() <= 255
}

/// `YYYY-MM-DDTHH:MM:SSZ` (the PKI's RFC 3339 writer) and `YYYYMMDDTHHMMSSZ` for a Unix time.
fn times(unix: i64) -> (String, String) {
    let created = crate::secrets::pki::format_unix(unix);
    let stamp = created.replace(['-', ':'], "");
    (created, stamp)
}

/// Encrypt the files of a `clusterctl move` directory into one backup made at `unix`
/// (seconds): its index and the encrypted object.
pub fn seal(
    dir: &str,
    files: &[MovedFile],
    unix: i64,
    recipients: &[age::x25519::Recipient],
) -> Result<(Index, Vec<u8>), BackupError> {
    if !files.iter().any(|f| object_of(&f.name).is_some()) {
        return Err(BackupError::Empty {
            dir: dir.to_string(),
        });
    }
    let (created, stamp) = times(unix);
    let manifest = Manifest {
        format: FORMAT.into(),
        id: stamp.clone(),
        created: created.clone(),
        files: files
            .iter()
            .map(|f| ManifestFile {
                name: f.name.clone(),
                size: f.bytes.len() as u64,
                sha256: crate::digest::sha256_hex(&f.bytes),
            })
            .collect(),
    };
    let head = serde_json::to_string(&manifest).map_err(|e| BackupError::Corrupt {
        id: stamp.clone(),
        message: e.to_string(),
    })?;
    let total: usize = files.iter().map(|f| f.bytes.len()).sum();
    let mut payload = Zeroizing::new(Vec::with_capacity(head.len() + 1 + total));
    payload.extend_from_slice(head.as_bytes());
    payload.push(b'\n');
    for f in files {
        payload.extend_from_slice(&f.bytes);
    }
    let ciphertext = crate::secrets::encrypt(&payload, recipients)?;
    let sha256 = crate::digest::sha256_hex(&ciphertext);
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let mut clusters = Vec::new();
    for f in files {
        if let Some((kind, ns, name)) = object_of(&f.name) {
            *kinds.entry(kind.to_string()).or_default() += 1;
            if kind == "Cluster" {
                clusters.push(format!("{ns}/{name}"));
            }
        }
    }
    let index = Index {
        format: INDEX_FORMAT.into(),
        id: format!("{stamp}-{}", &sha256[..8]),
        created,
        size: ciphertext.len() as u64,
        sha256,
        files: files.len(),
        kinds,
        clusters,
        recipients: recipients.iter().map(ToString::to_string).collect(),
        objects: objects::index_manifest(files)?,
    };
    Ok((index, ciphertext))
}

/// Verify and decrypt a backup: the encrypted object against its index (size, sha256),
/// then every file against the encrypted manifest (name, size, sha256). Any mismatch is
/// [`BackupError::Corrupt`]; nothing is returned in part.
pub fn open(
    index: &Index,
    ciphertext: &[u8],
    identities: &[age::x25519::Identity],
) -> Result<Vec<MovedFile>, BackupError> {
    let corrupt = |message: String| BackupError::Corrupt {
        id: index.id.clone(),
        message,
    };
    if ciphertext.len() as u64 != index.size {
        return Err(corrupt(format!(
            "the encrypted object has {} bytes, its index says {} (truncated or replaced)",
            ciphertext.len(),
            index.size
        )));
    }
    if crate::digest::sha256_hex(ciphertext) != index.sha256 {
        return Err(corrupt(
            "the encrypted object's sha256 differs from its index (tampered or replaced)".into(),
        ));
    }
    let payload = crate::secrets::decrypt(&index.object(), ciphertext, identities)?;
    let nl = payload
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| corrupt("no manifest".into()))?;
    let manifest: Manifest =
        serde_json::from_slice(&payload[..nl]).map_err(|e| corrupt(format!("manifest: {e}")))?;
    if manifest.format != FORMAT {
        return Err(corrupt(format!(
            "format `{}`, expected `{FORMAT}`",
            manifest.format
        )));
    }
    // The public index may have been edited: its id and time must be the payload's own.
    if index.id
        != format!(
            "{}-{}",
            manifest.id,
            &index.sha256[..8.min(index.sha256.len())]
        )
        || index.created != manifest.created
    {
        return Err(corrupt(format!(
            "the index says {} made {}, the encrypted payload {} made {}",
            index.id, index.created, manifest.id, manifest.created
        )));
    }
    if manifest.files.len() > crate::inputs::MAX_MOVED_FILES {
        return Err(corrupt(format!(
            "{} files in the manifest",
            manifest.files.len()
        )));
    }
    let mut names = std::collections::HashSet::with_capacity(manifest.files.len());
    let mut rest = &payload[nl + 1..];
    let mut out = Vec::with_capacity(manifest.files.len());
    for f in &manifest.files {
        if !safe_name(&f.name)
            || !names.insert(f.name.as_str())
            || f.size > crate::inputs::MAX_MOVED_FILE
        {
            return Err(corrupt(format!(
                "unusable file name `{}`",
                f.name.escape_debug()
            )));
        }
        let size = usize::try_from(f.size).unwrap_or(usize::MAX);
        if size > rest.len() {
            return Err(corrupt(format!("{}: truncated", f.name)));
        }
        let (bytes, tail) = rest.split_at(size);
        if crate::digest::sha256_hex(bytes) != f.sha256 {
            return Err(corrupt(format!(
                "{}: sha256 differs from the manifest",
                f.name
            )));
        }
        out.push(MovedFile {
            name: f.name.clone(),
            bytes: Zeroizing::new(bytes.to_vec()),
        });
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(corrupt(format!("{} bytes after the last file", rest.len())));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Vec<MovedFile> {
        [
            ("Cluster_lab-f_lab-f.yaml", "{\"kind\":\"Cluster\"}"),
            (
                "Machine_lab-f_lab-f-cp-abcde.yaml",
                "{\"kind\":\"Machine\"}",
            ),
            (
                "Secret_lab-f_lab-f-ca.yaml",
                "{\"data\":{\"tls.key\":\"S0VZ\"}}",
            ),
        ]
        .into_iter()
        .map(|(n, b)| MovedFile {
            name: n.into(),
            bytes: Zeroizing::new(b.as_bytes().to_vec()),
        })
        .collect()
    }

    #[test]
    fn a_backup_opens_to_the_same_files_and_refuses_any_change() {
        let id = age::x25519::Identity::generate();
        let (index, ct) = seal("dir", &files(), 1_796_460_000, &[id.to_public()]).unwrap();
        assert!(index.id.starts_with("20261205T084000Z-"), "{}", index.id);
        assert_eq!(index.kinds["Machine"], 1);
        assert_eq!(index.clusters, ["lab-f/lab-f"]);
        let back = open(&index, &ct, std::slice::from_ref(&id)).unwrap();
        assert_eq!(back.len(), 3);
        for (a, b) in back.iter().zip(files()) {
            assert_eq!(
                (a.name.as_str(), &a.bytes[..]),
                (b.name.as_str(), &b.bytes[..])
            );
        }
        // No plaintext in the ciphertext; no value in the index (its object manifest names
        // the Secret's keys, never their values).
        let idx = serde_json::to_string(&index).unwrap();
        assert!(!idx.contains("S0VZ"), "{idx}");
        assert!(idx.contains("\"keys\":[\"tls.key\"]"), "{idx}");
        for needle in ["S0VZ", "tls.key", "\"kind\""] {
            assert!(!ct.windows(needle.len()).any(|w| w == needle.as_bytes()));
        }
        // Truncated, tampered, another backup's index, a wrong identity.
        assert!(matches!(
            open(&index, &ct[..ct.len() - 1], std::slice::from_ref(&id)),
            Err(BackupError::Corrupt { .. })
        ));
        let mut bad = ct.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(matches!(
            open(&index, &bad, std::slice::from_ref(&id)),
            Err(BackupError::Corrupt { .. })
        ));
        let mut forged = index.clone();
        forged.sha256 = crate::digest::sha256_hex(&bad);
        assert!(matches!(
            open(&forged, &bad, std::slice::from_ref(&id)),
            Err(BackupError::Secrets(_))
        ));
        // An index edited to look newer (its own sha256 kept) no longer matches the payload.
        let mut newer = index.clone();
        newer.created = "2027-01-01T00:00:00Z".into();
        let e = open(&newer, &ct, std::slice::from_ref(&id)).unwrap_err();
        assert!(e.to_string().contains("the encrypted payload"), "{e}");
        let other = age::x25519::Identity::generate();
        let e = open(&index, &ct, &[other]).unwrap_err();
        assert!(e.to_string().contains("no identity matches"), "{e}");
    }

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
        let e = seal(
            "d",
            &[],
            0,
            &[age::x25519::Identity::generate().to_public()],
        )
        .unwrap_err();
        assert!(matches!(e, BackupError::Empty { .. }));
    }
}
