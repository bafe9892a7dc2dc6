//! The man pages: one per subcommand (`capstan-render.1`, `capstan-secrets-decrypt.1`, …)
//! as clap_mangen renders them, each followed by ENVIRONMENT, EXIT STATUS and EXAMPLES
//! sections written here, so that the top page's list of `capstan-*(1)` names only pages
//! that exist.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use clap_mangen::roff::{roman, Roff};

use super::commands::Status;
use crate::printable::line;

/// `capstan man`: the top page on stdout, or every page into a directory.
pub fn man(out_dir: Option<PathBuf>, dry_run: bool) -> Result<Status> {
    let pages = pages()?;
    let Some(dir) = out_dir else {
        let top = pages.first().map(|p| p.1.as_slice()).unwrap_or_default();
        std::io::stdout().lock().write_all(top)?;
        return Ok(Status::Success);
    };
    let mut err = std::io::stderr().lock();
    if !dry_run {
        std::fs::create_dir_all(&dir).map_err(|e| {
            anyhow::anyhow!(
                "{}: cannot create the directory: {e}",
                line(&dir.display().to_string())
            )
        })?;
    }
    let mut bytes = 0usize;
    for (name, text) in &pages {
        let path = dir.join(name);
        let shown = path.display().to_string();
        if dry_run {
            writeln!(err, "{}: would write {} bytes", line(&shown), text.len())?;
        } else {
            std::fs::write(&path, text)
                .map_err(|e| anyhow::anyhow!("{}: cannot write the man page: {e}", line(&shown)))?;
            writeln!(err, "{}: written", line(&shown))?;
        }
        bytes += text.len();
    }
    writeln!(
        err,
        "{} {} man pages, {bytes} bytes{}",
        if dry_run { "would write" } else { "wrote" },
        pages.len(),
        if dry_run {
            "; nothing written (--dry-run)"
        } else {
            ""
        }
    )?;
    Ok(Status::Success)
}

/// Every page: (file name, roff), the top page first, then the subcommands depth first in
/// clap's order. Hidden subcommands and clap's `help` get no page (and are not listed).
pub fn pages() -> Result<Vec<(String, Vec<u8>)>, std::io::Error> {
    let mut cmd = crate::cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut out = Vec::new();
    collect(&cmd, &mut out)?;
    Ok(out)
}

fn collect(cmd: &clap::Command, out: &mut Vec<(String, Vec<u8>)>) -> Result<(), std::io::Error> {
    let man = clap_mangen::Man::new(cmd.clone());
    let mut text = Vec::new();
    man.render(&mut text)?;
    let name = cmd
        .get_display_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_string();
    extra_sections(&name).to_writer(&mut text)?;
    out.push((man.get_filename(), text));
    // A subcommand's page is named after its path (`capstan-secrets-decrypt`), as the
    // parent's SUBCOMMANDS section names it.
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let sub = sub
            .clone()
            .display_name(format!("{name}-{}", sub.get_name()));
        collect(&sub, out)?;
    }
    Ok(())
}

/// ENVIRONMENT, EXIT STATUS and EXAMPLES for the page `page` (`capstan-render`).
fn extra_sections(page: &str) -> Roff {
    let mut r = Roff::default();
    r.control("SH", ["ENVIRONMENT"]);
    for (var, what) in ENVIRONMENT {
        r.control("TP", []);
        r.text([roman(*var)]);
        r.text([roman(*what)]);
    }
    r.control("SH", ["EXIT STATUS"]);
    for (code, what) in [
        ("0", "Success."),
        (
            "1",
            "Findings: differences (diff), blocking findings (check), something missing or \
             mismatched (backup check, restore check). Commands without findings never exit 1.",
        ),
        (
            "2",
            "An error (invalid input, a refused write, a usage error); the message names the \
             file and field and what to do.",
        ),
    ] {
        r.control("TP", []);
        r.text([roman(code)]);
        r.text([roman(what)]);
    }
    r.control("SH", ["EXAMPLES"]);
    let examples = EXAMPLES
        .iter()
        .filter(|(p, _)| *p == page)
        .map(|(_, e)| *e)
        .collect::<Vec<_>>();
    let fallback = format!("{} --help", page.replace('-', " "));
    let list: Vec<&str> = if examples.is_empty() {
        vec![fallback.as_str()]
    } else {
        examples
    };
    for e in list {
        r.control("TP", []);
        r.text([roman(e)]);
    }
    r
}

/// The environment variables capstan reads (README "Secrets", "Disaster recovery").
const ENVIRONMENT: &[(&str, &str)] = &[
    ("NO_COLOR", "Set: no colour on a terminal."),
    (
        "CAPSTAN_AGE_KEY_FILE, SOPS_AGE_KEY_FILE, SOPS_AGE_KEY, SOPS_AGE_KEY_CMD",
        "age identities when --identity is not given; else sops' default key file \
         $XDG_CONFIG_HOME/sops/age/keys.txt (~/.config/sops/age/keys.txt).",
    ),
    (
        "CAPSTAN_MAX_YAML_MIB",
        "The size limit of a YAML stream read (diff, validate), in MiB; default 256.",
    ),
    (
        "CAPSTAN_BACKUP_TIMEOUT",
        "Idle timeout of a backup store connection, in seconds; default 30.",
    ),
    (
        "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY",
        "Credentials of an S3 backup store (README \"Disaster recovery\").",
    ),
    (
        "CI",
        "Set: a CI run (diff --compare-sealed is refused, missing tools fail).",
    ),
];

/// Examples by page; a page without any gets `capstan … --help`.
const EXAMPLES: &[(&str, &str)] = &[
    ("capstan", "capstan render clusters/prod-a | kubectl apply --dry-run=server -f -"),
    ("capstan", "capstan man --out-dir /usr/local/share/man/man1"),
    ("capstan-render", "capstan render clusters/prod-a > prod-a.yaml"),
    ("capstan-render", "capstan render . -o out --quiet"),
    ("capstan-validate", "capstan render . | capstan validate --crds crds/ -"),
    ("capstan-validate", "capstan validate --format json out/prod-a | jq '.violations[]'"),
    ("capstan-plan", "capstan plan clusters/prod-a > runbook.md"),
    ("capstan-plan", "capstan plan clusters/prod-a --format json | jq -r '.sections[].steps[]'"),
    ("capstan-check", "capstan check clusters/prod-a --format json"),
    ("capstan-import-kubeadm", "capstan import kubeadm --pki pki --apiserver-manifest kube-apiserver.yaml --kubeadm-config kubeadm-config.yaml --talos-version v1.10 -R recipients.txt --out clusters/prod-a"),
    ("capstan-secrets-decrypt", "capstan secrets decrypt -i key.txt clusters/prod-a/secrets/prod-a-ca.yaml"),
    ("capstan-import-kubeadm", "capstan import kubeadm … --out clusters/prod-a --dry-run --format json"),
    ("capstan-secrets-rekey", "capstan secrets rekey -i key.txt clusters/prod-a --dry-run"),
    ("capstan-secrets-rekey", "capstan secrets rekey -i key.txt clusters/prod-a"),
    ("capstan-secrets-seal", "capstan secrets seal -i key.txt clusters/prod-a"),
    ("capstan-diff", "capstan diff --git main..HEAD ."),
    ("capstan-explain", "kubectl logs deploy/capi-controller-manager | capstan explain -"),
    ("capstan-rehearse", "capstan rehearse clusters/prod-a"),
    ("capstan-init", "capstan init my-fleet --dry-run"),
    ("capstan-init", "capstan init my-fleet"),
    ("capstan-version", "capstan version --format json | jq -r .commit"),
    ("capstan-completions", "capstan completions bash > /etc/bash_completion.d/capstan"),
    ("capstan-man", "capstan man > capstan.1"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_subcommand_has_a_page_with_the_three_sections() {
        let pages = pages().unwrap();
        assert!(pages.len() > 20, "{}", pages.len());
        for (name, text) in &pages {
            let text = String::from_utf8_lossy(text);
            for s in ["ENVIRONMENT", "\"EXIT STATUS\"", "EXAMPLES"] {
                assert!(text.contains(&format!(".SH {s}")), "{name} lacks {s}");
            }
        }
    }
}
