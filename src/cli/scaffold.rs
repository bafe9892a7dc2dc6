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
//! - `README.md`: how the repository works;
//! - `.gitignore`: what `render -o` and `backup pull` leave beside their output while they
//!   run (`.<OUT>.capstan-lock`, `.<OUT>.capstan-new-<pid>`), and `capstan backup dump`'s
//!   plaintext `dump/` of the README recipe;
//! - `deploy/ci/`: the pull-request review jobs shipped in capstan's own `deploy/ci/`
//!   (GitHub Actions, GitLab CI), as they are.

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

/// The repository `.gitignore`.
pub const GITIGNORE: &str = "# Written by `capstan init`.\n\
# `capstan render -o OUT` and `capstan backup pull URL OUT` work beside OUT while they run.\n\
.*.capstan-lock\n\
.*.capstan-new-*\n\
# `capstan backup dump` (README recipe): plaintext live objects, removed once pushed.\n\
/dump/\n";

/// The CI review jobs shipped with capstan (`deploy/ci/` of its repository), copied as they are.
pub const CI_FILES: &[(&str, &str)] = &[
    (
        "deploy/ci/github-actions.yml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/deploy/ci/github-actions.yml"
        )),
    ),
    (
        "deploy/ci/github-actions-comment.yml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/deploy/ci/github-actions-comment.yml"
        )),
    ),
    (
        "deploy/ci/gitlab-ci.yml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/deploy/ci/gitlab-ci.yml"
        )),
    ),
];

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
  3. render and review: `capstan render clusters/<name>`; reviews of pull requests: deploy/ci/ (copy a job into .github/workflows/ or .gitlab-ci.yml; each names the image to set)
  4. commit and push, then install the Argo CD plugin and ApplicationSet: `kubectl apply -k deploy/argocd` (see README.md)";

/// The placeholders the scaffold's files carry, for `init`'s next steps: the images of the
/// plugin sidecar and the CI jobs (`registry.example.internal/platform/…`), and the
/// ApplicationSet's repository URL unless `--repo-url` set it.
pub fn placeholders(repo_url_set: bool) -> Vec<String> {
    let mut out = Vec::new();
    if !repo_url_set {
        out.push(format!(
            "deploy/argocd/applicationset.yaml: repoURL `{}` (or run init again with --repo-url into an empty directory)",
            argocd::REPO_URL_PLACEHOLDER
        ));
    }
    out.push(
        "deploy/argocd/repo-server-patch.yaml: the sidecar image `registry.example.internal/platform/capstan:…` (built from capstan's deploy/image/Dockerfile, target plugin)".into(),
    );
    out.push(
        "deploy/ci/*.yml: the job image `registry.example.internal/platform/capstan-ci:…` (target ci)".into(),
    );
    out
}

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
        (".gitignore".to_string(), GITIGNORE.to_string()),
        ("clusters/.gitkeep".to_string(), String::new()),
    ];
    out.extend(CI_FILES.iter().map(|(p, t)| (p.to_string(), t.to_string())));
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
    fn every_shipped_ci_file_is_scaffolded_and_the_gitignore_covers_the_work_files() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut on_disk: Vec<String> = std::fs::read_dir(root.join("deploy/ci"))
            .unwrap()
            .map(|e| format!("deploy/ci/{}", e.unwrap().file_name().to_string_lossy()))
            .collect();
        on_disk.sort();
        let mut listed: Vec<String> = CI_FILES.iter().map(|(p, _)| p.to_string()).collect();
        listed.sort();
        assert_eq!(listed, on_disk);
        let f = files(&[R.to_string()], None).unwrap();
        let ignore = &f.iter().find(|(p, _)| p == ".gitignore").unwrap().1;
        for pattern in [".*.capstan-lock", ".*.capstan-new-*", "/dump/"] {
            assert!(ignore.lines().any(|l| l == pattern), "{pattern}: {ignore}");
        }
        assert!(f.iter().any(|(p, _)| p == "deploy/ci/gitlab-ci.yml"));
        // Each placeholder named is in the files it names.
        let has = |path_prefix: &str, text: &str| {
            f.iter()
                .any(|(p, t)| p.starts_with(path_prefix) && t.contains(text))
        };
        let named = placeholders(false);
        assert!(named[0].contains(argocd::REPO_URL_PLACEHOLDER));
        assert!(has(
            "deploy/argocd/applicationset.yaml",
            argocd::REPO_URL_PLACEHOLDER
        ));
        assert!(has(
            "deploy/argocd/repo-server-patch.yaml",
            "registry.example.internal/platform/capstan:"
        ));
        assert!(has(
            "deploy/ci/",
            "registry.example.internal/platform/capstan-ci:"
        ));
        assert_eq!(placeholders(true).len(), named.len() - 1);
    }

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
