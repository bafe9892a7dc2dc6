//! Argo CD: the config-management plugin (CMP) contract of `capstan argocd generate`, the
//! sync waves and sync options it adds, and the deployment files in `deploy/argocd/`.
//!
//! What Argo CD gives the plugin (argo-cd v3.5.1, `docs/user-guide/build-environment.md`,
//! `reposerver/repository/repository.go` `newEnv()`, `cmpserver/plugin/plugin.go`): the
//! command runs in the Application's source directory, inside a tarball of the whole
//! repository, with `ARGOCD_APP_NAME`, `ARGOCD_APP_NAMESPACE` (the *destination*
//! namespace), `ARGOCD_APP_REVISION`, `ARGOCD_APP_SOURCE_PATH`, the Application's plugin env
//! as `ARGOCD_ENV_<NAME>`, and its explicitly set parameters as `ARGOCD_APP_PARAMETERS`
//! (JSON) and `PARAM_<NAME>`. stdout must hold only Kubernetes objects; a non-zero exit
//! shows stderr in the UI (and is cached in Redis until a hard refresh); generated
//! manifests are cached per revision, so output must be a function of the commit.
//!
//! What capstan reads ([`Context::from_env`]):
//! - the secrets mode, `ARGOCD_ENV_CAPSTAN_SECRETS` or the parameter `secrets`
//!   ([`SecretsMode`]); both set and different is an error, neither set is an error;
//! - no other `ARGOCD_ENV_CAPSTAN_*` entry and no other parameter: each is refused (a
//!   typo must not be ignored). In particular the migration phase, replicas and overlays
//!   cannot be overridden per Application: they are reviewed in git, where the phase
//!   interlocks check them;
//! - `ARGOCD_APP_SOURCE_PATH` to find the repository root (for `templates/`) from the
//!   working directory, and to name files repository-relative in errors;
//! - `ARGOCD_APP_NAMESPACE`, when set, must equal every rendered cluster's namespace
//!   (`cluster.yaml` `metadata.namespace`): `CreateNamespace=true` creates only the
//!   destination namespace, so a mismatch is a misconfigured Application. Leave the
//!   destination namespace empty for a directory of clusters in several namespaces;
//! - `ARGOCD_APP_NAME` and `ARGOCD_APP_REVISION` only to prefix error messages: putting
//!   the revision into objects would change every object on every commit.
//!
//! Sync ordering ([`annotate`], added by `argocd generate` only, so `capstan render`
//! stays provider-neutral). Argo CD applies wave by wave and starts the next wave only
//! when every resource of the current one is healthy; its built-in health check keeps a
//! `Cluster` Progressing (or Degraded) until the control plane is up, so nothing may wait
//! behind the Cluster. Hence three waves:
//! - `-2`: Secrets (and SopsSecrets), RBAC, and the bootstrapped guard (the admission
//!   policy and its binding that refuse the cluster's machines until `status.bootstrapped`
//!   is set): what the other objects reference or need in place first. With the SopsSecret
//!   health check of `deploy/argocd/` Argo CD waits here until sops-secrets-operator has
//!   created the Secrets, so no TalosConfig is reconciled before the imported PKI exists (M12);
//! - `-1`: immutable machine and bootstrap templates (kinds ending in `Template`);
//! - `0`: Cluster, infrastructure cluster, control plane, MachineDeployments, and the
//!   migration Jobs. Those Jobs are `Sync` hooks already in the templates (a Job without
//!   its hook annotation is wrong under any Argo CD source type, so they stay there); they
//!   wait for the TalosControlPlane themselves, so they belong in its wave, not after it.
//!
//! Sync options ([`sync_options`]): `SkipDryRunOnMissingResource=true` on every custom
//! resource (the CRDs may be installed by the same sync); `ServerSideApply=true` on the
//! Cluster API objects and Secrets (Argo CD then owns only the fields it sets, leaving
//! webhook defaults and controller-set fields alone, and no Secret is copied into a
//! `last-applied-configuration` annotation); `Prune=false,Delete=false` on the Secrets,
//! the Cluster, the infrastructure cluster, the control plane and its bootstrapped guard
//! (by name, [`GUARD_POLICY_SUFFIX`]): removing them from git, or deleting the Application,
//! must never delete a running cluster or its CA. Nothing a single phase renders keeps it:
//! phase control-plane's nodeRef policy, the phase Jobs' ClusterRole, worker
//! MachineHealthChecks are pruned when git drops them (README "What each phase adds, and
//! what removes it"). An annotation already on an object (a template override's) is kept.
//!
//! Replicas under an autoscaler: the ApplicationSet in `deploy/argocd/` ignores
//! `/spec/replicas` only on MachineDeployments carrying the cluster-autoscaler size
//! annotations (a `jqPathExpressions` selection) with `RespectIgnoreDifferences=true`; a
//! blanket ignore would stop the migration phases from scaling pools.

use crate::resource::Resource;
use serde_json::Value;
use std::path::{Component, Path, PathBuf};

/// The environment variables and plugin names of the Argo CD config-management plugin.
pub mod env {
    /// Argo CD build environment: the Application's name.
    pub const ENV_ARGOCD_APP_NAME: &str = "ARGOCD_APP_NAME";
    /// Argo CD build environment: the Application's destination namespace.
    pub const ENV_ARGOCD_APP_NAMESPACE: &str = "ARGOCD_APP_NAMESPACE";
    /// Argo CD build environment: the resolved revision (commit SHA).
    pub const ENV_ARGOCD_APP_REVISION: &str = "ARGOCD_APP_REVISION";
    /// Argo CD build environment: the Application's source path inside the repository.
    pub const ENV_ARGOCD_APP_SOURCE_PATH: &str = "ARGOCD_APP_SOURCE_PATH";
    /// Argo CD build environment: the JSON list of parameters set in the Application.
    pub const ENV_ARGOCD_APP_PARAMETERS: &str = "ARGOCD_APP_PARAMETERS";
    /// Prefix Argo CD puts before the names of an Application's plugin env entries.
    #[cfg(any(test, feature = "testkit"))]
    pub const ARGOCD_ENV_PREFIX: &str = "ARGOCD_ENV_";
    /// Prefix of the plugin env entries capstan owns (any other one is refused as a typo).
    pub const ARGOCD_ENV_CAPSTAN_PREFIX: &str = "ARGOCD_ENV_CAPSTAN_";
    /// Plugin env entry choosing the secrets mode, as written in the Application
    /// (`plugin.env[].name`); it reaches capstan as [`ENV_ARGOCD_SECRETS`].
    pub const PLUGIN_ENV_SECRETS: &str = "CAPSTAN_SECRETS";
    /// The secrets mode as the plugin sees it (`ARGOCD_ENV_` + [`PLUGIN_ENV_SECRETS`]).
    pub const ENV_ARGOCD_SECRETS: &str = "ARGOCD_ENV_CAPSTAN_SECRETS";
    /// Plugin parameter choosing the secrets mode (`plugin.parameters[].name`).
    pub const PARAM_SECRETS: &str = "secrets";
    /// The secrets-mode parameter as Argo CD exports it (`PARAM_` + upper-cased name).
    pub const ENV_PARAM_SECRETS: &str = "PARAM_SECRETS";
}

/// Annotation: the sync wave.
pub const ANN_SYNC_WAVE: &str = "argocd.argoproj.io/sync-wave";
/// Annotation: per-resource sync options.
pub const ANN_SYNC_OPTIONS: &str = "argocd.argoproj.io/sync-options";
/// Annotation: the resource hook (set by the migration templates).
pub const ANN_HOOK: &str = "argocd.argoproj.io/hook";

/// `deploy/argocd/plugin.yaml`: the ConfigManagementPlugin (mounted into the sidecar).
pub const PLUGIN_YAML: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/argocd/plugin.yaml"
));
/// `deploy/argocd/repo-server-patch.yaml`: the sidecar, as a patch of `argocd-repo-server`.
pub const REPO_SERVER_PATCH_YAML: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/argocd/repo-server-patch.yaml"
));
/// `deploy/argocd/kustomization.yaml`.
pub const KUSTOMIZATION_YAML: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/argocd/kustomization.yaml"
));
/// `deploy/argocd/argocd-cm-patch.yaml`: the SopsSecret health check, as a patch of `argocd-cm`.
pub const ARGOCD_CM_PATCH_YAML: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/argocd/argocd-cm-patch.yaml"
));
/// `deploy/argocd/applicationset.yaml`: one Application per `clusters/*` directory.
pub const APPLICATIONSET_YAML: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/argocd/applicationset.yaml"
));
/// The repository URL placeholder in [`APPLICATIONSET_YAML`].
pub const REPO_URL_PLACEHOLDER: &str = "https://git.example.internal/platform/clusters.git";
/// The deployment files, by path relative to a repository root.
pub const DEPLOY_FILES: [(&str, &str); 5] = [
    ("deploy/argocd/kustomization.yaml", KUSTOMIZATION_YAML),
    ("deploy/argocd/plugin.yaml", PLUGIN_YAML),
    (
        "deploy/argocd/repo-server-patch.yaml",
        REPO_SERVER_PATCH_YAML,
    ),
    ("deploy/argocd/argocd-cm-patch.yaml", ARGOCD_CM_PATCH_YAML),
    ("deploy/argocd/applicationset.yaml", APPLICATIONSET_YAML),
];

/// Why the plugin's inputs are unusable. Messages are one line and hold no secret.
#[derive(Debug, thiserror::Error)]
pub enum ArgocdError {
    /// No secrets mode was chosen.
    #[error("no secrets mode chosen for this Application: set the plugin env `{env}` or the plugin parameter `{param}` to `decrypt` (the age identity is mounted in the sidecar), `operator` (SopsSecret objects for the in-cluster sops-secrets-operator) or `omit` (the Secrets are managed elsewhere); capstan never applies SOPS ciphertext as a Secret", env = env::PLUGIN_ENV_SECRETS, param = env::PARAM_SECRETS)]
    NoMode,
    /// A mode value is not one of the three.
    #[error(
        "{source_name}: `{value}` is not a secrets mode; expected `decrypt`, `operator` or `omit`"
    )]
    BadMode {
        /// Where it came from.
        source_name: String,
        /// The value.
        value: String,
    },
    /// The env entry and the parameter disagree.
    #[error("the plugin env `{env_name}` says `{env}` but the plugin parameter `{param_name}` says `{param}`: set one of them", env_name = env::PLUGIN_ENV_SECRETS, param_name = env::PARAM_SECRETS)]
    ModeConflict {
        /// The env value.
        env: String,
        /// The parameter value.
        param: String,
    },
    /// An `ARGOCD_ENV_CAPSTAN_*` entry capstan does not read.
    #[error("{name}: capstan reads no such plugin env (only `{known}`); the migration phase, replicas and overlays come from git, where they are reviewed", known = env::PLUGIN_ENV_SECRETS)]
    UnknownEnv {
        /// The variable.
        name: String,
    },
    /// A parameter capstan does not declare.
    #[error("plugin parameter `{name}`: capstan declares only `{known}`", known = env::PARAM_SECRETS)]
    UnknownParameter {
        /// Its name.
        name: String,
    },
    /// `ARGOCD_APP_PARAMETERS` does not parse.
    #[error("{var}: {message}", var = env::ENV_ARGOCD_APP_PARAMETERS)]
    BadParameters {
        /// What is wrong.
        message: String,
    },
    /// A variable's value is not UTF-8.
    #[error("{name}: not UTF-8")]
    NotUtf8 {
        /// The variable.
        name: String,
    },
    /// The source path does not fit the working directory.
    #[error("{var}=`{path}`: {message}", var = env::ENV_ARGOCD_APP_SOURCE_PATH)]
    SourcePath {
        /// The value.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A cluster lives in another namespace than the Application's destination.
    #[error("cluster `{name}` lives in namespace `{cluster}` (its cluster.yaml metadata.namespace) but the Application's destination namespace ({var}) is `{app}`: set `destination.namespace: {cluster}` (or leave it empty for a directory of clusters)", var = env::ENV_ARGOCD_APP_NAMESPACE)]
    Namespace {
        /// The cluster's name.
        name: String,
        /// The cluster's namespace.
        cluster: String,
        /// The destination namespace.
        app: String,
    },
    /// Nothing to print.
    #[error("no objects rendered: refusing to print an empty stream (with auto-prune, Argo CD would delete every resource of the Application)")]
    Empty,
}

/// How sealed Secrets reach the cluster, chosen per Application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretsMode {
    /// Decrypt in the plugin with the identity mounted in the sidecar. The plaintext
    /// Secrets are then part of the generated manifests, which the repo-server caches in
    /// Redis (`reposerver.repo.cache.expiration`, 24 h by default).
    Decrypt,
    /// Emit a SopsSecret per sealed Secret (from `secrets/operator/`, written by
    /// `capstan secrets seal-operator`) for the in-cluster sops-secrets-operator.
    Operator,
    /// Drop the sealed Secrets: they are managed elsewhere.
    Omit,
}

impl SecretsMode {
    /// Parse a mode value; `source_name` names where it came from in the error.
    pub fn parse(source_name: &str, value: &str) -> Result<SecretsMode, ArgocdError> {
        match value.trim() {
            "decrypt" => Ok(SecretsMode::Decrypt),
            "operator" => Ok(SecretsMode::Operator),
            "omit" => Ok(SecretsMode::Omit),
            other => Err(ArgocdError::BadMode {
                source_name: source_name.to_string(),
                value: other.to_string(),
            }),
        }
    }

    /// The mode's name.
    pub fn as_str(self) -> &'static str {
        match self {
            SecretsMode::Decrypt => "decrypt",
            SecretsMode::Operator => "operator",
            SecretsMode::Omit => "omit",
        }
    }
}

/// What the plugin read from its environment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Context {
    /// `ARGOCD_APP_NAME`.
    pub app_name: Option<String>,
    /// `ARGOCD_APP_NAMESPACE` (the destination namespace).
    pub app_namespace: Option<String>,
    /// `ARGOCD_APP_REVISION`.
    pub revision: Option<String>,
    /// `ARGOCD_APP_SOURCE_PATH`.
    pub source_path: Option<String>,
    /// The secrets mode from the plugin env.
    pub env_mode: Option<SecretsMode>,
    /// The secrets mode from the parameter.
    pub param_mode: Option<SecretsMode>,
}

impl Context {
    /// Read the plugin's variables from `(name, value)` pairs (the process environment).
    /// Empty values count as unset. Values of variables capstan does not read are ignored,
    /// except unknown `ARGOCD_ENV_CAPSTAN_*` entries, which are refused.
    pub fn from_env(vars: &[(String, String)]) -> Result<Context, ArgocdError> {
        use env::*;
        let get = |name: &str| {
            vars.iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        for (k, _) in vars {
            if k.starts_with(ARGOCD_ENV_CAPSTAN_PREFIX) && k != ENV_ARGOCD_SECRETS {
                return Err(ArgocdError::UnknownEnv { name: k.clone() });
            }
        }
        let env_mode = get(ENV_ARGOCD_SECRETS)
            .map(|v| SecretsMode::parse(ENV_ARGOCD_SECRETS, &v))
            .transpose()?;
        let param_mode = match get(ENV_ARGOCD_APP_PARAMETERS) {
            Some(json) => secrets_parameter(&json)?,
            None => get(ENV_PARAM_SECRETS)
                .map(|v| SecretsMode::parse(ENV_PARAM_SECRETS, &v))
                .transpose()?,
        };
        Ok(Context {
            app_name: get(ENV_ARGOCD_APP_NAME),
            app_namespace: get(ENV_ARGOCD_APP_NAMESPACE),
            revision: get(ENV_ARGOCD_APP_REVISION),
            source_path: get(ENV_ARGOCD_APP_SOURCE_PATH),
            env_mode,
            param_mode,
        })
    }

    /// The chosen secrets mode: the env entry or the parameter (both set must agree).
    pub fn mode(&self) -> Result<SecretsMode, ArgocdError> {
        match (self.env_mode, self.param_mode) {
            (Some(e), Some(p)) if e != p => Err(ArgocdError::ModeConflict {
                env: e.as_str().into(),
                param: p.as_str().into(),
            }),
            (Some(m), _) | (None, Some(m)) => Ok(m),
            (None, None) => Err(ArgocdError::NoMode),
        }
    }

    /// A prefix for error messages naming the Application and revision, when known.
    pub fn label(&self) -> String {
        let mut parts = Vec::new();
        // The environment's values, escaped: a name with a line break stays on the line.
        if let Some(n) = &self.app_name {
            parts.push(format!("application {}", crate::printable::line(n)));
        }
        if let Some(r) = &self.revision {
            let r = r.get(..12).unwrap_or(r);
            parts.push(format!("revision {}", crate::printable::line(r)));
        }
        if parts.is_empty() {
            "argocd generate".into()
        } else {
            format!("argocd generate ({})", parts.join(", "))
        }
    }

    /// The namespace check: `Ok` when no destination namespace is set or it matches.
    pub fn check_namespace(&self, name: &str, namespace: &str) -> Result<(), ArgocdError> {
        match &self.app_namespace {
            Some(app) if app != namespace => Err(ArgocdError::Namespace {
                name: name.into(),
                cluster: namespace.into(),
                app: app.clone(),
            }),
            _ => Ok(()),
        }
    }
}

/// The `secrets` parameter from `ARGOCD_APP_PARAMETERS` (a JSON list of
/// `{name, string|array|map}`); any other parameter is refused.
fn secrets_parameter(json: &str) -> Result<Option<SecretsMode>, ArgocdError> {
    let bad = |message: String| ArgocdError::BadParameters { message };
    let list: Vec<Value> = serde_json::from_str(json)
        .map_err(|e| bad(format!("not a JSON list of parameters: {e}")))?;
    let mut mode = None;
    for p in &list {
        let name = p
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("a parameter has no `name`".into()))?;
        if name != env::PARAM_SECRETS {
            return Err(ArgocdError::UnknownParameter { name: name.into() });
        }
        let value = p.get("string").and_then(Value::as_str).ok_or_else(|| {
            bad(format!(
                "parameter `{name}` must be a string (`decrypt`, `operator` or `omit`)"
            ))
        })?;
        mode = Some(SecretsMode::parse(
            &format!("plugin parameter `{name}`"),
            value,
        )?);
    }
    Ok(mode)
}

/// The repository root and the source directory relative to it, from the working
/// directory (the Application's path, absolute) and `ARGOCD_APP_SOURCE_PATH`.
pub fn source_root(
    cwd: &Path,
    source_path: Option<&str>,
) -> Result<(PathBuf, PathBuf), ArgocdError> {
    let Some(sp) = source_path else {
        return Ok((cwd.to_path_buf(), PathBuf::from(".")));
    };
    let bad = |message: &str| ArgocdError::SourcePath {
        path: sp.to_string(),
        message: message.to_string(),
    };
    let mut names = Vec::new();
    for c in Path::new(sp).components() {
        match c {
            Component::Normal(n) => names.push(n.to_os_string()),
            Component::CurDir => {}
            _ => return Err(bad("must be a relative path inside the repository")),
        }
    }
    if names.is_empty() {
        return Ok((cwd.to_path_buf(), PathBuf::from(".")));
    }
    let tail: Vec<_> = cwd
        .components()
        .rev()
        .take(names.len())
        .map(|c| c.as_os_str().to_os_string())
        .collect();
    if tail.len() != names.len() || tail.iter().rev().ne(names.iter()) {
        return Err(bad(&format!(
            "the working directory {} does not end with it",
            cwd.display()
        )));
    }
    let root = cwd
        .ancestors()
        .nth(names.len())
        .ok_or_else(|| bad("has more components than the working directory"))?;
    Ok((root.to_path_buf(), names.iter().collect()))
}

/// The sync wave of a kind (see the module documentation).
pub fn sync_wave(kind: &str) -> i32 {
    match kind {
        "Namespace" => -3,
        "ServiceAccount"
        | "Role"
        | "RoleBinding"
        | "ClusterRole"
        | "ClusterRoleBinding"
        | "Secret"
        | "ConfigMap"
        | "SopsSecret"
        | "ValidatingAdmissionPolicy"
        | "ValidatingAdmissionPolicyBinding" => -2,
        k if k.ends_with("Template") => -1,
        _ => 0,
    }
}

/// The name suffix of the bootstrapped guard's admission policy and binding
/// (`<cluster>.<namespace>.bootstrapped.capstan.dev`, `procedure::Names::guard_policy`).
pub const GUARD_POLICY_SUFFIX: &str = ".bootstrapped.capstan.dev";

/// The name suffix of the keep-workers policy and binding
/// (`<cluster>.<namespace>.keep-workers.capstan.dev`): with the guard, the only admission
/// objects kept when git drops them, both rendered in every phase of an existing cluster.
pub const KEEP_WORKERS_POLICY_SUFFIX: &str = ".keep-workers.capstan.dev";

/// The sync options of an object, by kind, API group and name, if any (see the module
/// documentation).
pub fn sync_options(kind: &str, group: &str, name: &str) -> Option<&'static str> {
    match kind {
        "Secret" if group.is_empty() => Some("Prune=false,Delete=false,ServerSideApply=true"),
        "SopsSecret" => Some("Prune=false,Delete=false,SkipDryRunOnMissingResource=true"),
        // The bootstrapped guard and the keep-workers policy live as long as the cluster
        // they guard (every phase). Every other admission policy (phase control-plane's
        // nodeRef policy, an overlay's) gets Argo CD's default: pruned when git drops it (a
        // live `Prune=false` is never pruned, gitops-engine sync_context.go:333-342,
        // 1453-1458).
        "ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding"
            if group == "admissionregistration.k8s.io"
                && (name.ends_with(GUARD_POLICY_SUFFIX)
                    || name.ends_with(KEEP_WORKERS_POLICY_SUFFIX)) =>
        {
            Some("Prune=false,Delete=false")
        }
        "Cluster" | "VSphereCluster" | "TalosControlPlane"
            if !crate::resource::builtin_group(group) =>
        {
            Some("Prune=false,Delete=false,ServerSideApply=true,SkipDryRunOnMissingResource=true")
        }
        _ if !crate::resource::builtin_group(group) => {
            Some("ServerSideApply=true,SkipDryRunOnMissingResource=true")
        }
        _ => None,
    }
}

/// Add the sync wave and sync options to an object (not to verbatim documents, which carry
/// their own, and keeping any annotation already set). Hooks get their wave only.
pub fn annotate(r: &mut Resource) {
    if r.raw.is_some() {
        return;
    }
    let kind = r.kind().to_string();
    let group = crate::resource::group_of(r.api_version()).to_string();
    let name = r.name().to_string();
    let Some(meta) = r.value.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let ann = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    let Some(ann) = ann.as_object_mut() else {
        return;
    };
    let hook = ann.contains_key(ANN_HOOK);
    let wave = if hook { 0 } else { sync_wave(&kind) };
    ann.entry(ANN_SYNC_WAVE)
        .or_insert_with(|| Value::String(wave.to_string()));
    if !hook {
        if let Some(opts) = sync_options(&kind, &group, &name) {
            ann.entry(ANN_SYNC_OPTIONS)
                .or_insert_with(|| Value::String(opts.to_string()));
        }
    }
}

/// The ApplicationSet for a repository URL (the placeholder replaced). The URL must be a
/// plain URL or scp-like git address (no spaces, quotes or YAML syntax).
pub fn applicationset_for(repo_url: &str) -> Option<String> {
    let ok = !repo_url.is_empty()
        && repo_url
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "@:/._~+-%".contains(c));
    ok.then(|| APPLICATIONSET_YAML.replace(REPO_URL_PLACEHOLDER, repo_url))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vars(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn modes_from_env_and_parameters() {
        let c = Context::from_env(&vars(&[("ARGOCD_ENV_CAPSTAN_SECRETS", "omit")])).unwrap();
        assert_eq!(c.mode().unwrap(), SecretsMode::Omit);
        let c = Context::from_env(&vars(&[(
            "ARGOCD_APP_PARAMETERS",
            r#"[{"name":"secrets","string":"operator"}]"#,
        )]))
        .unwrap();
        assert_eq!(c.mode().unwrap(), SecretsMode::Operator);
        let c = Context::from_env(&vars(&[("PARAM_SECRETS", "decrypt")])).unwrap();
        assert_eq!(c.mode().unwrap(), SecretsMode::Decrypt);
        let c = Context::from_env(&vars(&[
            ("ARGOCD_ENV_CAPSTAN_SECRETS", "omit"),
            ("PARAM_SECRETS", "decrypt"),
        ]))
        .unwrap();
        assert!(matches!(c.mode(), Err(ArgocdError::ModeConflict { .. })));
        let c = Context::from_env(&vars(&[("ARGOCD_ENV_CAPSTAN_SECRETS", "")])).unwrap();
        assert!(matches!(c.mode(), Err(ArgocdError::NoMode)));
        assert!(matches!(
            Context::from_env(&vars(&[("ARGOCD_ENV_CAPSTAN_SECRETS", "plain")])),
            Err(ArgocdError::BadMode { .. })
        ));
        assert!(matches!(
            Context::from_env(&vars(&[("ARGOCD_ENV_CAPSTAN_PHASE", "complete")])),
            Err(ArgocdError::UnknownEnv { .. })
        ));
        assert!(matches!(
            Context::from_env(&vars(&[(
                "ARGOCD_APP_PARAMETERS",
                r#"[{"name":"phase","string":"complete"}]"#
            )])),
            Err(ArgocdError::UnknownParameter { .. })
        ));
        assert!(matches!(
            Context::from_env(&vars(&[(
                "ARGOCD_APP_PARAMETERS",
                r#"[{"name":"secrets","array":["omit"]}]"#
            )])),
            Err(ArgocdError::BadParameters { .. })
        ));
        // Other tools' env entries are not ours to judge.
        assert!(Context::from_env(&vars(&[("ARGOCD_ENV_FOO", "x")])).is_ok());
    }

    #[test]
    fn source_root_from_the_working_directory() {
        let cwd = Path::new("/tmp/_cmp_server/abc/clusters/lab-f");
        let (root, rel) = source_root(cwd, Some("clusters/lab-f")).unwrap();
        assert_eq!(root, Path::new("/tmp/_cmp_server/abc"));
        assert_eq!(rel, Path::new("clusters/lab-f"));
        let (root, rel) = source_root(cwd, Some("./clusters/lab-f/")).unwrap();
        assert_eq!(
            (root.as_path(), rel.as_path()),
            (
                Path::new("/tmp/_cmp_server/abc"),
                Path::new("clusters/lab-f")
            )
        );
        assert_eq!(source_root(cwd, Some(".")).unwrap().0, cwd);
        assert_eq!(source_root(cwd, None).unwrap().1, Path::new("."));
        assert!(source_root(cwd, Some("clusters/lab-g")).is_err());
        assert!(source_root(cwd, Some("../x")).is_err());
        assert!(source_root(cwd, Some("/abs")).is_err());
    }

    #[test]
    fn waves_and_options() {
        let mut r = Resource {
            value: json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": "c"}}),
            origin: "t".into(),
            raw: None,
            template: false,
        };
        annotate(&mut r);
        assert_eq!(
            r.value
                .pointer("/metadata/annotations/argocd.argoproj.io~1sync-wave")
                .unwrap(),
            "0"
        );
        assert!(r
            .value
            .pointer("/metadata/annotations/argocd.argoproj.io~1sync-options")
            .unwrap()
            .as_str()
            .unwrap()
            .contains("Prune=false"));
        let mut hook = Resource {
            value: json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "annotations": {ANN_HOOK: "Sync", ANN_SYNC_WAVE: "5"}}}),
            origin: "t".into(),
            raw: None,
            template: false,
        };
        annotate(&mut hook);
        assert_eq!(
            hook.value
                .pointer("/metadata/annotations/argocd.argoproj.io~1sync-wave")
                .unwrap(),
            "5"
        );
        assert!(hook
            .value
            .pointer("/metadata/annotations/argocd.argoproj.io~1sync-options")
            .is_none());
        assert_eq!(sync_wave("VSphereMachineTemplate"), -1);
        assert_eq!(sync_wave("Secret"), -2);
        assert_eq!(sync_options("Role", "rbac.authorization.k8s.io", "r"), None);
        // Only the guard's and keep-workers' admission objects outlive their removal from git.
        let vap = "admissionregistration.k8s.io";
        for kind in [
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ] {
            assert_eq!(
                sync_options(kind, vap, "c.ns.bootstrapped.capstan.dev"),
                Some("Prune=false,Delete=false")
            );
            assert_eq!(
                sync_options(kind, vap, "c.ns.keep-workers.capstan.dev"),
                Some("Prune=false,Delete=false")
            );
            assert_eq!(
                sync_options(kind, vap, "c.ns.paused-node-refs.capstan.dev"),
                None
            );
        }
        assert!(applicationset_for("git@example.com:a/b.git").is_some());
        assert!(applicationset_for("x\ny: z").is_none());
    }
}
