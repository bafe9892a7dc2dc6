//! `capstan import kubeadm` and `capstan secrets decrypt` end to end, on kubeadm files built
//! by the project's own test kit: the happy path (decrypt, compare with the source files,
//! render the completed stub) and every error class (exit 2, the file named, nothing
//! created or changed in `--out`).

use crate::util::*;
use capstan::secrets::pki::testkit::{self, Alg, TestKey};
use std::path::Path;

struct Setup {
    _tmp: tempfile::TempDir,
    dir: std::path::PathBuf,
    identity: std::path::PathBuf,
    recipient: String,
}

fn setup(alg: Alg) -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    testkit::write_kubeadm_dir(&dir.join("kubeadm"), alg, "secretbox", "key2");
    let identity = dir.join("identity.txt");
    let recipient = write_identity(&identity);
    Setup {
        _tmp: tmp,
        dir,
        identity,
        recipient,
    }
}

fn import(s: &Setup, extra: &[&str]) -> std::process::Output {
    let mut args = IMPORT_ARGS.to_vec();
    args.extend_from_slice(&["--talos-version", "v1.10.6", "--out", "clusters/lab-f"]);
    let r = s.recipient.clone();
    args.extend_from_slice(&["--recipient", &r]);
    args.extend_from_slice(extra);
    capstan(&args, &s.dir)
}

#[test]
fn import_then_decrypt_then_render() {
    for alg in [Alg::Rsa, Alg::P256] {
        let s = setup(alg);
        let o = import(&s, &[]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(
            stdout(&o).is_empty(),
            "nothing secret on stdout unless asked"
        );
        let out = s.dir.join("clusters/lab-f");
        assert!(std::fs::read_to_string(out.join("secrets.age"))
            .unwrap()
            .starts_with("-----BEGIN AGE ENCRYPTED FILE-----"));
        // Decrypt with capstan and compare every carried key with its source file.
        let o = capstan(
            &[
                "secrets",
                "decrypt",
                "--identity",
                s.identity.to_str().unwrap(),
                "clusters/lab-f/secrets.age",
            ],
            &s.dir,
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let bundle = capstan::secrets::talos::SecretsBundle::parse("bundle", &o.stdout).unwrap();
        let certs = bundle.certs.as_ref().unwrap();
        let src = |f: &str| std::fs::read(s.dir.join("kubeadm/pki").join(f)).unwrap();
        assert_eq!(certs.k8s.as_ref().unwrap().crt, src("ca.crt"));
        assert_eq!(certs.k8s.as_ref().unwrap().key.to_vec(), src("ca.key"));
        assert_eq!(
            certs.etcd.as_ref().unwrap().key.to_vec(),
            src("etcd/ca.key")
        );
        assert_eq!(
            certs.k8saggregator.as_ref().unwrap().crt,
            src("front-proxy-ca.crt")
        );
        assert_eq!(
            certs.k8sserviceaccount.as_ref().unwrap().key.to_vec(),
            src("sa.key")
        );
        assert_eq!(
            bundle
                .secrets
                .as_ref()
                .unwrap()
                .secretboxencryptionsecret
                .as_deref()
                .map(|x| x.as_str()),
            Some(testkit::ENCRYPTION_SECRET)
        );
        // The identity also comes from the SOPS environment variable.
        let o = assert_cmd::Command::cargo_bin("capstan")
            .unwrap()
            .args(["secrets", "decrypt", "clusters/lab-f/secrets.age"])
            .env("SOPS_AGE_KEY_FILE", &s.identity)
            .current_dir(&s.dir)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        // The stub renders once the placement is filled in.
        let stub = std::fs::read_to_string(out.join("cluster.yaml")).unwrap();
        assert!(
            stub.contains("kubernetesCa: sha256:") && stub.contains("bootstrapTokenId: "),
            "{stub}"
        );
        let completed = format!(
            "{stub}  vsphere:\n    server: vc\n    datacenter: dc\n    datastore: ds\n    folder: f\n    resourcePool: rp\n    network: n\n    template: t\n    cloneMode: linkedClone\n  controlPlane:\n    replicas: 3\n    machine: {{numCPUs: 2, memoryMiB: 4096}}\n"
        );
        // The stub starts in the safe phase; render asks for the Job image and the provider
        // releases before anything else.
        assert!(stub.contains("migration:\n    phase: prepare\n"), "{stub}");
        std::fs::write(out.join("cluster.yaml"), &completed).unwrap();
        let o = capstan(&["render", "clusters/lab-f"], &s.dir);
        assert_eq!(o.status.code(), Some(2));
        assert!(
            stderr(&o).contains("spec.migration.jobImage: required in phase `prepare`")
                && stderr(&o).contains("spec.migration.providers: required in phase `prepare`")
                && stderr(&o).contains("spec.migration.kubeadm.etcdMembers: phase `prepare` starts from the kubeadm control plane"),
            "{}",
            stderr(&o)
        );
        let completed = completed.replace(
            "    phase: prepare\n",
            "    phase: prepare\n    jobImage: mirror/alpine/k8s:1.33.4\n    providers: {cluster-api: v1.10.10, bootstrap-talos: v0.6.12, control-plane-talos: v0.5.12, infrastructure-vsphere: v1.13.1}\n    kubeadm: {etcdMembers: [cp-1, cp-2, cp-3]}\n",
        );
        std::fs::write(out.join("cluster.yaml"), completed).unwrap();
        let o = capstan(&["render", "clusters/lab-f"], &s.dir);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(stdout(&o).contains("kind: TalosControlPlane"));
    }
}

#[test]
fn bootstrap_secret_only_on_request() {
    let s = setup(Alg::P256);
    let o = import(
        &s,
        &[
            "--print-bootstrap-secret",
            "--bootstrap-token",
            "abcdef.0123456789abcdef",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("name: bootstrap-token-abcdef\n  namespace: kube-system\ntype: bootstrap.kubernetes.io/token\n"), "{out}");
    assert!(out.contains("auth-extra-groups: system:bootstrappers:nodes"));
    assert!(
        !stderr(&o).contains("0123456789abcdef"),
        "the token secret never reaches stderr"
    );
    let files: Vec<String> = snapshot(&s.dir.join("clusters/lab-f"))
        .into_iter()
        .map(|f| f.0)
        .collect();
    assert_eq!(
        files,
        [
            "cluster.yaml",
            "secrets.age",
            "secrets/lab-f-ca.yaml",
            "secrets/lab-f-talos.yaml",
            "secrets/workload/bootstrap-token-abcdef.yaml"
        ],
        "sealed right away, and no plaintext file written"
    );
    for (_, bytes) in snapshot(&s.dir.join("clusters")) {
        assert!(!String::from_utf8_lossy(&bytes).contains("0123456789abcdef"));
    }
}

/// Expect exit 2 naming `needle`, with nothing created under clusters/.
fn fails(s: &Setup, extra: &[&str], needle: &str) {
    let before = snapshot(&s.dir.join("clusters"));
    let o = import(s, extra);
    assert_eq!(
        o.status.code(),
        Some(2),
        "stdout {} stderr {}",
        stdout(&o),
        stderr(&o)
    );
    let err = stderr(&o);
    assert!(err.contains(needle), "expected `{needle}` in: {err}");
    assert!(stdout(&o).is_empty());
    assert_eq!(
        snapshot(&s.dir.join("clusters")),
        before,
        "files changed by a failed import"
    );
    for line in std::fs::read_to_string(s.dir.join("kubeadm/pki/ca.key"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("-----"))
    {
        assert!(!err.contains(line), "key material in an error message");
    }
}

fn pki(s: &Setup, f: &str) -> std::path::PathBuf {
    s.dir.join("kubeadm/pki").join(f)
}

#[test]
fn error_missing_file() {
    let s = setup(Alg::P256);
    std::fs::remove_file(pki(&s, "front-proxy-ca.key")).unwrap();
    fails(&s, &[], "kubeadm/pki/front-proxy-ca.key");
}

#[test]
fn error_key_does_not_match_certificate() {
    let s = setup(Alg::P256);
    std::fs::copy(pki(&s, "etcd/ca.key"), pki(&s, "ca.key")).unwrap();
    fails(&s, &[], "kubeadm/pki/ca.");
}

#[test]
fn error_not_a_ca_and_intermediate_ca() {
    for is_ca in [false, true] {
        let s = setup(Alg::P256);
        let root = TestKey::new(Alg::P256, 0);
        let params = testkit::ca_params(
            "root",
            testkit::days_from_now(-1),
            testkit::days_from_now(100),
        );
        let sub = TestKey::new(Alg::P256, 1);
        std::fs::write(
            pki(&s, "ca.crt"),
            testkit::signed_by(&sub, "kubernetes", is_ca, &params, &root),
        )
        .unwrap();
        std::fs::write(pki(&s, "ca.key"), sub.traditional_pem()).unwrap();
        fails(&s, &[], "kubeadm/pki/ca.crt");
        if is_ca {
            let o = import(&s, &[]);
            assert!(
                stderr(&o).to_lowercase().contains("intermediate"),
                "{}",
                stderr(&o)
            );
        }
    }
}

#[test]
fn error_expired_ca() {
    let s = setup(Alg::P256);
    let k = TestKey::new(Alg::P256, 0);
    let p = testkit::ca_params(
        "etcd-ca",
        testkit::days_from_now(-400),
        testkit::days_from_now(-2),
    );
    std::fs::write(
        pki(&s, "etcd/ca.crt"),
        capstan::secrets::pki::encode_certificate_pem(p.self_signed(&k).unwrap().der()),
    )
    .unwrap();
    std::fs::write(pki(&s, "etcd/ca.key"), k.traditional_pem()).unwrap();
    fails(&s, &[], "kubeadm/pki/etcd/ca.crt");
}

#[test]
fn error_encryption_provider_talos_cannot_carry() {
    let s = setup(Alg::P256);
    std::fs::write(
        s.dir.join("kubeadm/encryption-config.yaml"),
        testkit::encryption_configuration("aesgcm", "key1"),
    )
    .unwrap();
    fails(&s, &[], "kubeadm/encryption-config.yaml");
}

#[test]
fn error_malformed_recipient() {
    let s = setup(Alg::P256);
    fails(
        &s,
        &["--recipient", "age1bogus"],
        "`age1bogus` is not an age recipient",
    );
}

#[test]
fn error_existing_bundle_is_never_overwritten() {
    let s = setup(Alg::P256);
    assert_eq!(import(&s, &[]).status.code(), Some(0));
    fails(&s, &[], "clusters/lab-f/secrets.age: already exists");
}

/// M3: after the kubeadm side moved its encryption key to Talos's name (the two-step
/// rotation), the same import with `--update` folds the new facts into the cluster
/// directory, keeping every other line of cluster.yaml, and refuses where that is unsafe.
#[test]
fn reimport_after_rotation_updates_in_place() {
    let s = setup(Alg::P256);
    // The kubeadm cluster writes with `key0`, as many do.
    s_write(
        &s,
        "kubeadm/encryption-config.yaml",
        &testkit::encryption_configuration("secretbox", "key0"),
    );
    assert_eq!(import(&s, &[]).status.code(), Some(0));
    let cluster = s.dir.join("clusters/lab-f/cluster.yaml");
    let stub = std::fs::read_to_string(&cluster).unwrap();
    assert!(stub.contains("keyName: key0"), "{stub}");
    // The operator completes cluster.yaml (a comment and the placement are theirs).
    let mine = stub.replace("spec:\n", "spec:\n  # lab-f, owned by team platform\n")
        + "# end of file, kept\n";
    std::fs::write(&cluster, &mine).unwrap();
    let o = capstan(
        &[
            "check",
            "clusters/lab-f",
            "--encryption-config",
            "kubeadm/encryption-config.yaml",
        ],
        &s.dir,
    );
    assert!(
        stdout(&o).contains("BLOCK encryption-key-name"),
        "{}",
        stdout(&o)
    );
    // The rotation on the kubeadm side; then the plain import is refused, naming --update.
    s_write(
        &s,
        "kubeadm/encryption-config.yaml",
        &testkit::encryption_configuration("secretbox", "key2"),
    );
    fails(&s, &[], "run the same import with --update");
    let age_before = std::fs::read(s.dir.join("clusters/lab-f/secrets.age")).unwrap();
    let o = import(&s, &["--update"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("spec.encryption: {\"provider\":\"secretbox\",\"keyName\":\"key0\"} → {\"provider\":\"secretbox\",\"keyName\":\"key2\"}"), "{}", stderr(&o));
    let after = std::fs::read_to_string(&cluster).unwrap();
    let token_id = |text: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix("bootstrapTokenId: "))
            .unwrap()
            .to_string()
    };
    let (old_id, new_id) = (token_id(&mine), token_id(&after));
    // Only the key name and the new bundle's join token id moved; the old token's sealed
    // file is gone, the new one is there.
    assert_eq!(
        after,
        mine.replace("keyName: key0", "keyName: key2")
            .replace(&old_id, &new_id),
        "only the key name and the token id moved"
    );
    let workload = s.dir.join("clusters/lab-f/secrets/workload");
    assert!(
        !workload
            .join(format!("bootstrap-token-{old_id}.yaml"))
            .exists()
            || old_id == new_id
    );
    assert!(workload
        .join(format!("bootstrap-token-{new_id}.yaml"))
        .exists());
    assert_ne!(
        std::fs::read(s.dir.join("clusters/lab-f/secrets.age")).unwrap(),
        age_before
    );
    // The new bundle carries the key under Talos's name: check passes.
    let o = capstan(
        &[
            "check",
            "clusters/lab-f",
            "--encryption-config",
            "kubeadm/encryption-config.yaml",
            "--identity",
            s.identity.to_str().unwrap(),
        ],
        &s.dir,
    );
    let out = stdout(&o);
    for id in ["encryption-key-name", "encryption-key-value"] {
        assert!(out.contains(&format!("PASS {id}")), "{id}: {out}");
    }
    // Not once Talos machines may exist, not from another PKI, not for other recipients.
    std::fs::write(
        &cluster,
        after.replace("phase: prepare", "phase: control-plane"),
    )
    .unwrap();
    fails(&s, &["--update"], "--update works only in phase `prepare`");
    std::fs::write(&cluster, &after).unwrap();
    // Another cluster name: the sealed Secrets would be named after it.
    fails(
        &s,
        &["--update", "--name", "other"],
        "pass --name lab-f --namespace lab-f",
    );
    // The kubelet settings, when given, are updated too.
    s_write(
        &s,
        "kubeadm/kubelet-config.yaml",
        &testkit::kubelet_config_map(),
    );
    let o = import(
        &s,
        &[
            "--update",
            "--kubelet-config",
            "kubeadm/kubelet-config.yaml",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let with_kubelet = std::fs::read_to_string(&cluster).unwrap();
    assert!(
        with_kubelet.contains("  kubelet:\n    clusterDNS:\n    - \"169.254.20.10\"\n"),
        "{with_kubelet}"
    );
    assert!(
        with_kubelet.contains("# end of file, kept\n"),
        "{with_kubelet}"
    );
    std::fs::write(&cluster, &after).unwrap();
    let other = tempfile::tempdir().unwrap();
    testkit::write_kubeadm_dir(other.path(), Alg::P256, "secretbox", "key2");
    for f in ["ca.crt", "ca.key"] {
        std::fs::copy(
            other.path().join("pki").join(f),
            s.dir.join("kubeadm/pki").join(f),
        )
        .unwrap();
    }
    fails(
        &s,
        &["--update"],
        "another PKI than the one this cluster was imported from",
    );
    // No cluster directory yet: nothing to update.
    let mut args = IMPORT_ARGS.to_vec();
    let r = s.recipient.clone();
    args.extend_from_slice(&[
        "--talos-version",
        "v1.10.6",
        "--out",
        "clusters/new",
        "--recipient",
        &r,
        "--update",
    ]);
    let o = capstan(&args, &s.dir);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("clusters/new/cluster.yaml: --update folds a new import into an existing cluster directory"), "{}", stderr(&o));
}

fn s_write(s: &Setup, rel: &str, text: &str) {
    std::fs::write(s.dir.join(rel), text).unwrap();
}

#[test]
fn decrypt_errors() {
    let s = setup(Alg::P256);
    assert_eq!(import(&s, &[]).status.code(), Some(0));
    let o = assert_cmd::Command::cargo_bin("capstan")
        .unwrap()
        .args(["secrets", "decrypt", "clusters/lab-f/secrets.age"])
        .env_remove("SOPS_AGE_KEY_FILE")
        .env_remove("SOPS_AGE_KEY")
        .env_remove("CAPSTAN_AGE_KEY_FILE")
        .current_dir(&s.dir)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("an age identity is required"),
        "{}",
        stderr(&o)
    );
    let other = s.dir.join("other.txt");
    write_identity(&other);
    let o = capstan(
        &[
            "secrets",
            "decrypt",
            "-i",
            other.to_str().unwrap(),
            "clusters/lab-f/secrets.age",
        ],
        &s.dir,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("clusters/lab-f/secrets.age: no identity matches"),
        "{}",
        stderr(&o)
    );
    assert!(stdout(&o).is_empty());
    let _ = Path::new("");
}

#[test]
fn a_directory_not_named_after_the_cluster_is_refused_before_anything_is_written() {
    let s = setup(Alg::P256);
    let o = import(&s, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        !stderr(&o).contains("but its directory is"),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("(encrypted to 1 recipient)"),
        "{}",
        stderr(&o)
    );
    let mut args = IMPORT_ARGS.to_vec();
    let r = s.recipient.clone();
    args.extend_from_slice(&[
        "--talos-version",
        "v1.10.6",
        "--out",
        "clusters/lab-h",
        "--recipient",
        &r,
    ]);
    let o = capstan(&args, &s.dir);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "error: clusters/lab-h: the cluster would be `lab-f` (kubeadm's clusterName, or --name) but its directory \
         is `lab-h`; its sealed files and objects are named after the cluster, and no later import renames them. \
         Nothing was written: pass --name lab-h (with --namespace NAMESPACE if it should not be `lab-h` too), or \
         import into a directory named `lab-f`\n"
    );
    assert!(!s.dir.join("clusters/lab-h").exists());
    // The way out it names.
    args.extend_from_slice(&["--name", "lab-h"]);
    let o = capstan(&args, &s.dir);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(s.dir.join("clusters/lab-h/secrets/lab-h-ca.yaml").exists());
    // From inside the directory (`--out .`), the same rule.
    let inside = s.dir.join("clusters/lab-i");
    std::fs::create_dir_all(&inside).unwrap();
    let mut args = IMPORT_ARGS
        .iter()
        .map(|a| {
            if a.contains('/') {
                format!("../../{a}")
            } else {
                a.to_string()
            }
        })
        .collect::<Vec<_>>();
    args.extend(
        [
            "--talos-version",
            "v1.10.6",
            "--out",
            ".",
            "--recipient",
            &r,
        ]
        .iter()
        .map(|x| x.to_string()),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = capstan(&args, &inside);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("its directory is `lab-i`"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_dir(&inside).unwrap().count(), 0);
}

#[test]
fn the_stub_carries_the_sections_to_fill_in_as_comments() {
    let s = setup(Alg::P256);
    assert_eq!(import(&s, &[]).status.code(), Some(0));
    let path = s.dir.join("clusters/lab-f/cluster.yaml");
    let stub = std::fs::read_to_string(&path).unwrap();
    let start = stub
        .find("  # To fill in before rendering")
        .expect("placeholders");
    // Uncommented, the placeholders complete the file: nothing is reported missing.
    let filled: String = stub[start..]
        .lines()
        .skip(1)
        .map(|l| l.replacen("  # ", "  ", 1) + "\n")
        .collect();
    std::fs::write(&path, format!("{}{filled}", &stub[..start])).unwrap();
    let o = capstan(&["render", "clusters/lab-f"], &s.dir);
    assert!(!stderr(&o).contains("required, missing"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("invalid YAML"), "{}", stderr(&o));
}
