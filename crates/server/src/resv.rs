//! The advance reservations API (`scontrol create|update|delete|show reservation`, `sinfo -T`):
//! anyone may list them; operators and administrators (root always) change them, which the
//! controller checks. Named users must exist on this host (Slurm's `Invalid user id`).

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use control::Controller;
use slurmcli::resv::{ListOp, ResvSpec};
use wire::{ResvCreated, ResvInfo};

use crate::app::{App, Peer, err, json_body, now, path, refused, user_of, viewer_of};

/// Every reservation as `scontrol show reservation` lists it.
pub(crate) fn infos(ctl: &Controller, t: i64) -> Vec<ResvInfo> {
    ctl.reservations()
        .map(|r| {
            let (mut cpus, mut gpus) = (0u32, 0u32);
            for rec in r.nodes.iter().filter_map(|n| ctl.node_rec(n)) {
                cpus = cpus.saturating_add(rec.node.cpus);
                gpus = gpus.saturating_add(rec.node.gpus);
            }
            let (start, end) = r.window(t).unwrap_or((r.start, r.end));
            ResvInfo { active: start <= t && t < end, start, end, cpus, gpus, resv: r.clone() }
        })
        .collect()
}

async fn list(State(app): State<App>, ConnectInfo(peer): ConnectInfo<Peer>, headers: HeaderMap) -> Response {
    or_reply!(viewer_of(&app, &peer, &headers));
    let g = app.lock();
    Json(infos(&g.ctl, now())).into_response()
}

/// Users named to be allowed must exist here (a negated list may name anyone). Asked only of
/// operators (others are refused first, as the controller would), for a bounded list, off the
/// async threads (each name is a passwd lookup).
async fn check_users(app: &App, uid: u32, spec: &ResvSpec) -> Result<(), Response> {
    let Some(u) = spec.users.clone().filter(|u| !u.negated && u.op != ListOp::Remove) else { return Ok(()) };
    if !app.lock().ctl.is_operator(uid) {
        return Err(refused(control::Refused::Forbidden("Invalid user id".into())));
    }
    if u.names.len() > slurmcli::resv::MAX_RESV_NAMES {
        return Err(err(StatusCode::BAD_REQUEST, format!("Invalid Users value: at most {} names", slurmcli::resv::MAX_RESV_NAMES)));
    }
    let missing =
        tokio::task::spawn_blocking(move || u.names.into_iter().find(|n| nix::unistd::User::from_name(n).ok().flatten().is_none()))
            .await
            .map_err(|_| err(StatusCode::INTERNAL_SERVER_ERROR, "looking users up failed"))?;
    match missing {
        Some(bad) => {
            Err(err(StatusCode::BAD_REQUEST, format!("Invalid user id: no user {} on the controller's host", slurmcli::visible(&bad))))
        }
        None => Ok(()),
    }
}

async fn create(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    body: Result<Json<ResvSpec>, JsonRejection>,
) -> Response {
    let uid = or_reply!(user_of(&app, &peer, &headers));
    let spec = or_reply!(json_body(body));
    or_reply!(check_users(&app, uid, &spec).await);
    match app.with(|c| c.create_reservation(now(), uid, &spec)).await {
        Ok(Ok(name)) => {
            app.wake.notify_one();
            Json(ResvCreated { name }).into_response()
        }
        Ok(Err(e)) => refused(e),
        Err(r) => r,
    }
}

async fn update(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    name: Result<Path<String>, PathRejection>,
    body: Result<Json<ResvSpec>, JsonRejection>,
) -> Response {
    let uid = or_reply!(user_of(&app, &peer, &headers));
    let name = or_reply!(path(name));
    let mut spec = or_reply!(json_body(body));
    spec.name = Some(name);
    or_reply!(check_users(&app, uid, &spec).await);
    match app.with(|c| c.update_reservation(now(), uid, &spec)).await {
        Ok(Ok(())) => {
            app.wake.notify_one();
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(Err(e)) => refused(e),
        Err(r) => r,
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
    match app.with(|c| c.delete_reservation(uid, &name)).await {
        Ok(Ok(())) => {
            app.wake.notify_one();
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(Err(e)) => refused(e),
        Err(r) => r,
    }
}

pub(crate) fn routes(r: Router<App>) -> Router<App> {
    r.route("/v1/reservations", get(list).post(create)).route("/v1/reservations/{name}", post(update).delete(delete))
}
