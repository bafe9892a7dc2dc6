//! `capstan render` end to end: golden output for both flavours, byte-for-byte determinism,
//! the bundle directory (kustomization, lock, stale-file removal) and every error class,
//! each with exit code 2, a message naming the file and field, and the output untouched.

use crate::util::*;
use std::path::Path;

#[test]
fn golden_v1beta1_lab_f() {
    let o = capstan(&["render", "examples/gitops/clusters/lab-f"], &root());
    assert!(o.status.success(), "{}", stderr(&o));
    assert_golden("render-lab-f.yaml", &stdout(&o));
}

#[test]
fn golden_v1beta2_lab_g() {
    let o = capstan(&["render", "examples/gitops/clusters/lab-g"], &root());
    assert!(o.status.success(), "{}", stderr(&o));
    assert_golden("render-lab-g.yaml", &stdout(&o));
}

#[test]
fn repository_renders_every_cluster_in_name_order() {
    let o = capstan(&["render", "examples/gitops"], &root());
    assert!(o.status.success(), "{}", stderr(&o));
    let f = std::fs::read_to_string(root().join("tests/golden/render-lab-f.yaml")).unwrap();
    let g = std::fs::read_to_string(root().join("tests/golden/render-lab-g.yaml")).unwrap();
    assert_eq!(stdout(&o), format!("{f}---\n{g}"));
    assert!(
        stderr(&o).is_empty(),
        "nothing but YAML is printed: {}",
        stderr(&o)
    );
}

#[test]
fn output_is_byte_identical_across_runs_and_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    for out in [&a, &b] {
        let o = capstan(
            &["render", "examples/gitops", "-o", out.to_str().unwrap()],
            &root(),
        );
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let (sa, sb) = (snapshot(&a), snapshot(&b));
    assert_eq!(
        sa.len(),
        2 * 2 + 23 + 20,
        "files: {:?}",
        sa.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    assert_eq!(sa, sb);
    let s1 = stdout(&capstan(&["render", "examples/gitops"], &root()));
    let s2 = stdout(&capstan(&["render", "examples/gitops"], &root()));
    assert_eq!(s1, s2);
    // The same inputs reached through another path give the same lock (paths are repo-relative).
    let (_t, repo) = example_copy();
    let c = tmp.path().join("c");
    let o = capstan(
        &[
            "render",
            "clusters/lab-f",
            "clusters/lab-g",
            "-o",
            c.to_str().unwrap(),
        ],
        &repo,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(snapshot(&c), sa);
}

#[test]
fn bundle_files_match_the_stream_in_kustomization_order() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = capstan(
        &[
            "render",
            "examples/gitops/clusters/lab-f",
            "-o",
            out.to_str().unwrap(),
        ],
        &root(),
    );
    assert!(o.status.success());
    assert!(stdout(&o).is_empty(), "with -o nothing goes to stdout");
    let dir = out.join("lab-f");
    let kustomization = std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap();
    let files: Vec<&str> = kustomization
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .collect();
    assert_eq!(files.len(), 23);
    assert!(
        files[7].starts_with("secret-lab-f-") && files[8].starts_with("secret-lab-f-"),
        "{files:?}"
    );
    let joined: Vec<String> = files
        .iter()
        .map(|f| std::fs::read_to_string(dir.join(f)).unwrap())
        .collect();
    let stream = stdout(&capstan(
        &["render", "examples/gitops/clusters/lab-f"],
        &root(),
    ));
    assert_eq!(joined.join("---\n"), stream);
    let lock = std::fs::read_to_string(dir.join("capstan.lock")).unwrap();
    for f in &files {
        assert!(
            lock.contains(&format!("- path: {f}\n")),
            "{f} missing from lock"
        );
    }
    assert!(lock.contains("- path: clusters/lab-f/cluster.yaml\n"));
}

#[test]
fn stale_files_are_removed_and_foreign_files_refused() {
    let (_t, repo) = example_copy();
    let out = repo.join("out");
    let o = capstan(&["render", "clusters/lab-f", "-o", "out"], &repo);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out
        .join("lab-f/machinedeployment-lab-f-ingress.yaml")
        .exists());
    // Drop the ingress pool: its files disappear, the rest is rewritten.
    let file = repo.join("clusters/lab-f/cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let start = text.find("  - name: ingress").unwrap();
    let end = text.find("  # The migration").unwrap();
    std::fs::write(&file, format!("{}{}", &text[..start], &text[end..])).unwrap();
    let o = capstan(&["render", "clusters/lab-f", "-o", "out"], &repo);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("lab-f: updated"), "{}", stderr(&o));
    assert!(!out
        .join("lab-f/machinedeployment-lab-f-ingress.yaml")
        .exists());
    let names: Vec<String> = snapshot(&out).into_iter().map(|f| f.0).collect();
    assert!(!names.iter().any(|n| n.contains("ingress")), "{names:?}");
}

/// Run render into `out` expecting exit 2; returns stderr after checking stdout is empty
/// and the previous output is untouched.
fn render_fails(repo: &Path, args: &[&str]) -> String {
    let out = repo.join("out");
    let before = snapshot(&out);
    let mut all = vec!["render"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "out"]);
    let o = capstan(&all, repo);
    assert_eq!(
        o.status.code(),
        Some(2),
        "stdout: {}\nstderr: {}",
        stdout(&o),
        stderr(&o)
    );
    assert!(stdout(&o).is_empty());
    assert_eq!(snapshot(&out), before, "output changed by a failed render");
    let err = stderr(&o);
    assert!(err.starts_with("error: "), "{err}");
    err
}

fn prepared_repo() -> (tempfile::TempDir, std::path::PathBuf) {
    let (t, repo) = example_copy();
    let o = capstan(
        &["render", "clusters/lab-f", "clusters/lab-g", "-o", "out"],
        &repo,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    (t, repo)
}

fn edit(repo: &Path, cluster: &str, from: &str, to: &str) {
    let file = repo.join("clusters").join(cluster).join("cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains(from), "{from} not in {cluster}");
    std::fs::write(&file, text.replacen(from, to, 1)).unwrap();
}

#[test]
fn error_bad_field_value() {
    let (_t, repo) = prepared_repo();
    edit(&repo, "lab-f", "numCPUs: 4", "numCPUs: 1");
    let err = render_fails(&repo, &["clusters/lab-f"]);
    assert!(
        err.contains("clusters/lab-f/cluster.yaml: spec.controlPlane.machine.numCPUs: must be at least 2, got 1"),
        "{err}"
    );
}

#[test]
fn error_unknown_field() {
    let (_t, repo) = prepared_repo();
    edit(
        &repo,
        "lab-g",
        "    dnsDomain: cluster.local",
        "    dnsDomain: cluster.local\n    podCIDR: 10.0.0.0/8",
    );
    let err = render_fails(&repo, &["clusters/lab-g"]);
    assert!(
        err.contains("clusters/lab-g/cluster.yaml: spec.network.podCIDR: unknown field `podCIDR`"),
        "{err}"
    );
}

#[test]
fn error_wrong_type() {
    let (_t, repo) = prepared_repo();
    edit(&repo, "lab-g", "replicas: 4", "replicas: four");
    let err = render_fails(&repo, &["clusters/lab-g"]);
    assert!(
        err.contains("clusters/lab-g/cluster.yaml: spec.workers[0].replicas: invalid type"),
        "{err}"
    );
}

#[test]
fn error_unsupported_version_pair() {
    let (_t, repo) = prepared_repo();
    edit(&repo, "lab-f", "kubernetes: v1.30.4", "kubernetes: v1.34.1");
    let err = render_fails(&repo, &["clusters/lab-f"]);
    assert!(
        err.contains("clusters/lab-f/cluster.yaml: spec.versions.kubernetes: Kubernetes v1.34.1 is not supported by Talos v1.10"),
        "{err}"
    );
}

#[test]
fn error_identity_mismatch_blocks_render() {
    let (_t, repo) = prepared_repo();
    edit(&repo, "lab-f", "keyName: key2", "keyName: key0");
    let err = render_fails(&repo, &["clusters/lab-f"]);
    assert!(
        err.contains("spec.encryption.keyName: Talos names its secretbox key `key2`"),
        "{err}"
    );
    assert!(
        err.contains("no matching prefix found"),
        "names the error the cluster would show: {err}"
    );
}

#[test]
fn error_template() {
    let (_t, repo) = prepared_repo();
    std::fs::create_dir_all(repo.join("templates/v1beta1")).unwrap();
    let builtin =
        std::fs::read_to_string(root().join("templates/v1beta1/vspherecluster.yaml")).unwrap();
    std::fs::write(
        repo.join("templates/v1beta1/vspherecluster.yaml"),
        builtin.replace("{{ vsphere.server }}", "{{ vsphere.sever }}"),
    )
    .unwrap();
    let err = render_fails(&repo, &["clusters/lab-f"]);
    assert!(
        err.contains("template `v1beta1/vspherecluster.yaml` ("),
        "{err}"
    );
    assert!(
        err.contains("templates/v1beta1/vspherecluster.yaml) line "),
        "{err}"
    );
    assert!(err.contains("undefined value"), "{err}");
}

#[test]
fn error_template_override_that_does_not_exist() {
    let (_t, repo) = prepared_repo();
    std::fs::create_dir_all(repo.join("templates/v1beta1")).unwrap();
    std::fs::write(repo.join("templates/v1beta1/clustr.yaml"), "x: 1\n").unwrap();
    let err = render_fails(&repo, &["clusters/lab-f"]);
    assert!(
        err.contains("`v1beta1/clustr.yaml` is not a template capstan knows"),
        "{err}"
    );
}

#[test]
fn error_template_override_applies_when_valid() {
    let (_t, repo) = example_copy();
    std::fs::create_dir_all(repo.join("templates/v1beta2")).unwrap();
    let builtin =
        std::fs::read_to_string(root().join("templates/v1beta2/vspherecluster.yaml")).unwrap();
    std::fs::write(
        repo.join("templates/v1beta2/vspherecluster.yaml"),
        builtin.replace("spec:\n", "spec:\n  disableClusterModule: true\n"),
    )
    .unwrap();
    let o = capstan(&["render", "clusters/lab-g"], &repo);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("  disableClusterModule: true\n"));
}

#[test]
fn error_foreign_file_in_output() {
    let (_t, repo) = prepared_repo();
    std::fs::write(repo.join("out/lab-g/extra.yaml"), "kind: Mine\n").unwrap();
    let err = render_fails(&repo, &["clusters/lab-f", "clusters/lab-g"]);
    assert!(
        err.contains(
            "out/lab-g: refusing to write: this file was not written by capstan (extra.yaml)"
        ),
        "{err}"
    );
    // lab-f was checked and written all-or-nothing too: its files are unchanged (render_fails checked).
}

#[test]
fn error_missing_directory_and_yaml_syntax() {
    let (_t, repo) = prepared_repo();
    let err = render_fails(&repo, &["clusters/nope"]);
    assert!(err.contains("clusters/nope"), "{err}");
    // The OS error is said once, though it is both in the message and its source.
    assert_eq!(err.matches("(os error 2)").count(), 1, "{err}");
    std::fs::write(
        repo.join("clusters/lab-f/cluster.yaml"),
        "spec: [unclosed\n",
    )
    .unwrap();
    let err = render_fails(&repo, &["clusters/lab-f"]);
    assert!(
        err.contains("clusters/lab-f/cluster.yaml: invalid YAML"),
        "{err}"
    );
}

#[test]
fn error_duplicate_cluster_names() {
    let (_t, repo) = prepared_repo();
    copy_tree(&repo.join("clusters/lab-f"), &repo.join("clusters/lab-f2"));
    let err = render_fails(&repo, &["."]);
    assert!(
        err.contains("cluster name `lab-f` is already used by"),
        "{err}"
    );
}

#[test]
fn unsafe_migration_phases_are_refused_with_the_reason() {
    let (_t, repo) = prepared_repo();
    edit(&repo, "lab-f", "phase: prepare", "phase: control-plane");
    let err = render_fails(&repo, &["clusters/lab-f"]);
    assert!(
        err.contains("spec.migration.acknowledge: phase `control-plane` requires `etcd-audit`"),
        "{err}"
    );
    edit(&repo, "lab-f", "phase: control-plane", "phase: workers");
    let err = render_fails(&repo, &["clusters/lab-f"]);
    assert!(
        err.contains("spec.migration.kubeadm: phase `workers` unpauses the TalosControlPlane"),
        "{err}"
    );
    assert!(
        err.contains("etcd audit would force-remove every etcd member"),
        "{err}"
    );
}

/// Item 7 of the migration issue: what `capstan check` blocks from cluster.yaml alone is not
/// rendered (here etcd 3.5.15 recorded for a cluster joined by Talos 1.11's etcd 3.6, and a
/// migration on the flavour whose providers no release is verified for).
#[test]
fn render_refuses_what_check_blocks_from_cluster_yaml_alone() {
    let (_t, repo) = prepared_repo();
    edit(&repo, "lab-f", "talos: v1.10.6", "talos: v1.11.2");
    let err = render_fails(&repo, &["clusters/lab-f"]);
    assert!(
        err.contains("capstan check blocks this cluster.yaml:")
            && err
                .contains("etcd-version-skew (spec.provenance.etcdVersion vs spec.versions.talos)")
            && err.contains("too many learner")
            || err.contains("3.5.20"),
        "{err}"
    );
    let o = capstan(&["check", "clusters/lab-f"], &repo);
    assert_eq!(o.status.code(), Some(1), "check blocks it too");
    edit(&repo, "lab-f", "talos: v1.11.2", "talos: v1.10.6");
    edit(&repo, "lab-f", "flavour: v1beta1", "flavour: v1beta2");
    let err = render_fails(&repo, &["clusters/lab-f"]);
    assert!(
        err.contains("provider-releases (spec.flavour vs spec.migration.phase): no provider release of flavour `v1beta2` is verified for phase `prepare`"),
        "{err}"
    );
}

#[test]
fn help_lists_commands() {
    let o = capstan(&["--help"], &root());
    assert!(o.status.success());
    let out = stdout(&o);
    for cmd in ["render", "validate"] {
        assert!(out.contains(cmd), "{out}");
    }
    let o = capstan(&["render", "--bogus"], &root());
    assert_eq!(o.status.code(), Some(2));
}

/// Ten copies of lab-f (`p01`..`p10`), enough for the parallel path of `pipeline::render`.
fn fleet_repo() -> (tempfile::TempDir, std::path::PathBuf) {
    let (t, repo) = example_copy();
    for i in 1..=10 {
        let name = format!("p{i:02}");
        lab_f_as(&repo.join("clusters").join(&name), &name, |yaml| yaml);
    }
    (t, repo)
}

#[test]
fn error_foreign_file_while_many_clusters_render_in_parallel() {
    let (_t, repo) = fleet_repo();
    let dirs: Vec<String> = (1..=10).map(|i| format!("clusters/p{i:02}")).collect();
    let mut args: Vec<&str> = vec!["render"];
    args.extend(dirs.iter().map(String::as_str));
    args.extend(["-o", "out"]);
    let o = capstan(&args, &repo);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(repo.join("out")).unwrap().count(), 10);
    std::fs::write(repo.join("out/p05/extra.yaml"), "kind: Mine\n").unwrap();
    let refs: Vec<&str> = dirs.iter().map(String::as_str).collect();
    // render_fails: exit 2, nothing on stdout, every file under out/ unchanged.
    let err = render_fails(&repo, &refs);
    assert!(
        err.contains(
            "out/p05: refusing to write: this file was not written by capstan (extra.yaml)"
        ),
        "{err}"
    );
    // No staging directory is left behind.
    let left: Vec<String> = std::fs::read_dir(repo.join("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Where the user stands does not change the render (issue 42): `render .` inside a
/// cluster's directory and `render lab-f` inside `clusters/` find the repository root (the
/// parent of `clusters/`) and its overlays, and give the bytes of `render clusters/lab-f`.
#[test]
fn the_repository_root_is_found_from_inside_it() {
    let root = example();
    let from_root = capstan(&["render", "clusters/lab-f"], &root);
    assert_eq!(from_root.status.code(), Some(0), "{}", stderr(&from_root));
    for (cwd, arg) in [
        (root.join("clusters/lab-f"), "."),
        (root.join("clusters/lab-f"), "./"),
        (root.join("clusters"), "lab-f"),
    ] {
        let o = capstan(&["render", arg], &cwd);
        assert_eq!(o.status.code(), Some(0), "{arg} in {cwd:?}: {}", stderr(&o));
        assert_eq!(stdout(&o), stdout(&from_root), "{arg} in {cwd:?}");
    }
    let o = capstan(&["plan", "."], &root.join("clusters/lab-f"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// The repository root is found from where capstan runs (issue 42): from inside a cluster
/// directory (`.`) and below it (`..`), the stream and the bundle (its lock's
/// repository-relative paths included) are those of a render from the repository root, with
/// lab-f's overlays applied.
#[test]
fn repository_root_is_found_from_inside_a_cluster() {
    let tmp = tempfile::tempdir().unwrap();
    let lab_f = example().join("clusters/lab-f");
    let top = tmp.path().join("top");
    let o = capstan_plain(
        &["render", "clusters/lab-f", "-o", top.to_str().unwrap()],
        &example(),
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let expected = stdout(&capstan_plain(
        &["render", "clusters/lab-f"],
        &example(),
        &[],
    ));
    assert!(expected.contains("kind: TalosControlPlane"));
    for (i, (cwd, dir)) in [(lab_f.clone(), "."), (lab_f.join("secrets"), "..")]
        .into_iter()
        .enumerate()
    {
        let o = capstan_plain(&["render", dir], &cwd, &[]);
        assert_eq!(
            (o.status.code(), stderr(&o)),
            (Some(0), String::new()),
            "render {dir} in {}",
            cwd.display()
        );
        assert!(stdout(&o) == expected, "render {dir}: another stream");
        let out = tmp.path().join(format!("out{i}"));
        let o = capstan_plain(&["render", dir, "-o", out.to_str().unwrap()], &cwd, &[]);
        assert!(o.status.success(), "{}", stderr(&o));
        let lock = |d: &Path| std::fs::read_to_string(d.join("lab-f/capstan.lock")).unwrap();
        assert_eq!(lock(&out), lock(&top), "render {dir} -o: another lock");
        assert!(
            snapshot(&out) == snapshot(&top),
            "render {dir} -o: another bundle"
        );
    }
}

/// `--repo-root` names the root where it cannot be found (a repository whose clusters are
/// not under `clusters/`), from the root and from inside the cluster; without it the
/// overlays are looked for in the cluster directory.
#[test]
fn repo_root_flag_names_the_root() {
    let (_t, repo) = example_copy();
    std::fs::rename(repo.join("clusters"), repo.join("sites")).unwrap();
    let expected = stdout(&capstan_plain(
        &["render", "clusters/lab-f"],
        &example(),
        &[],
    ));
    let o = capstan_plain(&["render", "sites/lab-f"], &repo, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("is not an overlay"), "{}", stderr(&o));
    for (cwd, args) in [
        (repo.clone(), ["render", "--repo-root", ".", "sites/lab-f"]),
        (
            repo.join("sites/lab-f"),
            ["render", "--repo-root", "../..", "."],
        ),
    ] {
        let o = capstan_plain(&args, &cwd, &[]);
        assert_eq!(
            (o.status.code(), stderr(&o)),
            (Some(0), String::new()),
            "{args:?}"
        );
        assert!(stdout(&o) == expected, "{args:?}: another stream");
    }
}

/// A wrong `--repo-root` is refused before anything is rendered, naming the flag and the
/// value as typed: a directory the cluster is not inside, a path that does not exist, a file.
#[test]
fn wrong_repo_root_is_refused_naming_it() {
    let mut report = String::new();
    for root in ["overlays", "missing", "clusters/lab-f/cluster.yaml"] {
        let o = capstan_plain(
            &["render", "--repo-root", root, "clusters/lab-f"],
            &example(),
            &[],
        );
        report.push_str(&format!(
            "$ capstan render --repo-root {root} clusters/lab-f\nexit {:?}\nstdout:\n{}stderr:\n{}\n",
            o.status.code(),
            stdout(&o),
            stderr(&o)
        ));
    }
    assert_golden("render-repo-root-refused.txt", &report);
}
