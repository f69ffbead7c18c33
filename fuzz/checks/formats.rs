//! The `formats` fuzz check: Slurm's value formats in `slurmcli` (time limits, memory sizes,
//! GPU and GRES requests, job arrays, dependencies, signals, begin times, output patterns,
//! `scontrol create|update reservation`'s words).
//!
//! Input: the first byte picks the parser (`t` time, `m` memory, `g` --gpus, `G` --gres, `a`
//! array, `d` dependency, `s` signal, `b` begin, `p` output pattern, `f` format_time, `r`
//! reservation words (split on white space); any other
//! byte picks one by its value), the rest is the value. Shared by `fuzz_targets/formats.rs` and
//! `crates/slurmcli/tests/fuzz_regressions.rs`.

/// A fixed "now" (2026-09-21), as the caller passes the clock.
const NOW: i64 = 1_790_000_000;

const KINDS: &[u8] = b"tmgGadsbpfr";

/// The reservation flags `scontrol` takes here.
const FLAGS: &[&str] = &["MAINT", "FLEX", "OVERLAP", "IGNORE_JOBS", "DAILY", "WEEKLY", "SPEC_NODES", "MAGNETIC"];

/// Runs one input; panics on a bug.
pub fn check(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else { return };
    let kind = if KINDS.contains(&first) { first } else { KINDS[first as usize % KINDS.len()] };
    if kind == b'f' {
        // format_time on any number; what it prints for a real limit must parse back.
        let mut b = [0u8; 8];
        let n = rest.len().min(8);
        b[..n].copy_from_slice(&rest[..n]);
        let secs = i64::from_le_bytes(b);
        let shown = slurmcli::format_time(Some(secs));
        if (60..=36_500 * 86_400).contains(&secs) && secs % 60 == 0 {
            assert_eq!(slurmcli::parse_time(&shown), Ok(Some(secs)), "format_time({secs}) = {shown:?} does not parse back");
        }
        return;
    }
    let Ok(s) = std::str::from_utf8(rest) else { return };
    match kind {
        b't' => {
            if let Ok(Some(t)) = slurmcli::parse_time(s) {
                assert!(t >= 60 && t % 60 == 0 && t <= 36_500 * 86_400, "time limit {t} from {s:?}");
                let shown = slurmcli::format_time(Some(t));
                assert_eq!(slurmcli::parse_time(&shown), Ok(Some(t)), "{s:?} -> {t} -> {shown:?} does not parse back");
            }
        }
        b'm' => {
            if let Ok(b) = slurmcli::parse_memory(s) {
                assert!(b < 1 << 60, "memory {b} from {s:?}");
            }
        }
        b'g' => {
            if let Ok((ty, n)) = slurmcli::parse_gpus(s) {
                assert!((1..=100_000).contains(&n), "GPU count {n} from {s:?}");
                assert!(ty.is_none_or(|t| !t.is_empty() && !t.contains(':')), "GPU type from {s:?}");
            }
        }
        b'G' => {
            if let Ok(items) = slurmcli::parse_gres(s) {
                assert!(!items.is_empty() && items.iter().all(|(n, _, c)| !n.is_empty() && *c >= 1), "{items:?} from {s:?}");
            }
        }
        b'a' => {
            if let Ok(a) = slurmcli::parse_array(s) {
                assert!(!a.indices.is_empty(), "an empty array from {s:?}");
                assert!(a.indices.windows(2).all(|w| w[0] < w[1]), "indices not ascending and unique from {s:?}");
                assert!(a.indices.iter().all(|&i| i < slurmcli::MAX_ARRAY_SIZE_CAP), "an index at or above the cap from {s:?}");
                assert!(a.max_running != Some(0), "%0 accepted from {s:?}");
            }
        }
        b'd' => {
            if let Ok(d) = slurmcli::parse_dependency(s) {
                assert!(!d.is_empty(), "no dependencies from {s:?}");
            }
        }
        b's' => {
            if let Ok(sig) = slurmcli::parse_signal(s) {
                assert!((1..=64).contains(&sig.number) && (0..=65_535).contains(&sig.before), "{sig:?} from {s:?}");
            }
            if let Some(n) = slurmcli::signal_number(s) {
                assert!((1..=64).contains(&n), "signal {n} from {s:?}");
            }
        }
        b'b' => {
            for now in [NOW, 0, 86_399] {
                let _ = slurmcli::parse_begin(s, now);
            }
        }
        b'p' => {
            let out = slurmcli::expand_pattern(s, 42, "job", Some((40, 2)), "node1", "alice");
            if !s.contains('%') {
                assert_eq!(out, s, "a pattern without % changed");
            }
            let _ = slurmcli::expand_pattern(s, u64::MAX, "", None, "", "");
        }
        b'r' => {
            let words: Vec<String> = s.split_whitespace().map(str::to_string).collect();
            if let Ok(spec) = slurmcli::resv::parse_reservation(&words, NOW) {
                let _ = slurmcli::resv::check_create(&spec);
                assert!(spec.name.as_deref().is_none_or(slurmcli::resv::valid_resv_name), "{spec:?} from {s:?}");
                assert!(spec.node_cnt.is_none_or(|n| n >= 1), "{spec:?} from {s:?}");
                assert!(spec.nodes.as_ref().is_none_or(|n| !n.is_empty() && n.len() <= slurmcli::resv::MAX_RESV_NODES), "{s:?}");
                for l in [&spec.users, &spec.accounts].into_iter().flatten() {
                    assert!(!l.names.is_empty() && l.names.iter().all(|n| slurmcli::resv::valid_resv_name(n)), "{l:?} from {s:?}");
                }
                for f in spec.flags_set.iter().chain(&spec.flags_clear) {
                    assert!(FLAGS.contains(&f.as_str()), "flag {f} from {s:?}");
                }
                assert!(spec.duration.is_none_or(|d| d >= 60), "{spec:?} from {s:?}");
            }
        }
        _ => unreachable!(),
    }
}
