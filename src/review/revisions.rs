//! The two sides of `capstan diff --git REV_A..REV_B`: the revisions' trees read from git
//! (nothing checked out), the clusters whose inputs differ between them, and only those
//! clusters rendered, on both sides. A cluster's inputs are its directory, the overlays it
//! uses (every file they read) and its repository's `templates/`; a change anywhere else
//! is used by no cluster. The rest are counted as skipped, with the reason.

use crate::inputs::cluster;
use crate::inputs::git::{self, Revision};
use crate::inputs::{self, InputError};
use crate::pipeline::{self, PipelineError, Source};
use crate::review::diff::{self, ClusterSet, Diff, ResourceSet, Scope};
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

/// Clusters compared in one batch (both sides' objects are held for one batch at a time).
const BATCH: usize = 64;

/// What [`review`] compares with, and what it keeps.
#[derive(Default)]
pub struct ReviewOptions<'a> {
    /// age identities: side B's MACs verified, certificates decoded (and, with
    /// [`diff::SealedValues::Compared`], sealed plaintexts compared).
    pub identities: Option<&'a [age::x25519::Identity]>,
    /// How sealed values whose ciphertext changed are compared.
    pub sealed: diff::SealedValues,
    /// Only these clusters (all when empty).
    pub clusters: Vec<String>,
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

/// How side B is named in messages.
fn label_of(newer: &Newer, path: &Path) -> String {
    match newer {
        Newer::Revision(b) => b.name.clone(),
        Newer::Worktree => format!("{} (working tree)", path.display()),
    }
}

/// Add to `changed` every link (`(link, resolved target)`) whose target changed, and the
/// links to those, until nothing is added (a chain is at most as long as the links).
fn through_links(changed: &mut Vec<String>, links: &[(String, String)]) {
    let mut set: BTreeSet<String> = changed.iter().cloned().collect();
    for _ in 0..=links.len().min(64) {
        let before = set.len();
        for (link, target) in links {
            let hit = set.iter().any(|p| at_or_under(p, target));
            if hit {
                set.insert(link.clone());
            }
        }
        if set.len() == before {
            break;
        }
    }
    *changed = set.into_iter().collect();
}

/// `files` (tree paths as read) with, for each one a link leads through, the link itself
/// and the path it reads (an overlay directory that is a link reads its target's files).
fn through_link_targets(
    mut files: BTreeSet<String>,
    links: &[(String, String)],
) -> BTreeSet<String> {
    let mut more = Vec::new();
    for (link, target) in links {
        for f in files.iter().filter(|f| at_or_under(f, link)) {
            more.push(link.clone());
            more.push(git::join_tree(
                target,
                f[link.len()..].trim_start_matches('/'),
            ));
        }
    }
    files.extend(more);
    files
}

/// The cluster directory a path lies in, if any (the longest match; a cluster directory
/// that is a link is its own path).
fn owner<'a>(dirs: &'a BTreeSet<String>, path: &str) -> Option<&'a String> {
    dirs.iter()
        .filter(|d| cluster::reads(d, path, true) == Some(cluster::Read::Own))
        .max_by_key(|d| d.len())
}

/// Whether `path` is `target` or lies under it (a link's target may be a directory).
fn at_or_under(path: &str, target: &str) -> bool {
    path == target
        || path
            .strip_prefix(target)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Which clusters must render, with the changed paths that make them, and the changed
/// paths no cluster uses. `closure(dir)` lists every file a cluster's overlays read (tree
/// paths), or `None` when they cannot be read (the cluster then renders, to say why).
fn affected(
    dirs: &BTreeSet<String>,
    changed: &[String],
    templates_fixed: bool,
    closure: impl Fn(&str) -> Option<BTreeSet<String>> + Sync,
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
            .filter(|d| cluster::reads(d, p, templates_fixed) == Some(cluster::Read::Templates))
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
        // Every cluster's overlays are resolved (on every core) to see who reads what.
        let dirs: Vec<&String> = dirs.iter().collect();
        let closures = diff::map_on_every_core(&dirs, |d| closure(d));
        for (d, files) in dirs.into_iter().zip(closures) {
            match files {
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

/// The name each of `dirs` declares (`read(dir)`: the name and the file that declares it,
/// read on every core), refusing a name two of them declare, as a render of the whole side
/// does ([`InputError::DuplicateName`], the first in `dirs`' order named first). A directory
/// whose `cluster.yaml` cannot be read, or names nothing, is left out: rendering it says why.
fn unique_names(
    dirs: &[String],
    read: impl Fn(&str) -> Result<(Option<String>, String), InputError> + Sync,
) -> Result<BTreeMap<String, String>, InputError> {
    let read = diff::map_on_every_core(dirs, |d| read(d));
    let mut files: std::collections::HashMap<String, String> =
        std::collections::HashMap::with_capacity(dirs.len());
    let mut out = BTreeMap::new();
    for (d, r) in dirs.iter().zip(read) {
        let Ok((Some(name), file)) = r else {
            continue;
        };
        if let Some(first) = files.get(&name) {
            return Err(InputError::DuplicateName {
                name,
                first: first.clone(),
                second: file,
            });
        }
        files.insert(name.clone(), file);
        out.insert(d.clone(), name);
    }
    Ok(out)
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

/// The clusters of a revision under the tree path `dir` ([`cluster::discover`]), as tree paths.
fn discover(rev: &Revision, dir: &str) -> Result<Vec<String>, InputError> {
    Ok(cluster::discover(rev, Path::new(dir))?
        .into_iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect())
}

/// A cluster directory of a revision without `secrets.age` and the sealed files: what is
/// needed to resolve its overlays.
fn config(rev: &Revision, dir: &str) -> Result<inputs::ClusterInput, InputError> {
    let how = cluster::Load {
        digests: inputs::Digests::NotWanted,
        secrets: false,
        like: None,
    };
    cluster::load(rev, Path::new(dir), how)
}

fn cluster_set(r: crate::pipeline::render::Rendered) -> (String, ClusterSet) {
    let phase = Some(
        r.phase
            .map_or("(none)", crate::model::Phase::as_str)
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

/// The working tree's clusters under `path` (the tree path `rel`), as tree paths, and the
/// disk paths to read them by.
fn worktree_dirs(
    path: &Path,
    rel: &str,
) -> Result<(Vec<String>, BTreeMap<String, PathBuf>), RevisionsError> {
    let mut dirs = Vec::new();
    let mut disk = BTreeMap::new();
    for d in inputs::discover(path)? {
        let suffix = d
            .strip_prefix(path)
            .map(inputs::tree::slashed)
            .unwrap_or_default();
        let t = git::join_tree(rel, &suffix);
        disk.insert(t.clone(), d);
        dirs.push(t);
    }
    Ok((dirs, disk))
}

/// The clusters to render on each side, in batches of whole names (at most [`BATCH`] a
/// side, a cluster whose directory moved compared with itself), by the names `name_of`
/// (side, directory) finds; `names` are those met while resolving overlays.
fn batches(
    render_a: &[String],
    render_b: &[String],
    names: &BTreeMap<(usize, String), String>,
    name_of: impl Fn(usize, &str) -> Option<String>,
) -> Vec<(Vec<String>, Vec<String>)> {
    let mut by_name: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
    // Clusters whose `cluster.yaml` does not load go last: rendering them says why.
    let mut unreadable: (Vec<String>, Vec<String>) = Default::default();
    for d in render_a {
        match name_of(0, d) {
            Some(n) => by_name.entry(n).or_default().0.push(d.clone()),
            None => unreadable.0.push(d.clone()),
        }
    }
    for d in render_b {
        match name_of(1, d) {
            Some(n) => by_name.entry(n).or_default().1.push(d.clone()),
            None => unreadable.1.push(d.clone()),
        }
    }
    // A name side A renders but side B declares in a directory that did not change (side
    // A declared it twice, and the change removed one copy): side B's cluster renders too,
    // so the name is compared, not reported removed.
    let declared_b: BTreeMap<&String, &String> = names
        .iter()
        .filter(|((side, _), _)| *side == 1)
        .map(|((_, d), n)| (n, d))
        .collect();
    for (n, (da, db)) in by_name.iter_mut() {
        if db.is_empty() && !da.is_empty() {
            if let Some(d) = declared_b.get(n) {
                db.push((*d).clone());
            }
        }
    }
    let mut batches: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    for (da, db) in by_name.into_values() {
        match batches.last_mut() {
            Some(last) if last.0.len().max(last.1.len()) < BATCH => {
                last.0.extend(da);
                last.1.extend(db);
            }
            _ => batches.push((da, db)),
        }
    }
    if !unreadable.0.is_empty() || !unreadable.1.is_empty() {
        batches.push(unreadable);
    }
    batches
}

/// What a batch is rendered from: side A's revision, side B's (`None`: the working tree,
/// whose clusters are read from disk by `disk_of`), and the render options.
struct Sides<'a> {
    a: &'a Revision,
    b: Option<&'a Revision>,
    disk_of: &'a BTreeMap<String, PathBuf>,
    opts: pipeline::Options<'a>,
}

/// One rendered cluster as a review keeps it: its directory, name and objects.
fn keep(
    d: &Path,
    r: crate::pipeline::render::Rendered,
    _: Vec<inputs::Digest256>,
) -> Result<Rendered, PipelineError> {
    let (name, set) = cluster_set(r);
    Ok((d.to_string_lossy().into_owned(), name, set))
}

fn paths(dirs: &[String]) -> Vec<PathBuf> {
    dirs.iter().map(PathBuf::from).collect()
}

/// The clusters of one batch rendered on each side: `shared` (their own files the same on
/// both revisions) with their templates rendered once, the others on their side alone.
fn render_batch(
    sides: &Sides<'_>,
    sessions: (&mut pipeline::Session, &mut pipeline::Session),
    (da, db): (&[String], &[String]),
    shared: &[String],
) -> Result<(Vec<Rendered>, Vec<Rendered>), RevisionsError> {
    let (session_a, session_b) = sessions;
    let only = |dirs: &[String]| -> Vec<String> {
        dirs.iter()
            .filter(|d| !shared.contains(d))
            .cloned()
            .collect()
    };
    let mut side_a: Vec<Rendered> = pipeline::render(
        session_a,
        Source::Tree(sides.a),
        &paths(&only(da)),
        &sides.opts,
        keep,
    )?;
    let side_b: Vec<Rendered> = match sides.b {
        Some(b) => {
            b.prefetch_under(db)?;
            let mut side_b = pipeline::render(
                session_b,
                Source::Tree(b),
                &paths(&only(db)),
                &sides.opts,
                keep,
            )?;
            let pairs = pipeline::render_pair(
                (&mut *session_a, &mut *session_b),
                (Source::Tree(sides.a), Source::Tree(b)),
                &paths(shared),
                &sides.opts,
                keep,
            )?;
            for (ra, rb) in pairs {
                side_a.push(ra);
                side_b.push(rb);
            }
            side_b
        }
        None => {
            let disk: Vec<PathBuf> = db
                .iter()
                .filter_map(|d| sides.disk_of.get(d).cloned())
                .collect();
            let rendered = pipeline::render::<_, PipelineError>(
                session_b,
                Source::Disk,
                &disk,
                &sides.opts,
                |_, r, _| Ok(cluster_set(r)),
            )?;
            // `render` keeps input order: the directories zip back on.
            db.iter()
                .zip(rendered)
                .map(|(d, (name, set))| (d.clone(), name, set))
                .collect()
        }
    };
    Ok((side_a, side_b))
}

/// For each cluster name, the changed paths it reads.
type InputsOf = BTreeMap<String, Vec<String>>;

/// A batch's two sides as resource sets (each name once per side, across batches: `seen`),
/// and for each cluster name the changed paths it reads (`hit`, by directory).
fn resource_sets(
    sides: [Vec<Rendered>; 2],
    seen: &mut [BTreeMap<String, String>; 2],
    hit: &BTreeMap<String, Vec<String>>,
) -> Result<([ResourceSet; 2], InputsOf), RevisionsError> {
    let mut inputs_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut sets: [ResourceSet; 2] = Default::default();
    for (i, side) in sides.into_iter().enumerate() {
        for (dir, name, cluster) in side {
            if let Some(first) = seen[i].insert(name.clone(), dir.clone()) {
                return Err(PipelineError::from(InputError::DuplicateName {
                    name,
                    first: format!("{first}/{}", inputs::CLUSTER_FILE),
                    second: format!("{dir}/{}", inputs::CLUSTER_FILE),
                })
                .into());
            }
            let paths = inputs_of.entry(name.clone()).or_default();
            paths.extend(hit.get(&dir).into_iter().flatten().cloned());
            paths.sort();
            paths.dedup();
            sets[i].clusters.insert(name, cluster);
        }
    }
    Ok((sets, inputs_of))
}

/// `capstan diff --git range` for the repository path `path`: read both revisions, find
/// the clusters whose inputs changed, render those on both sides and compare them.
pub fn review(
    path: &Path,
    range: &str,
    templates: Option<&PathBuf>,
    opts: &ReviewOptions<'_>,
) -> Result<Diff, RevisionsError> {
    let (rev_a, rev_b) = split_range(range)?;
    let dir = if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent()
            .map(Path::to_path_buf)
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from("."))
    };
    let repo = git::Repository::discover(&dir)?;
    let rel = tree_path(repo.work_tree(), path)?;
    let change = Change::read(&repo, rev_a, rev_b)?;
    let fleet = Fleet::find(&change, path, &rel)?;
    let hit = Hit::find(&change, &fleet, templates.is_some());
    let label_b = label_of(&change.newer, path);
    let mut clusters = compare(&change, &fleet, &hit, templates, opts, (rev_a, &label_b))?;
    clusters.sort_by(|x, y| x.name.cmp(&y.name));
    let all = fleet.all.len();
    Ok(Diff {
        a: rev_a.to_string(),
        b: label_b,
        decrypted: opts.identities.is_some(),
        sealed: opts.sealed,
        clusters,
        scope: Some(Scope {
            clusters: all,
            rendered: hit.paths.len(),
            skipped: all.saturating_sub(hit.paths.len()),
            everything: hit.reason,
            unused: hit.unused,
        }),
    })
}

/// The `cluster.yaml` of each cluster directory, as tree paths (what a prefetch reads).
fn configs(dirs: &[String]) -> Vec<String> {
    dirs.iter()
        .map(|d| format!("{d}/{}", inputs::CLUSTER_FILE))
        .collect()
}

/// The two sides of a review and what changed between them.
struct Change {
    a: Revision,
    newer: Newer,
    /// Changed tree paths, a link's changed target reaching the link.
    changed: Vec<String>,
    /// Every link of both sides and its target.
    links: Vec<(String, String)>,
}

impl Change {
    fn read(
        repo: &git::Repository,
        rev_a: &str,
        rev_b: Option<&str>,
    ) -> Result<Change, RevisionsError> {
        let a = Revision::list(repo, rev_a)?;
        let newer = match rev_b {
            Some(r) => Newer::Revision(Box::new(Revision::list(repo, r)?)),
            None => Newer::Worktree,
        };
        let mut changed = match &newer {
            Newer::Revision(b) => changed_between(&a, b),
            Newer::Worktree => git::worktree_changes(repo, &a.commit)?,
        };
        // A symbolic link reads its target: a changed target changes the link.
        let mut links = a.links();
        if let Newer::Revision(b) = &newer {
            links.extend(b.links());
        }
        through_links(&mut changed, &links);
        Ok(Change {
            a,
            newer,
            changed,
            links,
        })
    }

    fn rev_b(&self) -> Option<&Revision> {
        match &self.newer {
            Newer::Revision(b) => Some(b.as_ref()),
            Newer::Worktree => None,
        }
    }
}

/// The clusters of both sides.
struct Fleet {
    dirs_a: Vec<String>,
    /// Side B's cluster directories as tree paths.
    dirs_b: Vec<String>,
    /// A working-tree side's directories on disk, by tree path.
    disk_of: BTreeMap<String, PathBuf>,
    /// Side B's cluster names, by directory.
    names_b: BTreeMap<String, String>,
    /// Both sides' directories.
    all: BTreeSet<String>,
}

impl Fleet {
    fn find(change: &Change, path: &Path, rel: &str) -> Result<Fleet, RevisionsError> {
        let (a, newer) = (&change.a, &change.newer);
        // A path that exists on one side only (a repository's first cluster, a directory the
        // change adds or removes) has no clusters on the other.
        let none_if_absent = |r: Result<Vec<String>, InputError>| match r {
            Err(InputError::NoClusters { .. }) => Ok(Vec::new()),
            Err(InputError::Io { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {
                Ok(Vec::new())
            }
            other => other,
        };
        let dirs_a = none_if_absent(discover(a, rel))?;
        // Working-tree clusters as tree paths, and the paths to read them by.
        let (dirs_b, disk_of): (Vec<String>, BTreeMap<String, PathBuf>) = match newer {
            Newer::Revision(b) => (none_if_absent(discover(b.as_ref(), rel))?, BTreeMap::new()),
            Newer::Worktree => worktree_dirs(path, rel)?,
        };
        // Side B must be a fleet `capstan render` accepts: no name declared twice, across every
        // cluster, not only those that render (a change adding a second `lab-f` touches only the
        // new directory). Only each `cluster.yaml` is read (in one exchange with git) and parsed.
        let names_b = match newer {
            Newer::Revision(b) => {
                b.prefetch(configs(&dirs_b).iter().map(String::as_str))?;
                unique_names(&dirs_b, |d| cluster::cluster_name(b.as_ref(), Path::new(d)))?
            }
            Newer::Worktree => unique_names(&dirs_b, |d| match disk_of.get(d) {
                Some(p) => inputs::cluster_name(p),
                None => Ok((None, d.to_string())),
            })?,
        };
        if dirs_a.is_empty() && dirs_b.is_empty() {
            return Err(InputError::NoClusters {
                dir: format!("{}:{rel} and {}", a.name, label_of(newer, path)),
            }
            .into());
        }
        let all = dirs_a.iter().chain(dirs_b.iter()).cloned().collect();
        Ok(Fleet {
            dirs_a,
            dirs_b,
            disk_of,
            names_b,
            all,
        })
    }
}

/// The clusters a change renders, and why.
struct Hit {
    /// Directory → the changed paths that make it render.
    paths: BTreeMap<String, Vec<String>>,
    /// Changed paths no cluster reads.
    unused: Vec<String>,
    /// Why every cluster renders, when one change reaches all.
    reason: Option<String>,
    /// Cluster names met while resolving overlays (side, directory → name).
    names: BTreeMap<(usize, String), String>,
}

impl Hit {
    fn find(change: &Change, fleet: &Fleet, templates_fixed: bool) -> Hit {
        let (a, newer) = (&change.a, &change.newer);
        let (changed, links) = (&change.changed, &change.links);
        let (dirs_a, dirs_b) = (&fleet.dirs_a, &fleet.dirs_b);
        let (disk_of, all) = (&fleet.disk_of, &fleet.all);
        let cache_a = inputs::OverlayCache::default();
        let cache_b = inputs::OverlayCache::default();
        let prefetched = std::sync::Once::new();
        // Cluster names met while resolving overlays (side, directory → name), for the batches.
        let names: std::sync::Mutex<BTreeMap<(usize, String), String>> =
            std::sync::Mutex::new(
                fleet.names_b.iter().map(|(d, n)| ((1, d.clone()), n.clone())).collect(),
            );
        let remember = |side: usize, d: &str, c: &inputs::ClusterInput| {
            if let Ok(mut m) = names.lock() {
                m.insert((side, d.to_string()), c.config.metadata.name.clone());
            }
        };
        let (mut hit, mut unused, reason) = affected(all, changed, templates_fixed, |d| {
            prefetched.call_once(|| {
                // Every cluster's `cluster.yaml` is about to be read: in one exchange each.
                let _ = a.prefetch(configs(dirs_a).iter().map(String::as_str));
                if let Newer::Revision(b) = newer {
                    let _ = b.prefetch(configs(dirs_b).iter().map(String::as_str));
                }
            });
            let root = inputs::tree::tree_root(d);
            let mut files = BTreeSet::new();
            if dirs_a.contains(&d.to_string()) {
                let c = config(a, d).ok()?;
                remember(0, d, &c);
                files.extend(overlay_files(
                    &root,
                    &inputs::load_overlays_in(a, &c, &cache_a).ok()?,
                ));
            }
            if dirs_b.contains(&d.to_string()) {
                let overlays = match newer {
                    Newer::Revision(b) => {
                        let c = config(b.as_ref(), d).ok()?;
                        remember(1, d, &c);
                        inputs::load_overlays_in(b.as_ref(), &c, &cache_b).ok()?
                    }
                    Newer::Worktree => {
                        let dir = disk_of.get(d)?;
                        let c = inputs::load_cluster_with(dir, inputs::Digests::NotWanted).ok()?;
                        remember(1, d, &c);
                        inputs::load_overlays(&c, &cache_b).ok()?
                    }
                };
                files.extend(overlay_files(&root, &overlays));
            }
            Some(through_link_targets(files, links))
        });
        // A changed link's target (a file, or the files of a directory) is one of the
        // cluster's inputs too, not an unused change.
        for (link, target) in links {
            if let Some(paths) = owner(all, link).and_then(|d| hit.get_mut(d)) {
                if paths.contains(link) {
                    let read: Vec<&String> =
                        changed.iter().filter(|p| at_or_under(p, target)).collect();
                    paths.extend(read.iter().map(|p| (*p).clone()));
                    paths.sort();
                    paths.dedup();
                    unused.retain(|u| !at_or_under(u, target));
                }
            }
        }
        Hit {
            paths: hit,
            unused,
            reason,
            names: names.into_inner().unwrap_or_default(),
        }
    }
}

/// Render the clusters `hit` names on both sides, a batch at a time, and compare them.
fn compare(
    change: &Change,
    fleet: &Fleet,
    hit: &Hit,
    templates: Option<&PathBuf>,
    opts: &ReviewOptions<'_>,
    (rev_a, label_b): (&str, &str),
) -> Result<Vec<diff::ClusterDiff>, RevisionsError> {
    let (a, rev_b) = (&change.a, change.rev_b());
    let (dirs_a, dirs_b, disk_of) = (&fleet.dirs_a, &fleet.dirs_b, &fleet.disk_of);
    let (names, hit_paths) = (&hit.names, &hit.paths);
    let render_a: Vec<String> = dirs_a
        .iter()
        .filter(|d| hit_paths.contains_key(*d))
        .cloned()
        .collect();
    let render_b: Vec<String> = dirs_b
        .iter()
        .filter(|d| hit_paths.contains_key(*d))
        .cloned()
        .collect();
    // Clusters are rendered and compared a few dozen at a time, so memory holds one batch
    // of objects (and of cluster files: each batch's blobs are forgotten when it is done),
    // not two whole fleets. A batch is made of whole names: a cluster whose
    // directory moved is compared with itself.
    let name_of = |side: usize, rev: Option<&Revision>, d: &str| -> Option<String> {
        if let Some(n) = names.get(&(side, d.to_string())) {
            return Some(n.clone());
        }
        let c = match rev {
            Some(rev) => config(rev, d).ok()?,
            None => inputs::load_cluster_with(disk_of.get(d)?, inputs::Digests::NotWanted).ok()?,
        };
        Some(c.config.metadata.name)
    };
    let _ = a.prefetch(configs(&render_a).iter().map(String::as_str));
    if let Some(b) = rev_b {
        let _ = b.prefetch(configs(&render_b).iter().map(String::as_str));
    }
    let batches = batches(&render_a, &render_b, names, |side, d| {
        name_of(side, if side == 0 { Some(a) } else { rev_b }, d)
    });
    let popts = pipeline::Options {
        templates: templates.map(PathBuf::as_path),
        digests: inputs::Digests::NotWanted,
    };
    let mut clusters = Vec::new();
    let mut seen: [BTreeMap<String, String>; 2] = Default::default();
    let mut pending: Vec<std::thread::JoinHandle<()>> = Vec::new();
    let (mut session_a, mut session_b) =
        (pipeline::Session::default(), pipeline::Session::default());
    // A cluster whose directory and templates are the same on both sides (only files
    // outside them changed: its overlays') renders its templates once for both.
    let same_inputs = |d: &str| -> bool {
        hit_paths.get(d).is_some_and(|paths| {
            !paths.is_empty()
                && paths
                    .iter()
                    .all(|p| cluster::reads(d, p, templates.is_some()).is_none())
        })
    };
    for (da, db) in batches {
        // Each batch's files from each revision in one exchange with git.
        a.prefetch_under(&da)?;
        let shared: Vec<String> = match rev_b {
            Some(_) => da
                .iter()
                .filter(|d| db.contains(d) && same_inputs(d))
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        let sides = Sides {
            a,
            b: rev_b,
            disk_of,
            opts: popts,
        };
        let (side_a, side_b) = render_batch(
            &sides,
            (&mut session_a, &mut session_b),
            (&da, &db),
            &shared,
        )?;
        let (mut sets, inputs_of) = resource_sets([side_a, side_b], &mut seen, hit_paths)?;
        if !opts.clusters.is_empty() {
            for set in &mut sets {
                set.clusters.retain(|k, _| opts.clusters.contains(k));
            }
        }
        let d = diff::diff(
            &sets[0],
            &sets[1],
            &diff::Options {
                a: rev_a.to_string(),
                b: label_b.to_string(),
                identities: opts.identities,
                sealed: opts.sealed,
                scope: None,
                inputs: inputs_of,
            },
        );
        clusters.extend(d.clusters);
        a.forget_under(&da);
        if let Some(b) = rev_b {
            b.forget_under(&db);
        }
        // Two renders of a batch are many small allocations: freed on other threads while
        // the next batch renders (one batch's at most pending).
        for h in pending.drain(..) {
            let _ = h.join();
        }
        for set in sets {
            pending.push(std::thread::spawn(move || drop(set)));
        }
    }
    for h in pending {
        let _ = h.join();
    }
    Ok(clusters)
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
    fn a_name_declared_twice_is_refused_in_directory_order() {
        let dirs: Vec<String> = ["clusters/a", "clusters/b", "clusters/c", "clusters/d"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let read = |d: &str| -> Result<(Option<String>, String), InputError> {
            let name = match d {
                "clusters/a" | "clusters/d" => Some("lab".to_string()),
                "clusters/b" => None,
                _ => return Err(InputError::NoIdentity),
            };
            Ok((name, format!("{d}/cluster.yaml")))
        };
        let e = unique_names(&dirs, read).unwrap_err();
        assert_eq!(
            e.to_string(),
            "clusters/d/cluster.yaml: cluster name `lab` is already used by clusters/a/cluster.yaml"
        );
        let names = unique_names(&dirs[..3], read).unwrap();
        assert_eq!(names.len(), 1);
        assert_eq!(names["clusters/a"], "lab");
        // A cluster directory that is a link owns its own path; a link's target directory
        // holds what is read through it.
        let all = set(&["clusters/a", "clusters/ab"]);
        assert_eq!(owner(&all, "clusters/a").unwrap(), "clusters/a");
        assert_eq!(owner(&all, "clusters/ab/x").unwrap(), "clusters/ab");
        assert!(
            at_or_under("shared/o/p.yaml", "shared/o") && !at_or_under("shared/op", "shared/o")
        );
        let files = through_link_targets(
            set(&["overlays/o/overlay.yaml"]),
            &[("overlays/o".to_string(), "shared/o".to_string())],
        );
        assert_eq!(
            files,
            set(&[
                "overlays/o",
                "overlays/o/overlay.yaml",
                "shared/o/overlay.yaml"
            ])
        );
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
