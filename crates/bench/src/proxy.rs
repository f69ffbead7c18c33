//! `tandem bench proxy`: `tandem proxy` against nginx, as round-robin reverse proxies in front of
//! the same upstream servers (`tandem __upstream` child processes), measured by the same load
//! generator: (a) throughput, closed loop at a fixed concurrency for a fixed time; (b) latency
//! p50/p99 at the same open-loop offered load, half of nginx's throughput (`--load-fraction`).
//!
//! nginx is Debian's; when it is missing and we are root it is installed with apt-get. It runs
//! as a child with its own prefix, pid and temp directories under a temp directory, and is
//! killed by pid at the end, as are the proxy and the upstreams.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::loadgen::{LoadArgs, LoadReport, run_load};

/// `tandem bench proxy` settings.
#[derive(clap::Args, Clone, Debug)]
pub struct BenchProxyArgs {
    /// Upstream servers.
    #[arg(long, default_value_t = 4)]
    pub upstreams: u32,
    /// Closed-loop concurrency of the throughput run.
    #[arg(long, default_value_t = 64)]
    pub concurrency: u32,
    /// Seconds of each measured run.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Rounds; each round measures both targets, in alternating order; figures are medians.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Most requests outstanding in the open-loop latency runs (beyond it requests go out late,
    /// and the lateness counts in their latency).
    #[arg(long, default_value_t = 64)]
    pub open_concurrency: u32,
    /// Offered load of the latency runs, as a fraction of nginx's median throughput.
    #[arg(long, default_value_t = 0.5)]
    pub load_fraction: f64,
    /// Seconds of warm-up before each target's runs.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Worker threads of `tandem proxy` (default: the machine's cores).
    #[arg(long)]
    pub proxy_threads: Option<usize>,
    /// nginx binary.
    #[arg(long, default_value = "nginx")]
    pub nginx: String,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// One target's figures (medians over the rounds).
#[derive(Serialize, Debug)]
pub struct Figures {
    /// Throughput of each round, requests/s.
    pub throughput_rounds: Vec<f64>,
    /// p99 of each round's latency run, ms.
    pub p99_rounds: Vec<f64>,
    /// Closed-loop throughput, requests/s.
    pub throughput_rps: f64,
    /// Failed requests in the throughput run.
    pub throughput_failed: u64,
    /// Latency at the fixed offered load, ms.
    pub p50_ms: f64,
    /// 99th percentile at the fixed offered load, ms.
    pub p99_ms: f64,
    /// Achieved rate of the latency run.
    pub latency_run_rps: f64,
    /// Failed requests in the latency run.
    pub latency_failed: u64,
    /// CPU time (user + system) of the proxy's processes per answered request in the latency
    /// runs (same offered load for both), microseconds: less sensitive to a busy machine than
    /// throughput.
    pub cpu_us_per_request: f64,
}

/// The benchmark's result.
#[derive(Serialize, Debug)]
pub struct Report {
    /// nginx's figures.
    pub nginx: Figures,
    /// Tandem's figures.
    pub tandem: Figures,
    /// Offered load of the latency runs, requests/s.
    pub offered_rps: f64,
    /// nginx.conf as run.
    pub nginx_conf: String,
    /// The proxy's command line.
    pub tandem_cmd: String,
    /// nginx -v.
    pub nginx_version: String,
    /// Closed-loop concurrency.
    pub concurrency: u32,
    /// Seconds per run.
    pub duration_s: f64,
    /// Upstream servers.
    pub upstreams: u32,
    /// Rounds.
    pub rounds: u32,
    /// Offered load of the latency runs / nginx's throughput.
    pub load_fraction: f64,
}

use up::Kids;

/// Reads the first stdout line of a child (`listening on ADDR`) and returns ADDR.
pub(crate) fn listening(c: &mut Child, what: &str) -> Result<String> {
    use std::io::BufRead;
    let out = c.stdout.take().context("no stdout")?;
    let mut line = String::new();
    std::io::BufReader::new(out).read_line(&mut line)?;
    let addr = line.trim().rsplit(' ').next().unwrap_or("").to_string();
    if !line.contains("listening on") || addr.is_empty() {
        bail!("{what} did not start: {line:?}");
    }
    Ok(addr)
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn find_nginx(bin: &str) -> Result<String> {
    let ok = |b: &str| Command::new(b).arg("-v").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    for b in [bin, "/usr/sbin/nginx"] {
        if ok(b) {
            return Ok(b.to_string());
        }
    }
    if nix::unistd::geteuid().is_root() {
        eprintln!("nginx not found; installing it with apt-get (nginx-light, else nginx)");
        let apt = |pkg: &str| {
            Command::new("apt-get")
                .args(["install", "-y", "-q", pkg])
                .env("DEBIAN_FRONTEND", "noninteractive")
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !apt("nginx-light") && !apt("nginx") {
            let _ = Command::new("apt-get").args(["update", "-q"]).stdout(Stdio::null()).status();
            if !apt("nginx-light") {
                apt("nginx");
            }
        }
        for b in [bin, "/usr/sbin/nginx"] {
            if ok(b) {
                return Ok(b.to_string());
            }
        }
        bail!("nginx could not be installed with apt-get (try `apt-get install nginx-light` by hand)");
    }
    bail!("nginx is not installed: run `sudo apt-get install -y nginx-light` (or pass --nginx PATH)")
}

fn nginx_conf(dir: &Path, port: u16, ups: &[String]) -> String {
    let servers: String = ups.iter().map(|u| format!("        server {u};\n")).collect();
    let d = dir.display();
    format!(
        "worker_processes auto;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
daemon off;
events {{
    worker_connections 4096;
}}
http {{
    access_log off;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    keepalive_requests 100000;
    upstream backends {{
{servers}        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{port} reuseport;
        location /s/bench/ {{
            proxy_pass http://backends/;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }}
    }}
}}
"
    )
}

async fn measure(url: &str, a: &BenchProxyArgs, offered: Option<f64>) -> Result<LoadReport> {
    let la = LoadArgs {
        url: url.to_string(),
        requests: None,
        rate: offered.unwrap_or(0.0),
        concurrency: if offered.is_some() { a.open_concurrency } else { a.concurrency },
        duration: Some(a.duration),
        http2: false,
        headers: Vec::new(),
        timeout: 10.0,
        threads: None,
        json: false,
    };
    run_load(&la).await
}

async fn warm(url: &str, a: &BenchProxyArgs) -> Result<()> {
    if a.warmup > 0.0 {
        let w = BenchProxyArgs { duration: a.warmup, ..a.clone() };
        let r = measure(url, &w, None).await?;
        if r.ok == 0 {
            bail!("no successful request to {url} during warm-up: {:?} {:?}", r.errors, r.statuses);
        }
    }
    Ok(())
}

const NAMES: [&str; 2] = ["nginx", "tandem"];

/// User + system CPU time of processes, in clock ticks (USER_HZ, 100 per second on Linux).
fn cpu_ticks(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
        .map(|st| {
            // Fields after the command name (which is in parentheses and may hold spaces).
            let rest = st.rsplit_once(')').map_or("", |x| x.1);
            let f: Vec<&str> = rest.split_whitespace().collect();
            // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
            f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        })
        .sum()
}

/// A process and its direct children (nginx's master and workers).
fn with_children(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            let Ok(st) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { continue };
            let ppid = st.rsplit_once(')').and_then(|x| x.1.split_whitespace().nth(1)).and_then(|v| v.parse::<u32>().ok());
            if ppid == Some(pid) {
                out.push(p);
            }
        }
    }
    out
}

/// Which target goes first alternates between rounds.
fn order(round: u32) -> [usize; 2] {
    if round.is_multiple_of(2) { [0, 1] } else { [1, 0] }
}

fn median(v: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = v.collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Runs the benchmark.
pub fn run(a: BenchProxyArgs) -> Result<Report> {
    if !(a.load_fraction > 0.0 && a.load_fraction <= 1.0) {
        bail!("--load-fraction must be in (0, 1]");
    }
    if a.upstreams == 0 || a.concurrency == 0 || a.open_concurrency == 0 || a.rounds == 0 || a.duration.is_nan() || a.duration <= 0.0 {
        bail!("--upstreams, --concurrency, --open-concurrency, --rounds and --duration must be positive");
    }
    let nginx = find_nginx(&a.nginx)?;
    let nginx_version = Command::new(&nginx).arg("-v").output().map(|o| String::from_utf8_lossy(&o.stderr).trim().to_string())?;
    let exe = std::env::current_exe()?;
    let dir = std::env::temp_dir().join(format!("tandem-bench-proxy-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut kids = Kids(Vec::new());
    let mut ups = Vec::new();
    for i in 0..a.upstreams {
        let mut c = Command::new(&exe)
            .args([crate::upstream::UPSTREAM_CMD, "--port", "0", "--name", &format!("up{i}")])
            .stdout(Stdio::piped())
            .spawn()
            .context("starting an upstream")?;
        let addr = listening(&mut c, "an upstream");
        kids.0.push(c);
        ups.push(addr?);
    }
    // nginx.
    let nport = free_port()?;
    let conf = nginx_conf(&dir, nport, &ups);
    let conf_path: PathBuf = dir.join("nginx.conf");
    std::fs::write(&conf_path, &conf)?;
    let ng = Command::new(&nginx)
        .args([
            "-p",
            &dir.display().to_string(),
            "-c",
            &conf_path.display().to_string(),
            "-e",
            &dir.join("error.log").display().to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting nginx")?;
    let ng_pid = ng.id();
    kids.0.push(ng);
    // Tandem.
    let threads = a.proxy_threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let spec = format!("bench={}", ups.join(","));
    let targs = vec![
        "proxy".to_string(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--threads".into(),
        threads.to_string(),
        "--static".into(),
        spec,
    ];
    let tandem_cmd = format!("tandem {}", targs.join(" "));
    let mut tp = Command::new(&exe).args(&targs).stdout(Stdio::piped()).spawn().context("starting tandem proxy")?;
    let taddr = listening(&mut tp, "tandem proxy");
    let tp_pid = tp.id();
    kids.0.push(tp);
    let taddr = taddr?;

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let nurl = format!("http://127.0.0.1:{nport}/s/bench/hello");
    let turl = format!("http://{taddr}/s/bench/hello");
    let report = rt.block_on(async {
        // Wait for nginx to answer.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", nport)).await.is_ok() {
                break;
            }
            if Instant::now() > deadline {
                bail!("nginx did not start listening on port {nport}; see {}", dir.join("error.log").display());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!("throughput runs: closed loop, concurrency {}, {} s each, {} rounds", a.concurrency, a.duration, a.rounds);
        warm(&nurl, &a).await?;
        warm(&turl, &a).await?;
        let urls = [nurl.as_str(), turl.as_str()];
        let mut tp: [Vec<LoadReport>; 2] = [Vec::new(), Vec::new()];
        for round in 0..a.rounds {
            for k in order(round) {
                let r = measure(urls[k], &a, None).await?;
                eprintln!("  round {} {:6} {:.0} req/s ({} failed)", round + 1, NAMES[k], r.achieved_rps, r.failed);
                tp[k].push(r);
            }
        }
        let offered = (median(tp[0].iter().map(|r| r.achieved_rps)) * a.load_fraction).round().max(1.0);
        eprintln!("latency runs: open loop at {offered} req/s ({} of nginx's median throughput)", a.load_fraction);
        let mut lat: [Vec<LoadReport>; 2] = [Vec::new(), Vec::new()];
        let mut cpu: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        for round in 0..a.rounds {
            for k in order(round) {
                // nginx's workers are children of its master; both are counted.
                let pids = if k == 0 { with_children(ng_pid) } else { vec![tp_pid] };
                let before = cpu_ticks(&pids);
                let r = measure(urls[k], &a, Some(offered)).await?;
                let ticks = cpu_ticks(&pids) - before;
                cpu[k].push(ticks as f64 * 10_000.0 / (r.ok.max(1)) as f64);
                eprintln!(
                    "  round {} {:6} p50 {:.3} ms p99 {:.3} ms ({:.0} req/s, {} failed)",
                    round + 1,
                    NAMES[k],
                    r.latency_ms.p50,
                    r.latency_ms.p99,
                    r.achieved_rps,
                    r.failed
                );
                lat[k].push(r);
            }
        }
        let fig = |tp: &[LoadReport], l: &[LoadReport], cpu: &[f64]| Figures {
            cpu_us_per_request: median(cpu.iter().copied()),
            throughput_rounds: tp.iter().map(|r| r.achieved_rps).collect(),
            p99_rounds: l.iter().map(|r| r.latency_ms.p99).collect(),
            throughput_rps: median(tp.iter().map(|r| r.achieved_rps)),
            throughput_failed: tp.iter().map(|r| r.failed).sum(),
            p50_ms: median(l.iter().map(|r| r.latency_ms.p50)),
            p99_ms: median(l.iter().map(|r| r.latency_ms.p99)),
            latency_run_rps: median(l.iter().map(|r| r.achieved_rps)),
            latency_failed: l.iter().map(|r| r.failed).sum(),
        };
        let (n_tp, t_tp) = (&tp[0], &tp[1]);
        let (n_l, t_l) = (&lat[0], &lat[1]);
        Ok(Report {
            nginx: fig(n_tp, n_l, &cpu[0]),
            tandem: fig(t_tp, t_l, &cpu[1]),
            offered_rps: offered,
            nginx_conf: conf.clone(),
            tandem_cmd: tandem_cmd.clone(),
            nginx_version: nginx_version.clone(),
            concurrency: a.concurrency,
            duration_s: a.duration,
            upstreams: a.upstreams,
            rounds: a.rounds,
            load_fraction: a.load_fraction,
        })
    });
    drop(kids);
    let _ = std::fs::remove_dir_all(&dir);
    report
}

/// Prints the configurations and the table.
pub fn print(r: &Report) {
    println!("# nginx ({}) configuration\n{}", r.nginx_version, r.nginx_conf);
    println!("# Tandem\n{}\n", r.tandem_cmd);
    println!(
        "{} upstreams; medians of {} rounds (targets in alternating order); throughput: closed loop, concurrency {}, {} s per run; latency: open loop at {} req/s offered ({} of nginx's throughput)\n",
        r.upstreams, r.rounds, r.concurrency, r.duration_s, r.offered_rps, r.load_fraction
    );
    println!("| figure | nginx | Tandem | Tandem / nginx |");
    println!("|---|---|---|---|");
    let (n, t) = (&r.nginx, &r.tandem);
    println!("| throughput (req/s) | {:.0} | {:.0} | {:.2} |", n.throughput_rps, t.throughput_rps, t.throughput_rps / n.throughput_rps);
    println!("| p50 at {} req/s (ms) | {:.3} | {:.3} | {:.2} |", r.offered_rps, n.p50_ms, t.p50_ms, t.p50_ms / n.p50_ms);
    println!("| p99 at {} req/s (ms) | {:.3} | {:.3} | {:.2} |", r.offered_rps, n.p99_ms, t.p99_ms, t.p99_ms / n.p99_ms);
    println!(
        "| CPU per request at {} req/s (µs) | {:.1} | {:.1} | {:.2} |",
        r.offered_rps,
        n.cpu_us_per_request,
        t.cpu_us_per_request,
        t.cpu_us_per_request / n.cpu_us_per_request
    );
    println!("| failed requests (all runs) | {} | {} | |", n.throughput_failed + n.latency_failed, t.throughput_failed + t.latency_failed);
    let list = |v: &[f64]| v.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(", ");
    let list3 = |v: &[f64]| v.iter().map(|x| format!("{x:.3}")).collect::<Vec<_>>().join(", ");
    println!(
        "\nper round: throughput nginx [{}], Tandem [{}]; p99 nginx [{}], Tandem [{}]",
        list(&n.throughput_rounds),
        list(&t.throughput_rounds),
        list3(&n.p99_rounds),
        list3(&t.p99_rounds)
    );
}
