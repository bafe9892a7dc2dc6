//! `capstan import kubeadm`: a kubeadm control plane's files read, imported
//! (`migration::import`) and written into a cluster directory, or with `--update` folded
//! into an existing one; with `--dry-run` every check runs and nothing is written.

use crate::cli::terminal::{Action, Change, Status, Writes};
use crate::cli::ImportKubeadmArgs;
use crate::inputs;
use crate::output;
use anyhow::Result;
use std::io::Write;

/// `capstan import kubeadm`.
pub fn kubeadm(args: ImportKubeadmArgs) -> Result<Status> {
    use crate::inputs::SECRETS_FILE;
    use crate::migration::import::{self, ImportOptions};
    let secrets_path = args.out.join(SECRETS_FILE);
    anyhow::ensure!(
        args.update || !secrets_path.exists(),
        "{}: already exists; capstan never overwrites an imported bundle on its own (a second import creates new \
         cluster secrets, which would lock out Talos machines that use the old ones). After a change on the kubeadm \
         side (the encryption key moved to Talos's name) and before any Talos machine exists (phase `prepare`), \
         run the same import with --update: it replaces the bundle and the sealed Secrets and updates \
         spec.encryption and spec.provenance in cluster.yaml, keeping the rest. If the earlier import itself was \
         wrong (another cluster, another name) and nothing uses it yet (no Talos machine, never synced), remove \
         the directory (`rm -r {}`) and import again",
        secrets_path.display(),
        args.out.display()
    );
    let cluster_path = args.out.join(inputs::CLUSTER_FILE);
    anyhow::ensure!(
        !args.update || cluster_path.exists(),
        "{}: --update folds a new import into an existing cluster directory, and there is none; import without \
         --update",
        cluster_path.display()
    );
    let mut recipients: Vec<(String, String)> = args
        .recipients
        .iter()
        .map(|r| ("--recipient".to_string(), r.clone()))
        .collect();
    for f in &args.recipients_file {
        let label = f.display().to_string();
        for r in crate::secrets::parse_recipients_file(
            &label,
            &inputs::read_input_text(f, inputs::InputKind::Identity)?,
        )? {
            recipients.push((label.clone(), r));
        }
    }
    let files = inputs::read_kubeadm_files(
        &args.pki,
        &args.apiserver_manifest,
        &args.kubeadm_config,
        args.encryption_config.as_deref(),
        args.kubelet_config.as_deref(),
        args.controller_manager_manifest.as_deref(),
        args.scheduler_manifest.as_deref(),
    )?;
    let imported = import::import_kubeadm(
        files,
        ImportOptions {
            talos_version: args.talos_version.clone(),
            flavour: args.flavour.clone(),
            name: args.name.clone(),
            namespace: args.namespace.clone(),
            recipients,
            bootstrap_token: args.bootstrap_token.clone().map(zeroize::Zeroizing::new),
            now: std::time::SystemTime::now(),
        },
    )?;
    let mut w = Writes::new(args.dry_run);
    w.warnings = imported.warnings.iter().map(ToString::to_string).collect();
    w.extra.insert(
        "cluster".into(),
        imported.config.metadata.name.clone().into(),
    );
    w.extra.insert(
        "namespace".into(),
        imported.config.metadata.namespace.clone().into(),
    );
    w.extra
        .insert("bootstrapTokenId".into(), imported.token_id.clone().into());
    if args.update {
        update(&args, &imported, secrets_path.exists(), &mut w)?;
    } else {
        create(&args, &imported, &mut w)?;
    }
    w.print(args.format)?;
    if args.print_bootstrap_secret {
        let mut out = std::io::stdout().lock();
        out.write_all(imported.bootstrap_secret.as_bytes())?;
        out.flush()?;
    }
    Ok(Status::Success)
}

/// A first import: new files only, all or none.
fn create(
    args: &ImportKubeadmArgs,
    imported: &crate::migration::import::Imported,
    w: &mut Writes,
) -> Result<()> {
    use crate::inputs::SECRETS_FILE;
    // Refused before anything is written: a cluster imported under kubeadm's default
    // `clusterName: kubernetes` into `clusters/prod-a` would write `kubernetes-*` files that
    // no later import can rename (`--update` keeps the name, a new import never overwrites).
    // (`--update` compares with cluster.yaml instead.)
    if let Some(base) = directory_name(&args.out) {
        let name = &imported.config.metadata.name;
        anyhow::ensure!(
            base == *name,
            "{}: the cluster would be `{name}` (kubeadm's clusterName, or --name) but its directory is `{base}`; \
             its sealed files and objects are named after the cluster, and no later import renames them. Nothing \
             was written: pass --name {base} (with --namespace NAMESPACE if it should not be `{base}` too), or \
             import into a directory named `{name}`",
            args.out.display()
        );
    }
    let cluster_path = args.out.join(inputs::CLUSTER_FILE);
    let write_stub = !cluster_path.exists();
    let mut files: Vec<(&str, &[u8])> = vec![(SECRETS_FILE, imported.secrets_age.as_bytes())];
    for (rel, text) in &imported.sealed {
        files.push((rel.as_str(), text.as_bytes()));
    }
    if write_stub {
        files.push((inputs::CLUSTER_FILE, imported.cluster_yaml.as_bytes()));
    }
    if args.dry_run {
        output::check_creatable(&args.out, &files)?;
    } else {
        output::create_files(&args.out, &files)?;
    }
    let n = imported.config.spec.recipients.len();
    w.changes.push(
        Change::new(&args.out, SECRETS_FILE, Action::Created).what(format!(
            "encrypted to {n} recipient{}",
            if n == 1 { "" } else { "s" }
        )),
    );
    for (rel, _) in &imported.sealed {
        w.changes
            .push(Change::new(&args.out, rel, Action::Created).what("SOPS, sealed"));
    }
    if write_stub {
        w.changes.push(Change::new(
            &args.out,
            inputs::CLUSTER_FILE,
            Action::Created,
        ));
    } else {
        w.changes.push(
            Change::new(&args.out, inputs::CLUSTER_FILE, Action::Kept).what(
                "its spec.encryption and spec.provenance were not changed; run the same import with --update \
                 to set them from these files",
            ),
        );
    }
    w.notes.push(format!(
        "bootstrap token id: {} (Secret kube-system/bootstrap-token-{})",
        imported.token_id, imported.token_id
    ));
    Ok(())
}

/// `import kubeadm --update`: the new import folded into the existing cluster directory.
fn update(
    args: &ImportKubeadmArgs,
    imported: &crate::migration::import::Imported,
    had_bundle: bool,
    w: &mut Writes,
) -> Result<()> {
    let dir = &args.out;
    let c = inputs::load_cluster(dir)?;
    let sealed: Vec<String> = inputs::read_sealed(dir, true, inputs::Digests::NotWanted)?
        .into_iter()
        .map(|s| s.rel)
        .collect();
    let update = crate::migration::import::update(
        &c.file, &c.text, &c.config, had_bundle, imported, &sealed,
    )?;
    let mut files: Vec<(String, Vec<u8>)> = vec![(
        crate::inputs::SECRETS_FILE.to_string(),
        imported.secrets_age.as_bytes().to_vec(),
    )];
    for (rel, text) in &imported.sealed {
        files.push((rel.clone(), text.as_bytes().to_vec()));
    }
    files.push((
        inputs::CLUSTER_FILE.to_string(),
        update.cluster_yaml.into_bytes(),
    ));
    w.replace(dir, &files)?;
    w.remove(dir, &update.stale, "no longer sealed by this import")?;
    w.notes.push(format!(
        "{} {}: a new secrets.age and sealed Secrets from the kubeadm files (same PKI)",
        if args.dry_run {
            "would update"
        } else {
            "updated"
        },
        dir.display()
    ));
    for change in &update.changes {
        w.notes.push(format!("  {change}"));
    }
    w.extra.insert(
        "changes".into(),
        update
            .changes
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .into(),
    );
    w.notes.push(format!(
        "bootstrap token id: {} (Secret kube-system/bootstrap-token-{}); review with `capstan diff` and check again",
        imported.token_id, imported.token_id
    ));
    Ok(())
}

/// The name of the directory a cluster is imported into (`.` and a trailing `/` resolved
/// against the working directory), `None` when it has none (`/`, a path ending in `..`).
fn directory_name(dir: &std::path::Path) -> Option<String> {
    let abs = std::path::absolute(dir).ok()?;
    let abs: std::path::PathBuf = abs
        .components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect();
    Some(abs.file_name()?.to_string_lossy().into_owned())
}
