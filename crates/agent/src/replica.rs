//! The agent's replica supervisor (the kubelet's job): gives a service replica a free port
//! (`$PORT`), runs it, probes it (startup, liveness, readiness: HTTP GET or TCP connect), restarts
//! it with a growing back-off when it exits or fails liveness (10 s doubling to 5 min, as
//! Kubernetes' CrashLoopBackOff), and keeps a status that the agent sends with every heartbeat.

use control::service::{Probe, ProbeKind};
use control::{ReplicaReport, Task, TaskKey};
use nix::sys::signal::Signal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, mpsc};

use crate::launch::{Cgroups, Kept, Tasks, kill_group, launch};

/// First restart delay, and the cap (Kubernetes' CrashLoopBackOff).
const BACKOFF_START: Duration = Duration::from_secs(10);
const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// A replica that ran this long without trouble starts its back-off afresh.
const BACKOFF_RESET: Duration = Duration::from_secs(600);

/// What the agent's main loop holds of a supervised replica.
pub struct Ctl {
    /// Process group of the current process (0 between restarts).
    pub pgid: AtomicI32,
    /// Told to stop: no more restarts.
    pub stopping: AtomicBool,
    stop: Notify,
    /// Status for the heartbeat.
    pub status: Mutex<ReplicaReport>,
}

impl Ctl {
    /// Stops the replica: no restart; `sig` goes to its process group now.
    pub fn stop(&self, sig: Signal) {
        self.stopping.store(true, Ordering::SeqCst);
        self.stop.notify_one();
        let pgid = self.pgid.load(Ordering::SeqCst);
        if pgid > 0 {
            kill_group(pgid, sig);
        }
    }
}

/// A free TCP port on this machine (the replica binds it a moment later).
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind(("0.0.0.0", 0))?.local_addr()?.port())
}

/// The owners (uids) of the sockets listening on TCP `port`, on any address, as a
/// `/proc/net/tcp` or `/proc/net/tcp6` table lists them.
fn listening_uids(table: &str, port: u16) -> Vec<u32> {
    let mut out = Vec::new();
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        // sl local_address rem_address st tx:rx tr:when retrnsmt uid ...
        let (Some(local), Some(st), Some(uid)) = (f.get(1), f.get(3), f.get(7)) else { continue };
        let p = local.rsplit_once(':').and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
        if *st == "0A"
            && p == Some(port)
            && let Ok(u) = uid.parse::<u32>()
        {
            out.push(u);
        }
    }
    out
}

/// A user other than `owner` whose socket listens on `port` on this machine (in this network
/// namespace): another local user who took a replica's port (before the replica bound it, or
/// while it restarted) and would receive its requests.
fn port_squatter(port: u16, owner: u32) -> Option<u32> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| listening_uids(&t, port))
        .find(|u| *u != owner)
}

/// Puts `port` into a replica's command line (`$PORT`, `${PORT}`) and environment (`PORT`).
fn with_port(template: &Task, port: u16) -> Task {
    let mut t = template.clone();
    for a in &mut t.argv {
        *a = a.replace("${PORT}", &port.to_string()).replace("$PORT", &port.to_string());
    }
    t.env.retain(|(k, _)| k != "PORT");
    t.env.push(("PORT".into(), port.to_string()));
    t
}

/// One probe attempt.
async fn probe_once(p: &Probe, port: u16) -> Result<(), String> {
    let port = p.port.unwrap_or(port);
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| format!("connect to port {port}: {e}"))?;
        let ProbeKind::Http(path) = &p.kind else { return Ok(()) };
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: tandem-probe\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await.map_err(|e| format!("GET {path}: {e}"))?;
        let mut buf = Vec::with_capacity(64);
        let mut chunk = [0u8; 256];
        while !buf.contains(&b'\n') && buf.len() < 4096 {
            let n = s.read(&mut chunk).await.map_err(|e| format!("GET {path}: {e}"))?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let line = String::from_utf8_lossy(&buf);
        let code: u16 =
            line.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or_else(|| format!("GET {path}: not an HTTP answer"))?;
        if (200..400).contains(&code) { Ok(()) } else { Err(format!("GET {path}: HTTP {code}")) }
    };
    match tokio::time::timeout(Duration::from_millis(p.timeout_ms), attempt).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {} ms", p.timeout_ms)),
    }
}

/// Consecutive results of one probe.
struct Counter {
    probe: Probe,
    next: Instant,
    ok: u32,
    failed: u32,
    passed: bool,
}

impl Counter {
    fn new(p: &Option<Probe>, start: Instant) -> Option<Counter> {
        p.as_ref().map(|p| Counter {
            probe: p.clone(),
            next: start + Duration::from_millis(p.initial_delay_ms),
            ok: 0,
            failed: 0,
            passed: false,
        })
    }

    /// Runs the probe if due; returns the error once failures reach the threshold.
    async fn run(&mut self, port: u16, now: Instant) -> Option<String> {
        if now < self.next {
            return None;
        }
        self.next = now + Duration::from_millis(self.probe.period_ms);
        match probe_once(&self.probe, port).await {
            Ok(()) => {
                self.ok += 1;
                self.failed = 0;
                if self.ok >= self.probe.success_threshold {
                    self.passed = true;
                }
                None
            }
            Err(e) => {
                self.ok = 0;
                self.failed += 1;
                (self.failed >= self.probe.failure_threshold).then(|| {
                    self.passed = false;
                    e
                })
            }
        }
    }
}

/// The supervisor's surroundings: where tasks are launched and recorded, and whom to tell.
pub struct Env {
    /// Batch scripts.
    pub spool: PathBuf,
    /// Task records.
    pub tasks: Arc<Tasks>,
    /// Job cgroups.
    pub cg: Arc<Cgroups>,
    /// Where the replica's final exit goes, once it was told to stop.
    pub done: mpsc::UnboundedSender<(TaskKey, Option<std::process::ExitStatus>)>,
    /// Notified when its status changes.
    pub changed: Arc<Notify>,
}

/// Starts supervising a replica task; `adopted`: its process, started by an earlier agent
/// process (the task then has its port already).
pub fn spawn(mut t: Task, env: Env, adopted: Option<(Kept, Option<PathBuf>)>) -> Arc<Ctl> {
    let Env { spool, tasks, cg, done, changed } = env;
    let key = TaskKey { job: t.job, epoch: t.epoch, step: t.step, rank: t.rank };
    // The task as the controller sent it ($PORT unexpanded), for each start's fresh port.
    let template = t.clone();
    let mut port = match &adopted {
        Some(_) => t.env.iter().find(|(k, _)| k == "PORT").and_then(|(_, v)| v.parse().ok()).unwrap_or(0),
        None => {
            let port = free_port().unwrap_or(0);
            t = with_port(&template, port);
            port
        }
    };
    // Whose sockets the replica's are: its user's where the agent runs as root, else the agent's.
    let owner = {
        let me = nix::unistd::geteuid();
        if me.is_root() { t.uid } else { me.as_raw() }
    };
    let ctl = Arc::new(Ctl {
        pgid: AtomicI32::new(0),
        stopping: AtomicBool::new(false),
        stop: Notify::new(),
        status: Mutex::new(ReplicaReport { job: t.job, epoch: t.epoch, port, ready: false, restarts: 0, crashloop: false, message: None }),
    });
    let c = ctl.clone();
    let mut adopted = adopted;
    tokio::spawn(async move {
        let r = t.replica.clone().expect("a replica task");
        let set = |f: &dyn Fn(&mut ReplicaReport)| {
            let mut s = c.status.lock().expect("lock");
            let before = s.clone();
            f(&mut s);
            if *s != before {
                changed.notify_one();
            }
        };
        let mut backoff = BACKOFF_START;
        let mut restarted = false;
        let mut last_exit: Option<std::process::ExitStatus> = None;
        loop {
            if c.stopping.load(Ordering::SeqCst) {
                break;
            }
            let started = Instant::now();
            let mut trouble: Option<String> = None;
            let was_adopted = adopted.is_some();
            let proc = match adopted.take() {
                Some(p) => Ok(p),
                None => {
                    // A restart gets a fresh port: one another user took while the replica was
                    // down stays theirs, unrouted.
                    if restarted {
                        port = free_port().unwrap_or(0);
                        t = with_port(&template, port);
                        set(&|s| s.port = port);
                    }
                    launch(&t, &spool, &tasks, &cg)
                }
            };
            restarted = true;
            match proc {
                Err(e) => trouble = Some(format!("{e:#}")),
                Ok((mut child, cgroup)) => {
                    c.pgid.store(child.pid, Ordering::SeqCst);
                    set(&|s| s.crashloop = false);
                    // An adopted replica started long ago: its startup probe is behind it.
                    let mut startup = if was_adopted { None } else { Counter::new(&r.startup, started) };
                    let mut live = Counter::new(&r.liveness, started);
                    let mut ready = Counter::new(&r.readiness, started);
                    let period =
                        [&startup, &live, &ready].iter().filter_map(|x| x.as_ref().map(|x| x.probe.period_ms)).min().unwrap_or(1000);
                    let tick = Duration::from_millis(period.clamp(50, 1000));
                    last_exit = loop {
                        tokio::select! {
                            st = child.wait() => break st,
                            _ = tokio::time::sleep(tick) => {}
                        }
                        if c.stopping.load(Ordering::SeqCst) {
                            set(&|s| s.ready = false);
                            continue;
                        }
                        let now = Instant::now();
                        let pgid = c.pgid.load(Ordering::SeqCst);
                        if let Some(p) = &mut startup
                            && !p.passed
                        {
                            if let Some(e) = p.run(port, now).await {
                                trouble = Some(format!("startup probe failed: {e}"));
                                kill_group(pgid, Signal::SIGKILL);
                            }
                            continue;
                        }
                        if let Some(p) = &mut live
                            && let Some(e) = p.run(port, now).await
                        {
                            trouble = Some(format!("liveness probe failed: {e}"));
                            kill_group(pgid, Signal::SIGKILL);
                            continue;
                        }
                        // Whatever the probes say, a port another user listens on is not the
                        // replica's: no request goes there.
                        if let Some(u) = port_squatter(port, owner) {
                            set(&|s| {
                                s.ready = false;
                                s.message = Some(format!("port {port} is listened on by uid {u}, not by the replica's user: not ready"));
                            });
                            continue;
                        }
                        let is_ready = match &mut ready {
                            None => true,
                            Some(p) => {
                                if let Some(e) = p.run(port, now).await {
                                    set(&|s| s.message = Some(format!("readiness probe failed: {e}")));
                                }
                                p.passed
                            }
                        };
                        set(&|s| s.ready = is_ready);
                    };
                    c.pgid.store(0, Ordering::SeqCst);
                    if let Some(dir) = cgroup {
                        let _ = std::fs::remove_dir(&dir);
                    }
                }
            }
            if c.stopping.load(Ordering::SeqCst) {
                break;
            }
            if started.elapsed() > BACKOFF_RESET {
                backoff = BACKOFF_START;
            }
            use std::os::unix::process::ExitStatusExt;
            let why = trouble.unwrap_or_else(|| match (last_exit.and_then(|e| e.code()), last_exit.and_then(|e| e.signal())) {
                (Some(code), _) => format!("exited with code {code}"),
                (_, Some(sig)) => format!("killed by signal {sig}"),
                _ => "ended (how is not known)".into(),
            });
            tracing::warn!("replica {}: {why}; restarting in {} s", r.replica, backoff.as_secs());
            set(&|s| {
                s.ready = false;
                s.crashloop = true;
                s.restarts += 1;
                s.message = Some(format!("{why}; back-off {} s", backoff.as_secs()));
            });
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = c.stop.notified() => {}
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
        let _ = done.send((key, last_exit));
    });
    ctl
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_uids_reads_the_listeners_of_one_port() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 1282 1 0 100 0 0 10 0
   1: 0100007F:1F90 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000  1002        0 8672 1 0 100 0 0 10 0
   2: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 8673 1 0 100 0 0 10 0
   3: garbage
   4: 0100007F:ZZZZ 00000000:0000 0A 00000000:00000000 00:00000000 00000000     7        0 8674 1 0 100 0 0 10 0
";
        // Port 8080 (0x1F90): the listener only, not the established connection.
        assert_eq!(listening_uids(table, 8080), vec![1001]);
        assert_eq!(listening_uids(table, 8081), vec![0]);
        assert!(listening_uids(table, 9).is_empty());
        assert!(listening_uids("", 8080).is_empty());
        let v6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1003        0 1 1 0 100 0 0 10 0
";
        assert_eq!(listening_uids(v6, 8080), vec![1003]);
    }

    #[test]
    fn a_port_held_by_this_process_is_seen_from_proc() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let me = nix::unistd::geteuid().as_raw();
        assert_eq!(port_squatter(port, me), None);
        assert_eq!(port_squatter(port, me.wrapping_add(1)), Some(me));
    }
}
