//! `tandem bench chaos`: a real cluster under seeded faults, checked against invariants.
//!
//! A real `tandem server`, `tandem agent`s (each in a network namespace of its own, joined to
//! the host by a veth link, so partitions are real and can be one way, with iptables inside
//! the agent's namespace) and a `tandem proxy`, running real tasks: a workload of batch jobs
//! (single jobs, two-node gangs with an `srun` step, arrays, dependencies, time limits,
//! `--no-requeue`; cancels at random moments, holds and releases, `scontrol requeue`) and a
//! service under a bounded open-loop stream of requests through the proxy. Meanwhile it
//! injects one fault at a time, from a schedule drawn from the seed: `kill -9` and restart of
//! the controller; of an agent, with or without its tasks, restarted before or after its lease;
//! of a single task; a partition of an agent, both ways or one way, healed later.
//!
//! Each batch job's script holds an exclusive `flock` on a per-job lock file for its whole
//! life and appends start and end lines (job, run number, node, time) to a per-job ledger; a
//! second run while the first holds the lock writes `overlap`. After the faults it heals
//! everything, lets the work drain, and checks (see [`check`]): every acknowledged job reached
//! exactly one terminal state and its observed history never went backwards; no two runs of a
//! job overlapped; no run started after its cancel was acknowledged, and an acknowledged cancel
//! ends CANCELLED; no acknowledged submission was lost; no output after the controller ended a
//! run; after each fault the cluster was back in steady state within the bound (the lease plus
//! two passes, and the restart back-off): every node up, the service at full strength, nothing
//! allocated that no running job holds; at the end no process of an ended job is left; the
//! service answered every request. The seed reproduces the fault schedule; a violation is
//! printed with the seed, the schedule and the job's history.

use anyhow::{Context, Result, bail};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::procs::kill_tasks_of as kill_node_tasks;
use client::{Target, send};
use wire::{JobInfo, NodeInfo, ServiceInfo};

/// `tandem bench chaos` arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct ChaosArgs {
    /// Seed of the fault schedule and of the workload.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Seconds of faults (the drain and the checks come after).
    #[arg(long, default_value_t = 120.0)]
    pub duration: f64,
    /// Node agents, each in a network namespace of its own.
    #[arg(long, default_value_t = 3)]
    pub agents: u32,
    /// Node lease, seconds.
    #[arg(long, default_value_t = 6)]
    pub lease: u32,
    /// Keep the run's directory (logs, ledgers) afterwards.
    #[arg(long)]
    pub keep: bool,
    /// Print the fault schedule the seed gives, and run nothing.
    #[arg(long)]
    pub plan: bool,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Run the cluster (controller, agents, proxy, and the commands of the workload) from this
    /// `tandem` binary instead of this one, for example an older build, to see what the harness
    /// finds in it; the load generator and the service's upstream stay this binary's.
    #[arg(long, value_name = "PATH")]
    pub daemons: Option<PathBuf>,
    /// Keep the cluster's state in a three-member etcd (Debian's etcd-server) with two
    /// controllers that take over from each other (the daemons built with `--features etcd`):
    /// the controller faults hit the one that leads, and two kinds join them, the leader cut
    /// off from etcd and an etcd member killed and restarted.
    #[arg(long)]
    pub etcd: bool,
}

/// Which way a partition cuts.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub enum Cut {
    /// Nothing between the agent and the controller.
    Both,
    /// The agent's packets to the controller are dropped.
    ToController,
    /// The controller's packets to the agent are dropped.
    FromController,
}

/// One fault of the schedule.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub enum Fault {
    /// `kill -9` of the controller, started again after `down_ms`.
    KillController {
        /// How long it stays down.
        down_ms: u64,
    },
    /// `kill -9` of agent `node` (with every task it runs, as a machine dying, or alone), started
    /// again after `down_ms` (shorter or longer than the lease).
    KillAgent {
        /// Node number (1-based).
        node: u32,
        /// Its tasks die too.
        with_tasks: bool,
        /// How long it stays down.
        down_ms: u64,
    },
    /// `kill -9` of one running task, chosen by `pick`.
    KillTask {
        /// Which of the running tasks.
        pick: u32,
    },
    /// The controller crashes at failpoint `point` (armed in a test build's controller, see
    /// `server`'s failpoints) the `nth` time it passes it, and is started again after `down_ms`
    /// (killed from outside if it did not reach the point within 15 s).
    CrashAt {
        /// One of `pass-planned`, `pass-applying`, `commit-taken`, `commit-written`.
        point: String,
        /// Which pass of it.
        nth: u32,
        /// How long it stays down.
        down_ms: u64,
    },
    /// The controller's data directory (a tmpfs of its own) is full for `ms`.
    DiskFull {
        /// How long.
        ms: u64,
    },
    /// With etcd: the leading controller cut off from every etcd member for `ms` (its
    /// connections stalled both ways, as by a partition; clients still reach it). It must step
    /// down within its lease; it is started again once it has.
    CutLeader {
        /// How long.
        ms: u64,
    },
    /// With etcd: `kill -9` of etcd member `member` (1-based), started again after `down_ms`.
    KillEtcd {
        /// Which member.
        member: u32,
        /// How long it stays down.
        down_ms: u64,
    },
    /// A partition of agent `node` from the controller, for `ms`.
    Partition {
        /// Node number (1-based).
        node: u32,
        /// Which way.
        cut: Cut,
        /// How long.
        ms: u64,
    },
}

impl Fault {
    fn kind(&self) -> &'static str {
        match self {
            Fault::KillController { .. } => "kill -9 controller",
            Fault::KillAgent { with_tasks: true, .. } => "kill -9 agent with its tasks",
            Fault::KillAgent { with_tasks: false, .. } => "kill -9 agent alone",
            Fault::KillTask { .. } => "kill -9 task",
            Fault::Partition { cut: Cut::Both, .. } => "partition both ways",
            Fault::Partition { .. } => "partition one way",
            Fault::CrashAt { .. } => "controller crash at a failpoint",
            Fault::DiskFull { .. } => "controller's disk full",
            Fault::CutLeader { .. } => "leader cut off from etcd",
            Fault::KillEtcd { .. } => "kill -9 etcd member",
        }
    }
}

/// The fault schedule a seed gives: (milliseconds from the start, fault), one at a time. With
/// etcd, a crash at a failpoint (whose controller, started again, now stands by) becomes an etcd
/// member's loss, and a full disk (the controller's is only its replica) the leader's cut from
/// etcd.
pub fn schedule(seed: u64, duration_ms: u64, agents: u32, lease_ms: u64, etcd: bool) -> Vec<(u64, Fault)> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed_fa17);
    let mut at = 3_000u64;
    let mut out = Vec::new();
    while at < duration_ms {
        let node = rng.random_range(1..=agents);
        let f = match rng.random_range(0..12u32) {
            0 | 1 => Fault::KillController { down_ms: rng.random_range(300..3_000) },
            2..=4 => Fault::KillAgent {
                node,
                with_tasks: rng.random_bool(0.5),
                // Back before the lease lapses, or after.
                down_ms: if rng.random_bool(0.6) { rng.random_range(200..lease_ms / 2) } else { lease_ms + rng.random_range(500..3_000) },
            },
            5 => Fault::KillTask { pick: rng.random_range(0..1000) },
            9 | 10 => Fault::CrashAt {
                point: ["pass-planned", "pass-applying", "commit-taken", "commit-written"][rng.random_range(0..4usize)].to_string(),
                nth: rng.random_range(1..20),
                down_ms: rng.random_range(200..2_000),
            },
            11 => Fault::DiskFull {
                ms: if rng.random_bool(0.5) { rng.random_range(500..lease_ms / 2) } else { lease_ms + rng.random_range(500..3_000) },
            },
            _ => Fault::Partition {
                node,
                cut: [Cut::Both, Cut::ToController, Cut::FromController][rng.random_range(0..3usize)],
                ms: if rng.random_bool(0.5) { rng.random_range(500..lease_ms / 2) } else { lease_ms + rng.random_range(500..3_000) },
            },
        };
        let f = match f {
            Fault::CrashAt { down_ms, .. } if etcd => Fault::KillEtcd { member: rng.random_range(1..=3), down_ms: down_ms + 1_000 },
            Fault::DiskFull { .. } if etcd => Fault::CutLeader { ms: rng.random_range(4_000..8_000) },
            f => f,
        };
        let length = match &f {
            Fault::KillController { down_ms } | Fault::KillAgent { down_ms, .. } | Fault::KillEtcd { down_ms, .. } => *down_ms,
            Fault::CutLeader { ms } => ms + 5_000,
            Fault::CrashAt { down_ms, .. } => down_ms + 15_000,
            Fault::Partition { ms, .. } | Fault::DiskFull { ms } => *ms,
            Fault::KillTask { .. } => 0,
        };
        out.push((at, f));
        // The next fault comes once this one healed and the cluster had time to settle.
        at += length + lease_ms + rng.random_range(2_000..5_000);
    }
    out
}

/// A fault as it happened.
#[derive(Debug, Clone, Serialize)]
pub struct Injected {
    /// Seconds from the start.
    pub at_s: f64,
    /// The fault.
    pub fault: Fault,
    /// Seconds from the fault until the cluster was in steady state again (every node up, the
    /// service at full strength, no job running on a node that is down).
    pub steady_s: Option<f64>,
}

/// What a run found.
#[derive(Debug, Clone, Serialize)]
pub struct ChaosReport {
    /// Seed.
    pub seed: u64,
    /// Seconds of faults.
    pub duration_s: f64,
    /// Agents.
    pub agents: u32,
    /// Lease, seconds.
    pub lease_s: u32,
    /// The bound within which the cluster must be steady after a fault heals, seconds.
    pub bound_s: f64,
    /// Faults injected by kind.
    pub faults: BTreeMap<String, u32>,
    /// Every fault, in order.
    pub schedule: Vec<Injected>,
    /// Jobs submitted and acknowledged (array tasks counted one each).
    pub jobs: usize,
    /// Runs started (ledger start lines).
    pub runs: usize,
    /// Jobs by final state.
    pub final_states: BTreeMap<String, usize>,
    /// Cancels acknowledged.
    pub cancels: usize,
    /// Requests sent to the service through the proxy.
    pub requests: u64,
    /// Of which failed (a non-2xx answer or a transport error).
    pub requests_failed: u64,
    /// Seconds from the loss of a node (an agent killed with its tasks, restarted within its
    /// lease) until each of its jobs was requeued or ended.
    pub node_loss_recovery_s: Vec<f64>,
    /// Controller crashes at a failpoint (of those scheduled, the ones it reached).
    pub failpoint_crashes: u32,
    /// The binary has no failpoints (not a test build): those faults were plain restarts.
    pub failpoints_missing: bool,
    /// Where the state was: `sqlite`, or `etcd` (three members, two controllers).
    pub store: String,
    /// With etcd: how many times a controller took the lead (the first included).
    pub leaderships: Option<u64>,
    /// With etcd: seconds from each cut of the leader from etcd until it had stepped down.
    pub cut_step_down_s: Vec<f64>,
    /// With etcd: the members' database files at the end, bytes (the largest).
    pub etcd_db_bytes: Option<i64>,
    /// Violated invariants, each with the job's history.
    pub violations: Vec<String>,
}

/// `date +%s%N` as the ledger writes it, for comparisons with it.
fn now_ns() -> i128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128)
}

/// The network of the run: one namespace per agent, joined to the host by a veth link on a
/// subnet of its own (`10.B.I.1` the host's end, `10.B.I.2` the agent's).
struct Net {
    tag: String,
    b: u8,
    agents: u32,
}

fn sh(args: &[&str]) -> Result<()> {
    let o = Command::new(args[0]).args(&args[1..]).stdin(Stdio::null()).output().with_context(|| format!("running {}", args[0]))?;
    if !o.status.success() {
        bail!("{}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr).trim());
    }
    Ok(())
}

impl Net {
    fn new(agents: u32) -> Result<Net> {
        let pid = std::process::id();
        // The tag holds the whole pid (`sweep` tells a dead run's by it), and stays within
        // the 15 bytes of an interface name: tc + 7 digits + h + 2 digits.
        let net = Net { tag: format!("tc{pid}"), b: 100 + (pid % 100) as u8, agents };
        for i in 1..=agents {
            let (ns, host, inner) = (net.ns(i), format!("{}h{i}", net.tag), format!("{}n{i}", net.tag));
            sh(&["ip", "netns", "add", &ns])?;
            sh(&["ip", "link", "add", &host, "type", "veth", "peer", "name", &inner])?;
            sh(&["ip", "link", "set", &inner, "netns", &ns])?;
            sh(&["ip", "addr", "add", &format!("{}/24", net.host_ip(i)), "dev", &host])?;
            sh(&["ip", "link", "set", &host, "up"])?;
            sh(&["ip", "-n", &ns, "addr", "add", &format!("{}/24", net.node_ip(i)), "dev", &inner])?;
            sh(&["ip", "-n", &ns, "link", "set", &inner, "up"])?;
            sh(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
            // Every address of the host is reached through the link (a controller advertises
            // one address for all agents).
            sh(&["ip", "-n", &ns, "route", "add", "default", "via", &net.host_ip(i)])?;
        }
        Ok(net)
    }

    fn ns(&self, i: u32) -> String {
        format!("{}-{i}", self.tag)
    }

    fn host_ip(&self, i: u32) -> String {
        format!("10.{}.{i}.1", self.b)
    }

    fn node_ip(&self, i: u32) -> String {
        format!("10.{}.{i}.2", self.b)
    }

    /// The iptables rules that make a cut, in agent `i`'s namespace.
    fn rules(&self, i: u32, cut: Cut, port: u16) -> Vec<Vec<String>> {
        let (ip, port) = (self.host_ip(i), port.to_string());
        let to = ["OUTPUT", "-p", "tcp", "-d", &ip, "--dport", &port, "-j", "DROP"].map(str::to_string).to_vec();
        let from = ["INPUT", "-p", "tcp", "-s", &ip, "--sport", &port, "-j", "DROP"].map(str::to_string).to_vec();
        match cut {
            Cut::Both => vec![to, from],
            Cut::ToController => vec![to],
            Cut::FromController => vec![from],
        }
    }

    fn cut(&self, i: u32, cut: Cut, port: u16, on: bool) -> Result<()> {
        for r in self.rules(i, cut, port) {
            let mut args = vec!["ip".to_string(), "netns".into(), "exec".into(), self.ns(i), "iptables".into(), "-w".into()];
            args.push(if on { "-A" } else { "-D" }.into());
            args.extend(r);
            sh(&args.iter().map(String::as_str).collect::<Vec<_>>())?;
        }
        Ok(())
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for i in 1..=self.agents {
            let _ = Command::new("ip").args(["netns", "del", &self.ns(i)]).stderr(Stdio::null()).status();
        }
    }
}

/// A tmpfs mounted for the run, unmounted at the end.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Result<Tmpfs> {
        std::fs::create_dir_all(at)?;
        sh(&["mount", "-t", "tmpfs", "-o", &format!("size={size},mode=0711"), "tmpfs", &at.display().to_string()])?;
        Ok(Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the file system of `dir` (with `dir/filler`) until no byte is left.
fn fill_disk(dir: &Path) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("filler"))?;
    let block = vec![0u8; 1 << 20];
    loop {
        if f.write_all(&block).is_err() {
            break;
        }
    }
    // The last bytes, smaller than a block.
    let small = [0u8; 512];
    while f.write_all(&small).is_ok() {}
    Ok(())
}

/// The processes of the run.
struct Procs {
    exe: PathBuf,
    dir: PathBuf,
    /// Each controller's TCP port (two with etcd).
    ports: Vec<u16>,
    lease: u32,
    /// Each controller's process.
    servers: Vec<Option<Child>>,
    /// With etcd: its members, and each controller's relays to them (how a cut is made).
    etcd: Option<up::etcd::Etcd>,
    relays: Vec<crate::relay::Relays>,
    /// The address every agent reaches the host at (`--advertise`).
    host: String,
    agents: Vec<Option<Child>>,
    proxy: Option<Child>,
    proxy_addr: String,
}

impl Procs {
    fn log(&self, name: &str) -> Result<std::fs::File> {
        Ok(std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join(format!("{name}.log")))?)
    }

    /// Controller `k`'s name (its data directory's and its log's).
    fn ctl_name(k: usize) -> String {
        if k == 0 { "controller".into() } else { format!("controller{}", k + 1) }
    }

    fn start_server(&mut self, k: usize) -> Result<()> {
        self.start_server_with(k, None)
    }

    /// Starts controller `k`, with failpoints armed (`TANDEM_FAILPOINTS`) if given.
    fn start_server_with(&mut self, k: usize, failpoints: Option<&str>) -> Result<()> {
        let name = Procs::ctl_name(k);
        let ctl = self.dir.join(&name);
        let _ = std::fs::remove_file(ctl.join("addr"));
        let f = self.log(&name)?;
        let mut cmd = Command::new(&self.exe);
        match failpoints {
            Some(fp) => cmd.env("TANDEM_FAILPOINTS", fp),
            None => cmd.env_remove("TANDEM_FAILPOINTS"),
        };
        cmd.args(["server", "--listen", &format!("0.0.0.0:{}", self.ports[k]), "--lease", &self.lease.to_string(), "--kill-wait", "2"]);
        if let Some(e) = &self.etcd {
            // etcd through this controller's relays; the rest as `tandem up --ha` gives it.
            let mut args = e.server_args();
            args[1] = format!("etcd://{}", self.relays[k].addrs.join(","));
            cmd.args(args).args(["--advertise", &format!("{}:{}", self.host, self.ports[k])]);
        }
        let child =
            cmd.arg("--data").arg(&ctl).stdin(Stdio::null()).stdout(f.try_clone()?).stderr(f).spawn().context("starting the controller")?;
        self.servers[k] = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ctl.join("addr").exists() {
            if Instant::now() > deadline {
                bail!("the controller did not start; see {}/{name}.log", self.dir.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn start_agent(&mut self, net: &Net, i: u32) -> Result<()> {
        let name = format!("node{i}");
        let data = self.dir.join(&name);
        std::fs::create_dir_all(&data)?;
        let f = self.log(&name)?;
        let child = Command::new("ip")
            .args(["netns", "exec", &net.ns(i)])
            .arg(&self.exe)
            .args([
                "agent",
                "--server",
                &self.ports.iter().map(|p| format!("https://{}:{p}", net.host_ip(i))).collect::<Vec<_>>().join(","),
                "--name",
                &name,
            ])
            .args(["--cpus", "2", "--memory", "2G", "--addr", &net.node_ip(i), "--join-token-file"])
            .arg(data.join("join-token"))
            .arg("--ca")
            .arg(self.dir.join("controller/ca.pem"))
            .arg("--data")
            .arg(&data)
            .stdin(Stdio::null())
            .stdout(f.try_clone()?)
            .stderr(f)
            .spawn()
            .with_context(|| format!("starting agent {name}"))?;
        self.agents[i as usize - 1] = Some(child);
        Ok(())
    }

    fn start_proxy(&mut self) -> Result<()> {
        let f = self.log("proxy")?;
        let child = Command::new(&self.exe)
            .args([
                "proxy",
                "--listen",
                &self.proxy_addr,
                "--server",
                &self.ports.iter().map(|p| format!("https://127.0.0.1:{p}")).collect::<Vec<_>>().join(","),
                "--credential-file",
            ])
            .arg(self.dir.join("proxy.credential"))
            .arg("--ca")
            .arg(self.dir.join("controller/ca.pem"))
            .stdin(Stdio::null())
            .stdout(f.try_clone()?)
            .stderr(f)
            .spawn()
            .context("starting the proxy")?;
        self.proxy = Some(child);
        Ok(())
    }

    /// The controller that leads: the one whose socket answers `/healthz` itself (a standby
    /// answers 503), waited for up to 15 s (an election); the first where there is one
    /// controller, or none came to lead.
    fn leader(&self) -> usize {
        if self.servers.len() < 2 {
            return 0;
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(k) = self.leading() {
                return k;
            }
            if Instant::now() > deadline {
                return 0;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// [`Procs::leader`], asked once.
    fn leading(&self) -> Option<usize> {
        use std::io::{Read, Write};
        for k in 0..self.servers.len() {
            let sock = self.dir.join(Procs::ctl_name(k)).join("tandem.sock");
            let Ok(mut s) = std::os::unix::net::UnixStream::connect(&sock) else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut out = String::new();
            if s.write_all(b"GET /healthz HTTP/1.0\r\nHost: x\r\n\r\n").is_ok()
                && s.read_to_string(&mut out).is_ok()
                && out.split_whitespace().nth(1) == Some("200")
            {
                return Some(k);
            }
        }
        None
    }

    fn kill(c: &mut Option<Child>) {
        if let Some(mut c) = c.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for a in 0..self.agents.len() {
            if let Some(c) = &self.agents[a] {
                kill_node_tasks(c.id());
            }
            Procs::kill(&mut self.agents[a]);
        }
        Procs::kill(&mut self.proxy);
        for k in 0..self.servers.len() {
            Procs::kill(&mut self.servers[k]);
        }
        // Keepers adopted by a restarted agent are not its children, nor orphaned ones; their
        // tasks first (a service replica's command line does not name the run's directory).
        crate::procs::kill_keepers_matching(&format!("{}/node", self.dir.display()));
        // Tasks of agents killed alone and not restarted: their keepers fence them, or these do.
        let _ = Command::new("pkill").args(["-9", "-f", &format!("{}/node", self.dir.display())]).status();
    }
}

/// What the workload did: acknowledged submissions and cancels.
#[derive(Default)]
struct Book {
    /// Job ids acknowledged (the array job's id for an array), with the time of the reply.
    submitted: Vec<(u64, i128)>,
    /// Array job ids and their task count.
    arrays: Vec<(u64, u32)>,
    /// Cancels acknowledged: job, time of the reply.
    cancels: Vec<(u64, i128)>,
    /// `scontrol requeue` acknowledged: job, time of the reply. The workload requeues a job it
    /// last saw running, which may have ended meanwhile: a finished job is requeued too (as
    /// Slurm's), and leaves its terminal state for a new run.
    requeues: Vec<(u64, i128)>,
    /// Observed states of each job: (time, state, restarts), one entry per change.
    seen: HashMap<u64, Vec<(i128, String, u32)>>,
    /// The last full listing.
    last: Vec<JobInfo>,
}

/// A client call on the harness's own runtime.
struct Api {
    rt: tokio::runtime::Runtime,
    t: Target,
}

impl Api {
    fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.rt.block_on(async {
            Ok(tokio::time::timeout(Duration::from_secs(5), send(&self.t, "GET", path, None::<&()>, &[])).await??.json()?)
        })
    }
}

const SCRIPT: &str = r#"#!/bin/bash
L=LEDGER/$SLURM_JOB_ID
exec 9>>$L.lock
if ! flock -n 9; then echo "overlap $SLURM_JOB_ID $SLURM_RESTART_COUNT $SLURMD_NODENAME $(date +%s%N)" >> $L.log; exit 1; fi
echo "start $SLURM_JOB_ID $SLURM_RESTART_COUNT $SLURMD_NODENAME $(date +%s%N)" >> $L.log
if [ "$SLURM_NNODES" = 2 ]; then srun -N2 --ntasks-per-node=1 sleep $1; else sleep $1; fi
echo "end $SLURM_JOB_ID $SLURM_RESTART_COUNT $SLURMD_NODENAME $(date +%s%N)" >> $L.log
"#;

/// Prints the fault schedule of `a` (`--plan`).
pub fn print_plan(a: &ChaosArgs) {
    for (at, f) in schedule(a.seed, (a.duration * 1000.0) as u64, a.agents, a.lease as u64 * 1000, a.etcd) {
        println!("{:>7.1} s  {:<30} {f:?}", at as f64 / 1000.0, f.kind());
    }
}

/// Removes what runs of the harness that were themselves killed (`kill -9`, a CI timeout) left
/// behind: their processes, network namespaces and tmpfs mounts, told by the pid in their
/// names (`tcPID-N`, `tandem-chaos-SEED-PID`) when that pid is no longer alive.
fn sweep() {
    let dead = |pid: &str| pid.parse::<u32>().is_ok_and(|p| !Path::new(&format!("/proc/{p}")).exists());
    let mut pids = BTreeSet::new();
    if let Ok(o) = Command::new("ip").args(["netns", "list"]).output() {
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            if let Some((pid, _)) = name.strip_prefix("tc").and_then(|r| r.split_once('-'))
                && dead(pid)
            {
                pids.insert(pid.to_string());
                let _ = Command::new("sh").args(["-c", &format!("ip netns pids {name} | xargs -r kill -9")]).status();
                let _ = Command::new("ip").args(["netns", "del", name]).status();
            }
        }
    }
    let tmp = std::env::temp_dir().display().to_string();
    for line in std::fs::read_to_string("/proc/mounts").unwrap_or_default().lines() {
        let at = line.split_whitespace().nth(1).unwrap_or("");
        if let Some(rest) = at.strip_prefix(&format!("{tmp}/tandem-chaos-"))
            && let Some(run) = rest.strip_suffix("/controller").or_else(|| rest.strip_suffix("/controller2"))
            && let Some((_, pid)) = run.rsplit_once('-')
            && dead(pid)
        {
            let _ = Command::new("pkill").args(["-9", "-f", &format!("{tmp}/tandem-chaos-{run}/")]).status();
            let _ = Command::new("umount").args(["-l", at]).stderr(Stdio::null()).status();
            pids.insert(pid.to_string());
        }
    }
    if !pids.is_empty() {
        eprintln!("tandem bench chaos: removed what earlier runs that were killed left behind (pids {pids:?})");
    }
}

/// Runs the harness.
pub fn run(a: ChaosArgs) -> Result<ChaosReport> {
    if a.agents < 2 || a.agents > 50 || a.lease < 3 || a.duration <= 0.0 {
        bail!(
            "--agents must be 2 to 50, --lease at least 3 (seconds), --duration positive (seconds); got --agents {} --lease {} --duration {}",
            a.agents,
            a.lease,
            a.duration
        );
    }
    let own = std::env::current_exe()?;
    let exe = match &a.daemons {
        Some(d) => {
            let ok = Command::new(d).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
            if !ok {
                bail!("--daemons {}: not a tandem binary that runs here (give the path of a built `tandem`)", d.display());
            }
            std::fs::canonicalize(d)?
        }
        None => own.clone(),
    };
    if !nix::unistd::geteuid().is_root() {
        bail!("tandem bench chaos needs root: it makes network namespaces and runs agents as root");
    }
    for tool in ["ip", "iptables", "flock"] {
        if Command::new("sh").args(["-c", &format!("command -v {tool}")]).stdout(Stdio::null()).status().map_or(true, |s| !s.success()) {
            bail!("tandem bench chaos needs `{tool}` (iproute2, iptables, util-linux)");
        }
    }

    sweep();
    let lease_ms = a.lease as u64 * 1000;
    let plan = schedule(a.seed, (a.duration * 1000.0) as u64, a.agents, lease_ms, a.etcd);
    let dir = std::env::temp_dir().join(format!("tandem-chaos-{}-{}", a.seed, std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for d in ["controller", "ledger", "work", "bin"] {
        std::fs::create_dir_all(dir.join(d))?;
    }
    let result = run_in(&a, &plan, &exe, &own, &dir);
    if !a.keep && result.as_ref().is_ok_and(|r| r.violations.is_empty()) {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!("tandem bench chaos: the run's files are in {}", dir.display());
    }
    result
}

fn run_in(a: &ChaosArgs, plan: &[(u64, Fault)], exe: &Path, own: &Path, dir: &Path) -> Result<ChaosReport> {
    let lease_ms = a.lease as u64 * 1000;
    let net = Net::new(a.agents)?;
    let controllers = if a.etcd { 2 } else { 1 };
    let ports: Vec<u16> =
        (0..controllers).map(|_| Ok(std::net::TcpListener::bind("0.0.0.0:0")?.local_addr()?.port())).collect::<Result<_>>()?;
    let proxy_port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    // With etcd: three members, and for each controller a relay to each member.
    let etcd = match a.etcd {
        true => Some(up::etcd::Etcd::start(&dir.join("etcd"), 3).context("starting etcd (apt-get install etcd-server)")?),
        false => None,
    };
    let relays = match &etcd {
        Some(e) => {
            let members: Vec<String> = e.members.iter().map(|m| m.client.clone()).collect();
            (0..controllers).map(|_| crate::relay::Relays::start(&members)).collect::<Result<Vec<_>>>()?
        }
        None => Vec::new(),
    };
    let mut p = Procs {
        exe: exe.to_path_buf(),
        dir: dir.to_path_buf(),
        ports: ports.clone(),
        lease: a.lease,
        servers: (0..controllers).map(|_| None).collect(),
        etcd,
        relays,
        host: net.host_ip(1),
        agents: (0..a.agents).map(|_| None).collect(),
        proxy: None,
        proxy_addr: format!("127.0.0.1:{proxy_port}"),
    };
    // The controller's data directory is a small tmpfs of its own, which a fault fills.
    let _disk = Tmpfs::mount(&dir.join("controller"), "256m")?;
    let _disk2 = match a.etcd {
        true => {
            std::fs::create_dir_all(dir.join("controller2"))?;
            Some(Tmpfs::mount(&dir.join("controller2"), "256m")?)
        }
        false => None,
    };
    // Inference above training: the service's replicas preempt batch jobs (requeued) when the
    // cluster is full, so a lost replica is replaced at once.
    std::fs::write(
        dir.join("controller/tandem.toml"),
        "[[qos]]\nname = \"normal\"\npreempt_tier = 0\ngrace_time = 1\n[[qos]]\nname = \"serve\"\npriority = 100\npreempt_tier = 2\n",
    )?;
    p.start_server(0)?;
    let server = (0..controllers)
        .map(|k| format!("unix://{}", dir.join(Procs::ctl_name(k)).join("tandem.sock").display()))
        .collect::<Vec<_>>()
        .join(",");
    // What the controllers said last: a setup step that fails says why.
    let tails = || -> String {
        (0..controllers)
            .map(|k| {
                let name = Procs::ctl_name(k);
                let text = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                format!("\n--- the last of {name}.log:\n{}", lines[lines.len().saturating_sub(15)..].join("\n"))
            })
            .collect()
    };
    let tandem = |args: &[&str]| -> Result<String> {
        let o = Command::new(exe).args(args).env("TANDEM_SERVER", &server).current_dir(dir.join("work")).stdin(Stdio::null()).output()?;
        if !o.status.success() {
            bail!("tandem {}: {}{}", args.join(" "), String::from_utf8_lossy(&o.stderr).trim(), tails());
        }
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    };
    // With etcd the controller answers (as a standby) before it leads: the setup waits for it
    // to lead (a user's token, which nothing counts, asked until one comes).
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(e) = tandem(&["token"]) {
        if Instant::now() > deadline {
            return Err(e.context("no controller led within 60 s"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let joins = tandem(&["token", "--join", "--count", &a.agents.to_string()])?;
    if a.etcd {
        // The second controller shares the first's CA and keys (it made them, and leads).
        std::fs::write(dir.join("controller2/tandem.toml"), std::fs::read(dir.join("controller/tandem.toml"))?)?;
        for f in up::SHARED_FILES {
            let text = std::fs::read(dir.join("controller").join(f))?;
            up::write_file(
                &dir.join("controller2").join(f),
                &String::from_utf8_lossy(&text),
                if f.ends_with(".pem") { 0o644 } else { 0o600 },
            )?;
        }
        p.start_server(1)?;
    }
    for (i, t) in joins.lines().enumerate() {
        let d = dir.join(format!("node{}", i + 1));
        std::fs::create_dir_all(&d)?;
        up::write_file(&d.join("join-token"), &format!("{t}\n"), 0o600)?;
    }
    let cred = tandem(&["token", "--proxy", "chaos"])?;
    up::write_file(&dir.join("proxy.credential"), &cred, 0o600)?;
    for i in 1..=a.agents {
        p.start_agent(&net, i)?;
    }
    p.start_proxy()?;
    let api = Api { rt: tokio::runtime::Builder::new_current_thread().enable_all().build()?, t: Target::parse(&server)? };
    let deadline = Instant::now() + Duration::from_secs(60);
    while api.get::<Vec<NodeInfo>>("/v1/nodes").map_or(0, |n| n.iter().filter(|n| n.state != "down").count()) < a.agents as usize {
        if Instant::now() > deadline {
            bail!("the agents did not register; see {}/node*.log", dir.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The Slurm commands for jobs (srun in the gangs), and the job script.
    tandem(&["shims", &dir.join("bin").display().to_string()])?;
    let script = dir.join("work/job.sh");
    std::fs::write(&script, SCRIPT.replace("LEDGER", &dir.join("ledger").display().to_string()))?;
    // The service: two replicas of the test upstream, reached on the agents' addresses.
    let spec = format!(
        "name = \"web\"\ncommand = [{:?}, \"__upstream\", \"--bind\", \"0.0.0.0\", \"--port\", \"$PORT\"]\nreplicas = 2\nqos = \"serve\"\n[resources]\ncpus = 1\n[readiness]\nhttp = \"/\"\nperiod = \"300ms\"\n",
        own.display().to_string()
    );
    std::fs::write(dir.join("work/web.toml"), spec)?;
    tandem(&["service", "apply", "-f", "web.toml"])?;
    let steady = |api: &Api| -> bool {
        let Ok(nodes) = api.get::<Vec<NodeInfo>>("/v1/nodes") else { return false };
        let Ok(s) = api.get::<ServiceInfo>("/v1/services/web") else { return false };
        nodes.iter().all(|n| n.state != "down")
            && s.ready == s.desired
            && s.replicas.iter().filter(|r| r.state == "Ready").count() == s.desired as usize
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !steady(&api) {
        if Instant::now() > deadline {
            bail!("the service did not become ready; see {}", dir.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let url = format!("http://{}/s/web/", p.proxy_addr);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !Command::new("curl").args(["-sf", "-o", "/dev/null", &url]).status().is_ok_and(|s| s.success()) {
        if Instant::now() > deadline {
            bail!("the proxy did not route to the service");
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    // The load: bounded, open loop; the load generator's timeout is fixed at 10 s.
    let load = Command::new(own)
        .args(["bench", "load", &url, "--json", "--rate", "20", "--concurrency", "32", "--timeout", "10"])
        .args(["--duration", &format!("{}", a.duration + 5.0)])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;

    let book = Arc::new(Mutex::new(Book::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop_observing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The observer: every job's state, a few times a second.
    let observer = {
        let (book, stop, server) = (book.clone(), stop_observing.clone(), server.clone());
        std::thread::spawn(move || -> Result<()> {
            let api = Api { rt: tokio::runtime::Builder::new_current_thread().enable_all().build()?, t: Target::parse(&server)? };
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                if let Ok(jobs) = api.get::<Vec<JobInfo>>("/v1/history?since=0") {
                    let t = now_ns();
                    let mut b = book.lock().expect("lock");
                    for j in &jobs {
                        let h = b.seen.entry(j.id).or_default();
                        if h.last().is_none_or(|(_, s, r)| *s != j.state || *r != j.restarts) {
                            h.push((t, j.state.clone(), j.restarts));
                        }
                    }
                    b.last = jobs;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            Ok(())
        })
    };
    // The workload.
    let workload = {
        let (book, stop, exe, server, dir, seed) =
            (book.clone(), stop.clone(), exe.to_path_buf(), server.clone(), dir.to_path_buf(), a.seed);
        std::thread::spawn(move || workload(seed, &exe, &server, &dir, &book, &stop))
    };

    let start = Instant::now();
    let start_unix_ms = now_ns() / 1_000_000;
    let mut injected = Vec::new();
    let mut node_loss = Vec::new();
    let (mut crashes_seen, mut crashed_at, mut no_failpoints) = (0usize, 0u32, false);
    let mut violations = Vec::new();
    let mut cut_step_down = Vec::new();
    let bound = Duration::from_millis(lease_ms + 2 * 1000 + 2_000);
    for (at, f) in plan {
        let due = start + Duration::from_millis(*at);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let t0 = Instant::now();
        let running_here = |node: u32, b: &Book| -> Vec<(u64, u32)> {
            b.last
                .iter()
                .filter(|j| j.running() && j.nodelist.split(',').any(|n| n == format!("node{node}")) && !j.name.starts_with("web"))
                .map(|j| (j.id, j.restarts))
                .collect()
        };
        let mut watch: Vec<(u64, u32)> = Vec::new();
        match f {
            Fault::KillController { down_ms } => {
                let k = p.leader();
                Procs::kill(&mut p.servers[k]);
                std::thread::sleep(Duration::from_millis(*down_ms));
                p.start_server(k)?;
            }
            Fault::CutLeader { ms } => {
                // Cut off from etcd, the leader must stop before its lease can lapse (and so
                // before another can lead); it is started again (as systemd would) once healed.
                let k = p.leader();
                p.relays[k].cut(true);
                let cut_at = Instant::now();
                let mut gone = None;
                while cut_at.elapsed() < Duration::from_millis(*ms) {
                    if gone.is_none() && p.servers[k].as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_some()) {
                        gone = Some(cut_at.elapsed().as_secs_f64());
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                match gone {
                    Some(s) => cut_step_down.push(s),
                    None => violations.push(format!(
                        "{} was cut off from etcd for {:.1} s (at {:.1} s) and did not step down",
                        Procs::ctl_name(k),
                        *ms as f64 / 1000.0,
                        *at as f64 / 1000.0
                    )),
                }
                p.relays[k].cut(false);
                Procs::kill(&mut p.servers[k]);
                p.start_server(k)?;
            }
            Fault::KillEtcd { member, down_ms } => {
                let e = p.etcd.as_mut().expect("etcd faults only with etcd");
                e.kill(*member as usize - 1);
                std::thread::sleep(Duration::from_millis(*down_ms));
                e.restart(*member as usize - 1)?;
            }
            Fault::KillAgent { node, with_tasks, down_ms } => {
                let i = *node as usize - 1;
                if *with_tasks {
                    watch = if *down_ms < lease_ms { running_here(*node, &book.lock().expect("lock")) } else { Vec::new() };
                    if let Some(c) = &p.agents[i] {
                        let pid = c.id();
                        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
                        kill_node_tasks(pid);
                    }
                }
                Procs::kill(&mut p.agents[i]);
                std::thread::sleep(Duration::from_millis(*down_ms));
                p.start_agent(&net, *node)?;
            }
            Fault::KillTask { pick } => {
                let tasks = task_pids(dir);
                if !tasks.is_empty() {
                    let t = tasks[*pick as usize % tasks.len()];
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(t), nix::sys::signal::Signal::SIGKILL);
                }
            }
            Fault::Partition { node, cut, ms } => {
                for port in &ports {
                    net.cut(*node, *cut, *port, true)?;
                }
                std::thread::sleep(Duration::from_millis(*ms));
                for port in &ports {
                    net.cut(*node, *cut, *port, false)?;
                }
            }
            Fault::CrashAt { point, nth, down_ms } => {
                // Restarted with the failpoint armed; it crashes there, or is killed after 15 s.
                Procs::kill(&mut p.servers[0]);
                p.start_server_with(0, Some(&format!("{point}={nth}")))?;
                let deadline = Instant::now() + Duration::from_secs(15);
                while Instant::now() < deadline && p.servers[0].as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_none()) {
                    std::thread::sleep(Duration::from_millis(50));
                }
                let log = std::fs::read_to_string(dir.join("controller.log")).unwrap_or_default();
                if log.matches(&format!("failpoint {point}: crashing")).count() > crashes_seen {
                    crashes_seen += 1;
                    crashed_at += 1;
                } else if !log.contains("failpoints armed") {
                    no_failpoints = true;
                }
                Procs::kill(&mut p.servers[0]);
                std::thread::sleep(Duration::from_millis(*down_ms));
                p.start_server(0)?;
            }
            Fault::DiskFull { ms } => {
                fill_disk(&dir.join("controller"))?;
                std::thread::sleep(Duration::from_millis(*ms));
                let _ = std::fs::remove_file(dir.join("controller/filler"));
            }
        }
        // Healed: the cluster must be steady again within the bound.
        let healed = Instant::now();
        let mut steady_s = None;
        let mut pending_watch = watch.clone();
        while healed.elapsed() < bound * 3 {
            if !pending_watch.is_empty() {
                let b = book.lock().expect("lock");
                pending_watch.retain(|(id, r)| {
                    let done = b.last.iter().find(|j| j.id == *id).is_none_or(|j| !j.running() || j.restarts != *r);
                    if done {
                        node_loss.push(t0.elapsed().as_secs_f64());
                    }
                    !done
                });
            }
            if steady(&api) && pending_watch.is_empty() {
                steady_s = Some(t0.elapsed().as_secs_f64());
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        match steady_s {
            Some(_) if healed.elapsed() <= bound => {}
            _ => violations.push(format!(
                "not in steady state within {:.1} s of healing {} (at {:.1} s): {}",
                bound.as_secs_f64(),
                f.kind(),
                *at as f64 / 1000.0,
                steady_detail(&api)
            )),
        }
        injected.push(Injected { at_s: (t0 - start).as_secs_f64(), fault: f.clone(), steady_s });
    }
    let left = Duration::from_secs_f64(a.duration).saturating_sub(start.elapsed());
    std::thread::sleep(left);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    workload.join().map_err(|_| anyhow::anyhow!("the workload thread panicked"))??;
    // Drain: every batch job ends (the longest runs 12 s, a dependency waits for another), as
    // long as the queue moves: at most a minute (and the bound) without a job ending.
    let mut deadline = Instant::now() + Duration::from_secs(60) + bound;
    let mut left_before = usize::MAX;
    loop {
        let Ok(jobs) = api.get::<Vec<JobInfo>>("/v1/history?since=0") else {
            if Instant::now() > deadline {
                violations.push("the controller did not answer at the end".into());
                break;
            }
            std::thread::sleep(Duration::from_millis(300));
            continue;
        };
        let live: Vec<&JobInfo> = jobs.iter().filter(|j| !j.name.starts_with("web") && !is_final(&j.state)).collect();
        if live.is_empty() {
            break;
        }
        // Held jobs are released (a hold whose reply was lost in a crash is still a hold).
        for j in live.iter().filter(|j| j.reason == "JobHeldUser") {
            let _ = tandem(&["show", "release", &j.id.to_string()]);
        }
        if live.len() < left_before {
            left_before = live.len();
            deadline = Instant::now() + Duration::from_secs(60) + bound;
        }
        if Instant::now() > deadline {
            for j in live {
                violations.push(format!(
                    "job {} never ended: {} {:?} ({})",
                    j.id,
                    j.state,
                    j.reason,
                    history(&book.lock().expect("lock"), j.id)
                ));
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    std::thread::sleep(Duration::from_millis(600));
    stop_observing.store(true, std::sync::atomic::Ordering::SeqCst);
    observer.join().map_err(|_| anyhow::anyhow!("the observer thread panicked"))??;
    let out = load.wait_with_output()?;
    let lr: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let (requests, requests_failed) = (lr["sent"].as_u64().unwrap_or(0), lr["failed"].as_u64().unwrap_or(0));
    if requests == 0 {
        violations.push("the load generator sent nothing".into());
    }
    if requests_failed > 0 {
        violations.push(format!(
            "{requests_failed} of {requests} requests to the service failed (errors {}, statuses {}): {}",
            lr["errors"],
            lr["statuses"],
            failures_by_fault(&lr["failures"], start_unix_ms, &injected)
        ));
    }
    // Nothing allocated that no running job holds.
    let jobs: Vec<JobInfo> = api.get("/v1/history?since=0")?;
    let nodes: Vec<NodeInfo> = api.get("/v1/nodes")?;
    for n in &nodes {
        let held: u32 = jobs.iter().filter(|j| j.running() && j.nodelist == n.name).map(|j| j.cpus).sum();
        if n.cpus.1 != held {
            violations.push(format!("node {} has {} CPUs allocated, but its running jobs hold {held}", n.name, n.cpus.1));
        }
    }
    let status: Option<wire::ClusterStatus> = if a.etcd { api.get("/v1/status").ok() } else { None };
    let b = book.lock().expect("lock");
    violations.extend(check(&b, &jobs, &dir.join("ledger")));
    if !violations.is_empty() {
        // The controller's directory is a tmpfs, gone at the end: its database is kept.
        let _ = Command::new("cp").arg("-a").arg(dir.join("controller")).arg(dir.join("controller-saved")).status();
    }
    let ledger = read_ledger(&dir.join("ledger"));
    let mut final_states = BTreeMap::new();
    for j in jobs.iter().filter(|j| !j.name.starts_with("web")) {
        *final_states.entry(j.state.clone()).or_default() += 1;
    }
    let mut faults = BTreeMap::new();
    for i in &injected {
        *faults.entry(i.fault.kind().to_string()).or_default() += 1;
    }
    Ok(ChaosReport {
        seed: a.seed,
        duration_s: a.duration,
        agents: a.agents,
        lease_s: a.lease,
        bound_s: bound.as_secs_f64(),
        faults,
        schedule: injected,
        jobs: jobs.iter().filter(|j| !j.name.starts_with("web")).count(),
        runs: ledger.values().flatten().filter(|l| l.kind == "start").count(),
        final_states,
        cancels: b.cancels.len(),
        requests,
        requests_failed,
        node_loss_recovery_s: node_loss,
        failpoint_crashes: crashed_at,
        failpoints_missing: no_failpoints,
        store: if a.etcd { "etcd" } else { "sqlite" }.into(),
        leaderships: status.as_ref().and_then(|s| s.etcd.as_ref()).map(|e| e.leaderships),
        cut_step_down_s: cut_step_down,
        etcd_db_bytes: status.as_ref().and_then(|s| s.etcd.as_ref()).and_then(|e| e.members.iter().map(|m| m.db_bytes).max()),
        violations,
    })
}

/// The load generator's failures, each placed in time and by the fault it fell in (from the
/// fault's start until the cluster was steady again), grouped: "at 41.2-41.9 s, 11 x HTTP 502,
/// during kill -9 agent alone (node 2, at 40.1 s)".
fn failures_by_fault(failures: &serde_json::Value, start_unix_ms: i128, injected: &[Injected]) -> String {
    let mut groups: Vec<(f64, f64, String, usize, String)> = Vec::new();
    for f in failures.as_array().into_iter().flatten() {
        let t = (f["due_unix_ms"].as_u64().unwrap_or(0) as i128 - start_unix_ms) as f64 / 1000.0;
        let what = f["what"].as_str().unwrap_or("?").to_string();
        let during = injected
            .iter()
            .rev()
            .find(|i| i.at_s <= t + 0.5)
            .map(|i| {
                let end = i.at_s + i.steady_s.unwrap_or(f64::INFINITY);
                let fault = format!("{} ({:?}, at {:.1} s)", i.fault.kind(), i.fault, i.at_s);
                if t <= end + 1.0 { format!("during {fault}") } else { format!("{:.1} s after {fault} was steady", t - end) }
            })
            .unwrap_or_else(|| "before any fault".into());
        match groups.last_mut() {
            Some(g) if g.2 == what && g.4 == during && t - g.1 < 5.0 => {
                g.1 = t;
                g.3 += 1;
            }
            _ => groups.push((t, t, what, 1, during)),
        }
    }
    groups.iter().map(|(a, b, what, n, during)| format!("at {a:.1}-{b:.1} s, {n} x {what}, {during}")).collect::<Vec<_>>().join("; ")
}

fn is_final(state: &str) -> bool {
    !matches!(state, "PENDING" | "RUNNING" | "COMPLETING" | "CONFIGURING" | "SUSPENDED")
}

fn steady_detail(api: &Api) -> String {
    let nodes =
        api.get::<Vec<NodeInfo>>("/v1/nodes").map(|n| n.iter().map(|n| format!("{} {}", n.name, n.state)).collect::<Vec<_>>().join(", "));
    let s = api.get::<ServiceInfo>("/v1/services/web").map(|s| format!("service {}/{} ready", s.ready, s.desired));
    format!("nodes: {}; {}", nodes.unwrap_or_else(|e| e.to_string()), s.unwrap_or_else(|e| e.to_string()))
}

/// The pids of the running batch scripts (the tasks a fault may kill).
fn task_pids(dir: &Path) -> Vec<i32> {
    let o = Command::new("pgrep").args(["-f", &format!("{}/node[0-9]+/spool/job_", dir.display())]).output();
    let mut v: Vec<i32> =
        o.map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect()).unwrap_or_default();
    v.sort();
    v
}

/// The workload: submissions of every kind, cancels, holds and releases, requeues, at seeded
/// moments, until `stop`.
fn workload(seed: u64, exe: &Path, server: &str, dir: &Path, book: &Mutex<Book>, stop: &std::sync::atomic::AtomicBool) -> Result<()> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x0b5e_55ed);
    let path = format!("{}:{}", dir.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let run = |args: &[String]| -> Option<String> {
        let o = Command::new(exe)
            .args(args)
            .env("TANDEM_SERVER", server)
            .env("PATH", &path)
            .current_dir(dir.join("work"))
            .stdin(Stdio::null())
            .output()
            .ok()?;
        o.status.success().then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let mut held: Vec<u64> = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(rng.random_range(300..1500)));
        let live: Vec<(u64, String)> = {
            let b = book.lock().expect("lock");
            b.last.iter().filter(|j| !j.name.starts_with("web") && !is_final(&j.state)).map(|j| (j.id, j.state.clone())).collect()
        };
        let roll = rng.random_range(0..100u32);
        if roll < 50 {
            let secs = rng.random_range(2..12u32);
            let mut args: Vec<String> = vec!["submit".into(), "--parsable".into(), "-c1".into(), "-o".into(), "/dev/null".into()];
            let kind = rng.random_range(0..100u32);
            let mut array = None;
            if kind < 15 {
                args.push("-N2".into());
            } else if kind < 25 {
                let n = rng.random_range(2..5u32);
                args.push(format!("--array=0-{}", n - 1));
                array = Some(n);
            } else if kind < 35
                && let Some((dep, _)) = live.get(rng.random_range(0..live.len().max(1)))
            {
                args.push(format!("--dependency=afterany:{dep}"));
            } else if kind < 45 {
                args.push("--time=0:03".into());
            }
            if rng.random_bool(0.2) {
                args.push("--no-requeue".into());
            }
            args.push("job.sh".into());
            args.push(secs.to_string());
            if let Some(out) = run(&args)
                && let Ok(id) = out.split(';').next().unwrap_or("").trim().parse::<u64>()
            {
                let mut b = book.lock().expect("lock");
                b.submitted.push((id, now_ns()));
                if let Some(n) = array {
                    b.arrays.push((id, n));
                }
            }
        } else if roll < 70 {
            if let Some((id, _)) = live.get(rng.random_range(0..live.len().max(1))) {
                if run(&["cancel".into(), id.to_string()]).is_some() {
                    book.lock().expect("lock").cancels.push((*id, now_ns()));
                }
            }
        } else if roll < 80 {
            if let Some(id) = held.pop() {
                run(&["show".into(), "release".into(), id.to_string()]);
            } else if let Some((id, _)) = live.iter().find(|(_, s)| s == "PENDING") {
                if run(&["show".into(), "hold".into(), id.to_string()]).is_some() {
                    held.push(*id);
                }
            }
        } else if roll < 85
            && let Some((id, _)) = live.iter().find(|(_, s)| s == "RUNNING")
        {
            if run(&["show".into(), "requeue".into(), id.to_string()]).is_some() {
                book.lock().expect("lock").requeues.push((*id, now_ns()));
            }
        }
    }
    for id in held {
        run(&["show".into(), "release".into(), id.to_string()]);
    }
    Ok(())
}

/// One ledger line.
#[derive(Debug, Clone)]
struct Line {
    kind: String,
    run: u32,
    node: String,
    t: i128,
}

fn read_ledger(dir: &Path) -> BTreeMap<u64, Vec<Line>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "log") {
            continue;
        }
        let Some(id) = p.file_stem().and_then(|s| s.to_str()).and_then(|s| s.parse::<u64>().ok()) else { continue };
        let lines = std::fs::read_to_string(&p)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                Some(Line {
                    kind: f.first()?.to_string(),
                    run: f.get(2)?.parse().ok()?,
                    node: f.get(3)?.to_string(),
                    t: f.get(4)?.parse().ok()?,
                })
            })
            .collect();
        out.insert(id, lines);
    }
    out
}

fn history(b: &Book, id: u64) -> String {
    b.seen.get(&id).map_or("never seen".into(), |h| h.iter().map(|(_, s, r)| format!("{s}/{r}")).collect::<Vec<_>>().join(" -> "))
}

/// The invariants, against the observed histories, the final listing and the ledgers.
fn check(b: &Book, jobs: &[JobInfo], ledger_dir: &Path) -> Vec<String> {
    let mut v = Vec::new();
    let ledger = read_ledger(ledger_dir);
    let by_id: HashMap<u64, &JobInfo> = jobs.iter().map(|j| (j.id, j)).collect();
    let describe = |id: u64| -> String {
        let lines = ledger
            .get(&id)
            .map_or(String::new(), |l| l.iter().map(|x| format!("{} run {} on {}", x.kind, x.run, x.node)).collect::<Vec<_>>().join("; "));
        format!("history {}; ledger: {}", history(b, id), if lines.is_empty() { "empty".into() } else { lines })
    };
    // No acknowledged submission is lost.
    for (id, _) in &b.submitted {
        if !by_id.contains_key(id) {
            v.push(format!("acknowledged job {id} is gone"));
        }
    }
    for (array, n) in &b.arrays {
        let tasks = jobs.iter().filter(|j| j.display_id.starts_with(&format!("{array}_"))).count();
        if tasks < *n as usize {
            v.push(format!("array {array} has {tasks} tasks, not {n}"));
        }
    }
    // Each job's observed history: once terminal, it never changes but by a requeue the workload
    // made (into a new run, the job not cancelled); restarts never go down.
    let requeued: HashMap<u64, Vec<i128>> = b.requeues.iter().fold(HashMap::new(), |mut m, (id, t)| {
        m.entry(*id).or_default().push(*t);
        m
    });
    for (id, h) in &b.seen {
        let mut terminal: Option<(&str, i128)> = None;
        let mut restarts = 0;
        for (at, s, r) in h {
            if let Some((t, since)) = terminal
                && (t != s || *r != restarts)
            {
                // A requeue acknowledged after the job was seen running and before this new run
                // was seen (the job may have ended between the workload's look and its requeue).
                let by_requeue = t != "CANCELLED"
                    && *r > restarts
                    && requeued.get(id).is_some_and(|ts| ts.iter().any(|q| *q <= *at && *q + 60_000_000_000 >= since));
                if !by_requeue {
                    v.push(format!("job {id} left its terminal state {t}: {}", describe(*id)));
                    break;
                }
                terminal = None;
            }
            if *r < restarts {
                v.push(format!("job {id}'s restart count went down: {}", describe(*id)));
            }
            restarts = restarts.max(*r);
            if is_final(s) && terminal.is_none() {
                terminal = Some((s, *at));
            }
        }
    }
    // What each acknowledged cancel covers: the job, or, for an array's id, every task of it
    // (`scancel 12` cancels the array's unfinished tasks; one that ended before keeps its state).
    let arrays: HashSet<u64> = b.arrays.iter().map(|(a, _)| *a).collect();
    let mut cancels: HashMap<u64, (i128, bool)> = HashMap::new();
    for &(id, t) in &b.cancels {
        if arrays.contains(&id) {
            for j in jobs.iter().filter(|j| j.array_job_id == Some(id)) {
                cancels.entry(j.id).or_insert((t, true));
            }
        }
        let e = cancels.entry(id).or_insert((t, false));
        e.1 &= arrays.contains(&id);
    }
    // Runs: never two at once, none after its cancel, no output after the controller ended it.
    for (id, lines) in &ledger {
        if lines.iter().any(|l| l.kind == "overlap") {
            v.push(format!("job {id}: a run started while another held its lock: {}", describe(*id)));
        }
        if let Some(&(c, _)) = cancels.get(id) {
            // A launch delivered just before the cancel may start just after it.
            if let Some(l) = lines.iter().find(|l| l.kind == "start" && l.t > c + 2_000_000_000) {
                v.push(format!(
                    "job {id}: run {} started {:.1} s after its cancel was acknowledged: {}",
                    l.run,
                    (l.t - c) as f64 / 1e9,
                    describe(*id)
                ));
            }
        }
        if let Some(j) = by_id.get(id)
            && let Some(end) = j.end
            && is_final(&j.state)
        {
            let end_ns = end as i128 * 1_000_000_000;
            if let Some(l) = lines.iter().find(|l| l.t > end_ns + 2_000_000_000) {
                v.push(format!(
                    "job {id}: run {} wrote \"{}\" {:.1} s after the job ended: {}",
                    l.run,
                    l.kind,
                    (l.t - end_ns) as f64 / 1e9,
                    describe(*id)
                ));
            }
        }
        let starts: BTreeSet<u32> = lines.iter().filter(|l| l.kind == "start").map(|l| l.run).collect();
        if starts.len() < lines.iter().filter(|l| l.kind == "start").count() {
            v.push(format!("job {id}: one run number started twice: {}", describe(*id)));
        }
    }
    // An acknowledged cancel ends CANCELLED: a job always (a finished one is refused), an array's
    // task unless its last run had ended before the cancel (seen final, or its ledger's last line
    // written before the reply).
    for (id, &(c, array)) in &cancels {
        let Some(j) = by_id.get(id) else { continue };
        let ended_before = || {
            b.seen.get(id).is_some_and(|h| h.iter().any(|(at, s, r)| *at <= c && *r == j.restarts && is_final(s)))
                || ledger
                    .get(id)
                    .is_some_and(|l| l.iter().any(|x| x.run == j.restarts && x.t <= c && (x.kind == "end" || x.kind == "overlap")))
        };
        if j.state != "CANCELLED" && !(array && ended_before()) {
            v.push(format!("job {id} was cancelled but ended {}: {}", j.state, describe(*id)));
        }
    }
    // At the end no process of an ended job is left: its lock is free.
    for (id, _) in ledger.iter().filter(|(id, _)| by_id.get(id).is_some_and(|j| is_final(&j.state))) {
        let lock = ledger_dir.join(format!("{id}.lock"));
        let free = Command::new("flock").args(["-n"]).arg(&lock).arg("true").status().is_ok_and(|s| s.success());
        if !free {
            v.push(format!("job {id}: a process of it still holds its lock after it ended: {}", describe(*id)));
        }
    }
    v
}

/// Prints the report for people.
pub fn print(r: &ChaosReport) {
    println!("tandem bench chaos --seed {} --duration {} --agents {} (lease {} s)", r.seed, r.duration_s, r.agents, r.lease_s);
    println!("faults injected:");
    for (k, n) in &r.faults {
        println!("  {n:>4}  {k}");
    }
    let steady: Vec<f64> = r.schedule.iter().filter_map(|i| i.steady_s).collect();
    let max = steady.iter().copied().fold(0.0, f64::max);
    println!("steady again after each fault: largest {max:.1} s (bound {:.1} s after it healed)", r.bound_s);
    if !r.node_loss_recovery_s.is_empty() {
        let m = r.node_loss_recovery_s.iter().copied().fold(0.0, f64::max);
        println!("jobs of a lost node requeued or ended: {} jobs, largest {m:.1} s after the loss", r.node_loss_recovery_s.len());
    }
    println!("jobs: {} ({} runs), cancels acknowledged: {}, final states: {:?}", r.jobs, r.runs, r.cancels, r.final_states);
    println!("service: {} requests, {} failed", r.requests, r.requests_failed);
    if r.failpoints_missing {
        println!("(this binary has no failpoints, a test build's feature: controller crashes at failpoints were plain restarts)");
    } else if r.faults.contains_key("controller crash at a failpoint") {
        println!("controller crashes at a failpoint reached: {}", r.failpoint_crashes);
    }
    if r.violations.is_empty() {
        println!("violations: 0");
    } else {
        println!("VIOLATIONS ({}), seed {}:", r.violations.len(), r.seed);
        for v in &r.violations {
            println!("  - {v}");
        }
        println!("fault schedule:");
        for i in &r.schedule {
            println!("  {:>7.1} s  {:?}", i.at_s, i.fault);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_state_is_left_only_by_a_requeue_the_workload_made() {
        let dir = std::env::temp_dir().join(format!("chaos-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let s = 1_000_000_000i128;
        let seen = |first: &str| {
            vec![
                (s, "RUNNING".to_string(), 0),
                (2 * s, first.to_string(), 0),
                (4 * s, "PENDING".to_string(), 1),
                (5 * s, "RUNNING".to_string(), 1),
            ]
        };
        let left = |b: &Book| check(b, &[], &dir).iter().filter(|v| v.contains("left its terminal state")).count();
        let mut b = Book::default();
        b.seen.insert(5, seen("COMPLETED"));
        assert_eq!(left(&b), 1, "no requeue: a violation");
        // The workload saw it running and requeued it; it had completed meanwhile.
        b.requeues.push((5, 3 * s));
        assert_eq!(left(&b), 0);
        // A requeue long before, or of a cancelled job, does not excuse it.
        b.requeues = vec![(5, -100 * s)];
        assert_eq!(left(&b), 1);
        b.requeues = vec![(5, 3 * s)];
        b.seen.insert(5, seen("CANCELLED"));
        assert_eq!(left(&b), 1);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_cancelled_array_keeps_the_tasks_that_had_ended_before_it() {
        let dir = std::env::temp_dir().join(format!("chaos-array-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let s = 1_000_000_000i128;
        let task = |id: u64, k: u32, state: &str| -> JobInfo {
            let mut j: JobInfo = serde_json::from_str(JOB).unwrap();
            (j.id, j.display_id, j.state, j.array_job_id) = (id, format!("10_{k}"), state.into(), Some(10));
            j
        };
        let cancelled = |b: &Book, jobs: &[JobInfo]| {
            let mut v: Vec<String> = check(b, jobs, &dir).into_iter().filter(|v| v.contains("was cancelled")).collect();
            v.sort();
            v
        };
        let mut b = Book { arrays: vec![(10, 3)], cancels: vec![(10, 5 * s)], ..Book::default() };
        // Task 0 ended on its own before the cancel (its ledger says so), 1 and 2 were cancelled.
        std::fs::write(dir.join("10.log"), format!("start 10 0 node1 {}\nend 10 0 node1 {}\n", s, 4 * s)).unwrap();
        let jobs = [task(10, 0, "COMPLETED"), task(11, 1, "CANCELLED"), task(12, 2, "CANCELLED")];
        assert!(cancelled(&b, &jobs).is_empty());
        // A task that ended after the cancel, or whose end nobody saw, is a violation.
        let jobs = [task(10, 0, "CANCELLED"), task(11, 1, "COMPLETED"), task(12, 2, "FAILED")];
        assert_eq!(cancelled(&b, &jobs).len(), 2, "{:?}", cancelled(&b, &jobs));
        // Seen failed before the cancel: its own end.
        b.seen.insert(12, vec![(4 * s, "FAILED".into(), 0)]);
        assert_eq!(cancelled(&b, &jobs).len(), 1);
        // A job that is not an array's must end CANCELLED whatever its ledger says.
        let b = Book { cancels: vec![(10, 5 * s)], ..Book::default() };
        let mut one = task(10, 0, "COMPLETED");
        one.array_job_id = None;
        assert_eq!(cancelled(&b, &[one]).len(), 1);
        std::fs::remove_dir_all(&dir).ok();
    }

    const JOB: &str = r#"{"id":1,"display_id":"1","name":"job.sh","user":"root","account":"root","partition":"batch",
        "qos":"normal","state":"PENDING","reason":"None","nodelist":"","nodes":1,"ntasks":1,"cpus":1,"gpus":0,
        "time_limit":null,"submit":0,"start":null,"start_estimated":false,"end":null,"exit_code":"0:0","restarts":0,
        "workdir":"/","output":"/dev/null","steps":[],"recorded":[],"message":null,"uid":0,"gid":0}"#;

    #[test]
    fn a_seed_gives_one_schedule_of_faults_within_the_run() {
        let a = schedule(7, 300_000, 3, 6_000, false);
        assert_eq!(a, schedule(7, 300_000, 3, 6_000, false));
        assert_ne!(a, schedule(8, 300_000, 3, 6_000, false));
        assert!(a.len() > 10 && a.iter().all(|(at, _)| *at < 300_000), "{a:?}");
        assert!(a.windows(2).all(|w| w[0].0 < w[1].0));
        for (_, f) in &a {
            match f {
                Fault::KillAgent { node, .. } | Fault::Partition { node, .. } => assert!((1..=3).contains(node)),
                _ => {}
            }
        }
        // Every kind turns up in a long enough run.
        let kinds: BTreeSet<&str> = schedule(1, 3_600_000, 3, 6_000, false).iter().map(|(_, f)| f.kind()).collect();
        assert_eq!(kinds.len(), 8, "{kinds:?}");
        // With etcd: the failpoint crashes and the full disk give way to etcd's faults.
        let kinds: BTreeSet<&str> = schedule(1, 3_600_000, 3, 6_000, true).iter().map(|(_, f)| f.kind()).collect();
        assert_eq!(kinds.len(), 8, "{kinds:?}");
        assert!(
            kinds.contains("leader cut off from etcd")
                && kinds.contains("kill -9 etcd member")
                && !kinds.contains("controller's disk full")
        );
    }
}
