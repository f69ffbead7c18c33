//! Node and proxy identity (SECURITY.md, N1): single-use join tokens, the credentials they are
//! spent on, proxy credentials, and node deletion, which revokes a node's credential; and
//! nodes' reboots (`scontrol reboot`, `cancel_reboot`: administrators).
//!
//! A node's credential is a token signed with the controller's `DATA/nodes.key` naming the node
//! and a serial; the controller accepts it while it holds that serial for that name. It is sent
//! as a bearer token over the one TLS connection each agent keeps, rather than as a client
//! certificate: the simulated agents of `tandem bench agents` share connections, as a real
//! deployment's agents behind a gateway may, and revocation is a row deleted, not a CRL.

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, post};
use axum::{Json, Router};
use control::creds::Holder;
use wire::{Credential, JoinRequest, JoinTokens, JoinTokensRequest, MAX_JOIN_TOKENS, ProxyCredentialRequest};

use crate::app::{App, Peer, admin_of, bearer, err, json_body, now, refused};

/// Longest a join token may be valid: 30 days.
const MAX_JOIN_LIFETIME: i64 = 30 * 86400;

/// `POST /v1/join-tokens`: single-use join tokens (an administrator only).
async fn join_tokens(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    body: Result<Json<JoinTokensRequest>, JsonRejection>,
) -> Response {
    or_reply!(admin_of(&app, &peer, &headers));
    let r = or_reply!(json_body(body));
    let count = r.count.unwrap_or(1);
    if !(1..=MAX_JOIN_TOKENS).contains(&count) {
        return err(StatusCode::BAD_REQUEST, format!("count must be between 1 and {MAX_JOIN_TOKENS}"));
    }
    let life = r.lifetime.unwrap_or(3600);
    if !(1..=MAX_JOIN_LIFETIME).contains(&life) {
        return err(StatusCode::BAD_REQUEST, "lifetime must be between 1 s and 30 days");
    }
    let t = now();
    let expires = t + life;
    let ids = match crate::private::random_hex(16 * count as usize) {
        Ok(hex) => hex,
        Err(e) => return err(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")),
    };
    let tokens = (0..count as usize).map(|i| app.nodes.join_token(&ids[32 * i..32 * (i + 1)], t, expires)).collect();
    Json(JoinTokens { tokens, expires }).into_response()
}

/// `POST /v1/agent/join`: spends a join token on a credential for a node name. Answered once
/// the spending is durable, so a token is never spent twice, even across a crash.
async fn join(State(app): State<App>, headers: HeaderMap, body: Result<Json<JoinRequest>, JsonRejection>) -> Response {
    let t = now();
    let Some((jti, exp)) = bearer(&headers).and_then(|tok| app.nodes.verify_join(tok, t)) else {
        return err(StatusCode::UNAUTHORIZED, "joining needs a valid, unexpired join token (from `tandem token --join`)");
    };
    let r = or_reply!(json_body(body));
    match app.with(|c| c.join(t, &jti, exp, &r.name)).await {
        Ok(Ok(serial)) => {
            tracing::info!("node {} joined", r.name);
            Json(Credential { credential: app.nodes.credential(false, &r.name, serial, t) }).into_response()
        }
        Ok(Err(e)) => refused(e),
        Err(r) => r,
    }
}

/// `POST /v1/proxy-credentials`: a credential for an inference proxy (an administrator only).
async fn proxy_credential(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    body: Result<Json<ProxyCredentialRequest>, JsonRejection>,
) -> Response {
    or_reply!(admin_of(&app, &peer, &headers));
    let r = or_reply!(json_body(body));
    match app.with(|c| c.issue_proxy_credential(&r.name)).await {
        Ok(Ok(serial)) => Json(Credential { credential: app.nodes.credential(true, &r.name, serial, now()) }).into_response(),
        Ok(Err(e)) => refused(e),
        Err(r) => r,
    }
}

/// `DELETE /v1/nodes/{name}` (`scontrol delete NodeName=`, `tandem node delete`): removes the
/// node and revokes its credential (an administrator only).
async fn delete_node(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    name: Result<Path<String>, PathRejection>,
) -> Response {
    or_reply!(admin_of(&app, &peer, &headers));
    let name = match name {
        Ok(Path(n)) => n,
        Err(e) => return err(StatusCode::BAD_REQUEST, format!("malformed path: {}", e.body_text())),
    };
    match app.with(|c| c.delete_node(&name)).await {
        Ok(Ok(())) => {
            // Its agent's held heartbeat ends now, and is refused.
            if let Some(n) = app.node_wake.lock().expect("lock").remove(&name) {
                n.notify_waiters();
            }
            tracing::info!("node {name} deleted, its credential revoked");
            app.wake.notify_one();
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(Err(e)) => refused(e),
        Err(r) => r,
    }
}

/// A request's node list (a hostlist, or `ALL`), bounded.
fn node_list(nodes: &str) -> Result<Vec<String>, Response> {
    if nodes.trim().eq_ignore_ascii_case("ALL") {
        return Ok(vec!["ALL".into()]);
    }
    if nodes.trim().is_empty() {
        return Err(err(StatusCode::BAD_REQUEST, "Missing node list. Specify ALL|<NodeList>"));
    }
    slurmcli::expand(nodes.trim(), 100_000).map_err(|e| err(StatusCode::BAD_REQUEST, format!("Invalid node name specified: {}", e.0)))
}

/// `POST /v1/reboot`: `scontrol reboot` (administrators, as Slurm's super users).
async fn reboot(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    body: Result<Json<wire::RebootRequest>, JsonRejection>,
) -> Response {
    let uid = or_reply!(crate::app::user_of(&app, &peer, &headers));
    let r = or_reply!(json_body(body));
    let names = or_reply!(node_list(&r.nodes));
    let next = match r.next_state.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None => None,
        Some("resume") => Some(control::reboot::NextState::Resume),
        Some("down") => Some(control::reboot::NextState::Down),
        Some(other) => {
            return err(StatusCode::BAD_REQUEST, format!("Invalid state: {}\nValid states: DOWN, RESUME", slurmcli::visible(other)));
        }
    };
    let user = crate::app::user_name(uid);
    match app.with(|c| c.reboot_nodes(uid, &user, &names, r.asap, next, r.reason)).await {
        Ok(Ok(())) => {
            app.wake.notify_one();
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(Err(e)) => refused(e),
        Err(r) => r,
    }
}

/// `POST /v1/reboot/cancel`: `scontrol cancel_reboot` (administrators).
async fn cancel_reboot(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    body: Result<Json<wire::CancelRebootRequest>, JsonRejection>,
) -> Response {
    let uid = or_reply!(crate::app::user_of(&app, &peer, &headers));
    let r = or_reply!(json_body(body));
    let names = or_reply!(node_list(&r.nodes));
    let user = crate::app::user_name(uid);
    match app.with(|c| c.cancel_reboot(uid, &user, &names)).await {
        Ok(Ok(())) => {
            app.wake.notify_one();
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(Err(e)) => refused(e),
        Err(r) => r,
    }
}

/// Whether a proxy's request carries a valid proxy credential.
pub(crate) fn proxy_ok(app: &App, headers: &HeaderMap) -> Result<(), Response> {
    let (name, serial) = crate::app::credential_of(app, headers, true)?;
    let g = app.lock();
    crate::app::check_serial(&g.ctl, Holder::Proxy, &name, serial).map_err(refused)
}

pub(crate) fn routes(r: Router<App>) -> Router<App> {
    r.route("/v1/join-tokens", post(join_tokens))
        .route("/v1/agent/join", post(join))
        .route("/v1/proxy-credentials", post(proxy_credential))
        .route("/v1/nodes/{name}", delete(delete_node))
        .route("/v1/reboot", post(reboot))
        .route("/v1/reboot/cancel", post(cancel_reboot))
}
