//! Fuzz target `service_spec`: runs [`check`] (fuzz/checks/service_spec.rs, which the workspace's replay test
//! of fuzz/regressions/service_spec/ includes too).
#![no_main]

#[path = "../checks/service_spec.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::check(data));
