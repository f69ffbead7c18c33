//! Controller unit tests: the lifecycle driven by hand-made heartbeats and ticks.

use super::*;

pub(super) fn spec(uid: u32) -> JobSpec {
    JobSpec {
        script: "#!/bin/sh\necho hi\n".into(),
        script_args: vec![],
        workdir: "/tmp".into(),
        submit_dir: "/tmp".into(),
        submit_host: "h".into(),
        env: vec![("PATH".into(), "/bin".into())],
        output: "slurm-%j.out".into(),
        error: None,
        append: true,
        requeue: true,
        signal: None,
        interactive: false,
        uid,
        gid: uid,
        recorded: Vec::new(),
        login_env: false,
        umask: None,
        container: None,
        retries: None,
    }
}

/// A batch task's end as an agent reports it: an exit code, or a signal.
pub(super) fn ended(job: u64, epoch: u32, code: Option<i32>, signal: Option<i32>) -> TaskExit {
    TaskExit {
        job,
        epoch,
        step: BATCH_STEP,
        rank: 0,
        code,
        signal,
        oom: false,
        fenced: false,
        error: None,
        lost: false,
        prolog_failed: false,
    }
}

pub(super) fn batch(args: &[&str]) -> BatchSpec {
    let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    a.push("--wrap=true".into());
    slurmcli::parse_sbatch(&a, 0, &mut |_| unreachable!()).unwrap()
}

fn cluster(n: usize, gpus: u32) -> Controller {
    let mut c = Controller::new(Settings::default());
    for i in 0..n {
        let mut node = Node::new(format!("n{i}"), 4, 8 << 30, gpus);
        node.gpu_type = (gpus > 0).then(|| "h100".into());
        c.register(0, node, format!("127.0.0.{}", i + 1)).unwrap();
    }
    c
}

fn launches(orders: &[Order]) -> Vec<&Task> {
    orders.iter().filter_map(|o| if let Order::Launch(t) = o { Some(t) } else { None }).collect()
}

/// A heartbeat that acknowledges everything received before, and reports as running every task
/// it was given and has not reported ended, as a well-behaved agent does.
trait Beat {
    fn hb(&mut self, now: Time, node: &str, running: &[TaskKey], exits: &[TaskExit]) -> Result<Vec<Order>, Refused>;
}

thread_local! {
    /// The highest order sequence each node's agent has received (tests run one per thread).
    static DELIVERED: std::cell::RefCell<HashMap<String, u64>> = std::cell::RefCell::new(HashMap::new());
    /// The tasks each node's agent was given and has not reported ended.
    static HELD: std::cell::RefCell<HashMap<String, BTreeSet<(u64, u32, u32, u32)>>> = std::cell::RefCell::new(HashMap::new());
}

impl Beat for Controller {
    fn hb(&mut self, now: Time, node: &str, running: &[TaskKey], exits: &[TaskExit]) -> Result<Vec<Order>, Refused> {
        let prev = DELIVERED.with(|d| d.borrow().get(node).copied().unwrap_or(0));
        let mut all: Vec<TaskKey> = running.to_vec();
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            let held = h.entry(node.to_string()).or_default();
            for e in exits {
                held.remove(&(e.job, e.epoch, e.step, e.rank));
            }
            for &(job, epoch, step, rank) in held.iter() {
                let k = TaskKey { job, epoch, step, rank };
                if !all.contains(&k) {
                    all.push(k);
                }
            }
        });
        let out = self.heartbeat(now, node, prev, &all, exits)?;
        let max = out.iter().map(|(s, _)| *s).max().unwrap_or(prev);
        DELIVERED.with(|d| d.borrow_mut().insert(node.to_string(), max));
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            let held = h.entry(node.to_string()).or_default();
            for (s, o) in &out {
                if *s > prev
                    && let Order::Launch(t) = o
                {
                    held.insert((t.job, t.epoch, t.step, t.rank));
                }
            }
        });
        Ok(out.into_iter().filter(|(s, _)| *s > prev).map(|(_, o)| o).collect())
    }
}

#[test]
fn submit_dispatch_and_complete() {
    let mut c = cluster(2, 0);
    let ids = c.submit(0, spec(1000), &batch(&["-N2", "-n4"]), "alice").unwrap();
    assert_eq!(ids, vec![1]);
    assert_eq!(c.take_dirty().jobs.len(), 1, "the submission is persisted");
    let info = c.tick(1);
    assert_eq!(info.started, 1);
    let orders = c.hb(1, "n0", &[], &[]).unwrap();
    let t = launches(&orders);
    assert_eq!(t.len(), 1, "the batch script runs on the first node");
    let env: HashMap<_, _> = t[0].env.iter().cloned().collect();
    assert_eq!(env["SLURM_JOB_NODELIST"], "n[0-1]");
    assert_eq!(env["SLURM_NTASKS"], "4");
    assert_eq!(env["MASTER_ADDR"], "127.0.0.1");
    assert_eq!(t[0].stdout, "/tmp/slurm-1.out");
    assert!(c.hb(1, "n1", &[], &[]).unwrap().is_empty());
    let exit = ended(1, 1, Some(0), None);
    c.hb(5, "n0", &[], &[exit]).unwrap();
    let j = c.job(1).unwrap();
    assert_eq!((j.state, j.exit_code, j.end), (JobState::Completed, Some(0), Some(5)));
    assert!(c.nodes().iter().all(|n| n.usage.jobs == 0), "resources released");
}

#[test]
fn a_job_whose_image_is_pulled_is_configuring_until_its_node_says_no_more() {
    let mut c = cluster(2, 0);
    c.submit(0, spec(1000), &batch(&["-N2"]), "alice").unwrap();
    c.tick(1);
    let key = TaskKey { job: 1, epoch: 1, step: BATCH_STEP, rank: 0 };
    let pull = |p: &str| vec![crate::Pulling { key, progress: p.into() }];
    c.record_pulls("n0", &pull("pulling x: layer 1/2"));
    assert_eq!(c.job(1).unwrap().pulling, Some(("n0".into(), "pulling x: layer 1/2".into())));
    // Another node's report without it changes nothing; a stale epoch is ignored.
    c.record_pulls("n1", &[]);
    assert!(c.job(1).unwrap().pulling.is_some());
    c.record_pulls("n0", &[crate::Pulling { key: TaskKey { epoch: 9, ..key }, progress: "old".into() }]);
    assert!(c.job(1).unwrap().pulling.is_none(), "its node no longer reports it");
    c.record_pulls("n0", &pull("pulling x: unpacking"));
    c.record_pulls("n0", &[]);
    assert!(c.job(1).unwrap().pulling.is_none());
}

#[test]
fn a_jobs_output_is_found_on_its_first_node_for_its_owner_and_root_alone() {
    let mut c = cluster(2, 0);
    let mut files = spec(1000);
    (files.output, files.error) = ("out-%j-%N.txt".into(), Some("/var/tmp/err-%j".into()));
    c.submit(0, files, &batch(&["-N2"]), "alice").unwrap();
    assert!(matches!(c.task_output(1000, 1, None), Err(Refused::Conflict(m)) if m.contains("not started")));
    c.tick(1);
    let launched = launches(&c.hb(1, "n0", &[], &[]).unwrap()).into_iter().cloned().collect::<Vec<_>>();
    let out = c.task_output(1000, 1, None).unwrap();
    assert_eq!(out.files, [launched[0].stdout.clone(), launched[0].stderr.clone()], "the files the task was given");
    assert_eq!(out.files, ["/tmp/out-1-n0.txt", "/var/tmp/err-1"]);
    assert_eq!((out.node.as_str(), out.job, out.epoch, out.uid, out.gid, out.running), ("n0", 1, 1, 1000, 1000, true));
    assert_eq!(c.task_output(0, 1, Some("n0")).unwrap(), out, "root may read it");
    assert!(matches!(c.task_output(1001, 1, None), Err(Refused::Forbidden(_))), "another user may not");
    assert!(matches!(c.task_output(1000, 1, Some("n1")), Err(Refused::NotFound(m)) if m.contains("runs on n0")));
    assert!(matches!(c.task_output(1000, 1, Some("n9")), Err(Refused::NotFound(m)) if m.contains("did not run on n9")));
    assert!(matches!(c.task_output(1000, 7, None), Err(Refused::NotFound(_))));
    c.order_output(
        "n0",
        1,
        1,
        OutputRead {
            id: 3,
            key: "k".into(),
            files: out.files.clone(),
            uid: 1000,
            gid: 1000,
            follow: true,
            tail_lines: Some(5),
            limit_bytes: None,
        },
    );
    assert!(c.hb(2, "n0", &[], &[]).unwrap().iter().any(|o| matches!(o, Order::Output { job: 1, epoch: 1, read } if read.id == 3)));
    // Ended, its output is still where it ran; one output file for both streams is named once.
    c.hb(5, "n0", &[], &[ended(1, 1, Some(0), None)]).unwrap();
    let done = c.task_output(1000, 1, None).unwrap();
    assert_eq!((done.node.as_str(), done.running), ("n0", false));
    c.submit(0, spec(1000), &batch(&[]), "alice").unwrap();
    c.tick(6);
    assert_eq!(c.task_output(1000, 2, None).unwrap().files, ["/tmp/slurm-2.out"]);
    // An allocation writes nothing of its own.
    let mut alloc = spec(1000);
    alloc.interactive = true;
    c.submit(0, alloc, &batch(&[]), "alice").unwrap();
    assert!(matches!(c.task_output(1000, 3, None), Err(Refused::Conflict(m)) if m.contains("salloc")));
}

#[test]
fn impossible_submissions_are_refused_and_not_stored() {
    let mut c = cluster(2, 4);
    let e = c.submit(0, spec(1), &batch(&["--gpus-per-node=8"]), "a").unwrap_err();
    assert!(e.to_string().contains("requested node configuration is not available"), "{e}");
    let e = c.submit(0, spec(1), &batch(&["-p", "gpu"]), "a").unwrap_err();
    assert!(e.to_string().contains("invalid partition"), "{e}");
    c.settings.cluster.partitions[0].max_time = 3600;
    let e = c.submit(0, spec(1), &batch(&["-t", "2:00:00"]), "a").unwrap_err();
    assert!(e.to_string().contains("time limit"), "{e}");
    let e = c.submit(0, spec(1), &batch(&["--dependency=afterok:99"]), "a").unwrap_err();
    assert!(e.to_string().contains("dependency"), "{e}");
    assert_eq!(c.jobs().count(), 0);
    assert!(c.take_dirty().jobs.is_empty());
}

/// The check of a request's shape is remembered by its shape alone: shapes that differ in one
/// field are checked each on its own, whatever was checked before them.
#[test]
fn a_remembered_check_answers_only_for_the_same_shape() {
    let mut c = cluster(2, 4);
    for round in 0..2 {
        c.submit(0, spec(1), &batch(&["--gpus-per-node=4"]), "a").unwrap();
        let e = c.submit(0, spec(1), &batch(&["--gpus-per-node=5"]), "a").unwrap_err();
        assert!(e.to_string().contains("requested node configuration is not available"), "round {round}: {e}");
        c.submit(0, spec(1), &batch(&["-N", "2"]), "a").unwrap();
        let e = c.submit(0, spec(1), &batch(&["-N", "3"]), "a").unwrap_err();
        assert!(e.to_string().contains("requests 3 nodes but the cluster has 2"), "round {round}: {e}");
        c.submit(0, spec(1), &batch(&["-w", "n1"]), "a").unwrap();
        assert!(c.submit(0, spec(1), &batch(&["-w", "n7"]), "a").is_err(), "round {round}");
    }
    assert_eq!(c.jobs().count(), 6);
}

#[test]
fn only_the_owner_or_root_cancels() {
    let mut c = cluster(1, 0);
    c.submit(0, spec(1000), &batch(&["--hold"]), "alice").unwrap();
    assert!(matches!(c.cancel(1, 1001, 1, None), Err(Refused::Forbidden(_))));
    c.cancel(1, 1000, 1, None).unwrap();
    assert_eq!(c.job(1).unwrap().state, JobState::Cancelled);
    c.submit(0, spec(1000), &batch(&[]), "alice").unwrap();
    c.tick(1);
    c.cancel(2, 0, 2, None).unwrap();
    // As Slurm's: SIGCONT and SIGTERM now, SIGKILL KillWait later if it still runs.
    let orders = c.hb(2, "n0", &[], &[]).unwrap();
    assert!(orders.contains(&Order::Signal { job: 2, epoch: 1, signal: 15, batch_only: false, step: None }), "{orders:?}");
    assert!(!orders.contains(&Order::Kill { job: 2, epoch: 1 }));
    assert_eq!(c.job(2).unwrap().cancelled_by, Some(0));
    c.hb(15, "n0", &[], &[]).unwrap();
    c.tick(31);
    assert!(!c.hb(31, "n0", &[], &[]).unwrap().contains(&Order::Kill { job: 2, epoch: 1 }));
    c.tick(32);
    assert!(c.hb(32, "n0", &[], &[]).unwrap().contains(&Order::Kill { job: 2, epoch: 1 }));
    let exit = ended(2, 1, None, Some(15));
    c.hb(33, "n0", &[], &[exit]).unwrap();
    let j = c.job(2).unwrap();
    assert_eq!((j.state, j.exit_signal), (JobState::Cancelled, Some(15)));
}

#[test]
fn a_run_whose_batch_step_started_late_counts_from_then_for_accounting_and_its_limit() {
    let mut c = cluster(2, 0);
    c.submit(0, spec(1), &batch(&["-t", "2"]), "a").unwrap();
    c.tick(10);
    assert_eq!(c.job(1).unwrap().start, Some(10));
    c.take_dirty();
    let batch_key = |epoch| TaskKey { job: 1, epoch, step: BATCH_STEP, rank: 0 };
    // Another node, an older run, another step: nothing changes.
    c.runs_started(40, "n1", &[(batch_key(1), 33)]);
    c.runs_started(40, "n0", &[(batch_key(0), 33), (TaskKey { step: 0, ..batch_key(1) }, 33)]);
    assert_eq!(c.job(1).unwrap().start, Some(10));
    assert!(c.take_dirty().jobs.is_empty());
    // The launch waited (the controller's disk was full): the agent's second is the start,
    // never past the controller's now; it is saved.
    c.runs_started(40, "n0", &[(batch_key(1), 33)]);
    assert_eq!(c.job(1).unwrap().start, Some(33));
    assert_eq!(c.job(1).unwrap().steps.iter().find(|s| s.id == BATCH_STEP).unwrap().start, 33);
    assert_eq!(c.take_dirty().jobs.iter().map(|j| j.start).collect::<Vec<_>>(), [Some(33)]);
    // Once a run: a second report (a bug, or a node that lies) moves nothing.
    c.runs_started(41, "n0", &[(batch_key(1), 41)]);
    assert_eq!(c.job(1).unwrap().start, Some(33));
    // The ordinary launch, within LATE_START_S of the decision, is not written again.
    let mut quick = cluster(1, 0);
    quick.submit(0, spec(1), &batch(&["-t", "5"]), "a").unwrap();
    quick.tick(10);
    quick.take_dirty();
    quick.runs_started(12, "n0", &[(batch_key(1), 11)]);
    assert_eq!(quick.job(1).unwrap().start, Some(10));
    assert!(quick.take_dirty().jobs.is_empty(), "a start a second after the decision is not saved again");
    // Its two minutes count from there: no signal at 10 + 120, the end at 33 + 120.
    let term = |o: &Vec<Order>| o.contains(&Order::Signal { job: 1, epoch: 1, signal: 15, batch_only: false, step: None });
    for t in [20, 40, 60, 80, 100, 120, 131, 150] {
        c.tick(t);
        assert!(!term(&c.hb(t, "n0", &[batch_key(1)], &[]).unwrap()), "at {t}");
    }
    c.tick(161);
    assert!(term(&c.hb(161, "n0", &[batch_key(1)], &[]).unwrap()));
}

#[test]
fn time_limit_signals_then_kills_then_times_out() {
    let mut c = cluster(1, 0);
    let mut s = spec(1);
    s.signal = Some((10, 60, false));
    c.submit(0, s, &batch(&["-t", "2"]), "a").unwrap();
    c.tick(0);
    c.hb(0, "n0", &[], &[]).unwrap();
    for t in [20, 40] {
        c.hb(t, "n0", &[], &[]).unwrap();
        c.tick(t);
    }
    c.hb(59, "n0", &[], &[]).unwrap();
    c.tick(60);
    assert!(c.hb(60, "n0", &[], &[]).unwrap().contains(&Order::Signal { job: 1, epoch: 1, signal: 10, batch_only: false, step: None }));
    c.hb(90, "n0", &[], &[]).unwrap();
    c.tick(120);
    assert!(c.hb(120, "n0", &[], &[]).unwrap().contains(&Order::Signal { job: 1, epoch: 1, signal: 15, batch_only: false, step: None }));
    c.tick(150);
    assert!(c.hb(150, "n0", &[], &[]).unwrap().contains(&Order::Kill { job: 1, epoch: 1 }));
    let exit = ended(1, 1, None, Some(9));
    c.hb(151, "n0", &[], &[exit]).unwrap();
    assert_eq!(c.job(1).unwrap().state, JobState::Timeout);
}

#[test]
fn a_lapsed_lease_requeues_and_old_reports_are_ignored() {
    let mut c = cluster(2, 0);
    c.submit(0, spec(1), &batch(&["-c4"]), "a").unwrap();
    let mut s2 = spec(1);
    s2.requeue = false;
    c.submit(0, s2, &batch(&["-c4"]), "a").unwrap();
    c.tick(0);
    let on: Vec<String> = [1, 2].iter().map(|&id| c.job(id).unwrap().allocs[0].0.clone()).collect();
    assert_ne!(on[0], on[1], "one job per node");
    // n0 falls silent; n1 keeps beating.
    let dead = on[0].clone();
    let live = if dead == "n0" { "n1" } else { "n0" };
    c.hb(20, live, &[], &[]).unwrap();
    let info = c.tick(31);
    assert_eq!(info.nodes_down, 1);
    let victim = if on[0] == dead { 1 } else { 2 };
    let j = c.job(victim).unwrap();
    if victim == 1 {
        assert_eq!((j.state, j.restart_count), (JobState::Pending, 1));
    } else {
        assert_eq!(j.state, JobState::NodeFail);
    }
    // The daemon is given what to log: the node, why, and what became of its job.
    let (requeued, gone) = if victim == 1 { (vec![1], vec![]) } else { (vec![], vec![2]) };
    let want = crate::Event::NodeDown { node: dead.clone(), reason: "not responding (lease expired)".into(), requeued, ended: gone };
    assert_eq!(c.take_events(), vec![want.clone()]);
    let line = want.to_string();
    assert!(line.starts_with(&format!("node {dead} down: not responding (lease expired); 1 job(s) ")), "{line}");
    assert!(c.take_events().is_empty(), "taken once");
    // The dead node comes back and reports the old run: it is told to kill it.
    let old = TaskKey { job: victim, epoch: 1, step: BATCH_STEP, rank: 0 };
    let orders = c.hb(40, &dead, &[old], &[ended(victim, 1, Some(0), None)]).unwrap();
    assert!(orders.contains(&Order::Kill { job: victim, epoch: 1 }));
    assert_ne!(c.job(victim).unwrap().state, JobState::Completed, "a report from the old run changes nothing");
}

#[test]
fn restore_renews_leases_and_keeps_running_jobs() {
    let mut c = cluster(1, 0);
    c.submit(0, spec(1), &batch(&[]), "a").unwrap();
    c.tick(0);
    let _ = c.take_dirty();
    let jobs: Vec<Job> = c.jobs().map(|j| j.into_owned()).collect();
    let nodes: Vec<NodeRec> = c.nodes().to_vec();
    // The controller was down from t=0 to t=25 (lease 30): nothing is judged lapsed.
    let mut r = Controller::restore(Settings::default(), jobs, nodes, Vec::new(), 2, 25, 2);
    let info = r.tick(26);
    assert_eq!(info.nodes_down, 0);
    assert_eq!(r.job(1).unwrap().state, JobState::Running);
    assert_eq!(r.nodes()[0].usage.jobs, 1, "usage rebuilt from allocations");
    let id = r.submit(26, spec(1), &batch(&[]), "a").unwrap();
    assert_eq!(id, vec![2], "ids continue");
}

#[test]
fn a_submission_made_again_with_its_key_is_answered_with_its_jobs_for_a_day_across_a_restart() {
    let mut c = cluster(1, 0);
    let (a, _) = c.accept_once(10, spec(1), &batch(&[]), "alice", Some("k1")).unwrap();
    assert_eq!(c.accept_once(11, spec(1), &batch(&[]), "alice", Some("k1")).unwrap(), (a.clone(), true));
    // Another user's same key, and no key at all, are submissions of their own.
    let (b, again) = c.accept_once(12, spec(2), &batch(&[]), "bob", Some("k1")).unwrap();
    assert!(!again && b != a);
    assert!(!c.accept_once(12, spec(1), &batch(&[]), "alice", None).unwrap().1);
    // An array answers with all its tasks' ids.
    let (arr, _) = c.accept_once(13, spec(1), &batch(&["--array=0-3"]), "alice", Some("k2")).unwrap();
    assert_eq!(arr.len(), 4);
    c.expand();
    let d = c.take_dirty();
    // A refused submission remembers nothing.
    assert!(c.accept_once(14, spec(1), &batch(&["-p", "nope"]), "alice", Some("k3")).is_err());
    // Restored from what was stored (a restart, a standby taking over): the keys hold.
    let mut jobs: Vec<Job> = d.jobs.clone();
    jobs.sort_by_key(|j| j.req.id.0);
    let mut r = Controller::restore(Settings::default(), jobs, c.nodes().to_vec(), Vec::new(), d.next_id.unwrap(), 100, 2);
    r.restore_arrays(d.arrays.clone(), &d.jobs.iter().map(|j| j.req.id.0).collect(), 100);
    assert_eq!(r.accept_once(100, spec(1), &batch(&[]), "alice", Some("k1")).unwrap(), (a.clone(), true));
    assert_eq!(r.accept_once(100, spec(1), &batch(&["--array=0-3"]), "alice", Some("k2")).unwrap(), (arr, true));
    // A day later the key is forgotten.
    let (late, again) = r.accept_once(10 + IDEMPOTENCY_RETENTION + 1, spec(1), &batch(&[]), "alice", Some("k1")).unwrap();
    assert!(!again && late != a);
}

#[test]
fn a_restored_backups_unfinished_jobs_are_held_or_settled_by_their_agent_never_run_again() {
    let mut c = cluster(1, 0);
    // 1 and 2 run (2 without --requeue), 3 waits (held by its user), 4 waits, 5 is over.
    c.submit(0, spec(1), &batch(&["-c1"]), "a").unwrap();
    c.submit(0, JobSpec { requeue: false, ..spec(1) }, &batch(&["-c1"]), "a").unwrap();
    c.submit(0, spec(1), &batch(&["-c1", "--hold"]), "a").unwrap();
    c.submit(0, spec(1), &batch(&["-c4"]), "a").unwrap();
    c.submit(0, spec(1), &batch(&["-c1"]), "a").unwrap();
    c.tick(0);
    let first = c.heartbeat(0, "n0", 0, &[], &[]).unwrap();
    let acked = first.iter().map(|(s, _)| *s).max().unwrap();
    let running = [TaskKey { job: 1, epoch: 1, step: BATCH_STEP, rank: 0 }, TaskKey { job: 2, epoch: 1, step: BATCH_STEP, rank: 0 }];
    c.heartbeat(1, "n0", acked, &running, &[ended(5, 1, Some(0), None)]).unwrap();
    assert_eq!((c.job(1).unwrap().state, c.job(2).unwrap().state), (JobState::Running, JobState::Running));
    assert_eq!(c.job(5).unwrap().state, JobState::Completed);
    let _ = c.take_dirty();
    let mut jobs: Vec<Job> = c.jobs().map(|j| j.into_owned()).collect();
    let nodes: Vec<NodeRec> = c.nodes().to_vec();
    let (marked, arrays) = crate::mark_restored(&mut jobs, &mut []);
    assert_eq!((marked, arrays), (vec![1, 2, 3, 4], vec![]), "the unfinished ones");
    let mut r = Controller::restore(Settings::default(), jobs, nodes, Vec::new(), 6, 10, 1 << 16);
    // No launch is sent again for a restored run (it may have run and ended since).
    let orders = r.heartbeat(10, "n0", 0, &[], &[]).unwrap();
    assert!(launches(&orders.iter().map(|(_, o)| o.clone()).collect::<Vec<_>>()).is_empty(), "{orders:?}");
    // The agent registers: job 1 still runs there (settled); job 2 is gone (ended after the
    // backup, forgotten): held, though it may not be requeued.
    let one = TaskKey { job: 1, epoch: 1, step: BATCH_STEP, rank: 0 };
    r.register_with(11, Node::new("n0", 4, 8 << 30, 0), "127.0.0.1".into(), &[one], &[]).unwrap();
    let j1 = r.job(1).unwrap();
    assert_eq!(j1.state, JobState::Running, "runs on where its agent has it");
    let j2 = r.job(2).unwrap();
    assert_eq!((j2.state, j2.req.held, j2.reason), (JobState::Pending, true, PendingReason::Restored));
    for id in [3, 4] {
        let j = r.job(id).unwrap();
        assert_eq!((j.state, j.req.held, j.reason), (JobState::Pending, true, PendingReason::Restored), "job {id}");
    }
    // Passes keep them held and say why.
    r.tick(12);
    r.tick(13);
    for id in [2, 3, 4] {
        assert_eq!(r.job(id).unwrap().reason, PendingReason::Restored, "job {id}");
        assert_eq!(r.job(id).unwrap().state, JobState::Pending, "job {id}");
    }
    // Its owner may not release it; an operator's release runs it (again: the operator's
    // call), the mark going with it, at a run number past any it may have had.
    assert!(matches!(r.hold(1, 3, false), Err(Refused::Forbidden(_))));
    r.hold(0, 3, false).unwrap();
    assert!(!r.job(3).unwrap().restored);
    r.tick(14);
    assert_eq!((r.job(3).unwrap().state, r.job(3).unwrap().epoch), (JobState::Running, 1 + crate::RESTORE_EPOCH_STEP));
}

#[test]
fn steps_lay_out_tasks_with_disjoint_gpus() {
    let mut c = cluster(2, 4);
    c.submit(0, spec(1), &batch(&["-N2", "--ntasks-per-node=2", "--gpus-per-node=4"]), "a").unwrap();
    c.tick(0);
    c.hb(0, "n0", &[], &[]).unwrap();
    let step = c.create_step(1, 1, 1, None, None, None, vec!["env".into()], StepSpec::default()).unwrap();
    assert_eq!(step, 0);
    let mut all = launches(&c.hb(1, "n0", &[], &[]).unwrap()).into_iter().cloned().collect::<Vec<_>>();
    all.extend(launches(&c.hb(1, "n1", &[], &[]).unwrap()).into_iter().cloned());
    assert_eq!(all.len(), 4);
    let ranks: Vec<u32> = all.iter().map(|t| t.rank).collect();
    assert_eq!(ranks, vec![0, 1, 2, 3]);
    assert_eq!(all[0].gpus, vec![0, 1]);
    assert_eq!(all[1].gpus, vec![2, 3]);
    let env: HashMap<_, _> = all[3].env.iter().cloned().collect();
    assert_eq!((env["SLURM_PROCID"].as_str(), env["SLURM_LOCALID"].as_str(), env["SLURM_NODEID"].as_str()), ("3", "1", "1"));
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], "2,3");
    assert!(matches!(c.create_step(1, 2, 1, None, None, None, vec!["x".into()], StepSpec::default()), Err(Refused::Forbidden(_))));
    assert!(c.create_step(1, 1, 1, Some(3), None, None, vec!["x".into()], StepSpec::default()).is_err());
    // A step's own settings, hostile or malformed, are refused with what is wrong.
    assert!(matches!(
        c.create_step(1, 1, 1, None, None, None, vec!["a\0b".into()], StepSpec::default()),
        Err(Refused::Invalid(why)) if why.contains("NUL")
    ));
    let all: Vec<String> = c.job(1).unwrap().allocs.iter().map(|(n, _)| n.clone()).collect();
    let mut bad = |spec: StepSpec| match c.create_step(1, 1, 1, None, None, None, vec!["x".into()], spec) {
        Err(Refused::Invalid(why)) => why,
        other => panic!("accepted: {other:?}"),
    };
    let env = |k: &str, v: &str| StepSpec { env: Some(vec![(k.into(), v.into())]), ..StepSpec::default() };
    assert!(bad(env("A=B", "x")).contains("invalid environment variable name"));
    assert!(bad(env("", "x")).contains("invalid environment variable name"));
    assert!(bad(env("A", "x\0y")).contains("invalid environment variable name"));
    assert!(bad(StepSpec { workdir: Some("relative".into()), ..StepSpec::default() }).contains("must be absolute"));
    assert!(bad(StepSpec { output: Some("a\nb".into()), ..StepSpec::default() }).contains("invalid output"));
    assert!(bad(StepSpec { name: Some(String::new()), ..StepSpec::default() }).contains("invalid name"));
    assert!(bad(StepSpec { nodelist: vec!["elsewhere".into()], ..StepSpec::default() }).contains("not in this job's allocation"));
    assert!(bad(StepSpec { exclude: all, ..StepSpec::default() }).contains("leave no node"));
    let huge = StepSpec { env: Some((0..10_001).map(|i| (format!("V{i}"), String::new())).collect()), ..StepSpec::default() };
    assert!(bad(huge).contains("too large"));
}

#[test]
fn arrays_respect_their_limit_and_dependencies_wait() {
    let mut c = cluster(4, 0);
    let ids = c.submit(0, spec(1), &batch(&["--array=0-3%2"]), "a").unwrap();
    assert_eq!(ids, vec![1, 2, 3, 4]);
    c.tick(0);
    let running = c.jobs().filter(|j| j.state == JobState::Running).count();
    assert_eq!(running, 2);
    assert_eq!(c.job(4).unwrap().reason, PendingReason::JobArrayTaskLimit);
    let dep = c.submit(0, spec(1), &batch(&["--dependency=afterok:1"]), "a").unwrap()[0];
    c.tick(1);
    assert_eq!(c.job(dep).unwrap().reason, PendingReason::Dependency);
    let exit = ended(1, 1, Some(3), None);
    let node = c.job(1).unwrap().allocs[0].0.clone();
    c.hb(2, &node, &[], &[exit]).unwrap();
    assert_eq!(c.job(1).unwrap().state, JobState::Failed);
    c.tick(3);
    assert_eq!(c.job(dep).unwrap().reason, PendingReason::DependencyNeverSatisfied);
}

#[test]
fn max_array_size_bounds_the_largest_index_as_in_slurm() {
    let mut c = cluster(1, 0);
    let e = c.submit(0, spec(1), &batch(&["--array=1001"]), "a").unwrap_err();
    assert!(e.to_string().contains("MaxArraySize 1001"), "{e}");
    assert_eq!(c.jobs().count(), 0, "nothing stored");
    assert_eq!(c.submit(0, spec(1), &batch(&["--array=1000"]), "a").unwrap().len(), 1);
    let mut s = Settings::default();
    s.max_array = 10_001;
    let mut c = Controller::new(s);
    c.register(0, Node::new("n0", 4, 8 << 30, 0), "127.0.0.1".into()).unwrap();
    assert_eq!(c.submit(0, spec(1), &batch(&["--array=0-9999"]), "a").unwrap().len(), 10_000);
    assert!(c.submit(0, spec(1), &batch(&["--array=10001"]), "a").is_err());
}

#[test]
fn max_script_size_bounds_the_batch_script_and_the_umask_reaches_the_task() {
    let mut s = Settings::default();
    s.max_script_size = 100;
    let mut c = Controller::new(s);
    c.register(0, Node::new("n0", 4, 8 << 30, 0), "127.0.0.1".into()).unwrap();
    let mut b = batch(&[]);
    b.script = format!("#!/bin/sh\n{}\n", "#".repeat(100));
    let e = c.submit(0, spec(1), &b, "a").unwrap_err().to_string();
    assert!(e.contains("111 bytes") && e.contains("100 bytes") && e.contains("max_script_size"), "{e}");
    assert!(c.check_submit(0, &b, 0, "a").is_err(), "--test-only says the same");
    assert_eq!(c.jobs().count(), 0, "nothing stored");
    // Under it: runs, with its submitter's umask; an older body (no umask) gets 0022.
    for (umask, want) in [(Some(0o077), "0077"), (None, "0022")] {
        let id = c.submit(0, JobSpec { umask, ..spec(1) }, &batch(&[]), "a").unwrap()[0];
        c.tick(1);
        let orders = c.hb(1, "n0", &[], &[]).unwrap();
        let t = launches(&orders).into_iter().find(|t| t.job == id).expect("launched").clone();
        assert_eq!(t.umask, Some(umask.unwrap_or(0o022)));
        assert!(t.env.contains(&("SLURM_UMASK".into(), want.into())), "{:?}", t.env);
    }
}

#[test]
fn an_array_record_holds_its_indices_as_runs() {
    let mut c = cluster(1, 0);
    for (arg, runs) in [("0-9", 1), ("1,3,5-7", 2), ("0-15:4%2", 1), ("0,3,6,7,9", 2), ("5", 1), ("2,900", 1)] {
        let want = slurmcli::parse_array(arg).unwrap().indices;
        let ids = c.submit(0, spec(1), &batch(&[&format!("--array={arg}")]), "a").unwrap();
        let d = c.take_dirty();
        assert!(d.jobs.is_empty(), "{arg}: the tasks have no records of their own yet");
        let rec = &d.arrays[0];
        assert_eq!(rec.indices().collect::<Vec<_>>(), want, "{arg}");
        assert_eq!(rec.runs.len(), runs, "{arg}: {:?}", rec.runs);
        let tasks: Vec<u32> = ids.iter().map(|id| c.job(*id).unwrap().array.unwrap().task).collect();
        assert_eq!(tasks, want, "{arg}: task k has the k-th index");
        assert!(ids.iter().all(|id| std::sync::Arc::ptr_eq(&c.job(*id).unwrap().spec, &c.job(ids[0]).unwrap().spec)));
    }
}

#[test]
fn submissions_with_the_same_spec_share_one_copy() {
    let mut c = cluster(1, 0);
    let a = c.submit(0, spec(1), &batch(&[]), "a").unwrap()[0];
    let other = c.submit(0, JobSpec { script: "#!/bin/sh\nfalse\n".into(), ..spec(1) }, &batch(&[]), "a").unwrap()[0];
    let b = c.submit(0, spec(1), &batch(&[]), "a").unwrap()[0];
    let same = |x: u64, y: u64| std::sync::Arc::ptr_eq(&c.job(x).unwrap().spec, &c.job(y).unwrap().spec);
    assert!(same(a, b), "a loop of identical submissions keeps one spec");
    assert!(!same(a, other));
    assert_eq!(c.job(other).unwrap().spec.script, "#!/bin/sh\nfalse\n");
    // After a restart too.
    let jobs: Vec<Job> = c.jobs().map(|j| Job { spec: std::sync::Arc::new((*j.spec).clone()), ..j.into_owned() }).collect();
    let r = Controller::restore(Settings::default(), jobs, c.nodes().to_vec(), Vec::new(), 10, 1, 2);
    assert!(std::sync::Arc::ptr_eq(&r.job(a).unwrap().spec, &r.job(b).unwrap().spec));
}

#[test]
fn an_accepted_array_is_durable_at_once_and_its_tasks_come_with_expand() {
    let mut c = cluster(1, 0);
    let ids = c.accept(0, spec(1), &batch(&["--array=0-99"]), "a").unwrap();
    assert_eq!(ids, (1..=100).collect::<Vec<u64>>());
    let d = c.take_dirty();
    assert_eq!((d.arrays.len(), d.jobs.len(), d.next_id), (1, 0, Some(101)), "one record and the next id");
    c.expand();
    assert_eq!(c.jobs().count(), 100);
    assert_eq!(c.job(ids[99]).unwrap().array.unwrap().task, 99);
    c.expand();
    assert_eq!(c.jobs().count(), 100, "expanding twice adds nothing");
    assert!(c.take_dirty().is_empty(), "expanding writes nothing");
}

#[test]
fn an_array_accepted_after_a_pass_is_scheduled_by_the_next_one() {
    let mut c = cluster(2, 0);
    c.submit(0, spec(1), &batch(&[]), "a").unwrap();
    c.tick(0); // the scheduler's mirror now exists: later passes take changes only
    let ids = c.accept(1, spec(1), &batch(&["--array=0-3"]), "a").unwrap();
    c.take_dirty();
    c.expand();
    let held = c.submit(1, spec(1), &batch(&["--hold"]), "a").unwrap()[0];
    c.tick(1);
    assert!(ids.iter().all(|id| c.job(*id).unwrap().state == JobState::Running), "expanded tasks reach the scheduler");
    assert_eq!(c.job(held).unwrap().reason, PendingReason::JobHeldUser);
    c.hold(1, held, false).unwrap();
    c.tick(2);
    assert_eq!(c.job(held).unwrap().state, JobState::Running, "a released job is scheduled");
}

#[test]
fn hand_made_array_specs_are_refused_not_trusted() {
    let mut c = cluster(1, 0);
    for (indices, max_running) in [(vec![], None), (vec![3, 1], None), (vec![1, 1], None), (vec![1, 2], Some(0))] {
        let mut b = batch(&["--array=1"]);
        b.array = Some(slurmcli::ArraySpec { indices: indices.clone(), max_running });
        let e = c.submit(0, spec(1), &b, "a").unwrap_err();
        assert!(e.to_string().contains("invalid job array specification"), "{indices:?}: {e}");
    }
    assert_eq!(c.jobs().count(), 0, "nothing stored");
}

#[test]
fn orders_are_resent_until_acknowledged() {
    let mut c = cluster(1, 0);
    c.submit(0, spec(1), &batch(&[]), "a").unwrap();
    c.tick(0);
    let first = c.heartbeat(0, "n0", 0, &[], &[]).unwrap();
    assert_eq!(first.len(), 1);
    // The reply was lost: the next heartbeat (acknowledging nothing) gets the launch again.
    let again = c.heartbeat(1, "n0", 0, &[], &[]).unwrap();
    assert_eq!(again, first);
    let task = TaskKey { job: 1, epoch: 1, step: BATCH_STEP, rank: 0 };
    let acked = c.heartbeat(2, "n0", first[0].0, &[task], &[]).unwrap();
    assert!(acked.is_empty());
}

#[test]
fn remembered_submission_checks_follow_node_changes() {
    // One node of 8 GiB: a 16 GiB job is refused, and the refusal is remembered per shape...
    let mut c = cluster(1, 0);
    let big = batch(&["--mem", "16G"]);
    let e = c.submit(0, spec(1), &big, "u").unwrap_err();
    assert!(e.to_string().contains("not available"), "{e}");
    assert_eq!(c.submit(0, spec(1), &big, "u").unwrap_err(), e);
    assert_eq!(c.submit(0, spec(1), &batch(&["-c", "2"]), "u").unwrap().len(), 1);
    // ...until the nodes change: a bigger node joins and the same shape is accepted and runs there.
    c.register(0, Node::new("big", 16, 32 << 30, 0), "127.0.0.9".into()).unwrap();
    let no_requeue = JobSpec { requeue: false, ..spec(1) };
    let ids = c.submit(0, no_requeue, &big, "u").unwrap();
    c.tick(1);
    assert_eq!(c.job(ids[0]).unwrap().state, JobState::Running);
    assert_eq!(c.job(ids[0]).unwrap().allocs[0].0, "big");
    // A node that goes down is no longer offered to the scheduler (its cached definition is rebuilt).
    let lease = c.settings().lease;
    c.hb(1, "n0", &[], &[]).unwrap();
    c.tick(lease + 5);
    assert_eq!(c.nodes().iter().find(|n| n.node.name == "big").unwrap().node.state, NodeState::Down);
    let more = c.submit(lease + 5, spec(1), &batch(&["-c", "2"]), "u").unwrap();
    c.hb(lease + 5, "n0", &[], &[]).unwrap();
    c.tick(lease + 6);
    assert_eq!(c.job(ids[0]).unwrap().state, JobState::NodeFail);
    let j = c.job(more[0]).unwrap();
    assert_eq!((j.state, j.allocs.first().map(|a| a.0.as_str())), (JobState::Running, Some("n0")));
}

#[test]
fn a_requeued_finished_job_is_scheduled_again() {
    // Ended jobs fall below the low-water mark of the per-tick scans; `scontrol requeue` of an
    // ended job must bring it back into them.
    let mut c = cluster(1, 0);
    let a = c.submit(0, spec(0), &batch(&[]), "root").unwrap()[0];
    let b = c.submit(0, spec(0), &batch(&[]), "root").unwrap()[0];
    c.tick(1);
    for id in [a, b] {
        assert_eq!(c.job(id).unwrap().state, JobState::Running);
    }
    let exit = |id: u64, epoch: u32| ended(id, epoch, Some(0), None);
    c.hb(2, "n0", &[], &[exit(a, 1), exit(b, 1)]).unwrap();
    c.tick(3);
    assert_eq!((c.job(a).unwrap().state, c.job(b).unwrap().state), (JobState::Completed, JobState::Completed));
    c.requeue(0, a).unwrap();
    assert_eq!(c.job(a).unwrap().state, JobState::Pending);
    c.tick(4);
    let j = c.job(a).unwrap();
    assert_eq!((j.state, j.epoch, j.restart_count), (JobState::Running, 2, 1));
}

#[test]
fn failed_runs_run_again_up_to_the_limit_then_the_array_is_cancelled() {
    // A Kubernetes Job's backoffLimit: an array's failures counted together.
    let mut c = cluster(1, 0);
    let mut s = spec(1);
    s.retries = Some(2);
    let ids = c.submit(0, s, &batch(&["--array=0-2%1"]), "a").unwrap();
    let first = ids[0];
    c.tick(1);
    let fail = |c: &mut Controller, t: i64, id: u64| {
        let epoch = c.job(id).unwrap().epoch;
        c.hb(t, "n0", &[], &[ended(id, epoch, Some(3), None)]).unwrap();
        c.tick(t + 1);
    };
    assert_eq!(c.job(first).unwrap().state, JobState::Running);
    fail(&mut c, 2, first);
    let j = c.job(first).unwrap();
    assert_eq!((j.state, j.failed_runs, j.restart_count), (JobState::Running, 1, 1), "run again: {:?}", j.message);
    // Success ends a task as always.
    let epoch = j.epoch;
    c.hb(4, "n0", &[], &[ended(first, epoch, Some(0), None)]).unwrap();
    c.tick(5);
    assert_eq!(c.job(first).unwrap().state, JobState::Completed);
    let second = c.jobs().find(|j| j.array.is_some_and(|a| a.task == 1)).unwrap().req.id.0;
    assert_eq!(c.job(second).unwrap().state, JobState::Running);
    fail(&mut c, 6, second);
    assert_eq!(c.job(second).unwrap().failed_runs, 1, "the second failure of the array");
    // The third failure is past the limit of 2: the task fails and the rest is cancelled.
    fail(&mut c, 8, second);
    assert_eq!(c.job(second).unwrap().state, JobState::Failed);
    let third = c.jobs_from_where(0, false, |_| true).first_of_tails(false).find(|j| j.array.is_some_and(|a| a.task == 2)).map(|j| j.state);
    assert_eq!(third, Some(JobState::Cancelled));
    // Without retries (sbatch's), a failure ends the job.
    let plain = c.submit(10, spec(1), &batch(&[]), "a").unwrap()[0];
    c.tick(11);
    fail(&mut c, 12, plain);
    assert_eq!(c.job(plain).unwrap().state, JobState::Failed);
}

#[test]
fn a_deleted_jobs_tombstone_frees_its_name_and_goes_when_its_job_leaves_memory() {
    let mut c = cluster(1, 0);
    let id = c.submit(0, spec(1), &batch(&[]), "a").unwrap()[0];
    c.tick(1);
    let o = kube::KubeObject {
        kind: "Job".into(),
        namespace: "default".into(),
        name: "pi".into(),
        uid: 1,
        created: 0,
        data: serde_json::json!({"job": id}),
    };
    let key = o.key();
    c.put_kube_object(1, o.clone()).unwrap();
    assert!(matches!(c.bury_kube_job(2, &key), Err(Refused::Forbidden(_))), "only its owner");
    c.bury_kube_job(1, &key).unwrap();
    assert!(c.kube_object(&key).is_none(), "the name is free");
    let tomb = ("Job".to_string(), "default".to_string(), format!("pi#{id}"));
    assert!(c.kube_object(&tomb).is_some_and(|t| t.buried()));
    assert!(matches!(c.bury_kube_job(1, &key), Err(Refused::NotFound(_))));
    // Another user may take the name at once.
    c.put_kube_object(2, kube::KubeObject { uid: 2, ..o }).unwrap();
    // The job ends and leaves memory: its tombstone goes with it.
    let epoch = c.job(id).unwrap().epoch;
    c.hb(2, "n0", &[], &[ended(id, epoch, Some(0), None)]).unwrap();
    c.tick(100);
    assert!(c.kube_object(&tomb).is_some(), "its job is still in memory");
    c.tick(400);
    assert!(c.job(id).is_none() && c.kube_object(&tomb).is_none());
    assert_eq!(c.kube_object(&key).map(|o| o.uid), Some(2));
}

#[test]
fn a_job_with_a_ttl_after_finished_is_deleted_that_long_after_its_job_ended() {
    let mut c = cluster(1, 0);
    let ids = c.submit(0, spec(1), &batch(&["--array=0-1"]), "a").unwrap();
    c.tick(1);
    let o = |name: &str, ttl: Option<i64>| kube::KubeObject {
        kind: "Job".into(),
        namespace: "default".into(),
        name: name.into(),
        uid: 1,
        created: 0,
        data: serde_json::json!({"job": ids[0], "spec": {"completions": 2, "ttlSecondsAfterFinished": ttl}}),
    };
    c.put_kube_object(1, o("ttl", Some(10))).unwrap();
    c.put_kube_object(1, o("kept", None)).unwrap();
    let key = |n: &str| ("Job".to_string(), "default".to_string(), n.to_string());
    assert_eq!(kube::KubeObject::job_ids(c.kube_object(&key("ttl")).unwrap()), ids[0]..ids[0] + 2);
    // One task ended: not finished yet.
    let first = c.jobs().find(|j| j.array.is_some_and(|a| a.task == 0)).unwrap().req.id.0;
    c.hb(5, "n0", &[], &[ended(first, 1, Some(0), None)]).unwrap();
    c.tick(30);
    assert!(c.kube_object(&key("ttl")).is_some());
    let second = c.jobs().find(|j| j.array.is_some_and(|a| a.task == 1)).unwrap().req.id.0;
    let epoch = c.job(second).unwrap().epoch;
    c.hb(31, "n0", &[], &[ended(second, epoch, Some(1), None)]).unwrap();
    c.tick(40);
    assert!(c.kube_object(&key("ttl")).is_some(), "9 s after its end");
    c.tick(41);
    assert!(c.kube_object(&key("ttl")).is_none(), "10 s after its end: deleted");
    assert!(c.kube_objects("Job").any(|o| o.buried() && o.name.starts_with("ttl#")), "its job hidden until it leaves memory");
    assert!(c.kube_object(&key("kept")).is_some(), "no TTL: kept");
}

#[test]
fn finished_jobs_leave_memory_after_min_job_age_unless_a_job_waits_on_them() {
    let mut c = cluster(1, 0);
    let a = c.submit(0, spec(1), &batch(&[]), "a").unwrap()[0];
    let b = c.submit(0, spec(1), &batch(&[]), "a").unwrap()[0];
    c.tick(1);
    c.hb(1, "n0", &[], &[]).unwrap();
    let done = |id| ended(id, 1, Some(0), None);
    c.hb(5, "n0", &[], &[done(a), done(b)]).unwrap();
    // A job that waits on b keeps b in memory; a goes once MinJobAge (300 s) has passed.
    let waits = c.submit(6, spec(1), &batch(&["--dependency=afterok:2", "--begin=now+3600"]), "a").unwrap()[0];
    c.tick(200);
    assert!(c.job(a).is_some(), "not yet");
    c.tick(400);
    assert!(c.job(a).is_none(), "purged from memory");
    assert!(c.job(b).is_some(), "a pending job depends on it");
    assert_eq!(c.job(waits).unwrap().state, JobState::Pending);
    // Restored controllers do not load old finished jobs either.
    let jobs: Vec<Job> = c.jobs().map(|j| j.into_owned()).collect();
    let r = Controller::restore(Settings::default(), jobs, c.nodes().to_vec(), Vec::new(), 10, 10_000, 2);
    assert!(r.job(b).is_none() && r.job(waits).is_some());
}

#[test]
fn a_deleted_node_is_gone_and_a_busy_one_cannot_be_deleted() {
    let mut c = cluster(2, 0);
    c.join(0, "j0", 100, "n0").unwrap();
    c.submit(0, spec(1000), &batch(&["-n1"]), "alice").unwrap();
    assert_eq!(c.tick(1).started, 1);
    let busy = if c.nodes()[0].usage.jobs > 0 { "n0" } else { "n1" };
    let idle = if busy == "n0" { "n1" } else { "n0" };
    let e = c.delete_node(busy).unwrap_err();
    assert!(matches!(&e, Refused::Conflict(m) if m.contains("running jobs (1)")), "{e:?}");
    let _ = c.take_dirty();
    c.delete_node(idle).unwrap();
    let d = c.take_dirty();
    assert_eq!(d.removed_nodes, vec![idle.to_string()]);
    assert!(d.nodes.iter().all(|n| n.node.name != idle), "no record of it is written again");
    assert!(matches!(c.heartbeat(2, idle, 0, &[], &[]), Err(Refused::NotFound(_))), "its agent is not heard");
    assert!(matches!(c.delete_node(idle), Err(Refused::NotFound(_))), "deleted once");
    // Work that fits only two nodes now fits none: the slot is empty.
    assert!(c.submit(2, spec(1000), &batch(&["-N2"]), "alice").is_err());
    // The name may join and register again, as a new node.
    if idle == "n0" {
        assert!(!c.credentials().held(creds::Holder::Node, "n0"), "its credential was revoked");
    }
    c.join(3, "j1", 100, idle).unwrap();
    c.register(3, Node::new(idle, 4, 8 << 30, 0), "127.0.0.9".into()).unwrap();
    assert_eq!(c.submit(3, spec(1000), &batch(&["-N2"]), "alice").unwrap().len(), 1);
}

#[test]
fn a_heartbeat_that_reaches_the_controller_after_a_later_one_loses_no_run() {
    // The agent gave up on a long poll (a task ended meanwhile) and its request reached the
    // controller only after the next ones: its list, from before the launch, must not lose the
    // run the later heartbeat acknowledged.
    let mut c = cluster(1, 0);
    c.submit(0, spec(1), &batch(&["-c1"]), "a").unwrap();
    c.tick(0);
    let orders = c.heartbeat(0, "n0", 0, &[], &[]).unwrap();
    let launch = orders.iter().filter(|(_, o)| matches!(o, Order::Launch(t) if t.job == 1)).map(|(s, _)| *s).max().unwrap();
    let one = TaskKey { job: 1, epoch: 1, step: BATCH_STEP, rank: 0 };
    c.heartbeat(1, "n0", launch, &[one], &[]).unwrap();
    // The old report: acknowledging less, listing nothing.
    c.heartbeat(1, "n0", launch - 1, &[], &[]).unwrap();
    let j = c.job(1).unwrap();
    assert_eq!((j.state, j.restart_count), (JobState::Running, 0), "{:?}", j.message);
    // A current report without it still loses it (the agent restarted without it).
    c.heartbeat(2, "n0", launch, &[], &[]).unwrap();
    assert_eq!(c.job(1).unwrap().restart_count, 1);
}

#[test]
fn an_agent_that_registers_again_without_its_tasks_loses_their_runs_at_once() {
    let mut c = cluster(1, 0);
    c.submit(0, spec(1), &batch(&["-c1"]), "a").unwrap();
    c.submit(0, JobSpec { requeue: false, ..spec(1) }, &batch(&["-c1"]), "a").unwrap();
    c.submit(0, spec(1), &batch(&["-c1"]), "a").unwrap();
    c.tick(0);
    // Jobs 1 and 2 were delivered; the agent restarts before it gets job 3's launch.
    let first = c.heartbeat(0, "n0", 0, &[], &[]).unwrap();
    let two = first.iter().filter(|(_, o)| matches!(o, Order::Launch(t) if t.job <= 2)).map(|(s, _)| *s).max().unwrap();
    c.heartbeat(
        1,
        "n0",
        two,
        &[TaskKey { job: 1, epoch: 1, step: BATCH_STEP, rank: 0 }, TaskKey { job: 2, epoch: 1, step: BATCH_STEP, rank: 0 }],
        &[],
    )
    .unwrap();
    // Well within the lease: it registers again with nothing running.
    c.register_with(2, Node::new("n0", 4, 8 << 30, 0), "127.0.0.1".into(), &[], &[]).unwrap();
    let j1 = c.job(1).unwrap();
    assert_eq!((j1.state, j1.restart_count), (JobState::Pending, 1), "requeued");
    assert!(j1.message.as_deref().is_some_and(|m| m.contains("lost the batch script")), "{:?}", j1.message);
    assert_eq!(c.job(2).unwrap().state, JobState::NodeFail);
    assert_eq!(c.job(3).unwrap().state, JobState::Running, "its launch is still on the way");
    // What the lost runs held is free again: job 1 starts at the next pass.
    c.tick(3);
    let j1 = c.job(1).unwrap();
    assert_eq!((j1.state, j1.epoch), (JobState::Running, 2));
    // An adopted task is kept; a task of a run that is over is ordered killed.
    let three = TaskKey { job: 3, epoch: 1, step: BATCH_STEP, rank: 0 };
    let stale = TaskKey { job: 2, epoch: 1, step: BATCH_STEP, rank: 0 };
    c.heartbeat(4, "n0", u64::MAX, &[three], &[]).unwrap();
    c.register_with(5, Node::new("n0", 4, 8 << 30, 0), "127.0.0.1".into(), &[three, stale], &[]).unwrap();
    assert_eq!(c.job(3).unwrap().state, JobState::Running);
    let orders = c.heartbeat(6, "n0", 0, &[three], &[]).unwrap();
    assert!(orders.iter().any(|(_, o)| *o == Order::Kill { job: 2, epoch: 1 }), "{orders:?}");
}

#[test]
fn a_cancel_during_a_node_outage_is_final() {
    let mut c = cluster(2, 0);
    c.submit(0, spec(1), &batch(&["-c4"]), "a").unwrap();
    c.tick(0);
    let node = c.job(1).unwrap().allocs[0].0.clone();
    c.hb(0, &node, &[], &[]).unwrap();
    // The node goes silent; the job is cancelled meanwhile; the lease lapses.
    c.cancel(5, 1, 1, None).unwrap();
    let other = if node == "n0" { "n1" } else { "n0" };
    for t in [10, 20, 31, 40, 60] {
        c.hb(t, other, &[], &[]).unwrap();
        c.tick(t);
    }
    let j = c.job(1).unwrap();
    assert_eq!((j.state, j.restart_count, j.epoch), (JobState::Cancelled, 0, 1), "{j:?}");
    assert!(matches!(c.requeue(0, 1), Err(Refused::Conflict(_))), "a cancelled job is not run again");
    // The node comes back: the kill order waits for it, and the job stays cancelled.
    let orders = c.hb(61, &node, &[TaskKey { job: 1, epoch: 1, step: BATCH_STEP, rank: 0 }], &[]).unwrap();
    assert!(orders.contains(&Order::Kill { job: 1, epoch: 1 }), "{orders:?}");
    c.tick(62);
    assert_eq!(c.job(1).unwrap().state, JobState::Cancelled);
}

#[test]
fn a_restored_controller_sends_again_the_launches_of_running_steps_whose_ends_it_lacks() {
    // Found by `tandem bench chaos --seed 4`: a step's launch orders were lost with the old
    // controller process (orders are not persisted), so its srun waited for ever.
    let mut c = cluster(2, 0);
    c.submit(0, spec(1), &batch(&["-N2", "--ntasks-per-node=2"]), "a").unwrap();
    c.tick(0);
    let step = c.create_step(1, 1, 1, Some(2), Some(4), Some(2), vec!["hostname".into()], StepSpec::default()).unwrap();
    // Rank 0 ended and was reported; the rest were never delivered.
    let exit = TaskExit { step, ..ended(1, 1, Some(0), None) };
    let first = c.job(1).unwrap().allocs[0].0.clone();
    c.heartbeat(1, &first, 0, &[TaskKey { job: 1, epoch: 1, step: BATCH_STEP, rank: 0 }], &[exit]).unwrap();
    let _ = c.take_dirty();
    let jobs: Vec<Job> = c.jobs().map(|j| j.into_owned()).collect();
    let nodes: Vec<NodeRec> = c.nodes().to_vec();
    let r = Controller::restore(Settings::default(), jobs, nodes, Vec::new(), 2, 2, 2);
    let mut ranks: Vec<u32> = r
        .nodes()
        .iter()
        .flat_map(|n| n.orders.iter())
        .filter_map(|(_, o)| match o {
            Order::Launch(t) if t.step == step => Some(t.rank),
            _ => None,
        })
        .collect();
    ranks.sort();
    assert_eq!(ranks, vec![1, 2, 3], "every rank but the one that ended");
}

#[test]
fn a_running_job_requeued_by_its_user_goes_back_only_once_its_tasks_are_gone() {
    // Found by `tandem bench chaos --seed 5`: the job was requeued at once and started on
    // another node while its first run was still alive, until its kill order arrived.
    let mut c = cluster(2, 0);
    c.submit(0, spec(1), &batch(&["-c4"]), "a").unwrap();
    c.tick(0);
    let node = c.job(1).unwrap().allocs[0].0.clone();
    c.hb(0, &node, &[], &[]).unwrap();
    c.requeue(1, 1).unwrap();
    c.tick(1);
    let j = c.job(1).unwrap();
    assert_eq!((j.state, j.epoch), (JobState::Running, 1), "not started again yet");
    let orders = c.hb(1, &node, &[], &[]).unwrap();
    assert!(orders.contains(&Order::Kill { job: 1, epoch: 1 }), "{orders:?}");
    let exit = ended(1, 1, None, Some(9));
    c.hb(2, &node, &[], &[exit]).unwrap();
    let j = c.job(1).unwrap();
    assert_eq!((j.state, j.restart_count), (JobState::Pending, 1));
    c.tick(3);
    assert_eq!(c.job(1).unwrap().state, JobState::Running);
}

#[test]
fn parallel_steps_share_the_allocation_as_slurms_and_wait_for_what_they_need() {
    let mut c = cluster(1, 4);
    c.submit(0, spec(1), &batch(&["-n4", "--mem=2G", "--gpus-per-node=4"]), "a").unwrap();
    c.tick(0);
    let step = |c: &mut Controller, res: StepRes| {
        c.create_step(1, 1, 1, None, Some(1), None, vec!["x".into()], StepSpec { res, ..StepSpec::default() })
    };
    let exact = StepRes { exact: true, ..StepRes::default() };
    // A default step takes every CPU of the job on its node; a second waits, --overlap does not.
    let s0 = step(&mut c, StepRes::default()).unwrap();
    assert_eq!(c.job(1).unwrap().steps.iter().find(|s| s.id == s0).unwrap().held[0].cpus, 4);
    assert_eq!(step(&mut c, exact.clone()), Err(Refused::Busy("Requested nodes are busy".into())));
    let o = step(&mut c, StepRes { overlap: true, ..StepRes::default() }).unwrap();
    assert!(c.job(1).unwrap().steps.iter().find(|s| s.id == o).unwrap().held.is_empty());
    // When it ends, --exact steps of one CPU each, with two GPUs and 1 GiB each, run side by side.
    c.hb(2, "n0", &[], &[TaskExit { step: s0, rank: 0, ..ended(1, 1, Some(0), None) }]).unwrap();
    let two = StepRes { gpus: Some((model::GpuPer::Node(2), None)), mem: Some(model::MemRequest::PerNode(1 << 30)), ..exact.clone() };
    let a = step(&mut c, two.clone()).unwrap();
    let b = step(&mut c, two.clone()).unwrap();
    assert!(matches!(step(&mut c, two.clone()), Err(Refused::Busy(_))), "the GPUs and the memory are held");
    let tasks = launches(&c.hb(3, "n0", &[], &[]).unwrap()).into_iter().cloned().collect::<Vec<_>>();
    let of = |s: u32| tasks.iter().find(|t| t.step == s).unwrap().clone();
    assert_eq!((of(a).gpus, of(b).gpus), (vec![0, 1], vec![2, 3]));
    assert_eq!((of(a).step_mem, of(a).mem_limit), (1 << 30, 2 << 30));
    // The job's CPUs on the node: a cgroup v2 agent's cpu.max for the run.
    assert_eq!((of(a).cpu_limit, of(b).cpu_limit), (4, 4));
    let env = |t: &Task, k: &str| t.env.iter().find(|(e, _)| e == k).map(|(_, v)| v.clone()).unwrap_or_default();
    assert_eq!(env(&of(a), "SLURM_CPUS_ON_NODE"), "1");
    assert_eq!(env(&of(a), "CUDA_VISIBLE_DEVICES"), "0,1");
    // Never possible within the job: refused at once, with Slurm's words.
    let big = StepRes { mem: Some(model::MemRequest::PerNode(3 << 30)), ..exact.clone() };
    assert!(matches!(step(&mut c, big), Err(Refused::Invalid(m)) if m.starts_with("Memory required by task is not available")));
    let c5 = c.create_step(1, 1, 1, None, Some(5), None, vec!["x".into()], StepSpec { res: exact.clone(), ..StepSpec::default() });
    assert!(matches!(c5, Err(Refused::Invalid(m)) if m.starts_with("More processors requested than permitted")));
    let bad_type = StepRes { gpus: Some((model::GpuPer::Node(1), Some("a100".into()))), overlap: true, ..StepRes::default() };
    assert!(matches!(step(&mut c, bad_type), Err(Refused::Invalid(m)) if m.starts_with("Invalid generic resource")));
    // --gpus-per-task: each task its own.
    c.hb(
        4,
        "n0",
        &[],
        &[TaskExit { step: a, rank: 0, ..ended(1, 1, Some(0), None) }, TaskExit { step: b, rank: 0, ..ended(1, 1, Some(0), None) }],
    )
    .unwrap();
    let pt = c
        .create_step(
            5,
            1,
            1,
            None,
            Some(2),
            None,
            vec!["x".into()],
            StepSpec { res: StepRes { gpus: Some((model::GpuPer::Task(2), None)), ..exact }, ..StepSpec::default() },
        )
        .unwrap();
    let tasks =
        launches(&c.hb(5, "n0", &[], &[]).unwrap()).into_iter().filter(|t| t.step == pt).map(|t| t.gpus.clone()).collect::<Vec<_>>();
    assert_eq!(tasks, vec![vec![0, 1], vec![2, 3]]);
}

#[test]
fn a_step_past_its_own_time_limit_is_terminated_then_killed_and_the_job_runs_on() {
    let mut c = cluster(1, 0);
    c.submit(0, spec(1), &batch(&["-n2", "-t", "10"]), "a").unwrap();
    c.tick(0);
    c.hb(0, "n0", &[], &[]).unwrap();
    let res = StepRes { time_limit: Some(60), overlap: true, ..StepRes::default() };
    let s = c.create_step(10, 1, 1, None, Some(1), None, vec!["sleep".into()], StepSpec { res, ..StepSpec::default() }).unwrap();
    let _ = c.hb(11, "n0", &[], &[]).unwrap();
    let signals = |orders: &[Order]| {
        orders
            .iter()
            .filter_map(|o| if let Order::Signal { signal, step: Some(x), .. } = o { (*x == s).then_some(*signal) } else { None })
            .collect::<Vec<_>>()
    };
    // A heartbeat and a tick every second: what signals reach the step, and when.
    let mut sent = Vec::new();
    for t in 12..=100 {
        c.tick(t);
        sent.extend(signals(&c.hb(t, "n0", &[], &[]).unwrap()).into_iter().map(|sig| (t, sig)));
    }
    // SIGTERM at its limit, SIGKILL KillWait (30 s) later, again each tick until it ends.
    assert_eq!(sent, vec![(70, 15), (100, 9)]);
    c.hb(101, "n0", &[], &[TaskExit { step: s, rank: 0, ..ended(1, 1, None, Some(9)) }]).unwrap();
    let j = c.job(1).unwrap();
    let st = j.steps.iter().find(|x| x.id == s).unwrap();
    assert_eq!((j.state, st.end, st.timeout_at), (JobState::Running, Some(101), Some(70)));
}

#[test]
fn hostile_step_requests_from_the_api_are_refused_and_store_nothing() {
    let mut c = cluster(1, 4);
    c.submit(0, spec(1), &batch(&["-n2"]), "a").unwrap();
    c.tick(0);
    let bad = [
        StepRes { cpus_per_task: Some(0), ..StepRes::default() },
        StepRes { gpus: Some((model::GpuPer::Task(0), None)), ..StepRes::default() },
        StepRes { gpus: Some((model::GpuPer::Node(1), Some(String::new()))), ..StepRes::default() },
        StepRes { time_limit: Some(-5), ..StepRes::default() },
    ];
    for res in bad {
        let r = c.create_step(1, 1, 1, None, Some(1), None, vec!["x".into()], StepSpec { res: res.clone(), ..StepSpec::default() });
        assert!(matches!(r, Err(Refused::Invalid(_))), "{res:?}: {r:?}");
    }
    for bind in ["map_cpu:99999", "mask_cpu:", "sideways", "a\u{7}b"] {
        let s = StepSpec { cpu_bind: Some(bind.into()), ..StepSpec::default() };
        assert!(matches!(c.create_step(1, 1, 1, None, Some(1), None, vec!["x".into()], s), Err(Refused::Invalid(_))), "{bind}");
    }
    let s = StepSpec { distribution: Some("x".repeat(70_000)), ..StepSpec::default() };
    assert!(matches!(c.create_step(1, 1, 1, None, Some(1), None, vec!["x".into()], s), Err(Refused::Invalid(_))));
    // Another user's job: not theirs to step into.
    assert!(matches!(c.create_step(1, 2, 1, None, Some(1), None, vec!["x".into()], StepSpec::default()), Err(Refused::Forbidden(_))));
    assert_eq!(c.job(1).unwrap().steps.len(), 1, "only the batch step");
}

#[test]
fn fair_share_usage_decays_with_the_half_life_as_in_the_simulator() {
    let mut c = Controller::new(Settings { half_life: 1000, ..Settings::default() });
    c.register(0, Node::new("n0", 4, 8 << 30, 0), "127.0.0.1".into()).unwrap();
    c.submit(0, spec(1), &batch(&["-A", "ml", "-c4"]), "a").unwrap();
    c.tick(1);
    c.hb(101, "n0", &[], &[ended(1, 1, Some(0), None)]).unwrap();
    let used = c.shares().into_iter().find(|r| r.account == "ml").unwrap().raw_usage;
    assert!(used > 0.0);
    for t in (102..=1102).step_by(10) {
        c.hb(t, "n0", &[], &[]).unwrap();
        c.tick(t);
    }
    let after = c.shares().into_iter().find(|r| r.account == "ml").unwrap();
    // About one half-life (decay steps come once a minute, from the first tick).
    let ratio = after.raw_usage / used;
    assert!((0.44..0.52).contains(&ratio), "{} of {used} after about one half-life", after.raw_usage);
    assert_eq!((after.raw_shares, after.norm_shares, after.effective_usage), (1, 1.0, 1.0));
}

#[test]
fn sattach_reaches_a_running_srun_steps_nodes_for_its_owner_only() {
    let mut c = cluster(2, 0);
    c.submit(0, spec(1), &batch(&["-N2", "-n2"]), "a").unwrap();
    c.tick(0);
    let io = |key: char| StepIo {
        addr: "127.0.0.1:4000".into(),
        cert: "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n".into(),
        key: key.to_string().repeat(64),
        stdin: StdinTo::All,
        stdout: true,
        stderr: true,
        ..StepIo::default()
    };
    let files = c
        .create_step(
            1,
            1,
            1,
            Some(2),
            Some(2),
            None,
            vec!["x".into()],
            StepSpec { res: StepRes { overlap: true, ..StepRes::default() }, ..StepSpec::default() },
        )
        .unwrap();
    let srun = c
        .create_step(
            1,
            1,
            1,
            Some(2),
            Some(2),
            None,
            vec!["x".into()],
            StepSpec { io: Some(io('a')), res: StepRes { overlap: true, ..StepRes::default() }, ..StepSpec::default() },
        )
        .unwrap();
    let _ = (c.hb(2, "n0", &[], &[]).unwrap(), c.hb(2, "n1", &[], &[]).unwrap());
    // Another user, a step without srun I/O, a missing step, a bad key: refused, nothing sent.
    assert!(matches!(c.attach_step(2, 1, srun, io('b')), Err(Refused::Forbidden(_))));
    assert!(matches!(c.attach_step(1, 1, files, io('b')), Err(Refused::Invalid(m)) if m.contains("no I/O to attach to")));
    assert!(matches!(c.attach_step(1, 1, 77, io('b')), Err(Refused::NotFound(_))));
    assert!(matches!(c.attach_step(1, 1, srun, StepIo { key: "zz".into(), ..io('b') }), Err(Refused::Invalid(_))));
    assert!(matches!(c.attach_step(1, 1, srun, StepIo { pty: true, ..io('b') }), Err(Refused::Invalid(_))));
    assert!(matches!(c.attach_step(1, 9, srun, io('b')), Err(Refused::NotFound(_))));
    let attaches = |o: Vec<Order>| o.into_iter().filter(|o| matches!(o, Order::Attach { .. })).count();
    assert_eq!(attaches(c.hb(3, "n0", &[], &[]).unwrap()), 0);
    // The owner (and root): one order per node of the step, with sattach's endpoint.
    let layout = c.attach_step(1, 1, srun, io('b')).unwrap();
    assert_eq!(layout, vec![("n0".to_string(), 1), ("n1".to_string(), 1)]);
    for n in ["n0", "n1"] {
        let o = c.hb(4, n, &[], &[]).unwrap();
        assert!(
            o.iter().any(|o| matches!(o, Order::Attach { job: 1, step, io, .. } if *step == srun && io.key == "b".repeat(64))),
            "{n}: {o:?}"
        );
    }
    assert!(c.attach_step(0, 1, srun, io('c')).is_ok());
    // Once the step has ended: refused.
    c.hb(5, "n0", &[], &[TaskExit { step: srun, rank: 0, ..ended(1, 1, Some(0), None) }]).unwrap();
    c.hb(5, "n1", &[], &[TaskExit { step: srun, rank: 1, ..ended(1, 1, Some(0), None) }]).unwrap();
    assert!(matches!(c.attach_step(1, 1, srun, io('b')), Err(Refused::Conflict(m)) if m.contains("already finished")));
}

#[test]
fn a_pending_array_is_a_window_of_jobs_and_one_record_and_all_its_tasks_still_run() {
    // 16 nodes of 4 CPUs: 64 single-CPU tasks fit at once; the array has 150, its window 10.
    let mut c = cluster(16, 0);
    c.settings.array_window = 10;
    c.settings.min_job_age = 0;
    let ids = c.submit(0, spec(1), &batch(&["--array=0-149"]), "a").unwrap();
    assert_eq!(ids.len(), 150);
    assert_eq!(c.tail_tasks(), 140);
    assert_eq!(c.jobs().count(), 150, "listings show every task");
    let tail = c.job(ids[120]).expect("a tail task is shown");
    assert_eq!((tail.state, tail.array.unwrap().task), (JobState::Pending, 120));
    // A dependency on the array waits for the tail too; so does one on a tail task.
    let dep = c.submit(0, spec(1), &batch(&["--dependency=afterany:1"]), "a").unwrap()[0];
    let dep_tail = c.submit(0, spec(1), &batch(&[&format!("--dependency=afterany:{}", ids[149])]), "a").unwrap()[0];
    // Each pass starts what its window holds, then makes the next tasks and asks for another
    // pass at once; passes go on until every task runs.
    let mut passes = 0;
    loop {
        let info = c.tick(1);
        passes += 1;
        assert!(passes < 40);
        if !info.more {
            break;
        }
    }
    let running = c.jobs().filter(|j| j.state == JobState::Running).count();
    assert_eq!(running, 64, "the cluster is full");
    assert!(c.tail_tasks() > 0);
    // Everything runs and ends; the dependencies then start.
    let mut t = 2;
    while c.jobs().any(|j| j.array.is_some() && !j.state.is_final()) {
        for n in 0..16 {
            let name = format!("n{n}");
            let exits: Vec<TaskExit> = c
                .jobs()
                .filter(|j| j.state == JobState::Running && j.allocs.iter().any(|(x, _)| *x == name))
                .map(|j| ended(j.req.id.0, j.epoch, Some(0), None))
                .collect();
            c.hb(t, &name, &[], &exits).unwrap();
        }
        assert_eq!(c.job(dep).unwrap().state, JobState::Pending);
        loop {
            if !c.tick(t).more {
                break;
            }
        }
        t += 1;
        assert!(t < 100);
    }
    assert_eq!(c.jobs().filter(|j| j.state == JobState::Completed).count(), 150);
    assert_eq!(c.tail_tasks(), 0);
    c.tick(t);
    assert_eq!(c.job(dep).unwrap().state, JobState::Running);
    assert_eq!(c.job(dep_tail).unwrap().state, JobState::Running);
}

#[test]
fn a_tail_task_acted_on_alone_becomes_a_job_and_limits_count_the_tail() {
    let mut c = cluster(1, 0);
    c.settings.array_window = 4;
    let ids = c.submit(0, spec(7), &batch(&["--array=0-99"]), "a").unwrap();
    // Another user can neither cancel nor hold a tail task, and makes nothing trying.
    assert!(matches!(c.cancel(1, 8, ids[50], None), Err(Refused::Forbidden(_))));
    assert!(matches!(c.hold(8, ids[50], true), Err(Refused::Forbidden(_))));
    assert_eq!(c.tail_tasks(), 96);
    c.hold(7, ids[50], true).unwrap();
    assert_eq!(c.tail_tasks(), 49);
    assert!(c.job(ids[50]).unwrap().req.held);
    assert_eq!(c.job(ids[51]).unwrap().state, JobState::Pending);
    // The owner's cancel of the whole array: the tail in one change.
    let refused = c.cancel_many(2, 7, ids.clone(), None);
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(c.take_dirty().arrays.len(), 2, "the submission's record and the cancel's");
    assert!(c.jobs().all(|j| j.state == JobState::Cancelled));
    assert_eq!(c.jobs_from(0, true).filter(|j| !j.state.is_final()).count(), 0);
    assert!(c.cancel(3, 7, ids[99], None).is_err(), "already finished");
}

#[test]
fn a_heterogeneous_job_keeps_its_components_and_ids_across_a_restart_and_steps_span_them() {
    let mut c = cluster(3, 0);
    let ids = c.submit(0, spec(1), &batch(&["-n1", "-c2", ":", "-N2", "--ntasks-per-node=1"]), "a").unwrap();
    assert_eq!(ids, vec![1]);
    assert_eq!(c.submit(0, spec(1), &batch(&[]), "a").unwrap(), vec![3], "id 2 is component 1's");
    c.tick(1);
    let j = c.job(1).unwrap();
    assert_eq!((j.state, j.het.clone(), j.allocs.len()), (JobState::Running, vec![1, 2], 3));
    let first = j.allocs[0].0.clone();
    let orders = c.hb(1, &first, &[], &[]).unwrap();
    let batch_env: HashMap<_, _> = launches(&orders).iter().find(|t| t.job == 1).unwrap().env.iter().cloned().collect();
    assert_eq!(batch_env["SLURM_HET_SIZE"], "2");
    assert_eq!(batch_env["SLURM_JOB_ID_HET_GROUP_1"], "2");
    assert_eq!(batch_env["SLURM_JOB_NODELIST"], first, "the batch script sees component 0");
    assert_eq!(batch_env["SLURM_NTASKS_HET_GROUP_1"], "2");
    // What the store keeps (JSON) brings it back whole.
    let _ = c.take_dirty();
    let jobs: Vec<Job> = c.jobs().map(|j| serde_json::from_str(&serde_json::to_string(&*j).unwrap()).unwrap()).collect();
    let nodes: Vec<NodeRec> = c.nodes().to_vec();
    let mut r = Controller::restore(Settings::default(), jobs, nodes, Vec::new(), 4, 2, 2);
    let j = r.job(1).unwrap();
    assert_eq!((j.het.clone(), j.req.components()), (vec![1, 2], 2));
    // One step over both components: ranks component by component, each with its CPUs per task.
    let het = vec![HetStep { group: 0, ..HetStep::default() }, HetStep { group: 1, argv: vec!["other".into()], ..HetStep::default() }];
    let step = r.create_step(2, 1, 1, None, None, None, vec!["env".into()], StepSpec { het, ..StepSpec::default() }).unwrap();
    let s = r.job(1).unwrap().steps.iter().find(|s| s.id == step).unwrap().clone();
    assert_eq!(s.layout.iter().map(|(_, k)| *k).collect::<Vec<_>>(), vec![1, 1, 1]);
    let mut tasks: Vec<Task> = Vec::new();
    for (name, _) in &r.job(1).unwrap().allocs.clone() {
        tasks.extend(launches(&r.hb(2, name, &[], &[]).unwrap()).into_iter().filter(|t| t.step == step).cloned());
    }
    tasks.sort_by_key(|t| t.rank);
    let env = |t: &Task, k: &str| t.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).unwrap_or_default();
    assert_eq!(tasks.iter().map(|t| env(t, "SLURM_CPUS_PER_TASK")).collect::<Vec<_>>(), ["2", "1", "1"]);
    assert_eq!(tasks.iter().map(|t| t.argv[0].clone()).collect::<Vec<_>>(), ["env", "other", "other"]);
    assert!(tasks.iter().all(|t| env(t, "SLURM_NTASKS") == "3" && env(t, "SLURM_HET_SIZE") == "2"));
    // Bad groups are refused with Slurm's words.
    let bad = StepSpec { het: vec![HetStep { group: 2, ..HetStep::default() }], ..StepSpec::default() };
    assert!(
        matches!(r.create_step(2, 1, 1, None, None, None, vec!["x".into()], bad), Err(Refused::Invalid(m)) if m.contains("components 0-1"))
    );
    let plain = StepSpec { het: vec![HetStep::default()], ..StepSpec::default() };
    assert!(
        matches!(r.create_step(2, 1, 3, None, None, None, vec!["x".into()], plain), Err(Refused::Invalid(m)) if m.contains("HetJob allocation"))
    );
    assert_eq!(r.submit(3, spec(1), &batch(&[]), "a").unwrap(), vec![4], "ids continue past the components");
}

#[test]
fn a_failed_prolog_requeues_its_job_held_and_drains_only_by_the_nodes_word() {
    let settings = Settings { prolog: Some("/etc/tandem/prolog".into()), epilog: Some("/etc/tandem/epilog".into()), ..Settings::default() };
    let mut c = Controller::new(settings);
    for i in 0..2 {
        c.register(0, Node::new(format!("n{i}"), 4, 8 << 30, 0), format!("127.0.0.{}", i + 1)).unwrap();
    }
    c.submit(0, spec(1), &batch(&["-w", "n0"]), "a").unwrap();
    c.tick(1);
    let orders = c.hb(1, "n0", &[], &[]).unwrap();
    let t = launches(&orders)[0].clone();
    let env: HashMap<_, _> = t.script_env.iter().cloned().collect();
    assert_eq!((env["SLURM_JOB_ID"].as_str(), env["SLURM_JOB_USER"].as_str(), env["SLURMD_NODENAME"].as_str()), ("1", "a", "n0"));
    assert_eq!(env["SLURM_SCRIPT_CONTEXT"], "prolog_slurmd");
    let failed = TaskExit { prolog_failed: true, code: Some(1), error: Some("prolog failed (on n0)".into()), ..ended(1, 1, None, None) };
    let orders = c.hb(2, "n0", &[], &[failed]).unwrap();
    let j = c.job(1).unwrap();
    assert_eq!((j.state, j.reason, j.req.held, j.restart_count), (JobState::Pending, PendingReason::LaunchFailedHeld, true, 1));
    assert!(orders.iter().any(|o| matches!(o, Order::Epilog { job: 1, epoch: 1, env } if env.iter().any(|(k, v)| k == "SLURM_SCRIPT_CONTEXT" && v == "epilog_slurmd"))));
    c.tick(3);
    assert_eq!(c.job(1).unwrap().reason, PendingReason::LaunchFailedHeld, "a pass keeps Slurm's reason");
    c.hold(0, 1, false).unwrap();
    assert!(!c.job(1).unwrap().prolog_held);
    // The health check's drain gives way to a prolog's or epilog's, which its pass does not undo.
    c.agent_drain("n1", "NHC: disk", true).unwrap();
    c.agent_drain("n1", "Epilog error: scratch", false).unwrap();
    c.agent_healthy("n1").unwrap();
    let n1 = &c.nodes()[1];
    assert_eq!((n1.node.state, n1.reason.as_deref()), (NodeState::Drain, Some("Epilog error: scratch")));
    c.set_node_state(0, "n1", false, None).unwrap();
    c.agent_drain("n1", "NHC: disk", true).unwrap();
    c.agent_healthy("n1").unwrap();
    assert_eq!(c.nodes()[1].node.state, NodeState::Up, "the check's own drain is undone by its pass");
    // A name that cannot be an environment value is refused.
    let mut b = batch(&[]);
    b.job_name = Some("a\0b".into());
    assert!(matches!(c.submit(5, spec(1), &b, "a"), Err(Refused::Invalid(m)) if m.contains("NUL")));
}

fn resv_words(s: &str) -> slurmcli::resv::ResvSpec {
    let w: Vec<String> = s.split_whitespace().map(str::to_string).collect();
    slurmcli::resv::parse_reservation(&w, 10).unwrap()
}

#[test]
fn reservations_are_made_by_operators_on_free_nodes_and_checked_as_slurm_checks_them() {
    let mut c = cluster(4, 0);
    let create = |c: &mut Controller, uid: u32, s: &str| c.create_reservation(10, uid, &resv_words(s));
    // An ordinary user is refused in Slurm's words; nothing is kept.
    assert_eq!(create(&mut c, 1000, "StartTime=now Duration=5 Nodes=n1 Users=alice"), Err(Refused::Forbidden("Invalid user id".into())));
    assert!(c.reservations().next().is_none() && c.take_dirty().reservations.is_none());
    // Root: a name is generated from the first user; NodeCnt picks free nodes in order.
    assert_eq!(create(&mut c, 0, "StartTime=now+60 Duration=5 NodeCnt=2 Users=alice"), Ok("alice_1".into()));
    let r = c.reservations().next().unwrap().clone();
    assert_eq!((r.nodes.clone(), r.start, r.end, r.partition.as_deref()), (vec!["n0".to_string(), "n1".into()], 70, 370, Some("batch")));
    assert_eq!(c.take_dirty().reservations.map(|v| v.len()), Some(1), "persisted whole");
    // The same nodes at the same time: refused; another node: fine; OVERLAP: fine.
    assert!(
        create(&mut c, 0, "StartTime=now+100 Duration=5 Nodes=n1 Users=bob")
            .unwrap_err()
            .to_string()
            .starts_with("Requested reservation overlaps")
    );
    assert_eq!(create(&mut c, 0, "ReservationName=m StartTime=now+100 Duration=5 Nodes=n2 Users=root Flags=MAINT"), Ok("m".into()));
    assert_eq!(
        create(&mut c, 0, "ReservationName=m StartTime=now+900 Duration=5 Nodes=n3 Users=root"),
        Err(Refused::Conflict("Duplicate reservation name".into()))
    );
    assert_eq!(create(&mut c, 0, "StartTime=now+100 Duration=5 Nodes=n1 Users=bob Flags=OVERLAP"), Ok("bob_1".into()));
    // NodeCnt skips nodes held by others then: n3 is the only one left.
    assert!(
        create(&mut c, 0, "StartTime=now+100 Duration=5 NodeCnt=2 Users=bob")
            .unwrap_err()
            .to_string()
            .starts_with("Requested nodes are busy")
    );
    // Bad values, each refused and nothing kept.
    for (words, says) in [
        ("StartTime=now Duration=5 Nodes=n9 Users=a", "Invalid node name specified"),
        ("StartTime=now Duration=5 Nodes=n3 Users=a PartitionName=nope", "Invalid partition name specified"),
        ("StartTime=now+60 EndTime=now+30 Nodes=n3 Users=a", "Start time cannot be after end time"),
        ("StartTime=now Duration=5 Nodes=n3", "Either Users/Groups and/or Accounts must be specified"),
        ("Duration=5 Nodes=n3 Users=a", "A start time must be given"),
        ("StartTime=now Nodes=n3 Users=a", "An end time or duration must be given"),
        ("StartTime=now Duration=5 Users=a", "Nodes, NodeCnt or TRES must be specified"),
        ("StartTime=now Duration=2-0 Nodes=n3 Users=a Flags=DAILY", "longer than its period"),
        ("StartTime=now Duration=5 Nodes=n3 Users=a Flags=DAILY,WEEKLY", "cannot both be set"),
    ] {
        let n = c.reservations().count();
        let e = create(&mut c, 0, words).unwrap_err().to_string();
        assert!(e.contains(says), "{words}: {e}");
        assert_eq!(c.reservations().count(), n, "{words}: nothing kept");
    }
    // A start in the past (beyond a minute's grace) is refused.
    let past = c.create_reservation(1000, 0, &resv_words("StartTime=now Duration=5 Nodes=n3 Users=a"));
    assert_eq!(past, Err(Refused::Invalid("Invalid time specified".into())));
    // A running job past the start keeps its node from a reservation without IGNORE_JOBS.
    c.submit(10, spec(1000), &batch(&["-w", "n3", "-t", "60"]), "alice").unwrap();
    c.tick(10);
    assert_eq!(c.job(1).unwrap().state, JobState::Running);
    let e = create(&mut c, 0, "StartTime=now+60 Duration=5 Nodes=n3 Users=root").unwrap_err().to_string();
    assert!(e.starts_with("Requested nodes are busy"), "{e}");
    assert!(create(&mut c, 0, "StartTime=now+60 Duration=5 Nodes=n3 Users=root Flags=IGNORE_JOBS,OVERLAP").is_ok());
}

#[test]
fn reservations_update_delete_and_admit_only_their_users_and_accounts() {
    let mut c = cluster(2, 0);
    c.create_reservation(10, 0, &resv_words("ReservationName=team StartTime=now Duration=60 Nodes=n1 Users=alice Accounts=ml")).unwrap();
    // Updates: an ordinary user is refused; root moves the end; an unknown name is invalid.
    assert_eq!(
        c.update_reservation(10, 1000, &resv_words("ReservationName=team Duration=30")),
        Err(Refused::Forbidden("Invalid user id".into()))
    );
    c.update_reservation(10, 0, &resv_words("ReservationName=team Duration=30 Users+=bob Flags=MAGNETIC")).unwrap();
    let r = c.reservations().next().unwrap().clone();
    assert_eq!((r.end, r.users.clone(), r.flags.magnetic), (10 + 1800, vec!["alice".to_string(), "bob".into()], true));
    assert!(matches!(c.update_reservation(10, 0, &resv_words("ReservationName=nope Duration=3")), Err(Refused::NotFound(_))));
    // Submissions: Users and Accounts must both admit; root may use any; a missing one is invalid.
    let sub = |c: &mut Controller, uid: u32, user: &str, args: &[&str]| c.submit(10, spec(uid), &batch(args), user);
    assert_eq!(
        sub(&mut c, 1001, "carol", &["--reservation=team", "-A", "ml"]).unwrap_err(),
        Refused::Forbidden("Access denied to requested reservation".into())
    );
    assert_eq!(
        sub(&mut c, 1000, "alice", &["--reservation=team"]).unwrap_err(),
        Refused::Forbidden("Access denied to requested reservation".into()),
        "alice's own account is not ml"
    );
    assert_eq!(
        sub(&mut c, 1000, "alice", &["--reservation=nope"]).unwrap_err(),
        Refused::Invalid("Requested reservation is invalid".into())
    );
    let id = sub(&mut c, 1000, "alice", &["--reservation=team", "-A", "ml", "-t", "600"]).unwrap()[0];
    c.tick(10);
    let j = c.job(id).unwrap();
    assert_eq!((j.state, j.allocs[0].0.as_str(), j.req.time_limit), (JobState::Running, "n1", 1800), "on its node, cut to its end");
    // Deleting a reservation with a job in it: refused in Slurm's words.
    assert_eq!(c.delete_reservation(0, "team"), Err(Refused::Conflict("Requested reservation is in use".into())));
    assert_eq!(c.delete_reservation(1000, "team"), Err(Refused::Forbidden("Invalid user id".into())));
    assert!(matches!(c.delete_reservation(0, "nope"), Err(Refused::NotFound(_))));
    // One that does not repeat is dropped once it has ended (and its end persisted).
    c.create_reservation(10, 0, &resv_words("ReservationName=short StartTime=now Duration=1 Nodes=n0 Users=root")).unwrap();
    c.take_dirty();
    c.tick(71);
    assert!(c.reservations().all(|r| r.name != "short"));
    assert!(c.take_dirty().reservations.is_some_and(|v| v.iter().all(|r| r.name != "short")));
}

#[test]
fn reservation_changes_during_a_pass_stale_its_starts_and_hostile_specs_are_refused() {
    let mut c = cluster(2, 0);
    c.submit(10, spec(1000), &batch(&["-t", "60", "-c", "4"]), "alice").unwrap();
    // A pass planned before a reservation is made starts nothing; the next decides again.
    let mut pass = c.begin_tick(10);
    pass.run();
    c.create_reservation(10, 0, &resv_words("ReservationName=all StartTime=now Duration=600 Nodes=n[0-1] Users=root")).unwrap();
    c.finish_tick(pass);
    assert_eq!(c.job(1).unwrap().state, JobState::Pending, "no start from the stale plan");
    c.tick(11);
    assert_eq!(c.job(1).unwrap().state, JobState::Pending);
    assert_eq!(c.job(1).unwrap().reason, PendingReason::ReservedNodes);
    // A one-off reservation a month ahead on a DAILY one's hours and nodes overlaps it.
    let day = model::resv::DAY;
    let daily = slurmcli::resv::ResvSpec {
        name: Some("d".into()),
        start: Some(10 + day),
        duration: Some(3600),
        nodes: Some(vec!["n0".into()]),
        users: Some(slurmcli::resv::ListChange { op: slurmcli::resv::ListOp::Set, negated: false, names: vec!["root".into()] }),
        flags_set: vec!["DAILY".into()],
        ..Default::default()
    };
    c.create_reservation(10, 0, &daily).unwrap();
    let later = slurmcli::resv::ResvSpec { name: Some("m".into()), start: Some(10 + 30 * day + 600), flags_set: vec![], ..daily.clone() };
    let e = c.create_reservation(10, 0, &later).unwrap_err().to_string();
    assert!(e.starts_with("Requested reservation overlaps"), "{e}");
    // Bodies no scontrol would send: refused, nothing kept.
    let n = c.reservations().count();
    for bad in [
        slurmcli::resv::ResvSpec { name: Some("a b/../c".into()), start: Some(10 + 40 * day), ..daily.clone() },
        slurmcli::resv::ResvSpec { name: Some("far".into()), start: Some(i64::MAX - 5), ..daily.clone() },
        slurmcli::resv::ResvSpec { name: Some("long".into()), duration: Some(i64::MAX), start: Some(10 + 40 * day), ..daily.clone() },
        slurmcli::resv::ResvSpec {
            name: Some("nodes".into()),
            nodes: Some(vec![String::new()]),
            start: Some(10 + 40 * day),
            ..daily.clone()
        },
        slurmcli::resv::ResvSpec {
            name: Some("users".into()),
            start: Some(10 + 40 * day),
            users: Some(slurmcli::resv::ListChange { op: slurmcli::resv::ListOp::Set, negated: false, names: vec!["\u{1b}[2J".into()] }),
            ..daily.clone()
        },
    ] {
        assert!(matches!(c.create_reservation(10, 0, &bad), Err(Refused::Invalid(_))), "{bad:?}");
    }
    assert_eq!(c.reservations().count(), n);
}

#[test]
fn jobs_still_waiting_when_their_reservation_ends_lose_it_and_are_held() {
    let mut c = cluster(1, 0);
    c.create_reservation(10, 0, &resv_words("ReservationName=r StartTime=now Duration=1 Nodes=n0 Users=alice Flags=IGNORE_JOBS")).unwrap();
    // The node is busy for the whole window: alice's job in it cannot start.
    let busy = c.submit(10, spec(0), &batch(&["-t", "10", "-c", "4", "--reservation=r"]), "root").unwrap()[0];
    c.tick(10);
    assert_eq!(c.job(busy).unwrap().state, JobState::Running);
    let id = c.submit(10, spec(1000), &batch(&["-t", "1", "-c", "4", "--reservation=r"]), "alice").unwrap()[0];
    c.tick(11);
    assert_eq!(c.job(id).unwrap().state, JobState::Pending);
    c.tick(71);
    let j = c.job(id).unwrap();
    assert_eq!((j.req.reservation.as_deref(), j.req.held, j.reason), (None, true, PendingReason::JobHeldUser));
    assert!(c.reservations().next().is_none());
}

#[test]
fn a_health_check_marks_its_node_down_and_an_expedited_job_is_requeued_first() {
    let settings = Settings { enable_expedited_requeue: true, ..Settings::default() };
    let mut c = Controller::new(settings);
    for i in 0..2 {
        c.register(0, Node::new(format!("n{i}"), 4, 8 << 30, 0), format!("127.0.0.{}", i + 1)).unwrap();
    }
    let hold = c.submit(1, spec(1000), &batch(&["-w", "n1", "-c", "4"]), "alice").unwrap()[0];
    let earlier = c.submit(1, spec(1000), &batch(&["-c", "4"]), "alice").unwrap()[0];
    c.tick(1);
    let victim = c.submit(2, spec(1000), &batch(&["-c", "4", "--requeue=expedite"]), "alice").unwrap()[0];
    c.tick(2);
    assert_eq!(c.job(earlier).unwrap().state, JobState::Running, "n0");
    let _ = victim;
    // Put the earlier job back to waiting behind the expedited one: the victim runs on n0.
    c.cancel(3, 0, earlier, None).unwrap();
    c.hb(3, "n0", &[], &[ended(earlier, 1, None, Some(15))]).unwrap();
    let waiting = c.submit(3, spec(1000), &batch(&["-c", "4"]), "alice").unwrap()[0];
    c.tick(4);
    assert_eq!(c.job(victim).unwrap().state, JobState::Running);
    assert_eq!(c.job(waiting).unwrap().state, JobState::Pending);
    // n0's check marks it down: the victim is requeued, expedited; heartbeats keep n0 down.
    c.agent_health_down(5, "n0", "GPU 0 fell off the bus").unwrap();
    assert_eq!(c.nodes()[0].node.state, NodeState::Down);
    assert_eq!(c.nodes()[0].reason.as_deref(), Some("GPU 0 fell off the bus"));
    let j = c.job(victim).unwrap();
    assert_eq!((j.state, j.req.expedited, j.restart_count), (JobState::Pending, true, 1));
    c.hb(6, "n0", &[], &[]).unwrap();
    assert_eq!(c.nodes()[0].node.state, NodeState::Down, "a heartbeat does not bring it back");
    // n1 frees: the expedited job starts there before the job that waited longer.
    c.cancel(7, 0, hold, None).unwrap();
    c.hb(7, "n1", &[], &[ended(hold, 1, None, Some(15))]).unwrap();
    c.tick(8);
    let j = c.job(victim).unwrap();
    assert_eq!((j.state, j.allocs[0].0.as_str(), j.req.expedited), (JobState::Running, "n1", false));
    assert_eq!(c.job(waiting).unwrap().state, JobState::Pending);
    // The check passes: n0 is back.
    c.agent_healthy("n0").unwrap();
    assert_eq!(c.nodes()[0].node.state, NodeState::Up);
    // Without the cluster's leave, --requeue=expedite is refused.
    let mut plain = cluster(1, 0);
    let e = plain.submit(1, spec(1000), &batch(&["--requeue=expedite"]), "alice").unwrap_err().to_string();
    assert!(e.contains("enable_expedited_requeue"), "{e}");
}

#[test]
fn reconfigure_applies_what_can_change_at_once_and_names_what_waits_for_a_restart() {
    let mut c = Controller::new(Settings::default());
    let mut new = Settings { job_submit: Some("/etc/tandem/job_submit.lua".into()), kill_wait: 7, min_job_age: 9, ..Settings::default() };
    assert!(c.reconfigure(&new).is_empty());
    assert_eq!(
        (c.settings().job_submit.as_deref(), c.settings().kill_wait, c.settings().min_job_age),
        (Some("/etc/tandem/job_submit.lua"), 7, 9)
    );
    new.lease = 99;
    new.prolog = Some("/etc/p".into());
    new.cluster.partitions.push(model::Partition::new("extra", 60, 3600, 0));
    assert_eq!(c.reconfigure(&new), vec!["lease", "[[partition]]", "prolog"]);
    assert_eq!(c.settings().lease, Settings::default().lease, "the lease waits for a restart");
    assert!(c.settings().prolog.is_none());
}

#[test]
fn a_reboot_waits_for_its_node_to_empty_is_issued_once_and_completes_when_the_agent_registers_again() {
    use crate::reboot::NextState;
    let settings = Settings { reboot_program: Some("/sbin/reboot-node".into()), resume_timeout: 100, ..Settings::default() };
    let mut c = Controller::new(settings);
    for i in 0..3 {
        c.register(0, Node::new(format!("n{i}"), 4, 8 << 30, 0), format!("127.0.0.{}", i + 1)).unwrap();
    }
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // Administrators only; a program must be configured; names must exist.
    assert!(matches!(c.reboot_nodes(1000, "alice", &names(&["n0"]), false, None, None), Err(Refused::Forbidden(_))));
    assert!(matches!(c.reboot_nodes(0, "root", &names(&["n9"]), false, None, None), Err(Refused::NotFound(_))));
    assert!(matches!(c.reboot_nodes(0, "root", &[], false, None, None), Err(Refused::Invalid(_))));
    assert!(matches!(c.reboot_nodes(0, "root", &names(&["n0"]), false, None, Some("bad\nreason".into())), Err(Refused::Invalid(_))));
    let job = c.submit(1, spec(1000), &batch(&["-w", "n0", "-c", "4"]), "alice").unwrap()[0];
    c.tick(1);
    assert_eq!(c.job(job).unwrap().state, JobState::Running);
    // ASAP: drained at once; not issued while the job runs.
    c.reboot_nodes(0, "root", &names(&["n0"]), true, None, None).unwrap();
    assert_eq!((c.nodes()[0].node.state, c.nodes()[0].reason.as_deref()), (NodeState::Drain, Some("Reboot ASAP")));
    let orders = c.hb(2, "n0", &[TaskKey { job, epoch: 1, step: BATCH_STEP, rank: 0 }], &[]).unwrap();
    c.tick(2);
    assert!(!orders.iter().any(|o| matches!(o, Order::Reboot { .. })));
    // A plain reboot of an idle node is issued at the next tick; nextstate=DOWN keeps it down.
    c.reboot_nodes(0, "root", &names(&["n1"]), false, Some(NextState::Down), Some("firmware".into())).unwrap();
    assert_eq!(c.nodes()[1].node.state, NodeState::Up, "not drained: work may still land until it is issued");
    c.tick(3);
    assert_eq!(c.nodes()[1].node.state, NodeState::Drain);
    assert_eq!(c.nodes()[1].reason.as_deref(), Some("firmware : reboot issued"));
    let orders = c.hb(3, "n1", &[], &[]).unwrap();
    assert_eq!(orders.iter().filter(|o| matches!(o, Order::Reboot { .. })).count(), 1);
    // Silent while it reboots: its lease lapses without marking it down.
    c.hb(60, "n0", &[TaskKey { job, epoch: 1, step: BATCH_STEP, rank: 0 }], &[]).unwrap();
    c.hb(60, "n2", &[], &[]).unwrap();
    c.tick(3 + 60);
    assert_eq!(c.nodes()[1].node.state, NodeState::Drain);
    c.register(70, Node::new("n1", 4, 8 << 30, 0), "127.0.0.2".into()).unwrap();
    assert_eq!(c.nodes()[1].node.state, NodeState::Down);
    assert_eq!(c.nodes()[1].reason.as_deref(), Some("firmware : reboot issued : reboot complete"));
    assert!(c.nodes()[1].reboot.is_none());
    c.hb(71, "n1", &[], &[]).unwrap();
    assert_eq!(c.nodes()[1].node.state, NodeState::Down, "its heartbeats do not bring it back");
    // n0's job ends: the reboot is issued; after it the node resumes (ASAP means resume).
    c.hb(71, "n0", &[], &[ended(job, 1, Some(0), None)]).unwrap();
    c.tick(72);
    assert!(c.hb(72, "n0", &[], &[]).unwrap().iter().any(|o| matches!(o, Order::Reboot { .. })));
    // Cancelling an issued reboot is refused; a pending one is forgotten, its ASAP drain undone.
    assert!(matches!(c.cancel_reboot(0, "root", &names(&["n0"])), Err(Refused::Conflict(_))));
    c.register(80, Node::new("n0", 4, 8 << 30, 0), "127.0.0.1".into()).unwrap();
    assert_eq!((c.nodes()[0].node.state, c.nodes()[0].reason.as_deref()), (NodeState::Up, None));
    let busy = c.submit(81, spec(1000), &batch(&["-w", "n2", "-c", "4"]), "alice").unwrap()[0];
    c.tick(81);
    assert_eq!(c.job(busy).unwrap().state, JobState::Running);
    c.reboot_nodes(0, "root", &names(&["n2"]), true, None, None).unwrap();
    c.cancel_reboot(0, "root", &names(&["n2"])).unwrap();
    assert_eq!((c.nodes()[2].node.state, c.nodes()[2].reason.as_deref()), (NodeState::Up, None));
    // A node that never comes back is down past resume_timeout.
    c.cancel(82, 0, busy, None).unwrap();
    c.hb(82, "n2", &[], &[ended(busy, 1, None, Some(15))]).unwrap();
    c.reboot_nodes(0, "root", &names(&["ALL"]), false, None, None).unwrap();
    c.tick(83);
    assert!(c.nodes()[1].reboot.as_ref().is_some_and(|r| r.issued_at.is_some()), "a down node that answers is rebooted too");
    // While issued: root's resume is refused; cancel_reboot cancels nothing issued.
    assert!(matches!(c.set_node_state(0, "n2", false, None), Err(Refused::Conflict(_))));
    assert!(matches!(c.cancel_reboot(0, "root", &names(&["ALL"])), Err(Refused::Conflict(_))));
    // n0's reboot program fails: the reboot is over, the node drained with its words.
    c.agent_drain("n0", "Reboot program error: exit status 1", false).unwrap();
    assert!(c.nodes()[0].reboot.is_none());
    assert_eq!((c.nodes()[0].node.state, c.nodes()[0].reason.as_deref()), (NodeState::Drain, Some("Reboot program error: exit status 1")));
    assert!(!c.hb(84, "n0", &[], &[]).unwrap().iter().any(|o| matches!(o, Order::Reboot { .. })), "its order is withdrawn");
    c.tick(83 + 100);
    assert_eq!((c.nodes()[2].node.state, c.nodes()[2].reason.as_deref()), (NodeState::Down, Some("reboot timed out")));
    c.hb(184, "n2", &[], &[]).unwrap();
    assert_eq!(c.nodes()[2].node.state, NodeState::Down, "a timed-out node stays down through its heartbeats");
}

/// Heartbeats and ticks every 20 s from `from` to before `to` (the node's lease holds); the
/// orders delivered meanwhile.
fn live(c: &mut Controller, from: Time, to: Time, running: &[TaskKey]) -> Vec<Order> {
    let mut out = Vec::new();
    let mut t = from;
    while t < to {
        out.extend(c.hb(t, "n0", running, &[]).unwrap());
        c.tick(t);
        t += 20;
    }
    out
}

#[test]
fn suspend_lends_only_cpus_stops_the_clock_and_resume_waits_for_free_cpus() {
    let mut c = cluster(1, 2);
    // Job 1: 3 of 4 CPUs, 1 GiB, both GPUs, 10 minutes.
    c.submit(0, spec(1000), &batch(&["-c3", "--mem=1G", "--gpus-per-node=2", "-t", "10"]), "alice").unwrap();
    c.tick(0);
    c.hb(0, "n0", &[], &[]).unwrap();
    assert_eq!(c.job(1).unwrap().state, JobState::Running);
    // Ordinary users may not; nor may a missing job be suspended, nor a running one resumed.
    assert!(matches!(c.suspend(5, 1000, 1), Err(Refused::Forbidden(m)) if m == "Access/permission denied"));
    assert!(matches!(c.suspend(5, 0, 99), Err(Refused::NotFound(_))));
    assert!(matches!(c.resume(5, 0, 1), Err(Refused::Conflict(m)) if m == "Job is not suspended"));
    c.suspend(10, 0, 1).unwrap();
    assert!(matches!(c.suspend(11, 0, 1), Err(Refused::Conflict(_))), "already suspended");
    assert_eq!(c.job(1).unwrap().state, JobState::Suspended);
    assert!(c.hb(10, "n0", &[], &[]).unwrap().contains(&Order::Suspend { job: 1, epoch: 1 }));
    let u = &c.nodes[0].usage;
    assert_eq!((u.cpus, u.memory, u.gpu_milli.iter().sum::<u32>()), (0, 1 << 30, 2000), "only its CPUs are lent");
    // A CPU-only job takes the lent CPUs; one needing a GPU cannot.
    c.submit(10, spec(1000), &batch(&["-c2", "--mem=1G", "-t", "60"]), "alice").unwrap();
    c.submit(10, spec(1000), &batch(&["-c1", "--gpus=1", "-t", "1"]), "alice").unwrap();
    c.tick(10);
    assert_eq!(c.job(2).unwrap().state, JobState::Running, "{:?} {:?}", c.job(2).unwrap().reason, c.job(3).unwrap().reason);
    assert_eq!(c.job(3).unwrap().state, JobState::Pending);
    // Its time limit does not run while suspended: long past it, it is not signalled.
    let orders = live(&mut c, 20, 700, &[]);
    assert!(!orders.iter().any(|o| matches!(o, Order::Signal { job: 1, .. } | Order::Kill { job: 1, .. })), "{orders:?}");
    assert_eq!(c.job(1).unwrap().state, JobState::Suspended);
    // Resume waits for the CPUs job 2 holds.
    let e = c.resume(700, 0, 1).unwrap_err();
    assert!(matches!(&e, Refused::Busy(m) if m.contains("in use (job 2)")), "{e}");
    c.hb(701, "n0", &[], &[ended(2, 1, Some(0), None)]).unwrap();
    c.resume(710, 0, 1).unwrap();
    assert_eq!(c.job(1).unwrap().state, JobState::Running);
    assert_eq!(c.job(1).unwrap().suspended_secs, 700);
    assert!(c.hb(710, "n0", &[], &[]).unwrap().contains(&Order::Resume { job: 1, epoch: 1 }));
    // It ran 10 s before and now has its 590 s left: the limit comes at 1300, not 600.
    let orders = live(&mut c, 720, 1300, &[]);
    assert!(!orders.iter().any(|o| matches!(o, Order::Signal { job: 1, signal: 15, .. })), "{orders:?}");
    c.tick(1300);
    assert!(c.hb(1300, "n0", &[], &[]).unwrap().contains(&Order::Signal { job: 1, epoch: 1, signal: 15, batch_only: false, step: None }));
}

#[test]
fn a_suspended_job_is_cancelled_thawed_and_requeued_held_and_survives_a_restart() {
    let mut c = cluster(1, 0);
    c.submit(0, spec(1000), &batch(&["-c2", "-t", "10"]), "alice").unwrap();
    c.submit(0, spec(1000), &batch(&["-c2", "-t", "10"]), "alice").unwrap();
    c.tick(0);
    c.hb(0, "n0", &[], &[]).unwrap();
    c.suspend(10, 0, 1).unwrap();
    c.hb(10, "n0", &[], &[]).unwrap();
    // Job 3 takes the CPUs job 1 lent (a restore that gave them back to job 1 first would
    // over-commit the node).
    c.submit(10, spec(1000), &batch(&["-c2", "-t", "10"]), "alice").unwrap();
    c.tick(10);
    assert_eq!(c.job(3).unwrap().state, JobState::Running);
    // A step cannot start in it (srun waits, as Slurm's).
    let e = c.create_step(11, 1000, 1, None, Some(1), None, vec!["true".into()], StepSpec::default()).unwrap_err();
    assert!(matches!(e, Refused::Busy(_)), "{e}");
    // Restarted: still suspended, its CPUs still lent, and its agent told again.
    let _ = c.take_dirty();
    let jobs: Vec<Job> = c.jobs().map(|j| j.into_owned()).collect();
    let nodes: Vec<NodeRec> = c.nodes().to_vec();
    let mut c = Controller::restore(Settings::default(), jobs, nodes, Vec::new(), 3, 20, 2);
    assert_eq!(c.job(1).unwrap().state, JobState::Suspended);
    assert_eq!(c.nodes[0].usage.cpus, 4);
    assert!(c.nodes[0].orders.iter().any(|(_, o)| *o == Order::Suspend { job: 1, epoch: 1 }));
    // The agent reports it frozen: nothing more; a running job it reports frozen is thawed.
    c.reconcile_frozen("n0", &[(1, 1), (2, 1)]);
    assert!(c.nodes[0].orders.iter().any(|(_, o)| *o == Order::Resume { job: 2, epoch: 1 }));
    // Cancelled: thawed first (to see its SIGTERM); its suspended time is counted at its end.
    c.cancel(30, 1000, 1, None).unwrap();
    let o: Vec<Order> = c.nodes[0].orders.iter().map(|(_, o)| o.clone()).collect();
    let thaw = o.iter().rposition(|o| *o == Order::Resume { job: 1, epoch: 1 }).unwrap();
    let term = o.iter().position(|o| matches!(o, Order::Signal { job: 1, signal: 15, .. })).unwrap();
    assert!(thaw < term, "{o:?}");
    let two = TaskKey { job: 2, epoch: 1, step: BATCH_STEP, rank: 0 };
    let three = TaskKey { job: 3, ..two };
    c.heartbeat(31, "n0", 0, &[two, three], &[ended(1, 1, None, Some(15))]).unwrap();
    let j = c.job(1).unwrap();
    assert_eq!((j.state, j.suspended_secs), (JobState::Cancelled, 21));
    assert_eq!(c.nodes[0].usage.cpus, 4, "its CPUs were not taken back twice");
    // A suspended job requeued comes back held.
    c.suspend(40, 0, 2).unwrap();
    c.requeue(0, 2).unwrap();
    c.heartbeat(41, "n0", 0, &[three], &[ended(2, 1, None, Some(9))]).unwrap();
    let j = c.job(2).unwrap();
    assert_eq!((j.state, j.req.held, j.reason), (JobState::Pending, true, PendingReason::JobHeldUser));
    assert_eq!(c.nodes[0].usage.cpus, 2, "job 3's");
}

#[test]
fn a_suspending_qos_tier_is_frozen_for_a_higher_one_and_resumed_when_it_ends() {
    let mut s = Settings::default();
    s.cluster.qos = vec![
        model::Qos::normal(),
        model::Qos { name: "low".into(), preempt_mode: model::PreemptMode::Suspend, ..model::Qos::normal() },
        model::Qos { name: "high".into(), priority: 100, preempt_tier: 1, ..model::Qos::normal() },
    ];
    let mut c = Controller::new(s);
    c.register(0, Node::new("n0", 4, 8 << 30, 0), "127.0.0.1".into()).unwrap();
    c.submit(0, spec(1000), &batch(&["-c4", "--mem=2G", "-q", "low", "-t", "10"]), "alice").unwrap();
    c.tick(0);
    c.hb(0, "n0", &[], &[]).unwrap();
    c.hb(20, "n0", &[], &[]).unwrap();
    c.submit(40, spec(1001), &batch(&["-c4", "--mem=2G", "-q", "high", "-t", "5"]), "bob").unwrap();
    c.hb(40, "n0", &[], &[]).unwrap();
    c.tick(40);
    let j = c.job(1).unwrap();
    assert_eq!((j.state, j.suspension.as_ref().and_then(|s| s.for_job)), (JobState::Suspended, Some(2)));
    assert!(j.preempt_at.is_none(), "suspended, not requeued");
    assert!(c.hb(41, "n0", &[], &[]).unwrap().contains(&Order::Suspend { job: 1, epoch: 1 }));
    // Not resumed while its preemptor waits to start; the next pass starts it on the CPUs.
    c.tick(41);
    assert_eq!(c.job(2).unwrap().state, JobState::Running);
    assert_eq!(c.job(1).unwrap().state, JobState::Suspended);
    live(&mut c, 60, 100, &[]);
    assert_eq!(c.job(1).unwrap().state, JobState::Suspended, "its CPUs are in use");
    // The preemptor ends: the next pass gives the CPUs back before anything else starts.
    c.submit(100, spec(1000), &batch(&["-c1", "-t", "10"]), "alice").unwrap();
    c.hb(100, "n0", &[], &[ended(2, 1, Some(0), None)]).unwrap();
    c.tick(101);
    let j = c.job(1).unwrap();
    assert_eq!((j.state, j.suspended_secs), (JobState::Running, 61));
    assert_eq!(c.job(3).unwrap().state, JobState::Pending, "the resumed job had its CPUs first");
    assert!(c.hb(101, "n0", &[], &[]).unwrap().contains(&Order::Resume { job: 1, epoch: 1 }));
}
