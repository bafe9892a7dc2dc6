//! The git repository a review reads, found once by capstan itself, and the one place that
//! starts git: every command runs pinned to that repository with every configured command
//! switched off, so reading a revision never runs anything a repository or its content
//! configures.
//!
//! **Discovery** ([`Repository::find`]) walks up from the given directory (canonical) and
//! takes the first `D/.git` that is a git directory (or a `gitdir:` file naming one, as a
//! linked worktree or a submodule has): `D` is the work tree. Unlike git's own discovery
//! (`setup_git_directory_gently_1` in git's `setup.c`), a directory is never taken as a
//! bare repository: a pull request can commit a bare repository's layout (`HEAD`,
//! `objects/`, `refs/`, `config`) anywhere in its tree, and git would open it and run its
//! `core.fsmonitor` (git's answer is `safe.bareRepository=explicit`,
//! <https://git-scm.com/docs/git-config#Documentation/git-config.txt-safebareRepository>).
//! A `.git` that reaches a git directory whose `HEAD` is tracked content of the enclosing
//! repository is skipped as planted: a checkout never writes a path with a `.git`
//! component (git's `verify_path`, `read-cache.c`), so such a `.git` was written by
//! something else, and the files it points at came from a commit. A `.git` directory, or
//! one whose git directory is not tracked (a dotfiles repository in `$HOME` with the fleet
//! repository below it), is taken as git would take it.
//!
//! **Pinning** ([`Repository::command`]): `git --no-pager --git-dir=… --work-tree=…`, the
//! environment's `GIT_*` variables removed (but git's own installation, tracing and
//! global-configuration variables), and configuration given in the `command` scope, which
//! wins over every configuration file (`GIT_CONFIG_COUNT`,
//! <https://git-scm.com/docs/git-config#SCOPES>): no fsmonitor, no hooks, no pager, every
//! configured filter driver emptied (an empty command is no filter: `apply_filter`,
//! `convert.c`, v2.39.5 line 1002 and v2.47.0 line 1014), no transport (a lazy fetch of a
//! partial clone's missing object would start one): `GIT_NO_LAZY_FETCH=1` (git 2.39.4 and
//! later), `GIT_ALLOW_PROTOCOL=none` (every protocol refused whatever the configuration:
//! `protocol_allow_list`, `transport.c`), no optional index write (`GIT_OPTIONAL_LOCKS=0`,
//! so no `post-index-change` hook either), no replace refs. `diff` runs with
//! `--no-ext-diff --no-textconv --ignore-submodules=dirty` (no external diff, textconv or
//! `git status` in a submodule).

use super::super::InputError;
use super::git_error;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The largest `.git` file read (git reads up to 1 MiB; a real one is one path).
const MAX_GITFILE: u64 = 64 << 10;

/// Environment variables of git kept from capstan's environment: where git is installed,
/// its tracing, and where the caller's own global and system configuration is. Every
/// other `GIT_*` variable is removed (`GIT_DIR`, `GIT_WORK_TREE`, `GIT_INDEX_FILE`,
/// `GIT_EXTERNAL_DIFF`, `GIT_CONFIG_PARAMETERS`, `GIT_ATTR_SOURCE`…): the repository is the
/// one capstan found, and the command-scope configuration is exactly capstan's.
const KEPT_ENV: [&str; 5] = [
    "GIT_EXEC_PATH",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
    "GIT_TEMPLATE_DIR",
];

/// Environment every git command gets (git(1), ENVIRONMENT).
const ENV: [(&str, &str); 7] = [
    // No optional index refresh written back: nothing written, no `post-index-change`.
    ("GIT_OPTIONAL_LOCKS", "0"),
    // A partial clone's missing object is an error, not a fetch (git ≥ 2.39.4).
    ("GIT_NO_LAZY_FETCH", "1"),
    // Every transport refused, whatever `protocol.*.allow` says: the list names none.
    ("GIT_ALLOW_PROTOCOL", "none"),
    ("GIT_PROTOCOL_FROM_USER", "0"),
    ("GIT_TERMINAL_PROMPT", "0"),
    // The objects at the commits, not what `refs/replace/` substitutes.
    ("GIT_NO_REPLACE_OBJECTS", "1"),
    // A path capstan passes is a path, never a glob.
    ("GIT_LITERAL_PATHSPECS", "1"),
];

/// Configuration every git command gets in the command scope (it wins over the system,
/// global, repository and worktree files).
const CONFIG: [(&str, &str); 6] = [
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("protocol.allow", "never"),
    ("submodule.recurse", "false"),
    // Any git a command starts refuses an implicit bare repository too.
    ("safe.bareRepository", "explicit"),
];

/// A git repository found by [`Repository::find`]: its work tree and git directory
/// (canonical), and the overrides of the filter drivers and hooks its configuration names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repository {
    work_tree: PathBuf,
    git_dir: PathBuf,
    overrides: Vec<(String, String)>,
}

impl Repository {
    /// The repository whose work tree holds `dir` (see the module docs), or an error when
    /// there is none.
    pub fn discover(dir: &Path) -> Result<Repository, InputError> {
        Repository::find(dir)?.ok_or_else(|| {
            git_error(format!(
                "{}: not in a git work tree (no `.git` in it or above it; a bare repository is never used)",
                dir.display()
            ))
        })
    }

    /// The repository whose work tree holds `dir`, `None` when no directory from `dir` up
    /// has a `.git`.
    pub fn find(dir: &Path) -> Result<Option<Repository>, InputError> {
        let start = std::fs::canonicalize(dir).map_err(|error| InputError::Io {
            path: dir.display().to_string(),
            error,
        })?;
        let mut at = Some(start.as_path());
        while let Some(d) = at {
            if let Some(git_dir) = git_dir_at(d)? {
                if let Some(outer) = Repository::enclosing(d, &git_dir)? {
                    return Ok(Some(outer));
                }
                return Ok(Some(Repository::open(d, git_dir)?));
            }
            at = d.parent();
        }
        Ok(None)
    }

    /// When the git directory `git_dir` found at `d` is tracked content of a repository
    /// above `d`, that repository (the `.git` at `d` was planted); else `None`.
    fn enclosing(d: &Path, git_dir: &Path) -> Result<Option<Repository>, InputError> {
        // A path with a `.git` component is never tracked (git's verify_path): nothing to
        // ask. Only a git directory elsewhere may be a committed one.
        if git_dir
            .components()
            .any(|c| c.as_os_str().eq_ignore_ascii_case(".git"))
        {
            return Ok(None);
        }
        let Some(outer) = d.parent().map(Repository::find).transpose()?.flatten() else {
            return Ok(None);
        };
        let Ok(rel) = git_dir.strip_prefix(&outer.work_tree) else {
            return Ok(None);
        };
        let mut head = rel.as_os_str().to_owned();
        head.push(if rel.as_os_str().is_empty() {
            "HEAD"
        } else {
            "/HEAD"
        });
        let out = outer.output(&[
            OsStr::new("ls-files"),
            OsStr::new("-z"),
            OsStr::new("--"),
            &head,
        ])?;
        Ok((!out.is_empty()).then_some(outer))
    }

    /// The repository with work tree `work_tree` and git directory `git_dir`: the filter
    /// drivers and hooks its configuration names are read (by the pinned git) to be
    /// switched off.
    fn open(work_tree: &Path, git_dir: PathBuf) -> Result<Repository, InputError> {
        let mut repo = Repository {
            work_tree: work_tree.to_path_buf(),
            git_dir,
            overrides: Vec::new(),
        };
        repo.overrides = repo.command_overrides()?;
        Ok(repo)
    }

    /// The work tree's top directory (canonical).
    pub fn work_tree(&self) -> &Path {
        &self.work_tree
    }

    /// The git directory (canonical).
    #[cfg(any(test, feature = "testkit"))]
    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    /// For each filter driver the configuration names, its commands emptied and
    /// `required` off; for each configured hook (`hook.<name>.command`, git ≥ 2.54), the
    /// hook disabled.
    fn command_overrides(&self) -> Result<Vec<(String, String)>, InputError> {
        let mut c = self.command(&["config", "-z", "--get-regexp", r"^(filter|hook)\."]);
        let out = c
            .output()
            .map_err(|e| git_error(format!("cannot run git: {e}")))?;
        // `git config --get-regexp` exits 1 when nothing matches.
        let nothing_matched = out.status.code() == Some(1) && out.stdout.is_empty();
        if !out.status.success() && !nothing_matched {
            return Err(git_error(format!(
                "git config: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let mut set = std::collections::BTreeSet::new();
        for record in out.stdout.split(|b| *b == 0).filter(|r| !r.is_empty()) {
            let key = record.split(|b| *b == b'\n').next().unwrap_or_default();
            let key = String::from_utf8_lossy(key);
            let Some((section, rest)) = key.split_once('.') else {
                continue;
            };
            let Some((name, var)) = rest.rsplit_once('.') else {
                continue;
            };
            match (section, var) {
                ("filter", _) => {
                    for (v, value) in [
                        ("clean", ""),
                        ("smudge", ""),
                        ("process", ""),
                        ("required", "false"),
                    ] {
                        set.insert((format!("filter.{name}.{v}"), value.to_string()));
                    }
                }
                ("hook", "command") => {
                    set.insert((format!("hook.{name}.enabled"), "false".to_string()));
                }
                _ => {}
            }
        }
        Ok(set.into_iter().collect())
    }

    /// git with `args`, pinned to this repository (see the module docs), run in the work
    /// tree with stdin closed. The only way capstan starts git for a repository.
    pub fn command<S: AsRef<OsStr>>(&self, args: &[S]) -> std::process::Command {
        let mut c = pinned(&self.overrides);
        let mut git_dir = OsString::from("--git-dir=");
        git_dir.push(&self.git_dir);
        let mut work_tree = OsString::from("--work-tree=");
        work_tree.push(&self.work_tree);
        c.arg(git_dir).arg(work_tree).args(args);
        c.current_dir(&self.work_tree);
        c
    }

    /// Run [`Repository::command`] with `args` to its end; its stdout, or its stderr as
    /// the error.
    pub fn output<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<Vec<u8>, InputError> {
        let out = self
            .command(args)
            .output()
            .map_err(|e| git_error(format!("cannot run git: {e}")))?;
        if !out.status.success() {
            let shown: Vec<String> = args
                .iter()
                .map(|a| a.as_ref().to_string_lossy().into_owned())
                .collect();
            return Err(git_error(format!(
                "git {}: {}",
                shown.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(out.stdout)
    }
}

/// `git --no-pager` with capstan's environment and command-scope configuration
/// (`overrides` after [`CONFIG`]) and stdin closed; the one builder of a git command.
fn pinned(overrides: &[(String, String)]) -> std::process::Command {
    let mut c = std::process::Command::new("git");
    c.arg("--no-pager");
    for (k, _) in std::env::vars_os() {
        let name = k.to_string_lossy();
        if name.starts_with("GIT_") && !name.starts_with("GIT_TRACE") && !KEPT_ENV.contains(&&*name)
        {
            c.env_remove(&k);
        }
    }
    c.envs(ENV);
    let config: Vec<(&str, &str)> = CONFIG
        .iter()
        .copied()
        .chain(overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .collect();
    c.env("GIT_CONFIG_COUNT", config.len().to_string());
    for (i, (k, v)) in config.iter().enumerate() {
        c.env(format!("GIT_CONFIG_KEY_{i}"), k);
        c.env(format!("GIT_CONFIG_VALUE_{i}"), v);
    }
    c.stdin(std::process::Stdio::null());
    c
}

/// `git init` in `dir` (which is in no work tree: [`Repository::find`] said so), pinned as
/// every other git command.
pub fn init(dir: &Path) -> Result<(), InputError> {
    let out = pinned(&[])
        .args(["init", "-q"])
        .current_dir(dir)
        .output()
        .map_err(|e| git_error(format!("cannot run git: {e}")))?;
    if !out.status.success() {
        return Err(git_error(format!(
            "git init: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// The git directory `d/.git` names (canonical): itself when it is a git directory, the
/// target of a `gitdir:` file; `None` when there is no `.git`, or it is neither (git
/// goes on upwards too). A `gitdir:` file that names no git directory is an error, as
/// for git.
fn git_dir_at(d: &Path) -> Result<Option<PathBuf>, InputError> {
    let dot_git = d.join(".git");
    let io = |error: std::io::Error| InputError::Io {
        path: dot_git.display().to_string(),
        error,
    };
    let meta = match std::fs::metadata(&dot_git) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    let git_dir = if meta.is_dir() {
        if !is_git_dir(&dot_git) {
            return Ok(None);
        }
        dot_git.clone()
    } else if meta.is_file() {
        let target = read_gitfile(&dot_git)?;
        let target = d.join(target);
        if !is_git_dir(&target) {
            return Err(git_error(format!(
                "{}: `gitdir: {}` is not a git directory",
                dot_git.display(),
                target.display()
            )));
        }
        target
    } else {
        return Ok(None);
    };
    std::fs::canonicalize(&git_dir).map(Some).map_err(io)
}

/// The path a `.git` file names (`gitdir: PATH`, as git's `read_gitfile_gently` reads it:
/// trailing line ends dropped, a relative path against the file's directory).
fn read_gitfile(path: &Path) -> Result<PathBuf, InputError> {
    let bad = |what: &str| git_error(format!("{}: {what}", path.display()));
    let mut text = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_GITFILE + 1).read_to_end(&mut text))
        .map_err(|error| InputError::Io {
            path: path.display().to_string(),
            error,
        })?;
    if text.len() as u64 > MAX_GITFILE {
        return Err(bad("too large for a `.git` file"));
    }
    let Some(rest) = text.strip_prefix(b"gitdir: ") else {
        return Err(bad("not a `gitdir:` file"));
    };
    let mut end = rest.len();
    while end > 0 && matches!(rest[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    if end == 0 {
        return Err(bad("`gitdir:` names no path"));
    }
    use std::os::unix::ffi::OsStrExt;
    Ok(PathBuf::from(OsStr::from_bytes(&rest[..end])))
}

/// Whether `dir` looks like a git directory, as git's `is_git_directory` (`setup.c`)
/// decides: a valid `HEAD` (a link into `refs/`, `ref: refs/…`, or an object id), and
/// `objects/` and `refs/` in its common directory (`commondir` for a linked worktree).
fn is_git_dir(dir: &Path) -> bool {
    if !valid_head(&dir.join("HEAD")) {
        return false;
    }
    let common = match std::fs::read(dir.join("commondir")) {
        Ok(text) => {
            use std::os::unix::ffi::OsStrExt;
            let text = text.strip_suffix(b"\n").unwrap_or(&text);
            dir.join(OsStr::from_bytes(text))
        }
        Err(_) => dir.to_path_buf(),
    };
    common.join("objects").is_dir() && common.join("refs").is_dir()
}

/// git's `validate_headref`: a symbolic link into `refs/`, or a file holding
/// `ref: refs/…` or an object id.
fn valid_head(head: &Path) -> bool {
    match std::fs::symlink_metadata(head) {
        Ok(m) if m.file_type().is_symlink() => {
            return std::fs::read_link(head).is_ok_and(|t| t.starts_with("refs"));
        }
        Ok(m) if m.is_file() => {}
        _ => return false,
    }
    let mut text = Vec::new();
    if std::fs::File::open(head)
        .and_then(|f| f.take(255).read_to_end(&mut text))
        .is_err()
    {
        return false;
    }
    if let Some(r) = text.strip_prefix(b"ref:") {
        return r.trim_ascii_start().starts_with(b"refs/");
    }
    let hex = text.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    hex == 40 || hex == 64
}

#[cfg(test)]
mod tests {
    use super::Repository;
    use std::path::Path;

    fn git(args: &[&str], cwd: &Path) {
        let o = std::process::Command::new("git")
            .args(args)
            .current_dir(cwd)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(o.status.success(), "git {args:?}: {o:?}");
    }

    /// A work tree at `dir` with one commit holding `files`.
    fn work_tree(dir: &Path, files: &[(&str, &str)]) {
        std::fs::create_dir_all(dir).unwrap();
        git(&["init", "-q", "-b", "main"], dir);
        for (p, text) in files {
            let p = dir.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        git(&["add", "-A"], dir);
        git(
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t.invalid",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                "one",
            ],
            dir,
        );
    }

    fn canon(p: &Path) -> std::path::PathBuf {
        std::fs::canonicalize(p).unwrap()
    }

    /// A bare repository's layout as a pull request commits it.
    const BARE: [(&str, &str); 4] = [
        ("HEAD", "ref: refs/heads/main\n"),
        ("config", "[core]\n\tfsmonitor = /nonexistent/trap\n"),
        ("objects/.keep", ""),
        ("refs/heads/.keep", ""),
    ];

    #[test]
    fn a_bare_layout_is_never_a_repository() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(
            Repository::find(tmp.path()).unwrap(),
            None,
            "tmp in a repository"
        );
        let bare = tmp.path().join("bare");
        for (p, text) in BARE {
            let p = bare.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        assert_eq!(Repository::find(&bare).unwrap(), None);
        assert_eq!(Repository::find(&bare.join("refs/heads")).unwrap(), None);
        assert!(Repository::discover(&bare)
            .unwrap_err()
            .to_string()
            .contains("not in a git work tree"));
        // Committed inside a work tree, it is content: the work tree is found.
        let repo = tmp.path().join("repo");
        let files: Vec<(String, &str)> = BARE
            .iter()
            .map(|(p, t)| (format!("clusters/lab-f/{p}"), *t))
            .collect();
        let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), *t)).collect();
        work_tree(&repo, &files);
        let r = Repository::discover(&repo.join("clusters/lab-f")).unwrap();
        assert_eq!(r.work_tree(), canon(&repo));
        assert_eq!(r.git_dir(), canon(&repo.join(".git")));
    }

    #[test]
    fn a_gitfile_is_followed_and_a_planted_one_skipped() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        let files: Vec<(String, &str)> = BARE
            .iter()
            .map(|(p, t)| (format!("trap/{p}"), *t))
            .collect();
        let mut files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), *t)).collect();
        files.push(("clusters/lab-f/cluster.yaml", "x"));
        work_tree(&repo, &files);
        // A linked worktree: its `.git` file names `.git/worktrees/<name>`.
        let linked = tmp.path().join("linked");
        git(
            &["worktree", "add", "-q", "-b", "b", linked.to_str().unwrap()],
            &repo,
        );
        let r = Repository::discover(&linked.join("clusters")).unwrap();
        assert_eq!(r.work_tree(), canon(&linked));
        assert_eq!(r.git_dir(), canon(&repo.join(".git/worktrees/linked")));
        // A `.git` file into committed content was planted: the enclosing work tree wins.
        let planted = repo.join("clusters/lab-f");
        std::fs::write(planted.join(".git"), "gitdir: ../../trap\n").unwrap();
        let r = Repository::discover(&planted).unwrap();
        assert_eq!(r.git_dir(), canon(&repo.join(".git")));
        // A git directory the enclosing repository does not track is taken, as git takes it
        // (and still pinned).
        let other = tmp.path().join("repo/untracked.git");
        git(
            &["init", "-q", "--bare", other.to_str().unwrap()],
            tmp.path(),
        );
        std::fs::write(planted.join(".git"), "gitdir: ../../untracked.git\n").unwrap();
        let r = Repository::discover(&planted).unwrap();
        assert_eq!(r.git_dir(), canon(&other));
        assert_eq!(r.work_tree(), canon(&planted));
        // A nested clone (a `.git` directory below another work tree) is its own repository.
        let nested = repo.join("nested");
        work_tree(&nested, &[("a", "a")]);
        let r = Repository::discover(&nested).unwrap();
        assert_eq!(r.git_dir(), canon(&nested.join(".git")));
        // A `gitdir:` file that names no git directory is an error, as for git.
        std::fs::write(planted.join(".git"), "gitdir: ../nowhere\n").unwrap();
        assert!(Repository::discover(&planted)
            .unwrap_err()
            .to_string()
            .contains("is not a git directory"));
    }

    #[test]
    fn filter_drivers_and_hooks_are_switched_off() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        work_tree(&repo, &[]);
        for (k, v) in [
            ("filter.a=b.clean", "trap"),
            ("filter.lfs.process", "trap"),
            ("hook.mine.command", "trap"),
        ] {
            git(&["config", k, v], &repo);
        }
        let r = Repository::discover(&repo).unwrap();
        let has = |k: &str, v: &str| r.overrides.iter().any(|(a, b)| a == k && b == v);
        for k in [
            "filter.a=b.clean",
            "filter.a=b.smudge",
            "filter.a=b.process",
        ] {
            assert!(has(k, ""), "{k}: {:?}", r.overrides);
        }
        assert!(has("filter.lfs.required", "false"));
        assert!(has("hook.mine.enabled", "false"));
        // The pinned git sees the overrides win over the repository's configuration.
        let out = r.output(&["config", "filter.a=b.clean"]).unwrap();
        assert_eq!(out, b"\n");
    }
}
