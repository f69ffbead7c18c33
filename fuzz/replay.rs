//! The replay of fuzz inputs under plain `cargo test`, shared by each crate's
//! `tests/fuzz_regressions.rs` (included with `#[path]`): every file in
//! `fuzz/regressions/TARGET/` (inputs that once found a bug, and a seed) and
//! `fuzz/corpus/TARGET/` (the seed corpus), through the same check the fuzzer runs
//! (`fuzz/checks/TARGET.rs`), so a fixed bug stays fixed without nightly or cargo-fuzz.

use std::path::PathBuf;

/// Runs `check` on every file of the target's regression and seed directories; fails naming
/// each input that panics. Each directory must hold at least one file.
pub fn replay(target: &str, check: fn(&[u8])) {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut failed = Vec::new();
    for dir in ["regressions", "corpus"] {
        let dir = fuzz.join(dir).join(target);
        let mut files: Vec<PathBuf> =
            std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.unwrap().path()).collect();
        files.sort();
        assert!(!files.is_empty(), "{} is empty", dir.display());
        for f in files {
            let data = std::fs::read(&f).unwrap();
            if std::panic::catch_unwind(|| check(&data)).is_err() {
                failed.push(f.display().to_string());
            }
        }
    }
    assert!(failed.is_empty(), "inputs that fail the {target} check:\n{}", failed.join("\n"));
}
