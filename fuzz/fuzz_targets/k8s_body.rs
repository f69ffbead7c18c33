//! Fuzz target `k8s_body`: runs [`check`] (fuzz/checks/k8s_body.rs, which the workspace's replay test
//! of fuzz/regressions/k8s_body/ includes too).
#![no_main]

#[path = "../checks/k8s_body.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::check(data));
