//! The CLI edge's shared pieces, used by `commands` and `cmd_argocd`: how a command ended
//! (its exit status), the age identities named by a flag or the environment, sealed objects
//! decrypted for output, and the files a writer wrote (or, with `--dry-run`, would write)
//! reported on stderr or as JSON.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Result;

use crate::inputs;

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Exit 0.
    Success,
    /// Exit 1: differences or blocking findings.
    Findings,
}

impl From<Status> for ExitCode {
    fn from(s: Status) -> ExitCode {
        match s {
            Status::Success => ExitCode::SUCCESS,
            Status::Findings => ExitCode::from(1),
        }
    }
}

/// Replace a sealed (SOPS) object by the object it encrypts, MAC verified; objects that
/// are not sealed are left alone.
pub fn decrypt_sealed(
    res: &mut crate::resource::Resource,
    ids: &[age::x25519::Identity],
) -> Result<()> {
    if let Some(raw) = res.raw.take() {
        let file = crate::secrets::sops::SopsFile::parse(&res.origin, &raw.text)?;
        res.value = plaintext_object(file.decrypt(&res.origin, ids)?.into_tree());
    }
    Ok(())
}

/// A decrypted SOPS document as the object it stands for (without the `sops` block).
pub fn plaintext_object(mut tree: serde_json::Value) -> serde_json::Value {
    if let Some(m) = tree.as_object_mut() {
        m.remove("sops");
    }
    tree
}

/// The age identities of `--identity`, else of the environment; an error when none is given.
pub fn identities(flag: Option<&std::path::Path>) -> Result<Vec<age::x25519::Identity>> {
    optional_identities(flag)?.ok_or_else(|| inputs::InputError::NoIdentity.into())
}

/// The age identities of `--identity`, else of the environment, if any is given.
pub fn optional_identities(
    flag: Option<&std::path::Path>,
) -> Result<Option<Vec<age::x25519::Identity>>> {
    match inputs::read_identity_text(flag, |k| std::env::var(k).ok()) {
        Ok((label, text)) => Ok(Some(crate::secrets::parse_identities(&label, &text)?)),
        Err(inputs::InputError::NoIdentity) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// A report as `--format json` prints it: one pretty-printed document on stdout, every
/// control and bidirectional character escaped (`printable::json`: names in it are input).
pub fn print_json(report: &impl serde::Serialize) -> Result<()> {
    let json = serde_json::to_string_pretty(report)?;
    writeln!(
        std::io::stdout().lock(),
        "{}",
        crate::printable::json(&json)
    )?;
    Ok(())
}

/// What a writer did to one file, or would do with `--dry-run`.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// The file, as the user named its directory.
    pub path: String,
    /// What happens to it.
    pub action: Action,
    /// What it is, when the command says (`SOPS, sealed`, `encrypted to 2 recipients`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what: Option<String>,
}

/// What happens to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Created, where no file was (a command that never overwrites).
    Created,
    /// Created or replaced.
    Written,
    /// Already held these bytes: left alone.
    Unchanged,
    /// Existing, kept as it is (a command that never overwrites).
    Kept,
    /// Removed.
    Removed,
}

impl Change {
    /// A change to `dir/rel`.
    pub fn new(dir: &std::path::Path, rel: &str, action: Action) -> Change {
        Change {
            path: dir.join(rel).display().to_string(),
            action,
            what: None,
        }
    }

    /// The same, saying what the file is.
    pub fn what(mut self, what: impl Into<String>) -> Change {
        self.what = Some(what.into());
        self
    }
}

/// A writer's report: the files, in the order written, with `--dry-run` what would be
/// done (nothing was written), the warnings, and lines for the user after the files
/// (`notes`; in JSON with the command's own fields, `extra`).
#[derive(Debug, Default)]
pub struct Writes {
    /// Whether this was `--dry-run`.
    pub dry_run: bool,
    /// The files.
    pub changes: Vec<Change>,
    /// Warnings, printed first.
    pub warnings: Vec<String>,
    /// Lines after the files (text only).
    pub notes: Vec<String>,
    /// The command's own fields in JSON (camelCase keys).
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Writes {
    /// An empty report.
    pub fn new(dry_run: bool) -> Writes {
        Writes {
            dry_run,
            ..Writes::default()
        }
    }

    /// The files of `replace_files`: those in `written` as written, the others unchanged.
    pub fn replaced(
        &mut self,
        dir: &std::path::Path,
        all: &[(String, Vec<u8>)],
        written: &[String],
    ) {
        for (rel, _) in all {
            let action = if written.contains(rel) {
                Action::Written
            } else {
                Action::Unchanged
            };
            self.changes.push(Change::new(dir, rel, action));
        }
    }

    /// Replace `files` under `dir` (`bundle::replace_files`), or with `--dry-run` find those
    /// it would write; the files are added to the report either way.
    pub fn replace(&mut self, dir: &std::path::Path, files: &[(String, Vec<u8>)]) -> Result<()> {
        let written = if self.dry_run {
            crate::output::changed_files(dir, files)
        } else {
            crate::output::replace_files(dir, files)?
        };
        self.replaced(dir, files, &written);
        Ok(())
    }

    /// Remove `rels` under `dir` (`bundle::remove_files`) unless `--dry-run`, each reported
    /// as removed, saying why.
    pub fn remove(&mut self, dir: &std::path::Path, rels: &[String], why: &str) -> Result<()> {
        if !self.dry_run {
            crate::output::remove_files(dir, rels)?;
        }
        for rel in rels {
            self.changes
                .push(Change::new(dir, rel, Action::Removed).what(why));
        }
        Ok(())
    }

    /// Text on stderr (`{path}: written`, with `--dry-run` `{path}: would be written`), or one
    /// JSON document on stdout: `dryRun`, `files`, `warnings` and the command's fields.
    pub fn print(&self, format: crate::cli::ReportFormat) -> Result<()> {
        if format == crate::cli::ReportFormat::Json {
            let mut v = serde_json::Map::new();
            v.insert("dryRun".into(), self.dry_run.into());
            v.insert("files".into(), serde_json::to_value(&self.changes)?);
            v.insert("warnings".into(), serde_json::to_value(&self.warnings)?);
            for (k, x) in &self.extra {
                v.insert(k.clone(), x.clone());
            }
            return print_json(&serde_json::Value::Object(v));
        }
        let mut err = std::io::stderr().lock();
        for w in &self.warnings {
            writeln!(err, "warning: {}", crate::printable::line(w))?;
        }
        for c in &self.changes {
            let action = match (c.action, self.dry_run) {
                (Action::Created, false) => "created",
                (Action::Created, true) => "would be created",
                (Action::Written, false) => "written",
                (Action::Written, true) => "would be written",
                (Action::Unchanged, _) => "unchanged",
                (Action::Kept, _) => "kept",
                (Action::Removed, false) => "removed",
                (Action::Removed, true) => "would be removed",
            };
            let what = c
                .what
                .as_deref()
                .map(|w| format!(" ({w})"))
                .unwrap_or_default();
            writeln!(
                err,
                "{}",
                crate::printable::line(&format!("{}: {action}{what}", c.path))
            )?;
        }
        for n in &self.notes {
            writeln!(err, "{}", crate::printable::line(n))?;
        }
        if self.dry_run {
            writeln!(err, "dry run: nothing was written")?;
        }
        Ok(())
    }
}

/// Read and decrypt the existing sealed files (all of them, workload ones included).
pub fn open_sealed(
    c: &inputs::ClusterInput,
    ids: &[age::x25519::Identity],
) -> Result<
    Vec<(
        String,
        crate::secrets::sops::SopsFile,
        crate::secrets::sops::Plain,
    )>,
> {
    let mut out = Vec::new();
    for s in inputs::read_sealed(&c.dir, true, inputs::Digests::NotWanted)? {
        let file = crate::secrets::sops::SopsFile::parse(&s.path, &s.text)?;
        let plain = file.decrypt(&s.path, ids)?;
        out.push((s.rel, file, plain));
    }
    Ok(out)
}
