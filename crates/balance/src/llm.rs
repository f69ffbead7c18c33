//! The LLM picker's rule, as a pure function over the candidates: expected prefix-cache hit
//! weighed against load, under a bounded-load cap, with session pinning and a least-request
//! fallback. `Pool::pick_llm` builds the candidates from its endpoints, its prefix index and
//! the scraped gauges, and calls [`choose`].
//!
//! **Load.** A replica's load is `inflight + max(0, running + waiting - seen_inflight)`:
//! `inflight` is what this proxy has sent it and not yet seen finish (exact, immediate);
//! `running` and `waiting` are the replica's own gauges (`vllm:num_requests_running`,
//! `vllm:num_requests_waiting`), which also count other proxies' requests but lag by a
//! scrape; `seen_inflight` is this proxy's in-flight count when those gauges were recorded.
//! So only what other proxies had sent is taken from the lagging gauges. (The earlier rule,
//! `max(inflight, running + waiting)`, let a replica that had just finished a burst look busy
//! for a whole scrape interval and one that looked idle at the last scrape take every new
//! request until the next: on prompts with nothing to share it gave 5-9x least request's
//! time-to-first-token p99.) Gauges older than `gauge_max_age_ms` at the time of the pick are
//! ignored (a replica that stopped answering scrapes is judged by the in-flight count alone).
//!
//! **Bounded load** (consistent hashing with bounded loads, Mirrokni, Thorup and Zadimoghaddam,
//! SODA 2018, plus an additive slack). Over the `n` candidates with loads `l_i` summing to
//! `L`, the cap is `bound = ceil(c * (L + 1) / n) + slack` with `c = load_factor_percent / 100`
//! (default 1.25; values under 1 are read as 1) and `slack = load_slack` (default 1). Only a
//! replica with `l_i + 1 <= bound` may take the request: after taking it no replica holds more
//! than `c` times the average load including the new request, rounded up, plus `slack`. At
//! least one replica always qualifies (if every `l_i >= bound` then
//! `L >= n * bound >= c * (L + 1) > L`). The slack is for light load, where the plain rule is
//! harsh (4 replicas, 1 request in flight: the plain cap is 1, so a second request of the same
//! prompt would have to go elsewhere although an LLM server batches it at no cost); under real
//! load the `c * average` term dominates. Affinity of any kind (prefix or session) never lets
//! a request past the cap: a replica far above average simply loses it.
//!
//! **Score** (for a request with `b >= 1` prompt blocks, among the replicas under the cap):
//! `score_i = prefix_weight * hit_i / b - load_weight * l_i / bound - kv_weight * kv_i`, where
//! `hit_i` is the number of the request's leading blocks the replica is believed to hold
//! (`PrefixIndex::hit`) and `kv_i` the part of its fresh `vllm:kv_cache_usage_perc` above
//! `KV_KNEE` (0.8), scaled to `0..=1` (0 when stale or absent): a cache that is nearly full
//! (where vLLM starts preempting) costs steeply, and below the knee KV usage counts nothing,
//! since there it is only a scrape-old echo of the load the in-flight count gives exactly
//! (weighed linearly, it herded prompts with nothing to share onto whichever replica looked
//! emptiest at the last scrape: 2.5-3x least request's time-to-first-token p99 in `tandem bench
//! llm --workload unique`). Defaults 2, 1, 1 (llm-d's default profile weighs its prefix scorer
//! 2 to its load scorer 1). The highest score wins; equal scores go to the replica with the highest
//! rendezvous (highest-random-weight) hash of the replica's id and the request's *first block
//! that no candidate under the cap holds* (the last block if one holds them all). So prompts
//! that share a known prefix but differ afterwards spread by their differing part.
//!
//! **A prompt no candidate under the cap holds any block of** goes as least request goes: the
//! least loaded replica, ties in turn from a rotating start. (It used to be scored the same
//! way, which left it to the rendezvous hash among equal loads; with nothing to gain from any
//! cache, that only spread new prompts less evenly in time than taking turns: in `tandem bench
//! llm --workload unique` the scored rule gave 1.3-2.6x least request's TTFT p99.) The replica
//! it lands on is recorded, so the prompt's next request, and every prompt sharing its
//! beginning, finds it there.
//!
//! Candidates are the endpoints `Pool::pick_llm` leaves in: not draining, not tried,
//! not ejected (unless all are), under `max_inflight` and `max_awaiting`. For a request let
//! past the limit (`Pool::pick_llm_unheld`: a tenant under its share), the healthy endpoints
//! with the fewest requests awaiting their first token, whatever their count in flight.
//!
//! **Sessions.** A request with a session key (the `x-session-id` header) goes to the first
//! replica under the cap in the rendezvous order of `hash(session)`: the same replica for the
//! whole session on every proxy while it stays under the cap ("sticky until saturated"); when
//! it is over, the session moves to its next replica in that order; when replicas come or go,
//! only the sessions whose first choice changed move (rendezvous hashing's minimal disruption).
//!
//! **No prompt** (not OpenAI-shaped, or shorter than one block) and no session: least request
//! too.

use crate::prefix::{BlockHash, PrefixConfig, hash_bytes, mix};

/// Default `load_factor_percent`: no replica above 1.25 times the average load (rounded up).
pub const LOAD_FACTOR_PERCENT: u32 = 125;

/// Default `load_slack`: one request more than the `c * average` cap.
pub const LOAD_SLACK: u32 = 1;

/// KV-cache usage below this fraction does not count against a replica (module doc).
pub const KV_KNEE: f64 = 0.8;

/// Default age after which scraped gauges are ignored.
pub const GAUGE_MAX_AGE_MS: u64 = 5_000;

/// Settings of the LLM picker of one service.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LlmConfig {
    /// How prompts are cut into blocks.
    pub prefix: PrefixConfig,
    /// Per-replica capacity of the prefix index, in blocks (about what a replica's KV cache
    /// holds, in prompt bytes divided by the block size).
    pub capacity_blocks: usize,
    /// `c` of the bounded-load rule, in percent (values under 100 are read as 100).
    pub load_factor_percent: u32,
    /// Additive slack of the bounded-load cap, in requests.
    pub load_slack: u32,
    /// Weight of the expected prefix hit (fraction of the request's blocks).
    pub prefix_weight: f64,
    /// Weight of the load (fraction of the bound).
    pub load_weight: f64,
    /// Weight of the KV-cache usage (fraction, from the gauges).
    pub kv_weight: f64,
    /// Gauges scraped longer ago than this are ignored.
    pub gauge_max_age_ms: u64,
    /// Per-replica concurrency limit on this proxy's in-flight requests; when every replica
    /// is at it, `Pool::pick_llm` answers `Pick::Full` and the caller queues the request.
    pub max_inflight: Option<u32>,
    /// Requests per replica sent whose answer has not begun (their first token), at most:
    /// replicas at it are left out, as at `max_inflight` (`None`: no bound). The proxy sets
    /// it with a per-replica limit and reports answers with `Pool::answered`.
    pub max_awaiting: Option<u32>,
}

impl Default for LlmConfig {
    fn default() -> LlmConfig {
        LlmConfig {
            prefix: PrefixConfig::default(),
            capacity_blocks: crate::prefix::CAPACITY_BLOCKS,
            load_factor_percent: LOAD_FACTOR_PERCENT,
            load_slack: LOAD_SLACK,
            prefix_weight: 2.0,
            load_weight: 1.0,
            kv_weight: 1.0,
            gauge_max_age_ms: GAUGE_MAX_AGE_MS,
            max_inflight: None,
            max_awaiting: None,
        }
    }
}

/// A setting of [`LlmConfig`] that makes no sense.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmConfigError {
    /// The block size is 0.
    #[error("prefix block size must be at least 1 byte")]
    ZeroBlock,
    /// `c` under 1 would leave some requests no replica.
    #[error("load factor must be at least 100 percent, got {0}")]
    LoadFactor(u32),
    /// A weight is negative or not a number.
    #[error("{name} weight must be a finite number >= 0, got {value}")]
    Weight {
        /// Which weight.
        name: &'static str,
        /// Its value.
        value: f64,
    },
    /// A concurrency limit of 0 would queue everything forever.
    #[error("max_inflight must be at least 1")]
    ZeroLimit,
}

impl LlmConfig {
    /// Checks the settings (the picker itself never panics on bad ones: it clamps them).
    pub fn validate(&self) -> Result<(), LlmConfigError> {
        if self.prefix.block_bytes == 0 {
            return Err(LlmConfigError::ZeroBlock);
        }
        if self.load_factor_percent < 100 {
            return Err(LlmConfigError::LoadFactor(self.load_factor_percent));
        }
        for (name, value) in [("prefix", self.prefix_weight), ("load", self.load_weight), ("kv", self.kv_weight)] {
            if !value.is_finite() || value < 0.0 {
                return Err(LlmConfigError::Weight { name, value });
            }
        }
        if self.max_inflight == Some(0) {
            return Err(LlmConfigError::ZeroLimit);
        }
        Ok(())
    }
}

/// A replica's gauges as last scraped from its `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gauges {
    /// `vllm:num_requests_running`.
    pub running: u32,
    /// `vllm:num_requests_waiting`.
    pub waiting: u32,
    /// `vllm:kv_cache_usage_perc`, a fraction in `0..=1` (out-of-range values are clamped,
    /// a NaN counts as 0).
    pub kv_usage: f64,
    /// When they were scraped (ms, the caller's clock).
    pub scraped_at_ms: u64,
    /// This proxy's requests in flight to the replica when the gauges were recorded
    /// (`Pool::set_gauges` fills it in): the part of `running + waiting` that was this
    /// proxy's own, already counted, exactly and without lag, by `Candidate::inflight`.
    pub seen_inflight: u32,
}

impl Gauges {
    /// Whether they are recent enough to use at `now`.
    pub fn fresh(&self, now: u64, max_age_ms: u64) -> bool {
        now.saturating_sub(self.scraped_at_ms) <= max_age_ms
    }

    fn kv(&self) -> f64 {
        if self.kv_usage.is_nan() { 0.0 } else { self.kv_usage.clamp(0.0, 1.0) }
    }
}

/// What the proxy read from one request, hashed outside any lock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LlmRequest {
    /// The prompt's block hashes (`prefix::block_hashes`); empty when the request has no
    /// prompt the proxy could read.
    pub blocks: Vec<BlockHash>,
    /// The session key (`x-session-id`), if any.
    pub session: Option<String>,
}

impl LlmRequest {
    /// A request from its prompt bytes (the model name as context) and session key (an empty
    /// or blank key counts as none).
    pub fn new(model: &str, prompt: Option<&[u8]>, session: Option<&str>, cfg: &PrefixConfig) -> LlmRequest {
        LlmRequest {
            blocks: prompt.map(|p| crate::prefix::block_hashes(model.as_bytes(), p, cfg)).unwrap_or_default(),
            session: session.map(str::trim).filter(|s| !s.is_empty()).map(str::to_string),
        }
    }

    /// How [`choose`] will treat it.
    pub fn route(&self) -> Route<'_> {
        match (&self.session, self.blocks.is_empty()) {
            (Some(s), _) => Route::Session(session_hash(s)),
            (None, false) => Route::Prefix(&self.blocks),
            (None, true) => Route::Least,
        }
    }
}

/// The hash a session key is placed by.
pub fn session_hash(session: &str) -> u64 {
    hash_bytes(0x7365_7373_696F_6E00, session.as_bytes())
}

/// The hash a replica id is placed by (stable across proxies: it depends on the id only).
pub fn replica_hash(id: &str) -> u64 {
    hash_bytes(0x7265_706C_6963_6100, id.as_bytes())
}

/// How a request is placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route<'a> {
    /// No prompt and no session: the least loaded replica.
    Least,
    /// Pinned by a session hash (rendezvous order, under the cap).
    Session(u64),
    /// Scored by expected prefix hit against load.
    Prefix(&'a [BlockHash]),
}

/// One replica as the picker sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    /// `replica_hash` of its id.
    pub id_hash: u64,
    /// This proxy's requests in flight to it.
    pub inflight: u32,
    /// Its last scraped gauges, if any.
    pub gauges: Option<Gauges>,
    /// Leading blocks of the request it is believed to hold (0 for `Least` and `Session`).
    pub hit: usize,
}

impl Candidate {
    /// Its load at `now`: `inflight + max(0, running + waiting - seen_inflight)` with fresh
    /// gauges (this proxy's own requests now, plus what others had sent it at the scrape),
    /// else `inflight`.
    pub fn load(&self, now: u64, cfg: &LlmConfig) -> u64 {
        let own = u64::from(self.inflight);
        match self.gauges {
            Some(g) if g.fresh(now, cfg.gauge_max_age_ms) => {
                own + (u64::from(g.running) + u64::from(g.waiting)).saturating_sub(u64::from(g.seen_inflight))
            }
            _ => own,
        }
    }

    /// Its KV-cache pressure at `now`: usage above `KV_KNEE`, scaled to `0..=1`.
    pub fn kv(&self, now: u64, cfg: &LlmConfig) -> f64 {
        match self.gauges {
            Some(g) if g.fresh(now, cfg.gauge_max_age_ms) => ((g.kv() - KV_KNEE) / (1.0 - KV_KNEE)).max(0.0),
            _ => 0.0,
        }
    }
}

/// The bounded-load cap: `ceil(c * (total + 1) / n) + slack` with
/// `c = max(percent, 100) / 100` (`u64::MAX` for `n = 0`).
pub fn load_bound(total: u64, n: usize, percent: u32, slack: u32) -> u64 {
    if n == 0 {
        return u64::MAX;
    }
    let num = u128::from(percent.max(100)) * (u128::from(total) + 1);
    let den = 100 * n as u128;
    u64::try_from(num.div_ceil(den) + u128::from(slack)).unwrap_or(u64::MAX)
}

/// Rendezvous weight of a replica for a key.
fn rendezvous(key: u64, id_hash: u64) -> u64 {
    mix(key ^ mix(id_hash.wrapping_add(0x9E37_79B9_7F4A_7C15)))
}

/// Picks the candidate for a request (the module doc gives the rule); `start` rotates ties of
/// the least-request fallback. `None` only when there is no candidate.
pub fn choose(cands: &[Candidate], route: Route<'_>, start: usize, now: u64, cfg: &LlmConfig) -> Option<usize> {
    let n = cands.len();
    if n == 0 {
        return None;
    }
    let loads: Vec<u64> = cands.iter().map(|c| c.load(now, cfg)).collect();
    let total = loads.iter().fold(0u64, |a, &l| a.saturating_add(l));
    let bound = load_bound(total, n, cfg.load_factor_percent, cfg.load_slack);
    let under = |i: usize| loads[i] < bound;
    match route {
        Route::Least | Route::Prefix([]) => (0..n).map(|k| (start % n + k) % n).min_by_key(|&i| loads[i]),
        Route::Session(h) => (0..n).filter(|&i| under(i)).max_by_key(|&i| (rendezvous(h, cands[i].id_hash), std::cmp::Reverse(i))),
        Route::Prefix(blocks) => {
            let b = blocks.len() as f64;
            let max_hit = (0..n).filter(|&i| under(i)).map(|i| cands[i].hit).max().unwrap_or(0);
            if max_hit == 0 {
                // Nothing to gain from any cache: least request (module doc).
                return (0..n).map(|k| (start % n + k) % n).min_by_key(|&i| loads[i]);
            }
            let tie = blocks[max_hit.min(blocks.len() - 1)].0;
            let weight = |w: f64| if w.is_finite() && w > 0.0 { w } else { 0.0 };
            let (wp, wl, wk) = (weight(cfg.prefix_weight), weight(cfg.load_weight), weight(cfg.kv_weight));
            let score = |i: usize| {
                let c = &cands[i];
                wp * (c.hit.min(blocks.len()) as f64 / b) - wl * (loads[i] as f64 / bound as f64) - wk * c.kv(now, cfg)
            };
            (0..n).filter(|&i| under(i)).max_by(|&i, &j| {
                score(i)
                    .total_cmp(&score(j))
                    .then_with(|| rendezvous(tie, cands[i].id_hash).cmp(&rendezvous(tie, cands[j].id_hash)))
                    .then_with(|| j.cmp(&i))
            })
        }
    }
}
