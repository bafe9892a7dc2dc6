//! Overlays end to end, as scenarios over temporary copies of the example repository:
//! "these overlay files, then exactly these objects". Base only, one overlay, a chain of
//! three, Talos patches, each patch kind, selectors matching several objects, and every
//! error class (exit 2, the message naming the file, patch, operation and pointer, the
//! previous output untouched). Patched templates get new content-hash names and every
//! reference follows.

use crate::util::*;
use serde_json::Value;
use std::path::Path;

/// Write a file under the repository, creating its directory.
pub fn write(repo: &Path, rel: &str, text: &str) {
    let p = repo.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// Replace a cluster's `spec.overlays` list (an empty list removes it).
pub fn set_overlays(repo: &Path, cluster: &str, overlays: &[&str]) {
    let file = repo.join("clusters").join(cluster).join("cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let text = if text.contains("\n  overlays:\n") {
        text
    } else {
        text.replacen("\n  recipients:\n", "\n  overlays:\n  recipients:\n", 1)
    };
    let mut out = String::new();
    let mut in_list = false;
    for line in text.lines() {
        if line == "  overlays:" {
            in_list = true;
            if !overlays.is_empty() {
                out.push_str("  overlays:\n");
                for o in overlays {
                    out.push_str(&format!("  - {o}\n"));
                }
            }
            continue;
        }
        if in_list && line.starts_with("  - ") {
            continue;
        }
        in_list = false;
        out.push_str(line);
        out.push('\n');
    }
    std::fs::write(&file, out).unwrap();
}

pub const HEAD: &str = "apiVersion: capstan.dev/v1alpha1\nkind: Overlay\n";

/// Give lab-f a VIP instead of its own control-plane pool (`external`), for scenarios
/// about what overlays do to every machine template alike.
pub fn without_control_plane_pool(repo: &Path) {
    let file = repo.join("clusters/lab-f/cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let from = "    strategy: external\n    controlPlanePool:\n      addresses: [10.20.30.150-10.20.30.153]\n      prefix: 24\n      gateway: 10.20.30.1\n";
    assert!(text.contains(from), "lab-f's endpoint strategy changed");
    let text = text.replacen(
        from,
        "    strategy: vip\n    vip: {address: 10.20.30.10, link: ens192}\n",
        1,
    );
    std::fs::write(&file, text).unwrap();
}

/// Render one cluster of the repository; the objects.
fn render(repo: &Path, cluster: &str) -> Vec<Value> {
    let o = capstan(&["render", &format!("clusters/{cluster}")], repo);
    assert!(o.status.success(), "{}", stderr(&o));
    capstan::yaml::parse_stream(&stdout(&o)).unwrap()
}

fn of_kind<'a>(objs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objs.iter().filter(|o| o["kind"] == kind).collect()
}

fn name(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap()
}

/// The TalosControlPlane's and every MachineDeployment's references, as names.
fn refs(objs: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for o in objs {
        for p in [
            "/spec/infrastructureTemplate/name",
            "/spec/machineTemplate/spec/infrastructureRef/name",
            "/spec/template/spec/infrastructureRef/name",
            "/spec/template/spec/bootstrap/configRef/name",
        ] {
            if let Some(n) = o.pointer(p).and_then(Value::as_str) {
                out.push(n.to_string());
            }
        }
    }
    out
}

/// Every reference names an object that exists.
fn assert_refs_resolve(objs: &[Value]) {
    let names: Vec<&str> = objs.iter().map(name).collect();
    for r in refs(objs) {
        assert!(names.contains(&r.as_str()), "dangling reference {r}");
    }
}

/// Run render into `out` expecting exit 2; returns stderr after checking stdout is empty and
/// the previous output untouched.
fn render_fails(repo: &Path, cluster: &str) -> String {
    let out = repo.join("out");
    let before = snapshot(&out);
    let o = capstan(
        &["render", &format!("clusters/{cluster}"), "-o", "out"],
        repo,
    );
    assert_eq!(o.status.code(), Some(2), "stderr: {}", stderr(&o));
    assert!(stdout(&o).is_empty());
    assert_eq!(snapshot(&out), before, "output changed by a failed render");
    let err = stderr(&o);
    assert!(err.starts_with("error: "), "{err}");
    err
}

/// A copy of the example repository with lab-f rendered into `out/` once.
fn prepared() -> (tempfile::TempDir, std::path::PathBuf) {
    let (t, repo) = example_copy();
    let o = capstan(&["render", "clusters/lab-f", "-o", "out"], &repo);
    assert!(o.status.success(), "{}", stderr(&o));
    (t, repo)
}

#[test]
fn base_only_renders_the_templates_untouched() {
    let (_t, repo) = example_copy();
    without_control_plane_pool(&repo);
    set_overlays(&repo, "lab-f", &[]);
    let objs = render(&repo, "lab-f");
    assert!(of_kind(&objs, "InClusterIPPool").is_empty());
    for vmt in of_kind(&objs, "VSphereMachineTemplate") {
        let dev = &vmt["spec"]["template"]["spec"]["network"]["devices"][0];
        assert_eq!(dev["dhcp4"], true);
        assert!(dev.get("addressesFromPools").is_none());
    }
    let tcp = of_kind(&objs, "TalosControlPlane")[0];
    assert_eq!(
        tcp.pointer("/spec/controlPlaneConfig/controlplane/strategicPatches")
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_refs_resolve(&objs);
}

#[test]
fn one_overlay_renames_patched_templates_and_references_follow() {
    let (_t, repo) = example_copy();
    without_control_plane_pool(&repo);
    set_overlays(&repo, "lab-f", &[]);
    let base = render(&repo, "lab-f");
    set_overlays(&repo, "lab-f", &["overlays/vsphere-ipam"]);
    let objs = render(&repo, "lab-f");
    assert_eq!(objs.len(), base.len() + 1);
    let pool = of_kind(&objs, "InClusterIPPool");
    assert_eq!(pool.len(), 1);
    assert_eq!(name(pool[0]), "node-ips");
    assert_eq!(
        pool[0]["metadata"]["namespace"], "lab-f",
        "an extra object without a namespace gets the cluster's"
    );
    let (old, new): (Vec<&str>, Vec<&str>) = (
        of_kind(&base, "VSphereMachineTemplate")
            .into_iter()
            .map(name)
            .collect(),
        of_kind(&objs, "VSphereMachineTemplate")
            .into_iter()
            .map(name)
            .collect(),
    );
    assert_eq!(new.len(), 3);
    for (o, n) in old.iter().zip(&new) {
        assert_ne!(o, n, "a patched template gets a new content-hash name");
        assert_eq!(o[..o.len() - 10], n[..n.len() - 10], "same base name");
    }
    for vmt in of_kind(&objs, "VSphereMachineTemplate") {
        let dev = &vmt["spec"]["template"]["spec"]["network"]["devices"][0];
        assert_eq!(dev["dhcp4"], false);
        assert_eq!(
            dev["addressesFromPools"],
            serde_json::json!([{"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "node-ips"}])
        );
    }
    let r = refs(&objs);
    for n in &new {
        assert!(r.iter().any(|x| x == n), "{n} is referenced");
    }
    for o in &old {
        assert!(!r.iter().any(|x| x == o), "{o} is no longer referenced");
    }
    // TalosConfigTemplates are untouched: same names as without the overlay.
    let tct = |v: &[Value]| -> Vec<String> {
        of_kind(v, "TalosConfigTemplate")
            .into_iter()
            .map(|o| name(o).to_string())
            .collect()
    };
    assert_eq!(tct(&base), tct(&objs));
    assert_refs_resolve(&objs);
}

#[test]
fn talos_patch_overlay_appends_machine_config_and_renames_bootstrap_templates() {
    let (_t, repo) = example_copy();
    set_overlays(&repo, "lab-f", &[]);
    let base = render(&repo, "lab-f");
    set_overlays(&repo, "lab-f", &["overlays/talos-vmware"]);
    let objs = render(&repo, "lab-f");
    let patch = "machine:\n  install:\n    disk: /dev/sda\n";
    let tcp = of_kind(&objs, "TalosControlPlane")[0];
    let cp = tcp
        .pointer("/spec/controlPlaneConfig/controlplane/strategicPatches")
        .unwrap();
    assert_eq!(cp.as_array().unwrap().len(), 2);
    assert_eq!(cp[1], patch, "appended after capstan's own patch");
    for t in of_kind(&objs, "TalosConfigTemplate") {
        let p = t.pointer("/spec/template/spec/strategicPatches").unwrap();
        assert_eq!(p.as_array().unwrap().len(), 2);
        assert_eq!(p[1], patch);
    }
    let names = |v: &[Value]| -> Vec<String> {
        of_kind(v, "TalosConfigTemplate")
            .into_iter()
            .map(|o| name(o).to_string())
            .collect()
    };
    let (old, new) = (names(&base), names(&objs));
    assert_eq!(new.len(), 2);
    for (o, n) in old.iter().zip(&new) {
        assert_ne!(o, n);
    }
    let r = refs(&objs);
    assert!(new.iter().all(|n| r.contains(n)));
    assert_refs_resolve(&objs);
    // Talos patches for a named pool go to that pool only.
    write(
        &repo,
        "overlays/gpu/overlay.yaml",
        &format!("{HEAD}talos:\n  workers:\n    ingress:\n    - machine:\n        sysctls:\n          net.core.somaxconn: \"65535\"\n"),
    );
    set_overlays(&repo, "lab-f", &["overlays/gpu"]);
    let objs = render(&repo, "lab-f");
    let tct = of_kind(&objs, "TalosConfigTemplate");
    let count = |t: &Value| {
        t.pointer("/spec/template/spec/strategicPatches")
            .unwrap()
            .as_array()
            .unwrap()
            .len()
    };
    assert!(name(tct[0]).starts_with("lab-f-general-") && count(tct[0]) == 1);
    assert!(name(tct[1]).starts_with("lab-f-ingress-") && count(tct[1]) == 2);
    assert_eq!(
        tct[1]
            .pointer("/spec/template/spec/strategicPatches/1")
            .unwrap(),
        "machine:\n  sysctls:\n    net.core.somaxconn: \"65535\"\n"
    );
}

#[test]
fn a_chain_of_three_applies_bases_first_each_once() {
    let (_t, repo) = example_copy();
    // a builds on b and c; b builds on c: c applies once, then b, then a. Each checks the
    // trail its bases left (a JSON patch `test`) before extending it.
    write(
        &repo,
        "overlays/c/overlay.yaml",
        &format!("{HEAD}patches:\n- target: {{kind: Cluster}}\n  type: merge\n  patch: {{metadata: {{annotations: {{trail: c}}, labels: {{last: c}}}}}}\n"),
    );
    write(
        &repo,
        "overlays/b/overlay.yaml",
        &format!("{HEAD}bases: [../c]\npatches:\n- target: {{kind: Cluster}}\n  type: json\n  patch:\n  - {{op: test, path: /metadata/annotations/trail, value: c}}\n  - {{op: replace, path: /metadata/annotations/trail, value: \"c,b\"}}\n"),
    );
    write(
        &repo,
        "overlays/a/overlay.yaml",
        &format!("{HEAD}bases: [../b, ../c]\npatches:\n- target: {{kind: Cluster}}\n  type: json\n  patch:\n  - {{op: test, path: /metadata/annotations/trail, value: \"c,b\"}}\n  - {{op: replace, path: /metadata/annotations/trail, value: \"c,b,a\"}}\n  - {{op: add, path: /metadata/labels/last, value: a}}\n"),
    );
    set_overlays(&repo, "lab-f", &["overlays/a"]);
    let objs = render(&repo, "lab-f");
    let cluster = of_kind(&objs, "Cluster")[0];
    assert_eq!(cluster["metadata"]["annotations"]["trail"], "c,b,a");
    assert_eq!(cluster["metadata"]["labels"]["last"], "a");
    // Listing the base again in cluster.yaml changes nothing: each overlay applies once.
    set_overlays(&repo, "lab-f", &["overlays/c", "overlays/a"]);
    let again = render(&repo, "lab-f");
    assert_eq!(again, objs);
    // The lock records every overlay file read.
    let o = capstan(&["render", "clusters/lab-f", "-o", "out"], &repo);
    assert!(o.status.success(), "{}", stderr(&o));
    let lock = std::fs::read_to_string(repo.join("out/lab-f/capstan.lock")).unwrap();
    for f in [
        "overlays/a/overlay.yaml",
        "overlays/b/overlay.yaml",
        "overlays/c/overlay.yaml",
    ] {
        assert!(lock.contains(&format!("- path: {f}\n")), "{f}: {lock}");
    }
}

#[test]
fn each_patch_kind_and_patch_files() {
    let (_t, repo) = example_copy();
    without_control_plane_pool(&repo);
    write(
        &repo,
        "overlays/kinds/overlay.yaml",
        &format!(
            "{HEAD}patches:\n\
             # RFC 7396: maps merge, null deletes, lists are replaced.\n\
             - target: {{kind: VSphereCluster}}\n  type: merge\n  patch:\n    spec:\n      thumbprint: null\n      clusterModules: [{{controlPlane: true, targetObjectName: x, moduleUUID: u}}]\n\
             # Strategic: devices merge by networkName, addressesFromPools by name.\n\
             - target: {{kind: VSphereMachineTemplate, name: lab-f-cp}}\n  type: strategic\n  path: devices.yaml\n\
             # RFC 6902 from a file.\n\
             - target: {{kind: MachineDeployment, name: lab-f-ingress}}\n  type: json\n  path: patches/ingress.yaml\n"
        ),
    );
    write(
        &repo,
        "overlays/kinds/devices.yaml",
        "spec:\n  template:\n    spec:\n      network:\n        devices:\n        - networkName: pg-k8s-lab-f\n          nameservers: [10.20.0.53]\n          addressesFromPools:\n          - {apiGroup: ipam.cluster.x-k8s.io, kind: InClusterIPPool, name: extra}\n        - networkName: pg-storage\n          dhcp4: true\n",
    );
    write(
        &repo,
        "overlays/kinds/patches/ingress.yaml",
        "- {op: add, path: /spec/template/spec/nodeDrainTimeout, value: 10m}\n- {op: copy, from: /spec/clusterName, path: /metadata/labels/copied}\n",
    );
    set_overlays(&repo, "lab-f", &["overlays/vsphere-ipam", "overlays/kinds"]);
    let objs = render(&repo, "lab-f");
    let vc = of_kind(&objs, "VSphereCluster")[0];
    assert!(vc["spec"].get("thumbprint").is_none());
    assert_eq!(vc["spec"]["clusterModules"][0]["targetObjectName"], "x");
    let vmts = of_kind(&objs, "VSphereMachineTemplate");
    let cp = &vmts[0]["spec"]["template"]["spec"]["network"]["devices"];
    assert_eq!(
        *cp,
        serde_json::json!([
            {"networkName": "pg-k8s-lab-f", "dhcp4": false,
             "addressesFromPools": [
                {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "node-ips"},
                {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "extra"}],
             "nameservers": ["10.20.0.53"]},
            {"networkName": "pg-storage", "dhcp4": true}
        ])
    );
    assert_eq!(
        vmts[1]["spec"]["template"]["spec"]["network"]["devices"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "the name selector picked the control plane's template only"
    );
    let mds = of_kind(&objs, "MachineDeployment");
    // The general pool keeps Cluster API's default (no drain timeout rendered), the patch
    // set ingress's.
    assert!(mds[0]
        .pointer("/spec/template/spec/nodeDrainTimeout")
        .is_none());
    assert_eq!(
        mds[1]
            .pointer("/spec/template/spec/nodeDrainTimeout")
            .unwrap(),
        "10m"
    );
    assert_eq!(mds[1]["metadata"]["labels"]["copied"], "lab-f");
    assert_refs_resolve(&objs);
}

#[test]
fn selectors_match_several_objects() {
    let (_t, repo) = example_copy();
    write(
        &repo,
        "overlays/sel/overlay.yaml",
        &format!(
            "{HEAD}patches:\n\
             - target: {{kind: MachineDeployment, name: \"lab-f-*\"}}\n  type: merge\n  patch: {{metadata: {{annotations: {{glob: \"yes\"}}}}}}\n\
             - target: {{group: infrastructure.cluster.x-k8s.io, version: v1beta1, labelSelector: \"cluster.x-k8s.io/cluster-name=lab-f,!nope\"}}\n  type: merge\n  patch: {{metadata: {{annotations: {{infra: \"yes\"}}}}}}\n\
             - target: {{namespace: lab-f, labelSelector: \"cluster.x-k8s.io/cluster-name in (lab-f, lab-x)\"}}\n  type: merge\n  patch: {{metadata: {{labels: {{team: platform}}}}}}\n"
        ),
    );
    set_overlays(&repo, "lab-f", &["overlays/sel"]);
    let objs = render(&repo, "lab-f");
    let with = |key: &str| -> Vec<String> {
        objs.iter()
            .filter(|o| o.pointer(&format!("/metadata/annotations/{key}")).is_some())
            .map(|o| format!("{} {}", o["kind"].as_str().unwrap(), name(o)))
            .collect()
    };
    let glob = with("glob");
    assert_eq!(glob.len(), 2, "{glob:?}");
    let infra = with("infra");
    assert_eq!(
        infra.len(),
        4,
        "VSphereCluster + 3 machine templates: {infra:?}"
    );
    let labelled = objs
        .iter()
        .filter(|o| o["metadata"]["labels"]["team"] == "platform")
        .count();
    assert!(labelled >= 8, "{labelled}");
    assert_refs_resolve(&objs);
}

#[test]
fn the_example_repository_uses_the_shipped_overlays() {
    for o in ["vsphere-ipam", "talos-vmware", "autoscaler"] {
        let shipped = snapshot(&root().join("overlays").join(o));
        assert!(shipped.iter().any(|(f, _)| f == "README.md"), "{o}");
        assert_eq!(
            snapshot(&example().join("overlays").join(o)),
            shipped,
            "examples/gitops/overlays/{o} is a copy of overlays/{o}"
        );
    }
    let objs = render(&example(), "lab-g");
    for md in of_kind(&objs, "MachineDeployment") {
        assert!(md["spec"].get("replicas").is_none());
        assert_eq!(
            md["metadata"]["annotations"]
                ["cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"],
            "10"
        );
    }
}

#[test]
fn error_bad_pointer_names_file_patch_operation_and_what_is_there() {
    let (_t, repo) = prepared();
    write(
        &repo,
        "overlays/bad/overlay.yaml",
        &format!("{HEAD}patches:\n- target: {{kind: Cluster}}\n  type: merge\n  patch: {{metadata: {{labels: {{a: b}}}}}}\n- target: {{kind: MachineDeployment}}\n  type: json\n  patch:\n  - {{op: add, path: /metadata/labels/x, value: y}}\n  - {{op: replace, path: /spec/replica, value: 3}}\n"),
    );
    set_overlays(&repo, "lab-f", &["overlays/bad"]);
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("overlays/bad/overlay.yaml: patches[1], operation 1 (`replace /spec/replica`): on MachineDeployment.cluster.x-k8s.io lab-f/lab-f-general: nothing at `/spec/replica`: `/spec` has keys clusterName, replicas, selector, template"),
        "{err}"
    );
    // An `add` below something missing says which part is missing.
    write(
        &repo,
        "overlays/bad/overlay.yaml",
        &format!("{HEAD}patches:\n- target: {{kind: Cluster}}\n  type: json\n  patch:\n  - {{op: add, path: /spec/topology/class, value: x}}\n"),
    );
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("patches[0], operation 0 (`add /spec/topology/class`): on Cluster.cluster.x-k8s.io lab-f/lab-f: nothing at `/spec/topology`: `/spec` has keys clusterNetwork, controlPlaneRef, infrastructureRef"),
        "{err}"
    );
}

#[test]
fn error_patch_matching_nothing() {
    let (_t, repo) = prepared();
    write(
        &repo,
        "overlays/none/overlay.yaml",
        &format!("{HEAD}patches:\n- target: {{kind: MachineDeployment, name: lab-f-gpu}}\n  type: merge\n  patch: {{metadata: {{labels: {{a: b}}}}}}\n"),
    );
    set_overlays(&repo, "lab-f", &["overlays/none"]);
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("overlays/none/overlay.yaml: patches[0]: target `kind=MachineDeployment, name=lab-f-gpu` matches no object (this cluster renders "),
        "{err}"
    );
    assert!(err.contains("set `optional: true`"), "{err}");
    // optional: fine.
    write(
        &repo,
        "overlays/none/overlay.yaml",
        &format!("{HEAD}patches:\n- target: {{kind: MachineDeployment, name: lab-f-gpu}}\n  optional: true\n  type: merge\n  patch: {{metadata: {{labels: {{a: b}}}}}}\n"),
    );
    render(&repo, "lab-f");
}

#[test]
fn error_cycle_and_base_at_or_above() {
    let (_t, repo) = prepared();
    write(
        &repo,
        "overlays/x/overlay.yaml",
        &format!("{HEAD}bases: [../y]\n"),
    );
    write(
        &repo,
        "overlays/y/overlay.yaml",
        &format!("{HEAD}bases: [../x]\n"),
    );
    set_overlays(&repo, "lab-f", &["overlays/x"]);
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("overlays/y/overlay.yaml: bases[0]: overlays form a cycle: overlays/x -> overlays/y -> overlays/x"),
        "{err}"
    );
    write(
        &repo,
        "overlays/x/sub/overlay.yaml",
        &format!("{HEAD}bases: [..]\n"),
    );
    set_overlays(&repo, "lab-f", &["overlays/x/sub"]);
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("overlays/x/sub/overlay.yaml: bases[0]: `..` (`overlays/x`) is at or above this overlay (`overlays/x/sub`)"),
        "{err}"
    );
    write(
        &repo,
        "overlays/x/sub/overlay.yaml",
        &format!("{HEAD}bases: [.]\n"),
    );
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("bases[0]: `.` (`overlays/x/sub`) is at or above"),
        "{err}"
    );
}

#[test]
fn error_escape_from_the_repository_root() {
    let (_t, repo) = prepared();
    set_overlays(&repo, "lab-f", &["../outside"]);
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("clusters/lab-f/cluster.yaml: spec.overlays[0]: `../outside` reaches outside the repository root"),
        "{err}"
    );
    write(
        &repo,
        "overlays/esc/overlay.yaml",
        &format!("{HEAD}resources: [../../../secret.yaml]\n"),
    );
    set_overlays(&repo, "lab-f", &["overlays/esc"]);
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("overlays/esc/overlay.yaml: resources[0]: `../../../secret.yaml` reaches outside the repository root"),
        "{err}"
    );
    write(
        &repo,
        "overlays/esc/overlay.yaml",
        &format!("{HEAD}bases: [../../..]\n"),
    );
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("bases[0]: `../../..` reaches outside"),
        "{err}"
    );
    // Through a symbolic link.
    #[cfg(unix)]
    {
        let outside = repo.parent().unwrap().join("elsewhere");
        write(&outside, "overlay.yaml", HEAD);
        std::os::unix::fs::symlink(&outside, repo.join("overlays/link")).unwrap();
        set_overlays(&repo, "lab-f", &["overlays/link"]);
        let err = render_fails(&repo, "lab-f");
        assert!(
            err.contains("spec.overlays[0]: `")
                && err.contains("resolves outside the repository root"),
            "{err}"
        );
        // A directory inside the repository whose overlay.yaml links out of it.
        std::fs::create_dir_all(repo.join("overlays/filelink")).unwrap();
        std::os::unix::fs::symlink(
            outside.join("overlay.yaml"),
            repo.join("overlays/filelink/overlay.yaml"),
        )
        .unwrap();
        set_overlays(&repo, "lab-f", &["overlays/filelink"]);
        let err = render_fails(&repo, "lab-f");
        assert!(
            err.contains("spec.overlays[0]: `")
                && err.contains(
                    "overlays/filelink/overlay.yaml` resolves outside the repository root"
                ),
            "{err}"
        );
    }
}

#[test]
fn error_unknown_field_in_overlay_yaml() {
    let (_t, repo) = prepared();
    write(
        &repo,
        "overlays/typo/overlay.yaml",
        &format!("{HEAD}patches:\n- target: {{kind: Cluster}}\n  type: merge\n  pacth: {{a: 1}}\n"),
    );
    set_overlays(&repo, "lab-f", &["overlays/typo"]);
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("overlays/typo/overlay.yaml: patches[0].pacth: unknown field `pacth`"),
        "{err}"
    );
    write(
        &repo,
        "overlays/typo/overlay.yaml",
        "apiVersion: capstan.dev/v1alpha1\nkind: Kustomization\n",
    );
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("overlays/typo/overlay.yaml: kind: expected `Overlay`, found `Kustomization`"),
        "{err}"
    );
    set_overlays(&repo, "lab-f", &["overlays/missing"]);
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("clusters/lab-f/cluster.yaml: spec.overlays[0]: `")
            && err.contains("overlays/missing` is not an overlay"),
        "{err}"
    );
}

#[test]
fn error_secrets_and_unsafe_phases_are_refused() {
    let (_t, repo) = prepared();
    write(
        &repo,
        "overlays/sec/overlay.yaml",
        &format!("{HEAD}resources: [s.yaml]\n"),
    );
    write(
        &repo,
        "overlays/sec/s.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata: {name: x}\nstringData: {password: hunter2}\n",
    );
    set_overlays(&repo, "lab-f", &["overlays/sec"]);
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("overlays/sec/overlay.yaml: resources: "),
        "{err}"
    );
    assert!(
        err.contains("holds a Secret: overlays may not carry secrets"),
        "{err}"
    );
    assert!(!err.contains("hunter2"));
    // lab-f is in phase `prepare`: removing replicas would let the webhook create workers.
    set_overlays(&repo, "lab-f", &["overlays/autoscaler"]);
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("migration interlock: MachineDeployment lab-f-general has no spec.replicas in phase `prepare`"),
        "{err}"
    );
    // A patch that removes the object's identity is refused.
    set_overlays(&repo, "lab-f", &["overlays/sec"]);
    write(
        &repo,
        "overlays/sec/overlay.yaml",
        &format!("{HEAD}patches:\n- target: {{kind: Cluster}}\n  type: json\n  patch: [{{op: remove, path: /metadata/name}}]\n"),
    );
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("overlays/sec/overlay.yaml: patches[0]: on Cluster.cluster.x-k8s.io lab-f/lab-f: the object lost `metadata.name`"),
        "{err}"
    );
}

#[test]
fn error_patch_renaming_an_object_or_changing_a_migration_job() {
    let (_t, repo) = prepared();
    // A rename would leave the MachineDeployment's infrastructureRef dangling.
    write(
        &repo,
        "overlays/bad/overlay.yaml",
        &format!("{HEAD}patches:\n- target: {{kind: VSphereMachineTemplate, name: lab-f-general}}\n  type: json\n  patch:\n  - {{op: replace, path: /metadata/name, value: renamed}}\n"),
    );
    set_overlays(&repo, "lab-f", &["overlays/bad"]);
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("overlays/bad/overlay.yaml: patches[0]: on VSphereMachineTemplate.infrastructure.cluster.x-k8s.io lab-f/lab-f-general: the patch changes `metadata.name` from `lab-f-general` to `renamed`: a patch may not rename an object"),
        "{err}"
    );
    write(
        &repo,
        "overlays/bad/overlay.yaml",
        &format!("{HEAD}patches:\n- target: {{kind: Cluster}}\n  type: merge\n  patch: {{metadata: {{namespace: elsewhere}}}}\n"),
    );
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("the patch changes `metadata.namespace` from `lab-f` to `elsewhere`"),
        "{err}"
    );
    // The migration Job guards the bootstrap: its spec is not an overlay's to change.
    write(
        &repo,
        "overlays/bad/overlay.yaml",
        &format!("{HEAD}patches:\n- target: {{kind: Job}}\n  type: json\n  patch:\n  - {{op: replace, path: /spec/template/spec/containers/0/command, value: [\"true\"]}}\n"),
    );
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("overlays/bad/overlay.yaml: patches[0]: on Job.batch lab-f/lab-f-capstan-migration-bootstrapped: this is one of capstan's migration objects (template migration/bootstrapped-job.yaml), and the patch changes `spec`: overlays may add labels and annotations to them, nothing else"),
        "{err}"
    );
    // Nor its existing annotations (the Argo CD hook).
    write(
        &repo,
        "overlays/bad/overlay.yaml",
        &format!("{HEAD}patches:\n- target: {{kind: Job}}\n  type: merge\n  patch: {{metadata: {{annotations: {{argocd.argoproj.io/hook: Skip}}}}}}\n"),
    );
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("the patch changes the annotation `argocd.argoproj.io/hook`"),
        "{err}"
    );
    // Labels and new annotations on every object, migration objects included, are fine.
    write(
        &repo,
        "overlays/bad/overlay.yaml",
        &format!("{HEAD}patches:\n- target: {{name: \"*\"}}\n  type: merge\n  patch: {{metadata: {{labels: {{team: platform}}, annotations: {{owner: platform}}}}}}\n"),
    );
    let objs = render(&repo, "lab-f");
    let job = of_kind(&objs, "Job")[0];
    assert_eq!(job["metadata"]["labels"]["team"], "platform");
    assert_eq!(job["metadata"]["annotations"]["owner"], "platform");
    assert_eq!(
        job["metadata"]["annotations"]["argocd.argoproj.io/hook"],
        "Sync"
    );
}

#[test]
fn strategic_patches_merge_built_in_lists_delete_objects_and_refuse_directives() {
    let (_t, repo) = prepared();
    write(
        &repo,
        "overlays/apps/extra.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers:\n      - name: app\n        image: web:1\n        env: [{name: A, value: \"1\"}]\n      - {name: proxy, image: proxy:1}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: scratch}\ndata: {a: \"1\"}\n",
    );
    write(
        &repo,
        "overlays/apps/overlay.yaml",
        &format!("{HEAD}resources: [extra.yaml]\npatches:\n\
         - target: {{kind: Deployment, name: web}}\n  type: strategic\n  patch: {{spec: {{template: {{spec: {{containers: [{{name: app, env: [{{name: B, value: \"2\"}}]}}, {{name: proxy, $patch: delete}}]}}}}}}}}\n\
         - target: {{kind: ConfigMap, name: scratch}}\n  type: strategic\n  patch: {{$patch: delete}}\n"),
    );
    set_overlays(&repo, "lab-f", &["overlays/apps"]);
    let objs = render(&repo, "lab-f");
    let web = of_kind(&objs, "Deployment")[0];
    assert_eq!(
        web["spec"]["template"]["spec"]["containers"],
        serde_json::json!([{"name": "app", "image": "web:1", "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]}]),
        "env merged by name (the patch's items first, as kustomize), the proxy deleted"
    );
    assert!(
        of_kind(&objs, "ConfigMap").is_empty(),
        "deleted by `$patch: delete`"
    );
    // capstan's migration objects cannot be deleted.
    write(
        &repo,
        "overlays/apps/overlay.yaml",
        &format!("{HEAD}patches:\n- target: {{kind: Job}}\n  type: strategic\n  patch: {{$patch: delete}}\n"),
    );
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("this is one of capstan's migration objects (template migration/bootstrapped-job.yaml), and the patch deletes it"),
        "{err}"
    );
    // Nothing rendered from capstan's templates may be deleted (the worker pools, their
    // health checks, the cluster's identity): Argo CD would prune the running objects.
    for (target, id) in [
        (
            "kind: MachineDeployment",
            "MachineDeployment.cluster.x-k8s.io lab-f/lab-f-general",
        ),
        (
            "kind: TalosControlPlane",
            "TalosControlPlane.controlplane.cluster.x-k8s.io lab-f/lab-f-cp",
        ),
        ("kind: Cluster", "Cluster.cluster.x-k8s.io lab-f/lab-f"),
        (
            "kind: VSphereMachineTemplate, name: lab-f-general",
            "VSphereMachineTemplate.infrastructure.cluster.x-k8s.io lab-f/lab-f-general",
        ),
        (
            "kind: InClusterIPPool, name: lab-f-cp-addresses",
            "InClusterIPPool.ipam.cluster.x-k8s.io lab-f/lab-f-cp-addresses",
        ),
    ] {
        write(
            &repo,
            "overlays/apps/overlay.yaml",
            &format!("{HEAD}patches:\n- target: {{{target}}}\n  type: strategic\n  patch: {{$patch: delete}}\n"),
        );
        let err = render_fails(&repo, "lab-f");
        assert!(err.contains(&format!("on {id}: the patch deletes it (`$patch: delete`), but it is rendered from capstan's template `")), "{target}: {err}");
        assert!(err.contains("an overlay may delete only objects that overlays add (their `resources`): change cluster.yaml instead"), "{target}: {err}");
    }
    // lab-g's pools have health checks.
    write(
        &repo,
        "overlays/apps/overlay.yaml",
        &format!("{HEAD}patches:\n- target: {{kind: MachineHealthCheck}}\n  type: strategic\n  patch: {{$patch: delete}}\n"),
    );
    set_overlays(&repo, "lab-g", &["overlays/apps"]);
    let err = render_fails(&repo, "lab-g");
    assert!(
        err.contains("on MachineHealthCheck.cluster.x-k8s.io lab-g/")
            && err.contains("it is rendered from capstan's template `"),
        "{err}"
    );
    set_overlays(&repo, "lab-g", &[]);
    // An object an overlay added, still referenced (here a cluster-scoped pool named by a
    // machine template, in another namespace), stays too.
    write(
        &repo,
        "overlays/apps/pool.yaml",
        "apiVersion: ipam.cluster.x-k8s.io/v1alpha2\nkind: GlobalInClusterIPPool\nmetadata: {name: shared}\nspec: {addresses: [10.9.0.10-10.9.0.20], prefix: 24, gateway: 10.9.0.1}\n",
    );
    write(
        &repo,
        "overlays/apps/overlay.yaml",
        &format!("{HEAD}resources: [pool.yaml]\npatches:\n\
         - target: {{kind: VSphereMachineTemplate, name: lab-f-general}}\n  type: json\n  patch: [{{op: add, path: /spec/template/spec/network/devices/0/addressesFromPools, value: [{{apiGroup: ipam.cluster.x-k8s.io, kind: GlobalInClusterIPPool, name: shared}}]}}]\n\
         - target: {{kind: GlobalInClusterIPPool}}\n  type: strategic\n  patch: {{$patch: delete}}\n"),
    );
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("on GlobalInClusterIPPool.ipam.cluster.x-k8s.io/shared: the patch deletes it (`$patch: delete`), but VSphereMachineTemplate/lab-f-general references it: remove the reference first"),
        "{err}"
    );
    // A directive capstan does not know is refused with the field's path, never written out.
    write(
        &repo,
        "overlays/apps/overlay.yaml",
        &format!("{HEAD}patches:\n- target: {{kind: MachineDeployment}}\n  type: strategic\n  patch: {{spec: {{template: {{spec: {{$setElementOrderX: []}}}}}}}}\n"),
    );
    let err = render_fails(&repo, "lab-f");
    assert!(
        err.contains("strategic patch on MachineDeployment.cluster.x-k8s.io lab-f/lab-f-general: `spec.template.spec`: unknown directive `$setElementOrderX`"),
        "{err}"
    );
}

/// A patch cannot move an object to another API group (Argo CD would prune the real one,
/// as if it were deleted); the version within the group may change.
#[test]
fn a_patch_cannot_change_an_objects_api_group() {
    let (_t, repo) = prepared();
    for (target, patch) in [
        (
            "kind: Cluster",
            "type: merge\n  patch: {apiVersion: example.com/v1}",
        ),
        (
            "kind: TalosControlPlane",
            "type: json\n  patch:\n  - {op: replace, path: /apiVersion, value: example.com/v1}",
        ),
        (
            "kind: MachineDeployment",
            "type: merge\n  patch: {apiVersion: example.com/v1beta1}",
        ),
    ] {
        write(
            &repo,
            "overlays/group/overlay.yaml",
            &format!("{HEAD}patches:\n- target: {{{target}}}\n  {patch}\n"),
        );
        set_overlays(&repo, "lab-f", &["overlays/group"]);
        let err = render_fails(&repo, "lab-f");
        assert!(
            err.contains("the patch changes `apiVersion's API group` from `"),
            "{target}: {err}"
        );
    }
}
