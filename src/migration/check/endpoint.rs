//! The control-plane endpoint after the migration (`endpoint-strategy`): how the endpoint
//! follows the control-plane machines that every rollout replaces (provider review B7).
//!
//! What the strategies rest on:
//! - CACPPT v0.5.12 `controllers/upgrade.go:32-41`: a rollout scales up to replicas +
//!   `maxSurge` machines, then removes the oldest outdated one (`scale.go:172-184`), only
//!   once every node has booted, etcd is healthy and every machine has a nodeRef
//!   (`scale.go:63-110`), after the member leaves etcd (`scale.go:123`, `etcd.go:114-144`).
//! - cluster-api-ipam-provider-in-cluster `internal/poolutil/pool.go`: a claim gets the
//!   lowest free address of the pool, never the network, broadcast or gateway address; a
//!   deleted machine's claim frees its address (after `addressReuseGracePeriodSeconds` on
//!   releases that have it).
//! - Talos `internal/app/machined/pkg/controllers/network/operator/vip.go`: the VIP is an
//!   etcd election among the control-plane nodes (etcd running and healthy, 154-168); the
//!   holder drops the address when its etcd stops (358-371), but its election key lives
//!   until the session lease expires (60 s, 226-237) when it cannot revoke it (its own
//!   etcd is gone), so the next node announces the address up to 60 s later.
//! - Talos v1.10.6 `internal/app/machined/pkg/controllers/k8s/kubeprism_endpoints.go:44-79`:
//!   KubePrism, the API load balancer every Talos kubelet uses, takes as upstreams the
//!   endpoint, `localhost` on control-plane nodes, and the discovery members that run a
//!   control plane. Discovery defaults to the public service (`generate/generate.go:94-95`)
//!   and the Kubernetes registry is off for every contract above 1.1 (`generate/init.go:202-209`,
//!   `config/contract.go:109-111`): without a reachable discovery service the VIP is a
//!   worker's only upstream, and each failover cuts every Talos kubelet off the API (D3).

use std::net::IpAddr;

use super::machines::{registry_host, PUBLIC_REGISTRIES};
use super::{Cx, Finding, Severity};
use crate::model::{EndpointStrategy, Phase, PUBLIC_DISCOVERY_ENDPOINT};

/// The most a Talos VIP stays unannounced when the node holding it leaves etcd: the etcd
/// election session's lease (`concurrency.NewSession` default TTL), which the leaving node
/// cannot revoke.
pub const VIP_FAILOVER_SECONDS: u32 = 60;

/// The surge of capstan's control-plane rollouts (`rolloutStrategy.rollingUpdate.maxSurge`
/// in both flavours' TalosControlPlane): one machine more than the replicas at a time.
pub const CONTROL_PLANE_SURGE: u32 = 1;

fn in_cidrs(addr: IpAddr, cidrs: &[String]) -> Option<&String> {
    cidrs.iter().find(|c| {
        c.trim()
            .parse::<ipnet::IpNet>()
            .is_ok_and(|n| n.contains(&addr))
    })
}

impl Cx<'_> {
    pub(super) fn endpoint_strategy(&self, out: &mut Vec<Finding>) {
        let id = "endpoint-strategy";
        let s = &self.i.config.spec;
        let e = &s.endpoint;
        let phase = s.migration.as_ref().map(|m| m.phase);
        let replicas = s.control_plane.as_ref().map_or(0, |c| c.replicas);
        let needed = replicas + CONTROL_PLANE_SURGE;
        let choose = format!(
            "choose how the endpoint follows the machines: `strategy: vip` with `vip: {{address: <free address on the \
             control-plane segment>, link: <interface>}}` (Talos's shared IP), or `strategy: external` with \
             `controlPlanePool` holding exactly {needed} addresses (replicas + {CONTROL_PLANE_SURGE}) that the load \
             balancer lists as its backends; `capstan plan` gives the hand-over"
        );
        let cidrs: Vec<String> = s
            .network
            .pods
            .iter()
            .chain(s.network.services.iter())
            .cloned()
            .collect();
        // The settings themselves (what `render` refuses as invalid): each is blocking.
        let problems = e.problems();
        if !problems.is_empty() {
            for (field, message) in problems {
                out.push(Finding::new(id, Severity::Blocking, field, message).fix(choose.clone()));
            }
            return;
        }
        let Some(strategy) = e.strategy else {
            let after = matches!(phase, None | Some(Phase::Complete));
            out.push(
                Finding::new(
                    id,
                    if after { Severity::Blocking } else { Severity::Warning },
                    "spec.endpoint.strategy",
                    format!(
                        "no endpoint strategy{}: after the migration every control-plane rollout (a Talos or \
                         Kubernetes upgrade, any template or patch change) replaces the control-plane VMs, with new \
                         addresses; a load balancer that lists the old ones points only at deleted VMs after a full \
                         rollout, and the API at `{}` is down",
                        if after {
                            ""
                        } else {
                            " (required before phase `complete`)"
                        },
                        self.endpoint_url
                    ),
                )
                .fix(choose),
            );
            return;
        };
        match strategy {
            EndpointStrategy::Vip => self.vip_strategy(out, phase, replicas, &cidrs),
            EndpointStrategy::External => self.external_strategy(out, replicas, &cidrs),
        }
    }

    /// `endpoint-strategy` for `strategy: vip`: the VIP against the endpoint, the cluster's
    /// CIDRs, and the phase.
    fn vip_strategy(&self, out: &mut Vec<Finding>, phase: Option<Phase>, replicas: u32, cidrs: &[String]) {
        let id = "endpoint-strategy";
        let s = &self.i.config.spec;
        let e = &s.endpoint;
        let Some(vip) = &e.vip else { return };
        let Ok(addr) = vip.address.parse::<IpAddr>() else {
            return;
        };
        let migrating = !matches!(phase, None | Some(Phase::Complete));
        if let Ok(host) = e.host.parse::<IpAddr>() {
            if host == addr && migrating {
                out.push(
                    Finding::new(
                        id,
                        Severity::Blocking,
                        "spec.endpoint.vip.address vs spec.migration.phase",
                        format!(
                            "the VIP `{addr}` is the endpoint's address, which the load balancer holds during \
                             the migration: the Talos control-plane nodes would announce it too (a duplicate \
                             address on the segment) as soon as they run etcd"
                        ),
                    )
                    .fix(
                        "set the strategy in the commit that sets phase `complete`, after taking the address \
                         off the load balancer (`capstan plan` for phase complete), or use a DNS name for \
                         `host` and a free address for the VIP",
                    ),
                );
                return;
            }
            if host != addr {
                out.push(
                    Finding::new(
                        id,
                        Severity::Blocking,
                        "spec.endpoint.host vs spec.endpoint.vip.address",
                        format!(
                            "the endpoint is the address `{host}`, the VIP `{addr}`: clients and nodes would \
                             keep using an address nothing follows the machines to"
                        ),
                    )
                    .fix(format!(
                        "make `{addr}` the endpoint (`host: {addr}`, after the hand-over in `capstan plan`), \
                         or use a DNS name for `host` that resolves to it"
                    )),
                );
                return;
            }
        }
        if let Some(c) = in_cidrs(addr, cidrs) {
            out.push(
                Finding::new(
                    id,
                    Severity::Blocking,
                    "spec.endpoint.vip.address",
                    format!("the VIP `{addr}` is inside the cluster network `{c}`"),
                )
                .fix("choose a free address on the control-plane VMs' segment"),
            );
            return;
        }
        let network = s
            .vsphere
            .as_ref()
            .map_or("spec.vsphere.network".to_string(), |v| {
                format!("`{}`", v.network)
            });
        let rendered = if self.talos_at_least(12) {
            "a `Layer2VIPConfig` document, Talos 1.12 and later"
        } else {
            "`machine.network.interfaces[].vip`, up to Talos 1.11"
        };
        let now = if migrating {
            " now: the Talos control-plane nodes announce it as soon as they run etcd"
        } else {
            ""
        };
        let gap = format!(
            "when a replaced machine holding the VIP leaves etcd, the next node announces the address up to \
             {VIP_FAILOVER_SECONDS} s later (Talos `vip.go`: the election lease cannot be revoked without the \
             node's etcd), up to once per machine replaced ({replicas} per rollout)"
        );
        match &s.talos.discovery {
            Some(d) => out.push(Finding::new(
                id,
                Severity::Info,
                "spec.endpoint.strategy",
                format!(
                    "Talos VIP `{addr}` on `{}` of the control-plane nodes (rendered as {rendered}): they must \
                     share one L2 segment (every control-plane VM is on port group {network}) and the address \
                     must be free on it{now}; confirm that the port group's security policy (forged transmits, \
                     MAC address changes) and, on an NSX segment, SpoofGuard and IP discovery let the address \
                     move between the VMs by gratuitous ARP (not verified by capstan). A rollout keeps the \
                     endpoint but not without gaps: {gap}. Talos kubelets reach the API through KubePrism, \
                     which also uses the control-plane nodes' own addresses learnt from the discovery service \
                     `{}` while the machines reach it; kubectl, CI and the management cluster see the gap. \
                     Where that is too long, use `strategy: external`",
                    vip.link, d.endpoint
                ),
            )),
            None => {
                // A warning, not a refusal: capstan cannot see whether the machines
                // reach the public service (a proxy, a firewall rule), and every
                // blocking finding on cluster.yaml alone is also a `render` refusal.
                // Registry mirrors or a private Job image say the fleet is air-gapped.
                let job = s.migration.as_ref().and_then(|m| m.job_image.as_deref());
                let evidence = if !s.talos.registry_mirrors.is_empty() {
                    Some("cluster.yaml names registry mirrors (spec.talos.registryMirrors)".to_string())
                } else {
                    job.map(registry_host)
                        .filter(|h| !PUBLIC_REGISTRIES.contains(h))
                        .map(|h| format!("the Job image comes from `{h}`, a registry of the fleet's own"))
                };
                out.push(
                    Finding::new(
                        id,
                        Severity::Warning,
                        "spec.endpoint.strategy vs spec.talos.discovery",
                        format!(
                            "Talos VIP `{addr}` without a discovery service of the fleet's own{}: KubePrism, \
                             which every Talos kubelet uses to reach the API, learns the control-plane \
                             nodes' addresses only from discovery, and Talos's default is the public \
                             {PUBLIC_DISCOVERY_ENDPOINT}; where the machines cannot reach it, the VIP is a \
                             worker's only upstream. Each failover ({gap}) then cuts every Talos kubelet \
                             off the API, and past the node-monitor grace period (40 s by default in Kubernetes 1.30) the node \
                             controller marks the pods of every Talos node NotReady and Services drop them \
                             cluster-wide until the kubelets report again",
                            evidence.map_or(String::new(), |e| format!(" in an air-gapped fleet ({e})"))
                        ),
                    )
                    .fix(format!(
                        "name a discovery service the machines reach: `spec.talos.discovery: {{endpoint: \
                         https://discovery.example.internal/}}` (a self-hosted Talos discovery service), or \
                         `endpoint: {PUBLIC_DISCOVERY_ENDPOINT}` to say they reach the public one; or use \
                         `strategy: external` with a load balancer. The VIP also needs one L2 segment \
                         ({network}) with the address free on it: confirm vSphere port security (forged \
                         transmits, MAC address changes) and NSX SpoofGuard and IP discovery let it move \
                         between the VMs"
                    )),
                );
            }
        }
    }

    /// `endpoint-strategy` for `strategy: external`: the control-plane pool's size, its
    /// addresses against the cluster's CIDRs, and the load balancer's backends.
    fn external_strategy(&self, out: &mut Vec<Finding>, replicas: u32, cidrs: &[String]) {
        let id = "endpoint-strategy";
        let s = &self.i.config.spec;
        let e = &s.endpoint;
        let needed = replicas + CONTROL_PLANE_SURGE;
        let Some(pool) = &e.control_plane_pool else {
            return;
        };
        let Ok(addrs) = pool.allocatable() else {
            return;
        };
        let field = "spec.endpoint.controlPlanePool";
        let listed = addrs
            .iter()
            .map(|a| format!("`{a}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut problems = Vec::new();
        if let Ok(host) = e.host.parse::<IpAddr>() {
            if addrs.contains(&host) {
                problems.push(format!(
                    "the endpoint `{host}` is one of the pool's addresses: a machine would take the load \
                     balancer's address"
                ));
            }
        }
        if let Some((a, c)) = addrs
            .iter()
            .find_map(|a| in_cidrs(*a, cidrs).map(|c| (a, c)))
        {
            problems.push(format!("`{a}` is inside the cluster network `{c}`"));
        }
        if let (Ok(gw), Some(first)) = (pool.gateway.parse::<IpAddr>(), addrs.first()) {
            let subnet = ipnet::IpNet::new(*first, pool.prefix)
                .map(|n| n.trunc())
                .ok();
            if !subnet.is_some_and(|n| n.contains(&gw)) {
                problems.push(format!(
                    "the gateway `{gw}` is outside the machines' subnet `{first}/{}`",
                    pool.prefix
                ));
            }
        }
        if (addrs.len() as u64) < u64::from(needed) {
            problems.push(format!(
                "it hands out {} address{} ({listed}; never the network, broadcast or gateway address), a \
                 rollout needs {needed} (replicas {replicas} + surge {CONTROL_PLANE_SURGE}): the surge \
                 machine's address claim waits for an address and the rollout stalls",
                addrs.len(),
                if addrs.len() == 1 { "" } else { "es" }
            ));
        }
        if !problems.is_empty() {
            for p in problems {
                out.push(
                    Finding::new(id, Severity::Blocking, field, format!("control-plane pool: {p}"))
                        .fix(format!(
                            "give the pool exactly {needed} free addresses on the control-plane segment, \
                             outside the cluster network, and list them as the load balancer's backends"
                        )),
                );
            }
            return;
        }
        if addrs.len() as u64 > u64::from(needed) {
            out.push(
                Finding::new(
                    id,
                    Severity::Warning,
                    field,
                    format!(
                        "control-plane pool: {} addresses ({listed}) where a rollout needs {needed}: the \
                         load balancer must list all of them, and addresses it lists stay unused",
                        addrs.len()
                    ),
                )
                .fix(format!("keep exactly {needed} addresses (replicas + {CONTROL_PLANE_SURGE})")),
            );
            return;
        }
        out.push(Finding::new(
            id,
            Severity::Pass,
            field,
            format!(
                "the load balancer's backends are the pool's {needed} addresses ({listed}), each with a TCP \
                 health check on port {} (an HTTP check of `/healthz` gets 401 from a Talos apiserver without `anonymous-auth`): every control-plane \
                 machine takes one, a rollout's surge machine the free one, and a replaced machine's address \
                 is handed out again",
                e.backend_port()
            ),
        ));
    }
}
