//! Advance reservations in the scheduler: jobs outside never overlap one, jobs inside use only
//! its nodes and end with it, repetition (`DAILY`, `WEEKLY`), `FLEX`, `MAGNETIC`, and the
//! pending reasons, under each backfill mode, in virtual time.

mod common;

use common::{World, job, nodes};
use model::resv::DAY;
use model::{PendingReason, Reservation, ResvFlags, Time};
use sched::{Backfill, Config, Policy};

fn cfg(backfill: Backfill) -> Config {
    Config { policy: Policy::Fcfs, backfill, ..Config::default() }
}

fn resv(name: &str, start: Time, end: Time, nodes: &[&str], users: &[&str]) -> Reservation {
    Reservation {
        name: name.into(),
        start,
        end,
        nodes: nodes.iter().map(|n| n.to_string()).collect(),
        users: users.iter().map(|n| n.to_string()).collect(),
        users_negated: false,
        accounts: Vec::new(),
        accounts_negated: false,
        partition: None,
        flags: ResvFlags::default(),
        tres: String::new(),
    }
}

fn reason(plan: &sched::Plan, id: u64) -> PendingReason {
    plan.waiting.iter().find(|w| w.job.0 == id).map(|w| w.reason).unwrap_or_else(|| panic!("job {id} not waiting: {plan:?}"))
}

fn started_on(plan: &sched::Plan, id: u64) -> Option<Vec<u32>> {
    plan.starts.iter().find(|s| s.job.0 == id).map(|s| s.allocs.iter().map(|a| a.node).collect())
}

const MODES: [Backfill; 3] = [Backfill::Easy, Backfill::Conservative, Backfill::None];

#[test]
fn a_job_outside_never_overlaps_a_future_maintenance_but_a_short_one_runs_before_it() {
    for mode in MODES {
        // Two nodes; n000 is busy until t=100. A maintenance on n001 from t=20 to t=60.
        let mut w = World::new(nodes(2, 4, 0, 2));
        let mut m = resv("maint", 20, 60, &["n001"], &["root"]);
        m.flags.maint = true;
        w.reservations.push(m);
        w.submit(job(1, 0, 100, 1, 0, 4));
        let p = w.pass(0, &cfg(mode));
        w.apply(&p, 0);
        assert_eq!(started_on(&p, 1), Some(vec![0]), "{mode:?}: the long job avoids the reserved node");
        w.submit(job(2, 1, 100, 1, 0, 4)); // would overlap the maintenance on n001
        w.submit(job(3, 2, 15, 1, 0, 4)); // ends at 16 < 20: runs on n001 before it
        let p = w.pass(1, &cfg(mode));
        assert!(started_on(&p, 2).is_none(), "{mode:?}");
        if mode != Backfill::None {
            assert_eq!(started_on(&p, 3), Some(vec![1]), "{mode:?}: the short job backfills before the window");
            assert_eq!(p.starts.iter().find(|s| s.job.0 == 3).unwrap().time_limit, None, "not in a reservation: not cut");
            w.apply(&p, 1);
            w.finish(3);
        } else {
            assert!(p.starts.is_empty(), "no backfill: job 2 is first and waits");
            w.pending.retain(|x| x.req.id.0 != 3);
        }
        // During the window a job that needs n001 waits with Slurm's maintenance reason.
        let mut pinned = job(4, 30, 10, 1, 0, 1);
        pinned.nodelist = vec!["n001".into()];
        w.submit(pinned);
        let p = w.pass(30, &cfg(mode));
        assert_eq!(reason(&p, 4), PendingReason::ReservedForMaintenance, "{mode:?}");
        assert_eq!(PendingReason::ReservedForMaintenance.code(), "ReqNodeNotAvail, Reserved for maintenance");
        assert!(p.starts.is_empty(), "{mode:?}: nothing lands on n001 in the window: {p:?}");
        // After it, n001 takes work again.
        let p = w.pass(60, &cfg(mode));
        assert!(started_on(&p, 4) == Some(vec![1]) || started_on(&p, 2) == Some(vec![1]), "{mode:?}: {p:?}");
    }
}

#[test]
fn a_job_inside_uses_only_its_nodes_waits_for_the_start_and_ends_with_it() {
    for mode in MODES {
        let mut w = World::new(nodes(3, 4, 0, 3));
        w.reservations.push(resv("team", 50, 150, &["n002"], &["alice"]));
        let mut j = job(1, 0, 1000, 1, 0, 4);
        j.user = "alice".into();
        j.reservation = Some("team".into());
        w.submit(j);
        let p = w.pass(0, &cfg(mode));
        assert_eq!(reason(&p, 1), PendingReason::Reservation, "{mode:?}: before its window");
        let p = w.pass(50, &cfg(mode));
        assert_eq!(started_on(&p, 1), Some(vec![2]), "{mode:?}: on the reserved node only, though others are free");
        assert_eq!(p.starts[0].time_limit, Some(100), "{mode:?}: cut to end with the reservation");
        // A job outside does not touch n002 while the reservation holds it.
        w.apply(&p, 50);
        w.submit(job(2, 51, 10, 3, 0, 1));
        let p = w.pass(60, &cfg(mode));
        assert_eq!(reason(&p, 2), PendingReason::ReservedNodes, "{mode:?}");
        assert_eq!(PendingReason::ReservedNodes.code(), "ReqNodeNotAvail, May be reserved for other job");
        // A deleted reservation leaves its jobs waiting with the reason.
        let mut k = job(3, 61, 10, 1, 0, 1);
        k.reservation = Some("gone".into());
        w.submit(k);
        let p = w.pass(61, &cfg(mode));
        assert_eq!(reason(&p, 3), PendingReason::ReservationDeleted, "{mode:?}");
    }
}

#[test]
fn daily_and_weekly_reservations_repeat_in_virtual_time() {
    for (flag, period) in [("DAILY", DAY), ("WEEKLY", 7 * DAY)] {
        let mut w = World::new(nodes(1, 4, 0, 1));
        let mut r = resv("r", 100, 200, &["n000"], &["alice"]);
        assert!(r.flags.set(flag, true));
        w.reservations.push(r);
        // Outside: a job that would overlap the next occurrence waits; a short one runs.
        w.submit(job(1, 0, 150, 1, 0, 4));
        let t = period + 10;
        let p = w.pass(t, &cfg(Backfill::Easy));
        assert_eq!(reason(&p, 1), PendingReason::ReservedNodes, "{flag}: overlaps [{}, {})", period + 100, period + 200);
        let p = w.pass(period + 200, &cfg(Backfill::Easy));
        assert_eq!(started_on(&p, 1), Some(vec![0]), "{flag}: after the occurrence");
        // Inside: runs in an occurrence, waits between them.
        let mut w = World::new(nodes(1, 4, 0, 1));
        let mut r = resv("r", 100, 200, &["n000"], &["alice"]);
        r.flags.set(flag, true);
        w.reservations.push(r);
        let mut j = job(2, 0, 1000, 1, 0, 4);
        j.user = "alice".into();
        j.reservation = Some("r".into());
        w.submit(j);
        assert_eq!(reason(&w.pass(3 * period + 250, &cfg(Backfill::Easy)), 2), PendingReason::Reservation, "{flag}");
        let p = w.pass(3 * period + 150, &cfg(Backfill::Easy));
        assert_eq!((started_on(&p, 2), p.starts[0].time_limit), (Some(vec![0]), Some(50)), "{flag}");
    }
}

#[test]
fn flex_lets_a_job_start_early_and_outside_magnetic_draws_allowed_jobs_in() {
    let mut w = World::new(nodes(2, 4, 0, 2));
    let mut f = resv("flex", 100, 200, &["n000"], &["alice"]);
    f.flags.flex = true;
    w.reservations.push(f);
    let mut j = job(1, 0, 1000, 1, 0, 4);
    j.user = "alice".into();
    j.reservation = Some("flex".into());
    w.submit(j);
    let p = w.pass(0, &cfg(Backfill::Easy));
    assert!(started_on(&p, 1).is_some(), "FLEX: before its window, not cut: {p:?}");
    assert_eq!(p.starts[0].time_limit, None);

    // MAGNETIC: alice's job without --reservation lands in it; bob's does not.
    let mut w = World::new(nodes(1, 4, 0, 1));
    let mut m = resv("mag", 0, 100, &["n000"], &["alice"]);
    m.flags.magnetic = true;
    w.reservations.push(m);
    let mut bob = job(1, 0, 50, 1, 0, 2);
    bob.user = "bob".into();
    let mut alice = job(2, 0, 50, 1, 0, 2);
    alice.user = "alice".into();
    w.submit(bob);
    w.submit(alice);
    let p = w.pass(10, &cfg(Backfill::Easy));
    assert_eq!(started_on(&p, 2), Some(vec![0]));
    assert!(started_on(&p, 1).is_none());
}

#[test]
fn access_is_checked_again_and_an_overlapping_maintenance_keeps_a_job_inside_off_its_node() {
    let mut w = World::new(nodes(2, 4, 0, 2));
    let mut team = resv("team", 0, 1000, &["n000", "n001"], &["alice"]);
    team.flags.overlap = true;
    w.reservations.push(team);
    let mut m = resv("maint", 100, 200, &["n001"], &["root"]);
    m.flags.maint = true;
    m.flags.overlap = true;
    w.reservations.push(m);
    let mut bob = job(1, 0, 50, 1, 0, 4);
    bob.user = "bob".into();
    bob.reservation = Some("team".into());
    w.submit(bob);
    let p = w.pass(10, &cfg(Backfill::Easy));
    assert_eq!(reason(&p, 1), PendingReason::Reservation, "bob is not (or no longer) among its users");
    // Alice's two jobs of 500 s: only n000 is free of the maintenance for that long.
    for id in [2, 3] {
        let mut j = job(id, 0, 500, 1, 0, 4);
        j.user = "alice".into();
        j.reservation = Some("team".into());
        w.submit(j);
    }
    let p = w.pass(10, &cfg(Backfill::Easy));
    assert_eq!(started_on(&p, 2), Some(vec![0]));
    assert!(started_on(&p, 3).is_none(), "n001's maintenance overlaps its run: {p:?}");
}

#[test]
fn no_job_outside_ever_overlaps_a_reservation_on_random_workloads() {
    // A seeded sweep: random jobs over random reservations, passes every 5 s; each start outside
    // a reservation ends before any window on its nodes begins or starts after it ends, and
    // each start inside is on its nodes, within its window.
    let mut seed = 0x5eed_u64;
    let mut next = |m: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % m
    };
    for mode in MODES {
        for _case in 0..20 {
            let mut w = World::new(nodes(6, 4, 0, 3));
            for k in 0..3 {
                let start = next(200) as Time;
                let node = format!("n{:03}", next(6));
                let mut r = resv(&format!("r{k}"), start, start + 20 + next(100) as Time, &[node.as_str()], &["alice"]);
                r.flags.overlap = true;
                w.reservations.push(r);
            }
            for id in 1..=30u64 {
                let mut j = job(id, 0, 5 + next(120) as Time, 1 + next(2) as u32, 0, 1 + next(4) as u32);
                if next(4) == 0 {
                    j.user = "alice".into();
                    j.reservation = Some(format!("r{}", next(3)));
                    j.shape.nodes_min = 1;
                    j.shape.nodes_max = 1;
                    j.shape.ntasks = 1;
                }
                w.submit(j);
            }
            let mut t = 0;
            while t < 400 {
                let p = w.pass(t, &cfg(mode));
                for s in &p.starts {
                    let req = &w.pending.iter().find(|x| x.req.id == s.job).unwrap().req;
                    let end = t + s.time_limit.unwrap_or(req.time_limit);
                    for a in &s.allocs {
                        let name = &w.nodes[a.node as usize].name;
                        for r in &w.reservations {
                            let inside = req.reservation.as_deref() == Some(r.name.as_str());
                            if inside {
                                let (ws, we) = r.window(t).unwrap();
                                assert!(
                                    r.holds(name) && ws <= t && end <= we,
                                    "{mode:?}: job {} in {} off its nodes or window",
                                    s.job.0,
                                    r.name
                                );
                            } else if req.reservation.is_none() && r.holds(name) {
                                // (A job in one reservation may share an OVERLAP one's node.)
                                assert!(!r.overlaps(t, end), "{mode:?}: job {} [{t}, {end}) overlaps {} on {name}", s.job.0, r.name);
                            }
                        }
                    }
                }
                w.apply(&p, t);
                // Jobs end at their limits.
                let done: Vec<u64> = w.running.iter().filter(|r| r.start + r.req.time_limit <= t + 5).map(|r| r.req.id.0).collect();
                for id in done {
                    w.finish(id);
                }
                t += 5;
            }
        }
    }
}
