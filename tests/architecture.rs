//! The library's shape, as ARCHITECTURE.md states it: modules import only their own domain,
//! the domains below it and the shared vocabulary, with no import cycle; ARCHITECTURE.md's
//! folder table lists the folders in layer order with what each imports; every source file
//! opens with a `//!` line, and none is longer than 1,500 lines before its tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn sources() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    walkdir::WalkDir::new(&root)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "rs"))
        .map(|e| e.into_path())
        .collect()
}

/// The domains, bottom to top, in pipeline order. A module imports only from its own
/// domain, the domains below it, and the shared vocabulary (the top-level modules that are
/// not domains: `yaml`, `digest`, `resource`, `argocd`, `printable`, `procedure`), which
/// imports only itself. `schema` (the CRD validator) is apart: it imports nothing of capstan.
const DOMAINS: [&str; 12] = [
    "model",
    "overlay",
    "inputs",
    "secrets",
    "migration",
    "pipeline",
    "output",
    "review",
    "rehearse",
    "backup",
    "cli",
    "facade",
];

/// The shared vocabulary: top-level modules any module may import.
const VOCABULARY: [&str; 6] = [
    "yaml",
    "digest",
    "printable",
    "resource",
    "argocd",
    "procedure",
];

/// Modules that import nothing of the crate (a crate of their own in all but name).
const STANDALONE: [&str; 1] = ["schema"];

/// The module a file belongs to: `src/inputs/mod.rs` → `inputs`,
/// `src/migration/check/nodes.rs` → `migration::check`, `src/yaml/subset.rs` → `yaml`.
fn module_of(path: &Path) -> String {
    let rel = path
        .strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
        .unwrap();
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    let keep = if DOMAINS.contains(&parts[0].as_str()) {
        2
    } else {
        1
    };
    parts.truncate(keep);
    parts.join("::")
}

/// The layer of a module: 0 for the shared vocabulary, then the domains in order.
fn layer(module: &str) -> usize {
    let domain = module.split("::").next().unwrap();
    DOMAINS
        .iter()
        .position(|d| *d == domain)
        .map_or(0, |i| i + 1)
}

/// The code of a file before its tests, comments dropped.
fn code(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    text[..end]
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// Every module of the library and the modules its code names through `crate::` paths.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let files = sources();
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(f)).collect();
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let m = module_of(f);
        if m == "main" || m == "lib" {
            continue;
        }
        let code = code(&std::fs::read_to_string(f).unwrap());
        let own = deps.entry(m.clone()).or_default();
        let mut rest = code.as_str();
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            // `crate::{a, b::c}`: each top-level name of the group.
            if let Some(group) = rest.strip_prefix('{') {
                let inner = &group[..group.find('}').unwrap_or(group.len())];
                for item in inner.split(',') {
                    let name = ident(item.trim());
                    if !name.is_empty() && name != m && name != "self" {
                        own.insert(name);
                    }
                }
                continue;
            }
            let first = ident(rest);
            let mut name = first.clone();
            if let Some(tail) = rest[first.len()..].strip_prefix("::") {
                let sub = format!("{first}::{}", ident(tail));
                if modules.contains(&sub) {
                    name = sub;
                }
            }
            if !name.is_empty() && name != m {
                own.insert(name);
            }
        }
    }
    deps
}

#[test]
fn modules_import_only_their_own_domain_and_those_below() {
    let deps = imports();
    assert!(deps.len() > 25, "{deps:?}");
    let mut wrong = Vec::new();
    for (m, ds) in &deps {
        for d in ds {
            let (lm, ld) = (layer(m), layer(d));
            if ld > lm || (lm == 0 && ld != 0) {
                wrong.push(format!("{m} (layer {lm}) imports {d} (layer {ld})"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_crd_validator_imports_nothing_of_capstan() {
    let deps = imports();
    for m in STANDALONE {
        let own: BTreeSet<&String> = deps
            .iter()
            .filter(|(k, _)| *k == m || k.starts_with(&format!("{m}::")))
            .flat_map(|(_, ds)| ds)
            .filter(|d| *d != m && !d.starts_with(&format!("{m}::")))
            .collect();
        assert!(deps.contains_key(m), "{m}: no such module");
        assert!(own.is_empty(), "{m} imports {own:?}");
    }
}

#[test]
fn modules_import_each_other_without_cycles() {
    let deps = imports();
    assert!(deps.len() > 25, "{deps:?}");
    // Depth-first search; a module met again on the current path closes a cycle.
    fn visit(
        m: &str,
        deps: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut cycle = path[i..].to_vec();
            cycle.push(m.to_string());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for d in deps.get(m).into_iter().flatten() {
            if let Some(c) = visit(d, deps, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for m in deps.keys() {
        let cycle = visit(m, &deps, &mut Vec::new(), &mut done);
        assert!(
            cycle.is_none(),
            "import cycle: {}",
            cycle.unwrap().join(" → ")
        );
    }
}

#[test]
fn every_source_file_says_what_it_is_for_and_stays_small() {
    for f in sources() {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            text.starts_with("//!"),
            "{}: no `//!` line first",
            f.display()
        );
        let before_tests = text
            .find("#[cfg(test)]")
            .map_or(text.lines().count(), |i| text[..i].lines().count());
        assert!(
            before_tests <= 1500,
            "{}: {before_tests} lines before its tests (at most 1,500)",
            f.display()
        );
    }
}

/// ARCHITECTURE.md's folder table: each row's folder and the folders its "imports" column
/// names, in the table's order.
fn folder_table() -> Vec<(String, BTreeSet<String>)> {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md"))
            .unwrap();
    let start = text
        .find("## The folders")
        .expect("ARCHITECTURE.md: no `## The folders`");
    let mut rows = Vec::new();
    for line in text[start..].lines().skip(1) {
        if line.starts_with("## ") {
            break;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 5 || !cells[1].starts_with('`') {
            continue;
        }
        let names = |cell: &str| -> BTreeSet<String> {
            cell.split(',')
                .map(|c| c.trim().trim_matches('`').to_string())
                .filter(|c| !c.is_empty() && c != "—")
                .collect()
        };
        let folder = cells[1].trim_matches('`').to_string();
        rows.push((folder, names(cells[cells.len() - 2])));
    }
    rows
}

#[test]
fn the_folder_table_of_architecture_md_is_what_the_code_imports() {
    let deps = imports();
    // What each top-level module's files import, outside itself and the vocabulary.
    let mut real: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, ds) in &deps {
        let top = m.split("::").next().unwrap().to_string();
        let own = real.entry(top.clone()).or_default();
        for d in ds {
            let d = d.split("::").next().unwrap();
            if d != top && !VOCABULARY.contains(&d) {
                own.insert(d.to_string());
            }
        }
    }
    let table = folder_table();
    let listed: BTreeMap<String, BTreeSet<String>> = table.iter().cloned().collect();
    assert_eq!(
        listed.len(),
        table.len(),
        "a folder listed twice: {table:?}"
    );
    let (mut missing, mut wrong) = (Vec::new(), Vec::new());
    for (m, ds) in &real {
        match listed.get(m) {
            None => missing.push(m.clone()),
            Some(l) if l != ds => wrong.push(format!(
                "{m}: the table says {l:?}, the code imports {ds:?}"
            )),
            Some(_) => {}
        }
    }
    let extra: Vec<&String> = listed.keys().filter(|k| !real.contains_key(*k)).collect();
    assert!(
        missing.is_empty() && wrong.is_empty() && extra.is_empty(),
        "ARCHITECTURE.md's folder table is not the code:\nnot listed: {missing:?}\nno such module: {extra:?}\n{}",
        wrong.join("\n")
    );
    // The domains appear in layer order, after the vocabulary and `schema`.
    let domains: Vec<&str> = table
        .iter()
        .map(|(f, _)| f.as_str())
        .filter(|f| DOMAINS.contains(f))
        .collect();
    assert_eq!(
        domains, DOMAINS,
        "the table's domains are not in layer order"
    );
}
