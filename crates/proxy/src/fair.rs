//! Fair sharing and load shedding for LLM services with a per-replica concurrency limit
//! (`[proxy] max_concurrency`): the proxy's side of `balance::FairQueue`.
//!
//! A request that finds every ready replica at its limit (`Pick::Full`), or others already
//! queued, joins the service's fair queue under its tenant, with a cost in tokens
//! (`balance::request_cost` of the body's length and its `max_tokens`), unless the queue
//! refuses it (expected wait over `max_wait`, or full): then it gets 429 with `Retry-After`.
//! Every event that frees a slot (an attempt ends, endpoints change) runs [`Fair::dispatch`]
//! under the service's lock: it peeks at the next request in fair order, asks
//! `Pool::pick_llm` for a replica, and only then pops it and hands the replica (already
//! counted in flight) to the waiting task through its waiter slot and `Notify` (a permit is
//! kept if the task is not waiting yet, so no wake-up is lost). A waiting task that is
//! dropped (its client went away) takes its request out of the queue, or gives back the slot
//! it was granted and dispatches again. One that waits longer than the queue's `expire_ms`
//! (1.5 times `max_wait`) takes itself out and answers 429 as well: never a time-out.
//!
//! **Shares.** A tenant under its weighted share of the service's slots (`limit` × serving
//! replicas × its weight / the weights of the tenants with requests in flight or queued) is not
//! held back by the limit: its request goes to the least loaded replica at once, even over the
//! limit. The limit and the queue hold back the tenants that take more than their share. This
//! matters because an LLM server's sequences finish in waves (a batch decodes together), so a
//! request queued for a freed slot waits about half a request's time, however fair the order;
//! a quiet tenant would pay that on every request. The replicas need room for it: set the limit
//! below the server's batch (e.g. three quarters of it). Requests over the limit are bounded by
//! the shares: at most twice the limit's total.
//!
//! Tenants: the API key of `Authorization: Bearer KEY` if it is one of a tenant's keys, else
//! the `tenant_header`'s value if it names a tenant, else `default`. Only named tenants and
//! `default` exist, so the per-tenant metrics stay bounded.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use balance::{FairConfig, FairQueue, Key, LlmRequest, Pick, Pool, Refusal};
use hyper::header::{self, HeaderMap, HeaderName};
use tokio::sync::Notify;

/// The tenant of requests no key or header names.
pub(crate) const DEFAULT_TENANT: &str = "default";
/// Output tokens assumed for the cost of a request without `max_tokens`.
const DEFAULT_OUTPUT_TOKENS: u64 = 256;

/// A service's fair-queue settings, as the endpoint view (or `--static` flags) give them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FairSettings {
    /// Requests in flight per replica (at least 1).
    pub(crate) limit: u32,
    /// Bound on the expected wait, milliseconds.
    pub(crate) max_wait_ms: u64,
    /// Header naming the tenant (lower case).
    pub(crate) tenant_header: Option<String>,
    /// Tenants: name, weight, API keys.
    pub(crate) tenants: Vec<(String, u32, Vec<String>)>,
    /// Streamed requests per replica awaiting their first token before another is sent to it
    /// (`balance::LlmConfig::max_awaiting`; 0: not paced).
    pub(crate) pace: u32,
}

/// Where a queued request stands.
#[derive(Clone, Debug)]
pub(crate) enum WaitState {
    /// In the queue.
    Queued,
    /// Popped and given this replica (counted in flight).
    Granted(Key),
    /// Taken out: no replica left (hold for one as any request does) or the settings changed.
    Released,
}

/// A queued request's slot.
pub(crate) struct Waiter {
    req: LlmRequest,
    pub(crate) notify: Arc<Notify>,
    pub(crate) state: WaitState,
}

/// Per-tenant counters.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TenantStats {
    /// Requests that went to the fair queue.
    pub(crate) queued_total: u64,
    /// Requests answered 429 (refused, or waited past the bound).
    pub(crate) shed: u64,
    /// Queued requests granted a replica.
    pub(crate) granted: u64,
    /// Their waits in the queue, milliseconds, summed.
    pub(crate) wait_ms: u64,
}

/// The fair queue of one service and its waiters.
pub(crate) struct Fair {
    pub(crate) settings: FairSettings,
    pub(crate) queue: FairQueue<u64>,
    keys: HashMap<String, String>,
    names: BTreeMap<String, u32>,
    pub(crate) waiters: HashMap<u64, Waiter>,
    next_id: u64,
    pub(crate) stats: BTreeMap<String, TenantStats>,
    /// Requests of each tenant that hold a replica (first attempt to the end of the answer).
    inflight: BTreeMap<String, u32>,
}

/// A request's tenant and cost, worked out before it asks for a replica.
#[derive(Clone, Debug)]
pub(crate) struct Ticket {
    pub(crate) tenant: String,
    pub(crate) cost: u64,
}

/// Why a request was refused: the 429's `Retry-After` (seconds) and text.
#[derive(Debug)]
pub(crate) struct Shed {
    pub(crate) retry_after_s: u32,
    pub(crate) why: String,
}

impl Fair {
    /// A queue for these settings (weights checked by the controller; a bad one is reported).
    pub(crate) fn new(settings: FairSettings) -> Result<Fair, balance::FairError> {
        let max_wait_ms = settings.max_wait_ms.max(1);
        let cfg = FairConfig { max_wait_ms, expire_ms: max_wait_ms.saturating_mul(3) / 2, ..FairConfig::default() };
        let mut queue = FairQueue::new(cfg)?;
        let (mut keys, mut names) = (HashMap::new(), BTreeMap::new());
        let mut stats = BTreeMap::new();
        stats.insert(DEFAULT_TENANT.to_string(), TenantStats::default());
        for (name, weight, ks) in &settings.tenants {
            queue.set_weight(name, *weight)?;
            names.insert(name.clone(), *weight);
            stats.insert(name.clone(), TenantStats::default());
            for k in ks {
                keys.insert(k.clone(), name.clone());
            }
        }
        Ok(Fair { settings, queue, keys, names, waiters: HashMap::new(), next_id: 0, stats, inflight: BTreeMap::new() })
    }

    /// The tenant of a request (the module doc gives the rule).
    pub(crate) fn tenant_of(&self, headers: &HeaderMap) -> String {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim);
        if let Some(t) = bearer.and_then(|k| self.keys.get(k)) {
            return t.clone();
        }
        let named = self
            .settings
            .tenant_header
            .as_deref()
            .and_then(|h| HeaderName::from_bytes(h.as_bytes()).ok())
            .and_then(|h| headers.get(h))
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| self.names.contains_key(*v));
        named.unwrap_or(DEFAULT_TENANT).to_string()
    }

    /// Whether one more request of `tenant` stays within its share of the service's slots
    /// (`limit` × `serving` replicas × its weight / the weights of the tenants with requests in
    /// flight or queued, its own included). Such a request is not held back by the limit.
    pub(crate) fn under_share(&self, tenant: &str, serving: usize) -> bool {
        let total = f64::from(self.settings.limit) * serving as f64;
        let mut weights = u64::from(self.queue.weight(tenant));
        for t in self.stats.keys() {
            if t != tenant && (self.inflight.get(t).is_some_and(|n| *n > 0) || self.queue.queued(t) > 0) {
                weights += u64::from(self.queue.weight(t));
            }
        }
        let share = total * f64::from(self.queue.weight(tenant)) / weights as f64;
        f64::from(self.inflight.get(tenant).copied().unwrap_or(0)) + 1.0 <= share
    }

    /// A request of `tenant` got a replica.
    pub(crate) fn started(&mut self, tenant: &str) {
        *self.inflight.entry(tenant.to_string()).or_default() += 1;
    }

    /// A request of `tenant` ended.
    pub(crate) fn ended(&mut self, tenant: &str) {
        if let Some(n) = self.inflight.get_mut(tenant) {
            *n = n.saturating_sub(1);
        }
    }

    /// The expected wait bound, milliseconds.
    pub(crate) fn max_wait_ms(&self) -> u64 {
        self.queue.config().max_wait_ms
    }

    /// How long a queued request may wait before it answers 429 itself, milliseconds.
    pub(crate) fn expire_ms(&self) -> u64 {
        self.queue.config().expire_ms
    }

    /// Queues a request; its id and wake-up, or why it is refused (counted as shed).
    pub(crate) fn enqueue(&mut self, t: &Ticket, req: &LlmRequest, now: u64) -> Result<(u64, Arc<Notify>), Shed> {
        self.next_id += 1;
        let id = self.next_id;
        let limit = self.settings.limit;
        match self.queue.push(&t.tenant, id, t.cost, now) {
            Ok(()) => {
                let notify = Arc::new(Notify::new());
                self.waiters.insert(id, Waiter { req: req.clone(), notify: notify.clone(), state: WaitState::Queued });
                self.stats.entry(t.tenant.clone()).or_default().queued_total += 1;
                Ok((id, notify))
            }
            Err(r) => {
                self.stats.entry(t.tenant.clone()).or_default().shed += 1;
                let why = match r.reason {
                    Refusal::Wait(w) => format!(
                        "every replica is at its limit of {limit} requests and tenant {:?} would wait about {w} ms in the queue, over the bound of {} ms",
                        t.tenant,
                        self.max_wait_ms()
                    ),
                    Refusal::Full => {
                        format!("every replica is at its limit of {limit} requests and the queue is full ({} requests)", self.queue.len())
                    }
                };
                Err(Shed { retry_after_s: r.retry_after_s, why })
            }
        }
    }

    /// A queued request leaves: it waited past `expire_ms` or the proxy is shutting down
    /// (`shed`: counted as shed), or its client went away. If it was granted a replica in the
    /// meantime, the slot is given back and passed on. True if it was still queued.
    pub(crate) fn leave<T>(&mut self, id: u64, tenant: &str, shed: bool, pool: &mut Pool<T>, now: u64) -> bool {
        match self.waiters.remove(&id).map(|w| w.state) {
            Some(WaitState::Queued) => {
                self.queue.remove_if(|x| *x == id);
                if shed {
                    self.stats.entry(tenant.to_string()).or_default().shed += 1;
                }
                true
            }
            Some(WaitState::Granted(k)) => {
                pool.answered(k);
                pool.finish(k, balance::Outcome::Ok, now);
                self.dispatch(pool, now);
                false
            }
            Some(WaitState::Released) | None => false,
        }
    }

    /// Hands free slots to queued requests in fair order (see the module doc).
    pub(crate) fn dispatch<T>(&mut self, pool: &mut Pool<T>, now: u64) {
        while let Some((_, &id)) = self.queue.peek() {
            let Some(w) = self.waiters.get_mut(&id) else {
                // Not expected (a waiter leaves the map only with its entry); keep the queue moving.
                self.queue.pop(now);
                continue;
            };
            match pool.pick_llm(now, &[], &w.req) {
                Pick::To(k) => {
                    w.state = WaitState::Granted(k);
                    w.notify.notify_one();
                    if let Some(q) = self.queue.pop(now) {
                        let s = self.stats.entry(q.tenant).or_default();
                        s.granted += 1;
                        s.wait_ms += now.saturating_sub(q.enqueued_at_ms);
                    }
                }
                Pick::Full => break,
                Pick::Nothing => {
                    self.release_all();
                    break;
                }
            }
        }
    }

    /// Takes over the waiters and counters of the queue these settings replace: its queued
    /// requests are released (they ask again, and queue here), granted ones keep their replica.
    pub(crate) fn carry_over(&mut self, mut old: Fair) {
        old.release_all();
        self.next_id = self.next_id.max(old.next_id);
        self.waiters.extend(old.waiters);
        for (t, x) in old.stats {
            let e = self.stats.entry(t).or_default();
            e.queued_total += x.queued_total;
            e.shed += x.shed;
            e.granted += x.granted;
            e.wait_ms += x.wait_ms;
        }
        for (t, n) in old.inflight {
            *self.inflight.entry(t).or_default() += n;
        }
    }

    /// Ends the queue (the service has no limit any more): queued requests are released,
    /// granted replicas given back.
    pub(crate) fn close<T>(mut self, pool: &mut Pool<T>, now: u64) {
        self.release_all();
        for w in self.waiters.values() {
            if let WaitState::Granted(k) = w.state {
                pool.answered(k);
                pool.finish(k, balance::Outcome::Ok, now);
            }
        }
    }

    /// Takes every queued request out; each asks for a replica again as a new request would
    /// (when the service has no replica left, or its settings changed).
    pub(crate) fn release_all(&mut self) {
        self.queue.remove_if(|_| true);
        for w in self.waiters.values_mut() {
            if matches!(w.state, WaitState::Queued) {
                w.state = WaitState::Released;
                w.notify.notify_one();
            }
        }
    }
}

/// Parses `tandem proxy`'s fair-queue flags for `--static` services: `--max-concurrency N`,
/// `--max-wait DURATION` (`2s`, `500ms`), `--tenant-header NAME`, `--tenant NAME[=WEIGHT]`.
/// `None` without `--max-concurrency` (then the others are refused).
pub(crate) fn static_settings(
    limit: Option<u32>,
    max_wait: Option<&str>,
    header: Option<&str>,
    tenants: &[String],
    pace: Option<u32>,
) -> anyhow::Result<Option<FairSettings>> {
    use anyhow::bail;
    let Some(limit) = limit else {
        if max_wait.is_some() || header.is_some() || !tenants.is_empty() || pace.is_some() {
            bail!(
                "--max-wait, --tenant-header, --tenant and --prefill-pace need --max-concurrency (without a per-replica limit nothing queues)"
            );
        }
        return Ok(None);
    };
    if limit == 0 {
        bail!("--max-concurrency: at least 1");
    }
    let max_wait_ms = match max_wait {
        None => 10_000,
        Some(w) => {
            let t = w.trim();
            let (num, scale) = match t.strip_suffix("ms") {
                Some(n) => (n, 1.0),
                None => (t.strip_suffix('s').unwrap_or(t), 1000.0),
            };
            let v: f64 = num.trim().parse().map_err(|_| anyhow::anyhow!("--max-wait {w:?}: expected a duration like 2s or 500ms"))?;
            let ms = v * scale;
            if !(10.0..=600_000.0).contains(&ms) {
                bail!("--max-wait {w:?}: must be between 10 ms and 600 s");
            }
            ms.round() as u64
        }
    };
    if let Some(h) = header
        && HeaderName::from_bytes(h.as_bytes()).is_err()
    {
        bail!("--tenant-header {h:?}: not a header name");
    }
    let mut out = Vec::new();
    for t in tenants {
        let (name, weight) = match t.split_once('=') {
            Some((n, w)) => (n, w.trim().parse::<u32>().ok().filter(|w| (1..=1000).contains(w))),
            None => (t.as_str(), Some(1)),
        };
        let Some(weight) = weight else { bail!("--tenant {t:?}: the weight must be a whole number from 1 to 1000") };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.') {
            bail!("--tenant {t:?}: expected NAME[=WEIGHT], the name of letters, digits, '-', '_' or '.'");
        }
        if out.iter().any(|(n, _, _): &(String, u32, Vec<String>)| n == name) {
            bail!("--tenant {name:?} given twice");
        }
        out.push((name.to_string(), weight, Vec::new()));
    }
    Ok(Some(FairSettings {
        limit,
        max_wait_ms,
        tenant_header: header.map(str::to_ascii_lowercase),
        tenants: out,
        pace: pace.unwrap_or(wire::DEFAULT_PREFILL_PACE),
    }))
}

/// The cost of an OpenAI request body in token units: its length as the prompt (JSON's
/// overhead is small next to a prompt, and fairness needs only a consistent measure) and its
/// `max_tokens` (or `max_completion_tokens`; else 256) as the output.
pub(crate) fn cost_of(body: &[u8]) -> u64 {
    let v: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let field = |k: &str| v.as_ref().and_then(|v| v.get(k)).and_then(serde_json::Value::as_u64);
    let out = field("max_tokens").or_else(|| field("max_completion_tokens"));
    balance::request_cost(body.len() as u64, out.unwrap_or(DEFAULT_OUTPUT_TOKENS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use balance::{Ejection, Policy};
    use hyper::header::HeaderValue;

    fn settings() -> FairSettings {
        FairSettings {
            limit: 1,
            max_wait_ms: 1000,
            tenant_header: Some("x-tenant".into()),
            tenants: vec![("alice".into(), 2, vec!["sk-a".into()]), ("bob".into(), 1, vec![])],
            pace: 1,
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn tenants_by_key_then_header_then_default() {
        let f = Fair::new(settings()).unwrap();
        assert_eq!(f.tenant_of(&headers(&[("authorization", "Bearer sk-a")])), "alice");
        assert_eq!(f.tenant_of(&headers(&[("authorization", "Bearer sk-a"), ("x-tenant", "bob")])), "alice", "the key wins");
        assert_eq!(f.tenant_of(&headers(&[("x-tenant", "bob")])), "bob");
        assert_eq!(f.tenant_of(&headers(&[("authorization", "Bearer unknown"), ("x-tenant", "mallory")])), DEFAULT_TENANT);
        assert_eq!(f.tenant_of(&headers(&[("authorization", "Basic sk-a")])), DEFAULT_TENANT);
        assert_eq!(f.tenant_of(&HeaderMap::new()), DEFAULT_TENANT);
        assert_eq!(f.queue.weight("alice"), 2);
    }

    #[test]
    fn static_flags() {
        let t = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let s = static_settings(Some(4), Some("1.5s"), Some("X-Tenant"), &t(&["quiet", "noisy=2"]), None).unwrap().unwrap();
        assert_eq!((s.limit, s.max_wait_ms, s.tenant_header.as_deref(), s.pace), (4, 1500, Some("x-tenant"), 1));
        assert_eq!(s.tenants[1], ("noisy".to_string(), 2, vec![]));
        let s = static_settings(Some(2), Some("250ms"), None, &[], Some(0)).unwrap().unwrap();
        assert_eq!((s.max_wait_ms, s.pace), (250, 0));
        assert!(static_settings(None, None, None, &[], None).unwrap().is_none());
        assert!(static_settings(None, None, None, &[], Some(2)).is_err(), "the pace needs a limit");
        for (limit, wait, header, tenants) in [
            (None, Some("2s"), None, t(&[])),
            (Some(0), None, None, t(&[])),
            (Some(1), Some("-2s"), None, t(&[])),
            (Some(1), Some("2 weeks"), None, t(&[])),
            (Some(1), Some("0s"), None, t(&[])),
            (Some(1), None, Some("bad header"), t(&[])),
            (Some(1), None, None, t(&["a=0"])),
            (Some(1), None, None, t(&["a=heavy"])),
            (Some(1), None, None, t(&["a=-1"])),
            (Some(1), None, None, t(&["a b"])),
            (Some(1), None, None, t(&["a", "a=2"])),
        ] {
            assert!(static_settings(limit, wait, header, &tenants, None).is_err(), "{limit:?} {wait:?} {header:?} {tenants:?}");
        }
    }

    /// Two replicas of 2 slots: a tenant alone has all 4; beside another active tenant of
    /// weight 2 (alice), bob's share is a third.
    #[test]
    fn shares_follow_the_weights_of_active_tenants() {
        let mut f = Fair::new(FairSettings { limit: 2, ..settings() }).unwrap();
        for _ in 0..3 {
            assert!(f.under_share("bob", 2));
            f.started("bob");
        }
        assert!(f.under_share("bob", 2), "the 4th of 4 slots");
        f.started("bob");
        assert!(!f.under_share("bob", 2));
        assert!(f.under_share("alice", 2), "alice's share with bob active: 4 * 2/3");
        f.started("alice");
        assert!(!f.under_share("bob", 2));
        for _ in 0..4 {
            f.ended("bob");
        }
        assert!(f.under_share("bob", 2), "bob's share beside alice is 4/3");
        f.started("bob");
        assert!(!f.under_share("bob", 2));
        f.ended("alice");
        f.ended("alice");
        assert!(f.under_share("bob", 2), "alone again");
    }

    #[test]
    fn costs_read_max_tokens() {
        let body = br#"{"prompt":"abcd","max_tokens":10}"#;
        assert_eq!(cost_of(body), balance::request_cost(body.len() as u64, 10));
        let chat = br#"{"messages":[],"max_completion_tokens":3}"#;
        assert_eq!(cost_of(chat), balance::request_cost(chat.len() as u64, 3));
        assert_eq!(cost_of(b"not json"), balance::request_cost(8, DEFAULT_OUTPUT_TOKENS));
        assert_eq!(cost_of(br#"{"max_tokens":-1}"#), balance::request_cost(17, DEFAULT_OUTPUT_TOKENS));
    }

    /// One replica with one slot: queued requests get it in fair order as attempts end, a
    /// request that goes away leaves the queue, and no replica releases the waiters.
    #[test]
    fn dispatch_grants_in_fair_order_and_releases_when_no_replica_is_left() {
        let mut pool: Pool<()> = Pool::new(Policy::Llm, Ejection::default(), 1);
        pool.set_llm_config(balance::LlmConfig { max_inflight: Some(1), ..balance::LlmConfig::default() });
        pool.set_endpoints(["r0"], |_, _| true, |_| ());
        let mut f = Fair::new(settings()).unwrap();
        let none = LlmRequest::default();
        let Pick::To(busy) = pool.pick_llm(0, &[], &none) else { panic!("a free slot") };
        let t = |n: &str| Ticket { tenant: n.into(), cost: 10 };
        let (a1, _) = f.enqueue(&t("alice"), &none, 0).unwrap();
        let (b1, _) = f.enqueue(&t("bob"), &none, 0).unwrap();
        let (b2, _) = f.enqueue(&t("bob"), &none, 0).unwrap();
        f.dispatch(&mut pool, 1);
        assert!(f.waiters.values().all(|w| matches!(w.state, WaitState::Queued)), "no slot yet");
        pool.finish(busy, balance::Outcome::Ok, 2);
        f.dispatch(&mut pool, 2);
        assert!(matches!(f.waiters[&a1].state, WaitState::Granted(_)));
        assert_eq!(f.queue.len(), 2);
        // bob's first request waits too long, then alice's granted one goes away before it
        // is sent: the slot passes on to bob's second.
        assert!(f.leave(b1, "bob", true, &mut pool, 2));
        assert!(!f.leave(b1, "bob", true, &mut pool, 2), "only once");
        assert_eq!((f.queue.len(), f.stats["bob"].shed), (1, 1));
        assert!(!f.leave(a1, "alice", false, &mut pool, 3));
        assert!(matches!(f.waiters[&b2].state, WaitState::Granted(_)));
        assert_eq!((f.queue.len(), f.stats["alice"].shed, pool.inflight()), (0, 0, 1));
        let (b3, _) = f.enqueue(&t("bob"), &none, 3).unwrap();
        pool.set_endpoints(std::iter::empty::<&str>(), |_, _| true, |_| ());
        f.dispatch(&mut pool, 3);
        assert!(matches!(f.waiters[&b3].state, WaitState::Released));
        assert!(f.queue.is_empty());
    }
}
