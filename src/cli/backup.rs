//! CLI glue of `capstan backup push|list|pull`: arguments to library calls, results to
//! stdout and stderr.

use crate::backup::{self, store::Store};
use crate::cli::terminal::{identities, Status};
use crate::cli::{
    BackupCheckArgs, BackupCommand, BackupListArgs, BackupPullArgs, BackupPushArgs,
    RestoreCheckArgs, RestoreCheckFormat, RestorePlanArgs,
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

/// The newest backup under `url` (or the one its last segment names), verified and
/// decrypted.
fn fetch(
    url: &str,
    ids: &[age::x25519::Identity],
) -> Result<(backup::Index, Vec<inputs::MovedFile>)> {
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
    let ciphertext = store.get(&index.object(), index.size.min(backup::MAX_OBJECT))?;
    let files = backup::open(&index, &ciphertext, ids)?;
    Ok((index, files))
}

fn check(args: BackupCheckArgs) -> Result<Status> {
    let max_age = backup::check::parse_duration(&args.max_age).ok_or_else(|| {
        anyhow::anyhow!(
            "--max-age {}: expected a duration such as 90m, 24h or 7d",
            args.max_age
        )
    })?;
    let ids = identities(args.identity.as_deref())?;
    let dirs = inputs::discover(&args.repo)?;
    let expected = crate::render::pipeline::render_each::<_, anyhow::Error>(
        &dirs,
        args.templates.as_ref(),
        inputs::Digests::NotWanted,
        |r, _| Ok(backup::check::expected(&r.name, &r.namespace, &r.resources)),
    )?;
    let (index, files) = fetch(&args.url, &ids)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let report = backup::check::check(&index, &files, &expected, now, max_age);
    drop(files);
    let mut out = std::io::stdout().lock();
    if args.json {
        let json = serde_json::to_string_pretty(&report)?;
        writeln!(out, "{}", printable::json(&json))?;
    } else {
        // The index and the files come from the bucket: every name is escaped.
        writeln!(
            out,
            "backup {} ({}, {} h old{})",
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
    use backup::restore::custody;
    let mut marked = Vec::new();
    for r in &args.recipients {
        marked.push(custody::Recipient {
            key: crate::secrets::parse_recipient("--recipient", r)?,
            offline: false,
        });
    }
    for f in &args.recipients_file {
        let label = f.display().to_string();
        let text = inputs::read_input_text(f, inputs::InputKind::Identity)?;
        marked.extend(custody::parse_recipients_file(&label, &text)?);
    }
    // Key custody (D16): warned, not refused, so that a first backup is never prevented.
    if !marked.is_empty() {
        for w in custody::policy(&marked) {
            eprintln!("warning: {w}");
        }
    }
    let recipients: Vec<_> = marked.into_iter().map(|r| r.key).collect();
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
    let findings = match &args.pulled {
        Some(dir) => Some(inventory_report(dir, &args.vsphere_inventory, &args.nodes)?),
        None => None,
    };
    let store = Store::open(&args.backup, false)?;
    let (found, _) = store.list()?;
    let newest = found.first();
    let md = backup::restore::runbook(
        &configs.iter().map(|c| c.config.clone()).collect::<Vec<_>>(),
        ipam,
        store.url(),
        newest.map(|i| (i.id.as_str(), i.created.as_str())),
        findings.as_ref(),
    );
    // Values from the bucket and the repository are escaped where the runbook quotes them;
    // whatever else it quotes carries no control character to the terminal.
    std::io::stdout()
        .lock()
        .write_all(printable::escape(&md).as_bytes())?;
    Ok(Status::Success)
}

/// `restore check`'s comparison of a pulled backup with the inventories and nodes given.
fn inventory_report(
    dir: &std::path::Path,
    inventories: &[std::path::PathBuf],
    nodes: &[std::path::PathBuf],
) -> Result<backup::restore::inventory::Report> {
    use backup::restore::inventory;
    let files = inputs::read_moved_directory(dir)?;
    let restored = inventory::restored(&dir.display().to_string(), &files)?;
    drop(files);
    let mut vms = Vec::new();
    for f in inventories {
        let text = inputs::read_input_text(f, inputs::InputKind::Yaml)?;
        vms.extend(crate::migration::check::parse_vm_inventory(
            &f.display().to_string(),
            &text,
        )?);
    }
    let mut all = Vec::new();
    for f in nodes {
        let text = inputs::read_input_text(f, inputs::InputKind::Yaml)?;
        all.extend(inventory::parse_nodes(&f.display().to_string(), &text)?);
    }
    Ok(inventory::compare(&restored, &vms, &all))
}

/// `capstan restore check`: exit 1 while the restored backup and what runs disagree.
pub fn restore_check(args: RestoreCheckArgs) -> Result<Status> {
    let report = inventory_report(&args.dir, &args.vsphere_inventory, &args.nodes)?;
    let mut out = std::io::stdout().lock();
    match args.format {
        RestoreCheckFormat::Json => {
            let json = serde_json::to_string_pretty(&report)?;
            writeln!(out, "{}", printable::json(&json))?;
        }
        RestoreCheckFormat::Text => {
            // Names come from the inventory and the backup: every one is escaped.
            for m in &report.mismatches {
                writeln!(
                    out,
                    "{:<18} {}: {}",
                    m.kind,
                    line(&m.subject),
                    line(&m.detail)
                )?;
                for a in &m.actions {
                    writeln!(out, "  - {}", line(a))?;
                }
            }
            writeln!(
                out,
                "{} VSphereVM(s) matched, {} mismatch(es){}",
                report.matched,
                report.mismatches.len(),
                if report.mismatches.is_empty() {
                    ": clean, the providers may reconcile"
                } else {
                    ": do not let CAPV or the IPAM provider reconcile yet"
                }
            )?;
        }
    }
    Ok(if report.mismatches.is_empty() {
        Status::Success
    } else {
        Status::Findings
    })
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
