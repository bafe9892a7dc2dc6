//! A git revision's files, read from the repository's object store into memory: the tree
//! listing from `git ls-tree`, the blobs that are needed, as they are needed, from one `git cat-file --batch`.
//! Nothing is checked out and nothing is written, so a killed run leaves nothing behind (the
//! `git cat-file` ends when its input closes).
//!
//! The repository is found once, by capstan, never by git ([`Repository::find`]: a `.git`
//! from the given directory up, never a bare repository's layout, a planted `.git` skipped),
//! and every git command runs pinned to it with nothing configured that runs a command
//! (fsmonitor, hooks, filters, external diff, textconv, pager, transports): see
//! [`repository`]. Reading a revision runs nothing the repository or its content configures.
//!
//! A revision is untrusted input like a working tree, with the same rules: paths stay inside
//! the repository (a symbolic link is resolved inside the tree, lexically, and refused when
//! it leaves it), only regular files are read (a submodule is not one), and every cost is
//! bounded (entries listed, bytes fetched, each file's size by its kind's cap, known from the
//! listing before anything is read).

use super::{InputError, InputKind};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex};

pub mod repository;
pub use repository::Repository;

/// At most this many entries in a revision's tree.
pub const MAX_ENTRIES: usize = 500_000;
/// At most this many bytes fetched from one revision (the files a review reads).
pub const MAX_FETCH: u64 = 1 << 30;
/// At most this many bytes of one git listing (`ls-tree`, `diff --name-only`, `ls-files`),
/// counted while it is read: a hostile tree never makes capstan hold more.
pub const MAX_LISTING: u64 = 256 << 20;
/// At most this many bytes in one record of a listing (git's paths are at most 4,096 bytes).
const MAX_RECORD: u64 = 16 << 10;
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
    /// A file or link whose blob the repository does not hold (a partial clone's, which
    /// `git ls-tree -l` sizes `BAD`): capstan never fetches one, so reading it is refused.
    Missing,
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
    /// Whether any entry is a symbolic link (else paths need no resolving).
    has_links: bool,
    blobs: Mutex<Blobs>,
}

/// The blobs read so far, and the `git cat-file --batch` that reads more (`None` for a
/// revision built in memory).
#[derive(Debug, Default)]
struct Blobs {
    read: HashMap<String, Arc<Vec<u8>>>,
    total: u64,
    cat: Option<CatFile>,
    repo: Option<Repository>,
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
            let repo = self
                .repo
                .as_ref()
                .ok_or_else(|| git_error(format!("`{revision}`: no repository to read")))?;
            self.cat = Some(CatFile::start(repo)?);
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
    fn start(repo: &Repository) -> Result<CatFile, InputError> {
        let mut child = repo
            .command(&["cat-file", "--batch"])
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

/// The tree path a link at `link` with target `target` names: the loader's own lexical
/// join ([`super::join_rel`]) against the link's directory; `None` when the target is
/// absolute or climbs out of the tree.
fn lexical_join(link: &str, target: &str) -> Option<String> {
    let dir = link.rsplit_once('/').map_or("", |(d, _)| d);
    super::join_rel(std::path::Path::new(""), dir, target).ok()
}

/// Read NUL-terminated records from `r` and hand each (without its NUL) to `each`, as
/// they arrive: at most `max_records` records, [`MAX_RECORD`] bytes each and
/// [`MAX_LISTING`] bytes in all, so memory holds one record, never the whole listing.
/// `what` names the listing in errors.
fn read_records(
    r: impl Read,
    max_records: usize,
    what: &str,
    mut each: impl FnMut(&[u8]) -> Result<(), InputError>,
) -> Result<(), InputError> {
    let mut r = BufReader::new(r);
    let (mut total, mut count) = (0u64, 0usize);
    let mut record = Vec::new();
    loop {
        record.clear();
        let n = (&mut r)
            .take(MAX_RECORD + 1)
            .read_until(0, &mut record)
            .map_err(|e| git_error(format!("{what}: {e}")))?;
        if n == 0 {
            return Ok(());
        }
        total += n as u64;
        if total > MAX_LISTING {
            return Err(git_error(format!(
                "{what}: more than {MAX_LISTING} bytes of output"
            )));
        }
        if record.last() == Some(&0) {
            record.pop();
        } else if n as u64 > MAX_RECORD {
            return Err(git_error(format!(
                "{what}: a record longer than {MAX_RECORD} bytes"
            )));
        }
        if record.is_empty() {
            continue;
        }
        count += 1;
        if count > max_records {
            return Err(git_error(format!("{what}: more than {max_records} files")));
        }
        each(&record)?;
    }
}

/// Run git in `repo` with `args` and read its stdout as NUL-terminated records
/// ([`read_records`]); git is stopped as soon as a cap is reached.
fn git_records(
    repo: &Repository,
    args: &[&str],
    max_records: usize,
    each: impl FnMut(&[u8]) -> Result<(), InputError>,
) -> Result<(), InputError> {
    let what = format!("git {}", args.join(" "));
    let mut child = repo
        .command(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| git_error(format!("cannot run git: {e}")))?;
    let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(git_error(format!("{what}: no pipes")));
    };
    // stderr is drained beside stdout (git blocks on a full pipe); its first 64 KiB kept.
    let errors = std::thread::spawn(move || {
        let mut kept = Vec::new();
        let _ = (&mut stderr).take(64 << 10).read_to_end(&mut kept);
        let _ = std::io::copy(&mut stderr, &mut std::io::sink());
        kept
    });
    let read = read_records(stdout, max_records, &what, each);
    if read.is_err() {
        let _ = child.kill();
    }
    let status = child.wait();
    let errors = errors.join().unwrap_or_default();
    read?;
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(_) => Err(git_error(format!(
            "{what}: {}",
            String::from_utf8_lossy(&errors).trim()
        ))),
        Err(e) => Err(git_error(format!("{what}: {e}"))),
    }
}

/// One record of `git ls-tree -r -z -l` output: the path and its entry, `None` for what
/// capstan never reads (a path that is not UTF-8, a mode it does not know).
fn parse_record(record: &[u8]) -> Result<Option<(String, Entry)>, InputError> {
    let bad = || git_error("unexpected `git ls-tree` output".into());
    let tab = record.iter().position(|b| *b == b'\t').ok_or_else(bad)?;
    let meta = std::str::from_utf8(&record[..tab]).map_err(|_| bad())?;
    // A path that is not UTF-8 is none capstan reads (its inputs are named in UTF-8
    // YAML): left out of the listing, instead of failing every review.
    let Ok(path) = String::from_utf8(record[tab + 1..].to_vec()) else {
        return Ok(None);
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
        _ => return Ok(None),
    };
    let (kind, size) = match (kind, size) {
        // `git ls-tree -l` sizes a blob it cannot find `BAD` (builtin/ls-tree.c).
        (EntryKind::File | EntryKind::Link, "BAD") => (EntryKind::Missing, "0"),
        other => other,
    };
    let size = if size == "-" {
        0
    } else {
        size.parse().map_err(|_| bad())?
    };
    Ok(Some((
        path,
        Entry {
            kind,
            oid: oid.to_string(),
            size,
        },
    )))
}

impl Revision {
    /// List the tree of `rev` in `repo` (no blob is read yet).
    pub fn list(repo: &Repository, rev: &str) -> Result<Revision, InputError> {
        let commit = repo
            .output(&[
                "rev-parse",
                "--verify",
                "--quiet",
                "--end-of-options",
                &format!("{rev}^{{commit}}"),
            ])
            .map_err(|_| {
                git_error(format!(
                    "`{rev}` is not a commit of {}",
                    repo.work_tree().display()
                ))
            })?;
        let commit = String::from_utf8_lossy(&commit).trim().to_string();
        let mut entries = BTreeMap::new();
        git_records(
            repo,
            &["ls-tree", "-r", "-z", "-l", "--full-tree", &commit],
            MAX_ENTRIES,
            |record| {
                if let Some((path, entry)) = parse_record(record)? {
                    entries.insert(path, entry);
                }
                Ok(())
            },
        )?;
        Ok(Revision {
            name: rev.to_string(),
            commit,
            has_links: entries.values().any(|e| e.kind == EntryKind::Link),
            entries,
            blobs: Mutex::new(Blobs {
                repo: Some(repo.clone()),
                ..Blobs::default()
            }),
        })
    }

    /// A revision made of the given entries and blobs (for tests).
    #[cfg(any(test, feature = "testkit"))]
    pub fn from_parts(
        name: &str,
        entries: BTreeMap<String, Entry>,
        blobs: HashMap<String, Vec<u8>>,
    ) -> Revision {
        Revision {
            name: name.to_string(),
            commit: String::new(),
            has_links: entries.values().any(|e| e.kind == EntryKind::Link),
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

    /// How a path of this revision is shown in messages: `REV:path`, the path as
    /// [`crate::printable::line`] (a name in the tree cannot start a line of a message).
    pub fn label(&self, rel: &str) -> String {
        format!("{}:{}", self.name, crate::printable::line(rel))
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
            if matches!(e.kind, EntryKind::Submodule | EntryKind::Missing)
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
        let dirs: Vec<String> = dirs.iter().filter_map(|d| self.walk(d).ok()).collect();
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
        // Links are resolved before the lock is taken: resolving one may read its blob.
        let dirs: Vec<String> = dirs.iter().filter_map(|d| self.walk(d).ok()).collect();
        if let Ok(mut b) = self.blobs.lock() {
            for d in &dirs {
                for (_, e) in self.under(d) {
                    b.read.remove(&e.oid);
                }
            }
        }
    }

    /// `rel` with every symbolic link along it resolved inside the tree (a link to a
    /// directory as the disk loader follows one: lexically, against the link's directory),
    /// the last component too: the tree path it names, which may be a file, a directory or
    /// nothing. A link that leaves the tree is refused ([`InputError::Outside`]), and more
    /// than 40 links in a row are a loop.
    pub fn walk(&self, rel: &str) -> Result<String, InputError> {
        let mut path = rel.to_string();
        if !self.has_links {
            return Ok(path);
        }
        let mut hops = 0;
        'walk: loop {
            let mut end = 0;
            loop {
                let next = path[end..].find('/').map(|i| end + i);
                let prefix = &path[..next.unwrap_or(path.len())];
                match self.entries.get(prefix) {
                    Some(e) if e.kind == EntryKind::Link => {
                        hops += 1;
                        if hops > MAX_LINKS {
                            return Err(git_error(format!(
                                "{}: too many levels of symbolic links",
                                self.label(rel)
                            )));
                        }
                        if e.size > 4096 {
                            return Err(git_error(format!(
                                "{}: a link target of {} bytes",
                                self.label(prefix),
                                e.size
                            )));
                        }
                        let target = String::from_utf8_lossy(&self.blob(e)?).into_owned();
                        let joined =
                            lexical_join(prefix, &target).ok_or_else(|| InputError::Outside {
                                path: self.label(rel),
                                resolved: target.clone(),
                                root: format!("{}:", self.name),
                            })?;
                        let rest = next.map_or("", |n| &path[n + 1..]);
                        path = join_tree(&joined, rest);
                        continue 'walk;
                    }
                    // A file (or nothing) where a directory is named: nothing to follow.
                    Some(_) => return Ok(path),
                    None => {}
                }
                match next {
                    Some(n) => end = n + 1,
                    None => return Ok(path),
                }
            }
        }
    }

    /// Resolve `rel` through symbolic links inside the tree: the path of the entry it
    /// names, or an error when a link leaves the tree or loops.
    fn resolve(&self, rel: &str) -> Result<Option<String>, InputError> {
        let path = self.walk(rel)?;
        Ok(self.entries.contains_key(&path).then_some(path))
    }

    /// The bytes of the regular file `rel` (links followed inside the tree), at most
    /// `kind.cap()`; `None` when the tree has no file there.
    pub fn bytes(&self, rel: &str, kind: InputKind) -> Result<Option<Arc<Vec<u8>>>, InputError> {
        let Some(path) = self.resolve(rel)? else {
            if rel != self.walk(rel)? && self.is_dir(rel) {
                return Err(InputError::NotRegular {
                    path: self.label(rel),
                    found: "a directory",
                });
            }
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
        if e.kind == EntryKind::Missing {
            return Err(git_error(format!(
                "{}: object {} is not in the repository (a partial clone?); capstan never fetches: fetch the revisions' files first",
                self.label(rel),
                e.oid
            )));
        }
        if e.size > kind.cap() {
            return Err(InputError::TooLarge {
                path: self.label(rel),
                cap: kind.cap(),
                what: kind.what(),
                raise: kind.raise(),
            });
        }
        self.blob(e).map(Some)
    }

    /// [`Revision::bytes`] as UTF-8 text.
    #[cfg(any(test, feature = "testkit"))]
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

    /// Whether the tree holds a directory at `rel` (`""` is the root; links followed).
    pub fn is_dir(&self, rel: &str) -> bool {
        rel.is_empty()
            || self
                .walk(rel)
                .is_ok_and(|d| d.is_empty() || self.under(&d).next().is_some())
    }

    /// The files under the directory `rel` (every depth), in path order, as listed: a
    /// link on the way is not followed (see [`Revision::walk`]).
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

/// A revision as a [`super::Tree`]: tree paths, links resolved inside the tree, labels
/// `REV:path`. A path that is not UTF-8 names nothing (every tree path is).
impl super::Tree for Revision {
    fn read(
        &self,
        path: &std::path::Path,
        kind: InputKind,
    ) -> Result<Option<super::tree::Blob>, InputError> {
        match path.to_str() {
            Some(p) => self.bytes(p, kind),
            None => Ok(None),
        }
    }

    fn list(&self, path: &std::path::Path) -> Result<Option<Vec<super::tree::Child>>, InputError> {
        let Some(p) = path.to_str() else {
            return Ok(None);
        };
        let real = self.walk(p)?;
        if !(real.is_empty() || self.under(&real).next().is_some()) {
            return Ok(None);
        }
        let mut out: Vec<super::tree::Child> = Vec::new();
        for (q, _) in self.under(&real) {
            let rest = below(&real, q);
            let (name, dir) = match rest.split_once('/') {
                Some((child, _)) => (child, true),
                None => (rest, false),
            };
            if out
                .last()
                .is_none_or(|c: &super::tree::Child| c.name != name)
            {
                out.push(super::tree::Child {
                    name: name.to_string(),
                    dir,
                });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out.dedup_by(|a, b| a.name == b.name);
        Ok(Some(out))
    }

    fn exists(&self, path: &std::path::Path) -> bool {
        let Some(p) = path.to_str() else {
            return false;
        };
        match self.resolve(p) {
            Ok(found) => found.is_some() || self.is_dir(p),
            Err(e) => matches!(e, InputError::Outside { .. }),
        }
    }

    fn confine(&self, dir: &std::path::Path) -> Result<(), InputError> {
        match dir.to_str() {
            Some(p) => self.walk(p).map(|_| ()),
            None => Ok(()),
        }
    }

    fn label(&self, path: &std::path::Path) -> String {
        Revision::label(self, &path.to_string_lossy())
    }
}

/// The paths that differ between the work tree of `repo` and `rev` (tracked files
/// changed, staged or not, and files git does not track, except those it ignores
/// (`.gitignore`, `.git/info/exclude`, `core.excludesFile`): build output is neither read
/// nor counted as a change), relative to its top. Each listing is read as it streams, at
/// most [`MAX_ENTRIES`] paths and [`MAX_LISTING`] bytes. No external diff, textconv or
/// submodule status runs (a submodule whose commit changed is still listed).
pub fn worktree_changes(repo: &Repository, rev: &str) -> Result<Vec<String>, InputError> {
    let mut out = Vec::new();
    for args in [
        &[
            "diff",
            "--name-only",
            "-z",
            "--no-renames",
            "--no-ext-diff",
            "--no-textconv",
            "--ignore-submodules=dirty",
            "--end-of-options",
            rev,
            "--",
        ][..],
        &["ls-files", "-z", "--others", "--exclude-standard"][..],
    ] {
        let room = MAX_ENTRIES.saturating_sub(out.len());
        git_records(repo, args, room, |p| {
            out.push(String::from_utf8_lossy(p).into_owned());
            Ok(())
        })
        .map_err(|e| match e {
            InputError::Git { message } if message.contains("more than") => git_error(format!(
                "more than {MAX_ENTRIES} files differ from `{rev}` ({message})"
            )),
            e => e,
        })?;
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The part of `path` below the directory `dir` (a path [`Revision::under`] listed).
fn below<'a>(dir: &str, path: &'a str) -> &'a str {
    if dir.is_empty() {
        path
    } else {
        path.get(dir.len() + 1..).unwrap_or_default()
    }
}

/// A tree path from a directory and a path below it (either may be `""`).
pub fn join_tree(dir: &str, rest: &str) -> String {
    match (dir.is_empty(), rest.is_empty()) {
        (_, true) => dir.to_string(),
        (true, false) => rest.to_string(),
        (false, false) => format!("{dir}/{rest}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clusters of a revision by the one loader's rules, as tree paths.
    fn discover(r: &Revision, dir: &str) -> Result<Vec<String>, InputError> {
        Ok(
            crate::inputs::cluster::discover(r, std::path::Path::new(dir))?
                .into_iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect(),
        )
    }

    fn repo_root(dir: &str) -> String {
        crate::inputs::tree::tree_root(dir)
    }

    /// Parse `git ls-tree -r -z -l` output as it is read (at most [`MAX_ENTRIES`] entries).
    fn parse_listing(out: impl Read, what: &str) -> Result<BTreeMap<String, Entry>, InputError> {
        let mut entries = BTreeMap::new();
        read_records(out, MAX_ENTRIES, what, |record| {
            if let Some((path, entry)) = parse_record(record)? {
                entries.insert(path, entry);
            }
            Ok(())
        })?;
        Ok(entries)
    }

    /// An endless stream repeating `pattern`.
    struct Endless {
        pattern: Vec<u8>,
        at: usize,
    }

    impl Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            for b in buf.iter_mut() {
                *b = self.pattern[self.at];
                self.at = (self.at + 1) % self.pattern.len();
            }
            Ok(buf.len())
        }
    }

    fn endless(pattern: &[u8]) -> Endless {
        Endless {
            pattern: pattern.to_vec(),
            at: 0,
        }
    }

    #[test]
    fn listings_are_capped_while_they_stream() {
        // An endless listing ends at the entry cap: it is never held whole.
        let record = b"100644 blob 0123456789abcdef0123456789abcdef01234567      12\tf\0";
        let e = parse_listing(endless(record), "ls-tree").unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("more than {MAX_ENTRIES} files")),
            "{e}"
        );
        // A record without end, and records that add up to more than the byte cap.
        let e = read_records(endless(b"a"), usize::MAX, "ls-tree", |_| Ok(())).unwrap_err();
        assert!(e.to_string().contains("a record longer than"), "{e}");
        let mut long = vec![b'a'; MAX_RECORD as usize - 1];
        long.push(0);
        let mut seen = 0u64;
        let e = read_records(endless(&long), usize::MAX, "ls-tree", |r| {
            seen += r.len() as u64 + 1;
            Ok(())
        })
        .unwrap_err();
        assert!(e.to_string().contains("bytes of output"), "{e}");
        assert!(seen <= MAX_LISTING, "{seen}");
        // A last record without its NUL is still a record.
        let mut got = Vec::new();
        read_records(&b"a\0b"[..], 2, "x", |r| {
            got.push(r.to_vec());
            Ok(())
        })
        .unwrap();
        assert_eq!(got, [b"a".to_vec(), b"b".to_vec()]);
    }

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
    fn directory_links_are_followed_inside_the_tree_only() {
        let mut e = BTreeMap::new();
        e.insert(
            "fleet/x/cluster.yaml".into(),
            entry(EntryKind::File, "1", 4),
        );
        e.insert(
            "fleet/x/secrets/s.yaml".into(),
            entry(EntryKind::File, "1", 4),
        );
        e.insert("clusters/x".into(), entry(EntryKind::Link, "2", 11));
        e.insert(
            "clusters/y/cluster.yaml".into(),
            entry(EntryKind::File, "1", 4),
        );
        e.insert("clusters/out".into(), entry(EntryKind::Link, "3", 15));
        e.insert("clusters/loop".into(), entry(EntryKind::Link, "4", 4));
        e.insert("clusters/d.yaml".into(), entry(EntryKind::Link, "5", 8));
        let mut b = HashMap::new();
        b.insert("1".into(), b"x: 1".to_vec());
        b.insert("2".into(), b"../fleet/x".to_vec());
        b.insert("3".into(), b"../../elsewhere".to_vec());
        b.insert("4".into(), b"loop".to_vec());
        b.insert("5".into(), b"../fleet".to_vec());
        let r = Revision::from_parts("main", e, b);
        // Read through a directory link, as the disk loader reads.
        assert_eq!(
            r.walk("clusters/x/cluster.yaml").unwrap(),
            "fleet/x/cluster.yaml"
        );
        assert_eq!(r.walk("clusters/x").unwrap(), "fleet/x");
        assert_eq!(
            r.text("clusters/x/cluster.yaml", InputKind::ClusterFile)
                .unwrap()
                .as_deref(),
            Some("x: 1")
        );
        assert!(r.is_dir("clusters/x"));
        // The link leaving the tree counts as a cluster (loading it says why); the loop not.
        assert_eq!(
            discover(&r, "").unwrap(),
            ["clusters/out", "clusters/x", "clusters/y"]
        );
        let e = r
            .text("clusters/out/cluster.yaml", InputKind::ClusterFile)
            .unwrap_err();
        assert!(matches!(e, InputError::Outside { .. }), "{e}");
        let e = r.walk("clusters/loop/cluster.yaml").unwrap_err();
        assert!(e.to_string().contains("too many levels"), "{e}");
        // A link to a directory where a file belongs is not a file.
        let e = r.text("clusters/d.yaml", InputKind::Overlay).unwrap_err();
        assert!(matches!(e, InputError::NotRegular { .. }), "{e}");
        // A linked cluster's sealed files are listed where the link leads.
        let sealed = r.walk("clusters/x/secrets").unwrap();
        assert_eq!(r.under(&sealed).count(), 1);
        assert_eq!(join_tree("", "a"), "a");
        assert_eq!(join_tree("a", ""), "a");
        assert_eq!(below("", "a/b"), "a/b");
        assert_eq!(below("a", "a/b"), "b");
    }

    #[test]
    fn parses_ls_tree_output() {
        let out = b"100644 blob aaa      12\tclusters/x/cluster.yaml\x00120000 blob bbb       5\tl\x00160000 commit ccc       -\tsub\x00040000 tree ddd       -\tskipped\x00100644 blob eee     BAD\tgone\x00";
        let e = parse_listing(&out[..], "ls-tree").unwrap();
        assert_eq!(e.len(), 4);
        assert_eq!(e["gone"], entry(EntryKind::Missing, "eee", 0));
        assert_eq!(
            e["clusters/x/cluster.yaml"],
            entry(EntryKind::File, "aaa", 12)
        );
        assert_eq!(e["l"].kind, EntryKind::Link);
        assert_eq!(e["sub"], entry(EntryKind::Submodule, "ccc", 0));
        assert!(parse_listing(&b"garbage\0"[..], "ls-tree").is_err());
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
