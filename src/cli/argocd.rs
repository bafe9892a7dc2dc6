//! CLI glue for the GitOps commands: `argocd generate` (the Argo CD plugin),
//! `secrets seal-operator` and `init`. Like `commands`, it owns stdout and stderr and uses
//! `anyhow`; the decisions live in [`crate::argocd`], [`crate::secrets::sopssecret`] and
//! [`crate::cli::scaffold`].

use crate::argocd::{self, ArgocdError, Context, SecretsMode};
use crate::cli::terminal::{decrypt_sealed, identities, Action, Change, Status, Writes};
use crate::cli::{ClusterSecretsArgs, InitArgs};
use crate::inputs::{self, InputError};
use crate::pipeline;
use crate::secrets::sopssecret::{self, SopsSecretError};
use anyhow::{Context as _, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

/// The process environment as UTF-8 pairs. A variable capstan reads whose value is not
/// UTF-8 is an error; others are skipped.
fn env_vars() -> Result<Vec<(String, String)>> {
    use crate::cli::*;
    let read = [
        ENV_ARGOCD_APP_NAME,
        ENV_ARGOCD_APP_NAMESPACE,
        ENV_ARGOCD_APP_REVISION,
        ENV_ARGOCD_APP_SOURCE_PATH,
        ENV_ARGOCD_APP_PARAMETERS,
        ENV_PARAM_SECRETS,
        ENV_AGE_KEY_FILE,
        ENV_SOPS_AGE_KEY_FILE,
        ENV_SOPS_AGE_KEY,
    ];
    let mut out = Vec::new();
    for (k, v) in std::env::vars_os() {
        let Ok(k) = k.into_string() else { continue };
        match v.into_string() {
            Ok(v) => out.push((k, v)),
            Err(_) if read.contains(&k.as_str()) || k.starts_with(ARGOCD_ENV_CAPSTAN_PREFIX) => {
                return Err(ArgocdError::NotUtf8 { name: k }.into())
            }
            Err(_) => {}
        }
    }
    Ok(out)
}

/// One line: Argo CD shows stderr in the UI, and messages listing several problems span
/// lines; they are joined with `; `, and every other control character or bidirectional
/// override (a carriage return, an ANSI escape in a name from the repository or the
/// environment) is escaped ([`crate::printable::line`]).
fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        if i > 0 {
            out.push_str("; ");
        }
        out.push_str(&crate::printable::line(line));
    }
    out
}

/// `capstan argocd generate`: the whole stream is built before anything is printed, so a
/// failure prints nothing on stdout and exits 2 with one line on stderr, whatever the
/// error and whatever the environment's values hold.
pub fn generate() -> Result<Status> {
    generate_stream().map_err(|e| anyhow::anyhow!("{}", one_line(&format!("{e:#}"))))
}

fn generate_stream() -> Result<Status> {
    let vars = env_vars()
        .map_err(|e| anyhow::anyhow!("argocd generate: {}", one_line(&format!("{e:#}"))))?;
    let ctx = Context::from_env(&vars).map_err(|e| {
        // The Application is named even when the rest of the environment is unusable.
        let app = vars
            .iter()
            .rev()
            .find(|(k, _)| k == crate::argocd::env::ENV_ARGOCD_APP_NAME)
            .map(|(_, v)| format!(" (application {})", crate::printable::line(v)))
            .unwrap_or_default();
        anyhow::anyhow!("argocd generate{app}: {}", one_line(&e.to_string()))
    })?;
    let stream = build_stream(&ctx, &vars)
        .map_err(|e| anyhow::anyhow!("{}: {}", ctx.label(), one_line(&format!("{e:#}"))))?;
    // Argo CD must read the whole stream: a closed pipe is a failure (exit 2), not the
    // quiet success it is for `render | head`. The error is a message, not an
    // `io::Error`, so `main` does not take it for that case.
    let mut out = std::io::stdout().lock();
    out.write_all(stream.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| {
            anyhow::anyhow!(
                "{}: stdout: {e}: the stream was not written whole",
                ctx.label()
            )
        })?;
    Ok(Status::Success)
}

fn build_stream(ctx: &Context, vars: &[(String, String)]) -> Result<Zeroizing<String>> {
    let mode = ctx.mode()?;
    // The identity is read before moving to the repository root: a relative key file path
    // is relative to where Argo CD started the plugin.
    let ids = match mode {
        SecretsMode::Decrypt => {
            let (label, text) = inputs::read_identity_text(None, |k| {
                vars.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v.clone())
            })
            .map_err(|e| match e {
                InputError::NoIdentity => anyhow::anyhow!(
                    "secrets mode `decrypt` needs the age identity in the sidecar: mount it and set {} (or {}, {})",
                    crate::cli::ENV_SOPS_AGE_KEY_FILE,
                    crate::cli::ENV_AGE_KEY_FILE,
                    crate::cli::ENV_SOPS_AGE_KEY
                ),
                other => other.into(),
            })?;
            Some(crate::secrets::parse_identities(&label, &text)?)
        }
        _ => None,
    };
    let cwd = std::env::current_dir().context("the working directory")?;
    let (root, target) = match inputs::given_repo_root() {
        // Run by hand with `--repo-root`: the working directory is the source inside it.
        Some((given, typed)) => {
            let inside = |r: &Path, d: &Path| d.strip_prefix(r).ok().map(Path::to_path_buf);
            let target = inside(given, &cwd)
                .or_else(|| {
                    inside(&std::fs::canonicalize(given).ok()?, &std::fs::canonicalize(&cwd).ok()?)
                })
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "the working directory {} is not inside --repo-root {}: run from the application's directory inside the repository",
                        crate::printable::line(&cwd.display().to_string()),
                        crate::printable::line(typed)
                    )
                })?;
            let target = if target.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                target
            };
            (given.to_path_buf(), target)
        }
        None => argocd::source_root(&cwd, ctx.source_path.as_deref())?,
    };
    // Relative to the repository root, every file in a message is named as in git.
    std::env::set_current_dir(&root).with_context(|| root.display().to_string())?;
    let clusters = inputs::discover_all(&[target])?;
    let parts = pipeline::render_disk::<_, anyhow::Error>(
        &clusters,
        &pipeline::Options {
            templates: None,
            digests: inputs::Digests::NotWanted,
        },
        |_, r, _| {
            ctx.check_namespace(&r.name, &r.namespace)?;
            let mut objects = Vec::with_capacity(r.resources.len());
            for mut res in r.resources {
                if res.raw.is_some() {
                    match mode {
                        SecretsMode::Omit => continue,
                        SecretsMode::Decrypt => {
                            decrypt_sealed(&mut res, ids.as_deref().unwrap_or_default())?
                        }
                        SecretsMode::Operator => res = operator_object(&res.value, &res.origin)?,
                    }
                }
                argocd::annotate(&mut res);
                objects.push(res);
            }
            let mut text = Zeroizing::new(String::with_capacity(16384));
            crate::resource::write_stream(&objects, &mut text);
            Ok((text, objects.len()))
        },
    )?;
    if parts.iter().all(|(_, n)| *n == 0) {
        return Err(ArgocdError::Empty.into());
    }
    let mut stream = Zeroizing::new(String::with_capacity(
        parts.iter().map(|(t, _)| t.len() + 4).sum(),
    ));
    for (text, _) in parts.iter().filter(|(_, n)| *n > 0) {
        if !stream.is_empty() {
            stream.push_str("---\n");
        }
        stream.push_str(text);
    }
    Ok(stream)
}

/// The SopsSecret standing for the sealed Secret read from `sealed_path`.
fn operator_object(
    sealed: &serde_json::Value,
    sealed_path: &str,
) -> Result<crate::resource::Resource> {
    let path = sopssecret::operator_path(sealed_path)
        .ok_or_else(|| anyhow::anyhow!("{sealed_path}: not in a secrets directory"))?;
    let cluster_dir = Path::new(sealed_path)
        .parent()
        .and_then(Path::parent)
        .map_or_else(|| ".".to_string(), |d| d.display().to_string());
    let root = inputs::repo_root(Path::new(&cluster_dir));
    let text =
        match inputs::read_repository_text(Path::new(&path), &root, inputs::InputKind::Sealed) {
            Ok(t) => t,
            Err(InputError::Io { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(SopsSecretError::Missing {
                    path,
                    dir: cluster_dir,
                }
                .into())
            }
            Err(e) => return Err(e.into()),
        };
    Ok(sopssecret::check(
        sealed,
        sealed_path,
        &path,
        &text,
        &cluster_dir,
    )?)
}

/// `capstan secrets seal-operator`: each sealed Secret (checked current, as render checks
/// it) becomes a SopsSecret in `secrets/operator/`, encrypted to `spec.recipients`.
pub fn seal_operator(args: ClusterSecretsArgs) -> Result<Status> {
    use crate::secrets::sops::{CryptRule, SopsFile};
    let ids = identities(args.identity.as_deref())?;
    let c = inputs::load_cluster(&args.dir)?;
    let recipients = crate::secrets::parse_spec_recipients(&c.file, &c.config.spec.recipients)?;
    anyhow::ensure!(
        !recipients.is_empty(),
        "{}: spec.recipients: at least one age recipient is required",
        c.file
    );
    let dir_label = c.dir.display().to_string();
    let sealed = crate::secrets::seal::sealed_resources(
        &c.config,
        &c.file,
        &dir_label,
        c.secrets_age_sha256.as_deref(),
        &c.sealed,
    )?;
    let prefix = format!(
        "{}/{}/",
        crate::inputs::SEALED_DIR,
        crate::inputs::OPERATOR_DIR
    );
    let mut previous = Vec::new();
    for s in inputs::read_sealed(&c.dir, true, inputs::Digests::NotWanted)? {
        if s.rel.starts_with(&prefix) {
            let f = SopsFile::parse(&s.path, &s.text)?;
            let p = f.decrypt(&s.path, &ids)?;
            previous.push((s.rel, f, p));
        }
    }
    let now = crate::secrets::sops::lastmodified_now();
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for res in &sealed {
        let s = c
            .sealed
            .iter()
            .find(|s| s.path == res.origin)
            .ok_or_else(|| anyhow::anyhow!("{}: not among the sealed files read", res.origin))?;
        let rel = sopssecret::operator_path(&s.rel)
            .ok_or_else(|| anyhow::anyhow!("{}: not in a secrets directory", s.path))?;
        let raw = res.raw.as_ref().map_or("", |r| r.text.as_str());
        let file = SopsFile::parse(&s.path, raw)?;
        let plain = file.decrypt(&s.path, &ids)?;
        let tree = sopssecret::from_secret(
            &s.path,
            plain.tree(),
            &sopssecret::sealed_values_digest(&res.value),
        )?;
        let prev = previous
            .iter()
            .find(|(p, _, _)| *p == rel)
            .map(|(_, f, p)| (f, p));
        let text = crate::secrets::sops::encrypt(
            &rel,
            &tree.0,
            &recipients,
            CryptRule::EncryptedRegex(crate::secrets::seal::ENCRYPTED_REGEX.into()),
            false,
            &now,
            prev,
        )?;
        files.push((rel, text.into_bytes()));
    }
    let mut w = Writes::new(args.dry_run);
    w.replace(&args.dir, &files)?;
    for (rel, _, _) in &previous {
        if !files.iter().any(|(f, _)| f == rel) {
            w.warnings.push(format!(
                "{}: no sealed Secret stands for it any more; delete it (capstan does not)",
                args.dir.join(rel).display()
            ));
        }
    }
    w.print(args.format)?;
    Ok(Status::Success)
}

/// `capstan init DIR`: create the scaffold's missing files; report created and kept ones.
pub fn init(args: InitArgs) -> Result<Status> {
    let files = crate::cli::scaffold::files(&args.recipients, args.repo_url.as_deref())?;
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_bytes()))
        .collect();
    let (created, kept) = if args.dry_run {
        let (new, kept) = crate::output::partition_missing(&args.dir, &refs)?;
        (new.iter().map(|(n, _)| n.to_string()).collect(), kept)
    } else {
        crate::output::create_missing(&args.dir, &refs)?
    };
    let mut w = Writes::new(args.dry_run);
    for f in &created {
        w.changes.push(Change::new(&args.dir, f, Action::Created));
    }
    for f in &kept {
        w.changes
            .push(Change::new(&args.dir, f, Action::Kept).what("exists; never overwritten"));
    }
    // A repository is a git repository: made one unless it is inside one already (found by
    // capstan's own discovery, as `diff --git` finds it: never a bare repository's layout).
    // A dry run may name a directory that does not exist yet: its repository is the one
    // around the nearest directory that does.
    let probe = args
        .dir
        .ancestors()
        .find(|p| p.is_dir())
        .unwrap_or(std::path::Path::new("."));
    let git = match crate::inputs::git::Repository::find(probe) {
        Ok(Some(_)) => "existing".to_string(),
        Ok(None) if args.dry_run => {
            w.notes.push(format!(
                "{}: git repository would be initialized",
                args.dir.display()
            ));
            "would be initialized".to_string()
        }
        Ok(None) => match crate::inputs::git::repository::init(&args.dir) {
            Ok(()) => {
                w.notes.push(format!(
                    "{}: git repository initialized",
                    args.dir.display()
                ));
                "initialized".to_string()
            }
            Err(e) => {
                let why = crate::review::report::error_message(&e.to_string());
                w.notes.push(format!(
                    "{}: `git init` failed ({why}); run it yourself",
                    args.dir.display()
                ));
                format!("git init failed: {why}")
            }
        },
        Err(e) => {
            let why = crate::review::report::error_message(&e.to_string());
            w.notes.push(format!(
                "{}: cannot tell whether it is in a git repository ({why}); make it one yourself",
                args.dir.display()
            ));
            format!("unknown: {why}")
        }
    };
    let placeholders = crate::cli::scaffold::placeholders(args.repo_url.is_some());
    w.notes.push(String::new());
    w.notes
        .extend(crate::cli::scaffold::NEXT_STEPS.lines().map(str::to_string));
    w.notes
        .push("placeholders to replace before anything is applied:".to_string());
    w.notes
        .extend(placeholders.iter().map(|p| format!("  - {p}")));
    w.extra.insert("gitRepository".into(), git.into());
    w.extra
        .insert("placeholders".into(), serde_json::to_value(&placeholders)?);
    w.print(args.format)?;
    Ok(Status::Success)
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn messages_become_one_line() {
        assert_eq!(one_line("a: b\n  c\n\n d\n"), "a: b; c; d");
    }

    #[test]
    fn an_application_name_with_a_line_break_or_an_escape_stays_on_the_line() {
        let vars: Vec<(String, String)> = vec![
            (
                crate::argocd::env::ENV_ARGOCD_APP_NAME.into(),
                "lab\nerror: forged\u{1b}[2J\r\u{202e}".into(),
            ),
            (
                crate::argocd::env::ENV_ARGOCD_APP_REVISION.into(),
                "ab\ncd".into(),
            ),
        ];
        let label = crate::argocd::Context::from_env(&vars)
            .map(|c| c.label())
            .unwrap_or_default();
        let printed = one_line(&format!("{label}: failed\nsecond"));
        assert_eq!(
            printed,
            "argocd generate (application lab\\u{a}error: forged\\u{1b}[2J\\u{d}\\u{202e}, \
             revision ab\\u{a}cd): failed; second"
        );
    }
}
