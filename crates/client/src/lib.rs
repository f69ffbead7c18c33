//! Talking to the controller: a minimal HTTP/1.1 client over TLS, a Unix socket or (only for
//! development, `--insecure`) plain TCP (`TANDEM_SERVER=https://host:port` with the cluster CA
//! in `TANDEM_CA`, `unix:///path/to/tandem.sock`, or `http://host:port`), one connection per
//! request ([`send`]); and [`H2Pool`], HTTP/2 connections that carry many requests at once (an
//! agent's one connection, the proxy's, the simulated agents of `tandem bench agents`). Over
//! TLS the controller is verified against the cluster CA under [`wire::CONTROLLER_NAME`],
//! whatever address is dialled. Used by the CLI, the agent, the proxy and the benchmarks.
//!
//! It owns the connection, not its meaning: bodies are `wire`'s types, and it never decides
//! anything about jobs or nodes. It returns typed errors ([`Error`]), whose causes are their
//! `source`: print them with the chain (anyhow's `{:#}`), as the callers do.

pub mod stepio;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// What went wrong talking to the controller. Each message says what was being done; the
/// underlying error, where there is one, is its `source`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A `TANDEM_SERVER` value (or `--server`) that is no address.
    #[error("TANDEM_SERVER={value:?}: {why}")]
    BadTarget {
        /// The value given.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The controller could not be reached.
    #[error("cannot reach the controller at {target}")]
    Connect {
        /// `http://host:port` or `unix://path`.
        target: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A connection could not be opened from this side (no socket, no such source address, a
    /// name that resolves to nothing): a local problem, not an unreachable controller.
    #[error("cannot open a connection to {target}: {what}")]
    Local {
        /// `http://host:port`.
        target: String,
        /// What failed.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The cluster CA could not be read.
    #[error("cannot use {path} as the cluster CA (TANDEM_CA, --ca): {why}")]
    Ca {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// The TLS handshake with the controller failed (not the cluster's controller, or a CA
    /// that is not the cluster's).
    #[error("TLS with the controller at {target} failed")]
    Tls {
        /// `https://host:port`.
        target: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A plain-HTTP target answered something that is not HTTP: a TLS port (`tandem up`'s
    /// controller port, which `TANDEM_SERVER` unset points at).
    #[error(
        "{unset}{target} answered with something that is not plain HTTP (a TLS port, such as a controller's): set TANDEM_SERVER as `tandem up` printed (`source DATA/env`: unix://DATA/controller/tandem.sock), or use https://HOST:PORT with TANDEM_CA=DATA/ca.pem"
    )]
    NotPlainHttp {
        /// `http://host:port`.
        target: String,
        /// Says that `TANDEM_SERVER` was unset, when it was.
        unset: &'static str,
    },
    /// The connection failed while the request or reply was on it (hyper's message, as is).
    #[error(transparent)]
    Http(#[from] hyper::Error),
    /// The request could not be built (a header or path that HTTP does not allow).
    #[error(transparent)]
    Request(#[from] hyper::http::Error),
    /// The body could not be encoded as JSON.
    #[error(transparent)]
    Encode(serde_json::Error),
    /// The controller refused the request; the message is its own.
    #[error("{message}")]
    Refused {
        /// HTTP status.
        status: u16,
        /// The controller's message (`ApiError::error`), or the status and body.
        message: String,
    },
    /// The controller kept turning the connection away for load (too many connections) for
    /// [`BUSY_RETRY`].
    #[error("the controller at {target} is busy: turned away {tries} times over {secs} s ({message})")]
    Busy {
        /// `unix://path` or `https://host:port`.
        target: String,
        /// Tries made.
        tries: u32,
        /// Seconds spent.
        secs: u64,
        /// The controller's last word (or the connection's error).
        message: String,
    },
    /// A success reply whose body is not what was expected.
    #[error("unexpected reply: {body}")]
    Decode {
        /// The body, as text.
        body: String,
        /// Why it did not decode.
        #[source]
        source: serde_json::Error,
    },
}

/// What this crate returns.
pub type Result<T> = std::result::Result<T, Error>;

/// Where the controller is.
#[derive(Clone, Debug)]
pub enum Target {
    /// Plain TCP: host:port (`http://`, development only).
    Tcp(String),
    /// TLS over TCP: host:port, and the client configuration that trusts the cluster CA.
    Tls(String, Arc<rustls::ClientConfig>),
    /// Unix socket path.
    Unix(String),
    /// Several controllers, one of which leads (`TANDEM_SERVER=ADDR,ADDR...`): a request goes
    /// to the one that answered last, and moves on when that one cannot be reached or answers
    /// as a standby (with the leader's address, which it then follows).
    Several(Arc<Vec<Target>>),
}

use std::sync::Arc;

/// A TLS client configuration that trusts only the cluster CA in `ca` (a PEM file).
pub fn tls_config(ca: &std::path::Path) -> Result<Arc<rustls::ClientConfig>> {
    use rustls_pki_types::pem::PemObject;
    let bad = |why: String| Error::Ca { path: ca.display().to_string(), why };
    let certs: Vec<rustls_pki_types::CertificateDer<'static>> = rustls_pki_types::CertificateDer::pem_file_iter(ca)
        .map_err(|e| bad(e.to_string()))?
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("no certificate in it".into()));
    }
    let mut roots = rustls::RootCertStore::empty();
    for c in certs {
        roots.add(c).map_err(|e| bad(e.to_string()))?;
    }
    Ok(Arc::new(rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth()))
}

impl Target {
    /// Parses `https://host:port` (with the cluster CA from `TANDEM_CA`), `unix:///path` or
    /// `http://host:port`.
    pub fn parse(s: &str) -> Result<Target> {
        let ca = std::env::var_os("TANDEM_CA").map(std::path::PathBuf::from);
        Target::parse_with_ca(s, ca.as_deref())
    }

    /// Parses `https://host:port` (trusting the CA in `ca`, which it needs), `unix:///path` or
    /// `http://host:port`.
    pub fn parse_with_ca(s: &str, ca: Option<&std::path::Path>) -> Result<Target> {
        if s.contains(',') {
            let all = s.split(',').map(|one| Target::parse_with_ca(one.trim(), ca)).collect::<Result<Vec<_>>>()?;
            return Ok(Target::Several(Arc::new(all)));
        }
        if let Some(h) = s.strip_prefix("https://") {
            let h = h.trim_end_matches('/');
            if h.is_empty() || h.contains('/') {
                return Err(Error::BadTarget { value: s.into(), why: "expected https://host:port" });
            }
            let Some(ca) = ca else {
                return Err(Error::BadTarget { value: s.into(), why: "https:// needs the cluster CA (TANDEM_CA=DATA/ca.pem, or --ca)" });
            };
            return Ok(Target::Tls(h.to_string(), tls_config(ca)?));
        }
        if let Some(p) = s.strip_prefix("unix://") {
            if p.is_empty() {
                return Err(Error::BadTarget { value: s.into(), why: "unix:// needs a socket path" });
            }
            return Ok(Target::Unix(p.to_string()));
        }
        if let Some(h) = s.strip_prefix("http://") {
            let h = h.trim_end_matches('/');
            if h.is_empty() || h.contains('/') {
                return Err(Error::BadTarget { value: s.into(), why: "expected http://host:port" });
            }
            return Ok(Target::Tcp(h.to_string()));
        }
        Err(Error::BadTarget { value: s.into(), why: "expected https://host:port, unix:///path/to/tandem.sock or http://host:port" })
    }

    /// The address as a URL (`unix://path`, `https://host:port`, `http://host:port`).
    pub fn url(&self) -> String {
        match self {
            Target::Tcp(a) => format!("http://{a}"),
            Target::Tls(a, _) => format!("https://{a}"),
            Target::Unix(p) => format!("unix://{p}"),
            Target::Several(all) => all.iter().map(Target::url).collect::<Vec<_>>().join(","),
        }
    }

    /// The controllers it names (itself, for one).
    pub fn members(&self) -> Vec<Target> {
        match self {
            Target::Several(all) => all.to_vec(),
            one => vec![one.clone()],
        }
    }

    /// The target a standby's answer points at: the member with that address, or over TCP (the
    /// same scheme, with the same trust) the leader's address itself. `None` where it cannot be
    /// followed (a Unix socket's caller has no token for TCP).
    pub fn follow(&self, leader: &str) -> Option<Target> {
        if let Target::Several(all) = self {
            return all.iter().find_map(|t| t.follow(leader));
        }
        if self.url() == leader {
            return Some(self.clone());
        }
        match self {
            Target::Tcp(_) => leader.strip_prefix("http://").filter(|h| !h.is_empty() && !h.contains('/')).map(|h| Target::Tcp(h.into())),
            Target::Tls(_, cfg) => {
                leader.strip_prefix("https://").filter(|h| !h.is_empty() && !h.contains('/')).map(|h| Target::Tls(h.into(), cfg.clone()))
            }
            _ => None,
        }
    }

    /// From `TANDEM_SERVER`, defaulting to the default address.
    pub fn from_env() -> Result<Target> {
        Target::parse(&std::env::var("TANDEM_SERVER").unwrap_or_else(|_| "http://127.0.0.1:7200".into()))
    }
}

/// A response: status and body.
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Body.
    pub body: Bytes,
    /// On a standby controller's answer: the leader's address (`wire::LEADER_HEADER`).
    pub leader: Option<String>,
}

impl Reply {
    /// Whether a standby controller answered (503, naming the leader where one leads).
    pub fn standby(&self) -> bool {
        self.status == 503 && (self.leader.is_some() || self.error().contains("is a standby"))
    }
}

impl Reply {
    /// Decodes a JSON body, or turns an error body into an error.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T> {
        if self.status >= 400 {
            return Err(self.refused());
        }
        serde_json::from_slice(&self.body)
            .map_err(|source| Error::Decode { body: String::from_utf8_lossy(&self.body).into_owned(), source })
    }

    /// The site's job-submit policy's message to the user (`user_msg` of a submission's reply,
    /// an error's or a success's).
    pub fn user_msg(&self) -> Option<String> {
        #[derive(serde::Deserialize)]
        struct UserMsg {
            user_msg: Option<String>,
        }
        serde_json::from_slice::<UserMsg>(&self.body).ok().and_then(|m| m.user_msg)
    }

    /// The error message of an error reply.
    pub fn error(&self) -> String {
        serde_json::from_slice::<wire::ApiError>(&self.body)
            .map(|e| e.error)
            .unwrap_or_else(|_| format!("HTTP {}: {}", self.status, String::from_utf8_lossy(&self.body)))
    }

    /// Fails on an error status.
    pub fn ok(self) -> Result<Reply> {
        if self.status >= 400 {
            return Err(self.refused());
        }
        Ok(self)
    }

    fn refused(&self) -> Error {
        Error::Refused { status: self.status, message: self.error() }
    }
}

/// A fresh idempotency key for a submission (`wire::IDEMPOTENCY_HEADER`): 128 random bits.
pub fn idempotency_key() -> String {
    let mut b = [0u8; 16];
    kernel_random(&mut b);
    format!("{:032x}", u128::from_le_bytes(b))
}

/// Fills `b` from the kernel's generator (one `getrandom(2)`), or where that fails from the
/// thread's. A command makes one or two keys in its life: the thread's generator would first
/// probe the CPU's features (CPUID, which traps to the hypervisor on a virtual machine) and
/// seed itself, about 0.1 ms of each `sbatch` on this project's machines (BENCHMARKS 4.8).
pub fn kernel_random(b: &mut [u8]) {
    use rand::TryRng;
    if rand::rngs::SysRng.try_fill_bytes(b).is_err() {
        use rand::Rng;
        rand::rng().fill_bytes(b);
    }
}

/// One request to one controller (the first `t` names), tried once: no retry, no following
/// (`scontrol ping`'s look at each controller in turn).
pub async fn probe(t: &Target, method: &str, path: &str) -> Result<Reply> {
    let one = t.members().remove(0);
    send_once(&one, method, path, Bytes::new(), &[]).await.map(|(r, _)| r)
}

/// How long [`send`] keeps retrying a controller that turns the connection away for load.
pub const BUSY_RETRY: std::time::Duration = std::time::Duration::from_secs(30);

/// Sends one request. A controller that turns the connection away for load (an answer 429 or
/// 503 with `Retry-After`, sent before it read anything: the caller's cap of connections, or
/// users' in all; a Unix socket whose listen backlog is full; for a GET, a connection closed
/// before any answer) is tried again after a jittered pause that doubles from 20 ms up to 1 s,
/// for up to [`BUSY_RETRY`] in all; then [`Error::Busy`] says so.
pub async fn send(t: &Target, method: &str, path: &str, body: Option<&impl Serialize>, headers: &[(&str, &str)]) -> Result<Reply> {
    let bytes = match body {
        Some(b) => Bytes::from(serde_json::to_vec(b).map_err(Error::Encode)?),
        None => Bytes::new(),
    };
    send_for(BUSY_RETRY, t, method, path, bytes, headers).await
}

/// [`send`], retrying for `budget` at most.
async fn send_for(
    budget: std::time::Duration,
    t: &Target,
    method: &str,
    path: &str,
    bytes: Bytes,
    headers: &[(&str, &str)],
) -> Result<Reply> {
    let started = std::time::Instant::now();
    let mut pause = std::time::Duration::from_millis(20);
    let mut tries = 0u32;
    // The controller's last refusal message, for the final error.
    let mut last: Option<String> = None;
    let members = t.members();
    // A request that names itself for its retries may go again when its outcome is unknown.
    let keyed = headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(wire::IDEMPOTENCY_HEADER));
    // Such a request whose outcome is unknown goes on being retried (a controller restarting
    // refuses connections meanwhile) until it is answered or the budget is spent.
    let mut unsure = false;
    loop {
        tries += 1;
        let outcome = send_members(t, &members, method, path, &bytes, headers).await;
        let busy = match &outcome {
            Ok((r, true)) if r.status == 429 || r.status == 503 => {
                last = Some(r.error());
                r.error()
            }
            Err(Error::Connect { source, .. }) if source.kind() == std::io::ErrorKind::WouldBlock => source.to_string(),
            // Several controllers, none reachable: one is taking over.
            Err(Error::Connect { source, .. }) if members.len() > 1 || unsure => source.to_string(),
            // The refusal came before the request went out (hyper cancels a request whose
            // connection answered first): nothing was sent, so any method may go again.
            Err(Error::Http(e)) if e.is_canceled() => {
                last.clone().unwrap_or_else(|| "the controller turned the connection away before the request was sent".into())
            }
            Err(Error::Http(e)) if (method == "GET" || keyed) && closed_before_reply(e) => {
                unsure = keyed;
                e.to_string()
            }
            _ => return outcome.map(|(r, _)| r),
        };
        // Jittered: half to all of the pause, so refused clients do not come back together.
        let wait = pause.mul_f64(rand::random_range(0.5..=1.0));
        if started.elapsed() + wait > budget {
            return Err(Error::Busy { target: t.url(), tries, secs: started.elapsed().as_secs(), message: busy });
        }
        tokio::time::sleep(wait).await;
        pause = (pause * 2).min(std::time::Duration::from_secs(1));
    }
}

/// The member of each list of controllers that answered last (by the list's address), tried
/// first next time.
static ANSWERED: std::sync::Mutex<Option<(String, String)>> = std::sync::Mutex::new(None);

/// One try of [`send`] over the controllers `t` names: from the one that answered last, on to
/// the next while one cannot be reached (nothing was sent) or answers as a standby (nothing was
/// done), following a standby's word on who leads. The last outcome where none served.
async fn send_members(
    t: &Target,
    members: &[Target],
    method: &str,
    path: &str,
    bytes: &Bytes,
    headers: &[(&str, &str)],
) -> Result<(Reply, bool)> {
    let key = t.url();
    let first = ANSWERED.lock().ok().and_then(|a| a.as_ref().filter(|(k, _)| *k == key).map(|(_, m)| m.clone()));
    let mut order: Vec<Target> = members.to_vec();
    if let Some(i) = first.and_then(|f| order.iter().position(|m| m.url() == f)) {
        order.rotate_left(i);
    }
    let mut tried: Vec<String> = Vec::new();
    let mut i = 0;
    let mut outcome = None;
    while i < order.len() && tried.len() < members.len() + 2 {
        let m = order[i].clone();
        i += 1;
        if tried.contains(&m.url()) {
            continue;
        }
        tried.push(m.url());
        let o = send_once(&m, method, path, bytes.clone(), headers).await;
        match &o {
            Err(Error::Connect { source, .. }) if source.kind() != std::io::ErrorKind::WouldBlock => {}
            Ok((r, _)) if r.standby() => {
                // Next: the leader it names.
                if let Some(next) = r.leader.as_deref().and_then(|l| t.follow(l).or_else(|| m.follow(l))) {
                    order.insert(i, next);
                }
            }
            _ => {
                if members.len() > 1 || tried.len() > 1 {
                    *ANSWERED.lock().expect("lock") = Some((key, m.url()));
                }
                return o;
            }
        }
        outcome = Some(o);
    }
    outcome.expect("at least one member")
}

/// Whether the connection closed (or was reset) before any of the answer came.
fn closed_before_reply(e: &hyper::Error) -> bool {
    if e.is_incomplete_message() {
        return true;
    }
    let mut src = std::error::Error::source(e);
    while let Some(x) = src {
        if let Some(io) = x.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::ConnectionReset;
        }
        src = x.source();
    }
    false
}

/// One try of [`send`]: the reply, and whether it carried `Retry-After`.
async fn send_once(t: &Target, method: &str, path: &str, bytes: Bytes, headers: &[(&str, &str)]) -> Result<(Reply, bool)> {
    if let Target::Several(all) = t {
        return Box::pin(send_members(t, all, method, path, &bytes, headers)).await;
    }
    let mut req = Request::builder().method(method).uri(path).header("host", "tandem").header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let (Target::Tcp(_) | Target::Tls(..), Ok(tok)) = (t, std::env::var("TANDEM_TOKEN"))
        && !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
    {
        req = req.header("authorization", format!("Bearer {}", tok.trim()));
    }
    let (status, body, head) = connect_exchange(t, req.body(Full::new(bytes))?).await?;
    Ok((Reply { status, body, leader: head.leader }, head.retry))
}

/// One request on a connection of its own to `t`: the reply's status, body, and whether it
/// carried `Retry-After`.
async fn connect_exchange<B>(t: &Target, req: Request<B>) -> Result<(u16, Bytes, Head)>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match t {
        Target::Tcp(addr) => {
            let s =
                tokio::net::TcpStream::connect(addr).await.map_err(|source| Error::Connect { target: format!("http://{addr}"), source })?;
            s.set_nodelay(true).ok();
            exchange(NoSigPipe::new(s), req).await.map_err(|e| match e {
                Error::Http(h) if h.is_parse() => Error::NotPlainHttp {
                    target: format!("http://{addr}"),
                    unset: if std::env::var_os("TANDEM_SERVER").is_none() { "TANDEM_SERVER is not set, and its default " } else { "" },
                },
                e => e,
            })
        }
        Target::Tls(addr, cfg) => {
            let s = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|source| Error::Connect { target: format!("https://{addr}"), source })?;
            s.set_nodelay(true).ok();
            exchange(tls_connect(NoSigPipe::new(s), cfg.clone(), addr).await?, req).await
        }
        Target::Unix(p) => {
            let s = tokio::net::UnixStream::connect(p).await.map_err(|source| Error::Connect { target: format!("unix://{p}"), source })?;
            exchange(NoSigPipe::new(s), req).await
        }
        Target::Several(all) => {
            // A body that cannot be sent twice: to the member that answered last.
            let key = t.url();
            let last = ANSWERED.lock().ok().and_then(|a| a.as_ref().filter(|(k, _)| *k == key).map(|(_, m)| m.clone()));
            let m = last.and_then(|l| all.iter().find(|m| m.url() == l)).unwrap_or(&all[0]);
            Box::pin(connect_exchange(m, req)).await
        }
    }
}

/// The TLS handshake with the controller (verified as [`wire::CONTROLLER_NAME`]).
async fn tls_connect<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    s: S,
    cfg: Arc<rustls::ClientConfig>,
    addr: &str,
) -> Result<tokio_rustls::client::TlsStream<S>> {
    let name = rustls_pki_types::ServerName::try_from(wire::CONTROLLER_NAME).expect("a valid DNS name");
    tokio_rustls::TlsConnector::from(cfg).connect(name, s).await.map_err(|source| Error::Tls { target: format!("https://{addr}"), source })
}

/// A socket that a command's request is written to. Commands run with SIGPIPE's default
/// action (so `squeue | head` ends quietly), so a plain `write` to a connection the
/// controller has closed (it refused a body too large while it was still being sent) would
/// kill the command without a word. Its writes are `send` with `MSG_NOSIGNAL`: the peer's
/// close is EPIPE (or ECONNRESET), not a signal; and from then on the rest of the request is
/// dropped as if written, so the HTTP client goes on to read the answer the controller sent
/// before closing (its refusal) instead of failing on the write.
struct NoSigPipe<S> {
    inner: S,
    /// The peer stopped reading: writes are dropped.
    closed: bool,
}

impl<S> NoSigPipe<S> {
    fn new(inner: S) -> Self {
        NoSigPipe { inner, closed: false }
    }
}

/// The sockets [`NoSigPipe`] writes to: tokio's TCP and Unix streams.
trait Sock: tokio::io::AsyncRead + tokio::io::AsyncWrite + std::os::fd::AsRawFd + Unpin {
    fn poll_writable(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>>;
    fn try_send(&self, buf: &[u8]) -> std::io::Result<usize>;
}

macro_rules! sock {
    ($t:ty) => {
        impl Sock for $t {
            fn poll_writable(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
                self.poll_write_ready(cx)
            }
            fn try_send(&self, buf: &[u8]) -> std::io::Result<usize> {
                let fd = std::os::fd::AsRawFd::as_raw_fd(self);
                self.try_io(tokio::io::Interest::WRITABLE, || {
                    nix::sys::socket::send(fd, buf, nix::sys::socket::MsgFlags::MSG_NOSIGNAL).map_err(std::io::Error::from)
                })
            }
        }
    };
}
sock!(tokio::net::TcpStream);
sock!(tokio::net::UnixStream);

impl<S: Sock> tokio::io::AsyncRead for NoSigPipe<S> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: Sock> tokio::io::AsyncWrite for NoSigPipe<S> {
    fn poll_write(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>, buf: &[u8]) -> std::task::Poll<std::io::Result<usize>> {
        use std::task::Poll;
        let this = self.get_mut();
        loop {
            if this.closed {
                return Poll::Ready(Ok(buf.len()));
            }
            match this.inner.poll_writable(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {}
            }
            match this.inner.try_send(buf) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset) => this.closed = true,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_flush(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.closed {
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.closed {
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// One request on a fresh connection: the status, the body and whether `Retry-After` came.
/// What an answer's head says beyond its status.
struct Head {
    /// It carried `Retry-After`.
    retry: bool,
    /// A standby's word on who leads.
    leader: Option<String>,
}

/// The leader a standby's answer names.
fn leader_of(h: &hyper::HeaderMap) -> Option<String> {
    h.get(wire::LEADER_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string)
}

async fn exchange<S, B>(s: S, req: Request<B>) -> Result<(u16, Bytes, Head)>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let resp = tx.send_request(req).await?;
    let status = resp.status().as_u16();
    let head = Head { retry: resp.headers().contains_key("retry-after"), leader: leader_of(resp.headers()) };
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, body, head))
}

/// Sends one request whose body is what `reader` yields until its end (an agent's upload of a
/// task's output for `kubectl logs`), on a connection of its own, and returns the reply, which
/// the controller sends once it no longer wants the body.
pub async fn upload<R>(t: &Target, path: &str, headers: &[(&str, &str)], reader: R) -> Result<Reply>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    let mut req = Request::builder().method("POST").uri(path).header("host", "tandem").header("content-type", "application/octet-stream");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(ReadBody { reader, buf: vec![0; 32 << 10], done: false })?;
    let (status, body, head) = connect_exchange(t, req).await?;
    Ok(Reply { status, body, leader: head.leader })
}

/// A request body read from an `AsyncRead` as it comes (chunked on HTTP/1.1).
struct ReadBody<R> {
    reader: R,
    buf: Vec<u8>,
    done: bool,
}

impl<R: tokio::io::AsyncRead + Unpin> hyper::body::Body for ReadBody<R> {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<std::result::Result<hyper::body::Frame<Bytes>, std::io::Error>>> {
        use std::task::Poll;
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        let mut rb = tokio::io::ReadBuf::new(&mut this.buf);
        match std::pin::Pin::new(&mut this.reader).poll_read(cx, &mut rb) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => {
                this.done = true;
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(Ok(())) if rb.filled().is_empty() => {
                this.done = true;
                Poll::Ready(None)
            }
            Poll::Ready(Ok(())) => Poll::Ready(Some(Ok(hyper::body::Frame::data(Bytes::copy_from_slice(rb.filled()))))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

/// HTTP/2 over TLS (ALPN `h2`) or, for development, cleartext TCP (prior knowledge):
/// `conns` connections, each carrying many requests at once, as a node-side proxy or a process
/// hosting many agents would. Request `i` goes on connection `i % conns`; a closed connection is
/// reopened on its next use. Connections are opened from the given local source addresses in
/// turn (several 127.0.0.x addresses spread them over more port ranges).
pub struct H2Pool {
    addr: String,
    tls: Option<Arc<rustls::ClientConfig>>,
    sources: Vec<std::net::IpAddr>,
    slots: Vec<tokio::sync::Mutex<Option<hyper::client::conn::http2::SendRequest<Full<Bytes>>>>>,
    opened: std::sync::atomic::AtomicU64,
}

impl H2Pool {
    /// A pool of `conns` connections (opened lazily) to `addr` (`host:port`), over TLS when
    /// `tls` is given (the configuration that trusts the cluster CA).
    pub fn new(addr: &str, tls: Option<Arc<rustls::ClientConfig>>, conns: usize, sources: Vec<std::net::IpAddr>) -> H2Pool {
        let tls = tls.map(|c| {
            let mut c = (*c).clone();
            c.alpn_protocols = vec![b"h2".to_vec()];
            Arc::new(c)
        });
        H2Pool {
            addr: addr.to_string(),
            tls,
            sources,
            slots: (0..conns.max(1)).map(|_| tokio::sync::Mutex::new(None)).collect(),
            opened: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Connections in the pool.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the pool has no connection slot (never: `new` makes at least one).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Connections opened so far (reopenings included).
    pub fn opened(&self) -> u64 {
        self.opened.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn conn(&self, i: usize) -> Result<hyper::client::conn::http2::SendRequest<Full<Bytes>>> {
        let k = i % self.slots.len();
        let mut slot = self.slots[k].lock().await;
        if let Some(tx) = slot.as_ref()
            && !tx.is_closed()
        {
            return Ok(tx.clone());
        }
        let target = || format!("{}://{}", if self.tls.is_some() { "https" } else { "http" }, self.addr);
        let local = |what| move |source| Error::Local { target: target(), what, source };
        let remote: std::net::SocketAddr =
            tokio::net::lookup_host(&self.addr)
                .await
                .map_err(local("cannot resolve the address"))?
                .next()
                .ok_or_else(|| local("cannot resolve the address")(std::io::Error::new(std::io::ErrorKind::NotFound, "no address")))?;
        let sock = if remote.is_ipv4() { tokio::net::TcpSocket::new_v4() } else { tokio::net::TcpSocket::new_v6() }
            .map_err(local("cannot make a socket"))?;
        if !self.sources.is_empty() {
            sock.bind(std::net::SocketAddr::new(self.sources[k % self.sources.len()], 0))
                .map_err(local("cannot bind the source address"))?;
        }
        let s = sock.connect(remote).await.map_err(|source| Error::Connect { target: target(), source })?;
        s.set_nodelay(true).ok();
        let mut b = hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
        b.initial_stream_window_size(1 << 20).initial_connection_window_size(8 << 20);
        let tx = match &self.tls {
            Some(cfg) => {
                let (tx, conn) = b.handshake(TokioIo::new(tls_connect(s, cfg.clone(), &self.addr).await?)).await?;
                tokio::spawn(async move {
                    let _ = conn.await;
                });
                tx
            }
            None => {
                let (tx, conn) = b.handshake(TokioIo::new(s)).await?;
                tokio::spawn(async move {
                    let _ = conn.await;
                });
                tx
            }
        };
        self.opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *slot = Some(tx.clone());
        Ok(tx)
    }

    /// Sends one request on connection `i % conns`.
    pub async fn send(&self, i: usize, method: &str, path: &str, body: Option<&impl Serialize>, headers: &[(&str, &str)]) -> Result<Reply> {
        let bytes = match body {
            Some(b) => Bytes::from(serde_json::to_vec(b).map_err(Error::Encode)?),
            None => Bytes::new(),
        };
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut req =
            Request::builder().method(method).uri(format!("{scheme}://{}{path}", self.addr)).header("content-type", "application/json");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(bytes))?;
        let mut tx = self.conn(i).await?;
        tx.ready().await?;
        let resp = tx.send_request(req).await?;
        let status = resp.status().as_u16();
        let leader = leader_of(resp.headers());
        let body = resp.into_body().collect().await?.to_bytes();
        Ok(Reply { status, body, leader })
    }
}

/// A daemon's link to the controller (an agent's, the proxy's): over TCP or TLS one HTTP/2
/// connection, kept open and reopened when it closes, that carries every request (no
/// handshake per heartbeat); over a Unix socket a connection per request.
pub struct Conn {
    target: Target,
    /// The controller requests go to now (of `target`'s, or one a standby named), with its
    /// connection where it is over TCP.
    current: std::sync::Mutex<(Target, Option<Arc<H2Pool>>)>,
}

/// The persistent connection to `t`, where it is over TCP.
fn pool_of(t: &Target) -> Option<Arc<H2Pool>> {
    match t {
        Target::Tcp(a) => Some(Arc::new(H2Pool::new(a, None, 1, Vec::new()))),
        Target::Tls(a, cfg) => Some(Arc::new(H2Pool::new(a, Some(cfg.clone()), 1, Vec::new()))),
        Target::Unix(_) | Target::Several(_) => None,
    }
}

impl Conn {
    /// A link to `target`; nothing is opened until the first request.
    pub fn new(target: Target) -> Conn {
        let first = target.members().remove(0);
        let pool = pool_of(&first);
        Conn { target, current: std::sync::Mutex::new((first, pool)) }
    }

    /// Where it goes.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The controller it sends to now.
    pub fn current(&self) -> Target {
        self.current.lock().expect("lock").0.clone()
    }

    /// Sends one request: to the controller that answered last; where it cannot be reached
    /// (nothing was sent) or answers as a standby (nothing was done), on to the leader the
    /// standby names, or to the next of several, each once. Where none serves, the last
    /// outcome (the caller's own retry comes later).
    pub async fn send(&self, method: &str, path: &str, body: Option<&impl Serialize>, headers: &[(&str, &str)]) -> Result<Reply> {
        let members = self.target.members();
        let mut outcome = None;
        for _ in 0..members.len() + 2 {
            let (cur, pool) = self.current.lock().expect("lock").clone();
            let o = match &pool {
                Some(p) => p.send(0, method, path, body, headers).await,
                None => send(&cur, method, path, body, headers).await,
            };
            let next = match &o {
                Err(Error::Connect { .. }) if members.len() > 1 => {
                    let i = members.iter().position(|m| m.url() == cur.url()).map_or(0, |i| (i + 1) % members.len());
                    Some(members[i].clone())
                }
                Ok(r) if r.standby() => match r.leader.as_deref().and_then(|l| self.target.follow(l).or_else(|| cur.follow(l))) {
                    Some(t) if t.url() != cur.url() => Some(t),
                    _ if members.len() > 1 => {
                        let i = members.iter().position(|m| m.url() == cur.url()).map_or(0, |i| (i + 1) % members.len());
                        Some(members[i].clone())
                    }
                    _ => None,
                },
                _ => None,
            };
            let Some(next) = next else { return o };
            let pool = pool_of(&next);
            *self.current.lock().expect("lock") = (next, pool);
            outcome = Some(o);
        }
        outcome.expect("one try at least")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn keys_are_random_hex_of_their_length() {
        let hex = |k: &str, n: usize| k.len() == n && k.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        let (a, b) = (idempotency_key(), idempotency_key());
        assert!(hex(&a, 32) && hex(&b, 32) && a != b, "{a} {b}");
        let (c, d) = (crate::stepio::new_key(), crate::stepio::new_key());
        assert!(hex(&c, 64) && hex(&d, 64) && c != d, "{c} {d}");
        let mut z = [0u8; 64];
        kernel_random(&mut z);
        assert!(z.iter().any(|&x| x != 0));
    }

    /// A controller stand-in on a Unix socket: answers the first `refuse` connections with the
    /// controller's refusal (429, `Retry-After`, without reading the request), the rest with
    /// 200 `{}`; returns the socket path and a counter of connections.
    fn stand_in(tag: &str, refuse: usize) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let path = std::env::temp_dir().join(format!("tandem-client-{tag}-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let n = seen.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                let i = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i < refuse {
                    let body = r#"{"error":"too many connections: uid 7 already holds 2 connections"}"#;
                    let _ = write!(
                        s,
                        "HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    continue; // closed with the request unread
                }
                let mut buf = [0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => got.extend_from_slice(&buf[..k]),
                    }
                }
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}");
            }
        });
        (path.display().to_string(), seen)
    }

    #[test]
    fn a_client_turned_away_backs_off_and_gets_through() {
        let (path, seen) = stand_in("retry", 3);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let r = rt.block_on(send(&Target::Unix(path.clone()), "POST", "/v1/jobs", Some(&serde_json::json!({"a": 1})), &[])).unwrap();
        assert_eq!((r.status, &r.body[..]), (200, &b"{}"[..]));
        assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 4, "three refusals, then served");
        std::fs::remove_file(path).ok();
    }

    #[test]
    fn a_client_turned_away_for_its_whole_budget_says_so() {
        let (path, seen) = stand_in("busy", usize::MAX);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let e = rt
            .block_on(send_for(std::time::Duration::from_millis(300), &Target::Unix(path.clone()), "GET", "/v1/jobs", Bytes::new(), &[]))
            .err()
            .expect("still refused");
        let msg = e.to_string();
        assert!(matches!(e, Error::Busy { .. }), "{msg}");
        assert!(msg.contains("is busy") && msg.contains(&path), "{msg}");
        assert!(seen.load(std::sync::atomic::Ordering::SeqCst) >= 2, "it tried again");
        std::fs::remove_file(path).ok();
    }
}
