//! Where `backup pull` writes: a staging directory beside OUT, `.<OUT>.capstan-new-<pid>`
//! (mode 0700, files 0600), that takes OUT's place in one rename once every file verified,
//! after one `syncfs` (not an fsync per file). A pull that fails removes it; a pull that
//! was killed leaves it, and the next pull beside it removes
//! every one whose process no longer runs, before it writes anything: decrypted files of a
//! killed pull do not outlive the next run.

use super::BackupError;
use crate::printable::Label;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A pull's output being written.
#[derive(Debug)]
pub(crate) struct Staging {
    dir: PathBuf,
    out: PathBuf,
    parent: PathBuf,
    committed: bool,
    /// Files written so far.
    pub files: usize,
    /// Bytes written so far.
    pub bytes: u64,
    /// The one buffer files are copied through (zeroized when the pull ends).
    buf: zeroize::Zeroizing<Vec<u8>>,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> BackupError + '_ {
    move |e| BackupError::Io {
        path: path.label(),
        message: e.to_string(),
    }
}

/// The staging directories beside `out` are named with this prefix, then a pid.
fn prefix_of(out: &Path) -> String {
    let base = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    format!(".{base}.capstan-new-")
}

/// What [`Staging::new`] requires of `out`, checked without creating anything (a
/// `--dry-run`): absent, or an empty directory.
pub(crate) fn check_out(out: &Path) -> Result<(), BackupError> {
    match std::fs::symlink_metadata(out) {
        Ok(m) if m.is_dir() => {
            if std::fs::read_dir(out).map_err(io(out))?.next().is_some() {
                return Err(BackupError::Io {
                    path: out.label(),
                    message: "not empty: pull into an empty or new directory".into(),
                });
            }
        }
        Ok(_) => {
            return Err(BackupError::Io {
                path: out.label(),
                message: "not a directory".into(),
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(out)(e)),
    }
    Ok(())
}

impl Staging {
    /// Check `out` (absent or an empty directory), remove the staging directories of
    /// killed pulls beside it, and create this one's.
    pub(crate) fn new(out: &Path) -> Result<Staging, BackupError> {
        check_out(out)?;
        let parent = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let prefix = prefix_of(out);
        remove_dead(&parent, &prefix);
        let dir = parent.join(format!("{prefix}{}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(io(&dir))?;
        Ok(Staging {
            dir,
            out: out.to_path_buf(),
            parent,
            committed: false,
            files: 0,
            bytes: 0,
            buf: zeroize::Zeroizing::new(vec![0u8; 256 << 10]),
        })
    }

    /// The staging directory.
    #[cfg(test)]
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Write file `name` (a safe name: the manifest's names are checked before any file
    /// is handed over) from `r`, mode 0600, not synced (see [`Staging::commit`]).
    pub(crate) fn write(&mut self, name: &str, r: &mut dyn Read) -> Result<(), BackupError> {
        let p = self.dir.join(name);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&p)
            .map_err(io(&p))?;
        // Copied through one zeroized buffer; an error of the reader (a corrupt or stalled
        // backup) is the reader's, not the file's.
        let mut n = 0u64;
        loop {
            let k = match r.read(&mut self.buf) {
                Ok(0) => break,
                Ok(k) => k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(BackupError::Io {
                        path: "the backup stream".into(),
                        message: e.to_string(),
                    })
                }
            };
            std::io::Write::write_all(&mut f, &self.buf[..k]).map_err(io(&p))?;
            n += k as u64;
        }
        self.files += 1;
        self.bytes += n;
        Ok(())
    }

    /// Every file verified: one `syncfs` of the file system, then the staging directory
    /// takes OUT's place (an empty OUT gives way), then the parent is synced.
    pub(crate) fn commit(mut self) -> Result<(), BackupError> {
        let d = std::fs::File::open(&self.dir).map_err(io(&self.dir))?;
        rustix::fs::syncfs(&d).map_err(|e| io(&self.dir)(e.into()))?;
        let existed = self.out.exists();
        if existed {
            std::fs::remove_dir(&self.out).map_err(io(&self.out))?;
        }
        rustix::fs::renameat_with(
            rustix::fs::CWD,
            &self.dir,
            rustix::fs::CWD,
            &self.out,
            rustix::fs::RenameFlags::NOREPLACE,
        )
        .map_err(|e| {
            if existed {
                let _ = std::fs::create_dir(&self.out);
            }
            io(&self.out)(e.into())
        })?;
        self.committed = true;
        let p = std::fs::File::open(&self.parent).map_err(io(&self.parent))?;
        rustix::fs::fsync(&p).map_err(|e| io(&self.parent)(e.into()))?;
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Remove the staging directories beside OUT of processes that no longer run (and this
/// process's own, from an earlier call).
fn remove_dead(parent: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let dead = name
            .strip_prefix(prefix)
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_some_and(|pid| {
                pid == std::process::id() || !Path::new(&format!("/proc/{pid}")).exists()
            });
        if dead {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staging_directory_takes_outs_place_or_vanishes() {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("out");
        // A killed pull's staging directory (a pid that cannot run) is removed.
        let dead = t.path().join(".out.capstan-new-4294967295");
        std::fs::create_dir(&dead).unwrap();
        std::fs::write(dead.join("Secret_a_b.yaml"), "plaintext").unwrap();
        let mut s = Staging::new(&out).unwrap();
        assert!(!dead.exists());
        s.write("Cluster_a_b.yaml", &mut &b"x"[..]).unwrap();
        assert!(s.write("Cluster_a_b.yaml", &mut &b"y"[..]).is_err());
        s.commit().unwrap();
        assert_eq!(std::fs::read(out.join("Cluster_a_b.yaml")).unwrap(), b"x");
        let names: Vec<_> = std::fs::read_dir(t.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, ["out"]);
        // Dropped without commit: nothing left; OUT not empty: refused.
        let other = t.path().join("other");
        let mut s = Staging::new(&other).unwrap();
        s.write("Cluster_a_b.yaml", &mut &b"x"[..]).unwrap();
        let dir = s.dir().to_path_buf();
        drop(s);
        assert!(!dir.exists() && !other.exists());
        let e = Staging::new(&out).unwrap_err();
        assert!(e.to_string().contains("not empty"), "{e}");
    }
}
