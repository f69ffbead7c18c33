//! `tandem __pmix-node DIR LAYOUT`: one node's OpenPMIx server for one step, as the job's
//! user. The step's first task host on the node starts it (in a process group of its own, in
//! the job's cgroup); every task host of the step on the node registers its rank over
//! `DIR/node.sock` and gets its task's variables back. What the library asks of its host is
//! sent to the task hosts of the ranks it concerns, which pass it to `srun`'s hub: a client's
//! connect, finalize or abort to its own rank's host; a fence to each local participant's host,
//! the node's data with the first and nothing with the others (the hub concatenates the
//! participants' contributions). Each host passes the hub's answer back; the first one ends the
//! fence. The server ends when its last task host has gone, and removes `DIR`.

use crate::{ffi, lock, peers};
use pmi::pmix::{self as wire, Layout};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

/// The step, as the first task host got it from the hub.
static LAYOUT: OnceLock<Layout> = OnceLock::new();
/// The directory, removed at the end.
static DIR: OnceLock<PathBuf> = OnceLock::new();
/// The task hosts connected, by rank.
static HOSTS: Mutex<Option<HashMap<u32, UnixStream>>> = Mutex::new(None);
/// Fences sent and not yet answered: `seq` to the library's callback and its data.
static FENCES: Mutex<Vec<(u32, ffi::ModexCb, usize)>> = Mutex::new(Vec::new());
static SEQ: AtomicU32 = AtomicU32::new(0);
/// Task hosts connected (registered or not yet): the server ends when none is left.
static LIVE: AtomicU32 = AtomicU32::new(0);

/// Sends one message to rank `rank`'s task host: false if it is not there.
fn to_host(rank: u32, kind: u8, body: &[u8]) -> bool {
    let mut g = lock(&HOSTS);
    g.as_mut().and_then(|h| h.get_mut(&rank)).is_some_and(|s| s.write_all(&wire::frame(kind, body)).is_ok())
}

/// An error for the user: to `srun` (through any task host), which prints it, and to this
/// server's log (`DIR/node.log`, read by a task host that cannot reach it).
fn say(what: std::fmt::Arguments<'_>) {
    let text = what.to_string();
    let _ = writeln!(std::io::stderr(), "{text}");
    let mut g = lock(&HOSTS);
    if let Some(s) = g.as_mut().and_then(|h| h.values_mut().next()) {
        let _ = s.write_all(&wire::frame(wire::NOTICE, text.as_bytes()));
    }
}

extern "C" fn client_connected(p: *const ffi::Proc, _o: *mut c_void, _cb: ffi::OpCb, _d: *mut c_void) -> ffi::Status {
    let foreign = peers::cut_foreign();
    if !foreign.is_empty() {
        let who: Vec<String> = foreign.iter().map(|u| u.map_or("unknown".to_string(), |u| u.to_string())).collect();
        say(format_args!(
            "node {}: refused a connection to the step's PMIx server from another user (uid {})",
            node_name(),
            who.join(", ")
        ));
        return ffi::ERR_INVALID_CRED;
    }
    let rank = ffi::procs(p, 1).first().map_or(u32::MAX, |p| p.rank);
    if !to_host(rank, wire::CONNECTED, b"") {
        return ffi::ERROR;
    }
    ffi::OPERATION_SUCCEEDED
}

extern "C" fn client_finalized(p: *const ffi::Proc, _o: *mut c_void, _cb: ffi::OpCb, _d: *mut c_void) -> ffi::Status {
    let rank = ffi::procs(p, 1).first().map_or(u32::MAX, |p| p.rank);
    let _ = to_host(rank, wire::FINALIZED, b"");
    ffi::OPERATION_SUCCEEDED
}

#[allow(clippy::too_many_arguments)]
extern "C" fn abort(
    p: *const ffi::Proc,
    _o: *mut c_void,
    status: c_int,
    msg: *const c_char,
    _procs: *mut ffi::Proc,
    _n: usize,
    _cb: ffi::OpCb,
    _d: *mut c_void,
) -> ffi::Status {
    let rank = ffi::procs(p, 1).first().map_or(u32::MAX, |p| p.rank);
    let mut body = status.to_be_bytes().to_vec();
    body.extend_from_slice(ffi::text(msg).as_bytes());
    let _ = to_host(rank, wire::ABORT, &body);
    ffi::OPERATION_SUCCEEDED
}

#[allow(clippy::too_many_arguments)]
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
    let Some(l) = LAYOUT.get() else { return ffi::ERROR };
    let procs = ffi::procs(procs, nprocs);
    let all = procs.is_empty() || procs.iter().any(|p| p.rank == ffi::RANK_WILDCARD);
    // Every rank is an empty list on the wire.
    let ranks: Vec<u32> = if all { Vec::new() } else { procs.iter().map(|p| p.rank).collect() };
    let local: Vec<u32> = l.map[l.node as usize].iter().copied().filter(|r| all || ranks.contains(r)).collect();
    if local.is_empty() {
        return ffi::ERROR;
    }
    let seq = SEQ.fetch_add(1, Ordering::SeqCst);
    lock(&FENCES).push((seq, cb, cbdata as usize));
    let data = ffi::bytes(data, ndata);
    for (i, r) in local.iter().enumerate() {
        let mine: &[u8] = if i == 0 { data } else { &[] };
        if !to_host(*r, wire::FENCE, &wire::fence_body(seq, &ranks, mine)) {
            // A participant's host is gone: the library answers the clients with the error.
            lock(&FENCES).retain(|(s, _, _)| *s != seq);
            return ffi::ERROR;
        }
    }
    ffi::SUCCESS
}

extern "C" fn tool_connected(_info: *mut c_void, _n: usize, cb: ffi::ToolCb, cbdata: *mut c_void) {
    // No tools: the server serves the step's tasks on this node alone.
    ffi::tool_done(cb, cbdata, ffi::ERR_NOT_SUPPORTED);
}

extern "C" fn direct_modex(_p: *const ffi::Proc, _i: *const c_void, _n: usize, _cb: ffi::ModexCb, _d: *mut c_void) -> ffi::Status {
    // Fences collect every node's data; there is nothing more to ask for.
    ffi::ERR_NOT_SUPPORTED
}

fn node_name() -> String {
    LAYOUT.get().map(|l| l.nodes[l.node as usize].clone()).unwrap_or_default()
}

/// The namespace's information, as Slurm's `mpi/pmix` registers it.
fn register(lib: &ffi::Lib, l: &Layout) -> Result<(), String> {
    use ffi::Value::*;
    let size = l.size();
    let local = &l.map[l.node as usize];
    let node_map = lib.node_regex(&l.nodes.join(","))?;
    let proc_map =
        lib.ppn_regex(&l.map.iter().map(|rs| rs.iter().map(u32::to_string).collect::<Vec<_>>().join(",")).collect::<Vec<_>>().join(";"))?;
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
    lib.register_nspace(&l.nspace, local.len() as i32, &info)
}

/// Serves one task host: its registration, then the hub's answers it passes back.
fn serve_host(lib: &'static ffi::Lib, mut s: UnixStream) {
    let l = LAYOUT.get().expect("set before the first connection");
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut rank = None;
    loop {
        match wire::unframe(&mut buf, crate::MAX_MESSAGE) {
            Ok(Some((wire::REGISTER, body))) if rank.is_none() => {
                let r = body.get(..4).and_then(|b| b.try_into().ok()).map(u32::from_be_bytes);
                let answer = match r {
                    Some(r) if !l.map[l.node as usize].contains(&r) => Err(format!("rank {r} is not on this node")),
                    Some(r) if lock(&HOSTS).as_ref().is_some_and(|h| h.contains_key(&r)) => Err(format!("rank {r} is here already")),
                    Some(r) => setup(lib, l, r).map(|env| (r, env)),
                    None => Err("a short registration".into()),
                };
                match answer {
                    Ok((r, env)) => {
                        let text: String = env.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
                        let Ok(w) = s.try_clone() else { break };
                        lock(&HOSTS).get_or_insert_with(HashMap::new).insert(r, w);
                        if s.write_all(&wire::frame(wire::ENV, text.as_bytes())).is_err() {
                            break;
                        }
                        rank = Some(r);
                    }
                    Err(e) => {
                        let _ = s.write_all(&wire::frame(wire::REFUSED, e.as_bytes()));
                        break;
                    }
                }
                continue;
            }
            Ok(Some((wire::FENCE_DONE, body))) if rank.is_some() => {
                let Some((seq, data)) = wire::fence_done(&body) else { continue };
                let found = {
                    let mut f = lock(&FENCES);
                    f.iter().position(|(s, _, _)| *s == seq).map(|i| f.remove(i))
                };
                // The first participant's answer ends the fence; the others' find it gone.
                if let Some((_, cb, cbdata)) = found {
                    ffi::modex_done(cb, cbdata as *mut c_void, ffi::SUCCESS, data.to_vec());
                }
                continue;
            }
            Ok(Some(_)) | Err(_) => break,
            Ok(None) => {}
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    // The host has gone (its task ended): the last one takes the server with it.
    if let (Some(h), Some(r)) = (lock(&HOSTS).as_mut(), rank) {
        h.remove(&r);
    }
    if LIVE.fetch_sub(1, Ordering::SeqCst) == 1 {
        end(0);
    }
}

/// Registers rank `r` as a client (once) and gives its variables.
fn setup(lib: &ffi::Lib, l: &Layout, r: u32) -> Result<Vec<(String, String)>, String> {
    static REGISTERED: Mutex<Vec<u32>> = Mutex::new(Vec::new());
    let me = ffi::Proc::new(&l.nspace, r);
    if !lock(&REGISTERED).contains(&r) {
        lib.register_client(&me, nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw())?;
        lock(&REGISTERED).push(r);
    }
    lib.setup_fork(&me)
}

/// `tandem __pmix-node DIR LAYOUT`: serves until its last task host has gone, or a
/// SIGTERM (the job's end), and takes `DIR` with it.
pub fn node_main(argv: &[String]) -> i32 {
    // Before any thread starts, so that every thread inherits the mask: the signals that end a
    // job are taken by one thread, which removes the directory first.
    let mut ends = nix::sys::signal::SigSet::empty();
    for s in [nix::sys::signal::Signal::SIGTERM, nix::sys::signal::Signal::SIGINT, nix::sys::signal::Signal::SIGHUP] {
        ends.add(s);
    }
    let _ = ends.thread_block();
    std::thread::spawn(move || {
        let _ = ends.wait();
        end(0);
    });
    match run(argv) {
        Ok(()) => end(0),
        Err(e) => {
            // The directory stays for the task host that started this server: it reads the
            // reason from the log there, then removes it.
            say(format_args!("{e}"));
            1
        }
    }
}

/// Removes the directory and exits.
fn end(code: i32) -> ! {
    if let Some(d) = DIR.get() {
        let _ = std::fs::remove_dir_all(d);
    }
    std::process::exit(code)
}

fn run(argv: &[String]) -> Result<(), String> {
    let [dir, layout] = argv else { return Err(format!("usage: tandem {} DIR LAYOUT", wire::NODE_CMD)) };
    let l = Layout::decode(layout.as_bytes())?;
    let dir = PathBuf::from(dir);
    crate::check_dir(&dir)?;
    // Only a directory of this user's alone is ever removed.
    let _ = DIR.set(dir.clone());
    let lib = crate::load()?;
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
    let _ = LAYOUT.set(l.clone());
    register(lib, &l)?;
    let sock = socket_path(&dir);
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock).map_err(|e| format!("listening on {}: {e}", sock.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    for s in listener.incoming() {
        let Ok(s) = s else { continue };
        // Only the user's own processes (the directory is theirs alone too).
        let ok = nix::sys::socket::getsockopt(&s, nix::sys::socket::sockopt::PeerCredentials).is_ok_and(|c| c.uid() == me);
        if ok {
            LIVE.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || serve_host(lib, s));
        }
    }
    Ok(())
}

/// The node server's socket in the step's node directory.
pub(crate) fn socket_path(dir: &Path) -> PathBuf {
    dir.join("node.sock")
}
