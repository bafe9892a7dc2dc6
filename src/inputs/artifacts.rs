//! Directories other tools wrote, read back as inputs: a rendered output (`render -o`, for
//! `diff`) and a `clusterctl move --to-directory` directory (for `backup push`), each
//! confined to itself, regular files only, every cost capped.

use super::*;

/// One cluster of a rendered output directory: its name and objects.
pub type RenderedCluster = (String, Vec<crate::resource::Resource>);

/// The clusters of a rendered output directory (`render -o`): `dir` itself when it holds a
/// `capstan.lock`, else each `dir/*/` that does; sorted by cluster name. Each cluster's
/// objects come in its `kustomization.yaml` order (else file-name order), a single-document
/// file keeping its text (so SOPS files stay verbatim). `None` when `dir` is no render.
pub fn read_rendered(dir: &Path) -> Result<Option<Vec<RenderedCluster>>, InputError> {
    let dir_c = canonical_dir(dir)?;
    let read = |p: &Path| read_repo_text(p, &dir_c, InputKind::Yaml);
    let one = |d: &Path| -> Result<RenderedCluster, InputError> {
        confine(d, &dir_c)?;
        let lock_path = d.join(LOCK_FILE);
        let lock = yaml::parse_one(&read(&lock_path)?).map_err(|e| InputError::Yaml {
            file: lock_path.label(),
            message: e.message,
        })?;
        let name = lock
            .get("cluster")
            .and_then(serde_json::Value::as_str)
            .map(str::to_string)
            .or_else(|| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default();
        let kpath = d.join(KUSTOMIZATION);
        let mut files: Vec<PathBuf> = Vec::new();
        if kpath.is_file() {
            let k = yaml::parse_one(&read(&kpath)?).map_err(|e| InputError::Yaml {
                file: kpath.label(),
                message: e.message,
            })?;
            if let Some(list) = k.get("resources").and_then(serde_json::Value::as_array) {
                for f in list.iter().filter_map(serde_json::Value::as_str) {
                    // capstan writes plain file names; anything else is not its bundle.
                    if f.is_empty() || f.contains('/') || f.contains('\\') || f.starts_with('.') {
                        return Err(InputError::Yaml {
                            file: kpath.label(),
                            message: format!(
                                "resources: `{f}` is not a file of this directory (capstan writes plain file names)"
                            ),
                        });
                    }
                    files.push(d.join(f));
                }
            }
        }
        if files.is_empty() {
            for entry in std::fs::read_dir(d).map_err(io(d))? {
                let p = entry.map_err(io(d))?.path();
                let n = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if p.is_file() && n.ends_with(".yaml") && n != KUSTOMIZATION {
                    files.push(p);
                }
            }
            files.sort();
        }
        let mut out = Vec::with_capacity(files.len());
        for f in files {
            let label = f.label();
            let text = read(&f)?;
            let docs = parse_documents(&label, &text)?;
            let single = docs.len() == 1;
            for (origin, value) in docs {
                out.push(crate::resource::Resource {
                    value,
                    origin,
                    raw: single.then(|| crate::resource::Verbatim::new(text.clone())),
                    template: false,
                });
            }
        }
        Ok((name, out))
    };
    if dir.join(crate::inputs::LOCK_FILE).is_file() {
        return Ok(Some(vec![one(dir)?]));
    }
    if !dir.is_dir() {
        return Ok(None);
    }
    let mut subdirs = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let p = entry.map_err(io(dir))?.path();
        if p.join(crate::inputs::LOCK_FILE).is_file() {
            subdirs.push(p);
        }
    }
    if subdirs.is_empty() {
        return Ok(None);
    }
    subdirs.sort();
    let mut out = subdirs
        .iter()
        .map(|d| one(d))
        .collect::<Result<Vec<_>, _>>()?;
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Some(out))
}

/// At most this many files in a `clusterctl move` directory.
pub const MAX_MOVED_FILES: usize = 100_000;
/// At most this many bytes in one file of a `clusterctl move` directory.
pub const MAX_MOVED_FILE: u64 = 16 << 20;

/// One file of a `clusterctl move --to-directory` directory: its name and bytes (secret:
/// the objects include kubeconfigs and CA keys; zeroized on drop).
pub struct MovedFile {
    /// The file name (`Cluster_lab-f_lab-f.yaml`).
    pub name: String,
    /// Its bytes.
    pub bytes: zeroize::Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for MovedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MovedFile({}, {} bytes)", self.name, self.bytes.len())
    }
}

/// The files of a `clusterctl move --to-directory DIR` directory, listed to be read one
/// at a time ([`MovedDirectory::read`]): every regular file directly in `dir` (no links, no
/// sub-directories), sorted by name, at most [`MAX_MOVED_FILES`] of them.
#[derive(Debug)]
pub struct MovedDirectory {
    dir: PathBuf,
    dir_c: PathBuf,
    /// The file names, sorted.
    pub names: Vec<String>,
}

impl MovedDirectory {
    /// List `dir`.
    pub fn open(dir: &Path) -> Result<MovedDirectory, InputError> {
        let meta = std::fs::symlink_metadata(dir).map_err(io(dir))?;
        if !meta.is_dir() {
            return Err(InputError::NotADirectory {
                path: dir.label(),
                what: "a `clusterctl move --to-directory` directory",
            });
        }
        let dir_c = canonical_dir(dir)?;
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io(dir))? {
            let entry = entry.map_err(io(dir))?;
            if names.len() >= MAX_MOVED_FILES {
                return Err(InputError::TooLarge {
                    path: dir.label(),
                    cap: MAX_MOVED_FILES as u64,
                    what: "a `clusterctl move` directory (files)",
                    raise: "",
                });
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let t = entry.file_type().map_err(io(&entry.path()))?;
            if !t.is_file() {
                return Err(InputError::NotRegular {
                    path: entry.path().label(),
                    found: file_type_name(t),
                });
            }
            names.push(name);
        }
        names.sort();
        Ok(MovedDirectory {
            dir: dir.to_path_buf(),
            dir_c,
            names,
        })
    }

    /// The bytes of file `name`, at most [`MAX_MOVED_FILE`]: a link swapped in after the
    /// listing must still stay inside the directory.
    pub fn read(&self, name: &str) -> Result<zeroize::Zeroizing<Vec<u8>>, InputError> {
        let path = self.dir.join(name);
        Ok(zeroize::Zeroizing::new(read_input_bytes(
            &path,
            Some(&self.dir_c),
            InputKind::Moved,
        )?))
    }

    /// The error for a directory of more than [`InputKind::Backup`]'s cap in all.
    pub fn too_large(&self) -> InputError {
        InputError::TooLarge {
            path: self.dir.label(),
            cap: InputKind::Backup.cap(),
            what: "a `clusterctl move` directory",
            raise: "",
        }
    }
}

/// Read what `clusterctl move --to-directory DIR` wrote: every regular file directly in
/// `dir` (no links, no sub-directories), sorted by name, each at most [`MAX_MOVED_FILE`]
/// bytes, at most [`MAX_MOVED_FILES`] of them and [`InputKind::Backup`]'s cap in all.
pub fn read_moved_directory(dir: &Path) -> Result<Vec<MovedFile>, InputError> {
    let moved = MovedDirectory::open(dir)?;
    let mut total = 0u64;
    let mut out = Vec::with_capacity(moved.names.len());
    for name in &moved.names {
        let bytes = moved.read(name)?;
        total += bytes.len() as u64;
        if total > InputKind::Backup.cap() {
            return Err(moved.too_large());
        }
        out.push(MovedFile {
            name: name.clone(),
            bytes,
        });
    }
    Ok(out)
}
