//! Scheduler behaviour on small, hand-made clusters: placement, reasons, backfill, preemption.

mod common;

use common::{World, job, nodes};
use model::accounting::TresKind;
use model::{Account, Assoc, DepStatus, Enforce, Limits, PendingReason, Qos, RequestKind, Tres};
use sched::{Backfill, Config, Policy};

fn easy() -> Config {
    Config { policy: Policy::Fcfs, backfill: Backfill::Easy, ..Config::default() }
}

fn reason(plan: &sched::Plan, id: u64) -> PendingReason {
    plan.waiting.iter().find(|w| w.job.0 == id).map(|w| w.reason).unwrap_or_else(|| panic!("job {id} not waiting: {plan:?}"))
}

#[test]
fn gang_is_placed_whole_on_distinct_nodes_with_disjoint_gpus() {
    let mut w = World::new(nodes(4, 64, 8, 4));
    w.submit(job(1, 0, 100, 3, 8, 16));
    w.submit(job(2, 0, 100, 2, 4, 8));
    let plan = w.pass(0, &easy());
    let s1 = &plan.starts[0];
    assert_eq!(s1.allocs.len(), 3);
    let mut ns: Vec<u32> = s1.allocs.iter().map(|a| a.node).collect();
    ns.dedup();
    assert_eq!(ns.len(), 3, "three distinct nodes");
    assert!(s1.allocs.iter().all(|a| a.gpus.len() == 8));
    // job 2 needs two nodes with 4 GPUs: only one node is left, so it waits, whole.
    assert_eq!(plan.starts.len(), 1);
    assert_eq!(reason(&plan, 2), PendingReason::Resources);
}

#[test]
fn gpu_type_and_share_are_matched() {
    let mut ns = nodes(2, 64, 4, 2);
    ns[1].gpu_type = Some("a100".into());
    let mut w = World::new(ns);
    let mut j = job(1, 0, 100, 1, 2, 1);
    j.shape.gpus.as_mut().unwrap().gpu_type = Some("A100".into());
    w.submit(j);
    let mut half = job(2, 0, 100, 1, 1, 1);
    half.shape.gpus.as_mut().unwrap().milli = 500;
    w.submit(half.clone());
    half.id = model::JobId(3);
    w.submit(half);
    let plan = w.pass(0, &easy());
    assert_eq!(plan.starts[0].allocs[0].node, 1, "a100 job on the a100 node");
    // the two half-GPU jobs share one GPU (best fit) instead of cutting two whole ones
    let g2 = &plan.starts[1].allocs[0];
    let g3 = &plan.starts[2].allocs[0];
    assert_eq!((g2.node, g2.gpus.clone()), (g3.node, g3.gpus.clone()));
    w.apply(&plan, 0);
}

#[test]
fn multi_node_job_uses_fewest_switches() {
    // 4 switches of 4 nodes; switch 0 has one busy node.
    let mut w = World::new(nodes(16, 8, 0, 4));
    w.submit(job(1, 0, 1000, 1, 0, 8));
    let p = w.pass(0, &easy());
    w.apply(&p, 0);
    w.submit(job(2, 1, 1000, 4, 0, 8));
    let p = w.pass(1, &easy());
    let switches: std::collections::BTreeSet<u32> = p.starts[0].allocs.iter().map(|a| w.nodes[a.node as usize].switch).collect();
    assert_eq!(switches.len(), 1, "a 4-node job fits in one switch: {switches:?}");
    w.submit(job(3, 2, 1000, 3, 0, 8));
    let p2 = w.pass(2, &easy());
    // the three-node job takes the switch with exactly three free nodes (best fit)
    let sw: std::collections::BTreeSet<u32> =
        p2.starts.iter().find(|s| s.job.0 == 3).unwrap().allocs.iter().map(|a| w.nodes[a.node as usize].switch).collect();
    assert_eq!(sw.into_iter().collect::<Vec<_>>(), vec![0]);
}

#[test]
fn switches_bounds_the_leaf_switches_a_job_spans() {
    // 2 switches of 2 nodes; one node of each busy: a 2-node job fits only across both.
    let spans = |max: u32| {
        let mut w = World::new(nodes(4, 8, 0, 2));
        w.submit(job(1, 0, 1000, 1, 0, 8));
        w.submit(job(2, 0, 1000, 1, 0, 8));
        let mut pinned = w.pass(0, &easy());
        pinned.starts[0].allocs[0].node = 0;
        pinned.starts[1].allocs[0].node = 2;
        w.apply(&pinned, 0);
        let mut j = job(3, 1, 1000, 2, 0, 8);
        j.max_switches = Some(max);
        w.submit(j);
        let p = w.pass(1, &easy());
        p.starts
            .first()
            .map(|s| s.allocs.iter().map(|a| w.nodes[a.node as usize].switch).collect::<std::collections::BTreeSet<u32>>().len())
    };
    assert_eq!(spans(1), None, "--switches=1: waits for one switch to have two free nodes");
    assert_eq!(spans(2), Some(2));
}

#[test]
fn impossible_job_is_rejected_not_queued() {
    let mut w = World::new(nodes(2, 64, 8, 2));
    w.submit(job(1, 0, 100, 1, 16, 1));
    w.submit(job(2, 0, 100, 3, 1, 1));
    w.submit(job(3, 0, 100, 1, 1, 1));
    let plan = w.pass(0, &easy());
    assert_eq!(plan.rejected.len(), 2);
    assert!(plan.rejected[0].message.contains("16 GPUs"), "{}", plan.rejected[0].message);
    assert!(plan.rejected[1].message.contains("3 nodes"), "{}", plan.rejected[1].message);
    assert_eq!(plan.starts.len(), 1, "the possible job still runs");
}

#[test]
fn every_waiting_job_has_a_slurm_reason() {
    let mut w = World::new(nodes(1, 4, 0, 1));
    w.config.partitions[0].max_time = 1000;
    w.config.qos.push(Qos { name: "limited".into(), limits: Limits { max_jobs: Some(1), ..Limits::default() }, ..Qos::normal() });
    w.submit(job(1, 0, 100, 1, 0, 4)); // runs, fills the node
    let mut held = job(2, 0, 100, 1, 0, 1);
    held.held = true;
    w.submit(held);
    w.submit(job(3, 0, 100, 1, 0, 1));
    w.pending[2].dep = DepStatus::Waiting;
    let mut begin = job(4, 0, 100, 1, 0, 1);
    begin.begin_time = Some(500);
    w.submit(begin);
    w.submit(job(5, 0, 5000, 1, 0, 1));
    w.submit(job(6, 0, 100, 1, 0, 2)); // blocked by resources (first in line)
    w.submit(job(7, 0, 100, 1, 0, 2)); // behind it
    let mut bad = job(8, 0, 100, 1, 0, 1);
    bad.partition = Some("nope".into());
    w.submit(bad);
    let plan = w.pass(0, &Config { policy: Policy::Fcfs, backfill: Backfill::None, ..Config::default() });
    assert_eq!(reason(&plan, 2), PendingReason::JobHeldUser);
    assert_eq!(reason(&plan, 3), PendingReason::Dependency);
    assert_eq!(reason(&plan, 4), PendingReason::BeginTime);
    assert_eq!(reason(&plan, 5), PendingReason::PartitionTimeLimit);
    assert_eq!(reason(&plan, 6), PendingReason::Resources);
    assert_eq!(reason(&plan, 7), PendingReason::Priority);
    assert!(plan.rejected.iter().any(|r| r.job.0 == 8 && r.message.contains("invalid partition")));
    w.apply(&plan, 0);
    // QOS limit: a second job of the same user in the limited QOS waits with its reason
    let mut w2 = World::new(nodes(2, 4, 0, 1));
    w2.config.qos.push(Qos { name: "limited".into(), limits: Limits { max_jobs: Some(1), ..Limits::default() }, ..Qos::normal() });
    w2.config.enforce = Enforce::default();
    for id in [1, 2] {
        let mut j = job(id, 0, 100, 1, 0, 1);
        j.qos = Some("limited".into());
        w2.submit(j);
    }
    let p = w2.pass(0, &easy());
    w2.apply(&p, 0);
    let p = w2.pass(1, &easy());
    assert_eq!(reason(&p, 2), PendingReason::QosMaxJobsPerUserLimit);
    // A suspended job counts as a running one: suspending it frees no place under the limit.
    let r = w2.running.remove(0);
    w2.suspended.push(r);
    let p = w2.pass(2, &easy());
    assert!(p.starts.is_empty(), "{p:?}");
    assert_eq!(reason(&p, 2), PendingReason::QosMaxJobsPerUserLimit);
    w2.suspended.clear();
    assert_eq!(w2.pass(3, &easy()).starts.len(), 1, "gone, it frees its place");
    // Unenforced (the simulator's default), the same limit holds nothing back.
    let mut w3 = World::new(nodes(2, 4, 0, 1));
    w3.config.qos.push(Qos { name: "limited".into(), limits: Limits { max_jobs: Some(1), ..Limits::default() }, ..Qos::normal() });
    for id in [1, 2] {
        let mut j = job(id, 0, 100, 1, 0, 1);
        j.qos = Some("limited".into());
        w3.submit(j);
    }
    assert_eq!(w3.pass(0, &easy()).starts.len(), 2);
}

#[test]
fn association_and_account_limits_give_slurms_reasons() {
    // Four nodes with 2 GPUs each; accounts `lab` (at most 3 GPUs running together) and
    // `team` below it; alice may run one job at a time in `team`.
    let mut w = World::new(nodes(4, 8, 2, 4));
    w.config.enforce = Enforce::default();
    w.config.accounts.push(Account {
        limits: Limits { grp_tres: Tres { gpu: Some(3), ..Tres::default() }, ..Limits::default() },
        ..Account::new("lab", 1)
    });
    w.config.accounts.push(Account { parent: Some("lab".into()), ..Account::new("team", 1) });
    w.config.assocs.push(Assoc {
        account: "team".into(),
        user: "alice".into(),
        shares: 1,
        qos: None,
        default_qos: None,
        limits: Limits { max_jobs: Some(1), ..Limits::default() },
    });
    w.config.qos.push(Qos {
        name: "gpu".into(),
        limits: Limits { max_tres_per_user: Tres { cpu: Some(2), ..Tres::default() }, ..Limits::default() },
        ..Qos::normal()
    });
    let mk = |id: u64, user: &str, account: &str, gpus: u32| {
        let mut j = job(id, 0, 100, 1, gpus, 1);
        j.user = user.into();
        j.account = account.into();
        j
    };
    w.submit(mk(1, "alice", "team", 2)); // starts: 2 of lab's 3 GPUs
    w.submit(mk(2, "alice", "team", 0)); // alice's MaxJobs in team is 1
    w.submit(mk(3, "bob", "lab", 2)); // 2 + 2 > 3 GPUs for lab and all below it
    w.submit(mk(4, "bob", "lab", 1)); // fits: 3 GPUs
    let mut q = mk(5, "carol", "other", 0);
    q.qos = Some("gpu".into());
    q.shape.cpus_per_task = 3; // over the QOS's 2 CPUs per user
    w.submit(q);
    let p = w.pass(0, &easy());
    let started: Vec<u64> = p.starts.iter().map(|s| s.job.0).collect();
    assert_eq!(started, vec![1, 4]);
    assert_eq!(reason(&p, 2), PendingReason::AssocMaxJobsLimit);
    assert_eq!(reason(&p, 3), PendingReason::AssocGrp(TresKind::Gpu));
    assert_eq!(PendingReason::AssocGrp(TresKind::Gpu).code(), "AssocGrpGRES");
    assert_eq!(reason(&p, 5), PendingReason::QosMaxPerUser(TresKind::Cpu));
    assert_eq!(PendingReason::QosMaxPerUser(TresKind::Cpu).code(), "QOSMaxCpuPerUserLimit");
    // Once job 1 ends, lab has room again, and alice may run her next job.
    w.apply(&p, 0);
    w.finish(1);
    let p = w.pass(1, &easy());
    let started: Vec<u64> = p.starts.iter().map(|s| s.job.0).collect();
    assert!(started.contains(&2) && started.contains(&3), "{started:?}");
}

#[test]
fn easy_backfills_short_jobs_and_protects_the_reservation() {
    // 4 single-CPU nodes. Job 1 (3 nodes, until t=100) runs; job 2 needs all 4 nodes.
    let mut w = World::new(nodes(4, 1, 0, 4));
    w.submit(job(1, 0, 100, 3, 0, 1));
    let p = w.pass(0, &easy());
    w.apply(&p, 0);
    w.submit(job(2, 1, 100, 4, 0, 1));
    w.submit(job(3, 2, 50, 1, 0, 1)); // ends at 60 < 100: backfills
    w.submit(job(4, 3, 500, 1, 0, 1)); // would end at 510 > 100 on the reserved node: waits
    let p = w.pass(10, &easy());
    let started: Vec<u64> = p.starts.iter().map(|s| s.job.0).collect();
    assert_eq!(started, vec![3]);
    assert!(p.starts[0].backfilled);
    let top = p.waiting.iter().find(|x| x.job.0 == 2).unwrap();
    assert_eq!((top.reason, top.expected_start), (PendingReason::Resources, Some(100)));
    assert_eq!(reason(&p, 4), PendingReason::Priority);
}

#[test]
fn time_min_lets_backfill_start_a_job_cut_short() {
    let mut w = World::new(nodes(4, 1, 0, 4));
    w.submit(job(1, 0, 100, 3, 0, 1));
    let p = w.pass(0, &easy());
    w.apply(&p, 0);
    w.submit(job(2, 1, 100, 4, 0, 1)); // reserved at t=100
    let mut j3 = job(3, 2, 1000, 1, 0, 1);
    j3.time_min = Some(60); // fits in the 90 s before the reservation, cut to 60 s
    w.submit(j3);
    let mut j4 = job(4, 3, 1000, 1, 0, 1);
    j4.time_min = Some(120); // would need 120 s: waits
    w.submit(j4);
    let p = w.pass(10, &easy());
    assert_eq!(p.starts.len(), 1);
    assert_eq!((p.starts[0].job.0, p.starts[0].time_limit), (3, Some(60)));
    assert_eq!(reason(&p, 4), PendingReason::Priority);
}

#[test]
fn easy_extra_nodes_rule_lets_long_jobs_use_what_the_reservation_does_not_need() {
    // 4 nodes; job 1 holds 2 until t=100; job 2 needs 3 nodes; one node is spare at t=100.
    let mut w = World::new(nodes(4, 1, 0, 4));
    w.submit(job(1, 0, 100, 2, 0, 1));
    let p = w.pass(0, &easy());
    w.apply(&p, 0);
    w.submit(job(2, 1, 100, 3, 0, 1));
    w.submit(job(3, 2, 1000, 1, 0, 1)); // long, but one node is not needed by the reservation
    w.submit(job(4, 3, 1000, 1, 0, 1)); // a second long one would take a reserved node
    let p = w.pass(5, &easy());
    let started: Vec<u64> = p.starts.iter().map(|s| s.job.0).collect();
    assert_eq!(started, vec![3]);
}

#[test]
fn conservative_gives_every_blocked_job_a_start_time() {
    let mut w = World::new(nodes(2, 1, 0, 2));
    w.submit(job(1, 0, 100, 2, 0, 1));
    let p = w.pass(0, &easy());
    w.apply(&p, 0);
    w.submit(job(2, 1, 50, 2, 0, 1));
    w.submit(job(3, 2, 50, 1, 0, 1));
    w.submit(job(4, 3, 10, 1, 0, 1));
    let cfg = Config { policy: Policy::Fcfs, backfill: Backfill::Conservative, ..Config::default() };
    let p = w.pass(10, &cfg);
    let start = |id: u64| p.waiting.iter().find(|x| x.job.0 == id).unwrap().expected_start;
    assert_eq!(start(2), Some(100));
    assert_eq!(start(3), Some(150));
    assert_eq!(start(4), Some(150));
}

#[test]
fn replicas_spread_over_switches() {
    let mut w = World::new(nodes(8, 8, 4, 2));
    for id in 1..=4 {
        let mut r = job(id, 0, 1_000_000, 1, 1, 1);
        r.kind = RequestKind::Replica { service: "llm".into() };
        w.submit(r);
    }
    let p = w.pass(0, &easy());
    let switches: std::collections::BTreeSet<u32> = p.starts.iter().map(|s| w.nodes[s.allocs[0].node as usize].switch).collect();
    assert_eq!(switches.len(), 4, "four replicas on four switches");
}

#[test]
fn higher_tier_preempts_the_cheapest_lower_tier_work() {
    let mut w = World::new(nodes(2, 8, 2, 2));
    w.config.qos.push(Qos { name: "serve".into(), priority: 100, preempt_tier: 1, grace_time: 30, ..Qos::normal() });
    w.submit(job(1, 0, 10_000, 1, 2, 1));
    let p = w.pass(0, &easy());
    w.apply(&p, 0);
    w.submit(job(2, 0, 10_000, 1, 2, 1));
    let p = w.pass(500, &easy());
    w.apply(&p, 500);
    // job 1 has run 1000 s at t=1000, job 2 only 500 s: job 2 is the cheaper victim
    let mut r = job(3, 1000, 1_000_000, 1, 2, 1);
    r.kind = RequestKind::Replica { service: "llm".into() };
    r.qos = Some("serve".into());
    w.submit(r);
    let p = w.pass(1000, &easy());
    assert!(p.starts.is_empty());
    assert_eq!(p.preemptions.len(), 1);
    let pre = &p.preemptions[0];
    assert_eq!(pre.for_job.0, 3);
    assert_eq!(pre.victims.iter().map(|v| (v.job.0, v.grace)).collect::<Vec<_>>(), vec![(2, 60)]);
    // a job of the same tier never preempts
    let mut w2 = World::new(nodes(1, 8, 2, 1));
    w2.submit(job(1, 0, 10_000, 1, 2, 1));
    let p = w2.pass(0, &easy());
    w2.apply(&p, 0);
    w2.submit(job(2, 0, 10_000, 1, 2, 1));
    assert!(w2.pass(10, &easy()).preemptions.is_empty());
}

#[test]
fn a_suspending_qos_frees_only_cpus_at_once() {
    // One node, 8 CPUs and 2 GPUs; the low job holds 6 CPUs and both GPUs.
    let mut w = World::new(nodes(1, 8, 2, 1));
    w.config.qos.push(Qos { name: "low".into(), preempt_mode: model::PreemptMode::Suspend, ..Qos::normal() });
    w.config.qos.push(Qos { name: "high".into(), priority: 100, preempt_tier: 1, grace_time: 30, ..Qos::normal() });
    let mut low = job(1, 0, 10_000, 1, 2, 6);
    low.qos = Some("low".into());
    w.submit(low);
    let p = w.pass(0, &easy());
    w.apply(&p, 0);
    // A CPU-only high job: the low one is suspended for it, with no grace.
    let mut cpu = job(2, 10, 1000, 1, 0, 6);
    cpu.qos = Some("high".into());
    w.submit(cpu.clone());
    let p = w.pass(10, &easy());
    assert_eq!(p.preemptions.len(), 1, "{p:?}");
    assert_eq!(p.preemptions[0].victims.iter().map(|v| (v.job.0, v.grace, v.suspend)).collect::<Vec<_>>(), vec![(1, 0, true)]);
    // A high job that needs a GPU: suspending frees no GPU, so nothing is preempted for it.
    let mut w2 = World::new(nodes(1, 8, 2, 1));
    w2.config = w.config.clone();
    let mut low = job(1, 0, 10_000, 1, 2, 6);
    low.qos = Some("low".into());
    w2.submit(low);
    let p = w2.pass(0, &easy());
    w2.apply(&p, 0);
    let mut gpu = job(3, 10, 1000, 1, 1, 1);
    gpu.qos = Some("high".into());
    w2.submit(gpu);
    assert!(w2.pass(10, &easy()).preemptions.is_empty(), "a suspended job keeps its GPUs");
}

#[test]
fn a_job_waiting_on_resources_held_with_no_end_does_not_block_the_queue() {
    // A suspended job's GPU: in the node's usage, with no running job to end and free it.
    let mut w = World::new(nodes(1, 8, 1, 1));
    w.usage[0].gpu_milli[0] = 1000;
    w.submit(job(1, 0, 60, 1, 1, 1));
    w.submit(job(2, 10, 3600, 1, 0, 2));
    let cfg = Config { policy: Policy::Fcfs, ..easy() };
    let p = w.pass(20, &cfg);
    assert_eq!(p.starts.iter().map(|s| s.job.0).collect::<Vec<_>>(), vec![2], "{p:?}");
    assert!(p.waiting.iter().any(|x| x.job.0 == 1 && x.reason == model::PendingReason::Resources && x.expected_start.is_none()));
    // Conservative backfill's plan sees the held GPU too: it plans no start that cannot happen.
    let cfg = Config { policy: Policy::Fcfs, backfill: Backfill::Conservative, ..Config::default() };
    let p = w.pass(20, &cfg);
    assert_eq!(p.starts.iter().map(|s| s.job.0).collect::<Vec<_>>(), vec![2], "{p:?}");
}

#[test]
fn multifactor_breakdown_adds_up_and_orders() {
    let mut w = World::new(nodes(1, 1, 0, 1));
    w.submit(job(1, 0, 100, 1, 0, 1));
    let p = w.pass(0, &easy());
    w.apply(&p, 0);
    w.submit(job(2, 0, 86_400, 1, 0, 1)); // long
    w.submit(job(3, 100, 60, 1, 0, 1)); // short, later
    let cfg = Config::default(); // the production default ordering
    let p = w.pass(200, &cfg);
    assert_eq!(p.waiting[0].job.0, 3, "short job first under the default weights: {:?}", p.waiting);
    let b = sched::priority_breakdown(&w.snap(), 200, &sched::Config::default());
    for (_, x) in &b {
        let sum = x.age + x.fairshare + x.job_size + x.time_limit + x.xfactor + x.starving + x.partition + x.qos - x.nice;
        assert!((sum - x.total).abs() < 1e-9);
    }
    assert!(b.iter().find(|(j, _)| j.0 == 3).unwrap().1.total > b.iter().find(|(j, _)| j.0 == 2).unwrap().1.total);
}

/// The default orders by the run time it predicts from the user's finished jobs of the same
/// shape, not by the requested limit: a user whose jobs ran a minute against a day's request
/// goes ahead of one asking for an hour with no history; planning with limits reverses that.
#[test]
fn the_default_orders_by_predicted_run_time() {
    let mut w = World::new(nodes(1, 1, 0, 1));
    let mut done = job(1, 0, 86_400, 1, 0, 1);
    done.user = "fast".into();
    w.history.record(&done, 60);
    w.history.record(&done, 60);
    w.submit(job(9, 0, 1_000_000, 1, 0, 1));
    let p = w.pass(0, &Config::default());
    w.apply(&p, 0); // the node is busy from here on
    let mut a = job(2, 10, 86_400, 1, 0, 1);
    a.user = "fast".into();
    let mut b = job(3, 10, 3600, 1, 0, 1);
    b.user = "new".into();
    w.submit(a);
    w.submit(b);
    let first = |cfg: &Config| w.pass(20, cfg).waiting[0].job.0;
    assert_eq!(first(&Config::default()), 2, "predicted 60 s first");
    let limits = Config { predict: sched::Predict::Limit, ..Config::default() };
    assert_eq!(first(&limits), 3, "with limits, the shorter request first");
    let b = sched::priority_breakdown(&w.snap(), 20, &Config::default());
    assert_eq!(b[0].0.0, 2, "sprio's order is the pass's");
}

/// The expansion factor ages every waiting job (one point per estimated run time waited), and
/// `starve_after` is a guard that takes effect: past it a job goes ahead of every job that is not
/// starving, oldest first.
#[test]
fn waiting_raises_priority_and_the_starvation_guard_takes_effect() {
    let mut w = World::new(nodes(1, 1, 0, 1));
    w.submit(job(9, 0, 1_000_000, 1, 0, 1));
    let p = w.pass(0, &Config::default());
    w.apply(&p, 0);
    w.submit(job(2, 0, 3600, 1, 0, 1)); // an hour, waiting since 0
    w.submit(job(3, 990_000, 60, 1, 0, 1)); // a minute, just arrived
    w.submit(job(4, 100, 3600, 1, 0, 1)); // an hour, a little later than job 2
    let order = |now, cfg: &Config| -> Vec<u64> { w.pass(now, cfg).waiting.iter().map(|x| x.job.0).collect() };
    assert_eq!(order(1_000_000, &Config::default()), vec![3, 2, 4], "short first; of equal length, the one waiting longer");
    let b = sched::priority_breakdown(&w.snap(), 1_000_000, &Config::default());
    let xf = |id| b.iter().find(|(j, _)| j.0 == id).unwrap().1.xfactor;
    assert!((xf(2) - 1_000_000.0 / 3600.0).abs() < 1e-6, "one point per estimated run time waited: {}", xf(2));
    let guard = |starve_after: f64| {
        let mut cfg = Config::default();
        let Policy::Multifactor(w) = &mut cfg.policy else { unreachable!() };
        w.set("starve_after", starve_after).unwrap();
        cfg
    };
    assert_eq!(order(1_000_000, &guard(7.0 * 86_400.0)), vec![2, 4, 3], "starving jobs first, oldest first");
    assert_eq!(order(1_000_000, &guard(2_000_000.0)), vec![3, 2, 4], "no job starving yet: the guard changes nothing");
}

#[test]
fn users_sharing_an_account_get_their_own_fair_share() {
    // Two users associated with one account: the one who used it gets the lower factor; an
    // account without associations is one (its users share its factor, as before).
    let mut w = World::new(nodes(1, 4, 0, 1));
    w.config.accounts.push(Account::new("lab", 1));
    for u in ["heavy", "light"] {
        w.config.assocs.push(Assoc {
            account: "lab".into(),
            user: u.into(),
            shares: 1,
            qos: None,
            default_qos: None,
            limits: Limits::default(),
        });
    }
    w.fairshare.accrue("lab", "heavy", 1000.0);
    w.fairshare.accrue("other", "x", 1000.0);
    for (id, user, account) in [(1, "heavy", "lab"), (2, "light", "lab"), (3, "x", "other"), (4, "y", "other")] {
        let mut j = job(id, 0, 100, 1, 0, 1);
        j.user = user.into();
        j.account = account.into();
        w.submit(j);
    }
    let cfg = Config { policy: Policy::Multifactor(sched::Weights::slurm()), ..Config::default() };
    let b: std::collections::HashMap<u64, f64> =
        sched::priority_breakdown(&w.snap(), 0, &cfg).into_iter().map(|(j, b)| (j.0, b.fairshare)).collect();
    assert!(b[&2] > b[&1], "the light user of lab comes first: {b:?}");
    assert_eq!(b[&3], b[&4], "without associations the account's users share its factor: {b:?}");
    assert!((w.fairshare.user_usage("lab", "heavy") - 1000.0).abs() < 1e-9);
}

/// A heterogeneous job of `parts` components of (nodes, GPUs per node, CPUs per node).
fn het(id: u64, limit: model::Time, parts: &[(u32, u32, u32)]) -> model::JobRequest {
    let mut r = job(id, 0, limit, parts[0].0, parts[0].1, parts[0].2);
    for &(k, g, c) in &parts[1..] {
        let one = job(id, 0, limit, k, g, c);
        r.het.push(model::HetPart { shape: one.shape, partition: None, features: Vec::new(), nodelist: Vec::new(), exclude: Vec::new() });
    }
    r
}

#[test]
fn heterogeneous_components_start_together_on_nodes_apart_or_none_does() {
    // 4 nodes, 2 with GPUs. Job 1: one CPU node and two GPU nodes.
    let mut ns = nodes(4, 8, 0, 4);
    for n in &mut ns[2..] {
        n.gpus = 4;
        n.gpu_type = Some("h100".into());
    }
    for cfg in [easy(), Config { backfill: Backfill::Conservative, ..easy() }] {
        let mut w = World::new(ns.clone());
        // Another job holds one GPU node: component 1 (2 GPU nodes) cannot fit, component 0
        // could; neither starts, and the job waits for resources with an expected start.
        w.submit(job(9, 0, 50, 1, 4, 1));
        w.apply(&w.pass(0, &cfg), 0);
        w.submit(het(1, 100, &[(1, 0, 8), (2, 4, 1)]));
        let plan = w.pass(0, &cfg);
        assert!(plan.starts.is_empty(), "{:?}: nothing starts while one component cannot: {plan:?}", cfg.backfill);
        assert_eq!(reason(&plan, 1), PendingReason::Resources);
        if cfg.backfill == Backfill::Easy {
            let wt = plan.waiting.iter().find(|x| x.job.0 == 1).unwrap();
            assert_eq!(wt.expected_start, Some(50), "planned as one job: when the GPU node is free");
            // A short one-node job may backfill on a CPU node; a long one may not take what
            // the reservation needs.
            let mut w2 = World::new(ns.clone());
            w2.submit(job(9, 0, 50, 1, 4, 1));
            w2.apply(&w2.pass(0, &cfg), 0);
            w2.submit(het(1, 100, &[(2, 0, 8), (2, 4, 1)]));
            w2.submit(job(3, 0, 10, 1, 0, 8));
            w2.submit(job(4, 0, 1000, 1, 0, 8));
            let plan = w2.pass(0, &cfg);
            let started: Vec<u64> = plan.starts.iter().map(|s| s.job.0).collect();
            assert_eq!(started, vec![3], "{plan:?}");
        }
        w.finish(9);
        let plan = w.pass(50, &cfg);
        assert_eq!(plan.starts.len(), 1, "{:?}: {plan:?}", cfg.backfill);
        let s = &plan.starts[0];
        assert_eq!(s.het, vec![1, 2]);
        let nodes: Vec<u32> = s.allocs.iter().map(|a| a.node).collect();
        assert_eq!(nodes.len(), 3);
        assert!(
            nodes[0] < 2 && nodes[1] >= 2 && nodes[2] >= 2 && nodes[1] != nodes[2],
            "component 0 on a CPU node, 1 on both GPU nodes: {nodes:?}"
        );
        assert!(s.allocs[1..].iter().all(|a| a.gpus.len() == 4) && s.allocs[0].cpus == 8);
        w.apply(&plan, 50);
    }
}

#[test]
fn heterogeneous_components_never_share_a_node_and_an_impossible_one_is_rejected() {
    // Two 8-CPU nodes: a job's two 1-CPU components would fit on one node but take one each.
    let mut w = World::new(nodes(2, 8, 0, 2));
    w.submit(het(1, 100, &[(1, 0, 1), (1, 0, 1)]));
    w.submit(het(2, 100, &[(1, 0, 1), (1, 0, 1)]));
    let plan = w.pass(0, &easy());
    assert_eq!(plan.starts.len(), 2, "jobs share nodes; a job's components do not");
    for s in &plan.starts {
        assert_ne!(s.allocs[0].node, s.allocs[1].node);
    }
    // Three components on a two-node cluster can never run.
    let mut w = World::new(nodes(2, 8, 0, 2));
    w.submit(het(3, 100, &[(1, 0, 1), (1, 0, 1), (1, 0, 1)]));
    let plan = w.pass(0, &easy());
    assert!(plan.rejected.iter().any(|r| r.job.0 == 3 && r.message.contains("3 nodes in all")), "{plan:?}");
}
