//! Fuzz target `sbatch`: runs [`check`] (fuzz/checks/sbatch.rs, which the workspace's replay test
//! of fuzz/regressions/sbatch/ includes too).
#![no_main]

#[path = "../checks/sbatch.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::check(data));
