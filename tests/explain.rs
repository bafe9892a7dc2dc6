//! `capstan explain` from the command line: text and JSON output, stdin, exit codes.

use crate::util::*;

const BEARER: &str = r#"E0601 12:00:00.000000       1 authentication.go:73] "Unable to authenticate the request" err="invalid bearer token""#;

#[test]
fn a_pasted_log_line_is_explained_with_cause_check_and_fix() {
    let o = capstan(&["explain", BEARER], &root());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("invalid-bearer-token: "), "{out}");
    assert!(out.contains("\n  cause: "), "{out}");
    assert!(
        out.contains(
            "\n  caught by: capstan check (service-account-issuer, apiserver-uncarried)\n"
        ),
        "{out}"
    );
    assert!(out.contains("\n  fix:\n    - "), "{out}");
    assert!(out.contains("Talos >= 1.13"), "{out}");
}

#[test]
fn unquoted_words_are_joined() {
    let o = capstan(
        &[
            "explain", "too", "many", "learner", "member", "in", "cluster",
        ],
        &root(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("etcd-too-many-learners: "));
    assert!(stdout(&o).contains("capstan check (etcd-version-skew)"));
}

#[test]
fn nothing_matched_exits_1_with_a_hint() {
    let o = capstan(&["explain", "everything is fine"], &root());
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o), "");
    assert!(stderr(&o).contains("capstan explain -"), "{}", stderr(&o));
}

#[test]
fn stdin_reads_a_whole_log() {
    let log = format!(
        "I0601 12:00:00.000000 1 server.go:100] starting\n{BEARER}\n\
         W0601 12:00:05.000000 1 reflector.go:547] failed to list *core.Secret: unable to transform key \
         \"/registry/secrets/default/db\": no matching prefix found\n{BEARER}\n"
    );
    let o = assert_cmd::Command::cargo_bin("capstan")
        .unwrap()
        .args(["explain", "-"])
        .write_stdin(log)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let bearer = out.find("invalid-bearer-token: ").expect("bearer entry");
    let prefix = out
        .find("encryption-no-matching-prefix: ")
        .expect("prefix entry");
    assert!(bearer < prefix, "table order: {out}");
    assert!(out.contains("  matched: line 2 (2 lines)\n"), "{out}");
    assert!(out.contains("  matched: line 3 (1 line)\n"), "{out}");
}

#[test]
fn json_lists_every_match_most_specific_first() {
    let text = r#"err="[invalid bearer token, token audiences [\"https://kubernetes.default.svc.cluster.local\"] is invalid for the target audiences [\"https://10.0.0.10:6443\"]]""#;
    let o = capstan(&["explain", "--format", "json", text], &root());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON output");
    let list = v.as_array().expect("a list");
    let ids: Vec<&str> = list.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["token-audience-mismatch", "invalid-bearer-token"]);
    assert_eq!(list[0]["caughtBy"][0], "service-account-audiences");
    for m in list {
        for key in ["title", "source", "cause"] {
            assert!(m[key].as_str().is_some_and(|s| !s.is_empty()), "{key}");
        }
        assert!(m["fix"].as_array().is_some_and(|f| !f.is_empty()));
        assert_eq!(m["line"], 1);
    }
}

#[test]
fn json_with_no_match_is_an_empty_list_and_exit_1() {
    let o = capstan(&["explain", "--format", "json", "all good"], &root());
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON output");
    assert_eq!(v, serde_json::json!([]));
}

#[test]
fn usage_errors_exit_2() {
    let o = capstan(&["explain"], &root());
    assert_eq!(o.status.code(), Some(2));
    let o = capstan(&["explain", "invalid", "-"], &root());
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot be mixed"), "{}", stderr(&o));
    let o = capstan(&["explain", "--format", "yaml", "x"], &root());
    assert_eq!(o.status.code(), Some(2));
}
