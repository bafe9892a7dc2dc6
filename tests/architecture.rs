//! The library's shape, as ARCHITECTURE.md states it: no import cycle between the crate's
//! top-level modules, every source file opening with a `//!` line, and none longer than
//! 1,500 lines before its tests.

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

/// The top-level module a file belongs to (`src/check/nodes.rs` → `check`).
fn module_of(path: &Path) -> String {
    let rel = path
        .strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
        .unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
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

#[test]
fn top_level_modules_import_each_other_without_cycles() {
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in sources() {
        let m = module_of(&f);
        if m == "main" || m == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let code = code(&text);
        let mut rest = code.as_str();
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && name != m {
                deps.entry(m.clone()).or_default().insert(name);
            }
        }
    }
    assert!(deps.len() > 20, "{deps:?}");
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
