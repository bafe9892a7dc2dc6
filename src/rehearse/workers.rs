//! The worker side of the provider model: Cluster API's MachineDeployment and MachineSet
//! controllers (rolling update, preflight checks, remediation), MachineHealthChecks and the
//! cluster autoscaler, as `impl World` beside [`super::model`] [A8, A14, A18, A19].

use std::collections::BTreeSet;

use super::model::{semver, Machine, Mhc, Ms, World};

impl World {
    fn available(&self, m: &Machine) -> bool {
        m.deleting.is_none()
            && m.node_ref.is_some()
            && self.vm(&m.name).is_some_and(|v| self.node_up(v))
    }

    /// The MachineDeployment controller's rolling update: maxSurge 1, maxUnavailable 0 (CAPI's
    /// defaults) \[A14].
    pub(super) fn machine_deployments(&mut self) {
        let names: Vec<String> = self.deployments.keys().cloned().collect();
        for d in names {
            let Some(md) = self.deployments.get(&d).cloned() else {
                continue;
            };
            let key = (
                md.infra_template.clone(),
                md.bootstrap_template.clone(),
                md.version.clone(),
            );
            if !self
                .machine_sets
                .iter()
                .any(|ms| ms.deployment == d && ms.template == key)
            {
                self.seq += 1;
                let name = format!("{d}-{:05}", self.seq);
                self.machine_sets.push(Ms {
                    name,
                    deployment: d.clone(),
                    template: key.clone(),
                    replicas: 0,
                    hold: None,
                });
            }
            let sets: Vec<usize> = (0..self.machine_sets.len())
                .filter(|&i| self.machine_sets[i].deployment == d)
                .collect();
            let new = sets
                .iter()
                .copied()
                .find(|&i| self.machine_sets[i].template == key);
            let Some(new) = new else { continue };
            let old: Vec<usize> = sets.iter().copied().filter(|&i| i != new).collect();
            if old.is_empty() {
                self.machine_sets[new].replicas = md.replicas;
                continue;
            }
            let total: u64 = sets.iter().map(|&i| self.machine_sets[i].replicas).sum();
            let max_total = md.replicas + 1;
            if total < max_total && self.machine_sets[new].replicas < md.replicas {
                let up = (max_total - total).min(md.replicas - self.machine_sets[new].replicas);
                self.machine_sets[new].replicas += up;
            }
            let available = self
                .machines
                .iter()
                .filter(|m| m.deployment.as_deref() == Some(d.as_str()) && self.available(m))
                .count() as u64;
            let mut spare = available.saturating_sub(md.replicas);
            for &i in &old {
                if spare == 0 {
                    break;
                }
                let down = spare.min(self.machine_sets[i].replicas);
                self.machine_sets[i].replicas -= down;
                spare -= down;
            }
            // An old MachineSet with no replicas and no Machines is deleted.
            let empty: Vec<String> = old
                .iter()
                .map(|&i| self.machine_sets[i].clone())
                .filter(|ms| {
                    ms.replicas == 0
                        && !self
                            .machines
                            .iter()
                            .any(|m| m.machine_set.as_deref() == Some(&ms.name))
                })
                .map(|ms| ms.name)
                .collect();
            self.machine_sets.retain(|ms| !empty.contains(&ms.name));
        }
        // A MachineDeployment gone from git takes its MachineSets with it.
        let deployments: BTreeSet<String> = self.deployments.keys().cloned().collect();
        for ms in self.machine_sets.iter_mut() {
            if !deployments.contains(&ms.deployment) {
                ms.replicas = 0;
            }
        }
    }

    /// The MachineSet preflight checks before a scale-up or a remediation (cluster-api
    /// v1.10.10 `machineset_preflight.go`) \[A8].
    pub fn preflight(&self, ms: &Ms) -> Option<String> {
        let Some(tcp) = &self.tcp else {
            return Some("failed to get ControlPlane".into());
        };
        let cp = &self.facts.control_plane;
        let Some(status) = &tcp.status_version else {
            return Some(format!(
                "TalosControlPlane {cp} is provisioning (\"ControlPlaneIsStable\" preflight check failed)"
            ));
        };
        if semver(&tcp.version) > semver(status) {
            return Some(format!(
                "TalosControlPlane {cp} is upgrading (\"ControlPlaneIsStable\" preflight check failed)"
            ));
        }
        // The skew is against the control plane's spec.version (`contract.ControlPlane().
        // Version()`), minor against minor, as upstream compares them.
        let (ms_v, cp_v) = (semver(&ms.template.2), semver(&tcp.version));
        if ms_v.1 > cp_v.1 {
            return Some(format!(
                "MachineSet version ({}) and ControlPlane version ({}) do not conform to the kubernetes version skew policy as MachineSet version is higher than ControlPlane version (\"KubernetesVersionSkew\" preflight check failed)",
                ms.template.2, tcp.version
            ));
        }
        None
    }

    /// The MachineSet controller: create below replicas, delete above, remediate what a
    /// health check marked; scale-ups and remediations pass the preflight checks first
    /// [A8, A18].
    pub(super) fn machine_sets_reconcile(&mut self) {
        for i in 0..self.machine_sets.len() {
            let ms = self.machine_sets[i].clone();
            let mine: Vec<Machine> = self
                .machines
                .iter()
                .filter(|m| {
                    m.machine_set.as_deref() == Some(ms.name.as_str()) && m.deleting.is_none()
                })
                .cloned()
                .collect();
            let marked: Vec<String> = mine
                .iter()
                .filter(|m| m.remediate)
                .map(|m| m.name.clone())
                .collect();
            let mut hold = None;
            if !marked.is_empty() {
                match self.preflight(&ms) {
                    Some(why) => hold = Some(format!("Machine remediation on hold because {why}")),
                    None => {
                        for name in &marked {
                            if let Some(m) = self.machines.iter_mut().find(|m| &m.name == name) {
                                m.deleting = Some(self.t);
                            }
                            self.note(format!("MachineSet {} remediates Machine {name}", ms.name));
                        }
                    }
                }
            }
            let have = mine.len() as u64
                - if hold.is_none() {
                    marked.len() as u64
                } else {
                    0
                };
            if have < ms.replicas {
                match self.preflight(&ms) {
                    Some(why) => hold = Some(format!("Scale up on hold because {why}")),
                    None => {
                        let d = ms.deployment.clone();
                        for _ in have..ms.replicas {
                            if !self.create_machine(Some((&d, &ms))) {
                                break;
                            }
                        }
                    }
                }
            } else if have > ms.replicas {
                let mut candidates: Vec<Machine> =
                    mine.into_iter().filter(|m| !m.remediate).collect();
                candidates.sort_by_key(|m| (m.node_ref.is_some(), m.created, m.name.clone()));
                for m in candidates.iter().take((have - ms.replicas) as usize) {
                    let name = m.name.clone();
                    if let Some(m) = self.machines.iter_mut().find(|x| x.name == name) {
                        m.deleting = Some(self.t);
                    }
                }
            }
            self.machine_sets[i].hold = hold;
        }
        // MachineSets deleted by their MachineDeployment: their Machines go.
        let sets: BTreeSet<String> = self.machine_sets.iter().map(|m| m.name.clone()).collect();
        let t = self.t;
        for m in self.machines.iter_mut() {
            if let Some(s) = &m.machine_set {
                if !sets.contains(s) && m.deleting.is_none() {
                    m.deleting = Some(t);
                }
            }
        }
    }

    /// MachineHealthChecks: a worker whose node is NotReady longer than the timeout, or
    /// without a node past the startup timeout, is marked, unless more than maxUnhealthy of
    /// its pool are \[A18].
    pub(super) fn health_checks_reconcile(&mut self) {
        let checks: Vec<Mhc> = self.health_checks.values().cloned().collect();
        for c in checks {
            let mine: Vec<&Machine> = self
                .machines
                .iter()
                .filter(|m| {
                    m.deployment.as_deref() == Some(c.deployment.as_str()) && m.deleting.is_none()
                })
                .collect();
            let unhealthy: Vec<String> = mine
                .iter()
                .filter(|m| {
                    let vm = self.vm(&m.name);
                    match (&m.node_ref, vm) {
                        (Some(_), Some(v)) => v.failed && self.t >= v.failed_at + c.unhealthy,
                        (None, _) => self.t >= m.created + c.startup,
                        _ => false,
                    }
                })
                .map(|m| m.name.clone())
                .collect();
            // maxUnhealthy as a percentage of the Machines, rounded down.
            let allowed = c.max_unhealthy.allowed(mine.len() as u64);
            let short = (!unhealthy.is_empty() && unhealthy.len() as u64 > allowed).then(|| {
                format!(
                    "remediation short-circuited: {} of {} Machines unhealthy, maxUnhealthy {} allows {allowed}",
                    unhealthy.len(),
                    mine.len(),
                    c.max_unhealthy
                )
            });
            if let Some(m) = self
                .health_checks
                .values_mut()
                .find(|m| m.deployment == c.deployment)
            {
                m.short_circuit = short.clone();
            }
            if unhealthy.is_empty() || short.is_some() {
                continue;
            }
            for m in self
                .machines
                .iter_mut()
                .filter(|m| unhealthy.contains(&m.name))
            {
                m.remediate = true;
            }
        }
    }

    /// The cluster autoscaler: pending Pods raise an autoscaled pool's replicas through the
    /// scale subresource, within its size annotations \[A19].
    pub(super) fn autoscaler(&mut self) {
        let pending: Vec<(String, u64)> =
            self.pending.iter().map(|(k, v)| (k.clone(), *v)).collect();
        for (d, want) in pending {
            let Some(md) = self.deployments.get_mut(&d) else {
                continue;
            };
            let Some((_, max)) = md.autoscaler else {
                continue;
            };
            let target = (md.replicas + want).min(max);
            if target > md.replicas {
                md.replicas = target;
                self.pending.remove(&d);
                self.note(format!("the autoscaler scales {d} to {target}"));
            }
        }
    }
}
