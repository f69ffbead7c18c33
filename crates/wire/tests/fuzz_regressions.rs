//! Replays the `service_spec` fuzz target's inputs under plain `cargo test` (fuzz/replay.rs), through
//! the same check the fuzzer runs (fuzz/checks/service_spec.rs, included here).

#[path = "../../../fuzz/replay.rs"]
mod replay;

#[path = "../../../fuzz/checks/service_spec.rs"]
mod service_spec;

#[test]
fn service_spec_regressions() {
    replay::replay("service_spec", service_spec::check);
}
