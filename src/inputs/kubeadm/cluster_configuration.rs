//! kubeadm's ClusterConfiguration (v1beta3, v1beta4, or inside the `kubeadm-config`
//! ConfigMap) read into the facts `import` carries and `check` compares.

use super::{
    endpoint_has_port, env_names, extra_args, join, normalize_version, parse_endpoint, parse_yaml_stream,
    split_list, ClusterConfigExtras, ClusterConfigFacts, Doc, FlagMap, KubeadmError, DEFAULT_DNS_DOMAIN,
};
use serde_json::{Map, Value};

/// Parse kubeadm's ClusterConfiguration (`kubeadm.k8s.io/v1beta3` or `v1beta4`) from a
/// file that may hold several documents (an InitConfiguration's
/// `localAPIEndpoint.bindPort` is read too), or from the `kube-system/kubeadm-config`
/// ConfigMap (`data.ClusterConfiguration`). Wrong types are errors naming the field.
///
/// Every ClusterConfiguration field, and what capstan does with it (kubernetes/kubernetes
/// `cmd/kubeadm/app/apis/kubeadm/v1beta4/types.go` at 1329935, and `v1beta3/types.go`; a
/// field not listed is ignored for the reason given for its group):
///
/// | field | what capstan does | why |
/// |---|---|---|
/// | `clusterName` | carried by `import` (metadata.name) | names the cluster's objects |
/// | `controlPlaneEndpoint` | carried; `check` finding `endpoint` compares it | Talos nodes join through it; without a port kubeadm uses `bindPort`, so does capstan |
/// | `kubernetesVersion` | carried | |
/// | `networking.*` | carried; `check` finding `dns-domain` | |
/// | `apiServer.certSANs`, `apiServer.extraArgs` | carried; `check` findings `apiserver-*` | |
/// | `apiServer.extraVolumes` | warned (`kubeadm-config`) | host files the flags read are not on Talos nodes unless an overlay carries them (`machine.files`, `cluster.apiServer.extraVolumes`) |
/// | `apiServer.extraEnvs`, `etcd.local.extraEnvs` (v1beta4) | warned (`kubeadm-config`) | Talos runs them without (carry with `cluster.apiServer.env` / an overlay) |
/// | `apiServer.timeoutForControlPlane` (v1beta3) | ignored | `kubeadm init` only |
/// | `controllerManager`, `scheduler` | flagged (`kubeadm-config`); compared from their manifests elsewhere | Talos runs its own flags |
/// | `etcd.local.extraArgs`, `imageTag` | carried / compared (`etcd-args`, `versions`) | |
/// | `etcd.local.dataDir` | ignored | the Talos members keep their data in Talos's own `/var/lib/etcd`; the kubeadm data dir leaves with its node |
/// | `etcd.local.serverCertSANs`, `peerCertSANs` | warned (`kubeadm-config`) | Talos members' certificates name only the node; clients reaching etcd by another name fail TLS |
/// | `etcd.local.imageRepository` | ignored | Talos runs its own etcd image (`cluster.etcd.image`) |
/// | `etcd.external` | refused (`etcd-topology`) | |
/// | `imageRepository` | refused (`kubeadm-config`) unless `spec.talos.registryMirrors` has `registry.k8s.io` | Talos pulls the control plane from `registry.k8s.io` (Talos v1.10.6 `constants.go:404-416`) |
/// | `dns.disabled`, `proxy.disabled` (v1beta4) | warned / refused (`kubeadm-config`) | Talos installs CoreDNS and kube-proxy when missing |
/// | `dns.imageRepository`, `dns.imageTag` | ignored | the running CoreDNS stays; Talos never upgrades it |
/// | `certificatesDir` | ignored | `import` takes the files themselves |
/// | `featureGates` | ignored | kubeadm's own gates (`PublicKeysECDSA`, `EtcdLearnerMode`, …) change what `kubeadm` does, not what the cluster runs; the keys are read as they are |
/// | `encryptionAlgorithm` (v1beta4) | ignored | `import` reads the CA and service-account keys whatever their algorithm (RSA or ECDSA: `.ci/run` imports both) |
/// | `certificateValidityPeriod`, `caCertificateValidityPeriod` (v1beta4) | ignored | Talos issues and rotates its own leaf certificates; the CAs are imported with their own expiry (`check` finding `ca-expiry`) |
pub fn parse_cluster_configuration(
    label: &str,
    bytes: &[u8],
) -> Result<ClusterConfigFacts, KubeadmError> {
    let docs = parse_yaml_stream(label, bytes)?;
    let d = Doc { label };
    let mut found = Vec::new();
    let mut kinds = Vec::new();
    let mut local_api_bind_port = None;
    for (i, doc) in docs.iter().enumerate() {
        let path = if docs.len() > 1 {
            format!("(document {})", i + 1)
        } else {
            "(document)".into()
        };
        let m = d.as_map(doc, &path)?;
        let kind = d.opt_str(m, "", "kind")?.unwrap_or("");
        match kind {
            "ClusterConfiguration" => found.push(m),
            "InitConfiguration" if local_api_bind_port.is_none() => {
                let ep = "localAPIEndpoint";
                if let Some(api) = d.opt_map(m, "", ep)? {
                    local_api_bind_port = match api.get("bindPort") {
                        None | Some(Value::Null) => None,
                        Some(v) => {
                            let path = format!("InitConfiguration.{ep}.bindPort");
                            let n = v
                                .as_u64()
                                .ok_or_else(|| d.wrong(&path, "a port number", v))?;
                            match u16::try_from(n) {
                                Ok(0) => None, // kubeadm defaults 0 to 6443
                                Ok(p) => Some(p),
                                Err(_) => {
                                    return Err(d.invalid(
                                        &path,
                                        format!("expected a port number 1-65535, found {n}"),
                                    ))
                                }
                            }
                        }
                    };
                }
                kinds.push(kind.to_string());
            }
            "ConfigMap" => {
                if let Some(data) = d.opt_map(m, "", "data")? {
                    if let Some(text) = d.opt_str(data, "data", "ClusterConfiguration")? {
                        let inner_label = format!("{label} (data.ClusterConfiguration)");
                        return parse_cluster_configuration(&inner_label, text.as_bytes());
                    }
                }
                kinds.push(kind.to_string());
            }
            _ => kinds.push(if kind.is_empty() {
                "(no kind)".into()
            } else {
                kind.to_string()
            }),
        }
    }
    let root = match found.as_slice() {
        [one] => *one,
        [] => {
            return Err(KubeadmError::Document {
                label: label.to_string(),
                problem: format!(
                    "no ClusterConfiguration document (found {}); expected kubeadm's \
                     ClusterConfiguration or the kubeadm-config ConfigMap",
                    if kinds.is_empty() {
                        "nothing".to_string()
                    } else {
                        kinds.join(", ")
                    }
                ),
            })
        }
        more => {
            return Err(KubeadmError::Document {
                label: label.to_string(),
                problem: format!(
                    "{} ClusterConfiguration documents; expected one",
                    more.len()
                ),
            })
        }
    };

    let api_version = d.opt_str(root, "", "apiVersion")?.unwrap_or("");
    let v1beta4 = match api_version {
        "kubeadm.k8s.io/v1beta3" => false,
        "kubeadm.k8s.io/v1beta4" => true,
        other => {
            return Err(KubeadmError::Document {
                label: label.to_string(),
                problem: format!(
                    "ClusterConfiguration apiVersion {other:?} is not supported; expected \
                     kubeadm.k8s.io/v1beta3 or kubeadm.k8s.io/v1beta4"
                ),
            })
        }
    };

    let control_plane_endpoint = match d.opt_str(root, "", "controlPlaneEndpoint")? {
        None | Some("") => None,
        Some(s) => {
            let mut ep = parse_endpoint(s).map_err(|p| d.invalid("controlPlaneEndpoint", p))?;
            // kubeadm: "specified but without a TCP port, the BindPort is used" (v1beta4
            // `types.go`, ClusterConfiguration.ControlPlaneEndpoint).
            if let (false, Some(p)) = (endpoint_has_port(s), local_api_bind_port) {
                ep.port = p;
            }
            Some(ep)
        }
    };
    let kubernetes_version = match d.opt_str(root, "", "kubernetesVersion")? {
        None | Some("") => None,
        Some(s) => Some(normalize_version(s).map_err(|p| d.invalid("kubernetesVersion", p))?),
    };

    let (dns_domain, pod_subnets, service_subnets) = networking(&d, root)?;

    let mut extras = component_extras(&d, root, v1beta4)?;

    let (api_server_extra_args, api_server_cert_sans) =
        api_server_facts(&d, root, v1beta4, &mut extras)?;

    let (etcd_image_tag, etcd_external, etcd_extra_args) = etcd_facts(&d, root, v1beta4, &mut extras)?;

    Ok(ClusterConfigFacts {
        api_version: api_version.to_string(),
        cluster_name: d
            .opt_str(root, "", "clusterName")?
            .filter(|s| !s.is_empty())
            .map(str::to_string),
        control_plane_endpoint,
        kubernetes_version,
        dns_domain,
        pod_subnets,
        service_subnets,
        api_server_extra_args,
        api_server_cert_sans,
        etcd_image_tag,
        etcd_external,
        etcd_extra_args,
        local_api_bind_port,
        extras,
    })
}

/// What `import` reports without carrying it: the image repository, CoreDNS and kube-proxy
/// disabled (v1beta4), the controller manager's and scheduler's extra args.
fn component_extras(
    d: &Doc<'_>,
    root: &Map<String, Value>,
    v1beta4: bool,
) -> Result<ClusterConfigExtras, KubeadmError> {
    let mut extras = ClusterConfigExtras {
        image_repository: d
            .opt_str(root, "", "imageRepository")?
            .filter(|s| !s.is_empty())
            .map(str::to_string),
        ..ClusterConfigExtras::default()
    };
    for (key, flag) in [
        ("dns", &mut extras.dns_disabled),
        ("proxy", &mut extras.proxy_disabled),
    ] {
        if let Some(m) = d.opt_map(root, "", key)? {
            *flag = match m.get("disabled") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(other) => return Err(d.wrong(&join(key, "disabled"), "a boolean", other)),
            };
        }
    }
    for (key, args) in [
        (
            "controllerManager",
            &mut extras.controller_manager_extra_args,
        ),
        ("scheduler", &mut extras.scheduler_extra_args),
    ] {
        if let Some(m) = d.opt_map(root, "", key)? {
            *args = extra_args(d, m, &join(key, "extraArgs"), v1beta4)?;
        }
    }
    Ok(extras)
}

/// `apiServer`: its extra args (the flags `check` compares), its certSANs, and what
/// `extras` reports (extra volumes, extra envs).
fn api_server_facts(
    d: &Doc<'_>,
    root: &Map<String, Value>,
    v1beta4: bool,
    extras: &mut ClusterConfigExtras,
) -> Result<(FlagMap, Vec<String>), KubeadmError> {
    let mut api_server_extra_args = FlagMap::new();
    let mut api_server_cert_sans = Vec::new();
    if let Some(api) = d.opt_map(root, "", "apiServer")? {
        if let Some(sans) = d.opt_seq(api, "apiServer", "certSANs")? {
            api_server_cert_sans = d.string_list(sans, "apiServer.certSANs")?;
        }
        api_server_extra_args = extra_args(d, api, "apiServer.extraArgs", v1beta4)?;
        if let Some(vols) = d.opt_seq(api, "apiServer", "extraVolumes")? {
            for (i, v) in vols.iter().enumerate() {
                let path = format!("apiServer.extraVolumes[{i}]");
                let m = d.as_map(v, &path)?;
                let host = d.opt_str(m, &path, "hostPath")?.unwrap_or("");
                let mount = d.opt_str(m, &path, "mountPath")?.unwrap_or("");
                extras
                    .api_server_extra_volumes
                    .push(format!("{host} → {mount}"));
            }
        }
        extras
            .extra_envs
            .extend(env_names(d, api, "apiServer.extraEnvs")?);
    }
    Ok((api_server_extra_args, api_server_cert_sans))
}

/// `etcd`: the local etcd's image tag and extra args (and, into `extras`, its extra envs
/// and certificate SANs), and whether it is external.
fn etcd_facts(
    d: &Doc<'_>,
    root: &Map<String, Value>,
    v1beta4: bool,
    extras: &mut ClusterConfigExtras,
) -> Result<(Option<String>, bool, FlagMap), KubeadmError> {
    let mut etcd_image_tag = None;
    let mut etcd_external = false;
    let mut etcd_extra_args = FlagMap::new();
    if let Some(etcd) = d.opt_map(root, "", "etcd")? {
        if let Some(local) = d.opt_map(etcd, "etcd", "local")? {
            etcd_extra_args = extra_args(d, local, "etcd.local.extraArgs", v1beta4)?;
            extras
                .extra_envs
                .extend(env_names(d, local, "etcd.local.extraEnvs")?);
            for (key, kind) in [("serverCertSANs", "server"), ("peerCertSANs", "peer")] {
                if let Some(sans) = d.opt_seq(local, "etcd.local", key)? {
                    let sans = d.string_list(sans, &join("etcd.local", key))?;
                    extras
                        .etcd_cert_sans
                        .extend(sans.into_iter().map(|s| format!("{kind}: {s}")));
                }
            }
            if let Some(tag) = local.get("imageTag").filter(|v| !v.is_null()) {
                let tag = d.scalar_text(tag, "etcd.local.imageTag")?;
                etcd_image_tag = Some(tag).filter(|t| !t.is_empty());
            }
        }
        etcd_external = d.opt_map(etcd, "etcd", "external")?.is_some();
    }
    Ok((etcd_image_tag, etcd_external, etcd_extra_args))
}

/// `networking`: the DNS domain (kubeadm's default when empty), the pod and service
/// subnets (comma-separated for dual stack).
fn networking(
    d: &Doc<'_>,
    root: &Map<String, Value>,
) -> Result<(String, Vec<String>, Vec<String>), KubeadmError> {
    let mut dns_domain = DEFAULT_DNS_DOMAIN.to_string();
    let mut pod_subnets = Vec::new();
    let mut service_subnets = Vec::new();
    if let Some(net) = d.opt_map(root, "", "networking")? {
        if let Some(s) = d
            .opt_str(net, "networking", "dnsDomain")?
            .filter(|s| !s.is_empty())
        {
            dns_domain = s.to_string();
        }
        if let Some(s) = d.opt_str(net, "networking", "podSubnet")? {
            pod_subnets = split_list(s);
        }
        if let Some(s) = d.opt_str(net, "networking", "serviceSubnet")? {
            service_subnets = split_list(s);
        }
    }
    Ok((dns_domain, pod_subnets, service_subnets))
}
