//! A git revision's files, read from the repository's object store into memory: the tree
//! listing from `git ls-tree`, the blobs that are needed, as they are needed, from one `git cat-file --batch`.
//! Nothing is checked out and nothing is written, so a killed run leaves nothing behind (the
//! `git cat-file` ends when its input closes).
//!
//! A revision is untrusted input like a working tree, with the same rules: paths stay inside
//! the repository (a symbolic link is resolved inside the tree, lexically, and refused when
//! it leaves it), only regular files are read (a submodule is not one), and every cost is
//! bounded (entries listed, bytes fetched, each file's size by its kind's cap, known from the
//! listing before anything is read).

use super::{InputError, InputKind};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// At most this many entries in a revision's tree.
pub const MAX_ENTRIES: usize = 500_000;
/// At most this many bytes fetched from one revision (the files a review reads).
pub const MAX_FETCH: u64 = 1 << 30;
/// Links followed in a row before giving up (as the kernel's `ELOOP`).
const MAX_LINKS: usize = 40;

/// What a tree entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file (mode 100644 or 100755).
    File,
    /// A symbolic link (mode 120000); its blob is the target.
    Link,
    /// A submodule (mode 160000): a commit of another repository.
    Submodule,
}

/// One file of a revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// What it is.
    pub kind: EntryKind,
    /// The object id.
    pub oid: String,
    /// Its size in bytes (0 for a submodule).
    pub size: u64,
}

/// One revision's tree, and the blobs read from it so far.
#[derive(Debug)]
pub struct Revision {
    /// The revision as the user named it (`main`, `HEAD~1`), for messages.
    pub name: String,
    /// The commit it resolves to.
    pub commit: String,
    entries: BTreeMap<String, Entry>,
    blobs: Mutex<Blobs>,
}

/// The blobs read so far, and the `git cat-file --batch` that reads more (`None` for a
/// revision built in memory).
#[derive(Debug, Default)]
struct Blobs {
    read: HashMap<String, Arc<Vec<u8>>>,
    total: u64,
    cat: Option<CatFile>,
    top: Option<std::path::PathBuf>,
}

/// A running `git cat-file --batch`: one object id in, its header and bytes out. It ends
/// when its stdin closes (the revision dropped, or capstan killed).
#[derive(Debug)]
struct CatFile {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Blobs {
    /// Count `size` more bytes read from `revision`, at most [`MAX_FETCH`] in all.
    fn charge(&mut self, size: u64, revision: &str) -> Result<(), InputError> {
        self.total += size;
        if self.total > MAX_FETCH {
            return Err(git_error(format!(
                "more than {MAX_FETCH} bytes of inputs to read from `{revision}`"
            )));
        }
        Ok(())
    }

    /// The running `git cat-file`, started on first use.
    fn cat(&mut self, revision: &str) -> Result<&mut CatFile, InputError> {
        if self.cat.is_none() {
            let top = self
                .top
                .clone()
                .ok_or_else(|| git_error(format!("`{revision}`: no repository to read")))?;
            self.cat = Some(CatFile::start(&top)?);
        }
        self.cat
            .as_mut()
            .ok_or_else(|| git_error("git cat-file: not running".into()))
    }
}

impl Drop for CatFile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl CatFile {
    fn start(top: &Path) -> Result<CatFile, InputError> {
        let mut child = std::process::Command::new("git")
            .args(["cat-file", "--batch"])
            .current_dir(top)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| git_error(format!("cannot run git: {e}")))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(git_error("git cat-file: no pipes".into()));
        };
        Ok(CatFile {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        })
    }

    /// The bytes of blob `oid`, which the listing says has `size` bytes.
    fn blob(&mut self, oid: &str, size: u64) -> Result<Vec<u8>, InputError> {
        self.stdin
            .write_all(format!("{oid}\n").as_bytes())
            .and_then(|()| self.stdin.flush())
            .map_err(|e| git_error(format!("git cat-file: {e}")))?;
        CatFile::answer(&mut self.stdout, oid, size)
    }

    /// Read the answer for blob `oid` of `size` bytes.
    fn answer(
        stdout: &mut BufReader<std::process::ChildStdout>,
        oid: &str,
        size: u64,
    ) -> Result<Vec<u8>, InputError> {
        let fail = |m: String| git_error(format!("git cat-file: {m}"));
        let mut header = String::new();
        (&mut *stdout)
            .take(256)
            .read_line(&mut header)
            .map_err(|e| fail(e.to_string()))?;
        let mut f = header.split_ascii_whitespace();
        let (got, got_size) = (f.next(), f.nth(1).and_then(|n| n.parse::<u64>().ok()));
        if got != Some(oid) || got_size != Some(size) {
            return Err(fail(format!(
                "unexpected answer for {oid}: {}",
                header.trim()
            )));
        }
        let mut body = Vec::with_capacity(size as usize + 1);
        (&mut *stdout)
            .take(size + 1)
            .read_to_end(&mut body)
            .map_err(|e| fail(e.to_string()))?;
        if body.pop() != Some(b'\n') || body.len() as u64 != size {
            return Err(fail(format!("{oid} truncated")));
        }
        Ok(body)
    }
}

fn git_error(message: String) -> InputError {
    InputError::Git { message }
}

/// Run git in `top` with `args`; its stdout.
fn git(top: &Path, args: &[&str]) -> Result<Vec<u8>, InputError> {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(top)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| git_error(format!("cannot run git: {e}")))?;
    if !out.status.success() {
        return Err(git_error(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

/// The tree path a link at `link` with target `target` names: the loader's own lexical
/// join ([`super::join_rel`]) against the link's directory; `None` when the target is
/// absolute or climbs out of the tree.
fn lexical_join(link: &str, target: &str) -> Option<String> {
    let dir = link.rsplit_once('/').map_or("", |(d, _)| d);
    super::join_rel(std::path::Path::new(""), dir, target).ok()
}

/// The top directory of the git work tree holding `dir`.
pub fn toplevel(dir: &Path) -> Result<std::path::PathBuf, InputError> {
    let out = git(dir, &["rev-parse", "--show-toplevel"])?;
    Ok(String::from_utf8_lossy(&out).trim().into())
}

/// Parse `git ls-tree -r -z -l` output.
fn parse_listing(out: &[u8]) -> Result<BTreeMap<String, Entry>, InputError> {
    let mut entries = BTreeMap::new();
    for record in out.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        if entries.len() >= MAX_ENTRIES {
            return Err(git_error(format!(
                "the tree has more than {MAX_ENTRIES} files"
            )));
        }
        let bad = || git_error("unexpected `git ls-tree` output".into());
        let tab = record.iter().position(|b| *b == b'\t').ok_or_else(bad)?;
        let meta = std::str::from_utf8(&record[..tab]).map_err(|_| bad())?;
        // A path that is not UTF-8 is none capstan reads (its inputs are named in UTF-8
        // YAML): left out of the listing, instead of failing every review.
        let Ok(path) = String::from_utf8(record[tab + 1..].to_vec()) else {
            continue;
        };
        let mut f = meta.split_ascii_whitespace();
        let (mode, _type, oid, size) = (f.next(), f.next(), f.next(), f.next());
        let (Some(mode), Some(oid), Some(size)) = (mode, oid, size) else {
            return Err(bad());
        };
        let kind = match mode {
            "100644" | "100755" => EntryKind::File,
            "120000" => EntryKind::Link,
            "160000" => EntryKind::Submodule,
            _ => continue,
        };
        let size = if size == "-" {
            0
        } else {
            size.parse().map_err(|_| bad())?
        };
        entries.insert(
            path,
            Entry {
                kind,
                oid: oid.to_string(),
                size,
            },
        );
    }
    Ok(entries)
}

impl Revision {
    /// List the tree of `rev` in the repository at `top` (no blob is read yet).
    pub fn list(top: &Path, rev: &str) -> Result<Revision, InputError> {
        let commit = git(
            top,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{rev}^{{commit}}"),
            ],
        )
        .map_err(|_| git_error(format!("`{rev}` is not a commit of {}", top.display())))?;
        let commit = String::from_utf8_lossy(&commit).trim().to_string();
        let out = git(top, &["ls-tree", "-r", "-z", "-l", "--full-tree", &commit])?;
        Ok(Revision {
            name: rev.to_string(),
            commit,
            entries: parse_listing(&out)?,
            blobs: Mutex::new(Blobs {
                top: Some(top.to_path_buf()),
                ..Blobs::default()
            }),
        })
    }

    /// A revision made of the given entries and blobs (for tests).
    pub fn from_parts(
        name: &str,
        entries: BTreeMap<String, Entry>,
        blobs: HashMap<String, Vec<u8>>,
    ) -> Revision {
        Revision {
            name: name.to_string(),
            commit: String::new(),
            entries,
            blobs: Mutex::new(Blobs {
                read: blobs.into_iter().map(|(k, v)| (k, Arc::new(v))).collect(),
                ..Blobs::default()
            }),
        }
    }

    /// Every file of the tree, by path.
    pub fn entries(&self) -> &BTreeMap<String, Entry> {
        &self.entries
    }

    /// How a path of this revision is shown in messages: `REV:path`.
    pub fn label(&self, rel: &str) -> String {
        format!("{}:{rel}", self.name)
    }

    /// Read the blobs of `paths` (files and links, each at most the largest cap of a
    /// repository file; others are refused when read, by their listed size) in one
    /// exchange with `git cat-file`, instead of one request at a time.
    pub fn prefetch<'a>(&self, paths: impl IntoIterator<Item = &'a str>) -> Result<(), InputError> {
        let mut b = self
            .blobs
            .lock()
            .map_err(|_| git_error("a reader panicked".into()))?;
        let mut want: Vec<&Entry> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for p in paths {
            let Some(e) = self.entries.get(p) else {
                continue;
            };
            if e.kind == EntryKind::Submodule
                || e.size > InputKind::Overlay.cap()
                || b.read.contains_key(&e.oid)
                || !seen.insert(e.oid.as_str())
            {
                continue;
            }
            b.charge(e.size, &self.name)?;
            want.push(e);
        }
        if want.is_empty() {
            return Ok(());
        }
        let cat = b.cat(&self.name)?;
        let request: String = want.iter().map(|e| format!("{}\n", e.oid)).collect();
        let CatFile {
            child,
            stdin,
            stdout,
        } = cat;
        // git answers while it reads: write from another thread, or both pipes fill up.
        let answers = std::thread::scope(|s| {
            let writer = s.spawn(move || {
                stdin
                    .write_all(request.as_bytes())
                    .and_then(|()| stdin.flush())
            });
            let answers: Result<Vec<Vec<u8>>, InputError> = want
                .iter()
                .map(|e| CatFile::answer(stdout, &e.oid, e.size))
                .collect();
            if answers.is_err() {
                // Nobody reads git's answers any more: stop it, so the writer's blocked
                // write fails instead of waiting forever.
                let _ = child.kill();
            }
            let written = writer.join();
            match (answers, written) {
                (Ok(a), Ok(Ok(()))) => Ok(a),
                (Err(e), _) => Err(e),
                (_, _) => Err(git_error("git cat-file: could not write".into())),
            }
        });
        match answers {
            Ok(answers) => {
                for (e, bytes) in want.iter().zip(answers) {
                    b.read.insert(e.oid.clone(), Arc::new(bytes));
                }
                Ok(())
            }
            Err(err) => {
                b.cat = None;
                Err(err)
            }
        }
    }

    /// The bytes of an entry's blob, read once (at most [`MAX_FETCH`] bytes in all).
    fn blob(&self, e: &Entry) -> Result<Arc<Vec<u8>>, InputError> {
        let mut b = self
            .blobs
            .lock()
            .map_err(|_| git_error("a reader panicked".into()))?;
        if let Some(hit) = b.read.get(&e.oid) {
            return Ok(hit.clone());
        }
        b.charge(e.size, &self.name)?;
        let cat = b.cat(&self.name)?;
        let bytes = match cat.blob(&e.oid, e.size) {
            Ok(bytes) => Arc::new(bytes),
            Err(err) => {
                b.cat = None;
                return Err(err);
            }
        };
        b.read.insert(e.oid.clone(), bytes.clone());
        Ok(bytes)
    }

    /// Every symbolic link of the tree that resolves inside it: `(link, target)`, the
    /// target as a tree path (links to directories included). Links that leave the tree or
    /// loop are left out: reading through them is refused anyway.
    pub fn links(&self) -> Vec<(String, String)> {
        let links: Vec<&String> = self
            .entries
            .iter()
            .filter(|(_, e)| e.kind == EntryKind::Link)
            .map(|(p, _)| p)
            .collect();
        let _ = self.prefetch(links.iter().map(|p| p.as_str()));
        links
            .into_iter()
            .filter_map(|p| {
                let e = self.entries.get(p)?;
                if e.size > 4096 {
                    return None;
                }
                let target = String::from_utf8(self.blob(e).ok()?.as_ref().clone()).ok()?;
                let joined = lexical_join(p, &target)?;
                Some((p.clone(), joined))
            })
            .collect()
    }

    /// [`Revision::prefetch`] every file under `dirs` (a batch about to render).
    pub fn prefetch_under(&self, dirs: &[String]) -> Result<(), InputError> {
        let paths: Vec<&String> = dirs
            .iter()
            .flat_map(|d| self.under(d).map(|(p, _)| p))
            .collect();
        self.prefetch(paths.into_iter().map(String::as_str))
    }

    /// Forget the blobs of the files under `dirs` (a batch that is done), so memory holds
    /// what later batches read, not every file read so far. (They still count towards
    /// [`MAX_FETCH`], which bounds what one revision reads in all.)
    pub fn forget_under(&self, dirs: &[String]) {
        if let Ok(mut b) = self.blobs.lock() {
            for d in dirs {
                for (_, e) in self.under(d) {
                    b.read.remove(&e.oid);
                }
            }
        }
    }

    /// Resolve `rel` through symbolic links inside the tree: the path of the entry it
    /// names, or an error when a link leaves the tree or loops.
    fn resolve(&self, rel: &str) -> Result<Option<String>, InputError> {
        let mut path = rel.to_string();
        for _ in 0..MAX_LINKS {
            let Some(e) = self.entries.get(&path) else {
                return Ok(None);
            };
            if e.kind != EntryKind::Link {
                return Ok(Some(path));
            }
            if e.size > 4096 {
                return Err(git_error(format!(
                    "{}: a link target of {} bytes",
                    self.label(&path),
                    e.size
                )));
            }
            let target = String::from_utf8_lossy(&self.blob(e)?).into_owned();
            let outside = || InputError::Outside {
                path: self.label(rel),
                resolved: target.clone(),
                root: format!("{}:", self.name),
            };
            path = lexical_join(&path, &target).ok_or_else(outside)?;
        }
        Err(git_error(format!(
            "{}: too many levels of symbolic links",
            self.label(rel)
        )))
    }

    /// The bytes of the regular file `rel` (links followed inside the tree), at most
    /// `kind.cap()`; `None` when the tree has no file there.
    pub fn bytes(&self, rel: &str, kind: InputKind) -> Result<Option<Arc<Vec<u8>>>, InputError> {
        let Some(path) = self.resolve(rel)? else {
            return Ok(None);
        };
        let Some(e) = self.entries.get(&path) else {
            return Ok(None);
        };
        if e.kind == EntryKind::Submodule {
            return Err(InputError::NotRegular {
                path: self.label(rel),
                found: "a submodule",
            });
        }
        if e.size > kind.cap() {
            return Err(InputError::TooLarge {
                path: self.label(rel),
                cap: kind.cap(),
                what: kind.what(),
            });
        }
        self.blob(e).map(Some)
    }

    /// [`Revision::bytes`] as UTF-8 text.
    pub fn text(&self, rel: &str, kind: InputKind) -> Result<Option<String>, InputError> {
        match self.bytes(rel, kind)? {
            None => Ok(None),
            Some(b) => String::from_utf8(b.as_ref().clone())
                .map(Some)
                .map_err(|_| InputError::Yaml {
                    file: self.label(rel),
                    message: "not UTF-8 text".into(),
                }),
        }
    }

    /// Whether the tree holds a directory at `rel` (`""` is the root).
    pub fn is_dir(&self, rel: &str) -> bool {
        rel.is_empty() || self.under(rel).next().is_some()
    }

    /// The files under the directory `rel` (every depth), in path order.
    pub fn under<'a>(&'a self, rel: &str) -> impl Iterator<Item = (&'a String, &'a Entry)> {
        let prefix = if rel.is_empty() {
            String::new()
        } else {
            format!("{rel}/")
        };
        self.entries
            .range(prefix.clone()..)
            .take_while(move |(p, _)| p.starts_with(&prefix))
    }
}

/// The paths that differ between the working tree under `top` and `rev` (tracked files
/// changed, staged or not, and files git does not track, ignored ones included: the loader
/// reads them too), relative to `top`.
pub fn worktree_changes(top: &Path, rev: &str) -> Result<Vec<String>, InputError> {
    let mut out = Vec::new();
    for args in [
        &["diff", "--name-only", "-z", "--no-renames", rev][..],
        &["ls-files", "-z", "--others"][..],
    ] {
        let listed = git(top, args)?;
        for p in listed.split(|b| *b == 0).filter(|p| !p.is_empty()) {
            if out.len() >= MAX_ENTRIES {
                return Err(git_error(format!(
                    "more than {MAX_ENTRIES} files differ from `{rev}`"
                )));
            }
            out.push(String::from_utf8_lossy(p).into_owned());
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// A tree path from a directory and a name in it (`""` is the root).
fn join(dir: &str, name: &str) -> String {
    super::rel_join(dir, name)
}

fn not_found(path: String) -> InputError {
    InputError::Io {
        path,
        error: std::io::Error::from(std::io::ErrorKind::NotFound),
    }
}

/// The clusters of a revision under `dir` (tree path), by the rules of [`super::discover`]:
/// `dir` itself when it holds `cluster.yaml`, else `dir/clusters/*/`, else `dir/*/`; sorted.
pub fn discover(rev: &Revision, dir: &str) -> Result<Vec<String>, InputError> {
    let has_cluster = |d: &str| rev.entries.contains_key(&join(d, super::CLUSTER_FILE));
    if has_cluster(dir) {
        return Ok(vec![dir.to_string()]);
    }
    if !rev.is_dir(dir) {
        return Err(not_found(rev.label(dir)));
    }
    for base in [join(dir, "clusters"), dir.to_string()] {
        let mut found: Vec<String> = Vec::new();
        for (p, _) in rev.under(&base) {
            let rest = if base.is_empty() {
                p.as_str()
            } else {
                &p[base.len() + 1..]
            };
            if let Some((child, tail)) = rest.split_once('/') {
                if tail == super::CLUSTER_FILE {
                    found.push(join(&base, child));
                }
            }
        }
        if !found.is_empty() {
            found.sort();
            found.dedup();
            return Ok(found);
        }
    }
    Err(InputError::NoClusters {
        dir: rev.label(dir),
    })
}

/// The repository root of a cluster directory (tree paths): the parent of its `clusters/`.
pub fn repo_root(dir: &str) -> String {
    match dir.rsplit_once('/') {
        Some(("clusters", _)) => String::new(),
        Some((parent, _)) => parent
            .strip_suffix("/clusters")
            .map_or_else(|| dir.to_string(), str::to_string),
        None => dir.to_string(),
    }
}

/// Read one cluster directory of a revision (tree path), as [`super::load_cluster_with`]
/// does from disk without digests: `cluster.yaml`, the digest of `secrets.age`, and the
/// sealed files of `secrets/`.
pub fn load_cluster(rev: &Revision, dir: &str) -> Result<super::ClusterInput, InputError> {
    load(rev, dir, true)
}

/// [`load_cluster`] without `secrets.age` and the sealed files: what is needed to resolve
/// the cluster's overlays.
pub fn load_config(rev: &Revision, dir: &str) -> Result<super::ClusterInput, InputError> {
    load(rev, dir, false)
}

fn load(rev: &Revision, dir: &str, secrets: bool) -> Result<super::ClusterInput, InputError> {
    let path = join(dir, super::CLUSTER_FILE);
    let file = rev.label(&path);
    let text = rev
        .text(&path, InputKind::ClusterFile)?
        .ok_or_else(|| not_found(file.clone()))?;
    let value = super::parse_yaml_file(&file, &text)?;
    let config = super::ClusterConfig::from_value(&file, value)?;
    if !secrets {
        return Ok(super::ClusterInput {
            dir: dir.into(),
            file,
            config,
            text,
            root: repo_root(dir).into(),
            digests: Vec::new(),
            secrets_age_sha256: None,
            sealed: Vec::new(),
        });
    }
    let secrets_age_sha256 = rev
        .bytes(&join(dir, super::SECRETS_FILE), InputKind::SecretsAge)?
        .map(|b| crate::digest::sha256_hex(&b));
    let sealed_dir = join(dir, super::SEALED_DIR);
    let mut sealed = Vec::new();
    for (p, _) in rev.under(&sealed_dir) {
        let name = &p[sealed_dir.len() + 1..];
        if name.contains('/') || !super::is_sealed_name(name) {
            continue;
        }
        let text = rev
            .text(p, InputKind::Sealed)?
            .ok_or_else(|| not_found(rev.label(p)))?;
        sealed.push(super::SealedFile {
            rel: format!("{}/{name}", super::SEALED_DIR),
            path: rev.label(p),
            text,
            sha256: None,
        });
    }
    Ok(super::ClusterInput {
        dir: dir.into(),
        file,
        config,
        text,
        root: repo_root(dir).into(),
        digests: Vec::new(),
        secrets_age_sha256,
        sealed,
    })
}

/// The template overrides of a revision's repository at `root` (tree path): its
/// `templates/`, by the rules of [`super::load_templates`].
pub fn load_templates(
    rev: &Revision,
    root: &str,
) -> Result<Vec<super::TemplateOverride>, InputError> {
    let dir = join(root, "templates");
    let mut out = Vec::new();
    for (p, _) in rev.under(&dir) {
        let name = &p[dir.len() + 1..];
        match super::template_file(name) {
            None => continue,
            Some(false) => return Err(InputError::NotATemplate { path: rev.label(p) }),
            Some(true) => {}
        }
        let source = rev
            .text(p, InputKind::Template)?
            .ok_or_else(|| not_found(rev.label(p)))?;
        out.push(super::TemplateOverride {
            name: name.to_string(),
            origin: rev.label(p),
            source,
        });
    }
    Ok(out)
}

/// A cluster's overlays from a revision, by the rules of [`super::load_overlays`], read
/// through `cache` (one per revision).
pub fn load_overlays(
    rev: &Revision,
    c: &super::ClusterInput,
    cache: &super::OverlayCache,
) -> Result<super::LoadedOverlays, InputError> {
    let root = c.root.to_string_lossy().into_owned();
    super::resolve_overlays(c, &|rel, from_file, field| {
        let key = std::path::PathBuf::from(join(&root, rel));
        if let Some(hit) = cache.loaded.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(hit);
        }
        let dir = join(&root, rel);
        let path = join(&dir, super::OVERLAY_FILE);
        let text = rev.text(&path, InputKind::Overlay)?.ok_or_else(|| {
            super::overlay_error(
                from_file,
                field,
                format!(
                    "`{}` is not an overlay: expected the file {}",
                    rev.label(&dir),
                    rev.label(&path)
                ),
            )
        })?;
        let loaded = Arc::new(super::overlay_from_text(
            &c.root,
            rel,
            rev.label(&path),
            &text,
            |frel, _| {
                let p = join(&root, frel);
                match rev.text(&p, InputKind::Overlay) {
                    Ok(Some(text)) => Ok((rev.label(&p), text)),
                    Ok(None) => Err(super::OverlayRead::Refused(format!(
                        "{}: no such file",
                        rev.label(&p)
                    ))),
                    Err(e) => Err(super::OverlayRead::Input(e)),
                }
            },
        )?);
        if let Ok(mut m) = cache.loaded.lock() {
            m.insert(key, loaded.clone());
        }
        Ok(loaded)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: EntryKind, oid: &str, size: u64) -> Entry {
        Entry {
            kind,
            oid: oid.into(),
            size,
        }
    }

    fn rev() -> Revision {
        let mut e = BTreeMap::new();
        e.insert("a/f.yaml".into(), entry(EntryKind::File, "1", 3));
        e.insert("a/link.yaml".into(), entry(EntryKind::Link, "2", 6));
        e.insert("a/out.yaml".into(), entry(EntryKind::Link, "3", 12));
        e.insert("a/loop".into(), entry(EntryKind::Link, "4", 4));
        e.insert("sub".into(), entry(EntryKind::Submodule, "5", 0));
        e.insert("big".into(), entry(EntryKind::File, "6", 2 << 20));
        let mut b = HashMap::new();
        b.insert("1".into(), b"x: 1".to_vec());
        b.insert("2".into(), b"f.yaml".to_vec());
        b.insert("3".into(), b"../../etc/pw".to_vec());
        b.insert("4".into(), b"loop".to_vec());
        Revision::from_parts("main", e, b)
    }

    #[test]
    fn reads_files_and_links_inside_the_tree_and_refuses_the_rest() {
        let r = rev();
        assert_eq!(
            r.text("a/f.yaml", InputKind::Overlay).unwrap().as_deref(),
            Some("x: 1")
        );
        assert_eq!(
            r.text("a/link.yaml", InputKind::Overlay)
                .unwrap()
                .as_deref(),
            Some("x: 1")
        );
        assert!(r.text("a/none.yaml", InputKind::Overlay).unwrap().is_none());
        let e = r.text("a/out.yaml", InputKind::Overlay).unwrap_err();
        assert!(matches!(e, InputError::Outside { .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with("main:a/out.yaml: resolves to ../../etc/pw"),
            "{e}"
        );
        let e = r.text("a/loop", InputKind::Overlay).unwrap_err();
        assert!(e.to_string().contains("too many levels"), "{e}");
        let e = r.text("sub", InputKind::Overlay).unwrap_err();
        assert!(matches!(e, InputError::NotRegular { .. }), "{e}");
        let e = r.text("big", InputKind::ClusterFile).unwrap_err();
        assert!(matches!(e, InputError::TooLarge { .. }), "{e}");
        assert!(r.is_dir("a") && r.is_dir("") && !r.is_dir("a/f.yaml") && !r.is_dir("b"));
        assert_eq!(r.under("a").count(), 4);
    }

    #[test]
    fn parses_ls_tree_output() {
        let out = b"100644 blob aaa      12\tclusters/x/cluster.yaml\x00120000 blob bbb       5\tl\x00160000 commit ccc       -\tsub\x00040000 tree ddd       -\tskipped\x00";
        let e = parse_listing(out).unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!(
            e["clusters/x/cluster.yaml"],
            entry(EntryKind::File, "aaa", 12)
        );
        assert_eq!(e["l"].kind, EntryKind::Link);
        assert_eq!(e["sub"], entry(EntryKind::Submodule, "ccc", 0));
        assert!(parse_listing(b"garbage\0").is_err());
    }
    #[test]
    fn discovers_clusters_by_the_loaders_rules() {
        let mut e = BTreeMap::new();
        for p in [
            "repo/clusters/a/cluster.yaml",
            "repo/clusters/b/cluster.yaml",
            "repo/clusters/b/secrets/x.yaml",
            "repo/overlays/o/overlay.yaml",
            "flat/c/cluster.yaml",
        ] {
            e.insert(p.to_string(), entry(EntryKind::File, "1", 1));
        }
        let r = Revision::from_parts("main", e, HashMap::new());
        assert_eq!(
            discover(&r, "repo").unwrap(),
            ["repo/clusters/a", "repo/clusters/b"]
        );
        assert_eq!(
            discover(&r, "repo/clusters/b").unwrap(),
            ["repo/clusters/b"]
        );
        assert_eq!(discover(&r, "flat").unwrap(), ["flat/c"]);
        assert!(matches!(
            discover(&r, "repo/overlays"),
            Err(InputError::NoClusters { .. })
        ));
        assert!(discover(&r, "nowhere").is_err());
        assert_eq!(repo_root("clusters/a"), "");
        assert_eq!(repo_root("repo/clusters/a"), "repo");
        assert_eq!(repo_root("flat/c"), "flat/c");
        assert_eq!(repo_root("c"), "c");
    }
}
