//! Strategic merge patches as kustomize applies them (`kubectl kustomize`, kyaml's merge with
//! lists growing at the front), with every directive implemented or refused, never copied.
//!
//! - Maps merge recursively; `null` deletes a field wherever it appears (in a new item or
//!   map it is simply left out).
//! - A list merges when its field says so, else it is replaced: for built-in kinds by the
//!   patch strategy and merge keys Kubernetes publishes, for custom resources by
//!   `x-kubernetes-list-type: map` and its keys in the CRD ([`super::merge_keys`], generated),
//!   and by capstan's own rules for CAPI and Talos lists ([`CAPSTAN_RULES`]), which win.
//! - A keyed list: the patch's items come first, in the patch's order, each merged into the
//!   object's item with the same keys (a missing `protocol` counts as its default, `TCP`),
//!   then the object's other items in their order. A list of primitives with the merge
//!   strategy (`finalizers`) is a set merged the same way.
//! - Directives: `$patch: delete | replace | merge` on a list item, on a list (an item of
//!   its own: `[{$patch: replace}, …]`), on a map and on the whole object (delete removes
//!   the object); `$retainKeys` (the map keeps only these keys); `$setElementOrder/<list>`
//!   (the list's items in this order, the others after); `$deleteFromPrimitiveList/<list>`
//!   (these values leave the list). Any other key starting with `$` is refused.

use super::merge_keys::{KINDS, NODES};
use super::Budget;
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};

/// A field of a node of the merge-key table ([`super::merge_keys`]).
#[derive(Debug)]
pub(super) struct Field {
    /// The field's name.
    pub name: &'static str,
    /// `Some(keys)` when the list merges: by these keys (the first is the merge key), or
    /// as a set of primitives when empty.
    pub merge: Option<&'static [&'static str]>,
    /// The node of the field's value (of its items for a list), when it leads to a merge.
    pub node: Option<u16>,
}

/// capstan's rules for CAPI and Talos lists, ahead of the CRDs (where kustomize replaces).
pub(super) const CAPSTAN_RULES: &[(&str, &str, Rule)] = &[
    (
        "VSphereMachineTemplate",
        "spec.template.spec.network.devices",
        Rule::Keys(&["networkName"]),
    ),
    (
        "VSphereMachineTemplate",
        "spec.template.spec.network.devices.addressesFromPools",
        Rule::Keys(&["name"]),
    ),
    (
        "TalosControlPlane",
        "spec.controlPlaneConfig.controlplane.strategicPatches",
        Rule::Append,
    ),
    (
        "TalosControlPlane",
        "spec.controlPlaneConfig.controlplane.configPatches",
        Rule::Append,
    ),
    (
        "TalosConfigTemplate",
        "spec.template.spec.strategicPatches",
        Rule::Append,
    ),
    (
        "TalosConfigTemplate",
        "spec.template.spec.configPatches",
        Rule::Append,
    ),
];

/// A rule of [`CAPSTAN_RULES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rule {
    /// Items are matched by these keys.
    Keys(&'static [&'static str]),
    /// Patch items are appended.
    Append,
}

/// How one list merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List {
    /// Replaced by the patch's list.
    Replace,
    /// Items matched by these keys; `true` for capstan's own lists (merged in place, new
    /// items appended, as before kustomize's order was followed).
    Keys(&'static [&'static str], bool),
    /// Primitives merged as a set.
    Set,
    /// The patch's items appended (capstan's Talos patch lists).
    Append,
}

/// What a strategic patch did to the whole object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Changed in place.
    Patched,
    /// `$patch: delete` at the top: the object is to be removed.
    Deleted,
}

/// Whether a merged map stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kept {
    Yes,
    Deleted,
}

/// One step of the path being merged: a field, or an item of a list.
#[derive(Debug, Clone)]
enum Step {
    Field(String),
    Item(String),
}

struct Cx<'a> {
    kind: &'a str,
    path: Vec<Step>,
    budget: &'a Budget,
}

impl Cx<'_> {
    /// Count `n` units of work (items and keys visited, values created) against the
    /// render's budget.
    fn charge(&self, n: usize) -> Result<(), String> {
        self.budget
            .charge(n)
            .map_err(|limit| format!("{}: {}", self.here(), Budget::message(limit)))
    }

    fn here(&self) -> String {
        let mut s = String::new();
        for step in &self.path {
            match step {
                Step::Field(f) => {
                    if !s.is_empty() {
                        s.push('.');
                    }
                    s.push_str(f);
                }
                Step::Item(i) => s.push_str(&format!("[{i}]")),
            }
        }
        if s.is_empty() {
            "the object".into()
        } else {
            format!("`{s}`")
        }
    }

    fn rule(&self, field: &str) -> Option<Rule> {
        CAPSTAN_RULES.iter().find_map(|(k, p, rule)| {
            let names = self.path.iter().filter_map(|s| match s {
                Step::Field(f) => Some(f.as_str()),
                Step::Item(_) => None,
            });
            (*k == self.kind && p.split('.').eq(names.chain(std::iter::once(field))))
                .then_some(*rule)
        })
    }
}

/// The node of an object's kind in the merge-key table: exact version first, then any
/// version of the group and kind.
fn root(api_version: &str, kind: &str) -> Option<u16> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    KINDS
        .iter()
        .find(|(g, v, k, _)| *g == group && *v == version && *k == kind)
        .or_else(|| KINDS.iter().find(|(g, _, k, _)| *g == group && *k == kind))
        .map(|(_, _, _, n)| *n)
}

fn field_of(node: Option<u16>, name: &str) -> Option<&'static Field> {
    let fields = NODES.get(usize::from(node?))?;
    fields
        .binary_search_by(|f| f.name.cmp(name))
        .ok()
        .map(|i| &fields[i])
}

/// Whether a key is a strategic-merge directive.
pub fn is_directive(key: &str) -> bool {
    key == "$patch"
        || key == "$retainKeys"
        || key.starts_with("$setElementOrder/")
        || key.starts_with("$deleteFromPrimitiveList/")
}

/// Apply a strategic merge patch to an object of `kind` (`apiVersion` `api_version`).
/// Errors say where (`spec.template.spec.containers[name=app]`) and what was expected.
pub(super) fn apply(
    doc: &mut Value,
    patch: &Value,
    api_version: &str,
    kind: &str,
    budget: &Budget,
) -> Result<Outcome, String> {
    let Value::Object(pm) = patch else {
        return Err("a strategic patch is a mapping".into());
    };
    let mut cx = Cx {
        kind,
        path: Vec::new(),
        budget,
    };
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    let Value::Object(dm) = doc else {
        return Ok(Outcome::Patched);
    };
    Ok(match merge_map(dm, pm, root(api_version, kind), &mut cx)? {
        Kept::Yes => Outcome::Patched,
        Kept::Deleted => Outcome::Deleted,
    })
}

fn directive_value<'a>(pm: &'a Map<String, Value>, cx: &Cx<'_>) -> Result<Option<&'a str>, String> {
    match pm.get("$patch") {
        None => Ok(None),
        Some(Value::String(s)) if ["delete", "replace", "merge"].contains(&s.as_str()) => {
            Ok(Some(s.as_str()))
        }
        Some(other) => Err(format!(
            "{}: unknown directive `$patch: {}` (expected delete, replace or merge)",
            cx.here(),
            match other {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            }
        )),
    }
}

fn merge_map(
    dm: &mut Map<String, Value>,
    pm: &Map<String, Value>,
    node: Option<u16>,
    cx: &mut Cx<'_>,
) -> Result<Kept, String> {
    match directive_value(pm, cx)? {
        Some("delete") => return Ok(Kept::Deleted),
        Some("replace") => dm.clear(),
        _ => {}
    }
    let retain = match pm.get("$retainKeys") {
        None => None,
        Some(Value::Array(keys)) if keys.iter().all(Value::is_string) => {
            cx.charge(keys.len() + pm.len())?;
            let keys: Vec<&str> = keys.iter().filter_map(Value::as_str).collect();
            let listed: HashSet<&str> = keys.iter().copied().collect();
            if let Some(k) = pm
                .keys()
                .find(|k| !is_directive(k) && !listed.contains(k.as_str()) && !pm[*k].is_null())
            {
                return Err(format!(
                    "{}: `$retainKeys` lists the keys the mapping keeps, and the patch sets `{k}`, which it does not list",
                    cx.here()
                ));
            }
            Some(keys)
        }
        Some(_) => {
            return Err(format!(
                "{}: `$retainKeys` takes a list of key names",
                cx.here()
            ))
        }
    };
    cx.charge(pm.len())?;
    if let Some(keys) = &retain {
        let keys: HashSet<&str> = keys.iter().copied().collect();
        dm.retain(|k, _| keys.contains(k.as_str()));
    }
    // Keys deleted (`null`, a deleted list or map) leave in one pass at the end: removing
    // each in place would shift the map once per key (quadratic on a large map).
    let mut gone: HashSet<&str> = HashSet::new();
    for (k, v) in pm {
        if is_directive(k) {
            continue;
        }
        if k.starts_with('$') {
            return Err(format!(
                "{}: unknown directive `{k}` (strategic patches understand `$patch`, `$retainKeys`, \
                 `$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>`)",
                cx.here()
            ));
        }
        cx.path.push(Step::Field(k.clone()));
        if merge_field(dm, k, v, node, cx)? == Kept::Deleted {
            gone.insert(k.as_str());
        }
        cx.path.pop();
    }
    if !gone.is_empty() {
        dm.retain(|k, _| !gone.contains(k.as_str()));
    }
    for (k, v) in pm {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            cx.path.push(Step::Field(field.to_string()));
            delete_from_primitive_list(dm, field, v, cx)?;
            cx.path.pop();
        }
    }
    for (k, v) in pm {
        if let Some(field) = k.strip_prefix("$setElementOrder/") {
            cx.path.push(Step::Field(field.to_string()));
            let list = list_kind(node, field, cx);
            set_element_order(dm, field, v, list, cx)?;
            cx.path.pop();
        }
    }
    Ok(Kept::Yes)
}

/// How the list in `field` (the current path's last step) merges.
fn list_kind(node: Option<u16>, field: &str, cx: &Cx<'_>) -> List {
    // cx.path ends with `field` here; capstan's rules match the path before it plus it.
    let parent = Cx {
        kind: cx.kind,
        path: cx.path[..cx.path.len().saturating_sub(1)].to_vec(),
        budget: cx.budget,
    };
    match parent.rule(field) {
        Some(Rule::Keys(keys)) => List::Keys(keys, true),
        Some(Rule::Append) => List::Append,
        None => match field_of(node, field).and_then(|f| f.merge) {
            Some([]) => List::Set,
            Some(keys) => List::Keys(keys, false),
            None => List::Replace,
        },
    }
}

fn merge_field(
    dm: &mut Map<String, Value>,
    k: &str,
    v: &Value,
    node: Option<u16>,
    cx: &mut Cx<'_>,
) -> Result<Kept, String> {
    let child = field_of(node, k).and_then(|f| f.node);
    match v {
        Value::Null => return Ok(Kept::Deleted),
        Value::Array(add) => {
            let list = list_kind(node, k, cx);
            let current = match dm.get_mut(k) {
                Some(Value::Array(items)) => std::mem::take(items),
                _ => Vec::new(),
            };
            match merge_list(current, add, list, child, cx)? {
                Some(items) => {
                    if let Some(slot) = dm.get_mut(k) {
                        *slot = Value::Array(items);
                    } else {
                        dm.insert(k.to_string(), Value::Array(items));
                    }
                }
                None => return Ok(Kept::Deleted),
            }
        }
        Value::Object(pm) => {
            let kept = match dm.get_mut(k) {
                Some(Value::Object(existing)) => merge_map(existing, pm, child, cx)?,
                _ => {
                    let mut fresh = Map::new();
                    let kept = merge_map(&mut fresh, pm, child, cx)?;
                    if kept == Kept::Yes {
                        if let Some(slot) = dm.get_mut(k) {
                            *slot = Value::Object(fresh);
                        } else {
                            dm.insert(k.to_string(), Value::Object(fresh));
                        }
                    }
                    kept
                }
            };
            return Ok(kept);
        }
        scalar => {
            if let Some(slot) = dm.get_mut(k) {
                *slot = scalar.clone();
            } else {
                dm.insert(k.to_string(), scalar.clone());
            }
        }
    }
    Ok(Kept::Yes)
}

/// A value from a patch where nothing was: maps merged into an empty map (directives
/// applied, `null`s left out), lists' maps likewise. `None` when it deletes itself.
fn fresh(v: &Value, node: Option<u16>, cx: &mut Cx<'_>) -> Result<Option<Value>, String> {
    match v {
        Value::Object(pm) => {
            let mut m = Map::new();
            Ok((merge_map(&mut m, pm, node, cx)? == Kept::Yes).then_some(Value::Object(m)))
        }
        Value::Array(items) => {
            cx.charge(items.len())?;
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                cx.path.push(Step::Item(i.to_string()));
                if let Some(x) = fresh(item, node, cx)? {
                    out.push(x);
                }
                cx.path.pop();
            }
            Ok(Some(Value::Array(out)))
        }
        other => {
            cx.charge(1)?;
            Ok(Some(other.clone()))
        }
    }
}

/// The list-level directive of a patch list (`{$patch: replace}` as an item of its own),
/// and the other items.
fn list_directive<'a>(
    add: &'a [Value],
    keys: &[&str],
    cx: &Cx<'_>,
) -> Result<(Option<&'a str>, Vec<&'a Value>), String> {
    let mut directive = None;
    let mut rest = Vec::with_capacity(add.len());
    for item in add {
        match item {
            // With merge keys, an item without them; without, an item holding nothing else.
            Value::Object(m)
                if m.contains_key("$patch")
                    && (m.len() == 1
                        || !keys.is_empty() && !keys.iter().any(|k| m.contains_key(*k))) =>
            {
                if m.len() > 1 {
                    return Err(format!(
                        "{}: an item with `$patch` and no `{}` is a directive for the whole list and holds nothing else, found keys {}",
                        cx.here(),
                        keys.first().copied().unwrap_or_default(),
                        m.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
                    ));
                }
                directive = directive_value(m, cx)?;
            }
            other => rest.push(other),
        }
    }
    Ok((directive, rest))
}

fn merge_list(
    current: Vec<Value>,
    add: &[Value],
    list: List,
    child: Option<u16>,
    cx: &mut Cx<'_>,
) -> Result<Option<Vec<Value>>, String> {
    let keys: &[&str] = match list {
        List::Keys(keys, _) => keys,
        _ => &[],
    };
    cx.charge(current.len().saturating_add(add.len()))?;
    let (directive, items) = list_directive(add, keys, cx)?;
    if directive == Some("delete") {
        if !items.is_empty() {
            return Err(format!(
                "{}: `$patch: delete` deletes the whole list; it cannot come with items",
                cx.here()
            ));
        }
        return Ok(None);
    }
    let replace = directive == Some("replace");
    let base = if replace { Vec::new() } else { current };
    match list {
        List::Keys(keys, in_place) => {
            merge_keyed(base, &items, keys, in_place, child, cx).map(Some)
        }
        List::Set => {
            let mut out: Vec<Value> = Vec::new();
            let mut have: HashSet<String> = HashSet::with_capacity(items.len());
            for item in &items {
                if item.is_object() || item.is_array() {
                    return Err(format!(
                        "{}: this list is a set of values (it merges by value), found {} in the patch",
                        cx.here(),
                        if item.is_object() { "a mapping" } else { "a list" }
                    ));
                }
                if have.insert(canonical(item)) {
                    out.push((*item).clone());
                }
            }
            let rest: Vec<Value> = base
                .into_iter()
                .filter(|x| x.is_object() || x.is_array() || !have.contains(&canonical(x)))
                .collect();
            out.extend(rest);
            Ok(Some(out))
        }
        List::Append | List::Replace => {
            if directive == Some("merge") && list == List::Replace {
                return Err(format!(
                    "{}: `$patch: merge` on a list without merge keys: kustomize replaces this list; \
                     give the whole list",
                    cx.here()
                ));
            }
            let mut out = if list == List::Append {
                base
            } else {
                Vec::new()
            };
            for (i, item) in items.iter().enumerate() {
                if let Some(m) = item.as_object().filter(|m| m.contains_key("$patch")) {
                    let d = directive_value(m, cx)?.unwrap_or_default();
                    return Err(format!(
                        "{}: item {i} holds `$patch: {d}`, but no merge key is known for this list \
                         on {} (kustomize replaces it, so does capstan): give the whole list, or use a json patch",
                        cx.here(),
                        cx.kind
                    ));
                }
                cx.path.push(Step::Item(i.to_string()));
                let v = fresh(item, child, cx)?;
                cx.path.pop();
                out.extend(v);
            }
            Ok(Some(out))
        }
    }
}

/// The value of a key field of a list item; a missing `protocol` is `TCP`, its default.
fn key_value(item: &Map<String, Value>, key: &str) -> Value {
    match item.get(key) {
        Some(v) if !v.is_null() => v.clone(),
        _ if key == "protocol" => Value::String("TCP".into()),
        _ => Value::Null,
    }
}

/// A text that two values share exactly when they are equal (`==`): JSON with the keys of
/// maps sorted and `-0.0` written as `0.0`. Lists and sets are indexed by it, so a merge is
/// linear in the lengths of the lists.
fn canonical(v: &Value) -> String {
    fn write(v: &Value, out: &mut String) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    if let Some(x) = m.get(k) {
                        write(x, out);
                    }
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, x) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(x, out);
                }
                out.push(']');
            }
            Value::Number(n) if n.as_f64() == Some(0.0) && n.is_f64() => out.push_str("0.0"),
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(v, &mut out);
    out
}

/// [`canonical`] of a tuple of key values.
fn canonical_tuple(tuple: &[Value]) -> String {
    let mut out = String::new();
    for v in tuple {
        out.push_str(&canonical(v));
        out.push('\u{1f}');
    }
    out
}

fn key_text(keys: &[&str], tuple: &[Value]) -> String {
    keys.iter()
        .zip(tuple)
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| match v {
            Value::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn merge_keyed(
    base: Vec<Value>,
    items: &[&Value],
    keys: &[&str],
    in_place: bool,
    child: Option<u16>,
    cx: &mut Cx<'_>,
) -> Result<Vec<Value>, String> {
    let tuple_of =
        |m: &Map<String, Value>| -> Vec<Value> { keys.iter().map(|k| key_value(m, k)).collect() };
    // The object's items by their keys (the first with a key, as a search from the front
    // would find it); items that are not mappings have none.
    let base_keys: Vec<Option<String>> = base
        .iter()
        .map(|x| x.as_object().map(|m| canonical_tuple(&tuple_of(m))))
        .collect();
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(base.len());
    for (j, k) in base_keys.iter().enumerate() {
        if let Some(k) = k {
            index.entry(k.as_str()).or_insert(j);
        }
    }
    // kustomize's order: with one key, the patch's items first (in the patch's order), then
    // the object's others; with a composite key, the new items first, then the object's
    // items in their order, merged in place. capstan's own lists: the object's items merged
    // in place, then the new items.
    let composite = keys.len() > 1 || in_place;
    let mut appended = Vec::new();
    let mut merged: Vec<Option<Value>> = vec![None; base.len()];
    let mut deleted: HashSet<String> = HashSet::new();
    let mut seen: HashSet<String> = HashSet::with_capacity(items.len());
    let mut out = Vec::with_capacity(base.len() + items.len());
    let mut base: Vec<Option<Value>> = base.into_iter().map(Some).collect();
    for (i, item) in items.iter().enumerate() {
        let Some(m) = item.as_object() else {
            return Err(format!(
                "{} item {i}: expected a mapping with `{}` (this list merges by {}), found {}",
                cx.here(),
                keys[0],
                keys.iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(" and "),
                super::kind_of(item)
            ));
        };
        if m.get(keys[0]).is_none_or(Value::is_null) {
            return Err(format!(
                "{} item {i}: missing `{}`, which this list merges by (kustomize would drop the list's other items)",
                cx.here(),
                keys[0]
            ));
        }
        let tuple = tuple_of(m);
        let label = key_text(keys, &tuple);
        let canon = canonical_tuple(&tuple);
        if !seen.insert(canon.clone()) {
            return Err(format!(
                "{} item {i}: `{label}` appears twice in the patch (kustomize would silently drop the second)",
                cx.here()
            ));
        }
        cx.path.push(Step::Item(label));
        // The object's first item with these keys (each key is seen once in a patch).
        let pos = index
            .get(canon.as_str())
            .copied()
            .filter(|&p| base[p].is_some());
        let result = match (directive_value(m, cx)?, pos) {
            (Some("delete"), _) => {
                deleted.insert(canon);
                None
            }
            (Some("replace"), _) => fresh(item, child, cx)?,
            (_, Some(p)) => {
                let mut target = base[p].take().unwrap_or(Value::Null);
                match &mut target {
                    Value::Object(tm) => {
                        (merge_map(tm, m, child, cx)? == Kept::Yes).then_some(target)
                    }
                    _ => fresh(item, child, cx)?,
                }
            }
            (_, None) => fresh(item, child, cx)?,
        };
        cx.path.pop();
        match pos {
            Some(p) => {
                base[p] = None;
                if composite {
                    merged[p] = result;
                } else {
                    out.extend(result);
                }
            }
            None if in_place => appended.extend(result),
            None => out.extend(result),
        }
    }
    for (j, x) in base.into_iter().enumerate() {
        if let Some(m) = merged[j].take() {
            out.push(m);
            continue;
        }
        let Some(x) = x else { continue };
        if base_keys[j].as_ref().is_some_and(|k| deleted.contains(k)) {
            continue;
        }
        out.push(x);
    }
    out.extend(appended);
    Ok(out)
}

fn delete_from_primitive_list(
    dm: &mut Map<String, Value>,
    field: &str,
    v: &Value,
    cx: &Cx<'_>,
) -> Result<(), String> {
    let Value::Array(gone) = v else {
        return Err(format!(
            "{}: `$deleteFromPrimitiveList/{field}` takes a list of the values to delete",
            cx.here()
        ));
    };
    match dm.get_mut(field) {
        None => Ok(()),
        Some(Value::Array(items)) => {
            if items.iter().any(|x| x.is_object() || x.is_array()) {
                return Err(format!(
                    "{}: `$deleteFromPrimitiveList/{field}` applies to lists of values, and this list holds mappings or lists",
                    cx.here()
                ));
            }
            cx.charge(items.len().saturating_add(gone.len()))?;
            let gone: HashSet<String> = gone.iter().map(canonical).collect();
            items.retain(|x| !gone.contains(&canonical(x)));
            Ok(())
        }
        Some(other) => Err(format!(
            "{}: `$deleteFromPrimitiveList/{field}` needs a list, the object holds {}",
            cx.here(),
            super::kind_of(other)
        )),
    }
}

fn set_element_order(
    dm: &mut Map<String, Value>,
    field: &str,
    v: &Value,
    list: List,
    cx: &Cx<'_>,
) -> Result<(), String> {
    let Value::Array(order) = v else {
        return Err(format!(
            "{}: `$setElementOrder/{field}` takes the list's items (or their merge keys) in the wanted order",
            cx.here()
        ));
    };
    let Some(Value::Array(items)) = dm.get_mut(field) else {
        return Ok(());
    };
    cx.charge(items.len().saturating_add(order.len()))?;
    // Each item's rank is the position of its first mention in `order`: by its merge keys
    // when the list is keyed and the item a mapping, else by value (indexes of `order`).
    let keys = match list {
        List::Keys(keys, _) => Some(keys),
        _ => None,
    };
    let tuple = |keys: &[&str], m: &Map<String, Value>| {
        canonical_tuple(&keys.iter().map(|k| key_value(m, k)).collect::<Vec<_>>())
    };
    let mut by_key: HashMap<String, usize> = HashMap::new();
    let mut by_value: HashMap<String, usize> = HashMap::with_capacity(order.len());
    for (i, o) in order.iter().enumerate() {
        if let (Some(keys), Some(m)) = (keys, o.as_object()) {
            by_key.entry(tuple(keys, m)).or_insert(i);
        }
        by_value.entry(canonical(o)).or_insert(i);
    }
    let rank = |x: &Value| -> usize {
        let found = match (keys, x.as_object()) {
            (Some(keys), Some(m)) => by_key.get(&tuple(keys, m)).copied(),
            _ => by_value.get(&canonical(x)).copied(),
        };
        found.unwrap_or(order.len())
    };
    let mut ranked: Vec<(usize, Value)> = std::mem::take(items)
        .into_iter()
        .map(|x| (rank(&x), x))
        .collect();
    ranked.sort_by_key(|(r, _)| *r);
    *items = ranked.into_iter().map(|(_, x)| x).collect();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w", "finalizers": ["a", "b"]},
            "spec": {"template": {"spec": {"containers": [
                {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}]},
                {"name": "side", "image": "side:1"}]}}}})
    }

    fn run(patch: Value) -> Result<Value, String> {
        let mut doc = deployment();
        apply(&mut doc, &patch, "apps/v1", "Deployment", &Budget::new()).map(|o| {
            if o == Outcome::Deleted {
                Value::Null
            } else {
                doc
            }
        })
    }

    #[test]
    fn the_table_knows_the_everyday_lists() {
        let spec = field_of(root("apps/v1", "Deployment"), "spec").and_then(|f| f.node);
        let template = field_of(spec, "template").and_then(|f| f.node);
        let pod = field_of(template, "spec").and_then(|f| f.node);
        assert_eq!(
            field_of(pod, "containers").and_then(|f| f.merge),
            Some(&["name"][..])
        );
        assert_eq!(field_of(pod, "tolerations").and_then(|f| f.merge), None);
        let container = field_of(pod, "containers").and_then(|f| f.node);
        assert_eq!(
            field_of(container, "ports").and_then(|f| f.merge),
            Some(&["containerPort", "protocol"][..])
        );
        let svc = field_of(root("v1", "Service"), "spec").and_then(|f| f.node);
        assert_eq!(
            field_of(svc, "ports").and_then(|f| f.merge),
            Some(&["port", "protocol"][..])
        );
        let meta = field_of(root("apps/v1", "Deployment"), "metadata").and_then(|f| f.node);
        assert_eq!(
            field_of(meta, "finalizers").and_then(|f| f.merge),
            Some(&[][..])
        );
        assert!(root("example.com/v1", "Widget").is_none());
    }

    /// kyaml reads a schema from a field comment (`# {"$ref": "#/definitions/…PodSpec"}`)
    /// and merges a custom resource's `containers` by `name` (kubectl kustomize v5.5.0, seen
    /// 2026-12-07, README table); capstan reads no comment: the list is replaced, as without it.
    #[test]
    fn an_inline_schema_comment_changes_nothing() {
        let text = |comment: &str| {
            format!("spec:\n  pod:{comment}\n    containers:\n    - name: b\n      image: b:2\n")
        };
        let mut outs = Vec::new();
        for comment in [
            "",
            " # {\"$ref\": \"#/definitions/io.k8s.api.core.v1.PodSpec\"}",
        ] {
            let patch = crate::yaml::parse_one(&text(comment)).unwrap();
            let mut doc = json!({"apiVersion": "example.com/v1", "kind": "Thing",
                "metadata": {"name": "t"},
                "spec": {"pod": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}}});
            apply(&mut doc, &patch, "example.com/v1", "Thing", &Budget::new()).unwrap();
            outs.push(doc);
        }
        assert_eq!(outs[0], outs[1]);
        assert_eq!(
            outs[1]["spec"]["pod"]["containers"],
            json!([{"name": "b", "image": "b:2"}])
        );
    }

    #[test]
    fn directives_are_applied() {
        let out = run(json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "side"}, {"name": "app"}],
            "containers": [{"name": "app", "$retainKeys": ["name", "image"], "image": "app:2"}]}}},
            "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}))
        .unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "side", "image": "side:1"}, {"name": "app", "image": "app:2"}])
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
        assert_eq!(run(json!({"$patch": "delete"})).unwrap(), Value::Null);
    }

    /// Lists of 100,000 items merge in linear time: each of the merges below took minutes
    /// when items were searched for in lists (quadratic), and takes well under a second
    /// (debug build) with the indexes.
    #[test]
    fn long_lists_merge_in_linear_time() {
        const N: usize = 100_000;
        let started = std::time::Instant::now();
        let names = |prefix: &str| -> Vec<Value> {
            (0..N)
                .map(|i| Value::String(format!("{prefix}{i}")))
                .collect()
        };
        // A set: the object's 100,000 finalizers, the patch's 100,000 (half of them new).
        let mut doc = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "finalizers": names("a")}});
        let mut add = names("a")[N / 2..].to_vec();
        add.extend(names("b")[..N / 2].iter().cloned());
        let budget = Budget::new();
        apply(
            &mut doc,
            &json!({"metadata": {"finalizers": add}}),
            "v1",
            "ConfigMap",
            &budget,
        )
        .unwrap();
        let out = doc["metadata"]["finalizers"].as_array().unwrap();
        assert_eq!(out.len(), N + N / 2);
        assert_eq!(out[0], json!(format!("a{}", N / 2)));
        assert_eq!(out[N], json!("a0"));
        // Deleting from it, and ordering it.
        let gone: Vec<Value> = names("a")[..N / 2].to_vec();
        let order: Vec<Value> = out.iter().rev().cloned().collect();
        apply(
            &mut doc,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": gone, "$setElementOrder/finalizers": order}}),
            "v1",
            "ConfigMap",
            &budget,
        )
        .unwrap();
        let out = doc["metadata"]["finalizers"].as_array().unwrap();
        assert_eq!(out.len(), N);
        assert_eq!(out[0], json!(format!("b{}", N / 2 - 1)));
        // A keyed list: 100,000 containers, each merged with the patch's item of its name,
        // ordered by the patch, one deleted; and a map losing 100,000 keys.
        let containers = |image: &str| -> Vec<Value> {
            (0..N)
                .map(|i| json!({"name": format!("c{i}"), "image": image}))
                .collect()
        };
        let mut doc = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w",
            "labels": (0..N).map(|i| (format!("l{i}"), json!("x"))).collect::<Map<String, Value>>()},
            "spec": {"template": {"spec": {"containers": containers("old")}}}});
        let mut patch_items: Vec<Value> = containers("new").into_iter().rev().collect();
        patch_items[0] = json!({"name": format!("c{}", N - 1), "$patch": "delete"});
        let labels: Map<String, Value> = (0..N).map(|i| (format!("l{i}"), Value::Null)).collect();
        apply(
            &mut doc,
            &json!({"metadata": {"labels": labels}, "spec": {"template": {"spec": {"containers": patch_items}}}}),
            "apps/v1",
            "Deployment",
            &budget,
        )
        .unwrap();
        let out = doc["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap();
        assert_eq!(out.len(), N - 1);
        assert_eq!(
            out[0],
            json!({"name": format!("c{}", N - 2), "image": "new"})
        );
        assert_eq!(doc["metadata"]["labels"], json!({}));
        let elapsed = started.elapsed();
        assert!(
            elapsed < std::time::Duration::from_secs(20),
            "merging lists of {N} items took {elapsed:?}"
        );
        assert!(budget.used() < 20 * N as u64, "{} units", budget.used());
    }

    #[test]
    fn the_budget_bounds_a_merge() {
        let mut doc = deployment();
        let items: Vec<Value> = (0..1000).map(|i| json!(format!("f{i}"))).collect();
        let err = apply(
            &mut doc,
            &json!({"metadata": {"finalizers": items}}),
            "apps/v1",
            "Deployment",
            &Budget::with_limit(500),
        )
        .unwrap_err();
        assert!(
            err.starts_with("`metadata.finalizers`: the overlays of this render exceed their budget of 500 units of work"),
            "{err}"
        );
    }

    #[test]
    fn misuse_is_refused_with_the_path() {
        let err = |p: Value| run(p).unwrap_err();
        assert_eq!(
            err(json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "$retainKeys": ["name"], "image": "x"}]}}}})),
            "`spec.template.spec.containers[name=app]`: `$retainKeys` lists the keys the mapping keeps, and the patch sets `image`, which it does not list"
        );
        assert_eq!(
            err(
                json!({"spec": {"template": {"spec": {"containers": [{"name": "a"}, {"name": "a"}]}}}})
            ),
            "`spec.template.spec.containers` item 1: `name=a` appears twice in the patch (kustomize would silently drop the second)"
        );
        assert_eq!(
            err(json!({"spec": {"template": {"spec": {"containers": [{"$patch": "delete"}, {"name": "a"}]}}}})),
            "`spec.template.spec.containers`: `$patch: delete` deletes the whole list; it cannot come with items"
        );
        assert_eq!(
            err(json!({"metadata": {"$deleteFromPrimitiveList/name": ["w"]}})),
            "`metadata.name`: `$deleteFromPrimitiveList/name` needs a list, the object holds a string"
        );
        assert_eq!(
            err(json!({"metadata": {"finalizers": [{"x": 1}]}})),
            "`metadata.finalizers`: this list is a set of values (it merges by value), found a mapping in the patch"
        );
        assert_eq!(
            err(json!({"spec": {"$patch": 1}})),
            "`spec`: unknown directive `$patch: 1` (expected delete, replace or merge)"
        );
    }
}
