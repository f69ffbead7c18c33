//! Metrics of a run, with the definitions the published baselines use.

use serde::{Deserialize, Serialize};

use crate::Outcome;

/// Bounded-slowdown threshold τ, seconds.
pub const TAU: f64 = 10.0;

/// Summary figures of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Jobs started.
    pub jobs: usize,
    /// Jobs rejected as impossible.
    pub rejected: usize,
    /// Mean wait, seconds.
    pub avg_wait_s: f64,
    /// Median wait.
    pub p50_wait_s: f64,
    /// 95th percentile wait.
    pub p95_wait_s: f64,
    /// 99th percentile wait.
    pub p99_wait_s: f64,
    /// Mean bounded slowdown: max(1, (wait + run) / max(run, τ)), τ = 10 s.
    pub avg_bounded_slowdown: f64,
    /// RLScheduler's utilisation: Σ(run × units) / ((last start − first submit) × capacity).
    pub utilization: f64,
    /// Busy time ÷ makespan: Σ(run × units) / ((last end − first submit) × capacity).
    pub utilization_makespan: f64,
    /// For GPU traces: GPU capacity allocated ÷ available, over the makespan; in placement mode
    /// (no departures), at the end, as the FGD simulator reports it.
    pub gpu_allocation_rate: Option<f64>,
    /// For GPU traces: share of GPU capacity left free while GPU jobs were waiting (stranded by
    /// fragmentation or by the jobs' shapes), time-averaged; in placement mode, FGD's expected
    /// fragmented GPU capacity at the end (against the trace's distribution of requests) as a
    /// share of the capacity.
    pub gpu_fragmentation: Option<f64>,
    /// Jobs still waiting when the run ended (placement mode: the jobs that did not fit).
    pub pending_at_end: usize,
    /// Jobs started by backfill.
    pub backfilled: usize,
    /// Scheduling passes.
    pub passes: usize,
    /// Mean wall time of a pass, microseconds.
    pub pass_us_mean: f64,
    /// 99th percentile wall time of a pass, microseconds.
    pub pass_us_p99: f64,
    /// Largest wall time of a pass, microseconds.
    pub pass_us_max: f64,
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p / 100.0 * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Computes the metrics of an outcome on a cluster of `capacity` units.
pub fn summarize(o: &Outcome, capacity: u64, gpu: bool) -> Metrics {
    let n = o.jobs.len();
    let mut waits: Vec<f64> = o.jobs.iter().map(|j| (j.start - j.submit) as f64).collect();
    let bsld: f64 = o
        .jobs
        .iter()
        .map(|j| {
            let run = j.run as f64;
            (((j.start - j.submit) as f64 + run) / run.max(TAU)).max(1.0)
        })
        .sum();
    let work: f64 = o.jobs.iter().map(|j| j.run as f64 * j.units as f64).sum();
    let cap = capacity.max(1) as f64;
    let span_start = (o.last_start - o.first_submit) as f64;
    let span_end = (o.end - o.first_submit) as f64;
    let avg_wait = if n == 0 { 0.0 } else { waits.iter().sum::<f64>() / n as f64 };
    waits.sort_by(f64::total_cmp);
    let mut pass: Vec<f64> = o.pass_ns.iter().map(|&x| x as f64 / 1000.0).collect();
    pass.sort_by(f64::total_cmp);
    let util_ms = if span_end > 0.0 { work / (span_end * cap) } else { 0.0 };
    Metrics {
        jobs: n,
        rejected: o.rejected.len(),
        avg_wait_s: avg_wait,
        p50_wait_s: pct(&waits, 50.0),
        p95_wait_s: pct(&waits, 95.0),
        p99_wait_s: pct(&waits, 99.0),
        avg_bounded_slowdown: if n == 0 { 0.0 } else { bsld / n as f64 },
        utilization: if span_start > 0.0 { work / (span_start * cap) } else { 0.0 },
        utilization_makespan: util_ms,
        gpu_allocation_rate: gpu.then(|| if o.no_departures { o.final_busy_units as f64 / cap } else { util_ms }),
        gpu_fragmentation: gpu.then(|| {
            if o.no_departures {
                o.final_fragmented_milli as f64 / cap
            } else if span_end > 0.0 {
                o.stranded_gpu_milli_s / (span_end * cap)
            } else {
                0.0
            }
        }),
        pending_at_end: o.pending_at_end,
        backfilled: o.jobs.iter().filter(|j| j.backfilled).count(),
        passes: o.pass_ns.len(),
        pass_us_mean: if pass.is_empty() { 0.0 } else { pass.iter().sum::<f64>() / pass.len() as f64 },
        pass_us_p99: pct(&pass, 99.0),
        pass_us_max: pass.last().copied().unwrap_or(0.0),
    }
}

impl Metrics {
    /// The mean of several runs' metrics, field by field (how `--windows` reports).
    pub fn mean(all: &[Metrics]) -> Metrics {
        let k = all.len().max(1) as f64;
        let avg = |f: &dyn Fn(&Metrics) -> f64| all.iter().map(f).sum::<f64>() / k;
        let avg_opt = |f: &dyn Fn(&Metrics) -> Option<f64>| {
            let v: Vec<f64> = all.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        Metrics {
            jobs: all.iter().map(|m| m.jobs).sum(),
            rejected: all.iter().map(|m| m.rejected).sum(),
            avg_wait_s: avg(&|m| m.avg_wait_s),
            p50_wait_s: avg(&|m| m.p50_wait_s),
            p95_wait_s: avg(&|m| m.p95_wait_s),
            p99_wait_s: avg(&|m| m.p99_wait_s),
            avg_bounded_slowdown: avg(&|m| m.avg_bounded_slowdown),
            utilization: avg(&|m| m.utilization),
            utilization_makespan: avg(&|m| m.utilization_makespan),
            gpu_allocation_rate: avg_opt(&|m| m.gpu_allocation_rate),
            gpu_fragmentation: avg_opt(&|m| m.gpu_fragmentation),
            pending_at_end: all.iter().map(|m| m.pending_at_end).sum(),
            backfilled: all.iter().map(|m| m.backfilled).sum(),
            passes: all.iter().map(|m| m.passes).sum(),
            pass_us_mean: avg(&|m| m.pass_us_mean),
            pass_us_p99: avg(&|m| m.pass_us_p99),
            pass_us_max: all.iter().map(|m| m.pass_us_max).fold(0.0, f64::max),
        }
    }
}
