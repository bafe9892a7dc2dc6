//! CLI glue of `capstan backup push|list|pull`: arguments to library calls, results to
//! stdout and stderr.

use crate::backup::{self, store::Store};
use crate::cli::terminal::{identities, optional_identities, Status};
use crate::cli::{
    BackupCheckArgs, BackupCommand, BackupListArgs, BackupPullArgs, BackupPushArgs, RestorePlanArgs,
};
use crate::inputs;
use crate::printable::{self, line};
use anyhow::Result;
use std::io::Write as _;

/// Run one `capstan backup` command.
pub fn run(cmd: BackupCommand) -> Result<Status> {
    match cmd {
        BackupCommand::Push(args) => push(args),
        BackupCommand::List(args) => list(args),
        BackupCommand::Pull(args) => pull(args),
        BackupCommand::Check(args) => check(args),
    }
}

/// The newest backup's index under `url` (or the one its last segment names).
fn newest(url: &str) -> Result<(Store, backup::Index)> {
    let (url, id) = split_id(url);
    let store = Store::open(url, false)?;
    let (found, _) = store.list()?;
    let index =
        match id {
            Some(id) => found.into_iter().find(|i| i.id == id).ok_or_else(|| {
                backup::BackupError::NotFound {
                    url: url.to_string(),
                    message: format!("no backup `{id}`"),
                }
            })?,
            None => found
                .into_iter()
                .next()
                .ok_or_else(|| backup::BackupError::NotFound {
                    url: url.to_string(),
                    message: "no backup".into(),
                })?,
        };
    Ok((store, index))
}

/// The newest backup under `url` (or the one its last segment names), verified and
/// decrypted, its public object manifest checked against the files.
fn fetch(
    url: &str,
    ids: &[age::x25519::Identity],
) -> Result<(backup::Index, Vec<inputs::MovedFile>)> {
    let (store, index) = newest(url)?;
    let ciphertext = store.get(&index.object(), index.size.min(backup::MAX_OBJECT))?;
    let files = backup::open(&index, &ciphertext, ids)?;
    backup::objects::verify(&index, &files).map_err(backup::BackupError::from)?;
    Ok((index, files))
}

fn check(args: BackupCheckArgs) -> Result<Status> {
    let max_age = backup::check::parse_duration(&args.max_age).ok_or_else(|| {
        anyhow::anyhow!(
            "--max-age {}: expected a duration such as 90m, 24h or 7d",
            args.max_age
        )
    })?;
    // D16: scheduled CI holds no private key. Without one the check reads the public
    // index's object manifest (and trusts it: the bucket must be writable by the backup
    // job only); with one it also decrypts the payload and verifies the manifest against it.
    let ids = optional_identities(args.identity.as_deref())?;
    let dirs = inputs::discover(&args.repo)?;
    let configs = inputs::load_clusters(&dirs)?;
    let mut expected = crate::render::pipeline::render_each::<_, anyhow::Error>(
        &dirs,
        args.templates.as_ref(),
        inputs::Digests::NotWanted,
        |r, _| Ok(backup::check::expected(&r.name, &r.namespace, &r.resources)),
    )?;
    for e in &mut expected {
        if let Some(c) = configs.iter().find(|c| c.config.metadata.name == e.name) {
            e.secrets = crate::secrets::seal::restore_secret_names(&c.config);
            e.ca_fingerprint = c
                .config
                .spec
                .provenance
                .as_ref()
                .and_then(|p| p.fingerprints.as_ref())
                .map(|f| f.kubernetes_ca.clone());
        }
    }
    let (index, objects, source) = match &ids {
        Some(ids) => {
            let (index, files) = fetch(&args.url, ids)?;
            let objects = backup::objects::manifest(&files).map_err(backup::BackupError::from)?;
            (index, objects, "verified against the encrypted payload")
        }
        None => {
            let (_, mut index) = newest(&args.url)?;
            let Some(objects) = index.objects.take() else {
                anyhow::bail!(
                    "backup {} ({}) predates the object manifest (its index lists no objects): checking it needs \
                     the identity to decrypt it (-i FILE); backups pushed by this capstan are checked without one",
                    line(&index.id),
                    line(&index.created)
                );
            };
            (index, objects, "from the public index, not decrypted")
        }
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let report = backup::check::check(&index, &objects, &expected, now, max_age);
    let mut out = std::io::stdout().lock();
    if args.json {
        let json = serde_json::to_string_pretty(&report)?;
        writeln!(out, "{}", printable::json(&json))?;
    } else {
        // The index and the files come from the bucket: every name is escaped.
        writeln!(
            out,
            "backup {} ({}, {} h old, objects {source}{})",
            line(&report.backup),
            line(&report.created),
            report.age_seconds / 3600,
            if report.stale {
                format!(": older than --max-age {}", args.max_age)
            } else {
                String::new()
            }
        )?;
        for c in &report.clusters {
            if c.missing.is_empty() {
                writeln!(out, "ok       {}", line(&c.name))?;
            } else {
                writeln!(
                    out,
                    "missing  {}: {}",
                    line(&c.name),
                    line(&c.missing.join("; "))
                )?;
            }
        }
    }
    Ok(if report.failed() {
        Status::Findings
    } else {
        Status::Success
    })
}

fn push(args: BackupPushArgs) -> Result<Status> {
    let mut recipients = Vec::new();
    for r in &args.recipients {
        recipients.push(crate::secrets::parse_recipient("--recipient", r)?);
    }
    for f in &args.recipients_file {
        let label = f.display().to_string();
        let text = inputs::read_input_text(f, inputs::InputKind::Identity)?;
        for r in crate::secrets::parse_recipients_file(&label, &text)? {
            recipients.push(crate::secrets::parse_recipient(&label, &r)?);
        }
    }
    anyhow::ensure!(
        !recipients.is_empty(),
        "name the recipients with --recipient or --recipients-file: operators and the DR identity"
    );
    let files = inputs::read_moved_directory(&args.dir)?;
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (index, ciphertext) =
        backup::seal(&args.dir.display().to_string(), &files, unix, &recipients)?;
    drop(files);
    let store = Store::open(&args.url, true)?;
    store.push(&index, ciphertext)?;
    eprintln!(
        "backup {} pushed to {}: {} objects, {} bytes encrypted to {} recipient(s)",
        index.id,
        store.url(),
        index.files,
        index.size,
        index.recipients.len()
    );
    println!("{}", index.id);
    Ok(Status::Success)
}

fn list(args: BackupListArgs) -> Result<Status> {
    let store = Store::open(&args.url, false)?;
    let (found, skipped) = store.list()?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let json = serde_json::to_string_pretty(&found)?;
        writeln!(out, "{}", printable::json(&json))?;
    } else if found.is_empty() {
        writeln!(out, "no backups under {}", line(store.url()))?;
    } else {
        // Indexes are read from the bucket: every field is escaped.
        for i in &found {
            let kinds: Vec<String> = i.kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
            writeln!(
                out,
                "{}  {}  {} bytes  {} objects ({})  clusters: {}",
                line(&i.id),
                line(&i.created),
                i.size,
                i.files,
                line(&kinds.join(", ")),
                if i.clusters.is_empty() {
                    "none".to_string()
                } else {
                    line(&i.clusters.join(", ")).into_owned()
                }
            )?;
        }
    }
    for s in &skipped {
        eprintln!("skipped: {}", line(&s.to_string()));
    }
    Ok(Status::Success)
}

/// Whether the last segment of a URL is a backup id (`20261205T083000Z-1a2b3c4d`).
fn split_id(url: &str) -> (&str, Option<&str>) {
    match url.trim_end_matches('/').rsplit_once('/') {
        Some((base, last)) if backup::is_id(last) => (base, Some(last)),
        _ => (url, None),
    }
}

fn pull(args: BackupPullArgs) -> Result<Status> {
    let ids = identities(args.identity.as_deref())?;
    let (index, files) = fetch(&args.url, &ids)?;
    let named: Vec<(&str, &[u8])> = files
        .iter()
        .map(|f| (f.name.as_str(), &f.bytes[..]))
        .collect();
    crate::render::bundle::create_private_dir(&args.out, &named)?;
    eprintln!(
        "backup {} ({}) written to {}: {} objects, files mode 0600",
        line(&index.id),
        line(&index.created),
        args.out.display(),
        files.len()
    );
    Ok(Status::Success)
}

/// `capstan restore plan`: the runbook for the repository's clusters and the newest backup.
pub fn restore_plan(args: RestorePlanArgs) -> Result<Status> {
    let dirs = inputs::discover(&args.repo)?;
    let configs = inputs::load_clusters(&dirs)?;
    // Whether any cluster's machines take addresses from an IPAM pool (its rendered templates).
    let ipam = crate::render::pipeline::render_each::<_, anyhow::Error>(
        &dirs,
        None,
        inputs::Digests::NotWanted,
        |r, _| Ok(backup::check::expected(&r.name, &r.namespace, &r.resources).ipam),
    )?
    .into_iter()
    .any(|x| x);
    let store = Store::open(&args.backup, false)?;
    let (found, _) = store.list()?;
    let newest = found.first();
    let md = backup::restore::runbook(
        &configs.iter().map(|c| c.config.clone()).collect::<Vec<_>>(),
        ipam,
        store.url(),
        newest.map(|i| (i.id.as_str(), i.created.as_str())),
    );
    // Values from the bucket and the repository are escaped where the runbook quotes them;
    // whatever else it quotes carries no control character to the terminal.
    std::io::stdout()
        .lock()
        .write_all(printable::escape(&md).as_bytes())?;
    Ok(Status::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backup_id_at_the_end_of_a_url() {
        assert_eq!(
            split_id("s3://b/p/20261205T083000Z-1a2b3c4d"),
            ("s3://b/p", Some("20261205T083000Z-1a2b3c4d"))
        );
        assert_eq!(split_id("s3://b/p"), ("s3://b/p", None));
        assert_eq!(
            split_id("file:///x/20261205T0830Z"),
            ("file:///x/20261205T0830Z", None)
        );
    }
}
