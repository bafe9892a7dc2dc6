//! Test support: builds kubeadm-style CAs, leaves, keys and the kubeadm YAML files with
//! rcgen and the RustCrypto crates, so tests never depend on files the project did not
//! make. Compiled for the crate's own tests and, through the `testkit` feature that only
//! the crate's dev-dependency on itself enables, for its integration tests. Panics on
//! failure: it is test code.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use p256::pkcs8::{EncodePrivateKey as _, LineEnding};
use rsa::pkcs1::EncodeRsaPrivateKey as _;
use rsa::pkcs1::EncodeRsaPublicKey as _;
use zeroize::Zeroizing;

pub const DAY: u64 = 86_400;

/// `rel` under the test data the repository vendors (`tests/fixtures/`: CRDs, SOPS vectors,
/// Talos schemas, the kubeadm PKI script; each directory's `SOURCES.md` says where its files
/// came from), for tests against files capstan did not write. Always there: a missing file
/// is a broken checkout, and fails the test.
pub fn fixture_path(rel: &str) -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel);
    assert!(
        path.exists(),
        "{} is missing: the repository vendors it under tests/fixtures/ (see SOURCES.md there)",
        path.display()
    );
    path
}

pub fn now() -> SystemTime {
    SystemTime::now()
}

pub fn days_from_now(days: i64) -> SystemTime {
    let d = Duration::from_secs(days.unsigned_abs() * DAY);
    if days >= 0 {
        now() + d
    } else {
        now() - d
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alg {
    P256,
    Rsa,
}

/// A test key that can sign for rcgen.
pub struct TestKey {
    pub p256: Option<p256::SecretKey>,
    pub rsa: Option<rsa::PrivateKey>,
    public: Vec<u8>,
}

/// RSA key generation is slow in debug builds: a few keys are made once and shared.
fn rsa_key(slot: usize) -> rsa::PrivateKey {
    static KEYS: [OnceLock<rsa::PrivateKey>; 4] = [
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
    ];
    KEYS[slot % 4]
        .get_or_init(|| {
            let mut rng = getrandom::SysRng;
            rsa::PrivateKey::new(&mut rng, 2048).unwrap()
        })
        .clone()
}

impl TestKey {
    /// A fresh P-256 key, or the shared RSA key in `slot` (0..4).
    pub fn new(alg: Alg, slot: usize) -> TestKey {
        match alg {
            Alg::P256 => {
                use p256::elliptic_curve::Generate as _;
                let key = p256::SecretKey::generate();
                let public = key.public_key().to_sec1_bytes().to_vec();
                TestKey {
                    p256: Some(key),
                    rsa: None,
                    public,
                }
            }
            Alg::Rsa => {
                let key = rsa_key(slot);
                let public = key.to_public_key().to_pkcs1_der().unwrap().into_vec();
                TestKey {
                    p256: None,
                    rsa: Some(key),
                    public,
                }
            }
        }
    }

    /// Traditional encoding: PKCS#1 for RSA, SEC1 for EC.
    pub fn traditional_pem(&self) -> Zeroizing<Vec<u8>> {
        let s = match (&self.p256, &self.rsa) {
            (Some(k), _) => k.to_sec1_pem(LineEnding::LF).unwrap(),
            (_, Some(k)) => k.to_pkcs1_pem(LineEnding::LF).unwrap(),
            _ => unreachable!(),
        };
        Zeroizing::new(s.as_bytes().to_vec())
    }

    /// PKCS#8 (`PRIVATE KEY`).
    pub fn pkcs8_pem(&self) -> Zeroizing<Vec<u8>> {
        let s = match (&self.p256, &self.rsa) {
            (Some(k), _) => k.to_pkcs8_pem(LineEnding::LF).unwrap(),
            (_, Some(k)) => k.to_pkcs8_pem(LineEnding::LF).unwrap(),
            _ => unreachable!(),
        };
        Zeroizing::new(s.as_bytes().to_vec())
    }
}

impl rcgen::PublicKeyData for TestKey {
    fn der_bytes(&self) -> &[u8] {
        &self.public
    }
    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        if self.p256.is_some() {
            &rcgen::PKCS_ECDSA_P256_SHA256
        } else {
            &rcgen::PKCS_RSA_SHA256
        }
    }
}

impl rcgen::SigningKey for TestKey {
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        use p256::ecdsa::signature::Signer as _;
        match (&self.p256, &self.rsa) {
            (Some(k), _) => {
                let sk = p256::ecdsa::SigningKey::from(k);
                let sig: p256::ecdsa::Signature = sk.sign(msg);
                Ok(sig.to_der().as_bytes().to_vec())
            }
            (_, Some(k)) => Ok(k.pkcs1v15_sign::<sha2::Sha256>(msg).unwrap()),
            _ => unreachable!(),
        }
    }
}

fn ts(t: SystemTime) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(super::unix_seconds(t)).unwrap()
}

/// Parameters for a kubeadm-style CA (`CN=<cn>`, CA:TRUE, keyCertSign).
pub fn ca_params(
    cn: &str,
    not_before: SystemTime,
    not_after: SystemTime,
) -> rcgen::CertificateParams {
    let mut p = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::CommonName, cn);
    p.distinguished_name = dn;
    p.not_before = ts(not_before);
    p.not_after = ts(not_after);
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
        rcgen::KeyUsagePurpose::KeyCertSign,
    ];
    p.key_identifier_method = rcgen::KeyIdMethod::PreSpecified(vec![1, 2, 3, 4]);
    let mut serial = [0u8; 8];
    getrandom::fill(&mut serial).unwrap();
    serial[0] = (serial[0] & 0x7f) | 0x01;
    p.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
    p
}

/// A self-signed CA valid from yesterday for `days` days.
pub fn self_signed_ca(key: &TestKey, cn: &str, days: i64) -> Vec<u8> {
    let p = ca_params(cn, days_from_now(-1), days_from_now(days));
    super::encode_certificate_pem(p.self_signed(key).unwrap().der())
}

/// A certificate for `subject_key` signed by the CA (`issuer_params`, `issuer_key`);
/// `is_ca` makes it an intermediate CA, otherwise a serverAuth leaf with SANs.
pub fn signed_by(
    subject_key: &TestKey,
    cn: &str,
    is_ca: bool,
    issuer_params: &rcgen::CertificateParams,
    issuer_key: &TestKey,
) -> Vec<u8> {
    let mut p = ca_params(cn, days_from_now(-1), days_from_now(365));
    if !is_ca {
        p.is_ca = rcgen::IsCa::ExplicitNoCa;
        p.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        p.subject_alt_names = vec![
            rcgen::SanType::DnsName("kubernetes.default.svc".try_into().unwrap()),
            rcgen::SanType::DnsName("*.lb.example".try_into().unwrap()),
            rcgen::SanType::IpAddress("192.0.2.10".parse().unwrap()),
            rcgen::SanType::IpAddress("2001:db8::1".parse().unwrap()),
        ];
    }
    let issuer = rcgen::Issuer::from_params(issuer_params, issuer_key);
    super::encode_certificate_pem(p.signed_by(subject_key, &issuer).unwrap().der())
}

/// A kubeadm apiserver serving certificate for `sans` (DNS names or IPs), signed by the
/// Kubernetes CA `write_kubeadm_dir` writes for `alg`.
pub fn apiserver_certificate(alg: Alg, sans: &[&str]) -> Vec<u8> {
    let ca = TestKey::new(alg, 0);
    let issuer_params = ca_params("kubernetes", days_from_now(-1), days_from_now(3650));
    let mut p = ca_params("kube-apiserver", days_from_now(-1), days_from_now(365));
    p.is_ca = rcgen::IsCa::ExplicitNoCa;
    p.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    p.subject_alt_names = sans
        .iter()
        .map(|s| match s.parse::<std::net::IpAddr>() {
            Ok(ip) => rcgen::SanType::IpAddress(ip),
            Err(_) => rcgen::SanType::DnsName((*s).try_into().unwrap()),
        })
        .collect();
    let issuer = rcgen::Issuer::from_params(&issuer_params, &ca);
    super::encode_certificate_pem(p.signed_by(&TestKey::new(alg, 1), &issuer).unwrap().der())
}

/// The names kubeadm puts in `lab-f-master-1`'s apiserver certificate of the drifted
/// fixture: its own, the Service's, the endpoint, and the extra `certSANs`.
pub const DRIFTED_APISERVER_SANS: &[&str] = &[
    "lab-f-master-1",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "lab-f.example.internal",
    "api.lab-f.example.internal",
    "10.96.0.1",
    "192.0.2.10",
    "10.0.0.100",
];

/// The base64 secretbox/aescbc key the fixtures' EncryptionConfiguration holds.
pub const ENCRYPTION_SECRET: &str = "6zWBpno849HlD5jeuTmGToFYP+z8lgkJa0fhHobv7mE=";

/// A kube-apiserver static pod manifest as kubeadm writes it.
pub fn apiserver_manifest(issuer: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\n  namespace: kube-system\nspec:\n  containers:\n  - command:\n    - kube-apiserver\n    - --advertise-address=192.0.2.10\n    - --encryption-provider-config=/etc/kubernetes/enc/encryption-config.yaml\n    - --secure-port=6443\n    - --service-account-issuer={issuer}\n    - --service-account-key-file=/etc/kubernetes/pki/sa.pub\n    - --service-cluster-ip-range=10.96.0.0/12\n    image: registry.k8s.io/kube-apiserver:v1.30.4\n    name: kube-apiserver\n"
    )
}

/// A kubeadm ClusterConfiguration (`v1beta3` or `v1beta4`).
pub fn cluster_configuration(api: &str) -> String {
    let extra = if api == "v1beta3" {
        "  extraArgs:\n    authorization-mode: Node,RBAC\n"
    } else {
        "  extraArgs:\n  - name: authorization-mode\n    value: Node,RBAC\n"
    };
    format!(
        "apiVersion: kubeadm.k8s.io/{api}\nkind: ClusterConfiguration\nclusterName: lab-f\ncontrolPlaneEndpoint: lab-f.example.internal:6443\nkubernetesVersion: v1.30.4\napiServer:\n{extra}etcd:\n  local:\n    imageTag: 3.5.15-0\nnetworking:\n  dnsDomain: cluster.local\n  podSubnet: 10.244.0.0/16\n  serviceSubnet: 10.96.0.0/12\n"
    )
}

/// An EncryptionConfiguration whose first provider for secrets is `provider`.
pub fn encryption_configuration(provider: &str, key_name: &str) -> String {
    format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources:\n  - secrets\n  providers:\n  - {provider}:\n      keys:\n      - name: {key_name}\n        secret: {ENCRYPTION_SECRET}\n  - identity: {{}}\n"
    )
}

/// A kube-apiserver manifest as a long-lived kubeadm cluster has drifted: OIDC, a
/// webhook authorizer, an extra admission plugin, a node-port range and an audit
/// policy (the kubeadm defaults otherwise; anonymous auth left on).
pub fn drifted_apiserver_manifest(issuer: &str) -> String {
    apiserver_manifest(issuer).replace(
        "    - --secure-port=6443\n",
        "    - --secure-port=6443\n    - --authorization-mode=Node,RBAC,Webhook\n    - --authorization-webhook-config-file=/etc/kubernetes/authz/webhook.yaml\n    - --enable-admission-plugins=NodeRestriction,AlwaysPullImages\n    - --oidc-issuer-url=https://dex.example.internal\n    - --oidc-client-id=kubernetes\n    - --oidc-ca-file=/etc/kubernetes/oidc/ca.crt\n    - --service-node-port-range=20000-32767\n    - --audit-policy-file=/etc/kubernetes/audit/policy.yaml\n    - --audit-log-path=/var/log/kubernetes/audit.log\n",
    )
}

/// `kubectl get nodes -o yaml` of a kubeadm cluster: three control-plane nodes, a
/// worker and an ingress worker (a role label, a label of its own, a taint), with the vSphere CPI's `vsphere://` providerIDs when `cpi`, else with none
/// (a cluster that never ran a cloud provider).
pub fn nodes_yaml(cpi: bool) -> String {
    let mut out = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for (i, name) in [
        "lab-f-master-1",
        "lab-f-master-2",
        "lab-f-master-3",
        "lab-f-w-1",
        "lab-f-ingress-1",
    ]
    .iter()
    .enumerate()
    {
        out.push_str(&format!(
            "- apiVersion: v1\n  kind: Node\n  metadata:\n    name: {name}\n    labels:\n      kubernetes.io/hostname: {name}\n"
        ));
        if name.contains("-cp-") {
            out.push_str("      node-role.kubernetes.io/control-plane: \"\"\n");
        }
        if name.contains("-ingress-") {
            out.push_str(
                "      node-role.kubernetes.io/ingress: \"\"\n      example.com/tier: edge\n",
            );
        }
        out.push_str("  spec:\n");
        if name.contains("-ingress-") {
            out.push_str("    taints:\n    - key: dedicated\n      value: ingress\n      effect: NoSchedule\n");
        }
        if cpi {
            out.push_str(&format!(
                "    providerID: vsphere://4237a1c2-0d1e-4f5a-9b8c-00000000000{i}\n"
            ));
        }
        if name.contains("-cp-") {
            out.push_str("    taints:\n    - key: node-role.kubernetes.io/control-plane\n      effect: NoSchedule\n");
        }
        out.push_str("  status:\n    nodeInfo:\n      kubeletVersion: v1.30.4\n");
    }
    out
}

/// `etcdctl endpoint status --cluster -w json` of three kubeadm members whose largest
/// database is `db_size` bytes.
pub fn etcd_status_json(db_size: u64) -> String {
    let member = |i: u64, size: u64| {
        format!(
            "{{\"Endpoint\":\"https://192.0.2.1{i}:2379\",\"Status\":{{\"header\":{{\"cluster_id\":1,\"member_id\":{i},\"revision\":9000,\"raft_term\":4}},\"version\":\"3.5.15\",\"dbSize\":{size},\"leader\":1,\"raftIndex\":9100,\"raftTerm\":4,\"raftAppliedIndex\":9100,\"dbSizeInUse\":{}}}}}",
            size / 2
        )
    };
    format!(
        "[{},{},{}]\n",
        member(0, db_size - db_size / 10),
        member(1, db_size),
        member(2, db_size - db_size / 20)
    )
}

/// The kubeadm `kubelet-config` ConfigMap (`kubectl -n kube-system get cm kubelet-config
/// -o yaml`) as kubeadm writes it (zero values for "default"), drifted: a node-local DNS
/// cache, 250 pods, reserved resources and eviction thresholds of its own.
pub fn kubelet_config_map() -> String {
    let cfg = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nauthentication:\n  anonymous:\n    enabled: false\ncgroupDriver: systemd\nclusterDNS:\n- 169.254.20.10\nclusterDomain: cluster.local\ncpuManagerReconcilePeriod: 0s\nevictionHard:\n  memory.available: 500Mi\n  nodefs.available: 10%\nevictionPressureTransitionPeriod: 0s\nfileCheckFrequency: 0s\nhealthzPort: 10248\nimageMinimumGCAge: 0s\nkubeReserved:\n  cpu: 200m\n  memory: 1Gi\nmaxPods: 250\nrotateCertificates: true\nruntimeRequestTimeout: 0s\nshutdownGracePeriod: 0s\nstaticPodPath: /etc/kubernetes/manifests\nstreamingConnectionIdleTimeout: 0s\nsyncFrequency: 0s\nvolumeStatsAggPeriod: 0s\n";
    let mut out = String::from(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kubelet-config\n  namespace: kube-system\ndata:\n  kubelet: |\n",
    );
    for line in cfg.lines() {
        out.push_str("    ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// A ClusterConfiguration with extra certSANs and a raised etcd quota and timeouts.
pub fn drifted_cluster_configuration() -> String {
    cluster_configuration("v1beta3")
        .replace(
            "apiServer:\n",
            "apiServer:\n  certSANs:\n  - lab-f.example.internal\n  - api.lab-f.example.internal\n  - 10.0.0.100\n",
        )
        .replace(
            "    imageTag: 3.5.15-0\n",
            "    imageTag: 3.5.15-0\n    extraArgs:\n      quota-backend-bytes: \"8589934592\"\n      election-timeout: \"5000\"\n      heartbeat-interval: \"500\"\n",
        )
}

/// Write a drifted kubeadm control plane under `dir`: [`write_kubeadm_dir`]'s files
/// with [`drifted_apiserver_manifest`], [`drifted_cluster_configuration`] and an
/// EncryptionConfiguration that encrypts ConfigMaps too.
pub fn write_drifted_kubeadm_dir(dir: &std::path::Path, alg: Alg) {
    write_kubeadm_dir(dir, alg, "secretbox", "key2");
    std::fs::write(
        dir.join("kube-apiserver.yaml"),
        drifted_apiserver_manifest("https://kubernetes.default.svc.cluster.local"),
    )
    .unwrap();
    std::fs::write(
        dir.join("kubeadm-config.yaml"),
        drifted_cluster_configuration(),
    )
    .unwrap();
    std::fs::write(
        dir.join("encryption-config.yaml"),
        encryption_configuration("secretbox", "key2")
            .replace("  - secrets\n", "  - secrets\n  - configmaps\n"),
    )
    .unwrap();
    std::fs::write(dir.join("nodes.yaml"), nodes_yaml(false)).unwrap();
    std::fs::write(dir.join("kubelet-config.yaml"), kubelet_config_map()).unwrap();
    // 3 GiB: over etcd's default 2 GiB quota, within the drifted 8 GiB one.
    std::fs::write(dir.join("etcd-status.json"), etcd_status_json(3 << 30)).unwrap();
    std::fs::write(
        dir.join("pki/apiserver.crt"),
        apiserver_certificate(alg, DRIFTED_APISERVER_SANS),
    )
    .unwrap();
}

/// Write a kubeadm control plane's files under `dir`: `pki/` in the
/// `/etc/kubernetes/pki` layout, `kube-apiserver.yaml`, `kubeadm-config.yaml`,
/// `encryption-config.yaml`.
pub fn write_kubeadm_dir(dir: &std::path::Path, alg: Alg, provider: &str, key_name: &str) {
    let pki = dir.join("pki");
    std::fs::create_dir_all(pki.join("etcd")).unwrap();
    for (i, (crt, key, cn)) in [
        ("ca.crt", "ca.key", "kubernetes"),
        ("etcd/ca.crt", "etcd/ca.key", "etcd-ca"),
        ("front-proxy-ca.crt", "front-proxy-ca.key", "front-proxy-ca"),
    ]
    .into_iter()
    .enumerate()
    {
        let k = TestKey::new(alg, i);
        std::fs::write(pki.join(crt), self_signed_ca(&k, cn, 3650)).unwrap();
        std::fs::write(pki.join(key), k.traditional_pem()).unwrap();
    }
    std::fs::write(pki.join("sa.key"), TestKey::new(alg, 3).traditional_pem()).unwrap();
    std::fs::write(
        dir.join("kube-apiserver.yaml"),
        apiserver_manifest("https://kubernetes.default.svc.cluster.local"),
    )
    .unwrap();
    std::fs::write(
        dir.join("kubeadm-config.yaml"),
        cluster_configuration("v1beta3"),
    )
    .unwrap();
    std::fs::write(
        dir.join("encryption-config.yaml"),
        encryption_configuration(provider, key_name),
    )
    .unwrap();
}
