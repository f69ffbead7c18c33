//! A pass-local view of free capacity, with the aggregates that let placement skip whole
//! switches, and gang placement itself (all-or-nothing, topology-aware, pack or spread).

use model::{GPU_MILLI, Node};
use rustc_hash::FxHashMap;

use crate::alloc::{Alloc, NodeUsage};

/// Histogram buckets of whole free GPUs per node (the last bucket means "this many or more").
const HIST: usize = 9;

/// What a request needs on each of its nodes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Demand {
    pub cpus: u32,
    pub memory: u64,
    pub gpus: u32,
    pub gpu_milli: u32,
    pub other: Vec<(String, u64)>,
    pub exclusive: bool,
}

/// Static eligibility of nodes for one request (partition, features, GPU model, -w/-x).
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    /// Every node is eligible: the common case, checked without touching nodes.
    pub all: bool,
    pub partition: Option<String>,
    pub features: Vec<String>,
    pub gpu_type: Option<String>,
    pub include: Vec<u32>,
    pub exclude: Vec<u32>,
    /// Extra per-node mask (advance reservations; conservative backfill: nodes free for the
    /// whole window). Shared: many jobs of a pass have the same one.
    pub mask: Option<std::sync::Arc<[bool]>>,
}

impl Filter {
    /// Narrows the eligible nodes to those `m` allows (and whatever mask there was).
    pub fn restrict(&mut self, m: &std::sync::Arc<[bool]>) {
        self.mask = Some(match &self.mask {
            Some(old) => old.iter().zip(m.iter()).map(|(a, b)| *a && *b).collect(),
            None => m.clone(),
        });
        self.all = false;
    }

    pub fn ok(&self, i: u32, node: &Node) -> bool {
        if let Some(m) = &self.mask
            && !m[i as usize]
        {
            return false;
        }
        if self.all {
            return true;
        }
        if let Some(p) = &self.partition
            && !node.in_partition(p)
        {
            return false;
        }
        if !self.features.iter().all(|f| node.features.iter().any(|nf| nf == f)) {
            return false;
        }
        if let Some(t) = &self.gpu_type {
            match &node.gpu_type {
                Some(nt) if nt.eq_ignore_ascii_case(t) => {}
                _ => return false,
            }
        }
        if !self.include.is_empty() && !self.include.contains(&i) {
            return false;
        }
        !self.exclude.contains(&i)
    }
}

/// How to choose among feasible nodes.
#[derive(Debug, Clone)]
pub(crate) enum Strategy<'a> {
    /// Best fit: fill nodes up, fewest switches and blocks (batch gangs).
    Pack,
    /// Spread over failure domains: fewest replicas of the same service on the node, switch and
    /// block, then the emptiest node (service replicas).
    Spread { per_node: &'a FxHashMap<u32, u32>, per_switch: &'a FxHashMap<u32, u32>, per_block: &'a FxHashMap<u32, u32> },
}

/// Where nodes sit: a dense switch number per node and the members of each switch. Depends
/// only on the node definitions, so a [`crate::Scheduler`] computes it once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    switch_of: Vec<u32>,
    switches: Vec<Vec<u32>>,
    other_off: Vec<u32>,
}

impl Topology {
    /// Computes the topology of a node list.
    pub fn new(nodes: &[Node]) -> Topology {
        let mut sw_index: FxHashMap<(u32, u32), u32> = FxHashMap::default();
        let mut switch_of = Vec::with_capacity(nodes.len());
        let mut switches: Vec<Vec<u32>> = Vec::new();
        let mut other_off = Vec::with_capacity(nodes.len() + 1);
        let mut off = 0u32;
        let mut last: Option<((u32, u32), u32)> = None;
        for (i, node) in nodes.iter().enumerate() {
            let key = (node.block, node.switch);
            let s = match last {
                Some((k, s)) if k == key => s,
                _ => {
                    let next = sw_index.len() as u32;
                    *sw_index.entry(key).or_insert(next)
                }
            };
            last = Some((key, s));
            if s as usize == switches.len() {
                switches.push(Vec::new());
            }
            switches[s as usize].push(i as u32);
            switch_of.push(s);
            other_off.push(off);
            off += node.other.len() as u32;
        }
        other_off.push(off);
        Topology { switch_of, switches, other_off }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.switch_of.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.switch_of.is_empty()
    }
}

/// Free capacity of every node, as the pass sees it.
#[derive(Debug, Clone)]
pub(crate) struct View<'n> {
    pub nodes: &'n [Node],
    up: Vec<bool>,
    free_cpus: Vec<u32>,
    free_mem: Vec<u64>,
    gpu_off: Vec<u32>,
    gpu_free: Vec<u32>,
    other_free: Vec<u64>,
    jobs: Vec<u32>,
    excl: Vec<bool>,
    whole: Vec<u8>,
    // aggregates over up nodes
    topo: std::sync::Arc<Topology>,
    sw_idle: Vec<u32>,
    sw_hist: Vec<[u32; HIST]>,
    idle: usize,
    hist: [usize; HIST],
    /// Shapes that failed to place since capacity last grew: any shape at least as large fails
    /// too, so a pass over thousands of similar jobs does not rescan the cluster for each.
    failed: Vec<ShapeKey>,
}

/// A plain demand shape (no filter, no other resources), for the failure cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ShapeKey {
    pub cpus: u32,
    pub memory: u64,
    pub gpus: u32,
    pub gpu_milli: u32,
    pub exclusive: bool,
    pub nodes: u32,
}

impl ShapeKey {
    /// The key of `d` on `k` nodes, if it has no other resources.
    pub fn of(d: &Demand, k: u32) -> Option<ShapeKey> {
        d.other.is_empty().then_some(ShapeKey {
            cpus: d.cpus,
            memory: d.memory,
            gpus: d.gpus,
            gpu_milli: d.gpu_milli,
            exclusive: d.exclusive,
            nodes: k,
        })
    }

    /// Whether `self` needs at least what `small` needs on every node and at least as many nodes.
    fn dominates(&self, small: &ShapeKey) -> bool {
        self.nodes >= small.nodes
            && self.exclusive == small.exclusive
            && (self.exclusive
                || (self.cpus >= small.cpus && self.memory >= small.memory && self.gpus >= small.gpus && self.gpu_milli >= small.gpu_milli))
    }
}

fn bucket(w: u8) -> usize {
    (w as usize).min(HIST - 1)
}

impl<'n> View<'n> {
    /// Builds the view from node definitions, their topology and their usage.
    pub fn new(nodes: &'n [Node], topo: std::sync::Arc<Topology>, usage: &[NodeUsage]) -> View<'n> {
        assert_eq!(nodes.len(), usage.len(), "one usage per node");
        assert_eq!(nodes.len(), topo.switch_of.len(), "topology of these nodes");
        let n = nodes.len();
        let nsw = topo.switches.len();
        let mut v = View {
            nodes,
            up: Vec::with_capacity(n),
            free_cpus: Vec::with_capacity(n),
            free_mem: Vec::with_capacity(n),
            gpu_off: Vec::with_capacity(n + 1),
            gpu_free: Vec::new(),
            other_free: Vec::with_capacity(topo.other_off[n] as usize),
            jobs: Vec::with_capacity(n),
            excl: Vec::with_capacity(n),
            whole: Vec::with_capacity(n),
            sw_idle: vec![0; nsw],
            sw_hist: vec![[0; HIST]; nsw],
            topo,
            idle: 0,
            hist: [0; HIST],
            failed: Vec::new(),
        };
        for (node, u) in nodes.iter().zip(usage) {
            v.up.push(node.state.schedulable());
            v.free_cpus.push(node.cpus.saturating_sub(u.cpus));
            v.free_mem.push(node.memory.saturating_sub(u.memory));
            v.gpu_off.push(v.gpu_free.len() as u32);
            let mut whole = 0u8;
            for g in 0..node.gpus as usize {
                let used = u.gpu_milli.get(g).copied().unwrap_or(0);
                let f = GPU_MILLI.saturating_sub(used);
                if f == GPU_MILLI {
                    whole = whole.saturating_add(1);
                }
                v.gpu_free.push(f);
            }
            v.whole.push(whole);
            for (i, (_, c)) in node.other.iter().enumerate() {
                v.other_free.push(c.saturating_sub(u.other.get(i).copied().unwrap_or(0)));
            }
            v.jobs.push(u.jobs);
            v.excl.push(u.exclusive);
        }
        v.gpu_off.push(v.gpu_free.len() as u32);
        for i in 0..n {
            v.count(i, 1);
        }
        v
    }

    fn other(&self, i: usize) -> std::ops::Range<usize> {
        self.topo.other_off[i] as usize..self.topo.other_off[i + 1] as usize
    }

    fn count(&mut self, i: usize, sign: i64) {
        if !self.up[i] {
            return;
        }
        let s = self.topo.switch_of[i] as usize;
        let add = |x: &mut u32| *x = (*x as i64 + sign) as u32;
        if self.jobs[i] == 0 {
            add(&mut self.sw_idle[s]);
            self.idle = (self.idle as i64 + sign) as usize;
        }
        let b = bucket(self.whole[i]);
        add(&mut self.sw_hist[s][b]);
        self.hist[b] = (self.hist[b] as i64 + sign) as usize;
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the node can take `d` now.
    pub fn fits(&self, i: u32, d: &Demand) -> bool {
        let i = i as usize;
        if !self.up[i] || self.excl[i] {
            return false;
        }
        if d.exclusive {
            return self.jobs[i] == 0;
        }
        if self.free_cpus[i] < d.cpus || self.free_mem[i] < d.memory {
            return false;
        }
        if d.gpus > 0 {
            if d.gpu_milli >= GPU_MILLI {
                if (self.whole[i] as u32) < d.gpus {
                    return false;
                }
            } else {
                let r = self.gpu_off[i] as usize..self.gpu_off[i + 1] as usize;
                let n = self.gpu_free[r].iter().filter(|&&f| f >= d.gpu_milli).count() as u32;
                if n < d.gpus {
                    return false;
                }
            }
        }
        for (name, need) in &d.other {
            match self.nodes[i].other.iter().position(|(n, _)| n == name) {
                Some(k) if self.other_free[self.other(i).start + k] >= *need => {}
                _ => return false,
            }
        }
        true
    }

    /// Whether a node of this definition could ever hold `d` (ignoring what runs there now).
    pub fn could_ever_fit(node: &Node, d: &Demand) -> bool {
        if d.exclusive {
            return node.gpus >= d.gpus && d.other.iter().all(|(n, c)| node.other.iter().any(|(m, k)| m == n && k >= c));
        }
        node.cpus >= d.cpus
            && node.memory >= d.memory
            && node.gpus >= d.gpus
            && d.other.iter().all(|(n, c)| node.other.iter().any(|(m, k)| m == n && k >= c))
    }

    /// Quick necessary condition: can `k` nodes possibly hold `d` now? O(1).
    pub fn maybe(&self, d: &Demand, k: u32) -> bool {
        if d.exclusive {
            return self.idle >= k as usize;
        }
        if d.gpus > 0 && d.gpu_milli >= GPU_MILLI {
            let b = bucket(d.gpus.min(255) as u8);
            return self.hist[b..].iter().sum::<usize>() >= k as usize;
        }
        true
    }

    fn switch_maybe(&self, s: usize, d: &Demand) -> bool {
        if d.exclusive {
            return self.sw_idle[s] > 0;
        }
        if d.gpus > 0 && d.gpu_milli >= GPU_MILLI {
            let b = bucket(d.gpus.min(255) as u8);
            return self.sw_hist[s][b..].iter().any(|&c| c > 0);
        }
        true
    }

    /// Leftover-capacity score of node `i` after taking `d`: lower is a tighter fit.
    fn leftover(&self, i: usize, d: &Demand) -> u64 {
        if d.exclusive {
            return 0;
        }
        let gpus_left = (self.whole[i] as u64).saturating_sub(d.gpus as u64);
        let cpus_left = (self.free_cpus[i] - d.cpus) as u64;
        (gpus_left << 32) | cpus_left
    }

    /// Chooses `k` nodes for `d`, or `None` if they cannot all be had now (all or nothing).
    pub fn place(&mut self, d: &Demand, k: u32, filter: &Filter, strategy: &Strategy, max_switches: Option<u32>) -> Option<Vec<u32>> {
        if k == 0 || !self.maybe(d, k) {
            return None;
        }
        let cacheable = filter.all && filter.mask.is_none() && max_switches.is_none() && matches!(strategy, Strategy::Pack);
        let key = if cacheable { ShapeKey::of(d, k) } else { None };
        if let Some(key) = key
            && self.failed.iter().any(|f| key.dominates(f))
        {
            return None;
        }
        let r = self.place_uncached(d, k, filter, strategy, max_switches);
        if let (None, Some(key)) = (&r, key)
            && self.failed.len() < 64
        {
            self.failed.push(key);
        }
        r
    }

    fn place_uncached(&self, d: &Demand, k: u32, filter: &Filter, strategy: &Strategy, max_switches: Option<u32>) -> Option<Vec<u32>> {
        match strategy {
            Strategy::Spread { per_node, per_switch, per_block } => {
                let mut cands: Vec<(u32, u32, u32, u64, u32)> = Vec::new();
                for (s, members) in self.topo.switches.iter().enumerate() {
                    if !self.switch_maybe(s, d) {
                        continue;
                    }
                    for &i in members {
                        if filter.ok(i, &self.nodes[i as usize]) && self.fits(i, d) {
                            let node = &self.nodes[i as usize];
                            let b = per_block.get(&node.block).copied().unwrap_or(0);
                            let sw = per_switch.get(&(s as u32)).copied().unwrap_or(0);
                            let nn = per_node.get(&i).copied().unwrap_or(0);
                            let room = u64::MAX - self.leftover(i as usize, d);
                            cands.push((b, sw, nn, room, i));
                        }
                    }
                }
                if (cands.len() as u32) < k {
                    return None;
                }
                cands.sort_unstable_by_key(|&(b, sw, nn, room, i)| (nn, sw, b, std::cmp::Reverse(room), i));
                Some(cands.into_iter().take(k as usize).map(|c| c.4).collect())
            }
            Strategy::Pack => self.pack(d, k, filter, max_switches),
        }
    }

    fn pack(&self, d: &Demand, k: u32, filter: &Filter, max_switches: Option<u32>) -> Option<Vec<u32>> {
        if k == 1 && d.gpus > 0 && d.gpu_milli >= GPU_MILLI && !d.exclusive && (d.gpus as usize) < HIST {
            // Tightest fit by whole free GPUs: look in the smallest bucket first, touching only
            // switches whose histogram says they hold such a node.
            for b in bucket(d.gpus as u8)..HIST {
                let mut best: Option<(u64, u32)> = None;
                for (s, members) in self.topo.switches.iter().enumerate() {
                    if self.sw_hist[s][b] == 0 {
                        continue;
                    }
                    for &i in members {
                        if bucket(self.whole[i as usize]) == b && filter.ok(i, &self.nodes[i as usize]) && self.fits(i, d) {
                            let l = self.leftover(i as usize, d);
                            if best.is_none_or(|x| (l, i) < x) {
                                best = Some((l, i));
                            }
                        }
                    }
                    if best.is_some() {
                        break; // every node of this bucket fits the GPUs equally tightly
                    }
                }
                if let Some((_, i)) = best {
                    return Some(vec![i]);
                }
            }
            return None;
        }
        // Feasible nodes per switch, in one buffer (a range per switch); a switch's range is
        // sorted by tightest fit only when its nodes are taken.
        let mut cand: Vec<(u64, u32)> = Vec::new();
        let mut per_switch: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
        for (s, members) in self.topo.switches.iter().enumerate() {
            if !self.switch_maybe(s, d) {
                continue;
            }
            let start = cand.len();
            for &i in members {
                if filter.ok(i, &self.nodes[i as usize]) && self.fits(i, d) {
                    cand.push((self.leftover(i as usize, d), i));
                }
            }
            if cand.len() > start {
                per_switch.push((s, start..cand.len()));
                if k > 1 && cand.len() - start == k as usize {
                    // Exactly k feasible nodes: no switch can hold the job with fewer, and the
                    // earliest such switch wins the tie below; the answer cannot change.
                    let c = &mut cand[start..];
                    c.sort_unstable();
                    return Some(c.iter().map(|&(_, i)| i).collect());
                }
            }
            if k == 1 && per_switch.last().is_some_and(|(_, r)| cand[r.clone()].iter().any(|&(l, _)| l == 0)) {
                break; // a perfect fit for a single node: nothing can beat it
            }
        }
        if cand.len() < k as usize {
            return None;
        }
        let k = k as usize;
        if k == 1 {
            let best = cand.iter().min()?;
            return Some(vec![best.1]);
        }
        // One switch holds it all: the switch with the fewest feasible nodes that suffices.
        if let Some((_, r)) = per_switch.iter().filter(|(_, r)| r.len() >= k).min_by_key(|(s, r)| (r.len(), *s)) {
            let c = &mut cand[r.clone()];
            c.sort_unstable();
            return Some(c.iter().take(k).map(|&(_, i)| i).collect());
        }
        // Otherwise group switches by block; prefer the tightest single block, then fewest blocks.
        let mut blocks: FxHashMap<u32, Vec<usize>> = FxHashMap::default();
        for (idx, (s, _)) in per_switch.iter().enumerate() {
            let first = self.topo.switches[*s][0] as usize;
            blocks.entry(self.nodes[first].block).or_default().push(idx);
        }
        let mut blocks: Vec<(u32, usize, Vec<usize>)> = blocks
            .into_iter()
            .map(|(b, sws)| {
                let n = sws.iter().map(|&x| per_switch[x].1.len()).sum();
                (b, n, sws)
            })
            .collect();
        blocks.sort_unstable_by_key(|(b, n, _)| (std::cmp::Reverse(*n), *b));
        let order: Vec<usize> = match blocks.iter().filter(|(_, n, _)| *n >= k).min_by_key(|(b, n, _)| (*n, *b)) {
            Some((_, _, sws)) => {
                let mut sws = sws.clone();
                sws.sort_unstable_by_key(|&x| (std::cmp::Reverse(per_switch[x].1.len()), per_switch[x].0));
                sws
            }
            None => blocks
                .iter()
                .flat_map(|(_, _, sws)| {
                    let mut sws = sws.clone();
                    sws.sort_unstable_by_key(|&x| (std::cmp::Reverse(per_switch[x].1.len()), per_switch[x].0));
                    sws
                })
                .collect(),
        };
        let mut out = Vec::with_capacity(k);
        for (used, x) in order.into_iter().enumerate() {
            let used_switches = used as u32 + 1;
            let c = &mut cand[per_switch[x].1.clone()];
            c.sort_unstable();
            for &(_, i) in c.iter() {
                out.push(i);
                if out.len() == k {
                    if max_switches.is_some_and(|m| used_switches > m) {
                        return None;
                    }
                    return Some(out);
                }
            }
        }
        None
    }

    /// Free CPUs on node `i`.
    pub fn free_cpus(&self, i: u32) -> u32 {
        self.free_cpus[i as usize]
    }

    /// Free milli-GPUs of each GPU of node `i`.
    pub fn gpu_free(&self, i: u32) -> &[u32] {
        let iu = i as usize;
        &self.gpu_free[self.gpu_off[iu] as usize..self.gpu_off[iu + 1] as usize]
    }

    /// Whether a single-node `d` failed to fit since capacity last grew (the failure cache).
    pub fn known_misfit(&self, d: &Demand) -> bool {
        !self.maybe(d, 1) || ShapeKey::of(d, 1).is_some_and(|key| self.failed.iter().any(|f| key.dominates(f)))
    }

    /// Records that a single-node `d` fits nowhere now (with an unrestricted filter).
    pub fn record_misfit(&mut self, d: &Demand, filter: &Filter) {
        if filter.all
            && filter.mask.is_none()
            && let Some(key) = ShapeKey::of(d, 1)
            && self.failed.len() < 64
        {
            self.failed.push(key);
        }
    }

    /// Takes `d` on node `i` and returns the allocation (GPU indices chosen best-fit).
    pub fn take(&mut self, i: u32, d: &Demand) -> Alloc {
        self.take_on(i, d, None)
    }

    /// [`View::take`], on GPU `gpu` for a shared GPU when given.
    pub fn take_on(&mut self, i: u32, d: &Demand, gpu: Option<u8>) -> Alloc {
        debug_assert!(self.fits(i, d));
        let iu = i as usize;
        self.count(iu, -1);
        let node = &self.nodes[iu];
        let (cpus, memory, gpus_needed, milli) = if d.exclusive {
            (node.cpus, node.memory, node.gpus, GPU_MILLI)
        } else {
            (d.cpus, d.memory, d.gpus, d.gpu_milli.min(GPU_MILLI))
        };
        let r = self.gpu_off[iu] as usize..self.gpu_off[iu + 1] as usize;
        let mut idx: Vec<(u32, u8)> =
            self.gpu_free[r.clone()].iter().enumerate().filter(|&(_, &f)| f >= milli).map(|(g, &f)| (f, g as u8)).collect();
        idx.sort_unstable(); // least free first: shared GPUs fill up before whole ones are cut
        if let Some(g) = gpu.filter(|_| gpus_needed == 1)
            && let Some(k) = idx.iter().position(|&(_, x)| x == g)
        {
            idx.swap(0, k);
        }
        let gpus: Vec<u8> = idx.into_iter().take(gpus_needed as usize).map(|(_, g)| g).collect();
        assert_eq!(gpus.len() as u32, gpus_needed, "placement chose a node without the GPUs");
        let mut whole_lost = 0u8;
        for &g in &gpus {
            let f = &mut self.gpu_free[r.start + g as usize];
            if *f == GPU_MILLI {
                whole_lost += 1;
            }
            *f -= milli;
        }
        self.whole[iu] -= whole_lost;
        let other: Vec<(u16, u64)> = if d.exclusive {
            node.other.iter().enumerate().map(|(k, (_, c))| (k as u16, *c)).collect()
        } else {
            d.other
                .iter()
                .map(|(n, c)| (node.other.iter().position(|(m, _)| m == n).expect("fits checked the resource") as u16, *c))
                .collect()
        };
        let base = self.other(iu).start;
        for &(k, c) in &other {
            self.other_free[base + k as usize] -= c;
        }
        self.free_cpus[iu] -= cpus;
        self.free_mem[iu] -= memory;
        self.jobs[iu] += 1;
        self.excl[iu] = d.exclusive;
        self.count(iu, 1);
        Alloc { node: i, cpus, memory, gpus, gpu_milli: milli, other, exclusive: d.exclusive }
    }

    /// Gives an allocation's resources back (a projected release, for reservations).
    pub fn give(&mut self, a: &Alloc) {
        self.failed.clear();
        let iu = a.node as usize;
        self.count(iu, -1);
        self.free_cpus[iu] += a.cpus;
        self.free_mem[iu] += a.memory;
        let off = self.gpu_off[iu] as usize;
        for &g in &a.gpus {
            let f = &mut self.gpu_free[off + g as usize];
            *f += a.gpu_milli;
            if *f == GPU_MILLI {
                self.whole[iu] += 1;
            }
        }
        let base = self.other(iu).start;
        for &(k, c) in &a.other {
            self.other_free[base + k as usize] += c;
        }
        self.jobs[iu] -= 1;
        if a.exclusive {
            self.excl[iu] = false;
        }
        self.count(iu, 1);
    }

    /// Gives back only an allocation's CPUs (a job preempted by suspension keeps the rest).
    pub fn give_cpus(&mut self, a: &Alloc) {
        self.failed.clear();
        self.free_cpus[a.node as usize] += a.cpus;
    }

    /// Takes back what [`View::give_cpus`] gave.
    pub fn hold_cpus(&mut self, a: &Alloc) {
        self.free_cpus[a.node as usize] -= a.cpus;
    }

    /// Applies an allocation decided elsewhere (the same resources `take` would remove).
    pub fn hold(&mut self, a: &Alloc) {
        let iu = a.node as usize;
        self.count(iu, -1);
        self.free_cpus[iu] -= a.cpus;
        self.free_mem[iu] -= a.memory;
        let off = self.gpu_off[iu] as usize;
        for &g in &a.gpus {
            let f = &mut self.gpu_free[off + g as usize];
            if *f == GPU_MILLI {
                self.whole[iu] -= 1;
            }
            *f -= a.gpu_milli;
        }
        let base = self.other(iu).start;
        for &(k, c) in &a.other {
            self.other_free[base + k as usize] -= c;
        }
        self.jobs[iu] += 1;
        self.excl[iu] = a.exclusive;
        self.count(iu, 1);
    }

    /// Restricts node `i` so that what remains free is at most what `cap` leaves free
    /// (used to protect a reservation from backfilled jobs that outlive its start).
    pub fn clamp_to(&mut self, i: u32, cap: &View) {
        let iu = i as usize;
        self.count(iu, -1);
        self.free_cpus[iu] = self.free_cpus[iu].min(cap.free_cpus[iu]);
        self.free_mem[iu] = self.free_mem[iu].min(cap.free_mem[iu]);
        let r = self.gpu_off[iu] as usize..self.gpu_off[iu + 1] as usize;
        let mut whole = 0;
        for g in r {
            self.gpu_free[g] = self.gpu_free[g].min(cap.gpu_free[g]);
            if self.gpu_free[g] == GPU_MILLI {
                whole += 1;
            }
        }
        self.whole[iu] = whole;
        for k in self.other(iu) {
            self.other_free[k] = self.other_free[k].min(cap.other_free[k]);
        }
        // A node the reservation needs whole cannot take anything that outlives the reservation.
        if cap.excl[iu] {
            self.excl[iu] = true;
        }
        self.jobs[iu] = self.jobs[iu].max(cap.jobs[iu]);
        self.count(iu, 1);
    }

    /// Switch index of node `i` (dense numbering over (block, switch)).
    pub fn switch_of(&self, i: u32) -> u32 {
        self.topo.switch_of[i as usize]
    }
}

impl View<'_> {
    /// Resets node `i` to what `from` shows for it.
    pub fn reset_node(&mut self, i: u32, from: &View) {
        self.failed.clear();
        let iu = i as usize;
        self.count(iu, -1);
        self.free_cpus[iu] = from.free_cpus[iu];
        self.free_mem[iu] = from.free_mem[iu];
        let r = self.gpu_off[iu] as usize..self.gpu_off[iu + 1] as usize;
        self.gpu_free[r.clone()].copy_from_slice(&from.gpu_free[r]);
        self.whole[iu] = from.whole[iu];
        let r = self.other(iu);
        self.other_free[r.clone()].copy_from_slice(&from.other_free[r]);
        self.jobs[iu] = from.jobs[iu];
        self.excl[iu] = from.excl[iu];
        self.count(iu, 1);
    }
}
