//! What Slurm sites configure (issue 33), end to end on a real cluster of processes: the
//! node's prolog and epilog around each job, and what their failures do.

mod common;

use common::{Cluster, free_dir};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A directory of administrator's scripts: 0755, as the agent requires of a program it runs as
/// root.
fn scripts_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-site-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

fn write_script(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The prolog and epilog: each logs what it sees to `work`; the prolog fails on a node with a
/// `fail-NODE` file (saying why on standard error), hangs on one with `hang-NODE`, and leaves a
/// marker for the job, which the epilog removes.
fn site(tag: &str) -> (PathBuf, PathBuf) {
    let dir = scripts_dir(tag);
    let work = free_dir(&format!("site-{tag}"));
    let w = work.display();
    write_script(
        &dir.join("prolog"),
        &format!(
            "#!/bin/sh\necho \"$SLURM_JOB_ID $SLURM_JOB_USER $SLURM_JOB_UID $SLURMD_NODENAME $SLURM_SCRIPT_CONTEXT $SLURM_JOB_NODELIST $HOME\" >> {w}/prolog.log\n\
             if [ -e {w}/fail-$SLURMD_NODENAME ]; then echo 'GPU 0 fell off the bus' >&2; exit 1; fi\n\
             if [ -e {w}/hang-$SLURMD_NODENAME ]; then sleep 60; fi\n\
             touch {w}/marker-$SLURM_JOB_ID\n"
        ),
    );
    write_script(
        &dir.join("epilog"),
        &format!(
            "#!/bin/sh\necho \"$SLURM_JOB_ID $SLURMD_NODENAME $SLURM_SCRIPT_CONTEXT\" >> {w}/epilog.log\nrm -f {w}/marker-$SLURM_JOB_ID\n"
        ),
    );
    (dir, work)
}

fn config(dir: &Path, extra: &str) -> String {
    format!(
        "prolog = \"{}\"\nepilog = \"{}\"\nprolog_epilog_timeout = 3\n{extra}",
        dir.join("prolog").display(),
        dir.join("epilog").display()
    )
}

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "waited {secs} s for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// A node's state and reason, as `sinfo -N` shows them.
fn node(c: &Cluster, name: &str) -> String {
    c.ok("sinfo", &["-h", "-N", "-n", name, "-o", "%T|%E"]).trim().to_string()
}

#[test]
fn the_prolog_and_epilog_run_around_each_job_and_a_failing_prolog_drains_its_node() {
    let (dir, work) = site("hold");
    let c = Cluster::with_config("prolog", 2, None, 30, Some(&config(&dir, "")));
    c.wait_nodes(2);
    let me = nix::unistd::User::from_uid(nix::unistd::getuid()).unwrap().unwrap();
    let w = work.display();

    // The job sees the prolog's marker; the epilog removes it once the job is over.
    let id = c.sbatch(&["-w", "node1", "-o", &format!("{w}/out-%j"), "--wrap", &format!("test -e {w}/marker-$SLURM_JOB_ID && echo seen")]);
    c.wait_state(id, &["COMPLETED"], 30);
    assert_eq!(read(&work.join(format!("out-{id}"))), "seen\n");
    wait_for("the epilog", 10, || read(&work.join("epilog.log")).contains(&format!("{id} node1 epilog_slurmd")));
    assert!(!work.join(format!("marker-{id}")).exists(), "the epilog removed the marker");
    assert_eq!(
        read(&work.join("prolog.log")).lines().next().unwrap(),
        format!("{id} {} {} node1 prolog_slurmd node1 ", me.name, me.uid),
        "the job's variables, nothing of the agent's (no HOME)"
    );
    // An srun step on the job's second node runs that node's prolog before its task, and both
    // nodes' epilogs run at the end.
    let id = c.sbatch(&[
        "-N2",
        "-o",
        &format!("{w}/out-%j"),
        "--wrap",
        &format!("srun -N2 sh -c 'test -e {w}/marker-$SLURM_JOB_ID && hostname'"),
    ]);
    c.wait_state(id, &["COMPLETED"], 30);
    wait_for("both epilogs", 10, || {
        let l = read(&work.join("epilog.log"));
        l.contains(&format!("{id} node1 ")) && l.contains(&format!("{id} node2 "))
    });
    assert_eq!(read(&work.join("prolog.log")).lines().filter(|l| l.starts_with(&format!("{id} "))).count(), 2);

    // A failing prolog drains the node with its words, and its job is requeued held.
    std::fs::write(work.join("fail-node1"), "").unwrap();
    let id = c.sbatch(&["-w", "node1", "-o", "/dev/null", "--wrap", "true"]);
    wait_for("the requeue", 20, || {
        c.ok("squeue", &["-h", "-j", &id.to_string(), "-o", "%T|%r"]).trim() == "PENDING|launch failed requeued held"
    });
    let n = node(&c, "node1");
    assert!(n.starts_with("drain|Prolog error: prolog ") && n.ends_with("failed with exit code 1: GPU 0 fell off the bus"), "{n}");
    assert_eq!(c.job(id)["Restarts"], "1");
    // Released, it waits for its node (drained).
    std::fs::remove_file(work.join("fail-node1")).unwrap();
    c.ok("scontrol", &["release", &id.to_string()]);
    c.ok("scontrol", &["update", "nodename=node1", "state=resume"]);
    c.wait_state(id, &["COMPLETED"], 30);

    // A prolog past prolog_epilog_timeout is killed, and counts as failed.
    std::fs::write(work.join("hang-node2"), "").unwrap();
    let t = Instant::now();
    let id = c.sbatch(&["-w", "node2", "-o", "/dev/null", "--wrap", "true"]);
    wait_for("the timeout", 30, || node(&c, "node2").contains("ran past prolog_epilog_timeout (3 s)"));
    assert!(t.elapsed() < Duration::from_secs(20));
    assert!(c.ok("squeue", &["-h", "-j", &id.to_string(), "-o", "%r"]).contains("launch failed requeued held"));
    assert!(c.run("scancel", &[&id.to_string()]).status.success());
    c.ok("scontrol", &["update", "nodename=node2", "state=resume"]);
    // A job cancelled while its prolog runs ends at once, its task never starts, and its epilog
    // waits for the prolog's end.
    let id = c.sbatch(&["-w", "node2", "-o", &format!("{w}/out-%j"), "--wrap", "echo started"]);
    wait_for("the prolog's start", 10, || read(&work.join("prolog.log")).contains(&format!("{id} ")));
    let t = Instant::now();
    assert!(c.run("scancel", &[&id.to_string()]).status.success());
    c.wait_state(id, &["CANCELLED"], 10);
    assert!(t.elapsed() < Duration::from_secs(8), "not a KillWait later");
    wait_for("the epilog after the prolog", 20, || read(&work.join("epilog.log")).contains(&format!("{id} node2 ")));
    assert!(!work.join(format!("out-{id}")).exists() || read(&work.join(format!("out-{id}"))).is_empty(), "the task never ran");
    std::fs::remove_file(work.join("hang-node2")).unwrap();
    c.ok("scontrol", &["update", "nodename=node2", "state=resume"]);

    // A prolog that others may change is not run as root: the node drains saying so.
    std::fs::set_permissions(dir.join("prolog"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let id = c.sbatch(&["-w", "node1", "-o", "/dev/null", "--wrap", "true"]);
    wait_for("the refusal", 20, || node(&c, "node1").contains("writable by its group or others"));
    assert!(c.run("scancel", &[&id.to_string()]).status.success());
    std::fs::set_permissions(dir.join("prolog"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn with_nohold_on_prolog_fail_the_job_runs_elsewhere_and_a_failing_epilog_drains_its_node() {
    let (dir, work) = site("nohold");
    let c = Cluster::with_config("nohold", 2, None, 30, Some(&config(&dir, "nohold_on_prolog_fail = true\n")));
    c.wait_nodes(2);
    let w = work.display();
    std::fs::write(work.join("fail-node1"), "").unwrap();
    std::fs::write(work.join("fail-node2"), "").unwrap();
    // Both nodes' prologs fail in turn: the job is requeued without a hold each time and
    // stays pending once both nodes are drained.
    let id = c.sbatch(&["-o", "/dev/null", "--wrap", "true"]);
    wait_for("both drains", 30, || node(&c, "node1").starts_with("drain") && node(&c, "node2").starts_with("drain"));
    std::fs::remove_file(work.join("fail-node2")).unwrap();
    c.ok("scontrol", &["update", "nodename=node2", "state=resume"]);
    let j = c.wait_state(id, &["COMPLETED"], 30);
    assert_eq!(j["NodeList"], "node2", "it ran on the node whose prolog passed");
    assert!(node(&c, "node1").contains("GPU 0 fell off the bus"));

    // A failing epilog drains its node; the job itself has ended.
    write_script(&dir.join("epilog"), "#!/bin/sh\necho 'scratch not cleaned' >&2\nexit 2\n");
    let id = c.sbatch(&["-w", "node2", "-o", &format!("{w}/out-%j"), "--wrap", "echo ran"]);
    c.wait_state(id, &["COMPLETED"], 30);
    wait_for("the epilog's drain", 20, || node(&c, "node2").contains("Epilog error: epilog"));
    assert!(node(&c, "node2").ends_with("failed with exit code 2: scratch not cleaned"), "{}", node(&c, "node2"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failing_health_check_drains_its_node_with_its_words_nhc_drains_its_own_node_only_and_a_pass_resumes_only_its_own_drain() {
    let dir = scripts_dir("health");
    let work = free_dir("site-health");
    let w = work.display();
    write_script(
        &dir.join("check"),
        &format!("#!/bin/sh\nif [ -e {w}/sick-$SLURMD_NODENAME ]; then echo 'NHC: check_hw_gpu: GPU 0 XID 79'; exit 1; fi\nexit 0\n"),
    );
    let cfg = format!("health_check_program = \"{}\"\nhealth_check_interval = 1\n", dir.join("check").display());
    let c = Cluster::with_config("health", 2, None, 30, Some(&cfg));
    c.wait_nodes(2);
    let running = c.sbatch(&["-w", "node1", "-o", "/dev/null", "--wrap", "sleep 4"]);
    c.wait_state(running, &["RUNNING"], 30);
    // The check fails: the node drains with what the check said; the running job finishes.
    std::fs::write(work.join("sick-node1"), "").unwrap();
    wait_for("the check's drain", 10, || node(&c, "node1").starts_with("drain"));
    assert!(node(&c, "node1").ends_with("|NHC: check_hw_gpu: GPU 0 XID 79"), "{}", node(&c, "node1"));
    c.wait_state(running, &["COMPLETED"], 30);
    let waits = c.sbatch(&["-w", "node1", "-o", "/dev/null", "--wrap", "true"]);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(c.job(waits)["JobState"], "PENDING", "nothing starts on a drained node");
    // It passes again: the drain it made is undone, and the job runs.
    std::fs::remove_file(work.join("sick-node1")).unwrap();
    c.wait_state(waits, &["COMPLETED"], 30);
    assert!(!node(&c, "node1").starts_with("drain"), "{}", node(&c, "node1"));
    // NHC's way: the check drains its own node with the node's credential and exits 0; that
    // credential cannot drain another node; the check's passes leave such a drain, the node's
    // own `state=resume` ends it.
    let sc = c.shims.join("scontrol").display().to_string();
    write_script(
        &dir.join("check"),
        &format!(
            "#!/bin/sh\nif [ -e {w}/nhc-$SLURMD_NODENAME ]; then {sc} update nodename=$SLURMD_NODENAME state=drain reason='NHC: check_fs_mount: /scratch not mounted'; \
             {sc} update nodename=node2 state=drain reason=evil 2>{w}/other.err; echo $? > {w}/other-$SLURMD_NODENAME; fi\n\
             if [ -e {w}/nhc-ok-$SLURMD_NODENAME ]; then {sc} update nodename=$SLURMD_NODENAME state=resume; fi\nexit 0\n"
        ),
    );
    std::fs::write(work.join("nhc-node1"), "").unwrap();
    wait_for("NHC's drain", 10, || node(&c, "node1") == "drain|NHC: check_fs_mount: /scratch not mounted");
    wait_for("the other node's refusal", 10, || read(&work.join("other-node1")).trim() == "1");
    assert!(read(&work.join("other.err")).contains("not node \"node2\"'s"), "{}", read(&work.join("other.err")));
    assert!(!node(&c, "node2").starts_with("drain"));
    std::fs::remove_file(work.join("nhc-node1")).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert!(node(&c, "node1").starts_with("drain"), "the check's passes leave NHC's drain");
    std::fs::write(work.join("nhc-ok-node1"), "").unwrap();
    wait_for("NHC's resume", 10, || !node(&c, "node1").starts_with("drain"));
    std::fs::remove_file(work.join("nhc-ok-node1")).unwrap();
    // A drain the check did not make stays, however often the check passes.
    c.ok("scontrol", &["update", "nodename=node2", "state=drain", "reason=maintenance"]);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(node(&c, "node2"), "drain|maintenance");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs a command of the cluster's as `nobody` (a second, ordinary user).
fn as_nobody(c: &Cluster, cmd: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(c.shims.join(cmd))
        .args(args)
        .env("TANDEM_SERVER", format!("unix://{}", c.sock))
        .current_dir("/")
        .output()
        .unwrap()
}

fn text(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn advance_reservations_keep_outsiders_off_run_their_own_and_maintenance_shows_in_sinfo() {
    let c = Cluster::new("resv", 2, None, 30);
    c.wait_nodes(2);
    // Node 1 is busy for a while; a maintenance on node2 starts in 75 s (Slurm's limits are in
    // minutes: a job of 1 minute fits before it, one of 5 does not).
    let filler = c.sbatch(&["-w", "node1", "--exclusive", "-t", "10", "-o", "/dev/null", "--wrap", "sleep 300"]);
    c.wait_state(filler, &["RUNNING"], 30);
    let made = c.ok(
        "scontrol",
        &["create", "reservation", "ReservationName=maint", "StartTime=now+75", "Duration=1", "Nodes=node2", "Users=root", "Flags=MAINT"],
    );
    assert_eq!(made, "Reservation created: maint\n");
    let show = c.ok("scontrol", &["show", "reservation", "maint"]);
    assert!(show.starts_with("ReservationName=maint StartTime="), "{show}");
    assert!(show.contains(" Duration=00:01:00\n   Nodes=node2 NodeCnt=1 CoreCnt=4 Features=(null) PartitionName=(null) Flags=MAINT,SPEC_NODES\n   TRES=cpu=4\n   Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE"), "{show}");
    let table = c.ok("sinfo", &["-T"]);
    assert!(
        table.starts_with("RESV_NAME     STATE           START_TIME             END_TIME     DURATION  NODELIST\nmaint      INACTIVE  "),
        "{table}"
    );
    // The long job stays off node2 (it would overlap the window); the short one backfills there.
    let long = c.sbatch(&["--exclusive", "-t", "5", "-o", "/dev/null", "--wrap", "sleep 1"]);
    let short = c.sbatch(&["--exclusive", "-t", "1", "-o", "/dev/null", "--wrap", "sleep 1"]);
    c.wait_state(short, &["COMPLETED"], 30);
    assert_eq!(c.job(short)["NodeList"], "node2");
    assert_eq!(c.job(long)["JobState"], "PENDING");
    // The window comes forward to now (an update keeps the duration): node2 is in maintenance,
    // and a job that needs it waits with Slurm's reason.
    assert_eq!(c.ok("scontrol", &["update", "ReservationName=maint", "StartTime=now"]), "Reservation updated.\n");
    wait_for("node2 in maintenance", 10, || node(&c, "node2").starts_with("maint|"));
    assert!(c.ok("sinfo", &["-h", "-o", "%t %N"]).contains("maint node2"));
    assert!(c.ok("scontrol", &["show", "node", "node2"]).contains("State=IDLE+MAINTENANCE+RESERVED "));
    assert!(c.ok("sinfo", &["-T", "-h"]).contains("maint    ACTIVE  "));
    let pinned = c.sbatch(&["-w", "node2", "-t", "1", "-o", "/dev/null", "--wrap", "true"]);
    wait_for("the maintenance reason", 10, || {
        c.ok("squeue", &["-h", "-j", &pinned.to_string(), "-o", "%r"]).trim() == "ReqNodeNotAvail, Reserved for maintenance"
    });
    c.ok("scancel", &[&pinned.to_string(), &long.to_string(), &filler.to_string()]);
    // An account's reservation runs that account's jobs, on its node only; another's is refused.
    c.wait_state(filler, &["CANCELLED"], 30);
    c.ok("scontrol", &["create", "reservation", "ReservationName=team", "StartTime=now", "Duration=10", "Nodes=node1", "Accounts=root"]);
    let mine = c.sbatch(&["--reservation=team", "-t", "2", "-o", "team.out", "--wrap", "echo ran"]);
    c.wait_state(mine, &["COMPLETED"], 30);
    let j = c.job(mine);
    assert_eq!((j["NodeList"].as_str(), j["Reservation"].as_str()), ("node1", "team"));
    assert!(c.ok("squeue", &["-h", "-t", "all", "--reservation=team", "-o", "%i %v"]).contains(&format!("{mine} team")));
    let o = c.run("sbatch", &["--reservation=nosuch", "--wrap", "true"]);
    assert!(!o.status.success() && text(&o).contains("Requested reservation is invalid"), "{}", text(&o));
    // Deleting needs no job in it; then it is gone.
    c.ok("scontrol", &["delete", "ReservationName=team"]);
    assert_eq!(c.run("scontrol", &["show", "reservation", "team"]).stdout, b"Reservation team not found\n");
    if !common::is_root() {
        eprintln!("skipping the ordinary user's part: not root (setpriv needs it)");
        return;
    }
    c.ok("scontrol", &["create", "reservation", "ReservationName=team", "StartTime=now", "Duration=10", "Nodes=node1", "Accounts=root"]);
    let o = as_nobody(&c, "sbatch", &["--reservation=team", "--wrap", "true"]);
    assert!(!o.status.success() && text(&o).contains("Access denied to requested reservation"), "{}", text(&o));
    // An ordinary user may not create, change or delete one (Slurm's words); nothing changes.
    let o = as_nobody(
        &c,
        "scontrol",
        &["create", "reservation", "StartTime=now", "Duration=5", "Nodes=node1", "Users=nobody", "Flags=OVERLAP"],
    );
    assert_eq!(
        (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned()),
        (Some(1), "Error creating the reservation: Invalid user id\n".into())
    );
    let o = as_nobody(&c, "scontrol", &["update", "ReservationName=team", "Duration=60"]);
    assert!(text(&o).contains("Error updating the reservation: Invalid user id"), "{}", text(&o));
    let o = as_nobody(&c, "scontrol", &["delete", "reservation", "team"]);
    assert!(text(&o).contains("delete_reservation reservation: Invalid user id"), "{}", text(&o));
    assert_eq!(c.ok("sinfo", &["-T", "-h"]).lines().count(), 2, "maint and team, nothing else");
    // Bad input from root: Slurm's client errors, nothing stored.
    for (args, says) in [
        (
            vec!["StartTime=garbage", "Duration=5", "Nodes=node1", "Users=root"],
            "scontrol: error: Invalid start time StartTime=garbage.  No reservation created.\n",
        ),
        (vec!["Duration=5", "Nodes=node1", "Users=root"], "scontrol: error: A start time must be given.  No reservation created.\n"),
        (vec!["StartTime=now", "Duration=5", "Nodes=node1", "Users=root", "Flags=BOGUS"], "scontrol: error: Error parsing flags BOGUS"),
        (
            vec!["StartTime=now", "Duration=5", "Nodes=nosuch", "Users=root", "Flags=OVERLAP"],
            "Error creating the reservation: Invalid node name specified: nosuch\n",
        ),
        (
            vec!["StartTime=now", "Duration=5", "Nodes=node1", "Users=nosuchuser", "Flags=OVERLAP"],
            "Error creating the reservation: Invalid user id",
        ),
        (
            vec!["ReservationName=team", "StartTime=now", "Duration=5", "Nodes=node2", "Users=root", "Flags=OVERLAP"],
            "Error creating the reservation: Duplicate reservation name\n",
        ),
    ] {
        let mut a = vec!["create", "reservation"];
        a.extend(args.iter());
        let o = c.run("scontrol", &a);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(String::from_utf8_lossy(&o.stderr).starts_with(says), "{args:?}: {}", text(&o));
    }
    assert_eq!(c.ok("sinfo", &["-T", "-h"]).lines().count(), 2, "nothing stored");
}

#[test]
fn a_check_that_marks_its_node_down_requeues_its_job_expedited_ahead_of_earlier_ones_and_the_gpu_check_drains_on_an_xid() {
    let dir = scripts_dir("down");
    let work = free_dir("site-down");
    let w = work.display();
    write_script(
        &dir.join("check"),
        &format!("#!/bin/sh\nif [ -e {w}/down-$SLURMD_NODENAME ]; then echo 'GPU 0 has fallen off the bus' >&2; exit 2; fi\nexit 0\n"),
    );
    let cfg =
        format!("health_check_program = \"{}\"\nhealth_check_interval = 1\nenable_expedited_requeue = true\n", dir.join("check").display());
    let c = Cluster::with_config("down", 2, Some("2"), 30, Some(&cfg));
    c.wait_nodes(2);
    // node2 is busy; an earlier job waits for node2; the victim runs on node1.
    let filler = c.sbatch(&["-w", "node2", "--exclusive", "-t", "10", "-o", "/dev/null", "--wrap", "sleep 300"]);
    c.wait_state(filler, &["RUNNING"], 30);
    let earlier = c.sbatch(&["-w", "node2", "--exclusive", "-t", "10", "-o", "/dev/null", "--wrap", "sleep 300"]);
    let victim = c.sbatch(&["--exclusive", "--requeue=expedite", "-t", "10", "-o", "/dev/null", "--wrap", "sleep 300"]);
    c.wait_state(victim, &["RUNNING"], 30);
    assert_eq!(c.job(victim)["NodeList"], "node1");
    // The check marks node1 down: the victim goes back to the queue at once.
    std::fs::write(work.join("down-node1"), "").unwrap();
    wait_for("node1 down", 10, || node(&c, "node1") == "down|GPU 0 has fallen off the bus");
    c.wait_state(victim, &["PENDING"], 10);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(node(&c, "node1"), "down|GPU 0 has fallen off the bus", "its heartbeats do not bring it back");
    // node2 frees: the requeued job takes it, ahead of the job that waited for it before.
    c.ok("scancel", &[&filler.to_string()]);
    let j = c.wait_state(victim, &["RUNNING"], 30);
    assert_eq!((j["NodeList"].as_str(), j["Restarts"].as_str()), ("node2", "1"));
    assert_eq!(c.job(earlier)["JobState"], "PENDING");
    // The check passes again: node1 is back, and the earlier job... still waits for node2.
    std::fs::remove_file(work.join("down-node1")).unwrap();
    wait_for("node1 back", 10, || node(&c, "node1").starts_with("idle"));
    // A bad value of --requeue is refused.
    let o = c.run("sbatch", &["--requeue=soon", "--wrap", "true"]);
    assert!(!o.status.success() && text(&o).contains("invalid --requeue=soon"), "{}", text(&o));
    // The built-in GPU check (declared GPUs: faults injected in the agent's data directory).
    std::fs::write(c.dir.join("node1/gpu-faults"), "1 xid 79\n").unwrap();
    wait_for("the GPU check's drain", 10, || node(&c, "node1").starts_with("drain"));
    assert_eq!(node(&c, "node1"), "drain|GPU check: GPU 1: XID 79 (fallen off the bus)");
    // An XID calls for a reset: the node stays drained through the check's next passes.
    std::thread::sleep(Duration::from_secs(2));
    assert!(node(&c, "node1").starts_with("drain|GPU check"), "{}", node(&c, "node1"));
    c.ok("scancel", &[&victim.to_string(), &earlier.to_string()]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_task_prolog_exports_into_the_task_and_the_task_epilog_runs_after_it_as_the_user() {
    let dir = scripts_dir("task");
    let work = free_dir("site-task");
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o777)).unwrap();
    // The epilog's log, which every user's epilog appends to.
    std::fs::write(work.join("task_epilog.log"), "").unwrap();
    std::fs::set_permissions(work.join("task_epilog.log"), std::fs::Permissions::from_mode(0o666)).unwrap();
    let w = work.display();
    write_script(
        &dir.join("task_prolog"),
        "#!/bin/sh\necho \"export FROM_PROLOG=yes-$SLURM_JOB_ID\"\necho 'unset DROP_ME'\necho 'print hello from the task prolog'\n",
    );
    write_script(
        &dir.join("task_epilog"),
        &format!("#!/bin/sh\necho \"$SLURM_JOB_ID $SLURM_PROCID $(id -u) $FROM_PROLOG\" >> {w}/task_epilog.log\n"),
    );
    let cfg = format!("task_prolog = \"{}\"\ntask_epilog = \"{}\"\n", dir.join("task_prolog").display(), dir.join("task_epilog").display());
    let c = Cluster::with_config("task", 1, None, 30, Some(&cfg));
    c.wait_nodes(1);
    // The batch script sees the prolog's export and not the variable it unset; the epilog runs
    // after it, with the task's environment.
    let id =
        c.sbatch(&["-o", &format!("{w}/out-%j"), "--export=ALL,DROP_ME=1", "--wrap", "echo \"got $FROM_PROLOG drop=${DROP_ME:-gone}\""]);
    c.wait_state(id, &["COMPLETED"], 30);
    assert_eq!(read(&work.join(format!("out-{id}"))), format!("hello from the task prolog\ngot yes-{id} drop=gone\n"));
    wait_for("the task epilog", 10, || read(&work.join("task_epilog.log")).contains(&format!("{id} 0 0 yes-{id}")));
    // srun's tasks each get it too; a task's exit code is kept.
    let id = c.sbatch(&["-n2", "-o", &format!("{w}/out-%j"), "--wrap", "srun -n2 sh -c 'echo $SLURM_PROCID:$FROM_PROLOG; exit 3'"]);
    let j = c.wait_state(id, &["FAILED", "COMPLETED"], 30);
    assert_eq!(j["ExitCode"], "3:0", "{j:?}");
    let out = read(&work.join(format!("out-{id}")));
    assert!(out.contains(&format!("0:yes-{id}")) && out.contains(&format!("1:yes-{id}")), "{out}");
    // A cancel reaches the task through the wrapper, and the epilog still runs.
    let id = c.sbatch(&["-o", "/dev/null", "--wrap", "sleep 300"]);
    c.wait_state(id, &["RUNNING"], 30);
    std::thread::sleep(Duration::from_millis(500));
    c.ok("scancel", &[&id.to_string()]);
    c.wait_state(id, &["CANCELLED"], 30);
    wait_for("the cancelled task's epilog", 10, || read(&work.join("task_epilog.log")).contains(&format!("{id} 0 ")));
    // Another user's task: the prolog and epilog run as that user.
    if common::is_root() {
        let o = as_nobody(&c, "sbatch", &["--parsable", "-o", &format!("{w}/nobody-%j"), "--wrap", "echo $FROM_PROLOG"]);
        assert!(o.status.success(), "{}", text(&o));
        let id: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
        c.wait_state(id, &["COMPLETED"], 30);
        assert_eq!(read(&work.join(format!("nobody-{id}"))), format!("hello from the task prolog\nyes-{id}\n"));
        wait_for("nobody's task epilog", 10, || read(&work.join("task_epilog.log")).contains(&format!("{id} 0 65534 yes-{id}")));
    }
    // A task prolog others may write is refused: the task fails, saying why.
    std::fs::set_permissions(dir.join("task_prolog"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let id = c.sbatch(&["-o", &format!("{w}/bad-%j"), "--wrap", "echo ran"]);
    c.wait_state(id, &["FAILED"], 30);
    let out = read(&work.join(format!("bad-{id}")));
    assert!(out.contains("task prolog") && out.contains("writable by its group or others") && !out.contains("ran"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The site's job_submit.lua: the common patterns (a default partition, a job without a time
/// limit refused with the script's words and Slurm's, a GPU cap, an environment variable
/// added), once per service apply, a modification through `slurm_job_modify`; the script can
/// never grant what the user may not have; a runaway, sleeping, failing, greedy or broken
/// script refuses the request with a clear message and the controller keeps serving;
/// `scontrol reconfigure` reloads it (operators only), and a script others may write is refused.
const POLICY: &str = r#"
function slurm_job_submit(job_desc, part_list, submit_uid)
  if job_desc.name == "svc-no" then
    slurm.log_user("services named %s are not allowed", job_desc.name)
    return slurm.ESLURM_ACCESS_DENIED
  end
  if job_desc.name == "svc-yes" then slurm.log_user("welcome, %s", job_desc.name) end
  if job_desc.time_limit == slurm.NO_VAL and job_desc.script ~= nil then
    slurm.log_user("please give a time limit (--time)")
    return slurm.ESLURM_MISSING_TIME_LIMIT
  end
  if job_desc.partition == nil then
    for name, p in pairs(part_list) do
      if p.flag_default == 0 then job_desc.partition = name end
    end
  end
  local tres = job_desc.tres_per_node
  if tres ~= nil and string.find(tres, "gpu:[2-9]") then
    slurm.log_user("at most 1 GPU per node here, not %s", tres)
    return slurm.ERROR
  end
  if job_desc.name == "sneaky" then job_desc.qos = "critical" end
  if job_desc.name == "loop" then while true do end end
  if job_desc.name == "sleep" then os.execute("sleep 97") end
  if job_desc.name == "boom" then error("policy bug") end
  if job_desc.name == "nan" then job_desc.time_limit = 0/0 end
  if job_desc.name == "greedy" then local s = "x" while true do s = s .. s end end
  if job_desc.environment ~= nil and job_desc.environment["POLICY"] ~= nil then
    job_desc.environment["POLICY_SEEN"] = "seen-by-" .. job_desc.user_name
  end
  slurm.log_info("job_submit: accepted from uid %d", submit_uid)
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  if job_desc.time_limit ~= nil and job_desc.time_limit ~= slurm.NO_VAL and job_desc.time_limit > 60 then
    slurm.log_info("job_modify: capping job %d of %s at 60 minutes", job_rec.job_id, job_rec.user_name)
    job_desc.time_limit = 60
  end
  return slurm.SUCCESS
end
"#;

#[test]
fn job_submit_lua_routes_refuses_and_caps_with_slurms_words_and_a_broken_or_runaway_script_refuses_without_harm() {
    let dir = scripts_dir("jobsubmit");
    let script = dir.join("job_submit.lua");
    std::fs::write(&script, POLICY).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let cfg = format!(
        "job_submit = \"{}\"\njob_submit_timeout = 2\njob_submit_memory = 64\n\
         [[partition]]\nname = \"batch\"\n[[partition]]\nname = \"debug\"\n\
         [[qos]]\nname = \"normal\"\n[[qos]]\nname = \"critical\"\npreempt_tier = 1\n",
        script.display()
    );
    let c = Cluster::with_config("jobsubmit", 1, None, 30, Some(&cfg));
    assert!(c.ok("scontrol", &["show", "config"]).contains("JobSubmitPlugins        = lua\n"));
    // No time limit: the script's words, then Slurm's for its code; nothing stored.
    let o = c.run("sbatch", &["--wrap", "true"]);
    assert!(!o.status.success());
    let e = text(&o);
    assert!(e.contains("sbatch: error: please give a time limit (--time)\n"), "{e}");
    assert!(e.contains("sbatch: error: Batch job submission failed: Time limit specification required, but not provided"), "{e}");
    // A default partition chosen by the script, and a variable it adds to the job's environment.
    let o =
        c.run_env("sbatch", &["--parsable", "-t", "5", "-o", "env-%j.out", "--wrap", "echo POLICY_SEEN=$POLICY_SEEN"], &[("POLICY", "1")]);
    assert!(o.status.success(), "{}", text(&o));
    let id: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    let j = c.wait_state(id, &["COMPLETED"], 60);
    assert_eq!(j["Partition"], "debug");
    let out = read(&c.work.join(format!("env-{id}.out")));
    assert!(out.contains("POLICY_SEEN=seen-by-root"), "{out}");
    // The GPU cap, with the script's words.
    let e = text(&c.run("sbatch", &["-t", "5", "--gres=gpu:4", "--wrap", "true"]));
    assert!(e.contains("sbatch: error: at most 1 GPU per node here, not gres:gpu:4"), "{e}");
    assert!(e.contains("Batch job submission failed: Unspecified error"), "{e}");
    // A heterogeneous job's later component is a request the script sees too.
    let e = text(&c.run("sbatch", &["-t", "5", "-n1", ":", "-t", "5", "-n1", "--gres=gpu:3", "--wrap", "true"]));
    assert!(e.contains("sbatch: error: at most 1 GPU per node here, not gres:gpu:3"), "{e}");
    // What the script sets is checked again: a QOS the user may not have stays refused.
    let o = as_nobody(&c, "sbatch", &["-t", "5", "-J", "sneaky", "-D", "/tmp", "--wrap", "true"]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).to_lowercase().contains("qos"), "{}", text(&o));
    // A modification through slurm_job_modify: the script caps a raised limit.
    let held = c.sbatch(&["-t", "30", "-H", "--wrap", "true"]);
    c.ok("scontrol", &["update", &format!("JobId={held}"), "TimeLimit=180"]);
    assert_eq!(c.job(held)["TimeLimit"], "01:00:00");
    c.ok("scancel", &[&held.to_string()]);
    // Once per service apply, with Slurm's words for its code.
    std::fs::write(c.work.join("no.toml"), "name = \"svc-no\"\ncommand = [\"sleep\", \"60\"]\nreplicas = 2\n").unwrap();
    let o = c.tandem(&["service", "apply", "-f", "no.toml"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("Access/permission denied"), "{}", text(&o));
    std::fs::write(c.work.join("yes.toml"), "name = \"svc-yes\"\ncommand = [\"sleep\", \"60\"]\nreplicas = 1\n").unwrap();
    let o = c.tandem(&["service", "apply", "-f", "yes.toml"]);
    assert!(o.status.success() && text(&o).contains("tandem service apply: welcome, svc-yes"), "{}", text(&o));
    c.tandem_ok(&["service", "delete", "svc-yes"]);
    // A script's number that is not finite is refused by its field, not as a crash.
    let o = c.run("sbatch", &["-t", "5", "-J", "nan", "--wrap", "true"]);
    assert!(!o.status.success() && text(&o).contains("failed with an error"), "{}", text(&o));
    assert!(c.log("controller").contains("a finite number expected"), "{}", c.log("controller"));
    // A runaway loop, a sleeping child, a Lua error, a memory hog: refused, clearly, and the
    // next request is served.
    for (name, words) in [
        ("loop", "did not finish within 2 s"),
        ("sleep", "did not finish within 2 s"),
        ("boom", "failed with an error"),
        ("greedy", "failed with an error"),
    ] {
        let started = Instant::now();
        let o = c.run("sbatch", &["-t", "5", "-J", name, "--wrap", "true"]);
        assert!(!o.status.success(), "{name}");
        assert!(text(&o).contains(words), "{name}: {}", text(&o));
        assert!(started.elapsed() < Duration::from_secs(20), "{name} took {:?}", started.elapsed());
        c.sbatch(&["-t", "5", "--wrap", "true"]);
    }
    let log = c.log("controller");
    assert!(log.contains("policy bug") && log.contains("not enough memory"), "{log}");
    // Operators see the hook's calls, refusals and failures in /metrics.
    let m = common::raw_http(&c.sock, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").1;
    let count = |name: &str| -> u64 {
        m.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok())).unwrap_or_else(|| panic!("{name} in {m}"))
    };
    assert!(count("tandem_job_submit_failures_total ") >= 4, "{m}");
    assert!(count("tandem_job_submit_refused_total ") >= 3, "{m}");
    assert!(count("tandem_job_submit_calls_total ") > count("tandem_job_submit_failures_total "), "{m}");
    assert!(log.contains("job_submit: accepted from uid 0"), "{log}");
    // The sleeping child was killed with its script's process group.
    let sleepers = std::process::Command::new("pgrep").args(["-f", "^sleep 97$"]).output().unwrap();
    assert!(sleepers.stdout.is_empty(), "os.execute's child outlived its script: {}", text(&sleepers));
    // A broken script: reconfigure says why; submissions are refused until it is fixed.
    std::fs::write(&script, "function slurm_job_submit(\n").unwrap();
    let o = c.run("scontrol", &["reconfigure"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("slurm_reconfigure error:") && text(&o).contains("syntax error"), "{}", text(&o));
    let e = text(&c.run("sbatch", &["-t", "5", "--wrap", "true"]));
    assert!(e.contains("cannot be loaded"), "{e}");
    // Fixed, but writable by others: refused as a prolog would be.
    std::fs::write(&script, POLICY).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o666)).unwrap();
    let o = c.run("scontrol", &["reconfigure"]);
    assert!(text(&o).contains("writable by its group or others"), "{}", text(&o));
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    c.ok("scontrol", &["reconfigure"]);
    c.sbatch(&["-t", "5", "--wrap", "true"]);
    // Reconfiguring is for operators and administrators.
    let o = as_nobody(&c, "scontrol", &["reconfigure"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("slurm_reconfigure error: Invalid user id"), "{}", text(&o));
}

/// The job_submit.lua examples of Debian's `slurm-wlm-doc` package (its
/// job_submit_plugins.html, fetched now with `apt-get download`, not kept in the repository),
/// each as the body of `slurm_job_submit`, unchanged: an sbatch variable logged to the user,
/// and a job without a node count refused with the example's words.
#[test]
fn the_job_submit_examples_of_debians_slurm_doc_package_work_unchanged() {
    let tmp = free_dir("slurm-doc");
    let got = std::process::Command::new("apt-get").args(["download", "slurm-wlm-doc"]).current_dir(&tmp).output().unwrap();
    assert!(got.status.success(), "apt-get download slurm-wlm-doc: {}", text(&got));
    let deb = std::fs::read_dir(&tmp).unwrap().flatten().map(|e| e.path()).find(|p| p.extension().is_some_and(|x| x == "deb")).unwrap();
    let x = tmp.join("x");
    assert!(std::process::Command::new("dpkg").arg("-x").arg(&deb).arg(&x).status().unwrap().success());
    let html = read(&x.join("usr/share/doc/slurm-wlm/html/job_submit_plugins.html"));
    // Its Lua examples: the <pre> blocks between "..." lines.
    let unescape = |s: &str| s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&amp;", "&");
    let examples: Vec<String> = html
        .split("<pre>")
        .skip(1)
        .filter_map(|b| b.split("</pre>").next())
        .filter(|b| b.trim_start().starts_with("...") && b.contains("job_desc"))
        .map(|b| unescape(b.trim().trim_start_matches("...").trim_end_matches("...")))
        .collect();
    assert_eq!(examples.len(), 2, "{examples:?}");
    let dir = scripts_dir("slurmdoc");
    let script = dir.join("job_submit.lua");
    let body = format!(
        "function slurm_job_submit(job_desc, part_list, submit_uid)\n{}\n{}\n\treturn slurm.SUCCESS\nend\n\n\
         function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)\n\treturn slurm.SUCCESS\nend\n",
        examples[0], examples[1]
    );
    std::fs::write(&script, body).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let c = Cluster::with_config("slurmdoc", 1, None, 30, Some(&format!("job_submit = \"{}\"\n", script.display())));
    let o = c.run_env("sbatch", &["-N", "1", "-t", "1", "--wrap", "true"], &[("FOO", "bar")]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("sbatch: Found env FOO=bar\n"), "{}", text(&o));
    let o = c.run("sbatch", &["-t", "1", "--wrap", "true"]);
    assert!(!o.status.success());
    let e = text(&o);
    assert!(e.contains("sbatch: error: No max_nodes specified, please specify a number of nodes\n"), "{e}");
    assert!(e.contains("sbatch: error: Batch job submission failed: Unspecified error"), "{e}");
}

/// `scontrol reboot`: an administrator's reboot waits for the node to empty (`ASAP` drains it
/// at once), then the agent runs `reboot_program` once; the node takes no work until its
/// agent registers again (the "machine" coming back: the agent restarted), then returns as
/// `nextstate=` says. `cancel_reboot` forgets a reboot not yet issued. Ordinary users are
/// refused, and bad input gets Slurm's words.
#[test]
fn scontrol_reboot_waits_for_the_node_to_empty_runs_the_reboot_program_once_and_the_node_returns_as_nextstate_says() {
    let dir = scripts_dir("reboot");
    let work = free_dir("site-reboot");
    let log = work.join("reboots.log");
    write_script(&dir.join("reboot"), &format!("#!/bin/sh\necho \"$SLURMD_NODENAME\" >> {}\n", log.display()));
    let cfg = format!("reboot_program = \"{}\"\nresume_timeout = 120\n", dir.join("reboot").display());
    let mut c = Cluster::with_config("reboot", 2, None, 30, Some(&cfg));
    let o = as_nobody(&c, "scontrol", &["reboot", "node1"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("scontrol_reboot_nodes error: Permission denied"), "{}", text(&o));
    for (args, words) in [
        (&["reboot"][..], "Missing node list. Specify ALL|<NodeList>"),
        (&["reboot", "ASAP", "nextstate=up", "node1"][..], "Invalid state: up"),
        (&["reboot", "node9"][..], "Invalid node name specified"),
        (&["reboot", "node1", "node2"][..], "too many arguments for keyword:reboot"),
        (&["cancel_reboot"][..], "missing argument for keyword:cancel_reboot"),
    ] {
        let o = c.run("scontrol", args);
        assert!(!o.status.success(), "{args:?}");
        assert!(text(&o).contains(words), "{args:?}: {}", text(&o));
    }
    assert_eq!(node(&c, "node1"), "idle|none", "nothing was changed");
    let conf = c.ok("scontrol", &["show", "config"]);
    assert!(conf.contains(&format!("RebootProgram           = {}\n", dir.join("reboot").display())), "{conf}");
    assert!(conf.contains("ResumeTimeout           = 120 sec\n") && conf.contains("JobSubmitPlugins        = (null)\n"), "{conf}");
    // ASAP on a busy node: drained at once, its job runs on, nothing new lands there.
    let id = c.sbatch(&["-w", "node1", "-c", "4", "--wrap", "sleep 3"]);
    c.wait_state(id, &["RUNNING"], 30);
    c.ok("scontrol", &["reboot", "ASAP", "nextstate=RESUME", "node1"]);
    assert_eq!(node(&c, "node1"), "drain@|Reboot ASAP");
    let show = c.ok("scontrol", &["show", "node", "node1"]);
    assert!(show.contains("+REBOOT_REQUESTED"), "{show}");
    c.wait_state(id, &["COMPLETED"], 30);
    wait_for("node1's reboot program", 20, || read(&log).contains("node1"));
    wait_for("the reboot issued", 10, || node(&c, "node1") == "reboot^|Reboot ASAP : reboot issued");
    let later = c.sbatch(&["-w", "node1", "--wrap", "true"]);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(c.job(later)["JobState"], "PENDING", "a rebooting node takes no work");
    // The machine comes back: its agent starts again and registers; nextstate=RESUME.
    c.kill_agent(0);
    let server = c.agent_server[0].clone();
    c.start_agent(0, &server);
    c.wait_state(later, &["COMPLETED"], 30);
    assert_eq!(node(&c, "node1"), "idle|none");
    assert_eq!(read(&log).matches("node1").count(), 1, "the program ran once");
    // nextstate=DOWN on an idle node: issued at once, down with Slurm's words after it.
    c.ok("scontrol", &["reboot", "nextstate=DOWN", "reason=firmware", "node2"]);
    wait_for("node2's reboot program", 20, || read(&log).contains("node2"));
    c.kill_agent(1);
    let server = c.agent_server[1].clone();
    c.start_agent(1, &server);
    wait_for("node2 down after its reboot", 30, || node(&c, "node2") == "down|firmware : reboot issued : reboot complete");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(node(&c, "node2"), "down|firmware : reboot issued : reboot complete", "its heartbeats keep it down");
    c.ok("scontrol", &["update", "nodename=node2", "state=resume"]);
    assert_eq!(node(&c, "node2"), "idle|none");
    // A reboot not yet issued is cancelled, and its ASAP drain undone.
    let busy = c.sbatch(&["-w", "node1", "-c", "4", "--wrap", "sleep 30"]);
    c.wait_state(busy, &["RUNNING"], 30);
    c.ok("scontrol", &["reboot", "ASAP", "node1"]);
    assert_eq!(node(&c, "node1"), "drain@|Reboot ASAP");
    c.ok("scontrol", &["cancel_reboot", "node1"]);
    assert_eq!(node(&c, "node1"), "allocated|none");
    c.ok("scancel", &[&busy.to_string()]);
}

/// `sreport` counts reserved time as Slurm's: an advance reservation's time that no job in it
/// used is allocated (a `MAINT` one's is planned down), and `reservation utilization` shows
/// each reservation's allocated and idle time.
#[test]
fn sreport_counts_reserved_time_and_reports_each_reservations_use() {
    let c = Cluster::new("sreport-resv", 2, None, 30);
    c.ok("scontrol", &["create", "reservation", "ReservationName=team", "StartTime=now", "Duration=60", "Nodes=node2", "Users=root"]);
    c.ok(
        "scontrol",
        &["create", "reservation", "ReservationName=fix", "StartTime=now", "Duration=60", "Nodes=node1", "Users=root", "Flags=MAINT"],
    );
    let id = c.sbatch(&["--reservation=team", "-c", "2", "--wrap", "sleep 2"]);
    c.wait_state(id, &["COMPLETED"], 30);
    std::thread::sleep(Duration::from_secs(1));
    let (start, end) = ("start=now-1hour", "end=now+1hour");
    let r = c.ok("sreport", &["-n", "-P", "-t", "seconds", "cluster", "utilization", start, end]);
    let row: Vec<u64> = r.trim().split('|').skip(1).map(|v| v.parse().unwrap()).collect();
    let (alloc, down, plnd, idle, reported) = (row[0], row[1], row[2], row[3], row[5]);
    // node2's reserved time (4 CPUs) is allocated, the job's 2 CPUs inside it counted once;
    // node1's maintenance time is planned down.
    assert!(alloc >= 4 * 2 && plnd >= 4 * 2 && down == 0, "more than the job alone (2 CPUs for 2 s): {r}");
    assert_eq!(alloc + plnd + idle, reported, "{r}");
    let r = c.ok("sreport", &["-P", "-t", "seconds", "reservation", "utilization", start, end]);
    assert!(r.contains("Reservation Utilization ") && r.contains("Cluster|Name|Start|End|TRES Name|Allocated|Idle\n"), "{r}");
    let team = r.lines().find(|l| l.contains("|team|")).unwrap_or_else(|| panic!("{r}"));
    let f: Vec<&str> = team.split('|').collect();
    assert_eq!(f[4], "cpu", "{r}");
    let (used, unused): (u64, u64) = (f[5].parse().unwrap(), f[6].parse().unwrap());
    assert!(used >= 2 * 2 && unused > 0, "the job's 2 CPUs for 2 s, and the rest idle: {r}");
    let pct = c.ok("sreport", &["-n", "-P", "-t", "percent", "res", "util", "names=team", start, end]);
    assert_eq!(pct.lines().count(), 1, "{pct}");
    assert_eq!(c.ok("sreport", &["-n", "-P", "reservation", "utilization", "names=other", start, end]), "");
    let o = c.run("sreport", &["reservation", "utilization", "users=root"]);
    assert!(!o.status.success() && text(&o).contains(" Unknown condition: users=root"), "{}", text(&o));
}

/// A process's state letter (`/proc/PID/stat`): a frozen task is `D` under cgroup v1's
/// freezer on recent kernels, `T` when stopped by a signal.
fn proc_state(pid: &str) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// How many lines a job's counter files hold: its script's and its `setsid` child's.
fn counts(c: &Cluster, id: u64) -> (usize, usize) {
    let n = |f: String| read(&c.work.join(f)).lines().count();
    (n(format!("main-{id}.txt")), n(format!("daemon-{id}.txt")))
}

#[test]
fn scontrol_suspend_freezes_every_process_of_the_job_stops_its_clock_and_a_suspending_qos_yields_to_a_higher_tier() {
    let cfg = "[[qos]]\nname = \"low\"\npreempt_mode = \"suspend\"\n[[qos]]\nname = \"high\"\npriority = 100\npreempt_tier = 1\n";
    let c = Cluster::with_config("suspend", 1, None, 30, Some(cfg));
    // A job whose script counts, and whose daemon (a session of its own: no process group or
    // session signal reaches it) counts too, until a `stop-ID` file appears.
    let job = c.script(
        "count.sh",
        "#!/bin/bash\nsetsid bash -c 'while [ ! -e stop-'$SLURM_JOB_ID' ]; do echo x >> daemon-'$SLURM_JOB_ID'.txt; sleep 0.05; done' &\n\
         echo $! > daemon-$SLURM_JOB_ID.pid; echo $$ > main-$SLURM_JOB_ID.pid\n\
         while [ ! -e stop-$SLURM_JOB_ID ]; do echo x >> main-$SLURM_JOB_ID.txt; sleep 0.05; done\nwait\n",
    );
    let id = c.sbatch(&["-c", "4", "-t", "5", &job]);
    c.wait_state(id, &["RUNNING"], 30);
    wait_for("both counting", 30, || {
        let (a, b) = counts(&c, id);
        a > 3 && b > 3
    });
    // Bad input and ordinary users: Slurm's words, nothing changed.
    let o = as_nobody(&c, "scontrol", &["suspend", &id.to_string()]);
    assert!(!o.status.success());
    assert_eq!(text(&o).trim(), format!("Access/permission denied for job {id}"));
    let o = as_nobody(&c, "scontrol", &["resume", &id.to_string()]);
    assert_eq!(text(&o).trim(), format!("Access/permission denied for job {id}"));
    for (args, words) in [
        (&["suspend"][..], "too few arguments for keyword:suspend".to_string()),
        (&["suspend", "12x"][..], "Invalid job id specified for job 12x".to_string()),
        (&["suspend", "999999"][..], "Invalid job id specified for job 999999".to_string()),
        (&["resume", &id.to_string()][..], format!("Job is not suspended for job {id}")),
    ] {
        let o = c.run("scontrol", args);
        assert!(!o.status.success(), "{args:?}");
        assert_eq!(text(&o).trim(), words, "{args:?}");
    }
    assert_eq!(c.job(id)["JobState"], "RUNNING");
    // Suspended: every process of it stops, the setsid daemon too, and its clock stops.
    c.ok("scontrol", &["suspend", &format!("jobid={id}")]);
    assert_eq!(c.job(id)["JobState"], "SUSPENDED");
    assert_eq!(c.ok("squeue", &["-h", "-j", &id.to_string(), "-o", "%t"]).trim(), "S");
    for who in ["main", "daemon"] {
        let pid = read(&c.work.join(format!("{who}-{id}.pid")));
        wait_for(&format!("the {who} process frozen"), 10, || matches!(proc_state(&pid), Some('D' | 'T')));
    }
    let frozen = counts(&c, id);
    let run = c.job(id)["RunTime"].clone();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(counts(&c, id), frozen, "nothing of the job ran while it was suspended");
    assert_eq!(c.job(id)["RunTime"], run, "its run time stood still");
    let left = c.ok("squeue", &["-h", "-j", &id.to_string(), "-o", "%L"]);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(c.ok("squeue", &["-h", "-j", &id.to_string(), "-o", "%L"]), left, "its time left does not run down");
    // Resumed: both count again; its end is reported with the time it was suspended.
    c.ok("scontrol", &["resume", &id.to_string()]);
    assert_eq!(c.job(id)["JobState"], "RUNNING");
    wait_for("both counting again", 10, || {
        let (a, b) = counts(&c, id);
        a > frozen.0 + 3 && b > frozen.1 + 3
    });
    std::fs::write(c.work.join(format!("stop-{id}")), "").unwrap();
    c.wait_state(id, &["COMPLETED"], 30);
    let sacct = c.ok("sacct", &["-n", "-X", "-P", "-j", &id.to_string(), "-o", "State,Suspended"]);
    let (state, suspended) = sacct.trim().split_once('|').unwrap();
    assert_eq!(state, "COMPLETED");
    let secs: Vec<u64> = suspended.split(':').map(|x| x.parse().unwrap()).collect();
    assert!(secs[2] >= 4 && secs[0] == 0 && secs[1] == 0, "{sacct}");

    // The QOS's mode as sacctmgr shows and changes it; a bad one is refused.
    let qos = c.ok("sacctmgr", &["-nP", "show", "qos", "format=Name,PreemptMode"]);
    assert!(qos.lines().any(|l| l == "low|SUSPEND") && qos.lines().any(|l| l == "high|REQUEUE"), "{qos}");
    let o = c.run("sacctmgr", &["-i", "modify", "qos", "high", "set", "PreemptMode=gang"]);
    assert!(!o.status.success() && text(&o).contains("invalid value for PreemptMode: \"gang\" (REQUEUE or SUSPEND)"), "{}", text(&o));
    // Preemption by suspension: a high-tier job needs the CPUs the low one holds.
    let low = c.sbatch(&["-q", "low", "-c", "4", "--mem=1G", "-t", "5", &job]);
    c.wait_state(low, &["RUNNING"], 30);
    wait_for("the low job counting", 30, || counts(&c, low).0 > 3);
    let high = c.sbatch(&["-q", "high", "-c", "4", "--mem=1G", "--wrap", "sleep 5"]);
    c.wait_state(low, &["SUSPENDED"], 30);
    c.wait_state(high, &["RUNNING", "COMPLETED"], 30);
    let during = counts(&c, low);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(counts(&c, low), during, "the low job is frozen while the high one runs");
    c.wait_state(high, &["COMPLETED"], 30);
    c.wait_state(low, &["RUNNING"], 30);
    wait_for("the low job counting again", 10, || counts(&c, low).0 > during.0 + 3);
    assert_eq!(c.job(low)["Restarts"], "0", "suspended and resumed, not requeued");
    std::fs::write(c.work.join(format!("stop-{low}")), "").unwrap();
    c.wait_state(low, &["COMPLETED"], 30);
}
