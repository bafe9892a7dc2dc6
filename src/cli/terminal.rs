//! The CLI edge's shared pieces, used by `commands` and `cmd_argocd`: how a command ended
//! (its exit status), the age identities named by a flag or the environment, sealed objects
//! decrypted for output, and the files a command wrote reported on stderr.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Result;

use crate::inputs;

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

/// Replace a sealed (SOPS) object by the object it encrypts, MAC verified; objects that
/// are not sealed are left alone.
pub fn decrypt_sealed(
    res: &mut crate::resource::Resource,
    ids: &[age::x25519::Identity],
) -> Result<()> {
    if let Some(raw) = res.raw.take() {
        let file = crate::secrets::sops::SopsFile::parse(&res.origin, &raw.text)?;
        res.value = plaintext_object(file.decrypt(&res.origin, ids)?.into_tree());
    }
    Ok(())
}

/// A decrypted SOPS document as the object it stands for (without the `sops` block).
pub fn plaintext_object(mut tree: serde_json::Value) -> serde_json::Value {
    if let Some(m) = tree.as_object_mut() {
        m.remove("sops");
    }
    tree
}

/// The age identities of `--identity`, else of the environment; an error when none is given.
pub fn identities(flag: Option<&std::path::Path>) -> Result<Vec<age::x25519::Identity>> {
    optional_identities(flag)?.ok_or_else(|| inputs::InputError::NoIdentity.into())
}

/// The age identities of `--identity`, else of the environment, if any is given.
pub fn optional_identities(
    flag: Option<&std::path::Path>,
) -> Result<Option<Vec<age::x25519::Identity>>> {
    match inputs::read_identity_text(flag, |k| std::env::var(k).ok()) {
        Ok((label, text)) => Ok(Some(crate::secrets::parse_identities(&label, &text)?)),
        Err(inputs::InputError::NoIdentity) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Print, for each file a command produced, whether it was written or left unchanged.
pub fn report_written(
    dir: &std::path::Path,
    all: &[(String, Vec<u8>)],
    written: &[String],
) -> Result<()> {
    let mut err = std::io::stderr().lock();
    for (rel, _) in all {
        let what = if written.contains(rel) {
            "written"
        } else {
            "unchanged"
        };
        writeln!(err, "{}: {what}", dir.join(rel).display())?;
    }
    Ok(())
}

/// Read and decrypt the existing sealed files (all of them, workload ones included).
pub fn open_sealed(
    c: &inputs::ClusterInput,
    ids: &[age::x25519::Identity],
) -> Result<
    Vec<(
        String,
        crate::secrets::sops::SopsFile,
        crate::secrets::sops::Plain,
    )>,
> {
    let mut out = Vec::new();
    for s in inputs::read_sealed(&c.dir, true, inputs::Digests::NotWanted)? {
        let file = crate::secrets::sops::SopsFile::parse(&s.path, &s.text)?;
        let plain = file.decrypt(&s.path, ids)?;
        out.push((s.rel, file, plain));
    }
    Ok(out)
}
