//! `capstan diff` scenarios on temporary copies of the example repository: each checks the
//! classification, the risk notes and the exit code in every format, and that no secret
//! plaintext or ciphertext appears in any of them.

use crate::util::*;
use base64::Engine as _;
use std::path::{Path, PathBuf};
use std::process::Output;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Two copies of the example repository, `a` and `b`, side by side in one temp dir.
struct Pair {
    tmp: tempfile::TempDir,
}

/// The example's lab-g is autoscaled (its MachineDeployment carries no replicas); these
/// tests change worker replicas, so they use it without the autoscaler overlay.
fn without_autoscaler(repo: &Path) {
    edit(
        &repo.join("clusters/lab-g/cluster.yaml"),
        "  - overlays/autoscaler\n",
        "",
    );
}

impl Pair {
    fn new() -> Pair {
        let tmp = tempfile::tempdir().unwrap();
        copy_tree(&example(), &tmp.path().join("a"));
        copy_tree(&example(), &tmp.path().join("b"));
        for side in ["a", "b"] {
            without_autoscaler(&tmp.path().join(side));
        }
        Pair { tmp }
    }
    fn dir(&self) -> &Path {
        self.tmp.path()
    }
    fn a(&self) -> PathBuf {
        self.dir().join("a")
    }
    fn b(&self) -> PathBuf {
        self.dir().join("b")
    }
    fn identity(&self) -> String {
        self.a()
            .join("testdata/age-identity.txt")
            .display()
            .to_string()
    }
}

/// Replace `from` by `to` in a file, exactly once.
fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert_eq!(
        text.matches(from).count(),
        1,
        "{}: `{from}` must occur exactly once",
        path.display()
    );
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

/// Neither stream of `o` (a `format` report) holds a value of `needles`, SOPS ciphertext or
/// a private key.
fn assert_no_secret(format: &str, o: &Output, needles: &[String]) {
    let all = stdout(o) + &stderr(o);
    for n in needles {
        assert!(
            !all.contains(n.as_str()),
            "{format} output leaks a secret value: {n}"
        );
    }
    assert!(
        !all.contains("ENC[") && !all.contains("PRIVATE KEY"),
        "{format}: {all}"
    );
}

/// Run capstan without identities from the environment and without colour.
fn run(args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> Output {
    capstan_plain(args, cwd, env)
}

/// Every string that must never be printed: each SOPS file's ciphertexts (whole and their
/// `data:` parts) and, decrypted, each value (base64 and decoded, line by line, and the
/// leaves of a Talos bundle).
pub fn secret_needles(repos: &[PathBuf], identity: &str) -> Vec<String> {
    let ids = capstan::secrets::parse_identities("id", &std::fs::read_to_string(identity).unwrap())
        .unwrap();
    let mut out = std::collections::BTreeSet::new();
    let add_text = |out: &mut std::collections::BTreeSet<String>, s: &str| {
        for line in s.lines() {
            let l = line.trim();
            if l.len() >= 16 && !l.starts_with("-----") {
                out.insert(l.to_string());
            }
        }
    };
    for repo in repos {
        for e in walkdir::WalkDir::new(repo.join("clusters")) {
            let e = e.unwrap();
            let p = e.path();
            if !(p.is_file() && p.to_string_lossy().contains("/secrets/")) {
                continue;
            }
            let text = std::fs::read_to_string(p).unwrap();
            let file = capstan::secrets::sops::SopsFile::parse("f", &text).unwrap();
            for section in ["data", "stringData"] {
                if let Some(m) = file.tree().get(section).and_then(|v| v.as_object()) {
                    for v in m.values() {
                        let s = v.as_str().unwrap();
                        out.insert(s.to_string());
                        let data = s.split("data:").nth(1).unwrap().split(',').next().unwrap();
                        out.insert(data[..data.len().min(40)].to_string());
                    }
                }
            }
            let plain = file.decrypt("f", &ids).unwrap();
            for section in ["data", "stringData"] {
                if let Some(m) = plain.tree().get(section).and_then(|v| v.as_object()) {
                    for v in m.values() {
                        let s = v.as_str().unwrap();
                        if s.len() >= 8 {
                            out.insert(s.to_string());
                        }
                        if let Ok(d) = B64.decode(s) {
                            let d = String::from_utf8_lossy(&d).into_owned();
                            add_text(&mut out, &d);
                            if let Ok(bundle) = capstan::yaml::parse_one(&d) {
                                let mut stack = vec![bundle];
                                while let Some(v) = stack.pop() {
                                    match v {
                                        serde_json::Value::Object(m) => {
                                            stack.extend(m.into_iter().map(|(_, v)| v))
                                        }
                                        serde_json::Value::String(s) => {
                                            if s.len() >= 16 {
                                                out.insert(s.clone());
                                            }
                                            if let Ok(x) = B64.decode(&s) {
                                                add_text(&mut out, &String::from_utf8_lossy(&x));
                                            }
                                        }
                                        _ => {}
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(out.len() > 20, "too few needles: {}", out.len());
    out.into_iter().collect()
}

struct Outputs {
    text: String,
    markdown: String,
    json: serde_json::Value,
}

/// Run the diff in the three formats, check the exit code of each, and that no needle
/// appears in any output (stdout or stderr).
fn diff_all(
    p: &Pair,
    args: &[&str],
    code: i32,
    env: &[(&str, &str)],
    needles: &[String],
) -> Outputs {
    let mut texts = Vec::new();
    for format in ["text", "markdown", "json"] {
        // Unchanged clusters named too (by default they are counted).
        let mut full = vec!["diff", "--verbose", "--format", format];
        full.extend_from_slice(args);
        let o = run(&full, p.dir(), env);
        assert_eq!(
            o.status.code(),
            Some(code),
            "{format}: stdout:\n{}\nstderr:\n{}",
            stdout(&o),
            stderr(&o)
        );
        assert_no_secret(format, &o, needles);
        texts.push(stdout(&o));
    }
    Outputs {
        text: texts[0].clone(),
        markdown: texts[1].clone(),
        json: serde_json::from_str(&texts[2]).unwrap(),
    }
}

fn cluster<'a>(j: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    j["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no cluster {name} in {j}"))
}

fn object<'a>(c: &'a serde_json::Value, kind: &str, name_prefix: &str) -> &'a serde_json::Value {
    c["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| {
            o["id"]["kind"] == kind && o["id"]["name"].as_str().unwrap().starts_with(name_prefix)
        })
        .unwrap_or_else(|| panic!("no {kind} {name_prefix}* in {c}"))
}

fn has_risk(c: &serde_json::Value, severity: &str, needle: &str) -> bool {
    c["risks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["severity"] == severity && r["message"].as_str().unwrap().contains(needle))
}

fn lab_g(p: &Pair) -> PathBuf {
    p.b().join("clusters/lab-g/cluster.yaml")
}

#[test]
fn unchanged_inputs_renders_and_streams_exit_0() {
    let p = Pair::new();
    let needles = secret_needles(&[p.a()], &p.identity());
    let o = diff_all(&p, &["a", "b"], 0, &[], &needles);
    assert!(o.text.contains("0 of 2 cluster(s) differ"), "{}", o.text);
    assert!(
        o.markdown.contains("| lab-f | unchanged |"),
        "{}",
        o.markdown
    );
    assert!(o.json["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["status"] == "unchanged" && c["objects"].as_array().unwrap().is_empty()));
    // A rendered output directory, one cluster's directory and a YAML stream compare equal
    // to the inputs they came from.
    assert_eq!(
        run(&["render", "a", "-o", "out"], p.dir(), &[])
            .status
            .code(),
        Some(0)
    );
    let stream = run(&["render", "a"], p.dir(), &[]);
    std::fs::write(p.dir().join("stream.yaml"), &stream.stdout).unwrap();
    diff_all(&p, &["out", "b"], 0, &[], &needles);
    diff_all(&p, &["stream.yaml", "out"], 0, &[], &needles);
    diff_all(&p, &["out/lab-g", "b/clusters/lab-g"], 0, &[], &needles);
    let o = assert_cmd::Command::cargo_bin("capstan")
        .unwrap()
        .args(["diff", "-", "b"])
        .current_dir(p.dir())
        .write_stdin(stream.stdout.clone())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Errors exit 2.
    assert_eq!(
        run(&["diff", "a", "nope"], p.dir(), &[]).status.code(),
        Some(2)
    );
    assert_eq!(run(&["diff", "a"], p.dir(), &[]).status.code(), Some(2));
    assert_eq!(
        run(&["diff", "--cluster", "nope", "a", "b"], p.dir(), &[])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn replicas_leaving_and_returning_to_git() {
    // b puts lab-g's pool under the autoscaler again: replicas leave git, and the webhook
    // clamps the 4 of before into [1, 10], which keeps 4.
    let p = Pair::new();
    edit(
        &lab_g(&p),
        "  - overlays/talos-vmware\n",
        "  - overlays/talos-vmware\n  - overlays/autoscaler\n",
    );
    let needles = secret_needles(&[p.a()], &p.identity());
    let o = diff_all(&p, &["a", "b"], 1, &[], &needles);
    let c = cluster(&o.json, "lab-g");
    assert!(
        has_risk(c, "low", "worker replicas 4 → not in git: the Cluster Autoscaler owns it; the webhook clamps 4 into [1, 10], which keeps 4"),
        "{}",
        o.text
    );
    // With a maximum below the old count the clamp deletes machines.
    edit(
        &p.b().join("overlays/autoscaler/overlay.yaml"),
        "max-size: \"10\"",
        "max-size: \"3\"",
    );
    let o = diff_all(&p, &["a", "b"], 1, &[], &needles);
    let c = cluster(&o.json, "lab-g");
    assert!(
        has_risk(c, "medium", "worker replicas 4 → not in git (the Cluster Autoscaler owns it; the webhook clamps 4 into [1, 3]: 3): drains and deletes 1 machine(s)"),
        "{}",
        o.text
    );
    // The other way round: replicas come back into git.
    let o = diff_all(&p, &["b", "a"], 1, &[], &needles);
    let c = cluster(&o.json, "lab-g");
    assert!(
        has_risk(c, "medium", "worker replicas return to git at 4"),
        "{}",
        o.text
    );
}

#[test]
fn replica_change() {
    let p = Pair::new();
    edit(
        &lab_g(&p),
        "  controlPlane:\n    replicas: 3",
        "  controlPlane:\n    replicas: 1",
    );
    edit(&lab_g(&p), "replicas: 4", "replicas: 6");
    let needles = secret_needles(&[p.a()], &p.identity());
    let o = diff_all(&p, &["a", "b"], 1, &[], &needles);
    let c = cluster(&o.json, "lab-g");
    assert_eq!(c["status"], "changed");
    assert_eq!(cluster(&o.json, "lab-f")["status"], "unchanged");
    let tcp = object(c, "TalosControlPlane", "lab-g-cp");
    assert_eq!(tcp["status"], "changed");
    assert_eq!(tcp["fields"][0]["path"], "spec.replicas");
    assert_eq!(tcp["fields"][0]["before"], 3);
    assert_eq!(tcp["fields"][0]["after"], 1);
    assert!(has_risk(
        c,
        "high",
        "control-plane replicas 3 → 1: removes a majority of the 3 etcd members"
    ));
    assert!(has_risk(
        c,
        "low",
        "worker replicas 4 → 6: creates 2 machine(s)"
    ));
    assert!(o.text.contains("spec.replicas: 3 → 1"), "{}", o.text);
    assert!(o
        .text
        .contains("high   TalosControlPlane lab-g/lab-g-cp: control-plane replicas 3 → 1"));
    assert!(
        o.markdown
            .contains("| lab-g | changed | 2 | 0 | 0 | 0 | 0 | **1 high**, 1 low |"),
        "{}",
        o.markdown
    );
    // --cluster limits the report.
    let only_f = run(&["diff", "--cluster", "lab-f", "a", "b"], p.dir(), &[]);
    assert_eq!(only_f.status.code(), Some(0), "{}", stdout(&only_f));
}

#[test]
fn endpoint_strategy_changes_are_high_risk() {
    let p = Pair::new();
    // lab-g's VIP moves; lab-f's control-plane pool (its load balancer's backends) moves.
    edit(&lab_g(&p), "address: 10.30.40.10", "address: 10.30.40.11");
    edit(
        &p.b().join("clusters/lab-f/cluster.yaml"),
        "10.20.30.150-10.20.30.153",
        "10.20.30.160-10.20.30.163",
    );
    let needles = secret_needles(&[p.a()], &p.identity());
    let o = diff_all(&p, &["a", "b", "--fail-on", "high"], 1, &[], &needles);
    let g = cluster(&o.json, "lab-g");
    assert!(has_risk(
        g,
        "high",
        "vip 10.30.40.10 on ens192 → vip 10.30.40.11 on ens192: how the endpoint follows the control-plane machines changed"
    ), "{g}");
    // The VIP's own document says so too (an overlay may rewrite the annotation).
    assert!(
        has_risk(
            g,
            "high",
            "patch[5]<Layer2VIPConfig>.name: 10.30.40.10 → 10.30.40.11: the control-plane VIP"
        ),
        "{g}"
    );
    let f = cluster(&o.json, "lab-f");
    assert!(
        has_risk(
            f,
            "high",
            "how the endpoint follows the control-plane machines changed"
        ),
        "{f}"
    );
    assert!(has_risk(
        f,
        "high",
        "spec.addresses[0]: 10.20.30.150-10.20.30.153 → 10.20.30.160-10.20.30.163: the control-plane pool is the load balancer's backend list"
    ), "{f}");
    // The nodes' pool is not the load balancer's: a change of it is medium.
    let p = Pair::new();
    edit(
        &p.b().join("overlays/vsphere-ipam/pool.yaml"),
        "10.20.30.100-10.20.30.149",
        "10.20.30.100-10.20.30.139",
    );
    let o = diff_all(&p, &["a", "b"], 1, &[], &needles);
    let f = cluster(&o.json, "lab-f");
    assert!(
        has_risk(f, "medium", "the addresses new machines get"),
        "{f}"
    );
    assert!(!has_risk(f, "high", "backend"), "{f}");
}

#[test]
fn template_spec_change_is_a_replacement_with_references() {
    let p = Pair::new();
    edit(&lab_g(&p), "numCPUs: 4", "numCPUs: 8");
    let needles = secret_needles(&[p.a()], &p.identity());
    let o = diff_all(&p, &["a", "b"], 1, &[], &needles);
    let c = cluster(&o.json, "lab-g");
    let t = object(c, "VSphereMachineTemplate", "lab-g-cp-");
    assert_eq!(t["status"], "replaced");
    let old = t["replaces"].as_str().unwrap();
    let new = t["id"]["name"].as_str().unwrap();
    assert!(old.starts_with("lab-g-cp-") && old != new);
    assert_eq!(t["fields"].as_array().unwrap().len(), 1, "{t}");
    assert_eq!(t["fields"][0]["path"], "spec.template.spec.numCPUs");
    assert_eq!(t["referencedBy"][0]["object"]["kind"], "TalosControlPlane");
    assert_eq!(
        t["referencedBy"][0]["path"],
        "spec.machineTemplate.spec.infrastructureRef.name"
    );
    let tcp = object(c, "TalosControlPlane", "lab-g-cp");
    assert_eq!(tcp["fields"][0]["before"], old);
    assert_eq!(tcp["fields"][0]["after"], new);
    assert!(has_risk(
        c,
        "high",
        "replaces every control-plane machine (replicas: 3)"
    ));
    assert!(o.text.contains(&format!("replaced (was {old})")));
    assert!(o.text.contains("reference moved: TalosControlPlane lab-g/lab-g-cp spec.machineTemplate.spec.infrastructureRef.name"));
    assert!(o
        .markdown
        .contains("<details><summary><code>± VSphereMachineTemplate"));
}

#[test]
fn resealed_secret_with_unchanged_plaintext() {
    let p = Pair::new();
    // What `secrets seal` writes, gone (the sealed vSphere credentials stay as they are).
    let sealed = p.b().join("clusters/lab-f/secrets");
    for f in ["lab-f-ca.yaml", "lab-f-talos.yaml"] {
        std::fs::remove_file(sealed.join(f)).unwrap();
    }
    std::fs::remove_dir_all(sealed.join("workload")).unwrap();
    let id = p.identity();
    let o = run(
        &["secrets", "seal", "-i", &id, "b/clusters/lab-f"],
        p.dir(),
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let needles = secret_needles(&[p.a(), p.b()], &id);
    // By default, with an identity (flag or environment) or without: every value whose
    // ciphertext changed is re-sealed, a difference (exit 1), whatever it holds; the CA's
    // certificate, decoded with the identity, is the same (no rotation risk).
    for (args, env) in [
        (vec!["-i", id.as_str(), "a", "b"], vec![]),
        (vec!["a", "b"], vec![("SOPS_AGE_KEY_FILE", id.as_str())]),
        (vec!["a", "b"], vec![]),
    ] {
        let o = diff_all(&p, &args, 1, &env, &needles);
        let c = cluster(&o.json, "lab-f");
        assert_eq!(c["status"], "changed");
        let ca = object(c, "Secret", "lab-f-ca");
        assert_eq!(ca["status"], "changed");
        for k in ca["secretKeys"].as_array().unwrap() {
            assert_eq!(k["status"], "re-sealed", "{k}");
            assert!(k.get("certificates").is_none(), "{k}");
        }
        assert!(
            o.text.contains(
                "data[\"tls.key\"]: re-sealed (new ciphertext; values are not compared here"
            ),
            "{}",
            o.text
        );
        assert!(
            has_risk(c, "high", "data[\"tls.key\"]: the cluster CA is re-sealed"),
            "{c}"
        );
        assert!(
            has_risk(
                c,
                "high",
                "data.bundle: the Talos secrets bundle is re-sealed"
            ),
            "{c}"
        );
        assert!(!has_risk(c, "high", "CA certificate rotated"), "{c}");
        assert!(!o.text.contains("re-encrypted)"), "{}", o.text);
    }
    // A key holder's terminal: the plaintexts are equal, so the Secrets are re-encrypted,
    // not a difference (exit 0).
    for format in ["text", "json"] {
        let o = run(
            &[
                "diff",
                "--compare-sealed",
                "-i",
                &id,
                "--format",
                format,
                "a",
                "b",
            ],
            p.dir(),
            &[],
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        if format == "text" {
            assert!(
                stdout(&o).contains("data[\"tls.key\"]: unchanged (re-encrypted)"),
                "{}",
                stdout(&o)
            );
            continue;
        }
        let json: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let c = cluster(&json, "lab-f");
        assert_eq!(c["status"], "unchanged");
        let ca = object(c, "Secret", "lab-f-ca");
        assert_eq!(ca["status"], "reencrypted");
        for k in ca["secretKeys"].as_array().unwrap() {
            assert_eq!(k["status"], "reencrypted", "{k}");
        }
        assert!(c["risks"].as_array().unwrap().is_empty());
    }
}

/// Decrypt a sealed file of lab-f in `repo` (the test plays the key holder, to know what a
/// right guess is).
fn open_sealed(
    repo: &Path,
    identity: &str,
    file: &str,
) -> (
    capstan::secrets::sops::SopsFile,
    capstan::secrets::sops::Plain,
) {
    let path = repo.join("clusters/lab-f/secrets").join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let ids = capstan::secrets::parse_identities("id", &std::fs::read_to_string(identity).unwrap())
        .unwrap();
    let sealed = capstan::secrets::sops::SopsFile::parse(file, &text).unwrap();
    let plain = sealed.decrypt(file, &ids).unwrap();
    (sealed, plain)
}

/// `tree` sealed for the recipients and rule of `like` (with `keep`, the values that did not
/// change keep their ciphertext, as `secrets seal` does).
fn seal_like(
    like: &capstan::secrets::sops::SopsFile,
    name: &str,
    tree: &serde_json::Value,
    keep: Option<(
        &capstan::secrets::sops::SopsFile,
        &capstan::secrets::sops::Plain,
    )>,
) -> String {
    let recipients: Vec<age::x25519::Recipient> = like
        .recipients()
        .iter()
        .map(|r| r.parse().unwrap())
        .collect();
    let meta = like.metadata();
    capstan::secrets::sops::encrypt(
        name,
        tree,
        &recipients,
        meta.rule.clone(),
        meta.mac_only_encrypted,
        "2027-01-01T00:00:00Z",
        keep,
    )
    .unwrap()
}

/// What a pull request's author without the key does: seal a guess of the Talos bundle's
/// etcd encryption key (`secrets.secretboxencryptionsecret`) into `lab-f-talos.yaml` as
/// `sops` does, with the recipients only (a new data key: every value's ciphertext
/// changes). `right`: the guess is the sealed value.
fn seal_bundle_guess(repo: &Path, identity: &str, right: bool) {
    let (sealed, plain) = open_sealed(repo, identity, "lab-f-talos.yaml");
    let mut tree = plain.tree().clone();
    let bundle = B64
        .decode(tree["data"]["bundle"].as_str().unwrap())
        .unwrap();
    let bundle = String::from_utf8(bundle).unwrap();
    let field = "secretboxencryptionsecret: ";
    assert_eq!(bundle.matches(field).count(), 1, "one etcd encryption key");
    let at = bundle.find(field).unwrap() + field.len();
    let end = at + bundle[at..].find('\n').unwrap();
    let guess = if right {
        bundle[at..end].to_string()
    } else {
        B64.encode([7u8; 32])
    };
    assert_eq!(guess.len(), end - at, "a guess of the same shape");
    let guessed = format!("{}{guess}{}", &bundle[..at], &bundle[end..]);
    assert_eq!(guessed == bundle, right);
    tree["data"]["bundle"] = serde_json::Value::String(B64.encode(guessed.as_bytes()));
    let text = seal_like(&sealed, "lab-f-talos.yaml", &tree, None);
    std::fs::write(repo.join("clusters/lab-f/secrets/lab-f-talos.yaml"), text).unwrap();
}

/// What a pull request's author without the key does for the vSphere credentials: `capstan
/// secrets vsphere-identity` with the username it can guess and a password guess on stdin.
fn seal_password_guess(p: &Pair, right: bool) {
    let (_, plain) = open_sealed(&p.a(), &p.identity(), "lab-f-vsphere.yaml");
    let value = |k: &str| {
        let v = plain.tree()["data"][k].as_str().unwrap().to_string();
        String::from_utf8(B64.decode(v).unwrap()).unwrap()
    };
    let password = if right {
        value("password")
    } else {
        "not-the-password".to_string()
    };
    assert_eq!(password == value("password"), right);
    let o = assert_cmd::Command::cargo_bin("capstan")
        .unwrap()
        .args([
            "secrets",
            "vsphere-identity",
            "b/clusters/lab-f",
            "--username",
            &value("username"),
        ])
        .current_dir(p.dir())
        .write_stdin(format!("{password}\n"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// Every report a pull request's author can read (Markdown, text, JSON, each with its exit
/// code; with the identity CI holds, and without), from the files and from `--git`.
fn readable_reports(p: &Pair) -> Vec<(String, Option<i32>, String)> {
    let id = p.identity();
    let mut out = Vec::new();
    for format in ["markdown", "text", "json"] {
        for with in [true, false] {
            let mut args = vec!["diff", "--verbose", "--format", format];
            if with {
                args.extend(["-i", id.as_str()]);
            }
            args.extend(["a", "b"]);
            let o = run(&args, p.dir(), &[]);
            out.push((args.join(" "), o.status.code(), stdout(&o) + &stderr(&o)));
        }
    }
    // The same through git: side B committed over side A.
    let repo = p.dir().join("a");
    git(&["init", "-q", "-b", "main"], &repo);
    git(&["config", "user.email", "t@example.invalid"], &repo);
    git(&["config", "user.name", "t"], &repo);
    commit(&repo, "base");
    let b = p.b().join("clusters/lab-f/secrets");
    for f in ["lab-f-talos.yaml", "lab-f-vsphere.yaml"] {
        std::fs::copy(b.join(f), repo.join("clusters/lab-f/secrets").join(f)).unwrap();
    }
    commit(&repo, "guess");
    for format in ["markdown", "json"] {
        let args = [
            "diff",
            "--git",
            "HEAD~1..HEAD",
            "--format",
            format,
            "-i",
            id.as_str(),
        ];
        let o = run(&args, &repo, &[]);
        out.push((args.join(" "), o.status.code(), stdout(&o) + &stderr(&o)));
    }
    out
}

/// Issue 38: a pull request's author without the key re-seals a guess of a sealed value;
/// no report it can read, nor its exit code, tells a right guess from a wrong one.
#[test]
fn a_resealed_guess_reads_the_same_right_or_wrong() {
    for (what, seal) in [
        ("the Talos bundle's etcd encryption key", 0),
        ("the vSphere password", 1),
    ] {
        let reports: Vec<_> = [true, false]
            .into_iter()
            .map(|right| {
                let p = Pair::new();
                match seal {
                    0 => seal_bundle_guess(&p.b(), &p.identity(), right),
                    _ => seal_password_guess(&p, right),
                }
                readable_reports(&p)
            })
            .collect();
        for ((args, code, right), (_, code_wrong, wrong)) in reports[0].iter().zip(&reports[1]) {
            assert_eq!(
                code,
                &Some(1),
                "{what}: {args}: a re-seal is a difference\n{right}"
            );
            assert_eq!(code, code_wrong, "{what}: {args}: exit codes differ");
            assert!(
                right == wrong,
                "{what}: {args}: the report tells a right guess from a wrong one:\n--- right\n{right}\n--- wrong\n{wrong}"
            );
            assert!(right.contains("re-sealed"), "{what}: {args}: {right}");
            assert!(!right.contains("re-encrypted)"), "{what}: {args}: {right}");
        }
    }
}

/// `--compare-sealed`, a key holder's terminal: the plaintexts compared (a right guess is
/// re-encrypted, exit 0; a wrong one changed, with the bundle field and its risk); refused
/// with `--format markdown`, under `$CI` and without an identity.
#[test]
fn compare_sealed_tells_them_apart_and_never_writes_markdown() {
    let mut texts = Vec::new();
    for right in [true, false] {
        let p = Pair::new();
        let id = p.identity();
        seal_bundle_guess(&p.b(), &id, right);
        let needles = secret_needles(&[p.a(), p.b()], &id);
        // Text and JSON (Markdown is refused), each with the exit code, and no value shown.
        let mut out = Vec::new();
        for format in ["text", "json"] {
            let args = [
                "diff",
                "--compare-sealed",
                "-i",
                &id,
                "--format",
                format,
                "a",
                "b",
            ];
            let o = run(&args, p.dir(), &[]);
            assert_eq!(
                o.status.code(),
                Some(if right { 0 } else { 1 }),
                "{format}: {}",
                stderr(&o)
            );
            let all = stdout(&o) + &stderr(&o);
            for n in &needles {
                assert!(
                    !all.contains(n.as_str()),
                    "{format} output leaks a secret value: {n}"
                );
            }
            out.push(stdout(&o));
        }
        let json: serde_json::Value = serde_json::from_str(&out[1]).unwrap();
        assert_eq!(json["sealed"], "compared");
        let talos = object(cluster(&json, "lab-f"), "Secret", "lab-f-talos").clone();
        texts.push((out[0].clone(), json, talos));
        for (args, env, needle) in [
            (
                vec![
                    "diff",
                    "--compare-sealed",
                    "-i",
                    &id,
                    "--format",
                    "markdown",
                    "a",
                    "b",
                ],
                vec![],
                "--compare-sealed is refused with --format markdown",
            ),
            (
                vec!["diff", "--compare-sealed", "-i", &id, "a", "b"],
                vec![("CI", "true")],
                "--compare-sealed is refused where $CI is set",
            ),
            (
                vec!["diff", "--compare-sealed", "--git", "HEAD", "a"],
                vec![],
                "--compare-sealed decrypts the sealed values: give an identity",
            ),
        ] {
            let o = run(&args, p.dir(), &env);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stdout(&o));
            assert!(stdout(&o).is_empty(), "{args:?}: {}", stdout(&o));
            assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
        }
    }
    let (right, _, talos) = &texts[0];
    assert_eq!(talos["status"], "reencrypted", "{talos}");
    assert!(
        right.contains("data.bundle: unchanged (re-encrypted)"),
        "{right}"
    );
    let (_, wrong, talos) = &texts[1];
    assert_eq!(talos["status"], "changed", "{talos}");
    assert_eq!(
        talos["secretKeys"][0]["fields"][0],
        "secrets.secretboxencryptionsecret"
    );
    assert!(has_risk(
        cluster(wrong, "lab-f"),
        "high",
        "data.bundle secrets.secretboxencryptionsecret: the etcd encryption key changes"
    ));
}

/// Re-encrypt `secrets/lab-f-ca.yaml` of `repo` with new values for some keys (stable
/// ciphertext for the others, as `secrets seal` does).
fn reseal_ca(repo: &Path, identity: &str, values: &[(&str, Vec<u8>)]) {
    let path = repo.join("clusters/lab-f/secrets/lab-f-ca.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let ids = capstan::secrets::parse_identities("id", &std::fs::read_to_string(identity).unwrap())
        .unwrap();
    let file = capstan::secrets::sops::SopsFile::parse("ca", &text).unwrap();
    let plain = file.decrypt("ca", &ids).unwrap();
    let mut tree = plain.tree().clone();
    for (k, v) in values {
        tree["data"][*k] = serde_json::Value::String(B64.encode(v));
    }
    let out = seal_like(&file, "ca", &tree, Some((&file, &plain)));
    std::fs::write(&path, out).unwrap();
}

#[test]
fn secret_with_one_changed_key() {
    use capstan::secrets::pki::testkit::{Alg, TestKey};
    let p = Pair::new();
    let id = p.identity();
    let key = TestKey::new(Alg::P256, 7).pkcs8_pem();
    reseal_ca(&p.b(), &id, &[("tls.key", key.to_vec())]);
    let mut needles = secret_needles(&[p.a(), p.b()], &id);
    needles.push(B64.encode(&key[..]));
    // By default the changed key is re-sealed, like any value whose ciphertext changed,
    // with or without an identity; the other keeps its ciphertext.
    for args in [vec!["-i", id.as_str(), "a", "b"], vec!["a", "b"]] {
        let o = diff_all(&p, &args, 1, &[], &needles);
        let c = cluster(&o.json, "lab-f");
        let ca = object(c, "Secret", "lab-f-ca");
        assert_eq!(ca["status"], "changed");
        let keys = ca["secretKeys"].as_array().unwrap();
        assert_eq!(keys[0]["key"], "data[\"tls.crt\"]");
        assert_eq!(keys[0]["status"], "unchanged");
        assert_eq!(keys[1]["key"], "data[\"tls.key\"]");
        assert_eq!(keys[1]["status"], "re-sealed");
        assert!(
            has_risk(c, "high", "data[\"tls.key\"]: the cluster CA is re-sealed"),
            "{c}"
        );
        assert!(!has_risk(c, "medium", "the secret value changes"), "{c}");
    }
    // A key holder's terminal: the plaintext changed.
    let (text, json) = compare_sealed(&p, &["-i", &id, "a", "b"], 1, &needles);
    let c = cluster(&json, "lab-f");
    let ca = object(c, "Secret", "lab-f-ca");
    assert_eq!(ca["status"], "changed");
    let keys = ca["secretKeys"].as_array().unwrap();
    assert_eq!(keys[0]["status"], "unchanged");
    assert_eq!(keys[1]["status"], "changed");
    assert!(ca["fields"].as_array().unwrap().is_empty());
    assert!(has_risk(
        c,
        "medium",
        "data[\"tls.key\"]: the secret value changes"
    ));
    assert!(text.contains("data[\"tls.key\"]: changed\n"), "{text}");
    assert!(text.contains("data[\"tls.crt\"]: unchanged\n"));
}

/// `diff --compare-sealed ARGS` as text and JSON (Markdown is refused), each with exit
/// `code` and no needle in any output: the text and the JSON.
fn compare_sealed(
    p: &Pair,
    args: &[&str],
    code: i32,
    needles: &[String],
) -> (String, serde_json::Value) {
    let mut out = Vec::new();
    for format in ["text", "json"] {
        let mut full = vec!["diff", "--verbose", "--compare-sealed", "--format", format];
        full.extend_from_slice(args);
        let o = run(&full, p.dir(), &[]);
        assert_eq!(
            o.status.code(),
            Some(code),
            "{format}: {}{}",
            stdout(&o),
            stderr(&o)
        );
        assert_no_secret(format, &o, needles);
        out.push(stdout(&o));
    }
    let json: serde_json::Value = serde_json::from_str(&out[1]).unwrap();
    assert_eq!(json["sealed"], "compared");
    (out[0].clone(), json)
}

#[test]
fn rotated_ca_certificate_is_summarized() {
    use capstan::secrets::pki::testkit::{self, Alg, TestKey};
    let p = Pair::new();
    let id = p.identity();
    let key = TestKey::new(Alg::P256, 8);
    let crt = testkit::self_signed_ca(&key, "rotated-ca", 3650);
    reseal_ca(
        &p.b(),
        &id,
        &[
            ("tls.crt", crt.clone()),
            ("tls.key", key.pkcs8_pem().to_vec()),
        ],
    );
    let mut needles = secret_needles(&[p.a(), p.b()], &id);
    needles.push(B64.encode(&key.pkcs8_pem()[..]));
    let o = diff_all(&p, &["-i", &id, "a", "b"], 1, &[], &needles);
    let c = cluster(&o.json, "lab-f");
    let ca = object(c, "Secret", "lab-f-ca");
    // Re-sealed (its value not compared), yet its certificate, public, decoded and compared.
    let crt_key = &ca["secretKeys"][0];
    assert_eq!(crt_key["status"], "re-sealed");
    let cert = &crt_key["certificates"][0];
    assert_eq!(cert["after"]["subject"], "CN=rotated-ca");
    assert_eq!(cert["after"]["isCa"], true);
    let before = cert["before"]["sha256"].as_str().unwrap();
    assert!(before.starts_with("sha256:") && before != cert["after"]["sha256"]);
    assert!(has_risk(c, "high", "CA certificate rotated"));
    assert!(
        o.text
            .contains("after:  subject CN=rotated-ca, issuer CN=rotated-ca"),
        "{}",
        o.text
    );
    assert!(o.text.contains(&format!(
        "before: subject {}",
        cert["before"]["subject"].as_str().unwrap()
    )));
    assert!(o.markdown.contains("CN=rotated-ca"));
    // The same object in a plain field of another kind is decoded too.
    let cp = run(&["render", "b/clusters/lab-g"], p.dir(), &[]);
    let with_cert = stdout(&cp).replace(
        "  version: v1.34.1\n  replicas: 3\n",
        &format!(
            "  version: v1.34.1\n  replicas: 3\n  caBundle: {}\n",
            B64.encode(&crt)
        ),
    );
    std::fs::write(p.dir().join("g-a.yaml"), stdout(&cp)).unwrap();
    std::fs::write(p.dir().join("g-b.yaml"), with_cert).unwrap();
    let o = diff_all(&p, &["g-a.yaml", "g-b.yaml"], 1, &[], &needles);
    let tcp = object(cluster(&o.json, "lab-g"), "TalosControlPlane", "lab-g-cp");
    assert_eq!(tcp["fields"][0]["type"], "certificate");
    assert_eq!(
        tcp["fields"][0]["certificates"][0]["after"]["subject"],
        "CN=rotated-ca"
    );
}

#[test]
fn version_bump_with_skew() {
    let p = Pair::new();
    edit(&lab_g(&p), "kubernetes: v1.34.1", "kubernetes: v1.36.0");
    let needles = secret_needles(&[p.a()], &p.identity());
    let o = diff_all(&p, &["a", "b"], 1, &[], &needles);
    let c = cluster(&o.json, "lab-g");
    assert_eq!(
        object(c, "TalosControlPlane", "lab-g-cp")["fields"][0]["path"],
        "spec.version"
    );
    assert_eq!(
        object(c, "MachineDeployment", "lab-g-general")["fields"][0]["path"],
        "spec.template.spec.version"
    );
    assert!(has_risk(
        c,
        "high",
        "Kubernetes v1.34.1 → v1.36.0: skips 1 minor version(s)"
    ));
    // Outside the Talos support table (only reachable by editing rendered output).
    let out = stdout(&run(&["render", "a/clusters/lab-g"], p.dir(), &[]));
    std::fs::write(p.dir().join("g-a.yaml"), &out).unwrap();
    std::fs::write(
        p.dir().join("g-b.yaml"),
        out.replace(
            "  version: v1.34.1\n  replicas",
            "  version: v1.37.0\n  replicas",
        ),
    )
    .unwrap();
    let o = diff_all(&p, &["g-a.yaml", "g-b.yaml"], 1, &[], &needles);
    let c = cluster(&o.json, "lab-g");
    assert!(has_risk(
        c,
        "high",
        "Kubernetes v1.37.0 is not supported by Talos v1.13.2"
    ));
    assert!(has_risk(c, "high", "skips 2 minor version(s)"));
}

#[test]
fn deleted_objects_and_clusters() {
    let p = Pair::new();
    edit(
        &p.b().join("clusters/lab-f/cluster.yaml"),
        "  - name: ingress\n    replicas: 2\n    machine:\n      numCPUs: 4\n      memoryMiB: 8192\n      diskGiB: 60\n",
        "",
    );
    std::fs::remove_dir_all(p.b().join("clusters/lab-g")).unwrap();
    let needles = secret_needles(&[p.a()], &p.identity());
    let o = diff_all(&p, &["a", "b"], 1, &[], &needles);
    let f = cluster(&o.json, "lab-f");
    assert_eq!(
        object(f, "MachineDeployment", "lab-f-ingress")["status"],
        "removed"
    );
    assert_eq!(
        object(f, "VSphereMachineTemplate", "lab-f-ingress-")["status"],
        "removed"
    );
    assert_eq!(
        object(f, "TalosConfigTemplate", "lab-f-ingress-")["status"],
        "removed"
    );
    assert!(has_risk(
        f,
        "medium",
        "deleting it deletes its machines (none at replicas 0)"
    ));
    let g = cluster(&o.json, "lab-g");
    assert_eq!(g["status"], "removed");
    assert_eq!(object(g, "Cluster", "lab-g")["status"], "removed");
    assert!(has_risk(
        g,
        "high",
        "deleted: deleting a Cluster deletes every machine of the cluster"
    ));
    assert!(has_risk(
        g,
        "high",
        "deleted: deleting it deletes its 4 machine(s)"
    ));
    assert!(has_risk(g, "high", "the providers would generate a new CA"));
    assert!(o
        .text
        .contains("- MachineDeployment lab-f/lab-f-ingress (cluster.x-k8s.io): removed"));
}

#[test]
fn git_revisions() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    copy_tree(&example(), &repo);
    without_autoscaler(&repo);
    git(&["init", "-q", "-b", "main"], &repo);
    git(&["config", "user.name", "capstan tests"], &repo);
    git(&["config", "user.email", "tests@capstan.invalid"], &repo);
    git(&["config", "commit.gpgsign", "false"], &repo);
    git(&["add", "-A"], &repo);
    git(&["commit", "-q", "-m", "first"], &repo);
    edit(
        &repo.join("clusters/lab-g/cluster.yaml"),
        "replicas: 4",
        "replicas: 5",
    );
    git(&["commit", "-q", "-am", "second"], &repo);
    let o = run(
        &["diff", "--git", "HEAD~1..HEAD", "--format", "json"],
        &repo,
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(j["a"], "HEAD~1");
    let c = cluster(&j, "lab-g");
    assert!(has_risk(c, "low", "worker replicas 4 → 5"));
    assert_eq!(
        c["inputs"],
        serde_json::json!(["clusters/lab-g/cluster.yaml"])
    );
    // lab-f's inputs did not change: it is not rendered, only counted.
    assert_eq!(
        j["scope"],
        serde_json::json!({"clusters": 2, "rendered": 1, "skipped": 1})
    );
    assert!(j["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["name"] != "lab-f"));
    assert_eq!(git(&["worktree", "list"], &repo).lines().count(), 1);
    // A sub-path, a one-sided range, a range against the working tree.
    let o = run(&["diff", "--git", "HEAD~1..", "clusters/lab-f"], &repo, &[]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let o = run(&["diff", "--git", "HEAD"], &repo, &[]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    edit(
        &repo.join("clusters/lab-g/cluster.yaml"),
        "replicas: 5",
        "replicas: 6",
    );
    let o = run(&["diff", "--git", "HEAD", "--cluster", "lab-g"], &repo, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stdout(&o).contains("spec.replicas: 5 → 6"));
    let o = run(&["diff", "--git", "nope..HEAD"], &repo, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("`nope` is not a commit"),
        "{}",
        stderr(&o)
    );
    assert_eq!(git(&["worktree", "list"], &repo).lines().count(), 1);
    // Killed at any moment, a run leaves nothing in the repository: no worktree is
    // registered, the index and the working tree are as they were.
    git(&["commit", "-q", "-am", "third"], &repo);
    let status = git(&["status", "--porcelain"], &repo);
    let index = std::fs::read(repo.join(".git/index")).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    for ms in [0u64, 5, 10, 20, 40, 80, 160] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(["diff", "--git", "HEAD~2..HEAD"])
            .current_dir(&repo)
            .env("TMPDIR", scratch.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(ms));
        let _ = child.kill();
        child.wait().unwrap();
        assert_eq!(
            git(&["worktree", "list"], &repo).lines().count(),
            1,
            "killed at {ms} ms"
        );
        assert!(!repo.join(".git/worktrees").exists(), "killed at {ms} ms");
        assert_eq!(git(&["status", "--porcelain"], &repo), status);
        assert_eq!(std::fs::read(repo.join(".git/index")).unwrap(), index);
        // Nothing is checked out: no temporary tree either.
        assert_eq!(
            std::fs::read_dir(scratch.path()).unwrap().count(),
            0,
            "killed at {ms} ms"
        );
    }
}

#[test]
fn large_markdown_stays_under_the_comment_limit() {
    let tmp = tempfile::tempdir().unwrap();
    fleet(&tmp.path().join("a"), 200, 4);
    fleet(&tmp.path().join("b"), 200, 8);
    let o = run(&["diff", "--format", "markdown", "a", "b"], tmp.path(), &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let md = stdout(&o);
    assert!(md.chars().count() <= 65_536, "{}", md.chars().count());
    assert!(
        md.contains("Cut to stay under GitHub's 65536-character comment limit"),
        "{md}"
    );
    assert!(md.contains("200 of 200 cluster(s) differ"));
    for i in 1..=200 {
        assert!(
            md.contains(&format!("| c{i:03} | changed |")),
            "c{i:03} missing from the table"
        );
    }
    assert!(md.contains("<details>"));
    // Text and JSON are never cut.
    let t = run(&["diff", "a", "b"], tmp.path(), &[]);
    assert!(stdout(&t).len() > 65_536);
    assert!(stdout(&t).contains("cluster c200: changed"));
}

#[test]
fn golden_text_and_markdown() {
    let p = Pair::new();
    edit(&lab_g(&p), "numCPUs: 4", "numCPUs: 6");
    edit(&lab_g(&p), "replicas: 4", "replicas: 2");
    edit(&lab_g(&p), "kubernetes: v1.34.1", "kubernetes: v1.35.0");
    edit(
        &p.b().join("clusters/lab-f/cluster.yaml"),
        "  - name: ingress\n    replicas: 2\n    machine:\n      numCPUs: 4\n      memoryMiB: 8192\n      diskGiB: 60\n",
        "",
    );
    let needles = secret_needles(&[p.a()], &p.identity());
    let o = diff_all(&p, &["a", "b"], 1, &[], &needles);
    assert!(!o.text.contains('\x1b'));
    assert_golden("diff-review.txt", &o.text);
    assert_golden("diff-review.md", &o.markdown);
}

#[test]
fn migration_phase_change() {
    let p = Pair::new();
    edit(
        &p.b().join("clusters/lab-f/cluster.yaml"),
        "phase: prepare",
        "phase: complete",
    );
    // `complete` is only renderable once no kubeadm control-plane node is declared.
    edit(
        &p.b().join("clusters/lab-f/cluster.yaml"),
        "      controlPlaneNodes: [lab-f-master-1, lab-f-master-2, lab-f-master-3]\n      etcdMembers: [lab-f-master-1, lab-f-master-2, lab-f-master-3]\n",
        "",
    );
    let needles = secret_needles(&[p.a()], &p.identity());
    let o = diff_all(&p, &["a", "b"], 1, &[], &needles);
    let c = cluster(&o.json, "lab-f");
    assert!(has_risk(
        c,
        "high",
        "spec.migration.phase prepare → complete"
    ));
    assert!(has_risk(
        c,
        "medium",
        "control-plane replicas 0 → 3: adds etcd members"
    ));
    assert!(has_risk(
        c,
        "low",
        "worker replicas 0 → 6: creates 6 machine(s)"
    ));
    // A rendered directory carries no phase: no phase note against it.
    assert_eq!(
        run(&["render", "b", "-o", "out"], p.dir(), &[])
            .status
            .code(),
        Some(0)
    );
    let o = diff_all(&p, &["out", "b"], 0, &[], &needles);
    assert!(cluster(&o.json, "lab-f")["risks"]
        .as_array()
        .unwrap()
        .is_empty());
}

/// Issue 38: in phase `prepare` the control plane has 0 replicas, so a change of its machine
/// configuration rolls nothing (it said "the provider rolls the control-plane machines").
#[test]
fn a_control_plane_config_change_in_prepare_rolls_nothing() {
    let p = Pair::new();
    edit(
        &p.b().join("clusters/lab-f/cluster.yaml"),
        "timeServers: [ntp1.example.internal, ntp2.example.internal]",
        "timeServers: [ntp3.example.internal]",
    );
    let needles = secret_needles(&[p.a()], &p.identity());
    let o = diff_all(&p, &["a", "b"], 1, &[], &needles);
    let c = cluster(&o.json, "lab-f");
    assert!(
        !has_risk(c, "medium", "rolls the control-plane machines"),
        "{c}"
    );
    assert!(
        has_risk(
            c,
            "low",
            "no control-plane machine is rolled (replicas 0 → 0, phase `prepare`)"
        ),
        "{c}"
    );
}

/// D13: a revert of the phase commit (`workers` back to `control-plane`, the kubeadm etcd
/// members listed again as the revert restores them) renders every pool at 0: high risk,
/// naming the admission policy that refuses it, until cluster.yaml acknowledges it.
#[test]
fn phase_regression_is_high_risk() {
    let p = Pair::new();
    let lab_f = |side: PathBuf| side.join("clusters/lab-f/cluster.yaml");
    // a: phase workers (no kubeadm control plane left).
    edit(&lab_f(p.a()), "phase: prepare", "phase: workers");
    edit(
        &lab_f(p.a()),
        "      controlPlaneNodes: [lab-f-master-1, lab-f-master-2, lab-f-master-3]\n      etcdMembers: [lab-f-master-1, lab-f-master-2, lab-f-master-3]\n",
        "",
    );
    // b: the revert to control-plane.
    edit(
        &lab_f(p.b()),
        "phase: prepare",
        "phase: control-plane\n    acknowledge: [etcd-audit, control-plane-anti-affinity]",
    );
    let needles = secret_needles(&[p.a()], &p.identity());
    let o = diff_all(&p, &["a", "b"], 1, &[], &needles);
    let c = cluster(&o.json, "lab-f");
    assert!(
        has_risk(
            c,
            "high",
            "spec.migration.phase workers → control-plane goes backwards: phase `control-plane` renders every worker \
             pool at 0 replicas (lab-f-general, lab-f-ingress), so Cluster API would drain and delete every Talos worker"
        ) && has_risk(
            c,
            "high",
            "capstan's admission policy `lab-f.lab-f.keep-workers.capstan.dev` refuses the sync"
        ),
        "{}",
        o.text
    );
    assert!(
        has_risk(
            c,
            "high",
            "worker replicas 6 → 0: deletes every machine of the pool: its workloads are evicted with nowhere to go \
             in this pool; on a migrated cluster capstan's admission policy refuses it until \
             `spec.migration.acknowledge` lists `scale-workers-to-zero`"
        ),
        "{}",
        o.text
    );
    // Forward again: no regression note.
    let o = diff_all(&p, &["b", "a"], 1, &[], &needles);
    assert!(!o.text.contains("goes backwards"), "{}", o.text);
    // Acknowledged: the render marks the pools, and the notes say the policy lets it through.
    edit(
        &lab_f(p.b()),
        "acknowledge: [etcd-audit, control-plane-anti-affinity]",
        "acknowledge: [etcd-audit, control-plane-anti-affinity, scale-workers-to-zero]",
    );
    let o = diff_all(&p, &["a", "b"], 1, &[], &needles);
    let c = cluster(&o.json, "lab-f");
    assert!(
        has_risk(c, "high", "goes backwards")
            && has_risk(
                c,
                "high",
                "acknowledged (`spec.migration.acknowledge: [scale-workers-to-zero]`)"
            )
            && has_risk(
                c,
                "high",
                "worker replicas 2 → 0: deletes every machine of the pool"
            )
            && has_risk(
                c,
                "high",
                "acknowledged in cluster.yaml (`scale-workers-to-zero`)"
            )
            && has_risk(
                c,
                "high",
                "metadata.annotations[\"capstan.dev/scale-to-zero\"]: (absent) → acknowledged"
            ),
        "{}",
        o.text
    );
}

/// D10: a drain timeout set where the drains waited, or shortened, is flagged with what it
/// does to a PodDisruptionBudget; removed, the drains wait again.
#[test]
fn drain_timeout_changes_say_what_they_do_to_a_pdb() {
    let p = Pair::new();
    edit(
        &lab_g(&p),
        "  workers:\n",
        "  deletion:\n    nodeDrainTimeoutSeconds: 600\n  workers:\n",
    );
    let needles = secret_needles(&[p.a()], &p.identity());
    let o = diff_all(&p, &["a", "b"], 1, &[], &needles);
    let c = cluster(&o.json, "lab-g");
    for kind in ["MachineDeployment", "TalosControlPlane"] {
        assert!(
            c["risks"].as_array().unwrap().iter().any(|r| r["severity"] == "high"
                && r["object"].as_str().unwrap().starts_with(kind)
                && r["message"].as_str().unwrap().contains(
                    "nodeDrainTimeoutSeconds: (absent) → 600: sets a drain timeout of 600 s where the drain waited \
                     for every PodDisruptionBudget: once it has passed, Cluster API stops draining and deletes the \
                     machine with the pods a PodDisruptionBudget still protects"
                )),
            "{kind}: {}",
            o.text
        );
    }
    // Removed again: the drains wait (low).
    let o = diff_all(&p, &["b", "a"], 1, &[], &needles);
    assert!(
        has_risk(
            cluster(&o.json, "lab-g"),
            "low",
            "no drain timeout (was 600 s): drains wait for as long as a PodDisruptionBudget refuses"
        ),
        "{}",
        o.text
    );
    // Shortened (a: 1800 s): medium.
    edit(
        &p.a().join("clusters/lab-g/cluster.yaml"),
        "  workers:\n",
        "  deletion:\n    nodeDrainTimeoutSeconds: 1800\n  workers:\n",
    );
    let o = diff_all(&p, &["a", "b"], 1, &[], &needles);
    assert!(
        has_risk(
            cluster(&o.json, "lab-g"),
            "medium",
            "shortens the drain timeout from 1800 s to 600 s"
        ),
        "{}",
        o.text
    );
}

/// Replace the first character of the `mac:` ciphertext of `secrets/lab-f-ca.yaml` with
/// another base64 character: still well-formed, no longer the MAC of the values.
fn corrupt_mac(repo: &Path) {
    let path = repo.join("clusters/lab-f/secrets/lab-f-ca.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let at =
        text.find("  mac: \"ENC[AES256_GCM,data:").unwrap() + "  mac: \"ENC[AES256_GCM,data:".len();
    let c = &text[at..at + 1];
    let other = if c == "A" { "B" } else { "A" };
    std::fs::write(&path, format!("{}{other}{}", &text[..at], &text[at + 1..])).unwrap();
}

#[test]
fn a_corrupted_mac_is_never_unchanged() {
    let p = Pair::new();
    corrupt_mac(&p.b());
    let id = p.identity();
    let needles = secret_needles(&[p.a()], &id);
    // Without an identity: a MAC that moved while no value did cannot be verified.
    let o = diff_all(&p, &["a", "b"], 1, &[], &needles);
    let c = cluster(&o.json, "lab-f");
    assert_eq!(c["status"], "changed");
    let ca = object(c, "Secret", "lab-f-ca");
    assert_eq!(ca["status"], "changed", "{ca}");
    assert!(ca["broken"]
        .as_str()
        .unwrap()
        .contains("sops.mac changed while no encrypted value did"));
    assert!(
        has_risk(c, "high", "the sealed file cannot be opened or verified"),
        "{c}"
    );
    assert!(
        !o.text.contains("(re-encrypted)") && !o.text.contains("ca: re-encrypted"),
        "{}",
        o.text
    );
    assert!(!o.text.contains("only SOPS metadata changed"), "{}", o.text);
    // With one: the MAC is checked and fails.
    let o = diff_all(&p, &["-i", &id, "a", "b"], 1, &[], &needles);
    let c = cluster(&o.json, "lab-f");
    let ca = object(c, "Secret", "lab-f-ca");
    assert_eq!(ca["status"], "changed", "{ca}");
    assert!(
        ca["broken"]
            .as_str()
            .unwrap()
            .contains("sops.mac: cannot be decrypted"),
        "{ca}"
    );
    assert!(has_risk(c, "high", "sops.mac: cannot be decrypted"), "{c}");
    assert!(
        !o.text.contains("(re-encrypted)") && !o.text.contains("ca: re-encrypted"),
        "{}",
        o.text
    );
    // A rekey for one more recipient rewraps the data key and keeps the MAC.
    let p = Pair::new();
    let path = p.b().join("clusters/lab-f/secrets/lab-f-ca.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let file = capstan::secrets::sops::SopsFile::parse("f", &text).unwrap();
    let ids =
        capstan::secrets::parse_identities("id", &std::fs::read_to_string(&id).unwrap()).unwrap();
    let plain = file.decrypt("f", &ids).unwrap();
    let mut recipients: Vec<age::x25519::Recipient> = file
        .recipients()
        .iter()
        .map(|r| r.parse().unwrap())
        .collect();
    recipients.push(age::x25519::Identity::generate().to_public());
    let rekeyed = capstan::secrets::sops::rekey("f", &file, &plain, &recipients).unwrap();
    std::fs::write(&path, &rekeyed.text).unwrap();
    assert_ne!(rekeyed.text, text, "the rekey rewraps the data key");
    // A recipient is added (a change), the MAC stays: nothing is called broken.
    let o = diff_all(&p, &["a", "b"], 1, &[], &needles);
    let c = cluster(&o.json, "lab-f");
    let ca = object(c, "Secret", "lab-f-ca");
    assert!(ca.get("broken").is_none(), "{ca}");
    assert!(!has_risk(c, "high", ""), "{c}");
}

/// `diff --git HEAD~1..HEAD` in the three formats (unchanged clusters counted, not named),
/// each with the exit code `code`.
fn git_all(repo: &Path, code: i32) -> Outputs {
    let mut texts = Vec::new();
    for format in ["text", "markdown", "json"] {
        let o = run(
            &["diff", "--git", "HEAD~1..HEAD", "--format", format],
            repo,
            &[],
        );
        assert_eq!(
            o.status.code(),
            Some(code),
            "{format}: stdout:\n{}\nstderr:\n{}",
            stdout(&o),
            stderr(&o)
        );
        texts.push(stdout(&o));
    }
    Outputs {
        text: texts[0].clone(),
        markdown: texts[1].clone(),
        json: serde_json::from_str(&texts[2]).unwrap(),
    }
}

fn commit(repo: &Path, message: &str) {
    git(&["add", "-A"], repo);
    git(&["commit", "-q", "-m", message], repo);
}

#[test]
fn git_review_renders_only_the_clusters_whose_inputs_changed() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    copy_tree(&example(), &repo);
    git(&["init", "-q", "-b", "main"], &repo);
    git(&["config", "user.name", "capstan tests"], &repo);
    git(&["config", "user.email", "tests@capstan.invalid"], &repo);
    git(&["config", "commit.gpgsign", "false"], &repo);
    commit(&repo, "first");
    let names = |j: &serde_json::Value| -> Vec<String> {
        j["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };

    // One cluster's input: only it renders; the other is counted as skipped.
    edit(
        &repo.join("clusters/lab-f/cluster.yaml"),
        "numCPUs: 8",
        "numCPUs: 12",
    );
    commit(&repo, "one cluster");
    let o = git_all(&repo, 1);
    assert_eq!(
        o.json["scope"],
        serde_json::json!({"clusters": 2, "rendered": 1, "skipped": 1})
    );
    assert_eq!(names(&o.json), ["lab-f"]);
    assert!(o.text.contains("1 of 2 cluster(s) differ"), "{}", o.text);
    assert!(
        o.text
            .contains("rendered 1 of 2 cluster(s); 1 skipped: none of their inputs changed"),
        "{}",
        o.text
    );
    assert!(o
        .text
        .contains("inputs changed: clusters/lab-f/cluster.yaml"));
    assert!(o
        .markdown
        .contains("_rendered 1 of 2 cluster(s); 1 skipped"));
    assert!(o
        .markdown
        .contains("_inputs changed: clusters/lab-f/cluster.yaml_"));

    // A shared overlay: every cluster that uses it renders, with the overlay file named.
    edit(
        &repo.join("overlays/talos-vmware/overlay.yaml"),
        "disk: /dev/sda\n  workers:",
        "disk: /dev/sdb\n  workers:",
    );
    commit(&repo, "shared overlay");
    let o = git_all(&repo, 1);
    assert_eq!(o.json["scope"]["rendered"], 2, "{}", o.json);
    assert_eq!(names(&o.json), ["lab-f", "lab-g"]);
    for c in o.json["clusters"].as_array().unwrap() {
        assert_eq!(
            c["inputs"],
            serde_json::json!(["overlays/talos-vmware/overlay.yaml"])
        );
        assert_eq!(c["status"], "changed");
    }
    assert!(o
        .text
        .contains("inputs changed: overlays/talos-vmware/overlay.yaml"));
    assert!(o.markdown.contains("overlays/talos-vmware/overlay.yaml"));
    // Only the overlay changed, so each cluster's templates rendered once for both sides:
    // the same objects, fields and risks as a diff of the two revisions checked out.
    let sides = tempfile::tempdir().unwrap();
    for (rev, dir) in [("HEAD~1", "a"), ("HEAD", "b")] {
        let out = sides.path().join(dir);
        std::fs::create_dir_all(&out).unwrap();
        let archive = std::process::Command::new("git")
            .args(["archive", "--format=tar", rev])
            .current_dir(&repo)
            .output()
            .unwrap();
        assert!(archive.status.success());
        let mut tar = std::process::Command::new("tar")
            .args(["-x", "-C"])
            .arg(&out)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        tar.stdin
            .take()
            .unwrap()
            .write_all(&archive.stdout)
            .unwrap();
        assert!(tar.wait().unwrap().success());
    }
    let checked_out = run(&["diff", "a", "b", "--format", "json"], sides.path(), &[]);
    let checked_out: serde_json::Value = serde_json::from_slice(&checked_out.stdout).unwrap();
    let strip = |j: &serde_json::Value| -> Vec<serde_json::Value> {
        j["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| serde_json::json!([c["name"], c["status"], c["objects"], c["risks"]]))
            .collect()
    };
    assert_eq!(strip(&o.json), strip(&checked_out));

    // An overlay only lab-f uses: lab-g is skipped.
    std::fs::write(
        repo.join("overlays/vsphere-ipam/pool.yaml"),
        std::fs::read_to_string(repo.join("overlays/vsphere-ipam/pool.yaml")).unwrap()
            + "# reviewed\n",
    )
    .unwrap();
    commit(&repo, "lab-f's overlay");
    let o = git_all(&repo, 0);
    assert_eq!(o.json["scope"]["rendered"], 1, "{}", o.json);

    // An input change with no rendered change: said, with the input, and exit 0.
    std::fs::write(
        repo.join("clusters/lab-g/cluster.yaml"),
        std::fs::read_to_string(repo.join("clusters/lab-g/cluster.yaml")).unwrap()
            + "# a comment\n",
    )
    .unwrap();
    commit(&repo, "comment");
    let o = git_all(&repo, 0);
    assert!(o.text.contains("0 of 2 cluster(s) differ"), "{}", o.text);
    assert!(
        o.text.contains(
            "cluster lab-g: unchanged\n  inputs changed (clusters/lab-g/cluster.yaml), rendered objects unchanged"
        ),
        "{}",
        o.text
    );
    assert!(o
        .markdown
        .contains("inputs changed (clusters/lab-g/cluster.yaml), rendered objects unchanged"));
    assert_eq!(
        o.json["clusters"][0]["inputs"],
        serde_json::json!(["clusters/lab-g/cluster.yaml"])
    );

    // A change no cluster reads.
    std::fs::write(repo.join("overlays/autoscaler/README.md"), "changed\n").unwrap();
    commit(&repo, "docs");
    let o = git_all(&repo, 0);
    assert_eq!(
        o.json["scope"],
        serde_json::json!({"clusters": 2, "rendered": 0, "skipped": 2,
            "unused": ["overlays/autoscaler/README.md"]})
    );
    assert!(o
        .text
        .contains("changed, read by no cluster: overlays/autoscaler/README.md"));
    assert!(o.json["clusters"].as_array().unwrap().is_empty());

    // A renamed cluster directory: both paths render, the cluster is the same.
    git(&["mv", "clusters/lab-g", "clusters/lab-h"], &repo);
    commit(&repo, "rename");
    let o = git_all(&repo, 0);
    assert_eq!(o.json["scope"]["rendered"], 2, "{}", o.json);
    // Three cluster directories on either side, one cluster in two of them.
    assert!(o.text.contains("0 of 3 cluster(s) differ"), "{}", o.text);
    assert!(o.text.contains("clusters/lab-h/cluster.yaml"), "{}", o.text);

    // A deleted cluster: removed, with its high risk; exit 1.
    git(&["rm", "-r", "-q", "clusters/lab-h"], &repo);
    commit(&repo, "delete");
    let o = git_all(&repo, 1);
    assert_eq!(cluster(&o.json, "lab-g")["status"], "removed");
    assert!(has_risk(
        cluster(&o.json, "lab-g"),
        "high",
        "no longer rendered"
    ));
    assert!(o.text.contains("cluster lab-g: removed"));
    assert!(o.markdown.contains("| lab-g | removed |"));
}

#[test]
fn git_review_follows_links_and_paths_on_one_side_only() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    copy_tree(&example(), &repo);
    without_autoscaler(&repo);
    // lab-g's cluster.yaml is a link to a file outside its directory.
    std::fs::create_dir_all(repo.join("shared")).unwrap();
    std::fs::rename(
        repo.join("clusters/lab-g/cluster.yaml"),
        repo.join("shared/lab-g.yaml"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        "../../shared/lab-g.yaml",
        repo.join("clusters/lab-g/cluster.yaml"),
    )
    .unwrap();
    git(&["init", "-q", "-b", "main"], &repo);
    git(&["config", "user.name", "capstan tests"], &repo);
    git(&["config", "user.email", "tests@capstan.invalid"], &repo);
    git(&["config", "commit.gpgsign", "false"], &repo);
    commit(&repo, "first");
    // Only the link's target changes.
    edit(
        &repo.join("shared/lab-g.yaml"),
        "replicas: 4",
        "replicas: 5",
    );
    commit(&repo, "target");
    let o = git_all(&repo, 1);
    assert_eq!(o.json["scope"]["rendered"], 1, "{}", o.json);
    let c = cluster(&o.json, "lab-g");
    assert_eq!(
        c["inputs"],
        serde_json::json!(["clusters/lab-g/cluster.yaml", "shared/lab-g.yaml"])
    );
    assert!(has_risk(c, "low", "worker replicas 4 → 5"));
    // A repository path that exists on one side only: its clusters are added or removed.
    let o = run(
        &[
            "diff",
            "--git",
            "HEAD~1..HEAD",
            "--format",
            "json",
            "clusters/lab-g",
        ],
        &repo,
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    std::fs::create_dir_all(repo.join("more/clusters")).unwrap();
    copy_tree(
        &repo.join("clusters/lab-f"),
        &repo.join("more/clusters/lab-f"),
    );
    copy_tree(&repo.join("overlays"), &repo.join("more/overlays"));
    commit(&repo, "a new repository path");
    let o = run(
        &["diff", "--git", "HEAD~1..HEAD", "--format", "json", "more"],
        &repo,
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(cluster(&j, "lab-f")["status"], "added", "{j}");
}

/// The example repository (lab-g without the autoscaler) as a git repository, committed.
fn example_repo(tmp: &Path) -> PathBuf {
    let repo = tmp.join("repo");
    copy_tree(&example(), &repo);
    without_autoscaler(&repo);
    git(&["init", "-q", "-b", "main"], &repo);
    git(&["config", "user.name", "capstan tests"], &repo);
    git(&["config", "user.email", "tests@capstan.invalid"], &repo);
    git(&["config", "commit.gpgsign", "false"], &repo);
    commit(&repo, "first");
    repo
}

// See: #25. A second cluster with an existing name, added without touching the first,
// is refused as `capstan render` refuses it, in every mode.
#[test]
fn git_review_refuses_a_duplicate_name_on_the_newer_side() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = example_repo(tmp.path());
    copy_tree(&repo.join("clusters/lab-f"), &repo.join("clusters/lab-f2"));
    let render = run(&["render", "."], &repo, &[]);
    assert_eq!(render.status.code(), Some(2));
    assert!(
        stderr(&render).contains("cluster name `lab-f` is already used by"),
        "{}",
        stderr(&render)
    );
    // The working tree as the newer side.
    let o = run(&["diff", "--git", "HEAD"], &repo, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(
        stderr(&o)
            .contains("clusters/lab-f2/cluster.yaml: cluster name `lab-f` is already used by")
            && stderr(&o).contains("clusters/lab-f/cluster.yaml"),
        "{}",
        stderr(&o)
    );
    commit(&repo, "a second lab-f");
    for format in ["text", "markdown", "json"] {
        let o = run(
            &["diff", "--git", "HEAD~1..HEAD", "--format", format],
            &repo,
            &[],
        );
        assert_eq!(o.status.code(), Some(2), "{format}: {}", stdout(&o));
        assert!(
            stderr(&o).contains(
                "HEAD:clusters/lab-f2/cluster.yaml: cluster name `lab-f` is already used by HEAD:clusters/lab-f/cluster.yaml"
            ),
            "{}",
            stderr(&o)
        );
    }
    // On the older side only (the change that removes it): reviewed.
    git(&["rm", "-r", "-q", "clusters/lab-f2"], &repo);
    commit(&repo, "one lab-f again");
    let o = run(
        &["diff", "--git", "HEAD~1..HEAD", "--format", "json"],
        &repo,
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // lab-f is still there (its own directory did not change): compared with the copy that
    // went, not reported removed.
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(
        j["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["status"] != "removed"),
        "{j}"
    );
}

// See: #25. In working-tree mode, files git ignores are neither read nor changes.
#[test]
fn git_review_of_the_working_tree_skips_ignored_files() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = example_repo(tmp.path());
    std::fs::write(repo.join(".gitignore"), "build/\n*.tmp\n").unwrap();
    commit(&repo, "ignore build output");
    std::fs::create_dir_all(repo.join("build")).unwrap();
    std::fs::write(repo.join("build/out.yaml"), "kind: Output\n").unwrap();
    std::fs::write(repo.join("clusters/lab-f/scratch.tmp"), "x\n").unwrap();
    let o = run(&["diff", "--git", "HEAD", "--format", "json"], &repo, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        j["scope"],
        serde_json::json!({"clusters": 2, "rendered": 0, "skipped": 2}),
        "{j}"
    );
    // A file git does not ignore is still a change.
    std::fs::write(repo.join("notes.md"), "x\n").unwrap();
    let o = run(&["diff", "--git", "HEAD", "--format", "json"], &repo, &[]);
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(j["scope"]["unused"], serde_json::json!(["notes.md"]), "{j}");
}

// See: #25. A cluster or overlay directory that is a link is followed inside the
// repository, from git as from disk, and refused by both when it leads outside.
#[test]
fn git_and_disk_follow_directory_links_alike() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = example_repo(tmp.path());
    let plain = run(&["render", "."], &repo, &[]);
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
    std::fs::create_dir_all(repo.join("fleet")).unwrap();
    std::fs::create_dir_all(repo.join("shared")).unwrap();
    std::fs::rename(repo.join("clusters/lab-f"), repo.join("fleet/lab-f")).unwrap();
    std::os::unix::fs::symlink("../fleet/lab-f", repo.join("clusters/lab-f")).unwrap();
    std::fs::rename(
        repo.join("overlays/talos-vmware"),
        repo.join("shared/talos-vmware"),
    )
    .unwrap();
    std::os::unix::fs::symlink("../shared/talos-vmware", repo.join("overlays/talos-vmware"))
        .unwrap();
    let linked = run(&["render", "."], &repo, &[]);
    assert_eq!(linked.status.code(), Some(0), "{}", stderr(&linked));
    assert_eq!(stdout(&linked), stdout(&plain));
    commit(&repo, "links");
    // git reads the linked layout as the disk loader does: nothing rendered differs.
    let o = git_all(&repo, 0);
    assert_eq!(o.json["scope"]["rendered"], 2, "{}", o.json);
    let o = run(&["diff", "--git", "HEAD", "--format", "json"], &repo, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // A change behind a link is the change of the clusters that read through it.
    edit(
        &repo.join("shared/talos-vmware/overlay.yaml"),
        "disk: /dev/sda\n  workers:",
        "disk: /dev/sdb\n  workers:",
    );
    commit(&repo, "shared overlay behind a link");
    let o = git_all(&repo, 1);
    assert_eq!(o.json["scope"]["rendered"], 2, "{}", o.json);
    assert!(o.json["scope"].get("unused").is_none(), "{}", o.json);
    for name in ["lab-f", "lab-g"] {
        let inputs = cluster(&o.json, name)["inputs"].to_string();
        assert!(
            inputs.contains("shared/talos-vmware/overlay.yaml"),
            "{name}: {inputs}"
        );
    }
    // Outside the repository: refused by both, with the same words.
    let outside = tmp.path().join("outside-ipam");
    std::fs::rename(repo.join("overlays/vsphere-ipam"), &outside).unwrap();
    std::os::unix::fs::symlink("../../outside-ipam", repo.join("overlays/vsphere-ipam")).unwrap();
    let render = run(&["render", "."], &repo, &[]);
    assert_eq!(render.status.code(), Some(2));
    commit(&repo, "an overlay outside");
    let review = run(&["diff", "--git", "HEAD~1..HEAD"], &repo, &[]);
    assert_eq!(review.status.code(), Some(2), "{}", stdout(&review));
    for o in [&render, &review] {
        assert!(
            stderr(o).contains("spec.overlays[0]")
                && stderr(o).contains("resolves outside the repository root"),
            "{}",
            stderr(o)
        );
    }
}

// See: #25. A cluster whose own inputs changed is rendered from each side's inputs, also
// when its directory is the repository itself or a link (the shared templates render is
// decided by what was read, not by path prefixes).
#[test]
fn git_review_never_shares_a_render_across_changed_cluster_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    // The cluster at the repository root.
    let repo = tmp.path().join("root");
    copy_tree(&example().join("clusters/lab-f"), &repo);
    copy_tree(&example().join("overlays"), &repo.join("overlays"));
    git(&["init", "-q", "-b", "main"], &repo);
    git(&["config", "user.name", "capstan tests"], &repo);
    git(&["config", "user.email", "tests@capstan.invalid"], &repo);
    git(&["config", "commit.gpgsign", "false"], &repo);
    let file = repo.join("cluster.yaml");
    let plain = run(&["render", "."], &repo, &[]);
    assert!(plain.status.success(), "{}", stderr(&plain));
    commit(&repo, "first");
    edit(&file, "kubernetes: v1.30.4", "kubernetes: v1.30.5");
    commit(&repo, "a version bump");
    let o = run(
        &["diff", "--git", "HEAD~1..HEAD", "--format", "json"],
        &repo,
        &[],
    );
    let j: serde_json::Value =
        serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    assert_eq!(j["clusters"][0]["status"], "changed", "{j}");
    // A linked cluster directory whose target's cluster.yaml changes.
    let repo = example_repo(&tmp.path().join("linked"));
    std::fs::create_dir_all(repo.join("shared")).unwrap();
    std::fs::rename(repo.join("clusters/lab-f"), repo.join("shared/lab-f")).unwrap();
    std::os::unix::fs::symlink("../shared/lab-f", repo.join("clusters/lab-f")).unwrap();
    commit(&repo, "linked");
    edit(
        &repo.join("shared/lab-f/cluster.yaml"),
        "kubernetes: v1.30.4",
        "kubernetes: v1.30.5",
    );
    commit(&repo, "a version bump behind the link");
    let o = run(
        &["diff", "--git", "HEAD~1..HEAD", "--format", "json"],
        &repo,
        &[],
    );
    let j: serde_json::Value =
        serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    assert_eq!(cluster(&j, "lab-f")["status"], "changed", "{j}");
}
