//! The service half of the API: apply, list, show, scale, undo and delete services, and the
//! proxies' long poll for endpoints (`/v1/proxy/sync`). Also the service loop, which runs the
//! controller's service work (failover, draining, autoscaling, reconciliation) a few times a
//! second.

use axum::extract::rejection::PathRejection;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use control::Controller;
use std::time::Duration;
use wire::{ApplyRequest, ApplyResponse, ProxySync, ReplicaRow, ServiceAction, ServiceInfo};

use crate::app::*;

/// Converts a service for display to `v`: another user's environment values, arguments and
/// tenant API keys are hidden from it.
pub(crate) fn service_info(c: &Controller, s: &control::Service, v: &Viewer) -> ServiceInfo {
    let mut replicas = Vec::new();
    let (mut ready, mut updated_ready) = (0, 0);
    for j in c.replicas_of(&s.spec.name) {
        let r = j.replica.as_ref().expect("replica");
        if j.state.is_final() {
            continue;
        }
        if r.state == model::ReplicaState::Ready {
            ready += 1;
            if r.revision == s.revision {
                updated_ready += 1;
            }
        }
        let node = j.allocs.first().map(|(n, _)| n.clone());
        let addr =
            node.as_ref().and_then(|n| c.nodes().iter().find(|x| &x.node.name == n)).zip(r.port).map(|(n, p)| format!("{}:{p}", n.addr));
        let out = slurmcli::expand_pattern(&j.spec.output, j.req.id.0, &j.req.name, None, node.as_deref().unwrap_or(""), &j.req.user);
        let log = if out.starts_with('/') { out } else { format!("{}/{out}", j.spec.workdir.trim_end_matches('/')) };
        replicas.push(ReplicaRow {
            id: control::replica_id(&s.spec.name, j.req.id.0),
            job: j.req.id.0,
            state: r.state.name().into(),
            revision: r.revision,
            node,
            addr,
            restarts: r.restarts,
            message: r.message.clone(),
            reason: if j.state == model::JobState::Pending { j.reason.to_string() } else { String::new() },
            log,
        });
    }
    ServiceInfo {
        name: s.spec.name.clone(),
        user: s.user.clone(),
        revision: s.revision,
        history: s.history.iter().map(|(n, _)| *n).collect(),
        desired: s.desired,
        ready,
        updated_ready,
        replicas,
        deleting: s.deleting,
        scale_log: s.scale_log.clone(),
        stats: c.proxy_stats(&s.spec.name),
        spec: if v.sees_details(s.uid) { s.spec.clone() } else { hide(&s.spec) },
    }
}

/// A spec with its environment's values, its arguments and its tenants' API keys hidden.
pub(crate) fn hide(spec: &control::ServiceSpec) -> control::ServiceSpec {
    let mut out = spec.clone();
    for v in out.env.values_mut() {
        *v = HIDDEN.into();
    }
    for a in &mut out.args {
        *a = HIDDEN.into();
    }
    for t in out.proxy.tenants.values_mut() {
        for k in &mut t.keys {
            *k = HIDDEN.into();
        }
    }
    // A volume's files may be a Secret's.
    for f in out.volumes.iter_mut().flat_map(|v| v.files.iter_mut()) {
        f.base64 = HIDDEN.into();
    }
    out
}

async fn apply(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    body: Result<Json<ApplyRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let uid = or_reply!(user_of(&app, &peer, &headers));
    let req: ApplyRequest = or_reply!(json_body(body));
    match apply_spec(&app, uid, req.spec, &req.cwd, req.umask, None).await {
        Ok(r) => Json(r).into_response(),
        Err(r) => r,
    }
}

/// Applies a service spec for `uid` from directory `cwd`: the site's policy, the partition's
/// groups, then the controller; records the Kubernetes object it was written as (`kube`: `None`
/// for a Tandem spec).
pub(crate) async fn apply_spec(
    app: &App,
    uid: u32,
    mut spec: control::ServiceSpec,
    cwd: &str,
    umask: Option<u32>,
    kube: Option<serde_json::Value>,
) -> Result<ApplyResponse, Response> {
    let user = user_name(uid);
    // The site's policy once per apply; what it leaves is checked as any spec.
    let user_msg = crate::policy::on_service(app, uid, &user, &mut spec).await?;
    crate::app::check_groups(app, uid, spec.partition.as_deref())?;
    let gid = primary_gid(uid);
    let name = spec.name.clone();
    let t = now_ms();
    let r = app
        .with(|c| {
            c.apply_service(t, uid, gid, &user, cwd, spec).inspect(|_| {
                c.set_service_umask(&name, umask);
                c.set_service_kube(&name, kube);
            })
        })
        .await?;
    match r {
        Ok((revision, changed)) => {
            app.service_wake.notify_one();
            Ok(ApplyResponse { name, revision, changed, user_msg })
        }
        Err(e) => Err(refused(e)),
    }
}

async fn list(State(app): State<App>, ConnectInfo(peer): ConnectInfo<Peer>, headers: HeaderMap) -> Response {
    let v = or_reply!(viewer_of(&app, &peer, &headers));
    let (out, seq) = {
        let g = app.lock();
        (g.ctl.services().filter(|s| v.sees(s.uid)).map(|s| service_info(&g.ctl, s, &v)).collect::<Vec<ServiceInfo>>(), app.journal.last())
    };
    // Show nothing a crash could undo.
    or_reply!(app.settled(seq).await);
    Json(out).into_response()
}

async fn show(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    name: Result<Path<String>, PathRejection>,
) -> Response {
    let v = or_reply!(viewer_of(&app, &peer, &headers));
    let name = or_reply!(path(name));
    let (out, seq) = {
        let g = app.lock();
        (g.ctl.service(&name).filter(|s| v.sees(s.uid)).map(|s| service_info(&g.ctl, s, &v)), app.journal.last())
    };
    or_reply!(app.settled(seq).await);
    match out {
        Some(s) => Json(s).into_response(),
        None => err(StatusCode::NOT_FOUND, format!("no service named {name}")),
    }
}

async fn delete(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    name: Result<Path<String>, PathRejection>,
) -> Response {
    let uid = or_reply!(user_of(&app, &peer, &headers));
    let name = or_reply!(path(name));
    match or_reply!(app.with(|c| c.delete_service(uid, &name)).await) {
        Ok(()) => {
            app.service_wake.notify_one();
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => refused(e),
    }
}

async fn action(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    name: Result<Path<String>, PathRejection>,
    body: Result<Json<ServiceAction>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let uid = or_reply!(user_of(&app, &peer, &headers));
    let name = or_reply!(path(name));
    let a = or_reply!(json_body(body));
    let t = now_ms();
    let r = or_reply!(
        app.with(|c| match a {
            ServiceAction::Scale { replicas } => c.scale_service(t, uid, &name, replicas).map(|_| None),
            ServiceAction::Undo { revision } => c.undo_service(t, uid, &name, revision).map(Some),
        })
        .await
    );
    match r {
        Ok(rev) => {
            app.service_wake.notify_one();
            Json(serde_json::json!({ "name": name, "revision": rev })).into_response()
        }
        Err(e) => refused(e),
    }
}

/// `POST /v1/proxy/sync`: records the proxy's gauges, then answers with the endpoint view at
/// once when it is newer than the proxy's, else when it changes or `wait_ms` passes.
async fn proxy_sync(
    State(app): State<App>,
    headers: HeaderMap,
    body: Result<Json<ProxySync>, axum::extract::rejection::JsonRejection>,
) -> Response {
    or_reply!(crate::nodes::proxy_ok(&app, &headers));
    let s = or_reply!(json_body(body));
    if s.proxy.is_empty() || s.proxy.len() > 256 {
        return err(StatusCode::BAD_REQUEST, "proxy must name the proxy (1 to 256 characters)");
    }
    let mut rx = app.ep_watch.subscribe();
    let had_waiting = s.services.values().any(|x| x.waiting > 0);
    let view = {
        let mut g = app.lock();
        g.ctl.proxy_sync(now_ms(), &s.proxy, s.since, s.services)
    };
    if had_waiting {
        // Requests are held for want of a replica: scale from zero now, not at the next round.
        app.service_wake.notify_one();
    }
    if view.version > s.since || s.wait_ms == 0 {
        return Json(view).into_response();
    }
    let _ = tokio::time::timeout(Duration::from_millis(s.wait_ms.min(30_000)), rx.changed()).await;
    let view = app.lock().ctl.endpoint_view();
    Json(view).into_response()
}

pub(crate) fn routes(r: Router<App>) -> Router<App> {
    r.route("/v1/services", post(apply).get(list))
        .route("/v1/services/{name}", get(show).delete(delete).post(action))
        .route("/v1/proxy/sync", post(proxy_sync))
}

/// The service loop: a few times a second (and at once when woken), the controller's service
/// work; a scheduling pass follows when it created replicas.
pub(crate) async fn service_loop(app: App) {
    loop {
        let _ = tokio::time::timeout(Duration::from_millis(200), app.service_wake.notified()).await;
        let t = now_ms();
        match app.with(|c| c.services_tick(t)).await {
            Ok(n) if n > 0 => app.wake.notify_one(),
            Ok(_) => {}
            Err(_) => tracing::error!("failed to persist after a service round"),
        }
        app.wake_nodes();
    }
}
