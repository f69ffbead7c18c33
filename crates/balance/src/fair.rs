//! The weighted fair queue of one service: requests the proxy holds while every replica is at
//! its concurrency limit, served by tenant in weighted fair order, with admission by expected
//! wait.
//!
//! **Order: tokens, not requests** (the Virtual Token Counter of Sheng et al., "Fairness in
//! Serving Large Language Models", OSDI 2024). LLM requests differ in cost by two orders of
//! magnitude (a 50-token chat turn against a 20,000-token document), so counting requests
//! would let a tenant with long prompts take most of the GPUs while "fairly" sending as many
//! requests as the others. Each tenant has a counter of the service it received, in cost units
//! divided by its weight; the queue serves the backlogged tenant with the smallest counter
//! (ties: the earlier request), and charges it `cost / weight` when the request leaves the
//! queue. A cost is a token estimate the caller passes in ([`request_cost`]: input tokens
//! weighted 1 and output tokens 2, VTC's default ratio); when the request ends, `settle`
//! corrects the charge with the real counts (VTC counts output tokens as they are generated;
//! charging the estimate up front and settling once is the proxy's approximation of that).
//!
//! **Bound.** A tenant that becomes backlogged is lifted to the smallest counter among the
//! backlogged tenants (or, if none, to the counter of the last request served), so idle time
//! is not banked as credit. With no settlements, the counters of tenants backlogged together
//! stay within `max(cost / weight)` of one another (the one served is always the smallest, and
//! one service moves it by at most that), so over any interval in which both are backlogged,
//! `|service_u / w_u - service_v / w_v|` stays within twice that amount (VTC's bound).
//!
//! **Admission.** `push` estimates how long a new request would wait: the queued cost ahead of
//! it in fair order (its tenant's own queue, plus what each other backlogged tenant will be
//! served until its counter passes the new request's virtual start) divided by the rate at
//! which the queue has been served (cost per ms over the last `rate_window_ms`, measured over
//! at least `rate_min_span_ms`, from at least `min_samples` departures; with fewer, no
//! estimate and the request is admitted). A request
//! whose estimate exceeds `max_wait_ms`, or that finds `max_queued` requests queued, is refused
//! with a suggested `Retry-After`: the excess wait rounded up to seconds, between 1 and
//! `max_retry_after_s`. A noisy tenant's own long queue is ahead of its next request, so it is
//! refused first, while a quiet tenant's request has little ahead of it and is admitted.
//! `expire` hands back requests that waited longer than `expire_ms` anyway (the estimate is
//! only an estimate; default 1.5 times the bound), for a 429 rather than a time-out.

use std::collections::{BTreeMap, VecDeque};

/// Defaults of [`FairConfig`].
pub const MAX_WAIT_MS: u64 = 10_000;

/// A fair queue's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FairConfig {
    /// The service's bound on the wait in the queue; longer expected waits are refused.
    pub max_wait_ms: u64,
    /// Requests queued longer than this are handed back by `expire` (for a 429). It should be
    /// above `max_wait_ms`: the queue fills up to the bound, and requests admitted at the
    /// margin would otherwise expire on the estimate's noise.
    pub expire_ms: u64,
    /// At most this many requests queued (all tenants); more are refused.
    pub max_queued: usize,
    /// Weight of a tenant not given one.
    pub default_weight: u32,
    /// Largest suggested `Retry-After`.
    pub max_retry_after_s: u32,
    /// Departures older than this are not used to estimate the service rate.
    pub rate_window_ms: u64,
    /// Departures in the window needed before waits are estimated.
    pub min_samples: usize,
    /// The rate is measured over at least this span (ms), so a burst of departures right
    /// after a quiet spell (the first slots freeing together) does not read as a high rate.
    pub rate_min_span_ms: u64,
}

impl Default for FairConfig {
    fn default() -> FairConfig {
        FairConfig {
            max_wait_ms: MAX_WAIT_MS,
            expire_ms: MAX_WAIT_MS * 3 / 2,
            max_queued: 10_000,
            default_weight: 1,
            max_retry_after_s: 60,
            rate_window_ms: 10_000,
            min_samples: 8,
            rate_min_span_ms: 1_000,
        }
    }
}

/// A bad fair-queue setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FairError {
    /// Weights must be at least 1 (a tenant of weight 0 would never be served).
    #[error("tenant {tenant:?}: weight must be at least 1")]
    ZeroWeight {
        /// The tenant (empty for the default weight).
        tenant: String,
    },
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Its expected wait (ms) exceeds the service's bound.
    Wait(u64),
    /// The queue holds `max_queued` requests.
    Full,
}

/// A refused request, handed back with the suggested `Retry-After`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused<T> {
    /// The caller's item, back.
    pub item: T,
    /// Why.
    pub reason: Refusal,
    /// Suggested `Retry-After`, in seconds (at least 1).
    pub retry_after_s: u32,
}

/// A request leaving the queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queued<T> {
    /// Its tenant.
    pub tenant: String,
    /// The caller's item.
    pub item: T,
    /// The cost it was queued with (and, from `pop`, charged).
    pub cost: u64,
    /// When it was queued.
    pub enqueued_at_ms: u64,
}

/// A request's cost estimate in token units: input tokens weighted 1 (estimated from prompt
/// bytes at 4 bytes a token, a rough average; fairness needs only a consistent measure, and
/// `settle` corrects it) plus output tokens (`max_tokens`, or the caller's guess) weighted 2.
/// At least 1.
pub fn request_cost(prompt_bytes: u64, output_tokens: u64) -> u64 {
    prompt_bytes.div_ceil(4).saturating_add(output_tokens.saturating_mul(2)).max(1)
}

#[derive(Clone, Debug)]
struct Entry<T> {
    item: T,
    cost: u64,
    at: u64,
    seq: u64,
}

#[derive(Clone, Debug)]
struct Tenant<T> {
    counter: f64,
    queue: VecDeque<Entry<T>>,
    queued_cost: u64,
}

impl<T> Default for Tenant<T> {
    fn default() -> Tenant<T> {
        Tenant { counter: 0.0, queue: VecDeque::new(), queued_cost: 0 }
    }
}

/// The weighted fair queue of one service (the module doc gives the rules).
#[derive(Clone, Debug)]
pub struct FairQueue<T> {
    cfg: FairConfig,
    weights: BTreeMap<String, u32>,
    tenants: BTreeMap<String, Tenant<T>>,
    /// Counter of the last request served (before its charge): where idle tenants start.
    vtime: f64,
    seq: u64,
    len: usize,
    departures: VecDeque<(u64, u64)>,
}

/// Idle tenants remembered at most (beyond it, idle ones at or below `vtime` are forgotten:
/// they would be lifted to at least that on return anyway).
const MAX_IDLE_TENANTS: usize = 4096;

impl<T> FairQueue<T> {
    /// An empty queue.
    pub fn new(cfg: FairConfig) -> Result<FairQueue<T>, FairError> {
        if cfg.default_weight == 0 {
            return Err(FairError::ZeroWeight { tenant: String::new() });
        }
        Ok(FairQueue { cfg, weights: BTreeMap::new(), tenants: BTreeMap::new(), vtime: 0.0, seq: 0, len: 0, departures: VecDeque::new() })
    }

    /// The settings.
    pub fn config(&self) -> &FairConfig {
        &self.cfg
    }

    /// Sets a tenant's weight (at least 1).
    pub fn set_weight(&mut self, tenant: &str, weight: u32) -> Result<(), FairError> {
        if weight == 0 {
            return Err(FairError::ZeroWeight { tenant: tenant.to_string() });
        }
        self.weights.insert(tenant.to_string(), weight);
        Ok(())
    }

    /// A tenant's weight (the default if not set).
    pub fn weight(&self, tenant: &str) -> u32 {
        self.weights.get(tenant).copied().unwrap_or(self.cfg.default_weight).max(1)
    }

    /// Requests queued, all tenants.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Requests queued for a tenant.
    pub fn queued(&self, tenant: &str) -> usize {
        self.tenants.get(tenant).map_or(0, |t| t.queue.len())
    }

    /// A tenant's virtual token counter (service received divided by weight).
    pub fn counter(&self, tenant: &str) -> f64 {
        self.tenants.get(tenant).map_or(0.0, |t| t.counter)
    }

    fn backlogged_min(&self) -> Option<f64> {
        self.tenants.values().filter(|t| !t.queue.is_empty()).map(|t| t.counter).min_by(f64::total_cmp)
    }

    /// Where a tenant's counter would stand once backlogged.
    fn lifted(&self, tenant: &str) -> f64 {
        let own = self.tenants.get(tenant);
        if let Some(t) = own
            && !t.queue.is_empty()
        {
            return t.counter;
        }
        let floor = self.backlogged_min().unwrap_or(self.vtime);
        own.map_or(0.0, |t| t.counter).max(floor)
    }

    /// Service rate in cost per ms, if enough recent departures are known.
    fn rate(&self, now: u64) -> Option<f64> {
        let since = now.saturating_sub(self.cfg.rate_window_ms);
        let (mut count, mut first, mut cost) = (0usize, now, 0.0f64);
        for &(t, c) in self.departures.iter().filter(|(t, _)| *t >= since) {
            count += 1;
            first = first.min(t);
            cost += c as f64;
        }
        if count < self.cfg.min_samples.max(1) {
            return None;
        }
        let span = now.saturating_sub(first).max(self.cfg.rate_min_span_ms.min(self.cfg.rate_window_ms)).max(1);
        Some(cost / span as f64)
    }

    /// Queued cost that would be served before a new request of `tenant`.
    pub fn cost_ahead(&self, tenant: &str) -> u64 {
        let w = f64::from(self.weight(tenant));
        let (own_cost, own_counter) = (self.tenants.get(tenant).map_or(0, |t| t.queued_cost), self.lifted(tenant));
        let start = own_counter + own_cost as f64 / w;
        let mut ahead = own_cost as f64;
        for (name, t) in &self.tenants {
            if name == tenant || t.queue.is_empty() {
                continue;
            }
            let share = ((start - t.counter).max(0.0) * f64::from(self.weight(name))).min(t.queued_cost as f64);
            ahead += share;
        }
        ahead.min(u64::MAX as f64) as u64
    }

    /// The expected wait (ms) of a new request of `tenant` at `now`; `None` while the service
    /// rate is unknown.
    pub fn expected_wait_ms(&self, tenant: &str, now: u64) -> Option<u64> {
        let ahead = self.cost_ahead(tenant);
        if ahead == 0 {
            return Some(0);
        }
        let rate = self.rate(now)?;
        Some((ahead as f64 / rate).ceil().min(u64::MAX as f64) as u64)
    }

    fn retry_after(&self, excess_ms: u64) -> u32 {
        let s = excess_ms.div_ceil(1000).max(1);
        u32::try_from(s).unwrap_or(u32::MAX).min(self.cfg.max_retry_after_s.max(1))
    }

    /// Queues a request of `tenant` with a cost (token units; 0 is read as 1), or refuses it
    /// (the module doc gives the rule) and hands it back.
    pub fn push(&mut self, tenant: &str, item: T, cost: u64, now: u64) -> Result<(), Refused<T>> {
        let cost = cost.max(1);
        let wait = self.expected_wait_ms(tenant, now);
        if self.len >= self.cfg.max_queued {
            let excess = wait.map_or(1000, |w| w.saturating_sub(self.cfg.max_wait_ms).max(1));
            return Err(Refused { item, reason: Refusal::Full, retry_after_s: self.retry_after(excess) });
        }
        if let Some(w) = wait
            && w > self.cfg.max_wait_ms
        {
            let excess = w - self.cfg.max_wait_ms;
            return Err(Refused { item, reason: Refusal::Wait(w), retry_after_s: self.retry_after(excess) });
        }
        let lifted = self.lifted(tenant);
        if self.tenants.len() >= MAX_IDLE_TENANTS && !self.tenants.contains_key(tenant) {
            let v = self.vtime;
            self.tenants.retain(|_, t| !t.queue.is_empty() || t.counter > v);
        }
        let t = self.tenants.entry(tenant.to_string()).or_default();
        t.counter = lifted;
        self.seq += 1;
        t.queue.push_back(Entry { item, cost, at: now, seq: self.seq });
        t.queued_cost = t.queued_cost.saturating_add(cost);
        self.len += 1;
        Ok(())
    }

    /// The tenant whose request `pop` would take next.
    fn next_tenant(&self) -> Option<&String> {
        self.tenants
            .iter()
            .filter_map(|(n, t)| t.queue.front().map(|e| (n, t.counter, e.seq)))
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.2.cmp(&b.2)))
            .map(|(n, _, _)| n)
    }

    /// The request `pop` would take next (its tenant and item), without taking or charging it:
    /// the caller can first check that a replica will take it (and leave it queued if not).
    pub fn peek(&self) -> Option<(&str, &T)> {
        let name = self.next_tenant()?;
        let e = self.tenants[name].queue.front().expect("the next tenant is backlogged");
        Some((name.as_str(), &e.item))
    }

    /// Takes the next request in weighted fair order and charges its tenant.
    pub fn pop(&mut self, now: u64) -> Option<Queued<T>> {
        let name = self.next_tenant()?.clone();
        let w = f64::from(self.weight(&name));
        let t = self.tenants.get_mut(&name).expect("chosen tenant exists");
        let e = t.queue.pop_front().expect("chosen tenant is backlogged");
        t.queued_cost = t.queued_cost.saturating_sub(e.cost);
        self.vtime = self.vtime.max(t.counter);
        t.counter += e.cost as f64 / w;
        self.len -= 1;
        self.departures.push_back((now, e.cost));
        let since = now.saturating_sub(self.cfg.rate_window_ms);
        while self.departures.len() > 1024 || self.departures.front().is_some_and(|(t, _)| *t < since) {
            self.departures.pop_front();
        }
        Some(Queued { tenant: name, item: e.item, cost: e.cost, enqueued_at_ms: e.at })
    }

    /// Corrects a tenant's charge once a request's real cost is known (`charged`: what `pop`
    /// charged; `actual`: e.g. `request_cost` of the real input and output token counts).
    pub fn settle(&mut self, tenant: &str, charged: u64, actual: u64) {
        let w = f64::from(self.weight(tenant));
        if let Some(t) = self.tenants.get_mut(tenant) {
            t.counter = (t.counter + (actual as f64 - charged as f64) / w).max(0.0);
        }
    }

    /// Removes and returns the requests queued longer than `expire_ms` (answer them 429).
    pub fn expire(&mut self, now: u64) -> Vec<Queued<T>> {
        let limit = self.cfg.expire_ms;
        self.remove_where(|e| now.saturating_sub(e.at) > limit)
    }

    /// Removes and returns the queued requests whose item matches (a client that went away).
    pub fn remove_if(&mut self, mut f: impl FnMut(&T) -> bool) -> Vec<Queued<T>> {
        self.remove_where(|e| f(&e.item))
    }

    fn remove_where(&mut self, mut f: impl FnMut(&Entry<T>) -> bool) -> Vec<Queued<T>> {
        let mut out = Vec::new();
        for (name, t) in &mut self.tenants {
            let mut keep = VecDeque::with_capacity(t.queue.len());
            for e in t.queue.drain(..) {
                if f(&e) {
                    t.queued_cost = t.queued_cost.saturating_sub(e.cost);
                    out.push(Queued { tenant: name.clone(), item: e.item, cost: e.cost, enqueued_at_ms: e.at });
                } else {
                    keep.push_back(e);
                }
            }
            t.queue = keep;
        }
        self.len -= out.len();
        out
    }
}
