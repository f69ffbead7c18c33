//! Conservative backfill: every blocked job, in priority order and up to a bound, gets a
//! reservation at the earliest time its gang fits on specific nodes for its whole time limit,
//! given running work (ending at its time limit) and the reservations already made. A job starts
//! now only if it fits now and overlaps no reservation; so no job ever delays an earlier one.
//!
//! The future is kept in a [`SlotMap`], this scheduler's form of Slurm's backfill
//! `node_space_map`: a node's time slots and what is free in each. Running work and
//! reservations are kept apart because they behave differently:
//!
//! - Running work (and what this pass starts) only ever ends, so on a node that no
//!   reservation or start of this pass touched, free capacity only grows: such a node holds a
//!   shape from one time on, for any length. For each distinct per-node shape the map keeps the
//!   untouched nodes sorted by that time (`ready`, built once per shape and pass, O(N log N)),
//!   and a query walks that list only as far as its answer.
//! - A node touched by a reservation or a start gets its own slot list: sorted breakpoints
//!   with the usage from each to the next, and beside it the merged spans where anything is
//!   held (all an exclusive request asks, as every job of an SWF trace). A query reads each
//!   touched node's list once to find the start times at which the shape fits for its whole
//!   length.
//!
//! The earliest start of a gang is then one merge of the two, in time order, until `k` nodes
//! hold it (for one node, simply the first start of any); the nodes that do are a bitmap. Each
//! query first bounds its answer from above (for one node, the first untouched node's ready
//! time; for a gang, the `k`th earliest time from which a node stays free) and reads no slot
//! past that bound; a touched node first idle after the bound is skipped unread. The map's
//! buffers are kept from one pass to the next ([`Spare`]). A pass with R reservations over N nodes costs
//! O(N log N) per distinct shape plus, per query, the touched nodes' slots and the prefix of
//! the ready list it needs, instead of R × N per-node sweeps. The capacity model is the one
//! reservations have always used (CPUs, memory, milli-GPUs summed over the node, exclusive
//! holds); exact placement (GPU indices and shares, other resources, switches) is `View`'s,
//! on the nodes the map allows. `reference` (tests) keeps the per-node timelines it replaced, and
//! the tests check that both give the same plans.

use model::{GPU_MILLI, Node, PendingReason, Time};
use rustc_hash::FxHashMap;

use crate::alloc::Alloc;
use crate::placement::Placer;
use crate::view::{Demand, View};
use crate::{Config, Limits, Plan, Resolved, Snapshot, Start, Waiting, try_place};

#[cfg(test)]
mod reference;

/// What busy intervals hold on one node at one time: the sums the reservations plan with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Use {
    cpus: u32,
    memory: u64,
    gpu_milli: u32,
    /// Busy intervals at that time.
    jobs: u32,
    /// Exclusive ones among them.
    excl: u32,
}

impl Use {
    /// What a running (or just started) allocation holds.
    fn of_alloc(a: &Alloc) -> Use {
        Use { cpus: a.cpus, memory: a.memory, gpu_milli: a.gpus.len() as u32 * a.gpu_milli, jobs: 1, excl: a.exclusive as u32 }
    }

    /// What a reservation of `d` holds on `node`: all of it when exclusive.
    fn reserve(node: &Node, d: &Demand) -> Use {
        if d.exclusive {
            Use { cpus: node.cpus, memory: node.memory, gpu_milli: node.gpus * GPU_MILLI, jobs: 1, excl: 1 }
        } else {
            Use { cpus: d.cpus, memory: d.memory, gpu_milli: d.gpus * d.gpu_milli.min(GPU_MILLI), jobs: 1, excl: 0 }
        }
    }

    fn add(&mut self, o: Use) {
        self.cpus += o.cpus;
        self.memory += o.memory;
        self.gpu_milli += o.gpu_milli;
        self.jobs += o.jobs;
        self.excl += o.excl;
    }

    fn sub(&mut self, o: Use) {
        self.cpus -= o.cpus;
        self.memory -= o.memory;
        self.gpu_milli -= o.gpu_milli;
        self.jobs -= o.jobs;
        self.excl -= o.excl;
    }
}

/// A request's per-node shape as reservations see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Need {
    cpus: u32,
    memory: u64,
    gpu_milli: u32,
    exclusive: bool,
}

impl Need {
    fn of(d: &Demand) -> Need {
        if d.exclusive {
            // An exclusive request wants the node idle, whatever its size: one shape.
            return Need { cpus: 0, memory: 0, gpu_milli: 0, exclusive: true };
        }
        Need { cpus: d.cpus, memory: d.memory, gpu_milli: d.gpus * d.gpu_milli.min(GPU_MILLI), exclusive: false }
    }

    /// Whether an idle `node` holds it: a node too small never takes a reservation (which it
    /// could not honour later: `conservative_reservations_hold_shrunk_case`).
    fn fits_idle(&self, node: &Node) -> bool {
        self.exclusive || (self.cpus <= node.cpus && self.memory <= node.memory && self.gpu_milli <= node.gpus * GPU_MILLI)
    }

    /// Whether `node` holds it beside `u`.
    fn fits(&self, node: &Node, u: &Use) -> bool {
        if u.excl > 0 {
            false
        } else if self.exclusive {
            u.jobs == 0
        } else {
            u.cpus + self.cpus <= node.cpus
                && u.memory + self.memory <= node.memory
                && u.gpu_milli + self.gpu_milli <= node.gpus * GPU_MILLI
        }
    }
}

/// A set of node indices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bits {
    words: Vec<u64>,
}

impl Bits {
    fn new(n: usize) -> Bits {
        Bits { words: vec![0; n.div_ceil(64)] }
    }

    fn insert(&mut self, i: u32) {
        self.words[i as usize / 64] |= 1 << (i % 64);
    }

    /// The members in increasing order.
    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(w, &bits)| {
            let mut b = bits;
            std::iter::from_fn(move || {
                (b != 0).then(|| {
                    let i = b.trailing_zeros();
                    b &= b - 1;
                    w as u32 * 64 + i
                })
            })
        })
    }

    /// As a placement mask over `n` nodes.
    fn mask(&self, n: usize) -> std::sync::Arc<[bool]> {
        let mut m = vec![false; n];
        for i in self.iter() {
            m[i as usize] = true;
        }
        m.into()
    }
}

/// What conservative backfill asks of its picture of the future. [`SlotMap`] answers; the tests'
/// `reference::Timeline` answers the same questions the slow, obvious way.
pub(crate) trait Space {
    /// The earliest time, not before `from`, at which at least `r.nodes` nodes eligible for `r`
    /// can each hold its demand for `len` seconds, and every node that can then.
    fn earliest(&mut self, r: &Resolved, from: Time, len: Time) -> Option<(Time, Bits)>;
    /// The nodes that can hold `r` from now for `len`, if there are at least `r.nodes`: what
    /// `earliest` says when it answers now.
    fn at_now(&mut self, r: &Resolved, len: Time) -> Option<Bits>;
    /// Holds `u` on node `n` over [start, end).
    fn hold(&mut self, n: usize, start: Time, end: Time, u: Use);
}

/// The node space map: running work as per-node ends (untouched nodes indexed by the time each
/// shape fits), and the slot list of every node a reservation or a start of this pass touched.
pub(crate) struct SlotMap<'n> {
    nodes: &'n [Node],
    now: Time,
    /// Per shape: the untouched-at-build schedulable nodes an idle node of theirs could hold it
    /// on, by the time running work leaves room for it (then index); and how many of its first
    /// entries are known touched (skipped for good).
    ready: FxHashMap<Need, (usize, Vec<(Time, u32)>)>,
    b: Spare,
}

/// A [`SlotMap`]'s buffers, kept for the next pass over the same nodes (a whole-trace replay
/// runs a pass per event; allocating every touched node's slot lists anew cost a tenth of it).
#[derive(Default)]
pub(crate) struct Spare {
    /// Running allocations per node (`off[n]..off[n + 1]`), sorted by end, with their use.
    off: Vec<u32>,
    /// Scratch for building `ends`.
    fill: Vec<u32>,
    ends: Vec<(Time, Use)>,
    /// What running work holds on each node now.
    base: Vec<Use>,
    /// Each touched node's slots: (start, use from there to the next slot's start); the last
    /// slot runs forever. Empty for an untouched node.
    slots: Vec<Vec<(Time, Use)>>,
    /// Each touched node's busy spans (some interval held), merged: where an exclusive request
    /// cannot be, kept beside the slots because most queries of whole-node traces ask that.
    busy: Vec<Vec<(Time, Time)>>,
    touched: Vec<u32>,
    is_touched: Vec<bool>,
    /// Per touched node, read by every query (kept apart from `nodes` and the slot lists so
    /// that a query's walk over the touched nodes reads little memory): whether it is
    /// schedulable; when it is first idle (its first busy span's end, or now); and from when
    /// it stays idle (its last busy span's end, or now).
    up: Vec<bool>,
    idle_at: Vec<Time>,
    idle_after: Vec<Time>,
    /// Per query: the touched nodes' feasible start intervals, their events, and the times
    /// from which nodes stay free (the gang bound).
    ivals: Vec<(u32, Time, Time)>,
    events: Vec<(Time, i32)>,
    forever: Vec<Time>,
}

impl<'n> SlotMap<'n> {
    /// The map of running work at `now`: each allocation held until its job's time limit (at
    /// least one second more). It is built in `spare`'s buffers; [`SlotMap::recycle`] returns them.
    pub fn new(snap: &Snapshot<'n>, now: Time, cfg: &Config, spare: &mut Spare) -> SlotMap<'n> {
        let n = snap.nodes.len();
        let mut b = std::mem::take(spare);
        if b.slots.len() == n {
            for &t in &b.touched {
                b.slots[t as usize].clear();
                b.busy[t as usize].clear();
                b.is_touched[t as usize] = false;
            }
        } else {
            b.slots = vec![Vec::new(); n];
            b.busy = vec![Vec::new(); n];
            b.is_touched = vec![false; n];
        }
        b.touched.clear();
        b.up.clear();
        b.up.resize(n, false);
        for v in [&mut b.idle_at, &mut b.idle_after] {
            v.clear();
            v.resize(n, now);
        }
        b.off.clear();
        b.off.resize(n + 1, 0);
        for r in snap.running {
            for a in &r.allocs {
                b.off[a.node as usize + 1] += 1;
            }
        }
        for i in 0..n {
            b.off[i + 1] += b.off[i];
        }
        b.fill.clear();
        b.fill.extend_from_slice(&b.off);
        b.ends.clear();
        b.ends.resize(b.off[n] as usize, (0, Use::default()));
        b.base.clear();
        b.base.resize(n, Use::default());
        for r in snap.running {
            let end = snap.planned_end(r, now, cfg).max(now + 1);
            for a in &r.allocs {
                let i = a.node as usize;
                let u = Use::of_alloc(a);
                b.ends[b.fill[i] as usize] = (end, u);
                b.fill[i] += 1;
                b.base[i].add(u);
            }
        }
        for i in 0..n {
            b.ends[b.off[i] as usize..b.off[i + 1] as usize].sort_unstable_by_key(|e| e.0);
            // What the node's usage holds beyond its running jobs is held with no end (a
            // suspended job's memory and GPUs).
            if let Some(u) = snap.usage.get(i) {
                let base = b.base[i];
                let held = Use {
                    cpus: u.cpus.saturating_sub(base.cpus),
                    memory: u.memory.saturating_sub(base.memory),
                    gpu_milli: u.gpu_milli.iter().sum::<u32>().saturating_sub(base.gpu_milli),
                    jobs: u.jobs.saturating_sub(base.jobs),
                    excl: u32::from(u.exclusive && base.excl == 0),
                };
                b.base[i].add(held);
            }
        }
        SlotMap { nodes: snap.nodes, now, ready: FxHashMap::default(), b }
    }

    /// Gives the buffers back for the next pass.
    pub fn recycle(self, spare: &mut Spare) {
        *spare = self.b;
    }

    fn running(&self, n: usize) -> &[(Time, Use)] {
        &self.b.ends[self.b.off[n] as usize..self.b.off[n + 1] as usize]
    }

    /// When running work on node `n` leaves room for `need` (it only ends, so from then on).
    fn ready_time(&self, n: usize, need: &Need) -> Time {
        let node = &self.nodes[n];
        let mut u = self.b.base[n];
        if need.fits(node, &u) {
            return self.now;
        }
        let ends = self.running(n);
        let mut i = 0;
        while i < ends.len() {
            let t = ends[i].0;
            while i < ends.len() && ends[i].0 == t {
                u.sub(ends[i].1);
                i += 1;
            }
            if need.fits(node, &u) {
                return t;
            }
        }
        Time::MAX // not reached: an idle node that fits_idle holds it
    }

    /// The ready list of `need`, built on first use; its known-touched head is skipped.
    fn ready_list(&mut self, need: Need) {
        if let Some((head, list)) = self.ready.get_mut(&need) {
            while *head < list.len() && self.b.is_touched[list[*head].1 as usize] {
                *head += 1;
            }
            return;
        }
        let mut at_now = Vec::new();
        let mut later = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if !node.state.schedulable() || !need.fits_idle(node) {
                continue;
            }
            let t = self.ready_time(i, &need);
            if t == self.now {
                at_now.push((t, i as u32));
            } else {
                later.push((t, i as u32));
            }
        }
        later.sort_unstable();
        at_now.extend(later);
        self.ready.insert(need, (0, at_now));
    }

    /// The ready list of `need` (after [`SlotMap::ready_list`]), less its touched head.
    fn ready_of(&self, need: &Need) -> &[(Time, u32)] {
        let (head, list) = &self.ready[need];
        &list[*head..]
    }

    /// [`Space::earliest`] for one node: the first start of any eligible node, found without
    /// sorting (a node's later intervals start after its first one ends, so only the nodes
    /// whose first interval starts there hold the job then).
    fn earliest_one(&mut self, r: &Resolved, need: &Need, from: Time, len: Time) -> Option<(Time, Bits)> {
        let mut firsts = std::mem::take(&mut self.b.ivals);
        firsts.clear();
        // The first untouched node bounds the answer: touched nodes are read only that far.
        let list = self.ready_of(need);
        let mut best = list.iter().find(|x| self.untouched_ok(x.1, r)).map_or(Time::MAX, |&(t0, _)| t0.max(from));
        for &n in &self.b.touched {
            if need.exclusive && self.b.idle_at[n as usize] > best || !self.touched_ok(n, r, need) {
                continue;
            }
            self.starts(n, need, len, best, |a, b| {
                if b <= from {
                    return true;
                }
                let a = a.max(from);
                best = best.min(a);
                firsts.push((n, a, b));
                false
            });
        }
        let out = (best != Time::MAX).then(|| {
            let mut set = Bits::new(self.nodes.len());
            for &(n, a, _) in &firsts {
                if a == best {
                    set.insert(n);
                }
            }
            for &(_, n) in list.iter().take_while(|x| x.0.max(from) <= best) {
                if self.untouched_ok(n, r) {
                    set.insert(n);
                }
            }
            (best, set)
        });
        self.b.ivals = firsts;
        out
    }

    /// The start intervals of touched node `n` for `need` and `len` that begin by `until` (see
    /// [`valid_starts`]).
    fn starts(&self, n: u32, need: &Need, len: Time, until: Time, push: impl FnMut(Time, Time) -> bool) {
        let n = n as usize;
        if need.exclusive {
            valid_starts(self.b.busy[n].iter().copied(), self.now, len, until, push);
        } else {
            let (node, slots) = (&self.nodes[n], &self.b.slots[n]);
            let mut i = 0;
            let bad = std::iter::from_fn(|| {
                while i < slots.len() && need.fits(node, &slots[i].1) {
                    i += 1;
                }
                let bs = slots.get(i)?.0;
                while i < slots.len() && !need.fits(node, &slots[i].1) {
                    i += 1;
                }
                Some((bs, slots.get(i).map_or(Time::MAX, |s| s.0)))
            });
            valid_starts(bad, self.now, len, until, push);
        }
    }

    /// Whether untouched node `n` counts for `r` (the ready list already checked its state and size).
    fn untouched_ok(&self, n: u32, r: &Resolved) -> bool {
        !self.b.is_touched[n as usize] && (r.filter.all && r.filter.mask.is_none() || r.filter.ok(n, &self.nodes[n as usize]))
    }

    /// Whether touched node `n` counts for `r` at all.
    #[inline]
    fn touched_ok(&self, n: u32, r: &Resolved, need: &Need) -> bool {
        if !self.b.up[n as usize] {
            return false;
        }
        let all = r.filter.all && r.filter.mask.is_none();
        if need.exclusive && all {
            return true;
        }
        let node = &self.nodes[n as usize];
        need.fits_idle(node) && (all || r.filter.ok(n, node))
    }
}

/// Start times in [now, ∞) at which a node holds a request for `len`, given the node's `bad`
/// segments (sorted, disjoint, maximal [start, end) where the request does not fit), as sorted
/// disjoint half-open intervals, given to `push` in order until it returns false.
/// Only intervals starting at or before `until` are given (the caller knows the answer is no later).
fn valid_starts(bad: impl Iterator<Item = (Time, Time)>, now: Time, len: Time, until: Time, mut push: impl FnMut(Time, Time) -> bool) {
    let mut t = now;
    for (bs, be) in bad {
        if t > until {
            return;
        }
        let lo = bs.saturating_sub(len) + 1; // t + len <= bs  <=>  t <= bs - len
        if lo > t && !push(t, lo) {
            return;
        }
        t = t.max(be);
    }
    if t != Time::MAX && t <= until {
        push(t, Time::MAX);
    }
}

/// Whether a node with these slots holds `need` over [now, now + len).
fn holds_from_now(slots: &[(Time, Use)], node: &Node, need: &Need, now: Time, len: Time) -> bool {
    slots.iter().take_while(|s| s.0 < now.saturating_add(len)).all(|s| need.fits(node, &s.1))
}

impl Space for SlotMap<'_> {
    fn earliest(&mut self, r: &Resolved, from: Time, len: Time) -> Option<(Time, Bits)> {
        let need = Need::of(&r.demand);
        self.ready_list(need);
        if r.nodes == 1 {
            return self.earliest_one(r, &need, from, len);
        }
        let mut ivals = std::mem::take(&mut self.b.ivals);
        let mut events = std::mem::take(&mut self.b.events);
        ivals.clear();
        events.clear();
        // An upper bound on the answer: the `k`th earliest time from which a node holds the
        // request for good (untouched nodes from their ready time; touched ones, for an
        // exclusive request, from their last busy end). Intervals starting later are not read.
        let until = {
            let k = r.nodes as usize;
            let mut forever = std::mem::take(&mut self.b.forever);
            forever.clear();
            forever.extend(self.ready_of(&need).iter().filter(|x| self.untouched_ok(x.1, r)).take(k).map(|x| x.0.max(from)));
            if need.exclusive {
                for &n in &self.b.touched {
                    if self.touched_ok(n, r, &need) {
                        forever.push(self.b.idle_after[n as usize].max(from));
                    }
                }
            }
            let u = if forever.len() >= k && k > 0 { *forever.select_nth_unstable(k - 1).1 } else { Time::MAX };
            self.b.forever = forever;
            u
        };
        for &n in &self.b.touched {
            if need.exclusive && self.b.idle_at[n as usize] > until || !self.touched_ok(n, r, &need) {
                continue;
            }
            self.starts(n, &need, len, until, |a, b| {
                if b > from {
                    ivals.push((n, a, b));
                    events.push((a.max(from), 1));
                    if b != Time::MAX {
                        events.push((b, -1));
                    }
                }
                true
            });
        }
        // All events at one time are counted before the count is read: their order is free.
        events.sort_unstable_by_key(|e| e.0);
        let list = self.ready_of(&need);
        let k = r.nodes as i64;
        let (mut ui, mut ei, mut count) = (0usize, 0usize, 0i64);
        let mut found = None;
        loop {
            while ui < list.len() && !self.untouched_ok(list[ui].1, r) {
                ui += 1;
            }
            let t = match (list.get(ui).map(|x| x.0.max(from)), events.get(ei).map(|e| e.0)) {
                (None, None) => break,
                (Some(a), None) | (None, Some(a)) => a,
                (Some(a), Some(b)) => a.min(b),
            };
            while ei < events.len() && events[ei].0 == t {
                count += events[ei].1 as i64;
                ei += 1;
            }
            while ui < list.len() && list[ui].0.max(from) == t {
                if self.untouched_ok(list[ui].1, r) {
                    count += 1;
                }
                ui += 1;
            }
            if count >= k {
                found = Some(t);
                break;
            }
        }
        let out = found.map(|t| {
            let mut set = Bits::new(self.nodes.len());
            for &(n, a, b) in &ivals {
                if a <= t && t < b {
                    set.insert(n);
                }
            }
            for &(_, n) in list.iter().take_while(|x| x.0 <= t) {
                if self.untouched_ok(n, r) {
                    set.insert(n);
                }
            }
            (t, set)
        });
        self.b.ivals = ivals;
        self.b.events = events;
        out
    }

    fn at_now(&mut self, r: &Resolved, len: Time) -> Option<Bits> {
        let need = Need::of(&r.demand);
        self.ready_list(need);
        let mut set = Bits::new(self.nodes.len());
        let mut count = 0u32;
        for &n in &self.b.touched {
            let node = &self.nodes[n as usize];
            if self.touched_ok(n, r, &need) && holds_from_now(&self.b.slots[n as usize], node, &need, self.now, len) {
                set.insert(n);
                count += 1;
            }
        }
        for &(_, n) in self.ready_of(&need).iter().take_while(|x| x.0 <= self.now) {
            if self.untouched_ok(n, r) {
                set.insert(n);
                count += 1;
            }
        }
        (count >= r.nodes).then_some(set)
    }

    fn hold(&mut self, n: usize, start: Time, end: Time, u: Use) {
        if !self.b.is_touched[n] {
            let mut cur = self.b.base[n];
            let ends = &self.b.ends[self.b.off[n] as usize..self.b.off[n + 1] as usize];
            let mut s = std::mem::take(&mut self.b.slots[n]);
            s.clear();
            s.push((self.now, cur));
            let mut i = 0;
            while i < ends.len() {
                let t = ends[i].0;
                while i < ends.len() && ends[i].0 == t {
                    cur.sub(ends[i].1);
                    i += 1;
                }
                s.push((t, cur));
            }
            self.b.slots[n] = s;
            self.b.is_touched[n] = true;
            self.b.up[n] = self.nodes[n].state.schedulable();
            self.b.touched.push(n as u32);
        }
        let s = &mut self.b.slots[n];
        let a = split(s, start);
        let b = split(s, end);
        for x in &mut s[a..b] {
            x.1.add(u);
        }
        let busy = &mut self.b.busy[n];
        busy.clear();
        for &(t, u) in s.iter() {
            match (u.jobs > 0, busy.last_mut()) {
                (true, Some(last)) if last.1 == Time::MAX => {}
                (true, _) => busy.push((t, Time::MAX)),
                (false, Some(last)) if last.1 == Time::MAX => last.1 = t,
                (false, _) => {}
            }
        }
        self.b.idle_at[n] = match busy.first() {
            Some(&(a, b)) if a <= self.now => b,
            _ => self.now,
        };
        self.b.idle_after[n] = busy.last().map_or(self.now, |s| s.1);
    }
}

/// The index of the slot starting at `t` (>= the first slot's start), splitting the slot that
/// holds `t` if none starts there.
fn split(s: &mut Vec<(Time, Use)>, t: Time) -> usize {
    match s.binary_search_by_key(&t, |x| x.0) {
        Ok(i) => i,
        Err(i) => {
            let u = s[i - 1].1;
            s.insert(i, (t, u));
            i
        }
    }
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
    placer: &mut Placer,
    spare: &mut Spare,
) {
    #[cfg(test)]
    if tests::REFERENCE.get() {
        let mut space = reference::Timeline::new(snap, now, cfg);
        walk(&mut space, snap, now, cfg, ready, order, view, plan, limits, placer);
        return;
    }
    let mut space = SlotMap::new(snap, now, cfg, spare);
    walk(&mut space, snap, now, cfg, ready, order, view, plan, limits, placer);
    space.recycle(spare);
}

/// Starts `r` now on `allocs`: counted against limits, held in the picture of the future for its
/// limit, in the plan (backfilled when a job before it is blocked).
#[allow(clippy::too_many_arguments)]
fn start<'a, S: Space>(
    space: &mut S,
    plan: &mut Plan,
    limits: &mut Limits<'a>,
    r: &Resolved<'a>,
    allocs: Vec<crate::Alloc>,
    now: Time,
    len: Time,
    blocked_any: bool,
) {
    limits.add(r);
    for a in &allocs {
        space.hold(a.node as usize, now, now + len, Use::of_alloc(a));
    }
    plan.starts.push(Start { job: r.req.id, allocs, backfilled: blocked_any, time_limit: None, het: r.het_nodes() });
    if blocked_any {
        plan.stats.backfilled += 1;
    } else {
        plan.stats.started += 1;
    }
}

/// The walk in priority order, over any picture of the future.
#[allow(clippy::too_many_arguments)]
pub(crate) fn walk<'a, S: Space>(
    space: &mut S,
    snap: &Snapshot<'a>,
    now: Time,
    cfg: &Config,
    ready: &[Resolved<'a>],
    order: &[usize],
    view: &mut View,
    plan: &mut Plan,
    limits: &mut Limits<'a>,
    placer: &mut Placer,
) {
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
        if !r.het.is_empty() {
            // A heterogeneous job starts when every component fits now for its whole limit
            // without touching a reservation (each within its own window); the slot map plans
            // one shape, so it gets no reservation of its own.
            let mut masked = r.clone();
            let mut fits = true;
            for k in 0..r.components() {
                match space.at_now(&r.component(k), len) {
                    Some(set) => {
                        let f = if k == 0 { &mut masked.filter } else { &mut masked.het[k - 1].filter };
                        f.restrict(&set.mask(snap.nodes.len()));
                    }
                    None => fits = false,
                }
            }
            match fits.then(|| try_place(snap, view, &masked, placer)).flatten() {
                Some(allocs) => start(space, plan, limits, r, allocs, now, len, blocked_any),
                None => {
                    plan.waiting.push(Waiting { job: r.req.id, reason, expected_start: None });
                    blocked_any = true;
                }
            }
            continue;
        }
        // Past the reservation bound, a job may only start now without touching reservations;
        // one that cannot fit now at all is skipped without looking at the map.
        let bounded = reservations >= cfg.max_reservations;
        if bounded && !view.maybe(&r.demand, r.nodes) {
            plan.waiting.push(Waiting { job: r.req.id, reason, expected_start: None });
            blocked_any = true;
            continue;
        }
        let first = if bounded { space.at_now(r, len).map(|s| (now, s)) } else { space.earliest(r, now, len) };
        let mut started = None;
        let mut later = first;
        if let Some((t, set)) = &later
            && *t == now
        {
            let mut masked = r.clone();
            masked.filter.restrict(&set.mask(snap.nodes.len()));
            started = try_place(snap, view, &masked, placer);
            // Fits by count but not by exact placement: look later.
            later = if started.is_some() || bounded { None } else { space.earliest(r, now + 1, len) };
        }
        if let Some(allocs) = started {
            start(space, plan, limits, r, allocs, now, len, blocked_any);
            continue;
        }
        let expected_start = match later {
            Some((t, set)) if !bounded => {
                for n in set.iter().take(r.nodes as usize) {
                    let n = n as usize;
                    space.hold(n, t, t + len, Use::reserve(&snap.nodes[n], &r.demand));
                }
                reservations += 1;
                plan.stats.reservations += 1;
                Some(t)
            }
            _ => None,
        };
        plan.waiting.push(Waiting { job: r.req.id, reason, expected_start });
        blocked_any = true;
    }
}

#[cfg(test)]
mod tests {
    //! The slot map against the per-node timelines it replaced: the same passes, plan for plan.

    use std::cell::Cell;

    use model::{ClusterConfig, DepStatus, GpuPer, GpuRequest, JobRequest, MemRequest, Node, NodeState, Shape, Time};
    use proptest::prelude::*;

    use crate::{Backfill, Carry, Config, FairShare, NodeUsage, Pending, Plan, Policy, Running, Snapshot, schedule};

    thread_local! {
        /// Makes `run` plan with `reference::Timeline` instead of the slot map (this thread only).
        pub(super) static REFERENCE: Cell<bool> = const { Cell::new(false) };
    }

    const GIB: u64 = 1 << 30;

    /// A node: CPUs, GPUs, switch, memory in GiB, feature "fast", drained.
    type NodeSpec = (u32, u32, u32, u64, bool, bool);
    /// A job: nodes, GPUs per node, CPUs per node, limit, submit, exclusive, GPU share in milli
    /// (1000 = whole), wants "fast", memory in GiB.
    type JobSpec = (u32, u32, u32, Time, Time, bool, u32, bool, u64);

    #[derive(Debug, Clone)]
    struct Case {
        nodes: Vec<NodeSpec>,
        running: Vec<JobSpec>,
        pending: Vec<JobSpec>,
        policy: usize,
        max_reservations: usize,
        steps: Vec<Time>,
    }

    fn job_spec() -> impl Strategy<Value = JobSpec> {
        (
            1u32..=4,
            0u32..=4,
            1u32..=16,
            // Round limits too, so that ends and reservations often meet exactly.
            prop_oneof![1i64..2000, (1i64..20).prop_map(|x| x * 50)],
            0i64..50,
            prop::bool::weighted(0.2),
            prop_oneof![Just(1000u32), Just(500), Just(250)],
            prop::bool::weighted(0.2),
            0u64..=48,
        )
    }

    fn case() -> impl Strategy<Value = Case> {
        (
            prop::collection::vec((1u32..=16, 0u32..=4, 0u32..3, 16u64..=64, prop::bool::weighted(0.5), prop::bool::weighted(0.1)), 1..12),
            prop::collection::vec(job_spec(), 0..16),
            prop::collection::vec(job_spec(), 1..40),
            0usize..4,
            prop_oneof![Just(256usize), 0usize..6],
            prop::collection::vec(prop_oneof![1i64..400, (1i64..8).prop_map(|x| x * 50)], 0..4),
        )
            .prop_map(|(nodes, running, pending, policy, max_reservations, steps)| Case {
                nodes,
                running,
                pending,
                policy,
                max_reservations,
                steps,
            })
    }

    fn request(id: u64, s: &JobSpec) -> JobRequest {
        let &(k, g, c, limit, submit, exclusive, milli, fast, mem) = s;
        let mut shape = Shape::single();
        shape.nodes_min = k;
        shape.nodes_max = k;
        shape.ntasks = k;
        shape.ntasks_per_node = Some(1);
        shape.cpus_per_task = c;
        shape.mem = MemRequest::PerNode(mem * GIB);
        shape.exclusive = exclusive;
        if g > 0 {
            shape.gpus = Some(GpuRequest { per: GpuPer::Node(g), gpu_type: None, milli });
        }
        let mut r = JobRequest::new(id, submit, limit, shape);
        if fast {
            r.features = vec!["fast".into()];
        }
        r.user = format!("u{}", id % 3);
        r
    }

    struct World {
        nodes: Vec<Node>,
        usage: Vec<NodeUsage>,
        pending: Vec<Pending>,
        running: Vec<Running>,
        config: ClusterConfig,
        fairshare: FairShare,
        carry: Carry,
        /// The slot map's passes keep their buffers from pass to pass, as the sim's and the
        /// controller's do.
        reuse: std::cell::RefCell<crate::Reuse>,
    }

    impl World {
        fn pass(&self, now: Time, cfg: &Config, reference: bool) -> Plan {
            let snap = Snapshot {
                nodes: &self.nodes,
                usage: &self.usage,
                pending: &self.pending,
                running: &self.running,
                suspended: &[],
                config: &self.config,
                fairshare: &self.fairshare,
                carry: &self.carry,
                history: crate::History::empty(),
                reservations: &[],
            };
            if !reference {
                return crate::schedule_reusing(&snap, now, 7, cfg, &mut self.reuse.borrow_mut(), true);
            }
            REFERENCE.set(true);
            let plan = schedule(&snap, now, 7, cfg);
            REFERENCE.set(false);
            plan
        }

        fn apply(&mut self, plan: &Plan, now: Time) {
            for s in &plan.starts {
                let i = self.pending.iter().position(|p| p.req.id == s.job).expect("started job was pending");
                let p = self.pending.remove(i);
                for a in &s.allocs {
                    self.usage[a.node as usize].apply(&self.nodes[a.node as usize], a);
                }
                self.running.push(Running { req: p.req, start: now, allocs: s.allocs.clone() });
            }
            for r in &plan.rejected {
                self.pending.retain(|p| p.req.id != r.job);
            }
        }
    }

    fn world(c: &Case) -> World {
        let nodes: Vec<Node> = c
            .nodes
            .iter()
            .enumerate()
            .map(|(i, &(cpus, gpus, sw, mem, fast, drained))| {
                let mut n = Node::new(format!("n{i}"), cpus, mem * GIB, gpus);
                n.switch = sw;
                n.block = sw / 2;
                if fast {
                    n.features = vec!["fast".into()];
                }
                if drained {
                    n.state = NodeState::Drain;
                }
                n
            })
            .collect();
        let mut w = World {
            usage: nodes.iter().map(NodeUsage::for_node).collect(),
            nodes,
            pending: Vec::new(),
            running: Vec::new(),
            config: ClusterConfig::default(),
            fairshare: FairShare::default(),
            carry: Carry::default(),
            reuse: Default::default(),
        };
        let mut seq = 0;
        let mut submit = |w: &mut World, id: u64, s: &JobSpec| {
            w.pending.push(Pending { req: request(id, s), seq, dep: DepStatus::Satisfied });
            seq += 1;
        };
        // Running work started by the scheduler itself, at staggered times.
        for (k, s) in c.running.iter().enumerate() {
            submit(&mut w, 1000 + k as u64, s);
            let plan = w.pass(k as Time * 25, &Config { policy: Policy::Fcfs, backfill: Backfill::Easy, ..Config::default() }, false);
            w.apply(&plan, k as Time * 25);
        }
        w.pending.clear();
        for (k, s) in c.pending.iter().enumerate() {
            submit(&mut w, k as u64 + 1, s);
        }
        w
    }

    fn policy(i: usize) -> Policy {
        ["fcfs", "sjf", "f1", "default"].map(|p| Policy::parse(p).unwrap())[i].clone()
    }

    /// Past the reservation bound, a job that ends exactly when a reservation on its node begins
    /// still starts now (the edges of the slots are half-open).
    #[test]
    fn a_job_ending_as_a_reservation_begins_starts_past_the_bound() {
        let spec = |k, c, limit, submit| (k, 0, c, limit, submit, false, 1000, false, 1);
        let c = Case {
            nodes: vec![(4, 0, 0, 16, false, false), (4, 0, 0, 16, false, false)],
            running: vec![spec(1, 4, 100, 0)],
            pending: vec![spec(2, 4, 50, 0), spec(1, 4, 90, 1), spec(1, 4, 91, 2)],
            policy: 0,
            max_reservations: 1,
            steps: vec![],
        };
        let w = world(&c);
        let cfg = Config { policy: Policy::Fcfs, backfill: Backfill::Conservative, max_reservations: 1, ..Config::default() };
        let plan = w.pass(10, &cfg, false);
        assert_eq!(plan, w.pass(10, &cfg, true));
        let started: Vec<u64> = plan.starts.iter().map(|s| s.job.0).collect();
        assert_eq!(started, vec![2], "the 90 s job ends at 100, when job 1's reservation begins; the 91 s one would overlap it");
        assert_eq!(plan.waiting.iter().find(|x| x.job.0 == 1).and_then(|x| x.expected_start), Some(100));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

        /// Pass after pass (each plan applied, then later passes as time goes by), the slot map
        /// and the per-node timelines give the same plan: the same starts on the same nodes,
        /// the same reservations at the same times.
        #[test]
        fn slot_map_plans_as_the_timelines_do(c in case()) {
            let mut w = world(&c);
            let cfg = Config { policy: policy(c.policy), backfill: Backfill::Conservative, max_reservations: c.max_reservations, ..Config::default() };
            let mut now = 400;
            for k in 0..=c.steps.len() {
                let plan = w.pass(now, &cfg, false);
                prop_assert_eq!(&plan, &w.pass(now, &cfg, true), "pass {} at {}", k, now);
                w.apply(&plan, now);
                if let Some(dt) = c.steps.get(k) {
                    now += dt;
                }
            }
        }
    }
}
