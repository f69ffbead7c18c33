//! Tidy: the architecture's rules, enforced on the real tree, and self-tests of the checks
//! (`xtask`'s functions) on hand-made crate graphs and fake crates.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The workspace's crates, each with the workspace crates it depends on (normal dependencies).
fn crate_graph(meta: &serde_json::Value) -> Vec<(&str, Vec<&str>)> {
    let packages = meta["packages"].as_array().unwrap();
    let members: Vec<&str> = packages.iter().map(|p| p["name"].as_str().unwrap()).collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"].as_array().unwrap().iter().filter(|d| d["kind"].is_null()).map(|d| d["name"].as_str().unwrap());
            (p["name"].as_str().unwrap(), deps.filter(|d| members.contains(d)).collect())
        })
        .collect()
}

fn metadata() -> serde_json::Value {
    let out = Command::new(env!("CARGO")).args(["metadata", "--format-version", "1", "--no-deps"]).current_dir(root()).output().unwrap();
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn dependency_arrows_match_architecture() {
    let meta = metadata();
    let graph = crate_graph(&meta);
    let mut errors = xtask::check_arrows(&graph, &xtask::WORKSPACE);
    // ARCHITECTURE.md names every crate.
    let arch = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    for (name, _) in &graph {
        if !arch.contains(&format!("`{name}`")) {
            errors.push(format!("ARCHITECTURE.md does not name `{name}`"));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn arrows_table_obeys_the_hard_rules() {
    let errors = xtask::check_arrows(&xtask::arrows_graph(xtask::ARROWS), &xtask::WORKSPACE);
    assert!(errors.is_empty(), "the ARROWS table itself allows:\n{}", errors.join("\n"));
}

#[test]
fn no_import_cycles_between_modules() {
    let mut errors = Vec::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root().join("crates")).unwrap().map(|e| e.unwrap().path()).collect();
    dirs.sort();
    for dir in dirs.iter().filter(|d| d.join("src").is_dir()) {
        let krate = dir.file_name().unwrap().to_string_lossy();
        for cycle in xtask::module_cycles(&dir.join("src")).unwrap() {
            errors.push(format!("crate {krate}: modules {} import each other", cycle.join(", ")));
        }
    }
    assert!(errors.is_empty(), "import cycles (break them: move the shared part down, or pass it in):\n{}", errors.join("\n"));
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    xtask::rust_files(dir).unwrap()
}

#[test]
fn pure_crates_do_no_io() {
    let mut errors = Vec::new();
    for krate in xtask::PURE {
        let files = rust_files(&root().join("crates").join(krate).join("src"));
        assert!(!files.is_empty(), "no sources for {krate}");
        for f in files {
            for (line, what) in xtask::banned_uses(&std::fs::read_to_string(&f).unwrap()) {
                errors.push(format!("{}:{line}: {what} in a pure crate", f.display()));
            }
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn banned_uses_are_found_however_written() {
    let src = "use std::{env, fmt};\nuse std::{collections::HashMap, fs::File};\nfn f() { let t = std::time::Instant::now(); }\n\
               // std::fs in a comment is fine\nconst S: &str = \"std::net in a string is fine\";\nfn g() { let _ = jiff::Timestamp::now(); }\n";
    let found = xtask::banned_uses(src);
    let lines: Vec<usize> = found.iter().map(|(l, _)| *l).collect();
    assert_eq!(lines, vec![3, 6, 1, 2], "{found:?}");
    assert!(found[2].1.contains("std::env") && found[3].1.contains("std::fs"), "{found:?}");
    assert!(xtask::banned_uses("use std::{fmt, collections::BTreeMap};\nfn main() {}\n").is_empty());
    // A group at the start of a line is reported on that line.
    let found = xtask::banned_uses("use {\nstd::{fmt, process::Command},\n};\n");
    assert_eq!(found.iter().map(|(l, _)| *l).collect::<Vec<_>>(), vec![2], "{found:?}");
}

#[test]
fn every_source_file_starts_with_a_module_doc() {
    let missing: Vec<String> = rust_files(&root().join("crates"))
        .iter()
        .filter(|f| !std::fs::read_to_string(f).unwrap().trim_start().starts_with("//!"))
        .map(|f| f.display().to_string())
        .collect();
    assert!(missing.is_empty(), "files without a //! doc:\n{}", missing.join("\n"));
}

#[test]
fn only_exec_and_pmix_may_use_unsafe() {
    // Every crate but `exec` and `pmix` takes the workspace's lints, which forbid `unsafe`.
    let mut errors = Vec::new();
    for e in std::fs::read_dir(root().join("crates")).unwrap() {
        let dir = e.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let takes_workspace = manifest.contains("[lints]\nworkspace = true");
        if !xtask::UNSAFE_ALLOWED.contains(&name.as_str()) && !takes_workspace {
            errors.push(format!("crates/{name}/Cargo.toml does not take the workspace lints (which forbid unsafe)"));
        }
    }
    let ws = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    assert!(ws.contains("unsafe_code = \"forbid\""), "the workspace no longer forbids unsafe");
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

// Self-tests: the checks on hand-made inputs (hand-made arrows; the real hard rules).

/// Arrows that allow every edge of `graph`, so that only the hard rules and cycles can fire.
fn permissive<'a>(graph: &'a [(&'a str, Vec<&'a str>)]) -> Vec<(&'a str, &'a [&'a str])> {
    graph.iter().map(|(k, ds)| (*k, ds.as_slice())).collect()
}

#[test]
fn check_arrows_reports_forbidden_edges() {
    let graph =
        vec![("wire", vec![]), ("agent", vec!["server", "wire"]), ("server", vec!["wire"]), ("proxy", vec!["bench"]), ("bench", vec![])];
    let arrows = [("wire", &[][..]), ("agent", &["wire"][..]), ("server", &["wire"][..]), ("proxy", &["bench"][..])];
    let errors = xtask::check_arrows(&graph, &xtask::Rules { arrows: &arrows, ..xtask::WORKSPACE });
    let has = |s: &str| errors.iter().any(|e| e.contains(s));
    assert!(has("`agent` -> `server` is not an allowed arrow"), "{errors:?}");
    assert!(has("`agent` -> `server` breaks a hard rule: `agent` must never depend on `server`"), "{errors:?}");
    assert!(has("`proxy` -> `bench` breaks a hard rule: nothing but `tandem` depends on `bench`"), "{errors:?}");
    assert!(has("crate `bench` is not in the ARROWS table"), "{errors:?}");
    assert_eq!(errors.len(), 4, "{errors:?}");
}

#[test]
fn check_arrows_hard_rules_hold_whatever_the_table_says() {
    let apart = ["server", "agent", "proxy", "cli"];
    let mut graph: Vec<(&str, Vec<&str>)> = apart.iter().map(|a| (*a, apart.iter().copied().filter(|b| b != a).collect())).collect();
    graph.extend([("up", vec!["tandem"]), ("tandem", vec!["bench"]), ("bench", vec![])]);
    let arrows = permissive(&graph);
    let errors = xtask::check_arrows(&graph, &xtask::Rules { arrows: &arrows, ..xtask::WORKSPACE });
    assert_eq!(errors.iter().filter(|e| e.contains("must never depend on")).count(), 12, "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("`up` -> `tandem` breaks a hard rule: nothing depends on `tandem`")), "{errors:?}");
    assert!(errors.iter().any(|e| e == "dependency cycle between crates: agent, cli, proxy, server"), "{errors:?}");
    assert_eq!(errors.len(), 14, "{errors:?}");
}

#[test]
fn check_arrows_finds_cycles_and_passes_a_clean_graph() {
    let clean = vec![("tandem", vec!["cli", "bench", "wire"]), ("cli", vec!["wire"]), ("bench", vec!["wire"]), ("wire", vec![])];
    let arrows = permissive(&clean);
    assert_eq!(xtask::check_arrows(&clean, &xtask::Rules { arrows: &arrows, ..xtask::WORKSPACE }), Vec::<String>::new());
    let looped = vec![("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"]), ("d", vec!["a"])];
    let arrows = permissive(&looped);
    let errors = xtask::check_arrows(&looped, &xtask::Rules { arrows: &arrows, ..xtask::WORKSPACE });
    assert_eq!(errors, ["dependency cycle between crates: a, b, c"]);
}

/// Writes a fake crate's `src/` into a fresh temp dir and runs `module_cycles` on it.
fn cycles_in(name: &str, files: &[(&str, &str)]) -> Vec<Vec<String>> {
    let dir = std::env::temp_dir().join(format!("xtask-selftest-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let found = xtask::module_cycles(&dir).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    found
}

const LIB: &str = "//! Fake.\nmod a;\nmod b;\n";
const NONE: [[&str; 0]; 0] = [];

#[test]
fn module_cycles_finds_a_cycle_between_siblings() {
    let found = cycles_in(
        "siblings",
        &[("lib.rs", LIB), ("a.rs", "use crate::b::X;\npub struct Y;\n"), ("b.rs", "use super::a::Y;\npub struct X;\n")],
    );
    assert_eq!(found, [["a", "b"]]);
    let grouped =
        cycles_in("grouped", &[("lib.rs", LIB), ("a.rs", "use crate::{Root, b::{self, X}};\n"), ("b.rs", "fn f() { crate::a::g() }\n")]);
    assert_eq!(grouped, [["a", "b"]]);
    let no_cycle = cycles_in("one-way", &[("lib.rs", LIB), ("a.rs", "use crate::b::X;\npub struct Y;\n"), ("b.rs", "pub struct X;\n")]);
    assert_eq!(no_cycle, NONE);
}

#[test]
fn module_cycles_ignores_comments_strings_and_the_root() {
    let b = "//! crate::a::Y\n/// crate::a::Y\n// use super::a::Y;\n/* crate::a /* nested */ */ const S: &str = \"crate::a::Y\";\n\
             const R: &str = r#\"super::a\"#;\nconst C: char = '\"';\nuse crate::Root;\n";
    let lib = "//! Fake.\nmod a;\nmod b;\npub struct Root;\nuse a::Y;\nuse b::X;\n";
    let found = cycles_in("clean", &[("lib.rs", lib), ("a.rs", "use crate::b::X;\nuse crate::Root;\n"), ("b.rs", b)]);
    assert_eq!(found, NONE);
}

#[test]
fn module_cycles_ignores_test_modules() {
    let b = "pub struct X;\n\n#[cfg(test)]\nmod tests {\n    use super::*;\n    use crate::a::Y;\n}\n";
    let lib = "//! Fake.\nmod a;\nmod b;\n#[cfg(test)]\nmod t;\n";
    let files = [("lib.rs", lib), ("a.rs", "use crate::b::X;\nuse crate::t::helper;\n"), ("b.rs", b), ("t.rs", "use crate::a::Y;\n")];
    assert_eq!(cycles_in("tests", &files), NONE);
}

#[test]
fn module_cycles_finds_a_parent_child_cycle() {
    let files = [
        ("lib.rs", "//! Fake.\nmod p;\n"),
        ("p.rs", "mod c;\npub fn g() {\n    c::f()\n}\n"),
        ("p/c.rs", "pub fn f() {\n    super::g()\n}\n"),
    ];
    assert_eq!(cycles_in("parent", &files), [["p", "p::c"]]);
    // `pub(super)` is a visibility, not a path.
    let files =
        [("lib.rs", "//! Fake.\nmod p;\n"), ("p/mod.rs", "mod c;\npub fn g() {\n    c::f()\n}\n"), ("p/c.rs", "pub(super) fn f() {}\n")];
    assert_eq!(cycles_in("visibility", &files), NONE);
}

#[test]
fn only_shell_crates_use_anyhow() {
    // From cargo's own reading of the manifests (any table that makes a normal dependency).
    let meta = metadata();
    let mut errors = Vec::new();
    for p in meta["packages"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let uses = p["dependencies"].as_array().unwrap().iter().any(|d| d["name"] == "anyhow" && d["kind"].is_null());
        if uses && !xtask::MAY_USE_ANYHOW.contains(&name) {
            errors.push(format!("crates/{name} depends on anyhow, but is a library: return typed errors (thiserror)"));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn architecture_md_draws_the_arrows_table() {
    let arch = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let drawn = xtask::arrows_in_markdown(&arch).expect("ARCHITECTURE.md has a fenced block after `## Dependency arrows`");
    let norm = |rows: Vec<(String, Vec<String>)>| -> Vec<(String, std::collections::BTreeSet<String>)> {
        let mut v: Vec<_> = rows.into_iter().map(|(k, d)| (k, d.into_iter().collect())).collect();
        v.sort();
        v
    };
    let table = xtask::ARROWS.iter().map(|(k, d)| (k.to_string(), d.iter().map(|x| x.to_string()).collect())).collect();
    assert_eq!(norm(drawn), norm(table), "ARCHITECTURE.md's arrows and xtask::ARROWS differ");
}

#[test]
fn binaries_without_unit_tests_say_so() {
    // `crates/tandem` sets `test = false` on its binaries: they must stay without `#[test]`s,
    // which would otherwise be skipped silently.
    for f in ["crates/tandem/src/main.rs", "crates/tandem/src/simcmd.rs", "crates/tandem/src/bin/tandem-slurm.rs"] {
        let text = std::fs::read_to_string(root().join(f)).unwrap();
        assert!(!text.contains("#[test]"), "{f} has a #[test], but its binary has `test = false` in crates/tandem/Cargo.toml");
    }
}

/// Issue 28: every Slurm command reads its command line through `slurmcli::getopt` with its
/// table; no command matches on option words itself.
#[test]
fn commands_read_options_through_the_one_parser() {
    let mut errors = Vec::new();
    for f in rust_files(&root().join("crates/cli/src")) {
        let text = std::fs::read_to_string(&f).unwrap();
        for (line, what) in xtask::hand_read_options(&text) {
            errors.push(format!("{}:{line}: {what}", f.display()));
        }
    }
    assert!(
        errors.is_empty(),
        "options read by hand (put them in the command's table in slurmcli and match on keys):\n{}",
        errors.join("\n")
    );
}

#[test]
fn hand_read_options_finds_arms_and_comparisons_only() {
    let src = r#"
        match x.as_str() {
            "-h" | "--noheader" => header = false,
            "--json" => json = true,
        }
        if x == "-V" {}
        let y = a.strip_prefix("--");
        let ok = v.trim() == "-1" || path == "-";
        let args = vec!["--overlap", "-N"];
        // "-h" => in a comment
        let s = "Try \"squeue --help\" for more";
    "#;
    let found: Vec<usize> = xtask::hand_read_options(src).into_iter().map(|(l, _)| l).collect();
    assert_eq!(found, vec![3, 3, 4, 6, 7]);
}

/// The Markdown files whose links are checked: the README, the book (`docs/`) and the other
/// documents at the root, each with its path from the root.
fn markdown_files() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, rel: &Path, out: &mut Vec<(PathBuf, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for p in entries {
            let name = rel.join(p.file_name().unwrap());
            if p.is_dir() {
                walk(&p, &name, out);
            } else if p.extension().is_some_and(|e| e == "md") {
                out.push((name, std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    for f in ["README.md", "ARCHITECTURE.md", "SECURITY.md", "BENCHMARKS.md", "CHANGELOG.md"] {
        out.push((PathBuf::from(f), std::fs::read_to_string(root().join(f)).unwrap()));
    }
    walk(&root().join("docs"), Path::new("docs"), &mut out);
    out
}

#[test]
fn every_relative_link_of_the_readme_and_the_book_leads_somewhere() {
    let files = markdown_files();
    let broken = xtask::broken_links(&files, |p| root().join(p).exists());
    assert!(broken.is_empty(), "links that lead nowhere:\n{}", broken.join("\n"));
    // Every page of the book is in its table of contents, and the README leads to it.
    let summary = &files.iter().find(|(p, _)| p == Path::new("docs/SUMMARY.md")).expect("docs/SUMMARY.md").1;
    let listed: Vec<String> = xtask::markdown_links(summary).into_iter().map(|(_, t)| t).collect();
    for (p, _) in files.iter().filter(|(p, _)| p.starts_with("docs") && p != Path::new("docs/SUMMARY.md")) {
        let rel = p.strip_prefix("docs").unwrap().to_string_lossy().into_owned();
        assert!(listed.contains(&rel), "docs/{rel} is not in docs/SUMMARY.md");
    }
    let readme = &files[0].1;
    assert!(readme.contains("](docs/SUMMARY.md)"), "the README does not lead to the book");
}

#[test]
fn broken_links_finds_missing_files_and_anchors_and_skips_code() {
    let files = vec![
        (
            PathBuf::from("README.md"),
            "# Top\n\n[a](docs/a.md) [b](docs/a.md#the-a-page) [gone](docs/gone.md) [web](https://x.example/y)\n\
             `[not](a link)` and\n```\n[nor](this.md)\n```\n[self](#top) [bad](#nowhere)\n"
                .to_string(),
        ),
        (PathBuf::from("docs/a.md"), "# The `a` page!\n\n[up](../README.md#top) [side](b.md)\n".to_string()),
    ];
    let exists = |p: &Path| [Path::new("README.md"), Path::new("docs/a.md")].contains(&p);
    let broken = xtask::broken_links(&files, exists);
    assert_eq!(
        broken,
        ["README.md:3: docs/gone.md: no such file", "README.md:8: #nowhere: no heading makes #nowhere", "docs/a.md:3: b.md: no such file"]
    );
    assert_eq!(
        xtask::heading_anchors("# The `a` page!\n## Inference proxy: `tandem proxy`\n"),
        ["the-a-page", "inference-proxy-tandem-proxy"]
    );
}
