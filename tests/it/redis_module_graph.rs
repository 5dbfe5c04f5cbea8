//! The crate's modules import one way: among the children of any module of `src/` (the crate
//! root's included), no cycle, except the circles [`ALLOWED`] names with their reason. The Redis
//! store (`src/store/redis/`) is checked on its own too, with no exception. A child's use of an
//! item of its parent's own file (a re-export included) counts as an edge to the parent, and the
//! parent's use of a child as an edge from it, so neither a circle between siblings nor one back
//! up through the parent passes. `src/main.rs` is the binary, a crate of its own, and is not read.
//!
//! What counts as a use: every path that starts at `crate` (below the checked folder), `super` or
//! `self`, or at a child module's name in its parent's file, in code (comments and string literals
//! are skipped; `#[cfg(test)]` modules count, visibility paths such as `pub(in ...)` do not).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A module path below the checked root (`[]` is the root itself).
type Module = Vec<String>;

/// The name the graphs give the parent's own file among its children (`mod.rs`, `lib.rs` or
/// `server.rs` beside `server/`).
const PARENT: &str = "(mod.rs)";

/// For each module with children: the edges between its children (and [`PARENT`]).
type Graphs = BTreeMap<Module, BTreeMap<String, BTreeSet<String>>>;

/// The `.rs` files under `root` and the module each one is (`lib.rs` at the root is the root
/// module; `main.rs` at the root, the binary, is left out).
fn modules(root: &Path) -> Vec<(PathBuf, Module)> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).expect("a readable directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let relative = path.strip_prefix(root).expect("under the root");
                let mut module: Module = relative
                    .with_extension("")
                    .iter()
                    .map(|part| part.to_string_lossy().into_owned())
                    .collect();
                if module == ["main"] {
                    continue;
                }
                if module.last().is_some_and(|last| last == "mod") || module == ["lib"] {
                    module.pop();
                }
                found.push((path, module));
            }
        }
    }
    found.sort();
    found
}

/// `source` with its comments, string literals and character literals blanked out.
fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && (i == 0 || !ident(chars[i - 1]) || chars[i - 1] == 'b')
        {
            // A raw string: r"...", r#"..."#, br#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push(' ');
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push(' ');
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}'), else a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push(' ');
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push(' ');
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Identifiers, `::` and single punctuation characters.
fn tokens(code: &str) -> Vec<String> {
    let chars: Vec<char> = code.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push("::".into());
            i += 2;
        } else {
            tokens.push(c.to_string());
            i += 1;
        }
    }
    tokens
}

/// The paths of the use tree or path starting at `tokens[i]`, each as its segments, and the
/// index after it.
fn paths_at(tokens: &[String], mut i: usize, prefix: &[String]) -> (Vec<Vec<String>>, usize) {
    let mut path = prefix.to_vec();
    loop {
        match tokens.get(i).map(String::as_str) {
            Some("{") => {
                let mut found = Vec::new();
                i += 1;
                while i < tokens.len() && tokens[i] != "}" {
                    if tokens[i] == "," {
                        i += 1;
                        continue;
                    }
                    let (inner, next) = paths_at(tokens, i, &path);
                    found.extend(inner);
                    i = next.max(i + 1);
                }
                return (found, i + 1);
            }
            Some("*") => return (vec![path], i + 1),
            Some("self") if !path.is_empty() && tokens.get(i + 1).is_none_or(|t| t != "::") => {
                return (vec![path], i + 1)
            }
            Some(segment) if segment.chars().all(|c| c.is_alphanumeric() || c == '_') => {
                path.push(segment.to_owned());
                i += 1;
                if tokens.get(i).is_some_and(|t| t == "::") {
                    i += 1;
                } else {
                    return (vec![path], i);
                }
            }
            _ => return (vec![path], i),
        }
    }
}

/// The module path (below the root) that `path`, written in module `at`, names, or `None` when
/// it leaves the root, the folder of the crate's module `within` (`[]`: the whole crate).
fn resolve(path: &[String], at: &[String], within: &[&str]) -> Option<Vec<String>> {
    let mut segments = path.iter().peekable();
    let mut resolved: Vec<String> = match segments.peek().map(|s| s.as_str()) {
        Some("crate") => {
            let head: Vec<&str> = path
                .iter()
                .skip(1)
                .take(within.len())
                .map(String::as_str)
                .collect();
            if head != within {
                return None;
            }
            segments.nth(within.len());
            Vec::new()
        }
        Some("self") => {
            segments.next();
            at.to_vec()
        }
        Some("super") => at.to_vec(),
        _ => at.to_vec(),
    };
    for segment in segments {
        if segment == "super" {
            resolved.pop()?;
        } else {
            resolved.push(segment.clone());
        }
    }
    Some(resolved)
}

/// Every module of the root each file's code names: (the file's module, the module named).
fn uses(root: &Path, within: &[&str]) -> (BTreeSet<Module>, Vec<(Module, Module)>) {
    let files = modules(root);
    let known: BTreeSet<Module> = files.iter().map(|(_, module)| module.clone()).collect();
    let children = |module: &[String]| -> BTreeSet<String> {
        known
            .iter()
            .filter(|other| other.len() == module.len() + 1 && other.starts_with(module))
            .map(|other| other[module.len()].clone())
            .collect()
    };
    let mut found = Vec::new();
    for (path, module) in &files {
        let source = fs::read_to_string(path).expect("a readable source file");
        let tokens = tokens(&code_only(&source));
        // Inline modules (`mod tests { ... }`): their names and the brace depth they close at.
        let mut inline: Vec<(String, usize)> = Vec::new();
        let mut depth = 0;
        let mut i = 0;
        while i < tokens.len() {
            let token = tokens[i].as_str();
            match token {
                "{" => {
                    depth += 1;
                    i += 1;
                    continue;
                }
                "}" => {
                    if inline.last().is_some_and(|(_, open)| *open == depth) {
                        inline.pop();
                    }
                    depth -= 1;
                    i += 1;
                    continue;
                }
                "mod" if tokens.get(i + 2).is_some_and(|t| t == "{") => {
                    inline.push((tokens[i + 1].clone(), depth + 1));
                    i += 2;
                    continue;
                }
                _ => {}
            }
            let at: Vec<String> = module
                .iter()
                .cloned()
                .chain(inline.iter().map(|(name, _)| name.clone()))
                .collect();
            let starts_path = matches!(token, "crate" | "super" | "self")
                || (inline.is_empty() && children(module).contains(token));
            let continued = i > 0 && (tokens[i - 1] == "::" || tokens[i - 1] == "in");
            if !starts_path || continued || tokens.get(i + 1).is_none_or(|t| t != "::") {
                i += 1;
                continue;
            }
            let (paths, next) = paths_at(&tokens, i, &[]);
            for path in paths {
                let Some(resolved) = resolve(&path, &at, within) else {
                    continue;
                };
                let target = (0..=resolved.len())
                    .rev()
                    .map(|len| resolved[..len].to_vec())
                    .find(|prefix| known.contains(prefix))
                    .unwrap_or_default();
                found.push((module.clone(), target));
            }
            i = next.max(i + 1);
        }
    }
    (known, found)
}

/// The import graphs between the children of each module under `root`, the folder of the
/// crate's module `within`.
fn graphs(root: &Path, within: &[&str]) -> Graphs {
    let (known, uses) = uses(root, within);
    let mut graphs = Graphs::new();
    for module in &known {
        if let Some((_, parent)) = module.split_last() {
            graphs
                .entry(parent.to_vec())
                .or_default()
                .entry(module[parent.len()].clone())
                .or_default();
        }
    }
    for (from, to) in uses {
        if from == to {
            continue;
        }
        let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
        let node = |module: &Module| match module.get(common) {
            Some(child) => child.clone(),
            None => PARENT.to_owned(),
        };
        graphs
            .entry(from[..common].to_vec())
            .or_default()
            .entry(node(&from))
            .or_default()
            .insert(node(&to));
    }
    graphs
}

/// The nodes of `graph` reachable from `start` (itself included only through a cycle).
fn reachable(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<&str> = vec![start];
    while let Some(node) = todo.pop() {
        for next in graph.get(node).into_iter().flatten() {
            if seen.insert(next.clone()) {
                todo.push(next);
            }
        }
    }
    seen
}

/// The circles of each module's graph under `root`, the folder of the crate's module `within`:
/// every set of children (with [`PARENT`]) that reach each other, as `module: a, b, c`.
fn cycles(root: &Path, within: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (module, graph) in graphs(root, within) {
        let mut placed = BTreeSet::new();
        for node in graph.keys() {
            if placed.contains(node) {
                continue;
            }
            let from = reachable(&graph, node);
            if !from.contains(node) {
                continue;
            }
            let circle: Vec<String> = from
                .iter()
                .filter(|other| reachable(&graph, other).contains(node))
                .cloned()
                .collect();
            placed.extend(circle.iter().cloned());
            found.push(format!("{}: {}", name(within, &module), circle.join(", ")));
        }
    }
    found
}

/// `module` of the folder of the crate's module `within`, as the crate names it (`crate` for the
/// root).
fn name(within: &[&str], module: &[String]) -> String {
    let path: Vec<&str> = within
        .iter()
        .copied()
        .chain(module.iter().map(String::as_str))
        .collect();
    if path.is_empty() {
        "crate".to_owned()
    } else {
        path.join("::")
    }
}

/// Prints the graphs of the folder of the crate's module `within` and answers its circles.
fn checked(within: &[&str]) -> Vec<String> {
    let root = within.iter().fold(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        |dir, part| dir.join(part),
    );
    for (module, graph) in graphs(&root, within) {
        println!("{}:", name(within, &module));
        for (from, to) in graph {
            let to: Vec<String> = to.into_iter().collect();
            println!("  {from} -> {}", to.join(", "));
        }
    }
    cycles(&root, within)
}

/// The circles between modules of `src/` that stay, each with why. A circle closed only by unit
/// tests (`#[cfg(test)]` code building its input with a higher layer) is named as such.
const ALLOWED: &[(&str, &str)] = &[
    (
        "crate: config, limiter",
        "test code only: the unit tests of limiter::quota write their rules as YAML and load them \
         with config::parse_domain; limiter's own code uses no config",
    ),
    (
        "config: (mod.rs), schema",
        "test code only: schema's unit tests load whole files through the config::Loader of \
         config/mod.rs, which runs schema",
    ),
    (
        "service::statsd_exporter: (mod.rs), mapper, text",
        "test code only: mapper's unit tests (mapper/tests.rs) load the built-in mapping through \
         statsd_exporter::load_mapper, which builds a mapper",
    ),
    (
        "limiter::algorithm: (mod.rs), fixed_window, gcra, sliding_window_counter, sliding_window_log, token_bucket",
        "algorithm/mod.rs is the dispatch over the five algorithms (State, evaluate, commit, \
         refund) and holds the Verdict and window arithmetic they all return and use; their unit \
         tests decide through that dispatch (testkit)",
    ),
    (
        "store: (mod.rs), connecting, deny_cache, failure_health, memory, quota_demands, redis",
        "store/mod.rs is the Store contract (the trait, Check, StoreError, the lease types) that \
         every store and decorator implements, and names those stores for the rest of the crate",
    ),
];

#[test]
fn the_redis_store_imports_run_one_way() {
    let cycles = checked(&["store", "redis"]);
    assert!(
        cycles.is_empty(),
        "modules that import each other: {cycles:#?}"
    );
}

#[test]
fn the_crate_imports_run_one_way() {
    let cycles = checked(&[]);
    let unexplained: Vec<&String> = cycles
        .iter()
        .filter(|cycle| !ALLOWED.iter().any(|(allowed, _)| allowed == cycle))
        .collect();
    assert!(
        unexplained.is_empty(),
        "modules that import each other: {unexplained:#?}"
    );
    let gone: Vec<&str> = ALLOWED
        .iter()
        .map(|(allowed, _)| *allowed)
        .filter(|allowed| !cycles.iter().any(|cycle| cycle == allowed))
        .collect();
    assert!(
        gone.is_empty(),
        "circles allowed that no longer exist (take them out of ALLOWED): {gone:?}"
    );
}

/// Writes `files` (path, source) under a new temporary directory.
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (path, source) in files {
        let path = dir.path().join(path);
        fs::create_dir_all(path.parent().expect("a parent")).expect("a directory");
        fs::write(path, source).expect("a written file");
    }
    dir
}

/// The folder the trees below stand for.
const REDIS: &[&str] = &["store", "redis"];

#[test]
fn the_check_finds_a_cycle_between_siblings_and_one_back_up() {
    let siblings = tree(&[
        ("mod.rs", "mod a;\nmod b;\n"),
        ("a.rs", "use super::b::B;\npub struct A;\n"),
        (
            "b/mod.rs",
            "mod c;\npub struct B;\nfn f() { let _ = crate::store::redis::a::A; }\n",
        ),
        (
            "b/c.rs",
            "// use super::super::a::A;\nconst X: &str = \"super::a\";\n",
        ),
    ]);
    assert_eq!(cycles(siblings.path(), REDIS), ["store::redis: a, b"]);

    let up = tree(&[
        ("mod.rs", "mod a;\nmod b;\npub use self::a::A;\n"),
        ("a.rs", "pub struct A;\n"),
        (
            "b.rs",
            "use super::A;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
        ),
    ]);
    assert!(
        cycles(up.path(), REDIS).is_empty(),
        "b -> (mod.rs) -> a is one way"
    );
    let back = tree(&[
        ("mod.rs", "mod a;\nmod b;\npub use self::a::A;\n"),
        (
            "a.rs",
            "pub(in crate::store::redis) struct A(super::b::B);\n",
        ),
        ("b.rs", "pub struct B;\nfn f() -> super::A { todo!() }\n"),
    ]);
    assert_eq!(cycles(back.path(), REDIS), ["store::redis: (mod.rs), a, b"]);

    let clean = tree(&[
        ("mod.rs", "mod a;\nmod b;\n"),
        (
            "a.rs",
            "pub(in crate::store::redis) struct A;\npub(super) fn f() {}\n",
        ),
        ("b.rs", "use super::a::{self, A};\nfn g() { a::f(); }\n"),
    ]);
    assert!(cycles(clean.path(), REDIS).is_empty());
}
