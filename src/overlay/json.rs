//! RFC 6902 and RFC 7396 patches, deleting members in place so the remaining keys keep
//! their order, and the messages that say why an operation failed.

use serde_json::{Map, Value};

/// One RFC 6902 operation. `json-patch` removes object members with `swap_remove`, which
/// moves the object's last key into the gap; `remove` and `move` out of a mapping are done
/// here with `shift_remove` instead, so the remaining keys keep their order (stable diffs).
pub(super) fn apply_op(
    doc: &mut Value,
    op: &json_patch::PatchOperation,
) -> Result<(), json_patch::PatchErrorKind> {
    use json_patch::{AddOperation, PatchErrorKind as K, PatchOperation as P};
    let take = |doc: &mut Value, path: &json_patch::jsonptr::Pointer| -> Option<Option<Value>> {
        let (parent, last) = path.split_back()?;
        match doc.pointer_mut(parent.as_str()) {
            Some(Value::Object(m)) => Some(m.shift_remove(last.decoded().as_ref())),
            _ => None,
        }
    };
    match op {
        P::Remove(r) => match take(doc, &r.path) {
            Some(Some(_)) => Ok(()),
            Some(None) => Err(K::InvalidPointer),
            None => json_patch::patch_unsafe(doc, std::slice::from_ref(op)).map_err(|e| e.kind),
        },
        P::Move(m) if !(m.path.starts_with(&m.from) && m.path.len() != m.from.len()) => {
            match take(doc, &m.from) {
                Some(Some(value)) => {
                    let add = P::Add(AddOperation {
                        path: m.path.clone(),
                        value,
                    });
                    json_patch::patch_unsafe(doc, std::slice::from_ref(&add)).map_err(|e| e.kind)
                }
                Some(None) => Err(K::InvalidFromPointer),
                None => json_patch::patch_unsafe(doc, std::slice::from_ref(op)).map_err(|e| e.kind),
            }
        }
        _ => json_patch::patch_unsafe(doc, std::slice::from_ref(op)).map_err(|e| e.kind),
    }
}

/// The units of work (see [`super::Budget`]) an operation costs on `doc`: the nodes it
/// creates, copies or compares, and the list items it shifts.
pub(super) fn op_cost(doc: &Value, op: &json_patch::PatchOperation) -> usize {
    use json_patch::PatchOperation as P;
    let at = |p: &str| doc.pointer(p).map_or(1, super::nodes);
    let shifted = |path: &json_patch::jsonptr::Pointer| -> usize {
        let Some((parent, last)) = path.split_back() else {
            return 0;
        };
        match doc.pointer(parent.as_str()) {
            Some(Value::Array(items)) => {
                let token = last.decoded();
                match token.parse::<usize>() {
                    Ok(i) => items.len().saturating_sub(i),
                    Err(_) if token == "-" => 0,
                    Err(_) => items.len(),
                }
            }
            _ => 0,
        }
    };
    // Taking a member out of a mapping shifts the members after it (see `apply_op`).
    let taken = |path: &json_patch::jsonptr::Pointer| -> usize {
        match path.split_back().and_then(|(p, _)| doc.pointer(p.as_str())) {
            Some(Value::Object(m)) => m.len(),
            _ => shifted(path),
        }
    };
    let cost = match op {
        P::Add(a) => super::nodes(&a.value).saturating_add(shifted(&a.path)),
        P::Remove(r) => taken(&r.path),
        P::Replace(r) => super::nodes(&r.value),
        P::Move(m) => at(m.from.as_str())
            .saturating_add(taken(&m.from))
            .saturating_add(shifted(&m.path)),
        P::Copy(c) => at(c.from.as_str()).saturating_add(shifted(&c.path)),
        P::Test(t) => super::nodes(&t.value),
    };
    cost.saturating_add(1)
}

/// The first key starting with `$` in a merge patch, as its field path (`spec.a.$patch`):
/// RFC 7396 would write it into the object as data, where a strategic directive was meant.
/// Lists are searched too (`spec.items[0].$patch`): RFC 7396 copies them whole.
pub(super) fn dollar_key(patch: &Value) -> Option<String> {
    match patch {
        Value::Object(m) => m.iter().find_map(|(k, v)| {
            if k.starts_with('$') {
                Some(k.clone())
            } else {
                dollar_key(v).map(|sub| {
                    if sub.starts_with('[') {
                        format!("{k}{sub}")
                    } else {
                        format!("{k}.{sub}")
                    }
                })
            }
        }),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, v)| {
            dollar_key(v).map(|sub| {
                if sub.starts_with('[') {
                    format!("[{i}]{sub}")
                } else {
                    format!("[{i}].{sub}")
                }
            })
        }),
        _ => None,
    }
}

/// RFC 7396, as `json_patch::merge`, but deleting members in place (`shift_remove`) so the
/// remaining keys keep their order.
pub(super) fn merge_7396(doc: &mut Value, patch: &Value) {
    let Value::Object(pm) = patch else {
        *doc = patch.clone();
        return;
    };
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    if let Value::Object(dm) = doc {
        for (k, v) in pm {
            if !v.is_null() {
                merge_7396(dm.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        // Deleted members leave in one pass (in place, one `shift_remove` each would shift
        // the map once per key).
        if pm.values().any(Value::is_null) {
            dm.retain(|k, _| !pm.get(k).is_some_and(Value::is_null));
        }
    }
}

pub(super) fn op_name(op: &json_patch::PatchOperation) -> &'static str {
    use json_patch::PatchOperation as P;
    match op {
        P::Add(_) => "add",
        P::Remove(_) => "remove",
        P::Replace(_) => "replace",
        P::Move(_) => "move",
        P::Copy(_) => "copy",
        P::Test(_) => "test",
    }
}

/// Why an operation failed, from the document as it was before it: the deepest part of the
/// pointer that exists and what it holds.
pub(super) fn explain(
    doc: &Value,
    op: &json_patch::PatchOperation,
    kind: &json_patch::PatchErrorKind,
) -> String {
    use json_patch::{PatchErrorKind as K, PatchOperation as P};
    let from = match op {
        P::Move(m) => Some(m.from.as_str()),
        P::Copy(c) => Some(c.from.as_str()),
        _ => None,
    };
    if let Some(m) = from
        .and_then(|f| leading_zero(doc, f).map(|m| format!("`from`: {m}")))
        .or_else(|| leading_zero(doc, op.path().as_str()))
    {
        return m;
    }
    match (kind, op) {
        (K::TestFailed, P::Test(t)) => format!(
            "test failed: expected {}, found {}",
            short(&t.value),
            doc.pointer(t.path.as_str())
                .map_or_else(|| "nothing".to_string(), short)
        ),
        (K::InvalidFromPointer, P::Move(m)) => {
            format!("`from` {}", describe_missing(doc, m.from.as_str()))
        }
        (K::InvalidFromPointer, P::Copy(c)) => {
            format!("`from` {}", describe_missing(doc, c.from.as_str()))
        }
        (K::CannotMoveInsideItself, _) => "cannot move a value inside itself".into(),
        (_, P::Add(a)) => {
            // `add` needs the parent to exist; the last token may be new.
            let path = a.path.as_str();
            let parent = path.rsplit_once('/').map_or("", |(p, _)| p);
            match doc.pointer(parent) {
                Some(Value::Array(items)) => format!(
                    "`{path}` is not an index of the list at `{parent}` ({} items: use 0 to {} or `-` to append)",
                    items.len(),
                    items.len()
                ),
                Some(other) if !other.is_object() => format!(
                    "`{parent}` holds {}, not a mapping or list",
                    short(other)
                ),
                _ => describe_missing(doc, parent),
            }
        }
        _ => describe_missing(doc, op.path().as_str()),
    }
}

/// A list index written with leading zeros (`/containers/01`), which RFC 6901 forbids:
/// the message, when the pointer holds one where the document has a list.
fn leading_zero(doc: &Value, pointer: &str) -> Option<String> {
    let mut cur = doc;
    let mut at = String::new();
    for t in pointer.split('/').skip(1) {
        let decoded = t.replace("~1", "/").replace("~0", "~");
        let next = match cur {
            Value::Object(m) => m.get(&decoded),
            Value::Array(a) => {
                if t.len() > 1 && t.starts_with('0') && t.bytes().all(|b| b.is_ascii_digit()) {
                    let plain = t.trim_start_matches('0');
                    return Some(format!(
                        "`{at}/{t}`: `{t}` is not a list index (RFC 6901 forbids leading zeros; write `{}`)",
                        if plain.is_empty() { "0" } else { plain }
                    ));
                }
                decoded.parse::<usize>().ok().and_then(|i| a.get(i))
            }
            _ => None,
        }?;
        cur = next;
        at.push('/');
        at.push_str(t);
    }
    None
}

/// `nothing at `/a/b/c`: `/a/b` has keys x, y` and similar.
fn describe_missing(doc: &Value, pointer: &str) -> String {
    if pointer.is_empty() {
        return "the whole document cannot be removed".into();
    }
    let tokens: Vec<&str> = pointer.split('/').skip(1).collect();
    let mut cur = doc;
    let mut at = String::new();
    for t in &tokens {
        let decoded = t.replace("~1", "/").replace("~0", "~");
        let next = match cur {
            Value::Object(m) => m.get(&decoded),
            Value::Array(a) => decoded.parse::<usize>().ok().and_then(|i| a.get(i)),
            _ => None,
        };
        match next {
            Some(n) => {
                cur = n;
                at.push('/');
                at.push_str(t);
            }
            None => {
                let here = if at.is_empty() { "the object" } else { &at };
                let what = match cur {
                    Value::Object(m) => {
                        let keys: Vec<&str> = m.keys().map(String::as_str).collect();
                        if keys.is_empty() {
                            "an empty mapping".to_string()
                        } else {
                            format!("keys {}", keys.join(", "))
                        }
                    }
                    Value::Array(a) => format!(
                        "a list of {} item{}",
                        a.len(),
                        if a.len() == 1 { "" } else { "s" }
                    ),
                    other => short(other),
                };
                let have = if matches!(cur, Value::Object(_) | Value::Array(_)) {
                    "has"
                } else {
                    "holds"
                };
                return format!("nothing at `{pointer}`: `{here}` {have} {what}");
            }
        }
    }
    format!("`{pointer}` holds {}", short(cur))
}

pub(super) fn short(v: &Value) -> String {
    let s = match v {
        Value::Object(_) => "a mapping".to_string(),
        Value::Array(a) => format!("a list of {} items", a.len()),
        Value::String(s) => format!("`{s}`"),
        other => format!("`{other}`"),
    };
    if s.len() > 80 {
        let mut cut = 77;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}...`", &s[..cut])
    } else {
        s
    }
}
