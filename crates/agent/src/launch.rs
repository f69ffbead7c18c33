//! Launching a task: its script in the spool directory, its output files, its cgroups (cgroup v1
//! memory, where one can be made, and its run's freezer: `freezer`), and a fork and exec that joins the cgroup and drops to the
//! user in between (the `exec` crate), under a keeper that records how the task ended. Also
//! signalling a task's process group, and finding again, after a restart of the agent, the
//! tasks an earlier agent process started (`rediscover`). The lower layer of the agent: the
//! node loop (`node`) and the replica supervisor (`replica`) both launch through it; it knows
//! neither.
//!
//! Each task has two files in the agent's `tasks` directory (root's, 0700), named after its
//! key `JOB.RUN.STEP.RANK`: `.json`, the task as ordered (written before it starts), and
//! `.status`, which the task and its keeper write (`exec::Status`). A third, `.stopped`, marks
//! a task its agent killed (fencing, shutdown), not one that ended by itself. They are removed
//! once the controller has the task's end.

use anyhow::{Context, Result};
use control::{BATCH_STEP, Task, TaskKey};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

/// A task's file name stem: `JOB.RUN.STEP.RANK`.
fn stem(k: &TaskKey) -> String {
    format!("{}.{}.{}.{}", k.job, k.epoch, k.step, k.rank)
}

fn key_of(t: &Task) -> TaskKey {
    TaskKey { job: t.job, epoch: t.epoch, step: t.step, rank: t.rank }
}

/// What a task's `.json` file holds.
#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    task: Task,
    cgroup: Option<PathBuf>,
    /// Its run's freezer cgroup (`scontrol suspend`).
    #[serde(default)]
    freezer: Option<PathBuf>,
    /// The kernel's boot id when it started: after a reboot none of its processes exists.
    boot: String,
    /// The agent's program (a keeper is a fork of it).
    #[serde(default)]
    exe: Option<PathBuf>,
    /// Start times (`/proc/PID/stat`, clock ticks since boot) of the keeper and of the task,
    /// once started: a pid taken by another process since is not theirs.
    #[serde(default)]
    started: Option<(u64, u64)>,
}

/// A process's start time, clock ticks since boot (`/proc/PID/stat`, field 22).
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.split_whitespace().nth(19)?.parse().ok()
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default().trim().to_string()
}

/// The agent's record of the tasks it runs: `DATA/tasks`.
pub(crate) struct Tasks {
    dir: PathBuf,
    /// The fencing deadline given to each task's keeper (`exec::set_deadline`; 0: none yet).
    deadline_ms: std::sync::atomic::AtomicI64,
}

impl Tasks {
    /// The directory, created (root's alone) if need be.
    pub(crate) fn open(data: &Path) -> Result<Tasks> {
        let dir = data.join("tasks");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        Ok(Tasks { dir, deadline_ms: std::sync::atomic::AtomicI64::new(0) })
    }

    /// The controller answered a heartbeat: every task's keeper gets the new fencing deadline
    /// (`deadline_ms` of `exec::monotonic_ms`'s clock), before the controller's lease on this
    /// node can lapse; past it, with no newer one, the keeper kills its task (the agent died,
    /// hung, or lost the controller without fencing).
    pub(crate) fn renew<'a>(&self, deadline_ms: i64, keys: impl Iterator<Item = &'a TaskKey>) {
        self.deadline_ms.store(deadline_ms, std::sync::atomic::Ordering::SeqCst);
        for k in keys {
            if let Ok(f) = std::fs::OpenOptions::new().write(true).open(self.path(k, "status")) {
                let _ = exec::set_deadline(&f, deadline_ms);
            }
        }
    }

    fn path(&self, k: &TaskKey, ext: &str) -> PathBuf {
        self.dir.join(format!("{}.{ext}", stem(k)))
    }

    /// Marks a task as stopped by its agent (fenced, or the agent shutting down): a restarted
    /// agent reports its end as such, not as the task's own.
    pub(crate) fn mark_stopped(&self, k: &TaskKey) {
        let _ = std::fs::write(self.path(k, "stopped"), b"");
    }

    /// Forgets a task whose end the controller has.
    pub(crate) fn forget(&self, k: &TaskKey) {
        for ext in ["json", "status", "stopped"] {
            let _ = std::fs::remove_file(self.path(k, ext));
        }
    }
}

/// A started task: its process group, and its keeper to wait on.
pub(crate) struct Kept {
    /// The task's pid, which is also its process group.
    pub(crate) pid: i32,
    keeper: Keeper,
    status: PathBuf,
    /// Its run's freezer cgroup, which it joined.
    pub(crate) freezer: Option<PathBuf>,
}

enum Keeper {
    /// Started by this agent process: its child.
    Child(tokio::process::Child),
    /// Started by an earlier agent process: its pid and start time.
    Orphan {
        /// Pid.
        pid: i32,
        /// Start time, when known.
        started: Option<u64>,
    },
}

/// Whether `pid` is the live keeper it was: the same start time when that is known, else a
/// live process of the program that started it (a keeper is a fork of its agent).
fn keeper_alive(pid: i32, started: Option<u64>, exe: Option<&Path>) -> bool {
    if pid <= 0 || nix::sys::signal::kill(Pid::from_raw(pid), None).is_err() {
        return false;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
    if !state.is_some_and(|s| s != 'Z' && s != 'X') {
        return false;
    }
    if let Some(t) = started {
        return start_time(pid) == Some(t);
    }
    let running = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let want = exe.map(Path::to_path_buf).or_else(|| std::env::current_exe().ok());
    // A binary replaced on disk since reads as "PATH (deleted)".
    match (running, want) {
        (Some(e), Some(m)) => e == m || e.to_string_lossy().trim_end_matches(" (deleted)") == m.to_string_lossy(),
        _ => false,
    }
}

impl Kept {
    /// Waits for the task's end: its exit status, or `None` when it is not known (its keeper
    /// was killed, or died with the machine).
    pub(crate) async fn wait(&mut self) -> Option<ExitStatus> {
        match &mut self.keeper {
            Keeper::Child(c) => {
                let _ = c.wait().await;
            }
            Keeper::Orphan { pid, started } => {
                while keeper_alive(*pid, *started, None) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        status_of(&self.status)
    }
}

fn status_of(path: &Path) -> Option<ExitStatus> {
    let s = exec::Status::parse(&std::fs::read(path).unwrap_or_default());
    match (s.code, s.signal) {
        (Some(c), _) => Some(ExitStatus::from_raw((c & 0xff) << 8)),
        (_, Some(sig)) => Some(ExitStatus::from_raw(sig & 0x7f)),
        _ => None,
    }
}

/// A task an earlier agent process started, as found at start-up.
pub(crate) struct Found {
    /// The task as ordered.
    pub(crate) task: Task,
    /// Its cgroup.
    pub(crate) cgroup: Option<PathBuf>,
    /// Killed by its agent (fenced, shut down).
    pub(crate) stopped: bool,
    /// What became of it.
    pub(crate) now: Now,
}

/// What became of a task found at start-up.
pub(crate) enum Now {
    /// Still running under its keeper: adopted.
    Running(Kept),
    /// Ended, and how.
    Ended(ExitStatus),
    /// Gone without a trace of how it ended (killed and confirmed gone if it was alive).
    Lost,
}

impl Tasks {
    /// Finds the tasks an earlier agent process started: those still running (adopted: the
    /// caller goes on supervising them), those that ended meanwhile (with their status), and
    /// those lost (a keeper killed, a reboot), whose processes are killed if any is left. A
    /// task whose launch never began is forgotten (its order was not acknowledged, so the
    /// controller sends it again).
    pub(crate) fn rediscover(&self) -> Vec<Found> {
        let boot = boot_id();
        let mut found = Vec::new();
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return found };
        let mut names: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")).collect();
        names.sort();
        for path in names {
            let Ok(rec) = std::fs::read(&path).map_err(|_| ()).and_then(|b| serde_json::from_slice::<Record>(&b).map_err(|_| ())) else {
                let _ = std::fs::remove_file(&path);
                continue;
            };
            let key = key_of(&rec.task);
            let status_path = self.path(&key, "status");
            let status = exec::Status::parse(&std::fs::read(&status_path).unwrap_or_default());
            let stopped = self.path(&key, "stopped").exists() || status.fenced;
            let now = if status.ended() {
                Now::Ended(status_of(&status_path).expect("ended"))
            } else if status.task.is_none() && status.keeper.is_none() {
                // Its launch never began, or failed before the fork.
                self.forget(&key);
                continue;
            } else if rec.boot == boot && status.keeper.is_some_and(|k| keeper_alive(k, rec.started.map(|s| s.0), rec.exe.as_deref())) {
                let keeper = Keeper::Orphan { pid: status.keeper.unwrap_or(0), started: rec.started.map(|s| s.0) };
                Now::Running(Kept { pid: status.task.unwrap_or(0), keeper, status: status_path, freezer: rec.freezer.clone() })
            } else {
                // Killed only when surely the same process (a pid may have been reused since).
                if rec.boot == boot
                    && let (Some(pid), Some((_, t))) = (status.task, rec.started)
                    && start_time(pid) == Some(t)
                {
                    kill_gone(pid, rec.cgroup.as_deref(), rec.freezer.as_deref());
                }
                Now::Lost
            };
            found.push(Found { task: rec.task, cgroup: rec.cgroup, stopped, now });
        }
        found
    }
}

/// Kills what is left of a lost task (its process group, its cgroup's processes) and waits,
/// a bounded time, until they are gone.
fn kill_gone(pid: i32, cgroup: Option<&Path>, freezer: Option<&Path>) {
    for _ in 0..50 {
        kill_group(pid, Signal::SIGKILL);
        // A frozen process dies of its SIGKILL only once thawed.
        if let Some(f) = freezer {
            let _ = crate::freezer::thaw(f);
        }
        let mut left = nix::sys::signal::killpg(Pid::from_raw(pid), None).is_ok();
        if let Some(dir) = cgroup {
            for p in std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default().lines() {
                if let Ok(p) = p.trim().parse::<i32>() {
                    let _ = nix::sys::signal::kill(Pid::from_raw(p), Signal::SIGKILL);
                    left = true;
                }
            }
        }
        if !left {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("tandem agent: processes of lost task group {pid} are still there after SIGKILL");
}

/// The name of a step's cgroup inside its job's, before the step id.
pub(crate) const STEP_CGROUP: &str = "step_";

/// cgroup v1 memory hierarchy under the agent's own cgroup, when it can be used.
pub(crate) struct Cgroups {
    base: Option<PathBuf>,
    /// Runs' freezer cgroups.
    pub(crate) freezer: crate::freezer::Freezer,
}

impl Cgroups {
    pub(crate) fn detect(name: &str) -> Cgroups {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let rel = own.lines().find_map(|l| {
            let mut p = l.splitn(3, ':');
            let (_, ctrls, path) = (p.next()?, p.next()?, p.next()?);
            ctrls.split(',').any(|c| c == "memory").then(|| path.to_string())
        });
        // One directory per agent process: several agents (a local cluster, tests) may share a
        // node name on one machine, and must not share job cgroups.
        let base = rel.map(|r| {
            PathBuf::from("/sys/fs/cgroup/memory").join(r.trim_start_matches('/')).join(format!("tandem-{name}-{}", std::process::id()))
        });
        let freezer = crate::freezer::Freezer::detect(name);
        match base {
            Some(b) if std::fs::create_dir_all(&b).is_ok() && b.join("memory.limit_in_bytes").exists() => {
                Cgroups { base: Some(b), freezer }
            }
            _ => {
                eprintln!(
                    "tandem agent {name}: no writable cgroup memory controller here; tasks are tracked and killed by process group, without memory limits"
                );
                Cgroups { base: None, freezer }
            }
        }
    }

    /// The cgroup a task joins: its job run's (`job_J_E`, with the job's memory limit), or
    /// for a step with a memory limit of its own (`srun --mem`) a `step_S` inside it.
    pub(crate) fn create(&self, t: &Task) -> Option<PathBuf> {
        let base = self.base.as_ref()?;
        let dir = base.join(format!("job_{}_{}", t.job, t.epoch));
        std::fs::create_dir_all(&dir).ok()?;
        Self::limit(&dir, t.mem_limit)?;
        if t.step_mem == 0 || t.step == BATCH_STEP {
            return Some(dir);
        }
        let step = dir.join(format!("{STEP_CGROUP}{}", t.step));
        std::fs::create_dir_all(&step).ok()?;
        Self::limit(&step, t.step_mem)?;
        Some(step)
    }

    fn limit(dir: &Path, limit: u64) -> Option<()> {
        if limit > 0 {
            std::fs::write(dir.join("memory.limit_in_bytes"), limit.to_string()).ok()?;
            let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), limit.to_string());
        }
        Some(())
    }

    pub(crate) fn oom(dir: &Path) -> bool {
        let ctl = std::fs::read_to_string(dir.join("memory.oom_control")).unwrap_or_default();
        ctl.lines().any(|l| l.strip_prefix("oom_kill ").is_some_and(|n| n.trim() != "0"))
    }
}

/// Where a task's batch script is kept while it runs: `SPOOL/job_JOB_EPOCH.sh`.
pub(crate) fn script_path(spool: &Path, job: u64, epoch: u32) -> PathBuf {
    spool.join(format!("job_{job}_{epoch}.sh"))
}

/// Writes a batch script where only root and the job's user can read it: a fresh file
/// (created exclusively, never through a link), owned by the user, mode 0500, in the agent's
/// spool directory (root's, 0711: others may not list it). Removed when the task ends.
fn write_script(path: &Path, text: &str, uid: u32, gid: u32) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(text.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
    if nix::unistd::geteuid().is_root() {
        nix::unistd::fchown(&f, Some(nix::unistd::Uid::from_raw(uid)), Some(nix::unistd::Gid::from_raw(gid)))
            .with_context(|| format!("giving {} to uid {uid}", path.display()))?;
    }
    f.set_permissions(std::fs::Permissions::from_mode(0o500))?;
    Ok(())
}

/// Writes a fresh root-only file (by rename, never through a link); `durable`: synced to disk
/// first (the node's credential; not task records, written at every launch).
pub(crate) fn write_new(path: &Path, bytes: &[u8], durable: bool) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("new");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(nix::libc::O_NOFOLLOW).open(&tmp)?;
    f.write_all(bytes)?;
    if durable {
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// A task that could not start, and why, in words for the user (`scontrol show job`).
#[derive(Debug)]
pub(crate) struct LaunchError(pub(crate) String);

impl std::fmt::Display for LaunchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LaunchError {}

fn cstring(what: &str, s: &str) -> Result<std::ffi::CString, LaunchError> {
    std::ffi::CString::new(s).map_err(|_| LaunchError(format!("the {what} {s:?} contains a NUL byte")))
}

/// Starts a task, under a keeper, recorded in `tasks`. Its working directory and its output
/// and error files are entered and opened by the child after it has dropped to the job's user
/// (the `exec` crate), never by the agent.
pub(crate) fn launch(t: &Task, spool: &Path, tasks: &Tasks, cg: &Cgroups) -> Result<(Kept, Option<PathBuf>), LaunchError> {
    let (program, args): (String, Vec<String>) = match &t.script {
        Some(text) => {
            let path = script_path(spool, t.job, t.epoch);
            write_script(&path, text, t.uid, t.gid).map_err(|e| LaunchError(format!("{e:#}")))?;
            match t.login_env.then(std::env::current_exe) {
                // --get-user-env: this program, as the user, loads the login environment and
                // becomes the script (`loginenv`).
                Some(exe) => {
                    let exe = exe.map_err(|e| LaunchError(format!("--get-user-env: cannot find the agent's own program: {e}")))?;
                    let mut args = vec![crate::loginenv::LOGIN_ENV_CMD.to_string(), path.display().to_string()];
                    args.extend(t.argv.iter().cloned());
                    (exe.display().to_string(), args)
                }
                None => (path.display().to_string(), t.argv.clone()),
            }
        }
        None => match t.argv.split_first() {
            Some((p, rest)) => (p.clone(), rest.to_vec()),
            None => return Err(LaunchError("empty command".into())),
        },
    };
    // `--mpi=pmix`: `tandem __pmix-task` hosts the task's PMIx server and runs it (`pmix`).
    let (program, args) = if t.io.as_ref().is_some_and(|io| io.pmix) {
        if t.container.is_some() {
            return Err(LaunchError("--mpi=pmix cannot be used with --container-image yet".into()));
        }
        let exe = std::env::current_exe().map_err(|e| LaunchError(format!("--mpi=pmix: cannot find the agent's own program: {e}")))?;
        let mut a = vec![pmi::pmix::TASK_CMD.to_string(), "--".to_string(), program];
        a.extend(args);
        (exe.display().to_string(), a)
    } else {
        (program, args)
    };
    // A container task: `tandem __container` becomes runc in the image (`container`).
    let (program, args) = match &t.container {
        Some(c) => {
            // Checked by the controller too; here, before any path is made of them.
            c.check().map_err(|e| LaunchError(e.0))?;
            let data = spool.parent().unwrap_or(spool);
            let key = key_of(t);
            let bundle = crate::container::make_bundle(data, &key, t.uid, t.gid)
                .map_err(|e| LaunchError(format!("making the container's bundle directory: {e}")))?;
            // The container the step's tasks on this node share (a named one: the job's steps).
            let shared = crate::container::shared_dir(data, &key, c.name.as_deref());
            crate::container::make_shared(&shared, t.uid, t.gid)
                .map_err(|e| LaunchError(format!("making the container's directory: {e}")))?;
            // The job's GPUs on this node: the container's devices.
            let job_gpus: Vec<u8> = t
                .env
                .iter()
                .find(|(k, _)| k == "SLURM_JOB_GPUS")
                .map(|(_, v)| v.split(',').filter_map(|g| g.trim().parse().ok()).collect())
                .unwrap_or_default();
            let exe =
                std::env::current_exe().map_err(|e| LaunchError(format!("--container-image: cannot find the agent's own program: {e}")))?;
            let mut c = c.clone();
            if t.script.is_some() {
                if t.login_env {
                    return Err(LaunchError("--get-user-env cannot be used with --container-image: the script runs in the image".into()));
                }
                // The batch script, read-only at its own path inside.
                let script = script_path(spool, t.job, t.epoch).display().to_string();
                c.mounts.push(slurmcli::Mount { src: script.clone(), dst: script, readonly: true });
            }
            let spec = serde_json::to_string(&c).map_err(|e| LaunchError(e.to_string()))?;
            let mut a = vec![
                crate::container::CONTAINER_CMD.to_string(),
                data.join("image.sock").display().to_string(),
                bundle.display().to_string(),
                format!("{}.{}.{}.{}", key.job, key.epoch, key.step, key.rank),
                spec,
                serde_json::to_string(&crate::container::NodeSide {
                    gpus: t.gpus.clone(),
                    job_gpus,
                    cdi: crate::container::CDI_DIRS.get().cloned().unwrap_or_default(),
                    shared: shared.clone(),
                })
                .map_err(|e| LaunchError(e.to_string()))?,
                "--".to_string(),
                program,
            ];
            a.extend(args);
            crate::container::ALLOWED.insert(&key, t.uid, &c.image, &shared);
            (exe.display().to_string(), a)
        }
        None => (program, args),
    };
    // The site's task prolog and epilog: `tandem __task-wrap`, as the user, runs the prolog,
    // takes its exports and becomes the task (or, with an epilog, runs it as its child).
    let (program, args) = match &t.task_scripts {
        Some(ts) if ts.prolog.is_some() || ts.epilog.is_some() => {
            let exe = std::env::current_exe().map_err(|e| LaunchError(format!("task prolog: cannot find the agent's own program: {e}")))?;
            let timeout = if ts.timeout_s > 0 { ts.timeout_s } else { 60 };
            (exe.display().to_string(), crate::taskwrap::args_for(ts.prolog.as_deref(), ts.epilog.as_deref(), timeout, program, args))
        }
        _ => (program, args),
    };
    let cgroup = cg.create(t);
    // Service replicas are never suspended. A container's runc (rootless) refuses to start in
    // a freezer cgroup it may not write to: container tasks are stopped by signal instead.
    let freezer = if t.replica.is_none() && t.container.is_none() { cg.freezer.create(t.job, t.epoch) } else { None };
    // The record first: an agent that dies from here on finds the task again at its restart.
    let key = key_of(t);
    let status_path = tasks.path(&key, "status");
    let _ = std::fs::remove_file(tasks.path(&key, "stopped"));
    let mut rec = Record {
        task: t.clone(),
        cgroup: cgroup.clone(),
        freezer: freezer.clone(),
        boot: boot_id(),
        exe: std::env::current_exe().ok(),
        started: None,
    };
    let recorded = serde_json::to_vec(&rec)
        .map_err(std::io::Error::other)
        .and_then(|b| write_new(&tasks.path(&key, "json"), &b, false))
        .and_then(|()| std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&status_path));
    let status = match recorded {
        Ok(f) => f,
        Err(e) => {
            for dir in cgroup.iter().chain(&freezer) {
                let _ = std::fs::remove_dir(dir);
            }
            tasks.forget(&key);
            return Err(LaunchError(format!("recording the task in {}: {e}", tasks.dir.display())));
        }
    };
    // The child joins the job's cgroup while still root, then drops to the user, then enters
    // the working directory and opens its files, then becomes the task: all between fork and
    // exec, with system calls only (no exec of a launcher).
    let mut procs = Vec::new();
    for p in cgroup.iter().chain(&freezer) {
        procs.push(
            std::fs::OpenOptions::new()
                .write(true)
                .open(p.join("cgroup.procs"))
                .map_err(|e| LaunchError(format!("joining cgroup {}: {e}", p.display())))?,
        );
    }
    let procs: Vec<&std::fs::File> = procs.iter().collect();
    let user = (nix::unistd::geteuid().is_root() && t.uid != 0).then(|| exec::User::lookup(t.uid, t.gid));
    // An srun step's streams that go to srun: pipes (or a terminal) and a PMI socket, made now.
    let mut ends = match &t.io {
        Some(io) => Some(crate::stepio::make(t, io).map_err(|e| LaunchError(format!("making the task's pipes: {e}")))?),
        None => None,
    };
    let (mut out_file, mut err_file) = (Some(t.stdout.as_str()), Some(t.stderr.as_str()));
    if let Some(io) = &t.io {
        if io.pty {
            // Task 0 has the terminal; the others' streams are discarded, as Slurm's.
            (out_file, err_file) = if t.rank == 0 { (None, None) } else { (Some("/dev/null"), Some("/dev/null")) };
        } else {
            if io.stdout {
                out_file = None;
            }
            if io.stderr {
                err_file = None;
            }
        }
    }
    // exec opens `stdout` for both streams unless `stderr` differs; a stream that goes to srun
    // is then replaced by its pipe.
    let (so, se) = match (out_file, err_file) {
        (Some(o), Some(e)) => (Some(o), (e != o).then_some(e)),
        (Some(o), None) | (None, Some(o)) => (Some(o), None),
        (None, None) => (None, None),
    };
    let setup = exec::Setup {
        cgroup_procs: &procs,
        user,
        workdir: Some(cstring("working directory", &t.workdir)?),
        stdout: so.map(|p| cstring("output file", p)).transpose()?,
        stderr: se.map(|p| cstring("error file", p)).transpose()?,
        truncate: t.truncate,
        keep: Some(exec::Keep { status: &status }),
        stdio: ends.as_ref().map_or([None; 3], |e| e.stdio()),
        pty: ends.as_ref().is_some_and(|e| e.pty),
        inherit: ends.as_ref().and_then(|e| e.pmi_theirs.as_ref().map(std::os::fd::AsRawFd::as_raw_fd)),
        cpus: &t.cpus,
        umask: t.umask,
    };
    let mut cmd = tokio::process::Command::new(&program);
    let mut report = exec::prepare(cmd.as_std_mut(), setup).map_err(|e| LaunchError(format!("preparing the launch: {e}")))?;
    cmd.args(&args)
        .env_clear()
        .envs(t.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    if let Some(fd) = ends.as_ref().and_then(|e| e.pmi_theirs.as_ref()) {
        cmd.env("PMI_FD", std::os::fd::AsRawFd::as_raw_fd(fd).to_string());
    }
    match cmd.spawn() {
        Ok(child) => {
            // The task wrote its pid before it exec'd, and the spawn returns only after that.
            let pid = exec::Status::parse(&std::fs::read(&status_path).unwrap_or_default()).task.unwrap_or(0);
            let deadline = tasks.deadline_ms.load(std::sync::atomic::Ordering::SeqCst);
            if deadline > 0 {
                let _ = exec::set_deadline(&status, deadline);
            }
            if let (Some(k), Some(t)) = (child.id().and_then(|k| start_time(k as i32)), start_time(pid)) {
                rec.started = Some((k, t));
                if let Ok(b) = serde_json::to_vec(&rec) {
                    let _ = write_new(&tasks.path(&key, "json"), &b, false);
                }
            }
            if let (Some(mut e), Some(io)) = (ends.take(), t.io.clone()) {
                e.started();
                crate::stepio::relay(t, io, e);
            }
            Ok((Kept { pid, keeper: Keeper::Child(child), status: status_path, freezer }, cgroup))
        }
        Err(e) => {
            for dir in cgroup.iter().chain(&freezer) {
                let _ = std::fs::remove_dir(dir);
            }
            tasks.forget(&key);
            let e = e.to_string();
            let e = e.split(" (os error").next().unwrap_or(&e);
            Err(LaunchError(match report.failed() {
                Some(exec::Stage::Keep) => format!("cannot start the task's keeper: {e}"),
                Some(exec::Stage::Cgroup) => format!("cannot join the job's cgroup: {e}"),
                Some(exec::Stage::User) => format!("cannot switch to uid {}: {e}", t.uid),
                Some(exec::Stage::Workdir) => format!("cannot enter the working directory {} as uid {}: {e}", t.workdir, t.uid),
                Some(exec::Stage::Stdout) => format!("cannot open the output file {} as uid {}: {e}", t.stdout, t.uid),
                Some(exec::Stage::Stderr) => format!("cannot open the error file {} as uid {}: {e}", t.stderr, t.uid),
                Some(exec::Stage::Stdio) => format!("cannot take the streams (pipes, terminal, PMI socket) srun's step gave the task: {e}"),
                Some(exec::Stage::Affinity) => format!("cannot bind the task to CPUs {:?} (srun --cpu-bind): {e}", t.cpus),
                None => format!("cannot run {program}: {e}"),
            }))
        }
    }
}

pub(crate) fn kill_group(pgid: i32, sig: Signal) {
    if pgid <= 0 {
        return;
    }
    let _ = killpg(Pid::from_raw(pgid), sig);
}
