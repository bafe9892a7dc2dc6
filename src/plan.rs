//! `capstan plan`: the migration runbook for a cluster's current phase, as Markdown. A pure
//! function of `cluster.yaml`: what the bundle does when synced, the commands to run around
//! it, what to verify before moving to the next phase, how to roll back, and why.
//!
//! The phase model (facts in `talos-facts.md` §2, §3, §6, §8):
//! - `prepare`: the objects and sealed secrets exist, every replica count is 0, and a Job
//!   sets `status.bootstrapped=true` on the TalosControlPlane: otherwise the provider sends
//!   the Talos Bootstrap RPC to the first Talos machine, which starts a second, empty etcd.
//! - `control-plane`: the TalosControlPlane gets its replicas but is paused in git; a
//!   one-shot Job unpauses it only while it has no machine, waits until the provider has
//!   created them all, and pauses it again. The provider's etcd audit force-removes every
//!   etcd member that is not one of its machines, and runs on any unpaused reconcile once
//!   all its machines have a node: so the control plane stays paused until the kubeadm
//!   members are removed by hand, one at a time, after their nodes are drained.
//! - `workers`: no kubeadm etcd member is left, so the control plane is unpaused and the
//!   worker pools scale; kubeadm workers are drained and removed as Talos workers arrive.
//! - `complete`: no kubeadm node is left; Cluster API manages the cluster.

use crate::model::{ClusterConfig, Phase, SemVer};
use std::fmt::Write as _;

/// The runbook for the cluster's current phase.
pub fn runbook(config: &ClusterConfig, sizes: &[PoolSize]) -> String {
    let mut md = String::with_capacity(8192);
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
    let list = |v: &[String]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.iter()
                .map(|x| format!("`{x}`"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };

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
    let _ = writeln!(md, "Phases: `prepare` → `control-plane` → `workers` → `complete`. Before every step: `capstan check clusters/{name}` must be clean, and `capstan diff` of the change reviewed.\n");

    let etcd_old = s
        .provenance
        .as_ref()
        .and_then(|p| p.etcd_version.as_deref())
        .and_then(|v| SemVer::parse(&format!("v{}", v.split('-').next().unwrap_or(v))))
        .is_some_and(|v| v.major == 3 && v.minor == 5 && v.patch < 20);
    let talos_etcd36 =
        SemVer::parse(&s.versions.talos).is_some_and(|t| t.major == 1 && t.minor >= 11);

    match phase {
        Some(Phase::Prepare) => {
            section(&mut md, "What the bundle does when synced", &[
                &format!("Creates the Cluster API objects, the sealed Secrets `{name}-talos` (the imported Talos secrets bundle) and `{name}-ca` (the kubeadm Kubernetes CA), so the providers reuse the kubeadm PKI instead of generating one."),
                &format!("Renders TalosControlPlane `{tcp}` and every MachineDeployment with **0 replicas**: no Talos machine is created in this phase."),
                &format!("Runs Job `{name}-capstan-migration-bootstrapped-…` (ServiceAccount `{name}-capstan-migration`, allowed only `get`/`patch` on `taloscontrolplanes/status` of `{tcp}`), which sets `status.bootstrapped=true` and verifies it. It refuses once `spec.replicas` is above 0."),
            ]);
            let mut before = vec![
                "Config matching on the kubeadm side (`capstan check`): the service-account issuer and audiences, the encryption provider order and key name (`key2` secretbox), CIDRs, DNS domain, endpoint.".to_string(),
                "Create a non-expiring join token on the kubeadm cluster, or apply the sealed one: `capstan secrets decrypt clusters/NAME/secrets/workload/bootstrap-token-*.yaml | kubectl --kubeconfig kubeadm.conf apply -f -` (the token of the imported bundle, no expiry).".replace("NAME", name),
                "Fix the kube-proxy DaemonSet labels (`tier: node`, `k8s-app: kube-proxy`) if `capstan check` reports them.".to_string(),
            ];
            if talos_etcd36 {
                before.push(format!(
                    "Talos {} runs etcd 3.6: upgrade the kubeadm etcd to 3.5.26 (at least 3.5.20) first, or joining fails with `too many learner member in cluster`{}.",
                    s.versions.talos,
                    if etcd_old { " (the imported cluster runs an older 3.5)" } else { "" }
                ));
            }
            section(
                &mut md,
                "Before syncing",
                &before.iter().map(String::as_str).collect::<Vec<_>>(),
            );
            section(&mut md, "Verify before the next phase", &[
                &format!("`kubectl -n {ns} get taloscontrolplanes.controlplane.cluster.x-k8s.io {tcp} -o jsonpath='{{.status.bootstrapped}}'` prints `true`."),
                &format!("`kubectl -n {ns} get machines -l cluster.x-k8s.io/cluster-name={name}` lists nothing."),
                &format!("`kubectl -n {ns} get secret {name}-talos {name}-ca` exist, and the Cluster's infrastructure is ready (`kubectl -n {ns} get vspherecluster {name}`)."),
                "On a kubeadm control-plane node: `etcdctl member list` shows only the kubeadm members, all started.",
            ]);
            section(&mut md, "Next phase", &[&format!(
                "In `clusters/{name}/cluster.yaml` set `spec.migration.phase: control-plane`, add `acknowledge: [etcd-audit]` after reading the next phase's runbook (`capstan plan` after the edit), keep `etcdMembers` listing every kubeadm etcd member. The TalosControlPlane will get {cp_replicas} replicas at once."
            )]);
            section(&mut md, "Roll back", &["Nothing runs on the workload cluster yet: remove the Application (or `kubectl delete -k` the bundle); a `status.bootstrapped` already set does no harm while no Talos machine exists."]);
        }
        Some(Phase::ControlPlane) => {
            section(&mut md, "What the bundle does when synced", &[
                &format!("Renders TalosControlPlane `{tcp}` with **{cp_replicas} replicas** and the annotation `cluster.x-k8s.io/paused: \"true\"`. Worker pools stay at 0."),
                &format!("Runs Job `{name}-capstan-migration-scale-control-plane-…` once: it refuses unless `status.bootstrapped` is `true` and no control-plane Machine exists; then it removes the pause, waits until the provider has created all {cp_replicas} Machines (seconds; a VM takes minutes to join), and pauses again, also on failure. Once any Machine exists it never unpauses again."),
                "The Talos machines boot, join the kubeadm etcd as learners one at a time (Talos finds the members through the `default/kubernetes` endpoints) and are promoted; their kubelets join with the imported bootstrap token.",
            ]);
            section(&mut md, "Why the control plane stays paused", &[
                "The provider's etcd audit lists the etcd members and force-removes every member whose name is not one of its Machines, on every unpaused reconcile once all its Machines have a node. With kubeadm members present that removes them all at once and can lose quorum.",
                "It runs before scaling in the same reconcile, so raising replicas on an unpaused control plane whose machines have joined triggers it too. That is why all Talos control-plane machines are created in one window, before any has a node, and why the control plane stays paused until `etcdMembers` is empty.",
                "While paused the provider does not reconcile `status`, scale or remediate: that is expected during this phase.",
            ]);
            section(&mut md, "Around the sync", &[
                "Watch the join: `talosctl -n <talos-ip> service etcd` and `etcdctl member list` on a kubeadm node (learners appear, then turn into voters).",
                "Move the load balancer backends to the Talos control-plane nodes as they become Ready (`kubectl get nodes -l node-role.kubernetes.io/control-plane`).",
                &format!(
                    "Then, one kubeadm control-plane node at a time ({}): `kubectl drain <node> --delete-emptydir-data --force --ignore-daemonsets --timeout=10m`; on that node `kubeadm reset --force` (it removes its etcd member); check `etcdctl member list`; `kubectl delete node <node>`; remove the node and its member from `controlPlaneNodes` and `etcdMembers` in `cluster.yaml` and commit.",
                    list(&kubeadm.control_plane_nodes)
                ),
                "Never unpause the TalosControlPlane by hand in this phase.",
            ]);
            section(&mut md, "Verify before the next phase", &[
                "`etcdctl member list` shows only the Talos members, all voters.",
                "`etcdMembers` and `controlPlaneNodes` in `cluster.yaml` are empty; `capstan check` is clean.",
                "The API through the load balancer answers with the Talos nodes only; service-account tokens of running workloads still authenticate (no `invalid bearer token` in the apiserver logs).",
            ]);
            section(&mut md, "Next phase", &[&format!("Set `spec.migration.phase: workers` in `clusters/{name}/cluster.yaml`: the TalosControlPlane is then unpaused, and the worker pools scale.")]);
            section(&mut md, "Roll back", &[
                &"Before the first kubeadm member is removed: delete the Talos control-plane Machines (`kubectl -n NS delete machine -l cluster.x-k8s.io/control-plane,cluster.x-k8s.io/cluster-name=NAME`) while paused, remove their etcd members with `etcdctl member remove`, point the load balancer back at the kubeadm nodes, and return to phase `prepare`.".replace("NS", ns).replace("NAME", name),
                "After kubeadm members were removed there is no going back to kubeadm: restore quorum on the Talos side instead.",
            ]);
        }
        Some(Phase::Workers) => {
            section(&mut md, "What the bundle does when synced", &[
                &format!("Renders TalosControlPlane `{tcp}` unpaused: the provider reconciles again (its etcd audit now finds only its own machines)."),
                &format!("Scales the worker pools: {}.", pools(config, sizes)),
            ]);
            section(&mut md, "Around the sync", &[&format!(
                "As Talos workers become Ready, drain and remove the kubeadm workers ({}) one by one: `kubectl drain <node> --delete-emptydir-data --force --ignore-daemonsets --timeout=10m`, `kubectl delete node <node>`, then `kubeadm reset --force` on it and remove it from `workerNodes` in `cluster.yaml`.",
                list(&kubeadm.worker_nodes)
            )]);
            section(&mut md, "Verify before the next phase", &[
                "`kubectl get nodes -o wide` shows only Talos nodes; `workerNodes` is empty.",
                &format!("`kubectl -n {ns} get taloscontrolplanes,machinedeployments` report their replicas ready."),
            ]);
            section(
                &mut md,
                "Next phase",
                &["Set `spec.migration.phase: complete` (or remove `spec.migration`)."],
            );
            section(&mut md, "Roll back", &["Scale a pool down in `cluster.yaml` (Cluster API removes Talos workers) and uncordon the kubeadm workers that are still there."]);
        }
        Some(Phase::Complete) | None => {
            section(&mut md, "What the bundle does when synced", &[
                "Manages the cluster like any Cluster API cluster: every replica count as declared, no pause, no migration Job.",
                "A change of a machine template's spec renames it (content hash) and rolls the machines; review it with `capstan diff`.",
            ]);
            section(&mut md, "Keep in mind", &[
                "The sealed secrets are the cluster's PKI: never re-import; rotate recipients with `capstan secrets rekey`.",
                "Kubernetes and Talos upgrades: one minor at a time, inside the support table `capstan check` uses.",
            ]);
        }
    }
    md
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
        let w = runbook_of(&cfg("  migration:\n    phase: workers\n"));
        assert!(w.contains("unpaused"));
        let done = runbook_of(&cfg(""));
        assert!(done.contains("phase `none (not migrating)`"));
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
