//! CNI DaemonSet ↔ Talos: whether the CNI the kubeadm cluster runs (Cilium, Calico,
//! Flannel, …, read from its DaemonSet and, for Cilium, the `cilium-config` ConfigMap)
//! starts on a Talos node as it is, and whether it replaces kube-proxy.
//!
//! Facts (siderolabs/talos v1.10.6 unless said otherwise):
//! - Talos starts containerd (the CRI) with `cap_sys_boot` and `cap_sys_module` dropped
//!   from its bounding set (`pkg/machinery/constants/constants.go:1290-1294`
//!   `DefaultDroppedCapabilities`, `internal/app/machined/pkg/system/services/cri.go:132`,
//!   `runner/process/process.go:104-121`; `website/content/v1.10/learn-more/process-capabilities.md`).
//!   containerd 2.0.5 (Talos 1.10's, `hack/release.toml:24`) turns `capabilities.add` into
//!   `CAP_<NAME>` as given (`internal/cri/opts/spec_opts.go:170-203`); runc 1.2.6 then
//!   cannot raise a capability its parent lacks, and the container fails to start
//!   (`libcontainer/init_linux.go:360-361` "unable to apply caps",
//!   `process_linux.go:786-787`, `container_linux.go:337-338`, `create.go:69`). A
//!   `privileged: true` container gets containerd's own capabilities instead
//!   (`pkg/oci/spec_opts.go:1311-1312`, `spec_opts_linux.go:63-71`): it starts, without
//!   `CAP_SYS_MODULE`.
//! - Talos's Cilium guide (`website/content/v1.10/kubernetes-guides/network/deploying-cilium.md`)
//!   installs Cilium with `SYS_MODULE` removed from the capability lists,
//!   `cgroup.autoMount.enabled=false`, `cgroup.hostRoot=/sys/fs/cgroup` (where Talos mounts
//!   cgroup2: `constants.go:747-748`) and, for kube-proxy replacement,
//!   `k8sServiceHost=localhost`, `k8sServicePort=7445`: KubePrism, on by default since
//!   Talos 1.6 (`kubernetes-guides/configuration/kubeprism.md:25,43`).
//! - The Talos root filesystem is a read-only squashfs; `/var` (EPHEMERAL), the pseudo
//!   and tmpfs file systems (`/dev`, `/proc`, `/run`, `/sys`, `/tmp`, `/system`) and the
//!   overlays `/etc/cni`, `/etc/kubernetes`, `/usr/libexec/kubernetes`, `/opt` are
//!   writable (`learn-more/architecture.md:30,36-51`, `constants.go:1282-1288`).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{canonical_san, CheckError, Finding, Severity};

/// The finding id of [`cni_daemonset`].
pub const CNI_FINDING_ID: &str = "cni-daemonset";

/// The capabilities Talos never grants a container (upper case, as Kubernetes writes them
/// in `capabilities.add`): `DefaultDroppedCapabilities`.
pub const TALOS_DROPPED_CAPABILITIES: &[&str] = &["SYS_BOOT", "SYS_MODULE"];

/// What a container that asks for a capability Talos dropped shows as its
/// `lastState.terminated.message` (reason `StartError`): containerd 2.0.5 and runc 1.2.6
/// wrapping (see the module docs); reported in siderolabs/talos#11352 (Talos 1.9.5). The
/// Talos page `process-capabilities.md:19` quotes the runc 1.1 form, without
/// `error during container init: `.
pub const APPLY_CAPS_ERROR: &str = "failed to create containerd task: failed to create shim task: \
OCI runtime create failed: runc create failed: unable to start container process: error during \
container init: unable to apply caps: operation not permitted";

/// KubePrism's port: Talos's apiserver load balancer on `localhost` of every node.
pub const KUBEPRISM_PORT: u16 = 7445;

/// Where Talos mounts the cgroup2 file system (`constants.CgroupMountPath`).
pub const TALOS_CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The host paths (and everything under them) that are writable on a Talos node; every
/// other path is on the read-only root squashfs.
pub const TALOS_WRITABLE_HOST_PATHS: &[&str] = &[
    "/var",
    "/run",
    "/tmp",
    "/dev",
    "/proc",
    "/sys",
    "/system",
    "/etc/cni",
    "/etc/kubernetes",
    "/usr/libexec/kubernetes",
    "/opt",
];

/// Which CNI a DaemonSet belongs to, from its name and images.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CniKind {
    /// The Cilium agent (`cilium-agent` container, `…/cilium` image).
    Cilium,
    /// Calico's `calico-node`.
    Calico,
    /// Flannel's `kube-flannel` DaemonSet.
    Flannel,
    /// Anything else (another CNI, `cilium-envoy`, kube-proxy, …): checked generically.
    Other,
}

impl CniKind {
    /// The name used in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            CniKind::Cilium => "Cilium",
            CniKind::Calico => "Calico",
            CniKind::Flannel => "Flannel",
            CniKind::Other => "CNI",
        }
    }
}

/// A container's environment variable: a literal value, or `None` when it comes from
/// `valueFrom`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvVar {
    /// The variable name.
    pub name: String,
    /// The literal value, if any.
    pub value: Option<String>,
}

/// A container's volume mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The volume name.
    pub volume: String,
    /// Where it is mounted in the container.
    pub mount_path: String,
    /// `readOnly: true`.
    pub read_only: bool,
}

/// What the check reads of one container or init container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerFacts {
    /// `name`.
    pub name: String,
    /// An init container (`initContainers`) rather than a container.
    pub init: bool,
    /// `image` (empty if absent).
    pub image: String,
    /// `securityContext.privileged: true`.
    pub privileged: bool,
    /// `securityContext.capabilities.add`, as written.
    pub cap_add: Vec<String>,
    /// `securityContext.capabilities.drop`, as written.
    pub cap_drop: Vec<String>,
    /// `env`.
    pub env: Vec<EnvVar>,
    /// The ConfigMaps named by `envFrom[].configMapRef.name`.
    pub env_from_config_maps: Vec<String>,
    /// `command` then `args`.
    pub args: Vec<String>,
    /// `volumeMounts`.
    pub mounts: Vec<Mount>,
}

impl ContainerFacts {
    /// The field path of this container in its DaemonSet: `spec.template.spec.containers[name]`.
    pub fn path(&self) -> String {
        format!(
            "spec.template.spec.{}[{}]",
            if self.init {
                "initContainers"
            } else {
                "containers"
            },
            self.name
        )
    }
    fn env(&self, name: &str) -> Option<&EnvVar> {
        self.env.iter().find(|e| e.name == name)
    }
}

/// A `hostPath` volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPathVolume {
    /// The volume name.
    pub name: String,
    /// `hostPath.path`.
    pub path: String,
    /// `hostPath.type` (`DirectoryOrCreate`, …), if given.
    pub path_type: Option<String>,
}

/// One DaemonSet of the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniDaemonSet {
    /// `metadata.name` (empty if absent).
    pub name: String,
    /// `metadata.namespace` (empty if absent).
    pub namespace: String,
    /// Which CNI it is.
    pub kind: CniKind,
    /// Containers, then init containers.
    pub containers: Vec<ContainerFacts>,
    /// The `hostPath` volumes.
    pub host_paths: Vec<HostPathVolume>,
    /// Fields that could not be read (wrong type), as `path: expected …, found …`.
    pub unreadable: Vec<String>,
}

/// A ConfigMap of the input (`cilium-config`, or one a container reads with `envFrom`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniConfigMap {
    /// `metadata.name`.
    pub name: String,
    /// `data`, string values only.
    pub data: BTreeMap<String, String>,
    /// Keys of `data` whose value is not a string.
    pub unreadable: Vec<String>,
}

/// What [`find_cni_daemonsets`] read from a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniInput {
    /// The file, as the user named it.
    pub file: String,
    /// Every DaemonSet in it (at least one).
    pub daemonsets: Vec<CniDaemonSet>,
    /// Every ConfigMap in it.
    pub config_maps: Vec<CniConfigMap>,
}

impl CniInput {
    fn config_map(&self, name: &str) -> Option<&CniConfigMap> {
        self.config_maps.iter().find(|c| c.name == name)
    }
    fn cilium_config(&self) -> Option<&CniConfigMap> {
        self.config_map("cilium-config")
    }
    fn kind(&self, kind: CniKind) -> Option<&CniDaemonSet> {
        self.daemonsets.iter().find(|d| d.kind == kind)
    }
}

const EXPECTED_INPUT: &str = "the CNI DaemonSet, alone, in a `List`, or with its ConfigMap \
(`kubectl -n kube-system get ds/cilium cm/cilium-config -o yaml`)";

/// Read the CNI DaemonSets and ConfigMaps among the documents of a file: DaemonSet and
/// ConfigMap documents, and the items of a `List` (or `DaemonSetList`/`ConfigMapList`).
/// Other kinds are ignored. An error when there is no DaemonSet, or a DaemonSet has no
/// `spec.template.spec.containers` list of named containers; a field of the wrong type
/// deeper down is recorded in `CniDaemonSet::unreadable` and reported by the check.
pub fn find_cni_daemonsets(file: &str, docs: Vec<Value>) -> Result<CniInput, CheckError> {
    let listed = crate::resource::list_items(docs);
    let mut kinds: Vec<String> = listed
        .malformed
        .iter()
        .map(|k| format!("{k} without an items list"))
        .collect();
    let objects = listed.objects;
    let mut daemonsets = Vec::new();
    let mut config_maps = Vec::new();
    for (kind, obj) in objects {
        match kind.as_str() {
            "DaemonSet" => daemonsets.push(read_daemonset(file, &obj)?),
            "ConfigMap" => config_maps.push(read_config_map(&obj)),
            "" => kinds.push("(no kind)".into()),
            k => kinds.push(k.to_string()),
        }
    }
    if daemonsets.is_empty() {
        kinds.dedup();
        return Err(CheckError::CniDaemonSet {
            file: file.to_string(),
            found: if kinds.is_empty() && config_maps.is_empty() {
                "no document".into()
            } else {
                let mut k = kinds;
                if !config_maps.is_empty() {
                    k.push(format!("{} ConfigMap(s)", config_maps.len()));
                }
                format!("no DaemonSet (found {})", k.join(", "))
            },
            expected: EXPECTED_INPUT.into(),
        });
    }
    Ok(CniInput {
        file: file.to_string(),
        daemonsets,
        config_maps,
    })
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

/// Reads optional fields, recording wrong types.
struct Reader<'a> {
    unreadable: &'a mut Vec<String>,
}

impl Reader<'_> {
    fn wrong(&mut self, path: &str, expected: &str, v: &Value) {
        self.unreadable.push(format!(
            "{path}: expected {expected}, found {}",
            type_name(v)
        ));
    }
    fn object<'v>(
        &mut self,
        m: &'v Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Option<&'v Map<String, Value>> {
        match m.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Object(o)) => Some(o),
            Some(v) => {
                self.wrong(&format!("{path}.{key}"), "a map", v);
                None
            }
        }
    }
    fn array<'v>(&mut self, m: &'v Map<String, Value>, key: &str, path: &str) -> &'v [Value] {
        match m.get(key) {
            None | Some(Value::Null) => &[],
            Some(Value::Array(a)) => a,
            Some(v) => {
                self.wrong(&format!("{path}.{key}"), "a list", v);
                &[]
            }
        }
    }
    fn string(&mut self, m: &Map<String, Value>, key: &str, path: &str) -> Option<String> {
        match m.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(v) => {
                self.wrong(&format!("{path}.{key}"), "a string", v);
                None
            }
        }
    }
    fn bool(&mut self, m: &Map<String, Value>, key: &str, path: &str) -> bool {
        match m.get(key) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(v) => {
                self.wrong(&format!("{path}.{key}"), "true or false", v);
                false
            }
        }
    }
    fn strings(&mut self, m: &Map<String, Value>, key: &str, path: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (i, v) in self.array(m, key, path).iter().enumerate() {
            match v {
                Value::String(s) => out.push(s.clone()),
                v => self.wrong(&format!("{path}.{key}[{i}]"), "a string", v),
            }
        }
        out
    }
}

fn read_daemonset(file: &str, ds: &Value) -> Result<CniDaemonSet, CheckError> {
    let name = ds
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let namespace = ds
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let label = if name.is_empty() {
        "a DaemonSet without metadata.name".to_string()
    } else {
        format!("DaemonSet `{name}`")
    };
    let bad = |found: String| CheckError::CniDaemonSet {
        file: file.to_string(),
        found,
        expected: format!(
            "{EXPECTED_INPUT}, whose spec.template.spec.containers lists named containers"
        ),
    };
    let Some(pod) = ds.pointer("/spec/template/spec").and_then(Value::as_object) else {
        return Err(bad(format!("{label} without a spec.template.spec map")));
    };
    let mut unreadable = Vec::new();
    let mut containers = Vec::new();
    for (key, init) in [("containers", false), ("initContainers", true)] {
        let list = match pod.get(key) {
            Some(Value::Array(a)) => a.as_slice(),
            None | Some(Value::Null) if init => &[],
            Some(v) => {
                return Err(bad(format!(
                    "{label} whose spec.template.spec.{key} is {}",
                    type_name(v)
                )))
            }
            None => return Err(bad(format!("{label} without spec.template.spec.{key}"))),
        };
        if !init && list.is_empty() {
            return Err(bad(format!("{label} with no containers")));
        }
        for (i, c) in list.iter().enumerate() {
            let Some(c) = c.as_object() else {
                return Err(bad(format!(
                    "{label} whose spec.template.spec.{key}[{i}] is {}",
                    type_name(c)
                )));
            };
            let Some(cname) = c.get("name").and_then(Value::as_str) else {
                return Err(bad(format!(
                    "{label} whose spec.template.spec.{key}[{i}] has no name"
                )));
            };
            containers.push(read_container(cname, init, c, &mut unreadable));
        }
    }
    let mut r = Reader {
        unreadable: &mut unreadable,
    };
    let mut host_paths = Vec::new();
    for (i, v) in r
        .array(pod, "volumes", "spec.template.spec")
        .iter()
        .enumerate()
    {
        let path = format!("spec.template.spec.volumes[{i}]");
        let Some(v) = v.as_object() else {
            r.wrong(&path, "a map", v);
            continue;
        };
        let Some(hp) = r.object(v, "hostPath", &path) else {
            continue;
        };
        let vname = r.string(v, "name", &path).unwrap_or_default();
        let hpath = format!("{path}.hostPath");
        let Some(p) = r.string(hp, "path", &hpath) else {
            continue;
        };
        let path_type = r.string(hp, "type", &hpath);
        host_paths.push(HostPathVolume {
            name: vname,
            path: p,
            path_type,
        });
    }
    let kind = cni_kind(&name, &containers);
    Ok(CniDaemonSet {
        name,
        namespace,
        kind,
        containers,
        host_paths,
        unreadable,
    })
}

fn read_container(
    name: &str,
    init: bool,
    c: &Map<String, Value>,
    unreadable: &mut Vec<String>,
) -> ContainerFacts {
    let path = format!(
        "spec.template.spec.{}[{name}]",
        if init { "initContainers" } else { "containers" }
    );
    let mut r = Reader { unreadable };
    let image = r.string(c, "image", &path).unwrap_or_default();
    let mut privileged = false;
    let mut cap_add = Vec::new();
    let mut cap_drop = Vec::new();
    if let Some(sc) = r.object(c, "securityContext", &path) {
        let scp = format!("{path}.securityContext");
        privileged = r.bool(sc, "privileged", &scp);
        if let Some(caps) = r.object(sc, "capabilities", &scp) {
            let cp = format!("{scp}.capabilities");
            cap_add = r.strings(caps, "add", &cp);
            cap_drop = r.strings(caps, "drop", &cp);
        }
    }
    let mut env = Vec::new();
    for (i, e) in r.array(c, "env", &path).iter().enumerate() {
        let ep = format!("{path}.env[{i}]");
        let Some(e) = e.as_object() else {
            r.wrong(&ep, "a map", e);
            continue;
        };
        let Some(n) = r.string(e, "name", &ep) else {
            continue;
        };
        let value = r.string(e, "value", &ep);
        env.push(EnvVar { name: n, value });
    }
    let mut env_from_config_maps = Vec::new();
    for (i, e) in r.array(c, "envFrom", &path).iter().enumerate() {
        let ep = format!("{path}.envFrom[{i}]");
        let Some(e) = e.as_object() else {
            r.wrong(&ep, "a map", e);
            continue;
        };
        if let Some(cm) = r.object(e, "configMapRef", &ep) {
            if let Some(n) = r.string(cm, "name", &format!("{ep}.configMapRef")) {
                env_from_config_maps.push(n);
            }
        }
    }
    let mut args = r.strings(c, "command", &path);
    args.extend(r.strings(c, "args", &path));
    let mut mounts = Vec::new();
    for (i, m) in r.array(c, "volumeMounts", &path).iter().enumerate() {
        let mp = format!("{path}.volumeMounts[{i}]");
        let Some(m) = m.as_object() else {
            r.wrong(&mp, "a map", m);
            continue;
        };
        let (Some(volume), Some(mount_path)) =
            (r.string(m, "name", &mp), r.string(m, "mountPath", &mp))
        else {
            continue;
        };
        let read_only = r.bool(m, "readOnly", &mp);
        mounts.push(Mount {
            volume,
            mount_path,
            read_only,
        });
    }
    ContainerFacts {
        name: name.to_string(),
        init,
        image,
        privileged,
        cap_add,
        cap_drop,
        env,
        env_from_config_maps,
        args,
        mounts,
    }
}

fn read_config_map(cm: &Value) -> CniConfigMap {
    let name = cm
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let mut data = BTreeMap::new();
    let mut unreadable = Vec::new();
    if let Some(Value::Object(d)) = cm.get("data") {
        for (k, v) in d {
            match v {
                Value::String(s) => {
                    data.insert(k.clone(), s.clone());
                }
                _ => unreadable.push(k.clone()),
            }
        }
    }
    CniConfigMap {
        name,
        data,
        unreadable,
    }
}

/// An image reference without registry tag or digest: `quay.io/cilium/cilium:v1.15.6@…`
/// → `quay.io/cilium/cilium`.
fn image_repo(image: &str) -> &str {
    let no_digest = image.split('@').next().unwrap_or("");
    let slash = no_digest.rfind('/').map_or(0, |i| i + 1);
    match no_digest.get(slash..).and_then(|tail| tail.find(':')) {
        Some(colon) => no_digest.get(..slash + colon).unwrap_or(no_digest),
        None => no_digest,
    }
}

fn cni_kind(ds_name: &str, containers: &[ContainerFacts]) -> CniKind {
    let repos: Vec<&str> = containers.iter().map(|c| image_repo(&c.image)).collect();
    let last = |r: &&str| r.rsplit('/').next().unwrap_or("").to_string();
    if containers.iter().any(|c| c.name == "cilium-agent")
        || repos.iter().any(|r| last(r) == "cilium")
    {
        CniKind::Cilium
    } else if ds_name == "calico-node"
        || repos
            .iter()
            .any(|r| r.ends_with("calico/node") || last(r) == "node" && r.contains("calico"))
    {
        CniKind::Calico
    } else if ds_name.contains("flannel") || repos.iter().any(|r| last(r) == "flannel") {
        CniKind::Flannel
    } else {
        CniKind::Other
    }
}

/// Whether the CNI replaces kube-proxy: Cilium's `kube-proxy-replacement` (`cilium-config`,
/// else the agent's `--kube-proxy-replacement` flag): `true`/`strict` → yes,
/// `false`/`disabled`/`partial`/`probe` → no (kube-proxy still needed); Calico with
/// `FELIX_BPFENABLED=true` on `calico-node` → yes (otherwise unknown: a FelixConfiguration
/// may enable eBPF); Flannel alone → no (it programs no Service load balancing). `None`
/// when the input does not tell.
pub fn replaces_kube_proxy(input: &CniInput) -> Option<bool> {
    if let Some(ds) = input.kind(CniKind::Cilium) {
        let from_config = input
            .cilium_config()
            .and_then(|c| c.data.get("kube-proxy-replacement"))
            .cloned();
        let from_flag = || {
            let agent = ds.containers.iter().find(|c| c.name == "cilium-agent")?;
            let mut it = agent.args.iter();
            while let Some(a) = it.next() {
                if let Some(v) = a.strip_prefix("--kube-proxy-replacement=") {
                    return Some(v.to_string());
                }
                if a == "--kube-proxy-replacement" {
                    return it.next().cloned();
                }
            }
            None
        };
        // A flag on the agent's command line wins over the config directory.
        return match from_flag().or(from_config)?.trim() {
            "true" | "strict" => Some(true),
            "false" | "disabled" | "partial" | "probe" => Some(false),
            _ => None,
        };
    }
    if let Some(ds) = input.kind(CniKind::Calico) {
        let bpf = ds
            .containers
            .iter()
            .filter_map(|c| c.env("FELIX_BPFENABLED")?.value.as_deref())
            .any(|v| v.trim().eq_ignore_ascii_case("true"));
        return if bpf { Some(true) } else { None };
    }
    if input.kind(CniKind::Flannel).is_some() {
        return Some(false);
    }
    None
}

/// One thing found wrong (or noted) for the summary finding.
struct Problem {
    severity: Severity,
    fields: Vec<String>,
    summary: String,
    fix: String,
    error: Option<&'static str>,
}

/// Compare the CNI DaemonSet(s) with what Talos nodes allow: capabilities Talos never grants
/// (blocking: the pod cannot start), Cilium's cgroup settings against the Talos guide, the
/// apiserver address the CNI is given (`KUBERNETES_SERVICE_HOST`/`PORT`) against KubePrism
/// (`localhost:7445`) and the cluster's control-plane endpoint, and `hostPath` volumes
/// mounted writable on Talos's read-only root. One finding, [`CNI_FINDING_ID`]: blocking if
/// any problem blocks, else warning if any warns, else pass.
pub(super) fn cni_daemonset(input: &CniInput, endpoint_host: &str, endpoint_port: u16) -> Finding {
    let multi = input.daemonsets.len() > 1;
    let mut problems = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    for ds in &input.daemonsets {
        let at = |p: &str| {
            if multi {
                format!("{} daemonset/{} {p}", input.file, ds.name)
            } else {
                format!("{} {p}", input.file)
            }
        };
        capabilities(ds, &at, &mut problems, &mut notes);
        host_paths(ds, &at, &mut problems);
        if !ds.unreadable.is_empty() {
            problems.push(Problem {
                severity: Severity::Warning,
                fields: vec![at(&ds.unreadable.join("; "))],
                summary: format!(
                    "DaemonSet `{}`: {} field(s) of the wrong type, not checked ({})",
                    ds.name,
                    ds.unreadable.len(),
                    ds.unreadable.join("; ")
                ),
                fix: "pass the DaemonSet as the API server returns it (`kubectl get ds … -o yaml`)"
                    .into(),
                error: None,
            });
        }
    }
    if let Some(ds) = input.kind(CniKind::Cilium) {
        cilium_cgroup(input, ds, &mut problems);
    }
    apiserver_address(
        input,
        endpoint_host,
        endpoint_port,
        &mut problems,
        &mut notes,
    );
    for cm in &input.config_maps {
        if !cm.unreadable.is_empty() && cm.name == "cilium-config" {
            problems.push(Problem {
                severity: Severity::Warning,
                fields: vec![format!("{} configmap/{} data", input.file, cm.name)],
                summary: format!(
                    "ConfigMap `{}`: data key(s) {} are not strings, not read",
                    cm.name,
                    cm.unreadable.join(", ")
                ),
                fix: "pass the ConfigMap as the API server returns it".into(),
                error: None,
            });
        }
    }

    let kinds: Vec<String> = input
        .daemonsets
        .iter()
        .map(|d| {
            if d.namespace.is_empty() {
                format!("{} (`{}`)", d.kind.as_str(), d.name)
            } else {
                format!("{} (`{}/{}`)", d.kind.as_str(), d.namespace, d.name)
            }
        })
        .collect();
    let what = kinds.join(", ");
    let severity = problems
        .iter()
        .map(|p| p.severity)
        .min()
        .unwrap_or(Severity::Pass);
    if problems.is_empty() {
        let mut summary = format!(
            "{what}: no capability Talos drops, writable host paths only{}",
            if input
                .cilium_config()
                .is_some_and(|c| c.data.contains_key("cgroup-root"))
            {
                ", cgroup root /sys/fs/cgroup as Talos mounts it"
            } else {
                ""
            }
        );
        for n in &notes {
            summary.push_str("; ");
            summary.push_str(n);
        }
        return Finding::new(CNI_FINDING_ID, Severity::Pass, input.file.clone(), summary);
    }
    let fields: Vec<String> = problems.iter().flat_map(|p| p.fields.clone()).collect();
    let mut summary = format!("{what}: ");
    summary.push_str(
        &problems
            .iter()
            .map(|p| p.summary.as_str())
            .collect::<Vec<_>>()
            .join("; "),
    );
    for n in &notes {
        summary.push_str("; ");
        summary.push_str(n);
    }
    let fix = problems
        .iter()
        .map(|p| p.fix.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    let mut f = Finding::new(CNI_FINDING_ID, severity, fields.join(", "), summary).fix(fix);
    if let Some(e) = problems
        .iter()
        .filter(|p| p.severity == severity)
        .find_map(|p| p.error)
    {
        f = f.error(e);
    }
    f
}

/// The Cilium chart value that sets a container's `capabilities.add`.
fn cilium_capability_value(container: &str) -> Option<&'static str> {
    match container {
        "cilium-agent" => Some("securityContext.capabilities.ciliumAgent"),
        "clean-cilium-state" => Some("securityContext.capabilities.cleanCiliumState"),
        "mount-cgroup" => Some("securityContext.capabilities.mountCgroup"),
        "apply-sysctl-overwrites" => Some("securityContext.capabilities.applySysctlOverwrites"),
        _ => None,
    }
}

/// Capabilities Talos never grants: a non-privileged container adding one cannot start.
/// containerd prefixes `CAP_` to the name as written (upper-cased), so `SYS_MODULE` is the
/// capability and `CAP_SYS_MODULE` an unknown name runc ignores; a name also in `drop`
/// is removed again; `add: [ALL]` gives containerd's own capabilities.
fn capabilities(
    ds: &CniDaemonSet,
    at: &dyn Fn(&str) -> String,
    problems: &mut Vec<Problem>,
    notes: &mut Vec<String>,
) {
    let mut fields = Vec::new();
    let mut found = Vec::new();
    let mut fixes = Vec::new();
    let mut privileged = Vec::new();
    for c in &ds.containers {
        if c.privileged {
            privileged.push(c.name.clone());
            continue;
        }
        let dropped: Vec<String> = c.cap_drop.iter().map(|d| d.to_ascii_uppercase()).collect();
        let bad: Vec<&String> = c
            .cap_add
            .iter()
            .filter(|a| {
                let up = a.to_ascii_uppercase();
                TALOS_DROPPED_CAPABILITIES.contains(&up.as_str()) && !dropped.contains(&up)
            })
            .collect();
        if bad.is_empty() {
            continue;
        }
        let field = format!("{}.securityContext.capabilities.add", c.path());
        fields.push(at(&field));
        let names: Vec<&str> = bad.iter().map(|s| s.as_str()).collect();
        found.push(format!("`{}` adds {}", c.name, names.join(", ")));
        let keep: Vec<&str> = c
            .cap_add
            .iter()
            .filter(|a| !bad.contains(a))
            .map(String::as_str)
            .collect();
        match (ds.kind, cilium_capability_value(&c.name)) {
            (CniKind::Cilium, Some(value)) => {
                fixes.push(format!("`{value}={{{}}}`", keep.join(",")));
            }
            _ => fixes.push(format!(
                "remove {} from `{}` of DaemonSet `{}`",
                names.join(", "),
                field,
                ds.name
            )),
        }
    }
    if !found.is_empty() {
        let fix = if ds.kind == CniKind::Cilium && fixes.iter().all(|f| f.starts_with('`')) {
            format!(
                "set the Cilium Helm values {} (Talos's Cilium guide) and roll the DaemonSet out \
                 before the first Talos node joins",
                fixes.join(", ")
            )
        } else {
            format!(
                "{} and roll the DaemonSet out before the first Talos node joins",
                fixes.join("; ")
            )
        };
        problems.push(Problem {
            severity: Severity::Blocking,
            fields,
            summary: format!(
                "{}: Talos drops CAP_SYS_MODULE and CAP_SYS_BOOT from containerd, so runc cannot \
                 grant them and the pod never starts on a Talos node (StartError), leaving the \
                 node without a CNI",
                found.join(", ")
            ),
            fix,
            error: Some(APPLY_CAPS_ERROR),
        });
    }
    if !privileged.is_empty() {
        notes.push(format!(
            "privileged container(s) {} of `{}` start on Talos with containerd's capabilities, \
             which lack CAP_SYS_MODULE and CAP_SYS_BOOT (no kernel module loading from the pod)",
            privileged
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", "),
            ds.name
        ));
    }
}

/// A host path as compared: absolute, no `.`/`..`/empty components, no trailing `/`.
/// `None` for a path that is not absolute or climbs with `..`.
fn normalize_host_path(p: &str) -> Option<String> {
    if !p.starts_with('/') {
        return None;
    }
    let mut parts = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => return None,
            c => parts.push(c),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// Whether a host path is writable on a Talos node ([`TALOS_WRITABLE_HOST_PATHS`]).
pub fn talos_host_path_writable(path: &str) -> bool {
    let Some(p) = normalize_host_path(path) else {
        return false;
    };
    TALOS_WRITABLE_HOST_PATHS
        .iter()
        .any(|w| p == *w || p.strip_prefix(w).is_some_and(|rest| rest.starts_with('/')))
}

/// `hostPath` volumes a container mounts writable whose path is on Talos's read-only root.
fn host_paths(ds: &CniDaemonSet, at: &dyn Fn(&str) -> String, problems: &mut Vec<Problem>) {
    let mut fields = Vec::new();
    let mut found = Vec::new();
    for v in &ds.host_paths {
        if talos_host_path_writable(&v.path) {
            continue;
        }
        let writers: Vec<&str> = ds
            .containers
            .iter()
            .filter(|c| c.mounts.iter().any(|m| m.volume == v.name && !m.read_only))
            .map(|c| c.name.as_str())
            .collect();
        if writers.is_empty() {
            continue;
        }
        fields.push(at(&format!(
            "spec.template.spec.volumes[{}].hostPath.path",
            v.name
        )));
        found.push(format!(
            "hostPath `{}` (volume `{}`{}) mounted writable by {}",
            v.path,
            v.name,
            v.path_type
                .as_deref()
                .map(|t| format!(", type {t}"))
                .unwrap_or_default(),
            writers
                .iter()
                .map(|w| format!("`{w}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !found.is_empty() {
        problems.push(Problem {
            severity: Severity::Warning,
            fields,
            summary: format!(
                "{}: on Talos that path is on the read-only root squashfs (writable: {}), so \
                 writing to it fails and a missing `…OrCreate` path cannot be created",
                found.join(", "),
                TALOS_WRITABLE_HOST_PATHS.join(", ")
            ),
            fix: format!(
                "move the volume of DaemonSet `{}` under a writable path (e.g. /var/lib/…, /opt/…) \
                 or mount it `readOnly: true` if the CNI only reads it",
                ds.name
            ),
            error: None,
        });
    }
}

/// Cilium's cgroup settings against Talos's guide: no `mount-cgroup` init container
/// (`cgroup.autoMount.enabled=false`) and `cgroup-root` `/sys/fs/cgroup`.
fn cilium_cgroup(input: &CniInput, ds: &CniDaemonSet, problems: &mut Vec<Problem>) {
    let at = |p: &str| {
        if input.daemonsets.len() > 1 {
            format!("{} daemonset/{} {p}", input.file, ds.name)
        } else {
            format!("{} {p}", input.file)
        }
    };
    let mount = ds
        .containers
        .iter()
        .find(|c| c.init && c.name == "mount-cgroup");
    let (root, root_field) = match input
        .cilium_config()
        .and_then(|c| c.data.get("cgroup-root"))
    {
        Some(r) => (
            Some(r.clone()),
            format!("{} configmap/cilium-config data.cgroup-root", input.file),
        ),
        None => match mount.and_then(|m| m.env("CGROUP_ROOT")?.value.clone()) {
            Some(r) => (
                Some(r),
                at("spec.template.spec.initContainers[mount-cgroup].env[CGROUP_ROOT]"),
            ),
            None => (None, String::new()),
        },
    };
    let wrong_root = root
        .as_deref()
        .is_some_and(|r| normalize_host_path(r).as_deref() != Some(TALOS_CGROUP_ROOT));
    if mount.is_none() && !wrong_root {
        return;
    }
    let mut fields = Vec::new();
    let mut what = Vec::new();
    if mount.is_some() {
        fields.push(at("spec.template.spec.initContainers[mount-cgroup]"));
        what.push(
            "the `mount-cgroup` init container mounts cgroup2 itself through nsenter into the \
             host (`cgroup.autoMount.enabled=true`, the chart default); Talos has cgroup2 \
             mounted at /sys/fs/cgroup and its Cilium guide disables this (reported failing \
             on Talos with `nsenter: failed to execute /opt/cni/bin/cilium-mount: Permission \
             denied`, siderolabs/talos#5948)"
                .to_string(),
        );
    }
    if wrong_root {
        fields.push(root_field);
        what.push(format!(
            "cgroup root `{}` is not /sys/fs/cgroup, where Talos mounts cgroup2",
            root.as_deref().unwrap_or("")
        ));
    }
    problems.push(Problem {
        severity: Severity::Warning,
        fields,
        summary: what.join("; "),
        fix: "set the Cilium Helm values `cgroup.autoMount.enabled=false`, \
              `cgroup.hostRoot=/sys/fs/cgroup` (Talos's Cilium guide)"
            .into(),
        error: None,
    });
}

fn is_loopback(host: &str) -> bool {
    matches!(
        canonical_san(host).as_str(),
        "localhost" | "127.0.0.1" | "::1"
    )
}

/// The apiserver address the CNI containers are given, against KubePrism and the endpoint.
fn apiserver_address(
    input: &CniInput,
    endpoint_host: &str,
    endpoint_port: u16,
    problems: &mut Vec<Problem>,
    notes: &mut Vec<String>,
) {
    let endpoint = canonical_san(endpoint_host.trim_start_matches('[').trim_end_matches(']'));
    // (host, port, field) per container that sets the host.
    let mut seen: Vec<(String, Option<String>, String)> = Vec::new();
    for ds in &input.daemonsets {
        for c in &ds.containers {
            let mut host = c
                .env("KUBERNETES_SERVICE_HOST")
                .and_then(|e| e.value.clone());
            let mut port = c
                .env("KUBERNETES_SERVICE_PORT")
                .and_then(|e| e.value.clone());
            let mut field = format!("{}.env[KUBERNETES_SERVICE_HOST]", c.path());
            for cm_name in &c.env_from_config_maps {
                if let Some(cm) = input.config_map(cm_name) {
                    if host.is_none() {
                        if let Some(h) = cm.data.get("KUBERNETES_SERVICE_HOST") {
                            host = Some(h.clone());
                            field = format!(
                                "{} configmap/{cm_name} data.KUBERNETES_SERVICE_HOST",
                                input.file
                            );
                        }
                    }
                    if port.is_none() {
                        port = cm.data.get("KUBERNETES_SERVICE_PORT").cloned();
                    }
                }
            }
            let Some(host) = host else { continue };
            let field = if field.contains("configmap/") {
                field
            } else if input.daemonsets.len() > 1 {
                format!("{} daemonset/{} {field}", input.file, ds.name)
            } else {
                format!("{} {field}", input.file)
            };
            if !seen.iter().any(|(h, p, _)| *h == host && *p == port) {
                seen.push((host, port, field));
            }
        }
    }
    let cilium = input.kind(CniKind::Cilium).is_some();
    let helm = if cilium {
        "set the Cilium Helm values `k8sServiceHost=localhost`, `k8sServicePort=7445` \
         (KubePrism, Talos's Cilium guide)"
            .to_string()
    } else {
        format!("point KUBERNETES_SERVICE_HOST/PORT at localhost:{KUBEPRISM_PORT} (KubePrism)")
    };
    if seen.is_empty() {
        if cilium && replaces_kube_proxy(input) == Some(true) {
            problems.push(Problem {
                severity: Severity::Warning,
                fields: vec![format!(
                    "{} configmap/cilium-config data.kube-proxy-replacement",
                    input.file
                )],
                summary: "Cilium replaces kube-proxy but is given no apiserver address \
                          (k8sServiceHost unset): it reaches the apiserver through the \
                          `kubernetes` Service's ClusterIP, which nothing serves on a new node \
                          before Cilium itself runs"
                    .into(),
                fix: format!(
                    "{helm} (or the control-plane endpoint {endpoint_host}:{endpoint_port})"
                ),
                error: None,
            });
        }
        return;
    }
    let mut fields = Vec::new();
    let mut what = Vec::new();
    for (host, port, field) in &seen {
        let port_num = port.as_deref().and_then(|p| p.trim().parse::<u16>().ok());
        let shown = format!("{host}:{}", port.as_deref().unwrap_or("(port unset)"));
        if is_loopback(host) && port_num == Some(KUBEPRISM_PORT) {
            notes.push(format!(
                "apiserver address {shown}: KubePrism, on every Talos node"
            ));
        } else if canonical_san(host) == endpoint && port_num == Some(endpoint_port) {
            notes.push(format!(
                "apiserver address {shown}: the control-plane endpoint Talos nodes use too \
                 (KubePrism localhost:{KUBEPRISM_PORT} would spread the load)"
            ));
        } else if is_loopback(host) {
            fields.push(field.clone());
            what.push(format!(
                "apiserver address {shown}: on Talos only KubePrism listens on loopback of every \
                 node (localhost:{KUBEPRISM_PORT}); the apiserver's own port is there on \
                 control-plane nodes only"
            ));
        } else if port_num.is_none() {
            fields.push(field.clone());
            what.push(format!(
                "apiserver address {shown}: KUBERNETES_SERVICE_PORT is not a port, so the pod \
                 gets the `kubernetes` Service's port instead"
            ));
        } else {
            fields.push(field.clone());
            what.push(format!(
                "apiserver address {shown} is not the control-plane endpoint \
                 {endpoint_host}:{endpoint_port} Talos nodes use: it keeps working only while \
                 that address serves the apiserver (not after the kubeadm control-plane \
                 machine behind it is removed)"
            ));
        }
    }
    if !what.is_empty() {
        problems.push(Problem {
            severity: Severity::Warning,
            fields,
            summary: what.join("; "),
            fix: format!("{helm}, or the control-plane endpoint {endpoint_host}:{endpoint_port}"),
            error: None,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/cni/cilium-1.15.6-default.yaml"
    ));
    const TALOS: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/cni/cilium-1.15.6-talos-list.yaml"
    ));
    const FLANNEL: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/cni/flannel-0.26.7.yaml"
    ));

    fn input(file: &str, text: &str) -> CniInput {
        let docs = crate::yaml::parse_stream(text).expect("fixture parses");
        find_cni_daemonsets(file, docs).expect("fixture has a DaemonSet")
    }

    fn docs(text: &str) -> Vec<Value> {
        crate::yaml::parse_stream(text).expect("test YAML parses")
    }

    #[test]
    fn default_cilium_blocks_on_sys_module() {
        let i = input("cilium.yaml", DEFAULT);
        assert_eq!(i.daemonsets.len(), 1);
        assert_eq!(i.daemonsets[0].kind, CniKind::Cilium);
        assert!(
            i.daemonsets[0].unreadable.is_empty(),
            "{:?}",
            i.daemonsets[0].unreadable
        );
        let f = cni_daemonset(&i, "k8s-api.example.internal", 6443);
        assert_eq!(f.id, CNI_FINDING_ID);
        assert_eq!(f.severity, Severity::Blocking);
        assert_eq!(f.cluster_error, Some(APPLY_CAPS_ERROR));
        assert!(f.field.contains(
            "cilium.yaml spec.template.spec.containers[cilium-agent].securityContext.capabilities.add"
        ));
        assert!(f.field.contains(
            "cilium.yaml spec.template.spec.initContainers[clean-cilium-state].securityContext.capabilities.add"
        ));
        assert!(f
            .field
            .contains("spec.template.spec.initContainers[mount-cgroup]"));
        assert!(f
            .field
            .contains("cilium.yaml configmap/cilium-config data.cgroup-root"));
        // Unprivileged mount-cgroup adds SYS_ADMIN/SYS_CHROOT/SYS_PTRACE only: not flagged.
        assert!(!f
            .field
            .contains("initContainers[mount-cgroup].securityContext"));
        let fix = f.fix.as_deref().unwrap_or("");
        assert!(fix.contains(
            "`securityContext.capabilities.ciliumAgent={CHOWN,KILL,NET_ADMIN,NET_RAW,IPC_LOCK,SYS_ADMIN,SYS_RESOURCE,DAC_OVERRIDE,FOWNER,SETGID,SETUID}`"
        ), "{fix}");
        assert!(fix.contains(
            "`securityContext.capabilities.cleanCiliumState={NET_ADMIN,SYS_ADMIN,SYS_RESOURCE}`"
        ), "{fix}");
        assert!(fix.contains("`cgroup.autoMount.enabled=false`"), "{fix}");
        assert!(fix.contains("`cgroup.hostRoot=/sys/fs/cgroup`"), "{fix}");
        assert!(
            f.summary.contains("`cilium-agent` adds SYS_MODULE"),
            "{}",
            f.summary
        );
        // The privileged mount-bpf-fs is noted, not flagged.
        assert!(f.summary.contains("`mount-bpf-fs`"), "{}", f.summary);
        // Every default host path is writable on Talos.
        assert!(!f.summary.contains("read-only root"), "{}", f.summary);
        assert_eq!(replaces_kube_proxy(&i), Some(false));
    }

    #[test]
    fn talos_values_pass() {
        let i = input("cilium.yaml", TALOS);
        assert_eq!(i.daemonsets.len(), 1);
        assert_eq!(i.config_maps.len(), 1);
        let f = cni_daemonset(&i, "k8s-api.example.internal", 6443);
        assert_eq!(f.severity, Severity::Pass, "{f:?}");
        assert_eq!(f.cluster_error, None);
        assert!(
            f.summary.contains("localhost:7445: KubePrism"),
            "{}",
            f.summary
        );
        assert_eq!(replaces_kube_proxy(&i), Some(true));
    }

    #[test]
    fn flannel_passes_and_does_not_replace_kube_proxy() {
        let i = input("flannel.yaml", FLANNEL);
        assert_eq!(i.daemonsets[0].kind, CniKind::Flannel);
        let f = cni_daemonset(&i, "10.0.0.10", 6443);
        assert_eq!(f.severity, Severity::Pass, "{f:?}");
        assert_eq!(replaces_kube_proxy(&i), Some(false));
    }

    fn talos_value() -> Value {
        docs(TALOS).swap_remove(0)
    }

    fn agent_env(v: &mut Value) -> &mut Vec<Value> {
        v.pointer_mut("/items/0/spec/template/spec/containers/0/env")
            .and_then(Value::as_array_mut)
            .expect("agent env")
    }

    fn set_env(v: &mut Value, name: &str, value: &str) {
        for e in agent_env(v).iter_mut() {
            if e["name"] == name {
                e["value"] = Value::String(value.into());
            }
        }
    }

    #[test]
    fn apiserver_address_against_endpoint_and_kubeprism() {
        // The cluster's own endpoint: passes, with a note.
        let mut v = talos_value();
        set_env(
            &mut v,
            "KUBERNETES_SERVICE_HOST",
            "K8S-API.example.internal.",
        );
        set_env(&mut v, "KUBERNETES_SERVICE_PORT", "6443");
        let i = find_cni_daemonsets("c.yaml", vec![v]).expect("input");
        let f = cni_daemonset(&i, "k8s-api.example.internal", 6443);
        assert_eq!(f.severity, Severity::Pass, "{f:?}");
        assert!(f.summary.contains("control-plane endpoint"));

        // A kubeadm control-plane node's address: a warning naming the field.
        let mut v = talos_value();
        set_env(&mut v, "KUBERNETES_SERVICE_HOST", "10.0.0.11");
        set_env(&mut v, "KUBERNETES_SERVICE_PORT", "6443");
        let i = find_cni_daemonsets("c.yaml", vec![v]).expect("input");
        let f = cni_daemonset(&i, "k8s-api.example.internal", 6443);
        assert_eq!(f.severity, Severity::Warning, "{f:?}");
        assert!(f.field.contains(
            "c.yaml spec.template.spec.containers[cilium-agent].env[KUBERNETES_SERVICE_HOST]"
        ));
        assert!(f
            .fix
            .as_deref()
            .unwrap_or("")
            .contains("k8sServicePort=7445"));

        // Loopback on the apiserver port: a warning too.
        let mut v = talos_value();
        set_env(&mut v, "KUBERNETES_SERVICE_PORT", "6443");
        let i = find_cni_daemonsets("c.yaml", vec![v]).expect("input");
        let f = cni_daemonset(&i, "k8s-api.example.internal", 6443);
        assert_eq!(f.severity, Severity::Warning, "{f:?}");
        assert!(f.summary.contains("localhost:6443"));
    }

    #[test]
    fn kube_proxy_replacement_without_address_warns() {
        let mut v = talos_value();
        for c in ["containers/0", "initContainers/0", "initContainers/2"] {
            let env = v
                .pointer_mut(&format!("/items/0/spec/template/spec/{c}/env"))
                .and_then(Value::as_array_mut)
                .expect("env");
            env.retain(|e| {
                !e["name"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("KUBERNETES_SERVICE")
            });
        }
        let i = find_cni_daemonsets("c.yaml", vec![v]).expect("input");
        let f = cni_daemonset(&i, "k8s-api.example.internal", 6443);
        assert_eq!(f.severity, Severity::Warning, "{f:?}");
        assert!(f.field.contains("data.kube-proxy-replacement"));
    }

    #[test]
    fn capability_rules() {
        let ds = |sc: &str| {
            format!(
                "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: some-cni\nspec:\n  template:\n    spec:\n      containers:\n      - name: agent\n        image: example.org/cni:1\n        securityContext:\n{sc}"
            )
        };
        let check = |sc: &str| {
            let i = find_cni_daemonsets("x.yaml", docs(&ds(sc))).expect("input");
            assert_eq!(i.daemonsets[0].kind, CniKind::Other);
            cni_daemonset(&i, "h", 6443)
        };
        // Lower case is upper-cased by containerd: blocks.
        let f = check("          capabilities:\n            add: [sys_boot]\n");
        assert_eq!(f.severity, Severity::Blocking);
        assert!(f.fix.as_deref().unwrap_or("").contains("remove sys_boot"));
        // Privileged: starts, without the capability.
        let f = check(
            "          privileged: true\n          capabilities:\n            add: [SYS_MODULE]\n",
        );
        assert_eq!(f.severity, Severity::Pass);
        assert!(f.summary.contains("privileged container(s) `agent`"));
        // Added then dropped: not requested.
        let f = check("          capabilities:\n            add: [SYS_MODULE]\n            drop: [SYS_MODULE]\n");
        assert_eq!(f.severity, Severity::Pass);
        // `drop: [ALL]` does not remove explicit adds.
        let f = check(
            "          capabilities:\n            add: [SYS_MODULE]\n            drop: [ALL]\n",
        );
        assert_eq!(f.severity, Severity::Blocking);
        // `CAP_SYS_MODULE` becomes `CAP_CAP_SYS_MODULE`, which runc ignores.
        let f = check("          capabilities:\n            add: [CAP_SYS_MODULE, NET_ADMIN]\n");
        assert_eq!(f.severity, Severity::Pass);
    }

    #[test]
    fn read_only_host_paths() {
        assert!(talos_host_path_writable("/var/lib/calico"));
        assert!(talos_host_path_writable("/opt/cni/bin/"));
        assert!(talos_host_path_writable(
            "/usr/libexec/kubernetes/kubelet-plugins"
        ));
        assert!(!talos_host_path_writable("/usr/local/bin"));
        assert!(!talos_host_path_writable("/etc/sysctl.d"));
        assert!(!talos_host_path_writable("/variable"));
        assert!(!talos_host_path_writable("/var/../usr"));
        assert!(!talos_host_path_writable("var/lib"));
        let text = "kind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      containers:\n      - name: a\n        volumeMounts:\n        - {name: bin, mountPath: /host/bin}\n        - {name: mods, mountPath: /lib/modules, readOnly: true}\n      volumes:\n      - name: bin\n        hostPath: {path: /usr/local/bin, type: DirectoryOrCreate}\n      - name: mods\n        hostPath: {path: /lib/modules}\n";
        let i = find_cni_daemonsets("x.yaml", docs(text)).expect("input");
        let f = cni_daemonset(&i, "h", 6443);
        assert_eq!(f.severity, Severity::Warning, "{f:?}");
        assert_eq!(
            f.field,
            "x.yaml spec.template.spec.volumes[bin].hostPath.path"
        );
        assert!(f.summary.contains("/usr/local/bin"));
        assert!(!f.summary.contains("/lib/modules"));
    }

    #[test]
    fn malformed_inputs() {
        // No DaemonSet at all.
        let e = find_cni_daemonsets(
            "x.yaml",
            docs("kind: ConfigMap\nmetadata: {name: cilium-config}\n"),
        )
        .expect_err("no DaemonSet");
        let msg = e.to_string();
        assert!(
            msg.starts_with("x.yaml: no DaemonSet (found 1 ConfigMap(s))"),
            "{msg}"
        );
        assert!(find_cni_daemonsets("x.yaml", vec![]).is_err());
        assert!(find_cni_daemonsets("x.yaml", docs("kind: List\nitems: 3\n")).is_err());
        assert!(find_cni_daemonsets("x.yaml", vec![Value::from(7), Value::Null]).is_err());
        // A DaemonSet with no usable containers.
        for bad in [
            "kind: DaemonSet\n",
            "kind: DaemonSet\nspec: {template: {spec: {containers: []}}}\n",
            "kind: DaemonSet\nspec: {template: {spec: {containers: {a: 1}}}}\n",
            "kind: DaemonSet\nspec: {template: {spec: {containers: [3]}}}\n",
            "kind: DaemonSet\nspec: {template: {spec: {containers: [{image: x}]}}}\n",
            "kind: DaemonSet\nspec: {template: {spec: {containers: [{name: a}], initContainers: 5}}}\n",
        ] {
            let e = find_cni_daemonsets("x.yaml", docs(bad)).expect_err(bad);
            assert!(matches!(e, CheckError::CniDaemonSet { .. }), "{bad}");
        }
        // Wrong types deeper down: a warning listing them, no panic.
        let text = "kind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      containers:\n      - name: a\n        image: 5\n        env: {A: b}\n        securityContext:\n          privileged: \"yes\"\n          capabilities: {add: SYS_MODULE, drop: [1]}\n        volumeMounts: [7, {name: v}]\n      volumes: [{name: v, hostPath: {path: 9}}, 3]\n";
        let i = find_cni_daemonsets("x.yaml", docs(text)).expect("input");
        let f = cni_daemonset(&i, "h", 6443);
        assert_eq!(f.severity, Severity::Warning, "{f:?}");
        for p in [
            "containers[a].image: expected a string",
            "containers[a].env: expected a list",
            "securityContext.privileged: expected true or false",
            "capabilities.add: expected a list",
            "capabilities.drop[0]: expected a string",
            "volumeMounts[0]: expected a map",
            "volumes[0].hostPath.path: expected a string",
            "volumes[1]: expected a map",
        ] {
            assert!(f.summary.contains(p), "{p} in {}", f.summary);
        }
        // A non-string cilium-config value is reported, not read.
        let mut v = talos_value();
        v["items"][1]["data"]["kube-proxy-replacement"] = Value::Bool(true);
        let i = find_cni_daemonsets("c.yaml", vec![v]).expect("input");
        assert_eq!(replaces_kube_proxy(&i), None);
        let f = cni_daemonset(&i, "k8s-api.example.internal", 6443);
        assert_eq!(f.severity, Severity::Warning, "{f:?}");
        assert!(f.summary.contains("kube-proxy-replacement"));
    }

    #[test]
    fn several_daemonsets_and_list_kinds() {
        // The default DaemonSet plus the Talos one in one stream: names in field paths.
        let mut all = docs(DEFAULT);
        let mut talos = talos_value();
        talos["items"][0]["metadata"]["name"] = Value::String("cilium-b".into());
        all.push(talos);
        let i = find_cni_daemonsets("both.yaml", all).expect("input");
        assert_eq!(i.daemonsets.len(), 2);
        let f = cni_daemonset(&i, "k8s-api.example.internal", 6443);
        assert_eq!(f.severity, Severity::Blocking);
        assert!(f
            .field
            .contains("both.yaml daemonset/cilium spec.template.spec.containers[cilium-agent]"));
        assert!(!f
            .field
            .contains("daemonset/cilium-b spec.template.spec.containers"));
        // A DaemonSetList whose items carry no kind.
        let text = "kind: DaemonSetList\nitems:\n- metadata: {name: f}\n  spec: {template: {spec: {containers: [{name: kube-flannel, image: ghcr.io/flannel-io/flannel:v0.26.7}]}}}\n";
        let i = find_cni_daemonsets("l.yaml", docs(text)).expect("input");
        assert_eq!(i.daemonsets[0].kind, CniKind::Flannel);
    }

    #[test]
    fn calico_ebpf_and_env_from() {
        let text = "kind: ConfigMap\nmetadata: {name: kubernetes-services-endpoint}\ndata: {KUBERNETES_SERVICE_HOST: 10.0.0.11, KUBERNETES_SERVICE_PORT: \"6443\"}\n---\nkind: DaemonSet\nmetadata: {name: calico-node, namespace: calico-system}\nspec:\n  template:\n    spec:\n      containers:\n      - name: calico-node\n        image: docker.io/calico/node:v3.28.2\n        envFrom: [{configMapRef: {name: kubernetes-services-endpoint, optional: true}}]\n        env: [{name: FELIX_BPFENABLED, value: \"true\"}]\n        securityContext: {privileged: true}\n";
        let i = find_cni_daemonsets("calico.yaml", docs(text)).expect("input");
        assert_eq!(i.daemonsets[0].kind, CniKind::Calico);
        assert_eq!(replaces_kube_proxy(&i), Some(true));
        let f = cni_daemonset(&i, "k8s-api.example.internal", 6443);
        assert_eq!(f.severity, Severity::Warning, "{f:?}");
        assert!(f.field.contains(
            "calico.yaml configmap/kubernetes-services-endpoint data.KUBERNETES_SERVICE_HOST"
        ));
    }

    #[test]
    fn image_repos() {
        assert_eq!(
            image_repo("quay.io/cilium/cilium:v1.15.6@sha256:abc"),
            "quay.io/cilium/cilium"
        );
        assert_eq!(
            image_repo("registry:5000/cilium/cilium"),
            "registry:5000/cilium/cilium"
        );
        assert_eq!(
            image_repo("registry:5000/cilium/cilium-envoy:v1"),
            "registry:5000/cilium/cilium-envoy"
        );
        assert_eq!(image_repo(""), "");
    }
}
