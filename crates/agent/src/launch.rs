//! Launching a task: its script in the spool directory, its output files, its cgroups (cgroup v1
//! memory, where one can be made, or cgroup v2's memory and CPUs: `cgroup2`; and its run's
//! freezer: `freezer`), and a fork and exec that joins the cgroup and drops to the
//! user in between (the `exec` crate), under a keeper that records how the task ended. Also
//! signalling a task's process group, and finding again, after a restart of the agent, the
//! tasks an earlier agent process started (`rediscover`). The lower layer of the agent: the
//! node loop (`node`) and the replica supervisor (`replica`) both launch through it; it knows
//! neither.
//!
//! The agent's `tasks` directory (root's, 0700) holds two files for all its tasks, so that no
//! file is made or removed per task: `log`, one JSON line per change (a task as ordered,
//! written before it starts, with its slot; its start times; that its agent killed it, by
//! fencing or at shutdown, rather than it ending by itself; that the controller has its end,
//! so it is forgotten), rewritten with only the live tasks once it has grown; and `status`, the
//! table whose slots the tasks and their keepers write (`exec::Status`), with the fencing
//! deadline in its header. Tasks started by an older agent, one `JOB.RUN.STEP.RANK.json`,
//! `.status` and `.stopped` file each, are still found and adopted (an upgrade with jobs
//! running).

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

/// A task as recorded: as ordered, with what finds it again after a restart.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
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
    /// When it was recorded, clock ticks since boot (its task starts just after).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    recorded: Option<u64>,
}

/// One line of the task log.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum Entry {
    /// A task about to start, kept in `slot` of the status table.
    Launch { slot: u32, record: Box<Record> },
    /// Its keeper's and its own start times.
    Started { key: TaskKey, at: (u64, u64) },
    /// Killed by its agent (fenced, shut down).
    Stopped { key: TaskKey },
    /// The controller has its end.
    Forget { key: TaskKey },
}

/// [`Entry::Launch`], written from a borrowed record.
#[derive(serde::Serialize)]
#[serde(rename_all = "snake_case")]
enum LaunchRef<'a> {
    Launch { slot: u32, record: &'a Record },
}

/// A process's start time, clock ticks since boot (`/proc/PID/stat`, field 22).
fn start_time(pid: i32) -> Option<u64> {
    let stat = crate::kfile::read_text(None, Path::new(&format!("/proc/{pid}/stat"))).ok()?;
    stat.rsplit_once(") ")?.1.split_whitespace().nth(19)?.parse().ok()
}

/// Clock ticks since boot now, in the unit of `/proc/PID/stat`'s start time: `CLOCK_BOOTTIME`,
/// the clock of both that start time and `/proc/uptime` (read through the vDSO, with no system
/// call, on kernels 5.3 and later: this runs for every launch).
fn ticks_now() -> Option<u64> {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).ok()?;
    let centis = (t.tv_sec() as u64).checked_mul(100)? + t.tv_nsec() as u64 / 10_000_000;
    // USER_HZ = 100; a tick early, so a task started at once is never before it.
    Some(centis.saturating_sub(1))
}

/// Whether process group `pgid` is a lost task's, recorded as `rec`: on this boot, and its
/// leader is the task (its start time the one recorded, or, when its agent died before it
/// could record it, within a minute of the record), or the leader is gone while the group
/// lives on (a pid in use as a process group is not given to a new process).
fn group_is_the_tasks(pgid: i32, rec: &Record, boot: &str) -> bool {
    if rec.boot != boot || pgid <= 0 || nix::sys::signal::killpg(Pid::from_raw(pgid), None).is_err() {
        return false;
    }
    match (start_time(pgid), rec.started, rec.recorded) {
        (Some(t), Some((_, want)), _) => t == want,
        (Some(t), None, Some(at)) => t >= at && t <= at + 60 * 100,
        (Some(_), None, None) => false,
        (None, _, _) => true,
    }
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default().trim().to_string()
}

/// A task the log holds.
struct Live {
    slot: u32,
    record: Record,
    stopped: bool,
}

/// The log and the slots, under one lock.
struct Book {
    /// The log, open for appending.
    log: std::fs::File,
    /// Lines in it.
    lines: usize,
    live: std::collections::HashMap<TaskKey, Live>,
    /// Slots free to reuse, and the first never used.
    free: std::collections::BTreeSet<u32>,
    next: u32,
    /// Tasks an older agent started: their own status files.
    legacy: std::collections::HashMap<TaskKey, PathBuf>,
}

/// The agent's record of the tasks it runs: `DATA/tasks`.
pub(crate) struct Tasks {
    dir: PathBuf,
    /// The status table.
    table: std::sync::Arc<std::fs::File>,
    book: std::sync::Mutex<Book>,
    boot: String,
    exe: Option<PathBuf>,
    /// Who forks the tasks.
    spawner: Spawner,
    /// The last keeper's pid and start time (one launcher keeps many tasks).
    keeper: std::sync::Mutex<Option<(i32, u64)>>,
}

/// Who forks the tasks: the agent's launcher process (`launcher`), or, in unit tests, the
/// test process itself.
pub(crate) enum Spawner {
    Launcher(crate::launcher::Launcher),
    #[cfg(test)]
    Here,
}

impl Spawner {
    fn launch(
        &self,
        r: &crate::launcher::Request,
        fds: &[std::os::fd::RawFd],
        table: &std::sync::Arc<std::fs::File>,
    ) -> Result<(i32, tokio::sync::oneshot::Receiver<bool>), crate::launcher::Failure> {
        match self {
            Spawner::Launcher(l) => l.launch(r, fds, table),
            #[cfg(test)]
            Spawner::Here => crate::launcher::spawn_here(r, fds, table),
        }
    }
}

/// The log is rewritten when it holds more lines than this beyond twice its live tasks.
const LOG_SLACK: usize = 4096;

fn open_private(path: &Path, append: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut o = std::fs::OpenOptions::new();
    if append {
        o.append(true);
    } else {
        o.read(true).write(true);
    }
    o.create(true).mode(0o600).custom_flags(nix::libc::O_NOFOLLOW).open(path)
}

impl Tasks {
    /// The directory, created (root's alone) if need be, and its two files.
    pub(crate) fn open(data: &Path) -> Result<Tasks> {
        // A binary replaced on disk since this agent started reads as "PATH (deleted)": the
        // launcher is then the new one.
        let exe = std::env::current_exe().context("finding the agent's own program")?;
        let exe = PathBuf::from(exe.to_string_lossy().trim_end_matches(" (deleted)"));
        Tasks::with_spawner(data, Spawner::Launcher(crate::launcher::Launcher::new(exe, data.to_path_buf())))
    }

    /// The same, tasks forked by `spawner`.
    pub(crate) fn with_spawner(data: &Path, spawner: Spawner) -> Result<Tasks> {
        let dir = data.join("tasks");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        let table = open_private(&dir.join("status"), false).with_context(|| format!("opening {}", dir.join("status").display()))?;
        let log = open_private(&dir.join("log"), true).with_context(|| format!("opening {}", dir.join("log").display()))?;
        let book = Book {
            log,
            lines: 0,
            live: std::collections::HashMap::new(),
            free: std::collections::BTreeSet::new(),
            next: 0,
            legacy: std::collections::HashMap::new(),
        };
        Ok(Tasks {
            dir,
            table: std::sync::Arc::new(table),
            book: std::sync::Mutex::new(book),
            boot: boot_id(),
            exe: std::env::current_exe().ok(),
            spawner,
            keeper: std::sync::Mutex::new(None),
        })
    }

    /// A keeper's start time (read once per keeper).
    fn keeper_start(&self, pid: i32) -> Option<u64> {
        let mut k = self.keeper.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((p, t)) = *k
            && p == pid
        {
            return Some(t);
        }
        let t = start_time(pid)?;
        *k = Some((pid, t));
        Some(t)
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Appends one line to the log, and rewrites the log once it has grown.
    fn append(&self, b: &mut Book, e: &impl serde::Serialize) -> std::io::Result<()> {
        use std::io::Write;
        let mut line = serde_json::to_vec(e).map_err(std::io::Error::other)?;
        line.push(b'\n');
        b.log.write_all(&line)?;
        b.lines += 1;
        if b.lines > 2 * b.live.len() + LOG_SLACK {
            self.compact(b)?;
        }
        Ok(())
    }

    /// Rewrites the log with the live tasks alone (a fresh file renamed into place).
    fn compact(&self, b: &mut Book) -> std::io::Result<()> {
        let mut text = Vec::new();
        let mut lines = 0;
        let mut keys: Vec<&TaskKey> = b.live.keys().collect();
        keys.sort_by_key(|k| (k.job, k.epoch, k.step, k.rank));
        for k in keys {
            let l = &b.live[k];
            serde_json::to_writer(&mut text, &LaunchRef::Launch { slot: l.slot, record: &l.record }).map_err(std::io::Error::other)?;
            text.push(b'\n');
            lines += 1;
            if l.stopped {
                serde_json::to_writer(&mut text, &Entry::Stopped { key: *k }).map_err(std::io::Error::other)?;
                text.push(b'\n');
                lines += 1;
            }
        }
        let path = self.dir.join("log");
        write_new(&path, &text, false)?;
        b.log = open_private(&path, true)?;
        b.lines = lines;
        Ok(())
    }

    /// Records a task before its launch, in a free slot of the status table (emptied); returns
    /// the slot.
    fn record(&self, rec: Record) -> std::io::Result<u32> {
        let mut b = self.book();
        let key = key_of(&rec.task);
        if let Some(old) = b.live.remove(&key) {
            b.free.insert(old.slot);
        }
        let slot = match b.free.pop_first() {
            Some(s) => s,
            None => {
                b.next += 1;
                b.next - 1
            }
        };
        let done = exec::clear_slot(&self.table, slot).and_then(|()| self.append(&mut b, &LaunchRef::Launch { slot, record: &rec }));
        match done {
            Ok(()) => {
                b.live.insert(key, Live { slot, record: rec, stopped: false });
                Ok(slot)
            }
            Err(e) => {
                b.free.insert(slot);
                Err(e)
            }
        }
    }

    /// Records a started task's start times (its keeper's, its own).
    fn started(&self, key: &TaskKey, at: (u64, u64)) {
        let mut b = self.book();
        let Some(l) = b.live.get_mut(key) else { return };
        l.record.started = Some(at);
        let _ = self.append(&mut b, &Entry::Started { key: *key, at });
    }

    /// The controller answered a heartbeat: every task's keeper gets the new fencing deadline
    /// (`deadline_ms` of `exec::monotonic_ms`'s clock), before the controller's lease on this
    /// node can lapse; past it, with no newer one, the keeper kills its task (the agent died,
    /// hung, or lost the controller without fencing). One write for all of them.
    pub(crate) fn renew(&self, deadline_ms: i64) {
        let _ = exec::set_deadline(&self.table, deadline_ms);
        let legacy: Vec<PathBuf> = self.book().legacy.values().cloned().collect();
        for path in legacy {
            if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&path) {
                let _ = exec::set_deadline_at(&f, exec::LEGACY_DEADLINE_AT, deadline_ms);
            }
        }
    }

    fn legacy_path(&self, k: &TaskKey, ext: &str) -> PathBuf {
        self.dir.join(format!("{}.{ext}", stem(k)))
    }

    /// Marks a task as stopped by its agent (fenced, or the agent shutting down): a restarted
    /// agent reports its end as such, not as the task's own.
    pub(crate) fn mark_stopped(&self, k: &TaskKey) {
        let mut b = self.book();
        if let Some(l) = b.live.get_mut(k) {
            if !l.stopped {
                l.stopped = true;
                let _ = self.append(&mut b, &Entry::Stopped { key: *k });
            }
        } else if b.legacy.contains_key(k) {
            let _ = std::fs::write(self.legacy_path(k, "stopped"), b"");
        }
    }

    /// Forgets a task whose end the controller has.
    pub(crate) fn forget(&self, k: &TaskKey) {
        let mut b = self.book();
        if let Some(l) = b.live.remove(k) {
            b.free.insert(l.slot);
            let _ = self.append(&mut b, &Entry::Forget { key: *k });
        }
        if b.legacy.remove(k).is_some() {
            for ext in ["json", "status", "stopped"] {
                let _ = std::fs::remove_file(self.legacy_path(k, ext));
            }
        }
    }
}

/// Where a kept task's status is: its slot of the status table, or the status file of a task
/// an older agent started.
enum StatusAt {
    Slot(std::sync::Arc<std::fs::File>, u32),
    File(PathBuf),
}

impl StatusAt {
    fn read(&self) -> exec::Status {
        match self {
            StatusAt::Slot(table, slot) => exec::Status::read(table, *slot).unwrap_or_default(),
            StatusAt::File(path) => exec::Status::parse(&std::fs::read(path).unwrap_or_default()),
        }
    }
}

/// A started task: its process group, and its keeper to wait on.
pub(crate) struct Kept {
    /// The task's pid, which is also its process group.
    pub(crate) pid: i32,
    keeper: Keeper,
    /// Its keeper's pid and start time (when known): a process kept alive while the task runs
    /// (a launcher keeps several).
    keeper_pid: i32,
    keeper_started: Option<u64>,
    /// The task's start time, when known (to kill it only if it is still the same process).
    started: Option<u64>,
    status: StatusAt,
    /// Its run's freezer cgroup, which it joined.
    pub(crate) freezer: Option<PathBuf>,
}

enum Keeper {
    /// Kept by this agent's launcher: word of the task's end from it (`false`: the launcher is
    /// gone; look in the status table).
    Launched(tokio::sync::oneshot::Receiver<bool>),
    /// Kept by the launcher (or a keeper) of an earlier agent process.
    Orphan,
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
        let told = match &mut self.keeper {
            Keeper::Launched(reaped) => reaped.await.unwrap_or(false),
            Keeper::Orphan => false,
        };
        if !told {
            while !self.status.read().ended() && keeper_alive(self.keeper_pid, self.keeper_started, None) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let st = exit_status(&self.status.read());
        // Its keeper is gone and its group may not be: reported lost, it must not run on.
        let group_left = nix::sys::signal::killpg(Pid::from_raw(self.pid), None).is_ok();
        if st.is_none() && group_left && self.started.is_none_or(|t| start_time(self.pid).is_none_or(|now| now == t)) {
            kill_group(self.pid, Signal::SIGKILL);
        }
        st
    }
}

fn exit_status(s: &exec::Status) -> Option<ExitStatus> {
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
        let mut found = Vec::new();
        let mut b = self.book();
        // The log, replayed (a line cut short by a crash is skipped).
        let text = std::fs::read(self.dir.join("log")).unwrap_or_default();
        let mut live: std::collections::HashMap<TaskKey, Live> = std::collections::HashMap::new();
        for line in text.split(|c| *c == b'\n').filter(|l| !l.is_empty()) {
            match serde_json::from_slice::<Entry>(line) {
                Ok(Entry::Launch { slot, record }) => {
                    live.insert(key_of(&record.task), Live { slot, record: *record, stopped: false });
                }
                Ok(Entry::Started { key, at }) => {
                    if let Some(l) = live.get_mut(&key) {
                        l.record.started = Some(at);
                    }
                }
                Ok(Entry::Stopped { key }) => {
                    if let Some(l) = live.get_mut(&key) {
                        l.stopped = true;
                    }
                }
                Ok(Entry::Forget { key }) => {
                    live.remove(&key);
                }
                Err(_) => {}
            }
        }
        // No slot seen in the log is used again by this process unless it is free: a task whose
        // launch had begun when its agent died may still write to its slot.
        b.next = live.values().map(|l| l.slot + 1).max().unwrap_or(0);
        let mut keys: Vec<TaskKey> = live.keys().copied().collect();
        keys.sort_by_key(|k| (k.job, k.epoch, k.step, k.rank));
        let mut unstarted = std::collections::BTreeSet::new();
        for key in keys {
            let l = live.remove(&key).expect("listed");
            let at = StatusAt::Slot(self.table.clone(), l.slot);
            let Some(now) = self.what_became(&l.record, &at) else {
                unstarted.insert(l.slot);
                continue;
            };
            found.push(Found { task: l.record.task.clone(), cgroup: l.record.cgroup.clone(), stopped: l.stopped || at.read().fenced, now });
            b.live.insert(key, l);
        }
        let used: std::collections::BTreeSet<u32> = b.live.values().map(|l| l.slot).collect();
        b.free = (0..b.next).filter(|s| !used.contains(s) && !unstarted.contains(s)).collect();
        // Tasks an older agent started: a file each.
        let mut names: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")).collect())
            .unwrap_or_default();
        names.sort();
        for path in names {
            let Ok(rec) = std::fs::read(&path).map_err(|_| ()).and_then(|b| serde_json::from_slice::<Record>(&b).map_err(|_| ())) else {
                let _ = std::fs::remove_file(&path);
                continue;
            };
            let key = key_of(&rec.task);
            let status_path = self.legacy_path(&key, "status");
            let at = StatusAt::File(status_path.clone());
            let Some(now) = self.what_became(&rec, &at) else {
                for ext in ["json", "status", "stopped"] {
                    let _ = std::fs::remove_file(self.legacy_path(&key, ext));
                }
                continue;
            };
            let stopped = self.legacy_path(&key, "stopped").exists() || at.read().fenced;
            found.push(Found { task: rec.task, cgroup: rec.cgroup, stopped, now });
            b.legacy.insert(key, status_path);
        }
        // The log from here on: the tasks found, alone.
        if let Err(e) = self.compact(&mut b) {
            tracing::error!("rewriting {}: {e}", self.dir.join("log").display());
        }
        found
    }

    /// What became of a recorded task while no agent watched it; `None`: its launch never
    /// began (or failed before the fork), so it is forgotten (its order was not acknowledged,
    /// so the controller sends it again).
    fn what_became(&self, rec: &Record, at: &StatusAt) -> Option<Now> {
        let status = at.read();
        Some(if status.ended() {
            Now::Ended(exit_status(&status).expect("ended"))
        } else if status.task.is_none() && status.keeper.is_none() {
            return None;
        } else if rec.boot == self.boot && status.keeper.is_some_and(|k| keeper_alive(k, rec.started.map(|s| s.0), rec.exe.as_deref())) {
            let status_at = match at {
                StatusAt::Slot(t, s) => StatusAt::Slot(t.clone(), *s),
                StatusAt::File(p) => StatusAt::File(p.clone()),
            };
            Now::Running(Kept {
                pid: status.task.unwrap_or(0),
                keeper: Keeper::Orphan,
                keeper_pid: status.keeper.unwrap_or(0),
                keeper_started: rec.started.map(|s| s.0),
                started: rec.started.map(|s| s.1),
                status: status_at,
                freezer: rec.freezer.clone(),
            })
        } else {
            // Killed only when surely the same processes (a pid may have been reused since).
            if let Some(pid) = status.task
                && group_is_the_tasks(pid, rec, &self.boot)
            {
                kill_gone(pid, rec.cgroup.as_deref(), rec.freezer.as_deref());
            }
            Now::Lost
        })
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
    tracing::error!("processes of lost task group {pid} are still there after SIGKILL");
}

pub(crate) use crate::cgroup2::STEP_CGROUP;

/// The cgroups of the agent's runs: cgroup v1's memory hierarchy under the agent's own cgroup
/// where it can be used, else cgroup v2's unified one ([`crate::cgroup2`]: memory and CPUs).
pub(crate) struct Cgroups {
    base: Option<PathBuf>,
    /// Whether `base` is in the unified hierarchy (runs' limits on `job_J_E`, tasks in its
    /// step leaves).
    v2: bool,
    /// Runs' freezer cgroups.
    pub(crate) freezer: crate::freezer::Freezer,
    /// cgroup v1: emptied runs' memory cgroups kept for the next runs ([`crate::spare`]).
    spares: crate::spare::Spares,
    /// cgroup v1: the runs whose memory cgroup this agent made, with its memory limit (0: none)
    /// and whether it may be kept as a spare when they end: no step's cgroup was made below it
    /// and no container's.
    runs: std::sync::Mutex<std::collections::HashMap<(u64, u32), (u64, bool)>>,
}

/// The most memory a run's cgroup may still be charged with (page cache its tasks read or
/// wrote, kernel objects) when it ends and is kept for the next run: about what a short
/// task leaves; one with more is removed, so no run starts charged with another's files.
const SPARE_CHARGE: u64 = 4 << 20;

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
        let dir = format!("tandem-{name}-{}", std::process::id());
        let base = rel.map(|r| PathBuf::from("/sys/fs/cgroup/memory").join(r.trim_start_matches('/')).join(&dir));
        if let Some(b) = base
            && std::fs::create_dir_all(&b).is_ok()
            && b.join("memory.limit_in_bytes").exists()
        {
            if let Some(top) = b.parent() {
                crate::spare::sweep(top);
            }
            return Cgroups::v1(Some(b.clone()), crate::spare::Spares::in_dir(b), crate::freezer::Freezer::detect(name));
        }
        let mounts = [Path::new("/sys/fs/cgroup/unified"), Path::new("/sys/fs/cgroup")];
        if let Some(mount) = crate::cgroup2::unified_root(&own, &mounts) {
            crate::cgroup2::sweep(&mount.join(crate::cgroup2::TREE));
            match crate::cgroup2::prepare(&mount, &dir) {
                Ok(base) => {
                    tracing::info!(node = %name, "cgroup v2: jobs' memory and CPUs are limited in {}", base.display());
                    return Cgroups {
                        base: Some(base.clone()),
                        v2: true,
                        freezer: crate::freezer::Freezer::within(base),
                        spares: crate::spare::Spares::off(),
                        runs: Default::default(),
                    };
                }
                Err(e) => tracing::warn!(node = %name,
                    "cannot set up cgroup v2 limits under {} ({e}): the agent must run as root with /sys/fs/cgroup writable",
                    mount.join(crate::cgroup2::TREE).display()
                ),
            }
        }
        tracing::warn!(node = %name,
            "no writable cgroup memory controller here; tasks are tracked and killed by process group, without memory limits"
        );
        Cgroups::v1(None, crate::spare::Spares::off(), crate::freezer::Freezer::detect(name))
    }

    /// cgroup v1's memory hierarchy at `base` (`None`: no memory cgroups).
    pub(crate) fn v1(base: Option<PathBuf>, spares: crate::spare::Spares, freezer: crate::freezer::Freezer) -> Cgroups {
        Cgroups { base, v2: false, freezer, spares, runs: Default::default() }
    }

    /// The cgroup a task joins: its job run's (`job_J_E`, with the job's memory limit), or
    /// for a step with a memory limit of its own (`srun --mem`) a `step_S` inside it; on cgroup
    /// v2, always its step's leaf inside the run's (which has the job's memory and CPUs).
    pub(crate) fn create(&self, t: &Task) -> Option<PathBuf> {
        let base = self.base.as_ref()?;
        let step_mem = if t.step == BATCH_STEP { 0 } else { t.step_mem };
        if self.v2 {
            return crate::cgroup2::create(base, t.job, t.epoch, t.step, t.mem_limit, t.cpu_limit, step_mem)
                .inspect_err(|e| tracing::warn!(job = t.job, step = t.step, "the task runs without its cgroup limits: {e}"))
                .ok();
        }
        let name = format!("job_{}_{}", t.job, t.epoch);
        let dir = match self.spares.take(&name) {
            // A spare: its limit is set to the run's where it differs, else it is made afresh.
            Some(crate::spare::Taken::Spare { dir, limit }) => match self.relimit(&dir, limit, t.mem_limit) {
                Some(()) => dir,
                None => {
                    let _ = std::fs::remove_dir(&dir);
                    std::fs::create_dir_all(&dir).ok()?;
                    Self::limit(&dir, t.mem_limit)?;
                    dir
                }
            },
            Some(crate::spare::Taken::Exists(dir)) => {
                Self::limit(&dir, t.mem_limit)?;
                dir
            }
            None => {
                let dir = base.join(name);
                std::fs::create_dir_all(&dir).ok()?;
                Self::limit(&dir, t.mem_limit)?;
                dir
            }
        };
        // Only root may change a cgroup's settings, and a task of root's may change any cgroup
        // here, spares included: keeping them opens nothing to it. What would silently change
        // the next run (its limit, its OOM killer) is set again or checked.
        let reusable = step_mem == 0 && t.container.is_none();
        {
            let mut runs = self.runs.lock().expect("runs");
            let run = runs.entry((t.job, t.epoch)).or_insert((t.mem_limit, true));
            *run = (t.mem_limit, run.1 && reusable);
        }
        if step_mem == 0 {
            return Some(dir);
        }
        let step = dir.join(format!("{STEP_CGROUP}{}", t.step));
        std::fs::create_dir_all(&step).ok()?;
        Self::limit(&step, step_mem)?;
        Some(step)
    }

    /// Sets a spare's memory limit from `old` to `new` (0: none), where they differ: the swap
    /// limit, which may not be below the memory limit, first where the limit rises.
    fn relimit(&self, dir: &Path, old: u64, new: u64) -> Option<()> {
        if old == new {
            return Some(());
        }
        let v = if new == 0 { "-1".to_string() } else { new.to_string() };
        let (mem, sw) = (dir.join("memory.limit_in_bytes"), dir.join("memory.memsw.limit_in_bytes"));
        let set = |f: &Path| crate::kfile::write(self.spares.dir(), f, v.as_bytes());
        if new == 0 || (old != 0 && new > old) {
            let _ = set(&sw);
            set(&mem).ok()
        } else {
            set(&mem).ok()?;
            let _ = set(&sw);
            Some(())
        }
    }

    /// A run's memory cgroup `dir` once its last task here ended (`clean`: its OOM killer as
    /// the agent made it, [`Cgroups::oom_state`]): kept as a spare for the next run where it
    /// may be, else removed (`rmdir`, which leaves one a process is still in).
    pub(crate) fn release(&self, job: u64, epoch: u32, dir: &Path, clean: bool) {
        let run = self.runs.lock().expect("runs").remove(&(job, epoch));
        let kept = match run {
            Some((limit, true)) if clean => self.spares.keep(dir, limit, |d| {
                crate::kfile::read_text(self.spares.dir(), &d.join("memory.usage_in_bytes"))
                    .ok()
                    .and_then(|u| u.trim().parse::<u64>().ok())
                    .is_some_and(|u| u <= SPARE_CHARGE)
            }),
            _ => false,
        };
        if !kept {
            let _ = std::fs::remove_dir(dir);
        }
    }

    fn limit(dir: &Path, limit: u64) -> Option<()> {
        if limit > 0 {
            std::fs::write(dir.join("memory.limit_in_bytes"), limit.to_string()).ok()?;
            let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), limit.to_string());
        }
        Some(())
    }

    /// Whether the kernel killed a process of the task's cgroup for memory (v1's
    /// `memory.oom_control`, v2's `memory.events`).
    /// Read once per task that ends: v1's file is tried first, with no look-up before it (a
    /// path look-up in the cgroup file system costs about what the read does).
    pub(crate) fn oom(dir: &Path) -> bool {
        Self::oom_state(None, dir).0
    }

    /// [`Cgroups::oom_state`] of a cgroup of this agent's.
    pub(crate) fn oom_state_of(&self, dir: &Path) -> (bool, bool) {
        Self::oom_state(self.spares.dir(), dir)
    }

    /// [`Cgroups::oom`], and whether the cgroup's OOM killer is as the agent made it: never
    /// fired and not turned off (`oom_kill_disable`, which root may write): a cgroup that may be
    /// kept for the next run ([`Cgroups::release`]). On cgroup v2, never (none is kept).
    pub(crate) fn oom_state(held: Option<&crate::kfile::Dir>, dir: &Path) -> (bool, bool) {
        match crate::kfile::read_text(held, &dir.join("memory.oom_control")) {
            Ok(ctl) => {
                let field = |name: &str| ctl.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
                let killed = field("oom_kill ").is_some_and(|n| n != "0");
                (killed, !killed && field("oom_kill_disable ") == Some("0"))
            }
            Err(_) => (crate::cgroup2::oom(dir), false),
        }
    }
}

/// Makes the agent's spool of batch scripts, `DATA/spool` (root's, 0711: others may enter but
/// not list it), and returns its path. An agent running as root makes it a link to
/// `/run/tandem/spool-HASH` where `/run` is a tmpfs (else `/dev/shm/tandem/spool-HASH`), HASH
/// of DATA's canonical path, so that an agent restarted on the same DATA finds it again: a
/// script is made and removed for every task, and on a disk file system making a file can cost
/// more than a short task (ext4 without a journal scans past every inode freed in the last
/// minutes). The scripts live as long as before (a reboot ends their tasks too) and their
/// paths are unchanged. A directory an older agent left there is kept while it holds a script;
/// where no tmpfs can be used safely (a directory there that is not root's alone), the spool
/// is that directory.
pub(crate) fn make_spool(data: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let spool = data.join("spool");
    let private = |d: &Path| std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o711));
    let target = if nix::unistd::geteuid().is_root() { runtime_spool(data) } else { None };
    if let Some(t) = &target {
        let link = match std::fs::symlink_metadata(&spool) {
            Ok(m) if m.file_type().is_symlink() => std::fs::read_link(&spool).ok().as_ref() != Some(t),
            // An older agent's directory: replaced once it is empty.
            Ok(m) if m.is_dir() => std::fs::remove_dir(&spool).is_ok(),
            _ => true,
        };
        if link {
            let _ = std::fs::remove_file(&spool);
            std::os::unix::fs::symlink(t, &spool)?;
        }
        if std::fs::symlink_metadata(&spool).is_ok_and(|m| m.file_type().is_symlink()) {
            return Ok(spool);
        }
    }
    std::fs::create_dir_all(&spool)?;
    private(&spool)?;
    Ok(spool)
}

/// The directory on a tmpfs that [`make_spool`] links `DATA/spool` to, made (0711, root's),
/// or `None` where there is no tmpfs or what is there is not root's alone.
fn runtime_spool(data: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let tmpfs = |p: &str| nix::sys::statfs::statfs(p).is_ok_and(|f| f.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
    let base = Path::new(RUN_SPOOLS.iter().find(|p| tmpfs(p))?).join("tandem");
    let canon = std::fs::canonicalize(data).ok()?;
    let dir = base.join(format!("spool-{:016x}", fnv1a(canon.as_os_str().as_encoded_bytes())));
    // Made by root, or checked to be: in /dev/shm anyone may make a name first.
    let root_only = |d: &Path| {
        let _ = std::fs::DirBuilder::new().mode(0o711).create(d);
        std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir() && m.uid() == 0 && m.mode() & 0o022 == 0)
            && std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o711)).is_ok()
    };
    (root_only(&base) && root_only(&dir)).then_some(dir)
}

/// Where root's agents may keep their spools, the first that is a tmpfs ([`make_spool`]).
const RUN_SPOOLS: [&str; 2] = ["/run", "/dev/shm"];

/// FNV-1a, 64 bits: a hash that stays the same across builds (the spool's name must).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
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
    let create = || std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(nix::libc::O_NOFOLLOW).open(path);
    // One left by an earlier launch of the run (its agent died) is replaced.
    let mut f = match create() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let _ = std::fs::remove_file(path);
            create()
        }
        r => r,
    }
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
            let shared = crate::container::shared_dir(data, &key, c);
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
            if !c.volumes.is_empty() && !c.join_job {
                let mounts = crate::container::write_volumes(&shared, &key, t.uid, t.gid, &c.volumes)
                    .map_err(|e| LaunchError(format!("writing the container's volumes: {e:#}")))?;
                c.mounts.extend(mounts);
            }
            c.volumes.clear();
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
    // On cgroup v2 the run's cgroup is the freezer of the tasks below it: a task whose cgroup
    // could not be made is not there, and is stopped by signal instead.
    let freezer = if t.replica.is_none() && t.container.is_none() && (cg.freezer.joined() || cgroup.is_some()) {
        cg.freezer.create(t.job, t.epoch)
    } else {
        None
    };
    // The record first: an agent that dies from here on finds the task again at its restart.
    let key = key_of(t);
    let rec = Record {
        task: t.clone(),
        cgroup: cgroup.clone(),
        freezer: freezer.clone(),
        boot: tasks.boot.clone(),
        exe: tasks.exe.clone(),
        started: None,
        recorded: ticks_now(),
    };
    let slot = match tasks.record(rec) {
        Ok(slot) => slot,
        Err(e) => {
            // Not kept as spares: another task of the run may still be in them.
            cg.runs.lock().expect("runs").remove(&(t.job, t.epoch));
            for dir in cgroup.iter().chain(&freezer) {
                let _ = std::fs::remove_dir(dir);
            }
            return Err(LaunchError(format!("recording the task in {}: {e}", tasks.dir.display())));
        }
    };
    // The launcher forks the keeper, which forks the task; the task joins the job's cgroup
    // while still root, then drops to the user, then enters the working directory and opens
    // its files, then becomes the task: all between fork and exec, with system calls only.
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
    let bytes = |what: &str, p: &str| cstring(what, p).map(|c| c.into_bytes());
    let stdio = ends.as_ref().map_or([None; 3], |e| e.stdio());
    let pmi = ends.as_ref().and_then(|e| e.pmi_theirs.as_ref().map(std::os::fd::AsRawFd::as_raw_fd));
    let request = crate::launcher::Request {
        program: program.clone(),
        args,
        env: t.env.clone(),
        // On cgroup v2 the run's freezer is the parent of the task's cgroup: joined already.
        cgroups: cgroup.iter().chain(freezer.iter().filter(|_| cg.freezer.joined())).cloned().collect(),
        user: user.map(|u| (u.uid, u.gid, u.groups)),
        workdir: Some(bytes("working directory", &t.workdir)?),
        stdout: so.map(|p| bytes("output file", p)).transpose()?,
        stderr: se.map(|p| bytes("error file", p)).transpose()?,
        truncate: t.truncate,
        slot,
        pty: ends.as_ref().is_some_and(|e| e.pty),
        cpus: t.cpus.clone(),
        umask: t.umask,
        stdio: stdio.map(|f| f.is_some()),
        pmi: pmi.is_some(),
    };
    let fds: Vec<std::os::fd::RawFd> = stdio.into_iter().flatten().chain(pmi).collect();
    match tasks.spawner.launch(&request, &fds, &tasks.table) {
        Ok((pid, reaped)) => {
            // The task wrote its pid before it exec'd, and its keeper its own before answering.
            let keeper_pid = exec::Status::read(&tasks.table, slot).ok().and_then(|s| s.keeper).unwrap_or(0);
            let (keeper_started, started) = (tasks.keeper_start(keeper_pid), start_time(pid));
            if let (Some(k), Some(t)) = (keeper_started, started) {
                tasks.started(&key, (k, t));
            }
            if let (Some(mut e), Some(io)) = (ends.take(), t.io.clone()) {
                e.started();
                crate::stepio::relay(t, io, e);
            }
            let status = StatusAt::Slot(tasks.table.clone(), slot);
            Ok((Kept { pid, keeper: Keeper::Launched(reaped), keeper_pid, keeper_started, started, status, freezer }, cgroup))
        }
        Err(f) => {
            for dir in cgroup.iter().chain(&freezer) {
                let _ = std::fs::remove_dir(dir);
            }
            tasks.forget(&key);
            let e = f.error.to_string();
            let e = e.split(" (os error").next().unwrap_or(&e);
            Err(LaunchError(match f.stage {
                Some(exec::Stage::Keep) => format!("cannot start the task's keeper: {e}"),
                Some(exec::Stage::Cgroup) => format!("cannot join the job's cgroup: {e}"),
                Some(exec::Stage::User) => format!("cannot switch to uid {}: {e}", t.uid),
                Some(exec::Stage::Workdir) => format!("cannot enter the working directory {} as uid {}: {e}", t.workdir, t.uid),
                Some(exec::Stage::Stdout) => format!("cannot open the output file {} as uid {}: {e}", t.stdout, t.uid),
                Some(exec::Stage::Stderr) => format!("cannot open the error file {} as uid {}: {e}", t.stderr, t.uid),
                Some(exec::Stage::Stdio) => format!("cannot take the streams (pipes, terminal, PMI socket) srun's step gave the task: {e}"),
                Some(exec::Stage::Affinity) => format!("cannot bind the task to CPUs {:?} (srun --cpu-bind): {e}", t.cpus),
                // A bare name not found: say where it was looked for.
                None if !program.contains('/') && f.error.kind() == std::io::ErrorKind::NotFound => {
                    let path = t.env.iter().rev().find(|(k, _)| k == "PATH").map_or("(none: /bin:/usr/bin)", |(_, v)| v.as_str());
                    format!("cannot run {program}: not found in PATH={path}; give its full path, or set PATH in the job's environment")
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn task(job: u64, argv: &[&str], dir: &Path) -> Task {
        Task {
            job,
            epoch: 1,
            step: 0,
            rank: 0,
            script: None,
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            workdir: dir.display().to_string(),
            stdout: "/dev/null".into(),
            stderr: "/dev/null".into(),
            truncate: false,
            uid: nix::unistd::getuid().as_raw(),
            gid: nix::unistd::getgid().as_raw(),
            gpus: vec![],
            mem_limit: 0,
            step_mem: 0,
            cpu_limit: 0,
            cpus: vec![],
            login_env: false,
            umask: None,
            replica: None,
            io: None,
            container: None,
            script_env: vec![],
            task_scripts: None,
        }
    }

    /// A record of `t` with nothing but its boot.
    fn bare(t: Task, boot: &str) -> Record {
        Record { task: t, cgroup: None, freezer: None, boot: boot.to_string(), exe: None, started: None, recorded: None }
    }

    fn key(job: u64) -> TaskKey {
        TaskKey { job, epoch: 1, step: 0, rank: 0 }
    }

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("agent-launch-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("spool")).unwrap();
        d
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[tokio::test]
    async fn tasks_are_found_again_from_one_log_and_one_status_table() {
        let data = temp("found");
        let spool = data.join("spool");
        let cg = Cgroups::v1(None, crate::spare::Spares::off(), crate::freezer::Freezer::none());
        let tasks = Tasks::with_spawner(&data, Spawner::Here).unwrap();
        tasks.renew(exec::monotonic_ms() + 60_000);
        let (mut exits, _) = launch(&task(1, &["sh", "-c", "exit 3"], &data), &spool, &tasks, &cg).unwrap();
        let (runs, _) = launch(&task(2, &["sleep", "30"], &data), &spool, &tasks, &cg).unwrap();
        let (mut done, _) = launch(&task(3, &["true"], &data), &spool, &tasks, &cg).unwrap();
        assert!(runs.pid > 0);
        assert_eq!(exits.wait().await.and_then(|s| s.code()), Some(3));
        assert_eq!(done.wait().await.map(|s| s.success()), Some(true));
        // The controller has task 3's end.
        tasks.forget(&key(3));
        let freed = 2;
        // Two files, whatever the number of tasks; root's alone.
        assert_eq!(files(&data.join("tasks")), ["log", "status"]);
        for f in ["log", "status"] {
            assert_eq!(std::fs::metadata(data.join("tasks").join(f)).unwrap().permissions().mode() & 0o777, 0o600, "{f}");
        }
        // A launch that had not begun when its agent died (its slot may yet be written by a
        // launcher that got the request: never used again by the next agent process).
        let unstarted = bare(task(5, &["true"], &data), &tasks.boot);
        assert_eq!(tasks.record(unstarted).unwrap(), freed, "the forgotten task's slot is used again");
        // A line cut short by a crash and a line of garbage are skipped.
        std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("tasks/log"))
            .unwrap()
            .write_all(b"{\"forget\":{\"key\":{\"jo\n\x00\xff garbage\n")
            .unwrap();
        // The agent restarts.
        drop(tasks);
        let tasks = Tasks::with_spawner(&data, Spawner::Here).unwrap();
        let found = tasks.rediscover();
        let by_job: std::collections::BTreeMap<u64, &Found> = found.iter().map(|f| (f.task.job, f)).collect();
        assert_eq!(by_job.keys().copied().collect::<Vec<_>>(), [1, 2], "task 3 was forgotten, task 5 never began");
        assert!(matches!(by_job[&1].now, Now::Ended(st) if st.code() == Some(3)));
        assert!(!by_job[&1].stopped);
        let Now::Running(_) = &by_job[&2].now else { panic!("task 2 runs on under its keeper") };
        // Neither the live tasks' slots nor the one of the launch that never began is used.
        let (mut next, _) = launch(&task(4, &["true"], &data), &spool, &tasks, &cg).unwrap();
        assert_eq!(tasks.book().live[&key(4)].slot, 3);
        assert_eq!(next.wait().await.map(|s| s.success()), Some(true));
        // Adopted: its end is still seen, through its slot.
        let mut found = found;
        let Now::Running(mut adopted) = found.remove(1).now else { unreachable!() };
        kill_group(runs.pid, Signal::SIGKILL);
        assert_eq!(adopted.wait().await.and_then(|s| s.signal()), Some(9));
        // Killed by its agent: said so after a restart.
        tasks.mark_stopped(&key(2));
        drop(tasks);
        let tasks = Tasks::with_spawner(&data, Spawner::Here).unwrap();
        let found = tasks.rediscover();
        assert!(found.iter().any(|f| f.task.job == 2 && f.stopped && matches!(f.now, Now::Ended(_))));
        // The log stays small however many tasks came and went.
        for job in 10..10 + LOG_SLACK as u64 + 100 {
            tasks.record(bare(task(job, &["true"], &data), &tasks.boot)).unwrap();
            tasks.forget(&key(job));
        }
        let lines = std::fs::read_to_string(data.join("tasks/log")).unwrap().lines().count();
        assert!(lines <= 2 * 4 + LOG_SLACK + 1, "{lines} lines");
        assert!(tasks.book().next <= 6, "slots are reused: {}", tasks.book().next);
        std::fs::remove_dir_all(&data).ok();
    }

    /// cgroup v1: a run's emptied memory cgroup is the next run's, its limit set to that run's
    /// (none, lower, higher); one whose run the kernel killed for memory, one whose OOM killer
    /// was turned off, one a step's cgroup was made in and one still charged with megabytes of
    /// files are removed instead.
    #[test]
    fn an_emptied_memory_cgroup_is_the_next_runs_with_that_runs_limit() {
        let base = PathBuf::from("/sys/fs/cgroup/memory").join(format!("tandem-spares-test-{}", std::process::id()));
        if !nix::unistd::geteuid().is_root() || std::fs::create_dir_all(&base).is_err() || !base.join("memory.limit_in_bytes").exists() {
            let _ = std::fs::remove_dir(&base);
            eprintln!("skipped: needs root and cgroup v1's memory hierarchy");
            return;
        }
        let data = temp("spares");
        let cg = Cgroups::v1(Some(base.clone()), crate::spare::Spares::in_dir(base.clone()), crate::freezer::Freezer::none());
        let of = |job: u64, mem: u64, uid: u32| Task { mem_limit: mem, uid, gid: uid, ..task(job, &["true"], &data) };
        let read = |d: &Path, f: &str| std::fs::read_to_string(d.join(f)).map(|s| s.trim().to_string()).unwrap_or_default();
        let limit = |d: &Path| read(d, "memory.limit_in_bytes").parse::<u64>().unwrap();
        let swap = base.join("memory.memsw.limit_in_bytes").exists();
        let spares =
            || std::fs::read_dir(&base).unwrap().flatten().filter(|e| crate::spare::is_spare(&e.file_name().to_string_lossy())).count();
        const MIB: u64 = 1 << 20;
        // A run with 100 MiB: kept as a spare.
        let d1 = cg.create(&of(1, 100 * MIB, 65534)).unwrap();
        assert_eq!((d1.clone(), limit(&d1)), (base.join("job_1_1"), 100 * MIB));
        cg.release(1, 1, &d1, true);
        assert!(!d1.exists() && spares() == 1, "the emptied cgroup is a spare");
        // The next run, with no limit: the spare, unlimited.
        let d2 = cg.create(&of(2, 0, 65534)).unwrap();
        assert_eq!(d2, base.join("job_2_1"));
        assert_eq!(spares(), 0, "the spare is the run's cgroup");
        assert!(limit(&d2) > 1 << 60, "no limit: {}", limit(&d2));
        cg.release(2, 1, &d2, true);
        // Lower (from none), then higher: the swap limit follows (set first when it rises).
        for (job, mem) in [(3, 200 * MIB), (4, 300 * MIB)] {
            let d = cg.create(&of(job, mem, 65534)).unwrap();
            assert_eq!(spares(), 0);
            assert_eq!(limit(&d), mem);
            if swap {
                assert_eq!(read(&d, "memory.memsw.limit_in_bytes"), mem.to_string());
            }
            // The kernel killed one of job 4's processes for memory: not kept.
            cg.release(job, 1, &d, job != 4);
            assert!(!d.exists());
            assert_eq!(spares(), if job == 4 { 0 } else { 1 }, "job {job}");
        }
        // Root's run is kept; one whose OOM killer root turned off is not, nor a run with a
        // step's cgroup below its own.
        let d5 = cg.create(&of(5, 0, 0)).unwrap();
        assert_eq!(Cgroups::oom_state(None, &d5), (false, true));
        cg.release(5, 1, &d5, true);
        assert_eq!(spares(), 1);
        let d5 = cg.create(&of(5, 0, 0)).unwrap();
        std::fs::write(d5.join("memory.oom_control"), "1").unwrap();
        assert_eq!(Cgroups::oom_state(None, &d5), (false, false));
        cg.release(5, 1, &d5, false);
        let step = cg.create(&Task { step: 1, step_mem: 50 * MIB, ..of(6, 100 * MIB, 65534) }).unwrap();
        assert_eq!(step, base.join("job_6_1").join("step_1"));
        std::fs::remove_dir(&step).unwrap();
        cg.release(6, 1, &base.join("job_6_1"), true);
        assert!(!base.join("job_5_1").exists() && !base.join("job_6_1").exists() && spares() == 0);
        // A run that left 8 MiB of files charged to its cgroup (on a tmpfs): removed.
        let d7 = cg.create(&of(7, 0, 65534)).unwrap();
        let file = PathBuf::from("/dev/shm").join(format!("tandem-spares-test-{}", std::process::id()));
        let procs = std::fs::OpenOptions::new().write(true).open(d7.join("cgroup.procs")).unwrap();
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", &format!("head -c 8388608 /dev/zero > {}", file.display())]);
        let _report = exec::prepare(&mut cmd, exec::Setup { cgroup_procs: &[&procs], ..exec::Setup::default() }).unwrap();
        assert!(cmd.status().unwrap().success());
        assert!(read(&d7, "memory.usage_in_bytes").parse::<u64>().unwrap() > SPARE_CHARGE);
        cg.release(7, 1, &d7, true);
        assert!(spares() == 0, "a cgroup charged with another run's files is not kept");
        let _ = std::fs::remove_file(&file);
        // Two runs kept, then the agent ends: its spares go with it.
        for job in [8, 9] {
            let d = cg.create(&of(job, 0, 65534)).unwrap();
            cg.release(job, 1, &d, true);
        }
        assert_eq!(spares(), 1, "the second run took the first's spare");
        drop(cg);
        // The 8 MiB cgroup was left to the kernel (`rmdir` of a charged one succeeds in v1).
        std::fs::remove_dir(&base).expect("the agent's directory is empty");
        std::fs::remove_dir_all(&data).ok();
    }

    #[test]
    fn ticks_now_is_proc_uptimes_clock() {
        let read = || -> u64 {
            let up = std::fs::read_to_string("/proc/uptime").unwrap();
            (up.split_whitespace().next().unwrap().parse::<f64>().unwrap() * 100.0) as u64
        };
        let (a, t, b) = (read(), ticks_now().unwrap(), read());
        assert!(t + 2 >= a && t <= b + 1, "/proc/uptime {a}..{b} ticks, ticks_now {t}");
        // A process started now starts no earlier than the ticks read before it.
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let started = start_time(child.id() as i32).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(started >= t, "started at {started}, ticks before it {t}");
    }

    #[test]
    fn a_lost_tasks_group_is_killed_only_when_surely_its() {
        use std::os::unix::process::CommandExt;
        let data = temp("group");
        let before = ticks_now();
        // A leader, and a member that outlives it (as a script's child holding its files).
        let mut leader = std::process::Command::new("sh").args(["-c", "sleep 30 & wait"]).process_group(0).spawn().unwrap();
        let pid = leader.id() as i32;
        std::thread::sleep(Duration::from_millis(200));
        let rec = |started: Option<(u64, u64)>, recorded: Option<u64>| Record {
            task: task(9, &["true"], &data),
            cgroup: None,
            freezer: None,
            boot: boot_id(),
            exe: None,
            started,
            recorded,
        };
        let boot = boot_id();
        let t = start_time(pid).unwrap();
        assert!(group_is_the_tasks(pid, &rec(Some((0, t)), None), &boot), "the start time recorded");
        assert!(!group_is_the_tasks(pid, &rec(Some((0, t + 1)), None), &boot), "another start time");
        assert!(group_is_the_tasks(pid, &rec(None, before), &boot), "started just after its record");
        assert!(!group_is_the_tasks(pid, &rec(None, before.map(|b| b.saturating_sub(100_000))), &boot), "long after its record");
        assert!(!group_is_the_tasks(pid, &rec(None, None), &boot), "nothing to tell it by");
        assert!(!group_is_the_tasks(pid, &rec(Some((0, t)), None), "another boot"));
        // The leader dies; its member holds the group: still the task's.
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        let _ = leader.wait();
        assert!(group_is_the_tasks(pid, &rec(Some((0, t)), None), &boot), "the group lives on");
        kill_gone(pid, None, None);
        // Nothing of it runs (a member reparented to an init that does not reap stays a zombie).
        let running =
            std::fs::read_dir("/proc").unwrap().flatten().filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok()).any(|st| {
                let f: Vec<&str> = st.rsplit_once(") ").map(|(_, r)| r.split_whitespace().collect()).unwrap_or_default();
                f.get(2) == Some(&pid.to_string().as_str()) && f.first() != Some(&"Z")
            });
        assert!(!running, "all killed");
        std::fs::remove_dir_all(&data).ok();
    }

    #[tokio::test]
    async fn the_files_of_tasks_an_older_agent_started_are_still_found() {
        let data = temp("legacy");
        let dir = data.join("tasks");
        std::fs::create_dir_all(&dir).unwrap();
        let rec = Record {
            task: task(7, &["true"], &data),
            cgroup: None,
            freezer: None,
            boot: boot_id(),
            exe: None,
            started: None,
            recorded: None,
        };
        std::fs::write(dir.join("7.1.0.0.json"), serde_json::to_vec(&rec).unwrap()).unwrap();
        std::fs::write(dir.join("7.1.0.0.status"), "task 100       \nkeep 101       \nexit 5         \n").unwrap();
        // One never started: forgotten.
        let rec8 = Record { task: task(8, &["true"], &data), ..rec.clone() };
        std::fs::write(dir.join("8.1.0.0.json"), serde_json::to_vec(&rec8).unwrap()).unwrap();
        std::fs::write(dir.join("garbage.json"), "{not json").unwrap();
        let tasks = Tasks::with_spawner(&data, Spawner::Here).unwrap();
        let found = tasks.rediscover();
        assert_eq!(found.len(), 1);
        assert!(matches!(found[0].now, Now::Ended(st) if st.code() == Some(5)));
        tasks.renew(12345);
        assert_eq!(exec::Status::parse(&std::fs::read(dir.join("7.1.0.0.status")).unwrap()).deadline_ms, Some(12345));
        tasks.forget(&key(7));
        assert_eq!(files(&dir), ["log", "status"]);
        std::fs::remove_dir_all(&data).ok();
    }

    #[test]
    fn the_spool_is_a_private_directory_on_a_tmpfs_for_root_and_an_older_one_is_kept_while_it_holds_scripts() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let data = std::env::temp_dir().join(format!("agent-spool-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        std::fs::create_dir_all(&data).unwrap();
        let spool = make_spool(&data).unwrap();
        assert_eq!(spool, data.join("spool"));
        let private = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_dir() && m.mode() & 0o777 == 0o711);
        assert!(private(&spool), "0711 where it leads");
        match runtime_spool(&data) {
            Some(target) if nix::unistd::geteuid().is_root() => {
                assert_eq!(std::fs::read_link(&spool).unwrap(), target, "root's spool is on a tmpfs");
                let fs = nix::sys::statfs::statfs(&target).unwrap().filesystem_type();
                assert_eq!(fs, nix::sys::statfs::TMPFS_MAGIC);
                assert!(private(target.parent().unwrap()) && std::fs::metadata(&target).unwrap().uid() == 0);
                // The same again after a restart; a script written through the link is there.
                assert_eq!(make_spool(&data).unwrap(), spool);
                std::fs::write(script_path(&spool, 1, 1), "#!/bin/sh\n").unwrap();
                assert!(target.join("job_1_1.sh").exists());
                std::fs::remove_file(script_path(&spool, 1, 1)).unwrap();
                // An older agent's directory: kept while it holds a script, replaced once empty.
                std::fs::remove_file(&spool).unwrap();
                std::fs::create_dir(&spool).unwrap();
                std::fs::write(spool.join("job_2_1.sh"), "").unwrap();
                make_spool(&data).unwrap();
                assert!(std::fs::symlink_metadata(&spool).unwrap().is_dir() && spool.join("job_2_1.sh").exists());
                std::fs::remove_file(spool.join("job_2_1.sh")).unwrap();
                make_spool(&data).unwrap();
                assert_eq!(std::fs::read_link(&spool).unwrap(), target);
                let _ = std::fs::remove_dir(&target);
            }
            _ => assert!(std::fs::symlink_metadata(&spool).unwrap().is_dir(), "elsewhere a directory of its own"),
        }
        let _ = std::fs::remove_file(&spool);
        let _ = std::fs::remove_dir_all(&spool);
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::remove_dir_all(&data).ok();
    }
}
