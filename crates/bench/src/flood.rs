//! `tandem bench flood` and its attacker, `tandem __flood` (SECURITY.md, F1-F3): one local
//! user tries many connections to the controller, holds them with half-sent requests and
//! floods it with requests, from several processes, while another user submits and queries
//! and agents heartbeat. The harness runs the same victim and heartbeat loops once without the
//! attack and once under it, and reports their latencies side by side, with the attack's
//! rates and what the controller's `/metrics` says it let the attacker hold.
//!
//! The attacker (`tandem __flood`, run as the attacking user) makes `--attempts` connections,
//! at most `--hold` at once, paced at `--rate` a second: on the Unix socket each writes half a
//! request head and waits for the controller to answer (a refusal) or close it; on TCP
//! (`--tcp`) each sends nothing. Beside them, `--requests` connections send `GET /v1/jobs` in
//! a loop. Once its attempts are made it stops the request flood, waits (at most 60 s) for the
//! controller to close what it holds, prints one JSON line ([`AttackReport`]) and exits.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The attacker's hidden subcommand.
pub const FLOOD_CMD: &str = "__flood";

/// What one attacker process did.
#[derive(Serialize, Deserialize, Debug, Default, Clone)]
pub struct AttackReport {
    /// Connection attempts made.
    pub attempts: u64,
    /// Answered with a refusal (429 or 503) at once.
    pub refused: u64,
    /// Connects that failed (a full listen backlog: EAGAIN; out of descriptors).
    pub connect_failed: u64,
    /// Served (not refused) connections the controller closed itself (deadlines).
    pub closed_by_server: u64,
    /// Served connections still open when the attacker gave up waiting (60 s).
    pub outlived: u64,
    /// Requests of the request flood answered 2xx.
    pub requests_ok: u64,
    /// Requests of the request flood refused or failed.
    pub requests_failed: u64,
    /// Seconds the attack took.
    pub seconds: f64,
}

#[derive(Default)]
struct Counts {
    attempts: AtomicU64,
    refused: AtomicU64,
    connect_failed: AtomicU64,
    closed_by_server: AtomicU64,
    requests_ok: AtomicU64,
    requests_failed: AtomicU64,
}

/// What a held connection came to.
enum Held {
    Refused,
    Closed,
}

/// The half request a held Unix connection sends.
const HALF: &[u8] = b"POST /v1/jobs HTTP/1.1\r\nHost: tandem\r\nContent-Type: application/json\r\nContent-Le";

async fn hold_unix(path: &Path) -> std::io::Result<Held> {
    let mut s = tokio::net::UnixStream::connect(path).await?;
    let _ = s.write_all(HALF).await;
    wait_answer(&mut s).await
}

async fn hold_tcp(addr: std::net::SocketAddr) -> std::io::Result<Held> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    wait_answer(&mut s).await
}

async fn wait_answer<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> std::io::Result<Held> {
    let mut buf = [0u8; 512];
    match s.read(&mut buf).await {
        Ok(n) if n >= 12 && (buf.starts_with(b"HTTP/1.1 429") || buf.starts_with(b"HTTP/1.1 503")) => Ok(Held::Refused),
        _ => Ok(Held::Closed),
    }
}

/// One request-flood connection: `GET /v1/jobs` in a loop over one kept-alive connection,
/// reconnecting when it is closed, until `stop`.
async fn request_flood(path: PathBuf, c: Arc<Counts>, stop: Arc<AtomicBool>) {
    use http_body_util::{BodyExt, Empty};
    while !stop.load(Relaxed) {
        let Ok(s) = tokio::net::UnixStream::connect(&path).await else {
            c.requests_failed.fetch_add(1, Relaxed);
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let Ok((mut tx, conn)) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(s)).await else { continue };
        tokio::spawn(async move {
            let _ = conn.await;
        });
        while !stop.load(Relaxed) {
            let req = hyper::Request::get("/v1/jobs").header("host", "tandem").body(Empty::<bytes::Bytes>::new()).expect("a request");
            let ok = match tx.send_request(req).await {
                Ok(r) => {
                    let good = r.status().is_success();
                    good && r.into_body().collect().await.is_ok()
                }
                Err(_) => false,
            };
            if ok {
                c.requests_ok.fetch_add(1, Relaxed);
            } else {
                c.requests_failed.fetch_add(1, Relaxed);
                tokio::time::sleep(Duration::from_millis(10)).await;
                break;
            }
        }
    }
}

/// `tandem __flood --unix PATH | --tcp ADDR [--attempts N] [--hold N] [--rate R] [--requests N]`.
pub fn attacker(args: &[String]) -> Result<()> {
    let (mut unix, mut tcp) = (None::<PathBuf>, None::<std::net::SocketAddr>);
    let (mut attempts, mut hold, mut rate, mut requests) = (1000u64, 500usize, 0f64, 0usize);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().with_context(|| format!("{a} needs a value"))?;
        match a.as_str() {
            "--unix" => unix = Some(v.into()),
            "--tcp" => tcp = Some(v.parse().context("--tcp")?),
            "--attempts" => attempts = v.parse().context("--attempts")?,
            "--hold" => hold = v.parse().context("--hold")?,
            "--rate" => rate = v.parse().context("--rate")?,
            "--requests" => requests = v.parse().context("--requests")?,
            other => bail!("unknown option {other}"),
        }
    }
    if unix.is_none() == tcp.is_none() {
        bail!("give one of --unix PATH and --tcp ADDR");
    }
    exec::raise_nofile(1 << 20);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let report = rt.block_on(async move {
        let started = Instant::now();
        let c = Arc::new(Counts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut flood = Vec::new();
        if let Some(p) = &unix {
            for _ in 0..requests {
                flood.push(tokio::spawn(request_flood(p.clone(), c.clone(), stop.clone())));
            }
        }
        let slots = Arc::new(tokio::sync::Semaphore::new(hold.max(1)));
        let open = Arc::new(AtomicU64::new(0));
        let pace = (rate > 0.0).then(|| Duration::from_secs_f64(1.0 / rate));
        for i in 0..attempts {
            if let Some(p) = pace {
                tokio::time::sleep_until((started + p.mul_f64(i as f64)).into()).await;
            }
            let permit = slots.clone().acquire_owned().await.expect("open semaphore");
            c.attempts.fetch_add(1, Relaxed);
            let (c, open, unix) = (c.clone(), open.clone(), unix.clone());
            open.fetch_add(1, Relaxed);
            tokio::spawn(async move {
                let r = match (&unix, tcp) {
                    (Some(p), _) => hold_unix(p).await,
                    (None, Some(a)) => hold_tcp(a).await,
                    (None, None) => unreachable!("checked above"),
                };
                match r {
                    Ok(Held::Refused) => c.refused.fetch_add(1, Relaxed),
                    Ok(Held::Closed) => c.closed_by_server.fetch_add(1, Relaxed),
                    Err(_) => c.connect_failed.fetch_add(1, Relaxed),
                };
                open.fetch_sub(1, Relaxed);
                drop(permit);
            });
        }
        stop.store(true, Relaxed);
        let wait = Instant::now() + Duration::from_secs(60);
        while open.load(Relaxed) > 0 && Instant::now() < wait {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for f in flood {
            f.abort();
        }
        AttackReport {
            attempts: c.attempts.load(Relaxed),
            refused: c.refused.load(Relaxed),
            connect_failed: c.connect_failed.load(Relaxed),
            closed_by_server: c.closed_by_server.load(Relaxed),
            outlived: open.load(Relaxed),
            requests_ok: c.requests_ok.load(Relaxed),
            requests_failed: c.requests_failed.load(Relaxed),
            seconds: started.elapsed().as_secs_f64(),
        }
    });
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// `tandem bench flood` arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct FloodArgs {
    /// Seconds of each run (unloaded, then under attack).
    #[arg(long, default_value_t = 60.0)]
    pub duration: f64,
    /// Connection attempts of the attack, in all.
    #[arg(long, default_value_t = 50_000)]
    pub attempts: u64,
    /// Attacker processes.
    #[arg(long, default_value_t = 3)]
    pub processes: u32,
    /// Request-flood connections per attacker process.
    #[arg(long, default_value_t = 32)]
    pub requests: usize,
    /// Half-sent connections each attacker process tries to hold at once.
    #[arg(long, default_value_t = 2000)]
    pub hold: usize,
    /// Node agents (real ones, running the victim's jobs) and heartbeat probes (simulated
    /// agents on drained nodes, whose heartbeats are timed), each.
    #[arg(long, default_value_t = 3)]
    pub agents: u32,
    /// The user who submits and queries.
    #[arg(long, default_value = "tandem-alice")]
    pub victim: String,
    /// The user who attacks.
    #[arg(long, default_value = "tandem-mallory")]
    pub attacker: String,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Latencies of one kind of operation in one run, milliseconds.
#[derive(Serialize, Debug, Default, Clone)]
pub struct Lat {
    /// Samples.
    pub n: usize,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Worst.
    pub max: f64,
    /// Failures.
    pub failed: usize,
}

fn lat(mut v: Vec<f64>, failed: usize) -> Lat {
    v.sort_by(f64::total_cmp);
    let q = |p: f64| if v.is_empty() { 0.0 } else { v[((v.len() - 1) as f64 * p).round() as usize] };
    Lat { n: v.len(), p50: q(0.5), p99: q(0.99), max: v.last().copied().unwrap_or(0.0), failed }
}

/// One run's figures.
#[derive(Serialize, Debug, Default, Clone)]
pub struct Run {
    /// Seconds.
    pub seconds: f64,
    /// The victim's `sbatch`, command wall time.
    pub sbatch: Lat,
    /// The victim's `squeue --me`, command wall time.
    pub squeue: Lat,
    /// Heartbeats of the probes (HTTP/2 over TLS, no long poll).
    pub heartbeat: Lat,
    /// Times a node was seen DOWN (polled every 500 ms).
    pub down_seen: u64,
}

/// What `tandem bench flood` measured.
#[derive(Serialize, Debug, Default)]
pub struct FloodReport {
    /// Without the attack.
    pub unloaded: Run,
    /// Under it.
    pub attack: Run,
    /// The attacker processes' reports, summed.
    pub attacker: AttackReport,
    /// Attacker processes.
    pub processes: u32,
    /// `tandem_user_connections_peak` after the attack: the most one ordinary user held.
    pub peak_user_connections: u64,
    /// `tandem_user_connections_limit`.
    pub limit: u64,
    /// `tandem_connections_refused_total`, both reasons.
    pub refused: u64,
    /// The most descriptors the controller held (`tandem_open_files`, sampled every 500 ms).
    pub max_open_files: u64,
    /// The controller's descriptor limit.
    pub open_files_limit: u64,
}

fn id_of(name: &str, flag: &str) -> Result<u32> {
    let o = Command::new("id").args([flag, name]).output().context("running id")?;
    if !o.status.success() {
        bail!("no user {name} (useradd --no-create-home {name})");
    }
    String::from_utf8_lossy(&o.stdout).trim().parse().context("id's output")
}

/// A command as `user`, through setpriv.
fn as_user(user: &str, prog: &Path) -> Result<Command> {
    let mut c = Command::new("setpriv");
    c.args(["--reuid", &id_of(user, "-u")?.to_string(), "--regid", &id_of(user, "-g")?.to_string(), "--init-groups"]).arg(prog);
    Ok(c)
}

/// A metric's value in Prometheus text (the first sample of that name).
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (k, v) = l.rsplit_once(' ')?;
        (k == name).then(|| v.parse().ok()).flatten()
    })
}

/// The timed heartbeat probes: `n` simulated agents on drained nodes, each heartbeating
/// every 500 ms (no long poll) over one HTTP/2 connection, until `stop`; their latencies.
async fn probes(pool: Arc<client::H2Pool>, creds: Vec<(String, String)>, stop: Arc<AtomicBool>) -> (Vec<f64>, usize) {
    let mut tasks = Vec::new();
    for (i, (name, cred)) in creds.into_iter().enumerate() {
        let (pool, stop) = (pool.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let (mut v, mut failed) = (Vec::new(), 0usize);
            let bearer = format!("Bearer {cred}");
            let mut ack = 0;
            while !stop.load(Relaxed) {
                let hb = wire::Heartbeat {
                    node: name.clone(),
                    ack,
                    running: Vec::new(),
                    exits: Vec::new(),
                    wait_ms: 0,
                    replicas: Vec::new(),
                    usage: Vec::new(),
                    pulling: Vec::new(),
                    drain: None,
                    health_failed: None,
                    health_down: false,
                    health_passed: false,
                    frozen: Vec::new(),
                    started: Vec::new(),
                };
                let t = Instant::now();
                match pool
                    .send(i, "POST", "/v1/agent/heartbeat", Some(&hb), &[("authorization", bearer.as_str())])
                    .await
                    .and_then(|r| r.json::<wire::Orders>())
                {
                    Ok(o) => {
                        v.push(t.elapsed().as_secs_f64() * 1000.0);
                        ack = o.orders.iter().map(|(s, _)| *s).max().unwrap_or(ack).max(ack);
                    }
                    Err(_) => failed += 1,
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            (v, failed)
        }));
    }
    let (mut all, mut failed) = (Vec::new(), 0);
    for t in tasks {
        if let Ok((v, f)) = t.await {
            all.extend(v);
            failed += f;
        }
    }
    (all, failed)
}

struct Setup {
    exe: PathBuf,
    shims: PathBuf,
    sock: String,
    victim_dir: PathBuf,
    root: client::Target,
}

impl Setup {
    /// One victim command: its wall time in ms, or `None` when it failed.
    fn victim(&self, a: &FloodArgs, args: &[&str]) -> Result<Option<f64>> {
        let mut c = as_user(&a.victim, &self.shims.join(args[0]))?;
        c.args(&args[1..])
            .current_dir(&self.victim_dir)
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", self.shims.display()))
            .env("TANDEM_SERVER", format!("unix://{}", self.sock))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let t = Instant::now();
        let ok = c.status().context("running the victim's command")?.success();
        Ok(ok.then(|| t.elapsed().as_secs_f64() * 1000.0))
    }
}

/// One run: the victim's loop (sbatch, then squeue --me, back to back) and the probes for
/// `secs`, with the node states and the controller's descriptors polled.
fn one_run(
    s: &Setup,
    a: &FloodArgs,
    rt: &tokio::runtime::Runtime,
    pool: Arc<client::H2Pool>,
    creds: Vec<(String, String)>,
    secs: f64,
    fds: &mut u64,
) -> Result<Run> {
    let stop = Arc::new(AtomicBool::new(false));
    let hb = rt.spawn(probes(pool, creds, stop.clone()));
    let (st2, root) = (stop.clone(), s.root.clone());
    let watch = rt.spawn(async move {
        let (mut down, mut max_fds) = (0u64, 0u64);
        while !st2.load(Relaxed) {
            if let Ok(r) = client::send(&root, "GET", "/v1/nodes", None::<&()>, &[]).await
                && let Ok(nodes) = r.json::<Vec<wire::NodeInfo>>()
            {
                down += nodes.iter().filter(|n| n.state.to_ascii_lowercase().contains("down")).count() as u64;
            }
            if let Ok(r) = client::send(&root, "GET", "/metrics", None::<&()>, &[]).await {
                let m = String::from_utf8_lossy(&r.body).into_owned();
                max_fds = max_fds.max(metric(&m, "tandem_open_files").unwrap_or(0.0) as u64);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        (down, max_fds)
    });
    let started = Instant::now();
    let (mut sb, mut sq, mut sbf, mut sqf) = (Vec::new(), Vec::new(), 0, 0);
    while started.elapsed().as_secs_f64() < secs {
        match s.victim(a, &["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true"])? {
            Some(ms) => sb.push(ms),
            None => sbf += 1,
        }
        match s.victim(a, &["squeue", "--me"])? {
            Some(ms) => sq.push(ms),
            None => sqf += 1,
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Relaxed);
    let (hv, hf) = rt.block_on(hb)?;
    let (down, max_fds) = rt.block_on(watch)?;
    *fds = (*fds).max(max_fds);
    Ok(Run { seconds, sbatch: lat(sb, sbf), squeue: lat(sq, sqf), heartbeat: lat(hv, hf), down_seen: down })
}

/// Runs the benchmark (as root: it switches to the two users).
pub fn run(a: FloodArgs) -> Result<FloodReport> {
    if !nix::unistd::geteuid().is_root() {
        bail!("tandem bench flood runs as root (it runs the victim and the attacker as their users through setpriv)");
    }
    if a.processes == 0 || a.agents == 0 || a.duration <= 0.0 {
        bail!("--processes, --agents and --duration must be positive");
    }
    let exe = std::env::current_exe()?;
    let base = std::env::temp_dir().join(format!("tandem-bench-flood-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755))?;
    let shims = base.join("bin");
    std::fs::create_dir_all(&shims)?;
    if !Command::new(&exe).arg("shims").arg(&shims).stdout(Stdio::null()).status()?.success() {
        bail!("tandem shims failed");
    }
    let victim_dir = base.join("victim");
    std::fs::create_dir_all(&victim_dir)?;
    nix::unistd::chown(&victim_dir, Some(nix::unistd::Uid::from_raw(id_of(&a.victim, "-u")?)), None)?;
    let cluster = up::start(up::UpArgs {
        agents: a.agents,
        gpus: None,
        cpus: Some(64),
        memory: Some("64G".into()),
        data: Some(base.join("cluster")),
        port: 0,
        lease: None,
        config: None,
        proxy_port: None,
        hosts: None,
        daemon_args: Vec::new(),
        ha: false,
    })?;
    let sock = cluster.data.join("controller/tandem.sock").display().to_string();
    let root = client::Target::parse(&cluster.server)?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    // The probes: joined and registered as agents do, then drained (no job goes there).
    let ca = client::tls_config(&cluster.data.join("controller/ca.pem"))?;
    let pool = Arc::new(client::H2Pool::new(&cluster.addr, Some(ca), a.agents as usize, Vec::new()));
    let creds = rt.block_on(async {
        let joins = crate::join_tokens(&root, a.agents).await?;
        let mut creds = Vec::new();
        for (i, j) in joins.iter().enumerate() {
            let name = format!("probe{}", i + 1);
            let hdr = format!("Bearer {j}");
            let c: wire::Credential = pool
                .send(i, "POST", "/v1/agent/join", Some(&wire::JoinRequest { name: name.clone() }), &[("authorization", hdr.as_str())])
                .await?
                .json()?;
            let bearer = format!("Bearer {}", c.credential);
            let reg = wire::RegisterRequest {
                node: model::Node::new(&name, 1, 1 << 30, 0),
                addr: "127.0.0.1".into(),
                running: Vec::new(),
                exits: Vec::new(),
                version: Some(env!("CARGO_PKG_VERSION").to_string()),
            };
            pool.send(i, "POST", "/v1/agent/register", Some(&reg), &[("authorization", bearer.as_str())]).await?.ok()?;
            let drain = serde_json::json!({"state": "drain", "reason": "heartbeat probe"});
            client::send(&root, "POST", &format!("/v1/nodes/{name}"), Some(&drain), &[]).await?.ok()?;
            creds.push((name, c.credential));
        }
        anyhow::Ok(creds)
    })?;
    let s = Setup { exe: exe.clone(), shims, sock: sock.clone(), victim_dir, root: root.clone() };
    let mut fds = 0;
    eprintln!("tandem bench flood: unloaded run, {} s", a.duration);
    let unloaded = one_run(&s, &a, &rt, pool.clone(), creds.clone(), a.duration, &mut fds)?;
    eprintln!("tandem bench flood: under attack, {} s ({} attempts from {} processes)", a.duration, a.attempts, a.processes);
    let per = a.attempts.div_ceil(a.processes as u64);
    let rate = per as f64 / a.duration;
    let mut kids = Vec::new();
    for _ in 0..a.processes {
        let mut c = as_user(&a.attacker, &s.exe)?;
        c.args([FLOOD_CMD, "--unix", &sock, "--attempts", &per.to_string(), "--hold", &a.hold.to_string()])
            .args(["--rate", &format!("{rate:.3}"), "--requests", &a.requests.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        kids.push(c.spawn().context("starting an attacker")?);
    }
    let attack = one_run(&s, &a, &rt, pool, creds, a.duration, &mut fds)?;
    let mut sum = AttackReport::default();
    for k in kids {
        let o = k.wait_with_output()?;
        let r: AttackReport =
            serde_json::from_slice(&o.stdout).with_context(|| format!("an attacker's report: {}", String::from_utf8_lossy(&o.stdout)))?;
        sum.attempts += r.attempts;
        sum.refused += r.refused;
        sum.connect_failed += r.connect_failed;
        sum.closed_by_server += r.closed_by_server;
        sum.outlived += r.outlived;
        sum.requests_ok += r.requests_ok;
        sum.requests_failed += r.requests_failed;
        sum.seconds = sum.seconds.max(r.seconds);
    }
    let m = rt.block_on(client::send(&root, "GET", "/metrics", None::<&()>, &[]))?;
    let m = String::from_utf8_lossy(&m.body).into_owned();
    let refused = m
        .lines()
        .filter(|l| l.starts_with("tandem_connections_refused_total{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum::<f64>();
    drop(cluster);
    if unloaded.down_seen + attack.down_seen == 0 {
        std::fs::remove_dir_all(&base).ok();
    } else {
        eprintln!("tandem bench flood: a node went down; the cluster's logs are kept in {}", base.display());
    }
    Ok(FloodReport {
        unloaded,
        attack,
        attacker: sum,
        processes: a.processes,
        peak_user_connections: metric(&m, "tandem_user_connections_peak").unwrap_or(0.0) as u64,
        limit: metric(&m, "tandem_user_connections_limit").unwrap_or(0.0) as u64,
        refused: refused as u64,
        max_open_files: fds,
        open_files_limit: metric(&m, "tandem_open_files_limit").unwrap_or(0.0) as u64,
    })
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// Prints the report.
pub fn print(r: &FloodReport) {
    let row = |what: &str, u: &Lat, x: &Lat| {
        println!(
            "{what:<10} unloaded n={:<5} p50 {:>7.1} ms p99 {:>7.1} ms | attack n={:<5} p50 {:>7.1} ms p99 {:>7.1} ms failed {} | p99 ratio {:.2}",
            u.n,
            u.p50,
            u.p99,
            x.n,
            x.p50,
            x.p99,
            x.failed,
            ratio(x.p99, u.p99)
        )
    };
    row("heartbeat", &r.unloaded.heartbeat, &r.attack.heartbeat);
    row("sbatch", &r.unloaded.sbatch, &r.attack.sbatch);
    row("squeue", &r.unloaded.squeue, &r.attack.squeue);
    let a = &r.attacker;
    let s = r.attack.seconds.max(1e-9);
    println!(
        "victim: {:.1} commands/s unloaded, {:.1} under attack",
        (r.unloaded.sbatch.n + r.unloaded.squeue.n) as f64 / r.unloaded.seconds.max(1e-9),
        (r.attack.sbatch.n + r.attack.squeue.n) as f64 / s
    );
    println!(
        "attacker ({} processes): {} connection attempts ({:.0}/s), {} refused at once, {} connect failures, {} closed by the controller's deadlines, {} outlived; request flood {} answered ({:.0}/s), {} failed",
        r.processes,
        a.attempts,
        a.attempts as f64 / a.seconds.max(1e-9),
        a.refused,
        a.connect_failed,
        a.closed_by_server,
        a.outlived,
        a.requests_ok,
        a.requests_ok as f64 / s,
        a.requests_failed
    );
    println!(
        "controller: peak connections of one user {} (limit {}), {} refused, at most {} descriptors (limit {}); nodes seen DOWN: {} unloaded, {} under attack",
        r.peak_user_connections, r.limit, r.refused, r.max_open_files, r.open_files_limit, r.unloaded.down_seen, r.attack.down_seen
    );
}
