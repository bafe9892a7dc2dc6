//! The output bundle: one directory per cluster with one file per object, a
//! `kustomization.yaml` and a `capstan.lock`; and the only code that writes output.
//!
//! [`Bundle::build`] is pure. [`write_all`] first checks every target directory (refusing
//! any file capstan did not write, named), then replaces each cluster directory as a whole:
//! the new content is written to a hidden sibling directory and swapped in by rename, so an
//! error leaves the previous output in place. A bundle identical to what is on disk is not
//! rewritten. Files capstan wrote before and no longer renders disappear with the old
//! directory. Nothing is fsynced: the guarantee is about failed renders, not power loss.

use crate::digest::sha256_hex;
use crate::inputs::Digest256;
use crate::render::Rendered;
use crate::yaml;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Name of the lock file in each cluster directory.
pub const LOCK_FILE: &str = "capstan.lock";
/// Name of the kustomization in each cluster directory.
pub const KUSTOMIZATION: &str = "kustomization.yaml";

/// Why output could not be written.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
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
        path: path.display().to_string(),
        error,
    }
}

/// One cluster's output files, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle {
    /// Cluster name: the directory name under the output root.
    pub name: String,
    /// (file name, content), objects first in render order, then the kustomization and lock.
    pub files: Vec<(String, String)>,
}

/// File name for an object: `<kind>-<name>.yaml`, lowercase kind.
pub fn file_name(kind: &str, name: &str) -> String {
    format!("{}-{}.yaml", kind.to_ascii_lowercase(), name)
}

impl Bundle {
    /// Lay out a rendered cluster as files. `inputs` are the digests of what was read.
    pub fn build(rendered: &Rendered, inputs: &[Digest256]) -> Result<Bundle, BundleError> {
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

/// Create new files in `dir` (created if needed), all or none: each file is written to a
/// temporary file beside it and linked into place only if no file of that name exists.
/// Existing files are never overwritten; on any error the files created so far are removed.
pub fn create_files(dir: &Path, files: &[(&str, &[u8])]) -> Result<(), BundleError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    for (name, _) in files {
        let p = dir.join(name);
        if p.exists() {
            return Err(BundleError::Exists {
                path: p.display().to_string(),
            });
        }
    }
    let mut created: Vec<PathBuf> = Vec::new();
    let result = (|| {
        for (name, bytes) in files {
            let p = dir.join(name);
            let parent = p.parent().unwrap_or(dir);
            std::fs::create_dir_all(parent).map_err(io(parent))?;
            let mut tmp = tempfile::NamedTempFile::new_in(parent).map_err(io(parent))?;
            std::io::Write::write_all(&mut tmp, bytes).map_err(io(&p))?;
            tmp.persist_noclobber(&p).map_err(|e| {
                if e.error.kind() == std::io::ErrorKind::AlreadyExists {
                    BundleError::Exists {
                        path: p.display().to_string(),
                    }
                } else {
                    BundleError::Io {
                        path: p.display().to_string(),
                        error: e.error,
                    }
                }
            })?;
            created.push(p);
        }
        Ok(())
    })();
    if result.is_err() {
        for p in created {
            let _ = std::fs::remove_file(p);
        }
    }
    result
}

/// Create those of `files` (relative paths) that do not exist under `dir` yet, through
/// [`create_files`]; existing files, whatever their content, are kept untouched.
/// Returns (created, kept) relative paths, in the order given.
pub fn create_missing(
    dir: &Path,
    files: &[(&str, &[u8])],
) -> Result<(Vec<String>, Vec<String>), BundleError> {
    let mut kept = Vec::new();
    let mut new: Vec<(&str, &[u8])> = Vec::new();
    for (name, bytes) in files {
        if std::fs::symlink_metadata(dir.join(name)).is_ok() {
            kept.push(name.to_string());
        } else {
            new.push((name, bytes));
        }
    }
    create_files(dir, &new)?;
    Ok((new.iter().map(|(n, _)| n.to_string()).collect(), kept))
}

/// Replace files under `dir` (relative paths; parents created), each atomically (written
/// beside it, then renamed over it). A file whose content is already identical is left
/// alone. Returns the paths actually written.
pub fn replace_files(dir: &Path, files: &[(String, Vec<u8>)]) -> Result<Vec<String>, BundleError> {
    let mut written = Vec::new();
    for (name, bytes) in files {
        let p = dir.join(name);
        if std::fs::read(&p).is_ok_and(|old| &old == bytes) {
            continue;
        }
        let parent = p.parent().unwrap_or(dir);
        std::fs::create_dir_all(parent).map_err(io(parent))?;
        let mut tmp = tempfile::NamedTempFile::new_in(parent).map_err(io(parent))?;
        std::io::Write::write_all(&mut tmp, bytes).map_err(io(&p))?;
        tmp.persist(&p).map_err(|e| BundleError::Io {
            path: p.display().to_string(),
            error: e.error,
        })?;
        written.push(name.clone());
    }
    Ok(written)
}

/// What [`write_all`] did per cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
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
            path: lock_path.display().to_string(),
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

/// A cluster directory written beside its target and not yet swapped in. Dropping it
/// without [`commit`] removes it: a failed render leaves no trace.
pub struct Staged {
    name: String,
    dir: PathBuf,
    exists: bool,
    tmp: Option<tempfile::TempDir>,
}

/// Check a cluster's target directory (refusing files capstan did not write) and write the
/// bundle into a hidden staging directory beside it. Nothing visible changes until
/// [`commit`]. Safe to call from several threads for different clusters.
pub fn stage(root: &Path, bundle: &Bundle) -> Result<Staged, BundleError> {
    let dir = root.join(&bundle.name);
    let exists = match previous_files(&dir)? {
        None => false,
        Some(listed) => {
            let foreign = foreign_entries(&dir, &listed)?;
            if !foreign.is_empty() {
                return Err(BundleError::Foreign {
                    dir: dir.display().to_string(),
                    files: foreign,
                });
            }
            true
        }
    };
    if exists && same_content(&dir, bundle) {
        return Ok(Staged {
            name: bundle.name.clone(),
            dir,
            exists,
            tmp: None,
        });
    }
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.capstan-new-", bundle.name))
        .tempdir_in(root)
        .map_err(io(root))?;
    for (f, c) in &bundle.files {
        let p = tmp.path().join(f);
        std::fs::write(&p, c).map_err(io(&p))?;
    }
    Ok(Staged {
        name: bundle.name.clone(),
        dir,
        exists,
        tmp: Some(tmp),
    })
}

/// Swap every staged directory into place (a rename each; the previous directory is
/// renamed away first and removed after), in order.
pub fn commit(staged: Vec<Staged>) -> Result<Vec<(String, Outcome)>, BundleError> {
    let mut report = Vec::with_capacity(staged.len());
    for s in staged {
        let Some(tmp) = s.tmp else {
            report.push((s.name, Outcome::Unchanged));
            continue;
        };
        let tmp_path = tmp.keep();
        if s.exists {
            let old =
                tmp_path.with_file_name(format!(".{}.capstan-old-{}", s.name, std::process::id()));
            std::fs::rename(&s.dir, &old).map_err(io(&s.dir))?;
            if let Err(e) = std::fs::rename(&tmp_path, &s.dir) {
                let _ = std::fs::rename(&old, &s.dir);
                let _ = std::fs::remove_dir_all(&tmp_path);
                return Err(BundleError::Io {
                    path: s.dir.display().to_string(),
                    error: e,
                });
            }
            std::fs::remove_dir_all(&old).map_err(io(&old))?;
            report.push((s.name, Outcome::Updated));
        } else {
            std::fs::rename(&tmp_path, &s.dir).map_err(io(&s.dir))?;
            report.push((s.name, Outcome::Created));
        }
    }
    Ok(report)
}

/// Write every bundle under `root`: stage all (every target checked for foreign files,
/// nothing visible changed), then commit all.
pub fn write_all(root: &Path, bundles: &[Bundle]) -> Result<Vec<(String, Outcome)>, BundleError> {
    std::fs::create_dir_all(root).map_err(io(root))?;
    let staged = bundles
        .iter()
        .map(|b| stage(root, b))
        .collect::<Result<Vec<_>, _>>()?;
    commit(staged)
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
        };
        let r = Rendered {
            name: "c1".into(),
            namespace: "c1".into(),
            phase: None,
            kubeadm_etcd_members: 0,
            // The second lacks its final newline, so the file is not the text read.
            resources: vec![doc("a", "kind: Secret\n"), doc("b", "kind: Secret")],
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
            })
            .collect();
        Rendered {
            name: "c1".into(),
            namespace: "ns".into(),
            phase: None,
            kubeadm_etcd_members: 0,
            resources,
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
        let b2 = Bundle::build(&rendered(2), &[]).unwrap();
        assert_eq!(
            write_all(tmp.path(), std::slice::from_ref(&b2)).unwrap()[0].1,
            Outcome::Created
        );
        assert_eq!(
            write_all(tmp.path(), &[b2]).unwrap()[0].1,
            Outcome::Unchanged
        );
        let b1 = Bundle::build(&rendered(1), &[]).unwrap();
        assert_eq!(write_all(tmp.path(), &[b1]).unwrap()[0].1, Outcome::Updated);
        assert!(!tmp.path().join("c1/configmap-m1.yaml").exists());
        assert!(tmp.path().join("c1/configmap-m0.yaml").exists());
        let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from("c1")]);
    }

    #[test]
    fn refuses_foreign_files_and_touches_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        write_all(tmp.path(), &[Bundle::build(&rendered(2), &[]).unwrap()]).unwrap();
        std::fs::write(tmp.path().join("c1/notes.txt"), "mine").unwrap();
        let before = std::fs::read(tmp.path().join("c1/configmap-m1.yaml")).unwrap();
        let e = write_all(tmp.path(), &[Bundle::build(&rendered(1), &[]).unwrap()]).unwrap_err();
        assert!(
            e.to_string()
                .contains("this file was not written by capstan (notes.txt)"),
            "{e}"
        );
        assert_eq!(
            std::fs::read(tmp.path().join("c1/configmap-m1.yaml")).unwrap(),
            before
        );
        // A directory without a lock is not ours either.
        let other = tmp.path().join("x");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("a.yaml"), "a").unwrap();
        let mut r = rendered(1);
        r.name = "x".into();
        let e = write_all(tmp.path(), &[Bundle::build(&r, &[]).unwrap()]).unwrap_err();
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
