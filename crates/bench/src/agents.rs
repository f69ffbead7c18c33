//! `tandem bench agents`: the controller under the load of many nodes. A real `tandem server`
//! (a child process, production defaults: durable SQLite commits, per-node credentials for agents,
//! peer-credential identity for users) and, in this process, `--count` simulated node agents
//! that speak exactly the protocol of `tandem agent` over real HTTP: each registers its own node,
//! long-polls heartbeats that renew its lease and acknowledge orders by sequence number, reports
//! its running tasks and their exits, obeys launch, signal and kill orders, and fences itself
//! when its lease would lapse. Meanwhile a client submits `--jobs` batch jobs of mixed gang sizes
//! through the public API (`POST /v1/jobs` on the Unix socket, a few submitters at once).
//!
//! What a simulated agent does instead of running a process: a job is submitted as
//! `--wrap "sleep S"`; the agent parses `sleep S` from the batch script it is sent and reports
//! the task's exit (code 0) S seconds after the launch order arrived. Any other script ends at
//! once with code 0 and is counted as `unsupported_scripts`. A signal whose default action
//! ends a process (SIGTERM, SIGINT, SIGUSR1, ...) ends the task with that signal, as it would
//! end `sleep`; a kill order ends it with SIGKILL.
//!
//! Connections: the agents share `ceil(count / --agents-per-conn)` HTTP/2 connections (over
//! TLS with the cluster CA, as real agents; h2c with `--insecure`), as a node-side proxy would
//! multiplex them; the open-file limit of both processes is raised. The workload is a list of
//! [`Work`] items so that services can be submitted beside jobs once their API exists.

use anyhow::{Context, Result, bail};
use control::{BATCH_STEP, Order, TaskExit, TaskKey};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client::{H2Pool, Target, send};
use wire::*;

/// Options of the benchmark.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Simulated node agents.
    pub count: u32,
    /// Jobs submitted.
    pub jobs: u32,
    /// GPUs each node declares.
    pub gpus_per_node: u32,
    /// CPUs each node declares.
    pub cpus_per_node: u32,
    /// Memory each node declares, GiB.
    pub mem_gib: u64,
    /// Lease, seconds (default: three heartbeat intervals, at least 30 s).
    pub lease: Option<u32>,
    /// Heartbeat interval, seconds (default: count / 1,000 s between 3 s and 100 s).
    pub heartbeat: Option<f64>,
    /// Agents per HTTP/2 connection.
    pub agents_per_conn: u32,
    /// Local source addresses for the connections (127.0.0.x), in turn.
    pub sources: u32,
    /// Submissions in flight at once.
    pub submitters: u32,
    /// Simulated run time of a job, seconds: uniform in this range.
    pub run_time: (f64, f64),
    /// Largest gang, nodes.
    pub max_gang: u32,
    /// Seconds to watch the idle cluster after registration (controller CPU with idle agents).
    pub idle_s: f64,
    /// Give up waiting for completion after this many seconds.
    pub timeout_s: u64,
    /// Seed of the job mix.
    pub seed: u64,
    /// Services applied before the jobs (each replica one GPU), and replicas of each.
    pub services: (u32, u32),
    /// Plain HTTP/2 to an `--insecure` controller instead of TLS.
    pub insecure: bool,
    /// The state in a three-member etcd on this machine (`--etcd`).
    pub etcd: bool,
}

/// Percentiles of a latency sample, milliseconds.
#[derive(Serialize, Default, Clone)]
pub struct Lat {
    count: usize,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

fn lat(mut v: Vec<f32>) -> Lat {
    if v.is_empty() {
        return Lat::default();
    }
    v.sort_by(f32::total_cmp);
    let at = |p: f64| v[((p / 100.0) * (v.len() - 1) as f64).round() as usize] as f64;
    Lat { count: v.len(), p50_ms: at(50.0), p99_ms: at(99.0), max_ms: *v.last().expect("non-empty") as f64 }
}

/// The figures.
#[derive(Serialize)]
pub struct Report {
    count: u32,
    gpus_per_node: u32,
    cpus_per_node: u32,
    mem_gib_per_node: u64,
    lease_s: i64,
    heartbeat_ms: u64,
    connections: usize,
    agents_per_connection: u32,
    source_addresses: Vec<String>,
    open_file_limit: u64,
    jobs: u32,
    job_mix: String,
    /// Services and replicas per service (one GPU each), applied before the jobs.
    services: (u32, u32),
    /// From the first apply until every replica was ready, seconds.
    services_ready_s: Option<f64>,
    run_time_s: (f64, f64),
    submitters: u32,
    seed: u64,
    settings: String,
    /// Every agent joining (a join token spent on a credential), before the clock starts.
    join_s: f64,
    join_rtt: Lat,
    registration_s: f64,
    register_rtt: Lat,
    idle_window_s: f64,
    idle_controller_cpu_per_s: f64,
    idle_heartbeats_per_s: f64,
    /// Durable commits (SQLite transactions or etcd commits) during the idle window: heartbeats
    /// that change nothing write nothing.
    idle_db_commits: u64,
    /// `sqlite`, or `etcd` (three members on this machine).
    store: &'static str,
    /// With etcd: transactions written over the whole run, and their seconds.
    etcd_transactions: u64,
    etcd_commit_seconds: f64,
    submit_s: f64,
    submissions_per_s: f64,
    api_submit: Lat,
    api_get_job: Lat,
    api_list_jobs: Lat,
    api_list_nodes: Lat,
    list_jobs_max_rows: usize,
    heartbeat_rtt_with_exits: Lat,
    heartbeats: u64,
    heartbeat_errors: u64,
    reregistrations: u64,
    connections_opened: u64,
    task_starts: u64,
    task_starts_per_s_peak: u32,
    task_starts_per_s_avg: f64,
    signals_obeyed: u64,
    kills_obeyed: u64,
    fenced_tasks: u64,
    unsupported_scripts: u64,
    completed: u64,
    ended_otherwise: u64,
    all_complete: bool,
    all_complete_s: f64,
    controller_cpu_s: f64,
    controller_cpu_s_registration: f64,
    controller_cpu_s_jobs: f64,
    controller_rss_mib_max: f64,
    bench_cpu_s: f64,
    scheduling_passes: u64,
    scheduling_pass_ms_mean: f64,
    /// Of a pass, the mean time it held the controller (taking its inputs, applying its plan).
    scheduling_lock_ms_mean: f64,
    /// Of that, applying the plan.
    scheduling_apply_ms_mean: f64,
    db_commits: u64,
    db_records: u64,
    machine_load_avg_mean: f64,
    first_error: Option<String>,
}

/// One item of the workload. Services join as a second kind once their API lands.
enum Work {
    /// A batch job.
    Job(SubmitRequest),
}

use up::Kids as Procs;

/// CPU seconds (user + system) and RSS (MiB) of a process, from /proc.
fn proc_usage(pid: &str) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name. USER_HZ
    // is 100 on Linux.
    let cpu = (ticks(11) + ticks(12)) / 100.0;
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("VmRSS:").and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok()))
        })
        .map_or(0.0, |kb| kb / 1024.0);
    (cpu, rss)
}

/// The simulated run time of a batch script: `sleep S` as its first command.
fn sim_run_time(script: Option<&str>) -> Option<Duration> {
    let line = script?.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#'))?;
    let s: f64 = line.strip_prefix("sleep ")?.trim().parse().ok()?;
    (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s))
}

/// Whether a signal's default action ends a process (as it would end `sleep`).
fn ends_process(sig: i32) -> bool {
    // SIGCHLD, SIGCONT, SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU, SIGURG, SIGWINCH do not.
    (1..=31).contains(&sig) && !matches!(sig, 17..=23 | 28)
}

/// What the agents share: the connections, each agent's join token, and the counters.
struct Shared {
    pool: H2Pool,
    joins: Vec<String>,
    joined: AtomicU32,
    join_rtt: Mutex<Vec<f32>>,
    /// Set once every agent has joined: registration starts.
    go: tokio::sync::watch::Sender<bool>,
    t0: Instant,
    starts: Vec<AtomicU32>,
    launched: AtomicU64,
    heartbeats: AtomicU64,
    errors: AtomicU64,
    reregistered: AtomicU64,
    registered: AtomicU32,
    signals: AtomicU64,
    kills: AtomicU64,
    fenced: AtomicU64,
    unsupported: AtomicU64,
    hb_exit_rtt: Mutex<Vec<f32>>,
    reg_rtt: Mutex<Vec<f32>>,
    first_error: Mutex<Option<String>>,
    /// The measurement is over: what fails while the agents are torn down is not counted.
    done: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn error(&self, what: &str, e: &(dyn std::error::Error + 'static)) {
        if self.done.load(Relaxed) {
            return;
        }
        self.errors.fetch_add(1, Relaxed);
        let mut f = self.first_error.lock().expect("lock");
        if f.is_none() {
            let mut msg = format!("{what}: {e}");
            let mut cause = e.source();
            while let Some(c) = cause {
                msg.push_str(&format!(": {c}"));
                cause = c.source();
            }
            *f = Some(msg);
        }
    }
}

fn ms(d: Duration) -> f32 {
    d.as_secs_f32() * 1000.0
}

/// One simulated agent: the loop of the `agent` crate's node loop with timers in place of processes.
async fn sim_agent(sh: Arc<Shared>, i: usize, node: model::Node) {
    // Joining, as a real agent does at its first start: the join token for a credential.
    let join_hdr = format!("Bearer {}", sh.joins[i]);
    let req = JoinRequest { name: node.name.clone() };
    let credential = loop {
        let s = Instant::now();
        match sh.pool.send(i, "POST", "/v1/agent/join", Some(&req), &[("authorization", join_hdr.as_str())]).await {
            Ok(r) => match r.json::<Credential>() {
                Ok(c) => {
                    sh.join_rtt.lock().expect("lock").push(ms(s.elapsed()));
                    break c.credential;
                }
                Err(e) => {
                    sh.error("joining", &e);
                    return;
                }
            },
            Err(e) => {
                sh.error("joining", &e);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    sh.joined.fetch_add(1, Relaxed);
    let _ = sh.go.subscribe().wait_for(|go| *go).await;
    let bearer = format!("Bearer {credential}");
    let hdr = [("authorization", bearer.as_str())];
    let reg = RegisterRequest {
        node: node.clone(),
        addr: format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255),
        running: Vec::new(),
        exits: Vec::new(),
        version: Some(env!("CARGO_PKG_VERSION").to_string()),
    };
    let register = || async {
        loop {
            let s = Instant::now();
            match sh.pool.send(i, "POST", "/v1/agent/register", Some(&reg), &hdr).await.and_then(|r| r.json::<RegisterResponse>()) {
                Ok(r) => {
                    sh.reg_rtt.lock().expect("lock").push(ms(s.elapsed()));
                    return r;
                }
                Err(e) => {
                    sh.error("registering", &e);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    };
    let mut info = register().await;
    sh.registered.fetch_add(1, Relaxed);
    let name = node.name.clone();
    // Running tasks and when each ends.
    let mut tasks: HashMap<TaskKey, Instant> = HashMap::new();
    // Service replicas running here (they run until stopped), with their simulated ports.
    let mut replicas: HashMap<TaskKey, u16> = HashMap::new();
    let mut exits: Vec<TaskExit> = Vec::new();
    let mut launched: HashSet<TaskKey> = HashSet::new();
    let mut last_ok = Instant::now();
    let mut ack: u64 = 0;
    let ended = |k: TaskKey, signal: Option<i32>, fenced: bool| TaskExit {
        job: k.job,
        epoch: k.epoch,
        step: k.step,
        rank: k.rank,
        code: if signal.is_some() { None } else { Some(0) },
        signal,
        oom: false,
        fenced,
        error: None,
        lost: false,
        prolog_failed: false,
    };
    loop {
        let now = Instant::now();
        tasks.retain(|k, end| {
            let keep = *end > now;
            if !keep {
                exits.push(ended(*k, None, false));
            }
            keep
        });
        // Fencing, as `tandem agent`: a margin before the lease could lapse, kill everything.
        let lease = Duration::from_millis(info.lease_s.max(1) as u64 * 1000);
        let margin = (lease / 5).max(Duration::from_millis(500)).min(lease / 2);
        if last_ok.elapsed() > lease - margin && !tasks.is_empty() {
            sh.fenced.fetch_add(tasks.len() as u64, Relaxed);
            for (k, _) in tasks.drain() {
                exits.push(ended(k, Some(9), true));
            }
        }
        let with_exits = !exits.is_empty();
        let hb = Heartbeat {
            node: name.clone(),
            ack,
            running: tasks.keys().copied().collect(),
            exits: exits.clone(),
            wait_ms: if with_exits { 0 } else { info.heartbeat_ms },
            replicas: replicas
                .iter()
                .map(|(k, &port)| control::ReplicaReport {
                    job: k.job,
                    epoch: k.epoch,
                    port,
                    ready: true,
                    restarts: 0,
                    crashloop: false,
                    message: None,
                })
                .collect(),
            usage: Vec::new(),
            pulling: Vec::new(),
            drain: None,
            health_failed: None,
            health_down: false,
            health_passed: false,
            frozen: Vec::new(),
            started: Vec::new(),
        };
        let next_end = tasks.values().min().copied();
        let sent = Instant::now();
        sh.heartbeats.fetch_add(1, Relaxed);
        let req = sh.pool.send(i, "POST", "/v1/agent/heartbeat", Some(&hb), &hdr);
        let reply = tokio::select! {
            r = req => Some(r),
            // A task ended during the long poll: report it now (the real agent's exit channel).
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(next_end.unwrap_or(sent))), if next_end.is_some() && !with_exits => None,
        };
        let Some(reply) = reply else { continue };
        let orders = match reply {
            Ok(r) if r.status == 404 => {
                sh.reregistered.fetch_add(1, Relaxed);
                info = register().await;
                ack = 0;
                continue;
            }
            Ok(r) => match r.json::<Orders>() {
                Ok(o) => o.orders,
                Err(e) => {
                    sh.error("heartbeat refused", &e);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            },
            Err(e) => {
                sh.error("heartbeat failed", &e);
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        last_ok = sent;
        if with_exits {
            sh.hb_exit_rtt.lock().expect("lock").push(ms(sent.elapsed()));
        }
        exits.clear();
        for (seq, o) in orders {
            if seq <= ack {
                continue;
            }
            ack = seq;
            match o {
                Order::Launch(t) => {
                    let key = TaskKey { job: t.job, epoch: t.epoch, step: t.step, rank: t.rank };
                    if !launched.insert(key) {
                        continue;
                    }
                    if t.replica.is_some() {
                        // A replica serves until it is stopped; it is ready at once.
                        tasks.insert(key, Instant::now() + Duration::from_secs(10 * 365 * 86_400));
                        replicas.insert(key, 20_000 + (replicas.len() % 40_000) as u16);
                        continue;
                    }
                    let run = sim_run_time(t.script.as_deref()).unwrap_or_else(|| {
                        sh.unsupported.fetch_add(1, Relaxed);
                        Duration::ZERO
                    });
                    let at = Instant::now();
                    tasks.insert(key, at + run);
                    sh.launched.fetch_add(1, Relaxed);
                    let sec = at.duration_since(sh.t0).as_secs() as usize;
                    if let Some(c) = sh.starts.get(sec) {
                        c.fetch_add(1, Relaxed);
                    }
                }
                Order::Signal { job, epoch, signal, batch_only, .. } => {
                    sh.signals.fetch_add(1, Relaxed);
                    if !ends_process(signal) {
                        continue;
                    }
                    let hit: Vec<TaskKey> = tasks
                        .keys()
                        .filter(|k| k.job == job && k.epoch == epoch && (!batch_only || k.step == BATCH_STEP))
                        .copied()
                        .collect();
                    for k in hit {
                        tasks.remove(&k);
                        replicas.remove(&k);
                        exits.push(ended(k, Some(signal), false));
                    }
                }
                Order::Kill { job, epoch } => {
                    sh.kills.fetch_add(1, Relaxed);
                    let hit: Vec<TaskKey> = tasks.keys().filter(|k| k.job == job && k.epoch == epoch).copied().collect();
                    for k in hit {
                        tasks.remove(&k);
                        replicas.remove(&k);
                        exits.push(ended(k, Some(9), false));
                    }
                }
                // Simulated tasks have no I/O to attach to, nor nodes to run an epilog on, nor
                // processes to freeze (the benchmark's workload suspends nothing).
                Order::Attach { .. }
                | Order::Output { .. }
                | Order::Epilog { .. }
                | Order::Reboot { .. }
                | Order::Suspend { .. }
                | Order::Resume { .. } => {}
            }
        }
    }
}

/// The job mix: mostly single GPUs, then 2, 4 and 8 GPUs on one node, gangs of 2 to 8 whole
/// nodes and a few of 16 to `max_gang` whole nodes. Returns the sbatch arguments.
fn job_args(rng: &mut SmallRng, o: &Opts) -> Vec<String> {
    let g = o.gpus_per_node.max(1);
    let cpu_per_gpu = (o.cpus_per_node / g).max(1);
    let mem_per_gpu = (o.mem_gib / g as u64).max(1);
    let p: f64 = rng.random();
    let run = if o.run_time.1 > o.run_time.0 { rng.random_range(o.run_time.0..o.run_time.1) } else { o.run_time.0 };
    let limit_min = ((run / 60.0).ceil() as u64 + 2).max(3);
    let mut a: Vec<String> = Vec::new();
    let one_node = |gpus: u32| {
        let gpus = gpus.min(g);
        vec![
            "--gpus".into(),
            gpus.to_string(),
            "-c".into(),
            (cpu_per_gpu * gpus).to_string(),
            "--mem".into(),
            format!("{}G", mem_per_gpu * gpus as u64),
        ]
    };
    let gang = |nodes: u32| {
        vec![
            "-N".into(),
            nodes.to_string(),
            "--gpus-per-node".into(),
            g.to_string(),
            "--ntasks-per-node".into(),
            g.to_string(),
            "--exclusive".into(),
        ]
    };
    let max_gang = o.max_gang.min(o.count).max(1);
    if p < 0.60 || o.gpus_per_node == 0 {
        a.extend(one_node(1));
    } else if p < 0.75 {
        a.extend(one_node(2));
    } else if p < 0.85 {
        a.extend(one_node(4));
    } else if p < 0.93 {
        a.extend(one_node(8));
    } else if p < 0.99 {
        a.extend(gang(rng.random_range(2..=8u32).min(max_gang)));
    } else {
        let n = [16u32, 32, 64][rng.random_range(0..3usize)];
        a.extend(gang(n.min(max_gang)));
    }
    a.extend(["-J".into(), "bench".into(), "-t".into(), limit_min.to_string(), "-o".into(), "/dev/null".into()]);
    a.extend(["--wrap".into(), format!("sleep {run:.1}")]);
    a
}

fn wait_for(path: &Path, what: &str, secs: u64) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && !s.trim().is_empty()
        {
            return Ok(s.trim().to_string());
        }
        if Instant::now() > deadline {
            bail!("{what} did not appear in {secs} s ({})", path.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One plain sample from the controller's `/metrics`.
fn metric(text: &str, name: &str) -> f64 {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or(0.0)
}

/// The machine's one-minute load average.
fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg").ok().and_then(|s| s.split_whitespace().next()?.parse().ok()).unwrap_or(0.0)
}

/// Jobs by state, from the controller's `/metrics`.
fn jobs_by_state(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| l.strip_prefix("tandem_jobs{state=\""))
        .filter_map(|l| {
            let (st, rest) = l.split_once("\"}")?;
            Some((st.to_string(), rest.trim().parse().ok()?))
        })
        .collect()
}

/// Runs the benchmark.
pub fn run(o: Opts) -> Result<Report> {
    if o.count == 0 || o.jobs == 0 || o.agents_per_conn == 0 || o.submitters == 0 {
        bail!("--count, --jobs, --agents-per-conn and --submitters must be positive");
    }
    if !(o.run_time.0 >= 0.0 && o.run_time.1 >= o.run_time.0) {
        bail!("--run-time must be MIN-MAX seconds with 0 <= MIN <= MAX");
    }
    let nofile = exec::raise_nofile(1 << 20);
    let heartbeat = o.heartbeat.unwrap_or_else(|| (o.count as f64 / 1000.0).clamp(3.0, 100.0));
    let lease = o.lease.unwrap_or_else(|| ((heartbeat * 3.0).ceil() as u32).max(30));
    if heartbeat * 2.0 > lease as f64 {
        bail!("the heartbeat interval ({heartbeat} s) must be at most half the lease ({lease} s)");
    }
    let dir: PathBuf = std::env::temp_dir().join(format!("tandem-bench-agents-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let data = dir.join("ctl");
    std::fs::create_dir_all(&data)?;
    std::fs::write(data.join("tandem.toml"), format!("lease = {lease}\nheartbeat = {heartbeat}\n"))?;
    let exe = std::env::current_exe()?;
    let mut procs = Procs(Vec::new());
    let members = match o.etcd {
        true => Some(up::etcd::Etcd::start(&dir.join("etcd"), 3).context("starting etcd (apt-get install etcd-server)")?),
        false => None,
    };
    procs.0.push(
        Command::new(&exe)
            .args(["server", "--listen", "127.0.0.1:0", "--data"])
            .arg(&data)
            .args(o.insecure.then_some("--insecure"))
            .args(members.as_ref().map(up::etcd::Etcd::server_args).unwrap_or_default())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("controller.log"))?)
            .spawn()
            .context("starting the controller")?,
    );
    let pid = procs.0[0].id().to_string();
    let addr = wait_for(&data.join("addr"), "the controller's address", 60)?;
    let unix = Target::parse(&format!("unix://{}", data.join("tandem.sock").display()))?;
    // As real agents: TLS, trusting the cluster CA the controller made (unless --insecure).
    let tls = if o.insecure {
        None
    } else {
        wait_for(&data.join("ca.pem"), "the cluster CA", 10)?;
        Some(client::tls_config(&data.join("ca.pem"))?)
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let joins = rt.block_on(crate::join_tokens(&unix, o.count))?;
    let conns = o.count.div_ceil(o.agents_per_conn) as usize;
    let sources: Vec<std::net::IpAddr> = (1..=o.sources.max(1)).map(|k| std::net::IpAddr::from([127, 0, 0, k.min(254) as u8])).collect();
    let sh = Arc::new(Shared {
        pool: H2Pool::new(&addr, tls.clone(), conns, sources.clone()),
        joins,
        joined: AtomicU32::new(0),
        join_rtt: Mutex::new(Vec::new()),
        go: tokio::sync::watch::Sender::new(false),
        t0: Instant::now(),
        starts: (0..(o.timeout_s + 7200)).map(|_| AtomicU32::new(0)).collect(),
        launched: AtomicU64::new(0),
        heartbeats: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        reregistered: AtomicU64::new(0),
        registered: AtomicU32::new(0),
        signals: AtomicU64::new(0),
        kills: AtomicU64::new(0),
        fenced: AtomicU64::new(0),
        unsupported: AtomicU64::new(0),
        hb_exit_rtt: Mutex::new(Vec::new()),
        reg_rtt: Mutex::new(Vec::new()),
        first_error: Mutex::new(None),
        done: std::sync::atomic::AtomicBool::new(false),
    });
    // The workload, built before the clock starts.
    let mut rng = SmallRng::seed_from_u64(o.seed);
    let work_dir = dir.join("work");
    std::fs::create_dir_all(&work_dir)?;
    let mut work = Vec::with_capacity(o.jobs as usize);
    let mut mix = [0u32; 3];
    for _ in 0..o.jobs {
        let args = job_args(&mut rng, &o);
        let nodes = args.iter().position(|a| a == "-N").and_then(|i| args[i + 1].parse::<u32>().ok()).unwrap_or(1);
        mix[if args.iter().any(|a| a == "-N") { if nodes >= 16 { 2 } else { 1 } } else { 0 }] += 1;
        let b = slurmcli::parse_sbatch(&args, 0, &mut |_| unreachable!("--wrap needs no file")).map_err(|e| anyhow::anyhow!("{}", e.0))?;
        work.push(Work::Job(SubmitRequest {
            batch: b,
            cwd: work_dir.display().to_string(),
            host: "bench".into(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            umask: None,
        }));
    }
    let job_mix = format!(
        "{} on one node (60% 1 GPU, 15% 2, 10% 4, 8% 8), {} gangs of 2-8 whole nodes, {} gangs of 16-{} whole nodes; each `--wrap \"sleep S\"`",
        mix[0],
        mix[1],
        mix[2],
        o.max_gang.min(o.count)
    );
    let (cpu0, _) = proc_usage(&pid);
    // 1. Registration: every agent at once, as a cluster powering on.
    let reg_start = Instant::now();
    let _agents: Vec<tokio::task::JoinHandle<()>> = {
        let _g = rt.enter();
        (0..o.count as usize)
            .map(|i| {
                let mut node = model::Node::new(format!("node{:06}", i + 1), o.cpus_per_node, o.mem_gib << 30, o.gpus_per_node);
                node.gpu_type = (o.gpus_per_node > 0).then(|| "h100".to_string());
                rt.spawn(sim_agent(sh.clone(), i, node))
            })
            .collect()
    };
    // 0. Joining: every agent spends its join token (not timed with registration).
    let wait_all = |what: &str, n: &AtomicU32| -> Result<()> {
        let start = Instant::now();
        while n.load(Relaxed) < o.count {
            if start.elapsed() > Duration::from_secs(o.timeout_s) {
                let e = sh.first_error.lock().expect("lock").clone().unwrap_or_default();
                bail!("only {} of {} agents {what} in {} s; first error: {e}", n.load(Relaxed), o.count, o.timeout_s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    };
    wait_all("joined", &sh.joined)?;
    let join_s = reg_start.elapsed().as_secs_f64();
    eprintln!("bench agents: {} agents joined in {join_s:.1} s", o.count);
    let reg_start = Instant::now();
    sh.go.send_replace(true);
    let mut rss_max = 0.0f64;
    loop {
        let (_, rss) = proc_usage(&pid);
        rss_max = rss_max.max(rss);
        if sh.registered.load(Relaxed) >= o.count {
            break;
        }
        if reg_start.elapsed() > Duration::from_secs(o.timeout_s) {
            bail!("only {} of {} agents registered in {} s", sh.registered.load(Relaxed), o.count, o.timeout_s);
        }
        if procs.0[0].try_wait()?.is_some() {
            bail!("the controller exited; see {}", dir.join("controller.log").display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let registration_s = reg_start.elapsed().as_secs_f64();
    let (cpu_reg, _) = proc_usage(&pid);
    eprintln!("bench agents: {} agents registered in {registration_s:.1} s", o.count);
    // 2. The idle cluster: the cost of heartbeats alone.
    let commits = || -> f64 {
        let m = rt.block_on(send(&unix, "GET", "/metrics", None::<&()>, &[])).ok().and_then(|r| r.ok().ok());
        m.map_or(0.0, |m| metric(&String::from_utf8_lossy(&m.body), "tandem_db_commits_total"))
    };
    let commits0 = commits();
    let (idle_cpu0, _) = proc_usage(&pid);
    let hb0 = sh.heartbeats.load(Relaxed);
    let idle_t = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(o.idle_s));
    let idle_s = idle_t.elapsed().as_secs_f64();
    let (idle_cpu1, _) = proc_usage(&pid);
    let idle_hb = sh.heartbeats.load(Relaxed) - hb0;
    let idle_db_commits = (commits() - commits0).max(0.0) as u64;
    // 3. Services, then jobs: submitters and an observer at once.
    let (cpu_jobs0, _) = proc_usage(&pid);
    let job_start = Instant::now();
    let want_replicas = (o.services.0 * o.services.1) as usize;
    rt.block_on(async {
        for k in 0..o.services.0 {
            let spec = control::ServiceSpec {
                name: format!("svc{k}"),
                command: vec!["sleep".into(), "infinity".into()],
                replicas: Some(control::service::Quantity::Num(o.services.1 as f64)),
                resources: control::service::ResourcesSpec { gpus: Some(control::service::Quantity::Num(1.0)), ..Default::default() },
                ..Default::default()
            };
            let req = wire::ApplyRequest { spec, cwd: work_dir.display().to_string(), umask: None };
            send(&unix, "POST", "/v1/services", Some(&req), &[]).await?.ok()?;
        }
        anyhow::Ok(())
    })?;
    let mut services_ready_s: Option<f64> = if want_replicas == 0 { Some(0.0) } else { None };
    let work = Arc::new(work);
    let next = Arc::new(AtomicU64::new(0));
    let sub_lat = Arc::new(Mutex::new(Vec::<f32>::new()));
    let submitted_ids = Arc::new(Mutex::new(Vec::<u64>::new()));
    let mut submitters: Vec<_> = (0..o.submitters)
        .map(|_| {
            let (work, next, sub_lat, ids, t, sh) =
                (work.clone(), next.clone(), sub_lat.clone(), submitted_ids.clone(), unix.clone(), sh.clone());
            rt.spawn(async move {
                loop {
                    let k = next.fetch_add(1, Relaxed) as usize;
                    let Some(w) = work.get(k) else { return Instant::now() };
                    let Work::Job(req) = w;
                    let s = Instant::now();
                    match send(&t, "POST", "/v1/jobs", Some(req), &[]).await.and_then(|r| r.json::<SubmitResponse>()) {
                        Ok(r) => {
                            sub_lat.lock().expect("lock").push(ms(s.elapsed()));
                            ids.lock().expect("lock").extend(r.job_ids);
                        }
                        Err(e) => {
                            sh.error("submitting", &e);
                            return Instant::now();
                        }
                    }
                }
            })
        })
        .collect();
    let (mut get_lat, mut list_lat, mut nodes_lat) = (Vec::new(), Vec::new(), Vec::new());
    let mut list_rows = 0usize;
    let mut submit_s = None;
    let mut finished: Option<f64> = None;
    let mut states = HashMap::new();
    let mut metrics_text = String::new();
    let mut loads = Vec::new();
    let mut tick = 0u64;
    let timeout = Duration::from_secs(o.timeout_s);
    rt.block_on(async {
        loop {
            tick += 1;
            let second = tick.is_multiple_of(4);
            let (_, rss) = proc_usage(&pid);
            rss_max = rss_max.max(rss);
            if submit_s.is_none() && submitters.iter().all(|h| h.is_finished()) {
                let mut end = job_start;
                for h in submitters.iter_mut() {
                    end = end.max(h.await?);
                }
                let s = end.duration_since(job_start).as_secs_f64();
                submit_s = Some(s);
                eprintln!("bench agents: {} jobs submitted in {s:.1} s", o.jobs);
            }
            // A point query (`scontrol show job`) each second; the lists every 10 s.
            let id = if second { submitted_ids.lock().expect("lock").get((tick as usize * 7919) % o.jobs as usize).copied() } else { None };
            if let Some(id) = id {
                let s = Instant::now();
                send(&unix, "GET", &format!("/v1/jobs/{id}"), None::<&()>, &[]).await?.ok()?;
                get_lat.push(ms(s.elapsed()));
            }
            if tick % 40 == 20 {
                let s = Instant::now();
                let v: Vec<JobInfo> = send(&unix, "GET", "/v1/jobs", None::<&()>, &[]).await?.json()?;
                list_lat.push(ms(s.elapsed()));
                list_rows = list_rows.max(v.len());
                let s = Instant::now();
                let n: Vec<NodeInfo> = send(&unix, "GET", "/v1/nodes", None::<&()>, &[]).await?.json()?;
                nodes_lat.push(ms(s.elapsed()));
                if n.len() != o.count as usize {
                    bail!("{} nodes listed, expected {}", n.len(), o.count);
                }
            }
            if services_ready_s.is_none() {
                let v: Vec<wire::ServiceInfo> = send(&unix, "GET", "/v1/services", None::<&()>, &[]).await?.json()?;
                if v.iter().map(|s| s.ready as usize).sum::<usize>() >= want_replicas {
                    services_ready_s = Some(job_start.elapsed().as_secs_f64());
                }
            }
            let m = send(&unix, "GET", "/metrics", None::<&()>, &[]).await?.ok()?;
            metrics_text = String::from_utf8_lossy(&m.body).into_owned();
            states = jobs_by_state(&metrics_text);
            if second {
                loads.push(loadavg());
            }
            let done: u64 = states.iter().filter(|(k, _)| !matches!(k.as_str(), "PENDING" | "RUNNING")).map(|(_, v)| v).sum();
            if tick.is_multiple_of(40) {
                eprintln!(
                    "bench agents: {:.0} s: {} pending, {} running, {} ended; {} task starts",
                    job_start.elapsed().as_secs_f64(),
                    states.get("PENDING").unwrap_or(&0),
                    states.get("RUNNING").unwrap_or(&0),
                    done,
                    sh.launched.load(Relaxed)
                );
            }
            if submit_s.is_some() && done >= o.jobs as u64 && services_ready_s.is_some() {
                finished = Some(job_start.elapsed().as_secs_f64());
                return Ok(());
            }
            if job_start.elapsed() > timeout {
                eprintln!("bench agents: timed out after {} s with {done} of {} jobs ended", o.timeout_s, o.jobs);
                return Ok(());
            }
            if submit_s.is_some() && sh.errors.load(Relaxed) > 0 && submitted_ids.lock().expect("lock").len() < o.jobs as usize {
                bail!("a submission failed: {}", sh.first_error.lock().expect("lock").clone().unwrap_or_default());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })?;
    let (cpu_end, _) = proc_usage(&pid);
    let (bench_cpu, _) = proc_usage("self");
    sh.done.store(true, Relaxed);
    let heartbeats = sh.heartbeats.load(Relaxed);
    let errors = sh.errors.load(Relaxed);
    // Agents first (dropping the runtime ends them), then the controller.
    rt.shutdown_timeout(Duration::from_secs(1));
    drop(procs);
    let _ = std::fs::remove_dir_all(&dir);
    let starts: Vec<u32> = sh.starts.iter().map(|c| c.load(Relaxed)).collect();
    let first = starts.iter().position(|&c| c > 0);
    let last = starts.iter().rposition(|&c| c > 0);
    let total_starts = sh.launched.load(Relaxed);
    let avg = match (first, last) {
        (Some(f), Some(l)) => total_starts as f64 / (l + 1 - f) as f64,
        _ => 0.0,
    };
    let completed = states.get("COMPLETED").copied().unwrap_or(0);
    let ended_otherwise: u64 =
        states.iter().filter(|(k, _)| !matches!(k.as_str(), "PENDING" | "RUNNING" | "COMPLETED")).map(|(_, v)| v).sum();
    let submit_s = submit_s.unwrap_or_else(|| job_start.elapsed().as_secs_f64());
    Ok(Report {
        count: o.count,
        gpus_per_node: o.gpus_per_node,
        cpus_per_node: o.cpus_per_node,
        mem_gib_per_node: o.mem_gib,
        lease_s: lease as i64,
        heartbeat_ms: (heartbeat * 1000.0).round() as u64,
        connections: sh.pool.len(),
        agents_per_connection: o.agents_per_conn,
        source_addresses: sources.iter().map(|a| a.to_string()).collect(),
        open_file_limit: nofile,
        jobs: o.jobs,
        job_mix,
        services: o.services,
        services_ready_s,
        run_time_s: o.run_time,
        submitters: o.submitters,
        seed: o.seed,
        settings: format!(
            "controller: tandem server defaults (SQLite WAL, synchronous=FULL, every acknowledgement durable; agents join with single-use tokens and present per-node credentials; users identified on the Unix socket); agents: HTTP/2 {} over TCP, jobs: POST /v1/jobs on the Unix socket",
            if o.insecure { "cleartext (h2c, --insecure)" } else { "over TLS 1.3 (the cluster CA)" }
        ),
        join_s,
        join_rtt: lat(std::mem::take(&mut *sh.join_rtt.lock().expect("lock"))),
        registration_s,
        register_rtt: lat(std::mem::take(&mut *sh.reg_rtt.lock().expect("lock"))),
        idle_window_s: idle_s,
        idle_controller_cpu_per_s: if idle_s > 0.0 { (idle_cpu1 - idle_cpu0) / idle_s } else { 0.0 },
        idle_heartbeats_per_s: if idle_s > 0.0 { idle_hb as f64 / idle_s } else { 0.0 },
        idle_db_commits,
        store: if o.etcd { "etcd" } else { "sqlite" },
        etcd_transactions: metric(&metrics_text, "tandem_etcd_transactions_total") as u64,
        etcd_commit_seconds: metric(&metrics_text, "tandem_etcd_commit_seconds_total"),
        submit_s,
        submissions_per_s: o.jobs as f64 / submit_s.max(1e-9),
        api_submit: lat(std::mem::take(&mut *sub_lat.lock().expect("lock"))),
        api_get_job: lat(get_lat),
        api_list_jobs: lat(list_lat),
        api_list_nodes: lat(nodes_lat),
        list_jobs_max_rows: list_rows,
        heartbeat_rtt_with_exits: lat(std::mem::take(&mut *sh.hb_exit_rtt.lock().expect("lock"))),
        heartbeats,
        heartbeat_errors: errors,
        reregistrations: sh.reregistered.load(Relaxed),
        connections_opened: sh.pool.opened(),
        task_starts: total_starts,
        task_starts_per_s_peak: starts.iter().copied().max().unwrap_or(0),
        task_starts_per_s_avg: avg,
        signals_obeyed: sh.signals.load(Relaxed),
        kills_obeyed: sh.kills.load(Relaxed),
        fenced_tasks: sh.fenced.load(Relaxed),
        unsupported_scripts: sh.unsupported.load(Relaxed),
        completed,
        ended_otherwise,
        all_complete: finished.is_some(),
        all_complete_s: finished.unwrap_or(f64::NAN),
        controller_cpu_s: cpu_end - cpu0,
        controller_cpu_s_registration: cpu_reg - cpu0,
        controller_cpu_s_jobs: cpu_end - cpu_jobs0,
        controller_rss_mib_max: rss_max,
        bench_cpu_s: bench_cpu,
        scheduling_passes: metric(&metrics_text, "tandem_scheduling_passes_total") as u64,
        scheduling_pass_ms_mean: 1000.0 * metric(&metrics_text, "tandem_scheduling_pass_seconds_sum")
            / metric(&metrics_text, "tandem_scheduling_passes_total").max(1.0),
        scheduling_lock_ms_mean: 1000.0 * metric(&metrics_text, "tandem_scheduling_pass_lock_seconds_total")
            / metric(&metrics_text, "tandem_scheduling_passes_total").max(1.0),
        scheduling_apply_ms_mean: 1000.0 * metric(&metrics_text, "tandem_scheduling_pass_apply_seconds_total")
            / metric(&metrics_text, "tandem_scheduling_passes_total").max(1.0),
        db_commits: metric(&metrics_text, "tandem_db_commits_total") as u64,
        db_records: metric(&metrics_text, "tandem_db_records_total") as u64,
        machine_load_avg_mean: loads.iter().sum::<f64>() / loads.len().max(1) as f64,
        first_error: sh.first_error.lock().expect("lock").clone(),
    })
}

/// Prints the figures as a table, beside the published figures of other systems.
pub fn print(r: &Report) {
    let l = |x: &Lat| format!("{:.1} / {:.1} ms (max {:.1}, n={})", x.p50_ms, x.p99_ms, x.max_ms, x.count);
    println!("configuration");
    println!("  nodes (simulated agents)        {}", r.count);
    println!("  per node                        {} GPUs, {} CPUs, {} GiB", r.gpus_per_node, r.cpus_per_node, r.mem_gib_per_node);
    println!("  lease / heartbeat interval      {} s / {:.1} s", r.lease_s, r.heartbeat_ms as f64 / 1000.0);
    println!(
        "  agent connections               {} HTTP/2 connections (see settings: TLS or h2c), {} agents each, from {}",
        r.connections,
        r.agents_per_connection,
        r.source_addresses.join(", ")
    );
    println!("  open-file limit                 {}", r.open_file_limit);
    println!("  jobs                            {}: {}", r.jobs, r.job_mix);
    println!(
        "  services                        {} x {} replicas (1 GPU each), all ready after {}",
        r.services.0,
        r.services.1,
        r.services_ready_s.map_or("(never)".to_string(), |t| format!("{t:.1} s"))
    );
    println!(
        "  simulated run time              {:.0}-{:.0} s; {} submitters; seed {}",
        r.run_time_s.0, r.run_time_s.1, r.submitters, r.seed
    );
    println!("  settings                        {}", r.settings);
    println!("results");
    println!("  joining of all nodes            {:.1} s (join round trip p50/p99 {})", r.join_s, l(&r.join_rtt));
    println!("  registration of all nodes       {:.1} s (register round trip p50/p99 {})", r.registration_s, l(&r.register_rtt));
    println!(
        "  idle cluster                    {:.2} controller CPU-s per s, {:.0} heartbeats/s (over {:.0} s)",
        r.idle_controller_cpu_per_s, r.idle_heartbeats_per_s, r.idle_window_s
    );
    println!("  idle cluster's commits          {} ({}; heartbeats that change nothing write nothing)", r.idle_db_commits, r.store);
    if r.store == "etcd" {
        println!("  etcd                            {} transactions, {:.1} s in all", r.etcd_transactions, r.etcd_commit_seconds);
    }
    println!("  submissions                     {:.1} s, {:.0} jobs/s", r.submit_s, r.submissions_per_s);
    println!("  API submit p50 / p99            {}", l(&r.api_submit));
    println!("  API get job p50 / p99           {}", l(&r.api_get_job));
    println!("  API list jobs p50 / p99         {} (up to {} rows)", l(&r.api_list_jobs), r.list_jobs_max_rows);
    println!("  API list nodes p50 / p99        {}", l(&r.api_list_nodes));
    println!("  heartbeat RTT with exits        {}", l(&r.heartbeat_rtt_with_exits));
    println!(
        "  task starts                     {} (peak {}/s, average {:.0}/s)",
        r.task_starts, r.task_starts_per_s_peak, r.task_starts_per_s_avg
    );
    if r.all_complete {
        println!("  all jobs complete after         {:.1} s (from the first submission)", r.all_complete_s);
    } else {
        println!("  NOT all jobs complete: {} completed, {} ended otherwise, of {}", r.completed, r.ended_otherwise, r.jobs);
    }
    println!("  jobs completed / ended other    {} / {}", r.completed, r.ended_otherwise);
    println!(
        "  controller CPU                  {:.1} s ({:.1} s registration, {:.1} s jobs); RSS max {:.0} MiB",
        r.controller_cpu_s, r.controller_cpu_s_registration, r.controller_cpu_s_jobs, r.controller_rss_mib_max
    );
    println!("  bench process CPU               {:.1} s (agents and clients, same machine)", r.bench_cpu_s);
    println!(
        "  scheduling passes               {} (mean {:.1} ms, of which {:.1} ms holding the controller, {:.1} ms of it applying the plan); {} database commits for {} records",
        r.scheduling_passes, r.scheduling_pass_ms_mean, r.scheduling_lock_ms_mean, r.scheduling_apply_ms_mean, r.db_commits, r.db_records
    );
    println!(
        "  machine load average (mean)     {:.1} on {} CPUs",
        r.machine_load_avg_mean,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "  heartbeats / errors             {} / {} ({} re-registrations, {} connections opened)",
        r.heartbeats, r.heartbeat_errors, r.reregistrations, r.connections_opened
    );
    println!(
        "  orders obeyed                   {} signals, {} kills; {} fenced tasks; {} unsupported scripts",
        r.signals_obeyed, r.kills_obeyed, r.fenced_tasks, r.unsupported_scripts
    );
    if let Some(e) = &r.first_error {
        println!("  first error                     {e}");
    }
    println!("published, for comparison");
    println!("  Kubernetes                      5,000 nodes supported; schedules about 100-400 pods/s");
    println!("  Nomad (C2M)                     about 1,500 containers placed per second");
    println!("  Slurm                           said to run 30,000 nodes");
    println!("  target                          100,000 nodes, API p99 < 100 ms, >= 5,000 task starts/s");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_time_from_the_wrapped_script() {
        let b = slurmcli::parse_sbatch(&["--wrap".into(), "sleep 7.5".into()], 0, &mut |_| unreachable!()).unwrap();
        assert_eq!(sim_run_time(Some(&b.script)), Some(Duration::from_millis(7500)));
        assert_eq!(sim_run_time(Some("#!/bin/sh\necho hi\n")), None);
        assert_eq!(sim_run_time(Some("#!/bin/sh\nsleep -1\n")), None);
        assert_eq!(sim_run_time(None), None);
    }

    #[test]
    fn signals_that_end_sleep() {
        assert!(ends_process(15) && ends_process(9) && ends_process(10) && ends_process(2));
        assert!(!ends_process(17) && !ends_process(18) && !ends_process(28) && !ends_process(0) && !ends_process(64));
    }

    #[test]
    fn metrics_by_state() {
        assert_eq!(metric("tandem_db_commits_total 42\ntandem_db_commits_totalx 1\n", "tandem_db_commits_total"), 42.0);
        let m = jobs_by_state(
            "# HELP x\ntandem_jobs{state=\"COMPLETED\"} 12\ntandem_jobs{state=\"PENDING\"} 3\ntandem_nodes{state=\"up\"} 5\n",
        );
        assert_eq!((m["COMPLETED"], m["PENDING"], m.len()), (12, 3, 2));
    }

    #[test]
    fn the_mix_is_seeded_and_valid() {
        let o = Opts {
            count: 100,
            jobs: 200,
            gpus_per_node: 8,
            cpus_per_node: 64,
            mem_gib: 512,
            lease: None,
            heartbeat: None,
            agents_per_conn: 128,
            sources: 1,
            submitters: 1,
            run_time: (10.0, 60.0),
            max_gang: 64,
            idle_s: 0.0,
            timeout_s: 1,
            seed: 3,
            services: (0, 0),
            insecure: false,
            etcd: false,
        };
        let (mut a, mut b) = (SmallRng::seed_from_u64(3), SmallRng::seed_from_u64(3));
        for _ in 0..200 {
            let x = job_args(&mut a, &o);
            assert_eq!(x, job_args(&mut b, &o));
            let spec = slurmcli::parse_sbatch(&x, 0, &mut |_| unreachable!()).unwrap();
            let t = sim_run_time(Some(&spec.script)).unwrap();
            assert!((10.0..=60.0).contains(&t.as_secs_f64()), "{x:?}");
        }
    }
}
