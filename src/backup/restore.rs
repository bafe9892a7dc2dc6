//! `capstan restore plan`: the runbook that rebuilds a lost management cluster and has the
//! providers adopt the running workload clusters instead of creating new machines.
//!
//! It rests on what `clusterctl move` does (cluster-api `cmd/clusterctl/client/cluster/
//! mover.go`): `--to-directory` saves the objects while their Clusters are paused;
//! `--from-directory` creates them group by group, without status, and then unpauses every
//! Cluster. A TalosControlPlane restored without `status.bootstrapped` would have its
//! provider send the Talos bootstrap RPC to a machine, which starts a second, empty etcd;
//! so every TalosControlPlane stays paused (`cluster.x-k8s.io/paused`, which CACPPT v0.5.12
//! honours, `taloscontrolplane_controller.go:117`) until it has its status back, on the
//! temporary cluster and again on the permanent one. No provider is scaled to 0: each
//! serves failurePolicy-Fail webhooks on the kinds `--from-directory` creates (\[A36]), so
//! those that take `--watch-filter` (CABPT, CAPV, the IPAM provider) are held with it.
//!
//! Two more upstream facts order the runbook:
//! - The old management cluster must be fenced before `--from-directory` (D5): restored
//!   VSphereVMs bind to the running VMs by BIOS UUID (CAPV v1.13.1
//!   `pkg/services/govmomi/util.go:65-79`), so two CAPVs would manage the same VMs, and
//!   each CACPPT's `forceEtcdLeave` removes the etcd members that are none of its own
//!   Machines (CACPPT v0.5.12 `controllers/etcd.go:166-257`).
//! - Nothing reconciles VMs or addresses before `restore check` is clean (D8): a VSphereVM
//!   whose VM is gone is never re-cloned (CAPV `service.go:83-102`) and the in-cluster IPAM
//!   provider hands out the lowest address no IPAddress holds, without probing. CAPV serves
//!   failurePolicy-Fail webhooks for VSphereVMs (`config/govmomi/webhook/manifests.yaml`), so
//!   it cannot be at 0 replicas while `--from-directory` creates them: it runs with
//!   `--watch-filter` (`main.go:183-184`; every controller filters on it, e.g.
//!   `controllers/vspherevm_controller.go:100`) and so reconciles nothing until the flag is
//!   removed. The bootstrap provider is held the same way (D4: without the secrets bundle
//!   CABPT v0.6.12 generates a new Talos PKI, `controllers/secrets.go:44-71`; it takes
//!   `--watch-filter`, `main.go:61-62`, `controllers/talosconfig_controller.go:91`).
//!
//! Pure: names in, Markdown out.

use super::{custody, inventory};
use crate::model::ClusterConfig;
use crate::printable::{md_code, md_text};
use crate::procedure::{Names, SET_BOOTSTRAPPED};
use std::fmt::Write as _;

/// The provider releases `clusterctl init` installs: those the clusters declare
/// (`spec.migration.providers`), else the releases their flavour was verified against.
fn init_command(configs: &[ClusterConfig], ipam: bool) -> (String, Vec<String>) {
    let mut notes = Vec::new();
    let declared: Vec<_> = configs
        .iter()
        .filter_map(|c| c.spec.migration.as_ref()?.providers.clone())
        .collect();
    let first = declared.first().cloned();
    if declared.iter().any(|d| Some(d) != first.as_ref()) {
        notes.push(
            "the clusters declare different provider releases (`spec.migration.providers`); the first is used below: \
             one management cluster runs one release of each"
                .to_string(),
        );
    }
    let release = |name: &str| -> String {
        if let Some(p) = &first {
            if let Some((_, r)) = p.entries().into_iter().find(|(n, _)| *n == name) {
                return r.to_string();
            }
        }
        let flavour = configs
            .first()
            .map_or(crate::model::Flavour::V1beta1, |c| c.spec.flavour);
        crate::inputs::providers::verified(flavour)
            .iter()
            .find(|p| p.name == name)
            .map_or_else(
                || "<release>".to_string(),
                |p| match p.releases {
                    crate::inputs::providers::Releases::Exact(r) => r.to_string(),
                    crate::inputs::providers::Releases::Series(a, b) => format!("v{a}.{b}.<patch>"),
                },
            )
    };
    if first.is_none() {
        notes.push(
            "no cluster declares `spec.migration.providers`: the releases below are those capstan verified for the \
             flavour; use exactly the releases the lost management cluster ran"
                .to_string(),
        );
    }
    let mut cmd = format!(
        "clusterctl init --core cluster-api:{} --bootstrap talos:{} --control-plane talos:{} --infrastructure vsphere:{}",
        release("cluster-api"),
        release("bootstrap-talos"),
        release("control-plane-talos"),
        release("infrastructure-vsphere")
    );
    if ipam {
        let _ = write!(cmd, " --ipam in-cluster:{}", release("ipam-in-cluster"));
    }
    (cmd, notes)
}

/// The kind cluster the restore starts from.
pub(crate) const KIND_CONFIG: &str = "kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
name: capstan-restore
nodes:
- role: control-plane
";

/// The annotation Cluster API controllers, CACPPT among them, pause an object with.
const PAUSED: &str = "cluster.x-k8s.io/paused";

/// The label value held providers filter on: no object carries it.
const HOLD: &str = "capstan-restore-hold";

/// The namespaces `clusterctl init` installs each provider into, and its provider label.
const PROVIDERS: [(&str, &str); 5] = [
    ("capi-system", "cluster-api"),
    ("cabpt-system", "bootstrap-talos"),
    ("cacppt-system", "control-plane-talos"),
    ("capv-system", "infrastructure-vsphere"),
    // The release's own namespace and prefix (ipam-in-cluster v1.0.3
    // `config/default/kustomization.yaml:2, 9`).
    ("capi-ipam-in-cluster-system", "ipam-in-cluster"),
];

/// The runbook's part when `url` holds no backup: what each cluster's phase still allows,
/// and what to do for the others (D7: no invented procedure).
fn no_backup(
    md: &mut String,
    configs: &[ClusterConfig],
    url_code: &str,
    init_code: &str,
    backup_recipe: &str,
) {
    // D7: no invented procedure. Without the Machines a backup holds, capstan's guard
    // and scale Job refuse to admit a control-plane Machine while Talos control-plane
    // Nodes run without one (`templates/migration/lib.sh`, `guard`), by design: new
    // Machines would become a second control plane. Only a cluster that never had a
    // Talos machine can be rebuilt from git.
    let _ = writeln!(
        md,
        "## No backup under {url_code}\n\n\
         Without the Machines, IP allocations and `status.bootstrapped` that only a backup holds, the providers \
         cannot adopt running Talos machines: rendered from git alone they would create new machines, hand out \
         addresses running nodes use, and a control plane without `status.bootstrapped` can bootstrap a second \
         etcd. capstan has no supported procedure that adopts running Talos nodes without a backup, and its guard \
         refuses to admit control-plane Machines while Talos control-plane Nodes run without them.\n"
    );
    for c in configs {
        let name = format!("{}/{}", c.metadata.namespace, c.metadata.name);
        let phase = c.spec.migration.as_ref().map(|m| m.phase);
        let text = match phase {
            Some(crate::model::Phase::Prepare) => format!(
                "{}: phase `prepare` runs no Talos machine, so there is nothing to adopt: a new management cluster \
                 ({init_code}) with the repository applied as it is (phase `prepare`: 0 replicas, the guard) is \
                 safe; its Job sets `status.bootstrapped` once it reads that no Talos control-plane Node runs.",
                md_code(&name)
            ),
            Some(crate::model::Phase::ControlPlane) => format!(
                "{}: phase `control-plane`. If no Talos control-plane Node runs (`kubectl --kubeconfig <cluster>.kubeconfig \
                 get nodes -o wide`: no `Talos` OS image), as phase `prepare`: apply the repository to a new management \
                 cluster ({init_code}). If one runs, **not supported**: do not apply the repository to a new management \
                 cluster (the guard would refuse, and must).",
                md_code(&name)
            ),
            _ => format!(
                "{}: Talos machines run: **not supported** without a backup. Do not apply the repository to a new \
                 management cluster.",
                md_code(&name)
            ),
        };
        let _ = writeln!(md, "- {text}");
    }
    let _ = writeln!(
        md,
        "\nWhat to do instead for a cluster that is not supported: leave it running without a management cluster. \
         Its nodes and workloads keep running; nothing scales, rolls out or remediates. Operate the nodes with \
         `talosctl` (the Talos secrets bundle in `secrets.age` holds its PKI) and take etcd snapshots \
         (`talosctl etcd snapshot`) until a management cluster can take the cluster over, and get help before \
         trying anything else: rebuilding its Machines by hand is a procedure nobody has tested.\n\n\
         From now on a backup exists in every phase: `clusterctl move --to-directory` refuses while a Cluster's \
         control plane is not ready or a Machine has no nodeRef (phases `prepare` and `control-plane`), \
         `capstan backup dump` does not:\n\n```sh\n{backup_recipe}```\n"
    );
}

/// The restore runbook for the clusters of a repository (`configs`, `ipam` when any uses
/// an IPAM pool), from backup `backup` under `url`, or the path without a backup.
pub(crate) fn runbook(
    configs: &[ClusterConfig],
    ipam: bool,
    url: &str,
    backup: Option<(&str, &str)>,
    findings: Option<&inventory::Report>,
) -> String {
    let mut md = String::with_capacity(8192);
    let (init, notes) = init_command(configs, ipam);
    let _ = writeln!(md, "# Restore the management cluster\n");
    let _ = writeln!(
        md,
        "Clusters in the repository: {}.\n",
        configs
            .iter()
            .map(|c| md_code(&format!("{}/{}", c.metadata.namespace, c.metadata.name)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for n in &notes {
        let _ = writeln!(md, "> **Note:** {n}.\n");
    }
    // The URL and the index's id and date come from the command line and the bucket: each is
    // written as a code span or escaped text, and every command that quotes them as one span.
    let url_code = md_code(url);
    let init_code = md_code(&init);
    let namespaces: Vec<&str> = {
        let mut n: Vec<&str> = configs
            .iter()
            .map(|c| c.metadata.namespace.as_str())
            .collect();
        n.sort_unstable();
        n.dedup();
        n
    };
    // Inside a code block: a URL that could end it is not quoted.
    let plain = !url.contains('`') && !url.chars().any(char::is_control);
    let backup_recipe = super::dump::commands(&namespaces, if plain { url } else { "URL" });
    let Some((id, created)) = backup else {
        no_backup(&mut md, configs, &url_code, &init_code, &backup_recipe);
        return md;
    };
    let _ = writeln!(
        md,
        "From backup {} ({}) under {url_code}. Every step is run by an operator who holds the DR \
         identity; the restored objects include the clusters' CA keys and kubeconfigs.\n",
        md_code(id),
        md_text(created)
    );
    // Held with `--watch-filter`, never at 0 replicas: each serves failurePolicy-Fail
    // webhooks the restore's creates need [A36].
    let mut filtered = vec![
        "cabpt-system deployment/cabpt-controller-manager",
        "capv-system deployment/capv-controller-manager",
    ];
    if ipam {
        filtered
            .push("capi-ipam-in-cluster-system deployment/capi-ipam-in-cluster-controller-manager");
    }
    let rollout: String = filtered
        .iter()
        .map(|t| {
            let (ns, d) = t.split_once(' ').unwrap_or(("", t));
            format!("`kubectl -n {ns} rollout status {d}`")
        })
        .collect::<Vec<_>>()
        .join(", ");
    // CACPPT takes no `--watch-filter` (v0.5.12 `main.go:60-72`) and honours the pause
    // annotation on its TalosControlPlane (`taloscontrolplane_controller.go:117`).
    let tcp_name = |c: &ClusterConfig| format!("{}-cp", c.metadata.name);
    let in_control_plane_phase = |c: &ClusterConfig| {
        c.spec.migration.as_ref().map(|m| m.phase) == Some(crate::model::Phase::ControlPlane)
    };
    let pause_live = |kubeconfig: &str| -> String {
        configs
            .iter()
            .map(|c| {
                format!(
                    "`kubectl{kubeconfig} -n {} annotate taloscontrolplanes.controlplane.cluster.x-k8s.io {} {PAUSED}=true --overwrite`",
                    c.metadata.namespace,
                    tcp_name(c)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let unpause = |kubeconfig: &str| -> String {
        let mut out: Vec<String> = configs
            .iter()
            .filter(|c| !in_control_plane_phase(c))
            .map(|c| {
                format!(
                    "`kubectl{kubeconfig} -n {} annotate taloscontrolplanes.controlplane.cluster.x-k8s.io {} {PAUSED}-`",
                    c.metadata.namespace,
                    tcp_name(c)
                )
            })
            .collect();
        out.extend(configs.iter().filter(|c| in_control_plane_phase(c)).map(|c| {
            format!(
                "keep {} paused: it is in phase `control-plane`, which git renders paused (the etcd audit would \
                 remove the kubeadm members)",
                md_code(&format!("{}/{}", c.metadata.namespace, tcp_name(c)))
            )
        }));
        out.join(", ")
    };
    let watch = |op: &str| -> String {
        filtered
            .iter()
            .map(|t| {
                let (ns, d) = t.split_once(' ').unwrap_or(("", t));
                if op == "add" {
                    format!(
                        "`kubectl -n {ns} patch {d} --type json -p '[{{\"op\":\"add\",\"path\":\"/spec/template/spec/containers/0/args/-\",\"value\":\"--watch-filter={HOLD}\"}}]'`"
                    )
                } else {
                    format!("`kubectl -n {ns} edit {d}` (delete the `--watch-filter={HOLD}` argument)")
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let fence: Vec<String> = PROVIDERS
        .iter()
        .filter(|(_, p)| ipam || *p != "ipam-in-cluster")
        .map(|(ns, p)| format!("`kubectl --kubeconfig old.kubeconfig -n {ns} scale deployment -l cluster.x-k8s.io/provider={p} --replicas=0`"))
        .collect();
    let secrets: Vec<String> = configs
        .iter()
        .map(|c| {
            md_code(&format!(
                "for f in clusters/{}/secrets/*.yaml; do capstan secrets decrypt \"$f\" -i operator-identity.txt | kubectl annotate --local -f - {}={} -o yaml | kubectl apply -f -; done",
                c.metadata.name,
                super::dump::SOPS_MANAGED.0,
                super::dump::SOPS_MANAGED.1
            ))
        })
        .collect();
    let steps: Vec<String> = vec![
        "If Argo CD still runs somewhere and targets the management cluster, turn off automated sync of the \
         cluster Applications until the last step: it would create the rendered objects (without their \
         Machines) in the new cluster."
            .into(),
        format!(
            "**Gate: fence the old management cluster.** Restored VSphereVMs bind to the running VMs by BIOS UUID, so \
             an old management cluster that still runs (a partition, a half-dead cluster) and the new one would manage \
             the same VMs, and each control-plane provider removes the etcd members of the other's Machines. Do not \
             go on until one of these holds: (a) its providers are stopped: {} and `kubectl --kubeconfig \
             old.kubeconfig get deploy -A -l cluster.x-k8s.io/provider` shows `0/0` on every row; (b) the vCenter \
             account its CAPV logs in as (the `username` of the Secret `spec.vsphere.identityRef` names) is disabled \
             or its password changed in vCenter, confirmed by a login with the old password failing (`govc about` with \
             it: `ServerFaultCode: Cannot complete login`); (c) it is gone for good (its VMs deleted, not only \
             unreachable), written down in the incident record with who confirmed it. A cluster that cannot be \
             reached is not gone.",
            fence.join(", ")
        ),
        format!(
            "Create the temporary cluster: save\n\n   ```yaml\n{}   ```\n\n   as `kind-restore.yaml` and run `kind create cluster --config kind-restore.yaml`.",
            KIND_CONFIG.lines().map(|l| format!("   {l}\n")).collect::<String>()
        ),
        format!(
            "Install the providers the lost cluster ran: {init_code}, then `kubectl wait --for=condition=Available deployment --all -A --timeout=10m`."
        ),
        format!(
            "Hold every provider that acts on machines, without stopping any: each serves failurePolicy-Fail \
             webhooks on the objects `clusterctl move --from-directory` creates (the bootstrap provider TalosConfigs, \
             the control-plane provider TalosControlPlanes, CAPV VSphereVMs and VSphereMachines{}), and a provider at \
             0 replicas makes those creates fail. Make the bootstrap provider, CAPV{} reconcile nothing: {}, then {}; \
             they reconcile only objects labelled `cluster.x-k8s.io/watch-filter={HOLD}`, which none is (without its \
             secrets bundle the bootstrap provider would generate a new Talos PKI for the first new Machine). The \
             control-plane provider takes no such flag: it keeps running, and every TalosControlPlane is restored \
             paused (below). If `clusterctl init` put a provider elsewhere: `kubectl get deployment -A -l \
             cluster.x-k8s.io/provider`.",
            if ipam { ", the IPAM provider its pools" } else { "" },
            if ipam { " and the IPAM provider" } else { " and" },
            watch("add"),
            rollout
        ),
        format!(
            "Apply the sealed Secrets from git (the operator who holds an identity of `spec.recipients` decrypts them; \
             nothing is written to disk): {}. The annotation `{}: \"{}\"` lets sops-secrets-operator (secrets mode \
             `operator`) adopt each Secret when Argo CD brings its SopsSecret back: without it the operator refuses \
             a Secret it did not create (\"Child secret is not owned by controller\"), the SopsSecret stays Degraded \
             and its sync wave never completes; in mode `decrypt` nothing reads it.",
            secrets.join(", "),
            super::dump::SOPS_MANAGED.0,
            super::dump::SOPS_MANAGED.1
        ),
        format!(
            "Fetch the backup: {} (checked against its \
             index and manifest: a corrupt or truncated backup is refused; files mode 0600).",
            md_code(&format!("capstan backup pull {url}/{id} restore -i dr-identity.txt"))
        ),
        format!(
            "Restore every TalosControlPlane paused: {}. The control-plane provider must not see one before its \
             `status.bootstrapped` is back (it would send the Talos bootstrap RPC and start a second, empty etcd); \
             the annotation outlasts the unpause of the Clusters at the end of `--from-directory`.",
            md_code(&format!(
                "for f in restore/TalosControlPlane_*.yaml; do kubectl annotate --local -f \"$f\" {PAUSED}=true -o json > \"$f.new\" && mv \"$f.new\" \"$f\"; done"
            ))
        ),
        "Restore the objects: `clusterctl move --from-directory restore` (keep `restore` until the check below is clean)."
            .into(),
        "Set `status.bootstrapped` on every TalosControlPlane (status is not restored):".into(),
    ];
    for (i, s) in steps.iter().enumerate() {
        let _ = writeln!(md, "{}. {s}", i + 1);
    }
    for c in configs {
        let names = Names {
            namespace: c.metadata.namespace.clone(),
            cluster: c.metadata.name.clone(),
        };
        for s in SET_BOOTSTRAPPED.steps(&names).iter().skip(1) {
            let _ = writeln!(md, "   - {s}");
        }
    }
    let mut n = steps.len();
    let mut step = |md: &mut String, s: String| {
        n += 1;
        let _ = writeln!(md, "{n}. {s}");
    };
    step(
        &mut md,
        "**Gate: reconcile what runs.** For each cluster, list its folder's VMs (`govc vm.info -json \
         '<folder>/*' > vms-<cluster>.json`) and its nodes (`kubectl --kubeconfig <cluster>.kubeconfig get nodes -o \
         json > nodes-<cluster>.json`), then `capstan restore check restore --vsphere-inventory vms-<cluster>.json \
         --nodes nodes-<cluster>.json` (each flag repeatable): it matches the VMs to the restored VSphereVMs' BIOS \
         UUIDs and the nodes' InternalIPs to the restored IPAddresses, and prints the action for each orphan VM \
         (quarantine: power off, keep), each VSphereVM whose VM is gone and each address a node holds that no \
         IPAddress claims. Do what it says and run it again until it exits 0; then `rm -rf restore`."
            .into(),
    );
    if let Some(r) = findings {
        if r.mismatches.is_empty() {
            let _ = writeln!(md, "   - The inventory given matches the backup: {} VSphereVM(s) found, nothing to do.", r.matched);
        }
        for m in &r.mismatches {
            let _ = writeln!(
                md,
                "   - {} {}: {}",
                md_code(m.kind),
                md_code(&m.subject),
                md_text(&m.detail)
            );
            for a in &m.actions {
                let _ = writeln!(md, "     - {}", md_text(a));
            }
        }
    }
    step(
        &mut md,
        format!(
            "Let the providers reconcile: {}; then the control planes: {}.",
            watch("remove"),
            unpause("")
        ),
    );
    step(
        &mut md,
        "Check that the providers adopted what runs: every Machine gets its node back and no new machine is \
         created (`kubectl get machines -A -o wide` until every row has a NODENAME; `clusterctl describe cluster \
         <name> -n <namespace>` for each cluster). Only the Machines `restore check` said to delete are replaced."
            .into(),
    );
    step(
        &mut md,
        format!(
            "Move to the permanent management cluster: {init_code} there (same releases), hold its bootstrap \
             provider, CAPV{} as above (`--kubeconfig permanent.kubeconfig`), pause every TalosControlPlane here so the \
             move carries the pause ({}), `clusterctl move --to-kubeconfig permanent.kubeconfig`, set \
             `status.bootstrapped` on every TalosControlPlane there as above, then let them reconcile as above \
             (`--kubeconfig permanent.kubeconfig`).",
            if ipam { ", the IPAM provider" } else { "" },
            pause_live("")
        ),
    );
    step(
        &mut md,
        "Hand the clusters back to Argo CD: register the permanent cluster, put the repo-server's age identity back \
         (secrets mode `decrypt`; see Keys), turn automated sync on again; the rendered objects exist already and \
         are adopted (server-side apply), and `capstan diff` against the repository shows nothing to create."
            .into(),
    );
    step(
        &mut md,
        format!(
            "Delete the temporary cluster (`kind delete cluster --name capstan-restore`) and take a new backup from \
             the permanent cluster (every phase; each namespace):\n\n   ```sh\n{}   ```\n\n   then `capstan backup check`.",
            backup_recipe.lines().map(|l| format!("   {l}\n")).collect::<String>()
        ),
    );
    let _ = writeln!(
        md,
        "\n## Keys\n\n\
         - `dr-identity.txt`: an age identity the backup is encrypted to (its index lists the recipients: \
         `capstan backup list URL --json`); the offline DR key from escrow (the recipient marked `{}` in the \
         recipients file), or an operator's.\n\
         - `operator-identity.txt`: an identity of the clusters' `spec.recipients`, for the sealed Secrets.\n\
         - For secrets mode `decrypt`, the Argo CD repo-server's age identity: it lived in the lost management \
         cluster; take it from escrow, or generate a new one, add its recipient to `spec.recipients` and run \
         `capstan secrets rekey`.",
        custody::OFFLINE_MARK
    );
    let _ = writeln!(
        md,
        "\nWhy: the backup carries what the controllers created (Machines, VSphereMachines, TalosConfigs, IP address claims \
         and allocations); git carries what capstan renders. `clusterctl move` carries no status, and the \
         control-plane provider acts on a missing `status.bootstrapped`.\n"
    );
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: &str) -> ClusterConfig {
        let text = crate::model::tests::MINIMAL.replace("lab-f", name);
        crate::model::ClusterConfig::from_value("c.yaml", crate::yaml::parse_one(&text).unwrap())
            .unwrap()
    }

    #[test]
    fn the_runbook_stops_the_control_plane_provider_until_bootstrapped_is_back() {
        let md = runbook(
            &[config("lab-a"), config("lab-b")],
            true,
            "s3://b/mgmt",
            Some(("20261205T083000Z-1a2b3c4d", "2026-12-05T08:30:00Z")),
            None,
        );
        let at = |s: &str| md.find(s).unwrap_or_else(|| panic!("no {s} in {md}"));
        // D5: the old cluster is fenced, and confirmed, before anything is restored.
        let fence = at("kubectl --kubeconfig old.kubeconfig -n capv-system scale deployment");
        let confirm = at("old.kubeconfig get deploy -A");
        let kind = at("kind create cluster");
        let cabpt = at("-n cabpt-system patch deployment/cabpt-controller-manager");
        let capv = at("-n capv-system patch deployment/capv-controller-manager");
        let ipam = at("-n capi-ipam-in-cluster-system patch deployment/capi-ipam-in-cluster-controller-manager");
        let sealed = at("capstan secrets decrypt \"$f\" -i operator-identity.txt | kubectl annotate --local -f - sopssecret/managed=true -o yaml | kubectl apply -f -");
        let pull = at("capstan backup pull");
        let paused = at("for f in restore/TalosControlPlane_*.yaml; do kubectl annotate --local -f \"$f\" cluster.x-k8s.io/paused=true");
        let restore = at("clusterctl move --from-directory restore");
        let status = at("-n lab-b patch taloscontrolplanes");
        // D8: the inventory is reconciled before CAPV and IPAM act, then the control planes go.
        let check = at("capstan restore check restore");
        let unhold = at("(delete the `--watch-filter=capstan-restore-hold` argument)");
        let unpause = at("-n lab-b annotate taloscontrolplanes.controlplane.cluster.x-k8s.io lab-b-cp cluster.x-k8s.io/paused-");
        let order = [
            fence, confirm, kind, cabpt, capv, ipam, sealed, pull, paused, restore, status, check,
            unhold, unpause,
        ];
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}\n{md}");
        // [A36]: no provider of the temporary cluster is at 0 replicas when `--from-directory`
        // creates the objects whose webhooks it serves.
        let before = &md[..restore];
        let stopped: Vec<&str> = PROVIDERS
            .iter()
            .filter(|(ns, p)| {
                before.contains(&format!(
                    "`kubectl -n {ns} scale deployment -l cluster.x-k8s.io/provider={p} --replicas=0"
                ))
            })
            .map(|(_, p)| *p)
            .collect();
        let kinds = [
            "Cluster",
            "TalosControlPlane",
            "TalosConfig",
            "Machine",
            "VSphereMachine",
            "VSphereVM",
            "InClusterIPPool",
            "IPAddressClaim",
            "IPAddress",
        ];
        assert_eq!(
            crate::rehearse::clusterctl::refused_creates(&kinds, &stopped),
            Vec::<String>::new(),
            "{md}"
        );
        // The runbook of main before this, which scaled both Talos providers to 0, is refused.
        assert_eq!(
            crate::rehearse::clusterctl::refused_creates(
                &kinds,
                &["bootstrap-talos", "control-plane-talos"]
            ),
            [
                "TalosControlPlane: control-plane-talos",
                "TalosConfig: bootstrap-talos"
            ]
        );
        // The permanent cluster: the pause is carried by the move.
        let pause_here = at("-n lab-b annotate taloscontrolplanes.controlplane.cluster.x-k8s.io lab-b-cp cluster.x-k8s.io/paused=true --overwrite");
        let to_kubeconfig = at("clusterctl move --to-kubeconfig permanent.kubeconfig");
        assert!(unpause < pause_here && pause_here < to_kubeconfig, "{md}");
        assert!(
            md.contains("## Keys") && md.contains("dr-identity.txt") && md.contains("repo-server")
        );
        assert!(md.contains("--ipam in-cluster:"), "{md}");
        assert!(md.contains("capstan backup pull s3://b/mgmt/20261205T083000Z-1a2b3c4d restore"));
        // A backup in every phase: per namespace, with the dump for the phases clusterctl
        // refuses.
        for ns in ["lab-a", "lab-b"] {
            assert!(
                md.contains(&format!("kubectl get -n {ns} clusters.cluster.x-k8s.io,")),
                "{md}"
            );
        }
        assert!(md.contains("| capstan backup dump - --to dump"), "{md}");
        let none = runbook(&[config("lab-a")], false, "s3://b/mgmt", None, None);
        assert!(none.contains("## No backup under `s3://b/mgmt`"), "{none}");
        // D7: no dead end through phase prepare; the truth per phase, and what to do.
        assert!(!none.contains("back to phase `prepare`"), "{none}");
        assert!(none.contains("no supported procedure"), "{none}");
        assert!(
            none.contains("kubectl get -n lab-a clusters.cluster.x-k8s.io,"),
            "{none}"
        );
        assert!(!none.contains("--ipam"));
    }
}
