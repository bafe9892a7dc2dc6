//! Where a cluster directory's repository root is: `--repo-root` when given, else the parent
//! of the `clusters/` directory it sits in, found as typed or from where it is on disk.

use std::path::{Path, PathBuf};

use super::{canonical_dir, InputError};
use crate::printable::Label;

/// The repository root given with `--repo-root`, set once by the CLI before anything is
/// read ([`set_repo_root`]): absolute, and as typed (for messages); every cluster
/// directory is then read as part of it.
static REPO_ROOT: std::sync::OnceLock<(PathBuf, String)> = std::sync::OnceLock::new();

/// Take `root` as the repository root of every cluster directory read from now on
/// (`--repo-root`): it must be a directory. Set once per process; a second call is refused.
pub fn set_repo_root(root: &Path) -> Result<(), InputError> {
    let meta = std::fs::metadata(root).map_err(|error| InputError::Io {
        path: format!("--repo-root {}", root.label()),
        error,
    })?;
    if !meta.is_dir() {
        return Err(InputError::NotADirectory {
            path: format!("--repo-root {}", root.label()),
            what: "the repository root, the directory holding `clusters/`,",
        });
    }
    // Absolute (links kept, as typed): `argocd generate` changes the working directory.
    let abs = std::path::absolute(root).map_err(|error| InputError::Io {
        path: format!("--repo-root {}", root.label()),
        error,
    })?;
    REPO_ROOT
        .set((abs, root.label()))
        .map_err(|_| InputError::NotADirectory {
            path: format!("--repo-root {}", root.label()),
            what: "given once per run: the repository root",
        })
}

/// The rule every tree shares (the disk's [`repo_root`], and
/// [`super::Tree::repo_root`] by default): of a cluster directory's path components, how many name its
/// repository root: those before a `clusters` that is the cluster directory's parent.
/// `None` when its parent is not `clusters` (a flat repository: the directory is its own root).
pub fn clusters_root_len<S: AsRef<std::ffi::OsStr>>(parts: &[S]) -> Option<usize> {
    let n = parts.len();
    (n >= 2 && parts[n - 2].as_ref() == "clusters").then(|| n - 2)
}

/// The repository root of a cluster directory by its spelling ([`clusters_root_len`]):
/// `None` when its parent is not `clusters`.
pub(super) fn under_clusters(dir: &Path) -> Option<PathBuf> {
    let parts: Vec<std::path::Component> = dir.components().collect();
    let n = clusters_root_len(&parts)?;
    Some(parts[..n].iter().collect())
}

/// The root given with `--repo-root` ([`set_repo_root`]), when one was: absolute, and as
/// typed (for messages).
pub fn given_repo_root() -> Option<(&'static Path, &'static str)> {
    REPO_ROOT
        .get()
        .map(|(abs, typed)| (abs.as_path(), typed.as_str()))
}

/// The repository root of a cluster directory: `--repo-root` when given
/// ([`set_repo_root`]), else the parent of its `clusters/` directory, found as typed
/// (`clusters/prod-a`) or, when the path does not show it (`.` inside the cluster, `prod-a`
/// inside `clusters/`, `..` from a directory inside the cluster), from where it is on disk,
/// as kustomize and git resolve where they stand: the absolute path for a path without
/// `..`, the canonical one for a path with `..` (which the kernel resolves through links).
/// A directory under no `clusters/` is its own root (a flat repository).
pub fn repo_root(cluster_dir: &Path) -> PathBuf {
    if let Some((root, _)) = given_repo_root() {
        return root.to_path_buf();
    }
    if let Some(root) = under_clusters(cluster_dir) {
        return root;
    }
    let has_parent_dir = cluster_dir
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir));
    let located = if has_parent_dir {
        std::fs::canonicalize(cluster_dir).ok()
    } else {
        std::path::absolute(cluster_dir).ok().map(|abs| {
            abs.components()
                .filter(|c| !matches!(c, std::path::Component::CurDir))
                .collect()
        })
    };
    located
        .and_then(|abs| under_clusters(&abs))
        .unwrap_or_else(|| cluster_dir.to_path_buf())
}

/// `path` relative to `root`, `/`-separated: lexically when `path` is spelled under `root`,
/// else from where both are (absolute, then canonical), so that a lock file does not depend
/// on how the cluster directory was typed (`.` inside it, `..` below it, `--repo-root`).
pub(super) fn rel(root: &Path, path: &Path) -> String {
    // `..` is resolved by the kernel through links, so a path with `..` is located by the
    // canonical form, never lexically.
    let absolute = |p: &Path| -> Option<PathBuf> {
        if p.components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return None;
        }
        Some(
            std::path::absolute(p)
                .ok()?
                .components()
                .filter(|c| !matches!(c, std::path::Component::CurDir))
                .collect(),
        )
    };
    // The file's directory resolved, not the file: a linked file keeps its own name.
    let canonical = |p: &Path| -> Option<PathBuf> {
        match (p.parent(), p.file_name()) {
            (Some(d), Some(f)) => Some(canonical_dir(d).ok()?.join(f)),
            _ => std::fs::canonicalize(p).ok(),
        }
    };
    let below = |p: Option<PathBuf>, r: Option<PathBuf>| -> Option<PathBuf> {
        Some(p?.strip_prefix(r?).ok()?.to_path_buf())
    };
    let r = path
        .strip_prefix(root)
        .ok()
        .map(Path::to_path_buf)
        .or_else(|| below(absolute(path), absolute(root)))
        .or_else(|| below(canonical(path), canonical_dir(root).ok()))
        .unwrap_or_else(|| path.to_path_buf());
    super::tree::slashed(&r)
}
