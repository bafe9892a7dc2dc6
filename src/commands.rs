//! One function per subcommand: turns CLI arguments into library calls and owns stdout
//! and stderr. YAML goes to stdout, everything else to stderr. The only module (with
//! `main.rs`) that uses `anyhow`.

use crate::bundle::{self, Bundle, Outcome};
use crate::cli::{
    Cli, Command, DecryptArgs, ImportCommand, ImportKubeadmArgs, RenderArgs, SecretsCommand,
    ValidateArgs,
};
use crate::inputs::{self, ClusterInput};
use crate::render::{Rendered, Renderer};
use crate::schema::CrdSet;
use crate::yaml;
use anyhow::Result;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

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

/// Run a parsed command line.
pub fn run(cli: Cli) -> Result<Status> {
    match cli.command {
        Command::Render(args) => render(args),
        Command::Validate(args) => validate(args),
        Command::Import(ImportCommand::Kubeadm(args)) => import_kubeadm(*args),
        Command::Secrets(SecretsCommand::Decrypt(args)) => decrypt(args),
    }
}

/// Render every cluster, in input order; one renderer per templates directory.
pub fn render_all(
    clusters: &[ClusterInput],
    templates: Option<&PathBuf>,
) -> Result<Vec<(Rendered, Vec<inputs::Digest256>)>> {
    let mut renderers: BTreeMap<PathBuf, (Renderer, Vec<inputs::Digest256>)> = BTreeMap::new();
    let mut out = Vec::with_capacity(clusters.len());
    for c in clusters {
        let tdir = templates
            .cloned()
            .unwrap_or_else(|| c.root.join("templates"));
        if !renderers.contains_key(&tdir) {
            let (overrides, digests) = inputs::load_templates(&tdir, &c.root)?;
            renderers.insert(tdir.clone(), (Renderer::new(&overrides)?, digests));
        }
        let (renderer, tdigests) = &renderers[&tdir];
        let rendered = renderer.render(&c.file, &c.config)?;
        let mut digests = c.digests.clone();
        digests.extend(tdigests.iter().cloned());
        out.push((rendered, digests));
    }
    Ok(out)
}

fn render(args: RenderArgs) -> Result<Status> {
    let dirs = if args.dirs.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        args.dirs
    };
    let clusters = inputs::load_clusters(&dirs)?;
    let rendered = render_all(&clusters, args.templates.as_ref())?;
    match args.output {
        None => {
            let docs: Vec<serde_json::Value> = rendered
                .iter()
                .flat_map(|(r, _)| r.resources.iter().map(|x| x.value.clone()))
                .collect();
            let text = yaml::to_stream(&docs);
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            out.flush()?;
        }
        Some(root) => {
            let bundles = rendered
                .iter()
                .map(|(r, d)| Bundle::build(r, d))
                .collect::<Result<Vec<_>, _>>()?;
            let report = bundle::write_all(&root, &bundles)?;
            let mut err = std::io::stderr().lock();
            for (name, outcome) in report {
                let what = match outcome {
                    Outcome::Created => "created",
                    Outcome::Updated => "updated",
                    Outcome::Unchanged => "unchanged",
                };
                writeln!(err, "{}: {what}", root.join(name).display())?;
            }
        }
    }
    Ok(Status::Success)
}

fn crd_key(doc: &serde_json::Value) -> (String, String) {
    let get = |p: &str| {
        doc.pointer(p)
            .and_then(serde_json::Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    (get("/spec/group"), get("/spec/names/kind"))
}

/// API groups served by Kubernetes itself; objects in them are not CRD-validated.
fn builtin_group(group: &str) -> bool {
    group.is_empty()
        || !group.contains('.')
        || group.ends_with(".k8s.io") && !group.ends_with(".x-k8s.io")
}

fn validate(args: ValidateArgs) -> Result<Status> {
    // Later --crds sources replace earlier CRDs of the same group and kind, as applying a
    // newer CRD does; within one source a kind defined twice is an error.
    let mut layered: Vec<((String, String), (String, serde_json::Value))> = Vec::new();
    for source in &args.crds {
        let docs = inputs::read_yaml_documents(source, false)?;
        let keys: Vec<(String, String)> = docs.iter().map(|(_, d)| crd_key(d)).collect();
        layered.retain(|(k, _)| !keys.contains(k));
        layered.extend(keys.into_iter().zip(docs));
    }
    let crds = CrdSet::from_documents(layered.into_iter().map(|(_, d)| d).collect())?;
    let mut objects = Vec::new();
    let stdin_only = args.files.is_empty() || args.files.iter().all(|f| f.as_os_str() == "-");
    if stdin_only {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut text)?;
        objects.extend(inputs::parse_documents("<stdin>", &text)?);
    } else {
        for f in &args.files {
            anyhow::ensure!(
                f.as_os_str() != "-",
                "`-` (stdin) cannot be mixed with files"
            );
            objects.extend(inputs::read_yaml_documents(f, true)?);
        }
    }
    let mut err = std::io::stderr().lock();
    let (mut invalid, mut skipped) = (0usize, 0usize);
    for (source, obj) in &objects {
        let api = obj
            .get("apiVersion")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        let kind = obj
            .get("kind")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        let name = obj
            .pointer("/metadata/name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        let group = crate::resource::group_of(api);
        if !crds.knows(api, kind)
            && (builtin_group(group) || !args.strict_kinds)
            && !api.is_empty()
            && !kind.is_empty()
        {
            skipped += 1;
            continue;
        }
        let violations = crds.validate(obj);
        if !violations.is_empty() {
            invalid += 1;
            for v in violations {
                writeln!(err, "{source}: {kind}/{name}: {v}")?;
            }
        }
    }
    writeln!(
        err,
        "validated {} objects against {} CRD versions: {invalid} invalid, {skipped} skipped (no CRD for their kind)",
        objects.len() - skipped,
        crds.len()
    )?;
    Ok(if invalid > 0 {
        Status::Findings
    } else {
        Status::Success
    })
}

fn identities(flag: Option<&std::path::Path>) -> Result<Vec<age::x25519::Identity>> {
    let (label, text) = inputs::read_identity_text(flag, |k| std::env::var(k).ok())?;
    Ok(crate::secrets::parse_identities(&label, &text)?)
}

fn decrypt(args: DecryptArgs) -> Result<Status> {
    let ids = identities(args.identity.as_deref())?;
    let bytes = inputs::read_bytes(&args.path)?;
    let plain = crate::secrets::decrypt(&args.path.display().to_string(), &bytes, &ids)?;
    let mut out = std::io::stdout().lock();
    out.write_all(&plain)?;
    out.flush()?;
    Ok(Status::Success)
}

fn import_kubeadm(args: ImportKubeadmArgs) -> Result<Status> {
    use crate::import::{self, ImportOptions, SECRETS_FILE};
    let secrets_path = args.out.join(SECRETS_FILE);
    anyhow::ensure!(
        !secrets_path.exists(),
        "{}: already exists; capstan never overwrites an imported bundle (a second import would create new \
         cluster secrets and lock the cluster out); move it away only if you mean to start over",
        secrets_path.display()
    );
    let mut recipients: Vec<(String, String)> = args
        .recipients
        .iter()
        .map(|r| ("--recipient".to_string(), r.clone()))
        .collect();
    for f in &args.recipients_file {
        let label = f.display().to_string();
        for r in crate::secrets::parse_recipients_file(&label, &inputs::read_text(f)?)? {
            recipients.push((label.clone(), r));
        }
    }
    let files = inputs::read_kubeadm_files(
        &args.pki,
        &args.apiserver_manifest,
        &args.kubeadm_config,
        args.encryption_config.as_deref(),
    )?;
    let imported = import::import_kubeadm(
        files,
        ImportOptions {
            talos_version: args.talos_version,
            flavour: args.flavour,
            name: args.name,
            namespace: args.namespace,
            recipients,
            bootstrap_token: args.bootstrap_token.map(zeroize::Zeroizing::new),
            now: std::time::SystemTime::now(),
        },
    )?;
    let cluster_path = args.out.join(inputs::CLUSTER_FILE);
    let write_stub = !cluster_path.exists();
    let mut files: Vec<(&str, &[u8])> = vec![(SECRETS_FILE, imported.secrets_age.as_bytes())];
    if write_stub {
        files.push((inputs::CLUSTER_FILE, imported.cluster_yaml.as_bytes()));
    }
    bundle::create_files(&args.out, &files)?;
    let mut err = std::io::stderr().lock();
    for w in &imported.warnings {
        writeln!(err, "warning: {w}")?;
    }
    writeln!(
        err,
        "wrote {} (encrypted to {} recipients)",
        secrets_path.display(),
        imported.config.spec.recipients.len()
    )?;
    if write_stub {
        writeln!(err, "wrote {}", cluster_path.display())?;
    } else {
        writeln!(
            err,
            "kept the existing {}: merge these facts into it by hand:\n{}",
            cluster_path.display(),
            imported.cluster_yaml
        )?;
    }
    writeln!(
        err,
        "bootstrap token id: {} (Secret kube-system/bootstrap-token-{})",
        imported.token_id, imported.token_id
    )?;
    if args.print_bootstrap_secret {
        let mut out = std::io::stdout().lock();
        out.write_all(imported.bootstrap_secret.as_bytes())?;
        out.flush()?;
    }
    Ok(Status::Success)
}
