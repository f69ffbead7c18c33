//! The `config` fuzz check: the controller's configuration file (`tandem.toml`),
//! `control::config::parse`.
//!
//! Input: the file's text. Properties: no panic; an accepted file gives settings within the
//! bounds the file's checks promise. Shared by `fuzz_targets/config.rs` and
//! `crates/control/tests/fuzz_regressions.rs`.

/// Runs one input; panics on a bug.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok((s, _security)) = control::config::parse(text) else { return };
    assert!(s.lease >= 1, "lease {}", s.lease);
    assert!(s.heartbeat_ms as i64 * 2 <= s.lease * 1000, "heartbeat {} ms with a {} s lease", s.heartbeat_ms, s.lease);
    assert!((1..=slurmcli::MAX_ARRAY_SIZE_CAP).contains(&s.max_array), "max_array {}", s.max_array);
    for p in &s.cluster.partitions {
        assert!(p.default_time <= p.max_time, "partition {}: default_time above max_time", p.name);
    }
}
