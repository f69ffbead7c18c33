//! Replays the `service_spec` fuzz target's inputs under plain `cargo test`: every file in
//! `fuzz/regressions/service_spec/` and `fuzz/corpus/service_spec/`, through the same check the
//! fuzzer runs (fuzz/checks/service_spec.rs, included here).

use std::path::PathBuf;

#[path = "../../../fuzz/checks/service_spec.rs"]
mod service_spec;

#[test]
fn service_spec_regressions() {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut failed = Vec::new();
    for dir in ["regressions", "corpus"] {
        let dir = fuzz.join(dir).join("service_spec");
        let mut files: Vec<PathBuf> =
            std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.unwrap().path()).collect();
        files.sort();
        assert!(!files.is_empty(), "{} is empty", dir.display());
        for f in files {
            let data = std::fs::read(&f).unwrap();
            if std::panic::catch_unwind(|| service_spec::check(&data)).is_err() {
                failed.push(f.display().to_string());
            }
        }
    }
    assert!(failed.is_empty(), "inputs that fail the service_spec check:\n{}", failed.join("\n"));
}
