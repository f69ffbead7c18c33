//! `tandem proxy`: the data plane of inference services. An HTTP reverse proxy (hyper 1: HTTP/1.1
//! and HTTP/2 with prior knowledge on one listener) that routes each request to a ready replica
//! of its service, balanced by the `balance` crate, with bounded retries on another replica and
//! passive ejection of failing ones. Bodies stream both ways; small request bodies are kept so
//! a failed attempt can be replayed, and small answers to idempotent requests are read whole
//! before they are sent on, so one broken off mid-body is retried (`keeps_whole`).
//!
//! Routing: `/s/<service>/rest` (the prefix is stripped), else the Host header `<service>` or
//! `<service>.<anything>`. Endpoints come from `--static NAME=ADDR,...` or from the controller
//! (`POST /v1/proxy/sync`, a long poll that also reports in-flight and waiting requests, which the
//! controller uses to drain replicas and to scale from zero). `/_tandem/metrics` (Prometheus
//! text) and `/_tandem/healthz` are answered by the proxy itself.
//!
//! LLM services (`balance = "llm"`): the body of a `POST /v1/completions` or
//! `/v1/chat/completions` is read before routing, up to `llm_body_limit` (256 KiB by default;
//! a body of known length up to 1 MiB is kept whole anyway, for retries); a longer body is
//! forwarded unread (streamed on, the head read so far included) and routed by least request.
//! Its model and prompt (`llm`) become a `balance::LlmRequest` with the `x-session-id` header,
//! for `Pool::pick_llm`; the body goes upstream unchanged. Other requests of such a service (no
//! OpenAI path, no readable prompt) are placed by the same picker's least-request rule (or by
//! their session). Every replica of an LLM service is scraped every `SCRAPE_MS` (500) ms
//! (`GET /metrics`, vLLM's gauges) into `Pool::set_gauges`. Services of the other policies pay
//! one relaxed atomic load per request for all this.
//!
//! With a per-replica limit (`max_concurrency`, LLM services only) an OpenAI request that finds
//! every replica at the limit waits in the service's fair queue, or gets 429 with
//! `Retry-After` (the `fair` module). Retries are not queued again (they go to the least
//! loaded replica).
//!
//! Services with `resume_streams` (`--resume-streams NAME` for a static one) read their OpenAI
//! request bodies the same way (bounded), and a streaming answer to one that can be resumed
//! (`resume::Plan`) is driven by `resumer`: when its replica fails mid-stream another replica is
//! asked for the rest and the client's stream goes on unbroken.
//!
//! It owns the request path and nothing of the cluster's state: what it knows of replicas is the
//! controller's endpoint view, and its balancing decisions are `balance`'s. It never depends on
//! `server`, `agent` or `cli` (the tidy test checks). Its public face is [`Options`] and [`main`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use balance::{Ejection, Gauges, Key, LlmRequest, Outcome, Pick, Policy, Pool, PrefixConfig};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::http::uri::{Authority, PathAndQuery};
use hyper::{Method, Request, Response, StatusCode, Uri, Version};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::sync::Notify;

use client::{Conn, Target};
use wire::{EndpointView, ProxyServiceStats, ProxySync, ServiceEndpoints};

mod fair;
mod llm;
mod resume;
mod resumer;

/// `tandem proxy`'s settings, as given on its command line.
#[derive(Debug, Clone)]
pub struct Options {
    /// Address to listen on, `IP:PORT`.
    pub listen: String,
    /// Listening sockets inherited at these descriptors, one per worker thread, served instead
    /// of binding `listen` (`tandem up` holds the port across restarts).
    pub listen_fds: Vec<i32>,
    /// Controller address, `https://host:port` (endpoints come from it; `http://` with an
    /// `--insecure` controller).
    pub server: Option<String>,
    /// The cluster CA, for `https://`.
    pub ca: Option<std::path::PathBuf>,
    /// File holding the proxy's credential (`tandem token --proxy NAME`; with `server`).
    pub credential_file: Option<std::path::PathBuf>,
    /// Fixed services, `NAME=HOST:PORT[,...]` or `NAME:POLICY=...` (instead of `server`).
    pub statics: Vec<String>,
    /// Retries on another replica for static services (at most 7).
    pub retries: u32,
    /// Static services whose streams are resumed on another replica when theirs fails
    /// (`--resume-streams NAME`, repeatable).
    pub resume_streams: Vec<String>,
    /// Worker threads (default: the machine's cores).
    pub threads: Option<usize>,
    /// Seed of the random choices (p2c).
    pub seed: u64,
    /// Requests in flight per replica of `llm` static services; more wait in a fair queue.
    pub max_concurrency: Option<u32>,
    /// Bound on the wait in that queue (`2s`, `500ms`; default 10 s).
    pub max_wait: Option<String>,
    /// Header naming a request's tenant (one of `tenants`).
    pub tenant_header: Option<String>,
    /// Tenants of static services' fair queues, `NAME[=WEIGHT]`.
    pub tenants: Vec<String>,
    /// Streamed requests per replica awaiting their first token before another queued one is
    /// sent to it (default 1; 0: not paced; needs `max_concurrency`).
    pub prefill_pace: Option<u32>,
}

/// Checks the options, then serves until SIGTERM or SIGINT (one single-threaded runtime per
/// worker thread).
pub fn main(o: Options) -> Result<()> {
    let listen: SocketAddr = o.listen.parse().with_context(|| format!("--listen {:?}: expected IP:PORT, e.g. 127.0.0.1:7280", o.listen))?;
    let mut held: Vec<std::net::TcpListener> = Vec::new();
    for (i, &fd) in o.listen_fds.iter().enumerate() {
        if o.listen_fds[..i].contains(&fd) {
            bail!("--listen-fd {fd} given twice");
        }
        let l = exec::inherited_listener(fd).with_context(|| format!("--listen-fd {fd}"))?;
        if let Some(first) = held.first()
            && first.local_addr()? != l.local_addr()?
        {
            bail!("--listen-fd {fd} listens on {}, not on {} as the first one", l.local_addr()?, first.local_addr()?);
        }
        held.push(l);
    }
    if !held.is_empty() && o.threads.is_some_and(|t| t != held.len()) {
        bail!("--threads: with --listen-fd, one worker thread serves each inherited socket ({} of them)", held.len());
    }
    // Socket activation (a `.socket` unit): systemd holds the port; each worker thread accepts
    // on the socket it passed (one passed socket is shared by every worker).
    if held.is_empty() {
        let mut passed = exec::activated_listeners().context("socket activation")?;
        if let Some(first) = passed.first() {
            let addr = first.local_addr()?;
            if passed.iter().any(|l| l.local_addr().ok() != Some(addr)) {
                bail!("the sockets systemd passed listen on different addresses: give the proxy's .socket unit one ListenStream");
            }
            if passed.len() == 1 {
                let threads = o.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())).max(1);
                let one = passed.remove(0);
                for _ in 1..threads {
                    passed.push(one.try_clone()?);
                }
                passed.push(one);
            }
            held = passed;
        }
    }
    let mut statics = o.statics.iter().map(|s| parse_static(s)).collect::<Result<Vec<_>>>()?;
    for name in &o.resume_streams {
        match statics.iter_mut().find(|s| s.name == *name) {
            Some(s) => s.resume_streams = true,
            None => bail!("--resume-streams {name:?}: no --static service of that name"),
        }
    }
    let controller = match (o.server, o.credential_file) {
        (Some(_), _) if !statics.is_empty() => bail!("use either --server (endpoints from the controller) or --static, not both"),
        (Some(s), Some(f)) => {
            let cred = std::fs::read_to_string(&f)
                .with_context(|| format!("reading the proxy's credential from {}", f.display()))?
                .trim()
                .to_string();
            Some((Arc::new(Conn::new(Target::parse_with_ca(&s, o.ca.as_deref())?)), format!("Bearer {cred}")))
        }
        (Some(_), None) => bail!("--server needs --credential-file (the proxy's credential, from `tandem token --proxy NAME`)"),
        (None, Some(_)) => bail!("--credential-file goes with --server"),
        (None, None) if statics.is_empty() => {
            bail!("no upstreams: give --server URL --credential-file FILE, or --static NAME=HOST:PORT[,...]")
        }
        (None, None) => None,
    };
    if o.retries > 7 {
        bail!("--retries: at most 7");
    }
    let fair = fair::static_settings(o.max_concurrency, o.max_wait.as_deref(), o.tenant_header.as_deref(), &o.tenants, o.prefill_pace)?;
    if fair.is_some() && !statics.iter().any(|s| s.policy == Policy::Llm) {
        bail!(
            "--max-concurrency is for --static services of the llm policy (NAME:llm=ADDR,...); with --server it comes from each service's spec"
        );
    }
    let threads = o.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())).max(1);
    run(ProxyArgs { listen, held, controller, statics, retries: o.retries, seed: o.seed, fair }, threads)
}

/// Request bodies up to this size are kept in memory so the request can be retried; larger or
/// unsized ones are streamed and not retried.
pub(crate) const REPLAY_LIMIT: u64 = 1 << 20;
/// Longest report interval: the controller autoscale on these gauges.
const SYNC_WAIT_MS: u64 = 1000;
/// Upper bound on retries, whatever a view says.
const MAX_RETRIES: u32 = 7;
/// How often the replicas of LLM services are scraped (`/metrics`), milliseconds.
pub(crate) const SCRAPE_MS: u64 = 500;

/// When an attempt gives back its place in the pool's count of answers not begun
/// (`Pool::answered`; every pick counts one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    /// When it ends, under the lock its end takes anyway: nothing is paced on it.
    AtEnd,
    /// At its answer's first data frame, or its end if sooner (a streamed request of a paced
    /// service).
    AtFirstData,
    /// Given back already.
    Given,
}
/// A scrape that takes longer is abandoned (the gauges go stale after `balance`'s 5 s).
const SCRAPE_TIMEOUT_MS: u64 = 400;

/// The longest request body an LLM service reads before routing: 16 times the prompt bytes the
/// prefix hash reads (256 KiB by default: room for JSON escaping and for long prompts whose
/// head is all that is hashed), at least 64 KiB. Longer bodies are streamed, not read.
pub(crate) fn llm_body_limit(p: &PrefixConfig) -> usize {
    p.max_bytes().saturating_mul(16).max(64 << 10)
}

/// `tandem proxy` settings.
pub(crate) struct ProxyArgs {
    /// Listen address.
    pub(crate) listen: SocketAddr,
    /// Inherited listening sockets (`--listen-fd`), one per worker; none: bind `listen`.
    pub(crate) held: Vec<std::net::TcpListener>,
    /// The controller and the `authorization` value (the proxy's credential), when endpoints come from it.
    pub(crate) controller: Option<(Arc<Conn>, String)>,
    /// Fixed services (`--static`).
    pub(crate) statics: Vec<StaticService>,
    /// Retries for static services.
    pub(crate) retries: u32,
    /// Seed of the pickers' random choices.
    pub(crate) seed: u64,
    /// The fair queue of static `llm` services.
    pub(crate) fair: Option<fair::FairSettings>,
}

/// A `--static NAME=ADDR[,ADDR...]` service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StaticService {
    /// Service name.
    pub(crate) name: String,
    /// Upstream host:port addresses.
    pub(crate) addrs: Vec<String>,
    /// Balancing policy.
    pub(crate) policy: Policy,
    /// Streams are resumed on another replica when theirs fails (`--resume-streams NAME`).
    pub(crate) resume_streams: bool,
}

/// Parses `NAME=ADDR[,ADDR...]`, optionally `NAME:POLICY=...` (e.g. `echo:p2c=127.0.0.1:9000`).
pub(crate) fn parse_static(s: &str) -> Result<StaticService> {
    let Some((name, addrs)) = s.split_once('=') else {
        bail!("--static {s:?}: expected NAME=HOST:PORT[,HOST:PORT...]");
    };
    let (name, policy) = match name.split_once(':') {
        Some((n, p)) => (n, p.parse::<Policy>().map_err(|e| anyhow::anyhow!("--static {s:?}: {e}"))?),
        None => (name, Policy::RoundRobin),
    };
    if !valid_service_name(name) {
        bail!("--static {s:?}: service name {name:?} must be non-empty letters, digits, '-' or '_' (NAME.NAMESPACE: two such)");
    }
    let mut out = Vec::new();
    for a in addrs.split(',') {
        let a = a.trim();
        let ok = a.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0))
            && a.parse::<Authority>().is_ok();
        if !ok {
            bail!("--static {s:?}: upstream {a:?} is not HOST:PORT");
        }
        out.push(a.to_string());
    }
    Ok(StaticService { name: name.to_string(), addrs: out, policy, resume_streams: false })
}

/// Letters, digits, '-' and '_'; or two such joined by '.' (a Kubernetes namespace's service,
/// `web.team-a`).
fn valid_service_name(n: &str) -> bool {
    let part = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    match n.split_once('.') {
        Some((a, b)) => part(a) && part(b),
        None => part(n),
    }
}

// ---------------------------------------------------------------------------------------------
// State

/// Latency histogram bucket bounds, microseconds.
const BUCKETS_US: [u64; 15] =
    [500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000];

#[derive(Default)]
struct Histogram {
    buckets: [AtomicU64; BUCKETS_US.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl Histogram {
    fn record(&self, us: u64) {
        if let Some(i) = BUCKETS_US.iter().position(|&b| us <= b) {
            self.buckets[i].fetch_add(1, Relaxed);
        }
        self.count.fetch_add(1, Relaxed);
        self.sum_us.fetch_add(us, Relaxed);
    }

    fn write(&self, out: &mut String, name: &str, labels: &str) {
        let mut acc = 0;
        for (i, b) in BUCKETS_US.iter().enumerate() {
            acc += self.buckets[i].load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{}\"}} {acc}", *b as f64 / 1e6);
        }
        let n = self.count.load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {n}");
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum_us.load(Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "{name}_count{{{labels}}} {n}");
    }
}

/// One replica as the proxy reaches it.
struct Upstream {
    addr: String,
    authority: Authority,
    replica: HeaderValue,
    latency: Histogram,
    /// Left the controller's view without draining (its node lost): a stream from it that has
    /// gone quiet is not waited for (`resumer`).
    gone: AtomicBool,
    gone_now: Notify,
}

impl Upstream {
    /// Marks the replica gone and wakes what waits on it.
    fn set_gone(&self) {
        self.gone.store(true, Relaxed);
        self.gone_now.notify_waiters();
    }

    /// Returns once the replica is gone.
    async fn wait_gone(&self) {
        loop {
            let n = self.gone_now.notified();
            tokio::pin!(n);
            n.as_mut().enable();
            if self.gone.load(Relaxed) {
                return;
            }
            n.await;
        }
    }
}

struct SvcState {
    pool: Pool<Arc<Upstream>>,
    hold_ms: u64,
    retries: u32,
    /// A retry that finds no replica left to try waits (up to `hold_ms`) for one to become
    /// ready, as a first attempt does: a service of the controller's view, whose replicas come
    /// back. A `--static` one's never change, so its retry fails at once.
    hold_retries: bool,
    listed: bool,
    /// The fair queue, when the service has a per-replica limit (`fair`).
    fair: Option<fair::Fair>,
}

impl SvcState {
    /// Ends an attempt (`Pool::finish`, and `Pool::answered` unless `answer` says it was given
    /// already) and hands the freed slot to the fair queue.
    fn finish(&mut self, key: Key, outcome: Outcome, now: u64, answer: Answer) -> bool {
        if answer != Answer::Given {
            self.pool.answered(key);
        }
        let ejected = self.pool.finish(key, outcome, now);
        self.dispatch(now);
        ejected
    }

    /// An attempt's answer began: a paced replica may take the next queued request.
    fn answer_began(&mut self, key: Key, now: u64) {
        self.pool.answered(key);
        self.dispatch(now);
    }

    /// Hands free slots to queued requests.
    fn dispatch(&mut self, now: u64) {
        if let Some(f) = self.fair.as_mut() {
            f.dispatch(&mut self.pool, now);
        }
    }

    /// Sets (or removes) the per-replica limit and the fair queue; unchanged settings keep
    /// the queue as it is.
    fn set_fair(&mut self, name: &str, settings: Option<fair::FairSettings>, now: u64) {
        if self.fair.as_ref().map(|f| &f.settings) == settings.as_ref() {
            return;
        }
        let mut cfg = *self.pool.llm_config();
        cfg.max_inflight = settings.as_ref().map(|s| s.limit.max(1));
        // With a per-replica limit, streamed OpenAI requests are sent to a replica only while
        // fewer than `pace` sent to it have not begun their answer (their first token): so that
        // queued requests reach a replica one prefill at a time rather than all at once when a
        // batch finishes together, which kept replicas' batches in step and made one step hold
        // every prompt's prefill (BENCHMARKS §11, fairness). Tenants under their share are not
        // held back, but go where no answer is awaited (`Pool::pick_llm_unheld`).
        cfg.max_awaiting = settings.as_ref().and_then(|s| (s.pace > 0).then_some(s.pace));
        self.pool.set_llm_config(cfg);
        let old = self.fair.take();
        let fresh = settings.and_then(|s| fair::Fair::new(s).map_err(|e| tracing::warn!("service {name}: fair queue: {e}; no queue")).ok());
        match (fresh, old) {
            (Some(mut f), Some(old)) => {
                f.carry_over(old);
                self.fair = Some(f);
            }
            (Some(f), None) => self.fair = Some(f),
            (None, Some(old)) => {
                old.close(&mut self.pool, now);
                let mut cfg = *self.pool.llm_config();
                cfg.max_inflight = None;
                self.pool.set_llm_config(cfg);
            }
            (None, None) => {}
        }
        self.dispatch(now);
    }
}

struct Service {
    name: String,
    state: Mutex<SvcState>,
    /// The policy is `llm` (read without the lock on every request).
    llm: AtomicBool,
    /// `resume_streams`: OpenAI streams go on on another replica when theirs fails (`resumer`).
    resume_streams: AtomicBool,
    changed: Notify,
    requests: AtomicU64,
    failures: AtomicU64,
    retries: AtomicU64,
    /// Streams resumed on another replica.
    resumed: AtomicU64,
    waiting: AtomicU64,
    latency: Histogram,
}

impl Service {
    fn new(name: &str, seed: u64) -> Service {
        Service {
            name: name.to_string(),
            state: Mutex::new(SvcState {
                pool: Pool::new(Policy::RoundRobin, Ejection::default(), seed),
                hold_ms: 60_000,
                retries: 2,
                hold_retries: true,
                listed: true,
                fair: None,
            }),
            llm: AtomicBool::new(false),
            resume_streams: AtomicBool::new(false),
            changed: Notify::new(),
            requests: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            resumed: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            latency: Histogram::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SvcState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the balancing policy (under the service's lock).
    fn set_policy(&self, st: &mut SvcState, p: Policy) {
        st.pool.set_policy(p);
        self.llm.store(p == Policy::Llm, Relaxed);
    }

    /// Replaces the serving endpoints: (replica id, address).
    fn set_endpoints(&self, eps: &[(String, String)], now: u64) -> Result<()> {
        let mut fresh = HashMap::new();
        for (id, addr) in eps {
            let authority: Authority = addr.parse().with_context(|| format!("replica {id}: bad address {addr:?}"))?;
            let replica = HeaderValue::from_str(id).with_context(|| format!("bad replica id {id:?}"))?;
            fresh.insert(id.as_str(), (addr.as_str(), authority, replica));
        }
        let mut st = self.lock();
        st.pool.set_endpoints(
            eps.iter().map(|(id, _)| id.as_str()),
            |up, id| fresh.get(id).is_some_and(|f| f.0 == up.addr),
            |id| {
                let (addr, authority, replica) = fresh[id].clone();
                Arc::new(Upstream {
                    addr: addr.to_string(),
                    authority,
                    replica,
                    latency: Histogram::default(),
                    gone: AtomicBool::new(false),
                    gone_now: Notify::new(),
                })
            },
        );
        st.dispatch(now);
        Ok(())
    }
}

struct State {
    services: RwLock<HashMap<String, Arc<Service>>>,
    version: AtomicU64,
    from_controller: bool,
    start: Instant,
    seed: u64,
    push: Notify,
    listen: String,
    draining: AtomicBool,
    /// How long the last endpoint change took from the controller to here, microseconds
    /// (the view carries when it was made; both clocks are the host's on one machine).
    propagation_us: AtomicU64,
    /// Views applied.
    views: AtomicU64,
}

impl State {
    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn service(&self, name: &str) -> Option<Arc<Service>> {
        self.services.read().unwrap_or_else(|e| e.into_inner()).get(name).cloned()
    }

    /// Applies a controller view if it is newer than the one held.
    fn apply(&self, view: &EndpointView) {
        let mut map = self.services.write().unwrap_or_else(|e| e.into_inner());
        if view.version <= self.version.load(Relaxed) && self.version.load(Relaxed) != 0 {
            return;
        }
        self.version.store(view.version, Relaxed);
        if view.changed_ms > 0 {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64);
            self.propagation_us.store((now - view.changed_ms * 1000).max(0) as u64, Relaxed);
            self.views.fetch_add(1, Relaxed);
        }
        let mut seen = std::collections::HashSet::new();
        for s in &view.services {
            if !valid_service_name(&s.name) {
                tracing::warn!("ignoring service with a bad name {:?}", s.name);
                continue;
            }
            seen.insert(s.name.clone());
            let n = map.len() as u64;
            let svc = map.entry(s.name.clone()).or_insert_with(|| Arc::new(Service::new(&s.name, self.seed ^ n))).clone();
            apply_service(&svc, s, self.now_ms());
            svc.changed.notify_waiters();
        }
        for (name, svc) in map.iter() {
            if !seen.contains(name) {
                let mut st = svc.lock();
                st.listed = false;
                st.pool.set_endpoints(std::iter::empty(), |_, _| true, |_| unreachable!("no new endpoints"));
                st.dispatch(self.now_ms());
                drop(st);
                svc.changed.notify_waiters();
            }
        }
        map.retain(|_, svc| {
            let st = svc.lock();
            st.listed || !st.pool.endpoints().is_empty() || svc.waiting.load(Relaxed) > 0
        });
    }

    /// The report sent to the controller.
    fn report(&self, wait_ms: u64) -> ProxySync {
        let map = self.services.read().unwrap_or_else(|e| e.into_inner());
        let mut services = std::collections::BTreeMap::new();
        for (name, svc) in map.iter() {
            let st = svc.lock();
            let replicas = st.pool.endpoints().iter().map(|e| (e.id.clone(), e.inflight as u64)).collect();
            services.insert(
                name.clone(),
                ProxyServiceStats {
                    inflight: st.pool.inflight(),
                    // Requests in the fair queue wait as well (the autoscaler counts them).
                    waiting: svc.waiting.load(Relaxed) + st.fair.as_ref().map_or(0, |f| f.queue.len() as u64),
                    requests: svc.requests.load(Relaxed),
                    failures: svc.failures.load(Relaxed),
                    replicas,
                },
            );
        }
        ProxySync { proxy: self.listen.clone(), since: self.version.load(Relaxed), wait_ms, services }
    }

    fn metrics(&self) -> String {
        let map = self.services.read().unwrap_or_else(|e| e.into_inner());
        let mut names: Vec<&String> = map.keys().collect();
        names.sort();
        let mut out = String::new();
        let now = self.now_ms();
        let _ = writeln!(out, "# HELP tandem_proxy_view_version Version of the endpoint view held (0 with --static).");
        let _ = writeln!(out, "# TYPE tandem_proxy_view_version gauge\ntandem_proxy_view_version {}", self.version.load(Relaxed));
        let _ = writeln!(
            out,
            "# HELP tandem_proxy_view_propagation_seconds From the controller's change of the endpoint view to its arrival here (the last view).\n# TYPE tandem_proxy_view_propagation_seconds gauge\ntandem_proxy_view_propagation_seconds {}",
            self.propagation_us.load(Relaxed) as f64 / 1e6
        );
        let _ = writeln!(
            out,
            "# HELP tandem_proxy_views_total Endpoint views applied.\n# TYPE tandem_proxy_views_total counter\ntandem_proxy_views_total {}",
            self.views.load(Relaxed)
        );
        type Get = fn(&Service) -> u64;
        let per_service: [(&str, &str, &str, Get); 5] = [
            ("tandem_proxy_requests_total", "counter", "Requests received.", |s| s.requests.load(Relaxed)),
            ("tandem_proxy_failures_total", "counter", "Requests answered with a 5xx (by the proxy or a replica).", |s| {
                s.failures.load(Relaxed)
            }),
            ("tandem_proxy_retries_total", "counter", "Attempts retried on another replica.", |s| s.retries.load(Relaxed)),
            ("tandem_proxy_resumed_streams_total", "counter", "Streams resumed on another replica after theirs failed.", |s| {
                s.resumed.load(Relaxed)
            }),
            ("tandem_proxy_waiting", "gauge", "Requests held because the service has no endpoint.", |s| s.waiting.load(Relaxed)),
        ];
        for (metric, kind, help, get) in per_service {
            let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} {kind}");
            for n in &names {
                let _ = writeln!(out, "{metric}{{service=\"{n}\"}} {}", get(&map[*n]));
            }
        }
        // The fair queue, per tenant (services with a per-replica limit only).
        let mut tenants = Vec::new();
        for n in &names {
            let st = map[*n].lock();
            if let Some(f) = st.fair.as_ref() {
                for (t, x) in &f.stats {
                    tenants.push((n.to_string(), label(t), f.queue.queued(t) as u64, x.queued_total, x.shed, x.granted, x.wait_ms));
                }
            }
        }
        let fair_heads = [
            ("tandem_proxy_tenant_queued", "gauge", "Requests of the tenant waiting in the fair queue (every replica at its limit)."),
            ("tandem_proxy_tenant_queued_total", "counter", "Requests of the tenant that went to the fair queue."),
            (
                "tandem_proxy_tenant_shed_total",
                "counter",
                "Requests of the tenant answered 429 (expected wait over the bound, or waited past it).",
            ),
            ("tandem_proxy_tenant_queue_wait_seconds_count", "counter", "Queued requests of the tenant that were given a replica."),
            ("tandem_proxy_tenant_queue_wait_seconds_sum", "counter", "Their time in the queue, summed."),
        ];
        for (k, (metric, kind, help)) in fair_heads.iter().enumerate() {
            let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} {kind}");
            for (s, t, queued, total, shed, granted, wait_ms) in &tenants {
                let v = [*queued as f64, *total as f64, *shed as f64, *granted as f64, *wait_ms as f64 / 1000.0][k];
                let _ = writeln!(out, "{metric}{{service=\"{s}\",tenant=\"{t}\"}} {v}");
            }
        }
        let _ = writeln!(out, "# HELP tandem_proxy_inflight Requests in flight to replicas.\n# TYPE tandem_proxy_inflight gauge");
        for n in &names {
            let _ = writeln!(out, "tandem_proxy_inflight{{service=\"{n}\"}} {}", map[*n].lock().pool.inflight());
        }
        let _ = writeln!(out, "# HELP tandem_proxy_request_duration_seconds Time to the end of the response.");
        let _ = writeln!(out, "# TYPE tandem_proxy_request_duration_seconds histogram");
        for n in &names {
            map[*n].latency.write(&mut out, "tandem_proxy_request_duration_seconds", &format!("service=\"{n}\""));
        }
        let mut rows = Vec::new();
        for n in &names {
            let st = map[*n].lock();
            for e in st.pool.endpoints() {
                rows.push((
                    n.to_string(),
                    label(&e.id),
                    e.requests,
                    e.failures,
                    e.inflight,
                    e.ejected_until.is_some_and(|u| now < u),
                    e.data.clone(),
                    st.pool.gauges(e.key),
                ));
            }
        }
        let heads = [
            ("tandem_proxy_replica_requests_total", "counter", "Attempts sent to the replica."),
            ("tandem_proxy_replica_failures_total", "counter", "Attempts that failed (transport error or 5xx)."),
            ("tandem_proxy_replica_inflight", "gauge", "Requests in flight to the replica."),
            ("tandem_proxy_replica_ejected", "gauge", "1 while the replica is ejected by outlier detection."),
        ];
        for (k, (metric, kind, help)) in heads.iter().enumerate() {
            let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} {kind}");
            for (s, r, req, fail, infl, ej, _, _) in &rows {
                let v = [*req, *fail, *infl as u64, *ej as u64][k];
                let _ = writeln!(out, "{metric}{{service=\"{s}\",replica=\"{r}\"}} {v}");
            }
        }
        let _ = writeln!(out, "# HELP tandem_proxy_replica_request_duration_seconds Time to the end of the response, per replica.");
        let _ = writeln!(out, "# TYPE tandem_proxy_replica_request_duration_seconds histogram");
        for (s, r, _, _, _, _, up, _) in &rows {
            up.latency.write(&mut out, "tandem_proxy_replica_request_duration_seconds", &format!("service=\"{s}\",replica=\"{r}\""));
        }
        type GaugeOf = fn(&Gauges) -> f64;
        let scraped: [(&str, &str, GaugeOf); 3] = [
            ("tandem_proxy_replica_llm_running", "vllm:num_requests_running", |g| g.running as f64),
            ("tandem_proxy_replica_llm_waiting", "vllm:num_requests_waiting", |g| g.waiting as f64),
            ("tandem_proxy_replica_llm_kv_usage", "vllm:kv_cache_usage_perc", |g| g.kv_usage),
        ];
        for (metric, source, get) in scraped {
            let _ = writeln!(out, "# HELP {metric} The replica's {source} as last scraped (LLM services).\n# TYPE {metric} gauge");
            for (s, r, .., g) in &rows {
                if let Some(g) = g {
                    let _ = writeln!(out, "{metric}{{service=\"{s}\",replica=\"{r}\"}} {}", get(g));
                }
            }
        }
        out
    }
}

/// A Prometheus label value: backslash, quote and newline escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The fair-queue settings of a view (none without a per-replica limit).
fn fair_settings(s: &ServiceEndpoints) -> Option<fair::FairSettings> {
    (s.max_concurrency > 0).then(|| fair::FairSettings {
        limit: s.max_concurrency,
        max_wait_ms: s.max_wait_ms,
        tenant_header: s.tenant_header.as_ref().map(|h| h.to_ascii_lowercase()),
        tenants: s.tenants.iter().map(|t| (t.name.clone(), t.weight, t.keys.clone())).collect(),
        pace: s.prefill_pace,
    })
}

fn apply_service(svc: &Service, s: &ServiceEndpoints, now: u64) {
    let policy = s.balance.parse::<Policy>().unwrap_or_else(|e| {
        tracing::warn!("service {}: {e}; using round_robin", s.name);
        Policy::RoundRobin
    });
    let eps: Vec<(String, String)> = s.endpoints.iter().map(|e| (e.replica.clone(), e.addr.clone())).collect();
    {
        let mut st = svc.lock();
        svc.set_policy(&mut st, policy);
        st.hold_ms = s.hold_ms;
        st.retries = s.retries.min(MAX_RETRIES);
        st.listed = true;
        let fair = if policy == Policy::Llm { fair_settings(s) } else { None };
        st.set_fair(&s.name, fair, now);
    }
    svc.resume_streams.store(s.resume_streams, Relaxed);
    // A replica neither serving nor draining is gone (its node lost): streams still reading from
    // it stop waiting (a node that vanished may never close its connections).
    {
        let listed: std::collections::HashSet<&str> =
            s.endpoints.iter().map(|e| e.replica.as_str()).chain(s.draining.iter().map(String::as_str)).collect();
        let st = svc.lock();
        for e in st.pool.endpoints().iter().filter(|e| !listed.contains(e.id.as_str())) {
            e.data.set_gone();
        }
    }
    if let Err(e) = svc.set_endpoints(&eps, now) {
        tracing::info!("service {}: {e:#}", s.name);
    }
}

// ---------------------------------------------------------------------------------------------
// Bodies

/// The body sent upstream: kept in memory (replayable) or streamed from the client.
enum ReqBody {
    /// The whole body (or none), replayable.
    Full(Option<Bytes>),
    /// Streamed from the client, sent once.
    Stream(Incoming),
    /// The head already read (an LLM service's body over the limit), then the rest streamed.
    Prefixed(Option<Bytes>, Incoming),
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ReqBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            ReqBody::Stream(s) => Pin::new(s).poll_frame(cx),
            ReqBody::Prefixed(head, s) => match head.take() {
                Some(h) => Poll::Ready(Some(Ok(Frame::data(h)))),
                None => Pin::new(s).poll_frame(cx),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ReqBody::Full(b) => b.is_none(),
            ReqBody::Stream(s) => s.is_end_stream(),
            ReqBody::Prefixed(head, s) => head.is_none() && s.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ReqBody::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            ReqBody::Stream(s) => s.size_hint(),
            ReqBody::Prefixed(head, s) => {
                // Only unsized bodies are read in part, so the rest has no exact size either.
                let n = head.as_ref().map_or(0, |h| h.len() as u64);
                let mut h = SizeHint::new();
                h.set_lower(s.size_hint().lower().saturating_add(n));
                h
            }
        }
    }
}

/// Ends an attempt when the response body is done (or dropped): in-flight count, outcome for
/// outlier detection, latency.
struct Guard {
    svc: Arc<Service>,
    up: Arc<Upstream>,
    key: Key,
    outcome: Outcome,
    start: Instant,
    st: Arc<State>,
    /// The request's tenant, counted until the answer ends (fair services).
    _tenant: Option<TenantSlot>,
    answer: Answer,
}

impl Guard {
    /// Gives the attempt's place in the count of answers not begun back now.
    fn answer_began(&mut self) {
        if self.answer != Answer::Given {
            self.answer = Answer::Given;
            let now = self.st.now_ms();
            self.svc.lock().answer_began(self.key, now);
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let us = self.start.elapsed().as_micros() as u64;
        self.up.latency.record(us);
        self.svc.latency.record(us);
        if self.outcome != Outcome::Ok {
            self.svc.failures.fetch_add(1, Relaxed);
        }
        let now = self.st.now_ms();
        if self.svc.lock().finish(self.key, self.outcome, now, self.answer) {
            tracing::warn!("service {}: replica {} ejected after repeated failures", self.svc.name, self.up.addr);
        }
    }
}

/// Why a body sent to the client broke off.
type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// The body sent to the client: a replica's response, streamed, or the proxy's own.
enum ProxyBody {
    /// From a replica; the guard ends the attempt when the body ends.
    Upstream(Incoming, Option<Guard>),
    /// The proxy's own answer.
    Full(Option<Bytes>),
    /// A stream that goes on on another replica when its own fails (`resumer`); an error held
    /// back one poll, so what came before it is flushed to the client before the break.
    Resumable(tokio::sync::mpsc::Receiver<Result<Bytes, BodyError>>, Option<BodyError>),
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.get_mut() {
            ProxyBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            ProxyBody::Upstream(body, guard) => {
                let r = Pin::new(body).poll_frame(cx);
                match &r {
                    Poll::Ready(Some(Ok(f))) if f.is_data() => {
                        if let Some(g) = guard.as_mut().filter(|g| g.answer == Answer::AtFirstData) {
                            g.answer_began();
                        }
                    }
                    Poll::Ready(None) => drop(guard.take()),
                    Poll::Ready(Some(Err(_))) => {
                        if let Some(mut g) = guard.take() {
                            g.outcome = Outcome::Reset;
                        }
                    }
                    _ => {}
                }
                r.map_err(Into::into)
            }
            ProxyBody::Resumable(rx, held) => {
                if let Some(e) = held.take() {
                    return Poll::Ready(Some(Err(e)));
                }
                match rx.poll_recv(cx) {
                    // hyper flushes what it holds when the body is pending, then polls again.
                    Poll::Ready(Some(Err(e))) => {
                        *held = Some(e);
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    }
                    r => r.map(|r| r.map(|r| r.map(Frame::data))),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Full(b) => b.is_none(),
            ProxyBody::Upstream(b, _) => b.is_end_stream(),
            ProxyBody::Resumable(..) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            ProxyBody::Upstream(b, _) => b.size_hint(),
            ProxyBody::Resumable(..) => SizeHint::new(),
        }
    }
}

fn plain(status: StatusCode, msg: impl Into<String>) -> Response<ProxyBody> {
    let mut msg = msg.into();
    msg.push('\n');
    let mut r = Response::new(ProxyBody::Full(Some(Bytes::from(msg))));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

// ---------------------------------------------------------------------------------------------
// Routing and forwarding

/// Splits a request into (service, path and query to send upstream). `/s/echo/a?x=1` →
/// (`echo`, `/a?x=1`); `/s/echo` → (`echo`, `/`); otherwise the service is the Host's first label.
pub(crate) fn route<'a>(uri: &'a Uri, host: Option<&'a str>) -> Option<(&'a str, Option<String>)> {
    let path = uri.path();
    if let Some(rest) = path.strip_prefix("/s/") {
        let (svc, tail) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if svc.is_empty() {
            return None;
        }
        let pq = match uri.query() {
            Some(q) => format!("{tail}?{q}"),
            None => tail.to_string(),
        };
        return Some((svc, Some(pq)));
    }
    let host = host.or_else(|| uri.authority().map(|a| a.as_str()))?;
    if host.starts_with('[') {
        return None;
    }
    let name = host.split(':').next()?.split('.').next()?;
    if name.is_empty() { None } else { Some((name, None)) }
}

/// The service of a Kubernetes namespace a Host names in the form cluster DNS gives a Service:
/// `NAME.NAMESPACE.svc` and anything after (`web.team-a.svc.cluster.local` → `web.team-a`, the
/// Deployment `web` of `team-a`). Only that form: any other Host is its first label's (so no
/// namespace, whoever made it, takes the requests of `Host: llama.example.org`), and a Host of
/// that form is its namespace's service or none (never `default`'s of the same name).
pub(crate) fn namespaced_host<'a>(uri: &'a Uri, host: Option<&'a str>) -> Option<&'a str> {
    let host = host.or_else(|| uri.authority().map(|a| a.as_str()))?.split(':').next()?;
    let mut labels = host.split('.');
    let (name, ns, svc) = (labels.next()?, labels.next()?, labels.next()?);
    (!name.is_empty() && !ns.is_empty() && svc.eq_ignore_ascii_case("svc")).then(|| &host[..name.len() + 1 + ns.len()])
}

const HOP_BY_HOP: [HeaderName; 6] =
    [header::CONNECTION, header::TE, header::TRAILER, header::TRANSFER_ENCODING, header::UPGRADE, header::PROXY_AUTHORIZATION];

fn strip_hop_by_hop(h: &mut HeaderMap) {
    if let Some(c) = h.get(header::CONNECTION).and_then(|v| v.to_str().ok()).map(str::to_string) {
        for name in c.split(',') {
            let name = name.trim();
            if !name.is_empty() {
                h.remove(name);
            }
        }
    }
    for n in &HOP_BY_HOP {
        h.remove(n);
    }
    h.remove("keep-alive");
    h.remove("proxy-connection");
}

fn classify(e: &hyper_util::client::legacy::Error) -> Outcome {
    if e.is_connect() {
        return Outcome::ConnectFailed;
    }
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::TimedOut
        {
            return Outcome::Timeout;
        }
        src = s.source();
    }
    Outcome::Reset
}

/// Largest response (by its Content-Length) the proxy reads whole before answering.
const KEEP_WHOLE: u64 = 64 << 10;

/// Whether a response is read whole before it is sent on: an idempotent request (RFC 9110
/// 9.2.2, so a retry after a broken body is safe) and a declared length up to `KEEP_WHOLE`.
/// Streams (SSE, chunked) and large bodies go on as they come.
fn keeps_whole(method: &Method, resp: &hyper::http::response::Parts) -> bool {
    let idempotent = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE);
    idempotent
        && !resp.status.is_informational()
        && resp
            .headers
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|n| n <= KEEP_WHOLE)
}

fn describe(o: Outcome) -> String {
    match o {
        Outcome::Ok => "ok".into(),
        Outcome::ConnectFailed => "connection failed".into(),
        Outcome::Reset => "connection broken before a response".into(),
        Outcome::Timeout => "timed out".into(),
        Outcome::ServerError(s) => format!("answered {s}"),
    }
}

/// What `acquire` waits for when it has no replica yet.
enum Wait {
    /// No replica yet: hold for one, up to this many milliseconds.
    Hold(u64),
    /// Queued in the fair queue (id, wake-up, how long before it gives up, milliseconds).
    Queued(u64, Arc<Notify>, u64),
}

/// Waits for an endpoint of `svc`: holds the request while the service has none, and, for a
/// service with a per-replica limit (`ticket`: the request's tenant and cost; first attempts
/// only), queues it in the fair queue while every replica is at its limit (429 when the queue
/// refuses it).
async fn acquire(
    st: &State,
    svc: &Arc<Service>,
    tried: &[Key],
    llm: Option<&LlmRequest>,
    ticket: Option<&fair::Ticket>,
    hold: &mut Option<WaitGuard>,
    hold_retries: bool,
) -> Result<(Key, Arc<Upstream>, u32), Response<ProxyBody>> {
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        let notified = svc.changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let step = {
            let mut s = svc.lock();
            if !s.listed {
                return Err(plain(StatusCode::NOT_FOUND, format!("service {:?} no longer exists", svc.name)));
            }
            let now = st.now_ms();
            let queues = tried.is_empty() && ticket.is_some() && s.fair.is_some();
            let picked = match llm {
                None => s.pool.pick(now, tried).map_or(Pick::Nothing, Pick::To),
                // Requests already queued go first.
                Some(_) if queues && s.fair.as_ref().is_some_and(|f| !f.queue.is_empty()) => Pick::Full,
                Some(r) => s.pool.pick_llm(now, tried, r),
            };
            let step = match (picked, llm, ticket) {
                (Pick::To(k), ..) => Ok(k),
                // A tenant under its share of the slots is not held back: the limit and the
                // queue are for the tenants that take more.
                (Pick::Full, Some(r), Some(t))
                    if queues
                        && s.fair
                            .as_ref()
                            .is_some_and(|f| f.under_share(&t.tenant, s.pool.endpoints().iter().filter(|e| !e.draining).count())) =>
                {
                    match s.pool.pick_llm_unheld(now, tried, r) {
                        Pick::To(k) => Ok(k),
                        Pick::Full | Pick::Nothing => Err(Wait::Hold(s.hold_ms)),
                    }
                }
                (Pick::Full, Some(r), Some(t)) if queues => {
                    if st.draining.load(Relaxed) {
                        return Err(plain(StatusCode::SERVICE_UNAVAILABLE, "the proxy is shutting down"));
                    }
                    let f = s.fair.as_mut().expect("queues");
                    match f.enqueue(t, r, now) {
                        Ok((id, wake)) => {
                            let expire = f.expire_ms();
                            s.dispatch(now);
                            Err(Wait::Queued(id, wake, expire))
                        }
                        Err(shed) => return Err(too_many(&svc.name, &t.tenant, shed)),
                    }
                }
                // A retry (or a request of a service whose limit just appeared) is not queued
                // again: it goes over the limit to the least loaded replica.
                (Pick::Full, ..) => match s.pool.pick(now, tried) {
                    Some(k) => Ok(k),
                    None => Err(Wait::Hold(s.hold_ms)),
                },
                (Pick::Nothing, ..) => {
                    // Every replica was tried (they failed before answering): a retry waits for
                    // one to come back (a replica restarted, or started elsewhere after its node
                    // was lost) rather than failing while it is on its way.
                    if s.pool.has_serving() && tried.is_empty() || !tried.is_empty() && !(s.hold_retries && hold_retries) {
                        return Err(plain(StatusCode::BAD_GATEWAY, format!("service {:?}: no other replica left to retry on", svc.name)));
                    }
                    Err(Wait::Hold(s.hold_ms))
                }
            };
            // The usual case, under the same lock.
            match step {
                Ok(k) => {
                    let up = s.pool.get(k).expect("picked").data.clone();
                    return Ok((k, up, s.retries));
                }
                Err(wait) => wait,
            }
        };
        let hold_ms = match step {
            Wait::Queued(id, wake, expire_ms) => {
                let t = ticket.expect("only requests with a ticket queue");
                match wait_in_queue(st, svc, &t.tenant, id, wake, expire_ms).await? {
                    Some(k) => {
                        let s = svc.lock();
                        match s.pool.get(k) {
                            Some(e) => return Ok((k, e.data.clone(), s.retries)),
                            None => {
                                return Err(plain(StatusCode::BAD_GATEWAY, format!("service {:?}: the replica picked is gone", svc.name)));
                            }
                        }
                    }
                    // Released (no replica left, or the settings changed): ask again.
                    None => continue,
                }
            }
            Wait::Hold(ms) => ms,
        };
        let d = *deadline.get_or_insert_with(|| tokio::time::Instant::now() + Duration::from_millis(hold_ms));
        if hold.is_none() {
            svc.waiting.fetch_add(1, Relaxed);
            *hold = Some(WaitGuard(svc.clone()));
            // Tell the controller at once: it may be scaling from zero.
            st.push.notify_one();
        }
        if st.draining.load(Relaxed) || tokio::time::timeout_at(d, notified).await.is_err() {
            let again = if tried.is_empty() { "" } else { " other than the ones tried" };
            return Err(plain(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("service {:?} has no ready replica{again} (held {} ms)", svc.name, hold_ms),
            ));
        }
    }
}

/// A 429 with `Retry-After` and the reason in plain text.
fn too_many(service: &str, tenant: &str, shed: fair::Shed) -> Response<ProxyBody> {
    let mut r = plain(
        StatusCode::TOO_MANY_REQUESTS,
        format!("service {service:?}, tenant {tenant:?}: {}; retry after {} s", shed.why, shed.retry_after_s),
    );
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(shed.retry_after_s));
    r
}

/// An attempt between its pick and its `Guard` (or its explicit finish): dropped armed (the
/// request's task dropped, its client gone), it finishes the attempt.
struct Pending<'a> {
    svc: &'a Arc<Service>,
    st: &'a Arc<State>,
    key: Key,
    armed: bool,
    answer: Answer,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.armed {
            let now = self.st.now_ms();
            self.svc.lock().finish(self.key, Outcome::Ok, now, self.answer);
        }
    }
}

/// Counts a request of a tenant as holding a replica until it is dropped (with the response
/// body, or when the request ends otherwise).
struct TenantSlot {
    svc: Arc<Service>,
    tenant: String,
}

impl TenantSlot {
    fn new(svc: &Arc<Service>, tenant: &str) -> TenantSlot {
        if let Some(f) = svc.lock().fair.as_mut() {
            f.started(tenant);
        }
        TenantSlot { svc: svc.clone(), tenant: tenant.to_string() }
    }
}

impl Drop for TenantSlot {
    fn drop(&mut self) {
        if let Some(f) = self.svc.lock().fair.as_mut() {
            f.ended(&self.tenant);
        }
    }
}

/// Takes a queued request out of the fair queue if its task is dropped (its client went away).
struct QueueGuard<'a> {
    st: &'a State,
    svc: &'a Arc<Service>,
    tenant: &'a str,
    id: u64,
    armed: bool,
}

impl Drop for QueueGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let now = self.st.now_ms();
            let mut s = self.svc.lock();
            let SvcState { fair, pool, .. } = &mut *s;
            if let Some(f) = fair.as_mut() {
                f.leave(self.id, self.tenant, false, pool, now);
            }
        }
    }
}

/// Waits in the fair queue: `Some(replica)` when granted one (counted in flight), `None` when
/// released (ask again), or a 429 once it waited `expire_ms` (a 503 when the proxy stops).
async fn wait_in_queue(
    st: &State,
    svc: &Arc<Service>,
    tenant: &str,
    id: u64,
    wake: Arc<Notify>,
    expire_ms: u64,
) -> Result<Option<Key>, Response<ProxyBody>> {
    let mut guard = QueueGuard { st, svc, tenant, id, armed: true };
    let deadline = tokio::time::Instant::now() + Duration::from_millis(expire_ms);
    loop {
        let timed_out = tokio::time::timeout_at(deadline, wake.notified()).await.is_err();
        let now = st.now_ms();
        let mut s = svc.lock();
        let SvcState { fair, pool, .. } = &mut *s;
        let Some(f) = fair.as_mut() else {
            guard.armed = false;
            return Ok(None);
        };
        let state = f.waiters.get(&id).map(|w| w.state.clone());
        match state {
            Some(fair::WaitState::Granted(k)) => {
                f.waiters.remove(&id);
                guard.armed = false;
                return Ok(Some(k));
            }
            Some(fair::WaitState::Released) | None => {
                f.waiters.remove(&id);
                guard.armed = false;
                return Ok(None);
            }
            Some(fair::WaitState::Queued) => {
                let stopping = st.draining.load(Relaxed);
                if !(timed_out || stopping) {
                    continue;
                }
                f.leave(id, tenant, !stopping, pool, now);
                guard.armed = false;
                if stopping {
                    return Err(plain(StatusCode::SERVICE_UNAVAILABLE, "the proxy is shutting down"));
                }
                let shed = fair::Shed {
                    retry_after_s: u32::try_from(f.max_wait_ms().div_ceil(1000)).unwrap_or(u32::MAX).max(1),
                    why: format!(
                        "waited {expire_ms} ms in the queue, past the bound of {} ms, with every replica at its limit",
                        f.max_wait_ms()
                    ),
                };
                return Err(too_many(&svc.name, tenant, shed));
            }
        }
    }
}

/// Reads a request body up to `limit` bytes: the whole body (`Ok(Ok)`), or, when it is longer,
/// what was read and the rest (`Ok(Err)`; a body whose declared length is over the limit is not
/// read at all).
async fn read_bounded(mut body: Incoming, limit: usize) -> Result<Result<Bytes, (Bytes, Incoming)>, hyper::Error> {
    if body.size_hint().exact().is_some_and(|n| n > limit as u64) {
        return Ok(Err((Bytes::new(), body)));
    }
    let mut buf = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        // Trailers are dropped (OpenAI requests have none).
        if let Ok(data) = frame?.into_data() {
            buf.extend_from_slice(&data);
            if buf.len() > limit {
                return Ok(Err((buf.freeze(), body)));
            }
        }
    }
    Ok(Ok(buf.freeze()))
}

/// Scrapes the gauges of every replica of the LLM services, every `SCRAPE_MS`.
async fn scrape_loop(st: Arc<State>) {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_millis(SCRAPE_TIMEOUT_MS)));
    let client: Client<HttpConnector, http_body_util::Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).pool_timer(TokioTimer::new()).build(connector);
    let mut tick = tokio::time::interval(Duration::from_millis(SCRAPE_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let mut targets = Vec::new();
        for svc in st.services.read().unwrap_or_else(|e| e.into_inner()).values() {
            if svc.llm.load(Relaxed) {
                let mut s = svc.lock();
                let start = targets.len();
                targets.extend(s.pool.endpoints().iter().filter(|e| !e.draining).map(|e| (svc.clone(), e.key, e.data.clone())));
                for (_, key, _) in &targets[start..] {
                    s.pool.scrape_started(*key);
                }
            }
        }
        let mut set = tokio::task::JoinSet::new();
        for (svc, key, up) in targets {
            let (client, st) = (client.clone(), st.clone());
            set.spawn(async move {
                let Some(text) = scrape(&client, &up.authority).await else { return };
                if let Some((running, waiting, kv_usage)) = llm::gauges_of(&text) {
                    let g = Gauges { running, waiting, kv_usage, scraped_at_ms: st.now_ms(), seen_inflight: 0 };
                    svc.lock().pool.set_gauges(key, g);
                }
            });
        }
        while set.join_next().await.is_some() {}
    }
}

/// `GET /metrics` of one replica, within `SCRAPE_TIMEOUT_MS`; `None` on any failure.
async fn scrape(client: &Client<HttpConnector, http_body_util::Empty<Bytes>>, at: &Authority) -> Option<String> {
    let uri = Uri::builder().scheme("http").authority(at.clone()).path_and_query("/metrics").build().ok()?;
    let get = async {
        let resp = client.get(uri).await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let body = http_body_util::Limited::new(resp.into_body(), 4 << 20).collect().await.ok()?;
        Some(String::from_utf8_lossy(&body.to_bytes()).into_owned())
    };
    tokio::time::timeout(Duration::from_millis(SCRAPE_TIMEOUT_MS), get).await.ok()?
}

/// The request to send to replica `up`.
fn upstream_request(method: &Method, up: &Upstream, pq: &PathAndQuery, headers: &HeaderMap, body: ReqBody) -> Request<ReqBody> {
    let uri = Uri::from_parts({
        let mut p = hyper::http::uri::Parts::default();
        p.scheme = Some(hyper::http::uri::Scheme::HTTP);
        p.authority = Some(up.authority.clone());
        p.path_and_query = Some(pq.clone());
        p
    })
    .expect("scheme, authority and path are set");
    let mut out = Request::new(body);
    *out.method_mut() = method.clone();
    *out.uri_mut() = uri;
    *out.version_mut() = Version::HTTP_11;
    *out.headers_mut() = headers.clone();
    out
}

/// Marks a held request; decrements the service's `waiting` gauge when dropped.
struct WaitGuard(Arc<Service>);

impl Drop for WaitGuard {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Relaxed);
    }
}

/// The upstream client of one worker thread (a pool of keep-alive connections).
type Upstreams = Client<HttpConnector, ReqBody>;

async fn handle(
    st: Arc<State>,
    client: Arc<Upstreams>,
    peer: HeaderValue,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    if req.uri().path().starts_with("/_tandem/") {
        return Ok(admin(&st, req.uri().path()));
    }
    let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok());
    let Some((name, new_pq)) = route(req.uri(), host) else {
        return Ok(plain(StatusCode::NOT_FOUND, "no service named: route with /s/SERVICE/... or Host: SERVICE"));
    };
    let name = if new_pq.is_none() { namespaced_host(req.uri(), host).unwrap_or(name) } else { name };
    let Some(svc) = st.service(name) else {
        let why = if st.from_controller && st.version.load(Relaxed) == 0 {
            format!("unknown service {name:?}: no endpoint view from the controller yet")
        } else {
            format!("unknown service {name:?}")
        };
        return Ok(plain(StatusCode::NOT_FOUND, why));
    };
    let new_pq = new_pq.map(PathAndQuery::try_from);
    svc.requests.fetch_add(1, Relaxed);
    let (parts, body) = req.into_parts();
    let pq = match new_pq {
        Some(Ok(pq)) => pq,
        Some(Err(_)) => return Ok(plain(StatusCode::BAD_REQUEST, "bad path")),
        None => parts.uri.path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/")),
    };
    // An LLM service reads its OpenAI requests' bodies first (bounded) to route them; one that
    // resumes streams, to resume them.
    let llm_svc = svc.llm.load(Relaxed);
    let resume_svc = svc.resume_streams.load(Relaxed);
    let openai = (llm_svc || resume_svc) && parts.method == Method::POST && llm::is_openai_path(pq.path());
    // With a per-replica limit, OpenAI requests have a tenant (the fair queue's).
    let (prefix_cfg, tenant, paces) = if llm_svc {
        let s = svc.lock();
        let tenant = if openai { s.fair.as_ref().map(|f| f.tenant_of(&parts.headers)) } else { None };
        (s.pool.llm_config().prefix, tenant, s.pool.llm_config().max_awaiting.is_some())
    } else {
        (PrefixConfig::default(), None, false)
    };
    // Keep small bodies so a failed attempt can be replayed.
    let mut stream = None;
    let mut head = None;
    let full: Option<Option<Bytes>> = if body.is_end_stream() {
        Some(None)
    } else if body.size_hint().exact().is_some_and(|n| n <= REPLAY_LIMIT) {
        match body.collect().await {
            Ok(b) => Some(Some(b.to_bytes())),
            Err(e) => return Ok(plain(StatusCode::BAD_REQUEST, format!("reading the request body: {e}"))),
        }
    } else if openai && body.size_hint().exact().is_none() {
        match read_bounded(body, llm_body_limit(&prefix_cfg)).await {
            Ok(Ok(b)) => Some(Some(b)),
            Ok(Err((h, rest))) => {
                head = Some(h);
                stream = Some(rest);
                None
            }
            Err(e) => return Ok(plain(StatusCode::BAD_REQUEST, format!("reading the request body: {e}"))),
        }
    } else {
        stream = Some(body);
        None
    };
    let replayable = full.is_some();
    // A paced service's streamed requests give their place back at their first token; its
    // other requests at once (an unstreamed answer begins when it ends).
    let streams = paces && openai && matches!(&full, Some(Some(b)) if llm::streams(b));
    // A stream that can go on elsewhere if its replica fails: its body was kept.
    let mut plan = match (resume_svc && openai, &full) {
        (true, Some(Some(b))) => resume::Api::of_path(pq.path()).and_then(|api| resume::Plan::new(api, b).ok()),
        _ => None,
    };
    let ticket = tenant.map(|tenant| {
        let cost = match (&full, &head) {
            (Some(Some(b)), _) => fair::cost_of(b),
            (_, Some(h)) => balance::request_cost(h.len() as u64, 256),
            _ => 1,
        };
        fair::Ticket { tenant, cost }
    });
    let mut headers = parts.headers;
    strip_hop_by_hop(&mut headers);
    let xff = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(prev) => HeaderValue::from_str(&format!("{prev}, {}", peer.to_str().unwrap_or(""))).unwrap_or(peer),
        None => peer,
    };
    headers.insert("x-forwarded-for", xff);
    // Hashed here, outside any lock.
    let llm_req = llm_svc.then(|| {
        let session = headers.get("x-session-id").and_then(|v| v.to_str().ok());
        let read = match (openai, &full) {
            (true, Some(Some(b))) if b.len() <= llm_body_limit(&prefix_cfg) => llm::prompt_of(b, prefix_cfg.max_bytes()),
            _ => None,
        };
        match read {
            Some((model, prompt)) => LlmRequest::new(&model, Some(&prompt), session, &prefix_cfg),
            None => LlmRequest::new("", None, session, &prefix_cfg),
        }
    });

    let mut tried = [Key(u64::MAX); MAX_RETRIES as usize + 1];
    let mut attempts = 0u32;
    let mut hold = None;
    let mut slot: Option<TenantSlot> = None;
    let mut last = String::new();
    loop {
        let (key, up, retries) =
            match acquire(&st, &svc, &tried[..attempts as usize], llm_req.as_ref(), ticket.as_ref(), &mut hold, true).await {
                Ok(x) => x,
                Err(resp) => {
                    drop(hold);
                    let resp = if resp.status() == StatusCode::BAD_GATEWAY && attempts > 0 {
                        plain(StatusCode::BAD_GATEWAY, format!("service {:?}: {attempts} attempt(s) failed; last: {last}", svc.name))
                    } else {
                        resp
                    };
                    if resp.status().is_server_error() {
                        svc.failures.fetch_add(1, Relaxed);
                    }
                    return Ok(resp);
                }
            };
        drop(hold.take());
        if attempts == 0
            && let Some(t) = &ticket
        {
            slot = Some(TenantSlot::new(&svc, &t.tenant));
        }
        tried[attempts as usize] = key;
        // Until the attempt is handed to a Guard or finished, a dropped request (its client
        // gone while the replica thinks) still ends it: a lost slot would hold back a
        // service with a concurrency limit for good.
        let answer = match (paces, streams) {
            (false, _) => Answer::AtEnd,
            (true, true) => Answer::AtFirstData,
            (true, false) => {
                svc.lock().answer_began(key, st.now_ms());
                Answer::Given
            }
        };
        let mut pending = Pending { svc: &svc, st: &st, key, armed: true, answer };
        attempts += 1;
        let body = match &full {
            Some(b) => ReqBody::Full(b.clone()),
            None => {
                let rest = stream.take().expect("a streamed body is sent once");
                match head.take() {
                    Some(h) => ReqBody::Prefixed(Some(h), rest),
                    None => ReqBody::Stream(rest),
                }
            }
        };
        let out = upstream_request(&parts.method, &up, &pq, &headers, body);
        let start = Instant::now();
        let outcome = match client.request(out).await {
            Ok(mut resp) => {
                let status = resp.status();
                let outcome = if status.is_server_error() { Outcome::ServerError(status.as_u16()) } else { Outcome::Ok };
                // Retry a 502/503 only where another replica can take it; else the client gets
                // the replica's own answer.
                let can_retry = attempts <= MAX_RETRIES
                    && balance::should_retry(outcome, attempts, retries, replayable, false)
                    && svc.lock().pool.can_pick(&tried[..attempts as usize]);
                if !can_retry {
                    strip_hop_by_hop(resp.headers_mut());
                    resp.headers_mut().insert("x-tandem-replica", up.replica.clone());
                    let (p, b) = resp.into_parts();
                    if !keeps_whole(&parts.method, &p) {
                        pending.armed = false;
                        let mut guard = Guard { svc: svc.clone(), up, key, outcome, start, st: st.clone(), _tenant: slot.take(), answer };
                        if let Some(plan) = plan.take().filter(|_| resumer::follows(&p)) {
                            if guard.answer == Answer::AtFirstData {
                                guard.answer_began(); // not paced: the resumer owns the body
                            }
                            let r = resumer::Resume {
                                st: st.clone(),
                                svc: svc.clone(),
                                client: client.clone(),
                                plan,
                                method: parts.method.clone(),
                                pq: pq.clone(),
                                headers: headers.clone(),
                                llm: llm_req.clone(),
                                tried: tried[..attempts as usize].to_vec(),
                                left: (retries.min(MAX_RETRIES) + 1).saturating_sub(attempts),
                            };
                            return Ok(Response::from_parts(p, resumer::start(r, b, guard)));
                        }
                        return Ok(Response::from_parts(p, ProxyBody::Upstream(b, Some(guard))));
                    }
                    // A small answer to an idempotent request is read whole before anything
                    // reaches the client, so a replica that dies mid-body (a node lost) costs a
                    // retry on another replica, not a truncated response.
                    match b.collect().await {
                        Ok(whole) => {
                            pending.armed = false;
                            drop(Guard { svc: svc.clone(), up, key, outcome, start, st: st.clone(), _tenant: None, answer });
                            return Ok(Response::from_parts(p, ProxyBody::Full(Some(whole.to_bytes()))));
                        }
                        Err(e) => {
                            let outcome = Outcome::Reset;
                            let again = attempts <= MAX_RETRIES
                                && balance::should_retry(outcome, attempts, retries, replayable, false)
                                && svc.lock().pool.can_pick(&tried[..attempts as usize]);
                            if !again {
                                pending.armed = false;
                                drop(Guard {
                                    svc: svc.clone(),
                                    up: up.clone(),
                                    key,
                                    outcome,
                                    start,
                                    st: st.clone(),
                                    _tenant: None,
                                    answer,
                                });
                                return Ok(plain(
                                    StatusCode::BAD_GATEWAY,
                                    format!(
                                        "service {:?}: replica {} broke off its response ({e}); {attempts} attempt(s), retries exhausted",
                                        svc.name, up.addr
                                    ),
                                ));
                            }
                            last = format!("replica {} broke off its response", up.addr);
                            svc.retries.fetch_add(1, Relaxed);
                            let now = st.now_ms();
                            pending.armed = false;
                            if svc.lock().finish(key, outcome, now, answer) {
                                tracing::warn!("service {}: replica {} ejected after repeated failures", svc.name, up.addr);
                            }
                            continue;
                        }
                    }
                }
                outcome
            }
            Err(e) => {
                let outcome = classify(&e);
                if !(attempts <= MAX_RETRIES && balance::should_retry(outcome, attempts, retries, replayable, false)) {
                    let now = st.now_ms();
                    pending.armed = false;
                    svc.lock().finish(key, outcome, now, answer);
                    svc.failures.fetch_add(1, Relaxed);
                    let status = if outcome == Outcome::Timeout { StatusCode::GATEWAY_TIMEOUT } else { StatusCode::BAD_GATEWAY };
                    let why = if replayable { "retries exhausted" } else { "request body streamed, not retried" };
                    return Ok(plain(
                        status,
                        format!("service {:?}: replica {} {} ({e}); {attempts} attempt(s), {why}", svc.name, up.addr, describe(outcome)),
                    ));
                }
                outcome
            }
        };
        // Retry elsewhere.
        let now = st.now_ms();
        pending.armed = false;
        if svc.lock().finish(key, outcome, now, answer) {
            tracing::warn!("service {}: replica {} ejected after repeated failures", svc.name, up.addr);
        }
        last = format!("replica {} {}", up.addr, describe(outcome));
        svc.retries.fetch_add(1, Relaxed);
    }
}

fn admin(st: &State, path: &str) -> Response<ProxyBody> {
    match path {
        "/_tandem/healthz" => plain(StatusCode::OK, "ok"),
        "/_tandem/metrics" => {
            let mut r = Response::new(ProxyBody::Full(Some(Bytes::from(st.metrics()))));
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
            r
        }
        _ => plain(StatusCode::NOT_FOUND, format!("unknown admin path {path} (try /_tandem/metrics or /_tandem/healthz)")),
    }
}

// ---------------------------------------------------------------------------------------------
// Controller sync

async fn sync_once(st: &State, target: &Conn, auth: &str, wait_ms: u64) -> Result<()> {
    let body = st.report(wait_ms);
    let hdr = [("authorization", auth)];
    let reply = tokio::time::timeout(Duration::from_millis(wait_ms + 5000), target.send("POST", "/v1/proxy/sync", Some(&body), &hdr))
        .await
        .context("the controller did not answer in time")??;
    let view: EndpointView = reply.json()?;
    st.apply(&view);
    Ok(())
}

async fn sync_loop(st: Arc<State>, target: Arc<Conn>, auth: String) {
    let mut backoff = Duration::from_millis(100);
    let mut failing = false;
    loop {
        let t0 = Instant::now();
        let before = st.version.load(Relaxed);
        match sync_once(&st, &target, &auth, SYNC_WAIT_MS).await {
            Ok(()) => {
                if failing {
                    tracing::info!("controller reachable again");
                }
                failing = false;
                backoff = Duration::from_millis(100);
                // A controller that answers at once without news must not make us spin.
                let spent = t0.elapsed();
                if st.version.load(Relaxed) == before && spent < Duration::from_millis(SYNC_WAIT_MS / 2) {
                    tokio::time::sleep(Duration::from_millis(SYNC_WAIT_MS) - spent).await;
                }
            }
            Err(e) => {
                if !failing {
                    tracing::warn!("sync with the controller failed: {e:#}; serving the last view, retrying");
                }
                failing = true;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

async fn push_loop(st: Arc<State>, target: Arc<Conn>, auth: String) {
    loop {
        st.push.notified().await;
        if let Err(e) = sync_once(&st, &target, &auth, 0).await {
            tracing::warn!("pushing a report failed: {e:#}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Server

fn upstream_client() -> Upstreams {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(3)));
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(256)
        .pool_timer(TokioTimer::new())
        .build(connector)
}

/// One listening socket per worker thread on the same address (SO_REUSEPORT: the kernel spreads
/// connections over them), so a connection and its upstream connections stay on one thread, as
/// nginx's workers do.
fn sockets(addr: SocketAddr, n: usize) -> Result<(Vec<Listener>, SocketAddr)> {
    let mut out = Vec::new();
    let mut at = addr;
    for _ in 0..n {
        let s = if at.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        s.set_reuseaddr(true)?;
        s.set_reuseport(true)?;
        s.set_nodelay(true)?;
        s.bind(at).with_context(|| format!("cannot listen on {addr}"))?;
        at = s.local_addr()?;
        out.push(Listener::Bind(s));
    }
    Ok((out, at))
}

/// A worker's listening socket: one to listen on now, or one inherited listening already.
enum Listener {
    Bind(tokio::net::TcpSocket),
    Held(std::net::TcpListener),
}

impl Listener {
    /// Listening, on this thread's runtime.
    fn listen(self) -> std::io::Result<tokio::net::TcpListener> {
        match self {
            Listener::Bind(s) => s.listen(4096),
            Listener::Held(l) => {
                l.set_nonblocking(true)?;
                tokio::net::TcpListener::from_std(l)
            }
        }
    }
}

/// Accepts and serves connections on one worker thread until `stop` turns true, then lets the
/// connections finish (up to 30 s).
async fn serve(
    st: Arc<State>,
    sock: Listener,
    mut stop: tokio::sync::watch::Receiver<bool>,
    ready: std::sync::mpsc::Sender<std::io::Result<()>>,
) -> Result<()> {
    let listener = match sock.listen() {
        Ok(l) => {
            let _ = ready.send(Ok(()));
            l
        }
        Err(e) => {
            let msg = e.to_string();
            let _ = ready.send(Err(e));
            bail!("listen: {msg}");
        }
    };
    let client = Arc::new(upstream_client());
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).keep_alive(true);
    builder.http2().timer(TokioTimer::new());
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        tokio::select! {
            r = listener.accept() => {
                let (stream, peer) = match r {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!("accept: {e}");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                stream.set_nodelay(true).ok();
                let (st, client) = (st.clone(), client.clone());
                let ip = HeaderValue::from_str(&peer.ip().to_string()).expect("an IP address is a valid header value");
                let svc = hyper::service::service_fn(move |req| handle(st.clone(), client.clone(), ip.clone(), req));
                let conn = builder.serve_connection(TokioIo::new(stream), svc).into_owned();
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(Duration::from_secs(30), graceful.shutdown()).await.is_err() {
        tracing::warn!("requests still in flight after 30 s; exiting");
    }
    Ok(())
}

/// Runs the proxy until SIGTERM or SIGINT, then lets in-flight requests finish (up to 30 s).
/// `threads` worker threads each run their own single-threaded runtime and listener.
pub(crate) fn run(a: ProxyArgs, threads: usize) -> Result<()> {
    let (socks, local) = if a.held.is_empty() {
        sockets(a.listen, threads.max(1))?
    } else {
        let local = a.held[0].local_addr()?;
        (a.held.into_iter().map(Listener::Held).collect(), local)
    };
    let st = Arc::new(State {
        services: RwLock::new(HashMap::new()),
        version: AtomicU64::new(0),
        from_controller: a.controller.is_some(),
        start: Instant::now(),
        seed: a.seed,
        push: Notify::new(),
        listen: local.to_string(),
        draining: AtomicBool::new(false),
        propagation_us: AtomicU64::new(0),
        views: AtomicU64::new(0),
    });
    {
        let mut map = st.services.write().unwrap_or_else(|e| e.into_inner());
        for (i, s) in a.statics.iter().enumerate() {
            if map.contains_key(&s.name) {
                bail!("--static: service {:?} given twice", s.name);
            }
            let svc = Service::new(&s.name, a.seed.wrapping_add(i as u64));
            {
                let mut ss = svc.lock();
                svc.set_policy(&mut ss, s.policy);
                ss.retries = a.retries.min(MAX_RETRIES);
                ss.hold_retries = false;
                if s.policy == Policy::Llm {
                    ss.set_fair(&s.name, a.fair.clone(), 0);
                }
            }
            svc.resume_streams.store(s.resume_streams, Relaxed);
            svc.set_endpoints(&s.addrs.iter().map(|x| (x.clone(), x.clone())).collect::<Vec<_>>(), 0)?;
            map.insert(s.name.clone(), Arc::new(svc));
        }
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut workers = Vec::new();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let n = socks.len();
    for (i, sock) in socks.into_iter().enumerate() {
        let (st, stop, ready) = (st.clone(), stop_rx.clone(), ready_tx.clone());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        workers.push(
            std::thread::Builder::new()
                .name(format!("proxy-{i}"))
                .spawn(move || rt.block_on(serve(st, sock, stop, ready)))
                .context("starting a worker thread")?,
        );
    }
    // Every worker listens before the address is announced.
    for _ in 0..n {
        ready_rx.recv().context("a worker thread ended before listening")?.with_context(|| format!("cannot listen on {local}"))?;
    }
    let main = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    main.block_on(async {
        tokio::spawn(scrape_loop(st.clone()));
        if let Some((target, auth)) = a.controller {
            tokio::spawn(sync_loop(st.clone(), target.clone(), auth.clone()));
            tokio::spawn(push_loop(st.clone(), target, auth));
        }
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
        // logrotate's SIGHUP opens the log file afresh (and no longer ends the proxy).
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                logging::reopen_at_sighup();
            }
        });
        println!("tandem proxy listening on {local}");
        use std::io::Write as _;
        std::io::stdout().flush().ok();
        // Every worker accepts: systemd's `Type=notify` may go on.
        if let Err(e) = exec::notify_ready() {
            tracing::warn!("telling systemd the proxy is ready: {e}");
        }
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        st.draining.store(true, Relaxed);
        // Held and queued requests give up now (503) instead of holding the shutdown.
        for svc in st.services.read().unwrap_or_else(|e| e.into_inner()).values() {
            svc.changed.notify_waiters();
            if let Some(f) = svc.lock().fair.as_ref() {
                f.waiters.values().for_each(|w| w.notify.notify_one());
            }
        }
        tracing::info!("shutting down, letting in-flight requests finish");
        let _ = stop_tx.send(true);
        anyhow::Ok(())
    })?;
    for w in workers {
        match w.join() {
            Ok(r) => r?,
            Err(_) => bail!("a worker thread panicked"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_by_prefix_then_host() {
        let u: Uri = "/s/echo/a/b?x=1".parse().unwrap();
        assert_eq!(route(&u, Some("ignored")), Some(("echo", Some("/a/b?x=1".to_string()))));
        let u: Uri = "/s/echo".parse().unwrap();
        assert_eq!(route(&u, None), Some(("echo", Some("/".to_string()))));
        let u: Uri = "/s/echo?q".parse().unwrap();
        assert_eq!(route(&u, None), Some(("echo", Some("/?q".to_string()))));
        let u: Uri = "/v1/chat".parse().unwrap();
        assert_eq!(route(&u, Some("llama.svc.local:8080")), Some(("llama", None)));
        assert_eq!(route(&u, Some("llama")), Some(("llama", None)));
        assert_eq!(namespaced_host(&u, Some("web.team-a.svc.cluster.local:80")), Some("web.team-a"));
        assert_eq!(namespaced_host(&u, Some("web.team-a.svc")), Some("web.team-a"));
        assert_eq!(namespaced_host(&u, Some("web.team-a")), None, "only cluster DNS's form");
        assert_eq!(namespaced_host(&u, Some("llama.svc.local")), None);
        assert_eq!(namespaced_host(&u, Some("web")), None);
        assert_eq!(namespaced_host(&u, Some(".x.svc")), None);
        assert_eq!(namespaced_host(&u, Some("web..svc")), None);
        assert_eq!(route(&u, None), None);
        let u: Uri = "http://chat:80/x".parse().unwrap();
        assert_eq!(route(&u, None), Some(("chat", None)), "HTTP/2 :authority");
        let u: Uri = "/s//x".parse().unwrap();
        assert_eq!(route(&u, None), None);
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(label("x\ny"), "x\\ny");
    }

    #[test]
    fn static_specs() {
        let s = parse_static("echo=127.0.0.1:9000,localhost:9001").unwrap();
        assert_eq!(s.name, "echo");
        assert_eq!(s.addrs, ["127.0.0.1:9000", "localhost:9001"]);
        assert_eq!(parse_static("e:p2c=127.0.0.1:1").unwrap().policy, Policy::P2c);
        assert_eq!(parse_static("chat:llm=127.0.0.1:1,127.0.0.1:2").unwrap().policy, Policy::Llm);
        for bad in ["echo", "=1.2.3.4:5", "echo=", "echo=1.2.3.4", "echo=1.2.3.4:x", "echo=1.2.3.4:0", "e/x=1.2.3.4:5", "e:rand=1.2.3.4:5"]
        {
            assert!(parse_static(bad).is_err(), "{bad}");
        }
    }
}
