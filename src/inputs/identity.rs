//! Where age identities come from: `--identity`, capstan's variable, and every source sops
//! reads (its variables, its key command, its default file).

use super::{read_input_text, InputError, InputKind, ENV_SOPS_AGE_KEY_CMD};
use crate::printable::Label as _;
use std::path::{Path, PathBuf};

/// Where age identities come from: `--identity FILE`, else `CAPSTAN_AGE_KEY_FILE`, else
/// what sops reads, all of it, as sops does (getsops/sops v3 `age/keysource.go`,
/// `loadIdentities`: every source that is set, their identities together):
/// `SOPS_AGE_KEY` (the identities themselves), `SOPS_AGE_KEY_FILE`, the output of
/// `SOPS_AGE_KEY_CMD` (split as a shell splits words, `shlex`, and run without a shell, as
/// sops runs it; at most 1 MiB of output), and sops' default file,
/// `$XDG_CONFIG_HOME/sops/age/keys.txt`, else `$HOME/.config/sops/age/keys.txt`
/// (`$HOME/Library/Application Support/…` on macOS), when it exists. Returns a label for
/// messages and the text; the text is secret and zeroized when dropped.
pub fn read_identity_text(
    flag: Option<&Path>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(String, zeroize::Zeroizing<String>), InputError> {
    use crate::inputs::{
        ENV_AGE_KEY_FILE, ENV_SOPS_AGE_KEY, ENV_SOPS_AGE_KEY_CMD, ENV_SOPS_AGE_KEY_FILE,
    };
    let file = |p: &Path| -> Result<zeroize::Zeroizing<String>, InputError> {
        Ok(zeroize::Zeroizing::new(read_input_text(
            p,
            InputKind::Identity,
        )?))
    };
    if let Some(p) = flag {
        return Ok((p.label(), file(p)?));
    }
    let set = |var: &str| env(var).filter(|v| !v.is_empty());
    if let Some(p) = set(ENV_AGE_KEY_FILE) {
        return Ok((
            format!("{p} (from ${ENV_AGE_KEY_FILE})"),
            file(Path::new(&p))?,
        ));
    }
    let mut labels = Vec::new();
    let mut text = zeroize::Zeroizing::new(String::new());
    let mut add = |label: String, part: &str| {
        labels.push(label);
        text.push_str(part);
        text.push('\n');
    };
    if let Some(t) = set(ENV_SOPS_AGE_KEY).map(zeroize::Zeroizing::new) {
        add(format!("${ENV_SOPS_AGE_KEY}"), &t);
    }
    if let Some(p) = set(ENV_SOPS_AGE_KEY_FILE) {
        add(
            format!("{p} (from ${ENV_SOPS_AGE_KEY_FILE})"),
            &file(Path::new(&p))?,
        );
    }
    if let Some(cmd) = set(ENV_SOPS_AGE_KEY_CMD) {
        add(format!("${ENV_SOPS_AGE_KEY_CMD}"), &identity_command(&cmd)?);
    }
    let default = set("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| {
            set("HOME").map(|h| {
                if cfg!(target_os = "macos") {
                    Path::new(&h).join("Library/Application Support")
                } else {
                    Path::new(&h).join(".config")
                }
            })
        })
        .map(|d| d.join("sops/age/keys.txt"));
    if let Some(p) = default.filter(|p| p.exists()) {
        let label = format!("{} (sops' default)", p.label());
        add(label, &file(&p)?);
    }
    if labels.is_empty() {
        return Err(InputError::NoIdentity);
    }
    Ok((labels.join(", "), text))
}

/// The output of `SOPS_AGE_KEY_CMD`: split into words as a POSIX shell would (no shell
/// runs it), its stdout at most [`InputKind::Identity`]'s cap; its stderr goes to the
/// terminal (a pinentry or `pass` prompt), its output nowhere but the returned text.
fn identity_command(cmd: &str) -> Result<zeroize::Zeroizing<String>, InputError> {
    use std::io::Read as _;
    let var = ENV_SOPS_AGE_KEY_CMD;
    let fail = |message: String| InputError::IdentityCommand { var, message };
    let words = shlex::split(cmd)
        .filter(|w| !w.is_empty())
        .ok_or_else(|| fail("not a command (unbalanced quotes, or empty)".into()))?;
    let mut child = std::process::Command::new(&words[0])
        .args(&words[1..])
        .stdin(std::process::Stdio::inherit())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .map_err(|e| {
            fail(format!(
                "`{}` could not be started: {e}",
                crate::printable::line(&words[0])
            ))
        })?;
    let cap = InputKind::Identity.cap();
    let mut out = zeroize::Zeroizing::new(Vec::with_capacity(cap as usize + 1));
    if let Some(stdout) = child.stdout.take() {
        stdout
            .take(cap + 1)
            .read_to_end(&mut out)
            .map_err(|e| fail(format!("reading its output: {e}")))?;
    }
    if out.len() as u64 > cap {
        let _ = child.kill();
        let _ = child.wait();
        return Err(fail(format!("it wrote more than {cap} bytes")));
    }
    let status = child
        .wait()
        .map_err(|e| fail(format!("waiting for it: {e}")))?;
    if !status.success() {
        return Err(fail(format!(
            "`{}` failed ({status})",
            crate::printable::line(&words[0])
        )));
    }
    String::from_utf8(std::mem::take(&mut *out))
        .map(zeroize::Zeroizing::new)
        .map_err(|_| fail("its output is not UTF-8".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Identities as sops finds them: every source it reads, together (getsops/sops
    /// `age/keysource.go` `loadIdentities`), after `--identity` and `CAPSTAN_AGE_KEY_FILE`.
    #[test]
    fn identities_come_from_where_sops_looks() {
        let tmp = tempfile::tempdir().unwrap();
        let a = "AGE-SECRET-KEY-1AAAA";
        let b = "AGE-SECRET-KEY-1BBBB";
        let c = "AGE-SECRET-KEY-1CCCC";
        let file = tmp.path().join("keys.txt");
        std::fs::write(&file, format!("# b\n{b}\n")).unwrap();
        let xdg = tmp.path().join("xdg");
        std::fs::create_dir_all(xdg.join("sops/age")).unwrap();
        let read = |vars: &[(&str, String)]| {
            read_identity_text(None, |k| {
                vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
            })
        };
        let fp = file.display().to_string();
        let (label, text) = read(&[
            ("SOPS_AGE_KEY", a.into()),
            ("SOPS_AGE_KEY_FILE", fp.clone()),
            ("SOPS_AGE_KEY_CMD", format!("printf '%s\\n' '{c}'")),
            ("XDG_CONFIG_HOME", xdg.display().to_string()),
        ])
        .unwrap();
        assert!(
            text.contains(a) && text.contains(b) && text.contains(c),
            "{label}"
        );
        assert_eq!(
            label,
            format!("$SOPS_AGE_KEY, {fp} (from $SOPS_AGE_KEY_FILE), $SOPS_AGE_KEY_CMD")
        );
        // CAPSTAN_AGE_KEY_FILE alone, before sops' sources.
        let (_, only) = read(&[
            ("CAPSTAN_AGE_KEY_FILE", fp.clone()),
            ("SOPS_AGE_KEY", a.into()),
        ])
        .unwrap();
        assert!(!only.contains(a) && only.contains(b));
        // sops' default file, found from XDG_CONFIG_HOME, else HOME.
        assert!(matches!(
            read(&[("XDG_CONFIG_HOME", xdg.display().to_string())]),
            Err(InputError::NoIdentity)
        ));
        std::fs::write(xdg.join("sops/age/keys.txt"), format!("{c}\n")).unwrap();
        let (label, text) = read(&[("XDG_CONFIG_HOME", xdg.display().to_string())]).unwrap();
        assert!(
            text.contains(c) && label.ends_with("keys.txt (sops' default)"),
            "{label}"
        );
        if !cfg!(target_os = "macos") {
            let home = tmp.path().join("home");
            std::fs::create_dir_all(home.join(".config/sops/age")).unwrap();
            std::fs::write(home.join(".config/sops/age/keys.txt"), format!("{a}\n")).unwrap();
            let (_, text) = read(&[("HOME", home.display().to_string())]).unwrap();
            assert!(text.contains(a));
        }
        // A command that fails, or is not one: named, its output never.
        let e = read(&[(
            "SOPS_AGE_KEY_CMD",
            "sh -c 'echo AGE-SECRET-KEY-1LEAK; exit 3'".into(),
        )])
        .unwrap_err();
        assert!(
            e.to_string().starts_with("$SOPS_AGE_KEY_CMD: `sh` failed"),
            "{e}"
        );
        assert!(!e.to_string().contains("LEAK"), "{e}");
        let e = read(&[("SOPS_AGE_KEY_CMD", "'unbalanced".into())]).unwrap_err();
        assert!(e.to_string().contains("not a command"), "{e}");
        let e = read(&[("SOPS_AGE_KEY_CMD", "/nonexistent/pass show age".into())]).unwrap_err();
        assert!(e.to_string().contains("could not be started"), "{e}");
    }
}
