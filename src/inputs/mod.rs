//! The only module that reads project files: finds cluster directories, reads and parses
//! `cluster.yaml`, reads template overrides, and loads a cluster's overlays (with
//! kustomize's loader rules: paths relative to the overlay, nothing outside the repository
//! root, no cycles, no base at or above its overlay). Everything after this is a pure function
//! of what it returns. Paths recorded for the lock file are relative to the repository
//! root, so the lock does not depend on how the user spelled the path.

mod artifacts;
pub use artifacts::{read_moved_directory, read_rendered, MovedFile, MAX_MOVED_FILE, MAX_MOVED_FILES};
#[cfg(any(feature = "backup", test, feature = "testkit"))]
pub use artifacts::MovedDirectory;
#[cfg(any(test, feature = "testkit"))]
pub use artifacts::{RenderedCluster};
pub mod cluster;
pub mod git;
pub mod tree;
pub use tree::{DiskTree, Tree};
#[cfg(any(test, feature = "testkit"))]
pub use tree::{MemoryTree};
mod root;
use root::rel;
pub use root::{given_repo_root, repo_root, set_repo_root};
#[cfg(any(test, feature = "testkit"))]
pub use root::{clusters_root_len};
mod identity;
pub mod kubeadm;
pub mod providers;

use crate::digest::sha256_hex;
use crate::model::{ClusterConfig, ModelError, OverlayFile};
use crate::overlay::{Overlay, OverlayError};
use crate::printable::Label;
use crate::yaml;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// An overlay directory's input file name.
pub const OVERLAY_FILE: &str = "overlay.yaml";

/// The per-cluster input file name.
pub const CLUSTER_FILE: &str = "cluster.yaml";

/// Why inputs could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// A file or directory could not be read.
    // The message names the OS error, so it is not also the error's `source()`: a
    // printed chain (`{:#}`) would say it twice.
    #[error("{path}: {error}")]
    Io {
        /// The path.
        path: String,
        /// The OS error.
        error: std::io::Error,
    },
    /// A file is not valid YAML.
    #[error("{file}: invalid YAML: {message}")]
    Yaml {
        /// The file.
        file: String,
        /// The parser's message.
        message: String,
    },
    /// `cluster.yaml` does not parse.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A directory holds no cluster.
    #[error("{dir}: no `cluster.yaml` here, in `clusters/*/` or in `*/`; expected a cluster directory or a repository of clusters")]
    NoClusters {
        /// The directory.
        dir: String,
    },
    /// Two directories declare the same cluster name.
    #[error("{second}: cluster name `{name}` is already used by {first}")]
    DuplicateName {
        /// The name.
        name: String,
        /// First file.
        first: String,
        /// Second file.
        second: String,
    },
    /// No age identity was given.
    #[error("an age identity is required: pass --identity FILE, set CAPSTAN_AGE_KEY_FILE, SOPS_AGE_KEY_FILE, SOPS_AGE_KEY or SOPS_AGE_KEY_CMD, or put it where sops looks by default ($XDG_CONFIG_HOME/sops/age/keys.txt, else ~/.config/sops/age/keys.txt)")]
    NoIdentity,
    /// `SOPS_AGE_KEY_CMD` could not be run or failed.
    #[error("${var}: {message}")]
    IdentityCommand {
        /// The variable.
        var: &'static str,
        /// What went wrong (never the command's output).
        message: String,
    },
    /// An overlay file or a path in it is not usable.
    #[error(transparent)]
    Overlay(#[from] OverlayError),
    /// A git revision could not be read.
    #[error("--git: {message}")]
    Git {
        /// What failed.
        message: String,
    },
    /// An input is not a regular file (a FIFO, a device, a directory, ...).
    #[error("{path}: {found}, not a regular file: capstan reads only regular files")]
    NotRegular {
        /// The path.
        path: String,
        /// What it is.
        found: &'static str,
    },
    /// A directory input (a templates directory) is something else.
    #[error("{path}: not a directory ({what} must be a directory)")]
    NotADirectory {
        /// The path.
        path: String,
        /// What was expected there.
        what: &'static str,
    },
    /// An input is larger than its kind of input can be.
    #[error("{path}: larger than {cap} bytes, the limit for {what} (README: Safety){raise}")]
    TooLarge {
        /// The path.
        path: String,
        /// The limit in bytes.
        cap: u64,
        /// The kind of input.
        what: &'static str,
        /// How to raise the limit, when it can be (`; …`), else empty.
        raise: &'static str,
    },
    /// A repository file resolves outside the repository (a symbolic link).
    #[error("{path}: resolves to {resolved}, outside {root} (a symbolic link): capstan reads only files inside the repository")]
    Outside {
        /// The path as found.
        path: String,
        /// Where it leads.
        resolved: String,
        /// The directory it must stay in.
        root: String,
    },
    /// A cluster directory outside the `--repo-root` given.
    #[error("{dir}: not inside --repo-root {root}: give the directory that holds `clusters/` (and the overlays and templates), or leave --repo-root out to find it from the cluster directory")]
    OutsideRepoRoot {
        /// The cluster directory.
        dir: String,
        /// The root given.
        root: String,
    },
    /// Something in a templates directory that is not a template.
    #[error("{path}: templates must be `.yaml` files under `<flavour>/` or `talos/`")]
    NotATemplate {
        /// The path.
        path: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> InputError + '_ {
    move |error| InputError::Io {
        path: path.label(),
        error,
    }
}

pub use crate::digest::Digest256;

/// Everything read for one cluster.
#[derive(Debug, Clone)]
pub struct ClusterInput {
    /// The cluster directory as given.
    pub dir: PathBuf,
    /// `cluster.yaml` as the user can find it (for messages).
    pub file: String,
    /// The parsed configuration.
    pub config: ClusterConfig,
    /// `cluster.yaml` as read (for an edit in place that keeps its comments).
    pub text: String,
    /// The repository root (the parent of `clusters/`), or the cluster directory.
    pub root: PathBuf,
    /// Digests of the inputs read for this cluster (none when not [`Digests::Wanted`]).
    pub digests: Vec<Digest256>,
    /// sha256 of `secrets.age`, when the cluster has one.
    pub secrets_age_sha256: Option<String>,
    /// The sealed management-cluster Secrets (`secrets/*.yaml`), sorted by name.
    pub sealed: Vec<SealedFile>,
}

/// The clusters found under `dir` on disk ([`cluster::discover`]).
pub fn discover(dir: &Path) -> Result<Vec<PathBuf>, InputError> {
    cluster::discover(&DiskTree::new(dir)?, dir)
}

/// The cap of a YAML input (`validate`, `diff` streams): 256 MiB, room for a 5,000-cluster
/// render (183 MB measured), or `CAPSTAN_MAX_YAML_MIB` (1 to 4096; anything else is the
/// default).
fn yaml_cap() -> u64 {
    std::env::var("CAPSTAN_MAX_YAML_MIB")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|m| (1..=4096).contains(m))
        .map_or(256 << 20, |m| m << 20)
}

/// What an input file is, for the size it may have. Every cap is far above any real file of
/// its kind; they keep a hostile repository from exhausting memory (`/dev/zero` behind a
/// link, a file of gigabytes). The README's Safety section lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// `cluster.yaml`.
    ClusterFile,
    /// `secrets.age`.
    SecretsAge,
    /// A sealed SOPS file (`secrets/**/*.yaml`).
    Sealed,
    /// A template override.
    Template,
    /// An overlay's `overlay.yaml`, resource or patch file.
    Overlay,
    /// An age identity or recipients file.
    Identity,
    /// A kubeadm file (certificate, key, manifest, configuration) or a `check` input.
    Kubeadm,
    /// YAML for `validate`, CRD files, rendered output, lock files.
    Yaml,
    /// One object of a `clusterctl move --to-directory` directory.
    Moved,
    /// A backup (all of a `clusterctl move` directory, encrypted).
    Backup,
    /// An etcd snapshot (`check --etcd-snapshot`): streamed, never held whole.
    EtcdSnapshot,
}

impl InputKind {
    /// The largest file of this kind capstan reads, in bytes.
    pub fn cap(self) -> u64 {
        match self {
            InputKind::ClusterFile | InputKind::SecretsAge | InputKind::Sealed => 1 << 20,
            InputKind::Template | InputKind::Identity | InputKind::Kubeadm => 1 << 20,
            InputKind::Overlay => 4 << 20,
            InputKind::Yaml => yaml_cap(),
            InputKind::Moved => MAX_MOVED_FILE,
            InputKind::Backup => 1 << 30,
            // etcd's largest suggested backend quota is 8 GiB; twice that, streamed.
            InputKind::EtcdSnapshot => 16 << 30,
        }
    }

    /// How the limit is raised, for the message at the limit (empty when it is fixed).
    pub fn raise(self) -> &'static str {
        match self {
            InputKind::Yaml => {
                "; raise it with the environment variable CAPSTAN_MAX_YAML_MIB (MiB, up to 4096; memory grows \
                 with it, about 10 times the stream)"
            }
            _ => "",
        }
    }

    /// What it is, for messages.
    pub fn what(self) -> &'static str {
        match self {
            InputKind::ClusterFile => "a cluster.yaml",
            InputKind::SecretsAge => "a secrets.age",
            InputKind::Sealed => "a sealed Secret",
            InputKind::Template => "a template",
            InputKind::Overlay => "an overlay file",
            InputKind::Identity => "an age identity or recipients file",
            InputKind::Kubeadm => "a kubeadm file",
            InputKind::Yaml => "a YAML input",
            InputKind::Moved => "an object of a `clusterctl move` directory",
            InputKind::Backup => "a backup",
            InputKind::EtcdSnapshot => "an etcd snapshot",
        }
    }
}

fn file_type_name(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a file"
    }
}

/// The canonical form of a directory that inputs must stay in.
fn canonical_dir(root: &Path) -> Result<PathBuf, InputError> {
    let r = if root.as_os_str().is_empty() {
        Path::new(".")
    } else {
        root
    };
    std::fs::canonicalize(r).map_err(io(r))
}

/// Refuse a path (a directory capstan is about to read files from) that resolves outside
/// `root` (canonical).
fn confine(path: &Path, root: &Path) -> Result<(), InputError> {
    let c = std::fs::canonicalize(path).map_err(io(path))?;
    if c.starts_with(root) {
        Ok(())
    } else {
        Err(InputError::Outside {
            path: path.label(),
            resolved: c.label(),
            root: root.label(),
        })
    }
}

/// Open an input without following a last symbolic link and without blocking on a FIFO.
fn open_nofollow(path: &Path, follow: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut flags = libc::O_NONBLOCK;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
}

/// An input file's bytes: a regular file (no FIFO, device or directory, so nothing blocks
/// or never ends), at most `kind.cap()` bytes, and, when `root` (canonical) is given, inside
/// it: a symbolic link is resolved and must stay in `root`. The directory holding `path`
/// is the caller's to confine ([`confine`]). The buffer is sized from the open
/// descriptor's metadata (one call, which the type check needs anyway).
fn read_input_bytes(
    path: &Path,
    root: Option<&Path>,
    kind: InputKind,
) -> Result<Vec<u8>, InputError> {
    use std::io::Read as _;
    let file = match open_nofollow(path, false) {
        Ok(f) => f,
        // ELOOP: the last component is a symbolic link.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            if let Some(root) = root {
                confine(path, root)?;
            }
            open_nofollow(path, true).map_err(io(path))?
        }
        Err(e) => return Err(io(path)(e)),
    };
    let meta = file.metadata().map_err(io(path))?;
    let t = meta.file_type();
    // An identity may come through a pipe (`-i <(pass show age)`): it is read as far as the
    // cap, as a regular file is; every other input must be a regular file.
    let pipe = {
        use std::os::unix::fs::FileTypeExt as _;
        kind == InputKind::Identity && t.is_fifo()
    };
    if pipe {
        // Opened without blocking (so a FIFO no one writes cannot hang the open); read as a
        // pipe is read: until its writer closes it (EOF at once when it has none).
        let flags = rustix::fs::fcntl_getfl(&file).map_err(|e| io(path)(e.into()))?;
        rustix::fs::fcntl_setfl(&file, flags - rustix::fs::OFlags::NONBLOCK)
            .map_err(|e| io(path)(e.into()))?;
    }
    if !t.is_file() && !pipe {
        return Err(InputError::NotRegular {
            path: path.label(),
            found: file_type_name(t),
        });
    }
    let cap = kind.cap();
    // The size is known from the descriptor already; a buffer of it is not reallocated,
    // so no partial copy of a secret input is freed unzeroed while reading.
    let len = if pipe {
        cap + 1
    } else {
        meta.len().min(cap + 1)
    } as usize;
    let mut bytes = Vec::with_capacity(len.max(16 << 10) + 1);
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(io(path))?;
    if bytes.len() as u64 > cap {
        return Err(InputError::TooLarge {
            path: path.label(),
            cap,
            what: kind.what(),
            raise: kind.raise(),
        });
    }
    Ok(bytes)
}

fn utf8(path: &Path, bytes: Vec<u8>) -> Result<String, InputError> {
    String::from_utf8(bytes).map_err(|_| InputError::Yaml {
        file: path.label(),
        message: "not UTF-8 text".into(),
    })
}

/// Read an input file as UTF-8 text: a regular file of at most `kind.cap()` bytes (not
/// confined to a repository: for files named on the command line).
pub fn read_input_text(path: &Path, kind: InputKind) -> Result<String, InputError> {
    utf8(path, read_input_bytes(path, None, kind)?)
}

/// Read a repository file as UTF-8 text: as [`read_input_text`], and inside `root`
/// (canonical).
fn read_repo_text(path: &Path, root: &Path, kind: InputKind) -> Result<String, InputError> {
    utf8(path, read_input_bytes(path, Some(root), kind)?)
}

/// Parse a YAML file's text as one document, naming the file in errors.
fn parse_yaml_file(file: &str, text: &str) -> Result<serde_json::Value, InputError> {
    yaml::parse_one(text).map_err(|e| InputError::Yaml {
        file: file.to_string(),
        message: e.message,
    })
}

/// Whether the digests of a cluster's inputs are wanted (for a bundle's `capstan.lock`).
/// Without them only `secrets.age` is hashed: the sealed files' checks need its digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Digests {
    /// Hash every input file.
    Wanted,
    /// Hash only what the checks need (rendering to a stream, diffing).
    NotWanted,
}

/// Read and parse one cluster directory, with the digests of its inputs.
pub fn load_cluster(dir: &Path) -> Result<ClusterInput, InputError> {
    load_cluster_with(dir, Digests::Wanted)
}

/// [`load_cluster`], hashing the inputs only when `want` asks for it (else
/// [`ClusterInput::digests`] is empty and the sealed files carry no digest).
pub fn load_cluster_with(dir: &Path, want: Digests) -> Result<ClusterInput, InputError> {
    cluster::load(&DiskTree::for_cluster(dir)?, dir, cluster::Load::all(want))
}

/// The sealed files of a cluster directory on disk ([`cluster::read_sealed`]).
pub fn read_sealed(
    dir: &Path,
    workload: bool,
    want: Digests,
) -> Result<Vec<SealedFile>, InputError> {
    cluster::read_sealed(&DiskTree::for_cluster(dir)?, dir, workload, want)
}

/// The name a cluster directory on disk declares ([`cluster::cluster_name`]).
pub fn cluster_name(dir: &Path) -> Result<(Option<String>, String), InputError> {
    cluster::cluster_name(&DiskTree::for_cluster(dir)?, dir)
}

/// Every cluster directory under the given directories (see [`discover`]), in order.
pub fn discover_all(dirs: &[PathBuf]) -> Result<Vec<PathBuf>, InputError> {
    let mut out = Vec::new();
    for d in dirs {
        out.extend(discover(d)?);
    }
    Ok(out)
}

/// Load every cluster under the given directories (see [`discover`]); names must be unique.
#[cfg(any(feature = "backup", test, feature = "testkit"))]
pub fn load_clusters(dirs: &[PathBuf]) -> Result<Vec<ClusterInput>, InputError> {
    let mut out: Vec<ClusterInput> = Vec::new();
    for d in dirs {
        for c in discover(d)? {
            let input = load_cluster(&c)?;
            if let Some(prev) = out
                .iter()
                .find(|p| p.config.metadata.name == input.config.metadata.name)
            {
                return Err(InputError::DuplicateName {
                    name: input.config.metadata.name.clone(),
                    first: prev.file.clone(),
                    second: input.file.clone(),
                });
            }
            out.push(input);
        }
    }
    Ok(out)
}

/// Every YAML document in a file, or in the `.yaml`/`.yml` files of a directory (below it
/// too when `recursive`; sorted; a bundle's `kustomization.yaml` is skipped), each with the
/// file it came from.
pub fn read_yaml_documents(
    path: &Path,
    recursive: bool,
) -> Result<Vec<(String, serde_json::Value)>, InputError> {
    let mut files = Vec::new();
    // Files found in a directory must resolve inside it (a pull request's links lead
    // nowhere else); a file named directly is read as named.
    let mut fence = None;
    if path.is_dir() {
        fence = Some(canonical_dir(path)?);
        let depth = if recursive { usize::MAX } else { 1 };
        for entry in walkdir::WalkDir::new(path)
            .max_depth(depth)
            .sort_by_file_name()
        {
            let entry = entry.map_err(|e| {
                let p = e.path().unwrap_or(path).label();
                InputError::Io {
                    path: p,
                    error: e
                        .into_io_error()
                        .unwrap_or_else(|| std::io::Error::other("walk failed")),
                }
            })?;
            let name = entry.file_name().to_string_lossy();
            // Anything but a directory is read, so a FIFO or a device named `*.yaml` is
            // refused by name instead of skipped.
            if !entry.file_type().is_dir()
                && (name.ends_with(".yaml") || name.ends_with(".yml"))
                && name != "kustomization.yaml"
            {
                files.push(entry.path().to_path_buf());
            }
        }
    } else {
        files.push(path.to_path_buf());
    }
    let mut out = Vec::new();
    for f in files {
        let label = f.label();
        let text = match &fence {
            Some(root) => read_repo_text(&f, root, InputKind::Yaml)?,
            None => read_input_text(&f, InputKind::Yaml)?,
        };
        out.extend(parse_documents(&label, &text)?);
    }
    Ok(out)
}

/// Parse a YAML stream read from elsewhere (such as stdin), labelling each document.
pub fn parse_documents(
    label: &str,
    text: &str,
) -> Result<Vec<(String, serde_json::Value)>, InputError> {
    let docs = yaml::parse_stream(text).map_err(|e| InputError::Yaml {
        file: label.to_string(),
        message: e.message,
    })?;
    Ok(docs.into_iter().map(|d| (label.to_string(), d)).collect())
}

pub use identity::read_identity_text;

fn input_file(path: &Path) -> Result<crate::inputs::InputFile, InputError> {
    Ok(crate::inputs::InputFile {
        label: path.label(),
        bytes: zeroize::Zeroizing::new(read_input_bytes(path, None, InputKind::Kubeadm)?),
    })
}

/// Read the files `import kubeadm` needs (`pki` in the `/etc/kubernetes/pki` layout).
pub fn read_kubeadm_files(
    pki: &Path,
    apiserver_manifest: &Path,
    kubeadm_config: &Path,
    encryption_config: Option<&Path>,
    kubelet_config: Option<&Path>,
    controller_manager_manifest: Option<&Path>,
    scheduler_manifest: Option<&Path>,
) -> Result<crate::inputs::KubeadmFiles, InputError> {
    require_pki_dir(pki)?;
    Ok(crate::inputs::KubeadmFiles {
        ca_crt: input_file(&pki.join("ca.crt"))?,
        ca_key: input_file(&pki.join("ca.key"))?,
        etcd_ca_crt: input_file(&pki.join("etcd/ca.crt"))?,
        etcd_ca_key: input_file(&pki.join("etcd/ca.key"))?,
        front_proxy_ca_crt: input_file(&pki.join("front-proxy-ca.crt"))?,
        front_proxy_ca_key: input_file(&pki.join("front-proxy-ca.key"))?,
        sa_key: input_file(&pki.join("sa.key"))?,
        apiserver_manifest: input_file(apiserver_manifest)?,
        kubeadm_config: input_file(kubeadm_config)?,
        encryption_config: encryption_config.map(input_file).transpose()?,
        kubelet_config: kubelet_config.map(input_file).transpose()?,
        controller_manager_manifest: controller_manager_manifest.map(input_file).transpose()?,
        scheduler_manifest: scheduler_manifest.map(input_file).transpose()?,
    })
}

fn require_pki_dir(pki: &Path) -> Result<(), InputError> {
    if pki.is_dir() {
        return Ok(());
    }
    Err(InputError::Io {
        path: pki.label(),
        error: std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "not a directory (expected the kubeadm pki directory)",
        ),
    })
}

/// An etcd snapshot as `check` needs it, read once as a stream (it can be gigabytes): its
/// length, its first bytes (bbolt's two meta pages are at the start) and the SHA-256 of
/// everything but its last 32 bytes, with those bytes (where `etcdctl snapshot save` puts the
/// SHA-256 of the database).
#[derive(Debug, Clone)]
pub struct SnapshotFile {
    /// The path as named.
    pub label: String,
    /// Its length in bytes.
    pub len: u64,
    /// Its first bytes: at most [`SnapshotFile::HEAD`].
    pub head: Vec<u8>,
    /// SHA-256 of all but the last 32 bytes, and those 32 bytes (`None` when shorter).
    pub trailer: Option<([u8; 32], [u8; 32])>,
}

impl SnapshotFile {
    /// How much of the start is kept: two bbolt pages of the largest page size (64 KiB).
    pub const HEAD: usize = 128 << 10;
}

/// Read an etcd snapshot named on the command line (a regular file, at most
/// [`InputKind::EtcdSnapshot`]'s cap), hashing it as it streams.
pub fn read_etcd_snapshot(path: &Path) -> Result<SnapshotFile, InputError> {
    use sha2::Digest as _;
    use std::io::Read as _;
    let file = open_nofollow(path, true).map_err(io(path))?;
    let meta = file.metadata().map_err(io(path))?;
    if !meta.file_type().is_file() {
        return Err(InputError::NotRegular {
            path: path.label(),
            found: file_type_name(meta.file_type()),
        });
    }
    let kind = InputKind::EtcdSnapshot;
    let len = meta.len();
    if len > kind.cap() {
        return Err(InputError::TooLarge {
            path: path.label(),
            cap: kind.cap(),
            what: kind.what(),
            raise: kind.raise(),
        });
    }
    let truncated = || {
        io(path)(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the file changed while it was read",
        ))
    };
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file.take(len));
    let body_len = len.saturating_sub(32);
    let mut head = Vec::with_capacity((len as usize).min(SnapshotFile::HEAD));
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut done: u64 = 0;
    while done < body_len {
        let want = ((body_len - done) as usize).min(buf.len());
        let n = reader.read(&mut buf[..want]).map_err(io(path))?;
        if n == 0 {
            return Err(truncated());
        }
        if head.len() < SnapshotFile::HEAD {
            let take = n.min(SnapshotFile::HEAD - head.len());
            head.extend_from_slice(&buf[..take]);
        }
        hasher.update(&buf[..n]);
        done += n as u64;
    }
    let mut last = Vec::with_capacity(32);
    reader.read_to_end(&mut last).map_err(io(path))?;
    if done + last.len() as u64 != len {
        return Err(truncated());
    }
    let trailer = if len >= 32 {
        let mut t = [0u8; 32];
        t.copy_from_slice(&last);
        Some((hasher.finalize().into(), t))
    } else {
        head.extend_from_slice(&last);
        None
    };
    Ok(SnapshotFile {
        label: path.label(),
        len,
        head,
        trailer,
    })
}

/// Read one file named on the command line: its bytes, labelled with the path.
pub fn read_input(path: &Path) -> Result<crate::inputs::InputFile, InputError> {
    input_file(path)
}

/// The kubeadm CA files of a pki directory (`/etc/kubernetes/pki` layout), each as
/// (which CA, certificate, key): `ca.*`, `etcd/ca.*`, `front-proxy-ca.*`.
pub fn read_kubeadm_cas(
    pki: &Path,
) -> Result<
    Vec<(
        &'static str,
        crate::inputs::InputFile,
        crate::inputs::InputFile,
    )>,
    InputError,
> {
    require_pki_dir(pki)?;
    [
        ("Kubernetes CA", "ca.crt", "ca.key"),
        ("etcd CA", "etcd/ca.crt", "etcd/ca.key"),
        ("front-proxy CA", "front-proxy-ca.crt", "front-proxy-ca.key"),
    ]
    .into_iter()
    .map(|(role, crt, key)| {
        Ok((
            role,
            input_file(&pki.join(crt))?,
            input_file(&pki.join(key))?,
        ))
    })
    .collect()
}

/// Read an input file's bytes: a regular file of at most `kind.cap()` bytes.
pub fn read_bytes(path: &Path, kind: InputKind) -> Result<Vec<u8>, InputError> {
    read_input_bytes(path, None, kind)
}

/// Read a file of the repository whose root is `root`: inside it (links resolved), a
/// regular file, at most `kind.cap()` bytes.
pub fn read_repository_bytes(
    path: &Path,
    root: &Path,
    kind: InputKind,
) -> Result<Vec<u8>, InputError> {
    let root_c = canonical_dir(root)?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        confine(parent, &root_c)?;
    }
    read_input_bytes(path, Some(&root_c), kind)
}

/// [`read_repository_bytes`] as UTF-8 text.
pub fn read_repository_text(
    path: &Path,
    root: &Path,
    kind: InputKind,
) -> Result<String, InputError> {
    utf8(path, read_repository_bytes(path, root, kind)?)
}

/// Template overrides from a directory on disk ([`cluster::load_templates`]): every file
/// read resolves inside the repository `root` for a repository's own `templates/`, inside
/// the directory itself when it was named on the command line (`explicit`: it must then
/// exist).
pub fn load_templates(
    dir: &Path,
    root: &Path,
    explicit: bool,
) -> Result<(Vec<TemplateOverride>, Vec<Digest256>), InputError> {
    let tree = match explicit {
        true => DiskTree::new(dir)?,
        false if std::fs::symlink_metadata(dir).is_err() => return Ok(Default::default()),
        false => DiskTree::new(root)?,
    };
    cluster::load_templates(&tree, dir, root, explicit)
}

/// Overlays already read, shared by the clusters of one run: each overlay directory is read
/// and parsed once (keyed by the repository root as spelled and the overlay's
/// repository-relative directory, so messages do not depend on which cluster came first).
#[derive(Debug, Default)]
pub struct OverlayCache {
    loaded: Mutex<HashMap<PathBuf, Arc<LoadedOverlay>>>,
}

#[derive(Debug)]
struct LoadedOverlay {
    overlay: Arc<Overlay>,
    file: String,
    bases: Vec<String>,
    digests: Vec<Digest256>,
    /// The bytes of its `overlay.yaml` and of the files it names, once per reference.
    referenced: u64,
}

/// The bytes of one overlay's files (`overlay.yaml`, each reference to a file), at most.
pub const MAX_OVERLAY_REFERENCED: u64 = 16 << 20;
/// The bytes of one cluster's overlays (as [`MAX_OVERLAY_REFERENCED`] counts), at most.
pub const MAX_OVERLAY_SET: u64 = 32 << 20;

/// A cluster's overlays, in the order they apply, and the digests of every file read for them.
#[derive(Debug, Clone, Default)]
pub struct LoadedOverlays {
    /// Bases first, depth-first, each overlay once.
    pub overlays: Vec<Arc<Overlay>>,
    /// `overlay.yaml`s, resource files and patch files (repository-relative paths).
    pub digests: Vec<Digest256>,
}

fn overlay_error(file: &str, field: &str, message: String) -> InputError {
    InputError::Overlay(OverlayError::Invalid {
        file: file.to_string(),
        field: field.to_string(),
        message,
    })
}

fn shown(root: &Path) -> String {
    let s = root.label();
    if s.is_empty() {
        ".".into()
    } else {
        s
    }
}

/// Resolve `path` (relative, `/`-separated) against the repository-relative directory `base`,
/// lexically; refuses absolute paths and paths that climb above the repository root.
fn join_rel(root: &Path, base: &str, path: &str) -> Result<String, String> {
    if path.trim().is_empty() {
        return Err("must not be empty".into());
    }
    if path.starts_with('/') || path.contains('\\') || path.contains(':') {
        return Err(format!(
            "`{path}` must be a relative path (with `/`), relative to {}",
            if base.is_empty() {
                "the repository root".to_string()
            } else {
                format!("`{base}`")
            }
        ));
    }
    let mut parts: Vec<&str> = base.split('/').filter(|s| !s.is_empty()).collect();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(format!(
                        "`{path}` reaches outside the repository root `{}`; overlays and the files \
                         they name must live inside the repository",
                        shown(root)
                    ));
                }
            }
            s => parts.push(s),
        }
    }
    Ok(parts.join("/"))
}

/// The message for a path a symbolic link takes out of the repository root.
fn outside_root(path: &str, root: &str) -> String {
    format!(
        "`{path}` resolves outside the repository root `{}` (through a symbolic link)",
        if root.is_empty() { "." } else { root }
    )
}

fn is_outside(e: &InputError) -> bool {
    matches!(
        e,
        InputError::Outside { .. } | InputError::OutsideRepoRoot { .. }
    )
}

impl OverlayCache {
    fn get(
        &self,
        tree: &dyn Tree,
        root: &Path,
        rel: &str,
        from_file: &str,
        field: &str,
    ) -> Result<Arc<LoadedOverlay>, InputError> {
        let key = root.join(rel);
        if let Some(hit) = self.loaded.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(hit);
        }
        let loaded = Arc::new(load_overlay(tree, root, rel, from_file, field)?);
        if let Ok(mut m) = self.loaded.lock() {
            m.insert(key, loaded.clone());
        }
        Ok(loaded)
    }
}

/// One overlay directory (`rel`, repository-relative) of the repository at `root` in
/// `tree`, for the file and field that name it.
fn load_overlay(
    tree: &dyn Tree,
    root: &Path,
    rel: &str,
    from_file: &str,
    field: &str,
) -> Result<LoadedOverlay, InputError> {
    let dir = root.join(rel);
    let path = dir.join(OVERLAY_FILE);
    let refused = |m: String| overlay_error(from_file, field, m);
    let not_an_overlay = || {
        refused(format!(
            "`{}` is not an overlay: expected the file {}",
            tree.label(&dir),
            tree.label(&path)
        ))
    };
    // A directory link out of the tree is refused against the field that names it; then
    // the file itself, which may be a link out even when its directory is not. Absent is
    // "not an overlay"; present but not a file (a FIFO, a directory) is said as what it is.
    match tree.confine(&dir) {
        Err(e) if is_outside(&e) => {
            return Err(refused(outside_root(&tree.label(&dir), &tree.label(root))))
        }
        Err(e) if tree::is_absent(&e) => return Err(not_an_overlay()),
        r => r?,
    }
    let text = match tree::read_text(tree, &path, InputKind::Overlay) {
        Ok(Some(text)) => text,
        Ok(None) => return Err(not_an_overlay()),
        Err(e) if is_outside(&e) => {
            return Err(refused(outside_root(&tree.label(&path), &tree.label(root))))
        }
        Err(e) => return Err(e),
    };
    overlay_from_text(root, rel, tree.label(&path), &text, |frel, p| {
        let full = root.join(frel);
        match tree::read_text(tree, &full, InputKind::Overlay) {
            Ok(Some(text)) => Ok((tree.label(&full), text)),
            Ok(None) => Err(OverlayRead::Refused(format!(
                "{}: no such file",
                tree.label(&full)
            ))),
            Err(e) if is_outside(&e) => {
                Err(OverlayRead::Refused(outside_root(p, &tree.label(root))))
            }
            Err(e) => Err(OverlayRead::Input(e)),
        }
    })
}

/// Why a file an overlay names could not be read.
enum OverlayRead {
    /// Refused by the loader's rules (said against the overlay's field).
    Refused(String),
    /// Not readable as an input.
    Input(InputError),
}

/// An overlay from its `overlay.yaml` text (`file` names it; `rel` is its
/// repository-relative directory), reading the files it names with `read_file(repository-relative path, the
/// path as written)` → (label, text).
fn overlay_from_text(
    root: &Path,
    rel: &str,
    file: String,
    text: &str,
    mut read_file: impl FnMut(&str, &str) -> Result<(String, String), OverlayRead>,
) -> Result<LoadedOverlay, InputError> {
    let value = parse_yaml_file(&file, text)?;
    let spec = OverlayFile::from_value(&file, value)?;
    let mut digests = vec![Digest256 {
        path: rel_join(rel, OVERLAY_FILE),
        sha256: sha256_hex(text.as_bytes()),
    }];
    // Each file is read and parsed once (per use: a resources stream or a patch), however
    // often it is named; each reference holds a copy, so each counts against the cap.
    type Parsed = (String, u64, Vec<serde_json::Value>);
    let mut cache: HashMap<(String, bool), Parsed> = HashMap::new();
    let mut referenced = text.len() as u64;
    let mut load = |field: &str, p: &str, stream: bool| -> Result<Parsed, InputError> {
        let key = (
            join_rel(root, rel, p).map_err(|m| overlay_error(&file, field, m))?,
            stream,
        );
        if !cache.contains_key(&key) {
            let (label, text) = read_file(&key.0, p).map_err(|e| match e {
                OverlayRead::Refused(m) => overlay_error(&file, field, m),
                OverlayRead::Input(e) => e,
            })?;
            let sha256 = sha256_hex(text.as_bytes());
            digests.push(Digest256 {
                path: key.0.clone(),
                sha256,
            });
            let docs = match stream {
                true => yaml::parse_stream(&text).map_err(|e| InputError::Yaml {
                    file: label.clone(),
                    message: e.message,
                })?,
                false => vec![parse_yaml_file(&label, &text)?],
            };
            cache.insert(key.clone(), (label, text.len() as u64, docs));
        }
        referenced = referenced.saturating_add(cache.get(&key).map_or(0, |c| c.1));
        if referenced > MAX_OVERLAY_REFERENCED {
            let message = format!(
                "`{p}` brings the files this overlay names past {} MiB (each counted once per \
                 reference, as each holds a copy): name a file once, or split the overlay",
                MAX_OVERLAY_REFERENCED >> 20
            );
            return Err(overlay_error(&file, field, message));
        }
        Ok(cache.get(&key).cloned().unwrap_or_default())
    };
    let mut resources = Vec::new();
    for (j, r) in spec.resources.iter().enumerate() {
        let (label, _, docs) = load(&format!("resources[{j}]"), r, true)?;
        resources.extend(docs.into_iter().map(|d| (label.clone(), d)));
    }
    let mut patch_files: Vec<Option<(String, serde_json::Value)>> = Vec::new();
    for (i, p) in spec.patches.iter().enumerate() {
        patch_files.push(match &p.path {
            Some(pp) if p.patch.is_none() => {
                let (label, _, mut docs) = load(&format!("patches[{i}].path"), pp, false)?;
                Some((label, docs.pop().unwrap_or_default()))
            }
            _ => None,
        });
    }
    let overlay = crate::overlay::build(&file, &spec, resources, |i, _| {
        patch_files
            .get_mut(i)
            .and_then(Option::take)
            .ok_or_else(|| OverlayError::Invalid {
                file: file.clone(),
                field: format!("patches[{i}].path"),
                message: "could not be read".into(),
            })
    })?;
    Ok(LoadedOverlay {
        overlay: Arc::new(overlay),
        file,
        bases: spec.bases,
        digests,
        referenced,
    })
}

fn rel_join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// A cluster's overlays on disk (`spec.overlays`, each after its bases, depth-first, each
/// once), read through `cache`: [`load_overlays_in`] over the disk below its repository root.
pub fn load_overlays(c: &ClusterInput, cache: &OverlayCache) -> Result<LoadedOverlays, InputError> {
    load_overlays_in(&DiskTree::new(&c.root)?, c, cache)
}

/// A cluster's overlays from `tree` (the one it was read from), each after its bases,
/// depth-first, each once, read through `cache` (one per tree). Errors name the file and
/// field that point at the bad overlay.
pub fn load_overlays_in(
    tree: &dyn Tree,
    c: &ClusterInput,
    cache: &OverlayCache,
) -> Result<LoadedOverlays, InputError> {
    resolve_overlays(c, &|rel, from_file, field| {
        cache.get(tree, &c.root, rel, from_file, field)
    })
}

/// One overlay directory (repository-relative), loaded for the file and field that name it.
type OverlayGet<'a> = dyn Fn(&str, &str, &str) -> Result<Arc<LoadedOverlay>, InputError> + 'a;

/// [`load_overlays`] with the overlays read by `get`.
fn resolve_overlays(c: &ClusterInput, get: &OverlayGet) -> Result<LoadedOverlays, InputError> {
    let mut r = Resolver {
        root: &c.root,
        get,
        out: LoadedOverlays::default(),
        done: Vec::new(),
        stack: Vec::new(),
        referenced: 0,
    };
    for (i, o) in c.config.spec.overlays.iter().enumerate() {
        let field = format!("spec.overlays[{i}]");
        let rel = join_rel(&c.root, "", o).map_err(|m| overlay_error(&c.file, &field, m))?;
        r.visit(rel, &c.file, &field)?;
    }
    Ok(r.out)
}

struct Resolver<'a> {
    root: &'a Path,
    get: &'a OverlayGet<'a>,
    out: LoadedOverlays,
    done: Vec<String>,
    stack: Vec<String>,
    /// The bytes the overlays visited so far reference.
    referenced: u64,
}

impl Resolver<'_> {
    fn visit(&mut self, rel: String, from_file: &str, field: &str) -> Result<(), InputError> {
        let show = |r: &str| {
            if r.is_empty() {
                ".".to_string()
            } else {
                r.to_string()
            }
        };
        if let Some(pos) = self.stack.iter().position(|s| *s == rel) {
            let cycle: Vec<String> = self.stack[pos..]
                .iter()
                .chain(std::iter::once(&rel))
                .map(|s| show(s))
                .collect();
            return Err(overlay_error(
                from_file,
                field,
                format!("overlays form a cycle: {}", cycle.join(" -> ")),
            ));
        }
        if self.done.contains(&rel) {
            return Ok(());
        }
        let lo = (self.get)(&rel, from_file, field)?;
        self.stack.push(rel.clone());
        for (j, b) in lo.bases.iter().enumerate() {
            let bfield = format!("bases[{j}]");
            let brel =
                join_rel(self.root, &rel, b).map_err(|m| overlay_error(&lo.file, &bfield, m))?;
            if brel.is_empty() || brel == rel || rel.starts_with(&format!("{brel}/")) {
                return Err(overlay_error(
                    &lo.file,
                    &bfield,
                    format!(
                        "`{b}` (`{}`) is at or above this overlay (`{}`): a base may not contain \
                         the overlay that builds on it (a cycle)",
                        show(&brel),
                        show(&rel)
                    ),
                ));
            }
            self.visit(brel, &lo.file, &bfield)?;
        }
        self.stack.pop();
        self.done.push(rel);
        self.referenced = self.referenced.saturating_add(lo.referenced);
        if self.referenced > MAX_OVERLAY_SET {
            let message = format!(
                "with this overlay, the files of this cluster's overlays pass {} MiB (each \
                 counted once per reference), held in memory together: use fewer or smaller overlays",
                MAX_OVERLAY_SET >> 20
            );
            return Err(overlay_error(from_file, field, message));
        }
        self.out.overlays.push(lo.overlay.clone());
        self.out.digests.extend(lo.digests.iter().cloned());
        Ok(())
    }
}

// The file names of a cluster directory, which the loader reads and the writer writes.

/// Name of the encrypted bundle in a cluster directory.
pub const SECRETS_FILE: &str = "secrets.age";
/// Name of the lock file in each cluster directory.
pub const LOCK_FILE: &str = "capstan.lock";
/// Name of the kustomization in each cluster directory.
pub const KUSTOMIZATION: &str = "kustomization.yaml";
/// Directory of sealed files inside a cluster directory.
pub const SEALED_DIR: &str = "secrets";
/// Sub-directory for Secrets applied to the workload (kubeadm) cluster.
pub const WORKLOAD_DIR: &str = "workload";
/// Directory of SopsSecret files inside a cluster's `secrets/`.
pub const OPERATOR_DIR: &str = "operator";

// Where age identities are named (read by [`read_identity_text`]).

/// Environment variable naming an age identity file (capstan's own).
pub const ENV_AGE_KEY_FILE: &str = "CAPSTAN_AGE_KEY_FILE";
/// SOPS's environment variable naming an age keys file.
pub const ENV_SOPS_AGE_KEY_FILE: &str = "SOPS_AGE_KEY_FILE";
/// SOPS's environment variable holding age identities.
pub const ENV_SOPS_AGE_KEY: &str = "SOPS_AGE_KEY";
/// SOPS's environment variable holding a command whose output is age identities.
pub const ENV_SOPS_AGE_KEY_CMD: &str = "SOPS_AGE_KEY_CMD";

/// One input file: a label (its path) and its bytes.
pub struct InputFile {
    /// The path, for messages.
    pub label: String,
    /// The content (zeroized on drop: key files are secret).
    pub bytes: zeroize::Zeroizing<Vec<u8>>,
}

/// The kubeadm files an import reads (`pki` layout as in `/etc/kubernetes/pki`).
pub struct KubeadmFiles {
    /// `ca.crt`.
    pub ca_crt: InputFile,
    /// `ca.key`.
    pub ca_key: InputFile,
    /// `etcd/ca.crt`.
    pub etcd_ca_crt: InputFile,
    /// `etcd/ca.key`.
    pub etcd_ca_key: InputFile,
    /// `front-proxy-ca.crt`.
    pub front_proxy_ca_crt: InputFile,
    /// `front-proxy-ca.key`.
    pub front_proxy_ca_key: InputFile,
    /// `sa.key`.
    pub sa_key: InputFile,
    /// The kube-apiserver static pod manifest.
    pub apiserver_manifest: InputFile,
    /// The kubeadm ClusterConfiguration.
    pub kubeadm_config: InputFile,
    /// The EncryptionConfiguration, when the cluster has one.
    pub encryption_config: Option<InputFile>,
    /// The kubelets' KubeletConfiguration (the `kubelet-config` ConfigMap), when given.
    pub kubelet_config: Option<InputFile>,
    /// The kube-controller-manager static pod manifest, when given.
    pub controller_manager_manifest: Option<InputFile>,
    /// The kube-scheduler static pod manifest, when given.
    pub scheduler_manifest: Option<InputFile>,
}

/// A template that replaces a built-in one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateOverride {
    /// Template name, e.g. `v1beta2/cluster.yaml`.
    pub name: String,
    /// Where it was read from, for messages.
    pub origin: String,
    /// Its source text.
    pub source: String,
}

/// One sealed file as read from disk.
#[derive(Debug, Clone)]
pub struct SealedFile {
    /// Path relative to the cluster directory (`secrets/lab-f-talos.yaml`).
    pub rel: String,
    /// The path as the user can find it.
    pub path: String,
    /// Its text (ciphertext and public metadata only).
    pub text: String,
    /// sha256 (lowercase hex) of `text`, when the reader was asked for it.
    pub sha256: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file named by many patches is read and parsed once; every reference counts its
    /// size, so 600 references to a 2.5 MB patch are refused (they took ~3.7 GB when each
    /// was read and parsed again), naming the field past the cap.
    #[test]
    fn overlay_files_are_read_once_and_capped_per_reference() {
        let overlay = |n: usize| {
            let patches: String = (0..n)
                .map(|_| {
                    "- {target: {kind: ConfigMap}, type: strategic, path: p.yaml}\n".to_string()
                })
                .collect();
            format!("apiVersion: capstan.dev/v1alpha1\nkind: Overlay\nresources: [r.yaml, r.yaml]\npatches:\n{patches}")
        };
        let mut reads = 0;
        let mut read = |frel: &str, _: &str| {
            reads += 1;
            let text = match frel {
                "o/r.yaml" => "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n".to_string(),
                _ => format!("data:\n{}", "- v\n".repeat(1000)),
            };
            Ok((frel.to_string(), text))
        };
        let root = Path::new("/nonexistent");
        let loaded =
            overlay_from_text(root, "o", "o/overlay.yaml".into(), &overlay(3), &mut read).unwrap();
        assert_eq!(loaded.overlay.patches.len(), 3);
        assert_eq!(loaded.overlay.resources.len(), 2);
        assert_eq!(
            loaded.digests.len(),
            3,
            "overlay.yaml, r.yaml, p.yaml once each"
        );
        assert_eq!(reads, 2);
        let big = "- vvvvvvvvvvvvvvvvvvvvvv\n".repeat(3 << 20 >> 5);
        let mut read = |frel: &str, _: &str| Ok((frel.to_string(), format!("data:\n{big}")));
        let started = std::time::Instant::now();
        let e = overlay_from_text(root, "o", "o/overlay.yaml".into(), &overlay(600), &mut read)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.starts_with("o/overlay.yaml: patches[4].path: `p.yaml` brings the files this overlay names past 16 MiB"),
            "{e}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
    }

    #[test]
    fn inputs_are_hashed_only_when_wanted() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/gitops/clusters/lab-f");
        let with = load_cluster_with(&dir, Digests::Wanted).unwrap();
        let without = load_cluster_with(&dir, Digests::NotWanted).unwrap();
        let paths: Vec<&str> = with.digests.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "clusters/lab-f/cluster.yaml",
                "clusters/lab-f/secrets.age",
                "clusters/lab-f/secrets/lab-f-ca.yaml",
                "clusters/lab-f/secrets/lab-f-talos.yaml",
                "clusters/lab-f/secrets/lab-f-vsphere.yaml",
            ]
        );
        let text = std::fs::read(dir.join("cluster.yaml")).unwrap();
        assert_eq!(with.digests[0].sha256, sha256_hex(&text));
        assert!(with.sealed.iter().all(|s| s.sha256.is_some()));
        // Without: nothing listed, no sealed digest, but the bundle digest the sealed
        // files' checks compare with is the same.
        assert!(without.digests.is_empty());
        assert!(without.sealed.iter().all(|s| s.sha256.is_none()));
        assert!(without.secrets_age_sha256.is_some());
        assert_eq!(without.secrets_age_sha256, with.secrets_age_sha256);
        assert_eq!(without.config, with.config);
    }

    #[test]
    fn discovery_and_roots() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        for c in ["b", "a"] {
            std::fs::create_dir_all(root.join("clusters").join(c)).unwrap();
            std::fs::write(root.join("clusters").join(c).join(CLUSTER_FILE), "x").unwrap();
        }
        let found = discover(root).unwrap();
        assert_eq!(
            found,
            vec![root.join("clusters/a"), root.join("clusters/b")]
        );
        assert_eq!(repo_root(&found[0]), root);
        assert_eq!(
            discover(&root.join("clusters/a")).unwrap(),
            vec![root.join("clusters/a")]
        );
        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(
            discover(empty.path()),
            Err(InputError::NoClusters { .. })
        ));
    }

    #[test]
    fn template_dir_rules() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path().join("templates");
        std::fs::create_dir_all(t.join("v1beta1")).unwrap();
        std::fs::write(t.join("v1beta1/cluster.yaml"), "a: 1\n").unwrap();
        std::fs::write(t.join("README.md"), "docs").unwrap();
        let (o, d) = load_templates(&t, tmp.path(), false).unwrap();
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].name, "v1beta1/cluster.yaml");
        assert_eq!(d[0].path, "templates/v1beta1/cluster.yaml");
        std::fs::write(t.join("stray.txt"), "x").unwrap();
        assert!(matches!(
            load_templates(&t, tmp.path(), false),
            Err(InputError::NotATemplate { .. })
        ));
    }
}
