//! A repository's cluster directories and template overrides, read from any [`Tree`]
//! (the disk, a git revision, memory) by one set of rules: where clusters are found, what
//! a cluster directory holds (`cluster.yaml`, `secrets.age`, `secrets/*.yaml`), which files
//! of `templates/` are templates, and what is hashed for a lock file. The one place to
//! change how a cluster input is read.

use super::tree::{read_text, Tree};
use super::{
    ClusterConfig, ClusterInput, Digest256, Digests, InputError, InputKind, SealedFile,
    TemplateOverride, CLUSTER_FILE, OPERATOR_DIR, SEALED_DIR, SECRETS_FILE, WORKLOAD_DIR,
};
use crate::digest::sha256_hex;
use std::path::{Path, PathBuf};

/// Nothing at `label` (a tree has no OS error to quote).
pub(super) fn absent(label: String) -> InputError {
    InputError::Io {
        path: label,
        error: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
    }
}

/// The clusters found under `dir`: `dir` itself when it holds `cluster.yaml`, else the
/// directories of `dir/clusters/*/cluster.yaml`, else of `dir/*/cluster.yaml`; sorted.
pub fn discover(tree: &dyn Tree, dir: &Path) -> Result<Vec<PathBuf>, InputError> {
    // A `cluster.yaml` of any type counts: the loader refuses one that is not a regular
    // file (or that a link takes out of the tree), instead of the cluster silently
    // vanishing from a repository's render.
    let has_cluster = |d: &Path| tree.exists(&d.join(CLUSTER_FILE));
    if has_cluster(dir) {
        return Ok(vec![dir.to_path_buf()]);
    }
    if tree.list(dir)?.is_none() {
        return Err(if tree.exists(dir) {
            InputError::NoClusters {
                dir: tree.label(dir),
            }
        } else {
            absent(tree.label(dir))
        });
    }
    for base in [dir.join("clusters"), dir.to_path_buf()] {
        let children = match tree.list(&base) {
            Ok(Some(children)) => children,
            Ok(None) | Err(InputError::Outside { .. }) => continue,
            Err(e) => return Err(e),
        };
        // Listed sorted by name: the paths are sorted.
        let found: Vec<PathBuf> = children
            .iter()
            .map(|c| base.join(&c.name))
            .filter(|p| has_cluster(p))
            .collect();
        if !found.is_empty() {
            return Ok(found);
        }
    }
    Err(InputError::NoClusters {
        dir: tree.label(dir),
    })
}

/// What [`load`] reads of a cluster directory.
#[derive(Debug, Clone, Copy)]
pub struct Load<'a> {
    /// Whether every input is hashed for a lock file.
    pub digests: Digests,
    /// Whether `secrets.age` and the sealed files are read (not needed to resolve the
    /// cluster's overlays).
    pub secrets: bool,
    /// The same directory read from another tree: a `cluster.yaml` with the same text is
    /// not parsed again.
    pub like: Option<&'a ClusterInput>,
}

impl Load<'_> {
    /// Everything, hashed or not.
    pub fn all(digests: Digests) -> Load<'static> {
        Load {
            digests,
            secrets: true,
            like: None,
        }
    }
}

/// `cluster.yaml` of `dir` as read and shown (no file there is an error that says what is
/// there instead).
fn cluster_text(tree: &dyn Tree, dir: &Path) -> Result<(String, String), InputError> {
    let path = dir.join(CLUSTER_FILE);
    let file = tree.label(&path);
    match read_text(tree, &path, InputKind::ClusterFile)? {
        Some(text) => Ok((file, text)),
        None if tree.exists(dir) && tree.list(dir)?.is_none() => Err(InputError::NotADirectory {
            path: tree.label(dir),
            what: "a cluster directory, the one holding cluster.yaml,",
        }),
        None => Err(absent(file)),
    }
}

/// Read and parse one cluster directory.
pub fn load(tree: &dyn Tree, dir: &Path, how: Load<'_>) -> Result<ClusterInput, InputError> {
    tree.confine(dir)?;
    let wanted = how.digests == Digests::Wanted;
    let root = tree.repo_root(dir);
    let (file, text) = cluster_text(tree, dir)?;
    let config = match how.like.filter(|c| c.text == text) {
        Some(c) => c.config.clone(),
        None => {
            let value = super::parse_yaml_file(&file, &text)?;
            ClusterConfig::from_value(&file, value)?
        }
    };
    let mut digests = Vec::with_capacity(if wanted { 4 } else { 0 });
    if wanted {
        digests.push(Digest256 {
            path: tree.lock_path(&root, &dir.join(CLUSTER_FILE)),
            sha256: sha256_hex(text.as_bytes()),
        });
    }
    let (mut secrets_age_sha256, mut sealed) = (None, Vec::new());
    if how.secrets {
        let age_path = dir.join(SECRETS_FILE);
        if let Some(bytes) = tree.read(&age_path, InputKind::SecretsAge)? {
            let d = sha256_hex(&bytes);
            if wanted {
                digests.push(Digest256 {
                    path: tree.lock_path(&root, &age_path),
                    sha256: d.clone(),
                });
            }
            secrets_age_sha256 = Some(d);
        }
        sealed = read_sealed(tree, dir, false, how.digests)?;
        for s in &sealed {
            if let Some(sha256) = &s.sha256 {
                digests.push(Digest256 {
                    path: tree.lock_path(&root, &dir.join(&s.rel)),
                    sha256: sha256.clone(),
                });
            }
        }
    }
    Ok(ClusterInput {
        dir: dir.to_path_buf(),
        file,
        config,
        text,
        root,
        digests,
        secrets_age_sha256,
        sealed,
    })
}

/// The sealed files of a cluster directory: `secrets/*.yaml`, and with `workload` also
/// `secrets/workload/*.yaml` and the SopsSecrets in `secrets/operator/*.yaml` (every file
/// encrypted to the recipients, for rekey); sorted by relative path; each with its digest
/// when `want` asks for it. A directory there is not a sealed file; anything else with a
/// sealed file's name is read (links confined, types checked).
pub fn read_sealed(
    tree: &dyn Tree,
    dir: &Path,
    workload: bool,
    want: Digests,
) -> Result<Vec<SealedFile>, InputError> {
    let mut dirs = vec![(dir.join(SEALED_DIR), SEALED_DIR.to_string())];
    if workload {
        for sub in [OPERATOR_DIR, WORKLOAD_DIR] {
            dirs.push((
                dir.join(SEALED_DIR).join(sub),
                format!("{SEALED_DIR}/{sub}"),
            ));
        }
    }
    let mut out = Vec::new();
    for (d, prefix) in dirs {
        let Some(children) = tree.list(&d)? else {
            continue;
        };
        for c in children {
            if c.dir || !is_sealed_name(&c.name) {
                continue;
            }
            let p = d.join(&c.name);
            let text =
                read_text(tree, &p, InputKind::Sealed)?.ok_or_else(|| absent(tree.label(&p)))?;
            out.push(SealedFile {
                rel: format!("{prefix}/{}", c.name),
                path: tree.label(&p),
                sha256: (want == Digests::Wanted).then(|| sha256_hex(text.as_bytes())),
                text,
            });
        }
    }
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(out)
}

/// Whether a file of a `secrets/` directory is a sealed file by its name.
fn is_sealed_name(name: &str) -> bool {
    (name.ends_with(".yaml") || name.ends_with(".yml")) && !name.starts_with('.')
}

/// The name a cluster directory declares (`metadata.name`), and its `cluster.yaml` as shown
/// in messages: only that file read and parsed, not validated (what a duplicate-name check
/// needs); `None` when it declares none.
pub fn cluster_name(tree: &dyn Tree, dir: &Path) -> Result<(Option<String>, String), InputError> {
    tree.confine(dir)?;
    let (file, text) = cluster_text(tree, dir)?;
    let value = super::parse_yaml_file(&file, &text)?;
    let name = value
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(serde_json::Value::as_str)
        .map(str::to_string);
    Ok((name, file))
}

/// The templates directory of a repository root, unless one is named on the command line.
pub fn templates_dir(root: &Path) -> PathBuf {
    root.join(TEMPLATES_DIR)
}

/// The repository's directory of template overrides, below its root.
pub const TEMPLATES_DIR: &str = "templates";

/// Why a cluster directory reads a path whatever its overlays say ([`reads`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// A file of the cluster directory itself (`cluster.yaml`, `secrets.age`, `secrets/`).
    Own,
    /// A file of its repository's templates directory: every cluster of the repository reads it.
    Templates,
}

/// Whether the cluster directory `dir` (a tree path, `/`-separated) reads the tree path
/// `path` before any overlay is resolved: as its own file, or as a template of its
/// repository (unless the templates directory is named on the command line:
/// `templates_fixed`). The other files a cluster reads are its overlays'
/// (`crate::inputs::load_overlays_in` lists them). `diff --git` asks this to decide which
/// clusters a changed path renders, so a new cluster input is added here and in [`load`].
pub fn reads(dir: &str, path: &str, templates_fixed: bool) -> Option<Read> {
    let under = |d: &str| d.is_empty() || path == d || path.starts_with(&format!("{d}/"));
    if under(dir) {
        return Some(Read::Own);
    }
    let root = super::tree::tree_root(dir);
    let templates = match root.is_empty() {
        true => TEMPLATES_DIR.to_string(),
        false => format!("{root}/{TEMPLATES_DIR}"),
    };
    (!templates_fixed && path.starts_with(&format!("{templates}/"))).then_some(Read::Templates)
}

/// Template overrides from the directory `dir` of `tree` (`<dir>/<flavour>/*.yaml`,
/// `<dir>/talos/*.yaml`, every depth, in name order), with their digests (lock paths
/// relative to `root`). A missing directory means no overrides, unless it was named on the
/// command line (`explicit`).
pub fn load_templates(
    tree: &dyn Tree,
    dir: &Path,
    root: &Path,
    explicit: bool,
) -> Result<(Vec<TemplateOverride>, Vec<Digest256>), InputError> {
    let mut out = (Vec::new(), Vec::new());
    if !tree.exists(dir) {
        return match explicit {
            true => Err(absent(tree.label(dir))),
            false => Ok(out),
        };
    }
    tree.confine(dir)?;
    if tree.list(dir)?.is_none() {
        return Err(InputError::NotADirectory {
            path: tree.label(dir),
            what: "a templates directory",
        });
    }
    walk_templates(tree, dir, "", root, &mut out)?;
    Ok(out)
}

fn walk_templates(
    tree: &dyn Tree,
    dir: &Path,
    prefix: &str,
    root: &Path,
    out: &mut (Vec<TemplateOverride>, Vec<Digest256>),
) -> Result<(), InputError> {
    for c in tree.list(dir)?.unwrap_or_default() {
        let path = dir.join(&c.name);
        let name = super::rel_join(prefix, &c.name);
        if c.dir {
            walk_templates(tree, &path, &name, root, out)?;
            continue;
        }
        // Anything that is not a directory may be a link: one out of the tree is refused
        // as that, before what it is named decides whether it is a template.
        tree.confine(&path)?;
        match template_file(&name) {
            None => continue,
            Some(false) => {
                return Err(InputError::NotATemplate {
                    path: tree.label(&path),
                })
            }
            Some(true) => {}
        }
        let source = read_text(tree, &path, InputKind::Template)?
            .ok_or_else(|| absent(tree.label(&path)))?;
        out.1.push(Digest256 {
            path: tree.lock_path(root, &path),
            sha256: sha256_hex(source.as_bytes()),
        });
        out.0.push(TemplateOverride {
            name,
            origin: tree.label(&path),
            source,
        });
    }
    Ok(())
}

/// What a file of a templates directory is, by its path `name` relative to the directory:
/// skipped (`None`: a dotfile or a README), a template (`Some(true)`: `<dir>/<file>.yaml`),
/// or something that may not be there (`Some(false)`).
fn template_file(name: &str) -> Option<bool> {
    let base = name.rsplit('/').next().unwrap_or(name);
    if base.starts_with('.') || base.eq_ignore_ascii_case("README.md") {
        return None;
    }
    Some(name.ends_with(".yaml") && name.contains('/'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::tree::MemoryTree;

    const CLUSTER: &str = "apiVersion: capstan.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: a\n";

    #[test]
    fn a_cluster_reads_its_own_files_and_its_repositorys_templates() {
        let r = |dir: &str, path: &str, fixed: bool| reads(dir, path, fixed);
        assert_eq!(
            r("clusters/a", "clusters/a/cluster.yaml", false),
            Some(Read::Own)
        );
        assert_eq!(
            r("clusters/a", "clusters/a/secrets/x.yaml", false),
            Some(Read::Own)
        );
        assert_eq!(r("clusters/a", "clusters/ab/cluster.yaml", false), None);
        assert_eq!(
            r("clusters/a", "templates/v1beta1/cluster.yaml", false),
            Some(Read::Templates)
        );
        assert_eq!(
            r("clusters/a", "templates/v1beta1/cluster.yaml", true),
            None
        );
        assert_eq!(r("clusters/a", "templatesx/a.yaml", false), None);
        assert_eq!(
            r("site/clusters/a", "site/templates/t.yaml", false),
            Some(Read::Templates)
        );
        assert_eq!(r("site/clusters/a", "templates/t.yaml", false), None);
        // A repository that is one cluster: every path is its own.
        assert_eq!(r("", "overlays/o/overlay.yaml", false), Some(Read::Own));
        assert_eq!(
            templates_dir(Path::new("repo")),
            Path::new("repo/templates")
        );
    }

    #[test]
    fn discover_finds_clusters_under_clusters_first() {
        let t = MemoryTree::new([
            ("repo/clusters/b/cluster.yaml", CLUSTER),
            ("repo/clusters/a/cluster.yaml", CLUSTER),
            ("repo/other/cluster.yaml", CLUSTER),
        ]);
        assert_eq!(
            discover(&t, Path::new("repo")).unwrap(),
            [
                PathBuf::from("repo/clusters/a"),
                PathBuf::from("repo/clusters/b")
            ]
        );
        assert_eq!(
            discover(&t, Path::new("repo/other")).unwrap(),
            [PathBuf::from("repo/other")]
        );
        assert!(matches!(
            discover(&t, Path::new("nope")),
            Err(InputError::Io { .. })
        ));
    }

    #[test]
    fn sealed_files_are_the_yaml_files_of_secrets_only() {
        let t = MemoryTree::new([
            ("c/secrets/b.yaml", "b"),
            ("c/secrets/a.yml", "a"),
            ("c/secrets/.hidden.yaml", "h"),
            ("c/secrets/notes.txt", "n"),
            ("c/secrets/workload/w.yaml", "w"),
        ]);
        let rels = |workload| -> Vec<String> {
            read_sealed(&t, Path::new("c"), workload, Digests::NotWanted)
                .unwrap()
                .into_iter()
                .map(|s| s.rel)
                .collect()
        };
        assert_eq!(rels(false), ["secrets/a.yml", "secrets/b.yaml"]);
        assert_eq!(
            rels(true),
            ["secrets/a.yml", "secrets/b.yaml", "secrets/workload/w.yaml"]
        );
    }

    #[test]
    fn templates_are_yaml_files_below_a_flavour_in_name_order() {
        let t = MemoryTree::new([
            ("templates/v1beta2/cluster.yaml", "x"),
            ("templates/talos/patch.yaml", "y"),
            ("templates/README.md", "r"),
        ]);
        let (o, d) = load_templates(&t, Path::new("templates"), Path::new(""), false).unwrap();
        let names: Vec<&str> = o.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["talos/patch.yaml", "v1beta2/cluster.yaml"]);
        assert_eq!(d[0].path, "templates/talos/patch.yaml");
        let bad = MemoryTree::new([("templates/loose.yaml", "x")]);
        assert!(matches!(
            load_templates(&bad, Path::new("templates"), Path::new(""), false),
            Err(InputError::NotATemplate { .. })
        ));
        assert!(
            load_templates(&bad, Path::new("none"), Path::new(""), false)
                .unwrap()
                .0
                .is_empty()
        );
        assert!(load_templates(&bad, Path::new("none"), Path::new(""), true).is_err());
    }
}
