//! Replays the `k8s_body` fuzz target's inputs under plain `cargo test`: every file in
//! `fuzz/regressions/k8s_body/` and `fuzz/corpus/k8s_body/`, through the same check the
//! fuzzer runs (fuzz/checks/k8s_body.rs, included here).

use std::path::PathBuf;

#[path = "../../../fuzz/checks/k8s_body.rs"]
mod k8s_body;

#[test]
fn k8s_body_regressions() {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut failed = Vec::new();
    for dir in ["regressions", "corpus"] {
        let dir = fuzz.join(dir).join("k8s_body");
        let mut files: Vec<PathBuf> =
            std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.unwrap().path()).collect();
        files.sort();
        assert!(!files.is_empty(), "{} is empty", dir.display());
        for f in files {
            let data = std::fs::read(&f).unwrap();
            if std::panic::catch_unwind(|| k8s_body::check(&data)).is_err() {
                failed.push(f.display().to_string());
            }
        }
    }
    assert!(failed.is_empty(), "inputs that fail the k8s_body check:\n{}", failed.join("\n"));
}
