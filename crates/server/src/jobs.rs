//! The batch half of the API: submit, list, show, cancel, hold, release, requeue and update
//! jobs, create job steps (`srun`), nodes (list, drain, resume), accounting history, priorities,
//! tokens, the agents' registration and long-polled heartbeats, `/metrics` and `/openapi.json`.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use control::{Job, Refused};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use wire::*;

use crate::app::*;
use control::creds::Holder;

/// A path parameter, or a 400 with the JSON error body of every other refusal (axum's own
/// rejection is plain text).
fn path<T>(p: Result<Path<T>, PathRejection>) -> Result<T, Response> {
    p.map(|Path(x)| x).map_err(|e| err(StatusCode::BAD_REQUEST, format!("malformed request: {}", e.body_text())))
}

/// The query parameters, or a 400 with the JSON error body.
fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, Response> {
    q.map(|Query(x)| x).map_err(|e| err(StatusCode::BAD_REQUEST, format!("malformed request: {}", e.body_text())))
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
    q: Result<Query<TokenQuery>, QueryRejection>,
) -> Response {
    let uid = or_reply!(user_of(&app, &peer, &headers));
    let q = or_reply!(query(q));
    let life = q.lifespan.unwrap_or(1800);
    if !(1..=7 * 86400).contains(&life) {
        return err(StatusCode::BAD_REQUEST, "lifespan must be between 1 s and 7 days");
    }
    let expiry = now() + life;
    let (server, ca_pem) = app.endpoint.get().map_or((None, None), |e| (Some(e.url.clone()), e.ca_pem.clone()));
    Json(serde_json::json!({"token": app.tokens.issue(uid, now(), expiry), "expires": expiry, "server": server, "ca_pem": ca_pem}))
        .into_response()
}

/// Converts a job for display to `v`: another user's command lines are hidden from it. A job
/// that named no partition shows the default one, `part`.
pub(crate) fn job_info(j: &Job, v: &Viewer, part: &str) -> JobInfo {
    let details = v.sees_details(j.spec.uid);
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
            command: if details { s.argv.join(" ") } else { HIDDEN.into() },
            name: match (s.id == control::BATCH_STEP, details) {
                (true, _) => "batch".into(),
                (false, true) => s.spec.name.clone().unwrap_or_else(|| s.argv.first().cloned().unwrap_or_default()),
                (false, false) => HIDDEN.into(),
            },
            ntasks: s.layout.iter().map(|(_, n)| n).sum(),
            nodelist: slurmcli::compress(&s.layout.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>()),
            done: s.end.is_some(),
            exit_code: s.exit,
            start: s.start,
            end: s.end,
            timed_out: s.timeout_at.is_some(),
            usage: if details { s.usage.clone() } else { Vec::new() },
            error: s.error.clone().filter(|_| details),
            layout: s.layout.clone(),
            cpus: if s.held.iter().any(|h| h.cpus > 0) {
                s.held.iter().map(|h| h.cpus).sum()
            } else {
                s.layout.iter().filter_map(|(n, _)| j.allocs.iter().find(|(a, _)| a == n)).map(|(_, a)| a.cpus).sum()
            },
        })
        .collect();
    let unlimited = j.req.time_limit >= i64::MAX / 8;
    JobInfo {
        id: j.req.id.0,
        display_id,
        name: j.req.name.clone(),
        user: j.req.user.clone(),
        account: j.req.account.clone(),
        partition: j.req.partition.clone().unwrap_or_else(|| part.into()),
        qos: j.req.qos.clone().unwrap_or_else(|| "normal".into()),
        // Pulling its image on a node: CONFIGURING, as Slurm's job waiting for its nodes.
        state: if j.pulling.is_some() && j.state == model::JobState::Running { "CONFIGURING".into() } else { j.state.slurm_name().into() },
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
        recorded: if details { j.spec.recorded.clone() } else { Vec::new() },
        steps,
        message: match (&j.pulling, &j.message) {
            (Some((node, progress)), None) if j.state == model::JobState::Running && details => Some(format!("{progress} (on {node})")),
            _ => j.message.clone(),
        },
        uid: j.spec.uid,
        gid: j.spec.gid,
        array_job_id: j.array.map(|a| a.array_job),
        array_task_id: j.array.map(|a| a.task),
        array_max_running: j.array.and_then(|a| a.max_running),
        array_collapsed: Vec::new(),
        mem_per_node_mb: match j.req.shape.mem {
            model::MemRequest::PerNode(b) => Some(b >> 20),
            model::MemRequest::PerCpu(_) => None,
        },
        mem_per_cpu_mb: match j.req.shape.mem {
            model::MemRequest::PerCpu(b) => Some(b >> 20),
            model::MemRequest::PerNode(_) => None,
        },
        cpus_per_task: j.req.shape.cpus_per_task.max(1),
        allocation: allocs
            .iter()
            .map(|(n, a)| wire::NodeAllocInfo { name: n.clone(), cpus: a.cpus, memory_mb: a.memory >> 20, gpus: a.gpus.len() as u32 })
            .collect(),
        cancelled_by: j.cancelled_by,
        error: j.spec.error.clone(),
        features: j.req.features.clone(),
        dependency: slurmcli::jobdesc::dependency_text(&j.req.dependencies),
        req_nodes: slurmcli::compress(&j.req.nodelist),
        exc_nodes: slurmcli::compress(&j.req.exclude),
        nice: j.req.nice,
        submit_dir: if details { j.spec.submit_dir.clone() } else { HIDDEN.into() },
        time_min: j.req.time_min,
        het_job_id: None,
        het_job_offset: None,
        het_size: None,
        reservation: j.req.reservation.clone(),
        suspended: j.suspended_secs,
        suspended_since: j.suspension.as_ref().map(|s| s.since),
    }
}

/// A job as lists show it: an ordinary job's one row, or a heterogeneous job's row per
/// component (`N+0`, `N+1`, ...: each with its own id, shape, partition, nodes and CPUs; the
/// steps on component 0's).
pub(crate) fn job_rows(j: &Job, v: &Viewer, part: &str) -> Vec<JobInfo> {
    let whole = job_info(j, v, part);
    if j.req.het.is_empty() {
        return vec![whole];
    }
    let size = j.req.components();
    let allocs = if j.allocs.is_empty() && j.state.is_final() { &j.last_allocs } else { &j.allocs };
    (0..size)
        .map(|k| {
            let mut row = whole.clone();
            let req = j.req.component(k).unwrap_or_else(|| j.req.clone());
            let mine = &allocs[j.component_range(k, allocs.len())];
            row.id = j.req.id.0 + k as u64;
            row.display_id = format!("{}+{k}", j.req.id.0);
            row.het_job_id = Some(j.req.id.0);
            row.het_job_offset = Some(k as u32);
            row.het_size = Some(size as u32);
            row.partition = req.partition.clone().unwrap_or_else(|| part.into());
            row.ntasks = req.shape.ntasks;
            row.cpus_per_task = req.shape.cpus_per_task.max(1);
            row.features = req.features.clone();
            row.req_nodes = slurmcli::compress(&req.nodelist);
            row.exc_nodes = slurmcli::compress(&req.exclude);
            (row.mem_per_node_mb, row.mem_per_cpu_mb) = match req.shape.mem {
                model::MemRequest::PerNode(b) => (Some(b >> 20), None),
                model::MemRequest::PerCpu(b) => (None, Some(b >> 20)),
            };
            if mine.is_empty() {
                row.nodes = req.shape.nodes_min.max(1);
                row.nodelist = String::new();
                row.cpus = req.shape.ntasks.max(1) * req.shape.cpus_per_task.max(1);
                row.gpus = req.shape.total_gpus(row.nodes);
                row.allocation = Vec::new();
            } else {
                row.nodes = mine.len() as u32;
                row.nodelist = slurmcli::compress(&mine.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>());
                row.cpus = mine.iter().map(|(_, a)| a.cpus).sum();
                row.gpus = mine.iter().map(|(_, a)| a.gpus.len() as u32).sum();
                row.allocation = mine
                    .iter()
                    .map(|(n, a)| wire::NodeAllocInfo {
                        name: n.clone(),
                        cpus: a.cpus,
                        memory_mb: a.memory >> 20,
                        gpus: a.gpus.len() as u32,
                    })
                    .collect();
            }
            if k > 0 {
                row.steps = Vec::new();
            }
            row
        })
        .collect()
}

/// The default partition's name (the first configured).
pub(crate) fn default_partition(c: &control::Controller) -> String {
    c.settings().cluster.partitions.first().map_or_else(|| "batch".into(), |p| p.name.clone())
}

/// Reads a submission's body, bounded by `max_script_size` (twice it and 1 MiB: a script
/// at the limit fits with room for its JSON escapes and the environment). A body over the
/// bound is refused at once with 413, while the client may still be sending it: the client
/// reads that answer after its write fails.
async fn bounded_json_body(app: &App, headers: &HeaderMap, body: axum::body::Body) -> Result<SubmitRequest, Response> {
    use http_body_util::BodyExt;
    let max = app.settings().max_script_size;
    let limit = max.saturating_mul(2).saturating_add(1 << 20);
    // A declared length over the bound is refused before the body is read (a client waiting
    // for `100 Continue` gets the 413, not a connection cut mid-upload).
    let declared = headers.get(axum::http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(err(StatusCode::PAYLOAD_TOO_LARGE, slurmcli::body_too_large(limit, max)));
    }
    let bytes = match http_body_util::Limited::new(body, usize::try_from(limit).unwrap_or(usize::MAX)).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return Err(err(StatusCode::PAYLOAD_TOO_LARGE, slurmcli::body_too_large(limit, max)));
        }
        Err(e) => return Err(err(StatusCode::BAD_REQUEST, format!("malformed request: cannot read the body: {e}"))),
    };
    serde_json::from_slice(&bytes).map_err(|e| err(StatusCode::BAD_REQUEST, format!("malformed request: {e}")))
}

/// The submission's `Idempotency-Key` header, if it has one: 1 to 255 visible ASCII
/// characters.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, Response> {
    let Some(v) = headers.get(wire::IDEMPOTENCY_HEADER) else { return Ok(None) };
    match v.to_str() {
        Ok(k) if !k.is_empty() && k.len() <= 255 && k.bytes().all(|b| b.is_ascii_graphic()) => Ok(Some(k.to_string())),
        _ => Err(err(StatusCode::BAD_REQUEST, "Idempotency-Key: expected 1 to 255 visible ASCII characters (no spaces)".to_string())),
    }
}

async fn submit(State(app): State<App>, ConnectInfo(peer): ConnectInfo<Peer>, headers: HeaderMap, body: axum::body::Body) -> Response {
    let uid = or_reply!(user_of(&app, &peer, &headers));
    let key = or_reply!(idempotency_key(&headers));
    let req = or_reply!(bounded_json_body(&app, &headers, body).await);
    match submit_keyed(&app, uid, req, None, None, key).await {
        Ok(r) => Json(r).into_response(),
        Err(r) => r,
    }
}

/// Submits `req` as `uid`, as `sbatch` does: the site's policy first, then the controller's
/// checks. With `kube` (a Job written through the Kubernetes API), the object is stored with
/// the job's id in the same change, refused if one of its name exists; `retries` is the job's
/// [`control::JobSpec::retries`].
pub(crate) async fn submit_as(
    app: &App,
    uid: u32,
    req: SubmitRequest,
    kube: Option<control::kube::KubeObject>,
    retries: Option<u32>,
) -> Result<SubmitResponse, Response> {
    submit_keyed(app, uid, req, kube, retries, None).await
}

/// [`submit_as`], with the submission's idempotency key: a retry of a submission already
/// accepted answers with its jobs ([`control::Controller::accept_once`]).
async fn submit_keyed(
    app: &App,
    uid: u32,
    req: SubmitRequest,
    kube: Option<control::kube::KubeObject>,
    retries: Option<u32>,
    key: Option<String>,
) -> Result<SubmitResponse, Response> {
    macro_rules! or_reply {
        ($e:expr) => {
            match $e {
                Ok(v) => v,
                Err(r) => return Err(r),
            }
        };
    }
    let app = app.clone();
    let mut b = req.batch;
    let user = user_name(uid);
    let work_dir = |b: &slurmcli::BatchSpec| {
        b.chdir.clone().map(|d| if d.starts_with('/') { d } else { format!("{}/{d}", req.cwd) }).unwrap_or_else(|| req.cwd.clone())
    };
    let mut env = slurmcli::apply_export(b.export.as_deref(), &req.env);
    // The site's policy first; what it leaves is checked as any request.
    let batch = !b.interactive;
    let wd = work_dir(&b);
    let mut msgs: Vec<String> =
        or_reply!(crate::policy::on_submit(&app, uid, &user, &mut b, batch.then_some(&mut env), &wd).await).into_iter().collect();
    // A heterogeneous job's later components, each as a request of its own (as Slurm's).
    for k in 0..b.het.len() {
        let mut comp = std::mem::take(&mut b.het[k]);
        let m = crate::policy::on_submit(&app, uid, &user, &mut comp, None, &wd).await;
        b.het[k] = comp;
        msgs.extend(or_reply!(m));
    }
    let user_msg = (!msgs.is_empty()).then(|| msgs.join("\n"));
    or_reply!(crate::app::check_groups(&app, uid, b.partition.as_deref()));
    // Each component of a heterogeneous job in its own partition (none: the default one).
    for c in &b.het {
        or_reply!(crate::app::check_groups(&app, uid, c.partition.as_deref()));
    }
    let workdir = work_dir(&b);
    let spec = control::JobSpec {
        script: b.script.clone(),
        script_args: b.script_args.clone(),
        workdir,
        submit_dir: req.cwd.clone(),
        submit_host: req.host.clone(),
        env,
        // Slurm's defaults: an array's tasks write slurm-%A_%a.out.
        output: b.output.clone().unwrap_or_else(|| if b.array.is_some() { "slurm-%A_%a.out" } else { "slurm-%j.out" }.into()),
        error: b.error.clone(),
        append: b.open_append.unwrap_or(false),
        requeue: b.requeue.unwrap_or(!b.interactive),
        signal: b.signal.map(|s| (s.number, s.before, s.batch_only)),
        interactive: b.interactive,
        uid,
        gid: primary_gid(uid),
        recorded: control::JobSpec::recorded_of(&b),
        login_env: b.get_user_env.is_some(),
        umask: req.umask.map(|m| m & 0o777),
        container: b.container.clone().map(|mut c| {
            c.resolve(&req.cwd);
            c
        }),
        retries,
    };
    // Where the state is in etcd a job's record is one value of etcd's: refused here, before
    // anything is accepted, when it could not be stored.
    if let Some(limit) = app.record_limit {
        let size = serde_json::to_vec(&spec).map_or(usize::MAX, |v| v.len()) + serde_json::to_vec(&b).map_or(usize::MAX, |v| v.len());
        if size > limit {
            return Err(err(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "Batch job submission failed: the job's record would be {size} bytes (its script, environment and options); this cluster keeps its state in etcd, where a job's record is at most {limit} bytes"
                ),
            ));
        }
    }
    if b.test_only {
        let t = now();
        let checked = app.lock().ctl.check_submit(t, &b, uid, &user);
        return match checked {
            Ok(part) => Ok(SubmitResponse {
                job_ids: vec![],
                test_only: Some(format!("Job would be accepted in partition {part} (nothing was submitted)")),
                user_msg,
            }),
            Err(e) => Err(refused(e)),
        };
    }
    let t = now();
    let (r, seq) = app.apply(|c| {
        if let Some(o) = &kube
            && c.kube_object(&o.key()).is_some_and(|o| !o.buried())
        {
            return Err(Refused::Conflict(format!("{} {:?} already exists", o.kind, o.name)));
        }
        if let Some(o) = &kube {
            c.check_namespace(uid, &o.namespace)?;
        }
        let (ids, again) = c.accept_once(t, spec, &b, &user, key.as_deref())?;
        if let (Some(mut o), Some(&id), false) = (kube, ids.first(), again) {
            o.data["job"] = serde_json::json!(id);
            c.put_kube_object(uid, o)?;
        }
        Ok((ids, again))
    });
    if let Ok((ids, true)) = &r {
        tracing::info!(target: "server::jobs", job_id = ids.first().copied().unwrap_or(0), user = %user, "a submission made again (the same idempotency key): answered with its jobs");
    }
    let again = matches!(r, Ok((_, true)));
    let r = r.map(|(ids, _)| ids);
    // Told before the commit is waited for, so that it comes before the job's start.
    if let Ok(ids) = &r
        && let Some(first) = ids.first()
        && !again
    {
        tracing::info!(target: "server::jobs", job_id = first, user = %user, jobs = ids.len(), "job submitted");
        tracing::debug!(
            target: "server::jobs",
            job_id = first,
            partition = ?b.partition,
            array = ?b.array,
            workdir = ?wd,
            script_bytes = b.script.len(),
            "submission accepted"
        );
    }
    if let Err(unsaved) = app.settled(seq).await {
        // Said above as submitted: the log says it was not kept after all.
        if let Ok(ids) = &r
            && let Some(first) = ids.first()
        {
            tracing::error!(target: "server::jobs", job_id = first, "job submission answered as failed: the database takes no commits (the job is kept if they resume)");
        }
        return Err(unsaved);
    }
    match r {
        Ok(ids) if again => Ok(SubmitResponse { job_ids: ids, test_only: None, user_msg }),
        Ok(ids) => {
            app.metrics.lock().expect("lock").submissions += ids.len() as u64;
            app.wake.notify_one();
            Ok(SubmitResponse { job_ids: ids, test_only: None, user_msg })
        }
        Err(e) => Err(refused(e)),
    }
}

#[derive(Deserialize)]
struct JobQuery {
    user: Option<String>,
    state: Option<String>,
    partition: Option<String>,
    all: Option<bool>,
    /// Pending tasks of an array that wait for the same reason as one row (`array_collapsed`).
    collapse: Option<bool>,
}

/// Jobs (or nodes) a listing reads per hold of the controller: a long listing is read a piece
/// at a time, so requests and heartbeats get the controller in between. Each row is as it was
/// when its piece was read.
pub(crate) const LIST_CHUNK: usize = 512;

async fn list_jobs(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    q: Result<Query<JobQuery>, QueryRejection>,
) -> Response {
    let v = or_reply!(viewer_of(&app, &peer, &headers));
    let q = or_reply!(query(q));
    let collapse = q.collapse.unwrap_or(false);
    let mut filter = JobFilter::new(q);
    filter.default_partition = default_partition(&app.lock().ctl);
    let mut jobs: Vec<JobInfo> = Vec::new();
    // Collapsed pending array tasks: (array, reason) -> the row that stands for them, and their
    // indices. A collapsed task costs its index, not a row.
    let mut groups: std::collections::HashMap<(u64, model::PendingReason), (usize, Vec<u32>)> = std::collections::HashMap::new();
    let mut from = 0u64;
    let seq = loop {
        let g = app.lock();
        let mut next = None;
        // A tail of array tasks the caller may not see, or of another user than asked for, is
        // passed over whole.
        let keep = |t: &control::Job| v.sees(t.spec.uid) && filter.matches_user(t);
        for (n, j) in g.ctl.jobs_from_where(from, !filter.all, keep).first_of_tails(collapse).enumerate() {
            let j = &*j;
            if n == LIST_CHUNK {
                next = Some(j.req.id.0);
                break;
            }
            if filter.matches(j) && v.sees(j.spec.uid) {
                if collapse
                    && j.state == model::JobState::Pending
                    && let Some(a) = &j.req.array
                {
                    // A waiting tail of the array comes as its first task: the rest are its
                    // indices.
                    let rest = g.ctl.tail_rest(j.req.id.0);
                    if let Some((_, tasks)) = groups.get_mut(&(a.array_job.0, j.reason)) {
                        tasks.push(a.task);
                        tasks.extend(rest.into_iter().flatten());
                        continue;
                    }
                    let mut tasks = vec![a.task];
                    tasks.extend(rest.into_iter().flatten());
                    groups.insert((a.array_job.0, j.reason), (jobs.len(), tasks));
                }
                jobs.extend(job_rows(j, &v, &default_partition(&g.ctl)));
            }
        }
        // What a reply shows must be durable: everything taken up to the last piece read.
        let seq = app.journal.last();
        drop(g);
        match next {
            Some(id) => from = id,
            None => break seq,
        }
    };
    if let Err(r) = app.settled(seq).await {
        return r;
    }
    for (at, mut tasks) in groups.into_values() {
        if tasks.len() > 1 {
            tasks.sort_unstable();
            let mut ranges: Vec<(u32, u32)> = Vec::new();
            for t in tasks {
                match ranges.last_mut() {
                    Some(r) if r.1 + 1 == t => r.1 = t,
                    _ => ranges.push((t, t)),
                }
            }
            jobs[at].array_collapsed = ranges;
        }
    }
    let body = Json(jobs).into_response();
    body
}

/// Which jobs a listing shows.
struct JobFilter {
    all: bool,
    /// User names or uids, any of them.
    user: Option<Vec<String>>,
    partition: Option<String>,
    states: Option<Vec<String>>,
    /// What a job that named no partition is in.
    default_partition: String,
}

impl JobFilter {
    fn new(q: JobQuery) -> JobFilter {
        JobFilter {
            all: q.all.unwrap_or(false),
            user: q.user.map(|u| u.split(',').map(str::to_string).collect()),
            partition: q.partition,
            states: q.state.map(|s| s.split(',').map(|x| x.trim().to_ascii_uppercase()).collect()),
            default_partition: "batch".into(),
        }
    }

    /// The user and partition tests alone (the same for every task of an array).
    fn matches_user(&self, j: &Job) -> bool {
        self.user.as_ref().is_none_or(|us| us.iter().any(|u| *u == j.req.user || *u == j.spec.uid.to_string()))
            && self.partition.as_deref().is_none_or(|p| j.req.partition.as_deref().unwrap_or(&self.default_partition) == p)
    }

    fn matches(&self, j: &Job) -> bool {
        (self.all || !j.state.is_final())
            && self.matches_user(j)
            && self.states.as_ref().is_none_or(|s| {
                s.iter().any(|x| {
                    x == j.state.slurm_name()
                        || (x == "PD" && j.state == model::JobState::Pending)
                        || (x == "R" && j.state == model::JobState::Running)
                        || ((x == "CF" || x == "CONFIGURING") && j.state == model::JobState::Running && j.pulling.is_some())
                })
            })
    }
}

async fn get_job(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    id: Result<Path<u64>, PathRejection>,
) -> Response {
    let v = or_reply!(viewer_of(&app, &peer, &headers));
    let id = or_reply!(path(id));
    let (job, seq) = {
        let g = app.lock();
        // It shows this job only: its newest change must be durable. A job the caller may not
        // see is as one that does not exist.
        (
            g.ctl.job(id).filter(|j| v.sees(j.spec.uid)).and_then(|j| job_rows(&j, &v, &default_partition(&g.ctl)).into_iter().next()),
            g.job_seq.get(&id).copied().unwrap_or_else(|| app.journal.last()),
        )
    };
    if let Err(r) = app.settled(seq).await {
        return r;
    }
    match job {
        Some(j) => Json(j).into_response(),
        None => err(StatusCode::NOT_FOUND, format!("invalid job id specified: {id}")),
    }
}

#[derive(Deserialize)]
struct CancelQuery {
    signal: Option<i32>,
    /// One step only (with `signal`; without it, SIGKILL).
    step: Option<u32>,
    /// The batch step only (`scancel --batch`; with `signal`, without it SIGKILL).
    #[serde(default)]
    batch: bool,
}

async fn cancel(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    id: Result<Path<u64>, PathRejection>,
    q: Result<Query<CancelQuery>, QueryRejection>,
) -> Response {
    let uid = or_reply!(user_of(&app, &peer, &headers));
    let id = or_reply!(path(id));
    let q = or_reply!(query(q));
    let t = now();
    let done = match (q.step, q.batch) {
        (Some(step), _) => app.with(|c| c.signal_step(uid, id, step, q.signal.unwrap_or(9))).await,
        (None, true) => app.with(|c| c.signal_batch(uid, id, q.signal.unwrap_or(9))).await,
        (None, false) => app.with(|c| c.cancel(t, uid, id, q.signal)).await,
    };
    match done {
        Ok(Ok(())) => {
            app.wake_nodes();
            app.wake.notify_one();
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(Err(e)) => refused(e),
        Err(r) => r,
    }
}

/// `POST /v1/jobs/cancel`: `scancel` of many jobs in one request, under one hold of the
/// controller and one commit: each is cancelled (or signalled) as `DELETE /v1/jobs/{id}` would;
/// the refused ones are listed with their reasons.
async fn cancel_many(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    body: Result<Json<wire::CancelRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let v = or_reply!(viewer_of(&app, &peer, &headers));
    let uid = v.uid;
    let req = or_reply!(json_body(body));
    let filter = match &req.matching {
        None => None,
        Some(m) => {
            if m.users.is_empty() && m.states.is_empty() && m.partition.is_none() {
                return err(StatusCode::BAD_REQUEST, "matching names no user, state or partition: give job ids to cancel everything");
            }
            if let Some(bad) = m.states.iter().find(|s| !["PENDING", "RUNNING", "SUSPENDED"].contains(&s.as_str())) {
                return err(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "Invalid job state specified: {}; valid job states are PENDING, RUNNING, and SUSPENDED",
                        slurmcli::visible(bad)
                    ),
                );
            }
            Some(JobFilter {
                all: false,
                user: (!m.users.is_empty()).then(|| m.users.clone()),
                partition: m.partition.clone(),
                states: (!m.states.is_empty()).then(|| m.states.clone()),
                default_partition: String::new(),
            })
        }
    };
    let t = now();
    let refused = app
        .with(|c| {
            let mut ids = req.ids.clone();
            if let Some(mut f) = filter {
                f.default_partition = default_partition(c);
                let keep = |j: &Job| v.sees(j.spec.uid) && f.matches_user(j);
                ids.extend(c.jobs_from_where(0, true, keep).filter(|j| f.matches(j) && v.sees(j.spec.uid)).map(|j| j.req.id.0));
            }
            if !req.batch {
                return c.cancel_many(t, uid, ids, req.signal).into_iter().map(|(id, e)| (id, e.to_string())).collect();
            }
            let mut out = Vec::new();
            ids.sort_unstable();
            ids.dedup();
            for &id in &ids {
                if let Err(e) = c.signal_batch(uid, id, req.signal.unwrap_or(9)) {
                    out.push((id, e.to_string()));
                }
            }
            out
        })
        .await;
    match refused {
        Ok(refused) => {
            app.wake_nodes();
            app.wake.notify_one();
            Json(wire::CancelResponse { refused }).into_response()
        }
        Err(r) => r,
    }
}

#[derive(Deserialize)]
struct Action {
    action: String,
    time_limit: Option<i64>,
    /// `complete`: the allocation's exit code.
    exit_code: Option<i32>,
}

async fn job_action(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    id: Result<Path<u64>, PathRejection>,
    body: Result<Json<Action>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let uid = or_reply!(user_of(&app, &peer, &headers));
    let id = or_reply!(path(id));
    let mut a: Action = or_reply!(json_body(body));
    if matches!(a.action.as_str(), "update" | "hold" | "release") {
        a.time_limit = or_reply!(crate::policy::on_change(&app, uid, id, &a.action, a.time_limit).await).or(a.time_limit);
    }
    let r = app
        .with(|c| match a.action.as_str() {
            "hold" => c.hold(uid, id, true),
            "release" => c.hold(uid, id, false),
            "requeue" => c.requeue(uid, id),
            "suspend" => c.suspend(now(), uid, id),
            "resume" => c.resume(now(), uid, id),
            "complete" => c.complete(uid, id, a.exit_code.unwrap_or(0)),
            "update" => match a.time_limit {
                Some(t) => c.set_time_limit(uid, id, t),
                None => Err(Refused::Invalid("update needs time_limit".into())),
            },
            other => Err(Refused::Invalid(format!("unknown action {other:?} (hold, release, requeue, suspend, resume, update, complete)"))),
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

async fn attach_step(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    ids: Result<Path<(u64, u32)>, PathRejection>,
    body: Result<Json<control::StepIo>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let uid = or_reply!(user_of(&app, &peer, &headers));
    let (id, step) = or_reply!(path(ids));
    let io = or_reply!(json_body(body));
    match app.with(|c| c.attach_step(uid, id, step, io)).await {
        Ok(Ok(layout)) => {
            app.wake_nodes();
            Json(StepResponse { step, layout }).into_response()
        }
        Ok(Err(e)) => refused(e),
        Err(r) => r,
    }
}

/// The largest a job's record may grow by its steps where the state is in etcd: below the
/// 1.4 MB the etcd backend stores in one value.
const STEP_RECORD_LIMIT: usize = 1_300_000;
/// What a step's record holds beyond its request (its layout, state and times), at most.
const STEP_SLACK: usize = 16 * 1024;

async fn create_step(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    id: Result<Path<u64>, PathRejection>,
    body: Result<Json<StepRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let uid = or_reply!(user_of(&app, &peer, &headers));
    let id = or_reply!(path(id));
    let s = or_reply!(json_body(body));
    let t = now();
    // With etcd a job's record, its steps with it, is one value of etcd's: a step that would
    // take it past what etcd stores is refused, before anything changes.
    let grows = app.record_limit.map(|_| serde_json::to_vec(&s).map_or(usize::MAX, |v| v.len()) + STEP_SLACK);
    let made = app.with(|c| {
        if let Some(adds) = grows {
            let has = c.job(id).map_or(0, |j| serde_json::to_vec(&*j).map_or(usize::MAX, |v| v.len()));
            if has.saturating_add(adds) > STEP_RECORD_LIMIT {
                return Err(Refused::Invalid(format!(
                    "Unable to create step for job {id}: the job's record would pass {STEP_RECORD_LIMIT} bytes with it (it holds {has}: its steps and their command lines); this cluster keeps its state in etcd, where a job's record is one value. Run fewer steps in this job, or the rest in another"
                )));
            }
        }
        let step = c.create_step(t, uid, id, s.nodes, s.ntasks, s.ntasks_per_node, s.argv, s.spec)?;
        let layout = c.job(id).and_then(|j| j.steps.iter().find(|x| x.id == step).map(|x| x.layout.clone())).unwrap_or_default();
        Ok((step, layout))
    });
    match made.await {
        Ok(Ok((step, layout))) => {
            app.wake_nodes();
            Json(StepResponse { step, layout }).into_response()
        }
        Ok(Err(e)) => refused(e),
        Err(r) => r,
    }
}

async fn list_nodes(State(app): State<App>, ConnectInfo(peer): ConnectInfo<Peer>, headers: HeaderMap) -> Response {
    or_reply!(viewer_of(&app, &peer, &headers));
    let mut nodes = Vec::new();
    let mut at = 0;
    let seq = loop {
        let g = app.lock();
        let all = g.ctl.nodes();
        let piece = &all[at.min(all.len())..];
        let piece = &piece[..piece.len().min(LIST_CHUNK)];
        at += piece.len();
        let parts: Vec<String> = g.ctl.settings().cluster.partitions.iter().map(|p| p.name.clone()).collect();
        let t = crate::app::now();
        nodes.extend(node_infos(&g.ctl.node_reservations(t), piece, &parts));
        let (done, seq) = (at >= all.len(), app.journal.last());
        drop(g);
        if done {
            break seq;
        }
    };
    if let Err(r) = app.settled(seq).await {
        return r;
    }
    Json(nodes).into_response()
}

/// The nodes as listed: a deleted node's slot is not.
/// An idle node in an advance reservation in force is `maint` (a maintenance one) or
/// `reserved` (Slurm's `resv`); `resv` has the reservation in force on each node that has one.
pub(crate) fn node_infos(
    resv: &std::collections::HashMap<&str, &model::Reservation>,
    nodes: &[control::NodeRec],
    all: &[String],
) -> Vec<NodeInfo> {
    nodes
        .iter()
        .filter(|n| !n.deleted)
        .map(|n| {
            let alloc_gpus = n.usage.gpu_milli.iter().filter(|&&m| m > 0).count() as u32;
            let resv = resv.get(n.node.name.as_str());
            let state = match n.node.state {
                model::NodeState::Down => "down",
                model::NodeState::Drain => "drain",
                model::NodeState::Up if n.usage.jobs == 0 && resv.is_some_and(|r| r.flags.maint) => "maint",
                model::NodeState::Up if n.usage.jobs == 0 && resv.is_some() => "reserved",
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
                partitions: if n.node.partitions.is_empty() { all.to_vec() } else { n.node.partitions.clone() },
                features: n.node.features.clone(),
                reservation: resv.map(|r| r.name.clone()),
                reboot: n.reboot.as_ref().map(|r| if r.issued_at.is_some() { "issued" } else { "requested" }.into()),
                registered: (n.registered > 0).then_some(n.registered),
                agent_started: (n.agent_started > 0).then_some(n.agent_started),
            }
        })
        .collect()
}

/// `GET /v1/config`: the cluster's settings a user may read (`scontrol show config`,
/// `show partition`, `sinfo`).
async fn config(State(app): State<App>, ConnectInfo(peer): ConnectInfo<Peer>, headers: HeaderMap) -> Response {
    or_reply!(viewer_of(&app, &peer, &headers));
    let g = app.lock();
    let s = g.ctl.settings();
    let limit = |t: i64| (t < i64::MAX / 8).then_some(t);
    let info = ConfigInfo {
        cluster_name: s.cluster_name.clone(),
        kill_wait: s.kill_wait,
        lease: s.lease,
        max_array: s.max_array,
        min_job_age: s.min_job_age,
        scheduler: if s.sched.backfill == sched::Backfill::None { "sched/builtin".into() } else { "sched/backfill".into() },
        partitions: s
            .cluster
            .partitions
            .iter()
            .enumerate()
            .map(|(i, p)| PartitionInfo {
                name: p.name.clone(),
                default: i == 0,
                default_time: limit(p.default_time),
                max_time: limit(p.max_time),
                priority_tier: p.priority_tier,
                nodes: s.partition_nodes.iter().find(|(n, _)| *n == p.name).and_then(|(_, l)| l.clone()),
            })
            .collect(),
        qos: s.cluster.qos.iter().map(|q| q.name.clone()).collect(),
        max_script_size: Some(s.max_script_size),
        mpi_default: s.mpi_default.clone(),
        job_submit: s.job_submit.clone(),
        reboot_program: s.reboot_program.clone(),
        resume_timeout: Some(s.resume_timeout),
        log_filter: logging::filter(),
    };
    drop(g);
    Json(info).into_response()
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
    name: Result<Path<String>, PathRejection>,
    body: Result<Json<NodeAction>, axum::extract::rejection::JsonRejection>,
) -> Response {
    // A user (root), or a program on the node itself with the node's credential (NHC's
    // `scontrol update nodename=$(hostname) state=drain`): that node only.
    let who = match user_of(&app, &peer, &headers) {
        Ok(uid) => Ok(uid),
        Err(refusal) => match node_serial(&app, &headers) {
            Ok(node) => Err(node),
            Err(_) => return refusal,
        },
    };
    let name = or_reply!(path(name));
    if let Err((cred, _)) = &who {
        or_reply!(same_node(cred, &name));
    }
    let a = or_reply!(json_body(body));
    let drain = match a.state.to_ascii_lowercase().as_str() {
        "drain" => true,
        "resume" | "idle" => false,
        other => return err(StatusCode::BAD_REQUEST, format!("unknown node state {other:?} (drain, resume)")),
    };
    let done = app
        .with(|c| match &who {
            Ok(uid) => c.set_node_state(*uid, &name, drain, a.reason),
            Err((cred, serial)) => {
                check_serial(c, control::creds::Holder::Node, cred, *serial)?;
                c.node_self_state(&name, drain, a.reason)
            }
        })
        .await;
    match done {
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
    /// Job numbers (`sacct -j`): of the finished jobs, those and their arrays' tasks (and for a
    /// number with no record of its own, the job and array just below it) alone, read by id;
    /// the live ones are all listed (they are in memory).
    jobs: Option<String>,
}

async fn history(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    q: Result<Query<HistoryQuery>, QueryRejection>,
) -> Response {
    let v = or_reply!(viewer_of(&app, &peer, &headers));
    let q = or_reply!(query(q));
    let named: Option<Vec<u64>> = match q.jobs.as_deref() {
        None => None,
        Some(list) => {
            // As the OpenAPI document says: numbers of 1 to 19 digits, 19,999 characters in all.
            let ok = list.len() <= 19_999 && list.split(',').all(|x| (1..=19).contains(&x.len()) && x.bytes().all(|b| b.is_ascii_digit()));
            match list.split(',').map(|x| x.parse::<u64>()).collect::<Result<Vec<u64>, _>>() {
                Ok(ids) if ok => Some(ids),
                _ => {
                    let shown: String = list.chars().take(60).collect();
                    return err(
                        StatusCode::BAD_REQUEST,
                        format!("jobs={shown:?}...: expected job numbers (1 to 19 digits) separated by commas, 19,999 characters at most"),
                    );
                }
            }
        }
    };
    let span = u64::from(app.lock().ctl.settings().max_array);
    // Running and pending jobs come from memory; finished ones from the accounting table, read
    // once everything seen in memory is durable (a job that ended in between is in both: the
    // table's final record wins).
    let (live, seq, part) = {
        let g = app.lock();
        let live: Vec<JobInfo> = g
            .ctl
            .jobs()
            .filter(|j| !j.state.is_final() && q.user.as_deref().is_none_or(|u| j.req.user == u) && v.sees(j.spec.uid))
            .flat_map(|j| job_rows(&j, &v, &default_partition(&g.ctl)))
            .collect();
        (live, app.journal.last(), default_partition(&g.ctl))
    };
    if let Err(r) = app.settled(seq).await {
        return r;
    }
    // Reading, decoding and encoding many finished jobs takes a while: off the runtime's
    // threads, which serve everyone else meanwhile.
    let db = app.db.clone();
    let answer = tokio::task::spawn_blocking(move || {
        let stored =
            db.lock().expect("database lock").history_of(q.user.as_deref(), q.since.unwrap_or(0), named.as_deref().map(|ids| (ids, span)));
        match stored {
            Ok(jobs) => {
                let mut out: Vec<JobInfo> = jobs.iter().filter(|j| v.sees(j.spec.uid)).flat_map(|j| job_rows(j, &v, &part)).collect();
                let ended: std::collections::HashSet<u64> = out.iter().map(|j| j.id).collect();
                out.extend(live.into_iter().filter(|j| !ended.contains(&j.id)));
                out.sort_by_key(|j| j.id);
                Json(out).into_response()
            }
            Err(e) => err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        }
    })
    .await;
    answer.unwrap_or_else(|e| err(StatusCode::INTERNAL_SERVER_ERROR, format!("reading the history: {e}")))
}

async fn priorities(State(app): State<App>, ConnectInfo(peer): ConnectInfo<Peer>, headers: HeaderMap) -> Response {
    let v = or_reply!(viewer_of(&app, &peer, &headers));
    let g = app.lock();
    let mut rows: Vec<(u64, sched::Breakdown)> = g.ctl.priorities(now());
    rows.retain(|(id, _)| g.ctl.job(*id).is_some_and(|j| v.sees_usage(j.spec.uid) && v.sees(j.spec.uid)));
    Json(rows).into_response()
}

/// `sshare`: the fair-share tree. With `PrivateData=usage` (`private_usage`) a user who is
/// not an operator sees only the accounts of their own jobs, and their own name's.
async fn shares(State(app): State<App>, ConnectInfo(peer): ConnectInfo<Peer>, headers: HeaderMap) -> Response {
    let v = or_reply!(viewer_of(&app, &peer, &headers));
    let g = app.lock();
    let mut rows = g.ctl.shares();
    if !v.sees_usage(u32::MAX) {
        let me = user_name(v.uid);
        let mine: std::collections::HashSet<String> =
            g.ctl.jobs().filter(|j| j.spec.uid == v.uid).map(|j| j.req.account.clone()).chain([me]).collect();
        rows.retain(|r| mine.contains(&r.account));
    }
    Json(rows).into_response()
}

/// Most GPUs a node may have: GPUs are numbered with a byte (a task's and an allocation's GPU
/// indices), and the controller keeps a slot for each, so a node claiming billions would exhaust
/// its memory.
const MAX_NODE_GPUS: u32 = 256;

async fn register(
    State(app): State<App>,
    headers: HeaderMap,
    body: Result<Json<RegisterRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let (cred, serial) = or_reply!(node_serial(&app, &headers));
    let r = or_reply!(json_body(body));
    or_reply!(same_node(&cred, &r.node.name));
    if r.node.gpus > MAX_NODE_GPUS {
        return err(StatusCode::BAD_REQUEST, format!("node {}: at most {MAX_NODE_GPUS} GPUs, not {}", r.node.name, r.node.gpus));
    }
    // The controller may be one release ahead of its agents, never behind (upgrade order).
    if let Err(why) = wire::agent_release_ok(env!("CARGO_PKG_VERSION"), r.version.as_deref()) {
        tracing::warn!(node = %r.node.name, agent_release = ?r.version, "node {} refused: {why}", r.node.name);
        let status = if why.starts_with("malformed") { StatusCode::BAD_REQUEST } else { StatusCode::UPGRADE_REQUIRED };
        return err(status, format!("node {}: {why}", r.node.name));
    }
    let t = now();
    let registered = app
        .with(|c| {
            check_serial(c, Holder::Node, &r.node.name, serial)?;
            c.register_with(t, r.node, r.addr, &r.running, &r.exits).map(|()| {
                let s = c.settings();
                RegisterResponse {
                    lease_s: s.lease,
                    heartbeat_ms: c.heartbeat_ms(),
                    prolog: s.prolog.clone(),
                    epilog: s.epilog.clone(),
                    prolog_epilog_timeout_s: s.prolog_epilog_timeout.max(0) as u64,
                    health_check_program: s.health_check_program.clone(),
                    health_check_interval_s: s.health_check_interval.max(0) as u64,
                    gpu_health_check: s.gpu_health_check,
                    health_check_node_state: s.health_check_node_state.clone(),
                }
            })
        })
        .await;
    match registered {
        Ok(Ok(info)) => {
            app.wake.notify_one();
            Json(info).into_response()
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
    let (cred, serial) = or_reply!(node_serial(&app, &headers));
    let hb = or_reply!(json_body(body));
    or_reply!(same_node(&cred, &hb.node));
    let notify = app.node_wake.lock().expect("lock").entry(hb.node.clone()).or_insert_with(|| Arc::new(Notify::new())).clone();
    let had_exits = !hb.exits.is_empty();
    tracing::debug!(target: "server::nodes", node = %hb.node, ack = hb.ack, running = hb.running.len(), exits = hb.exits.len(), "heartbeat");
    let t = now();
    let t_ms = now_ms();
    let (out, seq) = app.apply(|c| {
        check_serial(c, Holder::Node, &hb.node, serial)?;
        let o = c.heartbeat(t, &hb.node, hb.ack, &hb.running, &hb.exits);
        if o.is_ok() {
            if let Some(why) = &hb.drain {
                c.agent_drain(&hb.node, why, false)?;
            }
            if let Some(why) = &hb.health_failed {
                if hb.health_down {
                    c.agent_health_down(t, &hb.node, why)?;
                } else {
                    c.agent_drain(&hb.node, why, true)?;
                }
            } else if hb.health_passed {
                c.agent_healthy(&hb.node)?;
            }
            c.replica_reports(t_ms, &hb.node, &hb.replicas);
            c.record_usage(&hb.node, &hb.usage);
            c.record_pulls(&hb.node, &hb.pulling);
            c.reconcile_frozen(&hb.node, &hb.frozen);
            c.runs_started(t, &hb.node, &hb.started);
        }
        o
    });
    let first = match out {
        Ok(o) => o,
        Err(e) => return refused(e),
    };
    if let Err(e) = app.journal.durable(seq).await {
        return unsaved(&e.0);
    }
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
    let (out, seq) = app.apply(|c| check_serial(c, Holder::Node, &hb.node, serial).and_then(|()| c.poll(t, &hb.node, hb.ack)));
    match out {
        Ok(o) => match app.journal.durable(seq).await {
            Ok(()) => Json(Orders { orders: o }).into_response(),
            Err(e) => unsaved(&e.0),
        },
        Err(e) => refused(e),
    }
}

/// A heartbeat taken (the lease renewed in memory) that could not be made durable: no orders,
/// no exit acknowledged, but the node may keep its work running (see [`wire::Unsaved`]).
fn unsaved(why: &str) -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, Json(wire::Unsaved { error: format!("the controller cannot save: {why}"), lease_renewed: true }))
        .into_response()
}

async fn metrics(State(app): State<App>, ConnectInfo(peer): ConnectInfo<Peer>, headers: HeaderMap) -> Response {
    if !app.security.metrics_open {
        or_reply!(viewer_of(&app, &peer, &headers));
    }
    let g = app.lock();
    let m = app.metrics.lock().expect("lock");
    let by_state = g.ctl.count_by_state();
    let mut s = String::new();
    s.push_str("# HELP tandem_jobs Jobs by state.\n# TYPE tandem_jobs gauge\n");
    for (k, v) in &by_state {
        s.push_str(&format!("tandem_jobs{{state=\"{k}\"}} {v}\n"));
    }
    s.push_str(&format!(
        "# HELP tandem_queue_length Pending jobs.\n# TYPE tandem_queue_length gauge\ntandem_queue_length {}\n",
        by_state.get("PENDING").copied().unwrap_or(0)
    ));
    s.push_str(&format!(
        "# HELP tandem_job_records Jobs held in memory as records of their own.
# TYPE tandem_job_records gauge
tandem_job_records {}
         # HELP tandem_array_tail_tasks Array tasks held in memory only as their array's one record.
# TYPE tandem_array_tail_tasks gauge
tandem_array_tail_tasks {}
",
        g.ctl.job_records(),
        g.ctl.tail_tasks()
    ));
    let mut nodes: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for n in g.ctl.nodes().iter().filter(|n| !n.deleted) {
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
    s.push_str(&format!(
        "# HELP tandem_scheduling_pass_lock_seconds_total Time scheduling passes held the controller (taking their inputs, applying their plans).\n# TYPE tandem_scheduling_pass_lock_seconds_total counter\ntandem_scheduling_pass_lock_seconds_total {}\n",
        m.pass_lock_seconds_total
    ));
    s.push_str(&format!(
        "# HELP tandem_scheduling_pass_apply_seconds_total Of that, applying their plans.\n# TYPE tandem_scheduling_pass_apply_seconds_total counter\ntandem_scheduling_pass_apply_seconds_total {}\n",
        m.pass_apply_seconds_total
    ));
    s.push_str(&format!("# HELP tandem_scheduling_last_pass_seconds The last pass.\n# TYPE tandem_scheduling_last_pass_seconds gauge\ntandem_scheduling_last_pass_seconds {}\n", m.last_pass_seconds));
    s.push_str("# HELP tandem_service_replicas Service replicas by state.\n# TYPE tandem_service_replicas gauge\n");
    s.push_str("# HELP tandem_service_desired_replicas Desired replicas per service.\n# TYPE tandem_service_desired_replicas gauge\n");
    for svc in g.ctl.services() {
        let name = &svc.spec.name;
        s.push_str(&format!("tandem_service_desired_replicas{{service=\"{name}\"}} {}\n", svc.desired));
        let mut by: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
        for j in g.ctl.replicas_of(name).filter(|j| !j.state.is_final()) {
            *by.entry(j.replica.as_ref().expect("replica").state.name()).or_default() += 1;
        }
        for (st, n) in by {
            s.push_str(&format!("tandem_service_replicas{{service=\"{name}\",state=\"{st}\"}} {n}\n"));
        }
    }
    s.push_str(&format!(
        "# HELP tandem_endpoint_view_version Version of the endpoint view proxies follow.\n# TYPE tandem_endpoint_view_version gauge\ntandem_endpoint_view_version {}\n",
        g.ctl.endpoint_version()
    ));
    let (etcd_stats, leaderships) = {
        let d = app.db.lock().expect("database lock");
        (d.etcd_stats(), d.meta("leaderships").ok().flatten().unwrap_or_else(|| "0".into()))
    };
    if let Some(st) = etcd_stats {
        s.push_str(&format!(
            "# HELP tandem_leader Whether this controller leads (a standby answers no request, this one included).\n# TYPE tandem_leader gauge\ntandem_leader 1\n\
             # HELP tandem_etcd_commits_total Group commits to etcd (one transaction, or one staged group).\n# TYPE tandem_etcd_commits_total counter\ntandem_etcd_commits_total {}\n\
             # HELP tandem_etcd_transactions_total etcd transactions written.\n# TYPE tandem_etcd_transactions_total counter\ntandem_etcd_transactions_total {}\n\
             # HELP tandem_etcd_staged_commits_total Group commits larger than one transaction, staged in pieces.\n# TYPE tandem_etcd_staged_commits_total counter\ntandem_etcd_staged_commits_total {}\n\
             # HELP tandem_etcd_commit_seconds_total Time spent committing to etcd.\n# TYPE tandem_etcd_commit_seconds_total counter\ntandem_etcd_commit_seconds_total {:.6}\n\
             # HELP tandem_etcd_oversized_records_total Records left out of etcd for their size (kept by this controller only).\n# TYPE tandem_etcd_oversized_records_total counter\ntandem_etcd_oversized_records_total {}\n",
            st.commits, st.transactions, st.staged, st.seconds, st.oversized
        ));
        s.push_str(&format!(
            "# HELP tandem_leaderships_total Times a controller has taken the lead of this cluster (stored in etcd; the first included).\n# TYPE tandem_leaderships_total counter\ntandem_leaderships_total {leaderships}\n"
        ));
        s.push_str("# HELP tandem_etcd_commit_duration_seconds Commits to etcd by how long they took.\n# TYPE tandem_etcd_commit_duration_seconds histogram\n");
        let mut acc = 0;
        for (i, n) in st.latency.iter().enumerate() {
            acc += n;
            let le = store::LATENCY_BUCKETS.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            s.push_str(&format!("tandem_etcd_commit_duration_seconds_bucket{{le=\"{le}\"}} {acc}\n"));
        }
        s.push_str(&format!(
            "tandem_etcd_commit_duration_seconds_sum {:.6}\ntandem_etcd_commit_duration_seconds_count {}\n",
            st.seconds, st.commits
        ));
        s.push_str("# HELP tandem_etcd_commit_records Commits to etcd by how many records they held (group commit's batch size).\n# TYPE tandem_etcd_commit_records histogram\n");
        let mut acc = 0;
        for (i, n) in st.batch.iter().enumerate() {
            acc += n;
            let le = store::BATCH_BUCKETS.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            s.push_str(&format!("tandem_etcd_commit_records_bucket{{le=\"{le}\"}} {acc}\n"));
        }
        s.push_str(&format!("tandem_etcd_commit_records_sum {}\ntandem_etcd_commit_records_count {}\n", st.records, st.commits));
    }
    let (txs, recs) = app.journal.stats();
    s.push_str(&format!(
        "# HELP tandem_db_commits_total Database transactions (group commits).\n# TYPE tandem_db_commits_total counter\ntandem_db_commits_total {txs}\n# HELP tandem_db_records_total Records written.\n# TYPE tandem_db_records_total counter\ntandem_db_records_total {recs}\n"
    ));
    s.push_str(&format!(
        "# HELP tandem_submissions_total Jobs submitted.\n# TYPE tandem_submissions_total counter\ntandem_submissions_total {}\n",
        m.submissions
    ));
    s.push_str(&format!(
        "# HELP tandem_responses_total Replies sent.\n# TYPE tandem_responses_total counter\ntandem_responses_total {}\n\
         # HELP tandem_response_bytes_total Bytes of reply bodies sent (listings are most of them).\n\
         # TYPE tandem_response_bytes_total counter\ntandem_response_bytes_total {}\n",
        m.responses, m.response_bytes
    ));
    drop((m, g));
    s.push_str(&app.hook.render());
    s.push_str(&app.gate.render());
    ([("content-type", "text/plain; version=0.0.4")], s).into_response()
}

/// `GET /v1/status` (`tandem status`): the controller that answers, its store and, with etcd,
/// each member's health as it answers now (asked within a second, outside every lock).
async fn status(State(app): State<App>, ConnectInfo(peer): ConnectInfo<Peer>, headers: HeaderMap) -> Response {
    or_reply!(viewer_of(&app, &peer, &headers));
    let (jobs_pending, jobs_running, nodes, nodes_up) = {
        let g = app.lock();
        let by = g.ctl.count_by_state();
        let pending = by.get("PENDING").copied().unwrap_or(0) as u64;
        let live: u64 = by
            .iter()
            .filter(|(k, _)| matches!(k.as_ref(), "RUNNING" | "SUSPENDED" | "COMPLETING" | "CONFIGURING"))
            .map(|(_, v)| *v as u64)
            .sum();
        let all: Vec<_> = g.ctl.nodes().iter().filter(|n| !n.deleted).map(|n| n.node.state).collect();
        (pending, live, all.len() as u64, all.iter().filter(|s| **s == model::NodeState::Up).count() as u64)
    };
    let (starts, etcd) = {
        #[cfg_attr(not(feature = "etcd"), allow(unused_mut))]
        let mut d = app.db.lock().expect("database lock");
        let starts = d.meta("boot").ok().flatten().and_then(|v| v.parse().ok()).unwrap_or(0);
        #[cfg(feature = "etcd")]
        let etcd = {
            let leaderships = d.meta("leaderships").ok().flatten().and_then(|v| v.parse().ok()).unwrap_or(0);
            let stats = d.etcd_stats();
            d.remote().map(|r| (r.config().prefix.clone(), r.members(), leaderships, stats.unwrap_or_default()))
        };
        #[cfg(not(feature = "etcd"))]
        let etcd: Option<()> = None;
        (starts, etcd)
    };
    #[cfg(feature = "etcd")]
    let etcd = match etcd {
        Some((prefix, members, leaderships, st)) => Some(EtcdStatus {
            prefix,
            leaderships,
            commits: st.commits,
            commit_seconds_mean: if st.commits > 0 { st.seconds / st.commits as f64 } else { 0.0 },
            members: members
                .status(Duration::from_secs(1))
                .await
                .into_iter()
                .map(|m| EtcdMember {
                    endpoint: m.endpoint,
                    error: m.error,
                    version: m.version,
                    db_bytes: m.db_bytes,
                    db_bytes_in_use: m.db_bytes_in_use,
                    leader: m.leader,
                    has_leader: m.has_leader,
                    errors: m.errors,
                })
                .collect(),
        }),
        None => None,
    };
    #[cfg(not(feature = "etcd"))]
    let etcd: Option<EtcdStatus> = etcd.map(|()| unreachable!("no etcd in this build"));
    Json(ClusterStatus {
        controller: app.endpoint.get().map(|e| e.url.clone()).unwrap_or_default(),
        serving_since: app.serving_since,
        starts,
        store: if etcd.is_some() { "etcd" } else { "sqlite" }.into(),
        etcd,
        jobs_pending,
        jobs_running,
        nodes,
        nodes_up,
    })
    .into_response()
}

/// `GET /healthz`: whether the controller answers; the one thing anyone may ask.
async fn healthz() -> &'static str {
    "ok\n"
}

async fn openapi(State(app): State<App>, ConnectInfo(peer): ConnectInfo<Peer>, headers: HeaderMap) -> Response {
    or_reply!(viewer_of(&app, &peer, &headers));
    ([("content-type", "application/json")], wire::OPENAPI).into_response()
}

/// The batch half's routes.
pub(crate) fn routes(r: Router<App>) -> Router<App> {
    r.route("/v1/jobs", post(submit).get(list_jobs))
        .route("/v1/jobs/cancel", post(cancel_many))
        .route("/v1/jobs/{id}", get(get_job).delete(cancel).post(job_action))
        .route("/v1/jobs/{id}/steps", post(create_step))
        .route("/v1/jobs/{id}/steps/{step}/attach", post(attach_step))
        .route("/v1/nodes", get(list_nodes))
        .route("/v1/nodes/{name}", post(node_action))
        .route("/v1/history", get(history))
        .route("/v1/config", get(config))
        .route("/v1/status", get(status))
        .route("/v1/priority", get(priorities))
        .route("/v1/shares", get(shares))
        .route("/v1/token", post(issue_token))
        .route("/v1/agent/register", post(register))
        .route("/v1/agent/heartbeat", post(heartbeat))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .route("/healthz", get(healthz))
}
