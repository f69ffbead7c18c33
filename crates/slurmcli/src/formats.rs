//! Slurm's value formats: time limits, memory sizes, GRES and GPU requests, job arrays,
//! dependencies, signals and begin times.

use model::{DepKind, Dependency, JobId, Time};
use serde::{Deserialize, Serialize};

use crate::Invalid;

fn num(s: &str, what: &str, max: u64) -> Result<u64, Invalid> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Invalid::new(format!("invalid {what} {s:?}: expected a non-negative whole number")));
    }
    let v: u64 = s.parse().map_err(|_| Invalid::new(format!("invalid {what} {s:?}: too large")))?;
    if v > max {
        return Err(Invalid::new(format!("invalid {what} {s:?}: at most {max}")));
    }
    Ok(v)
}

/// Parses a Slurm time limit: `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`; `0`, `UNLIMITED`
/// or `INFINITE` mean no limit (`None`). Slurm has a one-minute resolution, so seconds are
/// rounded up to whole minutes.
pub fn parse_time(s: &str) -> Result<Option<Time>, Invalid> {
    let t = s.trim();
    let bad = || Invalid::new(format!("invalid time limit {s:?}: use minutes, M:S, H:M:S, D-H, D-H:M or D-H:M:S"));
    if t.eq_ignore_ascii_case("unlimited") || t.eq_ignore_ascii_case("infinite") {
        return Ok(None);
    }
    if t.is_empty() {
        return Err(bad());
    }
    let (days, rest) = match t.split_once('-') {
        Some((d, r)) => (Some(num(d, "days in time limit", 36_500).map_err(|_| bad())?), r),
        None => (None, t),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    let n = |p: &str| num(p, "time limit", 1_000_000_000).map_err(|_| bad());
    let secs: u64 = match (days, parts.as_slice()) {
        (None, [m]) => n(m)? * 60,
        (None, [m, sec]) => n(m)? * 60 + n(sec)?,
        (None, [h, m, sec]) => n(h)? * 3600 + n(m)? * 60 + n(sec)?,
        (Some(d), [h]) => d * 86400 + n(h)? * 3600,
        (Some(d), [h, m]) => d * 86400 + n(h)? * 3600 + n(m)? * 60,
        (Some(d), [h, m, sec]) => d * 86400 + n(h)? * 3600 + n(m)? * 60 + n(sec)?,
        _ => return Err(bad()),
    };
    if secs == 0 && days.is_none() && parts.len() == 1 {
        return Ok(None); // "0" is "no limit"
    }
    if secs > 36_500 * 86400 {
        return Err(Invalid::new(format!("invalid time limit {s:?}: more than 100 years")));
    }
    Ok(Some((secs.div_ceil(60) * 60).max(60) as Time))
}

/// Formats seconds the way squeue does: `M:SS`, `H:MM:SS` or `D-HH:MM:SS`; `UNLIMITED` for none.
pub fn format_time(secs: Option<Time>) -> String {
    secs.map_or_else(|| "UNLIMITED".into(), |s| compact_time(s.max(0)))
}

/// `M:SS`, `H:MM:SS` or `D-HH:MM:SS` of a non-negative duration (squeue's `%M` shape).
pub(crate) fn compact_time(s: Time) -> String {
    let (d, h, m, sec) = (s / 86400, (s % 86400) / 3600, (s % 3600) / 60, s % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{sec:02}")
    } else if h > 0 {
        format!("{h}:{m:02}:{sec:02}")
    } else {
        format!("{m}:{sec:02}")
    }
}

/// Parses a memory size: a number with an optional unit K, M, G or T (binary; default M, as
/// Slurm). `0` means "all the node's memory" and is returned as `0`.
pub fn parse_memory(s: &str) -> Result<u64, Invalid> {
    let t = s.trim();
    let digits: String = t.chars().take_while(|c| c.is_ascii_digit()).collect();
    let unit = t[digits.len()..].trim();
    let unit = unit.strip_suffix(['B', 'b']).unwrap_or(unit);
    let mult: u64 = match unit.to_ascii_uppercase().as_str() {
        "" | "M" | "MI" => 1 << 20,
        "K" | "KI" => 1 << 10,
        "G" | "GI" => 1 << 30,
        "T" | "TI" => 1 << 40,
        _ => return Err(Invalid::new(format!("invalid memory specification {s:?}: use a number with K, M, G or T (default M)"))),
    };
    let v = num(&digits, "memory size", u64::MAX).map_err(|_| Invalid::new(format!("invalid memory specification {s:?}")))?;
    v.checked_mul(mult).filter(|b| *b < (1u64 << 60)).ok_or_else(|| Invalid::new(format!("invalid memory specification {s:?}: too large")))
}

/// Parses `--gpus=[type:]N` into (type, count).
pub fn parse_gpus(s: &str) -> Result<(Option<String>, u32), Invalid> {
    let (ty, n) = match s.rsplit_once(':') {
        Some((t, n)) => (Some(t), n),
        None => (None, s),
    };
    let n =
        num(n.trim(), "GPU count", 100_000).map_err(|_| Invalid::new(format!("invalid GPU specification {s:?}: use [type:]count")))? as u32;
    if n == 0 {
        return Err(Invalid::new(format!("invalid GPU specification {s:?}: count must be positive")));
    }
    let ty = match ty {
        Some(t) if t.is_empty() || t.contains(':') || !t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.') => {
            return Err(Invalid::new(format!("invalid GPU type in {s:?}")));
        }
        Some(t) => Some(t.to_ascii_lowercase()),
        None => None,
    };
    Ok((ty, n))
}

/// Parses `--gres=name[:type][:count][,...]`. GPUs come back as (`gpu`, type, count); other
/// generic resources as (name, None, count).
pub fn parse_gres(s: &str) -> Result<Vec<(String, Option<String>, u64)>, Invalid> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim) {
        let parts: Vec<&str> = item.split(':').collect();
        let bad = || Invalid::new(format!("invalid generic resource (gres) specification {item:?}: use name[:type][:count]"));
        let valid = |x: &str| !x.is_empty() && x.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
        if !parts.iter().all(|p| valid(p)) {
            return Err(bad());
        }
        let count = |c: &str| num(c, "gres count", 1_000_000).map_err(|_| bad());
        let (name, ty, n) = match parts.as_slice() {
            [name] => (name.to_string(), None, 1),
            [name, x] if x.bytes().all(|b| b.is_ascii_digit()) => (name.to_string(), None, count(x)?),
            [name, ty] => (name.to_string(), Some(ty.to_ascii_lowercase()), 1),
            [name, ty, c] => (name.to_string(), Some(ty.to_ascii_lowercase()), count(c)?),
            _ => return Err(bad()),
        };
        if n == 0 {
            return Err(bad());
        }
        out.push((name.to_ascii_lowercase(), ty, n));
    }
    Ok(out)
}

/// A parsed `--array` specification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArraySpec {
    /// Task indices, ascending, without duplicates.
    pub indices: Vec<u32>,
    /// Most tasks running at once (`%N`).
    pub max_running: Option<u32>,
}

/// Slurm's default MaxArraySize: indices run from 0 to 1000. The controller enforces its
/// configured limit (`max_array_size`, this by default).
pub const MAX_ARRAY_SIZE: u32 = 1001;

/// Slurm's hard cap on MaxArraySize: no configuration allows an index at or above it.
pub const MAX_ARRAY_SIZE_CAP: u32 = 4_000_001;

/// Parses `--array=0-15:4%2`, `1,3,5-7`, ... (indices below [`MAX_ARRAY_SIZE_CAP`]; the
/// controller checks its own, usually lower, `MaxArraySize`).
pub fn parse_array(s: &str) -> Result<ArraySpec, Invalid> {
    let bad = |why: &str| Invalid::new(format!("invalid job array specification {s:?}: {why}"));
    let (list, max) = match s.split_once('%') {
        Some((l, m)) => {
            (l, Some(num(m, "array limit", MAX_ARRAY_SIZE_CAP as u64).map_err(|_| bad("%N must be a positive number"))? as u32))
        }
        None => (s, None),
    };
    if max == Some(0) {
        return Err(bad("%N must be positive"));
    }
    let mut idx = Vec::new();
    for item in list.split(',') {
        let (range, step) = match item.split_once(':') {
            Some((r, st)) => (r, num(st, "array step", MAX_ARRAY_SIZE_CAP as u64).map_err(|_| bad("step must be a positive number"))?),
            None => (item, 1),
        };
        if step == 0 {
            return Err(bad("step must be positive"));
        }
        let n = |x: &str| num(x, "array index", u64::MAX).map_err(|_| bad("indices are non-negative whole numbers"));
        let (a, b) = match range.split_once('-') {
            Some((a, b)) => (n(a)?, n(b)?),
            None => (n(range)?, n(range)?),
        };
        if a > b {
            return Err(bad("a range must go upwards"));
        }
        if b >= MAX_ARRAY_SIZE_CAP as u64 {
            return Err(bad(&format!("the largest index any configuration allows is {}", MAX_ARRAY_SIZE_CAP - 1)));
        }
        // Overlapping items would repeat indices before the dedup below: bound the work and the
        // memory (`0-4000000,0-4000000,...` asked for gigabytes).
        if idx.len() as u64 + (b - a) / step + 1 > MAX_ARRAY_SIZE_CAP as u64 {
            return Err(bad(&format!("more than {MAX_ARRAY_SIZE_CAP} tasks in all")));
        }
        idx.extend((a..=b).step_by(step as usize).map(|x| x as u32));
    }
    idx.sort_unstable();
    idx.dedup();
    Ok(ArraySpec { indices: idx, max_running: max })
}

/// Parses `--dependency=afterok:12:13,afterany:14,singleton`. Only `,` (all of them) is
/// supported; `?` (any of them) is refused with a clear message.
pub fn parse_dependency(s: &str) -> Result<Vec<Dependency>, Invalid> {
    if s.contains('?') {
        return Err(Invalid::new(format!("dependency {s:?}: '?' (any of) is not supported; use ',' (all of)")));
    }
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim) {
        if item == "singleton" {
            out.push(Dependency { kind: DepKind::Singleton, job: None });
            continue;
        }
        let mut parts = item.split(':');
        let kind = match parts.next().unwrap_or("") {
            "after" => DepKind::After,
            "afterok" => DepKind::AfterOk,
            "afternotok" => DepKind::AfterNotOk,
            "afterany" => DepKind::AfterAny,
            other => {
                return Err(Invalid::new(format!(
                    "invalid dependency {item:?}: unknown type {other:?} (after, afterok, afternotok, afterany, singleton)"
                )));
            }
        };
        let mut any = false;
        for j in parts {
            let id = num(j.trim(), "job id", u64::MAX).map_err(|_| Invalid::new(format!("invalid dependency {item:?}: job id {j:?}")))?;
            out.push(Dependency { kind, job: Some(JobId(id)) });
            any = true;
        }
        if !any {
            return Err(Invalid::new(format!("invalid dependency {item:?}: expected {item}:<job id>[:<job id>...]")));
        }
    }
    Ok(out)
}

/// A `--signal` request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signal {
    /// Signal number.
    pub number: i32,
    /// Seconds before the time limit (default 60).
    pub before: Time,
    /// Only the batch shell (`B:`), not every task.
    pub batch_only: bool,
}

/// The number of a signal given by name (`USR1`, `SIGUSR1`) or number.
pub fn signal_number(name: &str) -> Option<i32> {
    let n = name.trim();
    if let Ok(v) = n.parse::<i32>() {
        return (1..=64).contains(&v).then_some(v);
    }
    let n = n.to_ascii_uppercase();
    let n = n.strip_prefix("SIG").unwrap_or(&n);
    Some(match n {
        "HUP" => 1,
        "INT" => 2,
        "QUIT" => 3,
        "ABRT" => 6,
        "KILL" => 9,
        "USR1" => 10,
        "USR2" => 12,
        "ALRM" => 14,
        "TERM" => 15,
        "CONT" => 18,
        "STOP" => 19,
        "TSTP" => 20,
        "URG" => 23,
        "XCPU" => 24,
        "WINCH" => 28,
        _ => return None,
    })
}

/// Parses `--signal=[{R|B}:]SIG[@TIME]`.
pub fn parse_signal(s: &str) -> Result<Signal, Invalid> {
    let (flags, rest) = match s.split_once(':') {
        Some((f, r)) => (f, r),
        None => ("", s),
    };
    let batch_only = match flags {
        "" | "R" => false,
        "B" | "RB" | "BR" => true,
        _ => return Err(Invalid::new(format!("invalid --signal {s:?}: use [{{R|B}}:]SIG[@seconds]"))),
    };
    let (sig, at) = match rest.split_once('@') {
        Some((g, t)) => {
            (g, num(t, "signal time", 65_535).map_err(|_| Invalid::new(format!("invalid --signal {s:?}: time is 0..65535 seconds")))?)
        }
        None => (rest, 60),
    };
    let number = signal_number(sig).ok_or_else(|| Invalid::new(format!("invalid --signal {s:?}: unknown signal {sig:?}")))?;
    Ok(Signal { number, before: at as Time, batch_only })
}

/// Parses `--begin`: `now`, `now+N[seconds|minutes|hours|days|weeks]`, `YYYY-MM-DD[THH:MM[:SS]]`
/// or `HH:MM[:SS]` (the next such time). Absolute times are UTC. `now` is Unix seconds.
pub fn parse_begin(s: &str, now: Time) -> Result<Time, Invalid> {
    let t = s.trim();
    let bad = || Invalid::new(format!("invalid --begin {s:?}: use now+N[minutes|hours|days], YYYY-MM-DD[THH:MM[:SS]] or HH:MM[:SS]"));
    if t == "now" {
        return Ok(now);
    }
    if let Some(rel) = t.strip_prefix("now+") {
        let digits: String = rel.chars().take_while(|c| c.is_ascii_digit()).collect();
        let n = num(&digits, "offset", 10_000_000).map_err(|_| bad())? as Time;
        let mult = match &rel[digits.len()..] {
            "" | "s" | "sec" | "secs" | "second" | "seconds" => 1,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "h" | "hour" | "hours" => 3600,
            "d" | "day" | "days" => 86400,
            "w" | "week" | "weeks" => 7 * 86400,
            _ => return Err(bad()),
        };
        return Ok(now + n * mult);
    }
    let hms = |x: &str| -> Result<Time, Invalid> {
        let p: Vec<&str> = x.split(':').collect();
        let n = |v: &str, max| num(v, "time", max).map_err(|_| bad());
        match p.as_slice() {
            [h, m] => Ok(n(h, 23)? as Time * 3600 + n(m, 59)? as Time * 60),
            [h, m, sec] => Ok(n(h, 23)? as Time * 3600 + n(m, 59)? as Time * 60 + n(sec, 59)? as Time),
            _ => Err(bad()),
        }
    };
    if let Some((date, time)) = t.split_once('T').map(|(d, tm)| (d, Some(tm))).or_else(|| t.contains('-').then_some((t, None))) {
        let p: Vec<&str> = date.split('-').collect();
        let [y, m, d] = p.as_slice() else { return Err(bad()) };
        let (y, m, d) =
            (num(y, "year", 9999).map_err(|_| bad())?, num(m, "month", 12).map_err(|_| bad())?, num(d, "day", 31).map_err(|_| bad())?);
        if y < 1970 {
            return Err(bad());
        }
        // A real calendar day (no 2026-02-30), midnight UTC.
        let day = jiff::civil::Date::new(y as i16, m as i8, d as i8).map_err(|_| bad())?;
        let midnight = jiff::tz::Offset::UTC.to_timestamp(day.to_datetime(jiff::civil::Time::midnight())).map_err(|_| bad())?;
        return Ok(midnight.as_second() + time.map(hms).transpose()?.unwrap_or(0));
    }
    let secs = hms(t)?;
    let midnight = now - now.rem_euclid(86400);
    let today = midnight + secs;
    Ok(if today >= now { today } else { today + 86400 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(parse_time("30").unwrap(), Some(1800));
        assert_eq!(parse_time("1:30").unwrap(), Some(120), "90 s rounds up to 2 minutes");
        assert_eq!(parse_time("2:00:00").unwrap(), Some(7200));
        assert_eq!(parse_time("1-0").unwrap(), Some(86400));
        assert_eq!(parse_time("1-2:30").unwrap(), Some(86400 + 2 * 3600 + 1800));
        assert_eq!(parse_time("1-02:30:10").unwrap(), Some(86400 + 2 * 3600 + 1860));
        assert_eq!(parse_time("0").unwrap(), None);
        assert_eq!(parse_time("UNLIMITED").unwrap(), None);
        for bad in ["", "abc", "-5", "1-", "1:2:3:4", "1-2:3:4:5", "1.5", "99999999999999999999", " 1 h", "1--2"] {
            assert!(parse_time(bad).is_err(), "{bad:?} should be refused");
        }
        assert_eq!(format_time(Some(90)), "1:30");
        assert_eq!(format_time(Some(3 * 3600 + 5)), "3:00:05");
        assert_eq!(format_time(Some(2 * 86400 + 61)), "2-00:01:01");
        assert_eq!(format_time(None), "UNLIMITED");
    }

    #[test]
    fn memory() {
        assert_eq!(parse_memory("16G").unwrap(), 16 << 30);
        assert_eq!(parse_memory("512").unwrap(), 512 << 20);
        assert_eq!(parse_memory("1TB").unwrap(), 1 << 40);
        assert_eq!(parse_memory("100k").unwrap(), 100 << 10);
        assert_eq!(parse_memory("0").unwrap(), 0);
        for bad in ["", "G", "-1G", "1.5G", "12X", "99999999999999999999T", "1 G G"] {
            assert!(parse_memory(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn gpus_and_gres() {
        assert_eq!(parse_gpus("4").unwrap(), (None, 4));
        assert_eq!(parse_gpus("H100:8").unwrap(), (Some("h100".into()), 8));
        assert!(parse_gpus("0").is_err() && parse_gpus("h100:").is_err() && parse_gpus("a:b:1").is_err() && parse_gpus("x").is_err());
        assert_eq!(parse_gres("gpu:2").unwrap(), vec![("gpu".into(), None, 2)]);
        assert_eq!(parse_gres("gpu:a100:4,nic:1").unwrap(), vec![("gpu".into(), Some("a100".into()), 4), ("nic".into(), None, 1)]);
        assert_eq!(parse_gres("gpu").unwrap(), vec![("gpu".into(), None, 1)]);
        for bad in ["", "gpu:", "gpu:a:b:c", "gpu:0", "gpu:a100:x", "g pu:1", "gpu;rm -rf:1"] {
            assert!(parse_gres(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn arrays() {
        assert_eq!(parse_array("0-15:4%2").unwrap(), ArraySpec { indices: vec![0, 4, 8, 12], max_running: Some(2) });
        assert_eq!(parse_array("1,3,5-7").unwrap().indices, vec![1, 3, 5, 6, 7]);
        assert_eq!(parse_array("3,3,1").unwrap().indices, vec![1, 3]);
        for bad in ["", "5-1", "0-4000001", "1:0", "a-b", "1-3%0", "1-3%x", "-1", "0-10:"] {
            assert!(parse_array(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_array("0-9999").unwrap().indices.len(), 10_000, "the controller applies its MaxArraySize");
        assert!(parse_array("0-4000001").unwrap_err().0.contains("4000000"));
        // fuzz/regressions/formats/: overlapping items asked for gigabytes before the dedup.
        assert!(parse_array(&["0-4000000"; 400].join(",")).unwrap_err().0.contains("more than 4000001 tasks"));
        assert_eq!(parse_array("0-4000000").unwrap().indices.len(), 4_000_001, "the cap itself is fine");
        assert_eq!(parse_array("0-3999999:2,1-3999999:2").unwrap().indices.len(), 4_000_000);
    }

    #[test]
    fn dependencies() {
        let d = parse_dependency("afterok:12:13,afterany:14,singleton").unwrap();
        assert_eq!(d.len(), 4);
        assert_eq!(d[1], Dependency { kind: DepKind::AfterOk, job: Some(JobId(13)) });
        assert_eq!(d[3].kind, DepKind::Singleton);
        assert!(parse_dependency("afterok:1?afterany:2").unwrap_err().0.contains("not supported"));
        for bad in ["", "afterok", "afterok:", "afterok:x", "before:1", "afterok:-1"] {
            assert!(parse_dependency(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn signals_and_begin() {
        assert_eq!(parse_signal("USR1@90").unwrap(), Signal { number: 10, before: 90, batch_only: false });
        assert_eq!(parse_signal("B:SIGTERM").unwrap(), Signal { number: 15, before: 60, batch_only: true });
        assert_eq!(parse_signal("12").unwrap().number, 12);
        for bad in ["", "FOO", "USR1@-1", "USR1@70000", "X:USR1", "99"] {
            assert!(parse_signal(bad).is_err(), "{bad:?}");
        }
        let now = 1_790_000_000; // 2026-09-21T...
        assert_eq!(parse_begin("now+1hour", now).unwrap(), now + 3600);
        assert_eq!(parse_begin("now+90", now).unwrap(), now + 90);
        assert_eq!(parse_begin("2026-12-01", now).unwrap(), 1_796_083_200);
        assert_eq!(parse_begin("2026-12-01T10:30", now).unwrap(), 1_796_083_200 + 37_800);
        assert_eq!(parse_begin("2028-02-29", now).unwrap(), 1_835_395_200);
        assert_eq!(parse_begin("1970-01-01T00:00:01", now).unwrap(), 1);
        let t = parse_begin("00:00", now).unwrap();
        assert!(t > now && t - now <= 86400 && t % 86400 == 0);
        for bad in ["tomorrowish", "now+", "now+5parsecs", "2026-13-01", "25:00", "2026-12", "2026-02-30", "2026-00-10", "2027-02-29"] {
            assert!(parse_begin(bad, now).is_err(), "{bad:?}");
        }
    }
}
