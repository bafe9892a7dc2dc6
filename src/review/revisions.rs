//! The two sides of `capstan diff --git REV_A..REV_B`: the revisions' trees read from git
//! (nothing checked out), the clusters whose inputs differ between them, and only those
//! clusters rendered, on both sides. A cluster's inputs are its directory, the overlays it
//! uses (every file they read) and its repository's `templates/`; a change anywhere else
//! is used by no cluster. The rest are counted as skipped, with the reason.

use crate::inputs::git::{self, Revision};
use crate::inputs::{self, InputError};
use crate::render::pipeline::{self, PipelineError};
use crate::review::diff::{ClusterSet, ResourceSet, Scope};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Why the sides could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RevisionsError {
    /// Reading the revisions or the working tree.
    #[error(transparent)]
    Input(#[from] InputError),
    /// Rendering a cluster.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// The range or the path.
    #[error("--git: {0}")]
    Usage(String),
}

/// The two rendered sides, their labels, and what was rendered and why.
#[derive(Debug)]
pub struct Sides {
    /// Side A (the older revision).
    pub a: ResourceSet,
    /// Side B (the newer revision, or the working tree).
    pub b: ResourceSet,
    /// Side A's label.
    pub label_a: String,
    /// Side B's label.
    pub label_b: String,
    /// What was rendered.
    pub scope: Scope,
    /// Cluster name → the changed input paths that made it render.
    pub inputs: BTreeMap<String, Vec<String>>,
}

/// Side B: a revision, or the working tree.
enum Newer {
    Revision(Box<Revision>),
    Worktree,
}

/// Split `REV_A..REV_B` (`REV_A..` is `REV_A..HEAD`; `REV_A` alone compares with the
/// working tree).
fn split_range(range: &str) -> Result<(&str, Option<&str>), RevisionsError> {
    let (a, b) = match range.split_once("..") {
        Some((a, b)) if !b.starts_with('.') => (a, Some(if b.is_empty() { "HEAD" } else { b })),
        Some(_) => {
            return Err(RevisionsError::Usage(format!(
                "use `REV_A..REV_B` (two dots), not `{range}`"
            )))
        }
        None => (range, None),
    };
    if a.is_empty() {
        return Err(RevisionsError::Usage(format!(
            "`{range}` names no old revision"
        )));
    }
    Ok((a, b))
}

/// `path` relative to the work tree's top, `/`-separated (`""` for the top itself).
fn tree_path(top: &Path, path: &Path) -> Result<String, RevisionsError> {
    let canon = |p: &Path| {
        std::fs::canonicalize(p).map_err(|error| InputError::Io {
            path: p.display().to_string(),
            error,
        })
    };
    let rel = canon(path)?;
    let rel = rel.strip_prefix(canon(top)?).map_err(|_| {
        RevisionsError::Usage(format!(
            "{} is not inside {}",
            path.display(),
            top.display()
        ))
    })?;
    Ok(rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/"))
}

/// The paths whose entries differ between two trees (added, removed or changed).
fn changed_between(a: &Revision, b: &Revision) -> Vec<String> {
    let (ea, eb) = (a.entries(), b.entries());
    let mut out: Vec<String> = ea
        .iter()
        .filter(|(p, e)| eb.get(*p) != Some(e))
        .map(|(p, _)| p.clone())
        .collect();
    out.extend(eb.keys().filter(|p| !ea.contains_key(*p)).cloned());
    out.sort();
    out
}

/// The cluster directory a path lies in, if any (the longest match).
fn owner<'a>(dirs: &'a BTreeSet<String>, path: &str) -> Option<&'a String> {
    dirs.iter()
        .filter(|d| d.is_empty() || path.starts_with(&format!("{d}/")))
        .max_by_key(|d| d.len())
}

/// Which clusters must render, with the changed paths that make them, and the changed
/// paths no cluster uses. `closure(dir)` lists every file a cluster's overlays read (tree
/// paths), or `None` when they cannot be read (the cluster then renders, to say why).
fn affected(
    dirs: &BTreeSet<String>,
    changed: &[String],
    templates_fixed: bool,
    mut closure: impl FnMut(&str) -> Option<BTreeSet<String>>,
) -> (BTreeMap<String, Vec<String>>, Vec<String>, Option<String>) {
    let mut hit: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut others = Vec::new();
    let mut reason = None;
    for p in changed {
        if let Some(d) = owner(dirs, p) {
            hit.entry(d.clone()).or_default().push(p.clone());
            continue;
        }
        let templates_of: Vec<&String> = dirs
            .iter()
            .filter(|d| {
                let root = git::repo_root(d);
                let t = if root.is_empty() {
                    "templates/".to_string()
                } else {
                    format!("{root}/templates/")
                };
                !templates_fixed && p.starts_with(&t)
            })
            .collect();
        if templates_of.is_empty() {
            others.push(p.clone());
            continue;
        }
        reason = Some(format!(
            "`{p}` changed: the templates are read by every cluster"
        ));
        for d in templates_of {
            hit.entry(d.clone()).or_default().push(p.clone());
        }
    }
    let mut used: BTreeSet<String> = BTreeSet::new();
    if !others.is_empty() {
        for d in dirs {
            match closure(d) {
                Some(files) => {
                    let mine: Vec<String> = others
                        .iter()
                        .filter(|p| files.contains(*p))
                        .cloned()
                        .collect();
                    if !mine.is_empty() {
                        used.extend(mine.iter().cloned());
                        hit.entry(d.clone()).or_default().extend(mine);
                    }
                }
                None => {
                    hit.entry(d.clone()).or_default();
                }
            }
        }
    }
    let unused = others.into_iter().filter(|p| !used.contains(p)).collect();
    for paths in hit.values_mut() {
        paths.sort();
        paths.dedup();
    }
    (hit, unused, reason)
}

/// The tree paths of the files a cluster's overlays read (`root` is its repository root).
fn overlay_files(root: &str, overlays: &inputs::LoadedOverlays) -> BTreeSet<String> {
    overlays
        .digests
        .iter()
        .map(|d| {
            if root.is_empty() {
                d.path.clone()
            } else {
                format!("{root}/{}", d.path)
            }
        })
        .collect()
}

type Rendered = (String, String, ClusterSet);

fn cluster_set(r: crate::render::Rendered) -> (String, ClusterSet) {
    let phase = Some(
        r.phase
            .map_or("(none)", crate::inputs::model::Phase::as_str)
            .to_string(),
    );
    (
        r.name,
        ClusterSet {
            resources: r.resources,
            phase,
            kubeadm_etcd_members: r.kubeadm_etcd_members,
        },
    )
}

/// Read, scope and render both sides of `--git range` for the repository path `path`.
pub fn sides(
    path: &Path,
    range: &str,
    templates: Option<&PathBuf>,
) -> Result<Sides, RevisionsError> {
    let (rev_a, rev_b) = split_range(range)?;
    let dir = if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent()
            .map(Path::to_path_buf)
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from("."))
    };
    let top = git::toplevel(&dir)?;
    let rel = tree_path(&top, path)?;
    let a = Revision::list(&top, rev_a)?;
    let newer = match rev_b {
        Some(r) => Newer::Revision(Box::new(Revision::list(&top, r)?)),
        None => Newer::Worktree,
    };
    let changed = match &newer {
        Newer::Revision(b) => changed_between(&a, b),
        Newer::Worktree => git::worktree_changes(&top, &a.commit)?,
    };
    let dirs_a = git::discover(&a, &rel)?;
    // Working-tree clusters as tree paths, and the paths to read them by.
    let (dirs_b, disk_of): (Vec<String>, BTreeMap<String, PathBuf>) = match &newer {
        Newer::Revision(b) => (git::discover(b, &rel)?, BTreeMap::new()),
        Newer::Worktree => {
            let found = inputs::discover(path)?;
            let mut dirs = Vec::new();
            let mut disk = BTreeMap::new();
            for d in found {
                let suffix = d
                    .strip_prefix(path)
                    .ok()
                    .map(|s| {
                        s.components()
                            .map(|c| c.as_os_str().to_string_lossy().into_owned())
                            .collect::<Vec<_>>()
                            .join("/")
                    })
                    .unwrap_or_default();
                let t = match (rel.is_empty(), suffix.is_empty()) {
                    (_, true) => rel.clone(),
                    (true, false) => suffix,
                    (false, false) => format!("{rel}/{suffix}"),
                };
                disk.insert(t.clone(), d);
                dirs.push(t);
            }
            (dirs, disk)
        }
    };
    let all: BTreeSet<String> = dirs_a.iter().chain(dirs_b.iter()).cloned().collect();
    let cache_a = inputs::OverlayCache::default();
    let cache_b = inputs::OverlayCache::default();
    let (hit, unused, reason) = affected(&all, &changed, templates.is_some(), |d| {
        let root = git::repo_root(d);
        let mut files = BTreeSet::new();
        if dirs_a.contains(&d.to_string()) {
            let c = git::load_cluster(&a, d).ok()?;
            files.extend(overlay_files(
                &root,
                &git::load_overlays(&a, &c, &cache_a).ok()?,
            ));
        }
        if dirs_b.contains(&d.to_string()) {
            let overlays = match &newer {
                Newer::Revision(b) => {
                    let c = git::load_cluster(b, d).ok()?;
                    git::load_overlays(b, &c, &cache_b).ok()?
                }
                Newer::Worktree => {
                    let c = inputs::load_cluster_with(disk_of.get(d)?, inputs::Digests::NotWanted)
                        .ok()?;
                    inputs::load_overlays(&c, &cache_b).ok()?
                }
            };
            files.extend(overlay_files(&root, &overlays));
        }
        Some(files)
    });
    let render_a: Vec<String> = dirs_a
        .iter()
        .filter(|d| hit.contains_key(*d))
        .cloned()
        .collect();
    let render_b: Vec<String> = dirs_b
        .iter()
        .filter(|d| hit.contains_key(*d))
        .cloned()
        .collect();
    let keep = |d: &str, r: crate::render::Rendered| -> Result<Rendered, PipelineError> {
        let (name, set) = cluster_set(r);
        Ok((d.to_string(), name, set))
    };
    let side_a: Vec<Rendered> = pipeline::render_revision(&a, &render_a, templates, keep)?;
    let side_b: Vec<Rendered> = match &newer {
        Newer::Revision(b) => pipeline::render_revision(b, &render_b, templates, keep)?,
        Newer::Worktree => {
            let disk: Vec<PathBuf> = render_b
                .iter()
                .filter_map(|d| disk_of.get(d).cloned())
                .collect();
            let back: BTreeMap<PathBuf, String> = disk_of
                .iter()
                .map(|(t, p)| (p.clone(), t.clone()))
                .collect();
            let rendered = pipeline::render_each::<_, PipelineError>(
                &disk,
                templates,
                inputs::Digests::NotWanted,
                |r, _| Ok(cluster_set(r)),
            )?;
            // `render_each` keeps input order: zip the directories back on.
            disk.iter()
                .zip(rendered)
                .map(|(p, (name, set))| (back.get(p).cloned().unwrap_or_default(), name, set))
                .collect()
        }
    };
    let mut inputs_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut set_a = ResourceSet::default();
    let mut set_b = ResourceSet::default();
    for (set, side) in [(&mut set_a, side_a), (&mut set_b, side_b)] {
        for (dir, name, cluster) in side {
            let paths = inputs_of.entry(name.clone()).or_default();
            paths.extend(hit.get(&dir).into_iter().flatten().cloned());
            paths.sort();
            paths.dedup();
            set.clusters.insert(name, cluster);
        }
    }
    let scope = Scope {
        clusters: all.len(),
        rendered: hit.len(),
        skipped: all.len().saturating_sub(hit.len()),
        everything: reason,
        unused,
    };
    Ok(Sides {
        a: set_a,
        b: set_b,
        label_a: rev_a.to_string(),
        label_b: match rev_b {
            Some(r) => r.to_string(),
            None => format!("{} (working tree)", path.display()),
        },
        scope,
        inputs: inputs_of,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_change_renders_the_clusters_that_read_it() {
        let dirs = set(&["clusters/a", "clusters/b", "clusters/c"]);
        let changed: Vec<String> = [
            "README.md",
            "clusters/a/cluster.yaml",
            "overlays/x/patch.yaml",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let (hit, unused, reason) = affected(&dirs, &changed, false, |d| {
            Some(if d == "clusters/b" {
                set(&["overlays/x/overlay.yaml", "overlays/x/patch.yaml"])
            } else {
                BTreeSet::new()
            })
        });
        assert_eq!(hit.len(), 2);
        assert_eq!(hit["clusters/a"], ["clusters/a/cluster.yaml"]);
        assert_eq!(hit["clusters/b"], ["overlays/x/patch.yaml"]);
        assert_eq!(unused, ["README.md"]);
        assert!(reason.is_none());
        // Templates: every cluster, unless the templates come from a fixed directory.
        let t = vec!["templates/v1beta1/cluster.yaml".to_string()];
        let (hit, _, reason) = affected(&dirs, &t, false, |_| Some(BTreeSet::new()));
        assert_eq!(hit.len(), 3);
        assert!(reason.unwrap().contains("every cluster"));
        let (hit, unused, _) = affected(&dirs, &t, true, |_| Some(BTreeSet::new()));
        assert!(hit.is_empty());
        assert_eq!(unused, t);
        // A cluster whose overlays cannot be read renders (to say why).
        let (hit, _, _) = affected(&dirs, &["x".to_string()], false, |d| {
            (d != "clusters/c").then(BTreeSet::new)
        });
        assert_eq!(hit.keys().collect::<Vec<_>>(), ["clusters/c"]);
        // Only cluster files changed: no overlay is read at all.
        let (hit, _, _) = affected(&dirs, &["clusters/b/secrets/x.yaml".into()], false, |_| {
            panic!("no closure needed")
        });
        assert_eq!(hit.len(), 1);
    }

    #[test]
    fn ranges() {
        assert_eq!(split_range("main..HEAD").unwrap(), ("main", Some("HEAD")));
        assert_eq!(split_range("main..").unwrap(), ("main", Some("HEAD")));
        assert_eq!(split_range("main").unwrap(), ("main", None));
        assert!(split_range("a...b").is_err());
        assert!(split_range("..b").is_err());
    }
}
