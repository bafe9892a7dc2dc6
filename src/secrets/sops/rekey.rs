//! `rekey`: a SOPS file's `sops.age` stanzas rewritten for a new recipient set, everything
//! else kept byte-identical. Test support: the diff tests build a recipient-only change with it
//! (`capstan secrets rekey` re-encrypts through `encrypt`).

use super::{check_pair, dedup_recipients, render, stanzas, Plain, SopsError, SopsFile, SOPS_VERSION};
use age::x25519;

/// The result of [`rekey`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rekeyed {
    /// The new file text (the input text verbatim when the recipient set is unchanged).
    pub text: String,
    /// Recipients that gained a stanza.
    pub added: Vec<String>,
    /// Recipients whose stanza was dropped. They may still hold the unchanged data key:
    /// only a fresh [`super::encrypt`] without `previous` rotates it.
    pub removed: Vec<String>,
}

/// Rewrite only the `sops.age` stanzas of `file` for `recipients`: values, MAC,
/// `lastmodified` and the rule stay as they are; stanzas of remaining recipients are kept
/// byte-identical and the data key is wrapped afresh only for new ones. `plain` must be
/// `file`'s decryption (it supplies the data key). Returns the text unchanged when the set
/// of recipients is the same.
pub fn rekey(
    label: &str,
    file: &SopsFile,
    plain: &Plain,
    recipients: &[x25519::Recipient],
) -> Result<Rekeyed, SopsError> {
    check_pair(label, file, plain)?;
    let wanted = dedup_recipients(label, recipients)?;
    let (age, added, removed) = stanzas(label, &plain.data_key, &wanted, Some(&file.metadata.age))?;
    if added.is_empty() && removed.is_empty() {
        return Ok(Rekeyed {
            text: file.text.clone(),
            added,
            removed,
        });
    }
    let mut metadata = file.metadata.clone();
    metadata.age = age;
    if metadata.version.is_none() {
        metadata.version = Some(SOPS_VERSION.to_string());
    }
    Ok(Rekeyed {
        text: render(&file.tree, &metadata),
        added,
        removed,
    })
}
