//! The cluster's network identity: pod and service CIDRs, DNS domain, the endpoint and the
//! name in the kubeadm apiserver certificate.

use super::*;

fn compare_cidrs(
    id: &'static str,
    field: &str,
    mine: &[String],
    theirs: &[String],
    what: &str,
) -> Finding {
    if same_cidrs(mine, theirs) {
        Finding::new(
            id,
            Severity::Pass,
            field,
            format!("both use {}", list(mine)),
        )
    } else {
        Finding::new(
            id,
            Severity::Blocking,
            field,
            format!(
                "kubeadm uses {}, the Talos nodes would use {}: {what} addresses from the two sides would \
                 overlap or not route",
                list(theirs),
                list(mine)
            ),
        )
        .fix(format!(
            "set spec.network.{} to {}",
            if what == "pod" { "pods" } else { "services" },
            list(theirs)
        ))
    }
}

fn same_cidrs(a: &[String], b: &[String]) -> bool {
    let norm = |v: &[String]| -> Vec<String> {
        v.iter()
            .map(|c| match c.trim().parse::<ipnet::IpNet>() {
                Ok(n) => n.to_string(),
                Err(_) => c.trim().to_string(),
            })
            .collect()
    };
    norm(a) == norm(b)
}

impl Cx<'_> {
    pub(super) fn network(&self, out: &mut Vec<Finding>) {
        let n = &self.i.config.spec.network;
        let cc = self.i.cluster_config.as_ref();
        // pod-cidr
        match cc {
            Some(c) if !c.value.pod_subnets.is_empty() => {
                out.push(compare_cidrs(
                    "pod-cidr",
                    &format!("spec.network.pods vs {} networking.podSubnet", c.file),
                    &n.pods,
                    &c.value.pod_subnets,
                    "pod",
                ));
            }
            Some(c) => out.push(
                Finding::new(
                    "pod-cidr",
                    Severity::Warning,
                    format!("spec.network.pods vs {} networking.podSubnet", c.file),
                    format!(
                        "{} sets no podSubnet; cluster.yaml says {}: check the CNI's pod CIDR by hand",
                        c.file,
                        list(&n.pods)
                    ),
                )
                .fix("compare spec.network.pods with the CNI's configured pod CIDR (e.g. the Calico IPPool or Cilium clusterPoolIPv4PodCIDRList)"),
            ),
            None => out.push(not_compared("pod-cidr", "spec.network.pods", &list(&n.pods), "--kubeadm-config")),
        }
        // service-cidr
        let mut compared = false;
        if let Some(c) = cc {
            if !c.value.service_subnets.is_empty() {
                compared = true;
                out.push(compare_cidrs(
                    "service-cidr",
                    &format!(
                        "spec.network.services vs {} networking.serviceSubnet",
                        c.file
                    ),
                    &n.services,
                    &c.value.service_subnets,
                    "service",
                ));
            }
        }
        if let Some(a) = &self.i.apiserver {
            if let Some(r) = a.value.service_cluster_ip_range() {
                compared = true;
                let theirs: Vec<String> = r
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect();
                out.push(compare_cidrs(
                    "service-cidr",
                    &format!(
                        "spec.network.services vs {} --service-cluster-ip-range",
                        a.file
                    ),
                    &n.services,
                    &theirs,
                    "service",
                ));
            }
        }
        if !compared {
            out.push(not_compared(
                "service-cidr",
                "spec.network.services",
                &list(&n.services),
                "--kubeadm-config or --apiserver-manifest",
            ));
        }
        // dns-domain
        match cc {
            Some(c) => {
                let field = format!("spec.network.dnsDomain vs {} networking.dnsDomain", c.file);
                if c.value.dns_domain.eq_ignore_ascii_case(&n.dns_domain) {
                    out.push(Finding::new(
                        "dns-domain",
                        Severity::Pass,
                        field,
                        format!("both use `{}`", n.dns_domain),
                    ));
                } else {
                    out.push(
                        Finding::new(
                            "dns-domain",
                            Severity::Blocking,
                            field,
                            format!(
                                "kubeadm uses `{}`, the Talos kubelets would use `{}`: pods on Talos nodes would \
                                 resolve services under another domain (and the default issuer differs)",
                                c.value.dns_domain, n.dns_domain
                            ),
                        )
                        .fix(format!("set spec.network.dnsDomain to `{}`", c.value.dns_domain)),
                    );
                }
            }
            None => out.push(not_compared(
                "dns-domain",
                "spec.network.dnsDomain",
                &format!("`{}`", n.dns_domain),
                "--kubeadm-config",
            )),
        }
    }

    pub(super) fn endpoint(&self, out: &mut Vec<Finding>) {
        let e = &self.i.config.spec.endpoint;
        let id = "endpoint";
        let mine = format!("{}:{}", e.host, e.port);
        match &self.i.cluster_config {
            Some(c) => {
                let field = format!("spec.endpoint vs {} controlPlaneEndpoint", c.file);
                match &c.value.control_plane_endpoint {
                    None => out.push(
                        Finding::new(
                            id,
                            Severity::Blocking,
                            field,
                            format!(
                                "{} has no controlPlaneEndpoint: the kubeadm nodes talk to one apiserver directly, \
                                 so Talos nodes cannot join behind `{mine}` and take over",
                                c.file
                            ),
                        )
                        .fix("put a load balancer (or VIP) in front of the kubeadm apiservers and make it the kubeadm controlPlaneEndpoint first (new apiserver certificates with its name)"),
                    ),
                    Some(k) if k.host.eq_ignore_ascii_case(&e.host) && k.port == e.port => out.push(Finding::new(
                        id,
                        Severity::Pass,
                        field,
                        format!("both use `{k}`"),
                    )),
                    Some(k) => out.push(
                        Finding::new(
                            id,
                            Severity::Blocking,
                            field,
                            format!(
                                "kubeadm uses `{k}`, cluster.yaml `{mine}`: Talos nodes would join (and sign the \
                                 issuer URL) through another endpoint"
                            ),
                        )
                        .fix(format!("set spec.endpoint to host `{}`, port {}", k.host, k.port)),
                    ),
                }
            }
            None => out.push(not_compared(
                id,
                "spec.endpoint",
                &format!("`{mine}`"),
                "--kubeadm-config",
            )),
        }
    }

    pub(super) fn endpoint_certificate_san(&self, out: &mut Vec<Finding>) {
        let id = "endpoint-certificate-san";
        let host = &self.i.config.spec.endpoint.host;
        let Some(c) = &self.i.apiserver_cert else {
            out.push(not_compared(
                id,
                "spec.endpoint.host",
                &format!("`{host}`"),
                "--apiserver-cert",
            ));
            return;
        };
        let field = format!("spec.endpoint.host vs {} subjectAltName", c.file);
        let sans = c.value.sans();
        if c.value.covers_host(host) {
            out.push(Finding::new(
                id,
                Severity::Pass,
                field,
                format!("the kubeadm apiserver certificate covers `{host}`"),
            ));
        } else {
            out.push(
                Finding::new(
                    id,
                    Severity::Blocking,
                    field,
                    format!(
                        "the kubeadm apiserver certificate does not cover `{host}` (it lists {}): Talos nodes \
                         connecting through the endpoint would refuse it",
                        list(&sans)
                    ),
                )
                .error(errors::X509_NAME)
                .fix(format!(
                    "add `{host}` to kubeadm's apiServer.certSANs and renew the apiserver certificates \
                     (`kubeadm init phase certs apiserver` on each control-plane node), or correct spec.endpoint.host"
                )),
            );
        }
    }
}
