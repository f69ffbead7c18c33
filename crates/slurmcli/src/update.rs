//! `scontrol update`'s words, read with [`crate::keywords`] as Slurm's `scontrol` reads them:
//! the entity is the first word naming one (`NodeName`, `PartitionName`, `JobId`, `JobName`,
//! `StepId`, `ReservationName`, `SlurmctldDebug`, each abbreviable to Slurm's minimum), then
//! every `key=value` word of that entity's table, case-insensitive and abbreviable; a key Tandem
//! does not change is refused with Slurm's words (`Update of this parameter is not supported`),
//! an unknown node state with Slurm's list.

use crate::keywords::{Keyword, Op, lookup};

/// What an `scontrol update` asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// `JobId=ID TimeLimit=T`: a job's (or each listed job's) time limit.
    Job {
        /// The `JobId=` value as given (one id, `12_3`, or a comma list).
        ids: String,
        /// The new limit as given (`TimeLimit=`).
        time_limit: Option<String>,
    },
    /// `NodeName=LIST State=... [Reason=...]`.
    Node {
        /// The `NodeName=` value as given.
        names: String,
        /// `DRAIN` or `RESUME` (an abbreviation or `UNDRAIN` read as Slurm reads it).
        state: Option<&'static str>,
        /// `Reason=`.
        reason: Option<String>,
    },
}

const ENTITIES: &[Keyword] = &[
    Keyword::new("NodeName", 3),
    Keyword::new("PartitionName", 3),
    Keyword::alias("JobId", 3, "JobId"),
    Keyword::alias("JobName", 3, "JobId"),
    Keyword::new("StepId", 4),
    Keyword::new("ReservationName", 3),
    Keyword::new("SlurmctldDebug", 2),
];

const JOB_KEYS: &[Keyword] = &[Keyword::new("JobId", 3), Keyword::new("TimeLimit", 5)];

const NODE_KEYS: &[Keyword] = &[Keyword::new("NodeName", 1), Keyword::new("State", 1), Keyword::new("Reason", 1)];

/// Node states `State=` takes here, as Slurm matches them (at least 3 letters).
const NODE_STATES: &[Keyword] = &[Keyword::new("DRAIN", 3), Keyword::new("RESUME", 3), Keyword::alias("UNDRAIN", 3, "RESUME")];

fn split(word: &str) -> (&str, Op, &str) {
    match word.split_once('=') {
        None => (word, Op::Set, ""),
        Some((k, v)) => match (k.strip_suffix('+'), k.strip_suffix('-')) {
            (Some(k), _) => (k, Op::Add, v),
            (_, Some(k)) => (k, Op::Remove, v),
            _ => (k, Op::Set, v),
        },
    }
}

fn unsupported(word: &str) -> String {
    format!("Update of this parameter is not supported: {}\nRequest aborted", crate::visible(word))
}

/// Reads `scontrol update`'s words (after `update`). The error is the message to print.
pub fn parse_update(words: &[String]) -> Result<Update, String> {
    let entity = words.iter().find_map(|w| lookup(split(w).0, ENTITIES).ok().map(|k| k.key));
    match entity {
        Some("JobId") => {
            let (mut ids, mut time_limit) = (None, None);
            for w in words {
                let (k, op, v) = split(w);
                let key = lookup(k, JOB_KEYS).map_err(|_| unsupported(w))?.key;
                if op != Op::Set {
                    return Err(format!("{}: only {key}= (no += or -=) is supported here", crate::visible(w)));
                }
                if v.is_empty() {
                    return Err(format!("Invalid input: {}\nRequest aborted", crate::visible(w)));
                }
                match key {
                    "JobId" => ids = Some(v.to_string()),
                    _ => time_limit = Some(v.to_string()),
                }
            }
            let ids = ids.expect("the entity word");
            if time_limit.is_none() {
                return Err("No changes specified".into());
            }
            Ok(Update::Job { ids, time_limit })
        }
        Some("NodeName") => {
            let (mut names, mut state, mut reason) = (None, None, None);
            for w in words {
                let (k, _, v) = split(w);
                let key = lookup(k, NODE_KEYS).map_err(|_| unsupported(w))?.key;
                match key {
                    "NodeName" => names = Some(v.to_string()),
                    "Reason" => reason = Some(v.to_string()),
                    _ => {
                        let s = lookup(v, NODE_STATES).map_err(|_| {
                            format!(
                                "Invalid input: {}\nRequest aborted\nValid states are: DRAIN RESUME UNDRAIN (Tandem's; Slurm's also NoResp FAIL FUTURE POWER_DOWN POWER_UP)",
                                crate::visible(w)
                            )
                        })?;
                        state = Some(s.key);
                    }
                }
            }
            let names = names.filter(|n| !n.is_empty()).ok_or_else(|| "Invalid input: NodeName= names no node\nRequest aborted".to_string())?;
            if !names.chars().all(|c| c.is_ascii_alphanumeric() || "-_.,[]".contains(c)) {
                return Err(format!("Invalid node name specified: {}", crate::visible(&names)));
            }
            if state.is_none() && reason.is_none() {
                return Err("No changes specified".into());
            }
            Ok(Update::Node { names, state, reason })
        }
        Some(other) => Err(format!("scontrol update of {other} is not supported by this cluster (jobs' TimeLimit and nodes' State and Reason are)")),
        None => Err(
            "No valid entity in update command\nInput line must include \"NodeName\", \"PartitionName\", \"Reservation\", \"JobId\", or \"SlurmctldDebug\""
                .into(),
        ),
    }
}

/// `scontrol reboot [ASAP] [nextstate=RESUME|DOWN] [reason=..] NODES|ALL`, read as Slurm's
/// scontrol reads it: up to three of the options first (in any order, `ASAP` in any case,
/// `nextstate=` abbreviated), then exactly one node list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reboot {
    /// `ASAP`.
    pub asap: bool,
    /// `resume` or `down`.
    pub next_state: Option<String>,
    /// `reason=`.
    pub reason: Option<String>,
    /// The node list (`ALL` or a hostlist).
    pub nodes: String,
}

/// Reads `scontrol reboot`'s words after the command (`words[0]` is the command as typed);
/// the error is Slurm's text.
pub fn parse_reboot(words: &[String]) -> Result<Reboot, String> {
    let mut r = Reboot { asap: false, next_state: None, reason: None, nodes: String::new() };
    let mut used = 1;
    for w in words.iter().skip(1).take(3) {
        let lower = w.to_ascii_lowercase();
        if lower == "asap" {
            r.asap = true;
        } else if lower.starts_with("reason=") {
            let v = &w["reason=".len()..];
            if v.is_empty() {
                return Err("missing reason".into());
            }
            r.reason = Some(v.to_string());
        } else if lower.starts_with("nextstate=") {
            let v = &lower["nextstate=".len()..];
            if v.is_empty() {
                return Err("missing state".into());
            }
            r.next_state = Some(if "down".starts_with(v) {
                "down".into()
            } else if "resume".starts_with(v) {
                "resume".into()
            } else {
                return Err(format!("Invalid state: {}\nValid states: DOWN, RESUME", &w["nextstate=".len()..]));
            });
        } else {
            break;
        }
        used += 1;
    }
    match words.len().saturating_sub(used) {
        0 => Err("Missing node list. Specify ALL|<NodeList>".into()),
        1 => {
            r.nodes = words[used].clone();
            Ok(r)
        }
        _ => Err(format!("too many arguments for keyword:{}", words[0])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn update_words_read_as_slurms_scontrol_reads_them() {
        assert_eq!(parse_update(&w("JobId=5 TimeLimit=10")), Ok(Update::Job { ids: "5".into(), time_limit: Some("10".into()) }));
        assert_eq!(parse_update(&w("timel=1:00 jobid=5_2")), Ok(Update::Job { ids: "5_2".into(), time_limit: Some("1:00".into()) }));
        assert_eq!(parse_update(&w("job=7 TIMELIMIT=3")).unwrap(), Update::Job { ids: "7".into(), time_limit: Some("3".into()) });
        assert_eq!(
            parse_update(&w("NodeName=n1 State=dra Reason=disk")),
            Ok(Update::Node { names: "n1".into(), state: Some("DRAIN"), reason: Some("disk".into()) })
        );
        assert_eq!(
            parse_update(&w("node=n[1-2] st=undrain")),
            Ok(Update::Node { names: "n[1-2]".into(), state: Some("RESUME"), reason: None })
        );
        // Refusals, in Slurm's words where Slurm has them.
        assert!(
            parse_update(&w("JobId=5 Partition=gpu")).unwrap_err().starts_with("Update of this parameter is not supported: Partition=gpu")
        );
        assert!(parse_update(&w("JobId=5 TimeLimit+=5")).unwrap_err().contains("no += or -="));
        assert!(parse_update(&w("JobId=5")).unwrap_err().contains("No changes"));
        assert!(parse_update(&w("JobId=5 Ti=5")).unwrap_err().contains("not supported"), "TimeLimit needs 5 letters");
        assert!(
            parse_update(&w("NodeName=n1 State=bogus"))
                .unwrap_err()
                .starts_with("Invalid input: State=bogus\nRequest aborted\nValid states")
        );
        assert!(parse_update(&w("NodeName=n1 State=dr")).is_err(), "3 letters at least");
        assert!(parse_update(&w("Foo=1")).unwrap_err().starts_with("No valid entity in update command"));
        assert!(parse_update(&w("PartitionName=batch State=DOWN")).unwrap_err().contains("not supported by this cluster"));
        assert!(parse_update(&w("NodeName=n1 State=DRAIN Color=red")).unwrap_err().contains("Color=red"));
        assert!(parse_update(&w("NodeName=../jobs State=DRAIN")).unwrap_err().starts_with("Invalid node name specified"));
        assert!(!parse_update(&w("NodeName=\u{1b}[2J State=DRAIN")).unwrap_err().contains('\u{1b}'));
        assert!(!parse_update(&w("JobId=5 \u{1b}]0;x=1")).unwrap_err().contains('\u{1b}'), "control characters made visible");
    }

    #[test]
    fn reboot_reads_as_slurms_scontrol() {
        let w = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let r = parse_reboot(&w("reboot asap nextstate=RES reason=firmware node[1-2]")).unwrap();
        assert_eq!(r, Reboot { asap: true, next_state: Some("resume".into()), reason: Some("firmware".into()), nodes: "node[1-2]".into() });
        assert_eq!(parse_reboot(&w("reboot ALL")).unwrap().nodes, "ALL");
        assert_eq!(parse_reboot(&w("reb nextstate=d n1")).unwrap().next_state.as_deref(), Some("down"));
        assert_eq!(parse_reboot(&w("reboot")).unwrap_err(), "Missing node list. Specify ALL|<NodeList>");
        assert_eq!(parse_reboot(&w("reboot ASAP")).unwrap_err(), "Missing node list. Specify ALL|<NodeList>");
        assert_eq!(parse_reboot(&w("reboot n1 n2")).unwrap_err(), "too many arguments for keyword:reboot");
        assert_eq!(parse_reboot(&w("reboot reason= n1")).unwrap_err(), "missing reason");
        assert_eq!(parse_reboot(&w("reboot nextstate= n1")).unwrap_err(), "missing state");
        assert_eq!(parse_reboot(&w("reboot nextstate=sideways n1")).unwrap_err(), "Invalid state: sideways\nValid states: DOWN, RESUME");
    }
}
