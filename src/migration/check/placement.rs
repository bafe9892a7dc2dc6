//! Where the control-plane VMs run (`control-plane-hosts`, D12): a vSphere inventory from
//! `govc vm.info -json`, the etcd voters among its VMs, and whether one ESXi host holds more
//! of them than etcd can lose.
//!
//! What the check rests on:
//! - govc (govmomi v0.56.0 `cli/vm/info.go:109-166`): with `-json` every property of each VM
//!   is loaded and printed as `{"virtualMachines": [<mo.VirtualMachine>...]}` (`null` when
//!   none matched); the VM's host is `runtime.host`, a managed object reference
//!   `{"type": "HostSystem", "value": "host-12"}` (`vim25/mo/mo.go:1748-1768`,
//!   `vim25/types/types.go` `VirtualMachineRuntimeInfo.Host`). govc up to v0.31 printed Go's
//!   field names (`VirtualMachines`, `Name`, `Runtime`, `Host`, `Value`); both are read.
//! - The control-plane VMs are named like their Machines (CAPV v1.13.1
//!   `pkg/services/vimmachine.go:421-446`: no naming strategy, the VSphereVM is the Machine's
//!   name; `pkg/services/govmomi/vcenter/clone.go:325` clones under that name), and CACPPT
//!   v0.5.12 names each Machine `<cluster>-cp-` and 5 generated characters
//!   (`controllers/taloscontrolplane_controller.go:374`). kubeadm VMs are matched by their
//!   etcd member names (kubeadm names a member after its node).
//! - etcd keeps quorum while a majority of its voters is up: `n` voters survive
//!   `n - (n/2 + 1)` down. A powered-off VM still counts as a voter.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{CheckError, Cx, Finding, Severity};
use crate::model::Phase;

/// One VM of the inventory: its name, the ESXi host it runs on, and what a restore matches
/// it by (`restore check`, D8).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmPlacement {
    /// The VM's name.
    pub name: String,
    /// Its host's managed object id (`host-12`), when the inventory says.
    pub host: Option<String>,
    /// Its BIOS UUID, lowercase (`config.uuid`, the `VirtualMachineConfigInfo.Uuid` CAPV
    /// v1.13.1 finds a VSphereVM's VM by: `pkg/services/govmomi/util.go:65-79`).
    pub bios_uuid: Option<String>,
    /// `runtime.powerState`: `poweredOn`, `poweredOff`, `suspended`.
    pub power_state: Option<String>,
    /// The addresses VMware Tools reports (`guest.ipAddress`, `guest.net[].ipAddress[]`).
    pub guest_ips: Vec<String>,
}

/// The first of `keys` (govc's JSON names, then the Go names of govc before v0.32) in `v`.
fn field<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().find_map(|k| v.get(*k)).filter(|v| !v.is_null())
}

/// A host reference: `{type: HostSystem, value: host-12}`.
fn host_of(vm: &Value) -> Option<String> {
    let runtime_host = field(vm, &["runtime", "Runtime"]).and_then(|r| field(r, &["host", "Host"]));
    let summary_host = field(vm, &["summary", "Summary"])
        .and_then(|s| field(s, &["runtime", "Runtime"]))
        .and_then(|r| field(r, &["host", "Host"]));
    let h = runtime_host.or(summary_host)?;
    // A host id is printed in the report: control characters are written escaped.
    field(h, &["value", "Value"])
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(|s| {
            if s.chars().any(char::is_control) {
                s.escape_default().to_string()
            } else {
                s.to_string()
            }
        })
}

/// The VMs of `govc vm.info -json` output.
pub fn parse_vm_inventory(file: &str, text: &str) -> Result<Vec<VmPlacement>, CheckError> {
    let bad = |problem: String| CheckError::VmInventory {
        file: file.to_string(),
        problem,
    };
    let doc: Value = serde_json::from_str(text).map_err(|e| {
        bad(format!(
            "not JSON ({e}); expected `govc vm.info -json <vm path>...` output"
        ))
    })?;
    let list = match doc
        .get("virtualMachines")
        .or_else(|| doc.get("VirtualMachines"))
    {
        Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(bad(format!(
                "`virtualMachines` is {}, expected a list",
                crate::yaml::kind_of(other)
            )))
        }
        None => {
            return Err(bad(
                "no `virtualMachines`: expected `govc vm.info -json <vm path>...` output".into(),
            ))
        }
    };
    let mut vms = Vec::with_capacity(list.len());
    for (i, vm) in list.iter().enumerate() {
        let name = field(vm, &["name", "Name"])
            .or_else(|| {
                field(vm, &["summary", "Summary"])
                    .and_then(|s| field(s, &["config", "Config"]))
                    .and_then(|c| field(c, &["name", "Name"]))
            })
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("virtualMachines[{i}] has no `name`")))?;
        let text_of = |v: Option<&Value>| {
            v.and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let config = field(vm, &["config", "Config"]).or_else(|| {
            field(vm, &["summary", "Summary"]).and_then(|s| field(s, &["config", "Config"]))
        });
        let bios_uuid =
            text_of(config.and_then(|c| field(c, &["uuid", "Uuid"]))).map(|u| u.to_lowercase());
        let power_state = text_of(
            field(vm, &["runtime", "Runtime"])
                .and_then(|r| field(r, &["powerState", "PowerState"])),
        );
        let mut guest_ips = Vec::new();
        if let Some(g) = field(vm, &["guest", "Guest"]) {
            guest_ips.extend(text_of(field(g, &["ipAddress", "IpAddress"])));
            if let Some(Value::Array(nics)) = field(g, &["net", "Net"]) {
                for nic in nics {
                    if let Some(Value::Array(ips)) = field(nic, &["ipAddress", "IpAddress"]) {
                        guest_ips.extend(ips.iter().filter_map(|i| text_of(Some(i))));
                    }
                }
            }
        }
        guest_ips.sort();
        guest_ips.dedup();
        vms.push(VmPlacement {
            name: name.to_string(),
            host: host_of(vm),
            bios_uuid,
            power_state,
            guest_ips,
        });
    }
    Ok(vms)
}

/// Whether `name` is a control-plane Machine's (and so VM's) name of the TalosControlPlane
/// `tcp`: `<tcp>-` and 5 characters of the Kubernetes name generator's alphabet.
pub fn is_control_plane_machine(tcp: &str, name: &str) -> bool {
    name.strip_prefix(tcp)
        .and_then(|r| r.strip_prefix('-'))
        .is_some_and(|rest| {
            rest.len() == 5
                && rest
                    .bytes()
                    .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b))
        })
}

/// etcd's fault tolerance: how many of `voters` can be down with quorum kept.
fn tolerance(voters: usize) -> usize {
    voters - (voters / 2 + 1)
}

/// The voters a host failure would take down: hosts holding two or more, most first.
fn crowded<'a>(voters: &[&'a VmPlacement]) -> Vec<(&'a str, Vec<&'a str>)> {
    let mut by_host: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for v in voters {
        if let Some(h) = &v.host {
            by_host.entry(h.as_str()).or_default().push(v.name.as_str());
        }
    }
    let mut out: Vec<(&str, Vec<&str>)> =
        by_host.into_iter().filter(|(_, v)| v.len() >= 2).collect();
    out.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(b.0)));
    out
}

fn names(v: &[&str]) -> String {
    v.iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Cx<'_> {
    /// `control-plane-hosts`: no ESXi host holds more etcd voters than etcd can lose, now
    /// and once the kubeadm members are gone; and something keeps new VMs apart.
    pub(super) fn control_plane_hosts(&self, out: &mut Vec<Finding>) {
        let id = "control-plane-hosts";
        let s = &self.i.config.spec;
        let Some(cp) = &s.control_plane else {
            return;
        };
        let name = &self.i.config.metadata.name;
        let tcp = format!("{name}-cp");
        let tag = cp.anti_affinity.as_ref().map(|a| a.tag_id.as_str());
        let procedure = crate::procedure::ANTI_AFFINITY.title;
        let no_tag = "nothing keeps new control-plane VMs apart: CAPV makes no anti-affinity cluster module for a \
                      TalosControlPlane and the control-plane provider picks failure domains at random, so after a \
                      rollout they can share a host";
        let set_tag = format!(
            "set `spec.controlPlane.antiAffinity.tagID` (a vSphere tag CAPV attaches to every control-plane VM) and \
             create a VM-VM anti-affinity compute policy on the tag: README procedure \"{procedure}\""
        );
        let folder = s.vsphere.as_ref().map_or("<folder>", |v| v.folder.as_str());
        let command = format!("govc vm.info -json '{folder}/*' > vms.json");
        let Some(input) = &self.i.vsphere_inventory else {
            match tag {
                Some(t) => out.push(Finding::new(
                    id,
                    Severity::Info,
                    "--vsphere-inventory",
                    format!(
                        "placement not checked: `{command}` (and the kubeadm control-plane VMs' paths), then \
                         `--vsphere-inventory vms.json`; the control-plane VMs carry the tag `{t}`"
                    ),
                )),
                None if cp.replicas > 1 => out.push(
                    Finding::new(
                        id,
                        Severity::Warning,
                        "spec.controlPlane.antiAffinity",
                        format!("{no_tag}; placement not checked (`--vsphere-inventory`)"),
                    )
                    .fix(set_tag),
                ),
                None => out.push(Finding::new(
                    id,
                    Severity::Info,
                    "spec.controlPlane.replicas",
                    "one control-plane machine: nothing to keep apart".into(),
                )),
            }
            return;
        };
        let field = format!("{} (--vsphere-inventory)", input.file);
        let members: &[String] = s
            .migration
            .as_ref()
            .filter(|m| matches!(m.phase, Phase::Prepare | Phase::ControlPlane))
            .map_or(&[], |m| m.kubeadm.etcd_members.as_slice());
        let talos: Vec<&VmPlacement> = input
            .value
            .iter()
            .filter(|v| is_control_plane_machine(&tcp, &v.name))
            .collect();
        // A VM's name and its node's need not match exactly: vSphere keeps the case it
        // was given, and an FQDN names the same machine as its short name.
        let same = |member: &str, vm: &str| {
            let short = |n: &str| n.split('.').next().unwrap_or(n).to_ascii_lowercase();
            short(member) == short(vm)
        };
        let kubeadm: Vec<&VmPlacement> = input
            .value
            .iter()
            .filter(|v| members.iter().any(|m| same(m, &v.name)))
            .collect();
        let missing: Vec<&str> = members
            .iter()
            .filter(|m| !input.value.iter().any(|v| same(m, &v.name)))
            .map(String::as_str)
            .collect();
        if talos.is_empty() && kubeadm.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Info,
                field,
                format!(
                    "no control-plane VM of the cluster in `{}` (looked for `{tcp}-xxxxx`{}): placement not checked",
                    input.file,
                    if members.is_empty() {
                        String::new()
                    } else {
                        format!(" and the kubeadm etcd members {}", super::list(members))
                    }
                ),
            ));
            return;
        }
        let voters: Vec<&VmPlacement> = talos.iter().chain(kubeadm.iter()).copied().collect();
        // Members not in the inventory are voters too; they are counted on hosts of their own.
        let n = voters.len() + missing.len();
        let tol = tolerance(n);
        let mut notes = Vec::new();
        if !missing.is_empty() {
            notes.push(format!(
                "kubeadm etcd members not in the inventory, counted as voters on hosts of their own: {}",
                names(&missing)
            ));
        }
        let hostless: Vec<&str> = voters
            .iter()
            .filter(|v| v.host.is_none())
            .map(|v| v.name.as_str())
            .collect();
        if !hostless.is_empty() {
            notes.push(format!("no host in the inventory for {}", names(&hostless)));
        }
        let notes = if notes.is_empty() {
            String::new()
        } else {
            format!(" ({})", notes.join("; "))
        };
        let now = crowded(&voters);
        // After the kubeadm members are removed only the Talos VMs vote.
        let after = if kubeadm.is_empty() && missing.is_empty() {
            Vec::new()
        } else {
            crowded(&talos)
        };
        let fatal_now = now.iter().find(|(_, v)| v.len() > tol);
        let fatal_after = after.iter().find(|(_, v)| v.len() > tolerance(talos.len()));
        let fix = format!(
            "move the VMs apart now (`govc vm.migrate -host <host> <vm>`), and keep them apart: README procedure \
             \"{procedure}\" ({})",
            match tag {
                Some(t) => format!(
                    "the control-plane VMs carry `{t}`: the compute policy on it is missing, disabled or cannot be met \
                     with the cluster's hosts"
                ),
                None => "no `spec.controlPlane.antiAffinity` yet".into(),
            }
        );
        if let Some((host, on)) = fatal_now {
            out.push(
                Finding::new(
                    id,
                    Severity::Blocking,
                    field,
                    format!(
                        "ESXi host `{host}` runs {} of the {n} etcd voters ({}); etcd keeps quorum with at most {tol} \
                         down, so this host failing takes the control plane down{notes}",
                        on.len(),
                        names(on)
                    ),
                )
                .error(super::errors::ETCD_NO_LEADER)
                .fix(fix),
            );
        } else if let Some((host, on)) = fatal_after {
            out.push(
                Finding::new(
                    id,
                    Severity::Blocking,
                    field,
                    format!(
                        "ESXi host `{host}` runs {} of the {} Talos control-plane VMs ({}): once the kubeadm members \
                         are removed, etcd keeps quorum with at most {} down, so this host failing takes the control \
                         plane down{notes}",
                        on.len(),
                        talos.len(),
                        names(on),
                        tolerance(talos.len())
                    ),
                )
                .error(super::errors::ETCD_NO_LEADER)
                .fix(fix),
            );
        } else if let Some((host, on)) = now.first() {
            out.push(
                Finding::new(
                    id,
                    Severity::Warning,
                    field,
                    format!(
                        "ESXi host `{host}` runs {} of the {n} etcd voters ({}): etcd survives it ({tol} may be down), \
                         with no margin left for a second failure{notes}",
                        on.len(),
                        names(on)
                    ),
                )
                .fix(fix),
            );
        } else if !missing.is_empty() || !hostless.is_empty() {
            out.push(
                Finding::new(
                    id,
                    Severity::Warning,
                    field,
                    format!(
                        "the {n} etcd voters' hosts are not all known{notes}: whether one host runs more of them than etcd can lose ({tol}) is not checked"
                    ),
                )
                .fix(format!(
                    "give the inventory of every etcd voter's VM, the kubeadm control-plane VMs included (`govc vm.info -json <vm>…`), so that each shows its `runtime.host`; then {fix}"
                )),
            );
        } else if tag.is_none() && cp.replicas > 1 {
            out.push(
                Finding::new(
                    id,
                    Severity::Warning,
                    field,
                    format!("the {n} etcd voters run on separate hosts now, but {no_tag}{notes}"),
                )
                .fix(set_tag),
            );
        } else {
            out.push(Finding::new(
                id,
                Severity::Pass,
                field,
                format!(
                    "the {n} etcd voters ({} Talos control-plane VMs{}) run on separate ESXi hosts{notes}",
                    talos.len(),
                    if members.is_empty() {
                        String::new()
                    } else {
                        format!(", {} kubeadm members", members.len())
                    }
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migration::check::{check, CheckInputs, Input};
    use crate::model::tests::MINIMAL;

    const TAG: &str = "urn:vmomi:InventoryServiceTag:3f6c1f0e-8d2a-4c1b-9e57-2b0d6a4e71c5:GLOBAL";

    fn inputs(extra: &str, tag: bool, vms: Option<&[(&str, &str)]>) -> CheckInputs {
        let mut text = MINIMAL.to_string();
        if tag {
            text = text.replace(
                "    replicas: 3\n",
                &format!("    replicas: 3\n    antiAffinity: {{tagID: \"{TAG}\"}}\n"),
            );
        }
        text.push_str(extra);
        let config = crate::model::ClusterConfig::from_value(
            "cluster.yaml",
            crate::yaml::parse_one(&text).unwrap(),
        )
        .unwrap();
        let mut i = CheckInputs::new(config, "cluster.yaml", std::time::SystemTime::UNIX_EPOCH);
        i.vsphere_inventory = vms.map(|vms| Input {
            file: "vms.json".into(),
            value: vms
                .iter()
                .map(|(n, h)| VmPlacement {
                    name: n.to_string(),
                    host: Some(h.to_string()),
                    ..Default::default()
                })
                .collect(),
        });
        i
    }

    fn finding(i: &CheckInputs) -> Finding {
        let fs = check(i);
        let mut of: Vec<&Finding> = fs
            .iter()
            .filter(|f| f.id == "control-plane-hosts")
            .collect();
        assert_eq!(of.len(), 1, "{fs:#?}");
        of.remove(0).clone()
    }

    const CP: &str = "  migration:\n    phase: control-plane\n    kubeadm:\n      etcdMembers: [cp-1, cp-2, cp-3]\n";

    #[test]
    fn a_host_failure_that_loses_quorum_blocks() {
        // Without an inventory: the tag is what keeps rollouts apart.
        assert_eq!(
            finding(&inputs("", false, None)).severity,
            Severity::Warning
        );
        assert_eq!(finding(&inputs("", true, None)).severity, Severity::Info);
        // After the migration: 3 voters survive 1 down, so 2 on one host block.
        let spread = [
            ("lab-f-cp-x7k2p", "host-1"),
            ("lab-f-cp-b4n9q", "host-2"),
            ("lab-f-cp-zz2m4", "host-3"),
            ("other-vm", "host-1"),
        ];
        assert_eq!(
            finding(&inputs("", true, Some(&spread))).severity,
            Severity::Pass
        );
        let f = finding(&inputs("", false, Some(&spread)));
        assert!(
            f.severity == Severity::Warning
                && f.summary
                    .contains("nothing keeps new control-plane VMs apart"),
            "{f:#?}"
        );
        let two = [
            ("lab-f-cp-x7k2p", "host-1"),
            ("lab-f-cp-b4n9q", "host-1"),
            ("lab-f-cp-zz2m4", "host-3"),
        ];
        let f = finding(&inputs("", true, Some(&two)));
        assert_eq!(f.severity, Severity::Blocking, "{f:#?}");
        assert_eq!(f.cluster_error, Some(super::super::errors::ETCD_NO_LEADER));
        assert!(
            f.summary.contains("`host-1` runs 2 of the 3 etcd voters")
                && f.fix.unwrap().contains(TAG)
        );
    }

    #[test]
    fn during_phase_control_plane_the_kubeadm_members_vote_too() {
        // 6 voters, quorum 4: two on each of three hosts survive one host (a warning).
        let pairs = [
            ("cp-1", "host-1"),
            ("cp-2", "host-2"),
            ("cp-3", "host-3"),
            ("lab-f-cp-x7k2p", "host-1"),
            ("lab-f-cp-b4n9q", "host-2"),
            ("lab-f-cp-zz2m4", "host-3"),
        ];
        let f = finding(&inputs(CP, true, Some(&pairs)));
        assert_eq!(f.severity, Severity::Warning, "{f:#?}");
        assert!(f.summary.contains("of the 6 etcd voters"), "{f:#?}");
        // Three on one host: quorum is lost with it.
        let three = [
            ("cp-1", "host-1"),
            ("cp-2", "host-2"),
            ("cp-3", "host-3"),
            ("lab-f-cp-x7k2p", "host-1"),
            ("lab-f-cp-b4n9q", "host-1"),
            ("lab-f-cp-zz2m4", "host-3"),
        ];
        let f = finding(&inputs(CP, true, Some(&three)));
        assert!(
            f.severity == Severity::Blocking && f.summary.contains("`host-1` runs 3 of the 6"),
            "{f:#?}"
        );
        // Fine now, fatal once the kubeadm members are gone: two Talos VMs share host-4.
        let later = [
            ("cp-1", "host-1"),
            ("cp-2", "host-2"),
            ("cp-3", "host-3"),
            ("lab-f-cp-x7k2p", "host-4"),
            ("lab-f-cp-b4n9q", "host-4"),
            ("lab-f-cp-zz2m4", "host-5"),
        ];
        let f = finding(&inputs(CP, true, Some(&later)));
        assert!(
            f.severity == Severity::Blocking
                && f.summary.contains("once the kubeadm members are removed"),
            "{f:#?}"
        );
        // A member the inventory lacks still votes (here 6 voters, one unknown host), and
        // its host is unknown: not a pass (review finding).
        let partial = [
            ("cp-1", "host-1"),
            ("cp-2", "host-2"),
            ("lab-f-cp-x7k2p", "host-3"),
            ("lab-f-cp-b4n9q", "host-4"),
            ("lab-f-cp-zz2m4", "host-5"),
        ];
        let f = finding(&inputs(CP, true, Some(&partial)));
        assert!(
            f.severity == Severity::Warning
                && f.summary
                    .contains("the 6 etcd voters' hosts are not all known")
                && f.summary.contains("`cp-3`"),
            "{f:#?}"
        );
        // VM names in another case, or as FQDNs, are the kubeadm members all the same: three
        // on one host block.
        let renamed = [
            ("CP-1", "host-1"),
            ("cp-2.example.internal", "host-1"),
            ("cp-3", "host-1"),
            ("lab-f-cp-x7k2p", "host-3"),
            ("lab-f-cp-b4n9q", "host-4"),
            ("lab-f-cp-zz2m4", "host-5"),
        ];
        let f = finding(&inputs(CP, true, Some(&renamed)));
        assert!(
            f.severity == Severity::Blocking && f.summary.contains("runs 3 of the 6 etcd voters"),
            "{f:#?}"
        );
        // Nothing of the cluster in the file.
        let none = [("lab-g-cp-x7k2p", "host-1")];
        assert_eq!(
            finding(&inputs(CP, true, Some(&none))).severity,
            Severity::Info
        );
    }

    #[test]
    fn govc_json_of_both_generations_is_read() {
        let new = r#"{"virtualMachines":[
            {"self":{"type":"VirtualMachine","value":"vm-1"},"name":"lab-f-cp-x7k2p",
             "runtime":{"host":{"type":"HostSystem","value":"host-12"},"powerState":"poweredOn"}},
            {"name":"lab-f-cp-b4n9q","runtime":{"powerState":"poweredOff"},
             "summary":{"runtime":{"host":{"type":"HostSystem","value":"host-13"}}}},
            {"name":"tmpl","runtime":{}}]}"#;
        let vms = parse_vm_inventory("vms.json", new).unwrap();
        assert_eq!(
            vms,
            vec![
                VmPlacement {
                    name: "lab-f-cp-x7k2p".into(),
                    host: Some("host-12".into()),
                    power_state: Some("poweredOn".into()),
                    ..Default::default()
                },
                VmPlacement {
                    name: "lab-f-cp-b4n9q".into(),
                    host: Some("host-13".into()),
                    power_state: Some("poweredOff".into()),
                    ..Default::default()
                },
                VmPlacement {
                    name: "tmpl".into(),
                    host: None,
                    ..Default::default()
                },
            ]
        );
        let esc = r#"{"virtualMachines":[{"name":"a","runtime":{"host":{"value":"h\u001b[2J"}}}]}"#;
        assert_eq!(
            parse_vm_inventory("vms.json", esc).unwrap()[0]
                .host
                .as_deref(),
            Some("h\\u{1b}[2J")
        );
        let old = r#"{"VirtualMachines":[{"Name":"a","Runtime":{"Host":{"Type":"HostSystem","Value":"host-9"}}}]}"#;
        assert_eq!(
            parse_vm_inventory("vms.json", old).unwrap()[0]
                .host
                .as_deref(),
            Some("host-9")
        );
        assert!(
            parse_vm_inventory("vms.json", r#"{"virtualMachines":null}"#)
                .unwrap()
                .is_empty()
        );
        for (bad, says) in [
            ("[]", "no `virtualMachines`"),
            ("{\"virtualMachines\": 3}", "expected a list"),
            ("kind: List", "not JSON"),
            (
                "{\"virtualMachines\": [{}]}",
                "virtualMachines[0] has no `name`",
            ),
        ] {
            let e = parse_vm_inventory("vms.json", bad).unwrap_err().to_string();
            assert!(e.starts_with("vms.json: ") && e.contains(says), "{e}");
        }
    }

    #[test]
    fn control_plane_machines_are_named_by_the_generator() {
        assert!(is_control_plane_machine("lab-f-cp", "lab-f-cp-x7k2p"));
        for other in [
            "lab-f-cp-1",
            "lab-f-cp-x7k2pp",
            "lab-f-cp-abcde",
            "lab-f-cp-cp-x7k2p",
            "lab-f-cp-c501a00e18-x7k2p",
            "lab-f-cpx-x7k2p",
        ] {
            assert!(!is_control_plane_machine("lab-f-cp", other), "{other}");
        }
        assert_eq!([1, 2, 3, 4, 5, 6, 7].map(tolerance), [0, 0, 1, 1, 2, 2, 3]);
    }
}
