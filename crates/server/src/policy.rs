//! The site's job-submit policy applied to requests: what the handlers call. A submission
//! (`sbatch`, `salloc`, `srun`, and `--test-only`) goes through `slurm_job_submit` before any
//! other check, a job's modification (`scontrol update`, `hold`, `release`) through
//! `slurm_job_modify`, and a service's apply through `slurm_job_submit` once (not per
//! replica). What the script sets is applied through the option parser, and the request is
//! then checked as any other: the partition's groups, the association, the QOS, the limits.

use crate::app::{App, err, refused_with};
use crate::hook::{Call, CallKind};
use axum::http::StatusCode;
use axum::response::Response;
use slurmcli::BatchSpec;
use slurmcli::jobdesc::{self, Fields, Submitter, Value};
use std::collections::BTreeMap;

/// The partitions `uid` may use, as the script's `part_list` (Slurm's partition fields).
fn part_list(app: &App, uid: u32) -> BTreeMap<String, Fields> {
    let parts: Vec<(model::Partition, bool, Vec<String>, u64)> = {
        let g = app.lock();
        let cluster = &g.ctl.settings().cluster;
        let default = cluster.partition(None).map(|p| p.name.clone());
        cluster
            .partitions
            .iter()
            .map(|p| {
                // A node that names no partition is in every one.
                let nodes: Vec<&control::NodeRec> = g
                    .ctl
                    .nodes()
                    .iter()
                    .filter(|n| !n.deleted && (n.node.partitions.is_empty() || n.node.partitions.contains(&p.name)))
                    .collect();
                let cpus = nodes.iter().map(|n| u64::from(n.node.cpus)).sum();
                (p.clone(), default.as_deref() == Some(p.name.as_str()), nodes.iter().map(|n| n.node.name.clone()).collect(), cpus)
            })
            .collect()
    };
    let mins = |t: model::Time| if t >= model::Time::MAX / 8 { jobdesc::INFINITE } else { (t as f64 / 60.0).ceil() };
    let mut out = BTreeMap::new();
    for (p, default, nodes, cpus) in parts {
        if crate::app::check_groups(app, uid, Some(&p.name)).is_err() {
            continue;
        }
        let mut f = Fields::new();
        f.insert("name".into(), Value::Str(p.name.clone()));
        f.insert("nodes".into(), Value::Str(slurmcli::compress(&nodes)));
        f.insert("total_nodes".into(), Value::Num(nodes.len() as f64));
        f.insert("total_cpus".into(), Value::Num(cpus as f64));
        f.insert("max_time".into(), Value::Num(mins(p.max_time)));
        f.insert("default_time".into(), Value::Num(mins(p.default_time)));
        f.insert("priority_tier".into(), Value::Num(f64::from(p.priority_tier)));
        f.insert("flag_default".into(), Value::Num(if default { 1.0 } else { 0.0 }));
        f.insert("max_nodes".into(), Value::Num(jobdesc::INFINITE));
        f.insert("min_nodes".into(), Value::Num(0.0));
        for (k, v) in [("allow_accounts", &p.allow_accounts), ("allow_qos", &p.allow_qos), ("allow_groups", &p.allow_groups)] {
            f.insert(k.into(), Value::Str(v.as_ref().map_or_else(|| "ALL".into(), |l| l.join(","))));
        }
        out.insert(p.name.clone(), f);
    }
    out
}

fn submitter(app: &App, uid: u32, user: &str) -> Submitter {
    let default_account = app.lock().ctl.settings().cluster.default_account(user);
    Submitter { uid, gid: crate::app::primary_gid(uid), user: user.to_string(), default_account, default_qos: None }
}

/// The answer's refusal: Slurm's words for its code, and its message to the user.
fn refusal(rc: i64, user_msg: Vec<String>) -> Response {
    let msg = (!user_msg.is_empty()).then(|| user_msg.join("\n"));
    refused_with(StatusCode::BAD_REQUEST, jobdesc::return_code_text(rc), msg)
}

/// Runs `slurm_job_submit` on a submission: `b` and its exported environment `env` (batch
/// jobs' alone are given to the script, as Slurm's) are changed as the script set them.
/// Returns the script's messages to the user; a refusal is the reply to send.
pub(crate) async fn on_submit(
    app: &App,
    uid: u32,
    user: &str,
    b: &mut BatchSpec,
    mut env: Option<&mut Vec<(String, String)>>,
    work_dir: &str,
) -> Result<Option<String>, Response> {
    if !app.hook.enabled().await {
        return Ok(None);
    }
    let call = Call {
        kind: CallKind::Submit,
        job_desc: jobdesc::job_desc(b, work_dir, &submitter(app, uid, user)),
        environment: env.as_ref().map(|e| e.iter().cloned().collect()),
        job_rec: None,
        part_list: part_list(app, uid),
        uid,
    };
    let answer = match app.hook.call(&call).await {
        Ok(Some(a)) => a,
        Ok(None) => return Ok(None),
        Err(e) => return Err(err(StatusCode::SERVICE_UNAVAILABLE, e.user)),
    };
    if answer.rc != 0 {
        return Err(refusal(answer.rc, answer.user_msg));
    }
    let now = crate::app::now();
    match jobdesc::apply(b, &answer.set, now) {
        Ok(notes) => {
            for n in notes {
                tracing::warn!("job_submit/lua: {}", slurmcli::visible(&n));
            }
        }
        Err(e) => {
            tracing::warn!("job_submit/lua: {}", slurmcli::visible(&e.0));
            return Err(err(StatusCode::BAD_REQUEST, format!("the site's job submit policy set a value that is refused: {}", e.0)));
        }
    }
    for (k, v) in &answer.env_set {
        let Some(env) = env.as_deref_mut() else { break };
        env.retain(|(n, _)| n != k);
        if let Some(v) = v {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return Err(err(StatusCode::BAD_REQUEST, format!("the site's job submit policy set an invalid variable {k:?}")));
            }
            env.push((k.clone(), v.clone()));
        }
    }
    Ok((!answer.user_msg.is_empty()).then(|| answer.user_msg.join("\n")))
}

/// Runs `slurm_job_modify` for a change of job `id` by `uid`: `desc` holds the fields the
/// request changes (Slurm's names). Returns the fields as the script left them.
pub(crate) async fn on_modify(app: &App, uid: u32, id: u64, desc: Fields) -> Result<Fields, Response> {
    if !app.hook.enabled().await {
        return Ok(desc);
    }
    let (rec, owner) = {
        let g = app.lock();
        let Some(j) = g.ctl.job(id) else { return Ok(desc) };
        // Only a change the caller may make reaches the script (the controller refuses the
        // others, and the script never sees another user's job for them).
        if j.spec.uid != uid && !g.ctl.is_operator(uid) {
            return Ok(desc);
        }
        (job_rec(&j), j.spec.uid)
    };
    let call = Call {
        kind: CallKind::Modify,
        job_desc: desc.clone(),
        environment: None,
        job_rec: Some(rec),
        part_list: part_list(app, owner),
        uid,
    };
    let answer = match app.hook.call(&call).await {
        Ok(Some(a)) => a,
        Ok(None) => return Ok(desc),
        Err(e) => return Err(err(StatusCode::SERVICE_UNAVAILABLE, e.user)),
    };
    if answer.rc != 0 {
        return Err(refusal(answer.rc, answer.user_msg));
    }
    if !answer.user_msg.is_empty() {
        // As Slurm's: log_user in job_modify reaches no one.
        tracing::warn!("job_submit/lua: log_user() in slurm_job_modify is not supported; message discarded");
    }
    let mut out = desc;
    out.extend(answer.set);
    Ok(out)
}

/// An unlimited time limit in seconds (as `scontrol update TimeLimit=UNLIMITED` sends it).
const UNLIMITED: model::Time = model::Time::MAX / 4;

/// `scontrol update` (a time limit), `hold` and `release` of job `id` through
/// `slurm_job_modify`: the job's new time limit as the script left it (seconds; `None` for a
/// hold or release), or the refusal to send.
pub(crate) async fn on_change(
    app: &App,
    uid: u32,
    id: u64,
    action: &str,
    limit: Option<model::Time>,
) -> Result<Option<model::Time>, Response> {
    let mut desc = Fields::new();
    match (action, limit) {
        ("update", Some(t)) => {
            let m = if t >= UNLIMITED { jobdesc::INFINITE } else { (t.max(0) as f64 / 60.0).ceil() };
            desc.insert("time_limit".into(), Value::Num(m));
        }
        ("hold", _) => {
            desc.insert("priority".into(), Value::Num(0.0));
        }
        ("release", _) => {
            desc.insert("priority".into(), Value::Num(jobdesc::INFINITE));
        }
        _ => return Ok(limit),
    }
    let out = on_modify(app, uid, id, desc).await?;
    if action != "update" {
        return Ok(None);
    }
    match out.get("time_limit") {
        Some(Value::Num(m)) if *m == jobdesc::INFINITE => Ok(Some(UNLIMITED)),
        Some(Value::Num(m)) if m.is_finite() && *m >= 0.0 && m.fract() == 0.0 && *m < 1e9 => {
            // The script's value when it changed the minutes; the request's own seconds else.
            let given = limit.map(|t| (t.max(0) as f64 / 60.0).ceil());
            Ok(if given == Some(*m) { limit } else { Some(*m as model::Time * 60) })
        }
        Some(v) => Err(err(StatusCode::BAD_REQUEST, format!("the site's job submit policy set an invalid time_limit {v:?}"))),
        None => Ok(limit),
    }
}

/// A job as `slurm_job_modify`'s `job_rec` shows it (Slurm's field names and units).
fn job_rec(j: &control::Job) -> Fields {
    let mut f = Fields::new();
    let mut num = |k: &str, v: f64| {
        f.insert(k.into(), Value::Num(v));
    };
    num("job_id", j.req.id.0 as f64);
    num("user_id", f64::from(j.spec.uid));
    num("group_id", f64::from(j.spec.gid));
    num("time_limit", if j.req.time_limit >= model::Time::MAX / 8 { jobdesc::INFINITE } else { (j.req.time_limit as f64 / 60.0).ceil() });
    num("submit_time", j.req.submit_time as f64);
    num("start_time", j.start.unwrap_or(0) as f64);
    num("end_time", j.end.unwrap_or(0) as f64);
    num("restart_cnt", f64::from(j.restart_count));
    num("min_nodes", f64::from(j.req.shape.nodes_min));
    num("max_nodes", f64::from(j.req.shape.nodes_max));
    num("nice", jobdesc::NICE_OFFSET + f64::from(j.req.nice));
    // Slurm's job_state numbers: PENDING 0, RUNNING 1, SUSPENDED 2, COMPLETE 3, CANCELLED 4,
    // FAILED 5, TIMEOUT 6, NODE_FAIL 7, OOM 11.
    num(
        "job_state",
        match j.state {
            model::JobState::Pending => 0.0,
            model::JobState::Running => 1.0,
            model::JobState::Suspended => 2.0,
            model::JobState::Completed => 3.0,
            model::JobState::Cancelled => 4.0,
            model::JobState::Failed => 5.0,
            model::JobState::Timeout => 6.0,
            model::JobState::NodeFail => 7.0,
            model::JobState::OutOfMemory => 11.0,
        },
    );
    let mut text = |k: &str, v: &str| {
        if !v.is_empty() {
            f.insert(k.into(), Value::Str(v.into()));
        }
    };
    text("user_name", &j.req.user);
    text("account", &j.req.account);
    text("name", &j.req.name);
    text("partition", j.req.partition.as_deref().unwrap_or(""));
    text("qos", j.req.qos.as_deref().unwrap_or(""));
    text("resv_name", j.req.reservation.as_deref().unwrap_or(""));
    text("work_dir", &j.spec.workdir);
    text("std_out", &j.spec.output);
    let nodes: Vec<String> = j.allocs.iter().map(|(n, _)| n.clone()).collect();
    text("nodes", &slurmcli::compress(&nodes));
    f
}

/// Runs `slurm_job_submit` once for a service's apply (not per replica): the script sees the
/// service as one request of `replicas` tasks, one per node's share, with its name, partition,
/// QOS, account and per-replica CPUs and GPUs; it may change the partition, QOS and account
/// (other changes are logged and ignored: a service's shape is its spec's), or refuse it.
pub(crate) async fn on_service(app: &App, uid: u32, user: &str, spec: &mut control::ServiceSpec) -> Result<Option<String>, Response> {
    if !app.hook.enabled().await {
        return Ok(None);
    }
    let q = |q: &Option<control::service::Quantity>| match q {
        Some(control::service::Quantity::Num(n)) if n.fract() == 0.0 && *n >= 0.0 => Some(format!("{n}")),
        Some(control::service::Quantity::Text(t)) => Some(t.clone()),
        _ => None,
    };
    // No script: a service is not a batch job (`job_desc.script` is nil, as for srun's).
    let mut b = BatchSpec::default();
    let now = crate::app::now();
    // What does not read as an option is the service's own check to refuse, later.
    let _ = b.set_option("job-name", Some(&spec.name), now);
    for (long, v) in [
        ("partition", spec.partition.clone()),
        ("qos", spec.qos.clone()),
        ("account", spec.account.clone()),
        ("ntasks", q(&spec.replicas)),
        ("cpus-per-task", q(&spec.resources.cpus)),
    ] {
        if let Some(v) = v {
            let _ = b.set_option(long, Some(&v), now);
        }
    }
    if let Some(n) = q(&spec.resources.gpus).filter(|n| n != "0") {
        let v = spec.resources.gpu_type.as_ref().map_or(n.clone(), |t| format!("{t}:{n}"));
        let _ = b.set_option("gpus-per-node", Some(&v), now);
    }
    let before = b.clone();
    let msg = on_submit(app, uid, user, &mut b, None, "/").await?;
    spec.partition = b.partition.clone();
    spec.qos = b.qos.clone();
    spec.account = b.account.clone();
    let (mut rest, mut was) = (b, before);
    for x in [&mut rest, &mut was] {
        x.partition = None;
        x.qos = None;
        x.account = None;
    }
    if rest != was {
        tracing::warn!("job_submit/lua: service {}: changes other than partition, qos and account are ignored", spec.name);
    }
    Ok(msg)
}

/// `scontrol reconfigure` (and SIGHUP): reads the configuration again, applies what can change
/// at once, and loads the job-submit script again. A configuration that does not parse changes
/// nothing; a script that does not load is reported (with its error: the caller is an
/// operator) and refuses submissions until it is fixed.
pub(crate) async fn reconfigure(app: &App) -> Result<wire::Reconfigured, String> {
    // One at a time (a command and a SIGHUP together), so the script loaded is the settings'.
    static ONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _turn = ONE.lock().await;
    let source = app.source.clone();
    let read = tokio::task::spawn_blocking(move || source.read()).await.map_err(|e| e.to_string())?;
    let (new, _, _) = read.map_err(|e| format!("{e:#}; nothing was changed"))?;
    let (later, hook_cfg) = {
        let mut g = app.lock();
        let later = g.ctl.reconfigure(&new);
        *app.settings.write().unwrap_or_else(|p| p.into_inner()) = std::sync::Arc::new(g.ctl.settings().clone());
        (later, crate::hook::config_of(g.ctl.settings()))
    };
    if !later.is_empty() {
        tracing::info!("reconfigure: changed, in effect at the next start: {}", later.join(", "));
    }
    app.hook.configure(hook_cfg).await.map_err(|e| format!("the configuration was applied, but {}", e.detail))?;
    tracing::info!("reconfigured");
    Ok(wire::Reconfigured { restart_needed: later.into_iter().map(String::from).collect() })
}

/// Reopens the log file and reconfigures at each SIGHUP, as slurmctld does.
pub(crate) async fn reconfigure_on_sighup(app: App) {
    let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else { return };
    while hup.recv().await.is_some() {
        // The log file first (logrotate moved it), so what reconfiguring says lands in the new one.
        logging::reopen_at_sighup();
        if let Err(e) = reconfigure(&app).await {
            tracing::error!("reconfigure (SIGHUP): {e}");
        }
    }
}

async fn reconfigure_route(
    axum::extract::State(app): axum::extract::State<App>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<crate::app::Peer>,
    headers: axum::http::HeaderMap,
) -> Response {
    use axum::response::IntoResponse;
    let uid = or_reply!(crate::app::user_of(&app, &peer, &headers));
    if !app.lock().ctl.is_operator(uid) {
        return crate::app::refused(control::Refused::Forbidden("Invalid user id".into()));
    }
    match reconfigure(&app).await {
        Ok(r) => axum::Json(r).into_response(),
        Err(e) => err(StatusCode::BAD_REQUEST, e),
    }
}

/// `scontrol setdebug`: the controller's log filter, changed at once (operators).
async fn debug_route(
    axum::extract::State(app): axum::extract::State<App>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<crate::app::Peer>,
    headers: axum::http::HeaderMap,
    body: Result<axum::Json<wire::DebugLevel>, axum::extract::rejection::JsonRejection>,
) -> Response {
    use axum::response::IntoResponse;
    let uid = or_reply!(crate::app::user_of(&app, &peer, &headers));
    if !app.lock().ctl.is_operator(uid) {
        return crate::app::refused(control::Refused::Forbidden("Invalid user id".into()));
    }
    let req = or_reply!(crate::app::json_body(body));
    match logging::set_filter(&req.filter) {
        Ok(filter) => {
            tracing::info!(uid, filter = %filter, "log filter changed (scontrol setdebug)");
            axum::Json(wire::DebugLevel { filter }).into_response()
        }
        Err(e) => err(StatusCode::BAD_REQUEST, e.to_string()),
    }
}

/// `tandem admin backup`: a consistent copy of the database, taken while the controller goes on
/// committing, streamed to the caller (administrators: it holds every user's jobs). The copy is
/// made in the data directory (0600) and unlinked once open, so nothing is left behind.
async fn backup_route(
    axum::extract::State(app): axum::extract::State<App>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<crate::app::Peer>,
    headers: axum::http::HeaderMap,
) -> Response {
    use axum::response::IntoResponse;
    let uid = or_reply!(crate::app::user_of(&app, &peer, &headers));
    let user = crate::app::user_name(uid);
    if app.lock().ctl.admin_level(uid, &user) < model::AdminLevel::Administrator {
        return crate::app::refused(control::Refused::Forbidden("Invalid user id: only administrators take backups".into()));
    }
    let db = app.data.join("state.db");
    let dest = app.data.join(format!("backup-{}-{}.tmp", std::process::id(), crate::app::now_ms()));
    let taken = crate::app::now();
    let (db2, dest2) = (db.clone(), dest.clone());
    let made = tokio::task::spawn_blocking(move || {
        let r = store::backup(&db2, &dest2, taken).map_err(|e| e.to_string());
        let file = r.and_then(|()| std::fs::File::open(&dest2).map_err(|e| e.to_string()));
        // Open or not, the copy leaves the data directory now.
        let _ = std::fs::remove_file(&dest2);
        file
    })
    .await;
    let file = match made {
        Ok(Ok(f)) => f,
        Ok(Err(e)) => return err(StatusCode::INTERNAL_SERVER_ERROR, format!("taking the backup: {e}")),
        Err(e) => return err(StatusCode::INTERNAL_SERVER_ERROR, format!("taking the backup: {e}")),
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    tracing::info!(uid, bytes = len, "backup taken (tandem admin backup)");
    let stream = tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(file));
    (
        [(axum::http::header::CONTENT_TYPE, "application/vnd.sqlite3".to_string()), (axum::http::header::CONTENT_LENGTH, len.to_string())],
        axum::body::Body::from_stream(stream),
    )
        .into_response()
}

/// The routes of site administration.
pub(crate) fn routes(r: axum::Router<App>) -> axum::Router<App> {
    r.route("/v1/reconfigure", axum::routing::post(reconfigure_route))
        .route("/v1/debug", axum::routing::post(debug_route))
        .route("/v1/backup", axum::routing::get(backup_route))
}
