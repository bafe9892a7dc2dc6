//! Text from inputs made safe to print on a terminal, a CI log or a web page: every control
//! character but the line break and the tab (C0, DEL, C1: an ANSI escape, a carriage return
//! that would overwrite the line) and every bidirectional override is written escaped
//! (`\u{1b}`). Input is untrusted: a name or a value may carry any of them.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether a character must not reach a terminal as it is.
pub fn unsafe_char(c: char) -> bool {
    let bidi =
        matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    (c.is_control() && c != '\t' && c != '\n') || bidi
}

/// Append `c`, escaped when it must be.
pub fn push(out: &mut String, c: char) {
    if unsafe_char(c) {
        let _ = write!(out, "\\u{{{:x}}}", c as u32);
    } else {
        out.push(c);
    }
}

/// `text` with every unsafe character escaped (borrowed when there is none).
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        push(&mut out, c);
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_overrides_are_escaped_line_breaks_kept() {
        assert_eq!(
            escape("a\u{1b}[31mred\r\u{7f}\u{85}\u{202e}x\ny\tz"),
            "a\\u{1b}[31mred\\u{d}\\u{7f}\\u{85}\\u{202e}x\ny\tz"
        );
        assert!(matches!(escape("plain"), Cow::Borrowed(_)));
    }
}
