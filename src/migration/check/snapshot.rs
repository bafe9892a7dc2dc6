//! The etcd snapshot taken before phase control-plane (`etcd-snapshot`, D11), checked
//! without a key and without etcd: a snapshot is a bbolt database followed by the SHA-256 of
//! its bytes.
//!
//! What the check rests on:
//! - etcd's snapshot stream is the backend database followed by its SHA-256; `etcdctl
//!   snapshot save` and `talosctl etcd snapshot` refuse a stream whose length is not 32 more
//!   than a multiple of 512 (Talos v1.13.9 `cmd/talosctl/cmd/talos/etcd.go:373-376`, "this
//!   check is from" etcd `client/v3/snapshot`), and `etcdutl snapshot restore` (which Talos's
//!   `bootstrap --recover-from` runs, `internal/app/machined/pkg/system/services/etcd.go:570-596`)
//!   refuses a file without that hash (`snapshot missing hash but --skip-hash-check=false`) or
//!   with another (`expected sha256 …, got …`), etcd `etcdutl/snapshot/v3_snapshot.go`.
//! - the database is bbolt's: two meta pages first (a 16-byte page header, then magic
//!   `0xED0CDAED`, version 2, page size, flags, root bucket, freelist, high-water mark
//!   `pgid`, transaction id, and an FNV-64a checksum of the fields before it; bbolt
//!   `internal/common/meta.go`), written by `Tx.WriteTo`, which copies exactly `pgid` pages
//!   (bbolt `tx.go`).

use super::{Cx, Finding, Severity};
use crate::inputs::SnapshotFile;
use crate::model::Phase;

/// bbolt's magic number (`common.Magic`).
const BBOLT_MAGIC: u32 = 0xED0C_DAED;
/// bbolt's file format version (`common.Version`).
const BBOLT_VERSION: u32 = 2;
/// bbolt's page header: id (8), flags (2), count (2), overflow (4).
const PAGE_HEADER: usize = 16;
/// `common.PgidNoFreelist`.
const NO_FREELIST: u64 = u64::MAX;

/// What a snapshot file turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdSnapshotFacts {
    /// Its length in bytes.
    pub len: u64,
    /// The newer valid bbolt meta page, when one was found.
    pub meta: Option<BboltMeta>,
    /// Why it is not a whole etcd snapshot, and the error etcd's restore would print.
    pub problem: Option<(String, Option<&'static str>)>,
}

/// The fields of a bbolt meta page the check uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BboltMeta {
    /// Page size in bytes.
    pub page_size: u32,
    /// The high-water mark: the database's length in pages.
    pub pgid: u64,
    /// The transaction id.
    pub txid: u64,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// FNV-1a, 64 bits (Go's `hash/fnv.New64a`).
fn fnv64a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The meta page at `offset` of `head`, if it is a valid one (magic, version, checksum).
fn meta_at(head: &[u8], offset: usize) -> Result<BboltMeta, String> {
    let m = offset + PAGE_HEADER;
    if head.len() < m + 64 {
        return Err(format!("ends before the bbolt meta page at byte {offset}"));
    }
    let magic = u32_at(head, m);
    if magic != BBOLT_MAGIC {
        return Err(format!(
            "no bbolt magic at byte {m} (found {magic:#010x}, expected {BBOLT_MAGIC:#010x})"
        ));
    }
    let version = u32_at(head, m + 4);
    if version != BBOLT_VERSION {
        return Err(format!(
            "bbolt format version {version} (expected {BBOLT_VERSION})"
        ));
    }
    let sum = u64_at(head, m + 56);
    if fnv64a(&head[m..m + 56]) != sum {
        return Err(format!(
            "the bbolt meta page at byte {offset} fails its checksum"
        ));
    }
    Ok(BboltMeta {
        page_size: u32_at(head, m + 8),
        pgid: u64_at(head, m + 40),
        txid: u64_at(head, m + 48),
    })
    .and_then(|meta| {
        let root = u64_at(head, m + 16);
        let freelist = u64_at(head, m + 32);
        if root >= meta.pgid || (freelist >= meta.pgid && freelist != NO_FREELIST) {
            Err(format!(
                "the bbolt meta page at byte {offset} points past the database's end (page {})",
                meta.pgid
            ))
        } else {
            Ok(meta)
        }
    })
}

/// What `file` is: a whole etcd snapshot, or why not.
pub fn etcd_snapshot_facts(file: &SnapshotFile) -> EtcdSnapshotFacts {
    let mut facts = EtcdSnapshotFacts {
        len: file.len,
        meta: None,
        problem: None,
    };
    let fail = |facts: &mut EtcdSnapshotFacts, why: String, error: Option<&'static str>| {
        facts.problem = Some((why, error));
    };
    // The database first: a file that is no bbolt database at all is named as such.
    let first = meta_at(&file.head, 0);
    let meta = match &first {
        Ok(m) if m.page_size.is_power_of_two() && (512..=65536).contains(&m.page_size) => {
            // The second meta page; `Tx.WriteTo` writes it with the transaction before.
            match meta_at(&file.head, m.page_size as usize) {
                Ok(m1) if m1.txid > m.txid => Some(m1),
                _ => Some(*m),
            }
        }
        Ok(m) => {
            fail(
                &mut facts,
                format!(
                    "bbolt page size {} is not a power of two from 512 to 65536",
                    m.page_size
                ),
                None,
            );
            return facts;
        }
        Err(e) => {
            fail(
                &mut facts,
                format!("not a bbolt database, as etcd writes: {e}"),
                None,
            );
            return facts;
        }
    };
    facts.meta = meta;
    let Some(meta) = meta else {
        return facts;
    };
    let Some((sha, trailer)) = file.trailer else {
        fail(
            &mut facts,
            format!("{} bytes: too short for an etcd snapshot", file.len),
            None,
        );
        return facts;
    };
    if file.len % 512 != 32 {
        fail(
            &mut facts,
            format!(
                "{} bytes, and no SHA-256 after the database (a snapshot is a database of whole pages and 32 \
                 bytes of SHA-256, so its length is 32 more than a multiple of 512): a copy of the data directory \
                 (`member/snap/db`), or a cut-off file",
                file.len
            ),
            Some(super::errors::SNAPSHOT_MISSING_HASH),
        );
        return facts;
    }
    if sha != trailer {
        fail(
            &mut facts,
            "the SHA-256 after the database is not the database's: the file is damaged or was cut off and \
             padded"
                .into(),
            Some(super::errors::SNAPSHOT_SHA_MISMATCH),
        );
        return facts;
    }
    let db = file.len - 32;
    let pages = meta.pgid.checked_mul(u64::from(meta.page_size));
    if pages != Some(db) {
        fail(
            &mut facts,
            format!(
                "the database holds {db} bytes, its meta page says {} pages of {} bytes: not a snapshot as etcd \
                 writes it",
                meta.pgid, meta.page_size
            ),
            None,
        );
    }
    facts
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

impl Cx<'_> {
    /// `etcd-snapshot`: a whole etcd snapshot exists before phase control-plane.
    pub(super) fn etcd_snapshot(&self, out: &mut Vec<Finding>) {
        let id = "etcd-snapshot";
        let phase = self.i.config.spec.migration.as_ref().map(|m| m.phase);
        let procedure = crate::procedure::ETCD_SNAPSHOT.title;
        let Some(input) = &self.i.etcd_snapshot else {
            let summary = match phase {
                Some(Phase::ControlPlane) => format!(
                    "no etcd snapshot given (`--etcd-snapshot`): phase `control-plane` starts from a snapshot of the \
                     kubeadm etcd taken right before its sync (README procedure \"{procedure}\")"
                ),
                Some(Phase::Prepare) => format!(
                    "take an etcd snapshot of the kubeadm cluster right before phase `control-plane` is synced and \
                     give it as `--etcd-snapshot` (README procedure \"{procedure}\")"
                ),
                _ => "not checked: `--etcd-snapshot` (take snapshots on a schedule: `talosctl -n <node-ip> etcd \
                      snapshot <file>`)"
                    .into(),
            };
            out.push(Finding::new(id, Severity::Info, "--etcd-snapshot", summary));
            return;
        };
        let f = &input.value;
        let field = format!("{} (--etcd-snapshot)", input.file);
        match &f.problem {
            Some((why, error)) => {
                let mut finding = Finding::new(
                    id,
                    Severity::Blocking,
                    field,
                    format!(
                        "`{}` is not a whole etcd snapshot: {why}; neither `etcdutl snapshot restore` nor `talosctl \
                         bootstrap --recover-from` would restore it",
                        input.file
                    ),
                )
                .fix(format!(
                    "take the snapshot again with `etcdctl snapshot save` as README procedure \"{procedure}\" says, \
                     copy the whole file off the node, and check it again"
                ));
                if let Some(e) = error {
                    finding = finding.error(e);
                }
                out.push(finding);
            }
            None => {
                let meta = f
                    .meta
                    .map(|m| {
                        format!(
                            " (bbolt, {} pages of {} bytes, transaction {})",
                            m.pgid, m.page_size, m.txid
                        )
                    })
                    .unwrap_or_default();
                out.push(Finding::new(
                    id,
                    Severity::Pass,
                    field,
                    format!(
                        "`{}` is a whole etcd snapshot of {}{meta} whose SHA-256 matches: `etcdutl snapshot restore` \
                         and `talosctl bootstrap --recover-from` accept it; keep it like a Secret, off the cluster",
                        input.file,
                        mib(f.len - 32)
                    ),
                ));
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use sha2::Digest as _;

    /// A snapshot as `Tx.WriteTo` and etcd's stream write it: two meta pages and `pages - 2`
    /// data pages of `page_size`, then the SHA-256.
    pub(crate) fn snapshot_bytes(page_size: u32, pages: u64) -> Vec<u8> {
        let ps = page_size as usize;
        let mut db = vec![0u8; ps * pages as usize];
        for (i, txid) in [(0usize, 7u64), (1, 6)] {
            let p = i * ps;
            db[p..p + 8].copy_from_slice(&(i as u64).to_le_bytes());
            db[p + 8..p + 10].copy_from_slice(&4u16.to_le_bytes());
            let m = p + PAGE_HEADER;
            db[m..m + 4].copy_from_slice(&BBOLT_MAGIC.to_le_bytes());
            db[m + 4..m + 8].copy_from_slice(&BBOLT_VERSION.to_le_bytes());
            db[m + 8..m + 12].copy_from_slice(&page_size.to_le_bytes());
            db[m + 16..m + 24].copy_from_slice(&3u64.to_le_bytes());
            db[m + 32..m + 40].copy_from_slice(&2u64.to_le_bytes());
            db[m + 40..m + 48].copy_from_slice(&pages.to_le_bytes());
            db[m + 48..m + 56].copy_from_slice(&txid.to_le_bytes());
            let sum = fnv64a(&db[m..m + 56]);
            db[m + 56..m + 64].copy_from_slice(&sum.to_le_bytes());
        }
        let sha = sha2::Sha256::digest(&db);
        db.extend_from_slice(&sha);
        db
    }

    pub(crate) fn file_of(bytes: &[u8]) -> SnapshotFile {
        let len = bytes.len() as u64;
        let trailer = (bytes.len() >= 32).then(|| {
            let (body, last) = bytes.split_at(bytes.len() - 32);
            let mut t = [0u8; 32];
            t.copy_from_slice(last);
            (sha2::Sha256::digest(body).into(), t)
        });
        let head_end = bytes.len().saturating_sub(32).min(SnapshotFile::HEAD);
        SnapshotFile {
            label: "snap.db".into(),
            len,
            head: if bytes.len() >= 32 {
                bytes[..head_end].to_vec()
            } else {
                bytes.to_vec()
            },
            trailer,
        }
    }

    #[test]
    fn the_finding_passes_a_snapshot_and_blocks_a_data_file() {
        use crate::migration::check::{check, CheckInputs, Input};
        let config = |extra: &str| {
            crate::model::ClusterConfig::from_value(
                "cluster.yaml",
                crate::yaml::parse_one(&format!("{}{extra}", crate::model::tests::MINIMAL))
                    .unwrap(),
            )
            .unwrap()
        };
        let cp =
            "  migration:\n    phase: control-plane\n    kubeadm:\n      etcdMembers: [cp-1]\n";
        let run = |bytes: Option<&[u8]>| {
            let mut i = CheckInputs::new(
                config(cp),
                "cluster.yaml",
                std::time::SystemTime::UNIX_EPOCH,
            );
            i.etcd_snapshot = bytes.map(|b| Input {
                file: "snap.db".into(),
                value: etcd_snapshot_facts(&file_of(b)),
            });
            let fs = check(&i);
            let f = fs.iter().find(|f| f.id == "etcd-snapshot").unwrap().clone();
            let inputs = fs.iter().find(|f| f.id == "check-inputs").unwrap().clone();
            (f, inputs)
        };
        let (f, inputs) = run(None);
        assert_eq!(f.severity, Severity::Info);
        assert!(
            inputs.severity == Severity::Blocking && inputs.summary.contains("--etcd-snapshot")
        );
        let good = snapshot_bytes(4096, 6);
        let (f, inputs) = run(Some(&good));
        assert!(
            f.severity == Severity::Pass && f.summary.contains("6 pages of 4096 bytes"),
            "{f:#?}"
        );
        assert!(!inputs.summary.contains("--etcd-snapshot"), "{inputs:#?}");
        let (f, _) = run(Some(&good[..good.len() - 32]));
        assert_eq!(f.severity, Severity::Blocking);
        assert_eq!(
            f.cluster_error,
            Some(super::super::errors::SNAPSHOT_MISSING_HASH)
        );
    }

    #[test]
    fn fnv64a_is_gos() {
        // Go: fnv.New64a() over "" and "a".
        assert_eq!(fnv64a(b""), 0xcbf29ce484222325);
        assert_eq!(fnv64a(b"a"), 0xaf63dc4c8601ec8c);
    }

    #[test]
    fn a_whole_snapshot_passes_and_every_damage_is_named() {
        let good = snapshot_bytes(4096, 6);
        let f = etcd_snapshot_facts(&file_of(&good));
        assert_eq!(f.problem, None, "{f:?}");
        assert_eq!(
            f.meta,
            Some(BboltMeta {
                page_size: 4096,
                pgid: 6,
                txid: 7
            })
        );

        // The data file of a member (no hash): what `talosctl cp …/member/snap/db` copies.
        let db = &good[..good.len() - 32];
        let f = etcd_snapshot_facts(&file_of(db));
        let (why, err) = f.problem.unwrap();
        assert!(why.contains("no SHA-256"), "{why}");
        assert_eq!(err, Some(super::super::errors::SNAPSHOT_MISSING_HASH));

        // One byte flipped in the data: the hash no longer matches.
        let mut bad = good.clone();
        bad[3 * 4096 + 100] ^= 1;
        let (why, err) = etcd_snapshot_facts(&file_of(&bad)).problem.unwrap();
        assert!(why.contains("not the database's"), "{why}");
        assert_eq!(err, Some(super::super::errors::SNAPSHOT_SHA_MISMATCH));

        // Cut off after four pages and given a fresh hash: the meta page knows better.
        let mut cut = good[..4 * 4096].to_vec();
        let sha = sha2::Sha256::digest(&cut);
        cut.extend_from_slice(&sha);
        let (why, _) = etcd_snapshot_facts(&file_of(&cut)).problem.unwrap();
        assert!(why.contains("6 pages of 4096 bytes"), "{why}");

        // Not bbolt at all, and a broken meta checksum.
        let (why, _) = etcd_snapshot_facts(&file_of(&[7u8; 4096 + 32]))
            .problem
            .unwrap();
        assert!(why.starts_with("not a bbolt database"), "{why}");
        let mut sum = good.clone();
        sum[PAGE_HEADER + 48] ^= 1;
        // Page 0 fails its checksum: the file is refused before the hash is looked at.
        let (why, _) = etcd_snapshot_facts(&file_of(&sum)).problem.unwrap();
        assert!(why.contains("fails its checksum"), "{why}");
        // Too short for anything.
        let (why, _) = etcd_snapshot_facts(&file_of(b"etcd")).problem.unwrap();
        assert!(why.starts_with("not a bbolt database"), "{why}");
    }
}
