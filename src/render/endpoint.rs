//! The control-plane endpoint strategy in the render: the templates' `endpoint` context
//! (Talos VIP, the control-plane address pool) and the interlock that the objects, overlays
//! and template overrides applied, still carry it.
//!
//! - `vip`: up to Talos 1.11 `machine.network.interfaces[]` gets `{interface, vip: {ip}}`
//!   (`v1alpha1.DeviceVIPConfig`); from 1.12 the v1alpha1 document has no `vip` any more and
//!   the address is a `Layer2VIPConfig` document (`name`: the address, `link`: the
//!   interface), on the control plane only. The address is added to the apiserver
//!   certificate's SANs, so clients can use it directly.
//! - `external`: an `InClusterIPPool` of exactly the addresses a rollout needs, referenced by
//!   the control-plane VSphereMachineTemplate's first device (`addressesFromPools`); the
//!   template carries the label [`POOL_LABEL`], which the shipped `vsphere-ipam` overlay
//!   leaves alone.
//! - both: the TalosControlPlane rolls out with one machine of surge and never below its
//!   replicas (`rolloutStrategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1}}`, the
//!   one strategy CACPPT has besides `OnDelete`, both flavours); its annotation
//!   [`STRATEGY_ANNOTATION`] says which strategy, for `capstan diff`.

use crate::inputs::model::{AddressPool, ClusterConfig, EndpointStrategy};
use crate::resource::Resource;
use serde_json::{json, Value};

/// The label on a VSphereMachineTemplate whose addresses come from its own pool (the
/// control plane's, strategy `external`): its value is the pool's name.
pub const POOL_LABEL: &str = "capstan.dev/address-pool";

/// The TalosControlPlane annotation naming the endpoint strategy and its addresses.
pub const STRATEGY_ANNOTATION: &str = "capstan.dev/endpoint-strategy";

fn talos_minor(config: &ClusterConfig) -> Option<u32> {
    crate::inputs::model::SemVer::parse(&config.spec.versions.talos)
        .filter(|v| v.major == 1)
        .map(|v| v.minor)
}

/// The `Layer2VIPConfig` document of Talos 1.12 and later, for the control plane's
/// strategic patches; `None` for another strategy or an older Talos.
pub fn vip_document(config: &ClusterConfig) -> Option<Value> {
    let e = &config.spec.endpoint;
    let vip = e
        .vip
        .as_ref()
        .filter(|_| e.strategy == Some(EndpointStrategy::Vip))?;
    talos_minor(config).filter(|m| *m >= 12)?;
    Some(json!({
        "apiVersion": "v1alpha1",
        "kind": "Layer2VIPConfig",
        "name": vip.address,
        "link": vip.link,
    }))
}

/// The annotation's value: `vip <address> on <link>`, or `external: pool <name>
/// (<addresses>)`.
pub fn describe(config: &ClusterConfig) -> Option<String> {
    let e = &config.spec.endpoint;
    match e.strategy? {
        EndpointStrategy::Vip => e
            .vip
            .as_ref()
            .map(|v| format!("vip {} on {}", v.address, v.link)),
        EndpointStrategy::External => e.control_plane_pool.as_ref().map(|p| {
            format!(
                "external: pool {} ({})",
                config.control_plane_pool_name(),
                p.addresses.join(", ")
            )
        }),
    }
}

/// The templates' `endpoint` context.
pub fn context(config: &ClusterConfig) -> Value {
    let e = &config.spec.endpoint;
    let vip = e
        .vip
        .as_ref()
        .filter(|_| e.strategy == Some(EndpointStrategy::Vip));
    let pool = e
        .control_plane_pool
        .as_ref()
        .filter(|_| e.strategy == Some(EndpointStrategy::External));
    json!({
        "host": e.host,
        "port": e.port,
        "url": e.url(),
        "strategy": e.strategy.map(EndpointStrategy::as_str),
        "description": describe(config),
        "vip": vip.map(|v| json!({"address": v.address, "link": v.link})),
        // Up to Talos 1.11 the VIP is a field of the interface in the v1alpha1 document.
        "vipInterface": vip.is_some() && talos_minor(config).is_some_and(|m| m < 12),
        "pool": pool.map(|p| json!({
            "name": config.control_plane_pool_name(),
            "addresses": p.addresses,
            "prefix": p.prefix,
            "gateway": p.gateway,
        })),
    })
}

/// What the rendered objects (overlays and overrides applied) must still say for the
/// strategy to hold; `Err` says what is missing.
pub fn interlock(config: &ClusterConfig, out: &[Resource]) -> Result<(), String> {
    let e = &config.spec.endpoint;
    let Some(strategy) = e.strategy else {
        return Ok(());
    };
    let Some(tcp) = out.iter().find(|r| r.kind() == "TalosControlPlane") else {
        return Ok(());
    };
    let v = &tcp.value;
    let kind = v
        .pointer("/spec/rolloutStrategy/type")
        .and_then(Value::as_str);
    let surge = v.pointer("/spec/rolloutStrategy/rollingUpdate/maxSurge");
    if kind != Some("RollingUpdate") || surge != Some(&json!(1)) {
        return Err(format!(
            "TalosControlPlane {}: spec.rolloutStrategy must stay `{{type: RollingUpdate, rollingUpdate: {{maxSurge: \
             1}}}}` with endpoint strategy `{}` (found type {}, maxSurge {}): a rollout adds one machine before it \
             removes one, so the endpoint never loses a backend to the rollout{}",
            tcp.name(),
            strategy.as_str(),
            kind.map_or("(absent)".into(), |k| format!("`{k}`")),
            surge.map_or("(absent)".into(), |s| s.to_string()),
            if strategy == EndpointStrategy::External {
                " and the control-plane pool is sized for it"
            } else {
                ""
            }
        ));
    }
    match strategy {
        EndpointStrategy::Vip => {
            let Some(vip) = &e.vip else { return Ok(()) };
            let mut patches = Vec::new();
            strings(v, &mut patches);
            // Each Talos patch as Talos reads it: the VIP of an interface, or the document.
            let carried = patches.iter().any(|s| {
                crate::yaml::parse_stream(s).is_ok_and(|docs| {
                    docs.iter().any(|d| {
                        let interface = d
                            .pointer("/machine/network/interfaces")
                            .and_then(Value::as_array)
                            .is_some_and(|l| {
                                l.iter().any(|i| {
                                    i.get("interface").and_then(Value::as_str)
                                        == Some(vip.link.as_str())
                                        && i.pointer("/vip/ip").and_then(Value::as_str)
                                            == Some(vip.address.as_str())
                                })
                            });
                        let document = d.get("kind").and_then(Value::as_str)
                            == Some("Layer2VIPConfig")
                            && d.get("name").and_then(Value::as_str) == Some(vip.address.as_str())
                            && d.get("link").and_then(Value::as_str) == Some(vip.link.as_str());
                        interface || document
                    })
                })
            });
            if !carried {
                return Err(format!(
                    "TalosControlPlane {}: no Talos patch carries the VIP `{}` of spec.endpoint.vip (a template \
                     override or an overlay dropped it): the control-plane nodes would not announce the endpoint",
                    tcp.name(),
                    vip.address
                ));
            }
        }
        EndpointStrategy::External => {
            let Some(pool) = &e.control_plane_pool else {
                return Ok(());
            };
            let name = config.control_plane_pool_name();
            let template = v
                .pointer("/spec/infrastructureTemplate/name")
                .or_else(|| v.pointer("/spec/machineTemplate/spec/infrastructureRef/name"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let refs = out
                .iter()
                .find(|r| r.kind() == "VSphereMachineTemplate" && r.name() == template)
                .and_then(|r| r.value.pointer("/spec/template/spec/network/devices/0"));
            let want = json!([{"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": name}]);
            if refs.and_then(|d| d.get("addressesFromPools")) != Some(&want)
                || refs.and_then(|d| d.get("dhcp4")) == Some(&json!(true))
            {
                return Err(format!(
                    "VSphereMachineTemplate {template}: the first network device must take its address from the \
                     control-plane pool `{name}` alone (`addressesFromPools`, no DHCP) with endpoint strategy \
                     `external` (a template override or an overlay changed it): the load balancer's backends \
                     would not be the machines' addresses"
                ));
            }
            let found = out
                .iter()
                .find(|r| r.kind() == "InClusterIPPool" && r.name() == name)
                .map(|r| &r.value["spec"]);
            let want = json!({"addresses": pool.addresses, "prefix": pool.prefix, "gateway": pool.gateway});
            let same = found.is_some_and(|s| {
                ["addresses", "prefix", "gateway"]
                    .iter()
                    .all(|k| s.get(*k) == want.get(*k))
            });
            if !same {
                return Err(format!(
                    "InClusterIPPool {name}: must hold exactly spec.endpoint.controlPlanePool (addresses, prefix, \
                     gateway){}: the load balancer lists those addresses",
                    if found.is_some() {
                        ", an overlay changed it"
                    } else {
                        ", and is missing"
                    }
                ));
            }
            // Another pool of the render (the nodes', from an overlay) handing out one of the
            // control plane's addresses would give two machines the same address.
            let ours = pool.allocatable().unwrap_or_default();
            for other in out
                .iter()
                .filter(|r| r.kind() == "InClusterIPPool" && r.name() != name)
            {
                let spec = &other.value["spec"];
                let list = |k: &str| -> Vec<String> {
                    spec[k]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                };
                let theirs = AddressPool {
                    addresses: list("addresses"),
                    prefix: spec["prefix"]
                        .as_u64()
                        .and_then(|p| u8::try_from(p).ok())
                        .unwrap_or(0),
                    gateway: spec["gateway"].as_str().unwrap_or_default().to_string(),
                };
                let excluded = list("excludedAddresses");
                let shared = ours
                    .iter()
                    .find(|a| theirs.hands_out(**a, &excluded).unwrap_or(false))
                    .copied();
                if let Some(shared) = shared {
                    return Err(format!(
                        "InClusterIPPool {} (from {}) hands out `{shared}`, an address of the control-plane pool \
                         `{name}`: two machines would get the same address; keep spec.endpoint.controlPlanePool out \
                         of every other pool",
                        other.name(),
                        other.origin
                    ));
                }
            }
        }
    }
    Ok(())
}

fn strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(m) => m.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}
