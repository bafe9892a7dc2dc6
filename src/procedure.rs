//! The operator procedures of the migration, written once: `plan` prints them with the
//! cluster's names, `explain` and `check` with placeholders, and the README carries the same
//! text (a test keeps it in step, [`readme_section`]). The etcd steps of the control-plane
//! rollback are run as written against a real six-member etcd, and the snapshot's
//! `etcdctl snapshot save` against a member in kubeadm's TLS layout (`tests/etcd.rs`).
//!
//! A step is Markdown text; `{ns}`, `{cluster}` and `{tcp}` are replaced by the namespace,
//! the cluster name and the TalosControlPlane's name, or by `<namespace>`, `<cluster>` and
//! `<cluster>-cp` when no cluster is known.

/// One procedure: what it is for, its steps in order, and why it is done that way.
#[derive(Debug, Clone, Copy)]
pub struct Procedure {
    /// Stable id (used by `explain` entries and tests).
    pub id: &'static str,
    /// Title, also the README heading.
    pub title: &'static str,
    /// The steps, in order.
    pub steps: &'static [&'static str],
    /// Why it is done this way (the provider or etcd behaviour it rests on).
    pub why: &'static str,
}

/// The names a procedure is printed with.
#[derive(Debug, Clone)]
pub struct Names {
    /// The management-cluster namespace.
    pub namespace: String,
    /// The cluster name.
    pub cluster: String,
}

impl Names {
    /// Placeholders, for a procedure printed without a cluster.
    pub fn placeholders() -> Names {
        Names {
            namespace: "<namespace>".into(),
            cluster: "<cluster>".into(),
        }
    }

    /// The bootstrapped guard's admission policy and binding (cluster scoped, so the
    /// namespace is part of the name): `<cluster>.<namespace>.bootstrapped.capstan.dev`.
    pub fn guard_policy(&self) -> String {
        format!(
            "{}.{}{}",
            self.cluster,
            self.namespace,
            crate::argocd::GUARD_POLICY_SUFFIX
        )
    }

    /// Phase control-plane's admission policy and binding that keep control-plane Machines
    /// from getting a nodeRef while the TalosControlPlane is unpaused:
    /// `<cluster>.<namespace>.paused-node-refs.capstan.dev`.
    pub fn node_ref_policy(&self) -> String {
        format!(
            "{}.{}.paused-node-refs.capstan.dev",
            self.cluster, self.namespace
        )
    }

    /// The ClusterRole and ClusterRoleBinding that let the phase `workers`/`complete` Job
    /// delete the nodeRef policy and its binding (by name, nothing else):
    /// `<cluster>.<namespace>.capstan-migration`.
    pub fn migration_cluster_role(&self) -> String {
        format!("{}.{}.capstan-migration", self.cluster, self.namespace)
    }

    fn fill(&self, text: &str) -> String {
        text.replace("{ns}", &self.namespace)
            .replace("{tcp}", &format!("{}-cp", self.cluster))
            .replace("{node-ref-policy}", &self.node_ref_policy())
            .replace("{cluster}", &self.cluster)
    }
}

/// The TalosControlPlane annotation rendered only in phase control-plane: the nodeRef
/// policy (`Names::node_ref_policy`) refuses anything only while the TalosControlPlane
/// carries it (whatever its value), so a policy left behind by a sync that never pruned is
/// inert in every other phase. Git is its only writer: server-side apply (Argo CD, the only
/// manager of the field) and `kubectl apply` (the last-applied annotation) remove it when
/// the render drops it.
pub const PHASE_ANNOTATION: &str = "capstan.dev/migration-phase";

/// The kubectl command that deletes the nodeRef policy and its binding (a leftover of phase
/// control-plane), for the runbook and `check`.
pub fn delete_node_ref_policy_command(names: &Names) -> String {
    format!(
        "kubectl delete validatingadmissionpolicybindings.admissionregistration.k8s.io/{p} validatingadmissionpolicies.admissionregistration.k8s.io/{p} --ignore-not-found",
        p = names.node_ref_policy()
    )
}

impl Procedure {
    /// The steps with the names filled in.
    pub fn steps(&self, names: &Names) -> Vec<String> {
        self.steps.iter().map(|s| names.fill(s)).collect()
    }

    /// The procedure as a Markdown section: title, numbered steps, why.
    pub fn markdown(&self, names: &Names, heading: &str) -> String {
        let mut md = format!("{heading} {}\n\n", self.title);
        for (i, s) in self.steps(names).iter().enumerate() {
            md.push_str(&format!("{}. {s}\n", i + 1));
        }
        md.push_str(&format!("\nWhy: {}\n", names.fill(self.why)));
        md
    }
}

/// Set `status.bootstrapped` by hand (what the phase Jobs do).
pub const SET_BOOTSTRAPPED: Procedure = Procedure {
    id: "set-bootstrapped",
    title: "Set status.bootstrapped by hand",
    steps: &[
        "Check that the imported Secrets exist: `kubectl -n {ns} get secret {cluster}-talos {cluster}-ca`.",
        "`kubectl -n {ns} patch taloscontrolplanes.controlplane.cluster.x-k8s.io {tcp} --subresource=status --type=merge -p '{\"status\":{\"bootstrapped\":true}}'` (kubectl 1.24 or later).",
        "`kubectl -n {ns} get taloscontrolplanes.controlplane.cluster.x-k8s.io {tcp} -o jsonpath='{.status.bootstrapped}'` prints `true`.",
    ],
    why: "the control-plane provider sends the Talos Bootstrap RPC to its first machine unless `status.bootstrapped` is true once it has all its machines, and a machine that has not joined etcd yet then starts a second, empty etcd. Status is a subresource: git cannot set it. capstan's admission policy refuses the cluster's machines until it is true, and every phase's Job sets it.",
};

/// Pause the control plane now.
pub const PAUSE: Procedure = Procedure {
    id: "pause",
    title: "Pause the control plane now",
    steps: &[
        "`kubectl -n {ns} annotate taloscontrolplanes.controlplane.cluster.x-k8s.io {tcp} cluster.x-k8s.io/paused=true --overwrite`.",
        "Keep `spec.migration.phase: control-plane` in git while kubeadm etcd members exist: the TalosControlPlane is rendered paused, so Argo CD's self-heal does not lift it.",
    ],
    why: "the provider's etcd audit force-removes every etcd member that is not one of its machines on any unpaused reconcile once all its control-plane Machines have a node.",
};

/// `kubectl drain` as the runbooks run it: evictions (so PodDisruptionBudgets hold), no
/// `--force` (a Pod without a controller stops the drain instead of being deleted for good),
/// a timeout after which it can be run again (the node stays cordoned).
macro_rules! drain_command {
    () => {
        "kubectl drain <node> --ignore-daemonsets --delete-emptydir-data --timeout=30m"
    };
}

/// The drain command of the runbooks (`drain_command`).
pub const DRAIN: &str = drain_command!();

/// What to do when a drain waits on a PodDisruptionBudget, for the runbooks.
pub const DRAIN_PDB: &str = "The drain evicts through the Eviction API, which honours PodDisruptionBudgets: an eviction a budget refuses (`Cannot evict pod as it would violate the pod's disruption budget`) is retried until `--timeout`, and the node stays cordoned; run it again once the budget allows. A budget that allows no eviction (`kubectl get pdb -A`: ALLOWED DISRUPTIONS 0, from `maxUnavailable: 0` or `minAvailable` equal to its pods) never does: with the workload's owners, scale it up by one first (the new pod starts elsewhere and one eviction is allowed), or relax the budget for the move. Never `--disable-eviction` (it deletes past the budget) and never `--force` (a Pod without a controller is deleted for good: recreate it under a controller first).";

/// Remove one kubeadm control-plane node (phase control-plane).
pub const REMOVE_KUBEADM_NODE: Procedure = Procedure {
    id: "remove-kubeadm-node",
    title: "Remove one kubeadm control-plane node",
    steps: &[
        "Take the node out of the load balancer.",
        concat!("`", drain_command!(), "`: evictions honour PodDisruptionBudgets (no `--force`, no `--disable-eviction`); if it waits on `Cannot evict pod as it would violate the pod's disruption budget`, `capstan explain` that message."),
        "On the node: `kubeadm reset --force` (it removes its etcd member).",
        "On another control-plane node: `etcdctl member list` no longer shows it, and `etcdctl endpoint health --cluster` reports every member healthy.",
        "`kubectl delete node <node>`.",
        "Remove it from `controlPlaneNodes` and `etcdMembers` in `clusters/{cluster}/cluster.yaml`, commit, and let the sync run before the next node. With the last one, set `spec.migration.phase: workers` in the same commit: phase control-plane needs a kubeadm member listed, and the workers Job lifts the pause only once the workload cluster shows no kubeadm etcd.",
    ],
    why: "one member at a time keeps a majority of healthy voters at every step; removing a member's membership before its machine goes away is what keeps quorum (a powered-off member still counts as a voter).",
};

/// Roll phase control-plane back to prepare (B1).
pub const ROLLBACK_CONTROL_PLANE: Procedure = Procedure {
    id: "rollback-control-plane",
    title: "Roll back phase control-plane",
    steps: &[
        "Only before the first kubeadm member was removed. After that the Talos members are the majority: finish the phase (remove the kubeadm nodes) rather than roll back, and if etcd loses quorum, restore it on the Talos side (Restore etcd quorum on the Talos control plane). Keep the TalosControlPlane paused throughout.",
        "Take the Talos control-plane nodes out of the load balancer, so no client depends on them.",
        "On a kubeadm control-plane node, note the Talos members' ids: `etcdctl member list -w table`.",
        "Remove one Talos member: `etcdctl member remove <member-id>` (or `talosctl -n <talos-ip> etcd leave`).",
        "Check before the next: `etcdctl endpoint health --cluster` reports every remaining member healthy and `etcdctl member list` no longer shows the removed one. Repeat the last two steps for each Talos member, one at a time.",
        "Only now delete the Talos control-plane Machines: `kubectl -n {ns} delete machines.cluster.x-k8s.io -l cluster.x-k8s.io/cluster-name={cluster},cluster.x-k8s.io/control-plane` (CAPI powers the VMs off and deletes their Nodes).",
        "Wait until `kubectl -n {ns} get machines.cluster.x-k8s.io -l cluster.x-k8s.io/cluster-name={cluster},cluster.x-k8s.io/control-plane` lists nothing (the phase prepare Job refuses while any remains).",
        "Set `spec.migration.phase: prepare` in `clusters/{cluster}/cluster.yaml` and commit.",
    ],
    why: "during phase control-plane etcd has the kubeadm and the Talos members: 3 + 3 = 6 voters, quorum 4. Talos never leaves etcd when powered off, so deleting the three Talos Machines first leaves 3 of 6 voters: quorum is lost, every apiserver fails, and `etcdctl member remove` itself needs the quorum it would restore. Removed one at a time first, each removal shrinks the cluster while a majority is healthy.",
};

/// Replace one failed Talos control-plane machine during phase control-plane (M2b).
pub const REPLACE_TALOS_MACHINE: Procedure = Procedure {
    id: "replace-talos-machine",
    title: "Replace a failed Talos control-plane machine during phase control-plane",
    steps: &[
        "Keep the TalosControlPlane paused: never unpause to let the provider replace it.",
        "Take the failed node out of the load balancer.",
        "On a healthy control-plane node: `etcdctl member remove <member-id>` of the failed machine, then `etcdctl endpoint health --cluster`.",
        "Delete its Machine: `kubectl -n {ns} delete machines.cluster.x-k8s.io <machine>`; the paused provider creates no replacement.",
        "Go on with the phase: remove the kubeadm nodes one at a time. Until phase `workers` the scale Job fails on every sync (`2 of 3 control-plane Machines exist; refusing`): expected, the control plane stays paused. etcd has one Talos member less until phase `workers` lifts the pause and the provider creates the missing machine (replicas is unchanged); with 2 Talos members left, the last kubeadm removal leaves 2 voters, quorum 2: move on to phase `workers` at once.",
        "Or roll the phase back (Roll back phase control-plane) and start it again.",
    ],
    why: "the provider runs its etcd audit before scaling, in every unpaused reconcile, and the audit runs once every existing control-plane Machine has a node: unpausing with the healthy Talos machines joined removes every kubeadm member at once. The scale Job therefore refuses to unpause once any control-plane Machine exists.",
};

/// Restore etcd quorum from one kubeadm member (B1, M2 gone wrong).
pub const RESTORE_QUORUM: Procedure = Procedure {
    id: "restore-quorum",
    title: "Restore etcd quorum from one kubeadm member",
    steps: &[
        "For phase control-plane before the first kubeadm member was removed (after that, or in phases workers and complete: Restore etcd quorum on the Talos control plane). If the lost members' VMs still exist, power them on: quorum returns by itself; stop here.",
        "Pause the control plane (Pause the control plane now) and take every control-plane node out of the load balancer.",
        "On every kubeadm control-plane node stop etcd: move `/etc/kubernetes/manifests/etcd.yaml` out of the manifests directory.",
        "On one kubeadm node (the one with the newest data): copy `/var/lib/etcd` aside, add `--force-new-cluster` to the etcd command in its `etcd.yaml` and move the manifest back: etcd starts as a one-member cluster that keeps every key.",
        "Check `etcdctl endpoint health` and `etcdctl member list` (one member), then remove `--force-new-cluster` from its `etcd.yaml` again, so that no later restart repeats it.",
        "Add the other kubeadm members back one at a time: `etcdctl member add <name> --peer-urls=https://<ip>:2380`, empty that node's `/var/lib/etcd`, set `--initial-cluster` from the output of member add and `--initial-cluster-state=existing` in its `etcd.yaml`, move the manifest back, and check `etcdctl endpoint health --cluster` before the next.",
        "Put the kubeadm nodes back into the load balancer. The deleted Talos machines are gone: roll phase control-plane back (Roll back phase control-plane) and start it again.",
    ],
    why: "etcd accepts no write and no membership change without a majority of its voters, so no `member remove` can shrink a cluster that lost quorum. `--force-new-cluster` rewrites one member's own data to a membership of itself alone, keeping every key; the others come back as new, empty members that copy it.",
};

/// Take an etcd snapshot of the kubeadm cluster before phase control-plane (D11).
pub const ETCD_SNAPSHOT: Procedure = Procedure {
    id: "etcd-snapshot",
    title: "Take an etcd snapshot before phase control-plane",
    steps: &[
        "Right before the commit that sets phase control-plane is synced, pick a kubeadm control-plane node whose etcd is healthy: `kubectl -n kube-system get pods -l component=etcd -o wide`.",
        "`kubectl -n kube-system exec etcd-<node> -- etcdctl --endpoints=https://127.0.0.1:2379 --cacert=/etc/kubernetes/pki/etcd/ca.crt --cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt --key=/etc/kubernetes/pki/etcd/healthcheck-client.key snapshot save /var/lib/etcd/capstan-snapshot.db` (it prints `Snapshot saved at /var/lib/etcd/capstan-snapshot.db`).",
        "Copy it off the node and remove it there: `ssh <node> sudo cat /var/lib/etcd/capstan-snapshot.db > etcd-snapshot.db` and `ssh <node> sudo rm /var/lib/etcd/capstan-snapshot.db` (`kubeadm reset` empties `/var/lib/etcd`, so a copy left there goes with the node). It holds every object of the cluster, Secrets included (encrypted only as the EncryptionConfiguration says): keep it like a Secret (`chmod 600`, never in git).",
        "Check it: `capstan check clusters/{cluster} --etcd-snapshot etcd-snapshot.db` with the other inputs (phase control-plane's full command names it; `check-inputs` blocks without it): `etcd-snapshot` passes for a whole etcd snapshot, a bbolt database followed by the SHA-256 etcd appends to it.",
    ],
    why: "phase control-plane adds the Talos members to the kubeadm etcd and then removes the kubeadm ones: if quorum is lost and no member's data can be used, this snapshot is the state to go back to (`etcdutl snapshot restore` on a kubeadm node, or `talosctl bootstrap --recover-from` on a Talos node; both check the SHA-256). It runs inside the etcd Pod: kubeadm installs no etcdctl on the host, the etcd image carries one, and kubeadm mounts the etcd certificates and the data directory into the Pod at their host paths, so the client certificate is found and the file lands on the node's disk.",
};

/// Restore etcd quorum on the Talos control plane from a snapshot (D11): in phase
/// control-plane once a kubeadm member was removed, and in phases workers and complete.
pub const RECOVER_TALOS_QUORUM: Procedure = Procedure {
    id: "recover-talos-quorum",
    title: "Restore etcd quorum on the Talos control plane",
    steps: &[
        "When the Talos members hold the cluster: in phase control-plane once the first kubeadm member was removed, in phases workers and complete. If the lost members' VMs still exist, power them on: quorum returns by itself; stop here.",
        "Talk to the nodes at their own addresses, never through the endpoint: with `vip` the shared address is gone with quorum. Get the talosconfig: `kubectl -n {ns} get secret {cluster}-talosconfig -o jsonpath='{.data.talosconfig}' | base64 -d > talosconfig`, and give every `talosctl` below `--talosconfig talosconfig -e <node-ip> -n <node-ip>` (`-e` overrides the endpoints in the talosconfig).",
        "Pause the control plane (Pause the control plane now), so the provider neither replaces nor removes machines meanwhile.",
        "Confirm quorum is lost: `talosctl -e <node-ip> -n <node-ip> etcd members` and `talosctl -e <node-ip> -n <node-ip> service etcd` on every control-plane node.",
        "Take a snapshot from a node whose etcd still runs: `talosctl -e <node-ip> -n <node-ip> etcd snapshot db.snapshot`. If that fails, copy its data file instead: `talosctl -e <node-ip> -n <node-ip> cp /var/lib/etcd/member/snap/db .` (a copy of the data directory has no SHA-256: recover it with `--recover-skip-hash-check` below, and only it). The snapshot taken before phase control-plane also restores, but loses every write since.",
        "In phase control-plane: take every kubeadm control-plane node still there out of the load balancer and move its `/etc/kubernetes/manifests/etcd.yaml` out of the manifests directory: its member is not in the recovered cluster. Remove those nodes afterwards as usual, one commit each (Remove one kubeadm control-plane node; its `kubeadm reset` may warn that it cannot remove the member, and `talosctl -e <node-ip> -n <node-ip> etcd members` replaces the `etcdctl` checks).",
        "Wipe etcd's data on every Talos control-plane node, one after another: `talosctl -e <node-ip> -n <node-ip> reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL` (`--graceful=false`: no etcd leave, which needs the quorum that is gone). Each reboots with its etcd service `Preparing`: `talosctl -e <node-ip> -n <node-ip> service etcd`.",
        "On one of them: `talosctl -e <node-ip> -n <node-ip> bootstrap --recover-from=db.snapshot` (for the copied data file: `--recover-from=db --recover-skip-hash-check`). Its etcd starts as a cluster of one with every key of the snapshot, then its apiserver; with `vip` it announces the shared address again once its etcd is healthy.",
        "The other control-plane nodes join by themselves once the endpoint answers: `talosctl -e <node-ip> -n <node-ip> etcd members` lists them all, and `kubectl get --raw /readyz` through the endpoint answers `ok`.",
        "In phases workers and complete lift the pause (`kubectl -n {ns} annotate taloscontrolplanes.controlplane.cluster.x-k8s.io {tcp} cluster.x-k8s.io/paused-`) and check that every control-plane Machine has its node: `kubectl -n {ns} get machines.cluster.x-k8s.io -l cluster.x-k8s.io/cluster-name={cluster},cluster.x-k8s.io/control-plane`. In phase control-plane keep it paused and go on removing the kubeadm nodes.",
    ],
    why: "etcd makes no membership change without a majority, and Talos rebuilds a lost etcd only through its bootstrap API: `talosctl bootstrap --recover-from` uploads the snapshot and the node restores it with etcd's snapshot library (checking the SHA-256 unless told to skip it) as a one-member cluster. Talos refuses that bootstrap while the node's etcd data directory holds anything (`etcd data directory is not empty`), hence the wipe of the EPHEMERAL partition that holds it. A Talos VIP is announced only by a node whose etcd is healthy, and the holder drops it when its etcd session ends: without quorum the endpoint is gone, so every command goes to a node address.",
};

/// Lift the pause in phase workers (B3).
pub const UNPAUSE: Procedure = Procedure {
    id: "unpause",
    title: "Lift the pause after phase control-plane",
    steps: &[
        "Set `spec.migration.phase: workers` with `controlPlaneNodes` and `etcdMembers` empty, and sync: the Job `{cluster}-capstan-migration-unpause-control-plane-*` reads twice through `{cluster}-kubeconfig` that no kubeadm etcd Pod and no kubeadm control-plane Node is left, deletes phase control-plane's admission policy `{node-ref-policy}` and its binding, then removes the annotation.",
        "If it refuses, find what is left: `kubectl get pods -n kube-system -l component=etcd` and `kubectl get nodes -l node-role.kubernetes.io/control-plane -o wide` in the workload cluster.",
        "By hand, only after the same checks, the policy first: `kubectl delete validatingadmissionpolicybindings.admissionregistration.k8s.io/{node-ref-policy} validatingadmissionpolicies.admissionregistration.k8s.io/{node-ref-policy} --ignore-not-found`, then `kubectl -n {ns} annotate taloscontrolplanes.controlplane.cluster.x-k8s.io {tcp} cluster.x-k8s.io/paused-`.",
    ],
    why: "the scale Job's `kubectl annotate` owns the pause annotation (a server-side-apply field manager), and server-side apply, as Argo CD syncs, never removes a field another manager owns: git dropping the annotation leaves the control plane paused, with no kubeconfig rotation, no remediation and, after a version bump, worker MachineSets held by CAPI's preflight checks. An Update removes a field whoever owns it. The nodeRef policy goes first: a sync of phase control-plane by capstan before the policy depended on the TalosControlPlane's `capstan.dev/migration-phase` annotation gave it `Prune=false`, and with the control plane unpaused it would refuse every new control-plane Machine its nodeRef, so every later rollout would stop at replicas + 1.",
};

/// Keep the control-plane VMs on separate hosts, through every rollout (M2, D12).
pub const ANTI_AFFINITY: Procedure = Procedure {
    id: "anti-affinity",
    title: "Keep the control-plane VMs on separate ESXi hosts",
    steps: &[
        "Once, in vCenter: a tag category for virtual machines and a tag for this control plane: `govc tags.category.create -t VirtualMachine k8s-anti-affinity`, then `govc tags.create -c k8s-anti-affinity {cluster}-control-plane`, which prints the tag's ID (`urn:vmomi:InventoryServiceTag:<uuid>:GLOBAL`; `govc tags.info {cluster}-control-plane` shows it again).",
        "Set it in `clusters/{cluster}/cluster.yaml` as `spec.controlPlane.antiAffinity.tagID` and commit, best in phase prepare (no machine exists yet; later, the template's content hash changes once and the control plane rolls when it is not paused): the control-plane VSphereMachineTemplate carries it in `tagIDs`, and CAPV attaches it to every control-plane VM it creates, in every later rollout too.",
        "Create a VM-VM anti-affinity compute policy for that tag in the vSphere Client (Policies and Profiles, Compute Policies, Add: \"VM anti affinity\", VM tag `k8s-anti-affinity` / `{cluster}-control-plane`); govc has no command for compute policies. vCenter asks DRS to keep the tagged VMs on separate hosts; that behaviour is vCenter's and cannot be read from source here, so check the result (next step).",
        "After the scale Job has created the machines, before the first kubeadm node is removed, and after every control-plane rollout: `govc vm.info -json '<spec.vsphere.folder>/*' <each kubeadm control-plane VM's path> > vms.json`, then `capstan check clusters/{cluster} --vsphere-inventory vms.json`: `control-plane-hosts` blocks while one host holds more etcd voters than etcd can lose (during phase control-plane the kubeadm members count too: 6 voters, quorum 4, so not 3 on one host; afterwards not 2 of 3). Move a VM with `govc vm.migrate -host <host> <vm>` if DRS does not.",
        "Without compute policies (no DRS, vCenter before 7.0): a DRS VM/VM rule of type \"Separate Virtual Machines\" over the control-plane VMs (named like their Machines: `kubectl -n {ns} get machines.cluster.x-k8s.io -l cluster.x-k8s.io/cluster-name={cluster},cluster.x-k8s.io/control-plane`), `govc cluster.rule.create -name {cluster}-cp -enable -anti-affinity <vm>...`. It names VMs, so every rollout leaves it stale: after each one, rebuild it over the new VMs.",
    ],
    why: "CAPV makes vSphere cluster modules (anti-affinity) only for KubeadmControlPlane and MachineDeployments, never for a TalosControlPlane, and the Talos control-plane provider picks a failure domain at random for each machine, so nothing in Cluster API keeps the control-plane VMs apart, and every rollout (a Talos or Kubernetes upgrade, any template change) replaces them with new VMs that a VM-named DRS rule does not know. A tag follows the template: CAPV copies `tagIDs` into each VM's spec and attaches the tags on every reconcile. One host holding 2 of 3 control-plane VMs takes etcd's quorum down with it; during phase control-plane etcd has the kubeadm and the Talos members, 3 of 6 on one host.",
};

/// Move the kubeadm encryption key to the name Talos uses (two steps, so apiservers restarted one at a time always read each other's writes).
pub const ROTATE_KEY_NAME: Procedure = Procedure {
    id: "rotate-key-name",
    title: "Move the kubeadm encryption key to Talos's key name",
    steps: &[
        "On every kubeadm control-plane node, add a secretbox key named `key2` as the **second** key of the `secrets` provider in the EncryptionConfiguration that `--encryption-provider-config` names (a new 32-byte secret: `head -c 32 /dev/urandom | base64`, the same on every node); restart every kube-apiserver, one at a time (move its manifest out of `/etc/kubernetes/manifests` and back), each Ready before the next.",
        "On every node, make `key2` the **first** key; restart every kube-apiserver again, one at a time.",
        "Re-encrypt every Secret with `key2`: `kubectl get secrets -A -o json | kubectl replace -f -`.",
        "Remove the old key from every node; restart every kube-apiserver, one at a time.",
        "Before any Talos node exists (phase `prepare`), import again into the cluster's directory with `--update` (`capstan import kubeadm … --encryption-config <file> --out <cluster directory> --update`): the bundle and sealed Secrets are replaced and `spec.encryption` and `spec.provenance` updated, every other line of cluster.yaml kept; then check: `capstan check <cluster directory> --encryption-config <file> --identity <key file>`.",
    ],
    why: "The apiservers restart one at a time, so for a while some run the new configuration and some the old. An apiserver whose first key is `key2` writes values (`k8s:enc:secretbox:v1:key2:`) that one without `key2` cannot read (`no matching prefix found`); with `key2` added second everywhere first, every apiserver reads what any writes. Talos names its secretbox key `key2` and cannot be told otherwise (`encryption-provider-config` is a denied flag). From aescbc (Talos ≥ 1.3 drops an aescbc key) the same order holds for a new provider: in step 1 add a `secretbox` provider with key `key2` **after** the `aescbc` provider, in step 2 move it first, keep `aescbc` after it until step 3 has re-encrypted every Secret, and remove it in step 4.",
};

/// The two-step rotation in one sentence, for `check`, validation and `import` messages
/// (`want` is Talos's key name, `old` kubeadm's).
pub fn rotate_key_name_fix(want: &str, old: &str) -> String {
    format!(
        "move the key to `{want}` in two steps (README procedure \"{}\"): add `{want}` as the second key on \
         every kubeadm apiserver and restart them all one at a time, then make it the first key and restart \
         them all again, re-encrypt every Secret (`kubectl get secrets -A -o json | kubectl replace -f -`), \
         drop `{old}`, then import again; a one-step rename leaves apiservers that cannot read each other's \
         writes (`no matching prefix found`)",
        ROTATE_KEY_NAME.title
    )
}

/// Every procedure, in the order the README lists them.
pub const ALL: &[&Procedure] = &[
    &ROTATE_KEY_NAME,
    &SET_BOOTSTRAPPED,
    &PAUSE,
    &ETCD_SNAPSHOT,
    &ANTI_AFFINITY,
    &REMOVE_KUBEADM_NODE,
    &REPLACE_TALOS_MACHINE,
    &ROLLBACK_CONTROL_PLANE,
    &RESTORE_QUORUM,
    &RECOVER_TALOS_QUORUM,
    &UNPAUSE,
];

/// A procedure by id.
pub fn by_id(id: &str) -> Option<&'static Procedure> {
    ALL.iter().copied().find(|p| p.id == id)
}

/// The README's procedures section, as it must read (between its markers).
#[cfg(any(test, feature = "testkit"))]
pub fn readme_section() -> String {
    let names = Names::placeholders();
    let mut md = String::new();
    for p in ALL {
        md.push_str(&p.markdown(&names, "###"));
        md.push('\n');
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fill_every_placeholder() {
        let n = Names {
            namespace: "ns1".into(),
            cluster: "c1".into(),
        };
        for p in ALL {
            for s in p.steps(&n) {
                assert!(
                    !s.contains("{ns}")
                        && !s.contains("{cluster}")
                        && !s.contains("{tcp}")
                        && !s.contains("{node-ref-policy}"),
                    "{s}"
                );
            }
        }
        let rb = ROLLBACK_CONTROL_PLANE.steps(&n).join("\n");
        assert!(rb.contains("kubectl -n ns1 delete machines.cluster.x-k8s.io -l cluster.x-k8s.io/cluster-name=c1,cluster.x-k8s.io/control-plane"));
        assert!(SET_BOOTSTRAPPED.steps(&Names::placeholders())[1]
            .contains("<cluster>-cp --subresource=status"));
    }

    #[test]
    fn the_rollback_removes_members_before_machines() {
        let steps = ROLLBACK_CONTROL_PLANE.steps;
        let remove = steps
            .iter()
            .position(|s| s.contains("etcdctl member remove"))
            .unwrap();
        let health = steps
            .iter()
            .position(|s| s.contains("etcdctl endpoint health"))
            .unwrap();
        let delete = steps
            .iter()
            .position(|s| s.contains("delete machines"))
            .unwrap();
        assert!(remove < health && health < delete);
        assert!(ROLLBACK_CONTROL_PLANE.why.contains("6 voters, quorum 4"));
    }

    /// The backticked commands of a procedure's steps that start with `tool`.
    fn commands(p: &Procedure, tool: &str) -> Vec<String> {
        p.steps(&Names::placeholders())
            .iter()
            .flat_map(|s| {
                s.split('`')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .filter(|c| c.starts_with(tool))
            .collect()
    }

    #[test]
    fn the_talos_recovery_goes_to_node_addresses_in_talos_s_order() {
        // talosctl's flags as Talos v1.10.0 to v1.13.9 define them:
        // cmd/talosctl/cmd/talos/root.go:74-75 (-n/--nodes, -e/--endpoints),
        // bootstrap.go:82-83 (--recover-from, --recover-skip-hash-check), etcd.go
        // (`etcd snapshot <path>`, `etcd members`), reset.go:188-193.
        let talosctl = commands(&RECOVER_TALOS_QUORUM, "talosctl ");
        assert!(talosctl.len() >= 7, "{talosctl:?}");
        for c in &talosctl {
            assert!(c.starts_with("talosctl -e <node-ip> -n <node-ip> "), "{c}");
        }
        let at = |needle: &str| {
            talosctl
                .iter()
                .position(|c| c.contains(needle))
                .unwrap_or_else(|| panic!("{needle}"))
        };
        assert!(at("etcd snapshot db.snapshot") < at("reset --graceful=false"));
        assert!(at("reset --graceful=false") < at("bootstrap --recover-from=db.snapshot"));
        assert!(talosctl[at("reset")].contains("--system-labels-to-wipe=EPHEMERAL"));
        // The hash check is skipped only for a copy of the data directory.
        for s in RECOVER_TALOS_QUORUM.steps {
            if s.contains("--recover-skip-hash-check") {
                assert!(
                    s.contains("member/snap/db") || s.contains("--recover-from=db "),
                    "{s}"
                );
            }
        }
        assert!(!talosctl[at("bootstrap --recover-from=db.snapshot")].contains("skip"));
        // The rollback and the kubeadm-side restore send the operator here.
        assert!(ROLLBACK_CONTROL_PLANE.steps[0].contains(RECOVER_TALOS_QUORUM.title));
        assert!(RESTORE_QUORUM.steps[0].contains(RECOVER_TALOS_QUORUM.title));
        assert!(RECOVER_TALOS_QUORUM.why.contains("VIP"));
    }

    #[test]
    fn the_snapshot_runs_in_the_etcd_pod_with_kubeadm_s_client_certificate() {
        let save = commands(
            &ETCD_SNAPSHOT,
            "kubectl -n kube-system exec etcd-<node> -- etcdctl ",
        );
        assert_eq!(save.len(), 1, "{save:?}");
        for flag in [
            "--endpoints=https://127.0.0.1:2379",
            "--cacert=/etc/kubernetes/pki/etcd/ca.crt",
            "--cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt",
            "--key=/etc/kubernetes/pki/etcd/healthcheck-client.key",
            "snapshot save /var/lib/etcd/",
        ] {
            assert!(save[0].contains(flag), "{flag}");
        }
        // Checked by the flag the check-inputs readiness list names.
        assert!(ETCD_SNAPSHOT
            .steps
            .iter()
            .any(|s| s.contains("--etcd-snapshot etcd-snapshot.db")));
    }

    #[test]
    fn ids_are_unique_and_found() {
        for p in ALL {
            assert_eq!(by_id(p.id).map(|q| q.title), Some(p.title));
            assert_eq!(ALL.iter().filter(|q| q.id == p.id).count(), 1);
        }
    }
}
