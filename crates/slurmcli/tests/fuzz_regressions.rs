//! Replays the fuzz targets' inputs under plain `cargo test`: every file in
//! `fuzz/regressions/<target>/` (inputs that once found a bug, and a seed) and
//! `fuzz/corpus/<target>/` (the seed corpus) for the `sbatch`, `formats` and `hostlist` targets,
//! through the same checks the fuzzer runs (fuzz/checks/, included here), so a fixed bug stays
//! fixed without nightly or cargo-fuzz.

use std::path::PathBuf;

#[path = "../../../fuzz/checks/sbatch.rs"]
mod sbatch;

#[path = "../../../fuzz/checks/formats.rs"]
mod formats;

#[path = "../../../fuzz/checks/hostlist.rs"]
mod hostlist;

/// Runs `check` on every file of the target's regression and seed directories; fails naming
/// each input that panics. The regression directory must hold at least one file.
fn replay(target: &str, check: fn(&[u8])) {
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

#[test]
fn sbatch_regressions() {
    replay("sbatch", sbatch::check);
}

#[test]
fn formats_regressions() {
    replay("formats", formats::check);
}

#[test]
fn hostlist_regressions() {
    replay("hostlist", hostlist::check);
}
