//! kube-controller-manager and kube-scheduler parity (D19): the kubeadm static Pods' flags
//! against what Talos runs (its fixed values, additive lists and refused flags, per Talos
//! source) plus `spec.controllerManager.extraArgs` / `spec.scheduler.extraArgs`; and what
//! `import kubeadm` carries.
//!
//! Leader election: each component elects one active instance through the Lease
//! `kube-system/kube-controller-manager` (`kube-system/kube-scheduler`). Talos runs both
//! with `--leader-elect=true` and no `--leader-elect-resource-*` flag (Talos
//! `control_plane_static_pod.go` v1.13.9:583-600 and :763-771, the same in v1.8.4:573-590,
//! :740-749), so during phase `control-plane` the kubeadm and Talos instances take part in
//! one election, and the flags in force are those of whichever instance holds the lease. A
//! leader that stops renewing loses it after the lease duration, 15 s by default, renewing
//! every 2 s (component-base `config/v1alpha1/defaults.go`
//! `RecommendedDefaultLeaderElectionConfiguration`).

use std::collections::BTreeMap;

use super::parity::{describe_difference, items};
use super::{not_compared, Cx, Finding, Severity};
use crate::inputs::kubeadm::FlagMap;

/// The two components compared here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    /// kube-controller-manager (`cluster.controllerManager`).
    ControllerManager,
    /// kube-scheduler (`cluster.scheduler`).
    Scheduler,
}

impl Component {
    fn binary(self) -> &'static str {
        match self {
            Component::ControllerManager => "kube-controller-manager",
            Component::Scheduler => "kube-scheduler",
        }
    }

    fn field(self) -> &'static str {
        match self {
            Component::ControllerManager => "spec.controllerManager.extraArgs",
            Component::Scheduler => "spec.scheduler.extraArgs",
        }
    }

    fn talos_field(self) -> &'static str {
        match self {
            Component::ControllerManager => "cluster.controllerManager.extraArgs",
            Component::Scheduler => "cluster.scheduler.extraArgs",
        }
    }
}

/// The leader-lease sentence every difference carries (see the module's documentation),
/// after the Lease's name.
pub const LEADER_LEASE_NOTE: &str = "(Talos sets no `--leader-elect-resource-*` flag), so the \
     behaviour flips whenever the lease moves between a kubeadm and a Talos instance (a leader \
     that stops renewing loses it after 15 s by default)";

/// How Talos treats a flag of one component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TalosFlag {
    /// A node-local file or kubeconfig Talos sets itself with the same meaning, or a value
    /// another finding compares.
    Managed,
    /// Talos will not run the kubeadm value, and no extra arg can make it: what Talos
    /// runs, and the reason.
    Uncarriable(&'static str, &'static str),
    /// Talos sets this value; an extra arg replaces it.
    Fixed(&'static str),
    /// Talos sets these comma-separated values; an extra arg's values are appended.
    Additive(&'static str),
    /// Talos does not set it: the component's default (when known here) unless an extra
    /// arg sets it.
    Unset(Option<&'static str>),
}

/// Talos's kube-controller-manager flags (`control_plane_static_pod.go`
/// `manageControllerManager`: the arguments v1.13.9:578-600, merge policies :608-618; the
/// same values in v1.8.4:568-606, v1.9.6, v1.10.9, v1.11.6, v1.12.11), and kubeadm's
/// defaults (kubeadm `cmd/kubeadm/app/phases/controlplane/manifests.go`
/// `getControllerManagerCommand`: `node-cidr-mask-size` is what kubeadm computes, 24 for
/// an IPv4 pod subnet, kube-controller-manager's own default for IPv4).
fn controller_manager_flag(name: &str, ipv4_pods: bool) -> TalosFlag {
    use TalosFlag::*;
    match name {
        // MergeDenied node-local files (the bundle's CA and keys, Talos's kubeconfig) and
        // what Talos sets from cluster.yaml's other fields (the `network` and
        // `cloud-provider` findings compare them).
        "cluster-signing-cert-file"
        | "cluster-signing-key-file"
        | "authentication-kubeconfig"
        | "authorization-kubeconfig"
        | "root-ca-file"
        | "service-account-private-key-file"
        | "kubeconfig"
        | "client-ca-file"
        | "requestheader-client-ca-file"
        | "cluster-cidr"
        | "service-cluster-ip-range"
        | "cloud-provider" => Managed,
        "secure-port" => Uncarriable(
            "10257",
            "Talos probes /healthz on port 10257 (v1.13.9:696,710), so another port fails its liveness probe",
        ),
        "allocate-node-cidrs" => Fixed("true"),
        "bind-address" => Fixed("127.0.0.1"),
        "configure-cloud-routes" => Fixed("false"),
        "leader-elect" => Fixed("true"),
        "profiling" => Fixed("false"),
        "tls-min-version" => Fixed("VersionTLS13"),
        // Talos passes the bare flag first (v1.13.9:580); a later `=false` would win.
        "use-service-account-credentials" => Fixed("true"),
        "controllers" => Additive("*,tokencleaner"),
        "node-cidr-mask-size" | "node-cidr-mask-size-ipv4" if ipv4_pods => Unset(Some("24")),
        "cluster-name" => Unset(Some("kubernetes")),
        "terminated-pod-gc-threshold" => Unset(Some("12500")),
        _ => Unset(None),
    }
}

/// Talos's kube-scheduler flags (`manageScheduler`: the arguments v1.13.9:762-771, merge
/// policies :773-778; the same in v1.8.4:740-756 and every minor between).
fn scheduler_flag(name: &str) -> TalosFlag {
    use TalosFlag::*;
    match name {
        "kubeconfig" | "authentication-kubeconfig" | "authorization-kubeconfig" => Managed,
        "config" => Uncarriable(
            "its own /system/config/kubernetes/kube-scheduler/scheduler-config.yaml",
            "Talos writes its own KubeSchedulerConfiguration and refuses the flag (MergeDenied, v1.13.9:777); \
             scheduler profiles go in Talos's `cluster.scheduler.config`, where Talos forces `apiVersion: \
             kubescheduler.config.k8s.io/v1` and `clientConnection.kubeconfig` \
             (`render_config_static_pods.go` v1.13.9:285-305, v1.8.4:245-253)",
        ),
        "secure-port" => Uncarriable(
            "10259",
            "Talos probes port 10259 (v1.13.9:808-830), so another port fails its probes",
        ),
        "authentication-tolerate-lookup-failure" => Fixed("false"),
        "bind-address" => Fixed("127.0.0.1"),
        "leader-elect" => Fixed("true"),
        "profiling" => Fixed("false"),
        "tls-min-version" => Fixed("VersionTLS13"),
        _ => Unset(None),
    }
}

/// Flags whose difference is observability or tuning, not what the component does.
fn tuning_only(name: &str) -> bool {
    matches!(
        name,
        "profiling"
            | "contention-profiling"
            | "v"
            | "vmodule"
            | "bind-address"
            | "secure-port"
            | "tls-min-version"
            | "tls-cipher-suites"
            | "kube-api-qps"
            | "kube-api-burst"
            | "kube-api-content-type"
            | "http2-max-streams-per-connection"
            | "permit-address-sharing"
            | "permit-port-sharing"
    ) || name.starts_with("concurrent-")
        || name.starts_with("log")
}

/// One flag on which the kubeadm and Talos instances of a component differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentFlagDifference {
    /// The flag, without `--`.
    pub name: String,
    /// kubeadm's value.
    pub kubeadm: String,
    /// What Talos will run (`None`: not set, the component's default).
    pub talos: Option<String>,
    /// The value to put in the component's `extraArgs` so Talos runs as kubeadm does;
    /// `None` when no extra arg can (see `why_not`).
    pub carry: Option<String>,
    /// Why it cannot be carried, when it cannot.
    pub why_not: Option<String>,
    /// Only observability or tuning differs.
    pub tuning: bool,
}

/// Compare a kubeadm component's flags with what Talos will run given `extra_args`.
/// `pods` are spec.network.pods (kube-controller-manager's node CIDR mask default depends
/// on the family).
pub fn component_flag_differences(
    component: Component,
    kubeadm: &FlagMap,
    extra_args: &BTreeMap<String, String>,
    pods: &[String],
) -> Vec<ComponentFlagDifference> {
    let ipv4_pods = !pods.is_empty() && pods.iter().all(|p| !p.contains(':'));
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (name, _) in kubeadm.iter() {
        if !seen.insert(name) {
            continue;
        }
        let k = kubeadm.get(name).unwrap_or_default().to_string();
        let extra = extra_args.get(name).map(String::as_str);
        let is_file = k.starts_with('/');
        let flag = match component {
            Component::ControllerManager => controller_manager_flag(name, ipv4_pods),
            Component::Scheduler => scheduler_flag(name),
        };
        let mut why_not: Option<String> = None;
        let (talos, same, carry) = match flag {
            TalosFlag::Managed => continue,
            TalosFlag::Uncarriable(talos, why) => {
                if matches!(name, "secure-port") && k == default_port(component) {
                    continue;
                }
                why_not = Some(why.to_string());
                (Some(talos.to_string()), false, None)
            }
            TalosFlag::Additive(default) => {
                let mut effective: Vec<&str> = items(default);
                for v in extra.map(items).unwrap_or_default() {
                    if !effective.contains(&v) {
                        effective.push(v);
                    }
                }
                let wanted = items(&k);
                let missing: Vec<&str> = wanted
                    .iter()
                    .copied()
                    .filter(|v| !effective.contains(v))
                    .collect();
                // `--controllers`: the first item naming a controller decides
                // (kube-controller-manager's IsControllerEnabled), and Talos's own items come
                // first: without `*` kubeadm runs only what it lists, Talos runs every
                // default controller; `-tokencleaner` after Talos's `tokencleaner` is ignored.
                let blocked: Vec<&str> = if name == "controllers" {
                    let mut b = Vec::new();
                    if !wanted.contains(&"*") {
                        b.push("*");
                    }
                    b.extend(wanted.iter().copied().filter(|v| {
                        v.strip_prefix('-')
                            .is_some_and(|c| items(default).contains(&c))
                    }));
                    b
                } else {
                    Vec::new()
                };
                if !blocked.is_empty() {
                    why_not = Some(format!(
                        "Talos runs `--controllers={}` followed by the extra arg's items, and the first item naming a \
                         controller decides: {} cannot be undone by an extra arg",
                        default,
                        blocked
                            .iter()
                            .map(|b| if *b == "*" {
                                "its `*` (every default controller, where kubeadm runs only those it lists)".to_string()
                            } else {
                                format!("its `{}`", b.trim_start_matches('-'))
                            })
                            .collect::<Vec<_>>()
                            .join(" and ")
                    ));
                }
                let mut want: Vec<&str> = extra.map(items).unwrap_or_default();
                want.extend(missing.iter().copied());
                (
                    Some(effective.join(",")),
                    missing.is_empty() && blocked.is_empty(),
                    blocked.is_empty().then(|| want.join(",")),
                )
            }
            TalosFlag::Fixed(default) => {
                let t = extra.unwrap_or(default);
                // Leader election off on the kubeadm side: its instance is always active,
                // and carrying `false` would make every Talos instance active too.
                if name == "leader-elect" && k == "false" {
                    why_not = Some(
                        "the kubeadm instance runs without leader election, so it is active whatever the Talos \
                         instances elect: two instances would run the controllers at once; `false` on the Talos side \
                         would make every Talos instance active as well"
                            .into(),
                    );
                    (Some(t.to_string()), false, None)
                } else {
                    (Some(t.to_string()), t == k, Some(k.clone()))
                }
            }
            TalosFlag::Unset(default) => {
                let same = match extra {
                    Some(e) => e == k,
                    None => default == Some(k.as_str()),
                };
                (extra.map(str::to_string), same, Some(k.clone()))
            }
        };
        if same {
            continue;
        }
        // A file on the kubeadm node is not on the Talos nodes.
        let carry = carry.filter(|_| !is_file || extra.is_some());
        if carry.is_none() && why_not.is_none() {
            why_not = Some(format!(
                "`{k}` is a file on the kubeadm nodes, which the Talos nodes lack"
            ));
        }
        out.push(ComponentFlagDifference {
            name: name.to_string(),
            kubeadm: k,
            talos,
            carry,
            why_not,
            tuning: tuning_only(name),
        });
    }
    out
}

fn default_port(c: Component) -> &'static str {
    match c {
        Component::ControllerManager => "10257",
        Component::Scheduler => "10259",
    }
}

/// What `import kubeadm` writes into `spec.controllerManager.extraArgs` or
/// `spec.scheduler.extraArgs`: every difference an extra arg carries.
pub fn carried_component_args(
    component: Component,
    kubeadm: &FlagMap,
    pods: &[String],
) -> BTreeMap<String, String> {
    component_flag_differences(component, kubeadm, &BTreeMap::new(), pods)
        .into_iter()
        .filter_map(|d| d.carry.map(|v| (d.name, v)))
        .collect()
}

impl Cx<'_> {
    /// D19: the kubeadm kube-controller-manager's flags against what Talos will run.
    pub(super) fn controller_manager_flags(&self, out: &mut Vec<Finding>) {
        self.component_flags(Component::ControllerManager, out);
    }

    /// D19: the kubeadm kube-scheduler's flags against what Talos will run.
    pub(super) fn scheduler_flags(&self, out: &mut Vec<Finding>) {
        self.component_flags(Component::Scheduler, out);
    }

    fn component_flags(&self, component: Component, out: &mut Vec<Finding>) {
        let s = &self.i.config.spec;
        let (id, input, extra, flag) = match component {
            Component::ControllerManager => (
                "controller-manager-flags",
                &self.i.controller_manager,
                &s.controller_manager.extra_args,
                "--controller-manager-manifest",
            ),
            Component::Scheduler => (
                "scheduler-flags",
                &self.i.scheduler,
                &s.scheduler.extra_args,
                "--scheduler-manifest",
            ),
        };
        let bin = component.binary();
        let Some(m) = input else {
            out.push(not_compared(
                id,
                component.field(),
                &format!("the kubeadm {bin}'s flags"),
                flag,
            ));
            return;
        };
        let field = format!("{} vs {} command", component.field(), m.file);
        let diffs = component_flag_differences(component, &m.value.args, extra, &s.network.pods);
        if diffs.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Pass,
                field,
                format!(
                    "the Talos {bin} instances will run every one of the kubeadm {bin}'s {} flags as it does",
                    m.value.args.len()
                ),
            ));
            return;
        }
        let describe = |d: &ComponentFlagDifference| {
            describe_difference(&d.name, &d.kubeadm, d.talos.as_deref(), bin)
        };
        let behaviour = diffs.iter().any(|d| !d.tuning);
        let carry: Vec<String> = diffs
            .iter()
            .filter_map(|d| d.carry.as_ref().map(|v| format!("{}: \"{v}\"", d.name)))
            .collect();
        let cannot: Vec<String> = diffs
            .iter()
            .filter_map(|d| d.why_not.as_ref().map(|w| format!("`--{}`: {w}", d.name)))
            .collect();
        let mut fixes = Vec::new();
        if !carry.is_empty() {
            fixes.push(format!(
                "add to cluster.yaml `{}: {{{}}}` (rendered into Talos's {})",
                component.field(),
                carry.join(", "),
                component.talos_field()
            ));
        }
        if !cannot.is_empty() {
            fixes.push(format!(
                "change the kubeadm side first, on every control-plane node, to what Talos runs ({}), and \
                 watch the cluster before migrating",
                cannot.join("; ")
            ));
        }
        let what = if behaviour {
            format!("the Talos {bin} instances would behave differently from the kubeadm ones")
        } else {
            format!("the Talos {bin} instances would differ in observability or tuning only")
        };
        out.push(
            Finding::new(
                id,
                if behaviour {
                    Severity::Blocking
                } else {
                    Severity::Warning
                },
                field,
                format!(
                    "{what}: {}; during phase `control-plane` the kubeadm and Talos instances elect one \
                     leader through the same Lease, kube-system/{bin} {LEADER_LEASE_NOTE}",
                    diffs.iter().map(describe).collect::<Vec<_>>().join("; ")
                ),
            )
            .fix(fixes.join("; ")),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(items: &[&str]) -> FlagMap {
        let mut f = FlagMap::new();
        for i in items {
            let (n, v) = i.split_once('=').unwrap_or((i, "true"));
            f.push(n, v);
        }
        f
    }

    const PODS: &[&str] = &["10.244.0.0/16"];

    fn pods() -> Vec<String> {
        PODS.iter().map(|p| p.to_string()).collect()
    }

    /// kubeadm v1.30's kube-controller-manager command for an IPv4 pod subnet (kubeadm
    /// `getControllerManagerCommand`).
    const KUBEADM_KCM: &[&str] = &[
        "--allocate-node-cidrs=true",
        "--authentication-kubeconfig=/etc/kubernetes/controller-manager.conf",
        "--authorization-kubeconfig=/etc/kubernetes/controller-manager.conf",
        "--bind-address=127.0.0.1",
        "--client-ca-file=/etc/kubernetes/pki/ca.crt",
        "--cluster-cidr=10.244.0.0/16",
        "--cluster-name=kubernetes",
        "--cluster-signing-cert-file=/etc/kubernetes/pki/ca.crt",
        "--cluster-signing-key-file=/etc/kubernetes/pki/ca.key",
        "--controllers=*,bootstrapsigner,tokencleaner",
        "--kubeconfig=/etc/kubernetes/controller-manager.conf",
        "--leader-elect=true",
        "--node-cidr-mask-size=24",
        "--requestheader-client-ca-file=/etc/kubernetes/pki/front-proxy-ca.crt",
        "--root-ca-file=/etc/kubernetes/pki/ca.crt",
        "--service-account-private-key-file=/etc/kubernetes/pki/sa.key",
        "--service-cluster-ip-range=10.96.0.0/12",
        "--use-service-account-credentials=true",
    ];

    fn kcm(extra: &[&str]) -> Vec<ComponentFlagDifference> {
        let mut all: Vec<&str> = KUBEADM_KCM.to_vec();
        all.extend_from_slice(extra);
        component_flag_differences(
            Component::ControllerManager,
            &flags(&all),
            &BTreeMap::new(),
            &pods(),
        )
    }

    fn names(d: &[ComponentFlagDifference]) -> Vec<&str> {
        d.iter().map(|d| d.name.as_str()).collect()
    }

    #[test]
    fn kubeadm_defaults_differ_only_in_bootstrapsigner() {
        let d = kcm(&[]);
        assert_eq!(names(&d), ["controllers"], "{d:?}");
        assert_eq!(d[0].talos.as_deref(), Some("*,tokencleaner"));
        assert_eq!(d[0].carry.as_deref(), Some("bootstrapsigner"));
        assert!(!d[0].tuning);
        // Carried, it is the same.
        let extra = BTreeMap::from([("controllers".to_string(), "bootstrapsigner".to_string())]);
        assert!(component_flag_differences(
            Component::ControllerManager,
            &flags(KUBEADM_KCM),
            &extra,
            &pods()
        )
        .is_empty());
    }

    #[test]
    fn node_cidr_mask_size_other_than_the_default_is_carried() {
        let d = kcm(&["--node-cidr-mask-size=25"]);
        let m = d.iter().find(|d| d.name == "node-cidr-mask-size").unwrap();
        assert_eq!(m.carry.as_deref(), Some("25"));
        assert_eq!(m.talos, None);
        // 24 is the default only for an IPv4 pod network.
        let v6 = component_flag_differences(
            Component::ControllerManager,
            &flags(&["--node-cidr-mask-size=24"]),
            &BTreeMap::new(),
            &["fd00::/48".to_string()],
        );
        assert_eq!(names(&v6), ["node-cidr-mask-size"]);
    }

    #[test]
    fn grace_period_gc_threshold_and_signing_duration_are_behaviour() {
        let d = kcm(&[
            "--node-monitor-grace-period=20s",
            "--terminated-pod-gc-threshold=100",
            "--cluster-signing-duration=720h",
        ]);
        for n in [
            "node-monitor-grace-period",
            "terminated-pod-gc-threshold",
            "cluster-signing-duration",
        ] {
            let x = d.iter().find(|d| d.name == n).unwrap();
            assert!(!x.tuning && x.carry.is_some(), "{x:?}");
        }
        // kube-controller-manager's own default threshold is no difference.
        assert!(kcm(&["--terminated-pod-gc-threshold=12500"])
            .iter()
            .all(|d| d.name != "terminated-pod-gc-threshold"));
    }

    #[test]
    fn controllers_without_star_or_undoing_tokencleaner_cannot_be_carried() {
        let d = component_flag_differences(
            Component::ControllerManager,
            &flags(&["--controllers=namespace,garbagecollector"]),
            &BTreeMap::new(),
            &pods(),
        );
        assert_eq!(d[0].carry, None);
        assert!(d[0].why_not.as_deref().unwrap().contains("`*`"), "{d:?}");
        let d = component_flag_differences(
            Component::ControllerManager,
            &flags(&["--controllers=*,-tokencleaner"]),
            &BTreeMap::new(),
            &pods(),
        );
        assert_eq!(d[0].carry, None);
        assert!(d[0].why_not.as_deref().unwrap().contains("tokencleaner"));
        // Disabling another controller is carried.
        let d = component_flag_differences(
            Component::ControllerManager,
            &flags(&["--controllers=*,tokencleaner,-nodeipam"]),
            &BTreeMap::new(),
            &pods(),
        );
        assert_eq!(d[0].carry.as_deref(), Some("-nodeipam"));
    }

    #[test]
    fn bind_address_is_observability_and_carried() {
        let d = kcm(&["--bind-address=0.0.0.0"]);
        let b = d.iter().find(|d| d.name == "bind-address").unwrap();
        assert!(b.tuning);
        assert_eq!(b.carry.as_deref(), Some("0.0.0.0"));
        assert_eq!(b.talos.as_deref(), Some("127.0.0.1"));
    }

    #[test]
    fn leader_election_off_cannot_be_carried() {
        let d = kcm(&["--leader-elect=false"]);
        let l = d.iter().find(|d| d.name == "leader-elect").unwrap();
        assert_eq!(l.carry, None);
        assert!(l.why_not.as_deref().unwrap().contains("two instances"));
    }

    #[test]
    fn scheduler_config_is_refused_with_where_profiles_go() {
        let kubeadm = flags(&[
            "--authentication-kubeconfig=/etc/kubernetes/scheduler.conf",
            "--authorization-kubeconfig=/etc/kubernetes/scheduler.conf",
            "--bind-address=127.0.0.1",
            "--kubeconfig=/etc/kubernetes/scheduler.conf",
            "--leader-elect=true",
        ]);
        assert!(component_flag_differences(
            Component::Scheduler,
            &kubeadm,
            &BTreeMap::new(),
            &pods()
        )
        .is_empty());
        let mut with_config = kubeadm.clone();
        with_config.push("config", "/etc/kubernetes/scheduler-config.yaml");
        let d = component_flag_differences(
            Component::Scheduler,
            &with_config,
            &BTreeMap::new(),
            &pods(),
        );
        assert_eq!(names(&d), ["config"]);
        assert_eq!(d[0].carry, None);
        assert!(d[0]
            .why_not
            .as_deref()
            .unwrap()
            .contains("cluster.scheduler.config"));
        assert!(!d[0].tuning);
    }

    #[test]
    fn import_carries_what_an_extra_arg_can() {
        let mut all: Vec<&str> = KUBEADM_KCM.to_vec();
        all.extend(["--node-monitor-grace-period=20s", "--leader-elect=false"]);
        let c = carried_component_args(Component::ControllerManager, &flags(&all), &pods());
        assert_eq!(
            c,
            BTreeMap::from([
                ("controllers".to_string(), "bootstrapsigner".to_string()),
                ("node-monitor-grace-period".to_string(), "20s".to_string()),
            ])
        );
    }
}
