//! `capstan rehearse`: a cluster's own renders walked through a model of the providers, from
//! its current phase to `complete`, then through one Day-2 operation, stopping at the first
//! stall, quorum loss or unreachable API with the object, the condition and the fix.
//!
//! One model serves the command and the tests (`tests/provider_model.rs`,
//! `tests/rehearse.rs`): [`model`] (the controllers), [`admission`] (the API server's
//! policies), [`argo`] (Argo CD and kubectl), [`kubectl`] and [`jobs`] (the rendered Job
//! scripts run for real against the model), [`drive`] (the runbook's steps, stalls and
//! their diagnosis). Its assumptions, each with its upstream source, are the table in
//! `assumptions.md` beside this file. It models the providers, not vSphere or the network.

pub mod admission;
pub mod argo;
pub mod clusterctl;
pub mod drive;
pub mod jobs;
pub mod kubectl;
pub mod model;
pub mod report;
#[cfg(any(test, feature = "testkit"))]
pub mod sops_operator;
mod workers;

use serde_json::Value;

use crate::model::{ClusterConfig, Flavour, Phase, SemVer};
use drive::{phases_from, unsettled, Driver, Operation, Rehearsal, Stop};
use model::{ControlPlaneProvider, Facts, World};

pub use argo::SyncMode;

/// The model's assumptions, each with its upstream source (Markdown).
#[cfg(any(test, feature = "testkit"))]
pub const ASSUMPTIONS: &str = include_str!("assumptions.md");

/// Why a rehearsal could not run (not a stop: those are results).
#[derive(Debug, thiserror::Error)]
pub enum RehearseError {
    /// Running a Job script against the model.
    #[error("running a migration Job against the model: {message}")]
    Job {
        /// What failed.
        message: String,
    },
    /// Reading the cluster's inputs.
    #[error(transparent)]
    Input(#[from] crate::inputs::InputError),
    /// Compiling the templates.
    #[error(transparent)]
    Render(#[from] crate::pipeline::render::RenderError),
    /// The cluster is larger than the model runs.
    #[error("{file}: a rehearsal models at most {max} Machines; this cluster's render declares {machines} (control-plane and worker replicas)")]
    TooLarge {
        /// `cluster.yaml`.
        file: String,
        /// The Machines the render declares.
        machines: u64,
        /// The limit.
        max: u64,
    },
    /// The rehearsal took longer than its real-time budget.
    #[error("the rehearsal ran for over {seconds} s of real time and was stopped")]
    Budget {
        /// The budget.
        seconds: u64,
    },
    /// The operation does not apply to this cluster.
    #[error("{file}: --then {operation}: {why}")]
    NotApplicable {
        /// `cluster.yaml`.
        file: String,
        /// The operation.
        operation: &'static str,
        /// Why not.
        why: String,
    },
}

/// What to rehearse.
#[derive(Debug, Clone)]
pub struct Options {
    /// The Day-2 operation after the phases.
    pub then: Option<Operation>,
    /// The phase the operation runs in (`complete`, or `workers`).
    pub until: Phase,
    /// How git is applied.
    pub sync: SyncMode,
    /// The shell the Jobs run under.
    pub shell: String,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            then: None,
            until: Phase::Complete,
            sync: SyncMode::ArgoPrune,
            shell: "sh".into(),
        }
    }
}

/// Renders a configuration into the objects Argo CD (or kubectl) applies; `Err` is the
/// render's refusal, which stops the rehearsal.
pub type Render<'a> = dyn FnMut(&ClusterConfig) -> Result<Vec<Value>, String> + 'a;

/// The model's facts from a configuration and one of its renders.
pub fn facts(config: &ClusterConfig, objects: &[Value]) -> (Facts, Vec<String>, Option<String>) {
    let name = config.metadata.name.clone();
    let tcp = objects.iter().find(|o| o["kind"] == "TalosControlPlane");
    let facts = Facts {
        cluster: name.clone(),
        namespace: config.metadata.namespace.clone(),
        control_plane: tcp
            .and_then(|t| t["metadata"]["name"].as_str())
            .unwrap_or(&format!("{name}-cp"))
            .to_string(),
        control_plane_api_version: tcp
            .and_then(|t| t["apiVersion"].as_str())
            .unwrap_or_default()
            .to_string(),
        provider: match config.spec.flavour {
            Flavour::V1beta1 => ControlPlaneProvider::SideroV05,
            Flavour::V1beta2 => ControlPlaneProvider::CommunityV09,
        },
        cpi: true,
    };
    let pool_name = config.control_plane_pool_name();
    let pool = objects
        .iter()
        .find(|o| o["kind"] == "InClusterIPPool" && o["metadata"]["name"] == pool_name.as_str())
        .and_then(|o| crate::pipeline::render::endpoint::pool_spec(o, "the render").ok())
        .and_then(|ipam| ipam.allocatable().ok())
        .map(|a| a.iter().map(ToString::to_string).collect())
        .unwrap_or_default();
    let vip = config
        .spec
        .endpoint
        .active_vip()
        .map(|v| v.address.to_string());
    (facts, pool, vip)
}

/// The configuration of a phase: the phase, the kubeadm lists as the runbook leaves them,
/// and the acknowledgements phase `control-plane` requires (the runbook asks for them).
pub fn phase_config(base: &ClusterConfig, phase: Phase, kubeadm_cp: &[String]) -> ClusterConfig {
    use crate::model::Acknowledgement;
    let mut c = base.clone();
    if let Some(m) = &mut c.spec.migration {
        m.phase = phase;
        let cp = if matches!(phase, Phase::Prepare | Phase::ControlPlane) {
            kubeadm_cp.to_vec()
        } else {
            Vec::new()
        };
        m.kubeadm.control_plane_nodes = cp.clone();
        m.kubeadm.etcd_members = cp;
        if phase == Phase::Complete {
            m.kubeadm.worker_nodes.clear();
        }
        if phase == Phase::ControlPlane {
            for a in [
                Acknowledgement::EtcdAudit,
                Acknowledgement::ControlPlaneAntiAffinity,
            ] {
                if !m.acknowledge.contains(&a) {
                    m.acknowledge.push(a);
                }
            }
        }
    }
    c
}

fn render_or_stop(
    d: &mut Driver,
    render: &mut Render<'_>,
    title: &str,
    config: &ClusterConfig,
) -> Option<Vec<Value>> {
    if d.stopped() {
        return None;
    }
    match render(config) {
        Ok(v) => Some(v),
        Err(why) => {
            let snapshot = drive::snapshot(&model::lock(&d.world), 0);
            d.rehearsal.steps.push(drive::Step {
                title: title.to_string(),
                seconds: 0,
                sync: None,
                snapshot,
                stop: Some(Stop {
                    kind: "render",
                    object: format!("cluster.yaml of {}", config.metadata.name),
                    condition: format!("render refuses this step's commit: {why}"),
                    fix: "the commit this step needs is refused by capstan render: fix it first (capstan check)".into(),
                }),
                notes: Vec::new(),
            });
            None
        }
    }
}

/// The rehearsal of a cluster directory: its inputs read once, every step's commit rendered
/// as `capstan argocd generate` renders it (sync waves and options added).
pub fn cluster(dir: &std::path::Path, options: &Options) -> Result<Rehearsal, RehearseError> {
    let c = crate::inputs::load_cluster_with(dir, crate::inputs::Digests::NotWanted)?;
    let root = crate::inputs::repo_root(&c.dir);
    let (overrides, _) =
        crate::inputs::load_templates(&crate::inputs::cluster::templates_dir(&root), &root, false)?;
    let overlays = crate::inputs::load_overlays(&c, &crate::inputs::OverlayCache::default())?;
    let renderer = crate::pipeline::render::Renderer::new(&overrides)?;
    let mut render = |config: &ClusterConfig| -> Result<Vec<Value>, String> {
        let mut input = c.clone();
        input.config = config.clone();
        let rendered =
            crate::pipeline::build(&input, &overlays, &renderer).map_err(|e| error_chain(&e))?;
        Ok(rendered
            .resources
            .into_iter()
            // Only capstan's own migration Jobs run against the model: a Job an overlay
            // adds is a repository's code, and nothing from a repository is run.
            .filter(|r| r.kind() != "Job" || r.migration_object())
            .map(|mut r| {
                crate::argocd::annotate(&mut r);
                r.value
            })
            .collect())
    };
    rehearse(&c.file, &c.config, &mut render, options)
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        next = cause.source();
    }
    s
}

/// The most Machines (control plane and workers, as rendered) a rehearsal models: its cost
/// grows with their square (every controller looks at every Machine each second).
pub const MAX_MACHINES: u64 = 300;

/// The Machines a render declares: the TalosControlPlane's replicas and every
/// MachineDeployment's (the autoscaler's maximum when it sizes the pool).
pub fn declared_machines(objects: &[Value]) -> u64 {
    objects
        .iter()
        .map(|o| match o["kind"].as_str() {
            Some("TalosControlPlane") => o["spec"]["replicas"].as_u64().unwrap_or(1),
            Some("MachineDeployment") => o["spec"]["replicas"].as_u64().unwrap_or_else(|| {
                crate::resource::autoscaler_sizes(o)
                    .and_then(|(_, max)| max.parse().ok())
                    .unwrap_or(1)
            }),
            _ => 0,
        })
        .fold(0u64, u64::saturating_add)
}

/// The rehearsal of a cluster from its configuration.
pub fn rehearse(
    file: &str,
    config: &ClusterConfig,
    render: &mut Render<'_>,
    options: &Options,
) -> Result<Rehearsal, RehearseError> {
    let too_large = std::cell::Cell::new(None);
    let mut bounded = |c: &ClusterConfig| -> Result<Vec<Value>, String> {
        let objects = render(c)?;
        let n = declared_machines(&objects);
        if n > MAX_MACHINES {
            too_large.set(Some(n));
            return Err(format!("{n} Machines declared, more than the model runs"));
        }
        Ok(objects)
    };
    let r = rehearse_bounded(file, config, &mut bounded, options)?;
    match too_large.get() {
        Some(machines) => Err(RehearseError::TooLarge {
            file: file.to_string(),
            machines,
            max: MAX_MACHINES,
        }),
        None => Ok(r),
    }
}

fn rehearse_bounded(
    file: &str,
    config: &ClusterConfig,
    render: &mut Render<'_>,
    options: &Options,
) -> Result<Rehearsal, RehearseError> {
    let current = config
        .spec
        .migration
        .as_ref()
        .map_or(Phase::Complete, |m| m.phase);
    if let Some(op) = options.then {
        applicable(file, config, op, options.until)?;
    }
    let kubeadm_cp: Vec<String> = match &config.spec.migration {
        Some(m) if !m.kubeadm.control_plane_nodes.is_empty() => {
            m.kubeadm.control_plane_nodes.clone()
        }
        Some(m) if !m.kubeadm.etcd_members.is_empty() => m.kubeadm.etcd_members.clone(),
        _ => (1..=config.spec.control_plane.as_ref().map_or(3, |c| c.replicas))
            .map(|i| format!("{}-kubeadm-cp-{i}", config.metadata.name))
            .collect(),
    };
    let kubeadm_workers: Vec<String> = config
        .spec
        .migration
        .as_ref()
        .map(|m| m.kubeadm.worker_nodes.clone())
        .unwrap_or_default();
    let first_phase = if current == Phase::Complete {
        Phase::Complete
    } else {
        Phase::Prepare
    };
    let first = match render(&phase_config(config, first_phase, &kubeadm_cp)) {
        Ok(v) => v,
        Err(why) => {
            let mut d = Driver::new(&config.metadata.name, World::default(), options.sync);
            render_or_stop(
                &mut d,
                &mut |_: &ClusterConfig| Err(why.clone()),
                "render",
                config,
            );
            return Ok(d.rehearsal);
        }
    };
    let (facts, pool, vip) = facts(config, &first);
    let mut world = World::kubeadm(facts, &kubeadm_cp, &kubeadm_workers);
    world.endpoint.pool = pool;
    world.endpoint.vip = vip;
    world.shell = options.shell.clone();
    let mut d = Driver::new(&config.metadata.name, world, options.sync);
    let until = if options.until == Phase::Workers && current == Phase::Complete {
        Phase::Complete
    } else {
        options.until
    };
    // `vip-handover` of a cluster still migrating: the VIP arrives with the commit of phase
    // complete (the plan's hand-over), so the phases before it run without a strategy.
    let before_complete =
        if options.then == Some(Operation::VipHandover) && current != Phase::Complete {
            let mut c = config.clone();
            c.spec.endpoint.strategy = None;
            c.spec.endpoint.vip = None;
            c
        } else {
            config.clone()
        };
    if current == Phase::Complete {
        steady_state(&mut d, &first)?;
    } else {
        for phase in phases_from(Phase::Prepare, until) {
            let replayed = phase_rank(phase) < phase_rank(current);
            let c = if phase == Phase::Complete {
                config
            } else {
                &before_complete
            };
            run_phase(&mut d, render, c, phase, &kubeadm_cp, replayed)?;
            if d.stopped() {
                return Ok(d.rehearsal);
            }
        }
    }
    if let Some(op) = options.then {
        let phase = if current == Phase::Complete {
            Phase::Complete
        } else {
            until
        };
        operation(&mut d, render, config, op, phase, &kubeadm_cp)?;
    }
    Ok(d.rehearsal)
}

fn phase_rank(p: Phase) -> usize {
    match p {
        Phase::Prepare => 0,
        Phase::ControlPlane => 1,
        Phase::Workers => 2,
        Phase::Complete => 3,
    }
}

fn applicable(
    file: &str,
    config: &ClusterConfig,
    op: Operation,
    until: Phase,
) -> Result<(), RehearseError> {
    let no = |why: &str| {
        Err(RehearseError::NotApplicable {
            file: file.to_string(),
            operation: op.as_str(),
            why: why.to_string(),
        })
    };
    match op {
        Operation::VipHandover if config.spec.endpoint.active_vip().is_none() => {
            no("the cluster's endpoint strategy is not `vip`")
        }
        Operation::AutoscalerScaleUp
            if !config
                .spec
                .overlays
                .iter()
                .any(|o| o.contains("autoscaler")) =>
        {
            // Refined once rendered: the pool must carry the autoscaler's size annotations.
            Ok(())
        }
        Operation::WorkerRollout | Operation::MhcRemediation if config.spec.workers.is_empty() => {
            no("the cluster has no worker pool")
        }
        Operation::PhaseRevert if config.spec.migration.is_none() => {
            no("the cluster has no migration phases to revert")
        }
        Operation::PhaseRevert if until == Phase::Prepare || until == Phase::ControlPlane => {
            no("revert from phase workers or complete")
        }
        _ => Ok(()),
    }
}

/// Phase `complete` (or a cluster without a migration) as it has run for a while: the
/// render applied without its hooks, every Machine as declared, then the commit synced.
fn steady_state(d: &mut Driver, objects: &[Value]) -> Result<(), RehearseError> {
    let plain: Vec<Value> = objects
        .iter()
        .filter(|o| !argo::is_hook(o))
        .cloned()
        .collect();
    d.sync(&plain)?;
    {
        let mut w = model::lock(&d.world);
        w.settle_as_declared();
        w.endpoint.on_vip = w.endpoint.vip.is_some();
    }
    d.step(
        "phase complete: the running cluster (every Machine as git declares it), then its commit synced",
        Some(objects),
        &mut |_| vec!["the rehearsal starts from the steady state: the model cannot read the live management cluster".into()],
        &unsettled,
        1800,
    )?;
    Ok(())
}

fn run_phase(
    d: &mut Driver,
    render: &mut Render<'_>,
    config: &ClusterConfig,
    phase: Phase,
    kubeadm_cp: &[String],
    replayed: bool,
) -> Result<(), RehearseError> {
    let prefix = if replayed { "(replayed) " } else { "" };
    let title = |t: &str| format!("{prefix}{t}");
    match phase {
        Phase::Prepare => {
            let t = title("phase prepare: commit synced");
            commit_step(
                d,
                render,
                &t,
                &phase_config(config, phase, kubeadm_cp),
                &mut |_| Vec::new(),
                &|w: &World| {
                    let Some(t) = w.tcp.as_ref() else {
                        return Some("no TalosControlPlane".into());
                    };
                    if !t.bootstrapped {
                        return Some("status.bootstrapped is not set".into());
                    }
                    (w.cp_machines() > 0)
                        .then(|| "a control-plane Machine exists in phase prepare".into())
                },
                900,
            )?;
        }
        Phase::ControlPlane => control_plane_phase(d, render, config, kubeadm_cp, &title)?,
        Phase::Workers => {
            let t = title("phase workers: commit synced (the unpause Job lifts the pause)");
            commit_step(
                d,
                render,
                &t,
                &phase_config(config, phase, kubeadm_cp),
                &mut |w: &mut World| {
                    // The VIP is up on the Talos control plane from its first machine: with
                    // the kubeadm control plane gone, the endpoint's name moves to it now, or
                    // a control-plane rollout before phase complete would leave the load
                    // balancer only replaced machines' addresses.
                    if w.endpoint.vip.is_some() && w.endpoint.holder.is_some() && !w.endpoint.on_vip
                    {
                        w.endpoint.on_vip = true;
                        return vec!["the endpoint's name now resolves to the VIP (capstan plan, phase workers)".into()];
                    }
                    Vec::new()
                },
                &unsettled,
                3600,
            )?;
            d.step(
                &title("drain and remove the kubeadm workers"),
                None,
                &mut |w: &mut World| {
                    let n = w.kubeadm_workers.len();
                    w.kubeadm_workers.clear();
                    vec![format!("{n} kubeadm workers assumed drained and removed: the model sees no PodDisruptionBudget or Pod (run `capstan check --workloads` before each drain)")]
                },
                &unsettled,
                600,
            )?;
        }
        Phase::Complete => complete_phase(d, render, config, kubeadm_cp, &title)?,
    }
    Ok(())
}

/// Phase `control-plane` rehearsed: the commit (the scale Job's window), the load balancer,
/// then each kubeadm control-plane node removed, one commit each.
fn control_plane_phase(
    d: &mut Driver,
    render: &mut Render<'_>,
    config: &ClusterConfig,
    kubeadm_cp: &[String],
    title: &dyn Fn(&str) -> String,
) -> Result<(), RehearseError> {
    let t = title("phase control-plane: commit synced (the scale Job opens the window)");
    commit_step(
        d,
        render,
        &t,
        &phase_config(config, Phase::ControlPlane, kubeadm_cp),
        &mut |w: &mut World| {
            let pool = w.endpoint.pool.clone();
            if pool.is_empty() {
                return vec!["the load balancer gets the Talos control-plane addresses once they exist (capstan plan)".into()];
            }
            w.endpoint.backends.extend(pool);
            vec!["the load balancer lists the control plane's pool addresses beside the kubeadm nodes (capstan plan)".into()]
        },
        &|w: &World| {
            let Some(t) = w.tcp.as_ref() else {
                return Some("no TalosControlPlane".into());
            };
            let cp: Vec<_> = w
                .machines
                .iter()
                .filter(|m| m.deployment.is_none())
                .collect();
            if (cp.len() as u64) < t.replicas {
                return Some(format!(
                    "{} of {} control-plane Machines",
                    cp.len(),
                    t.replicas
                ));
            }
            if let Some(m) = cp.iter().find(|m| m.node_ref.is_none()) {
                return Some(format!("Machine {} has no nodeRef", m.name));
            }
            if w.members.iter().any(|m| m.learner)
                || (w.talos_members() as u64) < t.replicas
            {
                return Some("the Talos members are not all voters yet".into());
            }
            None
        },
        1800,
    )?;
    {
        let mut w = model::lock(&d.world);
        if w.endpoint.pool.is_empty() {
            let addrs: Vec<String> = w
                .vms
                .iter()
                .filter(|v| v.control_plane && !v.gone)
                .filter_map(|v| v.address.clone())
                .collect();
            w.endpoint.backends.extend(addrs);
        }
    }
    for (i, node) in kubeadm_cp.iter().enumerate() {
        let left = &kubeadm_cp[i + 1..];
        let t = title(&format!(
            "remove kubeadm control-plane node {node} (load balancer, kubeadm reset), commit and sync"
        ));
        let objs = if left.is_empty() {
            None
        } else {
            match render_or_stop(d, render, &t, &phase_config(config, Phase::ControlPlane, left)) {
                Some(o) => Some(o),
                None => return Ok(()),
            }
        };
        let node = node.clone();
        let start = model::lock(&d.world).t;
        d.step(
            &t,
            objs.as_deref(),
            &mut |w: &mut World| {
                w.remove_kubeadm_node(&node);
                Vec::new()
            },
            &|w: &World| (w.t < start + 120).then(|| "observing".into()),
            600,
        )?;
        if d.stopped() {
            return Ok(());
        }
    }
    Ok(())
}

/// Phase `complete` rehearsed: the commit, then the endpoint handed over to the VIP.
fn complete_phase(
    d: &mut Driver,
    render: &mut Render<'_>,
    config: &ClusterConfig,
    kubeadm_cp: &[String],
    title: &dyn Fn(&str) -> String,
) -> Result<(), RehearseError> {
    let t = title("phase complete: commit synced, the endpoint handed over");
    commit_step(
        d,
        render,
        &t,
        &phase_config(config, Phase::Complete, kubeadm_cp),
        &mut |w: &mut World| {
            if !w.endpoint.pool.is_empty() {
                w.endpoint.backends = w.endpoint.pool.clone();
            }
            if w.endpoint.vip.is_none() || w.endpoint.on_vip {
                return Vec::new();
            }
            if w.endpoint.holder.is_some() {
                w.endpoint.on_vip = true;
                return vec!["the endpoint's name now resolves to the VIP (the hand-over in capstan plan)".into()];
            }
            vec!["the commit adds the VIP: the control plane rolls, the load balancer still answers".into()]
        },
        &|w: &World| {
            if w.endpoint.vip.is_some() && !w.endpoint.on_vip {
                return w
                    .endpoint
                    .holder
                    .is_none()
                    .then(|| "no control-plane node holds the VIP yet".into());
            }
            unsettled(w)
        },
        1800,
    )?;
    let handing_over = {
        let w = model::lock(&d.world);
        w.endpoint.vip.is_some() && !w.endpoint.on_vip
    };
    if handing_over {
        d.step(
            &title("verify the API through the VIP, then point the endpoint's name at it (DNS)"),
            None,
            &mut |w: &mut World| {
                w.endpoint.on_vip = true;
                vec![format!(
                    "`kubectl --server https://<VIP>:<port> get --raw /readyz` answered through {}",
                    w.endpoint.holder.clone().unwrap_or_default()
                )]
            },
            &unsettled,
            3600,
        )?;
    }
    Ok(())
}

/// A step that syncs a commit: the configuration rendered (a refusal stops the rehearsal),
/// then [`Driver::step`].
fn commit_step(
    d: &mut Driver,
    render: &mut Render<'_>,
    title: &str,
    config: &ClusterConfig,
    action: &mut dyn FnMut(&mut World) -> Vec<String>,
    settled: &dyn Fn(&World) -> Option<String>,
    deadline: u64,
) -> Result<(), RehearseError> {
    let Some(objs) = render_or_stop(d, render, title, config) else {
        return Ok(());
    };
    d.step(title, Some(&objs), action, settled, deadline)?;
    Ok(())
}

fn next_version(v: &str, minor: bool) -> Option<String> {
    let s = SemVer::parse(v)?;
    Some(if minor {
        format!("v{}.{}.0", s.major, s.minor + 1)
    } else {
        format!("v{}.{}.{}", s.major, s.minor, s.patch + 1)
    })
}

/// `--then`: A control-plane VM fails; the operator removes its member and Machine; the provider replaces it.
fn replace_control_plane(d: &mut Driver, title: &str, objs: &[Value]) -> Result<(), RehearseError> {
    d.degraded_step = true;
    d.step(
        &format!("{title}: a control-plane VM fails"),
        Some(objs),
        &mut |w: &mut World| {
            let victim = w
                .machines
                .iter()
                .filter(|m| m.deployment.is_none())
                .min_by_key(|m| (m.created, m.name.clone()))
                .map(|m| m.name.clone());
            match victim {
                Some(v) => {
                    w.fail_vm(&v);
                    vec![format!(
                        "{v} is powered off: its etcd member is down, its node NotReady"
                    )]
                }
                None => vec!["no control-plane machine to fail".into()],
            }
        },
        &|_: &World| None,
        60,
    )?;
    d.step(
        &format!("{title}: the operator removes its etcd member and deletes its Machine"),
        None,
        &mut |w: &mut World| {
            let failed: Vec<String> = w
                .vms
                .iter()
                .filter(|v| v.failed && v.control_plane && !v.gone)
                .map(|v| v.name.clone())
                .collect();
            for f in &failed {
                w.members.retain(|m| &m.name != f);
                let t = w.t;
                if let Some(m) = w.machines.iter_mut().find(|m| &m.name == f) {
                    m.deleting = Some(t);
                }
            }
            vec![format!(
                "`talosctl -n <healthy node> etcd remove-member {}`, then `kubectl delete machine {}`: the provider creates a replacement",
                failed.join(" "),
                failed.join(" ")
            )]
        },
        &unsettled,
        3600,
    )?;
    Ok(())
}

/// `--then`: A worker VM fails; its MachineHealthCheck remediates it.
fn mhc_remediation(d: &mut Driver, title: &str, objs: &[Value]) -> Result<(), RehearseError> {
    d.step(
        &format!("{title}: a worker VM fails; its MachineHealthCheck remediates it"),
        Some(objs),
        &mut |w: &mut World| {
            let victim = w
                .machines
                .iter()
                .filter(|m| {
                    m.deployment
                        .as_ref()
                        .is_some_and(|d| w.health_checks.values().any(|c| &c.deployment == d))
                })
                .min_by_key(|m| (m.created, m.name.clone()))
                .map(|m| m.name.clone());
            match victim {
                Some(v) => {
                    w.fail_vm(&v);
                    vec![format!("{v} is powered off")]
                }
                None => vec!["no worker under a MachineHealthCheck".into()],
            }
        },
        &|w: &World| {
            if w.vms.iter().any(|v| v.failed && !v.gone) {
                return Some("the failed worker is not replaced yet".into());
            }
            unsettled(w)
        },
        3600,
    )?;
    Ok(())
}

/// `--then`: The autoscaler grows a pool that carries its size annotations.
fn autoscaler_scale_up(d: &mut Driver, title: &str, objs: &[Value]) -> Result<(), RehearseError> {
    let before: Vec<(String, u64)> = {
        let w = model::lock(&d.world);
        w.deployments
            .iter()
            .map(|(k, v)| (k.clone(), v.replicas))
            .collect()
    };
    d.step(
        &format!("{title}: Pods pending for two more nodes"),
        Some(objs),
        &mut |w: &mut World| {
            let pool = w
                .deployments
                .iter()
                .find(|(_, md)| md.autoscaler.is_some())
                .map(|(k, _)| k.clone());
            match pool {
                Some(p) => {
                    w.pending.insert(p.clone(), 2);
                    vec![format!(
                        "the autoscaler sees Pods that need two more nodes of {p}"
                    )]
                }
                None => Vec::new(),
            }
        },
        &|w: &World| {
            let grown = w.deployments.iter().any(|(k, md)| {
                md.autoscaler.is_some() && before.iter().any(|(b, r)| b == k && md.replicas > *r)
            });
            if !grown {
                return Some("the autoscaler has not grown the pool".into());
            }
            unsettled(w)
        },
        3600,
    )?;
    Ok(())
}

/// The `cluster.yaml` the Day-2 operation `op` commits (from phase `phase`'s), and what
/// the step's notes say about the change.
fn changed_config(
    base: &ClusterConfig,
    op: Operation,
    phase: Phase,
    kubeadm_cp: &[String],
) -> (ClusterConfig, Vec<String>) {
    let mut config = phase_config(base, phase, kubeadm_cp);
    let mut notes: Vec<String> = Vec::new();
    match op {
        Operation::TalosUpgrade => {
            let old = config.spec.versions.talos.clone();
            let (_, max) = crate::model::flavour_talos_range(config.spec.flavour);
            let minor = SemVer::parse(&old).is_some_and(|s| s.minor < max);
            let new = next_version(&old, minor).unwrap_or(old.clone());
            if !minor {
                notes.push(format!(
                    "{old} is the newest Talos minor the flavour supports: a patch upgrade instead"
                ));
            }
            config.spec.versions.talos = new.clone();
            if let Some(v) = &mut config.spec.vsphere {
                v.template = v.template.replace(&old, &new);
            }
            notes.push(format!("Talos {old} -> {new} (the VM template follows)"));
        }
        Operation::KubernetesPatch | Operation::KubernetesMinor => {
            let old = config.spec.versions.kubernetes.clone();
            let new = next_version(&old, op == Operation::KubernetesMinor).unwrap_or(old.clone());
            config.spec.versions.kubernetes = new.clone();
            notes.push(format!("Kubernetes {old} -> {new}"));
        }
        Operation::Rollout | Operation::VipHandover => {
            if let Some(cp) = &mut config.spec.control_plane {
                cp.machine.memory_mib += 1024;
            }
            notes.push("the control plane's machines get 1 GiB more memory: a new template, a rolling replacement".into());
        }
        Operation::WorkerRollout => {
            if let Some(p) = config.spec.workers.first_mut() {
                p.machine.memory_mib += 1024;
                notes.push(format!(
                    "pool {} gets 1 GiB more memory: a new template, a rolling replacement",
                    p.name
                ));
            }
        }
        Operation::PhaseRevert => {
            let back = if phase == Phase::Complete {
                Phase::Workers
            } else {
                Phase::ControlPlane
            };
            config = phase_config(base, back, kubeadm_cp);
            notes.push(format!(
                "the commit of phase {} reverted: git says phase {} again",
                phase.as_str(),
                back.as_str()
            ));
        }
        Operation::ReplaceControlPlane
        | Operation::MhcRemediation
        | Operation::AutoscalerScaleUp => {}
    }
    (config, notes)
}

fn operation(
    d: &mut Driver,
    render: &mut Render<'_>,
    base: &ClusterConfig,
    op: Operation,
    phase: Phase,
    kubeadm_cp: &[String],
) -> Result<(), RehearseError> {
    if d.stopped() {
        return Ok(());
    }
    let title = format!("--then {}", op.as_str());
    let (config, mut notes) = changed_config(base, op, phase, kubeadm_cp);
    let Some(objs) = render_or_stop(d, render, &title, &config) else {
        return Ok(());
    };
    if op == Operation::AutoscalerScaleUp
        && !objs.iter().any(|o| {
            o["kind"] == "MachineDeployment" && crate::resource::autoscaler_sizes(o).is_some()
        })
    {
        return Err(RehearseError::NotApplicable {
            file: base.metadata.name.clone(),
            operation: op.as_str(),
            why: "no MachineDeployment carries the autoscaler's size annotations".into(),
        });
    }
    {
        let mut w = model::lock(&d.world);
        w.count_workers_from_now();
        if op == Operation::VipHandover {
            w.endpoint.on_vip = true;
        }
    }
    match op {
        Operation::ReplaceControlPlane => replace_control_plane(d, &title, &objs)?,
        Operation::MhcRemediation => mhc_remediation(d, &title, &objs)?,
        Operation::AutoscalerScaleUp => autoscaler_scale_up(d, &title, &objs)?,
        Operation::PhaseRevert => {
            let declared: Vec<(String, u64)> = {
                let w = model::lock(&d.world);
                w.deployments
                    .iter()
                    .map(|(k, v)| (k.clone(), v.replicas))
                    .collect()
            };
            let start = model::lock(&d.world).t;
            d.step(
                &title,
                Some(&objs),
                &mut |_| Vec::new(),
                &|w: &World| (w.t < start + 600).then(|| "observing the pools".into()),
                900,
            )?;
            let dropped: Vec<String> = {
                let w = model::lock(&d.world);
                declared
                    .iter()
                    .filter_map(|(pool, want)| {
                        let low = w.lowest_workers.get(pool).copied().unwrap_or(0);
                        (low < *want).then(|| format!("{pool}: {low} of {want} workers running"))
                    })
                    .collect()
            };
            if let Some(step) = d.rehearsal.steps.last_mut() {
                match &step.stop {
                    Some(s) if s.kind == "sync" && dropped.is_empty() => {
                        // A refused revert is this operation's safe outcome.
                        step.notes.push(format!(
                            "the revert was refused and the running workers kept: {}: {}",
                            s.object, s.condition
                        ));
                        step.stop = None;
                    }
                    _ if !dropped.is_empty() => {
                        step.stop = Some(Stop {
                            kind: "unsafe",
                            object: "MachineDeployment".into(),
                            condition: format!(
                                "the revert scaled running Talos workers down (day-2 review D13): {}",
                                dropped.join("; ")
                            ),
                            fix: "never revert a phase commit that renders the pools at 0 while Talos workers run: go forward, or acknowledge it explicitly (capstan plan)".into(),
                        });
                    }
                    _ => {}
                }
                let mut n = std::mem::take(&mut notes);
                n.append(&mut step.notes);
                step.notes = n;
            }
            // Going forward again (reverting the revert) is how a revert is undone: the
            // phase's Job lifts what the reverted render re-applied (the pause), and the
            // cluster must settle as before.
            let forward = format!(
                "{title}: reverted again, git says phase {} once more",
                phase.as_str()
            );
            let Some(objs) =
                render_or_stop(d, render, &forward, &phase_config(base, phase, kubeadm_cp))
            else {
                return Ok(());
            };
            d.step(&forward, Some(&objs), &mut |_| Vec::new(), &unsettled, 3600)?;
        }
        _ => {
            d.step(&title, Some(&objs), &mut |_| Vec::new(), &unsettled, 7200)?;
        }
    }
    if let Some(step) = d.rehearsal.steps.last_mut() {
        let mut n = notes;
        n.append(&mut step.notes);
        step.notes = n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// Every row of the assumptions table is cited by the model's code as `[A<n>]`, and
    /// every citation names a row.
    #[test]
    fn every_assumption_is_cited_and_every_citation_is_a_row() {
        let rows: BTreeSet<u32> = super::ASSUMPTIONS
            .lines()
            .filter_map(|l| l.strip_prefix("| A")?.split(' ').next()?.parse().ok())
            .collect();
        let sources = [
            include_str!("model.rs"),
            include_str!("workers.rs"),
            include_str!("admission.rs"),
            include_str!("argo.rs"),
            include_str!("kubectl.rs"),
            include_str!("jobs.rs"),
            include_str!("clusterctl.rs"),
            include_str!("sops_operator.rs"),
        ];
        let mut cited = BTreeSet::new();
        for src in sources {
            for part in src.split('[').skip(1) {
                let Some(inner) = part.split(']').next() else {
                    continue;
                };
                for item in inner.split(", ") {
                    let Some(item) = item.strip_prefix('A') else {
                        continue;
                    };
                    let bounds: Vec<u32> =
                        item.split("-A").filter_map(|n| n.parse().ok()).collect();
                    match bounds.as_slice() {
                        [n] => {
                            cited.insert(*n);
                        }
                        [a, b] => cited.extend(*a..=*b),
                        _ => {}
                    }
                }
            }
        }
        assert_eq!(rows, (1..=36).collect::<BTreeSet<u32>>());
        let uncited: Vec<&u32> = rows.difference(&cited).collect();
        let unknown: Vec<&u32> = cited.difference(&rows).collect();
        assert!(
            uncited.is_empty() && unknown.is_empty(),
            "uncited rows {uncited:?}, citations of no row {unknown:?}"
        );
    }
}
