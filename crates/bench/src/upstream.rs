//! `tandem __upstream`: a small, fast HTTP server used as a replica by `tandem bench proxy` and
//! the proxy's tests (hidden from help). It prints `listening on ADDR` first, then serves:
//! - `/echo...`: a text body naming the server, method, path and query, Host, X-Forwarded-For
//!   and the request body's length;
//! - `/stream?n=N&ms=M`: N chunks `chunk I` with M ms between them (a token stream);
//! - `/hold/KEY`: `chunk 0`, then `chunk 1` once `/release/KEY` has been asked for (at most
//!   120 s later): a request that stays in flight exactly as long as a test needs;
//! - `/release/KEY`: releases the holds named KEY (now and later), answering `released KEY`;
//! - `/status/CODE`: an empty answer with that status;
//! - `/fail-on/NAME/CODE`: that status from the server named NAME, `hello` from the others;
//! - anything else: `hello from NAME` (the benchmark's request).

use std::convert::Infallible;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

/// The argument `main` recognises for this hidden command.
pub const UPSTREAM_CMD: &str = "__upstream";

/// The keys `/release/KEY` has named.
static RELEASED: std::sync::LazyLock<tokio::sync::watch::Sender<std::collections::BTreeSet<String>>> =
    std::sync::LazyLock::new(|| tokio::sync::watch::Sender::new(std::collections::BTreeSet::new()));

type Out = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn full(b: impl Into<Bytes>) -> Out {
    Full::new(b.into()).boxed()
}

async fn serve(name: std::sync::Arc<str>, req: Request<Incoming>) -> Result<Response<Out>, Infallible> {
    let path = req.uri().path().to_string();
    if path.starts_with("/echo") {
        let host = req.headers().get("host").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let xff = req.headers().get("x-forwarded-for").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let method = req.method().to_string();
        let pq = req.uri().path_and_query().map(|p| p.as_str().to_string()).unwrap_or_default();
        let len = req.into_body().collect().await.map(|b| b.to_bytes().len()).unwrap_or(0);
        let text = format!("server={name}\nmethod={method}\npath={pq}\nhost={host}\nxff={xff}\nbody={len}\n");
        return Ok(Response::new(full(text)));
    }
    if let Some(code) = path.strip_prefix("/status/") {
        let mut r = Response::new(full(Bytes::new()));
        *r.status_mut() = code.parse::<u16>().ok().and_then(|c| StatusCode::from_u16(c).ok()).unwrap_or(StatusCode::BAD_REQUEST);
        return Ok(r);
    }
    if let Some((who, code)) = path.strip_prefix("/fail-on/").and_then(|r| r.split_once('/'))
        && who == &*name
    {
        let mut r = Response::new(full(format!("{name} fails on purpose\n")));
        *r.status_mut() = code.parse::<u16>().ok().and_then(|c| StatusCode::from_u16(c).ok()).unwrap_or(StatusCode::BAD_REQUEST);
        return Ok(r);
    }
    if let Some(key) = path.strip_prefix("/release/") {
        RELEASED.send_modify(|k| {
            k.insert(key.to_string());
        });
        return Ok(Response::new(full(format!("released {key}\n"))));
    }
    if let Some(key) = path.strip_prefix("/hold/") {
        let key = key.to_string();
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
        tokio::spawn(async move {
            if tx.send(Ok(Frame::data(Bytes::from_static(b"chunk 0\n")))).await.is_err() {
                return;
            }
            let mut w = RELEASED.subscribe();
            let _ = tokio::time::timeout(Duration::from_secs(120), w.wait_for(|k| k.contains(&key))).await;
            let _ = tx.send(Ok(Frame::data(Bytes::from_static(b"chunk 1\n")))).await;
        });
        return Ok(Response::new(ChannelBody(rx).boxed()));
    }
    if path == "/stream" {
        let q = req.uri().query().unwrap_or("");
        let get = |k: &str, d: u64| {
            q.split('&').find_map(|kv| kv.strip_prefix(k).and_then(|v| v.strip_prefix('='))).and_then(|v| v.parse().ok()).unwrap_or(d)
        };
        let (n, ms) = (get("n", 3), get("ms", 100));
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
        tokio::spawn(async move {
            for i in 0..n {
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                if tx.send(Ok(Frame::data(Bytes::from(format!("chunk {i}\n"))))).await.is_err() {
                    return;
                }
            }
        });
        return Ok(Response::new(ChannelBody(rx).boxed()));
    }
    let mut r = Response::new(full(format!("hello from {name}\n")));
    r.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("text/plain"));
    Ok(r)
}

/// Frames from a channel, as a body.
struct ChannelBody(tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, Infallible>>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx)
    }
}

/// Runs the server until killed. `args`: `--port P` (0: any), `--bind IP` (default
/// 127.0.0.1), `--name NAME`, `--threads N`.
pub fn run(args: &[String]) -> Result<()> {
    let mut port = 0u16;
    let mut bind: std::net::IpAddr = std::net::Ipv4Addr::LOCALHOST.into();
    let mut name = None;
    let mut threads = 1usize;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().with_context(|| format!("{a} needs a value"))?;
        match a.as_str() {
            "--port" => port = v.parse().context("--port")?,
            "--bind" => bind = v.parse().context("--bind")?,
            "--name" => name = Some(v.clone()),
            "--threads" => threads = v.parse().context("--threads")?,
            _ => anyhow::bail!("unknown option {a}"),
        }
    }
    let rt = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()?
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()?
    };
    rt.block_on(async move {
        let l = tokio::net::TcpListener::bind((bind, port)).await?;
        let addr = l.local_addr()?;
        let name: std::sync::Arc<str> = name.unwrap_or_else(|| addr.port().to_string()).into();
        println!("listening on {addr}");
        use std::io::Write as _;
        std::io::stdout().flush().ok();
        let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        builder.http1().timer(TokioTimer::new());
        loop {
            let (s, _) = match l.accept().await {
                Ok(x) => x,
                Err(_) => continue,
            };
            s.set_nodelay(true).ok();
            let name = name.clone();
            let conn = builder.serve_connection(TokioIo::new(s), hyper::service::service_fn(move |r| serve(name.clone(), r))).into_owned();
            tokio::spawn(async move {
                let _ = conn.await;
            });
        }
    })
}
