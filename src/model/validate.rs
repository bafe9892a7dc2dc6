//! `cluster.yaml` validation: meaning across fields, every problem of a file reported at
//! once with its field path ([`ClusterConfig::validate`]).

use super::*;

impl ClusterConfig {
    /// Check meaning across fields; returns every problem found.
    pub fn validate(&self, purpose: Purpose) -> Vec<Problem> {
        let mut v = Validator::default();
        let s = &self.spec;
        v.dns_label("metadata.name", &self.metadata.name, 40);
        v.dns_label("metadata.namespace", &self.metadata.namespace, 63);

        let talos = v.version("spec.versions.talos", &s.versions.talos);
        let k8s = v.version("spec.versions.kubernetes", &s.versions.kubernetes);
        if let (Some(t), Some(k)) = (talos, k8s) {
            match TALOS_SUPPORT
                .iter()
                .find(|r| t.major == 1 && r.talos_minor == t.minor)
            {
                None => v.push(
                    "spec.versions.talos",
                    format!(
                        "Talos {t} is not in capstan's support table (Talos v1.8 to v1.14); \
                         choose a supported Talos version"
                    ),
                ),
                Some(row) => {
                    if k.major != 1 || k.minor < row.k8s_min || k.minor > row.k8s_max {
                        v.push(
                            "spec.versions.kubernetes",
                            format!(
                                "Kubernetes {k} is not supported by Talos v1.{}: it supports \
                                 Kubernetes v1.{} to v1.{}",
                                row.talos_minor, row.k8s_min, row.k8s_max
                            ),
                        );
                    }
                    let (lo, hi) = flavour_talos_range(s.flavour);
                    if t.major != 1 || t.minor < lo || t.minor > hi {
                        v.push(
                            "spec.versions.talos",
                            format!(
                                "flavour `{}` providers support Talos v1.{lo} to v1.{hi}, not {t}",
                                s.flavour.as_str()
                            ),
                        );
                    }
                }
            }
        }

        self.validate_endpoint_and_components(&mut v, talos, k8s);
        self.validate_encryption_recipients_overlays(&mut v, talos);
        if purpose == Purpose::Render {
            self.validate_vsphere(&mut v);
            self.validate_control_plane(&mut v);
        }
        self.validate_workers(&mut v);
        self.validate_provenance_and_migration(&mut v, purpose);
        v.problems
    }

    /// `spec.endpoint`, `spec.apiServer`, the component flags and `spec.etcd`.
    fn validate_endpoint_and_components(
        &self,
        v: &mut Validator,
        talos: Option<SemVer>,
        k8s: Option<SemVer>,
    ) {
        let s = &self.spec;
        v.host("spec.endpoint.host", &s.endpoint.host);
        if s.endpoint.port == 0 {
            v.push("spec.endpoint.port", "must be 1 to 65535, got 0".into());
        }
        for (path, message) in s.endpoint.problems() {
            v.push(&path, message);
        }

        v.cidrs("spec.network.pods", &s.network.pods);
        v.cidrs("spec.network.services", &s.network.services);
        v.dns_name("spec.network.dnsDomain", &s.network.dns_domain);

        for (i, san) in s.api_server.cert_sans.iter().enumerate() {
            v.host(
                &format!("spec.apiServer.certSANs[{i}]"),
                san.strip_prefix("*.").unwrap_or(san),
            );
        }
        for name in s.api_server.extra_args.keys() {
            let path = format!("spec.apiServer.extraArgs.{name}");
            v.flag_name(&path, name);
            let why = APISERVER_ARGS_FROM_FIELDS
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, why)| *why)
                .or_else(|| {
                    apiserver_arg_denied(name, talos.filter(|t| t.major == 1).map(|t| t.minor))
                        .then_some("Talos manages it")
                });
            if let Some(why) = why {
                v.push(
                    &path,
                    format!("capstan does not carry `{name}` as an extra arg: {why}"),
                );
            }
        }
        authorization_config(v, s, talos, k8s);
        for (field, table, args) in [
            (
                "spec.controllerManager.extraArgs",
                CONTROLLER_MANAGER_ARGS_REFUSED,
                &s.controller_manager.extra_args,
            ),
            (
                "spec.scheduler.extraArgs",
                SCHEDULER_ARGS_REFUSED,
                &s.scheduler.extra_args,
            ),
        ] {
            for name in args.keys() {
                let path = format!("{field}.{name}");
                v.flag_name(&path, name);
                if let Some(why) = refused_arg(table, name) {
                    v.push(
                        &path,
                        format!("capstan does not carry `{name}` as an extra arg: {why}"),
                    );
                }
            }
        }
        for name in s.etcd.extra_args.keys() {
            let path = format!("spec.etcd.extraArgs.{name}");
            v.flag_name(&path, name);
            if ETCD_ARGS_DENIED.contains(&name.as_str()) || name.starts_with("initial-") {
                v.push(
                    &path,
                    format!("Talos manages etcd's `{name}` itself and refuses it as an extra arg"),
                );
            }
        }

        v.list_of_tokens("spec.serviceAccount.issuers", &s.service_account.issuers);
        v.list_of_tokens(
            "spec.serviceAccount.audiences",
            &s.service_account.audiences,
        );
        if let Some(t) = talos {
            if t.major == 1 && t.minor < 13 && s.service_account.issuers.len() > 1 {
                v.push(
                    "spec.serviceAccount.issuers",
                    format!(
                        "Talos {t} accepts a single service-account issuer (extraArgs is a string map \
                         before Talos v1.13), {} are listed; keep only the issuer that signs tokens \
                         or use Talos v1.13 or later",
                        s.service_account.issuers.len()
                    ),
                );
            }
        }
    }

    /// `spec.encryption`, `spec.recipients` and `spec.overlays`.
    fn validate_encryption_recipients_overlays(&self, v: &mut Validator, talos: Option<SemVer>) {
        let s = &self.spec;
        match (s.encryption.provider, s.encryption.key_name.as_deref()) {
            (EncryptionProvider::None, Some(_)) => v.push(
                "spec.encryption.keyName",
                "must be absent when provider is `none`".into(),
            ),
            (EncryptionProvider::None, None) => {}
            (p, None) => v.push(
                "spec.encryption.keyName",
                format!("required for provider `{}`", provider_name(p)),
            ),
            (p, Some(name)) => {
                let want = talos_key_name(p);
                if name != want {
                    v.push(
                        "spec.encryption.keyName",
                        format!(
                            "Talos names its {} key `{want}`, the kubeadm key is `{name}`: Talos apiservers \
                             would fail with `no matching prefix found`; {}",
                            provider_name(p),
                            crate::procedure::rotate_key_name_fix(want, name)
                        ),
                    );
                }
                if p == EncryptionProvider::Aescbc {
                    if let Some(t) = talos {
                        if t.major == 1 && t.minor >= 3 {
                            v.push(
                                "spec.encryption.provider",
                                format!(
                                    "Talos {t} drops an aescbc-only secrets bundle (it generates configs with \
                                     secretbox only): add a secretbox key `key2` as the first provider on the \
                                     kubeadm side, re-encrypt all Secrets, then import again"
                                ),
                            );
                        }
                    }
                }
            }
        }

        for (i, r) in s.recipients.iter().enumerate() {
            if !(r.starts_with("age1")
                && r.len() > 10
                && r.bytes().all(|b| b.is_ascii_alphanumeric()))
            {
                v.push(
                    &format!("spec.recipients[{i}]"),
                    format!("expected an age recipient `age1…`, found `{r}`"),
                );
            }
        }

        let mut listed = BTreeSet::new();
        for (i, o) in s.overlays.iter().enumerate() {
            let path = format!("spec.overlays[{i}]");
            if o.trim().is_empty() {
                v.push(&path, "must not be empty".into());
            } else if o.starts_with('/') || o.contains('\\') {
                v.push(
                    &path,
                    format!("expected a directory relative to the repository root, found `{o}`"),
                );
            } else if !listed.insert(o.trim_end_matches('/')) {
                v.push(&path, format!("`{o}` is listed twice"));
            }
        }
    }

    /// `spec.vsphere`, required to render.
    fn validate_vsphere(&self, v: &mut Validator) {
        let s = &self.spec;
        match &s.vsphere {
            None => v.push(
                "spec.vsphere",
                "required to render: fill in the vSphere placement".into(),
            ),
            Some(vs) => {
                for (field, value) in [
                    ("server", &vs.server),
                    ("datacenter", &vs.datacenter),
                    ("datastore", &vs.datastore),
                    ("folder", &vs.folder),
                    ("resourcePool", &vs.resource_pool),
                    ("network", &vs.network),
                    ("template", &vs.template),
                ] {
                    v.non_empty(&format!("spec.vsphere.{field}"), value);
                }
                if let Some(t) = &vs.thumbprint {
                    let ok = t.split(':').count() == 20
                        && t.split(':')
                            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()));
                    if !ok {
                        v.push(
                            "spec.vsphere.thumbprint",
                            "expected the SHA-1 thumbprint as 20 colon-separated hex pairs".into(),
                        );
                    }
                }
                if let Some(p) = &vs.storage_policy_name {
                    v.non_empty("spec.vsphere.storagePolicyName", p);
                }
                if let Some(id) = &vs.identity_ref {
                    v.dns_subdomain("spec.vsphere.identityRef.name", &id.name);
                }
            }
        }
    }

    /// `spec.controlPlane` and `spec.talos`, required to render.
    fn validate_control_plane(&self, v: &mut Validator) {
        let s = &self.spec;
        match &s.control_plane {
            None => v.push(
                "spec.controlPlane",
                "required to render: replicas and machine size".into(),
            ),
            Some(cp) => {
                if cp.replicas % 2 == 0 && cp.replicas > 0 {
                    v.push(
                        "spec.controlPlane.replicas",
                        format!("must be odd to keep etcd quorum, got {}", cp.replicas),
                    );
                }
                v.at_most("spec.controlPlane.replicas", cp.replicas.into(), INT32_MAX);
                let t = &self.spec.talos;
                if let Some(img) = &t.install_image {
                    match image_tag(img) {
                None => v.push("spec.talos.installImage", format!("`{img}` has no tag: expected `<repository>:{}`", self.spec.versions.talos)),
                Some(tag) if tag != self.spec.versions.talos => v.push(
                    "spec.talos.installImage",
                    format!(
                        "tag `{tag}` is not spec.versions.talos `{}`: the machines would be configured for one Talos and upgraded to another",
                        self.spec.versions.talos
                    ),
                ),
                Some(_) => {}
            }
                }
                for (i, ns) in t.nameservers.iter().enumerate() {
                    if ns.parse::<std::net::IpAddr>().is_err() {
                        v.push(
                            &format!("spec.talos.nameservers[{i}]"),
                            format!("expected an IP address, got `{ns}`"),
                        );
                    }
                }
                for (i, ts) in t.time_servers.iter().enumerate() {
                    if ts.is_empty() || ts.contains(char::is_whitespace) {
                        v.push(
                            &format!("spec.talos.timeServers[{i}]"),
                            "expected a host name or address".into(),
                        );
                    }
                }
                for (registry, endpoints) in &t.registry_mirrors {
                    if endpoints.is_empty() {
                        v.push(
                            &format!("spec.talos.registryMirrors.{registry}"),
                            "expected at least one endpoint".into(),
                        );
                    }
                    for (i, e) in endpoints.iter().enumerate() {
                        if !(e.starts_with("https://") || e.starts_with("http://")) {
                            v.push(
                                &format!("spec.talos.registryMirrors.{registry}[{i}]"),
                                format!("expected an http(s) URL, got `{e}`"),
                            );
                        }
                    }
                }
                if let Some(d) = &t.discovery {
                    if let Some(problem) = discovery_endpoint_problem(&d.endpoint) {
                        v.push("spec.talos.discovery.endpoint", problem);
                    }
                }
                for (i, dns) in self.spec.kubelet.cluster_dns.iter().enumerate() {
                    if dns.parse::<std::net::IpAddr>().is_err() {
                        v.push(
                            &format!("spec.kubelet.clusterDNS[{i}]"),
                            format!("expected an IP address, got `{dns}`"),
                        );
                    }
                }
                for key in self.spec.kubelet.extra_config.keys() {
                    if let Some((_, why)) = KUBELET_CONFIG_DENIED.iter().find(|(k, _)| k == key) {
                        v.push(
                            &format!("spec.kubelet.extraConfig.{key}"),
                            format!("not allowed: {why}"),
                        );
                    }
                }
                let h = &self.spec.health_check;
                v.at_most(
                    "spec.healthCheck.unhealthyTimeoutSeconds",
                    h.unhealthy_timeout_seconds.into(),
                    INT32_MAX,
                );
                v.at_most(
                    "spec.healthCheck.nodeStartupTimeoutSeconds",
                    h.node_startup_timeout_seconds.into(),
                    INT32_MAX,
                );
                if (1..30).contains(&h.node_startup_timeout_seconds) {
                    // Cluster API's webhook refuses them (machinehealthcheck.go, v1.10.9:173-179).
                    v.push(
                        "spec.healthCheck.nodeStartupTimeoutSeconds",
                        "expected 0 (no limit) or at least 30".into(),
                    );
                }
                let pct = h.max_unhealthy.strip_suffix('%');
                let number = pct.unwrap_or(&h.max_unhealthy);
                let ok = !number.is_empty()
                    && number.len() <= 9
                    && number.bytes().all(|b| b.is_ascii_digit())
                    && (pct.is_none() || number.parse::<u32>().is_ok_and(|n| n <= 100));
                if !ok {
                    v.push(
                        "spec.healthCheck.maxUnhealthy",
                        format!(
                            "expected a count or a percentage up to 100% (`40%`), got `{}`",
                            h.max_unhealthy
                        ),
                    );
                }
                let d = &self.spec.deletion;
                for (path, value) in [
                    (
                        "spec.deletion.nodeDrainTimeoutSeconds",
                        d.node_drain_timeout_seconds,
                    ),
                    (
                        "spec.deletion.nodeVolumeDetachTimeoutSeconds",
                        d.node_volume_detach_timeout_seconds,
                    ),
                    (
                        "spec.deletion.nodeDeletionTimeoutSeconds",
                        d.node_deletion_timeout_seconds,
                    ),
                ] {
                    if let Some(value) = value {
                        v.at_most(path, value.into(), INT32_MAX);
                    }
                }
                v.machine("spec.controlPlane.machine", &cp.machine);
                if let Some(a) = &cp.anti_affinity {
                    v.tag_id("spec.controlPlane.antiAffinity.tagID", &a.tag_id);
                }
            }
        }
    }

    /// `spec.workers`.
    fn validate_workers(&self, v: &mut Validator) {
        let s = &self.spec;
        let mut seen = BTreeSet::new();
        for (i, pool) in s.workers.iter().enumerate() {
            let path = format!("spec.workers[{i}]");
            v.dns_label(&format!("{path}.name"), &pool.name, 63);
            if !seen.insert(pool.name.as_str()) {
                v.push(
                    &format!("{path}.name"),
                    format!("duplicate pool name `{}`", pool.name),
                );
            }
            if pool.name == "cp" {
                v.push(
                    &format!("{path}.name"),
                    "`cp` is reserved for the control plane".into(),
                );
            }
            for (key, value) in &pool.labels {
                let at = format!("{path}.labels.{key}");
                if !is_qualified_name(key) {
                    v.push(&at, "expected a label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63 alphanumerics, `-`, `_`, `.`".into());
                } else if label_route(key) == LabelRoute::Refused {
                    v.push(&at, "a label in the kubernetes.io/k8s.io domains that neither the node may set (NodeRestriction) nor Cluster API syncs; use `node-role.kubernetes.io/<role>`, `node-restriction.kubernetes.io/<name>`, `node.cluster.x-k8s.io/<name>` or a domain of your own".into());
                }
                if !is_label_value(value) {
                    v.push(&at, "expected a label value: at most 63 alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric (or empty)".into());
                }
            }
            let mut taint_keys = BTreeSet::new();
            for (j, t) in pool.taints.iter().enumerate() {
                let at = format!("{path}.taints[{j}]");
                if !is_qualified_name(&t.key) {
                    v.push(
                        &format!("{at}.key"),
                        "expected a qualified name (as a label key)".into(),
                    );
                }
                if !t.value.is_empty() && !is_label_value(&t.value) {
                    v.push(&format!("{at}.value"), "expected a label value".into());
                }
                if !taint_keys.insert((t.key.as_str(), t.effect)) {
                    v.push(
                        &at,
                        format!("duplicate taint `{}:{}`", t.key, t.effect.as_str()),
                    );
                }
            }
            let md = format!("{}-{}", self.metadata.name, pool.name);
            if md.len() > 63 {
                v.push(
                    &format!("{path}.name"),
                    format!("`{md}` (cluster and pool name) must be at most 63 characters"),
                );
            }
            v.at_most(&format!("{path}.replicas"), pool.replicas.into(), INT32_MAX);
            v.machine(&format!("{path}.machine"), &pool.machine);
        }
    }

    /// What `spec.migration.phase` requires of the rest of `spec.migration`.
    fn validate_phase(v: &mut Validator, m: &Migration, purpose: Purpose) {
        match m.phase {
            Phase::Prepare => {
                if m.kubeadm.etcd_members.is_empty() && purpose == Purpose::Render {
                    v.push(
                    "spec.migration.kubeadm.etcdMembers",
                    "phase `prepare` starts from the kubeadm control plane: list its etcd members \
                     (`etcdctl member list`). It renders the control plane with 0 replicas, so a cluster \
                     whose kubeadm members are gone is past phase control-plane: use `workers` or \
                     `complete`"
                        .into(),
                );
                }
            }
            Phase::ControlPlane => {
                if !m.acknowledge.contains(&Acknowledgement::EtcdAudit) {
                    v.push(
                    "spec.migration.acknowledge",
                    "phase `control-plane` requires `etcd-audit`: the TalosControlPlane is paused as soon as \
                     its machines exist and must stay paused until every kubeadm etcd member is removed, or \
                     the provider's etcd audit removes them all at once (read `capstan plan`)"
                        .into(),
                );
                }
                if !m
                    .acknowledge
                    .contains(&Acknowledgement::ControlPlaneAntiAffinity)
                {
                    v.push(
                    "spec.migration.acknowledge",
                    "phase `control-plane` requires `control-plane-anti-affinity`: etcd then has the kubeadm \
                     and the Talos members (3 + 3 = 6 voters, quorum 4) and CAPV makes no anti-affinity \
                     cluster module for a TalosControlPlane, so the control-plane VMs need a vCenter compute \
                     policy on `spec.controlPlane.antiAffinity`'s tag (or a DRS rule), checked with \
                     `capstan check --vsphere-inventory` before the first kubeadm node is removed, or one ESXi \
                     host failure loses quorum (read `capstan plan`)"
                        .into(),
                );
                }
                if m.kubeadm.etcd_members.is_empty() {
                    v.push(
                    "spec.migration.kubeadm.etcdMembers",
                    "phase `control-plane` needs the kubeadm etcd member names (`etcdctl member list`); \
                     when none is left, move on to phase `workers`"
                        .into(),
                );
                }
            }
            Phase::Workers | Phase::Complete => {
                if m.kubeadm_control_plane_present() {
                    v.push(
                    "spec.migration.kubeadm",
                    format!(
                        "phase `{}` unpauses the TalosControlPlane, and its etcd audit would force-remove \
                         every etcd member that is not a Talos machine: remove the kubeadm control-plane \
                         nodes and etcd members first (see `capstan plan`), then empty \
                         `controlPlaneNodes` and `etcdMembers`",
                        m.phase.as_str()
                    ),
                );
                }
                if m.phase == Phase::Complete && !m.kubeadm.worker_nodes.is_empty() {
                    v.push(
                    "spec.migration.kubeadm.workerNodes",
                    "phase `complete` means no kubeadm node is left: drain and remove the remaining \
                     kubeadm workers first"
                        .into(),
                );
                }
            }
        }
    }

    /// `spec.provenance` and `spec.migration`.
    fn validate_provenance_and_migration(&self, v: &mut Validator, purpose: Purpose) {
        let s = &self.spec;
        if let Some(f) = s.provenance.as_ref().and_then(|p| p.fingerprints.as_ref()) {
            // The migration Jobs compare the live `<cluster>-ca` with kubernetesCa, so each
            // is written into a shell script: only `sha256:` and 64 hex digits pass.
            for (field, value) in [
                ("kubernetesCa", &f.kubernetes_ca),
                ("etcdCa", &f.etcd_ca),
                ("frontProxyCa", &f.front_proxy_ca),
                ("serviceAccountKey", &f.service_account_key),
            ] {
                if !is_sha256_fingerprint(value) {
                    v.push(
                        &format!("spec.provenance.fingerprints.{field}"),
                        format!(
                            "`{}` is not a fingerprint: expected `sha256:` and 64 lowercase hex digits, \
                             as `capstan import kubeadm` writes it",
                            crate::printable::line(value)
                        ),
                    );
                }
            }
        }
        if s.migration.is_none() && self.imported() && purpose == Purpose::Render {
            v.push(
                "spec.migration.phase",
                "required for a cluster imported from kubeadm (spec.provenance): one of \
                 `prepare`, `control-plane`, `workers`, `complete`. Without a phase the TalosControlPlane \
                 would render with its replicas, unpaused and without the bootstrapped guard, and the \
                 provider could bootstrap a second, empty etcd cluster; start with `prepare` (see \
                 `capstan plan`), or `complete` once no kubeadm node is left"
                    .into(),
            );
        }
        if let Some(m) = &s.migration {
            match &m.job_image {
                None if purpose == Purpose::Check => {}
                None => v.push(
                    "spec.migration.jobImage",
                    format!(
                        "required in phase `{}`: every phase runs a Job that keeps the TalosControlPlane guarded \
                         (status.bootstrapped, the pause); it needs an image with `kubectl` (1.27 or later) and a \
                         POSIX shell, e.g. your mirror of `docker.io/alpine/k8s:1.33.4`",
                        m.phase.as_str()
                    ),
                ),
                Some(i) => v.non_empty("spec.migration.jobImage", i),
            }
            match &m.providers {
                None if m.phase.migrates() && purpose == Purpose::Render => v.push(
                    "spec.migration.providers",
                    format!(
                        "required in phase `{}`: the provider releases the management cluster runs \
                         (`cluster-api`, `bootstrap-talos`, `control-plane-talos`, `infrastructure-vsphere`, \
                         optionally `ipam-in-cluster`; `kubectl get providers -A`): the migration phases run \
                         only on releases whose behaviour capstan verified (`capstan check --providers`)",
                        m.phase.as_str()
                    ),
                ),
                None => {}
                Some(p) => {
                    for (name, release) in p.entries() {
                        v.version(&format!("spec.migration.providers.{name}"), release);
                    }
                }
            }
            Self::validate_phase(v, m, purpose);
            if m.acknowledge.contains(&Acknowledgement::ScaleWorkersToZero) {
                // Only while a pool is rendered at 0 (every pool before phase `workers`, a
                // pool declared at 0 after): a stale acknowledgement would let a later
                // revert scale the running workers to 0 unasked.
                let at_zero = match m.phase {
                    Phase::Prepare | Phase::ControlPlane => !s.workers.is_empty(),
                    Phase::Workers | Phase::Complete => s.workers.iter().any(|p| p.replicas == 0),
                };
                if !at_zero {
                    v.push(
                        "spec.migration.acknowledge",
                        format!(
                            "`scale-workers-to-zero` acknowledges nothing in phase `{}`: no worker pool is rendered \
                             with 0 replicas. Remove it, so that the next scale-down of running workers to 0 (a \
                             phase revert, a pool set to `replicas: 0`) is refused until it is acknowledged again",
                            m.phase.as_str()
                        ),
                    );
                }
            }
            for (field, names) in [
                ("controlPlaneNodes", &m.kubeadm.control_plane_nodes),
                ("etcdMembers", &m.kubeadm.etcd_members),
                ("workerNodes", &m.kubeadm.worker_nodes),
            ] {
                for (i, n) in names.iter().enumerate() {
                    v.non_empty(&format!("spec.migration.kubeadm.{field}[{i}]"), n);
                }
            }
        }
    }
}

#[derive(Default)]
struct Validator {
    problems: Vec<Problem>,
}

impl Validator {
    fn push(&mut self, path: &str, message: String) {
        self.problems.push(Problem {
            path: path.to_string(),
            message,
        });
    }
    fn non_empty(&mut self, path: &str, value: &str) {
        if value.trim().is_empty() {
            self.push(path, "must not be empty".into());
        }
    }
    fn version(&mut self, path: &str, value: &str) -> Option<SemVer> {
        let parsed = SemVer::parse(value);
        if parsed.is_none() {
            self.push(
                path,
                format!("expected a version `vX.Y.Z` (with the `v`), found `{value}`"),
            );
        }
        parsed
    }
    fn dns_label(&mut self, path: &str, value: &str, max: usize) {
        let ok = !value.is_empty()
            && value.len() <= max
            && value
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !value.starts_with('-')
            && !value.ends_with('-');
        if !ok {
            self.push(
                path,
                format!(
                    "expected a DNS label (lowercase letters, digits and `-`, at most {max} characters), \
                     found `{value}`"
                ),
            );
        }
    }
    fn dns_subdomain(&mut self, path: &str, value: &str) {
        let ok = !value.is_empty()
            && value.len() <= 253
            && value.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            });
        if !ok {
            self.push(
                path,
                format!("expected a DNS subdomain name, found `{value}`"),
            );
        }
    }
    fn dns_name(&mut self, path: &str, value: &str) {
        let ok = !value.is_empty()
            && value.len() <= 253
            && value.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            });
        if !ok {
            self.push(
                path,
                format!("expected a DNS domain such as `cluster.local`, found `{value}`"),
            );
        }
    }
    fn cidrs(&mut self, path: &str, values: &[String]) {
        if values.is_empty() {
            self.push(path, "at least one CIDR is required".into());
        }
        if values.len() > 2 {
            self.push(path, "at most two CIDRs (one per IP family)".into());
        }
        for (i, c) in values.iter().enumerate() {
            match c.parse::<ipnet::IpNet>() {
                Err(_) => self.push(
                    &format!("{path}[{i}]"),
                    format!("expected a CIDR such as `10.96.0.0/12`, found `{c}`"),
                ),
                Ok(net) if net.trunc() != net => self.push(
                    &format!("{path}[{i}]"),
                    format!("`{c}` has host bits set; the network is `{}`", net.trunc()),
                ),
                Ok(_) => {}
            }
        }
    }
    fn list_of_tokens(&mut self, path: &str, values: &[String]) {
        if values.is_empty() {
            self.push(
                path,
                "at least one value is required (no default: it is part of the cluster's identity)"
                    .into(),
            );
        }
        let mut seen = BTreeSet::new();
        for (i, s) in values.iter().enumerate() {
            if s.is_empty() || s.contains(',') || s.chars().any(char::is_whitespace) {
                self.push(
                    &format!("{path}[{i}]"),
                    format!("expected a non-empty value without commas or spaces, found `{s}`"),
                );
            }
            if !seen.insert(s) {
                self.push(&format!("{path}[{i}]"), format!("`{s}` is listed twice"));
            }
        }
    }
    /// A number the CRD field holds as `format: int32` / `int64` (the API server refuses
    /// more; refused here, at input, with the field's path).
    fn at_most(&mut self, path: &str, value: u64, max: u64) {
        if value > max {
            let format = if max == INT32_MAX { "int32" } else { "int64" };
            self.push(
                path,
                format!("must be at most {max} (the CRD field is {format}), got {value}"),
            );
        }
    }
    /// A command-line flag name without `--`: lower-case letters, digits and `-`.
    fn flag_name(&mut self, path: &str, name: &str) {
        let ok = name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !ok {
            self.push(
                path,
                format!(
                    "expected a flag name without `--` (lower-case letters, digits, `-`), found `{}`",
                    name.escape_debug()
                ),
            );
        }
    }
    /// A host name (RFC 1123: labels of letters, digits and `-`) or an IP address.
    fn host(&mut self, path: &str, value: &str) {
        let is_ip = value.parse::<std::net::IpAddr>().is_ok();
        let is_name = !value.is_empty()
            && value.len() <= 253
            && value.trim_end_matches('.').split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            });
        if !is_ip && !is_name {
            self.push(
                path,
                format!(
                    "expected a DNS name (letters, digits, `-` and `.`) or an IP address, found `{}`",
                    value.escape_debug()
                ),
            );
        }
    }
    /// A vSphere tag ID in URN notation, as CAPV's `tagIDs` takes it (the v1beta2 CRD
    /// allows 1 to 1024 characters).
    fn tag_id(&mut self, path: &str, id: &str) {
        let prefix = super::TAG_ID_PREFIX;
        let rest = id.strip_prefix(prefix).unwrap_or("");
        if rest.is_empty()
            || id.len() > 1024
            || !id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b":-_.".contains(&b))
        {
            self.push(
                path,
                format!(
                    "expected a tag ID in URN notation, `{prefix}<uuid>:GLOBAL` (what `govc tags.create` prints, \
                     or `govc tags.info <tag>` shows as ID), found `{id}`: CAPV attaches tags by ID, and a display \
                     name fails every VM reconcile"
                ),
            );
        }
    }

    fn machine(&mut self, path: &str, m: &Machine) {
        if m.num_cpus < 2 {
            self.push(
                &format!("{path}.numCPUs"),
                format!("must be at least 2, got {}", m.num_cpus),
            );
        }
        if m.memory_mib < 1024 {
            self.push(
                &format!("{path}.memoryMiB"),
                format!("must be at least 1024, got {}", m.memory_mib),
            );
        }
        if m.disk_gib == Some(0) {
            self.push(&format!("{path}.diskGiB"), "must be at least 1".into());
        }
        self.at_most(&format!("{path}.numCPUs"), m.num_cpus.into(), INT32_MAX);
        self.at_most(&format!("{path}.memoryMiB"), m.memory_mib, INT64_MAX);
        if let Some(d) = m.disk_gib {
            self.at_most(&format!("{path}.diskGiB"), d.into(), INT32_MAX);
        }
        if let Some(t) = &m.template {
            self.non_empty(&format!("{path}.template"), t);
        }
    }
}

/// `sha256:` and 64 lowercase hex digits, the form `spec.provenance.fingerprints` records.
pub fn is_sha256_fingerprint(s: &str) -> bool {
    s.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// Why Talos would refuse a discovery service endpoint: it takes `url.ParseRequestURI`, an
/// empty or `/` path, and `http` as insecure, any other scheme as TLS (Talos v1.10.6
/// `pkg/machinery/config/types/v1alpha1/v1alpha1_validation.go:540-546`,
/// `internal/app/machined/pkg/controllers/cluster/config.go:53-70`). capstan asks for
/// `http(s)://host[:port][/]`.
fn discovery_endpoint_problem(endpoint: &str) -> Option<String> {
    let rest = endpoint
        .strip_prefix("https://")
        .or_else(|| endpoint.strip_prefix("http://"));
    let ok = rest.is_some_and(|r| {
        let (host, path) = r.split_once('/').unwrap_or((r, ""));
        !host.is_empty()
            && path.is_empty()
            && !host.contains(|c: char| c.is_whitespace() || matches!(c, '@' | '?' | '#'))
    });
    (!ok).then(|| {
        format!(
            "expected the discovery service's URL without a path (`https://discovery.example.internal/`), got `{}`",
            endpoint.escape_debug()
        )
    })
}

/// `spec.apiServer.authorizationConfig`: only where Talos has and uses the field, not beside
/// the flags Talos refuses it with, each authorizer as Talos and kube-apiserver take it (see
/// [`Authorizer`]).
fn authorization_config(
    v: &mut Validator,
    s: &ClusterSpec,
    talos: Option<SemVer>,
    k8s: Option<SemVer>,
) {
    let list = &s.api_server.authorization_config;
    if list.is_empty() {
        return;
    }
    let path = "spec.apiServer.authorizationConfig";
    if let Some(t) = talos.filter(|t| t.major == 1 && t.minor < 9) {
        v.push(
            path,
            format!(
                "Talos {t} has no cluster.apiServer.authorizationConfig (its config schema has it from v1.9): \
                 set spec.versions.talos to v1.9 or later, or remove the field and move the kubeadm apiservers \
                 to `--authorization-mode` with `--authorization-webhook-config-file` before migrating"
            ),
        );
    }
    if let Some(k) = k8s.filter(|k| k.major == 1 && k.minor < 29) {
        v.push(
            path,
            format!(
                "Talos ignores it for Kubernetes {k} (it writes an authorization configuration only from \
                 Kubernetes 1.29 and passes `--authorization-mode=Node,RBAC` before): upgrade Kubernetes to \
                 v1.29 or later first, or remove the field"
            ),
        );
    }
    for name in s.api_server.extra_args.keys() {
        if name == "authorization-mode" || name.starts_with("authorization-webhook-") {
            v.push(
                &format!("spec.apiServer.extraArgs.{name}"),
                format!(
                    "Talos refuses `{name}` beside cluster.apiServer.authorizationConfig: express it as \
                     authorizers of spec.apiServer.authorizationConfig and remove the extra arg"
                ),
            );
        }
    }
    let mut names: Vec<&str> = Vec::new();
    for (i, a) in list.iter().enumerate() {
        let at = format!("{path}[{i}]");
        if a.name.trim().is_empty() {
            v.push(
                &format!("{at}.name"),
                "missing: every authorizer needs a name (Talos refuses one without)".into(),
            );
        } else if names.contains(&a.name.as_str()) {
            v.push(
                &format!("{at}.name"),
                format!("`{}` names two authorizers: names must be unique", a.name),
            );
        } else {
            names.push(&a.name);
        }
        match (a.kind, &a.webhook) {
            (AuthorizerType::Webhook, None) => v.push(
                &format!("{at}.webhook"),
                "missing: a `Webhook` authorizer needs its webhook configuration (timeout, \
                 subjectAccessReviewVersion, failurePolicy, connectionInfo…), as in the kubeadm file"
                    .into(),
            ),
            (AuthorizerType::Webhook, Some(w)) if !w.is_object() => v.push(
                &format!("{at}.webhook"),
                "expected a mapping (the authorizer's `webhook` of the kubeadm file)".into(),
            ),
            (AuthorizerType::Node | AuthorizerType::Rbac, Some(_)) => v.push(
                &format!("{at}.webhook"),
                format!(
                    "only a `Webhook` authorizer has a webhook configuration, not `{}`: remove it",
                    a.kind.as_str()
                ),
            ),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::discovery_endpoint_problem;

    #[test]
    fn discovery_endpoints_as_talos_reads_them() {
        for ok in [
            "https://discovery.example.internal/",
            "https://discovery.example.internal",
            "https://10.0.0.5:3000/",
            "http://discovery.example.internal/",
        ] {
            assert_eq!(discovery_endpoint_problem(ok), None, "{ok}");
        }
        for bad in [
            "discovery.example.internal",
            "https://",
            "https:///",
            "https://discovery.example.internal/v1",
            "grpc://discovery.example.internal/",
            "https://user@discovery/",
            "https://disc overy/",
        ] {
            assert!(discovery_endpoint_problem(bad).is_some(), "{bad}");
        }
    }
}
