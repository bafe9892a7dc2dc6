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
//! sops write; `subset` reads that ~10x faster and declines everything else, so
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
/// skipped, as `kubectl` and Argo CD skip them. The dialect (README: the YAML capstan
/// reads) is YAML 1.2 with what would read differently elsewhere refused: a number with
/// a leading zero is an integer when kubectl (a YAML 1.1 octal) and YAML 1.2 (a decimal)
/// agree on its value (`08`, `007`) and refused, with both readings, when they do not
/// (`010`, `0644`); unknown tags are refused; a block scalar that ends the text without a
/// line break is refused (kubectl reads a final newline into it, YAML 1.2 readers do not).
pub fn parse_stream(text: &str) -> Result<Vec<Value>, YamlError> {
    // Read whole first: every file a render reads, in one pass and no scan for markers. Only
    // a stream that fails and holds more documents than a piece is read again in pieces;
    // the parsers' budgets bound what its first attempt cost.
    let whole = parse_whole(text);
    if whole.is_ok() {
        return whole;
    }
    let markers = document_markers(text);
    if markers.len() <= PIECE_DOCUMENTS {
        return whole;
    }
    // A long stream (a fleet's render: 5,000 clusters are ~100,000 documents) is read in
    // pieces of PIECE_DOCUMENTS documents, each split at a document marker, so the parsers'
    // per-stream budgets (serde-saphyr: 250,000 nodes, 1,024 documents) bound a piece, not
    // the stream; the size of the whole is bounded by the reader's byte cap. A marker line
    // ends any document in YAML 1.2 (`c-forbidden`: no scalar holds one at column 0), so the
    // pieces hold exactly the stream's documents.
    let mut bounds = vec![(0, 1)];
    bounds.extend(
        markers
            .iter()
            .skip(PIECE_DOCUMENTS)
            .step_by(PIECE_DOCUMENTS)
            .copied(),
    );
    let mut out = Vec::new();
    for (i, &(start, line)) in bounds.iter().enumerate() {
        let end = bounds.get(i + 1).map_or(text.len(), |b| b.0);
        out.extend(parse_whole(&text[start..end]).map_err(|e| YamlError {
            message: shift_lines(&e.message, line - 1),
        })?);
    }
    Ok(out)
}

/// Documents per piece of a long stream ([`parse_stream`]), below serde-saphyr's 1,024.
const PIECE_DOCUMENTS: usize = 512;

/// The document markers (`---` at the start of a line, then a space, a tab or the line's
/// end) as byte offset and line number, or none when the stream has directives (`%`) or
/// document end markers (`...`), which a split would separate from their documents.
fn document_markers(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut line = 1;
    let mut at = 0;
    let marker = |rest: &[u8], m: &[u8; 3]| {
        rest.starts_with(m) && matches!(rest.get(3), None | Some(b' ' | b'\t' | b'\n' | b'\r'))
    };
    while at < b.len() {
        let rest = &b[at..];
        if marker(rest, b"---") {
            out.push((at, line));
        } else if rest.first() == Some(&b'%') || marker(rest, b"...") {
            return Vec::new();
        }
        match memchr::memchr(b'\n', rest) {
            Some(i) => {
                at += i + 1;
                line += 1;
            }
            None => break,
        }
    }
    out
}

/// `message` with every `line N` moved down by `by` lines (an error of a piece, told in the
/// stream's lines).
fn shift_lines(message: &str, by: usize) -> String {
    if by == 0 {
        return message.to_string();
    }
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(i) = rest.find("line ") {
        out.push_str(&rest[..i + 5]);
        rest = &rest[i + 5..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        match rest[..digits].parse::<usize>() {
            Ok(n) => out.push_str(&(n + by).to_string()),
            Err(_) => out.push_str(&rest[..digits]),
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

/// [`parse_stream`] of a stream short enough for the parsers' budgets.
fn parse_whole(text: &str) -> Result<Vec<Value>, YamlError> {
    let docs = match subset::parse_stream(text) {
        Some(docs) => docs,
        None => {
            if let Some(line) = block_scalar_ends_text(text) {
                return Err(YamlError {
                    message: format!(
                        "line {line}: a block scalar ends the file without a line break: kubectl \
                         reads a final newline into it, YAML 1.2 readers (kustomize, Talos, sops) \
                         do not; end the file with a line break"
                    ),
                });
            }
            let mut docs = parse_stream_saphyr(text, false)?;
            if may_have_leading_zero_number(text) {
                let raw = parse_stream_saphyr(text, true)?;
                for (doc, raw) in docs.iter_mut().zip(&raw) {
                    leading_zero_numbers(doc, raw, "", text)?;
                }
            }
            docs
        }
    };
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// The whole stream through serde-saphyr (empty documents included); `raw_leading_zeros`
/// keeps numbers with a leading zero as their text.
fn parse_stream_saphyr(text: &str, raw_leading_zeros: bool) -> Result<Vec<Value>, YamlError> {
    let options = serde_saphyr::options! {
        with_snippet: false,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::AsString,
        // YAML 1.2: only true/false are booleans (`no`, `n`, `off` stay strings).
        strict_booleans: true,
        // A tag capstan does not know would otherwise be dropped silently.
        reject_unsupported_tags: true,
        leading_zero_numbers_as_strings: raw_leading_zeros,
    };
    serde_saphyr::from_multiple_with_options(text, options).map_err(|e| YamlError {
        message: plain_message(&e.to_string()),
    })
}

/// The parser's message without the advice it gives its own callers (options, Rust types),
/// which a user of capstan cannot act on.
fn plain_message(m: &str) -> String {
    let mut out = m
        .replace(", set DuplicateKeyPolicy in Options if acceptable", "")
        .replace(" (set DuplicateKeyPolicy in Options if acceptable)", "");
    if let Some(i) = out.find("budget breached") {
        // "budget breached: Nodes { … }": the document exceeds the parser's size limits.
        let tail = out[i..]
            .find(" at line ")
            .map(|j| out[i + j..].to_string())
            .unwrap_or_default();
        out = format!(
            "{}the document is too large or nests too deeply to read{tail}",
            &out[..i]
        );
    }
    out.replace(", use Option<String>", "")
        .replace(" use Option<String>", "")
}

/// Whether a plain scalar could be a number with a leading zero (`0` then a digit or `_`,
/// not inside a word): only then is the text read a second time.
fn may_have_leading_zero_number(text: &str) -> bool {
    let b = text.as_bytes();
    memchr::memchr_iter(b'0', b).any(|i| {
        let next = b.get(i + 1).copied().unwrap_or(b' ');
        let before = if i == 0 { b' ' } else { b[i - 1] };
        let before = if matches!(before, b'-' | b'+') && i >= 2 {
            b[i - 2]
        } else {
            before
        };
        (next.is_ascii_digit() || next == b'_')
            && matches!(
                before,
                b' ' | b'\n' | b'[' | b'{' | b',' | b':' | b'-' | b'+'
            )
    })
}

/// Replace each number of `doc` that `raw` (the same text read with leading-zero numbers
/// kept as text) shows was written with a leading zero: by the integer both readings give,
/// or an error naming the line, the path and both readings.
fn leading_zero_numbers(
    doc: &mut Value,
    raw: &Value,
    path: &str,
    text: &str,
) -> Result<(), YamlError> {
    match (doc, raw) {
        (Value::Object(m), Value::Object(r)) => {
            for (k, v) in m.iter_mut() {
                if let Some(rv) = r.get(k) {
                    leading_zero_numbers(v, rv, &join_path(path, k), text)?;
                }
            }
            Ok(())
        }
        (Value::Array(a), Value::Array(r)) => {
            for (i, (v, rv)) in a.iter_mut().zip(r).enumerate() {
                leading_zero_numbers(v, rv, &format!("{path}[{i}]"), text)?;
            }
            Ok(())
        }
        (v @ Value::Number(_), Value::String(token)) => {
            let (kubectl, decimal) = leading_zero_readings(token).ok_or_else(|| YamlError {
                message: format!(
                    "{}`{path}`: `{token}` is not a number capstan can read",
                    where_in(text, token)
                ),
            })?;
            if kubectl != decimal {
                return Err(YamlError {
                    message: format!(
                        "{}`{path}`: `{token}` is ambiguous: kubectl and Talos read {kubectl} (a YAML 1.1 \
                         octal number), YAML 1.2 reads {decimal}; write `{kubectl}` or `{}0o{}` for the \
                         octal value, `{decimal}` for the decimal one, or quote it for a string",
                        where_in(text, token),
                        if kubectl < 0 { "-" } else { "" },
                        token.trim_start_matches(['-', '+']).trim_start_matches(['0', '_']),
                    ),
                });
            }
            *v = Value::from(kubectl);
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The two readings of a number written with a leading zero: kubectl's (Go's
/// `strconv.ParseInt(s, 0, 64)` after removing `_`: octal when every digit is below 8,
/// else the decimal float) and YAML 1.2's (decimal). `None` for what is neither.
fn leading_zero_readings(token: &str) -> Option<(i64, i64)> {
    let t: String = token.chars().filter(|&c| c != '_').collect();
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, &t[..]),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let decimal: i64 = digits.parse().ok()?;
    let kubectl = if digits.bytes().all(|b| b < b'8') {
        i64::from_str_radix(digits, 8).ok()?
    } else {
        decimal
    };
    Some(if neg {
        (-kubectl, -decimal)
    } else {
        (kubectl, decimal)
    })
}

/// `line N: ` for the one line holding `token` as a plain scalar, or nothing when it is not
/// one line.
fn where_in(text: &str, token: &str) -> String {
    let hits: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| {
            l.match_indices(token).any(|(i, _)| {
                let before = l[..i].trim_end();
                let after = l[i + token.len()..].trim_start();
                (before.is_empty() || before.ends_with([':', '-', '[', ',', '{']))
                    && (after.is_empty() || after.starts_with(['#', ',', ']', '}']))
            })
        })
        .map(|(n, _)| n + 1)
        .collect();
    match hits.as_slice() {
        [n] => format!("line {n}: "),
        _ => String::new(),
    }
}

/// The line of a block scalar's last content line when the text ends on it without a line
/// break (`a: |` then `  abc` at the very end).
fn block_scalar_ends_text(text: &str) -> Option<usize> {
    if text.is_empty() || text.ends_with('\n') {
        return None;
    }
    let indent = |l: &str| l.len() - l.trim_start_matches(' ').len();
    let mut lines = text.split('\n').rev();
    let last = lines.next()?;
    if last.trim().is_empty() {
        return None;
    }
    let last_indent = indent(last);
    let total = text.split('\n').count();
    for l in lines {
        if l.trim().is_empty() || indent(l) >= last_indent {
            continue;
        }
        // The first less-indented line: a block scalar's header ends in `|` or `>` (with
        // chomping and indentation indicators), after `key:`, `-` or nothing.
        // Strip chomping (`-`) reads the same everywhere: no final line break either way.
        let body = l.split(" #").next().unwrap_or(l).trim_end();
        let indicators = body.len()
            - body
                .trim_end_matches(|c: char| c == '+' || c == '-' || c.is_ascii_digit())
                .len();
        let (head, indicators) = body.split_at(body.len() - indicators);
        let before = head.strip_suffix(['|', '>'])?;
        let before = before.trim_end();
        return ((before.is_empty() || before.ends_with(':') || before.ends_with('-'))
            && !indicators.contains('-'))
        .then_some(total);
    }
    None
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

/// One step of a path into a parsed tree: a mapping key or a sequence index. Walkers keep
/// a stack of steps and spell the path ([`path_text`]) only when they report something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathStep<'a> {
    /// A mapping key.
    Key(&'a str),
    /// A sequence index.
    Index(usize),
}

/// Steps as a field path: `spec.workers[0].name` (keys joined as [`join_path`] does).
pub fn path_text(steps: &[PathStep<'_>]) -> String {
    let mut out = String::new();
    for step in steps {
        match step {
            PathStep::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            PathStep::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
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

/// Replace (or add) the value of `key` directly under the top-level block mapping `parent`
/// of a block-style document, keeping every other line as it is (comments included):
/// the edit `import kubeadm --update` makes to a `cluster.yaml` people maintain. `None`
/// when `parent` is not a block mapping at column 0 whose keys are indented two spaces.
pub fn replace_block(text: &str, parent: &str, key: &str, value: &Value) -> Option<String> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let indent = |l: &str| l.len() - l.trim_start_matches(' ').len();
    let blank = |l: &str| l.trim().is_empty();
    let is_key = |l: &str, name: &str, at: usize| {
        indent(l) == at
            && l[at..]
                .strip_prefix(name)
                .and_then(|r| r.strip_prefix(':'))
                .is_some_and(|r| r.is_empty() || r.starts_with([' ', '\n', '\r']))
    };
    let p = lines.iter().position(|l| {
        is_key(l, parent, 0) && {
            let rest = l[parent.len() + 1..].trim();
            rest.is_empty() || rest.starts_with('#')
        }
    })?;
    // The parent's block: until the next line at column 0 that is neither blank nor a comment.
    let end = lines[p + 1..]
        .iter()
        .position(|l| !blank(l) && indent(l) == 0 && !l.starts_with('#'))
        .map_or(lines.len(), |i| p + 1 + i);
    let body = &lines[p + 1..end];
    let content = |l: &&&str| !blank(l) && !l.trim_start().starts_with('#');
    if body.iter().filter(content).any(|l| indent(l) < 2)
        || body.iter().find(content).is_some_and(|l| indent(l) != 2)
    {
        return None;
    }
    let mut rendered = format!("  {key}:");
    match value {
        Value::Object(m) if !m.is_empty() => {}
        Value::Array(a) if !a.is_empty() => {}
        scalar => {
            let mut s = String::new();
            // A block scalar's lines go deeper than the key (at two spaces).
            write_scalar(&mut s, scalar, 4);
            rendered.push(' ');
            rendered.push_str(&s);
            rendered.push('\n');
        }
    }
    if !rendered.ends_with('\n') {
        rendered.push('\n');
        for line in to_string(value).lines() {
            rendered.push_str("    ");
            rendered.push_str(line);
            rendered.push('\n');
        }
    }
    let mut out = String::with_capacity(text.len() + rendered.len());
    match body.iter().position(|l| is_key(l, key, 2)) {
        Some(k) => {
            let start = p + 1 + k;
            // The key's block: deeper lines (and blank lines between them).
            let mut stop = start + 1;
            while stop < end && (blank(lines[stop]) || indent(lines[stop]) > 2) {
                stop += 1;
            }
            while stop > start + 1 && blank(lines[stop - 1]) {
                stop -= 1;
            }
            lines[..start].iter().for_each(|l| out.push_str(l));
            out.push_str(&rendered);
            lines[stop..].iter().for_each(|l| out.push_str(l));
        }
        None => {
            // After the block's last key, before blank lines and comments at column 0
            // that close it.
            let mut at = end;
            while at > p + 1 && (blank(lines[at - 1]) || lines[at - 1].starts_with('#')) {
                at -= 1;
            }
            lines[..at].iter().for_each(|l| out.push_str(l));
            if !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&rendered);
            lines[at..].iter().for_each(|l| out.push_str(l));
        }
    }
    Some(out)
}

/// Emit documents as one stream, separated by `---` lines.
#[cfg(any(test, feature = "testkit"))]
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
    if s.chars().any(yaml_unprintable) {
        return false;
    }
    s.split('\n')
        .all(|line| line.is_empty() || !line.chars().all(|c| c == ' ' || c == '\t'))
}

fn write_plain_or_quoted(out: &mut String, s: &str) {
    if plain_ok(s) {
        out.push_str(s);
    } else {
        // A JSON string is a valid YAML double-quoted scalar. Writing to a String cannot
        // fail.
        let _ = write_json_string(out, s);
    }
}

/// Characters that are not printable in YAML (DEL, C1) or that a YAML 1.1 reader takes
/// for a line break (NEL, U+2028, U+2029), a byte-order mark and the non-characters: a
/// reader refuses them raw or reads them as something else, so they are written escaped.
fn yaml_unprintable(c: char) -> bool {
    matches!(
        c,
        '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
    )
}

/// JSON text with every `yaml_unprintable` character written as `\uxxxx` (valid JSON
/// text can hold them only inside strings, where the escape means the same character).
pub fn escape_unprintable(json: &str) -> std::borrow::Cow<'_, str> {
    if !json.chars().any(yaml_unprintable) {
        return std::borrow::Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if yaml_unprintable(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `s` as a JSON string literal, which is also a valid YAML double-quoted scalar: `"` and
/// `\\` escaped, the control characters as `\n`-style or `\u00xx` escapes, and what YAML
/// cannot carry raw (`yaml_unprintable`) as `\uxxxx`; everything else (non-ASCII
/// included) as it is. For strings without the latter, the same bytes as
/// `serde_json::to_string` (tested). The templates' `{{ value }}` (`render`) and the
/// emitter write strings with it.
pub fn write_json_string(out: &mut impl std::fmt::Write, s: &str) -> std::fmt::Result {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // DEL, and the lead bytes of U+0080-U+009F (0xC2), U+2028/2029 (0xE2) and
    // U+FEFF/FFFE/FFFF (0xEF): candidates, decided per character.
    let candidate = |c: u8| {
        c < 0x20 || c == b'"' || c == b'\\' || c == 0x7f || c == 0xc2 || c == 0xe2 || c == 0xef
    };
    out.write_char('"')?;
    let b = s.as_bytes();
    let mut run = 0;
    // Blocks of 16 bytes are tested branch-free (vector instructions); only a block that
    // holds a candidate is walked.
    for (n, block) in b.chunks(16).enumerate() {
        if !block.iter().fold(false, |any, &c| any | candidate(c)) {
            continue;
        }
        for (k, &c) in block.iter().enumerate() {
            let i = n * 16 + k;
            if !candidate(c) || i < run {
                continue;
            }
            let escape: Option<(&str, usize)> = match c {
                b'"' => Some(("\\\"", 1)),
                b'\\' => Some(("\\\\", 1)),
                b'\n' => Some(("\\n", 1)),
                b'\t' => Some(("\\t", 1)),
                b'\r' => Some(("\\r", 1)),
                0x08 => Some(("\\b", 1)),
                0x0c => Some(("\\f", 1)),
                _ => None,
            };
            if let Some((text, len)) = escape {
                out.write_str(&s[run..i])?;
                out.write_str(text)?;
                run = i + len;
                continue;
            }
            // A multi-byte candidate starts a character here (lead bytes only).
            let Some(ch) = s.get(i..).and_then(|t| t.chars().next()) else {
                continue;
            };
            if (c < 0x20) || yaml_unprintable(ch) {
                out.write_str(&s[run..i])?;
                let v = ch as u32;
                out.write_str("\\u")?;
                for shift in [12u32, 8, 4, 0] {
                    out.write_char(char::from(HEX[((v >> shift) & 0xf) as usize]))?;
                }
                run = i + ch.len_utf8();
            }
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

    #[test]
    fn parser_messages_carry_no_advice_for_rust_callers() {
        let e = parse_stream("a: 1\na: 2\n").unwrap_err();
        assert!(
            e.message.contains("duplicate mapping key: a"),
            "{}",
            e.message
        );
        assert!(!e.message.contains("DuplicateKeyPolicy"), "{}", e.message);
        assert_eq!(
            plain_message("budget breached: Nodes { limit: 10 } at line 3, column 1"),
            "the document is too large or nests too deeply to read at line 3, column 1"
        );
    }
    use serde_json::json;

    /// A fleet's render is longer than one parse may be (serde-saphyr: 1,024 documents,
    /// 250,000 nodes; the subset reader: 1,000 and 200,000): read in pieces, the stream
    /// gives exactly its documents, in order, from either reader, and an error names the
    /// stream's line.
    #[test]
    fn a_stream_beyond_the_parsers_budgets_is_read_whole() {
        let doc = |i: usize, flow: bool| {
            let items: String = (0..60)
                .map(|k| {
                    if flow {
                        format!("  k{k}: {{v: \"{i}-{k}\"}}\n")
                    } else {
                        format!("  k{k}:\n    v: \"{i}-{k}\"\n")
                    }
                })
                .collect();
            format!("---\nkind: ConfigMap\nmetadata:\n  name: c{i}\ndata:\n{items}")
        };
        for flow in [false, true] {
            // 3,000 documents of 124 nodes: 372,000 nodes.
            let text: String = (0..3000).map(|i| doc(i, flow)).collect();
            let docs = parse_stream(&text).unwrap();
            assert_eq!(docs.len(), 3000);
            for (i, d) in docs.iter().enumerate() {
                assert_eq!(d["metadata"]["name"], format!("c{i}"));
                assert_eq!(d["data"]["k59"]["v"], format!("{i}-59"));
            }
            // An implicit first document, and `--- ` with a comment.
            let text2 = format!("a: 1\n--- # two\n{}", &text[4..]);
            assert_eq!(parse_stream(&text2).unwrap().len(), 3001);
        }
        // A duplicate key in document 2,500: told at its line in the stream.
        let mut text: String = (0..3000).map(|i| doc(i, false)).collect();
        let line_of_doc = |n: usize, t: &str| {
            t.find(&format!("  name: c{n}\n"))
                .map(|at| t[..at].matches('\n').count() + 1)
        };
        let at = text.find("  name: c2500\n").unwrap();
        text.insert_str(at, "  name: dup\n");
        let want = line_of_doc(2500, &text).unwrap();
        let e = parse_stream(&text).unwrap_err();
        assert!(
            e.message.contains(&format!("line {want}")),
            "want line {want}: {}",
            e.message
        );
        // Directives or end markers: read whole, as before (within the budgets).
        assert_eq!(
            parse_stream("%YAML 1.2\n---\na: 1\n...\n").unwrap().len(),
            1
        );
        assert_eq!(
            shift_lines("at line 3, column 1; line x", 10),
            "at line 13, column 1; line x"
        );
    }

    #[test]
    fn replace_block_keeps_everything_else() {
        let text = "# header\nkind: ClusterConfig\nspec:\n  # the key\n  encryption:\n    provider: secretbox\n    # old name\n    keyName: key0\n\n  # recorded by import\n  provenance: {bootstrapTokenId: abc}\nstatus: {}\n";
        let new = serde_json::json!({"provider": "secretbox", "keyName": "key2"});
        let out = replace_block(text, "spec", "encryption", &new).unwrap();
        assert_eq!(
            out,
            "# header\nkind: ClusterConfig\nspec:\n  # the key\n  encryption:\n    provider: secretbox\n    keyName: key2\n\n  # recorded by import\n  provenance: {bootstrapTokenId: abc}\nstatus: {}\n"
        );
        // A flow-style value is replaced as a whole; a missing key is added at the block's end.
        let out = replace_block(
            &out,
            "spec",
            "provenance",
            &serde_json::json!({"bootstrapTokenId": "xyz"}),
        )
        .unwrap();
        assert!(
            out.contains(
                "  # recorded by import\n  provenance:\n    bootstrapTokenId: xyz\nstatus: {}\n"
            ),
            "{out}"
        );
        let out = replace_block(
            &out,
            "spec",
            "kubeProxy",
            &serde_json::json!({"disabled": true}),
        )
        .unwrap();
        assert!(
            out.ends_with(
                "    bootstrapTokenId: xyz\n  kubeProxy:\n    disabled: true\nstatus: {}\n"
            ),
            "{out}"
        );
        assert_eq!(
            parse_one(&out).unwrap()["spec"]["encryption"]["keyName"],
            "key2"
        );
        // Keys that only start alike are other keys.
        let t2 = "spec:\n  encryptionX: 1\n";
        let out = replace_block(t2, "spec", "encryption", &serde_json::json!("a")).unwrap();
        assert_eq!(out, "spec:\n  encryptionX: 1\n  encryption: a\n");
        // Added before the comments that close the block.
        let out = replace_block(
            "spec:\n  a: 1\n# closing\n",
            "spec",
            "b",
            &serde_json::json!(2),
        )
        .unwrap();
        assert_eq!(out, "spec:\n  a: 1\n  b: 2\n# closing\n");
        // A multi-line string goes deeper than its key.
        let out = replace_block(
            "spec:\n  a: 1\n",
            "spec",
            "note",
            &serde_json::json!("two\nlines\n"),
        )
        .unwrap();
        assert_eq!(
            parse_one(&out).unwrap()["spec"]["note"],
            "two\nlines\n",
            "{out}"
        );
        // Not a block mapping with two-space keys: refused.
        assert!(replace_block("spec: {a: 1}\n", "spec", "a", &serde_json::json!(2)).is_none());
        assert!(replace_block("spec:\n    a: 1\n", "spec", "a", &serde_json::json!(2)).is_none());
        assert!(replace_block("spec:\n a: 1\n", "spec", "a", &serde_json::json!(2)).is_none());
        assert!(replace_block("other: 1\n", "spec", "a", &serde_json::json!(2)).is_none());
    }

    #[test]
    fn json_strings_are_written_as_serde_json_writes_them() {
        let mut every_byte: String = (0u8..0x7f).map(char::from).collect();
        every_byte.push_str("é€😀<>&'\u{a0}\u{2027}\u{202a}\u{fffd}");
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
        // What YAML cannot carry raw is escaped, in the string and in the emitter's output,
        // and reads back as the same characters.
        let s = "x\u{7f}\u{80}\u{85}\u{9f}\u{2028}\u{2029}\u{feff}\u{fffe}\u{ffff}y\u{1b}";
        let mut out = String::new();
        write_json_string(&mut out, s).unwrap();
        assert_eq!(
            out,
            r#""x\u007f\u0080\u0085\u009f\u2028\u2029\ufeff\ufffe\uffffy\u001b""#
        );
        let doc = json!({"k": s, "multi": format!("{s}\nline two\n")});
        let text = to_string(&doc);
        assert!(!text.chars().any(yaml_unprintable), "{text:?}");
        round_trip(&doc);
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
    fn the_dialect_reads_numbers_as_kubectl_or_refuses() {
        let one = |t: &str| parse_one(t).map_err(|e| e.message);
        // Leading zeros: an integer where kubectl (octal) and YAML 1.2 (decimal) agree.
        for (t, n) in [
            ("a: 08", 8),
            ("a: 007", 7),
            ("a: 00", 0),
            ("a: -09", -9),
            ("a: 0o644", 420),
            ("a: 0x1F", 31),
        ] {
            assert_eq!(one(t), Ok(json!({ "a": n })), "{t}");
        }
        assert_eq!(one("a: [08, {b: 09}]"), Ok(json!({"a": [8, {"b": 9}]})));
        // Where they disagree: refused with the line, the path and both readings.
        let e = one("x: 1\na:\n  b: 0644\n").unwrap_err();
        assert!(
            e.starts_with("line 3: `a.b`: `0644` is ambiguous: kubectl and Talos read 420"),
            "{e}"
        );
        assert!(
            e.contains("YAML 1.2 reads 644; write `420` or `0o644`"),
            "{e}"
        );
        let e = one("a: [1, -010]").unwrap_err();
        assert!(
            e.contains("`a[1]`: `-010` is ambiguous: kubectl and Talos read -8"),
            "{e}"
        );
        assert!(e.contains("`-0o10`"), "{e}");
        // Quoted, it is a string.
        assert_eq!(one("a: '0644'"), Ok(json!({"a": "0644"})));
        // A leading zero inside a word is no number.
        assert_eq!(
            one("a: v1.08-x\nb: x010"),
            Ok(json!({"a": "v1.08-x", "b": "x010"}))
        );
    }

    #[test]
    fn the_dialect_refuses_unknown_tags_and_an_unterminated_block_scalar() {
        let one = |t: &str| parse_one(t).map_err(|e| e.message);
        assert!(one("a: !vault x\n")
            .unwrap_err()
            .contains("unsupported tag `!vault`"));
        assert_eq!(one("a: !!str 12\n"), Ok(json!({"a": "12"})));
        for t in [
            "a: |\n  x",
            "a: >\n  x\n  y",
            "- |+\n  x",
            "a:\n  b: |2\n    x",
        ] {
            let e = one(t).unwrap_err();
            assert!(
                e.contains("a block scalar ends the file without a line break"),
                "{t}: {e}"
            );
        }
        // With the line break, or strip chomping, or a plain scalar: read.
        assert_eq!(one("a: |\n  x\n"), Ok(json!({"a": "x\n"})));
        assert_eq!(one("a: |-\n  x"), Ok(json!({"a": "x"})));
        assert_eq!(one("a: |\n  x\nb: c"), Ok(json!({"a": "x\n", "b": "c"})));
        assert_eq!(one("a: b\n  c"), Ok(json!({"a": "b c"})));
    }

    #[test]
    fn parse_skips_empty_documents() {
        let docs = parse_stream("---\n---\na: 1\n---\n# only a comment\n").unwrap();
        assert_eq!(docs, vec![json!({"a": 1})]);
    }
}
