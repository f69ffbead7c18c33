//! Unit and property tests of the weighted fair queue: fair order by tokens, its bound,
//! admission by expected wait, and hostile inputs.

use super::*;
use crate::Rng;
use proptest::prelude::*;

fn queue() -> FairQueue<u32> {
    FairQueue::new(FairConfig::default()).unwrap()
}

#[test]
fn equal_weights_alternate_by_cost_not_by_requests() {
    let mut q = queue();
    // "big" sends requests 4 times as costly as "small"'s.
    for i in 0..10 {
        q.push("big", i, 400, 0).unwrap();
        q.push("small", 100 + i, 100, 0).unwrap();
    }
    let order: Vec<String> = (0..10).map(|_| q.pop(0).unwrap().tenant).collect();
    // One big request buys the small tenant four of its own.
    let small = order.iter().filter(|t| *t == "small").count();
    assert!((7..=9).contains(&small), "{order:?}");
}

#[test]
fn weights_share_service_in_proportion() {
    let mut q = queue();
    q.set_weight("gold", 3).unwrap();
    for i in 0..400 {
        q.push("gold", i, 10, 0).unwrap();
        q.push("free", i, 10, 0).unwrap();
    }
    let served: Vec<String> = (0..400).map(|_| q.pop(0).unwrap().tenant).collect();
    let gold = served.iter().filter(|t| *t == "gold").count();
    assert!((299..=301).contains(&gold), "gold got {gold} of 400");
}

#[test]
fn fifo_within_a_tenant_and_earlier_first_on_ties() {
    let mut q = queue();
    q.push("a", 1, 5, 0).unwrap();
    q.push("b", 2, 5, 1).unwrap();
    q.push("a", 3, 5, 2).unwrap();
    let got: Vec<u32> = std::iter::from_fn(|| q.pop(3).map(|x| x.item)).collect();
    assert_eq!(got, [1, 2, 3]);
    assert!(q.is_empty() && q.pop(4).is_none());
}

#[test]
fn an_idle_tenant_does_not_bank_credit() {
    let mut q = queue();
    for i in 0..100 {
        q.push("busy", i, 10, 0).unwrap();
    }
    for _ in 0..50 {
        q.pop(0).unwrap();
    }
    // "late" arrives now: it starts at the busy tenant's counter, not at 0, so it does not
    // get the next 50 turns in a row.
    for i in 0..10 {
        q.push("late", i, 10, 0).unwrap();
    }
    let next: Vec<String> = (0..10).map(|_| q.pop(0).unwrap().tenant).collect();
    assert!(next.iter().filter(|t| *t == "busy").count() >= 4, "{next:?}");
}

/// Serves `n` requests from a queue whose departures establish a rate of `per_ms` cost per ms.
fn warm(q: &mut FairQueue<u32>, tenant: &str, cost: u64, n: u64) -> u64 {
    let mut now = 0;
    for i in 0..n {
        q.push(tenant, i as u32, cost, now).unwrap();
        q.pop(now).unwrap();
        now += 10;
    }
    now
}

#[test]
fn admission_refuses_the_noisy_tenant_and_admits_the_quiet_one() {
    let cfg = FairConfig { max_wait_ms: 1_000, rate_min_span_ms: 0, ..FairConfig::default() };
    let mut q: FairQueue<u32> = FairQueue::new(cfg).unwrap();
    // 100 units every 10 ms: 10 units per ms.
    let mut now = warm(&mut q, "noisy", 100, 50);
    // The noisy tenant queues 9,000 units (900 ms of work): still admitted...
    for i in 0..90 {
        q.push("noisy", i, 100, now).unwrap();
    }
    assert!(q.expected_wait_ms("noisy", now).unwrap() >= 900);
    // ...but more would wait past the bound.
    let mut refused = None;
    for i in 0..100 {
        if let Err(r) = q.push("noisy", 1000 + i, 100, now) {
            refused = Some(r);
            break;
        }
    }
    let r = refused.expect("the noisy tenant is refused");
    assert!(matches!(r.reason, Refusal::Wait(w) if w > 1_000));
    assert!(r.retry_after_s >= 1 && r.retry_after_s <= 60);
    // The quiet tenant has nothing queued: it waits about one of the noisy tenant's turns.
    let w = q.expected_wait_ms("quiet", now).unwrap();
    assert!(w <= 100, "quiet would wait {w} ms");
    q.push("quiet", 7, 100, now).unwrap();
    now += 10;
    let first: Vec<String> = (0..2).map(|_| q.pop(now).unwrap().tenant).collect();
    assert!(first.contains(&"quiet".to_string()), "{first:?}");
}

#[test]
fn retry_after_grows_with_the_excess_and_is_capped() {
    let cfg = FairConfig { max_wait_ms: 100, max_retry_after_s: 5, rate_min_span_ms: 0, ..FairConfig::default() };
    let mut q: FairQueue<u32> = FairQueue::new(cfg).unwrap();
    let now = warm(&mut q, "a", 10, 20); // 1 unit per ms
    q.push("a", 0, 50, now).unwrap();
    let r = q.push("a", 1, 10, now).map(|_| ()).err();
    assert!(r.is_none(), "50 ms ahead is within 100 ms");
    q.push("a", 2, 1_000, now).unwrap(); // 60 ahead: admitted; now 1,060 queued
    let r = q.push("a", 3, 10, now).unwrap_err();
    assert_eq!(r.reason, Refusal::Wait(1_060));
    assert_eq!(r.retry_after_s, 1); // 960 ms over: 1 s
    // A tenant with nothing ahead is admitted whatever its cost; its next request is not.
    q.push("c", 4, 100_000, now).unwrap();
    let r = q.push("c", 5, 1, now).unwrap_err();
    assert_eq!(r.reason, Refusal::Wait(101_060));
    assert_eq!(r.retry_after_s, 5, "capped");
}

#[test]
fn full_queue_and_unknown_rate() {
    let cfg = FairConfig { max_queued: 3, ..FairConfig::default() };
    let mut q: FairQueue<u32> = FairQueue::new(cfg).unwrap();
    // No departures yet: no estimate, admitted up to max_queued.
    for i in 0..3 {
        q.push("a", i, 1_000_000, 0).unwrap();
    }
    assert_eq!(q.expected_wait_ms("a", 0), None);
    let r = q.push("b", 9, 1, 0).unwrap_err();
    assert_eq!((r.item, r.reason), (9, Refusal::Full));
    assert!(r.retry_after_s >= 1);
}

#[test]
fn expire_remove_and_settle() {
    let cfg = FairConfig { max_wait_ms: 100, expire_ms: 100, ..FairConfig::default() };
    let mut q: FairQueue<u32> = FairQueue::new(cfg).unwrap();
    q.push("a", 1, 10, 0).unwrap();
    q.push("b", 2, 10, 50).unwrap();
    q.push("a", 3, 10, 90).unwrap();
    let old = q.expire(120);
    assert_eq!(old.iter().map(|x| x.item).collect::<Vec<_>>(), [1]);
    assert_eq!(q.len(), 2);
    let gone = q.remove_if(|x| *x == 3);
    assert_eq!(gone.len(), 1);
    assert_eq!((q.len(), q.queued("a"), q.queued("b")), (1, 0, 1));
    let x = q.pop(130).unwrap();
    assert_eq!(q.counter("b"), 10.0);
    q.settle(&x.tenant, x.cost, 4);
    assert_eq!(q.counter("b"), 4.0);
    q.settle("b", 0, u64::MAX);
    q.settle("nobody", 5, 1);
    assert!(q.counter("b").is_finite());
}

#[test]
fn zero_weights_are_refused_and_costs_clamped() {
    assert_eq!(
        FairQueue::<u32>::new(FairConfig { default_weight: 0, ..FairConfig::default() }).err(),
        Some(FairError::ZeroWeight { tenant: String::new() })
    );
    let mut q = queue();
    assert!(q.set_weight("t", 0).is_err());
    assert_eq!(q.weight("t"), 1);
    q.push("t", 1, 0, 0).unwrap();
    assert_eq!(q.pop(0).unwrap().cost, 1);
    q.push("t", 2, u64::MAX, 0).unwrap();
    q.push("t", 3, u64::MAX, 0).unwrap();
    assert_eq!(q.cost_ahead("t"), u64::MAX);
    assert_eq!(request_cost(0, 0), 1);
    assert_eq!(request_cost(400, 100), 300);
    assert_eq!(request_cost(u64::MAX, u64::MAX), u64::MAX);
}

proptest! {
    /// `peek` names what `pop` takes next, and changes nothing.
    #[test]
    fn peek_is_the_next_pop(
        ops in proptest::collection::vec((0usize..4, 1u64..300, 0u64..50), 1..120),
    ) {
        let mut q: FairQueue<u64> = FairQueue::new(FairConfig::default()).unwrap();
        q.set_weight("t1", 2).unwrap();
        let (mut now, mut id) = (0u64, 0u64);
        for (t, cost, dt) in ops {
            now += dt;
            if t == 3 {
                let peeked = q.peek().map(|(n, i)| (n.to_string(), *i));
                let len = q.len();
                prop_assert_eq!(q.peek().map(|(n, i)| (n.to_string(), *i)), peeked.clone(), "peek is stable");
                prop_assert_eq!(q.len(), len);
                let popped = q.pop(now).map(|x| (x.tenant, x.item));
                prop_assert_eq!(popped, peeked);
            } else {
                id += 1;
                let _ = q.push(&format!("t{t}"), id, cost, now);
            }
        }
    }

    /// Tenants kept backlogged are served in proportion to their weights: the service (cost)
    /// each received divided by its weight differs by at most one request's cost / weight.
    #[test]
    fn backlogged_tenants_get_service_in_proportion_to_weight(
        weights in proptest::collection::vec(1u32..10, 2..6),
        costs in proptest::collection::vec(1u64..200, 1..50),
        pops in 1usize..600,
    ) {
        let mut q: FairQueue<usize> = FairQueue::new(FairConfig { max_queued: usize::MAX, ..FairConfig::default() }).unwrap();
        let names: Vec<String> = (0..weights.len()).map(|i| format!("t{i}")).collect();
        for (n, w) in names.iter().zip(&weights) {
            q.set_weight(n, *w).unwrap();
        }
        let mut next = 0usize;
        let mut cost = || { next += 1; costs[next % costs.len()] };
        for n in &names {
            for _ in 0..2 {
                q.push(n, 0, cost(), 0).unwrap();
            }
        }
        let mut served = vec![0u64; names.len()];
        for step in 0..pops {
            let x = q.pop(step as u64).unwrap();
            let i = names.iter().position(|n| *n == x.tenant).unwrap();
            served[i] += x.cost;
            q.push(&x.tenant, step, cost(), step as u64).unwrap();
        }
        let delta = names.iter().zip(&weights).map(|(_, w)| *costs.iter().max().unwrap() as f64 / *w as f64).fold(0.0, f64::max);
        let norm: Vec<f64> = served.iter().zip(&weights).map(|(s, w)| *s as f64 / *w as f64).collect();
        let (lo, hi) = norm.iter().fold((f64::MAX, 0.0f64), |(l, h), x| (l.min(*x), h.max(*x)));
        prop_assert!(hi - lo <= delta + 1e-6, "normalised service {:?}, bound {}", norm, delta);
    }

    /// Any sequence of pushes, pops, weights, settlements and expiries: no panic, the length
    /// is the number queued, and a pop takes a request of a tenant with the smallest counter.
    #[test]
    fn fair_queue_never_panics(ops in proptest::collection::vec((0u8..6, 0usize..5, any::<u64>(), any::<u32>()), 1..200)) {
        let mut q: FairQueue<u64> = FairQueue::new(FairConfig { max_queued: 50, max_wait_ms: 500, min_samples: 2, ..FairConfig::default() }).unwrap();
        let tenants = ["", "a", "b", "ü\u{0}", "long-tenant-name"];
        let mut now = 0u64;
        let mut queued = 0usize;
        for (op, t, x, w) in ops {
            now += u64::from(w % 50);
            let tenant = tenants[t];
            match op {
                0 | 1 => {
                    let cost = if x % 3 == 0 { x } else { x % 1000 };
                    if q.push(tenant, x, cost, now).is_ok() { queued += 1 }
                }
                2 => {
                    let before: Vec<f64> = tenants.iter().map(|n| q.counter(n)).collect();
                    let min = tenants.iter().zip(&before).filter(|(n, _)| q.queued(n) > 0).map(|(_, c)| *c).fold(f64::MAX, f64::min);
                    if let Some(x) = q.pop(now) {
                        let i = tenants.iter().position(|n| *n == x.tenant).unwrap();
                        prop_assert!(before[i] <= min, "served {} at {} while the smallest was {}", x.tenant, before[i], min);
                        queued -= 1;
                    } else {
                        prop_assert_eq!(queued, 0);
                    }
                }
                3 => { let _ = q.set_weight(tenant, w % 4); }
                4 => q.settle(tenant, x % 1000, u64::from(w)),
                _ => queued -= q.expire(now).len(),
            }
            prop_assert_eq!(q.len(), queued);
            prop_assert!(tenants.iter().all(|n| q.counter(n).is_finite() && q.counter(n) >= 0.0));
        }
    }
}

/// The proxy's loop in virtual time: 4 replicas with 4 slots each (`max_inflight`), requests of
/// 100 ms; a quiet tenant at 10 requests/s and a noisy one at 300/s, twice the 160/s capacity.
/// Requests that find every slot taken (or others queued) wait in the fair queue. The quiet
/// tenant is never refused and waits at most about one request time; the noisy one is refused
/// (429 with a Retry-After) rather than left to time out in the queue.
#[test]
fn a_noisy_tenant_is_shed_and_the_quiet_one_barely_waits() {
    let llm = LlmConfig { max_inflight: Some(4), ..LlmConfig::default() };
    let mut pool: Pool<()> = Pool::new(Policy::Llm, Ejection::default(), 5);
    pool.set_llm_config(llm);
    pool.set_endpoints(["r0", "r1", "r2", "r3"], |_, _| true, |_| ());
    let cfg = FairConfig { max_wait_ms: 1_000, expire_ms: 1_500, ..FairConfig::default() };
    let mut q: FairQueue<()> = FairQueue::new(cfg).unwrap();
    let mut rng = Rng::new(42);
    let mut running: Vec<(u64, Key)> = Vec::new();
    let (mut waits, mut refused, mut expired, mut served) = ([Vec::new(), Vec::new()], [0u32; 2], [0usize; 2], [0u32; 2]);
    let names = ["quiet", "noisy"];
    let none = LlmRequest::default();
    for now in 0..20_000u64 {
        let mut i = 0;
        while i < running.len() {
            if running[i].0 <= now {
                pool.finish(running.swap_remove(i).1, Outcome::Ok, now);
            } else {
                i += 1;
            }
        }
        while !q.is_empty() && pool.inflight() < 16 {
            let x = q.pop(now).unwrap();
            let Pick::To(k) = pool.pick_llm(now, &[], &none) else { panic!("a slot is free") };
            running.push((now + 100, k));
            let t = names.iter().position(|n| *n == x.tenant).unwrap();
            waits[t].push(now - x.enqueued_at_ms);
            served[t] += 1;
        }
        for x in q.expire(now) {
            expired[names.iter().position(|n| *n == x.tenant).unwrap()] += 1;
        }
        for (t, per_s) in [(0usize, 10usize), (1, 300)] {
            if rng.below(1000) >= per_s {
                continue;
            }
            let direct = if q.is_empty() { pool.pick_llm(now, &[], &none) } else { Pick::Full };
            match direct {
                Pick::To(k) => {
                    running.push((now + 100, k));
                    waits[t].push(0);
                    served[t] += 1;
                }
                Pick::Full => {
                    if let Err(r) = q.push(names[t], (), 100, now) {
                        assert!(r.retry_after_s >= 1);
                        refused[t] += 1;
                    }
                }
                Pick::Nothing => unreachable!("replicas serve"),
            }
        }
    }
    let max_quiet = waits[0].iter().max().copied().unwrap_or(0);
    assert_eq!(refused[0], 0, "the quiet tenant is never refused");
    assert_eq!(expired[0], 0);
    assert!(max_quiet <= 110, "quiet tenant waited {max_quiet} ms");
    assert!(refused[1] > 1_000, "noisy refused {}", refused[1]);
    assert!((expired[1] as u32) * 100 < refused[1], "noisy: {} expired, {} refused", expired[1], refused[1]);
    let max_noisy = waits[1].iter().max().copied().unwrap_or(0);
    assert!(max_noisy <= 1_500, "an admitted noisy request waited {max_noisy} ms");
    // The noisy tenant still gets the rest of the capacity (about 150 of 160 requests/s).
    assert!(served[1] > 2_700, "noisy served {}", served[1]);
}
