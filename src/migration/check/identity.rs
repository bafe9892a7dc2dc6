//! Service-account identity: each side must accept the tokens the other side issues
//! (issuers and audiences).

use super::*;

impl Cx<'_> {
    /// The issuers the Talos apiservers will use: capstan renders `spec.serviceAccount.issuers`
    /// as extraArgs (all of them from Talos 1.13, the first before); none means Talos's
    /// default, the endpoint URL.
    pub(super) fn talos_issuers(&self) -> Vec<String> {
        let issuers = &self.i.config.spec.service_account.issuers;
        if issuers.is_empty() {
            vec![self.endpoint_url.clone()]
        } else if self.talos_at_least(13) {
            issuers.clone()
        } else {
            vec![issuers[0].clone()]
        }
    }

    pub(super) fn talos_audiences(&self) -> Vec<String> {
        let a = &self.i.config.spec.service_account.audiences;
        if a.is_empty() {
            vec![self.endpoint_url.clone()]
        } else {
            a.clone()
        }
    }

    /// The kubeadm issuers (manifest flags, or kubeadm's default) with a note on where from.
    pub(super) fn kubeadm_issuers(&self, a: &Input<ApiServerFacts>) -> (Vec<String>, bool) {
        let v: Vec<String> = a
            .value
            .service_account_issuers()
            .into_iter()
            .map(str::to_string)
            .collect();
        if v.is_empty() {
            let domain = self
                .i
                .cluster_config
                .as_ref()
                .map(|c| c.value.dns_domain.clone())
                .unwrap_or_else(|| self.i.config.spec.network.dns_domain.clone());
            (
                vec![format!("https://kubernetes.default.svc.{domain}")],
                true,
            )
        } else {
            (v, false)
        }
    }

    pub(super) fn issuer_fix(&self, kubeadm_signing: &str, talos_signing: &str) -> String {
        let c = if self.talos_at_least(13) {
            format!(
                "(c) list both in spec.serviceAccount.issuers, kubeadm's first: [{kubeadm_signing}, {talos_signing}], and both in spec.serviceAccount.audiences"
            )
        } else {
            format!(
                "(c) with Talos v1.13 or later (not {}), list both issuers and both audiences",
                self.talos_str()
            )
        };
        format!(
            "(b) set spec.serviceAccount.issuers to [{kubeadm_signing}] (capstan renders it as the Talos \
             extraArg service-account-issuer; works on every Talos version); or (a) add {talos_signing} \
             as the first --service-account-issuer on every kubeadm apiserver, keep {kubeadm_signing} \
             second, list both in --api-audiences, and restart them; or {c}"
        )
    }

    pub(super) fn service_account_issuer(&self, out: &mut Vec<Finding>) {
        let id = "service-account-issuer";
        let sa = &self.i.config.spec.service_account;
        let field = "spec.serviceAccount.issuers";
        if sa.issuers.len() > 1 && !self.talos_at_least(13) {
            out.push(
                Finding::new(
                    id,
                    Severity::Blocking,
                    field,
                    format!(
                        "Talos {} takes a single service-account issuer (extraArgs is a string map before \
                         v1.13); {} are listed ({}), so only `{}` would be accepted by the Talos apiservers",
                        self.talos_str(),
                        sa.issuers.len(),
                        list(&sa.issuers),
                        sa.issuers[0]
                    ),
                )
                .error(errors::INVALID_BEARER_TOKEN)
                .fix(format!(
                    "keep only the issuer the kubeadm apiservers sign with, or use Talos v1.13 or later; {}",
                    self.issuer_fix(&sa.issuers[0], &self.endpoint_url)
                )),
            );
        }
        if sa.issuers.is_empty() {
            out.push(
                Finding::new(
                    id,
                    Severity::Blocking,
                    field,
                    format!(
                        "no issuer listed: Talos would sign with and accept only its endpoint URL `{}`, \
                         not the kubeadm issuer",
                        self.endpoint_url
                    ),
                )
                .error(errors::INVALID_BEARER_TOKEN)
                .fix("set spec.serviceAccount.issuers to the kubeadm apiserver's --service-account-issuer values (the first signs)"),
            );
            return;
        }
        let talos = self.talos_issuers();
        let Some(a) = &self.i.apiserver else {
            out.push(Finding::new(
                id,
                Severity::Info,
                field,
                format!(
                    "the Talos apiservers will sign with `{}` and accept {} (rendered as extraArgs; Talos's \
                     default would be its endpoint URL `{}`); not compared with the kubeadm apiserver: pass \
                     --apiserver-manifest",
                    talos[0],
                    list(&talos),
                    self.endpoint_url
                ),
            ));
            return;
        };
        let (kubeadm, defaulted) = self.kubeadm_issuers(a);
        let field = format!("{field} vs {} --service-account-issuer", a.file);
        let talos_accepts_kubeadm = talos.contains(&kubeadm[0]);
        let kubeadm_accepts_talos = kubeadm.contains(&talos[0]);
        let kubeadm_desc = format!(
            "kubeadm signs with `{}` and accepts {}{}",
            kubeadm[0],
            list(&kubeadm),
            if defaulted {
                " (kubeadm's default: the manifest sets no --service-account-issuer)"
            } else {
                ""
            }
        );
        let talos_desc = format!(
            "Talos will sign with `{}` and accept {}",
            talos[0],
            list(&talos)
        );
        let f = if talos_accepts_kubeadm && kubeadm_accepts_talos {
            Finding::new(
                id,
                Severity::Pass,
                field,
                format!("{kubeadm_desc}; {talos_desc}: each side accepts the other's tokens"),
            )
        } else {
            let which = match (talos_accepts_kubeadm, kubeadm_accepts_talos) {
                (false, false) => "neither side accepts the other's tokens",
                (false, true) => "Talos apiservers reject tokens signed by kubeadm",
                _ => "kubeadm apiservers reject tokens signed by Talos",
            };
            Finding::new(
                id,
                Severity::Blocking,
                field,
                format!("{kubeadm_desc}; {talos_desc}: {which}"),
            )
            .error(errors::INVALID_BEARER_TOKEN)
            .fix(self.issuer_fix(&kubeadm[0], &talos[0]))
        };
        out.push(f);
    }

    pub(super) fn service_account_audiences(&self, out: &mut Vec<Finding>) {
        let id = "service-account-audiences";
        let field = "spec.serviceAccount.audiences";
        let sa = &self.i.config.spec.service_account;
        if sa.audiences.is_empty() {
            out.push(
                Finding::new(
                    id,
                    Severity::Blocking,
                    field,
                    format!(
                        "no audience listed: Talos would accept only its endpoint URL `{}` as audience",
                        self.endpoint_url
                    ),
                )
                .error(errors::TOKEN_AUDIENCES)
                .fix("set spec.serviceAccount.audiences to the kubeadm apiserver's --api-audiences (or, when unset, its first --service-account-issuer)"),
            );
            return;
        }
        let talos = self.talos_audiences();
        let Some(a) = &self.i.apiserver else {
            out.push(Finding::new(
                id,
                Severity::Info,
                field,
                format!(
                    "the Talos apiservers will accept audiences {} (rendered as --api-audiences); not \
                     compared with the kubeadm apiserver: pass --apiserver-manifest",
                    list(&talos)
                ),
            ));
            return;
        };
        let (issuers, _) = self.kubeadm_issuers(a);
        let mut kubeadm = a.value.api_audiences();
        let defaulted = kubeadm.is_empty();
        if defaulted {
            kubeadm = vec![issuers[0].clone()];
        }
        let field = format!("{field} vs {} --api-audiences", a.file);
        let shared: Vec<&String> = kubeadm.iter().filter(|x| talos.contains(x)).collect();
        let kubeadm_desc = format!(
            "kubeadm accepts {}{}",
            list(&kubeadm),
            if defaulted {
                " (no --api-audiences: the first issuer)"
            } else {
                ""
            }
        );
        let f = if shared.is_empty() {
            Finding::new(
                id,
                Severity::Blocking,
                field,
                format!(
                    "{kubeadm_desc}; Talos will accept {}: no audience in common, so tokens issued by \
                     one side are rejected by the other",
                    list(&talos)
                ),
            )
            .error(errors::TOKEN_AUDIENCES)
            .fix(format!(
                "set spec.serviceAccount.audiences to include {} (capstan renders --api-audiences), or add \
                 {} to --api-audiences on every kubeadm apiserver",
                list(&kubeadm),
                list(&talos)
            ))
        } else if kubeadm.iter().all(|x| talos.contains(x)) {
            Finding::new(
                id,
                Severity::Pass,
                field,
                format!("{kubeadm_desc}; Talos will accept {}", list(&talos)),
            )
        } else {
            Finding::new(
                id,
                Severity::Warning,
                field,
                format!(
                    "{kubeadm_desc}; Talos will accept {}: tokens requested for only {} would be \
                     rejected by the Talos apiservers",
                    list(&talos),
                    list(
                        &kubeadm
                            .iter()
                            .filter(|x| !talos.contains(x))
                            .collect::<Vec<_>>()
                    )
                ),
            )
            .error(errors::TOKEN_AUDIENCES)
            .fix(format!(
                "add the missing audiences to spec.serviceAccount.audiences: {}",
                list(&kubeadm)
            ))
        };
        out.push(f);
    }
}
