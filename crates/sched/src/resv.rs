//! Advance reservations ([`model::Reservation`]) in a pass: which nodes a job may use if it
//! starts now, and until when. A job outside every reservation may use a reserved node only if
//! it ends before the reservation's window begins; a job inside one uses only its nodes (less
//! those another reservation takes meanwhile), only while it is in force and while it admits
//! the job's user or account, and is cut to end with it (`FLEX` lifts all but the access;
//! `MAGNETIC` lets batch jobs that may use it land there without naming it).
//!
//! Planned starts (backfill's) use the same per-job mask, computed for a start now: a job that
//! may not touch a node now is not planned onto it later either (cautious, never overlapping).
//!
//! Masks are shared: jobs that the same reservations keep out (or let in) get one mask, and the
//! count of nodes it leaves them is kept per kind of node filter, so a pass costs O(nodes) per
//! distinct case, not per job.

use std::cell::RefCell;
use std::sync::Arc;

use model::{Node, PendingReason, Reservation, Time};
use rustc_hash::FxHashMap;

use crate::Resolved;

/// One reservation as a pass sees it: its current (or next) window and node indices.
struct Entry<'a> {
    r: &'a Reservation,
    start: Time,
    end: Time,
    nodes: Vec<u32>,
}

/// What decides a job's mask: the reservation it is in (and whether it is `FLEX`), and the
/// reservations that keep it off their nodes: those listed, and the first `prefix` entries.
#[derive(Clone, PartialEq, Eq, Hash)]
struct MaskKey {
    own: Option<(u16, bool)>,
    blocked: Vec<u16>,
    prefix: usize,
}

/// The reservations in force now or later, resolved against the node list.
pub(crate) struct ResvTable<'a> {
    /// By start of the window in force or next.
    entries: Vec<Entry<'a>>,
    /// Whether the first `k + 1` entries include a maintenance one.
    prefix_maint: Vec<bool>,
    /// Some entry is `MAGNETIC`.
    magnetic: bool,
    n_nodes: usize,
    masks: RefCell<FxHashMap<MaskKey, Arc<[bool]>>>,
}

impl<'a> ResvTable<'a> {
    /// Resolves `reservations` at `now` (ended ones drop out; nodes not in `index` are ignored).
    pub fn new(reservations: &'a [Reservation], now: Time, nodes: &[Node], index: &FxHashMap<&str, u32>) -> ResvTable<'a> {
        let mut entries = Vec::new();
        for r in reservations.iter().take(u16::MAX as usize) {
            let Some((start, end)) = r.window(now) else { continue };
            let ids: Vec<u32> = if index.is_empty() {
                r.nodes.iter().filter_map(|n| nodes.iter().position(|x| &x.name == n).map(|i| i as u32)).collect()
            } else {
                r.nodes.iter().filter_map(|n| index.get(n.as_str()).copied()).collect()
            };
            entries.push(Entry { r, start, end, nodes: ids });
        }
        entries.sort_by_key(|e| e.start);
        let prefix_maint = entries.iter().scan(false, |m, e| {
            *m |= e.r.flags.maint;
            Some(*m)
        });
        let prefix_maint = prefix_maint.collect();
        let magnetic = entries.iter().any(|e| e.r.flags.magnetic);
        ResvTable { entries, prefix_maint, magnetic, n_nodes: nodes.len(), masks: RefCell::default() }
    }

    /// Restricts `r` to the nodes it may use if started now (its filter's mask, every
    /// component's), and cuts its limit to its reservation's end. `Err`: it cannot start now
    /// because of a reservation, with the reason.
    pub fn apply(&self, r: &mut Resolved, now: Time, nodes: &[Node]) -> Result<(), PendingReason> {
        let req = r.req;
        if self.entries.is_empty() {
            return match &req.reservation {
                Some(_) => Err(PendingReason::ReservationDeleted),
                None => Ok(()),
            };
        }
        // A replica has no end to plan with: it leaves a node ahead of a reservation instead.
        let replica = matches!(req.kind, model::RequestKind::Replica { .. });
        let limit = if replica { req.time_limit.clamp(1, model::resv::REPLICA_LEAD) } else { req.time_limit.max(1) };
        let own = match &req.reservation {
            None => None,
            Some(name) => {
                let Some(k) = self.entries.iter().position(|e| &e.r.name == name) else {
                    return Err(PendingReason::ReservationDeleted);
                };
                let e = &self.entries[k];
                // Access is checked again at each pass (an update may have taken it away; root
                // may use any, as at submission).
                if req.user != "root" && !e.r.admits(&req.user, &req.account) {
                    return Err(PendingReason::Reservation);
                }
                if !e.r.flags.flex {
                    if e.start > now {
                        return Err(PendingReason::Reservation);
                    }
                    if now + limit > e.end {
                        let cut = e.end - now;
                        r.cut = Some(cut);
                        r.limit = r.limit.min(cut);
                    }
                }
                Some((k as u16, e.r.flags.flex))
            }
        };
        // The window it would hold the nodes for (cut to its reservation's end).
        let until = now.saturating_add(r.cut.unwrap_or(limit));
        let mut maint = false;
        // The common case, a job in no reservation with no magnetic one about: the
        // reservations in its way are those starting before it would end, a prefix of the
        // entries (sorted by start; every entry ends after now).
        if own.is_none() && !self.magnetic {
            let n = self.entries.partition_point(|e| e.start < until);
            if n == 0 {
                return Ok(());
            }
            let key = MaskKey { own: None, blocked: Vec::new(), prefix: n };
            let mask = self.masks.borrow_mut().entry(key.clone()).or_insert_with(|| self.build(&key)).clone();
            return self.finish(r, mask, nodes, None, self.prefix_maint[n - 1]);
        }
        let blocked: Vec<u16> = self
            .entries
            .iter()
            .enumerate()
            .filter(|&(k, e)| {
                if own.is_some_and(|(o, _)| o as usize == k) || !(e.start < until && now < e.end) {
                    return false;
                }
                // A magnetic reservation takes batch jobs that may use it and end within it.
                let magnetic = !replica
                    && own.is_none()
                    && e.r.flags.magnetic
                    && e.start <= now
                    && until <= e.end
                    && e.r.admits(&req.user, &req.account);
                !magnetic
            })
            .map(|(k, e)| {
                maint |= e.r.flags.maint;
                k as u16
            })
            .collect();
        if own.is_none() && blocked.is_empty() {
            return Ok(());
        }
        let key = MaskKey { own, blocked, prefix: 0 };
        let mask = self.masks.borrow_mut().entry(key.clone()).or_insert_with(|| self.build(&key)).clone();
        self.finish(r, mask, nodes, own, maint)
    }

    /// Gives `r` its mask, or the reason it cannot start now: fewer nodes than it needs are
    /// left it (counted until enough are found: usually a few).
    fn finish(
        &self,
        r: &mut Resolved,
        mask: Arc<[bool]>,
        nodes: &[Node],
        own: Option<(u16, bool)>,
        maint: bool,
    ) -> Result<(), PendingReason> {
        let mut usable = 0u32;
        for i in 0..self.n_nodes as u32 {
            if usable >= r.nodes {
                break;
            }
            if mask[i as usize] && r.filter.ok(i, &nodes[i as usize]) {
                usable += 1;
            }
        }
        if usable < r.nodes {
            return Err(if own.is_some() {
                PendingReason::Reservation
            } else if maint {
                PendingReason::ReservedForMaintenance
            } else {
                PendingReason::ReservedNodes
            });
        }
        r.filter.restrict(&mask);
        for p in &mut r.het {
            p.filter.restrict(&mask);
        }
        Ok(())
    }

    /// The mask of a case: its own reservation's nodes (all nodes outside the others' with
    /// `FLEX`, or for a job in none), less the nodes of the reservations that keep it off.
    fn build(&self, key: &MaskKey) -> Arc<[bool]> {
        let mut blocked = vec![false; self.n_nodes];
        for k in key.blocked.iter().map(|&k| k as usize).chain(0..key.prefix) {
            for &n in &self.entries[k].nodes {
                blocked[n as usize] = true;
            }
        }
        let anywhere = key.own.is_none_or(|(_, flex)| flex);
        let mut m: Vec<bool> = blocked.iter().map(|b| anywhere && !b).collect();
        if let Some((o, _)) = key.own {
            for &n in &self.entries[o as usize].nodes {
                m[n as usize] = !blocked[n as usize];
            }
        }
        m.into()
    }
}
