//! The name and format syntax Kubernetes validates objects with (k8s.io/apimachinery
//! `pkg/util/validation`, and RFC 3339 date-times), as the CRD validator needs it.

fn is_alnum_lower(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

pub(super) fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&f), Some(&l)) => {
            b.len() <= 63
                && is_alnum_lower(f)
                && is_alnum_lower(l)
                && b.iter().all(|&c| is_alnum_lower(c) || c == b'-')
        }
        _ => false,
    }
}

pub(super) fn is_dns1123_subdomain(s: &str) -> bool {
    // Each dot-separated part is a label; the whole is at most 253 characters.
    s.len() <= 253 && s.split('.').all(|part| {
        let b = part.as_bytes();
        matches!((b.first(), b.last()), (Some(&f), Some(&l)) if is_alnum_lower(f) && is_alnum_lower(l))
            && b.iter().all(|&c| is_alnum_lower(c) || c == b'-')
    })
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters.
fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&f), Some(&l)) => {
            b.len() <= 63
                && f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter()
                    .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

pub(super) fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        None => is_name_part(s),
        Some((prefix, name)) => {
            !prefix.is_empty() && is_dns1123_subdomain(prefix) && is_name_part(name)
        }
    }
}

pub(super) fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_name_part(s)
}

/// RFC 3339 date-time: `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` (`t`/space also accepted as separator).
pub(super) fn is_date_time(s: &str) -> bool {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<u32> {
        let part = b.get(from..from + len)?;
        part.iter().try_fold(0u32, |acc, &c| {
            c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0'))
        })
    };
    let at = |i: usize, allowed: &[u8]| b.get(i).is_some_and(|c| allowed.contains(c));
    let date_ok = num(0, 4).is_some()
        && at(4, b"-")
        && num(5, 2).is_some_and(|m| (1..=12).contains(&m))
        && at(7, b"-")
        && num(8, 2).is_some_and(|d| (1..=31).contains(&d))
        && at(10, b"Tt ")
        && num(11, 2).is_some_and(|h| h <= 23)
        && at(13, b":")
        && num(14, 2).is_some_and(|m| m <= 59)
        && at(16, b":")
        && num(17, 2).is_some_and(|x| x <= 60);
    if !date_ok {
        return false;
    }
    let mut i = 19;
    if at(i, b".") {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    if at(i, b"Zz") {
        return i + 1 == b.len();
    }
    at(i, b"+-")
        && num(i + 1, 2).is_some_and(|h| h <= 23)
        && at(i + 3, b":")
        && num(i + 4, 2).is_some_and(|m| m <= 59)
        && i + 6 == b.len()
}
