//! Templating: turns one validated `cluster.yaml` into Kubernetes objects. A pure function
//! of its inputs; reads no files and prints nothing.
//!
//! The built-in templates in `templates/` are embedded in the binary; a repository may
//! override any of them by name (`templates/<flavour>/<file>`, `templates/talos/<file>`).
//! One minijinja `Environment` is configured once: undefined values are errors (strict),
//! every `{{ … }}` is emitted as JSON (valid YAML, so no value can break the document
//! structure), and block tags on their own line leave no trace (trim/lstrip blocks).
//!
//! Per cluster: the Talos patches are rendered first and passed to the object templates as
//! strings; each object template's output is parsed as YAML. The stage after it (overlays,
//! content-hash names, the interlocks) is the pipeline's ([`crate::pipeline::finish`]), and
//! so is the gate before it ([`crate::pipeline::gate`]).

pub mod endpoint;

use crate::inputs::TemplateOverride;
use crate::model::{label_route, ClusterConfig, LabelRoute, ModelError, Phase, SemVer};
use crate::overlay::OverlayError;
use crate::resource::{self, ResId, Resource};
use crate::yaml;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The object templates every flavour has, under `templates/<flavour>/`.
#[cfg(any(test, feature = "testkit"))]
pub const FLAVOUR_TEMPLATES: &[&str] = &[
    "cluster.yaml",
    "vspherecluster.yaml",
    "vspheremachinetemplate.yaml",
    "taloscontrolplane.yaml",
    "talosconfigtemplate.yaml",
    "machinedeployment.yaml",
    "machinehealthcheck.yaml",
];

/// The built-in templates, by name.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "talos/controlplane-patch.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/talos/controlplane-patch.yaml"
        )),
    ),
    (
        "talos/worker-patch.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/talos/worker-patch.yaml"
        )),
    ),
    (
        "ipam/controlplane-pool.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/ipam/controlplane-pool.yaml"
        )),
    ),
    (
        "migration/rbac.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/migration/rbac.yaml"
        )),
    ),
    (
        "migration/pod.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/migration/pod.yaml"
        )),
    ),
    (
        "migration/bootstrapped-job.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/migration/bootstrapped-job.yaml"
        )),
    ),
    (
        "migration/scale-job.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/migration/scale-job.yaml"
        )),
    ),
    (
        "migration/unpause-job.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/migration/unpause-job.yaml"
        )),
    ),
    (
        "migration/cluster-rbac.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/migration/cluster-rbac.yaml"
        )),
    ),
    (
        "migration/guard-policy.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/migration/guard-policy.yaml"
        )),
    ),
    (
        "migration/node-ref-policy.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/migration/node-ref-policy.yaml"
        )),
    ),
    (
        "migration/keep-workers-policy.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/migration/keep-workers-policy.yaml"
        )),
    ),
    // Not a `.yaml` file, so a repository cannot override it: the migration Jobs' shell
    // library (bounded, checked kubectl calls; the guard; the pause).
    (
        "migration/lib.sh",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/migration/lib.sh"
        )),
    ),
    (
        "v1beta1/cluster.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/v1beta1/cluster.yaml"
        )),
    ),
    (
        "v1beta1/vspherecluster.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/v1beta1/vspherecluster.yaml"
        )),
    ),
    (
        "v1beta1/vspheremachinetemplate.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/v1beta1/vspheremachinetemplate.yaml"
        )),
    ),
    (
        "v1beta1/taloscontrolplane.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/v1beta1/taloscontrolplane.yaml"
        )),
    ),
    (
        "v1beta1/talosconfigtemplate.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/v1beta1/talosconfigtemplate.yaml"
        )),
    ),
    (
        "v1beta1/machinedeployment.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/v1beta1/machinedeployment.yaml"
        )),
    ),
    (
        "v1beta1/machinehealthcheck.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/v1beta1/machinehealthcheck.yaml"
        )),
    ),
    (
        "v1beta2/cluster.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/v1beta2/cluster.yaml"
        )),
    ),
    (
        "v1beta2/vspherecluster.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/v1beta2/vspherecluster.yaml"
        )),
    ),
    (
        "v1beta2/vspheremachinetemplate.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/v1beta2/vspheremachinetemplate.yaml"
        )),
    ),
    (
        "v1beta2/taloscontrolplane.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/v1beta2/taloscontrolplane.yaml"
        )),
    ),
    (
        "v1beta2/talosconfigtemplate.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/v1beta2/talosconfigtemplate.yaml"
        )),
    ),
    (
        "v1beta2/machinedeployment.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/v1beta2/machinedeployment.yaml"
        )),
    ),
    (
        "v1beta2/machinehealthcheck.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/v1beta2/machinehealthcheck.yaml"
        )),
    ),
];

/// Why a cluster could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// `cluster.yaml` is not valid for rendering.
    #[error(transparent)]
    Invalid(#[from] ModelError),
    /// An override names a migration template: those carry the safety interlocks.
    #[error("{origin}: `{name}` cannot be overridden: the migration templates (the bootstrapped guard, the phase Jobs and their RBAC) are capstan's safety interlocks; the Jobs' image is spec.migration.jobImage, and overlays may add labels and annotations")]
    Protected {
        /// Where the override was read from.
        origin: String,
        /// The template name.
        name: String,
    },
    /// An override names a template capstan does not have.
    #[error("{origin}: `{name}` is not a template capstan knows; known templates: {known}")]
    UnknownTemplate {
        /// The override's file.
        origin: String,
        /// The name it would have.
        name: String,
        /// Comma-separated known names.
        known: String,
    },
    /// A template failed to compile or render.
    #[error("template `{name}` ({origin}){}: {message}", line.map(|l| format!(" line {l}")).unwrap_or_default())]
    Template {
        /// Template name.
        name: String,
        /// `built-in` or the override's file.
        origin: String,
        /// Line in the template, when known.
        line: Option<usize>,
        /// What went wrong.
        message: String,
    },
    /// A template produced text that is not YAML, or not Kubernetes objects.
    #[error("template `{name}` ({origin}) produced {message}")]
    Output {
        /// Template name.
        name: String,
        /// `built-in` or the override's file.
        origin: String,
        /// What is wrong with the output.
        message: String,
    },
    /// Two objects with the same group, kind, namespace and name.
    #[error("{file}: two objects are both {id} (from `{first}` and `{second}`)")]
    Duplicate {
        /// The cluster file.
        file: String,
        /// The identity.
        id: Box<ResId>,
        /// Where the first came from.
        first: String,
        /// Where the second came from.
        second: String,
    },
    /// An overlay could not be applied.
    #[error(transparent)]
    Overlay(#[from] OverlayError),
    /// `spec.overlays` lists overlays that the caller did not load.
    #[error("{file}: spec.overlays: {listed} overlay(s) listed but none loaded (load them with inputs::load_overlays)")]
    OverlaysNotLoaded {
        /// The cluster file.
        file: String,
        /// How many are listed.
        listed: usize,
    },
    /// `capstan check` blocks what `cluster.yaml` alone shows.
    #[error("{file}: capstan check blocks this cluster.yaml:{}", findings.iter().map(|f| format!("\n  - {} ({}): {}{}", f.id, f.field, f.summary, f.fix.as_deref().map(|x| format!("; fix: {x}")).unwrap_or_default())).collect::<String>())]
    Refused {
        /// The cluster file.
        file: String,
        /// The blocking findings.
        findings: Vec<crate::migration::check::Finding>,
    },
    /// The rendered objects lack a migration interlock.
    #[error("{file}: migration interlock: {message}")]
    Interlock {
        /// The cluster file.
        file: String,
        /// What is missing and why it matters.
        message: String,
    },
    /// The rendered objects no longer carry the control-plane endpoint strategy.
    #[error("{file}: control-plane endpoint: {message}")]
    Endpoint {
        /// The cluster file.
        file: String,
        /// What is missing and why it matters.
        message: String,
    },
}

/// How `{{ value }}` is written: under the templates' JSON auto-escaping, a string goes
/// straight into the output as a JSON string literal, byte for byte what minijinja's own
/// JSON formatter writes (tested against it) but without serialising it into a temporary
/// string first (a cluster's templates write about 130 of them). Everything else (safe
/// strings, numbers, lists, maps, other escaping modes) is minijinja's formatter.
fn format_value(
    out: &mut minijinja::Output,
    state: &mut minijinja::State,
    value: &minijinja::Value,
) -> Result<(), minijinja::Error> {
    use minijinja::value::ValueKind;
    if matches!(state.auto_escape(), AutoEscape::Json) && !value.is_safe() {
        match value.kind() {
            ValueKind::String => {
                if let Some(s) = value.as_str() {
                    return yaml::write_json_string(out, s).map_err(minijinja::Error::from);
                }
            }
            // Lists and maps as JSON, with the characters YAML cannot carry raw escaped
            // (they can only be inside the JSON's strings).
            ValueKind::Seq | ValueKind::Map => {
                let json = serde_json::to_string(value).map_err(|e| {
                    minijinja::Error::new(
                        minijinja::ErrorKind::BadSerialization,
                        format!("unable to format to JSON: {e}"),
                    )
                })?;
                return out
                    .write_str(&yaml::escape_unprintable(&json))
                    .map_err(minijinja::Error::from);
            }
            _ => {}
        }
    }
    minijinja::escape_formatter(out, state, value)
}

/// The work one template render may do, in minijinja fuel: about one unit per instruction
/// and per 64 bytes of data it creates, so it bounds both time and memory (a fraction of
/// a second, about 64 MiB). The built-in templates use about 2,500 for the examples'
/// largest render (`fuel_leaves_the_builtin_templates_room` holds them under 1% of it).
pub const TEMPLATE_FUEL: u64 = 1_000_000;

/// The most text one template render may produce (README: Safety).
pub const MAX_TEMPLATE_OUTPUT: usize = 4 << 20;

/// A configured template environment; build once, render many clusters.
pub struct Renderer {
    env: Environment<'static>,
    origins: BTreeMap<String, String>,
}

/// The objects of one cluster, in output order.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// Cluster name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Its migration phase (`None` when `cluster.yaml` has no migration).
    pub phase: Option<Phase>,
    /// The kubeadm etcd members `cluster.yaml` still declares (they share etcd with the
    /// Talos control plane during phase `control-plane`).
    pub kubeadm_etcd_members: usize,
    /// Objects in the fixed output order.
    pub resources: Vec<Resource>,
    /// Warnings for the user (printable text already: paths and recipients escaped), in a
    /// fixed order; they do not stop the render.
    pub warnings: Vec<String>,
}

impl Renderer {
    /// Compile the built-in templates, replaced by `overrides` where given.
    pub fn new(overrides: &[TemplateOverride]) -> Result<Renderer, RenderError> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_auto_escape_callback(|_| AutoEscape::Json);
        env.set_formatter(format_value);
        env.set_fuel(Some(TEMPLATE_FUEL));
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| template_error("(syntax)", "built-in", &e))?;
        env.set_syntax(syntax);
        let mut origins = BTreeMap::new();
        for o in overrides {
            if o.name.starts_with("migration/") {
                return Err(RenderError::Protected {
                    origin: o.origin.clone(),
                    name: o.name.clone(),
                });
            }
            if !BUILTIN.iter().any(|(n, _)| *n == o.name) {
                return Err(RenderError::UnknownTemplate {
                    origin: o.origin.clone(),
                    name: o.name.clone(),
                    known: BUILTIN
                        .iter()
                        .map(|(n, _)| *n)
                        .filter(|n| !n.starts_with("migration/"))
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
            // Overrides are compiled now, so a syntax error in one is reported before any
            // cluster renders, whether or not a cluster uses it.
            env.add_template_owned(o.name.clone(), o.source.clone())
                .map_err(|e| template_error(&o.name, &o.origin, &e))?;
            origins.insert(o.name.clone(), o.origin.clone());
        }
        // The built-in templates (tested, see `every_builtin_template_compiles`) are compiled
        // when first used: a cluster needs about half of them (one flavour, its phase's
        // Jobs), and compiling all of them was a fifth of a one-cluster render.
        env.set_loader(|name| Ok(BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)));
        Ok(Renderer { env, origins })
    }

    fn origin(&self, name: &str) -> &str {
        self.origins
            .get(name)
            .map(String::as_str)
            .unwrap_or("built-in")
    }

    fn render_text(&self, name: &str, ctx: &minijinja::Value) -> Result<String, RenderError> {
        let tmpl = self
            .env
            .get_template(name)
            .map_err(|e| template_error(name, self.origin(name), &e))?;
        let text = tmpl
            .render(ctx)
            .map_err(|e| template_error(name, self.origin(name), &e))?;
        if text.len() > MAX_TEMPLATE_OUTPUT {
            return Err(RenderError::Output {
                name: name.into(),
                origin: self.origin(name).into(),
                message: format!(
                    "{} bytes of output, more than the {MAX_TEMPLATE_OUTPUT} one template may produce",
                    text.len()
                ),
            });
        }
        Ok(text)
    }

    fn render_objects(
        &self,
        name: &str,
        ctx: &minijinja::Value,
        out: &mut Vec<Resource>,
    ) -> Result<(), RenderError> {
        let text = self.render_text(name, ctx)?;
        let docs = yaml::parse_stream(&text).map_err(|e| RenderError::Output {
            name: name.into(),
            origin: self.origin(name).into(),
            message: format!("invalid YAML: {e} (line numbers are of the rendered output)"),
        })?;
        for (i, doc) in docs.into_iter().enumerate() {
            let problem = match resource::missing_identity(&doc) {
                None => None,
                Some("not a mapping") => Some("a document that is not a mapping".to_string()),
                Some(field) => Some(format!("document {} without `{field}`", i + 1)),
            };
            if let Some(message) = problem {
                return Err(RenderError::Output {
                    name: name.into(),
                    origin: self.origin(name).into(),
                    message,
                });
            }
            out.push(Resource {
                value: doc,
                origin: format!("template {name}"),
                raw: None,
                template: true,
            });
        }
        Ok(())
    }

    /// Render a Talos patch template and return it in canonical YAML form.
    fn render_patch(&self, name: &str, ctx: &minijinja::Value) -> Result<String, RenderError> {
        let text = self.render_text(name, ctx)?;
        let doc = yaml::parse_one(&text).map_err(|e| RenderError::Output {
            name: name.into(),
            origin: self.origin(name).into(),
            message: format!("an invalid Talos patch: {e}"),
        })?;
        if !doc.is_object() {
            return Err(RenderError::Output {
                name: name.into(),
                origin: self.origin(name).into(),
                message: "a Talos patch that is not a mapping".into(),
            });
        }
        Ok(yaml::to_string(&doc))
    }

    /// The objects of a cluster's templates, before any overlay: the render stage of
    /// [`crate::pipeline`], which calls it only for a cluster its gate
    /// ([`crate::pipeline::gate`]) let through. A cluster whose `cluster.yaml` and templates
    /// are the same on two revisions has the same [`Templated`]: `diff --git` renders it once
    /// and finishes it with each side's overlays.
    pub fn render_templates(&self, config: &ClusterConfig) -> Result<Templated, RenderError> {
        let plan = Plan::new(config);
        // The context's entries are converted to template values once per cluster; each
        // template gets them in one map, with its machine and pool set over them.
        let json_ctx = context(config, &plan);
        let mut base = Scope::default();
        for (k, v) in json_ctx.as_object().into_iter().flatten() {
            base.set(k, to_template_value(v));
        }
        let base0 = base.over(&[]);
        let cp_patch = self.render_patch("talos/controlplane-patch.yaml", &base0)?;
        let mut talos = json_ctx["talos"].clone();
        talos["controlPlanePatch"] = Value::String(cp_patch);
        // Each pool's worker patch (its node labels and taints); the context's
        // `talos.workerPatch` is the pool's while its objects are rendered.
        let mut pool_talos = Vec::with_capacity(plan.pools.len());
        for pool_ctx in &plan.pools {
            let c = base.over(&[("pool", to_template_value(pool_ctx))]);
            let mut t = talos.clone();
            t["workerPatch"] = Value::String(self.render_patch("talos/worker-patch.yaml", &c)?);
            pool_talos.push(to_template_value(&t));
        }
        base.set("talos", to_template_value(&talos));
        let ctx = base.over(&[]);

        let fl = config.spec.flavour.as_str();
        let t = |n: &str| format!("{fl}/{n}");
        let mut out = Vec::with_capacity(4 + 3 * config.spec.workers.len());
        self.render_objects(&t("cluster.yaml"), &ctx, &mut out)?;
        self.render_objects(&t("vspherecluster.yaml"), &ctx, &mut out)?;
        let vsphere_template = config
            .spec
            .vsphere
            .as_ref()
            .map(|v| v.template.clone())
            .unwrap_or_default();
        if let Some(cp) = &config.spec.control_plane {
            let machine = machine_ctx(
                "controlplane",
                &plan.names.control_plane_machine_template,
                &cp.machine,
                &vsphere_template,
            );
            let mut machine = machine;
            if let Some(a) = &cp.anti_affinity {
                // CAPV attaches these tags to every VM cloned from the template, so a
                // tag-based compute policy keeps every later control-plane VM apart.
                machine["tagIDs"] = json!([a.tag_id]);
            }
            let mut labels = json_ctx["labels"].clone();
            if let Some(pool) = json_ctx["endpoint"]["pool"]["name"].as_str() {
                // Strategy `external`: the control plane's addresses come from its own pool.
                machine["addressPool"] = json!(pool);
                labels[endpoint::POOL_LABEL] = json!(pool);
            }
            let c = base.over(&[
                ("machine", to_template_value(&machine)),
                ("labels", to_template_value(&labels)),
            ]);
            self.render_objects(&t("vspheremachinetemplate.yaml"), &c, &mut out)?;
            if !json_ctx["endpoint"]["pool"].is_null() {
                self.render_objects("ipam/controlplane-pool.yaml", &ctx, &mut out)?;
            }
        }
        for (pool, pool_ctx) in config.spec.workers.iter().zip(plan.pools.iter()) {
            let machine = machine_ctx(
                "worker",
                &format!("{}-{}", config.metadata.name, pool.name),
                &pool.machine,
                &vsphere_template,
            );
            let c = base.over(&[
                ("machine", to_template_value(&machine)),
                ("pool", to_template_value(pool_ctx)),
            ]);
            self.render_objects(&t("vspheremachinetemplate.yaml"), &c, &mut out)?;
        }
        self.render_objects(&t("taloscontrolplane.yaml"), &ctx, &mut out)?;
        for (pool_ctx, pool_talos) in plan.pools.iter().zip(pool_talos) {
            let c = base.over(&[("pool", to_template_value(pool_ctx)), ("talos", pool_talos)]);
            self.render_objects(&t("talosconfigtemplate.yaml"), &c, &mut out)?;
            self.render_objects(&t("machinedeployment.yaml"), &c, &mut out)?;
            if plan.health_checks {
                self.render_objects(&t("machinehealthcheck.yaml"), &c, &mut out)?;
            }
        }

        // An existing cluster is guarded in every phase: the admission policy refuses its
        // machines until status.bootstrapped is set, and the phase's Job sets it (validation
        // guarantees a phase for an imported cluster).
        if let Some(m) = &config.spec.migration {
            self.render_objects("migration/rbac.yaml", &ctx, &mut out)?;
            self.render_objects("migration/guard-policy.yaml", &ctx, &mut out)?;
            // And its running workers are never scaled to 0 unacknowledged (a phase revert
            // renders every pool at 0), in every phase too.
            self.render_objects("migration/keep-workers-policy.yaml", &ctx, &mut out)?;
            match m.phase {
                Phase::ControlPlane => {
                    self.render_objects("migration/node-ref-policy.yaml", &ctx, &mut out)?;
                }
                Phase::Workers | Phase::Complete => {
                    self.render_objects("migration/cluster-rbac.yaml", &ctx, &mut out)?;
                }
                Phase::Prepare => {}
            }
            self.render_objects(phase_job(m.phase).1, &ctx, &mut out)?;
        }

        Ok(Templated { resources: out })
    }
}

/// A cluster's objects as its templates render them, before overlays and names
/// ([`Renderer::render_templates`]).
#[derive(Debug, Clone)]
pub struct Templated {
    pub(crate) resources: Vec<Resource>,
}

/// Each worker pool's name and its config template's name, as overlays select them
/// (`target.pool`).
pub fn pool_templates(config: &ClusterConfig) -> Vec<(String, String)> {
    Plan::new(config)
        .pools
        .iter()
        .map(|p| {
            let s = |k: &str| p[k].as_str().unwrap_or_default().to_string();
            (s("name"), s("configTemplate"))
        })
        .collect()
}

/// The Job each phase of an existing cluster runs: its name suffix (after
/// `<cluster>-capstan-migration-`) and its template.
pub fn phase_job(phase: Phase) -> (&'static str, &'static str) {
    let template = match phase {
        Phase::Prepare => "migration/bootstrapped-job.yaml",
        Phase::ControlPlane => "migration/scale-job.yaml",
        Phase::Workers | Phase::Complete => "migration/unpause-job.yaml",
    };
    (phase.job_suffix(), template)
}

/// The top-level names of a template context and their values, sorted by name. (A dozen
/// entries: a scan of them costs less than minijinja's ordered map, which compares
/// template values on every lookup.)
#[derive(Debug, Clone, Default)]
struct Scope(Vec<(String, minijinja::Value)>);

impl Scope {
    /// Set `name` to `value`, replacing what it held.
    fn set(&mut self, name: &str, value: minijinja::Value) {
        match self.0.binary_search_by(|(n, _)| n.as_str().cmp(name)) {
            Ok(i) => self.0[i].1 = value,
            Err(i) => self.0.insert(i, (name.to_string(), value)),
        }
    }

    /// A template context: these names with `extra` set over them.
    fn over(&self, extra: &[(&str, minijinja::Value)]) -> minijinja::Value {
        let mut scope = self.clone();
        for (k, v) in extra {
            scope.set(k, v.clone());
        }
        minijinja::Value::from_object(scope)
    }
}

impl minijinja::value::Object for Scope {
    fn get_value(self: &Arc<Self>, key: &minijinja::Value) -> Option<minijinja::Value> {
        self.get_value_by_str(key.as_str()?)
    }

    fn get_value_by_str(self: &Arc<Self>, key: &str) -> Option<minijinja::Value> {
        self.0
            .iter()
            .find(|(n, _)| n == key)
            .map(|(_, v)| v.clone())
    }

    fn enumerate(self: &Arc<Self>) -> minijinja::value::Enumerator {
        use minijinja::value::ObjectExt;
        self.mapped_enumerator(|this| {
            Box::new(
                this.0
                    .iter()
                    .map(|(n, _)| minijinja::Value::from(n.as_str())),
            )
        })
    }
}

/// A JSON value as a template value.
fn to_template_value(v: &Value) -> minijinja::Value {
    minijinja::Value::from(minijinja::value::Serde(v))
}

fn template_error(name: &str, origin: &str, e: &minijinja::Error) -> RenderError {
    if e.kind() == minijinja::ErrorKind::OutOfFuel {
        return RenderError::Template {
            name: name.to_string(),
            origin: origin.to_string(),
            line: e.line(),
            message: format!(
                "ran out of fuel: more than about {TEMPLATE_FUEL} steps or {} MiB of data for one \
                 render (a loop that does not end, or an output bomb?)",
                (TEMPLATE_FUEL * 64) >> 20
            ),
        };
    }
    let mut message = e.kind().to_string();
    if let Some(detail) = e.detail() {
        message.push_str(": ");
        message.push_str(detail);
    }
    RenderError::Template {
        name: e.name().unwrap_or(name).to_string(),
        origin: origin.to_string(),
        line: e.line(),
        message,
    }
}

/// Names and replica counts derived from the inputs and the migration phase.
struct Plan {
    names: Names,
    cp_replicas: u32,
    cp_paused: bool,
    pools: Vec<Value>,
    health_checks: bool,
}

struct Names {
    control_plane: String,
    control_plane_machine_template: String,
}

impl Plan {
    fn new(config: &ClusterConfig) -> Plan {
        let name = &config.metadata.name;
        let declared_cp = config.spec.control_plane.as_ref().map_or(0, |c| c.replicas);
        // Replica counts per migration phase (see `capstan plan` for the reasoning):
        // prepare: nothing scales; control-plane: the control plane gets its replicas but is
        // rendered paused (the scale Job unpauses it only while it has no machine); workers
        // and complete: everything as declared.
        let phase = config.spec.migration.as_ref().map(|m| m.phase);
        let scale_to_zero = config.spec.migration.as_ref().is_some_and(|m| {
            m.acknowledge
                .contains(&crate::model::Acknowledgement::ScaleWorkersToZero)
        });
        let (cp_scale, workers_scale, cp_paused) = match phase {
            None | Some(Phase::Complete) | Some(Phase::Workers) => (true, true, false),
            Some(Phase::Prepare) => (false, false, false),
            Some(Phase::ControlPlane) => (true, false, true),
        };
        let pools = config
            .spec
            .workers
            .iter()
            .map(|p| {
                let base = format!("{name}-{}", p.name);
                let route = |r: LabelRoute| -> serde_json::Map<String, Value> {
                    p.labels
                        .iter()
                        .filter(|(k, _)| label_route(k) == r)
                        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                        .collect()
                };
                let taints: Vec<Value> = p
                    .taints
                    .iter()
                    .map(|t| {
                        let mut m = json!({"key": t.key, "effect": t.effect.as_str()});
                        if !t.value.is_empty() {
                            m["value"] = json!(t.value);
                        }
                        m
                    })
                    .collect();
                let mut kubelet_extra: serde_json::Map<String, Value> = config
                    .spec
                    .kubelet
                    .extra_config
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if !taints.is_empty() {
                    kubelet_extra.insert("registerWithTaints".into(), Value::Array(taints.clone()));
                }
                let replicas = if workers_scale { p.replicas } else { 0 };
                json!({
                    "name": p.name,
                    "replicas": replicas,
                    // The acknowledgement capstan's admission policy needs to let this pool
                    // go from running machines to 0.
                    "scaleToZero": replicas == 0 && scale_to_zero,
                    "kubeletExtraConfig": kubelet_extra,
                    "machineDeployment": base,
                    "machineTemplate": base,
                    "configTemplate": base,
                    "nodeLabels": route(LabelRoute::Talos),
                    "machineLabels": route(LabelRoute::Machine),
                    "taints": taints,
                })
            })
            .collect();
        Plan {
            names: Names {
                control_plane: format!("{name}-cp"),
                control_plane_machine_template: format!("{name}-cp"),
            },
            cp_replicas: if cp_scale { declared_cp } else { 0 },
            // Worker MachineHealthChecks once kubeadm is gone (not while pools move over).
            health_checks: config.spec.health_check.enabled
                && matches!(phase, None | Some(Phase::Complete)),
            cp_paused,
            pools,
        }
    }
}

fn machine_ctx(role: &str, name: &str, m: &crate::model::Machine, default_template: &str) -> Value {
    json!({
        "role": role,
        "name": name,
        "numCPUs": m.num_cpus,
        "memoryMiB": m.memory_mib,
        "diskGiB": m.disk_gib,
        "template": m.template.clone().unwrap_or_else(|| default_template.to_string()),
        // The control plane's own address pool (strategy `external`), set by the caller.
        "addressPool": Value::Null,
        // vSphere tag IDs CAPV attaches to the VMs (the control plane's anti-affinity tag),
        // set by the caller.
        "tagIDs": Value::Null,
    })
}

/// The name of a cluster's bootstrapped-guard admission policy and its binding (cluster
/// scoped, so the namespace is part of it): `<cluster>.<namespace>.bootstrapped.capstan.dev`.
pub fn guard_policy_name(config: &ClusterConfig) -> String {
    procedure_names(config).guard_policy()
}

/// The name of the admission policy (and binding), rendered in every phase of an existing
/// cluster, that refuses to scale a MachineDeployment with running machines to 0 unless
/// `spec.migration.acknowledge` lists `scale-workers-to-zero`.
pub fn keep_workers_policy_name(config: &ClusterConfig) -> String {
    format!(
        "{}.{}.keep-workers.capstan.dev",
        config.metadata.name, config.metadata.namespace
    )
}

/// The name of phase control-plane's admission policy (and binding) that keeps control-plane
/// Machines from getting a nodeRef while the TalosControlPlane is unpaused.
pub fn node_ref_policy_name(config: &ClusterConfig) -> String {
    procedure_names(config).node_ref_policy()
}

/// The ClusterRole (and binding) that lets the phase `workers`/`complete` Job delete the
/// nodeRef policy and its binding, by name only.
pub fn migration_cluster_role_name(config: &ClusterConfig) -> String {
    procedure_names(config).migration_cluster_role()
}

fn procedure_names(config: &ClusterConfig) -> crate::procedure::Names {
    crate::procedure::Names {
        namespace: config.metadata.namespace.clone(),
        cluster: config.metadata.name.clone(),
    }
}

/// The TalosControlPlane `apiVersion` of a flavour.
pub fn tcp_api_version(flavour: crate::model::Flavour) -> &'static str {
    match flavour {
        crate::model::Flavour::V1beta1 => "controlplane.cluster.x-k8s.io/v1alpha3",
        crate::model::Flavour::V1beta2 => "controlplane.cluster.x-k8s.io/v1beta1",
    }
}

/// The Talos configuration documents (Talos 1.12 and later) for `spec.talos`'s time servers,
/// nameservers and registry mirrors, each a strategic patch of its own.
fn talos_documents(t: &crate::model::TalosSettings) -> Vec<String> {
    let mut docs = Vec::new();
    if !t.time_servers.is_empty() {
        docs.push(json!({"apiVersion": "v1alpha1", "kind": "TimeSyncConfig", "ntp": {"servers": t.time_servers}}));
    }
    if !t.nameservers.is_empty() {
        let ns: Vec<Value> = t
            .nameservers
            .iter()
            .map(|a| json!({"address": a}))
            .collect();
        docs.push(json!({"apiVersion": "v1alpha1", "kind": "ResolverConfig", "nameservers": ns}));
    }
    for (registry, endpoints) in &t.registry_mirrors {
        let eps: Vec<Value> = endpoints
            .iter()
            .map(|u| {
                if crate::model::endpoint_has_path(u) {
                    json!({"url": u, "overridePath": true})
                } else {
                    json!({"url": u})
                }
            })
            .collect();
        docs.push(json!({"apiVersion": "v1alpha1", "kind": "RegistryMirrorConfig", "name": registry, "endpoints": eps}));
    }
    docs.iter().map(yaml::to_string).collect()
}

/// The template context. Every key is always present (absent optional inputs are `null`),
/// so strict undefined checking catches typos in templates without tripping on `if`.
fn context(config: &ClusterConfig, plan: &Plan) -> Value {
    let s = &config.spec;
    let name = &config.metadata.name;
    let talos_v = SemVer::parse(&s.versions.talos);
    let separate_documents = talos_v.is_some_and(|v| v.major > 1 || v.minor >= 12);
    // Talos accepts a list for an extraArgs value from v1.13 on; before, one string.
    let issuer_arg = match talos_v {
        Some(v) if v.major == 1 && v.minor >= 13 => json!(s.service_account.issuers),
        _ => json!(s
            .service_account
            .issuers
            .first()
            .cloned()
            .unwrap_or_default()),
    };
    let vsphere = s.vsphere.as_ref().map(|v| {
        json!({
            "server": v.server,
            "thumbprint": v.thumbprint,
            "datacenter": v.datacenter,
            "datastore": v.datastore,
            "folder": v.folder,
            "resourcePool": v.resource_pool,
            "network": v.network,
            "template": v.template,
            "cloneMode": v.clone_mode,
            "storagePolicyName": v.storage_policy_name,
            "identityRef": v.identity_ref.as_ref().map(|i| json!({"kind": i.kind, "name": i.name})),
        })
    });
    let mut cp_documents = if separate_documents {
        talos_documents(&s.talos)
    } else {
        Vec::new()
    };
    cp_documents.extend(endpoint::vip_document(config).iter().map(yaml::to_string));
    let mut cert_sans = s.api_server.cert_sans.clone();
    if let Some(v) = s.endpoint.active_vip() {
        if !cert_sans.contains(&v.address) {
            cert_sans.push(v.address.clone());
        }
    }
    json!({
        "cluster": {
            "name": name,
            "namespace": config.metadata.namespace,
            // The Kubernetes CA git records: the Jobs' guard compares the live `<name>-ca`.
            "caFingerprint": s.provenance.as_ref().and_then(|p| p.fingerprints.as_ref()).map(|f| &f.kubernetes_ca),
        },
        "flavour": s.flavour.as_str(),
        "labels": {"cluster.x-k8s.io/cluster-name": name},
        "names": {
            "cluster": name,
            "vsphereCluster": name,
            "controlPlane": plan.names.control_plane,
            "migration": format!("{name}-capstan-migration"),
            "guardPolicy": guard_policy_name(config),
            "nodeRefPolicy": node_ref_policy_name(config),
            "migrationClusterRole": migration_cluster_role_name(config),
            "keepWorkersPolicy": keep_workers_policy_name(config),
        },
        "talos": {
            "version": s.versions.talos,
            // The config contract: the minor, so a patch release changes what the machines
            // boot (the template), not every TalosConfig.
            "contract": SemVer::parse(&s.versions.talos).map_or_else(|| s.versions.talos.clone(), |v| format!("v{}.{}", v.major, v.minor)),
            "installImage": s.talos.install_image,
            // `cluster.discovery` (every machine, every minor: still in the v1alpha1 document
            // from Talos 1.12).
            "discovery": s.talos.discovery.as_ref().map(|d| json!({"endpoint": d.endpoint})),
            // Talos 1.12 moved time, resolvers and registry mirrors out of the v1alpha1
            // document (its schema no longer has them) into documents of their own.
            "timeServers": if separate_documents { json!([]) } else { json!(s.talos.time_servers) },
            "nameservers": if separate_documents { json!([]) } else { json!(s.talos.nameservers) },
            "registryMirrors": if separate_documents {
                json!({})
            } else {
                // containerd appends `/v2` to an endpoint unless told its path is the whole path.
                Value::Object(
                    s.talos
                        .registry_mirrors
                        .iter()
                        .map(|(r, eps)| {
                            let mut m = json!({"endpoints": eps});
                            if eps.iter().any(|e| crate::model::endpoint_has_path(e)) {
                                m["overridePath"] = json!(true);
                            }
                            (r.clone(), m)
                        })
                        .collect(),
                )
            },
            "documents": if separate_documents { talos_documents(&s.talos) } else { Vec::new() },
            // The control plane's: the same, and the VIP's document (strategy `vip`).
            "controlPlaneDocuments": cp_documents,
            "controlPlanePatch": Value::Null,
            "workerPatch": Value::Null,
        },
        "kubernetes": {"version": s.versions.kubernetes},
        "endpoint": endpoint::context(config),
        "network": {"pods": s.network.pods, "services": s.network.services, "dnsDomain": s.network.dns_domain},
        "serviceAccount": {
            "issuers": s.service_account.issuers,
            "audiences": s.service_account.audiences,
            "issuerArg": issuer_arg,
            "audiencesArg": s.service_account.audiences.join(","),
        },
        "apiServer": {
            // Clients may reach the apiservers by the VIP's address itself.
            "certSANs": cert_sans,
            "extraArgs": s.api_server.extra_args,
            "podSecurity": s.api_server.pod_security.map(|l| l.as_str()),
            // Talos v1.9+ (validation refuses it for v1.8): written as Talos's
            // AuthorizationConfiguration, Node and RBAC added when missing.
            "authorizationConfig": s.api_server.authorization_config,
        },
        "etcd": {"extraArgs": s.etcd.extra_args},
        "controllerManager": {"extraArgs": s.controller_manager.extra_args},
        "scheduler": {"extraArgs": s.scheduler.extra_args},
        "kubeProxy": {"disabled": s.kube_proxy.disabled},
        "kubelet": {"clusterDNS": s.kubelet.cluster_dns, "extraConfig": s.kubelet.extra_config},
        "healthCheck": {
            // An int-or-string: a count is a number, a percentage a string.
            "maxUnhealthy": s.health_check.max_unhealthy.parse::<u64>().map_or_else(|_| json!(s.health_check.max_unhealthy), |n| json!(n)),
            "nodeStartupTimeoutSeconds": s.health_check.node_startup_timeout_seconds,
            "unhealthyTimeoutSeconds": s.health_check.unhealthy_timeout_seconds,
        },
        "deletion": {
            "nodeDrainTimeoutSeconds": s.deletion.node_drain_timeout_seconds,
            "nodeVolumeDetachTimeoutSeconds": s.deletion.node_volume_detach_timeout_seconds,
            "nodeDeletionTimeoutSeconds": s.deletion.node_deletion_timeout_seconds,
        },
        "vsphere": vsphere,
        "controlPlane": {
            "replicas": plan.cp_replicas,
            "paused": plan.cp_paused,
            // The annotation the nodeRef policy applies under (phase control-plane only).
            "migrationPhase": plan.cp_paused.then_some("control-plane"),
            "apiVersion": tcp_api_version(s.flavour),
            "machineTemplate": plan.names.control_plane_machine_template,
        },
        "migration": s.migration.as_ref().map(|m| json!({"phase": m.phase.as_str(), "jobImage": m.job_image})),
        "machine": Value::Null,
        "pool": Value::Null,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::MINIMAL;
    use crate::overlay::Overlay;
    use crate::pipeline::interlocks::check_interlocks;
    use crate::procedure::PHASE_ANNOTATION;

    impl Renderer {
        /// One cluster through the pipeline's gate, templates and finish.
        fn render(
            &self,
            file: &str,
            config: &ClusterConfig,
            overlays: &[Arc<Overlay>],
        ) -> Result<Rendered, RenderError> {
            crate::pipeline::render_cluster(self, file, config, overlays)
        }
    }

    #[test]
    fn strings_are_written_as_minijinja_writes_them() {
        // minijinja's own JSON auto-escaping, against the formatter the Renderer installs.
        let render = |custom: bool, s: &str| {
            let mut env = Environment::new();
            env.set_auto_escape_callback(|_| AutoEscape::Json);
            if custom {
                env.set_formatter(format_value);
            }
            env.render_str(
                "{{ s }} {{ s|safe }} {{ n }} {{ l }}",
                minijinja::context! { s => s.to_string(), n => 7, l => vec![s.to_string()] },
            )
            .unwrap()
        };
        let mut every_byte: String = (0u8..0x7f).map(char::from).collect();
        every_byte.push_str("é€😀<>&'");
        for s in [
            "",
            "plain",
            "quote \" and backslash \\ and / slash",
            "lines\nand\ttabs\r\n",
            "cluster:\n  network:\n    cni:\n      name: none\n",
            "\u{1}\u{1f}\u{8}\u{c}",
            &every_byte,
        ] {
            assert_eq!(render(true, s), render(false, s), "{s:?}");
        }
        // What YAML cannot carry raw (DEL, C1, line separators, BOM) is escaped, in strings
        // and inside lists, where minijinja writes it raw.
        let s = "a\u{7f}b\u{85}c\u{2028}d\u{feff}e";
        let want = r#""a\u007fb\u0085c\u2028d\ufeffe""#;
        assert_eq!(render(true, s), format!("{want} {s} 7 [{want}]"));
        // Safe strings pass as they are; numbers and lists stay minijinja's.
        assert_eq!(render(true, "a\"b"), r#""a\"b" a"b 7 ["a\"b"]"#);
    }

    fn config(text: &str) -> ClusterConfig {
        ClusterConfig::from_value("cluster.yaml", yaml::parse_one(text).unwrap()).unwrap()
    }

    /// A template override as `inputs::load_templates` returns one.
    fn template(name: &str, origin: &str, source: &str) -> TemplateOverride {
        TemplateOverride {
            name: name.into(),
            origin: origin.into(),
            source: source.into(),
        }
    }

    fn kinds(r: &Rendered) -> Vec<(String, String)> {
        r.resources
            .iter()
            .map(|x| (x.kind().to_string(), x.name().to_string()))
            .collect()
    }

    const POOLS: &str = "  workers:\n  - {name: general, replicas: 3, machine: {numCPUs: 4, memoryMiB: 16384, diskGiB: 80}}\n";

    #[test]
    fn every_flavour_has_every_object_template() {
        for flavour in crate::model::Flavour::ALL {
            for file in FLAVOUR_TEMPLATES {
                let name = format!("{}/{file}", flavour.as_str());
                assert!(
                    BUILTIN.iter().any(|(n, _)| *n == name),
                    "no built-in template {name}: add templates/{name} and its BUILTIN entry"
                );
            }
        }
    }

    #[test]
    fn renders_both_flavours_in_order() {
        let r = Renderer::new(&[]).unwrap();
        for flavour in ["v1beta1", "v1beta2"] {
            let c = config(
                &(MINIMAL.replace("flavour: v1beta1", &format!("flavour: {flavour}")) + POOLS),
            );
            let out = r.render("cluster.yaml", &c, &[]).unwrap();
            let k = kinds(&out);
            let kinds_only: Vec<&str> = k.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(
                kinds_only,
                [
                    "Cluster",
                    "VSphereCluster",
                    "VSphereMachineTemplate",
                    "VSphereMachineTemplate",
                    "TalosControlPlane",
                    "TalosConfigTemplate",
                    "MachineDeployment",
                    "MachineHealthCheck"
                ],
                "{flavour}"
            );
            assert!(k[2].1.starts_with("lab-f-cp-") && k[2].1.len() == "lab-f-cp-".len() + 10);
            let tcp = &out.resources[4].value;
            let patch = tcp
                .pointer("/spec/controlPlaneConfig/controlplane/strategicPatches/0")
                .unwrap()
                .as_str()
                .unwrap();
            assert!(patch.contains("cni:\n      name: none"), "{patch}");
            assert!(
                patch.contains(
                    "service-account-issuer: https://kubernetes.default.svc.cluster.local\n"
                ),
                "{patch}"
            );
            let md = &out.resources[6].value;
            assert_eq!(
                md.pointer("/spec/template/spec/version").unwrap(),
                "v1.30.4"
            );
            assert_eq!(md.pointer("/spec/replicas").unwrap(), 3);
            // References follow the hash names.
            let infra_name = md
                .pointer("/spec/template/spec/infrastructureRef/name")
                .unwrap()
                .as_str()
                .unwrap();
            assert_eq!(infra_name, k[3].1);
            let cfg_name = md
                .pointer("/spec/template/spec/bootstrap/configRef/name")
                .unwrap()
                .as_str()
                .unwrap();
            assert_eq!(cfg_name, k[5].1);
        }
    }

    #[test]
    fn deletion_timeouts_reach_machine_deployments_and_the_v1beta2_control_plane() {
        let r = Renderer::new(&[]).unwrap();
        let pool = "  workers:\n  - name: general\n    replicas: 1\n    machine: {numCPUs: 2, memoryMiB: 4096}\n";
        let find = |out: &Rendered, kind: &str| {
            out.resources
                .iter()
                .find(|x| x.kind() == kind)
                .unwrap()
                .value
                .clone()
        };
        // Defaults: Cluster API's own, nothing rendered: the drain waits for as long as a
        // PodDisruptionBudget refuses (no timeout that would delete the machine anyway),
        // volumes are waited for without limit.
        let out = r
            .render("cluster.yaml", &config(&format!("{MINIMAL}{pool}")), &[])
            .unwrap();
        let md = find(&out, "MachineDeployment");
        let spec = md.pointer("/spec/template/spec").unwrap();
        for field in [
            "nodeDrainTimeout",
            "nodeVolumeDetachTimeout",
            "nodeDeletionTimeout",
        ] {
            assert!(spec.get(field).is_none(), "{field}: {spec}");
        }
        let v2 = MINIMAL.replace("flavour: v1beta1", "flavour: v1beta2");
        let out = r
            .render("cluster.yaml", &config(&format!("{v2}{pool}")), &[])
            .unwrap();
        assert!(find(&out, "MachineDeployment")
            .pointer("/spec/template/spec/deletion")
            .is_none());
        assert!(find(&out, "TalosControlPlane")
            .pointer("/spec/machineTemplate/spec/deletion")
            .is_none());
        // Only the drain timeout given: the others stay unset.
        let drain = "  deletion: {nodeDrainTimeoutSeconds: 1800}\n";
        let out = r
            .render("cluster.yaml", &config(&format!("{v2}{pool}{drain}")), &[])
            .unwrap();
        assert_eq!(
            find(&out, "MachineDeployment").pointer("/spec/template/spec/deletion"),
            Some(&json!({"nodeDrainTimeoutSeconds": 1800}))
        );
        let set =
            "  deletion: {nodeDrainTimeoutSeconds: 600, nodeVolumeDetachTimeoutSeconds: 300}\n";
        let out = r
            .render(
                "cluster.yaml",
                &config(&format!("{MINIMAL}{pool}{set}")),
                &[],
            )
            .unwrap();
        let md = find(&out, "MachineDeployment");
        assert_eq!(
            md.pointer("/spec/template/spec/nodeDrainTimeout"),
            Some(&json!("600s"))
        );
        assert_eq!(
            md.pointer("/spec/template/spec/nodeVolumeDetachTimeout"),
            Some(&json!("300s"))
        );
        let out = r
            .render("cluster.yaml", &config(&format!("{v2}{pool}{set}")), &[])
            .unwrap();
        for (kind, path) in [
            ("MachineDeployment", "/spec/template/spec/deletion"),
            ("TalosControlPlane", "/spec/machineTemplate/spec/deletion"),
        ] {
            assert_eq!(
                find(&out, kind).pointer(path),
                Some(
                    &json!({"nodeDrainTimeoutSeconds": 600, "nodeVolumeDetachTimeoutSeconds": 300})
                ),
                "{kind}"
            );
        }
        // Beyond the CRDs' int32.
        let big = "  deletion: {nodeDrainTimeoutSeconds: 3000000000}\n";
        let e = r
            .render(
                "cluster.yaml",
                &config(&format!("{MINIMAL}{pool}{big}")),
                &[],
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("spec.deletion.nodeDrainTimeoutSeconds"), "{e}");
    }

    #[test]
    fn the_anti_affinity_tag_reaches_the_control_plane_template_only() {
        let r = Renderer::new(&[]).unwrap();
        let pool = "  workers:\n  - name: general\n    replicas: 1\n    machine: {numCPUs: 2, memoryMiB: 4096}\n";
        let tag = "urn:vmomi:InventoryServiceTag:3f6c1f0e-8d2a-4c1b-9e57-2b0d6a4e71c5:GLOBAL";
        let with_tag = |text: &str| {
            text.replace(
                "    replicas: 3\n",
                &format!("    replicas: 3\n    antiAffinity: {{tagID: \"{tag}\"}}\n"),
            )
        };
        for flavour in ["v1beta1", "v1beta2"] {
            let base = MINIMAL.replace("flavour: v1beta1", &format!("flavour: {flavour}")) + pool;
            let plain = r.render("cluster.yaml", &config(&base), &[]).unwrap();
            let tagged = r
                .render("cluster.yaml", &config(&with_tag(&base)), &[])
                .unwrap();
            let templates = |out: &Rendered| -> Vec<(String, Option<Value>)> {
                out.resources
                    .iter()
                    .filter(|x| x.kind() == "VSphereMachineTemplate")
                    .map(|x| {
                        (
                            x.name().to_string(),
                            x.value.pointer("/spec/template/spec/tagIDs").cloned(),
                        )
                    })
                    .collect()
            };
            let (p, t) = (templates(&plain), templates(&tagged));
            assert!(p.iter().all(|(_, tags)| tags.is_none()), "{flavour}: {p:?}");
            assert_eq!(t[0].1, Some(json!([tag])), "{flavour}: the control plane's");
            assert!(
                t[0].0.starts_with("cluster-cp-") || t[0].0.contains("-cp-"),
                "{t:?}"
            );
            assert_eq!(t[1].1, None, "{flavour}: not the workers'");
            // The spec changed: the control-plane template is renamed (the machines roll), the
            // workers' is not.
            assert_ne!(p[0].0, t[0].0);
            assert_eq!(p[1].0, t[1].0);
        }
        // A display name is refused with the field and what to use instead.
        let e = r
            .render(
                "cluster.yaml",
                &config(&MINIMAL.replace(
                    "    replicas: 3\n",
                    "    replicas: 3\n    antiAffinity: {tagID: lab-f-control-plane}\n",
                )),
                &[],
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("spec.controlPlane.antiAffinity.tagID") && e.contains("govc tags.create"),
            "{e}"
        );
    }

    #[test]
    fn talos_settings_reach_every_patch_and_the_contract_is_the_minor() {
        let r = Renderer::new(&[]).unwrap();
        let text = format!(
            "{MINIMAL}  workers:\n  - name: general\n    replicas: 1\n    machine: {{numCPUs: 2, memoryMiB: 4096}}\n  talos:\n    installImage: factory.talos.dev/installer/abc:v1.10.6\n    timeServers: [ntp.example.internal]\n    nameservers: [10.0.0.53]\n    registryMirrors: {{ghcr.io: [https://mirror.example.internal/v2/ghcr.io]}}\n"
        );
        let out = r.render("cluster.yaml", &config(&text), &[]).unwrap();
        for (kind, pointer) in [
            ("TalosControlPlane", "/spec/controlPlaneConfig/controlplane"),
            ("TalosConfigTemplate", "/spec/template/spec"),
        ] {
            let obj = &out
                .resources
                .iter()
                .find(|x| x.kind() == kind)
                .unwrap()
                .value;
            let cfg = obj.pointer(pointer).unwrap();
            assert_eq!(cfg["talosVersion"], "v1.10", "{kind}");
            let p = yaml::parse_one(cfg["strategicPatches"][0].as_str().unwrap()).unwrap();
            assert_eq!(
                p.pointer("/machine/install/image"),
                Some(&json!("factory.talos.dev/installer/abc:v1.10.6"))
            );
            assert_eq!(
                p.pointer("/machine/time/servers"),
                Some(&json!(["ntp.example.internal"]))
            );
            assert_eq!(
                p.pointer("/machine/network/nameservers"),
                Some(&json!(["10.0.0.53"]))
            );
            assert_eq!(
                p.pointer("/machine/registries/mirrors/ghcr.io"),
                Some(
                    &json!({"endpoints": ["https://mirror.example.internal/v2/ghcr.io"], "overridePath": true})
                )
            );
        }
        // Talos 1.12 and later: time, resolvers and mirrors are documents of their own.
        let v13 = text
            .replace(
                "talos: v1.10.6, kubernetes: v1.30.4",
                "talos: v1.13.2, kubernetes: v1.34.1",
            )
            .replace("template: talos-v1.10.6", "template: talos-v1.13.2")
            .replace("abc:v1.10.6", "abc:v1.13.2");
        let out = r.render("cluster.yaml", &config(&v13), &[]).unwrap();
        let tct = &out
            .resources
            .iter()
            .find(|x| x.kind() == "TalosConfigTemplate")
            .unwrap()
            .value;
        let patches: Vec<Value> = tct
            .pointer("/spec/template/spec/strategicPatches")
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .map(|p| yaml::parse_one(p.as_str().unwrap()).unwrap())
            .collect();
        assert!(
            patches[0].pointer("/machine/time").is_none()
                && patches[0].pointer("/machine/registries").is_none()
        );
        assert_eq!(
            patches[0].pointer("/machine/install/image"),
            Some(&json!("factory.talos.dev/installer/abc:v1.13.2"))
        );
        assert_eq!(
            patches[1..].to_vec(),
            vec![
                json!({"apiVersion": "v1alpha1", "kind": "TimeSyncConfig", "ntp": {"servers": ["ntp.example.internal"]}}),
                json!({"apiVersion": "v1alpha1", "kind": "ResolverConfig", "nameservers": [{"address": "10.0.0.53"}]}),
                // A path in the endpoint: containerd must not append `/v2` to it.
                json!({"apiVersion": "v1alpha1", "kind": "RegistryMirrorConfig", "name": "ghcr.io", "endpoints": [{"url": "https://mirror.example.internal/v2/ghcr.io", "overridePath": true}]}),
            ]
        );
        let e = r
            .render(
                "cluster.yaml",
                &config(&format!("{MINIMAL}  talos:\n    installImage: ghcr.io/siderolabs/installer:v1.10.5\n    nameservers: [dns]\n    registryMirrors: {{docker.io: [mirror.local]}}\n")),
                &[],
            )
            .unwrap_err()
            .to_string();
        for needle in [
            "spec.talos.installImage: tag `v1.10.5` is not spec.versions.talos `v1.10.6`",
            "spec.talos.nameservers[0]: expected an IP address",
            "spec.talos.registryMirrors.docker.io[0]: expected an http(s) URL",
        ] {
            assert!(e.contains(needle), "{needle} not in {e}");
        }
    }

    #[test]
    fn worker_health_checks_once_the_migration_is_complete() {
        let r = Renderer::new(&[]).unwrap();
        let pool = "  workers:\n  - name: general\n    replicas: 1\n    machine: {numCPUs: 2, memoryMiB: 4096}\n";
        let mhcs = |text: &str| -> Vec<Value> {
            r.render("cluster.yaml", &config(text), &[])
                .unwrap()
                .resources
                .into_iter()
                .filter(|x| x.kind() == "MachineHealthCheck")
                .map(|x| x.value)
                .collect()
        };
        // Not migrating: one per pool, selecting the pool's machines.
        let m = mhcs(&format!("{MINIMAL}{pool}"));
        assert_eq!(m.len(), 1);
        assert_eq!(m[0]["metadata"]["name"], "lab-f-general");
        assert_eq!(
            m[0].pointer("/spec/selector/matchLabels/cluster.x-k8s.io~1deployment-name"),
            Some(&json!("lab-f-general"))
        );
        assert_eq!(m[0]["spec"]["maxUnhealthy"], "40%");
        assert_eq!(m[0]["spec"]["nodeStartupTimeout"], "1800s");
        // While pools move over: none; phase complete: again.
        let migrating = |phase: &str| {
            format!("{MINIMAL}{pool}  migration:\n    phase: {phase}\n    jobImage: i\n    providers: {{cluster-api: v1.10.10, bootstrap-talos: v0.6.12, control-plane-talos: v0.5.12, infrastructure-vsphere: v1.13.1}}\n")
        };
        assert!(mhcs(&migrating("workers")).is_empty());
        assert_eq!(mhcs(&migrating("complete")).len(), 1);
        // A count written as a number is a count.
        let m = mhcs(&format!(
            "{MINIMAL}{pool}  healthCheck: {{maxUnhealthy: 2}}\n"
        ));
        assert_eq!(m[0]["spec"]["maxUnhealthy"], 2);
        let e = r
            .render(
                "c",
                &config(&format!(
                    "{MINIMAL}{pool}  healthCheck: {{nodeStartupTimeoutSeconds: 10}}\n"
                )),
                &[],
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "spec.healthCheck.nodeStartupTimeoutSeconds: expected 0 (no limit) or at least 30"
            ),
            "{e}"
        );
        // Disabled, or a count instead of a percentage (a number: an int-or-string).
        assert!(mhcs(&format!(
            "{MINIMAL}{pool}  healthCheck: {{enabled: false}}\n"
        ))
        .is_empty());
        let v2 = MINIMAL.replace("flavour: v1beta1", "flavour: v1beta2");
        let m = mhcs(&format!(
            "{v2}{pool}  healthCheck: {{maxUnhealthy: \"2\", unhealthyTimeoutSeconds: 600}}\n"
        ));
        assert_eq!(
            m[0].pointer("/spec/remediation/triggerIf/unhealthyLessThanOrEqualTo"),
            Some(&json!(2))
        );
        assert_eq!(
            m[0].pointer("/spec/checks/unhealthyNodeConditions/0/timeoutSeconds"),
            Some(&json!(600))
        );
        let e = r
            .render(
                "c",
                &config(&format!(
                    "{MINIMAL}{pool}  healthCheck: {{maxUnhealthy: 140%}}\n"
                )),
                &[],
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("spec.healthCheck.maxUnhealthy: expected a count or a percentage"),
            "{e}"
        );
    }

    #[test]
    fn pool_labels_and_taints_reach_their_pool_only() {
        let r = Renderer::new(&[]).unwrap();
        let pools = "  workers:\n  - name: general\n    replicas: 1\n    machine: {numCPUs: 2, memoryMiB: 4096}\n  - name: ingress\n    replicas: 1\n    machine: {numCPUs: 2, memoryMiB: 4096}\n    labels: {node-role.kubernetes.io/ingress: \"\", node-restriction.kubernetes.io/dedicated: ingress, example.com/tier: edge, node.kubernetes.io/pool: ingress, sub.node.kubernetes.io/x: y}\n    taints: [{key: dedicated, value: ingress, effect: NoSchedule}]\n";
        for flavour in ["v1beta1", "v1beta2"] {
            let text = MINIMAL.replace("flavour: v1beta1", &format!("flavour: {flavour}")) + pools;
            let out = r.render("cluster.yaml", &config(&text), &[]).unwrap();
            let of = |kind: &str, pool: &str| {
                out.resources
                    .iter()
                    .find(|x| x.kind() == kind && x.name().starts_with(&format!("lab-f-{pool}")))
                    .unwrap()
                    .value
                    .clone()
            };
            let patch = |pool: &str| {
                let tct = of("TalosConfigTemplate", pool);
                let text = tct
                    .pointer("/spec/template/spec/strategicPatches/0")
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string();
                yaml::parse_one(&text).unwrap()
            };
            let p = patch("ingress");
            assert_eq!(
                p.pointer("/machine/nodeLabels").unwrap(),
                &json!({"example.com/tier": "edge", "node.kubernetes.io/pool": "ingress", "sub.node.kubernetes.io/x": "y"}),
                "{flavour}"
            );
            assert_eq!(
                p.pointer("/machine/kubelet/extraConfig/registerWithTaints")
                    .unwrap(),
                &json!([{"key": "dedicated", "value": "ingress", "effect": "NoSchedule"}])
            );
            // node-role labels go through the Machine: Cluster API syncs them to the Node.
            let md = of("MachineDeployment", "ingress");
            assert_eq!(
                md.pointer("/spec/template/metadata/labels/node-role.kubernetes.io~1ingress"),
                Some(&json!(""))
            );
            assert_eq!(
                md.pointer(
                    "/spec/template/metadata/labels/node-restriction.kubernetes.io~1dedicated"
                ),
                Some(&json!("ingress"))
            );
            assert!(patch("general").get("machine").is_none(), "{flavour}");
            // Labels without taints: no empty kubelet section.
            let only_labels = text.replace(
                "    taints: [{key: dedicated, value: ingress, effect: NoSchedule}]\n",
                "",
            );
            let out2 = r
                .render("cluster.yaml", &config(&only_labels), &[])
                .unwrap();
            let tct = out2
                .resources
                .iter()
                .find(|x| {
                    x.kind() == "TalosConfigTemplate" && x.name().starts_with("lab-f-ingress")
                })
                .unwrap();
            let p2 = yaml::parse_one(
                tct.value
                    .pointer("/spec/template/spec/strategicPatches/0")
                    .unwrap()
                    .as_str()
                    .unwrap(),
            )
            .unwrap();
            assert!(p2.pointer("/machine/nodeLabels").is_some());
            assert!(p2.pointer("/machine/kubelet").is_none(), "{p2}");
            assert!(of("MachineDeployment", "general")
                .pointer("/spec/template/metadata/labels/node-role.kubernetes.io~1ingress")
                .is_none());
            // Different patches, different template names.
            assert_ne!(
                of("TalosConfigTemplate", "ingress")
                    .pointer("/metadata/name")
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .rsplit('-')
                    .next(),
                of("TalosConfigTemplate", "general")
                    .pointer("/metadata/name")
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .rsplit('-')
                    .next()
            );
        }
        // Labels no one may set are refused with the path.
        let bad = MINIMAL.to_string()
            + "  workers:\n  - name: general\n    replicas: 1\n    machine: {numCPUs: 2, memoryMiB: 4096}\n    labels: {kubernetes.io/role: x, \"bad key!\": y}\n    taints: [{key: a, effect: NoSchedule}, {key: a, effect: NoSchedule}]\n";
        let e = r
            .render("cluster.yaml", &config(&bad), &[])
            .unwrap_err()
            .to_string();
        for needle in [
            "spec.workers[0].labels.kubernetes.io/role: a label in the kubernetes.io/k8s.io domains",
            "spec.workers[0].labels.bad key!: expected a label key",
            "spec.workers[0].taints[1]: duplicate taint `a:NoSchedule`",
        ] {
            assert!(e.contains(needle), "{needle} not in {e}");
        }
    }

    #[test]
    fn kubeadm_parity_fields_reach_the_control_plane_patch() {
        let r = Renderer::new(&[]).unwrap();
        let patch_of = |c: &ClusterConfig| {
            let out = r.render("cluster.yaml", c, &[]).unwrap();
            let tcp = out
                .resources
                .iter()
                .find(|x| x.kind() == "TalosControlPlane")
                .unwrap();
            let text = tcp
                .value
                .pointer("/spec/controlPlaneConfig/controlplane/strategicPatches/0")
                .unwrap()
                .as_str()
                .unwrap()
                .to_string();
            yaml::parse_one(&text).unwrap()
        };
        let plain = patch_of(&config(MINIMAL));
        // MINIMAL's endpoint strategy is a VIP (Talos 1.10: a field of the interface): its
        // address is a SAN, so clients can use it directly.
        assert_eq!(
            plain.pointer("/cluster/apiServer/certSANs"),
            Some(&json!(["10.0.0.50"]))
        );
        assert_eq!(
            plain.pointer("/machine/network/interfaces"),
            Some(&json!([{"interface": "ens192", "vip": {"ip": "10.0.0.50"}}]))
        );
        assert!(plain
            .pointer("/cluster/apiServer/admissionControl")
            .is_none());
        assert!(plain.pointer("/cluster/etcd").is_none());
        assert!(plain.pointer("/cluster/proxy").is_none());
        // Not set: not written (D19).
        assert!(plain.pointer("/cluster/controllerManager").is_none());
        assert!(plain.pointer("/cluster/scheduler").is_none());
        // Every Talos kubelet runs --cloud-provider=external (B2).
        assert_eq!(
            plain.pointer("/cluster/externalCloudProvider/enabled"),
            Some(&json!(true))
        );
        let c = config(&format!(
            "{MINIMAL}  apiServer:\n    certSANs: [api.example, 10.0.0.100]\n    extraArgs: {{anonymous-auth: \"true\", oidc-issuer-url: https://dex.example}}\n    podSecurity: privileged\n  etcd:\n    extraArgs: {{quota-backend-bytes: \"8589934592\"}}\n  controllerManager:\n    extraArgs: {{node-monitor-grace-period: 20s, controllers: bootstrapsigner}}\n  scheduler:\n    extraArgs: {{kube-api-qps: \"100\"}}\n  kubeProxy: {{disabled: true}}\n"
        ));
        let p = patch_of(&c);
        assert_eq!(
            p.pointer("/cluster/controllerManager/extraArgs"),
            Some(&json!({"controllers": "bootstrapsigner", "node-monitor-grace-period": "20s"}))
        );
        assert_eq!(
            p.pointer("/cluster/scheduler/extraArgs"),
            Some(&json!({"kube-api-qps": "100"}))
        );
        assert_eq!(p.pointer("/cluster/proxy/disabled"), Some(&json!(true)));
        // Only the VIP's interface is under `machine` without the kubelet settings.
        assert_eq!(
            plain
                .get("machine")
                .map(|m| m.as_object().map(|o| o.keys().collect::<Vec<_>>())),
            Some(Some(vec![&"network".to_string()]))
        );
        let ck = config(&format!(
            "{MINIMAL}  kubelet:\n    clusterDNS: [169.254.20.10]\n    extraConfig: {{maxPods: 250, systemReserved: {{cpu: 500m}}}}\n"
        ));
        let pk = patch_of(&ck);
        assert_eq!(
            pk.pointer("/machine/kubelet/clusterDNS"),
            Some(&json!(["169.254.20.10"]))
        );
        assert_eq!(
            pk.pointer("/machine/kubelet/extraConfig"),
            Some(&json!({"maxPods": 250, "systemReserved": {"cpu": "500m"}}))
        );
        let e = r
            .render(
                "cluster.yaml",
                &config(&format!("{MINIMAL}  kubelet:\n    clusterDNS: [dns]\n    extraConfig: {{cgroupRoot: /x, registerWithTaints: []}}\n")),
                &[],
            )
            .unwrap_err()
            .to_string();
        for needle in [
            "spec.kubelet.clusterDNS[0]: expected an IP address",
            "spec.kubelet.extraConfig.cgroupRoot: not allowed: Talos manages it",
            "spec.kubelet.extraConfig.registerWithTaints: not allowed: set spec.workers[].taints",
        ] {
            assert!(e.contains(needle), "{needle} not in {e}");
        }
        assert_eq!(
            p.pointer("/cluster/apiServer/certSANs").unwrap(),
            &json!(["api.example", "10.0.0.100", "10.0.0.50"])
        );
        let args = p.pointer("/cluster/apiServer/extraArgs").unwrap();
        assert_eq!(args["anonymous-auth"], "true");
        assert_eq!(args["oidc-issuer-url"], "https://dex.example");
        assert!(args["service-account-issuer"].is_string());
        assert_eq!(
            p.pointer("/cluster/apiServer/admissionControl/0/configuration/defaults/enforce")
                .unwrap(),
            "privileged"
        );
        assert_eq!(
            p.pointer("/cluster/apiServer/admissionControl/0/name")
                .unwrap(),
            "PodSecurity"
        );
        assert_eq!(
            p.pointer("/cluster/etcd/extraArgs/quota-backend-bytes")
                .unwrap(),
            "8589934592"
        );
        // What Talos manages is refused before rendering.
        let bad = ClusterConfig::from_value(
            "cluster.yaml",
            yaml::parse_one(&format!(
                "{MINIMAL}  apiServer:\n    extraArgs: {{etcd-servers: https://x:2379}}\n  etcd:\n    extraArgs: {{data-dir: /x}}\n"
            ))
            .unwrap(),
        )
        .unwrap();
        let problems = bad.validate(crate::model::Purpose::Render);
        let text = format!("{problems:?}");
        assert!(
            text.contains("spec.apiServer.extraArgs.etcd-servers"),
            "{text}"
        );
        assert!(text.contains("spec.etcd.extraArgs.data-dir"), "{text}");
    }

    /// spec.apiServer.authorizationConfig reaches `cluster.apiServer.authorizationConfig` as
    /// written (Talos adds Node and RBAC itself), and is refused where Talos lacks or ignores
    /// it, or beside the extra args Talos refuses it with.
    #[test]
    fn authorization_config_reaches_the_control_plane_patch_from_talos_1_9() {
        let r = Renderer::new(&[]).unwrap();
        let authz = "  apiServer:\n    authorizationConfig:\n    - type: Webhook\n      name: opa\n      webhook: {timeout: 3s, subjectAccessReviewVersion: v1, matchConditionSubjectAccessReviewVersion: v1, failurePolicy: Deny, connectionInfo: {type: KubeConfigFile, kubeConfigFile: /etc/kubernetes/authz/opa.kubeconfig}}\n    - {type: RBAC, name: rbac}\n";
        let c = config(&format!("{MINIMAL}{authz}"));
        let out = r.render("cluster.yaml", &c, &[]).unwrap();
        let tcp = out
            .resources
            .iter()
            .find(|x| x.kind() == "TalosControlPlane")
            .unwrap();
        let text = tcp
            .value
            .pointer("/spec/controlPlaneConfig/controlplane/strategicPatches/0")
            .and_then(Value::as_str)
            .unwrap();
        let p = yaml::parse_one(text).unwrap();
        assert_eq!(
            p.pointer("/cluster/apiServer/authorizationConfig"),
            Some(&json!([
                {"type": "Webhook", "name": "opa", "webhook": {"timeout": "3s", "subjectAccessReviewVersion": "v1", "matchConditionSubjectAccessReviewVersion": "v1", "failurePolicy": "Deny", "connectionInfo": {"type": "KubeConfigFile", "kubeConfigFile": "/etc/kubernetes/authz/opa.kubeconfig"}}},
                {"type": "RBAC", "name": "rbac"}
            ]))
        );
        // Absent: not written (Talos's own Node, RBAC).
        let plain = r.render("cluster.yaml", &config(MINIMAL), &[]).unwrap();
        assert!(!format!("{:?}", plain.resources).contains("authorizationConfig"));
        // Talos v1.8: no such field.
        let v18 = config(&format!(
            "{}{authz}",
            MINIMAL
                .replace("talos: v1.10.6", "talos: v1.8.4")
                .replace("template: talos-v1.10.6", "template: talos-v1.8.4")
        ));
        let e = r.render("cluster.yaml", &v18, &[]).unwrap_err().to_string();
        assert!(
            e.contains("spec.apiServer.authorizationConfig: Talos v1.8.4 has no cluster.apiServer.authorizationConfig"),
            "{e}"
        );
        // Beside authorization-mode, a nameless or webhook-less authorizer, a duplicate name.
        let bad = config(&format!(
            "{MINIMAL}  apiServer:\n    extraArgs: {{authorization-mode: \"Node,RBAC,Webhook\", authorization-config: /etc/x.yaml}}\n    authorizationConfig:\n    - {{type: Webhook, name: opa}}\n    - {{type: RBAC, name: opa, webhook: {{timeout: 3s}}}}\n    - {{type: Node, name: \"\"}}\n"
        ));
        let e = r.render("cluster.yaml", &bad, &[]).unwrap_err().to_string();
        for needle in [
            "spec.apiServer.extraArgs.authorization-mode: Talos refuses `authorization-mode` beside cluster.apiServer.authorizationConfig",
            "spec.apiServer.extraArgs.authorization-config: capstan does not carry `authorization-config` as an extra arg: set spec.apiServer.authorizationConfig",
            "spec.apiServer.authorizationConfig[0].webhook: missing",
            "spec.apiServer.authorizationConfig[1].name: `opa` names two authorizers",
            "spec.apiServer.authorizationConfig[1].webhook: only a `Webhook` authorizer",
            "spec.apiServer.authorizationConfig[2].name: missing",
        ] {
            assert!(e.contains(needle), "{needle} not in {e}");
        }
        // An unknown type is refused when the file is read.
        let unknown = yaml::parse_one(&format!(
            "{MINIMAL}  apiServer:\n    authorizationConfig: [{{type: ABAC, name: abac}}]\n"
        ))
        .unwrap();
        assert!(ClusterConfig::from_value("cluster.yaml", unknown).is_err());
    }

    #[test]
    fn issuer_list_from_talos_1_13() {
        let r = Renderer::new(&[]).unwrap();
        let c = config(
            &MINIMAL
                .replace("talos: v1.10.6, kubernetes: v1.30.4", "talos: v1.13.2, kubernetes: v1.34.1")
                .replace("template: talos-v1.10.6", "template: talos-v1.13.2")
                .replace(
                    "issuers: [https://kubernetes.default.svc.cluster.local]",
                    "issuers: [https://kubernetes.default.svc.cluster.local, https://lab-f.example.internal:6443]",
                ),
        );
        let out = r.render("cluster.yaml", &c, &[]).unwrap();
        let tcp = out
            .resources
            .iter()
            .find(|x| x.kind() == "TalosControlPlane")
            .unwrap();
        let patch = tcp
            .value
            .pointer("/spec/controlPlaneConfig/controlplane/strategicPatches/0")
            .unwrap()
            .as_str()
            .unwrap();
        let parsed = yaml::parse_one(patch).unwrap();
        assert_eq!(
            parsed
                .pointer("/cluster/apiServer/extraArgs/service-account-issuer")
                .unwrap(),
            &json!([
                "https://kubernetes.default.svc.cluster.local",
                "https://lab-f.example.internal:6443"
            ])
        );
    }

    #[test]
    fn spec_change_renames_template() {
        let r = Renderer::new(&[]).unwrap();
        let a = r.render("c", &config(MINIMAL), &[]).unwrap();
        let b = r
            .render(
                "c",
                &config(&MINIMAL.replace("numCPUs: 4", "numCPUs: 8")),
                &[],
            )
            .unwrap();
        assert_ne!(a.resources[2].name(), b.resources[2].name());
        let c = r.render("c", &config(MINIMAL), &[]).unwrap();
        assert_eq!(a, c, "same input, same output");
    }

    #[test]
    #[expect(clippy::too_many_lines, reason = "a test scenario read top to bottom")]
    fn phases_set_replicas_pause_and_jobs() {
        let r = Renderer::new(&[]).unwrap();
        let base = MINIMAL.to_string()
            + POOLS
            + "  migration:\n    phase: PHASE\n    jobImage: mirror/alpine/k8s:1.33.4\n    acknowledge: [etcd-audit, control-plane-anti-affinity]\n    kubeadm:\n      etcdMembers: [ETCD]\n"
            + crate::model::tests::PROVIDERS;
        let render = |phase: &str, etcd: &str| {
            r.render(
                "c",
                &config(&base.replace("PHASE", phase).replace("[ETCD]", etcd)),
                &[],
            )
        };
        let summary = |out: &Rendered| -> Vec<String> {
            out.resources
                .iter()
                .map(|x| {
                    let reps = x
                        .value
                        .pointer("/spec/replicas")
                        .map(|v| format!(" replicas={v}"))
                        .unwrap_or_default();
                    let paused = x
                        .value
                        .pointer("/metadata/annotations/cluster.x-k8s.io~1paused")
                        .map(|v| format!(" paused={v}"))
                        .unwrap_or_default();
                    let phase = x
                        .value
                        .pointer("/metadata/annotations/capstan.dev~1migration-phase")
                        .map(|v| format!(" migration-phase={v}"))
                        .unwrap_or_default();
                    let name = if x.kind() == "Job" {
                        x.name().rsplit_once('-').unwrap().0.to_string()
                    } else {
                        x.name().to_string()
                    };
                    format!("{} {name}{reps}{paused}{phase}", x.kind())
                })
                .filter(|l| {
                    !l.starts_with("VSphere")
                        && !l.starts_with("TalosConfig")
                        && !l.starts_with("Cluster ")
                        && !l.starts_with("ServiceAccount")
                        && !l.starts_with("Role")
                })
                .collect()
        };
        // In every phase: the bootstrapped guard, and the policy that keeps running workers
        // from being scaled to 0 (a phase revert renders the pools at 0).
        let guard = [
            "ValidatingAdmissionPolicy lab-f.lab-f.bootstrapped.capstan.dev",
            "ValidatingAdmissionPolicyBinding lab-f.lab-f.bootstrapped.capstan.dev",
            "ValidatingAdmissionPolicy lab-f.lab-f.keep-workers.capstan.dev",
            "ValidatingAdmissionPolicyBinding lab-f.lab-f.keep-workers.capstan.dev",
        ];
        let with_guard = |rest: &[&str]| -> Vec<String> {
            guard.iter().chain(rest).map(|s| s.to_string()).collect()
        };
        assert_eq!(
            summary(&render("prepare", "[cp-1]").unwrap()),
            with_guard(&[
                "TalosControlPlane lab-f-cp replicas=0",
                "MachineDeployment lab-f-general replicas=0",
                "Job lab-f-capstan-migration-bootstrapped"
            ])
        );
        assert_eq!(
            summary(&render("control-plane", "[cp-1]").unwrap()),
            with_guard(&[
                "ValidatingAdmissionPolicy lab-f.lab-f.paused-node-refs.capstan.dev",
                "ValidatingAdmissionPolicyBinding lab-f.lab-f.paused-node-refs.capstan.dev",
                "TalosControlPlane lab-f-cp replicas=3 paused=\"true\" migration-phase=\"control-plane\"",
                "MachineDeployment lab-f-general replicas=0",
                "Job lab-f-capstan-migration-scale-control-plane"
            ])
        );
        for phase in ["workers", "complete"] {
            // The worker health checks come once the workers have moved over.
            let mhc: &[&str] = if phase == "complete" {
                &["MachineHealthCheck lab-f-general"]
            } else {
                &[]
            };
            // The Job's leave to delete phase control-plane's nodeRef policy, by name.
            let mut want = vec![
                "ClusterRole lab-f.lab-f.capstan-migration",
                "ClusterRoleBinding lab-f.lab-f.capstan-migration",
                "TalosControlPlane lab-f-cp replicas=3",
                "MachineDeployment lab-f-general replicas=3",
            ];
            want.extend_from_slice(mhc);
            want.push("Job lab-f-capstan-migration-unpause-control-plane");
            assert_eq!(
                summary(&render(phase, "[]").unwrap()),
                with_guard(&want),
                "{phase}"
            );
        }
        // A cluster that is not imported and not migrating is a new one: the provider
        // bootstraps it, so no guard.
        let greenfield = r
            .render("c", &config(&(MINIMAL.to_string() + POOLS)), &[])
            .unwrap();
        assert_eq!(
            summary(&greenfield),
            [
                "TalosControlPlane lab-f-cp replicas=3",
                "MachineDeployment lab-f-general replicas=3",
                "MachineHealthCheck lab-f-general"
            ]
        );
        // Unsafe states are refused with the reason.
        let e = render("workers", "[cp-1]").unwrap_err().to_string();
        assert!(
            e.contains("spec.migration.kubeadm: phase `workers` unpauses the TalosControlPlane"),
            "{e}"
        );
        let e = render("control-plane", "[]").unwrap_err().to_string();
        assert!(e.contains("spec.migration.kubeadm.etcdMembers: phase `control-plane` needs the kubeadm etcd member names"), "{e}");
        for (ack, missing) in [
            ("[control-plane-anti-affinity]", "requires `etcd-audit`"),
            ("[etcd-audit]", "requires `control-plane-anti-affinity`"),
        ] {
            let text = base
                .replace("[etcd-audit, control-plane-anti-affinity]", ack)
                .replace("PHASE", "control-plane")
                .replace("[ETCD]", "[cp-1]");
            let e = r.render("c", &config(&text), &[]).unwrap_err().to_string();
            assert!(
                e.contains(&format!(
                    "spec.migration.acknowledge: phase `control-plane` {missing}"
                )),
                "{e}"
            );
        }
        for phase in ["prepare", "complete"] {
            let no_image = base
                .replace("    jobImage: mirror/alpine/k8s:1.33.4\n", "")
                .replace("PHASE", phase)
                .replace("[ETCD]", if phase == "prepare" { "[cp-1]" } else { "[]" });
            let e = r
                .render("c", &config(&no_image), &[])
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!(
                    "spec.migration.jobImage: required in phase `{phase}`"
                )),
                "{e}"
            );
        }
        let no_providers = base
            .replace(crate::model::tests::PROVIDERS, "")
            .replace("PHASE", "workers")
            .replace("[ETCD]", "[]");
        let e = r
            .render("c", &config(&no_providers), &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("spec.migration.providers: required in phase `workers`"),
            "{e}"
        );
        // An imported cluster without a phase is refused, naming the field and the choices.
        let imported = MINIMAL.to_string() + "  provenance: {importedFrom: kubeadm}\n";
        let e = r
            .render("c", &config(&imported), &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("spec.migration.phase: required for a cluster imported from kubeadm")
                && e.contains("`prepare`, `control-plane`, `workers`, `complete`"),
            "{e}"
        );
    }

    /// D13: a phase regression renders every pool at 0; render marks a pool it may take to 0
    /// only when cluster.yaml acknowledges it, and the acknowledgement cannot outlive the
    /// change it acknowledges.
    #[test]
    fn scaling_workers_to_zero_needs_an_acknowledgement() {
        let r = Renderer::new(&[]).unwrap();
        let base = MINIMAL.to_string()
            + "  workers:\n  - {name: general, replicas: 3, machine: {numCPUs: 4, memoryMiB: 16384}}\n  - {name: spare, replicas: REPLICAS, machine: {numCPUs: 2, memoryMiB: 4096}}\n"
            + "  migration:\n    phase: PHASE\n    jobImage: i\n    acknowledge: [ACK]\n    kubeadm:\n      etcdMembers: [ETCD]\n"
            + crate::model::tests::PROVIDERS;
        let render = |phase: &str, ack: &str, spare: &str| {
            let etcd = if matches!(phase, "prepare" | "control-plane") {
                "cp-1"
            } else {
                ""
            };
            let ack = if phase == "control-plane" {
                format!("etcd-audit, control-plane-anti-affinity, {ack}")
                    .trim_end_matches(", ")
                    .to_string()
            } else {
                ack.to_string()
            };
            r.render(
                "c",
                &config(
                    &base
                        .replace("PHASE", phase)
                        .replace("ACK", &ack)
                        .replace("ETCD", etcd)
                        .replace("REPLICAS", spare),
                ),
                &[],
            )
        };
        let acked = |out: &Rendered| -> Vec<(String, Option<u64>)> {
            out.resources
                .iter()
                .filter(|x| x.kind() == "MachineDeployment")
                .filter(|x| {
                    x.value
                        .pointer("/metadata/annotations/capstan.dev~1scale-to-zero")
                        .is_some_and(|v| v == "acknowledged")
                })
                .map(|x| {
                    (
                        x.name().to_string(),
                        x.value.pointer("/spec/replicas").and_then(Value::as_u64),
                    )
                })
                .collect()
        };
        // A revert to control-plane or prepare without the acknowledgement: the pools are
        // rendered at 0 and carry nothing the policy would let through.
        for phase in ["prepare", "control-plane"] {
            let out = render(phase, "", "1").unwrap();
            assert!(acked(&out).is_empty(), "{phase}");
            assert!(out
                .resources
                .iter()
                .any(|x| x.name() == "lab-f.lab-f.keep-workers.capstan.dev"));
            // Acknowledged: every pool (all at 0) carries it.
            let out = render(phase, "scale-workers-to-zero", "1").unwrap();
            assert_eq!(
                acked(&out),
                [
                    ("lab-f-general".to_string(), Some(0)),
                    ("lab-f-spare".to_string(), Some(0))
                ],
                "{phase}"
            );
        }
        // After the phases: only a pool declared at 0.
        for phase in ["workers", "complete"] {
            let out = render(phase, "scale-workers-to-zero", "0").unwrap();
            assert_eq!(
                acked(&out),
                [("lab-f-spare".to_string(), Some(0))],
                "{phase}"
            );
            assert!(acked(&render(phase, "", "0").unwrap()).is_empty());
            // Stale: no pool at 0 any more (moved on from the revert). Refused, so the next
            // revert must be acknowledged afresh.
            let e = render(phase, "scale-workers-to-zero", "1")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("spec.migration.acknowledge: `scale-workers-to-zero` acknowledges nothing in phase"),
                "{e}"
            );
        }
    }

    #[test]
    fn interlocks_survive_template_overrides() {
        let base = MINIMAL.to_string()
            + "  migration:\n    phase: control-plane\n    jobImage: i\n    acknowledge: [etcd-audit, control-plane-anti-affinity]\n    kubeadm:\n      etcdMembers: [cp-1]\n"
            + crate::model::tests::PROVIDERS;
        let builtin = |name: &str| BUILTIN.iter().find(|(n, _)| *n == name).unwrap().1;
        // An override that drops the pause annotation is refused.
        let o = template(
            "v1beta1/taloscontrolplane.yaml",
            "templates/v1beta1/taloscontrolplane.yaml",
            &builtin("v1beta1/taloscontrolplane.yaml")
                .replace("{% if controlPlane.paused %}", "{% if false %}"),
        );
        let e = Renderer::new(&[o])
            .unwrap()
            .render("c", &config(&base), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("migration interlock: lab-f-cp has replicas 3 while kubeadm etcd members remain but is not paused"), "{e}");
        // No init config on an existing cluster.
        let o = template(
            "v1beta1/taloscontrolplane.yaml",
            "t",
            &builtin("v1beta1/taloscontrolplane.yaml").replace(
                "controlPlaneConfig:\n",
                "controlPlaneConfig:\n    init:\n      generateType: init\n",
            ),
        );
        let e = Renderer::new(&[o])
            .unwrap()
            .render("c", &config(&base), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("has spec.controlPlaneConfig.init"), "{e}");
        // The migration templates (the guard, the Jobs, their RBAC) cannot be overridden.
        for name in [
            "migration/scale-job.yaml",
            "migration/guard-policy.yaml",
            "migration/node-ref-policy.yaml",
            "migration/rbac.yaml",
            "migration/cluster-rbac.yaml",
        ] {
            let e = Renderer::new(&[template(name, "templates/x", "")])
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                e.contains(&format!("`{name}` cannot be overridden")),
                "{name}: {e}"
            );
        }
    }

    /// The interlock check on the final objects, fed objects as a future template bug or
    /// an overlay could leave them: each weakened guard is refused, naming what is wrong.
    #[test]
    #[expect(clippy::too_many_lines, reason = "a test scenario read top to bottom")]
    fn interlocks_check_the_guard_policies_and_the_jobs() {
        let r = Renderer::new(&[]).unwrap();
        let base = MINIMAL.to_string()
            + POOLS
            + "  migration:\n    phase: control-plane\n    jobImage: i\n    acknowledge: [etcd-audit, control-plane-anti-affinity]\n    kubeadm:\n      etcdMembers: [cp-1]\n"
            + crate::model::tests::PROVIDERS;
        let c = config(&base);
        let good = r.render("c", &c, &[]).unwrap().resources;
        check_interlocks("c", &c, &good).unwrap();
        let edit = |kind: &str, name_part: &str, f: &dyn Fn(&mut Value)| {
            let mut out = good.clone();
            let mut hit = false;
            for x in out.iter_mut() {
                if x.kind() == kind && x.name().contains(name_part) {
                    f(&mut x.value);
                    hit = true;
                }
            }
            assert!(hit, "{kind} {name_part}");
            check_interlocks("c", &c, &out).unwrap_err().to_string()
        };
        /// (kind, name part, the edit, what the refusal says).
        type Case = (
            &'static str,
            &'static str,
            Box<dyn Fn(&mut Value)>,
            &'static str,
        );
        let cases: Vec<Case> = vec![
            (
                "ValidatingAdmissionPolicy",
                "bootstrapped",
                Box::new(|v| v["spec"]["failurePolicy"] = json!("Ignore")),
                "is not failurePolicy: Fail",
            ),
            (
                "ValidatingAdmissionPolicy",
                "bootstrapped",
                Box::new(|v| {
                    v["spec"]["matchConstraints"]["namespaceSelector"]["matchLabels"]
                        ["kubernetes.io/metadata.name"] = json!("other")
                }),
                "does not select the namespace lab-f",
            ),
            (
                "ValidatingAdmissionPolicy",
                "bootstrapped",
                Box::new(|v| {
                    v["spec"]["matchConstraints"]["resourceRules"][1]["resources"] =
                        json!(["vspheremachinetemplates"])
                }),
                "does not match CREATE of vspheremachines.infrastructure.cluster.x-k8s.io",
            ),
            (
                "ValidatingAdmissionPolicy",
                "bootstrapped",
                Box::new(|v| v["spec"]["paramKind"]["kind"] = json!("Cluster")),
                "does not take the TalosControlPlane",
            ),
            (
                "ValidatingAdmissionPolicy",
                "bootstrapped",
                Box::new(|v| v["spec"]["validations"] = json!([])),
                "has no validation",
            ),
            (
                "ValidatingAdmissionPolicyBinding",
                "bootstrapped",
                Box::new(|v| v["spec"]["paramRef"]["parameterNotFoundAction"] = json!("Allow")),
                "with parameterNotFoundAction: Deny",
            ),
            (
                "ValidatingAdmissionPolicyBinding",
                "bootstrapped",
                Box::new(|v| v["spec"]["paramRef"]["name"] = json!("other")),
                "to TalosControlPlane lab-f/lab-f-cp",
            ),
            (
                "ValidatingAdmissionPolicyBinding",
                "bootstrapped",
                Box::new(|v| {
                    v["spec"]["matchResources"] =
                        json!({"namespaceSelector": {"matchLabels": {"x": "y"}}})
                }),
                "and no matchResources",
            ),
            (
                "ValidatingAdmissionPolicy",
                "paused-node-refs",
                Box::new(|v| {
                    v["spec"]["matchConstraints"]["resourceRules"][0]["operations"] =
                        json!(["CREATE"])
                }),
                "does not match UPDATE of machines/status.cluster.x-k8s.io",
            ),
            (
                "ValidatingAdmissionPolicyBinding",
                "paused-node-refs",
                Box::new(|v| v["spec"]["validationActions"] = json!(["Warn"])),
                "paused-node-refs.capstan.dev must bind",
            ),
            (
                "ValidatingAdmissionPolicy",
                "keep-workers",
                Box::new(|v| v["spec"]["failurePolicy"] = json!("Ignore")),
                "keep-workers.capstan.dev is not failurePolicy: Fail",
            ),
            (
                "ValidatingAdmissionPolicy",
                "keep-workers",
                // The scale subresource instead: Argo CD's apply would pass.
                Box::new(|v| {
                    v["spec"]["matchConstraints"]["resourceRules"][0]["resources"] =
                        json!(["machinedeployments/scale"])
                }),
                "does not match UPDATE of machinedeployments.cluster.x-k8s.io",
            ),
            (
                "ValidatingAdmissionPolicy",
                "keep-workers",
                Box::new(|v| v["spec"]["validations"] = json!([])),
                "keep-workers.capstan.dev has no validation",
            ),
            (
                "ValidatingAdmissionPolicyBinding",
                "keep-workers",
                Box::new(|v| {
                    v["spec"]["paramRef"] =
                        json!({"name": "x", "parameterNotFoundAction": "Allow"})
                }),
                "keep-workers.capstan.dev takes no parameter",
            ),
            (
                "ValidatingAdmissionPolicyBinding",
                "keep-workers",
                Box::new(|v| v["spec"]["validationActions"] = json!(["Audit"])),
                "keep-workers.capstan.dev must bind",
            ),
            (
                // The acknowledgement handed out by an overlay or an override: refused.
                "MachineDeployment",
                "general",
                Box::new(|v| {
                    v["metadata"]["annotations"] =
                        json!({"capstan.dev/scale-to-zero": "acknowledged"})
                }),
                "MachineDeployment lab-f-general carries `capstan.dev/scale-to-zero: acknowledged`: capstan's admission policy",
            ),
            (
                "ValidatingAdmissionPolicyBinding",
                "bootstrapped",
                Box::new(|v| {
                    v["metadata"]["annotations"] = json!({"argocd.argoproj.io/hook": "PostSync"})
                }),
                "carries `argocd.argoproj.io/hook: \"PostSync\"`",
            ),
            (
                "ValidatingAdmissionPolicy",
                "bootstrapped",
                Box::new(|v| {
                    v["metadata"]["annotations"] = json!({"argocd.argoproj.io/sync-wave": "5"})
                }),
                "carries `argocd.argoproj.io/sync-wave",
            ),
        ];
        for (kind, name, f, why) in &cases {
            let e = edit(kind, name, f.as_ref());
            assert!(e.contains(why), "{kind} {name}: {e}");
        }
        // A policy or the Job missing.
        let without = |kind: &str| -> Vec<Resource> {
            good.iter().filter(|r| r.kind() != kind).cloned().collect()
        };
        for (kind, why) in [
            (
                "ValidatingAdmissionPolicy",
                "no ValidatingAdmissionPolicy lab-f.lab-f.bootstrapped.capstan.dev",
            ),
            (
                "ValidatingAdmissionPolicyBinding",
                "no ValidatingAdmissionPolicyBinding lab-f.lab-f.bootstrapped.capstan.dev",
            ),
            (
                "Job",
                "phase `control-plane` needs the Job lab-f-capstan-migration-scale-control-plane",
            ),
        ] {
            let e = check_interlocks("c", &c, &without(kind))
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{kind}: {e}");
        }
        // Phase control-plane's nodeRef policy applies only under the TalosControlPlane's
        // phase annotation: the phase must render it, and no other phase may.
        let e = edit("TalosControlPlane", "lab-f-cp", &|v| {
            v["metadata"]["annotations"]
                .as_object_mut()
                .unwrap()
                .remove(PHASE_ANNOTATION);
        });
        assert!(
            e.contains(
                "lab-f-cp lacks the annotation `capstan.dev/migration-phase: control-plane`"
            ),
            "{e}"
        );
        let later = config(
            &base
                .replace("phase: control-plane", "phase: workers")
                .replace("etcdMembers: [cp-1]", "etcdMembers: []"),
        );
        let workers = r.render("c", &later, &[]).unwrap().resources;
        check_interlocks("c", &later, &workers).unwrap();
        let refused =
            |out: &[Resource]| check_interlocks("c", &later, out).unwrap_err().to_string();
        let mut annotated = workers.clone();
        for x in annotated
            .iter_mut()
            .filter(|x| x.kind() == "TalosControlPlane")
        {
            x.value["metadata"]["annotations"][PHASE_ANNOTATION] = json!("control-plane");
        }
        let e = refused(&annotated);
        assert!(
            e.contains(
                "lab-f-cp carries the annotation `capstan.dev/migration-phase` in phase `workers`"
            ),
            "{e}"
        );
        let mut with_policy = workers.clone();
        with_policy.extend(
            good.iter()
                .filter(|x| x.name() == "lab-f.lab-f.paused-node-refs.capstan.dev")
                .cloned(),
        );
        let e = refused(&with_policy);
        assert!(
            e.contains("ValidatingAdmissionPolicy lab-f.lab-f.paused-node-refs.capstan.dev is rendered in phase `workers`"),
            "{e}"
        );
        let no_role: Vec<Resource> = workers
            .iter()
            .filter(|x| x.kind() != "ClusterRoleBinding")
            .cloned()
            .collect();
        let e = refused(&no_role);
        assert!(
            e.contains("phase `workers` needs the ClusterRole and ClusterRoleBinding lab-f.lab-f.capstan-migration"),
            "{e}"
        );
        let no_keep: Vec<Resource> = good
            .iter()
            .filter(|r| !r.name().contains("keep-workers"))
            .cloned()
            .collect();
        let e = check_interlocks("c", &c, &no_keep).unwrap_err().to_string();
        assert!(
            e.contains("no ValidatingAdmissionPolicy lab-f.lab-f.keep-workers.capstan.dev")
                && e.contains("template migration/keep-workers-policy.yaml"),
            "{e}"
        );
    }

    #[test]
    fn template_errors_name_template_and_line() {
        let o = template(
            "v1beta1/cluster.yaml",
            "templates/v1beta1/cluster.yaml",
            "apiVersion: v1\nkind: X\nmetadata:\n  name: {{ cluster.nmae }}\n",
        );
        let r = Renderer::new(&[o]).unwrap();
        let e = r
            .render("c", &config(MINIMAL), &[])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("template `v1beta1/cluster.yaml` (templates/v1beta1/cluster.yaml) line 4: undefined value"), "{e}");
        let bad = template("v1beta1/nope.yaml", "templates/v1beta1/nope.yaml", "");
        let e = Renderer::new(&[bad]).err().unwrap().to_string();
        assert!(
            e.contains("`v1beta1/nope.yaml` is not a template capstan knows"),
            "{e}"
        );
        let syntax = template("v1beta1/cluster.yaml", "t", "a: {{ x \n");
        let e = Renderer::new(&[syntax]).err().unwrap().to_string();
        assert!(
            e.starts_with("template `v1beta1/cluster.yaml` (t) line 1: syntax error"),
            "{e}"
        );
    }

    #[test]
    fn fuel_leaves_the_builtin_templates_room() {
        for f in ["lab-f", "lab-g"] {
            let path = format!(
                "{}/examples/gitops/clusters/{f}/cluster.yaml",
                env!("CARGO_MANIFEST_DIR")
            );
            let mut v = yaml::parse_one(&std::fs::read_to_string(path).unwrap()).unwrap();
            v["spec"].as_object_mut().unwrap().remove("overlays");
            let c = ClusterConfig::from_value("c", v).unwrap();
            let mut r = Renderer::new(&[]).unwrap();
            r.env.set_fuel(Some(TEMPLATE_FUEL / 100));
            r.render("c", &c, &[]).unwrap();
            // The probe can fail: with a tenth of what they need, the built-ins run dry.
            r.env.set_fuel(Some(250));
            assert!(r.render("c", &c, &[]).is_err());
        }
    }

    #[test]
    fn loops_and_output_bombs_stop_with_the_template_named() {
        let cases = [
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            "{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}",
            "{% set s = 'x' * 50000000 %}{{ s ~ s ~ s ~ s }}",
            "{% macro m(n) %}{{ m(n) }}{% endmacro %}{{ m(1) }}",
        ];
        for src in cases {
            let o = template(
                "talos/worker-patch.yaml",
                "templates/talos/worker-patch.yaml",
                src,
            );
            let r = Renderer::new(&[o]).unwrap();
            let started = std::time::Instant::now();
            // The worker patch is rendered per pool.
            let pool = "  workers:\n  - name: general\n    replicas: 1\n    machine: {numCPUs: 2, memoryMiB: 4096}\n";
            let e = r
                .render("c", &config(&format!("{MINIMAL}{pool}")), &[])
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(
                    "template `talos/worker-patch.yaml` (templates/talos/worker-patch.yaml)"
                ),
                "{src}: {e}"
            );
            assert!(
                started.elapsed() < std::time::Duration::from_secs(10),
                "{src}"
            );
        }
        // Output past the cap within the fuel.
        let big = format!("a: {}\n", "x".repeat(MAX_TEMPLATE_OUTPUT));
        let o = template("talos/worker-patch.yaml", "t", &big);
        let pool = "  workers:\n  - name: general\n    replicas: 1\n    machine: {numCPUs: 2, memoryMiB: 4096}\n";
        let e = Renderer::new(&[o])
            .unwrap()
            .render("c", &config(&format!("{MINIMAL}{pool}")), &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("more than the 4194304 one template may produce"),
            "{e}"
        );
    }

    #[test]
    fn scope_sets_over_a_copy_and_looks_names_up() {
        let mut base = Scope::default();
        base.set("pool", minijinja::Value::from(1));
        base.set("cluster", minijinja::Value::from("a"));
        base.set("pool", minijinja::Value::from(2));
        assert_eq!(
            base.0.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["cluster", "pool"],
            "sorted, one entry per name"
        );
        let ctx = base.over(&[("pool", minijinja::Value::from(3))]);
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        let out = env.render_str("{{ cluster }}-{{ pool }}", &ctx).unwrap();
        assert_eq!(out, "a-3");
        assert_eq!(
            base.0[1].1,
            minijinja::Value::from(2),
            "the base is unchanged"
        );
        assert!(
            env.render_str("{{ nope }}", &ctx).is_err(),
            "unknown names are undefined"
        );
    }

    #[test]
    fn every_builtin_template_compiles() {
        // Built-ins are compiled on first use, so this is where a broken one shows.
        let r = Renderer::new(&[]).unwrap();
        for (name, _) in BUILTIN {
            if let Err(e) = r.env.get_template(name) {
                panic!("built-in template {name}: {e:#}");
            }
        }
        assert!(r.env.get_template("v1beta1/nope.yaml").is_err());
        // An override is compiled at once even when no cluster uses it (a v1beta2 template
        // for a v1beta1 fleet), and it replaces the built-in.
        let unused = template(
            "v1beta2/cluster.yaml",
            "templates/v1beta2/cluster.yaml",
            "{% if %}",
        );
        let e = Renderer::new(&[unused]).err().unwrap().to_string();
        assert!(
            e.contains("`v1beta2/cluster.yaml` (templates/v1beta2/cluster.yaml)"),
            "{e}"
        );
        let replaced = template("talos/worker-patch.yaml", "t", "machine: {}\n");
        let r = Renderer::new(&[replaced]).unwrap();
        let src = r
            .env
            .get_template("talos/worker-patch.yaml")
            .unwrap()
            .source()
            .to_string();
        assert_eq!(src, "machine: {}\n");
    }

    #[test]
    fn invalid_input_is_refused_before_rendering() {
        let r = Renderer::new(&[]).unwrap();
        let e = r
            .render(
                "clusters/x/cluster.yaml",
                &config(&MINIMAL.replace("numCPUs: 4", "numCPUs: 1")),
                &[],
            )
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "clusters/x/cluster.yaml: spec.controlPlane.machine.numCPUs: must be at least 2, got 1"
        );
    }

    #[test]
    fn templates_yield_valid_yaml_for_hostile_values() {
        let r = Renderer::new(&[]).unwrap();
        let c = config(
            &MINIMAL
                .replace("folder: /dc1/vm/lab-f", "folder: \"a: b\\n- c # d\"")
                .replace("datastore: ds1", "datastore: \"{{ x }}\""),
        );
        let out = r.render("c", &c, &[]).unwrap();
        let vmt = out
            .resources
            .iter()
            .find(|x| x.kind() == "VSphereMachineTemplate")
            .unwrap();
        assert_eq!(
            vmt.value.pointer("/spec/template/spec/folder").unwrap(),
            "a: b\n- c # d"
        );
        assert_eq!(
            vmt.value.pointer("/spec/template/spec/datastore").unwrap(),
            "{{ x }}"
        );
    }
}
