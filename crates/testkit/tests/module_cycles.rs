//! No import cycle between the modules of one crate (docs/design.md, "The layers"): a module
//! that holds what every step shares is a leaf, the pipeline imports the steps, and no step
//! imports the pipeline back. Read from the source: every `crate::…` and `super::…` path
//! outside comments and `#[cfg(test)] mod tests`, resolved to the longest module it names. A
//! module using its own ancestor (a submodule reading its parent's types) is the module tree,
//! not a cycle, and is not counted.
//!
//! `MODULE_CYCLES_ROOT=<a checkout>` scans another tree (an older commit, say) instead of this
//! workspace.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every `.rs` file under `src`, by module path ("" for the crate root).
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(src).expect("under src").with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|l| l == "mod") {
                parts.pop();
            }
            if parts == ["lib"] || parts == ["main"] {
                parts.clear();
            }
            out.insert(parts.join("::"), p);
        }
    }
    out
}

/// The source without comments and without its `#[cfg(test)] mod tests` block (the last item
/// of a file by this workspace's convention).
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a `prefix` ("crate" or "super") leads: `crate::a::b` gives `a::b`, and
/// `crate::{a::b, c::{d, e}}` gives `a::b` and `c` (a brace group stops at its first level).
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let pat = format!("{prefix}::");
    let mut out = vec![];
    let mut from = 0;
    while let Some(i) = code[from..].find(&pat) {
        let at = from + i;
        from = at + pat.len();
        if at > 0 && code[..at].chars().next_back().is_some_and(ident) {
            continue;
        }
        let rest = &code[from..];
        let mut path = vec![];
        let mut r = rest;
        loop {
            let n = r.find(|c: char| !ident(c)).unwrap_or(r.len());
            if n == 0 {
                break;
            }
            path.push(r[..n].to_string());
            r = &r[n..];
            if let Some(next) = r.strip_prefix("::") {
                r = next;
            } else {
                break;
            }
        }
        if r.starts_with('{') {
            // A group: each element's own path, first level only.
            let end = matching_brace(r).unwrap_or(r.len());
            for element in split_top(&r[1..end]) {
                let mut p = path.clone();
                p.extend(
                    element
                        .split("::")
                        .map(str::trim)
                        .take_while(|s| !s.is_empty() && s.chars().all(ident))
                        .map(String::from),
                );
                out.push(p);
            }
        } else if !path.is_empty() {
            out.push(path);
        }
    }
    out
}

fn matching_brace(s: &str) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Split a brace group's inside at its top-level commas.
fn split_top(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0, 0, vec![]);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter().filter(|e| !e.trim().is_empty()).collect()
}

/// The longest module `path` names, if any.
fn resolve(mods: &BTreeMap<String, String>, path: &[String]) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|cand| mods.contains_key(cand))
}

fn is_ancestor(a: &str, of: &str) -> bool {
    a.is_empty() || of.starts_with(&format!("{a}::"))
}

/// Each module's imports of other modules of its crate, from `(module, source)` pairs.
fn graph(sources: &BTreeMap<String, String>) -> Graph {
    let mut g = Graph::new();
    for (m, text) in sources {
        let code = code(text);
        let mut deps = BTreeSet::new();
        for p in paths_after(&code, "crate") {
            deps.extend(resolve(sources, &p));
        }
        let parent: Vec<String> = match m.rsplit_once("::") {
            Some((p, _)) => p.split("::").map(String::from).collect(),
            None => vec![],
        };
        for p in paths_after(&code, "super") {
            let mut full = parent.clone();
            full.extend(p);
            deps.extend(resolve(sources, &full));
        }
        deps.retain(|d| d != m && !is_ancestor(d, m) && !is_ancestor(m, d));
        g.insert(m.clone(), deps);
    }
    g
}

/// The strongly connected components of more than one module (Tarjan).
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = vec![];
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: vec![],
        on: BTreeSet::new(),
        out: vec![],
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn read(src: &Path) -> BTreeMap<String, String> {
    modules(src)
        .into_iter()
        .map(|(m, p)| {
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
            (m, text)
        })
        .collect()
}

fn src(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(m, t)| (m.to_string(), t.to_string()))
        .collect()
}

#[test]
fn no_crate_has_a_module_cycle() {
    let root = std::env::var_os("MODULE_CYCLES_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    let crates = root.join("crates");
    let mut found = vec![];
    let mut scanned = 0;
    for e in std::fs::read_dir(&crates).expect("crates/").flatten() {
        let s = e.path().join("src");
        if !s.is_dir() {
            continue;
        }
        scanned += 1;
        let name = e.file_name().to_string_lossy().into_owned();
        for c in cycles(&graph(&read(&s))) {
            found.push(format!("{name}: {}", c.join(" <-> ")));
        }
    }
    assert!(scanned >= 5, "found only {scanned} crates under {crates:?}");
    assert!(
        found.is_empty(),
        "module cycles (each line one set of modules that import each other, directly or round a loop):\n{}",
        found.join("\n")
    );
}

#[test]
fn a_cycle_through_a_brace_group_or_super_is_found() {
    let g = graph(&src(&[
        ("", "mod a; mod b; mod c;"),
        ("a", "use crate::{b, c::Thing};"),
        ("b", "use super::a::Engine;"),
        ("c", "pub struct Thing;"),
    ]));
    assert_eq!(cycles(&g), vec![vec!["a".to_string(), "b".to_string()]]);
}

#[test]
fn a_leaf_context_breaks_the_cycle_and_comments_and_tests_do_not_count() {
    let g = graph(&src(&[
        ("context", "pub struct Engine;"),
        (
            "step",
            "use crate::context::Engine; // crate::pipeline runs this",
        ),
        (
            "pipeline",
            "use crate::{context::Engine, step};\n#[cfg(test)]\nmod tests {\n    use crate::step;\n}",
        ),
        ("plan", "pub struct StepFail;"),
        (
            "plan::leg",
            "use super::StepFail; use crate::plan::StepFail as S;",
        ),
    ]));
    assert!(cycles(&g).is_empty(), "{g:?}");
    assert_eq!(
        g["pipeline"],
        BTreeSet::from(["context".to_string(), "step".to_string()])
    );
    // A submodule reading its parent is the module tree, not an edge.
    assert!(g["plan::leg"].is_empty());
}
