//! The node loop: registers the node's resources, heartbeats (renewing its
//! lease and long-polling for orders), launches tasks as real processes (each in its own process
//! group, as the submitting user when running as root, output appended to files, memory limited
//! by a cgroup v1 memory controller where one can be created), reports exits, and fences itself:
//! when its last successful heartbeat is older than the lease, it kills every task.

use anyhow::{Context, Result};
use control::{BATCH_STEP, Order, TaskExit, TaskKey};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

use client::{Conn, Target};
use wire::*;

use crate::launch::{Cgroups, Found, Now, Tasks, kill_group, launch, script_path};
use crate::resources::{machine_memory, nvml_gpus};

/// Agent settings from the command line.
pub(crate) struct AgentArgs {
    /// Controller.
    pub(crate) server: Target,
    /// Its address as given (`https://host:port`), and the cluster CA: what the node's health
    /// check gets to reach the controller with the node's credential.
    pub(crate) server_url: String,
    /// See `server_url`.
    pub(crate) ca: Option<PathBuf>,
    /// Node name.
    pub(crate) name: String,
    /// Declared GPUs: model and count.
    pub(crate) gpus: Option<(Option<String>, u32)>,
    /// CPUs (default: the machine's).
    pub(crate) cpus: Option<u32>,
    /// Memory in bytes (default: the machine's).
    pub(crate) memory: Option<u64>,
    /// Working directory (scripts).
    pub(crate) data: PathBuf,
    /// A single-use join token, for a node without a stored credential.
    pub(crate) join_token: Option<String>,
    /// Address to advertise (MASTER_ADDR).
    pub(crate) addr: String,
    /// Features.
    pub(crate) features: Vec<String>,
    /// How images are pulled.
    pub(crate) registries: image::Settings,
    /// SIGTERM stops the tasks too (`--stop-tasks-on-sigterm`).
    pub(crate) stop_tasks_on_sigterm: bool,
}

struct Running {
    pgid: i32,
    /// Runs in a container: the directory of the container it joined (to end with the step's
    /// last task here, or, named, kept for the job's next steps), and whether it is named.
    container: Option<(PathBuf, bool)>,
    cgroup: Option<PathBuf>,
    /// Its run's freezer cgroup (`scontrol suspend`), if one could be made.
    freezer: Option<PathBuf>,
    /// A service replica, supervised (restarted, probed) by its own task.
    replica: Option<std::sync::Arc<crate::replica::Ctl>>,
    /// The Unix second a batch step launched here started, until a heartbeat that says so is
    /// answered (a task adopted at a restart has none: its start was reported before).
    started_at: Option<i64>,
}

impl Running {
    /// Its process group now (a replica's changes when it restarts).
    fn pgid(&self) -> i32 {
        self.replica.as_ref().map_or(self.pgid, |c| c.pgid.load(std::sync::atomic::Ordering::SeqCst))
    }
}

/// Where the node's credential is kept.
fn credential_path(a: &AgentArgs) -> PathBuf {
    a.data.join("credential")
}

/// The error of an agent whose credential the controller refuses.
fn revoked(a: &AgentArgs, status: u16, message: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "the controller refuses this node's credential (HTTP {status}: {message}); if the node was deleted, remove {} and join again with a new token (`tandem token --join`)",
        credential_path(a).display()
    )
}

/// The node's credential: the one kept in `DATA/credential` (0600, so a restart needs no new
/// token), else one the join token is spent on, which is then kept there.
async fn credential(conn: &Conn, a: &AgentArgs) -> Result<String> {
    let path = credential_path(a);
    match std::fs::read_to_string(&path) {
        Ok(c) if !c.trim().is_empty() => {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
            return Ok(c.trim().to_string());
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading the node's credential {}", path.display())),
    }
    let Some(token) = &a.join_token else {
        anyhow::bail!(
            "node {} has no credential yet ({} does not exist): give it a join token with --join-token-file (make one with `tandem token --join`)",
            a.name,
            path.display()
        );
    };
    let bearer = format!("Bearer {token}");
    let req = JoinRequest { name: a.name.clone() };
    let cred = loop {
        match conn.send("POST", "/v1/agent/join", Some(&req), &[("authorization", bearer.as_str())]).await {
            Ok(r) if r.status < 400 => break r.json::<Credential>()?.credential,
            // Refused (a spent or bad token, a name that is taken): trying again cannot help.
            Ok(r) if r.status < 500 => anyhow::bail!("joining the cluster as node {}: {}", a.name, r.error()),
            Ok(r) => tracing::warn!(node = %a.name, "joining: {}", r.error()),
            Err(e) => tracing::warn!(node = %a.name, "joining: {:#}", anyhow::Error::from(e)),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    crate::launch::write_new(&path, cred.as_bytes(), true)
        .with_context(|| format!("keeping the node's credential in {}", path.display()))?;
    tracing::info!(node = %a.name, "joined the cluster; credential kept in {}", path.display());
    Ok(cred)
}

/// Registers, until the controller answers: with the tasks the agent has and those that ended.
async fn register(conn: &Conn, a: &AgentArgs, hdr: &[(&str, &str)], reg: &RegisterRequest) -> Result<RegisterResponse> {
    loop {
        match conn.send("POST", "/v1/agent/register", Some(reg), hdr).await.and_then(|r| r.json::<RegisterResponse>()) {
            Ok(r) => return Ok(r),
            Err(client::Error::Refused { status: status @ (401 | 403), message }) => {
                return Err(revoked(a, status, &message));
            }
            // A release the controller does not take: trying again cannot help.
            Err(client::Error::Refused { status: 426, message }) => {
                anyhow::bail!("the controller refuses this agent's release: {message}");
            }
            Err(e) => {
                tracing::warn!(node = %a.name, "registering: {:#}", anyhow::Error::from(e));
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Runs the agent until the process is stopped.
pub(crate) async fn run(a: AgentArgs) -> Result<()> {
    // Root's, and others may enter but not list it: each script in it is its user's, 0500.
    std::fs::set_permissions(&a.data, std::fs::Permissions::from_mode(0o711))?;
    let spool = crate::launch::make_spool(&a.data).with_context(|| format!("creating {}", a.data.join("spool").display()))?;
    let cg = std::sync::Arc::new(Cgroups::detect(&a.name));
    let records = std::sync::Arc::new(Tasks::open(&a.data)?);
    // Replica status changes: report them at once rather than at the next heartbeat.
    let changed = std::sync::Arc::new(tokio::sync::Notify::new());
    // A pull's start and end are told at once (its job's CONFIGURING).
    let _ = crate::container::WAKE.set(changed.clone());
    let mut node = model::Node::new(
        &a.name,
        a.cpus.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32)),
        a.memory.unwrap_or_else(machine_memory),
        0,
    );
    let (gpus, source) = match &a.gpus {
        Some(g) => (Some(g.clone()), "declared"),
        None => (nvml_gpus(), "NVML"),
    };
    // The built-in GPU check looks at NVML's GPUs, or at declared ones' injected faults.
    let probe: Option<Box<dyn crate::gpuhealth::GpuProbe>> = match (&gpus, source) {
        (Some((_, n)), "declared") => Some(Box::new(crate::gpuhealth::Declared { count: *n, file: a.data.join("gpu-faults") })),
        (Some(_), _) => crate::gpuhealth::Nvml::open().map(|p| Box::new(p) as Box<dyn crate::gpuhealth::GpuProbe>),
        (None, _) => None,
    };
    if let Some((ty, n)) = gpus {
        node.gpus = n;
        node.gpu_type = ty;
        tracing::info!(node = %a.name, "{} GPU(s) ({}), {source}", n, node.gpu_type.as_deref().unwrap_or("any model"));
    }
    node.features = a.features.clone();
    let mut reg = RegisterRequest {
        node: node.clone(),
        addr: a.addr.clone(),
        running: Vec::new(),
        exits: Vec::new(),
        version: Some(env!("CARGO_PKG_VERSION").to_string()),
    };
    // One connection to the controller for everything (HTTP/2 over TLS, kept open).
    let conn = Conn::new(a.server.clone());
    let credential = credential(&conn, &a).await?;
    let bearer = format!("Bearer {credential}");
    let hdr = [("authorization", bearer.as_str())];
    let uplink = crate::output::Uplink { target: a.server.clone(), authorization: bearer.clone() };
    // `kubectl logs -f` of a run's tasks here: told when the run's last task here has ended.
    let mut followers: HashMap<(u64, u32), Vec<tokio::sync::oneshot::Sender<()>>> = HashMap::new();
    let (tx, mut rx) = mpsc::unbounded_channel::<(TaskKey, Option<std::process::ExitStatus>)>();
    let mut tasks: HashMap<TaskKey, Running> = HashMap::new();
    let mut exits: Vec<TaskExit> = Vec::new();
    let mut launched: std::collections::HashSet<TaskKey> = std::collections::HashSet::new();
    // Runs this agent was told to suspend (and has not been told to resume): reported with
    // each heartbeat, so the controller can order again what a restart lost.
    let mut frozen: std::collections::BTreeSet<(u64, u32)> = std::collections::BTreeSet::new();
    // Before it reports anything: the tasks an earlier agent process started on this node.
    let replica_env =
        || crate::replica::Env { spool: spool.clone(), tasks: records.clone(), cg: cg.clone(), done: tx.clone(), changed: changed.clone() };
    let found = records.rediscover();
    let (mut adopted, mut finished, mut lost) = (0, 0, 0);
    for Found { task, cgroup, stopped, now } in found {
        let key = TaskKey { job: task.job, epoch: task.epoch, step: task.step, rank: task.rank };
        launched.insert(key);
        match now {
            Now::Running(kept) => {
                adopted += 1;
                if task.replica.is_some() {
                    let env = replica_env();
                    let shared = shared_of(&a.data, &task);
                    let ctl = crate::replica::spawn(task, env, Some((kept, cgroup)));
                    tasks.insert(
                        key,
                        Running { pgid: 0, container: shared, cgroup: None, freezer: None, replica: Some(ctl), started_at: None },
                    );
                } else {
                    if let (Some(c), Some((dir, _))) = (&task.container, shared_of(&a.data, &task)) {
                        crate::container::ALLOWED.insert(&key, task.uid, &c.image, &dir);
                    }
                    if kept.freezer.as_deref().is_some_and(crate::freezer::is_frozen) {
                        frozen.insert((key.job, key.epoch));
                    }
                    let freezer = kept.freezer.clone();
                    tasks.insert(
                        key,
                        Running { pgid: kept.pid, container: shared_of(&a.data, &task), cgroup, freezer, replica: None, started_at: None },
                    );
                    watch(kept, key, tx.clone());
                }
            }
            Now::Ended(st) => {
                finished += 1;
                let oom = cgroup.as_deref().is_some_and(Cgroups::oom);
                remove_cgroup(cgroup.as_deref());
                if key.step == BATCH_STEP {
                    let _ = std::fs::remove_file(script_path(&spool, key.job, key.epoch));
                }
                let mut exit = exit_of(key, Some(st), oom, stopped, &a.name);
                if task.container.is_some()
                    && let Some(why) = crate::container::forget(&a.data, &key)
                {
                    exit.error = Some(format!("{why} (on {})", a.name));
                }
                exits.push(exit);
            }
            Now::Lost => {
                if task.container.is_some() {
                    crate::container::forget(&a.data, &key);
                }
                lost += 1;
                remove_cgroup(cgroup.as_deref());
                if key.step == BATCH_STEP {
                    let _ = std::fs::remove_file(script_path(&spool, key.job, key.epoch));
                }
                exits.push(exit_of(key, None, false, stopped, &a.name));
            }
        }
    }
    // The containers no adopted task joined (their tasks ended while no agent ran).
    crate::container::sweep(&a.data, &tasks.values().filter_map(|r| r.container.as_ref().map(|(d, _)| d.clone())).collect());
    // The image socket, once the adopted container tasks are known (they may be asking).
    let images = image::Store::open(&a.data.join("images"), a.registries.clone()).map_err(|e| anyhow::anyhow!("{e}"))?;
    crate::container::serve(&a.data, std::sync::Arc::new(images), crate::container::ALLOWED.clone())?;
    if adopted + finished + lost > 0 {
        tracing::info!(node = %a.name,
            "found the tasks of an earlier agent process: {adopted} running (adopted), {finished} ended, {lost} lost"
        );
    }
    reg.running = tasks.keys().copied().collect();
    reg.exits = exits.clone();
    let mut info = register(&conn, &a, &hdr, &reg).await?;
    for e in exits.drain(..) {
        records.forget(&TaskKey { job: e.job, epoch: e.epoch, step: e.step, rank: e.rank });
    }
    tracing::info!(node = %a.name,
        "registered ({} CPUs, {} MiB, {} GPUs), lease {} s",
        node.cpus,
        node.memory >> 20,
        node.gpus,
        info.lease_s
    );
    // When the last heartbeat that got an answer was *sent*: the controller's lease for us runs
    // from no earlier than that, so fencing a margin before it ends comes before the controller
    // can give our jobs to another node.
    let mut last_ok = Instant::now();
    let mut fenced: std::collections::HashSet<TaskKey> = std::collections::HashSet::new();
    let mut sampler = crate::usage::Sampler::default();
    let mut ack: u64 = 0;
    let mut unsaved_said = false;
    // The node's prolog and epilog: runs whose prolog runs or ran here, runs over here whose
    // epilog waits for their tasks to go, and a drain the node asks for (a script failed).
    let (stx, mut srx) = mpsc::unbounded_channel::<crate::scripts::Done>();
    let mut prologs: HashMap<(u64, u32), Prolog> = HashMap::new();
    let mut epilogs: HashMap<(u64, u32), Vec<(String, String)>> = HashMap::new();
    let mut drain: Option<String> = None;
    let mut done_q: Vec<crate::scripts::Done> = Vec::new();
    // The health check: one at a time, every health_check_interval; its verdict goes with the
    // next heartbeat.
    // It runs in a task of its own (its settings from the last registration, the node's
    // idleness from this loop), so that it never interrupts a heartbeat's long poll.
    let mut health = Health::default();
    let health_cfg = std::sync::Arc::new(std::sync::Mutex::new(HealthCfg::of(&info)));
    let idle = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (htx, mut hrx) = mpsc::unbounded_channel::<Verdict>();
    // The check reaches the controller as the node (NHC's `scontrol update nodename=$(hostname)
    // state=drain`): the Slurm commands read these.
    let mut check_env = vec![
        ("SLURMD_NODENAME".to_string(), a.name.clone()),
        ("TANDEM_SERVER".to_string(), a.server_url.clone()),
        ("TANDEM_TOKEN".to_string(), credential.clone()),
    ];
    if let Some(ca) = &a.ca {
        check_env.push(("TANDEM_CA".to_string(), ca.display().to_string()));
    }
    spawn_health_loop(health_cfg.clone(), idle.clone(), check_env, probe, htx);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    // Registered, its earlier tasks adopted: systemd's `Type=notify` may go on.
    if let Err(e) = exec::notify_ready() {
        tracing::warn!(node = %a.name, "telling systemd the agent is ready: {e}");
    }
    // logrotate's SIGHUP opens the log file afresh (and no longer ends the agent).
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            logging::reopen_at_sighup();
        }
    });
    loop {
        // Collect exits that happened meanwhile.
        while let Ok((k, st)) = rx.try_recv() {
            exits.extend(ended(&mut tasks, &mut fenced, &spool, &cg, k, st, &a.name));
        }
        // Prologs and epilogs that ended: start the tasks that waited, or fail them.
        while let Ok(d) = srx.try_recv() {
            done_q.push(d);
        }
        while let Ok(verdict) = hrx.try_recv() {
            health.done(verdict, &a.name);
        }
        for d in std::mem::take(&mut done_q) {
            match script_done(d, &mut prologs, &a.name) {
                Ok(ready) => {
                    for t in ready {
                        let cold = frozen.contains(&(t.job, t.epoch));
                        start_task(t, &a, &spool, &records, &cg, &mut tasks, &mut exits, &tx, &replica_env, cold);
                    }
                }
                Err((failed, reason)) => {
                    exits.extend(failed);
                    drain = Some(reason);
                }
            }
        }
        // Epilogs whose runs' tasks here are gone.
        let due: Vec<(u64, u32)> = epilogs
            .keys()
            .filter(|r| {
                !tasks.keys().any(|k| (k.job, k.epoch) == **r) && !matches!(prologs.get(r), Some(Prolog::Running(_) | Prolog::Cancelled))
            })
            .copied()
            .collect();
        for run in due {
            if let (Some(env), Some(path)) = (epilogs.remove(&run), info.epilog.clone()) {
                let timeout = (info.prolog_epilog_timeout_s > 0).then(|| Duration::from_secs(info.prolog_epilog_timeout_s));
                crate::scripts::spawn(crate::scripts::Kind::Epilog, path, run.0, run.1, env, timeout, stx.clone());
            }
        }
        // Fencing: without a renewed lease, nothing of ours may keep running.
        let (lease, margin) = lease_and_margin(&info);
        if last_ok.elapsed() > lease - margin && tasks.keys().any(|k| !fenced.contains(k)) {
            tracing::error!(node = %a.name,
                "no contact with the controller for {:?}; fencing: killing {} task(s)",
                last_ok.elapsed(),
                tasks.len()
            );
            for (k, r) in &tasks {
                records.mark_stopped(k);
                match &r.replica {
                    Some(c) => c.stop(Signal::SIGKILL),
                    None => kill_group(r.pgid, Signal::SIGKILL),
                }
                fenced.insert(*k);
            }
        }
        idle.store(tasks.is_empty() && waiting(&prologs).next().is_none(), std::sync::atomic::Ordering::Relaxed);
        followers.retain(|(job, epoch), waiting| {
            let live = tasks.keys().any(|k| k.job == *job && k.epoch == *epoch);
            if !live {
                for w in waiting.drain(..) {
                    let _ = w.send(());
                }
            }
            live && waiting.iter().any(|w| !w.is_closed())
        });
        let sent = Instant::now();
        let hb = Heartbeat {
            node: a.name.clone(),
            ack,
            running: tasks.keys().copied().chain(waiting(&prologs)).collect(),
            exits: exits.clone(),
            wait_ms: if exits.is_empty() { info.heartbeat_ms } else { 0 },
            replicas: tasks.values().filter_map(|r| r.replica.as_ref().map(|c| c.status.lock().expect("lock").clone())).collect(),
            usage: sampler.sample(tasks.iter().map(|(k, r)| (*k, r.pgid()))),
            pulling: crate::container::pulls(),
            drain: drain.clone(),
            health_failed: health.failed.clone(),
            health_down: health.down,
            health_passed: health.passed,
            // Until the run is resumed or killed, with tasks here or not (a batch job's
            // other nodes have none until a step starts).
            frozen: frozen.iter().copied().collect(),
            started: tasks.iter().filter_map(|(k, r)| r.started_at.map(|at| (*k, at))).collect(),
        };
        let req = conn.send("POST", "/v1/agent/heartbeat", Some(&hb), &hdr);
        let reply = tokio::select! {
            r = req => Some(r),
            // A task ended during the long poll: report it now.
            m = rx.recv() => {
                if let Some((k, st)) = m {
                    exits.extend(ended(&mut tasks, &mut fenced, &spool, &cg, k, st, &a.name));
                }
                None
            }
            _ = changed.notified() => None,
            d = srx.recv() => {
                done_q.extend(d);
                None
            }
            // SIGTERM (`systemctl stop` or `restart` of the unit, an upgrade): the agent alone
            // ends; its tasks go on with their keepers, and its next start adopts them (past
            // its lease, their keepers end them). SIGINT (Ctrl-C, `tandem up` stopping): the
            // tasks are stopped too.
            _ = term.recv() => {
                if a.stop_tasks_on_sigterm {
                    shutdown(&tasks, &records);
                    return Ok(());
                }
                tracing::info!(node = %a.name, tasks = tasks.len(), "stopping; the tasks stay with their keepers, and a start within the lease adopts them");
                return Ok(());
            }
            _ = int.recv() => { shutdown(&tasks, &records); return Ok(()); }
        };
        let Some(reply) = reply else { continue };
        let orders = match reply {
            Ok(r) if r.status == 404 => {
                reg.running = tasks.keys().copied().chain(waiting(&prologs)).collect();
                reg.exits = exits.clone();
                info = match register(&conn, &a, &hdr, &reg).await {
                    Ok(i) => i,
                    Err(e) => {
                        shutdown(&tasks, &records);
                        return Err(e);
                    }
                };
                for e in exits.drain(..) {
                    records.forget(&TaskKey { job: e.job, epoch: e.epoch, step: e.step, rank: e.rank });
                }
                *health_cfg.lock().expect("health settings") = HealthCfg::of(&info);
                ack = 0;
                continue;
            }
            Ok(r) if r.status == 401 || r.status == 403 => {
                shutdown(&tasks, &records);
                return Err(revoked(&a, r.status, &r.error()));
            }
            Ok(r) if r.status == 503 && serde_json::from_slice::<wire::Unsaved>(&r.body).is_ok_and(|u| u.lease_renewed) => {
                // The controller took the heartbeat but cannot save (its disk is full, say): our
                // lease is renewed, nothing else is (the exits are reported again).
                if !unsaved_said {
                    tracing::warn!(node = %a.name, "{}; the lease is renewed, the work keeps running", r.error());
                    unsaved_said = true;
                }
                // The starts it told are known now.
                for (k, _) in &hb.started {
                    if let Some(r) = tasks.get_mut(k) {
                        r.started_at = None;
                    }
                }
                last_ok = sent;
                renew_keepers(&records, &info, sent);
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            Ok(r) => match r.json::<Orders>() {
                Ok(o) => o.orders,
                Err(e) => {
                    tracing::error!(node = %a.name, "heartbeat refused: {:#}", anyhow::Error::from(e));
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            },
            Err(e) => {
                tracing::warn!(node = %a.name, "heartbeat failed: {:#}", anyhow::Error::from(e));
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        last_ok = sent;
        unsaved_said = false;
        if hb.drain.is_some() && drain == hb.drain {
            drain = None; // the controller has it
        }
        if (hb.health_failed.is_some() || hb.health_passed) && (health.failed == hb.health_failed && health.passed == hb.health_passed) {
            (health.failed, health.passed, health.down) = (None, false, false);
        }
        renew_keepers(&records, &info, sent);
        for e in exits.drain(..) {
            records.forget(&TaskKey { job: e.job, epoch: e.epoch, step: e.step, rank: e.rank });
        }
        // A run ordered killed in the same reply that launches it is not started at all (a
        // cancel that came before the launch was delivered).
        let killed: std::collections::HashSet<(u64, u32)> = orders
            .iter()
            .filter(|(seq, _)| *seq > ack)
            .filter_map(|(_, o)| match o {
                Order::Kill { job, epoch } => Some((*job, *epoch)),
                _ => None,
            })
            .collect();
        for (seq, o) in orders {
            if seq <= ack {
                continue; // already carried out; resent because our acknowledgement was lost
            }
            ack = seq;
            match o {
                Order::Launch(t) => {
                    let key = TaskKey { job: t.job, epoch: t.epoch, step: t.step, rank: t.rank };
                    if !launched.insert(key) {
                        continue;
                    }
                    if killed.contains(&(t.job, t.epoch)) {
                        let st = std::process::ExitStatus::from_raw(Signal::SIGKILL as i32);
                        exits.push(exit_of(key, Some(st), false, false, &a.name));
                        continue;
                    }
                    // The node's prolog runs first, once per run here; the run's tasks wait for it.
                    if let Some(path) = info.prolog.clone().filter(|_| t.replica.is_none()) {
                        match prologs.get_mut(&(t.job, t.epoch)) {
                            None => {
                                let timeout = (info.prolog_epilog_timeout_s > 0).then(|| Duration::from_secs(info.prolog_epilog_timeout_s));
                                let env = t.script_env.clone();
                                crate::scripts::spawn(crate::scripts::Kind::Prolog, path, t.job, t.epoch, env, timeout, stx.clone());
                                prologs.insert((t.job, t.epoch), Prolog::Running(vec![t]));
                                continue;
                            }
                            Some(Prolog::Running(waiting)) => {
                                waiting.push(t);
                                continue;
                            }
                            Some(Prolog::Failed(why)) => {
                                exits.push(prolog_failure(key, why, &a.name));
                                continue;
                            }
                            Some(Prolog::Cancelled) => {
                                let st = std::process::ExitStatus::from_raw(Signal::SIGKILL as i32);
                                exits.push(exit_of(key, Some(st), false, false, &a.name));
                                continue;
                            }
                            Some(Prolog::Passed) => {}
                        }
                    }
                    let cold = frozen.contains(&(t.job, t.epoch));
                    start_task(t, &a, &spool, &records, &cg, &mut tasks, &mut exits, &tx, &replica_env, cold);
                }
                Order::Signal { job, epoch, signal, batch_only, step } => {
                    let Ok(sig) = Signal::try_from(signal) else { continue };
                    // Tasks still waiting for their run's prolog end by the signal, unstarted.
                    if let Some(Prolog::Running(queued)) = prologs.get_mut(&(job, epoch)) {
                        let hit = |t: &control::Task| (!batch_only || t.step == BATCH_STEP) && step.is_none_or(|s| t.step == s);
                        for t in queued.iter().filter(|t| hit(t)) {
                            let k = TaskKey { job: t.job, epoch: t.epoch, step: t.step, rank: t.rank };
                            exits.push(exit_of(k, Some(std::process::ExitStatus::from_raw(signal)), false, false, &a.name));
                        }
                        queued.retain(|t| !hit(t));
                    }
                    for (k, r) in &tasks {
                        if k.job == job && k.epoch == epoch && (!batch_only || k.step == BATCH_STEP) && step.is_none_or(|s| k.step == s) {
                            match &r.replica {
                                // The controller signals a replica only to stop it.
                                Some(c) => c.stop(sig),
                                None => kill_group(r.pgid, sig),
                            }
                        }
                    }
                }
                Order::Epilog { job, epoch, env } => {
                    // A prolog still running keeps its place: the epilog waits for it.
                    match prologs.get_mut(&(job, epoch)) {
                        Some(p @ (Prolog::Running(_) | Prolog::Cancelled)) => *p = Prolog::Cancelled,
                        _ => {
                            prologs.remove(&(job, epoch));
                        }
                    }
                    if info.epilog.is_some() {
                        // Run when the loop comes round and the run's tasks here are gone.
                        epilogs.insert((job, epoch), env);
                    }
                }
                Order::Reboot { program } => {
                    // The node is idle and drained; the program reboots the machine, and the
                    // agent started after it registers again. A failure drains the node.
                    tracing::info!(node = %a.name, "reboot ordered: running {program}");
                    let env = vec![("SLURMD_NODENAME".to_string(), a.name.clone())];
                    crate::scripts::spawn(crate::scripts::Kind::Reboot, program, 0, 0, env, None, stx.clone());
                }
                Order::Suspend { job, epoch } => {
                    // Tasks of the run that start later here are frozen once started
                    // (`start_task`).
                    set_frozen(&tasks, job, epoch, true, &a.name);
                    frozen.insert((job, epoch));
                }
                Order::Resume { job, epoch } => {
                    set_frozen(&tasks, job, epoch, false, &a.name);
                    if let Some(d) = cg.freezer.existing(job, epoch) {
                        let _ = crate::freezer::thaw(&d);
                    }
                    frozen.remove(&(job, epoch));
                }
                Order::Output { job, epoch, read } => {
                    let live = tasks.keys().any(|k| k.job == job && k.epoch == epoch);
                    let finish = (read.follow && live).then(|| {
                        let (tx, rx) = tokio::sync::oneshot::channel();
                        followers.entry((job, epoch)).or_default().push(tx);
                        rx
                    });
                    tokio::spawn(crate::output::serve(uplink.clone(), read, finish, a.name.clone()));
                }
                Order::Attach { job, epoch, step, io } => {
                    let addr = io.addr.clone();
                    if crate::stepio::attach(job, epoch, step, io) == 0 {
                        tracing::warn!("sattach {job}.{step} at {addr}: no task of that step relays its I/O on this node");
                    }
                }
                Order::Kill { job, epoch } => {
                    // Tasks that waited for the run's prolog never start; the prolog itself runs
                    // on to its end (the epilog waits for it).
                    match prologs.get_mut(&(job, epoch)) {
                        Some(p @ Prolog::Running(_)) => {
                            if let Prolog::Running(queued) = std::mem::replace(p, Prolog::Cancelled) {
                                for t in queued {
                                    let k = TaskKey { job: t.job, epoch: t.epoch, step: t.step, rank: t.rank };
                                    let st = std::process::ExitStatus::from_raw(Signal::SIGKILL as i32);
                                    exits.push(exit_of(k, Some(st), false, false, &a.name));
                                }
                            }
                        }
                        Some(Prolog::Cancelled) => {}
                        _ => {
                            prologs.remove(&(job, epoch));
                        }
                    }
                    // The run's named containers go with it (after its last task here).
                    if tasks.keys().any(|k| k.job == job && k.epoch == epoch) {
                        crate::container::ENDING.lock().expect("ending").insert((job, epoch));
                    } else {
                        crate::container::remove_named(&a.data, job, epoch);
                    }
                    for (k, r) in &tasks {
                        if k.job == job && k.epoch == epoch {
                            match &r.replica {
                                Some(c) => c.stop(Signal::SIGKILL),
                                None => kill_group(r.pgid, Signal::SIGKILL),
                            }
                            if let Some(dir) = &r.cgroup {
                                for pid in std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default().lines() {
                                    if let Ok(p) = pid.trim().parse::<i32>() {
                                        let _ = nix::sys::signal::kill(Pid::from_raw(p), Signal::SIGKILL);
                                    }
                                }
                            }
                        }
                    }
                    // A suspended run dies of its SIGKILL once thawed.
                    if frozen.remove(&(job, epoch)) {
                        set_frozen(&tasks, job, epoch, false, &a.name);
                    }
                    if let Some(d) = cg.freezer.existing(job, epoch) {
                        let _ = crate::freezer::thaw(&d);
                        if !tasks.keys().any(|k| k.job == job && k.epoch == epoch) {
                            crate::freezer::remove(&d);
                        }
                    }
                }
            }
        }
    }
}

/// For a batch step just started: this Unix second (the run's start in accounting).
fn unix_start(k: &TaskKey) -> Option<i64> {
    (k.step == BATCH_STEP).then(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64))
}

/// Starts a task the controller ordered (its prolog, if any, passed): a service replica under
/// its supervisor, anything else as a kept process; one that cannot start is reported ended
/// with the reason.
#[allow(clippy::too_many_arguments)]
fn start_task(
    t: control::Task,
    a: &AgentArgs,
    spool: &std::path::Path,
    records: &std::sync::Arc<Tasks>,
    cg: &std::sync::Arc<Cgroups>,
    tasks: &mut HashMap<TaskKey, Running>,
    exits: &mut Vec<TaskExit>,
    tx: &mpsc::UnboundedSender<(TaskKey, Option<std::process::ExitStatus>)>,
    replica_env: &dyn Fn() -> crate::replica::Env,
    frozen: bool,
) {
    let key = TaskKey { job: t.job, epoch: t.epoch, step: t.step, rank: t.rank };
    if t.replica.is_some() {
        let env = replica_env();
        let shared = shared_of(&a.data, &t);
        let ctl = crate::replica::spawn(t, env, None);
        tasks.insert(
            key,
            Running { pgid: 0, container: shared, cgroup: None, freezer: None, replica: Some(ctl), started_at: unix_start(&key) },
        );
        return;
    }
    // A task of a suspended run: its run's freezer cgroup is thawed for the launch (a task
    // that joined a frozen cgroup would stop before its exec, and the launch wait for that
    // exec), and the run frozen again, the new task with it, once it has started.
    let dir = if frozen { cg.freezer.existing(t.job, t.epoch) } else { None };
    if let Some(d) = &dir {
        let _ = crate::freezer::thaw(d);
    }
    let launched = launch(&t, &spool, &records, &cg);
    if frozen {
        let dirs = dir.into_iter().chain(launched.as_ref().ok().and_then(|(k, _)| k.freezer.clone()));
        for d in dirs.collect::<std::collections::BTreeSet<_>>() {
            let _ = crate::freezer::freeze(&d);
        }
    }
    match launched {
        Ok((kept, cgroup)) => {
            let freezer = kept.freezer.clone();
            let started_at = unix_start(&key);
            tasks.insert(key, Running { pgid: kept.pid, container: shared_of(&a.data, &t), cgroup, freezer, replica: None, started_at });
            watch(kept, key, tx.clone());
        }
        Err(e) => {
            // The user is told through the job (`scontrol show job`, `sacct`):
            // nothing is written to their files as root.
            tracing::warn!(node = %a.name, "job {} step {}: {e}", t.job, t.step);
            if let Some((dir, named)) = shared_of(&a.data, &t) {
                crate::container::ALLOWED.remove(&key);
                crate::container::forget(&a.data, &key);
                release_container(&tasks, &key, &dir, named);
            }
            if t.script.is_some() {
                let _ = std::fs::remove_file(script_path(&spool, t.job, t.epoch));
            }
            exits.push(TaskExit {
                job: t.job,
                epoch: t.epoch,
                step: t.step,
                rank: t.rank,
                code: Some(1),
                signal: None,
                oom: false,
                fenced: false,
                error: Some(format!("{e} (on {})", a.name)),
                lost: false,
                prolog_failed: false,
            });
        }
    }
}

/// A health check turn's verdict: passed, or failed with the reason, marking the node down
/// (`true`: the program exited with [`crate::scripts::DOWN_EXIT`]) or draining it.
type Verdict = std::result::Result<(), (String, bool)>;

/// The node's health check's verdict not yet reported.
#[derive(Default)]
struct Health {
    failed: Option<String>,
    down: bool,
    passed: bool,
}

impl Health {
    fn done(&mut self, result: Verdict, node: &str) {
        match result {
            Ok(()) => (self.failed, self.passed, self.down) = (None, true, false),
            Err((why, down)) => {
                let what = if down { "marking the node down" } else { "draining the node" };
                tracing::warn!(node = %node, "the health check failed: {why}; {what}");
                (self.failed, self.passed, self.down) = (Some(why), false, down);
            }
        }
    }
}

/// The health check's settings, from the last registration.
#[derive(Clone, Default)]
struct HealthCfg {
    program: Option<String>,
    interval: u64,
    state: Option<String>,
    gpu: bool,
}

impl HealthCfg {
    fn of(info: &RegisterResponse) -> HealthCfg {
        HealthCfg {
            program: info.health_check_program.clone(),
            interval: info.health_check_interval_s,
            state: info.health_check_node_state.clone(),
            gpu: info.gpu_health_check,
        }
    }
}

/// Starts the health check's loop: the program in a task of its own, the GPU check (whose
/// library calls block) on a thread of its own that it asks at each turn.
fn spawn_health_loop(
    cfg: std::sync::Arc<std::sync::Mutex<HealthCfg>>,
    idle: std::sync::Arc<std::sync::atomic::AtomicBool>,
    env: Vec<(String, String)>,
    probe: Option<Box<dyn crate::gpuhealth::GpuProbe>>,
    out: mpsc::UnboundedSender<Verdict>,
) {
    let gpu = probe.map(|mut p| {
        let (ask, asked) = std::sync::mpsc::channel::<tokio::sync::oneshot::Sender<Option<String>>>();
        std::thread::spawn(move || {
            // XIDs are events, and the ones that drain call for a reset: each stays in the
            // verdict for the agent's life (a restart, as after the reset or reboot, clears it).
            let mut seen: std::collections::BTreeMap<u32, Vec<u64>> = std::collections::BTreeMap::new();
            while let Ok(reply) = asked.recv() {
                let mut samples = p.look();
                for s in &mut samples {
                    let e = seen.entry(s.index).or_default();
                    for x in s.xids.drain(..) {
                        if !e.contains(&x) && e.len() < 64 {
                            e.push(x);
                        }
                    }
                    s.xids = e.clone();
                }
                let _ = reply.send(crate::gpuhealth::judge(&samples));
            }
        });
        ask
    });
    tokio::spawn(health_loop(cfg, idle, env, gpu, out));
}

/// Runs the node's health check every interval while one is configured (when the node's state
/// is the one asked for), one at a time, each killed at its next turn; verdicts go to `out`.
async fn health_loop(
    cfg: std::sync::Arc<std::sync::Mutex<HealthCfg>>,
    idle: std::sync::Arc<std::sync::atomic::AtomicBool>,
    env: Vec<(String, String)>,
    gpu: Option<std::sync::mpsc::Sender<tokio::sync::oneshot::Sender<Option<String>>>>,
    out: mpsc::UnboundedSender<Verdict>,
) {
    loop {
        let c = cfg.lock().expect("health settings").clone();
        let gpu = gpu.as_ref().filter(|_| c.gpu);
        if c.interval == 0 || (c.program.is_none() && gpu.is_none()) {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        let every = Duration::from_secs(c.interval);
        tokio::time::sleep(every).await;
        let idle = idle.load(std::sync::atomic::Ordering::Relaxed);
        let due = match c.state.as_deref() {
            Some("idle") => idle,
            Some("alloc") => !idle,
            _ => true,
        };
        if !due {
            continue;
        }
        // The GPUs first (a failing GPU is the reason when both fail), then the program.
        let gpu_verdict = match gpu {
            Some(ask) => {
                let (tx, rx) = tokio::sync::oneshot::channel();
                match ask.send(tx) {
                    Ok(()) => tokio::time::timeout(every, rx).await.ok().and_then(Result::ok).flatten(),
                    Err(_) => None,
                }
            }
            None => None,
        };
        let program_verdict = match &c.program {
            Some(program) => crate::scripts::run_status(crate::scripts::Kind::Health, program, env.clone(), Some(every))
                .await
                .map_err(|(why, code)| (why, code == Some(crate::scripts::DOWN_EXIT))),
            None => Ok(()),
        };
        let verdict = match (gpu_verdict, program_verdict) {
            (_, Err((why, true))) => Err((why, true)),
            (Some(why), _) => Err((why, false)),
            (None, v) => v,
        };
        if out.send(verdict).is_err() {
            return;
        }
    }
}

/// Where a run's prolog stands on this node.
enum Prolog {
    /// Running; these of the run's tasks wait for it.
    Running(Vec<control::Task>),
    /// It passed: the run's tasks start at once.
    Passed,
    /// It failed, so: the run's tasks here never start.
    Failed(String),
    /// The run was killed while its prolog ran: the prolog runs on to its end, and the run's
    /// epilog waits for it.
    Cancelled,
}

/// The tasks that wait for their run's prolog (reported running: the controller counts them).
fn waiting(prologs: &HashMap<(u64, u32), Prolog>) -> impl Iterator<Item = TaskKey> + '_ {
    prologs.values().flat_map(|p| match p {
        Prolog::Running(v) => v.iter().map(|t| TaskKey { job: t.job, epoch: t.epoch, step: t.step, rank: t.rank }).collect(),
        _ => Vec::new(),
    })
}

/// A task that never started because its run's prolog failed here.
fn prolog_failure(key: TaskKey, why: &str, node: &str) -> TaskExit {
    TaskExit {
        job: key.job,
        epoch: key.epoch,
        step: key.step,
        rank: key.rank,
        code: Some(1),
        signal: None,
        oom: false,
        fenced: false,
        error: Some(format!("{why} (on {node})")),
        lost: false,
        prolog_failed: true,
    }
}

/// A prolog or epilog ended: `Ok` with the tasks to start now (a prolog passed), or `Err` with
/// the ends to report (a prolog failed: its run's waiting tasks) and the node's drain reason.
fn script_done(
    d: crate::scripts::Done,
    prologs: &mut HashMap<(u64, u32), Prolog>,
    node: &str,
) -> std::result::Result<Vec<control::Task>, (Vec<TaskExit>, String)> {
    let run = (d.job, d.epoch);
    if matches!(prologs.get(&run), Some(Prolog::Cancelled)) && d.kind == crate::scripts::Kind::Prolog {
        prologs.remove(&run);
    }
    match (d.kind, d.result) {
        (crate::scripts::Kind::Prolog, Ok(())) => match prologs.get_mut(&run) {
            Some(p @ Prolog::Running(_)) => match std::mem::replace(p, Prolog::Passed) {
                Prolog::Running(v) => Ok(v),
                _ => Ok(Vec::new()),
            },
            // The run was killed meanwhile.
            _ => Ok(Vec::new()),
        },
        (kind, Err(why)) => {
            tracing::error!(node = %node, "job {} run {}: {why}; draining the node", d.job, d.epoch);
            let reason = kind.drain_reason(&why);
            let failed = match prologs.get_mut(&run) {
                Some(p @ Prolog::Running(_)) if kind == crate::scripts::Kind::Prolog => {
                    match std::mem::replace(p, Prolog::Failed(why.clone())) {
                        Prolog::Running(v) => v
                            .iter()
                            .map(|t| prolog_failure(TaskKey { job: t.job, epoch: t.epoch, step: t.step, rank: t.rank }, &why, node))
                            .collect(),
                        _ => Vec::new(),
                    }
                }
                _ => Vec::new(),
            };
            Err((failed, reason))
        }
        (crate::scripts::Kind::Epilog | crate::scripts::Kind::Health | crate::scripts::Kind::Reboot, Ok(())) => Ok(Vec::new()),
    }
}

/// The node's lease, and how long before its end the agent fences (a fifth of it, at least
/// half a second, at most half the lease).
fn lease_and_margin(info: &RegisterResponse) -> (Duration, Duration) {
    let lease = Duration::from_millis(info.lease_s.max(1) as u64 * 1000);
    (lease, (lease / 5).max(Duration::from_millis(500)).min(lease / 2))
}

/// Each task's keeper fences it a little after this agent would (and before the controller's
/// lease, which runs from no earlier than `sent`, the last answered heartbeat's sending, can
/// lapse).
fn renew_keepers(records: &Tasks, info: &RegisterResponse, sent: Instant) {
    let (lease, margin) = lease_and_margin(info);
    let deadline = exec::monotonic_ms() - sent.elapsed().as_millis() as i64 + (lease - margin / 2).as_millis() as i64;
    records.renew(deadline);
}

/// A task ended: forget it, remove its script and (once the run's last task here ended) its
/// cgroup, and say how it ended.
fn ended(
    tasks: &mut HashMap<TaskKey, Running>,
    fenced: &mut std::collections::HashSet<TaskKey>,
    spool: &std::path::Path,
    cg: &Cgroups,
    k: TaskKey,
    st: Option<std::process::ExitStatus>,
    node: &str,
) -> Option<TaskExit> {
    let r = tasks.remove(&k)?;
    let (oom, clean) = r.cgroup.as_deref().map_or((false, false), |d| cg.oom_state_of(d));
    if let Some((dir, named)) = &r.container {
        release_container(tasks, &k, dir, *named);
    }
    run_ended(tasks, spool.parent().unwrap_or(spool), &k);
    release_cgroup(tasks, cg, &k, r.cgroup, clean);
    if let Some(dir) = &r.freezer
        && !tasks.keys().any(|o| o.job == k.job && o.epoch == k.epoch)
    {
        cg.freezer.release(dir);
    }
    if k.step == BATCH_STEP {
        let _ = std::fs::remove_file(script_path(spool, k.job, k.epoch));
    }
    let mut exit = exit_of(k, st, oom, fenced.remove(&k), node);
    if r.container.is_some() {
        crate::container::ALLOWED.remove(&k);
        if let Some(why) = crate::container::forget(spool.parent().unwrap_or(spool), &k) {
            exit.error = Some(format!("{why} (on {node})"));
        }
    }
    Some(exit)
}

/// How a task ended, for the controller (`None`: not known).
fn exit_of(k: TaskKey, st: Option<std::process::ExitStatus>, oom: bool, fenced: bool, node: &str) -> TaskExit {
    TaskExit {
        job: k.job,
        epoch: k.epoch,
        step: k.step,
        rank: k.rank,
        code: st.and_then(|s| s.code()),
        signal: st.and_then(|s| s.signal()),
        oom,
        fenced,
        error: st.is_none().then(|| format!("how the task ended is not known: it outlived its agent and its keeper on {node}")),
        lost: st.is_none(),
        prolog_failed: false,
    }
}

/// Waits for a task's end in the background; tells the node loop.
fn watch(mut kept: crate::launch::Kept, key: TaskKey, tx: mpsc::UnboundedSender<(TaskKey, Option<std::process::ExitStatus>)>) {
    tokio::spawn(async move {
        let st = kept.wait().await;
        let _ = tx.send((key, st));
    });
}

/// Freezes (or thaws) a run's tasks on this node: through their run's freezer cgroup, which
/// holds whatever they started; where none could be made, by SIGSTOP (SIGCONT) to every
/// process of their memory cgroup and to their process groups.
fn set_frozen(tasks: &HashMap<TaskKey, Running>, job: u64, epoch: u32, freeze: bool, node: &str) {
    let mut dirs = std::collections::BTreeSet::new();
    let sig = if freeze { Signal::SIGSTOP } else { Signal::SIGCONT };
    for r in tasks.iter().filter(|(k, r)| k.job == job && k.epoch == epoch && r.replica.is_none()).map(|(_, r)| r) {
        match &r.freezer {
            Some(d) => {
                dirs.insert(d.clone());
            }
            None => {
                kill_group(r.pgid, sig);
                for p in r.cgroup.as_deref().map(crate::freezer::procs).unwrap_or_default() {
                    let _ = nix::sys::signal::kill(Pid::from_raw(p), sig);
                }
            }
        }
    }
    for d in dirs {
        let done = if freeze { crate::freezer::freeze(&d) } else { crate::freezer::thaw(&d) };
        if let Err(e) = done {
            let what = if freeze { "suspending" } else { "resuming" };
            tracing::info!(node = %node, "{what} job {job}: {}: {e}", d.display());
        }
    }
}

/// Removes an ended task's cgroup found at a restart, and its run's above it where it was a
/// step's (`rmdir` leaves one that still holds another task's).
fn remove_cgroup(dir: Option<&std::path::Path>) {
    let Some(dir) = dir else { return };
    let _ = std::fs::remove_dir(dir);
    if dir.file_name().is_some_and(|n| n.to_string_lossy().starts_with(crate::launch::STEP_CGROUP))
        && let Some(run) = dir.parent()
    {
        let _ = std::fs::remove_dir(run);
    }
}

/// Removes a job run's cgroup once its last task on this node has ended (or keeps it for the
/// next run: [`Cgroups::release`]), and a step's own (`srun --mem`) once the step's last task
/// here has.
fn release_cgroup(tasks: &HashMap<TaskKey, Running>, cg: &Cgroups, k: &TaskKey, dir: Option<PathBuf>, clean: bool) {
    let Some(dir) = dir else { return };
    let of_step = dir.file_name().is_some_and(|n| n.to_string_lossy().starts_with(crate::launch::STEP_CGROUP));
    let job_left = tasks.keys().any(|o| o.job == k.job && o.epoch == k.epoch);
    if of_step {
        if !tasks.keys().any(|o| o.job == k.job && o.epoch == k.epoch && o.step == k.step) {
            let _ = std::fs::remove_dir(&dir);
        }
        if !job_left && let Some(parent) = dir.parent() {
            cg.release(k.job, k.epoch, parent, clean);
        }
    } else if !job_left {
        cg.release(k.job, k.epoch, &dir, clean);
    }
}

/// The directory of the container a task joins, and whether it is named.
fn shared_of(data: &std::path::Path, t: &control::Task) -> Option<(PathBuf, bool)> {
    let c = t.container.as_ref()?;
    let k = TaskKey { job: t.job, epoch: t.epoch, step: t.step, rank: t.rank };
    Some((crate::container::shared_dir(data, &k, c), c.name.is_some()))
}

/// A container task ended: its container ends with the last task here that joined it; a
/// named one keeps its files for the job's next steps (removed at the job's end).
fn release_container(tasks: &HashMap<TaskKey, Running>, k: &TaskKey, dir: &std::path::Path, named: bool) {
    if tasks.values().any(|o| o.container.as_ref().is_some_and(|(d, _)| d == dir)) {
        return;
    }
    if named {
        // Its processes end with the job's last task here (its cgroup goes then too); its
        // files with the job (`run_ended`).
        if !tasks.keys().any(|o| o.job == k.job && o.epoch == k.epoch) {
            crate::container::stop(dir);
        }
    } else {
        crate::container::release(dir);
    }
}

/// A task of a run ordered killed ended: with the run's last task here, its named containers go.
fn run_ended(tasks: &HashMap<TaskKey, Running>, data: &std::path::Path, k: &TaskKey) {
    if !tasks.keys().any(|o| o.job == k.job && o.epoch == k.epoch)
        && crate::container::ENDING.lock().expect("ending").remove(&(k.job, k.epoch))
    {
        crate::container::remove_named(data, k.job, k.epoch);
    }
}

/// The agent is stopping: its tasks are told to end, marked as stopped by it.
fn shutdown(tasks: &HashMap<TaskKey, Running>, records: &Tasks) {
    for (k, r) in tasks {
        records.mark_stopped(k);
        match &r.replica {
            Some(c) => c.stop(Signal::SIGTERM),
            None => kill_group(r.pgid(), Signal::SIGTERM),
        }
    }
}
