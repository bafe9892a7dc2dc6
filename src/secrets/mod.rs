//! age encryption for capstan's secrets: parsing recipients and identities, encrypting to
//! several recipients as ASCII-armored age, and decrypting. Uses the `age` crate; no
//! primitive is implemented here. Plaintext leaves this module only as `Zeroizing` bytes,
//! and no error message ever contains key material or plaintext.

pub mod pki;
pub mod seal;
pub mod sops;
pub mod sops_config;
pub mod sopssecret;
pub mod talos;

use age::x25519;
use std::io::{Read, Write};
use zeroize::Zeroizing;

/// Why an age operation failed. Messages never include secret material.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// A recipient string is not an age X25519 recipient.
    #[error("{label}: `{value}` is not an age recipient (expected `age1…`)")]
    BadRecipient {
        /// Where it came from (a flag or a file and line).
        label: String,
        /// The rejected text (public information).
        value: String,
    },
    /// No recipient was given.
    #[error("{label}: at least one age recipient is required")]
    NoRecipients {
        /// Where recipients were expected.
        label: String,
    },
    /// An identity line is malformed (its content is not shown).
    #[error("{label}: line {line}: not an age identity (expected `AGE-SECRET-KEY-1…`)")]
    BadIdentity {
        /// The identity source.
        label: String,
        /// 1-based line.
        line: usize,
    },
    /// An identity source holds no identity.
    #[error("{label}: no age identity found")]
    NoIdentities {
        /// The identity source.
        label: String,
    },
    /// Encryption failed.
    #[error("age encryption failed: {0}")]
    Encrypt(String),
    /// The file is not age, or no identity matches.
    #[error("{label}: {message}")]
    Decrypt {
        /// The file.
        label: String,
        /// What went wrong.
        message: String,
    },
}

/// Parse one recipient.
pub fn parse_recipient(label: &str, value: &str) -> Result<x25519::Recipient, SecretsError> {
    value
        .trim()
        .parse::<x25519::Recipient>()
        .map_err(|_| SecretsError::BadRecipient {
            label: label.to_string(),
            value: value.trim().to_string(),
        })
}

/// Parse the recipients listed in a `cluster.yaml` (`spec.recipients`), naming
/// `<file> spec.recipients[i]` in errors.
pub fn parse_spec_recipients(
    file: &str,
    recipients: &[String],
) -> Result<Vec<x25519::Recipient>, SecretsError> {
    recipients
        .iter()
        .enumerate()
        .map(|(i, r)| parse_recipient(&format!("{file} spec.recipients[{i}]"), r))
        .collect()
}

/// Parse a recipients file: one recipient per line; `#` comments and blank lines ignored.
pub fn parse_recipients_file(label: &str, text: &str) -> Result<Vec<String>, SecretsError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        parse_recipient(&format!("{label}:{}", i + 1), line)?;
        out.push(line.to_string());
    }
    Ok(out)
}

/// Parse identities (an age keys file, or `SOPS_AGE_KEY`-style text: whitespace-separated).
pub fn parse_identities(label: &str, text: &str) -> Result<Vec<x25519::Identity>, SecretsError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        for word in line.split_whitespace() {
            let id = word
                .parse::<x25519::Identity>()
                .map_err(|_| SecretsError::BadIdentity {
                    label: label.to_string(),
                    line: i + 1,
                })?;
            out.push(id);
        }
    }
    if out.is_empty() {
        return Err(SecretsError::NoIdentities {
            label: label.to_string(),
        });
    }
    Ok(out)
}

/// Encrypt to every recipient (one file key, one stanza each), ASCII-armored.
pub fn encrypt_armored(
    plaintext: &[u8],
    recipients: &[x25519::Recipient],
) -> Result<String, SecretsError> {
    let out = encrypt_as(plaintext, recipients, age::armor::Format::AsciiArmor)?;
    String::from_utf8(out).map_err(|e| SecretsError::Encrypt(e.to_string()))
}

/// Encrypt to every recipient, in age's binary format (for large payloads: backups).
#[cfg(any(test, feature = "testkit"))]
pub fn encrypt(
    plaintext: &[u8],
    recipients: &[x25519::Recipient],
) -> Result<Vec<u8>, SecretsError> {
    encrypt_as(plaintext, recipients, age::armor::Format::Binary)
}

fn encrypt_as(
    plaintext: &[u8],
    recipients: &[x25519::Recipient],
    format: age::armor::Format,
) -> Result<Vec<u8>, SecretsError> {
    if recipients.is_empty() {
        return Err(SecretsError::NoRecipients {
            label: "encryption".into(),
        });
    }
    let enc = age::Encryptor::with_recipients(recipients.iter().map(|r| r as &dyn age::Recipient))
        .map_err(|e| SecretsError::Encrypt(e.to_string()))?;
    let mut out = Vec::with_capacity(plaintext.len() * 2 + 512);
    let armor = age::armor::ArmoredWriter::wrap_output(&mut out, format)
        .map_err(|e| SecretsError::Encrypt(e.to_string()))?;
    let mut w = enc
        .wrap_output(armor)
        .map_err(|e| SecretsError::Encrypt(e.to_string()))?;
    w.write_all(plaintext)
        .map_err(|e| SecretsError::Encrypt(e.to_string()))?;
    let armor = w
        .finish()
        .map_err(|e| SecretsError::Encrypt(e.to_string()))?;
    armor
        .finish()
        .map_err(|e| SecretsError::Encrypt(e.to_string()))?;
    Ok(out)
}

/// Decrypt an age file (armored or binary) with any of the identities.
pub fn decrypt(
    label: &str,
    ciphertext: &[u8],
    identities: &[x25519::Identity],
) -> Result<Zeroizing<Vec<u8>>, SecretsError> {
    let fail = |message: String| SecretsError::Decrypt {
        label: label.to_string(),
        message,
    };
    let reader = age::armor::ArmoredReader::new(ciphertext);
    let dec =
        age::Decryptor::new_buffered(reader).map_err(|e| fail(format!("not an age file: {e}")))?;
    let mut stream = dec
        .decrypt(identities.iter().map(|i| i as &dyn age::Identity))
        .map_err(|e| match e {
            age::DecryptError::NoMatchingKeys => {
                fail("no identity matches any of its recipients".into())
            }
            other => fail(other.to_string()),
        })?;
    // Sized up front: a buffer that grows leaves its old, unzeroed copies behind.
    let mut out = Zeroizing::new(Vec::with_capacity(ciphertext.len()));
    stream
        .read_to_end(&mut out)
        .map_err(|e| fail(format!("corrupt age payload: {e}")))?;
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use age::secrecy::ExposeSecret;

    /// A fixed test identity (published here; protects nothing).
    pub(crate) fn test_identity() -> x25519::Identity {
        x25519::Identity::generate()
    }

    #[test]
    fn round_trip_to_two_recipients() {
        let a = test_identity();
        let b = test_identity();
        let recips = vec![a.to_public(), b.to_public()];
        let ct = encrypt_armored(b"hello bundle", &recips).unwrap();
        assert!(ct.starts_with("-----BEGIN AGE ENCRYPTED FILE-----\n"));
        assert!(!ct.contains("hello"));
        for id in [a, b] {
            assert_eq!(
                &*decrypt("x.age", ct.as_bytes(), &[id]).unwrap(),
                b"hello bundle"
            );
        }
        let other = test_identity();
        let e = decrypt("x.age", ct.as_bytes(), &[other]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "x.age: no identity matches any of its recipients"
        );
    }

    #[test]
    fn parsing_never_echoes_secrets() {
        let id = test_identity();
        let secret = id.to_string();
        let text = format!(
            "# created: now\n# public key: {}\n{}\n",
            id.to_public(),
            secret.expose_secret()
        );
        assert_eq!(parse_identities("keys.txt", &text).unwrap().len(), 1);
        let broken = secret
            .expose_secret()
            .replace('Q', "!")
            .replace("AGE-SECRET-KEY-1", "AGE-SECRET-KEY-1X");
        let Err(e) = parse_identities("keys.txt", &format!("{broken}\n")) else {
            panic!("accepted a broken identity")
        };
        let e = e.to_string();
        assert_eq!(
            e,
            "keys.txt: line 1: not an age identity (expected `AGE-SECRET-KEY-1…`)"
        );
        assert!(matches!(
            parse_identities("k", "# nothing\n"),
            Err(SecretsError::NoIdentities { .. })
        ));
        let e = parse_recipients_file("r.txt", "age1notvalid\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "r.txt:1: `age1notvalid` is not an age recipient (expected `age1…`)"
        );
        assert!(matches!(
            decrypt("f", b"plain text", &[test_identity()]),
            Err(SecretsError::Decrypt { .. })
        ));
    }
}
