//! `tandem bench submit`: throughput of a real local cluster with production defaults (durable
//! commits, Unix-socket identity, real process launches): a controller and N agents as separate
//! processes, trivial jobs (`--wrap true`).

use anyhow::{Context, Result, bail};
use serde::Serialize;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::{Target, send};
use wire::{JobInfo, NodeInfo, SubmitRequest, SubmitResponse};

/// The figures.
#[derive(Serialize)]
pub struct Report {
    agents: u32,
    cpus_per_agent: u32,
    api_jobs: u32,
    cli_jobs: u32,
    cli_submissions_per_s: f64,
    api_submissions_per_s: f64,
    all_completed_s: f64,
    completed_jobs_per_s: f64,
    controller_rss_mib_max: f64,
    squeue_api_ms_median: f64,
    squeue_cli_ms_median: f64,
    pending_for_squeue: u32,
    settings: &'static str,
    /// Kubernetes watches of every Pod kept open meanwhile (`--kube-watchers`), and the events
    /// they received.
    kube_watchers: u32,
    kube_watch_events: u64,
    /// CPU time the controller used over the whole run (user and system, seconds).
    controller_cpu_s: f64,
}

/// A process's CPU time so far, user and system, seconds (`/proc/PID/stat`).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest.split_whitespace().map(|x| x.parse().unwrap_or(0.0)).collect();
    let ticks = f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0);
    ticks / nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100) as f64
}

/// A Kubernetes client's watch of every Pod, as client-go's reflector keeps one: watch from the
/// last version seen, each request ending after 2 s; list again (a watch without a version) on
/// `410 Expired`. Counts the events into `events` until `stop`.
async fn kube_watch(t: Target, stop: Arc<AtomicBool>, events: Arc<AtomicU64>) {
    let mut rv = String::new();
    while !stop.load(Ordering::Relaxed) {
        let path = if rv.is_empty() {
            "/api/v1/pods?watch=1&timeoutSeconds=2".to_string()
        } else {
            format!("/api/v1/pods?watch=1&timeoutSeconds=2&resourceVersion={rv}")
        };
        let Ok(r) = send(&t, "GET", &path, None::<&()>, &[]).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        for line in r.body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let Ok(ev) = serde_json::from_slice::<serde_json::Value>(line) else { continue };
            if ev["type"] == "ERROR" {
                rv.clear();
                continue;
            }
            events.fetch_add(1, Ordering::Relaxed);
            if let Some(v) = ev["object"]["metadata"]["resourceVersion"].as_str() {
                rv = v.to_string();
            }
        }
    }
}

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use up::Kids as Procs;

/// Starts agent `nodeI` (data in `dir/nodeI`, log `dir/nodeI.log`) with `cpus` CPUs, joining
/// the controller at `addr` (its CA in `dir/ctl/ca.pem`) with `join`.
pub(crate) fn spawn_agent(
    exe: &std::path::Path,
    dir: &std::path::Path,
    i: u32,
    addr: &str,
    cpus: u32,
    join: &str,
) -> Result<std::process::Child> {
    let d = dir.join(format!("node{i}"));
    std::fs::create_dir_all(&d)?;
    // The token is the caller's alone until the agent spends it.
    up::write_file(&d.join("join-token"), join, 0o600)?;
    Ok(Command::new(exe)
        .args([
            "agent",
            "--server",
            &format!("https://{addr}"),
            "--name",
            &format!("node{i}"),
            "--cpus",
            &cpus.to_string(),
            "--memory",
            "64G",
        ])
        .arg("--join-token-file")
        .arg(d.join("join-token"))
        .arg("--ca")
        .arg(dir.join("ctl/ca.pem"))
        .arg("--data")
        .arg(&d)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("node{i}.log")))?)
        .spawn()?)
}

pub(crate) fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("VmRSS:").map(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().unwrap_or(0.0)))
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

pub(crate) async fn wait_idle(t: &Target, pid: u32, rss: &mut f64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(3600);
    loop {
        *rss = rss.max(rss_mib(pid));
        let jobs: Vec<JobInfo> = send(t, "GET", "/v1/jobs", None::<&()>, &[]).await?.json()?;
        if jobs.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{} jobs still not finished after an hour", jobs.len());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub(crate) async fn submit_many(t: &Target, req: &SubmitRequest, n: u32, concurrency: u32) -> Result<()> {
    let sem = Arc::new(tokio::sync::Semaphore::new(concurrency as usize));
    let req = Arc::new(req.clone());
    let mut handles = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let permit = sem.clone().acquire_owned().await?;
        let (t, req) = (t.clone(), req.clone());
        handles.push(tokio::spawn(async move {
            let r = send(&t, "POST", "/v1/jobs", Some(&*req), &[]).await.and_then(|r| r.json::<SubmitResponse>());
            drop(permit);
            r
        }));
    }
    for h in handles {
        h.await??;
    }
    Ok(())
}

/// Runs the benchmark.
pub fn run(jobs: u32, cli_jobs: u32, agents: u32, cpus: u32, concurrency: u32, kube_watchers: u32, etcd: bool) -> Result<Report> {
    let dir: PathBuf = std::env::temp_dir().join(format!("tandem-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("ctl"))?;
    let exe = std::env::current_exe()?;
    let mut procs = Procs(Vec::new());
    let log = |n: &str| std::fs::File::create(dir.join(n));
    // With --etcd: three members (as `tandem up --ha` runs them), the controller on them, and
    // a standby that keeps its replica by watching (started below, once the keys exist).
    let members = match etcd {
        true => Some(up::etcd::Etcd::start(&dir.join("etcd"), 3).context("starting etcd (apt-get install etcd-server)")?),
        false => None,
    };
    let store: Vec<String> = members.as_ref().map(up::etcd::Etcd::server_args).unwrap_or_default();
    procs.0.push(
        Command::new(&exe)
            .args(["server", "--listen", "127.0.0.1:0", "--data"])
            .arg(dir.join("ctl"))
            .args(&store)
            .stdout(Stdio::null())
            .stderr(log("controller.log")?)
            .spawn()
            .context("starting the controller")?,
    );
    let ctl_pid = procs.0[0].id();
    let addr_file = dir.join("ctl/addr");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&addr_file).map_or(true, |s| s.trim().is_empty()) {
        if Instant::now() > deadline {
            bail!("the controller did not start");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let addr = std::fs::read_to_string(&addr_file)?.trim().to_string();
    let sock = format!("unix://{}", dir.join("ctl/tandem.sock").display());
    let t = Target::parse(&sock)?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let joins = rt.block_on(crate::join_tokens(&t, agents))?;
    if etcd {
        std::fs::create_dir_all(dir.join("ctl2"))?;
        for f in up::SHARED_FILES {
            let text = std::fs::read(dir.join("ctl").join(f))?;
            up::write_file(&dir.join("ctl2").join(f), &String::from_utf8_lossy(&text), if f.ends_with(".pem") { 0o644 } else { 0o600 })?;
        }
        procs.0.push(
            Command::new(&exe)
                .args(["server", "--listen", "127.0.0.1:0", "--data"])
                .arg(dir.join("ctl2"))
                .args(&store)
                .stdout(Stdio::null())
                .stderr(log("standby.log")?)
                .spawn()
                .context("starting the standby")?,
        );
    }
    for i in 1..=agents {
        procs.0.push(spawn_agent(&exe, &dir, i, &addr, cpus, &joins[i as usize - 1])?);
    }
    let mut rss = 0.0f64;
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let n: Vec<NodeInfo> = send(&t, "GET", "/v1/nodes", None::<&()>, &[]).await?.json()?;
            if n.len() as u32 >= agents {
                return Ok::<_, anyhow::Error>(());
            }
            if Instant::now() > deadline {
                bail!("agents did not register");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })?;
    let work = dir.join("work");
    std::fs::create_dir_all(&work)?;
    let stop = Arc::new(AtomicBool::new(false));
    let events = Arc::new(AtomicU64::new(0));
    let watches: Vec<_> = (0..kube_watchers).map(|_| rt.spawn(kube_watch(t.clone(), stop.clone(), events.clone()))).collect();
    // 1. A loop of the CLI, one process per submission, as a user's shell loop would: through
    // the `sbatch` link that `tandem shims` writes (to `tandem-slurm`).
    let shims = dir.join("bin");
    let st = Command::new(&exe).arg("shims").arg(&shims).stdout(Stdio::null()).status()?;
    if !st.success() {
        bail!("tandem shims failed (is tandem-slurm beside {}?)", exe.display());
    }
    let started = Instant::now();
    for _ in 0..cli_jobs {
        let st = Command::new(shims.join("sbatch"))
            .args(["--parsable", "-o", "/dev/null", "--wrap", "true"])
            .env("TANDEM_SERVER", &sock)
            .current_dir(&work)
            .stdout(Stdio::null())
            .status()?;
        if !st.success() {
            bail!("a CLI submission failed");
        }
    }
    let cli_rate = cli_jobs as f64 / started.elapsed().as_secs_f64().max(1e-9);
    rss = rss.max(rss_mib(ctl_pid));
    rt.block_on(wait_idle(&t, ctl_pid, &mut rss))?;
    // 2. The API, many requests in flight; then until every job has completed.
    let batch = |extra: &[&str]| -> Result<SubmitRequest> {
        let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        args.extend(["-o", "/dev/null", "--wrap", "true"].map(String::from));
        let b = slurmcli::parse_sbatch(&args, 0, &mut |_| unreachable!()).map_err(|e| anyhow::anyhow!("{}", e.0))?;
        Ok(SubmitRequest {
            batch: b,
            cwd: work.display().to_string(),
            host: "bench".into(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            umask: None,
        })
    };
    let req = batch(&[])?;
    let started = Instant::now();
    rt.block_on(submit_many(&t, &req, jobs, concurrency))?;
    let api_rate = jobs as f64 / started.elapsed().as_secs_f64().max(1e-9);
    rt.block_on(wait_idle(&t, ctl_pid, &mut rss))?;
    let all = started.elapsed().as_secs_f64();
    // 3. squeue with `jobs` pending (held).
    let held = batch(&["--hold"])?;
    rt.block_on(submit_many(&t, &held, jobs, concurrency))?;
    rss = rss.max(rss_mib(ctl_pid));
    let mut api_ms = Vec::new();
    for _ in 0..5 {
        let s = Instant::now();
        let v: Vec<JobInfo> = rt.block_on(send(&t, "GET", "/v1/jobs", None::<&()>, &[]))?.json()?;
        api_ms.push(s.elapsed().as_secs_f64() * 1000.0);
        if v.len() as u32 != jobs {
            bail!("expected {jobs} pending jobs, saw {}", v.len());
        }
    }
    // The watches end their requests (at most 2 s) while the controller still answers.
    stop.store(true, Ordering::Relaxed);
    for w in watches {
        let _ = rt.block_on(w);
    }
    let mut cli_ms = Vec::new();
    for _ in 0..3 {
        let s = Instant::now();
        let st = Command::new(&exe).arg("queue").env("TANDEM_SERVER", &sock).stdout(Stdio::null()).status()?;
        cli_ms.push(s.elapsed().as_secs_f64() * 1000.0);
        if !st.success() {
            bail!("squeue failed");
        }
    }
    let controller_cpu_s = cpu_seconds(ctl_pid);
    drop(procs);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Report {
        agents,
        cpus_per_agent: cpus,
        api_jobs: jobs,
        cli_jobs,
        cli_submissions_per_s: cli_rate,
        api_submissions_per_s: api_rate,
        all_completed_s: all,
        completed_jobs_per_s: jobs as f64 / all.max(1e-9),
        controller_rss_mib_max: rss,
        squeue_api_ms_median: median(api_ms),
        squeue_cli_ms_median: median(cli_ms),
        pending_for_squeue: jobs,
        settings: if etcd {
            "durable commits (etcd, three members on this machine, TLS, and a standby controller watching), Unix-socket peer-credential identity, real process launches, lease 30 s"
        } else {
            "durable commits (SQLite WAL, synchronous=FULL), Unix-socket peer-credential identity, real process launches, lease 30 s"
        },
        kube_watchers,
        kube_watch_events: events.load(Ordering::Relaxed),
        controller_cpu_s,
    })
}

/// Prints the figures as a table.
pub fn print(r: &Report) {
    println!("cluster                     controller + {} agents ({} CPUs each), separate processes", r.agents, r.cpus_per_agent);
    println!("settings                    {}", r.settings);
    println!("CLI loop submissions        {:.1} /s ({} jobs, one process each)", r.cli_submissions_per_s, r.cli_jobs);
    println!("API submissions             {:.1} /s ({} jobs)", r.api_submissions_per_s, r.api_jobs);
    println!("API jobs all completed in   {:.1} s ({:.1} completed jobs/s)", r.all_completed_s, r.completed_jobs_per_s);
    println!("controller RSS (max)        {:.1} MiB", r.controller_rss_mib_max);
    println!("controller CPU              {:.1} s over the run", r.controller_cpu_s);
    println!(
        "squeue with {} pending   API {:.1} ms, CLI {:.1} ms (median)",
        r.pending_for_squeue, r.squeue_api_ms_median, r.squeue_cli_ms_median
    );
    if r.kube_watchers > 0 {
        println!("Kubernetes Pod watches      {} open throughout, {} events received", r.kube_watchers, r.kube_watch_events);
    }
}
