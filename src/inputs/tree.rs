//! A tree of input files, three ways: the confined disk ([`DiskTree`]), a git revision
//! ([`super::git::Revision`]) and memory ([`MemoryTree`]). The cluster, template and
//! overlay loaders ([`super::cluster`]) are written once over [`Tree`]; each tree keeps the
//! rules of its kind (confinement, link resolution, size caps) behind the same few calls.
//!
//! A path of a tree is a [`Path`] in that tree's own space: on disk the path as the user
//! typed it (relative to the working directory, or absolute), in a revision a tree path
//! (`clusters/lab-f/cluster.yaml`, `""` the top), in memory whatever the test names.

use super::{InputError, InputKind};
use crate::printable::Label;
#[cfg(any(test, feature = "testkit"))]
use std::collections::BTreeMap;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A file's bytes as a tree holds them (shared: a revision keeps what it read).
pub type Blob = Arc<Vec<u8>>;

/// One name in a directory of a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Child {
    /// The name (one path component).
    pub name: String,
    /// Whether it is a directory (a symbolic link is not one: listings do not follow it).
    pub dir: bool,
}

/// What the loaders read files through.
pub trait Tree: Sync {
    /// The bytes of the regular file at `path`, at most `kind.cap()`; `None` when nothing
    /// is there. Links are followed only inside the tree; anything but a regular file is
    /// refused ([`InputError::NotRegular`]).
    fn read(&self, path: &Path, kind: InputKind) -> Result<Option<Blob>, InputError>;

    /// The names in the directory at `path` (links on the way followed inside the tree),
    /// sorted by name; `None` when there is no directory there.
    fn list(&self, path: &Path) -> Result<Option<Vec<Child>>, InputError>;

    /// Whether anything is at `path`, of any type (a link that leaves the tree too: reading
    /// it then says why, instead of the file silently not being there).
    fn exists(&self, path: &Path) -> bool;

    /// Refuse a directory that resolves outside the tree ([`InputError::Outside`]); `Ok`
    /// for one that is inside or absent.
    fn confine(&self, dir: &Path) -> Result<(), InputError>;

    /// How `path` is shown in messages (through [`crate::printable`]).
    fn label(&self, path: &Path) -> String;

    /// The repository root of a cluster directory of this tree (the parent of its
    /// `clusters/`, by [`super::clusters_root_len`]; the directory itself otherwise).
    fn repo_root(&self, dir: &Path) -> PathBuf {
        lexical_root(dir)
    }

    /// `path` as a lock file names it: relative to the repository root `root`, `/`-separated.
    fn lock_path(&self, root: &Path, path: &Path) -> String {
        slashed(path.strip_prefix(root).unwrap_or(path))
    }
}

/// [`Tree::read`] as UTF-8 text.
pub fn read_text(
    tree: &dyn Tree,
    path: &Path,
    kind: InputKind,
) -> Result<Option<String>, InputError> {
    let Some(blob) = tree.read(path, kind)? else {
        return Ok(None);
    };
    // A disk read is the only holder of its bytes: no copy then.
    let bytes = Arc::try_unwrap(blob).unwrap_or_else(|shared| shared.as_ref().clone());
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| InputError::Yaml {
            file: tree.label(path),
            message: "not UTF-8 text".into(),
        })
}

/// The repository root of a cluster directory named by a tree path (`clusters/a` → `""`).
pub fn tree_root(dir: &str) -> String {
    slashed(&lexical_root(Path::new(dir)))
}

/// The repository root of a cluster directory by its spelling alone.
pub(super) fn lexical_root(dir: &Path) -> PathBuf {
    super::root::under_clusters(dir).unwrap_or_else(|| dir.to_path_buf())
}

/// A path's components joined with `/` (a tree path, a lock path).
pub fn slashed(p: &Path) -> String {
    let s: Vec<String> = p
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    s.join("/")
}

/// The disk, confined to one directory (a repository root, or a templates directory named
/// on the command line): every directory read from or listed must resolve inside it
/// (checked once per directory), and a file that is a symbolic link must too. Paths are
/// disk paths as typed. (Between the check and the open a directory could be swapped for a
/// link; closing that window takes `openat2(RESOLVE_BENEATH)`, not done yet.)
#[derive(Debug)]
pub struct DiskTree {
    /// The directory as typed (for messages and the repository root).
    root: PathBuf,
    /// Its canonical form: the fence.
    fence: PathBuf,
    /// Directories already found inside the fence.
    confined: Mutex<HashSet<PathBuf>>,
}

impl DiskTree {
    /// The disk below `root` (which must exist).
    pub fn new(root: &Path) -> Result<DiskTree, InputError> {
        Ok(DiskTree {
            root: root.to_path_buf(),
            fence: super::canonical_dir(root)?,
            confined: Mutex::new(HashSet::new()),
        })
    }

    /// The disk below the repository root of the cluster directory `dir`
    /// ([`super::repo_root`]), with `dir` confined to it; outside a `--repo-root`, the
    /// message names the flag.
    pub fn for_cluster(dir: &Path) -> Result<DiskTree, InputError> {
        let tree = DiskTree::new(&super::repo_root(dir))?;
        tree.confine(dir)?;
        Ok(tree)
    }

    /// The directory it is confined to, as typed.
    #[cfg(any(test, feature = "testkit"))]
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn confine_dir(&self, dir: &Path) -> Result<(), InputError> {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if self.confined.lock().is_ok_and(|c| c.contains(dir)) {
            return Ok(());
        }
        let outside = super::confine(dir, &self.fence);
        match (outside, super::given_repo_root()) {
            (Err(InputError::Outside { path, .. }), Some((abs, typed))) if abs == self.root => {
                Err(InputError::OutsideRepoRoot {
                    dir: path,
                    root: typed.to_string(),
                })
            }
            (Err(e), _) => Err(e),
            (Ok(()), _) => {
                if let Ok(mut c) = self.confined.lock() {
                    c.insert(dir.to_path_buf());
                }
                Ok(())
            }
        }
    }
}

/// Whether an error says nothing is there (a missing file or directory).
pub(super) fn is_absent(e: &InputError) -> bool {
    matches!(e, InputError::Io { error, .. }
        if matches!(error.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory))
}

impl Tree for DiskTree {
    fn read(&self, path: &Path, kind: InputKind) -> Result<Option<Blob>, InputError> {
        if let Some(parent) = path.parent() {
            match self.confine_dir(parent) {
                Err(e) if is_absent(&e) => return Ok(None),
                r => r?,
            }
        }
        match super::read_input_bytes(path, Some(&self.fence), kind) {
            Ok(bytes) => Ok(Some(Arc::new(bytes))),
            Err(e) if is_absent(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn list(&self, path: &Path) -> Result<Option<Vec<Child>>, InputError> {
        let listing = match std::fs::read_dir(path) {
            Ok(listing) => listing,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                return Ok(None)
            }
            Err(_) if !path.is_dir() => return Ok(None),
            Err(e) => return Err(super::io(path)(e)),
        };
        self.confine_dir(path)?;
        let mut out = Vec::new();
        for entry in listing {
            let entry = entry.map_err(super::io(path))?;
            // The entry's type needs no extra system call; a link is not followed.
            let dir = match entry.file_type() {
                Ok(t) if t.is_symlink() => false,
                Ok(t) => t.is_dir(),
                Err(_) => entry.path().is_dir(),
            };
            out.push(Child {
                name: entry.file_name().to_string_lossy().into_owned(),
                dir,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Some(out))
    }

    fn exists(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(path).is_ok()
    }

    fn confine(&self, dir: &Path) -> Result<(), InputError> {
        self.confine_dir(dir)
    }

    fn label(&self, path: &Path) -> String {
        path.label()
    }

    fn repo_root(&self, dir: &Path) -> PathBuf {
        super::repo_root(dir)
    }

    fn lock_path(&self, root: &Path, path: &Path) -> String {
        super::rel(root, path)
    }
}

/// Files held in memory, for tests that read as "these files, then exactly this output":
/// no temporary directory, no links, every path as given (`/`-separated, relative).
///
/// ```
/// use capstan::inputs::{cluster, MemoryTree};
/// use std::path::{Path, PathBuf};
///
/// let tree = MemoryTree::new([
///     ("clusters/b/cluster.yaml", "metadata: {name: b}\n"),
///     ("clusters/a/cluster.yaml", "metadata: {name: a}\n"),
///     ("overlays/x/overlay.yaml", "{}\n"),
/// ]);
/// let found = cluster::discover(&tree, Path::new(""))?;
/// assert_eq!(found, [PathBuf::from("clusters/a"), PathBuf::from("clusters/b")]);
/// let (name, file) = cluster::cluster_name(&tree, &found[1])?;
/// assert_eq!((name.as_deref(), file.as_str()), (Some("b"), "clusters/b/cluster.yaml"));
/// # Ok::<(), capstan::inputs::InputError>(())
/// ```
#[derive(Debug, Default, Clone)]
#[cfg(any(test, feature = "testkit"))]
pub struct MemoryTree {
    files: BTreeMap<PathBuf, Blob>,
}

#[cfg(any(test, feature = "testkit"))]
impl MemoryTree {
    /// A tree of the given `(path, content)` files.
    #[cfg(any(test, feature = "testkit"))]
    pub fn new<P: AsRef<Path>, B: AsRef<[u8]>>(files: impl IntoIterator<Item = (P, B)>) -> Self {
        MemoryTree {
            files: files
                .into_iter()
                .map(|(p, b)| (p.as_ref().to_path_buf(), Arc::new(b.as_ref().to_vec())))
                .collect(),
        }
    }

    /// Add or replace one file.
    #[cfg(any(test, feature = "testkit"))]
    pub fn insert(&mut self, path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) {
        self.files.insert(
            path.as_ref().to_path_buf(),
            Arc::new(bytes.as_ref().to_vec()),
        );
    }

    #[cfg(any(test, feature = "testkit"))]
    fn children(&self, dir: &Path) -> Vec<Child> {
        let mut out: Vec<Child> = Vec::new();
        for p in self.files.keys() {
            let Ok(rest) = p.strip_prefix(dir) else {
                continue;
            };
            let mut parts = rest.components();
            let Some(first) = parts.next() else {
                continue;
            };
            let name = first.as_os_str().to_string_lossy().into_owned();
            let dir = parts.next().is_some();
            if !out.iter().any(|c| c.name == name) {
                out.push(Child { name, dir });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

#[cfg(any(test, feature = "testkit"))]
impl Tree for MemoryTree {
    fn read(&self, path: &Path, kind: InputKind) -> Result<Option<Blob>, InputError> {
        match self.files.get(path) {
            None if !self.children(path).is_empty() => Err(InputError::NotRegular {
                path: self.label(path),
                found: "a directory",
            }),
            None => Ok(None),
            Some(b) if b.len() as u64 > kind.cap() => Err(InputError::TooLarge {
                path: self.label(path),
                cap: kind.cap(),
                what: kind.what(),
                raise: kind.raise(),
            }),
            Some(b) => Ok(Some(b.clone())),
        }
    }

    fn list(&self, path: &Path) -> Result<Option<Vec<Child>>, InputError> {
        let c = self.children(path);
        Ok((!c.is_empty()).then_some(c))
    }

    fn exists(&self, path: &Path) -> bool {
        self.files.contains_key(path) || !self.children(path).is_empty()
    }

    fn confine(&self, _dir: &Path) -> Result<(), InputError> {
        Ok(())
    }

    fn label(&self, path: &Path) -> String {
        path.label()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_lists_reads_and_refuses_a_directory_as_a_file() {
        let t = MemoryTree::new([("a/b.yaml", "x"), ("a/c/d.yaml", "y"), ("e", "z")]);
        let names: Vec<(String, bool)> = t
            .list(Path::new("a"))
            .unwrap()
            .unwrap()
            .into_iter()
            .map(|c| (c.name, c.dir))
            .collect();
        assert_eq!(names, [("b.yaml".into(), false), ("c".into(), true)]);
        assert_eq!(t.list(Path::new("nothing")).unwrap(), None);
        assert_eq!(
            read_text(&t, Path::new("a/b.yaml"), InputKind::Overlay)
                .unwrap()
                .as_deref(),
            Some("x")
        );
        assert!(matches!(
            t.read(Path::new("a/c"), InputKind::Overlay),
            Err(InputError::NotRegular { .. })
        ));
        assert!(t.exists(Path::new("a/c")) && !t.exists(Path::new("a/x")));
    }

    #[test]
    fn disk_refuses_a_directory_link_out_of_its_root() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("f.yaml"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), tmp.path().join("out")).unwrap();
        std::fs::write(tmp.path().join("in.yaml"), "y").unwrap();
        let t = DiskTree::new(tmp.path()).unwrap();
        assert!(t
            .read(&tmp.path().join("in.yaml"), InputKind::Overlay)
            .unwrap()
            .is_some());
        assert!(matches!(
            t.read(&tmp.path().join("out/f.yaml"), InputKind::Overlay),
            Err(InputError::Outside { .. })
        ));
        assert!(matches!(
            t.list(&tmp.path().join("out")),
            Err(InputError::Outside { .. })
        ));
        assert_eq!(
            t.read(&tmp.path().join("absent.yaml"), InputKind::Overlay)
                .unwrap(),
            None
        );
    }
}
