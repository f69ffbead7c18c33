//! Advance reservations ([`model::Reservation`]) in a pass: which nodes a job may use if it
//! starts now, and until when. A job outside every reservation may use a reserved node only if
//! it ends before the reservation's window begins; a job inside one uses only its nodes, only
//! while it is in force, and is cut to end with it (`FLEX` lifts all three; `MAGNETIC` lets
//! jobs that may use it land there without naming it).
//!
//! Planned starts (backfill's) use the same per-job mask, computed for a start now: a job that
//! may not touch a node now is not planned onto it later either (cautious, never overlapping).

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

/// The reservations in force now or later, resolved against the node list.
pub(crate) struct ResvTable<'a> {
    entries: Vec<Entry<'a>>,
    n_nodes: usize,
}

impl<'a> ResvTable<'a> {
    /// Resolves `reservations` at `now` (ended ones drop out; nodes not in `index` are ignored).
    pub fn new(reservations: &'a [Reservation], now: Time, nodes: &[Node], index: &FxHashMap<&str, u32>) -> ResvTable<'a> {
        let mut entries = Vec::new();
        for r in reservations {
            let Some((start, end)) = r.window(now) else { continue };
            let ids: Vec<u32> = if index.is_empty() {
                r.nodes.iter().filter_map(|n| nodes.iter().position(|x| &x.name == n).map(|i| i as u32)).collect()
            } else {
                r.nodes.iter().filter_map(|n| index.get(n.as_str()).copied()).collect()
            };
            entries.push(Entry { r, start, end, nodes: ids });
        }
        ResvTable { entries, n_nodes: nodes.len() }
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
        let limit = match req.kind {
            model::RequestKind::Replica { .. } => req.time_limit.clamp(1, model::resv::REPLICA_LEAD),
            model::RequestKind::Batch => req.time_limit.max(1),
        };
        let mut maint_blocked = false;
        let mask = match &req.reservation {
            Some(name) => {
                let Some(own) = self.entries.iter().position(|e| &e.r.name == name) else {
                    return Err(PendingReason::ReservationDeleted);
                };
                let e = &self.entries[own];
                if e.r.flags.flex {
                    let mut m = self.outside(req, now, limit, Some(own), &mut maint_blocked).unwrap_or_else(|| vec![true; self.n_nodes]);
                    for &n in &e.nodes {
                        m[n as usize] = true;
                    }
                    m
                } else {
                    if e.start > now {
                        return Err(PendingReason::Reservation);
                    }
                    if now + limit > e.end {
                        let cut = e.end - now;
                        r.cut = Some(cut);
                        r.limit = r.limit.min(cut);
                    }
                    let mut m = vec![false; self.n_nodes];
                    for &n in &e.nodes {
                        m[n as usize] = true;
                    }
                    m
                }
            }
            None => match self.outside(req, now, limit, None, &mut maint_blocked) {
                Some(m) => m,
                None => return Ok(()),
            },
        };
        let usable = (0..self.n_nodes as u32).filter(|&i| mask[i as usize] && r.filter.ok(i, &nodes[i as usize])).count();
        if (usable as u32) < r.nodes {
            return Err(if req.reservation.is_some() {
                PendingReason::Reservation
            } else if maint_blocked {
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

    /// The nodes a job that is not in reservation `own` may use for `[now, now + limit)`:
    /// `None` when no reservation is in the way. `maint` is set when a maintenance reservation is
    /// among those in the way.
    fn outside(&self, req: &model::JobRequest, now: Time, limit: Time, own: Option<usize>, maint: &mut bool) -> Option<Vec<bool>> {
        let mut mask: Option<Vec<bool>> = None;
        for (k, e) in self.entries.iter().enumerate() {
            if Some(k) == own || !(e.start < now.saturating_add(limit) && now < e.end) {
                continue;
            }
            // A magnetic reservation takes jobs that may use it and end within it.
            let magnetic = e.r.flags.magnetic && e.start <= now && now + limit <= e.end && e.r.admits(&req.user, &req.account);
            if magnetic {
                continue;
            }
            let m = mask.get_or_insert_with(|| vec![true; self.n_nodes]);
            for &n in &e.nodes {
                m[n as usize] = false;
            }
            *maint |= e.r.flags.maint;
        }
        mask
    }
}
