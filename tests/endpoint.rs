//! The control-plane endpoint through rollouts after the migration (issue 28, provider
//! review B7): a model of a rolling control plane, written from the providers' source, run
//! on what capstan renders and on the backend list its runbook gives the load balancer.
//!
//! What is modelled, and from where:
//! - CACPPT v0.5.12 (`controllers/upgrade.go:32-41`, `scale.go:38-142`, `etcd.go:114-144`):
//!   with machines to roll out and fewer machines than replicas + `maxSurge` it creates one;
//!   otherwise, once every machine has booted and has a nodeRef, etcd is healthy and no
//!   machine is being deleted, it makes the oldest outdated machine leave etcd and deletes it.
//!   A machine being deleted still counts until it is gone.
//! - Cluster API and CAPV: a deleted Machine is drained, then its VM powered off and deleted;
//!   its IPAddressClaim goes with the VM.
//! - cluster-api-ipam-provider-in-cluster (`internal/poolutil/pool.go` `PoolSpecToIPSet`,
//!   `FindFreeAddress`; `ipaddressclaim_address.go` `ReleaseAddress`): a claim gets the
//!   lowest free address of the pool, never the network, broadcast or gateway address; a
//!   released address is free at once, or after `addressReuseGracePeriodSeconds` (newer
//!   releases), during which the claim's deletion, and so the machine's, waits. This model's
//!   allocator is written from that source, not capstan's.
//! - Talos (`network/operator/vip.go`; `k8s/control_plane.go:266`, the apiserver's etcd is
//!   `127.0.0.1:2379`): a control-plane node campaigns for the VIP once its etcd runs; the
//!   election is a FIFO queue by the key's creation; the holder announces the address
//!   (whether its apiserver is ready or not) and drops it when its etcd stops; a node that
//!   left etcd cannot revoke its key, which lives until its lease expires (60 s). A machine
//!   that left etcd still accepts TCP on 6443 until it is powered off, but fails requests.
//!
//! Each scenario rolls every control-plane machine (three replacements for three replicas)
//! and checks the endpoint at every second.

use crate::util::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// A VM's clone and boot until Talos has booted, joined etcd and registered its Node.
const BOOT: u64 = 90;
/// From boot to a ready kube-apiserver (it waits for its etcd member).
const APISERVER_LAG: u64 = 20;
/// CACPPT requeues every 10 s while it waits (`scale.go`).
const RECONCILE: u64 = 10;
/// A deleted Machine's drain and CAPV's power-off.
const DRAIN_AND_POWER_OFF: u64 = 15;
/// Talos's VIP election lease (`concurrency.NewSession`'s default TTL).
const VIP_LEASE: u64 = 60;

#[derive(Debug, Clone)]
struct Machine {
    name: String,
    outdated: bool,
    created: u64,
    address: Option<IpAddr>,
    addressed: Option<u64>,
    booted: Option<u64>,
    /// When CACPPT made it leave etcd and deleted it.
    deleting: Option<u64>,
    powered_off: Option<u64>,
}

impl Machine {
    fn apiserver_serves(&self, t: u64) -> bool {
        self.booted.is_some_and(|b| t >= b + APISERVER_LAG) && self.deleting.is_none()
    }
    fn accepts_tcp(&self, t: u64) -> bool {
        self.booted.is_some_and(|b| t >= b + APISERVER_LAG) && self.powered_off.is_none()
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Addresses {
    /// The control plane's own pool: these addresses (as the IPAM provider hands them out),
    /// and the grace period before a released one is handed out again.
    Pool(u64),
    /// DHCP, or a pool shared with the workers: every new machine gets an address no
    /// machine had before.
    Fresh,
}

struct Rollout {
    replicas: usize,
    max_surge: usize,
    addresses: Addresses,
    pool: Vec<IpAddr>,
    machines: Vec<Machine>,
    /// Released addresses and when they are free again.
    releasing: Vec<(IpAddr, u64)>,
    /// VIP election keys: (creation order, machine, lease expiry once it left etcd).
    election: Vec<(u64, String, Option<u64>)>,
    next_key: u64,
    next_fresh: u32,
    created: usize,
    t: u64,
}

/// The endpoint at one second.
#[derive(Debug, Default)]
struct Observed {
    /// Load balancer: backends that accept TCP, and those of them that serve requests.
    tcp_live: usize,
    serving: usize,
    /// VIP: the holder's apiserver serves requests.
    vip_serves: bool,
    machines: usize,
    addresses_in_use: usize,
}

impl Rollout {
    fn new(replicas: usize, max_surge: usize, addresses: Addresses, pool: Vec<IpAddr>) -> Self {
        let mut r = Rollout {
            replicas,
            max_surge,
            addresses,
            pool,
            machines: Vec::new(),
            releasing: Vec::new(),
            election: Vec::new(),
            next_key: 0,
            next_fresh: 0,
            created: 0,
            t: 0,
        };
        // A running control plane: `replicas` machines, booted long ago, about to be rolled.
        for _ in 0..replicas {
            r.create(true);
            let m = r.machines.last_mut().unwrap();
            m.booted = Some(0);
        }
        r.assign_addresses();
        for m in &mut r.machines {
            m.booted = Some(0);
            m.addressed = Some(0);
        }
        let names: Vec<String> = r.machines.iter().map(|m| m.name.clone()).collect();
        for n in names {
            r.campaign(&n);
        }
        r.t = APISERVER_LAG;
        r
    }

    fn create(&mut self, outdated: bool) {
        self.created += 1;
        self.machines.push(Machine {
            name: format!("cp-{}", self.created),
            outdated,
            created: self.t,
            address: None,
            addressed: None,
            booted: None,
            deleting: None,
            powered_off: None,
        });
    }

    fn campaign(&mut self, name: &str) {
        self.next_key += 1;
        self.election.push((self.next_key, name.to_string(), None));
    }

    /// Pending claims get the lowest free address (`FindFreeAddress`).
    fn assign_addresses(&mut self) {
        let t = self.t;
        self.releasing.retain(|(_, free_at)| *free_at > t);
        for i in 0..self.machines.len() {
            if self.machines[i].address.is_some() {
                continue;
            }
            let address = match self.addresses {
                Addresses::Fresh => {
                    self.next_fresh += 1;
                    Some(IpAddr::from([
                        10,
                        99,
                        (self.next_fresh / 250) as u8,
                        (self.next_fresh % 250) as u8,
                    ]))
                }
                Addresses::Pool(_) => {
                    let in_use: Vec<IpAddr> = self
                        .machines
                        .iter()
                        .filter_map(|m| m.address)
                        .chain(self.releasing.iter().map(|r| r.0))
                        .collect();
                    self.pool.iter().find(|a| !in_use.contains(a)).copied()
                }
            };
            if let Some(a) = address {
                self.machines[i].address = Some(a);
                self.machines[i].addressed = Some(t);
            }
        }
    }

    fn reconcile(&mut self) {
        let t = self.t;
        if !self.machines.iter().any(|m| m.outdated) {
            return;
        }
        if self.machines.len() < self.replicas + self.max_surge {
            self.create(false);
            return;
        }
        // scaleDownControlPlane: every node booted with its nodeRef, etcd healthy, none deleting.
        let ready = self
            .machines
            .iter()
            .all(|m| m.booted.is_some() && m.deleting.is_none());
        if !ready {
            return;
        }
        let oldest = self
            .machines
            .iter_mut()
            .filter(|m| m.outdated)
            .min_by_key(|m| (m.created, m.name.clone()))
            .unwrap();
        oldest.deleting = Some(t);
        let name = oldest.name.clone();
        // gracefulEtcdLeave: its etcd stops; its election key outlives it by the lease.
        for k in &mut self.election {
            if k.1 == name {
                k.2 = Some(t + VIP_LEASE);
            }
        }
    }

    fn step(&mut self) -> Observed {
        let t = self.t;
        // Machines boot; a booted node campaigns for the VIP.
        let mut joined = Vec::new();
        for m in &mut self.machines {
            if m.booted.is_none() && m.addressed.is_some_and(|a| t >= a + BOOT) {
                m.booted = Some(t);
                joined.push(m.name.clone());
            }
            if let Some(d) = m.deleting {
                if m.powered_off.is_none() && t >= d + DRAIN_AND_POWER_OFF {
                    m.powered_off = Some(t);
                }
            }
        }
        for n in joined {
            self.campaign(&n);
        }
        // A powered-off machine's claim is released; the machine is gone once the claim is
        // (the grace period holds both).
        let grace = match self.addresses {
            Addresses::Pool(g) => g,
            Addresses::Fresh => 0,
        };
        let mut gone = Vec::new();
        for m in &self.machines {
            if let Some(off) = m.powered_off {
                if t >= off + grace {
                    gone.push(m.name.clone());
                }
            }
        }
        self.machines.retain(|m| !gone.contains(&m.name));
        self.election
            .retain(|k| k.2.is_none_or(|expiry| t < expiry));
        self.assign_addresses();
        if t.is_multiple_of(RECONCILE) {
            self.reconcile();
            self.assign_addresses();
        }
        self.t += 1;
        let holder = self.election.first().and_then(|k| {
            self.machines
                .iter()
                .find(|m| m.name == k.1 && m.deleting.is_none())
        });
        Observed {
            tcp_live: 0,
            serving: 0,
            vip_serves: holder.is_some_and(|m| m.apiserver_serves(t)),
            machines: self.machines.len(),
            addresses_in_use: self.machines.iter().filter(|m| m.address.is_some()).count(),
        }
    }

    /// Roll every machine; each second's observation with the load balancer's `backends`.
    fn run(&mut self, backends: &[IpAddr]) -> Vec<Observed> {
        let mut seen = Vec::new();
        // Until no machine is outdated or being deleted, then until the last replaced
        // machine's VIP election key has expired.
        let mut settle = VIP_LEASE + RECONCILE;
        while settle > 0 {
            if !self
                .machines
                .iter()
                .any(|m| m.outdated || m.deleting.is_some())
            {
                settle -= 1;
            }
            let mut o = self.step();
            let t = self.t - 1;
            for m in &self.machines {
                if m.address.is_some_and(|a| backends.contains(&a)) {
                    o.tcp_live += usize::from(m.accepts_tcp(t));
                    o.serving += usize::from(m.apiserver_serves(t));
                }
            }
            seen.push(o);
            assert!(
                self.t < 24 * 3600,
                "the rollout never finished: {:#?}",
                self.machines
            );
        }
        seen
    }
}

/// Render a copy of the example repository's cluster after `edit`; the objects.
fn render(
    cluster: &str,
    edit: impl FnOnce(String) -> String,
) -> (tempfile::TempDir, Vec<Value>, String) {
    let (t, repo) = example_copy();
    let file = repo.join(format!("clusters/{cluster}/cluster.yaml"));
    let text = edit(std::fs::read_to_string(&file).unwrap());
    std::fs::write(&file, text).unwrap();
    let o = capstan(&["render", &format!("clusters/{cluster}")], &repo);
    assert!(o.status.success(), "{}", stderr(&o));
    let objects = capstan::yaml::parse_stream(&stdout(&o)).unwrap();
    let plan = capstan(&["plan", &format!("clusters/{cluster}")], &repo);
    assert!(plan.status.success(), "{}", stderr(&plan));
    (t, objects, stdout(&plan))
}

fn tcp(objects: &[Value]) -> (usize, usize) {
    let tcp = objects
        .iter()
        .find(|o| o["kind"] == "TalosControlPlane")
        .unwrap();
    assert_eq!(
        tcp.pointer("/spec/rolloutStrategy/type"),
        Some(&Value::from("RollingUpdate"))
    );
    (
        tcp["spec"]["replicas"].as_u64().unwrap() as usize,
        tcp.pointer("/spec/rolloutStrategy/rollingUpdate/maxSurge")
            .and_then(Value::as_u64)
            .unwrap() as usize,
    )
}

/// Every document of the TalosControlPlane's Talos patches (the same path in both flavours).
fn control_plane_patches(objects: &[Value]) -> Vec<Value> {
    let tcp = objects
        .iter()
        .find(|o| o["kind"] == "TalosControlPlane")
        .unwrap();
    tcp.pointer("/spec/controlPlaneConfig/controlplane/strategicPatches")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| capstan::yaml::parse_stream(p.as_str().unwrap()).unwrap())
        .collect()
}

/// The pool as the IPAM provider hands it out (`PoolSpecToIPSet` over IPv4 ranges and
/// addresses, the model's own reading of the provider).
fn provider_pool(pool: &Value) -> Vec<IpAddr> {
    let spec = &pool["spec"];
    let n = |a: &str| u32::from(a.trim().parse::<std::net::Ipv4Addr>().unwrap());
    let mut set = std::collections::BTreeSet::new();
    for a in spec["addresses"].as_array().unwrap() {
        let a = a.as_str().unwrap();
        let (lo, hi) = a
            .split_once('-')
            .map_or_else(|| (n(a), n(a)), |(x, y)| (n(x), n(y)));
        set.extend(lo..=hi);
    }
    // The subnet of the lowest listed address, before exclusions.
    let first = *set.iter().next().unwrap();
    for a in spec["excludedAddresses"].as_array().into_iter().flatten() {
        let a = a.as_str().unwrap();
        let (lo, hi) = a
            .split_once('-')
            .map_or_else(|| (n(a), n(a)), |(x, y)| (n(x), n(y)));
        for x in lo..=hi {
            set.remove(&x);
        }
    }
    let prefix = spec["prefix"].as_u64().unwrap() as u32;
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    if spec["allocateReservedIPAddresses"] != true {
        set.remove(&(first & mask));
        set.remove(&(first & mask | !mask));
    }
    set.remove(&n(spec["gateway"].as_str().unwrap()));
    set.into_iter()
        .map(|x| IpAddr::from(std::net::Ipv4Addr::from(x)))
        .collect()
}

/// The backends the runbook (phase complete) tells the load balancer to list.
fn plan_backends(plan: &str) -> Vec<IpAddr> {
    let section = plan
        .split("## Control-plane endpoint")
        .nth(1)
        .expect("endpoint section");
    let first = section.lines().find(|l| l.starts_with("1. ")).unwrap();
    first
        .split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|s| s.parse().ok())
        .collect()
}

fn to_complete(text: String) -> String {
    let s = text.replace("    phase: prepare\n", "    phase: complete\n");
    let start = s.find("    kubeadm:\n").unwrap();
    let end = start
        + s[start..]
            .find("\n    providers:")
            .or_else(|| s[start..].find("\n  overlays:"))
            .unwrap();
    format!("{}    kubeadm: {{}}{}", &s[..start], &s[end..])
}

#[test]
fn an_external_load_balancer_keeps_serving_through_a_rollout() {
    // lab-f (strategy external) in phase complete.
    let (_t, objects, plan) = render("lab-f", to_complete);
    let (replicas, surge) = tcp(&objects);
    assert_eq!((replicas, surge), (3, 1));
    let pool = objects
        .iter()
        .find(|o| o["kind"] == "InClusterIPPool" && o["metadata"]["name"] == "lab-f-cp-addresses")
        .expect("the control-plane pool");
    let addresses = provider_pool(pool);
    let backends = plan_backends(&plan);
    // The runbook lists exactly what the provider hands out: replicas + surge.
    assert_eq!(backends, addresses, "{plan}");
    assert_eq!(backends.len(), replicas + surge);
    // The control-plane template takes its addresses from that pool, and from no other.
    let cp_template = objects
        .iter()
        .find(|o| {
            o["kind"] == "VSphereMachineTemplate"
                && o["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .starts_with("lab-f-cp-")
        })
        .unwrap();
    assert_eq!(
        cp_template.pointer("/spec/template/spec/network/devices/0/addressesFromPools/0/name"),
        Some(&Value::from("lab-f-cp-addresses"))
    );
    for grace in [0, 300] {
        let mut r = Rollout::new(replicas, surge, Addresses::Pool(grace), addresses.clone());
        let seen = r.run(&backends);
        let worst_serving = seen.iter().map(|o| o.serving).min().unwrap();
        let most_machines = seen.iter().map(|o| o.machines).max().unwrap();
        let most_addresses = seen.iter().map(|o| o.addresses_in_use).max().unwrap();
        // Never below replicas - 1 serving backends (the new machine's apiserver may still be
        // starting when the old one leaves), never more machines or addresses than the pool.
        assert!(
            worst_serving >= replicas - 1,
            "grace {grace}: {worst_serving} serving"
        );
        assert!(most_machines <= replicas + surge && most_addresses <= backends.len());
        // Every machine ends on a listed address, and the rollout did not stall on one.
        assert_eq!(r.machines.len(), replicas);
        assert!(r
            .machines
            .iter()
            .all(|m| m.address.is_some_and(|a| backends.contains(&a))));
        // A machine that left etcd accepts TCP until it is powered off: the TCP check keeps
        // it in for that long, one backend at a time.
        let stale = seen.iter().filter(|o| o.tcp_live > o.serving).count() as u64;
        assert!(
            stale <= replicas as u64 * (DRAIN_AND_POWER_OFF + 1),
            "grace {grace}: {stale} s"
        );
        assert!(seen.iter().all(|o| o.tcp_live <= o.serving + 1));
        eprintln!(
            "external, grace {grace} s: rollout {} s, at least {worst_serving} of {} backends serving, {stale} s with one \
             TCP-live backend that fails requests",
            seen.len(),
            backends.len()
        );
    }
    // The same rollout with the load balancer listing the machines of the day (no pool of
    // their own, B7): after the rollout no backend is left.
    let mut r = Rollout::new(replicas, surge, Addresses::Fresh, Vec::new());
    let before: Vec<IpAddr> = r.machines.iter().filter_map(|m| m.address).collect();
    let seen = r.run(&before);
    assert_eq!(
        seen.last().unwrap().tcp_live,
        0,
        "every listed machine is gone"
    );
    assert!(seen.iter().filter(|o| o.serving == 0).count() > 0);
}

#[test]
fn a_pool_one_address_short_stalls_the_rollout_and_check_says_so() {
    // With replicas + 0 addresses the surge machine's claim never gets one: the model
    // stalls, which is why `check` blocks such a pool.
    let mut r = Rollout::new(
        3,
        1,
        Addresses::Pool(0),
        ["10.20.30.150", "10.20.30.151", "10.20.30.152"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect(),
    );
    for _ in 0..3600 {
        r.step();
    }
    assert!(
        r.machines.iter().any(|m| m.address.is_none())
            && r.machines.iter().filter(|m| m.outdated).count() == 3
    );
    let (_t, repo) = example_copy();
    let file = repo.join("clusters/lab-f/cluster.yaml");
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("10.20.30.150-10.20.30.153", "10.20.30.150-10.20.30.152");
    std::fs::write(&file, text).unwrap();
    let o = capstan(&["render", "clusters/lab-f"], &repo);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("endpoint-strategy") && stderr(&o).contains("rollout stalls"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_vip_moves_with_bounded_gaps_through_a_rollout() {
    // lab-g (strategy vip, Talos 1.13): the VIP is a Layer2VIPConfig document of the
    // control plane.
    let (_t, objects, plan) = render("lab-g", |s| s);
    let (replicas, surge) = tcp(&objects);
    let docs = control_plane_patches(&objects);
    let vip: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "Layer2VIPConfig")
        .collect();
    assert_eq!(vip.len(), 1);
    assert_eq!(
        (vip[0]["name"].as_str(), vip[0]["link"].as_str()),
        (Some("10.30.40.10"), Some("ens192"))
    );
    // Workers never carry it.
    for t in objects
        .iter()
        .filter(|o| o["kind"] == "TalosConfigTemplate")
    {
        assert!(!t.to_string().contains("Layer2VIPConfig"));
    }
    let mut r = Rollout::new(replicas, surge, Addresses::Fresh, Vec::new());
    let seen = r.run(&[]);
    // Gaps: seconds in which no node announces the VIP with a serving apiserver.
    let mut gaps = Vec::new();
    let mut run = 0u64;
    for o in &seen {
        if o.vip_serves {
            if run > 0 {
                gaps.push(run);
            }
            run = 0;
        } else {
            run += 1;
        }
    }
    assert_eq!(run, 0, "the VIP serves at the end");
    // The election is a FIFO queue and the provider removes the oldest machine first, so
    // every machine it replaces is the holder at that moment: one gap per replacement.
    assert_eq!(gaps.len(), replicas, "{gaps:?}");
    assert!(gaps.iter().all(|g| *g <= VIP_LEASE), "{gaps:?}");
    // What the runbook and check state is what the model shows.
    assert!(
        plan.contains(&format!("up to {VIP_LEASE} s later"))
            && plan.contains(&format!("up to {replicas} times per rollout")),
        "{plan}"
    );
    assert_eq!(
        u64::from(capstan::migration::check::VIP_FAILOVER_SECONDS),
        VIP_LEASE
    );
    eprintln!("vip: rollout {} s, gaps {gaps:?} s", seen.len());
    // The machines never ran below replicas - 1 serving apiservers.
    let mut r = Rollout::new(replicas, surge, Addresses::Fresh, Vec::new());
    let all: Vec<IpAddr> = (1..=250)
        .map(|i| IpAddr::from([10, 99, 0, i as u8]))
        .collect();
    assert!(r.run(&all).iter().all(|o| o.serving >= replicas - 1));
}

#[test]
fn the_vip_per_talos_version_validates_and_an_overlay_cannot_drop_it() {
    for (talos, k8s, kubeadm_interface) in
        [("v1.11.6", "v1.33.4", true), ("v1.12.0", "v1.34.1", false)]
    {
        let (_t, objects, _) = render("lab-g", |s| {
            // One issuer before Talos 1.13 (extraArgs is a string map).
            s.replacen(
                "    - https://lab-g.example.internal:6443\n    audiences:",
                "    audiences:",
                1,
            )
            .replace("talos: v1.13.2", &format!("talos: {talos}"))
            .replace("talos-v1.13.2-vmware", &format!("talos-{talos}-vmware"))
            .replace("kubernetes: v1.34.1", &format!("kubernetes: {k8s}"))
        });
        let patches = control_plane_patches(&objects);
        let interface = patches[0].pointer("/machine/network/interfaces/0");
        let document = patches.iter().find(|d| d["kind"] == "Layer2VIPConfig");
        assert_eq!(interface.is_some(), kubeadm_interface, "{talos}");
        assert_eq!(document.is_some(), !kubeadm_interface, "{talos}");
        assert_eq!(
            patches[0].pointer("/cluster/apiServer/certSANs/0"),
            Some(&Value::from("10.30.40.10"))
        );
    }
    // An overlay that takes the VIP out of the control plane's patches, or changes the
    // rollout, is refused (exit 2) naming what the endpoint needs.
    let (_t, repo) = example_copy();
    std::fs::create_dir_all(repo.join("overlays/drop")).unwrap();
    let cases = [
        "- target: {kind: TalosControlPlane}\n  type: json\n  patch:\n  - {op: remove, path: /spec/controlPlaneConfig/controlplane/strategicPatches/5}\n",
        "- target: {kind: TalosControlPlane}\n  type: json\n  patch:\n  - {op: replace, path: /spec/rolloutStrategy/rollingUpdate/maxSurge, value: 0}\n",
    ];
    for (patch, needle) in cases.iter().zip([
        "no Talos patch carries the VIP `10.30.40.10`",
        "spec.rolloutStrategy must stay",
    ]) {
        std::fs::write(
            repo.join("overlays/drop/overlay.yaml"),
            format!("apiVersion: capstan.dev/v1alpha1\nkind: Overlay\npatches:\n{patch}"),
        )
        .unwrap();
        let file = repo.join("clusters/lab-g/cluster.yaml");
        let text = std::fs::read_to_string(&file).unwrap();
        if !text.contains("overlays/drop") {
            std::fs::write(
                &file,
                text.replace(
                    "  - overlays/autoscaler\n",
                    "  - overlays/autoscaler\n  - overlays/drop\n",
                ),
            )
            .unwrap();
        }
        let o = capstan(&["render", "clusters/lab-g"], &repo);
        assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
        assert!(stderr(&o).contains(needle), "{}", stderr(&o));
    }
}

#[test]
fn the_control_plane_pool_survives_overlays_or_the_render_refuses() {
    let (_t, repo) = example_copy();
    // The shipped vsphere-ipam overlay leaves the control plane's template alone.
    let o = capstan(&["render", "clusters/lab-f"], &repo);
    assert!(o.status.success(), "{}", stderr(&o));
    let objects = capstan::yaml::parse_stream(&stdout(&o)).unwrap();
    let pools: BTreeMap<String, String> = objects
        .iter()
        .filter(|o| o["kind"] == "VSphereMachineTemplate")
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_string(),
                o.pointer("/spec/template/spec/network/devices/0/addressesFromPools/0/name")
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(
        pools
            .values()
            .filter(|p| *p == "lab-f-cp-addresses")
            .count(),
        1,
        "{pools:?}"
    );
    assert_eq!(
        pools.values().filter(|p| *p == "node-ips").count(),
        2,
        "{pools:?}"
    );
    // Each of these is refused, naming the cause.
    let cases: [(&str, &str, &str); 3] = [
        (
            "overlays/vsphere-ipam/overlay.yaml",
            "    labelSelector: \"!capstan.dev/address-pool\"\n",
            "the first network device must take its address from the control-plane pool",
        ),
        (
            "overlays/vsphere-ipam/pool.yaml",
            "10.20.30.100-10.20.30.149",
            "hands out `10.20.30.150`, an address of the control-plane pool",
        ),
        (
            "clusters/lab-f/cluster.yaml",
            "      prefix: 24\n      gateway: 10.20.30.1\n",
            "spec.endpoint.controlPlanePool.prefix",
        ),
    ];
    for (file, from, needle) in cases {
        let (_t, repo) = example_copy();
        let path = repo.join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{file}: {from}");
        let to = match file {
            "overlays/vsphere-ipam/pool.yaml" => "10.20.30.100-10.20.30.159",
            "clusters/lab-f/cluster.yaml" => "      prefix: 40\n      gateway: 10.20.30.1\n",
            _ => "",
        };
        std::fs::write(&path, text.replace(from, to)).unwrap();
        let o = capstan(&["render", "clusters/lab-f"], &repo);
        assert_eq!(o.status.code(), Some(2), "{file}: {}", stdout(&o));
        assert!(stderr(&o).contains(needle), "{file}: {}", stderr(&o));
    }
}

/// Render `cluster` of a copy of the example repository with an extra overlay (its
/// `overlay.yaml` body after the header, and `files` beside it) and `edit` applied to its
/// cluster.yaml; the exit code and stderr.
fn render_with_overlay(
    cluster: &str,
    body: &str,
    files: &[(&str, &str)],
    edit: impl FnOnce(String) -> String,
) -> (Option<i32>, String) {
    let (_t, repo) = example_copy();
    let dir = repo.join("overlays/extra");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("overlay.yaml"),
        format!("apiVersion: capstan.dev/v1alpha1\nkind: Overlay\n{body}"),
    )
    .unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let file = repo.join(format!("clusters/{cluster}/cluster.yaml"));
    let text = std::fs::read_to_string(&file).unwrap();
    let text = edit(text.replacen("  overlays:\n", "  overlays:\n  - overlays/extra\n", 1));
    std::fs::write(&file, text).unwrap();
    let o = capstan(&["render", &format!("clusters/{cluster}")], &repo);
    (o.status.code(), stderr(&o))
}

#[test]
fn no_overlay_gets_past_the_endpoint_interlock() {
    let cases: &[(&str, &str, &str)] = &[
        // The control-plane pool: any field of its spec.
        (
            "lab-f",
            "patches:\n- target: {kind: InClusterIPPool, name: lab-f-cp-addresses}\n  type: merge\n  patch: {spec: {excludedAddresses: [10.20.30.150-10.20.30.152]}}\n",
            "its spec must be exactly spec.endpoint.controlPlanePool",
        ),
        (
            "lab-f",
            "patches:\n- target: {kind: InClusterIPPool, name: lab-f-cp-addresses}\n  type: merge\n  patch: {spec: {addressReuseGracePeriodSeconds: 600}}\n",
            "its spec must be exactly spec.endpoint.controlPlanePool",
        ),
        // Another pool, of either kind, handing out a control-plane address.
        (
            "lab-f",
            "resources: [pool.yaml]\n",
            "GlobalInClusterIPPool wide (from",
        ),
        // The VIP: deleted, moved to another link, hidden in an annotation, in the
        // other minor's form, or inside another pool.
        (
            "lab-g",
            "talos:\n  controlPlane:\n  - {apiVersion: v1alpha1, kind: Layer2VIPConfig, name: 10.30.40.10, $patch: delete}\n",
            "must be set once by capstan and not touched by another patch",
        ),
        (
            "lab-g",
            "talos:\n  controlPlane:\n  - {apiVersion: v1alpha1, kind: Layer2VIPConfig, name: 10.30.40.10, link: ens999}\n",
            "must be set once by capstan and not touched by another patch",
        ),
        (
            "lab-g",
            "patches:\n- target: {kind: TalosControlPlane}\n  type: json\n  patch:\n  - {op: remove, path: /spec/controlPlaneConfig/controlplane/strategicPatches/5}\n  - {op: add, path: /metadata/annotations/x, value: \"{kind: Layer2VIPConfig, name: 10.30.40.10, link: ens192}\"}\n",
            "no Talos patch carries the VIP `10.30.40.10`",
        ),
        (
            "lab-g",
            "talos:\n  controlPlane:\n  - machine: {network: {interfaces: [{interface: ens192, vip: {ip: 10.30.40.10}}]}}\n",
            "must be set once by capstan and not touched by another patch",
        ),
        (
            "lab-g",
            "resources: [pool.yaml]\n",
            "hands out `10.30.40.10`, the VIP",
        ),
    ];
    for (cluster, body, needle) in cases {
        let pool = match *cluster {
            "lab-f" => "apiVersion: ipam.cluster.x-k8s.io/v1alpha2\nkind: GlobalInClusterIPPool\nmetadata: {name: wide}\nspec: {addresses: [10.20.30.100-10.20.30.200], prefix: 24, gateway: 10.20.30.1}\n",
            _ => "apiVersion: ipam.cluster.x-k8s.io/v1alpha2\nkind: InClusterIPPool\nmetadata: {name: nodes}\nspec: {addresses: [10.30.40.2-10.30.40.100], prefix: 24, gateway: 10.30.40.1}\n",
        };
        let (code, err) = render_with_overlay(cluster, body, &[("pool.yaml", pool)], |s| s);
        assert_eq!(code, Some(2), "{cluster}: {body}\n{err}");
        assert!(err.contains(needle), "{cluster}: {body}\n{err}");
    }
    // The replicas an overlay sets: the pool must hold them and the surge.
    let (code, err) = render_with_overlay(
        "lab-f",
        "patches:\n- target: {kind: TalosControlPlane}\n  type: merge\n  patch: {spec: {replicas: 5}}\n",
        &[],
        to_complete,
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("5 replicas and a surge of 1 need 6 addresses, the control-plane pool `lab-f-cp-addresses` hands out 4"),
        "{err}"
    );
}

#[test]
fn a_vip_on_the_load_balancers_address_waits_for_phase_complete() {
    let vip = |s: String| {
        s.replace("host: lab-f.example.internal", "host: 10.20.30.10").replace(
            "    strategy: external\n    controlPlanePool:\n      addresses: [10.20.30.150-10.20.30.153]\n      prefix: 24\n      gateway: 10.20.30.1\n",
            "    strategy: vip\n    vip: {address: 10.20.30.10, link: ens192}\n",
        )
    };
    let (_t, repo) = example_copy();
    let file = repo.join("clusters/lab-f/cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, vip(text.clone())).unwrap();
    let o = capstan(&["render", "clusters/lab-f"], &repo);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("the VIP `10.20.30.10` is the endpoint's address, which the load balancer holds during the migration"),
        "{}",
        stderr(&o)
    );
    // In phase complete it renders.
    std::fs::write(&file, to_complete(vip(text))).unwrap();
    let o = capstan(&["render", "clusters/lab-f"], &repo);
    assert!(o.status.success(), "{}", stderr(&o));
}
