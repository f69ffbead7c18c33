//! Tandem's scheduler: one pure function, [`schedule`], from a snapshot of the cluster, the
//! current time and a seed to a [`Plan`] (jobs to start and where, jobs to preempt, and why every
//! other pending job waits). The controller and the simulator call this same function.
//!
//! **Invariant:** no IO, no clock reads, no unseeded randomness, no async runtime. Everything the
//! decision depends on is in its arguments, so the same arguments give the same plan.
//!
//! A pass: resolve each pending job's shape into nodes × per-node demand and check the reasons it
//! cannot run at all; order the rest by the priority policy; walk that order placing gangs
//! all-or-nothing; when a job does not fit, the backfill mode decides what may still start.

mod alloc;
mod conservative;
mod incremental;
mod placement;
mod predict;
mod preempt;
mod priority;
mod resv;
mod view;

use model::accounting::Usage;
use model::{ClusterConfig, DepStatus, JobId, JobRequest, MemRequest, Node, PendingReason, RequestKind, Time};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};

pub use alloc::{Alloc, NodeUsage};
pub use incremental::Scheduler;
use placement::Placer;
pub use placement::{FragCache, Fragmentation, GpuKind, GpuProfile, Placement, SplitMix, cluster_fragmentation};
pub use predict::{History, LADDER, Predict};
pub use preempt::{Preemption, Victim, plan_preemption};
pub use priority::{Breakdown, FairShare, Policy, Weights};
pub use view::Topology;
use view::{Demand, Filter, Strategy, View};

/// Backfill modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Backfill {
    /// Strict priority order: nothing starts past the first job that does not fit.
    None,
    /// RLScheduler's greedy variant (SC'20 artifact): a one-time shadow time for the committed
    /// head job, candidates scanned in FCFS order, a candidate starts only if it ends strictly
    /// before the shadow time, no "extra nodes" rule.
    Rls,
    /// EASY: the first blocked job gets a reservation; later jobs start if they do not delay it.
    Easy,
    /// Conservative: every blocked job (up to a bound) gets a reservation that no later job delays.
    Conservative,
}

impl Backfill {
    /// Parses `none`, `rls`, `easy` or `conservative`.
    pub fn parse(s: &str) -> Option<Backfill> {
        Some(match s {
            "none" => Backfill::None,
            "rls" => Backfill::Rls,
            "easy" => Backfill::Easy,
            "conservative" => Backfill::Conservative,
            _ => return None,
        })
    }
}

/// Scheduler settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// How pending jobs are ordered.
    pub policy: Policy,
    /// What may start past a blocked job.
    pub backfill: Backfill,
    /// RLScheduler's committed head: once the first job does not fit, it stays first (no
    /// re-prioritisation) until it starts. Implied by [`Backfill::Rls`].
    pub commit_head: bool,
    /// Most reservations conservative backfill makes per pass (Slurm's bf_max_job_test plays
    /// this part); later jobs may still start if they delay none of them.
    pub max_reservations: usize,
    /// Most jobs a pass looks at (a bound, as every loop here has one).
    pub max_considered: usize,
    /// The run time EASY and conservative backfill plan with: the requested limit, or a
    /// prediction from the snapshot's [`History`] (EASY++). Kills always use the limit.
    #[serde(default)]
    pub predict: Predict,
    /// Which node a single-node job goes to among those that fit ([`Placement`]).
    #[serde(default)]
    pub placement: Placement,
    /// The target workload that GPU fragmentation is measured against (FGD's "typical pods");
    /// empty: the kinds of the pending jobs, derived each pass.
    #[serde(default)]
    pub profile: GpuProfile,
}

impl Config {
    /// Whether this pass plans with predicted run times (EASY or conservative with a prediction).
    pub fn predicting(&self) -> bool {
        self.predict.on() && matches!(self.backfill, Backfill::Easy | Backfill::Conservative)
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            policy: Policy::parse("default").expect("default policy exists"),
            backfill: Backfill::Easy,
            commit_head: false,
            max_reservations: 256,
            max_considered: usize::MAX,
            predict: Predict::UserShape,
            placement: Placement::Default,
            profile: GpuProfile::default(),
        }
    }
}

/// A job waiting to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    /// The request.
    pub req: JobRequest,
    /// Arrival order (ties in priority go to the earlier arrival).
    pub seq: u64,
    /// Where its dependencies stand.
    pub dep: DepStatus,
}

/// A job holding resources.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Running {
    /// The request.
    pub req: JobRequest,
    /// When it started.
    pub start: Time,
    /// What it holds.
    pub allocs: Vec<Alloc>,
}

impl Running {
    /// When the scheduler expects it to end: its time limit, or `now` if it has overrun it.
    pub fn expected_end(&self, now: Time) -> Time {
        (self.start + self.req.time_limit.max(1)).max(now)
    }
}

/// Scheduler state carried from one pass to the next by the caller.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Carry {
    /// The committed head job (with `commit_head`).
    pub committed: Option<JobId>,
    /// Its shadow time, computed once (with [`Backfill::Rls`]).
    pub shadow: Option<Time>,
    /// Arrival sequence number of the first job that arrived after the commitment: RLScheduler
    /// scans jobs of equal submit time in the priority order they had when the head was
    /// committed, and later arrivals after them.
    pub commit_seq: Option<u64>,
}

/// Everything a pass reads.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    /// Nodes.
    pub nodes: &'a [Node],
    /// Usage per node, parallel to `nodes`.
    pub usage: &'a [NodeUsage],
    /// Pending jobs, in any order.
    pub pending: &'a [Pending],
    /// Running jobs.
    pub running: &'a [Running],
    /// Suspended jobs: they count toward limits as running ones do (as Slurm's), hold their
    /// memory and GPUs (in `usage`) with no planned end, and are never preempted again.
    pub suspended: &'a [Running],
    /// Partitions, QOS, accounts.
    pub config: &'a ClusterConfig,
    /// Decayed usage for fair-share.
    pub fairshare: &'a FairShare,
    /// State carried from the previous pass.
    pub carry: &'a Carry,
    /// Actual run times of finished jobs, recorded at their completion events (for predictions).
    pub history: &'a History,
    /// Advance reservations (`scontrol create reservation`), in any order.
    pub reservations: &'a [model::Reservation],
}

impl Snapshot<'_> {
    /// When the pass plans for a running job to end: its prediction under `cfg` (corrected once
    /// outlived) or its time limit; `now` once it has overrun its limit.
    pub fn planned_end(&self, run: &Running, now: Time, cfg: &Config) -> Time {
        if cfg.predicting() { self.history.expected_end(cfg.predict, &run.req, run.start, now) } else { run.expected_end(now) }
    }
}

/// A job to start now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    /// The job.
    pub job: JobId,
    /// Where, node by node.
    pub allocs: Vec<Alloc>,
    /// Started out of priority order by backfill.
    pub backfilled: bool,
    /// The time limit it starts with, when backfill cut it down towards `--time-min`.
    #[serde(default)]
    pub time_limit: Option<Time>,
    /// A heterogeneous job's node count per component, in order: `allocs` holds component 0's
    /// nodes first, then component 1's, ... (no node in two components). Empty for an
    /// ordinary job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub het: Vec<u32>,
}

/// A job that stays pending, with why and (under backfill) when it is expected to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    /// The job.
    pub job: JobId,
    /// Slurm reason code.
    pub reason: PendingReason,
    /// Expected start (`squeue --start`), when a reservation gives one.
    pub expected_start: Option<Time>,
}

/// A job that can never run as asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejected {
    /// The job.
    pub job: JobId,
    /// Reason code.
    pub reason: PendingReason,
    /// What is wrong, for the user.
    pub message: String,
}

/// Counters of one pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassStats {
    /// Pending jobs looked at.
    pub considered: usize,
    /// Jobs started in priority order.
    pub started: usize,
    /// Jobs started by backfill.
    pub backfilled: usize,
    /// Reservations made.
    pub reservations: usize,
}

/// The output of a pass: a proposal the caller applies.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Jobs to start now.
    pub starts: Vec<Start>,
    /// Jobs that wait, with reasons.
    pub waiting: Vec<Waiting>,
    /// Jobs that can never run as asked: the caller fails them instead of letting them block.
    pub rejected: Vec<Rejected>,
    /// Lower-tier work to preempt for higher-tier jobs that cannot otherwise start.
    pub preemptions: Vec<Preemption>,
    /// State for the next pass.
    pub carry: Carry,
    /// Counters.
    pub stats: PassStats,
}

/// A pending job resolved against the cluster for this pass.
#[derive(Debug, Clone)]
pub(crate) struct Resolved<'a> {
    pub idx: usize,
    pub req: &'a JobRequest,
    pub nodes: u32,
    pub demand: Demand,
    pub filter: Filter,
    pub limit: Time,
    /// A heterogeneous job's components after the first, resolved as the first is.
    pub het: Vec<Part>,
    /// The limit it starts with, cut to end with its advance reservation.
    pub cut: Option<Time>,
}

/// One further component of a heterogeneous job: node count, per-node demand, node filter.
#[derive(Debug, Clone)]
pub(crate) struct Part {
    pub nodes: u32,
    pub demand: Demand,
    pub filter: Filter,
}

impl<'a> Resolved<'a> {
    /// Component `k` of a heterogeneous job alone (0: the first).
    pub fn component(&self, k: usize) -> Resolved<'a> {
        let mut one = Resolved { het: Vec::new(), ..self.clone() };
        if let Some(p) = k.checked_sub(1).and_then(|k| self.het.get(k)) {
            (one.nodes, one.demand, one.filter) = (p.nodes, p.demand.clone(), p.filter.clone());
        }
        one
    }

    /// Number of components: 1 for an ordinary job.
    pub fn components(&self) -> usize {
        1 + self.het.len()
    }

    /// The node count per component of a heterogeneous job ([`Start::het`]); empty for an
    /// ordinary job.
    pub fn het_nodes(&self) -> Vec<u32> {
        if self.het.is_empty() {
            return Vec::new();
        }
        std::iter::once(self.nodes).chain(self.het.iter().map(|p| p.nodes)).collect()
    }
}

/// Cluster-wide facts: per pass for [`schedule`], kept by a [`Scheduler`].
pub(crate) struct Facts<'a> {
    pub partitions: Vec<String>,
    pub max_cpus: u32,
    pub max_gpus: u32,
    pub total_nodes: u32,
    pub name_index: FxHashMap<&'a str, u32>,
    pub partition_all: FxHashMap<String, bool>,
}

impl<'a> Facts<'a> {
    pub fn new(nodes: &'a [Node], config: &ClusterConfig, with_names: bool) -> Facts<'a> {
        let mut partition_all = FxHashMap::default();
        for p in &config.partitions {
            partition_all.insert(p.name.clone(), nodes.iter().all(|n| n.in_partition(&p.name)));
        }
        Facts {
            partitions: config.partitions.iter().map(|p| p.name.clone()).collect(),
            max_cpus: nodes.iter().map(|n| n.cpus).max().unwrap_or(0),
            max_gpus: nodes.iter().map(|n| n.gpus).max().unwrap_or(0),
            total_nodes: nodes.len() as u32,
            name_index: if with_names {
                nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i as u32)).collect()
            } else {
                FxHashMap::default()
            },
            partition_all,
        }
    }

    /// Resolves the shape: node count, per-node demand and node filter.
    pub fn resolve<'r>(&self, idx: usize, req: &'r JobRequest, config: &ClusterConfig) -> Result<Resolved<'r>, (PendingReason, String)> {
        let mut r = self.resolve_one(idx, req, config)?;
        if !req.het.is_empty() {
            let mut total = r.nodes;
            for k in 1..req.components() {
                let part = req.component(k).expect("k < components");
                let p = self.resolve_one(idx, &part, config).map_err(|(reason, m)| (reason, format!("component {k}: {m}")))?;
                total = total.saturating_add(p.nodes);
                r.het.push(Part { nodes: p.nodes, demand: p.demand, filter: p.filter });
            }
            if total > self.total_nodes {
                return Err((
                    PendingReason::BadConstraints,
                    format!("its components request {total} nodes in all but the cluster has {}", self.total_nodes),
                ));
            }
        }
        Ok(r)
    }

    /// [`Facts::resolve`] of one component (the request's own shape and constraints).
    fn resolve_one<'r>(&self, idx: usize, req: &'r JobRequest, config: &ClusterConfig) -> Result<Resolved<'r>, (PendingReason, String)> {
        let s = &req.shape;
        let nodes = if s.nodes_min > 0 {
            s.nodes_min
        } else if let Some(t) = s.ntasks_per_node {
            s.ntasks.max(1).div_ceil(t.max(1))
        } else {
            let cpus = s.ntasks.max(1) * s.cpus_per_task.max(1);
            let mut k = cpus.div_ceil(self.max_cpus.max(1)).max(1);
            if let Some(g) = &s.gpus
                && let model::GpuPer::Task(n) = g.per
            {
                k = k.max((s.ntasks.max(1) * n).div_ceil(self.max_gpus.max(1)));
            }
            k
        };
        if nodes > self.total_nodes {
            return Err((PendingReason::BadConstraints, format!("requests {nodes} nodes but the cluster has {}", self.total_nodes)));
        }
        let cpus = s.tasks_per_node(nodes) * s.cpus_per_task.max(1);
        let memory = match s.mem {
            MemRequest::PerNode(m) => m,
            MemRequest::PerCpu(m) => m.saturating_mul(cpus as u64),
        };
        let demand = Demand {
            cpus,
            memory,
            gpus: s.gpus_per_node(nodes),
            gpu_milli: s.gpus.as_ref().map_or(model::GPU_MILLI, |g| g.milli.clamp(1, model::GPU_MILLI)),
            other: s.other.clone(),
            exclusive: s.exclusive,
        };
        // A job without -p is in the default partition (the first configured).
        let named: Option<&str> = req.partition.as_deref().or_else(|| config.partitions.first().map(|p| p.name.as_str()));
        let partition = match named {
            None => None,
            Some(p) => match self.partition_all.get(p) {
                None => {
                    return Err((PendingReason::BadConstraints, format!("invalid partition specified: {p}")));
                }
                Some(true) => None,
                Some(false) => Some(p.to_string()),
            },
        };
        let lookup = |names: &[String]| -> Result<Vec<u32>, (PendingReason, String)> {
            names
                .iter()
                .map(|n| {
                    self.name_index
                        .get(n.as_str())
                        .copied()
                        .ok_or((PendingReason::BadConstraints, format!("invalid node name specified: {n}")))
                })
                .collect()
        };
        let gpu_type = s.gpus.as_ref().and_then(|g| g.gpu_type.clone());
        let filter = Filter {
            all: partition.is_none() && req.features.is_empty() && gpu_type.is_none() && req.nodelist.is_empty() && req.exclude.is_empty(),
            partition,
            features: req.features.clone(),
            gpu_type,
            include: lookup(&req.nodelist)?,
            exclude: lookup(&req.exclude)?,
            mask: None,
        };
        if !filter.include.is_empty() && (filter.include.len() as u32) > nodes {
            return Err((
                PendingReason::BadConstraints,
                format!("{} nodes required by -w but only {nodes} requested", filter.include.len()),
            ));
        }
        Ok(Resolved { idx, req, nodes, demand, filter, limit: req.time_limit, het: Vec::new(), cut: None })
    }
}

/// A shape with its filter: demand, nodes, -w nodes, partition, features, GPU type, -x nodes.
type FilteredShape = (Demand, u32, Vec<u32>, Option<String>, Vec<String>, Option<String>, Vec<u32>);

/// Memo of "can this shape ever fit on this cluster", so a pass checks each distinct shape once.
#[derive(Default)]
pub(crate) struct EverFits {
    plain: FxHashMap<view::ShapeKey, bool>,
    full: FxHashMap<FilteredShape, bool>,
}

impl EverFits {
    pub(crate) fn check(&mut self, nodes: &[Node], r: &Resolved) -> bool {
        self.check_one(nodes, &r.demand, r.nodes, &r.filter) && r.het.iter().all(|p| self.check_one(nodes, &p.demand, p.nodes, &p.filter))
    }

    fn check_one(&mut self, nodes: &[Node], demand: &Demand, k: u32, f: &Filter) -> bool {
        if f.all
            && let Some(key) = view::ShapeKey::of(demand, k)
        {
            return *self
                .plain
                .entry(key)
                .or_insert_with(|| nodes.iter().filter(|n| View::could_ever_fit(n, demand)).count() >= k as usize);
        }
        let key = (demand.clone(), k, f.include.clone(), f.partition.clone(), f.features.clone(), f.gpu_type.clone(), f.exclude.clone());
        *self.full.entry(key).or_insert_with(|| {
            let n = nodes.iter().enumerate().filter(|(i, n)| f.ok(*i as u32, n) && View::could_ever_fit(n, demand)).count();
            n >= k as usize
        })
    }
}

/// Whether a request names nodes (`-w`, `-x`, in any component): the pass then indexes nodes by
/// name.
fn needs_names(req: &JobRequest) -> bool {
    req.reservation.is_some()
        || !req.nodelist.is_empty()
        || !req.exclude.is_empty()
        || req.het.iter().any(|p| !p.nodelist.is_empty() || !p.exclude.is_empty())
}

/// Runs one scheduling pass. Pure: the same arguments give the same plan.
pub fn schedule(snap: &Snapshot, now: Time, seed: u64, cfg: &Config) -> Plan {
    let topo = std::sync::Arc::new(view::Topology::new(snap.nodes));
    let names = !snap.reservations.is_empty() || snap.pending.iter().any(|p| needs_names(&p.req));
    let facts = Facts::new(snap.nodes, snap.config, names);
    let mut spare = conservative::Spare::default();
    schedule_inner(snap.nodes, topo, &facts, &mut EverFits::default(), &mut FragCache::default(), &mut spare, snap, now, seed, cfg).0
}

/// What passes over the same node definitions share: the topology, and which request shapes
/// could ever fit (both O(nodes) to compute, both independent of usage and of node states). A
/// caller that keeps one hands it to [`schedule_reusing`] with each snapshot.
#[derive(Default)]
pub struct Reuse {
    topo: Option<std::sync::Arc<Topology>>,
    ever: EverFits,
    frag: FragCache,
    spare: conservative::Spare,
}

impl std::fmt::Debug for Reuse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reuse").field("topology", &self.topo.is_some()).finish_non_exhaustive()
    }
}

/// [`schedule`], reusing what earlier passes computed from the nodes when `same_nodes` says the
/// node definitions are those of the last call (states may differ). The same plan as
/// [`schedule`].
pub fn schedule_reusing(snap: &Snapshot, now: Time, seed: u64, cfg: &Config, reuse: &mut Reuse, same_nodes: bool) -> Plan {
    let topo = match &reuse.topo {
        Some(t) if same_nodes && t.len() == snap.nodes.len() => t.clone(),
        _ => {
            let t = std::sync::Arc::new(view::Topology::new(snap.nodes));
            *reuse = Reuse { topo: Some(t.clone()), ..Reuse::default() };
            t
        }
    };
    let names = !snap.reservations.is_empty() || snap.pending.iter().any(|p| needs_names(&p.req));
    let facts = Facts::new(snap.nodes, snap.config, names);
    schedule_inner(snap.nodes, topo, &facts, &mut reuse.ever, &mut reuse.frag, &mut reuse.spare, snap, now, seed, cfg).0
}

/// What a full EASY pass leaves behind for the submit fast path.
pub(crate) struct PassMemo<'n> {
    pub view: View<'n>,
    /// The reserved job's sort key, arrival seq and id, its shadow time and reserved nodes.
    pub top: Option<(priority::Key, u64, JobId, Time, FxHashSet<u32>)>,
    pub total_shares: u32,
    pub accounts: FxHashSet<String>,
    /// The GPU profile the pass placed against (empty when it weighed none).
    pub profile: GpuProfile,
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn schedule_inner<'n>(
    nodes: &'n [Node],
    topo: std::sync::Arc<view::Topology>,
    facts: &Facts,
    ever: &mut EverFits,
    frag: &mut FragCache,
    spare: &mut conservative::Spare,
    snap: &Snapshot,
    now: Time,
    seed: u64,
    cfg: &Config,
) -> (Plan, PassMemo<'n>) {
    assert!(std::ptr::eq(nodes, snap.nodes), "the scheduler's nodes are the snapshot's nodes");
    // Ties in priority are broken by arrival order and job id; the seed breaks ties between
    // equally good nodes for the placement policies that draw them at random.
    let mut plan = Plan::default();
    let mut view = View::new(nodes, topo, snap.usage);

    // Per-user running counts for QOS limits, computed once (only when some QOS has limits).
    let mut limits = Limits::new(snap);

    // Resolve and filter.
    let resv = resv::ResvTable::new(snap.reservations, now, nodes, &facts.name_index);
    let mut ready: Vec<Resolved> = Vec::with_capacity(snap.pending.len());
    for (idx, p) in snap.pending.iter().enumerate() {
        match admit(snap, facts, ever, &limits, &resv, now, idx, p) {
            Admit::Ready(mut r) => {
                if cfg.predicting() {
                    r.limit = snap.history.predict(cfg.predict, r.req).min(r.cut.unwrap_or(Time::MAX));
                }
                ready.push(r)
            }
            Admit::Wait(reason) => plan.waiting.push(Waiting { job: p.req.id, reason, expected_start: None }),
            Admit::Reject(reason, message) => plan.rejected.push(Rejected { job: p.req.id, reason, message }),
        }
    }

    // Order.
    let (seen, total_shares) = accounts(snap);
    let ctx = priority_context(snap, facts, now, total_shares);
    let mut keyed: Vec<(u64, u64, u64, JobId, usize)> = ready
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let k = priority::key(&cfg.policy, &ctx, r.req, r.nodes, r.limit);
            // A job requeued expedited after its node failed comes before every other.
            let first = if r.req.expedited { 0 } else { sortable(k.0) };
            (first, sortable(k.1), snap.pending[r.idx].seq, r.req.id, i)
        })
        .collect();
    keyed.sort_unstable();
    let mut order: Vec<usize> = keyed.into_iter().map(|k| k.4).collect();
    order.truncate(cfg.max_considered);

    let commit = cfg.commit_head || cfg.backfill == Backfill::Rls;
    if commit
        && let Some(c) = snap.carry.committed
        && let Some(pos) = order.iter().position(|&i| ready[i].req.id == c)
    {
        let i = order.remove(pos);
        order.insert(0, i);
    }

    let mut top = None;
    let configured = (!cfg.profile.kinds.is_empty()).then_some(&cfg.profile);
    let mut placer = Placer::new(cfg.placement, seed, configured, snap, frag, (facts.max_cpus, facts.max_gpus));
    match cfg.backfill {
        Backfill::Conservative => conservative::run(snap, now, cfg, &ready, &order, &mut view, &mut plan, &mut limits, &mut placer, spare),
        _ => {
            if let Some((pos, shadow, reserved)) =
                walk(snap, now, cfg, commit, &ready, &order, &mut view, &mut plan, &mut limits, &mut placer)
            {
                let r = &ready[order[pos]];
                top =
                    Some((priority::key(&cfg.policy, &ctx, r.req, r.nodes, r.limit), snap.pending[r.idx].seq, r.req.id, shadow, reserved));
            }
        }
    }
    cut_to_reservations(&mut plan, &ready);
    let accounts = seen.into_iter().map(str::to_string).collect();
    let total_shares = ctx.total_shares;
    let profile = placer.profile().cloned().unwrap_or_default();
    (plan, PassMemo { view, top, total_shares, accounts, profile })
}

/// Jobs that start in an advance reservation end with it: their starts carry the cut limit.
fn cut_to_reservations(plan: &mut Plan, ready: &[Resolved]) {
    let cuts: FxHashMap<JobId, Time> = ready.iter().filter_map(|r| r.cut.map(|c| (r.req.id, c))).collect();
    if cuts.is_empty() {
        return;
    }
    for s in &mut plan.starts {
        if let Some(&c) = cuts.get(&s.job) {
            s.time_limit = Some(s.time_limit.map_or(c, |t| t.min(c)));
        }
    }
}

/// The accounts with pending or running work, and their shares summed (fair-share's
/// denominator).
fn accounts<'a>(snap: &Snapshot<'a>) -> (FxHashSet<&'a str>, u32) {
    let mut seen: FxHashSet<&str> = FxHashSet::default();
    let mut total = 0;
    for p in snap.pending.iter().map(|p| &p.req).chain(snap.running.iter().map(|r| &r.req)) {
        if seen.insert(p.account.as_str()) {
            total += snap.config.shares(&p.account);
        }
    }
    (seen, total)
}

/// Maps an f64 to a u64 with the same order (total order; NaN sorts last).
fn sortable(f: f64) -> u64 {
    let f = if f.is_nan() { f64::INFINITY } else { f + 0.0 };
    let b = f.to_bits();
    if b >> 63 == 1 { !b } else { b | (1 << 63) }
}

pub(crate) fn priority_context<'a>(snap: &Snapshot<'a>, facts: &Facts, now: Time, total_shares: u32) -> priority::PriorityContext<'a> {
    priority::PriorityContext {
        now,
        config: snap.config,
        fairshare: snap.fairshare,
        total_nodes: facts.total_nodes,
        max_part_tier: snap.config.partitions.iter().map(|p| p.priority_tier).max().unwrap_or(0),
        max_qos: snap.config.qos.iter().map(|q| q.priority).max().unwrap_or(0),
        total_shares,
        assoc_shares: priority::PriorityContext::assoc_shares(snap.config),
    }
}

/// What a running job holds, in TRES terms.
fn running_usage(r: &Running) -> Usage {
    let mut u = Usage { jobs: r.req.components() as u64, node: r.allocs.len() as u64, ..Usage::default() };
    for a in &r.allocs {
        u.cpu += a.cpus as u64;
        u.mem += a.memory >> 20;
        u.gpu += a.gpus.len() as u64;
    }
    u
}

/// What a job about to start would hold.
fn resolved_usage(r: &Resolved) -> Usage {
    // Each component of a heterogeneous job counts as a job (Slurm's rule).
    let mut u = Usage::default();
    for (d, n) in std::iter::once((&r.demand, r.nodes)).chain(r.het.iter().map(|p| (&p.demand, p.nodes))) {
        let n = n as u64;
        u.add(&Usage { jobs: 1, cpu: d.cpus as u64 * n, mem: (d.memory >> 20) * n, node: n, gpu: d.gpus as u64 * n });
    }
    u
}

/// Association and QOS limits as a pass goes (`enforce` has `limits`): what running jobs hold
/// per user and QOS, per QOS, per association and per account, plus what this pass started.
pub(crate) struct Limits<'a> {
    config: &'a ClusterConfig,
    any: bool,
    /// Per (user, QOS).
    user_qos: FxHashMap<(&'a str, &'a str), Usage>,
    /// Per QOS.
    qos: FxHashMap<&'a str, Usage>,
    /// Per (user, account): the association.
    assoc: FxHashMap<(&'a str, &'a str), Usage>,
    /// Per account: its users' jobs and those of every account below it.
    account: FxHashMap<&'a str, Usage>,
    /// Each configured account and its ancestors, nearest first.
    lineages: FxHashMap<&'a str, Vec<&'a model::Account>>,
    /// The associations' own limits, by (user, account).
    assoc_limits: FxHashMap<(&'a str, &'a str), &'a model::Limits>,
}

impl<'a> Limits<'a> {
    pub fn new(snap: &Snapshot<'a>) -> Limits<'a> {
        let c = snap.config;
        let any = c.enforce.limits
            && (c.qos.iter().any(|q| !q.limits.is_empty())
                || c.accounts.iter().any(|a| !a.limits.is_empty())
                || c.assocs.iter().any(|a| !a.limits.is_empty()));
        let mut l = Limits {
            config: c,
            any,
            user_qos: FxHashMap::default(),
            qos: FxHashMap::default(),
            assoc: FxHashMap::default(),
            account: FxHashMap::default(),
            assoc_limits: FxHashMap::default(),
            lineages: FxHashMap::default(),
        };
        if any {
            for a in &c.accounts {
                l.lineages.insert(a.name.as_str(), c.lineage(&a.name));
            }
            for a in &c.assocs {
                l.assoc_limits.insert((a.user.as_str(), a.account.as_str()), &a.limits);
            }
            for r in snap.running.iter().chain(snap.suspended) {
                l.count(&r.req, &running_usage(r));
            }
        }
        l
    }

    fn qos_name(&self, req: &'a JobRequest) -> &'a str {
        self.config.qos(req.qos.as_deref()).map_or("", |q| q.name.as_str())
    }

    fn count(&mut self, req: &'a JobRequest, u: &Usage) {
        let q = self.qos_name(req);
        self.user_qos.entry((req.user.as_str(), q)).or_default().add(u);
        self.qos.entry(q).or_default().add(u);
        self.assoc.entry((req.user.as_str(), req.account.as_str())).or_default().add(u);
        // The account and every account above it.
        if let Some(l) = self.lineages.get(req.account.as_str()) {
            for a in l {
                self.account.entry(a.name.as_str()).or_default().add(u);
            }
        }
    }

    /// The limit that keeps `r` from starting now, if any: the QOS's per-user limits, its
    /// group limits, the association's, then each account's up the tree.
    pub fn blocks(&self, r: &Resolved) -> Option<PendingReason> {
        if !self.any {
            return None;
        }
        let req = r.req;
        let more = resolved_usage(r);
        let zero = Usage::default();
        if let Some(qos) = self.config.qos(req.qos.as_deref()) {
            let ql = &qos.limits;
            let used = self.user_qos.get(&(req.user.as_str(), qos.name.as_str())).unwrap_or(&zero);
            if ql.max_jobs.is_some_and(|m| used.jobs + more.jobs > m as u64) {
                return Some(PendingReason::QosMaxJobsPerUserLimit);
            }
            if let Some(k) = used.exceeds(&more, &ql.max_tres_per_user) {
                return Some(match k {
                    model::accounting::TresKind::Gpu => PendingReason::QosMaxGpusPerUserLimit,
                    k => PendingReason::QosMaxPerUser(k),
                });
            }
            let used = self.qos.get(qos.name.as_str()).unwrap_or(&zero);
            if ql.grp_jobs.is_some_and(|m| used.jobs + more.jobs > m as u64) {
                return Some(PendingReason::QosGrpJobsLimit);
            }
            if let Some(k) = used.exceeds(&more, &ql.grp_tres) {
                return Some(PendingReason::QosGrp(k));
            }
        }
        if let Some(al) = self.assoc_limits.get(&(req.user.as_str(), req.account.as_str())) {
            let used = self.assoc.get(&(req.user.as_str(), req.account.as_str())).unwrap_or(&zero);
            if al.max_jobs.is_some_and(|m| used.jobs + more.jobs > m as u64) {
                return Some(PendingReason::AssocMaxJobsLimit);
            }
            if al.grp_jobs.is_some_and(|m| used.jobs + more.jobs > m as u64) {
                return Some(PendingReason::AssocGrpJobsLimit);
            }
            if let Some(k) = used.exceeds(&more, &al.grp_tres) {
                return Some(PendingReason::AssocGrp(k));
            }
        }
        let lineage = self.lineages.get(req.account.as_str()).map_or(&[][..], |l| l.as_slice());
        // An account's MaxJobs holds for each user association below it that sets none.
        if let Some(m) = lineage.iter().find_map(|a| a.limits.max_jobs)
            && self.assoc_limits.get(&(req.user.as_str(), req.account.as_str())).is_none_or(|al| al.max_jobs.is_none())
        {
            let used = self.assoc.get(&(req.user.as_str(), req.account.as_str())).unwrap_or(&zero);
            if used.jobs + more.jobs > m as u64 {
                return Some(PendingReason::AssocMaxJobsLimit);
            }
        }
        for a in lineage {
            if a.limits.grp_jobs.is_none() && a.limits.grp_tres.is_empty() {
                continue;
            }
            let used = self.account.get(a.name.as_str()).unwrap_or(&zero);
            if a.limits.grp_jobs.is_some_and(|m| used.jobs + more.jobs > m as u64) {
                return Some(PendingReason::AssocGrpJobsLimit);
            }
            if let Some(k) = used.exceeds(&more, &a.limits.grp_tres) {
                return Some(PendingReason::AssocGrp(k));
            }
        }
        None
    }

    /// Counts a start.
    pub fn add(&mut self, r: &Resolved<'a>) {
        if self.any {
            self.count(r.req, &resolved_usage(r));
        }
    }
}

/// The verdict on one pending job before ordering (short-lived: not worth a box).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Admit<'a> {
    Ready(Resolved<'a>),
    Wait(PendingReason),
    Reject(PendingReason, String),
}

/// Checks everything that keeps a job out of this pass: holds, impossible shapes, dependencies,
/// begin time, partition and QOS limits, required nodes down, advance reservations.
#[allow(clippy::too_many_arguments)]
pub(crate) fn admit<'a>(
    snap: &Snapshot<'a>,
    facts: &Facts,
    ever: &mut EverFits,
    limits: &Limits,
    resv: &resv::ResvTable,
    now: Time,
    idx: usize,
    p: &'a Pending,
) -> Admit<'a> {
    let req = &p.req;
    if req.held {
        return Admit::Wait(PendingReason::JobHeldUser);
    }
    let r = match facts.resolve(idx, req, snap.config) {
        Ok(r) => r,
        Err((reason, message)) => return Admit::Reject(reason, message),
    };
    if !ever.check(snap.nodes, &r) {
        let message = format!(
            "requested node configuration is not available: {} node(s) with {} CPUs, {} bytes memory, {} GPUs each",
            r.nodes, r.demand.cpus, r.demand.memory, r.demand.gpus
        );
        return Admit::Reject(PendingReason::BadConstraints, message);
    }
    match p.dep {
        DepStatus::Satisfied => {}
        DepStatus::Waiting => return Admit::Wait(PendingReason::Dependency),
        DepStatus::Never => return Admit::Wait(PendingReason::DependencyNeverSatisfied),
    }
    if req.begin_time.is_some_and(|b| b > now) {
        return Admit::Wait(PendingReason::BeginTime);
    }
    let Some(part) = snap.config.partition(req.partition.as_deref()) else {
        return Admit::Reject(PendingReason::BadConstraints, "no partition configured".into());
    };
    if req.time_limit > part.max_time {
        return Admit::Wait(PendingReason::PartitionTimeLimit);
    }
    let Some(qos) = snap.config.qos(req.qos.as_deref()) else {
        return Admit::Reject(PendingReason::BadConstraints, format!("invalid qos specification: {}", req.qos.as_deref().unwrap_or("")));
    };
    let _ = qos;
    if let Some(reason) = limits.blocks(&r) {
        return Admit::Wait(reason);
    }
    if !r.filter.include.is_empty() && r.filter.include.iter().any(|&i| !snap.nodes[i as usize].state.schedulable()) {
        return Admit::Wait(PendingReason::ReqNodeNotAvail);
    }
    let mut r = r;
    if let Err(reason) = resv.apply(&mut r, now, snap.nodes) {
        return Admit::Wait(reason);
    }
    Admit::Ready(r)
}

fn strategy_maps(snap: &Snapshot, view: &View, service: &str) -> [FxHashMap<u32, u32>; 3] {
    let mut m: [FxHashMap<u32, u32>; 3] = Default::default();
    for r in snap.running {
        if matches!(&r.req.kind, RequestKind::Replica { service: s } if s == service) {
            for a in &r.allocs {
                *m[0].entry(a.node).or_default() += 1;
                *m[1].entry(view.switch_of(a.node)).or_default() += 1;
                *m[2].entry(snap.nodes[a.node as usize].block).or_default() += 1;
            }
        }
    }
    m
}

/// Places `r` on `view` if it fits now; returns the allocations.
pub(crate) fn try_place(snap: &Snapshot, view: &mut View, r: &Resolved, placer: &mut Placer) -> Option<Vec<Alloc>> {
    if !r.het.is_empty() {
        return place_components(view, r);
    }
    let nodes = match &r.req.kind {
        RequestKind::Batch if placer.scores(&r.demand, r.nodes) => {
            if view.known_misfit(&r.demand) {
                return None;
            }
            let Some((i, gpu)) = placer.choose(view, &r.demand, &r.filter, r.req.id.0) else {
                view.record_misfit(&r.demand, &r.filter);
                return None;
            };
            placer.placed(i, &r.demand);
            return Some(vec![view.take_on(i, &r.demand, gpu)]);
        }
        RequestKind::Batch => view.place(&r.demand, r.nodes, &r.filter, &Strategy::Pack, r.req.max_switches)?,
        RequestKind::Replica { service } => {
            if !view.maybe(&r.demand, r.nodes) {
                return None;
            }
            let [mut n, mut s, mut b] = strategy_maps(snap, view, service);
            for &node in placer.replicas.get(service).map(|v| v.as_slice()).unwrap_or(&[]) {
                *n.entry(node).or_default() += 1;
                *s.entry(view.switch_of(node)).or_default() += 1;
                *b.entry(snap.nodes[node as usize].block).or_default() += 1;
            }
            let chosen = view.place(
                &r.demand,
                r.nodes,
                &r.filter,
                &Strategy::Spread { per_node: &n, per_switch: &s, per_block: &b },
                r.req.max_switches,
            )?;
            placer.replicas.entry(service.clone()).or_default().extend(&chosen);
            chosen
        }
    };
    Some(nodes.into_iter().map(|i| view.take(i, &r.demand)).collect())
}

/// Places every component of a heterogeneous job, each on nodes none of the others holds
/// (packed), or none of them: what an earlier component took goes back when a later one does
/// not fit. The components that name nodes (`-w`) go first, then those with other constraints,
/// then the larger, so that a loose one does not take a node a tighter one needs; the
/// allocations come back in component order. A component's own mask (conservative backfill's
/// window) holds for it.
fn place_components(view: &mut View, r: &Resolved) -> Option<Vec<Alloc>> {
    let parts: Vec<(&Demand, u32, &Filter)> =
        std::iter::once((&r.demand, r.nodes, &r.filter)).chain(r.het.iter().map(|p| (&p.demand, p.nodes, &p.filter))).collect();
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by_key(|&k| (parts[k].2.include.is_empty(), parts[k].2.all, std::cmp::Reverse(parts[k].1), k));
    let mut taken: Vec<Vec<Alloc>> = vec![Vec::new(); parts.len()];
    let mut used: Vec<bool> = vec![true; view.len()];
    for k in order {
        let (demand, n, filter) = parts[k];
        let mask: Vec<bool> = match &filter.mask {
            Some(m) => used.iter().zip(m.iter()).map(|(a, b)| *a && *b).collect(),
            None => used.clone(),
        };
        let f = Filter { mask: Some(mask.into()), all: false, ..filter.clone() };
        let Some(nodes) = view.place(demand, n, &f, &Strategy::Pack, r.req.max_switches) else {
            for a in taken.iter().flatten() {
                view.give(a);
            }
            return None;
        };
        for i in nodes {
            used[i as usize] = false;
            taken[k].push(view.take(i, demand));
        }
    }
    Some(taken.into_iter().flatten().collect())
}

/// The EASY / none / RLS walk over the priority order.
#[allow(clippy::too_many_arguments)]
fn walk<'a>(
    snap: &Snapshot<'a>,
    now: Time,
    cfg: &Config,
    commit: bool,
    ready: &[Resolved<'a>],
    order: &[usize],
    view: &mut View,
    plan: &mut Plan,
    limits: &mut Limits<'a>,
    replicas: &mut Placer,
) -> Option<(usize, Time, FxHashSet<u32>)> {
    // EASY state: shadow time, the view at the shadow time with the reservation taken out, the
    // set of reserved nodes, and the view for jobs that would outlive the shadow time.
    struct Easy<'n> {
        shadow: Time,
        proj: View<'n>,
        reserved: FxHashSet<u32>,
        long: View<'n>,
    }
    let mut easy: Option<Easy> = None;
    let mut rls_shadow: Option<Time> = None;
    let mut blocked: Option<usize> = None; // position in `order` of the first job that did not fit
    let mut preempt_victims: FxHashSet<JobId> = FxHashSet::default();

    for (pos, &i) in order.iter().enumerate() {
        let r = &ready[i];
        plan.stats.considered += 1;
        if let Some(reason) = limits.blocks(r) {
            plan.waiting.push(Waiting { job: r.req.id, reason, expected_start: None });
            continue;
        }
        if blocked.is_none() {
            if let Some(allocs) = try_place(snap, view, r, replicas) {
                limits.add(r);
                plan.starts.push(Start { job: r.req.id, allocs, backfilled: false, time_limit: None, het: r.het_nodes() });
                plan.stats.started += 1;
                continue;
            }
            blocked = Some(pos);
            // Higher-tier work that cannot start may preempt lower tiers.
            let my_tier = snap.config.qos(r.req.qos.as_deref()).map_or(0, |q| q.preempt_tier);
            // A heterogeneous job preempts nothing: the victims are chosen for one shape.
            let victims = if r.het.is_empty() { preempt::preempt_for(snap, view, r, now, my_tier, &preempt_victims) } else { None };
            let overrides = match victims {
                Some(p) => {
                    // A suspended victim frees only its CPUs, at once (the controller releases
                    // them): it never ends for the plan.
                    let o: FxHashMap<JobId, Time> = p.victims.iter().filter(|v| !v.suspend).map(|v| (v.job, now + v.grace)).collect();
                    preempt_victims.extend(p.victims.iter().map(|v| v.job));
                    plan.preemptions.push(p);
                    o
                }
                None => FxHashMap::default(),
            };
            match cfg.backfill {
                Backfill::None => {
                    plan.waiting.push(Waiting { job: r.req.id, reason: PendingReason::Resources, expected_start: None });
                    if commit {
                        plan.carry.committed = Some(r.req.id);
                    }
                }
                Backfill::Rls => {
                    let same = snap.carry.committed == Some(r.req.id);
                    let commit_seq = match snap.carry.commit_seq {
                        Some(c) if same => c,
                        _ => snap.pending.iter().map(|p| p.seq + 1).max().unwrap_or(0),
                    };
                    let shadow = match (snap.carry.committed, snap.carry.shadow) {
                        (Some(c), Some(s)) if c == r.req.id => s,
                        _ => {
                            let this_pass = started_this_pass(plan, ready, order, pos, now, true);
                            reservation(snap, now, cfg, view, r, &overrides, &this_pass).map_or(Time::MAX, |(t, _, _)| t)
                        }
                    };
                    rls_shadow = Some(shadow);
                    plan.carry = Carry { committed: Some(r.req.id), shadow: Some(shadow), commit_seq: Some(commit_seq) };
                    plan.waiting.push(Waiting { job: r.req.id, reason: PendingReason::Resources, expected_start: Some(shadow) });
                    plan.stats.reservations += 1;
                }
                Backfill::Easy => {
                    if commit {
                        plan.carry.committed = Some(r.req.id);
                    }
                    let this_pass = started_this_pass(plan, ready, order, pos, now, false);
                    match reservation(snap, now, cfg, view, r, &overrides, &this_pass) {
                        Some((shadow, proj, reserved)) => {
                            let mut long = view.clone();
                            for &n in &reserved {
                                long.clamp_to(n, &proj);
                            }
                            plan.waiting.push(Waiting { job: r.req.id, reason: PendingReason::Resources, expected_start: Some(shadow) });
                            plan.stats.reservations += 1;
                            easy = Some(Easy { shadow, proj, reserved, long });
                        }
                        None => {
                            // Not even once every running job has ended (what it needs is held
                            // with no end: a suspended job's GPUs, a node out of service): it
                            // reserves nothing, and the jobs behind it are tried as if it were
                            // not there.
                            plan.waiting.push(Waiting { job: r.req.id, reason: PendingReason::Resources, expected_start: None });
                            blocked = None;
                        }
                    }
                }
                Backfill::Conservative => unreachable!("conservative backfill has its own walk"),
            }
            continue;
        }
        // Past the first blocked job: backfill, by mode.
        let limit = r.limit.max(1);
        let started: Option<(Vec<Alloc>, Option<Time>)> = match cfg.backfill {
            Backfill::None => None,
            Backfill::Rls => None, // RLS scans in FCFS order below
            Backfill::Conservative => unreachable!(),
            Backfill::Easy => match easy.as_mut() {
                None => None,
                Some(e) => {
                    // A job that ends by the shadow time may use anything free now; one that
                    // outlives it only what the reservation leaves. With --time-min, a job that
                    // fits only short is started with its limit cut to end by the shadow time.
                    let short = |e: &mut Easy, view: &mut View, replicas: &mut Placer| {
                        let a = try_place(snap, view, r, replicas);
                        if let Some(a) = &a {
                            for al in a {
                                if e.reserved.contains(&al.node) {
                                    e.long.reset_node(al.node, view);
                                    e.long.clamp_to(al.node, &e.proj);
                                } else {
                                    e.long.hold(al);
                                }
                            }
                        }
                        a
                    };
                    if now + limit <= e.shadow {
                        short(e, view, replicas).map(|a| (a, None))
                    } else {
                        let a = try_place(snap, &mut e.long, r, replicas);
                        if let Some(a) = &a {
                            for al in a {
                                view.hold(al);
                                if e.reserved.contains(&al.node) {
                                    e.proj.hold(al);
                                }
                            }
                        }
                        let cut = (e.shadow - now) / 60 * 60;
                        match (a, r.req.time_min) {
                            (Some(a), _) => Some((a, None)),
                            // With predictions too: the shadow time is then predicted, but the
                            // cut stays within what the user allowed (--time-min to --time).
                            (None, Some(min)) if min >= 1 && cut >= min => short(e, view, replicas).map(|a| (a, Some(cut))),
                            (None, _) => None,
                        }
                    }
                }
            },
        };
        match started {
            Some((allocs, time_limit)) => {
                limits.add(r);
                plan.starts.push(Start { job: r.req.id, allocs, backfilled: true, time_limit, het: r.het_nodes() });
                plan.stats.backfilled += 1;
            }
            None => {
                if cfg.backfill != Backfill::Rls {
                    plan.waiting.push(Waiting { job: r.req.id, reason: PendingReason::Priority, expected_start: None });
                }
            }
        }
    }

    let easy_top = match (easy, blocked) {
        (Some(e), Some(b)) => Some((b, e.shadow, e.reserved)),
        _ => None,
    };
    // RLS: scan everything behind the committed job in FCFS order, strictly before the shadow.
    if let (Some(shadow), Some(b)) = (rls_shadow, blocked) {
        let cut = plan.carry.commit_seq.unwrap_or(u64::MAX);
        let mut rest: Vec<(usize, usize)> = order[b + 1..].iter().copied().enumerate().collect();
        rest.sort_by_key(|&(rank, i)| {
            let seq = snap.pending[ready[i].idx].seq;
            let later = seq >= cut;
            (ready[i].req.submit_time, later, if later { seq } else { rank as u64 }, seq)
        });
        let rest: Vec<usize> = rest.into_iter().map(|(_, i)| i).collect();
        for i in rest {
            let r = &ready[i];
            let fits_time = now.saturating_add(r.limit) < shadow && limits.blocks(r).is_none();
            let started = if fits_time { try_place(snap, view, r, replicas) } else { None };
            match started {
                Some(allocs) => {
                    limits.add(r);
                    plan.starts.push(Start { job: r.req.id, allocs, backfilled: true, time_limit: None, het: r.het_nodes() });
                    plan.stats.backfilled += 1;
                }
                None => plan.waiting.push(Waiting { job: r.req.id, reason: PendingReason::Priority, expected_start: None }),
            }
        }
    }
    easy_top
}

/// Jobs started earlier in this pass (all before position `pos` in `order`), with their
/// expected ends, for the reservation's projection.
fn started_this_pass<'p>(
    plan: &'p Plan,
    ready: &[Resolved],
    order: &[usize],
    pos: usize,
    now: Time,
    raw: bool,
) -> Vec<(Time, &'p [Alloc])> {
    let limits: FxHashMap<JobId, Time> = order[..pos].iter().map(|&i| (ready[i].req.id, ready[i].limit)).collect();
    plan.starts
        .iter()
        .map(|s| {
            let l = limits.get(&s.job).copied().unwrap_or(1);
            (if raw { now + l } else { now + l.max(1) }, s.allocs.as_slice())
        })
        .collect()
}

/// Finds when `r` could start if running work ended when planned (at its requested time, or at
/// its predicted one with `cfg.predict`): walks completions in order of planned end, giving back
/// their resources on a copy of the view, until the gang can be placed. Returns the shadow time,
/// the projected view with the reservation taken out, and the reserved nodes. Under
/// [`Backfill::Rls`] ends are start + limit even when past (RLScheduler's rule).
pub(crate) fn reservation<'n>(
    snap: &Snapshot,
    now: Time,
    cfg: &Config,
    view: &View<'n>,
    r: &Resolved,
    overrides: &FxHashMap<JobId, Time>,
    this_pass: &[(Time, &[Alloc])],
) -> Option<(Time, View<'n>, FxHashSet<u32>)> {
    let raw_ends = cfg.backfill == Backfill::Rls;
    let n_running = snap.running.len();
    let mut ends: Vec<(Time, usize)> = snap
        .running
        .iter()
        .enumerate()
        .map(|(k, run)| {
            let end = match overrides.get(&run.req.id) {
                Some(&t) => t,
                None if raw_ends => run.start + run.req.time_limit,
                None => snap.planned_end(run, now, cfg),
            };
            (end, k)
        })
        .chain(this_pass.iter().enumerate().map(|(k, (end, _))| (*end, n_running + k)))
        .collect();
    ends.sort_by_key(|&(t, k)| (t, k));
    let mut proj = view.clone();
    let mut no_replicas = Placer::tight();
    let mut idx = 0;
    while idx < ends.len() {
        let t = ends[idx].0;
        while idx < ends.len() && ends[idx].0 == t {
            let k = ends[idx].1;
            let allocs: &[Alloc] = if k < n_running { &snap.running[k].allocs } else { this_pass[k - n_running].1 };
            for a in allocs {
                proj.give(a);
            }
            idx += 1;
        }
        if !proj.maybe(&r.demand, r.nodes) {
            continue;
        }
        let mut trial = proj.clone();
        if let Some(allocs) = try_place(snap, &mut trial, r, &mut no_replicas) {
            let reserved = allocs.iter().map(|a| a.node).collect();
            return Some((t, trial, reserved));
        }
    }
    None
}

/// Each pending job's priority, factor by factor (what `tandem priority` / `sprio` shows), in
/// priority order, as a pass with `cfg` computes it (with the same predictions). For policies
/// other than multifactor the breakdown is all zeros.
pub fn priority_breakdown(snap: &Snapshot, now: Time, cfg: &Config) -> Vec<(JobId, Breakdown)> {
    let facts = Facts::new(snap.nodes, snap.config, false);
    let (_, total_shares) = accounts(snap);
    let ctx = priority_context(snap, &facts, now, total_shares);
    let mut out: Vec<(JobId, Breakdown)> = snap
        .pending
        .iter()
        .map(|p| {
            let nodes = facts.resolve(0, &p.req, snap.config).map_or(1, |r| r.nodes);
            let est = if cfg.predicting() { snap.history.predict(cfg.predict, &p.req) } else { p.req.time_limit };
            let b = match &cfg.policy {
                Policy::Multifactor(w) => ctx.breakdown(w, &p.req, nodes, est),
                Policy::Fcfs | Policy::Sjf | Policy::F1 => Breakdown::default(),
            };
            (p.req.id, b)
        })
        .collect();
    out.sort_by(|a, b| b.1.total.total_cmp(&a.1.total).then(a.0.cmp(&b.0)));
    out
}

/// Checks a request at submission: its partition and QOS exist, its time limit is within the
/// partition's, and some set of nodes could ever hold it (ignoring what runs now; skipped
/// while no node has registered). The error says what to fix, in Slurm's words.
pub fn check_request(nodes: &[Node], config: &ClusterConfig, req: &JobRequest) -> Result<(), Rejected> {
    let reject = |reason, message: String| Err(Rejected { job: req.id, reason, message });
    let Some(part) = config.partition(req.partition.as_deref()) else {
        return reject(PendingReason::BadConstraints, format!("invalid partition specified: {}", req.partition.as_deref().unwrap_or("")));
    };
    if config.qos(req.qos.as_deref()).is_none() {
        return reject(PendingReason::BadConstraints, format!("invalid qos specification: {}", req.qos.as_deref().unwrap_or("")));
    }
    if req.time_limit > part.max_time {
        return reject(
            PendingReason::PartitionTimeLimit,
            format!("requested time limit is invalid (exceeds the {} partition's limit of {} s)", part.name, part.max_time),
        );
    }
    if nodes.is_empty() {
        return Ok(());
    }
    let facts = Facts::new(nodes, config, true);
    let r = facts.resolve(0, req, config).map_err(|(reason, message)| Rejected { job: req.id, reason, message })?;
    if !EverFits::default().check(nodes, &r) {
        let gpus = if r.demand.gpus > 0 { format!(", {} GPUs", r.demand.gpus) } else { String::new() };
        return reject(
            PendingReason::BadConstraints,
            format!(
                "requested node configuration is not available: {} node(s) with {} CPUs, {} MiB memory{gpus} each",
                r.nodes,
                r.demand.cpus,
                r.demand.memory >> 20
            ),
        );
    }
    Ok(())
}
