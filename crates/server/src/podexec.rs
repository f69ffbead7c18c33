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
use k8s::exec::{ExecOptions, FromClient};
use k8s::{Failure, Target};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

use crate::app::*;

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

/// What a session relays: its step, or (`tty`) the step to start once the client has said its
/// terminal's size.
struct Session {
    app: App,
    uid: u32,
    job: u64,
    step: Result<u32, control::StepSpec>,
    key: String,
    listener: tokio::net::TcpListener,
    tls: std::sync::Arc<rustls::ServerConfig>,
    opts: ExecOptions,
    _seat: Seat,
}

/// `…/pods/NAME/exec`: checks, starts the step, and upgrades to the WebSocket that relays it.
pub(crate) async fn serve(
    app: &App,
    v: &Viewer,
    t: &Target,
    query: Option<&str>,
    headers: &HeaderMap,
    ws: Option<WebSocketUpgrade>,
) -> Result<Response, Failure> {
    let pairs: Vec<(String, String)> = match query {
        Some(q) => serde_urlencoded_pairs(q)?,
        None => Vec::new(),
    };
    let opts = ExecOptions::parse(&pairs)?;
    let pod = crate::kube::pod_of(app, v, t, opts.container.as_deref())?;
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
    let seat = Seat::take(v.uid)?;
    let id = stepio::identity().map_err(|e| Failure::from_code(500, format!("making the session's certificate: {e}")))?;
    let key = stepio::new_key();
    let ip = reachable_ip(app, &pod.node);
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
        container: container.map(|c| slurmcli::Container { join_job: true, ..c }),
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
    let started = step.as_ref().ok().copied();
    let s = Session { app: app.clone(), uid: v.uid, job: pod.job, step, key, listener, tls: id.server, opts, _seat: seat };
    let (app2, uid, job) = (app.clone(), v.uid, pod.job);
    Ok(ws
        .protocols([protocol])
        .on_failed_upgrade(move |_| {
            if let Some(step) = started {
                tokio::spawn(async move { end_step(&app2, uid, job, step).await });
            }
        })
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
    command: &[String],
    mut spec: control::StepSpec,
    early: &mut Vec<(Kind, Vec<u8>)>,
) -> Option<u32> {
    let until = tokio::time::Instant::now() + SIZE_WAIT;
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
                    FromClient::Stdin(d) => early.push((Kind::Stdin, d)),
                    FromClient::CloseStdin => early.push((Kind::Stdin, Vec::new())),
                    FromClient::Nothing => {}
                },
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
                Some(Ok(_)) => {}
            },
            () = tokio::time::sleep_until(until) => break,
        }
    }
    match start_step(app, uid, job, command.to_vec(), spec).await {
        Ok(step) => {
            app.wake_nodes();
            Some(step)
        }
        Err(f) => {
            let status = k8s::exec::lost_status(&f.message);
            let _ = ws.send(Message::Binary(k8s::exec::message(k8s::exec::ERROR, status.to_string().as_bytes()).into())).await;
            let _ = ws.send(Message::Close(Some(CloseFrame { code: 1000, reason: "".into() }))).await;
            None
        }
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

/// Makes the step, waiting (up to 10 s) while the job cannot take one now (suspended).
async fn start_step(app: &App, uid: u32, job: u64, argv: Vec<String>, spec: control::StepSpec) -> Result<u32, Failure> {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let (argv, spec) = (argv.clone(), spec.clone());
        let t = now();
        match app.with(move |c| c.create_step(t, uid, job, Some(1), Some(1), None, argv, spec)).await {
            Ok(Ok(step)) => return Ok(step),
            Ok(Err(control::Refused::Busy(_))) if Instant::now() < until => tokio::time::sleep(Duration::from_millis(200)).await,
            Ok(Err(e)) => return Err(crate::kube::failure_of_refused(&e)),
            Err(r) => return Err(crate::kube::failure_of(r).await),
        }
    }
}

/// Ends the step: its client is gone.
async fn end_step(app: &App, uid: u32, job: u64, step: u32) {
    if let Ok(Ok(())) = app.with(|c| c.signal_step(uid, job, step, 9)).await {
        app.wake_nodes();
    }
}

/// An address of the controller's that the Pod's node reaches: the one its port is bound to,
/// else the one it uses toward the node, else loopback.
fn reachable_ip(app: &App, node: &str) -> std::net::IpAddr {
    let loopback = std::net::IpAddr::from([127, 0, 0, 1]);
    if let Some(b) = app.endpoint.get().map(|e| e.bound).filter(|b| !b.is_unspecified()) {
        return b;
    }
    let addr = app.lock().ctl.nodes().iter().find(|n| n.node.name == node).map(|n| n.addr.clone()).unwrap_or_default();
    use std::net::ToSocketAddrs;
    let found = (addr.as_str(), 9).to_socket_addrs().ok().and_then(|mut a| a.next()).and_then(|peer| {
        let u = std::net::UdpSocket::bind(if peer.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).ok()?;
        u.connect(peer).ok()?;
        u.local_addr().ok().map(|a| a.ip())
    });
    found.unwrap_or(loopback)
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

fn ended(app: &App, job: u64, step: u32) -> Option<Ended> {
    let g = app.lock();
    let Some(j) = g.ctl.job(job) else { return Some(Ended::Lost(format!("job {job} is gone"))) };
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

/// The agent's side: accepts the task's connection (TLS, then its hello with the step's key),
/// then passes frames both ways until it closes.
async fn agent_side(
    listener: tokio::net::TcpListener,
    tls: std::sync::Arc<rustls::ServerConfig>,
    key: String,
    job: u64,
    step: u32,
    mut to_agent: mpsc::Receiver<(Kind, Vec<u8>)>,
    from_agent: mpsc::Sender<(Kind, Vec<u8>)>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let until = tokio::time::Instant::now() + CONNECT_WAIT;
    // Each connection's handshake and hello in a task of its own: one that stalls holds up
    // nothing (at most `MAX_PENDING` at once; more are closed).
    const MAX_PENDING: usize = 64;
    let mut pending = tokio::task::JoinSet::new();
    let conn = loop {
        tokio::select! {
            a = tokio::time::timeout_at(until, listener.accept()) => match a {
                Ok(Ok((s, _))) if pending.len() < MAX_PENDING => {
                    let (acceptor, key) = (acceptor.clone(), key.clone());
                    pending.spawn(async move {
                        let tls = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(s)).await.ok()?.ok()?;
                        let (mut rd, wr) = tokio::io::split(tls);
                        let (kind, data) =
                            tokio::time::timeout(Duration::from_secs(10), stepio::read_frame(&mut rd)).await.ok()?.ok()??;
                        let h: stepio::Hello = serde_json::from_slice(&data).ok()?;
                        (kind == Kind::Hello && stepio::same_key(&h.key, &key) && h.job == job && h.step == step).then_some((rd, wr))
                    });
                }
                Ok(Ok(_)) => {}
                _ => return,
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
    let writer = tokio::spawn(async move {
        while let Some((k, d)) = to_agent.recv().await {
            if stepio::write_frame(&mut wr, k, &d).await.is_err() {
                break;
            }
        }
    });
    while let Ok(Some(f)) = stepio::read_frame(&mut rd).await {
        if from_agent.send(f).await.is_err() {
            break;
        }
    }
    writer.abort();
}

/// Relays between the client's WebSocket and the step's task until the step has ended and its
/// output is in; then the exit code on the error channel, and a normal close.
async fn relay(mut ws: WebSocket, v5: bool, s: Session) {
    let Session { app, uid, job, step, key, listener, tls, opts, _seat } = s;
    let mut early = Vec::new();
    let step = match step {
        Ok(step) => step,
        Err(spec) => match start_with_size(&mut ws, v5, &app, uid, job, &opts.command, spec, &mut early).await {
            Some(step) => step,
            None => return,
        },
    };
    let (to_agent, to_agent_rx) = mpsc::channel(64 + early.len());
    for f in early {
        let _ = to_agent.try_send(f);
    }
    let (from_agent_tx, mut from_agent) = mpsc::channel(64);
    let side = tokio::spawn(agent_side(listener, tls, key, job, step, to_agent_rx, from_agent_tx));
    let mut agent_done = false;
    let mut end: Option<(Instant, Ended)> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            m = ws.recv() => match m {
                Some(Ok(m @ (Message::Binary(_) | Message::Text(_)))) => {
                    let f = match k8s::exec::from_client(payload(&m), v5) {
                        FromClient::Stdin(d) if opts.stdin => Some((Kind::Stdin, d)),
                        FromClient::CloseStdin if opts.stdin => Some((Kind::Stdin, Vec::new())),
                        FromClient::Resize(cols, rows) if opts.tty => {
                            Some((Kind::Winsize, [rows.to_be_bytes(), cols.to_be_bytes()].concat()))
                        }
                        _ => None,
                    };
                    if let Some(f) = f {
                        let _ = to_agent.send(f).await;
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                    side.abort();
                    if end.is_none() {
                        end_step(&app, uid, job, step).await;
                    }
                    return;
                }
                Some(Ok(_)) => {}
            },
            f = from_agent.recv(), if !agent_done => match f {
                Some((kind, d)) if !d.is_empty() => {
                    let channel = match kind {
                        Kind::Stdout if opts.stdout => Some(k8s::exec::STDOUT),
                        Kind::Stderr if opts.stderr => Some(k8s::exec::STDERR),
                        _ => None,
                    };
                    if let Some(c) = channel
                        && ws.send(Message::Binary(k8s::exec::message(c, &d).into())).await.is_err()
                    {
                        side.abort();
                        end_step(&app, uid, job, step).await;
                        return;
                    }
                }
                Some(_) => {}
                None => agent_done = true,
            },
            _ = tick.tick() => {
                if end.is_none() && let Some(e) = ended(&app, job, step) {
                    end = Some((Instant::now(), e));
                }
            }
        }
        if let Some((at, _)) = &end
            && (agent_done || at.elapsed() > DRAIN)
        {
            break;
        }
    }
    side.abort();
    if let Some((_, Ended::Exit(code))) = &end
        && *code != 0
        && let Some(why) = launch_failure(&app, job, step)
    {
        // The task never ran: why, where the client reads errors.
        let channel = if opts.stderr { k8s::exec::STDERR } else { k8s::exec::STDOUT };
        let _ = ws.send(Message::Binary(k8s::exec::message(channel, format!("tandem: {why}\n").as_bytes()).into())).await;
    }
    let status = match end.map(|(_, e)| e) {
        Some(Ended::Exit(code)) => k8s::exec::exit_status(&opts.command, code.clamp(0, 255)),
        Some(Ended::Lost(why)) => k8s::exec::lost_status(&why),
        None => k8s::exec::lost_status("the command's end is not known"),
    };
    let _ = ws.send(Message::Binary(k8s::exec::message(k8s::exec::ERROR, status.to_string().as_bytes()).into())).await;
    let _ = ws.send(Message::Close(Some(CloseFrame { code: 1000, reason: "".into() }))).await;
}
