//! Streams that survive the loss of their replica (`resume_streams`), the IO part. The answer
//! to a resumable request (`resume::Plan`) that is a stream (200, `text/event-stream`, no
//! declared length) is not piped to the client but driven by a task: it reads the replica's
//! events, sends the client each whole one (`resume::Tracker` follows and, after a resume,
//! rewrites them), and when the replica's stream breaks before `data: [DONE]` (a reset, an end,
//! or its replica leaving the endpoint view neither serving nor draining: its node lost, whose
//! connections may never close) it asks another replica, not yet tried, for the rest (`Plan::resumed_body`), and
//! goes on with that replica's events in the same stream. Each resume is one of the request's
//! `retries` (the attempts before the answer count too); the broken attempt counts as a failure
//! of its replica (passive ejection).
//!
//! When the stream cannot go on (retries used up, no replica left, an event that is not an
//! OpenAI chunk, the resumed request refused) the client gets an error event (OpenAI's error
//! object, `type: "proxy_error"`) and then the break itself: the stream ends without
//! `data: [DONE]` and without the end of its chunked body, as without `resume_streams`. A client
//! that goes away ends the task, and with it the request to the replica.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use balance::{Key, LlmRequest, Outcome};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::http::uri::PathAndQuery;
use hyper::{Method, StatusCode};
use tokio::sync::mpsc;

use crate::resume::{Events, Plan, Tracker, error_event, is_done};
use crate::{Answer, BodyError, Guard, ProxyBody, ReqBody, Service, State, Upstream, Upstreams, acquire, classify, upstream_request};

/// Frames a stream may run ahead of its client.
const QUEUE: usize = 16;

/// What a stream needs to be asked of another replica.
pub(crate) struct Resume {
    pub(crate) st: Arc<State>,
    pub(crate) svc: Arc<Service>,
    pub(crate) client: Arc<Upstreams>,
    pub(crate) plan: Plan,
    pub(crate) method: Method,
    pub(crate) pq: PathAndQuery,
    pub(crate) headers: HeaderMap,
    /// What the LLM picker placed the request by (a resumed request shares its prefix).
    pub(crate) llm: Option<LlmRequest>,
    /// Replicas tried, not to be asked again.
    pub(crate) tried: Vec<Key>,
    /// Attempts left (the request's retries not used yet).
    pub(crate) left: u32,
}

/// Whether an answer is a stream the proxy can follow and resume: a 200 of server-sent events
/// with no declared length.
pub(crate) fn follows(p: &hyper::http::response::Parts) -> bool {
    p.status == StatusCode::OK
        && !p.headers.contains_key(header::CONTENT_LENGTH)
        && p.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("text/event-stream"))
}

/// The body for the client: a task drives the stream (and its resumes) into it.
pub(crate) fn start(r: Resume, body: Incoming, guard: Guard) -> ProxyBody {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(drive(r, body, guard, tx));
    ProxyBody::Resumable(rx, None)
}

type Tx = mpsc::Sender<Result<Bytes, BodyError>>;

/// How reading one attempt's stream ended.
enum Pumped {
    /// The replica ended its body.
    Ended,
    /// The body broke off (why).
    Broke(String),
    /// The client went away.
    Gone,
}

/// Sends the client the events of one attempt, until its body ends or breaks, or its replica
/// leaves the endpoint view (`up`). `raw`: the stream turned out not to be made of events, and
/// goes on byte for byte.
async fn pump(body: &mut Incoming, up: &Upstream, ev: &mut Events, t: &mut Tracker, raw: &mut bool, tx: &Tx) -> Pumped {
    loop {
        let frame = tokio::select! {
            f = body.frame() => f,
            _ = up.wait_gone() => return Pumped::Broke("left the endpoint view (its node lost)".into()),
        };
        let data = match frame {
            None => return Pumped::Ended,
            Some(Err(e)) => return Pumped::Broke(format!("broke off its stream ({e})")),
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => d,
                Err(_) => continue,
            },
        };
        if *raw {
            if tx.send(Ok(data)).await.is_err() {
                return Pumped::Gone;
            }
            continue;
        }
        ev.push(&data);
        loop {
            let out = match ev.next_event() {
                Ok(Some(e)) => match t.event(e) {
                    Some(out) => out,
                    None => continue,
                },
                Ok(None) => break,
                Err(e) => {
                    t.give_up(e.to_string());
                    *raw = true;
                    ev.take_rest()
                }
            };
            if tx.send(Ok(out)).await.is_err() {
                return Pumped::Gone;
            }
            if *raw {
                break;
            }
        }
    }
}

/// What comes after a broken attempt.
enum Next {
    /// Another replica's stream, and the guard of its attempt.
    Stream(Incoming, Guard),
    /// The last bytes of the stream (made by the proxy: nothing was left to generate).
    End(Bytes),
    /// The stream cannot go on: why.
    Fail(String),
}

async fn drive(mut r: Resume, mut body: Incoming, guard: Guard, tx: Tx) {
    let mut t = Tracker::new(r.plan.api());
    let mut ev = Events::default();
    let mut raw = false;
    let mut guard = guard;
    loop {
        let up = guard.up.clone();
        let why = match pump(&mut body, &up, &mut ev, &mut t, &mut raw, &tx).await {
            Pumped::Gone => return,
            Pumped::Ended => {
                // What follows the last whole event: nothing, a `[DONE]` without its empty
                // line, or the rest of a stream that was not made of events.
                let rest = ev.take_rest();
                if t.done() || raw || is_done(&rest) {
                    if !rest.is_empty() {
                        let _ = tx.send(Ok(rest)).await;
                    }
                    return;
                }
                if t.finished() {
                    // The answer is whole, only `data: [DONE]` is missing: added.
                    let _ = tx.send(Ok(t.ending())).await;
                    return;
                }
                "ended its stream before data: [DONE]".to_string()
            }
            Pumped::Broke(why) => why,
        };
        // The attempt failed: its replica is charged, its half event dropped.
        guard.outcome = Outcome::Reset;
        let why = format!("service {:?}: replica {} {why}", r.svc.name, guard.up.addr);
        drop(guard);
        ev.take_rest();
        match next(&mut r, &t, &why).await {
            Next::Stream(b, g) => {
                r.svc.resumed.fetch_add(1, Relaxed);
                tracing::info!("{why}; resumed on replica {} after {} tokens", g.up.addr, t.tokens());
                t.resume();
                (body, guard) = (b, g);
            }
            Next::End(last) => {
                let _ = tx.send(Ok(last)).await;
                return;
            }
            Next::Fail(msg) => {
                tracing::warn!("{msg}");
                if tx.send(Ok(error_event(&msg))).await.is_ok() {
                    let _ = tx.send(Err(msg.into())).await;
                }
                return;
            }
        }
    }
}

/// Asks replicas not yet tried for the rest of the stream, within the attempts left.
async fn next(r: &mut Resume, t: &Tracker, why: &str) -> Next {
    if let Some(no) = t.not_resumable() {
        return Next::Fail(format!("{why}; not resumed: {no}"));
    }
    if t.finished() {
        // The answer is whole; only `[DONE]` was missing.
        return Next::End(t.ending());
    }
    let Some(body) = r.plan.resumed_body(t.text(), t.tokens()) else { return Next::End(t.ending()) };
    let mut headers = r.headers.clone();
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    let mut last = why.to_string();
    loop {
        if r.left == 0 {
            return Next::Fail(format!("{last}; not resumed: retries used up ({} attempts)", r.tried.len()));
        }
        let (key, up, _) = match acquire(&r.st, &r.svc, &r.tried, r.llm.as_ref(), None, &mut None, false).await {
            Ok(x) => x,
            Err(_) => return Next::Fail(format!("{last}; not resumed: no other replica left")),
        };
        r.tried.push(key);
        r.left -= 1;
        r.svc.retries.fetch_add(1, Relaxed);
        let start = Instant::now();
        let req = upstream_request(&r.method, &up, &r.pq, &headers, ReqBody::Full(Some(body.clone())));
        let mut g = Guard {
            svc: r.svc.clone(),
            up: up.clone(),
            key,
            outcome: Outcome::Ok,
            start,
            st: r.st.clone(),
            _tenant: None,
            answer: Answer::AtFirstData,
        };
        g.answer_began(); // not paced: the resumer owns the body
        match r.client.request(req).await {
            Ok(resp) => {
                let (p, b) = resp.into_parts();
                if follows(&p) {
                    return Next::Stream(b, g);
                }
                let status = p.status;
                if status.is_server_error() {
                    g.outcome = Outcome::ServerError(status.as_u16());
                    last = format!("service {:?}: replica {} answered the resumed request {status}", r.svc.name, up.addr);
                    continue;
                }
                let text =
                    match tokio::time::timeout(std::time::Duration::from_secs(5), http_body_util::Limited::new(b, 4096).collect()).await {
                        Ok(Ok(b)) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
                        _ => String::new(),
                    };
                return Next::Fail(format!("{why}; the resumed request got {status} from replica {}: {}", up.addr, text.trim()));
            }
            Err(e) => {
                g.outcome = classify(&e);
                last = format!("service {:?}: replica {}: {e}", r.svc.name, up.addr);
            }
        }
    }
}
