//! What kubeadm's own configuration says that the migration does not carry as such
//! (`kubeadm-bind-port`, `kubeadm-config`): the InitConfiguration's bind port, and the
//! ClusterConfiguration fields that change what the migration means (the table beside
//! `inputs::kubeadm::parse_cluster_configuration` says which are carried, refused or do not
//! matter, and why).

use super::{list, not_compared, Cx, Finding, Severity};
use crate::model::DEFAULT_BACKEND_PORT;

/// kubeadm's default `imageRepository` (kubernetes/kubernetes v1beta4 `types.go`,
/// ClusterConfiguration.ImageRepository), the registry Talos pulls the control plane from
/// (Talos v1.10.6 `pkg/machinery/constants/constants.go:404-416`).
pub const KUBERNETES_REGISTRY: &str = "registry.k8s.io";

impl Cx<'_> {
    /// D2 (issue 40 item 1): `InitConfiguration.localAPIEndpoint.bindPort` is the port
    /// `kubeadm init` gave the apiservers; Talos listens on spec.endpoint.backendPort
    /// (`cluster.controlPlane.localAPIServerPort`). Compared as the manifest's
    /// `--secure-port` is in `apiserver-uncarried`.
    pub(super) fn kubeadm_bind_port(&self, out: &mut Vec<Finding>) {
        let id = "kubeadm-bind-port";
        let Some(c) = &self.i.cluster_config else {
            out.push(not_compared(
                id,
                "spec.endpoint.backendPort",
                "kubeadm's InitConfiguration.localAPIEndpoint.bindPort",
                "--kubeadm-config (a file with the InitConfiguration)",
            ));
            return;
        };
        let e = &self.i.config.spec.endpoint;
        let field = format!(
            "spec.endpoint.backendPort vs {} InitConfiguration.localAPIEndpoint.bindPort",
            c.file
        );
        let Some(bind) = c.value.local_api_bind_port else {
            out.push(Finding::new(
                id,
                Severity::Info,
                field,
                format!(
                    "{} holds no InitConfiguration with `localAPIEndpoint.bindPort` (the kubeadm-config ConfigMap \
                     holds only the ClusterConfiguration; kubeadm's default is {DEFAULT_BACKEND_PORT}): the port the \
                     kubeadm apiservers listen on is compared from `--apiserver-manifest` (`apiserver-uncarried`)",
                    c.file
                ),
            ));
            return;
        };
        if bind == e.backend_port() {
            out.push(Finding::new(
                id,
                Severity::Pass,
                field,
                format!("kubeadm and Talos apiservers listen on port {bind}"),
            ));
            return;
        }
        out.push(
            Finding::new(
                id,
                Severity::Blocking,
                field,
                format!(
                    "kubeadm bound the apiservers to port {bind}, {}",
                    super::parity::backend_port_consequence(e)
                ),
            )
            .fix(format!(
                "{} (and check the running port with `--apiserver-manifest`)",
                super::parity::backend_port_fix(bind, e)
            )),
        );
    }

    /// D15 (issue 40 item 6): the ClusterConfiguration fields that change the migration's
    /// meaning and that no other finding compares.
    pub(super) fn kubeadm_config(&self, out: &mut Vec<Finding>) {
        let id = "kubeadm-config";
        let Some(c) = &self.i.cluster_config else {
            out.push(not_compared(
                id,
                "kubeadm's ClusterConfiguration",
                "imageRepository, add-ons, extra volumes and environment, etcd certificate names",
                "--kubeadm-config",
            ));
            return;
        };
        let x = &c.value.extras;
        let s = &self.i.config.spec;
        let before = out.len();
        if let Some(repo) = x
            .image_repository
            .as_deref()
            .filter(|r| r.trim_end_matches('/') != KUBERNETES_REGISTRY)
        {
            if !s.talos.registry_mirrors.contains_key(KUBERNETES_REGISTRY) {
                let host = repo.split('/').next().unwrap_or(repo);
                let path = repo.split_once('/').map_or("", |(_, p)| p);
                out.push(
                    Finding::new(
                        id,
                        Severity::Blocking,
                        format!("{} imageRepository vs spec.talos.registryMirrors", c.file),
                        format!(
                            "the kubeadm control plane pulls its images from `{repo}`, the Talos control plane pulls \
                             kube-apiserver, kube-controller-manager, kube-scheduler and kube-proxy from \
                             `{KUBERNETES_REGISTRY}` (Talos's defaults), and cluster.yaml names no mirror for it: where \
                             the nodes reach only `{host}`, no Talos control-plane component starts"
                        ),
                    )
                    .fix(format!(
                        "name the mirror: `spec.talos.registryMirrors: {{{KUBERNETES_REGISTRY}: \
                         [https://{host}/v2{}]}}` (the path is used as it is), or `{KUBERNETES_REGISTRY}: \
                         [https://{KUBERNETES_REGISTRY}]` to say the nodes reach it",
                        if path.is_empty() { String::new() } else { format!("/{path}") }
                    )),
                );
            }
        }
        if x.proxy_disabled && !s.kube_proxy.disabled {
            out.push(
                Finding::new(
                    id,
                    Severity::Blocking,
                    format!("{} proxy.disabled vs spec.kubeProxy.disabled", c.file),
                    "kubeadm installed no kube-proxy (`proxy.disabled: true`), Talos creates a kube-proxy DaemonSet \
                     when none exists: it starts on every node and programs Service rules beside whatever \
                     replaces kube-proxy in this cluster"
                        .into(),
                )
                .fix("set `spec.kubeProxy.disabled: true`"),
            );
        }
        if x.dns_disabled {
            out.push(
                Finding::new(
                    id,
                    Severity::Warning,
                    format!("{} dns.disabled", c.file),
                    "kubeadm installed no CoreDNS (`dns.disabled: true`); Talos applies its CoreDNS Deployment and \
                     `kube-dns` Service when they are missing, beside the cluster's own DNS"
                        .into(),
                )
                .fix(
                    "before phase control-plane, disable Talos's CoreDNS with a Talos patch overlay \
                     (`cluster.coreDNS.disabled: true`), or make sure the cluster's DNS runs as \
                     `kube-system/coredns` and `kube-system/kube-dns` so Talos finds them",
                ),
            );
        }
        carried_by_hand(id, &c.file, x, out);
        if out.len() == before {
            out.push(Finding::new(
                id,
                Severity::Pass,
                format!("{} ClusterConfiguration", c.file),
                "no image repository of its own, add-on switches, extra volumes, environment or etcd certificate \
                 names that the Talos control plane would run without"
                    .into(),
            ));
        }
    }
}

/// The ClusterConfiguration settings a Talos control plane runs without unless they are
/// carried by hand (a Talos patch overlay): host-path volumes, environment, etcd
/// certificate names, controller-manager and scheduler flags. Warnings: each may matter.
fn carried_by_hand(
    id: &'static str,
    file: &str,
    x: &crate::inputs::kubeadm::ClusterConfigExtras,
    out: &mut Vec<Finding>,
) {
    if !x.api_server_extra_volumes.is_empty() {
        out.push(
            Finding::new(
                id,
                Severity::Warning,
                format!("{} apiServer.extraVolumes", file),
                format!(
                    "the kubeadm apiservers mount host paths {}: the Talos control-plane nodes have none of \
                     these files, so every flag that reads one (an audit policy, a webhook's kubeconfig, an \
                     admission configuration) fails on a Talos apiserver",
                    list(&x.api_server_extra_volumes)
                ),
            )
            .fix(
                "carry each file with a Talos patch overlay (`machine.files` on the control-plane machines, \
                 `cluster.apiServer.extraVolumes` for the mount), or drop the flags that read them",
            ),
        );
    }
    if !x.extra_envs.is_empty() {
        out.push(
            Finding::new(
                id,
                Severity::Warning,
                format!("{} extraEnvs", file),
                format!(
                    "kubeadm runs components with environment variables {} (a proxy, GOMAXPROCS…); Talos runs \
                     them without",
                    list(&x.extra_envs)
                ),
            )
            .fix("carry them with a Talos patch overlay (`cluster.apiServer.env`), or confirm they are not needed"),
        );
    }
    if !x.etcd_cert_sans.is_empty() {
        out.push(
            Finding::new(
                id,
                Severity::Warning,
                format!("{} etcd.local.serverCertSANs/peerCertSANs", file),
                format!(
                    "the kubeadm etcd certificates carry extra names {}: a Talos member's certificate names only \
                     its node, so a client (backup, monitoring) that reaches etcd by one of these names fails \
                     TLS against every Talos member",
                    list(&x.etcd_cert_sans)
                ),
            )
            .fix("point those clients at the control-plane nodes' addresses before the kubeadm members are removed"),
        );
    }
    for (key, args) in [
        ("controllerManager", &x.controller_manager_extra_args),
        ("scheduler", &x.scheduler_extra_args),
    ] {
        if !args.is_empty() {
            let names: Vec<String> = args.iter().map(|(n, _)| format!("--{n}")).collect();
            out.push(
                Finding::new(
                    id,
                    Severity::Warning,
                    format!("{} {key}.extraArgs", file),
                    format!(
                        "kubeadm runs the {key} with {}; the Talos {key} runs Talos's flags, and during phase \
                         `control-plane` both share the leader lease, so behaviour flips with the leader",
                        list(&names)
                    ),
                )
                .fix(format!(
                    "compare the {key}'s static-pod manifest with what Talos runs and carry what matters \
                     (`cluster.{key}.extraArgs`)"
                )),
            );
        }
    }
}
