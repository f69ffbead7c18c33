//! `tandem bench llm --workload fairness`: a quiet tenant's time to first token alone and beside
//! a noisy tenant of equal weight that sends `--noisy-times` (10) its rate, past saturation,
//! through one `tandem proxy` whose `llm` service has a per-replica limit and a fair queue
//! (`--max-concurrency`, default 24: three quarters of the stand-in's batch of 32, leaving room
//! for tenants under their share, whom the limit does not hold back; `--max-wait`, default 2 s;
//! tenants `quiet` and `noisy` by the `x-tenant` header).
//!
//! The run: the replicas' capacity is measured as `bench llm` does (the `unique` workload:
//! 500-token prompts, 100 tokens asked; `--capacity` skips it). Phase 1: fresh replicas and
//! proxy, the quiet tenant alone, seeded Poisson arrivals at `--quiet-fraction` (0.2) of the
//! capacity until `--quiet-requests` (2,000) have been sent. Phase 2: fresh replicas and
//! proxy, the same quiet arrivals and, at the same time, the noisy tenant's at `--noisy-times`
//! the quiet rate (2 times the capacity with the defaults) for as long. Requests are the
//! `unique` workload's, streamed; latencies from each request's due time, as in `bench llm`. A
//! 429 must carry `Retry-After` (one without is counted failed); `shed` is 429s and 503s;
//! timeouts (60 s) and other errors are failed. `--duration` and `--requests` are not used.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use up::Kids;

use crate::llm::{BenchLlmArgs, Kind, PolicyFigures, capacity, figures, open_loop, start_replicas};

/// One tenant in one phase.
#[derive(Serialize, Debug)]
pub struct Row {
    /// `alone` or `beside noisy` (the quiet tenant), `beside quiet` (the noisy one).
    pub run: String,
    /// The tenant.
    pub tenant: String,
    /// Mean wait in the proxy's fair queue of its requests that queued, ms (from the proxy's
    /// metrics), and how many queued.
    pub queue_wait_mean_ms: f64,
    /// Its requests that waited in the queue and were served.
    pub queued: u64,
    /// Its figures (`balance` is `llm`).
    #[serde(flatten)]
    pub figures: PolicyFigures,
}

/// (Mean queue wait in ms, queued requests served) of a tenant, from the proxy's metrics text.
fn queue_wait(metrics: &str, tenant: &str) -> (f64, u64) {
    let get = |name: &str| {
        let key = format!("{name}{{service=\"bench\",tenant=\"{tenant}\"}} ");
        metrics.lines().find_map(|l| l.strip_prefix(&key)).and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(0.0)
    };
    let (sum, n) = (get("tandem_proxy_tenant_queue_wait_seconds_sum"), get("tandem_proxy_tenant_queue_wait_seconds_count"));
    (if n > 0.0 { sum * 1000.0 / n } else { 0.0 }, n as u64)
}

async fn proxy_metrics(base: &str) -> String {
    use http_body_util::BodyExt;
    let c: hyper_util::client::legacy::Client<_, http_body_util::Empty<bytes::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(hyper_util::client::legacy::connect::HttpConnector::new());
    let Ok(uri) = format!("http://{base}/_tandem/metrics").parse() else { return String::new() };
    match c.get(uri).await {
        Ok(r) => r.into_body().collect().await.map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned()).unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// The benchmark's result.
#[derive(Serialize, Debug)]
pub struct Report {
    /// `fairness`.
    pub workload: String,
    /// Replicas.
    pub replicas: u32,
    /// Capacity, requests/s (measured, or given).
    pub capacity_rps: f64,
    /// Whether the capacity was measured.
    pub capacity_measured: bool,
    /// The proxy's per-replica limit.
    pub max_concurrency: u32,
    /// The proxy's wait bound.
    pub max_wait: String,
    /// The proxy's prefill pace (`None`: its default).
    pub prefill_pace: Option<u32>,
    /// The quiet tenant's rate, requests/s.
    pub quiet_rps: f64,
    /// The noisy tenant's rate, requests/s.
    pub noisy_rps: f64,
    /// Seconds of arrivals per phase.
    pub phase_s: f64,
    /// Seed.
    pub seed: u64,
    /// Quiet alone, quiet beside noisy, noisy beside quiet.
    pub policies: Vec<Row>,
    /// The quiet tenant's TTFT p99 beside the noisy one over its p99 alone.
    pub quiet_ttft_p99_ratio: f64,
}

/// Starts fresh replicas and a proxy with the fair queue; returns the proxy's address and the
/// completions URL.
fn setup(exe: &std::path::Path, a: &BenchLlmArgs, kids: &mut Kids) -> Result<(String, String)> {
    let reps = start_replicas(exe, a.replicas, kids)?;
    let spec = format!("bench:llm={}", reps.join(","));
    let limit = a.max_concurrency.to_string();
    let mut px = Command::new(exe)
        .args(["proxy", "--listen", "127.0.0.1:0", "--threads", &a.proxy_threads.to_string(), "--static", &spec])
        .args([
            "--max-concurrency",
            &limit,
            "--max-wait",
            &a.max_wait,
            "--tenant-header",
            "x-tenant",
            "--tenant",
            "quiet",
            "--tenant",
            "noisy",
        ])
        .args(a.prefill_pace.iter().flat_map(|p| ["--prefill-pace".to_string(), p.to_string()]))
        .stdout(Stdio::piped())
        .spawn()
        .context("starting tandem proxy")?;
    let addr = crate::proxy::listening(&mut px, "tandem proxy");
    kids.0.push(px);
    let addr = addr?;
    let url = format!("http://{addr}/s/bench/v1/completions");
    Ok((addr, url))
}

/// Runs the benchmark.
pub fn run(a: BenchLlmArgs) -> Result<Report> {
    if a.replicas == 0 {
        bail!("--replicas must be at least 1");
    }
    if !(a.quiet_fraction > 0.0 && a.quiet_fraction.is_finite()) {
        bail!("--quiet-fraction must be positive");
    }
    if !(a.noisy_times > 0.0 && a.noisy_times.is_finite()) {
        bail!("--noisy-times must be positive");
    }
    if a.quiet_requests == 0 || a.max_concurrency == 0 {
        bail!("--quiet-requests and --max-concurrency must be at least 1");
    }
    if a.capacity.is_some_and(|c| !(c > 0.0 && c.is_finite())) {
        bail!("--capacity must be a positive rate");
    }
    let exe = std::env::current_exe()?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let (cap, measured) = match a.capacity {
        Some(c) => (c, false),
        None => {
            let mut kids = Kids(Vec::new());
            let reps = start_replicas(&exe, a.replicas, &mut kids)?;
            let window = Duration::from_secs(3);
            let c = rt.block_on(capacity(&reps, Kind::Unique, a.seed, Duration::from_millis(1500), window))?;
            eprintln!("capacity: {c:.1} requests/s over {} replicas", a.replicas);
            (c, true)
        }
    };
    let quiet = cap * a.quiet_fraction;
    let noisy = quiet * a.noisy_times;
    // Long enough for the quiet requests asked (arrivals stop at the count).
    let phase = a.quiet_requests as f64 / quiet * 1.2 + 1.0;
    let (qseed, nseed) = (a.seed, a.seed ^ 0x9e37_79b9_7f4a_7c15);

    eprintln!("phase 1: quiet tenant alone at {quiet:.1} requests/s, {} requests", a.quiet_requests);
    let alone = {
        let mut kids = Kids(Vec::new());
        let (base, url) = setup(&exe, &a, &mut kids)?;
        let t0 = Instant::now();
        let outs = rt.block_on(open_loop(&url, Kind::Unique, qseed, quiet, phase, a.quiet_requests, Some("quiet")));
        let f = figures("llm", &outs, t0.elapsed().as_secs_f64(), 0.0);
        let m = rt.block_on(proxy_metrics(&base));
        (f, queue_wait(&m, "quiet"))
    };
    eprintln!("phase 2: the same, beside a noisy tenant at {noisy:.1} requests/s");
    let (beside, loud, m) = {
        let mut kids = Kids(Vec::new());
        let (base, url) = setup(&exe, &a, &mut kids)?;
        let t0 = Instant::now();
        let (q, n) = rt.block_on(async {
            tokio::join!(
                open_loop(&url, Kind::Unique, qseed, quiet, phase, a.quiet_requests, Some("quiet")),
                open_loop(&url, Kind::Unique, nseed, noisy, phase, u64::MAX, Some("noisy")),
            )
        });
        let wall = t0.elapsed().as_secs_f64();
        let m = rt.block_on(proxy_metrics(&base));
        (figures("llm", &q, wall, 0.0), figures("llm", &n, wall, 0.0), m)
    };
    let ((alone, alone_wait), quiet_wait, noisy_wait) = (alone, queue_wait(&m, "quiet"), queue_wait(&m, "noisy"));
    let ratio = if alone.ttft_p99_ms > 0.0 { beside.ttft_p99_ms / alone.ttft_p99_ms } else { 0.0 };
    let row = |run: &str, tenant: &str, figures: PolicyFigures, w: (f64, u64)| Row {
        run: run.into(),
        tenant: tenant.into(),
        queue_wait_mean_ms: w.0,
        queued: w.1,
        figures,
    };
    Ok(Report {
        workload: "fairness".into(),
        replicas: a.replicas,
        capacity_rps: cap,
        capacity_measured: measured,
        max_concurrency: a.max_concurrency,
        max_wait: a.max_wait.clone(),
        prefill_pace: a.prefill_pace,
        quiet_rps: quiet,
        noisy_rps: noisy,
        phase_s: phase,
        seed: a.seed,
        policies: vec![
            row("alone", "quiet", alone, alone_wait),
            row("beside noisy", "quiet", beside, quiet_wait),
            row("beside quiet", "noisy", loud, noisy_wait),
        ],
        quiet_ttft_p99_ratio: ratio,
    })
}

/// Prints the table: one column per tenant and phase.
pub fn print(r: &Report) {
    println!(
        "fairness: {} stand-in replicas, capacity {:.1} req/s ({}); proxy limit {} per replica, max_wait {}, prefill pace {}; quiet tenant {:.1} req/s, noisy tenant {:.1} req/s (equal weights), Poisson, seed {}\n",
        r.replicas,
        r.capacity_rps,
        if r.capacity_measured { "measured" } else { "given" },
        r.max_concurrency,
        r.max_wait,
        r.prefill_pace.map_or("1 (default)".to_string(), |p| p.to_string()),
        r.quiet_rps,
        r.noisy_rps,
        r.seed
    );
    let head: Vec<String> = r.policies.iter().map(|p| format!("{} {}", p.tenant, p.run)).collect();
    println!("| figure | {} |", head.join(" | "));
    println!("|---|{}", "---|".repeat(head.len()));
    let row = |name: &str, f: &dyn Fn(&Row) -> String| {
        let cells: Vec<String> = r.policies.iter().map(f).collect();
        println!("| {name} | {} |", cells.join(" | "));
    };
    row("requests", &|p| p.figures.requests.to_string());
    row("completed", &|p| p.figures.ok.to_string());
    row("TTFT p50 (ms)", &|p| format!("{:.1}", p.figures.ttft_p50_ms));
    row("TTFT p99 (ms)", &|p| format!("{:.1}", p.figures.ttft_p99_ms));
    row("time per output token p50 (ms)", &|p| format!("{:.2}", p.figures.tpot_p50_ms));
    row("end-to-end p99 (ms)", &|p| format!("{:.0}", p.figures.e2e_p99_ms));
    row("throughput (req/s)", &|p| format!("{:.1}", p.figures.throughput_rps));
    row("queued in the proxy, served", &|p| p.queued.to_string());
    row("mean wait in the queue (ms)", &|p| format!("{:.1}", p.queue_wait_mean_ms));
    row("shed (429 with Retry-After, 503)", &|p| p.figures.shed.to_string());
    row("failed (timeouts included)", &|p| p.figures.failed.to_string());
    println!("\nquiet tenant's TTFT p99 beside the noisy tenant / alone: {:.2}", r.quiet_ttft_p99_ratio);
}
