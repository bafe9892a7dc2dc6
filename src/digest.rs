//! Digests as text: sha256 in lowercase hex (input digests, lock files, content hashes,
//! fingerprints) and the uppercase hex SOPS writes its MAC in. A leaf module: it depends
//! on nothing else in the crate.

use sha2::{Digest, Sha256};

/// One input file's digest, for the lock file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digest256 {
    /// Path relative to the repository root.
    pub path: String,
    /// Lowercase hex sha256.
    pub sha256: String,
}

/// Lowercase hex sha256 of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(64);
    push_hex(&Sha256::digest(bytes), &mut s);
    s
}

/// Append `bytes` to `out` as lowercase hex (two digits a byte).
pub fn push_hex(bytes: &[u8], out: &mut String) {
    push_digits(bytes, b"0123456789abcdef", out);
}

/// `bytes` as uppercase hex.
pub fn upper_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    push_digits(bytes, b"0123456789ABCDEF", &mut s);
    s
}

fn push_digits(bytes: &[u8], digits: &[u8; 16], out: &mut String) {
    for &b in bytes {
        out.push(char::from(digits[usize::from(b >> 4)]));
        out.push(char::from(digits[usize::from(b & 0x0f)]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_in_lowercase_hex() {
        // FIPS 180-2 test vector; every nibble value occurs in the two digests.
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let mut s = String::from("x");
        push_hex(&[0x00, 0x0f, 0xf0, 0xff, 0x9a], &mut s);
        assert_eq!(s, "x000ff0ff9a");
        assert_eq!(upper_hex(&[0x0a, 0xff]), "0AFF");
    }
}
