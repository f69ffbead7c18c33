//! The submit fast path: after a full EASY pass, a newly submitted job that does not outrank
//! the reserved job is decided against what that pass left behind (the free-capacity view, the
//! shadow time, the reserved nodes), in time proportional to placing one job rather than to the
//! whole queue. Anything else (a completion, a cancellation, a node change, a job that outranks
//! the reservation, another backfill mode) takes a full pass.
//!
//! The fast path never delays the reservation: a job that would outlive the shadow time may not
//! use reserved nodes at all (a full pass would let it use their spare capacity), so it is at
//! most more cautious than a full pass, never less.

use model::Time;

use crate::{
    Admit, Backfill, Config, PassMemo, Plan, Snapshot, Start, Waiting, admit, priority, priority_context, schedule_inner, try_place,
};
use model::PendingReason;

/// A scheduler that remembers its last full pass, for the submit fast path.
pub struct Scheduler<'n> {
    cfg: Config,
    nodes: &'n [model::Node],
    topo: std::sync::Arc<crate::Topology>,
    facts: Option<crate::Facts<'n>>,
    ever: crate::EverFits,
    frag: crate::FragCache,
    spare: crate::conservative::Spare,
    memo: Option<PassMemo<'n>>,
    last_fast: bool,
}

impl<'n> Scheduler<'n> {
    /// A scheduler with these settings for this node list (every snapshot passed in must use
    /// this very slice; node states may change, node definitions may not: make a new scheduler
    /// when nodes are added or redefined). Topology and "can this shape ever fit" are computed
    /// once and kept.
    pub fn new(cfg: Config, nodes: &'n [model::Node]) -> Scheduler<'n> {
        Scheduler {
            cfg,
            nodes,
            topo: std::sync::Arc::new(crate::Topology::new(nodes)),
            facts: None,
            ever: crate::EverFits::default(),
            frag: crate::FragCache::default(),
            spare: crate::conservative::Spare::default(),
            memo: None,
            last_fast: false,
        }
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// A full pass (same result as [`crate::schedule`]); remembers what it leaves behind.
    pub fn pass(&mut self, snap: &Snapshot, now: Time, seed: u64) -> Plan {
        let stale = self.facts.as_ref().is_none_or(|f| !f.partitions.iter().eq(snap.config.partitions.iter().map(|p| &p.name)));
        if stale {
            self.facts = Some(crate::Facts::new(self.nodes, snap.config, true));
        }
        let facts = self.facts.as_ref().expect("facts were just built");
        let (plan, memo) = schedule_inner(
            self.nodes,
            self.topo.clone(),
            facts,
            &mut self.ever,
            &mut self.frag,
            &mut self.spare,
            snap,
            now,
            seed,
            &self.cfg,
        );
        self.memo = (self.cfg.backfill == Backfill::Easy && !self.cfg.commit_head).then_some(memo);
        plan
    }

    /// Whether the last [`Scheduler::submitted`] call was decided on the fast path.
    pub fn last_was_fast(&self) -> bool {
        self.last_fast
    }

    /// Forgets the last pass: call after anything but a submission changed the cluster.
    pub fn invalidate(&mut self) {
        self.memo = None;
    }

    /// Decides newly submitted jobs (indices into `snap.pending`). `snap` must be the last pass's
    /// snapshot with that pass's plan applied, plus these submissions. Falls back to a full
    /// pass whenever the fast path cannot decide exactly.
    pub fn submitted(&mut self, snap: &Snapshot, now: Time, seed: u64, new: &[usize]) -> Plan {
        match self.fast(snap, now, seed, new) {
            Some(plan) => {
                self.last_fast = true;
                plan
            }
            None => {
                self.last_fast = false;
                self.pass(snap, now, seed)
            }
        }
    }

    fn fast(&mut self, snap: &Snapshot, now: Time, seed: u64, new: &[usize]) -> Option<Plan> {
        let memo = self.memo.as_mut()?;
        let (top_key, top_seq, _, shadow, reserved) = memo.top.as_ref()?;
        let facts = self.facts.as_ref()?;
        let ever = &mut self.ever;
        let mut plan = Plan::default();
        let limits = crate::Limits::new(snap);
        let resv = crate::resv::ResvTable::new(snap.reservations, now, snap.nodes, &facts.name_index);
        // The full pass's placement profile, not derived again from every pending job (which
        // made each submission cost O(pending)).
        let mut replicas =
            crate::Placer::new(self.cfg.placement, seed, Some(&memo.profile), snap, &mut self.frag, (facts.max_cpus, facts.max_gpus));
        for &idx in new {
            let p = snap.pending.get(idx)?;
            if !p.req.het.is_empty() {
                return None; // a heterogeneous job is planned by a full pass
            }
            if (!p.req.nodelist.is_empty() || !p.req.exclude.is_empty()) && facts.name_index.is_empty() {
                return None; // the last pass built no node-name index
            }
            if !memo.accounts.contains(&p.req.account) {
                return None; // a new account changes everyone's fair-share normalisation
            }
            if p.req.reservation.is_some() {
                return None; // a job in an advance reservation is planned by a full pass
            }
            let r = match admit(snap, facts, ever, &limits, &resv, now, idx, p) {
                Admit::Ready(mut r) => {
                    if self.cfg.predicting() {
                        r.limit = snap.history.predict(self.cfg.predict, r.req);
                    }
                    r
                }
                Admit::Wait(reason) => {
                    plan.waiting.push(Waiting { job: p.req.id, reason, expected_start: None });
                    continue;
                }
                Admit::Reject(reason, message) => {
                    plan.rejected.push(crate::Rejected { job: p.req.id, reason, message });
                    continue;
                }
            };
            let ctx = priority_context(snap, facts, now, memo.total_shares);
            let key = priority::key(&self.cfg.policy, &ctx, r.req, r.nodes, r.limit);
            let outranks = key
                .partial_cmp(top_key)
                .is_none_or(|o| o == std::cmp::Ordering::Less || (o == std::cmp::Ordering::Equal && p.seq < *top_seq));
            if outranks {
                return None;
            }
            plan.stats.considered += 1;
            if let Some(reason) = limits.blocks(&r) {
                plan.waiting.push(Waiting { job: r.req.id, reason, expected_start: None });
                continue;
            }
            let started = if now + r.limit.max(1) <= *shadow {
                try_place(snap, &mut memo.view, &r, &mut replicas)
            } else {
                let mut outside = r.clone();
                let mut mask = vec![true; snap.nodes.len()];
                for &n in reserved {
                    mask[n as usize] = false;
                }
                outside.filter.restrict(&mask.into());
                try_place(snap, &mut memo.view, &outside, &mut replicas)
            };
            match started {
                Some(allocs) => {
                    plan.stats.backfilled += 1;
                    plan.starts.push(Start { job: r.req.id, allocs, backfilled: true, time_limit: None, het: r.het_nodes() });
                }
                None => plan.waiting.push(Waiting { job: r.req.id, reason: PendingReason::Priority, expected_start: None }),
            }
        }
        Some(plan)
    }
}
