//! Advance reservations, as Slurm's (`scontrol create reservation`): nodes set aside for a time
//! window, for named users or accounts, or for maintenance. Not to be confused with the
//! scheduler's backfill reservations (a blocked job's planned start), which are internal to a
//! pass.
//!
//! A reservation here is of whole nodes: `NodeCnt`, `Nodes` and `TRES` are resolved to a node
//! list when it is created, and the scheduler sees only that list.

use serde::{Deserialize, Serialize};

use crate::Time;

/// Service replicas leave a node this long before an advance reservation begins on it (they
/// are replaced elsewhere first, within the service's `min_available`), and are placed only on
/// nodes where none begins sooner: a replica has no time limit to plan with.
pub const REPLICA_LEAD: Time = 600;

/// One day, the period of `DAILY`.
pub const DAY: Time = 86_400;

/// An advance reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// `ReservationName`.
    pub name: String,
    /// Start of the (first) window.
    pub start: Time,
    /// End of the (first) window; `end > start`.
    pub end: Time,
    /// The reserved nodes, in hostlist order.
    pub nodes: Vec<String>,
    /// `Users=`: who may use it. A leading `-` on the list (`Users=-bob`) means everyone but
    /// these ([`Reservation::users_negated`]).
    #[serde(default)]
    pub users: Vec<String>,
    /// `Users=-...`: `users` lists those who may not.
    #[serde(default)]
    pub users_negated: bool,
    /// `Accounts=`: jobs charged to these accounts may use it.
    #[serde(default)]
    pub accounts: Vec<String>,
    /// `Accounts=-...`.
    #[serde(default)]
    pub accounts_negated: bool,
    /// `PartitionName=`: where its nodes were chosen from, and the partition of jobs that use it
    /// without naming one.
    #[serde(default)]
    pub partition: Option<String>,
    /// `Flags=`.
    #[serde(default)]
    pub flags: ResvFlags,
    /// `TRES=` as given (`cpu=8`, `gres/gpu=2`), shown back; empty when not given.
    #[serde(default)]
    pub tres: String,
}

/// `Flags=` of a reservation, those this implementation supports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ResvFlags {
    /// Maintenance: its nodes show `maint`, and accounting counts its time as planned down.
    #[serde(default)]
    pub maint: bool,
    /// Created on nodes that run jobs now (they keep running).
    #[serde(default)]
    pub ignore_jobs: bool,
    /// Repeats every day.
    #[serde(default)]
    pub daily: bool,
    /// Repeats every week.
    #[serde(default)]
    pub weekly: bool,
    /// Jobs in it may start before it, end after it and use nodes outside it.
    #[serde(default)]
    pub flex: bool,
    /// Jobs that do not name it but may use it are placed in it too.
    #[serde(default)]
    pub magnetic: bool,
    /// May share nodes and time with other reservations.
    #[serde(default)]
    pub overlap: bool,
    /// Nodes were named (`Nodes=`), not counted (`NodeCnt=`): Slurm's `SPEC_NODES`.
    #[serde(default)]
    pub spec_nodes: bool,
}

/// The flag names `Flags=` accepts, in the order `scontrol show reservation` prints them.
pub const FLAG_NAMES: &[&str] = &["MAINT", "FLEX", "OVERLAP", "IGNORE_JOBS", "DAILY", "WEEKLY", "SPEC_NODES", "MAGNETIC"];

impl ResvFlags {
    /// Sets (`on`) or clears the flag of this name (case-insensitive); `false` for an unknown name.
    pub fn set(&mut self, name: &str, on: bool) -> bool {
        let f = match name.to_ascii_uppercase().as_str() {
            "MAINT" => &mut self.maint,
            "IGNORE_JOBS" => &mut self.ignore_jobs,
            "DAILY" => &mut self.daily,
            "WEEKLY" => &mut self.weekly,
            "FLEX" => &mut self.flex,
            "MAGNETIC" => &mut self.magnetic,
            "OVERLAP" => &mut self.overlap,
            "SPEC_NODES" => &mut self.spec_nodes,
            _ => return false,
        };
        *f = on;
        true
    }

    /// The flags set, comma-separated, in [`FLAG_NAMES`] order (empty: none).
    pub fn words(&self) -> String {
        let on = [self.maint, self.flex, self.overlap, self.ignore_jobs, self.daily, self.weekly, self.spec_nodes, self.magnetic];
        FLAG_NAMES.iter().zip(on).filter(|(_, o)| *o).map(|(n, _)| *n).collect::<Vec<_>>().join(",")
    }

    /// The repetition period, if it repeats.
    pub fn period(&self) -> Option<Time> {
        if self.weekly {
            Some(7 * DAY)
        } else if self.daily {
            Some(DAY)
        } else {
            None
        }
    }
}

impl Reservation {
    /// The window in force at `now` or next: the first occurrence whose end is after `now`
    /// (a repeating reservation moves forward by whole periods); `None` when a reservation that
    /// does not repeat has ended.
    pub fn window(&self, now: Time) -> Option<(Time, Time)> {
        if now < self.end {
            return Some((self.start, self.end));
        }
        let p = self.flags.period()?;
        let k = (now - self.end) / p + 1;
        Some((self.start + k * p, self.end + k * p))
    }

    /// Whether it is in force at `now`.
    pub fn active(&self, now: Time) -> bool {
        self.window(now).is_some_and(|(s, _)| s <= now)
    }

    /// Whether some occurrence shares time with `[from, to)`.
    pub fn overlaps(&self, from: Time, to: Time) -> bool {
        self.window(from).is_some_and(|(s, e)| s < to && from < e)
    }

    /// Whether a job of `user` charged to `account` may use it: the user is allowed by `Users=`
    /// or the account by `Accounts=` (a negated list allows everyone it does not name; a
    /// reservation naming nobody allows nobody but administrators, which the caller checks).
    pub fn admits(&self, user: &str, account: &str) -> bool {
        let by = |list: &[String], negated: bool, who: &str| -> bool {
            if list.is_empty() {
                return false;
            }
            list.iter().any(|u| u == who) != negated
        };
        let user_ok = by(&self.users, self.users_negated, user);
        let account_ok = by(&self.accounts, self.accounts_negated, account);
        // Both lists given: Slurm requires both to allow (a user in the list, and an account
        // in the list); one list: that one decides.
        match (self.users.is_empty(), self.accounts.is_empty()) {
            (false, false) => user_ok && account_ok,
            (false, true) => user_ok,
            (true, false) => account_ok,
            (true, true) => false,
        }
    }

    /// Whether it holds the node named `node`.
    pub fn holds(&self, node: &str) -> bool {
        self.nodes.iter().any(|n| n == node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: Time, end: Time) -> Reservation {
        Reservation {
            name: "r".into(),
            start,
            end,
            nodes: vec!["n1".into()],
            users: vec!["alice".into()],
            users_negated: false,
            accounts: Vec::new(),
            accounts_negated: false,
            partition: None,
            flags: ResvFlags::default(),
            tres: String::new(),
        }
    }

    #[test]
    fn windows_repeat_by_whole_periods() {
        let mut d = r(100, 200);
        assert_eq!(d.window(50), Some((100, 200)));
        assert!(!d.active(50) && d.active(100) && d.active(199));
        assert_eq!(d.window(200), None);
        d.flags.daily = true;
        assert_eq!(d.window(200), Some((100 + DAY, 200 + DAY)));
        assert_eq!(d.window(200 + 3 * DAY), Some((100 + 4 * DAY, 200 + 4 * DAY)));
        assert!(d.active(150 + 2 * DAY) && !d.active(250 + 2 * DAY));
        d.flags.weekly = true;
        assert_eq!(d.window(200), Some((100 + 7 * DAY, 200 + 7 * DAY)));
    }

    #[test]
    fn overlap_is_half_open() {
        let d = r(100, 200);
        assert!(!d.overlaps(0, 100) && d.overlaps(0, 101) && d.overlaps(199, 300) && !d.overlaps(200, 300));
    }

    #[test]
    fn access_by_user_account_and_negation() {
        let mut d = r(0, 1);
        assert!(d.admits("alice", "x") && !d.admits("bob", "x"));
        d.users_negated = true;
        assert!(!d.admits("alice", "x") && d.admits("bob", "x"));
        d.users.clear();
        d.accounts = vec!["ml".into()];
        assert!(d.admits("bob", "ml") && !d.admits("bob", "x"));
        d.accounts.clear();
        assert!(!d.admits("bob", "ml"));
    }

    #[test]
    fn flags_parse_and_print_in_order() {
        let mut f = ResvFlags::default();
        assert!(f.set("weekly", true) && f.set("MAINT", true) && !f.set("BOGUS", true));
        assert_eq!(f.words(), "MAINT,WEEKLY");
        assert!(f.set("flex", true) && f.set("magnetic", true) && f.set("spec_nodes", true));
        assert_eq!(f.words(), "MAINT,FLEX,WEEKLY,SPEC_NODES,MAGNETIC", "Slurm's order, not the order given");
    }
}
