//! Fuzz target `hostlist`: runs [`check`] (fuzz/checks/hostlist.rs, which the workspace's replay test
//! of fuzz/regressions/hostlist/ includes too).
#![no_main]

#[path = "../checks/hostlist.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::check(data));
