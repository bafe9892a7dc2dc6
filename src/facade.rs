//! The library's surface on purpose: render a repository, review a change between two git
//! revisions, check a cluster. Everything else is the CLI's and the tests'; these three are
//! what a program embedding capstan calls, with the CLI's behaviour (`capstan render`,
//! `capstan diff --git`, `capstan check`) and without its printing.

use crate::{inputs, migration, pipeline, review};
use std::path::Path;

/// Why a facade call failed. Each message names the file and field, as the CLI prints it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the repository.
    #[error(transparent)]
    Input(#[from] inputs::InputError),
    /// Rendering a cluster.
    #[error(transparent)]
    Pipeline(#[from] pipeline::PipelineError),
    /// Reading or comparing git revisions.
    #[error(transparent)]
    Review(#[from] review::revisions::RevisionsError),
}

/// The YAML stream `capstan render REPO` prints: every cluster of the repository at `repo`
/// (a repository root, a `clusters/` directory or one cluster's directory), its objects in
/// the fixed order, sealed Secrets as committed (still encrypted), clusters in name order.
///
/// ```
/// let stream = capstan::render_repository("examples/gitops".as_ref())?;
/// assert!(stream.contains("kind: TalosControlPlane"));
/// // The same inputs, the same bytes.
/// assert_eq!(stream, capstan::render_repository("examples/gitops".as_ref())?);
/// # Ok::<(), capstan::Error>(())
/// ```
pub fn render_repository(repo: &Path) -> Result<String, Error> {
    let dirs = inputs::discover(repo)?;
    let opts = pipeline::Options {
        templates: None,
        digests: inputs::Digests::NotWanted,
    };
    let rendered = pipeline::render_disk::<_, pipeline::PipelineError>(&dirs, &opts, |_, r, _| {
        Ok(r.resources)
    })?;
    // `write_stream` separates each document from what `out` holds already, across clusters too.
    let mut out = String::new();
    for resources in &rendered {
        crate::resource::write_stream(resources, &mut out);
    }
    Ok(out)
}

/// A review of what changes between two git revisions of the repository at `repo`
/// (`range` is `A..B`, or `A` for the working tree against revision `A`), as `capstan diff
/// --git` computes it: only the clusters whose inputs changed are rendered, on both sides;
/// a sealed value whose ciphertext changed is reported re-sealed, never compared by
/// plaintext (no identity is read).
pub fn review_revisions(repo: &Path, range: &str) -> Result<Review, Error> {
    let opts = review::revisions::ReviewOptions {
        identities: None,
        sealed: review::diff::SealedValues::Resealed,
        clusters: Vec::new(),
    };
    Ok(Review(review::revisions::review(repo, range, None, &opts)?))
}

/// A resource-level, secret-safe difference between two renders ([`review_revisions`]).
#[derive(Debug)]
pub struct Review(review::diff::Diff);

impl Review {
    /// Whether any object differs (re-encrypted Secrets alone are no difference), as
    /// `capstan diff --fail-on differences` decides its exit code.
    pub fn has_differences(&self) -> bool {
        self.0.has_differences()
    }

    /// The report `capstan diff` prints on a terminal without colour.
    pub fn text(&self) -> String {
        review::report::text(&self.0, false, false)
    }

    /// The Markdown report for a pull-request comment, at most `limit` bytes.
    pub fn markdown(&self, limit: usize) -> String {
        review::report::markdown(&self.0, limit, false)
    }

    /// The JSON report (`capstan diff --format json`).
    pub fn json(&self) -> String {
        review::report::json(&self.0, false)
    }
}

/// A finding of [`check_cluster`]: its stable id, whether it blocks the migration, the field
/// or input it compared, what it found, and how to fix it.
pub use migration::check::{Finding, Severity};

/// The findings `capstan check DIR` reports for the cluster directory `dir` from its
/// `cluster.yaml` and sealed files alone (no kubeadm files, snapshot or inventory: the
/// checks that need them say so, as findings of their own), in report order.
///
/// ```
/// use capstan::{check_cluster, Severity};
///
/// let findings = check_cluster("examples/gitops/clusters/lab-g".as_ref())?;
/// assert!(findings.iter().all(|f| f.severity != Severity::Blocking), "{findings:?}");
/// # Ok::<(), capstan::Error>(())
/// ```
pub fn check_cluster(dir: &Path) -> Result<Vec<Finding>, Error> {
    let c = inputs::load_cluster(dir)?;
    let ci = migration::check::CheckInputs::for_cluster(&c, std::time::SystemTime::now());
    Ok(migration::check::check(&ci))
}
