//! Workload inflation, FGD's placement evaluation (Weng et al., USENIX ATC'23): pods arrive one
//! at a time and never leave, until their GPU requests add up to a multiple of the cluster's
//! GPU capacity; each is placed by a scheduling pass or fails (and is dropped). The result is the
//! GPU allocation ratio against the arrived workload, and the fragmentation as it grows.
//!
//! The arrivals, as FGD's simulator builds them: every pod of the trace, plus pods drawn from
//! the trace at random (with replacement) while the total GPU request stays within `ratio` ×
//! capacity (or, when the trace alone asks for more, trace pods removed at random until it
//! does not), in a seeded random order. The target workload that fragmentation is measured
//! against is the trace's own distribution of requests ([`trace_profile`]).

use model::{DepStatus, JobId, JobRequest};
use sched::{Backfill, Carry, Config, FairShare, GpuProfile, History, NodeUsage, Pending, Running, Snapshot};
use serde::{Deserialize, Serialize};
use trace::Workload;

/// The popular request kinds of a workload that make up 95 % of its jobs (FGD's typical pods).
pub fn trace_profile(w: &Workload) -> GpuProfile {
    GpuProfile::from_requests(w.jobs.iter().map(|j| &j.req), 0.95)
}

/// One point of the allocation curve.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct CurvePoint {
    /// GPU requests of the pods arrived so far ÷ GPU capacity (placed or not).
    pub arrived: f64,
    /// GPU capacity allocated ÷ GPU capacity.
    pub allocated: f64,
    /// FGD's expected fragmented GPU capacity ÷ GPU capacity.
    pub fragmented: f64,
    /// Pods arrived so far.
    pub pods: usize,
    /// Pods that failed so far.
    pub failed: usize,
}

/// The result of an inflation run.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Inflation {
    /// A point at each multiple of `step` of capacity arrived (10 %, 20 %, ...).
    pub curve: Vec<CurvePoint>,
    /// The state just before the first pod that failed (None if every pod was placed).
    pub first_failure: Option<CurvePoint>,
    /// The state at the end.
    pub end: CurvePoint,
    /// FGD's fragmentation at the end as a share of the free GPU capacity.
    pub fragmented_of_free: f64,
    /// Wall time of each pass, nanoseconds (from the caller's clock).
    pub pass_ns: Vec<u64>,
}

/// The arrivals: indices into the workload's jobs, in arrival order.
pub fn arrivals(w: &Workload, ratio: f64, seed: u64) -> Vec<usize> {
    let mut rng = sched::SplitMix(seed ^ 0x1F1A_7E00);
    let target = (ratio * w.capacity as f64).floor() as u64;
    let mut order: Vec<usize> = (0..w.jobs.len()).collect();
    let mut total: u64 = w.jobs.iter().map(|j| j.units).sum();
    if total > target {
        while total > target && !order.is_empty() {
            let k = rng.below(order.len() as u64) as usize;
            total -= w.jobs[order.remove(k)].units;
        }
    } else if !w.jobs.is_empty() {
        loop {
            let j = rng.below(w.jobs.len() as u64) as usize;
            if total + w.jobs[j].units > target {
                break;
            }
            total += w.jobs[j].units;
            order.push(j);
        }
    }
    for i in (1..order.len()).rev() {
        let k = rng.below(i as u64 + 1) as usize;
        order.swap(i, k);
    }
    order
}

/// Runs the evaluation: the arrivals of `ratio` × capacity under `cfg` (its backfill is
/// irrelevant: nothing ever ends, so a pod that does not fit now never will), points at every
/// `step` of capacity arrived. With an empty `cfg.profile`, the trace's is used.
pub fn inflate(w: &Workload, mut cfg: Config, ratio: f64, step: f64, seed: u64, clock: &mut dyn FnMut() -> u64) -> Inflation {
    if cfg.profile.kinds.is_empty() {
        cfg.profile = trace_profile(w);
    }
    cfg.backfill = Backfill::None;
    cfg.commit_head = false;
    let profile = cfg.profile.clone();
    let nodes = &w.nodes;
    let mut usage: Vec<NodeUsage> = nodes.iter().map(NodeUsage::for_node).collect();
    let mut running: Vec<Running> = Vec::new();
    let mut scheduler = sched::Scheduler::new(cfg, nodes);
    let config = model::ClusterConfig::default();
    let (fairshare, carry, history) = (FairShare::default(), Carry::default(), History::default());
    let cap = w.capacity.max(1) as f64;
    let mut out = Inflation::default();
    let (mut arrived, mut allocated, mut failed) = (0u64, 0u64, 0usize);
    let point = |usage: &[NodeUsage], arrived: u64, allocated: u64, pods: usize, failed: usize| CurvePoint {
        arrived: arrived as f64 / cap,
        allocated: allocated as f64 / cap,
        fragmented: sched::cluster_fragmentation(nodes, usage, &profile).fragmented_milli / cap,
        pods,
        failed,
    };
    let mut next_mark = 1usize;
    let order = arrivals(w, ratio, seed);
    for (n, &j) in order.iter().enumerate() {
        let job = &w.jobs[j];
        let mut req: JobRequest = job.req.clone();
        req.id = JobId(n as u64 + 1);
        req.submit_time = n as i64;
        let pending = [Pending { req, seq: n as u64, dep: DepStatus::Satisfied }];
        let snap = Snapshot {
            nodes,
            usage: &usage,
            pending: &pending,
            running: &running,
            suspended: &[],
            config: &config,
            fairshare: &fairshare,
            carry: &carry,
            history: &history,
            reservations: &[],
        };
        let t0 = clock();
        let plan = scheduler.pass(&snap, n as i64, seed);
        out.pass_ns.push(clock().saturating_sub(t0));
        match plan.starts.into_iter().next() {
            Some(s) => {
                for a in &s.allocs {
                    usage[a.node as usize].apply(&nodes[a.node as usize], a);
                }
                allocated += job.units;
                let [p] = pending;
                running.push(Running { req: p.req, start: n as i64, allocs: s.allocs });
            }
            None => {
                if failed == 0 {
                    out.first_failure = Some(point(&usage, arrived, allocated, n, 0));
                }
                failed += 1;
            }
        }
        arrived += job.units;
        while step > 0.0 && arrived as f64 >= next_mark as f64 * step * cap {
            out.curve.push(point(&usage, arrived, allocated, n + 1, failed));
            next_mark += 1;
        }
    }
    out.end = point(&usage, arrived, allocated, order.len(), failed);
    let free = sched::cluster_fragmentation(nodes, &usage, &profile);
    out.fragmented_of_free = if free.free_milli == 0 { 0.0 } else { free.fragmented_milli / free.free_milli as f64 };
    out
}

/// The mean of several runs' curves, point by point (as FGD reports its ten seeds).
pub fn mean(runs: &[Inflation]) -> Inflation {
    let k = runs.len().max(1) as f64;
    let avg = |ps: &[CurvePoint]| CurvePoint {
        arrived: ps.iter().map(|p| p.arrived).sum::<f64>() / k,
        allocated: ps.iter().map(|p| p.allocated).sum::<f64>() / k,
        fragmented: ps.iter().map(|p| p.fragmented).sum::<f64>() / k,
        pods: (ps.iter().map(|p| p.pods).sum::<usize>() as f64 / k).round() as usize,
        failed: (ps.iter().map(|p| p.failed).sum::<usize>() as f64 / k).round() as usize,
    };
    let n = runs.iter().map(|r| r.curve.len()).min().unwrap_or(0);
    let curve = (0..n).map(|i| avg(&runs.iter().map(|r| r.curve[i]).collect::<Vec<_>>())).collect();
    let firsts: Vec<CurvePoint> = runs.iter().filter_map(|r| r.first_failure).collect();
    Inflation {
        curve,
        first_failure: (firsts.len() == runs.len() && !runs.is_empty()).then(|| avg(&firsts)),
        end: avg(&runs.iter().map(|r| r.end).collect::<Vec<_>>()),
        fragmented_of_free: runs.iter().map(|r| r.fragmented_of_free).sum::<f64>() / k,
        pass_ns: runs.iter().flat_map(|r| r.pass_ns.iter().copied()).collect(),
    }
}
