//! Fuzz target `formats`: runs [`check`] (fuzz/checks/formats.rs, which the workspace's replay test
//! of fuzz/regressions/formats/ includes too).
#![no_main]

#[path = "../checks/formats.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::check(data));
