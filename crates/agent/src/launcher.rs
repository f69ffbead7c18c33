//! The launcher: the process that forks the agent's tasks and keeps them, so that the agent
//! never forks.
//!
//! A fork copies the forking process's page tables, and while the child lives every page the
//! parent writes is first copied (copy-on-write). The agent used to fork a keeper for each
//! task, which forked the task and waited for it: per task, two forks of a large, busy
//! process, a page fault and a page copy for most pages the agent wrote while any keeper
//! lived, and each keeper's own exit (issue 34's profile: most of an agent's CPU per short
//! task). The launcher (`tandem __launcher DATA`, started by the agent, and again if it died)
//! is a small process that does the forking and the keeping instead: the agent sends it each
//! launch over a Unix socket (the command, its environment, its cgroups, user and files, and
//! the descriptors of its streams), it spawns the task with the `exec` crate (one small fork
//! and the task's exec) and answers with the task's pid or with the step that failed; it
//! reaps each task, records how it ended in the agent's status table and tells the agent on a
//! second socket; and it fences: once the deadline the agent renews after each heartbeat has
//! passed, it kills its tasks. When the agent is gone (its socket closes) the launcher keeps
//! the tasks it has until the last one ends, so a restarted agent adopts them as it adopted
//! tasks under their keepers before: how a task ends is in the status table, not in either
//! process. It runs as `tandem-keeper` (in `ps`), in a session of its own.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags};

/// The hidden subcommand that runs the launcher.
pub const LAUNCHER_CMD: &str = "__launcher";

/// The descriptors the launcher inherits: requests and answers; keepers reaped.
const REQUESTS_FD: i32 = 3;
const REAPED_FD: i32 = 4;

/// The most descriptors one launch passes: the task's three streams and its PMI socket.
const MAX_FDS: usize = 4;

/// The most bytes of one request or answer (a task's environment is bounded by the kernel's
/// limit on arguments and environment, 2 MiB by default).
const MAX_FRAME: usize = 64 << 20;

/// One launch, as the agent asks it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Request {
    pub(crate) program: String,
    pub(crate) args: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    /// The cgroups' directories the task joins (their `cgroup.procs`).
    pub(crate) cgroups: Vec<PathBuf>,
    /// uid, gid, groups.
    pub(crate) user: Option<(u32, u32, Vec<u32>)>,
    pub(crate) workdir: Option<Vec<u8>>,
    pub(crate) stdout: Option<Vec<u8>>,
    pub(crate) stderr: Option<Vec<u8>>,
    pub(crate) truncate: bool,
    /// The task's slot in the status table.
    pub(crate) slot: u32,
    pub(crate) pty: bool,
    pub(crate) cpus: Vec<u32>,
    pub(crate) umask: Option<u32>,
    /// Which standard streams the descriptors sent with the request are, in order; then the
    /// PMI socket (`PMI_FD`), if `pmi`.
    pub(crate) stdio: [bool; 3],
    pub(crate) pmi: bool,
}

/// The launcher's answer.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) enum Answer {
    /// The task's pid.
    Started(i32),
    /// The spawn failed: the error number, and the step of `exec::Setup` that failed (its
    /// `exec::Stage` code), if it was one.
    Failed { errno: i32, stage: Option<u8>, message: String },
}

/// Why a launch failed.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) error: std::io::Error,
    pub(crate) stage: Option<exec::Stage>,
}

/// Sends one frame (a length, then the bytes), with `fds` attached to it.
fn send_frame(s: &UnixStream, body: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    let len = (body.len() as u32).to_le_bytes();
    let iov = [std::io::IoSlice::new(&len), std::io::IoSlice::new(body)];
    let cmsgs = [ControlMessage::ScmRights(fds)];
    let sent = nix::sys::socket::sendmsg::<()>(s.as_raw_fd(), &iov, if fds.is_empty() { &[] } else { &cmsgs }, MsgFlags::empty(), None)?;
    // What did not go in the first call (a large environment) follows as plain bytes.
    let mut all = Vec::with_capacity(4 + body.len());
    all.extend_from_slice(&len);
    all.extend_from_slice(body);
    (&*s).write_all(&all[sent..])
}

/// Receives one frame and the descriptors attached to it (close-on-exec); `None` at the end
/// of the stream.
fn recv_frame(s: &UnixStream) -> std::io::Result<Option<(Vec<u8>, Vec<RawFd>)>> {
    let mut len = [0u8; 4];
    let mut fds = Vec::new();
    let mut got = 0;
    while got < len.len() {
        let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
        let mut iov = [std::io::IoSliceMut::new(&mut len[got..])];
        let msg = nix::sys::socket::recvmsg::<()>(s.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
        let n = msg.bytes;
        for c in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(f) = c {
                fds.extend(f);
            }
        }
        if n == 0 {
            for fd in fds {
                let _ = nix::unistd::close(fd);
            }
            return if got == 0 { Ok(None) } else { Err(std::io::ErrorKind::UnexpectedEof.into()) };
        }
        got += n;
    }
    let n = u32::from_le_bytes(len) as usize;
    if n > MAX_FRAME {
        for fd in fds {
            let _ = nix::unistd::close(fd);
        }
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("a frame of {n} bytes")));
    }
    let mut body = vec![0u8; n];
    if let Err(e) = (&*s).read_exact(&mut body) {
        for fd in fds {
            let _ = nix::unistd::close(fd);
        }
        return Err(e);
    }
    Ok(Some((body, fds)))
}

/// The launcher process: serves the agent's launches, and keeps the tasks it started (records
/// how each ended, fences them once the agent's deadline passed) until the agent is gone and
/// its last task has ended. `data` is the agent's data directory (its status table is
/// `DATA/tasks/status`).
pub fn serve(data: &Path) -> anyhow::Result<()> {
    use anyhow::Context;
    use nix::sys::signal::{SigSet, Signal};
    exec::become_keeper();
    let requests = exec::inherited_unix_stream(REQUESTS_FD).context("the launcher's request socket")?;
    let reaped = exec::inherited_unix_stream(REAPED_FD).context("the launcher's report socket")?;
    let table_path = data.join("tasks").join("status");
    let table = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&table_path)
        .with_context(|| format!("opening {}", table_path.display()))?;
    // Tasks that end are reaped here; SIGCHLD is read from a descriptor, beside the requests
    // (a spawned task gets the default signal mask back before its exec).
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    chld.thread_block().context("blocking SIGCHLD")?;
    let sfd = nix::sys::signalfd::SignalFd::with_flags(
        &chld,
        nix::sys::signalfd::SfdFlags::SFD_CLOEXEC | nix::sys::signalfd::SfdFlags::SFD_NONBLOCK,
    )
    .context("making the launcher's signal descriptor")?;
    let me = std::process::id() as i32;
    // The tasks kept: pid (its process group) to slot, and whether it was fenced.
    let mut kept: HashMap<i32, (u32, bool)> = HashMap::new();
    let mut agent = true;
    loop {
        if !agent && kept.is_empty() {
            return Ok(());
        }
        let (want, _) = {
            use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
            // The deadline is looked at every tick.
            let mut fds = vec![PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
            if agent {
                fds.push(PollFd::new(requests.as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, PollTimeout::from(TICK_MS)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e).context("waiting for the agent and the tasks"),
            }
            let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
            (fds.get(1).is_some_and(ready), ready(&fds[0]))
        };
        while let Ok(Some(_)) = sfd.read_signal() {}
        reap(&mut kept, &table, agent.then_some(&reaped));
        // Fencing: past the deadline the agent last renewed, nothing of its may keep running.
        if exec::deadline(&table).is_some_and(|d| exec::monotonic_ms() > d) {
            for (pid, (slot, fenced)) in kept.iter_mut().filter(|(_, (_, f))| !*f) {
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(*pid), Signal::SIGKILL);
                let _ = exec::record_fenced(&table, *slot);
                *fenced = true;
            }
        }
        if want {
            let Some((body, fds)) = recv_frame(&requests).unwrap_or(None) else {
                // The agent is gone: its tasks are kept until they end.
                agent = false;
                continue;
            };
            let answer = match serde_json::from_slice::<Request>(&body) {
                Ok(r) => match spawn(&r, &fds, &table, Fork::Clone) {
                    Ok(pid) => {
                        let _ = exec::record_keeper(&table, r.slot, me);
                        kept.insert(pid, (r.slot, false));
                        Answer::Started(pid)
                    }
                    Err(f) => Answer::Failed {
                        errno: f.error.raw_os_error().unwrap_or(0),
                        stage: f.stage.map(exec::Stage::code),
                        message: f.error.to_string(),
                    },
                },
                Err(e) => Answer::Failed { errno: 0, stage: None, message: format!("a request the launcher cannot read: {e}") },
            };
            // The task's ends of its pipes are the task's now.
            for fd in fds {
                let _ = nix::unistd::close(fd);
            }
            let bytes = serde_json::to_vec(&answer)?;
            if send_frame(&requests, &bytes, &[]).is_err() {
                agent = false;
            }
        }
    }
}

/// How often the launcher looks at the fencing deadline, milliseconds.
const TICK_MS: u16 = 100;

/// Reaps every task that ended, records how, and tells the agent (a pid each, 4 bytes).
fn reap(kept: &mut HashMap<i32, (u32, bool)>, table: &std::fs::File, to: Option<&UnixStream>) {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    loop {
        let (pid, code, signal) = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => (pid, Some(code), None),
            Ok(WaitStatus::Signaled(pid, sig, _)) => (pid, None, Some(sig as i32)),
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => continue,
        };
        let pid = pid.as_raw();
        if let Some((slot, _)) = kept.remove(&pid) {
            let _ = exec::record_end(table, slot, code, signal);
            if let Some(to) = to {
                let _ = (&*to).write_all(&pid.to_le_bytes());
            }
        }
    }
}

/// How a task is started.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fork {
    /// Without copying the process (`exec::spawn_single_threaded`): the launcher, which has
    /// one thread.
    Clone,
    /// With `Command` (a fork): a process with threads (the unit tests).
    #[cfg_attr(not(test), allow(dead_code))]
    Command,
}

/// Opens a cgroup's `cgroup.procs` to write, looked up from its parent directory, held open
/// for the next tasks (the agent's directory of the hierarchy: a cgroup's path runs six or
/// more components deep, [`crate::kfile`]); along the whole path where that fails.
fn open_procs(dir: &Path) -> std::io::Result<std::fs::File> {
    static HELD: std::sync::Mutex<Vec<crate::kfile::Dir>> = std::sync::Mutex::new(Vec::new());
    let file = dir.join("cgroup.procs");
    if let Some(parent) = dir.parent() {
        let mut held = HELD.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !held.iter().any(|d| d.path() == parent) {
            // A few per agent (its memory and freezer directories); more only in tests.
            if held.len() >= 16 {
                held.clear();
            }
            if let Ok(d) = crate::kfile::Dir::open(parent.to_path_buf()) {
                held.push(d);
            }
        }
        if let Some(f) = held.iter().find(|d| d.path() == parent).and_then(|d| crate::kfile::open_write(Some(d), &file).ok()) {
            return Ok(f);
        }
    }
    std::fs::OpenOptions::new().write(true).open(&file)
}

/// Spawns one task, kept (in the launcher; in unit tests, in the test process). `fds` are the
/// descriptors the request came with. Returns the task's pid.
pub(crate) fn spawn(r: &Request, fds: &[RawFd], table: &std::fs::File, how: Fork) -> Result<i32, Failure> {
    let fail = |error: std::io::Error| Failure { error, stage: None };
    let want = r.stdio.iter().filter(|b| **b).count() + usize::from(r.pmi);
    if fds.len() != want {
        return Err(fail(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{} descriptors for {want} streams", fds.len()))));
    }
    let mut procs = Vec::new();
    for dir in &r.cgroups {
        let f = open_procs(dir).map_err(|e| Failure { error: e, stage: Some(exec::Stage::Cgroup) })?;
        procs.push(f);
    }
    let procs: Vec<&std::fs::File> = procs.iter().collect();
    let mut next = fds.iter().copied();
    let mut stdio = [None; 3];
    for (slot, given) in stdio.iter_mut().zip(r.stdio) {
        if given {
            *slot = next.next();
        }
    }
    let pmi = if r.pmi { next.next() } else { None };
    let cstr = |b: &Option<Vec<u8>>| -> Result<Option<std::ffi::CString>, Failure> {
        b.clone().map(std::ffi::CString::new).transpose().map_err(|e| fail(std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))
    };
    let setup = exec::Setup {
        cgroup_procs: &procs,
        user: r.user.clone().map(|(uid, gid, groups)| exec::User { uid, gid, groups }),
        workdir: cstr(&r.workdir)?,
        stdout: cstr(&r.stdout)?,
        stderr: cstr(&r.stderr)?,
        truncate: r.truncate,
        keep: Some(exec::Keep { table, slot: r.slot }),
        stdio,
        pty: r.pty,
        inherit: pmi,
        cpus: &r.cpus,
        umask: r.umask,
    };
    if how == Fork::Clone {
        let mut env = r.env.clone();
        if let Some(fd) = pmi {
            env.push(("PMI_FD".into(), fd.to_string()));
        }
        let mut program = exec::Program::new(&r.program, &r.args, &env).map_err(fail)?;
        return exec::spawn_single_threaded(&mut program, setup).map_err(|f| Failure { error: f.error, stage: f.stage });
    }
    let mut cmd = std::process::Command::new(&r.program);
    let mut report = exec::prepare(&mut cmd, setup).map_err(fail)?;
    cmd.args(&r.args)
        .env_clear()
        .envs(r.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    if let Some(fd) = pmi {
        cmd.env("PMI_FD", fd.to_string());
    }
    match cmd.spawn() {
        // Reaped by the launcher's loop (in unit tests, by the test).
        Ok(child) => Ok(child.id() as i32),
        Err(error) => Err(Failure { error, stage: report.failed() }),
    }
}

/// For unit tests: spawns a task in the test process, and keeps it from a thread (its end
/// recorded as the launcher records it).
#[cfg(test)]
pub(crate) fn spawn_here(
    r: &Request,
    fds: &[RawFd],
    table: &Arc<std::fs::File>,
) -> Result<(i32, tokio::sync::oneshot::Receiver<bool>), Failure> {
    let pid = spawn(r, fds, table, Fork::Command)?;
    let _ = exec::record_keeper(table, r.slot, std::process::id() as i32);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (table, slot) = (table.clone(), r.slot);
    std::thread::spawn(move || {
        use nix::sys::wait::{WaitStatus, waitpid};
        let (code, signal) = match waitpid(nix::unistd::Pid::from_raw(pid), None) {
            Ok(WaitStatus::Exited(_, c)) => (Some(c), None),
            Ok(WaitStatus::Signaled(_, s, _)) => (None, Some(s as i32)),
            _ => (None, None),
        };
        let _ = exec::record_end(&table, slot, code, signal);
        let _ = tx.send(true);
    });
    Ok((pid, rx))
}

/// Tasks' ends the launcher reported, and who waits for them.
#[derive(Default)]
struct Reaped {
    /// Waiters, by task pid, with the launcher run they were started by.
    waiting: HashMap<i32, (u64, tokio::sync::oneshot::Sender<bool>)>,
    /// Ends reported before anyone waited, by launcher run.
    early: std::collections::HashSet<(u64, i32)>,
}

/// One run of the launcher process.
struct Run {
    requests: UnixStream,
    child: std::process::Child,
    id: u64,
}

/// The agent's side: starts the launcher, asks it for launches, hears of tasks' ends.
pub(crate) struct Launcher {
    exe: PathBuf,
    data: PathBuf,
    run: Mutex<Option<Run>>,
    runs: std::sync::atomic::AtomicU64,
    reaped: Arc<Mutex<Reaped>>,
}

impl Launcher {
    /// The launcher of the agent whose data directory is `data`, run from `exe` (this program).
    /// It is started at the first launch.
    pub(crate) fn new(exe: PathBuf, data: PathBuf) -> Launcher {
        Launcher { exe, data, run: Mutex::new(None), runs: std::sync::atomic::AtomicU64::new(0), reaped: Arc::default() }
    }

    fn start(&self) -> std::io::Result<Run> {
        let (requests, theirs) = UnixStream::pair()?;
        let (reports, report_theirs) = UnixStream::pair()?;
        let mut cmd = std::process::Command::new(&self.exe);
        cmd.arg(LAUNCHER_CMD).arg(&self.data).stdin(std::process::Stdio::null());
        exec::pass_fd_at(&mut cmd, theirs.as_raw_fd(), REQUESTS_FD);
        exec::pass_fd_at(&mut cmd, report_theirs.as_raw_fd(), REAPED_FD);
        let child = cmd.spawn()?;
        drop((theirs, report_theirs));
        let id = self.runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        reports.set_nonblocking(true)?;
        let reports = tokio::net::UnixStream::from_std(reports)?;
        let reaped = self.reaped.clone();
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut reports = reports;
            let mut b = [0u8; 4];
            while reports.read_exact(&mut b).await.is_ok() {
                let pid = i32::from_le_bytes(b);
                let mut r = reaped.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                match r.waiting.remove(&pid) {
                    Some((_, tx)) => {
                        let _ = tx.send(true);
                    }
                    None => {
                        r.early.insert((id, pid));
                    }
                }
            }
            // That run is gone: its tasks' waiters look in the status table.
            let mut r = reaped.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            r.early.retain(|(run, _)| *run != id);
            let gone: Vec<i32> = r.waiting.iter().filter(|(_, (run, _))| *run == id).map(|(pid, _)| *pid).collect();
            for pid in gone {
                if let Some((_, tx)) = r.waiting.remove(&pid) {
                    let _ = tx.send(false);
                }
            }
        });
        Ok(Run { requests, child, id })
    }

    /// Launches a task: returns its pid, and a receiver that says `true` once the launcher
    /// recorded its end (`false`, or closed: the launcher is gone; look in the status table).
    pub(crate) fn launch(
        &self,
        r: &Request,
        fds: &[RawFd],
        table: &std::fs::File,
    ) -> Result<(i32, tokio::sync::oneshot::Receiver<bool>), Failure> {
        let body = serde_json::to_vec(r).map_err(|e| Failure { error: std::io::Error::other(e), stage: None })?;
        let mut run = self.run.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // A launcher that died is started again; a request it never read is sent again.
        let mut tries = 0;
        let answer = loop {
            tries += 1;
            if run.as_mut().is_none_or(|x| x.child.try_wait().is_ok_and(|s| s.is_some())) {
                let started = self.start().map_err(|e| Failure {
                    error: std::io::Error::new(
                        e.kind(),
                        format!("starting the agent's launcher ({} {LAUNCHER_CMD}): {e}", self.exe.display()),
                    ),
                    stage: None,
                })?;
                *run = Some(started);
            }
            let current = run.as_ref().expect("started");
            if let Err(e) = send_frame(&current.requests, &body, fds) {
                *run = None;
                if tries < 2 {
                    continue;
                }
                return Err(Failure { error: e, stage: None });
            }
            match recv_frame(&current.requests) {
                Ok(Some((b, _))) => {
                    break serde_json::from_slice::<Answer>(&b).map_err(|e| Failure { error: std::io::Error::other(e), stage: None })?;
                }
                // It died with the request: the task's slot says whether the task started.
                _ => {
                    *run = None;
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    return match exec::Status::read(table, r.slot).ok().and_then(|s| s.task) {
                        Some(pid) => {
                            let (tx, rx) = tokio::sync::oneshot::channel();
                            let _ = tx.send(false);
                            Ok((pid, rx))
                        }
                        None => Err(Failure { error: std::io::Error::other("the launcher died"), stage: None }),
                    };
                }
            }
        };
        match answer {
            Answer::Started(pid) => {
                let (tx, rx) = tokio::sync::oneshot::channel();
                let id = run.as_ref().map_or(0, |x| x.id);
                let mut reaped = self.reaped.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if reaped.early.remove(&(id, pid)) {
                    let _ = tx.send(true);
                } else {
                    reaped.waiting.insert(pid, (id, tx));
                }
                Ok((pid, rx))
            }
            Answer::Failed { errno, stage, message } => Err(Failure {
                error: if errno != 0 { std::io::Error::from_raw_os_error(errno) } else { std::io::Error::other(message) },
                stage: stage.and_then(exec::Stage::from_code),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_carry_their_descriptors_and_any_length() {
        let (a, b) = UnixStream::pair().unwrap();
        let (r, w) = nix::unistd::pipe().unwrap();
        // Larger than the socket's buffer: the rest follows the first send.
        let big = vec![7u8; 3 << 20];
        let sender = {
            let a = a.try_clone().unwrap();
            let big = big.clone();
            let w = w.as_raw_fd();
            std::thread::spawn(move || {
                send_frame(&a, b"small", &[w]).unwrap();
                send_frame(&a, &big, &[]).unwrap();
            })
        };
        let (body, fds) = recv_frame(&b).unwrap().unwrap();
        assert_eq!((body.as_slice(), fds.len()), (&b"small"[..], 1));
        // The descriptor received is the pipe's write end, close-on-exec.
        let n = fds[0];
        std::fs::OpenOptions::new().write(true).open(format!("/proc/self/fd/{n}")).unwrap().write_all(b"x").unwrap();
        let mut got = [0u8; 1];
        nix::unistd::read(&r, &mut got).unwrap();
        assert_eq!(&got, b"x");
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{n}")).unwrap();
        let flags = info.lines().find_map(|l| l.strip_prefix("flags:")).map(|f| u32::from_str_radix(f.trim(), 8).unwrap()).unwrap();
        assert_ne!(flags & 0o2000000, 0, "O_CLOEXEC: {info}");
        nix::unistd::close(n).unwrap();
        let (body, fds) = recv_frame(&b).unwrap().unwrap();
        assert!(body == big && fds.is_empty());
        sender.join().unwrap();
        drop(w);
        // The end of the stream; a frame cut short; one that claims too much.
        drop(a);
        assert!(recv_frame(&b).unwrap().is_none());
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(&10u32.to_le_bytes()).unwrap();
        (&a).write_all(b"abc").unwrap();
        drop(a);
        assert!(recv_frame(&b).is_err());
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(&u32::MAX.to_le_bytes()).unwrap();
        assert!(recv_frame(&b).unwrap_err().to_string().contains("bytes"));
    }

    #[test]
    fn a_request_with_the_wrong_descriptors_or_a_bad_path_fails_with_its_step() {
        let d = std::env::temp_dir().join(format!("agent-launcher-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let table = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(d.join("status")).unwrap();
        let mut r = Request {
            program: "true".into(),
            args: vec![],
            env: vec![],
            cgroups: vec![],
            user: None,
            workdir: Some(d.join("missing").into_os_string().into_encoded_bytes()),
            stdout: None,
            stderr: None,
            truncate: false,
            slot: 0,
            pty: false,
            cpus: vec![],
            umask: None,
            stdio: [false, true, false],
            pmi: false,
        };
        let e = spawn(&r, &[], &table, Fork::Command).unwrap_err();
        assert!(e.error.to_string().contains("descriptors"), "{e:?}");
        r.stdio = [false; 3];
        let e = spawn(&r, &[], &table, Fork::Command).unwrap_err();
        assert_eq!(e.stage, Some(exec::Stage::Workdir));
        r.workdir = None;
        r.cgroups = vec![d.join("no-such-cgroup")];
        assert_eq!(spawn(&r, &[], &table, Fork::Command).unwrap_err().stage, Some(exec::Stage::Cgroup));
        r.cgroups = vec![];
        r.workdir = Some(b"a\0b".to_vec());
        assert!(spawn(&r, &[], &table, Fork::Command).is_err());
        std::fs::remove_dir_all(&d).ok();
    }
}
