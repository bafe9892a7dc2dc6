//! `capstan restore plan`: the runbook that rebuilds a lost management cluster and has the
//! providers adopt the running workload clusters instead of creating new machines.
//!
//! It rests on what `clusterctl move` does (cluster-api `cmd/clusterctl/client/cluster/
//! mover.go`): `--to-directory` saves the objects while their Clusters are paused;
//! `--from-directory` creates them group by group, without status, and then unpauses every
//! Cluster. A TalosControlPlane restored without `status.bootstrapped` would have its
//! provider send the Talos bootstrap RPC to a machine, which starts a second, empty etcd;
//! so the control-plane provider is stopped until every TalosControlPlane has its status
//! back, on the temporary cluster and again on the permanent one. Pure: names in, Markdown
//! out.

use crate::inputs::model::ClusterConfig;
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
            .map_or(crate::inputs::model::Flavour::V1beta1, |c| c.spec.flavour);
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
pub const KIND_CONFIG: &str = "kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
name: capstan-restore
nodes:
- role: control-plane
";

/// Stop the Talos control-plane provider (`clusterctl init` installs it in `cacppt-system`
/// and labels it with its provider name; `kubectl scale` takes a selector, not `-A`).
const STOP_CACPPT: &str =
    "kubectl -n cacppt-system scale deployment -l cluster.x-k8s.io/provider=control-plane-talos --replicas=0";

/// The restore runbook for the clusters of a repository (`configs`, `ipam` when any uses
/// an IPAM pool), from backup `backup` under `url`, or the path without a backup.
pub fn runbook(
    configs: &[ClusterConfig],
    ipam: bool,
    url: &str,
    backup: Option<(&str, &str)>,
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
    let push_code = md_code(&format!("capstan backup push DIR {url} -R recipients.txt"));
    let Some((id, created)) = backup else {
        let _ = writeln!(
            md,
            "## No backup under {url_code}\n\n\
             Without the Machines, IP allocations and `status.bootstrapped` that only a backup holds, the providers \
             cannot adopt the running clusters: rendered from git alone they would create new machines, hand out \
             addresses running nodes use, and a control plane without `status.bootstrapped` can bootstrap a second \
             etcd. Do not apply the repository to a new management cluster as it is.\n\n\
             1. Build a new management cluster (a kind cluster below, or a permanent one) and {init_code}.\n\
             2. For each cluster, treat its running Talos nodes as a migration treats kubeadm nodes: set \
             `spec.migration` back to phase `prepare` (control-plane replicas 0, the guard policy and the Job that \
             sets `status.bootstrapped`), render and apply it, and follow `capstan plan` through phases \
             `control-plane` and `workers`: new machines join the running etcd, and the old nodes are removed one \
             at a time with the plan's procedures.\n\
             3. Take a backup as soon as the clusters are managed again: `clusterctl move --to-directory DIR` and \
             {push_code}, then `capstan backup check`.\n"
        );
        return md;
    };
    let _ = writeln!(
        md,
        "From backup {} ({}) under {url_code}. Every step is run by an operator who holds the DR \
         identity; the restored objects include the clusters' CA keys and kubeconfigs.\n",
        md_code(id),
        md_text(created)
    );
    let steps: Vec<String> = vec![
        "If Argo CD still runs somewhere and targets the management cluster, turn off automated sync of the \
         cluster Applications until the last step: it would create the rendered objects (without their \
         Machines) in the new cluster."
            .into(),
        format!(
            "Create the temporary cluster: save\n\n   ```yaml\n{}   ```\n\n   as `kind-restore.yaml` and run `kind create cluster --config kind-restore.yaml`.",
            KIND_CONFIG.lines().map(|l| format!("   {l}\n")).collect::<String>()
        ),
        format!(
            "Install the providers the lost cluster ran: {init_code}, then `kubectl wait --for=condition=Available deployment --all -A --timeout=10m`."
        ),
        format!(
            "Stop the Talos control-plane provider: `{STOP_CACPPT}` (if `clusterctl init` put it elsewhere: \
             `kubectl get deployment -A -l cluster.x-k8s.io/provider=control-plane-talos`). \
             `clusterctl move --from-directory` unpauses \
             every Cluster when it is done, and the provider must not see a TalosControlPlane before its \
             `status.bootstrapped` is back."
        ),
        format!(
            "Fetch the backup: {} (checked against its \
             index and manifest: a corrupt or truncated backup is refused; files mode 0600).",
            md_code(&format!("capstan backup pull {url}/{id} restore -i dr-identity.txt"))
        ),
        "Restore the objects: `clusterctl move --from-directory restore`, then remove the plaintext: `rm -rf restore`."
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
        "Start the control-plane provider again: `kubectl -n cacppt-system scale deployment -l \
         cluster.x-k8s.io/provider=control-plane-talos --replicas=1`."
            .into(),
    );
    step(
        &mut md,
        "Check that the providers adopted what runs: every Machine gets its node back and no new machine is \
         created (`kubectl get machines -A -o wide` until every row has a NODENAME; `clusterctl describe cluster \
         <name> -n <namespace>` for each cluster). A Machine whose VM is gone is replaced by its controller: \
         that is the only machine that may be created."
            .into(),
    );
    step(
        &mut md,
        format!(
            "Move to the permanent management cluster: {init_code} there (same releases), stop its control-plane \
             provider (`{STOP_CACPPT}` with its kubeconfig), `clusterctl move --to-kubeconfig permanent.kubeconfig`, \
             set `status.bootstrapped` on every TalosControlPlane there as above, then start the provider."
        ),
    );
    step(
        &mut md,
        "Hand the clusters back to Argo CD: register the permanent cluster, turn automated sync on again; the \
         rendered objects exist already and are adopted (server-side apply), and `capstan diff` against the \
         repository shows nothing to create."
            .into(),
    );
    step(
        &mut md,
        format!(
            "Delete the temporary cluster (`kind delete cluster --name capstan-restore`) and take a new backup from \
             the permanent cluster: `clusterctl move --to-directory DIR`, {push_code}, `capstan backup check`."
        ),
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
        let text = crate::inputs::model::tests::MINIMAL.replace("lab-f", name);
        crate::inputs::model::ClusterConfig::from_value(
            "c.yaml",
            crate::yaml::parse_one(&text).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn the_runbook_stops_the_control_plane_provider_until_bootstrapped_is_back() {
        let md = runbook(
            &[config("lab-a"), config("lab-b")],
            true,
            "s3://b/mgmt",
            Some(("20261205T083000Z-1a2b3c4d", "2026-12-05T08:30:00Z")),
        );
        let stop = md.find("--replicas=0").unwrap();
        let restore = md.find("clusterctl move --from-directory restore").unwrap();
        let status = md.find("-n lab-b patch taloscontrolplanes").unwrap();
        let start = md.find("--replicas=1").unwrap();
        assert!(stop < restore && restore < status && status < start, "{md}");
        assert!(md.contains("--ipam in-cluster:"), "{md}");
        assert!(md.contains("capstan backup pull s3://b/mgmt/20261205T083000Z-1a2b3c4d restore"));
        let none = runbook(&[config("lab-a")], false, "s3://b/mgmt", None);
        assert!(none.contains("## No backup under `s3://b/mgmt`"), "{none}");
        assert!(!none.contains("--ipam"));
    }
}
