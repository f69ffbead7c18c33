//! `scontrol create|update|delete reservation`'s words, read as Slurm's `scontrol` reads them
//! (keys case-insensitive and abbreviable, `key=value`, `key+=value`, `key-=value`), into a
//! [`ResvSpec`] the controller checks and applies. Times are made absolute here, against the
//! caller's clock (`StartTime=now+60`), so the controller sees seconds only.

use model::Time;
use serde::{Deserialize, Serialize};

use crate::keywords::{Keyword, Op, lookup};

/// Most nodes one reservation may name.
pub const MAX_RESV_NODES: usize = 100_000;
/// Most users or accounts one reservation may name.
pub const MAX_RESV_NAMES: usize = 1_000;

/// A change of a list of names (`Users=a,b`, `Users+=c`, `Users-=a`, `Users=-bob`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListChange {
    /// `=` (replace), `+=` (add) or `-=` (remove).
    pub op: ListOp,
    /// `Users=-a,b`: everyone but these (with `=` only).
    #[serde(default)]
    pub negated: bool,
    /// The names.
    pub names: Vec<String>,
}

/// How a [`ListChange`] applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ListOp {
    /// Replace.
    Set,
    /// Add to.
    Add,
    /// Remove from.
    Remove,
}

/// What `scontrol create|update reservation` asks, checked for form (the controller checks the
/// rest against the cluster).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResvSpec {
    /// `ReservationName=`.
    #[serde(default)]
    pub name: Option<String>,
    /// `StartTime=`, absolute.
    #[serde(default)]
    pub start: Option<Time>,
    /// `EndTime=`, absolute.
    #[serde(default)]
    pub end: Option<Time>,
    /// `Duration=` in seconds (`UNLIMITED`: a year).
    #[serde(default)]
    pub duration: Option<Time>,
    /// `Nodes=`, expanded (`ALL`: every node).
    #[serde(default)]
    pub nodes: Option<Vec<String>>,
    /// `NodeCnt=`.
    #[serde(default)]
    pub node_cnt: Option<u32>,
    /// `Users=`.
    #[serde(default)]
    pub users: Option<ListChange>,
    /// `Accounts=`.
    #[serde(default)]
    pub accounts: Option<ListChange>,
    /// `PartitionName=`.
    #[serde(default)]
    pub partition: Option<String>,
    /// `Flags=` (and `Flags+=`): flags to set, upper case.
    #[serde(default)]
    pub flags_set: Vec<String>,
    /// `Flags-=` (and `Flags=-X`): flags to clear.
    #[serde(default)]
    pub flags_clear: Vec<String>,
    /// `TRES=` as given.
    #[serde(default)]
    pub tres: Option<String>,
    /// From `TRES=`: CPUs to reserve (whole nodes are taken until they hold this many).
    #[serde(default)]
    pub cpus: Option<u32>,
    /// From `TRES=gres/gpu=N`: GPUs to reserve (likewise).
    #[serde(default)]
    pub gpus: Option<u32>,
}

/// A year: what `Duration=UNLIMITED` reserves.
pub const UNLIMITED_DURATION: Time = 365 * 86_400;

const KEYS: &[Keyword] = &[
    Keyword::alias("ReservationName", 3, "ReservationName"),
    Keyword::new("StartTime", 5),
    Keyword::new("EndTime", 5),
    Keyword::new("Duration", 3),
    Keyword::alias("NodeCount", 5, "NodeCnt"),
    Keyword::new("NodeCnt", 5),
    Keyword::new("Nodes", 5),
    Keyword::new("Users", 5),
    Keyword::new("Accounts", 5),
    Keyword::alias("PartitionName", 9, "PartitionName"),
    Keyword::alias("Partition", 9, "PartitionName"),
    Keyword::new("Flags", 5),
    Keyword::new("TRES", 4),
    Keyword::new("CoreCnt", 5),
    Keyword::new("Licenses", 3),
    Keyword::new("Groups", 5),
    Keyword::new("Features", 5),
    Keyword::new("BurstBuffer", 3),
    Keyword::new("Watts", 5),
    Keyword::new("MaxStartDelay", 5),
    Keyword::new("Comment", 5),
];

/// Whether `s` can be a reservation's (or partition's, account's, user's) name: 1 to 64
/// letters, digits, `_`, `-` and `.`, not starting with `-`.
pub fn valid_resv_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && !s.starts_with('-') && s.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
}

fn names(key: &str, v: &str) -> Result<Vec<String>, String> {
    let list: Vec<String> = v.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect();
    if list.is_empty() || list.len() > MAX_RESV_NAMES {
        return Err(format!("Invalid {key} value: {}", crate::visible(v)));
    }
    if let Some(bad) = list.iter().find(|n| !valid_resv_name(n)) {
        return Err(format!("Invalid {key} value: {}", crate::visible(bad)));
    }
    Ok(list)
}

fn list_change(key: &str, op: Op, v: &str) -> Result<ListChange, String> {
    let (negated, rest) = match v.strip_prefix('-') {
        Some(r) if op == Op::Set => (true, r),
        _ => (false, v),
    };
    let op = match op {
        Op::Set => ListOp::Set,
        Op::Add => ListOp::Add,
        Op::Remove => ListOp::Remove,
    };
    Ok(ListChange { op, negated, names: names(key, rest)? })
}

/// Reads `TRES=cpu=N,gres/gpu=M` (node= and license= are refused: name nodes with `Nodes=` or
/// `NodeCnt=`).
fn parse_tres(v: &str, spec: &mut ResvSpec) -> Result<(), String> {
    let bad = |what: &str| format!("Invalid TRES value: {} ({what})", crate::visible(v));
    for item in v.split(',') {
        let (k, n) = item.split_once('=').ok_or_else(|| bad("use cpu=N or gres/gpu=N"))?;
        let n: u32 = n.parse().ok().filter(|n| (1..=10_000_000).contains(n)).ok_or_else(|| bad("a count of at least 1"))?;
        match k.to_ascii_lowercase().as_str() {
            "cpu" => spec.cpus = Some(n),
            "gres/gpu" => spec.gpus = Some(n),
            "node" => spec.node_cnt = Some(n),
            _ => return Err(bad("this cluster reserves cpu, node and gres/gpu")),
        }
    }
    spec.tres = Some(v.to_string());
    Ok(())
}

/// Reads the words of `scontrol create reservation` (after `reservation`) or `scontrol update`
/// (all of them, `ReservationName=` among them). `now` is the caller's clock, for relative
/// times. The error is the message to print.
pub fn parse_reservation(words: &[String], now: Time) -> Result<ResvSpec, String> {
    let mut spec = ResvSpec::default();
    for w in words {
        let (k, op, v) = match w.split_once('=') {
            None => return Err(format!("Unknown parameter {}", crate::visible(w))),
            Some((k, v)) => match (k.strip_suffix('+'), k.strip_suffix('-')) {
                (Some(k), _) => (k, Op::Add, v),
                (_, Some(k)) => (k, Op::Remove, v),
                _ => (k, Op::Set, v),
            },
        };
        let key = lookup(k, KEYS).map_err(|_| format!("Unknown parameter {}", crate::visible(w)))?.key;
        let listy = matches!(key, "Users" | "Accounts" | "Flags");
        if op != Op::Set && !listy {
            return Err(format!("{}: only {key}= (no += or -=) is supported here", crate::visible(w)));
        }
        if v.is_empty() {
            return Err(format!("Invalid input: {}", crate::visible(w)));
        }
        let time = |what: &str, v: &str| crate::parse_begin(v, now).map_err(|_| format!("Invalid {what} time {}", crate::visible(w)));
        match key {
            "ReservationName" => {
                if !valid_resv_name(v) {
                    return Err(format!("Invalid reservation name: {} (letters, digits, _ - and ., at most 64)", crate::visible(v)));
                }
                spec.name = Some(v.to_string());
            }
            "StartTime" => spec.start = Some(time("start", v)?),
            "EndTime" => spec.end = Some(time("end", v)?),
            "Duration" => {
                let d = crate::parse_time(v).map_err(|_| format!("Invalid duration {}", crate::visible(w)))?;
                spec.duration = Some(d.unwrap_or(UNLIMITED_DURATION));
            }
            "NodeCnt" => {
                let n: u32 = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_RESV_NODES as u32).contains(n))
                    .ok_or_else(|| format!("Invalid node count {}", crate::visible(w)))?;
                spec.node_cnt = Some(n);
            }
            "Nodes" => {
                let list = if v.eq_ignore_ascii_case("ALL") {
                    vec!["ALL".to_string()]
                } else {
                    crate::expand(v, MAX_RESV_NODES).map_err(|e| format!("Invalid node name specified: {}", e.0))?
                };
                spec.nodes = Some(list);
            }
            "Users" => spec.users = Some(list_change(key, op, v)?),
            "Accounts" => spec.accounts = Some(list_change(key, op, v)?),
            "PartitionName" => {
                if !valid_resv_name(v) {
                    return Err(format!("Invalid partition name specified: {}", crate::visible(v)));
                }
                spec.partition = Some(v.to_string());
            }
            "Flags" => {
                for f in v.split(',').filter(|f| !f.is_empty()) {
                    let (clear, name) = match f.strip_prefix('-') {
                        Some(n) => (true, n),
                        None => (op == Op::Remove, f),
                    };
                    if !model::ResvFlags::default().set(name, true) {
                        return Err(format!(
                            "Error parsing flags {} (this cluster supports {})",
                            crate::visible(f),
                            model::resv::FLAG_NAMES.join(",")
                        ));
                    }
                    let up = name.to_ascii_uppercase();
                    if clear { spec.flags_clear.push(up) } else { spec.flags_set.push(up) }
                }
            }
            "TRES" => parse_tres(v, &mut spec)?,
            other => {
                return Err(format!(
                    "{other}= is not supported by this cluster (reservations here are of whole nodes: Nodes=, NodeCnt= or TRES=cpu=N,gres/gpu=N)"
                ));
            }
        }
    }
    Ok(spec)
}

/// What `scontrol create reservation` checks before asking (Slurm's client-side checks, in its
/// words, without the final period).
pub fn check_create(spec: &ResvSpec) -> Result<(), String> {
    if spec.start.is_none() {
        return Err("A start time must be given".into());
    }
    if spec.end.is_none() && spec.duration.is_none() {
        return Err("An end time or duration must be given".into());
    }
    if spec.nodes.is_none() && spec.node_cnt.is_none() && spec.cpus.is_none() && spec.gpus.is_none() {
        return Err("Nodes, NodeCnt or TRES must be specified".into());
    }
    if spec.users.is_none() && spec.accounts.is_none() {
        return Err("Either Users/Groups and/or Accounts must be specified".into());
    }
    if let (Some(s), Some(e)) = (spec.start, spec.end)
        && e < s
    {
        return Err("Start time cannot be after end time".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn create_words_read_as_slurms() {
        let s =
            parse_reservation(&w("ReservationName=maint starttime=now+60 dur=10 nodes=n[1-2] users=root flags=maint,ignore_jobs"), 1000)
                .unwrap();
        assert_eq!(s.name.as_deref(), Some("maint"));
        assert_eq!(s.start, Some(1060));
        assert_eq!(s.duration, Some(600));
        assert_eq!(s.nodes, Some(vec!["n1".to_string(), "n2".to_string()]));
        assert_eq!(s.users, Some(ListChange { op: ListOp::Set, negated: false, names: vec!["root".into()] }));
        assert_eq!(s.flags_set, vec!["MAINT", "IGNORE_JOBS"]);
        let s = parse_reservation(&w("res=a StartTime=2026-12-05T10:00:00 EndTime=now+1hour NodeCnt=2 Accounts=-ml TRES=gres/gpu=4"), 0)
            .unwrap();
        assert_eq!(s.end, Some(3600));
        assert!(s.accounts.unwrap().negated);
        assert_eq!((s.gpus, s.tres.as_deref()), (Some(4), Some("gres/gpu=4")));
        let s = parse_reservation(&w("ReservationName=a Flags-=DAILY Users+=bob Duration=UNLIMITED"), 0).unwrap();
        assert_eq!(s.flags_clear, vec!["DAILY"]);
        assert_eq!(s.users.unwrap().op, ListOp::Add);
        assert_eq!(s.duration, Some(UNLIMITED_DURATION));
    }

    #[test]
    fn bad_words_are_refused_with_the_reason() {
        for (words, says) in [
            ("StartTime=garbage", "Invalid start time StartTime=garbage"),
            ("EndTime=2026-13-01", "Invalid end time EndTime=2026-13-01"),
            ("Duration=-5", "Invalid duration Duration=-5"),
            ("Flags=BOGUS", "Error parsing flags BOGUS"),
            ("NodeCnt=0", "Invalid node count"),
            ("NodeCnt=x", "Invalid node count"),
            ("Nodes=n[1-", "Invalid node name"),
            ("Users=a;b", "Invalid Users value"),
            ("Users=", "Invalid input"),
            ("ReservationName=../x", "Invalid reservation name"),
            ("Color=red", "Unknown parameter Color=red"),
            ("StartTime+=now", "no += or -="),
            ("TRES=license/x=1", "Invalid TRES value"),
            ("TRES=cpu=0", "Invalid TRES value"),
            ("Licenses=x:1", "not supported"),
            ("bare", "Unknown parameter bare"),
        ] {
            let e = parse_reservation(&w(words), 0).unwrap_err();
            assert!(e.contains(says), "{words}: {e}");
        }
        assert!(!parse_reservation(&w("Users=\u{1b}[2J"), 0).unwrap_err().contains('\u{1b}'));
    }

    #[test]
    fn create_needs_a_start_an_end_a_size_and_someone() {
        let p = |s: &str| check_create(&parse_reservation(&w(s), 0).unwrap());
        assert_eq!(p("Duration=5 Nodes=n1 Users=root"), Err("A start time must be given".into()));
        assert_eq!(p("StartTime=now Nodes=n1 Users=root"), Err("An end time or duration must be given".into()));
        assert!(p("StartTime=now Duration=5 Users=root").unwrap_err().contains("NodeCnt"));
        assert!(p("StartTime=now Duration=5 Nodes=n1").unwrap_err().starts_with("Either Users"));
        assert_eq!(p("StartTime=now+60 EndTime=now Nodes=n1 Users=root"), Err("Start time cannot be after end time".into()));
        assert_eq!(p("StartTime=now Duration=5 NodeCnt=1 Accounts=ml"), Ok(()));
    }
}
