//! Controllers that take over from each other, on etcd (`--store etcd://...`, `store::etcd`).
//!
//! A controller starts as a standby: it reads the cluster's state from etcd into its replica
//! (`DATA/replica.db`) and keeps it current by watching, campaigns for leadership on a lease of
//! its own, and answers every request on its ports with 503 and the leader's address
//! (`x-tandem-leader`), which clients follow. Once it leads it raises the start count in its
//! first fenced transaction, lets its watch catch up with that transaction, stops watching and
//! goes on as any controller does after a restart, from its replica. It stops (exits) as soon
//! as it cannot be sure of its lease, before etcd can let it expire: its supervisor starts it
//! again, as a standby.

use anyhow::{Context, Result};
use axum::body::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;

/// The header of a standby's answer that names the leader.
pub(crate) const LEADER_HEADER: &str = wire::LEADER_HEADER;

/// How a controller on etcd stops when it can no longer lead (its supervisor starts it again).
pub(crate) fn step_down(why: &str) -> ! {
    tracing::error!("stepping down: {why}; exiting so that no order of this controller's goes out after another leads");
    std::process::exit(75)
}

/// The answer of a standby: 503, `Retry-After`, and the leader's address where one leads.
fn answer(leader: Option<&str>) -> hyper::Response<Full<Bytes>> {
    let error = match leader {
        Some(l) => format!("this controller is a standby: the leader is at {l}"),
        None => "this controller is a standby, and no controller leads yet (an election is under way): try again".to_string(),
    };
    let body = serde_json::to_vec(&wire::ApiError { error, user_msg: None }).unwrap_or_default();
    let mut r = hyper::Response::builder().status(503).header("content-type", "application/json").header("retry-after", "1");
    if let Some(l) = leader.and_then(|l| hyper::header::HeaderValue::from_str(l).ok()) {
        r = r.header(LEADER_HEADER, l);
    }
    r.body(Full::new(Bytes::from(body))).expect("a valid answer")
}

/// What a standby forwards its Unix socket's requests with: the cluster's token key (users'
/// tokens are minted with it for the caller's uid, as the leader's own `tandem token` would) and
/// the trust for the leader's TLS.
#[derive(Clone)]
pub(crate) struct Forward {
    tokens: Arc<crate::token::Tokens>,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Forward {
    /// From the data directory's `jwt.key` and `ca.pem`; `None` where there is no key yet (a
    /// cluster that never had a leader: there is no one to forward to either).
    pub(crate) fn of(data: &std::path::Path) -> Option<Forward> {
        let key = std::fs::read_to_string(data.join("jwt.key")).ok().map(|k| k.trim().to_string()).filter(|k| k.len() >= 32)?;
        let tls = client::tls_config(&data.join("ca.pem")).ok();
        Some(Forward { tokens: Arc::new(crate::token::Tokens::new(key.as_bytes())), tls })
    }
}

/// How long a token minted for a forwarded request lives, in seconds.
const FORWARD_TOKEN_S: i64 = 120;

/// A request on a standby's Unix socket, sent on to the leader at `leader` over TCP as the
/// caller (`uid`) with a token of the caller's, minted here: the answer comes back as it
/// streams. Upgrades (`kubectl exec`, `srun --pty`) are not forwarded.
/// Why a forward failed: before the request went out (nothing was done: the caller may send
/// it again), or after (the leader may have done it).
enum Failed {
    Before(String),
    After(String),
}

async fn forward(
    f: &Forward,
    leader: &str,
    uid: u32,
    req: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<axum::body::Body>, Failed> {
    let before = Failed::Before;
    if req.headers().contains_key(hyper::header::UPGRADE) {
        return Err(before("a standby does not forward an upgraded connection (exec, attach): use the leading controller's host".into()));
    }
    let (tls, addr) = match (leader.strip_prefix("https://"), leader.strip_prefix("http://")) {
        (Some(a), _) => (true, a.to_string()),
        (None, Some(a)) => (false, a.to_string()),
        _ => return Err(before(format!("the leader's address {leader:?} is not http(s)://HOST:PORT"))),
    };
    let tcp = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(&addr))
        .await
        .map_err(|_| before(format!("the leader at {leader} did not answer in 5 s")))?
        .map_err(|e| before(format!("the leader at {leader}: {e}")))?;
    tcp.set_nodelay(true).ok();
    let now = crate::app::now();
    let token = f.tokens.issue(uid, now, now + FORWARD_TOKEN_S);
    let (mut parts, body) = req.into_parts();
    // The caller's identity is the one its socket shows: nothing it sent stands for another.
    for h in ["authorization", "connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade", "host"] {
        parts.headers.remove(h);
    }
    parts.headers.insert(
        hyper::header::AUTHORIZATION,
        hyper::header::HeaderValue::from_str(&format!("Bearer {token}")).map_err(|e| before(e.to_string()))?,
    );
    parts.headers.insert(hyper::header::HOST, hyper::header::HeaderValue::from_static("tandem"));
    let req = hyper::Request::from_parts(parts, body);
    let resp = if tls {
        let cfg = f.tls.clone().ok_or_else(|| before("no cluster CA (ca.pem) to trust the leader with".to_string()))?;
        let name = rustls_pki_types::ServerName::try_from(wire::CONTROLLER_NAME).expect("a valid DNS name");
        let s = tokio_rustls::TlsConnector::from(cfg)
            .connect(name, tcp)
            .await
            .map_err(|e| before(format!("TLS to the leader at {leader}: {e}")))?;
        let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s)).await.map_err(|e| before(e.to_string()))?;
        tokio::spawn(conn);
        tx.send_request(req).await
    } else {
        let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.map_err(|e| before(e.to_string()))?;
        tokio::spawn(conn);
        tx.send_request(req).await
    };
    // Sent: from here on the leader may have acted on it.
    let resp = resp.map_err(|e| Failed::After(format!("the leader at {leader}: {e}")))?;
    Ok(resp.map(axum::body::Body::new))
}

/// Serves a standby's answer on both ports until `stop` is set; the listeners stay the
/// caller's (the leader serves them next). Connections still open when it stops end as said
/// below. On the Unix socket, where users have no token, requests are forwarded to the leader
/// as the caller (`forward`) once one leads and this controller has the cluster's keys.
pub(crate) async fn serve_standby(
    tcp: &TcpListener,
    unix: &UnixListener,
    tls: Option<rustls::ServerConfig>,
    fwd: Option<Forward>,
    leader: watch::Receiver<Option<String>>,
    mut stop: watch::Receiver<bool>,
) {
    let acceptor = tls.map(|c| tokio_rustls::TlsAcceptor::from(Arc::new(c)));
    // When this controller leads, its standby's connections end. HTTP/2 ones (told by ALPN,
    // or on plain TCP by the client's preface) at once, with GOAWAY: their clients send what
    // was not taken again. The rest (HTTP/1, one answer per connection here) are not cut: a
    // request that was on its way as the election ended is answered (503 naming this
    // controller, or forwarded to it), never met with a reset its client cannot tell from a
    // lost request. A TCP connection lasts `LATE` at most (a standby's answers are at once),
    // a Unix one that sends no request in `LATE` is closed.
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let late = hyper_util::server::graceful::GracefulShutdown::new();
    let svc = {
        let leader = leader.clone();
        hyper::service::service_fn(move |_req: hyper::Request<hyper::body::Incoming>| {
            let l = leader.borrow().clone();
            async move { Ok::<_, std::convert::Infallible>(answer(l.as_deref()).map(axum::body::Body::new)) }
        })
    };
    loop {
        tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            c = tcp.accept() => {
                let Ok((s, _)) = c else { tokio::time::sleep(Duration::from_millis(20)).await; continue };
                s.set_nodelay(true).ok();
                let (svc, acceptor) = (svc.clone(), acceptor.clone());
                let mut b = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                b.http1().keep_alive(false).timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(LATE);
                match acceptor {
                    Some(a) => {
                        // The handshake is awaited in the connection's own task.
                        let (now, later) = (graceful.watcher(), late.watcher());
                        tokio::spawn(async move {
                            let Ok(Ok(t)) = tokio::time::timeout(Duration::from_secs(5), a.accept(s)).await else { return };
                            let h2 = t.get_ref().1.alpn_protocol() == Some(b"h2");
                            let conn = b.serve_connection(TokioIo::new(t), svc).into_owned();
                            watched(h2, now, later, conn).await;
                        });
                    }
                    None => {
                        let (now, later) = (graceful.watcher(), late.watcher());
                        tokio::spawn(async move {
                            let Some(h2) = h2_preface(&s).await else { return };
                            let conn = b.serve_connection(TokioIo::new(s), svc).into_owned();
                            watched(h2, now, later, conn).await;
                        });
                    }
                }
            }
            c = unix.accept() => {
                let Ok((s, _)) = c else { tokio::time::sleep(Duration::from_millis(20)).await; continue };
                let Ok(uid) = s.peer_cred().map(|c| c.uid()) else { continue };
                let (leader, fwd) = (leader.clone(), fwd.clone());
                let unix_svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (l, fwd) = (leader.borrow().clone(), fwd.clone());
                    async move {
                        // Its health is its own (`scontrol ping` tells a standby from the leader).
                        let own = req.uri().path() == "/healthz";
                        let r = match (&l, &fwd) {
                            (Some(l), Some(f)) if !own => match forward(f, l, uid, req).await {
                                Ok(r) => r,
                                Err(Failed::Before(e)) => {
                                    tracing::warn!("forwarding a request of uid {uid} to the leader: {e}");
                                    answer(Some(l)).map(axum::body::Body::new)
                                }
                                Err(Failed::After(e)) => {
                                    // Not a standby's answer: the caller must not take it as
                                    // "nothing was done" and send it again.
                                    tracing::warn!("forwarding a request of uid {uid} to the leader: {e}");
                                    let body = serde_json::to_vec(&wire::ApiError {
                                        error: format!("the request went to the leader, which did not answer ({e}): whether it was done is not known"),
                                        user_msg: None,
                                    })
                                    .unwrap_or_default();
                                    hyper::Response::builder()
                                        .status(502)
                                        .header("content-type", "application/json")
                                        .body(axum::body::Body::from(body))
                                        .expect("a valid answer")
                                }
                            },
                            _ => answer(l.as_deref()).map(axum::body::Body::new),
                        };
                        Ok::<_, std::convert::Infallible>(r)
                    }
                });
                // HTTP/1.1, as the leader's Unix socket; one answer per connection.
                let conn = hyper::server::conn::http1::Builder::new()
                    .keep_alive(false)
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(LATE)
                    .serve_connection(TokioIo::new(s), unix_svc);
                tokio::spawn(late.watch(conn));
            }
        }
    }
    // Neither waits here: the leader serves the listeners meanwhile.
    tokio::spawn(async move {
        tokio::time::sleep(LATE).await;
        let _ = tokio::time::timeout(Duration::from_secs(1), late.shutdown()).await;
    });
    tokio::spawn(async move {
        let _ = tokio::time::timeout(Duration::from_secs(1), graceful.shutdown()).await;
    });
}

/// How long a standby's connection has to send its request (a TCP one: to be done), and how
/// long after the standby leads (or stops) the connections it took are left to end on their
/// own.
const LATE: Duration = Duration::from_secs(30);

/// Serves a standby's TCP connection under the shutdown of its kind: HTTP/2 under `now`'s
/// (GOAWAY as soon as it leads), the rest under `later`'s, for `LATE` at most. The watcher not
/// taken is let go at once: a shutdown waits for every watcher of its own.
async fn watched<C: hyper_util::server::graceful::GracefulConnection>(
    h2: bool,
    now: hyper_util::server::graceful::Watcher,
    later: hyper_util::server::graceful::Watcher,
    conn: C,
) {
    if h2 {
        drop(later);
        let _ = now.watch(conn).await;
    } else {
        drop(now);
        let _ = tokio::time::timeout(LATE, later.watch(conn)).await;
    }
}

/// Whether a plain TCP connection opens with HTTP/2's preface (`PRI * HTTP/2.0`, a client with
/// prior knowledge) rather than an HTTP/1 request, read without taking it; `None` where it
/// sends too little to tell within `LATE`, or closes.
async fn h2_preface(s: &tokio::net::TcpStream) -> Option<bool> {
    let deadline = tokio::time::Instant::now() + LATE;
    let mut b = [0u8; 3];
    loop {
        let n = tokio::time::timeout_at(deadline, s.peek(&mut b)).await.ok()?.ok()?;
        if n == 0 {
            return None;
        }
        if n == b.len() || !b"PRI".starts_with(&b[..n]) {
            return Some(&b[..n] == b"PRI");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The files whose fingerprints (SHA-256, never the files) the cluster keeps in etcd
/// (`meta/key_fingerprints`): every controller must hold the same ones.
const SHARED: [&str; 4] = ["ca.pem", "ca.key", "jwt.key", "nodes.key"];

/// The fingerprints of this controller's shared files, as stored (`none` for one it does not
/// have: the CA of a controller without TLS).
pub(crate) fn fingerprints(data: &std::path::Path) -> String {
    use sha2::Digest;
    let mut out = serde_json::Map::new();
    for f in SHARED {
        let v = match std::fs::read(data.join(f)) {
            Ok(bytes) => sha2::Sha256::digest(bytes.trim_ascii()).iter().map(|b| format!("{b:02x}")).collect(),
            Err(_) => "none".to_string(),
        };
        out.insert(f.to_string(), serde_json::Value::String(v));
    }
    serde_json::Value::Object(out).to_string()
}

/// Refuses to go on where the cluster has fingerprints of its CA and keys and this
/// controller's files are missing or not the same: it would issue certificates, tokens and
/// credentials no one else trusts.
pub(crate) fn check_keys(db: &Mutex<store::Store>, data: &std::path::Path) -> Result<()> {
    let Some(want) = db.lock().expect("store lock").meta("key_fingerprints")? else { return Ok(()) };
    if fingerprints(data) != want {
        anyhow::bail!(
            "this controller's CA and keys are not the cluster's: copy ca.pem, ca.key, jwt.key and nodes.key from the data directory of another controller of this cluster into {} (mode 0600, the controller's user's), then start it again",
            data.display()
        );
    }
    Ok(())
}

/// The leader's upkeep of etcd, a round every `every` ([`store::etcd::upkeep`]): history
/// compacted to the revision the round before saw, members with many free pages defragmented.
/// A failed round is logged and tried again at the next.
async fn upkeep(client: store::etcd::Client, members: store::etcd::Members, mark: String, every: Duration) {
    let mut seen = 0i64;
    loop {
        tokio::time::sleep(every).await;
        let r = store::etcd::upkeep(&client, &members, &mark, seen, store::etcd::DEFRAG_FREE).await;
        match r {
            Ok(u) => {
                if let Some(rev) = u.compacted_to {
                    tracing::info!(revision = rev, "etcd upkeep: history compacted");
                }
                for (m, before, after) in &u.defragmented {
                    tracing::info!(member = %m, before, after, "etcd upkeep: member defragmented");
                }
                for (m, why) in &u.failed {
                    tracing::warn!(member = %m, "etcd upkeep: defragmenting failed: {why}");
                }
            }
            Err(e) => tracing::warn!("etcd upkeep: {e}"),
        }
        match store::etcd::revision(&client).await {
            Ok(r) => seen = r,
            Err(e) => tracing::warn!("etcd upkeep: reading the revision: {e}"),
        }
    }
}

/// What a controller that now leads has.
pub(crate) struct Led {
    /// The start count its first fenced transaction stored.
    pub(crate) boot: u64,
}

/// Stands by until this controller leads: the replica filled and kept current, a standby's
/// answer on the ports, the campaign. `url` is this controller's address (the election's
/// value, which standbys give clients).
pub(crate) async fn stand_by(
    db: Arc<Mutex<store::Store>>,
    data: &std::path::Path,
    tcp: &TcpListener,
    unix: &UnixListener,
    tls: Option<rustls::ServerConfig>,
    url: String,
) -> Result<Led> {
    let (client, members, election, ttl, prefix, upkeep_every) = {
        let mut d = db.lock().expect("store lock");
        let r = d.remote().expect("an etcd store");
        (r.client(), r.members(), r.election(), r.config().lease_ttl, r.config().prefix.clone(), r.config().upkeep_every)
    };
    let (members2, prefix2) = (members.clone(), prefix.clone());
    let started = std::time::Instant::now();
    let db2 = db.clone();
    let rev = tokio::task::spawn_blocking(move || db2.lock().expect("store lock").sync())
        .await?
        .context("reading the cluster's state from etcd")?;
    let (jobs, stored, follower, skipped) = {
        let mut d = db.lock().expect("store lock");
        let (jobs, stored) = (d.count_jobs().unwrap_or(0), d.meta("boot").ok().flatten());
        let r = d.remote().expect("an etcd store");
        (jobs, stored, r.take_follower(), r.skipped())
    };
    if skipped > 0 {
        tracing::warn!("{skipped} key(s) below the cluster's prefix in etcd hold nothing this Tandem reads: left alone");
    }
    tracing::info!(
        revision = rev,
        jobs,
        "read the cluster's state from etcd in {:.2} s (start count {}); standing by",
        started.elapsed().as_secs_f64(),
        stored.as_deref().unwrap_or("none yet")
    );
    check_keys(&db, data)?;
    // The replica kept current from the next revision on.
    let (applied_tx, mut applied) = watch::channel(rev);
    let follow = {
        let (c, d) = (client.clone(), db.clone());
        tokio::spawn(async move {
            let why = store::etcd::follow(c, prefix, rev + 1, follower, d, applied_tx).await;
            step_down(&format!("watching etcd for the replica: {why}"));
        })
    };
    // The lease this controller campaigns (and then leads) on, kept until it cannot be.
    let lease = store::etcd::grant(&mut client.clone(), ttl).await.context("taking a lease from etcd")?;
    tracing::info!(lease = format!("{:x}", lease.id), ttl_s = lease.ttl.as_secs(), "campaigning for leadership as {url}");
    let lease_id = lease.id;
    {
        // On a thread and runtime of its own: a request that holds the controller's runtime
        // busy (a large listing) must not delay the renewals, or the leader would step down
        // for nothing.
        let (c, l) = (members, lease);
        std::thread::Builder::new().name("etcd-lease".into()).spawn(move || {
            let why = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt.block_on(store::etcd::keep_alive(c, &l)),
                Err(e) => format!("starting the lease's runtime: {e}"),
            };
            step_down(&why);
        })?;
    }
    // Who leads, for the standby's answers.
    let (leader_tx, leader_rx) = watch::channel(None);
    let leader_tx = Arc::new(leader_tx);
    // Set once this controller has won: what it then says of itself is not overwritten.
    let led = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let who = {
        let (c, e, leader_tx, led) = (client.clone(), election.clone(), leader_tx.clone(), led.clone());
        tokio::spawn(async move {
            loop {
                let l = store::etcd::leader(c.clone(), e.clone()).await;
                leader_tx.send_if_modified(|v| {
                    if led.load(std::sync::atomic::Ordering::SeqCst) {
                        return false;
                    }
                    let changed = *v != l;
                    *v = l.clone();
                    changed
                });
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let serving = serve_standby(tcp, unix, tls, Forward::of(data), leader_rx, stop_rx);
    let won = async {
        let fence = store::etcd::campaign(client.clone(), election.clone(), url.clone(), lease_id).await.context("campaigning");
        // What the standby's connections still open answer from now on: this controller leads.
        if fence.is_ok() {
            who.abort();
            led.store(true, std::sync::atomic::Ordering::SeqCst);
            leader_tx.send_replace(Some(url.clone()));
        }
        let _ = stop_tx.send(true);
        fence
    };
    let (fence, ()) = tokio::join!(won, serving);
    let fence = fence?;
    let took = std::time::Instant::now();
    // The first fenced transaction: the start count, past every one used before.
    let db2 = db.clone();
    // The highest start count this controller has known (DATA/boot, as with SQLite): one above
    // etcd's means etcd's state went back in time (a snapshot restored).
    let boot_file = data.join("boot");
    let known: u64 = std::fs::read_to_string(&boot_file).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    let (boot, boot_rev) = tokio::task::spawn_blocking(move || {
        let mut d = db2.lock().expect("store lock");
        let floor: u64 = d.meta("boot").ok().flatten().and_then(|b| b.parse().ok()).unwrap_or(0);
        d.remote().expect("an etcd store").set_fence(fence, floor + 1);
        // What the last leader left half written: a committed group's records to their keys.
        d.remote().expect("an etcd store").settle_groups()?;
        // A state restored from an etcd snapshot (`etcdctl snapshot restore` gives the cluster
        // a new id) is behind the starts, ids and runs made since: counted far past them, and
        // marked restored, so its unfinished jobs are held until settled (as a restored SQLite
        // backup's).
        // A standby whose etcd was restored under it (its watch then sees nothing) reads the
        // state again before it judges it.
        let live = d.remote().expect("an etcd store").live_cluster_id()?;
        let mut floor = floor;
        if live != 0 && live != d.remote().expect("an etcd store").cluster_id() {
            tracing::warn!("etcd's cluster id changed while this controller stood by: reading its state again");
            d.sync()?;
            floor = d.meta("boot").ok().flatten().and_then(|b| b.parse().ok()).unwrap_or(0);
        }
        let stored = d.meta("etcd_cluster").ok().flatten();
        let new_cluster = live != 0 && stored.as_deref().is_some_and(|s| s != format!("{live:x}"));
        let restored = new_cluster || (floor > 0 && known > floor);
        if restored {
            let why = if new_cluster {
                format!("etcd's cluster id is {live:x}, and the state was written on {}", stored.as_deref().unwrap_or_default())
            } else {
                format!("its start count is {floor}, and this controller has known {known}")
            };
            tracing::warn!("etcd's state was restored from a snapshot: {why}");
        }
        // One commit: the count, the restore's mark and the cluster's id (a crash leaves all or
        // none of them).
        let mut extra = Vec::new();
        if restored {
            extra.push(("backup_taken".to_string(), Some("0".to_string())));
        }
        if live != 0 && stored.as_deref() != Some(format!("{live:x}").as_str()) {
            extra.push(("etcd_cluster".to_string(), Some(format!("{live:x}"))));
        }
        let boot = d.next_boot_with(floor.max(known), if restored { store::RESTORE_BOOT_STEP } else { 1 }, extra)?;
        Ok::<_, store::StoreError>((boot, d.remote().expect("an etcd store").last_revision()))
    })
    .await?
    .context("raising the start count in etcd")?;
    crate::private::write(&boot_file, &boot.to_string()).context("writing DATA/boot")?;
    // Everything the last leader committed is in the replica once the watch has passed the
    // transaction just made.
    tokio::time::timeout(Duration::from_secs(30), applied.wait_for(|r| *r >= boot_rev))
        .await
        .context("the replica did not catch up with etcd in 30 s")?
        .context("the replica's watch stopped")?;
    follow.abort();
    // The CA and keys checked again: the cluster may have got them while this one stood by.
    if let Err(e) = check_keys(&db, data) {
        step_down(&format!("{e:#}"));
    }
    tracing::info!(boot, "leading: took over in {:.3} s after winning the election", took.elapsed().as_secs_f64());
    if let Some(every) = upkeep_every {
        tokio::spawn(upkeep(client, members2, format!("{prefix2}meta/upkeep"), every));
    }
    Ok(Led { boot })
}
