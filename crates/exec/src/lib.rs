//! Launching a task: what must happen in the child between `fork` and `exec`. The child joins
//! its job's cgroup while still root, then drops to the job's user and groups, and only then,
//! with the user's own rights, enters the working directory and opens the output and error
//! files; then it becomes the task. Doing this in the forked child (instead of exec'ing a
//! launcher program that does it and execs again) saves one program start per task, and no
//! user-named path is ever touched as root (SECURITY.md, "Paths"). Also the one process-wide
//! limit Tandem's daemons raise ([`raise_nofile`]).
//!
//! A kept task ([`Setup::keep`]) writes its pid to its slot of a status table before it
//! becomes the task; the process that spawned it (the agent's launcher, which is the keeper of
//! all the agent's tasks) records how it ended there ([`record_end`]), so a restarted agent can
//! adopt a task that outlived it and still learn its exit status.
//!
//! Also held listening sockets ([`listen_tcp`], [`pass_fds`], [`inherited_listener`]): `tandem
//! up` keeps the controller's and the proxy's ports for their whole life and each restart of
//! them inherits the sockets.
//!
//! **Invariant:** this is the only crate with `unsafe` code: two `pre_exec` hooks that make only
//! async-signal-safe system calls and do not allocate (the task's, and clearing close-on-exec on
//! passed sockets), the task's same steps in a child `clone`d without a copy of a process with
//! one thread ([`spawn_single_threaded`], the agent's launcher), the adoption of an inherited descriptor once checked to be a listening
//! socket (or, for the agent's launcher, a Unix stream socket: [`inherited_unix_stream`]), and
//! the `signal` calls that restore SIGPIPE's default action for commands ([`quiet_sigpipe`])
//! and make a keeper ignore what a terminal would send it ([`become_keeper`]).

mod fds;
mod spawn;
mod systemd;
mod trust;
pub use fds::{HeldError, inherited_listener, inherited_unix_stream, listen_tcp, pass_fd_at, pass_fds};
pub use spawn::{Program, SpawnFailed, spawn_single_threaded};
pub use systemd::{activated_listeners, notify_ready};
pub use trust::trusted_file;

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The user a task runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups (the primary group included), as `initgroups` would set them.
    pub groups: Vec<u32>,
}

impl User {
    /// `uid` with primary group `gid` and the supplementary groups the group database gives
    /// the uid's name (just `gid` when the uid has no name here).
    pub fn lookup(uid: u32, gid: u32) -> User {
        use nix::unistd::{Gid, Uid};
        let groups = nix::unistd::User::from_uid(Uid::from_raw(uid))
            .ok()
            .flatten()
            .and_then(|u| CString::new(u.name).ok())
            .and_then(|name| nix::unistd::getgrouplist(&name, Gid::from_raw(gid)).ok())
            .map(|g| g.into_iter().map(Gid::as_raw).collect::<Vec<u32>>())
            .filter(|g| !g.is_empty())
            .unwrap_or_else(|| vec![gid]);
        User { uid, gid, groups }
    }
}

/// What the child does before it becomes the task, in this order: join the cgroup, drop to
/// the user, enter the working directory, open the output and error files.
#[derive(Debug, Default)]
pub struct Setup<'a> {
    /// The job's cgroups' `cgroup.procs` (its memory cgroup's, its freezer's), opened for
    /// writing by the caller; the child writes "0" to each, which moves the writing process
    /// itself (cgroup v1 and v2). They must stay open until the command is spawned.
    pub cgroup_procs: &'a [&'a std::fs::File],
    /// Switch to this user (uid, gid and supplementary groups).
    pub user: Option<User>,
    /// Enter this directory, as the user (do not also set the command's `current_dir`: std
    /// enters that before the hook runs, still as root).
    pub workdir: Option<CString>,
    /// Append standard output to this file (created 0666 under [`Setup::umask`]), opened as
    /// the user after entering `workdir`, so a relative path is relative to it.
    pub stdout: Option<CString>,
    /// Append standard error to this file; `None` with `stdout` set: to the same file.
    pub stderr: Option<CString>,
    /// Empty `stdout` and `stderr` as they are opened (`--open-mode=truncate`), still as the
    /// user and still appending from there.
    pub truncate: bool,
    /// Keep the task: it writes its pid to its slot of the status table and leads a process
    /// group of its own; the spawning process (its keeper) records how it ended, so that the
    /// task's end is known even when the agent that ordered it has died meanwhile.
    pub keep: Option<Keep<'a>>,
    /// Descriptors (the caller's, close-on-exec) that become the task's standard input,
    /// output and error, after the files above (so one given here wins over its file).
    pub stdio: [Option<std::os::fd::RawFd>; 3],
    /// `stdio` is a pseudo-terminal's follower: the task leads a session of its own (not just a
    /// process group) with it as its controlling terminal.
    pub pty: bool,
    /// A descriptor the task keeps open across exec, at the same number (its PMI socket).
    pub inherit: Option<std::os::fd::RawFd>,
    /// Bind the task to these CPUs (`srun --cpu-bind`); empty: leave its affinity alone.
    pub cpus: &'a [u32],
    /// The task's umask (the submitter's, `SLURM_UMASK`), set before the output files are
    /// opened; `None`: 0022.
    pub umask: Option<u32>,
}

/// How a task is kept ([`Setup::keep`]).
///
/// The task and its keeper write to the task's slot of a *status table* (one file for all the
/// tasks of an agent, opened for reading and writing by the caller, with close-on-exec; see
/// [`Status`] and [`slot_offset`]): the task its pid before it becomes the task, the keeper
/// (the process that spawned it, which waits for it) its own pid ([`record_keeper`]) and then
/// how the task ended ([`record_end`]). One table instead of a file per task: no inode is made
/// or freed per task. The task leads a process group of its own (a session, with a terminal).
/// The keeper also fences: the agent writes one deadline for all its tasks into the table's
/// header after each heartbeat the controller answered ([`set_deadline`]), and once it has
/// passed ([`deadline`]: the agent died, hung or lost the controller and did not fence the
/// task itself) the keeper kills the task's process group ([`record_fenced`]), before the
/// controller's lease on the node can lapse.
#[derive(Debug, Clone, Copy)]
pub struct Keep<'a> {
    /// The status table.
    pub table: &'a std::fs::File,
    /// The task's slot in it, cleared ([`clear_slot`]) before the launch.
    pub slot: u32,
}

/// Bytes of a status table's header (the fencing deadline) and of each slot.
pub const SLOT_BYTES: u64 = 64;

/// Where slot `slot` of a status table begins: after the header, one [`SLOT_BYTES`] each.
pub fn slot_offset(slot: u32) -> u64 {
    SLOT_BYTES * (u64::from(slot) + 1)
}

/// Writes the fencing deadline of every task kept in a status table, in milliseconds of
/// [`monotonic_ms`]'s clock: past it, the keepers kill their tasks.
pub fn set_deadline(table: &std::fs::File, monotonic_ms: i64) -> std::io::Result<()> {
    set_deadline_at(table, DEADLINE_AT as u64, monotonic_ms)
}

/// Writes a fencing deadline at `offset` of a status file: a table's header
/// ([`set_deadline`]), or [`LEGACY_DEADLINE_AT`] of the status file of a task an older agent
/// started (one file per task).
pub fn set_deadline_at(file: &std::fs::File, offset: u64, monotonic_ms: i64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.write_all_at(&status_line(b"dead", monotonic_ms), offset)
}

/// Where the keepers of older agents (one status file per task) read their deadline.
pub const LEGACY_DEADLINE_AT: u64 = 64;

/// Empties a slot of a status table, before a new task is kept in it.
pub fn clear_slot(table: &std::fs::File, slot: u32) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    table.write_all_at(&[0u8; SLOT_BYTES as usize], slot_offset(slot))
}

fn put_line(table: &std::fs::File, slot: u32, at: i64, tag: &[u8; 4], n: i64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    table.write_all_at(&status_line(tag, n), slot_offset(slot) + at as u64)
}

/// Records the keeper of the task in `slot`: its pid.
pub fn record_keeper(table: &std::fs::File, slot: u32, pid: i32) -> std::io::Result<()> {
    put_line(table, slot, KEEP_AT, b"keep", i64::from(pid))
}

/// Records how the task in `slot` ended: its exit code, or the signal that killed it.
pub fn record_end(table: &std::fs::File, slot: u32, code: Option<i32>, signal: Option<i32>) -> std::io::Result<()> {
    match (code, signal) {
        (Some(c), _) => put_line(table, slot, END_AT, b"exit", i64::from(c)),
        (None, Some(s)) => put_line(table, slot, END_AT, b"kill", i64::from(s)),
        (None, None) => put_line(table, slot, END_AT, b"exit", 255),
    }
}

/// Records that the keeper killed the task in `slot` (fenced it): its deadline passed.
pub fn record_fenced(table: &std::fs::File, slot: u32) -> std::io::Result<()> {
    put_line(table, slot, FENCE_AT, b"fenc", 1)
}

/// The fencing deadline in a status table's header ([`set_deadline`]), if one was written.
pub fn deadline(table: &std::fs::File) -> Option<i64> {
    use std::os::unix::fs::FileExt;
    let mut b = [0u8; 16];
    table.read_exact_at(&mut b, DEADLINE_AT as u64).ok()?;
    Status::parse(&b).deadline_ms
}

/// The system's monotonic clock (`CLOCK_MONOTONIC`, the same for every process), milliseconds.
pub fn monotonic_ms() -> i64 {
    monotonic_ns() / 1_000_000
}

/// What a kept task's slot of the status table (`Setup::keep`) says: fixed 16-byte lines,
/// `task PID`, `keep PID`, then `exit CODE` or `kill SIGNAL` once the task ended, and `fenc 1`
/// if its keeper fenced it; the table's header holds the deadline, `dead MS`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Status {
    /// The task's pid (its process group), once it was forked.
    pub task: Option<i32>,
    /// The keeper's pid.
    pub keeper: Option<i32>,
    /// Exit code, once it exited.
    pub code: Option<i32>,
    /// Signal, once it was killed by one.
    pub signal: Option<i32>,
    /// The keeper killed it: its fencing deadline passed.
    pub fenced: bool,
    /// Its fencing deadline, milliseconds of [`monotonic_ms`]'s clock.
    pub deadline_ms: Option<i64>,
}

impl Status {
    /// Reads a status file's text (unknown or partial lines are skipped).
    pub fn parse(text: &[u8]) -> Status {
        let mut s = Status::default();
        for line in text.split(|b| *b == b'\n') {
            // Lines not written yet read as NUL bytes (a hole in the file).
            let line = String::from_utf8_lossy(line);
            let Some((tag, n)) = line.trim_start_matches('\0').split_once(' ') else { continue };
            let Ok(big) = n.trim().parse::<i64>() else { continue };
            if tag == "dead" {
                s.deadline_ms = Some(big);
                continue;
            }
            let Ok(n) = i32::try_from(big) else { continue };
            match tag {
                "task" => s.task = Some(n),
                "keep" => s.keeper = Some(n),
                "exit" => s.code = Some(n),
                "kill" => s.signal = Some(n),
                "fenc" => s.fenced = n != 0,
                _ => {}
            }
        }
        s
    }

    /// Whether the task's end is recorded.
    pub fn ended(&self) -> bool {
        self.code.is_some() || self.signal.is_some()
    }

    /// Reads slot `slot` of a status table, with the table's deadline.
    pub fn read(table: &std::fs::File, slot: u32) -> std::io::Result<Status> {
        use std::os::unix::fs::FileExt;
        // What was never written (past the end, or a hole) reads as NUL bytes.
        let mut b = [0u8; 2 * SLOT_BYTES as usize];
        let (head, line) = b.split_at_mut(SLOT_BYTES as usize);
        for (buf, offset) in [(head, 0), (line, slot_offset(slot))] {
            let mut at = 0;
            while at < buf.len() {
                match table.read_at(&mut buf[at..], offset + at as u64)? {
                    0 => break,
                    n => at += n,
                }
            }
        }
        Ok(Status::parse(&b))
    }
}

/// The signals a keeper ignores (those a terminal or a process group would send it): its
/// tasks get their default actions back ([`Setup::keep`]).
pub const KEEPER_IGNORES: [nix::sys::signal::Signal; 7] = {
    use nix::sys::signal::Signal;
    [Signal::SIGHUP, Signal::SIGINT, Signal::SIGQUIT, Signal::SIGTERM, Signal::SIGUSR1, Signal::SIGUSR2, Signal::SIGPIPE]
};

/// Offsets of a slot's lines, from the slot's start.
const TASK_AT: i64 = 0;
const KEEP_AT: i64 = 16;
const END_AT: i64 = 32;
const FENCE_AT: i64 = 48;
/// Offset of the deadline in the table.
const DEADLINE_AT: i64 = 0;
/// `TAG NUMBER` padded with spaces to 15 bytes and a newline, built without allocating.
fn status_line(tag: &[u8; 4], n: i64) -> [u8; 16] {
    let mut b = [b' '; 16];
    b[..4].copy_from_slice(tag);
    b[15] = b'\n';
    let (neg, mut v) = (n < 0, n.unsigned_abs());
    let mut digits = [0u8; 20];
    let mut k = 0;
    loop {
        digits[k] = b'0' + (v % 10) as u8;
        k += 1;
        v /= 10;
        if v == 0 || k == digits.len() {
            break;
        }
    }
    let mut at = 5;
    if neg {
        b[at] = b'-';
        at += 1;
    }
    while k > 0 && at < 15 {
        k -= 1;
        b[at] = digits[k];
        at += 1;
    }
    b
}

/// The monotonic clock, nanoseconds (async-signal-safe).
fn monotonic_ns() -> i64 {
    let mut ts = nix::libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec on the stack only.
    #[allow(unsafe_code)]
    unsafe {
        nix::libc::clock_gettime(nix::libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Writes `line` at `offset` of the file `fd` (async-signal-safe).
fn put(fd: i32, line: &[u8; 16], offset: i64) {
    // SAFETY: `line` is a live buffer of 16 bytes; `fd` is the caller's open status file.
    #[allow(unsafe_code)]
    unsafe {
        nix::libc::pwrite(fd, line.as_ptr().cast(), line.len(), offset);
    }
}

/// The step of [`Setup`] that failed in the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Leading a process group (with a terminal, a session) of its own.
    Keep,
    /// Joining the cgroup.
    Cgroup,
    /// Switching to the user.
    User,
    /// Entering the working directory.
    Workdir,
    /// Opening the output file.
    Stdout,
    /// Opening the error file.
    Stderr,
    /// Taking the descriptors of [`Setup::stdio`] (and its terminal, and [`Setup::inherit`]).
    Stdio,
    /// Binding to [`Setup::cpus`].
    Affinity,
}

impl Stage {
    /// A one-byte code for the stage (to tell it to another process).
    pub fn code(self) -> u8 {
        self.byte()
    }

    /// The stage of a [`Stage::code`].
    pub fn from_code(b: u8) -> Option<Stage> {
        Stage::from_byte(b)
    }

    fn byte(self) -> u8 {
        match self {
            Stage::Keep => b'k',
            Stage::Cgroup => b'c',
            Stage::User => b'u',
            Stage::Workdir => b'd',
            Stage::Stdout => b'o',
            Stage::Stderr => b'e',
            Stage::Stdio => b's',
            Stage::Affinity => b'a',
        }
    }

    fn from_byte(b: u8) -> Option<Stage> {
        Some(match b {
            b'k' => Stage::Keep,
            b'c' => Stage::Cgroup,
            b'u' => Stage::User,
            b'd' => Stage::Workdir,
            b'o' => Stage::Stdout,
            b'e' => Stage::Stderr,
            b's' => Stage::Stdio,
            b'a' => Stage::Affinity,
            _ => return None,
        })
    }
}

/// Reads which stage failed, after a failed spawn of a command [`prepare`]d with this.
#[derive(Debug)]
pub struct Report {
    read: OwnedFd,
    write: Option<OwnedFd>,
}

impl Report {
    /// The stage that failed in the child, if one did. Call after the spawn returned (the
    /// child has exited or exec'd by then); closes this side's write end first.
    pub fn failed(&mut self) -> Option<Stage> {
        self.write = None;
        let mut b = [0u8; 1];
        match nix::unistd::read(&self.read, &mut b) {
            Ok(1) => Stage::from_byte(b[0]),
            _ => None,
        }
    }
}

/// Installs `setup` on `cmd`, to run in the child after `fork` and before `exec`. A failure
/// fails the spawn with the system call's error; the returned [`Report`] then says which step
/// it was.
pub fn prepare(cmd: &mut Command, setup: Setup) -> std::io::Result<Report> {
    let (hook, report) = hook_of(setup)?;
    // SAFETY: the hook runs in the forked child, where only async-signal-safe calls are allowed:
    // it makes only the system calls signal, pwrite, setsid, setpgid, write, sched_setaffinity,
    // setgroups, setgid, setuid, chdir, umask, open, dup2, ioctl, fcntl and close, on memory
    // prepared before the fork, and allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(hook);
    }
    Ok(report)
}

/// The child's steps of `setup`, to run between the fork (or `clone`, [`spawn_single_threaded`])
/// and the exec, and the [`Report`] that tells which failed.
fn hook_of(setup: Setup) -> std::io::Result<(impl FnMut() -> std::io::Result<()> + Send + Sync + 'static, Report)> {
    use nix::fcntl::OFlag;
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
    let report_fd = write.as_raw_fd();
    // At most a few; a fixed array, so the child allocates nothing.
    let mut fds: [Option<std::os::fd::RawFd>; 4] = [None; 4];
    if setup.cgroup_procs.len() > fds.len() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "more than 4 cgroups to join"));
    }
    for (slot, f) in fds.iter_mut().zip(setup.cgroup_procs) {
        *slot = Some(f.as_raw_fd());
    }
    let user = setup.user.map(|u| (u.uid, u.gid, u.groups.into_iter().map(nix::unistd::Gid::from_raw).collect::<Vec<_>>()));
    let (workdir, stdout, stderr, truncate) = (setup.workdir, setup.stdout, setup.stderr, setup.truncate);
    let (stdio, pty, inherit) = (setup.stdio, setup.pty, setup.inherit);
    let keep = setup.keep.map(|k| (k.table.as_raw_fd(), slot_offset(k.slot) as i64));
    let umask = nix::sys::stat::Mode::from_bits_truncate(setup.umask.unwrap_or(0o022) & 0o777);
    // The CPU set is made here, not in the child; an id it cannot hold fails the launch now.
    let cpus = match setup.cpus {
        [] => None,
        ids => {
            let mut set = nix::sched::CpuSet::new();
            for &id in ids {
                set.set(id as usize)
                    .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("CPU {id} is out of range")))?;
            }
            Some(set)
        }
    };
    let hook = move || -> std::io::Result<()> {
        // SAFETY: `report_fd` is the write end of a pipe that the returned `Report` keeps open
        // until after the spawn.
        #[allow(unsafe_code)]
        let report = unsafe { BorrowedFd::borrow_raw(report_fd) };
        let fail = |stage: Stage, e: nix::Error| -> std::io::Error {
            let _ = nix::unistd::write(report, &[stage.byte()]);
            e.into()
        };
        if let Some((fd, base)) = keep {
            // What its keeper ignores is the task's to handle: the default actions again.
            for sig in KEEPER_IGNORES {
                // SAFETY: restoring the default action runs no handler code.
                #[allow(unsafe_code)]
                let _ = unsafe { nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigDfl) };
            }
            put(fd, &status_line(b"task", i64::from(nix::unistd::getpid().as_raw())), base + TASK_AT);
            if pty {
                // Its own session (and so its own process group, as without a terminal).
                nix::unistd::setsid().map_err(|e| fail(Stage::Keep, e))?;
            } else {
                nix::unistd::setpgid(nix::unistd::Pid::from_raw(0), nix::unistd::Pid::from_raw(0)).map_err(|e| fail(Stage::Keep, e))?;
            }
        }
        if let Some(set) = &cpus {
            nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), set).map_err(|e| fail(Stage::Affinity, e))?;
        }
        for fd in fds.into_iter().flatten() {
            // SAFETY: `fd` belongs to the caller's open file, which outlives the spawn.
            #[allow(unsafe_code)]
            let procs = unsafe { BorrowedFd::borrow_raw(fd) };
            nix::unistd::write(procs, b"0").map_err(|e| fail(Stage::Cgroup, e))?;
        }
        if let Some((uid, gid, groups)) = &user {
            nix::unistd::setgroups(groups).map_err(|e| fail(Stage::User, e))?;
            nix::unistd::setgid(nix::unistd::Gid::from_raw(*gid)).map_err(|e| fail(Stage::User, e))?;
            nix::unistd::setuid(nix::unistd::Uid::from_raw(*uid)).map_err(|e| fail(Stage::User, e))?;
        }
        if let Some(d) = &workdir {
            nix::unistd::chdir(d.as_c_str()).map_err(|e| fail(Stage::Workdir, e))?;
        }
        nix::sys::stat::umask(umask);
        if let Some(path) = &stdout {
            let out = open_append(path, truncate).map_err(|e| fail(Stage::Stdout, e))?;
            nix::unistd::dup2_stdout(&out).map_err(|e| fail(Stage::Stdout, e))?;
            match &stderr {
                Some(p) => {
                    let err = open_append(p, truncate).map_err(|e| fail(Stage::Stderr, e))?;
                    nix::unistd::dup2_stderr(&err).map_err(|e| fail(Stage::Stderr, e))?;
                }
                None => nix::unistd::dup2_stderr(&out).map_err(|e| fail(Stage::Stderr, e))?,
            }
        }
        for (target, from) in stdio.iter().enumerate() {
            if let Some(from) = *from {
                // SAFETY: dup2 onto 0, 1 or 2 from the caller's descriptor, open until the spawn.
                #[allow(unsafe_code)]
                if unsafe { nix::libc::dup2(from, target as i32) } < 0 {
                    return Err(fail(Stage::Stdio, nix::Error::last()));
                }
            }
        }
        if pty {
            // SAFETY: TIOCSCTTY takes an int argument; fd 0 is the terminal just set up.
            #[allow(unsafe_code)]
            if unsafe { nix::libc::ioctl(0, nix::libc::TIOCSCTTY, 0) } < 0 {
                return Err(fail(Stage::Stdio, nix::Error::last()));
            }
        }
        if let Some(fd) = inherit {
            // SAFETY: F_SETFD on a descriptor of the caller's, open until the spawn.
            #[allow(unsafe_code)]
            if unsafe { nix::libc::fcntl(fd, nix::libc::F_SETFD, 0) } < 0 {
                return Err(fail(Stage::Stdio, nix::Error::last()));
            }
        }
        Ok(())
    };
    Ok((hook, Report { read, write: Some(write) }))
}

/// Opens `path` for appending, creating it (mode 0666 under the child's umask), never as a
/// controlling terminal. It opens without blocking (a FIFO with no reader fails with ENXIO
/// instead of holding the launching agent, which waits for the exec), then makes the file
/// blocking again for the task.
fn open_append(path: &CStr, truncate: bool) -> nix::Result<OwnedFd> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let mut flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_APPEND | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK;
    if truncate {
        flags |= OFlag::O_TRUNC;
    }
    let fd = nix::fcntl::open(path, flags, nix::sys::stat::Mode::from_bits_truncate(0o666))?;
    fcntl(&fd, FcntlArg::F_SETFL(OFlag::O_WRONLY | OFlag::O_APPEND))?;
    Ok(fd)
}

/// Sets a terminal's window size (`TIOCSWINSZ`, which also sends SIGWINCH to its foreground
/// process group).
pub fn set_winsize(fd: std::os::fd::BorrowedFd<'_>, rows: u16, cols: u16) -> std::io::Result<()> {
    let ws = nix::libc::winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCSWINSZ reads one winsize from the pointer, which lives on the stack.
    #[allow(unsafe_code)]
    let r = unsafe { nix::libc::ioctl(fd.as_raw_fd(), nix::libc::TIOCSWINSZ, &ws) };
    if r < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

/// A terminal's window size (rows, columns), `None` if `fd` is no terminal.
pub fn winsize(fd: std::os::fd::BorrowedFd<'_>) -> Option<(u16, u16)> {
    let mut ws = nix::libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ writes one winsize through the pointer, which lives on the stack.
    #[allow(unsafe_code)]
    let r = unsafe { nix::libc::ioctl(fd.as_raw_fd(), nix::libc::TIOCGWINSZ, &mut ws) };
    (r == 0).then_some((ws.ws_row, ws.ws_col))
}

/// Makes a closed output pipe end this process quietly, as it does a C program (`squeue |
/// head -2`): SIGPIPE back to its default action. Rust programs start with SIGPIPE ignored, so
/// a write to a closed pipe fails with EPIPE and `println!` panics. For commands only: a
/// daemon keeps ignoring it (a peer closing a socket must not kill it).
pub fn quiet_sigpipe() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: installing the default action runs no handler code of ours.
    #[allow(unsafe_code)]
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}

/// Makes this process a keeper of tasks (the agent's launcher): a session of its own, named
/// `tandem-keeper` (in `ps`), ignoring the signals a terminal or a process group would send it
/// ([`KEEPER_IGNORES`]; its tasks get their default actions back).
pub fn become_keeper() {
    use nix::sys::signal::{SigHandler, signal};
    let _ = nix::unistd::setsid();
    let _ = nix::sys::prctl::set_name(c"tandem-keeper");
    for sig in KEEPER_IGNORES {
        // SAFETY: ignoring a signal runs no handler code.
        #[allow(unsafe_code)]
        let _ = unsafe { signal(sig, SigHandler::SigIgn) };
    }
}

/// Ignores SIGPIPE again (after [`quiet_sigpipe`]), for a command that writes to sockets whose
/// peers may close first (`srun` and its tasks' agents): such a write then fails with EPIPE,
/// which the command handles, instead of killing it.
pub fn ignore_sigpipe() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: ignoring a signal runs no handler code.
    #[allow(unsafe_code)]
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigIgn) };
}

/// Raises this process's open-file limit: the soft limit to the hard one and, where allowed
/// (root), both to `want` (at most the kernel's `fs.nr_open`), as a controller or a host of many
/// agents at scale needs (one descriptor per connection). Returns the soft limit now in force.
pub fn raise_nofile(want: u64) -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else { return 0 };
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open").ok().and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or(hard);
    let want = want.min(nr_open);
    if want > hard && setrlimit(Resource::RLIMIT_NOFILE, want, want).is_ok() {
        return want;
    }
    if hard > soft && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("exec-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn c(p: &std::path::Path) -> CString {
        CString::new(p.as_os_str().as_encoded_bytes()).unwrap()
    }

    #[test]
    fn the_hook_runs_in_the_child_and_its_failure_fails_the_spawn() {
        let mut cmd = Command::new("true");
        let _r = prepare(&mut cmd, Setup::default()).unwrap();
        assert!(cmd.status().unwrap().success());
        // Without root, switching to another uid fails: the spawn reports it, and which step.
        if !nix::unistd::geteuid().is_root() {
            let mut cmd = Command::new("true");
            let mut r = prepare(&mut cmd, Setup { user: Some(User { uid: 0, gid: 0, groups: vec![0] }), ..Setup::default() }).unwrap();
            assert!(cmd.spawn().is_err());
            assert_eq!(r.failed(), Some(Stage::User));
        }
        // Writing to a file that is not a cgroup's: the child writes "0" to it, then execs.
        let d = temp("cg");
        let path = d.join("procs");
        let f = std::fs::File::create(&path).unwrap();
        let mut cmd = Command::new("true");
        let mut r = prepare(&mut cmd, Setup { cgroup_procs: &[&f], ..Setup::default() }).unwrap();
        assert!(cmd.status().unwrap().success());
        assert_eq!(r.failed(), None);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "0");
        std::fs::remove_dir_all(d).ok();
    }

    #[test]
    fn the_child_enters_its_directory_and_appends_to_its_files_relative_to_it() {
        let d = temp("io");
        std::fs::write(d.join("out"), "before\n").unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "pwd; echo oops >&2"]);
        let _r = prepare(
            &mut cmd,
            Setup { workdir: Some(c(&d)), stdout: Some(c("out".as_ref())), stderr: Some(c("err".as_ref())), ..Setup::default() },
        )
        .unwrap();
        assert!(cmd.status().unwrap().success());
        assert_eq!(std::fs::read_to_string(d.join("out")).unwrap(), format!("before\n{}\n", d.display()));
        assert_eq!(std::fs::read_to_string(d.join("err")).unwrap(), "oops\n");
        // One file for both.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo a; echo b >&2"]);
        let _r = prepare(&mut cmd, Setup { workdir: Some(c(&d)), stdout: Some(c("both".as_ref())), ..Setup::default() }).unwrap();
        assert!(cmd.status().unwrap().success());
        assert_eq!(std::fs::read_to_string(d.join("both")).unwrap(), "a\nb\n");
        std::fs::remove_dir_all(d).ok();
    }

    #[test]
    fn output_files_are_created_0666_under_the_tasks_umask() {
        use std::os::unix::fs::PermissionsExt;
        let d = temp("umask");
        for (umask, want, name) in [(None, 0o644, "default"), (Some(0o077), 0o600, "private"), (Some(0o002), 0o664, "group")] {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", &format!("umask; touch {name}.made")]);
            let out = format!("{name}.out");
            let _r = prepare(&mut cmd, Setup { workdir: Some(c(&d)), stdout: Some(c(out.as_ref())), umask, ..Setup::default() }).unwrap();
            assert!(cmd.status().unwrap().success());
            let mode = |f: &str| std::fs::metadata(d.join(f)).unwrap().permissions().mode() & 0o777;
            assert_eq!((mode(&out), mode(&format!("{name}.made"))), (want, want), "{name}");
            assert_eq!(std::fs::read_to_string(d.join(&out)).unwrap().trim(), format!("{:04o}", umask.unwrap_or(0o022)));
        }
        std::fs::remove_dir_all(d).ok();
    }

    #[test]
    fn a_task_is_bound_to_the_cpus_it_is_given() {
        // The CPUs this process may use: bind a child to the first of them.
        let mine = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
        let first = (0..nix::sched::CpuSet::count()).find(|&i| mine.is_set(i).unwrap_or(false)).unwrap() as u32;
        let mut cmd = Command::new("grep");
        cmd.args(["Cpus_allowed_list", "/proc/self/status"]);
        let _r = prepare(&mut cmd, Setup { cpus: &[first], ..Setup::default() }).unwrap();
        let out = String::from_utf8(cmd.output().unwrap().stdout).unwrap();
        assert_eq!(out.split_whitespace().last(), Some(first.to_string().as_str()), "{out}");
        // A CPU this machine does not have: the spawn fails, and says it was the binding.
        let absent = (0..1024u32).rev().find(|&i| !mine.is_set(i as usize).unwrap_or(true)).unwrap();
        let mut cmd = Command::new("true");
        let mut r = prepare(&mut cmd, Setup { cpus: &[absent], ..Setup::default() }).unwrap();
        assert!(cmd.spawn().is_err());
        assert_eq!(r.failed(), Some(Stage::Affinity));
        // One a CPU set cannot hold: refused before any fork.
        assert!(prepare(&mut Command::new("true"), Setup { cpus: &[4096], ..Setup::default() }).is_err());
    }

    #[test]
    fn each_failing_step_is_named_and_a_fifo_without_reader_does_not_block() {
        let d = temp("fail");
        let cases: Vec<(Setup, Stage)> = vec![
            (Setup { workdir: Some(c(&d.join("missing"))), ..Setup::default() }, Stage::Workdir),
            (Setup { stdout: Some(c(&d.join("missing/out"))), ..Setup::default() }, Stage::Stdout),
            (Setup { stdout: Some(c(&d.join("ok"))), stderr: Some(c(&d.join("missing/err"))), ..Setup::default() }, Stage::Stderr),
        ];
        for (setup, stage) in cases {
            let mut cmd = Command::new("true");
            let mut r = prepare(&mut cmd, setup).unwrap();
            let e = cmd.spawn().unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc_enoent()), "{stage:?}: {e}");
            assert_eq!(r.failed(), Some(stage));
        }
        let fifo = d.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let mut cmd = Command::new("true");
        let mut r = prepare(&mut cmd, Setup { stdout: Some(c(&fifo)), ..Setup::default() }).unwrap();
        assert_eq!(cmd.spawn().unwrap_err().raw_os_error(), Some(nix::errno::Errno::ENXIO as i32));
        assert_eq!(r.failed(), Some(Stage::Stdout));
        std::fs::remove_dir_all(d).ok();
    }

    fn libc_enoent() -> i32 {
        nix::errno::Errno::ENOENT as i32
    }

    #[test]
    fn a_kept_task_writes_its_pid_to_its_slot_and_its_keeper_records_the_rest() {
        let d = temp("keep");
        // Tasks share one table, each in its own slot.
        let path = d.join("status");
        let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        for (slot, (script, want)) in
            [("exit 7", (Some(7), None)), ("kill -TERM $$", (None, Some(15))), ("exit 0", (Some(0), None))].into_iter().enumerate()
        {
            let slot = slot as u32;
            clear_slot(&f, slot).unwrap();
            let mut cmd = Command::new("sh");
            // Its own process group, and the default action for what a keeper ignores.
            cmd.args(["-c", &format!("test $(ps -o pgid= $$) -eq $$ || exit 9; {script}")]);
            let _r = prepare(&mut cmd, Setup { keep: Some(Keep { table: &f, slot }), ..Setup::default() }).unwrap();
            // SAFETY: ignoring a signal runs no handler code.
            #[allow(unsafe_code)]
            let _ = unsafe { nix::sys::signal::signal(nix::sys::signal::Signal::SIGTERM, nix::sys::signal::SigHandler::SigIgn) };
            let mut child = cmd.spawn().unwrap();
            #[allow(unsafe_code)]
            let _ = unsafe { nix::sys::signal::signal(nix::sys::signal::Signal::SIGTERM, nix::sys::signal::SigHandler::SigDfl) };
            let st = child.wait().unwrap();
            let s = Status::read(&f, slot).unwrap();
            assert_eq!(s.task, Some(child.id() as i32), "{script}: {s:?}");
            assert!(!s.ended());
            record_keeper(&f, slot, 42).unwrap();
            use std::os::unix::process::ExitStatusExt;
            record_end(&f, slot, st.code(), st.signal()).unwrap();
            let s = Status::read(&f, slot).unwrap();
            assert_eq!((s.keeper, s.code, s.signal), (Some(42), want.0, want.1), "{script}: {s:?}");
            assert!(s.ended() && !s.fenced);
        }
        // Lines are fixed-width, whatever the number.
        assert_eq!(&status_line(b"exit", -3), b"exit -3        \n");
        assert_eq!(Status::parse(b"task 12\nkeep x\nbogus\n"), Status { task: Some(12), ..Status::default() });
        // One deadline for every slot; a fenced task says so.
        assert_eq!(deadline(&f), None);
        set_deadline(&f, 1234).unwrap();
        assert_eq!(deadline(&f), Some(1234));
        record_fenced(&f, 1).unwrap();
        let s = Status::read(&f, 1).unwrap();
        assert!(s.fenced && s.deadline_ms == Some(1234), "{s:?}");
        assert!(!Status::read(&f, 0).unwrap().fenced);
        std::fs::remove_dir_all(d).ok();
    }

    #[test]
    fn a_user_is_looked_up_with_its_groups() {
        let me = nix::unistd::getuid().as_raw();
        let g = nix::unistd::getgid().as_raw();
        let u = User::lookup(me, g);
        assert_eq!((u.uid, u.gid), (me, g));
        assert!(u.groups.contains(&g), "{u:?}");
        // A uid with no name: just its group.
        assert_eq!(User::lookup(4_000_000_000, 77).groups, vec![77]);
    }
}
