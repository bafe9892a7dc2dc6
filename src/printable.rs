//! Text from inputs made safe to print: on a terminal or a CI log ([`escape`] for text that
//! may span lines, [`line()`] for a name or a value that must stay on its line, as git's
//! `core.quotePath` and `ls` quote file names), and in a Markdown comment ([`md_text`],
//! [`md_code`], [`md_cell_code`], [`md_fence`]). Input is untrusted: a name, a key or a
//! value may carry an ANSI escape, a carriage return that overwrites the line, a
//! bidirectional override that reorders what is shown, or Markdown that closes a code
//! block, fakes a heading, splits a table cell, links or mentions someone.
//!
//! On a terminal every control character (C0, DEL, C1) and every bidirectional formatting
//! character is written escaped as `\u{1b}` (line breaks and tabs too in [`line()`]);
//! everything else, and so every ordinary name, is printed as it is.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether a character must not reach a terminal as it is (line breaks and tabs aside):
/// a control character (C0, DEL, C1), a bidirectional mark, embedding, override or
/// isolate, or a line or paragraph separator.
pub fn unsafe_char(c: char) -> bool {
    let format = matches!(
        c,
        '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    );
    (c.is_control() && c != '\t' && c != '\n') || format
}

/// Append `c`, escaped when it must be.
pub fn push(out: &mut String, c: char) {
    if unsafe_char(c) {
        push_escaped(out, c);
    } else {
        out.push(c);
    }
}

fn push_escaped(out: &mut String, c: char) {
    let _ = write!(out, "\\u{{{:x}}}", c as u32);
}

/// `text` for a terminal, line breaks and tabs kept: a message or a block of lines (borrowed
/// when nothing needs escaping).
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

/// Whether a character must not appear in one line of output: [`unsafe_char`], a line
/// break or a tab.
fn unsafe_in_line(c: char) -> bool {
    c == '\n' || c == '\t' || unsafe_char(c)
}

/// `text` for one line of a terminal: a name, a key, a value. As [`escape`], and a line
/// break or a tab inside it is escaped too, so it cannot start a line of its own (borrowed
/// when nothing needs escaping).
pub fn line(text: &str) -> Cow<'_, str> {
    if !text.chars().any(unsafe_in_line) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_in_line(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `text` as Markdown text on one line, wherever GitHub and GitLab render it: a
/// paragraph, a list item, a heading, a table cell, or inside an HTML block such as
/// `<summary><code>…</code></summary>`. As [`line()`] for control characters; the characters
/// that Markdown or HTML would read (`&` `<` `>` `|` `` ` `` `*` `_` `[` `]` `~` `\` `#`
/// `$`, GitHub's math) are written as numeric character references, which both decode to the
/// character as text and none of which splits a table cell; an `@` is followed by a zero
/// width space so it mentions nobody (GitHub cannot escape a mention otherwise:
/// github/markup#1168, github/cmark-gfm#181).
pub fn md_text(text: &str) -> Cow<'_, str> {
    fn special(c: char) -> bool {
        matches!(
            c,
            '&' | '<' | '>' | '|' | '`' | '*' | '_' | '[' | ']' | '~' | '\\' | '#' | '$' | '@'
        ) || unsafe_in_line(c)
    }
    if !text.chars().any(special) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '@' => out.push_str("@&#8203;"),
            c if unsafe_in_line(c) => push_escaped(&mut out, c),
            c if special(c) => {
                let _ = write!(out, "&#{};", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The longest run of backticks in `text`.
fn longest_backtick_run(text: &str) -> usize {
    let (mut longest, mut run) = (0, 0);
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    longest
}

/// `text` as a Markdown inline code span outside a table: [`line()`]'s escapes inside a
/// backtick run longer than any in `text` (padded with a space when `text` starts or
/// ends with a backtick, as CommonMark strips one). Nothing inside a code span is read as
/// Markdown, HTML, a link or a mention.
pub fn md_code(text: &str) -> String {
    code_span(&line(text))
}

/// `text` as an inline code span in a table cell: as [`md_code`], with each `|` written
/// `\|`, which GitHub's and GitLab's tables read as a `|` of the cell, not a cell break.
#[cfg(any(test, feature = "testkit"))]
pub fn md_cell_code(text: &str) -> String {
    code_span(&line(text).replace('|', "\\|"))
}

fn code_span(body: &str) -> String {
    let ticks = "`".repeat(longest_backtick_run(body) + 1);
    let pad = if body.starts_with('`') || body.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{ticks}{pad}{body}{pad}{ticks}")
}

/// The fence for a fenced code block holding `body`: backticks, at least three and more
/// than any run inside, so no line of the body closes the block. The body itself goes
/// through [`escape`] (line breaks kept).
pub fn md_fence(body: &str) -> String {
    "`".repeat((longest_backtick_run(body) + 1).max(3))
}

/// A path as messages name it: its `display()` text as [`line()`], so a file or directory
/// name cannot start a line of its own in a message that spans lines (an error's causes),
/// nor carry a control or bidirectional character.
pub trait Label {
    /// The path for a message.
    fn label(&self) -> String;
}

impl Label for std::path::Path {
    fn label(&self) -> String {
        line(&self.display().to_string()).into_owned()
    }
}

/// Serialised JSON with every [`unsafe_char`] written as a `\uXXXX` escape: serde_json
/// escapes only C0 controls, and DEL, C1 controls and bidirectional characters in a string
/// would reach the terminal as they are. Every such character of a JSON text is inside a
/// string (the syntax is ASCII) and lies in the Basic Multilingual Plane, so the escaped
/// text reads back to the same value.
pub fn json(text: &str) -> Cow<'_, str> {
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_char(c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_overrides_are_escaped_line_breaks_kept() {
        assert_eq!(
            escape("a\u{1b}[31mred\r\u{7f}\u{85}\u{202e}x\ny\tz\u{2028}"),
            "a\\u{1b}[31mred\\u{d}\\u{7f}\\u{85}\\u{202e}x\ny\tz\\u{2028}"
        );
        assert!(matches!(escape("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_line_escapes_its_line_breaks_and_tabs() {
        assert_eq!(
            line("a\nb\tc\u{1b}]0;x\u{7}\u{2067}"),
            "a\\u{a}b\\u{9}c\\u{1b}]0;x\\u{7}\\u{2067}"
        );
        assert!(matches!(line("lab-f/cluster.yaml"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_path_label_stays_on_its_line() {
        use std::path::Path;
        assert_eq!(Path::new("clusters/lab-f").label(), "clusters/lab-f");
        assert_eq!(
            Path::new("clusters/lab\nerror: x\u{1b}[2J").label(),
            "clusters/lab\\u{a}error: x\\u{1b}[2J"
        );
    }

    #[test]
    fn markdown_text_neither_formats_links_mentions_nor_breaks_lines() {
        assert!(matches!(
            md_text("MachineDeployment lab-f/lab-f-ingress (replicas: 3 → 2)"),
            Cow::Borrowed(_)
        ));
        let t = md_text("x\n# forged | cell ```fence``` [a](http://e) <b>@team *b* \u{1b}");
        assert!(!t.contains('\n'), "{t}");
        let bare = t.replace("&#", "");
        for raw in ["#", "|", "`", "[", "<", "*", "\u{1b}"] {
            assert!(!bare.contains(raw), "{raw} in {t}");
        }
        assert!(t.contains("@&#8203;team"), "{t}");
        assert_eq!(md_text("a|b"), "a&#124;b");
    }

    #[test]
    fn code_spans_outrun_every_backtick_run_inside() {
        assert_eq!(md_code("lab-f"), "`lab-f`");
        assert_eq!(md_code("a``b"), "```a``b```");
        assert_eq!(md_code("`x"), "`` `x ``");
        assert_eq!(md_code("a\nb"), "`a\\u{a}b`");
        assert_eq!(md_cell_code("a|b"), "`a\\|b`");
    }

    #[test]
    fn json_escapes_what_serde_leaves_raw() {
        let v = serde_json::json!({"k": "a\u{1b}\u{7f}\u{9b}\u{202e}b"});
        let t = serde_json::to_string(&v).unwrap();
        let e = json(&t);
        assert!(!e.chars().any(unsafe_char), "{e}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&e).unwrap(), v);
    }

    #[test]
    fn fences_are_longer_than_any_run_inside() {
        assert_eq!(md_fence("plain"), "```");
        assert_eq!(md_fence("x\n```\ny"), "````");
        assert_eq!(md_fence("``````"), "```````");
    }
}
