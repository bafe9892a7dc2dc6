//! The encrypted payload of a backup, streamed both ways: a tar stream inside an age stream,
//! so that `age -d -i IDENTITY <id>.age | tar x` restores without capstan.
//!
//! The tar holds `manifest.json` first (the format, the backup's id and time, every file's
//! name, size and sha256, in order), then `move/<file>` for each file, regular files mode
//! 0600 owned by 0:0, dated the backup's time (GNU long names past 100 bytes). [`seal`]
//! reads the files twice, one at a time: once to hash them for the manifest, once to write
//! them (a file that changed in between is refused). [`open`] checks everything before it
//! returns: the encrypted object's size and sha256 against the index (hashed as it streams
//! past), the age MAC of every chunk, the manifest's id and time against the index, every
//! entry's name, type, size and sha256 against the manifest, in order, and nothing after
//! the last. The v1 payload (a JSON manifest line, then the files' bytes) is still read.

use super::{safe_name, stamp_of, BackupError, Index, IndexBuilder, FORMAT, FORMAT_V1};
use crate::inputs::{MAX_MOVED_FILE, MAX_MOVED_FILES};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::{BufRead, Read, Write};
use zeroize::Zeroizing;

/// The name of the manifest entry, first in the tar.
pub(crate) const MANIFEST: &str = "manifest.json";
/// The directory of the files in the tar (`clusterctl move --from-directory move`).
pub(crate) const FILES_DIR: &str = "move";
/// The largest manifest read (100,000 files of 255-byte names).
const MAX_MANIFEST: u64 = 48 << 20;

/// One file in the encrypted manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ManifestFile {
    /// The file name, as `clusterctl` wrote it.
    pub name: String,
    /// Its bytes.
    pub size: u64,
    /// Its sha256, lowercase hex.
    pub sha256: String,
}

/// The first entry of the tar (v2), or the first line of the payload (v1).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    format: String,
    id: String,
    created: String,
    files: Vec<ManifestFile>,
}

/// A writer or reader that hashes and counts what passes.
pub(crate) struct Hashing<T> {
    inner: T,
    hash: Sha256,
    bytes: u64,
}

impl<T> Hashing<T> {
    /// Wrap `inner`.
    pub(crate) fn new(inner: T) -> Self {
        Hashing {
            inner,
            hash: Sha256::new(),
            bytes: 0,
        }
    }

    /// The bytes that passed and their sha256 (lowercase hex), and the inner value.
    pub(crate) fn finish(self) -> (u64, String, T) {
        let sha = self
            .hash
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        (self.bytes, sha, self.inner)
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

/// A reader that keeps its first error.
struct Recording<R> {
    inner: R,
    error: Option<String>,
}

impl<R: Read> Read for Recording<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf).inspect_err(|e| {
            self.error.get_or_insert_with(|| e.to_string());
        })
    }
}

fn hex_sha256(bytes: &[u8]) -> String {
    crate::digest::sha256_hex(bytes)
}

/// How [`seal`] reads a file of the directory by name.
pub(crate) type ReadFile<'a> = dyn FnMut(&str) -> Result<Zeroizing<Vec<u8>>, BackupError> + 'a;

/// Encrypt the files `names` of a `clusterctl move` directory (read one at a time by
/// `read`) into `out` as backup `id` made at `created`: the tar stream inside the age
/// stream. Returns its index, with the size and sha256 of what was written to `out`.
pub(crate) fn seal<W: Write>(
    dir: &str,
    names: &[String],
    read: &mut ReadFile<'_>,
    (id, created): (&str, &str),
    recipients: &[age::x25519::Recipient],
    out: W,
) -> Result<(Index, W), BackupError> {
    if !names.iter().any(|n| super::object_of(n).is_some()) {
        return Err(BackupError::Empty {
            dir: dir.to_string(),
        });
    }
    let corrupt = |message: String| BackupError::Corrupt {
        id: id.to_string(),
        message,
    };
    let unix = super::check::unix_of(created).ok_or_else(|| corrupt(format!("time {created}")))?;
    // Pass 1: the manifest (and the public index's counts), one file in memory at a time.
    let mut builder = IndexBuilder::default();
    let mut files = Vec::with_capacity(names.len());
    let mut total = 0u64;
    for name in names {
        let bytes = read(name)?;
        total += bytes.len() as u64;
        if total > crate::inputs::InputKind::Backup.cap() {
            return Err(BackupError::Io {
                path: crate::printable::line(dir).into_owned(),
                message: format!(
                    "more than {} bytes: too large to back up",
                    crate::inputs::InputKind::Backup.cap()
                ),
            });
        }
        builder.add(name, &bytes)?;
        files.push(ManifestFile {
            name: name.clone(),
            size: bytes.len() as u64,
            sha256: hex_sha256(&bytes),
        });
    }
    let manifest = Manifest {
        format: FORMAT.into(),
        id: id.to_string(),
        created: created.to_string(),
        files,
    };
    let manifest_json = serde_json::to_vec(&manifest).map_err(|e| corrupt(e.to_string()))?;
    let encrypt = |e: std::io::Error| {
        BackupError::Secrets(crate::secrets::SecretsError::Encrypt(e.to_string()))
    };
    if recipients.is_empty() {
        return Err(BackupError::Secrets(
            crate::secrets::SecretsError::NoRecipients {
                label: "backup".into(),
            },
        ));
    }
    let enc = age::Encryptor::with_recipients(recipients.iter().map(|r| r as &dyn age::Recipient))
        .map_err(|e| BackupError::Secrets(crate::secrets::SecretsError::Encrypt(e.to_string())))?;
    let hashed = Hashing::new(out);
    let age_w = enc.wrap_output(hashed).map_err(encrypt)?;
    let mut tar = tar::Builder::new(age_w);
    let header = |size: u64| {
        let mut h = tar::Header::new_gnu();
        h.set_size(size);
        h.set_mode(0o600);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(u64::try_from(unix).unwrap_or(0));
        h.set_entry_type(tar::EntryType::Regular);
        h
    };
    tar.append_data(
        &mut header(manifest_json.len() as u64),
        MANIFEST,
        &manifest_json[..],
    )
    .map_err(encrypt)?;
    drop(manifest_json);
    // Pass 2: the files, each checked against what pass 1 saw.
    for f in &manifest.files {
        let bytes = read(&f.name)?;
        if bytes.len() as u64 != f.size || hex_sha256(&bytes) != f.sha256 {
            return Err(BackupError::Io {
                path: crate::printable::line(&format!("{dir}/{}", f.name)).into_owned(),
                message: "changed while it was backed up: run `clusterctl move --to-directory` \
                          into a new directory and push that"
                    .into(),
            });
        }
        tar.append_data(
            &mut header(f.size),
            format!("{FILES_DIR}/{}", f.name),
            &bytes[..],
        )
        .map_err(encrypt)?;
    }
    let age_w = tar.into_inner().map_err(encrypt)?;
    let hashed = age_w.finish().map_err(encrypt)?;
    let (size, sha256, out) = hashed.finish();
    Ok((builder.finish(id, created, size, sha256, recipients), out))
}

/// What [`open`] hands each file to: its name, its size (the manifest's, at most
/// [`MAX_MOVED_FILE`]) and a reader of exactly its bytes (read it to the end; `open` checks
/// the size and sha256 after).
pub(crate) type Sink<'a> = dyn FnMut(&str, u64, &mut dyn Read) -> Result<(), BackupError> + 'a;

/// Verify and decrypt backup `index` streamed from `ciphertext`, handing each file to
/// `sink` in order. Returns the number of files. Any mismatch is
/// [`BackupError::Corrupt`] and may come after `sink` has seen files: the caller discards
/// what it wrote unless `open` returns `Ok` ([`super::staging`]).
pub(crate) fn open<R: Read>(
    index: &Index,
    ciphertext: R,
    identities: &[age::x25519::Identity],
    sink: &mut Sink<'_>,
) -> Result<usize, BackupError> {
    let corrupt = |message: String| BackupError::Corrupt {
        id: index.id.clone(),
        message,
    };
    // One byte more than the index says is read, so a longer object is noticed.
    let mut raw = Hashing::new(ciphertext.take(index.size.saturating_add(1)));
    let label = index.object();
    let undecryptable = |e: std::io::Error| {
        corrupt(format!(
            "the encrypted object does not decrypt ({e}): tampered or truncated"
        ))
    };
    let n = {
        let dec =
            age::Decryptor::new_buffered(std::io::BufReader::with_capacity(64 << 10, &mut raw))
                .map_err(|e| match e {
                    age::DecryptError::Io(e) => BackupError::Store {
                        url: label.clone(),
                        message: e.to_string(),
                    },
                    e => corrupt(format!("not an age file: {e}")),
                })?;
        let stream = dec
            .decrypt(identities.iter().map(|i| i as &dyn age::Identity))
            .map_err(|e| {
                BackupError::Secrets(crate::secrets::SecretsError::Decrypt {
                    label: label.clone(),
                    message: match e {
                        age::DecryptError::NoMatchingKeys => {
                            "no identity matches any of its recipients".into()
                        }
                        other => other.to_string(),
                    },
                })
            })?;
        let mut plain = std::io::BufReader::with_capacity(64 << 10, stream);
        let first = plain.fill_buf().map_err(undecryptable)?.first().copied();
        let n = if first == Some(b'{') {
            open_v1(index, &mut plain, sink)?
        } else {
            open_v2(index, &mut plain, sink)?
        };
        // The rest of the age stream (tar's end blocks): read to its end, which checks the
        // last chunk's MAC.
        std::io::copy(&mut plain, &mut std::io::sink()).map_err(undecryptable)?;
        n
    };
    std::io::copy(&mut raw, &mut std::io::sink()).map_err(|e| BackupError::Store {
        url: label.clone(),
        message: e.to_string(),
    })?;
    let (size, sha, _) = raw.finish();
    if size != index.size {
        return Err(corrupt(format!(
            "the encrypted object has {}{size} bytes, its index says {} (truncated or replaced)",
            if size > index.size { "more than " } else { "" },
            index.size
        )));
    }
    if sha != index.sha256 {
        return Err(corrupt(
            "the encrypted object's sha256 differs from its index (tampered or replaced)".into(),
        ));
    }
    Ok(n)
}

/// The manifest checked against the index and the limits.
fn check_manifest(index: &Index, m: &Manifest, v1: bool) -> Result<(), BackupError> {
    let corrupt = |message: String| BackupError::Corrupt {
        id: index.id.clone(),
        message,
    };
    let want = if v1 { FORMAT_V1 } else { FORMAT };
    if m.format != want {
        return Err(corrupt(format!(
            "format `{}`, expected `{want}`",
            crate::printable::line(&m.format)
        )));
    }
    // The public index may have been edited: its id and time must be the payload's own.
    // v1 named a backup by the time and the encrypted object's sha256 prefix.
    let id_matches = if v1 {
        index.id == format!("{}-{}", m.id, &index.sha256[..8.min(index.sha256.len())])
    } else {
        index.id == m.id
    };
    if !id_matches
        || index.created != m.created
        || stamp_of(&m.created) != index.id[..16.min(index.id.len())]
    {
        return Err(corrupt(format!(
            "the index says {} made {}, the encrypted payload {} made {}",
            crate::printable::line(&index.id),
            crate::printable::line(&index.created),
            crate::printable::line(&m.id),
            crate::printable::line(&m.created)
        )));
    }
    if m.files.len() > MAX_MOVED_FILES {
        return Err(corrupt(format!("{} files in the manifest", m.files.len())));
    }
    let mut names = std::collections::HashSet::with_capacity(m.files.len());
    for f in &m.files {
        if !safe_name(&f.name) || !names.insert(f.name.as_str()) || f.size > MAX_MOVED_FILE {
            return Err(corrupt(format!(
                "unusable file name `{}` in the manifest (a path, a duplicate, a control \
                 character or more than {MAX_MOVED_FILE} bytes)",
                crate::printable::line(&f.name)
            )));
        }
    }
    Ok(())
}

/// Hand one file to the sink through a hashing reader of exactly `f.size` bytes.
fn one_file(
    index: &Index,
    f: &ManifestFile,
    r: &mut dyn Read,
    sink: &mut Sink<'_>,
) -> Result<(), BackupError> {
    let mut h = Hashing::new(Recording {
        inner: r.take(f.size),
        error: None,
    });
    let sunk = sink(&f.name, f.size, &mut h);
    // A read that failed under the sink is the backup's fault (or the store's: the
    // caller prefers the store's own error), not the sink's.
    if let Some(e) = h.inner.error.take() {
        return Err(BackupError::Corrupt {
            id: index.id.clone(),
            message: format!(
                "{}: the encrypted object does not decrypt ({e}): tampered or truncated",
                crate::printable::line(&f.name)
            ),
        });
    }
    sunk?;
    std::io::copy(&mut h, &mut std::io::sink()).map_err(|e| BackupError::Corrupt {
        id: index.id.clone(),
        message: format!("{}: {e}", crate::printable::line(&f.name)),
    })?;
    let (n, sha, _) = h.finish();
    if n != f.size {
        return Err(BackupError::Corrupt {
            id: index.id.clone(),
            message: format!("{}: truncated", crate::printable::line(&f.name)),
        });
    }
    if sha != f.sha256 {
        return Err(BackupError::Corrupt {
            id: index.id.clone(),
            message: format!(
                "{}: sha256 differs from the manifest",
                crate::printable::line(&f.name)
            ),
        });
    }
    Ok(())
}

fn open_v1(
    index: &Index,
    plain: &mut dyn BufRead,
    sink: &mut Sink<'_>,
) -> Result<usize, BackupError> {
    let corrupt = |message: String| BackupError::Corrupt {
        id: index.id.clone(),
        message,
    };
    let mut line = Zeroizing::new(Vec::new());
    plain
        .take(MAX_MANIFEST)
        .read_until(b'\n', &mut line)
        .map_err(|e| corrupt(format!("manifest: {e}")))?;
    if line.last() != Some(&b'\n') {
        return Err(corrupt("no manifest".into()));
    }
    let m: Manifest = serde_json::from_slice(&line[..line.len() - 1])
        .map_err(|e| corrupt(format!("manifest: {e}")))?;
    check_manifest(index, &m, true)?;
    for f in &m.files {
        one_file(index, f, plain, sink)?;
    }
    let mut rest = [0u8; 1];
    if plain.read(&mut rest).map_err(|e| corrupt(e.to_string()))? != 0 {
        return Err(corrupt("bytes after the last file".into()));
    }
    Ok(m.files.len())
}

fn open_v2(
    index: &Index,
    plain: &mut dyn BufRead,
    sink: &mut Sink<'_>,
) -> Result<usize, BackupError> {
    let corrupt = |message: String| BackupError::Corrupt {
        id: index.id.clone(),
        message,
    };
    let bad_tar = |e: std::io::Error| corrupt(format!("not a tar stream: {e}"));
    let mut archive = tar::Archive::new(plain);
    let mut entries = archive.entries().map_err(bad_tar)?;
    let m: Manifest = {
        let mut e = entries
            .next()
            .ok_or_else(|| corrupt(format!("the tar stream has no `{MANIFEST}`")))?
            .map_err(bad_tar)?;
        check_entry(index, &e, MANIFEST, None)?;
        if e.size() > MAX_MANIFEST {
            return Err(corrupt(format!(
                "{MANIFEST}: more than {MAX_MANIFEST} bytes"
            )));
        }
        let mut text = Zeroizing::new(Vec::with_capacity(e.size() as usize));
        e.read_to_end(&mut text).map_err(bad_tar)?;
        serde_json::from_slice(&text).map_err(|err| corrupt(format!("{MANIFEST}: {err}")))?
    };
    check_manifest(index, &m, false)?;
    for f in &m.files {
        let want = format!("{FILES_DIR}/{}", f.name);
        let mut e = entries
            .next()
            .ok_or_else(|| {
                corrupt(format!(
                    "the tar stream ends before `{}`",
                    crate::printable::line(&want)
                ))
            })?
            .map_err(bad_tar)?;
        check_entry(index, &e, &want, Some(f.size))?;
        one_file(index, f, &mut e, sink)?;
    }
    if let Some(e) = entries.next() {
        let name = e
            .map(|e| String::from_utf8_lossy(&e.path_bytes()).into_owned())
            .unwrap_or_else(|e| e.to_string());
        return Err(corrupt(format!(
            "tar entry `{}` after the last file of the manifest",
            crate::printable::line(&name)
        )));
    }
    Ok(m.files.len())
}

/// A tar entry is the regular file `want` of `size` bytes (when given).
fn check_entry<R: Read>(
    index: &Index,
    e: &tar::Entry<'_, R>,
    want: &str,
    size: Option<u64>,
) -> Result<(), BackupError> {
    let corrupt = |message: String| BackupError::Corrupt {
        id: index.id.clone(),
        message,
    };
    let path = e.path_bytes();
    if path.as_ref() != want.as_bytes() {
        return Err(corrupt(format!(
            "tar entry `{}` where the manifest says `{}`",
            crate::printable::line(&String::from_utf8_lossy(&path)),
            crate::printable::line(want)
        )));
    }
    if e.header().entry_type() != tar::EntryType::Regular {
        return Err(corrupt(format!(
            "tar entry `{}` is not a regular file",
            crate::printable::line(want)
        )));
    }
    if let Some(size) = size.filter(|s| *s != e.size()) {
        return Err(corrupt(format!(
            "tar entry `{}` has {} bytes, the manifest says {size}",
            crate::printable::line(want),
            e.size()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::MovedFile;

    fn files() -> Vec<MovedFile> {
        let long = format!("ConfigMap_lab-f_{}.yaml", "n".repeat(200));
        [
            (
                "Cluster_lab-f_lab-f.yaml",
                "{\"kind\":\"Cluster\"}".to_string(),
            ),
            (
                "Machine_lab-f_lab-f-cp-abcde.yaml",
                "{\"kind\":\"Machine\"}".to_string(),
            ),
            (
                "Secret_lab-f_lab-f-ca.yaml",
                "{\"data\":{\"tls.key\":\"S0VZ\"}}".to_string(),
            ),
            (long.as_str(), "x".repeat(70_000)),
        ]
        .into_iter()
        .map(|(n, b)| MovedFile {
            name: n.into(),
            bytes: Zeroizing::new(b.into_bytes()),
        })
        .collect()
    }

    const ID: &str = "20261205T084000Z-0123abcd";
    const CREATED: &str = "2026-12-05T08:40:00Z";

    fn sealed(files: &[MovedFile], id: &age::x25519::Identity) -> (Index, Vec<u8>) {
        let names: Vec<String> = files.iter().map(|f| f.name.clone()).collect();
        let mut read = |n: &str| {
            Ok(Zeroizing::new(
                files.iter().find(|f| f.name == n).unwrap().bytes.to_vec(),
            ))
        };
        seal(
            "dir",
            &names,
            &mut read,
            (ID, CREATED),
            &[id.to_public()],
            Vec::new(),
        )
        .unwrap()
    }

    fn opened(
        index: &Index,
        ct: &[u8],
        id: &age::x25519::Identity,
    ) -> Result<Vec<(String, Vec<u8>)>, BackupError> {
        let mut out = Vec::new();
        open(index, ct, std::slice::from_ref(id), &mut |name, _, r| {
            let mut b = Vec::new();
            r.read_to_end(&mut b).map_err(|e| BackupError::Io {
                path: name.into(),
                message: e.to_string(),
            })?;
            out.push((name.to_string(), b));
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn a_backup_opens_to_the_same_files_and_refuses_any_change() {
        let id = age::x25519::Identity::generate();
        let (index, ct) = sealed(&files(), &id);
        assert_eq!(index.id, ID);
        assert_eq!(index.kinds["Machine"], 1);
        assert_eq!(index.clusters, ["lab-f/lab-f"]);
        assert_eq!(index.size, ct.len() as u64);
        assert_eq!(index.sha256, crate::digest::sha256_hex(&ct));
        let back = opened(&index, &ct, &id).unwrap();
        assert_eq!(back.len(), 4);
        for (a, b) in back.iter().zip(files()) {
            assert_eq!((a.0.as_str(), &a.1[..]), (b.name.as_str(), &b.bytes[..]));
        }
        // No plaintext in the ciphertext; no value in the index (its object manifest names
        // a Secret's keys, never their values).
        let idx = serde_json::to_string(&index).unwrap();
        assert!(!idx.contains("S0VZ"), "{idx}");
        assert!(idx.contains("\"keys\":[\"tls.key\"]"), "{idx}");
        for needle in ["S0VZ", "tls.key", "\"kind\""] {
            assert!(!ct.windows(needle.len()).any(|w| w == needle.as_bytes()));
        }
        // Truncated, tampered, another backup's index, a wrong identity.
        let e = opened(&index, &ct[..ct.len() - 1], &id).unwrap_err();
        assert!(matches!(e, BackupError::Corrupt { .. }), "{e}");
        let mut bad = ct.clone();
        let mid = bad.len() / 2;
        bad[mid] ^= 1;
        let e = opened(&index, &bad, &id).unwrap_err();
        assert!(e.to_string().contains("tampered"), "{e}");
        let mut forged = index.clone();
        forged.sha256 = crate::digest::sha256_hex(&bad);
        assert!(matches!(
            opened(&forged, &bad, &id),
            Err(BackupError::Corrupt { .. })
        ));
        // Longer than its index says.
        let mut longer = ct.clone();
        longer.push(0);
        let e = opened(&index, &longer, &id).unwrap_err();
        assert!(matches!(e, BackupError::Corrupt { .. }), "{e}");
        // An index edited to look newer (its own sha256 kept) no longer matches the payload.
        let mut newer = index.clone();
        newer.created = "2027-01-01T00:00:00Z".into();
        let e = opened(&newer, &ct, &id).unwrap_err();
        assert!(e.to_string().contains("the encrypted payload"), "{e}");
        let mut renamed = index.clone();
        renamed.id = "20261205T084000Z-ffffffff".into();
        let e = opened(&renamed, &ct, &id).unwrap_err();
        assert!(e.to_string().contains("the encrypted payload"), "{e}");
        let other = age::x25519::Identity::generate();
        let e = opened(&index, &ct, &other).unwrap_err();
        assert!(e.to_string().contains("no identity matches"), "{e}");
    }

    #[test]
    fn the_payload_is_a_plain_tar_with_the_manifest_first() {
        let id = age::x25519::Identity::generate();
        let (_, ct) = sealed(&files(), &id);
        let plain = crate::secrets::decrypt("x", &ct, std::slice::from_ref(&id)).unwrap();
        let mut a = tar::Archive::new(&plain[..]);
        let mut names = Vec::new();
        for e in a.entries().unwrap() {
            let e = e.unwrap();
            assert_eq!(e.header().mode().unwrap(), 0o600);
            assert_eq!(e.header().mtime().unwrap(), 1_796_460_000);
            names.push(String::from_utf8(e.path_bytes().to_vec()).unwrap());
        }
        assert_eq!(names[0], MANIFEST);
        assert_eq!(names[1], "move/Cluster_lab-f_lab-f.yaml");
        assert_eq!(names.len(), 5);
        assert!(names[4].len() > 200, "a GNU long name: {}", names[4]);
        let m: serde_json::Value = {
            let mut a = tar::Archive::new(&plain[..]);
            let mut e = a.entries().unwrap().next().unwrap().unwrap();
            let mut s = String::new();
            e.read_to_string(&mut s).unwrap();
            serde_json::from_str(&s).unwrap()
        };
        assert_eq!(m["format"], FORMAT);
        assert_eq!(m["id"], ID);
        assert_eq!(
            m["files"][0]["sha256"],
            crate::digest::sha256_hex(b"{\"kind\":\"Cluster\"}")
        );
    }

    #[test]
    fn a_file_that_changes_between_the_two_reads_is_refused() {
        let id = age::x25519::Identity::generate();
        let names = vec!["Cluster_a_a.yaml".to_string()];
        let mut calls = 0;
        let mut read = |_: &str| {
            calls += 1;
            Ok(Zeroizing::new(vec![b'a'; calls]))
        };
        let e = seal(
            "d",
            &names,
            &mut read,
            (ID, CREATED),
            &[id.to_public()],
            Vec::new(),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("changed while it was backed up"),
            "{e}"
        );
        let e = seal(
            "d",
            &[],
            &mut read,
            (ID, CREATED),
            &[id.to_public()],
            Vec::new(),
        )
        .unwrap_err();
        assert!(matches!(e, BackupError::Empty { .. }));
    }

    /// A payload made by hand (a hostile bucket's), encrypted to `id`, with its index.
    fn hostile(
        id: &age::x25519::Identity,
        manifest: serde_json::Value,
        entries: &[(&str, &[u8])],
    ) -> (Index, Vec<u8>) {
        let mut tar = tar::Builder::new(Vec::new());
        let m = manifest.to_string();
        let mut put = |name: &str, data: &[u8]| {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o600);
            h.set_entry_type(tar::EntryType::Regular);
            // Written raw: the tar crate would refuse `..` through `append_data`.
            let raw = &mut h.as_old_mut().name;
            raw[..name.len()].copy_from_slice(name.as_bytes());
            h.set_cksum();
            tar.append(&h, data).unwrap();
        };
        put(MANIFEST, m.as_bytes());
        for (n, d) in entries {
            put(n, d);
        }
        let plain = tar.into_inner().unwrap();
        let ct = crate::secrets::encrypt(&plain, &[id.to_public()]).unwrap();
        let index = Index {
            format: super::super::INDEX_FORMAT.into(),
            id: ID.into(),
            created: CREATED.into(),
            size: ct.len() as u64,
            sha256: crate::digest::sha256_hex(&ct),
            files: entries.len(),
            kinds: Default::default(),
            clusters: vec![],
            recipients: vec![],
            offline_recipients: None,
            objects: None,
        };
        (index, ct)
    }

    #[test]
    fn a_hostile_payload_is_refused_before_a_bad_name_reaches_the_sink() {
        let id = age::x25519::Identity::generate();
        let sha = crate::digest::sha256_hex(b"x");
        let manifest = |name: &str| {
            serde_json::json!({"format": FORMAT, "id": ID, "created": CREATED,
                "files": [{"name": name, "size": 1, "sha256": sha}]})
        };
        for (name, entry, want) in [
            (
                "../escape.yaml",
                "move/../escape.yaml",
                "unusable file name",
            ),
            (
                "Secret_a_\u{1b}[2J.yaml",
                "move/Secret_a_\u{1b}[2J.yaml",
                "unusable file name",
            ),
            (
                "Cluster_a_a.yaml",
                "move/Other_a_a.yaml",
                "where the manifest says",
            ),
            (
                "Cluster_a_a.yaml",
                "Cluster_a_a.yaml",
                "where the manifest says",
            ),
        ] {
            let (index, ct) = hostile(&id, manifest(name), &[(entry, b"x")]);
            let e = opened(&index, &ct, &id).unwrap_err();
            assert!(e.to_string().contains(want), "{name}: {e}");
            assert!(!e.to_string().contains('\u{1b}'), "{e}");
        }
        // A file whose bytes are not the manifest's; an entry after the last file.
        let (index, ct) = hostile(
            &id,
            manifest("Cluster_a_a.yaml"),
            &[("move/Cluster_a_a.yaml", b"y")],
        );
        let e = opened(&index, &ct, &id).unwrap_err();
        assert!(
            e.to_string().contains("sha256 differs from the manifest"),
            "{e}"
        );
        let (index, ct) = hostile(
            &id,
            manifest("Cluster_a_a.yaml"),
            &[("move/Cluster_a_a.yaml", b"x"), ("move/extra.yaml", b"z")],
        );
        let e = opened(&index, &ct, &id).unwrap_err();
        assert!(e.to_string().contains("after the last file"), "{e}");
    }

    #[test]
    fn a_v1_backup_still_opens() {
        // v1: a JSON manifest line, then the files' bytes; the id is the time and the
        // encrypted object's sha256 prefix.
        let id = age::x25519::Identity::generate();
        let body = b"{\"kind\":\"Cluster\"}";
        let m = serde_json::json!({"format": FORMAT_V1, "id": "20261205T084000Z",
            "created": CREATED, "files": [{"name": "Cluster_a_a.yaml", "size": body.len(),
            "sha256": crate::digest::sha256_hex(body)}]});
        let mut plain = m.to_string().into_bytes();
        plain.push(b'\n');
        plain.extend_from_slice(body);
        let ct = crate::secrets::encrypt(&plain, &[id.to_public()]).unwrap();
        let sha = crate::digest::sha256_hex(&ct);
        let index = Index {
            format: super::super::INDEX_FORMAT.into(),
            id: format!("20261205T084000Z-{}", &sha[..8]),
            created: CREATED.into(),
            size: ct.len() as u64,
            sha256: sha,
            files: 1,
            kinds: Default::default(),
            clusters: vec![],
            recipients: vec![],
            offline_recipients: None,
            objects: None,
        };
        let back = opened(&index, &ct, &id).unwrap();
        assert_eq!(back, [("Cluster_a_a.yaml".to_string(), body.to_vec())]);
        let mut extra = plain.clone();
        extra.push(b'!');
        let ct = crate::secrets::encrypt(&extra, &[id.to_public()]).unwrap();
        let sha = crate::digest::sha256_hex(&ct);
        let index = Index {
            id: format!("20261205T084000Z-{}", &sha[..8]),
            size: ct.len() as u64,
            sha256: sha,
            ..index
        };
        let e = opened(&index, &ct, &id).unwrap_err();
        assert!(e.to_string().contains("after the last file"), "{e}");
    }
}
