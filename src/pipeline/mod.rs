//! The one composer: every command that renders (`render`, `argocd generate`, `diff`, `plan`,
//! `rehearse`, `backup check`) goes through here. Per cluster, over any [`inputs::Tree`]:
//! its inputs (read once, through `inputs`) → the gate ([`gate`]: validation and the
//! migration's refusals) → the objects of its templates ([`mod@render`]) → its overlays in order
//! ([`crate::overlay::apply`]) → content-hash names ([`names`]) → the fixed order and the
//! interlocks ([`interlocks`]) → the checked sealed Secrets ([`crate::secrets::seal`]) →
//! buildable, sorted objects. Only this module calls the stages; writing is left to the
//! caller ([`crate::output`]).

pub mod interlocks;
pub mod names;
pub mod render;

use crate::printable::Label;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::inputs::cluster::{self, Load};
use crate::inputs::{self, ClusterInput, Digest256, Digests, DiskTree, InputError, Tree};
use crate::model::{ClusterConfig, ModelError, Purpose};
use crate::overlay::Overlay;
use render::{RenderError, Rendered, Renderer, Templated};
use std::collections::HashSet;
use std::sync::Arc;

/// Why a cluster could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// Reading an input.
    #[error(transparent)]
    Input(#[from] inputs::InputError),
    /// Rendering or the migration interlocks.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// The sealed Secrets.
    #[error(transparent)]
    Seal(#[from] crate::secrets::seal::SealError),
    /// An object kustomize could not build.
    #[error(transparent)]
    Unbuildable(#[from] crate::resource::Unbuildable),
    /// A worker thread panicked (a bug; the other clusters' results are discarded).
    #[error("a render worker panicked")]
    WorkerPanicked,
}

/// One cluster's outcome: its name and `cluster.yaml` (for the duplicate-name check) and
/// what the caller kept.
type Done<T, E> = Result<(String, String, T), E>;

/// Where a run's cluster directories are read from.
#[derive(Clone, Copy)]
pub enum Source<'a> {
    /// The disk: each cluster directory confined to its repository root
    /// ([`inputs::DiskTree::for_cluster`]); paths as typed.
    Disk,
    /// One tree: a git revision, files in memory; tree paths.
    Tree(&'a dyn Tree),
}

impl Source<'_> {
    /// The cluster directory `dir` read as `how` says, and its overlays through `cache`,
    /// from the tree that holds it.
    fn read(
        self,
        dir: &Path,
        how: Load<'_>,
        cache: &inputs::OverlayCache,
    ) -> Result<(ClusterInput, inputs::LoadedOverlays), PipelineError> {
        let read = |tree: &dyn Tree| -> Result<_, PipelineError> {
            let c = cluster::load(tree, dir, how)?;
            let overlays = inputs::load_overlays_in(tree, &c, cache)?;
            Ok((c, overlays))
        };
        match self {
            Source::Disk => read(&DiskTree::for_cluster(dir)?),
            Source::Tree(t) => read(t),
        }
    }

    fn repo_root(self, dir: &Path) -> PathBuf {
        match self {
            Source::Disk => inputs::repo_root(dir),
            Source::Tree(t) => t.repo_root(dir),
        }
    }

    /// The templates directory of the cluster directory `dir`: the one named on the command
    /// line (always on disk), else its repository's `templates/`.
    fn templates_dir(self, dir: &Path, opts: &Options<'_>) -> PathBuf {
        match opts.templates {
            Some(t) => t.to_path_buf(),
            None => cluster::templates_dir(&self.repo_root(dir)),
        }
    }

    /// The template overrides of the cluster directory `dir`, with their digests.
    fn templates(
        self,
        dir: &Path,
        opts: &Options<'_>,
    ) -> Result<(Vec<inputs::TemplateOverride>, Vec<Digest256>), InputError> {
        let root = self.repo_root(dir);
        match (opts.templates, self) {
            (Some(t), _) => inputs::load_templates(t, &root, true),
            (None, Source::Disk) => {
                inputs::load_templates(&cluster::templates_dir(&root), &root, false)
            }
            (None, Source::Tree(tree)) => {
                cluster::load_templates(tree, &cluster::templates_dir(&root), &root, false)
            }
        }
    }
}

/// What every cluster of a run is rendered with.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    /// A templates directory named on the command line (on disk), instead of each
    /// repository's own `templates/`.
    pub templates: Option<&'a Path>,
    /// Whether the inputs are hashed for a lock (only `render -o` writes one).
    pub digests: Digests,
}

/// What several calls of one run share for one source: the compiled templates (by
/// templates directory) and the overlays read, for a run that renders its clusters in
/// batches (`diff --git`).
#[derive(Default)]
pub struct Session {
    renderers: BTreeMap<PathBuf, (Renderer, Vec<Digest256>)>,
    overlays: inputs::OverlayCache,
}

impl Session {
    /// Compile the templates every directory of `dirs` renders with, once per session.
    fn prepare(
        &mut self,
        source: Source<'_>,
        dirs: &[PathBuf],
        opts: &Options<'_>,
    ) -> Result<(), PipelineError> {
        for d in dirs {
            let tdir = source.templates_dir(d, opts);
            if let std::collections::btree_map::Entry::Vacant(slot) = self.renderers.entry(tdir) {
                let (overrides, digests) = source.templates(d, opts)?;
                slot.insert((Renderer::new(&overrides)?, digests));
            }
        }
        Ok(())
    }
}

/// [`render()`] of cluster directories on disk in a session of their own: what every
/// command but `diff --git` (which renders revisions, and two at once) needs.
pub fn render_disk<T: Send, E: From<PipelineError> + Send>(
    dirs: &[PathBuf],
    opts: &Options<'_>,
    f: impl Fn(&Path, Rendered, Vec<Digest256>) -> Result<T, E> + Sync,
) -> Result<Vec<T>, E> {
    render(&mut Session::default(), Source::Disk, dirs, opts, f)
}

/// Render every cluster directory of `dirs` from `source` and map each result with `f`
/// (the directory, its objects, the digests of its inputs when `opts.digests` wants them),
/// on all cores. Each worker reads its cluster (overlays come from the session's cache,
/// shared by all), renders it and keeps only what `f` returns, so no cluster's inputs or
/// objects outlive its turn. Results, the first error, and the duplicate-name check come
/// back in input order: output never depends on scheduling.
///
/// # Example
///
/// The example repository as `capstan render examples/gitops` reads it:
///
/// ```
/// use capstan::inputs::{self, Digests};
/// use capstan::pipeline::{self, Options, PipelineError, Session, Source};
///
/// let dirs = inputs::discover("examples/gitops".as_ref())?;
/// let opts = Options { templates: None, digests: Digests::NotWanted };
/// let names = pipeline::render::<_, PipelineError>(
///     &mut Session::default(),
///     Source::Disk,
///     &dirs,
///     &opts,
///     |_dir, rendered, _digests| Ok((rendered.name, rendered.resources.len())),
/// )?;
/// assert_eq!(names.len(), 2);
/// assert_eq!(names[0].0, "lab-f");
/// assert!(names.iter().all(|(_, objects)| *objects > 10));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn render<T: Send, E: From<PipelineError> + Send>(
    session: &mut Session,
    source: Source<'_>,
    dirs: &[PathBuf],
    opts: &Options<'_>,
    f: impl Fn(&Path, Rendered, Vec<Digest256>) -> Result<T, E> + Sync,
) -> Result<Vec<T>, E> {
    session.prepare(source, dirs, opts)?;
    let (renderers, cache) = (&session.renderers, &session.overlays);
    let one = |d: &PathBuf| -> Done<T, E> {
        let (mut c, overlays) = source.read(d, Load::all(opts.digests), cache)?;
        let (renderer, tdigests) = &renderers[&source.templates_dir(d, opts)];
        let rendered = build(&c, &overlays, renderer)?;
        let digests = lock_digests(&mut c, overlays, tdigests, opts);
        Ok((c.config.metadata.name, c.file, f(d, rendered, digests)?))
    };
    on_all_cores(dirs, one)
}

/// What a cluster's lock names: its own inputs, then (when the lock is wanted) its overlays'
/// files and the template overrides.
fn lock_digests(
    c: &mut ClusterInput,
    overlays: inputs::LoadedOverlays,
    templates: &[Digest256],
    opts: &Options<'_>,
) -> Vec<Digest256> {
    let mut digests = std::mem::take(&mut c.digests);
    if opts.digests == Digests::Wanted {
        digests.extend(overlays.digests);
        digests.extend(templates.iter().cloned());
    }
    digests
}

/// [`render()`] of the same cluster directories from two sources, `a` and `b`, for
/// directories whose own files and templates are the same on both (only files outside
/// them, their overlays', changed): a cluster whose `cluster.yaml`, `secrets.age` and
/// sealed files read the same renders its templates once, from `a`, and each side's
/// overlays finish a copy. The pairs come back in `dirs` order; the duplicate-name check
/// is the caller's (both sides' names are the cluster's).
pub fn render_pair<T: Send, E: From<PipelineError> + Send>(
    sessions: (&mut Session, &mut Session),
    sources: (Source<'_>, Source<'_>),
    dirs: &[PathBuf],
    opts: &Options<'_>,
    f: impl Fn(&Path, Rendered, Vec<Digest256>) -> Result<T, E> + Sync,
) -> Result<Vec<(T, T)>, E> {
    let (session_a, session_b) = sessions;
    let (a, b) = sources;
    session_a.prepare(a, dirs, opts)?;
    session_b.prepare(b, dirs, opts)?;
    let (renderers_a, renderers_b) = (&session_a.renderers, &session_b.renderers);
    let (cache_a, cache_b) = (&session_a.overlays, &session_b.overlays);
    let one = |d: &PathBuf| -> Done<(T, T), E> {
        let (mut ca, overlays_a) = a.read(d, Load::all(opts.digests), cache_a)?;
        let like = Load {
            like: Some(&ca),
            ..Load::all(opts.digests)
        };
        let (mut cb, overlays_b) = b.read(d, like, cache_b)?;
        let (renderer_a, tdigests_a) = &renderers_a[&a.templates_dir(d, opts)];
        let (renderer_b, tdigests_b) = &renderers_b[&b.templates_dir(d, opts)];
        // The caller chose the cluster by its changed paths; what is shared is decided by
        // what was read: the same `cluster.yaml`, `secrets.age` and sealed files.
        let sealed = |c: &ClusterInput| -> Vec<(String, String)> {
            c.sealed
                .iter()
                .map(|s| (s.rel.clone(), s.text.clone()))
                .collect()
        };
        let same = ca.text == cb.text
            && ca.secrets_age_sha256 == cb.secrets_age_sha256
            && sealed(&ca) == sealed(&cb);
        let (ra, rb) = if same {
            gate(&ca.file, &ca.config).map_err(PipelineError::from)?;
            let templated = renderer_a
                .render_templates(&ca.config)
                .map_err(PipelineError::from)?;
            (
                build_from(&ca, &overlays_a, templated.clone())?,
                build_from(&cb, &overlays_b, templated)?,
            )
        } else {
            (
                build(&ca, &overlays_a, renderer_a)?,
                build(&cb, &overlays_b, renderer_b)?,
            )
        };
        let (da, db) = (
            lock_digests(&mut ca, overlays_a, tdigests_a, opts),
            lock_digests(&mut cb, overlays_b, tdigests_b, opts),
        );
        Ok((
            ca.config.metadata.name,
            ca.file,
            (f(d, ra, da)?, f(d, rb, db)?),
        ))
    };
    on_all_cores(dirs, one)
}

/// Run `one` for every item on all cores; results, the first error and the duplicate-name
/// check in input order.
fn on_all_cores<D: Sync, T: Send, E: From<PipelineError> + Send>(
    dirs: &[D],
    one: impl Fn(&D) -> Done<T, E> + Sync,
) -> Result<Vec<T>, E> {
    // One worker more than cores: a worker waiting for the disk (reading inputs that are
    // not cached, creating files) then leaves its core to another instead of idling it.
    // Measured on 2 cores, 1,000 clusters into a fresh tree: 3 workers beat 2 in each of
    // 9 alternating pairs, by 2-10% (bench/README.md).
    let workers =
        (std::thread::available_parallelism().map_or(1, usize::from) + 1).min(dirs.len().max(1));
    let results: Vec<Done<T, E>> = if workers <= 1 || dirs.len() < 8 {
        dirs.iter().map(one).collect()
    } else {
        // Workers take the next cluster as they finish one, so no core idles while another
        // still has a backlog; each result is put back at its cluster's index.
        let next = std::sync::atomic::AtomicUsize::new(0);
        let work = || {
            let mut done = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(d) = dirs.get(i) else {
                    return done;
                };
                done.push((i, one(d)));
            }
        };
        let mut slots: Vec<Option<Done<T, E>>> =
            std::iter::repeat_with(|| None).take(dirs.len()).collect();
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers).map(|_| s.spawn(work)).collect();
            for h in handles {
                match h.join() {
                    Ok(done) => {
                        for (i, r) in done {
                            slots[i] = Some(r);
                        }
                    }
                    Err(_) => slots.push(Some(Err(PipelineError::WorkerPanicked.into()))),
                }
            }
        });
        slots.into_iter().flatten().collect()
    };
    let mut seen: std::collections::HashMap<String, String> =
        std::collections::HashMap::with_capacity(results.len());
    let mut out = Vec::with_capacity(results.len());
    for r in results {
        let (name, file, value) = r?;
        if let Some(first) = seen.get(&name) {
            return Err(PipelineError::from(inputs::InputError::DuplicateName {
                name,
                first: first.clone(),
                second: file,
            })
            .into());
        }
        seen.insert(name, file);
        out.push(value);
    }
    Ok(out)
}

/// The gate before any template runs: `cluster.yaml` valid for rendering, and none of the
/// migration's refusals ([`crate::migration::check::refusals`]).
pub fn gate(file: &str, config: &ClusterConfig) -> Result<(), RenderError> {
    let problems = config.validate(Purpose::Render);
    if !problems.is_empty() {
        return Err(ModelError {
            file: file.into(),
            problems,
        }
        .into());
    }
    let findings = crate::migration::check::refusals(config, file);
    if !findings.is_empty() {
        return Err(RenderError::Refused {
            file: file.into(),
            findings,
        });
    }
    Ok(())
}

/// One cluster's objects from its `cluster.yaml` and overlays (in application order, as
/// [`crate::inputs::load_overlays`] returns them), without its sealed Secrets: the gate, the
/// templates, then [`finish`]. `file` names its `cluster.yaml` in errors.
pub fn render_cluster(
    renderer: &Renderer,
    file: &str,
    config: &ClusterConfig,
    overlays: &[Arc<Overlay>],
) -> Result<Rendered, RenderError> {
    gate(file, config)?;
    let templated = renderer.render_templates(config)?;
    finish(file, config, templated, overlays)
}

/// The stages after the templates: the cluster's overlays in order, content-hash names,
/// the fixed order, and the interlocks and duplicate check on the final objects.
pub fn finish(
    file: &str,
    config: &ClusterConfig,
    templated: Templated,
    overlays: &[Arc<Overlay>],
) -> Result<Rendered, RenderError> {
    if overlays.is_empty() && !config.spec.overlays.is_empty() {
        return Err(RenderError::OverlaysNotLoaded {
            file: file.into(),
            listed: config.spec.overlays.len(),
        });
    }
    let mut out = templated.resources;
    if !overlays.is_empty() {
        let pools = render::pool_templates(config);
        let budget = crate::overlay::Budget::new();
        let cluster = crate::overlay::ClusterContext {
            namespace: &config.metadata.namespace,
            pools: &pools,
            budget: &budget,
        };
        for o in overlays {
            crate::overlay::apply(o, &cluster, &mut out)?;
        }
    }
    names::apply(&mut out);
    crate::resource::sort(&mut out);
    interlocks::check_interlocks(file, config, &out)?;
    render::endpoint::interlock(config, &out).map_err(|message| RenderError::Endpoint {
        file: file.into(),
        message,
    })?;
    let mut seen: HashSet<(&str, &str, &str, &str)> = HashSet::with_capacity(out.len());
    for (i, r) in out.iter().enumerate() {
        let id = r.id_ref();
        if !seen.insert(id) {
            let first = out
                .iter()
                .take(i)
                .find(|o| o.id_ref() == id)
                .map(|o| o.origin.clone())
                .unwrap_or_default();
            return Err(RenderError::Duplicate {
                file: file.into(),
                id: Box::new(r.id()),
                first,
                second: r.origin.clone(),
            });
        }
    }
    Ok(Rendered {
        name: config.metadata.name.clone(),
        namespace: config.metadata.namespace.clone(),
        phase: config.spec.migration.as_ref().map(|m| m.phase),
        kubeadm_etcd_members: config
            .spec
            .migration
            .as_ref()
            .map_or(0, |m| m.kubeadm.etcd_members.len()),
        resources: out,
        warnings: Vec::new(),
    })
}

/// One cluster's objects: the checked sealed Secrets, then the rendered objects (overlays
/// applied), in the fixed output order.
pub fn build(
    c: &ClusterInput,
    overlays: &inputs::LoadedOverlays,
    renderer: &Renderer,
) -> Result<Rendered, PipelineError> {
    gate(&c.file, &c.config)?;
    let templated = renderer.render_templates(&c.config)?;
    build_from(c, overlays, templated)
}

/// [`build`] from the objects of the cluster's templates, rendered before.
fn build_from(
    c: &ClusterInput,
    overlays: &inputs::LoadedOverlays,
    templated: Templated,
) -> Result<Rendered, PipelineError> {
    let mut rendered = finish(&c.file, &c.config, templated, &overlays.overlays)?;
    let mut resources = crate::secrets::seal::sealed_resources(
        &c.config,
        &c.file,
        &c.dir.label(),
        c.secrets_age_sha256.as_deref(),
        &c.sealed,
    )?;
    rendered
        .warnings
        .extend(crate::secrets::seal::missing_recipients(
            &c.config,
            &c.dir.label(),
            &c.sealed,
        ));
    resources.append(&mut rendered.resources);
    for r in &resources {
        crate::resource::check_buildable(r)?;
    }
    crate::resource::sort(&mut resources);
    rendered.resources = resources;
    Ok(rendered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::MemoryTree;
    use crate::output::Bundle;

    /// The example repository's files, as a tree in memory (paths relative to its root).
    fn example() -> (PathBuf, MemoryTree) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/gitops");
        let mut tree = MemoryTree::default();
        for e in walkdir::WalkDir::new(&root).sort_by_file_name() {
            let e = e.unwrap();
            if e.file_type().is_file() {
                let rel = e.path().strip_prefix(&root).unwrap();
                tree.insert(rel, std::fs::read(e.path()).unwrap());
            }
        }
        (root, tree)
    }

    fn bundles(session: &mut Session, source: Source<'_>, dirs: &[PathBuf]) -> Vec<Bundle> {
        let opts = Options {
            templates: None,
            digests: Digests::Wanted,
        };
        render::<_, PipelineError>(session, source, dirs, &opts, |_, r, d| {
            Ok(Bundle::build(&r, &d).unwrap())
        })
        .unwrap()
    }

    /// The files of two bundles that differ, by name (one side's only included).
    fn differing(x: &Bundle, y: &Bundle) -> Vec<String> {
        let mut out: Vec<String> = x
            .files
            .iter()
            .filter(|f| !y.files.contains(f))
            .chain(y.files.iter().filter(|f| !x.files.contains(f)))
            .map(|f| f.0.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn a_repository_in_memory_renders_as_it_does_on_disk_lock_included() {
        let (root, tree) = example();
        let mem_dirs = cluster::discover(&tree, Path::new("")).unwrap();
        assert_eq!(
            mem_dirs,
            [
                PathBuf::from("clusters/lab-f"),
                PathBuf::from("clusters/lab-g")
            ]
        );
        let disk_dirs: Vec<PathBuf> = mem_dirs.iter().map(|d| root.join(d)).collect();
        let from_memory = bundles(&mut Session::default(), Source::Tree(&tree), &mem_dirs);
        let from_disk = bundles(&mut Session::default(), Source::Disk, &disk_dirs);
        assert_eq!(from_memory.len(), 2);
        for (m, d) in from_memory.iter().zip(&from_disk) {
            assert_eq!(m.name, d.name);
            assert_eq!(m.files, d.files, "{}", m.name);
        }
        // The lock names every input read, overlays and sealed files among them.
        let lock = &from_memory[0].files.last().unwrap().1;
        assert!(lock.contains("clusters/lab-f/cluster.yaml"), "{lock}");
        assert!(lock.contains("overlays/"), "{lock}");
    }

    #[test]
    fn these_files_then_exactly_this_output() {
        // The example's files in memory, no temporary directory and no process: each
        // cluster's stream is the golden `capstan render` prints for it.
        let (_, tree) = example();
        for (dir, golden) in [
            ("clusters/lab-f", "render-lab-f.yaml"),
            ("clusters/lab-g", "render-lab-g.yaml"),
        ] {
            let opts = Options {
                templates: None,
                digests: Digests::NotWanted,
            };
            let mut streams = render::<_, PipelineError>(
                &mut Session::default(),
                Source::Tree(&tree),
                &[PathBuf::from(dir)],
                &opts,
                |_, r, _| {
                    let mut text = String::new();
                    crate::resource::write_stream(&r.resources, &mut text);
                    Ok(text)
                },
            )
            .unwrap();
            let want = std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/golden")
                    .join(golden),
            )
            .unwrap();
            assert!(
                streams.pop().unwrap() == want,
                "{dir}: not the golden {golden}"
            );
        }
    }

    #[test]
    fn the_example_renders_without_a_warning() {
        // Issue 42 item 8: a first render of the bundled example says nothing to fix.
        let (_, tree) = example();
        let dirs = cluster::discover(&tree, Path::new("")).unwrap();
        let opts = Options {
            templates: None,
            digests: Digests::NotWanted,
        };
        let warnings = render::<_, PipelineError>(
            &mut Session::default(),
            Source::Tree(&tree),
            &dirs,
            &opts,
            |d, r, _| Ok((d.to_path_buf(), r.warnings)),
        )
        .unwrap();
        assert_eq!(warnings.len(), 2);
        for (d, w) in warnings {
            assert!(w.is_empty(), "{}: {w:?}", d.display());
        }
    }

    #[test]
    fn a_changed_overlay_file_changes_only_its_cluster_and_the_pair_form_agrees() {
        let (_, tree) = example();
        let dirs = cluster::discover(&tree, Path::new("")).unwrap();
        let pool = "overlays/vsphere-ipam/pool.yaml";
        let text = inputs::tree::read_text(&tree, Path::new(pool), inputs::InputKind::Overlay)
            .unwrap()
            .unwrap();
        assert!(text.contains("10.20.30.100-10.20.30.149"));
        let mut changed = tree.clone();
        changed.insert(pool, text.replace("10.20.30.100-", "10.20.30.110-"));
        let before = bundles(&mut Session::default(), Source::Tree(&tree), &dirs);
        let after = bundles(&mut Session::default(), Source::Tree(&changed), &dirs);
        let opts = Options {
            templates: None,
            digests: Digests::Wanted,
        };
        let pairs = render_pair::<_, PipelineError>(
            (&mut Session::default(), &mut Session::default()),
            (Source::Tree(&tree), Source::Tree(&changed)),
            &dirs,
            &opts,
            |_, r, d| Ok(Bundle::build(&r, &d).unwrap()),
        )
        .unwrap();
        // Templates rendered once for both sides give what two whole renders give.
        for (((a, b), one), two) in pairs.iter().zip(&before).zip(&after) {
            assert_eq!(differing(a, one), Vec::<String>::new(), "{}", a.name);
            assert_eq!(differing(b, two), Vec::<String>::new(), "{}", b.name);
        }
        // lab-f uses the overlay: its pool and its lock differ, nothing else; lab-g does not.
        let differing = differing(&before[0], &after[0]);
        assert_eq!(differing.len(), 2, "{differing:?}");
        assert!(
            differing.iter().any(|f| f.starts_with("inclusterippool-")),
            "{differing:?}"
        );
        assert!(
            differing.iter().any(|f| f == "capstan.lock"),
            "{differing:?}"
        );
        assert_eq!(before[1].files, after[1].files);
    }
}
