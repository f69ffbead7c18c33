//! `tandem bench takeover`: what a standby's takeover costs when etcd holds many jobs.
//!
//! Three etcd members on this machine (as `tandem up --ha` starts them), a leading controller
//! and a standby keeping its replica by watching, and real agents. It submits `--jobs` jobs one
//! request each through the API (not an array, which is one record): `--finished` of them
//! `--wrap true`, run to their end, and the rest held, so they stay pending. Then it reports
//! what etcd stores (its members' database files, the standby's replica), both controllers'
//! RSS, `sacct` over every finished job, and kills the leader (`kill -9`): the takeover time is
//! from the kill to the first submission the new leader acknowledges (a client given both
//! controllers, following the standby's answer), with the lease it ran on.

use anyhow::{Context, Result, bail};
use serde::Serialize;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::submit::{rss_mib, submit_many, wait_idle};
use client::{Target, send};
use wire::{SubmitRequest, SubmitResponse};

/// The leader's lease the controllers run on: the default (`store::etcd::LEASE_TTL`).
const LEASE_S: u32 = 3;

/// What a run measured.
#[derive(Serialize)]
pub struct Report {
    jobs: u32,
    finished: u32,
    held: u32,
    agents: u32,
    lease_s: u32,
    submit_and_finish_s: f64,
    etcd_db_bytes_max: i64,
    etcd_db_bytes_in_use_max: i64,
    replica_bytes: u64,
    leader_rss_mib: f64,
    standby_rss_mib: f64,
    sacct_one_s: f64,
    sacct_s: f64,
    sacct_lines: usize,
    takeover_s: f64,
    new_leader_rss_mib: f64,
    jobs_after_takeover: usize,
}

/// Runs it.
pub fn run(jobs: u32, finished: f64, agents: u32, concurrency: u32) -> Result<Report> {
    if jobs == 0 || !(0.0..=1.0).contains(&finished) || agents == 0 || concurrency == 0 {
        bail!("--jobs, --agents and --concurrency must be positive, --finished between 0 and 1");
    }
    let done = (jobs as f64 * finished).round() as u32;
    let held = jobs - done;
    let dir: PathBuf = std::env::temp_dir().join(format!("tandem-bench-takeover-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("ctl"))?;
    let exe = std::env::current_exe()?;
    let log = |n: &str| std::fs::File::create(dir.join(n));
    let members = up::etcd::Etcd::start(&dir.join("etcd"), 3).context("starting etcd (apt-get install etcd-server)")?;
    let store = members.server_args();
    let mut procs = up::Kids(Vec::new());
    let server = |name: &str| -> Result<std::process::Child> {
        Ok(Command::new(&exe)
            .args(["server", "--listen", "127.0.0.1:0", "--lease", "30", "--data"])
            .arg(dir.join(name))
            .args(&store)
            .stdout(Stdio::null())
            .stderr(log(&format!("{name}.log"))?)
            .spawn()?)
    };
    procs.0.push(server("ctl")?);
    let leader_pid = procs.0[0].id();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dir.join("ctl/tandem.sock").exists() || std::fs::read_to_string(dir.join("ctl/addr")).map_or(true, |s| s.trim().is_empty()) {
        if Instant::now() > deadline {
            bail!("the controller did not start; see {}", dir.join("ctl.log").display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let addr = std::fs::read_to_string(dir.join("ctl/addr"))?.trim().to_string();
    let sock = |name: &str| format!("unix://{}", dir.join(name).join("tandem.sock").display());
    let t = Target::parse(&sock("ctl"))?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    // The first answer means it leads and made the CA and keys: the standby gets copies.
    let joins = rt.block_on(crate::join_tokens(&t, agents))?;
    std::fs::create_dir_all(dir.join("ctl2"))?;
    for f in up::SHARED_FILES {
        let text = std::fs::read(dir.join("ctl").join(f))?;
        up::write_file(&dir.join("ctl2").join(f), &String::from_utf8_lossy(&text), if f.ends_with(".pem") { 0o644 } else { 0o600 })?;
    }
    procs.0.push(server("ctl2")?);
    let standby_pid = procs.0[1].id();
    for i in 1..=agents {
        procs.0.push(crate::submit::spawn_agent(&exe, &dir, i, &addr, 16, &joins[i as usize - 1])?);
    }
    let work = dir.join("work");
    std::fs::create_dir_all(&work)?;
    let req = |extra: &[&str]| -> Result<SubmitRequest> {
        let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        args.extend(["-o", "/dev/null", "--wrap", "true"].map(String::from));
        let b = slurmcli::parse_sbatch(&args, 0, &mut |_| unreachable!()).map_err(|e| anyhow::anyhow!("{}", e.0))?;
        Ok(SubmitRequest { batch: b, cwd: work.display().to_string(), host: "bench".into(), env: vec![], umask: None })
    };
    let started = Instant::now();
    let mut rss = 0.0;
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(60);
        while send(&t, "GET", "/v1/nodes", None::<&()>, &[]).await?.json::<Vec<wire::NodeInfo>>()?.len() < agents as usize {
            if Instant::now() > deadline {
                bail!("the agents did not register");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        submit_many(&t, &req(&[])?, done, concurrency).await?;
        wait_idle(&t, leader_pid, &mut rss).await?;
        submit_many(&t, &req(&["--hold"])?, held, concurrency).await
    })?;
    let submit_and_finish_s = started.elapsed().as_secs_f64();
    eprintln!("bench takeover: {done} jobs finished and {held} held in {submit_and_finish_s:.1} s");
    // The standby has caught up once it has seen the last job: give its watch a moment.
    std::thread::sleep(Duration::from_secs(3));
    let status: wire::ClusterStatus = rt.block_on(send(&t, "GET", "/v1/status", None::<&()>, &[]))?.json()?;
    let e = status.etcd.context("the controller runs on etcd")?;
    let (leader_rss_mib, standby_rss_mib) = (rss_mib(leader_pid), rss_mib(standby_pid));
    let replica_bytes = std::fs::metadata(dir.join("ctl2/replica.db")).map_or(0, |m| m.len());
    // sacct over every finished job (its history is answered from the leader's replica).
    let shims = dir.join("bin");
    Command::new(&exe).arg("shims").arg(&shims).stdout(Stdio::null()).status()?;
    // One job among them (`sacct -j`: read by its id), then every finished one.
    let one = (done / 2).max(1).to_string();
    let s = Instant::now();
    let o = Command::new(shims.join("sacct"))
        .args(["-X", "-n", "-P", "-o", "JobID,State", "-j", &one])
        .env("TANDEM_SERVER", sock("ctl"))
        .output()?;
    let sacct_one_s = s.elapsed().as_secs_f64();
    if done > 0 && !String::from_utf8_lossy(&o.stdout).contains(&format!("{one}|COMPLETED")) {
        bail!("sacct -j {one}: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    }
    let s = Instant::now();
    let o = Command::new(shims.join("sacct"))
        .args(["-a", "-X", "-n", "-P", "-o", "JobID,State", "-S", "2000-01-01", "-s", "CD"])
        .env("TANDEM_SERVER", sock("ctl"))
        .output()?;
    let sacct_s = s.elapsed().as_secs_f64();
    if !o.status.success() {
        bail!("sacct failed: {}", String::from_utf8_lossy(&o.stderr));
    }
    let sacct_lines = String::from_utf8_lossy(&o.stdout).lines().count();
    // The takeover: kill -9 of the leader, then submissions through both controllers until
    // one is acknowledged.
    let both = Target::parse(&format!("{},{}", sock("ctl"), sock("ctl2")))?;
    let one = req(&["--hold"])?;
    let killed = Instant::now();
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(leader_pid as i32), nix::sys::signal::Signal::SIGKILL);
    let takeover_s = rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let r = tokio::time::timeout(Duration::from_secs(5), send(&both, "POST", "/v1/jobs", Some(&one), &[])).await;
            if let Ok(Ok(r)) = r
                && r.json::<SubmitResponse>().is_ok()
            {
                return Ok(killed.elapsed().as_secs_f64());
            }
            if Instant::now() > deadline {
                bail!("no controller took over in 300 s");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })?;
    let t2 = Target::parse(&sock("ctl2"))?;
    let after: Vec<wire::JobInfo> = rt.block_on(send(&t2, "GET", "/v1/jobs", None::<&()>, &[]))?.json()?;
    let new_leader_rss_mib = rss_mib(standby_pid);
    drop(procs);
    drop(members);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Report {
        jobs,
        finished: done,
        held,
        agents,
        lease_s: LEASE_S,
        submit_and_finish_s,
        etcd_db_bytes_max: e.members.iter().map(|m| m.db_bytes).max().unwrap_or(0),
        etcd_db_bytes_in_use_max: e.members.iter().map(|m| m.db_bytes_in_use).max().unwrap_or(0),
        replica_bytes,
        leader_rss_mib,
        standby_rss_mib,
        sacct_one_s,
        sacct_s,
        sacct_lines,
        takeover_s,
        new_leader_rss_mib,
        jobs_after_takeover: after.len(),
    })
}

/// Prints the figures.
pub fn print(r: &Report) {
    println!("jobs                       {} ({} finished, {} held pending), {} agents", r.jobs, r.finished, r.held, r.agents);
    println!("submitted and finished in  {:.1} s", r.submit_and_finish_s);
    println!(
        "etcd database              {:.1} MiB ({:.1} MiB in use), the largest member",
        r.etcd_db_bytes_max as f64 / 1048576.0,
        r.etcd_db_bytes_in_use_max as f64 / 1048576.0
    );
    println!("standby's replica          {:.1} MiB", r.replica_bytes as f64 / 1048576.0);
    println!("RSS                        leader {:.1} MiB, standby {:.1} MiB", r.leader_rss_mib, r.standby_rss_mib);
    println!("sacct -j, one of them      {:.3} s", r.sacct_one_s);
    println!("sacct of every finished    {:.3} s ({} lines)", r.sacct_s, r.sacct_lines);
    println!(
        "takeover                   {:.2} s from kill -9 of the leader to the next acknowledged submission (lease {} s)",
        r.takeover_s, r.lease_s
    );
    println!("new leader                 RSS {:.1} MiB, {} jobs pending", r.new_leader_rss_mib, r.jobs_after_takeover);
}
