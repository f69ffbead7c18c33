//! `tandem bench llm`: the proxy's balancing policies side by side in front of LLM server
//! stand-ins (`tandem __llm` child processes with the fixed parameters).
//!
//! The run: (1) the replicas' capacity is measured briefly: fresh replicas, a closed loop of
//! the workload's requests sent straight to them (client-side round robin, 2 × 32 sequences
//! per replica in flight), output tokens per second after a 1.5 s warm-up over a window of a
//! third of `--duration` (1 to 5 s), divided by the 100 tokens of a request (`--capacity`
//! skips this);
//! (2) for each policy, fresh replicas (empty caches, counters at zero) and one fresh
//! `tandem proxy --static bench:POLICY=...` receive the same seeded open-loop Poisson workload
//! at `--rate-fraction` of that capacity, every request a streaming completion
//! (`stream: true`, usage included). Latencies are charged from each request's due time (no
//! coordinated omission). Time to first token is up to the first chunk holding text; time per
//! output token is (last token − first token) / (tokens − 1); the prefix-cache hit rate is the
//! replicas' `vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total` at the end of the
//! policy's run (fresh replicas, so no subtraction). Shed requests are answers 429 or 503; any
//! other non-2xx answer, transport error, broken stream or timeout is failed.
//!
//! Workloads (a token is 4 bytes in the stand-in; prompts are words of 3 letters and a space):
//! - `shared-prefix`: 16 groups with a system prompt of 2,000 tokens; each request adds 200
//!   unique tokens and asks for 100.
//! - `multi-turn`: 64 conversations open at once, 5 turns each; a turn adds 200 user tokens to
//!   the whole history (earlier prompts and the answers received) and asks for 100. An arrival
//!   continues a random idle conversation (its last answer in); when none is idle it opens a new
//!   one; a conversation that has had 5 turns is replaced by a new one. Which conversation an
//!   arrival continues therefore depends on timing; arrival times and text are seeded.
//! - `unique`: 500-token prompts with nothing shared, 100 tokens asked.
//!
//! Bounded: arrivals stop at `--duration` seconds or `--requests`, whichever first; every
//! request has a 60 s timeout; processes are killed when the run ends.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;
use up::Kids;

/// `tandem bench llm` settings.
#[derive(clap::Args, Clone, Debug)]
pub struct BenchLlmArgs {
    /// Stand-in replicas behind the proxy.
    #[arg(long, default_value_t = 4)]
    pub replicas: u32,
    /// Workload: shared-prefix, multi-turn or unique; or fairness (a quiet and a noisy tenant
    /// through one proxy with a per-replica limit; see `bench::fairness`).
    #[arg(long, default_value = "shared-prefix")]
    pub workload: String,
    /// Balancing policy (repeatable; default: round_robin, least_request, p2c, llm).
    #[arg(long = "balance")]
    pub balance: Vec<String>,
    /// Offered load as a fraction of the replicas' measured capacity.
    #[arg(long, default_value_t = 0.75)]
    pub rate_fraction: f64,
    /// Seconds of arrivals per policy.
    #[arg(long, default_value_t = 30.0)]
    pub duration: f64,
    /// Most requests per policy (arrivals stop at whichever of this and --duration comes first).
    #[arg(long)]
    pub requests: Option<u64>,
    /// Capacity in requests/s to use instead of measuring it.
    #[arg(long)]
    pub capacity: Option<f64>,
    /// Seed of the arrivals and the text.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Worker threads of `tandem proxy`.
    #[arg(long, default_value_t = 2)]
    pub proxy_threads: u32,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Fairness: the quiet tenant's rate as a fraction of the measured capacity.
    #[arg(long, default_value_t = 0.2)]
    pub quiet_fraction: f64,
    /// Fairness: the noisy tenant sends this many times the quiet tenant's rate.
    #[arg(long, default_value_t = 10.0)]
    pub noisy_times: f64,
    /// Fairness: quiet-tenant requests per phase (alone, then beside the noisy tenant).
    #[arg(long, default_value_t = 2000)]
    pub quiet_requests: u64,
    /// Fairness: the proxy's per-replica limit (default 24, three quarters of the stand-in's
    /// batch of 32: room for the requests of tenants under their share, which the limit does
    /// not hold back).
    #[arg(long, default_value_t = 24)]
    pub max_concurrency: u32,
    /// Fairness: the proxy's bound on a request's wait in its queue.
    #[arg(long, default_value = "2s")]
    pub max_wait: String,
    /// Fairness: the proxy's `--prefill-pace` (default: the proxy's, 1; 0: not paced).
    #[arg(long)]
    pub prefill_pace: Option<u32>,
}

/// One policy's figures.
#[derive(Serialize, Debug, Clone)]
pub struct PolicyFigures {
    /// The policy.
    pub balance: String,
    /// Requests sent.
    pub requests: u64,
    /// Streams completed with `[DONE]`.
    pub ok: u64,
    /// Answers 429 or 503.
    pub shed: u64,
    /// Everything else that did not complete.
    pub failed: u64,
    /// Failures by kind.
    pub failures: BTreeMap<String, u64>,
    /// Time to first token, median, ms (from the due time).
    pub ttft_p50_ms: f64,
    /// Time to first token, 99th percentile, ms.
    pub ttft_p99_ms: f64,
    /// Time per output token after the first, median over requests, ms.
    pub tpot_p50_ms: f64,
    /// Time per output token, 99th percentile, ms.
    pub tpot_p99_ms: f64,
    /// End-to-end latency, median, ms (from the due time).
    pub e2e_p50_ms: f64,
    /// End-to-end latency, 99th percentile, ms.
    pub e2e_p99_ms: f64,
    /// Completed requests per second (first due time to last answer).
    pub throughput_rps: f64,
    /// Output tokens per second over the same time.
    pub output_tokens_per_s: f64,
    /// Prefix-cache hits / queries (tokens) over the replicas.
    pub cache_hit_rate: f64,
    /// Completed requests per replica.
    pub per_replica: BTreeMap<String, u64>,
}

/// The benchmark's result.
#[derive(Serialize, Debug)]
pub struct Report {
    /// The workload.
    pub workload: String,
    /// Replicas.
    pub replicas: u32,
    /// Capacity, requests/s (measured, or given).
    pub capacity_rps: f64,
    /// Whether the capacity was measured.
    pub capacity_measured: bool,
    /// Offered rate, requests/s.
    pub offered_rps: f64,
    /// Fraction of capacity offered.
    pub rate_fraction: f64,
    /// Seconds of arrivals per policy.
    pub duration_s: f64,
    /// Seed.
    pub seed: u64,
    /// Per policy, in the order run.
    pub policies: Vec<PolicyFigures>,
}

const DEFAULT_POLICIES: [&str; 4] = ["round_robin", "least_request", "p2c", "llm"];
const OUTPUT_TOKENS: u32 = 100;
const GROUPS: usize = 16;
const SYSTEM_TOKENS: usize = 2000;
const OWN_TOKENS: usize = 200;
const CONVERSATIONS: usize = 64;
const TURNS: u32 = 5;
const UNIQUE_TOKENS: usize = 500;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// The stand-in's batch (sequences decoded together); the capacity run keeps twice that in
/// flight per replica.
const BATCH: u32 = 32;

#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Kind {
    SharedPrefix,
    MultiTurn,
    Unique,
}

/// `n` words of 4 bytes (3 letters and a space): `n` tokens for the stand-in.
fn words(rng: &mut SmallRng, n: usize) -> String {
    let mut s = String::with_capacity(4 * n);
    for _ in 0..n {
        for _ in 0..3 {
            s.push((b'a' + rng.random_range(0..26u8)) as char);
        }
        s.push(' ');
    }
    s
}

struct Conv {
    history: String,
    turns: u32,
    busy: bool,
}

/// The requests of a workload: prompts made on demand, conversations kept between turns.
struct Workload {
    kind: Kind,
    rng: Mutex<SmallRng>,
    systems: Vec<String>,
    convs: Mutex<Vec<Conv>>,
}

/// One request to send: its prompt, and its conversation (multi-turn).
struct Job {
    prompt: String,
    conv: Option<usize>,
}

impl Workload {
    fn new(kind: Kind, seed: u64) -> Workload {
        let mut rng = SmallRng::seed_from_u64(seed);
        let systems = if kind == Kind::SharedPrefix { (0..GROUPS).map(|_| words(&mut rng, SYSTEM_TOKENS)).collect() } else { Vec::new() };
        let convs = if kind == Kind::MultiTurn {
            (0..CONVERSATIONS).map(|_| Conv { history: String::new(), turns: 0, busy: false }).collect()
        } else {
            Vec::new()
        };
        Workload { kind, rng: Mutex::new(rng), systems, convs: Mutex::new(convs) }
    }

    fn next(&self) -> Job {
        let mut rng = self.rng.lock().unwrap();
        match self.kind {
            Kind::SharedPrefix => {
                let g = rng.random_range(0..GROUPS);
                Job { prompt: format!("{}{}", self.systems[g], words(&mut rng, OWN_TOKENS)), conv: None }
            }
            Kind::Unique => Job { prompt: words(&mut rng, UNIQUE_TOKENS), conv: None },
            Kind::MultiTurn => {
                let mut convs = self.convs.lock().unwrap();
                let idle: Vec<usize> = (0..convs.len()).filter(|&i| !convs[i].busy).collect();
                let i = if idle.is_empty() {
                    convs.push(Conv { history: String::new(), turns: 0, busy: false });
                    convs.len() - 1
                } else {
                    idle[rng.random_range(0..idle.len())]
                };
                if convs[i].turns >= TURNS {
                    convs[i] = Conv { history: String::new(), turns: 0, busy: false };
                }
                let c = &mut convs[i];
                c.busy = true;
                c.turns += 1;
                c.history.push_str(&words(&mut rng, OWN_TOKENS));
                Job { prompt: c.history.clone(), conv: Some(i) }
            }
        }
    }

    /// A request ended: its answer joins its conversation's history (nothing when it failed).
    fn done(&self, conv: Option<usize>, answer: Option<&str>) {
        if let Some(i) = conv {
            let mut convs = self.convs.lock().unwrap();
            let c = &mut convs[i];
            c.busy = false;
            match answer {
                Some(a) => c.history.push_str(a),
                // A failed turn: the conversation starts over.
                None => c.turns = TURNS,
            }
        }
    }
}

/// One request's outcome.
#[derive(Default)]
pub(crate) struct Outcome {
    ttft_us: Option<u64>,
    tpot_us: Option<f64>,
    e2e_us: u64,
    tokens: u64,
    text: String,
    replica: Option<String>,
    /// `None` when it completed; else `shed` or a failure's kind.
    error: Option<String>,
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

fn client() -> HttpClient {
    let mut conn = HttpConnector::new();
    conn.set_nodelay(true);
    Client::builder(TokioExecutor::new()).pool_timer(TokioTimer::new()).build(conn)
}

/// Sends one streaming completion to `url` and reads its events.
/// With `count`, tokens that arrive within its window are added to its counter.
/// With `tenant`, the request carries `x-tenant: TENANT`. A 429 without `Retry-After` is a
/// failure, not a shed request.
async fn one(
    c: &HttpClient,
    url: &str,
    prompt: &str,
    due: Instant,
    count: Option<&(AtomicU64, Instant, Instant)>,
    tenant: Option<&str>,
) -> Outcome {
    let body = serde_json::json!({
        "model": "tandem-llm",
        "prompt": prompt,
        "max_tokens": OUTPUT_TOKENS,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let mut req = Request::post(url).header("content-type", "application/json");
    if let Some(t) = tenant {
        req = req.header("x-tenant", t);
    }
    let req = match req.body(Full::new(Bytes::from(body.to_string()))) {
        Ok(r) => r,
        Err(e) => return Outcome { error: Some(format!("request: {e}")), ..Default::default() },
    };
    let mut o = Outcome::default();
    let r = tokio::time::timeout(REQUEST_TIMEOUT, async {
        let resp = c.request(req).await.map_err(|e| if e.is_connect() { "connect".to_string() } else { "transport".to_string() })?;
        o.replica = resp.headers().get("x-tandem-replica").map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let st = resp.status().as_u16();
        if st == 429 && !resp.headers().contains_key("retry-after") {
            let _ = resp.into_body().collect().await;
            return Err("429 without Retry-After".to_string());
        }
        if st == 429 || st == 503 {
            let _ = resp.into_body().collect().await;
            return Err("shed".to_string());
        }
        if st != 200 {
            let _ = resp.into_body().collect().await;
            return Err(format!("HTTP {st}"));
        }
        let mut body = resp.into_body();
        let mut buf: Vec<u8> = Vec::new();
        let (mut first, mut last) = (None::<Instant>, None::<Instant>);
        let mut done = false;
        while let Some(f) = body.frame().await {
            let f = f.map_err(|_| "body".to_string())?;
            let Ok(data) = f.into_data() else { continue };
            buf.extend_from_slice(&data);
            let now = Instant::now();
            while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
                let ev: Vec<u8> = buf.drain(..end + 2).collect();
                let ev = String::from_utf8_lossy(&ev);
                let Some(d) = ev.trim().strip_prefix("data: ") else { continue };
                if d == "[DONE]" {
                    done = true;
                    continue;
                }
                let v: serde_json::Value = serde_json::from_str(d).map_err(|_| "bad event".to_string())?;
                if let Some(t) = v["choices"][0]["text"].as_str()
                    && !t.is_empty()
                {
                    first.get_or_insert(now);
                    last = Some(now);
                    o.tokens += 1;
                    o.text.push_str(t);
                    if let Some((n, from, to)) = count
                        && now >= *from
                        && now < *to
                    {
                        n.fetch_add(1, Relaxed);
                    }
                }
            }
        }
        if !done {
            return Err("broken stream".to_string());
        }
        let end = Instant::now();
        o.e2e_us = end.duration_since(due).as_micros() as u64;
        if let Some(f) = first {
            o.ttft_us = Some(f.duration_since(due).as_micros() as u64);
            if o.tokens > 1 {
                o.tpot_us = Some(last.unwrap_or(f).duration_since(f).as_micros() as f64 / (o.tokens - 1) as f64);
            }
        }
        Ok(())
    })
    .await;
    match r {
        Err(_) => o.error = Some("timeout".into()),
        Ok(Err(e)) => o.error = Some(e),
        Ok(Ok(())) => {}
    }
    o
}

/// Starts `n` fresh stand-ins; returns their addresses.
pub(crate) fn start_replicas(exe: &std::path::Path, n: u32, kids: &mut Kids) -> Result<Vec<String>> {
    let mut addrs = Vec::new();
    for i in 0..n {
        let mut c = Command::new(exe)
            .args([crate::llmserver::LLM_CMD, "--port", "0", "--name", &format!("llm{i}")])
            .stdout(Stdio::piped())
            .spawn()
            .context("starting a stand-in")?;
        let a = crate::proxy::listening(&mut c, "a stand-in");
        kids.0.push(c);
        addrs.push(a?);
    }
    Ok(addrs)
}

/// A Prometheus value (summed over label sets).
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn cache_rate(replicas: &[String]) -> Result<f64> {
    let c: Client<HttpConnector, http_body_util::Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let (mut hits, mut queries) = (0.0, 0.0);
    for r in replicas {
        let resp = c.get(format!("http://{r}/metrics").parse()?).await.with_context(|| format!("metrics of {r}"))?;
        let text = String::from_utf8_lossy(&resp.into_body().collect().await?.to_bytes()).into_owned();
        hits += metric(&text, "vllm:prefix_cache_hits_total");
        queries += metric(&text, "vllm:prefix_cache_queries_total");
    }
    Ok(if queries > 0.0 { hits / queries } else { 0.0 })
}

/// Closed loop straight to the replicas: output tokens per second after a warm-up, divided by
/// the tokens of a request (tokens arrive steadily where completions come in waves).
pub(crate) async fn capacity(replicas: &[String], kind: Kind, seed: u64, warm: Duration, window: Duration) -> Result<f64> {
    let c = client();
    let w = Arc::new(Workload::new(kind, seed ^ 0x9e37_79b9));
    let start = Instant::now();
    let (t0, t1) = (start + warm, start + warm + window);
    let counted = Arc::new((AtomicU64::new(0), t0, t1));
    let mut tasks = Vec::new();
    for k in 0..(2 * BATCH as usize * replicas.len()) {
        let url = format!("http://{}/v1/completions", replicas[k % replicas.len()]);
        let (c, w, counted) = (c.clone(), w.clone(), counted.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < t1 {
                let job = w.next();
                let o = one(&c, &url, &job.prompt, Instant::now(), Some(&counted), None).await;
                w.done(job.conv, o.error.is_none().then_some(o.text.as_str()));
            }
        }));
    }
    // The loop ends at t1; requests still in flight then are abandoned (the replicas are
    // killed right after).
    tokio::time::sleep_until(t1.into()).await;
    for t in &tasks {
        t.abort();
    }
    let n = counted.0.load(Relaxed);
    if n == 0 {
        bail!("no token came back while measuring capacity");
    }
    Ok(n as f64 / OUTPUT_TOKENS as f64 / window.as_secs_f64())
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let i = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// One policy's run: the seeded arrivals at `rate` to `url` (as `tenant`, if given).
pub(crate) async fn open_loop(
    url: &str,
    kind: Kind,
    seed: u64,
    rate: f64,
    duration: f64,
    limit: u64,
    tenant: Option<&str>,
) -> Vec<Outcome> {
    let c = client();
    let w = Arc::new(Workload::new(kind, seed));
    let mut arrivals = SmallRng::seed_from_u64(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 1);
    let start = Instant::now();
    let mut t = 0.0f64;
    let mut tasks = Vec::new();
    let mut sent = 0u64;
    loop {
        // Exponential gaps: Poisson arrivals.
        let u: f64 = arrivals.random();
        t += -(1.0 - u).ln() / rate;
        if t >= duration || sent >= limit {
            break;
        }
        let due = start + Duration::from_secs_f64(t);
        tokio::time::sleep_until(due.into()).await;
        let job = w.next();
        let (c, w, url, tenant) = (c.clone(), w.clone(), url.to_string(), tenant.map(str::to_string));
        sent += 1;
        tasks.push(tokio::spawn(async move {
            let o = one(&c, &url, &job.prompt, due, None, tenant.as_deref()).await;
            w.done(job.conv, o.error.is_none().then_some(o.text.as_str()));
            o
        }));
    }
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        match t.await {
            Ok(o) => out.push(o),
            Err(_) => out.push(Outcome { error: Some("panic".into()), ..Default::default() }),
        }
    }
    out
}

pub(crate) fn figures(balance: &str, outs: &[Outcome], wall_s: f64, cache_hit_rate: f64) -> PolicyFigures {
    let ok: Vec<&Outcome> = outs.iter().filter(|o| o.error.is_none()).collect();
    let mut failures = BTreeMap::new();
    for o in outs {
        if let Some(e) = &o.error {
            *failures.entry(e.clone()).or_insert(0u64) += 1;
        }
    }
    let shed = failures.get("shed").copied().unwrap_or(0);
    let mut ttft: Vec<f64> = ok.iter().filter_map(|o| o.ttft_us).map(|u| u as f64 / 1000.0).collect();
    let mut tpot: Vec<f64> = ok.iter().filter_map(|o| o.tpot_us).map(|u| u / 1000.0).collect();
    let mut e2e: Vec<f64> = ok.iter().map(|o| o.e2e_us as f64 / 1000.0).collect();
    let tokens: u64 = ok.iter().map(|o| o.tokens).sum();
    let mut per_replica = BTreeMap::new();
    for o in &ok {
        *per_replica.entry(o.replica.clone().unwrap_or_else(|| "?".into())).or_insert(0u64) += 1;
    }
    let wall = wall_s.max(1e-9);
    PolicyFigures {
        balance: balance.to_string(),
        requests: outs.len() as u64,
        ok: ok.len() as u64,
        shed,
        failed: outs.len() as u64 - ok.len() as u64 - shed,
        failures,
        ttft_p50_ms: pct(&mut ttft, 0.50),
        ttft_p99_ms: pct(&mut ttft, 0.99),
        tpot_p50_ms: pct(&mut tpot, 0.50),
        tpot_p99_ms: pct(&mut tpot, 0.99),
        e2e_p50_ms: pct(&mut e2e, 0.50),
        e2e_p99_ms: pct(&mut e2e, 0.99),
        throughput_rps: ok.len() as f64 / wall,
        output_tokens_per_s: tokens as f64 / wall,
        cache_hit_rate,
        per_replica,
    }
}

/// Runs the benchmark.
pub fn run(a: BenchLlmArgs) -> Result<Report> {
    let kind = match a.workload.as_str() {
        "shared-prefix" => Kind::SharedPrefix,
        "multi-turn" => Kind::MultiTurn,
        "unique" => Kind::Unique,
        w => bail!("--workload {w:?}: expected shared-prefix, multi-turn, unique or fairness"),
    };
    if a.replicas == 0 {
        bail!("--replicas must be at least 1");
    }
    if !(a.rate_fraction > 0.0 && a.rate_fraction.is_finite()) {
        bail!("--rate-fraction must be positive");
    }
    if !(a.duration > 0.0 && a.duration.is_finite()) {
        bail!("--duration must be a positive number of seconds");
    }
    if a.requests == Some(0) {
        bail!("--requests must be at least 1");
    }
    if a.capacity.is_some_and(|c| !(c > 0.0 && c.is_finite())) {
        bail!("--capacity must be a positive rate");
    }
    let policies: Vec<String> =
        if a.balance.is_empty() { DEFAULT_POLICIES.iter().map(|s| s.to_string()).collect() } else { a.balance.clone() };
    for p in &policies {
        if !matches!(p.as_str(), "round_robin" | "least_request" | "p2c" | "llm") {
            bail!("--balance {p:?}: expected round_robin, least_request, p2c or llm");
        }
    }
    let exe = std::env::current_exe()?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let (cap, measured) = match a.capacity {
        Some(c) => (c, false),
        None => {
            let mut kids = Kids(Vec::new());
            let reps = start_replicas(&exe, a.replicas, &mut kids)?;
            // Warm-up: one decode of 100 tokens (1 s) and a little; then a window of up to 5 s.
            let window = Duration::from_secs_f64((a.duration / 3.0).clamp(1.0, 5.0));
            // On a machine busy enough that no token came back in the window, once more with
            // a window twice as long.
            let c = match rt.block_on(capacity(&reps, kind, a.seed, Duration::from_millis(1500), window)) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("capacity: {e}; measuring again over {} s", 2.0 * window.as_secs_f64());
                    rt.block_on(capacity(&reps, kind, a.seed, Duration::from_millis(1500), 2 * window))?
                }
            };
            eprintln!("capacity: {c:.1} requests/s over {} replicas ({} s window)", a.replicas, window.as_secs_f64());
            (c, true)
        }
    };
    let rate = cap * a.rate_fraction;
    let limit = a.requests.unwrap_or(u64::MAX);
    let mut out = Vec::new();
    for p in &policies {
        let mut kids = Kids(Vec::new());
        let reps = start_replicas(&exe, a.replicas, &mut kids)?;
        let spec = format!("bench:{p}={}", reps.join(","));
        let mut px = Command::new(&exe)
            .args(["proxy", "--listen", "127.0.0.1:0", "--threads", &a.proxy_threads.to_string(), "--static", &spec])
            .stdout(Stdio::piped())
            .spawn()
            .context("starting tandem proxy")?;
        let addr = crate::proxy::listening(&mut px, "tandem proxy");
        kids.0.push(px);
        let url = format!("http://{}/s/bench/v1/completions", addr?);
        let t0 = Instant::now();
        let outs = rt.block_on(open_loop(&url, kind, a.seed, rate, a.duration, limit, None));
        let wall = t0.elapsed().as_secs_f64();
        let hit = rt.block_on(cache_rate(&reps))?;
        let f = figures(p, &outs, wall, hit);
        eprintln!(
            "  {:14} {} requests, TTFT p50 {:.0} ms p99 {:.0} ms, cache hits {:.1}%, {} shed, {} failed",
            p,
            f.requests,
            f.ttft_p50_ms,
            f.ttft_p99_ms,
            100.0 * f.cache_hit_rate,
            f.shed,
            f.failed
        );
        out.push(f);
        drop(kids);
    }
    Ok(Report {
        workload: a.workload.clone(),
        replicas: a.replicas,
        capacity_rps: cap,
        capacity_measured: measured,
        offered_rps: rate,
        rate_fraction: a.rate_fraction,
        duration_s: a.duration,
        seed: a.seed,
        policies: out,
    })
}

/// Prints the table: one column per policy.
pub fn print(r: &Report) {
    println!(
        "workload {}; {} stand-in replicas; capacity {:.1} req/s ({}); offered {:.1} req/s ({} of it), Poisson, {} s per policy, seed {}\n",
        r.workload,
        r.replicas,
        r.capacity_rps,
        if r.capacity_measured { "measured" } else { "given" },
        r.offered_rps,
        r.rate_fraction,
        r.duration_s,
        r.seed
    );
    let head: Vec<&str> = r.policies.iter().map(|p| p.balance.as_str()).collect();
    println!("| figure | {} |", head.join(" | "));
    println!("|---|{}", "---|".repeat(head.len()));
    let row = |name: &str, f: &dyn Fn(&PolicyFigures) -> String| {
        let cells: Vec<String> = r.policies.iter().map(f).collect();
        println!("| {name} | {} |", cells.join(" | "));
    };
    row("requests", &|p| p.requests.to_string());
    row("TTFT p50 (ms)", &|p| format!("{:.1}", p.ttft_p50_ms));
    row("TTFT p99 (ms)", &|p| format!("{:.1}", p.ttft_p99_ms));
    row("time per output token p50 (ms)", &|p| format!("{:.2}", p.tpot_p50_ms));
    row("time per output token p99 (ms)", &|p| format!("{:.2}", p.tpot_p99_ms));
    row("end-to-end p50 (ms)", &|p| format!("{:.0}", p.e2e_p50_ms));
    row("end-to-end p99 (ms)", &|p| format!("{:.0}", p.e2e_p99_ms));
    row("throughput (req/s)", &|p| format!("{:.1}", p.throughput_rps));
    row("output tokens/s", &|p| format!("{:.0}", p.output_tokens_per_s));
    row("prefix-cache hit rate", &|p| format!("{:.1}%", 100.0 * p.cache_hit_rate));
    row("shed (429/503)", &|p| p.shed.to_string());
    row("failed", &|p| p.failed.to_string());
}
