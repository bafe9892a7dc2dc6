//! What the Talos machines boot and reach: the VM template
//! and installer tied to `spec.versions.talos`, and the registries, time servers and
//! nameservers an air-gapped fleet must name.

use super::{no_placement, Cx, Finding, Severity};
use crate::model::SemVer;

/// Registries Talos and Kubernetes pull from by default; a Job image from another host
/// means the fleet uses a registry of its own.
pub(super) const PUBLIC_REGISTRIES: &[&str] = &[
    "docker.io",
    "registry-1.docker.io",
    "index.docker.io",
    "ghcr.io",
    "registry.k8s.io",
    "k8s.gcr.io",
    "gcr.io",
    "quay.io",
    "factory.talos.dev",
];

/// The first `X.Y.Z` version in a name (`talos-v1.10.6-vmware` → `v1.10.6`).
pub fn version_in_name(name: &str) -> Option<SemVer> {
    let b = name.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() && (i == 0 || !b[i - 1].is_ascii_digit()) {
            let rest = &name[i..];
            let end = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(rest.len());
            let candidate = rest[..end].trim_end_matches('.');
            if candidate.split('.').count() >= 3 {
                let three: Vec<&str> = candidate.split('.').take(3).collect();
                if let Some(v) = SemVer::parse(&format!("v{}", three.join("."))) {
                    return Some(v);
                }
            }
            i += end.max(1);
        } else {
            i += 1;
        }
    }
    None
}

/// The registry host of an image reference (`docker.io` when it names none).
pub fn registry_host(image: &str) -> &str {
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first
        }
        _ => "docker.io",
    }
}

impl Cx<'_> {
    /// `talos-image`: every VM template names the Talos release `spec.versions.talos` says,
    /// so a version bump changes what the machines boot (M5).
    pub(super) fn talos_image(&self, out: &mut Vec<Finding>) {
        let id = "talos-image";
        let s = &self.i.config.spec;
        let Some(v) = &s.vsphere else {
            out.push(no_placement(
                id,
                "spec.vsphere.template",
                "the VM template and spec.versions.talos were",
            ));
            return;
        };
        let Some(want) = SemVer::parse(&s.versions.talos) else {
            return;
        };
        let mut templates = vec![("spec.vsphere.template".to_string(), v.template.clone())];
        if let Some(cp) = &s.control_plane {
            if let Some(t) = &cp.machine.template {
                templates.push(("spec.controlPlane.machine.template".into(), t.clone()));
            }
        }
        for (i, pool) in s.workers.iter().enumerate() {
            if let Some(t) = &pool.machine.template {
                templates.push((format!("spec.workers[{i}].machine.template"), t.clone()));
            }
        }
        let mut wrong = Vec::new();
        let mut unknown = Vec::new();
        for (field, name) in &templates {
            match version_in_name(name) {
                Some(have) if have == want => {}
                Some(have) => wrong.push(format!("{field} `{name}` (Talos {have})")),
                None => unknown.push(format!("{field} `{name}`")),
            }
        }
        let fields: Vec<&str> = templates.iter().map(|(f, _)| f.as_str()).collect();
        let field = format!("{} vs spec.versions.talos", fields.join(", "));
        let f = if !wrong.is_empty() {
            Finding::new(
                id,
                Severity::Blocking,
                field,
                format!(
                    "{}: the machines would boot another Talos than spec.versions.talos {want} (the config contract, \
                     etcd and the checks assume {want}); a version bump that does not change the template upgrades nothing",
                    wrong.join(", ")
                ),
            )
            .fix(format!(
                "clone from a template of Talos {want} (imported from its VMware OVA, named with its version, e.g. \
                 `talos-{want}-vmware`), or set spec.versions.talos to the template's release"
            ))
        } else if !unknown.is_empty() {
            Finding::new(
                id,
                Severity::Warning,
                field,
                format!(
                    "{}: the name does not say which Talos it holds, so nothing ties it to spec.versions.talos {want} \
                     (a version bump could leave the machines booting the old release)",
                    unknown.join(", ")
                ),
            )
            .fix(format!("name each template with its Talos release, e.g. `talos-{want}-vmware`"))
        } else {
            Finding::new(
                id,
                Severity::Pass,
                field,
                format!(
                    "the VM templates hold Talos {want}, as spec.versions.talos says{}",
                    if s.talos.install_image.is_some() {
                        ", and so does spec.talos.installImage"
                    } else {
                        ""
                    }
                ),
            )
        };
        out.push(f);
    }

    /// `air-gap` (M8): a fleet whose Job image comes from a registry of its own names the
    /// registry mirrors, time servers and nameservers its Talos machines use; Talos's
    /// defaults reach the internet (ghcr.io, registry.k8s.io, time.cloudflare.com, 1.1.1.1).
    pub(super) fn air_gap(&self, out: &mut Vec<Finding>) {
        let id = "air-gap";
        let s = &self.i.config.spec;
        let job = s.migration.as_ref().and_then(|m| m.job_image.as_deref());
        let private = job
            .map(registry_host)
            .filter(|h| !PUBLIC_REGISTRIES.contains(h));
        let t = &s.talos;
        let mut missing = Vec::new();
        if t.registry_mirrors.is_empty() {
            missing.push(
                "registry mirrors (`spec.talos.registryMirrors`): Talos pulls its own images from ghcr.io and \
                 Kubernetes's from registry.k8s.io",
            );
        }
        if t.time_servers.is_empty() {
            missing.push(
                "time servers (`spec.talos.timeServers`): Talos uses time.cloudflare.com and waits for time sync \
                 without limit before starting etcd and the kubelet",
            );
        }
        // D3: with the VIP, KubePrism's only other upstreams come from discovery
        // (`endpoint-strategy` says why).
        if s.endpoint.strategy == Some(crate::model::EndpointStrategy::Vip) && t.discovery.is_none()
        {
            missing.push(
                "discovery service (`spec.talos.discovery`): Talos registers with discovery.talos.dev, and with \
                 strategy `vip` KubePrism knows no control-plane address but the VIP without it (`endpoint-strategy`)",
            );
        }
        let field = "spec.talos vs spec.migration.jobImage";
        let f = match private {
            Some(host) if !missing.is_empty() => Finding::new(
                id,
                Severity::Warning,
                field,
                format!(
                    "the Job image comes from `{host}`, a registry of the fleet's own, but cluster.yaml names no {}",
                    missing.join("; no ")
                ),
            )
            .fix(format!(
                "name them in cluster.yaml: `spec.talos: {{registryMirrors: {{ghcr.io: [https://{host}/v2/ghcr.io], \
                 registry.k8s.io: [https://{host}/v2/registry.k8s.io], docker.io: [https://{host}/v2/docker.io]}}, \
                 timeServers: [ntp.example.internal]}}` (and `nameservers` where DHCP gives none: Talos falls back to \
                 1.1.1.1 and 8.8.8.8)"
            )),
            Some(host) => Finding::new(
                id,
                Severity::Pass,
                field,
                format!("the fleet pulls from `{host}` and names the registry mirrors and time servers its Talos machines use"),
            ),
            None => Finding::new(
                id,
                Severity::Info,
                field,
                if missing.is_empty() {
                    "registry mirrors and time servers are named".into()
                } else {
                    format!(
                        "no registry of the fleet's own in sight (the Job image is public or not set): Talos's defaults \
                         apply: {}",
                        missing.join("; ")
                    )
                },
            ),
        };
        out.push(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_in_template_names() {
        for (name, want) in [
            ("talos-v1.10.6-vmware", Some("v1.10.6")),
            ("talos-1.13.2", Some("v1.13.2")),
            ("vmware-amd64-v1.9.0-rc.1", Some("v1.9.0")),
            ("talos-v1.10-vmware", None),
            ("talos", None),
            ("ubuntu-22.04-talos", None),
        ] {
            assert_eq!(
                version_in_name(name).map(|v| v.to_string()),
                want.map(str::to_string),
                "{name}"
            );
        }
    }

    #[test]
    fn registry_hosts() {
        assert_eq!(registry_host("alpine/k8s:1.33.4"), "docker.io");
        assert_eq!(
            registry_host("registry.example.internal/mirror/alpine/k8s:1.33.4"),
            "registry.example.internal"
        );
        assert_eq!(registry_host("localhost:5000/k8s"), "localhost:5000");
        assert_eq!(
            registry_host("ghcr.io/siderolabs/installer:v1.10.6"),
            "ghcr.io"
        );
    }
}
