//! `capstan restore check`: what a restored backup says runs (VSphereVMs by BIOS UUID,
//! IPAddresses) against what runs (the VMs of each cluster's vSphere folder, the nodes'
//! InternalIPs), before CAPV and the IPAM provider reconcile anything (D8).
//!
//! What the comparison rests on:
//! - CAPV v1.13.1 `pkg/services/govmomi/util.go:65-79`: a VSphereVM with `spec.biosUUID`
//!   is bound to the VM vCenter finds by that BIOS UUID, and to nothing else;
//!   `pkg/services/govmomi/service.go:83-102`: when that lookup finds nothing the VSphereVM
//!   is marked `NotFoundByBIOSUUID` and no VM is cloned, so its Machine never gets a node.
//! - A VM of the folder that no VSphereVM names has no Machine: nothing manages it and
//!   nothing deletes it, and its address is in no restored IPAddress.
//! - The in-cluster IPAM provider (cluster-api-ipam-provider-in-cluster) allocates the
//!   lowest address of the pool that no IPAddress holds, from its bookkeeping alone: it
//!   never probes the network, so an address a running node holds without an IPAddress
//!   is handed out again.
//! - CACPPT v0.5.12 does not remediate a control-plane Machine without a node, and
//!   `forceEtcdLeave` (`controllers/etcd.go:166-257`) removes etcd members that are none
//!   of its Machines.
//!
//! Pure: parsed inputs in, a report out. Every name in the report comes from an input file
//! and is escaped where it is printed.

use crate::inputs::MovedFile;
use crate::migration::check::VmPlacement;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// An error reading an input of `restore check`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InventoryError {
    /// A `kubectl get nodes -o json` file that is not one.
    #[error(
        "{file}: {problem}; expected `kubectl get nodes -o json` output of a workload cluster"
    )]
    Nodes {
        /// The file.
        file: String,
        /// What is wrong.
        problem: String,
    },
    /// A backup directory without a VSphereVM.
    #[error("{dir}: no VSphereVM object; expected the directory `capstan backup pull` wrote")]
    NoVSphereVm {
        /// The directory.
        dir: String,
    },
}

/// A restored VSphereVM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RestoredVm {
    /// `namespace/name`.
    pub name: String,
    /// `spec.biosUUID`, lowercase.
    pub bios_uuid: Option<String>,
    /// Whether its Machine (same name, same namespace) is a control-plane Machine.
    pub control_plane: bool,
}

/// What the restored backup says runs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Restored {
    /// The VSphereVMs.
    pub vms: Vec<RestoredVm>,
    /// The addresses the restored IPAddresses hold, and the IPAddress naming each.
    pub addresses: BTreeMap<IpAddr, String>,
}

/// A workload cluster's node and its InternalIPs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Node {
    /// The node name.
    pub name: String,
    /// Its InternalIP addresses.
    pub internal_ips: Vec<String>,
}

/// One mismatch and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Mismatch {
    /// `orphan-vm`, `missing-vm`, `no-bios-uuid`, `unclaimed-address`.
    pub kind: &'static str,
    /// The VM, VSphereVM or address concerned.
    pub subject: String,
    /// What was found.
    pub detail: String,
    /// The commands, in order.
    pub actions: Vec<String>,
}

/// The report of `restore check`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Report {
    /// VSphereVMs whose VM is in the inventory.
    pub matched: usize,
    /// Every mismatch, in a fixed order (kind, then subject).
    pub mismatches: Vec<Mismatch>,
}

fn str_at<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or("")
}

/// The VSphereVMs and IPAddresses of a pulled backup (`clusterctl move` files). Secrets
/// are skipped unparsed.
pub(crate) fn restored(dir: &str, files: &[MovedFile]) -> Result<Restored, InventoryError> {
    let mut objs = Vec::new();
    for f in files {
        let named = crate::backup::object_of(&f.name);
        if named.is_some_and(|(k, _, _)| k == "Secret") {
            continue;
        }
        // A file that is no object of interest (or no YAML) says nothing about what runs.
        let Some(value) = std::str::from_utf8(&f.bytes)
            .ok()
            .and_then(|t| crate::yaml::parse_one(t).ok())
        else {
            continue;
        };
        objs.push(value);
    }
    let key = |v: &Value| {
        format!(
            "{}/{}",
            str_at(v, "/metadata/namespace"),
            str_at(v, "/metadata/name")
        )
    };
    let control_plane: BTreeSet<String> = objs
        .iter()
        .filter(|v| str_at(v, "/kind") == "Machine")
        .filter(|v| {
            v.pointer("/metadata/labels/cluster.x-k8s.io~1control-plane")
                .is_some()
        })
        .map(key)
        .collect();
    let mut out = Restored::default();
    for v in &objs {
        match str_at(v, "/kind") {
            "VSphereVM" => {
                let name = key(v);
                let uuid = str_at(v, "/spec/biosUUID");
                out.vms.push(RestoredVm {
                    control_plane: control_plane.contains(&name),
                    name,
                    bios_uuid: (!uuid.is_empty()).then(|| uuid.to_lowercase()),
                });
            }
            "IPAddress" => {
                if let Ok(ip) = str_at(v, "/spec/address").parse::<IpAddr>() {
                    out.addresses.insert(ip, key(v));
                }
            }
            _ => {}
        }
    }
    if out.vms.is_empty() {
        return Err(InventoryError::NoVSphereVm {
            dir: dir.to_string(),
        });
    }
    out.vms.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The nodes of `kubectl get nodes -o json` output.
pub(crate) fn parse_nodes(file: &str, text: &str) -> Result<Vec<Node>, InventoryError> {
    let bad = |problem: String| InventoryError::Nodes {
        file: file.to_string(),
        problem,
    };
    let doc: Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON ({e})")))?;
    let items = match doc.get("items") {
        Some(Value::Array(a)) => a,
        _ if str_at(&doc, "/kind") == "Node" => std::slice::from_ref(&doc),
        _ => return Err(bad("no `items` list".into())),
    };
    let mut nodes = Vec::with_capacity(items.len());
    for (i, n) in items.iter().enumerate() {
        let name = str_at(n, "/metadata/name");
        if name.is_empty() {
            return Err(bad(format!("items[{i}] has no `metadata.name`")));
        }
        let internal_ips = n
            .pointer("/status/addresses")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter(|a| str_at(a, "/type") == "InternalIP")
                    .map(|a| str_at(a, "/address").to_string())
                    .filter(|a| !a.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        nodes.push(Node {
            name: name.to_string(),
            internal_ips,
        });
    }
    Ok(nodes)
}

/// Quote `s` for a POSIX shell (single quotes).
fn sh(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Compare what the backup restored with the inventory (`vms`, every cluster folder's
/// VMs) and the nodes of the workload clusters.
pub(crate) fn compare(restored: &Restored, vms: &[VmPlacement], nodes: &[Node]) -> Report {
    let mut report = Report::default();
    let mut m = Vec::new();
    let by_uuid: BTreeMap<&str, &VmPlacement> = vms
        .iter()
        .filter_map(|v| Some((v.bios_uuid.as_deref()?, v)))
        .collect();
    let named: BTreeSet<&str> = restored
        .vms
        .iter()
        .filter_map(|v| v.bios_uuid.as_deref())
        .collect();
    for v in &restored.vms {
        let (ns, name) = v.name.split_once('/').unwrap_or(("", &v.name));
        let Some(uuid) = v.bios_uuid.as_deref() else {
            m.push(Mismatch {
                kind: "no-bios-uuid",
                subject: v.name.clone(),
                detail: "the VSphereVM has no `spec.biosUUID`: CAPV would look its VM up by instance UUID and \
                         inventory path, and clone one when neither finds it"
                    .into(),
                actions: vec![format!(
                    "find its VM (`govc vm.info -json {}`) and set the UUID: `kubectl -n {} patch vspherevm {} \
                     --type merge -p '{{\"spec\":{{\"biosUUID\":\"<config.uuid>\"}}}}'`",
                    sh(name),
                    sh(ns),
                    sh(name)
                )],
            });
            continue;
        };
        if by_uuid.contains_key(uuid) {
            report.matched += 1;
            continue;
        }
        let actions = if v.control_plane {
            vec![
                format!(
                    "the control-plane provider does not replace it: confirm its etcd member is gone \
                     (`talosctl -n <a running control-plane node> etcd members`; `talosctl -n <it> etcd \
                     remove-member <id>` if `{name}` is listed)"
                ),
                format!(
                    "once the reconcile is clean and the providers run: `kubectl -n {} delete machine {}`; \
                     the TalosControlPlane creates a replacement that joins the running etcd",
                    sh(ns),
                    sh(name)
                ),
            ]
        } else {
            vec![format!(
                "once the reconcile is clean (no unclaimed address left) and the providers run: `kubectl -n {} \
                 delete machine {}`; its MachineSet creates a replacement, which takes a new address from the pool",
                sh(ns),
                sh(name)
            )]
        };
        m.push(Mismatch {
            kind: "missing-vm",
            subject: v.name.clone(),
            detail: format!(
                "no VM of the inventory has BIOS UUID {uuid}: CAPV marks it NotFoundByBIOSUUID and clones \
                 nothing, its {} Machine never gets a node",
                if v.control_plane {
                    "control-plane"
                } else {
                    "worker"
                }
            ),
            actions,
        });
    }
    let mut orphan_ips: Vec<(String, &str)> = Vec::new();
    for vm in vms {
        if vm.bios_uuid.as_deref().is_some_and(|u| named.contains(u)) {
            continue;
        }
        let uuid = vm.bios_uuid.as_deref().unwrap_or("");
        // govmomi v0.56.0: `-vm.uuid` finds by BIOS UUID first (`cli/flags/search.go:79-81,
        // 193-194`), for `vm.power` and `vm.change` alike; without one, `vm.power` takes the
        // name as an argument (`cli/vm/power.go:58-60`, no `-vm` flag) and `vm.change` as
        // `-vm NAME` (`cli/vm/change.go:137-138`).
        let (power, change) = if uuid.is_empty() {
            (sh(&vm.name), format!("-vm {}", sh(&vm.name)))
        } else {
            let by = format!("-vm.uuid {}", sh(uuid));
            (by.clone(), by)
        };
        for ip in &vm.guest_ips {
            orphan_ips.push((ip.clone(), &vm.name));
        }
        m.push(Mismatch {
            kind: "orphan-vm",
            subject: vm.name.clone(),
            detail: format!(
                "no restored VSphereVM has its BIOS UUID {}({}): nothing manages it, and its addresses ({}) \
                 are in no restored IPAddress",
                if uuid.is_empty() { "(none) " } else { "" },
                if uuid.is_empty() { "-" } else { uuid },
                if vm.guest_ips.is_empty() {
                    "none reported".to_string()
                } else {
                    vm.guest_ips.join(", ")
                }
            ),
            actions: vec![
                format!(
                    "quarantine it, keep it: `govc vm.power -off -force {power}` then `govc vm.change {change} \
                     -annotation 'capstan restore: orphan, kept powered off'`"
                ),
                "if it was a node, `kubectl delete node <name>` on its workload cluster after the power-off".into(),
            ],
        });
    }
    // Addresses running machines hold that no IPAddress claims: the pool would hand them out.
    let mut held: BTreeMap<IpAddr, String> = BTreeMap::new();
    for n in nodes {
        for ip in &n.internal_ips {
            if let Ok(a) = ip.parse::<IpAddr>() {
                held.entry(a).or_insert_with(|| format!("node {}", n.name));
            }
        }
    }
    for (ip, vm) in orphan_ips {
        if let Ok(a) = ip.parse::<IpAddr>() {
            held.entry(a).or_insert_with(|| format!("VM {vm}"));
        }
    }
    if !restored.addresses.is_empty() {
        for (ip, holder) in &held {
            if restored.addresses.contains_key(ip) {
                continue;
            }
            m.push(Mismatch {
                kind: "unclaimed-address",
                subject: ip.to_string(),
                detail: format!(
                    "{holder} holds {ip} and no restored IPAddress claims it: when the address is in a pool the \
                     IPAM provider hands it out again"
                ),
                actions: vec![
                    "if it belongs to an orphan VM: quarantine the VM (above); the address is free once it is off".into(),
                    format!(
                        "otherwise keep it out of the pool: add it to the pool's `spec.excludedAddresses` \
                         (`kubectl -n <namespace> edit inclusterippool <pool>`: `{ip}`) before the IPAM provider starts"
                    ),
                ],
            });
        }
    }
    m.sort_by(|a, b| a.kind.cmp(b.kind).then_with(|| a.subject.cmp(&b.subject)));
    report.mismatches = m;
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &str) -> MovedFile {
        MovedFile {
            name: name.into(),
            bytes: text.as_bytes().to_vec().into(),
        }
    }

    pub(crate) fn backup() -> Vec<MovedFile> {
        vec![
            file(
                "VSphereVM_lab-f_lab-f-cp-b4n9q.yaml",
                "kind: VSphereVM\nmetadata: {namespace: lab-f, name: lab-f-cp-b4n9q}\nspec: {biosUUID: 4211AAAA-0000-0000-0000-000000000001}\n",
            ),
            file(
                "Machine_lab-f_lab-f-cp-b4n9q.yaml",
                "kind: Machine\nmetadata: {namespace: lab-f, name: lab-f-cp-b4n9q, labels: {cluster.x-k8s.io/control-plane: ''}}\n",
            ),
            file(
                "VSphereVM_lab-f_lab-f-workers-x-z9z9z.yaml",
                "kind: VSphereVM\nmetadata: {namespace: lab-f, name: lab-f-workers-x-z9z9z}\nspec: {biosUUID: 4211aaaa-0000-0000-0000-000000000002}\n",
            ),
            file(
                "IPAddress_lab-f_lab-f-cp-b4n9q-0.yaml",
                "kind: IPAddress\nmetadata: {namespace: lab-f, name: lab-f-cp-b4n9q-0}\nspec: {address: 10.0.0.11}\n",
            ),
            file("Secret_lab-f_lab-f-ca.yaml", "not: parsed"),
        ]
    }

    fn vm(name: &str, uuid: &str, ips: &[&str]) -> VmPlacement {
        VmPlacement {
            name: name.into(),
            bios_uuid: Some(uuid.into()),
            guest_ips: ips.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn orphans_missing_vms_and_unclaimed_addresses_are_each_named() {
        let r = restored("restore", &backup()).unwrap();
        assert_eq!(r.vms.len(), 2);
        assert!(r.vms[0].control_plane && !r.vms[1].control_plane);
        let vms = [
            vm(
                "lab-f-cp-b4n9q",
                "4211aaaa-0000-0000-0000-000000000001",
                &["10.0.0.11"],
            ),
            vm(
                "lab-f-cp-new12",
                "4211aaaa-0000-0000-0000-000000000009",
                &["10.0.0.12"],
            ),
        ];
        let nodes = vec![
            Node {
                name: "lab-f-cp-b4n9q".into(),
                internal_ips: vec!["10.0.0.11".into()],
            },
            Node {
                name: "lab-f-cp-new12".into(),
                internal_ips: vec!["10.0.0.12".into()],
            },
        ];
        let rep = compare(&r, &vms, &nodes);
        let kinds: Vec<_> = rep
            .mismatches
            .iter()
            .map(|m| (m.kind, m.subject.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("missing-vm", "lab-f/lab-f-workers-x-z9z9z"),
                ("orphan-vm", "lab-f-cp-new12"),
                ("unclaimed-address", "10.0.0.12"),
            ]
        );
        assert_eq!(rep.matched, 1);
        assert!(
            rep.mismatches[1].actions[0].contains("govc vm.power -off -force -vm.uuid '4211aaaa")
        );
        assert!(rep.mismatches[0].actions[0].contains("MachineSet"));
        // A VM without a BIOS UUID: `vm.power` takes its name as an argument (it has no
        // `-vm` flag), `vm.change` as `-vm NAME`.
        let mut bare = vm("old-vm", "", &[]);
        bare.bios_uuid = None;
        let rep = compare(&r, &[vms[0].clone(), bare], &nodes[..1]);
        let orphan = rep
            .mismatches
            .iter()
            .find(|m| m.kind == "orphan-vm")
            .unwrap();
        assert!(
            orphan.actions[0].contains(
                "`govc vm.power -off -force 'old-vm'` then `govc vm.change -vm 'old-vm' "
            ),
            "{:?}",
            orphan.actions
        );
        // Clean: every VM matched, every address claimed.
        let clean = compare(
            &r,
            &[
                vms[0].clone(),
                vm("w", "4211aaaa-0000-0000-0000-000000000002", &[]),
            ],
            &nodes[..1],
        );
        assert_eq!(clean.mismatches, vec![]);
        assert_eq!(clean.matched, 2);
    }

    #[test]
    fn a_missing_control_plane_vm_is_not_left_to_its_controller() {
        let r = restored("restore", &backup()).unwrap();
        let rep = compare(
            &r,
            &[vm("w", "4211aaaa-0000-0000-0000-000000000002", &[])],
            &[],
        );
        assert_eq!(rep.mismatches.len(), 1);
        assert!(rep.mismatches[0].detail.contains("control-plane Machine"));
        assert!(rep.mismatches[0].actions[0].contains("etcd members"));
    }

    #[test]
    fn nodes_from_kubectl() {
        let n = parse_nodes(
            "n.json",
            r#"{"kind":"List","items":[{"metadata":{"name":"a"},"status":{"addresses":[{"type":"Hostname","address":"a"},{"type":"InternalIP","address":"10.0.0.5"}]}}]}"#,
        )
        .unwrap();
        assert_eq!(n[0].internal_ips, ["10.0.0.5"]);
        assert!(parse_nodes("n.json", "{}").is_err());
        assert!(restored("d", &[]).is_err());
    }
}
