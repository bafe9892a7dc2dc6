//! Renders a [`Diff`] for people and programs: terminal text (optionally coloured),
//! Markdown for a pull-request comment (summary table first, details folded, kept under
//! GitHub's comment limit with a note of what was cut), and JSON; and error messages for
//! the terminal ([`error_message`]: bounded, control characters escaped).
//!
//! Pure: strings in, strings out. Nothing here sees a secret value: the model has none.

use crate::printable::{line, md_code, md_fence, md_text};
use crate::review::diff::{
    CertChange, CertInfo, ClusterDiff, ClusterStatus, Delta, Diff, ObjectDiff, ObjectStatus,
    Severity,
};
use serde_json::Value;
use std::fmt::Write as _;

/// GitHub's limit for a pull-request comment, in characters.
pub const GITHUB_COMMENT_LIMIT: usize = 65_536;

/// The most characters of one line of an error message.
pub const ERROR_LINE_LIMIT: usize = 1_000;
/// The most lines of an error message.
pub const ERROR_LINES_LIMIT: usize = 100;

/// An error message as it may reach a terminal, a CI log or Argo CD's UI: every control
/// character but the line break (C0, DEL, C1: an ANSI escape, a carriage return that
/// would overwrite the line) and every bidirectional override is escaped (`\u{1b}`), each
/// line is cut at `ERROR_LINE_LIMIT` characters and the message at `ERROR_LINES_LIMIT`
/// lines, each cut saying how much was left out. A message echoes input (a value, a
/// path), and input is untrusted.
pub fn error_message(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(ERROR_LINE_LIMIT * 4));
    let lines: Vec<&str> = text.split('\n').collect();
    for (i, line) in lines.iter().take(ERROR_LINES_LIMIT).enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let total = line.chars().count();
        for (shown, c) in line.chars().enumerate() {
            if shown == ERROR_LINE_LIMIT {
                let _ = write!(out, "… ({} more characters)", total - shown);
                break;
            }
            crate::printable::push(&mut out, c);
        }
    }
    if lines.len() > ERROR_LINES_LIMIT {
        let _ = write!(out, "\n… ({} more lines)", lines.len() - ERROR_LINES_LIMIT);
    }
    out
}

/// The diff as JSON (pretty-printed, newline-terminated): the clusters that differ or whose
/// inputs changed, the unchanged ones as a count (and in `clusters` too with `verbose`),
/// and the groups of clusters with the same change.
pub fn json(diff: &Diff, verbose: bool) -> String {
    #[derive(serde::Serialize)]
    struct View<'a> {
        a: &'a str,
        b: &'a str,
        decrypted: bool,
        sealed: crate::review::diff::SealedValues,
        #[serde(skip_serializing_if = "Option::is_none")]
        scope: Option<&'a crate::review::diff::Scope>,
        unchanged: usize,
        clusters: Vec<&'a ClusterDiff>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        groups: Vec<Vec<&'a str>>,
    }
    let view = View {
        a: &diff.a,
        b: &diff.b,
        decrypted: diff.decrypted,
        sealed: diff.sealed,
        scope: diff.scope.as_ref(),
        unchanged: diff.clusters.iter().filter(|c| quiet(c)).count(),
        clusters: diff
            .clusters
            .iter()
            .filter(|c| verbose || !quiet(c))
            .collect(),
        groups: groups(diff)
            .into_iter()
            .filter(|g| g.names.len() > 1)
            .map(|g| g.names)
            .collect(),
    };
    let mut s = serde_json::to_string_pretty(&view).unwrap_or_else(|_| "{}".into());
    s.push('\n');
    crate::printable::json(&s).into_owned()
}

/// A cluster that is only counted: unchanged, nothing re-encrypted, no input changed.
fn quiet(c: &ClusterDiff) -> bool {
    c.status == ClusterStatus::Unchanged && c.objects.is_empty() && c.inputs.is_empty()
}

/// Clusters shown together: the same differences, risks and changed inputs once each
/// cluster's own name is taken out ("the same change in 312 clusters").
struct Group<'a> {
    /// The first cluster, whose details are shown.
    first: &'a ClusterDiff,
    /// Every cluster of the group, the first first.
    names: Vec<&'a str>,
}

/// The clusters that are not [`quiet`], grouped, in order of their first cluster.
fn groups(diff: &Diff) -> Vec<Group<'_>> {
    let mut out: Vec<Group<'_>> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for c in diff.clusters.iter().filter(|c| !quiet(c)) {
        let mut key =
            serde_json::to_string(&(c.status, &c.objects, &c.risks, &c.inputs)).unwrap_or_default();
        // A name this short could stand for something else in another cluster's details.
        if c.name.len() >= 3 {
            key = key.replace(&c.name, "\u{1}");
        } else {
            key = format!("{}\u{1}{key}", c.name);
        }
        match index.get(&key) {
            Some(&i) => out[i].names.push(&c.name),
            None => {
                index.insert(key, out.len());
                out.push(Group {
                    first: c,
                    names: vec![&c.name],
                });
            }
        }
    }
    out
}

/// A group's names: all of them up to `shown`, then a count; and the group's size.
fn group_names(g: &Group<'_>, shown: usize) -> String {
    let n = g.names.len();
    if n == 1 {
        return g.names[0].to_string();
    }
    let mut s = g.names[..n.min(shown)].join(", ");
    if n > shown {
        let _ = write!(s, " (+{} more)", n - shown);
    }
    s
}

/// The scope of a `diff --git` run, one line each: what was rendered, why everything was,
/// and what changed but is read by no cluster.
fn scope_lines(diff: &Diff) -> Vec<String> {
    let Some(s) = &diff.scope else {
        return Vec::new();
    };
    let mut out = vec![format!(
        "rendered {} of {} cluster(s); {} skipped: none of their inputs changed",
        s.rendered, s.clusters, s.skipped
    )];
    if let Some(e) = &s.everything {
        out.push(format!("every cluster rendered: {e}"));
    }
    if !s.unused.is_empty() {
        let mut l = format!(
            "changed, read by no cluster: {}",
            s.unused
                .iter()
                .take(10)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        );
        if s.unused.len() > 10 {
            let _ = write!(l, " (+{} more)", s.unused.len() - 10);
        }
        out.push(l);
    }
    out
}

/// The changed inputs of a group's first cluster, for its heading.
fn inputs_line(c: &ClusterDiff) -> Option<String> {
    if c.inputs.is_empty() {
        return None;
    }
    let mut l = c
        .inputs
        .iter()
        .take(10)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if c.inputs.len() > 10 {
        let _ = write!(l, " (+{} more)", c.inputs.len() - 10);
    }
    Some(
        if c.status == ClusterStatus::Unchanged && c.objects.is_empty() {
            format!("inputs changed ({l}), rendered objects unchanged")
        } else {
            format!("inputs changed: {l}")
        },
    )
}

#[derive(Clone, Copy)]
struct Paint(bool);

impl Paint {
    fn wrap(self, code: &str, s: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    fn red(self, s: &str) -> String {
        self.wrap("31", s)
    }
    fn green(self, s: &str) -> String {
        self.wrap("32", s)
    }
    fn yellow(self, s: &str) -> String {
        self.wrap("33", s)
    }
    fn cyan(self, s: &str) -> String {
        self.wrap("36", s)
    }
    fn bold(self, s: &str) -> String {
        self.wrap("1", s)
    }
    fn dim(self, s: &str) -> String {
        self.wrap("2", s)
    }
    fn severity(self, sev: Severity) -> String {
        let label = format!("{:<6}", sev.as_str());
        match sev {
            Severity::High => self.wrap("1;31", &label),
            Severity::Medium => self.yellow(&label),
            Severity::Low => self.dim(&label),
        }
    }
}

fn sigil(status: ObjectStatus) -> &'static str {
    match status {
        ObjectStatus::Added => "+",
        ObjectStatus::Removed => "-",
        ObjectStatus::Changed => "~",
        ObjectStatus::Replaced => "±",
        ObjectStatus::Reencrypted => "=",
    }
}

/// A value on one line: strings bare unless that would mislead, others as JSON.
fn show(v: Option<&Value>) -> String {
    match v {
        None => "(absent)".into(),
        Some(Value::String(s))
            if !s.is_empty()
                && s.trim() == s
                && !s.contains('\n')
                && !matches!(s.as_str(), "true" | "false" | "null")
                && s.parse::<f64>().is_err() =>
        {
            s.clone()
        }
        Some(v) => v.to_string(),
    }
}

fn cert_line(c: &CertInfo) -> String {
    format!(
        "subject {}, issuer {}, not after {}, {}{}",
        if c.subject.is_empty() {
            "(empty)"
        } else {
            &c.subject
        },
        if c.issuer.is_empty() {
            "(empty)"
        } else {
            &c.issuer
        },
        c.not_after,
        c.sha256,
        if c.is_ca { " (CA)" } else { "" }
    )
}

/// One line of an object's details, tagged for colouring.
enum Line {
    /// Plain text.
    Plain(String),
    /// A line of a unified diff (first character ` `, `-`, `+` or `@`).
    Diff(String),
}

fn cert_lines(indent: &str, label: &str, certs: &[CertChange], out: &mut Vec<Line>) {
    for c in certs {
        let at = if c.path.is_empty() {
            String::new()
        } else {
            format!(" {}", c.path)
        };
        out.push(Line::Plain(format!("{indent}{label}{at} certificate:")));
        out.push(Line::Plain(format!(
            "{indent}  before: {}",
            c.before.as_ref().map_or("(none)".into(), cert_line)
        )));
        out.push(Line::Plain(format!(
            "{indent}  after:  {}",
            c.after.as_ref().map_or("(none)".into(), cert_line)
        )));
    }
}

fn object_lines(o: &ObjectDiff) -> Vec<Line> {
    let mut out = Vec::new();
    for f in &o.fields {
        match &f.delta {
            Delta::Value { before, after } => {
                if o.status == ObjectStatus::Added {
                    out.push(Line::Plain(format!("{}: {}", f.path, show(after.as_ref()))));
                } else {
                    out.push(Line::Plain(format!(
                        "{}: {} → {}",
                        f.path,
                        show(before.as_ref()),
                        show(after.as_ref())
                    )));
                }
            }
            Delta::Text { diff } => {
                out.push(Line::Plain(format!("{}:", f.path)));
                for l in diff.lines() {
                    out.push(Line::Diff(l.to_string()));
                }
            }
            Delta::Certificate { certificates } => {
                out.push(Line::Plain(format!("{}: certificate changed", f.path)));
                cert_lines("  ", "", certificates, &mut out);
            }
            Delta::Masked => out.push(Line::Plain(format!(
                "{}: changed (value looks secret: not shown)",
                f.path
            ))),
        }
    }
    for k in &o.secret_keys {
        out.push(Line::Plain(format!("{}: {}", k.key, k.status.describe())));
        if !k.fields.is_empty() {
            out.push(Line::Plain(format!(
                "  changed inside: {}",
                k.fields.join(", ")
            )));
        }
        cert_lines("  ", "", &k.certificates, &mut out);
    }
    for r in &o.referenced_by {
        out.push(Line::Plain(format!(
            "reference moved: {} {}",
            r.object, r.path
        )));
    }
    for n in &o.notes {
        out.push(Line::Plain(format!("note: {n}")));
    }
    out
}

fn object_title(o: &ObjectDiff) -> String {
    let group = if o.id.group.is_empty() {
        String::new()
    } else {
        format!(" ({})", o.id.group)
    };
    match (&o.status, &o.replaces) {
        (ObjectStatus::Replaced, Some(old)) => {
            format!("{} {}{group}: replaced (was {old})", sigil(o.status), o.id)
        }
        _ => format!("{} {}{group}: {}", sigil(o.status), o.id, o.status.as_str()),
    }
}

struct Totals {
    changed_clusters: usize,
    objects: [usize; 5],
    risks: [usize; 3],
}

const STATUSES: [ObjectStatus; 5] = [
    ObjectStatus::Changed,
    ObjectStatus::Replaced,
    ObjectStatus::Added,
    ObjectStatus::Removed,
    ObjectStatus::Reencrypted,
];
const SEVERITIES: [Severity; 3] = [Severity::High, Severity::Medium, Severity::Low];

fn totals(diff: &Diff) -> Totals {
    let mut t = Totals {
        changed_clusters: 0,
        objects: [0; 5],
        risks: [0; 3],
    };
    for c in &diff.clusters {
        if c.status != ClusterStatus::Unchanged {
            t.changed_clusters += 1;
        }
        for (i, s) in STATUSES.iter().enumerate() {
            t.objects[i] += c.count(*s);
        }
        for (i, s) in SEVERITIES.iter().enumerate() {
            t.risks[i] += c.risk_count(*s);
        }
    }
    t
}

fn summary_line(diff: &Diff) -> String {
    let t = totals(diff);
    format!(
        "{} of {} cluster(s) differ · objects: {} changed, {} replaced, {} added, {} removed, {} re-encrypted · risks: {} high, {} medium, {} low",
        t.changed_clusters,
        diff.scope.as_ref().map_or(diff.clusters.len(), |s| s.clusters),
        t.objects[0],
        t.objects[1],
        t.objects[2],
        t.objects[3],
        t.objects[4],
        t.risks[0],
        t.risks[1],
        t.risks[2]
    )
}

/// How sealed values were compared, in one sentence (values are never shown either way).
fn sealed_line(diff: &Diff) -> String {
    use crate::review::diff::SealedValues;
    match (diff.sealed, diff.decrypted) {
        (SealedValues::Compared, _) => "sealed values decrypted and compared (--compare-sealed: for a key holder's \
             terminal, never a pull request); values are never shown"
            .into(),
        (SealedValues::Resealed, true) => "sealed values compared by ciphertext: a changed one is re-sealed, whatever \
             it holds (the identity verifies MACs and decodes certificates); values are never shown"
            .into(),
        (SealedValues::Resealed, false) => "sealed values compared by ciphertext: a changed one is re-sealed, whatever \
             it holds (no identity given: MACs not verified, certificates not decoded); values are never shown"
            .into(),
    }
}

/// Terminal text; ANSI colours only when `color`. Unchanged clusters are counted, and
/// named only when `verbose`.
pub fn text(diff: &Diff, color: bool, verbose: bool) -> String {
    let p = Paint(color);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}",
        p.bold(&format!(
            "capstan diff {} → {}",
            line(&diff.a),
            line(&diff.b)
        ))
    );
    let _ = writeln!(s, "{}", summary_line(diff));
    for l in scope_lines(diff) {
        let _ = writeln!(s, "{}", p.dim(&line(&l)));
    }
    let _ = writeln!(s, "{}", p.dim(&sealed_line(diff)));
    let unchanged: Vec<&str> = diff
        .clusters
        .iter()
        .filter(|c| quiet(c))
        .map(|c| c.name.as_str())
        .collect();
    for g in groups(diff) {
        let c = g.first;
        s.push('\n');
        let head = if g.names.len() > 1 {
            format!(
                "cluster {}: {} (the same change in {} clusters, shown for {})",
                group_names(&g, 8),
                c.status.as_str(),
                g.names.len(),
                c.name
            )
        } else {
            format!("cluster {}: {}", c.name, c.status.as_str())
        };
        let _ = writeln!(s, "{}", p.bold(&line(&head)));
        if let Some(l) = inputs_line(c) {
            let _ = writeln!(s, "  {}", p.dim(&line(&l)));
        }
        if !c.risks.is_empty() {
            let _ = writeln!(s, "  risks:");
            for r in &c.risks {
                let obj = if r.object.is_empty() {
                    String::new()
                } else {
                    format!("{}: ", line(&r.object))
                };
                let _ = writeln!(
                    s,
                    "    {} {obj}{}",
                    p.severity(r.severity),
                    line(&r.message)
                );
            }
        }
        for o in &c.objects {
            let title = line(&object_title(o)).into_owned();
            let title = match o.status {
                ObjectStatus::Added => p.green(&title),
                ObjectStatus::Removed => p.red(&title),
                ObjectStatus::Changed => p.yellow(&title),
                ObjectStatus::Replaced => p.cyan(&title),
                ObjectStatus::Reencrypted => p.dim(&title),
            };
            let _ = writeln!(s, "  {title}");
            for l in object_lines(o) {
                match l {
                    Line::Plain(t) => {
                        let _ = writeln!(s, "      {}", line(&t));
                    }
                    Line::Diff(t) => {
                        let t = line(&t).into_owned();
                        let t = match t.chars().next() {
                            Some('+') => p.green(&t),
                            Some('-') => p.red(&t),
                            Some('@') => p.cyan(&t),
                            _ => t,
                        };
                        let _ = writeln!(s, "        {t}");
                    }
                }
            }
        }
    }
    if !unchanged.is_empty() {
        s.push('\n');
        let line = if verbose {
            format!("unchanged: {}", unchanged.join(", "))
        } else {
            format!(
                "unchanged: {} cluster(s) (names with --verbose)",
                unchanged.len()
            )
        };
        let _ = writeln!(s, "{}", p.dim(&crate::printable::line(&line)));
    }
    s
}

fn md_risks(c: &ClusterDiff) -> Vec<String> {
    c.risks
        .iter()
        .map(|r| {
            let obj = if r.object.is_empty() {
                String::new()
            } else {
                format!("{} ", md_code(&r.object))
            };
            format!(
                "- **{}** {obj}{}\n",
                r.severity.as_str(),
                md_text(&r.message)
            )
        })
        .collect()
}

fn md_object(o: &ObjectDiff) -> String {
    let mut body = String::new();
    for l in object_lines(o) {
        match l {
            Line::Plain(t) => {
                body.push_str("  ");
                body.push_str(&line(&t));
            }
            Line::Diff(t) => body.push_str(&line(&t)),
        }
        body.push('\n');
    }
    // The sigil is capstan's own (`~` would read as strikethrough if escaped text had it).
    let title = object_title(o);
    let rest = title.strip_prefix(sigil(o.status)).unwrap_or(&title);
    let summary = format!("{}{}", sigil(o.status), md_text(rest));
    if body.is_empty() {
        return format!("- <code>{summary}</code>\n");
    }
    let fence = md_fence(&body);
    format!("<details><summary><code>{summary}</code></summary>\n\n{fence}diff\n{body}{fence}\n\n</details>\n")
}

fn risk_cell(c: &ClusterDiff) -> String {
    let parts: Vec<String> = SEVERITIES
        .iter()
        .filter_map(|s| {
            let n = c.risk_count(*s);
            (n > 0).then(|| {
                if *s == Severity::High {
                    format!("**{n} high**")
                } else {
                    format!("{n} {}", s.as_str())
                }
            })
        })
        .collect();
    if parts.is_empty() {
        "–".into()
    } else {
        parts.join(", ")
    }
}

/// Markdown for a pull-request comment, at most `limit` bytes (so at most `limit`
/// characters): the summary table first, then per cluster its risk notes and its objects
/// in `<details>` blocks; clusters with the same change share a row and a section, and
/// unchanged clusters are one row (one each with `verbose`). What does not fit is left
/// out, and a closing note says what.
pub fn markdown(diff: &Diff, limit: usize, verbose: bool) -> String {
    const NOTE_RESERVE: usize = 600;
    let budget = limit.saturating_sub(NOTE_RESERVE);
    let head = md_head(diff);
    let mut used = head.len();
    let groups = groups(diff);
    let (table, rows_cut) = md_table(diff, &groups, verbose, budget, &mut used);
    used += 1;

    // Per cluster (or group): heading and risk notes first (for every one), then details.
    let shown: Vec<&Group<'_>> = groups
        .iter()
        .filter(|g| {
            !g.first.objects.is_empty() || !g.first.risks.is_empty() || !g.first.inputs.is_empty()
        })
        .collect();
    let mut headings: Vec<Option<String>> = Vec::with_capacity(shown.len());
    let mut risks: Vec<Vec<String>> = Vec::with_capacity(shown.len());
    let mut risks_cut = 0usize;
    let mut clusters_cut = 0usize;
    for g in &shown {
        let c = g.first;
        let mut h = if g.names.len() > 1 {
            format!(
                "\n### {} ({}: the same change in {} clusters, shown for {})\n\n",
                md_text(&group_names(g, 5)),
                c.status.as_str(),
                g.names.len(),
                md_text(&c.name)
            )
        } else {
            format!("\n### {} ({})\n\n", md_text(&c.name), c.status.as_str())
        };
        if let Some(l) = inputs_line(c) {
            let _ = write!(h, "_{}_\n\n", md_text(&l));
        }
        if used + h.len() > budget {
            headings.push(None);
            risks.push(Vec::new());
            clusters_cut += 1;
            risks_cut += c.risks.len();
            continue;
        }
        used += h.len();
        headings.push(Some(h));
        let mut kept = Vec::new();
        for line in md_risks(c) {
            if used + line.len() > budget {
                risks_cut += 1;
                continue;
            }
            used += line.len();
            kept.push(line);
        }
        if !kept.is_empty() {
            used += 1;
        }
        risks.push(kept);
    }
    let mut details: Vec<Vec<String>> = vec![Vec::new(); shown.len()];
    let mut objects_cut = 0usize;
    let mut objects_cut_clusters = 0usize;
    for (i, g) in shown.iter().enumerate() {
        let c = g.first;
        let mut cut_here = false;
        for o in &c.objects {
            let block = md_object(o);
            if headings[i].is_none() || used + block.len() > budget {
                objects_cut += 1;
                cut_here = true;
                continue;
            }
            used += block.len();
            details[i].push(block);
        }
        if cut_here {
            objects_cut_clusters += 1;
        }
    }

    let mut out = head;
    out.push_str(&table);
    if rows_cut > 0 {
        let _ = writeln!(out, "| … {rows_cut} more cluster(s) | | | | | | | |");
    }
    for (i, h) in headings.iter().enumerate() {
        let Some(h) = h else { continue };
        out.push_str(h);
        for r in &risks[i] {
            out.push_str(r);
        }
        if !risks[i].is_empty() {
            out.push('\n');
        }
        for d in &details[i] {
            out.push_str(d);
        }
    }
    let cuts = [rows_cut, clusters_cut, risks_cut, objects_cut, objects_cut_clusters];
    if let Some(note) = cut_note(cuts) {
        out.push_str(&note);
    }
    // The reserve covers the note; this guard keeps the promise even for pathological input.
    if out.len() > limit {
        let mut end = limit.saturating_sub(80);
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out.push_str("\n\n> **Cut at GitHub's comment limit.**\n");
    }
    out
}

/// The comment's title, sides, scope and summary-table header.
fn md_head(diff: &Diff) -> String {
    let mut head = String::new();
    let _ = writeln!(head, "## capstan diff\n");
    let _ = writeln!(
        head,
        "{} → {} · {}\n",
        md_code(&diff.a),
        md_code(&diff.b),
        md_text(&summary_line(diff))
    );
    for l in scope_lines(diff) {
        let _ = writeln!(head, "_{}_\n", md_text(&l));
    }
    let sealed = sealed_line(diff);
    let _ = writeln!(
        head,
        "_{}{}_\n",
        sealed[..1].to_ascii_uppercase(),
        md_text(&sealed[1..])
    );
    let _ = writeln!(
        head,
        "| cluster | status | changed | replaced | added | removed | re-encrypted | risks |\n|---|---|--:|--:|--:|--:|--:|---|"
    );
    head
}

/// The summary table's rows, as many as fit in half of `budget` (`used` counts what the
/// comment holds so far), and how many were cut: clusters with differences first, so a cut
/// table still shows them; then those whose inputs changed alone; then the unchanged ones.
fn md_table(
    diff: &Diff,
    groups: &[Group<'_>],
    verbose: bool,
    budget: usize,
    used: &mut usize,
) -> (String, usize) {
    let mut table = String::new();
    let mut rows_cut = 0usize;
    // Clusters with differences first in the table, so a cut table still shows them; then
    // those whose inputs changed alone; then the unchanged ones.
    let mut ordered: Vec<(String, &ClusterDiff)> = groups
        .iter()
        .filter(|g| g.first.status != ClusterStatus::Unchanged)
        .chain(
            groups
                .iter()
                .filter(|g| g.first.status == ClusterStatus::Unchanged),
        )
        .map(|g| (group_names(g, 5), g.first))
        .collect();
    let quiet_ones: Vec<&ClusterDiff> = diff.clusters.iter().filter(|c| quiet(c)).collect();
    let unchanged_row = ClusterDiff {
        name: String::new(),
        status: ClusterStatus::Unchanged,
        objects: Vec::new(),
        risks: Vec::new(),
        inputs: Vec::new(),
    };
    if verbose {
        ordered.extend(quiet_ones.iter().map(|c| (c.name.clone(), *c)));
    } else if !quiet_ones.is_empty() {
        ordered.push((
            format!("{} unchanged cluster(s)", quiet_ones.len()),
            &unchanged_row,
        ));
    }
    for (label, c) in &ordered {
        let row = format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            md_text(label),
            c.status.as_str(),
            c.count(ObjectStatus::Changed),
            c.count(ObjectStatus::Replaced),
            c.count(ObjectStatus::Added),
            c.count(ObjectStatus::Removed),
            c.count(ObjectStatus::Reencrypted),
            risk_cell(c)
        );
        if *used + row.len() > budget / 2 {
            rows_cut += 1;
            continue;
        }
        *used += row.len();
        table.push_str(&row);
    }
    (table, rows_cut)
}

/// The closing note of a comment that was cut: what was left out (rows, sections, risk
/// notes, objects), or nothing when everything fit.
fn cut_note(
    [rows_cut, clusters_cut, risks_cut, objects_cut, objects_cut_clusters]: [usize; 5],
) -> Option<String> {
    if rows_cut + clusters_cut + risks_cut + objects_cut == 0 {
        return None;
    }
    let mut what = Vec::new();
    if rows_cut > 0 {
        what.push(format!("{rows_cut} row(s) of the summary table"));
    }
    if clusters_cut > 0 {
        what.push(format!("the sections of {clusters_cut} cluster(s)"));
    }
    if risks_cut > 0 {
        what.push(format!("{risks_cut} risk note(s)"));
    }
    if objects_cut > 0 {
        what.push(format!(
            "the details of {objects_cut} object(s) in {objects_cut_clusters} cluster(s)"
        ));
    }
    Some(format!(
            "\n> **Cut to stay under GitHub's {GITHUB_COMMENT_LIMIT}-character comment limit:** left out {}. \
             Run `capstan diff` (text or `--format json`) for the full report.\n",
            what.join(", ")
        ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_are_escaped_and_bounded() {
        assert_eq!(error_message("plain\nsecond\tline"), "plain\nsecond\tline");
        assert_eq!(
            error_message("a\u{1b}[31mred\r\u{7f}\u{85}\u{202e}x"),
            "a\\u{1b}[31mred\\u{d}\\u{7f}\\u{85}\\u{202e}x"
        );
        let long = "é".repeat(5000);
        let e = error_message(&long);
        assert_eq!(
            e.chars().count(),
            ERROR_LINE_LIMIT + "… (4000 more characters)".chars().count()
        );
        assert!(e.ends_with("… (4000 more characters)"));
        let many = vec!["x"; 250].join("\n");
        let e = error_message(&many);
        assert_eq!(e.lines().count(), ERROR_LINES_LIMIT + 1);
        assert!(e.ends_with("… (150 more lines)"));
    }
    use crate::review::diff::{ClusterDiff, FieldChange, ObjectId, Risk};
    use serde_json::json;

    fn sample(n: usize) -> Diff {
        let clusters = (0..n)
            .map(|i| ClusterDiff {
                name: format!("c{i:03}"),
                status: ClusterStatus::Changed,
                objects: vec![ObjectDiff {
                    id: ObjectId {
                        group: "cluster.x-k8s.io".into(),
                        kind: "MachineDeployment".into(),
                        namespace: format!("c{i:03}"),
                        name: "md".into(),
                    },
                    status: ObjectStatus::Changed,
                    replaces: None,
                    fields: vec![FieldChange {
                        path: "spec.replicas".into(),
                        delta: Delta::Value {
                            before: Some(json!(1)),
                            // Each cluster its own change, so none are grouped.
                            after: Some(json!(2 + i)),
                        },
                    }],
                    secret_keys: vec![],
                    referenced_by: vec![],
                    notes: vec!["x".repeat(400)],
                    broken: None,
                }],
                risks: vec![Risk {
                    severity: Severity::Low,
                    object: "MachineDeployment c/md".into(),
                    message: "worker replicas 1 → 2: creates 1 machine(s)".into(),
                }],
                inputs: vec![],
            })
            .collect();
        Diff {
            a: "a".into(),
            b: "b".into(),
            decrypted: false,
            sealed: Default::default(),
            clusters,
            scope: None,
        }
    }

    #[test]
    fn markdown_fits_and_says_what_was_cut() {
        let small = markdown(&sample(2), GITHUB_COMMENT_LIMIT, false);
        assert!(!small.contains("Cut to stay"));
        assert!(small.contains("spec.replicas: 1 → 2"));
        let big = markdown(&sample(2000), GITHUB_COMMENT_LIMIT, false);
        assert!(big.len() <= GITHUB_COMMENT_LIMIT, "{}", big.len());
        assert!(big.contains("Cut to stay under GitHub's 65536-character comment limit"));
    }

    /// What a pull request can put in a name or a value: a screen clear, a window title
    /// (OSC), a carriage return, a line break that starts a forged line, a right-to-left
    /// override, a fence, a heading, a table cell break, HTML, a link and a mention.
    const HOSTILE: &str =
        "x\u{1b}[2J\u{1b}]0;t\u{7}\r\n# forged\n```\n|cell|<b>[l](http://e)@team\u{202e}";

    /// Every place a name or a value reaches: cluster, object, field path, values, a text
    /// diff, a note, a risk, the changed inputs and the scope.
    fn hostile_diff() -> Diff {
        let mut d = sample(1);
        let c = &mut d.clusters[0];
        c.name = format!("c{HOSTILE}");
        c.inputs = vec![format!("clusters/{HOSTILE}/cluster.yaml")];
        let o = &mut c.objects[0];
        o.id.name = HOSTILE.into();
        o.id.namespace = HOSTILE.into();
        o.fields[0].path = format!("metadata.labels[\"{HOSTILE}\"]");
        o.fields[0].delta = Delta::Value {
            before: Some(json!(HOSTILE)),
            after: Some(json!("a\u{1b}[31mb")),
        };
        o.fields.push(FieldChange {
            path: "data.script".into(),
            delta: Delta::Text {
                // A unified diff of a value with the hostile lines in it, as diff writes it.
                diff: format!("@@ -1 +1,4 @@\n-a\n+{}\n", HOSTILE.replace('\n', "\n+")),
            },
        });
        o.notes = vec![HOSTILE.into()];
        c.risks[0].object = format!("MachineDeployment {HOSTILE}");
        c.risks[0].message = format!("worker replicas 1 → 2 {HOSTILE}");
        d.scope = Some(crate::review::diff::Scope {
            rendered: 1,
            clusters: 1,
            skipped: 0,
            everything: Some(HOSTILE.into()),
            unused: vec![HOSTILE.into()],
        });
        d
    }

    fn assert_terminal_safe(what: &str, out: &str) {
        for c in ['\u{1b}', '\r', '\u{7}', '\u{202e}'] {
            assert!(!out.contains(c), "{what}: {c:?} reached the output:\n{out}");
        }
        for l in out.lines() {
            assert!(
                !l.starts_with("# forged") && !l.starts_with("|cell"),
                "{what}: the input started a line: {l}"
            );
        }
    }

    /// A Markdown line without its code spans (a backtick run up to the next run of the
    /// same length), where nothing is read as HTML, a link or a mention.
    fn outside_code_spans(l: &str) -> String {
        let mut out = String::new();
        let mut rest = l;
        while let Some(i) = rest.find('`') {
            out.push_str(&rest[..i]);
            let run = rest[i..].len() - rest[i..].trim_start_matches('`').len();
            let after = &rest[i + run..];
            let fence = "`".repeat(run);
            match after.find(&fence) {
                Some(j) => rest = &after[j + run..],
                None => {
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    }

    #[test]
    fn hostile_names_and_values_reach_no_printer_raw() {
        let d = hostile_diff();
        for color in [false, true] {
            let t = text(&d, color, true);
            // With colour, capstan's own SGR codes are the only escapes: taken out first.
            let t = if color {
                let mut plain = String::new();
                let mut rest = t.as_str();
                while let Some(i) = rest.find("\u{1b}[") {
                    plain.push_str(&rest[..i]);
                    let after = &rest[i + 2..];
                    let end = after.find('m').expect("an SGR code");
                    assert!(
                        after[..end].chars().all(|c| c.is_ascii_digit() || c == ';'),
                        "only SGR codes: {t}"
                    );
                    rest = &after[end + 1..];
                }
                plain.push_str(rest);
                plain
            } else {
                t
            };
            assert_terminal_safe("text", &t);
        }
        let md = markdown(&d, GITHUB_COMMENT_LIMIT, true);
        assert_terminal_safe("markdown", &md);
        // Every fence opened is closed by a fence of its own length, and no line the input
        // made is a heading, a table row, HTML or a mention.
        let mut open: Option<&str> = None;
        for l in md.lines() {
            let ticks = l.len() - l.trim_start_matches('`').len();
            match open {
                None if ticks >= 3 => open = Some(&l[..ticks]),
                Some(f) if l == f => open = None,
                Some(f) => assert!(
                    !l.trim_start().starts_with(f),
                    "a body line closes the fence: {l}"
                ),
                None => {
                    let l = outside_code_spans(l);
                    assert!(!l.contains("<b>") && !l.contains("](http"), "{l}");
                    assert!(!l.contains("@team"), "a mention: {l}");
                }
            }
        }
        assert!(open.is_none(), "every fence closed:\n{md}");
        let table_rows: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
        for r in &table_rows {
            assert_eq!(
                r.matches('|').count() - r.matches("\\|").count(),
                9,
                "the row keeps its 8 cells: {r}"
            );
        }
        let j = json(&d, true);
        assert_terminal_safe("json", &j);
        let back: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(back["clusters"][0]["name"], json!(format!("c{HOSTILE}")));
    }

    #[test]
    fn text_without_colour_has_no_escapes() {
        let t = text(&sample(1), false, false);
        assert!(!t.contains('\x1b'));
        assert!(text(&sample(1), true, false).contains('\x1b'));
    }
    #[test]
    fn the_same_change_in_many_clusters_is_shown_once_and_unchanged_ones_are_counted() {
        let mut d = sample(1);
        let one = d.clusters[0].clone();
        d.clusters.clear();
        for name in ["lab-a", "lab-b", "lab-c"] {
            let mut c = one.clone();
            let old = c.name.clone();
            c.name = name.into();
            c.objects[0].id.namespace = c.objects[0].id.namespace.replace(&old, name);
            d.clusters.push(c);
        }
        let mut quiet = one.clone();
        quiet.name = "lab-q".into();
        quiet.status = ClusterStatus::Unchanged;
        quiet.objects.clear();
        quiet.risks.clear();
        d.clusters.push(quiet);
        let t = text(&d, false, false);
        assert!(
            t.contains("cluster lab-a, lab-b, lab-c: changed (the same change in 3 clusters, shown for lab-a)"),
            "{t}"
        );
        assert_eq!(t.matches("spec.replicas").count(), 1, "{t}");
        assert!(
            t.contains("unchanged: 1 cluster(s) (names with --verbose)"),
            "{t}"
        );
        assert!(text(&d, false, true).contains("unchanged: lab-q"));
        let m = markdown(&d, GITHUB_COMMENT_LIMIT, false);
        assert!(m.contains("| lab-a, lab-b, lab-c | changed |"), "{m}");
        assert!(m.contains("| 1 unchanged cluster(s) | unchanged |"), "{m}");
        assert!(
            m.contains("the same change in 3 clusters, shown for lab-a"),
            "{m}"
        );
        let j: Value = serde_json::from_str(&json(&d, false)).unwrap();
        assert_eq!(j["unchanged"], 1);
        assert_eq!(j["clusters"].as_array().unwrap().len(), 3);
        assert_eq!(j["groups"], json!([["lab-a", "lab-b", "lab-c"]]));
        let j: Value = serde_json::from_str(&json(&d, true)).unwrap();
        assert_eq!(j["clusters"].as_array().unwrap().len(), 4);
        // A different value is a different change.
        d.clusters[1].objects[0].fields[0].delta = Delta::Value {
            before: Some(json!(1)),
            after: Some(json!(9)),
        };
        let t = text(&d, false, false);
        assert!(
            t.contains("cluster lab-a, lab-c: changed (the same change in 2 clusters"),
            "{t}"
        );
        assert!(t.contains("cluster lab-b: changed\n"), "{t}");
    }
}
