//! `tandem bench load URL`: an HTTP load generator for tests and benchmarks.
//!
//! Closed loop (`--rate 0`, the default): `--concurrency` workers, each sending its next request
//! when the previous answer has been read. Open loop (`--rate R`): request i is due at
//! start + i/R whatever happens to earlier ones, and its latency is measured from that due time,
//! not from when it could actually be sent, so a stalled server is charged for the queue it
//! causes (no coordinated omission). Failed requests are counted, never fatal.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::Serialize;

/// `tandem bench load` arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct LoadArgs {
    /// Target URL (http://host:port/path).
    pub url: String,
    /// Requests to send (default 1000 when --duration is not given).
    #[arg(long)]
    pub requests: Option<u64>,
    /// Offered load in requests per second (open loop); 0 means closed loop.
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Workers (closed loop), or most requests outstanding at once (open loop: beyond it,
    /// requests are sent late and their lateness counts in their latency).
    #[arg(long, default_value_t = 16)]
    pub concurrency: u32,
    /// Stop sending after this many seconds.
    #[arg(long)]
    pub duration: Option<f64>,
    /// HTTP/2 with prior knowledge (h2c) instead of HTTP/1.1.
    #[arg(long)]
    pub http2: bool,
    /// Extra request header, K:V (repeatable).
    #[arg(long = "header")]
    pub headers: Vec<String>,
    /// Per-request timeout in seconds.
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
    /// Runtime worker threads (default: the machine's cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Latency figures, milliseconds.
#[derive(Serialize, Debug, Clone, Default)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

/// What a run measured.
#[derive(Serialize, Debug, Clone)]
pub struct LoadReport {
    /// Target.
    pub url: String,
    /// `closed` or `open`.
    pub mode: &'static str,
    /// Workers or outstanding limit.
    pub concurrency: u32,
    /// Offered rate (open loop), requests/s.
    pub rate_target: f64,
    /// HTTP/2 used.
    pub http2: bool,
    /// Requests sent.
    pub sent: u64,
    /// Answers with a 2xx status.
    pub ok: u64,
    /// Everything else: transport errors and non-2xx statuses.
    pub failed: u64,
    /// Transport errors by kind (connect, reset, closed, timeout, body, other).
    pub errors: BTreeMap<String, u64>,
    /// Non-2xx answers by status.
    pub statuses: BTreeMap<String, u64>,
    /// Latency of answered requests (open loop: from the due time).
    pub latency_ms: Latency,
    /// Wall time from the first send to the last answer.
    pub duration_s: f64,
    /// Answers per second over that time.
    pub achieved_rps: f64,
    /// Answers per `x-tandem-replica` value.
    pub replicas: BTreeMap<String, u64>,
    /// The first failures (at most 200), each with when it was due.
    pub failures: Vec<Failure>,
}

/// One failed request.
#[derive(Serialize, Debug, Clone)]
pub struct Failure {
    /// When the request was due, milliseconds since the Unix epoch.
    pub due_unix_ms: u64,
    /// What came back: a transport error's kind, or `HTTP <status>`.
    pub what: String,
}

/// Failures kept per report.
const FAILURES_KEPT: usize = 200;

#[derive(Default)]
struct Stats {
    sent: u64,
    ok: u64,
    errors: HashMap<&'static str, u64>,
    statuses: HashMap<u16, u64>,
    lat_us: Vec<u64>,
    replicas: HashMap<HeaderValue, u64>,
    failures: Vec<(Instant, String)>,
}

impl Stats {
    fn merge(&mut self, o: Stats) {
        self.sent += o.sent;
        self.ok += o.ok;
        for (k, v) in o.errors {
            *self.errors.entry(k).or_default() += v;
        }
        for (k, v) in o.statuses {
            *self.statuses.entry(k).or_default() += v;
        }
        self.lat_us.extend(o.lat_us);
        for (k, v) in o.replicas {
            *self.replicas.entry(k).or_default() += v;
        }
        self.failures.extend(o.failures);
    }

    fn fail(&mut self, due: Instant, what: impl FnOnce() -> String) {
        if self.failures.len() < FAILURES_KEPT {
            self.failures.push((due, what()));
        }
    }
}

struct Target {
    client: Client<HttpConnector, Empty<Bytes>>,
    uri: Uri,
    headers: Vec<(HeaderName, HeaderValue)>,
    timeout: Duration,
    http2: bool,
}

impl Target {
    async fn one(&self, due: Instant, s: &mut Stats) {
        let mut req = Request::new(Empty::new());
        *req.uri_mut() = self.uri.clone();
        if self.http2 {
            *req.version_mut() = hyper::Version::HTTP_2;
        }
        for (k, v) in &self.headers {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        s.sent += 1;
        let r = tokio::time::timeout(self.timeout, async {
            let resp = self.client.request(req).await.map_err(|e| error_kind(&e))?;
            let (parts, body) = resp.into_parts();
            body.collect().await.map_err(|_| "body")?;
            Ok::<_, &'static str>(parts)
        })
        .await;
        match r {
            Err(_) => {
                *s.errors.entry("timeout").or_default() += 1;
                s.fail(due, || "timeout".into());
            }
            Ok(Err(kind)) => {
                *s.errors.entry(kind).or_default() += 1;
                s.fail(due, || kind.into());
            }
            Ok(Ok(parts)) => {
                s.lat_us.push(due.elapsed().as_micros() as u64);
                if parts.status.is_success() {
                    s.ok += 1;
                } else {
                    *s.statuses.entry(parts.status.as_u16()).or_default() += 1;
                    let who = parts.headers.get("x-tandem-replica").map(|r| String::from_utf8_lossy(r.as_bytes()).into_owned());
                    s.fail(due, || format!("HTTP {}{}", parts.status.as_u16(), who.map(|w| format!(" from {w}")).unwrap_or_default()));
                }
                if let Some(r) = parts.headers.get("x-tandem-replica") {
                    match s.replicas.get_mut(r) {
                        Some(n) => *n += 1,
                        None => {
                            s.replicas.insert(r.clone(), 1);
                        }
                    }
                }
            }
        }
    }
}

fn error_kind(e: &hyper_util::client::legacy::Error) -> &'static str {
    if e.is_connect() {
        return "connect";
    }
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(x) = src {
        if let Some(h) = x.downcast_ref::<hyper::Error>()
            && h.is_incomplete_message()
        {
            return "closed";
        }
        if let Some(io) = x.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe => "reset",
                std::io::ErrorKind::TimedOut => "timeout",
                _ => "other",
            };
        }
        src = x.source();
    }
    "other"
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

/// Checks the arguments (usage errors are the only errors of a run).
fn check(a: &LoadArgs) -> Result<(Uri, Vec<(HeaderName, HeaderValue)>)> {
    let uri: Uri = a.url.parse().with_context(|| format!("bad URL {:?}", a.url))?;
    if uri.scheme_str() != Some("http") || uri.authority().is_none() {
        bail!("URL {:?}: expected http://host:port/path", a.url);
    }
    if a.concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    if !(a.rate >= 0.0 && a.rate.is_finite()) {
        bail!("--rate must be a number of requests per second (0: closed loop)");
    }
    if a.duration.is_some_and(|d| !(d > 0.0 && d.is_finite())) {
        bail!("--duration must be a positive number of seconds");
    }
    if a.requests == Some(0) {
        bail!("--requests must be at least 1");
    }
    if !(a.timeout > 0.0 && a.timeout.is_finite()) {
        bail!("--timeout must be positive");
    }
    let mut headers = Vec::new();
    for h in &a.headers {
        let (k, v) = h.split_once(':').with_context(|| format!("--header {h:?}: expected K:V"))?;
        let k: HeaderName = k.trim().parse().with_context(|| format!("--header {h:?}: bad name"))?;
        let v: HeaderValue = v.trim().parse().with_context(|| format!("--header {h:?}: bad value"))?;
        headers.push((k, v));
    }
    Ok((uri, headers))
}

/// Runs a load test (inside a tokio runtime).
pub async fn run_load(a: &LoadArgs) -> Result<LoadReport> {
    let (uri, headers) = check(a)?;
    let mut conn = HttpConnector::new();
    conn.set_nodelay(true);
    let client = Client::builder(TokioExecutor::new()).http2_only(a.http2).pool_timer(TokioTimer::new()).build(conn);
    let t = Arc::new(Target { client, uri, headers, timeout: Duration::from_secs_f64(a.timeout), http2: a.http2 });
    let limit = a.requests.unwrap_or(if a.duration.is_some() { u64::MAX } else { 1000 });
    let start = Instant::now();
    let deadline = a.duration.map(|d| start + Duration::from_secs_f64(d));
    let mut total = Stats::default();
    if a.rate == 0.0 {
        let issued = Arc::new(AtomicU64::new(0));
        let mut workers = Vec::new();
        for _ in 0..a.concurrency {
            let (t, issued) = (t.clone(), issued.clone());
            workers.push(tokio::spawn(async move {
                let mut s = Stats::default();
                loop {
                    if deadline.is_some_and(|d| Instant::now() >= d) || issued.fetch_add(1, Relaxed) >= limit {
                        return s;
                    }
                    t.one(Instant::now(), &mut s).await;
                }
            }));
        }
        for w in workers {
            total.merge(w.await?);
        }
    } else {
        // Open loop: request i is due at start + i/rate. Each worker takes the next due slot,
        // waits for it, sends, and charges the latency from the due time; a worker that is late
        // (all busy) sends at once and its lateness is counted.
        let interval = 1.0 / a.rate;
        let next = Arc::new(AtomicU64::new(0));
        let mut workers = Vec::new();
        for _ in 0..a.concurrency {
            let (t, next) = (t.clone(), next.clone());
            workers.push(tokio::spawn(async move {
                let mut s = Stats::default();
                loop {
                    let i = next.fetch_add(1, Relaxed);
                    if i >= limit {
                        return s;
                    }
                    let due = start + Duration::from_secs_f64(i as f64 * interval);
                    if deadline.is_some_and(|d| due >= d) {
                        return s;
                    }
                    if due > Instant::now() {
                        tokio::time::sleep_until(due.into()).await;
                    }
                    t.one(due, &mut s).await;
                }
            }));
        }
        for w in workers {
            total.merge(w.await?);
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    // Instants to wall-clock time, for comparison with other processes' logs.
    let (now_i, now_w) = (Instant::now(), std::time::SystemTime::now());
    let mut failures: Vec<Failure> = std::mem::take(&mut total.failures)
        .into_iter()
        .map(|(due, what)| {
            let wall = now_w.checked_sub(now_i.saturating_duration_since(due)).unwrap_or(now_w);
            Failure { due_unix_ms: wall.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64), what }
        })
        .collect();
    failures.sort_by_key(|f| f.due_unix_ms);
    let mut lat = std::mem::take(&mut total.lat_us);
    lat.sort_unstable();
    let answered = lat.len() as u64;
    let latency_ms = Latency {
        p50: pct(&lat, 0.50),
        p90: pct(&lat, 0.90),
        p99: pct(&lat, 0.99),
        max: lat.last().map_or(0.0, |&m| m as f64 / 1000.0),
        mean: if lat.is_empty() { 0.0 } else { lat.iter().sum::<u64>() as f64 / lat.len() as f64 / 1000.0 },
    };
    Ok(LoadReport {
        url: a.url.clone(),
        mode: if a.rate == 0.0 { "closed" } else { "open" },
        concurrency: a.concurrency,
        rate_target: a.rate,
        http2: a.http2,
        sent: total.sent,
        ok: total.ok,
        failed: total.sent - total.ok,
        errors: total.errors.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        statuses: total.statuses.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        latency_ms,
        duration_s: elapsed,
        achieved_rps: if elapsed > 0.0 { answered as f64 / elapsed } else { 0.0 },
        replicas: total.replicas.into_iter().map(|(k, v)| (String::from_utf8_lossy(k.as_bytes()).into_owned(), v)).collect(),
        failures,
    })
}

/// Prints a report as a table.
pub fn print(r: &LoadReport) {
    println!("url            {}", r.url);
    match r.mode {
        "open" => println!("mode           open loop, {} req/s offered, at most {} outstanding", r.rate_target, r.concurrency),
        _ => println!("mode           closed loop, concurrency {}", r.concurrency),
    }
    println!("protocol       {}", if r.http2 { "HTTP/2 (h2c)" } else { "HTTP/1.1" });
    println!("sent           {}", r.sent);
    println!("ok (2xx)       {}", r.ok);
    let mut why: Vec<String> = r.errors.iter().map(|(k, v)| format!("{k} {v}")).collect();
    why.extend(r.statuses.iter().map(|(k, v)| format!("HTTP {k}: {v}")));
    if why.is_empty() {
        println!("failed         {}", r.failed);
    } else {
        println!("failed         {} ({})", r.failed, why.join(", "));
    }
    let l = &r.latency_ms;
    println!("latency (ms)   p50 {:.3}  p90 {:.3}  p99 {:.3}  max {:.3}  mean {:.3}", l.p50, l.p90, l.p99, l.max, l.mean);
    println!("duration       {:.2} s", r.duration_s);
    println!("achieved rate  {:.1} req/s", r.achieved_rps);
    if !r.replicas.is_empty() {
        let per: Vec<String> = r.replicas.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        println!("replicas       {}", per.join(", "));
    }
}

/// `tandem bench load`.
pub fn run(a: LoadArgs) -> Result<()> {
    check(&a)?;
    let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(threads.max(1)).enable_all().build()?;
    let r = rt.block_on(run_load(&a))?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print(&r);
    }
    Ok(())
}
