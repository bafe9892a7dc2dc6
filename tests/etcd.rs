//! The control-plane rollback against a real etcd (Debian's `etcd-server`, installed by
//! `.ci/run`): a cluster of three "kubeadm" members joined by three "Talos" members, as
//! Talos joins (a learner, promoted, one at a time), on loopback ports this test starts and
//! stops. The etcd steps of the documented rollback (`capstan::procedure`), run as written,
//! keep quorum; deleting the three Talos machines first (the instruction capstan gave
//! before, B1) loses it, and `etcdctl member remove` cannot restore it.
//!
//! The snapshot taken before phase control-plane (D11): the documented `etcdctl snapshot
//! save` runs as written against a member serving TLS with client certificates in kubeadm's
//! layout (the test's own certificates, kubeadm's paths and usages), the file passes
//! `capstan check --etcd-snapshot` and restores (`etcdutl`, or etcd 3.4's `etcdctl`) into a
//! member with every key; a member's data file is blocked by check with the error the
//! restore prints for it.

use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::util;

struct Member {
    name: String,
    client: String,
    peer: String,
    child: Option<Child>,
}

struct Cluster {
    dir: tempfile::TempDir,
    members: Vec<Member>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(c) = &mut m.child {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// A port for an etcd member to listen on, below the ephemeral range (32768 and up on
/// Linux): a port the kernel hands out (`bind(…:0)`) and that is released until etcd starts
/// can meanwhile become the source port of one of the many `etcdctl` connections, and the
/// member then never starts (a test once waited 180 s for `talos-3 promoted` that way).
/// Ports are handed out once per test process, each checked free when handed out.
fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let _ = NEXT.compare_exchange(
        0,
        20_000 + (std::process::id() % 40) as u16 * 250,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    loop {
        let port = NEXT.fetch_add(1, Ordering::SeqCst);
        assert!(port < 32_000, "no free port below the ephemeral range");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

impl Cluster {
    fn endpoints(&self, names: &[&str]) -> String {
        self.members
            .iter()
            .filter(|m| names.contains(&m.name.as_str()))
            .map(|m| m.client.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `etcdctl` against the named members, with a short command timeout.
    fn etcdctl(&self, via: &[&str], args: &[&str]) -> Output {
        Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoints(via)))
            .arg("--command-timeout=3s")
            .arg("--dial-timeout=2s")
            .args(args)
            .output()
            .unwrap()
    }

    fn start(&mut self, i: usize, initial_cluster: &str, state: &str) {
        self.start_with(i, initial_cluster, state, &[]);
    }

    fn start_with(&mut self, i: usize, initial_cluster: &str, state: &str, extra: &[&str]) {
        let m = &self.members[i];
        let data = self.dir.path().join(&m.name);
        let log = std::fs::File::create(self.dir.path().join(format!("{}.log", m.name))).unwrap();
        let child = Command::new("etcd")
            .args([
                "--name",
                &m.name,
                "--data-dir",
                data.to_str().unwrap(),
                "--listen-client-urls",
                &m.client,
                "--advertise-client-urls",
                &m.client,
                "--listen-peer-urls",
                &m.peer,
                "--initial-advertise-peer-urls",
                &m.peer,
                "--initial-cluster",
                initial_cluster,
                "--initial-cluster-state",
                state,
                "--initial-cluster-token",
                "capstan-test",
                // Generous for a loaded 2-core test machine (etcd's defaults are 100/1000).
                "--heartbeat-interval",
                "100",
                "--election-timeout",
                "1500",
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.members[i].child = Some(child);
    }

    /// Power a member's machine off: the process dies, its membership stays.
    fn power_off(&mut self, name: &str) {
        let m = self.members.iter_mut().find(|m| m.name == name).unwrap();
        if let Some(mut c) = m.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// A member's id, found by its peer URL (a member added but not started yet has no
    /// name in the list).
    fn id_of(&self, name: &str) -> String {
        let peer = &self.members.iter().find(|m| m.name == name).unwrap().peer;
        let o = self.etcdctl(
            &["kubeadm-1", "kubeadm-2", "kubeadm-3"],
            &["member", "list"],
        );
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        text.lines()
            .find(|l| l.split(", ").nth(3) == Some(peer.as_str()))
            .and_then(|l| l.split(", ").next())
            .unwrap_or_else(|| panic!("no member {name} in:\n{text}"))
            .to_string()
    }

    fn member_count(&self, via: &[&str]) -> usize {
        let o = self.etcdctl(via, &["member", "list"]);
        String::from_utf8_lossy(&o.stdout).lines().count()
    }

    fn write_succeeds(&self, via: &[&str], key: &str) -> bool {
        self.etcdctl(via, &["put", key, "v"]).status.success()
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "timed out waiting: {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

const KUBEADM: [&str; 3] = ["kubeadm-1", "kubeadm-2", "kubeadm-3"];
const TALOS: [&str; 3] = ["talos-1", "talos-2", "talos-3"];

/// Three kubeadm members, then three Talos members added as Talos adds itself: a learner,
/// started, promoted once in sync, one at a time (etcd allows one learner).
fn six_members() -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let members = KUBEADM
        .iter()
        .chain(&TALOS)
        .map(|n| Member {
            name: n.to_string(),
            client: format!("http://127.0.0.1:{}", free_port()),
            peer: format!("http://127.0.0.1:{}", free_port()),
            child: None,
        })
        .collect();
    let mut c = Cluster { dir, members };
    let initial: Vec<String> = c.members[..3]
        .iter()
        .map(|m| format!("{}={}", m.name, m.peer))
        .collect();
    for i in 0..3 {
        c.start(i, &initial.join(","), "new");
    }
    wait_until("the kubeadm members to be healthy", || {
        c.etcdctl(&KUBEADM, &["endpoint", "health", "--cluster"])
            .status
            .success()
    });
    let mut cluster: Vec<String> = initial;
    for i in 3..6 {
        let (name, peer) = (c.members[i].name.clone(), c.members[i].peer.clone());
        // etcd refuses a reconfiguration until the cluster has been healthy for a while
        // (`etcdserver: unhealthy cluster`); Talos retries the same way.
        wait_until(&format!("{name} added as a learner"), || {
            c.etcdctl(
                &KUBEADM,
                &[
                    "member",
                    "add",
                    &name,
                    "--learner",
                    &format!("--peer-urls={peer}"),
                ],
            )
            .status
            .success()
        });
        cluster.push(format!("{name}={peer}"));
        c.start(i, &cluster.join(","), "existing");
        let id = c.id_of(&name);
        wait_until(&format!("{name} promoted"), || {
            c.etcdctl(&KUBEADM, &["member", "promote", &id])
                .status
                .success()
        });
    }
    wait_until("six healthy voters", || {
        c.etcdctl(&KUBEADM, &["endpoint", "health", "--cluster"])
            .status
            .success()
            && c.member_count(&KUBEADM) == 6
    });
    c
}

/// The backticked `etcdctl …` commands of a procedure's steps, in order.
fn etcdctl_commands(steps: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for s in steps {
        for (i, part) in s.split('`').enumerate() {
            if i % 2 == 1 && part.starts_with("etcdctl ") {
                out.push(
                    part.split_whitespace()
                        .skip(1)
                        .map(str::to_string)
                        .collect(),
                );
            }
        }
    }
    out
}

/// The real-etcd tests are `#[ignore = "needs etcd and etcdctl"]`; run (`--include-ignored`,
/// as `.ci/run` does), a missing etcd fails them.
fn need_etcd() {
    crate::util::need("etcd", &["--version"]);
    crate::util::need("etcdctl", &["version"]);
}

#[test]
#[ignore = "needs etcd and etcdctl"]
fn the_documented_rollback_keeps_quorum_and_deleting_machines_first_loses_it() {
    need_etcd();
    let procedure = &capstan::procedure::ROLLBACK_CONTROL_PLANE;
    let steps = procedure.steps(&capstan::procedure::Names::placeholders());
    let commands = etcdctl_commands(&steps);
    // The procedure lists the members, then removes one and checks health, for each.
    let kinds: Vec<&str> = commands.iter().map(|c| c[1].as_str()).collect();
    assert_eq!(
        commands.iter().map(|c| c[0].as_str()).collect::<Vec<_>>(),
        ["member", "member", "endpoint", "member"],
        "{commands:?}"
    );
    assert_eq!(kinds, ["list", "remove", "health", "list"]);
    let delete_machines = steps
        .iter()
        .position(|s| s.contains("delete machines.cluster.x-k8s.io"))
        .unwrap();
    let last_etcd = steps.iter().rposition(|s| s.contains("etcdctl")).unwrap();
    assert!(last_etcd < delete_machines, "members go before machines");

    // As documented: each Talos member removed, then the health of the rest checked.
    let mut c = six_members();
    let via = KUBEADM;
    let list = c.etcdctl(
        &via,
        &commands[0].iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert!(list.status.success());
    for talos in TALOS {
        let id = c.id_of(talos);
        let remove: Vec<String> = commands[1]
            .iter()
            .map(|a| {
                if a == "<member-id>" {
                    id.clone()
                } else {
                    a.clone()
                }
            })
            .collect();
        let o = c.etcdctl(&via, &remove.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(
            o.status.success(),
            "remove {talos}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let health = c.etcdctl(
            &via,
            &commands[2].iter().map(String::as_str).collect::<Vec<_>>(),
        );
        assert!(
            health.status.success(),
            "health after removing {talos}: {}{}",
            String::from_utf8_lossy(&health.stdout),
            String::from_utf8_lossy(&health.stderr)
        );
        assert!(c.write_succeeds(&via, &format!("after-{talos}")));
        // The machine is deleted only now (the member is gone): nothing changes.
        c.power_off(talos);
        assert!(c.write_succeeds(&via, &format!("off-{talos}")));
    }
    assert_eq!(c.member_count(&via), 3);
    assert!(c.write_succeeds(&via, "rolled-back"));
    drop(c);

    // The order capstan gave before (B1): the three Talos Machines deleted first. Talos
    // does not leave etcd on power-off, so 3 of 6 voters are left: no quorum.
    let mut c = six_members();
    assert!(c.write_succeeds(&KUBEADM, "before-the-loss"));
    for talos in TALOS {
        c.power_off(talos);
    }
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !c.write_succeeds(&KUBEADM, "after-deleting-machines"),
        "quorum was lost"
    );
    // ... and the member removal meant to follow needs the quorum it would restore.
    let id = c.id_of_offline("talos-1");
    let o = c.etcdctl(&KUBEADM, &["member", "remove", &id]);
    assert!(
        !o.status.success(),
        "member remove without quorum succeeded"
    );
    assert!(!c
        .etcdctl(&KUBEADM, &["endpoint", "health", "--cluster"])
        .status
        .success());

    // Restoring quorum as documented (capstan::procedure::RESTORE_QUORUM): etcd stopped
    // everywhere, one kubeadm member restarted with --force-new-cluster keeps every key as
    // a cluster of one; the flag removed again; another kubeadm member added back empty.
    let restore = capstan::procedure::RESTORE_QUORUM
        .steps(&capstan::procedure::Names::placeholders())
        .join("\n");
    for needle in [
        "--force-new-cluster",
        "remove `--force-new-cluster`",
        "etcdctl member add <name> --peer-urls=",
        "empty that node's `/var/lib/etcd`",
        "--initial-cluster-state=existing",
    ] {
        assert!(restore.contains(needle), "{needle}");
    }
    for m in KUBEADM {
        c.power_off(m);
    }
    let one = format!("kubeadm-1={}", c.members[0].peer);
    c.start_with(0, &one, "new", &["--force-new-cluster"]);
    wait_until("kubeadm-1 alone and healthy", || {
        c.etcdctl(&["kubeadm-1"], &["endpoint", "health"])
            .status
            .success()
    });
    assert_eq!(c.member_count(&["kubeadm-1"]), 1);
    let got = c.etcdctl(
        &["kubeadm-1"],
        &["get", "before-the-loss", "--print-value-only"],
    );
    assert_eq!(
        String::from_utf8_lossy(&got.stdout).trim(),
        "v",
        "the data is kept"
    );
    c.power_off("kubeadm-1");
    c.start(0, &one, "new");
    wait_until("kubeadm-1 restarted without the flag", || {
        c.write_succeeds(&["kubeadm-1"], "after-restore")
    });
    let peer2 = c.members[1].peer.clone();
    wait_until("kubeadm-2 added", || {
        c.etcdctl(
            &["kubeadm-1"],
            &[
                "member",
                "add",
                "kubeadm-2",
                &format!("--peer-urls={peer2}"),
            ],
        )
        .status
        .success()
    });
    std::fs::remove_dir_all(c.dir.path().join("kubeadm-2")).unwrap();
    c.start(1, &format!("{one},kubeadm-2={peer2}"), "existing");
    wait_until("two healthy members", || {
        c.etcdctl(
            &["kubeadm-1", "kubeadm-2"],
            &["endpoint", "health", "--cluster"],
        )
        .status
        .success()
    });
    assert_eq!(c.member_count(&["kubeadm-1"]), 2);
    assert!(c.write_succeeds(&["kubeadm-1", "kubeadm-2"], "restored"));
}

impl Cluster {
    /// A member's id from one kubeadm member's own member list (etcd 3.4 serves it locally,
    /// without quorum), found by peer URL.
    fn id_of_offline(&self, name: &str) -> String {
        let peer = &self.members.iter().find(|m| m.name == name).unwrap().peer;
        let o = self.etcdctl(&["kubeadm-1"], &["member", "list"]);
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        text.lines()
            .find(|l| l.split(", ").nth(3) == Some(peer.as_str()))
            .and_then(|l| l.split(", ").next())
            .unwrap_or_else(|| {
                panic!(
                    "no member {name} in:\n{text}{}",
                    String::from_utf8_lossy(&o.stderr)
                )
            })
            .to_string()
    }
}

/// kubeadm's etcd PKI layout (`/etc/kubernetes/pki/etcd/`, kubeadm
/// `cmd/kubeadm/app/phases/certs/certlist.go`: `etcd/ca`, `etcd/server` for serving with
/// client and server usages, `etcd/healthcheck-client` for clients) written under `root`,
/// for an etcd serving TLS on 127.0.0.1 with client certificates required, as kubeadm runs it.
fn kubeadm_etcd_pki(root: &std::path::Path) -> std::path::PathBuf {
    use capstan::secrets::pki::encode_certificate_pem;
    use capstan::secrets::pki::testkit::{ca_params, days_from_now, Alg, TestKey};
    let dir = root.join("etc/kubernetes/pki/etcd");
    std::fs::create_dir_all(&dir).unwrap();
    let ca_key = TestKey::new(Alg::P256, 0);
    let ca = ca_params("etcd-ca", days_from_now(-1), days_from_now(3650));
    let issuer = rcgen::Issuer::from_params(&ca, &ca_key);
    std::fs::write(
        dir.join("ca.crt"),
        encode_certificate_pem(ca.self_signed(&ca_key).unwrap().der()),
    )
    .unwrap();
    let leaf = |name: &str, cn: &str, usages: Vec<rcgen::ExtendedKeyUsagePurpose>| {
        let key = TestKey::new(Alg::P256, 0);
        let mut p = ca_params(cn, days_from_now(-1), days_from_now(365));
        p.is_ca = rcgen::IsCa::ExplicitNoCa;
        p.key_usages = vec![
            rcgen::KeyUsagePurpose::DigitalSignature,
            rcgen::KeyUsagePurpose::KeyEncipherment,
        ];
        p.extended_key_usages = usages;
        p.subject_alt_names = vec![
            rcgen::SanType::DnsName("localhost".try_into().unwrap()),
            rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap()),
        ];
        let cert = p.signed_by(&key, &issuer).unwrap();
        std::fs::write(
            dir.join(format!("{name}.crt")),
            encode_certificate_pem(cert.der()),
        )
        .unwrap();
        std::fs::write(dir.join(format!("{name}.key")), &*key.pkcs8_pem()).unwrap();
    };
    use rcgen::ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
    leaf("server", "kubeadm-1", vec![ServerAuth, ClientAuth]);
    leaf(
        "healthcheck-client",
        "kube-etcd-healthcheck-client",
        vec![ClientAuth],
    );
    dir
}

/// The one backticked command of a procedure's steps that contains `needle`.
fn command_with(steps: &[String], needle: &str) -> String {
    let found: Vec<&str> = steps
        .iter()
        .flat_map(|s| s.split('`').skip(1).step_by(2))
        .filter(|c| c.contains(needle))
        .collect();
    assert_eq!(found.len(), 1, "{needle}: {found:?}");
    found[0].to_string()
}

#[test]
#[ignore = "needs etcd and etcdctl"]
fn the_documented_snapshot_is_taken_restored_and_passes_check() {
    need_etcd();
    let steps = capstan::procedure::ETCD_SNAPSHOT.steps(&capstan::procedure::Names::placeholders());
    let save = command_with(&steps, "snapshot save");
    // Run inside the kubeadm etcd Pod, whose image carries etcdctl, with the certificate
    // paths kubeadm mounts into it (the host's).
    let args: Vec<&str> = save
        .strip_prefix("kubectl -n kube-system exec etcd-<node> -- etcdctl ")
        .unwrap_or_else(|| panic!("not run in the etcd Pod: {save}"))
        .split_whitespace()
        .collect();
    for flag in [
        "--endpoints=https://127.0.0.1:2379",
        "--cacert=/etc/kubernetes/pki/etcd/ca.crt",
        "--cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt",
        "--key=/etc/kubernetes/pki/etcd/healthcheck-client.key",
    ] {
        assert!(args.contains(&flag), "{flag} in {save}");
    }
    let on_node = args.last().unwrap().to_string();
    assert!(on_node.starts_with("/var/lib/etcd/"), "{save}");
    // The copy off the node and the check name the same file.
    let copy = command_with(&steps, "sudo cat");
    let local = copy.rsplit("> ").next().unwrap().to_string();
    assert!(copy.contains(&on_node), "{copy}");
    let check = command_with(&steps, "--etcd-snapshot");
    assert!(
        check.ends_with(&format!("--etcd-snapshot {local}")),
        "{check}"
    );

    // A kubeadm-style member: TLS on 127.0.0.1, client certificates required.
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("node");
    let pki = kubeadm_etcd_pki(&node);
    let client = format!("https://127.0.0.1:{}", free_port());
    let peer = format!("http://127.0.0.1:{}", free_port());
    let mut c = Cluster {
        dir: tempfile::tempdir().unwrap(),
        members: vec![Member {
            name: "kubeadm-1".into(),
            client: client.clone(),
            peer: peer.clone(),
            child: None,
        }],
    };
    let p = |f: &str| pki.join(f).display().to_string();
    c.start_with(
        0,
        &format!("kubeadm-1={peer}"),
        "new",
        &[
            "--cert-file",
            &p("server.crt"),
            "--key-file",
            &p("server.key"),
            "--trusted-ca-file",
            &p("ca.crt"),
            "--client-cert-auth",
        ],
    );
    let tls = |args: &[&str]| {
        Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={client}"))
            .arg(format!("--cacert={}", p("ca.crt")))
            .arg(format!("--cert={}", p("healthcheck-client.crt")))
            .arg(format!("--key={}", p("healthcheck-client.key")))
            .arg("--command-timeout=5s")
            .args(args)
            .output()
            .unwrap()
    };
    wait_until("the TLS member to be healthy", || {
        tls(&["endpoint", "health"]).status.success()
    });
    // Without a client certificate the member refuses: the flags matter.
    let bare = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={client}"))
        .arg(format!("--cacert={}", p("ca.crt")))
        .args(["--command-timeout=3s", "--dial-timeout=2s", "get", "x"])
        .output()
        .unwrap();
    assert!(!bare.status.success(), "client-cert-auth is on");
    for i in 0..200 {
        let o = tls(&[
            "put",
            &format!("/registry/secrets/ns/s{i}"),
            &format!("v{i}"),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }

    // The documented command, with the node's paths under the test's root.
    let var = node.join("var/lib/etcd");
    std::fs::create_dir_all(&var).unwrap();
    let node_path = |a: &str| {
        a.replace("https://127.0.0.1:2379", &client)
            .replace(
                "/etc/kubernetes/",
                &format!("{}/etc/kubernetes/", node.display()),
            )
            .replace("/var/lib/etcd/", &format!("{}/", var.display()))
    };
    let run: Vec<String> = args.iter().map(|a| node_path(a)).collect();
    let o = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(&run)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{save}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(said.contains("Snapshot saved at"), "{said}");
    let saved = std::path::PathBuf::from(node_path(&on_node));
    // Copied off the node (`ssh … sudo cat … > file`): the same bytes.
    let off = dir.path().join(&local);
    std::fs::copy(&saved, &off).unwrap();

    // `capstan check --etcd-snapshot` passes it.
    let cluster = util::example().join("clusters/lab-f");
    let o = util::capstan(
        &[
            "check",
            cluster.to_str().unwrap(),
            "--etcd-snapshot",
            off.to_str().unwrap(),
            "--format",
            "json",
        ],
        &util::root(),
    );
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let finding = |report: &serde_json::Value| {
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == "etcd-snapshot")
            .cloned()
            .unwrap()
    };
    let f = finding(&report);
    assert_eq!(f["severity"], "pass", "{f:#}");

    // It restores (`etcdutl` from etcd 3.5 on; etcd 3.4 has it in `etcdctl`), as a new
    // one-member cluster with every key.
    let restored = dir.path().join("restored");
    let rpeer = format!("http://127.0.0.1:{}", free_port());
    let rclient = format!("http://127.0.0.1:{}", free_port());
    let etcdutl = Command::new("etcdutl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    let mut restore = Command::new(if etcdutl { "etcdutl" } else { "etcdctl" });
    restore.env("ETCDCTL_API", "3").args([
        "snapshot",
        "restore",
        off.to_str().unwrap(),
        "--name",
        "restored",
        "--data-dir",
        restored.to_str().unwrap(),
        "--initial-cluster",
        &format!("restored={rpeer}"),
        "--initial-advertise-peer-urls",
        &rpeer,
    ]);
    let o = restore.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let log = std::fs::File::create(dir.path().join("restored.log")).unwrap();
    let mut etcd = Command::new("etcd")
        .args([
            "--name",
            "restored",
            "--data-dir",
            restored.to_str().unwrap(),
            "--listen-client-urls",
            &rclient,
            "--advertise-client-urls",
            &rclient,
            "--listen-peer-urls",
            &rpeer,
            "--initial-advertise-peer-urls",
            &rpeer,
        ])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let plain = |args: &[&str]| {
        Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={rclient}"))
            .arg("--command-timeout=3s")
            .args(args)
            .output()
            .unwrap()
    };
    wait_until("the restored member to be healthy", || {
        plain(&["endpoint", "health"]).status.success()
    });
    let got = plain(&["get", "/registry/secrets/ns/s199", "--print-value-only"]);
    let count = plain(&[
        "get",
        "/registry/secrets/",
        "--prefix",
        "--keys-only",
        "-w",
        "json",
    ]);
    let members = plain(&["member", "list"]);
    let _ = etcd.kill();
    let _ = etcd.wait();
    assert_eq!(String::from_utf8_lossy(&got.stdout).trim(), "v199");
    assert!(
        String::from_utf8_lossy(&count.stdout).contains("\"count\":200"),
        "{}",
        String::from_utf8_lossy(&count.stdout)
    );
    assert_eq!(String::from_utf8_lossy(&members.stdout).lines().count(), 1);

    // A member's data file is no snapshot: check blocks it with the error etcd's restore
    // prints for it, and the restore indeed refuses it without --skip-hash-check.
    let data_file = c.dir.path().join("kubeadm-1/member/snap/db");
    let copied = dir.path().join("db");
    std::fs::copy(&data_file, &copied).unwrap();
    let o = util::capstan(
        &[
            "check",
            cluster.to_str().unwrap(),
            "--etcd-snapshot",
            copied.to_str().unwrap(),
            "--format",
            "json",
        ],
        &util::root(),
    );
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let f = finding(&report);
    assert_eq!(f["severity"], "blocking", "{f:#}");
    let error = f["clusterError"].as_str().unwrap().to_string();
    let mut refuse = Command::new(if etcdutl { "etcdutl" } else { "etcdctl" });
    let o = refuse
        .env("ETCDCTL_API", "3")
        .args([
            "snapshot",
            "restore",
            copied.to_str().unwrap(),
            "--data-dir",
            dir.path().join("refused").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&error),
        "{error} in {}",
        String::from_utf8_lossy(&o.stderr)
    );
    drop(c);
}
