//! Fuzz target `config`: runs [`check`] (fuzz/checks/config.rs, which the workspace's replay test
//! of fuzz/regressions/config/ includes too).
#![no_main]

#[path = "../checks/config.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::check(data));
