//! The controller's defences against one caller crowding out the others (SECURITY.md, F1-F3):
//! the per-user connection caps and request turns ([`Users`]), the table of TCP connections
//! not yet authenticated ([`Pending`]), the deadlines ([`Activity`] and [`Watched`] for idle
//! connections, [`DeadlineBody`] for request bodies) and the counters `/metrics` shows
//! ([`Gate::render`]). It knows no route and no handler: `listen` uses it to accept and serve.

use hyper::body::{Body, Bytes, Frame, SizeHint};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

pub(crate) use control::config::Limits;

/// How long a client has to send a request's head (HTTP/1.1: hyper's `header_read_timeout`),
/// and how long a kept-alive HTTP/1.1 connection may wait for its next request.
pub(crate) const HEAD_DEADLINE: Duration = Duration::from_secs(10);
/// How long a client has to send a request's body, from its head.
pub(crate) const BODY_DEADLINE: Duration = Duration::from_secs(30);
/// A Unix socket connection with no request being handled and no byte moved for this long is
/// closed (a client that does not read its answer included).
pub(crate) const UNIX_IDLE: Duration = Duration::from_secs(10);
/// The same for an authenticated TCP connection (agents and proxies keep theirs busy).
pub(crate) const TCP_IDLE: Duration = Duration::from_secs(60);
/// How long a TCP connection may stay unauthenticated (its TLS handshake included): one
/// without a credential or token by then is closed.
pub(crate) const UNAUTHENTICATED_DEADLINE: Duration = Duration::from_secs(10);
/// Unauthenticated TCP connections from one source address; a newer one closes the oldest.
pub(crate) const PENDING_PER_IP: usize = 64;
/// Unauthenticated TCP connections in all; a newer one closes the oldest.
pub(crate) const PENDING_TOTAL: usize = 1024;
/// Root's and the controller's own user's caps are this many times an ordinary user's.
pub(crate) const ADMIN_FACTOR: usize = 4;

/// Why a connection was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The uid holds its cap.
    PerUser { uid: u32, max: usize },
    /// Users' connections in all are at their cap.
    Total { max: usize },
}

impl Refusal {
    /// The HTTP status of the refusal: 429 for one user's cap, 503 for the controller's.
    pub(crate) fn status(&self) -> u16 {
        match self {
            Refusal::PerUser { .. } => 429,
            Refusal::Total { .. } => 503,
        }
    }

    /// What the refused client is told.
    pub(crate) fn message(&self) -> String {
        match self {
            Refusal::PerUser { uid, max } => format!(
                "too many connections: uid {uid} already holds {max} connections to the controller ([limits] max_connections_per_user); retry when one closes"
            ),
            Refusal::Total { max } => {
                format!("too many connections: users hold {max} connections to the controller ([limits] max_user_connections); retry later")
            }
        }
    }

    /// The whole HTTP/1.1 answer, written to a refused connection before it is closed: the
    /// API's error body (`{"error": ...}`) and `Retry-After`, which clients take as "back off
    /// and retry".
    pub(crate) fn http(&self) -> Vec<u8> {
        let body = serde_json::json!({ "error": self.message() }).to_string();
        let reason = if self.status() == 429 { "Too Many Requests" } else { "Service Unavailable" };
        format!(
            "HTTP/1.1 {} {reason}\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            self.status(),
            body.len()
        )
        .into_bytes()
    }
}

struct UserEntry {
    conns: usize,
    turns: Arc<Semaphore>,
}

/// Users' connections, per uid: the caps and the request turns.
pub(crate) struct Users {
    limits: Limits,
    /// Root and the controller's own uid: [`ADMIN_FACTOR`] times the caps.
    admins: [u32; 2],
    map: Mutex<(HashMap<u32, UserEntry>, usize)>,
    /// The most connections one ordinary uid has held at once since the start.
    peak: AtomicUsize,
    refused_user: AtomicU64,
    refused_total: AtomicU64,
}

impl Users {
    pub(crate) fn new(limits: Limits, owner: u32) -> Users {
        Users {
            limits,
            admins: [0, owner],
            map: Mutex::new((HashMap::new(), 0)),
            peak: AtomicUsize::new(0),
            refused_user: AtomicU64::new(0),
            refused_total: AtomicU64::new(0),
        }
    }

    fn caps(&self, uid: u32) -> (usize, usize) {
        let (c, r) = (self.limits.max_connections_per_user as usize, self.limits.max_requests_per_user as usize);
        if self.admins.contains(&uid) { (c * ADMIN_FACTOR, r * ADMIN_FACTOR) } else { (c, r) }
    }

    /// A connection for `uid`, or why not.
    pub(crate) fn take(self: &Arc<Self>, uid: u32) -> Result<Slot, Refusal> {
        let (max, turns) = self.caps(uid);
        let mut g = self.map.lock().expect("users lock");
        let (map, total) = &mut *g;
        let held = map.get(&uid).map_or(0, |e| e.conns);
        if held >= max {
            self.refused_user.fetch_add(1, Ordering::Relaxed);
            return Err(Refusal::PerUser { uid, max });
        }
        if *total >= self.limits.max_user_connections as usize {
            self.refused_total.fetch_add(1, Ordering::Relaxed);
            return Err(Refusal::Total { max: self.limits.max_user_connections as usize });
        }
        let e = map.entry(uid).or_insert_with(|| UserEntry { conns: 0, turns: Arc::new(Semaphore::new(turns)) });
        e.conns += 1;
        *total += 1;
        if !self.admins.contains(&uid) {
            self.peak.fetch_max(e.conns, Ordering::Relaxed);
        }
        Ok(Slot { users: self.clone(), uid, turns: e.turns.clone() })
    }

    /// Users' connections now, and the most one ordinary uid holds now.
    fn now(&self) -> (usize, usize) {
        let g = self.map.lock().expect("users lock");
        let busiest = g.0.iter().filter(|(uid, _)| !self.admins.contains(uid)).map(|(_, e)| e.conns).max().unwrap_or(0);
        (g.1, busiest)
    }
}

/// One user connection, counted until it is dropped.
pub(crate) struct Slot {
    users: Arc<Users>,
    uid: u32,
    turns: Arc<Semaphore>,
}

impl Slot {
    /// Waits for one of the user's request turns ([`Limits::max_requests_per_user`]): one
    /// user's burst waits behind itself, not in front of other users.
    pub(crate) async fn turn(&self) -> Option<OwnedSemaphorePermit> {
        self.turns.clone().acquire_owned().await.ok()
    }
}

tokio::task_local! {
    /// The user's turn that the request being handled holds.
    static TURN: std::cell::RefCell<Option<OwnedSemaphorePermit>>;
}

/// Handles one request (`handling`) in `turn`, which [`give_back_turn`] may end early.
pub(crate) async fn in_turn<F: std::future::Future>(turn: Option<OwnedSemaphorePermit>, handling: F) -> F::Output {
    TURN.scope(std::cell::RefCell::new(turn), handling).await
}

/// Ends the current request's turn (if it holds one): it only waits for the disk now, for the
/// group commit that makes its change durable, which costs the controller nothing, so the
/// user's next request is handled meanwhile and can share that commit. Without this a user's
/// requests in flight would be at most its turns, and so would each commit's batch of them.
pub(crate) fn give_back_turn() {
    let _ = TURN.try_with(|t| t.borrow_mut().take());
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut g = self.users.map.lock().expect("users lock");
        let (map, total) = &mut *g;
        *total = total.saturating_sub(1);
        if let Some(e) = map.get_mut(&self.uid) {
            e.conns = e.conns.saturating_sub(1);
            if e.conns == 0 {
                map.remove(&self.uid);
            }
        }
    }
}

#[derive(Default)]
struct PendingInner {
    next: u64,
    /// Oldest first: id -> (source, its close signal).
    all: BTreeMap<u64, (IpAddr, Arc<Notify>)>,
    by_ip: HashMap<IpAddr, BTreeSet<u64>>,
}

impl PendingInner {
    fn remove(&mut self, id: u64) -> Option<Arc<Notify>> {
        let (ip, n) = self.all.remove(&id)?;
        if let Some(s) = self.by_ip.get_mut(&ip) {
            s.remove(&id);
            if s.is_empty() {
                self.by_ip.remove(&ip);
            }
        }
        Some(n)
    }
}

/// TCP connections not yet authenticated (in their TLS handshake, or with no request that
/// carried a credential or token yet), at most [`PENDING_PER_IP`] per source address and
/// [`PENDING_TOTAL`] in all. A new connection over either cap closes the oldest one of that
/// address (or of all), rather than being refused: an address is no identity (every local
/// user shares 127.0.0.1 with `tandem up`'s agents), so holding connections open gains an
/// attacker nothing, and an agent that connects is in at once.
pub(crate) struct Pending {
    inner: Mutex<PendingInner>,
    evicted: AtomicU64,
}

impl Pending {
    fn new() -> Pending {
        Pending { inner: Mutex::new(PendingInner::default()), evicted: AtomicU64::new(0) }
    }

    /// Enters a new connection from `ip`, closing the oldest over the caps.
    pub(crate) fn enter(self: &Arc<Self>, ip: IpAddr) -> PendingSlot {
        let mut g = self.inner.lock().expect("pending lock");
        let mut out = Vec::new();
        if let Some(oldest) = g.by_ip.get(&ip).filter(|s| s.len() >= PENDING_PER_IP).and_then(|s| s.first().copied()) {
            out.extend(g.remove(oldest));
        }
        if g.all.len() >= PENDING_TOTAL
            && let Some(oldest) = g.all.keys().next().copied()
        {
            out.extend(g.remove(oldest));
        }
        let id = g.next;
        g.next += 1;
        let close = Arc::new(Notify::new());
        g.all.insert(id, (ip, close.clone()));
        g.by_ip.entry(ip).or_default().insert(id);
        drop(g);
        for n in out {
            self.evicted.fetch_add(1, Ordering::Relaxed);
            n.notify_one();
        }
        PendingSlot { table: self.clone(), id, close }
    }

    fn len(&self) -> usize {
        self.inner.lock().expect("pending lock").all.len()
    }
}

/// A TCP connection's place in [`Pending`]: left when it authenticates or closes.
pub(crate) struct PendingSlot {
    table: Arc<Pending>,
    id: u64,
    /// Notified when a newer connection took its place: the connection is to close.
    pub(crate) close: Arc<Notify>,
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        self.table.inner.lock().expect("pending lock").remove(self.id);
    }
}

/// Why the controller closed connections itself.
#[derive(Clone, Copy)]
pub(crate) enum Closed {
    /// No request handled and no byte moved for the idle time.
    Idle,
    /// A TCP connection that did not authenticate within [`UNAUTHENTICATED_DEADLINE`].
    Unauthenticated,
    /// A TCP connection closed for a newer unauthenticated one over [`Pending`]'s caps.
    Evicted,
}

/// Everything the listeners share: the caps, the tables and the counters.
pub(crate) struct Gate {
    pub(crate) users: Arc<Users>,
    pub(crate) pending: Arc<Pending>,
    /// Open connections: Unix socket, TCP.
    open: [AtomicUsize; 2],
    closed: [AtomicU64; 3],
    limits: Limits,
}

/// Which listener a connection came in on.
#[derive(Clone, Copy)]
pub(crate) enum Listener {
    /// The Unix socket (users).
    Unix,
    /// The TCP port (agents, proxies, users with tokens).
    Tcp,
}

/// An open connection, counted until it is dropped.
pub(crate) struct Open<'a>(&'a AtomicUsize);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Gate {
    pub(crate) fn new(limits: Limits, owner: u32) -> Gate {
        Gate {
            users: Arc::new(Users::new(limits, owner)),
            pending: Arc::new(Pending::new()),
            open: Default::default(),
            closed: Default::default(),
            limits,
        }
    }

    /// Counts an open connection until the guard is dropped.
    pub(crate) fn open(&self, l: Listener) -> Open<'_> {
        let c = &self.open[l as usize];
        c.fetch_add(1, Ordering::Relaxed);
        Open(c)
    }

    /// Counts a connection the controller closed itself.
    pub(crate) fn closed(&self, why: Closed) {
        self.closed[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The counters, as Prometheus text.
    pub(crate) fn render(&self) -> String {
        let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
        let nofile = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).map_or(0, |(soft, _)| soft);
        let (users, busiest) = self.users.now();
        let u = &self.users;
        let open = |l: Listener| self.open[l as usize].load(Ordering::Relaxed);
        let closed = |c: Closed| self.closed[c as usize].load(Ordering::Relaxed);
        format!(
            "# HELP tandem_open_files Descriptors the controller holds (entries of /proc/self/fd).\n# TYPE tandem_open_files gauge\ntandem_open_files {fds}\n\
             # HELP tandem_open_files_limit The controller's descriptor limit (RLIMIT_NOFILE, soft).\n# TYPE tandem_open_files_limit gauge\ntandem_open_files_limit {nofile}\n\
             # HELP tandem_connections Open connections by listener.\n# TYPE tandem_connections gauge\ntandem_connections{{listener=\"unix\"}} {}\ntandem_connections{{listener=\"tcp\"}} {}\n\
             # HELP tandem_connections_unauthenticated TCP connections with no credential or token yet (TLS handshakes included).\n# TYPE tandem_connections_unauthenticated gauge\ntandem_connections_unauthenticated {}\n\
             # HELP tandem_user_connections Users' connections (Unix socket, and TCP with a user token).\n# TYPE tandem_user_connections gauge\ntandem_user_connections {users}\n\
             # HELP tandem_user_connections_busiest The most connections one ordinary user holds now.\n# TYPE tandem_user_connections_busiest gauge\ntandem_user_connections_busiest {busiest}\n\
             # HELP tandem_user_connections_peak The most connections one ordinary user has held at once since the start.\n# TYPE tandem_user_connections_peak gauge\ntandem_user_connections_peak {}\n\
             # HELP tandem_user_connections_limit An ordinary user's cap ([limits] max_connections_per_user).\n# TYPE tandem_user_connections_limit gauge\ntandem_user_connections_limit {}\n\
             # HELP tandem_connections_refused_total Connections refused at accept: a user at its cap, or users' connections at theirs.\n# TYPE tandem_connections_refused_total counter\ntandem_connections_refused_total{{reason=\"per_user\"}} {}\ntandem_connections_refused_total{{reason=\"total\"}} {}\n\
             # HELP tandem_connections_closed_total Connections the controller closed: idle, unauthenticated past the deadline, or the oldest unauthenticated for a newer one.\n# TYPE tandem_connections_closed_total counter\ntandem_connections_closed_total{{reason=\"idle\"}} {}\ntandem_connections_closed_total{{reason=\"unauthenticated\"}} {}\ntandem_connections_closed_total{{reason=\"evicted\"}} {}\n",
            open(Listener::Unix),
            open(Listener::Tcp),
            self.pending.len(),
            u.peak.load(Ordering::Relaxed),
            self.limits.max_connections_per_user,
            u.refused_user.load(Ordering::Relaxed),
            u.refused_total.load(Ordering::Relaxed),
            closed(Closed::Idle),
            closed(Closed::Unauthenticated),
            self.pending.evicted.load(Ordering::Relaxed) + closed(Closed::Evicted),
        )
    }
}

/// What a connection is doing: when a byte last moved, and how many requests are being
/// handled on it.
pub(crate) struct Activity {
    start: Instant,
    last_ms: AtomicU64,
    busy: AtomicUsize,
}

impl Activity {
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity { start: Instant::now(), last_ms: AtomicU64::new(0), busy: AtomicUsize::new(0) })
    }

    fn touch(&self) {
        self.last_ms.store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Marks a request being handled until the guard is dropped.
    pub(crate) fn busy(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::Relaxed);
        self.touch();
        Busy(self.clone())
    }

    /// Returns once no request has been handled and no byte moved for `idle`.
    pub(crate) async fn idle(&self, idle: Duration) {
        loop {
            let due = self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed)) + idle;
            if Instant::now() >= due {
                if self.busy.load(Ordering::Relaxed) == 0 {
                    return;
                }
                tokio::time::sleep(idle).await;
            } else {
                tokio::time::sleep_until(due.into()).await;
            }
        }
    }
}

/// A request being handled ([`Activity::busy`]).
pub(crate) struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection's byte stream, noting each read and write that moves bytes in its [`Activity`].
pub(crate) struct Watched<S> {
    inner: S,
    act: Arc<Activity>,
}

impl<S> Watched<S> {
    pub(crate) fn new(inner: S, act: Arc<Activity>) -> Watched<S> {
        Watched { inner, act }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Watched<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut tokio::io::ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.act.touch();
        }
        r
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Watched<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.act.touch();
        }
        r
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[std::io::IoSlice<'_>]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.act.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A request body that fails once [`BODY_DEADLINE`] (or the given time) has passed since the
/// head arrived: a client that sends a body slowly, or not at all, holds its connection and
/// its request turn no longer than that.
pub(crate) struct DeadlineBody<B> {
    inner: B,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl<B> DeadlineBody<B> {
    pub(crate) fn new(inner: B, within: Duration) -> DeadlineBody<B> {
        DeadlineBody { inner, sleep: Box::pin(tokio::time::sleep(within)) }
    }
}

/// The error a [`DeadlineBody`] ends with.
#[derive(Debug)]
pub(crate) struct BodyTooSlow;

impl std::fmt::Display for BodyTooSlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the request body did not arrive within {} s", BODY_DEADLINE.as_secs())
    }
}

impl std::error::Error for BodyTooSlow {}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<B> Body for DeadlineBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(f) => Poll::Ready(f.map(|r| r.map_err(Into::into))),
            Poll::Pending => match this.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTooSlow)))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(conns: u32, total: u32) -> Limits {
        Limits { max_connections_per_user: conns, max_requests_per_user: 2, max_user_connections: total }
    }

    #[test]
    fn a_user_holds_at_most_its_cap_and_a_slot_comes_back_when_dropped() {
        let u = Arc::new(Users::new(limits(2, 100), 1000));
        let a = u.take(7).unwrap();
        let _b = u.take(7).unwrap();
        assert_eq!(u.take(7).err(), Some(Refusal::PerUser { uid: 7, max: 2 }));
        // Another user is not affected; root and the controller's user have four times the cap.
        let _c = u.take(8).unwrap();
        let admin: Vec<Slot> = (0..8).map(|_| u.take(1000).unwrap()).collect();
        assert!(u.take(1000).is_err());
        drop(a);
        let _d = u.take(7).unwrap();
        assert_eq!(u.peak.load(Ordering::Relaxed), 2, "admins are not counted in the peak");
        drop(admin);
        assert_eq!(u.now(), (3, 2));
        assert_eq!(u.refused_user.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn users_connections_in_all_are_capped() {
        let u = Arc::new(Users::new(limits(10, 3), 1000));
        let held: Vec<Slot> = [1, 2, 3].iter().map(|&uid| u.take(uid).unwrap()).collect();
        let r = u.take(4).err().unwrap();
        assert_eq!((r.status(), r.clone()), (503, Refusal::Total { max: 3 }));
        let text = String::from_utf8(r.http()).unwrap();
        assert!(text.starts_with("HTTP/1.1 503 ") && text.contains("retry-after: 1\r\n"), "{text}");
        let body = text.split("\r\n\r\n").nth(1).unwrap();
        let e: wire::ApiError = serde_json::from_str(body).unwrap();
        assert!(e.error.contains("max_user_connections"), "{}", e.error);
        drop(held);
        assert!(u.take(4).is_ok());
    }

    #[test]
    fn a_users_requests_take_turns() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let u = Arc::new(Users::new(limits(10, 100), 1000));
            let (s1, s2) = (u.take(7).unwrap(), u.take(7).unwrap());
            let (t1, t2) = (s1.turn().await.unwrap(), s2.turn().await.unwrap());
            // The user's third request waits; another user's does not.
            assert!(tokio::time::timeout(Duration::from_millis(20), s1.turn()).await.is_err());
            let other = u.take(8).unwrap();
            assert!(other.turn().await.is_some());
            // A request that only waits for the disk gives its turn back: the third goes on.
            let waiting = in_turn(Some(t1), async {
                give_back_turn();
                tokio::time::sleep(Duration::from_millis(200)).await;
            });
            let third = async { tokio::time::timeout(Duration::from_millis(100), s1.turn()).await.ok().flatten() };
            let ((), got) = tokio::join!(waiting, third);
            assert!(got.is_some(), "the turn given back goes to the next request");
            // Outside a request, nothing to give back.
            give_back_turn();
            drop(t2);
        });
    }

    #[test]
    fn a_new_unauthenticated_connection_closes_the_oldest_of_its_address() {
        let p = Arc::new(Pending::new());
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let first = p.enter(a);
        let mut rest: Vec<PendingSlot> = (1..PENDING_PER_IP).map(|_| p.enter(a)).collect();
        let other = p.enter(b);
        assert_eq!(p.len(), PENDING_PER_IP + 1);
        let newest = p.enter(a);
        assert_eq!(p.len(), PENDING_PER_IP + 1);
        assert_eq!(p.evicted.load(Ordering::Relaxed), 1);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), first.close.notified()).await.expect("the oldest is told to close");
            assert!(tokio::time::timeout(Duration::from_millis(10), other.close.notified()).await.is_err());
            assert!(tokio::time::timeout(Duration::from_millis(10), newest.close.notified()).await.is_err());
        });
        drop(first);
        rest.clear();
        drop((other, newest));
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn unauthenticated_connections_in_all_are_capped_by_closing_the_oldest() {
        let p = Arc::new(Pending::new());
        let slots: Vec<PendingSlot> =
            (0..PENDING_TOTAL).map(|i| p.enter(IpAddr::from([127, 0, (i / 250) as u8, (i % 250) as u8 + 1]))).collect();
        let _new = p.enter("10.0.0.1".parse().unwrap());
        assert_eq!(p.len(), PENDING_TOTAL);
        assert_eq!(p.evicted.load(Ordering::Relaxed), 1);
        drop(slots);
    }

    #[test]
    fn a_slow_body_fails_at_its_deadline_and_a_prompt_one_does_not() {
        use http_body_util::BodyExt;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let full = http_body_util::Full::new(Bytes::from_static(b"{}"));
            let got = DeadlineBody::new(full, Duration::from_millis(50)).collect().await.unwrap().to_bytes();
            assert_eq!(&got[..], b"{}");
            let e = DeadlineBody::new(Never, Duration::from_millis(50)).collect().await.err().expect("the deadline passes");
            assert!(e.to_string().contains("did not arrive"), "{e}");
        });
    }

    /// A body whose bytes never come.
    struct Never;

    impl Body for Never {
        type Data = Bytes;
        type Error = std::io::Error;
        fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            Poll::Pending
        }
    }

    #[test]
    fn an_idle_connection_is_noticed_only_when_no_request_is_being_handled() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let a = Activity::new();
            let busy = a.busy();
            assert!(tokio::time::timeout(Duration::from_millis(300), a.idle(Duration::from_millis(50))).await.is_err());
            drop(busy);
            tokio::time::timeout(Duration::from_secs(30), a.idle(Duration::from_millis(50))).await.expect("idle once the request ended");
        });
    }
}
