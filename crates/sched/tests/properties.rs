//! Property tests of the scheduler's invariants on random clusters and queues. On failure,
//! proptest prints the shrunk case and the seed that reproduces it.

mod common;

use common::{World, job};
use model::{Node, Time};
use proptest::prelude::*;
use sched::{Backfill, Config, History, Policy, Predict};

#[derive(Debug, Clone)]
struct Case {
    nodes: Vec<(u32, u32, u32)>, // cpus, gpus, switch
    running: Vec<(u32, u32, u32, Time)>,
    pending: Vec<(u32, u32, u32, Time, Time)>, // nodes, gpus, cpus, limit, submit
    backfill: Backfill,
    policy: usize,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec((1u32..=16, 0u32..=4, 0u32..3), 1..10),
        prop::collection::vec((1u32..=3, 0u32..=4, 1u32..=8, 1i64..500), 0..12),
        prop::collection::vec((1u32..=4, 0u32..=4, 1u32..=16, 1i64..1000, 0i64..50), 1..25),
        prop_oneof![Just(Backfill::None), Just(Backfill::Easy), Just(Backfill::Conservative), Just(Backfill::Rls)],
        0usize..4,
    )
        .prop_map(|(nodes, running, pending, backfill, policy)| Case { nodes, running, pending, backfill, policy })
}

fn world(c: &Case) -> World {
    let nodes: Vec<Node> = c
        .nodes
        .iter()
        .enumerate()
        .map(|(i, &(cpus, gpus, sw))| {
            let mut n = Node::new(format!("n{i}"), cpus, 64 << 30, gpus);
            n.switch = sw;
            n
        })
        .collect();
    let mut w = World::new(nodes);
    // Start the "running" jobs through the scheduler itself at t=0.
    for (k, &(n, g, cpus, limit)) in c.running.iter().enumerate() {
        w.submit(job(1000 + k as u64, 0, limit, n, g, cpus));
    }
    let fill = w.pass(0, &Config { policy: Policy::Fcfs, backfill: Backfill::Easy, ..Config::default() });
    w.apply(&fill, 0);
    w.pending.clear();
    for (k, &(n, g, cpus, limit, submit)) in c.pending.iter().enumerate() {
        w.submit(job(k as u64 + 1, submit, limit, n, g, cpus));
    }
    w
}

fn policy(i: usize) -> Policy {
    ["fcfs", "sjf", "f1", "default"].map(|p| Policy::parse(p).unwrap())[i].clone()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// No node over-committed (NodeUsage::apply asserts it), gangs whole on distinct nodes,
    /// and the same inputs give the same plan.
    #[test]
    fn plans_fit_are_whole_and_deterministic(c in case()) {
        let mut w = world(&c);
        let cfg = Config { policy: policy(c.policy), backfill: c.backfill, ..Config::default() };
        let now = 60;
        let plan = w.pass(now, &cfg);
        prop_assert_eq!(&plan, &w.pass(now, &cfg), "same snapshot, same plan");
        for s in &plan.starts {
            let req = &w.pending.iter().find(|p| p.req.id == s.job).unwrap().req;
            prop_assert_eq!(s.allocs.len() as u32, req.shape.nodes_min, "gang placed whole");
            let mut ns: Vec<u32> = s.allocs.iter().map(|a| a.node).collect();
            ns.sort();
            ns.dedup();
            prop_assert_eq!(ns.len(), s.allocs.len(), "distinct nodes");
        }
        let waiting = plan.waiting.len() + plan.starts.len() + plan.rejected.len();
        prop_assert_eq!(waiting, w.pending.len(), "every pending job is started, waiting or rejected");
        w.apply(&plan, now); // panics on over-commit
        for (n, u) in w.nodes.iter().zip(&w.usage) {
            prop_assert!(u.cpus <= n.cpus && u.gpu_milli.iter().all(|&m| m <= 1000));
        }
    }

    /// A pass that reuses what earlier passes derived from the same nodes (topology, which
    /// shapes could ever fit) makes the same plan as one that derives it afresh, pass after
    /// pass, also after a node's state changed.
    #[test]
    fn reusing_gives_the_same_plans(c in case()) {
        let mut w = world(&c);
        let cfg = Config { policy: policy(c.policy), backfill: c.backfill, ..Config::default() };
        let mut reuse = sched::Reuse::default();
        for (k, now) in [60, 120, 180].into_iter().enumerate() {
            if k == 2 {
                w.nodes[0].state = model::NodeState::Drain;
            }
            let plan = w.pass(now, &cfg);
            prop_assert_eq!(&plan, &sched::schedule_reusing(&w.snap(), now, 7, &cfg, &mut reuse, k > 0), "pass {}", k);
            w.apply(&plan, now);
        }
    }

    /// Under EASY, the jobs a pass backfills never delay the top job's reservation: after the
    /// plan is applied, the same job's expected start is no later.
    #[test]
    fn easy_backfill_never_delays_the_reservation(c in case()) {
        let mut w = world(&c);
        let cfg = Config { policy: policy(c.policy), backfill: Backfill::Easy, ..Config::default() };
        let now = 60;
        let plan = w.pass(now, &cfg);
        let top = plan.waiting.iter().find(|x| x.reason == model::PendingReason::Resources && x.expected_start.is_some()).copied();
        w.apply(&plan, now);
        if let Some(top) = top {
            let again = w.pass(now, &cfg);
            let after = again.waiting.iter().find(|x| x.job == top.job).and_then(|x| x.expected_start);
            let started_now = again.starts.iter().any(|s| s.job == top.job);
            prop_assert!(started_now || after.is_some_and(|t| t <= top.expected_start.unwrap()),
                "reservation of job {} moved from {:?} to {:?}", top.job, top.expected_start, after);
        }
    }

    /// Under conservative backfill, applying a plan delays no reservation it made.
    #[test]
    fn conservative_reservations_hold(c in case()) {
        let mut w = world(&c);
        let cfg = Config { policy: policy(c.policy), backfill: Backfill::Conservative, ..Config::default() };
        let now = 60;
        let plan = w.pass(now, &cfg);
        w.apply(&plan, now);
        let again = w.pass(now, &cfg);
        for x in plan.waiting.iter().filter(|x| x.expected_start.is_some()) {
            let started = again.starts.iter().any(|s| s.job == x.job);
            let after = again.waiting.iter().find(|y| y.job == x.job).and_then(|y| y.expected_start);
            prop_assert!(started || after.is_some_and(|t| t <= x.expected_start.unwrap()),
                "job {} moved from {:?} to {:?}", x.job, x.expected_start, after);
        }
    }
}

/// Gives the world's jobs one of three users each and a history of finished jobs for them (the
/// run times `hist` of (user, seconds), oldest first).
fn with_history(w: &mut World, hist: &[(u8, Time)]) {
    let user = |id: u64| format!("u{}", id % 3);
    for r in &mut w.running {
        r.req.user = user(r.req.id.0);
    }
    for p in &mut w.pending {
        p.req.user = user(p.req.id.0);
    }
    let mut h = History::default();
    for &(u, ran) in hist {
        let mut req = job(0, 0, ran, 1, 0, 1);
        req.user = format!("u{}", u % 3);
        h.record(&req, ran);
    }
    w.history = h;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// With predicted run times (EASY++), the jobs a pass backfills never delay the top job's
    /// reservation as computed from predictions: after the plan is applied, the same job's
    /// expected start (from the same predictions) is no later. Running jobs started at 0 and
    /// the pass is at 60, so some have outlived their predictions and are on the ladder.
    #[test]
    fn easy_backfill_with_predictions_never_delays_the_reservation(
        c in case(),
        hist in prop::collection::vec((0u8..3, 1i64..400), 0..8),
        predict in prop_oneof![Just(Predict::User), Just(Predict::UserName), Just(Predict::UserShape)],
    ) {
        let mut w = world(&c);
        with_history(&mut w, &hist);
        let cfg = Config { policy: policy(c.policy), backfill: Backfill::Easy, predict, ..Config::default() };
        let now = 60;
        let plan = w.pass(now, &cfg);
        let top = plan.waiting.iter().find(|x| x.reason == model::PendingReason::Resources && x.expected_start.is_some()).copied();
        w.apply(&plan, now);
        if let Some(top) = top {
            let again = w.pass(now, &cfg);
            let after = again.waiting.iter().find(|x| x.job == top.job).and_then(|x| x.expected_start);
            let started_now = again.starts.iter().any(|s| s.job == top.job);
            prop_assert!(started_now || after.is_some_and(|t| t <= top.expected_start.unwrap()),
                "reservation of job {} moved from {:?} to {:?}", top.job, top.expected_start, after);
        }
        for s in &plan.starts {
            prop_assert_eq!(s.time_limit, None, "predictions never cut a limit");
        }
    }

    /// The same for conservative backfill: no reservation made from predictions is delayed.
    #[test]
    fn conservative_reservations_from_predictions_hold(
        c in case(),
        hist in prop::collection::vec((0u8..3, 1i64..400), 0..8),
    ) {
        let mut w = world(&c);
        with_history(&mut w, &hist);
        let cfg = Config { policy: policy(c.policy), backfill: Backfill::Conservative, predict: Predict::User, ..Config::default() };
        let now = 60;
        let plan = w.pass(now, &cfg);
        w.apply(&plan, now);
        let again = w.pass(now, &cfg);
        for x in plan.waiting.iter().filter(|x| x.expected_start.is_some()) {
            let started = again.starts.iter().any(|s| s.job == x.job);
            let after = again.waiting.iter().find(|y| y.job == x.job).and_then(|y| y.expected_start);
            prop_assert!(started || after.is_some_and(|t| t <= x.expected_start.unwrap()),
                "job {} moved from {:?} to {:?}", x.job, x.expected_start, after);
        }
    }

    /// Without history, predictions are the limits: the same plans as planning with limits.
    #[test]
    fn no_history_plans_as_limits(c in case()) {
        let w = world(&c);
        let on = Config { policy: policy(c.policy), backfill: c.backfill, predict: Predict::User, ..Config::default() };
        let off = Config { predict: Predict::Limit, ..on.clone() };
        prop_assert_eq!(w.pass(60, &on), w.pass(60, &off));
    }
}

/// The case proptest once shrank `conservative_reservations_hold` to (it failed about 1 run in
/// 45): reservations were made on a node too small for the job (1 CPU for 6 or 8 per node),
/// which the next pass, seeing that node busy, no longer allowed.
#[test]
fn conservative_reservations_hold_shrunk_case() {
    let c = Case {
        nodes: vec![(4, 1, 2), (7, 3, 2), (7, 3, 2), (8, 3, 1), (1, 0, 0), (9, 0, 1), (13, 2, 2)],
        running: vec![(1, 3, 4, 186), (1, 1, 5, 186), (2, 0, 2, 1), (2, 2, 7, 1), (3, 0, 3, 203), (1, 0, 2, 153)],
        pending: vec![(1, 0, 6, 144, 0), (4, 0, 1, 2, 31), (2, 0, 8, 1, 28), (3, 0, 6, 1, 23), (1, 0, 7, 94, 0)],
        backfill: Backfill::Conservative,
        policy: 2,
    };
    let mut w = world(&c);
    let cfg = Config { policy: policy(c.policy), backfill: Backfill::Conservative, ..Config::default() };
    let plan = w.pass(60, &cfg);
    w.apply(&plan, 60);
    let again = w.pass(60, &cfg);
    for x in plan.waiting.iter().filter(|x| x.expected_start.is_some()) {
        let started = again.starts.iter().any(|s| s.job == x.job);
        let after = again.waiting.iter().find(|y| y.job == x.job).and_then(|y| y.expected_start);
        assert!(
            started || after.is_some_and(|t| t <= x.expected_start.unwrap()),
            "job {} moved from {:?} to {:?}",
            x.job,
            x.expected_start,
            after
        );
    }
}
