//! `kubectl exec` and `kubectl cp` (`pods/exec` over WebSocket: `v5.channel.k8s.io`, and the
//! Python client's `v4.channel.k8s.io`; README, "For Kubernetes users"). The controller is the
//! command's `srun`: it makes a step of the Pod's job on the Pod's node (one task, `--overlap`,
//! in the job's own container where it has one: `join_job`), listens for that task's agent as
//! `srun` does (`client::stepio`: TLS to a one-time CA, the step's key in the agent's hello),
//! and relays between the agent's frames and the WebSocket's channels: input and a terminal's
//! size to the task, its output and error output back, and when the step has ended its exit
//! code on the error channel. A client that goes away ends the step (SIGKILL).
//!
//! Only the job's owner and root may exec (as only they may read its output): Kubernetes'
//! `create` on `pods/exec`. A user has at most [`MAX_PER_USER`] sessions at once.

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::HeaderMap;
use axum::response::Response;
use client::stepio::{self, Kind};
use k8s::Failure;
use k8s::exec::{ExecOptions, FromClient};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

use crate::app::*;
use crate::kshared::{PodRef, failure_of, failure_of_refused};

/// The most exec sessions one user may have open at once.
pub(crate) const MAX_PER_USER: usize = 16;

/// How long the step's agent has to connect (its task may wait for a container to be made).
const CONNECT_WAIT: Duration = Duration::from_secs(120);

/// After the step has ended, how long its output may still come.
const DRAIN: Duration = Duration::from_secs(2);

/// Open sessions per user.
static OPEN: Mutex<Option<HashMap<u32, usize>>> = Mutex::new(None);

/// One of a user's open sessions; closed when dropped.
struct Seat(u32);

impl Seat {
    fn take(uid: u32) -> Result<Seat, Failure> {
        let mut g = OPEN.lock().unwrap_or_else(|p| p.into_inner());
        let n = g.get_or_insert_with(HashMap::new).entry(uid).or_insert(0);
        if *n >= MAX_PER_USER {
            return Err(Failure::from_code(429, format!("at most {MAX_PER_USER} exec sessions per user at once")));
        }
        *n += 1;
        Ok(Seat(uid))
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut g = OPEN.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = g.as_mut()
            && let Some(n) = m.get_mut(&self.0)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.0);
            }
        }
    }
}

/// A step made for a session: ended (SIGKILL) when this is dropped unless it was seen to end,
/// whatever way the session goes (the client gone before or after the upgrade, a failed
/// upgrade, a panic).
struct Running {
    app: App,
    uid: u32,
    job: u64,
    /// The job's run the step belongs to: a step of a later run is not this one.
    epoch: u32,
    step: u32,
    ended: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.ended {
            let (app, uid, job, epoch, step) = (self.app.clone(), self.uid, self.job, self.epoch, self.step);
            tokio::spawn(async move { end_step(&app, uid, job, epoch, step).await });
        }
    }
}

/// What a session relays: its step, or (`tty`) the step to start once the client has said its
/// terminal's size.
struct Session {
    app: App,
    uid: u32,
    job: u64,
    step: Result<Running, control::StepSpec>,
    key: String,
    listener: tokio::net::TcpListener,
    tls: std::sync::Arc<rustls::ServerConfig>,
    opts: ExecOptions,
    _seat: Seat,
}

/// The largest WebSocket message or frame a client may send (kubectl's input comes in pieces of
/// 32 KiB at most).
const MAX_MESSAGE: usize = 1 << 20;

/// Frames queued toward the agent (each at most [`MAX_MESSAGE`]): what a session holds while
/// its command does not read its input is bounded by this.
const QUEUED: usize = 8;

/// Input kept while a terminal session waits for the client's size.
const EARLY_MAX: usize = 1 << 20;

/// How often the client is pinged, and how long it may stay silent before it is taken as gone
/// (kubectl pings every 5 s itself; the Python client answers pings).
const PING_EVERY: Duration = Duration::from_secs(20);
const SILENT_MAX: Duration = Duration::from_secs(65);

/// How long one message to the client may take to be sent before the client is taken as gone.
const SEND_MAX: Duration = Duration::from_secs(60);

/// The request's options, from its query.
pub(crate) fn options(query: Option<&str>) -> Result<ExecOptions, Failure> {
    let pairs: Vec<(String, String)> = match query {
        Some(q) => serde_urlencoded_pairs(q)?,
        None => Vec::new(),
    };
    ExecOptions::parse(&pairs)
}

/// `…/pods/NAME/exec` of `pod` (found by the caller, as `v` may see it, its container checked).
pub(crate) async fn serve(
    app: &App,
    v: &Viewer,
    pod: PodRef,
    opts: ExecOptions,
    headers: &HeaderMap,
    ws: Option<WebSocketUpgrade>,
) -> Result<Response, Failure> {
    let (owner, container, final_state) = {
        let g = app.lock();
        let j = g.ctl.job(pod.job).ok_or_else(|| Failure::not_found("pods", "", &pod.name))?;
        (j.spec.uid, j.spec.container.clone(), j.state.is_final())
    };
    if v.uid != owner && v.uid != 0 {
        return Err(Failure::forbidden(format!(
            "pods \"{}\" is forbidden: only its owner (and root) may exec into it (job {} is another user's)",
            pod.name, pod.job
        )));
    }
    if final_state {
        return Err(Failure::bad_request(format!("cannot exec into a container in a completed pod ({})", pod.name)));
    }
    // Before the upgrade's checks: kubectl answered anything but an upgrade tries SPDY next
    // and prints that answer, so this one must be the same there.
    let seat = Seat::take(v.uid)?;
    let offered = headers.get("sec-websocket-protocol").and_then(|h| h.to_str().ok()).unwrap_or("");
    let upgrade = headers.get("upgrade").and_then(|h| h.to_str().ok()).unwrap_or("");
    let Some(ws) = ws else {
        let why = if upgrade.to_ascii_lowercase().starts_with("spdy") {
            "pods/exec is served over WebSocket (v5.channel.k8s.io, or v4 for the Python client), not SPDY: use kubectl 1.30 or later, \
             without KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false"
        } else {
            "pods/exec needs a WebSocket upgrade (GET with Upgrade: websocket and the subprotocol v5.channel.k8s.io or v4.channel.k8s.io)"
        };
        return Err(Failure::bad_request(why));
    };
    let Some(protocol) = k8s::exec::protocol(offered) else {
        return Err(Failure::bad_request(format!(
            "pods/exec speaks the subprotocols {}; the client offered {offered:?}",
            k8s::exec::PROTOCOLS.join(", ")
        )));
    };
    let id = stepio::identity().map_err(|e| Failure::from_code(500, format!("making the session's certificate: {e}")))?;
    let key = stepio::new_key();
    let ip = reachable_ip(app, &pod.node).await;
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.map_err(|e| Failure::from_code(500, format!("listening on {ip}: {e}")))?;
    let addr = listener.local_addr().map_err(|e| Failure::from_code(500, e.to_string()))?;
    let spec = control::StepSpec {
        io: Some(control::StepIo {
            addr: addr.to_string(),
            cert: id.ca_pem.clone(),
            key: key.clone(),
            stdin: if opts.stdin { control::StdinTo::Rank(0) } else { control::StdinTo::Null },
            stdout: true,
            stderr: !opts.tty,
            pty: opts.tty,
            winsize: None,
            pmi: false,
            pmix: false,
        }),
        nodelist: vec![pod.node.clone()],
        name: Some("kubectl-exec".into()),
        res: control::StepRes { overlap: true, ..Default::default() },
        container: container.map(|c| slurmcli::Container { join_job: true, volumes: Vec::new(), ..c }),
        ..Default::default()
    };
    // Started now, its refusals are HTTP answers; with a terminal, once the client has sent
    // its size (kubectl sends it first), so that the command starts with it.
    let step = if opts.tty {
        Err(spec)
    } else {
        let step = start_step(app, v.uid, pod.job, opts.command.clone(), spec).await?;
        app.wake_nodes();
        Ok(step)
    };
    let s = Session { app: app.clone(), uid: v.uid, job: pod.job, step, key, listener, tls: id.server, opts, _seat: seat };
    // A failed upgrade drops the session, and with it the step (`Running`).
    Ok(ws
        .protocols([protocol])
        .max_message_size(MAX_MESSAGE)
        .max_frame_size(MAX_MESSAGE)
        .on_upgrade(move |socket| relay(socket, protocol == k8s::exec::PROTOCOLS[0], s)))
}

/// How long a terminal session waits for the client's size before it starts without one.
const SIZE_WAIT: Duration = Duration::from_secs(1);

/// A terminal session's start: waits for the client's first size (input sent meanwhile is
/// kept for the task), then makes the step. `None`: the client went away, or the step could
/// not be made (the client was told why).
#[allow(clippy::too_many_arguments)]
async fn start_with_size(
    ws: &mut WebSocket,
    v5: bool,
    app: &App,
    uid: u32,
    job: u64,
    opts: &ExecOptions,
    mut spec: control::StepSpec,
    early: &mut Vec<(Kind, Vec<u8>)>,
) -> Option<Running> {
    let until = tokio::time::Instant::now() + SIZE_WAIT;
    let mut kept = 0;
    loop {
        tokio::select! {
            m = ws.recv() => match m {
                Some(Ok(m @ (Message::Binary(_) | Message::Text(_)))) => match k8s::exec::from_client(payload(&m), v5) {
                    FromClient::Resize(cols, rows) => {
                        if let Some(io) = spec.io.as_mut() {
                            io.winsize = Some((rows, cols));
                        }
                        break;
                    }
                    FromClient::Stdin(d) if opts.stdin => {
                        kept += d.len();
                        early.push((Kind::Stdin, d));
                        if kept >= EARLY_MAX {
                            // The client writes rather than says its size: start without it.
                            break;
                        }
                    }
                    FromClient::CloseStdin if opts.stdin => early.push((Kind::Stdin, Vec::new())),
                    _ => {}
                },
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
                Some(Ok(_)) => {}
            },
            () = tokio::time::sleep_until(until) => break,
        }
    }
    match start_step(app, uid, job, opts.command.clone(), spec).await {
        Ok(step) => {
            app.wake_nodes();
            Some(step)
        }
        Err(f) => {
            let status = k8s::exec::lost_status(&f.message);
            finish(ws, status).await;
            None
        }
    }
}

/// The last word on the error channel, then a normal close (each send bounded: a client that
/// reads nothing more does not hold the session).
async fn finish(ws: &mut WebSocket, status: serde_json::Value) {
    let last = Message::Binary(k8s::exec::message(k8s::exec::ERROR, status.to_string().as_bytes()).into());
    if tokio::time::timeout(Duration::from_secs(10), ws.send(last)).await.is_ok_and(|r| r.is_ok()) {
        let close = Message::Close(Some(CloseFrame { code: 1000, reason: "".into() }));
        let _ = tokio::time::timeout(Duration::from_secs(10), ws.send(close)).await;
    }
}

/// The query's pairs, in order (`command` repeats).
fn serde_urlencoded_pairs(q: &str) -> Result<Vec<(String, String)>, Failure> {
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(
        &format!("/?{q}").parse().map_err(|_| Failure::bad_request("malformed query"))?,
    )
    .map(|axum::extract::Query(p)| p)
    .map_err(|e| Failure::bad_request(format!("malformed query: {}", e.body_text())))
}

/// Makes the step, waiting (up to 10 s) while the job cannot take one now (suspended). The
/// step is ended when what is returned is dropped; made but not yet durable when this is
/// dropped, it is ended too.
async fn start_step(app: &App, uid: u32, job: u64, argv: Vec<String>, spec: control::StepSpec) -> Result<Running, Failure> {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let (argv, spec) = (argv.clone(), spec.clone());
        let t = now();
        let made = app.apply(move |c| {
            let step = c.create_step(t, uid, job, Some(1), Some(1), None, argv, spec)?;
            Ok::<_, control::Refused>((step, c.job(job).map_or(0, |j| j.epoch)))
        });
        let ((made, seq), app2) = (made, app.clone());
        let running = made.as_ref().ok().map(|&(step, epoch)| Running { app: app2, uid, job, epoch, step, ended: false });
        if let Err(r) = app.settled(seq).await {
            return Err(failure_of(r).await);
        }
        match made {
            Ok(_) => return Ok(running.expect("made")),
            Err(control::Refused::Busy(_)) if Instant::now() < until => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(e) => return Err(failure_of_refused(&e)),
        }
    }
}

/// Ends the step of run `epoch` (its client is gone), if that run still runs.
async fn end_step(app: &App, uid: u32, job: u64, epoch: u32, step: u32) {
    let signalled = app.with(|c| {
        if c.job(job).is_some_and(|j| j.epoch == epoch && j.steps.iter().any(|s| s.id == step && s.end.is_none())) {
            c.signal_step(uid, job, step, 9)
        } else {
            Ok(())
        }
    });
    if let Ok(Ok(())) = signalled.await {
        app.wake_nodes();
    }
}

/// An address of the controller's that the Pod's node reaches: the one its port is bound to,
/// else the one it uses toward the node, else loopback.
async fn reachable_ip(app: &App, node: &str) -> std::net::IpAddr {
    let loopback = std::net::IpAddr::from([127, 0, 0, 1]);
    if let Some(b) = app.endpoint.get().map(|e| e.bound).filter(|b| !b.is_unspecified()) {
        return b;
    }
    let addr = app.lock().ctl.nodes().iter().find(|n| n.node.name == node).map(|n| n.addr.clone()).unwrap_or_default();
    // Resolved without holding a worker thread (a node's address is usually an IP already).
    let Ok(Ok(mut found)) = tokio::time::timeout(Duration::from_secs(2), tokio::net::lookup_host((addr.as_str(), 9))).await else {
        return loopback;
    };
    let local = found.next().and_then(|peer| {
        let u = std::net::UdpSocket::bind(if peer.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).ok()?;
        u.connect(peer).ok()?;
        u.local_addr().ok().map(|a| a.ip())
    });
    local.unwrap_or(loopback)
}

/// A data message's bytes: the Python client sends text input as text frames (the channel a
/// character of its own), binary as binary.
fn payload(m: &Message) -> &[u8] {
    match m {
        Message::Binary(b) => b,
        Message::Text(t) => t.as_str().as_bytes(),
        _ => &[],
    }
}

/// How the step ended, as the controller knows it.
enum Ended {
    Exit(i32),
    Lost(String),
}

fn ended(app: &App, job: u64, epoch: u32, step: u32) -> Option<Ended> {
    let g = app.lock();
    let Some(j) = g.ctl.job(job) else { return Some(Ended::Lost(format!("job {job} is gone"))) };
    if j.epoch != epoch {
        return Some(Ended::Lost(format!("job {job} was requeued before the command ended")));
    }
    match j.steps.iter().find(|s| s.id == step) {
        Some(s) if s.end.is_some() => Some(Ended::Exit(s.exit)),
        Some(_) if !j.state.is_final() => None,
        _ => Some(Ended::Lost(format!("job {job} ended before the command did"))),
    }
}

/// Why the step's task could not start, if that is how it ended.
fn launch_failure(app: &App, job: u64, step: u32) -> Option<String> {
    let g = app.lock();
    g.ctl.job(job)?.steps.iter().find(|s| s.id == step)?.error.clone()
}

/// A task that is aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The longest hello an agent sends (JSON: a key, a job, a step, a rank).
const MAX_HELLO: usize = 4096;

/// One connection's TLS handshake and hello, within `HELLO_WAIT`: its halves if it is the
/// step's agent. The hello's length is checked before anything is allocated for it.
async fn greet(
    acceptor: tokio_rustls::TlsAcceptor,
    s: tokio::net::TcpStream,
    key: String,
    job: u64,
    step: u32,
) -> Option<(tokio::io::ReadHalf<AgentStream>, tokio::io::WriteHalf<AgentStream>)> {
    use tokio::io::AsyncReadExt;
    let work = async {
        let tls = acceptor.accept(s).await.ok()?;
        let (mut rd, wr) = tokio::io::split(tls);
        let mut head = [0u8; 5];
        rd.read_exact(&mut head).await.ok()?;
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if head[0] != 0 || len > MAX_HELLO {
            return None;
        }
        let mut body = vec![0u8; len];
        rd.read_exact(&mut body).await.ok()?;
        let h: stepio::Hello = serde_json::from_slice(&body).ok()?;
        (stepio::same_key(&h.key, &key) && h.job == job && h.step == step).then_some((rd, wr))
    };
    tokio::time::timeout(HELLO_WAIT, work).await.ok().flatten()
}

/// How long a connection has for its TLS handshake and hello together.
const HELLO_WAIT: Duration = Duration::from_secs(5);

type AgentStream = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;

/// The agent's side: accepts the task's connection (TLS, then its hello with the step's key),
/// then passes frames both ways until it closes. Each connection's handshake runs in a task of
/// its own, so one that stalls holds up nothing; past `MAX_PENDING` at once the oldest is
/// dropped for the newest (a stranger's connections cannot keep the agent's out).
async fn agent_side(
    listener: tokio::net::TcpListener,
    tls: std::sync::Arc<rustls::ServerConfig>,
    key: String,
    job: u64,
    step: u32,
    mut to_agent: mpsc::Receiver<(Kind, Vec<u8>)>,
    from_agent: mpsc::Sender<(Kind, Vec<u8>)>,
) {
    const MAX_PENDING: usize = 32;
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let until = tokio::time::Instant::now() + CONNECT_WAIT;
    let mut pending = tokio::task::JoinSet::new();
    let mut order: std::collections::VecDeque<tokio::task::AbortHandle> = std::collections::VecDeque::new();
    let conn = loop {
        tokio::select! {
            a = tokio::time::timeout_at(until, listener.accept()) => match a {
                Ok(Ok((s, _))) => {
                    if pending.len() >= MAX_PENDING {
                        while let Some(oldest) = order.pop_front() {
                            if !oldest.is_finished() {
                                oldest.abort();
                                break;
                            }
                        }
                    }
                    order.push_back(pending.spawn(greet(acceptor.clone(), s, key.clone(), job, step)));
                    if order.len() > 4 * MAX_PENDING {
                        order.retain(|h| !h.is_finished());
                    }
                }
                // A passing failure (descriptors, memory): try again shortly.
                Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(_) => return,
            },
            Some(r) = pending.join_next(), if !pending.is_empty() => {
                if let Ok(Some(c)) = r {
                    break c;
                }
            }
        }
    };
    pending.abort_all();
    drop(listener);
    let (mut rd, mut wr) = conn;
    let _writer = AbortOnDrop(tokio::spawn(async move {
        while let Some((k, d)) = to_agent.recv().await {
            if stepio::write_frame(&mut wr, k, &d).await.is_err() {
                break;
            }
        }
    }));
    while let Ok(Some(f)) = stepio::read_frame(&mut rd).await {
        if from_agent.send(f).await.is_err() {
            break;
        }
    }
}

/// Sends one message to the client within [`SEND_MAX`]; `false`: the client is gone.
async fn send(ws: &mut WebSocket, m: Message) -> bool {
    tokio::time::timeout(SEND_MAX, ws.send(m)).await.is_ok_and(|r| r.is_ok())
}

/// Relays between the client's WebSocket and the step's task until the step has ended and its
/// output is in; then the exit code on the error channel, and a normal close. Input waits in
/// one slot while the agent's queue is full (the client is not read meanwhile, and the task's
/// output still flows), so a command that stops reading its input holds a bounded amount.
async fn relay(mut ws: WebSocket, v5: bool, s: Session) {
    let Session { app, uid, job, step, key, listener, tls, opts, _seat } = s;
    let mut early = Vec::new();
    let mut running = match step {
        Ok(r) => r,
        Err(spec) => match start_with_size(&mut ws, v5, &app, uid, job, &opts, spec, &mut early).await {
            Some(r) => r,
            None => return,
        },
    };
    let (epoch, step) = (running.epoch, running.step);
    let (to_agent, to_agent_rx) = mpsc::channel(QUEUED);
    let mut early = std::collections::VecDeque::from(early);
    let (from_agent_tx, mut from_agent) = mpsc::channel(QUEUED);
    let _side = AbortOnDrop(tokio::spawn(agent_side(listener, tls, key, job, step, to_agent_rx, from_agent_tx)));
    let mut slot: Option<(Kind, Vec<u8>)> = early.pop_front();
    let mut agent_done = false;
    let mut end: Option<(Instant, Ended)> = None;
    // How often the step's end is looked for (as srun polls: a lookup under the lock).
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
    let mut heard = Instant::now();
    loop {
        tokio::select! {
            m = ws.recv(), if slot.is_none() => {
                heard = Instant::now();
                match m {
                    Some(Ok(m @ (Message::Binary(_) | Message::Text(_)))) => {
                        slot = match k8s::exec::from_client(payload(&m), v5) {
                            FromClient::Stdin(d) if opts.stdin => Some((Kind::Stdin, d)),
                            FromClient::CloseStdin if opts.stdin => Some((Kind::Stdin, Vec::new())),
                            FromClient::Resize(cols, rows) if opts.tty => {
                                Some((Kind::Winsize, [rows.to_be_bytes(), cols.to_be_bytes()].concat()))
                            }
                            _ => None,
                        };
                    }
                    // Gone: `running`, dropped, ends the step.
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                    Some(Ok(_)) => {}
                }
            },
            permit = to_agent.reserve(), if slot.is_some() => {
                let f = slot.take().expect("a frame waits");
                if let Ok(p) = permit {
                    p.send(f);
                }
                slot = early.pop_front();
                heard = Instant::now();
            },
            f = from_agent.recv(), if !agent_done => match f {
                Some((kind, d)) if !d.is_empty() => {
                    let channel = match kind {
                        Kind::Stdout if opts.stdout => Some(k8s::exec::STDOUT),
                        Kind::Stderr if opts.stderr => Some(k8s::exec::STDERR),
                        _ => None,
                    };
                    if let Some(c) = channel
                        && !send(&mut ws, Message::Binary(k8s::exec::message(c, &d).into())).await
                    {
                        return;
                    }
                }
                Some(_) => {}
                None => agent_done = true,
            },
            _ = tick.tick() => {
                if end.is_none() && let Some(e) = ended(&app, job, epoch, step) {
                    end = Some((Instant::now(), e));
                }
            }
            _ = ping.tick() => {
                // Silent while read (not while its input waits for the task): gone.
                if (slot.is_none() && heard.elapsed() > SILENT_MAX) || !send(&mut ws, Message::Ping(Vec::new().into())).await {
                    return;
                }
            }
        }
        if let Some((at, _)) = &end
            && (agent_done || at.elapsed() > DRAIN)
        {
            break;
        }
    }
    running.ended = true;
    if let Some((_, Ended::Exit(code))) = &end
        && *code != 0
        && let Some(why) = launch_failure(&app, job, step)
    {
        // The task never ran: why, where the client reads errors.
        let channel = if opts.stderr { k8s::exec::STDERR } else { k8s::exec::STDOUT };
        let _ = send(&mut ws, Message::Binary(k8s::exec::message(channel, format!("tandem: {why}\n").as_bytes()).into())).await;
    }
    let status = match end.map(|(_, e)| e) {
        Some(Ended::Exit(code)) => k8s::exec::exit_status(&opts.command, code.clamp(0, 255)),
        Some(Ended::Lost(why)) => k8s::exec::lost_status(&why),
        None => k8s::exec::lost_status("the command's end is not known"),
    };
    finish(&mut ws, status).await;
}
