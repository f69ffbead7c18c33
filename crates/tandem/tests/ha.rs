//! Controllers that take over from each other, on a real etcd: three members of Debian's
//! etcd-server on loopback, two `tandem server --store etcd://...` (the second a standby), two
//! agents and the Slurm commands, each given both controllers. The leader is killed (-9) in
//! the middle of a stream of submissions with jobs running.
mod common;

use common::*;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::{Child, Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Two controllers on a three-member etcd, with agents; everything stopped when dropped.
struct Ha {
    _turn: std::sync::MutexGuard<'static, ()>,
    dir: PathBuf,
    work: PathBuf,
    shims: PathBuf,
    etcd: up::etcd::Etcd,
    /// Each controller's TCP port, data directory and process.
    ctl: Vec<(u16, PathBuf, Option<Child>)>,
    agents: Procs,
}

impl Drop for Ha {
    fn drop(&mut self) {
        for a in &self.agents.0 {
            kill_tree(a.id(), "-9");
        }
        for (_, _, c) in &mut self.ctl {
            if let Some(mut c) = c.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The files every controller of a cluster shares (SECURITY.md): the cluster CA and the keys
/// that sign user tokens and node credentials.
const SHARED: [&str; 4] = ["ca.pem", "ca.key", "jwt.key", "nodes.key"];

/// One HA cluster at a time: three etcd members and two controllers each, on a machine of two
/// cores, time their leases against each other otherwise.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

impl Ha {
    fn start(tag: &str, agents: usize) -> Option<Ha> {
        if !have("etcd") {
            assert!(std::env::var_os("CI").is_none(), "etcd is not installed (.ci/run installs Debian's etcd-server)");
            eprintln!("skipped: no etcd (apt-get install etcd-server)");
            return None;
        }
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let dir = free_dir(tag);
        let etcd = up::etcd::Etcd::start(&dir.join("etcd"), 3).unwrap();
        let work = dir.join("work");
        std::fs::create_dir_all(work.join("runs")).unwrap();
        let shims = dir.join("bin");
        assert!(Command::new(bin()).arg("shims").arg(&shims).output().unwrap().status.success());
        let ctl = (1..=2).map(|i| (free_port(), dir.join(format!("c{i}")), None)).collect();
        let mut ha = Ha { _turn: turn, dir, work, shims, etcd, ctl, agents: Procs(Vec::new()) };
        ha.start_controller(0);
        ha.wait_leader(0);
        // The second controller shares the first's CA and keys.
        let (a, b) = (ha.ctl[0].1.clone(), ha.ctl[1].1.clone());
        std::fs::create_dir_all(&b).unwrap();
        for f in SHARED {
            std::fs::copy(a.join(f), b.join(f)).unwrap();
        }
        ha.start_controller(1);
        let servers = ha.tcp_servers();
        for i in 0..agents {
            let name = format!("node{}", i + 1);
            let data = ha.dir.join(&name);
            std::fs::create_dir_all(&data).unwrap();
            let join = data.join("join-token");
            std::fs::write(&join, ha.tandem_ok(&["token", "--join"])).unwrap();
            let log = std::fs::File::create(ha.dir.join(format!("{name}.log"))).unwrap();
            let child = Command::new(bin())
                .args(["agent", "--server", &servers, "--name", &name, "--cpus", "4", "--memory", "4G", "--join-token-file"])
                .arg(&join)
                .arg("--ca")
                .arg(a.join("ca.pem"))
                .arg("--data")
                .arg(&data)
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap();
            ha.agents.0.push(child);
        }
        ha.wait_nodes(agents);
        Some(ha)
    }

    fn start_controller(&mut self, i: usize) {
        let (port, data, _) = &self.ctl[i];
        std::fs::create_dir_all(data).unwrap();
        let _ = std::fs::remove_file(data.join("addr"));
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join(format!("c{}.log", i + 1))).unwrap();
        let child = Command::new(bin())
            .args(["server", "--listen", &format!("127.0.0.1:{port}"), "--lease", "30", "--kill-wait", "2"])
            .args(self.etcd.server_args())
            // The leader's etcd upkeep in rounds of 3 s instead of 5 minutes, so a run sees it.
            .args(["--etcd-upkeep", "3"])
            .arg("--data")
            .arg(data)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.ctl[i].2 = Some(child);
    }

    /// Waits until controller `i` leads (it serves its Unix socket).
    fn wait_leader(&self, i: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let sock = format!("unix://{}", self.ctl[i].1.join("tandem.sock").display());
        loop {
            let o = Command::new(bin()).args(["token"]).env("TANDEM_SERVER", &sock).output().unwrap();
            if o.status.success() {
                return;
            }
            assert!(Instant::now() < deadline, "controller {} did not lead: {}", i + 1, self.log(&format!("c{}", i + 1)));
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }

    /// Every controller's Unix socket: what a user's `TANDEM_SERVER` names.
    fn socks(&self) -> String {
        self.ctl.iter().map(|(_, d, _)| format!("unix://{}", d.join("tandem.sock").display())).collect::<Vec<_>>().join(",")
    }

    fn tcp_servers(&self) -> String {
        self.ctl.iter().map(|(p, _, _)| format!("https://127.0.0.1:{p}")).collect::<Vec<_>>().join(",")
    }

    fn run(&self, cmd: &str, args: &[&str]) -> Output {
        let path = format!("{}:{}", self.shims.display(), std::env::var("PATH").unwrap_or_default());
        Command::new(self.shims.join(cmd))
            .args(args)
            .current_dir(&self.work)
            .env("TANDEM_SERVER", self.socks())
            .env("PATH", path)
            .output()
            .unwrap()
    }

    fn ok(&self, cmd: &str, args: &[&str]) -> String {
        let o = self.run(cmd, args);
        assert!(o.status.success(), "{cmd} {args:?}: {}{}", String::from_utf8_lossy(&o.stderr), String::from_utf8_lossy(&o.stdout));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn tandem_ok(&self, args: &[&str]) -> String {
        let o = Command::new(bin()).args(args).env("TANDEM_SERVER", self.socks()).output().unwrap();
        assert!(o.status.success(), "tandem {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn wait_nodes(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self.ok("sinfo", &["-N", "-h", "-o", "%N %t"]);
            if out.lines().filter(|l| l.ends_with(" idle") || l.ends_with(" mix") || l.ends_with(" alloc")).count() >= n {
                return;
            }
            assert!(Instant::now() < deadline, "nodes did not register:\n{out}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn kill_controller(&mut self, i: usize) {
        if let Some(mut c) = self.ctl[i].2.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What one submission came to.
#[derive(Clone, Debug)]
enum Sub {
    /// Acknowledged: the job id, and when.
    Acked(u64, Instant),
    /// The command failed: whether a job was made is not known.
    Unknown(String),
}

#[test]
fn the_leader_killed_during_a_thousand_submissions_loses_duplicates_and_reruns_nothing() {
    let Some(ha) = Ha::start("ha-failover", 2) else { return };
    let total: usize = std::env::var("TANDEM_HA_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let runs = ha.work.join("runs");
    // A third controller without the cluster's CA and keys refuses to start, saying which.
    let c3 = ha.dir.join("c3");
    let o = Command::new(bin())
        .args(["server", "--listen", "127.0.0.1:0"])
        .args(ha.etcd.server_args())
        .arg("--data")
        .arg(&c3)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("CA and keys are not the cluster's: copy ca.pem, ca.key, jwt.key and nodes.key"), "{e}");
    // A job whose record etcd could not take (one value, one request) is refused before it is
    // accepted, clearly, and nothing is stuck behind it.
    let big = ha.work.join("big.sh");
    std::fs::write(&big, format!("#!/bin/sh\n# {}\ntrue\n", "\u{1}".repeat(300_000))).unwrap();
    let o = ha.run("sbatch", &[big.to_str().unwrap()]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("keeps its state in etcd, where a job's record is at most"), "{e}");
    // A user's token from the first leader, for a request over TCP after it is gone.
    let token = ha.tandem_ok(&["token"]).trim().trim_start_matches("export TANDEM_TOKEN=").to_string();
    let ha = Arc::new(Mutex::new(ha));
    let (socks, shims, work) = {
        let h = ha.lock().unwrap();
        (h.socks(), h.shims.clone(), h.work.clone())
    };
    let results: Arc<Mutex<BTreeMap<usize, Sub>>> = Arc::default();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let submitter = |results: Arc<Mutex<BTreeMap<usize, Sub>>>, next: Arc<std::sync::atomic::AtomicUsize>| {
        let (socks, shims, work, runs) = (socks.clone(), shims.clone(), work.clone(), runs.clone());
        std::thread::spawn(move || {
            loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if k >= total {
                    return;
                }
                // Every tenth job runs for two seconds: some are running when the leader dies.
                let sleep = if k % 10 == 0 { "sleep 2; " } else { "" };
                let wrap = format!("{sleep}echo $SLURM_JOB_ID >> {}/$SLURM_JOB_ID", runs.display());
                let o = Command::new(shims.join("sbatch"))
                    .args(["--parsable", &format!("--job-name=s{k}"), "-o", "/dev/null", "--wrap", &wrap])
                    .current_dir(&work)
                    .env("TANDEM_SERVER", &socks)
                    .output()
                    .unwrap();
                let r = match String::from_utf8_lossy(&o.stdout).trim().parse::<u64>() {
                    Ok(id) if o.status.success() => Sub::Acked(id, Instant::now()),
                    _ => Sub::Unknown(String::from_utf8_lossy(&o.stderr).into_owned()),
                };
                results.lock().unwrap().insert(k, r);
            }
        })
    };
    {
        // scontrol ping: the leader is Slurm's primary, the standby its backup.
        let h = ha.lock().unwrap();
        let ping = h.ok("scontrol", &["ping"]);
        let (a, b) = (h.ctl[0].1.join("tandem.sock"), h.ctl[1].1.join("tandem.sock"));
        assert!(ping.contains(&format!("Slurmctld(primary) at unix://{} is UP", a.display())), "{ping}");
        assert!(
            ping.contains(&format!("Slurmctld(backup) at unix://{} is UP, following https://127.0.0.1:{}", b.display(), h.ctl[0].0)),
            "{ping}"
        );
    }
    let threads: Vec<_> = (0..4).map(|_| submitter(results.clone(), next.clone())).collect();
    // The leader dies a third of the way in.
    while results.lock().unwrap().len() < total / 3 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let killed = Instant::now();
    ha.lock().unwrap().kill_controller(0);
    for t in threads {
        t.join().unwrap();
    }
    let results = results.lock().unwrap().clone();
    let ha = Arc::try_unwrap(ha).ok().unwrap().into_inner().unwrap();
    let acked: BTreeMap<usize, u64> =
        results.iter().filter_map(|(k, r)| if let Sub::Acked(id, _) = r { Some((*k, *id)) } else { None }).collect();
    let unknown: Vec<(usize, String)> =
        results.iter().filter_map(|(k, r)| if let Sub::Unknown(e) = r { Some((*k, e.clone())) } else { None }).collect();
    // Failover: the longest time without an acknowledgement once the leader was killed (four
    // loops submit all along: the old leader's last acknowledgement to the new one's first).
    let mut times: Vec<Instant> = results.values().filter_map(|r| if let Sub::Acked(_, t) = r { Some(*t) } else { None }).collect();
    times.sort();
    let failover = times.windows(2).filter(|w| w[1] > killed).map(|w| w[1].duration_since(w[0]).as_secs_f64()).fold(0.0, f64::max);
    eprintln!(
        "failover (lease TTL 3 s): {failover:.2} s from the old leader's last acknowledgement to the new one's first; {} acknowledged, {} unknown outcome(s): {unknown:?}",
        acked.len(),
        unknown.len()
    );
    // A command whose connection broke with the leader retries with its submission's key.
    assert!(acked.len() == total, "{} acknowledged of {total}: {unknown:?}", acked.len());
    // Every job finishes on the new leader.
    let deadline = Instant::now() + Duration::from_secs(300);
    let jobs = loop {
        let out = ha.ok("sacct", &["-X", "-n", "-P", "-o", "JobID,JobName,State,Restarts"]);
        let jobs: Vec<Vec<String>> = out.lines().map(|l| l.split('|').map(str::to_string).collect()).collect();
        let done = jobs.iter().filter(|j| j[2] == "COMPLETED").count();
        if jobs.iter().all(|j| !["PENDING", "RUNNING", "CONFIGURING", "COMPLETING"].contains(&j[2].as_str())) && !jobs.is_empty() {
            break jobs;
        }
        assert!(Instant::now() < deadline, "{done} of {} done after 300 s:\n{}", jobs.len(), ha.log("c2"));
        std::thread::sleep(Duration::from_millis(500));
    };
    // 0 lost: every acknowledged job is there under its name; none duplicated: a name once at
    // most (an unknown outcome's too); none run twice.
    let mut by_name: HashMap<String, Vec<(u64, String, String)>> = HashMap::new();
    for j in &jobs {
        by_name.entry(j[1].clone()).or_default().push((j[0].parse().unwrap(), j[2].clone(), j[3].clone()));
    }
    for (k, id) in &acked {
        let got = by_name.get(&format!("s{k}")).unwrap_or_else(|| panic!("acknowledged job {id} (s{k}) is lost"));
        assert_eq!(got.len(), 1, "s{k} is stored more than once: {got:?}");
        assert_eq!(got[0].0, *id);
        assert_eq!((got[0].1.as_str(), got[0].2.as_str()), ("COMPLETED", "0"), "job {id}");
        let ran = std::fs::read_to_string(runs.join(id.to_string())).unwrap_or_default();
        assert_eq!(ran.lines().count(), 1, "job {id} ran {} times", ran.lines().count());
    }
    for (k, _) in &unknown {
        assert!(by_name.get(&format!("s{k}")).is_none_or(|v| v.len() == 1), "s{k}");
    }
    assert_eq!(jobs.len(), by_name.len(), "no name twice");
    // The first leader's user token still works over TCP, and both agents kept their
    // credentials (nodes up, no join again).
    let ca = ha.ctl[0].1.join("ca.pem");
    let o = Command::new(ha.shims.join("squeue"))
        .env("TANDEM_SERVER", ha.tcp_servers())
        .env("TANDEM_CA", &ca)
        .env("TANDEM_TOKEN", &token)
        .output()
        .unwrap();
    assert!(o.status.success(), "squeue over TCP with the old leader's token: {}", String::from_utf8_lossy(&o.stderr));
    ha.wait_nodes(2);
    let ping = ha.ok("scontrol", &["ping"]);
    assert!(
        ping.contains(" is DOWN")
            && ping.contains(&format!("Slurmctld(primary) at unix://{} is UP", ha.ctl[1].1.join("tandem.sock").display())),
        "{ping}"
    );
    let c2 = ha.log("c2");
    assert!(c2.contains("leading: took over"), "{c2}");
    // The leader's upkeep compacted etcd's history (members with few free pages are left).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ha.log("c2").contains("etcd upkeep: history compacted") {
        assert!(Instant::now() < deadline, "{}", ha.log("c2"));
        std::thread::sleep(Duration::from_millis(200));
    }
    // The new leader's metrics: it leads, and what its commits to etcd were.
    let sock = ha.ctl[1].1.join("tandem.sock").display().to_string();
    let (status, metrics) = raw_http(&sock, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n");
    assert_eq!(status, 200, "{metrics}");
    let value = |name: &str| -> f64 {
        metrics.lines().find_map(|l| l.strip_prefix(&format!("{name} "))).and_then(|v| v.trim().parse().ok()).unwrap_or(-1.0)
    };
    assert_eq!(value("tandem_leader"), 1.0, "{metrics}");
    assert!(
        value("tandem_etcd_commits_total") > 0.0 && value("tandem_etcd_transactions_total") >= value("tandem_etcd_commits_total"),
        "{metrics}"
    );
    assert_eq!(value("tandem_leaderships_total"), 2.0, "the first leader and this one: {metrics}");
    assert_eq!(value("tandem_etcd_commit_duration_seconds_count"), value("tandem_etcd_commits_total"), "{metrics}");
    assert_eq!(value("tandem_etcd_commit_records_count"), value("tandem_etcd_commits_total"), "{metrics}");
    assert!(metrics.contains("tandem_etcd_commit_duration_seconds_bucket{le=\"+Inf\"}"), "{metrics}");
    // tandem status: the dead controller unreachable, the new one leading, etcd's three
    // members healthy, two leaderships.
    let st = ha.tandem_ok(&["status"]);
    let (a, b) = (ha.ctl[0].1.join("tandem.sock"), ha.ctl[1].1.join("tandem.sock"));
    assert!(st.contains(&format!("unix://{} ", a.display())) && st.contains("unreachable"), "{st}");
    assert!(st.lines().any(|l| l.contains(&format!("unix://{}", b.display())) && l.ends_with("leads")), "{st}");
    assert!(st.contains(&format!("Leader:     https://127.0.0.1:{}", ha.ctl[1].0)), "{st}");
    assert!(st.contains("Store:      etcd, prefix /tandem/; 2 leadership(s) so far"), "{st}");
    assert_eq!(st.matches(", etcd 3.").count(), 3, "{st}");
    assert_eq!(st.matches("leader, etcd").count(), 1, "one etcd leader: {st}");
    eprintln!("{st}");
    eprintln!(
        "the new leader's commits to etcd: {} in {} transactions ({} staged), {:.3} s in all",
        value("tandem_etcd_commits_total"),
        value("tandem_etcd_transactions_total"),
        value("tandem_etcd_staged_commits_total"),
        value("tandem_etcd_commit_seconds_total")
    );
    eprintln!(
        "submissions retried with their key and answered with the job made before the failover: {}",
        c2.matches("made again").count()
    );
}

/// A command as `user` (through setpriv), on the standby's Unix socket alone.
fn as_user(ha: &Ha, user: &str, sock: &str, args: &[&str]) -> Output {
    let id = |flag: &str| String::from_utf8_lossy(&Command::new("id").args([flag, user]).output().unwrap().stdout).trim().to_string();
    Command::new("setpriv")
        .args(["--reuid", &id("-u"), "--regid", &id("-g"), "--init-groups"])
        .arg(ha.shims.join(args[0]))
        .args(&args[1..])
        .current_dir("/")
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", ha.shims.display()))
        .env("TANDEM_SERVER", sock)
        .env("HOME", "/nonexistent")
        .output()
        .unwrap()
}

#[test]
fn a_standbys_unix_socket_serves_its_users_as_themselves_through_the_leader() {
    let users = ["tandem-alice", "tandem-mallory"];
    let missing = !is_root() || !have("setpriv") || users.iter().any(|u| !Command::new("id").arg(u).output().unwrap().status.success());
    if missing {
        assert!(
            std::env::var_os("CI").is_none(),
            "this test runs as root with the users tandem-alice and tandem-mallory (.ci/run makes them)"
        );
        eprintln!("skipped: needs root, setpriv and the users tandem-alice and tandem-mallory");
        return;
    }
    let Some(mut ha) = Ha::start("ha-forward", 1) else { return };
    // The second controller stands by: only its socket is given.
    let sock = format!("unix://{}", ha.ctl[1].1.join("tandem.sock").display());
    let text = |o: &Output| format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let o = as_user(&ha, "tandem-alice", &sock, &["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true"]);
    assert!(o.status.success(), "{}", text(&o));
    let done: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    let o = as_user(&ha, "tandem-alice", &sock, &["sbatch", "--parsable", "-H", "-o", "/dev/null", "--wrap", "true"]);
    let held: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    // The jobs are alice's, run as alice.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = as_user(&ha, "tandem-alice", &sock, &["sacct", "-X", "-n", "-P", "-o", "JobID,User,State", "-j", &done.to_string()]);
        let t = String::from_utf8_lossy(&o.stdout).into_owned();
        if t.contains("COMPLETED") {
            assert_eq!(t.trim(), format!("{done}|tandem-alice|COMPLETED"));
            break;
        }
        assert!(Instant::now() < deadline, "{}", text(&o));
        std::thread::sleep(Duration::from_millis(200));
    }
    // Mallory, on the same socket, is mallory: alice's job is not hers to cancel.
    let o = as_user(&ha, "tandem-mallory", &sock, &["scancel", &held.to_string()]);
    assert!(!o.status.success() && text(&o).contains("belongs to another user"), "{}", text(&o));
    let o = as_user(&ha, "tandem-alice", &sock, &["scancel", &held.to_string()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(ha.log("c2").contains("standing by") && !ha.log("c2").contains("leading"), "the second controller stood by all along");
    // Connections the standby took before it led, their requests not yet sent (one over TLS,
    // one on the Unix socket), are answered when those come after it leads, not cut: a client
    // cannot tell a reset from a request lost, and would not send a submission again.
    let mut tls = Command::new("timeout")
        .args(["60", "openssl", "s_client", "-quiet", "-connect", &format!("127.0.0.1:{}", ha.ctl[1].0), "-CAfile"])
        .arg(ha.ctl[1].1.join("ca.pem"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut unix = std::os::unix::net::UnixStream::connect(ha.ctl[1].1.join("tandem.sock")).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    ha.kill_controller(0);
    ha.wait_leader(1);
    use std::io::{Read, Write};
    // On the Unix socket: forwarded to the controller that now leads (itself), as root.
    // (A connection cut before a write makes it fail: then there is no answer either.)
    let _ = unix.write_all(b"GET /v1/nodes HTTP/1.1\r\nHost: tandem\r\nConnection: close\r\n\r\n");
    unix.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut answer = String::new();
    let _ = unix.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("node1"), "the Unix connection taken while standing by: {answer:?}");
    // Over TCP: a standby's answer that names this controller, which the client follows.
    let _ = tls.stdin.take().unwrap().write_all(b"GET /v1/nodes HTTP/1.1\r\nHost: tandem\r\nConnection: close\r\n\r\n");
    let out = tls.wait_with_output().unwrap();
    let answer = String::from_utf8_lossy(&out.stdout).to_lowercase();
    let itself = format!("x-tandem-leader: https://127.0.0.1:{}", ha.ctl[1].0);
    assert!(answer.starts_with("http/1.1 503") && answer.contains(&itself), "the TLS connection taken while standing by: {answer:?}");
}

/// The member of etcd's that leads now (by the last "became leader" its logs record).
fn etcd_leader(ha: &Ha) -> usize {
    let mut best = (String::new(), 0);
    for m in 0..3 {
        let log = std::fs::read_to_string(ha.dir.join(format!("etcd/etcd{}.log", m + 1))).unwrap_or_default();
        if let Some(line) = log.lines().filter(|l| l.contains(" became leader at term ")).next_back() {
            let term = line.rsplit(' ').next().unwrap_or("").to_string();
            let term = format!("{term:0>8}");
            if term > best.0 {
                best = (term, m);
            }
        }
    }
    best.1
}

#[test]
fn losing_an_etcd_follower_and_bringing_it_back_is_not_seen_by_clients() {
    let Some(mut ha) = Ha::start("ha-member", 1) else { return };
    let mut ids = Vec::new();
    // Each follower of etcd's in turn (the loss of etcd's own leader may cost a failover of the
    // controllers: docs/admin/high-availability.md).
    let leader = etcd_leader(&ha);
    for m in (0..3).filter(|&m| m != leader) {
        // A member killed (-9) under submissions, then started again on its data.
        ha.etcd.kill(m);
        for _ in 0..10 {
            let o = ha.run("sbatch", &["--parsable", "-o", "/dev/null", "--wrap", "true"]);
            assert!(o.status.success(), "etcd member {} down: {}", m + 1, String::from_utf8_lossy(&o.stderr));
            ids.push(String::from_utf8_lossy(&o.stdout).trim().to_string());
        }
        // tandem status says which member is gone, and that the store is still healthy.
        let st = ha.tandem_ok(&["status"]);
        assert_eq!(st.matches("unreachable").count(), 1, "{st}");
        assert_eq!(st.matches(", etcd 3.").count(), 2, "{st}");
        ha.etcd.restart(m).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = ha.ok("sacct", &["-X", "-n", "-P", "-o", "JobID,State"]);
        if out.lines().filter(|l| l.ends_with("|COMPLETED")).count() == ids.len() {
            break;
        }
        assert!(Instant::now() < deadline, "{out}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // No failover: the first controller led all along.
    let (c1, c2) = (ha.log("c1"), ha.log("c2"));
    assert!(!c1.contains("stepping down") && !c2.contains("leading:"), "{c1}\n{c2}");
}

#[test]
fn a_cluster_restored_from_an_etcd_snapshot_counts_past_it_and_holds_what_it_had_unfinished() {
    if !have("etcdctl") {
        assert!(std::env::var_os("CI").is_none(), "etcdctl is not installed (.ci/run installs Debian's etcd-client)");
        eprintln!("skipped: no etcdctl (apt-get install etcd-client)");
        return;
    }
    let Some(mut ha) = Ha::start("ha-restore", 1) else { return };
    // A job running and a job done when the snapshot is taken.
    let done = ha.ok("sbatch", &["--parsable", "-o", "/dev/null", "--wrap", "true"]).trim().to_string();
    let running = ha.ok("sbatch", &["--parsable", "-o", "/dev/null", "--wrap", "sleep 300"]).trim().to_string();
    let state = |ha: &Ha, id: &str| ha.ok("squeue", &["-h", "-j", id, "-o", "%T %r"]).trim().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !state(&ha, &running).starts_with("RUNNING")
        || !ha.ok("sacct", &["-X", "-n", "-P", "-j", &done, "-o", "State"]).contains("COMPLETED")
    {
        assert!(Instant::now() < deadline, "{}", state(&ha, &running));
        std::thread::sleep(Duration::from_millis(200));
    }
    let snap = ha.dir.join("snapshot.db");
    ha.etcd.snapshot(&snap).unwrap();
    // After it: a job made and finished, and a failover.
    let after = ha.ok("sbatch", &["--parsable", "-o", "/dev/null", "--wrap", "true"]).trim().parse::<u64>().unwrap();
    ha.kill_controller(0);
    ha.wait_leader(1);
    ha.start_controller(0);
    // Everything stopped; etcd's members restored from the snapshot; the controllers started.
    ha.kill_controller(0);
    ha.kill_controller(1);
    ha.etcd.restore(&snap).unwrap();
    ha.start_controller(0);
    ha.start_controller(1);
    let deadline = Instant::now() + Duration::from_secs(60);
    while ha.run("squeue", &["-h"]).status.code() != Some(0) {
        assert!(Instant::now() < deadline, "no controller leads after the restore");
        std::thread::sleep(Duration::from_millis(200));
    }
    let logs = format!("{}{}", ha.log("c1"), ha.log("c2"));
    assert!(logs.contains("etcd's state was restored from a snapshot"), "{logs}");
    assert!(logs.contains("restored from an etcd snapshot: 1 job(s)"), "the job running at the snapshot is held: {logs}");
    // The running job is held (Restored) until its agent reports it, then runs on: never twice.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !state(&ha, &running).starts_with("RUNNING") {
        assert!(Instant::now() < deadline, "{}", state(&ha, &running));
        std::thread::sleep(Duration::from_millis(200));
    }
    let st = ha.tandem_ok(&["status"]);
    let starts: u64 = st.split("start count ").nth(1).and_then(|r| r.split(')').next()).and_then(|n| n.parse().ok()).unwrap();
    assert!(starts > 1 << 16, "counted past every start since the snapshot: {st}");
    // Ids given after the snapshot are not given again.
    let next = ha.ok("sbatch", &["--parsable", "-o", "/dev/null", "--hold", "--wrap", "true"]).trim().parse::<u64>().unwrap();
    assert!(next > after, "{next} after {after}");
    assert_eq!(ha.ok("sacct", &["-X", "-n", "-P", "-j", &running, "-o", "Restarts"]).trim(), "0", "never run twice");
}

#[test]
fn a_sqlite_controllers_state_migrates_into_etcd_and_a_controller_on_etcd_goes_on_from_it() {
    if !have("etcd") {
        assert!(std::env::var_os("CI").is_none(), "etcd is not installed (.ci/run installs Debian's etcd-server)");
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = free_dir("ha-migrate");
    let data = dir.join("ctl");
    let shims = dir.join("bin");
    assert!(Command::new(bin()).arg("shims").arg(&shims).output().unwrap().status.success());
    let port = free_port();
    let serve = |extra: &[String]| -> Child {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("ctl.log")).unwrap();
        let _ = std::fs::remove_file(data.join("addr"));
        let c = Command::new(bin())
            .args(["server", "--listen", &format!("127.0.0.1:{port}"), "--data"])
            .arg(&data)
            .args(extra)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Command::new(shims.join("squeue"))
            .env("TANDEM_SERVER", format!("unix://{}", data.join("tandem.sock").display()))
            .output()
            .map_or(true, |o| !o.status.success())
        {
            assert!(Instant::now() < deadline, "{}", std::fs::read_to_string(dir.join("ctl.log")).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    };
    let run = |cmd: &str, args: &[&str]| -> String {
        let o = Command::new(shims.join(cmd))
            .args(args)
            .env("TANDEM_SERVER", format!("unix://{}", data.join("tandem.sock").display()))
            .output()
            .unwrap();
        assert!(o.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    // On SQLite: two held jobs and a cancelled one.
    let mut sqlite = serve(&[]);
    let held: Vec<String> = (0..2).map(|_| run("sbatch", &["--parsable", "--hold", "-o", "/dev/null", "--wrap", "true"])).collect();
    let cancelled = run("sbatch", &["--parsable", "--hold", "-o", "/dev/null", "--wrap", "true"]);
    run("scancel", &[&cancelled]);
    let migrate = |args: &[String]| Command::new(bin()).args(["admin", "migrate", "--data"]).arg(&data).args(args).output().unwrap();
    let etcd = up::etcd::Etcd::start(&dir.join("etcd"), 1).unwrap();
    let store = etcd.server_args();
    let mig = store.clone();
    // Refused while the controller runs.
    let o = migrate(&mig);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("a controller is running"), "{o:?}");
    let _ = sqlite.kill();
    let _ = sqlite.wait();
    let _ = std::fs::remove_file(data.join("tandem.sock"));
    let o = migrate(&mig);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("(3 jobs, 0 arrays, 0 nodes)"), "{}", String::from_utf8_lossy(&o.stdout));
    // Twice: refused, the prefix holds a cluster now.
    let o = migrate(&mig);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("already holds a cluster's state below /tandem/"), "{o:?}");
    // The controller on etcd, on the same data directory (its CA and keys), goes on.
    let mut on_etcd = serve(&store);
    let q = run("squeue", &["-h", "-o", "%i %r"]);
    assert_eq!(q.lines().count(), 2, "{q}");
    for id in &held {
        assert!(q.contains(&format!("{id} JobHeldUser")), "{q}");
    }
    assert!(run("sacct", &["-X", "-n", "-P", "-j", &cancelled, "-o", "State"]).starts_with("CANCELLED"));
    let next: u64 = run("sbatch", &["--parsable", "--hold", "-o", "/dev/null", "--wrap", "true"]).parse().unwrap();
    assert_eq!(next, cancelled.parse::<u64>().unwrap() + 1, "ids go on");
    let _ = on_etcd.kill();
    let _ = on_etcd.wait();
    drop(etcd);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_step_that_would_take_its_jobs_record_past_what_etcd_stores_is_refused_and_the_record_stays_in_etcd() {
    let Some(ha) = Ha::start("ha-steps", 1) else { return };
    let id = ha.ok("sbatch", &["--parsable", "-o", "/dev/null", "--wrap", "sleep 120"]).trim().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ha.ok("squeue", &["-h", "-j", &id, "-o", "%T"]).contains("RUNNING") {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(200));
    }
    // Steps whose command lines are 400 kB each: three fit in the job's record, a fourth not.
    let big = "x".repeat(100_000);
    let mut refused = None;
    for k in 0..8 {
        let o = ha.run("srun", &["--jobid", &id, "--overlap", "-n1", "true", &big, &big, &big, &big]);
        if !o.status.success() {
            refused = Some((k, String::from_utf8_lossy(&o.stderr).into_owned()));
            break;
        }
    }
    let (k, why) = refused.expect("a step is refused before the record passes what etcd stores");
    assert!(k >= 2, "{k}: {why}");
    assert!(why.contains(&format!("Unable to create step for job {id}: the job's record would pass 1300000 bytes")), "{why}");
    // Every change of the job went to etcd: none was left out for its size.
    let c1 = ha.log("c1");
    assert!(!c1.contains("is larger than etcd takes"), "{c1}");
    ha.ok("scancel", &[&id]);
}
