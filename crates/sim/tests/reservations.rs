//! Advance reservations: the controller and the simulator run the same scheduler over the same
//! snapshot (reservations included), so the same jobs start at the same times, in virtual time.

use control::{Controller, JobSpec, Order, Settings, TaskExit, TaskKey};
use model::{Node, Time};
use sched::{Backfill, Config, Policy, Predict};
use sim::{SimConfig, run};
use std::collections::{BTreeMap, BTreeSet};

fn spec(uid: u32) -> JobSpec {
    JobSpec { uid, gid: uid, ..JobSpec::script("#!/bin/sh\ntrue\n") }
}

/// A well-behaved agent per node: acknowledges orders, holds what it launched, reports ends.
#[derive(Default)]
struct Agents {
    acked: BTreeMap<String, u64>,
    held: BTreeMap<String, BTreeSet<(u64, u32)>>,
}

impl Agents {
    fn beat(&mut self, c: &mut Controller, now: Time, node: &str, exits: &[TaskExit]) {
        let held = self.held.entry(node.into()).or_default();
        for e in exits {
            held.remove(&(e.job, e.epoch));
        }
        let running: Vec<TaskKey> = held.iter().map(|&(job, epoch)| TaskKey { job, epoch, step: u32::MAX, rank: 0 }).collect();
        let ack = self.acked.get(node).copied().unwrap_or(0);
        let out = c.heartbeat(now, node, ack, &running, exits).unwrap();
        for (seq, o) in &out {
            if *seq > ack
                && let Order::Launch(t) = o
            {
                held.insert((t.job, t.epoch));
            }
        }
        self.acked.insert(node.into(), out.iter().map(|(s, _)| *s).max().unwrap_or(ack));
    }
}

#[test]
fn the_controller_and_the_simulator_start_the_same_jobs_at_the_same_times_around_reservations() {
    // Three nodes; a maintenance on n2 over [1200, 3600); the team's reservation on n1 over
    // [600, 6000) for alice.
    let sched = Config { policy: Policy::Fcfs, backfill: Backfill::Easy, predict: Predict::Limit, ..Config::default() };
    let settings = Settings { sched: sched.clone(), lease: 100_000, ..Settings::default() };
    let mut c = Controller::new(settings);
    let nodes: Vec<Node> = (0..3).map(|i| Node::new(format!("n{i}"), 4, 8 << 30, 0)).collect();
    for n in &nodes {
        c.register(0, n.clone(), "127.0.0.1".into()).unwrap();
    }
    let words = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    for r in [
        "ReservationName=maint StartTime=1970-01-01T00:20:00 EndTime=1970-01-01T01:00:00 Nodes=n2 Users=root Flags=MAINT",
        "ReservationName=team StartTime=1970-01-01T00:10:00 EndTime=1970-01-01T01:40:00 Nodes=n1 Users=alice",
    ] {
        c.create_reservation(0, 0, &slurmcli::resv::parse_reservation(&words(r), 0).unwrap()).unwrap();
    }
    let resv: Vec<model::Reservation> = c.reservations().cloned().collect();
    // (submit time, user, options, actual run time)
    let jobs: [(Time, &str, &str, Time); 4] = [
        (0, "bob", "-t 100 -c 4", 6000),
        (0, "alice", "-t 100 -c 4 --reservation=team", 6000),
        (0, "bob", "-t 100 -c 4", 6000),
        (300, "bob", "-t 10 -c 4", 600),
    ];
    let mut agents = Agents::default();
    let mut reqs = Vec::new();
    let mut ends: BTreeMap<u64, Time> = BTreeMap::new();
    // (start, nodes, limit) as the controller made them (a finished job leaves its memory).
    let mut started: BTreeMap<u64, (Time, Vec<String>, Time)> = BTreeMap::new();
    let mut t = 0;
    while t <= 4200 {
        for (k, (at, user, opts, run)) in jobs.iter().enumerate() {
            if *at == t {
                let mut a = words(opts);
                a.push("--wrap=true".into());
                let b = slurmcli::parse_sbatch(&a, 0, &mut |_| unreachable!()).unwrap();
                let id = c.submit(t, spec(1000 + k as u32), &b, user).unwrap()[0];
                let mut req = c.job(id).unwrap().req.clone();
                req.partition = None;
                reqs.push(trace::TraceJob { req, runtime: *run, units: 4 });
            }
        }
        c.tick(t);
        for n in &nodes {
            let due: Vec<u64> = ends.iter().filter(|(_, e)| **e <= t).map(|(j, _)| *j).collect();
            let exits: Vec<TaskExit> = due
                .iter()
                .filter(|j| c.job(**j).unwrap().allocs.first().is_some_and(|(name, _)| name == &n.name))
                .map(|&job| TaskExit {
                    job,
                    epoch: 1,
                    step: u32::MAX,
                    rank: 0,
                    code: Some(0),
                    signal: None,
                    oom: false,
                    fenced: false,
                    error: None,
                    lost: false,
                    prolog_failed: false,
                })
                .collect();
            for e in &exits {
                ends.remove(&e.job);
            }
            agents.beat(&mut c, t, &n.name, &exits);
        }
        for id in 1..=jobs.len() as u64 {
            if let Some(j) = c.job(id)
                && j.start == Some(t)
                && !ends.contains_key(&id)
            {
                ends.insert(id, t + jobs[id as usize - 1].3.min(j.req.time_limit));
                started.insert(id, (t, j.allocs.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(), j.req.time_limit));
            }
        }
        t += 60;
    }
    let w = trace::Workload { name: "resv".into(), nodes, jobs: reqs, capacity: 12, gpu: false, skipped: 0 };
    let cfg = SimConfig { reservations: resv, ..SimConfig::new(sched, 1) };
    let out = run(&w, 0..w.jobs.len(), &cfg, &mut || 0);
    let sim_start = |id: u64| out.jobs.iter().find(|j| j.id.0 == id).map(|j| j.start);
    let ctl_start = |id: u64| started.get(&id).map(|s| s.0);
    // Job 1 avoids both reserved nodes; job 2 runs in the team's at its start, cut to end with
    // it; job 4 fits before the maintenance on n2; job 3 waits for the maintenance to end.
    assert_eq!([1, 2, 3, 4].map(ctl_start), [Some(0), Some(600), Some(3600), Some(300)]);
    assert_eq!([1, 2, 3, 4].map(sim_start), [1, 2, 3, 4].map(ctl_start), "{out:?}");
    assert_eq!(started[&2].2, 5400, "cut to the reservation's end");
    let on = |id: u64| started[&id].1.clone();
    assert_eq!([1, 2, 3, 4].map(on), [["n0"], ["n1"], ["n2"], ["n2"]].map(|n| n.map(String::from).to_vec()));
}
