//! `capstan plan`: the migration runbook for a cluster's current phase, as Markdown. A pure
//! function of `cluster.yaml`: what the bundle does when synced, the commands to run around
//! it, what to verify before moving to the next phase, how to roll back, and why.
//!
//! The phase model (from the Talos, CABPT, CACPPT and Cluster API source, cited where each
//! rule is enforced):
//! - every phase of an existing cluster: an admission policy refuses the cluster's machines
//!   until `status.bootstrapped` is true on the TalosControlPlane, and the phase's Job sets
//!   it once the imported Secrets exist; otherwise the provider sends the Talos Bootstrap
//!   RPC to a machine that has not joined yet, which starts a second, empty etcd;
//! - `prepare`: the objects and sealed secrets exist, every replica count is 0;
//! - `control-plane`: the TalosControlPlane gets its replicas but is paused in git; a Job
//!   unpauses it only while it has no machine, for seconds, until the provider has created
//!   them all, and pauses it again. The provider's etcd audit force-removes every etcd
//!   member that is not one of its machines on any unpaused reconcile once all its machines
//!   have a node: so the control plane stays paused until the kubeadm members are removed
//!   by hand, one at a time. etcd has 6 voters (quorum 4) meanwhile;
//! - `workers`: no kubeadm etcd member is left; a Job deletes phase control-plane's nodeRef
//!   policy (inert anyway once git drops the TalosControlPlane's phase annotation, but a
//!   copy an older render gave `Prune=false` is never pruned) and lifts the pause
//!   (server-side apply cannot: the scale Job's annotate owns it); the worker pools scale.
//!   Each phase's runbook says what the step removes of the phase before;
//! - `complete`: no kubeadm node is left; Cluster API manages the cluster, still guarded.
//!
//! Procedures (rollback, replacing a machine, removing a kubeadm node, ...) come from
//! [`crate::procedure`], the one source `explain` and the README share.

use crate::migration::check::MANAGEMENT_OBJECTS_COMMAND;
use crate::model::Acknowledgement;
use crate::model::{ClusterConfig, EndpointStrategy, Phase, SemVer};
use crate::procedure::{
    delete_node_ref_policy_command, Names, ANTI_AFFINITY, DRAIN, DRAIN_PDB, ETCD_SNAPSHOT,
    PHASE_ANNOTATION, RECOVER_TALOS_QUORUM, REMOVE_KUBEADM_NODE, REPLACE_TALOS_MACHINE,
    ROLLBACK_CONTROL_PLANE, UNPAUSE,
};
use std::fmt::Write as _;

/// The runbook for the cluster's current phase.
pub fn runbook(config: &ClusterConfig, sizes: &[PoolSize]) -> String {
    let mut md = String::with_capacity(8192);
    let c = Ctx::new(config);
    header(&mut md, &c);
    match c.phase {
        Some(Phase::Prepare) => prepare(&mut md, &c),
        Some(Phase::ControlPlane) => control_plane(&mut md, &c),
        Some(Phase::Workers) => workers(&mut md, &c, sizes),
        Some(Phase::Complete) | None => complete(&mut md, &c),
    }
    md
}

/// `v` as a list of code spans for the runbook, or `none`.
fn list(v: &[String]) -> String {
    if v.is_empty() {
        "none".to_string()
    } else {
        v.iter()
            .map(|x| format!("`{x}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// What every phase's runbook says of the cluster, computed once.
struct Ctx<'a> {
    config: &'a ClusterConfig,
    name: &'a str,
    ns: &'a str,
    tcp: String,
    phase: Option<Phase>,
    cp_replicas: u32,
    kubeadm: crate::model::KubeadmNodes,
    etcd_old: bool,
    talos_etcd36: bool,
    names: Names,
    policy: String,
    guard: String,
    keep_policy: String,
    keep_workers: String,
    capi_drain: String,
    lb_backends: String,
}

impl Ctx<'_> {
    fn new(config: &ClusterConfig) -> Ctx<'_> {
        let s = &config.spec;
        let name = &config.metadata.name;
        let ns = &config.metadata.namespace;
        let tcp = format!("{name}-cp");
        let phase = s.migration.as_ref().map(|m| m.phase);
        let cp_replicas = s.control_plane.as_ref().map_or(0, |c| c.replicas);
        let kubeadm = s
            .migration
            .as_ref()
            .map(|m| m.kubeadm.clone())
            .unwrap_or_default();

        let etcd_old = s
            .provenance
            .as_ref()
            .and_then(|p| p.etcd_version.as_deref())
            .and_then(|v| SemVer::parse(&format!("v{}", v.split('-').next().unwrap_or(v))))
            .is_some_and(|v| v.major == 3 && v.minor == 5 && v.patch < 20);
        let talos_etcd36 =
            SemVer::parse(&s.versions.talos).is_some_and(|t| t.major == 1 && t.minor >= 11);

        let names = Names {
            namespace: ns.clone(),
            cluster: name.clone(),
        };
        let policy = names.guard_policy();
        let guard = format!(
            "Keeps the cluster guarded against a second etcd: the admission policy `{policy}` refuses every Machine and \
             VSphereMachine of the cluster until `{tcp}` has `status.bootstrapped=true`, and the phase's Job (ServiceAccount \
             `{name}-capstan-migration`: `{tcp}` and its status by name, listing Machines, reading Secrets by name) waits for \
             `{name}-talos` and `{name}-ca`, then sets the status, refusing while Talos control-plane Nodes run without \
             Machines (a lost management cluster: restore its Machines first)."
        );
        // D13: the admission policy that keeps running workers from being scaled to 0 (every
        // phase of an existing cluster), as this phase needs it said.
        let keep_policy = format!("{name}.{ns}.keep-workers.capstan.dev");
        let acknowledged = s
            .migration
            .as_ref()
            .is_some_and(|m| m.acknowledge.contains(&Acknowledgement::ScaleWorkersToZero));
        let keep_workers = match phase {
            Some(Phase::Prepare | Phase::ControlPlane) => format!(
                "Keeps running Talos workers: this phase renders every worker pool at 0 replicas, which on the first pass \
                 creates none; but reached by a revert from `workers` or `complete` (a revert of the phase commit), it would \
                 make Cluster API drain and delete every Talos worker, by then usually the cluster's only workers. The \
                 admission policy `{keep_policy}` refuses to scale a MachineDeployment with running machines to 0, so that \
                 sync fails on the MachineDeployments: move forward again instead (set the phase back and commit). {}",
                if acknowledged {
                    "**`spec.migration.acknowledge` lists `scale-workers-to-zero`**: the pools carry \
                     `capstan.dev/scale-to-zero: acknowledged` and the policy lets them go to 0: every Talos worker is \
                     drained and deleted. Uncordon kubeadm workers to take their pods first, and remove the \
                     acknowledgement in the next commit (render refuses it once no pool is at 0)."
                } else {
                    "Only if the Talos workers must really go (every one drained and deleted), add `scale-workers-to-zero` \
                     to `spec.migration.acknowledge`, after uncordoning kubeadm workers to take their pods."
                }
            ),
            _ => format!(
                "Keeps running Talos workers: the admission policy `{keep_policy}` refuses to scale a MachineDeployment \
                 with running machines to 0 (a revert of the phase commit renders every pool at 0, a pool set to \
                 `replicas: 0`) unless `spec.migration.acknowledge` lists `scale-workers-to-zero`; the Cluster \
                 Autoscaler's scale subresource is not affected."
            ),
        };
        // D10: what Cluster API's own drains do with a PodDisruptionBudget.
        let capi_drain = match s.deletion.node_drain_timeout_seconds.filter(|t| *t > 0) {
            None => "Cluster API drains every machine it deletes (a rollout, a scale-down, a remediation) through the \
                     same Eviction API, and with no `spec.deletion.nodeDrainTimeoutSeconds` (the default) it waits for as \
                     long as a PodDisruptionBudget refuses: a budget that never allows an eviction holds that machine in \
                     `Deleting`, and the rollout with it, until the budget is fixed."
                .to_string(),
            Some(t) => format!(
                "Cluster API drains every machine it deletes (a rollout, a scale-down, a remediation) through the same \
                 Eviction API, but `spec.deletion.nodeDrainTimeoutSeconds: {t}` makes it stop after {t} s and delete the \
                 machine anyway, with the pods a PodDisruptionBudget still protects: a replica that resyncs slower than \
                 that (a quorum StatefulSet) loses a second member. Leave it unset to wait for every budget."
            ),
        };
        let lb_backends = match (s.endpoint.strategy, pool_addresses(config)) {
            (Some(EndpointStrategy::External), Some(addrs)) => format!(
                "Before syncing, add the control-plane pool's addresses {addrs} to the load balancer's backends, each with \
                 a TCP health check on port {} (an HTTP check of `/healthz` gets 401 from a Talos apiserver without `anonymous-auth`): the Talos control-plane \
                 machines take exactly these, and they stay the backends through every later rollout (clients keep \
                 port {}, the load balancer's frontend; the backends' port is spec.endpoint.backendPort). Remove each \
                 kubeadm backend when its node is removed.",
                s.endpoint.backend_port(),
                s.endpoint.port
            ),
            _ => "Move the load balancer backends to the Talos control-plane nodes as they become Ready (`kubectl get nodes -l node-role.kubernetes.io/control-plane`).".to_string(),
        };
        Ctx {
            config,
            name,
            ns,
            tcp,
            phase,
            cp_replicas,
            kubeadm,
            etcd_old,
            talos_etcd36,
            names,
            policy,
            guard,
            keep_policy,
            keep_workers,
            capi_drain,
            lb_backends,
        }
    }
}

/// The runbook's title and what it says of the cluster in every phase.
fn header(md: &mut String, c: &Ctx<'_>) {
    let Ctx {
        config,
        name,
        ns,
        phase,
        kubeadm,
        ..
    } = c;
    let s = &config.spec;
    let _ = writeln!(
        md,
        "# Runbook: `{name}`, phase `{}`\n",
        phase.map_or("none (not migrating)", Phase::as_str)
    );
    let _ = writeln!(
        md,
        "Cluster `{name}` in namespace `{ns}` (flavour `{}`), Talos {}, Kubernetes {}, endpoint `{}`.",
        s.flavour.as_str(),
        s.versions.talos,
        s.versions.kubernetes,
        s.endpoint.url()
    );
    let _ = writeln!(
        md,
        "kubeadm still present: control-plane nodes {}; etcd members {}; workers {}.\n",
        list(&kubeadm.control_plane_nodes),
        list(&kubeadm.etcd_members),
        list(&kubeadm.worker_nodes)
    );
    let _ = writeln!(
        md,
        "Phases: `prepare` → `control-plane` → `workers` → `complete`. Before every step: `capstan diff` of the change reviewed, and, until the Talos control plane has joined, a clean check with every input (a missing one blocks as `check-inputs`): `{}`.\n",
        crate::migration::check::full_command(config, &format!("clusters/{name}"), |_| None, |_| false)
    );

}

/// Phase `prepare`: the objects created, nothing scaled.
fn prepare(md: &mut String, c: &Ctx<'_>) {
    let Ctx {
        config,
        name,
        ns,
        tcp,
        cp_replicas,
        etcd_old,
        talos_etcd36,
        names,
        policy,
        guard,
        keep_workers,
        ..
    } = c;
    let s = &config.spec;
    section(md, "What the bundle does when synced", &[
        &format!("Creates the Cluster API objects, the sealed Secrets `{name}-talos` (the imported Talos secrets bundle) and `{name}-ca` (the kubeadm Kubernetes CA), so the providers reuse the kubeadm PKI instead of generating one."),
        &format!("Renders TalosControlPlane `{tcp}` and every MachineDeployment with **0 replicas**: no Talos machine is created in this phase."),
        guard,
        &format!("Runs Job `{name}-capstan-migration-bootstrapped-…`: the guard alone."),
        keep_workers,
    ]);
    let gone = removed(names, Phase::Prepare);
    section(
        md,
        "What this step removes",
        &gone.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let mut before = vec![
        format!("The management cluster runs Kubernetes 1.30 or later (the admission policy is `admissionregistration.k8s.io/v1`) and the provider releases declared in `spec.migration.providers`: `capstan check clusters/{name} --providers providers.yaml` with `kubectl get providers.clusterctl.cluster.x-k8s.io -A -o yaml > providers.yaml`."),
        "Config matching on the kubeadm side (`capstan check`): the service-account issuer and audiences, the encryption provider order and key name (`key2` secretbox), CIDRs, DNS domain, endpoint.".to_string(),
        "Create a non-expiring join token on the kubeadm cluster, or apply the sealed one: `capstan secrets decrypt clusters/NAME/secrets/workload/bootstrap-token-*.yaml | kubectl --kubeconfig kubeadm.conf apply -f -` (the token of the imported bundle, no expiry).".replace("NAME", name),
        match crate::secrets::seal::identity_secret_name(config) {
            Some(secret) => format!("The vSphere credentials CAPV logs in with are sealed with the cluster as Secret `{secret}` (`capstan secrets vsphere-identity clusters/{name} --username <user>`, the password on stdin): CAPV takes ownership of it and deletes it with the Cluster, so a copy made by hand would not survive a rebuild."),
            None => "The vSphere credentials CAPV logs in with exist in the management cluster (its manager credentials, or the VSphereClusterIdentity `spec.vsphere.identityRef` names, with its Secret in CAPV's namespace).".to_string(),
        },
        format!("The vSphere cloud controller manager (kubernetes/cloud-provider-vsphere) runs in the cluster: Talos nodes run kubelet `--cloud-provider=external` and stay tainted `node.cloudprovider.kubernetes.io/uninitialized`, without the `vsphere://` providerID Cluster API matches Machines by, until it initialises them (`capstan check clusters/{name} --nodes nodes.yaml` with `kubectl get nodes -o yaml > nodes.yaml`)."),
        "Fix the kube-proxy DaemonSet labels (`tier: node`, `k8s-app: kube-proxy`) if `capstan check` reports them.".to_string(),
        match s.control_plane.as_ref().and_then(|c| c.anti_affinity.as_ref()) {
            Some(a) => format!("The control-plane VMs will carry the vSphere tag `{}` (`spec.controlPlane.antiAffinity`): create the VM-VM anti-affinity compute policy on it in vCenter now (procedure \"{}\" in the next phase's runbook).", a.tag_id, ANTI_AFFINITY.title),
            None => format!("Set `spec.controlPlane.antiAffinity.tagID` now, while no machine exists (procedure \"{}\" in the next phase's runbook): CAPV makes no anti-affinity for a TalosControlPlane, and a DRS rule over VM names is stale after the first rollout.", ANTI_AFFINITY.title),
        },
    ];
    if *talos_etcd36 {
        before.push(format!(
            "Talos {} runs etcd 3.6: upgrade the kubeadm etcd to 3.5.26 (at least 3.5.20) first, or joining fails with `too many learner member in cluster`{}.",
            s.versions.talos,
            if *etcd_old { " (the imported cluster runs an older 3.5)" } else { "" }
        ));
    }
    section(
        md,
        "Before syncing",
        &before.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    section(md, "Verify before the next phase", &[
        &format!("`kubectl -n {ns} get taloscontrolplanes.controlplane.cluster.x-k8s.io {tcp} -o jsonpath='{{.status.bootstrapped}}'` prints `true`."),
        &format!("`kubectl -n {ns} get machines -l cluster.x-k8s.io/cluster-name={name}` lists nothing."),
        &format!("`kubectl -n {ns} get secret {name}-talos {name}-ca {name}-kubeconfig` exist (the control-plane provider wrote the kubeconfig: the next phase's Job reads the workload cluster through it), and the Cluster's infrastructure is ready (`kubectl -n {ns} get vspherecluster {name}`)."),
        "On a kubeadm control-plane node: `etcdctl member list` shows only the kubeadm members, all started.",
    ]);
    section(md, "Next phase", &[&format!(
        "In `clusters/{name}/cluster.yaml` set `spec.migration.phase: control-plane`, add `acknowledge: [etcd-audit, control-plane-anti-affinity]` after reading the next phase's runbook (`capstan plan` after the edit), keep `etcdMembers` listing every kubeadm etcd member. The TalosControlPlane will get {cp_replicas} replicas at once. Right before that commit is synced, take an etcd snapshot of the kubeadm cluster (\"{}\", below): `capstan check` blocks phase control-plane without it.",
        ETCD_SNAPSHOT.title
    )]);
    md.push_str(&ETCD_SNAPSHOT.markdown(names, "##"));
    md.push('\n');
    section(md, "Roll back", &[&format!("Nothing runs on the workload cluster yet: remove the Application (or `kubectl delete -k` the bundle); the admission policy `{policy}` and its binding are kept by Argo CD (`Delete=false`, like the TalosControlPlane): delete them by hand with the TalosControlPlane. A `status.bootstrapped` already set does no harm while no Talos machine exists.")]);
}

/// Phase `control-plane`: the Talos control plane joins the kubeadm etcd.
fn control_plane(md: &mut String, c: &Ctx<'_>) {
    let Ctx {
        name,
        tcp,
        cp_replicas,
        kubeadm,
        names,
        guard,
        keep_workers,
        lb_backends,
        ..
    } = c;
    md.push_str(&ETCD_SNAPSHOT.markdown(names, "##"));
    md.push('\n');
    section(md, "What the bundle does when synced", &[
        &format!("Renders TalosControlPlane `{tcp}` with **{cp_replicas} replicas**, the annotation `cluster.x-k8s.io/paused: \"true\"` and the annotation `{PHASE_ANNOTATION}: control-plane`. Worker pools stay at 0."),
        guard,
        &format!("Runs Job `{name}-capstan-migration-scale-control-plane-…`: after the guard it unpauses only if no control-plane Machine exists (two agreeing reads) and the workload cluster (through `{name}-kubeconfig`) has no Talos control-plane Node, which would mean this management cluster lost its Machines. The provider then creates all {cp_replicas} Machines in seconds (one per reconcile); the Job pauses again as soon as they exist, at the first nodeRef, or after 30 seconds, and on every exit path, retried until it holds. Any failed, timed-out or unparsable `kubectl` call fails the Job with the pause kept; a killed pod is replaced by one that re-asserts it. Once any Machine exists it never unpauses again."),
        &format!("Adds the admission policy `{}`: a control-plane Machine gets its nodeRef only while `{tcp}` is paused, so the etcd audit (which needs every nodeRef) cannot run inside the window, even if the Job's pod is lost in it. It applies only while `{tcp}` carries the annotation `{PHASE_ANNOTATION}`, which only this phase renders.", names.node_ref_policy()),
        "The Talos machines boot, join the kubeadm etcd as learners one at a time (Talos finds the members through the `default/kubernetes` endpoints) and are promoted; their kubelets join with the imported bootstrap token.",
        keep_workers,
    ]);
    let gone = removed(names, Phase::ControlPlane);
    section(
        md,
        "What this step removes",
        &gone.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    section(md, "Why the control plane stays paused", &[
        "The provider's etcd audit lists the etcd members and force-removes every member whose name is not one of its Machines, on every unpaused reconcile once all its Machines have a node. With kubeadm members present that removes them all at once and can lose quorum.",
        "It runs before scaling in the same reconcile, so raising replicas on an unpaused control plane whose machines have joined triggers it too. That is why all Talos control-plane machines are created in one window, before any has a node, and why the control plane stays paused until `etcdMembers` is empty.",
        "While paused the provider does not reconcile `status`, scale or remediate: that is expected during this phase.",
    ]);
    let kubeadm_n = kubeadm.etcd_members.len();
    let voters = kubeadm_n + *cp_replicas as usize;
    section(md, "Quorum during this phase", &[
        &format!("etcd has {kubeadm_n} kubeadm and {cp_replicas} Talos members: {voters} voters, quorum {}, so it survives {} members down, and no more: the new Talos VMs may share an ESXi host, and every kubeadm node drained, rebooted or removed counts. Remove the kubeadm members promptly, one at a time.", voters / 2 + 1, voters - (voters / 2 + 1)),
        "CAPV makes no vSphere cluster module (anti-affinity) for a TalosControlPlane: keep the control-plane VMs on separate hosts (below), and check where they run before the first kubeadm node is removed (`capstan check --vsphere-inventory`, `control-plane-hosts`).",
        "If etcd loses quorum anyway (`etcdserver: no leader`, `request timed out`): before the first kubeadm member is removed, restore it from one kubeadm member (`capstan explain 'etcdserver: no leader'`); after, on the Talos side from a snapshot (\"Restore etcd quorum on the Talos control plane\", below).",
    ]);
    // D19: Talos sets `--leader-elect=true` and no `--leader-elect-resource-*` flag
    // (Talos `control_plane_static_pod.go` v1.13.9:583-600, :762-771), so both sides
    // share the default Leases (`migration::check::control_plane_parity`).
    section(md, "Leader leases during this phase", &[
        "kube-controller-manager and kube-scheduler each run one active instance, elected through the Leases `kube-system/kube-controller-manager` and `kube-system/kube-scheduler`, which the kubeadm and Talos instances share: whichever holds a lease runs with its own flags, and the lease moves when its holder stops renewing for 15 s (a reboot, a drained or removed kubeadm node). `capstan check --controller-manager-manifest … --scheduler-manifest …` (`controller-manager-flags`, `scheduler-flags`) shows the flags that would flip; `kubectl -n kube-system get lease kube-controller-manager kube-scheduler` shows the holder.",
    ]);
    md.push_str(&ANTI_AFFINITY.markdown(names, "##"));
    md.push('\n');
    section(md, "Around the sync", &[
        "Watch the join: `talosctl -n <talos-ip> service etcd` and `etcdctl member list` on a kubeadm node (learners appear, then turn into voters). The talosconfig is in the Secret `NAME-talosconfig` (key `talosconfig`).".replace("NAME", name).as_str(),
        lb_backends,
        &format!(
            "Then remove the kubeadm control-plane nodes ({}) one at a time, as below.",
            list(&kubeadm.control_plane_nodes)
        ),
        "Never unpause the TalosControlPlane by hand in this phase.",
    ]);
    md.push_str(&REMOVE_KUBEADM_NODE.markdown(names, "##"));
    md.push('\n');
    md.push_str(&REPLACE_TALOS_MACHINE.markdown(names, "##"));
    md.push('\n');
    section(md, "Verify before the next phase", &[
        "Before the commit that removes the last kubeadm node (and sets phase `workers`): `etcdctl member list` shows the Talos members, all voters, and that one kubeadm member; after its `kubeadm reset`, only the Talos members.",
        "With `etcdMembers` and `controlPlaneNodes` empty and phase `workers`, `capstan check` is clean.",
        "The API through the load balancer answers with the Talos nodes only; service-account tokens of running workloads still authenticate (no `invalid bearer token` in the apiserver logs).",
        &format!("The kubeadm workers can be drained: `capstan check clusters/{name} --workloads workloads.json` (`kubectl get pv,pdb,pods -A -o json > workloads.json`) reports no blocking `worker-*` finding: the next phase scales the pools and drains the kubeadm workers."),
    ]);
    section(md, "Next phase", &[&format!("In the commit that removes the last kubeadm node, set `spec.migration.phase: workers` in `clusters/{name}/cluster.yaml`: its Job lifts the pause once the workload cluster shows no kubeadm etcd member, and the worker pools scale.")]);
    md.push_str(&ROLLBACK_CONTROL_PLANE.markdown(names, "##"));
    md.push('\n');
    md.push_str(&RECOVER_TALOS_QUORUM.markdown(names, "##"));
    md.push('\n');
}

/// Phase `workers`: the pause lifted, the worker pools scaled.
fn workers(md: &mut String, c: &Ctx<'_>, sizes: &[PoolSize]) {
    let Ctx {
        config,
        name,
        ns,
        tcp,
        kubeadm,
        names,
        guard,
        keep_policy,
        keep_workers,
        capi_drain,
        ..
    } = c;
    let s = &config.spec;
    section(md, "What the bundle does when synced", &[
        &format!("Renders TalosControlPlane `{tcp}` without the pause annotation, and runs Job `{name}-capstan-migration-unpause-control-plane-…` that removes it (see below): the provider reconciles again, and its etcd audit now finds only its own machines."),
        guard,
        &format!("Scales the worker pools: {}.", pools(config, sizes)),
        keep_workers,
    ]);
    let gone = removed(names, Phase::Workers);
    section(
        md,
        "What this step removes",
        &gone.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    md.push_str(&UNPAUSE.markdown(names, "##"));
    md.push('\n');
    section(md, "Around the sync", &[
        &format!(
            "Before the first drain, and again before each: `capstan check clusters/{name} --workloads workloads.json` with `kubectl get pv,pdb,pods -A -o json > workloads.json`: no volume in use pinned to a kubeadm worker (`worker-local-volumes`), no Pod without a controller on them (`worker-bare-pods`), no PodDisruptionBudget that allows no eviction (`worker-pdb-no-disruption`), and pools that hold what the kubeadm workers run (`worker-pool-capacity`)."
        ),
        &format!(
            "As Talos workers become Ready, drain and remove the kubeadm workers ({}) one by one: `{DRAIN}`, `kubectl delete node <node>`, then `kubeadm reset --force` on it and remove it from `workerNodes` in `cluster.yaml`.",
            list(&kubeadm.worker_nodes)
        ),
        DRAIN_PDB,
        capi_drain,
        &workers_endpoint(config),
    ]);
    section(md, "Verify before the next phase", &[
        &format!("`kubectl -n {ns} get taloscontrolplanes.controlplane.cluster.x-k8s.io {tcp} -o jsonpath='{{.metadata.annotations}}'` shows no `cluster.x-k8s.io/paused`."),
        "`kubectl get nodes -o wide` shows only Talos nodes; `workerNodes` is empty.",
        &format!("`kubectl -n {ns} get taloscontrolplanes,machinedeployments` report their replicas ready."),
    ]);
    section(
        md,
        "Next phase",
        &[&format!("Set `spec.migration.phase: complete`. Keep `spec.migration` (with `jobImage`): the cluster stays guarded in every phase. {}", match s.endpoint.strategy {
            None => "Phase `complete` needs `spec.endpoint.strategy` (`vip` or `external`): `render` refuses it without one (`capstan check`: `endpoint-strategy`); its runbook has the endpoint hand-over.",
            Some(_) => "Its runbook has the endpoint hand-over for `spec.endpoint.strategy`.",
        })],
    );
    section(md, "Roll back", &[
        "Uncordon the kubeadm workers that are still there, then scale a pool down in `cluster.yaml` (Cluster API drains and removes Talos workers, one eviction at a time).",
        &format!("Do not revert the phase commit to get back to `control-plane`: that renders every pool at 0 replicas and would drain and delete every Talos worker at once; the admission policy `{keep_policy}` refuses it unless `spec.migration.acknowledge` lists `scale-workers-to-zero`."),
    ]);
    md.push_str(&RECOVER_TALOS_QUORUM.markdown(names, "##"));
    md.push('\n');
}

/// Phase `complete`, or a cluster that is not migrating.
fn complete(md: &mut String, c: &Ctx<'_>) {
    let Ctx {
        config,
        name,
        phase,
        names,
        guard,
        keep_workers,
        capi_drain,
        ..
    } = c;
    let s = &config.spec;
    let job = format!("Runs Job `{name}-capstan-migration-unpause-control-plane-…`: the guard, and it lifts a pause left from phase control-plane once the workload cluster shows no kubeadm etcd member (`capstan explain 'reconciliation is paused for this object'`).");
    let mut what = vec![
        "Manages the cluster like any Cluster API cluster: every replica count as declared, no pause.",
    ];
    if phase.is_some() {
        what.push(guard.as_str());
        what.push(job.as_str());
        what.push(keep_workers.as_str());
    } else {
        what.push("Nothing guards against the Bootstrap RPC: this cluster was not imported and has no migration phase, so the control-plane provider bootstraps it as a new cluster.");
    }
    what.push("A change of a machine template's spec renames it (content hash) and rolls the machines; review it with `capstan diff`.");
    section(md, "What the bundle does when synced", &what);
    if phase.is_some() {
        let gone = removed(names, Phase::Complete);
        section(
            md,
            "What this step removes",
            &gone.iter().map(String::as_str).collect::<Vec<_>>(),
        );
    }
    let handover = endpoint_handover(config);
    section(
        md,
        "Control-plane endpoint",
        &handover.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    section(md, "Keep in mind", &[
        "Keep `spec.migration.phase: complete`: a management cluster rebuilt from git then cannot bootstrap a second etcd (the policy refuses machines until the Job has set `status.bootstrapped`).",
        "The sealed secrets are the cluster's PKI: never re-import; rotate recipients with `capstan secrets rekey`.",
        "Kubernetes and Talos upgrades: one minor at a time, inside the support table `capstan check` uses. A Talos upgrade is a VM template of the new release (named with it) with `spec.versions.talos` (and `spec.talos.installImage`) in the same commit: `check` blocks a template of another release (`talos-image`); every machine rolls.",
        capi_drain,
        "Rolling machines never upgrades kube-proxy or CoreDNS: Talos applies its bootstrap manifests only when they are missing. After `spec.versions.kubernetes` moves, bump their images yourself (GitOps manifests, or `talosctl upgrade-k8s` for the manifests only; see README \"Upgrades\").",
        &{
            let folder = s.vsphere.as_ref().map_or("<folder>", |v| v.folder.as_str());
            let inventory = format!("`govc vm.info -json '{folder}/*' > vms.json`, then `capstan check clusters/{name} --vsphere-inventory vms.json`");
            match s.control_plane.as_ref().and_then(|c| c.anti_affinity.as_ref()) {
                Some(a) => format!("Every rollout replaces the control-plane VMs: CAPV tags each new one `{}`, and the compute policy on the tag keeps them apart; after a rollout, {inventory} shows that no host runs 2 of them (`control-plane-hosts`).", a.tag_id),
                None => format!("Every rollout replaces the control-plane VMs and nothing keeps the new ones apart (CAPV makes no anti-affinity for a TalosControlPlane): set `spec.controlPlane.antiAffinity.tagID` with a compute policy on the tag (procedure \"{}\", README); after a rollout, {inventory} shows where they run.", ANTI_AFFINITY.title),
            }
        },
        "Take etcd snapshots on a schedule, off the cluster: `talosctl -e <node-ip> -n <node-ip> etcd snapshot <file>` (one node; any healthy control-plane node holds the same data); `capstan check --etcd-snapshot <file>` verifies one. They are what the quorum recovery below restores.",
    ]);
    md.push_str(&RECOVER_TALOS_QUORUM.markdown(names, "##"));
    md.push('\n');
}

/// The control-plane pool's addresses as the IPAM provider hands them out, as a list for
/// the runbook.
fn pool_addresses(config: &ClusterConfig) -> Option<String> {
    let pool = config.spec.endpoint.control_plane_pool.as_ref()?;
    let addrs = pool.allocatable().ok()?;
    Some(
        addrs
            .iter()
            .map(|a| format!("`{a}`"))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// Phase `workers`: where the endpoint stands until phase `complete`, and what a
/// control-plane rollout before then would do to it.
fn workers_endpoint(config: &ClusterConfig) -> String {
    let e = &config.spec.endpoint;
    if e.active_pool().is_some() {
        return "The load balancer lists the control plane's own pool (strategy `external`): a control-plane rollout in this phase keeps it serving.".into();
    }
    match e.active_vip() {
        Some(vip) if e.host != vip.address => format!(
            "The Talos control-plane nodes hold the VIP `{}` already: with no kubeadm control-plane node left, point `{}` at it now (DNS, the hand-over of phase `complete`'s runbook) and verify `kubectl --server https://{}:{} get --raw /readyz`. Until then the load balancer lists the Talos control-plane machines by address, and a control-plane rollout (a Talos or Kubernetes change, its template or patches) would leave it none (`capstan rehearse --until workers --then rollout` shows it).",
            vip.address,
            e.host,
            if vip.address.contains(':') { format!("[{}]", vip.address) } else { vip.address.clone() },
            e.port
        ),
        _ => "Until phase `complete` hands the endpoint over, the load balancer lists the Talos control-plane machines by address: change nothing that rolls the control plane (Talos or Kubernetes version, its template, its patches) before then, or swap each replaced machine's address in the load balancer as it goes (`capstan rehearse --until workers --then rollout` shows what happens otherwise).".into(),
    }
}

/// Phase `complete`: how the endpoint is handed over to the strategy and what keeps it
/// served through every rollout after (provider review B7).
fn endpoint_handover(config: &ClusterConfig) -> Vec<String> {
    let s = &config.spec;
    let e = &s.endpoint;
    let replicas = s.control_plane.as_ref().map_or(0, |c| c.replicas);
    let waits = match s.flavour {
        crate::model::Flavour::V1beta1 => {
            "once every machine has booted and has its Node and etcd is healthy (CACPPT v0.5.12 `scale.go`)"
        }
        crate::model::Flavour::V1beta2 => {
            "once every machine has booted and has its Node and etcd is healthy, and, from community CACPPT v0.9 on, \
             the control-plane components pass Cluster API's preflight checks on every machine"
        }
    };
    let rollout = format!(
        "Every rollout (a Talos or Kubernetes upgrade, a template or patch change) adds one control-plane machine \
         before it removes one (`rolloutStrategy` `maxSurge: 1`, both flavours): the provider removes the oldest \
         outdated machine only {waits}, after asking its member to leave etcd (a leave that fails does not stop the \
         delete: the etcd audit removes the member later), so the control plane never runs below its \
         {replicas} replicas."
    );
    match (e.strategy, &e.vip, &e.control_plane_pool) {
        (Some(EndpointStrategy::Vip), Some(vip), _) => vip_handover(config, vip, (replicas, rollout)),
        (Some(EndpointStrategy::External), _, Some(pool)) => {
            external_handover(config, pool, (replicas, rollout))
        }
        _ => vec![format!(
            "No `spec.endpoint.strategy`: `render` refuses this phase (`capstan check`: `endpoint-strategy`). Every \
             rollout replaces the control-plane VMs with new addresses, and a load balancer listing the old ones \
             points only at deleted VMs after a full rollout: choose `vip` or `external` (README \"Control-plane \
             endpoint\")."
        )],
    }
}

/// Phase `complete` with strategy `vip`: taking the address over, and the failover every
/// later rollout brings, for `replicas` control-plane machines; `rollout` says what a
/// rollout does (both strategies).
fn vip_handover(
    config: &ClusterConfig,
    vip: &crate::model::Vip,
    (replicas, rollout): (u32, String),
) -> Vec<String> {
    let s = &config.spec;
    let e = &s.endpoint;
    let url = e.url();
    let talos12 = SemVer::parse(&s.versions.talos).is_some_and(|v| v.major == 1 && v.minor >= 12);
    let patch = if talos12 {
        format!(
            "`apiVersion: v1alpha1`, `kind: Layer2VIPConfig`, `name: \"{}\"`, `link: {}` (a document of its own)",
            vip.address, vip.link
        )
    } else {
        format!(
            "`machine: {{network: {{interfaces: [{{interface: {}, vip: {{ip: {}}}}}]}}}}`",
            vip.link, vip.address
        )
    };
    let host_is_vip = e.host.parse::<std::net::IpAddr>().is_ok();
    let mut v = vec![
        format!(
            "Strategy `vip`: the control-plane nodes share `{}` on `{}`: the node that wins Talos's election \
             (in etcd) announces it. The nodes must share one L2 segment, and the address must be free on it. \
             Confirm with the vSphere and network teams (capstan cannot see it): the port group's security \
             policy (forged transmits, MAC address changes) and, on an NSX segment, SpoofGuard and IP \
             discovery (which bind addresses to each vNIC) let the address move between the VMs by \
             gratuitous ARP.",
            vip.address, vip.link
        ),
        format!(
            "Check the interface name on a control-plane node first: `talosctl -n <node> get links` lists `{}` \
             (a wrong name leaves the VIP down on every node).",
            vip.link
        ),
    ];
    if host_is_vip {
        v.extend([
            format!(
                "Taking over the load balancer's address `{}`: in one window, take the address off the load \
                 balancer, then at once put the VIP on the running control-plane nodes: \
                 `talosctl -n <cp-1>,<cp-2>,<cp-3> patch machineconfig --mode=no-reboot --patch @vip.yaml` with \
                 the patch capstan renders, {patch}. The first node to win the election announces the address \
                 within seconds; the endpoint is interrupted only between the two steps.",
                vip.address
            ),
            format!(
                "Then verify `kubectl --server {url} get --raw /readyz` answers `ok`, and merge the change: the \
                 rollout gives every new machine the same VIP (and the address in the apiserver certificate's \
                 SANs)."
            ),
        ]);
    } else {
        v.extend([
            format!(
                "Merge the change: the control plane rolls (the Talos patch changed: {patch}); the VIP comes up \
                 on the first new machine once its etcd is healthy, while `{}` still resolves to the load \
                 balancer. Verify through the VIP: `kubectl --server https://{}:{} get --raw /readyz` answers \
                 `ok` (the address is in the apiserver certificate's SANs from this rollout on).",
                e.host,
                if vip.address.contains(':') { format!("[{}]", vip.address) } else { vip.address.clone() },
                e.port
            ),
            format!(
                "Then point `{}` at `{}` in DNS (lower its TTL a day before), wait for the old TTL to pass, and \
                 retire the load balancer once it has no connections left: nothing else changes, the \
                 kubeconfigs and the issuer keep `{url}`.",
                e.host, vip.address
            ),
        ]);
    }
    v.push(rollout);
    v.push(format!(
        "Every later rollout moves the VIP off each machine it replaces: when a machine holding it leaves etcd, \
         the next node announces the address up to {} s later (the election lease the leaving node cannot \
         revoke; Talos `vip.go`), up to {replicas} times per rollout. kubectl, CI and the management cluster \
         retry. {} Where that is too long, use `strategy: external`.",
        crate::migration::check::VIP_FAILOVER_SECONDS,
        match &s.talos.discovery {
            Some(d) => format!(
                "Talos kubelets reach the API through KubePrism, which also uses the control-plane nodes' own \
                 addresses it learns from the discovery service `{}`: they ride the gap out as long as the \
                 machines reach that service (`talosctl -n <worker> get kubeprismendpoints` lists them).",
                d.endpoint
            ),
            None => "Talos kubelets reach the API through KubePrism, which learns the control-plane nodes' own \
                     addresses only from the discovery service (spec.talos.discovery; Talos's default is the \
                     public `https://discovery.talos.dev/`): where the machines cannot reach one, the VIP is a \
                     worker's only upstream, every gap cuts the kubelets off, and past the node-monitor grace \
                     period the pods of every Talos node turn NotReady (`capstan check`, `endpoint-strategy`)."
                .to_string(),
        }
    ));
    v
}

/// Phase `complete` with strategy `external`: the load balancer's backends as the pool
/// hands out its addresses, for `replicas` control-plane machines; `rollout` says what a
/// rollout does (both strategies).
fn external_handover(
    config: &ClusterConfig,
    pool: &crate::model::AddressPool,
    (replicas, rollout): (u32, String),
) -> Vec<String> {
    let s = &config.spec;
    let e = &s.endpoint;
    let url = e.url();
    let addrs = pool_addresses(config).unwrap_or_default();
    vec![
        format!(
            "Strategy `external`: the load balancer at `{url}` stays, and its backends are exactly the \
             control-plane pool `{}`: {addrs} ({} = {replicas} replicas + 1 of surge).",
            config.control_plane_pool_name(),
            pool.allocatable().map_or(0, |a| a.len())
        ),
        format!(
            "List all of them as backends, each with a TCP health check on port {} (Talos runs the apiserver with \
             `--anonymous-auth=false` unless spec.apiServer.extraArgs says otherwise: an HTTP check of `/healthz` gets 401); an address no machine holds \
             at the moment is simply down. The frontend stays port {}. A new machine that takes an address \
             an earlier machine held answers the load balancer only once the load balancer's ARP entry for \
             the old VM's MAC expires (Talos announces only VIPs with gratuitous ARP: Talos v1.10.6 \
             `network/address_spec.go:256-260`), which can take minutes on a hardware load balancer: check \
             its ARP table (or the backend's health) for the address before the next machine is replaced.",
            e.backend_port(),
            e.port
        ),
        "If the pool is new in this change, add its addresses to the load balancer before merging: the \
         control plane rolls onto the pool (the machine template changed), each new machine taking one of \
         them, and the old machines' backends go down as they are removed; take those out after the rollout."
            .to_string(),
        rollout,
        "A replaced machine's apiserver still accepts TCP between its etcd leave and its power-off (the \
         drain): its etcd is local, so it fails requests meanwhile, and a TCP check keeps it in for that \
         long. With `spec.apiServer.extraArgs.anonymous-auth: \"true\"`, an HTTPS check of `/readyz` takes \
         it out at once (`/readyz` is public to anonymous requests)."
            .to_string(),
        "Every later rollout keeps the backend list true: the surge machine takes the free address, and a \
         removed machine's address is handed out again (the in-cluster IPAM provider hands out the lowest \
         free address). Keep the pool's range out of every other pool, and change the pool and the load \
         balancer in the same window."
            .to_string(),
    ]
}

/// A worker pool's MachineDeployment as rendered, overlays applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSize {
    /// The MachineDeployment's name.
    pub name: String,
    /// `spec.replicas`, absent when an overlay took it out of git.
    pub replicas: Option<u64>,
    /// The Cluster Autoscaler's min and max size annotations, when both are set.
    pub autoscaler: Option<(String, String)>,
}

fn pools(config: &ClusterConfig, sizes: &[PoolSize]) -> String {
    if config.spec.workers.is_empty() {
        return "no pools declared".into();
    }
    config
        .spec
        .workers
        .iter()
        .map(|p| {
            let name = format!("{}-{}", config.metadata.name, p.name);
            match sizes.iter().find(|s| s.name == name) {
                None => format!("`{name}` to {} replicas", p.replicas),
                Some(PoolSize { replicas: Some(n), .. }) => format!("`{name}` to {n} replicas"),
                Some(PoolSize { replicas: None, autoscaler: Some((lo, hi)), .. }) => format!(
                    "`{name}` by the Cluster Autoscaler, between {lo} and {hi} machines (no replicas in git, \
                     so `spec.workers[].replicas` ({}) is not applied: the webhook clamps the current count \
                     into that range, so a pool at 0 gets {lo})",
                    p.replicas
                ),
                Some(PoolSize { replicas: None, autoscaler: None, .. }) => format!(
                    "`{name}` to 1 replica (no replicas in git: the webhook defaults them to 1)"
                ),
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// What syncing `phase` removes of the phase before it (README "What each phase adds, and
/// what removes it"), under Argo CD and under `kubectl apply`.
fn removed(names: &Names, phase: Phase) -> Vec<String> {
    let (ns, cluster) = (&names.namespace, &names.cluster);
    let tcp = format!("{cluster}-cp");
    let policy = names.node_ref_policy();
    let delete_policy = delete_node_ref_policy_command(names);
    let old_jobs = |suffix: &str| {
        format!(
            "The Job `{cluster}-capstan-migration-{suffix}-…` of the phase before: neither Argo CD (it never prunes a hook) nor `kubectl apply` removes it; Kubernetes deletes it 7 days after it finished (`ttlSecondsAfterFinished`). Now, once it has finished: `kubectl -n {ns} get jobs -o name | grep '/{cluster}-capstan-migration-{suffix}-' | xargs -r kubectl -n {ns} delete`."
        )
    };
    let check = format!(
        "Afterwards `capstan check clusters/{cluster} --management-objects objects.yaml` (with `{MANAGEMENT_OBJECTS_COMMAND} > objects.yaml`) names anything an earlier phase left (`phase-leftovers`)."
    );
    match phase {
        Phase::Prepare => vec![
            "Nothing, on the way forward.".to_string(),
            format!("On a return from phase control-plane (the rollback): the admission policy `{policy}` and its binding are pruned by Argo CD; with a manual sync without prune or `kubectl apply`, delete them: `{delete_policy}` (they are inert meanwhile: the sync drops `{PHASE_ANNOTATION}` from `{tcp}`)."),
            old_jobs("scale-control-plane"),
            check,
        ],
        Phase::ControlPlane => vec![
            old_jobs("bootstrapped"),
            format!("Nothing else: this phase adds the pause, the annotation `{PHASE_ANNOTATION}` on `{tcp}` and the admission policy `{policy}`, which the next phase removes."),
            check,
        ],
        Phase::Workers => vec![
            format!("The annotation `{PHASE_ANNOTATION}` on `{tcp}`: the sync removes it (server-side apply, Argo CD being its only field manager; `kubectl apply` through the last-applied annotation). Without it the admission policy `{policy}` refuses nothing."),
            format!("The admission policy `{policy}` and its binding: Argo CD prunes them with automated sync or a sync with prune; the Job `{cluster}-capstan-migration-unpause-control-plane-…` deletes them by name before it lifts the pause, whatever applied the bundle (a copy synced by an earlier capstan carries `Prune=false` and is never pruned). By hand: `{delete_policy}`. Left behind with the control plane unpaused, it would refuse every new control-plane Machine its nodeRef, and every rollout would stop at replicas + 1."),
            format!("The pause `cluster.x-k8s.io/paused` on `{tcp}`: the same Job removes it (an Update) once no kubeadm etcd member is left."),
            old_jobs("scale-control-plane"),
            check,
        ],
        Phase::Complete => vec![
            format!("Nothing of phase `workers`: its Job is this phase's. The Job again deletes a leftover admission policy `{policy}` and lifts a leftover pause, so a cluster that skipped the sync of phase `workers` ends in the same state."),
            check,
        ],
    }
}

/// The runbook as one JSON document (`capstan plan --format json`): the cluster, its phase
/// and the phase after it, then the runbook's [`markdown_json`]. Built from the Markdown
/// [`runbook`] returns, so the two never say different things.
pub fn runbook_json(config: &ClusterConfig, md: &str) -> serde_json::Value {
    let phase = config.spec.migration.as_ref().map(|m| m.phase);
    let mut v = serde_json::json!({
        "cluster": config.metadata.name,
        "namespace": config.metadata.namespace,
        "phase": phase.map(Phase::as_str),
        "nextPhase": phase.and_then(Phase::next).map(Phase::as_str),
    });
    if let (Some(v), serde_json::Value::Object(m)) = (v.as_object_mut(), markdown_json(md)) {
        v.extend(m);
    }
    v
}

/// A runbook's Markdown as JSON (`plan` and `restore plan` with `--format json`): the lines
/// under the title (`intro`), then each `## ` section with its title, its numbered steps and
/// its other paragraphs, in the Markdown's order (a wrapped line goes on with the step or
/// paragraph before it).
pub fn markdown_json(md: &str) -> serde_json::Value {
    #[derive(Default, serde::Serialize)]
    struct Section {
        title: String,
        steps: Vec<String>,
        notes: Vec<String>,
    }
    let mut sections: Vec<Section> = Vec::new();
    let mut intro: Vec<String> = Vec::new();
    // Whether the last non-blank line was part of a step or a note.
    let mut open: Option<bool> = None;
    for l in md.lines() {
        if let Some(title) = l.strip_prefix("## ") {
            sections.push(Section {
                title: title.to_string(),
                ..Section::default()
            });
            open = None;
            continue;
        }
        if l.starts_with("# ") || l.trim().is_empty() {
            open = None;
            continue;
        }
        let Some(sec) = sections.last_mut() else {
            intro.push(l.to_string());
            continue;
        };
        let numbered = l
            .split_once(". ")
            .filter(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if let Some((_, step)) = numbered {
            sec.steps.push(step.to_string());
            open = Some(true);
            continue;
        }
        let last = match open {
            Some(true) => sec.steps.last_mut(),
            Some(false) => sec.notes.last_mut(),
            None => None,
        };
        if let Some(last) = last {
            last.push('\n');
            last.push_str(l);
        } else {
            sec.notes.push(l.to_string());
            open = Some(false);
        }
    }
    serde_json::json!({"intro": intro, "sections": sections})
}

fn section(md: &mut String, title: &str, items: &[&str]) {
    let _ = writeln!(md, "## {title}\n");
    for (i, item) in items.iter().enumerate() {
        let _ = writeln!(md, "{}. {item}", i + 1);
    }
    md.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::MINIMAL;

    fn runbook_of(c: &ClusterConfig) -> String {
        runbook(c, &[])
    }

    #[test]
    fn pools_say_how_they_are_sized() {
        let c = cfg("  workers:\n  - name: general\n    replicas: 6\n    machine: {numCPUs: 2, memoryMiB: 4096, diskGiB: 40}\n  migration:\n    phase: workers\n");
        let pool = &c.spec.workers[0];
        let name = format!("{}-{}", c.metadata.name, pool.name);
        let size = |replicas, autoscaler| PoolSize {
            name: name.clone(),
            replicas,
            autoscaler,
        };
        assert_eq!(
            pools(&c, &[]),
            format!("`{name}` to {} replicas", pool.replicas)
        );
        assert_eq!(
            pools(&c, &[size(Some(7), None)]),
            format!("`{name}` to 7 replicas")
        );
        let auto = pools(&c, &[size(None, Some(("2".into(), "5".into())))]);
        assert!(
            auto.starts_with(&format!(
                "`{name}` by the Cluster Autoscaler, between 2 and 5 machines"
            )) && auto.contains(&format!(
                "`spec.workers[].replicas` ({}) is not applied",
                pool.replicas
            )) && auto.ends_with("a pool at 0 gets 2)"),
            "{auto}"
        );
        assert!(pools(&c, &[size(None, None)]).contains("to 1 replica (no replicas in git"));
        assert!(runbook(&c, &[size(None, Some(("2".into(), "5".into())))])
            .contains("Scales the worker pools: `"));
    }

    fn cfg(extra: &str) -> ClusterConfig {
        ClusterConfig::from_value(
            "c",
            crate::yaml::parse_one(&(MINIMAL.to_string() + extra)).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn the_json_runbook_holds_every_line_of_the_markdown_one_in_its_section() {
        for (phase, next) in [
            ("prepare", Some("control-plane")),
            ("control-plane", Some("workers")),
            ("workers", Some("complete")),
            ("complete", None),
        ] {
            let c = cfg(&format!(
                "  migration:\n    phase: {phase}\n    jobImage: i\n    kubeadm:\n      etcdMembers: [cp-1]\n"
            ));
            let md = runbook_of(&c);
            let v = runbook_json(&c, &md);
            assert_eq!(v["phase"], phase);
            assert_eq!(v["nextPhase"].as_str(), next);
            let sections = v["sections"].as_array().unwrap();
            let titles: Vec<&str> = md.lines().filter_map(|l| l.strip_prefix("## ")).collect();
            assert_eq!(sections.len(), titles.len(), "{phase}");
            let numbered = md
                .lines()
                .filter(|l| {
                    l.split_once(". ")
                        .is_some_and(|(n, _)| n.parse::<u32>().is_ok())
                })
                .count();
            let steps: usize = sections
                .iter()
                .map(|s| s["steps"].as_array().unwrap().len())
                .sum();
            assert_eq!(steps, numbered, "{phase}");
            // Every line of the Markdown but the headings is in the JSON, in order.
            let mut text = String::new();
            for l in v["intro"].as_array().unwrap() {
                text.push_str(l.as_str().unwrap());
                text.push('\n');
            }
            for (s, t) in sections.iter().zip(&titles) {
                assert_eq!(s["title"], *t);
                for part in ["steps", "notes"] {
                    for l in s[part].as_array().unwrap() {
                        text.push_str(l.as_str().unwrap());
                        text.push('\n');
                    }
                }
            }
            let body: Vec<&str> = md
                .lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
                .map(|l| {
                    l.split_once(". ")
                        .filter(|(n, _)| n.parse::<u32>().is_ok())
                        .map_or(l, |(_, r)| r)
                })
                .collect();
            let mut sorted_json: Vec<&str> = text.lines().collect();
            let mut sorted_md = body.clone();
            sorted_json.sort_unstable();
            sorted_md.sort_unstable();
            assert_eq!(sorted_json, sorted_md, "{phase}");
        }
    }

    #[test]
    fn each_phase_explains_itself() {
        let prepare = runbook_of(&cfg("  migration:\n    phase: prepare\n    jobImage: i\n    kubeadm:\n      etcdMembers: [cp-1]\n"));
        assert!(prepare.starts_with("# Runbook: `lab-f`, phase `prepare`"));
        assert!(prepare.contains("status.bootstrapped=true") && prepare.contains("**0 replicas**"));
        assert!(
            !prepare.contains("too many learner member in cluster"),
            "Talos 1.10 runs etcd 3.5"
        );
        let cp = runbook_of(&cfg("  migration:\n    phase: control-plane\n    jobImage: i\n    acknowledge: [etcd-audit]\n    kubeadm:\n      etcdMembers: [cp-1]\n      controlPlaneNodes: [cp-1]\n"));
        assert!(
            cp.contains("## Why the control plane stays paused")
                && cp.contains("force-removes every member")
        );
        assert!(cp.contains("**3 replicas**") && cp.contains("`cp-1`"));
        // The rollback removes the Talos members one at a time before deleting the Machines,
        // and the 6-member window (here 1 kubeadm + 3 Talos) is stated.
        let rollback = &cp[cp.find("## Roll back phase control-plane").unwrap()..];
        assert!(
            rollback.find("etcdctl member remove").unwrap()
                < rollback.find("delete machines.cluster.x-k8s.io").unwrap()
        );
        assert!(cp.contains("etcd has 1 kubeadm and 3 Talos members: 4 voters, quorum 3"));
        assert!(cp.contains("## Keep the control-plane VMs on separate ESXi hosts"));
        // D11: the snapshot comes before anything the sync does, with kubeadm's certificates;
        // the Talos-side recovery follows the rollback.
        let snapshot = cp
            .find("## Take an etcd snapshot before phase control-plane")
            .unwrap();
        assert!(snapshot < cp.find("## What the bundle does when synced").unwrap());
        assert!(cp.contains("--cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt"));
        assert!(
            cp.find("## Roll back phase control-plane").unwrap()
                < cp.find("## Restore etcd quorum on the Talos control plane")
                    .unwrap()
        );
        assert!(
            cp.contains("talosctl -e <node-ip> -n <node-ip> bootstrap --recover-from=db.snapshot")
        );
        assert!(cp.contains(
            "## Replace a failed Talos control-plane machine during phase control-plane"
        ));
        let w = runbook_of(&cfg("  migration:\n    phase: workers\n"));
        assert!(
            w.contains("## Lift the pause after phase control-plane")
                && w.contains("unpause-control-plane")
        );
        // D20: the drain respects PodDisruptionBudgets and says what to do with one that
        // allows no eviction; the workloads are checked first.
        assert!(
            w.contains(&format!("`{}`", crate::procedure::DRAIN))
                && !w.contains("--force --")
                && !w.contains("drain <node> --delete-emptydir-data --force")
                && w.contains("Never `--disable-eviction`")
                && w.contains("scale it up by one first")
                && w.contains("--workloads workloads.json"),
            "{w}"
        );
        // D10: Cluster API's drains wait for every budget by default.
        assert!(
            w.contains("with no `spec.deletion.nodeDrainTimeoutSeconds` (the default) it waits for as long as a PodDisruptionBudget refuses"),
            "{w}"
        );
        let timed = runbook_of(&cfg(
            "  deletion: {nodeDrainTimeoutSeconds: 600}\n  migration:\n    phase: workers\n",
        ));
        assert!(
            timed.contains("`spec.deletion.nodeDrainTimeoutSeconds: 600` makes it stop after 600 s and delete the machine anyway, with the pods a PodDisruptionBudget still protects"),
            "{timed}"
        );
        // D13: reverting the phase commit is not the rollback, and the policy says so.
        assert!(
            w.contains("Do not revert the phase commit")
                && w.contains("`lab-f.lab-f.keep-workers.capstan.dev` refuses it unless `spec.migration.acknowledge` lists `scale-workers-to-zero`"),
            "{w}"
        );
        for (text, ack) in [(&prepare, false), (&cp, false)] {
            assert!(
                text.contains("reached by a revert from `workers` or `complete`")
                    && text.contains("The admission policy `lab-f.lab-f.keep-workers.capstan.dev` refuses to scale a MachineDeployment with running machines to 0")
                    && text.contains("lists `scale-workers-to-zero`**") == ack,
                "{text}"
            );
        }
        let reverted = runbook_of(&cfg("  workers:\n  - name: general\n    replicas: 6\n    machine: {numCPUs: 2, memoryMiB: 4096, diskGiB: 40}\n  migration:\n    phase: control-plane\n    jobImage: i\n    acknowledge: [etcd-audit, scale-workers-to-zero]\n    kubeadm:\n      etcdMembers: [cp-1]\n"));
        assert!(
            reverted.contains("**`spec.migration.acknowledge` lists `scale-workers-to-zero`**: the pools carry `capstan.dev/scale-to-zero: acknowledged`"),
            "{reverted}"
        );
        assert!(w.contains("## Restore etcd quorum on the Talos control plane"));
        let prepare_snapshot = prepare.find("## Take an etcd snapshot before phase control-plane");
        assert!(
            prepare_snapshot.is_some()
                && prepare.contains("Set `spec.controlPlane.antiAffinity.tagID` now")
        );
        let done = runbook_of(&cfg(""));
        assert!(done.contains("phase `none (not migrating)`"));
        let complete = runbook_of(&cfg("  migration:\n    phase: complete\n"));
        assert!(
            complete.contains("## Restore etcd quorum on the Talos control plane")
                && complete.contains("etcd snapshot <file>")
                && complete.contains("nothing keeps the new ones apart")
        );
    }

    #[test]
    fn etcd_skew_is_called_out_for_talos_1_11_and_later() {
        let c = cfg("  migration:\n    phase: prepare\n    jobImage: i\n  provenance:\n    etcdVersion: 3.5.15-0\n")
            ;
        let mut c = c;
        c.spec.versions.talos = "v1.11.2".into();
        let md = runbook(&c, &[]);
        assert!(
            md.contains("too many learner member in cluster") && md.contains("older 3.5"),
            "{md}"
        );
    }
}
