//! `srun --mpi=pmix` on a node: `tandem __pmix-task -- PROGRAM ARGS...` hosts an OpenPMIx
//! server for one task and runs the task under it. The agent starts it in the task's place
//! (as the job's user, in the job's cgroup, with the task's streams and its PMI socket, which
//! the agent tunnels to `srun`); it
//! 1. says hello to `srun`'s hub ([`pmi::pmix`]) and gets the step's layout;
//! 2. loads OpenPMIx's library at run time (`libpmix.so.2`, or `TANDEM_PMIX_LIBRARY`), starts
//!    its server with its files in a new 0700 directory, registers the step's namespace as
//!    Slurm's `mpi/pmix` does (sizes, node and process maps, local peers, and each rank's
//!    rank, local and node rank, host name and node id) and the one client it serves;
//! 3. runs the task with the variables `PMIx_server_setup_fork` gives (`PMIX_NAMESPACE`,
//!    `PMIX_RANK`, `PMIX_SERVER_URI*`, ...), and relays what crosses tasks: a fence's data to
//!    the hub and everyone's back, an abort, the task's connection and finalize;
//! 4. when the task ends, removes its directory and ends as the task did (its exit code, or
//!    the same signal).
//!
//! OpenPMIx 4 clients reach their server over TCP on the loopback interface (4.x has no Unix
//! socket transport), and the library believes the user id a client states. So every client
//! connection is checked against the kernel's socket table before it is accepted: the client's
//! end must belong to the job's user (`/proc/net/tcp`, `/proc/net/tcp6`), and one that does
//! not is refused and cut (SECURITY.md).
//!
//! The signals a task's process group gets (`scancel`, `--signal`) reach the task directly;
//! this host catches and drops them, so that it outlives the task and reports its end.

mod ffi;
mod peers;

use pmi::pmix::{self as wire, Layout};
use std::ffi::{c_char, c_int, c_void};
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

pub use wire::TASK_CMD;

/// The library, unless `TANDEM_PMIX_LIBRARY` names another.
pub const LIBRARY: &str = "libpmix.so.2";

/// The longest message from the hub.
const MAX_MESSAGE: usize = 256 << 20;

/// The socket to `srun`'s hub (writes from the library's thread and ours).
static HUB: OnceLock<Mutex<UnixStream>> = OnceLock::new();
/// Fences sent and not yet answered: `seq` to the library's callback and its data.
static FENCES: Mutex<Vec<(u32, ffi::ModexCb, usize)>> = Mutex::new(Vec::new());
static SEQ: AtomicU32 = AtomicU32::new(0);
/// This task's rank, for messages.
static RANK: AtomicU32 = AtomicU32::new(0);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Sends one message to the hub: false if it is gone.
fn send(kind: u8, body: &[u8]) -> bool {
    HUB.get().is_some_and(|h| lock(h).write_all(&wire::frame(kind, body)).is_ok())
}

extern "C" fn client_connected(_p: *const ffi::Proc, _o: *mut c_void, _cb: ffi::OpCb, _d: *mut c_void) -> ffi::Status {
    let foreign = peers::cut_foreign();
    if !foreign.is_empty() {
        let _ = writeln!(
            std::io::stderr(),
            "srun: error: task {}: refused a connection to its PMIx server from another user (uid {})",
            RANK.load(Ordering::Relaxed),
            foreign.iter().map(|u| u.map_or("unknown".to_string(), |u| u.to_string())).collect::<Vec<_>>().join(", ")
        );
        return ffi::ERR_INVALID_CRED;
    }
    if !send(wire::CONNECTED, b"") {
        return ffi::ERROR;
    }
    ffi::OPERATION_SUCCEEDED
}

extern "C" fn client_finalized(_p: *const ffi::Proc, _o: *mut c_void, _cb: ffi::OpCb, _d: *mut c_void) -> ffi::Status {
    let _ = send(wire::FINALIZED, b"");
    ffi::OPERATION_SUCCEEDED
}

extern "C" fn abort(
    _p: *const ffi::Proc,
    _o: *mut c_void,
    status: c_int,
    msg: *const c_char,
    _procs: *mut ffi::Proc,
    _n: usize,
    _cb: ffi::OpCb,
    _d: *mut c_void,
) -> ffi::Status {
    let mut body = status.to_be_bytes().to_vec();
    body.extend_from_slice(ffi::text(msg).as_bytes());
    let _ = send(wire::ABORT, &body);
    ffi::OPERATION_SUCCEEDED
}

extern "C" fn fence_nb(
    procs: *const ffi::Proc,
    nprocs: usize,
    _info: *const c_void,
    _ninfo: usize,
    data: *mut c_char,
    ndata: usize,
    cb: ffi::ModexCb,
    cbdata: *mut c_void,
) -> ffi::Status {
    let procs = ffi::procs(procs, nprocs);
    // Every rank (a wildcard, or no list) is an empty list on the wire.
    let ranks: Vec<u32> = if procs.iter().any(|p| p.rank == ffi::RANK_WILDCARD) { Vec::new() } else { procs.iter().map(|p| p.rank).collect() };
    let seq = SEQ.fetch_add(1, Ordering::SeqCst);
    lock(&FENCES).push((seq, cb, cbdata as usize));
    if !send(wire::FENCE, &wire::fence_body(seq, &ranks, ffi::bytes(data, ndata))) {
        // srun is gone: the library answers the client with the error itself.
        lock(&FENCES).retain(|(s, _, _)| *s != seq);
        return ffi::ERROR;
    }
    ffi::SUCCESS
}

extern "C" fn tool_connected(_info: *mut c_void, _n: usize, cb: ffi::ToolCb, cbdata: *mut c_void) {
    // No tools: the only process this server serves is its task.
    ffi::tool_done(cb, cbdata, ffi::ERR_NOT_SUPPORTED);
}

extern "C" fn direct_modex(_p: *const ffi::Proc, _i: *const c_void, _n: usize, _cb: ffi::ModexCb, _d: *mut c_void) -> ffi::Status {
    // Fences collect every server's data; there is nothing more to ask for.
    ffi::ERR_NOT_SUPPORTED
}

/// Reads the hub's answers for ever (the library's thread waits on them).
fn answers(mut from: UnixStream) {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match wire::unframe(&mut buf, MAX_MESSAGE) {
            Ok(Some((wire::FENCE_DONE, body))) => {
                let Some((seq, data)) = wire::fence_done(&body) else { continue };
                let found = {
                    let mut f = lock(&FENCES);
                    f.iter().position(|(s, _, _)| *s == seq).map(|i| f.remove(i))
                };
                if let Some((_, cb, cbdata)) = found {
                    ffi::modex_done(cb, cbdata as *mut c_void, ffi::SUCCESS, data.to_vec());
                }
                continue;
            }
            Ok(Some(_)) => continue,
            Ok(None) => {}
            Err(_) => return fail_waiting(),
        }
        match from.read(&mut chunk) {
            // srun is gone: the step is ending.
            Ok(0) | Err(_) => return fail_waiting(),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Fails the fences that wait for the hub, so the task is not stuck.
fn fail_waiting() {
    let waiting = std::mem::take(&mut *lock(&FENCES));
    for (_, cb, cbdata) in waiting {
        ffi::modex_done(cb, cbdata as *mut c_void, ffi::ERROR, Vec::new());
    }
}

/// Waits for the hub's layout.
fn hello(hub: &mut UnixStream) -> Result<Layout, String> {
    hub.write_all(&wire::frame(wire::HELLO, b"")).map_err(|e| format!("writing to srun: {e}"))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match wire::unframe(&mut buf, 16 << 20) {
            Ok(Some((wire::JOB, body))) => return Layout::decode(&body),
            Ok(Some((k, _))) => return Err(format!("srun sent message type {k} before the layout")),
            Ok(None) => {}
            Err(n) => return Err(format!("srun sent a message of {n} bytes")),
        }
        match hub.read(&mut chunk) {
            Ok(0) => return Err("srun closed the step's PMI connection".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("reading from srun: {e}")),
        }
    }
}

/// The namespace's information, as Slurm's `mpi/pmix` registers it.
fn register(lib: &ffi::Lib, l: &Layout) -> Result<(), String> {
    use ffi::Value::*;
    let size = l.size();
    let local = &l.map[l.node as usize];
    let node_map = lib.node_regex(&l.nodes.join(","))?;
    let proc_map = lib.ppn_regex(&l.map.iter().map(|rs| rs.iter().map(u32::to_string).collect::<Vec<_>>().join(",")).collect::<Vec<_>>().join(";"))?;
    let peers = local.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let per_rank: Vec<ffi::Infos<'_>> = (0..size)
        .map(|r| {
            let node = l.node_of(r).unwrap_or(0);
            let lr = l.local_rank(r).unwrap_or(0);
            ffi::Infos::new(
                lib,
                &[
                    ("pmix.rank", Rank(r)),
                    ("pmix.appnum", U32(0)),
                    ("pmix.grank", Rank(r)),
                    ("pmix.apprank", Rank(r)),
                    ("pmix.lrank", U16(lr)),
                    ("pmix.nrank", U16(lr)),
                    ("pmix.hname", Str(&l.nodes[node as usize])),
                    ("pmix.nodeid", U32(node)),
                ],
            )
        })
        .collect::<Result<_, _>>()?;
    let mut items: Vec<(&str, ffi::Value<'_>)> = vec![
        ("pmix.jobid", Str(&l.jobid)),
        ("pmix.univ.size", U32(size)),
        ("pmix.job.size", U32(size)),
        ("pmix.job.napps", U32(1)),
        ("pmix.app.size", U32(size)),
        ("pmix.max.size", U32(size)),
        ("pmix.local.size", U32(local.len() as u32)),
        ("pmix.node.size", U32(local.len() as u32)),
        ("pmix.aldr", Rank(0)),
        ("pmix.nmap", Regex(&node_map)),
        ("pmix.pmap", Regex(&proc_map)),
        ("pmix.lpeers", Str(&peers)),
        ("pmix.lldr", Rank(local.iter().copied().min().unwrap_or(0))),
    ];
    for p in &per_rank {
        items.push(("pmix.pdata", Infos(p)));
    }
    let info = ffi::Infos::new(lib, &items)?;
    // This server serves one client: its own task (the others have their own).
    lib.register_nspace(&l.nspace, 1, &info)
}

/// `tandem __pmix-task -- PROGRAM ARGS...`: the exit code (or the task's death by its signal).
pub fn task_main(argv: &[String]) -> i32 {
    let argv = argv.strip_prefix(&["--".to_string()]).unwrap_or(argv);
    let Some((program, args)) = argv.split_first() else {
        eprintln!("usage: tandem {TASK_CMD} -- PROGRAM [ARGS...]");
        return 2;
    };
    match run(program, args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("srun: error: --mpi=pmix: {e}");
            1
        }
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
    RANK.store(layout.rank, Ordering::Relaxed);
    let reader = hub.try_clone().map_err(|e| e.to_string())?;
    let _ = HUB.set(Mutex::new(hub));
    let path = std::env::var("TANDEM_PMIX_LIBRARY").unwrap_or_else(|_| LIBRARY.to_string());
    let lib = ffi::Lib::load(&path).map_err(|e| format!("cannot load OpenPMIx ({e}); install it on the nodes (Debian: libpmix2)"))?;
    let lib: &'static ffi::Lib = Box::leak(Box::new(lib));
    let base = std::env::var("TMPDIR").ok().filter(|t| t.starts_with('/')).unwrap_or_else(|| "/tmp".into());
    let dir = nix::unistd::mkdtemp(format!("{}/tandem-pmix.{}.{}.XXXXXX", base.trim_end_matches('/'), layout.jobid, layout.rank).as_str())
        .map_err(|e| format!("making a directory in {base}: {e}"))?;
    let result = serve(lib, &layout, &dir, reader, program, args);
    let _ = std::fs::remove_dir_all(&dir);
    let status = result?;
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

fn serve(lib: &'static ffi::Lib, l: &Layout, dir: &std::path::Path, reader: UnixStream, program: &str, args: &[String]) -> Result<std::process::ExitStatus, String> {
    let d = dir.display().to_string();
    let module = Box::leak(Box::new(ffi::Module {
        client_connected: Some(client_connected),
        client_finalized: Some(client_finalized),
        abort: Some(abort),
        fence_nb: Some(fence_nb),
        direct_modex: Some(direct_modex),
        unset_a: [std::ptr::null(); 11],
        tool_connected: Some(tool_connected),
        unset_b: [std::ptr::null(); 11],
    }));
    let init = ffi::Infos::new(
        lib,
        &[
            ("pmix.srvr.tmpdir", ffi::Value::Str(&d)),
            ("pmix.sys.tmpdir", ffi::Value::Str(&d)),
            ("pmix.srvr.tool", ffi::Value::Bool(false)),
            ("pmix.srvr.sys", ffi::Value::Bool(false)),
            ("pmix.srvr.sess", ffi::Value::Bool(false)),
            ("pmix.srvr.remote", ffi::Value::Bool(false)),
            // Loopback only, whatever the user's PMIX_MCA_* say: the peer check reads the
            // node's own socket tables.
            ("pmix.tcp.ifinclude", ffi::Value::Str("lo")),
            ("pmix.tcp.disipv6", ffi::Value::Bool(true)),
        ],
    )?;
    lib.server_init(module, &init)?;
    std::thread::spawn(move || answers(reader));
    register(lib, l)?;
    let me = ffi::Proc::new(&l.nspace, l.rank);
    let (uid, gid) = (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw());
    lib.register_client(&me, uid, gid)?;
    let env = lib.setup_fork(&me)?;
    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    for k in ["PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_JOBID", "PMI_APPNUM"] {
        cmd.env_remove(k);
    }
    cmd.envs(env);
    let mut child = cmd.spawn().map_err(|e| format!("cannot run {program}: {e}"))?;
    child.wait().map_err(|e| format!("waiting for {program}: {e}"))
}
