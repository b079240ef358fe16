//! The speaker's modules form layers: a check, run as a unit test.
//!
//! Every `.rs` file under `src/` (tests included) is read; its `crate::`
//! paths (grouped `use crate::{a, b::c}` too) and the `super::` paths that
//! climb to the crate root name the top-level modules it uses. Counting
//! each top-level module with everything under it as one, the edges must
//! form a DAG: a module never reaches back up to one that reaches it. A
//! cycle fails the test and is printed: the modules of each strongly
//! connected component, one cycle through them (`module -> module -> ...`)
//! and the file and line of each of its edges. `lib.rs` (the root, which only declares the
//! modules) and `main.rs` (the binary) are not counted; comments, doc
//! links and string literals are skipped.
//!
//! `cargo test -p holdfast-speaker --lib layers -- --nocapture` prints
//! every edge.
//!
//! # Known issues
//! - A path written through a `use` alias of the crate root, or built by a
//!   macro, is not seen (the crate has neither).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One use of another top-level module: where it is written.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Site {
    file: String,
    line: usize,
}

/// Edges between top-level modules, with the first site of each.
type Edges = BTreeMap<(String, String), Site>;

/// The source with comments and string/char literals blanked (newlines kept).
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, c: u8| out.push(if c == b'\n' { b'\n' } else { b' ' });
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == b'/' && next == Some(b'/') {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if c == b'/' && next == Some(b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
        } else if c == b'r'
            && matches!(next, Some(b'"') | Some(b'#'))
            && (i == 0 || !is_ident(b[i - 1]))
        {
            // Raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let mut close = vec![b'#'; hashes + 1];
            close[0] = b'"';
            let end = b[j + 1..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |p| j + 1 + p + close.len());
            for &x in &b[i..end] {
                blank(&mut out, x);
            }
            i = end;
        } else if c == b'"' {
            blank(&mut out, c);
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    blank(&mut out, b[i]);
                    i += 1;
                }
                if i < b.len() {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
            if i < b.len() {
                out.push(b' ');
                i += 1;
            }
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{..}'), not a lifetime ('a).
            let end = if next == Some(b'\\') {
                b[i + 2..]
                    .iter()
                    .position(|&x| x == b'\'')
                    .map(|p| i + 3 + p)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(i + 3)
            } else {
                None
            };
            match end {
                Some(end) => {
                    out.resize(out.len() + (end - i), b' ');
                    i = end;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The identifier at `i` (after spaces), and where it ends.
fn ident_at(b: &[u8], mut i: usize) -> (String, usize) {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    let start = i;
    while i < b.len() && is_ident(b[i]) {
        i += 1;
    }
    (String::from_utf8_lossy(&b[start..i]).into_owned(), i)
}

/// After `crate::` (or a `super::` chain reaching the root) at `i`: the
/// top-level modules named, one for a plain path, each item's first
/// segment for a group `{a, b::c, d::{e, f}}`.
fn roots_at(b: &[u8], mut i: usize) -> Vec<String> {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    if b.get(i) != Some(&b'{') {
        let (name, _) = ident_at(b, i);
        return vec![name];
    }
    let mut names = Vec::new();
    let mut depth = 0;
    let mut expect = true;
    while i < b.len() {
        match b[i] {
            b'{' => {
                depth += 1;
                expect = depth == 1;
                i += 1;
            }
            b'}' => {
                depth -= 1;
                i += 1;
                if depth == 0 {
                    break;
                }
            }
            b',' => {
                expect = depth == 1;
                i += 1;
            }
            c if expect && is_ident(c) => {
                let (name, end) = ident_at(b, i);
                names.push(name);
                expect = false;
                i = end;
            }
            _ => i += 1,
        }
    }
    names
}

/// The top-level module a file belongs to, and its depth in the module
/// tree (`src/a.rs` and `src/a/mod.rs`: 1, `src/a/b.rs`: 2); `None` for
/// the crate root and the binary.
fn file_module(rel: &Path) -> Option<(String, usize)> {
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
        return None;
    }
    let depth = parts.len() - usize::from(parts.last().is_some_and(|p| p == "mod"));
    Some((parts[0].clone(), depth))
}

/// Appends the top-level modules one file uses (other than its own).
fn file_edges(rel: &Path, src: &str, edges: &mut Edges) {
    let Some((module, file_depth)) = file_module(rel) else {
        return;
    };
    let code = code_only(src);
    let b = code.as_bytes();
    // Brace depths at which inline `mod x {` blocks opened.
    let mut inline: Vec<usize> = Vec::new();
    let mut braces = 0usize;
    let mut mod_pending = false;
    let mut line = 1;
    let mut i = 0;
    let mut add = |to: String, line: usize| {
        if !to.is_empty() && to != module {
            edges.entry((module.clone(), to)).or_insert(Site {
                file: rel.display().to_string(),
                line,
            });
        }
    };
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
            continue;
        }
        if c == b'{' {
            braces += 1;
            if mod_pending {
                inline.push(braces);
                mod_pending = false;
            }
            i += 1;
            continue;
        }
        if c == b'}' {
            if inline.last() == Some(&braces) {
                inline.pop();
            }
            braces = braces.saturating_sub(1);
            i += 1;
            continue;
        }
        if c == b';' {
            mod_pending = false;
        }
        if !is_ident(c) || (i > 0 && is_ident(b[i - 1])) {
            i += 1;
            continue;
        }
        let (word, end) = ident_at(b, i);
        let path_follows = b[end..].starts_with(b"::");
        match word.as_str() {
            "mod" => mod_pending = true,
            "crate" if path_follows => {
                for to in roots_at(b, end + 2) {
                    add(to, line);
                }
            }
            "super" if path_follows => {
                let mut ups = 1;
                let mut j = end + 2;
                loop {
                    let (w, e) = ident_at(b, j);
                    if w == "super" && b[e..].starts_with(b"::") {
                        ups += 1;
                        j = e + 2;
                    } else {
                        break;
                    }
                }
                if ups >= file_depth + inline.len() {
                    for to in roots_at(b, j) {
                        add(to, line);
                    }
                }
                i = j;
                continue;
            }
            _ => {}
        }
        i = end;
    }
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src dir")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The edges between the top-level modules of the crate at `src`.
fn edges_of(src: &Path) -> Edges {
    let mut files = Vec::new();
    rs_files(src, &mut files);
    let mut edges = Edges::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read source file");
        let rel = f.strip_prefix(src).expect("under src");
        file_edges(rel, &text, &mut edges);
    }
    edges
}

/// One cycle per strongly connected component of more than one module
/// (Tarjan's algorithm, then a shortest way back inside the component),
/// with the component's members.
fn cycles(edges: &Edges) -> Vec<(Vec<String>, Vec<String>)> {
    let mut adj: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        adj.entry(from).or_default().insert(to);
        adj.entry(to).or_default();
    }
    struct Tarjan<'a> {
        adj: &'a BTreeMap<&'a str, BTreeSet<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        sccs: Vec<Vec<&'a str>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on.insert(v);
            for &w in &self.adj[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let l = self.low[v].min(self.low[w]);
                    self.low.insert(v, l);
                } else if self.on.contains(w) {
                    let l = self.low[v].min(self.index[w]);
                    self.low.insert(v, l);
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    scc.push(w);
                    if w == v {
                        break;
                    }
                }
                self.sccs.push(scc);
            }
        }
    }
    let mut t = Tarjan {
        adj: &adj,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        sccs: Vec::new(),
    };
    for &v in adj.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    let mut out = Vec::new();
    for scc in t.sccs.into_iter().filter(|s| s.len() > 1) {
        let members: BTreeSet<&str> = scc.iter().copied().collect();
        let start = *members.iter().next().expect("non-empty");
        // Breadth-first from `start` back to `start` inside the component.
        let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        let mut closing = None;
        while let Some(v) = queue.pop_front() {
            for &w in adj[v].iter().filter(|w| members.contains(*w)) {
                if w == start {
                    closing = Some(v);
                    break;
                }
                if !prev.contains_key(w) {
                    prev.insert(w, v);
                    queue.push_back(w);
                }
            }
            if closing.is_some() {
                break;
            }
        }
        let mut path = vec![start.to_string()];
        let mut v = closing.expect("a component has a cycle");
        while v != start {
            path.push(v.to_string());
            v = prev[v];
        }
        path[1..].reverse();
        path.push(start.to_string());
        out.push((members.iter().map(|m| m.to_string()).collect(), path));
    }
    out
}

fn describe(edges: &Edges, (members, cycle): &(Vec<String>, Vec<String>)) -> String {
    let mut s = format!("{{{}}}: {}", members.join(", "), cycle.join(" -> "));
    for pair in cycle.windows(2) {
        let site = &edges[&(pair[0].clone(), pair[1].clone())];
        s.push_str(&format!(
            "\n    {} -> {}: src/{}:{}",
            pair[0], pair[1], site.file, site.line
        ));
    }
    s
}

#[test]
fn top_level_modules_form_a_dag() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = edges_of(&src);
    println!("{} edges between top-level modules:", edges.len());
    for ((from, to), site) in &edges {
        println!("  {from} -> {to}  (src/{}:{})", site.file, site.line);
    }
    let found = cycles(&edges);
    let report: Vec<String> = found.iter().map(|c| describe(&edges, c)).collect();
    assert!(
        found.is_empty(),
        "the speaker's top-level modules have {} cycle(s):\n{}",
        found.len(),
        report.join("\n")
    );
}

#[test]
fn the_parser_sees_groups_super_and_skips_comments() {
    let src = r#"
//! [`crate::doc_only`] is a doc link.
use crate::{alpha::A, beta::{B, C}, gamma};
use super::delta::D;
fn f() { let s = "crate::in_string"; let c = '{'; crate::epsilon::go(); }
mod tests {
    use super::*;
    use super::super::zeta;
}
"#;
    let mut edges = Edges::new();
    file_edges(Path::new("me.rs"), src, &mut edges);
    let to: BTreeSet<&str> = edges.keys().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        to,
        BTreeSet::from(["alpha", "beta", "delta", "epsilon", "gamma", "zeta"])
    );
    let mut deep = Edges::new();
    file_edges(Path::new("me/inner.rs"), "use super::x;\n", &mut deep);
    assert!(deep.is_empty(), "super:: of a submodule stays inside");
}

#[test]
fn a_cycle_is_found_and_named() {
    let site = Site {
        file: "x.rs".into(),
        line: 1,
    };
    let mut edges = Edges::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        edges.insert((a.into(), b.into()), site.clone());
    }
    let abc = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        cycles(&edges),
        vec![(abc(&["a", "b", "c"]), abc(&["a", "b", "c", "a"]))]
    );
    edges.remove(&("c".into(), "a".into()));
    assert!(cycles(&edges).is_empty());
}
