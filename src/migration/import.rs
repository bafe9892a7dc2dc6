//! `import kubeadm` as a pure function: kubeadm file contents in; the age-encrypted Talos
//! secrets bundle, the `cluster.yaml` stub and the workload cluster's bootstrap-token
//! Secret out. Reads and writes nothing itself (the caller does, at the edge), so the
//! plaintext bundle only ever exists in memory.
//!
//! What `talosctl gen secrets --from-kubernetes-pki` gets wrong for a migration is done
//! right here: the etcd encryption secret is the kubeadm one (never a fresh key), CAs are
//! checked (key matches, CA flag, self-signed root, expiry), and the facts the Talos side
//! must match (issuers, audiences, CIDRs, DNS domain, key name) are recorded in
//! `cluster.yaml` so that `check` and `render` can hold the line.

use crate::inputs::kubeadm::{self, ApiServerFacts, ClusterConfigFacts, KeyedProvider};
use crate::inputs::{InputFile, KubeadmFiles, SECRETS_FILE};
use crate::model::{
    self, ClusterConfig, ClusterSpec, Encryption, EncryptionProvider, Endpoint, Fingerprints,
    Flavour, Metadata, Network, Provenance, Purpose, SemVer, ServiceAccount, Versions,
};
use crate::secrets;
use crate::secrets::pki::{self, PkiWarning};
use crate::secrets::talos::{EncryptionSecret, KubernetesPki, SecretsBundle};
use crate::yaml;
use std::time::SystemTime;
use zeroize::Zeroizing;

/// Choices the files cannot make.
pub struct ImportOptions {
    /// Talos version the nodes will run.
    pub talos_version: String,
    /// Provider flavour for the stub (`v1beta1`/`v1beta2`).
    pub flavour: String,
    /// Cluster name override.
    pub name: Option<String>,
    /// Namespace override.
    pub namespace: Option<String>,
    /// age recipients (`age1…`), each with where it came from.
    pub recipients: Vec<(String, String)>,
    /// The kubeadm join token to carry over.
    pub bootstrap_token: Option<Zeroizing<String>>,
    /// The time used for expiry checks and the generated OS CA.
    pub now: SystemTime,
}

/// Why an import failed. Nothing is written when it does.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A certificate or key problem.
    #[error(transparent)]
    Pki(#[from] pki::PkiError),
    /// A kubeadm file problem.
    #[error(transparent)]
    Kubeadm(#[from] kubeadm::KubeadmError),
    /// A bundle problem.
    #[error(transparent)]
    Bundle(#[from] crate::secrets::talos::SecretsBundleError),
    /// A recipient or encryption problem.
    #[error(transparent)]
    Secrets(#[from] secrets::SecretsError),
    /// A fact the stub needs is missing or contradictory.
    #[error("{file}: {field}: {message}")]
    Fact {
        /// The file the fact should come from.
        file: String,
        /// Its field.
        field: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// An option is invalid.
    #[error("{option}: {message}")]
    Option {
        /// The flag.
        option: String,
        /// What was expected.
        message: String,
    },
}

/// What an import produces.
pub struct Imported {
    /// `secrets.age`: the Talos secrets bundle, ASCII-armored age.
    pub secrets_age: String,
    /// `cluster.yaml`: the stub (public facts only).
    pub cluster_yaml: String,
    /// The workload cluster's `bootstrap-token-<id>` Secret (plaintext; print only on request).
    pub bootstrap_secret: Zeroizing<String>,
    /// The bootstrap token id (public).
    pub token_id: String,
    /// The stub as parsed values.
    pub config: ClusterConfig,
    /// The sealed Secrets (relative path, SOPS text), written with `secrets.age`.
    pub sealed: Vec<(String, String)>,
    /// Things the user must know (expiring CAs, key names Talos will not read, …).
    pub warnings: Vec<String>,
}

/// What `import kubeadm --update` changes in an existing cluster directory.
#[derive(Debug)]
pub struct Update {
    /// The existing `cluster.yaml` with `spec.encryption` and `spec.provenance` replaced by
    /// the new import's, every other line kept.
    pub cluster_yaml: String,
    /// Sealed files of the old import the new one does not write (a join token of another
    /// id), relative to the cluster directory.
    pub stale: Vec<String>,
    /// What changed, one line each, for the operator.
    pub changes: Vec<String>,
}

/// Fold a new import into an existing cluster directory (after a rotation on the kubeadm
/// side, e.g. the encryption key moved to `key2`): the new bundle and sealed Secrets replace
/// the old ones, and `cluster.yaml` keeps everything but `spec.encryption`,
/// `spec.provenance` (and `spec.kubelet`, when the import read a kubelet configuration). Only before any Talos machine exists (phase `prepare`, or a first
/// import into a hand-written `cluster.yaml`), only from the same PKI (the recorded CA and
/// service-account fingerprints), and only for the cluster's own recipients.
pub fn update(
    file: &str,
    existing_text: &str,
    existing: &ClusterConfig,
    had_bundle: bool,
    imported: &Imported,
    existing_sealed: &[String],
) -> Result<Update, ImportError> {
    let refuse = |field: &str, message: String| ImportError::Fact {
        file: file.to_string(),
        field: field.to_string(),
        message,
    };
    let phase = existing.spec.migration.as_ref().map(|m| m.phase);
    let old_fps = existing
        .spec
        .provenance
        .as_ref()
        .and_then(|p| p.fingerprints.as_ref());
    let first_import = !had_bundle && old_fps.is_none();
    if phase != Some(model::Phase::Prepare) && !first_import {
        return Err(refuse(
            "spec.migration.phase",
            format!(
                "{}: Talos machines may already hold this bundle's secrets (its OS CA, cluster secret and join token), \
                 and a new bundle would lock them out; --update works only in phase `prepare`, before any Talos machine exists",
                phase.map_or("no phase".to_string(), |p| format!("phase `{}`", p.as_str()))
            ),
        ));
    }
    let new_prov = imported.config.spec.provenance.clone();
    if let (Some(old), Some(new)) = (
        old_fps,
        new_prov.as_ref().and_then(|p| p.fingerprints.as_ref()),
    ) {
        if old != new {
            return Err(refuse(
                "spec.provenance.fingerprints",
                "the kubeadm files hold another PKI than the one this cluster was imported from (its CA or \
                 service-account key fingerprints differ): that is another cluster, or a PKI rotation Talos \
                 cannot follow; nothing was written"
                    .into(),
            ));
        }
    }
    let (m, n) = (&existing.metadata, &imported.config.metadata);
    if m != n {
        return Err(refuse(
            "metadata",
            format!(
                "cluster.yaml names the cluster `{}` in namespace `{}`, the import `{}` in `{}` (kubeadm's clusterName, \
                 or --name/--namespace): the sealed Secrets are named after it; pass --name {} --namespace {}",
                m.name, m.namespace, n.name, n.namespace, m.name, m.namespace
            ),
        ));
    }
    let mut old_r = existing.spec.recipients.clone();
    let mut new_r = imported.config.spec.recipients.clone();
    old_r.sort();
    new_r.sort();
    if !old_r.is_empty() && old_r != new_r {
        return Err(refuse(
            "spec.recipients",
            "the new bundle must be encrypted to the cluster's recipients: pass each of spec.recipients with -r \
             (or -R FILE), and change recipients afterwards with `capstan secrets rekey`"
                .into(),
        ));
    }
    let mut text = existing_text.to_string();
    let mut changes = Vec::new();
    let enc_value = serde_json::to_value(&imported.config.spec.encryption)
        .map_err(|e| refuse("spec.encryption", e.to_string()))?;
    if existing.spec.encryption != imported.config.spec.encryption {
        changes.push(format!(
            "spec.encryption: {} → {}",
            serde_json::to_string(&existing.spec.encryption).unwrap_or_default(),
            enc_value
        ));
    }
    let block_error = || {
        refuse(
            "spec",
            "cluster.yaml is not a block mapping with two-space keys under `spec:`, so it cannot be edited in place; \
             set spec.encryption and spec.provenance from `capstan import kubeadm` into a new directory by hand"
                .into(),
        )
    };
    text = crate::yaml::replace_block(&text, "spec", "encryption", &enc_value)
        .ok_or_else(block_error)?;
    if let Some(p) = &new_prov {
        let v = serde_json::to_value(p).map_err(|e| refuse("spec.provenance", e.to_string()))?;
        if existing.spec.provenance.as_ref() != Some(p) {
            changes.push(
                "spec.provenance: the new bundle's bootstrap token id and etcd version".into(),
            );
        }
        text =
            crate::yaml::replace_block(&text, "spec", "provenance", &v).ok_or_else(block_error)?;
    }
    // The kubelet settings, when the import read them (`--kubelet-config`).
    let kubelet = &imported.config.spec.kubelet;
    if !kubelet.is_empty() {
        let v = serde_json::to_value(kubelet).map_err(|e| refuse("spec.kubelet", e.to_string()))?;
        if &existing.spec.kubelet != kubelet {
            changes.push("spec.kubelet: from the kubelet configuration given".into());
        }
        text = crate::yaml::replace_block(&text, "spec", "kubelet", &v).ok_or_else(block_error)?;
    }
    // The edit changed those fields and nothing else.
    let parsed = crate::yaml::parse_one(&text)
        .map_err(|e| refuse("spec", format!("the edited file does not parse: {e}")))?;
    let mut edited =
        ClusterConfig::from_value(file, parsed).map_err(|e| refuse("spec", e.to_string()))?;
    if edited.spec.encryption != imported.config.spec.encryption
        || edited.spec.provenance != new_prov
    {
        return Err(block_error());
    }
    if !kubelet.is_empty() {
        if &edited.spec.kubelet != kubelet {
            return Err(block_error());
        }
        edited.spec.kubelet = existing.spec.kubelet.clone();
    }
    edited.spec.encryption = existing.spec.encryption.clone();
    edited.spec.provenance = existing.spec.provenance.clone();
    if &edited != existing {
        return Err(block_error());
    }
    let new_rels: Vec<&str> = imported.sealed.iter().map(|(r, _)| r.as_str()).collect();
    let stale: Vec<String> = existing_sealed
        .iter()
        .filter(|r| {
            r.starts_with("secrets/workload/bootstrap-token-") && !new_rels.contains(&r.as_str())
        })
        .cloned()
        .collect();
    for r in &stale {
        changes.push(format!(
            "{r}: removed (the new bundle's join token has another id)"
        ));
    }
    Ok(Update {
        cluster_yaml: text,
        stale,
        changes,
    })
}

/// Import a kubeadm control plane.
pub fn import_kubeadm(files: KubeadmFiles, opts: ImportOptions) -> Result<Imported, ImportError> {
    let mut warnings = Vec::new();
    let opt = |option: &str, message: String| ImportError::Option {
        option: option.into(),
        message,
    };

    SemVer::parse(&opts.talos_version).ok_or_else(|| {
        opt(
            "--talos-version",
            format!("expected `vX.Y.Z`, found `{}`", opts.talos_version),
        )
    })?;
    let flavour = match opts.flavour.as_str() {
        "v1beta1" => Flavour::V1beta1,
        "v1beta2" => Flavour::V1beta2,
        other => {
            return Err(opt(
                "--flavour",
                format!("expected `v1beta1` or `v1beta2`, found `{other}`"),
            ))
        }
    };
    if opts.recipients.is_empty() {
        return Err(opt(
            "--recipient",
            "at least one age recipient is required (`--recipient age1…` or `--recipients-file`)"
                .into(),
        ));
    }
    let recipients = opts
        .recipients
        .iter()
        .map(|(label, r)| secrets::parse_recipient(label, r))
        .collect::<Result<Vec<_>, _>>()?;

    // Certificates and keys: checked, kept byte-for-byte.
    let mut ca = |crt: &InputFile, key: &InputFile| -> Result<pki::CertAndKey, ImportError> {
        let (c, w) = pki::load_ca(&crt.label, &crt.bytes, &key.label, &key.bytes, opts.now)?;
        warnings.extend(w.iter().map(PkiWarning::to_string));
        Ok(c)
    };
    let k8s = ca(&files.ca_crt, &files.ca_key)?;
    let etcd = ca(&files.etcd_ca_crt, &files.etcd_ca_key)?;
    let aggregator = ca(&files.front_proxy_ca_crt, &files.front_proxy_ca_key)?;
    let sa = pki::load_service_account_key(&files.sa_key.label, &files.sa_key.bytes)?;

    let apiserver = kubeadm::parse_apiserver_manifest(
        &files.apiserver_manifest.label,
        &files.apiserver_manifest.bytes,
    )?;
    let cluster = kubeadm::parse_cluster_configuration(
        &files.kubeadm_config.label,
        &files.kubeadm_config.bytes,
    )?;

    // Encryption at rest: carry the kubeadm key, never a fresh one.
    let (encryption, enc_secret) = encryption(&files, &apiserver, &mut warnings)?;

    let token = match &opts.bootstrap_token {
        Some(t) => kubeadm::parse_bootstrap_token("--bootstrap-token", t)?,
        None => kubeadm::parse_bootstrap_token("generated token", &pki::generate_token()?)?,
    };
    let token_id = token.id().to_string();

    let mut bundle = SecretsBundle::from_kubernetes_pki(
        SECRETS_FILE,
        KubernetesPki {
            k8s,
            etcd,
            k8saggregator: aggregator,
            k8sserviceaccount: sa,
        },
        Some(token.token()),
        enc_secret,
        opts.now,
    )?;
    if encryption.provider == EncryptionProvider::None {
        // from_kubernetes_pki invents a secretbox key when given none, as talosctl does: Talos
        // would then encrypt Secrets the kubeadm apiservers cannot read
        // (`identity transformer tried to read encrypted data`). Carry none.
        if let Some(s) = bundle.secrets.as_mut() {
            s.secretboxencryptionsecret = None;
            s.aescbcencryptionsecret = None;
        }
    }
    if let Err(problems) = bundle.validate() {
        // A kubeadm cluster without encryption at rest legitimately has no encryption secret.
        let real: Vec<String> = problems
            .iter()
            .map(ToString::to_string)
            .filter(|p| {
                !(encryption.provider == EncryptionProvider::None && p.contains("encryptionsecret"))
            })
            .collect();
        if !real.is_empty() {
            return Err(ImportError::Fact {
                file: SECRETS_FILE.into(),
                field: "bundle".into(),
                message: format!("the assembled bundle is invalid: {}", real.join("; ")),
            });
        }
    }
    let fps = bundle.fingerprints()?;
    let plaintext = bundle.to_yaml();
    let secrets_age = secrets::encrypt_armored(plaintext.as_bytes(), &recipients)?;

    let config = stub(
        &files,
        &apiserver,
        &cluster,
        &opts,
        flavour,
        encryption,
        &fps,
        &token_id,
        &mut warnings,
    )?;
    for p in config.validate(Purpose::Check) {
        warnings.push(format!("cluster.yaml: {p}"));
    }
    let mut cluster_yaml = String::from(STUB_HEADER);
    let value = serde_json::to_value(&config).map_err(|e| ImportError::Fact {
        file: "cluster.yaml".into(),
        field: "(document)".into(),
        message: e.to_string(),
    })?;
    cluster_yaml.push_str(&yaml::to_string(&value));
    cluster_yaml.push_str(&stub_placeholders(
        &config.metadata.name,
        &opts.talos_version,
    ));
    // Seal right away: the plaintext is in memory now and never needs to be again.
    let sealed = crate::secrets::seal::seal(crate::secrets::seal::SealRequest {
        config: &config,
        cluster_file: "cluster.yaml",
        secrets_age_sha256: &crate::digest::sha256_hex(secrets_age.as_bytes()),
        bundle: &bundle,
        previous: Vec::new(),
        lastmodified: &crate::secrets::sops::rfc3339_utc(
            crate::secrets::pki::unix_seconds(opts.now)
                .max(0)
                .unsigned_abs(),
        ),
    })
    .map_err(|e| ImportError::Fact {
        file: "secrets/".into(),
        field: "seal".into(),
        message: e.to_string(),
    })?;

    Ok(Imported {
        sealed,
        secrets_age,
        cluster_yaml,
        bootstrap_secret: bootstrap_secret(&token),
        token_id,
        config,
        warnings,
    })
}

const STUB_HEADER: &str = "\
# Written by `capstan import kubeadm` from the kubeadm files: the identity fields below
# (endpoint, network, serviceAccount, encryption, provenance) are what the running cluster
# uses and must not be changed by hand. Before rendering, add `spec.vsphere` (placement)
# and `spec.controlPlane` (replicas, machine size), and worker pools under `spec.workers`.
# `capstan check` reports what still differs between kubeadm and Talos.
# Before phase `complete`, add to `spec.endpoint` how it follows the control-plane machines
# every rollout replaces (`capstan plan` has the hand-over): Talos's shared IP,
#   strategy: vip
#   vip: {address: <a free address on their segment>, link: <their interface>}
# or the load balancer, whose backends are exactly controlPlane.replicas + 1 addresses:
#   strategy: external
#   controlPlanePool: {addresses: [<a-b>], prefix: <N>, gateway: <address>}
";

/// The sections `render` needs and the kubeadm files cannot tell, as comments under
/// `spec:` with what each field means: uncomment and fill them in. (Every missing field is
/// reported in one run if some are left out.)
fn stub_placeholders(name: &str, talos_version: &str) -> String {
    format!(
        "  # To fill in before rendering (uncomment; every field of vsphere and controlPlane is read):
  # vsphere:
  #   server: vcenter.example.internal        # the vCenter that creates the machines
  #   thumbprint: \"AA:BB:...\"                 # its TLS certificate's SHA-1 (govc about.cert -thumbprint)
  #   datacenter: dc1                         # the datacenter
  #   datastore: datastore1                   # where the machines' disks go
  #   folder: /dc1/vm/{name}                  # the VM folder
  #   resourcePool: /dc1/host/cluster1/Resources/{name}
  #   network: vm-network                     # the port group of the nodes
  #   template: talos-{talos_version}-vmware          # the Talos VM template, named for its release
  #   cloneMode: linkedClone                  # or fullClone
  #   identityRef: {{kind: Secret, name: {name}-vsphere}}   # capstan secrets vsphere-identity seals it
  # controlPlane:
  #   replicas: 3                             # Talos control-plane machines (odd)
  #   machine: {{numCPUs: 4, memoryMiB: 8192, diskGiB: 40}}
  # workers:                                  # one entry per pool
  # - name: general
  #   replicas: 3
  #   machine: {{numCPUs: 8, memoryMiB: 32768, diskGiB: 120}}
"
    )
}

fn encryption(
    files: &KubeadmFiles,
    apiserver: &ApiServerFacts,
    warnings: &mut Vec<String>,
) -> Result<(Encryption, Option<EncryptionSecret>), ImportError> {
    let configured = apiserver.encryption_provider_config();
    let Some(file) = &files.encryption_config else {
        if let Some(path) = configured {
            return Err(ImportError::Fact {
                file: files.apiserver_manifest.label.clone(),
                field: "--encryption-provider-config".into(),
                message: format!(
                    "the apiserver encrypts with `{path}`: pass that file as --encryption-config, or the Talos \
                     nodes could not read any Secret"
                ),
            });
        }
        warnings.push(
            "the kubeadm apiserver has no encryption at rest: the bundle carries no encryption secret, so the \
             Talos apiservers will not encrypt either (talosctl's own bundle validation would want one; the \
             Cluster API providers do not)"
                .into(),
        );
        return Ok((
            Encryption {
                provider: EncryptionProvider::None,
                key_name: None,
            },
            None,
        ));
    };
    let facts = kubeadm::parse_encryption_config(&file.label, &file.bytes)?;
    let layout = facts.talos_layout();
    if !layout.matches {
        for d in &layout.differences {
            warnings.push(format!(
                "{}: {d}; Talos reads only `key2` (secretbox) then `key1` (aescbc): before Talos nodes join, {}; \
                 `capstan check` blocks until cluster.yaml matches",
                file.label,
                crate::procedure::rotate_key_name_fix("key2", "the old key")
            ));
        }
    }
    match &facts.active {
        None => {
            warnings.push(format!(
                "{}: the first provider for secrets is identity: Secrets are stored unencrypted and the bundle \
                 carries no encryption secret",
                file.label
            ));
            Ok((
                Encryption {
                    provider: EncryptionProvider::None,
                    key_name: None,
                },
                None,
            ))
        }
        Some(active) => {
            let (provider, secret) = match active.provider {
                KeyedProvider::Secretbox => (
                    EncryptionProvider::Secretbox,
                    EncryptionSecret::Secretbox(active.secret().clone()),
                ),
                KeyedProvider::Aescbc => {
                    // Talos >= 1.3 drops an aescbc-only bundle: reported by the stub's validation.
                    (
                        EncryptionProvider::Aescbc,
                        EncryptionSecret::Aescbc(active.secret().clone()),
                    )
                }
            };
            Ok((
                Encryption {
                    provider,
                    key_name: Some(active.name.clone()),
                },
                Some(secret),
            ))
        }
    }
}

/// kubeadm's `apiServer.certSANs` less the names Talos puts in its certificate anyway
/// (the endpoint host, the service names, loopback), each once.
fn extra_cert_sans(cluster: &ClusterConfigFacts, endpoint_host: &str) -> Vec<String> {
    let automatic = crate::migration::check::talos_named_sans(endpoint_host, &cluster.dns_domain);
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for san in &cluster.api_server_cert_sans {
        let c = crate::migration::check::canonical_san(san);
        if !automatic.contains(&c) && !seen.contains(&c) {
            seen.push(c);
            out.push(san.clone());
        }
    }
    out
}

/// The port the kubeadm apiservers listen on: the manifest's `--secure-port` (what runs),
/// else the InitConfiguration's `localAPIEndpoint.bindPort` when the file holds one, else
/// 6443 (kube-apiserver's and kubeadm's default). A disagreement is a warning.
fn backend_port(
    apiserver: &ApiServerFacts,
    cluster: &ClusterConfigFacts,
    (manifest, cfg_file): (&str, &str),
    warnings: &mut Vec<String>,
) -> u16 {
    match (apiserver.secure_port(), cluster.local_api_bind_port) {
        (Some(running), Some(bind)) => {
            if running != bind {
                warnings.push(format!(
                    "{manifest} runs --secure-port={running} but {cfg_file} says localAPIEndpoint.bindPort: {bind}: \
                     using {running}, what runs"
                ));
            }
            running
        }
        (Some(p), None) | (None, Some(p)) => p,
        (None, None) => crate::model::DEFAULT_BACKEND_PORT,
    }
}

/// The component settings Talos must carry from the kubeadm files (`check` compares them).
struct Components {
    api_server: model::ApiServer,
    etcd: model::Etcd,
    controller_manager: model::ControllerManager,
    scheduler: model::Scheduler,
    kubelet: model::Kubelet,
}

/// The apiserver names and etcd settings, the kube-controller-manager and kube-scheduler
/// flags Talos can carry, and the kubelet settings, from the kubeadm files.
fn components(
    files: &KubeadmFiles,
    apiserver: &ApiServerFacts,
    cluster: &ClusterConfigFacts,
    talos_version: &str,
    endpoint_host: &str,
    services: &[String],
) -> Result<Components, ImportError> {
    // The apiserver names and etcd settings Talos must carry (`check` compares them).
    let talos_minor = SemVer::parse(talos_version)
        .filter(|v| v.major == 1)
        .map(|v| v.minor);
    let (extra_args, pod_security) =
        crate::migration::check::carried_apiserver_settings(apiserver, talos_minor);
    let api_server = model::ApiServer {
        cert_sans: extra_cert_sans(cluster, endpoint_host),
        extra_args,
        pod_security,
        // The import reads no file the manifest's `--authorization-config` names (only the
        // files named on its command line); `check` says what to set.
        authorization_config: Vec::new(),
    };
    let etcd = model::Etcd {
        extra_args: crate::migration::check::ETCD_PARITY_FLAGS
            .iter()
            .filter_map(|(name, _)| {
                cluster
                    .etcd_extra_args
                    .get(name)
                    .map(|v| (name.to_string(), v.to_string()))
            })
            .collect(),
    };
    // The kube-controller-manager and kube-scheduler flags Talos can carry (`check`'s
    // `controller-manager-flags` and `scheduler-flags` compare them and name the rest).
    use crate::migration::check::{carried_component_args, Component};
    let controller_manager = match &files.controller_manager_manifest {
        None => model::ControllerManager::default(),
        Some(f) => model::ControllerManager {
            extra_args: carried_component_args(
                Component::ControllerManager,
                &kubeadm::parse_controller_manager_manifest(&f.label, &f.bytes)?.args,
                &cluster.pod_subnets,
            ),
        },
    };
    let scheduler = match &files.scheduler_manifest {
        None => model::Scheduler::default(),
        Some(f) => model::Scheduler {
            extra_args: carried_component_args(
                Component::Scheduler,
                &kubeadm::parse_scheduler_manifest(&f.label, &f.bytes)?.args,
                &cluster.pod_subnets,
            ),
        },
    };
    let kubelet = match &files.kubelet_config {
        None => model::Kubelet::default(),
        Some(f) => {
            let bad = |message: String| ImportError::Fact {
                file: f.label.clone(),
                field: "KubeletConfiguration".into(),
                message,
            };
            let text = std::str::from_utf8(&f.bytes).map_err(|_| bad("not UTF-8 text".into()))?;
            let docs = crate::yaml::parse_stream(text).map_err(|e| bad(e.to_string()))?;
            let facts = crate::migration::check::parse_kubelet_config(&f.label, &docs)
                .map_err(|e| bad(e.to_string()))?;
            crate::migration::check::carried_kubelet_settings(&facts, services)
        }
    };
    Ok(Components {
        api_server,
        etcd,
        controller_manager,
        scheduler,
        kubelet,
    })
}

#[allow(clippy::too_many_arguments)]
fn stub(
    files: &KubeadmFiles,
    apiserver: &ApiServerFacts,
    cluster: &ClusterConfigFacts,
    opts: &ImportOptions,
    flavour: Flavour,
    encryption: Encryption,
    fps: &crate::secrets::talos::CaFingerprints,
    token_id: &str,
    warnings: &mut Vec<String>,
) -> Result<ClusterConfig, ImportError> {
    let cfg_file = &files.kubeadm_config.label;
    let manifest = &files.apiserver_manifest.label;
    let fact = |file: &str, field: &str, message: &str| ImportError::Fact {
        file: file.to_string(),
        field: field.to_string(),
        message: message.to_string(),
    };
    let name = match (&opts.name, &cluster.cluster_name) {
        (Some(n), _) => n.clone(),
        (None, Some(n)) => n.clone(),
        (None, None) => return Err(fact(cfg_file, "clusterName", "missing: pass --name")),
    };
    let namespace = opts.namespace.clone().unwrap_or_else(|| name.clone());
    let endpoint = cluster.control_plane_endpoint.as_ref().ok_or_else(|| {
        fact(
            cfg_file,
            "controlPlaneEndpoint",
            "missing: Talos nodes must join behind the existing load balancer endpoint",
        )
    })?;
    let backend_port = backend_port(apiserver, cluster, (manifest, cfg_file), warnings);
    let k8s_version = match (
        apiserver.kubernetes_version(),
        cluster.kubernetes_version.as_deref(),
    ) {
        (Some(running), Some(configured)) => {
            if running != configured {
                warnings.push(format!(
                    "{manifest} runs Kubernetes {running} but {cfg_file} says {configured}: using {running}, what runs"
                ));
            }
            running.to_string()
        }
        (Some(v), None) | (None, Some(v)) => v.to_string(),
        (None, None) => {
            return Err(fact(
                cfg_file,
                "kubernetesVersion",
                "missing, and the apiserver image has no version tag",
            ))
        }
    };
    if cluster.pod_subnets.is_empty() {
        return Err(fact(
            cfg_file,
            "networking.podSubnet",
            "missing: the Talos nodes need the cluster's pod CIDR",
        ));
    }
    let services = if cluster.service_subnets.is_empty() {
        apiserver
            .service_cluster_ip_range()
            .map(|r| r.split(',').map(str::to_string).collect())
            .ok_or_else(|| {
                fact(
                    cfg_file,
                    "networking.serviceSubnet",
                    "missing, and the apiserver has no --service-cluster-ip-range",
                )
            })?
    } else {
        cluster.service_subnets.clone()
    };
    let issuers: Vec<String> = apiserver
        .service_account_issuers()
        .into_iter()
        .map(str::to_string)
        .collect();
    if issuers.is_empty() {
        return Err(fact(
            manifest,
            "--service-account-issuer",
            "missing: every kubeadm apiserver sets it",
        ));
    }
    let Components {
        api_server,
        etcd,
        controller_manager,
        scheduler,
        kubelet,
    } = components(files, apiserver, cluster, &opts.talos_version, &endpoint.host, &services)?;
    let mut audiences = apiserver.api_audiences();
    if audiences.is_empty() {
        // kube-apiserver's default: the first issuer.
        audiences = vec![issuers[0].clone()];
    }
    Ok(ClusterConfig {
        api_version: model::API_VERSION.into(),
        kind: model::KIND.into(),
        metadata: Metadata { name, namespace },
        spec: ClusterSpec {
            flavour,
            versions: Versions {
                talos: opts.talos_version.clone(),
                kubernetes: k8s_version,
            },
            endpoint: Endpoint {
                host: endpoint.host.clone(),
                port: endpoint.port,
                // The kubeadm apiservers' own port, rendered as Talos's localAPIServerPort:
                // written even when it is 6443, so the bundle and the review show it (D2).
                backend_port: Some(backend_port),
                // Chosen by the platform team before phase `complete` (`capstan check` says so).
                strategy: None,
                vip: None,
                control_plane_pool: None,
            },
            network: Network {
                pods: cluster.pod_subnets.clone(),
                services,
                dns_domain: cluster.dns_domain.clone(),
            },
            service_account: ServiceAccount { issuers, audiences },
            encryption,
            api_server,
            etcd,
            controller_manager,
            scheduler,
            kube_proxy: Default::default(),
            deletion: Default::default(),
            health_check: Default::default(),
            kubelet,
            talos: Default::default(),
            vsphere: None,
            control_plane: None,
            workers: Vec::new(),
            // The cluster exists: it starts in the safe phase (nothing scales, the
            // provider is kept from bootstrapping it); render asks for the Job image and
            // the provider releases.
            migration: Some(model::Migration {
                phase: model::Phase::Prepare,
                kubeadm: model::KubeadmNodes::default(),
                job_image: None,
                acknowledge: Vec::new(),
                providers: None,
            }),
            overlays: Vec::new(),
            recipients: opts
                .recipients
                .iter()
                .map(|(_, r)| r.trim().to_string())
                .collect(),
            provenance: Some(Provenance {
                imported_from: Some("kubeadm".into()),
                fingerprints: Some(Fingerprints {
                    kubernetes_ca: fps.k8s.clone(),
                    etcd_ca: fps.etcd.clone(),
                    front_proxy_ca: fps.k8saggregator.clone(),
                    service_account_key: fps.k8sserviceaccount.clone(),
                }),
                bootstrap_token_id: Some(token_id.to_string()),
                etcd_version: cluster.etcd_image_tag.clone(),
            }),
        },
    })
}

/// The `bootstrap-token-<id>` Secret for the workload cluster's `kube-system`, as Talos
/// creates it: no expiry, group `system:bootstrappers:nodes` (Talos `manifests/bootstrap-token-secret` in `controllers/k8s/templates`).
fn bootstrap_secret(token: &kubeadm::BootstrapToken) -> Zeroizing<String> {
    // Token characters are [a-z0-9]: plain YAML scalars; built directly into zeroized memory.
    let mut s = Zeroizing::new(String::with_capacity(512));
    s.push_str("apiVersion: v1\nkind: Secret\nmetadata:\n  name: bootstrap-token-");
    s.push_str(token.id());
    s.push_str("\n  namespace: kube-system\ntype: bootstrap.kubernetes.io/token\nstringData:\n  token-id: ");
    s.push_str(token.id());
    s.push_str("\n  token-secret: ");
    s.push_str(token.secret());
    s.push_str(
        "\n  usage-bootstrap-authentication: \"true\"\n  usage-bootstrap-signing: \"true\"\n  auth-extra-groups: system:bootstrappers:nodes\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::pki::testkit::{self, Alg, TestKey};
    use age::secrecy::ExposeSecret;

    /// A kubeadm control plane's files, built with the project's own fixture kit.
    pub(crate) struct Fixture {
        pub files: Vec<(&'static str, Vec<u8>)>,
    }

    pub(crate) fn kubeadm_fixture(
        alg: Alg,
        provider: &str,
        key_name: &str,
        issuer: &str,
    ) -> Fixture {
        let mut files = Vec::new();
        for (i, (crt, key, cn)) in [
            ("ca.crt", "ca.key", "kubernetes"),
            ("etcd/ca.crt", "etcd/ca.key", "etcd-ca"),
            ("front-proxy-ca.crt", "front-proxy-ca.key", "front-proxy-ca"),
        ]
        .into_iter()
        .enumerate()
        {
            let k = TestKey::new(alg, i);
            files.push((crt, testkit::self_signed_ca(&k, cn, 3650)));
            files.push((key, k.traditional_pem().to_vec()));
        }
        files.push(("sa.key", TestKey::new(alg, 3).traditional_pem().to_vec()));
        files.push(("manifest", testkit::apiserver_manifest(issuer).into_bytes()));
        files.push((
            "kubeadm-config",
            testkit::cluster_configuration("v1beta4").into_bytes(),
        ));
        files.push((
            "encryption",
            testkit::encryption_configuration(provider, key_name).into_bytes(),
        ));
        Fixture { files }
    }

    impl Fixture {
        fn get(&self, name: &str) -> InputFile {
            let bytes = self
                .files
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, b)| b.clone())
                .unwrap();
            InputFile {
                label: format!("pki/{name}"),
                bytes: Zeroizing::new(bytes),
            }
        }
        pub(crate) fn set(&mut self, name: &str, bytes: Vec<u8>) {
            self.files.iter_mut().find(|(n, _)| *n == name).unwrap().1 = bytes;
        }
        fn files(&self) -> KubeadmFiles {
            KubeadmFiles {
                ca_crt: self.get("ca.crt"),
                ca_key: self.get("ca.key"),
                etcd_ca_crt: self.get("etcd/ca.crt"),
                etcd_ca_key: self.get("etcd/ca.key"),
                front_proxy_ca_crt: self.get("front-proxy-ca.crt"),
                front_proxy_ca_key: self.get("front-proxy-ca.key"),
                sa_key: self.get("sa.key"),
                apiserver_manifest: self.get("manifest"),
                kubeadm_config: self.get("kubeadm-config"),
                encryption_config: Some(self.get("encryption")),
                kubelet_config: None,
                controller_manager_manifest: None,
                scheduler_manifest: None,
            }
        }
    }

    fn options(recipient: &str) -> ImportOptions {
        ImportOptions {
            talos_version: "v1.10.6".into(),
            flavour: "v1beta1".into(),
            name: None,
            namespace: None,
            recipients: vec![("--recipient".into(), recipient.into())],
            bootstrap_token: None,
            now: SystemTime::now(),
        }
    }

    fn run(fx: &Fixture) -> (Result<Imported, ImportError>, age::x25519::Identity) {
        let id = age::x25519::Identity::generate();
        (
            import_kubeadm(fx.files(), options(&id.to_public().to_string())),
            id,
        )
    }

    #[test]
    fn round_trip_rsa_and_ecdsa() {
        for alg in [Alg::Rsa, Alg::P256] {
            let fx = kubeadm_fixture(
                alg,
                "secretbox",
                "key2",
                "https://kubernetes.default.svc.cluster.local",
            );
            let (imported, id) = run(&fx);
            let imported = imported.unwrap();
            let plain =
                secrets::decrypt("secrets.age", imported.secrets_age.as_bytes(), &[id]).unwrap();
            let bundle = SecretsBundle::parse("secrets.age", &plain).unwrap();
            let certs = bundle.certs.as_ref().unwrap();
            let k8s = certs.k8s.as_ref().unwrap();
            assert_eq!(
                k8s.crt,
                fx.get("ca.crt").bytes.to_vec(),
                "ca.crt byte-identical"
            );
            assert_eq!(
                k8s.key.to_vec(),
                fx.get("ca.key").bytes.to_vec(),
                "ca.key byte-identical"
            );
            assert_eq!(
                certs.etcd.as_ref().unwrap().crt,
                fx.get("etcd/ca.crt").bytes.to_vec()
            );
            assert_eq!(
                certs.k8saggregator.as_ref().unwrap().key.to_vec(),
                fx.get("front-proxy-ca.key").bytes.to_vec()
            );
            assert_eq!(
                certs.k8sserviceaccount.as_ref().unwrap().key.to_vec(),
                fx.get("sa.key").bytes.to_vec()
            );
            let s = bundle.secrets.as_ref().unwrap();
            assert_eq!(
                s.secretboxencryptionsecret.as_deref().map(|x| x.as_str()),
                Some(testkit::ENCRYPTION_SECRET)
            );
            assert!(s.aescbcencryptionsecret.is_none());
            let token = s.bootstraptoken.as_str();
            assert!(
                token.len() == 23 && token.as_bytes()[6] == b'.',
                "token format"
            );
            assert!(token.starts_with(&imported.token_id));
            // The OS CA is generated and verifies as a CA with its own key.
            let os = certs.os.as_ref().unwrap();
            let (_, w) =
                pki::load_ca("os.crt", &os.crt, "os.key", &os.key, SystemTime::now()).unwrap();
            assert!(w.is_empty());
            assert!(pki::certificate_summary("os.crt", &os.crt)
                .unwrap()
                .subject
                .contains("O=talos"));
            // The stub carries the facts and the fingerprints of what was encrypted.
            let cfg = &imported.config;
            let fps = bundle.fingerprints().unwrap();
            let prov = cfg
                .spec
                .provenance
                .as_ref()
                .unwrap()
                .fingerprints
                .as_ref()
                .unwrap();
            assert_eq!(prov.kubernetes_ca, fps.k8s);
            assert_eq!(prov.service_account_key, fps.k8sserviceaccount);
            assert_eq!(cfg.spec.endpoint.host, "lab-f.example.internal");
            assert_eq!(cfg.spec.network.pods, vec!["10.244.0.0/16"]);
            assert_eq!(
                cfg.spec.service_account.audiences,
                vec!["https://kubernetes.default.svc.cluster.local"]
            );
            assert_eq!(cfg.spec.encryption.key_name.as_deref(), Some("key2"));
            assert!(imported.warnings.is_empty(), "{:?}", imported.warnings);
            // The stub text parses back strictly and passes check-level validation.
            let text = imported.cluster_yaml.clone();
            let back =
                ClusterConfig::from_value("cluster.yaml", yaml::parse_one(&text).unwrap()).unwrap();
            assert_eq!(&back, cfg);
            // Nothing secret in the stub or the warnings.
            assert!(!text.contains(testkit::ENCRYPTION_SECRET) && !text.contains(&token[7..]));
            let key_pem = String::from_utf8(fx.get("ca.key").bytes.to_vec()).unwrap();
            assert!(!imported
                .secrets_age
                .contains(key_pem.lines().nth(1).unwrap()));
            assert!(imported
                .bootstrap_secret
                .contains(&format!("token-secret: {}\n", &token[7..])));
        }
    }

    #[test]
    fn no_encryption_at_rest_carries_no_encryption_secret() {
        let mut fx = kubeadm_fixture(
            Alg::P256,
            "secretbox",
            "key2",
            "https://kubernetes.default.svc.cluster.local",
        );
        let manifest = testkit::apiserver_manifest("https://kubernetes.default.svc.cluster.local")
            .replace(
                "    - --encryption-provider-config=/etc/kubernetes/enc/encryption-config.yaml\n",
                "",
            );
        fx.set("manifest", manifest.into_bytes());
        let id = age::x25519::Identity::generate();
        let mut files = fx.files();
        files.encryption_config = None;
        let imported = import_kubeadm(files, options(&id.to_public().to_string())).unwrap();
        assert_eq!(
            imported.config.spec.encryption.provider,
            EncryptionProvider::None
        );
        let plain =
            secrets::decrypt("secrets.age", imported.secrets_age.as_bytes(), &[id]).unwrap();
        let bundle = SecretsBundle::parse("secrets.age", &plain).unwrap();
        let s = bundle.secrets.as_ref().unwrap();
        assert!(
            s.secretboxencryptionsecret.is_none() && s.aescbcencryptionsecret.is_none(),
            "a fresh key would make Talos encrypt what kubeadm cannot read"
        );
    }

    #[test]
    fn key_name_mismatch_is_recorded_and_warned_not_fixed() {
        let fx = kubeadm_fixture(
            Alg::P256,
            "secretbox",
            "key0",
            "https://kubernetes.default.svc.cluster.local",
        );
        let imported = run(&fx).0.unwrap();
        assert_eq!(
            imported.config.spec.encryption.key_name.as_deref(),
            Some("key0")
        );
        assert!(
            imported.warnings.iter().any(|w| w.contains("re-encrypt")),
            "{:?}",
            imported.warnings
        );
        assert!(
            imported
                .warnings
                .iter()
                .any(|w| w.contains("spec.encryption.keyName")),
            "{:?}",
            imported.warnings
        );
    }

    fn err(fx: &Fixture) -> String {
        match run(fx).0 {
            Ok(_) => panic!("import accepted a bad input"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn every_bad_input_names_its_file() {
        // A key that does not belong to its certificate.
        let mut fx = kubeadm_fixture(Alg::P256, "secretbox", "key2", "https://x");
        let other = fx.get("etcd/ca.key").bytes.to_vec();
        fx.set("ca.key", other);
        let e = err(&fx);
        assert!(e.contains("pki/ca.crt") || e.contains("pki/ca.key"), "{e}");
        // A leaf certificate instead of a CA, and an intermediate CA.
        for is_ca in [false, true] {
            let mut fx = kubeadm_fixture(Alg::P256, "secretbox", "key2", "https://x");
            let root = TestKey::new(Alg::P256, 0);
            let params = testkit::ca_params(
                "root",
                testkit::days_from_now(-1),
                testkit::days_from_now(100),
            );
            let sub = TestKey::new(Alg::P256, 0);
            fx.set(
                "front-proxy-ca.crt",
                testkit::signed_by(&sub, "sub", is_ca, &params, &root),
            );
            fx.set("front-proxy-ca.key", sub.traditional_pem().to_vec());
            let e = err(&fx);
            assert!(e.contains("pki/front-proxy-ca.crt"), "{e}");
            if is_ca {
                assert!(e.to_lowercase().contains("intermediate"), "{e}");
            }
        }
        // An expired CA.
        let mut fx = kubeadm_fixture(Alg::P256, "secretbox", "key2", "https://x");
        let k = TestKey::new(Alg::P256, 0);
        let p = testkit::ca_params(
            "etcd-ca",
            testkit::days_from_now(-400),
            testkit::days_from_now(-1),
        );
        fx.set(
            "etcd/ca.crt",
            crate::secrets::pki::encode_certificate_pem(p.self_signed(&k).unwrap().der()),
        );
        fx.set("etcd/ca.key", k.traditional_pem().to_vec());
        let e = err(&fx);
        assert!(
            e.contains("pki/etcd/ca.crt") && e.to_lowercase().contains("expired"),
            "{e}"
        );
        // An encryption provider Talos cannot carry.
        let mut fx = kubeadm_fixture(Alg::P256, "secretbox", "key2", "https://x");
        fx.set(
            "encryption",
            testkit::encryption_configuration("kms", "key1").into_bytes(),
        );
        let e = err(&fx);
        assert!(
            e.contains("pki/encryption") && e.contains("providers[0]"),
            "{e}"
        );
        // A malformed recipient.
        let fx = kubeadm_fixture(Alg::P256, "secretbox", "key2", "https://x");
        let mut o = options("age1notarecipient");
        o.recipients[0].0 = "--recipient".into();
        let Err(e) = import_kubeadm(fx.files(), o) else {
            panic!("accepted a bad recipient")
        };
        assert!(
            e.to_string()
                .starts_with("--recipient: `age1notarecipient` is not an age recipient"),
            "{e}"
        );
        // The apiserver encrypts but no EncryptionConfiguration was given.
        let fx = kubeadm_fixture(Alg::P256, "secretbox", "key2", "https://x");
        let mut files = fx.files();
        files.encryption_config = None;
        let Err(e) = import_kubeadm(
            files,
            options(&age::x25519::Identity::generate().to_public().to_string()),
        ) else {
            panic!("accepted a missing encryption config")
        };
        assert!(
            e.to_string()
                .contains("pki/manifest: --encryption-provider-config"),
            "{e}"
        );
    }

    #[test]
    fn expiring_ca_warns() {
        let mut fx = kubeadm_fixture(
            Alg::P256,
            "secretbox",
            "key2",
            "https://kubernetes.default.svc.cluster.local",
        );
        let k = TestKey::new(Alg::P256, 0);
        fx.set("ca.crt", testkit::self_signed_ca(&k, "kubernetes", 30));
        fx.set("ca.key", k.traditional_pem().to_vec());
        let imported = run(&fx).0.unwrap();
        assert!(
            imported.warnings.iter().any(|w| w.contains("pki/ca.crt")),
            "{:?}",
            imported.warnings
        );
        let _ = age::x25519::Identity::generate()
            .to_string()
            .expose_secret()
            .len();
    }
}
