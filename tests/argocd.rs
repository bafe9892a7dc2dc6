//! `capstan argocd generate` run the way Argo CD's sidecar runs it (a copy of the example
//! repository, the working directory at the Application's path, only the `ARGOCD_*` and
//! identity variables set, stdin closed), `secrets seal-operator`, `init`, and the files
//! in `deploy/argocd/` checked as data against Argo CD's documented schema.

use crate::util::*;
use capstan::argocd::{ANN_SYNC_OPTIONS, ANN_SYNC_WAVE};
use capstan::cli;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Run `capstan argocd generate` in `repo/app_path` with exactly `env` (plus the Argo CD
/// build variables derived from the path), as the CMP server does.
pub fn generate(repo: &Path, app_path: &str, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_capstan"));
    c.args(["argocd", "generate"])
        .current_dir(repo.join(app_path))
        .env_clear()
        .stdin(Stdio::null())
        .env(cli::ENV_ARGOCD_APP_SOURCE_PATH, app_path)
        .env(
            cli::ENV_ARGOCD_APP_REVISION,
            "5bfdacf1c6a0e2d9b7f4c3a8e1d2b3c4a5f6e7d8",
        );
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("capstan runs")
}

fn id_file(repo: &Path) -> String {
    repo.join("testdata/age-identity.txt")
        .to_string_lossy()
        .into_owned()
}

fn ok(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(o));
    stdout(o)
}

/// A failure: exit 2, nothing on stdout, one line on stderr holding no secret.
pub fn failed(o: &Output, expect: &str) {
    let err = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(2),
        "stdout: {}\nstderr: {err}",
        stdout(o)
    );
    assert!(o.stdout.is_empty(), "stdout must stay empty: {}", stdout(o));
    assert_eq!(err.lines().count(), 1, "one line on stderr: {err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains(expect), "expected `{expect}` in: {err}");
    for secret in ["AGE-SECRET-KEY", "PRIVATE KEY", "BEGIN", "token-secret"] {
        assert!(!err.contains(secret), "stderr leaks `{secret}`: {err}");
    }
}

fn docs(text: &str) -> Vec<Value> {
    let docs = capstan::yaml::parse_stream(text).expect("the stream parses as YAML");
    for d in &docs {
        for f in ["/apiVersion", "/kind", "/metadata/name"] {
            assert!(
                d.pointer(f)
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty()),
                "not a Kubernetes object (no {f}): {d}"
            );
        }
    }
    docs
}

fn ann<'a>(d: &'a Value, key: &str) -> Option<&'a str> {
    d.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// The object without the annotations `argocd generate` adds.
fn strip(mut d: Value) -> Value {
    if let Some(meta) = d.get_mut("metadata").and_then(Value::as_object_mut) {
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove(ANN_SYNC_WAVE);
            a.remove(ANN_SYNC_OPTIONS);
            if a.is_empty() {
                meta.remove("annotations");
            }
        }
    }
    d
}

fn kind(d: &Value) -> &str {
    d["kind"].as_str().unwrap_or("")
}

fn render(repo: &Path, args: &[&str]) -> Vec<Value> {
    docs(&ok(&capstan(args, repo)))
}

#[test]
fn decrypt_mode_equals_render_decrypt_plus_sync_annotations() {
    let (_t, repo) = example_copy();
    let id = id_file(&repo);
    for cluster in ["lab-f", "lab-g"] {
        let app = format!("clusters/{cluster}");
        let env = [
            (cli::ENV_ARGOCD_SECRETS, "decrypt"),
            (cli::ENV_SOPS_AGE_KEY_FILE, id.as_str()),
            (cli::ENV_ARGOCD_APP_NAME, cluster),
            (cli::ENV_ARGOCD_APP_NAMESPACE, cluster),
        ];
        let out = ok(&generate(&repo, &app, &env));
        assert!(stderr(&generate(&repo, &app, &env)).is_empty());
        assert_eq!(out, ok(&generate(&repo, &app, &env)), "deterministic");
        assert!(
            !out.contains("ENC[") && !out.contains("sops:"),
            "no ciphertext is applied"
        );
        let got = docs(&out);
        for d in &got {
            let hook = ann(d, "argocd.argoproj.io/hook").is_some();
            let wave = ann(d, ANN_SYNC_WAVE).unwrap_or_else(|| panic!("no sync wave: {d}"));
            let want = match kind(d) {
                "Secret"
                | "ServiceAccount"
                | "Role"
                | "RoleBinding"
                | "ClusterRole"
                | "ClusterRoleBinding"
                | "ValidatingAdmissionPolicy"
                | "ValidatingAdmissionPolicyBinding" => "-2",
                "VSphereMachineTemplate" | "TalosConfigTemplate" => "-1",
                _ => "0",
            };
            assert_eq!(wave, want, "{}", kind(d));
            let opts = ann(d, ANN_SYNC_OPTIONS).unwrap_or("");
            match kind(d) {
                "Secret"
                | "Cluster"
                | "VSphereCluster"
                | "TalosControlPlane"
                | "ValidatingAdmissionPolicy"
                | "ValidatingAdmissionPolicyBinding" => {
                    assert!(
                        opts.contains("Prune=false") && opts.contains("Delete=false"),
                        "{opts}"
                    )
                }
                "Job" => assert!(hook && opts.is_empty()),
                _ => {}
            }
            if d["apiVersion"].as_str().unwrap().contains(".x-k8s.io/") {
                assert!(
                    opts.contains("SkipDryRunOnMissingResource=true")
                        && opts.contains("ServerSideApply=true")
                );
            }
        }
        let want = render(&repo, &["render", &app, "--decrypt", "-i", &id]);
        let got: Vec<Value> = got.into_iter().map(strip).collect();
        assert_eq!(
            got, want,
            "{cluster}: generate == render --decrypt, modulo the sync annotations"
        );
        assert!(got.iter().filter(|d| kind(d) == "Secret").count() >= 2);
    }
}

/// D1: in every phase, only the bootstrapped guard's admission objects keep
/// `Prune=false,Delete=false`; phase control-plane's nodeRef policy and binding, and the
/// `workers`/`complete` ClusterRole, get Argo CD's default, so a sync with prune removes
/// them when git drops them (a live `Prune=false` is never pruned).
#[test]
fn only_the_guard_and_keep_workers_policies_outlive_their_phase() {
    for phase in ["control-plane", "workers", "complete"] {
        let (_t, repo) = example_copy();
        crate::migration::phase_variant(&repo, phase);
        let env = [
            (cli::ENV_ARGOCD_SECRETS, "omit"),
            (cli::ENV_ARGOCD_APP_NAME, "lab-f"),
            (cli::ENV_ARGOCD_APP_NAMESPACE, "lab-f"),
        ];
        let got = docs(&ok(&generate(&repo, "clusters/lab-f", &env)));
        let opts = |kind_: &str, name: &str| -> Option<String> {
            let d = got
                .iter()
                .find(|d| kind(d) == kind_ && d["metadata"]["name"] == name)
                .unwrap_or_else(|| panic!("{phase}: no {kind_} {name}"));
            ann(d, ANN_SYNC_OPTIONS).map(str::to_string)
        };
        for k in [
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ] {
            assert_eq!(
                opts(k, "lab-f.lab-f.bootstrapped.capstan.dev").as_deref(),
                Some("Prune=false,Delete=false"),
                "{phase}: the guard is kept"
            );
            let node_ref = got.iter().find(|d| {
                kind(d) == k && d["metadata"]["name"] == "lab-f.lab-f.paused-node-refs.capstan.dev"
            });
            match phase {
                "control-plane" => {
                    let d = node_ref.expect("phase control-plane renders the nodeRef policy");
                    assert_eq!(
                        ann(d, ANN_SYNC_OPTIONS),
                        None,
                        "{k}: pruned when git drops it"
                    );
                    assert_eq!(ann(d, ANN_SYNC_WAVE), Some("-2"));
                }
                _ => assert!(node_ref.is_none(), "{phase}: {k}"),
            }
        }
        if phase != "control-plane" {
            for k in ["ClusterRole", "ClusterRoleBinding"] {
                assert_eq!(
                    opts(k, "lab-f.lab-f.capstan-migration"),
                    None,
                    "{phase} {k}"
                );
            }
        }
        let no_prune: Vec<String> = got
            .iter()
            .filter(|d| ann(d, ANN_SYNC_OPTIONS).is_some_and(|o| o.contains("Prune=false")))
            .map(|d| format!("{} {}", kind(d), d["metadata"]["name"].as_str().unwrap()))
            .collect();
        assert_eq!(
            no_prune,
            [
                "ValidatingAdmissionPolicy lab-f.lab-f.bootstrapped.capstan.dev",
                "ValidatingAdmissionPolicyBinding lab-f.lab-f.bootstrapped.capstan.dev",
                "ValidatingAdmissionPolicy lab-f.lab-f.keep-workers.capstan.dev",
                "ValidatingAdmissionPolicyBinding lab-f.lab-f.keep-workers.capstan.dev",
                "Cluster lab-f",
                "VSphereCluster lab-f",
                "TalosControlPlane lab-f-cp",
            ],
            "{phase}: what outlives its removal from git"
        );
    }
}

#[test]
fn omit_mode_drops_only_the_sealed_secrets() {
    let (_t, repo) = example_copy();
    let out = ok(&generate(
        &repo,
        "clusters/lab-f",
        &[(cli::ENV_ARGOCD_SECRETS, "omit")],
    ));
    let got: Vec<Value> = docs(&out).into_iter().map(strip).collect();
    let want: Vec<Value> = render(&repo, &["render", "clusters/lab-f"])
        .into_iter()
        .filter(|d| d.get("sops").is_none())
        .collect();
    assert_eq!(got, want);
    assert!(got.iter().all(|d| kind(d) != "Secret"));
}

#[test]
fn a_directory_of_clusters_and_the_parameter_path() {
    let (_t, repo) = example_copy();
    // The repository root as the Application's path, the mode as a parameter.
    let params = r#"[{"name":"secrets","string":"omit"}]"#;
    let out = ok(&generate(
        &repo,
        ".",
        &[(cli::ENV_ARGOCD_APP_PARAMETERS, params)],
    ));
    let got: Vec<Value> = docs(&out).into_iter().map(strip).collect();
    let want: Vec<Value> = render(&repo, &["render", "."])
        .into_iter()
        .filter(|d| d.get("sops").is_none())
        .collect();
    assert_eq!(got, want);
    assert!(got
        .iter()
        .any(|d| d.pointer("/metadata/name").unwrap() == "lab-g"));
    // PARAM_SECRETS alone (no ARGOCD_APP_PARAMETERS), agreeing with the env entry.
    let again = generate(
        &repo,
        ".",
        &[
            (cli::ENV_PARAM_SECRETS, "omit"),
            (cli::ENV_ARGOCD_SECRETS, "omit"),
        ],
    );
    assert_eq!(ok(&again), out);
}

#[test]
fn operator_mode_emits_sopssecrets_sealed_for_the_operator() {
    let (_t, repo) = example_copy();
    let id = id_file(&repo);
    let app = "clusters/lab-f";
    let env = [(cli::ENV_ARGOCD_SECRETS, "operator")];
    failed(
        &generate(&repo, app, &env),
        "clusters/lab-f/secrets/operator/lab-f-talos.yaml is missing (secrets mode `operator`): run `capstan secrets seal-operator clusters/lab-f`",
    );
    ok(&capstan(
        &["secrets", "seal-operator", "-i", &id, app],
        &repo,
    ));
    let before = snapshot(&repo.join("clusters"));
    let o = capstan(&["secrets", "seal-operator", "-i", &id, app], &repo);
    ok(&o);
    assert!(
        stderr(&o).contains("lab-f-ca.yaml: unchanged"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        snapshot(&repo.join("clusters")),
        before,
        "re-sealing changes no byte"
    );

    let out = ok(&generate(&repo, app, &env));
    let got = docs(&out);
    let plain = render(&repo, &["render", app, "--decrypt", "-i", &id]);
    let secrets: Vec<&Value> = plain.iter().filter(|d| kind(d) == "Secret").collect();
    let sops_secrets: Vec<&Value> = got.iter().filter(|d| kind(d) == "SopsSecret").collect();
    assert_eq!(sops_secrets.len(), secrets.len());
    assert!(got.iter().all(|d| kind(d) != "Secret"));
    for (s, secret) in sops_secrets.iter().zip(&secrets) {
        assert_eq!(s["apiVersion"], capstan::secrets::sopssecret::API_VERSION);
        assert_eq!(s["metadata"]["name"], secret["metadata"]["name"]);
        assert_eq!(s["metadata"]["namespace"], secret["metadata"]["namespace"]);
        assert_eq!(ann(s, ANN_SYNC_WAVE), Some("-2"));
        // Only fields of the operator's v1alpha3 CRD (anything else would be pruned by the
        // API server and leave the Application OutOfSync; `mac_only_encrypted` is one).
        let subset = |v: &Value, allowed: &[&str]| {
            for k in v.as_object().unwrap().keys() {
                assert!(
                    allowed.contains(&k.as_str()),
                    "`{k}` is not in the SopsSecret CRD"
                );
            }
        };
        subset(s, &["apiVersion", "kind", "metadata", "spec", "sops"]);
        subset(&s["spec"], &["secretTemplates", "suspend"]);
        for t in s["spec"]["secretTemplates"].as_array().unwrap() {
            subset(
                t,
                &[
                    "name",
                    "type",
                    "labels",
                    "annotations",
                    "data",
                    "stringData",
                ],
            );
        }
        subset(
            &s["sops"],
            &[
                "age",
                "kms",
                "pgp",
                "azure_kv",
                "hc_vault",
                "gcp_kms",
                "mac",
                "lastmodified",
                "version",
                "encrypted_suffix",
                "encrypted_regex",
            ],
        );
        for a in s["sops"]["age"].as_array().unwrap() {
            subset(a, &["recipient", "enc"]);
        }
        // The file decrypts (MAC verified) to the Secret's values as plain text.
        let name = s["metadata"]["name"].as_str().unwrap();
        let dec = ok(&capstan(
            &[
                "secrets",
                "decrypt",
                "-i",
                &id,
                &format!("{app}/secrets/operator/{name}.yaml"),
            ],
            &repo,
        ));
        let dec = capstan::yaml::parse_one(&dec).unwrap();
        let t = &dec["spec"]["secretTemplates"][0];
        assert_eq!(t["name"], secret["metadata"]["name"]);
        assert_eq!(t["type"], secret["type"]);
        for (k, v) in secret["data"].as_object().unwrap() {
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(v.as_str().unwrap())
                .unwrap();
            assert_eq!(
                t["stringData"][k].as_str().unwrap().as_bytes(),
                bytes,
                "{name} {k}"
            );
        }
    }
    // Everything else is what render gives.
    let rest: Vec<Value> = got
        .into_iter()
        .filter(|d| kind(d) != "SopsSecret")
        .map(strip)
        .collect();
    let want: Vec<Value> = plain.into_iter().filter(|d| kind(d) != "Secret").collect();
    assert_eq!(rest, want);

    // A sealed value that changes makes the SopsSecret stale.
    let sealed = repo.join(app).join("secrets/lab-f-ca.yaml");
    let text = std::fs::read_to_string(&sealed).unwrap();
    let doc = capstan::yaml::parse_one(&text).unwrap();
    let (crt, key) = (
        doc["data"]["tls.crt"].as_str().unwrap(),
        doc["data"]["tls.key"].as_str().unwrap(),
    );
    std::fs::write(
        &sealed,
        text.replace(crt, "@").replace(key, crt).replace('@', key),
    )
    .unwrap();
    failed(
        &generate(&repo, app, &env),
        "clusters/lab-f/secrets/operator/lab-f-ca.yaml is stale: it was made from another version of clusters/lab-f/secrets/lab-f-ca.yaml; run `capstan secrets seal-operator clusters/lab-f`",
    );
}

#[test]
fn rekey_rewraps_the_operator_files_and_keeps_them_current() {
    let (_t, repo) = example_copy();
    let id = id_file(&repo);
    let app = "clusters/lab-g";
    ok(&capstan(
        &["secrets", "seal-operator", "-i", &id, app],
        &repo,
    ));
    let cfg_path = repo.join(app).join("cluster.yaml");
    let cfg = std::fs::read_to_string(&cfg_path).unwrap();
    let new_pub = age::x25519::Identity::generate().to_public().to_string();
    let old = "  - age1uhh4sjky7uv75cdmgk5vjarsd9dv6kxkvjnf7zspu3v4crp0udgq47fxk5\n";
    assert!(cfg.contains(old));
    std::fs::write(
        &cfg_path,
        cfg.replace(old, &format!("{old}  - {new_pub}\n")),
    )
    .unwrap();
    ok(&capstan(&["secrets", "rekey", "-i", &id, app], &repo));
    let op =
        std::fs::read_to_string(repo.join(app).join("secrets/operator/lab-g-ca.yaml")).unwrap();
    assert!(
        op.contains(&new_pub),
        "the operator file is wrapped for the new recipient"
    );
    ok(&generate(
        &repo,
        app,
        &[(cli::ENV_ARGOCD_SECRETS, "operator")],
    ));
}

#[test]
fn every_failure_exits_2_with_one_line_and_an_empty_stdout() {
    let (_t, repo) = example_copy();
    let id = id_file(&repo);
    let app = "clusters/lab-f";
    let decrypt = (cli::ENV_ARGOCD_SECRETS, "decrypt");
    failed(&generate(&repo, app, &[]), "no secrets mode chosen");
    failed(
        &generate(&repo, app, &[decrypt]),
        "secrets mode `decrypt` needs the age identity in the sidecar",
    );
    // A wrong identity: refused without a word of plaintext.
    let other = repo.join("other-id.txt");
    std::fs::write(&other, format!("{}\n", secrecy_free_identity())).unwrap();
    let o = generate(
        &repo,
        app,
        &[
            decrypt,
            (cli::ENV_SOPS_AGE_KEY_FILE, other.to_str().unwrap()),
        ],
    );
    failed(&o, "clusters/lab-f/secrets/lab-f-talos.yaml");
    failed(
        &generate(&repo, app, &[(cli::ENV_ARGOCD_SECRETS, "plaintext")]),
        "`plaintext` is not a secrets mode",
    );
    failed(
        &generate(
            &repo,
            app,
            &[
                decrypt,
                (
                    cli::ENV_ARGOCD_APP_PARAMETERS,
                    r#"[{"name":"secrets","string":"omit"}]"#,
                ),
            ],
        ),
        "says `decrypt` but the plugin parameter `secrets` says `omit`",
    );
    failed(
        &generate(
            &repo,
            app,
            &[decrypt, ("ARGOCD_ENV_CAPSTAN_PHASE", "complete")],
        ),
        "ARGOCD_ENV_CAPSTAN_PHASE: capstan reads no such plugin env",
    );
    failed(
        &generate(
            &repo,
            app,
            &[(
                cli::ENV_ARGOCD_APP_PARAMETERS,
                r#"[{"name":"replicas","string":"0"}]"#,
            )],
        ),
        "plugin parameter `replicas`",
    );
    failed(
        &generate(
            &repo,
            app,
            &[
                decrypt,
                (cli::ENV_SOPS_AGE_KEY_FILE, &id),
                (cli::ENV_ARGOCD_APP_NAMESPACE, "default"),
            ],
        ),
        "cluster `lab-f` lives in namespace `lab-f`",
    );
    // Bad input: an unknown field in cluster.yaml.
    let cfg = repo.join(app).join("cluster.yaml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text.replace(
            "  flavour: v1beta1\n",
            "  flavour: v1beta1\n  flavor: v1beta1\n",
        ),
    )
    .unwrap();
    failed(
        &generate(&repo, app, &[decrypt, (cli::ENV_SOPS_AGE_KEY_FILE, &id)]),
        "clusters/lab-f/cluster.yaml",
    );
    std::fs::write(&cfg, text).unwrap();
    // The error names the Application and the revision.
    let o = generate(&repo, app, &[(cli::ENV_ARGOCD_APP_NAME, "cluster-lab-f")]);
    failed(
        &o,
        "argocd generate (application cluster-lab-f, revision 5bfdacf1c6a0)",
    );
    // An empty directory: never an empty stream.
    std::fs::create_dir_all(repo.join("clusters/empty")).unwrap();
    failed(
        &generate(
            &repo,
            "clusters/empty",
            &[(cli::ENV_ARGOCD_SECRETS, "omit")],
        ),
        "no `cluster.yaml` here",
    );
    // The working directory is not the source path.
    failed(
        &generate(
            &repo,
            app,
            &[
                (cli::ENV_ARGOCD_SECRETS, "omit"),
                (cli::ENV_ARGOCD_APP_SOURCE_PATH, "clusters/lab-g"),
            ],
        ),
        "does not end with it",
    );
}

/// An age identity nobody encrypted to.
fn secrecy_free_identity() -> String {
    use age::secrecy::ExposeSecret;
    age::x25519::Identity::generate()
        .to_string()
        .expose_secret()
        .to_string()
}

fn parse_file(path: &Path) -> Value {
    capstan::yaml::parse_one(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn deploy() -> PathBuf {
    root().join("deploy/argocd")
}

#[test]
fn plugin_yaml_matches_the_cmp_schema() {
    let p = parse_file(&deploy().join("plugin.yaml"));
    assert_eq!(p["apiVersion"], "argoproj.io/v1alpha1");
    assert_eq!(p["kind"], "ConfigManagementPlugin");
    assert_eq!(p["metadata"]["name"], "capstan");
    assert!(
        p["spec"].get("version").is_none(),
        "without a version the Application names it `capstan`"
    );
    let generate = p["spec"]["generate"]["command"].as_array().unwrap();
    assert_eq!(
        generate,
        &["capstan", "argocd", "generate"].map(Value::from).to_vec()
    );
    assert!(p["spec"].get("init").is_none());
    // discover: tried as the cmp server tries it (below).
    assert!(p["spec"]["discover"]["find"]["glob"].is_string());
    let params = p["spec"]["parameters"]["static"].as_array().unwrap();
    assert_eq!(params.len(), 1);
    assert_eq!(params[0]["name"], cli::PARAM_SECRETS);
    assert_eq!(params[0]["collectionType"], "string");
    assert!(
        params[0].get("string").is_none(),
        "no default: the mode is chosen explicitly"
    );
    let allowed = [
        "generate",
        "discover",
        "parameters",
        "init",
        "version",
        "preserveFileMode",
        "provideGitCreds",
    ];
    for k in p["spec"].as_object().unwrap().keys() {
        assert!(
            allowed.contains(&k.as_str()),
            "spec.{k} is not a ConfigManagementPlugin field"
        );
    }
}

/// What Argo CD's cmp server answers for a plugin whose config is `plugin` and an
/// Application at `app` (a directory of the repository copy), as argo-cd v3.5.1 decides it:
/// - `matchRepository` (cmpserver/plugin/plugin.go:324-377): `discover.fileName` is joined to
///   the app path and matched with Go's `filepath.Glob` (one directory level, `*` within a
///   name); else `discover.find.glob` the same way with mattn/go-zglob, where `**/` is zero
///   or more directories (zglob v0.0.6 zglob.go:105-107, its walk from the pattern's static
///   prefix 220-283); a `find.command` is not modelled (capstan's plugin has none).
/// - `cmpSupports` (util/app/discovery/discovery.go:159-216): a plugin without a discover
///   rule supports every Application that names it; with one, a named plugin is used only
///   when the rule matches (`could not find cmp-server plugin with name "capstan"
///   supporting the given repository`), exactly as an unnamed one.
fn cmp_supports(plugin: &Value, app: &Path, named: bool) -> bool {
    let discover = &plugin["spec"]["discover"];
    let matches_rel = |pattern: &str, rel: &str, deep: bool| -> bool {
        // A segment-wise glob: `**` (zglob only) is any number of segments, `*` any run of
        // characters but `/`, everything else literal (capstan's patterns use no `?`/`[]`).
        fn seg(p: &str, s: &str) -> bool {
            match p.split_once('*') {
                None => p == s,
                Some((head, tail)) => {
                    s.starts_with(head)
                        && (0..=s.len() - head.len()).any(|i| {
                            s.is_char_boundary(head.len() + i) && seg(tail, &s[head.len() + i..])
                        })
                }
            }
        }
        fn segs(p: &[&str], s: &[&str], deep: bool) -> bool {
            match p.split_first() {
                None => s.is_empty(),
                Some((&"**", rest)) if deep => (0..=s.len()).any(|i| segs(rest, &s[i..], deep)),
                Some((first, rest)) => {
                    !s.is_empty() && seg(first, s[0]) && segs(rest, &s[1..], deep)
                }
            }
        }
        let p: Vec<&str> = pattern
            .split('/')
            .filter(|x| !x.is_empty() && *x != ".")
            .collect();
        let s: Vec<&str> = rel.split('/').collect();
        segs(&p, &s, deep)
    };
    let found = |pattern: &str, deep: bool| -> bool {
        walkdir::WalkDir::new(app)
            .follow_links(false)
            .min_depth(1)
            .into_iter()
            .filter_map(Result::ok)
            .any(|e| {
                let rel = e
                    .path()
                    .strip_prefix(app)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                matches_rel(pattern, &rel, deep)
            })
    };
    let rule = if let Some(f) = discover["fileName"].as_str() {
        Some(found(f, false))
    } else {
        discover["find"]["glob"].as_str().map(|g| found(g, true))
    };
    match rule {
        None => named,
        Some(matched) => matched,
    }
}

#[test]
fn argo_cd_uses_the_named_plugin_wherever_generate_renders() {
    let plugin = parse_file(&deploy().join("plugin.yaml"));
    let (_t, repo) = example_copy();
    // The ApplicationSet's Applications (a cluster directory each) and the README's "a
    // directory of clusters" (the fleet, the repository root): supported and rendered.
    for app in ["clusters/lab-f", "clusters/lab-g", "clusters", "."] {
        assert!(
            cmp_supports(&plugin, &repo.join(app), true),
            "Argo CD refuses the named plugin for an Application at `{app}`"
        );
        ok(&generate(&repo, app, &[(cli::ENV_ARGOCD_SECRETS, "omit")]));
    }
    // A directory without clusters: Argo CD refuses it before the plugin runs, as
    // `generate` would.
    for app in ["overlays", "testdata"] {
        assert!(!cmp_supports(&plugin, &repo.join(app), true), "{app}");
        failed(
            &generate(&repo, app, &[(cli::ENV_ARGOCD_SECRETS, "omit")]),
            "cluster",
        );
    }
    // The model tells the old rule from the new: `fileName: ./cluster.yaml` matched only
    // a cluster directory, so the directory of clusters the README promised was refused.
    let old: Value = serde_json::json!({"spec": {"discover": {"fileName": "./cluster.yaml"}}});
    assert!(cmp_supports(&old, &repo.join("clusters/lab-f"), true));
    assert!(!cmp_supports(&old, &repo.join("clusters"), true));
    // Without any rule a named plugin is always used (and an unnamed one never).
    let none: Value = serde_json::json!({"spec": {}});
    assert!(cmp_supports(&none, &repo.join("overlays"), true));
    assert!(!cmp_supports(&none, &repo.join("clusters"), false));
}

#[test]
fn sidecar_patch_and_kustomization_match_argo_cd_requirements() {
    let k = parse_file(&deploy().join("kustomization.yaml"));
    assert_eq!(k["kind"], "Kustomization");
    for r in k["resources"].as_array().unwrap() {
        assert!(deploy().join(r.as_str().unwrap()).is_file(), "{r}");
    }
    let gen = &k["configMapGenerator"][0];
    assert_eq!(gen["files"], serde_json::json!(["plugin.yaml"]));
    let cm_name = gen["name"].as_str().unwrap();
    let patch = &k["patches"][0];
    assert_eq!(patch["target"]["kind"], "Deployment");
    assert_eq!(patch["target"]["name"], "argocd-repo-server");
    let p = parse_file(&deploy().join(patch["path"].as_str().unwrap()));
    assert_eq!(p["kind"], "Deployment");
    assert_eq!(p["metadata"]["name"], "argocd-repo-server");
    let pod = &p["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(
        c["command"],
        serde_json::json!(["/var/run/argocd/argocd-cmp-server"])
    );
    assert_eq!(c["securityContext"]["runAsUser"], 999);
    assert_eq!(c["securityContext"]["runAsNonRoot"], true);
    let mounts = c["volumeMounts"].as_array().unwrap();
    let mount = |path: &str| {
        mounts
            .iter()
            .find(|m| m["mountPath"] == path)
            .unwrap_or_else(|| panic!("no mount at {path}"))
    };
    let volume = |name: &Value| {
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == *name)
            .cloned()
    };
    // Argo CD's own volumes (defined by its installation).
    assert_eq!(mount("/var/run/argocd")["name"], "var-files");
    assert_eq!(mount("/home/argocd/cmp-server/plugins")["name"], "plugins");
    let cfg = mount("/home/argocd/cmp-server/config/plugin.yaml");
    assert_eq!(cfg["subPath"], "plugin.yaml");
    assert_eq!(volume(&cfg["name"]).unwrap()["configMap"]["name"], cm_name);
    // Its own /tmp.
    let tmp = mount("/tmp");
    assert!(volume(&tmp["name"]).unwrap().get("emptyDir").is_some());
    // The identity: read-only, optional, and where SOPS_AGE_KEY_FILE points.
    let env = c["env"].as_array().unwrap();
    let key_file = env
        .iter()
        .find(|e| e["name"] == cli::ENV_SOPS_AGE_KEY_FILE)
        .unwrap()["value"]
        .as_str()
        .unwrap();
    let id_mount = mounts
        .iter()
        .find(|m| key_file.starts_with(&format!("{}/", m["mountPath"].as_str().unwrap())))
        .expect("the key file is on a mount");
    assert_eq!(id_mount["readOnly"], true);
    let secret = &volume(&id_mount["name"]).unwrap()["secret"];
    assert_eq!(secret["optional"], true);
    assert!(secret["secretName"].is_string());
}

#[test]
fn applicationset_makes_one_working_application_per_cluster() {
    let a = parse_file(&deploy().join("applicationset.yaml"));
    let plugin = parse_file(&deploy().join("plugin.yaml"));
    assert_eq!(a["apiVersion"], "argoproj.io/v1alpha1");
    assert_eq!(a["kind"], "ApplicationSet");
    assert_eq!(a["spec"]["goTemplate"], true);
    let git = &a["spec"]["generators"][0]["git"];
    assert_eq!(
        git["directories"],
        serde_json::json!([{"path": "clusters/*"}])
    );
    assert_eq!(a["spec"]["syncPolicy"]["preserveResourcesOnDeletion"], true);
    let t = &a["spec"]["template"];
    assert!(t["metadata"]["name"]
        .as_str()
        .unwrap()
        .contains("{{ .path.basename }}"));
    let spec = &t["spec"];
    let src = &spec["source"];
    assert_eq!(src["repoURL"], git["repoURL"]);
    assert_eq!(src["path"], "{{ .path.path }}");
    assert_eq!(src["plugin"]["name"], plugin["metadata"]["name"]);
    let env = src["plugin"]["env"].as_array().unwrap();
    assert_eq!(env.len(), 1);
    assert_eq!(env[0]["name"], cli::PLUGIN_ENV_SECRETS);
    assert_eq!(
        format!("{}{}", cli::ARGOCD_ENV_PREFIX, cli::PLUGIN_ENV_SECRETS),
        cli::ENV_ARGOCD_SECRETS
    );
    let mode = env[0]["value"].as_str().unwrap();
    capstan::argocd::SecretsMode::parse("appset", mode).unwrap();
    assert_eq!(spec["destination"]["namespace"], "{{ .path.basename }}");
    let ig = &spec["ignoreDifferences"][0];
    assert_eq!(
        (ig["group"].as_str(), ig["kind"].as_str()),
        (Some("cluster.x-k8s.io"), Some("MachineDeployment"))
    );
    let jq = ig["jqPathExpressions"][0].as_str().unwrap();
    assert!(
        jq.contains("cluster-api-autoscaler-node-group-max-size") && jq.ends_with(".spec.replicas")
    );
    let opts = spec["syncPolicy"]["syncOptions"].as_array().unwrap();
    assert!(opts.contains(&Value::from("RespectIgnoreDifferences=true")));
    assert_eq!(spec["syncPolicy"]["automated"]["prune"], true);

    // Expand the generator over the example repository and run each Application's plugin.
    let (_t, repo) = example_copy();
    let id = id_file(&repo);
    for entry in std::fs::read_dir(repo.join("clusters")).unwrap() {
        let base = entry.unwrap().file_name().to_string_lossy().into_owned();
        let path = format!("clusters/{base}");
        let o = generate(
            &repo,
            &path,
            &[
                (cli::ENV_ARGOCD_APP_NAME, &format!("cluster-{base}")),
                (cli::ENV_ARGOCD_APP_NAMESPACE, &base),
                (cli::ENV_ARGOCD_SECRETS, mode),
                (cli::ENV_SOPS_AGE_KEY_FILE, &id),
            ],
        );
        assert!(!docs(&ok(&o)).is_empty(), "{path}");
    }
}

#[test]
fn init_scaffolds_once_and_never_overwrites() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    let r = "age1uhh4sjky7uv75cdmgk5vjarsd9dv6kxkvjnf7zspu3v4crp0udgq47fxk5";
    let d = dir.to_str().unwrap();
    // A bad recipient writes nothing.
    let o = capstan(&["init", d, "--recipient", "age1nope"], tmp.path());
    assert_eq!(o.status.code(), Some(2));
    assert!(!dir.exists());
    let o = capstan(&["init", d], tmp.path());
    assert_eq!(o.status.code(), Some(2), "at least one recipient");
    let o = capstan(
        &[
            "init",
            d,
            "--recipient",
            r,
            "--repo-url",
            "https://git.example.com/fleet.git",
        ],
        tmp.path(),
    );
    ok(&o);
    for f in [
        ".sops.yaml",
        "README.md",
        "clusters/.gitkeep",
        "overlays/talos-vmware/overlay.yaml",
        "overlays/vsphere-ipam/pool.yaml",
        "deploy/argocd/plugin.yaml",
        "deploy/argocd/repo-server-patch.yaml",
        "deploy/argocd/argocd-cm-patch.yaml",
        "deploy/argocd/kustomization.yaml",
        "deploy/argocd/applicationset.yaml",
    ] {
        assert!(dir.join(f).is_file(), "{f}");
        assert!(
            stderr(&o).contains(&format!("{f}: created")),
            "{}",
            stderr(&o)
        );
    }
    // A git repository, the shipped overlays as capstan's own, and what to do next.
    assert!(dir.join(".git").is_dir(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("git repository initialized"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read(dir.join("overlays/talos-vmware/overlay.yaml")).unwrap(),
        std::fs::read(root().join("overlays/talos-vmware/overlay.yaml")).unwrap()
    );
    assert!(
        stderr(&o).contains("next steps:\n  1. import each kubeadm cluster"),
        "{}",
        stderr(&o)
    );
    let sops = parse_file(&dir.join(".sops.yaml"));
    let rule = &sops["creation_rules"][0];
    assert_eq!(rule["path_regex"], r"clusters/.*/secrets/.*\.ya?ml$");
    assert_eq!(rule["encrypted_regex"], "^(data|stringData)$");
    assert_eq!(rule["age"], r);
    let appset = std::fs::read_to_string(dir.join("deploy/argocd/applicationset.yaml")).unwrap();
    assert_eq!(
        appset
            .matches("repoURL: https://git.example.com/fleet.git")
            .count(),
        2
    );
    for f in [
        "plugin.yaml",
        "repo-server-patch.yaml",
        "argocd-cm-patch.yaml",
        "kustomization.yaml",
    ] {
        assert_eq!(
            std::fs::read(dir.join("deploy/argocd").join(f)).unwrap(),
            std::fs::read(deploy().join(f)).unwrap(),
            "{f} is the shipped file"
        );
    }
    // Idempotent: a second run keeps everything, including a user's edit.
    std::fs::write(dir.join("README.md"), "ours\n").unwrap();
    let before = snapshot(&dir);
    let o = capstan(&["init", d, "--recipient", r], tmp.path());
    ok(&o);
    assert!(
        stderr(&o).contains("README.md: kept (exists; never overwritten)"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("created"), "{}", stderr(&o));
    assert_eq!(snapshot(&dir), before);
}

/// A JSON value as a Lua table constructor (what Argo CD hands a health script as `obj`).
fn lua_value(v: &Value) -> String {
    match v {
        Value::Null => "nil".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{:?}", s),
        Value::Array(a) => format!(
            "{{{}}}",
            a.iter().map(lua_value).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!("[{:?}] = {}", k, lua_value(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// M12: the SopsSecret health check shipped in deploy/argocd, run by a real Lua 5.1 (Argo
/// CD's gopher-lua is Lua 5.1) with only the libraries Argo CD loads for a custom check
/// (no `string`, `math` or `io`): Argo CD waits in wave -2 until sops-secrets-operator
/// reports the Secrets created, and fails the sync when it cannot create them.
#[test]
#[ignore = "needs lua5.1"]
fn sopssecret_health_check_waits_for_the_operator() {
    crate::util::need("lua5.1", &["-v"]);
    let patch = parse_file(&deploy().join("argocd-cm-patch.yaml"));
    assert_eq!(
        (patch["kind"].as_str(), patch["metadata"]["name"].as_str()),
        (Some("ConfigMap"), Some("argocd-cm"))
    );
    let script = patch["data"]["resource.customizations.health.isindir.github.com_SopsSecret"]
        .as_str()
        .expect("the health key Argo CD reads for group isindir.github.com, kind SopsSecret");
    let run = |obj: Value| -> (String, String) {
        let program = format!(
            "string = nil; math = nil; io = nil; debug = nil\nobj = {}\nlocal hs = (function()\n{script}\nend)()\nprint(hs.status .. \"\\t\" .. hs.message)\n",
            lua_value(&obj)
        );
        let o = std::process::Command::new("lua5.1")
            .args(["-e", &program])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let out = String::from_utf8_lossy(&o.stdout).trim_end().to_string();
        let (a, b) = out.split_once('\t').unwrap();
        (a.to_string(), b.to_string())
    };
    let sops = |status: Option<Value>| {
        let mut o = serde_json::json!({"apiVersion": "isindir.github.com/v1alpha3", "kind": "SopsSecret",
            "metadata": {"name": "lab-f-talos", "namespace": "lab-f"}, "spec": {"secretTemplates": []}});
        if let Some(s) = status {
            o["status"] = s;
        }
        o
    };
    let msg = |m: &str| Some(serde_json::json!({"message": m}));
    assert_eq!(run(sops(None)).0, "Progressing");
    assert_eq!(run(sops(Some(serde_json::json!({})))).0, "Progressing");
    assert_eq!(run(sops(msg("Healthy"))).0, "Healthy");
    assert_eq!(run(sops(msg("Reconciliation is suspended"))).0, "Suspended");
    let (status, message) = run(sops(msg("Decryption error")));
    assert_eq!(status, "Degraded");
    assert!(message.contains("spec.recipients"), "{message}");
    let (status, message) = run(sops(msg("Child secret is not owned by controller error")));
    assert_eq!(status, "Degraded");
    assert!(message.contains("sopssecret/managed"), "{message}");
    for m in [
        "Unknown Error",
        "Child secret update error",
        "New child secret creation error",
        "Setting controller ownership of the child secret error",
    ] {
        let (status, message) = run(sops(msg(m)));
        assert_eq!(status, "Degraded", "{m}");
        assert!(message.starts_with(m), "{message}");
    }
    // Every status the script returns is one Argo CD accepts (util/lua/lua.go).
    for m in [
        "Healthy",
        "Decryption error",
        "Reconciliation is suspended",
        "x",
    ] {
        let s = run(sops(msg(m))).0;
        assert!(
            [
                "Healthy",
                "Progressing",
                "Degraded",
                "Suspended",
                "Missing",
                "Unknown"
            ]
            .contains(&s.as_str()),
            "{s}"
        );
    }
    // And the wave it waits in holds the SopsSecrets, before the cluster's objects.
    assert!(
        capstan::argocd::sync_wave("SopsSecret") < capstan::argocd::sync_wave("TalosControlPlane")
    );
}

#[test]
fn an_unusable_environment_still_names_the_application() {
    let (_tmp, repo) = example_copy();
    let o = generate(
        &repo,
        "clusters/lab-f",
        &[
            (cli::ENV_ARGOCD_APP_NAME, "cluster-lab-f"),
            (cli::ENV_ARGOCD_SECRETS, "omit"),
            (cli::ENV_ARGOCD_APP_PARAMETERS, "not json"),
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stdout(&o).is_empty());
    assert!(
        stderr(&o).starts_with("error: argocd generate (application cluster-lab-f): "),
        "{}",
        stderr(&o)
    );
}

/// An `ARGOCD_APP_NAME` (or revision) with a line break, an ANSI escape, a carriage return
/// or a bidirectional override: the error stays one line on stderr, every such character
/// escaped, nothing on stdout; whether the environment is unusable or the render fails.
#[test]
fn generate_errors_stay_one_escaped_line_whatever_the_application_name() {
    let (_t, repo) = example_copy();
    let hostile = "lab\nerror: forged\u{1b}[2J\u{1b}]0;x\u{7}\r\u{202e}";
    let cases: [(&[(&str, &str)], &str); 2] = [
        (
            &[(cli::ENV_ARGOCD_APP_NAME, hostile)],
            "error: argocd generate (application lab\\u{a}error: forged\\u{1b}[2J\\u{1b}]0;x\\u{7}\\u{d}\\u{202e}, revision 5bfdacf1c6a0): ",
        ),
        (
            &[
                (cli::ENV_ARGOCD_APP_NAME, hostile),
                (cli::ENV_ARGOCD_APP_PARAMETERS, "not json"),
            ],
            "error: argocd generate (application lab\\u{a}error: forged\\u{1b}[2J\\u{1b}]0;x\\u{7}\\u{d}\\u{202e}): ",
        ),
    ];
    for (env, prefix) in cases {
        let o = generate(&repo, "clusters/lab-f", env);
        let err = stderr(&o);
        assert_eq!(
            (o.status.code(), stdout(&o).as_str()),
            (Some(2), ""),
            "{err}"
        );
        assert!(err.starts_with(prefix), "{err}");
        assert_eq!(err.matches('\n').count(), 1, "one line: {err}");
        assert!(err.ends_with('\n'));
        assert!(
            !err.contains(['\u{1b}', '\r', '\u{7}', '\u{202e}']),
            "escaped: {err}"
        );
    }
}

/// `argocd generate` run by hand takes `--repo-root` (issue 42): in a repository whose
/// clusters are not under `clusters/`, the working directory is the source inside the root
/// given, and the objects are those of the example's lab-f; outside it, refused naming it.
#[test]
fn generate_by_hand_takes_repo_root() {
    let env = [
        ("ARGOCD_APP_NAME", "cluster-lab-f"),
        ("ARGOCD_APP_NAMESPACE", "lab-f"),
        (
            "ARGOCD_APP_REVISION",
            "0000000000000000000000000000000000000000",
        ),
        ("ARGOCD_ENV_CAPSTAN_SECRETS", "omit"),
    ];
    let expected = capstan_plain(
        &["argocd", "generate"],
        &example().join("clusters/lab-f"),
        &env,
    );
    assert_eq!(expected.status.code(), Some(0), "{}", stderr(&expected));
    let (_t, repo) = example_copy();
    std::fs::rename(repo.join("clusters"), repo.join("sites")).unwrap();
    let cwd = repo.join("sites/lab-f");
    let without = capstan_plain(&["argocd", "generate"], &cwd, &env);
    assert_eq!(without.status.code(), Some(2));
    let o = capstan_plain(&["argocd", "generate", "--repo-root", "../.."], &cwd, &env);
    assert_eq!((o.status.code(), stderr(&o)), (Some(0), String::new()));
    assert!(stdout(&o) == stdout(&expected), "another stream");
    let o = capstan_plain(
        &["argocd", "generate", "--repo-root", "/"],
        &repo.join("sites"),
        &env,
    );
    assert_eq!(o.status.code(), Some(2));
    let o = capstan_plain(
        &["argocd", "generate", "--repo-root", "lab-f"],
        &repo.join("sites"),
        &env,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("is not inside --repo-root lab-f"),
        "{}",
        stderr(&o)
    );
}
