//! The only module that names the YAML crate: parsing YAML streams into JSON values, and
//! emitting JSON values as canonical, deterministic YAML.
//!
//! Parsing uses `serde-saphyr` (YAML 1.2: only `true`/`false` are booleans; duplicate keys
//! are errors). Source snippets are
//! switched off in parse errors because the text may be secret material; errors carry the
//! line and column instead. Emitting is done here, not by the crate's serializer, so the
//! byte layout is ours to guarantee: block style, two-space indentation, sequences at
//! their parent key's indentation (the kubectl/kustomize style), map keys in the order
//! the value holds them, multi-line strings as literal blocks, and any scalar that could
//! be read back as something other than itself quoted in JSON style (valid YAML).
//! Swapping the YAML crate touches only [`parse_stream`].
//!
//! Most text capstan reads is in the plain block style that its templates, this emitter and
//! sops write; [`subset`] reads that ~10x faster and declines everything else, so
//! serde-saphyr stays the authority (and the source of every error).

mod subset;

use serde_json::Value;

/// A YAML syntax error, without source text (which may be secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct YamlError {
    /// What the parser said, location included when it knows it.
    pub message: String,
}

/// Parse a multi-document YAML text into JSON values. Empty and `null` documents are
/// skipped, as `kubectl` and Argo CD skip them.
pub fn parse_stream(text: &str) -> Result<Vec<Value>, YamlError> {
    let docs = match subset::parse_stream(text) {
        Some(docs) => docs,
        None => parse_stream_saphyr(text)?,
    };
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// The whole stream through serde-saphyr (empty documents included).
fn parse_stream_saphyr(text: &str) -> Result<Vec<Value>, YamlError> {
    let options = serde_saphyr::options! {
        with_snippet: false,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::AsString,
        // YAML 1.2: only true/false are booleans (`no`, `n`, `off` stay strings).
        strict_booleans: true,
    };
    serde_saphyr::from_multiple_with_options(text, options).map_err(|e| YamlError {
        message: e.to_string(),
    })
}

/// Parse a YAML text that must hold exactly one document.
pub fn parse_one(text: &str) -> Result<Value, YamlError> {
    let mut docs = parse_stream(text)?;
    match docs.len() {
        1 => Ok(docs.remove(0)),
        0 => Err(YamlError {
            message: "expected one YAML document, found none".into(),
        }),
        n => Err(YamlError {
            message: format!("expected one YAML document, found {n}"),
        }),
    }
}

/// What kind of YAML node a value is, for messages ("expected a string, found a mapping").
pub fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a sequence",
        Value::Object(_) => "a mapping",
    }
}

/// A field path one key deeper: `join_path("spec", "x")` is `spec.x`; `join_path("", "x")` is `x`.
pub fn join_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// Overwrite every string of a parsed tree (a plaintext copy of secrets) in place.
pub fn scrub(v: &mut Value) {
    match v {
        Value::String(s) => zeroize::Zeroize::zeroize(s),
        Value::Array(items) => items.iter_mut().for_each(scrub),
        Value::Object(m) => m.values_mut().for_each(scrub),
        _ => {}
    }
}

/// A plaintext tree whose strings are overwritten when it is dropped.
pub struct Scrubbed(pub Value);

impl Drop for Scrubbed {
    fn drop(&mut self) {
        scrub(&mut self.0);
    }
}

/// Emit one document (no `---` marker), ending with a newline.
pub fn to_string(value: &Value) -> String {
    let mut out = String::with_capacity(1024);
    write_document(&mut out, value);
    out
}

/// Append one document to `out` (no `---` marker), ending with a newline.
pub fn write_document(out: &mut String, value: &Value) {
    match value {
        Value::Object(map) if !map.is_empty() => write_map(out, map, 0),
        Value::Array(items) if !items.is_empty() => write_seq(out, items, 0),
        scalar => {
            write_scalar(out, scalar, 0);
            out.push('\n');
        }
    }
}

/// Emit documents as one stream, separated by `---` lines.
pub fn to_stream(values: &[Value]) -> String {
    let mut out = String::with_capacity(4096 * values.len().max(1));
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        write_document(&mut out, v);
    }
    out
}

fn indent(out: &mut String, n: usize) {
    const SPACES: &str = "                                                                ";
    let mut left = n;
    while left > 0 {
        let k = left.min(SPACES.len());
        out.push_str(&SPACES[..k]);
        left -= k;
    }
}

fn write_map(out: &mut String, map: &serde_json::Map<String, Value>, level: usize) {
    for (key, value) in map {
        indent(out, level);
        write_plain_or_quoted(out, key);
        out.push(':');
        write_value_after_key(out, value, level);
    }
}

/// Writes what follows `key:` (or `- ` for nested sequences handled separately).
fn write_value_after_key(out: &mut String, value: &Value, level: usize) {
    match value {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            write_map(out, m, level + 2);
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            // kubectl style: sequence items at the key's own indentation.
            write_seq(out, items, level);
        }
        scalar => {
            out.push(' ');
            write_scalar(out, scalar, level + 2);
            out.push('\n');
        }
    }
}

fn write_seq(out: &mut String, items: &[Value], level: usize) {
    for item in items {
        indent(out, level);
        out.push('-');
        match item {
            Value::Object(m) if !m.is_empty() => {
                // First key on the dash line, the rest aligned under it.
                let mut first = true;
                for (key, value) in m {
                    if first {
                        out.push(' ');
                        first = false;
                    } else {
                        indent(out, level + 2);
                    }
                    write_plain_or_quoted(out, key);
                    out.push(':');
                    write_value_after_key(out, value, level + 2);
                }
            }
            Value::Array(inner) if !inner.is_empty() => {
                out.push('\n');
                write_seq(out, inner, level + 2);
            }
            scalar => {
                out.push(' ');
                write_scalar(out, scalar, level + 2);
                out.push('\n');
            }
        }
    }
}

/// `block_indent` is the indentation a literal block's lines get.
fn write_scalar(out: &mut String, value: &Value, block_indent: usize) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            use std::fmt::Write as _;
            // Writing to a String cannot fail.
            let _ = write!(out, "{n}");
        }
        Value::String(s) => write_str_scalar(out, s, block_indent),
        Value::Object(_) => out.push_str("{}"),
        Value::Array(_) => out.push_str("[]"),
    }
}

/// Append a string scalar as [`write_document`] writes it after `key: ` or `- ` (it does so
/// through this function), also for callers that write a fixed layout as text (the lock
/// file) instead of building a value. `block_indent` is the indentation of a literal
/// block's lines: the key's or the dash's column plus two.
pub fn write_str_scalar(out: &mut String, s: &str, block_indent: usize) {
    if s.contains('\n') && literal_block_ok(s) {
        let trailing = s.len() - s.trim_end_matches('\n').len();
        out.push_str(match trailing {
            0 => "|-",
            1 => "|",
            _ => "|+",
        });
        let body = if trailing == 1 { &s[..s.len() - 1] } else { s };
        let body = if trailing > 1 {
            // `|+` keeps every trailing newline; the final one ends the scalar's last line.
            &body[..body.len() - 1]
        } else {
            body
        };
        for line in body.split('\n') {
            out.push('\n');
            if !line.is_empty() {
                indent(out, block_indent);
                out.push_str(line);
            }
        }
    } else {
        write_plain_or_quoted(out, s);
    }
}

/// A literal block reproduces the string exactly only if no line is whitespace-only
/// (such lines would be read as empty), the first line does not start with a space
/// (that would need an indentation indicator) and every character is printable.
fn literal_block_ok(s: &str) -> bool {
    if s.starts_with(' ') || s.starts_with('\n') {
        return false;
    }
    if s.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return false;
    }
    if s.contains('\u{feff}') || s.contains('\u{2028}') || s.contains('\u{2029}') {
        return false;
    }
    s.split('\n')
        .all(|line| line.is_empty() || !line.chars().all(|c| c == ' ' || c == '\t'))
}

fn write_plain_or_quoted(out: &mut String, s: &str) {
    if plain_ok(s) {
        out.push_str(s);
    } else {
        // A JSON string is a valid YAML double-quoted scalar.
        match serde_json::to_string(s) {
            Ok(q) => out.push_str(&q),
            // Serializing a &str to JSON cannot fail; keep a safe fallback anyway.
            Err(_) => out.push_str("\"\""),
        }
    }
}

/// `s` as a JSON string literal, which is also a valid YAML double-quoted scalar: `"` and
/// `\\` escaped, the control characters as `\n`-style or `\u00xx` escapes, everything else
/// (non-ASCII included) as it is: the same bytes as `serde_json::to_string` (tested).
/// The templates' `{{ value }}` (`render`) writes strings with it, straight into the
/// output; the emitter keeps `serde_json::to_string`, measured faster on its short scalars.
pub fn write_json_string(out: &mut impl std::fmt::Write, s: &str) -> std::fmt::Result {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let needs_escape = |c: u8| c < 0x20 || c == b'"' || c == b'\\';
    out.write_char('"')?;
    let b = s.as_bytes();
    let mut run = 0;
    // Blocks of 16 bytes are tested branch-free (vector instructions); only a block that
    // holds a byte to escape is walked byte by byte.
    for (n, block) in b.chunks(16).enumerate() {
        if !block.iter().fold(false, |any, &c| any | needs_escape(c)) {
            continue;
        }
        for (k, &c) in block.iter().enumerate() {
            if !needs_escape(c) {
                continue;
            }
            let i = n * 16 + k;
            // Only ASCII bytes are escaped, so `run..i` falls on character boundaries.
            out.write_str(&s[run..i])?;
            match c {
                b'"' => out.write_str("\\\"")?,
                b'\\' => out.write_str("\\\\")?,
                b'\n' => out.write_str("\\n")?,
                b'\t' => out.write_str("\\t")?,
                b'\r' => out.write_str("\\r")?,
                0x08 => out.write_str("\\b")?,
                0x0c => out.write_str("\\f")?,
                _ => {
                    out.write_str("\\u00")?;
                    out.write_char(char::from(HEX[usize::from(c >> 4)]))?;
                    out.write_char(char::from(HEX[usize::from(c & 0xf)]))?;
                }
            }
            run = i + 1;
        }
    }
    out.write_str(&s[run..])?;
    out.write_char('"')
}

/// Byte classes for [`plain_ok`]: may appear in a plain scalar; may appear in a number,
/// sexagesimal or version-like float.
const PLAIN: u8 = 1;
const NUMBERISH: u8 = 2;
const CLASSES: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        let allowed = b.is_ascii_alphanumeric() || in_set(b" ._/:-+=,()~$^;<\\", b);
        let numberish = b.is_ascii_hexdigit() || in_set(b"._:+-xXoO", b);
        t[c] = (allowed as u8 * PLAIN) | (numberish as u8 * NUMBERISH);
        c += 1;
    }
    t
};

/// `set` contains `b` (usable in a constant).
const fn in_set(set: &[u8], b: u8) -> bool {
    let mut i = 0;
    while i < set.len() {
        if set[i] == b {
            return true;
        }
        i += 1;
    }
    false
}

/// Conservative test for a plain scalar that reads back as the same string under both
/// YAML 1.1 and 1.2 resolvers. (One pass over the bytes, without branches on their
/// classes: it runs for every emitted scalar.)
fn plain_ok(s: &str) -> bool {
    let b = s.as_bytes();
    let Some(&first) = b.first() else {
        return false;
    };
    if !(first.is_ascii_alphanumeric() || matches!(first, b'/' | b'_' | b'.')) {
        return false;
    }
    if matches!(b[b.len() - 1], b' ' | b':') {
        return false;
    }
    // Every byte allowed (`#` is not, so ` #` cannot start a comment), no `: `, and whether
    // all of them could belong to a number.
    let mut all = PLAIN | NUMBERISH;
    let mut colon_space = false;
    let mut prev = 0u8;
    for &c in b {
        all &= CLASSES[c as usize];
        colon_space |= prev == b':' && c == b' ';
        prev = c;
    }
    if all & PLAIN == 0 || colon_space {
        return false;
    }
    let numberish = all & NUMBERISH != 0;
    if b.len() <= 5
        && [
            "true", "false", "yes", "no", "on", "off", "y", "n", "null", ".inf", ".nan",
        ]
        .iter()
        .any(|w| s.eq_ignore_ascii_case(w))
    {
        return false;
    }
    // YAML 1.1 timestamps (`2026-01-01`, `2026-01-01T10:00:00Z`, …) would be read as dates.
    if b.len() >= 8 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' {
        return false;
    }
    !((first.is_ascii_digit() || first == b'.') && numberish)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_strings_are_written_as_serde_json_writes_them() {
        let mut every_byte: String = (0u8..0x80).map(char::from).collect();
        every_byte.push_str("é€😀\u{2028}\u{7f}<>&'");
        for s in [
            "",
            "plain",
            "a\"b\\c\n\t\r\u{8}\u{c}\u{1}\u{1f}",
            &every_byte,
        ] {
            let mut out = String::new();
            write_json_string(&mut out, s).unwrap();
            assert_eq!(out, serde_json::to_string(s).unwrap(), "{s:?}");
        }
    }

    fn round_trip(v: &Value) {
        let text = to_string(v);
        let back = parse_one(&text).unwrap_or_else(|e| panic!("{e}\n---\n{text}"));
        assert_eq!(&back, v, "round trip changed the value:\n{text}");
    }

    #[test]
    fn emits_kubectl_style() {
        let v = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "x", "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
            "spec": {"list": ["a", {"b": 1, "c": [1, 2]}], "empty": {}, "none": []}
        });
        let text = to_string(&v);
        assert_eq!(
            text,
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  labels:\n    cluster.x-k8s.io/cluster-name: c1\nspec:\n  list:\n  - a\n  - b: 1\n    c:\n    - 1\n    - 2\n  empty: {}\n  none: []\n"
        );
        round_trip(&v);
    }

    #[test]
    fn quotes_ambiguous_scalars() {
        for s in [
            "",
            "true",
            "No",
            "on",
            "null",
            "~",
            "1.30",
            "3.5.15-0",
            "0x1F",
            "1e3",
            "12:30",
            "-1",
            " lead",
            "trail ",
            "a: b",
            "a #b",
            "#c",
            "*alias",
            "&anchor",
            "!tag",
            "%x",
            "@x",
            "`x",
            "[x]",
            "{x}",
            "x:",
            "- x",
            "?",
            "'q'",
            "\"q\"",
            "tab\there",
            "ümlaut",
            ".5",
            "2026-01-01",
            "key2",
            "v1.30.4",
            "https://lb.example:6443",
            "10.96.0.0/12",
        ] {
            round_trip(&json!({ "k": s }));
            round_trip(&json!([s]));
            round_trip(&json!({ s: 1 }));
        }
        assert_eq!(to_string(&json!({"k": "1.30"})), "k: \"1.30\"\n");
        assert_eq!(
            to_string(&json!({"k": "2026-12-02T15:33:26Z"})),
            "k: \"2026-12-02T15:33:26Z\"\n"
        );
        assert_eq!(to_string(&json!({"k": "v1.30.4"})), "k: v1.30.4\n");
    }

    #[test]
    fn multi_line_strings_are_literal_blocks() {
        let v = json!({"p": ["cluster:\n  network:\n    cni:\n      name: none\n"]});
        let text = to_string(&v);
        assert_eq!(
            text,
            "p:\n- |\n  cluster:\n    network:\n      cni:\n        name: none\n"
        );
        round_trip(&v);
        for s in [
            "a\nb",
            "a\nb\n",
            "a\nb\n\n",
            "a\n\nb\n",
            "a\n  \nb",
            " a\nb",
            "\na",
            "a\n#b\n",
            "a\r\nb",
            "x: y\n- z\n",
            "a\n\tb\n",
            "a\n\n\n",
        ] {
            round_trip(&json!({"k": s, "l": [s], "m": {"n": s}}));
        }
    }

    #[test]
    fn streams_and_numbers() {
        let docs = vec![
            json!({"a": 1, "b": -2.5, "c": null, "d": true}),
            json!({"e": [[1, 2], []]}),
        ];
        let text = to_stream(&docs);
        assert_eq!(parse_stream(&text).unwrap(), docs);
        assert!(text.contains("\n---\n"));
    }

    #[test]
    fn parse_errors_carry_no_source_text() {
        let err = parse_stream("a: 1\nsecret: [s3cr3tvalue\n").unwrap_err();
        assert!(!err.message.contains("s3cr3t"), "{}", err.message);
        assert!(err.message.contains("line 2"), "{}", err.message);
        let dup = parse_stream("a: 1\na: 2\n").unwrap_err();
        assert!(
            dup.message.to_lowercase().contains("duplicate"),
            "{}",
            dup.message
        );
    }

    #[test]
    fn yaml_1_1_booleans_are_strings() {
        let docs = parse_stream("a: n\nb: no\nc: off\nd: yes\ne: true\nf: false\n").unwrap();
        assert_eq!(
            docs[0],
            json!({"a": "n", "b": "no", "c": "off", "d": "yes", "e": true, "f": false})
        );
    }

    #[test]
    fn parse_skips_empty_documents() {
        let docs = parse_stream("---\n---\na: 1\n---\n# only a comment\n").unwrap();
        assert_eq!(docs, vec![json!({"a": 1})]);
    }
}
