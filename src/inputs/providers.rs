//! The Cluster API provider releases the migration phases were verified against, per
//! flavour, and the management cluster's providers as `kubectl` reports them.
//!
//! The phases rest on what the providers do, not on their schemas (read in their source:
//! siderolabs/cluster-api-control-plane-provider-talos, cluster-api-bootstrap-provider-talos,
//! kubernetes-sigs/cluster-api): when the control-plane provider bootstraps, when its
//! etcd audit runs, whether scale-up is gated. That behaviour changes between releases of
//! one series (the community control-plane provider v0.9 gates scale-up on preflight checks
//! that cannot pass while kubeadm etcd members exist), so the phases that migrate run
//! only on the releases listed in [`verified`]; `cluster.yaml` declares what the management
//! cluster runs (`spec.migration.providers`) and `capstan check --providers FILE` compares
//! the declaration with the management cluster ([`Inventory`]).

use crate::model::{Flavour, SemVer};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// Which releases of a provider were verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Releases {
    /// Exactly this release.
    Exact(&'static str),
    /// Every patch release of this minor series (`v1.10` matches `v1.10.*`).
    Series(u32, u32),
}

impl Releases {
    /// Whether a release (`vX.Y.Z`) is one of these.
    pub fn accepts(self, release: &str) -> bool {
        match self {
            Releases::Exact(r) => r == release,
            Releases::Series(major, minor) => {
                SemVer::parse(release).is_some_and(|v| v.major == major && v.minor == minor)
            }
        }
    }
}

impl fmt::Display for Releases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Releases::Exact(r) => f.write_str(r),
            Releases::Series(major, minor) => write!(f, "v{major}.{minor}.x"),
        }
    }
}

/// One provider the phases were verified against.
#[derive(Debug, Clone, Copy)]
pub struct Pin {
    /// The `clusterctl` inventory name (`kubectl get providers -A`), e.g. `control-plane-talos`.
    pub name: &'static str,
    /// What it is.
    #[cfg_attr(not(any(test, feature = "testkit")), expect(dead_code, reason = "read by the tests only"))]
    pub title: &'static str,
    /// The last path segment of its controller image, to recognise its Deployment.
    pub image: &'static str,
    /// Whether a cluster needs it (the in-cluster IPAM provider only with IP pools).
    pub required: bool,
    /// The releases verified.
    pub releases: Releases,
    /// What was verified, with the source read (file and line, release).
    #[cfg_attr(not(any(test, feature = "testkit")), expect(dead_code, reason = "read by the tests only"))]
    pub evidence: &'static str,
}

/// The providers every flavour uses, in `clusterctl` inventory order.
pub const PROVIDER_NAMES: &[&str] = &[
    "cluster-api",
    "bootstrap-talos",
    "control-plane-talos",
    "infrastructure-vsphere",
    "ipam-in-cluster",
];

const V1BETA1: &[Pin] = &[
    Pin {
        name: "cluster-api",
        title: "Cluster API",
        image: "cluster-api-controller",
        required: true,
        releases: Releases::Series(1, 10),
        evidence: "the series CACPPT v0.5.12 is built against (go.mod sigs.k8s.io/cluster-api v1.10.9); \
                   Machine.status.nodeRef only from a Node with the Machine's spec.providerID \
                   (internal/controllers/machine/machine_controller_noderef.go:71-117, v1.10.9); MachineSet \
                   preflight ControlPlaneIsStable, gate on by default (machineset_preflight.go:93, feature.go:92)",
    },
    Pin {
        name: "bootstrap-talos",
        title: "Talos bootstrap provider (CABPT)",
        image: "cluster-api-talos-controller",
        required: true,
        releases: Releases::Exact("v0.6.12"),
        evidence: "controllers/secrets.go (a missing <cluster>-talos bundle or <cluster>-ca is generated, M12) \
                   and talosconfig_controller.go at v0.6.12; Talos machinery v1.13.0 (go.mod), so a list-valued \
                   service-account-issuer patch loads (v0.6.11 has v1.12.0: M9)",
    },
    Pin {
        name: "control-plane-talos",
        title: "Talos control-plane provider (CACPPT, Sidero Labs)",
        image: "cluster-api-control-plane-talos-controller",
        required: true,
        releases: Releases::Exact("v0.5.12"),
        evidence: "controllers/taloscontrolplane_controller.go at v0.5.12: paused check before anything \
                   (117-120), etcd audit before scaling (226-239), Bootstrap RPC unless status.bootstrapped once \
                   machines == replicas (778-818), one Machine per reconcile with an immediate requeue and no \
                   scale-up gate (333-410, scale.go:24-36); etcd.go:164-257 (the audit waits for a nodeRef on \
                   every control-plane Machine, then force-removes every member not named after one)",
    },
    Pin {
        name: "infrastructure-vsphere",
        title: "vSphere infrastructure provider (CAPV)",
        image: "cluster-api-vsphere-controller",
        required: true,
        releases: Releases::Series(1, 13),
        evidence: "the series built against Cluster API v1.10 (go.mod replace v1.10.1, v1.13.1); \
                   VSphereMachine.spec.providerID vsphere://<BIOS UUID> (pkg/services/vimmachine.go:251-262); \
                   no cluster module (anti-affinity) for a TalosControlPlane \
                   (controllers/clustermodule_reconciler.go:276-318, M2); linked clones keep the template's \
                   disk size (pkg/services/govmomi/vcenter/clone.go:145-151)",
    },
    Pin {
        name: "ipam-in-cluster",
        title: "in-cluster IPAM provider",
        image: "cluster-api-ipam-in-cluster-controller",
        required: false,
        releases: Releases::Exact("v1.0.3"),
        evidence: "InClusterIPPool v1alpha2 as rendered by the vsphere-ipam overlay (CRD at v1.0.3, built \
                   against Cluster API v1.10.4); allocation behaviour not reviewed beyond the schema",
    },
];

/// The releases each flavour's migration phases were verified against. The flavour
/// `v1beta2` has none: the community control-plane provider v0.9 runs KCP-style preflight
/// checks before scale-up (every Machine with a Node, etcd member count equal to the machine
/// count) that cannot pass while kubeadm members exist, so the one-window design creates one
/// machine and may leave the window open until the etcd audit runs (B4); its other releases
/// were not reviewed. It renders clusters that are not migrating (`complete`).
pub fn verified(flavour: Flavour) -> &'static [Pin] {
    match flavour {
        Flavour::V1beta1 => V1BETA1,
        Flavour::V1beta2 => &[],
    }
}

/// The release a declaration names for a provider (`None`: not declared).
#[cfg(any(test, feature = "testkit"))]
pub fn declared<'a>(p: &'a crate::model::ProviderReleases, name: &str) -> Option<&'a str> {
    p.entries()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, r)| r)
}

/// A provider release that is not among the verified ones, with what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unverified {
    /// Inventory name.
    pub name: &'static str,
    /// The release found (`None`: missing though required).
    pub release: Option<String>,
    /// The verified releases.
    pub expected: String,
}

/// The providers of a declaration (or an inventory) that are not verified for a flavour.
/// Empty when every required provider is present and verified.
pub fn unverified(flavour: Flavour, releases: &BTreeMap<String, String>) -> Vec<Unverified> {
    let mut out = Vec::new();
    for pin in verified(flavour) {
        match releases.get(pin.name) {
            None if pin.required => out.push(Unverified {
                name: pin.name,
                release: None,
                expected: pin.releases.to_string(),
            }),
            None => {}
            Some(r) if pin.releases.accepts(r) => {}
            Some(r) => out.push(Unverified {
                name: pin.name,
                release: Some(r.clone()),
                expected: pin.releases.to_string(),
            }),
        }
    }
    out
}

/// A declaration as a name → release map.
pub fn as_map(p: &crate::model::ProviderReleases) -> BTreeMap<String, String> {
    p.entries()
        .into_iter()
        .map(|(n, r)| (n.to_string(), r.to_string()))
        .collect()
}

/// The YAML block of `spec.migration.providers` naming the verified releases of a flavour
/// (the newest patch release of a series is not known, so a series shows as `v1.10.x`).
pub fn declaration_hint(flavour: Flavour) -> String {
    let mut s = String::from("providers: {");
    let pins: Vec<String> = verified(flavour)
        .iter()
        .filter(|p| p.required)
        .map(|p| format!("{}: {}", p.name, p.releases))
        .collect();
    s.push_str(&pins.join(", "));
    s.push('}');
    s
}

/// Why an inventory file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct InventoryError {
    /// The file.
    pub file: String,
    /// What is wrong.
    pub message: String,
}

/// The provider releases a management cluster runs, read from `kubectl get
/// providers.clusterctl.cluster.x-k8s.io -A -o yaml` (the clusterctl inventory) or `kubectl
/// get deployments -A -o yaml` (the controller images' tags).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    /// Inventory name → release.
    pub releases: BTreeMap<String, String>,
    /// Where each release was read (`Provider capi-system/cluster-api`, `Deployment …`).
    pub sources: BTreeMap<String, String>,
}

impl Inventory {
    /// Read the documents of one file (a `List`, `ProviderList` or `DeploymentList`, or the
    /// objects themselves). Providers capstan does not use (other infrastructure providers,
    /// add-ons) are ignored; one provider at two releases is an error.
    pub fn from_documents(file: &str, docs: Vec<Value>) -> Result<Inventory, InventoryError> {
        let err = |message: String| InventoryError {
            file: file.to_string(),
            message,
        };
        // A bare sequence of objects (`jq .items`) reads like a list.
        let docs = docs.into_iter().flat_map(|d| match d {
            Value::Array(items) => items,
            d => vec![d],
        });
        let objects = crate::resource::list_items(docs.collect()).objects;
        let mut inv = Inventory::default();
        let mut seen_kind = false;
        for (kind, o) in &objects {
            let kind = kind.as_str();
            let meta = |k: &str| {
                o.pointer(&format!("/metadata/{k}"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let at = format!("{kind} {}/{}", meta("namespace"), meta("name"));
            match kind {
                "Provider" => {
                    seen_kind = true;
                    let name = provider_inventory_name(o).unwrap_or_else(|| meta("name"));
                    if !PROVIDER_NAMES.contains(&name.as_str()) {
                        continue;
                    }
                    let version = o
                        .get("version")
                        .and_then(Value::as_str)
                        .ok_or_else(|| err(format!("{at}: no `version`")))?;
                    inv.add(&name, version, &at).map_err(err)?;
                }
                "Deployment" => {
                    seen_kind = true;
                    let containers = o
                        .pointer("/spec/template/spec/containers")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten();
                    for c in containers {
                        let Some(image) = c.get("image").and_then(Value::as_str) else {
                            continue;
                        };
                        let Some((repo, tag)) = split_image(image) else {
                            continue;
                        };
                        let Some(pin) = V1BETA1.iter().find(|p| p.image == repo) else {
                            continue;
                        };
                        inv.add(pin.name, tag, &format!("{at} image {image}"))
                            .map_err(err)?;
                    }
                }
                _ => {}
            }
        }
        if !seen_kind {
            return Err(err(
                "expected the output of `kubectl get providers.clusterctl.cluster.x-k8s.io -A -o yaml` \
                 (Provider objects) or `kubectl get deployments -A -o yaml`, found neither"
                    .into(),
            ));
        }
        Ok(inv)
    }

    fn add(&mut self, name: &str, release: &str, at: &str) -> Result<(), String> {
        if SemVer::parse(release).is_none() {
            return Err(format!("{at}: `{release}` is not a release `vX.Y.Z`"));
        }
        match self.releases.get(name) {
            Some(r) if r != release => Err(format!(
                "{name} runs at two releases: {r} ({}) and {release} ({at})",
                self.sources.get(name).map(String::as_str).unwrap_or("?")
            )),
            Some(_) => Ok(()),
            None => {
                self.releases.insert(name.to_string(), release.to_string());
                self.sources.insert(name.to_string(), at.to_string());
                Ok(())
            }
        }
    }
}

/// The clusterctl inventory name of a `Provider` object from its `type` and `providerName`
/// (`ControlPlaneProvider` + `talos` → `control-plane-talos`), as clusterctl names it.
fn provider_inventory_name(o: &Value) -> Option<String> {
    let ty = o.get("type").and_then(Value::as_str)?;
    let name = o.get("providerName").and_then(Value::as_str)?;
    let prefix = match ty {
        "CoreProvider" => return Some(name.to_string()),
        "BootstrapProvider" => "bootstrap",
        "ControlPlaneProvider" => "control-plane",
        "InfrastructureProvider" => "infrastructure",
        "IPAMProvider" => "ipam",
        _ => return None,
    };
    Some(format!("{prefix}-{name}"))
}

/// `registry/path/repo:tag[@digest]` → (`repo`, `tag`).
fn split_image(image: &str) -> Option<(&str, &str)> {
    let image = image.split('@').next()?;
    let (path, tag) = image.rsplit_once(':')?;
    if tag.contains('/') {
        return None; // a registry port, no tag
    }
    Some((path.rsplit('/').next()?, tag))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn releases_accept_exact_and_series() {
        assert!(Releases::Exact("v0.5.12").accepts("v0.5.12"));
        assert!(!Releases::Exact("v0.5.12").accepts("v0.5.13"));
        assert!(Releases::Series(1, 10).accepts("v1.10.10"));
        assert!(!Releases::Series(1, 10).accepts("v1.11.0"));
        assert!(!Releases::Series(1, 10).accepts("1.10.1"));
        assert_eq!(Releases::Series(1, 13).to_string(), "v1.13.x");
    }

    #[test]
    fn v1beta2_has_no_verified_release_and_v1beta1_pins_the_control_plane_exactly() {
        assert!(verified(Flavour::V1beta2).is_empty());
        let cp = verified(Flavour::V1beta1)
            .iter()
            .find(|p| p.name == "control-plane-talos")
            .unwrap();
        assert_eq!(cp.releases, Releases::Exact("v0.5.12"));
        for p in verified(Flavour::V1beta1) {
            assert!(PROVIDER_NAMES.contains(&p.name), "{}", p.name);
        }
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn unverified_names_each_provider_off_the_list() {
        let ok = map(&[
            ("cluster-api", "v1.10.10"),
            ("bootstrap-talos", "v0.6.12"),
            ("control-plane-talos", "v0.5.12"),
            ("infrastructure-vsphere", "v1.13.1"),
        ]);
        assert!(unverified(Flavour::V1beta1, &ok).is_empty());
        let mut bad = ok.clone();
        bad.insert("control-plane-talos".into(), "v0.5.14".into());
        bad.remove("cluster-api");
        bad.insert("ipam-in-cluster".into(), "v1.0.2".into());
        let u = unverified(Flavour::V1beta1, &bad);
        let names: Vec<_> = u.iter().map(|u| (u.name, u.release.as_deref())).collect();
        assert_eq!(
            names,
            [
                ("cluster-api", None),
                ("control-plane-talos", Some("v0.5.14")),
                ("ipam-in-cluster", Some("v1.0.2"))
            ]
        );
        assert_eq!(u[1].expected, "v0.5.12");
    }

    #[test]
    fn inventory_from_providers_and_from_deployments() {
        let providers = json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3", "kind": "Provider",
             "metadata": {"name": "cluster-api", "namespace": "capi-system"},
             "providerName": "cluster-api", "type": "CoreProvider", "version": "v1.10.10"},
            {"apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3", "kind": "Provider",
             "metadata": {"name": "control-plane-talos", "namespace": "cacppt-system"},
             "providerName": "talos", "type": "ControlPlaneProvider", "version": "v0.5.12"},
            {"apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3", "kind": "Provider",
             "metadata": {"name": "infrastructure-docker", "namespace": "capd-system"},
             "providerName": "docker", "type": "InfrastructureProvider", "version": "v1.10.10"}
        ]});
        let inv = Inventory::from_documents("p.yaml", vec![providers]).unwrap();
        assert_eq!(
            inv.releases,
            map(&[
                ("cluster-api", "v1.10.10"),
                ("control-plane-talos", "v0.5.12")
            ])
        );
        let deployments = json!({"kind": "DeploymentList", "items": [
            {"kind": "Deployment", "metadata": {"name": "capi-controller-manager", "namespace": "capi-system"},
             "spec": {"template": {"spec": {"containers": [
                {"name": "manager", "image": "mirror.internal:5000/cluster-api/cluster-api-controller:v1.10.10"}]}}}},
            {"kind": "Deployment", "metadata": {"name": "cabpt-controller-manager", "namespace": "cabpt-system"},
             "spec": {"template": {"spec": {"containers": [
                {"name": "manager", "image": "ghcr.io/siderolabs/cluster-api-talos-controller:v0.6.12@sha256:abc"},
                {"name": "proxy", "image": "gcr.io/kubebuilder/kube-rbac-proxy:v0.8.0"}]}}}}
        ]});
        let inv = Inventory::from_documents("d.yaml", vec![deployments]).unwrap();
        assert_eq!(
            inv.releases,
            map(&[("bootstrap-talos", "v0.6.12"), ("cluster-api", "v1.10.10")])
        );
        // Two releases of one provider, a bad tag, and an unrelated file are errors.
        let two = json!([
            {"kind": "Provider", "metadata": {"name": "cluster-api"}, "version": "v1.10.10"},
            {"kind": "Provider", "metadata": {"name": "cluster-api"}, "version": "v1.10.9"}
        ]);
        let docs: Vec<Value> = two.as_array().unwrap().clone();
        let e = Inventory::from_documents("t.yaml", docs).unwrap_err();
        assert!(e.message.contains("two releases"), "{e}");
        let e = Inventory::from_documents(
            "b.yaml",
            vec![json!({"kind": "Provider", "metadata": {"name": "cluster-api"}, "version": "latest"})],
        )
        .unwrap_err();
        assert!(e.message.contains("`latest` is not a release"), "{e}");
        let e =
            Inventory::from_documents("x.yaml", vec![json!({"kind": "ConfigMap"})]).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("x.yaml: expected the output of `kubectl get providers"));
    }

    #[test]
    fn images_split_into_repository_and_tag() {
        assert_eq!(
            split_image("registry.k8s.io/cluster-api/cluster-api-controller:v1.10.10"),
            Some(("cluster-api-controller", "v1.10.10"))
        );
        assert_eq!(split_image("localhost:5000/x"), None);
        assert_eq!(split_image("x@sha256:ab"), None);
    }
}
