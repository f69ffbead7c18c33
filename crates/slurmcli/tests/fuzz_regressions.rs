//! Replays the `sbatch`, `formats` and `hostlist` fuzz targets' inputs under plain `cargo test`
//! (fuzz/replay.rs), through the same checks the fuzzer runs (fuzz/checks/, included here).

#[path = "../../../fuzz/replay.rs"]
mod replay;

#[path = "../../../fuzz/checks/sbatch.rs"]
mod sbatch;

#[path = "../../../fuzz/checks/formats.rs"]
mod formats;

#[path = "../../../fuzz/checks/hostlist.rs"]
mod hostlist;

#[test]
fn sbatch_regressions() {
    replay::replay("sbatch", sbatch::check);
}

#[test]
fn formats_regressions() {
    replay::replay("formats", formats::check);
}

#[test]
fn hostlist_regressions() {
    replay::replay("hostlist", hostlist::check);
}
