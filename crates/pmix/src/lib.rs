//! `srun --mpi=pmix` on a node, as the job's user: each task runs under `tandem __pmix-task`
//! (the task host), and the step's tasks on the node share one OpenPMIx server, `tandem
//! __pmix-node` (`node`), as under Slurm's `mpi/pmix` (where slurmstepd hosts it).
//!
//! The agent starts the task host in the task's place (the job's user, cgroup, streams, and the
//! task's PMI socket, which the agent tunnels to `srun`). It
//! 1. says hello to `srun`'s hub ([`pmi::pmix`]) and gets the step's layout;
//! 2. makes (or finds) the step's directory for this node, mode 0700, named with a secret of
//!    the step's so that no one else can take the name first; under its lock, connects to the
//!    node's server there, starting it if there is none yet;
//! 3. registers its rank and gets the variables `PMIx_server_setup_fork` gives
//!    (`PMIX_NAMESPACE`, `PMIX_RANK`, `PMIX_SERVER_URI*`, ...), runs the task with them, and
//!    relays between the node's server and the hub (fences, the client's connect, finalize and
//!    abort one way; the fences' answers the other);
//! 4. when the task ends, leaves the server (the last one to leave ends it, and it removes the
//!    directory) and ends as the task did (its exit code, or the same signal).
//!
//! The node's server loads OpenPMIx's library at run time (`libpmix.so.2`, or
//! `TANDEM_PMIX_LIBRARY`). OpenPMIx 4 clients reach it over TCP on the loopback interface
//! (4.x has no Unix socket transport), and the library believes the user id a client states;
//! so every client connection is checked against the kernel's socket tables before it is
//! accepted (`peers`), and tools are refused (SECURITY.md).
//!
//! The signals a task's process group gets (`scancel`, `--signal`) reach the task directly;
//! the host catches and drops them, so that it outlives the task and reports its end. The
//! node's server has a process group of its own.

mod ffi;
mod node;
mod peers;

use pmi::pmix::{self as wire, Layout};
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use node::node_main;
pub use wire::{NODE_CMD, TASK_CMD};

/// The library, unless `TANDEM_PMIX_LIBRARY` names another.
pub const LIBRARY: &str = "libpmix.so.2";

/// The longest message from the hub or a task host.
const MAX_MESSAGE: usize = 256 << 20;

/// How long a task host waits for its node's server to listen.
const START_WAIT: Duration = Duration::from_secs(30);

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Loads OpenPMIx (once per process: it stays loaded).
pub(crate) fn load() -> Result<&'static ffi::Lib, String> {
    let path = std::env::var("TANDEM_PMIX_LIBRARY").unwrap_or_else(|_| LIBRARY.to_string());
    let lib = ffi::Lib::load(&path).map_err(|e| format!("cannot load OpenPMIx ({e}); install it on the nodes (Debian: libpmix2)"))?;
    Ok(Box::leak(Box::new(lib)))
}

/// `dir` is a directory (not a link) of this user's alone, mode 0700.
pub(crate) fn check_dir(dir: &Path) -> Result<(), String> {
    let m = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    if !m.file_type().is_dir() || m.uid() != me || m.mode() & 0o7777 != 0o700 {
        return Err(format!("{} is not a directory of this user's alone (mode 0700): refusing it", dir.display()));
    }
    Ok(())
}

/// `tandem __pmix-task -- PROGRAM ARGS...`: the exit code (or the task's death by its signal).
pub fn task_main(argv: &[String]) -> i32 {
    let argv = argv.strip_prefix(&["--".to_string()]).unwrap_or(argv);
    let Some((program, args)) = argv.split_first() else {
        let _ = writeln!(std::io::stderr(), "usage: tandem {TASK_CMD} -- PROGRAM [ARGS...]");
        return 2;
    };
    match run(program, args) {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "srun: error: --mpi=pmix: {e}");
            1
        }
    }
}

/// Waits for the hub's layout.
fn hello(hub: &mut UnixStream) -> Result<Layout, String> {
    hub.write_all(&wire::frame(wire::HELLO, b"")).map_err(|e| format!("writing to srun: {e}"))?;
    let (kind, body) = read_one(hub, 16 << 20).map_err(|e| format!("srun: {e}"))?;
    match kind {
        wire::JOB => Layout::decode(&body),
        k => Err(format!("srun sent message type {k} before the layout")),
    }
}

/// Reads one whole message (and nothing after it: the stream is read a byte at a time until
/// the header says how much follows).
fn read_one(s: &mut UnixStream, max: usize) -> Result<(u8, Vec<u8>), String> {
    let mut head = [0u8; 5];
    s.read_exact(&mut head).map_err(|e| format!("reading: {e}"))?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > max {
        return Err(format!("a message of {len} bytes"));
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).map_err(|e| format!("reading: {e}"))?;
    Ok((head[0], body))
}

/// The step's directory on this node: `$TMPDIR` (or `/tmp`)`/tandem-pmix.JOB.STEP.NODE.TOKEN`.
fn step_dir(l: &Layout) -> Result<PathBuf, String> {
    let base = std::env::var("TMPDIR").ok().filter(|t| t.starts_with('/')).unwrap_or_else(|| "/tmp".into());
    let dir = Path::new(&base).join(format!("tandem-pmix.{}.{}.{}", l.jobid, l.node, l.token));
    match nix::unistd::mkdir(&dir, nix::sys::stat::Mode::from_bits_truncate(0o700)) {
        Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
        Err(e) => return Err(format!("making {}: {e}", dir.display())),
    }
    check_dir(&dir)?;
    Ok(dir)
}

/// Connects to the node's server, starting it first if it is not there.
fn connect(dir: &Path, l: &Layout) -> Result<UnixStream, String> {
    let sock = node::socket_path(dir);
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(dir.join("lock"))
        .map_err(|e| format!("the lock in {}: {e}", dir.display()))?;
    let _held =
        nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| format!("locking {}: {e}", dir.display()))?;
    if let Ok(s) = UnixStream::connect(&sock) {
        return Ok(s);
    }
    let exe = std::env::current_exe().map_err(|e| format!("finding tandem's own program: {e}"))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(dir.join("node.log"))
        .map_err(|e| format!("the log in {}: {e}", dir.display()))?;
    let layout = String::from_utf8(l.encode()).map_err(|e| e.to_string())?;
    let mut child = std::process::Command::new(exe)
        .args([NODE_CMD, &dir.display().to_string(), &layout])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        // Not in the task's process group: signals to one task do not end the node's server.
        .process_group(0)
        .spawn()
        .map_err(|e| format!("starting the node's PMIx server: {e}"))?;
    let deadline = Instant::now() + START_WAIT;
    loop {
        if let Ok(s) = UnixStream::connect(&sock) {
            return Ok(s);
        }
        if let Ok(Some(st)) = child.try_wait() {
            let said = std::fs::read_to_string(dir.join("node.log")).unwrap_or_default();
            let said = said.trim().to_string();
            let _ = std::fs::remove_dir_all(dir);
            return Err(if said.is_empty() { format!("the node's PMIx server ended ({st})") } else { said });
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(dir);
            return Err(format!("the node's PMIx server did not start in {} s", START_WAIT.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run(program: &str, args: &[String]) -> Result<i32, String> {
    let fd: i32 = std::env::var("PMI_FD")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|fd| *fd > 2)
        .ok_or("no PMI socket (PMI_FD): tandem __pmix-task runs only as an srun --mpi=pmix task")?;
    // The descriptor is the agent's gift, ours alone from here (close-on-exec: the task does
    // not inherit it).
    let fd = owned(fd)?;
    nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC)).map_err(|e| format!("the PMI socket: {e}"))?;
    let mut hub = UnixStream::from(fd);
    ffi::catch_signals();
    let layout = hello(&mut hub)?;
    let dir = step_dir(&layout)?;
    let mut node = connect(&dir, &layout)?;
    node.write_all(&wire::frame(wire::REGISTER, &layout.rank.to_be_bytes()))
        .map_err(|e| format!("registering with the node's server: {e}"))?;
    let env = match read_one(&mut node, 1 << 20).map_err(|e| format!("the node's PMIx server: {e}"))? {
        (wire::ENV, body) => String::from_utf8_lossy(&body)
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
            .collect::<Vec<_>>(),
        (wire::REFUSED, why) => {
            return Err(format!("the node's PMIx server refused rank {}: {}", layout.rank, String::from_utf8_lossy(&why)));
        }
        (k, _) => return Err(format!("the node's PMIx server sent message type {k}")),
    };
    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    for k in ["PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_JOBID", "PMI_APPNUM"] {
        cmd.env_remove(k);
    }
    cmd.envs(env);
    let mut child = cmd.spawn().map_err(|e| format!("cannot run {program}: {e}"))?;
    // Relay both ways, bytes as they come: the two sides frame their own messages.
    let (mut node_r, mut node_w) = (node.try_clone().map_err(|e| e.to_string())?, node.try_clone().map_err(|e| e.to_string())?);
    let (mut hub_r, mut hub_w) = (hub.try_clone().map_err(|e| e.to_string())?, hub);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut node_r, &mut hub_w);
        let _ = done_tx.send(());
    });
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut hub_r, &mut node_w);
    });
    let status = child.wait().map_err(|e| format!("waiting for {program}: {e}"))?;
    // Leave the server; what it still had for the hub (the client's finalize) is passed on
    // before it closes its side.
    let _ = node.shutdown(std::net::Shutdown::Write);
    let _ = done_rx.recv_timeout(Duration::from_secs(5));
    if let Some(sig) = status.signal() {
        ffi::die_of(sig);
        return Ok(128 + sig);
    }
    Ok(status.code().unwrap_or(1))
}

fn owned(fd: i32) -> Result<OwnedFd, String> {
    if std::fs::symlink_metadata(format!("/proc/self/fd/{fd}")).is_err() {
        return Err(format!("PMI_FD {fd} is not open"));
    }
    // SAFETY: open (above); nothing else in this process owns it.
    #[allow(unsafe_code)]
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(owned)
}
