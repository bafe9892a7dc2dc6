//! `spec.endpoint`: the control-plane endpoint, and the strategy by which it follows the
//! control-plane machines that every rollout replaces: a Talos VIP, or a load balancer whose
//! backends are the control plane's own address pool (whose addresses are computed here as
//! the in-cluster IPAM provider hands them out).

use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// Host and port of the control-plane endpoint, and how it follows the control-plane
/// machines through every rollout after the migration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Endpoint {
    /// DNS name or IP of the API server load balancer.
    pub host: String,
    /// The port clients use (the load balancer's frontend, or the VIP's), usually 6443.
    pub port: u16,
    /// The port the apiservers listen on, behind the endpoint: Talos's
    /// `cluster.controlPlane.localAPIServerPort` (Talos v1.10.6
    /// `k8s/control_plane_static_pod.go:392` runs `--secure-port` from it, whatever the
    /// endpoint's port; `v1alpha1_clusterconfig.go:130-136` defaults it to 6443). Import
    /// writes the kubeadm apiserver's `--secure-port`; absent means 6443.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_port: Option<u16>,
    /// How the endpoint reaches the control-plane machines once Cluster API replaces them
    /// (required in phase `complete` and for a cluster not migrating).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<EndpointStrategy>,
    /// Strategy `vip`: Talos's shared virtual IP on the control-plane nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vip: Option<Vip>,
    /// Strategy `external`: the control-plane machines' own address pool, exactly the
    /// addresses a rollout needs; the load balancer's backends are these addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_pool: Option<AddressPool>,
}

/// How the control-plane endpoint follows the machines (`spec.endpoint.strategy`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum EndpointStrategy {
    /// Talos's shared virtual IP, held by one control-plane node at a time.
    Vip,
    /// A load balancer outside the cluster whose backends are the control-plane pool.
    External,
}

/// kube-apiserver's and Talos's default `--secure-port`.
pub const DEFAULT_BACKEND_PORT: u16 = 6443;

impl EndpointStrategy {
    /// The name used in `cluster.yaml`.
    pub fn as_str(self) -> &'static str {
        match self {
            EndpointStrategy::Vip => "vip",
            EndpointStrategy::External => "external",
        }
    }
}

/// Talos's Layer 2 shared IP (`machine.network.interfaces[].vip` up to Talos 1.11, the
/// `Layer2VIPConfig` document from 1.12).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Vip {
    /// The shared address, free on the control-plane nodes' segment.
    pub address: String,
    /// The control-plane nodes' interface the address goes on, as Talos names it
    /// (`talosctl -n <node> get links`).
    pub link: String,
}

/// A Cluster API in-cluster IPAM pool (`InClusterIPPool` spec fields).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AddressPool {
    /// Addresses: single addresses, ranges `a-b` or CIDRs.
    pub addresses: Vec<String>,
    /// The prefix length of the machines' subnet.
    pub prefix: u8,
    /// The machines' default gateway.
    pub gateway: String,
}

/// The most addresses [`AddressPool::allocatable`] lists (a control-plane pool holds a
/// handful).
pub const POOL_LISTED_MAX: usize = 256;

impl AddressPool {
    /// The pool as the IPAM provider reads an `InClusterIPPool` spec of these fields.
    pub fn ipam(&self) -> IpamPool {
        IpamPool {
            addresses: self.addresses.clone(),
            prefix: u32::from(self.prefix),
            gateway: self.gateway.clone(),
            excluded: Vec::new(),
            allocate_reserved: false,
        }
    }

    /// The addresses the in-cluster IPAM provider hands out from this pool, in the order it
    /// hands them out ([`IpamPool::allocatable`]).
    pub fn allocatable(&self) -> Result<Vec<IpAddr>, String> {
        self.ipam().allocatable()
    }

    /// Whether the provider can hand out `addr` from this pool ([`IpamPool::hands_out`]).
    #[cfg(any(test, feature = "testkit"))]
    pub fn hands_out(&self, addr: IpAddr) -> Result<bool, String> {
        self.ipam().hands_out(addr)
    }
}

/// An `InClusterIPPool` (or `GlobalInClusterIPPool`) spec as
/// cluster-api-ipam-provider-in-cluster reads it: its webhook's rules
/// (`internal/webhooks/inclusterippool.go`: one IP family, every entry inside the subnet
/// of the lowest address at `prefix`) and its allocator's (`internal/poolutil/pool.go`
/// `PoolSpecToIPSet`, `FindFreeAddress`: the entries, minus `excludedAddresses`, minus the
/// subnet's network address and, for IPv4, its broadcast address unless
/// `allocateReservedIPAddresses`, minus the gateway; the lowest free address first).
/// Entries are parsed as Go's `netip` does: no surrounding spaces.
#[derive(Debug, Clone, Default)]
pub struct IpamPool {
    /// `spec.addresses`: addresses, ranges `a-b`, CIDRs.
    pub addresses: Vec<String>,
    /// `spec.prefix`.
    pub prefix: u32,
    /// `spec.gateway` (may be empty).
    pub gateway: String,
    /// `spec.excludedAddresses`.
    pub excluded: Vec<String>,
    /// `spec.allocateReservedIPAddresses`.
    pub allocate_reserved: bool,
}

impl IpamPool {
    /// The addresses handed out, lowest first. `Err` names the field that the provider's
    /// webhook would refuse, or says the pool holds more than [`POOL_LISTED_MAX`].
    pub fn allocatable(&self) -> Result<Vec<IpAddr>, String> {
        let ranges = self.ranges()?;
        let mut set = std::collections::BTreeSet::new();
        for &(lo, hi) in &ranges.spans {
            let mut n = lo;
            loop {
                if !ranges.withheld(n) {
                    set.insert(n);
                    if set.len() > POOL_LISTED_MAX {
                        return Err(format!(
                            "addresses: more than {POOL_LISTED_MAX} addresses; a control-plane pool holds \
                             the replicas plus one"
                        ));
                    }
                }
                if n == hi {
                    break;
                }
                n += 1;
            }
        }
        Ok(set.into_iter().map(|n| ranges.addr(n)).collect())
    }

    /// Whether the provider can hand out `addr` (any size of pool).
    pub fn hands_out(&self, addr: IpAddr) -> Result<bool, String> {
        let ranges = self.ranges()?;
        if ranges.spans.is_empty() || addr.is_ipv4() != ranges.v4 {
            return Ok(false);
        }
        let n = to_u128(addr);
        Ok(ranges.spans.iter().any(|&(lo, hi)| lo <= n && n <= hi) && !ranges.withheld(n))
    }

    fn ranges(&self) -> Result<Ranges, String> {
        let (v4, spans) = parse_spans("addresses", &self.addresses)?;
        let (xv4, excluded) = parse_spans("excludedAddresses", &self.excluded)?;
        if !excluded.is_empty() && !spans.is_empty() && xv4 != v4 {
            return Err("excludedAddresses: another IP family than the addresses".into());
        }
        let bits: u32 = if v4 { 32 } else { 128 };
        if self.prefix > bits {
            return Err(format!(
                "prefix: {} is longer than an address ({bits} bits)",
                self.prefix
            ));
        }
        let host_bits = bits - self.prefix;
        let host_mask: u128 = if host_bits >= 128 {
            u128::MAX
        } else {
            (1u128 << host_bits) - 1
        };
        // The subnet of the lowest address, as the provider takes it.
        let network = spans.iter().map(|s| s.0).min().map(|lo| lo & !host_mask);
        if let Some(net) = network {
            for (i, &(lo, hi)) in spans.iter().enumerate() {
                if lo & !host_mask != net || hi & !host_mask != net {
                    return Err(format!(
                        "addresses[{i}]: `{}` is outside the subnet of the lowest address at prefix {} (the \
                         IPAM provider refuses a pool whose addresses span subnets)",
                        self.addresses[i], self.prefix
                    ));
                }
            }
        }
        let gateway = if self.gateway.is_empty() {
            None
        } else {
            let g: IpAddr = self.gateway.parse().map_err(|_| {
                format!("gateway: expected an IP address, found `{}`", self.gateway)
            })?;
            if !spans.is_empty() && g.is_ipv4() != v4 {
                return Err("gateway: another IP family than the addresses".into());
            }
            Some(to_u128(g))
        };
        let (network, broadcast) = if self.allocate_reserved {
            (None, None)
        } else {
            (network, network.filter(|_| v4).map(|n| n | host_mask))
        };
        Ok(Ranges {
            v4,
            spans,
            excluded,
            withheld: [network, broadcast, gateway]
                .into_iter()
                .flatten()
                .collect(),
        })
    }
}

/// The entries of `field` as numeric spans, and their IP family (IPv4 when empty).
fn parse_spans(field: &str, entries: &[String]) -> Result<(bool, Vec<(u128, u128)>), String> {
    let mut spans: Vec<(u128, u128)> = Vec::new();
    let mut families = Vec::new();
    for (i, a) in entries.iter().enumerate() {
        let bad =
            || format!("{field}[{i}]: expected an address, a range `a-b` or a CIDR, found `{a}`");
        let (lo, hi) = if let Some((x, y)) = a.split_once('-') {
            let x: IpAddr = x.parse().map_err(|_| bad())?;
            let y: IpAddr = y.parse().map_err(|_| bad())?;
            if x.is_ipv4() != y.is_ipv4() || to_u128(x) > to_u128(y) {
                return Err(format!(
                    "{field}[{i}]: `{a}` is not a range from low to high in one IP family"
                ));
            }
            (x, y)
        } else if a.contains('/') {
            let n: ipnet::IpNet = a.parse().map_err(|_| bad())?;
            (n.network(), n.broadcast())
        } else {
            let x: IpAddr = a.parse().map_err(|_| bad())?;
            (x, x)
        };
        families.push(lo.is_ipv4());
        spans.push((to_u128(lo), to_u128(hi)));
    }
    let v4 = families.first().copied().unwrap_or(true);
    if families.iter().any(|f| *f != v4) {
        return Err(format!("{field}: mixes IPv4 and IPv6"));
    }
    Ok((v4, spans))
}

fn to_u128(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v) => u128::from(u32::from(v)),
        IpAddr::V6(v) => u128::from(v),
    }
}

/// A pool's entries as numeric spans, and the addresses it never hands out.
struct Ranges {
    v4: bool,
    spans: Vec<(u128, u128)>,
    excluded: Vec<(u128, u128)>,
    withheld: Vec<u128>,
}

impl Ranges {
    fn withheld(&self, n: u128) -> bool {
        self.withheld.contains(&n) || self.excluded.iter().any(|&(lo, hi)| lo <= n && n <= hi)
    }

    fn addr(&self, n: u128) -> IpAddr {
        if self.v4 {
            // A span of an IPv4 pool holds IPv4 values only (< 2^32).
            IpAddr::V4(std::net::Ipv4Addr::from(
                u32::try_from(n).unwrap_or(u32::MAX),
            ))
        } else {
            IpAddr::V6(std::net::Ipv6Addr::from(n))
        }
    }
}

impl Endpoint {
    /// The port the apiservers listen on ([`Endpoint::backend_port`], else 6443).
    pub fn backend_port(&self) -> u16 {
        self.backend_port.unwrap_or(DEFAULT_BACKEND_PORT)
    }

    /// The VIP, when it is the chosen strategy's (settings of another strategy are a
    /// validation problem, never rendered).
    pub fn active_vip(&self) -> Option<&Vip> {
        self.vip
            .as_ref()
            .filter(|_| self.strategy == Some(EndpointStrategy::Vip))
    }

    /// The control-plane pool, when it is the chosen strategy's.
    pub fn active_pool(&self) -> Option<&AddressPool> {
        self.control_plane_pool
            .as_ref()
            .filter(|_| self.strategy == Some(EndpointStrategy::External))
    }

    /// `spec.endpoint.strategy` and the settings of that strategy (and no other's); what the settings
    /// mean against the rest of the cluster is `capstan check`'s (`endpoint-strategy`).
    /// Each problem is a field path and what was expected.
    pub fn problems(&self) -> Vec<(String, String)> {
        let e = self;
        let mut out: Vec<(String, String)> = Vec::new();
        let mut push = |path: &str, message: String| out.push((path.to_string(), message));
        let p = "spec.endpoint";
        let needs = |s: EndpointStrategy| e.strategy == Some(s);
        if e.backend_port == Some(0) {
            push(
                &format!("{p}.backendPort"),
                "must be 1 to 65535, got 0".into(),
            );
        }
        // D2: the VIP is an address on the apiserver nodes themselves, with nothing in front
        // that could map one port to another: clients reach the apiservers' own port.
        if needs(EndpointStrategy::Vip) && e.port != e.backend_port() {
            push(
                &format!("{p}.port"),
                format!(
                    "strategy `vip` puts the endpoint's address on the control-plane nodes, where the \
                     apiservers listen on spec.endpoint.backendPort {}: clients of port {} would reach \
                     nothing; set `port: {}` (and the clients' kubeconfigs), or use strategy `external` \
                     with a load balancer that forwards {} to {}",
                    e.backend_port(),
                    e.port,
                    e.backend_port(),
                    e.port,
                    e.backend_port()
                ),
            );
        }
        match (&e.vip, needs(EndpointStrategy::Vip)) {
            (None, true) => push(
                &format!("{p}.vip"),
                "strategy `vip` needs `vip: {address: <free address on the control-plane segment>, link: <interface>}`"
                    .into(),
            ),
            (Some(_), false) => push(
                &format!("{p}.vip"),
                format!(
                    "given, but spec.endpoint.strategy is {}: set `strategy: vip` or remove `vip`",
                    e.strategy.map_or("not set".into(), |s| format!("`{}`", s.as_str()))
                ),
            ),
            (Some(vip), true) => {
                if vip.address.parse::<std::net::IpAddr>().is_err() {
                    push(
                        &format!("{p}.vip.address"),
                        format!("expected an IP address, found `{}`", vip.address.escape_debug()),
                    );
                }
                // A Linux interface name: at most 15 bytes, no `/`, whitespace or `:`.
                let l = &vip.link;
                if l.is_empty()
                    || l.len() > 15
                    || l.bytes().any(|b| b == b'/' || b == b':' || !b.is_ascii_graphic())
                {
                    push(
                        &format!("{p}.vip.link"),
                        format!(
                            "expected the control-plane nodes' interface name as Talos shows it \
                             (`talosctl -n <node> get links`, e.g. `ens192`), found `{}`",
                            l.escape_debug()
                        ),
                    );
                }
            }
            (None, false) => {}
        }
        match (&e.control_plane_pool, needs(EndpointStrategy::External)) {
            (None, true) => push(
                &format!("{p}.controlPlanePool"),
                "strategy `external` needs `controlPlanePool: {addresses: [...], prefix: N, gateway: <address>}`: \
                 the load balancer's backends"
                    .into(),
            ),
            (Some(_), false) => push(
                &format!("{p}.controlPlanePool"),
                format!(
                    "given, but spec.endpoint.strategy is {}: set `strategy: external` or remove `controlPlanePool`",
                    e.strategy.map_or("not set".into(), |s| format!("`{}`", s.as_str()))
                ),
            ),
            (Some(pool), true) => {
                let pp = format!("{p}.controlPlanePool");
                if pool.addresses.is_empty() {
                    push(&format!("{pp}.addresses"), "at least one address is required".into());
                }
                if let Err(m) = pool.allocatable() {
                    let (field, m) = match m.split_once(": ") {
                        Some((f, rest)) if !f.contains(' ') => (format!("{pp}.{f}"), rest.to_string()),
                        _ => (pp.clone(), m),
                    };
                    push(&field, m);
                }
                if pool.gateway.parse::<std::net::IpAddr>().is_err() {
                    push(
                        &format!("{pp}.gateway"),
                        format!("expected an IP address, found `{}`", pool.gateway.escape_debug()),
                    );
                }
            }
            (None, false) => {}
        }
        out
    }

    /// The endpoint as Talos uses it: `https://host:port`.
    pub fn url(&self) -> String {
        if self.host.contains(':') && !self.host.starts_with('[') {
            format!("https://[{}]:{}", self.host, self.port)
        } else {
            format!("https://{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(addresses: &[&str], prefix: u8, gateway: &str) -> AddressPool {
        AddressPool {
            addresses: addresses.iter().map(|s| s.to_string()).collect(),
            prefix,
            gateway: gateway.into(),
        }
    }

    fn listed(p: &AddressPool) -> Vec<String> {
        p.allocatable()
            .unwrap()
            .iter()
            .map(|a| a.to_string())
            .collect()
    }

    #[test]
    fn a_vip_serves_on_the_apiservers_own_port() {
        let vip = |port: u16, backend: Option<u16>| Endpoint {
            host: "10.30.40.10".into(),
            port,
            backend_port: backend,
            strategy: Some(EndpointStrategy::Vip),
            vip: Some(Vip {
                address: "10.30.40.10".into(),
                link: "ens192".into(),
            }),
            control_plane_pool: None,
        };
        assert!(vip(6443, None).problems().is_empty());
        assert!(vip(443, Some(443)).problems().is_empty());
        let p = vip(443, None).problems();
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].0, "spec.endpoint.port");
        assert!(
            p[0].1.contains("backendPort 6443") && p[0].1.contains("clients of port 443"),
            "{}",
            p[0].1
        );
        assert_eq!(
            vip(6443, Some(0)).problems()[0].0,
            "spec.endpoint.backendPort"
        );
    }

    #[test]
    fn allocatable_follows_the_ipam_provider() {
        // A range: every address, lowest first.
        let p = pool(&["10.20.30.150-10.20.30.153"], 24, "10.20.30.1");
        assert_eq!(
            listed(&p),
            [
                "10.20.30.150",
                "10.20.30.151",
                "10.20.30.152",
                "10.20.30.153"
            ]
        );
        // The subnet's network and broadcast addresses and the gateway are never handed out
        // (`PoolSpecToIPSet`), even when listed; entries overlap into one set, in order.
        let p = pool(
            &["10.0.0.0-10.0.0.2", "10.0.0.254-10.0.0.255", "10.0.0.2"],
            24,
            "10.0.0.1",
        );
        assert_eq!(listed(&p), ["10.0.0.2", "10.0.0.254"]);
        // A CIDR; the subnet is the first address's at `prefix`.
        let p = pool(&["192.168.1.8/30"], 24, "192.168.1.1");
        assert_eq!(
            listed(&p),
            ["192.168.1.8", "192.168.1.9", "192.168.1.10", "192.168.1.11"]
        );
        let p = pool(&["192.168.1.8/30"], 30, "192.168.1.9");
        assert_eq!(listed(&p), ["192.168.1.10"]);
        // IPv6: no broadcast address, the subnet-router anycast address is excluded.
        let p = pool(&["fd00::-fd00::3"], 64, "fd00::1");
        assert_eq!(listed(&p), ["fd00::2", "fd00::3"]);
    }

    #[test]
    fn allocatable_refuses_what_the_provider_would_not_take() {
        let err = |p: AddressPool| p.allocatable().unwrap_err();
        assert!(err(pool(&["10.0.0.5-10.0.0.1"], 24, "10.0.0.1"))
            .starts_with("addresses[0]: `10.0.0.5-10.0.0.1` is not a range from low to high"));
        assert!(err(pool(&["10.0.0.5", "nope"], 24, "10.0.0.1"))
            .starts_with("addresses[1]: expected an address"));
        assert_eq!(
            err(pool(&["10.0.0.5", "fd00::5"], 24, "10.0.0.1")),
            "addresses: mixes IPv4 and IPv6"
        );
        assert!(err(pool(&["10.0.0.5"], 33, "10.0.0.1")).starts_with("prefix: 33 is longer"));
        // Bounded: a /8 stops after POOL_LISTED_MAX addresses.
        assert!(err(pool(&["10.0.0.0/8"], 8, "10.0.0.1")).contains("more than 256 addresses"));
        assert!(pool(&[], 24, "10.0.0.1").allocatable().unwrap().is_empty());
    }

    #[test]
    fn hands_out_answers_for_pools_of_any_size() {
        let a = |s: &str| s.parse::<IpAddr>().unwrap();
        let nodes = pool(&["10.20.0.0/16"], 16, "10.20.0.1");
        assert!(nodes.hands_out(a("10.20.30.150")).unwrap());
        // The gateway, the network and broadcast addresses, excluded entries and other
        // families are never handed out.
        for withheld in ["10.20.0.1", "10.20.0.0", "10.20.255.255"] {
            assert!(!nodes.hands_out(a(withheld)).unwrap(), "{withheld}");
        }
        let excluded = ["10.20.30.144/28".to_string()];
        let view = IpamPool {
            excluded: excluded.to_vec(),
            ..nodes.ipam()
        };
        assert!(!view.hands_out(a("10.20.30.150")).unwrap());
        assert!(view.hands_out(a("10.20.30.160")).unwrap());
        // allocateReservedIPAddresses: the network and broadcast addresses too.
        let reserved = IpamPool {
            allocate_reserved: true,
            ..nodes.ipam()
        };
        assert!(reserved.hands_out(a("10.20.0.0")).unwrap());
        assert!(!nodes.hands_out(a("fd00::1")).unwrap());
        assert!(!nodes.hands_out(a("10.21.0.5")).unwrap());
        assert!(pool(&["x"], 24, "").hands_out(a("10.0.0.1")).is_err());
    }

    #[test]
    fn the_webhook_rules_hold() {
        let err = |p: AddressPool| p.allocatable().unwrap_err();
        // Every entry inside the subnet of the lowest address.
        assert!(err(pool(
            &["10.20.30.150-10.20.30.152", "10.20.31.5"],
            24,
            "10.20.30.1"
        ))
        .starts_with("addresses[1]: `10.20.31.5` is outside the subnet"));
        // The lowest address, not the first listed, decides the subnet.
        let p = pool(&["10.20.30.150", "10.20.30.0/30"], 24, "10.20.30.1");
        assert_eq!(listed(&p), ["10.20.30.2", "10.20.30.3", "10.20.30.150"]);
        // No spaces (Go's netip parses none).
        assert!(err(pool(&[" 10.0.0.5"], 24, "10.0.0.1")).starts_with("addresses[0]: expected"));
        assert!(err(pool(&["10.0.0.5"], 24, "fd00::1")).starts_with("gateway: another IP family"));
    }
}
