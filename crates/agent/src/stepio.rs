//! An `srun` task's streams: the agent makes the pipes (or, for `--pty`, a pseudo-terminal)
//! and the PMI socket before the task starts, then connects to the `srun` that asked for the
//! step (`client::stepio`: TLS to the step's own CA, the step's key in the first frame) and
//! relays: output and error to `srun`, its input and window size to the task, PMI both ways.
//! The relay lives in the agent: an agent that restarts loses it, and a task that writes
//! afterwards gets EPIPE (its output files are untouched, as they were never used).

use client::stepio::{self, Hello, Kind};
use control::{StdinTo, StepIo, Task};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::time::Duration;
use tokio::sync::mpsc;

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

fn reader(fd: OwnedFd) -> std::io::Result<Reader> {
    Ok(Box::new(tokio::net::unix::pipe::Receiver::from_owned_fd_unchecked(fd)?))
}

fn writer(fd: OwnedFd) -> std::io::Result<Writer> {
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
    tokio::spawn(async move {
        if let Err(e) = run(hello, &io, ends).await {
            eprintln!("agent: step {what}: I/O with srun at {}: {e}", io.addr);
        }
    });
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
                return tls.connect(name, s).await;
            }
            Ok(Err(e)) => last = Some(e),
            Err(_) => last = Some(std::io::Error::new(std::io::ErrorKind::TimedOut, "connecting timed out")),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("cannot connect")))
}

async fn run(hello: Hello, io: &StepIo, ends: Ends) -> std::io::Result<()> {
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
    // From srun: a task of its own (a frame half read must not be dropped by a select).
    let from_srun = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        loop {
            match stepio::read_frame(&mut rd).await {
                Ok(Some((Kind::Stdin, data))) => {
                    if data.is_empty() {
                        stdin = None;
                    } else if let Some(fd) = stdin.as_mut().or(master.as_mut()) {
                        // A task that stopped reading loses what srun sends it, as under Slurm.
                        if fd.write_all(&data).await.is_err() {
                            stdin = None;
                        }
                    }
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
        stepio::write_frame(&mut wr, kind, &data).await?;
    }
    from_srun.abort();
    use tokio::io::AsyncWriteExt;
    let _ = wr.shutdown().await;
    Ok(())
}
