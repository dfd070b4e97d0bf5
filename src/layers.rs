//! The check that keeps the modules' imports pointing one way: a test that
//! reads every file of `src/`, collects what each module names through
//! `crate::…` and `super::…` paths (comments and unit tests aside), and
//! fails on any cycle between modules, naming it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path (`store::keys`) → its source text, for every file of `dir`.
fn modules(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&path) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(dir).unwrap_or(&path).with_extension("");
                let mut parts: Vec<String> = relative
                    .iter()
                    .map(|p| p.to_string_lossy().into_owned())
                    .collect();
                if parts.last().is_some_and(|p| p == "mod") {
                    parts.pop();
                }
                // The binary reaches the library as `votegraph::`, never `crate::`.
                if parts == ["main"] {
                    continue;
                }
                if parts == ["lib"] {
                    parts.clear();
                }
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                out.insert(parts.join("::"), text);
            }
        }
    }
    out
}

/// `text` without its comments and without its unit tests (which may
/// reach anywhere).
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules `module` (a file) names.
fn edges(module: &str, text: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    let here: Vec<&str> = module.split("::").filter(|p| !p.is_empty()).collect();
    let parent = &here[..here.len().saturating_sub(1)];
    let mut out = BTreeSet::new();
    for path in paths(&code(text), parent) {
        // The deepest prefix that is a module (a file).
        for len in (1..=path.len()).rev() {
            let candidate = path[..len].join("::");
            if known.contains(&candidate) {
                let inside = candidate == module || module.starts_with(&format!("{candidate}::"));
                if !inside {
                    out.insert(candidate);
                }
                break;
            }
        }
    }
    out
}

/// Every path `code` names from the crate's root: `use crate::a::{b,
/// c::d};`, plain `crate::a::b` paths, and `super::` ones from `parent`.
fn paths(code: &str, parent: &[&str]) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for (start, root) in code
        .match_indices("crate::")
        .map(|(i, _)| (i + 7, Vec::<String>::new()))
        .chain(
            code.match_indices("super::")
                .map(|(i, _)| (i + 7, parent.iter().map(|s| s.to_string()).collect())),
        )
    {
        if start >= 7 {
            let before = code[..start - 7].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
        }
        path_at(&code[start..], root, &mut paths);
    }
    paths
}

/// The path (or, for a `{…}` group, the paths) that `rest` continues
/// from `prefix`, pushed onto `paths`.
fn path_at(rest: &str, mut prefix: Vec<String>, paths: &mut Vec<Vec<String>>) {
    let mut segment = String::new();
    let mut chars = rest.chars().peekable();
    loop {
        match chars.next() {
            Some(c) if c.is_alphanumeric() || c == '_' => segment.push(c),
            Some(':') if chars.peek() == Some(&':') => {
                chars.next();
                if segment == "super" {
                    prefix.pop();
                } else if !segment.is_empty() {
                    prefix.push(std::mem::take(&mut segment));
                }
                segment.clear();
                if chars.peek() == Some(&'{') {
                    chars.next();
                    let group: String = chars.by_ref().take_while(|&c| c != '}').collect();
                    for item in group.split(',') {
                        let item = item.trim().split(" as ").next().unwrap_or("").trim();
                        let mut path = prefix.clone();
                        if !item.is_empty() && item != "self" {
                            path.extend(item.split("::").map(str::to_owned));
                        }
                        paths.push(path);
                    }
                    return;
                }
            }
            _ => {
                if !segment.is_empty() {
                    prefix.push(segment);
                }
                paths.push(prefix);
                return;
            }
        }
    }
}

/// The cycles of `graph`: each module it reaches back, with every module
/// on the way (its strongly connected components of more than one module).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut pending: Vec<&String> = graph[from].iter().collect();
        while let Some(module) = pending.pop() {
            if seen.insert(module) {
                pending.extend(&graph[module]);
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<&String>> =
        graph.keys().map(|module| (module, reach(module))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for (module, from_here) in &reached {
        if from_here.contains(module) && !out.iter().any(|cycle| cycle.contains(module)) {
            let back = from_here
                .iter()
                .filter(|other| reached[*other].contains(module));
            out.push(back.map(|other| other.to_string()).collect());
        }
    }
    out
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = modules(&src);
    assert!(modules.len() > 20, "read {} modules", modules.len());
    let known: BTreeSet<String> = modules.keys().cloned().collect();
    let graph: BTreeMap<String, BTreeSet<String>> = modules
        .iter()
        .map(|(name, text)| (name.clone(), edges(name, text, &known)))
        .collect();
    let found = cycles(&graph);
    let shown: Vec<String> = found
        .iter()
        .map(|cycle| {
            let pairs: Vec<String> = cycle
                .iter()
                .flat_map(|m| {
                    graph[m]
                        .iter()
                        .filter(|t| cycle.contains(t))
                        .map(move |t| format!("{m} -> {t}"))
                })
                .collect();
            format!("{} ({})", cycle.join(", "), pairs.join("; "))
        })
        .collect();
    assert!(
        found.is_empty(),
        "import cycles between src/ modules:\n{}",
        shown.join("\n")
    );
}

#[test]
fn the_check_sees_a_cycle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(m, to)| (m.to_owned(), to.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(cycles(&graph), vec![vec!["a", "b", "c"]]);
    let known: BTreeSet<String> = ["store", "store::keys", "domain", "error"]
        .map(str::to_owned)
        .into();
    let text = "use crate::domain::{Name, Other};\nuse super::keys; // crate::error in a comment\nfn f() { crate::error::x(); }";
    let found = edges("store::articles", text, &known);
    assert_eq!(
        found,
        ["domain", "error", "store::keys"].map(str::to_owned).into()
    );
}
