//! Repository tidy checks, run as ordinary tests (`cargo test -p xtask`): the dependency arrows
//! of ARCHITECTURE.md and its hard rules, no import cycles between the modules of a crate, banned
//! APIs in the pure crates, and a `//!` doc at the top of every source file. The checks are plain
//! functions over data (a crate graph, source text), so they are self-tested on hand-made inputs;
//! `tests/tidy.rs` runs them over the real tree. Nothing here is linked into Tandem.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Workspace crates and the workspace crates each may depend on (normal dependencies).
/// This table and the one in ARCHITECTURE.md say the same thing; the test reads this one.
/// Edit freely: the hard rules ([`NEVER`], [`ONLY_FROM`]) and acyclicity are checked
/// independently, against this table as well as against the real workspace.
pub const ARROWS: &[(&str, &[&str])] = &[
    // data and decisions: pure
    ("model", &[]),
    ("sched", &["model"]),
    ("trace", &["model"]),
    ("slurmcli", &["model"]),
    ("control", &["sched", "slurmcli", "model"]),
    ("sim", &["sched", "trace", "model"]),
    ("balance", &[]),
    ("pmi", &[]),
    // the wire format: pure
    ("wire", &["control", "slurmcli", "model"]),
    // the Kubernetes API's views of the wire's: pure
    ("k8s", &["wire"]),
    // adapters
    ("store", &["control", "model"]),
    ("exec", &[]),
    ("logging", &[]),
    ("pmix", &["pmi"]),
    ("image", &["slurmcli"]),
    ("client", &["wire"]),
    // shells: one crate per daemon, the user's commands, the local cluster, the benchmarks
    ("server", &["control", "store", "wire", "client", "k8s", "exec", "logging", "sched", "slurmcli", "model"]),
    ("agent", &["wire", "client", "exec", "logging", "control", "slurmcli", "image", "model", "pmi"]),
    ("proxy", &["balance", "wire", "client", "exec", "logging"]),
    ("cli", &["wire", "client", "slurmcli", "sched", "pmi", "exec"]),
    ("up", &["exec"]),
    ("bench", &["up", "wire", "client", "exec", "control", "sched", "slurmcli", "trace", "model"]),
    // the binary
    ("tandem", &["server", "agent", "proxy", "cli", "up", "bench", "exec", "logging", "pmix", "sim", "sched", "trace", "slurmcli"]),
    // tooling
    ("xtask", &[]),
];

/// Hard rules, whatever [`ARROWS`] says: `(a, b)` means crate `a` must never depend on crate `b`.
/// The four daemons and front ends (`server`, `agent`, `proxy`, `cli`) never depend on each other.
pub const NEVER: &[(&str, &str)] = &[
    ("server", "agent"),
    ("server", "proxy"),
    ("server", "cli"),
    ("agent", "server"),
    ("agent", "proxy"),
    ("agent", "cli"),
    ("proxy", "server"),
    ("proxy", "agent"),
    ("proxy", "cli"),
    ("cli", "server"),
    ("cli", "agent"),
    ("cli", "proxy"),
];

/// Hard rules, whatever [`ARROWS`] says: `(b, only)` means no crate outside `only` may depend on
/// `b`. Nothing but `tandem` depends on `bench`; nothing depends on `tandem` (the binary).
pub const ONLY_FROM: &[(&str, &[&str])] = &[("bench", &["tandem"]), ("tandem", &[])];

/// The rules [`check_arrows`] applies: an arrows table plus the hard rules.
#[derive(Clone, Copy, Debug)]
pub struct Rules<'a> {
    /// Each crate and the crates it may depend on; a crate missing here is an error.
    pub arrows: &'a [(&'a str, &'a [&'a str])],
    /// `(a, b)`: `a` must never depend on `b`.
    pub never: &'a [(&'a str, &'a str)],
    /// `(b, only)`: nothing outside `only` depends on `b`.
    pub only_from: &'a [(&'a str, &'a [&'a str])],
}

/// This workspace's rules: [`ARROWS`], [`NEVER`] and [`ONLY_FROM`].
pub const WORKSPACE: Rules<'static> = Rules { arrows: ARROWS, never: NEVER, only_from: ONLY_FROM };

/// The shell crates: applications (one per daemon, the user's commands, the local cluster, the
/// benchmarks, the binary), the only ones that may use `anyhow`. Every other crate is a library
/// below them and returns typed errors (`thiserror`).
pub const MAY_USE_ANYHOW: &[&str] = &["server", "agent", "proxy", "cli", "up", "bench", "tandem"];

/// The only crates that may use `unsafe` (they set their own lints; every other crate takes the
/// workspace's, which forbid it): `exec` (between fork and exec) and `pmix` (OpenPMIx's C API).
pub const UNSAFE_ALLOWED: &[&str] = &["exec", "pmix"];

/// Crates that must stay pure: no IO, no clock, no unseeded randomness, no async runtime.
pub const PURE: &[&str] = &["model", "sched", "sim", "slurmcli", "control", "balance", "pmi", "wire", "k8s"];

/// Strings that must not appear in a pure crate's source.
pub const BANNED: &[&str] = &[
    "std::fs",
    "std::net",
    "tokio",
    "Instant::now",
    "SystemTime",
    "thread_rng",
    "rand::rng(",
    "std::process",
    "std::env",
    "File::open",
    "Timestamp::now",
    "Zoned::now",
    "TimeZone::system",
];

/// A directed graph: each node and the nodes it points to.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// Checks a crate graph (each workspace crate with the workspace crates it depends on) against
/// `rules`, returning one message per violation, empty when all is well: a crate missing from
/// the arrows table, an edge the table does not allow, an edge a hard rule forbids (named in the
/// message), and any dependency cycle.
pub fn check_arrows(graph: &[(&str, Vec<&str>)], rules: &Rules) -> Vec<String> {
    let mut errors = Vec::new();
    for (krate, deps) in graph {
        let allowed = rules.arrows.iter().find(|(n, _)| n == krate).map(|(_, a)| *a);
        if allowed.is_none() {
            errors.push(format!("crate `{krate}` is not in the ARROWS table (and ARCHITECTURE.md)"));
        }
        for dep in deps {
            if allowed.is_some_and(|a| !a.contains(dep)) {
                errors.push(format!("`{krate}` -> `{dep}` is not an allowed arrow"));
            }
            if rules.never.contains(&(*krate, *dep)) {
                errors.push(format!("`{krate}` -> `{dep}` breaks a hard rule: `{krate}` must never depend on `{dep}`"));
            }
            for (target, only) in rules.only_from.iter().filter(|(t, only)| t == dep && !only.contains(krate)) {
                let who = if only.is_empty() {
                    "nothing".to_string()
                } else {
                    format!("nothing but {}", only.iter().map(|o| format!("`{o}`")).collect::<Vec<_>>().join(", "))
                };
                errors.push(format!("`{krate}` -> `{dep}` breaks a hard rule: {who} depends on `{target}`"));
            }
        }
    }
    let g: Graph = graph.iter().map(|(k, ds)| (k.to_string(), ds.iter().map(|d| d.to_string()).collect())).collect();
    errors.extend(cycles(&g).into_iter().map(|c| format!("dependency cycle between crates: {}", c.join(", "))));
    errors
}

/// An arrows table read as a crate graph (every allowed arrow an edge), so that [`check_arrows`]
/// can check the table itself against the hard rules and for cycles.
pub fn arrows_graph<'a>(arrows: &[(&'a str, &'a [&'a str])]) -> Vec<(&'a str, Vec<&'a str>)> {
    arrows.iter().map(|(k, ds)| (*k, ds.to_vec())).collect()
}

/// The cycles of a graph: each strongly connected component of more than one node, as its
/// sorted node names; components sorted by their first name. Self-loops are not cycles here.
pub fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    fn reach<'g>(graph: &'g Graph, from: &'g str) -> BTreeSet<&'g str> {
        let (mut seen, mut stack) = (BTreeSet::new(), vec![from]);
        while let Some(n) = stack.pop() {
            for m in graph.get(n).into_iter().flatten() {
                if seen.insert(m.as_str()) {
                    stack.push(m);
                }
            }
        }
        seen
    }
    let reaches: BTreeMap<&str, BTreeSet<&str>> = graph.keys().map(|k| (k.as_str(), reach(graph, k))).collect();
    let (mut done, mut out) = (BTreeSet::new(), Vec::new());
    for (v, from_v) in &reaches {
        if done.contains(v) {
            continue;
        }
        let comp: Vec<&str> =
            std::iter::once(*v).chain(from_v.iter().copied().filter(|u| u != v && reaches.get(u).is_some_and(|r| r.contains(v)))).collect();
        done.extend(comp.iter().copied());
        if comp.len() > 1 {
            out.push(comp.into_iter().map(String::from).collect());
        }
    }
    out
}

/// Every `.rs` file under `dir`, recursively, sorted.
pub fn rust_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            out.extend(rust_files(&p)?);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

/// The import cycles between the modules of the crate whose sources are in `src_dir` (its
/// `src/`): reads every `.rs` file and returns [`cycles`] of [`module_graph`].
pub fn module_cycles(src_dir: &Path) -> std::io::Result<Vec<Vec<String>>> {
    let mut files = Vec::new();
    for f in rust_files(src_dir)? {
        let text = std::fs::read_to_string(&f)?;
        files.push((f.strip_prefix(src_dir).expect("under src").to_path_buf(), text));
    }
    let files: Vec<(&Path, &str)> = files.iter().map(|(p, t)| (p.as_path(), t.as_str())).collect();
    Ok(cycles(&module_graph(&files)))
}

/// The module of a source file, from its path relative to `src/`: `lib.rs` and `main.rs` are
/// the crate root (`""`), `a.rs` and `a/mod.rs` are `a`, `a/b.rs` is `a::b`. Files under
/// `bin/` are separate crate roots: `None`.
pub fn module_of(rel: &Path) -> Option<String> {
    let mut parts: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    if parts.len() > 1 && parts[0] == "bin" {
        return None;
    }
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if !(stem == "mod" || (parts.is_empty() && (stem == "lib" || stem == "main"))) {
        parts.push(stem.to_string());
    }
    Some(parts.join("::"))
}

/// The module import graph of one crate, from its source files (path relative to `src/`, text):
/// an edge `m -> n` when code in module `m` names a path into module `n`. Paths are found in the
/// code with comments and literals blanked ([`strip_comments_and_strings`]), `use` trees
/// (`crate::{a, b::C}`) expanded, and resolved to the longest prefix that is a known module:
/// - `crate::x::y::…` to `x::y` if that is a module, else `x`;
/// - `super::…` (and `super::super::…`) relative to the file's module: in `a/b.rs`,
///   `super::c::…` is `a::c` if that module exists, else `a`; `self::…` likewise from the file;
/// - `name::…`, where the file declares `mod name;`, to that child module.
///
/// Visibilities (`pub(super)`, `pub(in crate::a)`) are not paths. The rules, not loopholes:
/// - the crate root (`lib.rs`, `main.rs`) is the crate's face: edges to and from it are ignored;
/// - test-only modules are ignored: a `mod name;` with `#[cfg(test)]` on it (same line or the
///   lines just above), with its files and descendants; and inline test modules: from a
///   `#[cfg(test)]` on a `mod name {` to the end of the file, as tests sit at the bottom of a file
///   by convention (so code after such a block is not read);
/// - edges from a module to itself are ignored;
/// - files under `bin/` are separate crate roots and not read.
///
/// Rough by design (no macro expansion, inline non-test `mod` blocks count as their file, a
/// local name shadowing a child module is not noticed); errs towards seeing an edge.
pub fn module_graph(files: &[(&Path, &str)]) -> Graph {
    let scanned: Vec<(String, Scan)> = files.iter().filter_map(|(p, t)| Some((module_of(p)?, scan(t)))).collect();
    let child = |m: &str, n: &str| if m.is_empty() { n.to_string() } else { format!("{m}::{n}") };
    let test_only: BTreeSet<String> = scanned.iter().flat_map(|(m, s)| s.test_children.iter().map(|n| child(m, n))).collect();
    let is_test = |m: &str| test_only.iter().any(|t| m == t || m.starts_with(&format!("{t}::")));
    let known: BTreeSet<&str> = scanned.iter().map(|(m, _)| m.as_str()).filter(|m| !is_test(m)).collect();
    let mut graph = Graph::new();
    for (m, s) in scanned.iter().filter(|(m, _)| !m.is_empty() && !is_test(m)) {
        let targets = graph.entry(m.clone()).or_default();
        for path in &s.paths {
            if let Some(t) = resolve(m, path, &s.children, &known).filter(|t| !t.is_empty() && t != m && !is_test(t)) {
                targets.insert(t);
            }
        }
    }
    graph
}

/// What [`module_graph`] reads from one file.
struct Scan {
    /// Non-test `mod name;` declarations.
    children: Vec<String>,
    /// `#[cfg(test)] mod name;` declarations.
    test_children: Vec<String>,
    /// Every path in the code before any inline test module, `use` trees expanded.
    paths: Vec<Vec<String>>,
}

fn scan(text: &str) -> Scan {
    let code = strip_comments_and_strings(text);
    let (mut children, mut test_children, mut end, mut at, mut cfg_test) = (Vec::new(), Vec::new(), code.len(), 0, false);
    for line in code.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let mut l = line.trim();
        if let Some(rest) = l.strip_prefix("#[cfg(test)]") {
            (cfg_test, l) = (true, rest.trim());
        }
        if l.is_empty() {
            continue;
        }
        if let Some((name, declared)) = mod_item(l) {
            match (cfg_test, declared) {
                (true, false) => {
                    end = start;
                    break;
                }
                (true, true) => test_children.push(name),
                (false, true) => children.push(name),
                (false, false) => {}
            }
        }
        cfg_test &= l.starts_with("#[");
    }
    Scan { children, test_children, paths: paths(&code[..end]) }
}

/// `Some((name, true))` for `mod name;`, `Some((name, false))` for `mod name {`, with any `pub`.
fn mod_item(line: &str) -> Option<(String, bool)> {
    let mut l = line;
    if let Some(rest) = l.strip_prefix("pub") {
        l = rest.trim_start();
        if l.starts_with('(') {
            l = &l[l.find(')')? + 1..];
        }
    }
    let l = l.trim_start().strip_prefix("mod ")?.trim_start();
    let name: String = l.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    let rest = l[name.len()..].trim_start();
    (!name.is_empty() && (rest.starts_with(';') || rest.starts_with('{') || rest.is_empty())).then(|| (name, rest.starts_with(';')))
}

/// Resolves a path written in module `m` to the module it points into (`""` is the root).
fn resolve(m: &str, path: &[String], children: &[String], known: &BTreeSet<&str>) -> Option<String> {
    let here: Vec<&str> = if m.is_empty() { vec![] } else { m.split("::").collect() };
    let (mut base, rest) = match path[0].as_str() {
        "crate" => (vec![], &path[1..]),
        "self" => (here, &path[1..]),
        "super" => {
            let n = path.iter().take_while(|s| *s == "super").count();
            (here[..here.len().checked_sub(n)?].to_vec(), &path[n..])
        }
        c if path.len() > 1 && children.iter().any(|k| k == c) => (here, path),
        _ => return None,
    };
    let mut best = base.join("::");
    for seg in rest {
        base.push(seg.as_str());
        match base.join("::") {
            cand if known.contains(cand.as_str()) => best = cand,
            _ => break,
        }
    }
    Some(best)
}

/// Every path in `code` (`a::b::c`, and each leaf of a `use` tree), as its segments.
fn paths(code: &str) -> Vec<Vec<String>> {
    let toks = tokens(code);
    let (mut out, mut i) = (Vec::new(), 0);
    while i < toks.len() {
        let before = &toks[..i];
        let starts = is_ident(toks[i]) && before.last() != Some(&"::");
        if starts && !before.ends_with(&["pub", "("]) && !before.ends_with(&["pub", "(", "in"]) {
            i = tree(&toks, i, &mut Vec::new(), &mut out);
        } else {
            i += 1;
        }
    }
    out
}

/// Reads the path or `use` tree at `toks[i]` (an identifier) below `prefix`, pushing each full
/// path (a trailing `self` dropped) onto `out`; returns the index after it.
fn tree(toks: &[&str], mut i: usize, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let base = prefix.len();
    while i < toks.len() && is_ident(toks[i]) {
        if toks[i] != "self" || prefix.is_empty() {
            prefix.push(toks[i].to_string());
        }
        i += 1;
        if toks.get(i) != Some(&"::") {
            break;
        }
        if toks.get(i + 1) == Some(&"{") {
            i += 2;
            while i < toks.len() && toks[i] != "}" {
                i = if is_ident(toks[i]) { tree(toks, i, prefix, out) } else { i + 1 };
            }
            prefix.truncate(base);
            return i + 1;
        }
        i += 1;
    }
    out.push(prefix.clone());
    prefix.truncate(base);
    i
}

fn is_ident(t: &str) -> bool {
    t.chars().next().is_some_and(|c| c.is_alphanumeric() || c == '_')
}

/// Identifiers, `::`, and single other characters; whitespace dropped.
fn tokens(code: &str) -> Vec<&str> {
    let (mut out, mut chars) = (Vec::new(), code.char_indices().peekable());
    while let Some((i, c)) = chars.next() {
        let mut end = i + c.len_utf8();
        if c.is_alphanumeric() || c == '_' {
            while let Some(&(j, d)) = chars.peek().filter(|(_, d)| d.is_alphanumeric() || *d == '_') {
                end = j + d.len_utf8();
                chars.next();
            }
        } else if c == ':' && chars.peek().is_some_and(|(_, d)| *d == ':') {
            chars.next();
            end += 1;
        } else if c.is_whitespace() {
            continue;
        }
        out.push(&code[i..end]);
    }
    out
}

/// `src` with comments (`//`, `///`, `//!`, nested `/* */`) removed and string, raw string and
/// char literals blanked to a space, keeping newlines so line numbers hold. Rough (a lexer's
/// worth of Rust, not a parser), enough for tidy checks.
pub fn strip_comments_and_strings(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let (mut out, mut i) = (String::with_capacity(src.len()), 0);
    let skip_to = |out: &mut String, from: usize, to: usize| {
        out.extend(c[from..to.min(c.len())].iter().filter(|&&ch| ch == '\n'));
        out.push(' ');
        to
    };
    while i < c.len() {
        let ident_before = i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_');
        let hashes = (i + 1..c.len()).take_while(|&j| c[j] == '#').count();
        i = if c[i] == '/' && at(i + 1) == '/' {
            (i..c.len()).find(|&j| c[j] == '\n').unwrap_or(c.len())
        } else if c[i] == '/' && at(i + 1) == '*' {
            let (mut j, mut depth) = (i, 0);
            while j < c.len() {
                match (c[j], at(j + 1)) {
                    ('/', '*') => (depth, j) = (depth + 1, j + 2),
                    ('*', '/') => (depth, j) = (depth - 1, j + 2),
                    _ => j += 1,
                }
                if depth == 0 {
                    break;
                }
            }
            skip_to(&mut out, i, j)
        } else if c[i] == 'r' && !ident_before && at(i + 1 + hashes) == '"' {
            let close = |j: usize| c[j] == '"' && (1..=hashes).all(|k| at(j + k) == '#');
            let end = (i + 2 + hashes..c.len()).find(|&j| close(j)).map_or(c.len(), |j| j + 1 + hashes);
            skip_to(&mut out, i, end)
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            skip_to(&mut out, i, j + 1)
        } else if c[i] == '\'' && at(i + 1) == '\\' {
            let end = (i + 3..c.len()).find(|&j| c[j] == '\'').map_or(c.len(), |j| j + 1);
            skip_to(&mut out, i, end)
        } else if c[i] == '\'' && at(i + 2) == '\'' {
            skip_to(&mut out, i, i + 3)
        } else {
            out.push(c[i]);
            i + 1
        };
    }
    out
}

/// The banned uses in one pure crate's source file: each `(line, what)` where the code (comments
/// and string literals stripped) names one of [`BANNED`], or imports `fs`, `net`, `process` or
/// `env` from `std` in a group (`use std::{env, fs}`).
pub fn banned_uses(src: &str) -> Vec<(usize, String)> {
    let code = strip_comments_and_strings(src);
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        for b in BANNED {
            if line.contains(b) {
                found.push((n + 1, format!("`{b}`")));
            }
        }
    }
    let mut rest = code.as_str();
    while let Some(at) = rest.find("std::{") {
        let line = code[..code.len() - rest.len() + at].matches('\n').count() + 1;
        let group = &rest[at + 6..];
        let mut depth = 1;
        let end = group
            .char_indices()
            .find(|&(_, ch)| {
                depth += match ch {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
                depth == 0
            })
            .map_or(group.len(), |(i, _)| i);
        for item in group[..end].split(|ch: char| ch == ',' || ch == '{' || ch.is_whitespace()) {
            let first = item.split("::").next().unwrap_or("");
            if ["fs", "net", "process", "env"].contains(&first) {
                found.push((line, format!("`std::{first}` (in a `std::{{...}}` group)")));
            }
        }
        rest = &group[end..];
    }
    found
}

/// The arrows table written in ARCHITECTURE.md (the fenced block after `## Dependency arrows`,
/// lines `crate -> a, b` or `crate -> (none)`), to compare with [`ARROWS`]; `None` if there is
/// no such block.
pub fn arrows_in_markdown(md: &str) -> Option<Vec<(String, Vec<String>)>> {
    let section = md.split("## Dependency arrows").nth(1)?;
    let block = section.split("```").nth(1)?;
    let rows = block
        .lines()
        .filter_map(|l| l.split_once("->"))
        .map(|(from, to)| {
            let to = to.trim();
            let deps = if to == "(none)" { Vec::new() } else { to.split(',').map(|d| d.trim().to_string()).collect() };
            (from.trim().to_string(), deps)
        })
        .collect();
    Some(rows)
}

/// The places in one source file of a command that read options by hand instead of through the
/// one parser (`slurmcli::getopt`): each `(line, what)` where an option word such as `"-h"` or
/// `"--noheader"` is a match arm's pattern or compared with `==`/`!=`, or a word is taken apart
/// with `starts_with`/`strip_prefix` of `-`. A value such as `"-1"` or a lone `"-"` is no option.
pub fn hand_read_options(src: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, raw) in src.lines().enumerate() {
        let line = raw.trim_start();
        if line.starts_with("//") {
            continue;
        }
        for pat in ["starts_with(\"-", "strip_prefix(\"-", "starts_with('-')", "strip_prefix('-')"] {
            if line.contains(pat) {
                found.push((n + 1, format!("`{pat}`")));
            }
        }
        let b = line.as_bytes();
        let mut i = 0;
        while let Some(at) = line[i..].find("\"-").map(|a| a + i) {
            i = at + 2;
            let next = b.get(at + 2).copied().unwrap_or(b' ');
            if !(next.is_ascii_alphabetic() || next == b'-') || (at > 0 && b[at - 1] == b'\\') {
                continue;
            }
            let Some(end) = line[at + 1..].find('"').map(|e| e + at + 1) else { break };
            let word = &line[at..=end];
            let after = line[end + 1..].trim_start();
            let before = line[..at].trim_end();
            let arm = after.starts_with("=>") || (after.starts_with('|') && !after.starts_with("||"));
            let compared = before.ends_with("==") || before.ends_with("!=") || after.starts_with("==") || after.starts_with("!=");
            if arm || compared {
                found.push((n + 1, format!("option word {word}")));
            }
            i = end + 1;
        }
    }
    found
}

/// The targets of a Markdown text's inline links and images (`[text](target)`), outside code
/// spans and fenced blocks, with the line each is on.
pub fn markdown_links(md: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in md.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Code spans hide what looks like a link.
        let mut text = String::new();
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                text.push(c);
            }
        }
        let mut rest = text.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("").to_string();
            if !target.is_empty() {
                out.push((n + 1, target));
            }
            rest = &after[end..];
        }
    }
    out
}

/// The anchors of a Markdown text's headings, as GitHub and mdBook make them: lower case,
/// punctuation but `-` and `_` dropped, spaces as `-`.
pub fn heading_anchors(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(title) = line.strip_prefix('#').map(|t| t.trim_start_matches('#')).filter(|t| t.starts_with(' ')) else { continue };
        if fenced {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        out.push(slug);
    }
    out
}

/// Every relative link of `files` (path, text) that leads nowhere: a file that is not there
/// (`exists`), or an anchor that no heading of its page makes. `http:`, `https:` and `mailto:`
/// links are not followed.
pub fn broken_links(files: &[(PathBuf, String)], exists: impl Fn(&Path) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files {
        for (line, target) in markdown_links(text) {
            if ["http://", "https://", "mailto:"].iter().any(|p| target.starts_with(p)) {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let dest = if file.is_empty() { path.clone() } else { normalize(&path.parent().unwrap_or(Path::new("")).join(file)) };
            if !file.is_empty() && !exists(&dest) {
                out.push(format!("{}:{line}: {target}: no such file", path.display()));
                continue;
            }
            if let Some(a) = anchor {
                let page = files.iter().find(|(p, _)| *p == dest).map(|(_, t)| t.as_str());
                match page {
                    Some(t) if heading_anchors(t).iter().any(|h| h == a) => {}
                    Some(_) => out.push(format!("{}:{line}: {target}: no heading makes #{a}", path.display())),
                    None => out.push(format!("{}:{line}: {target}: an anchor into a file that is not checked", path.display())),
                }
            }
        }
    }
    out
}

/// `a/b/../c` as `a/c`.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir if out.file_name().is_some() => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}
