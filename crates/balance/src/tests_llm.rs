//! Unit and property tests of prefix hashing, the prefix index, the LLM picker's rule
//! (`llm::choose`) and `Pool::pick_llm`.

use super::*;
use crate::Rng;
use crate::llm::{Candidate, Route, choose, load_bound, replica_hash};
use proptest::prelude::*;

fn cfg() -> PrefixConfig {
    PrefixConfig::default()
}

fn llm_pool(ids: &[&str], llm: LlmConfig, seed: u64) -> Pool<()> {
    let mut p = Pool::new(Policy::Llm, Ejection::default(), seed);
    p.set_llm_config(llm);
    p.set_endpoints(ids.iter().copied(), |_, _| true, |_| ());
    p
}

fn req(prompt: &[u8]) -> LlmRequest {
    LlmRequest::new("m", Some(prompt), None, &cfg())
}

fn to(p: &mut Pool<()>, now: u64, tried: &[Key], r: &LlmRequest) -> Key {
    match p.pick_llm(now, tried, r) {
        Pick::To(k) => {
            assert!(p.get(k).is_some());
            k
        }
        other => panic!("expected an endpoint, got {other:?}"),
    }
}

/// A prompt of `n` bytes made from `seed` (distinct seeds differ from the first byte).
fn text(seed: u64, n: usize) -> Vec<u8> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| b'a' + (r.below(26) as u8)).collect()
}

#[test]
fn blocks_are_whole_chained_and_bounded() {
    let c = cfg();
    assert!(block_hashes(b"m", b"", &c).is_empty());
    assert!(block_hashes(b"m", &[b'x'; 63], &c).is_empty(), "no partial block");
    assert_eq!(block_hashes(b"m", &[b'x'; 64], &c).len(), 1);
    assert_eq!(block_hashes(b"m", &[b'x'; 200], &c).len(), 3);
    assert_eq!(block_hashes(b"m", &vec![b'x'; 1 << 20], &c).len(), MAX_BLOCKS_FOR_TEST);
    // Repeated identical blocks still get distinct hashes: each covers all before it.
    let h = block_hashes(b"m", &[b'x'; 256], &c);
    assert_eq!(h.iter().collect::<std::collections::BTreeSet<_>>().len(), 4);
    // The context (model) separates otherwise equal prompts.
    assert_ne!(block_hashes(b"a", &[b'x'; 64], &c), block_hashes(b"b", &[b'x'; 64], &c));
    // A change in block 1 changes blocks 1.. but not block 0.
    let mut p = text(1, 256);
    let before = block_hashes(b"m", &p, &c);
    p[100] ^= 1;
    let after = block_hashes(b"m", &p, &c);
    assert_eq!(before[0], after[0]);
    assert!(before[1..].iter().zip(&after[1..]).all(|(a, b)| a != b));
    // Block size 0 is read as 1, max_blocks 0 gives none: no panic.
    assert_eq!(block_hashes(b"", b"abc", &PrefixConfig { block_bytes: 0, max_blocks: 10 }).len(), 3);
    assert!(block_hashes(b"", b"abc", &PrefixConfig { block_bytes: 1, max_blocks: 0 }).is_empty());
    assert_eq!(c.max_bytes(), 64 * 256);
}

const MAX_BLOCKS_FOR_TEST: usize = prefix::MAX_BLOCKS;

#[test]
fn block_hashes_are_stable_across_versions() {
    // Proxies of different versions must agree on placement: the hash function is fixed.
    let h = block_hashes(b"model", &[b'a'; 128], &cfg());
    assert_eq!(h, block_hashes(b"model", &[b'a'; 128], &cfg()));
    assert_eq!(h.len(), 2);
    assert_eq!((h[0].0, h[1].0), (STABLE.0, STABLE.1), "got {:#x} {:#x}", h[0].0, h[1].0);
}

const STABLE: (u64, u64) = (0xe2aa_f433_65b4_1bea, 0x227f_100a_00f8_0a72);

#[test]
fn index_holds_leading_blocks_and_evicts_tails_first() {
    let mut ix = PrefixIndex::new(6);
    let a = block_hashes(b"", &text(1, 64 * 4), &cfg());
    let b = block_hashes(b"", &text(2, 64 * 4), &cfg());
    let r = Key(0);
    ix.record(r, &a);
    assert_eq!(ix.hit(r, &a), 4);
    assert_eq!(ix.hit(Key(1), &a), 0);
    ix.record(r, &b);
    // Capacity 6: b's 4 blocks and a's first two survive (a's tail went first).
    assert_eq!(ix.len(r), 6);
    assert_eq!(ix.hit(r, &b), 4);
    assert_eq!(ix.hit(r, &a), 2);
    // Only the leading run counts.
    let mut gap = a.clone();
    gap[0] = BlockHash(12345);
    assert_eq!(ix.hit(r, &gap), 0);
    ix.forget(r);
    assert_eq!(ix.hit(r, &b), 0);
    assert!(ix.is_empty());
    let mut none = PrefixIndex::new(0);
    none.record(r, &a);
    assert!(none.is_empty() && none.hit(r, &a) == 0);
}

#[test]
fn load_bound_is_c_times_average_rounded_up() {
    assert_eq!(load_bound(0, 4, 125, 0), 1);
    assert_eq!(load_bound(7, 4, 125, 0), 3); // 1.25 * 8 / 4 = 2.5
    assert_eq!(load_bound(8, 4, 125, 0), 3); // 1.25 * 9 / 4 = 2.8
    assert_eq!(load_bound(8, 4, 125, 1), 4);
    assert_eq!(load_bound(12, 4, 100, 0), 4); // 13 / 4 = 3.25
    assert_eq!(load_bound(12, 4, 50, 0), 4, "c under 1 is read as 1");
    assert_eq!(load_bound(5, 0, 125, 1), u64::MAX);
    assert_eq!(load_bound(u64::MAX, 1, u32::MAX, u32::MAX), u64::MAX);
}

fn cand(id: &str, inflight: u32, hit: usize) -> Candidate {
    Candidate { id_hash: replica_hash(id), inflight, gauges: None, hit }
}

#[test]
fn prefix_affinity_wins_under_the_bound_and_loses_above_it() {
    let c = LlmConfig::default();
    let blocks = block_hashes(b"", &text(5, 64 * 10), &cfg());
    // "a" holds all 10 blocks and is busier (bound = ceil(1.25 * 6 / 3) + 1 = 4): it wins.
    let cs = [cand("a", 3, 10), cand("b", 1, 0), cand("c", 1, 0)];
    assert_eq!(choose(&cs, Route::Prefix(&blocks), 0, 0, &c), Some(0));
    // Far above average (bound = ceil(1.25 * 11 / 3) + 1 = 6, a has 8): it loses the request.
    let cs = [cand("a", 8, 10), cand("b", 1, 0), cand("c", 1, 0)];
    assert_ne!(choose(&cs, Route::Prefix(&blocks), 0, 0, &c), Some(0));
    // Partial hits: the longer one wins at equal load.
    let cs = [cand("a", 2, 3), cand("b", 2, 7), cand("c", 2, 0)];
    assert_eq!(choose(&cs, Route::Prefix(&blocks), 0, 0, &c), Some(1));
}

#[test]
fn fresh_gauges_count_and_stale_ones_do_not() {
    let c = LlmConfig::default();
    let blocks = block_hashes(b"", &text(6, 64 * 4), &cfg());
    let busy = Gauges { running: 30, waiting: 20, kv_usage: 0.99, scraped_at_ms: 10_000, seen_inflight: 0 };
    let mut a = cand("a", 0, 4);
    a.gauges = Some(busy);
    let b = cand("b", 0, 0);
    // Fresh: a's queue (50) puts it far above the bound; b gets it.
    assert_eq!(choose(&[a, b], Route::Prefix(&blocks), 0, 10_500, &c), Some(1));
    assert_eq!(a.load(10_500, &c), 50);
    // Stale (older than 5 s): only the in-flight count, and a's cache wins.
    assert_eq!(choose(&[a, b], Route::Prefix(&blocks), 0, 16_000, &c), Some(0));
    assert_eq!(a.load(16_000, &c), 0);
    // KV usage above the knee breaks what would otherwise be a tie; below it, it counts nothing.
    let mut x = cand("x", 1, 2);
    x.gauges = Some(Gauges { running: 1, waiting: 0, kv_usage: 0.9, scraped_at_ms: 0, seen_inflight: 0 });
    let mut y = cand("y", 1, 2);
    y.gauges = Some(Gauges { running: 1, waiting: 0, kv_usage: 0.1, scraped_at_ms: 0, seen_inflight: 0 });
    assert_eq!(choose(&[x, y], Route::Prefix(&blocks), 0, 0, &c), Some(1));
    assert_eq!((x.kv(0, &c) * 1e9).round() / 1e9, 0.5);
    assert_eq!(y.kv(0, &c), 0.0);
    let mut z = cand("z", 1, 0);
    z.gauges = Some(Gauges { kv_usage: 0.75, ..y.gauges.unwrap() });
    assert_eq!(z.kv(0, &c), 0.0, "below the knee: nothing");
    // Odd gauge values: no panic, clamped.
    x.gauges = Some(Gauges { running: u32::MAX, waiting: u32::MAX, kv_usage: f64::NAN, scraped_at_ms: u64::MAX, seen_inflight: 0 });
    y.gauges = Some(Gauges { running: 0, waiting: 0, kv_usage: -3.0, scraped_at_ms: 0, seen_inflight: 0 });
    assert_eq!(choose(&[x, y], Route::Prefix(&blocks), 0, 0, &c), Some(1));
}

/// A prompt no replica holds any of goes as least request goes: the least loaded, ties in turn.
#[test]
fn a_prompt_nobody_holds_goes_to_the_least_loaded_in_turn() {
    let c = LlmConfig::default();
    let blocks = block_hashes(b"", &text(9, 64 * 6), &cfg());
    let cs = [cand("a", 3, 0), cand("b", 1, 0), cand("c", 1, 0)];
    let picks: Vec<Option<usize>> = (0..4).map(|start| choose(&cs, Route::Prefix(&blocks), start, 0, &c)).collect();
    assert_eq!(picks, vec![Some(1), Some(1), Some(2), Some(1)]);
    // Once one holds some of it, the score decides (here: the cache beats one request more).
    let cs = [cand("a", 3, 0), cand("b", 1, 0), cand("c", 2, 3)];
    assert_eq!(choose(&cs, Route::Prefix(&blocks), 0, 0, &c), Some(2));
}

/// Gauges lag by a scrape; this proxy's own requests are known now. Only the part of
/// `running + waiting` that other proxies sent is added to the in-flight count, so a replica
/// that just finished this proxy's requests does not look busy until the next scrape (which
/// herded unique prompts onto whichever replica looked idle at the last one).
#[test]
fn gauges_add_only_what_other_proxies_sent() {
    let c = LlmConfig::default();
    let g = |running, seen_inflight| Some(Gauges { running, waiting: 2, kv_usage: 0.0, scraped_at_ms: 0, seen_inflight });
    let mut a = cand("a", 5, 0);
    // At the scrape it ran 18 and queued 2, all this proxy's; 15 have finished since.
    a.gauges = g(18, 20);
    assert_eq!(a.load(0, &c), 5);
    // Ten more from other proxies.
    a.gauges = g(28, 20);
    assert_eq!(a.load(0, &c), 15);
    // Fewer than this proxy had sent (some not arrived yet): nothing added.
    a.gauges = g(3, 20);
    assert_eq!(a.load(0, &c), 5);
    // The pool records its in-flight count with the gauges.
    let mut p = llm_pool(&["x", "y"], LlmConfig::default(), 1);
    let r = LlmRequest::default();
    let k = to(&mut p, 0, &[], &r);
    to(&mut p, 0, &[k], &r);
    let k2 = to(&mut p, 0, &[], &r);
    let busy = if k2 == k { k } else { k2 };
    let before = p.get(busy).unwrap().inflight;
    assert!(p.set_gauges(busy, Gauges { running: 9, waiting: 0, kv_usage: 0.0, scraped_at_ms: 0, seen_inflight: 0 }));
    assert_eq!(p.gauges(busy).unwrap().seen_inflight, before);
}

/// A request that finished here while a scrape was under way was still counted by the replica:
/// it is this proxy's own, not another proxy's load, and a later answer says so.
#[test]
fn a_request_that_ends_during_a_scrape_is_not_taken_for_another_proxys() {
    let mut p = llm_pool(&["a"], LlmConfig::default(), 1);
    let r = req(&text(5, 640));
    let k = to(&mut p, 0, &[], &r);
    to(&mut p, 0, &[], &r);
    p.scrape_started(k);
    p.finish(k, Outcome::Ok, 0);
    p.finish(k, Outcome::Ok, 0);
    to(&mut p, 0, &[], &r); // one more starts while the scrape is out: 1 in flight now
    // The replica answers with the two that had not ended there yet.
    assert!(p.set_gauges(k, Gauges { running: 2, waiting: 0, kv_usage: 0.0, scraped_at_ms: 0, seen_inflight: 0 }));
    let g = p.gauges(k).unwrap();
    assert_eq!(g.seen_inflight, 2, "the most in flight since the scrape began");
    let c = Candidate { id_hash: 0, inflight: p.get(k).unwrap().inflight, gauges: Some(g), hit: 0 };
    assert_eq!(c.load(0, &LlmConfig::default()), 1, "no phantom load from other proxies");
    // The next answer without a new start: the count then.
    assert!(p.set_gauges(k, Gauges { running: 3, waiting: 0, kv_usage: 0.0, scraped_at_ms: 0, seen_inflight: 0 }));
    assert_eq!(p.gauges(k).unwrap().seen_inflight, 1);
}

#[test]
fn no_prompt_is_least_request_and_sessions_stick_until_saturated() {
    let c = LlmConfig::default();
    let cs = [cand("a", 4, 0), cand("b", 2, 0), cand("c", 3, 0)];
    assert_eq!(choose(&cs, Route::Least, 0, 0, &c), Some(1));
    assert_eq!(choose(&cs, Route::Prefix(&[]), 7, 0, &c), Some(1));
    assert_eq!(choose(&[], Route::Least, 0, 0, &c), None);
    // A blank session key is no session.
    assert_eq!(LlmRequest::new("m", None, Some(" "), &cfg()).route(), Route::Least);
    assert!(matches!(LlmRequest::new("m", Some(&[b'x'; 64]), Some("s"), &cfg()).route(), Route::Session(_)));
    assert!(matches!(LlmRequest::new("m", Some(&[b'x'; 64]), None, &cfg()).route(), Route::Prefix(b) if b.len() == 1));
    // Ties rotate with `start`.
    let eq = [cand("a", 1, 0), cand("b", 1, 0)];
    assert_ne!(choose(&eq, Route::Least, 0, 0, &c), choose(&eq, Route::Least, 1, 0, &c));
    // A session goes to one replica while loads are even...
    let even = [cand("a", 2, 0), cand("b", 2, 0), cand("c", 2, 0), cand("d", 2, 0)];
    let s = llm::session_hash("conversation-17");
    let first = choose(&even, Route::Session(s), 0, 0, &c).unwrap();
    for start in 0..5 {
        assert_eq!(choose(&even, Route::Session(s), start, 0, &c), Some(first));
    }
    // ...and moves (to a fixed second choice) when that one is over the bound.
    let mut hot = even;
    hot[first].inflight = 20;
    let second = choose(&hot, Route::Session(s), 0, 0, &c).unwrap();
    assert_ne!(second, first);
    assert_eq!(choose(&hot, Route::Session(s), 3, 0, &c), Some(second));
}

#[test]
fn pick_llm_follows_the_prefix_and_records_it() {
    let mut p = llm_pool(&["a", "b", "c", "d"], LlmConfig::default(), 1);
    let prompt = text(9, 64 * 20);
    let r = req(&prompt);
    let first = to(&mut p, 0, &[], &r);
    assert_eq!(p.prefix_index().hit(first, &r.blocks), 20);
    p.finish(first, Outcome::Ok, 0);
    // Same prompt, equal loads: same replica; a longer prompt sharing it too.
    for extra in 0..5u64 {
        let mut longer = prompt.clone();
        longer.extend(text(100 + extra, 300));
        let k = to(&mut p, 0, &[], &req(&longer));
        assert_eq!(k, first);
        p.finish(k, Outcome::Ok, 0);
    }
    // A retry goes elsewhere.
    let k = to(&mut p, 0, &[first], &r);
    assert_ne!(k, first);
    // No prompt: least request (the replica with one in flight is skipped).
    let none = LlmRequest::default();
    for _ in 0..3 {
        let j = to(&mut p, 0, &[], &none);
        assert_ne!(j, k);
        p.finish(j, Outcome::Ok, 0);
    }
}

#[test]
fn pick_llm_is_full_at_the_concurrency_limit_and_nothing_when_empty() {
    let llm = LlmConfig { max_inflight: Some(2), ..LlmConfig::default() };
    let mut p = llm_pool(&["a", "b"], llm, 1);
    let r = req(&text(3, 640));
    let mut open = Vec::new();
    for _ in 0..4 {
        open.push(to(&mut p, 0, &[], &r));
    }
    assert_eq!(p.pick_llm(0, &[], &r), Pick::Full);
    assert_eq!(p.pick_llm(0, &[], &LlmRequest::default()), Pick::Full);
    p.finish(open.pop().unwrap(), Outcome::Ok, 0);
    assert!(matches!(p.pick_llm(0, &[], &r), Pick::To(_)));
    let mut empty: Pool<()> = Pool::new(Policy::Llm, Ejection::default(), 1);
    assert_eq!(empty.pick_llm(0, &[], &r), Pick::Nothing);
    assert_eq!(empty.pick(0, &[]), None);
    assert!(!empty.set_gauges(Key(0), Gauges { running: 0, waiting: 0, kv_usage: 0.0, scraped_at_ms: 0, seen_inflight: 0 }));
}

#[test]
fn a_replica_that_leaves_is_forgotten() {
    let mut p = llm_pool(&["a", "b", "c"], LlmConfig::default(), 1);
    let r = req(&text(4, 640));
    let k = to(&mut p, 0, &[], &r);
    let g = Gauges { running: 1, waiting: 0, kv_usage: 0.5, scraped_at_ms: 0, seen_inflight: 0 };
    assert!(p.set_gauges(k, g));
    let id = p.get(k).unwrap().id.clone();
    let rest: Vec<String> = ["a", "b", "c"].iter().filter(|s| **s != id).map(|s| s.to_string()).collect();
    p.set_endpoints(rest.iter().map(String::as_str), |_, _| true, |_| ());
    // Still draining with a request in flight: never chosen, even for its own prefix.
    let k2 = to(&mut p, 0, &[], &r);
    assert_ne!(k2, k);
    p.finish(k, Outcome::Ok, 0);
    assert!(p.get(k).is_none());
    assert_eq!(p.prefix_index().hit(k, &r.blocks), 0);
    assert!(p.gauges(k).is_none());
    assert!(p.prefix_index().replicas().all(|x| p.get(x).is_some()));
}

#[test]
fn changing_the_block_layout_empties_the_index() {
    let mut p = llm_pool(&["a", "b"], LlmConfig::default(), 1);
    let r = req(&text(4, 640));
    let k = to(&mut p, 0, &[], &r);
    assert!(!p.prefix_index().is_empty());
    p.set_llm_config(LlmConfig { load_weight: 2.0, ..LlmConfig::default() });
    assert_eq!(p.prefix_index().hit(k, &r.blocks), 10, "weights alone keep the index");
    p.set_llm_config(LlmConfig { prefix: PrefixConfig { block_bytes: 32, max_blocks: 8 }, ..LlmConfig::default() });
    assert!(p.prefix_index().is_empty());
}

#[test]
fn config_validation() {
    assert_eq!(LlmConfig::default().validate(), Ok(()));
    let bad = |c: LlmConfig| c.validate().is_err();
    assert!(bad(LlmConfig { prefix: PrefixConfig { block_bytes: 0, max_blocks: 1 }, ..LlmConfig::default() }));
    assert!(bad(LlmConfig { load_factor_percent: 99, ..LlmConfig::default() }));
    assert!(bad(LlmConfig { prefix_weight: f64::NAN, ..LlmConfig::default() }));
    assert!(bad(LlmConfig { kv_weight: -1.0, ..LlmConfig::default() }));
    assert!(bad(LlmConfig { max_inflight: Some(0), ..LlmConfig::default() }));
}

/// What a replay of a workload through one policy shows.
#[derive(Debug)]
struct Replay {
    /// Fraction of the shared head blocks that the chosen replica already had.
    hit: f64,
    /// Most in flight on one replica right after a pick.
    max_load: u32,
    /// Replicas that served each group.
    holders: Vec<usize>,
}

/// The shared-prefix pattern in miniature: requests of `groups` groups (a 30-block shared
/// head, a 3-block unique tail; `hot` percent of them from group 0, the rest uniform) over 4
/// replicas, 12 in flight (each finishes when the 13th after it starts); `groups == 0`: every
/// head unique. What each replica caches is modelled by a second index of 100 blocks (about 3
/// groups; the pool's index is as big), fed for every policy alike.
fn replay(policy: Policy, groups: usize, hot: usize, n: u64) -> Replay {
    let llm = LlmConfig { capacity_blocks: 100, ..LlmConfig::default() };
    let mut p = llm_pool(&["r0", "r1", "r2", "r3"], llm, 3);
    p.set_policy(policy);
    let mut cache = PrefixIndex::new(100);
    let unique = groups == 0;
    let groups = groups.max(1);
    let heads: Vec<Vec<u8>> = (0..groups as u64).map(|g| text(1000 + g, 64 * 30)).collect();
    let mut rng = Rng::new(11);
    let mut open: VecDeque<Key> = VecDeque::new();
    let (mut hits, mut max_load) = (0usize, 0u32);
    let mut holders: Vec<std::collections::BTreeSet<Key>> = vec![Default::default(); groups];
    for i in 0..n {
        let g = if rng.below(100) < hot { 0 } else { rng.below(groups) };
        let mut prompt = if unique { text(i + 1_000_000, 64 * 30) } else { heads[g].clone() };
        prompt.extend(text(i + 50_000, 64 * 3));
        let r = req(&prompt);
        let total: u64 = p.endpoints().iter().map(|e| e.inflight as u64).sum();
        let bound = load_bound(total, 4, 125, 1);
        let k = match policy {
            Policy::Llm => to(&mut p, i, &[], &r),
            _ => p.pick(i, &[]).unwrap(),
        };
        let load = p.get(k).unwrap().inflight;
        if policy == Policy::Llm {
            assert!(u64::from(load) <= bound, "load {load} over bound {bound}");
        }
        max_load = max_load.max(load);
        hits += cache.hit(k, &r.blocks).min(30);
        cache.record(k, &r.blocks);
        holders[g].insert(k);
        open.push_back(k);
        if open.len() > 12 {
            p.finish(open.pop_front().unwrap(), Outcome::Ok, i);
        }
    }
    Replay { hit: hits as f64 / (30 * n) as f64, max_load, holders: holders.iter().map(|h| h.len()).collect() }
}

#[test]
fn shared_prefix_routing_hits_the_cache_under_the_bound() {
    // Replicas cache about 3 of the 8 groups: spraying requests (round robin, least request)
    // hits about 38% of the shared blocks, the LLM picker about 95%.
    let llm = replay(Policy::Llm, 8, 0, 2000);
    let rr = replay(Policy::RoundRobin, 8, 0, 2000);
    let lr = replay(Policy::LeastRequest, 8, 0, 2000);
    assert!(llm.hit > 0.9, "{llm:?}");
    assert!(llm.hit >= 1.5 * rr.hit && llm.hit >= 1.5 * lr.hit, "llm {llm:?} rr {rr:?} lr {lr:?}");
}

#[test]
fn a_hot_prefix_spreads_instead_of_piling_up() {
    // 90% of requests share one head: affinity alone would send them all to one replica.
    let llm = replay(Policy::Llm, 8, 90, 2000);
    assert!(llm.holders[0] >= 3, "{llm:?}");
    assert!(llm.max_load <= 6, "{llm:?}"); // ceil(1.25 * 13 / 4) + 1
}

#[test]
fn unique_prompts_balance_like_least_request() {
    let llm = replay(Policy::Llm, 0, 0, 2000);
    let lr = replay(Policy::LeastRequest, 0, 0, 2000);
    assert!(llm.max_load <= lr.max_load + 1, "llm {llm:?} lr {lr:?}");
    assert!(llm.hit < 0.05);
}

use std::collections::VecDeque;

fn arb_gauges() -> impl Strategy<Value = Option<Gauges>> {
    prop_oneof![
        Just(None),
        (0u32..40, 0u32..40, -0.5f64..1.5, 0u64..20_000, 0u32..40).prop_map(
            |(running, waiting, kv_usage, scraped_at_ms, seen_inflight)| {
                Some(Gauges { running, waiting, kv_usage, scraped_at_ms, seen_inflight })
            }
        ),
    ]
}

proptest! {
    /// Prompts that share their first k whole blocks share exactly their first k hashes.
    #[test]
    fn shared_bytes_give_shared_hashes(a in proptest::collection::vec(any::<u8>(), 0..2000), cut in 0usize..2000, b in proptest::collection::vec(any::<u8>(), 1..500)) {
        let c = PrefixConfig { block_bytes: 64, max_blocks: 40 };
        let cut = cut.min(a.len());
        let mut other = a[..cut].to_vec();
        let differs = b[0] != a.get(cut).copied().unwrap_or(!b[0]);
        other.extend(&b);
        let (ha, hb) = (block_hashes(b"m", &a, &c), block_hashes(b"m", &other, &c));
        let k = (cut / 64).min(40);
        prop_assert_eq!(&ha[..k.min(ha.len())], &hb[..k.min(hb.len())]);
        if differs && ha.len() > k && hb.len() > k {
            prop_assert_ne!(ha[k], hb[k]);
        }
    }

    /// Odd bytes, huge prompts, odd settings: no panic, and the count follows the rule.
    #[test]
    fn hashing_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..5000), size in 0usize..300, max in 0usize..300) {
        let c = PrefixConfig { block_bytes: size, max_blocks: max };
        let h = block_hashes(&bytes, &bytes, &c);
        prop_assert_eq!(h.len(), (bytes.len() / size.max(1)).min(max));
    }

    /// The index never holds more than its capacity per replica, and a just-recorded request
    /// is held whole when it fits.
    #[test]
    fn index_is_bounded(cap in 0usize..50, reqs in proptest::collection::vec((0u64..4, 0u64..20, 0usize..30), 1..100)) {
        let mut ix = PrefixIndex::new(cap);
        for (r, seed, n) in reqs {
            let blocks = block_hashes(b"", &text(seed, n * 64), &cfg());
            ix.record(Key(r), &blocks);
            prop_assert!(ix.len(Key(r)) <= cap);
            if blocks.len() <= cap {
                prop_assert_eq!(ix.hit(Key(r), &blocks), blocks.len());
            }
        }
    }

    /// The bounded-load rule: whatever the loads, gauges, hits and route, the chosen replica
    /// is under the cap (its load + 1 <= ceil(c * (L + 1) / n)).
    #[test]
    fn bounded_load_is_never_violated(
        cands in proptest::collection::vec((0u32..50, arb_gauges(), 0usize..12), 1..10),
        route in 0u8..3,
        pct in 0u32..300,
        slack in 0u32..3,
        now in 0u64..25_000,
        start in 0usize..10,
        seed in any::<u64>(),
    ) {
        let c = LlmConfig { load_factor_percent: pct, load_slack: slack, ..LlmConfig::default() };
        let blocks = block_hashes(b"", &text(seed, 64 * 10), &cfg());
        let view: Vec<Candidate> = cands.iter().enumerate()
            .map(|(i, (inflight, gauges, hit))| Candidate { id_hash: replica_hash(&format!("r{i}")), inflight: *inflight, gauges: *gauges, hit: (*hit).min(10) })
            .collect();
        let route = match route { 0 => Route::Least, 1 => Route::Session(seed), _ => Route::Prefix(&blocks) };
        let i = choose(&view, route, start, now, &c).expect("candidates exist");
        let loads: Vec<u64> = view.iter().map(|x| x.load(now, &c)).collect();
        let bound = load_bound(loads.iter().sum(), view.len(), pct, slack);
        prop_assert!(loads[i] < bound, "load {} bound {} loads {:?}", loads[i], bound, loads);
    }

    /// With equal loads, a prompt goes again to the replica that took it, whatever the pool's
    /// seed and the order the replicas were listed in.
    #[test]
    fn equal_loads_send_a_prefix_to_one_replica(prompt in proptest::collection::vec(any::<u8>(), 64..3000), n in 1usize..8, seed in any::<u64>(), rot in 0usize..8, busy in 0u32..3) {
        let ids: Vec<String> = (0..n).map(|i| format!("replica-{i}")).collect();
        let mut rotated = ids.clone();
        rotated.rotate_left(rot % n);
        let r = req(&prompt);
        let mut chosen = Vec::new();
        for (list, s) in [(&ids, seed), (&rotated, seed ^ 0xFFFF)] {
            let mut p = llm_pool(&list.iter().map(String::as_str).collect::<Vec<_>>(), LlmConfig::default(), s);
            // Equal loads: `busy` requests in flight everywhere (no prompt).
            for e in p.endpoints().iter().map(|e| e.key).collect::<Vec<_>>() {
                for _ in 0..busy {
                    p.endpoints.iter_mut().find(|x| x.key == e).unwrap().inflight += 1;
                }
            }
            let k = to(&mut p, 0, &[], &r);
            let id = p.get(k).unwrap().id.clone();
            p.finish(k, Outcome::Ok, 0);
            let again = to(&mut p, 1, &[], &r);
            prop_assert_eq!(again, k);
            chosen.push(id);
        }
        prop_assert_eq!(chosen.len(), 2);
    }

    /// Replicas come and go (views change, gauges arrive, requests start and end, some
    /// retried): routing never fails while a replica serves, never picks a draining or tried
    /// one, stays under the cap, and the index and gauges only name known replicas.
    #[test]
    fn replicas_leaving_never_break_routing(
        seed in any::<u64>(),
        limit in prop_oneof![Just(None), (1u32..4).prop_map(Some)],
        ops in proptest::collection::vec((0u8..7, 0usize..64, arb_gauges()), 1..250),
    ) {
        let all = ["a", "b", "c", "d", "e"];
        let llm = LlmConfig { max_inflight: limit, capacity_blocks: 40, ..LlmConfig::default() };
        let mut p = llm_pool(&all, llm, seed);
        let prompts: Vec<Vec<u8>> = (0..6).map(|g| text(g, 64 * 12)).collect();
        let mut open: Vec<Key> = Vec::new();
        let mut now = 0u64;
        for (op, x, g) in ops {
            now += 13;
            match op {
                0..=2 => {
                    let r = match x % 4 {
                        0 => LlmRequest::default(),
                        1 => LlmRequest { session: Some(format!("s{}", x % 5)), ..req(&prompts[x % 6]) },
                        _ => req(&prompts[x % 6]),
                    };
                    let tried: Vec<Key> = if x % 7 == 0 { p.endpoints().iter().take(1).map(|e| e.key).collect() } else { Vec::new() };
                    let cands: Vec<Endpoint<()>> = p.endpoints().iter().filter(|e| !e.draining && !tried.contains(&e.key)).cloned().collect();
                    let any = !cands.is_empty();
                    let open_cands: Vec<&Endpoint<()>> = cands.iter().filter(|e| limit.is_none_or(|l| e.inflight < l)).collect();
                    let loads: Vec<u64> = open_cands.iter().map(|e| {
                        let own = e.inflight as u64;
                        match p.gauges(e.key) { Some(g) if g.fresh(now, llm.gauge_max_age_ms) => own + (g.running as u64 + g.waiting as u64).saturating_sub(g.seen_inflight as u64), _ => own }
                    }).collect();
                    let bound = load_bound(loads.iter().sum(), loads.len(), llm.load_factor_percent, llm.load_slack);
                    let load_of: Vec<(Key, u64)> = open_cands.iter().map(|e| e.key).zip(loads.iter().copied()).collect();
                    match p.pick_llm(now, &tried, &r) {
                        Pick::To(k) => {
                            let e = p.get(k).unwrap();
                            prop_assert!(!e.draining && !tried.contains(&k));
                            let l = load_of.iter().find(|(x, _)| *x == k).map(|(_, l)| *l).expect("chosen among the open candidates");
                            prop_assert!(l < bound, "load {} bound {}", l, bound);
                            open.push(k);
                        }
                        Pick::Full => prop_assert!(any && open_cands.is_empty()),
                        Pick::Nothing => prop_assert!(!any),
                    }
                }
                3 if !open.is_empty() => {
                    let k = open.remove(x % open.len());
                    p.finish(k, Outcome::Ok, now);
                }
                4 => {
                    let keep: Vec<&str> = all.iter().copied().enumerate().filter(|(i, _)| (x >> i) & 1 == 1).map(|(_, s)| s).collect();
                    p.set_endpoints(keep, |_, _| true, |_| ());
                }
                5 => {
                    if let (Some(g), Some(e)) = (g, p.endpoints().get(x % 5).map(|e| e.key)) {
                        prop_assert!(p.set_gauges(e, g));
                    }
                }
                _ => {}
            }
            prop_assert!(p.prefix_index().replicas().all(|k| p.get(k).is_some()), "index names a replica that left");
            prop_assert!(p.endpoints().iter().all(|e| p.prefix_index().len(e.key) <= 40));
            prop_assert_eq!(p.inflight(), open.len() as u64);
        }
    }

    /// Empty pools, all-tried pools, huge and odd prompts, odd sessions: an answer, no panic.
    #[test]
    fn pick_llm_never_panics(n in 0usize..4, prompt in proptest::collection::vec(any::<u8>(), 0..20_000), session in proptest::option::of(".{0,40}"), cfg_bytes in 0usize..100) {
        let ids: Vec<String> = (0..n).map(|i| format!("r{i}")).collect();
        let llm = LlmConfig { prefix: PrefixConfig { block_bytes: cfg_bytes, max_blocks: 300 }, ..LlmConfig::default() };
        let mut p = llm_pool(&ids.iter().map(String::as_str).collect::<Vec<_>>(), llm, 1);
        let r = LlmRequest::new("m\u{0}", Some(&prompt), session.as_deref(), &llm.prefix);
        let all: Vec<Key> = p.endpoints().iter().map(|e| e.key).collect();
        prop_assert_eq!(p.pick_llm(0, &all, &r), Pick::Nothing);
        match p.pick_llm(0, &[], &r) {
            Pick::To(_) => prop_assert!(n > 0),
            other => prop_assert!(n == 0 && other == Pick::Nothing),
        }
    }
}

/// Ties of the least-request fallback go round, as least request's do: the next search starts
/// after the replica chosen, so a choice that skipped ahead does not send the next tie to the
/// same replica again.
#[test]
fn least_request_ties_go_round_after_a_skip() {
    let mut p = llm_pool(&["a", "b", "c", "d"], LlmConfig::default(), 1);
    let r = LlmRequest::default();
    let keys: Vec<Key> = p.endpoints().iter().map(|e| e.key).collect();
    let first: Vec<Key> = (0..4).map(|_| to(&mut p, 0, &[], &r)).collect();
    assert_eq!(first, keys, "four ties in turn");
    p.finish(keys[1], Outcome::Ok, 0);
    p.finish(keys[2], Outcome::Ok, 0);
    // In flight 1, 0, 0, 1: the search from the first skips to the second.
    let next: Vec<Key> = (0..3).map(|_| to(&mut p, 0, &[], &r)).collect();
    assert_eq!(next, vec![keys[1], keys[2], keys[3]], "then the tie after it, not the same replica twice");
    let least: Vec<u32> = p.endpoints().iter().map(|e| e.inflight).collect();
    assert_eq!(least, vec![1, 1, 1, 2]);
}

/// With `max_awaiting`, a replica takes no new request while that many sent to it have not
/// begun their answer (`Pool::answered`), and of two or more replicas the last one under the
/// pace is kept for requests let past the limit (`pick_llm_unheld`); when none may take it,
/// the answer is `Pick::Full`. Plain `pick` is not held back.
#[test]
fn paced_replicas_take_one_request_until_its_answer_begins() {
    let cfg = LlmConfig { max_inflight: Some(8), max_awaiting: Some(1), ..LlmConfig::default() };
    let mut p = llm_pool(&["a", "b", "c"], cfg, 1);
    let r = LlmRequest::default();
    let a = to(&mut p, 0, &[], &r);
    let b = to(&mut p, 0, &[], &r);
    assert_ne!(a, b);
    assert_eq!(p.pick_llm(0, &[], &r), Pick::Full, "a and b await a first token; the last replica is kept");
    let Pick::To(c) = p.pick_llm_unheld(0, &[], &r) else { panic!("the kept replica takes a request let past the limit") };
    assert!(c != a && c != b);
    assert_eq!(p.pick_llm(0, &[], &r), Pick::Full, "all three await");
    let x = p.pick(0, &[]).expect("plain picks are not paced");
    p.answered(x);
    p.finish(x, Outcome::Ok, 0);
    p.answered(a);
    assert_eq!(p.pick_llm(0, &[], &r), Pick::Full, "a began its answer, but it is the only one under the pace");
    p.answered(c);
    let k = to(&mut p, 0, &[], &r);
    assert!(k == a || k == c, "a or c, under the pace, while the other is kept");
    assert_eq!(p.pick_llm(0, &[], &r), Pick::Full);
    // An attempt that ends before its answer began frees the replica too.
    p.answered(b);
    p.finish(b, Outcome::Reset, 0);
    assert_eq!(p.pick_llm(0, &[], &r), Pick::To(b), "b, with none in flight, of the two under the pace");
    // The count never goes below zero.
    for _ in 0..5 {
        p.answered(a);
    }
    assert_eq!(p.get(a).unwrap().awaiting, 0);
    // One replica keeps none back.
    let mut one = llm_pool(&["solo"], cfg, 1);
    let s = to(&mut one, 0, &[], &r);
    assert_eq!(one.pick_llm(0, &[], &r), Pick::Full, "awaiting its first token");
    one.answered(s);
    assert_eq!(one.pick_llm(0, &[], &r), Pick::To(s));
}

/// A request let past the limit (`pick_llm_unheld`) may go over `max_inflight`, goes where
/// no answer is awaited (over a replica with fewer in flight whose prompt is still
/// prefilling), keeps prefix affinity among those, and records its blocks; it skips tried
/// replicas and takes an ejected one only when nothing else is left.
#[test]
fn requests_let_past_the_limit_avoid_replicas_awaiting_a_first_token() {
    let c = LlmConfig { max_inflight: Some(1), max_awaiting: Some(1), ..LlmConfig::default() };
    let mut p = llm_pool(&["a", "b", "c"], c, 1);
    let keys: Vec<Key> = p.endpoints().iter().map(|e| e.key).collect();
    let unheld = |p: &mut Pool<()>, tried: &[Key], r: &LlmRequest| match p.pick_llm_unheld(0, tried, r) {
        Pick::To(k) => k,
        other => panic!("expected an endpoint, got {other:?}"),
    };
    let none = LlmRequest::default();
    // Answers begun at once: the limit of 1 does not hold these back, and equals take turns.
    let mut firsts = Vec::new();
    for _ in 0..6 {
        let k = unheld(&mut p, &[], &none);
        p.answered(k);
        firsts.push(k);
    }
    let mut counts: Vec<u32> = p.endpoints().iter().map(|e| e.inflight).collect();
    assert_eq!(counts, vec![2, 2, 2], "over the limit, in turn: {firsts:?}");
    assert_eq!(p.pick_llm(0, &[], &none), Pick::Full, "the held picker keeps to the limit");
    // b's attempts end, and a new one to b awaits its first token: b has the fewest in
    // flight, but a prompt is prefilling there.
    p.finish(keys[1], Outcome::Ok, 0);
    p.finish(keys[1], Outcome::Ok, 0);
    let shared = req(&text(7, 640));
    let b = unheld(&mut p, &[keys[0], keys[2]], &shared);
    assert_eq!(b, keys[1]);
    assert_eq!(p.prefix_index().hit(b, &shared.blocks), shared.blocks.len(), "recorded");
    let next = unheld(&mut p, &[], &shared);
    assert_ne!(next, keys[1], "b holds the prompt but awaits its first token");
    // Once b's answer began, affinity brings the same prompt back to b.
    p.answered(b);
    p.answered(next);
    assert_eq!(unheld(&mut p, &[], &shared), keys[1]);
    p.answered(keys[1]);
    counts = p.endpoints().iter().map(|e| e.awaiting).collect();
    assert_eq!(counts, vec![0, 0, 0]);
    // Skips tried replicas; ejected ones only when nothing else is left.
    for _ in 0..5 {
        p.finish(keys[1], Outcome::Reset, 0);
        if let Pick::To(k) = p.pick_llm_unheld(0, &[keys[0], keys[2]], &none) {
            p.answered(k);
        }
    }
    assert!(p.is_ejected(keys[1], 0));
    assert_eq!(p.pick_llm_unheld(0, &[keys[0]], &none), Pick::To(keys[2]));
    assert_eq!(p.pick_llm_unheld(0, &[keys[0], keys[2]], &none), Pick::To(keys[1]), "only the ejected one is left");
    assert_eq!(p.pick_llm_unheld(0, &keys, &none), Pick::Nothing);
}
