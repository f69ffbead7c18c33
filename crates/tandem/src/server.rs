//! `tandem server`: the controller daemon. A thin shell around `control::Controller`: HTTP/JSON
//! on TCP (agents, with the cluster secret) and on a Unix socket (local users, identified by the
//! kernel's peer credentials), SQLite persistence before every acknowledgement, and a
//! scheduling loop woken by submissions and task exits, plus once a second.
//!
//! Group commit: a handler runs the controller under its lock and queues what changed; one
//! committer thread writes everything queued since its last transaction in one SQLite
//! transaction, and a reply waits until the transaction holding its changes, and every change
//! queued before it (all it could have seen), is durable. Concurrent requests share one fsync.

use anyhow::{Context, Result};
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use control::{Controller, Job, Refused, Settings};
use serde::Deserialize;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Notify;

use crate::api::*;

/// Who is calling.
#[derive(Clone, Debug)]
pub struct Peer {
    uid: Option<u32>,
}

impl Connected<axum::serve::IncomingStream<'_, TcpListener>> for Peer {
    fn connect_info(_: axum::serve::IncomingStream<'_, TcpListener>) -> Self {
        Peer { uid: None }
    }
}

impl Connected<axum::serve::IncomingStream<'_, UnixListener>> for Peer {
    fn connect_info(s: axum::serve::IncomingStream<'_, UnixListener>) -> Self {
        Peer { uid: s.io().peer_cred().ok().map(|c| c.uid()) }
    }
}

struct Inner {
    ctl: Controller,
}

/// Changes queued for the committer. Queued under the controller's lock, so in the order they
/// were made; the committer takes this lock only, never the controller's.
struct Queue {
    /// Changes not yet handed to the committer, in order.
    open: Vec<control::Dirty>,
    /// The number the open batch will be committed as (batches are numbered from 1).
    open_no: u64,
    /// The last batch that holds any change: what a reply must wait for.
    last_dirty: u64,
}

/// The committer's side: its queue and wake-up, and how far it got.
struct Commits {
    queue: Mutex<Queue>,
    /// Signalled when a batch opens.
    cond: std::sync::Condvar,
    /// The highest batch written (durable or failed).
    done: tokio::sync::watch::Sender<u64>,
    /// Batches whose transaction failed (their requests answer 500).
    failed: Mutex<std::collections::HashSet<u64>>,
    /// Transactions and records written, for `/metrics`.
    stats: Mutex<(u64, u64)>,
}

#[derive(Clone)]
struct App {
    inner: Arc<Mutex<Inner>>,
    commits: Arc<Commits>,
    /// A second connection to the database, for reads (`sacct`).
    reader: Arc<Mutex<store::Store>>,
    secret: Arc<String>,
    wake: Arc<Notify>,
    node_wake: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
    metrics: Arc<Mutex<Metrics>>,
    /// The heartbeat interval agents are given, milliseconds: the longest a long poll is held.
    heartbeat_ms: u64,
}

#[derive(Default)]
struct Metrics {
    passes: u64,
    pass_seconds_total: f64,
    last_pass_seconds: f64,
    submissions: u64,
}

/// Server settings from the command line.
pub struct ServerArgs {
    /// TCP address.
    pub listen: SocketAddr,
    /// Data directory (database, socket, secret).
    pub data: PathBuf,
    /// Controller settings.
    pub settings: Settings,
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

fn refused(e: Refused) -> Response {
    let code = match e {
        Refused::Invalid(_) => StatusCode::BAD_REQUEST,
        Refused::NotFound(_) => StatusCode::NOT_FOUND,
        Refused::Forbidden(_) => StatusCode::FORBIDDEN,
        Refused::Conflict(_) => StatusCode::CONFLICT,
    };
    (code, Json(ApiError { error: e.to_string() })).into_response()
}

/// Unwraps a `Result<T, Response>` or returns the error response from the handler.
macro_rules! or_reply {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(r) => return r,
        }
    };
}

/// A JSON body, or a 400 that says what is malformed.
fn json_body<T>(b: Result<Json<T>, axum::extract::rejection::JsonRejection>) -> Result<T, Response> {
    b.map(|Json(x)| x).map_err(|e| err(StatusCode::BAD_REQUEST, format!("malformed request: {}", e.body_text())))
}

fn err(code: StatusCode, msg: impl Into<String>) -> Response {
    (code, Json(ApiError { error: msg.into() })).into_response()
}

/// Signs `uid.expiry` with the cluster secret (HMAC-SHA256).
fn sign(secret: &str, uid: u32, expiry: i64) -> String {
    use hmac::{KeyInit, Mac};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    mac.update(format!("{uid}.{expiry}").as_bytes());
    mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// A token for `uid` valid until `expiry` (Unix seconds): `uid.expiry.signature`.
pub fn token(secret: &str, uid: u32, expiry: i64) -> String {
    format!("{uid}.{expiry}.{}", sign(secret, uid, expiry))
}

/// The uid a token stands for, if it is genuine and unexpired.
pub fn verify(secret: &str, token: &str, now: i64) -> Option<u32> {
    let mut p = token.splitn(3, '.');
    let (uid, expiry, sig) = (p.next()?.parse::<u32>().ok()?, p.next()?.parse::<i64>().ok()?, p.next()?);
    let want = sign(secret, uid, expiry);
    // Constant-time comparison of the hex signatures.
    let same = want.len() == sig.len() && want.bytes().zip(sig.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
    (same && expiry > now).then_some(uid)
}

/// The caller's uid: from the kernel on the Unix socket, else from a token (`tandem token`).
/// A request with neither may not act as a user.
fn user_of(app: &App, peer: &Peer, headers: &HeaderMap) -> Result<u32, Response> {
    if let Some(uid) = peer.uid {
        return Ok(uid);
    }
    let tok = headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    match tok {
        Some(t) => verify(&app.secret, t.trim(), now())
            .ok_or_else(|| err(StatusCode::UNAUTHORIZED, "invalid or expired token (get a new one with `tandem token`)")),
        None => Err(err(
            StatusCode::UNAUTHORIZED,
            "this request needs a user identity: use the controller's Unix socket (TANDEM_SERVER=unix://...) or a token (TANDEM_TOKEN, from `tandem token`)",
        )),
    }
}

#[derive(Deserialize)]
struct TokenQuery {
    lifespan: Option<i64>,
}

/// `POST /v1/token`: a signed token for the caller (Slurm's `scontrol token`; default
/// lifespan 1,800 s, at most a week).
async fn issue_token(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    Query(q): Query<TokenQuery>,
) -> Response {
    let uid = or_reply!(user_of(&app, &peer, &headers));
    let life = q.lifespan.unwrap_or(1800);
    if !(1..=7 * 86400).contains(&life) {
        return err(StatusCode::BAD_REQUEST, "lifespan must be between 1 s and 7 days");
    }
    let expiry = now() + life;
    Json(serde_json::json!({"token": token(&app.secret, uid, expiry), "expires": expiry})).into_response()
}

fn agent_ok(app: &App, h: &HeaderMap) -> Result<(), Response> {
    match h.get("x-tandem-secret").and_then(|v| v.to_str().ok()) {
        Some(s) if s == app.secret.as_str() => Ok(()),
        _ => Err(err(StatusCode::UNAUTHORIZED, "agents must present the cluster secret")),
    }
}

impl App {
    /// Runs `f` on the controller and queues what changed for the committer. Returns `f`'s
    /// result and the batch that must be durable before anything `f` saw or did is acknowledged.
    fn apply<T>(&self, f: impl FnOnce(&mut Controller) -> T) -> (T, u64) {
        let mut g = self.inner.lock().expect("controller lock");
        let out = f(&mut g.ctl);
        let dirty = g.ctl.take_dirty();
        let mut q = self.commits.queue.lock().expect("queue lock");
        if !(dirty.jobs.is_empty() && dirty.nodes.is_empty() && dirty.next_id.is_none()) {
            q.open.push(dirty);
            q.last_dirty = q.open_no;
            self.commits.cond.notify_one();
        }
        (out, q.last_dirty)
    }

    /// Waits until batch `n` is durable.
    async fn durable(&self, n: u64) -> Result<(), Response> {
        if n == 0 {
            return Ok(());
        }
        let mut rx = self.commits.done.subscribe();
        if rx.wait_for(|&c| c >= n).await.is_err() {
            return Err(err(StatusCode::INTERNAL_SERVER_ERROR, "the database committer stopped"));
        }
        if self.commits.failed.lock().expect("lock").contains(&n) {
            return Err(err(StatusCode::INTERNAL_SERVER_ERROR, "the change could not be written to the database"));
        }
        Ok(())
    }

    /// Runs `f` on the controller and returns its result once what changed is durable.
    async fn with<T>(&self, f: impl FnOnce(&mut Controller) -> T) -> Result<T, Response> {
        let (out, n) = self.apply(f);
        self.durable(n).await?;
        Ok(out)
    }

    /// Wakes the long-polling heartbeats of nodes that have orders waiting.
    fn wake_nodes(&self) {
        let names = self.inner.lock().expect("lock").ctl.nodes_with_orders();
        let w = self.node_wake.lock().expect("lock");
        for n in names {
            if let Some(x) = w.get(&n) {
                x.notify_one();
            }
        }
    }
}

fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok().flatten().map_or_else(|| uid.to_string(), |u| u.name)
}

fn primary_gid(uid: u32) -> u32 {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok().flatten().map_or(uid, |u| u.gid.as_raw())
}

/// Converts a job for display.
pub fn job_info(j: &Job) -> JobInfo {
    let allocs = if j.allocs.is_empty() && j.state.is_final() { &j.last_allocs } else { &j.allocs };
    let names: Vec<String> = allocs.iter().map(|(n, _)| n.clone()).collect();
    let nodes = if names.is_empty() { j.req.shape.nodes_min.max(1) } else { names.len() as u32 };
    let cpus = if allocs.is_empty() {
        j.req.shape.ntasks.max(1) * j.req.shape.cpus_per_task.max(1)
    } else {
        allocs.iter().map(|(_, a)| a.cpus).sum()
    };
    let gpus = if allocs.is_empty() { j.req.shape.total_gpus(nodes) } else { allocs.iter().map(|(_, a)| a.gpus.len() as u32).sum() };
    let display_id = match j.array {
        Some(a) => format!("{}_{}", a.array_job, a.task),
        None => j.req.id.0.to_string(),
    };
    let steps = j
        .steps
        .iter()
        .map(|s| StepInfo {
            id: if s.id == control::BATCH_STEP { "batch".into() } else { s.id.to_string() },
            command: s.argv.join(" "),
            ntasks: s.layout.iter().map(|(_, n)| n).sum(),
            nodelist: slurmcli::compress(&s.layout.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>()),
            done: s.end.is_some(),
            exit_code: s.exit,
            start: s.start,
            end: s.end,
        })
        .collect();
    let unlimited = j.req.time_limit >= i64::MAX / 8;
    JobInfo {
        id: j.req.id.0,
        display_id,
        name: j.req.name.clone(),
        user: j.req.user.clone(),
        account: j.req.account.clone(),
        partition: j.req.partition.clone().unwrap_or_else(|| "batch".into()),
        qos: j.req.qos.clone().unwrap_or_else(|| "normal".into()),
        state: j.state.slurm_name().into(),
        reason: if j.state == model::JobState::Pending { j.reason.code().into() } else { "None".into() },
        nodelist: slurmcli::compress(&names),
        nodes,
        ntasks: j.req.shape.ntasks,
        cpus,
        gpus,
        time_limit: (!unlimited).then_some(j.req.time_limit),
        submit: j.req.submit_time,
        start: j.start.or(j.expected_start),
        start_estimated: j.start.is_none() && j.expected_start.is_some(),
        end: j.end,
        exit_code: format!("{}:{}", j.exit_code.unwrap_or(0), j.exit_signal.unwrap_or(0)),
        restarts: j.restart_count,
        workdir: j.spec.workdir.clone(),
        output: j.spec.output.clone(),
        steps,
        message: j.message.clone(),
    }
}

async fn submit(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    body: Result<Json<SubmitRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let uid = or_reply!(user_of(&app, &peer, &headers));
    let req = or_reply!(json_body(body));
    let b = req.batch;
    let user = user_name(uid);
    let workdir =
        b.chdir.clone().map(|d| if d.starts_with('/') { d } else { format!("{}/{d}", req.cwd) }).unwrap_or_else(|| req.cwd.clone());
    let env = match b.export.as_deref() {
        None | Some("ALL") => req.env.clone(),
        Some("NONE") => Vec::new(),
        Some(list) => {
            let mut out: Vec<(String, String)> = Vec::new();
            let all = list.split(',').any(|x| x == "ALL");
            if all {
                out = req.env.clone();
            }
            for item in list.split(',').filter(|x| *x != "ALL" && *x != "NONE") {
                match item.split_once('=') {
                    Some((k, v)) => out.push((k.to_string(), v.to_string())),
                    None => {
                        if let Some(kv) = req.env.iter().find(|(k, _)| k == item) {
                            out.push(kv.clone());
                        }
                    }
                }
            }
            out
        }
    };
    let spec = control::JobSpec {
        script: b.script.clone(),
        script_args: b.script_args.clone(),
        workdir,
        submit_dir: req.cwd.clone(),
        submit_host: req.host.clone(),
        env,
        output: b.output.clone().unwrap_or_else(|| "slurm-%j.out".into()),
        error: b.error.clone(),
        requeue: b.requeue.unwrap_or(true),
        signal: b.signal.map(|s| (s.number, s.before, s.batch_only)),
        uid,
        gid: primary_gid(uid),
    };
    if b.test_only {
        let t = now();
        let checked = app.inner.lock().expect("lock").ctl.check_submit(t, &b, &user);
        return match checked {
            Ok(part) => Json(SubmitResponse {
                job_ids: vec![],
                test_only: Some(format!("Job would be accepted in partition {part} (nothing was submitted)")),
            })
            .into_response(),
            Err(e) => refused(e),
        };
    }
    let t = now();
    let r = app.with(|c| c.submit(t, spec, &b, &user)).await;
    match r {
        Ok(Ok(ids)) => {
            app.metrics.lock().expect("lock").submissions += ids.len() as u64;
            app.wake.notify_one();
            Json(SubmitResponse { job_ids: ids, test_only: None }).into_response()
        }
        Ok(Err(e)) => refused(e),
        Err(r) => r,
    }
}

#[derive(Deserialize)]
struct JobQuery {
    user: Option<String>,
    state: Option<String>,
    partition: Option<String>,
    all: Option<bool>,
}

async fn list_jobs(State(app): State<App>, Query(q): Query<JobQuery>) -> Response {
    let g = app.inner.lock().expect("lock");
    let states: Option<Vec<String>> = q.state.map(|s| s.split(',').map(|x| x.trim().to_ascii_uppercase()).collect());
    let jobs: Vec<JobInfo> = g
        .ctl
        .jobs()
        .filter(|j| q.all.unwrap_or(false) || !j.state.is_final())
        .filter(|j| q.user.as_deref().is_none_or(|u| j.req.user == u))
        .filter(|j| q.partition.as_deref().is_none_or(|p| j.req.partition.as_deref().unwrap_or("batch") == p))
        .filter(|j| {
            states.as_ref().is_none_or(|s| {
                s.iter().any(|x| {
                    x == j.state.slurm_name()
                        || (x == "PD" && j.state == model::JobState::Pending)
                        || (x == "R" && j.state == model::JobState::Running)
                })
            })
        })
        .map(job_info)
        .collect();
    drop(g);
    Json(jobs).into_response()
}

async fn get_job(State(app): State<App>, Path(id): Path<u64>) -> Response {
    let g = app.inner.lock().expect("lock");
    match g.ctl.job(id) {
        Some(j) => Json(job_info(j)).into_response(),
        None => err(StatusCode::NOT_FOUND, format!("invalid job id specified: {id}")),
    }
}

#[derive(Deserialize)]
struct CancelQuery {
    signal: Option<i32>,
}

async fn cancel(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Query(q): Query<CancelQuery>,
) -> Response {
    let uid = or_reply!(user_of(&app, &peer, &headers));
    let t = now();
    match app.with(|c| c.cancel(t, uid, id, q.signal)).await {
        Ok(Ok(())) => {
            app.wake_nodes();
            app.wake.notify_one();
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(Err(e)) => refused(e),
        Err(r) => r,
    }
}

#[derive(Deserialize)]
struct Action {
    action: String,
    time_limit: Option<i64>,
}

async fn job_action(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    Path(id): Path<u64>,
    body: Result<Json<Action>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let uid = or_reply!(user_of(&app, &peer, &headers));
    let a = or_reply!(json_body(body));
    let r = app
        .with(|c| match a.action.as_str() {
            "hold" => c.hold(uid, id, true),
            "release" => c.hold(uid, id, false),
            "requeue" => c.requeue(uid, id),
            "update" => match a.time_limit {
                Some(t) => c.set_time_limit(uid, id, t),
                None => Err(Refused::Invalid("update needs time_limit".into())),
            },
            other => Err(Refused::Invalid(format!("unknown action {other:?} (hold, release, requeue, update)"))),
        })
        .await;
    match r {
        Ok(Ok(())) => {
            app.wake.notify_one();
            app.wake_nodes();
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(Err(e)) => refused(e),
        Err(r) => r,
    }
}

async fn create_step(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    Path(id): Path<u64>,
    body: Result<Json<StepRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let uid = or_reply!(user_of(&app, &peer, &headers));
    let s = or_reply!(json_body(body));
    let t = now();
    match app.with(|c| c.create_step(t, uid, id, s.nodes, s.ntasks, s.ntasks_per_node, s.argv)).await {
        Ok(Ok(step)) => {
            app.wake_nodes();
            Json(StepResponse { step }).into_response()
        }
        Ok(Err(e)) => refused(e),
        Err(r) => r,
    }
}

async fn list_nodes(State(app): State<App>) -> Response {
    let g = app.inner.lock().expect("lock");
    let nodes: Vec<NodeInfo> = g
        .ctl
        .nodes()
        .iter()
        .map(|n| {
            let alloc_gpus = n.usage.gpu_milli.iter().filter(|&&m| m > 0).count() as u32;
            let state = match n.node.state {
                model::NodeState::Down => "down",
                model::NodeState::Drain => "drain",
                model::NodeState::Up if n.usage.jobs == 0 => "idle",
                model::NodeState::Up if n.usage.cpus >= n.node.cpus || n.usage.exclusive => "allocated",
                model::NodeState::Up => "mixed",
            };
            NodeInfo {
                name: n.node.name.clone(),
                state: state.into(),
                cpus: (n.node.cpus, n.usage.cpus),
                memory_mb: (n.node.memory >> 20, n.usage.memory >> 20),
                gpus: (n.node.gpus, alloc_gpus, n.node.gpu_type.clone()),
                reason: n.reason.clone(),
                addr: n.addr.clone(),
            }
        })
        .collect();
    drop(g);
    Json(nodes).into_response()
}

#[derive(Deserialize)]
struct NodeAction {
    state: String,
    reason: Option<String>,
}

async fn node_action(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Result<Json<NodeAction>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let uid = or_reply!(user_of(&app, &peer, &headers));
    let a = or_reply!(json_body(body));
    let drain = match a.state.to_ascii_lowercase().as_str() {
        "drain" => true,
        "resume" | "idle" => false,
        other => return err(StatusCode::BAD_REQUEST, format!("unknown node state {other:?} (drain, resume)")),
    };
    match app.with(|c| c.set_node_state(uid, &name, drain, a.reason)).await {
        Ok(Ok(())) => {
            app.wake.notify_one();
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(Err(e)) => refused(e),
        Err(r) => r,
    }
}

#[derive(Deserialize)]
struct HistoryQuery {
    user: Option<String>,
    since: Option<i64>,
}

async fn history(State(app): State<App>, Query(q): Query<HistoryQuery>) -> Response {
    let past = app.reader.lock().expect("lock").history(q.user.as_deref(), q.since.unwrap_or(0));
    let g = app.inner.lock().expect("lock");
    match past {
        Ok(jobs) => {
            // Running and pending jobs come from memory; finished ones from the accounting table.
            let mut out: Vec<JobInfo> = jobs.iter().map(job_info).collect();
            out.extend(g.ctl.jobs().filter(|j| !j.state.is_final() && q.user.as_deref().is_none_or(|u| j.req.user == u)).map(job_info));
            out.sort_by_key(|j| j.id);
            Json(out).into_response()
        }
        Err(e) => err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn priorities(State(app): State<App>) -> Response {
    let g = app.inner.lock().expect("lock");
    let rows: Vec<(u64, sched::Breakdown)> = g.ctl.priorities(now());
    Json(rows).into_response()
}

async fn register(
    State(app): State<App>,
    headers: HeaderMap,
    body: Result<Json<RegisterRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    if let Err(r) = agent_ok(&app, &headers) {
        return r;
    }
    let r = or_reply!(json_body(body));
    let t = now();
    match app.with(|c| c.register(t, r.node, r.addr).map(|()| (c.settings().lease, c.heartbeat_ms()))).await {
        Ok(Ok((lease_s, heartbeat_ms))) => {
            app.wake.notify_one();
            Json(RegisterResponse { lease_s, heartbeat_ms }).into_response()
        }
        Ok(Err(e)) => refused(e),
        Err(r) => r,
    }
}

async fn heartbeat(
    State(app): State<App>,
    headers: HeaderMap,
    body: Result<Json<Heartbeat>, axum::extract::rejection::JsonRejection>,
) -> Response {
    if let Err(r) = agent_ok(&app, &headers) {
        return r;
    }
    let hb = or_reply!(json_body(body));
    let notify = app.node_wake.lock().expect("lock").entry(hb.node.clone()).or_insert_with(|| Arc::new(Notify::new())).clone();
    let had_exits = !hb.exits.is_empty();
    let t = now();
    let first = match app.with(|c| c.heartbeat(t, &hb.node, hb.ack, &hb.running, &hb.exits)).await {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => return refused(e),
        Err(r) => return r,
    };
    if had_exits {
        app.wake.notify_one();
    }
    if first.iter().any(|(seq, _)| *seq > hb.ack) || hb.wait_ms == 0 {
        return Json(Orders { orders: first }).into_response();
    }
    // Held at most the heartbeat interval (at most half the lease), so the lease outlives it.
    let hold = hb.wait_ms.min(app.heartbeat_ms);
    let _ = tokio::time::timeout(Duration::from_millis(hold), notify.notified()).await;
    let t = now();
    match app.with(|c| c.heartbeat(t, &hb.node, hb.ack, &[], &[])).await {
        Ok(Ok(o)) => Json(Orders { orders: o }).into_response(),
        Ok(Err(e)) => refused(e),
        Err(r) => r,
    }
}

async fn metrics(State(app): State<App>) -> Response {
    let g = app.inner.lock().expect("lock");
    let m = app.metrics.lock().expect("lock");
    let mut by_state: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for j in g.ctl.jobs() {
        *by_state.entry(j.state.slurm_name()).or_default() += 1;
    }
    let mut s = String::new();
    s.push_str("# HELP tandem_jobs Jobs by state.\n# TYPE tandem_jobs gauge\n");
    for (k, v) in &by_state {
        s.push_str(&format!("tandem_jobs{{state=\"{k}\"}} {v}\n"));
    }
    s.push_str(&format!(
        "# HELP tandem_queue_length Pending jobs.\n# TYPE tandem_queue_length gauge\ntandem_queue_length {}\n",
        by_state.get("PENDING").copied().unwrap_or(0)
    ));
    let mut nodes: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for n in g.ctl.nodes() {
        let st = match n.node.state {
            model::NodeState::Up => "up",
            model::NodeState::Drain => "drain",
            model::NodeState::Down => "down",
        };
        *nodes.entry(st).or_default() += 1;
    }
    s.push_str("# HELP tandem_nodes Nodes by state.\n# TYPE tandem_nodes gauge\n");
    for (k, v) in &nodes {
        s.push_str(&format!("tandem_nodes{{state=\"{k}\"}} {v}\n"));
    }
    s.push_str(&format!(
        "# HELP tandem_scheduling_passes_total Scheduling passes.\n# TYPE tandem_scheduling_passes_total counter\ntandem_scheduling_passes_total {}\n",
        m.passes
    ));
    s.push_str(&format!(
        "# HELP tandem_scheduling_pass_seconds Time spent in scheduling passes.\n# TYPE tandem_scheduling_pass_seconds summary\ntandem_scheduling_pass_seconds_sum {}\ntandem_scheduling_pass_seconds_count {}\n",
        m.pass_seconds_total, m.passes
    ));
    s.push_str(&format!("# HELP tandem_scheduling_last_pass_seconds The last pass.\n# TYPE tandem_scheduling_last_pass_seconds gauge\ntandem_scheduling_last_pass_seconds {}\n", m.last_pass_seconds));
    let (txs, recs) = *app.commits.stats.lock().expect("lock");
    s.push_str(&format!(
        "# HELP tandem_db_commits_total Database transactions (group commits).\n# TYPE tandem_db_commits_total counter\ntandem_db_commits_total {txs}\n# HELP tandem_db_records_total Records written.\n# TYPE tandem_db_records_total counter\ntandem_db_records_total {recs}\n"
    ));
    s.push_str(&format!(
        "# HELP tandem_submissions_total Jobs submitted.\n# TYPE tandem_submissions_total counter\ntandem_submissions_total {}\n",
        m.submissions
    ));
    ([("content-type", "text/plain; version=0.0.4")], s).into_response()
}

/// The committer thread: writes each batch of queued changes in one transaction (merged: the
/// last version of each record), then publishes the batch number. Batches are written in order.
fn committer(commits: Arc<Commits>, mut db: store::Store) {
    loop {
        let (batch, no) = {
            let mut g = commits.queue.lock().expect("queue lock");
            while g.open.is_empty() {
                g = commits.cond.wait(g).expect("queue lock");
            }
            let no = g.open_no;
            g.open_no += 1;
            (std::mem::take(&mut g.open), no)
        };
        let merged = merge(batch);
        let records = (merged.jobs.len() + merged.nodes.len()) as u64;
        if let Err(e) = db.persist(&merged) {
            eprintln!("tandem server: cannot write to the database: {e}");
            commits.failed.lock().expect("lock").insert(no);
        }
        {
            let mut st = commits.stats.lock().expect("lock");
            st.0 += 1;
            st.1 += records;
        }
        commits.done.send_replace(no);
    }
}

/// Merges queued changes, oldest first, into one: the newest version of each job and node.
fn merge(batch: Vec<control::Dirty>) -> control::Dirty {
    if batch.len() == 1 {
        return batch.into_iter().next().expect("one");
    }
    let mut out = control::Dirty::default();
    // Position of each record in `out`: a newer version replaces an older one in place, so
    // records are written in the order they first changed (nodes load back in that order).
    let (mut jobs, mut nodes) = (HashMap::new(), HashMap::new());
    for d in batch {
        for j in d.jobs {
            match jobs.get(&j.req.id.0) {
                Some(&k) => out.jobs[k] = j,
                None => {
                    jobs.insert(j.req.id.0, out.jobs.len());
                    out.jobs.push(j);
                }
            }
        }
        for n in d.nodes {
            match nodes.get(&n.node.name) {
                Some(&k) => out.nodes[k] = n,
                None => {
                    nodes.insert(n.node.name.clone(), out.nodes.len());
                    out.nodes.push(n);
                }
            }
        }
        out.next_id = d.next_id.or(out.next_id);
    }
    out
}

async fn openapi() -> Response {
    ([("content-type", "application/json")], crate::openapi::DOCUMENT).into_response()
}

fn router(app: App) -> Router {
    Router::new()
        .route("/v1/jobs", post(submit).get(list_jobs))
        .route("/v1/jobs/{id}", get(get_job).delete(cancel).post(job_action))
        .route("/v1/jobs/{id}/steps", post(create_step))
        .route("/v1/nodes", get(list_nodes))
        .route("/v1/nodes/{name}", post(node_action))
        .route("/v1/history", get(history))
        .route("/v1/priority", get(priorities))
        .route("/v1/token", post(issue_token))
        .route("/v1/agent/register", post(register))
        .route("/v1/agent/heartbeat", post(heartbeat))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .with_state(app)
}

fn load_secret(data: &std::path::Path, db: &mut store::Store, loaded: Option<String>) -> Result<String> {
    if let Some(s) = loaded {
        std::fs::write(data.join("secret"), &s).ok();
        return Ok(s);
    }
    let mut buf = [0u8; 32];
    use std::io::Read;
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf)).context("reading /dev/urandom for the cluster secret")?;
    let s: String = buf.iter().map(|b| format!("{b:02x}")).collect();
    db.set_secret(&s)?;
    let path = data.join("secret");
    std::fs::write(&path, &s).with_context(|| format!("writing {}", path.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    Ok(s)
}

/// Runs the controller until the process is stopped.
pub async fn run(args: ServerArgs) -> Result<()> {
    std::fs::create_dir_all(&args.data).with_context(|| format!("creating {}", args.data.display()))?;
    let mut db = store::Store::open(&args.data.join("state.db")).context("opening the database")?;
    let loaded = db.load().context("loading state")?;
    let secret = load_secret(&args.data, &mut db, loaded.secret.clone())?;
    let boot = db.next_boot().context("recording this start")?;
    let reader = store::Store::open(&args.data.join("state.db")).context("opening the database for reads")?;
    let t = now();
    let ctl = Controller::restore(args.settings, loaded.jobs, loaded.nodes, loaded.next_id, t, boot);
    let heartbeat_ms = ctl.heartbeat_ms();
    let app = App {
        inner: Arc::new(Mutex::new(Inner { ctl })),
        commits: Arc::new(Commits {
            queue: Mutex::new(Queue { open: Vec::new(), open_no: 1, last_dirty: 0 }),
            cond: std::sync::Condvar::new(),
            done: tokio::sync::watch::Sender::new(0),
            failed: Mutex::new(std::collections::HashSet::new()),
            stats: Mutex::new((0, 0)),
        }),
        reader: Arc::new(Mutex::new(reader)),
        secret: Arc::new(secret),
        wake: Arc::new(Notify::new()),
        node_wake: Arc::new(Mutex::new(HashMap::new())),
        metrics: Arc::new(Mutex::new(Metrics::default())),
        heartbeat_ms,
    };
    {
        let commits = app.commits.clone();
        std::thread::Builder::new().name("committer".into()).spawn(move || committer(commits, db)).context("starting the committer")?;
    }
    let tcp = TcpListener::bind(args.listen).await.with_context(|| format!("binding {}", args.listen))?;
    let sock = args.data.join("tandem.sock");
    let _ = std::fs::remove_file(&sock);
    let unix = UnixListener::bind(&sock).with_context(|| format!("binding {}", sock.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666))?;
    let local = tcp.local_addr()?;
    eprintln!("tandem server: listening on http://{local} and unix://{}", sock.display());
    std::fs::write(args.data.join("addr"), local.to_string()).context("writing the address file")?;
    let r1 = router(app.clone());
    let r2 = router(app.clone());
    let t1 = tokio::spawn(async move { axum::serve(tcp, r1.into_make_service_with_connect_info::<Peer>()).await });
    let t2 = tokio::spawn(async move { axum::serve(unix, r2.into_make_service_with_connect_info::<Peer>()).await });
    // The scheduling loop: woken by submissions and exits, and at least once a second.
    let sched_app = app.clone();
    let t3 = tokio::spawn(async move {
        let mut last = Duration::ZERO;
        loop {
            let _ = tokio::time::timeout(Duration::from_millis(1000), sched_app.wake.notified()).await;
            // Let a burst of submissions land before the pass; under load, wait at least as long
            // as the last pass took, so passes hold the controller at most about half the time.
            tokio::time::sleep(last.clamp(Duration::from_millis(5), Duration::from_secs(1))).await;
            let started = std::time::Instant::now();
            let t = now();
            // Nothing is acknowledged here: the heartbeats that carry its orders wait for its commit.
            let _ = sched_app.apply(|c| c.tick(t));
            last = started.elapsed();
            let secs = last.as_secs_f64();
            {
                let mut m = sched_app.metrics.lock().expect("lock");
                m.passes += 1;
                m.pass_seconds_total += secs;
                m.last_pass_seconds = secs;
            }
            sched_app.wake_nodes();
        }
    });
    tokio::select! {
        r = t1 => r??,
        r = t2 => r??,
        r = t3 => r?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_batches_keep_the_newest_record_in_first_change_order() {
        let mut c = Controller::new(Settings::default());
        c.register(0, model::Node::new("b", 2, 1 << 30, 0), "x".into()).unwrap();
        let d1 = c.take_dirty();
        c.register(0, model::Node::new("a", 2, 1 << 30, 0), "x".into()).unwrap();
        c.register(5, model::Node::new("b", 4, 1 << 30, 0), "y".into()).unwrap();
        let d2 = c.take_dirty();
        let m = merge(vec![d1, d2]);
        let names: Vec<(&str, u32, &str)> = m.nodes.iter().map(|n| (n.node.name.as_str(), n.node.cpus, n.addr.as_str())).collect();
        assert_eq!(names, [("b", 4, "y"), ("a", 2, "x")]);
    }
}
