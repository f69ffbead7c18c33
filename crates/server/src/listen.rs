//! The controller's two accept loops, each its own task (SECURITY.md, F1-F3). They accept as
//! fast as connections come, so no listen backlog fills with one caller's connects, and decide
//! at once: on the Unix socket by the peer's uid (`SO_PEERCRED`, capped per uid by
//! `limits::Users`: over its cap a connection is answered 429 and closed); on TCP by the
//! credential its requests carry (agents' and proxies' connections are never capped; users'
//! with tokens count as on the Unix socket; the rest are `limits::Pending`'s, closed after
//! `UNAUTHENTICATED_DEADLINE`). Each served connection has deadlines for a request's head and
//! body and for idleness, and each user's requests take turns.

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, UnixListener};

use crate::app::{App, Peer, bearer, now};
use crate::limits::{self, Activity, Closed, DeadlineBody, Listener, PendingSlot, Refusal, Slot, Watched};

/// Waits after a failed accept (out of descriptors and the like), saying so at most once a
/// minute per listener.
async fn accept_failed(what: &str, e: std::io::Error, last: &mut Option<std::time::Instant>, quiet: &mut u64) {
    if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
        let more = if *quiet > 0 { format!(" ({quiet} more since the last report)") } else { String::new() };
        tracing::warn!("accepting a connection on the {what}: {e}{more}");
        *last = Some(std::time::Instant::now());
        *quiet = 0;
    } else {
        *quiet += 1;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
}

/// A request to the router, with the caller's [`Peer`] and its body under the deadline.
fn to_router(mut req: hyper::Request<hyper::body::Incoming>, peer: Peer) -> axum::extract::Request {
    req.extensions_mut().insert(ConnectInfo(peer));
    req.map(|b| axum::body::Body::new(DeadlineBody::new(b, limits::BODY_DEADLINE)))
}

/// The refusal as an answer on a connection already being served (TCP, a token over its cap).
fn refusal(r: &Refusal, http1: bool) -> axum::response::Response {
    use axum::response::IntoResponse;
    let code = axum::http::StatusCode::from_u16(r.status()).unwrap_or(axum::http::StatusCode::SERVICE_UNAVAILABLE);
    let mut resp = (code, [("retry-after", "1")], axum::Json(wire::ApiError { error: r.message(), user_msg: None })).into_response();
    if http1 {
        resp.headers_mut().insert("connection", axum::http::HeaderValue::from_static("close"));
    }
    resp
}

/// Serves users on the Unix socket until the listener fails.
pub(crate) async fn serve_unix(listener: UnixListener, router: Router, app: App) -> std::io::Result<()> {
    let (mut last, mut quiet) = (None, 0);
    loop {
        let s = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                accept_failed("Unix socket", e, &mut last, &mut quiet).await;
                continue;
            }
        };
        let Ok(uid) = s.peer_cred().map(|c| c.uid()) else { continue };
        match app.gate.users.take(uid) {
            Ok(slot) => {
                tokio::spawn(serve_unix_conn(s, uid, slot, router.clone(), app.clone()));
            }
            Err(r) => {
                // A fresh socket's buffer takes the short answer at once; then it is closed.
                let _ = s.try_write(&r.http());
            }
        }
    }
}

async fn serve_unix_conn(s: tokio::net::UnixStream, uid: u32, slot: Slot, router: Router, app: App) {
    let _open = app.gate.open(Listener::Unix);
    let act = Activity::new();
    let slot = Arc::new(slot);
    let a = act.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let (router, slot, act) = (router.clone(), slot.clone(), a.clone());
        async move {
            let _busy = act.busy();
            let turn = slot.turn().await;
            limits::in_turn(turn, tower::ServiceExt::oneshot(router, to_router(req, Peer { uid: Some(uid) }))).await
        }
    });
    // HTTP/1.1 only: the users' clients speak it, and it has the head deadline.
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits::HEAD_DEADLINE)
        .serve_connection(TokioIo::new(Watched::new(s, act.clone())), svc)
        .with_upgrades();
    tokio::select! {
        _ = conn => {}
        () = act.idle(limits::UNIX_IDLE) => app.gate.closed(Closed::Idle),
    }
}

/// What a TCP connection has shown of who it is.
enum Auth {
    /// Nothing yet: it is in the unauthenticated table.
    Pending { _slot: PendingSlot },
    /// An agent's or a proxy's credential: never capped.
    Member,
    /// A user's token: counted as that user's connection.
    User(Arc<Slot>),
}

/// Serves agents, proxies and users with tokens on TCP (over TLS unless `tls` is `None`,
/// `--insecure`) until the listener fails.
pub(crate) async fn serve_tcp(listener: TcpListener, tls: Option<rustls::ServerConfig>, router: Router, app: App) -> std::io::Result<()> {
    let acceptor = tls.map(|cfg| tokio_rustls::TlsAcceptor::from(Arc::new(cfg)));
    let (mut last, mut quiet) = (None, 0);
    loop {
        let (tcp, from) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                accept_failed("TCP port", e, &mut last, &mut quiet).await;
                continue;
            }
        };
        tcp.set_nodelay(true).ok();
        let ip = from.ip().to_canonical();
        let pending = app.gate.pending.enter(ip);
        let (acceptor, router, app) = (acceptor.clone(), router.clone(), app.clone());
        tokio::spawn(async move {
            let _open = app.gate.open(Listener::Tcp);
            let close = pending.close.clone();
            let auth = Arc::new(Mutex::new(Auth::Pending { _slot: pending }));
            let act = Activity::new();
            let work = async {
                match acceptor {
                    Some(acceptor) => {
                        if let Ok(tls) = acceptor.accept(tcp).await {
                            serve_tcp_conn(tls, auth.clone(), act.clone(), router, app.clone()).await;
                        }
                    }
                    None => serve_tcp_conn(tcp, auth.clone(), act.clone(), router, app.clone()).await,
                }
            };
            // Unauthenticated past the deadline (a TLS handshake never finished, no
            // credential shown): closed.
            let deadline = async {
                tokio::time::sleep(limits::UNAUTHENTICATED_DEADLINE).await;
                if !matches!(*auth.lock().expect("auth lock"), Auth::Pending { .. }) {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                () = work => {}
                () = deadline => app.gate.closed(Closed::Unauthenticated),
                () = close.notified() => app.gate.closed(Closed::Evicted),
                () = act.idle(limits::TCP_IDLE) => app.gate.closed(Closed::Idle),
            }
        });
    }
}

/// Who a TCP request's bearer says it is: an agent or a proxy (`Ok(None)`), a user
/// (`Ok(Some(uid))`), or no one (`Err`).
fn who(app: &App, h: &axum::http::HeaderMap) -> Result<Option<u32>, ()> {
    let tok = bearer(h).ok_or(())?;
    if app.nodes.verify_credential(tok, false).is_some() || app.nodes.verify_credential(tok, true).is_some() {
        return Ok(None);
    }
    app.tokens.verify(tok, now()).map(Some).ok_or(())
}

async fn serve_tcp_conn<S>(io: S, auth: Arc<Mutex<Auth>>, act: Arc<Activity>, router: Router, app: App)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let a = act.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let (router, auth, act, app) = (router.clone(), auth.clone(), a.clone(), app.clone());
        async move {
            let _busy = act.busy();
            let slot = {
                let mut g = auth.lock().expect("auth lock");
                match &*g {
                    Auth::Member => None,
                    Auth::User(s) => Some(s.clone()),
                    Auth::Pending { .. } => match who(&app, req.headers()) {
                        Ok(None) => {
                            *g = Auth::Member;
                            None
                        }
                        Ok(Some(uid)) => match app.gate.users.take(uid) {
                            Ok(s) => {
                                let s = Arc::new(s);
                                *g = Auth::User(s.clone());
                                Some(s)
                            }
                            Err(r) => return Ok(refusal(&r, req.version() < hyper::Version::HTTP_2)),
                        },
                        Err(()) => None,
                    },
                }
            };
            let turn = match &slot {
                Some(s) => s.turn().await,
                None => None,
            };
            limits::in_turn(turn, tower::ServiceExt::oneshot(router, to_router(req, Peer { uid: None }))).await
        }
    });
    let mut b = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    b.http1().timer(TokioTimer::new()).header_read_timeout(limits::HEAD_DEADLINE);
    b.http2().timer(TokioTimer::new());
    // Upgrades: `kubectl exec`'s WebSocket (`podexec`), which lives on past this connection's
    // HTTP, in a task of its own.
    let _ = b.serve_connection_with_upgrades(TokioIo::new(Watched::new(io, act)), svc).await;
}
