//! Conservative backfill: every blocked job, in priority order and up to a bound, gets a
//! reservation at the earliest time its gang fits on specific nodes for its whole time limit,
//! given running work (ending at its time limit) and the reservations already made. A job starts
//! now only if it fits now and overlaps no reservation; so no job ever delays an earlier one.

use model::{GPU_MILLI, JobId, PendingReason, Time};
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;

use crate::view::{Demand, View};
use crate::{Config, Plan, Resolved, Snapshot, Start, Waiting, try_place};

/// A busy interval on one node: [start, end) using these resources.
#[derive(Clone, Copy)]
struct Busy {
    start: Time,
    end: Time,
    cpus: u32,
    memory: u64,
    gpu_milli: u32,
    exclusive: bool,
}

struct Timeline<'n> {
    nodes: &'n [model::Node],
    busy: Vec<Vec<Busy>>,
    times: BTreeSet<Time>,
}

impl Timeline<'_> {
    /// Whether node `n` can hold `d` during [t, t+len).
    fn fits(&self, n: usize, d: &Demand, t: Time, len: Time) -> bool {
        let node = &self.nodes[n];
        if !node.state.schedulable() {
            return false;
        }
        let end = t + len;
        let list = &self.busy[n];
        // Usage peaks at t or at the start of an overlapping interval.
        let mut points: Vec<Time> = vec![t];
        for b in list {
            if b.start > t && b.start < end {
                points.push(b.start);
            }
        }
        for &p in &points {
            let (mut cpus, mut mem, mut gpu, mut any) = (0u32, 0u64, 0u32, false);
            for b in list {
                if b.start <= p && p < b.end {
                    if b.exclusive {
                        return false;
                    }
                    cpus += b.cpus;
                    mem += b.memory;
                    gpu += b.gpu_milli;
                    any = true;
                }
            }
            if d.exclusive && any {
                return false;
            }
            if !d.exclusive
                && (cpus + d.cpus > node.cpus
                    || mem + d.memory > node.memory
                    || gpu + d.gpus * d.gpu_milli.min(GPU_MILLI) > node.gpus * GPU_MILLI)
            {
                return false;
            }
        }
        true
    }

    fn add(&mut self, n: usize, b: Busy) {
        self.times.insert(b.end);
        self.busy[n].push(b);
    }
}

pub(crate) fn run(snap: &Snapshot, now: Time, cfg: &Config, ready: &[Resolved], order: &[usize], view: &mut View, plan: &mut Plan) {
    let mut tl = Timeline { nodes: snap.nodes, busy: vec![Vec::new(); snap.nodes.len()], times: BTreeSet::new() };
    tl.times.insert(now);
    for r in snap.running {
        let end = r.expected_end(now).max(now + 1);
        for a in &r.allocs {
            tl.add(a.node as usize, Busy { start: now, end, cpus: a.cpus, memory: a.memory, gpu_milli: a.gpus.len() as u32 * a.gpu_milli, exclusive: a.exclusive });
        }
    }
    let mut replicas: FxHashMap<String, Vec<u32>> = FxHashMap::default();
    let mut blocked_any = false;
    let mut reservations = 0usize;
    for &i in order {
        let r = &ready[i];
        plan.stats.considered += 1;
        let len = r.limit.max(1);
        let mut done = false;
        let times: Vec<Time> = tl.times.range(now..).copied().collect();
        for t in times {
            if t > now && reservations >= cfg.max_reservations {
                break;
            }
            let mut mask = vec![false; snap.nodes.len()];
            let mut count = 0u32;
            for (n, m) in mask.iter_mut().enumerate() {
                if r.filter.ok(n as u32, &snap.nodes[n]) && tl.fits(n, &r.demand, t, len) {
                    *m = true;
                    count += 1;
                }
            }
            if count < r.nodes {
                continue;
            }
            if t == now {
                let mut masked = r.clone();
                masked.filter.mask = Some(mask);
                masked.filter.all = false;
                if let Some(allocs) = try_place(snap, view, &masked, &mut replicas) {
                    for a in &allocs {
                        tl.add(a.node as usize, busy_of(a, now, now + len));
                    }
                    plan.starts.push(Start { job: r.req.id, allocs, backfilled: blocked_any });
                    if blocked_any {
                        plan.stats.backfilled += 1;
                    } else {
                        plan.stats.started += 1;
                    }
                    done = true;
                    break;
                }
                continue;
            }
            // Reserve the first `nodes` feasible nodes, tightest first by index order.
            let chosen: Vec<usize> = mask.iter().enumerate().filter(|(_, m)| **m).map(|(n, _)| n).take(r.nodes as usize).collect();
            for &n in &chosen {
                let node = &snap.nodes[n];
                let d = &r.demand;
                let b = if d.exclusive {
                    Busy { start: t, end: t + len, cpus: node.cpus, memory: node.memory, gpu_milli: node.gpus * GPU_MILLI, exclusive: true }
                } else {
                    Busy { start: t, end: t + len, cpus: d.cpus, memory: d.memory, gpu_milli: d.gpus * d.gpu_milli.min(GPU_MILLI), exclusive: false }
                };
                tl.add(n, b);
            }
            reservations += 1;
            plan.stats.reservations += 1;
            let reason = if blocked_any { PendingReason::Priority } else { PendingReason::Resources };
            plan.waiting.push(Waiting { job: r.req.id, reason, expected_start: Some(t) });
            blocked_any = true;
            done = true;
            break;
        }
        if !done {
            let reason = if blocked_any { PendingReason::Priority } else { PendingReason::Resources };
            plan.waiting.push(Waiting { job: r.req.id, reason, expected_start: None });
            blocked_any = true;
        }
    }
    let _: Option<JobId> = None;
}

fn busy_of(a: &crate::Alloc, start: Time, end: Time) -> Busy {
    Busy { start, end, cpus: a.cpus, memory: a.memory, gpu_milli: a.gpus.len() as u32 * a.gpu_milli, exclusive: a.exclusive }
}
