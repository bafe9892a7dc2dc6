//! `capstan backup push|list|pull` on a local store (`file://`): the round trip byte for
//! byte, no plaintext in the store, an upload that stopped never listed, and every refusal
//! (tampered, truncated, wrong identity, a non-empty OUT) writing nothing. `.ci/run` runs
//! the same against a real S3-compatible server.

use crate::util::*;
use std::path::Path;

const IDENTITY: &str = "examples/gitops/testdata/age-identity.txt";
const SECRET: &str = "c3VwZXItc2VjcmV0LWNhLWtleQ==";

fn recipient() -> String {
    let text = std::fs::read_to_string(root().join(IDENTITY)).unwrap();
    text.lines()
        .find_map(|l| l.split_whitespace().find(|w| w.starts_with("age1")))
        .unwrap()
        .to_string()
}

/// A directory as `clusterctl move --to-directory` writes it.
fn moved(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for (name, body) in [
        (
            "Cluster_lab-f_lab-f.yaml",
            "{\"kind\":\"Cluster\",\"metadata\":{\"name\":\"lab-f\"}}".to_string(),
        ),
        (
            "Machine_lab-f_lab-f-cp-x7k2p.yaml",
            "{\"kind\":\"Machine\"}".to_string(),
        ),
        (
            "VSphereMachine_lab-f_lab-f-cp-x7k2p.yaml",
            "{\"kind\":\"VSphereMachine\"}".to_string(),
        ),
        (
            "Secret_lab-f_lab-f-ca.yaml",
            format!("{{\"kind\":\"Secret\",\"data\":{{\"tls.key\":\"{SECRET}\"}}}}"),
        ),
    ] {
        std::fs::write(dir.join(name), body).unwrap();
    }
}

fn run(args: &[&str], cwd: &Path) -> std::process::Output {
    capstan(args, cwd)
}

fn identity() -> String {
    root().join(IDENTITY).display().to_string()
}

/// A recipients file with the example's recipient and an offline DR recipient, the custody
/// policy `backup check` applies (D16); returns its path.
fn custody(t: &Path) -> String {
    let dr = write_identity(&t.join("dr-identity.txt"));
    let p = t.join("custody-recipients.txt");
    std::fs::write(&p, format!("{}\n# capstan: offline\n{dr}\n", recipient())).unwrap();
    p.display().to_string()
}

#[test]
fn push_list_pull_round_trip_and_refusals() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    moved(&t.join("move"));
    let url = format!("file://{}/store", t.display());
    let o = run(&["backup", "push", "move", &url, "-R", &custody(t)], t);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let id = stdout(&o).trim().to_string();
    assert_eq!(id.len(), 25, "{id}");

    // No plaintext byte of any file is in the store.
    // The index's object manifest names kinds and a Secret's keys, never a value.
    for entry in std::fs::read_dir(t.join("store")).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let index = path.extension().is_some_and(|x| x == "json");
        let needles: &[&str] = if index {
            &[SECRET]
        } else {
            &[SECRET, "tls.key", "\"kind\""]
        };
        for needle in needles {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
                "{needle} stored in plaintext"
            );
        }
    }

    let o = run(&["backup", "list", &url], t);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let l = stdout(&o);
    assert!(l.starts_with(&id), "{l}");
    assert!(
        l.contains("4 objects (Cluster 1, Machine 1, Secret 1, VSphereMachine 1)"),
        "{l}"
    );
    assert!(l.contains("clusters: lab-f/lab-f"), "{l}");

    // Pulled byte for byte, files 0600.
    let o = run(&["backup", "pull", &url, "out", "-i", &identity()], t);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for entry in std::fs::read_dir(t.join("move")).unwrap() {
        let p = entry.unwrap().path();
        let back = t.join("out").join(p.file_name().unwrap());
        assert_eq!(std::fs::read(&p).unwrap(), std::fs::read(&back).unwrap());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&back).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    // By id too; OUT must be empty or absent.
    let o = run(
        &[
            "backup",
            "pull",
            &format!("{url}/{id}"),
            "out2",
            "-i",
            &identity(),
        ],
        t,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(&["backup", "pull", &url, "out", "-i", &identity()], t);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not empty"), "{}", stderr(&o));

    // A wrong identity, then a tampered and a truncated object: exit 2, nothing written.
    let other = t.join("other.txt");
    std::fs::write(
        &other,
        "AGE-SECRET-KEY-1GQ9778VQXMMJVE8SK7J6VT8UJ4HDQAJUVSFCWCM02D8GEWQ72PVQ2Y5J33\n",
    )
    .unwrap();
    let o = run(
        &[
            "backup",
            "pull",
            &url,
            "w",
            "-i",
            &other.display().to_string(),
        ],
        t,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no identity matches"), "{}", stderr(&o));
    assert!(!t.join("w").exists());
    let object = t.join("store").join(format!("{id}.age"));
    let good = std::fs::read(&object).unwrap();
    let mut bad = good.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x01;
    std::fs::write(&object, &bad).unwrap();
    let o = run(&["backup", "pull", &url, "w", "-i", &identity()], t);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("tampered"), "{}", stderr(&o));
    assert!(!t.join("w").exists());
    std::fs::write(&object, &good[..good.len() - 10]).unwrap();
    let o = run(&["backup", "list", &url], t);
    assert!(stderr(&o).contains("its index says"), "{}", stderr(&o));
    let o = run(
        &[
            "backup",
            "pull",
            &format!("{url}/{id}"),
            "w",
            "-i",
            &identity(),
        ],
        t,
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!t.join("w").exists());
    std::fs::write(&object, &good).unwrap();

    // An upload that stopped after the object and before its index is never a backup.
    std::fs::write(t.join("store/20991231T235959Z-00000000.age"), b"partial").unwrap();
    let o = run(&["backup", "list", &url], t);
    assert!(stdout(&o).starts_with(&id), "{}", stdout(&o));
    assert!(
        stderr(&o)
            .contains("20991231T235959Z-00000000.age: no index (an upload that did not finish)"),
        "{}",
        stderr(&o)
    );
    let o = run(&["backup", "pull", &url, "w2", "-i", &identity()], t);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // Errors: no recipients, not a move directory, an unknown scheme.
    let o = run(&["backup", "push", "move", &url], t);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--recipient"), "{}", stderr(&o));
    std::fs::create_dir_all(t.join("empty")).unwrap();
    let o = run(&["backup", "push", "empty", &url, "-R", &custody(t)], t);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no `clusterctl move` objects"),
        "{}",
        stderr(&o)
    );
    let o = run(&["backup", "list", "ftp://x"], t);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("expected `s3://BUCKET/PREFIX`"),
        "{}",
        stderr(&o)
    );
}

/// The management-cluster Secrets of the example repository as secrets mode `decrypt`
/// applies them: `capstan render --decrypt` (the move label is the render's own).
fn example_secrets() -> Vec<serde_json::Value> {
    let o = capstan(
        &["render", "examples/gitops", "--decrypt", "-i", &identity()],
        &root(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    capstan::yaml::parse_stream(&stdout(&o))
        .unwrap()
        .into_iter()
        .filter(|d| d["kind"] == "Secret" && d["metadata"]["namespace"] != "kube-system")
        .collect()
}

/// A `clusterctl move` directory that holds what the example repository needs: lab-f
/// (phase prepare: no Talos machine yet) and lab-g (3 control-plane machines and one
/// worker, the autoscaler's minimum), each Machine with its VSphereMachine.
fn moved_example(dir: &Path, machines_of_lab_g: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let put =
        |name: String, v: serde_json::Value| std::fs::write(dir.join(name), v.to_string()).unwrap();
    for s in example_secrets() {
        let (ns, name) = (
            s["metadata"]["namespace"].as_str().unwrap().to_string(),
            s["metadata"]["name"].as_str().unwrap().to_string(),
        );
        put(format!("Secret_{ns}_{name}.yaml"), s);
    }
    for c in ["lab-f", "lab-g"] {
        put(
            format!("Cluster_{c}_{c}.yaml"),
            serde_json::json!({"kind": "Cluster", "metadata": {"namespace": c, "name": c}}),
        );
        put(
            format!("TalosControlPlane_{c}_{c}-cp.yaml"),
            serde_json::json!({"kind": "TalosControlPlane", "metadata": {"namespace": c, "name": format!("{c}-cp")}}),
        );
    }
    for i in 0..machines_of_lab_g {
        put(
            format!("Machine_lab-g_m{i}.yaml"),
            serde_json::json!({"kind": "Machine", "metadata": {"namespace": "lab-g", "name": format!("m{i}"),
                "labels": {"cluster.x-k8s.io/cluster-name": "lab-g"}},
                "spec": {"infrastructureRef": {"kind": "VSphereMachine", "name": format!("v{i}")}}}),
        );
        put(
            format!("VSphereMachine_lab-g_v{i}.yaml"),
            serde_json::json!({"kind": "VSphereMachine", "metadata": {"namespace": "lab-g", "name": format!("v{i}")}}),
        );
    }
}

#[test]
fn check_ties_the_newest_backup_to_the_repository() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let url = format!("file://{}/store", t.display());
    let example = example().display().to_string();
    moved_example(&t.join("short"), 3);
    let o = run(&["backup", "push", "short", &url, "-R", &custody(t)], t);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(&["backup", "check", &example, &url, "-i", &identity()], t);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("ok       lab-f"), "{out}");
    assert!(
        out.contains("missing  lab-g: Machines: 3 in the backup, the rendered replicas ask for 4"),
        "{out}"
    );
    // A newer, complete backup: exit 0; then too old for --max-age.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    moved_example(&t.join("full"), 4);
    let o = run(&["backup", "push", "full", &url, "-R", &custody(t)], t);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(
        &[
            "backup",
            "check",
            &example,
            &url,
            "-i",
            &identity(),
            "--json",
        ],
        t,
    );
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(j["stale"], false);
    assert!(j["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["missing"].as_array().unwrap().is_empty()));
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let o = run(
        &[
            "backup",
            "check",
            &example,
            &url,
            "-i",
            &identity(),
            "--max-age",
            "1s",
        ],
        t,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("older than --max-age 1s"),
        "{}",
        stdout(&o)
    );
    let o = run(
        &[
            "backup",
            "check",
            &example,
            &url,
            "-i",
            &identity(),
            "--max-age",
            "soon",
        ],
        t,
    );
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn restore_plan_names_the_newest_backup_or_the_path_without_one() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let url = format!("file://{}/store", t.display());
    let example = example().display().to_string();
    std::fs::create_dir_all(t.join("store")).unwrap();
    let o = run(&["restore", "plan", &example, "--backup", &url], t);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("## No backup under"), "{}", stdout(&o));
    moved_example(&t.join("m"), 4);
    let o = run(&["backup", "push", "m", &url, "-R", &custody(t)], t);
    let id = stdout(&o).trim().to_string();
    let o = run(&["restore", "plan", &example, "--backup", &url], t);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let md = stdout(&o);
    assert!(md.contains(&format!("From backup `{id}`")), "{md}");
    // lab-f takes node addresses from an IPAM pool: the provider is installed too.
    assert!(md.contains("--ipam in-cluster:v1.0.3"), "{md}");
    for c in ["lab-f", "lab-g"] {
        assert!(
            md.contains(&format!("kubectl -n {c} patch taloscontrolplanes")),
            "{md}"
        );
    }
    let o = run(&["restore", "plan", &example, "--backup", "s3:///x"], t);
    assert_eq!(o.status.code(), Some(2));
}

/// A pull killed half-way leaves its decrypted files in the staging directory beside OUT
/// (never in OUT); the next pull removes them before it writes anything.
#[test]
#[ignore = "slow: a 48 MiB backup pushed, then pulled and killed (about 40 s on 2 cores)"]
fn a_killed_pull_leaves_no_decrypted_files_after_the_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    moved(&t.join("move"));
    // 48 files of 1 MiB: the pull takes long enough to be caught half-way.
    let chunk: String = (0..(1 << 20) / 64).map(|i| format!("{i:063}\n")).collect();
    for i in 0..48 {
        std::fs::write(
            t.join("move")
                .join(format!("ConfigMap_lab-f_blob-{i:02}.yaml")),
            &chunk,
        )
        .unwrap();
    }
    let url = format!("file://{}/store", t.display());
    let o = run(&["backup", "push", "move", &url, "-R", &custody(t)], t);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let staged = |t: &Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(t)
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(".out.capstan-new-")
            })
            .map(|e| e.path())
            .collect()
    };
    let bin = assert_cmd::cargo::cargo_bin("capstan");
    let mut killed = None;
    for _ in 0..20 {
        let mut child = std::process::Command::new(&bin)
            .args(["backup", "pull", &url, "out", "-i", &identity()])
            .current_dir(t)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Wait for a decrypted file in the staging directory, then SIGKILL.
        let start = std::time::Instant::now();
        let mut caught = false;
        while start.elapsed() < std::time::Duration::from_secs(20) {
            if staged(t)
                .iter()
                .any(|d| std::fs::read_dir(d).is_ok_and(|mut r| r.next().is_some()))
            {
                caught = child.try_wait().unwrap().is_none();
                break;
            }
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        if caught && !t.join("out").exists() {
            killed = Some(());
            break;
        }
        let _ = std::fs::remove_dir_all(t.join("out"));
    }
    assert!(killed.is_some(), "never caught a pull half-way");
    let left = staged(t);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(std::fs::read_dir(&left[0]).unwrap().next().is_some());
    assert!(!t.join("out").exists(), "OUT appears only once complete");
    // The next run removes the killed one's staging directory, and completes.
    let o = run(&["backup", "pull", &url, "out", "-i", &identity()], t);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(staged(t), Vec::<std::path::PathBuf>::new());
    assert_eq!(std::fs::read_dir(t.join("out")).unwrap().count(), 52);
}

/// D4 and D16: the dump built by `clusterctl move`'s own rules
/// (`capstan::rehearse::clusterctl::saves_secret`: owners in the graph, purpose suffixes,
/// the move label; cluster-api v1.10.10 `objectgraph.go`) from the live Secrets of the
/// example repository, then `backup check` without any identity. The render of main before
/// the label (the same Secrets without it) loses `<cluster>-talos`, and in secrets mode
/// `operator` `<cluster>-ca` too (owned by its SopsSecret, which is not in the graph);
/// check fails naming them. With the label the same rules save them and check passes in
/// mode `decrypt`; in mode `operator` the SopsSecret owner still keeps them out.
#[test]
fn keyless_check_fails_without_the_move_label_and_passes_with_it() {
    use capstan::rehearse::clusterctl::{saves_secret, MOVE_LABEL};
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let example = example().display().to_string();
    // The Cluster API kinds the move discovers (provider CRDs carry the clusterctl label).
    let in_graph = |kind: &str| {
        [
            "Cluster",
            "TalosControlPlane",
            "Machine",
            "VSphereCluster",
            "TalosConfig",
        ]
        .contains(&kind)
    };
    let dump = |dir: &str, labelled: bool, operator: bool| {
        let d = t.join(dir);
        moved_example(&d, 4);
        for entry in std::fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("Secret_")
            {
                std::fs::remove_file(p).unwrap();
            }
        }
        for mut s in example_secrets() {
            if !labelled {
                s["metadata"]["labels"]
                    .as_object_mut()
                    .unwrap()
                    .remove(MOVE_LABEL);
            }
            if operator {
                // The sops-secrets-operator owns the Secret it creates from a SopsSecret.
                let name = s["metadata"]["name"].clone();
                s["metadata"]["ownerReferences"] = serde_json::json!([{
                    "apiVersion": "isindir.github.com/v1alpha3", "kind": "SopsSecret",
                    "name": name, "controller": true}]);
            }
            let ns = s["metadata"]["namespace"].as_str().unwrap().to_string();
            let name = s["metadata"]["name"].as_str().unwrap().to_string();
            if saves_secret(&s, &[ns.as_str()], &in_graph) {
                std::fs::write(d.join(format!("Secret_{ns}_{name}.yaml")), s.to_string()).unwrap();
            }
        }
        d
    };
    let check = |dir: &Path| {
        let url = format!(
            "file://{}/store-{}",
            t.display(),
            dir.display().to_string().len()
        );
        let store = t.join(format!("store-{}", dir.display().to_string().len()));
        let _ = std::fs::remove_dir_all(&store);
        let o = run(
            &[
                "backup",
                "push",
                &dir.display().to_string(),
                &url,
                "-R",
                &custody(t),
            ],
            t,
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let o = capstan_plain(&["backup", "check", &example, &url], t, &[]);
        (url, o)
    };
    // Today's main in mode decrypt: the Talos bundles are not saved.
    let (_, o) = check(&dump("main-decrypt", false, false));
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("objects from the public index, not decrypted"),
        "{out}"
    );
    for c in ["lab-f", "lab-g"] {
        assert!(
            out.contains(&format!("Secret {c}/{c}-talos (the Talos secrets bundle")),
            "{out}"
        );
        assert!(!out.contains(&format!("Secret {c}/{c}-ca (")), "{out}");
    }
    // Mode operator: the CA is lost too.
    let (_, o) = check(&dump("main-operator", false, true));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("Secret lab-f/lab-f-ca (the Kubernetes CA"),
        "{}",
        stdout(&o)
    );
    // Mode operator with the label: still lost. The Secrets the operator creates are owned
    // by their SopsSecret, outside the move's graph, and `getMoveSequence` never takes an
    // object with an owner outside it, label or not (cluster-api v1.10.10 `mover.go:509-554`;
    // `rehearse::clusterctl::move_graph`). Open for issue 39 item 1: the label alone does
    // not save them in this mode.
    let (_, o) = check(&dump("label-operator", true, true));
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    for c in ["lab-f", "lab-g"] {
        for s in ["talos (the Talos secrets bundle", "ca (the Kubernetes CA"] {
            assert!(
                stdout(&o).contains(&format!("Secret {c}/{c}-{s}")),
                "{}",
                stdout(&o)
            );
        }
    }
    // With the label, in mode decrypt: every cluster ok, exit 0, no identity anywhere.
    {
        let (url, o) = check(&dump("label-decrypt", true, false));
        assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
        assert!(stdout(&o).contains("ok       lab-f") && stdout(&o).contains("ok       lab-g"));
        // With the identity the payload is decrypted and the manifest verified.
        let o = run(&["backup", "check", &example, &url, "-i", &identity()], t);
        assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
        assert!(stdout(&o).contains("verified against the encrypted payload"));
    }
    // Another PKI than git's in the backup (lab-g's CA as lab-f's): named with both
    // fingerprints.
    let d = dump("swapped", true, false);
    let g: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(d.join("Secret_lab-g_lab-g-ca.yaml")).unwrap(),
    )
    .unwrap();
    let mut f: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(d.join("Secret_lab-f_lab-f-ca.yaml")).unwrap(),
    )
    .unwrap();
    f["data"]["tls.crt"] = g["data"]["tls.crt"].clone();
    std::fs::write(d.join("Secret_lab-f_lab-f-ca.yaml"), f.to_string()).unwrap();
    let (url, o) = check(&d);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("but spec.provenance records sha256:932dfdf44a914fa6ad405e06cebc7388a0ce96519f7aa2855838db8d96cd8400"),
        "{}",
        stdout(&o)
    );
    // A keyless check trusts the index; with the identity an edited index is refused.
    let store = Path::new(url.strip_prefix("file://").unwrap()).to_path_buf();
    let json = std::fs::read_dir(&store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .unwrap();
    let mut index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for e in index["objects"].as_array_mut().unwrap() {
        if e["name"] == "lab-f-ca" {
            e["secret"]["caFingerprint"] =
                "sha256:932dfdf44a914fa6ad405e06cebc7388a0ce96519f7aa2855838db8d96cd8400".into();
        }
    }
    std::fs::write(&json, index.to_string()).unwrap();
    let o = capstan_plain(&["backup", "check", &example, &url], t, &[]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "the keyless check trusts the index"
    );
    let o = run(&["backup", "check", &example, &url, "-i", &identity()], t);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(
        stderr(&o)
            .contains("the public index's object manifest differs from the encrypted payload"),
        "{}",
        stderr(&o)
    );
    // An index from before the manifest: keyless check says it needs the identity.
    index.as_object_mut().unwrap().remove("objects");
    std::fs::write(&json, index.to_string()).unwrap();
    let o = capstan_plain(&["backup", "check", &example, &url], t, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("predates the object manifest") && stderr(&o).contains("-i FILE"),
        "{}",
        stderr(&o)
    );
    let o = run(&["backup", "check", &example, &url, "-i", &identity()], t);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

/// D8: `restore check` names an orphan VM, a VSphereVM whose VM is gone and an address a
/// node holds that no IPAddress claims (exit 1), and exits 0 once they agree.
#[test]
fn restore_check_names_orphans_missing_vms_and_unclaimed_addresses() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let d = t.join("restore");
    std::fs::create_dir_all(&d).unwrap();
    let w = |n: &str, s: &str| std::fs::write(d.join(n), s).unwrap();
    w("VSphereVM_lab-f_lab-f-cp-b4n9q.yaml", "kind: VSphereVM\nmetadata: {namespace: lab-f, name: lab-f-cp-b4n9q}\nspec: {biosUUID: 4211aaaa-0000-0000-0000-000000000001}\n");
    w("Machine_lab-f_lab-f-cp-b4n9q.yaml", "kind: Machine\nmetadata: {namespace: lab-f, name: lab-f-cp-b4n9q, labels: {cluster.x-k8s.io/control-plane: ''}}\n");
    w("VSphereVM_lab-f_lab-f-w-z9z9z.yaml", "kind: VSphereVM\nmetadata: {namespace: lab-f, name: lab-f-w-z9z9z}\nspec: {biosUUID: 4211aaaa-0000-0000-0000-000000000002}\n");
    w("IPAddress_lab-f_lab-f-cp-b4n9q-0.yaml", "kind: IPAddress\nmetadata: {namespace: lab-f, name: lab-f-cp-b4n9q-0}\nspec: {address: 10.0.0.11}\n");
    let vm = |n: &str, u: &str, ip: &str| {
        format!(
            r#"{{"name":"{n}","config":{{"uuid":"{u}"}},"runtime":{{"powerState":"poweredOn"}},"guest":{{"ipAddress":"{ip}"}}}}"#
        )
    };
    let cp = vm(
        "lab-f-cp-b4n9q",
        "4211AAAA-0000-0000-0000-000000000001",
        "10.0.0.11",
    );
    let stale = format!(
        r#"{{"virtualMachines":[{cp},{}]}}"#,
        vm(
            "lab-f-cp-new12\\u001b[2J",
            "4211aaaa-0000-0000-0000-000000000009",
            "10.0.0.12"
        )
    );
    std::fs::write(t.join("vms.json"), stale).unwrap();
    std::fs::write(t.join("nodes.json"), r#"{"items":[{"metadata":{"name":"lab-f-cp-b4n9q"},"status":{"addresses":[{"type":"InternalIP","address":"10.0.0.11"}]}},{"metadata":{"name":"lab-f-cp-new12"},"status":{"addresses":[{"type":"InternalIP","address":"10.0.0.12"}]}}]}"#).unwrap();
    let args = [
        "restore",
        "check",
        "restore",
        "--vsphere-inventory",
        "vms.json",
        "--nodes",
        "nodes.json",
    ];
    let o = run(&args, t);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{}", stderr(&o));
    assert_golden("restore-check-stale.txt", &out);
    assert_terminal_safe("restore check", &out);
    for s in [
        "missing-vm         lab-f/lab-f-w-z9z9z",
        "orphan-vm          lab-f-cp-new12",
        "unclaimed-address  10.0.0.12",
        "govc vm.power -off -force -vm.uuid '4211aaaa-0000-0000-0000-000000000009'",
    ] {
        assert!(out.contains(s), "{s}\n{out}");
    }
    assert_eq!(stderr(&o), "");
    let mut json = args.to_vec();
    json.extend(["--format", "json"]);
    let o = run(&json, t);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("\"kind\": \"orphan-vm\""),
        "{}",
        stdout(&o)
    );
    // Clean: both VMs found, the orphan gone, every node address claimed.
    let clean = format!(
        r#"{{"virtualMachines":[{cp},{}]}}"#,
        vm("lab-f-w-z9z9z", "4211aaaa-0000-0000-0000-000000000002", "")
    );
    std::fs::write(t.join("vms.json"), clean).unwrap();
    std::fs::write(t.join("nodes.json"), r#"{"items":[]}"#).unwrap();
    let o = run(&args, t);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert_eq!(
        stdout(&o),
        "2 VSphereVM(s) matched, 0 mismatch(es): clean, the providers may reconcile\n"
    );
    std::fs::write(t.join("nodes.json"), "not json").unwrap();
    assert_eq!(run(&args, t).status.code(), Some(2));
}

/// D16: one recipient is warned about; two, one marked offline, are accepted quietly.
#[test]
fn backup_push_warns_on_the_recipient_policy() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let url = format!("file://{}/store", t.display());
    std::fs::create_dir_all(t.join("store")).unwrap();
    moved(&t.join("move"));
    let o = run(&["backup", "push", "move", &url, "-r", &recipient()], t);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("warning: the backup is encrypted to 1 distinct recipient(s)"),
        "{err}"
    );
    assert!(
        err.contains("warning: no recipient is marked offline"),
        "{err}"
    );
    let offline = age::x25519::Identity::generate().to_public().to_string();
    std::fs::write(
        t.join("recipients.txt"),
        format!(
            "# operator\n{}\n# capstan: offline (safe 2)\n{offline}\n",
            recipient()
        ),
    )
    .unwrap();
    let o = run(&["backup", "push", "move", &url, "-R", "recipients.txt"], t);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
}

/// The kinds the README's `kubectl get` command lists for `capstan backup dump`.
const LIVE_KINDS: [&str; 17] = [
    "Cluster",
    "MachineDeployment",
    "MachineSet",
    "Machine",
    "MachineHealthCheck",
    "TalosControlPlane",
    "TalosConfig",
    "TalosConfigTemplate",
    "VSphereCluster",
    "VSphereMachine",
    "VSphereMachineTemplate",
    "VSphereVM",
    "IPAddressClaim",
    "IPAddress",
    "InClusterIPPool",
    "Secret",
    "ConfigMap",
];

/// What `kubectl get -n NS <LIVE_KINDS> -o json` lists of the example repository on a
/// management cluster: the render (`--decrypt`, as secrets mode `decrypt` applies it) with
/// the uids, resourceVersions, owner references and status the API server and controllers
/// add, and what the controllers create. lab-f stands in the migration's window: phase
/// prepare's render, the Cluster not `controlPlaneReady`, and (with `cp_machines`) three
/// control-plane Machines without a nodeRef, as phase control-plane creates them, each with
/// its VSphereMachine, VSphereVM, TalosConfig and, from the control plane's IPAM pool, an
/// IPAddressClaim and IPAddress. lab-g (complete) runs 3 + 1 Machines with their nodes.
/// `clusterctl move --to-directory` refuses both namespaces' lab-f state.
fn live_lists(cp_machines: usize) -> Vec<(String, serde_json::Value)> {
    use serde_json::{json, Value};
    let o = capstan(
        &["render", "examples/gitops", "--decrypt", "-i", &identity()],
        &root(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let uid = |kind: &str, ns: &str, name: &str| format!("uid-{kind}-{ns}-{name}");
    let owner = |kind: &str, ns: &str, name: &str, api: &str| json!({"apiVersion": api, "kind": kind, "name": name, "uid": uid(kind, ns, name), "controller": true});
    let capi = "cluster.x-k8s.io/v1beta1";
    let mut out = Vec::new();
    for ns in ["lab-f", "lab-g"] {
        let mut items: Vec<Value> = capstan::yaml::parse_stream(&stdout(&o))
            .unwrap()
            .into_iter()
            .filter(|d| {
                d["metadata"]["namespace"] == ns
                    && LIVE_KINDS.contains(&d["kind"].as_str().unwrap_or(""))
            })
            .collect();
        let mut add = |kind: &str, api: &str, name: &str, owners: Vec<Value>, rest: Value| {
            let mut v = json!({"apiVersion": api, "kind": kind,
                "metadata": {"namespace": ns, "name": name, "labels": {"cluster.x-k8s.io/cluster-name": ns}}});
            if !owners.is_empty() {
                v["metadata"]["ownerReferences"] = Value::Array(owners);
            }
            for (k, x) in rest.as_object().unwrap() {
                if k == "labels" {
                    v["metadata"]["labels"] = x.clone();
                } else {
                    v[k] = x.clone();
                }
            }
            items.push(v);
        };
        let tcp = owner(
            "TalosControlPlane",
            ns,
            &format!("{ns}-cp"),
            "controlplane.cluster.x-k8s.io/v1alpha3",
        );
        add(
            "Secret",
            "v1",
            &format!("{ns}-kubeconfig"),
            vec![tcp.clone()],
            json!({"type": "cluster.x-k8s.io/secret", "data": {"value": "a3ViZWNvbmZpZw=="}}),
        );
        add(
            "Secret",
            "v1",
            "unrelated-token",
            vec![],
            json!({"data": {"token": "dG9rZW4="}}),
        );
        add(
            "ConfigMap",
            "v1",
            "kube-root-ca.crt",
            vec![],
            json!({"data": {"ca.crt": "x"}}),
        );
        let (machines, pool): (Vec<(String, bool)>, Option<String>) = if ns == "lab-f" {
            (
                (0..cp_machines)
                    .map(|i| (format!("lab-f-cp-{i}"), true))
                    .collect(),
                Some("lab-f-cp-addresses".into()),
            )
        } else {
            let mut m: Vec<(String, bool)> =
                (0..3).map(|i| (format!("lab-g-cp-{i}"), true)).collect();
            m.push(("lab-g-general-0".into(), false));
            (m, None)
        };
        if ns == "lab-g" {
            let md = owner("MachineDeployment", ns, "lab-g-general", capi);
            add(
                "MachineSet",
                capi,
                "lab-g-general-ms",
                vec![md],
                json!({"spec": {"replicas": 1}}),
            );
        }
        for (m, cp) in &machines {
            let machine_owner = if *cp {
                tcp.clone()
            } else {
                owner("MachineSet", ns, "lab-g-general-ms", capi)
            };
            let mut labels = json!({"cluster.x-k8s.io/cluster-name": ns});
            if *cp {
                labels["cluster.x-k8s.io/control-plane"] = "".into();
            }
            let status = if ns == "lab-g" {
                json!({"nodeRef": {"kind": "Node", "name": m}})
            } else {
                json!({"phase": "Provisioning"})
            };
            add(
                "Machine",
                capi,
                m,
                vec![machine_owner],
                json!({"spec": {"clusterName": ns, "infrastructureRef": {"kind": "VSphereMachine", "name": m}},
                    "status": status, "labels": labels}),
            );
            let by_machine = owner("Machine", ns, m, capi);
            add(
                "VSphereMachine",
                "infrastructure.cluster.x-k8s.io/v1beta1",
                m,
                vec![by_machine.clone()],
                json!({}),
            );
            add(
                "TalosConfig",
                "bootstrap.cluster.x-k8s.io/v1alpha3",
                m,
                vec![by_machine],
                json!({}),
            );
            let vm = owner(
                "VSphereMachine",
                ns,
                m,
                "infrastructure.cluster.x-k8s.io/v1beta1",
            );
            add(
                "VSphereVM",
                "infrastructure.cluster.x-k8s.io/v1beta1",
                m,
                vec![vm],
                json!({"spec": {"biosUUID": format!("4211aaaa-{m}")}}),
            );
            if let Some(pool) = &pool {
                let claim = format!("{m}-0-0");
                let by_vm = owner(
                    "VSphereVM",
                    ns,
                    m,
                    "infrastructure.cluster.x-k8s.io/v1beta1",
                );
                add(
                    "IPAddressClaim",
                    "ipam.cluster.x-k8s.io/v1beta1",
                    &claim,
                    vec![by_vm],
                    json!({}),
                );
                let mut p = owner(
                    "InClusterIPPool",
                    ns,
                    pool,
                    "ipam.cluster.x-k8s.io/v1alpha2",
                );
                p["controller"] = false.into();
                add(
                    "IPAddress",
                    "ipam.cluster.x-k8s.io/v1beta1",
                    &claim,
                    vec![
                        owner(
                            "IPAddressClaim",
                            ns,
                            &claim,
                            "ipam.cluster.x-k8s.io/v1beta1",
                        ),
                        p,
                    ],
                    json!({"spec": {"address": "10.0.0.11"}}),
                );
            }
        }
        let cluster_owned = [
            "VSphereCluster",
            "TalosControlPlane",
            "MachineDeployment",
            "VSphereMachineTemplate",
            "TalosConfigTemplate",
            "MachineHealthCheck",
        ];
        for v in &mut items {
            let kind = v["kind"].as_str().unwrap().to_string();
            let name = v["metadata"]["name"].as_str().unwrap().to_string();
            v["metadata"]["uid"] = uid(&kind, ns, &name).into();
            v["metadata"]["resourceVersion"] = "4711".into();
            if cluster_owned.contains(&kind.as_str()) {
                v["metadata"]["ownerReferences"] = json!([owner("Cluster", ns, ns, capi)]);
            }
            if kind == "Cluster" {
                v["status"] =
                    json!({"infrastructureReady": true, "controlPlaneReady": ns == "lab-g"});
            }
        }
        out.push((
            ns.to_string(),
            json!({"apiVersion": "v1", "kind": "List", "items": items}),
        ));
    }
    out
}

/// `clusterctl move --from-directory`'s reading of a directory (cluster-api v1.10.10
/// `mover.go:156-185`, `objectgraph.go:213-246`): every file one object, keyed by uid, each
/// owner reference resolving to an object of the directory, every Cluster paused; and the
/// objects it creates (`getMoveNodes` and the move sequence,
/// `capstan::rehearse::clusterctl::move_graph`): all but capstan's record.
fn from_directory(dir: &Path) -> Vec<serde_json::Value> {
    use std::os::unix::fs::PermissionsExt;
    let mut objects = Vec::new();
    let mut uids = std::collections::BTreeSet::new();
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    for n in &names {
        let p = dir.join(n);
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600,
            "{n}"
        );
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap())
            .unwrap_or_else(|e| panic!("{n}: not one JSON object: {e}"));
        let (kind, ns, name) = (
            v["kind"].as_str().unwrap(),
            v["metadata"]["namespace"].as_str().unwrap_or(""),
            v["metadata"]["name"].as_str().unwrap(),
        );
        assert!(v["apiVersion"].is_string(), "{n}");
        assert_eq!(*n, format!("{kind}_{ns}_{name}.yaml"));
        let uid = v["metadata"]["uid"]
            .as_str()
            .unwrap_or_else(|| panic!("{n}: no uid"));
        assert!(uids.insert(uid.to_string()), "{n}: uid {uid} twice");
        if kind == "Cluster" {
            assert_eq!(
                v["spec"]["paused"], true,
                "{n}: the Cluster is saved paused"
            );
        }
        objects.push(v);
    }
    for v in &objects {
        for r in v["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert!(
                uids.contains(r["uid"].as_str().unwrap()),
                "{}: owner {r} not in the directory",
                v["metadata"]["name"]
            );
        }
    }
    let g = capstan::rehearse::clusterctl::move_graph(&objects);
    let left: Vec<String> = g
        .left_out
        .iter()
        .map(|(i, _)| {
            objects[*i]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(
        left.iter().all(|n| n == "capstan-backup-dump"),
        "--from-directory would not create {left:?}"
    );
    objects
}

/// D6: in the migration's window (lab-f: phase prepare's render, the Cluster not
/// `controlPlaneReady`, control-plane Machines without a nodeRef) `clusterctl move
/// --to-directory` refuses; `capstan backup dump` writes the directory from the live
/// objects as clusterctl would, `--from-directory` (modelled) takes every file, and the
/// keyless `backup check` passes. Dropping the Talos bundle's label, or an owner from the
/// kubectl command, or a Cluster left paused by a killed move, fails the check.
#[test]
fn backup_dump_in_phases_clusterctl_refuses_restores_and_checks() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let example = example().display().to_string();
    let write_lists = |lists: &[(String, serde_json::Value)], tag: &str| -> Vec<String> {
        lists
            .iter()
            .map(|(ns, v)| {
                let f = format!("live-{tag}-{ns}.json");
                std::fs::write(t.join(&f), v.to_string()).unwrap();
                f
            })
            .collect()
    };
    let dump_and_check = |lists: &[(String, serde_json::Value)], tag: &str| {
        let files = write_lists(lists, tag);
        let to = format!("dump-{tag}");
        let mut args = vec!["backup", "dump"];
        args.extend(files.iter().map(String::as_str));
        args.extend(["--to", &to]);
        let d = run(&args, t);
        assert_eq!(d.status.code(), Some(0), "{}", stderr(&d));
        let url = format!("file://{}/store-{tag}", t.display());
        let o = run(&["backup", "push", &to, &url, "-R", &custody(t)], t);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let c = capstan_plain(&["backup", "check", &example, &url], t, &[]);
        (t.join(&to), stderr(&d), c)
    };
    let live = live_lists(3);
    let (dir, err, c) = dump_and_check(&live, "window");
    assert_eq!(c.status.code(), Some(0), "{}{}", stdout(&c), stderr(&c));
    assert!(stdout(&c).contains("ok       lab-f") && stdout(&c).contains("ok       lab-g"));
    assert!(
        err.contains("2 Cluster(s) (lab-f/lab-f, lab-g/lab-g)"),
        "{err}"
    );
    assert!(
        !err.contains("left out:") && !err.contains("warning"),
        "{err}"
    );
    let objects = from_directory(&dir);
    let has = |kind: &str, name: &str| {
        objects
            .iter()
            .any(|o| o["kind"] == kind && o["metadata"]["name"] == name)
    };
    for (kind, name) in [
        ("Secret", "lab-f-talos"),
        ("Secret", "lab-f-ca"),
        ("Secret", "lab-f-vsphere"),
        ("Secret", "lab-f-kubeconfig"),
        ("TalosControlPlane", "lab-f-cp"),
        ("Machine", "lab-f-cp-2"),
        ("VSphereVM", "lab-f-cp-2"),
        ("TalosConfig", "lab-f-cp-2"),
        ("IPAddress", "lab-f-cp-2-0-0"),
        ("InClusterIPPool", "lab-f-cp-addresses"),
        ("InClusterIPPool", "node-ips"),
        ("MachineSet", "lab-g-general-ms"),
        ("Secret", "lab-g-talos"),
    ] {
        assert!(has(kind, name), "{kind} {name} not in the dump");
    }
    // As clusterctl: what no Cluster links is left out; status and uids are kept.
    assert!(!has("Secret", "unrelated-token") && !has("ConfigMap", "kube-root-ca.crt"));
    let m = objects
        .iter()
        .find(|o| o["kind"] == "Machine" && o["metadata"]["name"] == "lab-g-cp-0")
        .unwrap();
    assert_eq!(m["status"]["nodeRef"]["name"], "lab-g-cp-0");
    assert_eq!(m["metadata"]["resourceVersion"], "4711");
    // The live Clusters were not paused: the record says so, and the dump alone paused them.
    let record: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join("ConfigMap_lab-f_capstan-backup-dump.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(record["data"]["pausedClusters"], "");
    // The same input, the same bytes.
    let again = t.join("again");
    let files = write_lists(&live, "window");
    let mut args = vec!["backup", "dump"];
    args.extend(files.iter().map(String::as_str));
    let again_s = again.display().to_string();
    args.extend(["--to", &again_s]);
    assert_eq!(run(&args, t).status.code(), Some(0));
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        assert_eq!(
            std::fs::read(&p).unwrap(),
            std::fs::read(again.join(p.file_name().unwrap())).unwrap()
        );
    }
    // DIR must be empty or absent.
    assert_eq!(run(&args, t).status.code(), Some(2));
    // --dry-run: the same selection said, nothing written; a DIR that is not empty refused
    // as without it.
    let mut dry = args.clone();
    dry.push("--dry-run");
    assert_eq!(run(&dry, t).status.code(), Some(2));
    let fresh = t.join("dry").display().to_string();
    let n = dry.len();
    dry[n - 2] = &fresh;
    let o = run(&dry, t);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!t.join("dry").exists(), "--dry-run wrote the directory");
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        said.contains(&format!(
            "{} objects of 2 Cluster(s) (lab-f/lab-f, lab-g/lab-g) would be written to {fresh}",
            std::fs::read_dir(&dir).unwrap().count()
        )) && said.contains("nothing written (--dry-run)"),
        "{said}"
    );
    // From a pipe, the namespaces' Lists one after the other: the same files.
    let piped = assert_cmd::Command::cargo_bin("capstan")
        .unwrap()
        .args(["backup", "dump", "-", "--to", "piped"])
        .current_dir(t)
        .write_stdin(format!("{}\n{}\n", live[0].1, live[1].1))
        .output()
        .unwrap();
    assert_eq!(piped.status.code(), Some(0), "{}", stderr(&piped));
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        assert_eq!(
            std::fs::read(&p).unwrap(),
            std::fs::read(t.join("piped").join(p.file_name().unwrap())).unwrap()
        );
    }

    // The Talos bundle without the move label (the render before it): left out, check fails.
    let mut unlabelled = live.clone();
    for i in unlabelled[0].1["items"].as_array_mut().unwrap() {
        if i["metadata"]["name"] == "lab-f-talos" {
            i["metadata"]["labels"]
                .as_object_mut()
                .unwrap()
                .remove(capstan::rehearse::clusterctl::MOVE_LABEL);
        }
    }
    let (dir, _, c) = dump_and_check(&unlabelled, "unlabelled");
    assert!(!dir.join("Secret_lab-f_lab-f-talos.yaml").exists());
    assert_eq!(c.status.code(), Some(1), "{}", stdout(&c));
    assert!(
        stdout(&c).contains("Secret lab-f/lab-f-talos (the Talos secrets bundle"),
        "{}",
        stdout(&c)
    );
    // An owner missing from the kubectl command (no vspheremachines): what it owns is left
    // out, named, and the check finds the Machines' infrastructure missing.
    let mut no_owner = live.clone();
    for (_, l) in &mut no_owner {
        l["items"]
            .as_array_mut()
            .unwrap()
            .retain(|i| i["kind"] != "VSphereMachine");
    }
    let (dir, err, c) = dump_and_check(&no_owner, "no-owner");
    assert!(
        err.contains("left out: VSphereVM lab-f/lab-f-cp-0: its owner VSphereMachine lab-f-cp-0"),
        "{err}"
    );
    assert!(!dir.join("VSphereVM_lab-f_lab-f-cp-0.yaml").exists());
    assert!(!dir.join("IPAddress_lab-f_lab-f-cp-0-0-0.yaml").exists());
    from_directory(&dir);
    assert_eq!(c.status.code(), Some(1));
    assert!(
        stdout(&c)
            .contains("Machine lab-g/lab-g-cp-0's infrastructure: VSphereMachine lab-g/lab-g-cp-0"),
        "{}",
        stdout(&c)
    );
    // A Cluster a killed `clusterctl move` left paused: warned, recorded, check fails.
    let mut paused = live.clone();
    for i in paused[1].1["items"].as_array_mut().unwrap() {
        if i["kind"] == "Cluster" {
            i["spec"]["paused"] = true.into();
        }
    }
    let (dir, err, c) = dump_and_check(&paused, "paused");
    assert!(
        err.contains("warning: Cluster lab-g/lab-g is paused"),
        "{err}"
    );
    from_directory(&dir);
    assert_eq!(c.status.code(), Some(1));
    let out = stdout(&c);
    assert!(out.contains("ok       lab-f"), "{out}");
    assert!(
        out.contains("missing  lab-g: Cluster lab-g/lab-g was paused (spec.paused: true) on the management cluster"),
        "{out}"
    );
    // Input errors name the file and the field: exit 2.
    std::fs::write(t.join("bad.json"), r#"{"kind":"List","items":[{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x","namespace":"lab-f"}}]}"#).unwrap();
    let o = run(&["backup", "dump", "bad.json", "--to", "bad"], t);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("bad.json: items[0]: metadata.uid"),
        "{}",
        stderr(&o)
    );
    assert!(!t.join("bad").exists());
}

/// The live lists of [`live_lists`] as secrets mode `operator` leaves them: every Secret a
/// restore needs (move-labelled) created by sops-secrets-operator, its SopsSecret the
/// controller (`newKubeSecretFromTemplate`, [A35] of `src/rehearse/assumptions.md`).
fn operator_lists() -> Vec<(String, serde_json::Value)> {
    let mut live = live_lists(3);
    for (_, l) in &mut live {
        for i in l["items"].as_array_mut().unwrap() {
            let labelled = i["metadata"]["labels"]
                .get(capstan::rehearse::clusterctl::MOVE_LABEL)
                .is_some();
            if i["kind"] == "Secret" && labelled {
                let name = i["metadata"]["name"].as_str().unwrap().to_string();
                i["metadata"]["ownerReferences"] = serde_json::json!([{
                    "apiVersion": "isindir.github.com/v1alpha3", "kind": "SopsSecret",
                    "name": name, "uid": format!("ss-{name}"), "controller": true,
                    "blockOwnerDeletion": true}]);
            }
        }
    }
    live
}

/// Secrets mode `operator` (D4): `clusterctl move` never saves a Secret its SopsSecret
/// owns, so a clusterctl backup of a complete cluster fails `backup check` naming the Talos
/// bundle and the CA, and saying what to do. `capstan backup dump` saves them without that
/// owner, annotated `sopssecret/managed: "true"`; `--from-directory` (modelled) creates
/// them, the check passes, and when Argo CD brings the SopsSecrets back the operator
/// (modelled, `rehearse::sops_operator`) adopts each one, which it refuses without the
/// annotation.
#[test]
fn operator_mode_backups_hold_the_secrets_clusterctl_never_saves() {
    use capstan::rehearse::sops_operator::{reconcile, Outcome};
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let example = example().display().to_string();
    let live = operator_lists();
    // clusterctl's rule over lab-g (complete; clusterctl refuses lab-f's window).
    let objects: Vec<serde_json::Value> = live[1].1["items"].as_array().unwrap().clone();
    let g = capstan::rehearse::clusterctl::move_graph(&objects);
    let by_clusterctl = t.join("clusterctl");
    std::fs::create_dir(&by_clusterctl).unwrap();
    for &i in &g.saved {
        let o = &objects[i];
        let f = format!(
            "{}_{}_{}.yaml",
            o["kind"].as_str().unwrap(),
            o["metadata"]["namespace"].as_str().unwrap(),
            o["metadata"]["name"].as_str().unwrap()
        );
        std::fs::write(by_clusterctl.join(f), o.to_string()).unwrap();
    }
    let left: Vec<&str> = g
        .left_out
        .iter()
        .map(|(i, _)| objects[*i]["metadata"]["name"].as_str().unwrap())
        .collect();
    assert!(
        left.contains(&"lab-g-talos") && left.contains(&"lab-g-ca"),
        "{left:?}"
    );
    let url = format!("file://{}/store-clusterctl", t.display());
    let o = run(
        &["backup", "push", "clusterctl", &url, "-R", &custody(t)],
        t,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let c = capstan_plain(&["backup", "check", &example, &url], t, &[]);
    assert_eq!(c.status.code(), Some(1), "{}", stdout(&c));
    let out = stdout(&c);
    for s in [
        "Secret lab-g/lab-g-talos (the Talos secrets bundle",
        "Secret lab-g/lab-g-ca (the Kubernetes CA; `clusterctl move` saves it by its name when nothing owns it, and never when its SopsSecret owns it (secrets mode operator): back up with `capstan backup dump`",
    ] {
        assert!(out.contains(s), "{s} not in {out}");
    }

    // capstan's dump saves them without the SopsSecret, annotated.
    let mut args = vec!["backup".to_string(), "dump".to_string()];
    for (ns, v) in &live {
        let f = format!("live-{ns}.json");
        std::fs::write(t.join(&f), v.to_string()).unwrap();
        args.push(f);
    }
    args.extend(["--to".into(), "dump".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let d = run(&args, t);
    assert_eq!(d.status.code(), Some(0), "{}", stderr(&d));
    let err = stderr(&d);
    for s in [
        "lab-f/lab-f-ca",
        "lab-f/lab-f-talos",
        "lab-f/lab-f-vsphere",
        "lab-g/lab-g-ca",
        "lab-g/lab-g-talos",
    ] {
        assert!(
            err.contains(&format!("saved without its SopsSecret owner: Secret {s} ")),
            "{s}: {err}"
        );
    }
    assert!(!err.contains("left out:"), "{err}");
    let restored = from_directory(&t.join("dump"));
    let url = format!("file://{}/store-dump", t.display());
    let o = run(&["backup", "push", "dump", &url, "-R", &custody(t)], t);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let c = capstan_plain(&["backup", "check", &example, &url], t, &[]);
    assert_eq!(c.status.code(), Some(0), "{}{}", stdout(&c), stderr(&c));

    // After the restore, Argo CD applies the SopsSecrets (new uids) and the operator
    // reconciles each against the Secret `--from-directory` created.
    let mut adopted = 0;
    for s in restored.iter().filter(|o| {
        o["kind"] == "Secret"
            && o["metadata"]["labels"]
                .get(capstan::rehearse::clusterctl::MOVE_LABEL)
                .is_some()
    }) {
        let name = s["metadata"]["name"].as_str().unwrap();
        assert!(s["metadata"].get("ownerReferences").is_none(), "{name}");
        let sops = serde_json::json!({"apiVersion": "isindir.github.com/v1alpha3", "kind": "SopsSecret",
            "metadata": {"namespace": s["metadata"]["namespace"], "name": name, "uid": format!("restored-{name}")}});
        let template = serde_json::json!({"name": name, "labels": s["metadata"]["labels"]});
        match reconcile(&sops, &template, Some(s)) {
            Outcome::Adopted(next) => {
                assert_eq!(
                    next["metadata"]["ownerReferences"][0]["uid"],
                    format!("restored-{name}")
                );
                adopted += 1;
            }
            other => panic!("{name}: {other:?}"),
        }
        // The same copy without the annotation (an ownerless Secret as a hand-made
        // backup or `kubectl apply` leaves it): refused, the SopsSecret Degraded.
        let mut bare = s.clone();
        bare["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove("sopssecret/managed");
        assert_eq!(reconcile(&sops, &template, Some(&bare)), Outcome::NotOwned);
    }
    assert_eq!(adopted, 5);
}

/// The restore runbook's "apply the sealed Secrets" step, run as printed with the real
/// `kubectl` (its `apply` replaced by a capture): each Secret it would apply carries
/// `sopssecret/managed: "true"`, so sops-secrets-operator (modelled) adopts it once its
/// SopsSecret is back instead of refusing it.
#[test]
#[ignore = "needs kubectl"]
fn the_runbook_applies_sealed_secrets_the_operator_adopts() {
    use capstan::rehearse::sops_operator::{reconcile, Outcome};
    need("kubectl", &["version", "--client"]);
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let example = example().display().to_string();
    let url = format!("file://{}/store", t.display());
    std::fs::create_dir_all(t.join("store")).unwrap();
    moved_example(&t.join("m"), 4);
    let o = run(&["backup", "push", "m", &url, "-R", &custody(t)], t);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(&["restore", "plan", &example, "--backup", &url], t);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let plan = stdout(&o);
    let cmd = plan
        .lines()
        .filter_map(|l| {
            l.split('`')
                .find(|s| s.starts_with("for f in clusters/lab-f/secrets/"))
        })
        .next()
        .unwrap_or_else(|| panic!("no apply step in {plan}"))
        .replace("| kubectl apply -f -", "| cat; echo ---")
        .replace("-i operator-identity.txt", &format!("-i {}", identity()));
    let bin = assert_cmd::cargo::cargo_bin("capstan");
    let sh = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -e; cd {}; export PATH={}:$PATH; {cmd}",
            example,
            bin.parent().unwrap().display()
        ))
        .output()
        .unwrap();
    assert!(
        sh.status.success(),
        "{}",
        String::from_utf8_lossy(&sh.stderr)
    );
    let docs = capstan::yaml::parse_stream(&String::from_utf8(sh.stdout).unwrap()).unwrap();
    assert_eq!(docs.len(), 3, "lab-f's three sealed Secrets");
    for s in &docs {
        let name = s["metadata"]["name"].as_str().unwrap();
        let sops = serde_json::json!({"apiVersion": "isindir.github.com/v1alpha3", "kind": "SopsSecret",
            "metadata": {"namespace": "lab-f", "name": name, "uid": "u"}});
        assert!(
            matches!(
                reconcile(&sops, &serde_json::json!({"name": name}), Some(s)),
                Outcome::Adopted(_)
            ),
            "{name}"
        );
    }
}
