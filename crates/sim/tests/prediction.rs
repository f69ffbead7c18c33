//! Run-time prediction from history (EASY++) through the simulator: history reaches the
//! scheduler only through completion events at or before `now`, so changing the actual run
//! times of jobs not yet finished at a pass leaves every plan up to that pass unchanged; and
//! predictions never end a job: kills come only from requested limits (and `--time-min`).

use model::{JobRequest, Node, Shape, Time};
use proptest::prelude::*;
use sched::{Backfill, Config, Policy, Predict};
use sim::{Outcome, SimConfig};
use trace::{TraceJob, Workload};

/// A small, busy cluster: 16 nodes of 4 CPUs, `jobs` jobs of 5 users, each user with
/// habitual run times, limits that overestimate them (a few jobs overrun their limit, a few have
/// `--time-min`).
fn workload(seed: u64, jobs: usize) -> Workload {
    let mut rng = sched::SplitMix(seed);
    let nodes: Vec<Node> = (0..16).map(|i| Node::new(format!("n{i:02}"), 4, 64 << 30, 0)).collect();
    let mut t = 0;
    let mut out = Vec::with_capacity(jobs);
    for id in 1..=jobs as u64 {
        t += rng.below(120) as Time;
        let user = rng.below(5);
        let k = 1 + rng.below(if user == 0 { 8 } else { 4 }) as u32;
        let habit = [300, 900, 3600, 60, 7200][user as usize];
        let runtime = (habit / 2 + rng.below(habit as u64) as Time).max(1);
        let limit = match rng.below(10) {
            0 => runtime / 2 + 1, // overruns its limit
            _ => runtime * (1 + rng.below(10) as Time),
        };
        let mut req = JobRequest::new(id, t, limit, Shape::whole_nodes(k));
        req.user = format!("u{user}");
        req.account = format!("g{}", user % 2);
        req.name = format!("app{}", rng.below(3));
        if rng.below(8) == 0 {
            req.time_min = Some(60);
        }
        out.push(TraceJob { req, runtime, units: 4 * k as u64 });
    }
    Workload { name: "synthetic".into(), nodes, jobs: out, capacity: 64, gpu: false, skipped: 0 }
}

fn sim_cfg(policy: &str, backfill: Backfill, predict: Predict) -> SimConfig {
    let mut c = SimConfig::new(Config { policy: Policy::parse(policy).unwrap(), backfill, predict, ..Config::default() }, 1);
    c.record_plans = true;
    c
}

fn run(w: &Workload, cfg: &SimConfig) -> Outcome {
    let mut clock = || 0u64;
    sim::run(w, 0..w.jobs.len(), cfg, &mut clock)
}

const POLICIES: [&str; 4] = ["fcfs", "sjf", "f1", "default"];
const PREDICTS: [Predict; 3] = [Predict::User, Predict::UserName, Predict::UserShape];

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Pick a pass; give every job not finished by then (running at it, or not yet started)
    /// another actual run time that still ends after it; every plan up to and including that
    /// pass is the same.
    #[test]
    fn run_times_of_current_and_future_jobs_change_no_plan(
        seed in 0u64..1_000_000,
        pick in 0.0f64..1.0,
        policy in 0usize..4,
        conservative in any::<bool>(),
        predict in 0usize..3,
    ) {
        let w = workload(seed, 160);
        let backfill = if conservative { Backfill::Conservative } else { Backfill::Easy };
        let cfg = sim_cfg(POLICIES[policy], backfill, PREDICTS[predict]);
        let a = run(&w, &cfg);
        prop_assume!(!a.plans.is_empty());
        let k = ((a.plans.len() - 1) as f64 * pick) as usize;
        let t = a.plans[k].0;
        let started: std::collections::HashMap<u64, Time> = a.jobs.iter().map(|j| (j.id.0, j.start)).collect();
        let mut rng = sched::SplitMix(seed ^ 0xABCD);
        let mut w2 = w.clone();
        let mut changed = 0;
        for j in &mut w2.jobs {
            let finished = started.get(&j.req.id.0).is_some_and(|&s| s + j.runtime <= t);
            if finished {
                continue;
            }
            let floor = started.get(&j.req.id.0).filter(|&&s| s <= t).map_or(1, |&s| t - s + 1);
            let new = floor + rng.below(2 * j.runtime as u64 + 1) as Time;
            changed += usize::from(new != j.runtime);
            j.runtime = new;
        }
        let b = run(&w2, &cfg);
        for (x, y) in a.plans.iter().zip(&b.plans).take(k + 1) {
            prop_assert_eq!(x, y, "plan at t={} changed ({} run times changed after t={})", x.0, changed, t);
        }
        prop_assert!(b.plans.len() > k, "the second run reached the pass at t={}", t);
    }
}

/// Predictions are used (the runs differ from planning with limits) and history matters: the
/// same trace with other run times for jobs that finished before a pass changes plans after it.
#[test]
fn predictions_come_from_finished_jobs_and_change_plans() {
    let w = workload(7, 400);
    let limit = run(&w, &sim_cfg("fcfs", Backfill::Easy, Predict::Limit));
    let easypp = run(&w, &sim_cfg("fcfs", Backfill::Easy, Predict::User));
    assert_ne!(limit.plans, easypp.plans, "EASY++ plans with predictions, not limits");
    let rls = sim_cfg("fcfs", Backfill::Rls, Predict::User);
    let rls_limit = sim_cfg("fcfs", Backfill::Rls, Predict::Limit);
    assert_eq!(run(&w, &rls).plans, run(&w, &rls_limit).plans, "RLScheduler's backfill ignores predictions");
}

/// Kills come only from requested limits: with predictions, no plan gives a job a time limit
/// of its own but within what the user asked for (a backfilled job with `--time-min` may be cut
/// to no less than it, as Slurm's rule; every other job keeps its limit), and every job runs its
/// whole actual run time, also those that outlive their predictions.
#[test]
fn kills_come_only_from_requested_limits() {
    let w = workload(11, 400);
    let by_id: std::collections::HashMap<u64, &trace::TraceJob> = w.jobs.iter().map(|j| (j.req.id.0, j)).collect();
    let mut cuts = 0;
    for backfill in [Backfill::Easy, Backfill::Conservative] {
        for predict in PREDICTS {
            let o = run(&w, &sim_cfg("default", backfill, predict));
            assert_eq!(o.jobs.len(), w.jobs.len(), "every job ran");
            for (_, plan) in &o.plans {
                for s in &plan.starts {
                    let req = &by_id[&s.job.0].req;
                    if let Some(l) = s.time_limit {
                        let min = req.time_min.unwrap_or_else(|| panic!("{backfill:?} {predict:?}: job {} without --time-min cut", s.job));
                        assert!(
                            min <= l && l <= req.time_limit,
                            "{backfill:?} {predict:?}: job {} cut to {l} outside {min}..={}",
                            s.job,
                            req.time_limit
                        );
                        cuts += 1;
                    }
                }
            }
            for j in &o.jobs {
                assert_eq!(j.run, by_id[&j.id.0].runtime, "job {} ran its actual run time", j.id);
            }
        }
    }
    assert!(cuts > 0, "some --time-min job was cut (the test exercises the rule)");
}
