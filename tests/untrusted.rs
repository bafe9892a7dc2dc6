//! A repository is untrusted input (issue 22): every read stays inside it and is a regular
//! file of bounded size, templates run on bounded fuel, sealed Secrets are checked as
//! objects, `diff` never calls a broken file unchanged, and `render -o` is all-or-nothing.

use crate::util::*;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

/// Run capstan with a deadline: a hang is a failure, not a stuck test run.
fn capstan_within(args: &[&str], cwd: &Path, secs: u64) -> std::process::Output {
    let o = assert_cmd::Command::cargo_bin("capstan")
        .expect("binary built")
        .args(args)
        .current_dir(cwd)
        .timeout(Duration::from_secs(secs))
        .output()
        .expect("capstan runs");
    assert!(
        o.status.code().is_some(),
        "capstan {args:?} did not finish within {secs} s (or died of a signal): {}",
        stderr(&o)
    );
    o
}

fn mkfifo(path: &Path) {
    let st = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(st.success());
}

/// Exit 2, a message naming `needle`, and nothing on stdout.
fn refused(o: &std::process::Output, needle: &str) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    assert!(err.contains(needle), "stderr should name `{needle}`: {err}");
    assert!(o.stdout.is_empty(), "no output on a refusal: {}", stdout(o));
    err
}

/// An age identity outside the repository, as a CI runner holds one.
fn secret_outside(tmp: &Path) -> (std::path::PathBuf, String) {
    let key = tmp.join("ci-identity.txt");
    write_identity(&key);
    let text = std::fs::read_to_string(&key).unwrap();
    (key, text.trim().to_string())
}

#[test]
fn a_template_override_linking_out_of_the_repository_is_refused() {
    let (tmp, repo) = example_copy();
    let (key, secret) = secret_outside(tmp.path());
    std::fs::create_dir_all(repo.join("templates/talos")).unwrap();
    symlink(&key, repo.join("templates/talos/worker-patch.yaml")).unwrap();
    let o = capstan_within(&["render", "."], &repo, 60);
    let err = refused(&o, "templates/talos/worker-patch.yaml");
    assert!(err.contains("outside"), "{err}");
    assert!(!err.contains(&secret[20..]), "the key leaked: {err}");
    // The same through a linked directory.
    std::fs::remove_file(repo.join("templates/talos/worker-patch.yaml")).unwrap();
    std::fs::remove_dir(repo.join("templates/talos")).unwrap();
    std::fs::create_dir_all(tmp.path().join("elsewhere")).unwrap();
    std::fs::copy(&key, tmp.path().join("elsewhere/worker-patch.yaml")).unwrap();
    symlink(tmp.path().join("elsewhere"), repo.join("templates/talos")).unwrap();
    let o = capstan_within(&["render", "."], &repo, 60);
    refused(&o, "outside");
    // And `templates/` itself.
    std::fs::remove_file(repo.join("templates/talos")).unwrap();
    std::fs::remove_dir(repo.join("templates")).unwrap();
    symlink(tmp.path().join("elsewhere"), repo.join("templates")).unwrap();
    let o = capstan_within(&["render", "."], &repo, 60);
    refused(&o, "outside");
    // argocd generate reads the same templates.
    let o = capstan_within(&["argocd", "generate"], &repo, 60);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!stdout(&o).contains(&secret[20..]) && !stderr(&o).contains(&secret[20..]));
}

#[test]
fn a_link_inside_the_repository_is_followed() {
    let (_tmp, repo) = example_copy();
    std::fs::create_dir_all(repo.join("templates/talos")).unwrap();
    let builtin =
        std::fs::read_to_string(root().join("templates/talos/worker-patch.yaml")).unwrap();
    std::fs::write(repo.join("shared-worker-patch.yaml"), builtin).unwrap();
    symlink(
        "../../shared-worker-patch.yaml",
        repo.join("templates/talos/worker-patch.yaml"),
    )
    .unwrap();
    let o = capstan_within(&["render", "."], &repo, 60);
    assert!(o.status.success(), "{}", stderr(&o));
    let plain = capstan_within(&["render", "examples/gitops"], &root(), 60);
    assert_eq!(stdout(&o), stdout(&plain));
}

#[test]
fn cluster_and_sealed_files_linking_out_of_the_repository_are_refused() {
    let (tmp, repo) = example_copy();
    let (key, secret) = secret_outside(tmp.path());
    let sealed = repo.join("clusters/lab-f/secrets/lab-f-ca.yaml");
    std::fs::remove_file(&sealed).unwrap();
    symlink(&key, &sealed).unwrap();
    let o = capstan_within(&["render", "clusters/lab-f"], &repo, 60);
    let err = refused(&o, "lab-f-ca.yaml");
    assert!(
        err.contains("outside") && !err.contains(&secret[20..]),
        "{err}"
    );

    let (tmp, repo) = example_copy();
    let outside = tmp.path().join("cluster.yaml");
    std::fs::copy(repo.join("clusters/lab-f/cluster.yaml"), &outside).unwrap();
    std::fs::remove_file(repo.join("clusters/lab-f/cluster.yaml")).unwrap();
    symlink(&outside, repo.join("clusters/lab-f/cluster.yaml")).unwrap();
    let o = capstan_within(&["render", "."], &repo, 60);
    let err = refused(&o, "cluster.yaml");
    assert!(err.contains("outside"), "{err}");
    // A cluster directory that is a link out of the repository.
    let (tmp, repo) = example_copy();
    let moved = tmp.path().join("lab-f-elsewhere");
    std::fs::rename(repo.join("clusters/lab-f"), &moved).unwrap();
    symlink(&moved, repo.join("clusters/lab-f")).unwrap();
    let o = capstan_within(&["render", "."], &repo, 60);
    refused(&o, "outside");
}

#[test]
fn templates_named_on_the_command_line_must_exist() {
    let o = capstan_within(
        &[
            "render",
            "examples/gitops",
            "--templates",
            "no-such-templates",
        ],
        &root(),
        60,
    );
    refused(&o, "no-such-templates");
    let o = capstan_within(
        &["render", "examples/gitops", "--templates", "Cargo.toml"],
        &root(),
        60,
    );
    refused(&o, "not a directory");
}

#[test]
fn special_files_are_refused_not_read() {
    // A FIFO would block forever; /dev/zero would be read until memory runs out.
    let (tmp, repo) = example_copy();
    let age = repo.join("clusters/lab-f/secrets.age");
    std::fs::remove_file(&age).unwrap();
    mkfifo(&age);
    let o = capstan_within(&["render", "clusters/lab-f"], &repo, 30);
    let err = refused(&o, "secrets.age");
    assert!(err.contains("a FIFO, not a regular file"), "{err}");

    let id = tmp.path().join("id");
    write_identity(&id);
    for special in ["/dev/zero", "/dev/stdin"] {
        let o = capstan_within(
            &[
                "secrets",
                "decrypt",
                "--identity",
                special,
                "clusters/lab-g/secrets.age",
            ],
            &repo,
            30,
        );
        assert_eq!(o.status.code(), Some(2), "{special}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("not a regular file"),
            "{special}: {}",
            stderr(&o)
        );
        let o = capstan_within(
            &[
                "secrets",
                "decrypt",
                "--identity",
                id.to_str().unwrap(),
                special,
            ],
            &repo,
            30,
        );
        assert_eq!(o.status.code(), Some(2), "{special}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("not a regular file"),
            "{special}: {}",
            stderr(&o)
        );
    }
    // A template override that is a FIFO.
    std::fs::create_dir_all(repo.join("templates/talos")).unwrap();
    mkfifo(&repo.join("templates/talos/worker-patch.yaml"));
    let o = capstan_within(&["render", "."], &repo, 30);
    refused(&o, "a FIFO");
}

#[test]
fn huge_inputs_are_refused_with_the_limit() {
    let (_tmp, repo) = example_copy();
    let age = repo.join("clusters/lab-f/secrets.age");
    let f = std::fs::File::create(&age).unwrap();
    f.set_len((1 << 20) + 1).unwrap();
    let o = capstan_within(&["render", "clusters/lab-f"], &repo, 30);
    let err = refused(&o, "secrets.age");
    assert!(err.contains("larger than 1048576 bytes"), "{err}");

    let (_tmp, repo) = example_copy();
    std::fs::create_dir_all(repo.join("templates/talos")).unwrap();
    let big = format!("# {}\n", "x".repeat(2 << 20));
    std::fs::write(repo.join("templates/talos/worker-patch.yaml"), big).unwrap();
    let o = capstan_within(&["render", "."], &repo, 30);
    let err = refused(&o, "worker-patch.yaml");
    assert!(err.contains("the limit for a template"), "{err}");
}

#[test]
fn a_cluster_yaml_that_is_not_a_file_is_refused_not_skipped() {
    let (_tmp, repo) = example_copy();
    let c = repo.join("clusters/lab-f/cluster.yaml");
    std::fs::remove_file(&c).unwrap();
    mkfifo(&c);
    let o = capstan_within(&["render", "."], &repo, 30);
    let err = refused(&o, "clusters/lab-f/cluster.yaml");
    assert!(err.contains("a FIFO"), "{err}");
    std::fs::remove_file(&c).unwrap();
    std::fs::create_dir(&c).unwrap();
    let o = capstan_within(&["render", "."], &repo, 30);
    let err = refused(&o, "clusters/lab-f/cluster.yaml");
    assert!(err.contains("a directory"), "{err}");
}

#[test]
fn endless_and_exploding_templates_stop_with_the_template_named() {
    for (i, src) in [
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}",
        "{% set s = 'x' * 50000000 %}{{ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s }}",
    ]
    .into_iter()
    .enumerate()
    {
        let (_tmp, repo) = example_copy();
        std::fs::create_dir_all(repo.join("templates/talos")).unwrap();
        std::fs::write(repo.join("templates/talos/worker-patch.yaml"), src).unwrap();
        let o = capstan_within(&["render", "."], &repo, 60);
        let err = refused(
            &o,
            "template `talos/worker-patch.yaml` (./templates/talos/worker-patch.yaml)",
        );
        assert!(err.contains("ran out of fuel"), "case {i}: {err}");
        // The plugin's contract: exit 2, one line, nothing on stdout.
        let o = crate::argocd::generate(
            &repo,
            "clusters/lab-f",
            &[(capstan::cli::ENV_ARGOCD_SECRETS, "omit")],
        );
        crate::argocd::failed(&o, "worker-patch.yaml");
    }
}

/// Render `clusters/lab-f` after `edit` changed its sealed CA file: refused, naming `needle`.
fn sealed_ca_edit_is_refused(edit: impl FnOnce(String) -> String, needle: &str) {
    let (_tmp, repo) = example_copy();
    let f = repo.join("clusters/lab-f/secrets/lab-f-ca.yaml");
    let text = std::fs::read_to_string(&f).unwrap();
    let edited = edit(text.clone());
    assert_ne!(edited, text, "the edit changes the file");
    std::fs::write(&f, edited).unwrap();
    let o = capstan_within(&["render", "clusters/lab-f"], &repo, 60);
    let err = refused(&o, "clusters/lab-f/secrets/lab-f-ca.yaml");
    assert!(err.contains(needle), "expected `{needle}` in: {err}");
}

#[test]
fn sealed_secrets_are_checked_as_objects() {
    // metadata is outside the SOPS MAC: a rename would make `<cluster>-ca` vanish.
    sealed_ca_edit_is_refused(
        |t| t.replacen("name: lab-f-ca", "name: lab-f-ca-renamed", 1),
        "metadata.name: expected `lab-f-ca`",
    );
    sealed_ca_edit_is_refused(
        |t| t.replace("type: cluster.x-k8s.io/secret", "type: Opaque"),
        "type: expected `cluster.x-k8s.io/secret`",
    );
    sealed_ca_edit_is_refused(
        |t| {
            t.replace(
                "    cluster.x-k8s.io/cluster-name: lab-f\n",
                "    team: x\n",
            )
        },
        "metadata.labels.cluster.x-k8s.io/cluster-name",
    );
    sealed_ca_edit_is_refused(
        |t| t.replace("  tls.key:", "  tls.pem:"),
        "data: expected the keys tls.crt, tls.key",
    );
    // A plaintext value where ciphertext belongs.
    sealed_ca_edit_is_refused(
        |t| {
            let start = t.find("  tls.key: \"ENC[").unwrap();
            let end = start + t[start..].find('\n').unwrap();
            format!(
                "{}  tls.key: LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0t{}",
                &t[..start],
                &t[end..]
            )
        },
        "data.tls.key: not a well-formed ENC[AES256_GCM,…] value",
    );
    // A crypt rule that leaves data in plain text.
    sealed_ca_edit_is_refused(
        |t| {
            t.replace(
                "encrypted_regex: \"^(data|stringData)$\"",
                "encrypted_regex: \"^nothing$\"",
            )
        },
        "is not covered by the file's crypt rule",
    );
    // A mangled IV.
    sealed_ca_edit_is_refused(|t| t.replacen(",iv:", ",iv:AAAA", 1), "IV is not 32 bytes");
    sealed_ca_edit_is_refused(
        |t| t.replacen("type:str]", "type:comment]", 1),
        "unknown value type",
    );
}

#[test]
fn an_extra_sealed_secret_is_named_as_its_file_once() {
    let (_tmp, repo) = example_copy();
    let dir = repo.join("clusters/lab-f/secrets");
    let talos = std::fs::read_to_string(dir.join("lab-f-talos.yaml")).unwrap();
    // Another Secret under a file name that is not its name.
    std::fs::write(dir.join("vsphere-credentials.yaml"), &talos).unwrap();
    let o = capstan_within(&["render", "clusters/lab-f"], &repo, 60);
    let err = refused(&o, "vsphere-credentials.yaml");
    assert!(
        err.contains("metadata.name: expected `vsphere-credentials`"),
        "{err}"
    );
    // The same Secret twice (`.yml` beside `.yaml`).
    std::fs::remove_file(dir.join("vsphere-credentials.yaml")).unwrap();
    std::fs::write(dir.join("lab-f-talos.yml"), &talos).unwrap();
    let o = capstan_within(&["render", "clusters/lab-f"], &repo, 60);
    let err = refused(&o, "lab-f-talos.yml");
    assert!(err.contains("is also the Secret of"), "{err}");
}
