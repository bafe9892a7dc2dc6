//! `capstan init`: the files of a new GitOps repository. Pure: returns (path, content)
//! pairs; `bundle::create_missing` writes those that do not exist yet.
//!
//! - `clusters/`, `overlays/` (kept in git by a `.gitkeep`);
//! - `.sops.yaml`: one creation rule for the sealed files
//!   (`path_regex: clusters/.*/secrets/.*\.ya?ml$`, `encrypted_regex: ^(data|stringData)$`,
//!   the age recipients comma-separated, which every sops 3.x reads), so `sops` edits of a
//!   user's own Secrets in `clusters/<name>/secrets/` are sealed like capstan's;
//! - `deploy/argocd/`: the plugin, sidecar patch, kustomization and ApplicationSet shipped in
//!   capstan's own `deploy/argocd/` (see [`crate::argocd`]), with the repository URL;
//! - `README.md`: how the repository works.

use crate::argocd;

/// Why the scaffold could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// No recipient.
    #[error("--recipient: at least one age recipient is required (it goes into .sops.yaml)")]
    NoRecipients,
    /// A recipient does not parse.
    #[error(transparent)]
    Recipient(#[from] crate::secrets::SecretsError),
    /// The repository URL cannot be written safely.
    #[error("--repo-url `{0}`: expected a git URL (letters, digits and `@:/._~+-%` only)")]
    RepoUrl(String),
}

/// `.sops.yaml` for the recipients (already validated).
pub fn sops_yaml(recipients: &[String]) -> String {
    format!(
        "# sops creation rules for this repository (written by `capstan init`).\n\
         # The sealed Secrets under clusters/<name>/secrets/ keep keys and metadata readable and\n\
         # encrypt only values, exactly as `capstan secrets seal` writes them.\n\
         creation_rules:\n\
         - path_regex: clusters/.*/secrets/.*\\.ya?ml$\n  \
         encrypted_regex: ^(data|stringData)$\n  \
         mac_only_encrypted: true\n  \
         age: {}\n",
        recipients.join(",")
    )
}

/// The repository README.
pub const README: &str = include_str!("scaffold/README.md");

/// The overlays shipped with capstan (`overlays/` of its repository), which `init` copies
/// into a new repository (a test keeps this list equal to the directory).
pub const SHIPPED_OVERLAYS: &[(&str, &str)] = &[
    (
        "overlays/autoscaler/README.md",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/overlays/autoscaler/README.md"
        )),
    ),
    (
        "overlays/autoscaler/overlay.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/overlays/autoscaler/overlay.yaml"
        )),
    ),
    (
        "overlays/talos-vmware/README.md",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/overlays/talos-vmware/README.md"
        )),
    ),
    (
        "overlays/talos-vmware/overlay.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/overlays/talos-vmware/overlay.yaml"
        )),
    ),
    (
        "overlays/vsphere-ipam/README.md",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/overlays/vsphere-ipam/README.md"
        )),
    ),
    (
        "overlays/vsphere-ipam/overlay.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/overlays/vsphere-ipam/overlay.yaml"
        )),
    ),
    (
        "overlays/vsphere-ipam/pool.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/overlays/vsphere-ipam/pool.yaml"
        )),
    ),
];

/// What to do after `init`, printed by it.
pub const NEXT_STEPS: &str = "next steps:
  1. import each kubeadm cluster: `capstan import kubeadm --pki … --apiserver-manifest … --kubeadm-config … \
-r age1… --talos-version vX.Y.Z --out clusters/<name>`, then fill in the placeholders its cluster.yaml lists
  2. compare kubeadm with Talos: `capstan check clusters/<name> …` (every input it names), and follow `capstan plan clusters/<name>`
  3. render and review: `capstan render clusters/<name>`; reviews of pull requests: deploy/ci/ in capstan's repository
  4. commit and push, then install the Argo CD plugin and ApplicationSet: `kubectl apply -k deploy/argocd` (see README.md)";

/// Every file of the scaffold, by path relative to the repository root.
pub fn files(
    recipients: &[String],
    repo_url: Option<&str>,
) -> Result<Vec<(String, String)>, ScaffoldError> {
    if recipients.is_empty() {
        return Err(ScaffoldError::NoRecipients);
    }
    let mut checked = Vec::with_capacity(recipients.len());
    for (i, r) in recipients.iter().enumerate() {
        crate::secrets::parse_recipient(&format!("--recipient #{}", i + 1), r)?;
        let r = r.trim().to_string();
        if !checked.contains(&r) {
            checked.push(r);
        }
    }
    let appset = match repo_url {
        Some(u) => argocd::applicationset_for(u).ok_or_else(|| ScaffoldError::RepoUrl(u.into()))?,
        None => argocd::APPLICATIONSET_YAML.to_string(),
    };
    let mut out = vec![
        (".sops.yaml".to_string(), sops_yaml(&checked)),
        ("README.md".to_string(), README.to_string()),
        ("clusters/.gitkeep".to_string(), String::new()),
    ];
    out.extend(
        SHIPPED_OVERLAYS
            .iter()
            .map(|(p, t)| (p.to_string(), t.to_string())),
    );
    for (path, text) in argocd::DEPLOY_FILES {
        let text = if text == argocd::APPLICATIONSET_YAML {
            appset.clone()
        } else {
            text.to_string()
        };
        out.push((path.to_string(), text));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_overlay_file_is_scaffolded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut on_disk: Vec<String> = walkdir::WalkDir::new(root.join("overlays"))
            .into_iter()
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_file())
            .map(|e| {
                e.path()
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        on_disk.sort();
        let mut listed: Vec<String> = SHIPPED_OVERLAYS
            .iter()
            .map(|(p, _)| p.to_string())
            .collect();
        listed.sort();
        assert_eq!(listed, on_disk);
    }

    const R: &str = "age1uhh4sjky7uv75cdmgk5vjarsd9dv6kxkvjnf7zspu3v4crp0udgq47fxk5";

    #[test]
    fn sops_rules_parse_and_match() {
        let f = files(
            &[R.to_string(), R.to_string()],
            Some("ssh://git@example.com/a.git"),
        )
        .unwrap();
        let sops = &f.iter().find(|(p, _)| p == ".sops.yaml").unwrap().1;
        let v = crate::yaml::parse_one(sops).unwrap();
        let rule = &v["creation_rules"][0];
        assert_eq!(rule["age"], R);
        // As every sealed file: the MAC covers the encrypted values only.
        assert_eq!(rule["mac_only_encrypted"], true);
        assert_eq!(
            rule["encrypted_regex"],
            crate::secrets::seal::ENCRYPTED_REGEX
        );
        let re = regex::Regex::new(rule["path_regex"].as_str().unwrap()).unwrap();
        assert!(re.is_match("clusters/lab-f/secrets/lab-f-ca.yaml"));
        assert!(re.is_match("clusters/lab-f/secrets/operator/lab-f-ca.yml"));
        assert!(!re.is_match("clusters/lab-f/cluster.yaml"));
        let appset = &f
            .iter()
            .find(|(p, _)| p.ends_with("applicationset.yaml"))
            .unwrap()
            .1;
        assert!(
            appset.contains("repoURL: ssh://git@example.com/a.git")
                && !appset.contains(argocd::REPO_URL_PLACEHOLDER)
        );
        assert!(matches!(files(&[], None), Err(ScaffoldError::NoRecipients)));
        assert!(files(&["nope".into()], None).is_err());
        assert!(matches!(
            files(&[R.into()], Some("a b")),
            Err(ScaffoldError::RepoUrl(_))
        ));
    }
}
