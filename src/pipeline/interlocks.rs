//! The migration interlocks, checked on the final objects of a render (after overlays and
//! template overrides): the admission policies and their bindings, the phase's Job and
//! RBAC, the phase annotation, replicas per phase, the acknowledgement annotation.

use crate::model::{ClusterConfig, Phase, SCALE_TO_ZERO_ANNOTATION};
use crate::pipeline::render::{
    guard_policy_name, keep_workers_policy_name, migration_cluster_role_name, node_ref_policy_name,
    phase_job, tcp_api_version, RenderError,
};
use crate::procedure::PHASE_ANNOTATION;
use crate::resource::{self, Resource};
use serde_json::Value;

/// The annotations only render may write: the scale-to-zero acknowledgement (on a pool
/// rendered at 0, when cluster.yaml acknowledges it) and the Argo CD hooks and waves of the
/// migration objects (the templates' own).
fn annotation_problem(m: &crate::model::Migration, out: &[Resource]) -> Result<(), String> {
    // The acknowledgement that policy honours is render's to give, and only to a pool
    // rendered at 0 (an overlay or a template override cannot hand it out).
    let acknowledged = m
        .acknowledge
        .contains(&crate::model::Acknowledgement::ScaleWorkersToZero);
    for r in out.iter().filter(|r| r.kind() == "MachineDeployment") {
        let Some(v) = resource::at(
            &r.value,
            &["metadata", "annotations", SCALE_TO_ZERO_ANNOTATION],
        ) else {
            continue;
        };
        let replicas = resource::at(&r.value, &["spec", "replicas"]).and_then(Value::as_u64);
        if !acknowledged || replicas.is_some_and(|n| n > 0) {
            return Err(format!(
                "MachineDeployment {} carries `{SCALE_TO_ZERO_ANNOTATION}: {}`{}: capstan's admission policy lets it \
                 scale running machines to 0, so only render writes it, on a pool rendered at 0 replicas while \
                 spec.migration.acknowledge lists `scale-workers-to-zero`",
                r.name(),
                v.as_str().unwrap_or("…"),
                if acknowledged {
                    format!(" with replicas {}", replicas.unwrap_or_default())
                } else {
                    String::new()
                }
            ));
        }
    }
    // Argo CD annotations on the migration objects are the templates' own: the Jobs are
    // `Sync` hooks deleted before the next; nothing else may become a hook or move waves.
    for r in out.iter().filter(|r| r.migration_object()) {
        let ann = resource::at(&r.value, &["metadata", "annotations"]).and_then(Value::as_object);
        for (k, v) in ann.into_iter().flatten() {
            if !k.starts_with("argocd.argoproj.io/") {
                continue;
            }
            let own = r.kind() == "Job"
                && ((k == "argocd.argoproj.io/hook" && v == "Sync")
                    || (k == "argocd.argoproj.io/hook-delete-policy" && v == "BeforeHookCreation"));
            if !own {
                return Err(format!(
                    "{} {} carries `{k}: {v}`: the migration objects' Argo CD hooks and waves are capstan's",
                    r.kind(),
                    r.name()
                ));
            }
        }
    }
    Ok(())
}

/// The migration interlocks, checked on the final objects (so neither a template override
/// nor an overlay can remove them). For an existing cluster (one with a migration phase;
/// validation requires one of an imported cluster), in every phase: the admission policy
/// that refuses the cluster's machines until `status.bootstrapped` is set, bound to this
/// TalosControlPlane, fail-closed; the phase's Job; no `init` config (the provider would
/// mark the control plane bootstrapped and give the first machine an init config); the
/// admission policy that refuses to scale a worker pool with running machines to 0, and its
/// acknowledgement annotation only where cluster.yaml gives it. In `prepare` the
/// TalosControlPlane has 0 replicas; in `control-plane` replicas come with the pause; no
/// worker pool scales before phase `workers`.
pub(super) fn check_interlocks(
    file: &str,
    config: &ClusterConfig,
    out: &[Resource],
) -> Result<(), RenderError> {
    let Some(m) = &config.spec.migration else {
        return Ok(());
    };
    let fail = |message: String| {
        Err(RenderError::Interlock {
            file: file.into(),
            message,
        })
    };
    let name = &config.metadata.name;
    let tcp_name = format!("{name}-cp");
    let (suffix, template) = phase_job(m.phase);
    let job = format!("{name}-capstan-migration-{suffix}");
    // Jobs are immutable, so they carry a content hash like the templates (`names`).
    let job_prefix = format!("{job}-");
    if !out
        .iter()
        .any(|r| r.kind() == "Job" && r.name().starts_with(&job_prefix))
    {
        return fail(format!(
            "phase `{}` needs the Job {job} (template {template}): it sets status.bootstrapped on {tcp_name} \
             so the provider never bootstraps a second etcd{}",
            m.phase.as_str(),
            match m.phase {
                Phase::ControlPlane => ", and creates the control-plane machines in one paused-again window",
                Phase::Workers | Phase::Complete => ", and lifts the pause once no kubeadm etcd member is left",
                Phase::Prepare => "",
            }
        ));
    }
    if let Err(message) = policy_problem(
        config,
        Some(&tcp_name),
        out,
        &guard_policy_name(config),
        &[
            ("cluster.x-k8s.io", "machines", "CREATE"),
            (
                "infrastructure.cluster.x-k8s.io",
                "vspheremachines",
                "CREATE",
            ),
        ],
    ) {
        return fail(format!(
            "{message}: the API server must refuse the cluster's machines until {tcp_name} has \
             status.bootstrapped=true, in every phase (template migration/guard-policy.yaml)"
        ));
    }
    if m.phase == Phase::ControlPlane {
        if let Err(message) = policy_problem(
            config,
            Some(&tcp_name),
            out,
            &node_ref_policy_name(config),
            &[("cluster.x-k8s.io", "machines/status", "UPDATE")],
        ) {
            return fail(format!(
                "{message}: in phase control-plane no control-plane Machine may get a nodeRef while \
                 {tcp_name} is unpaused (template migration/node-ref-policy.yaml)"
            ));
        }
    }
    if let Err(message) = phase_leftovers(config, m.phase, &tcp_name, out) {
        return fail(message);
    }
    if let Err(message) = policy_problem(
        config,
        None,
        out,
        &keep_workers_policy_name(config),
        &[
            ("cluster.x-k8s.io", "machinedeployments", "UPDATE"),
            (
                "controlplane.cluster.x-k8s.io",
                "taloscontrolplanes",
                "UPDATE",
            ),
        ],
    ) {
        return fail(format!(
            "{message}: the API server must refuse to scale a worker pool with running machines to 0 unless \
             cluster.yaml acknowledges it, in every phase (template migration/keep-workers-policy.yaml)"
        ));
    }
    if let Err(message) = annotation_problem(m, out) {
        return fail(message);
    }
    for r in out {
        // An absent `spec.replicas` is defaulted by the webhooks: to 1 (a MachineDeployment
        // with autoscaler annotations: to the minimum size, kept when removed later).
        let declared = resource::at(&r.value, &["spec", "replicas"]).and_then(Value::as_u64);
        if declared.is_none()
            && matches!(r.kind(), "TalosControlPlane" | "MachineDeployment")
            && matches!(m.phase, Phase::Prepare | Phase::ControlPlane)
        {
            return fail(format!(
                "{} {} has no spec.replicas in phase `{}`: the webhook defaults it to 1 (or the \
                 autoscaler's minimum size), which would create machines before the migration allows; \
                 apply overlays that remove replicas (such as the autoscaler overlay) only from phase `workers` on",
                r.kind(),
                r.name(),
                m.phase.as_str()
            ));
        }
        let replicas = declared.unwrap_or(1);
        if r.kind() == "TalosControlPlane"
            && resource::at(&r.value, &["spec", "controlPlaneConfig", "init"]).is_some()
        {
            return fail(format!(
                "{} has spec.controlPlaneConfig.init: the provider then marks the control plane \
                 bootstrapped by itself and gives its first machine an init config, which an existing \
                 cluster must never get; use controlPlaneConfig.controlplane only",
                r.name()
            ));
        }
        match (r.kind(), m.phase) {
            ("TalosControlPlane", Phase::Prepare) if replicas > 0 => {
                return fail(format!("{} has replicas {replicas} in phase `prepare`: no Talos control-plane machine may exist before status.bootstrapped is set", r.name()));
            }
            ("TalosControlPlane", Phase::ControlPlane) if replicas > 0 => {
                let paused = resource::at(
                    &r.value,
                    &["metadata", "annotations", "cluster.x-k8s.io/paused"],
                )
                .and_then(Value::as_str);
                if paused != Some("true") {
                    return fail(format!(
                        "{} has replicas {replicas} while kubeadm etcd members remain but is not paused (`cluster.x-k8s.io/paused: \"true\"`): the provider's etcd audit would remove every kubeadm member",
                        r.name()
                    ));
                }
            }
            ("MachineDeployment", Phase::Prepare | Phase::ControlPlane) if replicas > 0 => {
                return fail(format!("{} has replicas {replicas}: worker pools scale only in phase `workers`, after the control plane", r.name()));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The interlocks that keep phase control-plane's nodeRef policy to its phase: in that phase
/// the TalosControlPlane carries [`PHASE_ANNOTATION`] (the policy refuses nothing without
/// it); in every other phase it does not (a policy a past sync left behind stays inert), no
/// object takes the policy's name, and in `workers` and `complete` the Job may delete it
/// (its ClusterRole and binding).
fn phase_leftovers(
    config: &ClusterConfig,
    phase: Phase,
    tcp_name: &str,
    out: &[Resource],
) -> Result<(), String> {
    let policy = node_ref_policy_name(config);
    let annotation = out
        .iter()
        .find(|r| r.kind() == "TalosControlPlane" && r.name() == tcp_name)
        .and_then(|r| resource::at(&r.value, &["metadata", "annotations", PHASE_ANNOTATION]));
    if phase == Phase::ControlPlane {
        if annotation.and_then(Value::as_str) != Some("control-plane") {
            return Err(format!(
                "{tcp_name} lacks the annotation `{PHASE_ANNOTATION}: control-plane`: the admission policy \
                 {policy} refuses control-plane Machines their nodeRef only while the TalosControlPlane carries it \
                 (template taloscontrolplane.yaml)"
            ));
        }
        return Ok(());
    }
    if annotation.is_some() {
        return Err(format!(
            "{tcp_name} carries the annotation `{PHASE_ANNOTATION}` in phase `{}`: only phase control-plane may, \
             or the admission policy {policy} a sync of that phase left behind refuses every new control-plane \
             Machine its nodeRef, and every control-plane rollout stops at replicas + 1",
            phase.as_str()
        ));
    }
    if let Some(r) = out.iter().find(|r| r.name() == policy) {
        return Err(format!(
            "{} {policy} is rendered in phase `{}`: that is phase control-plane's nodeRef policy, which would refuse \
             every new control-plane Machine its nodeRef",
            r.kind(),
            phase.as_str()
        ));
    }
    let role = migration_cluster_role_name(config);
    if matches!(phase, Phase::Workers | Phase::Complete)
        && !["ClusterRole", "ClusterRoleBinding"]
            .iter()
            .all(|k| out.iter().any(|r| r.kind() == *k && r.name() == role))
    {
        return Err(format!(
            "phase `{}` needs the ClusterRole and ClusterRoleBinding {role} (template migration/cluster-rbac.yaml): \
             the Job deletes the nodeRef policy {policy} left from phase control-plane before it lifts the pause",
            phase.as_str()
        ));
    }
    Ok(())
}

/// What is wrong with a rendered admission policy of the migration (the policy named
/// `name` and its binding), if anything: it must fail closed, take this TalosControlPlane as
/// its parameter (missing: deny) when `tcp_name` is given and no parameter otherwise, match
/// `rules` (group, resource, operation) in the cluster's namespace, validate, and be bound
/// with `Deny`.
fn policy_problem(
    config: &ClusterConfig,
    tcp_name: Option<&str>,
    out: &[Resource],
    name: &str,
    rules: &[(&str, &str, &str)],
) -> Result<(), String> {
    let find = |kind: &str| out.iter().find(|r| r.kind() == kind && r.name() == name);
    let str_at = |r: &Resource, path: &[&str]| {
        resource::at(&r.value, path)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let list_has = |v: Option<&Value>, want: &str| {
        v.and_then(Value::as_array).is_some_and(|a| {
            a.iter()
                .any(|x| x.as_str() == Some(want) || x.as_str() == Some("*"))
        })
    };
    let policy = find("ValidatingAdmissionPolicy")
        .ok_or_else(|| format!("no ValidatingAdmissionPolicy {name}"))?;
    let binding = find("ValidatingAdmissionPolicyBinding")
        .ok_or_else(|| format!("no ValidatingAdmissionPolicyBinding {name}"))?;
    if str_at(policy, &["spec", "failurePolicy"]).as_deref() != Some("Fail") {
        return Err(format!(
            "ValidatingAdmissionPolicy {name} is not failurePolicy: Fail"
        ));
    }
    match tcp_name {
        Some(_) => {
            let want_param = (
                Some(tcp_api_version(config.spec.flavour).to_string()),
                Some("TalosControlPlane".to_string()),
            );
            if (
                str_at(policy, &["spec", "paramKind", "apiVersion"]),
                str_at(policy, &["spec", "paramKind", "kind"]),
            ) != want_param
            {
                return Err(format!(
                    "ValidatingAdmissionPolicy {name} does not take the TalosControlPlane ({}) as its parameter",
                    tcp_api_version(config.spec.flavour)
                ));
            }
        }
        // A policy without a parameter: one bound to a parameter that goes missing (or is
        // denied by `parameterNotFoundAction`) would refuse or pass for the wrong reason.
        None => {
            if resource::at(&policy.value, &["spec", "paramKind"]).is_some()
                || resource::at(&binding.value, &["spec", "paramRef"]).is_some()
            {
                return Err(format!(
                    "ValidatingAdmissionPolicy {name} takes no parameter: its binding has no paramRef"
                ));
            }
        }
    }
    let constraints = resource::at(&policy.value, &["spec", "matchConstraints"]);
    let ns_selected = constraints
        .and_then(|c| c.pointer("/namespaceSelector/matchLabels/kubernetes.io~1metadata.name"))
        .and_then(Value::as_str);
    if ns_selected != Some(config.metadata.namespace.as_str()) {
        return Err(format!(
            "ValidatingAdmissionPolicy {name} does not select the namespace {}",
            config.metadata.namespace
        ));
    }
    let declared = constraints
        .and_then(|c| c.get("resourceRules"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (group, res, op) in rules {
        let covered = declared.iter().any(|r| {
            list_has(r.get("apiGroups"), group)
                && list_has(r.get("resources"), res)
                && list_has(r.get("operations"), op)
        });
        if !covered {
            return Err(format!(
                "ValidatingAdmissionPolicy {name} does not match {op} of {res}.{group}"
            ));
        }
    }
    if resource::at(&policy.value, &["spec", "validations"])
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        return Err(format!(
            "ValidatingAdmissionPolicy {name} has no validation"
        ));
    }
    let b = |path: &[&str]| str_at(binding, path);
    let param_ok = match tcp_name {
        Some(tcp_name) => {
            b(&["spec", "paramRef", "name"]).as_deref() == Some(tcp_name)
                && b(&["spec", "paramRef", "namespace"]).as_deref()
                    == Some(config.metadata.namespace.as_str())
                && b(&["spec", "paramRef", "parameterNotFoundAction"]).as_deref() == Some("Deny")
        }
        None => true,
    };
    if b(&["spec", "policyName"]).as_deref() != Some(name)
        || !list_has(
            resource::at(&binding.value, &["spec", "validationActions"]),
            "Deny",
        )
        || !param_ok
        || resource::at(&binding.value, &["spec", "matchResources"]).is_some()
    {
        return Err(match tcp_name {
            Some(tcp_name) => format!(
                "ValidatingAdmissionPolicyBinding {name} must bind policy {name} with validationActions [Deny] \
                 to TalosControlPlane {}/{tcp_name} with parameterNotFoundAction: Deny, and no matchResources",
                config.metadata.namespace
            ),
            None => format!(
                "ValidatingAdmissionPolicyBinding {name} must bind policy {name} with validationActions [Deny], \
                 and no matchResources"
            ),
        });
    }
    Ok(())
}
