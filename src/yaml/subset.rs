//! A fast reader for the plain block-style subset of YAML that capstan's templates, its
//! emitter and the sops CLI write; anything else it declines, and serde-saphyr decides.
//!
//! The contract, tested against serde-saphyr on fixed cases, on generated documents and on
//! random mutations of them: for any text this reader accepts, the values (and their key
//! order) are exactly those serde-saphyr returns with capstan's options. Everything it does
//! not model completely is declined (`None`), never guessed: tabs, carriage returns and
//! unusual characters anywhere; anchors, aliases, tags, directives, `...`, complex keys
//! and merge keys; folded scalars, block scalars with indentation indicators or leading
//! empty lines; multi-line plain, quoted or flow scalars; YAML-only escapes; scalars that
//! could resolve to anything but a string, `null`, `true`, `false` or a plain decimal
//! integer; duplicate keys; indentation that is not exactly that of an open block; nesting
//! beyond [`MAX_DEPTH`]. So errors always come from serde-saphyr, with its locations.

use serde_json::map::Entry;
use serde_json::{Map, Number, Value};

/// Deeper documents are declined (serde-saphyr's own budget allows 64 levels).
const MAX_DEPTH: usize = 48;
/// Longer implicit keys are declined (YAML limits implicit keys to 1024 characters).
const MAX_KEY_BYTES: usize = 512;
/// Larger texts are declined, far below serde-saphyr's input and scalar budgets.
const MAX_TEXT_BYTES: usize = 16 << 20;
/// More nodes or documents are declined, below serde-saphyr's budgets (250,000 and 1,024).
const MAX_NODES: usize = 200_000;
const MAX_DOCUMENTS: usize = 1_000;

/// Parse a whole stream (empty documents included, as `Value::Null`), or `None` when the
/// text is outside the subset.
pub(super) fn parse_stream(text: &str) -> Option<Vec<Value>> {
    if text.len() > MAX_TEXT_BYTES || !characters_ok(text) {
        return None;
    }
    let lines = Line::split(text);
    let ends_with_newline = text.ends_with('\n');
    let mut r = Reader {
        lines,
        ends_with_newline,
        pos: 0,
        virt: None,
        depth: 0,
        nodes: 0,
    };
    r.stream().ok()
}

/// The text is outside the subset.
struct Decline;

type R<T> = Result<T, Decline>;

/// Only line feeds and printable characters that no YAML version reads specially.
fn characters_ok(text: &str) -> bool {
    // Branch-free over blocks of 64 bytes, so the compiler can use vector instructions: this
    // runs over every byte of every document.
    let bad = |b: u8| (b < 0x20 && b != b'\n') || b == 0x7f;
    let ascii_ok = text
        .as_bytes()
        .chunks(64)
        .all(|block| !block.iter().fold(false, |any, &b| any | bad(b)));
    ascii_ok
        && (text.is_ascii()
            || !text.chars().any(|c| {
                matches!(
                    c,
                    '\u{80}'
                        ..='\u{9f}'
                            | '\u{2028}'
                            | '\u{2029}'
                            | '\u{feff}'
                            | '\u{fffe}'
                            | '\u{ffff}'
                )
            }))
}

/// One line of the text (without its line feed) and the number of spaces that start it.
#[derive(Clone, Copy)]
struct Line<'a> {
    text: &'a str,
    indent: usize,
}

impl<'a> Line<'a> {
    /// The lines of `text`; a final line feed ends the last line rather than starting an
    /// empty one. One pass over the bytes: this runs over every document.
    fn split(text: &'a str) -> Vec<Line<'a>> {
        let mut lines = Vec::with_capacity(text.len() / 24 + 1);
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', text.as_bytes()) {
            lines.push(Line::new(&text[start..end]));
            start = end + 1;
        }
        if start < text.len() {
            lines.push(Line::new(&text[start..]));
        }
        lines
    }

    fn new(text: &'a str) -> Line<'a> {
        let indent = text.bytes().take_while(|&b| b == b' ').count();
        Line { text, indent }
    }

    /// The text after the indentation.
    fn body(self) -> &'a str {
        &self.text[self.indent..]
    }
}

enum Peek<'a> {
    /// A line with content: its indentation and the text after it.
    Content(usize, &'a str),
    /// A `---` line.
    Marker,
    End,
}

struct Reader<'a> {
    lines: Vec<Line<'a>>,
    ends_with_newline: bool,
    /// The current line.
    pos: usize,
    /// The rest of the current line as a line of its own (indentation, text), after a
    /// sequence entry's `- ` that opens a compact mapping or sequence.
    virt: Option<(usize, &'a str)>,
    depth: usize,
    nodes: usize,
}

fn is_entry(body: &str) -> bool {
    body == "-" || body.starts_with("- ")
}

impl<'a> Reader<'a> {
    /// The next line with content, skipping blank and comment lines.
    fn peek(&mut self) -> R<Peek<'a>> {
        if let Some((indent, body)) = self.virt {
            return Ok(Peek::Content(indent, body));
        }
        while let Some(&line) = self.lines.get(self.pos) {
            let body = line.body();
            if body.is_empty() || body.starts_with('#') {
                self.pos += 1;
                continue;
            }
            let indent = line.indent;
            if indent == 0 {
                if let Some(rest) = body.strip_prefix("---") {
                    return if rest.bytes().all(|b| b == b' ') {
                        Ok(Peek::Marker)
                    } else {
                        Err(Decline)
                    };
                }
                if body.starts_with("...") || body.starts_with('%') {
                    return Err(Decline);
                }
            }
            return Ok(Peek::Content(indent, body));
        }
        Ok(Peek::End)
    }

    fn advance(&mut self) {
        self.virt = None;
        self.pos += 1;
    }

    fn count_node(&mut self) -> R<()> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(Decline);
        }
        Ok(())
    }

    fn stream(&mut self) -> R<Vec<Value>> {
        let mut docs = Vec::new();
        loop {
            if docs.len() > MAX_DOCUMENTS {
                return Err(Decline);
            }
            match self.peek()? {
                Peek::End => return Ok(docs),
                Peek::Marker => {
                    self.advance();
                    match self.peek()? {
                        Peek::End | Peek::Marker => docs.push(Value::Null),
                        Peek::Content(0, _) => docs.push(self.document()?),
                        Peek::Content(..) => return Err(Decline),
                    }
                }
                Peek::Content(0, _) => docs.push(self.document()?),
                Peek::Content(..) => return Err(Decline),
            }
        }
    }

    /// A document's root node at indentation 0, which must end at `---` or the end.
    fn document(&mut self) -> R<Value> {
        let v = self.block(0)?;
        match self.peek()? {
            Peek::End | Peek::Marker => Ok(v),
            Peek::Content(..) => Err(Decline),
        }
    }

    /// A block mapping or sequence whose first line (the current one) has `indent`.
    fn block(&mut self, indent: usize) -> R<Value> {
        self.block_with(indent, None)
    }

    /// [`Self::block`], where the caller may already have split the first line into the
    /// first key and what follows it (so it is not split twice).
    fn block_with(&mut self, indent: usize, first: Option<(String, &'a str)>) -> R<Value> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Decline);
        }
        let body = match self.peek()? {
            Peek::Content(_, body) => body,
            _ => return Err(Decline),
        };
        let v = if first.is_none() && is_entry(body) {
            self.sequence(indent)
        } else {
            self.mapping(indent, first)
        };
        self.depth -= 1;
        v
    }

    fn mapping(&mut self, n: usize, mut first: Option<(String, &'a str)>) -> R<Value> {
        self.count_node()?;
        let mut map = Map::with_capacity(4);
        loop {
            match self.peek()? {
                Peek::Content(indent, body) if indent == n => {
                    let (key, rest) = match first.take() {
                        Some(split) => split,
                        None if is_entry(body) => return Err(Decline),
                        None => split_key(body)?.ok_or(Decline)?,
                    };
                    if key == "<<" {
                        return Err(Decline);
                    }
                    self.advance();
                    let value = self.value_after_key(rest, n)?;
                    match map.entry(key) {
                        Entry::Vacant(slot) => slot.insert(value),
                        Entry::Occupied(_) => return Err(Decline),
                    };
                }
                Peek::Content(indent, _) if indent > n => return Err(Decline),
                _ => return Ok(Value::Object(map)),
            }
        }
    }

    fn sequence(&mut self, n: usize) -> R<Value> {
        self.count_node()?;
        let mut items = Vec::new();
        loop {
            match self.peek()? {
                Peek::Content(indent, body) if indent == n && is_entry(body) => {
                    let after = &body[1..];
                    let rest = after.trim_start_matches(' ');
                    if rest.is_empty() || rest.starts_with('#') {
                        self.advance();
                        items.push(self.nested(n, false)?);
                        continue;
                    }
                    let col = n + 1 + (after.len() - rest.len());
                    // A compact sequence or mapping starting on the entry's line.
                    let first = if is_entry(rest) {
                        None
                    } else {
                        split_key(rest)?
                    };
                    if is_entry(rest) || first.is_some() {
                        self.virt = Some((col, rest));
                        items.push(self.block_with(col, first)?);
                    } else {
                        self.advance();
                        items.push(self.inline(rest, n)?);
                    }
                }
                Peek::Content(indent, _) if indent > n => return Err(Decline),
                _ => return Ok(Value::Array(items)),
            }
        }
    }

    /// The value after `key:` of a mapping at indentation `n` (`rest` is what follows the colon).
    fn value_after_key(&mut self, rest: &'a str, n: usize) -> R<Value> {
        let t = rest.trim_start_matches(' ');
        if t.is_empty() || t.starts_with('#') {
            self.nested(n, true)
        } else {
            self.inline(t, n)
        }
    }

    /// A node on the following lines, more indented than `n` (or, for a mapping value, a
    /// sequence at `n` itself, the kubectl style); otherwise an empty value (null).
    fn nested(&mut self, n: usize, sequence_at_n: bool) -> R<Value> {
        match self.peek()? {
            Peek::Content(indent, _) if indent > n => self.block(indent),
            Peek::Content(indent, body) if indent == n && sequence_at_n && is_entry(body) => {
                self.block(n)
            }
            _ => {
                self.count_node()?;
                Ok(Value::Null)
            }
        }
    }

    /// A scalar, flow collection or literal block that starts on the current line (already
    /// consumed) within a block at indentation `n`.
    fn inline(&mut self, t: &'a str, n: usize) -> R<Value> {
        self.count_node()?;
        let (value, after) = match t.as_bytes()[0] {
            b'|' => return self.literal(t, n),
            b'"' => {
                let (s, len) = double_quoted(t)?;
                (Value::String(s), &t[len..])
            }
            b'\'' => {
                let (s, len) = single_quoted(t)?;
                (Value::String(s), &t[len..])
            }
            b'[' | b'{' => {
                let mut i = 0;
                let v = self.flow_node(t, &mut i)?;
                (v, &t[i..])
            }
            _ => (block_plain(t)?, ""),
        };
        end_of_value(after)?;
        // A more indented line after it (a continuation, or an error) is declined by the
        // enclosing block, which accepts only lines at its own indentation.
        Ok(value)
    }

    /// A literal block scalar (`|`, `|-`, `|+`) whose header is `t`, for a node in a block at
    /// indentation `n`; its lines follow the current position.
    fn literal(&mut self, t: &str, n: usize) -> R<Value> {
        let (chomp, rest) = match t.as_bytes().get(1) {
            Some(b'-') => (Chomp::Strip, &t[2..]),
            Some(b'+') => (Chomp::Keep, &t[2..]),
            _ => (Chomp::Clip, &t[1..]),
        };
        end_of_value(rest)?;
        let first = *self.lines.get(self.pos).ok_or(Decline)?;
        let m = first.indent;
        if m <= n || m == first.text.len() {
            // Empty scalars, leading empty lines and under-indented content are declined.
            return Err(Decline);
        }
        let mut out = String::with_capacity(256);
        let mut empty_run = 0usize;
        while let Some(&Line { text: line, indent }) = self.lines.get(self.pos) {
            if line.is_empty() {
                empty_run += 1;
                self.pos += 1;
                continue;
            }
            if indent == line.len() {
                // A whitespace-only line: its meaning depends on rules not modelled here.
                return Err(Decline);
            }
            if indent < m {
                break;
            }
            if !out.is_empty() {
                out.push('\n');
            }
            for _ in 0..empty_run {
                out.push('\n');
            }
            empty_run = 0;
            out.push_str(&line[m..]);
            self.pos += 1;
        }
        if self.pos == self.lines.len() && !self.ends_with_newline && empty_run == 0 {
            // The last line has no line break, which chomping treats differently.
            return Err(Decline);
        }
        match chomp {
            Chomp::Strip => {}
            Chomp::Clip => out.push('\n'),
            Chomp::Keep => {
                for _ in 0..=empty_run {
                    out.push('\n');
                }
            }
        }
        Ok(Value::String(out))
    }

    /// Past the opening bracket at `*i` (one level deeper): true when the collection is
    /// empty (its closing bracket consumed too).
    fn open_flow(&mut self, s: &str, i: &mut usize, close: u8) -> R<bool> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Decline);
        }
        *i += 1;
        skip_spaces(s, i);
        let empty = s.as_bytes().get(*i) == Some(&close);
        if empty {
            *i += 1;
        }
        Ok(empty)
    }

    /// A flow node on one line, from byte `*i` of `s`; `*i` ends after it.
    fn flow_node(&mut self, s: &str, i: &mut usize) -> R<Value> {
        self.count_node()?;
        skip_spaces(s, i);
        let b = s.as_bytes();
        match b.get(*i) {
            Some(b'[') => {
                let mut items = Vec::new();
                if !self.open_flow(s, i, b']')? {
                    loop {
                        items.push(self.flow_node(s, i)?);
                        if flow_entry_end(s, i, b']')? {
                            break;
                        }
                    }
                }
                self.depth -= 1;
                Ok(Value::Array(items))
            }
            Some(b'{') => {
                let mut map = Map::new();
                if !self.open_flow(s, i, b'}')? {
                    loop {
                        skip_spaces(s, i);
                        let key = flow_key(s, i)?;
                        if key == "<<" {
                            return Err(Decline);
                        }
                        skip_spaces(s, i);
                        if matches!(b.get(*i), None | Some(b',' | b'}')) {
                            return Err(Decline);
                        }
                        let value = self.flow_node(s, i)?;
                        match map.entry(key) {
                            Entry::Vacant(slot) => slot.insert(value),
                            Entry::Occupied(_) => return Err(Decline),
                        };
                        if flow_entry_end(s, i, b'}')? {
                            break;
                        }
                    }
                }
                self.depth -= 1;
                Ok(Value::Object(map))
            }
            Some(b'"') => {
                let (v, len) = double_quoted(&s[*i..])?;
                *i += len;
                Ok(Value::String(v))
            }
            Some(b'\'') => {
                let (v, len) = single_quoted(&s[*i..])?;
                *i += len;
                Ok(Value::String(v))
            }
            Some(_) => {
                let start = *i;
                let end = flow_plain_end(s, start);
                if matches!(b.get(end), Some(b':')) {
                    // `[a: b]`: a single-pair mapping.
                    return Err(Decline);
                }
                *i = end;
                resolve(plain_text(&s[start..end])?)
            }
            None => Err(Decline),
        }
    }
}

/// After a flow entry: `,` and another entry (false), or the closing bracket (true);
/// a trailing comma is declined.
fn flow_entry_end(s: &str, i: &mut usize, close: u8) -> R<bool> {
    skip_spaces(s, i);
    let b = s.as_bytes();
    match b.get(*i) {
        Some(b',') => {
            *i += 1;
            skip_spaces(s, i);
            if b.get(*i) == Some(&close) {
                return Err(Decline);
            }
            Ok(false)
        }
        Some(&c) if c == close => {
            *i += 1;
            Ok(true)
        }
        _ => Err(Decline),
    }
}

enum Chomp {
    Strip,
    Clip,
    Keep,
}

fn skip_spaces(s: &str, i: &mut usize) {
    while s.as_bytes().get(*i) == Some(&b' ') {
        *i += 1;
    }
}

/// After a scalar or flow collection: nothing, or spaces and a comment.
fn end_of_value(after: &str) -> R<()> {
    let t = after.trim_start_matches(' ');
    if t.is_empty() || (t.starts_with('#') && t.len() < after.len()) {
        Ok(())
    } else {
        Err(Decline)
    }
}

/// `key: rest` or `key:` on a block line: the key and what follows the colon; `None` when
/// the line is a plain value rather than a key.
fn split_key(body: &str) -> R<Option<(String, &str)>> {
    let b = body.as_bytes();
    let (key, after_key) = match b[0] {
        b'"' => {
            let (k, len) = double_quoted(body)?;
            (k, len)
        }
        b'\'' => {
            let (k, len) = single_quoted(body)?;
            (k, len)
        }
        // Flow collections, block scalars and anything the value path declines.
        b'[' | b'{' | b'?' | b':' | b'&' | b'*' | b'!' | b'|' | b'>' | b'%' | b'@' | b'`'
        | b',' | b'#' => return Ok(None),
        _ => {
            // A plain key ends at the first `: ` (or a final `:`); a ` #` first is a comment.
            let mut i = 0;
            loop {
                match b.get(i) {
                    None => return Ok(None),
                    Some(b':') if matches!(b.get(i + 1), None | Some(b' ')) => break,
                    Some(b' ') if b.get(i + 1) == Some(&b'#') => return Ok(None),
                    _ => i += 1,
                }
            }
            let text = plain_text(&body[..i])?;
            match resolve(text)? {
                Value::String(s) => (s, i),
                _ => return Err(Decline),
            }
        }
    };
    let after = &body[after_key..];
    match after.as_bytes() {
        [b':', ..] if key.len() > MAX_KEY_BYTES => Err(Decline),
        [b':'] => Ok(Some((key, ""))),
        [b':', b' ', ..] => Ok(Some((key, &after[1..]))),
        // A quoted scalar followed by anything else is a value, or not in the subset.
        _ if b[0] == b'"' || b[0] == b'\'' => {
            if after.trim_start_matches(' ').starts_with(':') {
                Err(Decline)
            } else {
                Ok(None)
            }
        }
        _ => Err(Decline),
    }
}

/// The key of a flow mapping entry and its colon, from `*i`.
fn flow_key(s: &str, i: &mut usize) -> R<String> {
    let b = s.as_bytes();
    match b.get(*i) {
        Some(b'"') | Some(b'\'') => {
            let (k, len) = if b[*i] == b'"' {
                double_quoted(&s[*i..])?
            } else {
                single_quoted(&s[*i..])?
            };
            *i += len;
            // JSON style: the colon follows the quoted key directly.
            if b.get(*i) != Some(&b':') || k.len() > MAX_KEY_BYTES {
                return Err(Decline);
            }
            *i += 1;
            Ok(k)
        }
        Some(_) => {
            let start = *i;
            let end = flow_plain_end(s, start);
            if b.get(end) != Some(&b':')
                || b.get(end + 1) != Some(&b' ')
                || end - start > MAX_KEY_BYTES
            {
                return Err(Decline);
            }
            *i = end + 1;
            match resolve(plain_text(&s[start..end])?)? {
                Value::String(k) => Ok(k),
                _ => Err(Decline),
            }
        }
        None => Err(Decline),
    }
}

/// Where a plain scalar in flow context that starts at `start` ends: before a flow
/// indicator, a `:` that ends a key, or a comment (trailing spaces are trimmed later).
fn flow_plain_end(s: &str, start: usize) -> usize {
    let b = s.as_bytes();
    let mut i = start;
    while let Some(&c) = b.get(i) {
        match c {
            b',' | b'[' | b']' | b'{' | b'}' => break,
            b':' if matches!(
                b.get(i + 1),
                None | Some(b' ' | b',' | b'[' | b']' | b'{' | b'}')
            ) =>
            {
                break
            }
            b' ' if b.get(i + 1) == Some(&b'#') => break,
            _ => i += 1,
        }
    }
    i
}

/// A plain scalar in block context: up to a comment, trailing spaces trimmed.
fn block_plain(t: &str) -> R<Value> {
    // One pass: the comment starts at the first ` #`; a `: ` or a final `:` before it
    // (trailing spaces aside) would make the line a mapping entry, which is declined.
    let b = t.as_bytes();
    let mut end = b.len();
    for (i, &c) in b.iter().enumerate() {
        match c {
            b' ' if b.get(i + 1) == Some(&b'#') => {
                end = i;
                break;
            }
            b':' if matches!(b.get(i + 1), None | Some(b' ')) => return Err(Decline),
            _ => {}
        }
    }
    resolve(plain_text(&t[..end])?)
}

/// The text of a plain scalar (trailing spaces trimmed), declined when it is empty or
/// starts with an indicator.
fn plain_text(raw: &str) -> R<&str> {
    let text = raw.trim_end_matches(' ');
    let b = text.as_bytes();
    match b.first() {
        None => Err(Decline),
        Some(b'-') if matches!(b.get(1), None | Some(b' ')) => Err(Decline),
        Some(
            b'?' | b':' | b',' | b'[' | b']' | b'{' | b'}' | b'#' | b'&' | b'*' | b'!' | b'|'
            | b'>' | b'\'' | b'"' | b'%' | b'@' | b'`',
        ) => Err(Decline),
        Some(_) => Ok(text),
    }
}

/// What a plain scalar means: `null`, a boolean, a decimal integer or a string; anything
/// that might be read as another number, boolean or null spelling is declined.
fn resolve(s: &str) -> R<Value> {
    // Most keys and many values start with a letter that begins no null, boolean, infinity
    // or NaN spelling (and no number): such a scalar is a string.
    if let Some(&first) = s.as_bytes().first() {
        if first.is_ascii_alphabetic()
            && !matches!(
                first,
                b'n' | b'N' | b't' | b'T' | b'f' | b'F' | b'i' | b'I' | b'y' | b'Y' | b'o' | b'O'
            )
        {
            return Ok(Value::String(s.to_owned()));
        }
    }
    match s {
        "null" | "~" => return Ok(Value::Null),
        "true" => return Ok(Value::Bool(true)),
        "false" => return Ok(Value::Bool(false)),
        _ => {}
    }
    if let Some(n) = decimal_integer(s) {
        return Ok(Value::Number(n));
    }
    if maybe_special(s) {
        return Err(Decline);
    }
    Ok(Value::String(s.to_owned()))
}

/// Whether a plain scalar might be read as something other than a string by any YAML
/// resolver (YAML 1.2 core, serde-saphyr's integer and float parsers, Rust's `f64` syntax):
/// null and boolean spellings in any case, radix-prefixed integers, decimal numbers with
/// underscores, an exponent or one dot, and the infinity and NaN spellings.
fn maybe_special(s: &str) -> bool {
    if s.len() <= 5
        && ["null", "true", "false"]
            .iter()
            .any(|w| s.eq_ignore_ascii_case(w))
    {
        return true;
    }
    let u = s.strip_prefix(['+', '-']).unwrap_or(s);
    let b = u.as_bytes();
    let Some(&first) = b.first() else {
        return true;
    };
    if ["inf", "infinity", "nan", ".inf", ".nan"]
        .iter()
        .any(|w| u.eq_ignore_ascii_case(w))
    {
        return true;
    }
    if !(first.is_ascii_digit() || first == b'.') {
        return false;
    }
    if b.len() > 1 && first == b'0' && matches!(b[1], b'x' | b'X' | b'o' | b'O' | b'b' | b'B') {
        return true;
    }
    // `[0-9_]* (. [0-9_]*)? ([eE] [-+]? [0-9_]*)?`: the shapes of every decimal number.
    let mut i = 0;
    let digits = |i: &mut usize| {
        while *i < b.len() && (b[*i].is_ascii_digit() || b[*i] == b'_') {
            *i += 1;
        }
    };
    digits(&mut i);
    if i < b.len() && b[i] == b'.' {
        i += 1;
        digits(&mut i);
    }
    if i < b.len() && matches!(b[i], b'e' | b'E') {
        i += 1;
        if i < b.len() && matches!(b[i], b'+' | b'-') {
            i += 1;
        }
        digits(&mut i);
    }
    i == b.len()
}

/// `0`, or up to 18 digits without a leading zero, optionally negative.
fn decimal_integer(s: &str) -> Option<Number> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s),
    };
    let d = digits.as_bytes();
    if d.is_empty() || d.len() > 18 || !d.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if d[0] == b'0' && (d.len() > 1 || neg) {
        return None;
    }
    let v: u64 = digits.parse().ok()?;
    Some(if neg {
        Number::from(-(v as i64))
    } else {
        Number::from(v)
    })
}

/// A double-quoted scalar at the start of `t`, on one line, with JSON's escapes only:
/// the string and the length of its source text.
fn double_quoted(t: &str) -> R<(String, usize)> {
    let b = t.as_bytes();
    let mut i = 1 + memchr::memchr2(b'"', b'\\', &b[1..]).ok_or(Decline)?;
    if b[i] == b'"' {
        // No escapes: the common case.
        return Ok((t[1..i].to_owned(), i + 1));
    }
    let mut out = String::with_capacity(b.len());
    let mut run = 1;
    loop {
        match b.get(i) {
            None => return Err(Decline),
            Some(b'"') => {
                out.push_str(&t[run..i]);
                return Ok((out, i + 1));
            }
            Some(b'\\') => {
                out.push_str(&t[run..i]);
                let c = match b.get(i + 1) {
                    Some(b'"') => '"',
                    Some(b'\\') => '\\',
                    Some(b'/') => '/',
                    Some(b'b') => '\u{8}',
                    Some(b'f') => '\u{c}',
                    Some(b'n') => '\n',
                    Some(b'r') => '\r',
                    Some(b't') => '\t',
                    Some(b'u') => {
                        let hex = t.get(i + 2..i + 6).ok_or(Decline)?;
                        if !hex.bytes().all(|h| h.is_ascii_hexdigit()) {
                            return Err(Decline);
                        }
                        let code = u32::from_str_radix(hex, 16).map_err(|_| Decline)?;
                        // Surrogates (pairs included) are declined.
                        let c = char::from_u32(code).ok_or(Decline)?;
                        out.push(c);
                        i += 6;
                        run = i;
                        continue;
                    }
                    _ => return Err(Decline),
                };
                out.push(c);
                i += 2;
                run = i;
            }
            // Long runs (base64 ciphertext) are skipped to the next quote or backslash.
            Some(_) => i += memchr::memchr2(b'"', b'\\', &b[i..]).unwrap_or(b.len() - i),
        }
    }
}

/// A single-quoted scalar at the start of `t`, on one line (`''` is a quote).
fn single_quoted(t: &str) -> R<(String, usize)> {
    let b = t.as_bytes();
    let mut i = 1 + memchr::memchr(b'\'', &b[1..]).ok_or(Decline)?;
    if b.get(i + 1) != Some(&b'\'') {
        // No `''`: the common case.
        return Ok((t[1..i].to_owned(), i + 1));
    }
    let mut out = String::with_capacity(b.len());
    let mut run = 1;
    loop {
        match b.get(i) {
            None => return Err(Decline),
            Some(b'\'') if b.get(i + 1) == Some(&b'\'') => {
                out.push_str(&t[run..=i]);
                i += 2;
                run = i;
            }
            Some(b'\'') => {
                out.push_str(&t[run..i]);
                return Ok((out, i + 1));
            }
            Some(_) => i += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// If the subset reader accepts `text`, serde-saphyr must return exactly the same
    /// documents. Returns whether it accepted.
    fn agree(text: &str) -> bool {
        let Some(fast) = parse_stream(text) else {
            return false;
        };
        match super::super::parse_stream_saphyr(text, false) {
            Ok(slow) => {
                // serde-saphyr may count empty documents differently; both callers drop them.
                let keep =
                    |d: Vec<Value>| d.into_iter().filter(|v| !v.is_null()).collect::<Vec<_>>();
                let (f, s) = (keep(fast), keep(slow));
                assert_eq!(f, s, "values differ for {text:?}");
            }
            Err(e) => panic!(
                "accepted what serde-saphyr rejects ({}): {text:?}",
                e.message
            ),
        }
        true
    }

    fn accepted(text: &str) {
        assert!(agree(text), "declined: {text:?}");
    }

    #[test]
    fn reads_the_block_style_capstan_and_sops_write() {
        for text in [
            "a: 1\nb: x\n",
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: x\n  labels: {\"a/b\":\"c\"}\n",
            "k:\n- a\n- b: 1\n  c:\n  - 2\nz: {}\ny: []\n",
            "k:\n  - a\n  -\n    b: 1\n  - - x\n    - y\n",
            "# comment\n---\na: 1 # trailing\n  # indented comment\nb: \"q\" # c\n---\n- 1\n- -2\n---\n",
            "p: |\n  line one\n\n  line: two\n    # more indented\nq: |-\n  x\nr: |+\n  y\n\n\ns: x\n",
            "sops:\n  age:\n  - recipient: age1x\n    enc: |\n      -----BEGIN AGE ENCRYPTED FILE-----\n      YWdl\n      -----END AGE ENCRYPTED FILE-----\n  mac: ENC[AES256_GCM,data:abc,iv:def,tag:g==,type:str]\n  version: 3.9.0\n",
            "pods: [10.244.0.0/16]\nissuers: [https://kubernetes.default.svc.cluster.local]\nn: [a-1, b-2]\n",
            "e: \"\\u003e\\\"x\\\"\\n\\t\\\\ \\/\"\nf: 'it''s'\ng: ~\nh: null\ni: true\nj: false\nk:\n",
            "ip: 10.20.30.1\nrange: 10.20.30.100-10.20.30.149\nid: 7pyxie\nv: v1.30.4\nt: 2026-01-01\nc: 12:30\n",
            "\"quoted key\": 1\n'single': 2\nk y: 3\nk: a b  \n",
            "deep: {\"a\":[1,{\"b\":[]}],\"c\":{}}\n",
            "ü: ümlaut ✓\n",
            "a#b: c#d\nu: http://h/p#frag # comment\nk: x:y:z\nm:n: 1\nq: a #b: c\n",
        ] {
            accepted(text);
        }
        assert_eq!(
            parse_stream("k:\n- a\n- b: 1\n").unwrap(),
            vec![json!({"k": ["a", {"b": 1}]})]
        );
    }

    #[test]
    fn declines_what_it_does_not_model() {
        for text in [
            "a: &x 1\nb: *x\n",
            "a: !!str 1\n",
            "%YAML 1.2\n---\na: 1\n",
            "a: 1\n...\n",
            "? a\n: b\n",
            "a: >\n  folded\n",
            "a: |2\n   x\n",
            "a: |\n\n  leading empty\n",
            "a: b\n  c\n",
            "a: \"multi\n  line\"\n",
            "a: [1,\n  2]\n",
            "a: \"\\x41\"\n",
            "a: 1.5\nb: 0x1F\nc: 1e3\nd: 1_000\ne: .inf\nf: 0777\ng: +1\n",
            "a: True\n",
            "a: NULL\n",
            "a: nan\n",
            "a: 1\na: 2\n",
            "<<: {a: 1}\n",
            "a:\tb\n",
            "a: b\r\n",
            "  a: 1\n",
            "a: b: c\n",
            "a: b:\n",
            "a: 1\n- b\n",
            "- a\nb: 1\n",
            "a:\n    b: 1\n  c: 2\n",
            "1: one\n",
            "[a]: b\n",
            "a: [b,]\n",
            "a: |\n  no final newline",
            "a: {\"k\" : 1}\n",
            "a: [x: 1]\n",
            "\u{feff}a: 1\n",
            "a: \"\\ud83d\\ude00\"\n",
        ] {
            assert!(parse_stream(text).is_none(), "accepted: {text:?}");
        }
    }

    #[test]
    fn control_characters_anywhere_decline() {
        // The check runs in 64-byte blocks: try both sides of the block edges.
        for at in [0, 1, 62, 63, 64, 65, 127, 128, 200] {
            for bad in ['\t', '\r', '\u{1}', '\u{7f}'] {
                let mut text = "a: b\n".repeat(50);
                text.replace_range(at..=at, &bad.to_string());
                assert!(!characters_ok(&text), "accepted {bad:?} at {at}");
            }
        }
        assert!(characters_ok(&"key: välue\n".repeat(30)));
    }

    /// Scalar spellings in every position the reader resolves them: resolved as serde-saphyr
    /// resolves them, or declined.
    #[test]
    fn scalars_resolve_as_serde_saphyr_resolves_them() {
        let spellings = [
            "0",
            "1",
            "-1",
            "-0",
            "00",
            "007",
            "42",
            "+42",
            "1_0",
            "0x1f",
            "0X1F",
            "0o17",
            "0O17",
            "0b101",
            "0B101",
            "1.0",
            "1.",
            ".5",
            "-.5",
            "1e3",
            "1E3",
            "1e+3",
            "1e-3",
            "-1e3",
            "1.5e3",
            ".inf",
            "-.inf",
            "+.inf",
            ".Inf",
            ".INF",
            ".nan",
            ".NaN",
            "-.nan",
            "inf",
            "Infinity",
            "nan",
            "NaN",
            "true",
            "True",
            "TRUE",
            "false",
            "False",
            "FALSE",
            "yes",
            "Yes",
            "no",
            "No",
            "on",
            "off",
            "y",
            "n",
            "Y",
            "N",
            "null",
            "Null",
            "NULL",
            "~",
            "12:30",
            "1:2:3",
            "2026-01-01",
            "2026-01-01T10:00:00Z",
            "10.244.0.0/16",
            "1.2.3",
            "1.2.3.4",
            "3.5.15-0",
            "1-2",
            "1e",
            "e1",
            "x1",
            "1x",
            "18446744073709551615",
            "18446744073709551616",
            "9223372036854775807",
            "-9223372036854775808",
            "-9223372036854775809",
            "999999999999999999",
            "1234567890123456789",
            "v1.30.4",
            "key2",
            "7pyxie",
            "a b",
            "a:b",
            "a#b",
            "-a",
            "-",
            "--",
            "---x",
            "._",
            "_1",
            "sha256:932dfd",
            "ENC[AES256_GCM,data:x==,iv:y,tag:z,type:str]",
            "1 2",
            "0.0.0.0",
            "1_000.5",
            "0x",
            "0o",
            "0b",
            "+",
            ".",
            "+.",
            "-e",
            "1e1e1",
            "1.2e3.4",
        ];
        let mut accepted_count = 0;
        for s in spellings {
            for text in [
                format!("k: {s}\n"),
                format!("- {s}\n"),
                format!("k: [{s}]\n"),
                format!("k: {{a: {s}}}\n"),
                format!("{s}: v\n"),
                format!("k: [{s}, x]\n"),
            ] {
                accepted_count += usize::from(agree(&text));
            }
        }
        assert!(accepted_count > 250, "only {accepted_count} accepted");
    }

    /// Rounds of a generated test: `n`, or `CAPSTAN_FUZZ_ROUNDS` for a longer run.
    fn rounds(n: usize) -> usize {
        std::env::var("CAPSTAN_FUZZ_ROUNDS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(n)
    }

    /// A small deterministic generator (xorshift64*), so failures reproduce.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn pick<'b>(&mut self, items: &[&'b str]) -> &'b str {
            items[self.below(items.len())]
        }
    }

    const PIECES: &[&str] = &[
        "a", "Z", "k8s", "0", "9", "1.5", " ", ":", ": ", "#", " #", "-", "- ", "?", ",", "[", "]",
        "{", "}", "'", "\"", "\\", "\n", "\n\n", "\t", ".", "_", "/", "!", "&", "*", "|", ">", "%",
        "@", "`", "ü", "~", "e", "x", "+", "true", "null", "no", "\u{85}", "\r", "\u{7f}", "\u{1}",
    ];

    fn random_string(rng: &mut Rng) -> String {
        let n = rng.below(6);
        (0..n).map(|_| rng.pick(PIECES)).collect()
    }

    fn random_value(rng: &mut Rng, depth: usize) -> Value {
        let leaf = depth >= 4 || rng.below(3) == 0;
        match if leaf { rng.below(6) } else { 6 + rng.below(2) } {
            0 => Value::Null,
            1 => Value::Bool(rng.below(2) == 0),
            2 => json!(rng.next() as i64 >> rng.below(64)),
            3 => json!((rng.next() % 2000) as f64 / 8.0),
            4 | 5 => Value::String(random_string(rng)),
            6 => Value::Array(
                (0..rng.below(4))
                    .map(|_| random_value(rng, depth + 1))
                    .collect(),
            ),
            _ => {
                let mut m = Map::new();
                for _ in 0..rng.below(4) {
                    m.insert(random_string(rng), random_value(rng, depth + 1));
                }
                Value::Object(m)
            }
        }
    }

    /// What capstan's emitter writes, the subset reads back to the same value, and serde-saphyr agrees.
    #[test]
    fn emitted_documents_read_back_identically() {
        let mut rng = Rng(0x5eed_cafe_f00d_0001);
        let mut read = 0;
        let rounds = rounds(3000);
        for _ in 0..rounds {
            let mut m = Map::new();
            for _ in 0..1 + rng.below(5) {
                m.insert(random_string(&mut rng), random_value(&mut rng, 1));
            }
            let v = Value::Object(m);
            let text = super::super::to_string(&v);
            if agree(&text) {
                read += 1;
                let back = parse_stream(&text).unwrap();
                assert_eq!(back, vec![v], "{text}");
            }
        }
        // Floats, unusual characters and some keys are declined; most documents are read.
        assert!(
            read * 5 > rounds,
            "only {read} of {rounds} read by the subset"
        );
    }

    fn mutate(rng: &mut Rng, text: &str) -> String {
        let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
        for _ in 0..1 + rng.below(3) {
            let i = rng.below(lines.len());
            let line = &mut lines[i];
            let at = if line.is_empty() {
                0
            } else {
                rng.below(line.len() + 1)
            };
            let at = (0..=at)
                .rev()
                .find(|&j| line.is_char_boundary(j))
                .unwrap_or(0);
            match rng.below(6) {
                0 => line.insert_str(at, rng.pick(PIECES)),
                1 => {
                    if at < line.len() {
                        let c = line[at..].chars().next().map_or(1, char::len_utf8);
                        line.replace_range(at..at + c, "");
                    }
                }
                2 => line.insert_str(0, "  "),
                3 => {
                    let t = line.trim_start_matches(' ').to_string();
                    let strip = (line.len() - t.len()).min(1 + rng.below(2));
                    line.replace_range(0..strip, "");
                }
                4 => {
                    let copy = line.clone();
                    lines.insert(i, copy);
                }
                _ => {
                    lines.remove(i);
                    if lines.is_empty() {
                        lines.push(String::new());
                    }
                }
            }
        }
        lines.join("\n")
    }

    /// Random edits of valid documents: whatever the subset accepts, serde-saphyr reads the
    /// same way (it never accepts invalid YAML or reads a document differently).
    #[test]
    fn mutated_documents_agree_or_are_declined() {
        let seeds = [
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: x\n  labels: {\"a\":\"b\"}\ndata:\n  k: ENC[AES256_GCM,data:x]\nsops:\n  age:\n  - recipient: age1\n    enc: |\n      -----BEGIN-----\n      YWdl\n\n      -----END-----\n  version: 3.9.0\n",
            "k:\n- a\n- b: 1\n  c:\n  - 2\n  - [x, \"y\", {z: 1}]\nz: {}\n---\n- 'q'\n- -3\n- |-\n  t\n",
            "spec:\n  template:\n    spec:\n      devices:\n      - networkName: \"pg\"\n        dhcp4: true\n      numCPUs: 4\n  # c\n  x: 10.0.0.1/8 # c\n",
        ];
        let mut rng = Rng(0x0bad_5eed_1234_5678);
        let mut accepted_count = 0;
        let rounds = rounds(6000);
        for round in 0..rounds {
            let base = seeds[round % seeds.len()];
            let text = mutate(&mut rng, base);
            accepted_count += usize::from(agree(&text));
        }
        assert!(
            accepted_count * 6 > rounds,
            "only {accepted_count} of {rounds} mutants accepted"
        );
    }

    /// The project's own YAML files (examples, shipped overlays, goldens, fixtures) are read
    /// by the subset exactly as serde-saphyr reads them, nine in ten of them at least.
    #[test]
    fn the_repository_yaml_reads_identically() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut read = 0;
        let mut total = 0;
        for dir in [
            "examples",
            "overlays",
            "tests/golden",
            "tests/fixtures",
            "deploy",
        ] {
            for entry in walkdir::WalkDir::new(root.join(dir)).sort_by_file_name() {
                let entry = entry.unwrap();
                let p = entry.path();
                if p.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                    let text = std::fs::read_to_string(p).unwrap();
                    // The CRDs vendored from the providers (controller-gen's output, read
                    // only by `validate --crds`) are checked too, but not counted: the
                    // subset is for the YAML capstan and its users write.
                    let ok = agree(&text);
                    if !p.starts_with(root.join("tests/fixtures/crds")) {
                        total += 1;
                        read += usize::from(ok);
                    }
                }
            }
        }
        assert!(
            total > 20 && read * 10 >= total * 9,
            "{read} of {total} files read by the subset"
        );
    }
}
