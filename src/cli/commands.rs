//! One function per subcommand: turns CLI arguments into library calls and owns stdout
//! and stderr. YAML goes to stdout, everything else to stderr. `anyhow` is used here, in the
//! other `cli` modules and in `main.rs` only.

use crate::cli::{
    ArgocdCommand, CheckArgs, Cli, ClusterSecretsArgs, Command, DecryptArgs, DiffArgs, DiffFormat,
    ExplainArgs, ImportCommand, RenderArgs, ReportFormat, SecretsCommand,
};
use crate::inputs::{self, ClusterInput};
use crate::model::Phase;
use crate::output::{self, Bundle, Outcome};
use crate::pipeline;
use crate::pipeline::render::Renderer;
use crate::printable::line;
use crate::yaml;
use anyhow::Result;
use std::io::Write;
use std::path::PathBuf;

pub use crate::cli::terminal::Status;
use crate::cli::terminal::{
    decrypt_sealed, identities, open_sealed, optional_identities, plaintext_object, Writes,
};

/// Run a parsed command line.
pub fn run(cli: Cli) -> Result<Status> {
    if let Some(root) = &cli.repo_root {
        inputs::set_repo_root(root)?;
    }
    match cli.command {
        Command::Render(args) => render(args),
        Command::Validate(args) => crate::cli::validate::validate(args),
        Command::Plan(args) => {
            let c = inputs::load_cluster(&args.dir)?;
            let sizes = pool_sizes(&c)?;
            let mut out = std::io::stdout().lock();
            // The runbook quotes cluster.yaml's values: no control character reaches the terminal.
            let md = crate::migration::plan::runbook(&c.config, &sizes);
            if args.format == ReportFormat::Json {
                crate::cli::terminal::print_json(&crate::migration::plan::runbook_json(
                    &c.config, &md,
                ))?;
            } else {
                out.write_all(crate::printable::escape(&md).as_bytes())?;
            }
            out.flush()?;
            Ok(Status::Success)
        }
        Command::Check(args) => check(*args),
        Command::Import(ImportCommand::Kubeadm(args)) => crate::cli::import::kubeadm(*args),
        Command::Secrets(SecretsCommand::Decrypt(args)) => decrypt(args),
        Command::Secrets(SecretsCommand::Seal(args)) => seal(args),
        Command::Secrets(SecretsCommand::Rekey(args)) => crate::cli::rekey::rekey(args),
        Command::Explain(args) => explain(args),
        Command::Backup(cmd) => crate::cli::backup::run(cmd),
        // Written into memory first: clap_complete panics on a failed write (a closed pipe).
        Command::Completions { shell } => {
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut crate::cli::command(), "capstan", &mut text);
            std::io::stdout().lock().write_all(&text)?;
            Ok(Status::Success)
        }
        Command::Version { format } => version(format),
        Command::Man { out_dir, dry_run } => crate::cli::manpages::man(out_dir, dry_run),
        Command::Restore(crate::cli::RestoreCommand::Check(args)) => {
            crate::cli::backup::restore_check(args)
        }
        Command::Restore(crate::cli::RestoreCommand::Plan(args)) => {
            crate::cli::backup::restore_plan(args)
        }
        Command::Diff(args) => diff(args),
        Command::Secrets(SecretsCommand::SealOperator(args)) => {
            crate::cli::argocd::seal_operator(args)
        }
        Command::Secrets(SecretsCommand::VsphereIdentity(args)) => vsphere_identity(args),
        Command::Argocd(ArgocdCommand::Generate) => crate::cli::argocd::generate(),
        Command::Init(args) => crate::cli::argocd::init(args),
        Command::Rehearse(args) => crate::cli::rehearse::run(args),
    }
}

/// The worker pools' sizes as the cluster renders them (overlays applied: the autoscaler
/// overlay, for one, takes `spec.replicas` out of git), for the runbook.
fn pool_sizes(c: &ClusterInput) -> Result<Vec<crate::migration::plan::PoolSize>> {
    let root = inputs::repo_root(&c.dir);
    let (overrides, _) =
        inputs::load_templates(&inputs::cluster::templates_dir(&root), &root, false)?;
    let overlays = inputs::load_overlays(c, &inputs::OverlayCache::default())?;
    let rendered = crate::pipeline::render_cluster(
        &Renderer::new(&overrides)?,
        &c.file,
        &c.config,
        &overlays.overlays,
    )?;
    Ok(rendered
        .resources
        .iter()
        .filter(|r| r.kind() == "MachineDeployment")
        .map(|r| crate::migration::plan::PoolSize {
            name: r.name().to_string(),
            replicas: crate::resource::at(&r.value, &["spec", "replicas"])
                .and_then(serde_json::Value::as_u64),
            autoscaler: crate::resource::autoscaler_sizes(&r.value)
                .map(|(lo, hi)| (lo.to_string(), hi.to_string())),
        })
        .collect())
}

/// The line between two clusters' documents in a stream.
const SEPARATOR: &str = "---\n";

fn render(args: RenderArgs) -> Result<Status> {
    let dirs = if args.dirs.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        args.dirs.clone()
    };
    let clusters = inputs::discover_all(&dirs)?;
    let ids = if args.decrypt {
        Some(identities(args.identity.as_deref())?)
    } else {
        None
    };
    match &args.output {
        None => render_stream(&args, &clusters, ids.as_deref()),
        Some(root) if args.dry_run => render_dry_run(&args, &clusters, root),
        Some(root) => render_output(&args, &clusters, root),
    }
}

/// `render` without `-o`: one YAML stream on stdout, built whole before anything is printed.
fn render_stream(
    args: &RenderArgs,
    clusters: &[PathBuf],
    ids: Option<&[age::x25519::Identity]>,
) -> Result<Status> {
    // The whole stream is built before anything is printed: a failure prints nothing.
    let parts = pipeline::render_disk::<_, anyhow::Error>(
        clusters,
        &pipeline::Options {
            templates: args.templates.as_deref(),
            digests: inputs::Digests::NotWanted,
        },
        |_, mut r, _| {
            let warnings = std::mem::take(&mut r.warnings);
            if let Some(ids) = &ids {
                for res in &mut r.resources {
                    decrypt_sealed(res, ids)?;
                }
            }
            // Each part ends with the separator before the next cluster's documents
            // (the last part's is left out when printing), so a part is one write.
            let mut text = String::with_capacity(
                crate::resource::stream_capacity(&r.resources) + SEPARATOR.len(),
            );
            crate::resource::write_stream(&r.resources, &mut text);
            text.push_str(SEPARATOR);
            // Held until every cluster is rendered: keep only what it needs.
            text.shrink_to_fit();
            Ok((text, warnings))
        },
    )?;
    print_warnings(parts.iter().flat_map(|p| &p.1))?;
    let mut out = std::io::stdout().lock();
    let last = parts.len().saturating_sub(1);
    for (i, (part, _)) in parts.iter().enumerate() {
        let part = if i == last {
            &part[..part.len() - SEPARATOR.len()]
        } else {
            &part[..]
        };
        out.write_all(part.as_bytes())?;
    }
    out.flush()?;
    Ok(Status::Success)
}

/// `render -o OUT --dry-run`: every bundle built, what would be written said, nothing written.
fn render_dry_run(
    args: &RenderArgs,
    clusters: &[PathBuf],
    root: &std::path::Path,
) -> Result<Status> {
    let built = pipeline::render_disk::<_, anyhow::Error>(
        clusters,
        &pipeline::Options {
            templates: args.templates.as_deref(),
            digests: inputs::Digests::Wanted,
        },
        |_, r, d| Ok((Bundle::build(&r, &d)?, r.warnings)),
    )?;
    if args.format == ReportFormat::Json {
        let clusters: Vec<serde_json::Value> = built
            .iter()
            .map(|(b, _)| {
                serde_json::json!({
                    "path": root.join(&b.name).display().to_string(),
                    "files": b.files.len(),
                    "bytes": b.files.iter().map(|(_, t)| t.len()).sum::<usize>(),
                })
            })
            .collect();
        let warnings: Vec<&String> = built.iter().flat_map(|b| &b.1).collect();
        let objects: usize = built
            .iter()
            .map(|(b, _)| b.files.len().saturating_sub(2))
            .sum();
        let bytes: usize = built
            .iter()
            .flat_map(|(b, _)| b.files.iter().map(|(_, t)| t.len()))
            .sum();
        return render_json(root, true, clusters, (objects, bytes), &warnings);
    }
    print_warnings(built.iter().flat_map(|b| &b.1))?;
    let mut err = std::io::stderr().lock();
    let (mut objects, mut bytes) = (0usize, 0usize);
    for (b, _) in &built {
        let n: usize = b.files.iter().map(|(_, t)| t.len()).sum();
        objects += b.files.len().saturating_sub(2);
        bytes += n;
        let path = root.join(&b.name).display().to_string();
        writeln!(
            err,
            "{}: would write {} files, {n} bytes",
            line(&path),
            b.files.len()
        )?;
    }
    writeln!(
        err,
        "would render {} {}, {objects} {}, {bytes} bytes into {}; nothing written (--dry-run)",
        built.len(),
        if built.len() == 1 {
            "cluster"
        } else {
            "clusters"
        },
        if objects == 1 { "object" } else { "objects" },
        line(&root.display().to_string())
    )?;
    Ok(Status::Success)
}

/// `render -o OUT`: every cluster staged as it is rendered, swapped in once all succeeded.
fn render_output(
    args: &RenderArgs,
    clusters: &[PathBuf],
    root: &std::path::Path,
) -> Result<Status> {
    // Each worker writes its cluster into the staging tree as soon as it is
    // rendered; the tree is swapped in only once every cluster succeeded.
    let output = output::Output::open(root, &mut |lock| {
        eprintln!(
            "{}: another capstan is writing it; waiting for it to finish (lock {})",
            root.display(),
            lock.display()
        );
    })?;
    let staged = pipeline::render_disk::<_, anyhow::Error>(
        clusters,
        &pipeline::Options {
            templates: args.templates.as_deref(),
            digests: inputs::Digests::Wanted,
        },
        |_, r, d| {
            let b = Bundle::build(&r, &d)?;
            // Objects: every file but the kustomization and the lock.
            let objects = b.files.len().saturating_sub(2);
            let bytes: usize = b.files.iter().map(|(_, t)| t.len()).sum();
            Ok((output.stage(&b)?, objects, bytes, r.warnings))
        },
    )?;
    let clusters_n = staged.len();
    let objects: usize = staged.iter().map(|s| s.1).sum();
    let bytes: usize = staged.iter().map(|s| s.2).sum();
    let mut warnings = Vec::new();
    let staged = staged
        .into_iter()
        .map(|s| {
            warnings.extend(s.3);
            s.0
        })
        .collect();
    let committed = output.commit(staged)?;
    if args.format == ReportFormat::Json {
        let clusters = committed
            .report
            .iter()
            .map(|(name, outcome)| {
                serde_json::json!({
                    "path": root.join(name).display().to_string(),
                    "outcome": outcome_word(outcome),
                })
            })
            .collect();
        return render_json(
            root,
            false,
            clusters,
            (objects, bytes),
            &warnings.iter().collect::<Vec<_>>(),
        );
    }
    print_warnings(&warnings)?;
    let report = committed.report;
    if let Some((old, e)) = committed.leftover {
        eprintln!(
            "warning: {} is complete; the previous output at {} could not be removed ({e}); \
             the next render removes it",
            root.display(),
            old.display()
        );
    }
    if args.quiet {
        return Ok(Status::Success);
    }
    let mut err = std::io::stderr().lock();
    for (name, outcome) in report {
        let what = outcome_word(&outcome);
        let path = root.join(name).display().to_string();
        writeln!(err, "{}: {what}", line(&path))?;
    }
    writeln!(
        err,
        "rendered {clusters_n} {}, {objects} {}, {bytes} bytes into {}",
        if clusters_n == 1 {
            "cluster"
        } else {
            "clusters"
        },
        if objects == 1 { "object" } else { "objects" },
        line(&root.display().to_string())
    )?;
    Ok(Status::Success)
}
/// What `render -o` did to a cluster's directory, as its report says it.
fn outcome_word(o: &Outcome) -> &'static str {
    match o {
        Outcome::Created => "created",
        Outcome::Updated => "updated",
        Outcome::Unchanged => "unchanged",
    }
}

/// `render -o --format json`: the clusters (with `--dry-run` their files and bytes, else
/// what was done to each), the totals over what the clusters hold, and the warnings.
fn render_json(
    root: &std::path::Path,
    dry_run: bool,
    clusters: Vec<serde_json::Value>,
    (objects, bytes): (usize, usize),
    warnings: &[&String],
) -> Result<Status> {
    crate::cli::terminal::print_json(&serde_json::json!({
        "dryRun": dry_run,
        "output": root.display().to_string(),
        "clusters": clusters,
        "objects": objects,
        "bytes": bytes,
        "warnings": warnings,
    }))?;
    Ok(Status::Success)
}

/// Render warnings on stderr, one `warning: ` line each (the text is printable already).
fn print_warnings<'a>(warnings: impl IntoIterator<Item = &'a String>) -> Result<()> {
    let mut err = std::io::stderr().lock();
    for w in warnings {
        writeln!(err, "warning: {w}")?;
    }
    Ok(())
}

fn decrypt(args: DecryptArgs) -> Result<Status> {
    let ids = identities(args.identity.as_deref())?;
    let bytes = inputs::read_bytes(&args.path, inputs::InputKind::Sealed)?;
    let label = args.path.display().to_string();
    let is_age = bytes.starts_with(b"-----BEGIN AGE ENCRYPTED FILE-----")
        || bytes.starts_with(b"age-encryption.org/");
    let plain: zeroize::Zeroizing<Vec<u8>> = if is_age {
        crate::secrets::decrypt(&label, &bytes, &ids)?
    } else {
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| anyhow::anyhow!("{label}: neither an age file nor a SOPS YAML file"))?;
        // Every document of a stream sops wrote together, `---` between them, as sops prints.
        let docs = crate::secrets::sops::decrypt_stream(&label, text, &ids)?;
        let mut out = zeroize::Zeroizing::new(String::new());
        for (i, tree) in docs.into_iter().enumerate() {
            if i > 0 {
                out.push_str("---\n");
            }
            out.push_str(&zeroize::Zeroizing::new(yaml::to_string(
                &plaintext_object(tree),
            )));
        }
        zeroize::Zeroizing::new(out.as_bytes().to_vec())
    };
    let mut out = std::io::stdout().lock();
    out.write_all(&plain)?;
    out.flush()?;
    Ok(Status::Success)
}

/// Decrypt `secrets.age` of a cluster and check it against the provenance in `cluster.yaml`.
fn open_bundle(
    c: &ClusterInput,
    ids: &[age::x25519::Identity],
) -> Result<crate::secrets::talos::SecretsBundle> {
    let path = c.dir.join(crate::inputs::SECRETS_FILE);
    anyhow::ensure!(
        path.is_file(),
        "{}: missing; import the cluster first (`capstan import kubeadm`)",
        path.display()
    );
    let bytes = inputs::read_repository_bytes(
        &path,
        &inputs::repo_root(&c.dir),
        inputs::InputKind::SecretsAge,
    )?;
    let label = path.display().to_string();
    let plain = crate::secrets::decrypt(&label, &bytes, ids)?;
    let bundle = crate::secrets::talos::SecretsBundle::parse(&label, &plain)?;
    if let Some(fps) = c
        .config
        .spec
        .provenance
        .as_ref()
        .and_then(|p| p.fingerprints.as_ref())
    {
        let got = bundle.fingerprints()?;
        anyhow::ensure!(
            got.k8s == fps.kubernetes_ca && got.etcd == fps.etcd_ca && got.k8saggregator == fps.front_proxy_ca,
            "{label}: its CA fingerprints differ from {} spec.provenance: this bundle comes from a different import; \
             sealing it would replace the cluster's CA and lock the cluster out",
            c.file
        );
    }
    Ok(bundle)
}

fn seal(args: ClusterSecretsArgs) -> Result<Status> {
    let ids = identities(args.identity.as_deref())?;
    let c = inputs::load_cluster(&args.dir)?;
    let bundle = open_bundle(&c, &ids)?;
    let previous = open_sealed(&c, &ids)?;
    // The digest render compares the sealed files with, computed when the cluster was read.
    let digest = c.secrets_age_sha256.clone().ok_or_else(|| {
        anyhow::anyhow!(
            "{}: secrets.age is missing",
            crate::printable::Label::label(c.dir.as_path())
        )
    })?;
    let files = crate::secrets::seal::seal(crate::secrets::seal::SealRequest {
        config: &c.config,
        cluster_file: &c.file,
        secrets_age_sha256: &digest,
        bundle: &bundle,
        previous,
        lastmodified: &crate::secrets::sops::lastmodified_now(),
    })?;
    let files: Vec<(String, Vec<u8>)> = files
        .into_iter()
        .map(|(p, t)| (p, t.into_bytes()))
        .collect();
    let mut w = Writes::new(args.dry_run);
    w.replace(&args.dir, &files)?;
    // Sealed files `seal` wrote before (they carry its annotation) and no longer writes (the
    // cluster was renamed): removed, or render would refuse them as another cluster's.
    let stale: Vec<String> = c
        .sealed
        .iter()
        .filter(|s| !files.iter().any(|(rel, _)| *rel == s.rel))
        .filter(|s| {
            crate::yaml::parse_one(&s.text).is_ok_and(|v| {
                v.pointer("/metadata/annotations")
                    .and_then(|a| a.get(crate::secrets::seal::ANN_BUNDLE))
                    .is_some()
            })
        })
        .map(|s| s.rel.clone())
        .collect();
    w.remove(&args.dir, &stale, "sealed for another cluster name")?;
    w.print(args.format)?;
    Ok(Status::Success)
}

/// The most bytes read from stdin for a password.
const PASSWORD_MAX: u64 = 4096;

fn vsphere_identity(args: crate::cli::VsphereIdentityArgs) -> Result<Status> {
    use std::io::Read as _;
    let c = inputs::load_cluster(&args.dir)?;
    let mut raw = zeroize::Zeroizing::new(Vec::new());
    std::io::stdin()
        .lock()
        .take(PASSWORD_MAX + 1)
        .read_to_end(&mut raw)
        .map_err(|e| anyhow::anyhow!("stdin: reading the vSphere password: {e}"))?;
    anyhow::ensure!(
        raw.len() as u64 <= PASSWORD_MAX,
        "stdin: expected the vSphere password on one line, found more than {PASSWORD_MAX} bytes"
    );
    let text = std::str::from_utf8(&raw)
        .map_err(|_| anyhow::anyhow!("stdin: expected the vSphere password as UTF-8 text"))?;
    let line = text.strip_suffix('\n').unwrap_or(text);
    let line = line.strip_suffix('\r').unwrap_or(line);
    anyhow::ensure!(
        !line.contains('\n'),
        "stdin: expected the vSphere password on one line, found several"
    );
    let password = zeroize::Zeroizing::new(line.to_string());
    let (rel, text) = crate::secrets::seal::identity_secret(
        &c.config,
        &c.file,
        &args.username,
        &password,
        &crate::secrets::sops::lastmodified_now(),
    )?;
    let files = vec![(rel, text.into_bytes())];
    let mut w = Writes::new(args.dry_run);
    w.replace(&args.dir, &files)?;
    w.print(args.format)?;
    Ok(Status::Success)
}

/// `capstan version`: what this build is and supports, from the tables the commands use.
fn version(format: ReportFormat) -> Result<Status> {
    use crate::model::{Flavour, TALOS_SUPPORT};
    let talos: Vec<serde_json::Value> = TALOS_SUPPORT
        .iter()
        .map(|t| {
            serde_json::json!({
                "talos": format!("v1.{}", t.talos_minor),
                "kubernetesMin": format!("v1.{}", t.k8s_min),
                "kubernetesMax": format!("v1.{}", t.k8s_max),
            })
        })
        .collect();
    let providers: serde_json::Map<String, serde_json::Value> = Flavour::ALL
        .iter()
        .map(|f| {
            let pins: Vec<serde_json::Value> = crate::inputs::providers::verified(*f)
                .iter()
                .map(|p| serde_json::json!({"name": p.name, "releases": p.releases.to_string()}))
                .collect();
            (f.as_str().to_string(), serde_json::Value::from(pins))
        })
        .collect();
    let schemas: Vec<String> = crate::schema::embedded::Embedded::load()?
        .kubernetes_minors()
        .iter()
        .map(|m| format!("v1.{m}"))
        .collect();
    // build.rs writes `<commit>` or `<commit>, modified` (a tree with changes).
    let (commit, modified) = match env!("CAPSTAN_COMMIT").split_once(", ") {
        Some((c, _)) => (c, true),
        None => (env!("CAPSTAN_COMMIT"), false),
    };
    let v = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "commit": commit,
        "modified": modified,
        "backup": cfg!(feature = "backup"),
        "talos": talos,
        "verifiedProviders": providers,
        "kubernetesSchemas": schemas,
    });
    if format == ReportFormat::Json {
        crate::cli::terminal::print_json(&v)?;
        return Ok(Status::Success);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "capstan {}", crate::cli::VERSION)?;
    writeln!(
        out,
        "backup (S3 and file stores): {}",
        if cfg!(feature = "backup") {
            "built in"
        } else {
            "not built in (feature `backup`)"
        }
    )?;
    for t in TALOS_SUPPORT {
        writeln!(
            out,
            "Talos v1.{}: Kubernetes v1.{} to v1.{}",
            t.talos_minor, t.k8s_min, t.k8s_max
        )?;
    }
    for f in Flavour::ALL {
        let pins = crate::inputs::providers::verified(f);
        let list: Vec<String> = pins
            .iter()
            .map(|p| format!("{} {}", p.name, p.releases))
            .collect();
        if list.is_empty() {
            writeln!(
                out,
                "flavour {}: no provider releases verified for the migration phases (renders clusters that are not migrating)",
                f.as_str()
            )?;
        } else {
            writeln!(
                out,
                "flavour {}: migration phases verified against {}",
                f.as_str(),
                list.join(", ")
            )?;
        }
    }
    if let (Some(first), Some(last)) = (schemas.first(), schemas.last()) {
        writeln!(
            out,
            "validate: Kubernetes schemas {first} to {last} embedded"
        )?;
    }
    Ok(Status::Success)
}

fn explain(args: ExplainArgs) -> Result<Status> {
    let from_stdin = args.text.len() == 1 && args.text[0] == "-";
    let text = if from_stdin {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut bytes)?;
        String::from_utf8_lossy(&bytes).into_owned()
    } else {
        anyhow::ensure!(
            !args.text.iter().any(|w| w == "-"),
            "`-` (stdin) cannot be mixed with text"
        );
        args.text.join(" ")
    };
    let matches = crate::migration::explain::explain(&text);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match args.format {
        ReportFormat::Json => {
            let list: Vec<serde_json::Value> = matches
                .iter()
                .map(|m| {
                    let e = m.entry;
                    serde_json::json!({
                        "id": e.id,
                        "title": e.title,
                        "source": e.source,
                        "cause": e.cause,
                        "caughtBy": e.caught_by,
                        "fix": e.fix,
                        "procedures": e.procedures.iter().filter_map(|id| crate::procedure::by_id(id)).map(|p| serde_json::json!({
                            "id": p.id,
                            "title": p.title,
                            "steps": p.steps(&crate::procedure::Names::placeholders()),
                            "why": p.why,
                        })).collect::<Vec<_>>(),
                        "line": m.line,
                        "occurrences": m.occurrences,
                    })
                })
                .collect();
            serde_json::to_writer_pretty(&mut out, &list)?;
            writeln!(out)?;
        }
        ReportFormat::Text => {
            for (i, m) in matches.iter().enumerate() {
                let e = m.entry;
                if i > 0 {
                    writeln!(out)?;
                }
                writeln!(out, "{}: {}", e.id, e.title)?;
                writeln!(out, "  seen in: {}", e.source)?;
                if from_stdin {
                    writeln!(
                        out,
                        "  matched: line {} ({} line{})",
                        m.line,
                        m.occurrences,
                        if m.occurrences == 1 { "" } else { "s" }
                    )?;
                }
                writeln!(out, "  cause: {}", e.cause)?;
                let by = |g: crate::migration::explain::Guard| -> Vec<&str> {
                    e.caught_by
                        .iter()
                        .copied()
                        .filter(|f| crate::migration::explain::guard_of(f) == Some(g))
                        .collect()
                };
                let (checked, rendered) = (
                    by(crate::migration::explain::Guard::Check),
                    by(crate::migration::explain::Guard::Render),
                );
                if e.caught_by.is_empty() {
                    writeln!(
                        out,
                        "  caught by: no capstan check finding (a runtime condition)"
                    )?;
                }
                if !checked.is_empty() {
                    writeln!(out, "  caught by: capstan check ({})", checked.join(", "))?;
                }
                if !rendered.is_empty() {
                    writeln!(
                        out,
                        "  caught by: capstan render, which refuses the state ({})",
                        rendered.join(", ")
                    )?;
                }
                writeln!(out, "  fix:")?;
                for step in e.fix {
                    writeln!(out, "    - {step}")?;
                }
                for p in e
                    .procedures
                    .iter()
                    .filter_map(|id| crate::procedure::by_id(id))
                {
                    writeln!(out, "  {}:", p.title)?;
                    for (i, step) in p
                        .steps(&crate::procedure::Names::placeholders())
                        .iter()
                        .enumerate()
                    {
                        writeln!(out, "    {}. {step}", i + 1)?;
                    }
                    writeln!(out, "    why: {}", p.why)?;
                }
            }
        }
    }
    out.flush()?;
    if matches.is_empty() {
        eprintln!(
            "capstan explain: no known migration error in the text; paste the whole message as printed \
             (log prefixes are fine), or pipe the log: `kubectl -n kube-system logs <pod> | capstan explain -`"
        );
        return Ok(Status::Findings);
    }
    Ok(Status::Success)
}

/// The IPAM pools of a cluster's render, for `check --nodes` (D14); a cluster that does not
/// render yet (an import stub) says so as one unlisted pool.
fn rendered_pools(
    dir: &std::path::Path,
    config: &crate::model::ClusterConfig,
) -> Vec<crate::migration::check::PoolFacts> {
    use crate::migration::check::PoolFacts;
    let pools = (|| -> Result<Vec<PoolFacts>> {
        let dirs = inputs::discover(dir)?;
        let each = pipeline::render_disk::<_, anyhow::Error>(
            &dirs,
            &pipeline::Options {
                templates: None,
                digests: inputs::Digests::NotWanted,
            },
            |_, r, _| {
                Ok(r.resources
                    .iter()
                    .filter(|res| {
                        matches!(
                            res.value.get("kind").and_then(serde_json::Value::as_str),
                            Some("InClusterIPPool" | "GlobalInClusterIPPool")
                        )
                    })
                    .map(|res| PoolFacts {
                        name: format!(
                            "{} {}",
                            res.value["kind"].as_str().unwrap_or_default(),
                            res.value["metadata"]["name"].as_str().unwrap_or_default()
                        ),
                        addresses: crate::pipeline::render::endpoint::pool_spec(
                            &res.value,
                            &res.origin,
                        )
                        .and_then(|p| p.allocatable()),
                    })
                    .collect::<Vec<_>>())
            },
        )?;
        Ok(each.into_iter().flatten().collect())
    })();
    pools.unwrap_or_else(|e| {
        // cluster.yaml's own pool is known without a render; an overlay's pools are not.
        let mut out: Vec<PoolFacts> = config
            .spec
            .endpoint
            .active_pool()
            .map(|p| PoolFacts {
                name: "spec.endpoint.controlPlanePool".into(),
                addresses: p.allocatable(),
            })
            .into_iter()
            .collect();
        out.push(PoolFacts {
            name: "the overlays' pools".into(),
            addresses: Err(format!("the cluster does not render yet ({e:#})")),
        });
        out
    })
}

/// What `capstan check` compares: the cluster directory's inputs, then each file a flag names,
/// read and parsed (an error names the file and what it should hold).
fn check_inputs(
    args: &CheckArgs,
    c: &ClusterInput,
    now: std::time::SystemTime,
) -> Result<crate::migration::check::CheckInputs> {
    use crate::inputs::kubeadm;
    use crate::migration::check::{self, CheckInputs, Input};
    // A file named on the command line, parsed whole by `parse`.
    fn file<T, E: std::error::Error + Send + Sync + 'static>(
        p: Option<&PathBuf>,
        parse: impl Fn(&str, &[u8]) -> std::result::Result<T, E>,
    ) -> Result<Option<Input<T>>> {
        let Some(p) = p else { return Ok(None) };
        let f = inputs::read_input(p)?;
        let value = parse(&f.label, &f.bytes)?;
        Ok(Some(Input {
            file: f.label,
            value,
        }))
    }
    let mut ci = CheckInputs::for_cluster(c, now);
    ci.apiserver = file(args.apiserver_manifest.as_ref(), kubeadm::parse_apiserver_manifest)?;
    ci.controller_manager = file(args.controller_manager_manifest.as_ref(), kubeadm::parse_controller_manager_manifest)?;
    ci.scheduler = file(args.scheduler_manifest.as_ref(), kubeadm::parse_scheduler_manifest)?;
    ci.cluster_config = file(args.kubeadm_config.as_ref(), kubeadm::parse_cluster_configuration)?;
    ci.encryption = file(args.encryption_config.as_ref(), kubeadm::parse_encryption_config)?;
    ci.authorization = file(args.authorization_config.as_ref(), kubeadm::parse_authorization_config)?;
    ci.apiserver_cert = file(args.apiserver_cert.as_ref(), crate::secrets::pki::certificate_summary)?;
    // The YAML inputs: the file as named and its documents.
    let docs_of = |p: &PathBuf| -> Result<(String, Vec<serde_json::Value>)> {
        let docs = inputs::read_yaml_documents(p, false)?
            .into_iter()
            .map(|(_, d)| d)
            .collect();
        Ok((crate::printable::Label::label(p.as_path()), docs))
    };
    if let Some(p) = &args.kube_proxy {
        let (file, docs) = docs_of(p)?;
        let value = check::find_kube_proxy(&file, docs)?;
        ci.kube_proxy = Some(Input { file, value });
    }
    if let Some(p) = &args.providers {
        let (file, docs) = docs_of(p)?;
        let value = crate::inputs::providers::Inventory::from_documents(&file, docs)?;
        ci.providers = Some(Input { file, value });
    }
    if let Some(p) = &args.nodes {
        let (file, docs) = docs_of(p)?;
        let value = check::find_nodes(&file, docs)?;
        ci.nodes = Some(Input { file, value });
        ci.pools = rendered_pools(&args.dir, &c.config);
    }
    if let Some(p) = &args.management_objects {
        let (file, docs) = docs_of(p)?;
        let value = check::find_management_objects(&file, docs)?;
        ci.management = Some(Input { file, value });
    }
    if let Some(p) = &args.workloads {
        let (file, docs) = docs_of(p)?;
        let value = check::find_workloads(&file, docs)?;
        ci.workloads = Some(Input { file, value });
    }
    if let Some(p) = &args.cni_daemonset {
        let (file, docs) = docs_of(p)?;
        ci.cni = Some(check::find_cni_daemonsets(&file, docs)?);
    }
    if let Some(p) = &args.kubelet_config {
        let (file, docs) = docs_of(p)?;
        let value = check::parse_kubelet_config(&file, &docs)?;
        ci.kubelet = Some(Input { file, value });
    }
    if let Some(p) = &args.etcd_status {
        let (file, docs) = docs_of(p)?;
        let value = check::parse_etcd_status(&file, &docs)?;
        ci.etcd_status = Some(Input { file, value });
    }
    if let Some(p) = &args.etcd_snapshot {
        let f = inputs::read_etcd_snapshot(p)?;
        let value = check::etcd_snapshot_facts(&f);
        ci.etcd_snapshot = Some(Input {
            file: f.label,
            value,
        });
    }
    if let Some(p) = &args.vsphere_inventory {
        let text = inputs::read_input_text(p, inputs::InputKind::Yaml)?;
        let file = crate::printable::Label::label(p.as_path());
        let value = check::parse_vm_inventory(&file, &text)?;
        ci.vsphere_inventory = Some(Input { file, value });
    }
    if let Some(v) = &args.etcd_version {
        if check::parse_etcd_version(v).is_none() {
            return Err(check::CheckError::EtcdVersion {
                source_name: "--etcd-version".into(),
                value: v.clone(),
            }
            .into());
        }
        ci.etcd_version = Some(v.clone());
    }
    if let Some(p) = &args.pki {
        let mut cas = Vec::new();
        for (role, crt, key) in inputs::read_kubeadm_cas(p)? {
            cas.push(check::ca_input(
                role, &crt.label, &crt.bytes, &key.label, &key.bytes, now,
            )?);
        }
        ci.cas = Some(cas);
        ci.pki_dir = Some(p.display().to_string());
    }
    if let Some(p) = &args.identity {
        let ids = identities(Some(p))?;
        let bundle = open_bundle(c, &ids)?;
        ci.bundle = Some(bundle);
        ci.identity_file = Some(p.display().to_string());
    }
    Ok(ci)
}

fn check(args: CheckArgs) -> Result<Status> {
    use crate::migration::check;
    use std::io::IsTerminal;
    let c = inputs::load_cluster(&args.dir)?;
    let ci = check_inputs(&args, &c, std::time::SystemTime::now())?;
    let findings = check::check(&ci);
    let mut out = std::io::stdout().lock();
    match args.format {
        ReportFormat::Json => {
            let mut text = serde_json::to_string_pretty(&check::report_json(&ci, &findings))?;
            text.push('\n');
            out.write_all(crate::printable::json(&text).as_bytes())?;
        }
        ReportFormat::Text => {
            let colour = std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            out.write_all(check::report_text(&ci, &findings, colour).as_bytes())?;
        }
    }
    out.flush()?;
    Ok(
        if findings
            .iter()
            .any(|f| f.severity == check::Severity::Blocking)
        {
            Status::Findings
        } else {
            Status::Success
        },
    )
}

/// The cluster a streamed object belongs to: its `cluster.x-k8s.io/cluster-name` label,
/// else its namespace.
fn stream_cluster(v: &serde_json::Value) -> String {
    v.pointer("/metadata/labels/cluster.x-k8s.io~1cluster-name")
        .and_then(serde_json::Value::as_str)
        .or_else(|| {
            v.pointer("/metadata/namespace")
                .and_then(serde_json::Value::as_str)
        })
        .unwrap_or("(no cluster)")
        .to_string()
}

fn stream_set(docs: Vec<(String, serde_json::Value)>) -> crate::review::diff::ResourceSet {
    let mut set = crate::review::diff::ResourceSet::default();
    for (origin, value) in docs {
        let kind = value.get("kind").and_then(serde_json::Value::as_str);
        let api = value
            .get("apiVersion")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        if kind == Some("Kustomization") || api.starts_with("capstan.dev/") {
            continue;
        }
        set.clusters
            .entry(stream_cluster(&value))
            .or_default()
            .resources
            .push(crate::resource::Resource {
                value,
                origin,
                raw: None,
                template: false,
            });
    }
    set
}

/// Read one side of a diff: stdin, a YAML file, input directories (rendered here), a
/// rendered output directory, or a directory of YAML files.
fn load_side(
    path: &std::path::Path,
    templates: Option<&PathBuf>,
) -> Result<crate::review::diff::ResourceSet> {
    use crate::review::diff::{ClusterSet, ResourceSet};
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut text)?;
        return Ok(stream_set(inputs::parse_documents("<stdin>", &text)?));
    }
    if path.is_file() {
        return Ok(stream_set(inputs::read_yaml_documents(path, false)?));
    }
    anyhow::ensure!(
        path.is_dir(),
        "{}: no such file or directory",
        path.display()
    );
    match inputs::discover(path) {
        Ok(dirs) => {
            let mut set = ResourceSet::default();
            let rendered = pipeline::render_disk::<_, anyhow::Error>(
                &dirs,
                &pipeline::Options {
                    templates: templates.map(std::path::PathBuf::as_path),
                    digests: inputs::Digests::NotWanted,
                },
                |_, r, _| Ok((r.name, r.phase, r.kubeadm_etcd_members, r.resources)),
            )?;
            for (name, phase, kubeadm_etcd_members, resources) in rendered {
                let phase = Some(phase.map_or("(none)", Phase::as_str).to_string());
                set.clusters.insert(
                    name,
                    ClusterSet {
                        resources,
                        phase,
                        kubeadm_etcd_members,
                    },
                );
            }
            return Ok(set);
        }
        Err(inputs::InputError::NoClusters { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    if let Some(clusters) = inputs::read_rendered(path)? {
        let mut set = ResourceSet::default();
        for (name, resources) in clusters {
            set.clusters.insert(
                name,
                ClusterSet {
                    resources,
                    phase: None,
                    kubeadm_etcd_members: 0,
                },
            );
        }
        return Ok(set);
    }
    let docs = inputs::read_yaml_documents(path, true)?;
    anyhow::ensure!(
        !docs.is_empty(),
        "{}: neither a cluster or repository input directory, nor a rendered output directory \
         (no `capstan.lock`), nor a directory of YAML files",
        path.display()
    );
    Ok(stream_set(docs))
}

/// `--compare-sealed` where a pull request's author could read the result: refused.
/// GitHub Actions sets `CI=true` in every step
/// (<https://docs.github.com/en/actions/reference/variables-reference>, "CI: Always set to
/// true"), GitLab in every job
/// (<https://docs.gitlab.com/ci/variables/predefined_variables/>, "CI: Available for all
/// jobs executed in CI/CD. `true` when available").
fn compare_sealed_mode(
    args: &DiffArgs,
    ids: Option<&[age::x25519::Identity]>,
) -> Result<crate::review::diff::SealedValues> {
    use crate::review::diff::SealedValues;
    if !args.compare_sealed {
        return Ok(SealedValues::Resealed);
    }
    anyhow::ensure!(
        args.format != DiffFormat::Markdown,
        "--compare-sealed is refused with --format markdown: it tells whether a re-sealed value is the one \
         sealed before, which a pull request's author must never read (they could re-seal guesses until one \
         reads `unchanged`); run it on your own terminal with --format text or json"
    );
    anyhow::ensure!(
        std::env::var_os("CI").is_none_or(|v| v.is_empty()),
        "--compare-sealed is refused where $CI is set: a CI job's report reaches the pull request's author, \
         who could re-seal guesses of a sealed value until one reads `unchanged`; run it on a key holder's \
         terminal (unset CI there if a tool set it)"
    );
    use crate::inputs::{ENV_AGE_KEY_FILE, ENV_SOPS_AGE_KEY, ENV_SOPS_AGE_KEY_FILE};
    anyhow::ensure!(
        ids.is_some(),
        "--compare-sealed decrypts the sealed values: give an identity (-i FILE, or ${ENV_AGE_KEY_FILE}, \
         ${ENV_SOPS_AGE_KEY_FILE}, ${ENV_SOPS_AGE_KEY})"
    );
    Ok(SealedValues::Compared)
}

fn diff(args: DiffArgs) -> Result<Status> {
    use std::io::IsTerminal;
    let ids = optional_identities(args.identity.as_deref())?;
    let sealed = compare_sealed_mode(&args, ids.as_deref())?;
    let templates = args.templates.as_ref();
    let d = match &args.git {
        Some(range) => {
            anyhow::ensure!(
                args.b.is_none(),
                "with --git, give at most one path: the repository path to render"
            );
            let path = args.a.clone().unwrap_or_else(|| PathBuf::from("."));
            // A named cluster none of whose inputs changed is not rendered: no error.
            crate::review::revisions::review(
                &path,
                range,
                templates,
                &crate::review::revisions::ReviewOptions {
                    identities: ids.as_deref(),
                    sealed,
                    clusters: args.clusters.clone(),
                },
            )?
        }
        None => {
            let (Some(pa), Some(pb)) = (&args.a, &args.b) else {
                anyhow::bail!("give the two sides A and B, or --git REV_A..REV_B");
            };
            anyhow::ensure!(
                !(pa.as_os_str() == "-" && pb.as_os_str() == "-"),
                "only one side can be `-` (stdin)"
            );
            let mut a = load_side(pa, templates)?;
            let mut b = load_side(pb, templates)?;
            for name in &args.clusters {
                anyhow::ensure!(
                    a.clusters.contains_key(name) || b.clusters.contains_key(name),
                    "--cluster {name}: no such cluster on either side (found: {})",
                    a.clusters
                        .keys()
                        .chain(b.clusters.keys())
                        .cloned()
                        .collect::<std::collections::BTreeSet<_>>()
                        .into_iter()
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            if !args.clusters.is_empty() {
                a.clusters.retain(|k, _| args.clusters.contains(k));
                b.clusters.retain(|k, _| args.clusters.contains(k));
            }
            let d = crate::review::diff::diff(
                &a,
                &b,
                &crate::review::diff::Options {
                    a: pa.display().to_string(),
                    b: pb.display().to_string(),
                    identities: ids.as_deref(),
                    sealed,
                    ..Default::default()
                },
            );
            // The process ends soon: freeing two whole renders object by object buys
            // nothing. They hold no plaintext (the diff scrubs what it decrypts).
            std::mem::forget((a, b));
            d
        }
    };
    let text = match args.format {
        DiffFormat::Text => {
            let color = std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            crate::review::report::text(&d, color, args.verbose)
        }
        DiffFormat::Markdown => crate::review::report::markdown(
            &d,
            crate::review::report::GITHUB_COMMENT_LIMIT,
            args.verbose,
        ),
        DiffFormat::Json => crate::review::report::json(&d, args.verbose),
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    use crate::cli::FailOn;
    use crate::review::diff::Severity;
    let worst = |s: Severity| {
        d.clusters
            .iter()
            .any(|c| c.risks.iter().any(|r| r.severity <= s))
    };
    let fail = match args.fail_on {
        FailOn::Differences => d.has_differences(),
        FailOn::High => worst(Severity::High),
        FailOn::Medium => worst(Severity::Medium),
        FailOn::Low => worst(Severity::Low),
    };
    // The process ends next: the report's model is not freed piece by piece.
    std::mem::forget(d);
    Ok(if fail {
        Status::Findings
    } else {
        Status::Success
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_printed_error_chain_says_a_repeated_cause_once() {
        // `main` prints `{:#}`: a library error that names its cause in its own message
        // does not also return it as its source, so the cause is not printed again.
        let os = std::io::Error::new(std::io::ErrorKind::NotFound, "not found");
        let lib = crate::inputs::InputError::Io {
            path: "a/b".into(),
            error: os,
        };
        let err = anyhow::Error::new(lib).context("rendering lab-f");
        assert_eq!(format!("{err:#}"), "rendering lab-f: a/b: not found");
        // A cause that the message does not already end with is kept.
        let err = anyhow::anyhow!("inner").context("outer");
        assert_eq!(format!("{err:#}"), "outer: inner");
    }
}
