//! The render pipeline as a library function, used by every command that renders (`render`,
//! `argocd generate`, `diff`): each cluster directory → its inputs (read once, through
//! `inputs`) → objects from the templates, its overlays and content-hash names (`render`)
//! → the checked sealed Secrets (`seal`) → buildable, sorted objects. Writing is left to the
//! caller (`bundle`).

use crate::printable::Label;
use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::inputs::{self, ClusterInput};
use crate::render::{RenderError, Rendered, Renderer};

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

/// Load and render every cluster directory and map each result with `f`, on all cores.
/// Each worker reads its cluster (overlays come from a cache shared by all), renders it and keeps only what `f` returns, so no
/// cluster's inputs or objects outlive its turn. Results, the first error, and the
/// duplicate-name check come back in input order: output never depends on scheduling.
/// `wanted` says whether the inputs are hashed for a lock (only `-o` writes one).
pub fn render_each<T: Send, E: From<PipelineError> + Send>(
    dirs: &[PathBuf],
    templates: Option<&PathBuf>,
    wanted: inputs::Digests,
    f: impl Fn(Rendered, Vec<inputs::Digest256>) -> Result<T, E> + Sync,
) -> Result<Vec<T>, E> {
    render_each_in(&mut Session::default(), dirs, templates, wanted, f)
}

/// What several calls of one run share: the compiled templates and the overlays read,
/// for a run that renders its clusters in batches (`diff --git`).
#[derive(Default)]
pub struct Session {
    disk: BTreeMap<PathBuf, (Renderer, Vec<inputs::Digest256>)>,
    tree: BTreeMap<String, Renderer>,
    overlays: inputs::OverlayCache,
}

/// [`render_each`] within a [`Session`].
pub fn render_each_in<T: Send, E: From<PipelineError> + Send>(
    session: &mut Session,
    dirs: &[PathBuf],
    templates: Option<&PathBuf>,
    wanted: inputs::Digests,
    f: impl Fn(Rendered, Vec<inputs::Digest256>) -> Result<T, E> + Sync,
) -> Result<Vec<T>, E> {
    let tdir_of = |d: &PathBuf| {
        templates
            .cloned()
            .unwrap_or_else(|| inputs::repo_root(d).join("templates"))
    };
    let renderers = &mut session.disk;
    for d in dirs {
        let tdir = tdir_of(d);
        if let std::collections::btree_map::Entry::Vacant(slot) = renderers.entry(tdir) {
            let (overrides, digests) =
                inputs::load_templates(slot.key(), &inputs::repo_root(d), templates.is_some())
                    .map_err(PipelineError::from)?;
            slot.insert((
                Renderer::new(&overrides).map_err(PipelineError::from)?,
                digests,
            ));
        }
    }
    let (renderers, overlay_cache) = (&session.disk, &session.overlays);
    let one = |d: &PathBuf| -> Done<T, E> {
        let c = inputs::load_cluster_with(d, wanted).map_err(PipelineError::from)?;
        let overlays = inputs::load_overlays(&c, overlay_cache).map_err(PipelineError::from)?;
        let (renderer, tdigests) = &renderers[&tdir_of(d)];
        let rendered = build(&c, &overlays, renderer)?;
        let mut digests = c.digests;
        if wanted == inputs::Digests::Wanted {
            digests.extend(overlays.digests);
            digests.extend(tdigests.iter().cloned());
        }
        Ok((c.config.metadata.name, c.file, f(rendered, digests)?))
    };
    on_all_cores(dirs, one)
}

/// [`render_each`] for clusters of a git revision (tree paths from
/// [`inputs::git::discover`]): every input read from the revision's tree, template
/// overrides from its `templates/` (or from `templates`, a directory on disk, when given).
/// The session is the revision's own: its overlays are read from the revision.
pub fn render_revision<T: Send, E: From<PipelineError> + Send>(
    session: &mut Session,
    rev: &inputs::git::Revision,
    dirs: &[String],
    templates: Option<&PathBuf>,
    f: impl Fn(&str, Rendered) -> Result<T, E> + Sync,
) -> Result<Vec<T>, E> {
    tree_renderers(session, rev, dirs, templates)?;
    let (renderers, overlay_cache) = (&session.tree, &session.overlays);
    let one = |d: &String| -> Done<T, E> {
        let c = inputs::git::load_cluster(rev, d).map_err(PipelineError::from)?;
        let overlays =
            inputs::git::load_overlays(rev, &c, overlay_cache).map_err(PipelineError::from)?;
        let rendered = build(&c, &overlays, &renderers[&inputs::git::repo_root(d)])?;
        Ok((c.config.metadata.name, c.file, f(d, rendered)?))
    };
    on_all_cores(dirs, one)
}

/// The compiled templates of each repository root the tree paths `dirs` lie under, once
/// per session.
fn tree_renderers(
    session: &mut Session,
    rev: &inputs::git::Revision,
    dirs: &[String],
    templates: Option<&PathBuf>,
) -> Result<(), PipelineError> {
    for d in dirs {
        let root = inputs::git::repo_root(d);
        if let std::collections::btree_map::Entry::Vacant(slot) = session.tree.entry(root) {
            let overrides = match templates {
                Some(t) => inputs::load_templates(t, t, true).map(|(o, _)| o),
                None => inputs::git::load_templates(rev, slot.key()),
            }?;
            slot.insert(Renderer::new(&overrides)?);
        }
    }
    Ok(())
}

/// [`render_revision`] for clusters whose directory and templates are the same on both
/// revisions, `a` and `b` (only files outside them, their overlays', changed): each
/// cluster's templates render once, from `a`, and each side's overlays finish a copy. The
/// pairs in `dirs` order; the duplicate-name check is the caller's (both sides' names are
/// the cluster's).
pub fn render_revision_pair<T: Send, E: From<PipelineError> + Send>(
    sessions: (&mut Session, &mut Session),
    revisions: (&inputs::git::Revision, &inputs::git::Revision),
    dirs: &[String],
    templates: Option<&PathBuf>,
    f: impl Fn(&str, Rendered) -> Result<T, E> + Sync,
) -> Result<Vec<(T, T)>, E> {
    let (session_a, session_b) = sessions;
    let (a, b) = revisions;
    tree_renderers(session_a, a, dirs, templates)?;
    tree_renderers(session_b, b, dirs, templates)?;
    let (renderers_a, renderers_b) = (&session_a.tree, &session_b.tree);
    let (cache_a, cache_b) = (&session_a.overlays, &session_b.overlays);
    let one = |d: &String| -> Done<(T, T), E> {
        let ca = inputs::git::load_cluster(a, d).map_err(PipelineError::from)?;
        let cb = inputs::git::load_cluster_like(b, d, &ca).map_err(PipelineError::from)?;
        let root = inputs::git::repo_root(d);
        let (renderer_a, renderer_b) = (&renderers_a[&root], &renderers_b[&root]);
        let overlays_a =
            inputs::git::load_overlays(a, &ca, cache_a).map_err(PipelineError::from)?;
        let overlays_b =
            inputs::git::load_overlays(b, &cb, cache_b).map_err(PipelineError::from)?;
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
            let templated = renderer_a
                .render_templates(&ca.file, &ca.config)
                .map_err(PipelineError::from)?;
            (
                build_from(&ca, &overlays_a, renderer_a, templated.clone())?,
                build_from(&cb, &overlays_b, renderer_b, templated)?,
            )
        } else {
            (
                build(&ca, &overlays_a, renderer_a)?,
                build(&cb, &overlays_b, renderer_b)?,
            )
        };
        Ok((
            ca.config.metadata.name.clone(),
            ca.file.clone(),
            (f(d, ra)?, f(d, rb)?),
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

/// One cluster's objects: the checked sealed Secrets, then the rendered objects (overlays
/// applied), in the fixed output order.
pub fn build(
    c: &ClusterInput,
    overlays: &inputs::LoadedOverlays,
    renderer: &Renderer,
) -> Result<Rendered, PipelineError> {
    let templated = renderer.render_templates(&c.file, &c.config)?;
    build_from(c, overlays, renderer, templated)
}

/// [`build`] from the objects of the cluster's templates, rendered before.
fn build_from(
    c: &ClusterInput,
    overlays: &inputs::LoadedOverlays,
    renderer: &Renderer,
    templated: crate::render::Templated,
) -> Result<Rendered, PipelineError> {
    let mut rendered = renderer.finish(&c.file, &c.config, templated, &overlays.overlays)?;
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
