//! Tidy: the architecture's rules, enforced.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

#[test]
fn dependency_arrows_match_architecture() {
    let out = Command::new(env!("CARGO")).args(["metadata", "--format-version", "1", "--no-deps"]).current_dir(root()).output().unwrap();
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let members: Vec<&str> = meta["packages"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    let mut errors = Vec::new();
    for name in &members {
        if !xtask::ARROWS.iter().any(|(n, _)| n == name) {
            errors.push(format!("crate {name} is not in the ARROWS table (and ARCHITECTURE.md)"));
        }
    }
    for p in meta["packages"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let allowed = xtask::ARROWS.iter().find(|(n, _)| *n == name).map(|(_, a)| *a).unwrap_or(&[]);
        for d in p["dependencies"].as_array().unwrap() {
            let dep = d["name"].as_str().unwrap();
            let normal = d["kind"].is_null();
            if members.contains(&dep) && normal && !allowed.contains(&dep) {
                errors.push(format!("{name} -> {dep} is not an allowed arrow"));
            }
        }
    }
    // ARCHITECTURE.md names every crate.
    let arch = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    for name in &members {
        if !arch.contains(&format!("`{name}`")) {
            errors.push(format!("ARCHITECTURE.md does not name `{name}`"));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn pure_crates_do_no_io() {
    let mut errors = Vec::new();
    for krate in xtask::PURE {
        let mut files = Vec::new();
        rust_files(&root().join("crates").join(krate).join("src"), &mut files);
        assert!(!files.is_empty(), "no sources for {krate}");
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                for b in xtask::BANNED {
                    if code.contains(b) {
                        errors.push(format!("{}:{}: `{b}` in a pure crate", f.display(), n + 1));
                    }
                }
            }
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn every_source_file_starts_with_a_module_doc() {
    let mut files = Vec::new();
    rust_files(&root().join("crates"), &mut files);
    let missing: Vec<String> = files
        .iter()
        .filter(|f| !std::fs::read_to_string(f).unwrap().trim_start().starts_with("//!"))
        .map(|f| f.display().to_string())
        .collect();
    assert!(missing.is_empty(), "files without a //! doc:\n{}", missing.join("\n"));
}

#[test]
fn only_exec_may_use_unsafe() {
    // Every crate but `exec` takes the workspace's lints, which forbid `unsafe`.
    let mut errors = Vec::new();
    for e in std::fs::read_dir(root().join("crates")).unwrap() {
        let dir = e.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let takes_workspace = manifest.contains("[lints]\nworkspace = true");
        if name != xtask::UNSAFE_ALLOWED && !takes_workspace {
            errors.push(format!("crates/{name}/Cargo.toml does not take the workspace lints (which forbid unsafe)"));
        }
    }
    let ws = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    assert!(ws.contains("unsafe_code = \"forbid\""), "the workspace no longer forbids unsafe");
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}
