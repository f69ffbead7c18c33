//! The discrete-event simulator: replays a [`trace::Workload`] through [`sched::schedule`] (the
//! very function the controller calls) in virtual time, and measures the result.
//!
//! **Invariant:** pure and synchronous. Virtual time only; the one window on real time is the
//! `clock` callback the caller passes to time each scheduling pass (the binary gives a
//! monotonic clock, tests may give a counter). No IO: traces are loaded by the caller.
//!
//! Two event orders:
//! - [`EventOrder::Batched`] (production): all arrivals and completions at one instant, then one
//!   pass.
//! - [`EventOrder::RlScheduler`]: one event at a time, an arrival before a completion at the same
//!   instant, a pass after each, and running jobs kept in a list re-sorted stably as RLScheduler's
//!   simulator does, so its published numbers reproduce exactly.

mod inflation;
mod metrics;
mod plot;

pub use inflation::{CurvePoint, Inflation, arrivals, inflate, mean as mean_inflation, trace_profile};
pub use metrics::{Metrics, summarize};
pub use plot::{curve_svg, curve_table, svg};

use model::{DepStatus, JobId, Node, Time};
use sched::{Carry, Config, FairShare, History, NodeUsage, Pending, Plan, Running, Snapshot};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use trace::Workload;

/// How events are grouped into scheduling passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventOrder {
    /// Every event at one instant, then one pass (what the controller does).
    Batched,
    /// One event per pass, in RLScheduler's order.
    RlScheduler,
}

/// Simulation settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    /// The scheduler's settings.
    pub sched: Config,
    /// Event grouping.
    pub order: EventOrder,
    /// Seed passed to every pass.
    pub seed: u64,
    /// Fair-share usage half-life, seconds (Slurm's PriorityDecayHalfLife, default 7 days).
    pub half_life: Time,
    /// Stop once every job has started (RLScheduler's end of simulation) instead of running
    /// until every job has finished.
    pub stop_at_last_start: bool,
    /// Record queue length and utilisation over time (for `--plot`).
    pub record_series: bool,
    /// Placement mode (as the FGD simulator of the Alibaba trace): jobs never end, the run
    /// stops once every job has arrived, and the GPU figures describe the final packing.
    pub no_departures: bool,
    /// Keep every pass's time and plan in [`Outcome::plans`] (for tests).
    pub record_plans: bool,
    /// Advance reservations the scheduler honours, as the controller's (`scontrol create
    /// reservation`); their starts and ends are events.
    #[serde(default)]
    pub reservations: Vec<model::Reservation>,
}

impl SimConfig {
    /// Production-like settings around a scheduler config.
    pub fn new(sched: Config, seed: u64) -> SimConfig {
        SimConfig {
            sched,
            order: EventOrder::Batched,
            seed,
            half_life: 7 * 86400,
            stop_at_last_start: false,
            record_series: false,
            no_departures: false,
            record_plans: false,
            reservations: Vec::new(),
        }
    }
}

/// What happened to one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobOutcome {
    /// Job.
    pub id: JobId,
    /// Submitted.
    pub submit: Time,
    /// Started.
    pub start: Time,
    /// Actual run time.
    pub run: Time,
    /// Capacity units held.
    pub units: u64,
    /// Started by backfill.
    pub backfilled: bool,
}

/// One point of the time series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Virtual time.
    pub t: Time,
    /// Pending jobs.
    pub queue: usize,
    /// Fraction of capacity in use.
    pub util: f64,
}

/// The raw result of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Started jobs, in start order.
    pub jobs: Vec<JobOutcome>,
    /// Jobs the scheduler rejected as impossible, with the message.
    pub rejected: Vec<(JobId, String)>,
    /// First submission in the run.
    pub first_submit: Time,
    /// Last start.
    pub last_start: Time,
    /// Last completion (or the last start when stopping there).
    pub end: Time,
    /// Wall time of each pass, nanoseconds (from the caller's clock).
    pub pass_ns: Vec<u64>,
    /// Time series (when recorded).
    pub series: Vec<Sample>,
    /// Time-integral of free-but-stranded GPU capacity while GPU jobs waited (milli-GPU·s).
    pub stranded_gpu_milli_s: f64,
    /// Whether this was a placement-mode run (no departures).
    pub no_departures: bool,
    /// Capacity units in use at the end of the run.
    pub final_busy_units: u64,
    /// Jobs still pending at the end of the run.
    pub pending_at_end: usize,
    /// FGD's expected fragmented milli-GPUs at the end, against the scheduler's profile (the
    /// trace's distribution of requests, unless configured).
    pub final_fragmented_milli: u64,
    /// Every pass's time and plan, with [`SimConfig::record_plans`].
    pub plans: Vec<(Time, Plan)>,
}

/// What the simulator knows about a running job beyond what the scheduler sees.
#[derive(Clone, Copy)]
struct Meta {
    end: Time,
    req_end: Time,
    units: u64,
    job: usize,
}

/// The simulator's state: the same data the controller keeps, in memory.
struct State<'w> {
    w: &'w Workload,
    nodes: &'w [Node],
    usage: Vec<NodeUsage>,
    pending: Vec<Pending>,
    /// Running jobs as the scheduler sees them, and `meta` parallel to it.
    running: Vec<Running>,
    meta: Vec<Meta>,
    carry: Carry,
    scheduler: sched::Scheduler<'w>,
    fairshare: FairShare,
    /// Finished jobs' actual run times, recorded at their completion events only.
    history: History,
    reservations: Vec<model::Reservation>,
    last_decay: Time,
    busy_units: u64,
    base: usize,
    next_seq: u64,
    out: Outcome,
}

impl<'w> State<'w> {
    fn arrive(&mut self, j: usize) {
        debug_assert_eq!(j, self.base + self.next_seq as usize, "arrivals come in trace order");
        let req = self.w.jobs[j].req.clone();
        self.pending.push(Pending { req, seq: self.next_seq, dep: DepStatus::Satisfied });
        self.next_seq += 1;
    }

    /// Stable sort of the running list (and its metadata) by a key.
    fn sort_running(&mut self, key: impl Fn(&Meta) -> Time) {
        let mut idx: Vec<usize> = (0..self.meta.len()).collect();
        idx.sort_by_key(|&i| key(&self.meta[i]));
        if idx.iter().enumerate().all(|(a, &b)| a == b) {
            return;
        }
        let mut running: Vec<Option<Running>> = std::mem::take(&mut self.running).into_iter().map(Some).collect();
        self.running = idx.iter().map(|&i| running[i].take().expect("permutation")).collect();
        self.meta = idx.iter().map(|&i| self.meta[i]).collect();
    }

    fn finish(&mut self, k: usize) {
        let r = self.running.remove(k);
        let m = self.meta.remove(k);
        for a in &r.allocs {
            self.usage[a.node as usize].release(a);
        }
        self.busy_units -= m.units;
        let job = &self.w.jobs[m.job];
        // What it ran: its run time, or less where its limit was cut at the start.
        let ran = m.end - r.start;
        self.fairshare.accrue(&job.req.account, &job.req.user, (job.units as f64) * ran as f64);
        // The completion event is the only way a run time reaches the scheduler.
        self.history.record(&job.req, ran);
    }

    fn pass(&mut self, now: Time, cfg: &SimConfig, clock: &mut dyn FnMut() -> u64) -> Plan {
        if self.pending.is_empty() {
            // Nothing waits: a pass would decide nothing (and carry nothing forward).
            return Plan { carry: self.carry.clone(), ..Plan::default() };
        }
        self.fairshare.decay(now - self.last_decay, cfg.half_life);
        self.last_decay = now;
        let snap = Snapshot {
            nodes: self.nodes,
            usage: &self.usage,
            pending: &self.pending,
            running: &self.running,
            suspended: &[],
            config: &DEFAULT_CONFIG,
            fairshare: &self.fairshare,
            carry: &self.carry,
            history: &self.history,
            reservations: &self.reservations,
        };
        let t0 = clock();
        let plan = self.scheduler.pass(&snap, now, cfg.seed);
        let t1 = clock();
        self.out.pass_ns.push(t1.saturating_sub(t0));
        if cfg.record_plans {
            self.out.plans.push((now, plan.clone()));
        }
        plan
    }

    /// Applies a plan; returns the (end, id) of each job started. With `rls_sort`, running jobs
    /// are re-sorted by requested end (stably) when a new reservation is made, between the
    /// in-order starts and the backfilled ones, as RLScheduler's simulator does.
    fn apply(&mut self, plan: Plan, now: Time, rls_sort: bool) -> Vec<(Time, u64)> {
        let new_reservation = rls_sort && plan.carry.committed.is_some() && plan.carry.committed != self.carry.committed;
        let mut remove: Vec<usize> = Vec::new();
        for r in &plan.rejected {
            if let Some(p) = self.pending.iter().position(|p| p.req.id == r.job) {
                remove.push(p);
                self.out.rejected.push((r.job, r.message.clone()));
            }
        }
        let mut started = Vec::with_capacity(plan.starts.len());
        let mut sorted = false;
        let pos: rustc_hash::FxHashMap<JobId, usize> =
            if plan.starts.is_empty() { Default::default() } else { self.pending.iter().enumerate().map(|(i, p)| (p.req.id, i)).collect() };
        for s in plan.starts {
            if new_reservation && s.backfilled && !sorted {
                self.sort_running(|m| m.req_end);
                sorted = true;
            }
            let p = *pos.get(&s.job).expect("plan starts a pending job");
            remove.push(p);
            let pending = &self.pending[p];
            let j = self.base + pending.seq as usize;
            let job = &self.w.jobs[j];
            for a in &s.allocs {
                self.usage[a.node as usize].apply(&self.nodes[a.node as usize], a);
            }
            self.busy_units += job.units;
            // A job in an advance reservation ends with it: its limit, cut at the start, ends it
            // there. (A --time-min cut is left as the trace ran it: traces carry actual run
            // times, which their own limits allowed.)
            let mut req = pending.req.clone();
            let run = match s.time_limit {
                Some(cut) if req.reservation.is_some() => {
                    req.time_limit = cut;
                    job.runtime.min(cut)
                }
                _ => job.runtime,
            };
            self.out.jobs.push(JobOutcome {
                id: s.job,
                submit: job.req.submit_time,
                start: now,
                run,
                units: job.units,
                backfilled: s.backfilled,
            });
            self.out.last_start = now;
            let end = now + run;
            started.push((end, s.job.0));
            self.meta.push(Meta { end, req_end: now + req.time_limit, units: job.units, job: j });
            self.running.push(Running { req, start: now, allocs: s.allocs });
        }
        if new_reservation && !sorted {
            self.sort_running(|m| m.req_end);
        }
        if !remove.is_empty() {
            remove.sort_unstable();
            let mut k = 0;
            let mut i = 0;
            self.pending.retain(|_| {
                let drop = k < remove.len() && remove[k] == i;
                if drop {
                    k += 1;
                }
                i += 1;
                !drop
            });
        }
        self.carry = plan.carry;
        started
    }
}

static DEFAULT_CONFIG: std::sync::LazyLock<model::ClusterConfig> = std::sync::LazyLock::new(model::ClusterConfig::default);

/// Runs jobs `range` of the workload on an empty cluster.
pub fn run(w: &Workload, range: std::ops::Range<usize>, cfg: &SimConfig, clock: &mut dyn FnMut() -> u64) -> Outcome {
    let mut st = State {
        w,
        nodes: &w.nodes,
        usage: w.nodes.iter().map(NodeUsage::for_node).collect(),
        pending: Vec::new(),
        running: Vec::new(),
        meta: Vec::new(),
        base: range.start,
        carry: Carry::default(),
        scheduler: sched::Scheduler::new(sched_config(w, cfg), &w.nodes),
        fairshare: FairShare::default(),
        history: History::default(),
        reservations: cfg.reservations.clone(),
        last_decay: 0,
        busy_units: 0,
        next_seq: 0,
        out: Outcome::default(),
    };
    if range.is_empty() {
        return st.out;
    }
    let first = w.jobs[range.start].req.submit_time;
    st.out.first_submit = first;
    st.last_decay = first;
    match cfg.order {
        EventOrder::RlScheduler => run_rls(&mut st, range, cfg, clock),
        EventOrder::Batched => run_batched(&mut st, range, cfg, clock),
    }
    st.out.no_departures = cfg.no_departures;
    st.out.final_busy_units = st.busy_units;
    st.out.pending_at_end = st.pending.len();
    if w.gpu {
        let profile = &st.scheduler.config().profile;
        st.out.final_fragmented_milli = sched::cluster_fragmentation(st.nodes, &st.usage, profile).fragmented_milli.round() as u64;
    }
    st.out
}

/// The scheduler's settings for a run: on a GPU workload without a configured profile, the
/// trace's own distribution of requests is the target workload (FGD assumes it known).
fn sched_config(w: &Workload, cfg: &SimConfig) -> Config {
    let mut c = cfg.sched.clone();
    if w.gpu && c.profile.kinds.is_empty() {
        c.profile = trace_profile(w);
    }
    c
}

fn sample(st: &mut State, now: Time, cfg: &SimConfig) {
    if cfg.record_series {
        let util = st.busy_units as f64 / st.w.capacity.max(1) as f64;
        st.out.series.push(Sample { t: now, queue: st.pending.len(), util });
    }
}

/// RLScheduler's event order: one event per pass.
fn run_rls(st: &mut State, range: std::ops::Range<usize>, cfg: &SimConfig, clock: &mut dyn FnMut() -> u64) {
    let mut next = range.start;
    let mut now = st.w.jobs[next].req.submit_time;
    st.arrive(next);
    next += 1;
    loop {
        let plan = st.pass(now, cfg, clock);
        st.apply(plan, now, cfg.sched.backfill == sched::Backfill::Rls);
        sample(st, now, cfg);
        if st.pending.is_empty() && next >= range.end {
            break;
        }
        // Next event: an arrival no later than the next completion goes first.
        st.sort_running(|m| m.end);
        let arrival = next < range.end && st.meta.first().is_none_or(|m| st.w.jobs[next].req.submit_time <= m.end);
        if arrival {
            now = now.max(st.w.jobs[next].req.submit_time);
            st.arrive(next);
            next += 1;
        } else {
            now = now.max(st.meta[0].end);
            st.finish(0);
        }
    }
    st.out.end = now;
    if !cfg.stop_at_last_start {
        // Drain remaining completions for the makespan.
        st.out.end = st.meta.iter().map(|m| m.end).max().unwrap_or(now).max(now);
    }
}

/// Production order: every event at an instant, then one pass.
fn run_batched(st: &mut State, range: std::ops::Range<usize>, cfg: &SimConfig, clock: &mut dyn FnMut() -> u64) {
    let mut next = range.start;
    let mut ends: BinaryHeap<Reverse<(Time, u64)>> = BinaryHeap::new();
    let mut now = st.w.jobs[next].req.submit_time;
    let (mut idle_wakes, mut waiting_before) = (0u32, usize::MAX);
    loop {
        while next < range.end && st.w.jobs[next].req.submit_time <= now {
            st.arrive(next);
            next += 1;
        }
        while let Some(Reverse((t, id))) = ends.peek().copied() {
            if t > now {
                break;
            }
            ends.pop();
            let k = st.running.iter().position(|r| r.req.id.0 == id).expect("completion of a running job");
            st.finish(k);
        }
        let plan = st.pass(now, cfg, clock);
        for e in st.apply(plan, now, false) {
            if !cfg.no_departures {
                ends.push(Reverse(e));
            }
        }
        stranded(st, now, next, &range, &ends);
        sample(st, now, cfg);
        let all_started = next >= range.end && st.pending.is_empty();
        if all_started && (cfg.stop_at_last_start || ends.is_empty()) {
            break;
        }
        // Waking only for reservations' starts and ends while nothing starts: after a few such
        // wakes, pending jobs that can never start (e.g. all nodes down) end the run.
        let plain = next_event(st, next, &range, &ends);
        idle_wakes = if st.pending.len() < waiting_before || plain.is_some() { 0 } else { idle_wakes + 1 };
        waiting_before = st.pending.len();
        now = match next_resv_event(st, now).into_iter().chain(plain).min() {
            Some(t) if idle_wakes < 64 => t,
            _ => break, // pending jobs that can never start (e.g. all nodes down)
        };
    }
    st.out.end = if cfg.stop_at_last_start { st.out.last_start } else { now.max(st.out.last_start) };
}

/// The time of the next arrival or completion, whichever comes first.
fn next_event(st: &State, next: usize, range: &std::ops::Range<usize>, ends: &BinaryHeap<Reverse<(Time, u64)>>) -> Option<Time> {
    let t_arr = (next < range.end).then(|| st.w.jobs[next].req.submit_time);
    let t_end = ends.peek().map(|Reverse((t, _))| *t);
    [t_arr, t_end].into_iter().flatten().min()
}

/// While jobs wait, the next start or end of an advance reservation after `now` (a pass then
/// may start what it let in or kept out).
fn next_resv_event(st: &State, now: Time) -> Option<Time> {
    if st.pending.is_empty() {
        return None;
    }
    st.reservations.iter().filter_map(|r| r.window(now)).map(|(s, e)| if s > now { s } else { e }).min()
}

/// Accumulates free GPU capacity left idle while GPU jobs wait, until the next event.
fn stranded(st: &mut State, now: Time, next: usize, range: &std::ops::Range<usize>, ends: &BinaryHeap<Reverse<(Time, u64)>>) {
    if !st.w.gpu || !st.pending.iter().any(|p| p.req.shape.gpus.is_some()) {
        return;
    }
    let Some(until) = next_event(st, next, range, ends) else { return };
    let free: u64 =
        st.usage.iter().zip(st.nodes).map(|(u, n)| n.gpus as u64 * 1000 - u.gpu_milli.iter().map(|&m| m as u64).sum::<u64>()).sum();
    st.out.stranded_gpu_milli_s += free as f64 * (until - now) as f64;
}

/// The start indices of RLScheduler's ten test windows (gym seed 1; BASELINES.md §1).
pub const RLSCHEDULER_STARTS: [usize; 10] = [1981, 2756, 4299, 8850, 3316, 2714, 5228, 7762, 4022, 7085];
/// Jobs per RLScheduler window.
pub const RLSCHEDULER_LEN: usize = 1024;

/// Settings for RLScheduler's windows: empty cluster per window, end at the last start, and for
/// `none`/`rls` backfill its one-event-per-pass order and committed head job.
pub fn rlscheduler_config(mut sched: Config, seed: u64) -> SimConfig {
    let quirks = matches!(sched.backfill, sched::Backfill::None | sched::Backfill::Rls);
    sched.commit_head = quirks;
    SimConfig {
        sched,
        order: if quirks { EventOrder::RlScheduler } else { EventOrder::Batched },
        seed,
        half_life: 7 * 86400,
        stop_at_last_start: true,
        record_series: false,
        no_departures: false,
        record_plans: false,
        reservations: Vec::new(),
    }
}

/// Runs the ten RLScheduler windows; returns each window's metrics, in window order.
pub fn rlscheduler_windows(w: &Workload, cfg: &SimConfig, clock: &mut dyn FnMut() -> u64) -> Result<Vec<Metrics>, String> {
    let need = RLSCHEDULER_STARTS.iter().max().copied().unwrap_or(0) + RLSCHEDULER_LEN;
    if w.jobs.len() < need {
        return Err(format!("--windows rlscheduler needs at least {need} jobs; {} has {}", w.name, w.jobs.len()));
    }
    Ok(windows(w, &RLSCHEDULER_STARTS, RLSCHEDULER_LEN, cfg, clock))
}

/// Runs windows of `len` jobs from each of `starts`, each on an empty cluster with `cfg`;
/// returns each window's metrics, in the order of `starts`.
pub fn windows(w: &Workload, starts: &[usize], len: usize, cfg: &SimConfig, clock: &mut dyn FnMut() -> u64) -> Vec<Metrics> {
    starts
        .iter()
        .map(|&s| {
            let o = run(w, s..(s + len).min(w.jobs.len()), cfg, clock);
            summarize(&o, w.capacity, w.gpu)
        })
        .collect()
}

/// Which of a trace's segments to run (issue 15's split: the default policy was chosen on the
/// first half of every trace's segments and is reported on the second).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Half {
    /// Every segment.
    All,
    /// Segments `0..n/2` (those the default policy was tuned on).
    Tune,
    /// Segments `n/2..n` (held out).
    Report,
}

/// Start offsets of `n` segments of `len` jobs spread evenly over a trace of `jobs` jobs, from
/// the first job to the last full segment (they overlap where `n * len > jobs`), or the part of
/// them `half` names. Errors when the trace holds no full segment or `n` is 0.
pub fn segment_starts(jobs: usize, n: usize, len: usize, half: Half) -> Result<Vec<usize>, String> {
    if n == 0 || len == 0 {
        return Err("segments need a count and a length of at least 1".into());
    }
    if jobs < len {
        return Err(format!("a segment of {len} jobs needs at least {len} jobs; the trace has {jobs}"));
    }
    let last = jobs - len;
    let all: Vec<usize> = (0..n).map(|i| if n == 1 { 0 } else { (i * last + (n - 1) / 2) / (n - 1) }).collect();
    Ok(match half {
        Half::All => all,
        Half::Tune => all[..n / 2].to_vec(),
        Half::Report => all[n / 2..].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heterogeneous_job_starts_whole_in_virtual_time_and_backfill_goes_around_it() {
        use model::{HetPart, JobRequest, Node, Shape};
        let nodes: Vec<Node> = (0..3).map(|i| Node::new(format!("n{i}"), 8, 1 << 34, 0)).collect();
        let job = |id: u64, submit: Time, limit: Time, runtime: Time, shape: Shape, het: Vec<Shape>| {
            let mut req = JobRequest::new(id, submit, limit, shape);
            req.het = het
                .into_iter()
                .map(|shape| HetPart { shape, partition: None, features: Vec::new(), nodelist: Vec::new(), exclude: Vec::new() })
                .collect();
            trace::TraceJob { req, runtime, units: 8 }
        };
        let w = Workload {
            name: "het".into(),
            nodes,
            jobs: vec![
                // One node held until 50: the heterogeneous job's three components cannot all fit.
                job(1, 0, 50, 50, Shape::whole_nodes(1), Vec::new()),
                job(2, 1, 20, 10, Shape::whole_nodes(1), vec![Shape::whole_nodes(2)]),
                // A short job ends before the reservation: backfilled at once; a long one waits.
                job(3, 2, 5, 5, Shape::whole_nodes(1), Vec::new()),
                job(4, 3, 500, 5, Shape::whole_nodes(1), Vec::new()),
            ],
            capacity: 24,
            gpu: false,
            skipped: 0,
        };
        let sched =
            Config { policy: sched::Policy::Fcfs, backfill: sched::Backfill::Easy, predict: sched::Predict::Limit, ..Config::default() };
        let cfg = SimConfig::new(sched, 1);
        let out = run(&w, 0..w.jobs.len(), &cfg, &mut || 0);
        let start = |id: u64| out.jobs.iter().find(|j| j.id.0 == id).map(|j| j.start);
        assert_eq!(start(2), Some(50), "{out:?}");
        assert_eq!(start(3), Some(2));
        assert_eq!(start(4), Some(60), "the long job waits for the heterogeneous job it would delay");
    }

    #[test]
    fn segments_spread_from_the_first_job_to_the_last_full_segment() {
        assert_eq!(segment_starts(10_000, 5, 1024, Half::All).unwrap(), vec![0, 2244, 4488, 6732, 8976]);
        assert_eq!(segment_starts(10_000, 5, 1024, Half::Tune).unwrap(), vec![0, 2244]);
        assert_eq!(segment_starts(10_000, 5, 1024, Half::Report).unwrap(), vec![4488, 6732, 8976]);
        assert_eq!(segment_starts(1024, 3, 1024, Half::All).unwrap(), vec![0, 0, 0]);
        assert_eq!(segment_starts(5000, 1, 1024, Half::All).unwrap(), vec![0]);
        assert!(segment_starts(1000, 3, 1024, Half::All).is_err());
        assert!(segment_starts(5000, 0, 1024, Half::All).is_err());
    }
}
