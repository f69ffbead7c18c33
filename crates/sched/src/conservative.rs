//! Conservative backfill: every blocked job, in priority order and up to a bound, gets a
//! reservation at the earliest time its gang fits on specific nodes for its whole time limit,
//! given running work (ending at its time limit) and the reservations already made. A job starts
//! now only if it fits now and overlaps no reservation; so no job ever delays an earlier one.

use model::{GPU_MILLI, PendingReason, Time};
use rustc_hash::FxHashMap;

use crate::view::{Demand, View};
use crate::{Config, Limits, Plan, Resolved, Snapshot, Start, Waiting, try_place};

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
}

impl Timeline<'_> {
    /// Start times at which node `n` can hold `d` for `len` seconds, as sorted disjoint
    /// half-open intervals [a, b) within [now, ∞).
    fn feasible(&self, n: usize, d: &Demand, now: Time, len: Time, out: &mut Vec<(Time, Time)>) {
        out.clear();
        let node = &self.nodes[n];
        if !node.state.schedulable() {
            return;
        }
        // A node too small for the demand even when idle holds it at no time: without this, an
        // idle node (or one after its last busy interval) took any reservation, and a reservation
        // made on a node that can never run it later moved (sched/tests/properties.rs,
        // `conservative_reservations_hold_shrunk_case`).
        let fits_idle =
            d.exclusive || (d.cpus <= node.cpus && d.memory <= node.memory && d.gpus * d.gpu_milli.min(GPU_MILLI) <= node.gpus * GPU_MILLI);
        if !fits_idle {
            return;
        }
        let list = &self.busy[n];
        if list.is_empty() {
            out.push((now, Time::MAX));
            return;
        }
        // Usage as a step function over the breakpoints; collect the "bad" segments where
        // the demand does not fit.
        let mut points: Vec<Time> = Vec::with_capacity(list.len() * 2);
        for b in list {
            points.push(b.start.max(now));
            points.push(b.end.max(now));
        }
        points.sort_unstable();
        points.dedup();
        let mut bad: Vec<(Time, Time)> = Vec::new();
        for w in points.windows(2) {
            let (p, q) = (w[0], w[1]);
            let (mut cpus, mut mem, mut gpu, mut any, mut excl) = (0u32, 0u64, 0u32, false, false);
            for b in list {
                if b.start <= p && p < b.end {
                    cpus += b.cpus;
                    mem += b.memory;
                    gpu += b.gpu_milli;
                    any = true;
                    excl |= b.exclusive;
                }
            }
            let fits = if excl {
                false
            } else if d.exclusive {
                !any
            } else {
                cpus + d.cpus <= node.cpus
                    && mem + d.memory <= node.memory
                    && gpu + d.gpus * d.gpu_milli.min(GPU_MILLI) <= node.gpus * GPU_MILLI
            };
            if !fits {
                match bad.last_mut() {
                    Some(last) if last.1 == p => last.1 = q,
                    _ => bad.push((p, q)),
                }
            }
        }
        // Infeasible starts: (bs - len, be) for each bad segment; the rest of [now, ∞) is feasible.
        let mut t = now;
        for (bs, be) in bad {
            let lo = bs.saturating_sub(len) + 1; // t + len <= bs  <=>  t <= bs - len
            if lo > t {
                out.push((t, lo));
            }
            t = t.max(be);
        }
        out.push((t, Time::MAX));
    }

    fn add(&mut self, n: usize, b: Busy) {
        self.busy[n].push(b);
    }
}

/// The earliest time at least `k` eligible nodes can hold `d` for `len`, not before `from`,
/// and which nodes can then.
fn earliest(tl: &Timeline, snap: &Snapshot, r: &Resolved, now: Time, from: Time, len: Time) -> Option<(Time, Vec<bool>)> {
    let mut events: Vec<(Time, i32)> = Vec::new();
    let mut per_node: Vec<Vec<(Time, Time)>> = vec![Vec::new(); snap.nodes.len()];
    let mut buf = Vec::new();
    for n in 0..snap.nodes.len() {
        if !r.filter.ok(n as u32, &snap.nodes[n]) {
            continue;
        }
        tl.feasible(n, &r.demand, now, len, &mut buf);
        for &(a, b) in &buf {
            if b <= from {
                continue;
            }
            let a = a.max(from);
            events.push((a, 1));
            if b != Time::MAX {
                events.push((b, -1));
            }
        }
        per_node[n].clone_from(&buf);
    }
    events.sort_unstable_by_key(|&(t, d)| (t, d)); // ends (-1) before starts at the same time
    let mut count = 0i64;
    let mut i = 0;
    while i < events.len() {
        let t = events[i].0;
        while i < events.len() && events[i].0 == t {
            count += events[i].1 as i64;
            i += 1;
        }
        if count >= r.nodes as i64 {
            let mask = per_node.iter().map(|iv| iv.iter().any(|&(a, b)| a <= t && t < b)).collect();
            return Some((t, mask));
        }
    }
    None
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn run<'a>(
    snap: &Snapshot<'a>,
    now: Time,
    cfg: &Config,
    ready: &[Resolved<'a>],
    order: &[usize],
    view: &mut View,
    plan: &mut Plan,
    limits: &mut Limits<'a>,
) {
    let mut tl = Timeline { nodes: snap.nodes, busy: vec![Vec::new(); snap.nodes.len()] };
    for r in snap.running {
        let end = r.expected_end(now).max(now + 1);
        for a in &r.allocs {
            tl.add(a.node as usize, busy_of(a, now, end));
        }
    }
    let mut replicas: FxHashMap<String, Vec<u32>> = FxHashMap::default();
    let mut blocked_any = false;
    let mut reservations = 0usize;
    for &i in order {
        let r = &ready[i];
        plan.stats.considered += 1;
        let len = r.limit.max(1);
        if let Some(reason) = limits.blocks(r) {
            plan.waiting.push(Waiting { job: r.req.id, reason, expected_start: None });
            continue;
        }
        let reason = if blocked_any { PendingReason::Priority } else { PendingReason::Resources };
        // Past the reservation bound, a job may only start now without touching reservations;
        // one that cannot fit now at all is skipped without looking at the timelines.
        let mut from = now;
        let mut outcome = None;
        if reservations >= cfg.max_reservations && !view.maybe(&r.demand, r.nodes) {
            plan.waiting.push(Waiting { job: r.req.id, reason, expected_start: None });
            blocked_any = true;
            continue;
        }
        while let Some((t, mask)) = earliest(&tl, snap, r, now, from, len) {
            if t == now {
                let mut masked = r.clone();
                masked.filter.mask = Some(mask);
                masked.filter.all = false;
                if let Some(allocs) = try_place(snap, view, &masked, &mut replicas) {
                    outcome = Some((t, Some(allocs)));
                    break;
                }
                from = now + 1; // fits by count but not by exact placement: look later
                continue;
            }
            if reservations < cfg.max_reservations {
                let chosen: Vec<usize> = mask.iter().enumerate().filter(|(_, m)| **m).map(|(n, _)| n).take(r.nodes as usize).collect();
                outcome = Some((t, None));
                for n in chosen {
                    let node = &snap.nodes[n];
                    let d = &r.demand;
                    let b = if d.exclusive {
                        Busy {
                            start: t,
                            end: t + len,
                            cpus: node.cpus,
                            memory: node.memory,
                            gpu_milli: node.gpus * GPU_MILLI,
                            exclusive: true,
                        }
                    } else {
                        Busy {
                            start: t,
                            end: t + len,
                            cpus: d.cpus,
                            memory: d.memory,
                            gpu_milli: d.gpus * d.gpu_milli.min(GPU_MILLI),
                            exclusive: false,
                        }
                    };
                    tl.add(n, b);
                }
            }
            break;
        }
        match outcome {
            Some((_, Some(allocs))) => {
                limits.add(r);
                for a in &allocs {
                    tl.add(a.node as usize, busy_of(a, now, now + len));
                }
                plan.starts.push(Start { job: r.req.id, allocs, backfilled: blocked_any, time_limit: None });
                if blocked_any {
                    plan.stats.backfilled += 1;
                } else {
                    plan.stats.started += 1;
                }
            }
            Some((t, None)) => {
                reservations += 1;
                plan.stats.reservations += 1;
                plan.waiting.push(Waiting { job: r.req.id, reason, expected_start: Some(t) });
                blocked_any = true;
            }
            None => {
                plan.waiting.push(Waiting { job: r.req.id, reason, expected_start: None });
                blocked_any = true;
            }
        }
    }
}

fn busy_of(a: &crate::Alloc, start: Time, end: Time) -> Busy {
    Busy { start, end, cpus: a.cpus, memory: a.memory, gpu_milli: a.gpus.len() as u32 * a.gpu_milli, exclusive: a.exclusive }
}
