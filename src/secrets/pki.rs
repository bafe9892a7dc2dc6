//! Certificates and private keys for `capstan import kubeadm`: loading kubeadm CAs and the
//! service-account key (with the checks Talos cannot do for us), generating the Talos OS CA,
//! random tokens and secrets, SHA-256 fingerprints and a secret-free certificate summary.
//!
//! No file IO: every function takes a `label` (the file name, used in errors) and the bytes.
//! Secret material (private keys, tokens) lives in [`Zeroizing`] buffers, is redacted from
//! `Debug`, and never appears in an error message.

use std::fmt;
use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use ed25519_dalek::pkcs8::spki::der::pem::LineEnding as DerLineEnding;
use ed25519_dalek::pkcs8::{EncodePrivateKey as _, EncodePublicKey as _, KeypairBytes};
use p256::pkcs8::{DecodePrivateKey as _, DecodePublicKey as _, PrivateKeyInfoRef};
use rsa::pkcs1::DecodeRsaPrivateKey as _;
use rsa::traits::PublicKeyParts as _;
use sha2::{Digest, Sha256, Sha384, Sha512};
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
use zeroize::Zeroizing;

/// A CA with fewer days than this left gets a [`PkiWarning::ExpiresSoon`].
pub const EXPIRY_WARNING_DAYS: i64 = 90;

/// Validity of a Talos CA: `CAValidityTime = 87600h` (10 years).
pub const TALOS_CA_VALIDITY_SECS: i64 = 87_600 * 3_600;

const SECS_PER_DAY: i64 = 86_400;

// Object identifiers (dotted form, as x509-parser and the der crate print them).
const OID_RSA_ENCRYPTION: &str = "1.2.840.113549.1.1.1";
const OID_SHA256_WITH_RSA: &str = "1.2.840.113549.1.1.11";
const OID_SHA384_WITH_RSA: &str = "1.2.840.113549.1.1.12";
const OID_SHA512_WITH_RSA: &str = "1.2.840.113549.1.1.13";
const OID_EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
const OID_ECDSA_SHA256: &str = "1.2.840.10045.4.3.2";
const OID_ECDSA_SHA384: &str = "1.2.840.10045.4.3.3";
const OID_ECDSA_SHA512: &str = "1.2.840.10045.4.3.4";
const OID_P256: &str = "1.2.840.10045.3.1.7";
const OID_P384: &str = "1.3.132.0.34";
const OID_ED25519: &str = "1.3.101.112";

/// Errors from reading or generating certificates and keys. Every variant names the file
/// (`label`) and the item; none carries key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PkiError {
    /// The PEM framing is broken, or the expected block is missing or repeated.
    #[error("{label}: {item}: {reason}")]
    Pem {
        /// The file the problem is in.
        label: String,
        /// What the file should hold (`certificate`).
        item: &'static str,
        /// What is wrong with the PEM.
        reason: String,
    },
    /// The certificate DER does not parse.
    #[error("{label}: certificate: not a valid X.509 certificate: {reason}")]
    Certificate {
        /// The file the problem is in.
        label: String,
        /// The parser's message, or what else is wrong with the DER.
        reason: String,
    },
    /// The private key does not parse (the reason never contains key bytes).
    #[error("{label}: private key: {reason}")]
    Key {
        /// The file the problem is in.
        label: String,
        /// Why the key does not parse.
        reason: String,
    },
    /// The private key is of a kind that is not accepted here.
    #[error("{label}: private key: {found} is not supported; expected {expected}")]
    UnsupportedKey {
        /// The file the problem is in.
        label: String,
        /// The kind of key found (`an Ed25519 key`, `EC curve …`, a PEM block type).
        found: String,
        /// The kinds of key accepted here.
        expected: &'static str,
    },
    /// The private key's public half differs from the certificate's public key.
    #[error(
        "{key_label}: private key does not belong to the certificate in {crt_label} \
         (their SubjectPublicKeyInfo differ)"
    )]
    KeyMismatch {
        /// The certificate file.
        crt_label: String,
        /// The private key file.
        key_label: String,
    },
    /// The certificate lacks basicConstraints CA:TRUE.
    #[error("{label}: certificate is not a CA: {reason}; expected basicConstraints CA:TRUE")]
    NotCa {
        /// The file the problem is in.
        label: String,
        /// Why it is not a CA (basicConstraints absent or CA:FALSE).
        reason: String,
    },
    /// The certificate is a CA but not a self-signed root.
    #[error(
        "{label}: intermediate CA (subject \"{subject}\", issuer \"{issuer}\": {reason}); \
         Talos cannot carry an intermediate Kubernetes CA, the certificates must be \
         regenerated from a self-signed root CA"
    )]
    Intermediate {
        /// The file the problem is in.
        label: String,
        /// The certificate's subject.
        subject: String,
        /// The certificate's issuer.
        issuer: String,
        /// Why it is not a self-signed root.
        reason: String,
    },
    /// The self-signature uses an algorithm this module cannot verify.
    #[error(
        "{label}: certificate signature algorithm {algorithm} cannot be verified; expected \
         RSA PKCS#1 v1.5 or ECDSA with SHA-256/384/512, or Ed25519"
    )]
    UnsupportedSignature {
        /// The file the problem is in.
        label: String,
        /// The signature algorithm's OID, dotted.
        algorithm: String,
    },
    /// The CA's notAfter lies in the past.
    #[error("{label}: CA certificate expired at {not_after} (now {now}); expected a valid CA")]
    Expired {
        /// The file the problem is in.
        label: String,
        /// The CA's notAfter, RFC 3339 (UTC).
        not_after: String,
        /// The time checked against, RFC 3339 (UTC).
        now: String,
    },
    /// The CA's notBefore lies in the future.
    #[error("{label}: CA certificate is not valid before {not_before} (now {now})")]
    NotYetValid {
        /// The file the problem is in.
        label: String,
        /// The CA's notBefore, RFC 3339 (UTC).
        not_before: String,
        /// The time checked against, RFC 3339 (UTC).
        now: String,
    },
    /// The operating system's random number generator failed.
    #[error("random number generator failed: {reason}")]
    Random {
        /// The generator's error message.
        reason: String,
    },
    /// Building a certificate or encoding a key failed.
    #[error("{label}: cannot generate: {reason}")]
    Generate {
        /// What was being generated (`Talos OS CA`).
        label: String,
        /// The underlying error message.
        reason: String,
    },
}

/// Something worth telling the user that does not stop the import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PkiWarning {
    /// The CA expires within [`EXPIRY_WARNING_DAYS`].
    ExpiresSoon {
        /// The CA certificate file.
        label: String,
        /// The CA's notAfter, RFC 3339 (UTC).
        not_after: String,
        /// Whole days left until notAfter.
        days_left: i64,
    },
}

impl fmt::Display for PkiWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PkiWarning::ExpiresSoon {
                label,
                not_after,
                days_left,
            } => write!(
                f,
                "{label}: CA certificate expires at {not_after} ({days_left} days left, \
                 fewer than {EXPIRY_WARNING_DAYS}); rotate it before or soon after migrating"
            ),
        }
    }
}

/// The algorithm of a private key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAlgorithm {
    /// RSA.
    Rsa {
        /// The modulus size in bits.
        bits: usize,
    },
    /// ECDSA on curve P-256.
    EcdsaP256,
    /// ECDSA on curve P-384.
    EcdsaP384,
    /// Ed25519.
    Ed25519,
}

impl fmt::Display for KeyAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyAlgorithm::Rsa { bits } => write!(f, "RSA {bits}-bit"),
            KeyAlgorithm::EcdsaP256 => f.write_str("ECDSA P-256"),
            KeyAlgorithm::EcdsaP384 => f.write_str("ECDSA P-384"),
            KeyAlgorithm::Ed25519 => f.write_str("Ed25519"),
        }
    }
}

/// How a private key was encoded (its PEM block type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFormat {
    /// `RSA PRIVATE KEY` (PKCS#1).
    Pkcs1,
    /// `EC PRIVATE KEY` (SEC1).
    Sec1,
    /// `PRIVATE KEY` (PKCS#8).
    Pkcs8,
    /// `ED25519 PRIVATE KEY` (PKCS#8 inside, as Talos writes it).
    Ed25519Pkcs8,
}

impl KeyFormat {
    /// The PEM block type.
    pub fn pem_label(self) -> &'static str {
        match self {
            KeyFormat::Pkcs1 => "RSA PRIVATE KEY",
            KeyFormat::Sec1 => "EC PRIVATE KEY",
            KeyFormat::Pkcs8 => "PRIVATE KEY",
            KeyFormat::Ed25519Pkcs8 => "ED25519 PRIVATE KEY",
        }
    }
}

/// A parsed-and-checked private key: the original PEM bytes plus public facts about it.
pub struct PrivateKeyPem {
    pem: Zeroizing<Vec<u8>>,
    algorithm: KeyAlgorithm,
    #[cfg_attr(not(any(test, feature = "testkit")), expect(dead_code, reason = "read by the tests only"))]
    format: KeyFormat,
    public_key_der: Vec<u8>,
}

impl PrivateKeyPem {
    /// The original file bytes, unchanged.
    #[cfg(any(test, feature = "testkit"))]
    pub fn pem(&self) -> &[u8] {
        &self.pem
    }
    /// The key's algorithm (and RSA size).
    #[cfg(any(test, feature = "testkit"))]
    pub fn algorithm(&self) -> KeyAlgorithm {
        self.algorithm
    }
    /// How the key was encoded (its PEM block type).
    #[cfg(any(test, feature = "testkit"))]
    pub fn format(&self) -> KeyFormat {
        self.format
    }
    /// The public key as SubjectPublicKeyInfo DER, derived from the private key.
    pub fn public_key_der(&self) -> &[u8] {
        &self.public_key_der
    }
    /// `sha256:<hex>` of [`Self::public_key_der`].
    pub fn public_key_fingerprint(&self) -> String {
        sha256_fingerprint_der(&self.public_key_der)
    }
    /// Give up the PEM bytes (still zeroized on drop).
    pub fn into_pem(self) -> Zeroizing<Vec<u8>> {
        self.pem
    }
}

impl fmt::Debug for PrivateKeyPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// A CA certificate and its private key, both as the original PEM bytes.
pub struct CertAndKey {
    cert_pem: Vec<u8>,
    key_pem: Zeroizing<Vec<u8>>,
    cert_der: Vec<u8>,
}

impl CertAndKey {
    /// The certificate file bytes, unchanged.
    #[cfg(any(test, feature = "testkit"))]
    pub fn cert_pem(&self) -> &[u8] {
        &self.cert_pem
    }
    /// The private key file bytes, unchanged.
    #[cfg(any(test, feature = "testkit"))]
    pub fn key_pem(&self) -> &[u8] {
        &self.key_pem
    }
    /// The certificate DER (from the PEM block).
    #[cfg(any(test, feature = "testkit"))]
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }
    /// `sha256:<hex>` of the certificate DER (what `openssl x509 -outform der | sha256sum` gives).
    pub fn fingerprint(&self) -> String {
        sha256_fingerprint_der(&self.cert_der)
    }
    /// Split into the certificate PEM and the key PEM.
    pub fn into_parts(self) -> (Vec<u8>, Zeroizing<Vec<u8>>) {
        (self.cert_pem, self.key_pem)
    }
}

impl fmt::Debug for CertAndKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertAndKey")
            .field("cert", &self.fingerprint())
            .field("key", &format_args!("[redacted]"))
            .finish()
    }
}

/// Public facts about a certificate (no secrets), e.g. to compare an endpoint with the
/// apiserver certificate's SANs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertSummary {
    /// Subject in RFC 4514 style (`CN=kubernetes`); empty for an empty subject.
    pub subject: String,
    /// Issuer in RFC 4514 style.
    pub issuer: String,
    /// Serial number, colon-separated hex.
    pub serial: String,
    /// Unix seconds.
    pub not_before: i64,
    /// Unix seconds.
    pub not_after: i64,
    /// basicConstraints CA:TRUE.
    pub is_ca: bool,
    /// DNS names from subjectAltName.
    pub dns_names: Vec<String>,
    /// IP addresses from subjectAltName.
    pub ip_addresses: Vec<IpAddr>,
    /// `sha256:<hex>` of the certificate DER.
    pub sha256: String,
}

impl CertSummary {
    /// Every subjectAltName: the DNS names, then the IP addresses as text.
    pub fn sans(&self) -> Vec<String> {
        self.dns_names
            .iter()
            .cloned()
            .chain(self.ip_addresses.iter().map(ToString::to_string))
            .collect()
    }

    /// notAfter as RFC 3339 (UTC).
    pub fn not_after_rfc3339(&self) -> String {
        format_unix(self.not_after)
    }

    /// notBefore as RFC 3339 (UTC).
    pub fn not_before_rfc3339(&self) -> String {
        format_unix(self.not_before)
    }

    /// Whether `host` (an IP address or a DNS name, no port) is among the SANs. DNS names
    /// compare case-insensitively; a `*.` SAN matches exactly one leftmost label.
    pub fn covers_host(&self, host: &str) -> bool {
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = host.parse::<IpAddr>() {
            return self.ip_addresses.contains(&ip);
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.dns_names.iter().any(|san| {
            let san = san.trim_end_matches('.').to_ascii_lowercase();
            match san.strip_prefix("*.") {
                Some(suffix) => host
                    .split_once('.')
                    .is_some_and(|(first, rest)| !first.is_empty() && rest == suffix),
                None => san == host,
            }
        })
    }
}

/// `sha256:` followed by the lowercase hex SHA-256 of `der`.
pub fn sha256_fingerprint_der(der: &[u8]) -> String {
    let digest = Sha256::digest(der);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    crate::digest::push_hex(&digest, &mut out);
    out
}

/// Seconds since the Unix epoch (negative before it).
pub fn unix_seconds(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_secs()).map_or(i64::MIN, |s| -s),
    }
}

/// RFC 3339 UTC rendering of Unix seconds (`2033-05-22T12:14:42Z`).
pub fn format_unix(secs: i64) -> String {
    match time::OffsetDateTime::from_unix_timestamp(secs) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        Err(_) => format!("@{secs}"),
    }
}

// ---------------------------------------------------------------------------------------
// Certificates

/// The DER of the single `CERTIFICATE` block in `bytes`.
fn certificate_der(label: &str, bytes: &[u8]) -> Result<Vec<u8>, PkiError> {
    let pem_err = |reason: String| PkiError::Pem {
        label: label.to_string(),
        item: "certificate",
        reason,
    };
    let blocks = pem::parse_many(bytes).map_err(|e| pem_err(format!("malformed PEM: {e}")))?;
    let mut others = Vec::new();
    let mut certs = Vec::new();
    for block in blocks {
        if block.tag() == "CERTIFICATE" {
            certs.push(block.into_contents());
        } else {
            others.push(block.tag().to_string());
        }
    }
    match certs.len() {
        1 => Ok(certs.remove(0)),
        0 if others.is_empty() => Err(pem_err(
            "no PEM block found; expected one CERTIFICATE block".into(),
        )),
        0 => Err(pem_err(format!(
            "found {} block(s), expected one CERTIFICATE block",
            others.join(", ")
        ))),
        n => Err(pem_err(format!(
            "found {n} CERTIFICATE blocks, expected exactly one (a CA bundle, e.g. during CA \
             rotation, cannot be carried into Talos)"
        ))),
    }
}

fn parse_x509<'a>(label: &str, der: &'a [u8]) -> Result<X509Certificate<'a>, PkiError> {
    let (rest, cert) = X509Certificate::from_der(der).map_err(|e| PkiError::Certificate {
        label: label.to_string(),
        reason: e.to_string(),
    })?;
    if !rest.is_empty() {
        return Err(PkiError::Certificate {
            label: label.to_string(),
            reason: format!(
                "{} bytes of trailing data after the certificate",
                rest.len()
            ),
        });
    }
    Ok(cert)
}

fn summarize(cert: &X509Certificate<'_>, der: &[u8]) -> CertSummary {
    let mut dns_names = Vec::new();
    let mut ip_addresses = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) => dns_names.push((*d).to_string()),
                GeneralName::IPAddress(bytes) => {
                    if let Ok(v4) = <[u8; 4]>::try_from(*bytes) {
                        ip_addresses.push(IpAddr::from(v4));
                    } else if let Ok(v6) = <[u8; 16]>::try_from(*bytes) {
                        ip_addresses.push(IpAddr::from(v6));
                    }
                }
                _ => {}
            }
        }
    }
    let is_ca = matches!(cert.basic_constraints(), Ok(Some(bc)) if bc.value.ca);
    CertSummary {
        subject: cert.subject().to_string(),
        issuer: cert.issuer().to_string(),
        serial: cert.raw_serial_as_string(),
        not_before: cert.validity().not_before.timestamp(),
        not_after: cert.validity().not_after.timestamp(),
        is_ca,
        dns_names,
        ip_addresses,
        sha256: sha256_fingerprint_der(der),
    }
}

/// Parse a PEM certificate (exactly one `CERTIFICATE` block) into a secret-free summary.
pub fn certificate_summary(label: &str, crt_bytes: &[u8]) -> Result<CertSummary, PkiError> {
    let der = certificate_der(label, crt_bytes)?;
    let cert = parse_x509(label, &der)?;
    Ok(summarize(&cert, &der))
}

/// Check that `crt_bytes` holds one parseable certificate; returns its DER. Used by bundle
/// validation.
pub fn parse_certificate_pem(label: &str, crt_bytes: &[u8]) -> Result<Vec<u8>, PkiError> {
    let der = certificate_der(label, crt_bytes)?;
    parse_x509(label, &der)?;
    Ok(der)
}

/// The SubjectPublicKeyInfo DER of the certificate in `crt_bytes`.
pub fn certificate_public_key_der(label: &str, crt_bytes: &[u8]) -> Result<Vec<u8>, PkiError> {
    let der = certificate_der(label, crt_bytes)?;
    let cert = parse_x509(label, &der)?;
    Ok(cert.public_key().raw.to_vec())
}

enum SignatureCheck {
    Valid,
    Invalid,
    Unsupported,
}

/// Verify `signature` over `message` with the public key in `spki_der`, for the signature
/// algorithm `sig_oid`. All cryptography is done by the RustCrypto crates.
fn verify_signature(
    spki_der: &[u8],
    sig_oid: &str,
    message: &[u8],
    signature: &[u8],
) -> SignatureCheck {
    let ok = |r: bool| {
        if r {
            SignatureCheck::Valid
        } else {
            SignatureCheck::Invalid
        }
    };
    match sig_oid {
        OID_SHA256_WITH_RSA | OID_SHA384_WITH_RSA | OID_SHA512_WITH_RSA => {
            let Ok(key) = rsa::PublicKey::from_public_key_der(spki_der) else {
                return SignatureCheck::Invalid;
            };
            let result = match sig_oid {
                OID_SHA256_WITH_RSA => key.pkcs1v15_verify::<Sha256>(message, signature),
                OID_SHA384_WITH_RSA => key.pkcs1v15_verify::<Sha384>(message, signature),
                _ => key.pkcs1v15_verify::<Sha512>(message, signature),
            };
            ok(result.is_ok())
        }
        OID_ECDSA_SHA256 | OID_ECDSA_SHA384 | OID_ECDSA_SHA512 => {
            use p256::ecdsa::signature::hazmat::PrehashVerifier as _;
            let digest: Vec<u8> = match sig_oid {
                OID_ECDSA_SHA256 => Sha256::digest(message).to_vec(),
                OID_ECDSA_SHA384 => Sha384::digest(message).to_vec(),
                _ => Sha512::digest(message).to_vec(),
            };
            if let Ok(key) = p256::ecdsa::VerifyingKey::from_public_key_der(spki_der) {
                let Ok(sig) = p256::ecdsa::Signature::from_der(signature) else {
                    return SignatureCheck::Invalid;
                };
                ok(key.verify_prehash(&digest, &sig).is_ok())
            } else if let Ok(key) = p384::ecdsa::VerifyingKey::from_public_key_der(spki_der) {
                let Ok(sig) = p384::ecdsa::Signature::from_der(signature) else {
                    return SignatureCheck::Invalid;
                };
                ok(key.verify_prehash(&digest, &sig).is_ok())
            } else {
                SignatureCheck::Invalid
            }
        }
        OID_ED25519 => {
            use ed25519_dalek::pkcs8::DecodePublicKey as _;
            use ed25519_dalek::Verifier as _;
            let Ok(key) = ed25519_dalek::VerifyingKey::from_public_key_der(spki_der) else {
                return SignatureCheck::Invalid;
            };
            let Ok(sig) = ed25519_dalek::Signature::from_slice(signature) else {
                return SignatureCheck::Invalid;
            };
            ok(key.verify(message, &sig).is_ok())
        }
        _ => SignatureCheck::Unsupported,
    }
}

/// Load a kubeadm CA (`ca.crt` + `ca.key`, `etcd/ca.*`, `front-proxy-ca.*`) and check it can
/// be carried into Talos: the key parses and belongs to the certificate, the certificate is
/// a CA (basicConstraints CA:TRUE), a self-signed root (subject == issuer and the signature
/// verifies with its own key), and valid at `now`. A CA with fewer than
/// [`EXPIRY_WARNING_DAYS`] left yields a warning. The original file bytes are kept.
pub fn load_ca(
    label_crt: &str,
    crt_bytes: &[u8],
    label_key: &str,
    key_bytes: &[u8],
    now: SystemTime,
) -> Result<(CertAndKey, Vec<PkiWarning>), PkiError> {
    let der = certificate_der(label_crt, crt_bytes)?;
    let cert = parse_x509(label_crt, &der)?;
    let key = parse_private_key(label_key, key_bytes)?;

    if key.public_key_der.as_slice() != cert.public_key().raw {
        return Err(PkiError::KeyMismatch {
            crt_label: label_crt.to_string(),
            key_label: label_key.to_string(),
        });
    }

    match cert.basic_constraints() {
        Ok(Some(bc)) if bc.value.ca => {}
        Ok(Some(_)) => {
            return Err(PkiError::NotCa {
                label: label_crt.to_string(),
                reason: "basicConstraints is CA:FALSE".into(),
            })
        }
        Ok(None) => {
            return Err(PkiError::NotCa {
                label: label_crt.to_string(),
                reason: "no basicConstraints extension".into(),
            })
        }
        Err(e) => {
            return Err(PkiError::Certificate {
                label: label_crt.to_string(),
                reason: format!("basicConstraints: {e}"),
            })
        }
    }

    let intermediate = |reason: &str| PkiError::Intermediate {
        label: label_crt.to_string(),
        subject: cert.subject().to_string(),
        issuer: cert.issuer().to_string(),
        reason: reason.to_string(),
    };
    if cert.subject().as_raw() != cert.issuer().as_raw() {
        return Err(intermediate("issuer differs from subject"));
    }
    let sig_oid = cert.signature_algorithm.algorithm.to_id_string();
    match verify_signature(
        cert.public_key().raw,
        &sig_oid,
        cert.tbs_certificate.as_ref(),
        &cert.signature_value.data,
    ) {
        SignatureCheck::Valid => {}
        SignatureCheck::Invalid => {
            return Err(intermediate(
                "its signature does not verify with its own public key",
            ))
        }
        SignatureCheck::Unsupported => {
            return Err(PkiError::UnsupportedSignature {
                label: label_crt.to_string(),
                algorithm: sig_oid,
            })
        }
    }

    let now_secs = unix_seconds(now);
    let not_before = cert.validity().not_before.timestamp();
    let not_after = cert.validity().not_after.timestamp();
    if not_after < now_secs {
        return Err(PkiError::Expired {
            label: label_crt.to_string(),
            not_after: format_unix(not_after),
            now: format_unix(now_secs),
        });
    }
    if not_before > now_secs {
        return Err(PkiError::NotYetValid {
            label: label_crt.to_string(),
            not_before: format_unix(not_before),
            now: format_unix(now_secs),
        });
    }
    let mut warnings = Vec::new();
    let days_left = (not_after - now_secs) / SECS_PER_DAY;
    if days_left < EXPIRY_WARNING_DAYS {
        warnings.push(PkiWarning::ExpiresSoon {
            label: label_crt.to_string(),
            not_after: format_unix(not_after),
            days_left,
        });
    }
    drop(cert);

    Ok((
        CertAndKey {
            cert_pem: crt_bytes.to_vec(),
            key_pem: key.pem,
            cert_der: der,
        },
        warnings,
    ))
}

// ---------------------------------------------------------------------------------------
// Private keys

fn key_err(label: &str, reason: impl Into<String>) -> PkiError {
    PkiError::Key {
        label: label.to_string(),
        reason: reason.into(),
    }
}

fn spki_err(label: &str) -> impl Fn(ed25519_dalek::pkcs8::spki::Error) -> PkiError + '_ {
    move |e| key_err(label, format!("cannot encode its public key: {e}"))
}

/// Parse a PEM private key: `RSA PRIVATE KEY` (PKCS#1), `EC PRIVATE KEY` (SEC1, P-256 or
/// P-384; a leading `EC PARAMETERS` block is skipped), `PRIVATE KEY` (PKCS#8: RSA, EC,
/// Ed25519) or `ED25519 PRIVATE KEY` (PKCS#8, as Talos writes it). The original bytes are
/// kept; the public key is derived as SubjectPublicKeyInfo DER.
pub fn parse_private_key(label: &str, bytes: &[u8]) -> Result<PrivateKeyPem, PkiError> {
    let blocks = pem::parse_many(bytes).map_err(|e| key_err(label, pem_key_reason(&e)))?;
    let mut found: Option<(String, Zeroizing<Vec<u8>>)> = None;
    let mut count = 0usize;
    for block in blocks {
        let tag = block.tag().to_string();
        let der = Zeroizing::new(block.into_contents());
        if tag == "EC PARAMETERS" {
            continue;
        }
        count += 1;
        if found.is_none() {
            found = Some((tag, der));
        }
    }
    let (tag, der) = match (found, count) {
        (Some(f), 1) => f,
        (None, _) => {
            return Err(key_err(
                label,
                "no PEM block found; expected one private key block",
            ))
        }
        (Some(_), n) => {
            return Err(key_err(
                label,
                format!("found {n} PEM blocks, expected exactly one private key"),
            ))
        }
    };

    let (algorithm, format, public_key_der) = match tag.as_str() {
        "RSA PRIVATE KEY" => {
            let key = rsa::PrivateKey::from_pkcs1_der(&der)
                .map_err(|e| key_err(label, format!("invalid PKCS#1 RSA key: {e}")))?;
            let (alg, spki) = rsa_facts(label, &key)?;
            (alg, KeyFormat::Pkcs1, spki)
        }
        "EC PRIVATE KEY" => {
            if let Ok(key) = p256::SecretKey::from_sec1_der(&der) {
                let spki = key
                    .public_key()
                    .to_public_key_der()
                    .map_err(spki_err(label))?;
                (KeyAlgorithm::EcdsaP256, KeyFormat::Sec1, spki.into_vec())
            } else if let Ok(key) = p384::SecretKey::from_sec1_der(&der) {
                let spki = key
                    .public_key()
                    .to_public_key_der()
                    .map_err(spki_err(label))?;
                (KeyAlgorithm::EcdsaP384, KeyFormat::Sec1, spki.into_vec())
            } else {
                return Err(key_err(
                    label,
                    "invalid SEC1 EC key, or a curve other than P-256/P-384",
                ));
            }
        }
        "PRIVATE KEY" => {
            let (alg, spki) = pkcs8_facts(label, &der)?;
            (alg, KeyFormat::Pkcs8, spki)
        }
        "ED25519 PRIVATE KEY" => {
            let (alg, spki) = pkcs8_facts(label, &der)?;
            if alg != KeyAlgorithm::Ed25519 {
                return Err(key_err(
                    label,
                    format!("ED25519 PRIVATE KEY block holds a {alg} key"),
                ));
            }
            (alg, KeyFormat::Ed25519Pkcs8, spki)
        }
        "ENCRYPTED PRIVATE KEY" => {
            return Err(PkiError::UnsupportedKey {
                label: label.to_string(),
                found: "an encrypted PKCS#8 key".into(),
                expected: "an unencrypted key (decrypt it with `openssl pkey` first)",
            })
        }
        other => {
            return Err(PkiError::UnsupportedKey {
                label: label.to_string(),
                found: format!("PEM block type \"{other}\""),
                expected: "RSA PRIVATE KEY, EC PRIVATE KEY, PRIVATE KEY or ED25519 PRIVATE KEY",
            })
        }
    };
    Ok(PrivateKeyPem {
        pem: Zeroizing::new(bytes.to_vec()),
        algorithm,
        format,
        public_key_der,
    })
}

/// Describe a PEM error on a key file without quoting its content (a base64 error names
/// the offending byte, a header error repeats the header line).
fn pem_key_reason(e: &pem::PemError) -> String {
    match e {
        pem::PemError::MismatchedTags(begin, end) => {
            format!("malformed PEM: BEGIN {begin:?} does not match END {end:?}")
        }
        pem::PemError::InvalidData(_) => "malformed PEM: invalid base64 in the block".into(),
        pem::PemError::InvalidHeader(_) => "malformed PEM: invalid header line".into(),
        pem::PemError::NotUtf8(_) => "malformed PEM: not UTF-8".into(),
        other => format!("malformed PEM: {other}"),
    }
}

fn rsa_facts(label: &str, key: &rsa::PrivateKey) -> Result<(KeyAlgorithm, Vec<u8>), PkiError> {
    let public = key.to_public_key();
    let bits = public.size() * 8;
    let spki = public.to_public_key_der().map_err(spki_err(label))?;
    Ok((KeyAlgorithm::Rsa { bits }, spki.into_vec()))
}

fn pkcs8_facts(label: &str, der: &[u8]) -> Result<(KeyAlgorithm, Vec<u8>), PkiError> {
    let info = PrivateKeyInfoRef::try_from(der)
        .map_err(|e| key_err(label, format!("invalid PKCS#8 structure: {e}")))?;
    let oid = info.algorithm.oid.to_string();
    let params = info.algorithm.parameters_oid().ok().map(|o| o.to_string());
    let invalid = |what: &str| key_err(label, format!("invalid PKCS#8 {what} key"));
    match (oid.as_str(), params.as_deref()) {
        (OID_RSA_ENCRYPTION, _) => {
            let key = rsa::PrivateKey::from_pkcs8_der(der).map_err(|_| invalid("RSA"))?;
            rsa_facts(label, &key)
        }
        (OID_EC_PUBLIC_KEY, Some(OID_P256)) => {
            let key = p256::SecretKey::from_pkcs8_der(der).map_err(|_| invalid("P-256"))?;
            let spki = key
                .public_key()
                .to_public_key_der()
                .map_err(spki_err(label))?;
            Ok((KeyAlgorithm::EcdsaP256, spki.into_vec()))
        }
        (OID_EC_PUBLIC_KEY, Some(OID_P384)) => {
            let key = p384::SecretKey::from_pkcs8_der(der).map_err(|_| invalid("P-384"))?;
            let spki = key
                .public_key()
                .to_public_key_der()
                .map_err(spki_err(label))?;
            Ok((KeyAlgorithm::EcdsaP384, spki.into_vec()))
        }
        (OID_EC_PUBLIC_KEY, curve) => Err(PkiError::UnsupportedKey {
            label: label.to_string(),
            found: format!("EC curve {}", curve.unwrap_or("(none given)")),
            expected: "P-256 or P-384",
        }),
        (OID_ED25519, _) => {
            let key =
                ed25519_dalek::SigningKey::from_pkcs8_der(der).map_err(|_| invalid("Ed25519"))?;
            let spki = key
                .verifying_key()
                .to_public_key_der()
                .map_err(spki_err(label))?;
            Ok((KeyAlgorithm::Ed25519, spki.into_vec()))
        }
        (other, _) => Err(PkiError::UnsupportedKey {
            label: label.to_string(),
            found: format!("PKCS#8 key algorithm {other}"),
            expected: "RSA, ECDSA P-256/P-384 or Ed25519",
        }),
    }
}

/// Load the kube-apiserver service-account signing key (`sa.key`): RSA or ECDSA (what
/// kube-apiserver accepts for `--service-account-signing-key-file`).
pub fn load_service_account_key(label: &str, bytes: &[u8]) -> Result<PrivateKeyPem, PkiError> {
    let key = parse_private_key(label, bytes)?;
    if key.algorithm == KeyAlgorithm::Ed25519 {
        return Err(PkiError::UnsupportedKey {
            label: label.to_string(),
            found: "an Ed25519 key".into(),
            expected: "an RSA or ECDSA key (kube-apiserver cannot sign service-account tokens with Ed25519)",
        });
    }
    Ok(key)
}

// ---------------------------------------------------------------------------------------
// Generation

const OS_CA_LABEL: &str = "Talos OS CA";

fn fill_random(buf: &mut [u8]) -> Result<(), PkiError> {
    getrandom::fill(buf).map_err(|e| PkiError::Random {
        reason: e.to_string(),
    })
}

fn gen_err(reason: impl fmt::Display) -> PkiError {
    PkiError::Generate {
        label: OS_CA_LABEL.to_string(),
        reason: reason.to_string(),
    }
}

/// Signs for rcgen with an Ed25519 key from ed25519-dalek.
struct Ed25519Signer<'a> {
    key: &'a ed25519_dalek::SigningKey,
    public: [u8; 32],
}

impl rcgen::PublicKeyData for Ed25519Signer<'_> {
    fn der_bytes(&self) -> &[u8] {
        &self.public
    }
    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &rcgen::PKCS_ED25519
    }
}

impl rcgen::SigningKey for Ed25519Signer<'_> {
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        use ed25519_dalek::Signer as _;
        Ok(self.key.sign(msg).to_bytes().to_vec())
    }
}

/// PEM-encode a certificate DER with LF line endings and 64-column lines (Go's layout).
pub fn encode_certificate_pem(der: &[u8]) -> Vec<u8> {
    let block = pem::Pem::new("CERTIFICATE", der.to_vec());
    let config = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
    pem::encode_config(&block, config).into_bytes()
}

/// Generate the Talos OS (apid/trustd) CA as `talosctl gen secrets` does: Ed25519, subject
/// `O=talos` only, valid from `now` for 87600h, basicConstraints CA:TRUE, keyUsage
/// (critical) digitalSignature+keyCertSign, extKeyUsage serverAuth+clientAuth, random
/// 128-bit serial. The key is written as Talos writes it: a PKCS#8 (v1, no public key)
/// DER in an `ED25519 PRIVATE KEY` PEM block.
pub fn generate_os_ca(now: SystemTime) -> Result<CertAndKey, PkiError> {
    let mut seed = Zeroizing::new([0u8; 32]);
    fill_random(seed.as_mut())?;
    let signing = ed25519_dalek::SigningKey::from_bytes(&seed);
    let signer = Ed25519Signer {
        key: &signing,
        public: signing.verifying_key().to_bytes(),
    };
    let spki = signing
        .verifying_key()
        .to_public_key_der()
        .map_err(gen_err)?;

    let now_secs = unix_seconds(now);
    let mut params = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationName, "talos");
    params.distinguished_name = dn;
    params.not_before = time::OffsetDateTime::from_unix_timestamp(now_secs).map_err(gen_err)?;
    params.not_after =
        time::OffsetDateTime::from_unix_timestamp(now_secs.saturating_add(TALOS_CA_VALIDITY_SECS))
            .map_err(gen_err)?;
    let mut serial = [0u8; 16];
    fill_random(&mut serial)?;
    // Positive and exactly 16 bytes in DER (no leading zero byte needed or dropped).
    serial[0] = (serial[0] & 0x7f) | 0x40;
    params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyCertSign,
    ];
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.key_identifier_method =
        rcgen::KeyIdMethod::PreSpecified(Sha256::digest(spki.as_bytes())[..20].to_vec());
    let cert = params.self_signed(&signer).map_err(gen_err)?;
    let cert_der = cert.der().to_vec();

    let keypair = KeypairBytes {
        secret_key: signing.to_bytes(),
        public_key: None,
    };
    let doc = keypair.to_pkcs8_der().map_err(gen_err)?;
    let key_pem = doc
        .to_pem(KeyFormat::Ed25519Pkcs8.pem_label(), DerLineEnding::LF)
        .map_err(gen_err)?;
    let key_pem = Zeroizing::new(key_pem.as_bytes().to_vec());

    Ok(CertAndKey {
        cert_pem: encode_certificate_pem(&cert_der),
        key_pem,
        cert_der,
    })
}

/// A kubeadm-format token `[0-9a-z]{6}.[0-9a-z]{16}` from the OS CSPRNG (rejection sampling:
/// bytes >= 252 are discarded so every character is equally likely), as Talos's `genToken`.
pub fn generate_token() -> Result<Zeroizing<String>, PkiError> {
    let mut out = Zeroizing::new(String::with_capacity(23));
    push_token_chars(&mut out, 6)?;
    out.push('.');
    push_token_chars(&mut out, 16)?;
    Ok(out)
}

/// Map a random byte to a token character, or reject it: bytes >= 252 (= 7 * 36) are
/// discarded so each of the 36 characters comes from exactly 7 byte values.
fn token_char(b: u8) -> Option<char> {
    const CHARS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    const LIMIT: u8 = 252;
    (b < LIMIT).then(|| char::from(CHARS[usize::from(b % 36)]))
}

fn push_token_chars(out: &mut String, n: usize) -> Result<(), PkiError> {
    let mut buf = Zeroizing::new([0u8; 32]);
    let mut produced = 0;
    while produced < n {
        fill_random(buf.as_mut())?;
        for c in buf.iter().filter_map(|&b| token_char(b)) {
            if produced == n {
                break;
            }
            out.push(c);
            produced += 1;
        }
    }
    Ok(())
}

/// 32 random bytes, standard base64 with padding (44 characters): `cluster.secret` and the
/// encryption secrets.
pub fn random_base64_32() -> Result<Zeroizing<String>, PkiError> {
    let mut buf = Zeroizing::new([0u8; 32]);
    fill_random(buf.as_mut())?;
    Ok(Zeroizing::new(
        base64::engine::general_purpose::STANDARD.encode(&buf[..]),
    ))
}

/// 32 random bytes, URL-safe base64 with padding: `cluster.id` as talosctl < 1.14 writes it.
pub fn random_cluster_id() -> Result<String, PkiError> {
    let mut buf = [0u8; 32];
    fill_random(&mut buf)?;
    Ok(base64::engine::general_purpose::URL_SAFE.encode(buf))
}

// ---------------------------------------------------------------------------------------
// Test fixtures

#[cfg(any(test, feature = "testkit"))]
#[doc(hidden)]
#[allow(missing_docs, clippy::unwrap_used, clippy::missing_panics_doc)]
pub mod testkit;

#[cfg(test)]
mod tests {
    use super::testkit::{self, Alg, TestKey};
    use super::*;

    fn assert_no_secret(msg: &str, key_pem: &[u8]) {
        let text = String::from_utf8_lossy(key_pem);
        for line in text
            .lines()
            .filter(|l| !l.starts_with("-----") && l.len() > 8)
        {
            assert!(
                !msg.contains(line),
                "error message leaks key material: {msg}"
            );
        }
    }

    #[test]
    fn loads_p256_and_rsa_cas_in_every_encoding() {
        for (alg, slot) in [(Alg::P256, 0), (Alg::Rsa, 0)] {
            let key = TestKey::new(alg, slot);
            let crt = testkit::self_signed_ca(&key, "kubernetes", 3650);
            for key_pem in [key.traditional_pem(), key.pkcs8_pem()] {
                let (ca, warnings) =
                    load_ca("ca.crt", &crt, "ca.key", &key_pem, testkit::now()).unwrap();
                assert!(warnings.is_empty(), "{warnings:?}");
                assert_eq!(
                    ca.cert_pem(),
                    crt.as_slice(),
                    "cert bytes must be kept verbatim"
                );
                assert_eq!(
                    ca.key_pem(),
                    key_pem.as_slice(),
                    "key bytes must be kept verbatim"
                );
                assert!(ca.fingerprint().starts_with("sha256:"));
            }
        }
    }

    #[test]
    fn key_formats_are_recognised() {
        let ec = TestKey::new(Alg::P256, 0);
        let rsa = TestKey::new(Alg::Rsa, 0);
        let k = parse_private_key("k", &ec.traditional_pem()).unwrap();
        assert_eq!(
            (k.algorithm(), k.format()),
            (KeyAlgorithm::EcdsaP256, KeyFormat::Sec1)
        );
        let k = parse_private_key("k", &ec.pkcs8_pem()).unwrap();
        assert_eq!(
            (k.algorithm(), k.format()),
            (KeyAlgorithm::EcdsaP256, KeyFormat::Pkcs8)
        );
        let k = parse_private_key("k", &rsa.traditional_pem()).unwrap();
        assert_eq!(
            (k.algorithm(), k.format()),
            (KeyAlgorithm::Rsa { bits: 2048 }, KeyFormat::Pkcs1)
        );
        let k = parse_private_key("k", &rsa.pkcs8_pem()).unwrap();
        assert_eq!(k.format(), KeyFormat::Pkcs8);

        // P-384 in SEC1 and PKCS#8.
        use p384::elliptic_curve::Generate as _;
        use p384::pkcs8::EncodePrivateKey as _;
        let k384 = p384::SecretKey::generate();
        let sec1 = k384.to_sec1_pem(p384::pkcs8::LineEnding::LF).unwrap();
        let k = parse_private_key("k", sec1.as_bytes()).unwrap();
        assert_eq!(
            (k.algorithm(), k.format()),
            (KeyAlgorithm::EcdsaP384, KeyFormat::Sec1)
        );
        let p8 = k384.to_pkcs8_pem(p384::pkcs8::LineEnding::LF).unwrap();
        let k = parse_private_key("k", p8.as_bytes()).unwrap();
        assert_eq!(k.algorithm(), KeyAlgorithm::EcdsaP384);
        assert_eq!(
            k.public_key_der(),
            k384.public_key().to_public_key_der().unwrap().as_bytes()
        );

        // An "EC PARAMETERS" block before the key (openssl ecparam without -noout) is skipped.
        let with_params = format!(
            "-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n{}",
            String::from_utf8_lossy(&ec.traditional_pem())
        );
        let k = parse_private_key("k", with_params.as_bytes()).unwrap();
        assert_eq!(k.algorithm(), KeyAlgorithm::EcdsaP256);
        assert_eq!(k.pem(), with_params.as_bytes());
    }

    #[test]
    fn bad_keys_are_rejected_without_leaking() {
        let ec = TestKey::new(Alg::P256, 0);
        let pem = ec.traditional_pem();
        // Corrupt the DER inside a valid PEM frame.
        let text = String::from_utf8_lossy(&pem)
            .replace(
                "-----BEGIN EC PRIVATE KEY-----",
                "-----BEGIN RSA PRIVATE KEY-----",
            )
            .replace(
                "-----END EC PRIVATE KEY-----",
                "-----END RSA PRIVATE KEY-----",
            );
        let err = parse_private_key("sa.key", text.as_bytes()).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("sa.key: private key: invalid PKCS#1 RSA key"),
            "{msg}"
        );
        assert_no_secret(&msg, &pem);

        let err = parse_private_key("sa.key", b"not a key").unwrap_err();
        assert_eq!(
            err.to_string(),
            "sa.key: private key: no PEM block found; expected one private key block"
        );
        let crt = testkit::self_signed_ca(&ec, "x", 10);
        let err = parse_private_key("ca.key", &crt).unwrap_err();
        assert!(matches!(err, PkiError::UnsupportedKey { .. }), "{err}");
        assert!(err.to_string().contains("\"CERTIFICATE\""), "{err}");

        let mut garbled = pem.to_vec();
        garbled[40] = b'*';
        let err = parse_private_key("sa.key", &garbled).unwrap_err();
        assert_eq!(
            err.to_string(),
            "sa.key: private key: malformed PEM: invalid base64 in the block"
        );

        let two = [pem.as_slice(), pem.as_slice()].concat();
        let err = parse_private_key("ca.key", &two).unwrap_err();
        assert!(err.to_string().contains("found 2 PEM blocks"), "{err}");

        let debug = format!("{:?}", parse_private_key("k", &pem).unwrap());
        assert_eq!(debug, "[redacted]");
    }

    #[test]
    fn key_must_match_certificate() {
        let a = TestKey::new(Alg::P256, 0);
        let b = TestKey::new(Alg::P256, 0);
        let crt = testkit::self_signed_ca(&a, "kubernetes", 3650);
        let err = load_ca(
            "pki/ca.crt",
            &crt,
            "pki/ca.key",
            &b.traditional_pem(),
            testkit::now(),
        )
        .unwrap_err();
        assert_eq!(
            err,
            PkiError::KeyMismatch {
                crt_label: "pki/ca.crt".into(),
                key_label: "pki/ca.key".into()
            }
        );
        // RSA key against an EC certificate too.
        let r = TestKey::new(Alg::Rsa, 1);
        let err = load_ca(
            "ca.crt",
            &crt,
            "ca.key",
            &r.traditional_pem(),
            testkit::now(),
        )
        .unwrap_err();
        assert!(matches!(err, PkiError::KeyMismatch { .. }));
    }

    #[test]
    fn leaf_is_not_a_ca() {
        let ca_key = TestKey::new(Alg::P256, 0);
        let params = testkit::ca_params(
            "kubernetes",
            testkit::days_from_now(-1),
            testkit::days_from_now(3650),
        );
        let leaf_key = TestKey::new(Alg::P256, 0);
        let leaf = testkit::signed_by(&leaf_key, "kube-apiserver", false, &params, &ca_key);
        let err = load_ca(
            "apiserver.crt",
            &leaf,
            "apiserver.key",
            &leaf_key.traditional_pem(),
            testkit::now(),
        )
        .unwrap_err();
        assert!(
            matches!(err, PkiError::NotCa { ref label, .. } if label == "apiserver.crt"),
            "{err}"
        );
        assert!(err.to_string().contains("CA:FALSE"), "{err}");
    }

    #[test]
    fn intermediate_ca_is_refused() {
        let root_key = TestKey::new(Alg::Rsa, 2);
        let root = testkit::ca_params(
            "root",
            testkit::days_from_now(-1),
            testkit::days_from_now(3650),
        );
        let int_key = TestKey::new(Alg::P256, 0);
        let int = testkit::signed_by(&int_key, "kubernetes", true, &root, &root_key);
        let err = load_ca(
            "ca.crt",
            &int,
            "ca.key",
            &int_key.traditional_pem(),
            testkit::now(),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, PkiError::Intermediate { .. }), "{msg}");
        assert!(msg.starts_with("ca.crt: intermediate CA"), "{msg}");
        assert!(
            msg.contains("Talos cannot carry an intermediate Kubernetes CA"),
            "{msg}"
        );
        assert!(msg.contains("issuer differs from subject"), "{msg}");

        // Same name as the issuer but signed by another key: still not self-signed.
        let same_name = testkit::signed_by(&int_key, "root", true, &root, &root_key);
        let err = load_ca(
            "ca.crt",
            &same_name,
            "ca.key",
            &int_key.traditional_pem(),
            testkit::now(),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("does not verify with its own public key"),
            "{err}"
        );
    }

    #[test]
    fn validity_window_is_checked() {
        let key = TestKey::new(Alg::P256, 0);
        let kp = key.traditional_pem();
        let expired = testkit::ca_params(
            "old",
            testkit::days_from_now(-400),
            testkit::days_from_now(-1),
        );
        let crt = encode_certificate_pem(expired.self_signed(&key).unwrap().der());
        let err = load_ca("ca.crt", &crt, "ca.key", &kp, testkit::now()).unwrap_err();
        assert!(matches!(err, PkiError::Expired { .. }), "{err}");
        assert!(
            err.to_string()
                .starts_with("ca.crt: CA certificate expired at "),
            "{err}"
        );

        let future = testkit::ca_params(
            "new",
            testkit::days_from_now(2),
            testkit::days_from_now(400),
        );
        let crt = encode_certificate_pem(future.self_signed(&key).unwrap().der());
        let err = load_ca("ca.crt", &crt, "ca.key", &kp, testkit::now()).unwrap_err();
        assert!(matches!(err, PkiError::NotYetValid { .. }), "{err}");

        let soon = testkit::self_signed_ca(&key, "soon", 30);
        let (_, warnings) = load_ca("ca.crt", &soon, "ca.key", &kp, testkit::now()).unwrap();
        assert_eq!(warnings.len(), 1);
        let PkiWarning::ExpiresSoon {
            label, days_left, ..
        } = &warnings[0];
        assert_eq!(label, "ca.crt");
        assert!((29..=30).contains(days_left), "{days_left}");

        let fine = testkit::self_signed_ca(&key, "fine", 91);
        let (_, warnings) = load_ca("ca.crt", &fine, "ca.key", &kp, testkit::now()).unwrap();
        assert!(warnings.is_empty());
    }

    #[test]
    fn certificate_file_problems_name_the_file() {
        let key = TestKey::new(Alg::P256, 0);
        let crt = testkit::self_signed_ca(&key, "kubernetes", 100);
        let two = [crt.as_slice(), crt.as_slice()].concat();
        let err = load_ca(
            "ca.crt",
            &two,
            "ca.key",
            &key.traditional_pem(),
            testkit::now(),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("ca.crt: certificate: found 2 CERTIFICATE blocks"),
            "{err}"
        );
        let err = load_ca(
            "ca.crt",
            b"",
            "ca.key",
            &key.traditional_pem(),
            testkit::now(),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("ca.crt: certificate: no PEM block"),
            "{err}"
        );
        let bogus = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let err = load_ca(
            "ca.crt",
            bogus,
            "ca.key",
            &key.traditional_pem(),
            testkit::now(),
        )
        .unwrap_err();
        assert!(matches!(err, PkiError::Certificate { .. }), "{err}");
    }

    #[test]
    fn service_account_key_rsa_or_ecdsa() {
        let ec = TestKey::new(Alg::P256, 0);
        let k = load_service_account_key("sa.key", &ec.traditional_pem()).unwrap();
        assert_eq!(k.algorithm(), KeyAlgorithm::EcdsaP256);
        assert_eq!(
            k.public_key_fingerprint(),
            sha256_fingerprint_der(
                ec.p256
                    .as_ref()
                    .unwrap()
                    .public_key()
                    .to_public_key_der()
                    .unwrap()
                    .as_bytes()
            )
        );
        let rsa = TestKey::new(Alg::Rsa, 0);
        let k = load_service_account_key("sa.key", &rsa.traditional_pem()).unwrap();
        assert_eq!(k.algorithm(), KeyAlgorithm::Rsa { bits: 2048 });

        let os = generate_os_ca(testkit::now()).unwrap();
        let err = load_service_account_key("sa.key", os.key_pem()).unwrap_err();
        assert!(matches!(err, PkiError::UnsupportedKey { .. }), "{err}");
    }

    #[test]
    fn generated_os_ca_loads_back() {
        let now = testkit::now();
        let ca = generate_os_ca(now).unwrap();
        let (again, warnings) =
            load_ca("os.crt", ca.cert_pem(), "os.key", ca.key_pem(), now).unwrap();
        assert!(warnings.is_empty());
        assert_eq!(again.cert_pem(), ca.cert_pem());

        let key_text = std::str::from_utf8(ca.key_pem()).unwrap();
        assert!(
            key_text.starts_with("-----BEGIN ED25519 PRIVATE KEY-----\n"),
            "{key_text}"
        );
        assert!(key_text.ends_with("-----END ED25519 PRIVATE KEY-----\n"));
        let block = pem::parse(ca.key_pem()).unwrap();
        // PKCS#8 v1 without the public key: 48 bytes, like Go's MarshalPKCS8PrivateKey.
        assert_eq!(block.contents().len(), 48);
        assert_eq!(
            &block.contents()[..16],
            &[
                0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
                0x04, 0x20
            ]
        );
        let k = parse_private_key("os.key", ca.key_pem()).unwrap();
        assert_eq!(
            (k.algorithm(), k.format()),
            (KeyAlgorithm::Ed25519, KeyFormat::Ed25519Pkcs8)
        );

        let der = ca.cert_der();
        let (_, cert) = X509Certificate::from_der(der).unwrap();
        assert_eq!(cert.subject().to_string(), "O=talos");
        assert_eq!(cert.issuer().to_string(), "O=talos");
        let bc = cert.basic_constraints().unwrap().unwrap();
        assert!(bc.value.ca && bc.critical);
        let ku = cert.key_usage().unwrap().unwrap();
        assert!(ku.critical && ku.value.digital_signature() && ku.value.key_cert_sign());
        assert!(!ku.value.key_encipherment());
        let eku = cert.extended_key_usage().unwrap().unwrap();
        assert!(eku.value.server_auth && eku.value.client_auth);
        let validity = cert.validity();
        assert_eq!(
            validity.not_after.timestamp() - validity.not_before.timestamp(),
            TALOS_CA_VALIDITY_SECS
        );
        assert_eq!(validity.not_before.timestamp(), unix_seconds(now));
        assert_eq!(cert.raw_serial().len(), 16);
        assert_eq!(
            cert.signature_algorithm.algorithm.to_id_string(),
            OID_ED25519
        );
        assert!(format!("{ca:?}").contains("[redacted]"));
        assert!(!format!("{ca:?}").contains("PRIVATE"));

        // Two CAs differ (fresh key and serial).
        let other = generate_os_ca(now).unwrap();
        assert_ne!(other.cert_der(), ca.cert_der());
    }

    #[test]
    fn talos_key_pem_layout_matches_vector() {
        // The vector's os.key (tests/fixtures/talos/secrets.yaml, throwaway test material),
        // re-encoded by the same code path, is byte-identical.
        let fixture = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/talos/secrets.yaml"
        ));
        let b64 = fixture
            .lines()
            .skip_while(|l| l.trim() != "os:")
            .find_map(|l| l.trim().strip_prefix("key: "))
            .unwrap();
        let vector =
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b64).unwrap();
        assert!(vector.starts_with(b"-----BEGIN ED25519 PRIVATE KEY-----\n"));
        let der = pem::parse(&vector[..]).unwrap().into_contents();
        let kp = KeypairBytes::try_from(der.as_slice()).unwrap();
        let doc = kp.to_pkcs8_der().unwrap();
        let pem = doc
            .to_pem("ED25519 PRIVATE KEY", DerLineEnding::LF)
            .unwrap();
        assert_eq!(pem.as_bytes(), &vector[..]);
    }

    #[test]
    fn tokens_and_random_strings() {
        for _ in 0..200 {
            let t = generate_token().unwrap();
            let (id, secret) = t.split_once('.').unwrap();
            assert_eq!(id.len(), 6);
            assert_eq!(secret.len(), 16);
            assert!(id
                .chars()
                .chain(secret.chars())
                .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase()));
        }
        // Rejection sampling: every character comes from exactly 7 of the 256 byte values.
        let mut counts = std::collections::HashMap::new();
        for b in 0..=255u8 {
            if let Some(c) = token_char(b) {
                *counts.entry(c).or_insert(0) += 1;
            }
        }
        assert_eq!(counts.len(), 36);
        assert!(counts.values().all(|n| *n == 7), "{counts:?}");
        assert_eq!(token_char(251), Some('z'));
        assert_eq!(token_char(252), None);

        // Every character of the alphabet shows up (a modulo or range bug would skew this).
        let mut seen = std::collections::HashSet::new();
        for _ in 0..100 {
            seen.extend(generate_token().unwrap().chars().filter(|c| *c != '.'));
        }
        assert_eq!(seen.len(), 36);

        let s = random_base64_32().unwrap();
        assert_eq!(s.len(), 44);
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(s.as_bytes())
                .unwrap()
                .len(),
            32
        );
        let id = random_cluster_id().unwrap();
        assert_eq!(id.len(), 44);
        assert!(!id.contains('+') && !id.contains('/'));
        assert_eq!(
            base64::engine::general_purpose::URL_SAFE
                .decode(&id)
                .unwrap()
                .len(),
            32
        );
        assert_ne!(random_cluster_id().unwrap(), id);
    }

    #[test]
    fn summary_lists_sans() {
        let ca_key = TestKey::new(Alg::P256, 0);
        let params = testkit::ca_params(
            "kubernetes",
            testkit::days_from_now(-1),
            testkit::days_from_now(3650),
        );
        let leaf_key = TestKey::new(Alg::P256, 0);
        let leaf = testkit::signed_by(&leaf_key, "kube-apiserver", false, &params, &ca_key);
        let s = certificate_summary("apiserver.crt", &leaf).unwrap();
        assert_eq!(s.subject, "CN=kube-apiserver");
        assert_eq!(s.issuer, "CN=kubernetes");
        assert!(!s.is_ca);
        assert_eq!(s.dns_names, vec!["kubernetes.default.svc", "*.lb.example"]);
        assert_eq!(
            s.ip_addresses,
            vec![
                "192.0.2.10".parse::<IpAddr>().unwrap(),
                "2001:db8::1".parse().unwrap()
            ]
        );
        assert!(s.covers_host("192.0.2.10"));
        assert!(s.covers_host("[2001:db8::1]"));
        assert!(s.covers_host("Kubernetes.Default.Svc"));
        assert!(s.covers_host("api.lb.example"));
        assert!(!s.covers_host("a.b.lb.example"));
        assert!(!s.covers_host("lb.example"));
        assert!(!s.covers_host("192.0.2.11"));
        assert!(s.not_after > s.not_before);
        assert!(s.not_after_rfc3339().ends_with('Z'));
    }

    #[test]
    fn fingerprint_format() {
        assert_eq!(
            sha256_fingerprint_der(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(format_unix(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_unix(1_999_999_999), "2033-05-18T03:33:19Z");
    }
}
