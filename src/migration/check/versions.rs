//! Versions and releases: the Talos version against the flavour's providers, Kubernetes
//! against Talos and kubeadm, the etcd version skew, the control-plane replica count, and
//! the provider releases the phases were verified against.

use super::*;

/// The etcd minor a Talos minor ships (Talos `pkg/machinery/constants/constants.go`,
/// `DefaultEtcdVersion`).
fn talos_etcd_minor(talos_minor: u32) -> (u32, u32) {
    match talos_minor {
        0..=10 => (3, 5),
        11..=13 => (3, 6),
        _ => (3, 7),
    }
}

impl Cx<'_> {
    pub(super) fn flavour_talos_version(&self, out: &mut Vec<Finding>) {
        let s = &self.i.config.spec;
        let field = "spec.versions.talos vs spec.flavour";
        let Some(t) = self.talos else {
            out.push(
                Finding::new(
                    "flavour-talos-version",
                    Severity::Blocking,
                    "spec.versions.talos",
                    format!("`{}` is not a Talos version `v1.Y.Z`", s.versions.talos),
                )
                .fix("set spec.versions.talos to the Talos release the nodes will run, e.g. `v1.10.6`"),
            );
            return;
        };
        let (lo, hi) = model::flavour_talos_range(s.flavour);
        let f = if !TALOS_SUPPORT.iter().any(|r| r.talos_minor == t.minor) {
            Finding::new(
                "flavour-talos-version",
                Severity::Blocking,
                field,
                format!("Talos {t} is not in capstan's support table (Talos v1.8 to v1.14)"),
            )
            .fix("choose a Talos version between v1.8 and v1.14")
        } else if t.minor < lo || t.minor > hi {
            Finding::new(
                "flavour-talos-version",
                Severity::Blocking,
                field,
                format!(
                    "flavour `{}` providers (CABPT/CACPPT) support Talos v1.{lo} to v1.{hi}, not {t}: \
                     CABPT would generate machine configs for a version contract it does not know",
                    s.flavour.as_str()
                ),
            )
            .fix(format!(
                "choose Talos v1.{lo} to v1.{hi}, or the flavour whose providers support {t}"
            ))
        } else {
            Finding::new(
                "flavour-talos-version",
                Severity::Pass,
                field,
                format!(
                    "Talos {t} is supported by the flavour `{}` providers (Talos v1.{lo} to v1.{hi})",
                    s.flavour.as_str()
                ),
            )
        };
        out.push(f);
    }

    pub(super) fn kubernetes_version(&self, out: &mut Vec<Finding>) {
        let want = &self.i.config.spec.versions.kubernetes;
        let id = "kubernetes-version";
        let Some(k) = SemVer::parse(want) else {
            out.push(
                Finding::new(
                    id,
                    Severity::Blocking,
                    "spec.versions.kubernetes",
                    format!("`{want}` is not a Kubernetes version `vX.Y.Z`"),
                )
                .fix("set spec.versions.kubernetes to the version the kubeadm cluster runs"),
            );
            return;
        };
        if let Some(t) = self.talos {
            if let Some(row) = TALOS_SUPPORT.iter().find(|r| r.talos_minor == t.minor) {
                let field = "spec.versions.kubernetes vs spec.versions.talos";
                if k.major != 1 || k.minor < row.k8s_min || k.minor > row.k8s_max {
                    out.push(
                        Finding::new(
                            id,
                            Severity::Blocking,
                            field,
                            format!(
                                "Kubernetes {k} is not supported by Talos v1.{}: it runs Kubernetes \
                                 v1.{} to v1.{}",
                                row.talos_minor, row.k8s_min, row.k8s_max
                            ),
                        )
                        .fix(format!(
                            "migrate with a Talos version that supports Kubernetes v1.{} (see the \
                             Talos support matrix), and upgrade after the migration",
                            k.minor
                        )),
                    );
                } else {
                    out.push(Finding::new(
                        id,
                        Severity::Pass,
                        field,
                        format!(
                            "Kubernetes {k} is within Talos v1.{}'s range (v1.{} to v1.{})",
                            row.talos_minor, row.k8s_min, row.k8s_max
                        ),
                    ));
                }
            }
        }
        // What the kubeadm cluster runs.
        let mut running: Vec<(String, String)> = Vec::new();
        if let Some(a) = &self.i.apiserver {
            if let Some(v) = a.value.kubernetes_version() {
                running.push((format!("{} image", a.file), v.to_string()));
            }
        }
        if let Some(c) = &self.i.cluster_config {
            if let Some(v) = &c.value.kubernetes_version {
                running.push((format!("{} kubernetesVersion", c.file), v.clone()));
            }
        }
        if running.is_empty() {
            out.push(Finding::new(
                id,
                Severity::Info,
                "spec.versions.kubernetes vs the kubeadm version",
                format!(
                    "the running kubeadm version was not compared with {k}: pass --apiserver-manifest \
                     or --kubeadm-config"
                ),
            ));
        }
        for (source, v) in running {
            let field = format!("spec.versions.kubernetes vs {source}");
            let f = match SemVer::parse(v.split(['-', '+']).next().unwrap_or(&v)) {
                None => Finding::new(
                    id,
                    Severity::Warning,
                    field,
                    format!("`{v}` is not a version capstan can compare with {k}"),
                ),
                Some(r) if r == k => Finding::new(
                    id,
                    Severity::Pass,
                    field,
                    format!("the kubeadm cluster runs {r}, the Talos nodes will run {k}"),
                ),
                Some(r) if r.major == k.major && r.minor == k.minor => Finding::new(
                    id,
                    Severity::Warning,
                    field,
                    format!(
                        "the kubeadm cluster runs {r}, the Talos nodes will run {k}: a patch-level \
                         difference (allowed, but control-plane components differ during the migration)"
                    ),
                )
                .fix(format!(
                    "set spec.versions.kubernetes to {r}, or patch-upgrade the kubeadm cluster first"
                )),
                Some(r) => Finding::new(
                    id,
                    Severity::Blocking,
                    field,
                    format!(
                        "the kubeadm cluster runs {r}, the Talos nodes would run {k}: joining \
                         control-plane nodes of another minor breaks the version-skew policy (kubelets \
                         must not be newer than the apiservers)"
                    ),
                )
                .fix(format!(
                    "migrate at the running version (spec.versions.kubernetes: {r}) and upgrade \
                     Kubernetes once kubeadm is gone"
                )),
            };
            out.push(f);
        }
    }

    pub(super) fn etcd_version_skew(&self, out: &mut Vec<Finding>) {
        let id = "etcd-version-skew";
        if let Some(m) = self.i.config.spec.migration.as_ref().filter(|m| {
            !m.kubeadm_control_plane_present()
                && matches!(m.phase, Phase::Workers | Phase::Complete)
        }) {
            out.push(Finding::new(
                id,
                Severity::Info,
                "spec.migration.phase",
                format!(
                    "phase `{}`: no kubeadm etcd member is left, so the kubeadm etcd version no longer matters",
                    m.phase.as_str()
                ),
            ));
            return;
        }
        let prov = self
            .i
            .config
            .spec
            .provenance
            .as_ref()
            .and_then(|p| p.etcd_version.clone());
        let kubeadm_tag = self
            .i
            .cluster_config
            .as_ref()
            .and_then(|c| c.value.etcd_image_tag.clone().map(|t| (c.file.clone(), t)));
        let (field, version) = match (&self.i.etcd_version, kubeadm_tag, prov) {
            (Some(v), _, _) => ("--etcd-version".to_string(), v.clone()),
            (None, Some((file, t)), _) => (format!("{file} etcd.local.imageTag"), t),
            (None, None, Some(p)) => ("spec.provenance.etcdVersion".to_string(), p),
            (None, None, None) => {
                // Talos 1.11 and later run etcd 3.6, which a kubeadm etcd 3.5 below 3.5.20
                // cannot be joined by: while kubeadm members exist the version must be known.
                let joining =
                    self.talos_at_least(11)
                        && self.i.config.spec.migration.as_ref().is_some_and(|m| {
                            matches!(m.phase, Phase::Prepare | Phase::ControlPlane)
                        });
                let f = if joining {
                    Finding::new(
                        id,
                        Severity::Blocking,
                        "spec.provenance.etcdVersion",
                        format!(
                            "the kubeadm etcd version is not known, and Talos {} runs etcd 3.6, which needs every \
                             3.5 member on 3.5.20 or later",
                            self.talos_str()
                        ),
                    )
                    .error(errors::TOO_MANY_LEARNERS)
                    .fix("record it in cluster.yaml: spec.provenance.etcdVersion (`etcdctl version` on a kubeadm node)")
                } else {
                    Finding::new(
                        id,
                        Severity::Info,
                        "spec.provenance.etcdVersion",
                        "the kubeadm etcd version is not known: pass --etcd-version (`etcdctl version`) \
                         or --kubeadm-config"
                            .into(),
                    )
                };
                out.push(f);
                return;
            }
        };
        let field = format!("{field} vs spec.versions.talos");
        let Some((maj, min, patch)) = parse_etcd_version(&version) else {
            out.push(
                Finding::new(
                    id,
                    Severity::Warning,
                    field,
                    format!("`{version}` is not an etcd version capstan can compare"),
                )
                .fix("pass --etcd-version with the version `etcdctl version` reports"),
            );
            return;
        };
        let Some(t) = self.talos else {
            out.push(Finding::new(
                id,
                Severity::Info,
                field,
                format!("kubeadm runs etcd {maj}.{min}.{patch}; the Talos version does not parse, so the skew was not compared"),
            ));
            return;
        };
        out.push(skew(id, field, (maj, min, patch), t));
    }

    pub(super) fn control_plane_replicas(&self, out: &mut Vec<Finding>) {
        let id = "control-plane-replicas";
        let field = "spec.controlPlane.replicas";
        let f = match &self.i.config.spec.control_plane {
            None => Finding::new(
                id,
                Severity::Info,
                "spec.controlPlane",
                "not set yet (required to render): the replica count was not checked".into(),
            ),
            Some(cp) if cp.replicas == 0 => Finding::new(
                id,
                Severity::Warning,
                field,
                "0 Talos control-plane machines: the cluster would have no control plane once kubeadm is gone".into(),
            )
            .fix("set an odd number, usually 3"),
            Some(cp) if cp.replicas % 2 == 0 => Finding::new(
                id,
                Severity::Blocking,
                field,
                format!(
                    "{} control-plane machines: an even etcd membership tolerates no more failures than \
                     one fewer, and a split loses quorum",
                    cp.replicas
                ),
            )
            .fix(format!("use {} or {}", cp.replicas - 1, cp.replicas + 1)),
            Some(cp) => {
                let kubeadm = self
                    .i
                    .config
                    .spec
                    .migration
                    .as_ref()
                    .filter(|m| m.phase.migrates())
                    .map_or(0, |m| m.kubeadm.etcd_members.len());
                let during = if kubeadm > 0 && cp.replicas > 0 {
                    let voters = kubeadm + cp.replicas as usize;
                    format!(
                        "; during phase control-plane etcd has the {kubeadm} kubeadm and the {} Talos members: \
                         {voters} voters, quorum {}, so {} members down lose it (one ESXi host holding the Talos \
                         VMs, or Talos machines deleted before their members are removed), until the kubeadm members \
                         are removed one at a time",
                        cp.replicas,
                        voters / 2 + 1,
                        voters - voters / 2
                    )
                } else {
                    String::new()
                };
                Finding::new(
                    id,
                    Severity::Pass,
                    field,
                    format!(
                        "{} control-plane machines: odd, etcd keeps quorum with {} of them{during}",
                        cp.replicas,
                        cp.replicas / 2 + 1
                    ),
                )
            }
        };
        out.push(f);
    }

    /// The provider releases: the phases that migrate run only on releases capstan verified
    /// (`providers::verified`); with `--providers` the declaration is compared with what
    /// the management cluster runs; Talos 1.13's list-valued issuer needs CABPT v0.6.12 (M9).
    pub(super) fn provider_releases(&self, out: &mut Vec<Finding>) {
        use crate::inputs::providers;
        let id = "provider-releases";
        let field = "spec.migration.providers";
        let s = &self.i.config.spec;
        let phase = s.migration.as_ref().map(|m| m.phase);
        let migrating = phase.filter(|p| p.migrates());
        let declared = s.migration.as_ref().and_then(|m| m.providers.as_ref());
        let flavour = s.flavour;
        let pins = providers::verified(flavour);
        if let Some(p) = migrating {
            if pins.is_empty() {
                out.push(
                    Finding::new(
                        id,
                        Severity::Blocking,
                        "spec.flavour vs spec.migration.phase",
                        format!(
                            "no provider release of flavour `{}` is verified for phase `{}`: the community \
                             control-plane provider v0.9 runs preflight checks before scale-up (every Machine \
                             with a Node, etcd members equal to machines) that cannot pass while kubeadm members \
                             exist, so one machine is created, the others never, and its etcd audit can remove \
                             the kubeadm members",
                            flavour.as_str(),
                            p.as_str()
                        ),
                    )
                    .fix(format!(
                        "migrate with flavour `v1beta1` ({}), and move to `v1beta2` once phase `complete` is reached",
                        providers::declaration_hint(crate::model::Flavour::V1beta1)
                    )),
                );
            } else {
                match declared {
                    None => out.push(
                        Finding::new(
                            id,
                            Severity::Blocking,
                            field,
                            format!(
                                "phase `{}` runs only on verified provider releases, and cluster.yaml does not \
                                 declare which the management cluster runs",
                                p.as_str()
                            ),
                        )
                        .fix(format!(
                            "add under spec.migration: {} (`kubectl get providers -A`), and compare with \
                             `capstan check --providers FILE`",
                            providers::declaration_hint(flavour)
                        )),
                    ),
                    Some(d) => {
                        let bad = providers::unverified(flavour, &providers::as_map(d));
                        if bad.is_empty() {
                            out.push(Finding::new(
                                id,
                                Severity::Pass,
                                field,
                                format!(
                                    "{}: the releases phase `{}` was verified against",
                                    d.entries()
                                        .iter()
                                        .map(|(n, r)| format!("{n} {r}"))
                                        .collect::<Vec<_>>()
                                        .join(", "),
                                    p.as_str()
                                ),
                            ));
                        }
                        for u in bad {
                            out.push(
                                Finding::new(
                                    id,
                                    Severity::Blocking,
                                    format!("{field}.{}", u.name),
                                    format!(
                                        "{} {}: phase `{}` of flavour `{}` was verified against {} only; the \
                                         phases rest on what the provider does (when it bootstraps, when its etcd \
                                         audit runs, whether scale-up is gated), which changes between releases",
                                        u.name,
                                        u.release.as_deref().unwrap_or("is not declared"),
                                        p.as_str(),
                                        flavour.as_str(),
                                        u.expected
                                    ),
                                )
                                .fix(format!(
                                    "run {} {} in the management cluster for the migration (clusterctl upgrade \
                                     or a pinned clusterctl init), and declare it",
                                    u.name, u.expected
                                )),
                            );
                        }
                    }
                }
            }
        } else {
            out.push(Finding::new(
                id,
                Severity::Info,
                field,
                format!(
                    "{}: provider releases are required and verified only in the phases that migrate",
                    phase.map_or("no migration phase".to_string(), |p| format!("phase `{}`", p.as_str()))
                ),
            ));
        }
        self.running_releases(out, migrating.is_some(), declared);
        // M9: a list of issuers reaches CABPT as a list-valued extraArgs patch.
        if self.talos_at_least(13) && s.service_account.issuers.len() > 1 {
            let cabpt = self
                .i
                .providers
                .as_ref()
                .and_then(|p| p.value.releases.get("bootstrap-talos").cloned())
                .or_else(|| declared.map(|d| d.bootstrap_talos.clone()));
            let too_old = cabpt.as_deref().and_then(SemVer::parse).is_some_and(|v| {
                (v.major, v.minor) == (0, 6) && v.patch < 12 || (v.major, v.minor) < (0, 6)
            });
            if let (Some(r), true) = (&cabpt, too_old) {
                out.push(
                    Finding::new(
                        id,
                        Severity::Blocking,
                        "spec.serviceAccount.issuers vs bootstrap-talos",
                        format!(
                            "{} issuers with Talos {} render a list-valued service-account-issuer, and CABPT {r} is \
                             built with Talos machinery v1.12 (extraArgs a string map): machine configs fail with \
                             `failure loading StrategicPatch`",
                            s.service_account.issuers.len(),
                            self.talos_str()
                        ),
                    )
                    .fix("run CABPT v0.6.12 or later (Talos machinery v1.13)"),
                );
            }
        }
    }

    /// `provider-releases` against the management cluster (`--providers`): each declared
    /// release against what runs, or what runs when nothing is declared.
    fn running_releases(
        &self,
        out: &mut Vec<Finding>,
        migrating: bool,
        declared: Option<&crate::model::ProviderReleases>,
    ) {
        use crate::inputs::providers;
        let id = "provider-releases";
        let field = "spec.migration.providers";
        let flavour = self.i.config.spec.flavour;
        match &self.i.providers {
            None => {
                if migrating {
                    out.push(Finding::new(
                        id,
                        Severity::Info,
                        field,
                        "not compared with the management cluster: pass --providers FILE (`kubectl get \
                         providers.clusterctl.cluster.x-k8s.io -A -o yaml` or `kubectl get deployments -A -o yaml`)"
                            .into(),
                    ));
                }
            }
            Some(inv) => {
                let running = &inv.value.releases;
                if let Some(d) = declared {
                    for (name, want) in d.entries() {
                        let have = running.get(name);
                        let f = if have.map(String::as_str) == Some(want) {
                            Finding::new(
                                id,
                                Severity::Pass,
                                format!("{field}.{name} vs {}", inv.file),
                                format!("the management cluster runs {name} {want}, as declared"),
                            )
                        } else {
                            Finding::new(
                                id,
                                if migrating {
                                    Severity::Blocking
                                } else {
                                    Severity::Warning
                                },
                                format!("{field}.{name} vs {}", inv.file),
                                format!(
                                    "cluster.yaml declares {name} {want}, the management cluster runs {}",
                                    have.map_or("none".to_string(), |h| format!(
                                        "{h} ({})",
                                        inv.value.sources.get(name).map(String::as_str).unwrap_or("?")
                                    ))
                                ),
                            )
                            .fix(format!(
                                "declare what runs, or run {name} {want}: the phases are verified for the declared releases"
                            ))
                        };
                        out.push(f);
                    }
                } else if !migrating {
                    let bad = providers::unverified(flavour, running);
                    out.push(Finding::new(
                        id,
                        Severity::Info,
                        inv.file.clone(),
                        format!(
                            "the management cluster runs {}{}",
                            running
                                .iter()
                                .map(|(n, r)| format!("{n} {r}"))
                                .collect::<Vec<_>>()
                                .join(", "),
                            if bad.is_empty() {
                                String::new()
                            } else {
                                format!(
                                    "; not the releases the migration phases of flavour `{}` were verified against ({})",
                                    flavour.as_str(),
                                    bad.iter()
                                        .map(|u| format!("{} {}", u.name, u.expected))
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                )
                            }
                        ),
                    ));
                }
            }
        }
    }
}

/// The kubeadm etcd `maj.min.patch` against the etcd Talos `t` runs: an older member cannot
/// join a newer cluster, etcd upgrades one minor at a time, and a 3.5 member needs 3.5.20
/// (3.5.26 recommended) before etcd 3.6 joins it.
fn skew(id: &'static str, field: String, (maj, min, patch): (u32, u32, u32), t: SemVer) -> Finding {
    let (tmaj, tmin) = talos_etcd_minor(t.minor);
    let have = format!("{maj}.{min}.{patch}");
    if (maj, min) > (tmaj, tmin) {
        Finding::new(
            id,
            Severity::Blocking,
            field,
            format!(
                "kubeadm runs etcd {have}, Talos {t} runs etcd {tmaj}.{tmin}: an older etcd member \
                 cannot join a newer cluster"
            ),
        )
        .fix(format!(
            "use a Talos version that ships etcd {maj}.{min} or newer"
        ))
    } else if (maj, min) < (tmaj, tmin) && (tmaj != maj || tmin > min + 1) {
        Finding::new(
            id,
            Severity::Blocking,
            field,
            format!(
                "kubeadm runs etcd {have}, Talos {t} runs etcd {tmaj}.{tmin}: etcd upgrades one \
                 minor at a time"
            ),
        )
        .fix(format!(
            "migrate with a Talos version that ships etcd {maj}.{} (or {maj}.{min}), or upgrade the \
             kubeadm etcd first",
            min + 1
        ))
    } else if (maj, min) == (3, 5) && (tmaj, tmin) == (3, 6) && patch < 20 {
        Finding::new(
            id,
            Severity::Blocking,
            field,
            format!(
                "kubeadm runs etcd {have}; Talos {t} runs etcd 3.6, which needs every 3.5 member on \
                 3.5.20 or later (learner promotion bug), 3.5.26 recommended"
            ),
        )
        .error(errors::TOO_MANY_LEARNERS)
        .fix(
            "upgrade the kubeadm etcd to 3.5.26 (kubeadm: etcd.local.imageTag 3.5.26-0, one \
             control-plane node at a time) before any Talos node joins",
        )
    } else if (maj, min) == (3, 5) && (tmaj, tmin) == (3, 6) && patch < 26 {
        Finding::new(
            id,
            Severity::Warning,
            field,
            format!(
                "kubeadm runs etcd {have}; Talos {t} runs etcd 3.6: 3.5.20 is the minimum, 3.5.26 \
                 is recommended (zombie members after the upgrade)"
            ),
        )
        .fix("upgrade the kubeadm etcd to 3.5.26 before any Talos node joins")
    } else if (maj, min) == (3, 5) && (tmaj, tmin) == (3, 5) && patch < 20 {
        // The 3.5.20 floor matters only when etcd 3.6 joins a 3.5 member: a later Talos
        // upgrade to v1.11 happens after the migration, when every member is a Talos
        // member (and `check` blocks a v1.11 while kubeadm members remain).
        Finding::new(
            id,
            Severity::Pass,
            field,
            format!(
                "kubeadm runs etcd {have}; Talos {t} runs etcd 3.5: a supported join. Talos v1.11 and later \
                 (etcd 3.6) need 3.5.20 on every member, but no kubeadm member is left by the time Talos is \
                 upgraded past {t}"
            ),
        )
    } else {
        Finding::new(
            id,
            Severity::Pass,
            field,
            format!(
                "kubeadm runs etcd {have}; Talos {t} runs etcd {tmaj}.{tmin}: a supported join"
            ),
        )
    }
}
