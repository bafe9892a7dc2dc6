//! The kubeadm CAs Talos carries (self-signed roots, expiry) and the join token Talos
//! kubelets use.

use super::*;

impl Cx<'_> {
    /// Key custody of the sealed Secrets (D16): `spec.recipients` with one distinct
    /// recipient leaves the imported PKI, the Talos bundle and the etcd encryption key
    /// readable with one identity only; with it lost, only a backup holds them. The policy
    /// of backups (`backup::custody::policy`: two recipients, one kept offline) applied to
    /// git. Which recipient is kept offline cannot be read from `cluster.yaml`, so it is
    /// said, not checked.
    pub(super) fn recipients(&self, out: &mut Vec<Finding>) {
        let id = "recipients";
        let field = "spec.recipients";
        let mut distinct: Vec<&str> = self
            .i
            .config
            .spec
            .recipients
            .iter()
            .map(String::as_str)
            .collect();
        distinct.sort_unstable();
        distinct.dedup();
        let f = match distinct.len() {
            0 => Finding::new(
                id,
                Severity::Info,
                field,
                "no recipients: nothing of this cluster is sealed in git".into(),
            ),
            1 => Finding::new(
                id,
                Severity::Warning,
                field,
                "the sealed Secrets (the imported CAs, the Talos secrets bundle with the etcd encryption key) are \
                 encrypted to one recipient: with its identity lost they can be read from a backup only, and a \
                 restore needs them (`capstan restore plan`, Keys)"
                    .into(),
            )
            .fix(format!(
                "add a second recipient whose identity is kept offline (on no machine that runs capstan or Argo CD) \
                 to spec.recipients, then `capstan secrets rekey {}`",
                self.cluster_dir()
            )),
            n => Finding::new(
                id,
                Severity::Pass,
                field,
                format!(
                    "the sealed Secrets are encrypted to {n} recipients: one lost identity loses none of them \
                     (keep one of them offline)"
                ),
            ),
        };
        out.push(f);
    }

    pub(super) fn cas(&self, out: &mut Vec<Finding>) {
        let Some(cas) = &self.i.cas else {
            out.push(not_compared(
                "ca-intermediate",
                "kubeadm CAs",
                "the CA shape",
                "--pki",
            ));
            out.push(not_compared(
                "ca-expiry",
                "kubeadm CAs",
                "the CA expiry",
                "--pki",
            ));
            return;
        };
        for ca in cas {
            let f = match &ca.shape {
                CaShape::Root => Finding::new(
                    "ca-intermediate",
                    Severity::Pass,
                    ca.file.clone(),
                    format!("the {} is a self-signed root (`{}`)", ca.role, ca.summary.subject),
                ),
                CaShape::Intermediate(reason) => Finding::new(
                    "ca-intermediate",
                    Severity::Blocking,
                    ca.file.clone(),
                    format!(
                        "the {} is an intermediate (subject `{}`, issuer `{}`: {reason}); Talos takes one root \
                         CA per kind and cannot carry an intermediate",
                        ca.role, ca.summary.subject, ca.summary.issuer
                    ),
                )
                .fix("regenerate the cluster's certificates from a self-signed root CA before migrating"),
                CaShape::NotCa(reason) => Finding::new(
                    "ca-intermediate",
                    Severity::Blocking,
                    ca.file.clone(),
                    format!("the {} certificate is not a CA ({reason})", ca.role),
                )
                .fix("pass the kubeadm pki directory (/etc/kubernetes/pki) holding the CA certificates"),
            };
            out.push(f);
        }
        let now = pki::unix_seconds(self.i.now);
        for ca in cas {
            let days = (ca.summary.not_after - now).div_euclid(86_400);
            let f = if ca.summary.not_after < now {
                Finding::new(
                    "ca-expiry",
                    Severity::Blocking,
                    ca.file.clone(),
                    format!("the {} expired at {}", ca.role, ca.summary.not_after_rfc3339()),
                )
                .fix("renew the CA (and every certificate it signed) on the kubeadm side, then import again")
            } else if ca.summary.not_before > now {
                Finding::new(
                    "ca-expiry",
                    Severity::Blocking,
                    ca.file.clone(),
                    format!(
                        "the {} is not valid before {}",
                        ca.role,
                        ca.summary.not_before_rfc3339()
                    ),
                )
                .fix("check the clock, or the CA file")
            } else if days < pki::EXPIRY_WARNING_DAYS {
                Finding::new(
                    "ca-expiry",
                    Severity::Warning,
                    ca.file.clone(),
                    format!(
                        "the {} expires at {} ({days} days left, fewer than {})",
                        ca.role,
                        ca.summary.not_after_rfc3339(),
                        pki::EXPIRY_WARNING_DAYS
                    ),
                )
                .fix("plan a CA rotation; Talos carries this CA as it is")
            } else {
                Finding::new(
                    "ca-expiry",
                    Severity::Pass,
                    ca.file.clone(),
                    format!(
                        "the {} is valid until {} ({days} days)",
                        ca.role,
                        ca.summary.not_after_rfc3339()
                    ),
                )
            };
            out.push(f);
        }
    }

    pub(super) fn bootstrap_token(&self, out: &mut Vec<Finding>) {
        let id = "bootstrap-token";
        let field = "spec.provenance.bootstrapTokenId";
        let recorded = self
            .i
            .config
            .spec
            .provenance
            .as_ref()
            .and_then(|p| p.bootstrap_token_id.clone());
        if let Some(b) = &self.i.bundle {
            let token = b
                .secrets
                .as_ref()
                .map(|s| s.bootstraptoken.clone())
                .filter(|t| !t.is_empty());
            let bfield = format!("{} secrets.bootstraptoken", b.label());
            match token
                .as_deref()
                .map(|t| crate::inputs::kubeadm::parse_bootstrap_token(&bfield, t))
            {
                None | Some(Err(_)) => {
                    out.push(
                        Finding::new(
                            id,
                            Severity::Blocking,
                            bfield,
                            "the bundle has no valid bootstrap token (`<6>.<16>` characters [a-z0-9]): Talos \
                             kubelets could not join"
                                .into(),
                        )
                        .error(errors::UNAUTHORIZED)
                        .fix("import again with --bootstrap-token from `kubeadm token create --ttl 0`"),
                    );
                    return;
                }
                Some(Ok(t)) => {
                    if recorded.as_deref() != Some(t.id()) {
                        out.push(
                            Finding::new(
                                id,
                                Severity::Warning,
                                format!("{field} vs {bfield}"),
                                format!(
                                    "cluster.yaml records token id {}, the bundle carries `{}`",
                                    recorded
                                        .as_deref()
                                        .map_or("nothing".into(), |r| format!("`{r}`")),
                                    t.id()
                                ),
                            )
                            .fix(format!(
                                "set spec.provenance.bootstrapTokenId to `{}`",
                                t.id()
                            )),
                        );
                        return;
                    }
                }
            }
        }
        match recorded {
            Some(tid) => out.push(
                Finding::new(
                    id,
                    Severity::Info,
                    field,
                    format!(
                        "bootstrap token `{tid}`: capstan's sealed Secret kube-system/bootstrap-token-{tid} has \
                         no expiration, but a kubeadm-created token with that id expires (24 h by default) and \
                         is then deleted; its lifetime cannot be seen from here"
                    ),
                )
                .error(errors::UNAUTHORIZED)
                .fix(format!(
                    "if `{tid}` came from `kubeadm token create`, check `kubeadm token list` shows TTL `<forever>` \
                     (created with --ttl 0), or apply secrets/workload/bootstrap-token-{tid}.yaml to the cluster"
                )),
            ),
            None => out.push(
                Finding::new(
                    id,
                    Severity::Warning,
                    field,
                    "no bootstrap token id recorded: capstan cannot tell which token the Talos kubelets will use"
                        .into(),
                )
                .error(errors::UNAUTHORIZED)
                .fix("pass --identity to read it from secrets.age, or import with `capstan import kubeadm`, which records it"),
            ),
        }
    }
}
