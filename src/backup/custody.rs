//! Key custody of backups (D16): the recipient policy `backup push` applies, and how an
//! operator marks a recipient as kept offline.
//!
//! A recipients file is age's `-R` format (age v1.2 `cmd/age/parse.go`: one recipient a line,
//! lines starting with `#` and blank lines ignored; no trailing comment on a recipient's
//! line). A recipient is offline when the comment line right before it is
//! [`OFFLINE_MARK`] (text may follow: `# capstan: offline (safe 2, sealed envelope)`), so the
//! same file still works with `age -R`.

use crate::secrets::{parse_recipient, SecretsError};
use age::x25519;

/// The comment line that marks the recipient on the next line as kept offline.
pub(crate) const OFFLINE_MARK: &str = "# capstan: offline";

/// One recipient of a recipients file.
#[derive(Debug, Clone)]
pub(crate) struct Recipient {
    /// The public key.
    pub key: x25519::Recipient,
    /// Whether the line before it is [`OFFLINE_MARK`].
    pub offline: bool,
}

/// The recipients of an age recipients file, each with whether it is marked offline.
pub(crate) fn parse_recipients_file(label: &str, text: &str) -> Result<Vec<Recipient>, SecretsError> {
    let mut out = Vec::new();
    let mut marked = false;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            marked = false;
            continue;
        }
        if line.starts_with('#') {
            marked = line.starts_with(OFFLINE_MARK);
            continue;
        }
        out.push(Recipient {
            key: parse_recipient(&format!("{label}:{}", i + 1), line)?,
            offline: std::mem::take(&mut marked),
        });
    }
    Ok(out)
}

/// What the recipients of a backup lack: at least two distinct recipients (one lost key
/// must not lose every backup), one of them marked offline (so `backup check` in CI, which
/// needs no private key, and a compromised management cluster never hold every key). Empty
/// when the policy holds.
pub(crate) fn policy(recipients: &[Recipient]) -> Vec<String> {
    let mut distinct: Vec<String> = recipients.iter().map(|r| r.key.to_string()).collect();
    distinct.sort();
    distinct.dedup();
    let mut out = Vec::new();
    if distinct.len() < 2 {
        out.push(format!(
            "the backup is encrypted to {} distinct recipient(s): with that key lost every backup is lost, and with \
             it the clusters' CA keys; encrypt to at least two, one kept offline",
            distinct.len()
        ));
    }
    if !recipients.iter().any(|r| r.offline) {
        out.push(format!(
            "no recipient is marked offline: put the DR recipient in a recipients file (-R) with the line \
             `{OFFLINE_MARK}` right before it, and keep its identity off every machine that runs capstan"
        ));
    }
    out
}

/// The custody policy applied to a pushed backup's index (`backup check`, keyless): its
/// recipients, and those it records as offline. An index without the record (pushed before
/// capstan kept it) cannot show the policy holds, and says so.
pub(crate) fn index_policy(index: &super::Index) -> Vec<String> {
    let Some(offline) = &index.offline_recipients else {
        return vec![
            "its index does not record which recipients are kept offline (pushed by an older capstan): push a \
             new backup with a recipients file (-R) that marks the offline DR recipient"
                .into(),
        ];
    };
    let mut distinct: Vec<&str> = index.recipients.iter().map(String::as_str).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let mut out = Vec::new();
    if distinct.len() < 2 {
        out.push(format!(
            "it is encrypted to {} distinct recipient(s): with that key lost the backup is lost, and with it the \
             clusters' CA keys; push with at least two, one kept offline",
            distinct.len()
        ));
    }
    if !offline.iter().any(|o| distinct.contains(&o.as_str())) {
        out.push(format!(
            "none of its recipients is marked offline: push with a recipients file (-R) that has the line \
             `{OFFLINE_MARK}` right before the DR recipient, and keep that identity off every machine that runs capstan"
        ));
    }
    out
}

/// The warning `secrets rekey` and `backup push` give: backups already pushed stay
/// encrypted to the recipients they were pushed with.
pub(crate) const REKEY_WARNING: &str = "backups already pushed stay encrypted to the recipients they were pushed with: a \
     removed recipient still opens them; to take a key out of custody, push a new backup without it and delete the \
     older backups from the store";

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p";

    fn other() -> String {
        x25519::Identity::generate().to_public().to_string()
    }

    #[test]
    fn one_recipient_is_refused_two_with_one_offline_are_accepted() {
        let one = parse_recipients_file("r.txt", &format!("{A}\n")).unwrap();
        let p = policy(&one);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("1 distinct recipient"));
        // The same key twice is still one.
        let twice = parse_recipients_file("r.txt", &format!("{A}\n{OFFLINE_MARK}\n{A}\n")).unwrap();
        assert_eq!(policy(&twice).len(), 1);
        let two = parse_recipients_file("r.txt", &format!("# operator\n{A}\n")).unwrap();
        assert!(!two[0].offline);
        let text = format!("# operator\n{A}\n{OFFLINE_MARK} (safe 2)\n{}\n", other());
        let two = parse_recipients_file("r.txt", &text).unwrap();
        assert!(!two[0].offline && two[1].offline);
        assert!(policy(&two).is_empty(), "{:?}", policy(&two));
        // Two online: the offline one is asked for.
        let online = parse_recipients_file("r.txt", &format!("{A}\n{}\n", other())).unwrap();
        assert_eq!(policy(&online).len(), 1);
        // A blank line ends the mark.
        let gap = parse_recipients_file("r.txt", &format!("{OFFLINE_MARK}\n\n{A}\n")).unwrap();
        assert!(!gap[0].offline);
    }
}
