//! The per-node timelines conservative backfill used before the slot map, kept as the tests'
//! reference model: every query sweeps every node's busy intervals (R × N per pass), in the
//! obvious way. `SlotMap` must answer every question exactly as this does.

use model::{GPU_MILLI, Time};

use super::{Bits, Space, Use};
use crate::view::Demand;
use crate::{Resolved, Snapshot};

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

/// Every node's busy intervals.
pub(crate) struct Timeline<'n> {
    nodes: &'n [model::Node],
    now: Time,
    busy: Vec<Vec<Busy>>,
}

impl<'n> Timeline<'n> {
    /// Running work at `now`, each allocation until its job's time limit (at least one second).
    pub fn new(snap: &Snapshot<'n>, now: Time, cfg: &crate::Config) -> Timeline<'n> {
        let mut tl = Timeline { nodes: snap.nodes, now, busy: vec![Vec::new(); snap.nodes.len()] };
        for r in snap.running {
            let end = snap.planned_end(r, now, cfg).max(now + 1);
            for a in &r.allocs {
                tl.hold(a.node as usize, now, end, Use::of_alloc(a));
            }
        }
        tl
    }

    /// Start times at which node `n` can hold `d` for `len` seconds, as sorted disjoint
    /// half-open intervals [a, b) within [now, ∞).
    fn feasible(&self, n: usize, d: &Demand, len: Time, out: &mut Vec<(Time, Time)>) {
        let now = self.now;
        out.clear();
        let node = &self.nodes[n];
        if !node.state.schedulable() {
            return;
        }
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
        let mut t = now;
        for (bs, be) in bad {
            let lo = bs.saturating_sub(len) + 1;
            if lo > t {
                out.push((t, lo));
            }
            t = t.max(be);
        }
        out.push((t, Time::MAX));
    }
}

impl Space for Timeline<'_> {
    fn earliest(&mut self, r: &Resolved, from: Time, len: Time) -> Option<(Time, Bits)> {
        let n_nodes = self.nodes.len();
        let mut events: Vec<(Time, i32)> = Vec::new();
        let mut per_node: Vec<Vec<(Time, Time)>> = vec![Vec::new(); n_nodes];
        let mut buf = Vec::new();
        for (n, node_ivals) in per_node.iter_mut().enumerate() {
            if !r.filter.ok(n as u32, &self.nodes[n]) {
                continue;
            }
            self.feasible(n, &r.demand, len, &mut buf);
            for &(a, b) in &buf {
                if b <= from {
                    continue;
                }
                events.push((a.max(from), 1));
                if b != Time::MAX {
                    events.push((b, -1));
                }
            }
            node_ivals.clone_from(&buf);
        }
        events.sort_unstable_by_key(|&(t, d)| (t, d));
        let mut count = 0i64;
        let mut i = 0;
        while i < events.len() {
            let t = events[i].0;
            while i < events.len() && events[i].0 == t {
                count += events[i].1 as i64;
                i += 1;
            }
            if count >= r.nodes as i64 {
                let mut set = Bits::new(n_nodes);
                for (n, iv) in per_node.iter().enumerate() {
                    if iv.iter().any(|&(a, b)| a <= t && t < b) {
                        set.insert(n as u32);
                    }
                }
                return Some((t, set));
            }
        }
        None
    }

    fn at_now(&mut self, r: &Resolved, len: Time) -> Option<Bits> {
        let now = self.now;
        self.earliest(r, now, len).and_then(|(t, set)| (t == now).then_some(set))
    }

    fn hold(&mut self, n: usize, start: Time, end: Time, u: Use) {
        self.busy[n].push(Busy { start, end, cpus: u.cpus, memory: u.memory, gpu_milli: u.gpu_milli, exclusive: u.excl > 0 });
    }
}
