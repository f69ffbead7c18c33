//! `srun`: launches a job step and is its tasks' terminal. It listens for the tasks' agents
//! (TLS with a CA of its own, made for this step; the step's key proves each agent), prints the
//! tasks' output and error on its own (`-l` labels, a line at a time unless `-u`), sends its
//! standard input to every task (or `--input=N`'s, or none), serves PMI for `--mpi=pmi2`, runs
//! task 0 on a terminal for `--pty`, passes signals on as Slurm's does (one Ctrl-C prints the
//! tasks' state, two within a second interrupt them and end the step, a third leaves), and exits
//! with the step's exit code (the highest task's, 128 + n for a task killed by signal n).

use anyhow::{Context, Result, bail};
use client::stepio::{self, Hello, Kind};
use client::{Target, send};
use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use wire::*;

/// What the tasks' connections share (`srun`'s, and `sattach`'s).
pub(crate) struct Shared {
    pub(crate) job: u64,
    pub(crate) step: u32,
    pub(crate) key: String,
    pub(crate) total: u32,
    pub(crate) label: bool,
    pub(crate) unbuffered: bool,
    /// Each connected task's sender (frames to its agent).
    pub(crate) conns: HashMap<u32, mpsc::Sender<(Kind, Vec<u8>)>>,
    /// Tasks whose streams have all ended (their connection closed).
    pub(crate) finished: BTreeSet<u32>,
    /// Told each time a task's streams end, so that `srun` asks at once whether its step is
    /// over rather than at its next poll.
    pub(crate) ended: Arc<tokio::sync::Notify>,
    /// Partial lines, by task and stream.
    pub(crate) partial: HashMap<(u32, bool), Vec<u8>>,
    pub(crate) pmi: Option<Pmi>,
    /// Signals for the whole step (what srun itself would send).
    pub(crate) kill: mpsc::UnboundedSender<i32>,
    /// Only this task's output and error are printed (`sattach --output-filter`,
    /// `--error-filter`).
    pub(crate) filter: [Option<u32>; 2],
}

impl Shared {
    /// Writes a task's output (`err`: its error) as `srun` prints it.
    fn output(&mut self, rank: u32, err: bool, data: &[u8]) {
        if self.filter[usize::from(err)].is_some_and(|r| r != rank) {
            return;
        }
        let width = (self.total.max(1) - 1).to_string().len();
        let label = self.label.then(|| format!("{rank:>width$}: "));
        let mut out: Vec<u8> = Vec::new();
        let buf = self.partial.entry((rank, err)).or_default();
        if data.is_empty() {
            // The stream ended: what is left, as a line.
            if !buf.is_empty() {
                if let Some(l) = &label {
                    out.extend_from_slice(l.as_bytes());
                }
                out.append(buf);
                if self.label {
                    out.push(b'\n');
                }
            }
        } else if self.unbuffered && !self.label {
            out.extend_from_slice(data);
        } else {
            buf.extend_from_slice(data);
            while let Some(i) = buf.iter().position(|&b| b == b'\n') {
                if let Some(l) = &label {
                    out.extend_from_slice(l.as_bytes());
                }
                out.extend(buf.drain(..=i));
            }
            if self.unbuffered && !buf.is_empty() {
                if let Some(l) = &label {
                    out.extend_from_slice(l.as_bytes());
                }
                out.append(buf);
            }
        }
        if out.is_empty() {
            return;
        }
        // A closed stdout (`srun ... | head -1`) ends srun quietly, as a C program's SIGPIPE.
        let ok = if err {
            let mut e = std::io::stderr().lock();
            e.write_all(&out).and_then(|()| e.flush())
        } else {
            let mut o = std::io::stdout().lock();
            o.write_all(&out).and_then(|()| o.flush())
        };
        if ok.is_err() && !err {
            std::process::exit(141);
        }
    }
}

pub(crate) type State = Arc<Mutex<Shared>>;

pub(crate) fn lock(s: &State) -> std::sync::MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// The address the agents reach this machine at: the one it uses toward the controller.
pub(crate) fn advertised(t: &Target) -> std::net::IpAddr {
    let host = match t {
        Target::Tcp(h) | Target::Tls(h, _) => h.clone(),
        _ => return std::net::IpAddr::from([127, 0, 0, 1]),
    };
    use std::net::ToSocketAddrs;
    let found = host.to_socket_addrs().ok().and_then(|mut a| a.next()).and_then(|peer| {
        let u = std::net::UdpSocket::bind(if peer.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).ok()?;
        u.connect(peer).ok()?;
        u.local_addr().ok().map(|a| a.ip())
    });
    found.unwrap_or(std::net::IpAddr::from([127, 0, 0, 1]))
}

/// Serves the tasks' agents that connect to `listener` (TLS with `id`), in the background.
pub(crate) fn accept(rt: &tokio::runtime::Runtime, listener: tokio::net::TcpListener, id: &stepio::Identity, state: &State) {
    let acc = tokio_rustls::TlsAcceptor::from(id.server.clone());
    let st = state.clone();
    rt.spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else { continue };
            let _ = s.set_nodelay(true);
            tokio::spawn(serve(s, acc.clone(), st.clone()));
        }
    });
}

/// One task's connection: its hello, then its frames, until it closes.
async fn serve(s: tokio::net::TcpStream, acc: tokio_rustls::TlsAcceptor, state: State) -> Result<()> {
    let tls = tokio::time::timeout(Duration::from_secs(10), acc.accept(s)).await.context("TLS handshake timed out")??;
    let (mut rd, mut wr) = tokio::io::split(tls);
    let (kind, body) =
        tokio::time::timeout(Duration::from_secs(10), stepio::read_frame(&mut rd)).await?.context("no hello")?.context("closed")?;
    if kind != Kind::Hello || body.len() > 4096 {
        bail!("no hello");
    }
    let h: Hello = serde_json::from_slice(&body)?;
    let (tx, mut rx) = mpsc::channel::<(Kind, Vec<u8>)>(64);
    {
        let mut g = lock(&state);
        if !stepio::same_key(&h.key, &g.key) || h.job != g.job || h.step != g.step || h.rank >= g.total || g.conns.contains_key(&h.rank) {
            bail!("a connection that is not one of this step's tasks");
        }
        g.conns.insert(h.rank, tx);
    }
    let rank = h.rank;
    let writer = tokio::spawn(async move {
        while let Some((k, d)) = rx.recv().await {
            if stepio::write_frame(&mut wr, k, &d).await.is_err() {
                break;
            }
        }
    });
    loop {
        let Ok(Some((kind, data))) = stepio::read_frame(&mut rd).await else { break };
        match kind {
            Kind::Stdout | Kind::Stderr => {
                let st = state.clone();
                tokio::task::spawn_blocking(move || lock(&st).output(rank, kind == Kind::Stderr, &data)).await?;
            }
            Kind::Pmi => {
                let (replies, kill) = {
                    let mut g = lock(&state);
                    let mut kill = false;
                    let got = match g.pmi.as_mut() {
                        Some(p) if data.is_empty() => {
                            // A rank that started PMI and left without finalize, or aborted:
                            // the others would wait for it for ever, so the step ends.
                            match p.closed(rank) {
                                Ok(pmi::Closed::Aborted) => {
                                    let a = p.abort().cloned();
                                    if let Some(a) = a {
                                        eprintln!("srun: error: task {}: aborted: {}", a.rank, a.message.unwrap_or_default());
                                    }
                                    kill = true;
                                }
                                Ok(pmi::Closed::Lost) => {
                                    eprintln!("srun: error: task {rank}: left PMI without finalize: ending the step");
                                    kill = true;
                                }
                                _ => {}
                            }
                            Vec::new()
                        }
                        Some(p) => match p.feed(rank, &data) {
                            Ok(r) => {
                                for n in p.take_notices() {
                                    eprintln!("srun: error: --mpi=pmix: {n}");
                                }
                                r
                            }
                            Err(e) => {
                                eprintln!("srun: error: task {rank}: PMI: {e}");
                                Vec::new()
                            }
                        },
                        None => Vec::new(),
                    };
                    let replies: Vec<_> = got.into_iter().filter_map(|r| Some((g.conns.get(&r.rank)?.clone(), r.bytes))).collect();
                    (replies, kill)
                };
                for (to, bytes) in replies {
                    let _ = to.send((Kind::Pmi, bytes)).await;
                }
                if kill {
                    let _ = lock(&state).kill.send(9);
                }
            }
            _ => break,
        }
    }
    let mut g = lock(&state);
    for err in [false, true] {
        g.output(rank, err, &[]);
    }
    g.finished.insert(rank);
    g.ended.notify_one();
    g.conns.remove(&rank);
    drop(g);
    writer.abort();
    Ok(())
}

/// The step's PMI side: PMI-1/2 served here, or the hub of the tasks' PMIx servers.
pub(crate) enum Pmi {
    V2(pmi::Server),
    X(pmi::pmix::Hub),
}

impl Pmi {
    fn feed(&mut self, rank: u32, bytes: &[u8]) -> Result<Vec<pmi::Reply>, pmi::Error> {
        match self {
            Pmi::V2(s) => s.feed(rank, bytes),
            Pmi::X(h) => h.feed(rank, bytes),
        }
    }

    fn closed(&mut self, rank: u32) -> Result<pmi::Closed, pmi::Error> {
        match self {
            Pmi::V2(s) => s.closed(rank),
            Pmi::X(h) => h.closed(rank),
        }
    }

    fn take_notices(&mut self) -> Vec<String> {
        match self {
            Pmi::V2(_) => Vec::new(),
            Pmi::X(h) => h.take_notices(),
        }
    }

    fn abort(&self) -> Option<&pmi::Abort> {
        match self {
            Pmi::V2(s) => s.abort(),
            Pmi::X(h) => h.abort(),
        }
    }
}

/// Who reads srun's standard input.
fn readers(input: &slurmcli::Input, pty: bool, total: u32) -> Vec<u32> {
    match input {
        _ if pty => vec![0],
        slurmcli::Input::All | slurmcli::Input::File(_) => (0..total).collect(),
        slurmcli::Input::Task(r) => vec![*r],
        slurmcli::Input::Null => Vec::new(),
    }
}

/// Passes srun's input (or `--input`'s file) to its readers once they are all connected (or
/// the step has ended): whatever the tasks have not read by their end is lost, as under Slurm.
pub(crate) fn pass_input(state: State, to: Vec<u32>, file: Option<String>, rt: tokio::runtime::Handle) {
    if to.is_empty() {
        return;
    }
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let g = lock(&state);
            if to.iter().all(|r| g.conns.contains_key(r) || g.finished.contains(r)) || Instant::now() > deadline {
                break;
            }
            drop(g);
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut src: Box<dyn std::io::Read> = match &file {
            Some(f) => match std::fs::File::open(f) {
                Ok(f) => Box::new(f),
                Err(e) => {
                    eprintln!("srun: error: --input={f}: {e}");
                    Box::new(std::io::empty())
                }
            },
            None => Box::new(std::io::stdin()),
        };
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = src.read(&mut buf).unwrap_or(0);
            let conns: Vec<_> = {
                let g = lock(&state);
                to.iter().filter_map(|r| g.conns.get(r).cloned()).collect()
            };
            for c in conns {
                let _ = rt.block_on(c.send((Kind::Stdin, buf[..n].to_vec())));
            }
            if n == 0 {
                return;
            }
        }
    });
}

/// srun's terminal in raw mode while `--pty` runs (restored on drop).
struct Raw(Option<nix::sys::termios::Termios>);

impl Raw {
    fn new() -> Raw {
        use nix::sys::termios::*;
        let stdin = std::io::stdin();
        let Ok(old) = tcgetattr(&stdin) else { return Raw(None) };
        let mut raw = old.clone();
        cfmakeraw(&mut raw);
        let _ = tcsetattr(&stdin, SetArg::TCSANOW, &raw);
        Raw(Some(old))
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        if let Some(old) = &self.0 {
            let _ = nix::sys::termios::tcsetattr(std::io::stdin(), nix::sys::termios::SetArg::TCSANOW, old);
        }
    }
}

fn winsize_frame() -> Option<Vec<u8>> {
    use std::os::fd::AsFd;
    let (rows, cols) = exec::winsize(std::io::stdin().as_fd())?;
    let mut b = rows.to_be_bytes().to_vec();
    b.extend_from_slice(&cols.to_be_bytes());
    Some(b)
}

/// Ranks as Slurm lists them: `0-3,5`.
fn ranks(r: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < r.len() {
        let mut j = i;
        while j + 1 < r.len() && r[j + 1] == r[j] + 1 {
            j += 1;
        }
        out.push(if i == j { r[i].to_string() } else { format!("{}-{}", r[i], r[j]) });
        i = j + 1;
    }
    out.join(",")
}

/// Creates step `req` of job `job`, waiting as Slurm's srun does while the job's other steps
/// hold what it needs (HTTP 423), with Slurm's words on standard error.
async fn create_step(t: &Target, job: u64, req: &StepRequest) -> Result<StepResponse> {
    let path = format!("/v1/jobs/{job}/steps");
    let mut said = false;
    let mut pause = Duration::from_millis(50);
    loop {
        let r = send(t, "POST", &path, Some(req), &[]).await?;
        if r.status == 423 {
            if !said {
                eprintln!("srun: Job {job} step creation temporarily disabled, retrying ({})", r.error());
                said = true;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
            continue;
        }
        let step: StepResponse = r.json()?;
        if said {
            eprintln!("srun: Step created for job {job}");
        }
        return Ok(step);
    }
}

/// Runs step `req` of job `job` with srun's I/O, returning srun's exit code.
pub(crate) fn run_step(t: &Target, job: u64, mut req: StepRequest, a: &slurmcli::SrunSpec) -> Result<i32> {
    // An agent closes its connection when its task's streams end, maybe just as srun sends it
    // the end of input: a write that must fail, not kill srun. A closed stdout still ends srun
    // quietly (`Shared::output` exits 141 on EPIPE).
    exec::ignore_sigpipe();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let id = stepio::identity().map_err(|e| anyhow::anyhow!("srun: {e}"))?;
    let key = stepio::new_key();
    let ip = advertised(t);
    let listener = rt.block_on(tokio::net::TcpListener::bind((ip, 0))).with_context(|| format!("listening on {ip}"))?;
    let addr = listener.local_addr()?;
    req.spec.io = Some(StepIo {
        addr: addr.to_string(),
        cert: id.ca_pem.clone(),
        key: key.clone(),
        stdin: match (&a.input, a.pty) {
            (_, true) => StdinTo::Rank(0),
            (slurmcli::Input::All | slurmcli::Input::File(_), _) => StdinTo::All,
            (slurmcli::Input::Task(r), _) => StdinTo::Rank(*r),
            (slurmcli::Input::Null, _) => StdinTo::Null,
        },
        stdout: a.output.is_none(),
        stderr: a.error.is_none() && a.output.is_none(),
        pty: a.pty,
        winsize: if a.pty {
            use std::os::fd::AsFd;
            exec::winsize(std::io::stdin().as_fd())
        } else {
            None
        },
        pmi: a.pmi,
        pmix: a.pmix,
    });
    let step = rt.block_on(create_step(t, job, &req))?;
    let total: u32 = step.layout.iter().map(|(_, n)| n).sum();
    let pmi = a.pmi.then(|| {
        let per_node: Vec<u32> = step.layout.iter().map(|(_, n)| *n).collect();
        let job = pmi::Job::blocks(format!("{job}.{}", step.step), &per_node);
        if a.pmix {
            // A fresh secret of 128 bits, for the nodes' directory names.
            let token = stepio::new_key()[..32].to_string();
            pmi::pmix::Hub::new(job, step.layout.iter().map(|(n, _)| n.clone()).collect(), token).map(Pmi::X)
        } else {
            pmi::Server::new(job).map(Pmi::V2)
        }
    });
    let pmi = pmi.transpose().map_err(|e| anyhow::anyhow!("srun: PMI: {e}"))?;
    let (fwd_tx, mut fwd_rx) = mpsc::unbounded_channel::<i32>();
    let state: State = Arc::new(Mutex::new(Shared {
        kill: fwd_tx.clone(),
        job,
        step: step.step,
        key,
        total,
        label: a.label,
        unbuffered: a.unbuffered || a.pty,
        conns: HashMap::new(),
        finished: BTreeSet::new(),
        ended: Arc::new(tokio::sync::Notify::new()),
        partial: HashMap::new(),
        pmi,
        filter: [None, None],
    }));
    accept(&rt, listener, &id, &state);
    let _raw = a.pty.then(Raw::new);
    let file = match &a.input {
        slurmcli::Input::File(f) => Some(f.clone()),
        _ => None,
    };
    pass_input(state.clone(), readers(&a.input, a.pty, total), file, rt.handle().clone());
    let name = format!("StepId={job}.{}", step.step);
    let t = t.clone();
    rt.block_on(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let mut int = signal(SignalKind::interrupt())?;
        let mut winch = signal(SignalKind::window_change())?;
        let mut others = Vec::new();
        for (k, n) in [
            (SignalKind::terminate(), 15),
            (SignalKind::hangup(), 1),
            (SignalKind::quit(), 3),
            (SignalKind::user_defined1(), 10),
            (SignalKind::user_defined2(), 12),
        ] {
            others.push((signal(k)?, n));
        }
        for (mut s, n) in others {
            let tx = fwd_tx.clone();
            tokio::spawn(async move {
                while s.recv().await.is_some() {
                    let _ = tx.send(n);
                }
            });
        }
        let (t2, step_id) = (t.clone(), step.step);
        let signal_step = move |sig: i32| {
            let (t, path) = (t2.clone(), format!("/v1/jobs/{job}?signal={sig}&step={step_id}"));
            async move {
                let _ = send(&t, "DELETE", &path, None::<&()>, &[]).await;
            }
        };
        let mut last_int: Option<Instant> = None;
        let mut interrupts = 0;
        let mut sent_size = false;
        let mut done_at: Option<(Instant, i32)> = None;
        let mut unreachable: Option<Instant> = None;
        // `-W SECONDS`: when the first task ended, and whether the rest have been told to end.
        let (mut first_end, mut waited_out): (Option<Instant>, bool) = (None, false);
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        let ended = lock(&state).ended.clone();
        // When every task's streams had ended: the step's end is then asked for every 20 ms
        // (for 2 s at most: a task may close its streams and go on), not every 100.
        let mut all_ended: Option<Instant> = None;
        loop {
            if all_ended.is_none() && lock(&state).finished.len() as u32 >= total {
                all_ended = Some(Instant::now());
            }
            let fast = all_ended.is_some_and(|at| at.elapsed() < Duration::from_secs(2));
            let next_check = async {
                if fast {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                } else {
                    tokio::select! {
                        _ = tick.tick() => {}
                        _ = ended.notified() => {}
                    }
                }
            };
            tokio::select! {
                _ = int.recv() => {
                    let now = Instant::now();
                    let quick = last_int.is_some_and(|l| now.duration_since(l) < Duration::from_secs(1));
                    last_int = Some(now);
                    if interrupts >= 1 && quick || interrupts >= 2 {
                        interrupts += 1;
                    } else {
                        interrupts = 1;
                    }
                    match interrupts {
                        1 => {
                            let (running, exited): (Vec<u32>, Vec<u32>) = {
                                let g = lock(&state);
                                (0..total).partition(|r| !g.finished.contains(r))
                            };
                            eprintln!("srun: interrupt (one more within 1 sec to abort)");
                            if !running.is_empty() {
                                eprintln!("srun: {name} task{} {}: running", if running.len() > 1 { "s" } else { "" }, ranks(&running));
                            }
                            if !exited.is_empty() {
                                eprintln!("srun: {name} task{} {}: exited", if exited.len() > 1 { "s" } else { "" }, ranks(&exited));
                            }
                        }
                        2 => {
                            eprintln!("srun: sending Ctrl-C to {name}");
                            signal_step(2).await;
                            // Then the kill sequence: SIGCONT and SIGTERM, SIGKILL if they stay.
                            let kill = signal_step.clone();
                            let st = state.clone();
                            let name = name.clone();
                            tokio::spawn(async move {
                                tokio::time::sleep(Duration::from_secs(1)).await;
                                if lock(&st).finished.len() as u32 >= total {
                                    return;
                                }
                                eprintln!("srun: forcing job termination");
                                eprintln!("srun: Job step aborted: waiting up to 5 seconds for {name} to finish.");
                                kill(18).await;
                                kill(15).await;
                                tokio::time::sleep(Duration::from_secs(5)).await;
                                kill(9).await;
                            });
                        }
                        _ => {
                            eprintln!("srun: got SIGINT 3 times, exiting; {name} is being killed");
                            return Ok::<i32, anyhow::Error>(130);
                        }
                    }
                }
                Some(sig) = fwd_rx.recv() => signal_step(sig).await,
                _ = winch.recv() => {
                    if let Some(b) = winsize_frame() {
                        let c = lock(&state).conns.get(&0).cloned();
                        if let Some(c) = c {
                            let _ = c.send((Kind::Winsize, b)).await;
                        }
                    }
                }
                _ = next_check => {
                    if a.pty && !sent_size {
                        let c = lock(&state).conns.get(&0).cloned();
                        if let (Some(c), Some(b)) = (c, winsize_frame()) {
                            let _ = c.send((Kind::Winsize, b)).await;
                            sent_size = true;
                        }
                    }
                    if let Some(w) = a.wait.filter(|w| *w > 0 && !waited_out) {
                        let ended = !lock(&state).finished.is_empty();
                        if ended && first_end.is_none() {
                            first_end = Some(Instant::now());
                        }
                        if first_end.is_some_and(|f| f.elapsed() >= Duration::from_secs(w as u64)) && done_at.is_none() {
                            waited_out = true;
                            eprintln!("srun: error: Timed out waiting for job step to complete");
                            let kill = signal_step.clone();
                            tokio::spawn(async move {
                                kill(18).await;
                                kill(15).await;
                                tokio::time::sleep(Duration::from_secs(5)).await;
                                kill(9).await;
                            });
                        }
                    }
                    if let Some((at, code)) = done_at {
                        // The step is over: wait for the tasks' last output (a task whose agent
                        // never connected has none to give after a while).
                        let g = lock(&state);
                        let all_in = g.finished.len() as u32 >= total;
                        let quiet = g.conns.is_empty() && at.elapsed() > Duration::from_secs(2);
                        if all_in || quiet || at.elapsed() > Duration::from_secs(30) {
                            return Ok(code);
                        }
                        continue;
                    }
                    let j: JobInfo = match send(&t, "GET", &format!("/v1/jobs/{job}"), None::<&()>, &[]).await.and_then(|r| r.json()) {
                        Ok(j) => {
                            unreachable = None;
                            j
                        }
                        Err(e) => {
                            // The controller restarting: ask again. Gone for good (its cluster
                            // stopped): once the tasks' I/O has ended too, or after 5 minutes.
                            let since = *unreachable.get_or_insert_with(Instant::now);
                            let quiet = lock(&state).conns.is_empty();
                            if (quiet && since.elapsed() > Duration::from_secs(30)) || since.elapsed() > Duration::from_secs(300) {
                                eprintln!("srun: error: the controller is unreachable ({e:#}); giving up on {name}");
                                return Ok(1);
                            }
                            continue;
                        }
                    };
                    let sid = step.step.to_string();
                    match j.steps.iter().find(|s| s.id == sid) {
                        Some(s) if s.done => {
                            let code = s.exit_code.clamp(0, 255);
                            // A task that could not start: why, as slurmstepd's error says it.
                            if let Some(why) = &s.error {
                                eprintln!("srun: error: {}", slurmcli::visible(why));
                            }
                            if lock(&state).finished.len() as u32 >= total {
                                return Ok(code);
                            }
                            done_at = Some((Instant::now(), code));
                        }
                        Some(_) if j.running() => {}
                        _ => {
                            eprintln!("srun: error: job {job} ended before step {sid} finished");
                            done_at = Some((Instant::now(), 1));
                        }
                    }
                }
            }
        }
    })
}

/// Makes an allocation (`salloc`, `srun` outside one) with `sbatch` options `opts` for
/// `command` (its first word names the job unless `-J` does), and waits until it runs, saying
/// so as `cmd` (`salloc: Granted job allocation 12`). A Ctrl-C while it waits cancels it.
pub(crate) fn allocate(t: &Target, cmd: &str, opts: &[String], command: &[String]) -> Result<(u64, JobInfo)> {
    let mut argv = opts.to_vec();
    argv.push(command.first().cloned().unwrap_or_else(|| cmd.to_string()));
    // salloc reads its SALLOC_* input variables, as Slurm's.
    let env: Vec<(String, String)> = crate::common::caller_env();
    let prefix = if cmd == "salloc" { "SALLOC_" } else { "" };
    let table = if cmd == "salloc" { crate::common::table("salloc") } else { crate::common::table("sbatch") };
    let mut batch = slurmcli::parse_batch(table, &argv, crate::common::now(), prefix, &env, &mut |_| Ok("#!/bin/sh\n".into()))
        .map_err(|e| anyhow::anyhow!("{}", e.0))?;
    batch.interactive = true;
    batch.script_args.clear();
    let rt = crate::common::runtime()?;
    let req = crate::common::submission(batch)?;
    // Slurm's words before the controller's reason.
    let failed = if cmd == "salloc" { "Job submit/allocate failed" } else { "Unable to allocate resources" };
    let key = client::idempotency_key();
    let reply = rt.block_on(send(t, "POST", "/v1/jobs", Some(&req), &[(wire::IDEMPOTENCY_HEADER, &key)]))?;
    crate::common::show_user_msg(cmd, &reply);
    let r: SubmitResponse = reply.json().context(failed)?;
    let job = r.job_ids.first().copied().context("no job id returned")?;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let watcher = rt.spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let mut said = false;
    let asked = Instant::now();
    let mut pause = Duration::from_millis(5);
    let info = loop {
        if stop.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = rt.block_on(send(t, "DELETE", &format!("/v1/jobs/{job}"), None::<&()>, &[]));
            bail!("Job allocation {job} has been revoked.");
        }
        let j: JobInfo = rt.block_on(send(t, "GET", &format!("/v1/jobs/{job}"), None::<&()>, &[]))?.json()?;
        match j.base_state().to_string().as_str() {
            // Granted, then suspended at once (preempted by suspension): its own.
            "RUNNING" | "SUSPENDED" => break j,
            "PENDING" => {
                // A pass or two of the scheduler is no wait worth saying.
                if !said && asked.elapsed() > Duration::from_secs(1) {
                    if cmd == "salloc" {
                        eprintln!("salloc: Pending job allocation {job}");
                    }
                    eprintln!("{cmd}: job {job} queued and waiting for resources");
                    said = true;
                }
            }
            s => bail!("job {job} ended {s} before its allocation was granted{}", j.message.map(|m| format!(": {m}")).unwrap_or_default()),
        }
        // A pass of the scheduler usually grants it within milliseconds: ask soon, then less.
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    };
    watcher.abort();
    if said {
        eprintln!("{cmd}: job {job} has been allocated resources");
    }
    Ok((job, info))
}

/// Ends allocation `job` with `code` (its command's exit code).
pub(crate) fn complete(t: &Target, cmd: &str, job: u64, code: i32) {
    let body = serde_json::json!({"action": "complete", "exit_code": code.clamp(0, 255)});
    let done =
        crate::common::runtime().and_then(|rt| Ok(rt.block_on(send(t, "POST", &format!("/v1/jobs/{job}"), Some(&body), &[]))?.ok()?));
    if let Err(e) = done {
        eprintln!("{cmd}: error: relinquishing job allocation {job}: {e:#}");
    }
}

/// `salloc [options] [command [args]]`: an allocation, then the command (default: the user's
/// shell) here with the allocation's variables; the allocation ends when the command does, with
/// its exit code.
pub(crate) fn salloc(args: &[String]) -> Result<i32> {
    // The options end at the first word that is not one, as sbatch's do before a script.
    let p = crate::common::parse(crate::common::table("salloc"), args)?;
    let mut command = p.args.clone();
    let opts = args[..args.len() - command.len()].to_vec();
    let no_shell = p.opts.iter().any(|g| g.key() == "no-shell");
    if no_shell && !command.is_empty() {
        bail!("--no-shell runs no command: give one or the other");
    }
    if command.is_empty() {
        command.push(std::env::var("SHELL").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "/bin/sh".into()));
    }
    let t = Target::from_env()?;
    if let Some(c) = p.opts.iter().rev().find(|g| g.key() == "clusters") {
        crate::query::check_clusters(&t, c.value())?;
    }
    let (job, j) = allocate(&t, "salloc", &opts, if no_shell { &[] } else { &command })?;
    eprintln!("salloc: Granted job allocation {job}");
    if no_shell {
        // The allocation stays until its time limit or `scancel`; `srun --jobid` uses it.
        return Ok(0);
    }
    let nodes: Vec<String> = slurmcli::expand(&j.nodelist, 100_000).unwrap_or_default();
    let mut c = std::process::Command::new(&command[0]);
    c.args(&command[1..])
        .env("SLURM_JOB_ID", job.to_string())
        .env("SLURM_JOBID", job.to_string())
        .env("SLURM_JOB_NAME", &j.name)
        .env("SLURM_JOB_NODELIST", &j.nodelist)
        .env("SLURM_NODELIST", &j.nodelist)
        .env("SLURM_JOB_NUM_NODES", nodes.len().to_string())
        .env("SLURM_NNODES", nodes.len().to_string())
        .env("SLURM_NTASKS", j.ntasks.to_string())
        .env("SLURM_NPROCS", j.ntasks.to_string())
        .env("SLURM_JOB_PARTITION", &j.partition)
        .env("SLURM_JOB_ACCOUNT", &j.account)
        .env("SLURM_SUBMIT_DIR", std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default())
        .env("SLURM_JOB_CPUS_PER_NODE", if nodes.is_empty() { String::new() } else { (j.cpus / nodes.len() as u32).to_string() });
    // The command has the terminal; salloc ignores the Ctrl-C meant for it, as Slurm's.
    let ignore = crate::common::runtime()?;
    let _int = ignore.block_on(async { tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()) })?;
    let code = match c.status() {
        Ok(s) => {
            use std::os::unix::process::ExitStatusExt;
            s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
        }
        Err(e) => {
            eprintln!("salloc: error: cannot run {}: {e}", command[0]);
            127
        }
    };
    eprintln!("salloc: Relinquishing job allocation {job}");
    complete(&t, "salloc", job, code);
    Ok(code)
}
