//! The `hostlist` fuzz check: `slurmcli::expand` and `slurmcli::compress`.
//!
//! Input: a hostlist (`node[1-4,7],login`). Properties: when it expands, the compressed form of
//! the names expands to the same set of names; and for the input's lines taken as plain host
//! names (letters, digits, `-._`, at most `MAX_HOST_NAME` bytes), `expand(compress(names))` is
//! the same set. Shared by `fuzz_targets/hostlist.rs` and
//! `crates/slurmcli/tests/fuzz_regressions.rs`.

use std::collections::BTreeSet;

/// Most names an expansion may give (sbatch's own bound is 100,000; a small one keeps runs fast).
const LIMIT: usize = 1_000;

/// Runs one input; panics on a bug.
pub fn check(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(names) = slurmcli::expand(s, LIMIT) {
        assert!(names.len() <= LIMIT, "{} names from {s:?}", names.len());
        let c = slurmcli::compress(&names);
        let again = slurmcli::expand(&c, LIMIT).unwrap_or_else(|e| panic!("compress({s:?}) = {c:?} does not expand: {e}"));
        let set = |v: &[String]| v.iter().cloned().collect::<BTreeSet<String>>();
        assert_eq!(set(&again), set(&names), "{s:?} and compress(expand({s:?})) = {c:?} name different hosts");
    }
    // Plain host names (at most MAX_HOST_NAME bytes, as `expand` gives), one a line.
    let plain = |n: &str| {
        !n.is_empty()
            && n.len() <= slurmcli::MAX_HOST_NAME
            && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
    };
    let names: Vec<String> = s.lines().map(String::from).collect();
    if !names.is_empty() && names.iter().all(|n| plain(n)) {
        let c = slurmcli::compress(&names);
        let back = slurmcli::expand(&c, names.len() + 1).unwrap_or_else(|e| panic!("compress({names:?}) = {c:?} does not expand: {e}"));
        let want: BTreeSet<&String> = names.iter().collect();
        let got: BTreeSet<&String> = back.iter().collect();
        assert_eq!(got, want, "expand(compress({names:?})) = expand({c:?}) differs");
    }
}
