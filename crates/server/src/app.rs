//! What every handler shares: the application state ([`App`]: the controller under its lock,
//! the journal, the signing keys, wake-ups), who is calling ([`Peer`], tokens), and the reply
//! helpers (errors as JSON, malformed bodies as 400s). The layer below the job and service
//! handlers; it knows no route.

use axum::Json;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use control::{Controller, Refused};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use wire::ApiError;

/// Who is calling: on the Unix socket the peer's uid (`SO_PEERCRED`, set by `listen`);
/// over TCP no one (a user is only who a token says).
#[derive(Clone, Debug)]
pub struct Peer {
    pub(crate) uid: Option<u32>,
}

pub(crate) struct Inner {
    pub(crate) ctl: Controller,
    /// The journal sequence number of each job's newest change (bounded: forgotten all at once
    /// past [`MAX_JOB_SEQS`]). A read of one job waits only for that change to be durable, not
    /// for whatever else is being committed; a job not in it waits for the newest change.
    pub(crate) job_seq: HashMap<u64, u64>,
    /// The state each job not yet ended was last logged in ([`job_lines`]).
    pub(crate) logged: HashMap<u64, model::JobState>,
}

/// A job's change that the controller's log tells (target `server::jobs`, level info).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum JobLine {
    /// It started (again, after a requeue) on these nodes.
    Started { id: u64, user: String, nodes: String },
    /// It left its nodes for the queue.
    Requeued { id: u64 },
    /// It ended.
    Ended { id: u64, state: &'static str, exit_code: Option<i32> },
}

impl JobLine {
    /// Writes the line.
    pub(crate) fn log(&self) {
        match self {
            JobLine::Started { id, user, nodes } => {
                tracing::info!(target: "server::jobs", job_id = id, user = %user, nodes = %nodes, "job started")
            }
            JobLine::Requeued { id } => tracing::info!(target: "server::jobs", job_id = id, "job requeued"),
            JobLine::Ended { id, state, exit_code } => {
                tracing::info!(target: "server::jobs", job_id = id, state = %state, exit_code = exit_code, "job ended")
            }
        }
    }
}

/// The lines the changed jobs make: each job's start, requeue and end once, against the state
/// it was last logged in (`logged`, which forgets a job once it has ended).
pub(crate) fn job_lines(logged: &mut HashMap<u64, model::JobState>, jobs: &[control::Job]) -> Vec<JobLine> {
    use model::JobState;
    let mut lines = Vec::new();
    for j in jobs {
        let id = j.req.id.0;
        let before = logged.get(&id).copied();
        if before == Some(j.state) {
            continue;
        }
        if j.state.is_final() {
            logged.remove(&id);
            lines.push(JobLine::Ended { id, state: j.state.slurm_name(), exit_code: j.exit_code });
            continue;
        }
        match (before, j.state) {
            (Some(JobState::Running | JobState::Suspended), JobState::Running | JobState::Suspended) => {}
            (_, JobState::Running) => {
                let names: Vec<String> = j.allocs.iter().map(|(n, _)| n.clone()).collect();
                lines.push(JobLine::Started { id, user: j.req.user.clone(), nodes: slurmcli::compress(&names) })
            }
            (Some(JobState::Running | JobState::Suspended), JobState::Pending) => lines.push(JobLine::Requeued { id }),
            _ => {}
        }
        logged.insert(id, j.state);
    }
    lines
}

/// Most jobs [`Inner::job_seq`] remembers.
pub(crate) const MAX_JOB_SEQS: usize = 1 << 18;

#[derive(Clone)]
pub(crate) struct App {
    pub(crate) inner: Arc<Mutex<Inner>>,
    pub(crate) db: Arc<Mutex<store::Store>>,
    pub(crate) journal: Arc<crate::journal::Journal>,
    /// Join tokens and node and proxy credentials (`DATA/nodes.key`).
    pub(crate) nodes: Arc<crate::token::NodeTokens>,
    /// The uid the controller runs as: an administrator, with root.
    pub(crate) owner: u32,
    pub(crate) wake: Arc<Notify>,
    pub(crate) node_wake: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
    pub(crate) metrics: Arc<Mutex<Metrics>>,
    /// Wakes the service loop.
    pub(crate) service_wake: Arc<Notify>,
    /// The endpoint view's version, watched by proxies' long polls.
    pub(crate) ep_watch: Arc<tokio::sync::watch::Sender<u64>>,
    /// The heartbeat interval agents are given, milliseconds: the longest a long poll is held.
    pub(crate) heartbeat_ms: u64,
    /// Who may see what.
    pub(crate) security: Arc<crate::config::Security>,
    /// User tokens (JWT).
    pub(crate) tokens: Arc<crate::token::Tokens>,
    /// The connection caps, tables and counters (`limits`).
    pub(crate) gate: Arc<crate::limits::Gate>,
    /// The site's job-submit policy (`job_submit`).
    pub(crate) hook: Arc<crate::hook::Hook>,
    /// Where the configuration came from (`scontrol reconfigure`).
    pub(crate) source: Arc<crate::config::Source>,
    /// The TCP address clients reach, set once it is bound (`tandem token --kubeconfig`).
    pub(crate) endpoint: Arc<std::sync::OnceLock<Endpoint>>,
    /// The Kubernetes API's views, with their resource versions (`kube`).
    pub(crate) kube: Arc<Mutex<Views>>,
    /// Task outputs waiting for their nodes (`kubectl logs`).
    pub(crate) outputs: Arc<Outputs>,
    /// The data directory (the database's, for `tandem admin backup`).
    pub(crate) data: Arc<std::path::PathBuf>,
    /// The largest job record the store takes (etcd's: one request of etcd's), checked before a
    /// submission is accepted; `None`: no limit (SQLite).
    pub(crate) record_limit: Option<usize>,
    /// Since when this controller serves (with etcd: leads), Unix seconds (`tandem status`).
    pub(crate) serving_since: i64,
    /// The controller's settings as last installed (at start, and by `scontrol reconfigure`),
    /// for the checks a request makes before it takes the controller's lock (a body's bound, a
    /// partition's AllowGroups): a submission takes that lock once, not three times. What
    /// `sacctmgr` changes (QOS, accounts, users, associations) is not kept current in it: read
    /// those under the lock.
    pub(crate) settings: Arc<std::sync::RwLock<Arc<control::Settings>>>,
}

/// What a node sent.
pub(crate) enum OutputSent {
    /// The output, as it comes; the sender is dropped once the client no longer reads it.
    Output(axum::body::Body, tokio::sync::oneshot::Sender<()>),
    /// Why it could not be read (a file the user may not read).
    Failed(String),
}

/// Task outputs waiting for their nodes (`output`: `kubectl logs`).
#[derive(Default)]
pub(crate) struct Outputs {
    pub(crate) next: std::sync::atomic::AtomicU64,
    pub(crate) waiting: Mutex<HashMap<u64, OutputWaiting>>,
}

pub(crate) struct OutputWaiting {
    pub(crate) node: String,
    pub(crate) key: String,
    pub(crate) to: tokio::sync::oneshot::Sender<OutputSent>,
}

/// How a client reaches the controller over TCP.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// `https://ADDR` (`http://` with `--insecure`); an unspecified address reads as loopback.
    pub(crate) url: String,
    /// The cluster CA's certificate (PEM), with TLS.
    pub(crate) ca_pem: Option<String>,
    /// The address the TCP port is bound to (maybe unspecified: every address).
    pub(crate) bound: std::net::IpAddr,
}

#[derive(Default)]
pub(crate) struct Metrics {
    pub(crate) passes: u64,
    pub(crate) pass_seconds_total: f64,
    pub(crate) last_pass_seconds: f64,
    /// Of the pass time, how long the controller was held (taking inputs, applying the plan).
    pub(crate) pass_lock_seconds_total: f64,
    /// Of that, applying plans.
    pub(crate) pass_apply_seconds_total: f64,
    pub(crate) submissions: u64,
    /// Replies sent, and their bodies' bytes (known-length bodies).
    pub(crate) responses: u64,
    pub(crate) response_bytes: u64,
}

/// Unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Unix seconds.
pub(crate) fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

pub(crate) fn refused(e: Refused) -> Response {
    let code = match e {
        Refused::Invalid(_) => StatusCode::BAD_REQUEST,
        Refused::NotFound(_) => StatusCode::NOT_FOUND,
        Refused::Forbidden(_) => StatusCode::FORBIDDEN,
        Refused::Conflict(_) => StatusCode::CONFLICT,
        Refused::Unauthorized(_) => StatusCode::UNAUTHORIZED,
        // Retry later (a step waiting for its job's other steps).
        Refused::Busy(_) => StatusCode::LOCKED,
    };
    (code, Json(ApiError { error: e.to_string(), user_msg: None })).into_response()
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
pub(crate) fn json_body<T>(b: Result<Json<T>, axum::extract::rejection::JsonRejection>) -> Result<T, Response> {
    b.map(|Json(x)| x).map_err(|e| err(StatusCode::BAD_REQUEST, format!("malformed request: {}", e.body_text())))
}

/// A path parameter, or a 400 with the JSON error body of every other refusal (axum's own
/// rejection is plain text).
pub(crate) fn path<T>(p: Result<axum::extract::Path<T>, axum::extract::rejection::PathRejection>) -> Result<T, Response> {
    p.map(|axum::extract::Path(x)| x).map_err(|e| err(StatusCode::BAD_REQUEST, format!("malformed request: {}", e.body_text())))
}

pub(crate) fn err(code: StatusCode, msg: impl Into<String>) -> Response {
    (code, Json(ApiError { error: msg.into(), user_msg: None })).into_response()
}

/// An error reply with the job-submit policy's message to the user.
pub(crate) fn refused_with(code: StatusCode, msg: impl Into<String>, user_msg: Option<String>) -> Response {
    (code, Json(ApiError { error: msg.into(), user_msg })).into_response()
}

/// The caller's uid: from the kernel on the Unix socket, else from a token (`tandem token`).
/// A request with neither may not act as a user.
pub(crate) fn user_of(app: &App, peer: &Peer, headers: &HeaderMap) -> Result<u32, Response> {
    if let Some(uid) = peer.uid {
        return Ok(uid);
    }
    match bearer(headers) {
        Some(t) => app
            .tokens
            .verify(t, now())
            .ok_or_else(|| err(StatusCode::UNAUTHORIZED, "invalid or expired token (get a new one with `tandem token`)")),
        None => Err(err(
            StatusCode::UNAUTHORIZED,
            "this request needs a user identity: use the controller's Unix socket (TANDEM_SERVER=unix://...) or a token (TANDEM_TOKEN, from `tandem token`)",
        )),
    }
}

/// A caller with a user identity, and what it may see (SECURITY.md, "Visibility").
#[derive(Debug, Clone, Copy)]
pub(crate) struct Viewer {
    pub(crate) uid: u32,
    /// Root or an operator: sees every job's and service's details.
    pub(crate) all: bool,
    /// Other users' jobs and services are hidden entirely.
    pub(crate) private_jobs: bool,
    /// Other users' priorities are hidden.
    pub(crate) private_usage: bool,
}

impl Viewer {
    /// Whether it sees the details (command lines, environment) of what `owner` runs.
    pub(crate) fn sees_details(&self, owner: u32) -> bool {
        self.all || self.uid == owner
    }

    /// Whether it sees that `owner`'s job or service exists.
    pub(crate) fn sees(&self, owner: u32) -> bool {
        !self.private_jobs || self.sees_details(owner)
    }

    /// Whether it sees `owner`'s priorities.
    pub(crate) fn sees_usage(&self, owner: u32) -> bool {
        !self.private_usage || self.sees_details(owner)
    }
}

/// The caller as a [`Viewer`]; a caller without an identity (unauthenticated TCP) sees nothing.
pub(crate) fn viewer_of(app: &App, peer: &Peer, headers: &HeaderMap) -> Result<Viewer, Response> {
    Ok(viewer_for(app, user_of(app, peer, headers)?))
}

/// What user `uid` may see.
pub(crate) fn viewer_for(app: &App, uid: u32) -> Viewer {
    let sec = &app.security;
    // Operators and administrators (`[security] operators`, `sacctmgr ... AdminLevel=`) see
    // what root sees.
    let all = uid == 0 || sec.operators.contains(&uid) || app.inner.lock().expect("controller lock").ctl.is_operator(uid);
    Viewer { uid, all, private_jobs: sec.private_jobs, private_usage: sec.private_usage }
}

/// What a hidden value reads as.
pub(crate) const HIDDEN: &str = "(hidden)";

/// The bearer token of a request, if any.
pub(crate) fn bearer(h: &HeaderMap) -> Option<&str> {
    h.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "))
}

/// The name and serial of the node credential (or, with `proxy`, proxy credential) the request
/// carries: signed by this controller and of that kind. Whether the serial is still the name's
/// is [`check_serial`]'s to say, under the controller's lock.
pub(crate) fn credential_of(app: &App, h: &HeaderMap, proxy: bool) -> Result<(String, u64), Response> {
    let what = if proxy { "a proxy's credential (`tandem token --proxy NAME`)" } else { "its node's credential (from joining)" };
    let Some(tok) = bearer(h) else {
        return Err(err(StatusCode::UNAUTHORIZED, format!("this request needs {what}")));
    };
    app.nodes.verify_credential(tok, proxy).ok_or_else(|| err(StatusCode::UNAUTHORIZED, format!("not {what}")))
}

/// The node a request's credential names, with its serial. It is checked before the body is
/// read: without a credential a request learns nothing, not even what in its body is malformed.
pub(crate) fn node_serial(app: &App, h: &HeaderMap) -> Result<(String, u64), Response> {
    credential_of(app, h, false)
}

/// The credential's node must be the node the request speaks for: one node's credential cannot
/// speak for another (SECURITY.md, N1).
pub(crate) fn same_node(cred: &str, node: &str) -> Result<(), Response> {
    if cred != node {
        return Err(err(StatusCode::FORBIDDEN, format!("this credential is node {cred:?}'s, not node {node:?}'s")));
    }
    Ok(())
}

/// Whether `serial` is still `name`'s credential (not revoked by a deletion or replaced).
pub(crate) fn check_serial(c: &Controller, holder: control::creds::Holder, name: &str, serial: u64) -> Result<(), Refused> {
    if c.credentials().valid(holder, name, serial) {
        Ok(())
    } else {
        Err(Refused::Unauthorized(format!("the credential of {name} has been revoked (the node was deleted, or a newer one was issued)")))
    }
}

/// The caller, who must be an administrator: root, or the user the controller runs as (as
/// Slurm's SlurmUser).
pub(crate) fn admin_of(app: &App, peer: &Peer, headers: &HeaderMap) -> Result<u32, Response> {
    let uid = user_of(app, peer, headers)?;
    if uid == 0 || uid == app.owner {
        Ok(uid)
    } else {
        Err(err(StatusCode::FORBIDDEN, "only root or the controller's own user may do this"))
    }
}

impl App {
    /// The controller's settings ([`App::settings`]), without its lock.
    pub(crate) fn settings(&self) -> Arc<control::Settings> {
        self.settings.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The controller, locked, with every accepted array made into its tasks
    /// (`Controller::expand`): a submission is answered once its record is durable, and
    /// whoever takes the lock next, a read or the scheduler, builds the tasks first.
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        let mut g = self.inner.lock().expect("controller lock");
        g.ctl.expand();
        g
    }

    /// Runs `f` on the controller and queues what changed for the journal, without waiting for
    /// the disk (nothing is acknowledged on the strength of it: replies wait on their own).
    /// Returns `f`'s result and the journal sequence number its changes must reach. Proxies
    /// hear of a new endpoint view at once: endpoints are soft state, rebuilt at restart.
    pub(crate) fn apply<T>(&self, f: impl FnOnce(&mut Controller) -> T) -> (T, u64) {
        let (out, seq, version, lines) = {
            let mut g = self.lock();
            let out = f(&mut g.ctl);
            let dirty = g.ctl.take_dirty();
            let lines = if tracing::enabled!(target: "server::jobs", tracing::Level::INFO) {
                job_lines(&mut g.logged, &dirty.jobs)
            } else {
                g.logged.clear();
                Vec::new()
            };
            let ids: Vec<u64> = dirty.jobs.iter().map(|j| j.req.id.0).collect();
            let seq = self.journal.push(dirty);
            if g.job_seq.len() + ids.len() > MAX_JOB_SEQS {
                g.job_seq.clear();
            }
            g.job_seq.extend(ids.into_iter().map(|id| (id, seq)));
            (out, seq, g.ctl.endpoint_version(), lines)
        };
        // Written outside the controller's lock.
        for l in lines {
            l.log();
        }
        self.ep_watch.send_if_modified(|old| std::mem::replace(old, version) != version);
        (out, seq)
    }

    /// Runs `f` on the controller, waits until what changed (and everything changed before)
    /// is durable, then returns `f`'s result.
    pub(crate) async fn with<T>(&self, f: impl FnOnce(&mut Controller) -> T) -> Result<T, Response> {
        let (out, seq) = self.apply(f);
        self.settled(seq).await?;
        Ok(out)
    }

    /// Waits until every change up to `seq` is durable (a read passes `journal.last()` taken
    /// while it held the controller's lock, so it never shows what a crash could undo).
    pub(crate) async fn settled(&self, seq: u64) -> Result<(), Response> {
        self.journal.durable(seq).await.map_err(|e| err(StatusCode::INTERNAL_SERVER_ERROR, format!("the controller cannot save: {}", e.0)))
    }

    /// Wakes the long-polling heartbeats of nodes that have orders waiting.
    pub(crate) fn wake_nodes(&self) {
        let names = self.lock().ctl.nodes_with_orders();
        let w = self.node_wake.lock().expect("lock");
        for n in names {
            if let Some(x) = w.get(&n) {
                x.notify_one();
            }
        }
    }
}

/// How long a user's name and primary group, looked up by uid, are kept: every request names
/// its caller, and a lookup reads the password database (a file, or a directory service) each
/// time. A user renamed or moved to another primary group is seen within this time, as with
/// `nscd`; a uid that is not found is looked up again each time.
const PASSWD_TTL: std::time::Duration = std::time::Duration::from_secs(30);

/// Most uids kept (the cache starts afresh past it).
const PASSWD_MAX: usize = 65_536;

/// A uid's name and primary group from the password database, kept for [`PASSWD_TTL`].
fn passwd(uid: u32) -> Option<(String, u32)> {
    static CACHE: Mutex<Option<HashMap<u32, (std::time::Instant, String, u32)>>> = Mutex::new(None);
    let now = std::time::Instant::now();
    if let Some((at, name, gid)) = CACHE.lock().expect("passwd cache").as_ref().and_then(|c| c.get(&uid))
        && now.duration_since(*at) < PASSWD_TTL
    {
        return Some((name.clone(), *gid));
    }
    let u = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok().flatten()?;
    let mut c = CACHE.lock().expect("passwd cache");
    let c = c.get_or_insert_with(HashMap::new);
    if c.len() >= PASSWD_MAX {
        c.clear();
    }
    c.insert(uid, (now, u.name.clone(), u.gid.as_raw()));
    Some((u.name, u.gid.as_raw()))
}

pub(crate) fn user_name(uid: u32) -> String {
    passwd(uid).map_or_else(|| uid.to_string(), |(name, _)| name)
}

/// A partition's AllowGroups (Slurm's): the caller must be in one of its groups (by
/// membership or primary group); root and the controller's own user pass. The rest of a
/// partition's access (AllowAccounts, AllowQos) is the controller's to check.
pub(crate) fn check_groups(app: &App, uid: u32, partition: Option<&str>) -> Result<(), Response> {
    let allowed = {
        let s = app.settings();
        match s.cluster.partition(partition) {
            Some(p) => match &p.allow_groups {
                Some(a) => (p.name.clone(), a.clone()),
                None => return Ok(()),
            },
            None => return Ok(()),
        }
    };
    if uid == 0 || uid == app.owner {
        return Ok(());
    }
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok().flatten();
    let groups: Vec<String> = user
        .and_then(|u| {
            let name = std::ffi::CString::new(u.name).ok()?;
            nix::unistd::getgrouplist(&name, u.gid).ok()
        })
        .unwrap_or_default()
        .into_iter()
        .filter_map(|g| nix::unistd::Group::from_gid(g).ok().flatten().map(|g| g.name))
        .collect();
    if groups.iter().any(|g| allowed.1.contains(g)) {
        return Ok(());
    }
    Err(err(
        StatusCode::FORBIDDEN,
        format!("User's group not permitted to use this partition: {} allows groups {} (AllowGroups)", allowed.0, allowed.1.join(",")),
    ))
}

pub(crate) fn primary_gid(uid: u32) -> u32 {
    passwd(uid).map_or(uid, |(_, gid)| gid)
}

/// The kinds' caches and the version counter they share.
pub(crate) struct Views {
    pub(crate) counter: u64,
    /// Each kind's cache, when it was computed, and the journal's position then.
    pub(crate) caches: HashMap<&'static str, (k8s::watch::Cache, std::time::Instant, u64)>,
    /// For the Pods and Jobs of batch jobs, per kind and job (an array's, a heterogeneous
    /// job's leader's id): a hash of what its objects were computed from, and their keys, so a
    /// job whose rows have not changed since is not computed again (`kube::cached`).
    pub(crate) memo: HashMap<(&'static str, u64), (u64, Vec<(String, String)>)>,
}

impl Views {
    /// Versions of the controller's `boot`-th start.
    pub(crate) fn new(boot: u64) -> Views {
        Views { counter: k8s::watch::first_version(boot), caches: HashMap::new(), memo: HashMap::new() }
    }
}

#[cfg(test)]
mod tests {
    use super::{JobLine, job_lines};
    use model::JobState;

    #[test]
    fn a_jobs_start_requeue_and_end_are_each_one_line() {
        let mut j = control::Job::new(model::JobRequest::new(7, 0, 60, model::Shape::single()), control::JobSpec::script("true"));
        j.req.user = "alice".into();
        let mut logged = std::collections::HashMap::new();
        let mut at = |state: JobState, nodes: &[&str], exit: Option<i32>| {
            j.state = state;
            let one = sched::Alloc { node: 0, cpus: 1, memory: 0, gpus: vec![], gpu_milli: 1000, other: vec![], exclusive: false };
            j.allocs = nodes.iter().map(|n| (n.to_string(), one.clone())).collect();
            j.exit_code = exit;
            job_lines(&mut logged, std::slice::from_ref(&j))
        };
        // Seen pending (submitted: the handler's own line), then started on two nodes.
        assert_eq!(at(JobState::Pending, &[], None), vec![]);
        let started = JobLine::Started { id: 7, user: "alice".into(), nodes: "n[1-2]".into() };
        assert_eq!(at(JobState::Running, &["n1", "n2"], None), vec![started]);
        // Changed again while running (a step, usage): nothing; suspended and resumed: nothing.
        assert_eq!(at(JobState::Running, &["n1", "n2"], None), vec![]);
        assert_eq!(at(JobState::Suspended, &["n1", "n2"], None), vec![]);
        assert_eq!(at(JobState::Running, &["n1", "n2"], None), vec![]);
        // Requeued (its node lost), started again elsewhere, then ended.
        assert_eq!(at(JobState::Pending, &[], None), vec![JobLine::Requeued { id: 7 }]);
        assert_eq!(at(JobState::Running, &["n3"], None), vec![JobLine::Started { id: 7, user: "alice".into(), nodes: "n3".into() }]);
        assert_eq!(at(JobState::Failed, &[], Some(3)), vec![JobLine::Ended { id: 7, state: "FAILED", exit_code: Some(3) }]);
        assert!(logged.is_empty(), "an ended job is forgotten");
        // A job first seen ended (a cancel while pending) is one line too.
        let mut k = j.clone();
        k.req.id = model::JobId(8);
        k.state = JobState::Cancelled;
        assert_eq!(job_lines(&mut logged, &[k]), vec![JobLine::Ended { id: 8, state: "CANCELLED", exit_code: Some(3) }]);
    }
}
