//! A task's output, fetched from its node for `kubectl logs` (`kube`): the controller orders
//! the node's agent to read it ([`control::Order::Output`], with a number and a fresh key),
//! and the agent sends it on a connection of its own, `POST /v1/agent/output/ID` with its
//! node credential and the key, as it reads it; the controller passes that body on to the
//! client as it comes, and answers the agent once the client has it all or went away.

use axum::Router;
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::oneshot;

use crate::app::*;

pub(crate) fn routes(r: Router<App>) -> Router<App> {
    r.route("/v1/agent/output/{id}", post(upload)).route("/v1/jobs/{id}/output", axum::routing::get(job_output))
}

/// How long the controller waits for a node to start sending.
const ANSWER_WITHIN: Duration = Duration::from_secs(15);

/// The most an agent's account of why it could not read may hold.
const MAX_FAILURE: usize = 16 << 10;

/// Why a fetch failed, for the client.
pub(crate) enum FetchError {
    /// The controller refused (who may read it, where it is).
    Refused(control::Refused),
    /// The node did not answer, or could not read.
    Node(String),
}

/// What [`fetch`] reads.
pub(crate) struct Want {
    pub(crate) follow: bool,
    pub(crate) tail_lines: Option<u64>,
    pub(crate) limit_bytes: Option<u64>,
}

/// Fetches job `job`'s output from `node` (its first node when `None`) for user `uid`: the
/// body streams as the node sends it.
pub(crate) async fn fetch(app: &App, uid: u32, job: u64, node: Option<&str>, want: Want) -> Result<Body, FetchError> {
    let key = crate::private::random_hex(32).map_err(|e| FetchError::Node(format!("{e:#}")))?;
    let id = app.outputs.next.fetch_add(1, Ordering::Relaxed) + 1;
    let (tx, rx) = oneshot::channel();
    let ordered = app.apply(|c| {
        let out = c.task_output(uid, job, node)?;
        let read = control::OutputRead {
            id,
            key: key.clone(),
            files: out.files,
            uid: out.uid,
            gid: out.gid,
            follow: want.follow && out.running,
            tail_lines: want.tail_lines,
            limit_bytes: want.limit_bytes,
        };
        c.order_output(&out.node, out.job, out.epoch, read);
        Ok::<_, control::Refused>(out.node)
    });
    let node = match ordered {
        (Ok(n), _) => n,
        (Err(e), _) => return Err(FetchError::Refused(e)),
    };
    app.outputs.waiting.lock().expect("outputs lock").insert(id, OutputWaiting { node: node.clone(), key, to: tx });
    app.wake_nodes();
    let got = tokio::time::timeout(ANSWER_WITHIN, rx).await;
    app.outputs.waiting.lock().expect("outputs lock").remove(&id);
    match got {
        Ok(Ok(OutputSent::Output(body, done))) => Ok(Body::new(Relay { inner: body, _done: done })),
        Ok(Ok(OutputSent::Failed(why))) => Err(FetchError::Node(why)),
        Ok(Err(_)) | Err(_) => Err(FetchError::Node(format!(
            "node {node} did not send the output within {} s (is its agent running?)",
            ANSWER_WITHIN.as_secs()
        ))),
    }
}

/// The node's body passed on; dropping it (the end, or the client gone) lets the node's
/// request be answered.
struct Relay {
    inner: Body,
    _done: oneshot::Sender<()>,
}

impl hyper::body::Body for Relay {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}

/// Whether two secrets are equal, in a time that does not depend on where they differ.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// `GET /v1/jobs/ID/output?tail=N&limit=B&follow=true&node=NODE`: a job's output, as its node
/// reads it (`tandem service logs`; `kubectl logs` is the same through `kube`).
async fn job_output(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    id: Result<Path<u64>, PathRejection>,
    q: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Response {
    let uid = or_reply!(user_of(&app, &peer, &headers));
    let Ok(Path(id)) = id else { return err(StatusCode::BAD_REQUEST, "a job id is an unsigned integer") };
    let Ok(Query(q)) = q else { return err(StatusCode::BAD_REQUEST, "malformed query") };
    let number = |k: &str| -> Result<Option<u64>, Response> {
        q.get(k)
            .map(|x| x.parse::<u64>().map_err(|_| err(StatusCode::BAD_REQUEST, format!("{k}: {x:?} is not an unsigned integer"))))
            .transpose()
    };
    let (tail_lines, limit_bytes) = (or_reply!(number("tail")), or_reply!(number("limit")));
    if limit_bytes == Some(0) {
        return err(StatusCode::BAD_REQUEST, "limit: at least 1 byte");
    }
    let follow = q.get("follow").is_some_and(|v| v == "true" || v == "1");
    match fetch(&app, uid, id, q.get("node").map(String::as_str).filter(|n| !n.is_empty()), Want { follow, tail_lines, limit_bytes }).await
    {
        Ok(body) => {
            let mut r = Response::new(body);
            r.headers_mut().insert("content-type", axum::http::HeaderValue::from_static("text/plain"));
            r
        }
        Err(FetchError::Refused(e)) => refused(e),
        Err(FetchError::Node(why)) => err(StatusCode::INTERNAL_SERVER_ERROR, why),
    }
}

/// `POST /v1/agent/output/ID`: a node's answer to [`control::Order::Output`].
async fn upload(
    State(app): State<App>,
    headers: HeaderMap,
    id: Result<Path<u64>, axum::extract::rejection::PathRejection>,
    body: Body,
) -> Response {
    let (cred, serial) = or_reply!(node_serial(&app, &headers));
    let Ok(Path(id)) = id else { return err(StatusCode::BAD_REQUEST, "an output's number is an unsigned integer") };
    let valid = app.lock().ctl.credentials().valid(control::creds::Holder::Node, &cred, serial);
    if !valid {
        return err(StatusCode::UNAUTHORIZED, format!("the credential of {cred} has been revoked"));
    }
    let key = headers.get("x-tandem-output-key").and_then(|v| v.to_str().ok()).unwrap_or("");
    let w = {
        let mut waiting = app.outputs.waiting.lock().expect("outputs lock");
        match waiting.get(&id) {
            // The node asked and the key are checked before the request is taken, so another
            // node (or a guess) cannot take it away from the one that holds the output.
            Some(w) if w.node == cred && same_secret(&w.key, key) => waiting.remove(&id),
            Some(w) if w.node != cred => {
                return err(StatusCode::FORBIDDEN, format!("output {id} was asked of node {}, not of {cred}", w.node));
            }
            Some(_) => return err(StatusCode::FORBIDDEN, format!("wrong key for output {id}")),
            None => None,
        }
    };
    let Some(w) = w else { return err(StatusCode::NOT_FOUND, format!("no output {id} is waited for (its client went away)")) };
    if headers.contains_key("x-tandem-output-failed") {
        let why = axum::body::to_bytes(body, MAX_FAILURE).await.unwrap_or_default();
        let _ = w.to.send(OutputSent::Failed(slurmcli::visible(&String::from_utf8_lossy(&why)).into_owned()));
        return StatusCode::NO_CONTENT.into_response();
    }
    let (done, gone) = oneshot::channel();
    if w.to.send(OutputSent::Output(body, done)).is_err() {
        return err(StatusCode::NOT_FOUND, format!("output {id}'s client went away"));
    }
    // Answered once the client has it all, or no longer wants it.
    let _ = gone.await;
    StatusCode::NO_CONTENT.into_response()
}
