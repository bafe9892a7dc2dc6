//! Multi-document SOPS streams as sops writes them, for `capstan secrets decrypt`.

use age::x25519;
use serde_json::{Map, Value};

use super::{meta_err, parse_metadata, SopsError, SopsFile};

/// Decrypt a SOPS YAML stream as `sops decrypt` does: one document, or several written
/// together by sops, each carrying the same `sops` metadata (getsops/sops
/// `stores/yaml/store.go` `EmitEncryptedFile` appends it to every branch) and one MAC over
/// the values of all of them in order. Documents whose metadata differ were not written
/// together and are refused. The plaintext documents, in order.
pub fn decrypt_stream(
    label: &str,
    text: &str,
    identities: &[x25519::Identity],
) -> Result<Vec<Value>, SopsError> {
    let docs = crate::yaml::parse_stream(text).map_err(|e| SopsError::Yaml {
        label: label.to_string(),
        message: e.message,
    })?;
    let not_sops = || SopsError::NotSops {
        label: label.to_string(),
    };
    let mut trees = Vec::with_capacity(docs.len());
    let mut first_sops: Option<Value> = None;
    for (i, doc) in docs.into_iter().enumerate() {
        let Value::Object(mut tree) = doc else {
            return Err(not_sops());
        };
        let sops = tree.shift_remove("sops").ok_or_else(not_sops)?;
        match &first_sops {
            None => first_sops = Some(sops),
            Some(first) if *first != sops => {
                return Err(meta_err(
                    label,
                    format!(
                        "document {} carries other `sops` metadata than the first: documents sops writes \
                         together share theirs (decrypt each file on its own)",
                        i + 1
                    ),
                ));
            }
            Some(_) => {}
        }
        trees.push(tree);
    }
    let Some(Value::Object(sops)) = first_sops else {
        return Err(meta_err(label, "`sops` is not a map"));
    };
    let file = SopsFile {
        tree: Map::new(),
        metadata: parse_metadata(label, sops)?,
        text: String::new(),
    };
    let refs: Vec<&Map<String, Value>> = trees.iter().collect();
    let (plain, _, _) = file.decrypt_branches(label, identities, &refs)?;
    Ok(plain.into_iter().map(Value::Object).collect())
}
