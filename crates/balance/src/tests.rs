//! Unit and property tests of the pickers, ejection and the retry rule.

use super::*;
use proptest::prelude::*;

fn pool(policy: Policy, ids: &[&str]) -> Pool<()> {
    let mut p = Pool::new(policy, Ejection::default(), 7);
    p.set_endpoints(ids.iter().copied(), |_, _| true, |_| ());
    p
}

fn id(p: &Pool<()>, k: Key) -> String {
    p.get(k).unwrap().id.clone()
}

#[test]
fn round_robin_takes_each_in_turn() {
    let mut p = pool(Policy::RoundRobin, &["a", "b", "c"]);
    let got: Vec<String> = (0..6)
        .map(|_| {
            let k = p.pick(0, &[]).unwrap();
            p.finish(k, Outcome::Ok, 0);
            id(&p, k)
        })
        .collect();
    assert_eq!(got, ["a", "b", "c", "a", "b", "c"]);
}

#[test]
fn least_request_prefers_the_idle_endpoint() {
    let mut p = pool(Policy::LeastRequest, &["a", "b"]);
    let first = p.pick(0, &[]).unwrap();
    // `first` is busy: the next two go to the other one (then both have one... ties rotate).
    let second = p.pick(0, &[]).unwrap();
    assert_ne!(first, second);
    p.finish(first, Outcome::Ok, 0);
    let third = p.pick(0, &[]).unwrap();
    assert_eq!(third, first, "the endpoint with nothing in flight wins");
}

#[test]
fn p2c_with_two_endpoints_picks_the_less_loaded() {
    let mut p = pool(Policy::P2c, &["a", "b"]);
    let busy = p.pick(0, &[]).unwrap();
    for _ in 0..20 {
        let k = p.pick(0, &[]).unwrap();
        assert_ne!(k, busy);
        p.finish(k, Outcome::Ok, 0);
    }
}

#[test]
fn retries_skip_tried_endpoints_and_run_out() {
    let mut p = pool(Policy::RoundRobin, &["a", "b"]);
    let a = p.pick(0, &[]).unwrap();
    let b = p.pick(0, &[a]).unwrap();
    assert_ne!(a, b);
    assert!(p.can_pick(&[a]) && !p.can_pick(&[a, b]));
    assert_eq!(p.pick(0, &[a, b]), None);
}

#[test]
fn consecutive_failures_eject_for_growing_times_within_the_cap() {
    let ej = Ejection { consecutive_failures: 3, base_ms: 1000, max_ms: 2500, max_percent: 50 };
    let mut p: Pool<()> = Pool::new(Policy::RoundRobin, ej, 1);
    p.set_endpoints(["a", "b"], |_, _| true, |_| ());
    let a = p.endpoints()[0].key;
    let fail = |p: &mut Pool<()>, now| {
        let mut out = false;
        for _ in 0..3 {
            let k = p.pick(now, &[p.endpoints()[1].key]).unwrap();
            assert_eq!(k, a);
            out = p.finish(k, Outcome::ConnectFailed, now);
        }
        out
    };
    assert!(fail(&mut p, 0));
    assert!(p.is_ejected(a, 999) && !p.is_ejected(a, 1000));
    // While ejected, only b is picked.
    for _ in 0..5 {
        let k = p.pick(500, &[]).unwrap();
        assert_ne!(k, a);
        p.finish(k, Outcome::Ok, 500);
    }
    assert!(fail(&mut p, 1000));
    assert!(p.is_ejected(a, 2999) && !p.is_ejected(a, 3000), "second ejection lasts twice as long");
    assert!(fail(&mut p, 3000));
    assert!(p.is_ejected(a, 5499) && !p.is_ejected(a, 5500), "capped at max_ms");
}

#[test]
fn never_ejects_more_than_the_percentage_and_still_tries_one_when_all_are_out() {
    let ej = Ejection { consecutive_failures: 1, base_ms: 1000, max_ms: 1000, max_percent: 50 };
    let mut p: Pool<()> = Pool::new(Policy::RoundRobin, ej, 1);
    p.set_endpoints(["a", "b"], |_, _| true, |_| ());
    let k = p.pick(0, &[]).unwrap();
    assert!(p.finish(k, Outcome::ServerError(500), 0));
    let other = p.pick(0, &[]).unwrap();
    assert_ne!(other, k);
    assert!(!p.finish(other, Outcome::ServerError(500), 0), "a second ejection would exceed 50%");
    // A single-endpoint service is never ejected at 50%.
    let mut one: Pool<()> = Pool::new(Policy::RoundRobin, ej, 1);
    one.set_endpoints(["x"], |_, _| true, |_| ());
    let x = one.pick(0, &[]).unwrap();
    assert!(!one.finish(x, Outcome::Reset, 0));
    // With 100% allowed, both go, and a pick still returns one of them.
    let all = Ejection { max_percent: 100, ..ej };
    let mut q: Pool<()> = Pool::new(Policy::P2c, all, 1);
    q.set_endpoints(["a", "b"], |_, _| true, |_| ());
    for _ in 0..2 {
        let k = q.pick(0, &[]).unwrap();
        assert!(q.finish(k, Outcome::Timeout, 0));
    }
    assert!(q.pick(10, &[]).is_some());
}

#[test]
fn draining_endpoints_get_nothing_new_and_go_when_idle() {
    let mut p = pool(Policy::RoundRobin, &["a", "b"]);
    let a = p.pick(0, &[]).unwrap();
    assert_eq!(id(&p, a), "a");
    p.set_endpoints(["b"], |_, _| true, |_| ());
    assert_eq!(p.endpoints().len(), 2, "a is kept while a request is in flight");
    for _ in 0..4 {
        let k = p.pick(0, &[]).unwrap();
        assert_eq!(id(&p, k), "b");
        p.finish(k, Outcome::Ok, 0);
    }
    p.finish(a, Outcome::Ok, 0);
    assert_eq!(p.endpoints().len(), 1);
    p.set_endpoints(std::iter::empty(), |_, _| true, |_| ());
    assert!(p.pick(0, &[]).is_none() && !p.has_serving());
}

#[test]
fn retry_rule() {
    assert!(should_retry(Outcome::ConnectFailed, 1, 2, true, false));
    assert!(should_retry(Outcome::ServerError(503), 2, 2, true, false));
    assert!(should_retry(Outcome::ServerError(502), 1, 2, true, false));
    assert!(!should_retry(Outcome::ServerError(500), 1, 2, true, false));
    assert!(!should_retry(Outcome::Reset, 3, 2, true, false), "bounded");
    assert!(!should_retry(Outcome::Reset, 1, 2, false, false), "body not replayable");
    assert!(!should_retry(Outcome::Timeout, 1, 2, true, true), "response already started");
    assert!(!should_retry(Outcome::Ok, 1, 2, true, false));
}

#[test]
fn policy_names_round_trip() {
    for p in [Policy::RoundRobin, Policy::LeastRequest, Policy::P2c, Policy::Llm] {
        assert_eq!(p.name().parse::<Policy>(), Ok(p));
    }
    assert!("random".parse::<Policy>().is_err());
}

proptest! {
    #[test]
    fn round_robin_is_fair(n in 1usize..8, rounds in 1usize..20) {
        let ids: Vec<String> = (0..n).map(|i| format!("r{i}")).collect();
        let mut p: Pool<()> = Pool::new(Policy::RoundRobin, Ejection::default(), 3);
        p.set_endpoints(ids.iter().map(String::as_str), |_, _| true, |_| ());
        let mut counts = vec![0usize; n];
        for _ in 0..n * rounds {
            let k = p.pick(0, &[]).unwrap();
            counts[k.0 as usize] += 1;
            p.finish(k, Outcome::Ok, 0);
        }
        prop_assert!(counts.iter().all(|&c| c == rounds), "{:?}", counts);
    }

    #[test]
    fn pickers_never_choose_draining_or_ejected_when_a_healthy_one_exists(
        policy in prop_oneof![Just(Policy::RoundRobin), Just(Policy::LeastRequest), Just(Policy::P2c)],
        seed in any::<u64>(),
        ops in proptest::collection::vec((0u8..6, 0usize..6), 1..200),
    ) {
        let ej = Ejection { consecutive_failures: 2, base_ms: 50, max_ms: 200, max_percent: 100 };
        let mut p: Pool<()> = Pool::new(policy, ej, seed);
        let all = ["a", "b", "c", "d", "e", "f"];
        p.set_endpoints(all.iter().copied(), |_, _| true, |_| ());
        let mut open: Vec<Key> = Vec::new();
        let mut now = 0u64;
        for (op, x) in ops {
            now += 7;
            match op {
                0 | 1 => {
                    let healthy: Vec<Key> =
                        p.endpoints().iter().filter(|e| !e.draining && !p.is_ejected(e.key, now)).map(|e| e.key).collect();
                    let serving = p.has_serving();
                    match p.pick(now, &[]) {
                        Some(k) => {
                            let e = p.get(k).unwrap();
                            prop_assert!(!e.draining, "picked a draining endpoint");
                            if !healthy.is_empty() {
                                prop_assert!(healthy.contains(&k), "picked an ejected endpoint while a healthy one exists");
                            }
                            open.push(k);
                        }
                        None => prop_assert!(!serving),
                    }
                }
                2 if !open.is_empty() => {
                    let k = open.remove(x % open.len());
                    p.finish(k, Outcome::ConnectFailed, now);
                }
                3 if !open.is_empty() => {
                    let k = open.remove(x % open.len());
                    p.finish(k, Outcome::Ok, now);
                }
                4 => {
                    // A new view: a subset of the replicas serves.
                    let keep: Vec<&str> = all.iter().copied().enumerate().filter(|(i, _)| (x >> (i % 3)) & 1 == 0 || *i == x).map(|(_, s)| s).collect();
                    p.set_endpoints(keep, |_, _| true, |_| ());
                }
                _ => {}
            }
            let inflight: u64 = p.endpoints().iter().map(|e| e.inflight as u64).sum();
            prop_assert_eq!(inflight, open.len() as u64, "in-flight counts follow picks and finishes");
            prop_assert!(open.iter().all(|k| p.get(*k).is_some()), "an endpoint with requests in flight is never forgotten");
        }
    }
}
