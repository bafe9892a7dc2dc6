//! CLI glue of `capstan backup push|dump|list|pull|check` and `capstan restore`: arguments to library calls, results to
//! stdout and stderr.

use crate::backup;
#[cfg(feature = "backup")]
use crate::backup::store::Store;
use crate::cli::terminal::Status;
#[cfg(feature = "backup")]
use crate::cli::terminal::{identities, optional_identities};
#[cfg(feature = "backup")]
use crate::cli::{BackupCheckArgs, BackupListArgs, BackupPullArgs, BackupPushArgs};
use crate::cli::{BackupCommand, BackupDumpArgs, ReportFormat, RestoreCheckArgs, RestorePlanArgs};
use crate::inputs;
#[cfg(feature = "backup")]
use crate::pipeline;
#[cfg(feature = "backup")]
use crate::printable;
use crate::printable::{line, Label};
use anyhow::Result;
use std::io::Write as _;

/// Run one `capstan backup` command.
pub fn run(cmd: BackupCommand) -> Result<Status> {
    match cmd {
        #[cfg(feature = "backup")]
        BackupCommand::Push(args) => push(args),
        BackupCommand::Dump(args) => dump(args),
        #[cfg(feature = "backup")]
        BackupCommand::List(args) => list(args),
        #[cfg(feature = "backup")]
        BackupCommand::Pull(args) => pull(args),
        #[cfg(feature = "backup")]
        BackupCommand::Check(args) => check(args),
        #[cfg(not(feature = "backup"))]
        BackupCommand::Push(_)
        | BackupCommand::List(_)
        | BackupCommand::Pull(_)
        | BackupCommand::Check(_) => Err(without_backup()),
    }
}

#[cfg(feature = "backup")]
fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(feature = "backup")]
/// Print what a listing skipped, escaped, on stderr.
fn report_skipped(skipped: &[String]) {
    for s in skipped {
        eprintln!("skipped: {}", line(s));
    }
}

#[cfg(feature = "backup")]
/// The newest backup under `url` (or the one its last segment names): its index, and the
/// store it is in. What was skipped on the way is reported.
fn choose(url: &str) -> Result<(Store, backup::Index)> {
    let (url, id) = split_id(url);
    let store = Store::open(url, false)?;
    let (found, skipped) = store.choose(id, now_unix())?;
    report_skipped(&skipped);
    let index = found.ok_or_else(|| backup::BackupError::NotFound {
        url: line(url).into_owned(),
        message: match id {
            Some(id) => format!("no backup `{id}`"),
            None => "no backup".into(),
        },
    })?;
    Ok((store, index))
}

#[cfg(feature = "backup")]
/// Stream, verify and decrypt backup `index`, each file to `sink`; the store's own error
/// (a stall, a trickle) comes first when the download failed.
fn open_streamed(
    store: &Store,
    index: &backup::Index,
    ids: &[age::x25519::Identity],
    progress: bool,
    sink: &mut backup::payload::Sink<'_>,
) -> Result<usize, backup::BackupError> {
    let mut reader = store.reader(&index.object(), index.size.min(backup::MAX_OBJECT))?;
    if reader.size != index.size {
        return Err(backup::BackupError::Corrupt {
            id: index.id.clone(),
            message: format!(
                "the encrypted object has {} bytes, its index says {} (truncated or replaced)",
                reader.size, index.size
            ),
        });
    }
    let result = {
        let mut shown = Progress::new(progress, index.size);
        let mut counted = Counted {
            inner: &mut reader,
            progress: &mut shown,
        };
        let r = backup::open(index, &mut counted, ids, sink);
        shown.done();
        r
    };
    result.map_err(|e| reader.failure.take().unwrap_or(e))
}

#[cfg(feature = "backup")]
/// Progress of a download on stderr, when it is a terminal: at most twice a second.
struct Progress {
    on: bool,
    total: u64,
    done: u64,
    last: std::time::Instant,
}

#[cfg(feature = "backup")]
impl Progress {
    fn new(on: bool, total: u64) -> Progress {
        Progress {
            on,
            total,
            done: 0,
            last: std::time::Instant::now(),
        }
    }
    fn add(&mut self, n: usize) {
        self.done += n as u64;
        if self.on && self.last.elapsed() >= std::time::Duration::from_millis(500) {
            self.last = std::time::Instant::now();
            eprint!(
                "\rpulled {} of {} MiB",
                self.done >> 20,
                self.total.div_ceil(1 << 20)
            );
        }
    }
    fn done(&mut self) {
        if self.on {
            eprint!("\r\x1b[K");
        }
    }
}

#[cfg(feature = "backup")]
struct Counted<'a, R> {
    inner: &'a mut R,
    progress: &'a mut Progress,
}

#[cfg(feature = "backup")]
impl<R: std::io::Read> std::io::Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.add(n);
        Ok(n)
    }
}

#[cfg(feature = "backup")]
/// The newest backup's files, in memory (for `check`), its public object manifest
/// checked against them.
fn fetch(
    url: &str,
    ids: &[age::x25519::Identity],
) -> Result<(
    backup::Index,
    Vec<inputs::MovedFile>,
    Vec<backup::objects::Entry>,
)> {
    let (store, index) = choose(url)?;
    let mut files = Vec::new();
    open_streamed(&store, &index, ids, false, &mut |name, size, r| {
        let mut bytes = zeroize::Zeroizing::new(Vec::with_capacity(size as usize));
        r.read_to_end(&mut bytes)
            .map_err(|e| backup::BackupError::Corrupt {
                id: index.id.clone(),
                message: format!("{}: {e}", line(name)),
            })?;
        files.push(inputs::MovedFile {
            name: name.to_string(),
            bytes,
        });
        Ok(())
    })?;
    let objects = backup::objects::verify(&index, &files).map_err(backup::BackupError::from)?;
    Ok((index, files, objects))
}

#[cfg(feature = "backup")]
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
    let mut expected = pipeline::render_disk::<_, anyhow::Error>(
        &dirs,
        &pipeline::Options {
            templates: args.templates.as_deref(),
            digests: inputs::Digests::NotWanted,
        },
        |_, r, _| Ok(backup::check::expected(&r.name, &r.namespace, &r.resources)),
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
            let (index, _files, objects) = fetch(&args.url, ids)?;
            (index, objects, "verified against the encrypted payload")
        }
        None => {
            let (_, mut index) = choose(&args.url)?;
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
    let report = backup::check::check(&index, &objects, &expected, now_unix(), max_age);
    let mut out = std::io::stdout().lock();
    if args.json() {
        // stdout's lock is reentrant: print_json takes it again on this thread.
        crate::cli::terminal::print_json(&report)?;
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
        for c in &report.custody {
            writeln!(out, "custody  {}", line(c))?;
        }
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

#[cfg(feature = "backup")]
fn push(args: BackupPushArgs) -> Result<Status> {
    use backup::custody;
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
    let mut offline: Vec<String> = marked
        .iter()
        .filter(|r| r.offline)
        .map(|r| r.key.to_string())
        .collect();
    offline.sort();
    offline.dedup();
    let recipients: Vec<_> = marked.into_iter().map(|r| r.key).collect();
    anyhow::ensure!(
        !recipients.is_empty(),
        "name the recipients with --recipient or --recipients-file: operators and the DR identity"
    );
    let dir = inputs::MovedDirectory::open(&args.dir)?;
    if !dir.names.iter().any(|n| backup::object_of(n).is_some()) {
        return Err(backup::BackupError::Empty {
            dir: args.dir.label(),
        }
        .into());
    }
    let (id, created) = backup::new_id(now_unix())?;
    if args.dry_run {
        let label = args.dir.display().to_string();
        let mut read = |name: &str| dir.read(name).map_err(backup::BackupError::from);
        let (index, _) = backup::seal(
            &label,
            &dir.names,
            &mut read,
            (&id, &created),
            &recipients,
            std::io::sink(),
        )?;
        eprintln!(
            "would push a backup to {}: {} objects encrypted to {} recipient(s); nothing uploaded \
             (--dry-run; the store was not contacted)",
            line(&args.url),
            index.files,
            recipients.len()
        );
        return Ok(Status::Success);
    }
    let store = Store::open(&args.url, true)?;
    let label = args.dir.display().to_string();
    let index = store.push(&id, |w| {
        let mut read = |name: &str| dir.read(name).map_err(backup::BackupError::from);
        backup::seal(
            &label,
            &dir.names,
            &mut read,
            (&id, &created),
            &recipients,
            w,
        )
        .map(|(mut index, _)| {
            index.offline_recipients = Some(offline.clone());
            index
        })
    })?;
    eprintln!(
        "backup {} pushed to {}: {} objects, {} bytes encrypted to {} recipient(s)",
        index.id,
        line(store.url()),
        index.files,
        index.size,
        index.recipients.len()
    );
    println!("{}", index.id);
    Ok(Status::Success)
}

fn dump(args: BackupDumpArgs) -> Result<Status> {
    use crate::yaml::Scrubbed;
    let mut lists = Vec::with_capacity(args.files.len());
    for f in &args.files {
        let stdin = f.as_os_str() == "-";
        let label = if stdin {
            "stdin".to_string()
        } else {
            f.display().to_string()
        };
        // The Lists hold the namespaces' Secrets in plaintext: read, parsed and dropped
        // zeroized; from stdin (`kubectl … | capstan backup dump -`) they never touch a disk.
        let text = if stdin {
            use std::io::Read as _;
            let cap = inputs::InputKind::Backup.cap();
            let mut buf = zeroize::Zeroizing::new(Vec::with_capacity(1 << 20));
            std::io::stdin()
                .lock()
                .take(cap + 1)
                .read_to_end(&mut buf)?;
            anyhow::ensure!(buf.len() as u64 <= cap, "stdin: more than {cap} bytes");
            zeroize::Zeroizing::new(String::from_utf8(std::mem::take(&mut *buf)).map_err(|_| {
                anyhow::anyhow!("stdin: not UTF-8; expected `kubectl get … -o json`")
            })?)
        } else {
            zeroize::Zeroizing::new(inputs::read_input_text(f, inputs::InputKind::Backup)?)
        };
        // One or more Lists, one after the other (`(kubectl get -n A …; kubectl get -n B …)`).
        for (n, tree) in serde_json::Deserializer::from_str(&text)
            .into_iter::<serde_json::Value>()
            .enumerate()
        {
            let tree = tree.map_err(|e| backup::dump::DumpError::NotAList {
                file: line(&label).into_owned(),
                // serde_json's message names a line and column, never the text.
                message: format!("not JSON ({e})"),
            })?;
            let name = if n == 0 {
                label.clone()
            } else {
                format!("{label} (document {})", n + 1)
            };
            lists.push((line(&name).into_owned(), Scrubbed(tree)));
        }
    }
    let dump = backup::dump::dump(&lists).map_err(backup::BackupError::from)?;
    drop(lists);
    if args.dry_run {
        backup::staging::check_out(&args.to)?;
    } else {
        let mut staging = backup::staging::Staging::new(&args.to)?;
        for (name, bytes) in &dump.files {
            staging.write(name, &mut &bytes[..])?;
        }
        staging.commit()?;
    }
    for o in &dump.orphans {
        eprintln!("left out: {}", line(o));
    }
    for d in &dump.detached {
        eprintln!(
            "saved without its SopsSecret owner: Secret {} (clusterctl never saves it: its owner is outside the move's \
             graph); annotated sopssecret/managed: \"true\", so sops-secrets-operator adopts it once its SopsSecret is back",
            line(d)
        );
    }
    for c in &dump.paused {
        eprintln!(
            "warning: Cluster {} is paused (spec.paused: true) on the live cluster: a `clusterctl move` killed between \
             pausing and unpausing leaves it so; `capstan backup check` fails on this backup until it is unpaused",
            line(c)
        );
    }
    eprintln!(
        "{} objects of {} Cluster(s) ({}) {} {} as `clusterctl move --to-directory` saves them (files mode 0600); \
         {} object(s) of the namespaces linked to no Cluster left out, as clusterctl leaves them{}",
        dump.files.len(),
        dump.clusters.len(),
        line(&dump.clusters.join(", ")),
        if args.dry_run { "would be written to" } else { "written to" },
        args.to.label(),
        dump.unlinked,
        if args.dry_run { "; nothing written (--dry-run)" } else { "" }
    );
    Ok(Status::Success)
}

#[cfg(feature = "backup")]
fn list(args: BackupListArgs) -> Result<Status> {
    let store = Store::open(&args.url, false)?;
    let mut out = std::io::stdout().lock();
    let mut n = 0usize;
    let mut failed: Option<std::io::Error> = None;
    // One index at a time: printed, then dropped.
    let skipped = store.scan(now_unix(), &mut |i| {
        let r = (|| -> std::io::Result<()> {
            if args.json() {
                let json =
                    serde_json::to_string_pretty(&i.report()).map_err(std::io::Error::other)?;
                let sep = if n == 0 { "[\n" } else { ",\n" };
                write!(out, "{sep}{}", printable::json(&json))
            } else {
                // Indexes are read from the bucket: every field is escaped.
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
                )
            }
        })();
        n += 1;
        match r {
            Ok(()) => true,
            Err(e) => {
                failed = Some(e);
                false
            }
        }
    })?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    if args.json() {
        writeln!(out, "{}", if n == 0 { "[]" } else { "\n]" })?;
    } else if n == 0 {
        writeln!(out, "no backups under {}", line(store.url()))?;
    }
    report_skipped(&skipped);
    Ok(Status::Success)
}

#[cfg(feature = "backup")]
/// Whether the last segment of a URL is a backup id (`20261205T083000Z-1a2b3c4d`).
fn split_id(url: &str) -> (&str, Option<&str>) {
    match url.trim_end_matches('/').rsplit_once('/') {
        Some((base, last)) if backup::is_id(last) => (base, Some(last)),
        _ => (url, None),
    }
}

#[cfg(feature = "backup")]
fn pull(args: BackupPullArgs) -> Result<Status> {
    let ids = identities(args.identity.as_deref())?;
    let (store, index) = choose(&args.url)?;
    if args.dry_run {
        backup::staging::check_out(&args.out)?;
        let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
        // Every file read to its end: the stream, the manifest's sha256 and the MAC verified.
        let n = open_streamed(&store, &index, &ids, progress, &mut |_, _, r| {
            std::io::copy(r, &mut std::io::sink())
                .map(|_| ())
                .map_err(|e| backup::BackupError::Io {
                    path: "the backup stream".into(),
                    message: e.to_string(),
                })
        })?;
        eprintln!(
            "backup {} ({}) verified and decrypted: {} objects would be written to {}; nothing written (--dry-run)",
            line(&index.id),
            line(&index.created),
            n,
            args.out.label()
        );
        return Ok(Status::Success);
    }
    // Files go into a staging directory beside OUT (a killed pull's is removed first),
    // which takes OUT's place only once everything verified. A writer thread creates the
    // files while the next one is decrypted: handed over one at a time (a rendezvous), so
    // at most two files are in memory.
    let staging = backup::staging::Staging::new(&args.out)?;
    let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let (tx, rx) = std::sync::mpsc::sync_channel::<(String, zeroize::Zeroizing<Vec<u8>>)>(0);
    let writer = std::thread::spawn(move || -> Result<_, backup::BackupError> {
        let mut staging = staging;
        for (name, bytes) in rx {
            staging.write(&name, &mut &bytes[..])?;
        }
        Ok(staging)
    });
    let opened = open_streamed(&store, &index, &ids, progress, &mut |name, size, r| {
        // Sized from the manifest (at most 16 MiB): a buffer that grows leaves unzeroed
        // copies behind.
        let mut bytes = zeroize::Zeroizing::new(Vec::with_capacity(size as usize));
        r.read_to_end(&mut bytes)
            .map_err(|e| backup::BackupError::Io {
                path: "the backup stream".into(),
                message: e.to_string(),
            })?;
        tx.send((name.to_string(), bytes))
            .map_err(|_| backup::BackupError::Io {
                path: args.out.label(),
                message: "the writer stopped".into(),
            })
    });
    drop(tx);
    let staged = writer
        .join()
        .map_err(|_| anyhow::anyhow!("{}: the writer thread failed", args.out.label()))?;
    // The writer's own error (the disk) first; then the backup's.
    let staging = staged?;
    let n = opened?;
    staging.commit()?;
    eprintln!(
        "backup {} ({}) written to {}: {} objects, files mode 0600",
        line(&index.id),
        line(&index.created),
        args.out.label(),
        n
    );
    Ok(Status::Success)
}

/// `restore plan` in a build without the `backup` feature.
#[cfg(not(feature = "backup"))]
pub fn restore_plan(_args: RestorePlanArgs) -> Result<Status> {
    Err(without_backup())
}

/// Why a backup command is refused in a build without the `backup` feature.
#[cfg(not(feature = "backup"))]
fn without_backup() -> anyhow::Error {
    anyhow::anyhow!(
        "this capstan was built without the `backup` feature (the Argo CD plugin image carries no S3 client): \
         run backup push, list, pull, check and restore plan with the CLI build (`cargo install` or the CI image)"
    )
}

#[cfg(feature = "backup")]
/// `capstan restore plan`: the runbook for the repository's clusters and the newest backup.
pub fn restore_plan(args: RestorePlanArgs) -> Result<Status> {
    let dirs = inputs::discover(&args.repo)?;
    let configs = inputs::load_clusters(&dirs)?;
    // Whether any cluster's machines take addresses from an IPAM pool (its rendered templates).
    let ipam = pipeline::render_disk::<_, anyhow::Error>(
        &dirs,
        &pipeline::Options {
            templates: None,
            digests: inputs::Digests::NotWanted,
        },
        |_, r, _| Ok(backup::check::expected(&r.name, &r.namespace, &r.resources).ipam),
    )?
    .into_iter()
    .any(|x| x);
    let findings = match &args.pulled {
        Some(dir) => Some(inventory_report(dir, &args.vsphere_inventory, &args.nodes)?),
        None => None,
    };
    let store = Store::open(&args.backup, false)?;
    let (newest, skipped) = store.choose(None, now_unix())?;
    report_skipped(&skipped);
    let newest = newest.as_ref();
    let md = backup::restore::runbook(
        &configs.iter().map(|c| c.config.clone()).collect::<Vec<_>>(),
        ipam,
        store.url(),
        newest.map(|i| (i.id.as_str(), i.created.as_str())),
        findings.as_ref(),
    );
    if args.format == ReportFormat::Json {
        let mut v = serde_json::json!({
            "store": store.url(),
            "backup": newest.map(|i| i.id.as_str()),
            "created": newest.map(|i| i.created.as_str()),
        });
        if let (Some(v), serde_json::Value::Object(m)) = (
            v.as_object_mut(),
            crate::migration::plan::markdown_json(&md),
        ) {
            v.extend(m);
        }
        crate::cli::terminal::print_json(&v)?;
        return Ok(Status::Success);
    }
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
) -> Result<backup::inventory::Report> {
    use backup::inventory;
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
        ReportFormat::Json => crate::cli::terminal::print_json(&report)?,
        ReportFormat::Text => {
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
