//! Advance reservations (`scontrol create|update|delete reservation`): who may make them
//! (operators and administrators, root always), which nodes they take, the checks Slurm makes
//! (nodes busy with running jobs or other reservations), and jobs' access to them (`sbatch
//! --reservation`). The scheduler honours them ([`sched`]'s snapshot carries them); a
//! reservation that does not repeat is dropped once it has ended.

use std::collections::BTreeSet;

use model::{JobState, Reservation, ResvFlags, Time};
use slurmcli::resv::{ListChange, ListOp, ResvSpec};

use crate::{Controller, Refused, natural};

/// Most reservations a cluster keeps.
pub const MAX_RESERVATIONS: usize = 1_000;

fn apply_list(list: &mut Vec<String>, negated: &mut bool, c: &ListChange) -> Result<(), Refused> {
    match c.op {
        ListOp::Set => {
            *list = c.names.clone();
            *negated = c.negated;
        }
        ListOp::Add => {
            for n in &c.names {
                if !list.contains(n) {
                    list.push(n.clone());
                }
            }
        }
        ListOp::Remove => list.retain(|n| !c.names.contains(n)),
    }
    if list.len() > slurmcli::resv::MAX_RESV_NAMES {
        return Err(Refused::Invalid(format!("at most {} names", slurmcli::resv::MAX_RESV_NAMES)));
    }
    Ok(())
}

impl Controller {
    /// The reservations, by name.
    pub fn reservations(&self) -> impl Iterator<Item = &Reservation> {
        self.reservations.values()
    }

    /// Puts back the reservations the store kept.
    pub fn restore_reservations(&mut self, list: Vec<Reservation>) {
        self.reservations = list.into_iter().map(|r| (r.name.clone(), r)).collect();
        self.resv_list = None;
        self.resv_gen += 1;
    }

    /// Something changed the reservations: to persist, and passes planned before it are stale.
    pub(crate) fn reservations_changed(&mut self) {
        self.reservations_dirty = true;
        self.resv_list = None;
        self.resv_gen += 1;
    }

    /// The reservations as a pass takes them: one shared copy until they change.
    pub(crate) fn reservation_list(&mut self) -> std::sync::Arc<Vec<Reservation>> {
        self.resv_list.get_or_insert_with(|| std::sync::Arc::new(self.reservations.values().cloned().collect())).clone()
    }

    /// The reservation in force on each node at `now` that has one (a maintenance one first):
    /// built once per listing.
    pub fn node_reservations(&self, now: Time) -> std::collections::HashMap<&str, &Reservation> {
        let mut m: std::collections::HashMap<&str, &Reservation> = std::collections::HashMap::new();
        for r in self.reservations.values().filter(|r| r.active(now)) {
            for n in &r.nodes {
                let e = m.entry(n.as_str()).or_insert(r);
                if r.flags.maint && !e.flags.maint {
                    *e = r;
                }
            }
        }
        m
    }

    /// A node by name.
    pub fn node_rec(&self, name: &str) -> Option<&crate::NodeRec> {
        self.node_index.get(name).map(|&i| &self.nodes[i]).filter(|n| !n.deleted)
    }

    fn may_reserve(&self, uid: u32) -> Result<(), Refused> {
        if self.is_operator(uid) { Ok(()) } else { Err(Refused::Forbidden("Invalid user id".into())) }
    }

    /// `scontrol create reservation`: returns the name (generated from the first user or
    /// account when not given, `alice_1`).
    pub fn create_reservation(&mut self, now: Time, uid: u32, spec: &ResvSpec) -> Result<String, Refused> {
        self.may_reserve(uid)?;
        if self.reservations.len() >= MAX_RESERVATIONS {
            return Err(Refused::Invalid(format!("Too many reservations: at most {MAX_RESERVATIONS}")));
        }
        let start = spec.start.ok_or_else(|| Refused::Invalid("A start time must be given.".into()))?;
        let end = match (spec.end, spec.duration) {
            (Some(e), _) => e,
            (None, Some(d)) => start.saturating_add(d),
            (None, None) => return Err(Refused::Invalid("An end time or duration must be given.".into())),
        };
        if spec.users.is_none() && spec.accounts.is_none() {
            return Err(Refused::Invalid("Either Users/Groups and/or Accounts must be specified.".into()));
        }
        let mut r = Reservation {
            name: String::new(),
            start,
            end,
            nodes: Vec::new(),
            users: Vec::new(),
            users_negated: false,
            accounts: Vec::new(),
            accounts_negated: false,
            partition: None,
            flags: ResvFlags::default(),
            tres: spec.tres.clone().unwrap_or_default(),
        };
        self.apply_resv_spec(&mut r, spec, now, true)?;
        r.name = match &spec.name {
            Some(n) => {
                if self.reservations.contains_key(n) {
                    return Err(Refused::Conflict("Duplicate reservation name".into()));
                }
                n.clone()
            }
            None => {
                let stem = r.users.first().filter(|_| !r.users_negated).or(r.accounts.first()).cloned().unwrap_or_else(|| "resv".into());
                (1..).map(|k| format!("{stem}_{k}")).find(|n| !self.reservations.contains_key(n)).expect("some name is free")
            }
        };
        let name = r.name.clone();
        self.reservations.insert(name.clone(), r);
        self.reservations_changed();
        Ok(name)
    }

    /// `scontrol update ReservationName=...`.
    pub fn update_reservation(&mut self, now: Time, uid: u32, spec: &ResvSpec) -> Result<(), Refused> {
        self.may_reserve(uid)?;
        let name = spec.name.as_deref().ok_or_else(|| Refused::Invalid("ReservationName must be specified".into()))?;
        let mut r = self.reservations.get(name).cloned().ok_or_else(|| Refused::NotFound("Requested reservation is invalid".into()))?;
        // A repeating one is changed from its window in force or next.
        if let Some((s, e)) = r.window(now) {
            (r.start, r.end) = (s, e);
        }
        if let Some(t) = &spec.tres {
            r.tres = t.clone();
        }
        // A new start without a new end keeps the duration, as Slurm's.
        match (spec.start, spec.end, spec.duration) {
            (s, Some(e), _) => {
                r.start = s.unwrap_or(r.start);
                r.end = e;
            }
            (s, None, Some(d)) => {
                r.start = s.unwrap_or(r.start);
                r.end = r.start.saturating_add(d);
            }
            (Some(s), None, None) => {
                let d = r.end - r.start;
                r.start = s;
                r.end = s.saturating_add(d);
            }
            (None, None, None) => {}
        }
        self.apply_resv_spec(&mut r, spec, now, false)?;
        self.reservations.insert(name.to_string(), r);
        self.reservations_changed();
        Ok(())
    }

    /// `scontrol delete ReservationName=...`: refused while jobs wait for it or run in it
    /// (Slurm's rule).
    pub fn delete_reservation(&mut self, uid: u32, name: &str) -> Result<(), Refused> {
        self.may_reserve(uid)?;
        if !self.reservations.contains_key(name) {
            return Err(Refused::NotFound("Requested reservation is invalid".into()));
        }
        if self.active().any(|j| !j.state.is_final() && j.req.reservation.as_deref() == Some(name)) {
            return Err(Refused::Conflict("Requested reservation is in use".into()));
        }
        self.reservations.remove(name);
        self.reservations_changed();
        Ok(())
    }

    /// Drops the reservations that have ended and do not repeat; whether any was dropped. The
    /// jobs still waiting for one lose it and are held (Slurm's default, without
    /// `NO_HOLD_JOBS_AFTER`): `scontrol release` lets them run outside it.
    pub(crate) fn expire_reservations(&mut self, now: Time) -> bool {
        let ended: Vec<String> = self.reservations.values().filter(|r| r.window(now).is_none()).map(|r| r.name.clone()).collect();
        if ended.is_empty() {
            return false;
        }
        for name in &ended {
            self.reservations.remove(name);
        }
        let waiting: Vec<u64> = self
            .active()
            .filter(|j| j.state == JobState::Pending && j.req.reservation.as_ref().is_some_and(|r| ended.contains(r)))
            .map(|j| j.req.id.0)
            .collect();
        for id in waiting {
            if let Some(j) = self.jobs.get_mut(&id) {
                j.req.reservation = None;
                j.req.held = true;
                j.reason = model::PendingReason::JobHeldUser;
                self.dirty_jobs.insert(id);
            }
        }
        self.reservations_changed();
        true
    }

    /// A submission's `--reservation`: the reservation exists and admits the job's user or
    /// account (root may use any).
    pub(crate) fn check_reservation(&self, now: Time, uid: u32, user: &str, account: &str, name: Option<&str>) -> Result<(), Refused> {
        let Some(name) = name else { return Ok(()) };
        let r = self
            .reservations
            .get(name)
            .filter(|r| r.window(now).is_some())
            .ok_or_else(|| Refused::Invalid("Requested reservation is invalid".into()))?;
        if uid != 0 && !r.admits(user, account) {
            return Err(Refused::Forbidden("Access denied to requested reservation".into()));
        }
        Ok(())
    }

    /// The partition a job in reservation `name` runs in when it names none: the
    /// reservation's.
    pub(crate) fn reservation_partition(&self, name: Option<&str>) -> Option<String> {
        self.reservations.get(name?)?.partition.clone()
    }

    /// Applies a create or update to `r` and checks the result against the cluster: times, the
    /// partition, nodes (named, counted, or enough for `TRES`), and that no node is busy with a
    /// running job past the start (without `IGNORE_JOBS`) or held by another reservation at
    /// the same time (without `OVERLAP`).
    fn apply_resv_spec(&self, r: &mut Reservation, spec: &ResvSpec, now: Time, create: bool) -> Result<(), Refused> {
        let invalid = |m: &str| Err(Refused::Invalid(m.to_string()));
        check_form(spec, now)?;
        for f in &spec.flags_set {
            if !r.flags.set(f, true) {
                return invalid(&format!("Error parsing flags: {f}"));
            }
        }
        for f in &spec.flags_clear {
            if !r.flags.set(f, false) {
                return invalid(&format!("Error parsing flags: {f}"));
            }
        }
        if r.flags.daily && r.flags.weekly {
            return invalid("DAILY and WEEKLY cannot both be set");
        }
        if let Some(c) = &spec.users {
            apply_list(&mut r.users, &mut r.users_negated, c)?;
        }
        if let Some(c) = &spec.accounts {
            apply_list(&mut r.accounts, &mut r.accounts_negated, c)?;
        }
        if r.users.is_empty() && r.accounts.is_empty() {
            return invalid("Either Users/Groups and/or Accounts must be specified.");
        }
        if let Some(p) = &spec.partition {
            if self.settings.cluster.partitions.iter().all(|x| &x.name != p) {
                return invalid("Invalid partition name specified");
            }
            r.partition = Some(p.clone());
        }
        // Nodes chosen by count come from a partition: the default one when none is named.
        if spec.nodes.is_none() && (spec.node_cnt.is_some() || spec.cpus.is_some() || spec.gpus.is_some()) && r.partition.is_none() {
            r.partition = self.settings.cluster.partitions.first().map(|p| p.name.clone());
        }
        // A start in the past is refused (a minute's grace for the clocks of client and server).
        if (create || spec.start.is_some()) && r.start < now - 60 {
            return invalid("Invalid time specified");
        }
        if r.end <= r.start {
            return invalid("Start time cannot be after end time.");
        }
        if r.end <= now {
            return invalid("Invalid time specified");
        }
        if let Some(p) = r.flags.period()
            && r.end - r.start > p
        {
            return invalid("Invalid time specified: a repeating reservation is longer than its period");
        }
        let probe = r.clone();
        let r_ = &probe;
        let others: Vec<&Reservation> = self
            .reservations
            .values()
            .filter(|o| o.name != r_.name && !o.flags.overlap && !r_.flags.overlap && clash(o, r_, now))
            .collect();
        let busy = |node: &str| -> bool {
            !r_.flags.ignore_jobs
                && self.active().any(|j| {
                    j.state.on_nodes()
                        && j.allocs.iter().any(|(n, _)| n == node)
                        && j.req.reservation.as_deref() != Some(r_.name.as_str())
                        && (j.state == JobState::Suspended
                            || j.start.unwrap_or(now).saturating_add(j.req.time_limit).saturating_add(j.suspended_secs) > r_.start)
                })
        };
        let taken = |node: &str| others.iter().any(|o| o.holds(node));
        let chosen: Option<Vec<String>> = match (&spec.nodes, spec.node_cnt, spec.cpus, spec.gpus) {
            (Some(list), _, _, _) => {
                let all = list.len() == 1 && list[0] == "ALL";
                let mut names: Vec<String> =
                    if all { self.nodes.iter().filter(|n| !n.deleted).map(|n| n.node.name.clone()).collect() } else { list.clone() };
                let mut seen = BTreeSet::new();
                names.retain(|n| seen.insert(n.clone()));
                for n in &names {
                    if !self.node_index.contains_key(n) || self.nodes[self.node_index[n]].deleted {
                        return invalid(&format!("Invalid node name specified: {n}"));
                    }
                }
                if let Some(n) = names.iter().find(|n| taken(n)) {
                    return Err(Refused::Busy(format!("Requested reservation overlaps with another reservation (on {n})")));
                }
                if let Some(n) = names.iter().find(|n| busy(n)) {
                    return Err(Refused::Busy(format!(
                        "Requested nodes are busy (a running job on {n} ends after the start; Flags=IGNORE_JOBS lets it run on)"
                    )));
                }
                r.flags.spec_nodes = !all;
                Some(names)
            }
            (None, None, None, None) => None,
            (None, count, cpus, gpus) => {
                let mut pool: Vec<&crate::NodeRec> = self
                    .nodes
                    .iter()
                    .filter(|n| {
                        !n.deleted
                            && n.node.state.schedulable()
                            && r_.partition.as_deref().is_none_or(|p| n.node.in_partition(p))
                            && (gpus.is_none() || n.node.gpus > 0)
                            && !busy(&n.node.name)
                            && !taken(&n.node.name)
                    })
                    .collect();
                pool.sort_by(|a, b| natural(&a.node.name).cmp(&natural(&b.node.name)));
                let (mut got, mut c, mut g) = (Vec::new(), 0u64, 0u64);
                for n in pool {
                    let enough = count.is_none_or(|k| got.len() >= k as usize)
                        && cpus.is_none_or(|k| c >= k as u64)
                        && gpus.is_none_or(|k| g >= k as u64);
                    if enough {
                        break;
                    }
                    c += n.node.cpus as u64;
                    g += n.node.gpus as u64;
                    got.push(n.node.name.clone());
                }
                let enough = count.is_none_or(|k| got.len() >= k as usize)
                    && cpus.is_none_or(|k| c >= k as u64)
                    && gpus.is_none_or(|k| g >= k as u64);
                if !enough {
                    return Err(Refused::Busy("Requested nodes are busy: not enough nodes are free for the reservation".into()));
                }
                r.flags.spec_nodes = false;
                Some(got)
            }
        };
        match chosen {
            Some(list) => r.nodes = list,
            None if create => {
                return invalid("Nodes, NodeCnt or TRES must be specified.");
            }
            None => {
                // Times or flags changed: the nodes it holds must still be free then.
                if let Some(n) = r.nodes.iter().find(|n| taken(n)) {
                    return Err(Refused::Busy(format!("Requested reservation overlaps with another reservation (on {n})")));
                }
                if spec.start.is_some()
                    && let Some(n) = r.nodes.iter().find(|n| busy(n))
                {
                    return Err(Refused::Busy(format!(
                        "Requested nodes are busy (a running job on {n} ends after the start; Flags=IGNORE_JOBS lets it run on)"
                    )));
                }
            }
        }
        let mut seen = BTreeSet::new();
        r.nodes.retain(|n| seen.insert(n.clone()));
        r.nodes.sort_by(|a, b| natural(a).cmp(&natural(b)));
        Ok(())
    }
}

/// Ten years: no time a reservation names is further from now (nor any duration longer).
const FAR: Time = 10 * 366 * model::resv::DAY;

/// A body that did not come from `scontrol` gets the checks its parser makes: names, list
/// sizes, flags, and times within ten years of now.
fn check_form(spec: &ResvSpec, now: Time) -> Result<(), Refused> {
    let bad = |m: String| Err(Refused::Invalid(m));
    let valid = slurmcli::resv::valid_resv_name;
    if let Some(n) = spec.name.as_deref().filter(|n| !valid(n)) {
        return bad(format!("Invalid reservation name: {} (letters, digits, _ - and ., at most 64)", slurmcli::visible(n)));
    }
    if let Some(p) = spec.partition.as_deref().filter(|n| !valid(n)) {
        return bad(format!("Invalid partition name specified: {}", slurmcli::visible(p)));
    }
    for (what, l) in [("Users", &spec.users), ("Accounts", &spec.accounts)] {
        if let Some(l) = l
            && (l.names.is_empty() || l.names.len() > slurmcli::resv::MAX_RESV_NAMES || l.names.iter().any(|n| !valid(n)))
        {
            return bad(format!("Invalid {what} value: names of letters, digits, _ - and ., at most {}", slurmcli::resv::MAX_RESV_NAMES));
        }
    }
    if let Some(n) = &spec.nodes
        && (n.is_empty() || n.len() > slurmcli::resv::MAX_RESV_NODES || n.iter().any(|x| x.is_empty() || x.len() > slurmcli::MAX_HOST_NAME))
    {
        return bad(format!("Invalid node name specified: at most {} nodes", slurmcli::resv::MAX_RESV_NODES));
    }
    if spec.tres.as_ref().is_some_and(|t| t.len() > 256) || spec.flags_set.len() + spec.flags_clear.len() > 64 {
        return bad("Invalid TRES or Flags value: too long".into());
    }
    if spec.node_cnt == Some(0) || spec.cpus == Some(0) || spec.gpus == Some(0) {
        return bad("Invalid node count: at least 1".into());
    }
    let near = |t: Time| (now.saturating_sub(FAR)..=now.saturating_add(FAR)).contains(&t);
    if spec.start.is_some_and(|t| !near(t)) || spec.end.is_some_and(|t| !near(t)) || spec.duration.is_some_and(|d| !(0..=FAR).contains(&d))
    {
        return bad("Invalid time specified: more than ten years away".into());
    }
    Ok(())
}

/// Whether two reservations share time: their occurrences from the later start on, over eight
/// days (past which both repeat as before: a period is a day or a week).
fn clash(a: &Reservation, b: &Reservation, now: Time) -> bool {
    let from = a.start.max(b.start).max(now);
    let horizon = from.saturating_add(8 * model::resv::DAY);
    let windows = |r: &Reservation| -> Vec<(Time, Time)> {
        let mut v = Vec::new();
        let mut t = from;
        while let Some((s, e)) = r.window(t) {
            v.push((s, e));
            if r.flags.period().is_none() || s > horizon || v.len() > 16 {
                break;
            }
            t = e;
        }
        v
    };
    let (wa, wb) = (windows(a), windows(b));
    wa.iter().any(|(s1, e1)| wb.iter().any(|(s2, e2)| s1 < e2 && s2 < e1))
}
