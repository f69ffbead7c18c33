//! Every benchmark harness (`tandem bench sched|submit|agents|proxy|llm|failover|chaos|flood|load`), the HTTP
//! load generator (`loadgen`), the test upstream (`tandem __upstream`), the flood attacker
//! (`tandem __flood`), the LLM server stand-in
//! (`tandem __llm`: `llmserver` over the sans-IO `llmsim`) and the simulated agents (`agents`). Nothing in the product depends on this crate (the tidy test checks). It drives
//! the real daemons from outside, as a user or a peer would: it starts them through `up` (as
//! processes) and talks to them through `client` and `wire`; only `bench sched` runs a decision
//! crate (`sched`) in process, on synthetic clusters (`trace`).
//! Its public face is [`BenchCmd`] with [`run`], [`upstream`] with [`UPSTREAM_CMD`],
//! [`llm_server`] with [`LLM_CMD`], and [`flood_attacker`] with [`FLOOD_CMD`].
//!
//! This file is `tandem bench sched`: it times scheduling passes on large synthetic clusters.
//! The state is built the way a cluster gets there: jobs of the synthetic mix are started by
//! the scheduler itself (start times spread over their time limits in the past) until the
//! cluster is nearly full, then `--pending` more jobs wait. The figures are the wall time of a
//! full pass over that snapshot (median of `--repeat` runs of the same pure function), and of
//! the submit fast path for typical new jobs that do not change the top reservation.

mod agents;
mod chaos;
mod failover;
mod fairness;
mod flood;
mod llm;
mod llmserver;
mod llmsim;
mod loadgen;
mod procs;
mod proxy;
mod relay;
mod submit;
mod takeover;
mod upstream;

pub use flood::{FLOOD_CMD, attacker as flood_attacker};
pub use llmserver::{LLM_CMD, run as llm_server};
pub use upstream::{UPSTREAM_CMD, run as upstream};

use anyhow::{Result, bail};
use clap::Subcommand;
use model::{ClusterConfig, DepStatus, Time};
use sched::{Backfill, Carry, Config, FairShare, NodeUsage, Pending, Plan, Running, Scheduler, Snapshot};
use serde::Serialize;
use std::time::Instant;

/// `n` single-use join tokens from the controller at `t` (its Unix socket: the benchmark runs
/// as the controller's user, an administrator), for agents that join as real ones do.
pub(crate) async fn join_tokens(t: &client::Target, n: u32) -> Result<Vec<String>> {
    let mut out = Vec::with_capacity(n as usize);
    while out.len() < n as usize {
        let count = (n as usize - out.len()).min(wire::MAX_JOIN_TOKENS as usize);
        let req = wire::JoinTokensRequest { count: Some(count as u32), lifetime: Some(86400) };
        let v: wire::JoinTokens = client::send(t, "POST", "/v1/join-tokens", Some(&req), &[]).await?.json()?;
        out.extend(v.tokens);
    }
    Ok(out)
}

/// Benchmarks.
#[derive(Subcommand)]
pub enum BenchCmd {
    /// HTTP load generator: closed loop (`--concurrency`) or open loop (`--rate`), latency
    /// percentiles, failures by kind, answers per `x-tandem-replica`.
    Load(crate::loadgen::LoadArgs),
    /// `tandem proxy` against nginx in front of the same upstreams: throughput and latency.
    Proxy(crate::proxy::BenchProxyArgs),
    /// The proxy's balancing policies side by side in front of LLM server stand-ins: time to
    /// first token, time per output token, latency, throughput, prefix-cache hit rate, shed.
    Llm(crate::llm::BenchLlmArgs),
    /// A service behind the proxy on a local cluster while one node dies (`kill -9`): failed
    /// requests, time to replace the replica, latency; beside Kubernetes' defaults.
    Failover(crate::failover::FailoverArgs),
    /// One user floods the controller (50,000 connection attempts from several processes,
    /// half-sent requests, a request flood) while another submits and queries and agents
    /// heartbeat: their latencies beside an unloaded run, and what the attacker was let hold.
    Flood(crate::flood::FloodArgs),
    /// A real cluster (agents in network namespaces of their own) under a workload of batch
    /// jobs and a service, with seeded faults (kill -9 of any daemon or task, partitions both
    /// ways and one way), checked against invariants: no job stuck, run twice, or run after its
    /// cancel; no submission lost; steady state within a bound; no failed request. Needs root.
    Chaos(crate::chaos::ChaosArgs),
    /// A standby's takeover with many jobs stored in etcd: three members, two controllers,
    /// agents; `--jobs` submitted one request each, `--finished` of them run to their end and
    /// the rest held; then etcd's size, both controllers' RSS, `sacct` over the finished jobs,
    /// and the time from `kill -9` of the leader to the next acknowledged submission.
    Takeover {
        /// Jobs submitted (one request each).
        #[arg(long, default_value_t = 100_000)]
        jobs: u32,
        /// The share of them run to their end (the rest held pending).
        #[arg(long, default_value_t = 0.9)]
        finished: f64,
        /// Node agents (separate processes, 16 CPUs each).
        #[arg(long, default_value_t = 4)]
        agents: u32,
        /// API requests in flight at once.
        #[arg(long, default_value_t = 32)]
        concurrency: u32,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Job throughput of a real local cluster: submissions per second (CLI loop and API),
    /// completed jobs per second, controller RSS and `squeue` latency with many jobs pending.
    Submit {
        /// Jobs submitted through the API (and, held, for the squeue measurement).
        #[arg(long, default_value_t = 10_000)]
        jobs: u32,
        /// Jobs submitted by a loop of the CLI (one process per submission).
        #[arg(long, default_value_t = 1_000)]
        cli_jobs: u32,
        /// Node agents (separate processes).
        #[arg(long, default_value_t = 4)]
        agents: u32,
        /// CPUs each agent declares (how many trivial jobs it runs at once).
        #[arg(long, default_value_t = 16)]
        cpus_per_agent: u32,
        /// API requests in flight at once.
        #[arg(long, default_value_t = 32)]
        concurrency: u32,
        /// Kubernetes watches of every Pod to keep open meanwhile (what the Kubernetes API's
        /// views cost the batch system).
        #[arg(long, default_value_t = 0)]
        kube_watchers: u32,
        /// Keep the state in a three-member etcd on this machine (Debian's etcd-server; the
        /// daemons built with `--features etcd`), with a standby controller watching it.
        #[arg(long)]
        etcd: bool,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// The controller under many nodes: a real server, N simulated agents speaking the agent
    /// protocol over HTTP/2, and a client submitting jobs of mixed gang sizes.
    Agents {
        /// Simulated node agents.
        #[arg(long, default_value_t = 30_000)]
        count: u32,
        /// Services applied before the jobs (replicas of one GPU each).
        #[arg(long, default_value_t = 4)]
        services: u32,
        /// Replicas of each service.
        #[arg(long, default_value_t = 16)]
        replicas: u32,
        /// Jobs submitted (through `POST /v1/jobs`).
        #[arg(long, default_value_t = 100_000)]
        jobs: u32,
        /// GPUs each node declares.
        #[arg(long, default_value_t = 8)]
        gpus_per_node: u32,
        /// CPUs each node declares.
        #[arg(long, default_value_t = 64)]
        cpus_per_node: u32,
        /// Memory each node declares, GiB.
        #[arg(long, default_value_t = 512)]
        mem_gib: u64,
        /// Node lease, seconds (default: three heartbeat intervals, at least 30).
        #[arg(long)]
        lease: Option<u32>,
        /// Heartbeat interval, seconds (default: count / 1,000, between 3 and 100).
        #[arg(long)]
        heartbeat: Option<f64>,
        /// Agents sharing one HTTP/2 connection (the controller allows 200 streams each).
        #[arg(long, default_value_t = 128)]
        agents_per_conn: u32,
        /// Local source addresses 127.0.0.1..=127.0.0.N for the connections.
        #[arg(long, default_value_t = 4)]
        sources: u32,
        /// Submissions in flight at once.
        #[arg(long, default_value_t = 16)]
        submitters: u32,
        /// Simulated run time of each job, MIN-MAX seconds (uniform).
        #[arg(long, default_value = "10-60")]
        run_time: String,
        /// Largest gang, nodes.
        #[arg(long, default_value_t = 64)]
        max_gang: u32,
        /// Seconds to watch the idle cluster after registration.
        #[arg(long)]
        idle: Option<f64>,
        /// Give up waiting for the jobs after this many seconds.
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
        /// Seed of the job mix.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Plain HTTP/2 to an `--insecure` controller instead of TLS (to measure what TLS costs).
        #[arg(long)]
        insecure: bool,
        /// Keep the state in a three-member etcd on this machine (Debian's etcd-server; the
        /// daemons built with `--features etcd`).
        #[arg(long)]
        etcd: bool,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Time one full scheduling pass, and the pass after a new submission, on a synthetic cluster.
    Sched {
        /// Nodes.
        #[arg(long, default_value_t = 30_000)]
        nodes: u32,
        /// GPUs per node.
        #[arg(long, default_value_t = 8)]
        gpus_per_node: u32,
        /// Pending jobs during the measured pass.
        #[arg(long, default_value_t = 100_000)]
        pending: u32,
        /// Backfill mode of the measured pass: easy or conservative.
        #[arg(long, default_value = "easy")]
        backfill: String,
        /// Timed repetitions of the full pass.
        #[arg(long, default_value_t = 5)]
        repeat: u32,
        /// New submissions timed through the fast path.
        #[arg(long, default_value_t = 200)]
        submissions: u32,
        /// Advance reservations in the snapshot: each a maintenance of one node (spread over
        /// the cluster), starting 10 minutes from now plus a minute per reservation, an hour
        /// long, so that every pending job longer than that is kept off their nodes.
        #[arg(long, default_value_t = 0)]
        reservations: u32,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Serialize)]
struct SchedReport {
    nodes: u32,
    gpus_per_node: u32,
    pending: usize,
    running: usize,
    gpu_busy_fraction: f64,
    policy: &'static str,
    backfill: String,
    reservations: u32,
    seed: u64,
    full_pass_ms_median: f64,
    full_pass_ms_min: f64,
    full_pass_started: usize,
    full_pass_reservations: usize,
    submit_pass_us_median: f64,
    submit_pass_us_p99: f64,
    submit_fast_path_share: f64,
    setup_s: f64,
}

/// Runs a benchmark.
/// Prints a benchmark's report: one JSON object, or its table.
fn report<R: serde::Serialize>(json: bool, r: &R, print: fn(&R)) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(r)?);
    } else {
        print(r);
    }
    Ok(())
}

/// Runs one benchmark.
pub fn run(cmd: BenchCmd) -> Result<()> {
    match cmd {
        BenchCmd::Load(a) => crate::loadgen::run(a),
        BenchCmd::Chaos(a) if a.plan => {
            crate::chaos::print_plan(&a);
            Ok(())
        }
        BenchCmd::Chaos(a) => {
            let json = a.json;
            let r = crate::chaos::run(a)?;
            report(json, &r, crate::chaos::print)?;
            if !r.violations.is_empty() {
                bail!("{} invariant(s) violated with --seed {}", r.violations.len(), r.seed);
            }
            Ok(())
        }
        BenchCmd::Flood(a) => {
            let json = a.json;
            let r = crate::flood::run(a)?;
            report(json, &r, crate::flood::print)
        }
        BenchCmd::Failover(a) => {
            let json = a.json;
            let r = crate::failover::run(a)?;
            report(json, &r, crate::failover::print)
        }
        BenchCmd::Llm(a) if a.workload == "fairness" => {
            let json = a.json;
            let r = crate::fairness::run(a)?;
            report(json, &r, crate::fairness::print)
        }
        BenchCmd::Llm(a) => {
            let json = a.json;
            let r = crate::llm::run(a)?;
            report(json, &r, crate::llm::print)
        }
        BenchCmd::Proxy(a) => {
            let json = a.json;
            let r = crate::proxy::run(a)?;
            report(json, &r, crate::proxy::print)
        }
        BenchCmd::Takeover { jobs, finished, agents, concurrency, json } => {
            let r = crate::takeover::run(jobs, finished, agents, concurrency)?;
            report(json, &r, crate::takeover::print)
        }
        BenchCmd::Submit { jobs, cli_jobs, agents, cpus_per_agent, concurrency, kube_watchers, etcd, json } => {
            if jobs == 0 || agents == 0 || concurrency == 0 {
                bail!("--jobs, --agents and --concurrency must be positive");
            }
            let r = crate::submit::run(jobs, cli_jobs, agents, cpus_per_agent, concurrency, kube_watchers, etcd)?;
            report(json, &r, crate::submit::print)
        }
        BenchCmd::Agents {
            count,
            services,
            replicas,
            jobs,
            gpus_per_node,
            cpus_per_node,
            mem_gib,
            lease,
            heartbeat,
            agents_per_conn,
            sources,
            submitters,
            run_time,
            max_gang,
            idle,
            timeout,
            seed,
            insecure,
            etcd,
            json,
        } => {
            let (a, b) = run_time.split_once('-').unwrap_or((&run_time, &run_time));
            let parse = |x: &str| x.trim().parse::<f64>().map_err(|_| anyhow::anyhow!("--run-time {run_time:?}: expected MIN-MAX seconds"));
            let run_time = (parse(a)?, parse(b)?);
            // Watch the idle cluster for one heartbeat interval (each agent heartbeats once), at most 60 s.
            let hb = heartbeat.unwrap_or_else(|| (count as f64 / 1000.0).clamp(3.0, 100.0));
            let idle_s = idle.unwrap_or(hb.min(60.0));
            let o = crate::agents::Opts {
                count,
                jobs,
                gpus_per_node,
                cpus_per_node,
                mem_gib,
                lease,
                heartbeat,
                agents_per_conn,
                sources,
                submitters,
                run_time,
                max_gang,
                idle_s,
                timeout_s: timeout,
                seed,
                services: (services, replicas),
                insecure,
                etcd,
            };
            let r = crate::agents::run(o)?;
            report(json, &r, crate::agents::print)
        }
        BenchCmd::Sched { nodes, gpus_per_node, pending, backfill, repeat, submissions, reservations, seed, json } => {
            let bf = match Backfill::parse(&backfill) {
                Some(b @ (Backfill::Easy | Backfill::Conservative)) => b,
                _ => {
                    bail!("--backfill for the benchmark is easy or conservative (got {backfill:?})")
                }
            };
            if nodes == 0 || pending == 0 || repeat == 0 {
                bail!("--nodes, --pending and --repeat must be positive");
            }
            if reservations > nodes {
                bail!("--reservations must be at most --nodes (one node each)");
            }
            let r = sched_bench(nodes, gpus_per_node, pending, bf, repeat, submissions, reservations, seed)?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "cluster                    {} nodes x {} GPUs ({} running jobs, {:.1}% of GPUs busy)",
                    r.nodes,
                    r.gpus_per_node,
                    r.running,
                    100.0 * r.gpu_busy_fraction
                );
                println!("pending                    {}", r.pending);
                println!("policy / backfill          {} / {}", r.policy, r.backfill);
                println!(
                    "full pass (median of {repeat})   {:.2} ms (min {:.2}); it started {} jobs, made {} reservation(s)",
                    r.full_pass_ms_median, r.full_pass_ms_min, r.full_pass_started, r.full_pass_reservations
                );
                println!(
                    "pass after a submission    {:.1} us median, {:.1} us p99 ({:.0}% on the fast path)",
                    r.submit_pass_us_median,
                    r.submit_pass_us_p99,
                    100.0 * r.submit_fast_path_share
                );
                println!("setup                      {:.1} s (seed {})", r.setup_s, r.seed);
            }
            Ok(())
        }
    }
}

struct World<'n> {
    nodes: &'n [model::Node],
    usage: Vec<NodeUsage>,
    running: Vec<Running>,
    pending: Vec<Pending>,
    reservations: Vec<model::Reservation>,
}

impl World<'_> {
    fn snapshot<'a>(&'a self, config: &'a ClusterConfig, fs: &'a FairShare, carry: &'a Carry) -> Snapshot<'a> {
        Snapshot {
            nodes: self.nodes,
            usage: &self.usage,
            pending: &self.pending,
            running: &self.running,
            suspended: &[],
            config,
            fairshare: fs,
            carry,
            history: sched::History::empty(),
            reservations: &self.reservations,
        }
    }

    fn apply(&mut self, plan: &Plan, now: Time, past: bool) {
        let started: std::collections::HashMap<_, _> = plan.starts.iter().map(|s| (s.job, s)).collect();
        let mut keep = Vec::with_capacity(self.pending.len());
        for p in std::mem::take(&mut self.pending) {
            match started.get(&p.req.id) {
                Some(s) => {
                    for a in &s.allocs {
                        self.usage[a.node as usize].apply(&self.nodes[a.node as usize], a);
                    }
                    // Spread start times over the past so completions are staggered.
                    let start = if past { now - (p.req.id.0 as i64 * 7919) % p.req.time_limit.max(1) } else { now };
                    self.running.push(Running { req: p.req, start, allocs: s.allocs.clone() });
                }
                None => keep.push(p),
            }
        }
        self.pending = keep;
    }
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((p / 100.0) * (v.len() - 1) as f64).round() as usize]
}

#[allow(clippy::too_many_arguments)]
fn sched_bench(
    nodes: u32,
    gpus: u32,
    pending: u32,
    bf: Backfill,
    repeat: u32,
    submissions: u32,
    reservations: u32,
    seed: u64,
) -> Result<SchedReport> {
    let t_setup = Instant::now();
    let spec = trace::SyntheticSpec { nodes, gpus, jobs: 1, ..Default::default() };
    let per_job = 5.0f64; // mean GPUs per job of the mix, roughly
    let fill_jobs = ((nodes as f64 * gpus.max(1) as f64) / per_job * 1.3) as u32;
    let total = fill_jobs + pending + submissions;
    let w = trace::generate(&trace::SyntheticSpec { jobs: total, ..spec }, seed);
    let config = ClusterConfig::default();
    let fs = FairShare::default();
    let carry = Carry::default();
    let now: Time = w.jobs.last().map_or(0, |j| j.req.submit_time) + 1;
    let node_list = w.nodes;
    let mut world = World {
        usage: node_list.iter().map(NodeUsage::for_node).collect(),
        nodes: &node_list,
        running: Vec::new(),
        pending: Vec::new(),
        reservations: Vec::new(),
    };
    let mut jobs = w.jobs.into_iter().enumerate().map(|(i, j)| Pending { req: j.req, seq: i as u64, dep: DepStatus::Satisfied });
    // Fill: the scheduler itself packs the cluster.
    let fill_cfg = Config { backfill: Backfill::Easy, ..Config::default() };
    world.pending.extend(jobs.by_ref().take(fill_jobs as usize));
    let plan = sched::schedule(&world.snapshot(&config, &fs, &carry), now, seed, &fill_cfg);
    world.apply(&plan, now, true);
    world.pending.clear();
    world.pending.extend(jobs.by_ref().take(pending as usize));
    // The advance reservations come after the fill (the cluster was packed before they were made).
    let stride = (nodes / reservations.max(1)).max(1) as usize;
    world.reservations = (0..reservations as usize)
        .map(|k| {
            let start = now + 600 + 60 * k as Time;
            model::Reservation {
                name: format!("maint{k}"),
                start,
                end: start + 3600,
                nodes: vec![node_list[(k * stride) % node_list.len()].name.clone()],
                users: vec!["root".into()],
                users_negated: false,
                accounts: Vec::new(),
                accounts_negated: false,
                partition: None,
                flags: model::ResvFlags { maint: true, ..Default::default() },
                tres: String::new(),
            }
        })
        .collect();
    let extra: Vec<Pending> = jobs.collect();
    let total_gpus = (nodes as u64 * gpus as u64).max(1);
    let busy: u64 = world.usage.iter().map(|u| u.gpu_milli.iter().map(|&m| m as u64).sum::<u64>()).sum::<u64>() / 1000;
    let setup = t_setup.elapsed().as_secs_f64();

    // Full pass, timed on the same snapshot.
    let cfg = Config { backfill: bf, ..Config::default() };
    let mut times = Vec::new();
    let mut last = Plan::default();
    for _ in 0..repeat {
        let t = Instant::now();
        last = sched::schedule(&world.snapshot(&config, &fs, &carry), now, seed, &cfg);
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let full_min = times.iter().copied().fold(f64::INFINITY, f64::min);
    let full_med = pct(&mut times, 50.0);

    // Submissions: apply the full pass, then each new job through the fast path.
    let mut sub_times = Vec::new();
    let mut fast = 0usize;
    if bf == Backfill::Easy {
        let mut s = Scheduler::new(cfg.clone(), &node_list);
        let plan = s.pass(&world.snapshot(&config, &fs, &carry), now, seed);
        world.apply(&plan, now, false);
        // Re-run the pass on the applied state so the scheduler's memo matches it.
        let plan = s.pass(&world.snapshot(&config, &fs, &carry), now, seed);
        world.apply(&plan, now, false);
        for mut p in extra {
            p.req.submit_time = now;
            world.pending.push(p);
            let idx = world.pending.len() - 1;
            let t = Instant::now();
            let plan = s.submitted(&world.snapshot(&config, &fs, &carry), now, seed, &[idx]);
            sub_times.push(t.elapsed().as_secs_f64() * 1e6);
            if s.last_was_fast() {
                fast += 1;
            }
            world.apply(&plan, now, false);
        }
    }
    let n_sub = sub_times.len().max(1);
    let (sub_med, sub_p99) = if sub_times.is_empty() { (0.0, 0.0) } else { (pct(&mut sub_times.clone(), 50.0), pct(&mut sub_times, 99.0)) };
    Ok(SchedReport {
        nodes,
        gpus_per_node: gpus,
        pending: pending as usize,
        running: world.running.len(),
        gpu_busy_fraction: busy as f64 / total_gpus as f64,
        policy: "default",
        backfill: format!("{bf:?}").to_lowercase(),
        reservations,
        seed,
        full_pass_ms_median: full_med,
        full_pass_ms_min: full_min,
        full_pass_started: last.starts.len(),
        full_pass_reservations: last.stats.reservations,
        submit_pass_us_median: sub_med,
        submit_pass_us_p99: sub_p99,
        submit_fast_path_share: fast as f64 / n_sub as f64,
        setup_s: setup,
    })
}
