//! The filters of the query commands that need more than a list of names: sacct's ranges
//! (`-i`, `-I`, `-k`/`-K`), sinfo's node states (`-t`), squeue's steps (`-s`), and sprio's
//! fields (`-o`, `-S`).

use crate::query::FieldDef;
use crate::{Invalid, parse_time};

/// sacct's `-i`/`--nnodes` and `-I`/`--ncpus`: `min[-max]` (one number is that number exactly;
/// `min-` has no upper end), as Slurm's `get_resource_arg_range`.
pub fn parse_count_range(s: &str, opt: &str) -> Result<(u64, u64), Invalid> {
    let bad = || Invalid::new(format!("Invalid {opt} range: {}", s.escape_debug()));
    let n = |x: &str| x.trim().parse::<u64>().map_err(|_| bad());
    match s.split_once('-') {
        None => {
            let v = n(s)?;
            Ok((v, v))
        }
        Some((lo, "")) => Ok((n(lo)?, u64::MAX)),
        Some((lo, hi)) => {
            let (lo, hi) = (n(lo)?, n(hi)?);
            if hi < lo {
                return Err(bad());
            }
            Ok((lo, hi))
        }
    }
}

/// sacct's `-k`/`--timelimit-min` and `-K`/`--timelimit-max`, in Slurm's time-limit forms: the
/// limits a job may have, in seconds (`i64::MAX`: unlimited). `-k` alone is that limit exactly;
/// `-K` alone is ignored, as Slurm's (`None`).
pub fn parse_limit_range(min: Option<&str>, max: Option<&str>) -> Result<Option<(i64, i64)>, Invalid> {
    let secs = |s: &str| parse_time(s).map(|t| t.unwrap_or(i64::MAX));
    let Some(lo) = min.map(secs).transpose()? else { return Ok(None) };
    let hi = max.map(secs).transpose()?.unwrap_or(lo);
    if hi < lo {
        return Err(Invalid::new("The time limit minimum is more than the maximum"));
    }
    Ok(Some((lo, hi)))
}

/// Whether a job's time limit (`None`: unlimited) is in `range` ([`parse_limit_range`]).
pub fn limit_in(range: (i64, i64), limit: Option<i64>) -> bool {
    let l = limit.unwrap_or(i64::MAX);
    range.0 <= l && l <= range.1
}

/// The node states `sinfo -t` accepts (Slurm's list), each with the name it is matched by.
const NODE_STATES: &[(&str, &str)] = &[
    ("ALLOC", "ALLOCATED"),
    ("ALLOCATED", "ALLOCATED"),
    ("CLOUD", "CLOUD"),
    ("COMP", "COMPLETING"),
    ("COMPLETING", "COMPLETING"),
    ("DOWN", "DOWN"),
    ("DRAIN", "DRAIN"),
    ("DRAINED", "DRAINED"),
    ("DRAINING", "DRAINING"),
    ("FAIL", "FAIL"),
    ("FUTURE", "FUTURE"),
    ("FUTR", "FUTURE"),
    ("IDLE", "IDLE"),
    ("MAINT", "MAINT"),
    ("MIX", "MIXED"),
    ("MIXED", "MIXED"),
    ("NO_RESPOND", "NO_RESPOND"),
    ("NPC", "NPC"),
    ("PERFCTRS", "PERFCTRS"),
    ("PLANNED", "PLANNED"),
    ("POWER_DOWN", "POWER_DOWN"),
    ("POWERING_DOWN", "POWERING_DOWN"),
    ("POWERED_DOWN", "POWERED_DOWN"),
    ("POWERING_UP", "POWERING_UP"),
    ("REBOOT_ISSUED", "REBOOT_ISSUED"),
    ("REBOOT_REQUESTED", "REBOOT_REQUESTED"),
    ("RESV", "RESERVED"),
    ("RESERVED", "RESERVED"),
    ("UNK", "UNKNOWN"),
    ("UNKNOWN", "UNKNOWN"),
];

/// sinfo's `-t`/`--states`: a comma separated list of node states, case-insensitive (`all`:
/// every state); each as the name [`node_in_states`] matches.
pub fn parse_node_states(s: &str) -> Result<Vec<&'static str>, Invalid> {
    let mut out = Vec::new();
    for w in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        if w.eq_ignore_ascii_case("all") {
            out.extend(NODE_STATES.iter().map(|(_, n)| *n));
            continue;
        }
        let Some((_, name)) = NODE_STATES.iter().find(|(k, _)| k.eq_ignore_ascii_case(w)) else {
            return Err(Invalid::new(format!("Invalid node state specified: {}", w.escape_debug())));
        };
        out.push(name);
    }
    if out.is_empty() {
        return Err(Invalid::new("Invalid node state specified: (empty)"));
    }
    Ok(out)
}

/// Whether a node in Tandem's `state` (`idle`, `mixed`, `allocated`, `drain`, `down`, `maint`,
/// `reserved`), with jobs on it or not (`busy`: a drain still draining), is in one of `states`
/// ([`parse_node_states`]). A down node is also not responding; the states Tandem's nodes are
/// never in (cloud, powered down, ...) match none.
pub fn node_in_states(states: &[&str], state: &str, busy: bool) -> bool {
    let mine: &[&str] = match (state, busy) {
        ("idle", _) => &["IDLE"],
        ("mixed", _) => &["MIXED"],
        ("allocated", _) => &["ALLOCATED"],
        ("drain", true) => &["DRAIN", "DRAINING"],
        ("drain", false) => &["DRAIN", "DRAINED"],
        ("down", _) => &["DOWN", "NO_RESPOND"],
        ("maint", _) => &["MAINT", "RESERVED"],
        ("reserved", _) => &["IDLE", "RESERVED"],
        _ => &["UNKNOWN"],
    };
    states.iter().any(|s| mine.contains(s))
}

/// squeue's `-s`/`--steps` list: `job[_task].step` entries; whether step `step` of the job
/// shown as `job_display` (`12`, `12_3`; `job_id` its own id) is selected. An entry without a
/// step selects every step of its job.
pub fn step_selected(list: &[String], job_id: u64, job_display: &str, step: &str) -> bool {
    list.iter().any(|e| {
        let (job, st) = match e.split_once('.') {
            Some((j, s)) => (j, Some(s)),
            None => (e.as_str(), None),
        };
        (job == job_display || job == job_id.to_string()) && st.is_none_or(|s| s == step)
    })
}

/// sprio's `%` fields (`-o`, `-S`): letter, long name, header. The normalized factors are the
/// weighted ones over their weights.
pub const SPRIO_FIELDS: &[FieldDef] = &[
    ('a', "AgeNorm", "AGE"),
    ('A', "Age", "AGE"),
    ('b', "AssocNorm", "ASSOC"),
    ('B', "Assoc", "ASSOC"),
    ('c', "Cluster", "CLUSTER"),
    ('f', "FairshareNorm", "FAIRSHARE"),
    ('F', "Fairshare", "FAIRSHARE"),
    ('i', "JobID", "JOBID"),
    ('j', "JobSizeNorm", "JOBSIZE"),
    ('J', "JobSize", "JOBSIZE"),
    ('N', "Nice", "NICE"),
    ('p', "PartitionNorm", "PARTITION"),
    ('P', "Partition", "PARTITION"),
    ('q', "QOSNorm", "QOS"),
    ('Q', "QOS", "QOS"),
    ('r', "PartitionName", "PARTITION"),
    ('S', "Admin", "ADMIN"),
    ('t', "TRESNorm", "TRES"),
    ('T', "TRES", "TRES"),
    ('u', "User", "USER"),
    ('Y', "Priority", "PRIORITY"),
    ('y', "PriorityNorm", "PRIORITY"),
];

/// sprio's default format (Slurm's, for the factors a site weighs), and with `-l`.
pub const SPRIO_DEFAULT: &str = "%.15i %9r %.8u %.10Y %.10A %.10F %.10J %.10P %.10Q";
/// See [`SPRIO_DEFAULT`].
pub const SPRIO_LONG: &str = "%.15i %9r %.8u %.10Y %.10S %.10A %.10B %.10F %.10J %.10P %.10Q %.11N %.20T";

/// sshare's `-o`/`--format`: comma separated field names of `known` (case-insensitive), each
/// with an optional `%width` (`Account,User%20`): each field's index in `known` and width.
pub fn parse_fields(spec: &str, known: &[&str]) -> Result<Vec<(usize, Option<usize>)>, Invalid> {
    let mut out = Vec::new();
    for f in spec.split(',').map(str::trim).filter(|f| !f.is_empty()) {
        let (name, width) = match f.split_once('%') {
            Some((n, w)) => {
                (n, Some(w.parse::<usize>().map_err(|_| Invalid::new(format!("Invalid field width: {}", f.escape_debug())))?.min(1000)))
            }
            None => (f, None),
        };
        let Some(i) = known.iter().position(|k| k.eq_ignore_ascii_case(name)) else {
            return Err(Invalid::new(format!(
                "Invalid field requested: \"{}\" (this cluster has {})",
                name.escape_debug(),
                known.join(", ")
            )));
        };
        out.push((i, width));
    }
    if out.is_empty() {
        return Err(Invalid::new("No fields requested"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_ranges() {
        assert_eq!(parse_count_range("2", "--nnodes"), Ok((2, 2)));
        assert_eq!(parse_count_range("2-4", "--nnodes"), Ok((2, 4)));
        assert_eq!(parse_count_range("8-", "--ncpus"), Ok((8, u64::MAX)));
        assert_eq!(parse_count_range("4-2", "--nnodes"), Err(Invalid::new("Invalid --nnodes range: 4-2")));
        assert!(parse_count_range("x", "--ncpus").is_err());
        assert!(parse_count_range("", "--ncpus").is_err());
    }

    #[test]
    fn limit_ranges() {
        assert_eq!(parse_limit_range(None, Some("10")), Ok(None));
        let exact = parse_limit_range(Some("10"), None).unwrap().unwrap();
        assert!(limit_in(exact, Some(600)) && !limit_in(exact, Some(660)) && !limit_in(exact, None));
        let r = parse_limit_range(Some("10"), Some("1:00:00")).unwrap().unwrap();
        assert!(limit_in(r, Some(600)) && limit_in(r, Some(3600)) && !limit_in(r, Some(3660)) && !limit_in(r, Some(60)));
        let open = parse_limit_range(Some("1-0"), Some("UNLIMITED")).unwrap().unwrap();
        assert!(limit_in(open, None) && limit_in(open, Some(2 * 86400)) && !limit_in(open, Some(60)));
        assert!(parse_limit_range(Some("20"), Some("10")).is_err());
        assert!(parse_limit_range(Some("x"), None).is_err());
    }

    #[test]
    fn node_states() {
        let s = parse_node_states("idle,MIX").unwrap();
        assert!(node_in_states(&s, "idle", false) && node_in_states(&s, "mixed", true) && !node_in_states(&s, "allocated", true));
        let drained = parse_node_states("drained").unwrap();
        assert!(node_in_states(&drained, "drain", false) && !node_in_states(&drained, "drain", true));
        let drain = parse_node_states("drain").unwrap();
        assert!(node_in_states(&drain, "drain", false) && node_in_states(&drain, "drain", true));
        assert!(node_in_states(&parse_node_states("no_respond").unwrap(), "down", false));
        assert!(!node_in_states(&parse_node_states("cloud,resv,futr").unwrap(), "idle", false));
        let all = parse_node_states("all").unwrap();
        for st in ["idle", "mixed", "allocated", "drain", "down"] {
            assert!(node_in_states(&all, st, false), "{st}");
        }
        assert_eq!(parse_node_states("idle,bogus"), Err(Invalid::new("Invalid node state specified: bogus")));
        assert!(parse_node_states(",").is_err());
    }

    #[test]
    fn field_lists() {
        let known = ["Account", "User", "FairShare"];
        assert_eq!(parse_fields("account,FairShare%12", &known), Ok(vec![(0, None), (2, Some(12))]));
        assert!(parse_fields("Account,LevelFS", &known).unwrap_err().0.starts_with("Invalid field requested: \"LevelFS\""));
        assert!(parse_fields("User%x", &known).is_err());
        assert!(parse_fields(",", &known).is_err());
    }

    #[test]
    fn steps() {
        let l = |s: &str| s.split(',').map(str::to_string).collect::<Vec<_>>();
        assert!(step_selected(&l("12.0"), 12, "12", "0"));
        assert!(!step_selected(&l("12.0"), 12, "12", "1"));
        assert!(step_selected(&l("12.batch,13.1"), 12, "12", "batch"));
        assert!(step_selected(&l("12_3.0"), 15, "12_3", "0"));
        assert!(step_selected(&l("15.0"), 15, "12_3", "0"));
        assert!(!step_selected(&l("12.0"), 15, "12_3", "0"));
        assert!(step_selected(&l("12"), 12, "12", "4"));
    }

    #[test]
    fn sprio_formats_parse() {
        for f in [SPRIO_DEFAULT, SPRIO_LONG] {
            let items = crate::parse_percent(f, SPRIO_FIELDS, "job").unwrap();
            assert!(crate::fields_used(&items).contains(&"Priority"));
        }
        assert_eq!(crate::parse_sort("u,r,-y", SPRIO_FIELDS).unwrap(), [("User", false), ("PartitionName", false), ("PriorityNorm", true)]);
    }
}
