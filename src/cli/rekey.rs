//! `capstan secrets rekey`: every sealed file of a cluster re-encrypted to
//! `spec.recipients`, and the repository's `.sops.yaml` checked to be in step with them.

use crate::cli::terminal::{identities, Status, Writes};
use crate::cli::ClusterSecretsArgs;
use crate::inputs;
use crate::printable::line;
use anyhow::Result;

/// `capstan secrets rekey`.
pub fn rekey(args: ClusterSecretsArgs) -> Result<Status> {
    let ids = identities(args.identity.as_deref())?;
    let c = inputs::load_cluster(&args.dir)?;
    anyhow::ensure!(
        !c.config.spec.recipients.is_empty(),
        "{}: spec.recipients: at least one age recipient is required",
        c.file
    );
    let recipients = crate::secrets::parse_spec_recipients(&c.file, &c.config.spec.recipients)?;
    let age_path = c.dir.join(crate::inputs::SECRETS_FILE);
    let age_label = age_path.display().to_string();
    let old = inputs::read_repository_bytes(
        &age_path,
        &inputs::repo_root(&c.dir),
        inputs::InputKind::SecretsAge,
    )?;
    let plain = crate::secrets::decrypt(&age_label, &old, &ids)?;
    let new_age = crate::secrets::encrypt_armored(&plain, &recipients)?;
    let digest = crate::digest::sha256_hex(new_age.as_bytes());
    let now = crate::secrets::sops::lastmodified_now();
    let mut files = vec![(
        crate::inputs::SECRETS_FILE.to_string(),
        new_age.into_bytes(),
    )];
    let mut what: Vec<(String, String)> = Vec::new();
    for (rel, file, plain) in crate::cli::terminal::open_sealed(&c, &ids)? {
        let before: std::collections::BTreeSet<String> = file.recipients().into_iter().collect();
        let tree = crate::secrets::seal::with_bundle_digest(plain.tree(), &digest);
        let meta = file.metadata();
        let text = crate::secrets::sops::encrypt(
            &rel,
            &tree,
            &recipients,
            meta.rule.clone(),
            meta.mac_only_encrypted,
            &now,
            Some((&file, &plain)),
        )?;
        let after: std::collections::BTreeSet<String> =
            c.config.spec.recipients.iter().cloned().collect();
        let added: Vec<&String> = after.difference(&before).collect();
        let removed: Vec<&String> = before.difference(&after).collect();
        what.push((
            args.dir.join(&rel).display().to_string(),
            format!(
                "{} recipient(s) added, {} removed",
                added.len(),
                removed.len()
            ),
        ));
        files.push((rel, text.into_bytes()));
    }
    let mut w = Writes::new(args.dry_run);
    w.replace(&args.dir, &files)?;
    for c in &mut w.changes {
        if let Some((_, x)) = what.iter().find(|(p, _)| *p == c.path) {
            c.what = Some(x.clone());
        }
    }
    if !args.dry_run {
        written_for_spec_recipients(&c)?;
    }
    w.warnings = sops_config_in_step(&c, &files)?;
    // D16: a rekey does not reach the backups of the management cluster.
    w.notes
        .push(format!("note: {}", crate::backup::custody::REKEY_WARNING));
    w.print(args.format)?;
    Ok(Status::Success)
}

/// After the files are written: every sealed file is wrapped exactly for spec.recipients.
fn written_for_spec_recipients(c: &inputs::ClusterInput) -> Result<()> {
    let wanted: std::collections::BTreeSet<String> =
        c.config.spec.recipients.iter().cloned().collect();
    let mut stale = Vec::new();
    for s in inputs::read_sealed(&c.dir, true, inputs::Digests::NotWanted)? {
        let f = crate::secrets::sops::SopsFile::parse(&s.path, &s.text)?;
        let have: std::collections::BTreeSet<String> = f.recipients().into_iter().collect();
        if have != wanted {
            stale.push(s.path);
        }
    }
    anyhow::ensure!(
        stale.is_empty(),
        "still wrapped for other recipients than spec.recipients: {}",
        stale.join(", ")
    );
    Ok(())
}

/// After `secrets rekey`: a warning for each creation rule of the repository's `.sops.yaml`
/// that gives the rekeyed sealed files other age recipients than `spec.recipients` (a
/// later `sops updatekeys` or `sops edit` would encrypt them to its set, dropping the new
/// recipients), and for files no rule matches.
fn sops_config_in_step(
    c: &inputs::ClusterInput,
    files: &[(String, Vec<u8>)],
) -> Result<Vec<String>> {
    use crate::secrets::sops_config::{rule_for, Rule};
    let root = inputs::repo_root(&c.dir);
    let path = root.join(".sops.yaml");
    if !path.exists() {
        return Ok(Vec::new());
    }
    let label = path.display().to_string();
    let text = inputs::read_repository_text(&path, &root, inputs::InputKind::Overlay)?;
    let config =
        crate::yaml::parse_one(&text).map_err(|e| anyhow::anyhow!("{label}: {}", e.message))?;
    let here = |p: &std::path::Path| {
        if p.as_os_str().is_empty() {
            std::path::PathBuf::from(".")
        } else {
            p.to_path_buf()
        }
    };
    let (root_c, dir_c) = (here(&root).canonicalize()?, here(&c.dir).canonicalize()?);
    let under = dir_c.strip_prefix(&root_c).unwrap_or(&dir_c).to_path_buf();
    let wanted: std::collections::BTreeSet<&str> = c
        .config
        .spec
        .recipients
        .iter()
        .map(String::as_str)
        .collect();
    let mut by_rule: std::collections::BTreeMap<usize, (Vec<String>, Vec<String>)> =
        std::collections::BTreeMap::new();
    let mut unmatched = Vec::new();
    for (rel, _) in files
        .iter()
        .filter(|(r, _)| r != crate::inputs::SECRETS_FILE)
    {
        let repo_rel = under.join(rel).display().to_string();
        match rule_for(&config, &label, &repo_rel)? {
            None => return Ok(Vec::new()),
            Some(Rule::NoMatch) => unmatched.push(repo_rel),
            Some(Rule::Age { index, recipients }) => {
                let have: std::collections::BTreeSet<&str> =
                    recipients.iter().map(String::as_str).collect();
                if have != wanted {
                    by_rule
                        .entry(index)
                        .or_insert_with(|| (recipients.clone(), Vec::new()))
                        .1
                        .push(repo_rel);
                }
            }
        }
    }
    let mut warnings = Vec::new();
    for (index, (have, paths)) in &by_rule {
        let have: std::collections::BTreeSet<&str> = have.iter().map(String::as_str).collect();
        let missing: Vec<&str> = wanted.difference(&have).copied().collect();
        let extra: Vec<&str> = have.difference(&wanted).copied().collect();
        warnings.push(format!(
            "{} creation_rules[{index}] gives {} other age recipients than spec.recipients (lacking: {}; \
             besides: {}): a later `sops updatekeys` or `sops edit` would encrypt them to its set; set its `age` to \
             \"{}\"",
            line(&label),
            line(&paths.join(", ")),
            if missing.is_empty() { "none".into() } else { line(&missing.join(", ")).into_owned() },
            if extra.is_empty() { "none".into() } else { line(&extra.join(", ")).into_owned() },
            line(&c.config.spec.recipients.join(","))
        ));
    }
    if !unmatched.is_empty() {
        warnings.push(format!(
            "{}: no creation rule matches {}: `sops` refuses to encrypt them (\"no matching creation rules\")",
            line(&label),
            line(&unmatched.join(", "))
        ));
    }
    Ok(warnings)
}
