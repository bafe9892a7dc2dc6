//! Sealed secrets end to end on a copy of the example repository (which carries an imported
//! `secrets.age`, sealed files and a published test identity).

use crate::util::*;
use base64::Engine as _;
use std::path::{Path, PathBuf};

/// The offline recovery recipient `examples/gitops/clusters/lab-g/cluster.yaml` lists after
/// the test key.
const LAB_G_OFFLINE: &str = "age1em9td4pvjvhwv4w9js5l2crup8v9xafxme77tsnmfmnwn6u9vqvqjpvs4l";

fn identity(repo: &Path) -> PathBuf {
    repo.join("testdata/age-identity.txt")
}

fn run_env(args: &[&str], cwd: &Path, env: &[(&str, &Path)]) -> std::process::Output {
    let mut c = assert_cmd::Command::cargo_bin("capstan").unwrap();
    c.args(args).current_dir(cwd);
    for v in ["CAPSTAN_AGE_KEY_FILE", "SOPS_AGE_KEY_FILE", "SOPS_AGE_KEY"] {
        c.env_remove(v);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn ok(o: &std::process::Output) -> String {
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(o));
    stdout(o)
}

fn bundle(repo: &Path, cluster: &str) -> capstan::secrets::talos::SecretsBundle {
    let o = capstan(
        &[
            "secrets",
            "decrypt",
            "-i",
            identity(repo).to_str().unwrap(),
            &format!("clusters/{cluster}/secrets.age"),
        ],
        repo,
    );
    capstan::secrets::talos::SecretsBundle::parse("bundle", ok(&o).as_bytes()).unwrap()
}

#[test]
fn render_decrypt_matches_the_bundle() {
    let (_t, repo) = example_copy();
    let id = identity(&repo);
    let out = ok(&capstan(
        &[
            "render",
            "clusters/lab-f",
            "--decrypt",
            "-i",
            id.to_str().unwrap(),
        ],
        &repo,
    ));
    let docs = capstan::yaml::parse_stream(&out).unwrap();
    let talos = docs
        .iter()
        .find(|d| d.pointer("/metadata/name").unwrap() == "lab-f-talos")
        .unwrap();
    let ca = docs
        .iter()
        .find(|d| d.pointer("/metadata/name").unwrap() == "lab-f-ca")
        .unwrap();
    assert!(
        talos.get("sops").is_none(),
        "decrypted objects carry no sops block"
    );
    let b64 = |v: &serde_json::Value| {
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap())
            .unwrap()
    };
    let b = bundle(&repo, "lab-f");
    assert_eq!(
        b64(talos.pointer("/data/bundle").unwrap()),
        b.to_yaml().as_bytes()
    );
    assert_eq!(
        b64(ca.pointer("/data/tls.crt").unwrap()),
        b.certs.as_ref().unwrap().k8s.as_ref().unwrap().crt
    );
    assert_eq!(
        talos
            .pointer("/metadata/labels/cluster.x-k8s.io~1cluster-name")
            .unwrap(),
        "lab-f"
    );
    // Without --decrypt the same objects are ciphertext, and stdout never holds plaintext.
    let sealed = ok(&capstan(&["render", "clusters/lab-f"], &repo));
    assert!(sealed.contains("ENC[AES256_GCM,data:") && !sealed.contains("PRIVATE KEY"));
    // --decrypt never writes: it is refused with -o.
    let o = capstan(
        &["render", "clusters/lab-f", "--decrypt", "-o", "out"],
        &repo,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(!repo.join("out").exists());
}

#[test]
fn renders_are_identical_with_and_without_an_identity() {
    let (_t, repo) = example_copy();
    let id = identity(&repo);
    let a = ok(&run_env(&["render", "."], &repo, &[]));
    let b = ok(&run_env(
        &["render", "."],
        &repo,
        &[("SOPS_AGE_KEY_FILE", &id)],
    ));
    assert_eq!(a, b);
}

#[test]
fn resealing_unchanged_plaintext_changes_no_byte() {
    let (_t, repo) = example_copy();
    let before = snapshot(&repo.join("clusters"));
    let o = capstan(
        &[
            "secrets",
            "seal",
            "-i",
            identity(&repo).to_str().unwrap(),
            "clusters/lab-f",
        ],
        &repo,
    );
    ok(&o);
    assert!(
        stderr(&o).contains("lab-f-talos.yaml: unchanged"),
        "{}",
        stderr(&o)
    );
    assert_eq!(snapshot(&repo.join("clusters")), before);
}

fn changed_lines(a: &str, b: &str) -> Vec<String> {
    let d = similar::TextDiff::from_lines(a, b);
    d.iter_all_changes()
        .filter(|c| c.tag() != similar::ChangeTag::Equal)
        .map(|c| c.value().trim_end().to_string())
        .collect()
}

#[test]
fn a_changed_bundle_changes_only_the_affected_secret() {
    let (_t, repo) = example_copy();
    let id = identity(&repo);
    let dir = repo.join("clusters/lab-f");
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let (talos0, ca0) = (
        read("secrets/lab-f-talos.yaml"),
        read("secrets/lab-f-ca.yaml"),
    );
    // Rotate the trustd token inside the bundle (it is in lab-f-talos only).
    let mut b = bundle(&repo, "lab-f");
    b.trustdinfo.as_mut().unwrap().token =
        zeroize::Zeroizing::new("abcdef.0123456789abcdef".to_string());
    let text = capstan::secrets::sops::SopsFile::parse("x", &talos0).unwrap();
    let recipients: Vec<age::x25519::Recipient> = text
        .recipients()
        .iter()
        .map(|r| r.parse().unwrap())
        .collect();
    std::fs::write(
        dir.join("secrets.age"),
        capstan::secrets::encrypt_armored(b.to_yaml().as_bytes(), &recipients).unwrap(),
    )
    .unwrap();
    // render refuses until the secrets are sealed again.
    let o = capstan(&["render", "clusters/lab-f"], &repo);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("lab-f-talos.yaml is stale")
            && stderr(&o).contains("run `capstan secrets seal clusters/lab-f`"),
        "{}",
        stderr(&o)
    );
    ok(&capstan(
        &[
            "secrets",
            "seal",
            "-i",
            id.to_str().unwrap(),
            "clusters/lab-f",
        ],
        &repo,
    ));
    let (talos1, ca1) = (
        read("secrets/lab-f-talos.yaml"),
        read("secrets/lab-f-ca.yaml"),
    );
    let t = changed_lines(&talos0, &talos1);
    assert!(
        t.iter().any(|l| l.contains("bundle: ")),
        "the bundle value changed: {t:?}"
    );
    // lab-f-ca: only the readable digest annotation moved; values, MAC, lastmodified, stanzas stay.
    let c = changed_lines(&ca0, &ca1);
    assert_eq!(c.len(), 2, "{c:?}");
    assert!(
        c.iter()
            .all(|l| l.contains("capstan.dev/secrets-age-sha256")),
        "{c:?}"
    );
    ok(&capstan(&["render", "clusters/lab-f"], &repo));
}

#[test]
fn rekey_rewraps_only_the_sops_metadata() {
    let (_t, repo) = example_copy();
    let id = identity(&repo);
    let dir = repo.join("clusters/lab-g");
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let before = read("secrets/lab-g-ca.yaml");
    let new_id = age::x25519::Identity::generate();
    let new_pub = new_id.to_public().to_string();
    let cfg = read("cluster.yaml");
    let old_pub = capstan::secrets::sops::SopsFile::parse("x", &before)
        .unwrap()
        .recipients()[0]
        .clone();
    std::fs::write(
        dir.join("cluster.yaml"),
        cfg.replace(
            &format!("  - {old_pub}\n"),
            &format!("  - {old_pub}\n  - {new_pub}\n"),
        ),
    )
    .unwrap();
    // The repository's `.sops.yaml` still lists the old set (issue 42): said, with the fix.
    std::fs::write(
        repo.join(".sops.yaml"),
        format!(
            "creation_rules:\n  - path_regex: clusters/.*/secrets/.*\\.yaml$\n    age: {old_pub},{LAB_G_OFFLINE}\n"
        ),
    )
    .unwrap();
    let o = capstan(
        &[
            "secrets",
            "rekey",
            "-i",
            id.to_str().unwrap(),
            "clusters/lab-g",
        ],
        &repo,
    );
    ok(&o);
    assert!(
        stderr(&o).contains("1 recipient(s) added, 0 removed"),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains(
            "warning: .sops.yaml creation_rules[0] gives clusters/lab-g/secrets/lab-g-ca.yaml, "
        ) && stderr(&o).contains(&format!("(lacking: {new_pub}; besides: none)"))
            && stderr(&o).contains(&format!(
                "set its `age` to \"{old_pub},{new_pub},{LAB_G_OFFLINE}\""
            )),
        "{}",
        stderr(&o)
    );
    // In step: nothing said.
    std::fs::write(
        repo.join(".sops.yaml"),
        format!("creation_rules:\n  - path_regex: secrets/\n    age: >-\n      {new_pub},\n      {LAB_G_OFFLINE},\n      {old_pub}\n"),
    )
    .unwrap();
    let again = capstan(
        &[
            "secrets",
            "rekey",
            "-i",
            id.to_str().unwrap(),
            "clusters/lab-g",
        ],
        &repo,
    );
    ok(&again);
    assert!(!stderr(&again).contains(".sops.yaml"), "{}", stderr(&again));
    std::fs::remove_file(repo.join(".sops.yaml")).unwrap();
    let after = read("secrets/lab-g-ca.yaml");
    for line in changed_lines(&before, &after) {
        let in_sops = after
            .lines()
            .skip_while(|l| *l != "sops:")
            .any(|l| l.trim_end() == line)
            || before
                .lines()
                .skip_while(|l| *l != "sops:")
                .any(|l| l.trim_end() == line);
        assert!(
            in_sops || line.contains("capstan.dev/secrets-age-sha256"),
            "changed outside the sops block: {line}"
        );
    }
    let enc = |t: &str| {
        t.lines()
            .filter(|l| l.contains("ENC["))
            .filter(|l| !l.trim_start().starts_with("mac:"))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(enc(&before), enc(&after), "no value re-encrypted");
    // The new identity opens everything; rendering still works without any key.
    use age::secrecy::ExposeSecret;
    let new_file = repo.join("new-id.txt");
    std::fs::write(&new_file, new_id.to_string().expose_secret()).unwrap();
    ok(&capstan(
        &[
            "secrets",
            "decrypt",
            "-i",
            new_file.to_str().unwrap(),
            "clusters/lab-g/secrets/lab-g-ca.yaml",
        ],
        &repo,
    ));
    ok(&capstan(
        &[
            "secrets",
            "decrypt",
            "-i",
            new_file.to_str().unwrap(),
            "clusters/lab-g/secrets.age",
        ],
        &repo,
    ));
    ok(&capstan(&["render", "clusters/lab-g"], &repo));
    // Remove the original recipient: its identity no longer opens anything.
    std::fs::write(
        dir.join("cluster.yaml"),
        cfg.replace(&format!("  - {old_pub}\n"), &format!("  - {new_pub}\n")),
    )
    .unwrap();
    let o = capstan(
        &[
            "secrets",
            "rekey",
            "-i",
            new_file.to_str().unwrap(),
            "clusters/lab-g",
        ],
        &repo,
    );
    ok(&o);
    assert!(
        stderr(&o).contains("0 recipient(s) added, 1 removed"),
        "{}",
        stderr(&o)
    );
    let o = capstan(
        &[
            "secrets",
            "decrypt",
            "-i",
            id.to_str().unwrap(),
            "clusters/lab-g/secrets/lab-g-talos.yaml",
        ],
        &repo,
    );
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn render_refuses_missing_foreign_and_plaintext_secrets() {
    type Breaker = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, Breaker, &str)> = vec![
        (
            "missing",
            Box::new(|d: &Path| std::fs::remove_file(d.join("secrets/lab-f-ca.yaml")).unwrap()),
            "lab-f-ca.yaml is missing: run `capstan secrets seal",
        ),
        (
            "no bundle",
            Box::new(|d: &Path| std::fs::remove_file(d.join("secrets.age")).unwrap()),
            "secrets.age is missing: import the cluster first",
        ),
        (
            "foreign CA",
            Box::new(|d: &Path| {
                let p = d.join("cluster.yaml");
                let t = std::fs::read_to_string(&p).unwrap();
                let i = t.find("kubernetesCa: sha256:").unwrap() + "kubernetesCa: sha256:".len();
                std::fs::write(&p, format!("{}0000{}", &t[..i], &t[i + 4..])).unwrap();
            }),
            "come from a different import",
        ),
        (
            "plaintext",
            Box::new(|d: &Path| {
                std::fs::write(d.join("secrets/extra.yaml"), "apiVersion: v1\nkind: Secret\nmetadata: {name: x, namespace: lab-f}\nstringData: {password: hunter2}\n").unwrap()
            }),
            "not SOPS-encrypted: a plaintext Secret must never be committed",
        ),
    ];
    for (name, break_it, needle) in cases {
        let (_t, repo) = example_copy();
        break_it(&repo.join("clusters/lab-f"));
        let o = capstan(&["render", "clusters/lab-f"], &repo);
        assert_eq!(o.status.code(), Some(2), "{name}");
        assert!(stderr(&o).contains(needle), "{name}: {}", stderr(&o));
        assert!(stdout(&o).is_empty(), "{name}: nothing on stdout");
        assert!(!stderr(&o).contains("hunter2"));
    }
}

/// A sealed file whose age armor is broken (a line cut short, a character outside base64)
/// could never be unwrapped: render refuses it as it refuses any corrupt ciphertext, before
/// printing anything, without a key.
#[test]
fn render_refuses_a_sealed_file_whose_age_armor_is_broken() {
    type Corrupt = fn(&str) -> String;
    let cases: [(&str, Corrupt); 2] = [
        ("line cut short", |l| l[..l.len() - 4].to_string()),
        ("not base64", |l| format!("{}!{}", &l[..10], &l[11..])),
    ];
    for (name, corrupt) in cases {
        let (_t, repo) = example_copy();
        let p = repo.join("clusters/lab-f/secrets/lab-f-ca.yaml");
        let text = std::fs::read_to_string(&p).unwrap();
        let begin = text.find("-----BEGIN AGE ENCRYPTED FILE-----\n").unwrap();
        let start = text[begin..].find('\n').unwrap() + begin + 1;
        let end = text[start..].find('\n').unwrap() + start;
        let line = &text[start..end];
        let broken = format!("{}{}{}", &text[..start], corrupt(line), &text[end..]);
        std::fs::write(&p, broken).unwrap();
        let o = capstan(&["render", "clusters/lab-f"], &repo);
        assert_eq!(
            (o.status.code(), stdout(&o).as_str(), stderr(&o).as_str()),
            (
                Some(2),
                "",
                "error: clusters/lab-f/secrets/lab-f-ca.yaml: sops.age[0].enc: \
                 is not a well-formed ASCII-armored age file (broken armor)\n"
            ),
            "{name}"
        );
    }
}

#[test]
fn extra_sops_secrets_pass_through_verbatim_and_kustomize_style_bundle_keeps_them() {
    let (_t, repo) = example_copy();
    let src = std::fs::read_to_string(repo.join("clusters/lab-f/secrets/lab-f-ca.yaml")).unwrap();
    // A user's own SOPS Secret (here: a copy under another name) is passed through as is.
    let mut doc = src.replace("name: lab-f-ca", "name: lab-f-registry");
    doc = doc.replace("capstan.dev/", "example.com/");
    std::fs::write(
        repo.join("clusters/lab-f/secrets/lab-f-registry.yaml"),
        &doc,
    )
    .unwrap();
    let out = ok(&capstan(&["render", "clusters/lab-f"], &repo));
    assert!(out.contains(&doc), "verbatim");
    ok(&capstan(&["render", "clusters/lab-f", "-o", "out"], &repo));
    assert_eq!(
        std::fs::read_to_string(repo.join("out/lab-f/secret-lab-f-registry.yaml")).unwrap(),
        doc
    );
    // The Secret spec.vsphere.identityRef names must hold what CAPV reads.
    std::fs::write(
        repo.join("clusters/lab-f/secrets/lab-f-vsphere.yaml"),
        doc.replace("name: lab-f-registry", "name: lab-f-vsphere"),
    )
    .unwrap();
    let o = capstan(&["render", "clusters/lab-f"], &repo);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("clusters/lab-f/secrets/lab-f-vsphere.yaml: the vSphere identity Secret (spec.vsphere.identityRef) lacks password, username"),
        "{}",
        stderr(&o)
    );
}

/// `secrets vsphere-identity` seals the credentials CAPV reads (password from stdin only),
/// and refuses what it cannot seal.
#[test]
fn vsphere_identity_is_sealed_from_stdin() {
    let (_t, repo) = example_copy();
    let id = identity(&repo);
    let seal = |dir: &str, stdin: &str| {
        let mut c = assert_cmd::Command::cargo_bin("capstan").unwrap();
        c.args([
            "secrets",
            "vsphere-identity",
            dir,
            "--username",
            "capv@vsphere.local",
        ])
        .current_dir(&repo)
        .write_stdin(stdin);
        c.output().unwrap()
    };
    let o = seal("clusters/lab-f", "hunter2-vsphere\n");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("lab-f-vsphere.yaml: written"),
        "{}",
        stderr(&o)
    );
    let text =
        std::fs::read_to_string(repo.join("clusters/lab-f/secrets/lab-f-vsphere.yaml")).unwrap();
    assert!(
        !text.contains("hunter2") && text.contains("password: \"ENC[AES256_GCM"),
        "{text}"
    );
    let plain = ok(&capstan(
        &[
            "secrets",
            "decrypt",
            "-i",
            id.to_str().unwrap(),
            "clusters/lab-f/secrets/lab-f-vsphere.yaml",
        ],
        &repo,
    ));
    let doc = capstan::yaml::parse_one(&plain).unwrap();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    assert_eq!(doc["data"]["password"], b64("hunter2-vsphere"));
    assert_eq!(doc["data"]["username"], b64("capv@vsphere.local"));
    assert_eq!(doc["metadata"]["namespace"], "lab-f");
    // The render carries it, checked, with the move label added to its readable metadata
    // (outside the MAC: `mac_only_encrypted: true`).
    let out = ok(&capstan(&["render", "clusters/lab-f"], &repo));
    let labelled = text.replace(
        "    cluster.x-k8s.io/cluster-name: lab-f\n",
        "    cluster.x-k8s.io/cluster-name: lab-f\n    clusterctl.cluster.x-k8s.io/move: \"\"\n",
    );
    assert!(labelled != text && out.contains(&labelled), "{out}");
    // lab-g names a VSphereClusterIdentity: nothing to seal with the cluster.
    let o = seal("clusters/lab-g", "x\n");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("kind `VSphereClusterIdentity`"),
        "{}",
        stderr(&o)
    );
    for bad in ["", "\n", "two\nlines\n"] {
        let o = seal("clusters/lab-f", bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}");
        assert!(!stderr(&o).contains("two"), "{}", stderr(&o));
    }
}

/// Every output of a whole workflow (files written, stdout, stderr of every command,
/// error paths included), except the commands whose job is to print plaintext, is scanned
/// for private-key PEM headers and for every secret value of the bundles.
#[test]
fn no_plaintext_secret_anywhere() {
    let (_t, repo) = example_copy();
    let id = identity(&repo);
    let ids = id.to_str().unwrap();
    let mut secrets: Vec<String> = vec!["PRIVATE KEY-----".into()];
    for c in ["lab-f", "lab-g"] {
        let b = bundle(&repo, c);
        let s = b.secrets.as_ref().unwrap();
        secrets.push(b.cluster.as_ref().unwrap().secret.to_string());
        secrets.push(s.bootstraptoken.split('.').nth(1).unwrap().to_string());
        secrets.push(s.secretboxencryptionsecret.as_ref().unwrap().to_string());
        secrets.push(b.trustdinfo.as_ref().unwrap().token.to_string());
        for key in [
            &b.certs.as_ref().unwrap().k8s.as_ref().unwrap().key,
            &b.certs.as_ref().unwrap().os.as_ref().unwrap().key,
        ] {
            let pem = String::from_utf8(key.to_vec()).unwrap();
            secrets.extend(
                pem.lines()
                    .filter(|l| !l.starts_with("-----") && l.len() > 20)
                    .map(String::from),
            );
        }
    }
    let mut outputs: Vec<(String, String)> = Vec::new();
    let mut record = |what: &str, o: std::process::Output| {
        outputs.push((format!("{what} stdout"), stdout(&o)));
        outputs.push((format!("{what} stderr"), stderr(&o)));
    };
    record("render", capstan(&["render", "."], &repo));
    record("render -o", capstan(&["render", ".", "-o", "out"], &repo));
    record(
        "seal",
        capstan(&["secrets", "seal", "-i", ids, "clusters/lab-f"], &repo),
    );
    record(
        "rekey",
        capstan(&["secrets", "rekey", "-i", ids, "clusters/lab-g"], &repo),
    );
    record(
        "validate",
        capstan(&["validate", "--crds", "out", "out/lab-f"], &repo),
    );
    let other = repo.join("other.txt");
    write_identity(&other);
    record(
        "decrypt with a wrong identity",
        capstan(
            &[
                "secrets",
                "decrypt",
                "-i",
                other.to_str().unwrap(),
                "clusters/lab-f/secrets/lab-f-talos.yaml",
            ],
            &repo,
        ),
    );
    record(
        "render --decrypt with a wrong identity",
        capstan(
            &[
                "render",
                "clusters/lab-f",
                "--decrypt",
                "-i",
                other.to_str().unwrap(),
            ],
            &repo,
        ),
    );
    let t = repo.join("clusters/lab-f/secrets/lab-f-talos.yaml");
    let text = std::fs::read_to_string(&t).unwrap();
    std::fs::write(&t, text.replacen("data:", "data:x", 1)).unwrap();
    record(
        "decrypt a tampered file",
        capstan(
            &[
                "secrets",
                "decrypt",
                "-i",
                ids,
                "clusters/lab-f/secrets/lab-f-talos.yaml",
            ],
            &repo,
        ),
    );
    record(
        "render a tampered file",
        capstan(&["render", "clusters/lab-f", "--decrypt", "-i", ids], &repo),
    );
    for (path, bytes) in snapshot(&repo) {
        if path.starts_with("testdata/") {
            continue; // the published test identity
        }
        outputs.push((path, String::from_utf8_lossy(&bytes).into_owned()));
    }
    for (what, text) in &outputs {
        for s in &secrets {
            assert!(
                !text.contains(s.as_str()),
                "{what} contains secret material"
            );
        }
    }
    assert!(outputs.len() > 40, "scanned {} outputs", outputs.len());
}

#[test]
fn seal_removes_the_files_it_sealed_under_another_cluster_name() {
    let (_tmp, repo) = example_copy();
    let ids = repo.join("testdata/age-identity.txt");
    let secrets = repo.join("clusters/lab-f/secrets");
    // What a seal before a rename left: capstan's annotation, another cluster's name.
    std::fs::copy(
        secrets.join("lab-f-talos.yaml"),
        secrets.join("lab-old-talos.yaml"),
    )
    .unwrap();
    let o = capstan(
        &[
            "secrets",
            "seal",
            "-i",
            ids.to_str().unwrap(),
            "clusters/lab-f",
        ],
        &repo,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!secrets.join("lab-old-talos.yaml").exists());
    assert!(
        stderr(&o).contains("lab-old-talos.yaml: removed (sealed for another cluster name)"),
        "{}",
        stderr(&o)
    );
    // The vSphere credentials are not seal's: kept.
    assert!(secrets.join("lab-f-vsphere.yaml").exists());
    let o = capstan(&["render", "clusters/lab-f"], &repo);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// D4: a sealed Secret a restore needs, sealed without the move label by a tool whose MAC
/// covers the metadata (no `mac_only_encrypted: true`), cannot get the label without the
/// key: render refuses it and names the command that re-seals it. With the flag, render
/// adds the label and the file still decrypts (the MAC covers the values only).
#[test]
fn a_restore_secret_whose_mac_covers_its_labels_is_refused_with_the_re_seal() {
    let (_t, repo) = example_copy();
    let f = repo.join("clusters/lab-f/secrets/lab-f-vsphere.yaml");
    let text = std::fs::read_to_string(&f).unwrap();
    let id = repo.join("testdata/age-identity.txt").display().to_string();
    let o = capstan(&["render", "clusters/lab-f", "--decrypt", "-i", &id], &repo);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("clusterctl.cluster.x-k8s.io/move: \"\""));
    std::fs::write(&f, text.replace("  mac_only_encrypted: true\n", "")).unwrap();
    let o = capstan(&["render", "clusters/lab-f"], &repo);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let err = stderr(&o);
    assert!(
        err.contains("lacks `clusterctl.cluster.x-k8s.io/move: \"\"`")
            && err.contains("re-seal it with `capstan secrets vsphere-identity clusters/lab-f`"),
        "{err}"
    );
}

/// An identity through a pipe, as `-i <(pass show age)` gives it (issue 42: sops and age
/// users keep keys in password managers): read like a file, bounded; nothing else may be a
/// pipe.
#[test]
fn an_identity_from_process_substitution_is_read() {
    let bin = assert_cmd::cargo::cargo_bin("capstan");
    let id = root().join("examples/gitops/testdata/age-identity.txt");
    let o = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "{} secrets decrypt -i <(cat {}) clusters/lab-g/secrets/lab-g-ca.yaml",
            bin.display(),
            id.display()
        ))
        .current_dir(example())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("kind: Secret"), "{}", stdout(&o));
    // The sealed file itself may not be a pipe.
    let o = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "{} secrets decrypt -i {} <(cat clusters/lab-g/secrets/lab-g-ca.yaml)",
            bin.display(),
            id.display()
        ))
        .current_dir(example())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("a FIFO, not a regular file"),
        "{}",
        stderr(&o)
    );
}

/// `secrets decrypt` reads a multi-document file as the real sops writes it (sops 3.11.0,
/// `tests/fixtures/sops-multidoc/SOURCES.md`): every document, `---` between them, one MAC
/// over all of them. The MAC covers the documents in order, so swapping two is refused, and
/// documents whose metadata differ were not written together and are refused too.
#[test]
fn secrets_decrypt_reads_a_multi_document_file_sops_wrote() {
    let dir = root().join("tests/fixtures/sops-multidoc");
    let id = root().join("examples/gitops/testdata/age-identity.txt");
    let id = id.to_str().unwrap();
    let o = run_env(
        &["secrets", "decrypt", "-i", id, "two-secrets.sops.yaml"],
        &dir,
        &[],
    );
    assert_eq!(
        stdout(&o),
        std::fs::read_to_string(dir.join("two-secrets.plain.yaml")).unwrap()
    );
    assert_golden("secrets-decrypt-multi-document.txt", &transcript(&o));

    let text = std::fs::read_to_string(dir.join("two-secrets.sops.yaml")).unwrap();
    // The document marker, not the `-----` of the age armor.
    let (a, b) = text.split_once("\n---\n").unwrap();
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("swapped.yaml"), format!("{b}---\n{a}\n")).unwrap();
    let mixed = text.replacen("lastmodified: \"", "lastmodified: \"1", 1);
    std::fs::write(t.path().join("mixed.yaml"), mixed).unwrap();
    let mut refusals = String::new();
    for f in ["swapped.yaml", "mixed.yaml"] {
        let o = run_env(&["secrets", "decrypt", "-i", id, f], t.path(), &[]);
        assert!(stdout(&o).is_empty(), "{f}: nothing decrypted is printed");
        refusals.push_str(&format!(
            "$ capstan secrets decrypt {f}\n{}",
            transcript(&o)
        ));
    }
    assert_golden("secrets-decrypt-multi-document-refused.txt", &refusals);
}
