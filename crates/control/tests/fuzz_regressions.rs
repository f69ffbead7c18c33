//! Replays the `config` fuzz target's inputs under plain `cargo test` (fuzz/replay.rs), through
//! the same check the fuzzer runs (fuzz/checks/config.rs, included here).

#[path = "../../../fuzz/replay.rs"]
mod replay;

#[path = "../../../fuzz/checks/config.rs"]
mod config;

#[test]
fn config_regressions() {
    replay::replay("config", config::check);
}
