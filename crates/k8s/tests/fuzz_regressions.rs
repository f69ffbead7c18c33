//! Replays the `k8s_body` fuzz target's inputs under plain `cargo test` (fuzz/replay.rs), through
//! the same check the fuzzer runs (fuzz/checks/k8s_body.rs, included here).

#[path = "../../../fuzz/replay.rs"]
mod replay;

#[path = "../../../fuzz/checks/k8s_body.rs"]
mod k8s_body;

#[test]
fn k8s_body_regressions() {
    replay::replay("k8s_body", k8s_body::check);
}
