//! Whether a `check` report can mean "ready": before the Talos
//! control plane joins, a report with comparisons "not checked" proves nothing, so the
//! `check-inputs` finding blocks until every input was given, and prints the full command.

use super::{Cx, Finding, Severity};
use crate::model::{ClusterConfig, Phase};

/// One input of `capstan check`: its flag, the file name the full command uses when it was
/// not given, and where the operator gets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckInput {
    /// The flag, e.g. `--nodes`.
    pub flag: &'static str,
    /// The placeholder file name in the printed command.
    pub placeholder: &'static str,
    /// Where it comes from.
    pub source: &'static str,
}

/// Every input `check` needs before a Talos node joins, in command order.
pub const INPUTS: &[CheckInput] = &[
    CheckInput {
        flag: "--apiserver-manifest",
        placeholder: "kube-apiserver.yaml",
        source: "/etc/kubernetes/manifests/kube-apiserver.yaml on a kubeadm control-plane node",
    },
    CheckInput {
        flag: "--controller-manager-manifest",
        placeholder: "kube-controller-manager.yaml",
        source: "/etc/kubernetes/manifests/kube-controller-manager.yaml on a kubeadm control-plane node",
    },
    CheckInput {
        flag: "--scheduler-manifest",
        placeholder: "kube-scheduler.yaml",
        source: "/etc/kubernetes/manifests/kube-scheduler.yaml on a kubeadm control-plane node",
    },
    CheckInput {
        flag: "--kubeadm-config",
        placeholder: "kubeadm-config.yaml",
        source: "`kubectl -n kube-system get cm kubeadm-config -o yaml`",
    },
    CheckInput {
        flag: "--encryption-config",
        placeholder: "encryption-config.yaml",
        source: "the file the kubeadm apiserver's `--encryption-provider-config` names",
    },
    CheckInput {
        flag: "--pki",
        placeholder: "pki",
        source: "/etc/kubernetes/pki of a kubeadm control-plane node",
    },
    CheckInput {
        flag: "--apiserver-cert",
        placeholder: "pki/apiserver.crt",
        source: "/etc/kubernetes/pki/apiserver.crt",
    },
    CheckInput {
        flag: "--kube-proxy",
        placeholder: "kube-proxy.yaml",
        source: "`kubectl -n kube-system get ds kube-proxy -o yaml`",
    },
    CheckInput {
        flag: "--kubelet-config",
        placeholder: "kubelet-config.yaml",
        source: "`kubectl -n kube-system get cm kubelet-config -o yaml`",
    },
    CheckInput {
        flag: "--etcd-status",
        placeholder: "etcd-status.json",
        source: "`etcdctl endpoint status --cluster -w json` on a kubeadm control-plane node",
    },
    CheckInput {
        flag: "--etcd-snapshot",
        placeholder: "etcd-snapshot.db",
        source: "`etcdctl snapshot save` inside a kubeadm node's etcd Pod, copied off the node (README procedure \"Take an etcd snapshot before phase control-plane\"; phase `control-plane` only)",
    },
    CheckInput {
        flag: "--cni-daemonset",
        placeholder: "cni.yaml",
        source: "the CNI's DaemonSet and ConfigMap, e.g. `kubectl -n kube-system get ds/cilium cm/cilium-config -o yaml`",
    },
    CheckInput {
        flag: "--nodes",
        placeholder: "nodes.yaml",
        source: "`kubectl get nodes -o yaml`",
    },
    CheckInput {
        flag: "--providers",
        placeholder: "providers.yaml",
        source: "`kubectl get providers.clusterctl.cluster.x-k8s.io -A -o yaml` on the management cluster",
    },
    CheckInput {
        flag: "--identity",
        placeholder: "age-identity.txt",
        source: "an age identity of one of `spec.recipients`",
    },
];

/// The full `capstan check` command for `cluster_dir`, with every input flag the cluster
/// needs (`skip` says which it does not): the file named where `given` has one, the
/// placeholder otherwise.
pub fn full_command(
    config: &ClusterConfig,
    cluster_dir: &str,
    given: impl Fn(&str) -> Option<String>,
    skip: impl Fn(&str) -> bool,
) -> String {
    let mut cmd = format!("capstan check {cluster_dir}");
    for i in INPUTS
        .iter()
        .filter(|i| !skip(i.flag) && !not_needed_by(config, i.flag))
    {
        let file = given(i.flag).unwrap_or_else(|| i.placeholder.to_string());
        cmd.push_str(&format!(" {} {file}", i.flag));
    }
    cmd
}

/// Inputs `cluster.yaml` alone says the cluster does not need: the kube-proxy DaemonSet
/// when the cluster runs none; the etcd snapshot outside phase `control-plane` (it is taken
/// right before that phase is synced, and is its safety net).
fn not_needed_by(config: &ClusterConfig, flag: &str) -> bool {
    match flag {
        "--kube-proxy" => config.spec.kube_proxy.disabled,
        "--etcd-snapshot" => {
            config.spec.migration.as_ref().map(|m| m.phase) != Some(Phase::ControlPlane)
        }
        _ => false,
    }
}

impl Cx<'_> {
    /// The file given for an input flag, if any.
    fn given(&self, flag: &str) -> Option<String> {
        let i = self.i;
        match flag {
            "--apiserver-manifest" => i.apiserver.as_ref().map(|x| x.file.clone()),
            "--controller-manager-manifest" => {
                i.controller_manager.as_ref().map(|x| x.file.clone())
            }
            "--scheduler-manifest" => i.scheduler.as_ref().map(|x| x.file.clone()),
            "--kubeadm-config" => i.cluster_config.as_ref().map(|x| x.file.clone()),
            "--encryption-config" => i.encryption.as_ref().map(|x| x.file.clone()),
            "--pki" => i
                .pki_dir
                .clone()
                .or_else(|| i.cas.as_ref().map(|_| "pki".into())),
            "--apiserver-cert" => i.apiserver_cert.as_ref().map(|x| x.file.clone()),
            "--kube-proxy" => i.kube_proxy.as_ref().map(|x| x.file.clone()),
            "--nodes" => i.nodes.as_ref().map(|x| x.file.clone()),
            "--cni-daemonset" => i.cni.as_ref().map(|x| x.file.clone()),
            "--etcd-status" => i.etcd_status.as_ref().map(|x| x.file.clone()),
            "--etcd-snapshot" => i.etcd_snapshot.as_ref().map(|x| x.file.clone()),
            "--kubelet-config" => i.kubelet.as_ref().map(|x| x.file.clone()),
            "--providers" => i.providers.as_ref().map(|x| x.file.clone()),
            "--identity" => i
                .identity_file
                .clone()
                .or_else(|| i.bundle.as_ref().map(|_| "age-identity.txt".into())),
            _ => None,
        }
    }

    /// Inputs not needed for this cluster: the EncryptionConfiguration when the kubeadm
    /// apiserver (read) encrypts nothing; the kube-proxy DaemonSet when the cluster runs none.
    fn not_needed(&self, flag: &str) -> bool {
        match flag {
            "--encryption-config" => self
                .i
                .apiserver
                .as_ref()
                .is_some_and(|a| a.value.encryption_provider_config().is_none()),
            _ => not_needed_by(&self.i.config, flag),
        }
    }

    /// `check-inputs`: before the Talos control plane joins (phases `prepare` and
    /// `control-plane`), every input must be given, or the report is not a readiness proof.
    pub(super) fn check_inputs(&self, out: &mut Vec<Finding>) {
        let id = "check-inputs";
        let missing: Vec<&CheckInput> = INPUTS
            .iter()
            .filter(|i| self.given(i.flag).is_none() && !self.not_needed(i.flag))
            .collect();
        let dir = self.cluster_dir();
        let phase = self.i.config.spec.migration.as_ref().map(|m| m.phase);
        let joining = matches!(phase, Some(Phase::Prepare | Phase::ControlPlane));
        let field = "capstan check inputs";
        if missing.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Pass,
                field,
                "every input was given: the report compares everything capstan can compare".into(),
            ));
            return;
        }
        let flags: Vec<&str> = missing.iter().map(|i| i.flag).collect();
        let sources: Vec<String> = missing
            .iter()
            .map(|i| format!("{}: {}", i.placeholder, i.source))
            .collect();
        let command = full_command(
            &self.i.config,
            &dir,
            |f| self.given(f),
            |f| self.not_needed(f),
        );
        let fix = format!("run `{command}` ({})", sources.join("; "));
        if joining {
            let phase = phase.map_or("", Phase::as_str);
            out.push(
                Finding::new(
                    id,
                    Severity::Blocking,
                    field,
                    format!(
                        "phase `{phase}`: {} not given ({}), so the comparisons listed as not checked were not made: \
                         a report without them is no proof that the Talos control plane can join",
                        if flags.len() == 1 { "an input was" } else { "inputs were" },
                        flags.join(", ")
                    ),
                )
                .fix(fix),
            );
        } else {
            out.push(
                Finding::new(
                    id,
                    Severity::Info,
                    field,
                    format!(
                        "{} not given ({}): {}",
                        if flags.len() == 1 { "an input was" } else { "inputs were" },
                        flags.join(", "),
                        match phase {
                            Some(p) => format!(
                                "in phase `{}` the Talos control plane has joined, so this is not blocking",
                                p.as_str()
                            ),
                            None => "the cluster is not migrating, so this is not blocking".into(),
                        }
                    ),
                )
                .fix(fix),
            );
        }
    }
}
