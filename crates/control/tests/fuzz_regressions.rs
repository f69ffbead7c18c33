//! Replays the `config` fuzz target's inputs under plain `cargo test`: every file in
//! `fuzz/regressions/config/` and `fuzz/corpus/config/`, through the same check the
//! fuzzer runs (fuzz/checks/config.rs, included here).

use std::path::PathBuf;

#[path = "../../../fuzz/checks/config.rs"]
mod config;

#[test]
fn config_regressions() {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut failed = Vec::new();
    for dir in ["regressions", "corpus"] {
        let dir = fuzz.join(dir).join("config");
        let mut files: Vec<PathBuf> =
            std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.unwrap().path()).collect();
        files.sort();
        assert!(!files.is_empty(), "{} is empty", dir.display());
        for f in files {
            let data = std::fs::read(&f).unwrap();
            if std::panic::catch_unwind(|| config::check(&data)).is_err() {
                failed.push(f.display().to_string());
            }
        }
    }
    assert!(failed.is_empty(), "inputs that fail the config check:\n{}", failed.join("\n"));
}
