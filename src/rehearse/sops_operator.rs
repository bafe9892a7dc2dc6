//! A model of isindir/sops-secrets-operator reconciling one secret template of a SopsSecret
//! against the live Secret of its name: what a restore in secrets mode `operator` meets when
//! Argo CD brings the SopsSecrets back to Secrets that a backup or the runbook created.
//!
//! The operator's `Reconcile` (`internal/controllers/sopssecret_controller.go`, the
//! v1alpha3 controller, \[A35]) does, per `spec.secretTemplates[]` entry:
//! 1. `newKubeSecretFromTemplate`: a Secret named after the template, in the SopsSecret's
//!    namespace, with the template's type, labels and annotations and the SopsSecret as its
//!    controller (`controllerutil.SetControllerReference`);
//! 2. `getSecretFromClusterOrCreateFromTemplate`: no live Secret of that name, so it is
//!    created;
//! 3. `isKubeSecretManagedOrAnnotatedToBeManaged`: a live Secret that the SopsSecret does not
//!    control (`metav1.IsControlledBy`: a controller reference with its uid) and that does
//!    not carry `sopssecret/managed: "true"` (`isAnnotatedToBeManaged`, case-sensitive) is
//!    refused: the SopsSecret's status is "Child secret is not owned by controller error"
//!    and the reconcile is requeued, for ever;
//! 4. `refreshKubeSecretIfNeeded`: otherwise the live Secret takes the template's data, type,
//!    labels and annotations, and, when it was annotated, the template's owner references.

use serde_json::{json, Value};

/// The annotation with which the operator manages a Secret it did not create.
pub use crate::secrets::sopssecret::MANAGED_ANNOTATION as SOPS_MANAGED;

/// What the operator does with one secret template.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// No Secret of that name: created, controlled by the SopsSecret.
    Created(Value),
    /// The live Secret was controlled or annotated: it now is the template's, controlled
    /// by the SopsSecret.
    Adopted(Value),
    /// The live Secret is someone else's: the SopsSecret reports
    /// "Child secret is not owned by controller error" and the Secret is left as it is.
    NotOwned,
}

fn text<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or("")
}

/// The Secret the operator makes of `template` (one `spec.secretTemplates[]` entry, its
/// values already decrypted or left out: the model compares metadata) for `sops_secret`.
fn from_template(sops_secret: &Value, template: &Value) -> Value {
    let or_empty = |p: &str| template.get(p).cloned().unwrap_or_else(|| json!({}));
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": text(template, "/name"),
            "namespace": text(sops_secret, "/metadata/namespace"),
            "labels": or_empty("labels"),
            "annotations": or_empty("annotations"),
            "ownerReferences": [{
                "apiVersion": text(sops_secret, "/apiVersion"),
                "kind": text(sops_secret, "/kind"),
                "name": text(sops_secret, "/metadata/name"),
                "uid": text(sops_secret, "/metadata/uid"),
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "type": template.get("type").and_then(Value::as_str).unwrap_or("Opaque"),
        "data": or_empty("stringData"),
    })
}

/// `metav1.IsControlledBy`: a controller reference whose uid is the owner's.
fn controlled_by(secret: &Value, owner_uid: &str) -> bool {
    secret
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|r| r.get("controller") == Some(&Value::Bool(true)) && text(r, "/uid") == owner_uid)
}

/// One reconcile of `template` of `sops_secret` against `live`, the Secret of the
/// template's name in the SopsSecret's namespace.
pub fn reconcile(sops_secret: &Value, template: &Value, live: Option<&Value>) -> Outcome {
    let want = from_template(sops_secret, template);
    let Some(live) = live else {
        return Outcome::Created(want);
    };
    let annotated = live
        .pointer(&format!(
            "/metadata/annotations/{}",
            SOPS_MANAGED.0.replace('/', "~1")
        ))
        .and_then(Value::as_str)
        == Some(SOPS_MANAGED.1);
    if !controlled_by(live, text(sops_secret, "/metadata/uid")) && !annotated {
        return Outcome::NotOwned;
    }
    let mut next = live.clone();
    for k in ["data", "type"] {
        next[k] = want[k].clone();
    }
    for k in ["labels", "annotations"] {
        next["metadata"][k] = want["metadata"][k].clone();
    }
    if annotated {
        next["metadata"]["ownerReferences"] = want["metadata"]["ownerReferences"].clone();
    }
    Outcome::Adopted(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sops_secret() -> Value {
        json!({"apiVersion": "isindir.github.com/v1alpha3", "kind": "SopsSecret",
            "metadata": {"namespace": "lab-f", "name": "lab-f-ca", "uid": "ss-1"}})
    }

    fn template() -> Value {
        json!({"name": "lab-f-ca", "type": "kubernetes.io/tls",
            "labels": {"clusterctl.cluster.x-k8s.io/move": ""}, "stringData": {"tls.crt": "x"}})
    }

    #[test]
    fn the_operator_creates_adopts_what_it_controls_or_is_told_to_and_refuses_the_rest() {
        let Outcome::Created(made) = reconcile(&sops_secret(), &template(), None) else {
            panic!("not created")
        };
        assert_eq!(made["metadata"]["ownerReferences"][0]["uid"], "ss-1");
        assert_eq!(made["metadata"]["ownerReferences"][0]["controller"], true);
        // Its own Secret: refreshed.
        assert!(matches!(
            reconcile(&sops_secret(), &template(), Some(&made)),
            Outcome::Adopted(_)
        ));
        // A Secret another hand applied (a restore's `kubectl apply`, an ownerless copy
        // from a backup): refused.
        let foreign = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"namespace": "lab-f", "name": "lab-f-ca"}});
        assert_eq!(
            reconcile(&sops_secret(), &template(), Some(&foreign)),
            Outcome::NotOwned
        );
        // Owned by a SopsSecret of another uid (the one before a restore): refused too.
        let mut stale = made.clone();
        stale["metadata"]["ownerReferences"][0]["uid"] = "ss-old".into();
        assert_eq!(
            reconcile(&sops_secret(), &template(), Some(&stale)),
            Outcome::NotOwned
        );
        // Annotated: adopted, with the controller reference, the template's labels, and the
        // annotation gone (annotations are the template's).
        let mut told = foreign.clone();
        told["metadata"]["annotations"] = json!({"sopssecret/managed": "true"});
        let Outcome::Adopted(next) = reconcile(&sops_secret(), &template(), Some(&told)) else {
            panic!("not adopted")
        };
        assert_eq!(next["metadata"]["ownerReferences"][0]["uid"], "ss-1");
        assert_eq!(next["metadata"]["annotations"], json!({}));
        assert!(next["metadata"]["labels"]
            .get("clusterctl.cluster.x-k8s.io/move")
            .is_some());
        // Case-sensitive.
        told["metadata"]["annotations"] = json!({"sopssecret/managed": "True"});
        assert_eq!(
            reconcile(&sops_secret(), &template(), Some(&told)),
            Outcome::NotOwned
        );
    }
}
