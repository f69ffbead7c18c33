//! An `srun` task's streams: the agent makes the pipes (or, for `--pty`, a pseudo-terminal)
//! and the PMI socket before the task starts, then connects to the `srun` that asked for the
//! step (`client::stepio`: TLS to the step's own CA, the step's key in the first frame) and
//! relays: output and error to `srun`, its input and window size to the task, PMI both ways.
//! The relay lives in the agent: an agent that restarts loses it, and a task that writes
//! afterwards gets EPIPE (its output files are untouched, as they were never used).
//!
//! `sattach` (`Order::Attach`): each relaying task is registered in `ATTACHED` with the last
//! `CACHE_FRAMES` frames of its output (as slurmstepd's outgoing message cache) and the
//! listeners attached to it. An attach connects to `sattach`'s listener exactly as to `srun`'s
//! (TLS to its own CA, its key in the hello), replays the cached frames, then gets every new
//! one; its input goes to the task as `srun`'s does (its end of input is ignored: `srun`'s
//! stdin still owns the task's). A listener that falls behind by `SINK_FRAMES` is dropped
//! rather than slow the task. When the task's streams end, every listener gets their end.

use client::stepio::{self, Hello, Kind};
use control::{StdinTo, StepIo, Task, TaskKey};
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// Output frames kept per task for a listener that attaches later (slurmstepd keeps 128).
const CACHE_FRAMES: usize = 128;
/// Frames a listener may fall behind by before it is dropped.
const SINK_FRAMES: usize = 1024;

/// What an attaching listener needs of a relaying task.
#[derive(Default)]
struct Attachable {
    /// The last output frames (stdout and stderr, not their ends).
    cache: VecDeque<(Kind, Vec<u8>)>,
    /// Attached listeners.
    sinks: Vec<mpsc::Sender<(Kind, Vec<u8>)>>,
    /// The task's input writer, when it reads srun's (listeners send data only, never its end).
    stdin: Option<mpsc::Sender<Option<Vec<u8>>>>,
}

/// Relaying tasks on this node, by task.
static ATTACHED: LazyLock<Mutex<HashMap<TaskKey, Arc<Mutex<Attachable>>>>> = LazyLock::new(Default::default);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The task's ends (given to the task) and ours (kept for the relay).
#[derive(Default)]
pub(crate) struct Ends {
    /// The task's standard input, output and error.
    pub(crate) theirs: [Option<OwnedFd>; 3],
    /// The task's PMI socket.
    pub(crate) pmi_theirs: Option<OwnedFd>,
    /// A pseudo-terminal for task 0 of a `--pty` step.
    pub(crate) pty: bool,
    stdin: Option<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    pmi: Option<OwnedFd>,
}

impl Ends {
    /// The descriptors the task's three streams become.
    pub(crate) fn stdio(&self) -> [Option<RawFd>; 3] {
        [0, 1, 2].map(|i| self.theirs[i].as_ref().map(AsRawFd::as_raw_fd))
    }

    /// What the task gets in place of the ends (once it has started).
    pub(crate) fn started(&mut self) {
        self.theirs = [None, None, None];
        self.pmi_theirs = None;
    }
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
}

/// Makes the ends for `t`'s streams that go to `srun` (and its PMI socket), all close-on-exec.
pub(crate) fn make(t: &Task, io: &StepIo) -> std::io::Result<Ends> {
    let mut e = Ends::default();
    if io.pty && t.rank == 0 {
        let size = io.winsize.map(|(rows, cols)| nix::pty::Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 });
        let p = nix::pty::openpty(size.as_ref(), None)?;
        nix::fcntl::fcntl(&p.master, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))?;
        nix::fcntl::fcntl(&p.slave, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))?;
        // The user's own terminal, as a login's is.
        let _ = nix::unistd::fchown(&p.slave, Some(t.uid.into()), Some(t.gid.into()));
        let slave = p.slave;
        e.theirs = [Some(slave.try_clone()?), Some(slave.try_clone()?), Some(slave)];
        e.stdout = Some(p.master);
        e.pty = true;
    } else if !io.pty {
        let reads = match io.stdin {
            StdinTo::All => true,
            StdinTo::Rank(r) => r == t.rank,
            StdinTo::Null => false,
        };
        if reads {
            let (r, w) = pipe()?;
            e.theirs[0] = Some(r);
            e.stdin = Some(w);
        }
        if io.stdout {
            let (r, w) = pipe()?;
            e.theirs[1] = Some(w);
            e.stdout = Some(r);
        }
        if io.stderr {
            let (r, w) = pipe()?;
            e.theirs[2] = Some(w);
            e.stderr = Some(r);
        }
    }
    if io.pmi {
        let (a, b) = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::Stream,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )?;
        e.pmi = Some(a);
        e.pmi_theirs = Some(b);
    }
    Ok(e)
}

type Reader = Box<dyn tokio::io::AsyncRead + Unpin + Send>;
type Writer = Box<dyn tokio::io::AsyncWrite + Unpin + Send>;

/// Our end of a pipe, terminal or socket made non-blocking, as tokio's pipe types require of
/// a descriptor given unchecked: a blocking one would stop the agent's whole runtime in a
/// read that waits for the task's next output, while the task waits for input that only this
/// runtime can give it (`srun cat < file`, `kubectl exec -i ... cat`). The task's ends are
/// other open files and stay blocking.
fn nonblocking(fd: &OwnedFd) -> std::io::Result<()> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}

fn reader(fd: OwnedFd) -> std::io::Result<Reader> {
    nonblocking(&fd)?;
    Ok(Box::new(tokio::net::unix::pipe::Receiver::from_owned_fd_unchecked(fd)?))
}

fn writer(fd: OwnedFd) -> std::io::Result<Writer> {
    nonblocking(&fd)?;
    Ok(Box::new(tokio::net::unix::pipe::Sender::from_owned_fd_unchecked(fd)?))
}

/// Pumps one of the task's outputs into frames of `kind`, then an empty one (a terminal
/// whose other side closed reads as EIO: the end too).
async fn pump(mut fd: Reader, kind: Kind, tx: mpsc::Sender<(Kind, Vec<u8>)>) {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match fd.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if tx.send((kind, buf[..n].to_vec())).await.is_err() {
                    return;
                }
            }
        }
    }
    let _ = tx.send((kind, Vec::new())).await;
}

/// Starts the relay for a task that has just started with `ends`' other halves.
pub(crate) fn relay(t: &Task, io: StepIo, ends: Ends) {
    let hello = Hello { key: io.key.clone(), job: t.job, step: t.step, rank: t.rank };
    let what = format!("{}.{} task {}", t.job, t.step, t.rank);
    let key = TaskKey { job: t.job, epoch: t.epoch, step: t.step, rank: t.rank };
    let shared = Arc::new(Mutex::new(Attachable::default()));
    lock(&ATTACHED).insert(key, shared.clone());
    tokio::spawn(async move {
        if let Err(e) = run(hello, &io, ends, shared.clone()).await {
            tracing::warn!("step {what}: I/O with srun at {}: {e}", io.addr);
        }
        // The task's streams are over: every listener gets their end.
        lock(&ATTACHED).remove(&key);
        let sinks = std::mem::take(&mut lock(&shared).sinks);
        for s in sinks {
            for k in [Kind::Stdout, Kind::Stderr] {
                let _ = s.try_send((k, Vec::new()));
            }
        }
    });
}

/// Attaches `io` (a `sattach` listener) to every task of `job.step` (run `epoch`) that
/// relays its I/O on this node; returns how many.
pub(crate) fn attach(job: u64, epoch: u32, step: u32, io: StepIo) -> usize {
    let tasks: Vec<(TaskKey, Arc<Mutex<Attachable>>)> =
        lock(&ATTACHED).iter().filter(|(k, _)| k.job == job && k.epoch == epoch && k.step == step).map(|(k, a)| (*k, a.clone())).collect();
    let n = tasks.len();
    for (k, task) in tasks {
        let io = io.clone();
        tokio::spawn(async move {
            if let Err(e) = listen(k, &io, task).await {
                tracing::warn!("step {}.{} task {}: sattach at {}: {e}", k.job, k.step, k.rank, io.addr);
            }
        });
    }
    n
}

/// One attached listener of one task: the cached output, then what comes, and its input.
async fn listen(k: TaskKey, io: &StepIo, task: Arc<Mutex<Attachable>>) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    let conn = connect(io).await?;
    let (mut rd, mut wr) = tokio::io::split(conn);
    let hello = Hello { key: io.key.clone(), job: k.job, step: k.step, rank: k.rank };
    stepio::write_frame(&mut wr, Kind::Hello, &serde_json::to_vec(&hello).map_err(std::io::Error::other)?).await?;
    let (tx, mut rx) = mpsc::channel::<(Kind, Vec<u8>)>(SINK_FRAMES + CACHE_FRAMES);
    let stdin = {
        // Under the lock: no frame is both replayed and sent, nor lost between the two.
        let mut t = lock(&task);
        for f in &t.cache {
            let _ = tx.try_send(f.clone());
        }
        t.sinks.push(tx);
        t.stdin.clone()
    };
    let reads = match io.stdin {
        StdinTo::All => true,
        StdinTo::Rank(r) => r == k.rank,
        StdinTo::Null => false,
    };
    let input = tokio::spawn(async move {
        loop {
            match stepio::read_frame(&mut rd).await {
                Ok(Some((Kind::Stdin, data))) => {
                    if let (true, Some(s), false) = (reads, &stdin, data.is_empty()) {
                        let _ = s.send(Some(data)).await;
                    }
                }
                Ok(Some(_)) | Ok(None) | Err(_) => return,
            }
        }
    });
    let mut ended = 0;
    while ended < 2 {
        let Some((kind, data)) = rx.recv().await else { break };
        if data.is_empty() {
            ended += 1;
        }
        if stepio::write_frame(&mut wr, kind, &data).await.is_err() {
            break;
        }
    }
    input.abort();
    let _ = wr.shutdown().await;
    Ok(())
}

async fn connect(io: &StepIo) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let tls = stepio::connector(&io.cert).map_err(std::io::Error::other)?;
    let name = rustls_pki_types::ServerName::try_from(stepio::SRUN_NAME).map_err(std::io::Error::other)?;
    let mut last = None;
    for wait in [0, 100, 300, 1000, 2000] {
        tokio::time::sleep(Duration::from_millis(wait)).await;
        match tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(&io.addr)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                // The handshake is tried again too: a listener that dropped this connection
                // (one crowded by strangers' connections drops its oldest) takes the next.
                match tokio::time::timeout(Duration::from_secs(5), tls.connect(name.clone(), s)).await {
                    Ok(Ok(c)) => return Ok(c),
                    Ok(Err(e)) => last = Some(e),
                    Err(_) => last = Some(std::io::Error::new(std::io::ErrorKind::TimedOut, "the TLS handshake timed out")),
                }
            }
            Ok(Err(e)) => last = Some(e),
            Err(_) => last = Some(std::io::Error::new(std::io::ErrorKind::TimedOut, "connecting timed out")),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("cannot connect")))
}

async fn run(hello: Hello, io: &StepIo, ends: Ends, shared: Arc<Mutex<Attachable>>) -> std::io::Result<()> {
    let conn = connect(io).await?;
    let (mut rd, mut wr) = tokio::io::split(conn);
    stepio::write_frame(&mut wr, Kind::Hello, &serde_json::to_vec(&hello).map_err(std::io::Error::other)?).await?;
    let mut winsize_fd: Option<OwnedFd> = None;
    let (tx, mut rx) = mpsc::channel::<(Kind, Vec<u8>)>(16);
    // The terminal is read and written through two descriptors of its own.
    let mut master: Option<Writer> = None;
    let mut stdin: Option<Writer> = ends.stdin.map(writer).transpose()?;
    let mut pmi_in: Option<Writer> = None;
    let mut open = 0;
    let pmi_open = ends.pmi.is_some();
    if let Some(fd) = ends.stdout {
        if ends.pty {
            master = Some(writer(fd.try_clone()?)?);
            winsize_fd = Some(fd.try_clone()?);
        }
        open += 1;
        tokio::spawn(pump(reader(fd)?, Kind::Stdout, tx.clone()));
    }
    if let Some(fd) = ends.stderr {
        open += 1;
        tokio::spawn(pump(reader(fd)?, Kind::Stderr, tx.clone()));
    }
    if let Some(fd) = ends.pmi {
        pmi_in = Some(writer(fd.try_clone()?)?);
        tokio::spawn(pump(reader(fd)?, Kind::Pmi, tx.clone()));
    }
    drop(tx);
    // The task's input: one writer, fed by srun and by attached listeners (`None`: srun's
    // input ended).
    let (in_tx, mut in_rx) = mpsc::channel::<Option<Vec<u8>>>(16);
    if stdin.is_some() || master.is_some() {
        lock(&shared).stdin = Some(in_tx.clone());
    }
    let writer = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Some(m) = in_rx.recv().await {
            match m {
                None => stdin = None,
                Some(data) => {
                    if let Some(fd) = stdin.as_mut().or(master.as_mut()) {
                        // A task that stopped reading loses what it is sent, as under Slurm.
                        if fd.write_all(&data).await.is_err() {
                            stdin = None;
                        }
                    }
                }
            }
        }
    });
    // From srun: a task of its own (a frame half read must not be dropped by a select).
    let from_srun = tokio::spawn(async move {
        loop {
            match stepio::read_frame(&mut rd).await {
                Ok(Some((Kind::Stdin, data))) => {
                    let _ = in_tx.send((!data.is_empty()).then_some(data)).await;
                }
                Ok(Some((Kind::Winsize, data))) if data.len() == 4 => {
                    if let Some(m) = &winsize_fd {
                        let (rows, cols) = (u16::from_be_bytes([data[0], data[1]]), u16::from_be_bytes([data[2], data[3]]));
                        let _ = exec::set_winsize(m.as_fd(), rows, cols);
                    }
                }
                Ok(Some((Kind::Pmi, data))) => {
                    if let Some(p) = pmi_in.as_mut()
                        && !data.is_empty()
                    {
                        let _ = p.write_all(&data).await;
                    }
                }
                // srun went away, or sent what it never sends: the task's input ends.
                Ok(Some(_)) | Ok(None) | Err(_) => return,
            }
        }
    });
    let mut ended = 0;
    let mut pmi_open = pmi_open;
    while ended < open || pmi_open {
        let Some((kind, data)) = rx.recv().await else { break };
        let end = data.is_empty();
        match kind {
            Kind::Pmi if end => pmi_open = false,
            Kind::Pmi => {}
            _ if end => ended += 1,
            _ => {}
        }
        if matches!(kind, Kind::Stdout | Kind::Stderr) && !end {
            let mut a = lock(&shared);
            if a.cache.len() == CACHE_FRAMES {
                a.cache.pop_front();
            }
            a.cache.push_back((kind, data.clone()));
            // A listener that cannot keep up (or has gone) is dropped.
            a.sinks.retain(|s| s.try_send((kind, data.clone())).is_ok());
        }
        stepio::write_frame(&mut wr, kind, &data).await?;
    }
    from_srun.abort();
    writer.abort();
    lock(&shared).stdin = None;
    use tokio::io::AsyncWriteExt;
    let _ = wr.shutdown().await;
    Ok(())
}
