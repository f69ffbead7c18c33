//! Repository tidy checks, run as ordinary tests (`cargo test -p xtask`): the dependency arrows
//! of ARCHITECTURE.md, banned APIs in the pure crates, and a `//!` doc at the top of every
//! source file. Nothing here is linked into Tandem.

/// Workspace crates and the workspace crates each may depend on (normal dependencies).
/// This table and the one in ARCHITECTURE.md say the same thing; the test reads this one.
pub const ARROWS: &[(&str, &[&str])] = &[
    ("model", &[]),
    ("sched", &["model"]),
    ("trace", &["model"]),
    ("slurmcli", &["model"]),
    ("control", &["sched", "slurmcli", "model"]),
    ("store", &["control"]),
    ("sim", &["sched", "trace", "model"]),
    ("balance", &[]),
    ("exec", &[]),
    ("tandem", &["sim", "sched", "trace", "model", "slurmcli", "control", "store", "balance", "exec"]),
    ("xtask", &[]),
];

/// The only crate that may use `unsafe` (it sets its own lints; every other crate takes the
/// workspace's, which forbid it).
pub const UNSAFE_ALLOWED: &str = "exec";

/// Crates that must stay pure: no IO, no clock, no unseeded randomness, no async runtime.
pub const PURE: &[&str] = &["model", "sched", "sim", "slurmcli", "control", "balance"];

/// Strings that must not appear in a pure crate's source.
pub const BANNED: &[&str] =
    &["std::fs", "std::net", "tokio", "Instant::now", "SystemTime", "thread_rng", "rand::rng(", "std::process", "std::env", "File::open"];
