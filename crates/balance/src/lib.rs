//! Load-balancing policy for the inference proxy, sans IO: the endpoint set of one service
//! (`Pool`), three pickers (round robin, least outstanding requests, power of two choices),
//! passive ejection of failing endpoints (outlier detection) and the retry decision; and for
//! LLM services (`Policy::Llm`) a cache- and load-aware picker (`Pool::pick_llm`: `prefix`
//! hashes prompts and keeps the per-replica prefix index, `llm` holds the scoring rule and the
//! load bound) and a per-service weighted fair queue of tenants (`fair`).
//!
//! Nothing here reads a clock or draws unseeded randomness: the caller passes `now` as
//! milliseconds and a seed, so every decision can be replayed. The proxy (`tandem proxy`) wraps
//! a `Pool` in a lock per service and does the IO.
//!
//! Rules kept by `Pool::pick`:
//! - a draining endpoint never gets a new request;
//! - an ejected endpoint gets none while a healthy one is available; if every candidate is
//!   ejected, the one whose ejection ends first is still tried (better than failing outright);
//! - an endpoint already tried for this request is skipped (retries go elsewhere).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

pub mod fair;
pub mod llm;
pub mod prefix;

pub use fair::{FairConfig, FairError, FairQueue, Queued, Refusal, Refused, request_cost};
pub use llm::{Gauges, LlmConfig, LlmConfigError, LlmRequest};
pub use prefix::{BlockHash, PrefixConfig, PrefixIndex, block_hashes};

/// How a service spreads requests over its endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Policy {
    /// Each endpoint in turn.
    #[default]
    RoundRobin,
    /// The endpoint with the fewest requests in flight (ties: in turn).
    LeastRequest,
    /// Power of two choices: two endpoints at random, the one with fewer in flight.
    P2c,
    /// For LLM servers: expected prefix-cache hit against load, under a bounded-load cap
    /// (`Pool::pick_llm`; the rule is in the `llm` module). `Pool::pick`, for requests the
    /// proxy cannot read, treats it as least request.
    Llm,
}

impl Policy {
    /// The name used in views and on command lines.
    pub fn name(self) -> &'static str {
        match self {
            Policy::RoundRobin => "round_robin",
            Policy::LeastRequest => "least_request",
            Policy::P2c => "p2c",
            Policy::Llm => "llm",
        }
    }
}

/// An unknown policy name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown balancing policy {0:?} (expected round_robin, least_request, p2c or llm)")]
pub struct UnknownPolicy(pub String);

impl FromStr for Policy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Policy, UnknownPolicy> {
        match s {
            "" | "round_robin" => Ok(Policy::RoundRobin),
            "least_request" => Ok(Policy::LeastRequest),
            "p2c" => Ok(Policy::P2c),
            "llm" => Ok(Policy::Llm),
            _ => Err(UnknownPolicy(s.to_string())),
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A small seeded PRNG (SplitMix64): enough for picking endpoints, and reproducible.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`), without modulo bias worth mentioning for small `n`.
    pub fn below(&mut self, n: usize) -> usize {
        assert!(n > 0, "Rng::below(0)");
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }
}

/// Passive outlier detection settings (Envoy's names where they exist).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ejection {
    /// Consecutive failures (transport errors or 5xx) that eject an endpoint.
    pub consecutive_failures: u32,
    /// Ejection time for a first ejection; the n-th ejection in a row lasts n times this.
    pub base_ms: u64,
    /// Longest ejection.
    pub max_ms: u64,
    /// At most this percentage of a service's (non-draining) endpoints are ejected at once.
    pub max_percent: u32,
}

impl Default for Ejection {
    fn default() -> Ejection {
        Ejection { consecutive_failures: 5, base_ms: 30_000, max_ms: 300_000, max_percent: 50 }
    }
}

/// How an attempt to an endpoint ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A response that is not a 5xx.
    Ok,
    /// No connection could be made (refused, unreachable, connect timeout): nothing was sent.
    ConnectFailed,
    /// The connection broke before a response arrived (reset, closed).
    Reset,
    /// No response in time.
    Timeout,
    /// A response with this 5xx status.
    ServerError(u16),
}

impl Outcome {
    /// Whether this counts against the endpoint for ejection.
    pub fn is_failure(self) -> bool {
        !matches!(self, Outcome::Ok)
    }
}

/// Whether a failed attempt may be retried on another endpoint.
///
/// Retryable: connection failures, resets and timeouts, and 502/503 from upstream; only while
/// nothing of the response has reached the client, only when the request body can be sent
/// again, and only while `attempts` (made so far, including the failed one) is at most
/// `max_retries`.
pub fn should_retry(outcome: Outcome, attempts: u32, max_retries: u32, replayable: bool, response_started: bool) -> bool {
    if response_started || !replayable || attempts > max_retries {
        return false;
    }
    match outcome {
        Outcome::ConnectFailed | Outcome::Reset | Outcome::Timeout => true,
        Outcome::ServerError(s) => s == 502 || s == 503,
        Outcome::Ok => false,
    }
}

/// Stable handle of an endpoint in a `Pool` (indices move when endpoints go).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(pub u64);

/// One endpoint and what the balancer knows about it.
#[derive(Clone, Debug)]
pub struct Endpoint<T> {
    /// Stable handle.
    pub key: Key,
    /// Replica id (as the controller names it).
    pub id: String,
    /// What the caller attaches (address, metrics, ...).
    pub data: T,
    /// Requests in flight.
    pub inflight: u32,
    /// No new requests; kept while `inflight > 0`.
    pub draining: bool,
    /// Failures in a row.
    pub consecutive_failures: u32,
    /// Ejections in a row (the multiplier of the next ejection time).
    pub ejections: u32,
    /// Ejected until this time (ms), if ejected.
    pub ejected_until: Option<u64>,
    /// Requests started.
    pub requests: u64,
    /// Failed attempts.
    pub failures: u64,
    /// The most requests in flight since a scrape of its gauges began (`Pool::scrape_started`),
    /// while one is under way.
    pub scrape_max: Option<u32>,
    /// Attempts sent whose answer has not begun (`Pool::answered` not yet called for them).
    pub awaiting: u32,
}

impl<T> Endpoint<T> {
    fn ejected(&self, now: u64) -> bool {
        self.ejected_until.is_some_and(|u| now < u)
    }
}

/// The endpoint set of one service and its balancing state.
#[derive(Clone, Debug)]
pub struct Pool<T> {
    endpoints: Vec<Endpoint<T>>,
    policy: Policy,
    ejection: Ejection,
    cursor: usize,
    rng: Rng,
    next_key: u64,
    llm: LlmState,
}

/// What the LLM picker keeps per service: its settings, the prefix index and the gauges.
#[derive(Clone, Debug)]
struct LlmState {
    cfg: LlmConfig,
    index: PrefixIndex,
    gauges: BTreeMap<Key, Gauges>,
}

impl LlmState {
    fn new(cfg: LlmConfig) -> LlmState {
        LlmState { index: PrefixIndex::new(cfg.capacity_blocks), gauges: BTreeMap::new(), cfg }
    }

    fn forget(&mut self, key: Key) {
        self.index.forget(key);
        self.gauges.remove(&key);
    }
}

/// Whether `Pool::pick_llm_in` keeps to the per-replica limit and pace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Limit {
    Held,
    Unheld,
}

/// The answer of `Pool::pick_llm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// Send it to this endpoint (counted in flight: call `finish` when the attempt ends).
    To(Key),
    /// Every candidate is at its concurrency limit: queue it (the `fair` queue) and pick
    /// again when a request finishes.
    Full,
    /// No endpoint may take it (none serving, or all tried).
    Nothing,
}

impl<T> Pool<T> {
    /// An empty pool.
    pub fn new(policy: Policy, ejection: Ejection, seed: u64) -> Pool<T> {
        Pool {
            endpoints: Vec::new(),
            policy,
            ejection,
            cursor: 0,
            rng: Rng::new(seed),
            next_key: 0,
            llm: LlmState::new(LlmConfig::default()),
        }
    }

    /// The LLM picker's settings.
    pub fn llm_config(&self) -> &LlmConfig {
        &self.llm.cfg
    }

    /// Changes the LLM picker's settings. A change of the block layout or of the index
    /// capacity empties the prefix index (its hashes would no longer match); gauges are kept.
    pub fn set_llm_config(&mut self, cfg: LlmConfig) {
        if cfg.prefix != self.llm.cfg.prefix || cfg.capacity_blocks != self.llm.cfg.capacity_blocks {
            self.llm.index = PrefixIndex::new(cfg.capacity_blocks);
        }
        self.llm.cfg = cfg;
    }

    /// The prefix index (which endpoint was recently sent which prompt blocks).
    pub fn prefix_index(&self) -> &PrefixIndex {
        &self.llm.index
    }

    /// An attempt to this endpoint began its answer, or ended before it did: one fewer
    /// awaiting its first token (never below zero). Call it once per attempt.
    pub fn answered(&mut self, key: Key) {
        if let Some(e) = self.endpoints.iter_mut().find(|e| e.key == key) {
            e.awaiting = e.awaiting.saturating_sub(1);
        }
    }

    /// Marks the start of a scrape of an endpoint's gauges (before its request is sent), so
    /// that `set_gauges` knows the most of this proxy's requests the replica may have counted:
    /// one that finished here while the scrape was under way was still counted there, and
    /// taking only the count at the answer made it look like another proxy's load.
    pub fn scrape_started(&mut self, key: Key) {
        if let Some(e) = self.endpoints.iter_mut().find(|e| e.key == key) {
            e.scrape_max = Some(e.inflight);
        }
    }

    /// Records the gauges scraped from an endpoint; false if the endpoint is not known. This
    /// proxy's own share of them (`Gauges::seen_inflight`) is the most requests it had in flight
    /// there since `scrape_started` (or, without that call, those in flight now).
    pub fn set_gauges(&mut self, key: Key, gauges: Gauges) -> bool {
        let Some(e) = self.endpoints.iter_mut().find(|e| e.key == key) else {
            return false;
        };
        let seen_inflight = e.scrape_max.take().map_or(e.inflight, |m| m.max(e.inflight));
        self.llm.gauges.insert(key, Gauges { seen_inflight, ..gauges });
        true
    }

    /// The last gauges recorded for an endpoint.
    pub fn gauges(&self, key: Key) -> Option<Gauges> {
        self.llm.gauges.get(&key).copied()
    }

    /// The balancing policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Changes the balancing policy.
    pub fn set_policy(&mut self, p: Policy) {
        self.policy = p;
    }

    /// Every endpoint known, serving or draining.
    pub fn endpoints(&self) -> &[Endpoint<T>] {
        &self.endpoints
    }

    /// The endpoint with this key, if still known.
    pub fn get(&self, key: Key) -> Option<&Endpoint<T>> {
        self.endpoints.iter().find(|e| e.key == key)
    }

    /// Whether any endpoint may take new requests (ejected ones included).
    pub fn has_serving(&self) -> bool {
        self.endpoints.iter().any(|e| !e.draining)
    }

    /// Sets the endpoints that may take new requests (replica id and data). Known ones keep their
    /// counters (their data is replaced); ones not listed become draining, and are forgotten
    /// once nothing is in flight to them. `data` is called only for replicas new to the pool or
    /// whose data `same` says changed.
    pub fn set_endpoints<'a, I>(&mut self, serving: I, mut same: impl FnMut(&T, &str) -> bool, mut data: impl FnMut(&str) -> T)
    where
        I: IntoIterator<Item = &'a str>,
    {
        for e in &mut self.endpoints {
            e.draining = true;
        }
        for id in serving {
            if let Some(e) = self.endpoints.iter_mut().find(|e| e.id == id) {
                e.draining = false;
                if !same(&e.data, id) {
                    e.data = data(id);
                }
                continue;
            }
            let key = Key(self.next_key);
            self.next_key += 1;
            self.endpoints.push(Endpoint {
                key,
                id: id.to_string(),
                data: data(id),
                inflight: 0,
                draining: false,
                consecutive_failures: 0,
                ejections: 0,
                ejected_until: None,
                requests: 0,
                failures: 0,
                scrape_max: None,
                awaiting: 0,
            });
        }
        self.endpoints.retain(|e| !e.draining || e.inflight > 0);
        let known: Vec<Key> = self.endpoints.iter().map(|e| e.key).collect();
        self.llm.index.retain(|k| known.contains(&k));
        self.llm.gauges.retain(|k, _| known.contains(k));
    }

    fn candidate(&self, i: usize, tried: &[Key]) -> bool {
        let e = &self.endpoints[i];
        !e.draining && !tried.contains(&e.key)
    }

    /// Whether `pick` would find an endpoint not in `tried` (ejected ones included).
    pub fn can_pick(&self, tried: &[Key]) -> bool {
        (0..self.endpoints.len()).any(|i| self.candidate(i, tried))
    }

    /// Picks an endpoint for a new attempt, skipping `tried`, and counts it in flight (call
    /// `finish` when the attempt ends). `None`: no endpoint may take it.
    pub fn pick(&mut self, now: u64, tried: &[Key]) -> Option<Key> {
        let n = self.endpoints.len();
        let healthy = (0..n).filter(|&i| self.candidate(i, tried) && !self.endpoints[i].ejected(now)).count();
        let idx = if healthy == 0 {
            // Everything left is ejected (or nothing is left): try the one back soonest.
            (0..n).filter(|&i| self.candidate(i, tried)).min_by_key(|&i| (self.endpoints[i].ejected_until, i))?
        } else {
            let ok = |p: &Pool<T>, i: usize| p.candidate(i, tried) && !p.endpoints[i].ejected(now);
            match self.policy {
                Policy::RoundRobin => {
                    let start = self.cursor % n;
                    let i = (0..n).map(|k| (start + k) % n).find(|&i| ok(self, i)).expect("a healthy candidate exists");
                    self.cursor = i + 1;
                    i
                }
                Policy::LeastRequest | Policy::Llm => {
                    let start = self.cursor % n;
                    let i = (0..n)
                        .map(|k| (start + k) % n)
                        .filter(|&i| ok(self, i))
                        .min_by_key(|&i| self.endpoints[i].inflight)
                        .expect("a healthy candidate exists");
                    self.cursor = i + 1;
                    i
                }
                Policy::P2c => {
                    let r = self.rng.below(healthy);
                    let a = self.nth_ok(r, now, tried);
                    if healthy == 1 {
                        a
                    } else {
                        let mut j = self.rng.below(healthy - 1);
                        let ra = (0..n).filter(|&i| ok(self, i)).position(|i| i == a).expect("a is healthy");
                        if j >= ra {
                            j += 1;
                        }
                        let b = self.nth_ok(j, now, tried);
                        if self.endpoints[b].inflight < self.endpoints[a].inflight { b } else { a }
                    }
                }
            }
        };
        let e = &mut self.endpoints[idx];
        e.inflight += 1;
        e.requests += 1;
        e.scrape_max = e.scrape_max.map(|m| m.max(e.inflight));
        e.awaiting += 1;
        Some(e.key)
    }

    /// Picks an endpoint for an LLM request (the rule is in the `llm` module), skipping
    /// `tried`, and counts it in flight (call `finish` when the attempt ends); the request's
    /// blocks are recorded in the prefix index for the endpoint chosen. Draining endpoints are
    /// never chosen; ejected ones only when every candidate is ejected (then the one back
    /// soonest, as `pick`); endpoints at `max_inflight` are left out, and so are those at
    /// `max_awaiting`, and while only one healthy endpoint of two or more is under
    /// `max_awaiting`, that one too (kept for `pick_llm_unheld`); if that leaves none, the answer
    /// is `Pick::Full`.
    pub fn pick_llm(&mut self, now: u64, tried: &[Key], req: &LlmRequest) -> Pick {
        self.pick_llm_in(now, tried, req, Limit::Held)
    }

    /// Picks an endpoint for an LLM request let past the per-replica limit (a tenant under its
    /// share of the slots while others queue), as `pick_llm` does but over every healthy
    /// candidate, whatever its count in flight, with the fewest requests awaiting their first
    /// token: on an LLM replica a prompt awaiting its first token is being prefilled or about
    /// to be, and a request joining it waits for both prefills (with the proxy's pace of one,
    /// that means a replica with none awaiting whenever there is one). Among those, the usual
    /// rule (prefix against load, bounded load, sessions). `Pick::Full` never; `Pick::Nothing`
    /// when no candidate is left.
    pub fn pick_llm_unheld(&mut self, now: u64, tried: &[Key], req: &LlmRequest) -> Pick {
        self.pick_llm_in(now, tried, req, Limit::Unheld)
    }

    fn pick_llm_in(&mut self, now: u64, tried: &[Key], req: &LlmRequest, held: Limit) -> Pick {
        let cfg = self.llm.cfg;
        let limit = cfg.max_inflight.map_or(u32::MAX, |m| m.max(1));
        let n = self.endpoints.len();
        let cands: Vec<usize> = (0..n).filter(|&i| self.candidate(i, tried)).collect();
        if cands.is_empty() {
            return Pick::Nothing;
        }
        let healthy: Vec<usize> = cands.iter().copied().filter(|&i| !self.endpoints[i].ejected(now)).collect();
        let idx = if healthy.is_empty() {
            let i = cands.iter().copied().min_by_key(|&i| (self.endpoints[i].ejected_until, i)).expect("candidates exist");
            if held == Limit::Held && self.endpoints[i].inflight >= limit {
                return Pick::Full;
            }
            i
        } else {
            let open: Vec<usize> = match held {
                Limit::Held => {
                    let pace = cfg.max_awaiting.unwrap_or(u32::MAX);
                    let unpaced: Vec<usize> = healthy.iter().copied().filter(|&i| self.endpoints[i].awaiting < pace).collect();
                    // Paced requests leave one replica under the pace (of two or more), so that
                    // a request let past the limit finds a replica with no other prompt's
                    // prefill ahead of its own. (Unpaced, every healthy replica is under it.)
                    if healthy.len() > 1 && unpaced.len() < 2 {
                        Vec::new()
                    } else {
                        unpaced.into_iter().filter(|&i| self.endpoints[i].inflight < limit).collect()
                    }
                }
                Limit::Unheld => {
                    let least = healthy.iter().map(|&i| self.endpoints[i].awaiting).min().expect("healthy is not empty");
                    healthy.into_iter().filter(|&i| self.endpoints[i].awaiting == least).collect()
                }
            };
            if open.is_empty() {
                return Pick::Full;
            }
            let route = req.route();
            let view: Vec<llm::Candidate> = open
                .iter()
                .map(|&i| {
                    let e = &self.endpoints[i];
                    let hit = match route {
                        llm::Route::Prefix(blocks) => self.llm.index.hit(e.key, blocks),
                        _ => 0,
                    };
                    llm::Candidate {
                        id_hash: llm::replica_hash(&e.id),
                        inflight: e.inflight,
                        gauges: self.llm.gauges.get(&e.key).copied(),
                        hit,
                    }
                })
                .collect();
            let start = self.cursor;
            let k = llm::choose(&view, route, start, now, &cfg).expect("open endpoints exist");
            // When no candidate holds any of the prompt (least request's fallback), the next
            // search starts after the one chosen, as least request's does: moving the start on
            // by one instead sent two requests in a row to one replica whenever the choice
            // skipped ahead (a tie then fell to it again), and on an LLM replica two prefills
            // in one step raise both requests' time to first token.
            let fallback = !matches!(route, llm::Route::Session(_)) && view.iter().all(|c| c.hit == 0);
            self.cursor = if fallback { k + 1 } else { self.cursor.wrapping_add(1) };
            open[k]
        };
        let e = &mut self.endpoints[idx];
        e.inflight += 1;
        e.requests += 1;
        e.scrape_max = e.scrape_max.map(|m| m.max(e.inflight));
        e.awaiting += 1;
        let key = e.key;
        self.llm.index.record(key, &req.blocks);
        Pick::To(key)
    }

    fn nth_ok(&self, k: usize, now: u64, tried: &[Key]) -> usize {
        (0..self.endpoints.len())
            .filter(|&i| self.candidate(i, tried) && !self.endpoints[i].ejected(now))
            .nth(k)
            .expect("k < number of healthy candidates")
    }

    /// Ends an attempt started by `pick`: one fewer in flight, and the outcome counted for
    /// outlier detection. Returns true when this outcome ejected the endpoint. A draining
    /// endpoint is forgotten when its last request ends.
    pub fn finish(&mut self, key: Key, outcome: Outcome, now: u64) -> bool {
        let Some(i) = self.endpoints.iter().position(|e| e.key == key) else { return false };
        let serving = self.endpoints.iter().filter(|e| !e.draining).count();
        let ejected_now = self.endpoints.iter().filter(|e| !e.draining && e.ejected(now)).count();
        let ej = self.ejection;
        let e = &mut self.endpoints[i];
        debug_assert!(e.inflight > 0, "finish without pick");
        e.inflight = e.inflight.saturating_sub(1);
        let mut ejected = false;
        if outcome.is_failure() {
            e.failures += 1;
            e.consecutive_failures += 1;
            let allowed = (ejected_now as u64 + 1) * 100 <= ej.max_percent as u64 * serving as u64;
            if e.consecutive_failures >= ej.consecutive_failures && !e.ejected(now) && !e.draining && allowed {
                e.ejections += 1;
                let ms = ej.base_ms.saturating_mul(e.ejections as u64).min(ej.max_ms);
                e.ejected_until = Some(now.saturating_add(ms));
                e.consecutive_failures = 0;
                ejected = true;
            }
        } else {
            e.consecutive_failures = 0;
            // Back and healthy for a whole base period since the last ejection ended: the next
            // ejection starts short again.
            if let Some(u) = e.ejected_until
                && now >= u.saturating_add(ej.base_ms)
            {
                e.ejections = 0;
                e.ejected_until = None;
            }
        }
        if e.draining && e.inflight == 0 {
            self.endpoints.remove(i);
            self.llm.forget(key);
        }
        ejected
    }

    /// Whether the endpoint is ejected at `now`.
    pub fn is_ejected(&self, key: Key, now: u64) -> bool {
        self.get(key).is_some_and(|e| e.ejected(now))
    }

    /// Requests in flight over all endpoints.
    pub fn inflight(&self) -> u64 {
        self.endpoints.iter().map(|e| e.inflight as u64).sum()
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_fair;
#[cfg(test)]
mod tests_llm;
