//! The output bundle: one directory per cluster with one file per object, a
//! `kustomization.yaml` and a `capstan.lock`; and the only code that writes output.
//!
//! [`Bundle::build`] is pure. [`Output`] writes a run's bundles all or nothing: it locks
//! OUT against other capstan writers (a lock file beside it), checks every cluster
//! directory (refusing any file capstan did not write, named), assembles the whole new OUT
//! in a hidden sibling directory (new cluster directories written, everything else of OUT
//! hard-linked) and swaps it in with one `rename(2)` (`RENAME_EXCHANGE`). A kill or an
//! error at any moment leaves OUT entirely old or entirely new; the next run removes what
//! a killed one left. A run whose bundles are all identical to what is on disk writes
//! nothing. Files capstan wrote before and no longer renders disappear with the old tree.
//! Nothing is fsynced: the guarantee holds across kills and errors, not power loss.
#![warn(unreachable_pub)]

use crate::digest::sha256_hex;
use crate::digest::Digest256;
use crate::inputs::{KUSTOMIZATION, LOCK_FILE};
use crate::pipeline::render::Rendered;
use crate::printable::Label;
use crate::yaml;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Why output could not be written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BundleError {
    /// An IO error on a path.
    // The message names the OS error, so it is not also the error's `source()`: a
    // printed chain (`{:#}`) would say it twice.
    #[error("{path}: {error}")]
    Io {
        /// The path.
        path: String,
        /// The OS error.
        error: std::io::Error,
    },
    /// The target holds files capstan did not write.
    #[error("{dir}: refusing to write: {} not written by capstan ({}); move {} away or choose another output directory", if files.len() == 1 { "this file was" } else { "these files were" }, files.join(", "), if files.len() == 1 { "it" } else { "them" })]
    Foreign {
        /// The cluster directory.
        dir: String,
        /// The foreign entries.
        files: Vec<String>,
    },
    /// The lock file exists but cannot be read.
    #[error("{path}: not a capstan lock file: {message}")]
    BadLock {
        /// The lock path.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A file that must not be overwritten exists.
    #[error("{path}: already exists; capstan never overwrites it")]
    Exists {
        /// The path.
        path: String,
    },
    /// OUT is not a directory.
    #[error("{path}: not a directory; `-o` names the output directory")]
    NotADirectory {
        /// The path.
        path: String,
    },
    /// OUT holds directories that are not rendered clusters.
    #[error("{out}: refusing to write: `-o` replaces the output directory as a whole (all or nothing), and {} not written by capstan ({}); render into a directory of its own", if entries.len() == 1 { "this directory was" } else { "these directories were" }, entries.join(", "))]
    ForeignInOut {
        /// OUT.
        out: String,
        /// The foreign directories.
        entries: Vec<String>,
    },
    /// OUT holds something that is neither a file, a directory nor a link.
    #[error("{path}: neither a file, a directory nor a symbolic link; capstan carries the rest of the output directory over by hard link and cannot carry this")]
    Special {
        /// The path.
        path: String,
    },
    /// Another capstan holds the output directory's lock for too long.
    #[error("{out}: another capstan is writing it (lock {lock} held for more than {waited} s); try again when it has finished")]
    Busy {
        /// OUT.
        out: String,
        /// The lock file.
        lock: String,
        /// Seconds waited.
        waited: u64,
    },
    /// The final swap failed: OUT is unchanged.
    #[error("{out}: the new output could not be swapped in ({error}); the output directory is unchanged")]
    Swap {
        /// OUT.
        out: String,
        /// The OS error.
        error: std::io::Error,
    },
    /// Two clusters of one name.
    #[error("two clusters are named `{name}`: each needs a directory of its own in the output")]
    DuplicateCluster {
        /// The name.
        name: String,
    },
    /// Something other than what capstan writes stands where it writes (a symbolic link
    /// where it writes into a directory, or where its lock file is).
    #[error("{path}: {found} where capstan expects {expected}; it never writes through a link or into anything else (move it away)")]
    Unexpected {
        /// The path.
        path: String,
        /// What is there (`a symbolic link`, `not a directory`…).
        found: &'static str,
        /// What capstan writes there.
        expected: &'static str,
    },
    /// Two objects map to the same file name.
    #[error("cluster `{cluster}`: two objects would both be written to `{file}`")]
    FileClash {
        /// Cluster.
        cluster: String,
        /// File name.
        file: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BundleError + '_ {
    move |error| BundleError::Io {
        path: path.label(),
        error,
    }
}

/// One cluster's output files, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bundle {
    /// Cluster name: the directory name under the output root.
    pub name: String,
    /// (file name, content), objects first in render order, then the kustomization and lock.
    pub files: Vec<(String, String)>,
}

/// File name for an object: `<kind>-<name>.yaml`, lowercase kind.
pub(crate) fn file_name(kind: &str, name: &str) -> String {
    format!("{}-{}.yaml", kind.to_ascii_lowercase(), name)
}

impl Bundle {
    /// Lay out a rendered cluster as files. `inputs` are the digests of what was read.
    pub(crate) fn build(rendered: &Rendered, inputs: &[Digest256]) -> Result<Bundle, BundleError> {
        let mut files: Vec<(String, String)> = Vec::with_capacity(rendered.resources.len() + 2);
        // Each file's digest for the lock; verbatim documents bring theirs from the reader.
        let mut digests: Vec<String> = Vec::with_capacity(rendered.resources.len() + 1);
        let mut seen = BTreeSet::new();
        for r in &rendered.resources {
            let f = file_name(r.kind(), r.name());
            if !seen.insert(f.clone()) || f == KUSTOMIZATION || f == LOCK_FILE {
                return Err(BundleError::FileClash {
                    cluster: rendered.name.clone(),
                    file: f,
                });
            }
            let text = r.to_yaml();
            digests.push(match r.yaml_sha256() {
                Some(known) => known.to_string(),
                None => sha256_hex(text.as_bytes()),
            });
            files.push((f, text));
        }
        let mut kustomization = String::with_capacity(256 + 64 * files.len());
        write_kustomization(&mut kustomization, files.iter().map(|(f, _)| f.as_str()));
        digests.push(sha256_hex(kustomization.as_bytes()));
        files.push((KUSTOMIZATION.to_string(), kustomization));
        let mut lock = String::with_capacity(256 + 128 * (inputs.len() + files.len()));
        let written = files
            .iter()
            .zip(&digests)
            .map(|((f, _), d)| (f.as_str(), d.as_str()));
        write_lock(&mut lock, &rendered.name, inputs, written);
        files.push((LOCK_FILE.to_string(), lock));
        Ok(Bundle {
            name: rendered.name.clone(),
            files,
        })
    }
}

// The kustomization and the lock have a fixed layout, so they are written as text (one
// per cluster: building them as values and emitting those cost a tenth of a render); a
// test holds the text to what the emitter writes for the same value.

/// `kustomization.yaml`: the object files in order, applied in that order.
fn write_kustomization<'a>(out: &mut String, resources: impl ExactSizeIterator<Item = &'a str>) {
    out.push_str(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nsortOptions:\n  order: fifo\nresources:",
    );
    if resources.len() == 0 {
        out.push_str(" []");
    }
    out.push('\n');
    for f in resources {
        out.push_str("- ");
        yaml::write_str_scalar(out, f, 2);
        out.push('\n');
    }
}

/// `capstan.lock`: the digests of what was read and of every file written before it.
/// `files` are (file name, sha256) pairs.
fn write_lock<'a>(
    out: &mut String,
    cluster: &str,
    inputs: &[Digest256],
    files: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
) {
    out.push_str("apiVersion: capstan.dev/v1alpha1\nkind: Lock\ncluster: ");
    yaml::write_str_scalar(out, cluster, 2);
    let inputs = inputs.iter().map(|d| (d.path.as_str(), d.sha256.as_str()));
    write_digests(out, "inputs", inputs);
    write_digests(out, "files", files);
    out.push('\n');
}

/// `key:` and a list of `{path, sha256}` mappings, after a line that is not yet ended.
fn write_digests<'a>(
    out: &mut String,
    key: &str,
    list: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
) {
    out.push('\n');
    out.push_str(key);
    out.push(':');
    if list.len() == 0 {
        out.push_str(" []");
    }
    for (path, sha256) in list {
        out.push_str("\n- path: ");
        yaml::write_str_scalar(out, path, 4);
        out.push_str("\n  sha256: ");
        yaml::write_str_scalar(out, sha256, 4);
    }
}

/// Remove files of `dir` (paths relative to it) that a command replaced with others; a file
/// already gone is fine.
pub(crate) fn remove_files(dir: &Path, rels: &[String]) -> Result<(), BundleError> {
    for rel in rels {
        let p = dir.join(rel);
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&p)(e)),
        }
    }
    Ok(())
}

/// Create new files in `dir` (created if needed), all or none: each file is written to a
/// temporary file beside it and linked into place only if no file of that name exists.
/// Existing files are never overwritten; on any error the files created so far are removed.
///
/// `dir` is followed as named, but nothing below it: every directory on the way to a file
/// is opened relative to its parent's descriptor without following a link
/// (`O_NOFOLLOW`; made when missing), and the file is created and linked relative to that
/// descriptor, so a symbolic link inside `dir` (`deploy -> /etc`) is refused
/// ([`BundleError::Unexpected`]) before anything is written, and one swapped in while
/// capstan writes is never followed either.
pub(crate) fn create_files(dir: &Path, files: &[(&str, &[u8])]) -> Result<(), BundleError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let root = rustix::fs::open(
        dir,
        rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| io(dir)(e.into()))?;
    for (name, _) in files {
        if exists_below(&root, dir, name)? {
            return Err(BundleError::Exists {
                path: dir.join(name).label(),
            });
        }
    }
    let mut created: Vec<(std::os::fd::OwnedFd, String)> = Vec::new();
    let result = (|| {
        for (i, (name, bytes)) in files.iter().enumerate() {
            let p = dir.join(name);
            let (parent_rel, base) = name.rsplit_once('/').unwrap_or(("", name));
            let parent = open_below(&root, dir, parent_rel, true)?
                .ok_or_else(|| io(&p)(std::io::ErrorKind::NotFound.into()))?;
            let tmp = format!(".{base}.capstan-tmp-{}-{i}", std::process::id());
            let fd = rustix::fs::openat(
                &parent,
                tmp.as_str(),
                rustix::fs::OFlags::WRONLY
                    | rustix::fs::OFlags::CREATE
                    | rustix::fs::OFlags::EXCL
                    | rustix::fs::OFlags::NOFOLLOW
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::from_raw_mode(0o600),
            )
            .map_err(|e| io(&p)(e.into()))?;
            let written = std::io::Write::write_all(&mut std::fs::File::from(fd), bytes);
            // linkat(2) never replaces anything: an existing name (a link included) fails.
            let linked = written.and_then(|()| {
                rustix::fs::linkat(
                    &parent,
                    tmp.as_str(),
                    &parent,
                    base,
                    rustix::fs::AtFlags::empty(),
                )
                .map_err(std::io::Error::from)
            });
            let _ = rustix::fs::unlinkat(&parent, tmp.as_str(), rustix::fs::AtFlags::empty());
            match linked {
                Ok(()) => created.push((parent, base.to_string())),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    return Err(BundleError::Exists { path: p.label() })
                }
                Err(e) => return Err(io(&p)(e)),
            }
        }
        Ok(())
    })();
    if result.is_err() {
        for (parent, name) in created {
            let _ = rustix::fs::unlinkat(&parent, name.as_str(), rustix::fs::AtFlags::empty());
        }
    }
    result
}

/// The directory `rel` below the open directory `root` (which is `shown`, for messages),
/// each component opened relative to the last without following a link; a missing one made
/// when `create`, else `None`.
fn open_below(
    root: &std::os::fd::OwnedFd,
    shown: &Path,
    rel: &str,
    create: bool,
) -> Result<Option<std::os::fd::OwnedFd>, BundleError> {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut cur = rustix::io::dup(root).map_err(|e| io(shown)(e.into()))?;
    let mut at = shown.to_path_buf();
    for comp in rel.split('/').filter(|c| !c.is_empty() && *c != ".") {
        at.push(comp);
        let next = match rustix::fs::openat(&cur, comp, flags, Mode::empty()) {
            Err(rustix::io::Errno::NOENT) if create => {
                match rustix::fs::mkdirat(&cur, comp, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(io(&at)(e.into())),
                }
                rustix::fs::openat(&cur, comp, flags, Mode::empty())
            }
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            other => other,
        };
        cur = match next {
            Ok(fd) => fd,
            Err(e) => {
                // What stands there, without following it.
                let found = match rustix::fs::statat(&cur, comp, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                        "a symbolic link"
                    }
                    Ok(st) if FileType::from_raw_mode(st.st_mode) != FileType::Directory => {
                        "not a directory"
                    }
                    _ => return Err(io(&at)(e.into())),
                };
                return Err(BundleError::Unexpected {
                    path: at.label(),
                    found,
                    expected: "a directory",
                });
            }
        };
    }
    Ok(Some(cur))
}

/// Whether anything (a link included) stands at `rel` below the open directory `root`; a
/// link or a file where a directory of `rel` belongs is refused ([`open_below`]).
fn exists_below(root: &std::os::fd::OwnedFd, shown: &Path, rel: &str) -> Result<bool, BundleError> {
    let (parent_rel, base) = rel.rsplit_once('/').unwrap_or(("", rel));
    let Some(parent) = open_below(root, shown, parent_rel, false)? else {
        return Ok(false);
    };
    match rustix::fs::statat(&parent, base, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(_) => Ok(true),
        Err(rustix::io::Errno::NOENT) => Ok(false),
        Err(e) => Err(io(&shown.join(rel))(e.into())),
    }
}

/// Create those of `files` (relative paths) that do not exist under `dir` yet, through
/// [`create_files`] (no link below `dir` followed); existing files, whatever their
/// content, and links in a file's place are kept untouched.
/// Returns (created, kept) relative paths, in the order given.
pub(crate) fn create_missing(
    dir: &Path,
    files: &[(&str, &[u8])],
) -> Result<(Vec<String>, Vec<String>), BundleError> {
    let (new, kept) = partition_missing(dir, files)?;
    create_files(dir, &new)?;
    Ok((new.iter().map(|(n, _)| n.to_string()).collect(), kept))
}

/// A file to create: its path relative to the directory, and its bytes.
pub(crate) type NewFile<'a> = (&'a str, &'a [u8]);

/// What [`create_files`] checks before it writes, without writing (a writer's
/// `--dry-run`): [`BundleError::Exists`] for the first file that exists.
pub(crate) fn check_creatable(dir: &Path, files: &[(&str, &[u8])]) -> Result<(), BundleError> {
    let (_, kept) = partition_missing(dir, files)?;
    match kept.first() {
        Some(k) => Err(BundleError::Exists {
            path: dir.join(k).label(),
        }),
        None => Ok(()),
    }
}

/// Those of `files` that [`create_missing`] would create, and the relative paths it would
/// keep, without writing anything (a writer's `--dry-run`).
pub(crate) fn partition_missing<'a>(
    dir: &Path,
    files: &[NewFile<'a>],
) -> Result<(Vec<NewFile<'a>>, Vec<String>), BundleError> {
    let mut kept = Vec::new();
    let mut new: Vec<(&str, &[u8])> = Vec::new();
    // Nothing below `dir` is followed (see [`create_files`]): a missing `dir` holds nothing.
    let root = match rustix::fs::open(
        dir,
        rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) {
        Ok(fd) => Some(fd),
        Err(rustix::io::Errno::NOENT) => None,
        Err(e) => return Err(io(dir)(e.into())),
    };
    for (name, bytes) in files {
        let exists = match &root {
            Some(root) => exists_below(root, dir, name)?,
            None => false,
        };
        if exists {
            kept.push(name.to_string());
        } else {
            new.push((name, bytes));
        }
    }
    Ok((new, kept))
}

/// Replace files under `dir` (relative paths; parents created), each atomically (written
/// beside it, then renamed over it). A file whose content is already identical is left
/// alone. Returns the paths actually written.
pub(crate) fn replace_files(dir: &Path, files: &[(String, Vec<u8>)]) -> Result<Vec<String>, BundleError> {
    let mut written = Vec::new();
    for (name, bytes) in files {
        let p = dir.join(name);
        if unchanged(&p, bytes) {
            continue;
        }
        let parent = p.parent().unwrap_or(dir);
        std::fs::create_dir_all(parent).map_err(io(parent))?;
        let mut tmp = tempfile::NamedTempFile::new_in(parent).map_err(io(parent))?;
        std::io::Write::write_all(&mut tmp, bytes).map_err(io(&p))?;
        tmp.persist(&p).map_err(|e| BundleError::Io {
            path: p.label(),
            error: e.error,
        })?;
        written.push(name.clone());
    }
    Ok(written)
}

/// The paths of `files` that [`replace_files`] would write (those missing or different),
/// without writing anything (a writer's `--dry-run`).
pub(crate) fn changed_files(dir: &Path, files: &[(String, Vec<u8>)]) -> Vec<String> {
    files
        .iter()
        .filter(|(name, bytes)| !unchanged(&dir.join(name), bytes))
        .map(|(name, _)| name.clone())
        .collect()
}

/// Whether the file at `p` holds exactly `bytes`.
fn unchanged(p: &Path, bytes: &[u8]) -> bool {
    std::fs::read(p).is_ok_and(|old| old == bytes)
}

/// What [`write_all`] did per cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The directory was created.
    Created,
    /// The directory was replaced.
    Updated,
    /// The content was already identical; nothing was written.
    Unchanged,
}

/// The files listed in an existing lock (`None` when there is no directory).
fn previous_files(dir: &Path) -> Result<Option<BTreeSet<String>>, BundleError> {
    if !dir.exists() {
        return Ok(None);
    }
    let lock_path = dir.join(LOCK_FILE);
    let mut listed = BTreeSet::new();
    if lock_path.is_file() {
        let text = std::fs::read_to_string(&lock_path).map_err(io(&lock_path))?;
        let bad = |message: String| BundleError::BadLock {
            path: lock_path.label(),
            message,
        };
        let v = yaml::parse_one(&text).map_err(|e| bad(e.message))?;
        if v.get("kind").and_then(Value::as_str) != Some("Lock") {
            return Err(bad("expected `kind: Lock`".into()));
        }
        for f in v
            .get("files")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match f.get("path").and_then(Value::as_str) {
                Some(p) if !p.contains('/') && !p.starts_with('.') => {
                    listed.insert(p.to_string());
                }
                _ => return Err(bad("`files[].path` must be plain file names".into())),
            }
        }
        listed.insert(LOCK_FILE.to_string());
    }
    Ok(Some(listed))
}

fn foreign_entries(dir: &Path, listed: &BTreeSet<String>) -> Result<Vec<String>, BundleError> {
    let mut foreign = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_file = entry.file_type().map_err(io(&entry.path()))?.is_file();
        if !is_file || !listed.contains(&name) {
            foreign.push(if is_file { name } else { format!("{name}/") });
        }
    }
    foreign.sort();
    Ok(foreign)
}

fn same_content(dir: &Path, bundle: &Bundle) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    if entries.count() != bundle.files.len() {
        return false;
    }
    bundle
        .files
        .iter()
        .all(|(f, c)| std::fs::read(dir.join(f)).is_ok_and(|b| b == c.as_bytes()))
}

/// How long a second writer waits for the first before it gives up.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// Open (or create) the lock file at `path` without following a link (`O_NOFOLLOW`: a
/// link there would have capstan create or truncate its target) and without blocking (a
/// FIFO there is refused, not waited on); only a regular file is a lock.
fn open_lock(path: &Path) -> Result<std::fs::File, BundleError> {
    use std::os::unix::fs::OpenOptionsExt;
    let unexpected = |found| BundleError::Unexpected {
        path: path.label(),
        found,
        expected: "its lock file (a regular file)",
    };
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => unexpected("a symbolic link"),
            // A FIFO without a reader, opened without blocking.
            Some(libc::ENXIO) => unexpected("not a regular file"),
            _ => io(path)(e),
        })?;
    if !lock.metadata().map_err(io(path))?.is_file() {
        return Err(unexpected("not a regular file"));
    }
    Ok(lock)
}

/// Whether a name in OUT or beside it is a staging directory of a capstan run: this
/// layout's (`.<OUT>.capstan-new-<pid>`, beside OUT) or an earlier release's
/// (`.<cluster>.capstan-new-…` / `.capstan-old-…`, inside OUT).
fn is_staging_name(name: &str) -> bool {
    name.starts_with('.') && (name.contains(".capstan-new-") || name.contains(".capstan-old-"))
}

/// An output directory being written: OUT locked against other capstan writers, the new
/// tree assembled beside it (`.<OUT>.capstan-new-<pid>`), swapped in with one
/// `rename(2)` (`RENAME_EXCHANGE`). A kill at any moment leaves OUT entirely old or
/// entirely new; the next writer removes what a killed one left. Dropped without
/// [`Output::commit`], it removes its staging tree.
pub(crate) struct Output {
    /// OUT as the user named it, for messages.
    shown: PathBuf,
    /// OUT with its parent canonical (where the swap happens).
    target: PathBuf,
    /// The tree being assembled.
    staging: PathBuf,
    /// Whether OUT existed when the run started.
    existed: bool,
    /// Held (flock) until the run ends.
    _lock: std::fs::File,
    committed: bool,
}

impl Drop for Output {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.staging);
        }
    }
}

/// A cluster directory staged for [`Output::commit`].
#[derive(Debug)]
pub(crate) struct Staged {
    name: String,
    outcome: Outcome,
    duplicate: bool,
}

/// What [`Output::commit`] did.
#[derive(Debug)]
pub(crate) struct Committed {
    /// Per cluster, in the order staged.
    pub report: Vec<(String, Outcome)>,
    /// The previous tree, when removing it failed after the swap (OUT is complete and new;
    /// the next run removes it).
    pub leftover: Option<(PathBuf, std::io::Error)>,
}

impl Output {
    /// Lock OUT (waiting up to ten minutes for another capstan writing it; `on_wait` is
    /// told the lock file once), remove what killed runs left beside it, and create the
    /// staging tree. OUT itself is not changed.
    pub(crate) fn open(root: &Path, on_wait: &mut dyn FnMut(&Path)) -> Result<Output, BundleError> {
        let target = match std::fs::symlink_metadata(root) {
            Ok(_) => {
                let meta = std::fs::metadata(root).map_err(io(root))?;
                if !meta.is_dir() {
                    return Err(BundleError::NotADirectory { path: root.label() });
                }
                std::fs::canonicalize(root).map_err(io(root))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let name = root
                    .file_name()
                    .ok_or_else(|| BundleError::NotADirectory { path: root.label() })?;
                let parent = match root.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
                std::fs::create_dir_all(parent).map_err(io(parent))?;
                std::fs::canonicalize(parent)
                    .map_err(io(parent))?
                    .join(name)
            }
            Err(e) => return Err(io(root)(e)),
        };
        let (Some(parent), Some(name)) = (target.parent(), target.file_name()) else {
            return Err(BundleError::NotADirectory { path: root.label() });
        };
        let name = name.to_string_lossy().into_owned();
        let lock_path = parent.join(format!(".{name}.capstan-lock"));
        let lock = open_lock(&lock_path)?;
        lock_exclusive(&lock, &lock_path, root, on_wait)?;
        // Under the lock no other writer is running: anything staged beside OUT is a
        // killed run's.
        let prefix = format!(".{name}.capstan-new-");
        for entry in std::fs::read_dir(parent).map_err(io(parent))? {
            let entry = entry.map_err(io(parent))?;
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let p = entry.path();
                std::fs::remove_dir_all(&p).map_err(io(&p))?;
            }
        }
        let staging = parent.join(format!("{prefix}{}", std::process::id()));
        std::fs::create_dir(&staging).map_err(io(&staging))?;
        let existed = target.is_dir();
        let out = Output {
            shown: root.to_path_buf(),
            target,
            staging,
            existed,
            _lock: lock,
            committed: false,
        };
        if existed {
            let perms = std::fs::metadata(&out.target)
                .map_err(io(&out.target))?
                .permissions();
            std::fs::set_permissions(&out.staging, perms).map_err(io(&out.staging))?;
        }
        Ok(out)
    }

    /// Check a cluster's directory in OUT (refusing files capstan did not write) and write
    /// the bundle into the staging tree. Nothing in OUT changes. Safe to call from several
    /// threads for different clusters.
    pub(crate) fn stage(&self, bundle: &Bundle) -> Result<Staged, BundleError> {
        let dir = self.target.join(&bundle.name);
        let exists = match previous_files(&dir)? {
            None => false,
            Some(listed) => {
                let foreign = foreign_entries(&dir, &listed)?;
                if !foreign.is_empty() {
                    return Err(BundleError::Foreign {
                        dir: self.shown.join(&bundle.name).label(),
                        files: foreign,
                    });
                }
                true
            }
        };
        let outcome = if !exists {
            Outcome::Created
        } else if same_content(&dir, bundle) {
            // Carried over with the rest of OUT at commit.
            return Ok(Staged {
                name: bundle.name.clone(),
                outcome: Outcome::Unchanged,
                duplicate: false,
            });
        } else {
            Outcome::Updated
        };
        let new = self.staging.join(&bundle.name);
        match std::fs::create_dir(&new) {
            Ok(()) => {}
            // Two clusters of one name: the caller names both files (its duplicate check
            // sees both staged), and commit refuses regardless.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Ok(Staged {
                    name: bundle.name.clone(),
                    outcome,
                    duplicate: true,
                })
            }
            Err(e) => return Err(io(&new)(e)),
        }
        for (f, c) in &bundle.files {
            let p = new.join(f);
            std::fs::write(&p, c).map_err(io(&p))?;
        }
        Ok(Staged {
            name: bundle.name.clone(),
            outcome,
            duplicate: false,
        })
    }

    /// Complete the staging tree with everything of OUT this run does not replace (hard
    /// links: same files, same inodes) and swap it in with one rename. Errors before the
    /// swap leave OUT as it was; after it, nothing is an error.
    pub(crate) fn commit(mut self, staged: Vec<Staged>) -> Result<Committed, BundleError> {
        let mut names = BTreeSet::new();
        for s in &staged {
            if s.duplicate || !names.insert(s.name.as_str()) {
                return Err(BundleError::DuplicateCluster {
                    name: s.name.clone(),
                });
            }
        }
        let report: Vec<(String, Outcome)> =
            staged.into_iter().map(|s| (s.name, s.outcome)).collect();
        if self.existed && report.iter().all(|(_, o)| *o == Outcome::Unchanged) {
            // Nothing to write; the staging tree is removed on drop.
            return Ok(Committed {
                report,
                leftover: None,
            });
        }
        if self.existed {
            let replaced: BTreeSet<&str> = report
                .iter()
                .filter(|(_, o)| *o != Outcome::Unchanged)
                .map(|(n, _)| n.as_str())
                .collect();
            self.carry_over(&replaced)?;
        }
        let flags = if self.existed {
            rustix::fs::RenameFlags::EXCHANGE
        } else {
            rustix::fs::RenameFlags::NOREPLACE
        };
        rustix::fs::renameat_with(
            rustix::fs::CWD,
            &self.staging,
            rustix::fs::CWD,
            &self.target,
            flags,
        )
        .map_err(|e| BundleError::Swap {
            out: self.shown.label(),
            error: std::io::Error::from(e),
        })?;
        self.committed = true;
        // The previous tree is now at the staging path.
        let leftover = if self.existed {
            std::fs::remove_dir_all(&self.staging)
                .err()
                .map(|e| (self.staging.clone(), e))
        } else {
            None
        };
        Ok(Committed { report, leftover })
    }

    /// Link every entry of OUT that this run does not replace into the staging tree.
    fn carry_over(&self, replaced: &BTreeSet<&str>) -> Result<(), BundleError> {
        let mut foreign = Vec::new();
        for entry in std::fs::read_dir(&self.target).map_err(io(&self.target))? {
            let entry = entry.map_err(io(&self.target))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if replaced.contains(name.as_str()) || is_staging_name(&name) {
                continue;
            }
            let from = entry.path();
            let is_dir = entry.file_type().map_err(io(&from))?.is_dir();
            if is_dir
                && !from.join(LOCK_FILE).is_file()
                && std::fs::read_dir(&from)
                    .map_err(io(&from))?
                    .next()
                    .is_some()
            {
                foreign.push(format!("{name}/"));
                continue;
            }
            link_tree(&from, &self.staging.join(&name))?;
        }
        if foreign.is_empty() {
            return Ok(());
        }
        foreign.sort();
        Err(BundleError::ForeignInOut {
            out: self.shown.label(),
            entries: foreign,
        })
    }
}

/// Take the exclusive lock, waiting for another writer (polling: a bounded wait).
fn lock_exclusive(
    lock: &std::fs::File,
    lock_path: &Path,
    out: &Path,
    on_wait: &mut dyn FnMut(&Path),
) -> Result<(), BundleError> {
    use rustix::fs::{flock, FlockOperation};
    let started = std::time::Instant::now();
    let mut told = false;
    loop {
        match flock(lock, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(()),
            Err(e) if e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::INTR => {}
            Err(e) => return Err(io(lock_path)(e.into())),
        }
        if !told {
            on_wait(lock_path);
            told = true;
        }
        if started.elapsed() > LOCK_WAIT {
            return Err(BundleError::Busy {
                out: out.label(),
                lock: lock_path.label(),
                waited: LOCK_WAIT.as_secs(),
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Recreate `from` at `to`: directories with their mode, regular files hard-linked (the
/// same inode: content, mode, owner and times kept), symbolic links as links.
fn link_tree(from: &Path, to: &Path) -> Result<(), BundleError> {
    let meta = std::fs::symlink_metadata(from).map_err(io(from))?;
    let t = meta.file_type();
    if t.is_dir() {
        std::fs::create_dir(to).map_err(io(to))?;
        std::fs::set_permissions(to, meta.permissions()).map_err(io(to))?;
        for entry in std::fs::read_dir(from).map_err(io(from))? {
            let entry = entry.map_err(io(from))?;
            link_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else if t.is_file() {
        std::fs::hard_link(from, to).map_err(io(from))
    } else if t.is_symlink() {
        let dest = std::fs::read_link(from).map_err(io(from))?;
        std::os::unix::fs::symlink(dest, to).map_err(io(to))
    } else {
        Err(BundleError::Special { path: from.label() })
    }
}

/// Write every bundle under `root`: open, stage all (every target checked for foreign
/// files, nothing visible changed), then commit all at once.
#[cfg(test)]
pub(crate) fn write_all(root: &Path, bundles: &[Bundle]) -> Result<Vec<(String, Outcome)>, BundleError> {
    let out = Output::open(root, &mut |_| {})?;
    let staged = bundles
        .iter()
        .map(|b| out.stage(b))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(out.commit(staged)?.report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::Resource;
    use serde_json::json;

    #[test]
    fn lock_digests_of_verbatim_files_are_of_the_written_bytes() {
        let doc = |name: &str, text: &str| Resource {
            value: json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}}),
            origin: "t".into(),
            raw: Some(crate::resource::Verbatim {
                text: text.into(),
                // What the reader computed over the text it read.
                sha256: Some(sha256_hex(text.as_bytes())),
            }),
            template: false,
        };
        let r = Rendered {
            name: "c1".into(),
            namespace: "c1".into(),
            phase: None,
            kubeadm_etcd_members: 0,
            // The second lacks its final newline, so the file is not the text read.
            resources: vec![doc("a", "kind: Secret\n"), doc("b", "kind: Secret")],
            warnings: Vec::new(),
        };
        let b = Bundle::build(&r, &[]).unwrap();
        let lock = &b.files.last().unwrap().1;
        for (f, content) in &b.files[..b.files.len() - 1] {
            let line = format!(
                "- path: {f}\n  sha256: {}\n",
                sha256_hex(content.as_bytes())
            );
            let quoted = format!(
                "- path: {f}\n  sha256: \"{}\"\n",
                sha256_hex(content.as_bytes())
            );
            assert!(
                lock.contains(&line) || lock.contains(&quoted),
                "{f}:\n{lock}"
            );
        }
        assert_eq!(b.files[1].1, "kind: Secret\n");
    }

    #[test]
    fn lock_and_kustomization_text_is_what_the_emitter_writes() {
        // Names that need quoting or a literal block, beside ordinary ones.
        let odd = [
            "c1",
            "123",
            "true",
            "a: b",
            "x\ny",
            "- dash",
            "é",
            "0x1f",
            "2026-01-01",
        ];
        for (i, name) in odd.iter().enumerate() {
            let inputs: Vec<Digest256> = odd[..i]
                .iter()
                .map(|p| Digest256 {
                    path: format!("clusters/{p}"),
                    sha256: sha256_hex(p.as_bytes()),
                })
                .collect();
            let files: Vec<(String, String)> = odd[..i]
                .iter()
                .map(|f| (f.to_string(), format!("content of {f}\n")))
                .collect();
            let mut kustomization = String::new();
            write_kustomization(&mut kustomization, files.iter().map(|(f, _)| f.as_str()));
            let want = yaml::to_string(&json!({
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "sortOptions": {"order": "fifo"},
                "resources": files.iter().map(|(f, _)| f.clone()).collect::<Vec<_>>(),
            }));
            assert_eq!(kustomization, want);
            let mut lock = String::new();
            let digests: Vec<String> = files
                .iter()
                .map(|(_, c)| sha256_hex(c.as_bytes()))
                .collect();
            let written = files
                .iter()
                .zip(&digests)
                .map(|((f, _), d)| (f.as_str(), d.as_str()));
            write_lock(&mut lock, name, &inputs, written);
            let want = yaml::to_string(&json!({
                "apiVersion": "capstan.dev/v1alpha1",
                "kind": "Lock",
                "cluster": name,
                "inputs": inputs.iter().map(|d| json!({"path": d.path, "sha256": d.sha256})).collect::<Vec<_>>(),
                "files": files.iter().map(|(f, c)| json!({"path": f, "sha256": sha256_hex(c.as_bytes())})).collect::<Vec<_>>(),
            }));
            assert_eq!(lock, want);
        }
    }

    fn rendered(n: u32) -> Rendered {
        let resources = (0..n)
            .map(|i| Resource {
                value: json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("m{i}")}}),
                origin: "t".into(),
                raw: None,
                template: false,
            })
            .collect();
        Rendered {
            name: "c1".into(),
            namespace: "ns".into(),
            phase: None,
            kubeadm_etcd_members: 0,
            resources,
            warnings: Vec::new(),
        }
    }

    #[test]
    fn layout_and_lock() {
        let b = Bundle::build(
            &rendered(2),
            &[Digest256 {
                path: "clusters/c1/cluster.yaml".into(),
                sha256: "ab".into(),
            }],
        )
        .unwrap();
        let names: Vec<&str> = b.files.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            names,
            [
                "configmap-m0.yaml",
                "configmap-m1.yaml",
                KUSTOMIZATION,
                LOCK_FILE
            ]
        );
        assert!(b.files[2]
            .1
            .contains("resources:\n- configmap-m0.yaml\n- configmap-m1.yaml\n"));
        let lock = &b.files[3].1;
        assert!(
            lock.contains("path: clusters/c1/cluster.yaml\n  sha256: ab\n"),
            "{lock}"
        );
        assert!(lock.contains(&format!(
            "path: configmap-m0.yaml\n  sha256: {}\n",
            sha256_hex(b.files[0].1.as_bytes())
        )));
    }

    #[test]
    fn writes_replaces_and_removes_stale_files() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let b2 = Bundle::build(&rendered(2), &[]).unwrap();
        assert_eq!(
            write_all(&out, std::slice::from_ref(&b2)).unwrap()[0].1,
            Outcome::Created
        );
        let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
        let out_inode = inode(&out);
        assert_eq!(write_all(&out, &[b2]).unwrap()[0].1, Outcome::Unchanged);
        assert_eq!(
            inode(&out),
            out_inode,
            "nothing written when nothing changed"
        );
        // Another cluster's directory and a file of the user's are carried over as they are.
        let mut other = rendered(1);
        other.name = "c0".into();
        write_all(&out, &[Bundle::build(&other, &[]).unwrap()]).unwrap();
        std::fs::write(out.join("README.md"), "mine").unwrap();
        let kept = inode(&out.join("c0/configmap-m0.yaml"));
        let b1 = Bundle::build(&rendered(1), &[]).unwrap();
        assert_eq!(write_all(&out, &[b1]).unwrap()[0].1, Outcome::Updated);
        assert!(!out.join("c1/configmap-m1.yaml").exists());
        assert!(out.join("c1/configmap-m0.yaml").exists());
        assert_eq!(inode(&out.join("c0/configmap-m0.yaml")), kept);
        assert_eq!(std::fs::read(out.join("README.md")).unwrap(), b"mine");
        let names = |d: &Path| {
            let mut v: Vec<String> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(&out), ["README.md", "c0", "c1"]);
        assert_eq!(names(tmp.path()), [".out.capstan-lock", "out"]);
    }

    #[test]
    fn leftovers_of_killed_runs_are_removed_and_foreign_directories_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        write_all(&out, &[Bundle::build(&rendered(1), &[]).unwrap()]).unwrap();
        // What killed runs leave: a staging tree beside OUT, an old release's inside it.
        std::fs::create_dir_all(tmp.path().join(".out.capstan-new-999/c1")).unwrap();
        std::fs::create_dir_all(out.join(".c1.capstan-old-12")).unwrap();
        write_all(&out, &[Bundle::build(&rendered(2), &[]).unwrap()]).unwrap();
        assert!(!tmp.path().join(".out.capstan-new-999").exists());
        assert!(!out.join(".c1.capstan-old-12").exists());
        // A directory capstan did not write, anywhere in OUT, is refused: OUT is replaced
        // as a whole.
        std::fs::create_dir_all(out.join(".git/objects")).unwrap();
        std::fs::write(out.join(".git/HEAD"), "ref").unwrap();
        let e = write_all(&out, &[Bundle::build(&rendered(1), &[]).unwrap()]).unwrap_err();
        assert!(matches!(e, BundleError::ForeignInOut { .. }), "{e}");
        assert!(e.to_string().contains("(.git/)"), "{e}");
        assert!(
            out.join("c1/configmap-m1.yaml").exists(),
            "unchanged on error"
        );
        assert!(!tmp
            .path()
            .join(format!(".out.capstan-new-{}", std::process::id()))
            .exists());
    }

    #[test]
    fn refuses_foreign_files_and_touches_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        write_all(&out, &[Bundle::build(&rendered(2), &[]).unwrap()]).unwrap();
        std::fs::write(out.join("c1/notes.txt"), "mine").unwrap();
        let before = std::fs::read(out.join("c1/configmap-m1.yaml")).unwrap();
        let e = write_all(&out, &[Bundle::build(&rendered(1), &[]).unwrap()]).unwrap_err();
        assert!(
            e.to_string()
                .contains("this file was not written by capstan (notes.txt)"),
            "{e}"
        );
        assert_eq!(
            std::fs::read(out.join("c1/configmap-m1.yaml")).unwrap(),
            before
        );
        // A directory without a lock is not ours either.
        let other = out.join("x");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("a.yaml"), "a").unwrap();
        let mut r = rendered(1);
        r.name = "x".into();
        let e = write_all(&out, &[Bundle::build(&r, &[]).unwrap()]).unwrap_err();
        assert!(matches!(e, BundleError::Foreign { .. }), "{e}");
    }

    #[test]
    fn create_missing_keeps_existing_files() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("mine.txt"), "user").unwrap();
        let files: [(&str, &[u8]); 2] = [("mine.txt", b"ours"), ("a/b.txt", b"new")];
        let (created, kept) = create_missing(tmp.path(), &files).unwrap();
        assert_eq!(
            (created, kept),
            (vec!["a/b.txt".to_string()], vec!["mine.txt".to_string()])
        );
        assert_eq!(std::fs::read(tmp.path().join("mine.txt")).unwrap(), b"user");
        let (created, kept) = create_missing(tmp.path(), &files).unwrap();
        assert!(created.is_empty() && kept.len() == 2);
    }
}
