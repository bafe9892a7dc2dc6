//! Encryption at rest: the provider, key name and key value Talos renders against the
//! kubeadm EncryptionConfiguration and the imported bundle.

use super::*;

fn kubeadm_matches(recorded: EncryptionProvider, kubeadm: KeyedProvider) -> bool {
    matches!(
        (recorded, kubeadm),
        (EncryptionProvider::Secretbox, KeyedProvider::Secretbox)
            | (EncryptionProvider::Aescbc, KeyedProvider::Aescbc)
    )
}

fn decode_key(s: &str) -> Option<Zeroizing<Vec<u8>>> {
    base64::engine::general_purpose::STANDARD
        .decode(s.trim().as_bytes())
        .ok()
        .map(Zeroizing::new)
}

impl Cx<'_> {
    /// The encryption findings, one method per finding.
    pub(super) fn encryption(&self, out: &mut Vec<Finding>) {
        self.encryption_provider(out);
        self.encryption_key_name(out);
        self.encryption_missing(out);
        self.encryption_key_value(out);
    }

    /// The provider Talos writes with against the recorded and the kubeadm one.
    fn encryption_provider(&self, out: &mut Vec<Finding>) {
        let enc = &self.i.config.spec.encryption;
        let provider = enc.provider;
        let pname = model::provider_name(provider);
        let reencrypt = "re-encrypt every Secret on the kubeadm side (`kubectl get secrets -A -o json | kubectl replace -f -`)";
        // Talos writes with: secretbox when the bundle has it; aescbc only before Talos 1.3.
        let aescbc_dropped = provider == EncryptionProvider::Aescbc && self.talos_at_least(3);
        // --- encryption-provider
        let id = "encryption-provider";
        if aescbc_dropped {
            out.push(
                Finding::new(
                    id,
                    Severity::Blocking,
                    "spec.encryption.provider vs spec.versions.talos",
                    format!(
                        "the kubeadm cluster encrypts with aescbc only; Talos {} generates machine configs \
                         with the secretbox key only and drops the aescbc key, so Talos apiservers would list \
                         only identity",
                        self.talos_str()
                    ),
                )
                .error(errors::IDENTITY_TRANSFORMER)
                .fix(format!(
                    "on the kubeadm side move to secretbox in two steps (README procedure \"{}\"): add a \
                     secretbox provider with key `key2` after aescbc on every kubeadm apiserver and restart them \
                     all one at a time, then move it first (keep aescbc `key1` second to read old data) and restart \
                     them all again, {reencrypt}, then import again; secretbox first in one step leaves apiservers \
                     that cannot read each other's writes (`no matching prefix found`)",
                    crate::procedure::ROTATE_KEY_NAME.title
                )),
            );
        }
        match &self.i.encryption {
            Some(e) => {
                let file = &e.file;
                let field = format!(
                    "spec.encryption.provider vs {file} resources[{}].providers",
                    e.value.resource_index.map_or("*".into(), |i| i.to_string())
                );
                let kubeadm_first = match &e.value.active {
                    Some(k) => match k.provider {
                        KeyedProvider::Secretbox => EncryptionProvider::Secretbox,
                        KeyedProvider::Aescbc => EncryptionProvider::Aescbc,
                    },
                    None => EncryptionProvider::None,
                };
                let others = e.value.later_providers();
                if kubeadm_first != provider {
                    out.push(
                        Finding::new(
                            id,
                            Severity::Blocking,
                            field,
                            format!(
                                "{file} writes with {}, cluster.yaml (and the imported bundle) says {pname}",
                                model::provider_name(kubeadm_first)
                            ),
                        )
                        .error(if kubeadm_first == EncryptionProvider::None || provider == EncryptionProvider::None {
                            errors::IDENTITY_TRANSFORMER
                        } else {
                            errors::NO_MATCHING_PREFIX
                        })
                        .fix("the bundle was imported from another encryption setup: import again from the current kubeadm files"),
                    );
                } else if !others.is_empty() {
                    out.push(
                        Finding::new(
                            id,
                            Severity::Blocking,
                            field,
                            format!(
                                "{file} lists {} after {}; Talos lists only {} then identity, so Secrets still \
                                 written by {} are unreadable to Talos",
                                others.join(", "),
                                e.value.providers.first().map_or("nothing", String::as_str),
                                if provider == EncryptionProvider::None { "identity" } else { pname },
                                others.join(", ")
                            ),
                        )
                        .error(errors::NO_MATCHING_PREFIX)
                        .fix(format!("{reencrypt} so everything is written by the first provider, then remove {} from {file} and restart the apiservers", others.join(", "))),
                    );
                } else if !aescbc_dropped {
                    out.push(Finding::new(
                        id,
                        Severity::Pass,
                        field,
                        format!(
                            "{file} lists {}; Talos lists {} then identity",
                            e.value.providers.join(" then "),
                            if provider == EncryptionProvider::None {
                                "nothing".to_string()
                            } else {
                                format!("{pname} `{}`", model::talos_key_name(provider))
                            }
                        ),
                    ));
                }
            }
            None if !aescbc_dropped => out.push(Finding::new(
                id,
                Severity::Info,
                "spec.encryption.provider",
                format!(
                    "cluster.yaml records {pname}; Talos will list {} then identity; not compared with the \
                     kubeadm EncryptionConfiguration: pass --encryption-config",
                    if provider == EncryptionProvider::None { "nothing" } else { pname }
                ),
            )),
            None => {}
        }
    }

    /// The key name Talos writes under against the kubeadm EncryptionConfiguration.
    fn encryption_key_name(&self, out: &mut Vec<Finding>) {
        let enc = &self.i.config.spec.encryption;
        let provider = enc.provider;
        let reencrypt = "re-encrypt every Secret on the kubeadm side (`kubectl get secrets -A -o json | kubectl replace -f -`)";
        // --- encryption-key-name
        let id = "encryption-key-name";
        match &self.i.encryption {
            Some(e) => match &e.value.active {
                None => out.push(Finding::new(
                    id,
                    Severity::Pass,
                    format!("{} keys", e.file),
                    "the first provider for secrets is identity: no key name to match".into(),
                )),
                Some(k) => {
                    let want = k.provider.talos_key_name();
                    let p = k.provider.name();
                    let field = format!(
                        "{} resources[{}].providers[0].{p}.keys[0].name",
                        e.file,
                        e.value.resource_index.unwrap_or(0)
                    );
                    if k.name != want {
                        out.push(
                            Finding::new(
                                id,
                                Severity::Blocking,
                                field.clone(),
                                format!(
                                    "the kubeadm {p} key is named `{}`; Talos names its {p} key `{want}`, so \
                                     neither side can read what the other writes",
                                    k.name
                                ),
                            )
                            .error(errors::NO_MATCHING_PREFIX)
                            .fix(format!(
                                "in {}: {}",
                                e.file,
                                crate::procedure::rotate_key_name_fix(want, &k.name)
                            )),
                        );
                    } else if k.all_key_names.len() > 1 {
                        out.push(
                            Finding::new(
                                id,
                                Severity::Blocking,
                                field.clone(),
                                format!(
                                    "{p} lists {} keys ({}); Talos carries only `{want}`, so Secrets still \
                                     encrypted with the others are unreadable to Talos",
                                    k.all_key_names.len(),
                                    k.all_key_names.join(", ")
                                ),
                            )
                            .error(errors::NO_MATCHING_PREFIX)
                            .fix(format!(
                                "{reencrypt}, then remove every key but `{want}` from {} and restart the apiservers",
                                e.file
                            )),
                        );
                    } else {
                        out.push(Finding::new(
                            id,
                            Severity::Pass,
                            field.clone(),
                            format!("the kubeadm {p} key is named `{want}`, as Talos names it"),
                        ));
                    }
                    if enc.key_name.as_deref() != Some(k.name.as_str()) && kubeadm_matches(provider, k.provider) {
                        out.push(
                            Finding::new(
                                id,
                                Severity::Warning,
                                format!("spec.encryption.keyName vs {field}"),
                                format!(
                                    "cluster.yaml records key `{}`, {} has `{}`: cluster.yaml is out of date",
                                    enc.key_name.as_deref().unwrap_or("(none)"),
                                    e.file,
                                    k.name
                                ),
                            )
                            .fix(format!("set spec.encryption.keyName to `{}` (after importing again if the key itself changed)", k.name)),
                        );
                    }
                }
            },
            None => match (provider, enc.key_name.as_deref()) {
                (EncryptionProvider::None, _) => out.push(Finding::new(
                    id,
                    Severity::Pass,
                    "spec.encryption.keyName",
                    "provider `none`: no key name to match".into(),
                )),
                (p, None) => out.push(
                    Finding::new(
                        id,
                        Severity::Warning,
                        "spec.encryption.keyName",
                        format!("no key name recorded for provider {}; Talos uses `{}`", model::provider_name(p), model::talos_key_name(p)),
                    )
                    .fix("pass --encryption-config to compare with the kubeadm file, and record its key name"),
                ),
                (p, Some(name)) => {
                    let want = model::talos_key_name(p);
                    let field = "spec.encryption.keyName";
                    if name == want {
                        out.push(Finding::new(
                            id,
                            Severity::Pass,
                            field,
                            format!("the kubeadm {} key is named `{want}`, as Talos names it", model::provider_name(p)),
                        ));
                    } else {
                        out.push(
                            Finding::new(
                                id,
                                Severity::Blocking,
                                field,
                                format!(
                                    "the kubeadm {} key is named `{name}`; Talos names it `{want}`, so neither \
                                     side can read what the other writes",
                                    model::provider_name(p)
                                ),
                            )
                            .error(errors::NO_MATCHING_PREFIX)
                            .fix(crate::procedure::rotate_key_name_fix(want, name)),
                        );
                    }
                }
            },
        }
    }

    /// Whether each side encrypts at all.
    fn encryption_missing(&self, out: &mut Vec<Finding>) {
        let enc = &self.i.config.spec.encryption;
        let provider = enc.provider;
        let pname = model::provider_name(provider);
        // Talos writes with: secretbox when the bundle has it; aescbc only before Talos 1.3.
        let aescbc_dropped = provider == EncryptionProvider::Aescbc && self.talos_at_least(3);
        // --- encryption-missing: does each side encrypt?
        let id = "encryption-missing";
        let (kubeadm_encrypts, kubeadm_src) = if let Some(e) = &self.i.encryption {
            (e.value.encrypts_secrets(), e.file.clone())
        } else if let Some(a) = &self.i.apiserver {
            (
                a.value.encryption_provider_config().is_some(),
                format!("{} --encryption-provider-config", a.file),
            )
        } else {
            (
                provider != EncryptionProvider::None,
                "spec.encryption.provider".to_string(),
            )
        };
        let bundle_secret = self.i.bundle.as_ref().map(|b| {
            let s = b.secrets.as_ref();
            let secretbox = s.is_some_and(|s| s.secretboxencryptionsecret.is_some());
            let aescbc = s.is_some_and(|s| s.aescbcencryptionsecret.is_some());
            (b.label().to_string(), secretbox, aescbc)
        });
        let (talos_encrypts, talos_src) = match &bundle_secret {
            Some((label, secretbox, aescbc)) => (
                *secretbox || (*aescbc && !self.talos_at_least(3)),
                format!("{label} secrets.*encryptionsecret"),
            ),
            None => (
                provider == EncryptionProvider::Secretbox
                    || (provider == EncryptionProvider::Aescbc && !self.talos_at_least(3)),
                "spec.encryption.provider".to_string(),
            ),
        };
        let field = format!("{kubeadm_src} vs {talos_src}");
        let yes = |b: bool| if b { "encrypt" } else { "do not encrypt" };
        if self.i.encryption.is_none() && self.i.apiserver.is_none() && self.i.bundle.is_none() {
            out.push(Finding::new(
                id,
                Severity::Info,
                "spec.encryption.provider",
                format!(
                    "cluster.yaml records {pname}: the Talos apiservers will {} Secrets; not compared with the \
                     kubeadm apiserver or the bundle: pass --apiserver-manifest or --encryption-config, and \
                     --identity to open secrets.age",
                    yes(talos_encrypts)
                ),
            ));
        } else if kubeadm_encrypts == talos_encrypts {
            out.push(Finding::new(
                id,
                Severity::Pass,
                field,
                if kubeadm_encrypts {
                    "the kubeadm and the Talos apiservers both encrypt Secrets at rest".to_string()
                } else {
                    "neither the kubeadm nor the Talos apiservers encrypt Secrets at rest"
                        .to_string()
                },
            ));
        } else if aescbc_dropped {
            out.push(Finding::new(
                id,
                Severity::Info,
                field,
                "the kubeadm apiservers encrypt with aescbc, the Talos apiservers would not encrypt: see \
                 encryption-provider"
                    .into(),
            ));
        } else if kubeadm_encrypts {
            {
                out.push(
                    Finding::new(
                        id,
                        Severity::Blocking,
                        field,
                        "the kubeadm apiservers encrypt Secrets, the Talos apiservers would have no key and \
                         could not read them"
                            .into(),
                    )
                    .error(errors::IDENTITY_TRANSFORMER)
                    .fix("import again with --encryption-config (the file the kubeadm apiserver's --encryption-provider-config names), so the bundle carries the kubeadm key"),
                );
            }
        } else {
            out.push(
                Finding::new(
                    id,
                    Severity::Blocking,
                    field,
                    "the kubeadm apiservers do not encrypt Secrets, but the Talos apiservers would (the bundle \
                     carries an encryption secret, as `talosctl gen secrets` adds one): kubeadm apiservers \
                     could not read Secrets written by Talos"
                        .into(),
                )
                .error(errors::IDENTITY_TRANSFORMER)
                .fix("import again from the kubeadm files (capstan carries no encryption secret when kubeadm has none; `talosctl gen secrets` always adds one), or first enable the same EncryptionConfiguration on every kubeadm apiserver"),
            );
        }
    }

    /// The key value of the bundle against the kubeadm key of that name.
    fn encryption_key_value(&self, out: &mut Vec<Finding>) {
        // --- encryption-key-value
        let id = "encryption-key-value";
        match (&self.i.encryption, &self.i.bundle) {
            (Some(e), Some(b)) => {
                match &e.value.active {
                    None => out.push(Finding::new(
                        id,
                        Severity::Info,
                        format!("{} vs {}", e.file, b.label()),
                        "the kubeadm side does not encrypt: no key value to compare".into(),
                    )),
                    Some(k) => {
                        let (bundle_field, value) = match k.provider {
                            KeyedProvider::Secretbox => (
                                "secrets.secretboxencryptionsecret",
                                b.secrets
                                    .as_ref()
                                    .and_then(|s| s.secretboxencryptionsecret.as_ref()),
                            ),
                            KeyedProvider::Aescbc => (
                                "secrets.aescbcencryptionsecret",
                                b.secrets
                                    .as_ref()
                                    .and_then(|s| s.aescbcencryptionsecret.as_ref()),
                            ),
                        };
                        let field = format!(
                            "{} key `{}` vs {} {bundle_field}",
                            e.file,
                            k.name,
                            b.label()
                        );
                        match value {
                        None => out.push(Finding::new(
                            id,
                            Severity::Info,
                            field,
                            format!("the bundle carries no {} key to compare (see encryption-missing)", k.provider.name()),
                        )),
                        Some(v) => {
                            let same = match (decode_key(v), decode_key(k.secret())) {
                                (Some(a), Some(b)) => *a == *b,
                                _ => false,
                            };
                            if same {
                                out.push(Finding::new(
                                    id,
                                    Severity::Pass,
                                    field,
                                    format!("the bundle's {} key equals the kubeadm key (values not shown)", k.provider.name()),
                                ));
                            } else {
                                out.push(
                                    Finding::new(
                                        id,
                                        Severity::Blocking,
                                        field,
                                        format!(
                                            "the bundle's {} key differs from the kubeadm key `{}` (values not shown): \
                                             same provider and name, different key",
                                            k.provider.name(),
                                            k.name
                                        ),
                                    )
                                    .error(errors::WRONG_KEY)
                                    .fix("import again from the current kubeadm files (never use the fresh key `talosctl gen secrets` invents)"),
                                );
                            }
                        }
                    }
                    }
                }
            }
            (enc, bundle) => {
                let missing: Vec<&str> = [
                    enc.is_none().then_some("--encryption-config"),
                    bundle
                        .is_none()
                        .then_some("--identity (to open secrets.age)"),
                ]
                .into_iter()
                .flatten()
                .collect();
                out.push(Finding::new(
                    id,
                    Severity::Info,
                    "secrets.age secrets.*encryptionsecret vs the kubeadm key",
                    format!(
                        "the key value was not compared: pass {}",
                        missing.join(" and ")
                    ),
                ));
            }
        }
    }
}
