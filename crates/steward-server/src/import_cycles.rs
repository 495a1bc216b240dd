//! A test that no two source files of this crate import each other in a circle, however long.
//!
//! The graph has one node per file (`lib.rs` is `crate`, `a/b.rs` and `a/b/mod.rs` are
//! `crate::a::b`) and an edge from a file to every file a path in it names: paths that start with
//! `crate::`, `super::` or `self::`, in `use` declarations and in code alike, braces expanded
//! (`use super::{a, b::{c}}`). A path is resolved to the longest prefix that is a file, so
//! `crate::api::invoke::run` names `api/invoke.rs` and `crate::api::JSON_BODY_BYTES_MAX` names
//! `api/mod.rs`. A `super` inside an inline module (`mod tests { use super::*; }`) climbs that
//! module first. Comments and string literals are skipped. A parent's bare use of its own child
//! module (`invoke::invoke` in `api/mod.rs`, where `mod invoke;` is declared) is not an edge: a
//! parent owns its children, and the rule is about files reaching sideways or upwards.
//!
//! The front ends (`api/`, `mcp/`, `console/`) import the application layer (`app/`), never the
//! other way round; this test holds the general rule, which that one is an instance of.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One file: its module path (`["api", "invoke"]`) and its source.
struct SourceFile {
    module: Vec<String>,
    source: String,
}

fn source_files(root: &Path) -> Vec<SourceFile> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("a readable source directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(SourceFile {
                    module: module_of(root, &path),
                    source: std::fs::read_to_string(&path).expect("a readable source file"),
                });
            }
        }
    }
    files.sort_by(|a, b| a.module.cmp(&b.module));
    files
}

fn module_of(root: &Path, path: &Path) -> Vec<String> {
    let relative: PathBuf = path.strip_prefix(root).expect("under the root").into();
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

/// The source without comments, string and character literals (each replaced by a space).
fn code_only(source: &str) -> String {
    let bytes = source.as_bytes();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &source[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            i += rest.find("*/").map_or(rest.len(), |end| end + 2);
        } else if let Some(hashes) = raw_string_hashes(rest) {
            let open = 2 + hashes; // r, the hashes, the quote
            let close = format!("\"{}", "#".repeat(hashes));
            i += open
                + rest[open..]
                    .find(&close)
                    .map_or(rest.len() - open, |e| e + close.len());
        } else if rest.starts_with('"') {
            let mut j = 1;
            while j < rest.len() && rest.as_bytes()[j] != b'"' {
                j += if rest.as_bytes()[j] == b'\\' { 2 } else { 1 };
            }
            i += (j + 1).min(rest.len());
        } else if let Some(len) = char_literal(rest) {
            i += len;
        } else {
            let c = rest.chars().next().expect("not at the end");
            out.push(c);
            i += c.len_utf8();
            continue;
        }
        out.push(' ');
    }
    out
}

/// The number of `#` of a raw string starting here (`r"`, `r#"`, `br"`), if one does.
fn raw_string_hashes(rest: &str) -> Option<usize> {
    let rest = rest.strip_prefix('b').unwrap_or(rest);
    let after = rest.strip_prefix('r')?;
    let hashes = after.bytes().take_while(|b| *b == b'#').count();
    after[hashes..].starts_with('"').then_some(hashes)
}

/// The length of a character literal starting here (`'a'`, `'\n'`, `'"'`), not a lifetime.
fn char_literal(rest: &str) -> Option<usize> {
    let body = rest.strip_prefix('\'')?;
    if let Some(escaped) = body.strip_prefix('\\') {
        return escaped.find('\'').map(|end| end + 3);
    }
    let c = body.chars().next()?;
    body[c.len_utf8()..]
        .starts_with('\'')
        .then_some(c.len_utf8() + 2)
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Other,
}

fn tokens(code: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut chars = code.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if !(d.is_alphanumeric() || d == '_') {
                    break;
                }
                end = j + d.len_utf8();
                chars.next();
            }
            out.push(Token::Ident(code[i..end].to_string()));
        } else if c == ':' && chars.peek().is_some_and(|&(_, d)| d == ':') {
            chars.next();
            out.push(Token::PathSep);
        } else if c == '{' {
            out.push(Token::Open);
        } else if c == '}' {
            out.push(Token::Close);
        } else if c == ',' {
            out.push(Token::Comma);
        } else if !c.is_whitespace() {
            out.push(Token::Other);
        }
    }
    out
}

/// Every path of `tokens` that starts with `crate`, `super` or `self`, braces expanded, each
/// with the number of inline modules it is written in.
fn paths(tokens: &[Token]) -> Vec<(usize, Vec<String>)> {
    let mut found = Vec::new();
    // The brace depths at which inline modules were opened.
    let mut inline_modules: Vec<usize> = Vec::new();
    let mut depth: usize = 0;
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            Token::Open => depth += 1,
            Token::Close => {
                depth = depth.saturating_sub(1);
                if inline_modules.last() == Some(&depth) {
                    inline_modules.pop();
                }
            }
            Token::Ident(word) if word == "mod" => {
                if let (Some(Token::Ident(_)), Some(Token::Open)) =
                    (tokens.get(i + 1), tokens.get(i + 2))
                {
                    inline_modules.push(depth);
                }
            }
            Token::Ident(word)
                if matches!(word.as_str(), "crate" | "super" | "self")
                    && tokens.get(i + 1) == Some(&Token::PathSep)
                    && (i == 0 || tokens[i - 1] != Token::PathSep) =>
            {
                let mut expanded = Vec::new();
                i = path_tree(tokens, i, Vec::new(), &mut expanded);
                found.extend(expanded.into_iter().map(|p| (inline_modules.len(), p)));
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// Reads one path tree at `i` (`a::b::{c, d::e}`) under `prefix`; returns the index after it.
fn path_tree(
    tokens: &[Token],
    mut i: usize,
    prefix: Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    let mut path = prefix;
    loop {
        match tokens.get(i) {
            Some(Token::Ident(word)) => {
                path.push(word.clone());
                i += 1;
                if tokens.get(i) == Some(&Token::PathSep) {
                    i += 1;
                    continue;
                }
                out.push(path);
                return i;
            }
            Some(Token::Open) => {
                i += 1;
                while i < tokens.len() && tokens[i] != Token::Close {
                    if tokens[i] == Token::Comma {
                        i += 1;
                        continue;
                    }
                    i = path_tree(tokens, i, path.clone(), out);
                    // Skip what follows a path in a group (`as name`) up to `,` or `}`.
                    while i < tokens.len() && !matches!(tokens[i], Token::Comma | Token::Close) {
                        i += 1;
                    }
                }
                return i + 1;
            }
            _ => {
                // `use super::*;` and the like: the path names its module.
                out.push(path);
                return i;
            }
        }
    }
}

/// The file a path written in `from` names: `from` itself, another file, or none (a path into
/// another crate cannot start with `crate`, `super` or `self`, so none means a path the module
/// tree does not hold, e.g. a macro's).
fn resolve(
    modules: &BTreeSet<Vec<String>>,
    from: &[String],
    inline_depth: usize,
    path: &[String],
) -> Option<Vec<String>> {
    let mut base: Vec<String> = from.to_vec();
    let mut inline_left = inline_depth;
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            inline_left = 0;
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        _ => {}
    }
    while rest.first().map(String::as_str) == Some("super") {
        if inline_left > 0 {
            inline_left -= 1;
        } else {
            base.pop()?;
        }
        rest = &rest[1..];
    }
    if inline_left > 0 {
        // Still inside an inline module of `from`: its names are the file's own.
        return Some(from.to_vec());
    }
    let mut named = base.clone();
    let mut best = base;
    for part in rest {
        named.push(part.clone());
        if modules.contains(&named) {
            best = named.clone();
        }
    }
    Some(best)
}

/// The files each file names (itself left out).
fn graph(files: &[SourceFile]) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| f.module.clone()).collect();
    files
        .iter()
        .map(|file| {
            let named = paths(&tokens(&code_only(&file.source)))
                .into_iter()
                .filter_map(|(depth, path)| resolve(&modules, &file.module, depth, &path))
                .filter(|target| *target != file.module)
                .collect();
            (file.module.clone(), named)
        })
        .collect()
}

/// The strongly connected components of more than one file (Tarjan), each sorted.
fn cycles(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<Vec<String>>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a [String], usize>,
        low: BTreeMap<&'a [String], usize>,
        stack: Vec<&'a [String]>,
        on_stack: BTreeSet<&'a [String]>,
        found: Vec<Vec<Vec<String>>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, node: &'a [String]) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            self.on_stack.insert(node);
            let graph = self.graph;
            for next in graph.get(node).into_iter().flatten() {
                let next = next.as_slice();
                if !self.index.contains_key(next) {
                    if !graph.contains_key(next) {
                        continue;
                    }
                    self.visit(next);
                    let low = self.low[next].min(self.low[node]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.index[next].min(self.low[node]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                loop {
                    let member = self.stack.pop().expect("the node is on the stack");
                    self.on_stack.remove(member);
                    component.push(member.to_vec());
                    if member == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_slice()) {
            walk.visit(node);
        }
    }
    walk.found
}

/// The module's path as a file name (`api/invoke`, `lib`, `api/mod` for `api`'s `mod.rs` or
/// `api.rs`: the test does not tell the two apart).
fn file_name(module: &[String]) -> String {
    if module.is_empty() {
        "lib".to_string()
    } else {
        module.join("/")
    }
}

/// The source directory checked: this crate's, or the one `STEWARD_IMPORT_CYCLES_SRC` names (to
/// count another checkout's cycles, e.g. before a change).
fn root() -> PathBuf {
    std::env::var_os("STEWARD_IMPORT_CYCLES_SRC").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        PathBuf::from,
    )
}

/// Cycles allowed, by their files: none. The last one (the adapters naming the dispatcher's
/// prepared request, the dispatcher calling the adapters) ended when the shared types moved to
/// `dispatch/prepared.rs`, which knows no adapter.
const ALLOWED: &[&[&str]] = &[];

#[test]
fn no_two_source_files_import_each_other_in_a_circle() {
    let root = root();
    let files = source_files(&root);
    assert!(files.len() > 100, "found only {} source files", files.len());
    let graph = graph(&files);
    let all = cycles(&graph);
    let allowed = |component: &Vec<Vec<String>>| {
        let names: Vec<String> = component.iter().map(|m| file_name(m)).collect();
        ALLOWED
            .iter()
            .any(|a| a.iter().copied().eq(names.iter().map(String::as_str)))
    };
    // `STEWARD_IMPORT_CYCLES_SRC` measures another checkout: every cycle counts there.
    let measuring = std::env::var_os("STEWARD_IMPORT_CYCLES_SRC").is_some();
    let found: Vec<_> = all
        .into_iter()
        .filter(|c| measuring || !allowed(c))
        .collect();
    let files_in_cycles: usize = found.iter().map(Vec::len).sum();
    // Each cycle as the imports among its files, so a failure says which `use` to move.
    let described: Vec<String> = found
        .iter()
        .map(|component| {
            let members: BTreeSet<&Vec<String>> = component.iter().collect();
            let edges: Vec<String> = component
                .iter()
                .flat_map(|from| {
                    graph[from]
                        .iter()
                        .filter(|to| members.contains(to))
                        .map(move |to| format!("  {} -> {}", file_name(from), file_name(to)))
                })
                .collect();
            edges.join("\n")
        })
        .collect();
    assert!(
        found.is_empty(),
        "{} import cycles over {files_in_cycles} files:\n{}",
        found.len(),
        described.join("\n--\n")
    );
}

#[test]
fn the_front_ends_import_the_application_layer_and_never_the_other_way() {
    let root = root();
    let graph = graph(&source_files(&root));
    let front_ends = ["api", "mcp", "console"];
    let backwards: Vec<String> = graph
        .iter()
        .filter(|(from, _)| from.first().map(String::as_str) == Some("app"))
        .flat_map(|(from, to)| to.iter().map(move |t| (from, t)))
        .filter(|(_, to)| to.first().is_some_and(|t| front_ends.contains(&t.as_str())))
        .map(|(from, to)| format!("{} -> {}", file_name(from), file_name(to)))
        .collect();
    assert!(backwards.is_empty(), "{}", backwards.join("\n"));
}

#[test]
fn paths_are_found_in_groups_comments_are_not_and_super_climbs_inline_modules_first() {
    let source = r#"
        use super::{body::{self, only}, openapi as doc};
        // use crate::commented::out;
        let s = "crate::in_a_string";
        fn f() { crate::a::b::c(); }
        mod tests { use super::*; use super::super::up; }
    "#;
    let found = paths(&tokens(&code_only(source)));
    let written: Vec<String> = found
        .iter()
        .map(|(depth, p)| format!("{depth}:{}", p.join("::")))
        .collect();
    assert_eq!(
        written,
        [
            "0:super::body::self",
            "0:super::body::only",
            "0:super::openapi",
            "0:crate::a::b::c",
            "1:super",
            "1:super::super::up",
        ]
    );
    let modules: BTreeSet<Vec<String>> =
        [vec!["api".to_string()], vec!["api".into(), "body".into()]]
            .into_iter()
            .collect();
    let from = vec!["api".to_string(), "invoke".to_string()];
    let body = resolve(
        &modules,
        &from,
        0,
        &["super".into(), "body".into(), "self".into()],
    );
    assert_eq!(body, Some(vec!["api".to_string(), "body".to_string()]));
    let own = resolve(&modules, &from, 1, &["super".into()]);
    assert_eq!(own, Some(from.clone()));
    let parent = resolve(&modules, &from, 0, &["super".into(), "JSON_MAX".into()]);
    assert_eq!(parent, Some(vec!["api".to_string()]));
}
