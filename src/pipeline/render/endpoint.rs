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

use crate::model::{ClusterConfig, EndpointStrategy, IpamPool, Vip};
use crate::resource::Resource;
use serde_json::{json, Value};
use std::net::IpAddr;

/// The label on a VSphereMachineTemplate whose addresses come from its own pool (the
/// control plane's, strategy `external`): its value is the pool's name.
pub const POOL_LABEL: &str = "capstan.dev/address-pool";

/// The TalosControlPlane annotation naming the endpoint strategy and its addresses.
pub const STRATEGY_ANNOTATION: &str = "capstan.dev/endpoint-strategy";

fn talos_minor(config: &ClusterConfig) -> Option<u32> {
    crate::model::SemVer::parse(&config.spec.versions.talos)
        .filter(|v| v.major == 1)
        .map(|v| v.minor)
}

/// The `Layer2VIPConfig` document of Talos 1.12 and later, for the control plane's
/// strategic patches; `None` for another strategy or an older Talos.
pub fn vip_document(config: &ClusterConfig) -> Option<Value> {
    let e = &config.spec.endpoint;
    let vip = e.active_vip()?;
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
    let (vip, pool) = (e.active_vip(), e.active_pool());
    json!({
        "host": e.host,
        "port": e.port,
        "backendPort": e.backend_port(),
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
    // Whatever the strategy: no pool of the render hands out the endpoint's own address
    // or the VIP (a machine would take it).
    let mut reserved: Vec<(IpAddr, &str)> = Vec::new();
    if let Ok(host) = e.host.parse::<IpAddr>() {
        reserved.push((host, "the endpoint's address"));
    }
    if let Some(a) = e
        .active_vip()
        .and_then(|v| v.address.parse::<IpAddr>().ok())
    {
        reserved.push((a, "the VIP"));
    }
    let own = config.control_plane_pool_name();
    let external = e.strategy == Some(EndpointStrategy::External);
    // The control-plane pool's addresses, computed once.
    let ours = e
        .active_pool()
        .map(|p| p.allocatable().unwrap_or_default())
        .unwrap_or_default();
    for a in &ours {
        reserved.push((*a, "an address of the control-plane pool"));
    }
    for p in out.iter().filter(|r| POOL_KINDS.contains(&r.kind())) {
        if external && p.kind() == "InClusterIPPool" && p.name() == own {
            continue;
        }
        let view = pool_view(p)?;
        for (a, what) in &reserved {
            if view
                .hands_out(*a)
                .map_err(|m| format!("{} {} (from {}): spec.{m}", p.kind(), p.name(), p.origin))?
            {
                return Err(format!(
                    "{} {} (from {}) hands out `{a}`, {what}: a machine could take it; keep it out of every \
                     pool",
                    p.kind(),
                    p.name(),
                    p.origin
                ));
            }
        }
    }
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
            vip_carried(config, tcp, vip)
        }
        EndpointStrategy::External => {
            let Some(pool) = &e.control_plane_pool else {
                return Ok(());
            };
            let template = v
                .pointer("/spec/infrastructureTemplate/name")
                .or_else(|| v.pointer("/spec/machineTemplate/spec/infrastructureRef/name"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let refs = out
                .iter()
                .find(|r| r.kind() == "VSphereMachineTemplate" && r.name() == template)
                .and_then(|r| r.value.pointer("/spec/template/spec/network/devices/0"));
            let want = json!([{"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": own}]);
            if refs.and_then(|d| d.get("addressesFromPools")) != Some(&want)
                || refs.and_then(|d| d.get("dhcp4")) == Some(&json!(true))
            {
                return Err(format!(
                    "VSphereMachineTemplate {template}: the first network device must take its address from the \
                     control-plane pool `{own}` alone (`addressesFromPools`, no DHCP) with endpoint strategy \
                     `external` (a template override or an overlay changed it): the load balancer's backends \
                     would not be the machines' addresses"
                ));
            }
            // The pool exactly as declared: no field of the spec beyond these three (an
            // excluded address, reserved addresses, a reuse grace period change what it hands out).
            let found = out
                .iter()
                .find(|r| r.kind() == "InClusterIPPool" && r.name() == own)
                .map(|r| &r.value["spec"]);
            let want = json!({"addresses": pool.addresses, "prefix": pool.prefix, "gateway": pool.gateway});
            if found != Some(&want) {
                return Err(format!(
                    "InClusterIPPool {own}: its spec must be exactly spec.endpoint.controlPlanePool (addresses, \
                     prefix, gateway, nothing else){}: the load balancer lists those addresses",
                    if found.is_some() {
                        ", and an overlay changed it"
                    } else {
                        ", and it is missing"
                    }
                ));
            }
            // Replicas as rendered (an overlay may have changed them): the pool holds a
            // rollout's machines.
            let replicas = v
                .pointer("/spec/replicas")
                .and_then(Value::as_u64)
                .unwrap_or(1);
            let holds = ours.len() as u64;
            if holds < replicas + 1 {
                return Err(format!(
                    "TalosControlPlane {}: {replicas} replicas and a surge of 1 need {} addresses, the control-plane \
                     pool `{own}` hands out {holds}: the surge machine would wait for an address (change \
                     spec.controlPlane.replicas and the pool in cluster.yaml together)",
                    tcp.name(),
                    replicas + 1
                ));
            }
            Ok(())
        }
    }
}

/// The pool kinds of cluster-api-ipam-provider-in-cluster.
const POOL_KINDS: &[&str] = &["InClusterIPPool", "GlobalInClusterIPPool"];

/// A rendered pool's spec as the IPAM provider reads it; a spec it cannot read is an error
/// (an unreadable pool cannot be shown not to hand out an address).
fn pool_view(p: &Resource) -> Result<IpamPool, String> {
    pool_spec(&p.value, &p.origin)
}

/// A rendered pool object's spec as the IPAM provider reads it (`origin` names where the
/// object came from, for the error).
pub fn pool_spec(pool: &Value, origin: &str) -> Result<IpamPool, String> {
    let spec = &pool["spec"];
    let fail = |m: String| {
        format!(
            "{} {} (from {origin}): {m}",
            pool["kind"].as_str().unwrap_or_default(),
            pool["metadata"]["name"].as_str().unwrap_or_default()
        )
    };
    let strings = |k: &str| -> Result<Vec<String>, String> {
        match spec.get(k) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| {
                    x.as_str()
                        .map(String::from)
                        .ok_or_else(|| fail(format!("spec.{k} holds a non-string")))
                })
                .collect(),
            Some(_) => Err(fail(format!("spec.{k} is not a list"))),
        }
    };
    let prefix = spec["prefix"]
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| fail("spec.prefix is not a prefix length".into()))?;
    Ok(IpamPool {
        addresses: strings("addresses")?,
        prefix,
        gateway: spec["gateway"].as_str().unwrap_or_default().to_string(),
        excluded: strings("excludedAddresses")?,
        allocate_reserved: spec["allocateReservedIPAddresses"]
            .as_bool()
            .unwrap_or(false),
    })
}

/// The control plane's Talos patches carry the VIP exactly once, in the form of the Talos
/// minor, and nothing else in them touches it: no second or changed `Layer2VIPConfig`, no
/// other entry for the interface, no `$patch` over it, no RFC 6902 patch on the network.
fn vip_carried(config: &ClusterConfig, tcp: &Resource, vip: &Vip) -> Result<(), String> {
    let document_form = talos_minor(config).is_some_and(|m| m >= 12);
    let base = "/spec/controlPlaneConfig/controlplane";
    let patches: &[Value] = tcp
        .value
        .pointer(&format!("{base}/strategicPatches"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let document = json!({"apiVersion": "v1alpha1", "kind": "Layer2VIPConfig", "name": vip.address, "link": vip.link});
    let interface = json!({"interface": vip.link, "vip": {"ip": vip.address}});
    let mut found = 0;
    let mut problems: Vec<String> = Vec::new();
    for (i, p) in patches.iter().enumerate() {
        let Some(docs) = p.as_str().and_then(|t| crate::yaml::parse_stream(t).ok()) else {
            continue;
        };
        for d in docs {
            let kind = d.get("kind").and_then(Value::as_str);
            if kind == Some("Layer2VIPConfig") {
                if document_form && d == document {
                    found += 1;
                } else {
                    problems.push(format!(
                        "strategicPatches[{i}] holds another Layer2VIPConfig: {d}"
                    ));
                }
            }
            if (kind.is_none() || kind == Some("Layer2VIPConfig")) && d.get("$patch").is_some() {
                problems.push(format!(
                    "strategicPatches[{i}] has a `$patch` over the whole document"
                ));
            }
            for at in ["/machine/$patch", "/machine/network/$patch"] {
                if d.pointer(at).is_some() {
                    problems.push(format!(
                        "strategicPatches[{i}] has `{}`",
                        &at[1..].replace('/', ".")
                    ));
                }
            }
            let items = d
                .pointer("/machine/network/interfaces")
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice);
            for item in items {
                let touches = item.get("vip").is_some()
                    || item.get("$patch").is_some()
                    || item.get("interface").and_then(Value::as_str) == Some(vip.link.as_str());
                if !touches {
                    continue;
                }
                if !document_form && *item == interface {
                    found += 1;
                } else {
                    problems.push(format!(
                        "strategicPatches[{i}] holds another entry for the VIP's interface: {item}"
                    ));
                }
            }
        }
    }
    let json_patches = tcp
        .value
        .pointer(&format!("{base}/configPatches"))
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for (i, op) in json_patches.iter().enumerate() {
        let text = op.to_string();
        if text.contains("/machine/network") || text.contains("Layer2VIPConfig") {
            problems.push(format!("configPatches[{i}] touches the network: {text}"));
        }
    }
    if let Some(p) = problems.first() {
        return Err(format!(
            "TalosControlPlane {}: the VIP `{}` on `{}` must be set once by capstan and not touched by another \
             patch ({p}): Talos would end with another VIP, or none",
            tcp.name(),
            vip.address,
            vip.link
        ));
    }
    if found != 1 {
        return Err(format!(
            "TalosControlPlane {}: no Talos patch carries the VIP `{}` of spec.endpoint.vip as {} (a template \
             override or an overlay dropped it): the control-plane nodes would not announce the endpoint",
            tcp.name(),
            vip.address,
            if document_form {
                "a `Layer2VIPConfig` document (Talos 1.12 and later)"
            } else {
                "`machine.network.interfaces[].vip` (up to Talos 1.11)"
            }
        ));
    }
    Ok(())
}
