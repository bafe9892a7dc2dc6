//! `capstan validate`: every object of the input against the schema of its kind, the provider
//! CRDs from `--crds` or, without it, those embedded for the pinned releases
//! (`schema::embedded`), and the built-in kinds against the Kubernetes OpenAPI schema
//! of the cluster's version. Prints the violations and a summary line on stderr, or one JSON
//! report on stdout.

use crate::cli::terminal::Status;
use crate::cli::{ReportFormat, ValidateArgs};
use crate::inputs;
use crate::inputs::providers::{self, Releases};
use crate::model::Flavour;
use crate::printable::{line, Label};
use crate::schema::embedded::{self, Embedded, ProviderSet};
use crate::schema::{CrdSet, Violation};
use anyhow::{Context, Result};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Where the provider CRDs come from.
enum Crds {
    /// `--crds`, layered.
    Given(CrdSet),
    /// The embedded sets, in order (`v1beta1`: the pinned releases, then `v1beta2`).
    Embedded(Vec<ProviderSet>),
}

impl Crds {
    /// The set that validates an object of `api`/`kind`: with embedded sets, the first that
    /// defines the version, else the first that defines the kind (its message names the
    /// versions it has); `None` when no set defines the kind.
    fn for_object(&self, api: &str, kind: &str) -> Option<&CrdSet> {
        match self {
            Crds::Given(c) => (c.knows(api, kind) || c.knows_kind(api, kind)).then_some(c),
            Crds::Embedded(sets) => sets
                .iter()
                .find(|s| s.crds.knows(api, kind))
                .or_else(|| sets.iter().find(|s| s.crds.knows_kind(api, kind)))
                .map(|s| &s.crds),
        }
    }

    /// Every CRD set, for objects without apiVersion or kind (the message says what is missing).
    fn first(&self) -> Option<&CrdSet> {
        match self {
            Crds::Given(c) => Some(c),
            Crds::Embedded(sets) => sets.first().map(|s| &s.crds),
        }
    }

    fn describe(&self) -> String {
        match self {
            Crds::Given(c) => format!("{} CRD versions from --crds", c.len()),
            Crds::Embedded(sets) => {
                let n: usize = sets.iter().map(|s| s.crds.len()).sum();
                let each: Vec<String> = sets
                    .iter()
                    .map(|s| format!("{}: {}", s.name, s.describe()))
                    .collect();
                format!("{n} embedded CRD versions ({})", each.join("; "))
            }
        }
    }
}

/// The Kubernetes version the built-in kinds are validated against, and why.
struct Kubernetes {
    minor: u32,
    set: CrdSet,
    why: String,
}

/// Run `capstan validate`.
pub fn validate(args: ValidateArgs) -> Result<Status> {
    let embedded = Embedded::load()?;
    // A broken --crds source is reported before the input is read (it may be stdin).
    let given = if args.crds.is_empty() {
        None
    } else {
        Some(layered_crds(&args.crds)?)
    };
    let objects = read_objects(&args)?;
    let crds = match given {
        Some(c) => Crds::Given(c),
        None => {
            let sets = embedded.provider_sets()?;
            refuse_declared_releases_not_embedded(&sets, &objects)?;
            Crds::Embedded(sets)
        }
    };
    let k8s = kubernetes(&embedded, args.kubernetes_version.as_deref(), &objects)?;
    let builtin_elsewhere = |api: &str, kind: &str| -> Result<Vec<u32>> {
        let mut minors = Vec::new();
        for m in embedded.kubernetes_minors() {
            if let Some((_, kinds)) = embedded.kubernetes(m)? {
                if kinds.iter().any(|(a, k)| a == api && k == kind) {
                    minors.push(m);
                }
            }
        }
        Ok(minors)
    };

    let (mut invalid, mut skipped) = (0usize, 0usize);
    let mut found: Vec<Found> = Vec::new();
    for (source, obj) in &objects {
        let text = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or("");
        let (api, kind, name) = (text("/apiVersion"), text("/kind"), text("/metadata/name"));
        let group = crate::resource::group_of(api);
        let violations: Vec<Violation> = if api.is_empty() || kind.is_empty() {
            crds.first().map(|c| c.validate(obj)).unwrap_or_default()
        } else if crate::resource::builtin_group(group) {
            if k8s.set.knows(api, kind) {
                k8s.set.validate(&applied_form(obj))
            } else {
                let minors = builtin_elsewhere(api, kind)?;
                if let (Some(first), Some(last)) = (minors.first(), minors.last()) {
                    vec![Violation {
                        path: "apiVersion".into(),
                        message: format!(
                            "kind `{kind}` in apiVersion `{api}` is not served by Kubernetes v1.{} \
                             ({}; the embedded schemas have it for v1.{first} to v1.{last}): give the \
                             version of the cluster the objects are applied to with --kubernetes-version",
                            k8s.minor, k8s.why
                        ),
                    }]
                } else if args.strict_kinds {
                    vec![no_schema(api, kind, true)]
                } else {
                    skipped += 1;
                    continue;
                }
            }
        } else if let Some(set) = crds.for_object(api, kind) {
            set.validate(obj)
        } else if args.strict_kinds {
            vec![no_schema(api, kind, false)]
        } else {
            skipped += 1;
            continue;
        };
        if !violations.is_empty() {
            invalid += 1;
            found.extend(violations.into_iter().map(|v| Found {
                source: source.clone(),
                kind: kind.to_string(),
                name: name.to_string(),
                violation: v,
            }));
        }
    }
    let report = Report {
        validated: objects.len() - skipped,
        invalid,
        skipped,
        crds: crds.describe(),
        kubernetes_version: format!("v1.{}", k8s.minor),
        kubernetes_version_from: k8s.why.clone(),
        builtin_kinds: k8s.set.len(),
        violations: found,
    };
    print(&report, args.format)?;
    Ok(if invalid > 0 {
        Status::Findings
    } else {
        Status::Success
    })
}

/// One violation of one object.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Found {
    /// The file (or `-`) the object was read from.
    source: String,
    kind: String,
    name: String,
    #[serde(flatten)]
    violation: Violation,
}

/// What `capstan validate` reports (`--format json` prints it as it is).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    /// Objects validated against a schema.
    validated: usize,
    /// Objects with at least one violation.
    invalid: usize,
    /// Objects of kinds with no schema (refused instead with `--strict-kinds`).
    skipped: usize,
    /// Where the provider CRDs came from.
    crds: String,
    /// The Kubernetes version of the built-in kinds' schemas, and why that one.
    kubernetes_version: String,
    kubernetes_version_from: String,
    /// The built-in kinds with a schema at that version.
    builtin_kinds: usize,
    violations: Vec<Found>,
}

/// Text: each violation, then the summary line, on stderr (stdout stays empty, as it was
/// before `--format`). JSON: the report on stdout, nothing on stderr.
fn print(r: &Report, format: ReportFormat) -> Result<()> {
    if format == ReportFormat::Json {
        return crate::cli::terminal::print_json(r);
    }
    let mut err = std::io::stderr().lock();
    for f in &r.violations {
        // The file, the object and the values a violation quotes are input.
        writeln!(
            err,
            "{}",
            line(&format!(
                "{}: {}/{}: {}",
                f.source, f.kind, f.name, f.violation
            ))
        )?;
    }
    writeln!(
        err,
        "{}",
        line(&format!(
            "validated {} objects against {} and the Kubernetes {} schemas of {} built-in kinds ({}): \
             {} invalid, {} skipped (no schema for their kind)",
            r.validated,
            r.crds,
            r.kubernetes_version,
            r.builtin_kinds,
            r.kubernetes_version_from,
            r.invalid,
            r.skipped,
        ))
    )?;
    Ok(())
}

fn no_schema(api: &str, kind: &str, builtin: bool) -> Violation {
    let message = if builtin {
        format!(
            "no schema for the built-in kind `{kind}` in apiVersion `{api}` and --strict-kinds is set: \
             capstan embeds the Kubernetes schemas of the kinds it renders only (Job, RBAC, \
             ValidatingAdmissionPolicy and its binding, ServiceAccount, Secret, ConfigMap, \
             Namespace); validate it with kubectl or without --strict-kinds"
        )
    } else {
        format!(
            "no schema for kind `{kind}` in apiVersion `{api}` (no CRD defines it) and \
             --strict-kinds is set: give its CRD with --crds DIR"
        )
    };
    Violation {
        path: "apiVersion".into(),
        message,
    }
}

/// The object as the API server receives it: a sealed Secret (a SOPS file, which Argo CD's
/// plugin decrypts before applying) without its top-level `sops` metadata.
fn applied_form(obj: &Value) -> std::borrow::Cow<'_, Value> {
    let sealed = obj.get("kind").and_then(Value::as_str) == Some("Secret")
        && obj.get("sops").is_some_and(Value::is_object);
    if !sealed {
        return std::borrow::Cow::Borrowed(obj);
    }
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("sops");
    }
    std::borrow::Cow::Owned(o)
}

fn read_objects(args: &ValidateArgs) -> Result<Vec<(String, Value)>> {
    let mut objects = Vec::new();
    let stdin_only = args.files.is_empty() || args.files.iter().all(|f| f.as_os_str() == "-");
    if stdin_only {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut text)?;
        objects.extend(inputs::parse_documents("<stdin>", &text)?);
    } else {
        for f in &args.files {
            anyhow::ensure!(
                f.as_os_str() != "-",
                "`-` (stdin) cannot be mixed with files"
            );
            objects.extend(inputs::read_yaml_documents(f, true)?);
        }
    }
    anyhow::ensure!(
        !objects.is_empty(),
        "no objects to validate in {}",
        if stdin_only {
            "<stdin>".to_string()
        } else {
            args.files
                .iter()
                .map(|f| f.label())
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    Ok(objects)
}

/// Later `--crds` sources replace earlier CRDs of the same group and kind, as applying a
/// newer CRD does; within one source a kind defined twice is an error.
fn layered_crds(sources: &[PathBuf]) -> Result<CrdSet> {
    let mut layered: Vec<((String, String), (String, Value))> = Vec::new();
    for source in sources {
        let docs = inputs::read_yaml_documents(source, false)?;
        let keys: Vec<(String, String)> = docs.iter().map(|(_, d)| crd_key(d)).collect();
        layered.retain(|(k, _)| !keys.contains(k));
        layered.extend(keys.into_iter().zip(docs));
    }
    Ok(CrdSet::from_documents(
        layered.into_iter().map(|(_, d)| d).collect(),
    )?)
}

fn crd_key(doc: &Value) -> (String, String) {
    let get = |p: &str| {
        doc.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    (get("/spec/group"), get("/spec/names/kind"))
}

/// The built-in kinds' schema set: `--kubernetes-version`, else the rendered clusters'
/// version (the lowest minor named), else the newest embedded minor.
fn kubernetes(
    embedded: &Embedded,
    flag: Option<&str>,
    objects: &[(String, Value)],
) -> Result<Kubernetes> {
    let minors = embedded.kubernetes_minors();
    let (Some(&oldest), Some(&newest)) = (minors.first(), minors.last()) else {
        anyhow::bail!("the embedded schemas hold no Kubernetes minor: the binary is broken");
    };
    let (minor, why) = if let Some(v) = flag {
        let m = embedded::kubernetes_minor(v).with_context(|| {
            line(&format!(
                "--kubernetes-version {v}: expected a Kubernetes version such as v1.34 or v1.34.1"
            ))
            .into_owned()
        })?;
        (m, format!("--kubernetes-version {v}"))
    } else if let Some((m, v, at)) = embedded::rendered_version(objects.iter().map(|(_, o)| o)) {
        (m, format!("{at} {v}"))
    } else {
        (
            newest,
            "no Cluster or TalosControlPlane names a version: the newest supported".to_string(),
        )
    };
    let Some((set, _)) = embedded.kubernetes(minor)? else {
        anyhow::bail!(
            "{}",
            line(&format!(
                "Kubernetes v1.{minor} ({why}) has no embedded schema: capstan supports v1.{oldest} \
                 to v1.{newest}; give a version in that range with --kubernetes-version"
            ))
        );
    };
    Ok(Kubernetes { minor, set, why })
}

/// The repository whose `clusters/NAME/cluster.yaml` declares the provider releases of the
/// clusters in the input: `--repo-root`, else the nearest directory holding `clusters/`
/// from the current one upwards (as git finds its root); `None` outside one.
fn repository() -> Option<PathBuf> {
    if let Some((root, _)) = inputs::given_repo_root() {
        return Some(root.to_path_buf());
    }
    let cwd = std::env::current_dir().ok()?;
    cwd.ancestors()
        .find(|d| d.join("clusters").is_dir())
        .map(Path::to_path_buf)
}

/// Without `--crds`: a cluster of the input whose `cluster.yaml` (in [`repository`])
/// declares a provider release (`spec.migration.providers`) other than the embedded one is
/// an error that names the release and asks for its CRDs. A release of a series the
/// embedded release shares and capstan pins as a series (Cluster API v1.10.x, CAPV v1.13.x:
/// patch releases change no API) counts as embedded.
fn refuse_declared_releases_not_embedded(
    sets: &[ProviderSet],
    objects: &[(String, Value)],
) -> Result<()> {
    let Some(root) = repository() else {
        return Ok(());
    };
    let mut problems = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (_, o) in objects {
        let api = o.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        if o.get("kind").and_then(Value::as_str) != Some("Cluster")
            || crate::resource::group_of(api) != "cluster.x-k8s.io"
        {
            continue;
        }
        let Some(name) = o.pointer("/metadata/name").and_then(Value::as_str) else {
            continue;
        };
        let rel = Path::new("clusters").join(name).join("cluster.yaml");
        let path = root.join(&rel);
        if !seen.insert(rel.clone()) || std::fs::symlink_metadata(&path).is_err() {
            continue;
        }
        let Some(set) = sets
            .iter()
            .find(|s| s.crds.knows(api, "Cluster"))
            .or_else(|| sets.first())
        else {
            continue;
        };
        let bytes = inputs::read_repository_bytes(&path, &root, inputs::InputKind::ClusterFile)?;
        let text = String::from_utf8_lossy(&bytes);
        let doc =
            crate::yaml::parse_one(&text).with_context(|| format!("{}: not YAML", rel.label()))?;
        let Some(declared) = doc
            .pointer("/spec/migration/providers")
            .and_then(Value::as_object)
        else {
            continue;
        };
        let pins = if set.name == "v1beta1" {
            providers::verified(Flavour::V1beta1)
        } else {
            &[]
        };
        for r in &set.releases {
            let Some(want) = declared.get(&r.provider).and_then(Value::as_str) else {
                continue;
            };
            let same_series = pins.iter().any(|p| {
                p.name == r.provider
                    && matches!(p.releases, Releases::Series(..))
                    && p.releases.accepts(want)
                    && p.releases.accepts(&r.release)
            });
            if want != r.release && !same_series {
                problems.push(format!(
                    "{}: spec.migration.providers.{}: {want}, but the CRDs embedded for it are of {} \
                     (flavour {}): give the CRDs of {} {want} with --crds DIR (its config/crd/bases), \
                     with the other providers' CRDs",
                    rel.label(),
                    r.provider,
                    r.release,
                    set.name,
                    r.provider,
                ));
            }
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "{}",
        problems
            .iter()
            .map(|p| line(p))
            .collect::<Vec<_>>()
            .join("\n")
    )
}
