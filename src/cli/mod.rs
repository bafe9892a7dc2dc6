//! The command-line interface: clap derive types only. Doc comments are the help text.

pub mod argocd;
pub mod backup;
pub mod commands;
pub mod import;
pub mod manpages;
pub mod rehearse;
pub mod rekey;
pub mod scaffold;
pub mod terminal;
pub mod validate;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Render Cluster API + Talos manifests for kubeadm clusters migrated in place to Talos on
/// vSphere, and manage them through GitOps.
///
/// Exit codes: 0 success, 1 differences or blocking findings, 2 error.
#[derive(Debug, Parser)]
#[command(name = "capstan", version = VERSION, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
    /// The repository root (the directory holding `clusters/`, `overlays/` and
    /// `templates/`), instead of the one found from each cluster directory (the parent of
    /// its `clusters/`, wherever capstan is run from). Every cluster directory must be inside it.
    #[arg(long, global = true, value_name = "DIR")]
    pub repo_root: Option<PathBuf>,
}

/// capstan's commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Render clusters into Cluster API objects: a YAML stream on stdout, or a bundle
    /// directory per cluster with `-o`.
    Render(RenderArgs),
    /// Validate objects strictly against CRD schemas (unknown fields are errors).
    Validate(ValidateArgs),
    /// Print the migration runbook for the cluster's current phase (Markdown): what the bundle
    /// does when synced, the commands around it, what to verify, how to roll back, and why.
    Plan(PlanArgs),
    /// Compare the kubeadm cluster with what the Talos nodes will run ("config matching"):
    /// every comparison is reported, passing ones too, each failure with the error the
    /// cluster would show and the fix. Exit 0 without blocking findings, 1 with, 2 on error.
    Check(Box<CheckArgs>),
    /// Import an existing cluster's PKI and settings.
    #[command(subcommand)]
    Import(ImportCommand),
    /// Work with encrypted secrets.
    #[command(subcommand)]
    Secrets(SecretsCommand),
    /// Encrypted backups of the management cluster's state that git does not hold (what
    /// `clusterctl move --to-directory` writes), on S3 or in a directory.
    #[command(subcommand)]
    Backup(BackupCommand),
    /// Print a shell completion script: `capstan completions bash > /etc/bash_completion.d/capstan`,
    /// zsh into a directory of `$fpath` as `_capstan`, fish into
    /// `~/.config/fish/completions/capstan.fish`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff): `capstan man > capstan.1`; with `--out-dir`, write every
    /// page (`capstan.1`, `capstan-render.1`, `capstan-secrets-decrypt.1`, …) into a directory.
    Man {
        /// Write one page per command and subcommand into DIR (created if missing; pages
        /// there are replaced) instead of printing the top page.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
        /// With `--out-dir`: print the pages that would be written and their sizes; write
        /// nothing.
        #[arg(long, requires = "out_dir")]
        dry_run: bool,
    },
    /// Rebuild a lost management cluster from a backup.
    #[command(subcommand)]
    Restore(RestoreCommand),
    /// Explain an error message seen during a migration: its cause, the `capstan check`
    /// finding that catches it beforehand, and the fix. Paste a log line as it is (prefixes,
    /// timestamps and escaped quotes are fine) or pipe a whole log with `-`.
    ///
    /// Exit codes: 0 something matched, 1 nothing matched, 2 error.
    Explain(ExplainArgs),
    /// Review a change: a resource-level diff of two renders, input directories, YAML
    /// streams or git revisions, with secret values masked and risky changes called out.
    ///
    /// Exit codes: 0 no differences, 1 differences, 2 error.
    Diff(DiffArgs),
    /// Argo CD integration: the config-management plugin.
    #[command(subcommand)]
    Argocd(ArgocdCommand),
    /// Rehearse a cluster's next steps on a model of the providers (CACPPT, CABPT, Cluster
    /// API, CAPV, Talos, Argo CD): from its current phase to `complete`, then one Day-2
    /// operation, each step printed as a short table. It models the providers, not vSphere
    /// or the network (README "Rehearse").
    ///
    /// Exit codes: 0 every step reached its end state, 1 a step stalled, lost etcd quorum or
    /// the API, 2 error.
    Rehearse(RehearseArgs),
    /// Print the release, the commit it was built from and what it supports (the Talos
    /// minors and their Kubernetes versions, the provider releases the migration phases were
    /// verified against, the Kubernetes schemas `validate` embeds). `--version` prints the
    /// first line only.
    Version {
        /// Output format.
        #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
        format: ReportFormat,
    },
    /// Scaffold a GitOps repository (`clusters/`, `overlays/`, `.sops.yaml`, the Argo CD
    /// plugin, sidecar patch and ApplicationSet, a README). Idempotent: existing files are
    /// kept, never overwritten.
    Init(InitArgs),
}

/// `capstan --version`: the release and the commit it was built from.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("CAPSTAN_COMMIT"), ")");

/// The command line as clap parses it, with every subcommand named `capstan` in its
/// `--version` (clap would say `capstan-render`).
pub fn command() -> clap::Command {
    fn name_all(c: clap::Command) -> clap::Command {
        c.mut_subcommands(|s| name_all(s.display_name("capstan")))
    }
    name_all(<Cli as clap::CommandFactory>::command())
}

/// Parse the process's arguments (exits with clap's message and code on an error).
pub fn parse() -> Cli {
    let matches = command().get_matches();
    <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// The `capstan` binary: parse the arguments, run the command, map the result to an exit
/// code (0 success, 1 differences or blocking findings, 2 an error, printed on stderr as
/// one escaped message; a closed stdout ends the command quietly, as `head` expects).
pub fn main() -> std::process::ExitCode {
    match commands::run(parse()) {
        Ok(status) => status.into(),
        Err(err) => {
            if err.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return std::process::ExitCode::SUCCESS;
            }
            eprintln!("error: {}", error_message(&format!("{err:#}")));
            std::process::ExitCode::from(2)
        }
    }
}

/// Output formats of the commands that report: `check`, `rehearse`, `explain`, `restore
/// check`, `backup check`, `backup list` (`diff` adds `markdown`). JSON keys are camelCase, as
/// Kubernetes' own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// For people (coloured on a terminal unless NO_COLOR is set, where the command colours).
    Text,
    /// One JSON document, for programs.
    Json,
}

/// Output formats of `capstan diff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DiffFormat {
    /// For a terminal (coloured on a TTY unless NO_COLOR is set).
    Text,
    /// For a pull-request comment (kept under GitHub's 65,536-character limit).
    Markdown,
    /// For programs.
    Json,
}

/// When `capstan diff` exits 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailOn {
    /// On any difference.
    Differences,
    /// On a high risk note.
    High,
    /// On a medium or high risk note.
    Medium,
    /// On any risk note.
    Low,
}

/// Arguments of `capstan diff`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Each of A and B is a rendered directory (`render -o` output: the root or one cluster's \
directory), a cluster or repository input directory (rendered first), or a YAML stream (a file, `-` for stdin).\n\
With --git, A is the repository path (default `.`) and B is not given."
)]
pub struct DiffArgs {
    /// The old side (with --git: the path inside the repository to render, default `.`).
    #[arg(value_name = "A")]
    pub a: Option<PathBuf>,
    /// The new side.
    #[arg(value_name = "B")]
    pub b: Option<PathBuf>,
    /// Compare two git revisions of the repository holding PATH: `REV_A..REV_B`, `REV_A..`
    /// (against HEAD) or `REV_A` (against the working tree). Revisions are read from git's
    /// object store (nothing is checked out), and only the clusters whose inputs changed
    /// (their directory, the overlays they use, the templates) are rendered.
    #[arg(long, value_name = "REV_A..REV_B")]
    pub git: Option<String>,
    /// Only this cluster; repeatable.
    #[arg(long = "cluster", value_name = "NAME")]
    pub clusters: Vec<String>,
    /// age identity file (default: $CAPSTAN_AGE_KEY_FILE, $SOPS_AGE_KEY_FILE, then
    /// $SOPS_AGE_KEY): verifies side B's sealed files and decodes their certificates. A
    /// sealed value whose ciphertext changed is `re-sealed` whatever it holds; only
    /// --compare-sealed compares plaintexts.
    #[arg(long, short = 'i', value_name = "FILE")]
    pub identity: Option<PathBuf>,
    /// Decrypt re-sealed values and compare them: `unchanged (re-encrypted)` or `changed`,
    /// the Talos secrets bundle's changed fields and their risks. For a key holder's
    /// terminal, never CI: it tells whoever reads the report whether a value re-sealed in
    /// the change is the one sealed before. Needs an identity; refused with `--format
    /// markdown` (the pull-request comment) and where $CI is set.
    #[arg(long)]
    pub compare_sealed: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = DiffFormat::Text)]
    pub format: DiffFormat,
    /// Template overrides directory for input directories (default: `templates/` at each
    /// repository root).
    #[arg(long, value_name = "DIR")]
    pub templates: Option<PathBuf>,
    /// Name every unchanged cluster (by default they are counted).
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Exit 1 on any difference (default), or only on a risk note of this severity or
    /// higher (for a CI check that fails on high risks).
    #[arg(long, value_enum, default_value_t = FailOn::Differences, value_name = "WHEN")]
    pub fail_on: FailOn,
}

// The environment variables capstan reads are defined by the domains that read them; the
// commands' help and code refer to them through these names.
pub use crate::argocd::env::*;
pub use crate::inputs::{ENV_AGE_KEY_FILE, ENV_SOPS_AGE_KEY, ENV_SOPS_AGE_KEY_FILE};
use crate::review::report::error_message;

/// `capstan argocd` commands.
#[derive(Debug, Subcommand)]
pub enum ArgocdCommand {
    /// The config-management plugin's `generate` command: run by Argo CD's repo-server
    /// sidecar in the Application's source directory (a cluster directory or a directory of
    /// clusters). Prints only Kubernetes objects, with sync waves and sync options; reads
    /// ARGOCD_APP_* and ARGOCD_ENV_CAPSTAN_SECRETS (or the parameter `secrets`):
    /// `decrypt`, `operator` or `omit`. Any failure, an empty result included, exits 2 with
    /// a one-line reason on stderr and nothing on stdout.
    Generate,
}

/// Arguments of `capstan init`.
#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// The repository directory (created if needed).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// An age recipient (`age1…`) for `.sops.yaml`; repeatable, at least one.
    #[arg(long = "recipient", short = 'r', value_name = "RECIPIENT")]
    pub recipients: Vec<String>,
    /// The repository's git URL, written into the ApplicationSet (default: a placeholder to edit).
    #[arg(long, value_name = "URL")]
    pub repo_url: Option<String>,
    /// Say what would be written or removed; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Output format: `text`, a line per file on stderr; `json`, one report on stdout.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

/// `capstan import` sources.
#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// Import a kubeadm control plane (a copy of `/etc/kubernetes` from one control-plane
    /// node) into an age-encrypted Talos secrets bundle (`secrets.age`) and a `cluster.yaml`
    /// stub holding what the files say. Nothing is written unless everything checks out.
    Kubeadm(Box<ImportKubeadmArgs>),
}

/// Arguments of `capstan import kubeadm`.
#[derive(Debug, clap::Args)]
pub struct ImportKubeadmArgs {
    /// The kubeadm PKI directory (`/etc/kubernetes/pki` layout).
    #[arg(long, value_name = "DIR")]
    pub pki: PathBuf,
    /// The kube-apiserver static pod manifest (`/etc/kubernetes/manifests/kube-apiserver.yaml`).
    #[arg(long, value_name = "FILE")]
    pub apiserver_manifest: PathBuf,
    /// The kube-controller-manager static pod manifest (`/etc/kubernetes/manifests/kube-controller-manager.yaml`): the flags Talos can carry are written to `spec.controllerManager.extraArgs`.
    #[arg(long, value_name = "FILE")]
    pub controller_manager_manifest: Option<PathBuf>,
    /// The kube-scheduler static pod manifest (`/etc/kubernetes/manifests/kube-scheduler.yaml`): the flags Talos can carry are written to `spec.scheduler.extraArgs`.
    #[arg(long, value_name = "FILE")]
    pub scheduler_manifest: Option<PathBuf>,
    /// The kubeadm ClusterConfiguration (`kubectl -n kube-system get cm kubeadm-config -o jsonpath='{.data.ClusterConfiguration}'`), v1beta3 or v1beta4.
    #[arg(long, value_name = "FILE")]
    pub kubeadm_config: PathBuf,
    /// The EncryptionConfiguration the apiserver uses (required when the manifest sets `--encryption-provider-config`).
    #[arg(long, value_name = "FILE")]
    pub encryption_config: Option<PathBuf>,
    /// The kubelets' configuration (`kubectl -n kube-system get cm kubelet-config -o yaml`): clusterDNS, maxPods, reserved resources and eviction are recorded in `spec.kubelet`.
    #[arg(long, value_name = "FILE")]
    pub kubelet_config: Option<PathBuf>,
    /// An age recipient (`age1…`) to encrypt to; repeatable.
    #[arg(long = "recipient", short = 'r', value_name = "RECIPIENT")]
    pub recipients: Vec<String>,
    /// A file of age recipients, one per line.
    #[arg(long, short = 'R', value_name = "FILE")]
    pub recipients_file: Vec<PathBuf>,
    /// The kubeadm join token to carry over (`kubeadm token create --ttl 0`); generated when absent.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "CAPSTAN_BOOTSTRAP_TOKEN",
        hide_env_values = true
    )]
    pub bootstrap_token: Option<String>,
    /// The Talos version the nodes will run (`vX.Y.Z`).
    #[arg(long, value_name = "VERSION")]
    pub talos_version: String,
    /// Provider flavour for the stub: `v1beta1` or `v1beta2`.
    #[arg(long, default_value = "v1beta1", value_name = "FLAVOUR")]
    pub flavour: String,
    /// Cluster name (default: the kubeadm `clusterName`).
    #[arg(long)]
    pub name: Option<String>,
    /// Management-cluster namespace (default: the cluster name).
    #[arg(long)]
    pub namespace: Option<String>,
    /// The cluster directory to write `secrets.age` and `cluster.yaml` into.
    #[arg(long, value_name = "CLUSTER_DIR")]
    pub out: PathBuf,
    /// Print the workload cluster's `bootstrap-token-<id>` Secret (plaintext) on stdout.
    #[arg(long, conflicts_with_all = ["dry_run", "format"])]
    pub print_bootstrap_secret: bool,
    /// Fold this import into the existing cluster directory (phase `prepare` only, same PKI,
    /// same recipients): replace `secrets.age` and the sealed Secrets, and set spec.encryption
    /// and spec.provenance in `cluster.yaml`, keeping every other line.
    #[arg(long)]
    pub update: bool,
    /// Read and check everything, say what would be written or removed; write nothing (the
    /// secrets generated are discarded).
    #[arg(long)]
    pub dry_run: bool,
    /// Output format: `text`, a line per file on stderr; `json`, one report on stdout.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

/// `capstan backup` commands.
#[derive(Debug, Subcommand)]
pub enum BackupCommand {
    /// Upload one backup of DIR (`clusterctl move --to-directory DIR`): one age-encrypted
    /// object with a manifest of every file's sha256, then its public index; an upload that
    /// stops on the way is never listed. URL is `s3://BUCKET/PREFIX` (endpoint, region and
    /// credentials from AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, ...) or
    /// `file:///PATH`.
    Push(BackupPushArgs),
    /// Write the directory `clusterctl move --to-directory` would, from live objects, in
    /// every phase (clusterctl refuses while a Cluster's control plane is not ready or a
    /// Machine has no nodeRef: phases `prepare` and `control-plane`). FILE is `kubectl get -n
    /// NAMESPACE <kinds> -o json` (the README names the kinds) per namespace, or `-`; the
    /// objects saved are those `clusterctl move` saves, the Clusters with `spec.paused:
    /// true`, with a record of the Clusters found paused. Then `capstan backup push DIR`.
    Dump(BackupDumpArgs),
    /// List the backups under URL, newest first: time, size, objects per kind, clusters.
    List(BackupListArgs),
    /// Download, verify and decrypt a backup (the newest, or URL/ID) into OUT, exactly as
    /// `clusterctl` wrote it (files mode 0600). OUT must be empty or absent; a backup that
    /// does not verify is refused and nothing is written.
    Pull(BackupPullArgs),
    /// Check the newest backup against the repository: every cluster in git has its
    /// Cluster, TalosControlPlane, Machines (as many as the rendered replicas), their
    /// infrastructure and IP allocations in it. Exit 1 when anything is missing or the
    /// backup is older than --max-age. For a scheduled CI job.
    Check(BackupCheckArgs),
}

/// `capstan restore` commands.
#[derive(Debug, Subcommand)]
pub enum RestoreCommand {
    /// The restore runbook as Markdown: a temporary kind cluster, `clusterctl init` with the
    /// pinned provider releases, the newest backup pulled and restored with the Talos
    /// control-plane provider stopped until every `status.bootstrapped` is back, the check
    /// that every Machine has its node, the move to the permanent cluster and back to Argo
    /// CD; or, with no backup, what can be done instead.
    Plan(RestorePlanArgs),
    /// Compare a pulled backup with what runs: each cluster folder's VMs (`govc vm.info
    /// -json`) against the restored VSphereVMs' BIOS UUIDs, the nodes' InternalIPs (`kubectl
    /// get nodes -o json`) against the restored IPAddresses. Prints each orphan VM, missing
    /// VM and unclaimed address with the commands to run. Exit 1 while any remains, 0 when
    /// clean, 2 on error.
    Check(RestoreCheckArgs),
}

/// Arguments of `capstan restore check`.
#[derive(Debug, clap::Args)]
pub struct RestoreCheckArgs {
    /// The directory `capstan backup pull` wrote.
    pub dir: PathBuf,
    /// `govc vm.info -json '<folder>/*'` output of a cluster's folder; repeatable, at least one.
    #[arg(long, value_name = "FILE", required = true)]
    pub vsphere_inventory: Vec<PathBuf>,
    /// `kubectl get nodes -o json` output of a workload cluster; repeatable.
    #[arg(long, value_name = "FILE")]
    pub nodes: Vec<PathBuf>,
    /// `text` or `json`.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

/// Arguments of `capstan restore plan`.
#[derive(Debug, clap::Args)]
pub struct RestorePlanArgs {
    /// The repository (or cluster directory) whose clusters to restore.
    pub repo: PathBuf,
    /// Where backups live: `s3://BUCKET/PREFIX` or `file:///PATH` (only the indexes are
    /// read: no identity needed).
    #[arg(long, value_name = "URL")]
    pub backup: String,
    /// A pulled backup directory to compare with --vsphere-inventory and --nodes (the
    /// findings of `restore check` go into the runbook).
    #[arg(long, value_name = "DIR", requires = "vsphere_inventory")]
    pub pulled: Option<PathBuf>,
    /// `govc vm.info -json` output of a cluster's folder; repeatable (with --pulled).
    #[arg(long, value_name = "FILE", requires = "pulled")]
    pub vsphere_inventory: Vec<PathBuf>,
    /// `kubectl get nodes -o json` output of a workload cluster; repeatable (with --pulled).
    #[arg(long, value_name = "FILE", requires = "pulled")]
    pub nodes: Vec<PathBuf>,
    /// Output format: `text`, the Markdown runbook; `json`, the store, the newest backup and
    /// the runbook's sections (title, numbered steps, other paragraphs).
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

/// Arguments of `capstan backup check`.
#[derive(Debug, clap::Args)]
pub struct BackupCheckArgs {
    /// The repository (or cluster directory) to check against.
    pub repo: PathBuf,
    /// Where backups live: `s3://BUCKET/PREFIX` or `file:///PATH`.
    pub url: String,
    /// age identity file (default: $CAPSTAN_AGE_KEY_FILE, $SOPS_AGE_KEY_FILE, then $SOPS_AGE_KEY).
    #[arg(long, short = 'i', value_name = "FILE")]
    pub identity: Option<PathBuf>,
    /// The oldest a backup may be: `90m`, `24h`, `7d`.
    #[arg(long, default_value = "24h", value_name = "DURATION")]
    pub max_age: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
    /// The same as `--format json` (kept for scripts written before `--format`).
    #[arg(long, hide = true, conflicts_with = "format")]
    pub json: bool,
    /// Template overrides directory (default: `templates/` at the repository root).
    #[arg(long, value_name = "DIR")]
    pub templates: Option<PathBuf>,
}

/// Arguments of `capstan backup push`.
#[derive(Debug, clap::Args)]
pub struct BackupPushArgs {
    /// The directory `clusterctl move --to-directory` wrote.
    pub dir: PathBuf,
    /// Where backups live: `s3://BUCKET/PREFIX` or `file:///PATH`.
    pub url: String,
    /// An age recipient (`age1…`) to encrypt to (operators and the DR identity); repeatable.
    #[arg(long = "recipient", short = 'r', value_name = "RECIPIENT")]
    pub recipients: Vec<String>,
    /// A file of age recipients, one per line.
    #[arg(long, short = 'R', value_name = "FILE")]
    pub recipients_file: Vec<PathBuf>,
    /// Read, check and encrypt DIR, then say what would be uploaded; upload nothing (the
    /// store is not contacted).
    #[arg(long)]
    pub dry_run: bool,
}

/// Arguments of `capstan backup dump`.
#[derive(Debug, clap::Args)]
pub struct BackupDumpArgs {
    /// `kubectl get -n NAMESPACE <kinds> -o json` output, `-` for stdin; each may hold the
    /// Lists of several namespaces one after the other.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The directory to write (empty or absent): one file per object, mode 0600.
    #[arg(long, value_name = "DIR")]
    pub to: PathBuf,
    /// Read and select the objects, then say what would be written; write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Arguments of `capstan backup list`.
#[derive(Debug, clap::Args)]
pub struct BackupListArgs {
    /// Where backups live: `s3://BUCKET/PREFIX` or `file:///PATH`.
    pub url: String,
    /// Output format (`json`: the indexes).
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
    /// The same as `--format json` (kept for scripts written before `--format`).
    #[arg(long, hide = true, conflicts_with = "format")]
    pub json: bool,
}

/// Arguments of `capstan backup pull`.
#[derive(Debug, clap::Args)]
pub struct BackupPullArgs {
    /// Where backups live, optionally with a backup id at the end (`…/20261205T083000Z-1a2b3c4d`).
    pub url: String,
    /// The directory to write (empty or absent).
    pub out: PathBuf,
    /// age identity file (default: $CAPSTAN_AGE_KEY_FILE, $SOPS_AGE_KEY_FILE, then $SOPS_AGE_KEY).
    #[arg(long, short = 'i', value_name = "FILE")]
    pub identity: Option<PathBuf>,
    /// Download, verify and decrypt the backup, then say what would be written; write
    /// nothing (a check that the backup opens with the identity).
    #[arg(long)]
    pub dry_run: bool,
}

/// `capstan secrets` commands.
#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// Decrypt an age file (such as `secrets.age`) or a SOPS file and print the plaintext on
    /// stdout (the SOPS MAC is verified).
    Decrypt(DecryptArgs),
    /// Seal the Secrets the providers read from `secrets.age` into `CLUSTER_DIR/secrets/` as
    /// SOPS files encrypted to `spec.recipients`; unchanged plaintext keeps its ciphertext.
    Seal(ClusterSecretsArgs),
    /// Re-wrap `secrets.age` and the data key of every sealed file for the current
    /// `spec.recipients`, without re-encrypting the sealed values.
    Rekey(ClusterSecretsArgs),
    /// Write `CLUSTER_DIR/secrets/operator/`: each sealed Secret as a SopsSecret
    /// (isindir/sops-secrets-operator, `isindir.github.com/v1alpha3`) encrypted to
    /// `spec.recipients`, for `argocd generate` in secrets mode `operator`; unchanged
    /// plaintext keeps its ciphertext.
    SealOperator(ClusterSecretsArgs),
    /// Seal the vSphere credentials CAPV uses as the Secret `spec.vsphere.identityRef` names
    /// (kind `Secret`; keys `username`, `password`) into `CLUSTER_DIR/secrets/<name>.yaml`,
    /// encrypted to `spec.recipients`. The password is read from stdin (one line), never
    /// from an argument.
    VsphereIdentity(VsphereIdentityArgs),
}

/// Arguments of `capstan secrets vsphere-identity`.
#[derive(Debug, clap::Args)]
pub struct VsphereIdentityArgs {
    /// The cluster directory (holding `cluster.yaml`).
    #[arg(value_name = "CLUSTER_DIR")]
    pub dir: PathBuf,
    /// The vCenter user CAPV logs in as, e.g. `capv@vsphere.local`.
    #[arg(long, value_name = "USER")]
    pub username: String,
    /// Say what would be written or removed; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Output format: `text`, a line per file on stderr; `json`, one report on stdout.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

/// Arguments of `capstan secrets seal` and `rekey`.
#[derive(Debug, clap::Args)]
pub struct ClusterSecretsArgs {
    /// age identity file (default: $CAPSTAN_AGE_KEY_FILE, $SOPS_AGE_KEY_FILE, then $SOPS_AGE_KEY).
    #[arg(long, short = 'i', value_name = "FILE")]
    pub identity: Option<PathBuf>,
    /// The cluster directory (holding `cluster.yaml` and `secrets.age`).
    #[arg(value_name = "CLUSTER_DIR")]
    pub dir: PathBuf,
    /// Say what would be written or removed; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Output format: `text`, a line per file on stderr; `json`, one report on stdout.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

/// Arguments of `capstan secrets decrypt`.
#[derive(Debug, clap::Args)]
pub struct DecryptArgs {
    /// age identity file (default: $CAPSTAN_AGE_KEY_FILE, $SOPS_AGE_KEY_FILE, then $SOPS_AGE_KEY).
    #[arg(long, short = 'i', value_name = "FILE")]
    pub identity: Option<PathBuf>,
    /// The file to decrypt.
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
}

/// Arguments of `capstan render`.
#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    /// Cluster directories (holding `cluster.yaml`), or repositories whose `clusters/*/`
    /// hold them. Defaults to the current directory.
    #[arg(value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Write one directory per cluster under OUT (objects, kustomization.yaml, capstan.lock)
    /// instead of printing a YAML stream.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Template overrides directory (default: `templates/` at each repository root).
    #[arg(long, value_name = "DIR")]
    pub templates: Option<PathBuf>,
    /// Emit the sealed Secrets decrypted (plaintext, stdout only; needs an identity), for
    /// pipelines that decrypt at apply time. Refused with `-o`.
    #[arg(long, conflicts_with = "output")]
    pub decrypt: bool,
    /// age identity file for `--decrypt` (default: $CAPSTAN_AGE_KEY_FILE, $SOPS_AGE_KEY_FILE, then $SOPS_AGE_KEY).
    #[arg(long, short = 'i', value_name = "FILE", requires = "decrypt")]
    pub identity: Option<PathBuf>,
    /// With `-o`: print neither the per-cluster lines nor the summary (errors and warnings
    /// are still printed).
    #[arg(long, short = 'q', requires = "output")]
    pub quiet: bool,
    /// With `-o`: render, print what would be written under OUT (per cluster: files and
    /// bytes) and write nothing (no lock, no staging directory).
    #[arg(long, requires = "output")]
    pub dry_run: bool,
    /// With `-o`: the report as `text` (a line per cluster and a summary on stderr) or as
    /// one `json` document on stdout (`dryRun`, `output`, per cluster its path and outcome
    /// or files and bytes, `objects`, `bytes`, `warnings`).
    #[arg(long, value_enum, default_value_t = ReportFormat::Text, requires = "output", conflicts_with = "quiet")]
    pub format: ReportFormat,
}

/// Arguments of `capstan plan`.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The cluster directory (holding `cluster.yaml`).
    #[arg(value_name = "CLUSTER_DIR")]
    pub dir: PathBuf,
    /// Output format: `text`, the Markdown runbook; `json`, the same runbook as the cluster,
    /// its phase and the next, and its sections (title, numbered steps, other paragraphs).
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

/// Arguments of `capstan rehearse`.
#[derive(Debug, clap::Args)]
pub struct RehearseArgs {
    /// The cluster directory (holding `cluster.yaml`).
    #[arg(value_name = "CLUSTER_DIR")]
    pub dir: PathBuf,
    /// The Day-2 operation to rehearse after the phases.
    #[arg(long, value_enum)]
    pub then: Option<RehearseOperation>,
    /// The phase the operation runs in: `complete` (the default) or `workers` (before the
    /// migration completes). A cluster in phase `complete` runs it there.
    #[arg(long, value_enum, default_value_t = RehearsePhase::Complete)]
    pub until: RehearsePhase,
    /// How git reaches the management cluster: Argo CD with automated prune (capstan's
    /// ApplicationSet), Argo CD without prune, or `kubectl apply`.
    #[arg(long, value_enum, default_value_t = RehearseSync::Argocd)]
    pub sync: RehearseSync,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

/// The Day-2 operations `capstan rehearse --then` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RehearseOperation {
    /// The next Talos minor (the VM template follows).
    TalosUpgrade,
    /// The next Kubernetes patch release.
    KubernetesPatch,
    /// The next Kubernetes minor.
    KubernetesMinor,
    /// A content-hash change of the control plane (a rolling replacement).
    Rollout,
    /// The endpoint handed to the VIP, then a control-plane rollout behind it.
    VipHandover,
    /// A failed control-plane machine replaced.
    ReplaceControlPlane,
    /// A rolling replacement of the first worker pool.
    WorkerRollout,
    /// A failed worker remediated by its MachineHealthCheck.
    MhcRemediation,
    /// The autoscaler grows an autoscaled pool.
    AutoscalerScaleUp,
    /// The last phase commit reverted.
    PhaseRevert,
}

/// The phases `--until` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RehearsePhase {
    /// Phase `workers`.
    Workers,
    /// Phase `complete`.
    Complete,
}

/// How `capstan rehearse` applies git.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RehearseSync {
    /// Argo CD, automated sync with prune.
    Argocd,
    /// Argo CD without prune.
    ArgocdNoPrune,
    /// `kubectl apply` (client-side).
    Kubectl,
}

/// Arguments of `capstan explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
    /// The message (the words are joined with spaces); `-` reads stdin, e.g. a whole log.
    #[arg(value_name = "TEXT", required = true)]
    pub text: Vec<String>,
}

/// Arguments of `capstan validate`.
#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// Directory of CRD YAML files, instead of the CRDs embedded for the provider releases
    /// capstan pins; later directories replace earlier CRDs of the same kind.
    #[arg(long, value_name = "DIR")]
    pub crds: Vec<PathBuf>,
    /// YAML files or rendered bundle directories to validate; `-` or nothing reads stdin.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The Kubernetes version whose OpenAPI schemas the built-in kinds (Job, RBAC,
    /// ValidatingAdmissionPolicy, Secret, …) are validated against (v1.26 to v1.37), e.g. the
    /// management cluster's; default: the rendered clusters' version (the lowest), else v1.37.
    #[arg(long, value_name = "VERSION")]
    pub kubernetes_version: Option<String>,
    /// Also fail on kinds with no schema at all (neither a CRD nor an embedded built-in kind).
    #[arg(long)]
    pub strict_kinds: bool,
    /// Output format: `text`, the violations and a summary on stderr; `json`, one report
    /// on stdout.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

/// Arguments of `capstan check`. Every input but the cluster directory is optional; each
/// one given enables more comparisons (those not made are listed as not checked).
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The cluster directory (holding `cluster.yaml`, and `secrets.age` for --identity).
    #[arg(value_name = "CLUSTER_DIR")]
    pub dir: PathBuf,
    /// The kubeadm kube-apiserver static pod manifest: issuers, audiences, encryption, service CIDR, version.
    #[arg(long, value_name = "FILE")]
    pub apiserver_manifest: Option<PathBuf>,
    /// The kubeadm kube-controller-manager static pod manifest (`/etc/kubernetes/manifests/kube-controller-manager.yaml`): node CIDR mask, node grace period, controllers, pod GC.
    #[arg(long, value_name = "FILE")]
    pub controller_manager_manifest: Option<PathBuf>,
    /// The kubeadm kube-scheduler static pod manifest (`/etc/kubernetes/manifests/kube-scheduler.yaml`): its flags and `--config`.
    #[arg(long, value_name = "FILE")]
    pub scheduler_manifest: Option<PathBuf>,
    /// The kubeadm ClusterConfiguration (or the kubeadm-config ConfigMap): CIDRs, DNS domain, endpoint, versions.
    #[arg(long, value_name = "FILE")]
    pub kubeadm_config: Option<PathBuf>,
    /// The kubeadm EncryptionConfiguration: provider order and key names (and the key, with --identity).
    #[arg(long, value_name = "FILE")]
    pub encryption_config: Option<PathBuf>,
    /// The kubeadm apiservers' AuthorizationConfiguration (the file their `--authorization-config` names): compared with spec.apiServer.authorizationConfig.
    #[arg(long, value_name = "FILE")]
    pub authorization_config: Option<PathBuf>,
    /// The kubeadm PKI directory (`/etc/kubernetes/pki` layout): CA shape and expiry.
    #[arg(long, value_name = "DIR")]
    pub pki: Option<PathBuf>,
    /// The kubeadm apiserver serving certificate (`pki/apiserver.crt`): does it cover the endpoint?
    #[arg(long, value_name = "FILE")]
    pub apiserver_cert: Option<PathBuf>,
    /// The kube-proxy DaemonSet (`kubectl -n kube-system get ds kube-proxy -o yaml`): its labels.
    #[arg(long, value_name = "FILE")]
    pub kube_proxy: Option<PathBuf>,
    /// The management cluster's providers: `kubectl get providers.clusterctl.cluster.x-k8s.io -A -o yaml`, or `kubectl get deployments -A -o yaml` (their images' tags).
    #[arg(long, value_name = "FILE")]
    pub providers: Option<PathBuf>,
    /// The cluster's Nodes (`kubectl get nodes -o yaml`), optionally with the vSphere CPI DaemonSet in the same file: do nodes get `vsphere://` providerIDs?
    #[arg(long, value_name = "FILE")]
    pub nodes: Option<PathBuf>,
    /// The management cluster's admission policies, control planes and Jobs (`kubectl get validatingadmissionpolicies,validatingadmissionpolicybindings,taloscontrolplanes,jobs -A -o yaml`): what an earlier phase left (phase control-plane's nodeRef policy, the pause, migration Jobs).
    #[arg(long, value_name = "FILE")]
    pub management_objects: Option<PathBuf>,
    /// The live PersistentVolumes, PodDisruptionBudgets and Pods (`kubectl get pv,pdb,pods -A -o json`), before the worker phase: volumes pinned to the kubeadm workers, Pods without a controller on them, budgets that allow no eviction, and whether the Talos pools hold what they run.
    #[arg(long, value_name = "FILE")]
    pub workloads: Option<PathBuf>,
    /// The CNI DaemonSet, with its ConfigMap (`kubectl -n kube-system get ds/cilium cm/cilium-config -o yaml`): capabilities, cgroup and host mounts, apiserver address against what Talos allows.
    #[arg(long, value_name = "FILE")]
    pub cni_daemonset: Option<PathBuf>,
    /// The kubeadm kubelets' configuration (`kubectl -n kube-system get cm kubelet-config -o yaml`): clusterDNS, maxPods, reserved resources, eviction.
    #[arg(long, value_name = "FILE")]
    pub kubelet_config: Option<PathBuf>,
    /// The kubeadm etcd members' status (`etcdctl endpoint status --cluster -w json`): database size against the quota Talos members run with.
    #[arg(long, value_name = "FILE")]
    pub etcd_status: Option<PathBuf>,
    /// The etcd snapshot taken before phase control-plane (`etcdctl snapshot save`): a whole bbolt database with etcd's SHA-256 after it (required in phase control-plane).
    #[arg(long, value_name = "FILE")]
    pub etcd_snapshot: Option<PathBuf>,
    /// The cluster's VMs (`govc vm.info -json '<folder>/*' <kubeadm control-plane VMs>`): does one ESXi host run more etcd voters than etcd can lose?
    #[arg(long, value_name = "FILE")]
    pub vsphere_inventory: Option<PathBuf>,
    /// The etcd version the kubeadm cluster runs (`etcdctl version`), e.g. `3.5.15`.
    #[arg(long, value_name = "VERSION")]
    pub etcd_version: Option<String>,
    /// age identity file: opens `secrets.age` to compare the encryption key and bootstrap token (values are never shown).
    #[arg(long, short = 'i', value_name = "FILE")]
    pub identity: Option<PathBuf>,
    /// Report format.
    #[arg(long, value_enum, default_value = "text", value_name = "FORMAT")]
    pub format: ReportFormat,
}

impl BackupCheckArgs {
    /// Whether the report is JSON (`--format json` or the older `--json`).
    #[cfg(any(feature = "backup", test, feature = "testkit"))]
    pub fn json(&self) -> bool {
        self.json || self.format == ReportFormat::Json
    }
}

impl BackupListArgs {
    /// Whether the listing is JSON (`--format json` or the older `--json`).
    #[cfg(any(feature = "backup", test, feature = "testkit"))]
    pub fn json(&self) -> bool {
        self.json || self.format == ReportFormat::Json
    }
}
