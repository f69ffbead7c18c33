//! End-to-end tests of faults in orders the other tests do not take: an agent restarted within
//! its lease (with its tasks dead, and with its tasks still running), a job cancelled while its
//! node is cut off, and one process of `tandem up` killed with `kill -9`. Each job writes a
//! ledger under an exclusive `flock`, so two runs at once, or a second run, show in it. Every
//! wait is bounded; no test asserts a duration.

mod common;

use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

/// A batch script that holds an exclusive lock on `NAME.lock` for its whole run (a second copy
/// at the same time writes OVERLAP and fails) and appends its start and end to `NAME.ledger`.
fn ledger_script(c: &Cluster, name: &str, secs: u32, code: i32) -> String {
    c.script(
        &format!("{name}.sh"),
        &format!(
            "#!/bin/bash\n#SBATCH -o {name}.out\nexec 9>>{name}.lock\nflock -n 9 || {{ echo OVERLAP $SLURM_RESTART_COUNT >> {name}.ledger; exit 1; }}\n\
             echo start $SLURM_JOB_ID $SLURM_RESTART_COUNT $SLURMD_NODENAME >> {name}.ledger\nsleep {secs}\n\
             echo end $SLURM_JOB_ID $SLURM_RESTART_COUNT >> {name}.ledger\nexit {code}\n"
        ),
    )
}

fn ledger(c: &Cluster, name: &str) -> String {
    std::fs::read_to_string(c.work.join(format!("{name}.ledger"))).unwrap_or_default()
}

fn wait_file(c: &Cluster, file: &str, what: &str, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !std::fs::read_to_string(c.work.join(file)).unwrap_or_default().contains(what) {
        assert!(Instant::now() < deadline, "{file} never held {what:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_agent_restarted_within_its_lease_ends_or_requeues_the_jobs_it_lost() {
    // A long lease: nothing here may wait for it.
    let mut c = Cluster::new("agentlost", 1, None, 120);
    let a = c.sbatch(&["--no-requeue", "-c1", "-o", "a.out", "--wrap", "echo started; sleep 300"]);
    let b = c.sbatch(&["-c1", "-o", "b.out", "--wrap", "echo run=$SLURM_RESTART_COUNT; sleep 300"]);
    wait_file(&c, "a.out", "started", 30);
    wait_file(&c, "b.out", "run=0", 30);
    // The node dies with its tasks and its agent comes straight back (systemd, say).
    c.kill_agent(0);
    let server = format!("https://{}", c.addr);
    c.start_agent(0, &server);
    let j = c.wait_state(a, &["NODE_FAIL"], 30);
    assert_eq!(j["Restarts"], "0");
    let j = c.wait_state(b, &["RUNNING"], 30);
    wait_file(&c, "b.out", "run=1", 30);
    assert_eq!(j["Restarts"], "1", "{j:?}");
    // scancel of the requeued run takes effect.
    c.ok("scancel", &[&b.to_string()]);
    c.wait_state(b, &["CANCELLED"], 30);
    // Nothing is held any more: a job that needs every CPU of the node runs.
    let d = c.sbatch(&["-c4", "--wrap", "true"]);
    c.wait_state(d, &["COMPLETED"], 30);
}

/// An upgrade of a node with jobs running, as the Debian package does it: the binary replaced
/// (a new file renamed over the old one) and the agent's unit restarted (SIGTERM to the agent
/// alone, `KillMode=process`, then a start from the new binary). The new agent adopts the
/// tasks the old one started: every job finishes, none is requeued, none runs twice. The old
/// agent is this build, or with `TANDEM_UPGRADE_FROM=BINARY` another commit's
/// (`scripts/upgrade-check.sh` builds 7314e88's and runs this test with it, stopping that agent
/// with SIGKILL: `TANDEM_UPGRADE_STOP=kill`).
#[test]
fn an_agent_upgraded_under_running_jobs_adopts_them_and_none_is_requeued() {
    let mut c = Cluster::new("upgrade", 1, None, 30);
    let server = format!("https://{}", c.addr);
    let bin_dir = c.dir.join("usr-bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let installed = bin_dir.join("tandem");
    let old = std::env::var_os("TANDEM_UPGRADE_FROM").map(std::path::PathBuf::from).unwrap_or_else(|| bin().into());
    std::fs::copy(&old, &installed).unwrap();
    c.stop_agent(0);
    c.start_agent_with(0, &server, &installed);
    c.wait_nodes(1);
    let ids: Vec<u64> = (0..3).map(|i| c.sbatch(&["-c1", &ledger_script(&c, &format!("up{i}"), 8, 0)])).collect();
    for i in 0..3 {
        wait_file(&c, &format!("up{i}.ledger"), "start", 30);
    }
    // The package's upgrade: the new binary renamed over the old, the unit restarted.
    let staged = bin_dir.join("tandem.dpkg-new");
    std::fs::copy(bin(), &staged).unwrap();
    std::fs::rename(&staged, &installed).unwrap();
    // An agent from before SIGTERM left tasks to their keepers (7314e88's stops them) is ended
    // with SIGKILL, to itself alone (`TANDEM_UPGRADE_STOP=kill`; README, "Upgrades").
    if std::env::var("TANDEM_UPGRADE_STOP").as_deref() == Ok("kill") {
        c.crash_agent(0);
    } else {
        c.stop_agent(0);
    }
    for i in 0..3 {
        assert!(!ledger(&c, &format!("up{i}")).contains("end"), "a job ended with its agent's stop:\n{}", c.log("node1"));
    }
    c.start_agent_with(0, &server, &installed);
    for (i, id) in ids.iter().enumerate() {
        let j = c.wait_state(*id, &["COMPLETED", "FAILED", "NODE_FAIL", "CANCELLED"], 60);
        assert_eq!((j["JobState"].as_str(), j["Restarts"].as_str()), ("COMPLETED", "0"), "{j:?}\n{}", c.log("node1"));
        assert_eq!(ledger(&c, &format!("up{i}")), format!("start {id} 0 node1\nend {id} 0\n"));
    }
    let log = c.log("node1");
    assert!(log.contains("3 running (adopted)"), "{log}");
}

/// An agent in a Kubernetes pod (`--stop-tasks-on-sigterm`, as `deploy/kubernetes` runs it):
/// the pod's deletion kills its whole cgroup once the agent exits, so SIGTERM stops the tasks
/// first (they get SIGTERM, not a bare SIGKILL), and their runs are node failures for the
/// controller, requeued.
#[test]
fn an_agent_told_to_stop_its_tasks_at_sigterm_stops_them() {
    let mut c = Cluster::new("stopterm", 1, None, 30);
    let server = format!("https://{}", c.addr);
    c.agent_args = vec!["--stop-tasks-on-sigterm".into()];
    c.stop_agent(0);
    c.start_agent(0, &server);
    c.wait_nodes(1);
    let id =
        c.sbatch(&["-c1", "-o", "t.out", "--wrap", "trap 'echo got TERM; exit 0' TERM; echo run=$SLURM_RESTART_COUNT; sleep 300 & wait"]);
    wait_file(&c, "t.out", "run=0", 30);
    c.stop_agent(0);
    wait_file(&c, "t.out", "got TERM", 30);
    c.start_agent(0, &server);
    wait_file(&c, "t.out", "run=1", 30);
    let j = c.job(id);
    assert_eq!((j["JobState"].as_str(), j["Restarts"].as_str()), ("RUNNING", "1"), "{j:?}");
    c.ok("scancel", &[&id.to_string()]);
}

#[test]
fn a_task_that_outlives_its_agent_is_adopted_and_runs_once() {
    // A short lease: the adopted task outlives the fencing deadline its first agent gave its
    // keeper, so the restarted agent must have renewed it.
    let mut c = Cluster::new("adopt", 1, None, 4);
    let s = ledger_script(&c, "once", 8, 3);
    let id = c.sbatch(&[&s]);
    wait_file(&c, "once.ledger", "start", 30);
    // The agent alone crashes; its task goes on. The restarted agent must take it over (or
    // kill it), and never start it again.
    c.crash_agent(0);
    let server = format!("https://{}", c.addr);
    c.start_agent(0, &server);
    let j = c.wait_state(id, &["FAILED", "NODE_FAIL", "COMPLETED", "CANCELLED"], 60);
    assert_eq!((j["JobState"].as_str(), j["ExitCode"].as_str(), j["Restarts"].as_str()), ("FAILED", "3:0", "0"), "{j:?}");
    let l = ledger(&c, "once");
    assert_eq!(l, format!("start {id} 0 node1\nend {id} 0\n"), "{l}");
    // An adopted task is cancelled like any other.
    let s = ledger_script(&c, "adopted", 300, 0);
    let id = c.sbatch(&[&s]);
    wait_file(&c, "adopted.ledger", "start", 30);
    c.crash_agent(0);
    c.start_agent(0, &server);
    c.wait_nodes(1);
    c.ok("scancel", &[&id.to_string()]);
    c.wait_state(id, &["CANCELLED"], 30);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !Command::new("flock").args(["-n"]).arg(c.work.join("adopted.lock")).arg("true").status().unwrap().success() {
        assert!(Instant::now() < deadline, "the cancelled task still holds its lock");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(ledger(&c, "adopted").matches("start").count(), 1);
}

#[test]
fn a_job_cancelled_while_its_node_is_cut_off_stays_cancelled() {
    let mut c = Cluster::new("cancelcut", 1, None, 4);
    let link = Link::new(&c.addr);
    c.start_agent(1, &format!("https://{}", link.addr));
    c.wait_nodes(2);
    c.ok("scontrol", &["update", "NodeName=node1", "State=DRAIN", "Reason=test"]);
    let s = ledger_script(&c, "cut", 30, 0);
    let id = c.sbatch(&[&s]);
    let j = c.wait_state(id, &["RUNNING"], 30);
    assert_eq!(j["NodeList"], "node2");
    wait_file(&c, "cut.ledger", "start", 30);
    // node1 could take a requeued run now.
    c.ok("scontrol", &["update", "NodeName=node1", "State=RESUME"]);
    link.cut();
    c.ok("scancel", &[&id.to_string()]);
    // The lease lapses: node2 is down. The job stays cancelled, and is not run again.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !c.ok("sinfo", &["-N"]).lines().any(|l| l.starts_with("node2") && l.contains("down")) {
        assert!(Instant::now() < deadline, "node2 never went down");
        std::thread::sleep(Duration::from_millis(100));
    }
    let j = c.wait_state(id, &["CANCELLED"], 30);
    assert_eq!(j["Restarts"], "0", "{j:?}");
    // The controller's log says so, naming the job it ended.
    let said = format!(" WARN server: node node2 down: not responding (lease expired); 1 job(s) ended: {id}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !c.log("controller").contains(&said) {
        assert!(Instant::now() < deadline, "no {said:?} in the controller's log:\n{}", c.log("controller"));
        std::thread::sleep(Duration::from_millis(100));
    }
    link.heal();
    c.wait_nodes(2);
    std::thread::sleep(Duration::from_secs(3));
    let j = c.job(id);
    assert_eq!((j["JobState"].as_str(), j["Restarts"].as_str()), ("CANCELLED", "0"), "{j:?}");
    assert_eq!(ledger(&c, "cut").matches("start").count(), 1, "{}", ledger(&c, "cut"));
    assert!(c.ok("squeue", &["-h"]).trim().is_empty());
}

/// The pid of the one child of `parent` whose command line matches `pattern`.
fn pid_of(parent: u32, pattern: &str) -> u32 {
    let o = Command::new("pgrep").args(["-P", &parent.to_string(), "-f", "--", pattern]).output().unwrap();
    let pids: Vec<u32> = String::from_utf8_lossy(&o.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect();
    assert_eq!(pids.len(), 1, "processes matching {pattern:?}: {pids:?}");
    pids[0]
}

#[test]
fn tandem_up_restarts_a_killed_agent_and_its_proxy_loses_no_request() {
    let dir = free_dir("upagent");
    let (child, server, proxy) = up(&dir, 2, &["--proxy-port", "0"]);
    std::fs::write(dir.join("web.py"), SLOW).unwrap();
    std::fs::write(
        dir.join("web.toml"),
        "name = \"web\"\ncommand = [\"python3\", \"web.py\"]\nreplicas = 2\n[readiness]\nhttp = \"/\"\nperiod = \"300ms\"\n[resources]\ncpus = 1\n",
    )
    .unwrap();
    run_in(&dir, &server, &["service", "apply", "-f", "web.toml"]);
    let url = format!("{proxy}/s/web/");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = run_in(&dir, &server, &["service", "list"]);
        if s.lines().any(|l| l.starts_with("web") && l.contains("2/2")) {
            let o = Command::new("curl").args(["-s", "-o", "/dev/null", "-w", "%{http_code}", &url]).output().unwrap();
            if String::from_utf8_lossy(&o.stdout) == "200" {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the service never served:\n{s}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let load = std::thread::spawn(move || {
        let o = Command::new(bin())
            .args(["bench", "load", &url, "--json", "--requests", "1500", "--rate", "150", "--concurrency", "32", "--timeout", "10"])
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    });
    std::thread::sleep(Duration::from_secs(2));
    let agent = pid_of(child.id(), &format!("agent .*--name node1 .*{}", dir.display()));
    let _ = Command::new("kill").args(["-9", &agent.to_string()]).status();
    let r = load.join().unwrap();
    assert_eq!(r["sent"], 1500, "{r:#}");
    assert_eq!(r["failed"], 0, "requests failed when an agent was killed: {r:#}");
    // The cluster kept running, with node1's agent restarted.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let n = run_in(&dir, &server, &["nodes", "-N"]);
        if n.lines().filter(|l| l.starts_with("node") && !l.contains("down")).count() == 2
            && pid_of(child.id(), &format!("agent .*--name node1 .*{}", dir.display())) != agent
        {
            break;
        }
        assert!(Instant::now() < deadline, "node1 did not come back:\n{n}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let s = run_in(&dir, &server, &["service", "list"]);
    assert!(s.lines().any(|l| l.starts_with("web") && l.contains("2/2")), "{s}");
    let out = stop_up(child, &dir);
    assert!(out.contains("agent node1 exited") && out.contains("restarting"), "{out}");
}

#[test]
fn tandem_up_restarts_a_killed_controller_and_kills_no_running_job() {
    let dir = free_dir("upctl");
    let (child, server, _) = up(&dir, 1, &["--no-proxy"]);
    std::fs::write(
        dir.join("long.sh"),
        "#!/bin/bash\nexec 9>>long.lock\nflock -n 9 || { echo OVERLAP >> long.ledger; exit 1; }\n\
         echo start $SLURM_RESTART_COUNT >> long.ledger\nsleep 8\necho end $SLURM_RESTART_COUNT >> long.ledger\n",
    )
    .unwrap();
    let out = run_in(&dir, &server, &["submit", "long.sh"]);
    let id: u64 = out.trim().strip_prefix("Submitted batch job ").unwrap().parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(dir.join("long.ledger")).unwrap_or_default().contains("start") {
        assert!(Instant::now() < deadline, "the job never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let ctl = pid_of(child.id(), &format!("server .*--data {}/controller", dir.display()));
    let _ = Command::new("kill").args(["-9", &ctl.to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = Command::new(bin()).args(["show", "show", "job", &id.to_string()]).env("TANDEM_SERVER", &server).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        if text.contains("JobState=COMPLETED") {
            assert!(text.contains("Restarts=0"), "{text}");
            break;
        }
        assert!(Instant::now() < deadline, "job {id} never completed: {text}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(std::fs::read_to_string(dir.join("long.ledger")).unwrap(), "start 0\nend 0\n");
    let out = stop_up(child, &dir);
    assert!(out.contains("controller exited") && out.contains("restarting"), "{out}");
}

#[test]
fn a_task_whose_agent_stays_dead_is_fenced_by_its_keeper_before_the_lease_lapses() {
    let mut c = Cluster::new("keeperfence", 2, None, 4);
    c.ok("scontrol", &["update", "NodeName=node1", "State=DRAIN", "Reason=test"]);
    let s = ledger_script(&c, "orphan", 20, 0);
    let id = c.sbatch(&[&s]);
    let j = c.wait_state(id, &["RUNNING"], 30);
    assert_eq!(j["NodeList"], "node2");
    wait_file(&c, "orphan.ledger", "start", 30);
    c.ok("scontrol", &["update", "NodeName=node1", "State=RESUME"]);
    // node2's agent dies and stays dead; its task lives on under its keeper, which must kill it
    // before the controller gives the job to node1.
    c.crash_agent(1);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ledger(&c, "orphan").contains(&format!("start {id} 1 node1")) {
        assert!(Instant::now() < deadline, "the job never ran again on node1:\n{}", ledger(&c, "orphan"));
        std::thread::sleep(Duration::from_millis(100));
    }
    let l = ledger(&c, "orphan");
    assert!(!l.contains("OVERLAP"), "two runs at once:\n{l}");
    assert!(!l.contains(&format!("end {id} 0")), "the orphaned run went on to its end:\n{l}");
    // Back, node2's agent reports the fenced task of the old run, which changes nothing.
    let server = format!("https://{}", c.addr);
    c.start_agent(1, &server);
    c.wait_nodes(2);
    let j = c.wait_state(id, &["COMPLETED"], 60);
    assert_eq!((j["Restarts"].as_str(), j["NodeList"].as_str()), ("1", "node1"));
    assert!(!ledger(&c, "orphan").contains("OVERLAP"));
}

/// A tmpfs mounted on a directory for the life of the value (needs root).
struct Tmpfs(std::path::PathBuf);

/// The cluster's controller moved onto a small tmpfs of its own (restarted there): the mount
/// and the controller's data directory.
fn on_small_tmpfs(c: &mut Cluster) -> (Tmpfs, std::path::PathBuf) {
    c.kill_server();
    let ctl = c.dir.join("controller");
    let saved = c.dir.join("controller.saved");
    assert!(Command::new("cp").arg("-a").arg(&ctl).arg(&saved).status().unwrap().success());
    assert!(Command::new("mount").args(["-t", "tmpfs", "-o", "size=16m", "tmpfs"]).arg(&ctl).status().unwrap().success());
    let mount = Tmpfs(ctl.clone());
    assert!(Command::new("cp").arg("-a").arg(format!("{}/.", saved.display())).arg(&ctl).status().unwrap().success());
    c.start_server();
    c.wait_nodes(1);
    (mount, ctl)
}

/// A job the scheduler started while the controller's disk was full starts on its node only
/// once the disk has room (its launch waits for the commit): accounting says when it really
/// started, so its Elapsed is its run, not the wait (it read the wait and the run together).
#[test]
fn a_launch_that_waited_for_the_controllers_disk_is_accounted_from_its_real_start() {
    if !is_root() {
        assert!(std::env::var("CI").is_err(), "this test needs root (a tmpfs) and cannot run under CI=true without it");
        eprintln!("skipped: a full disk needs a tmpfs, and so root");
        return;
    }
    let mut c = Cluster::new("latestart", 1, None, 30);
    let (_mount, ctl) = on_small_tmpfs(&mut c);
    // One job holds the node's 4 CPUs; the next waits for them.
    let first = c.sbatch(&["-c4", "-o", "first.out", "--wrap", "echo started; sleep 3"]);
    wait_file(&c, "first.out", "started", 30);
    let late = c.sbatch(&["-c4", "-o", "late.out", "--wrap", "echo began $(date +%s); sleep 2"]);
    // The disk fills: the first job's end and the second's start are decided in memory, and
    // the launch waits until they are saved.
    let filler = ctl.join("filler");
    let _ = Command::new("dd").arg("if=/dev/zero").arg(format!("of={}", filler.display())).args(["bs=1M", "status=none"]).status();
    std::thread::sleep(Duration::from_secs(10));
    assert!(!std::fs::read_to_string(c.work.join("late.out")).unwrap_or_default().contains("began"), "launched with the disk full");
    let _ = std::fs::remove_file(&filler);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !c.run("squeue", &[]).status.success() {
        assert!(Instant::now() < deadline, "the controller never caught up:\n{}", c.log("controller"));
        std::thread::sleep(Duration::from_millis(100));
    }
    c.wait_state(first, &["COMPLETED"], 60);
    c.wait_state(late, &["COMPLETED"], 60);
    let began: i64 = std::fs::read_to_string(c.work.join("late.out"))
        .unwrap()
        .split_whitespace()
        .nth(1)
        .and_then(|t| t.parse().ok())
        .expect("the script's start");
    let o = c.run("sacct", &["-X", "-n", "-P", "-j", &late.to_string(), "-o", "Start,ElapsedRaw"]);
    let line = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let (start, elapsed) = line.split_once('|').expect("Start|ElapsedRaw");
    let o = Command::new("date").args(["-d", start, "+%s"]).output().unwrap();
    let start: i64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap_or_else(|_| panic!("{line}"));
    // The run's start is the task's (to the second it was launched), not the scheduler's
    // decision some 7 s before it; its Elapsed is its 2 s and the report of its end.
    assert!((began - 1..=began).contains(&start), "Start {start} for a script that began at {began}: {line}\n{}", c.log("controller"));
    let elapsed: i64 = elapsed.parse().unwrap();
    assert!((2..=5).contains(&elapsed), "Elapsed {elapsed}: {line}");
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_controller_whose_disk_is_full_past_the_lease_kills_no_running_work() {
    if !is_root() {
        assert!(std::env::var("CI").is_err(), "this test needs root (a tmpfs) and cannot run under CI=true without it");
        eprintln!("skipped: a full disk needs a tmpfs, and so root");
        return;
    }
    let mut c = Cluster::new("diskfull", 1, None, 3);
    let (_mount, ctl) = on_small_tmpfs(&mut c);
    let s = ledger_script(&c, "full", 14, 0);
    let id = c.sbatch(&[&s]);
    let short = ledger_script(&c, "short", 3, 0);
    let short = c.sbatch(&[&short]);
    wait_file(&c, "full.ledger", "start", 30);
    wait_file(&c, "short.ledger", "start", 30);
    // The disk fills for three leases: the controller answers, but can save nothing, not even
    // the end of the short job, which comes meanwhile.
    let filler = ctl.join("filler");
    let _ = Command::new("dd").arg("if=/dev/zero").arg(format!("of={}", filler.display())).args(["bs=1M", "status=none"]).status();
    let refused = c.run("sbatch", &["--wrap", "true"]);
    assert!(!refused.status.success(), "a submission was acknowledged with the disk full");
    std::thread::sleep(Duration::from_secs(9));
    let _ = std::fs::remove_file(&filler);
    // The controller retries its commit on its own and answers again.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !c.run("squeue", &[]).status.success() {
        assert!(Instant::now() < deadline, "the controller never caught up:\n{}", c.log("controller"));
        std::thread::sleep(Duration::from_millis(100));
    }
    // Both ran through, once, and their ends were recorded once the disk had room again.
    for (id, name) in [(id, "full"), (short, "short")] {
        let j = c.wait_state(id, &["COMPLETED", "FAILED", "NODE_FAIL", "CANCELLED"], 60);
        assert_eq!((j["JobState"].as_str(), j["Restarts"].as_str()), ("COMPLETED", "0"), "{j:?}\n{}", c.log("node1"));
        assert_eq!(ledger(&c, name), format!("start {id} 0 node1\nend {id} 0\n"));
    }
    let agent = c.log("node1");
    assert!(agent.contains("cannot save") && !agent.contains("fencing"), "{agent}");
    // And it goes on scheduling.
    let d = c.sbatch(&["-c1", "--wrap", "true"]);
    c.wait_state(d, &["COMPLETED"], 30);
}
