//! The non-secret object manifest of a backup: one entry per `clusterctl move` file (kind,
//! namespace, name, whether it carries the move label, the cluster it belongs to and a
//! Machine's infrastructure object; for a Secret only its type and key names, and for a
//! cluster CA Secret the SHA-256 fingerprint of its certificate), written into the public
//! index by `backup push` so `backup check` needs no private key (D16: scheduled CI holds
//! none). No value of a Secret ever reaches an entry.
//!
//! A keyless check trusts the index: whoever can write the bucket can write an index that
//! says anything. With an identity, [`verify`] recomputes every entry from the decrypted
//! files and refuses an index that says something else, so the public manifest is bound to
//! what the encrypted payload holds (the payload's files are the manifest's source; the
//! entries are a function of them, so no second copy is stored).

use crate::inputs::MovedFile;
use crate::secrets::seal::MOVE_LABEL;
use crate::yaml::Scrubbed;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The label Cluster API's objects name their cluster with.
const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// One object of a backup, as the public index lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Entry {
    /// `kind`.
    pub kind: String,
    /// `metadata.namespace` (empty when cluster-scoped).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// Whether `metadata.labels` holds `clusterctl.cluster.x-k8s.io/move`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub move_label: bool,
    /// `metadata.labels["cluster.x-k8s.io/cluster-name"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// A Machine's `spec.infrastructureRef` as `Kind/name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure: Option<String>,
    /// What a Secret is, without its values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretEntry>,
    /// For the record of a `capstan backup dump` ([`super::dump::RECORD`]): the Clusters,
    /// `namespace/name`, that were paused (`spec.paused: true`) on the live management
    /// cluster when it was dumped, as a `clusterctl move` killed between pausing and
    /// unpausing leaves them (cluster-api v1.10.10 `mover.go:393-436`). A dump records the
    /// live state; a `clusterctl move --to-directory` file cannot (it saves every Cluster
    /// paused, `mover.go:402-406`), and its next run unpauses them (`:434-436`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_clusters: Option<Vec<String>>,
}

/// A Secret's public facts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct SecretEntry {
    /// `type` (empty when unset).
    #[serde(rename = "type")]
    pub type_: String,
    /// The key names of `data` and `stringData`, sorted, each once.
    pub keys: Vec<String>,
    /// For a cluster CA Secret (`<cluster>-ca` with `tls.crt`): `sha256:<hex>` of the first
    /// certificate's DER, the form `spec.provenance.fingerprints.kubernetesCa` records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_fingerprint: Option<String>,
}

/// Why a file has no usable entry, or an index does not say what the payload holds.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ObjectsError {
    /// A `clusterctl move` file that is not one YAML object.
    #[error("{file}: not a Kubernetes object ({message}); `clusterctl move --to-directory` writes one YAML object per file")]
    Unreadable {
        /// The file.
        file: String,
        /// What failed (never a value of the file).
        message: String,
    },
    /// The public index lists other objects than the encrypted payload holds.
    #[error("backup {id}: the public index's object manifest differs from the encrypted payload ({what}): the index was edited after the backup was made; trust neither, and check the bucket's writers")]
    Mismatch {
        /// The backup.
        id: String,
        /// The first difference.
        what: String,
    },
}

/// The entry of one moved file (`<Kind>_<namespace>_<name>.yaml` and its bytes), or `None`
/// for a file that does not name an object. A Secret's values are read only to list its
/// keys and, for a CA Secret, to fingerprint its (public) certificate; the parsed tree is
/// scrubbed when it is dropped.
pub(crate) fn entry(file: &str, bytes: &[u8]) -> Result<Option<Entry>, ObjectsError> {
    let Some((kind, ns, name)) = super::object_of(file) else {
        return Ok(None);
    };
    let unreadable = |message: &str| ObjectsError::Unreadable {
        file: file.to_string(),
        message: message.to_string(),
    };
    let text = std::str::from_utf8(bytes).map_err(|_| unreadable("not UTF-8"))?;
    // The message of a parse error may quote the text: it is left out.
    let tree =
        Scrubbed(crate::yaml::parse_one(text).map_err(|_| unreadable("not one YAML document"))?);
    let doc = &tree.0;
    if !doc.is_object() {
        return Err(unreadable("not a mapping"));
    }
    let s = |p: &str| doc.pointer(p).and_then(Value::as_str);
    // The object says what it is; the file name when it does not.
    let kind = s("/kind").unwrap_or(kind).to_string();
    let namespace = s("/metadata/namespace").unwrap_or(ns).to_string();
    let name = s("/metadata/name").unwrap_or(name).to_string();
    let labels = doc.pointer("/metadata/labels").and_then(Value::as_object);
    let move_label = labels.is_some_and(|l| l.contains_key(MOVE_LABEL));
    let cluster = labels
        .and_then(|l| l.get(CLUSTER_NAME_LABEL))
        .and_then(Value::as_str)
        .map(str::to_string);
    let infrastructure = (kind == "Machine")
        .then(|| {
            match (
                s("/spec/infrastructureRef/kind"),
                s("/spec/infrastructureRef/name"),
            ) {
                (Some(k), Some(n)) => Some(format!("{k}/{n}")),
                _ => None,
            }
        })
        .flatten();
    let secret = (kind == "Secret" && s("/apiVersion").is_none_or(|v| v == "v1")).then(|| {
        let mut keys: Vec<String> = ["data", "stringData"]
            .iter()
            .filter_map(|k| doc.get(*k).and_then(Value::as_object))
            .flat_map(|m| m.keys().cloned())
            .collect();
        keys.sort();
        keys.dedup();
        let ca_fingerprint = name
            .strip_suffix("-ca")
            .filter(|c| !c.is_empty())
            .and_then(|_| ca_certificate(doc))
            .and_then(|pem| crate::secrets::pki::parse_certificate_pem(file, &pem).ok())
            .map(|der| crate::secrets::pki::sha256_fingerprint_der(&der));
        SecretEntry {
            type_: s("/type").unwrap_or("").to_string(),
            keys,
            ca_fingerprint,
        }
    });
    let paused_clusters = super::dump::paused_in_record(doc);
    Ok(Some(Entry {
        kind,
        namespace,
        name,
        move_label,
        cluster,
        infrastructure,
        secret,
        paused_clusters,
    }))
}

/// The `tls.crt` of a Secret: base64 under `data`, text under `stringData`.
fn ca_certificate(doc: &Value) -> Option<Vec<u8>> {
    if let Some(b64) = doc.pointer("/data/tls.crt").and_then(Value::as_str) {
        return B64.decode(b64.trim()).ok();
    }
    doc.pointer("/stringData/tls.crt")
        .and_then(Value::as_str)
        .map(|s| s.as_bytes().to_vec())
}

/// [`entry`] for a backup's manifest: a file named like an object whose content is no
/// Kubernetes object (`clusterctl` never writes one) is left out rather than refusing the
/// whole backup; `backup check` then finds the object missing, which fails safe.
pub(crate) fn described(file: &str, bytes: &[u8]) -> Result<Option<Entry>, ObjectsError> {
    match entry(file, bytes) {
        Err(ObjectsError::Unreadable { .. }) => Ok(None),
        other => other,
    }
}

/// The manifest of a whole directory, in the files' order.
pub(crate) fn manifest(files: &[MovedFile]) -> Result<Vec<Entry>, ObjectsError> {
    let mut out = Vec::with_capacity(files.len());
    for f in files {
        if let Some(e) = described(&f.name, &f.bytes)? {
            out.push(e);
        }
    }
    Ok(out)
}

/// The most JSON a manifest may add to an index: the store reads an index of at most 1 MiB
/// (`store::MAX_INDEX`), so about 8,000 objects. A larger dump gets no manifest (its index
/// still lists, and `backup check` then needs the identity) rather than an index no listing
/// would read.
pub(crate) const MAX_MANIFEST_JSON: usize = 768 << 10;

/// [`manifest`] when its JSON fits [`MAX_MANIFEST_JSON`], else `None`.
#[cfg(test)]
pub(crate) fn index_manifest(files: &[MovedFile]) -> Result<Option<Vec<Entry>>, ObjectsError> {
    let m = manifest(files)?;
    let size = serde_json::to_vec(&m).map_or(usize::MAX, |v| v.len());
    Ok((size <= MAX_MANIFEST_JSON).then_some(m))
}

/// Check that an index's manifest is the one the decrypted files give, and return the
/// files' manifest. An index without one (made before the manifest existed) passes: there
/// is nothing to compare.
pub(crate) fn verify(index: &super::Index, files: &[MovedFile]) -> Result<Vec<Entry>, ObjectsError> {
    let mismatch = |what: String| ObjectsError::Mismatch {
        id: index.id.clone(),
        what,
    };
    let Some(listed) = &index.objects else {
        return manifest(files);
    };
    let held = manifest(files).map_err(|e| mismatch(e.to_string()))?;
    if listed.len() != held.len() {
        return Err(mismatch(format!(
            "{} objects listed, {} in the payload",
            listed.len(),
            held.len()
        )));
    }
    for (l, h) in listed.iter().zip(&held) {
        if l != h {
            return Err(mismatch(format!(
                "the index lists {} {}/{}, the payload holds {} {}/{} as {}",
                l.kind,
                l.namespace,
                l.name,
                h.kind,
                h.namespace,
                h.name,
                serde_json::to_string(h).unwrap_or_default()
            )));
        }
    }
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zeroize::Zeroizing;

    /// A CA certificate from the example repository's bundle, and its fingerprint as
    /// lab-f's cluster.yaml records it (`spec.provenance.fingerprints.kubernetesCa`).
    fn example_ca() -> (Vec<u8>, &'static str) {
        let identity = crate::secrets::parse_identities(
            "identity",
            include_str!("../../examples/gitops/testdata/age-identity.txt"),
        )
        .unwrap();
        let sealed = include_str!("../../examples/gitops/clusters/lab-f/secrets/lab-f-ca.yaml");
        let file = crate::secrets::sops::SopsFile::parse("lab-f-ca.yaml", sealed).unwrap();
        let plain = file.decrypt("lab-f-ca.yaml", &identity).unwrap();
        let crt = plain.tree()["data"]["tls.crt"]
            .as_str()
            .unwrap()
            .to_string();
        (
            crt.into_bytes(),
            "sha256:932dfdf44a914fa6ad405e06cebc7388a0ce96519f7aa2855838db8d96cd8400",
        )
    }

    const KEY: &str = "S0VZLXZhbHVlLW5ldmVyLWluLWFuLWluZGV4";
    const PASSWORD: &str = "cGFzc3dvcmQtbmV2ZXItaW4tYW4taW5kZXg=";

    fn moved(name: &str, text: &str) -> MovedFile {
        MovedFile {
            name: name.into(),
            bytes: Zeroizing::new(text.as_bytes().to_vec()),
        }
    }

    #[test]
    fn a_secret_entry_holds_names_and_the_ca_fingerprint_never_a_value() {
        let (crt_b64, fingerprint) = example_ca();
        let crt_b64 = String::from_utf8(crt_b64).unwrap();
        let ca = format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: lab-f-ca\n  namespace: lab-f\n  labels:\n    \
             cluster.x-k8s.io/cluster-name: lab-f\n    {MOVE_LABEL}: \"\"\ntype: cluster.x-k8s.io/secret\n\
             data:\n  tls.crt: {crt_b64}\n  tls.key: {KEY}\n"
        );
        let identity = format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{{\"name\":\"lab-f-vsphere\",\"namespace\":\"lab-f\"}},\
             \"type\":\"Opaque\",\"data\":{{\"password\":\"{PASSWORD}\"}},\"stringData\":{{\"username\":\"plain-user-name\"}}}}"
        );
        let files = vec![
            moved("Secret_lab-f_lab-f-ca.yaml", &ca),
            moved("Secret_lab-f_lab-f-vsphere.yaml", &identity),
            moved(
                "Machine_lab-f_m1.yaml",
                "kind: Machine\nmetadata:\n  name: m1\n  namespace: lab-f\n  labels:\n    cluster.x-k8s.io/cluster-name: lab-f\n\
                 spec:\n  infrastructureRef:\n    kind: VSphereMachine\n    name: v1\n",
            ),
            moved("README.md", "not an object"),
        ];
        let m = manifest(&files).unwrap();
        assert_eq!(m.len(), 2 + 1, "{m:?}");
        let ca = m[0].secret.as_ref().unwrap();
        assert!(m[0].move_label);
        assert_eq!(ca.type_, "cluster.x-k8s.io/secret");
        assert_eq!(ca.keys, ["tls.crt", "tls.key"]);
        assert_eq!(ca.ca_fingerprint.as_deref(), Some(fingerprint));
        let id = m[1].secret.as_ref().unwrap();
        assert!(!m[1].move_label && id.ca_fingerprint.is_none());
        assert_eq!(id.keys, ["password", "username"]);
        assert_eq!(m[2].cluster.as_deref(), Some("lab-f"));
        assert_eq!(m[2].infrastructure.as_deref(), Some("VSphereMachine/v1"));
        // No value of any Secret is in the manifest as the index writes it: not the key,
        // the password, a plain stringData value, nor any line of the certificate.
        let json = serde_json::to_string(&m).unwrap();
        for needle in [KEY, PASSWORD, "plain-user-name", &crt_b64[..40]] {
            assert!(!json.contains(needle), "{needle} in {json}");
        }
        let pem = B64.decode(crt_b64.trim()).unwrap();
        for line in String::from_utf8(pem)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with("-----"))
        {
            assert!(!json.contains(line), "{line}");
        }
        // Round trip through the index's JSON.
        let back: Vec<Entry> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn an_unreadable_file_is_named_without_its_content() {
        let e = entry("Secret_ns_x.yaml", b"data: [\x00 tls.key: S0VZ").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("Secret_ns_x.yaml: not a Kubernetes object"),
            "{msg}"
        );
        assert!(!msg.contains("S0VZ"), "{msg}");
        assert!(entry("Secret_ns_x.yaml", &[0xff, 0xfe]).is_err());
        // A CA Secret whose certificate does not parse has no fingerprint (check says so).
        let e = entry(
            "Secret_ns_c-ca.yaml",
            b"kind: Secret\nmetadata: {name: c-ca, namespace: ns}\ndata: {tls.crt: bm90LWEtY2VydA==}\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(e.secret.unwrap().ca_fingerprint, None);
    }

    #[test]
    fn verify_refuses_an_index_that_lists_other_objects() {
        let files = vec![
            moved(
                "Secret_lab-f_lab-f-talos.yaml",
                "kind: Secret\nmetadata: {name: lab-f-talos, namespace: lab-f}\ndata: {bundle: eA==}\n",
            ),
            moved("Cluster_lab-f_lab-f.yaml", "kind: Cluster\nmetadata: {name: lab-f, namespace: lab-f}\n"),
        ];
        let names: Vec<String> = files.iter().map(|f| f.name.clone()).collect();
        let mut read = |n: &str| {
            Ok(Zeroizing::new(
                files.iter().find(|f| f.name == n).unwrap().bytes.to_vec(),
            ))
        };
        let (mut index, _) = super::super::payload::seal(
            "d",
            &names,
            &mut read,
            ("20261205T084000Z-0123abcd", "2026-12-05T08:40:00Z"),
            &[age::x25519::Identity::generate().to_public()],
            Vec::new(),
        )
        .unwrap();
        assert_eq!(index.objects.as_ref().unwrap().len(), 2);
        verify(&index, &files).unwrap();
        // The index claims a Secret the payload does not hold.
        let mut forged = index.clone();
        forged.objects.as_mut().unwrap()[0].name = "lab-f-other".into();
        let e = verify(&forged, &files).unwrap_err().to_string();
        assert!(
            e.contains("the index lists Secret lab-f/lab-f-other"),
            "{e}"
        );
        // ... or an object more, or a move label the object lacks.
        forged = index.clone();
        forged.objects.as_mut().unwrap().pop();
        assert!(verify(&forged, &files).is_err());
        forged = index.clone();
        forged.objects.as_mut().unwrap()[1].move_label = true;
        assert!(verify(&forged, &files).is_err());
        // A dump too large for a manifest in the index: none, and the index still small.
        let many: Vec<MovedFile> = (0..9000)
            .map(|i| {
                moved(
                    &format!("Machine_lab-f_lab-f-workers-{i:05}.yaml"),
                    &format!("kind: Machine\nmetadata: {{name: lab-f-workers-{i:05}, namespace: lab-f, labels: {{cluster.x-k8s.io/cluster-name: lab-f}}}}\nspec: {{infrastructureRef: {{kind: VSphereMachine, name: lab-f-workers-{i:05}}}}}\n"),
                )
            })
            .collect();
        assert!(index_manifest(&many[..100]).unwrap().is_some());
        assert!(index_manifest(&many).unwrap().is_none());
        // An index from before the manifest: nothing to compare.
        index.objects = None;
        verify(&index, &files).unwrap();
    }
}
