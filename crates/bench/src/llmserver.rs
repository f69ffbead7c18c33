//! `tandem __llm`: an LLM server stand-in with an OpenAI-compatible API, for the proxy's tests
//! and `tandem bench llm` (hidden from help). Its model, cache and batching are `llmsim`'s
//! (the rules and the chat template are documented there); this file is the HTTP face and the
//! clock. It prints `listening on ADDR` first, then serves:
//! - `POST /v1/completions` (`model`, `prompt`: a string or a list of one string, `max_tokens`
//!   default 16, `stream`, `stream_options.include_usage`; other fields are accepted and
//!   ignored: the output is greedy whatever the temperature);
//! - `POST /v1/chat/completions` (`model`, `messages` with `role` and `content`: a string or a
//!   list of `{"type":"text","text":...}` parts; `max_tokens` or `max_completion_tokens`,
//!   `stream`, `add_generation_prompt` default true, `continue_final_message` default false);
//! - streams as server-sent events in OpenAI's chunk format (`data: {...}` per token, a last
//!   chunk with `finish_reason`, with `include_usage` a chunk with `usage` and no choices, then
//!   `data: [DONE]`);
//! - `GET /v1/models`, `GET /health`, `GET /metrics` (Prometheus text with vLLM's names:
//!   `vllm:num_requests_running`, `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc`,
//!   `vllm:prefix_cache_queries_total`, `vllm:prefix_cache_hits_total`, plus
//!   `vllm:prompt_tokens_total`, `vllm:generation_tokens_total` and `vllm:request_success_total`).
//!
//! Bad requests get OpenAI's error object (`{"error":{"message","type","param","code"}}`): 400
//! for a body that is not JSON or not an object, a missing or mistyped field, an empty prompt,
//! or a prompt plus `max_tokens` over the context length (`--max-model-len`, vLLM's message);
//! 413 for a body over `--max-body` bytes; 404 for another model or path; 405 for another
//! method. A client that goes away cancels its request.
//!
//! Flags (defaults are the issue's fixed parameters): `--port P` (0: any), `--bind IP`,
//! `--name NAME`, `--model NAME` (`tandem-llm`), `--block-tokens 16`, `--cache-blocks 1024`,
//! `--max-batch 32`, `--prefill-ms-per-token 0.05`, `--decode-ms 10`, `--max-model-len 32768`,
//! `--max-body 4194304`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::llmsim::{Engine, EngineConfig, chat_prompt, token_count};

/// The argument `main` recognises for this hidden command.
pub const LLM_CMD: &str = "__llm";

/// Settings of one stand-in.
#[derive(Clone, Debug)]
struct Settings {
    model: String,
    engine: EngineConfig,
    max_model_len: usize,
    max_body: usize,
}

/// A token for a request, or its end.
#[derive(Clone, Copy, Debug)]
struct Tok {
    text: [u8; 4],
    last: bool,
}

struct Inner {
    engine: Engine,
    outs: HashMap<u64, mpsc::UnboundedSender<Tok>>,
    prompt_tokens: u64,
    generation_tokens: u64,
    finished: u64,
}

struct Shared {
    s: Settings,
    inner: Mutex<Inner>,
    wake: tokio::sync::Notify,
    ids: AtomicU64,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn metrics(&self) -> String {
        let i = self.lock();
        let m = self.s.model.replace('\\', "\\\\").replace('"', "\\\"");
        let mut out = String::new();
        let rows: [(&str, &str, &str, String); 8] = [
            ("vllm:num_requests_running", "gauge", "Requests in the batch.", i.engine.running().to_string()),
            ("vllm:num_requests_waiting", "gauge", "Requests waiting for a slot in the batch.", i.engine.waiting().to_string()),
            ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage, 1 means 100 percent.", format!("{}", i.engine.kv_usage())),
            ("vllm:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", i.engine.queries().to_string()),
            ("vllm:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.", i.engine.hits().to_string()),
            ("vllm:prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", i.prompt_tokens.to_string()),
            ("vllm:generation_tokens_total", "counter", "Tokens generated.", i.generation_tokens.to_string()),
            ("vllm:request_success_total", "counter", "Requests finished.", i.finished.to_string()),
        ];
        for (name, kind, help, v) in rows {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{model_name=\"{m}\"}} {v}");
        }
        let _ = writeln!(out, "# HELP tandem_llm_cached_blocks Blocks the prefix cache holds.\n# TYPE tandem_llm_cached_blocks gauge");
        let _ = writeln!(out, "tandem_llm_cached_blocks {}", i.engine.cached_blocks());
        out
    }
}

/// Runs the engine: a step, a wait as long as it costs, its tokens to their requests.
async fn drive(sh: Arc<Shared>) {
    let mut prev_end: Option<tokio::time::Instant> = None;
    loop {
        let cost = sh.lock().engine.begin_step();
        let Some(us) = cost else {
            prev_end = None;
            sh.wake.notified().await;
            continue;
        };
        // Back to back steps follow each other's deadline, so timer lateness does not add up.
        let start = prev_end.filter(|p| p.elapsed() < Duration::from_millis(2)).unwrap_or_else(tokio::time::Instant::now);
        let end = start + Duration::from_micros(us);
        tokio::time::sleep_until(end).await;
        prev_end = Some(end);
        let mut i = sh.lock();
        let outs = i.engine.end_step();
        let mut gone = Vec::new();
        i.generation_tokens += outs.len() as u64;
        for o in outs {
            let sent = i.outs.get(&o.id).is_some_and(|tx| tx.send(Tok { text: o.token, last: o.last }).is_ok());
            if o.last {
                i.outs.remove(&o.id);
                i.finished += 1;
            } else if !sent {
                gone.push(o.id);
            }
        }
        for id in gone {
            i.outs.remove(&id);
            i.engine.cancel(id);
        }
    }
}

type Out = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// An error as OpenAI's API writes it.
fn error(status: StatusCode, msg: impl Into<String>) -> Response<Out> {
    let kind = match status {
        StatusCode::NOT_FOUND => "not_found_error",
        StatusCode::PAYLOAD_TOO_LARGE => "request_too_large",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        _ => "invalid_request_error",
    };
    let body = json!({"error": {"message": msg.into(), "type": kind, "param": null, "code": status.as_u16()}});
    let mut r = json_response(&body);
    *r.status_mut() = status;
    r
}

fn json_response(v: &Value) -> Response<Out> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())).boxed());
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// Which API a request came through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Api {
    Completions,
    Chat,
}

/// A request read and checked.
#[derive(Debug)]
struct Parsed {
    prompt: String,
    max_tokens: usize,
    stream: bool,
    include_usage: bool,
}

/// Reads an OpenAI request body (`Err`: the message of a 400).
fn parse(api: Api, body: &[u8], s: &Settings) -> Result<Parsed, (StatusCode, String)> {
    let bad = |m: String| (StatusCode::BAD_REQUEST, m);
    let v: Value = serde_json::from_slice(body).map_err(|e| bad(format!("the request body is not JSON: {e}")))?;
    let Some(o) = v.as_object() else { return Err(bad("the request body must be a JSON object".into())) };
    match o.get("model") {
        None => return Err(bad("missing field `model`".into())),
        Some(Value::String(m)) if *m == s.model => {}
        Some(Value::String(m)) => return Err((StatusCode::NOT_FOUND, format!("The model `{m}` does not exist."))),
        Some(_) => return Err(bad("`model` must be a string".into())),
    }
    let flag = |k: &str, d: bool| match o.get(k) {
        None | Some(Value::Null) => Ok(d),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad(format!("`{k}` must be true or false"))),
    };
    let stream = flag("stream", false)?;
    let include_usage = match o.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(so)) => match so.get("include_usage") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(bad("`stream_options.include_usage` must be true or false".into())),
        },
        Some(_) => return Err(bad("`stream_options` must be an object".into())),
    };
    let max_key = if api == Api::Chat && o.get("max_completion_tokens").is_some_and(|v| !v.is_null()) {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    let max_tokens = match o.get(max_key) {
        None | Some(Value::Null) => 16,
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => n as usize,
            _ => return Err(bad(format!("`{max_key}` must be an integer of at least 1"))),
        },
    };
    let prompt = match api {
        Api::Completions => match o.get("prompt") {
            None => return Err(bad("missing field `prompt`".into())),
            Some(Value::String(p)) => p.clone(),
            Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => a[0].as_str().unwrap_or_default().to_string(),
            Some(_) => return Err(bad("`prompt` must be a string (or a list of one string)".into())),
        },
        Api::Chat => {
            let Some(msgs) = o.get("messages") else { return Err(bad("missing field `messages`".into())) };
            let Some(msgs) = msgs.as_array() else { return Err(bad("`messages` must be a list".into())) };
            let mut flat: Vec<(String, String)> = Vec::with_capacity(msgs.len());
            for (i, m) in msgs.iter().enumerate() {
                let Some(role) = m.get("role").and_then(Value::as_str) else {
                    return Err(bad(format!("messages[{i}]: missing or non-string `role`")));
                };
                let content = match m.get("content") {
                    Some(Value::String(c)) => c.clone(),
                    Some(Value::Array(parts)) => {
                        let mut c = String::new();
                        for p in parts {
                            match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                                (Some("text"), Some(t)) => c.push_str(t),
                                _ => return Err(bad(format!("messages[{i}]: only text content parts are supported"))),
                            }
                        }
                        c
                    }
                    None | Some(Value::Null) => String::new(),
                    Some(_) => return Err(bad(format!("messages[{i}]: `content` must be a string or a list of parts"))),
                };
                flat.push((role.to_string(), content));
            }
            let add = flag("add_generation_prompt", true)?;
            let cont = flag("continue_final_message", false)?;
            // vLLM: continuing the final message implies no generation prompt unless asked.
            let add = add && !(cont && o.get("add_generation_prompt").is_none());
            let refs: Vec<(&str, &str)> = flat.iter().map(|(r, c)| (r.as_str(), c.as_str())).collect();
            chat_prompt(&refs, add, cont).map_err(|e| bad(e.0.to_string()))?
        }
    };
    if prompt.is_empty() {
        return Err(bad("the prompt is empty".into()));
    }
    let tokens = token_count(prompt.len());
    if tokens + max_tokens > s.max_model_len {
        return Err(bad(format!(
            "This model's maximum context length is {} tokens. However, you requested {} tokens ({tokens} in the prompt, {max_tokens} for the completion). Please reduce the length of the prompt or the completion.",
            s.max_model_len,
            tokens + max_tokens
        )));
    }
    Ok(Parsed { prompt, max_tokens, stream, include_usage })
}

/// What every chunk and answer of one request shares.
struct Meta {
    api: Api,
    id: String,
    created: u64,
    model: String,
    prompt_tokens: usize,
    include_usage: bool,
}

impl Meta {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.api, chunk) {
            (Api::Completions, _) => "text_completion",
            (Api::Chat, false) => "chat.completion",
            (Api::Chat, true) => "chat.completion.chunk",
        }
    }

    fn usage(&self, completion: usize) -> Value {
        json!({"prompt_tokens": self.prompt_tokens, "completion_tokens": completion, "total_tokens": self.prompt_tokens + completion})
    }

    /// One `data:` event holding `choice` (or no choice, with `usage`).
    fn chunk(&self, choice: Option<Value>, usage: Option<Value>) -> String {
        let mut v = json!({"id": self.id, "object": self.object(true), "created": self.created, "model": self.model,
            "choices": choice.map_or_else(Vec::new, |c| vec![c])});
        if let Some(u) = usage {
            v["usage"] = u;
        }
        format!("data: {v}\n\n")
    }

    fn token_choice(&self, text: &str, finish: Option<&str>) -> Value {
        match self.api {
            Api::Completions => json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish}),
            Api::Chat if finish.is_some() => json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": finish}),
            Api::Chat => json!({"index": 0, "delta": {"content": text}, "logprobs": null, "finish_reason": null}),
        }
    }
}

/// A stream's body: the engine's tokens as server-sent events.
struct Sse {
    rx: mpsc::UnboundedReceiver<Tok>,
    meta: Meta,
    started: bool,
    sent: usize,
    done: bool,
}

impl hyper::body::Body for Sse {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let me = &mut *self;
        if me.done {
            return Poll::Ready(None);
        }
        if !me.started {
            me.started = true;
            if me.meta.api == Api::Chat {
                let c = json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null});
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(me.meta.chunk(Some(c), None))))));
            }
        }
        match me.rx.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            // The engine never drops a live request's sender: this is the server going down.
            Poll::Ready(None) => {
                me.done = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(t)) => {
                me.sent += 1;
                let text = std::str::from_utf8(&t.text).unwrap_or_default();
                let mut out = me.meta.chunk(Some(me.meta.token_choice(text, None)), None);
                if t.last {
                    me.done = true;
                    out.push_str(&me.meta.chunk(Some(me.meta.token_choice("", Some("length"))), None));
                    if me.meta.include_usage {
                        out.push_str(&me.meta.chunk(None, Some(me.meta.usage(me.sent))));
                    }
                    out.push_str("data: [DONE]\n\n");
                }
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))))
            }
        }
    }
}

async fn completion(sh: Arc<Shared>, api: Api, req: Request<Incoming>) -> Response<Out> {
    // A declared length over the limit is refused before anything is read.
    if hyper::body::Body::size_hint(req.body()).lower() > sh.s.max_body as u64 {
        return error(StatusCode::PAYLOAD_TOO_LARGE, format!("the request body is over {} bytes", sh.s.max_body));
    }
    let body = match Limited::new(req.into_body(), sh.s.max_body).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
            return error(StatusCode::PAYLOAD_TOO_LARGE, format!("the request body is over {} bytes", sh.s.max_body));
        }
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("reading the request body: {e}")),
    };
    let p = match parse(api, &body, &sh.s) {
        Ok(p) => p,
        Err((status, msg)) => return error(status, msg),
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    {
        let mut i = sh.lock();
        let id = i.engine.submit(p.prompt.as_bytes(), p.max_tokens);
        i.outs.insert(id, tx);
        i.prompt_tokens += token_count(p.prompt.len()) as u64;
    }
    sh.wake.notify_one();
    let n = sh.ids.fetch_add(1, Relaxed);
    let meta = Meta {
        api,
        id: format!("{}-{n}", if api == Api::Chat { "chatcmpl" } else { "cmpl" }),
        created: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        model: sh.s.model.clone(),
        prompt_tokens: token_count(p.prompt.len()),
        include_usage: p.include_usage,
    };
    if p.stream {
        let mut r = Response::new(Sse { rx, meta, started: false, sent: 0, done: false }.boxed());
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        return r;
    }
    let mut text = Vec::with_capacity(p.max_tokens * 4);
    while let Some(t) = rx.recv().await {
        text.extend_from_slice(&t.text);
        if t.last {
            break;
        }
    }
    let n = text.len() / 4;
    let text = String::from_utf8(text).unwrap_or_default();
    let choice = match api {
        Api::Completions => json!({"index": 0, "text": text, "logprobs": null, "finish_reason": "length"}),
        Api::Chat => json!({"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": null, "finish_reason": "length"}),
    };
    json_response(&json!({"id": meta.id, "object": meta.object(false), "created": meta.created, "model": meta.model,
        "choices": [choice], "usage": meta.usage(n)}))
}

async fn serve(sh: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Out>, Infallible> {
    let path = req.uri().path();
    let post = req.method() == Method::POST;
    let get = req.method() == Method::GET;
    let r = match path {
        "/v1/completions" if post => completion(sh, Api::Completions, req).await,
        "/v1/chat/completions" if post => completion(sh, Api::Chat, req).await,
        "/v1/models" if get => json_response(&json!({"object": "list", "data": [
            {"id": sh.s.model, "object": "model", "created": 0, "owned_by": "tandem", "max_model_len": sh.s.max_model_len}]})),
        "/health" if get => Response::new(Full::new(Bytes::new()).boxed()),
        "/metrics" if get => {
            let mut r = Response::new(Full::new(Bytes::from(sh.metrics())).boxed());
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
            r
        }
        "/v1/completions" | "/v1/chat/completions" | "/v1/models" | "/health" | "/metrics" => {
            error(StatusCode::METHOD_NOT_ALLOWED, format!("{} does not take {}", path, req.method()))
        }
        _ => error(StatusCode::NOT_FOUND, format!("no such path {path}")),
    };
    Ok(r)
}

/// Runs the stand-in until killed (the module doc lists the flags).
pub fn run(args: &[String]) -> Result<()> {
    let mut port = 0u16;
    let mut bind: std::net::IpAddr = std::net::Ipv4Addr::LOCALHOST.into();
    let mut name = None;
    let mut s = Settings { model: "tandem-llm".into(), engine: EngineConfig::default(), max_model_len: 32_768, max_body: 4 << 20 };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().with_context(|| format!("{a} needs a value"))?;
        let num = |what: &str| v.parse::<usize>().with_context(|| format!("{what}: expected a whole number, got {v:?}"));
        let ms = |what: &str| -> Result<f64> {
            let x: f64 = v.parse().with_context(|| format!("{what}: expected milliseconds, got {v:?}"))?;
            if !(x.is_finite() && x >= 0.0) {
                bail!("{what}: expected milliseconds >= 0, got {v:?}");
            }
            Ok(x)
        };
        match a.as_str() {
            "--port" => port = v.parse().context("--port")?,
            "--bind" => bind = v.parse().context("--bind")?,
            "--name" => name = Some(v.clone()),
            "--model" => s.model = v.clone(),
            "--block-tokens" => s.engine.block_tokens = num(a)?.max(1),
            "--cache-blocks" => s.engine.cache_blocks = num(a)?,
            "--max-batch" => s.engine.max_batch = num(a)?.max(1),
            "--prefill-ms-per-token" => s.engine.prefill_ns_per_token = (ms(a)? * 1e6).round() as u64,
            "--decode-ms" => s.engine.decode_us = (ms(a)? * 1e3).round() as u64,
            "--max-model-len" => s.max_model_len = num(a)?,
            "--max-body" => s.max_body = num(a)?,
            _ => bail!("unknown option {a}"),
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async move {
        let l = tokio::net::TcpListener::bind((bind, port)).await?;
        let addr = l.local_addr()?;
        let _name = name.unwrap_or_else(|| addr.port().to_string());
        let sh = Arc::new(Shared {
            inner: Mutex::new(Inner {
                engine: Engine::new(s.engine),
                outs: HashMap::new(),
                prompt_tokens: 0,
                generation_tokens: 0,
                finished: 0,
            }),
            s,
            wake: tokio::sync::Notify::new(),
            ids: AtomicU64::new(0),
        });
        tokio::spawn(drive(sh.clone()));
        println!("listening on {addr}");
        use std::io::Write as _;
        std::io::stdout().flush().ok();
        let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        builder.http1().timer(TokioTimer::new());
        loop {
            let (conn, _) = match l.accept().await {
                Ok(x) => x,
                Err(_) => continue,
            };
            conn.set_nodelay(true).ok();
            let sh = sh.clone();
            let conn = builder.serve_connection(TokioIo::new(conn), hyper::service::service_fn(move |r| serve(sh.clone(), r))).into_owned();
            tokio::spawn(async move {
                let _ = conn.await;
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings { model: "m".into(), engine: EngineConfig::default(), max_model_len: 100, max_body: 1000 }
    }

    #[test]
    fn parses_completions_and_chat() {
        let s = settings();
        let p = parse(Api::Completions, br#"{"model":"m","prompt":"hello","max_tokens":3,"stream":true}"#, &s).unwrap();
        assert_eq!((p.prompt.as_str(), p.max_tokens, p.stream, p.include_usage), ("hello", 3, true, false));
        let p = parse(Api::Completions, br#"{"model":"m","prompt":["hello"]}"#, &s).unwrap();
        assert_eq!((p.max_tokens, p.stream), (16, false));
        let p = parse(
            Api::Chat,
            br#"{"model":"m","messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":[{"type":"text","text":" ab"}]}],
                "continue_final_message":true,"max_completion_tokens":5,"stream_options":{"include_usage":true}}"#,
            &s,
        )
        .unwrap();
        assert_eq!((p.prompt.as_str(), p.max_tokens, p.include_usage), ("<|user|>\nHi\n<|assistant|>\n ab", 5, true));
    }

    #[test]
    fn bad_requests_are_refused_with_why() {
        let s = settings();
        let cases: [(Api, &[u8], StatusCode, &str); 12] = [
            (Api::Completions, b"not json", StatusCode::BAD_REQUEST, "not JSON"),
            (Api::Completions, b"[1,2]", StatusCode::BAD_REQUEST, "JSON object"),
            (Api::Completions, br#"{"prompt":"x"}"#, StatusCode::BAD_REQUEST, "missing field `model`"),
            (Api::Completions, br#"{"model":"other","prompt":"x"}"#, StatusCode::NOT_FOUND, "does not exist"),
            (Api::Completions, br#"{"model":"m"}"#, StatusCode::BAD_REQUEST, "missing field `prompt`"),
            (Api::Completions, br#"{"model":"m","prompt":7}"#, StatusCode::BAD_REQUEST, "`prompt` must be"),
            (Api::Completions, br#"{"model":"m","prompt":""}"#, StatusCode::BAD_REQUEST, "empty"),
            (Api::Completions, br#"{"model":"m","prompt":"x","max_tokens":0}"#, StatusCode::BAD_REQUEST, "at least 1"),
            (Api::Completions, br#"{"model":"m","prompt":"x","stream":"yes"}"#, StatusCode::BAD_REQUEST, "`stream`"),
            (Api::Completions, br#"{"model":"m","prompt":"x","max_tokens":100}"#, StatusCode::BAD_REQUEST, "maximum context length is 100"),
            (Api::Chat, br#"{"model":"m"}"#, StatusCode::BAD_REQUEST, "missing field `messages`"),
            (Api::Chat, br#"{"model":"m","messages":[{"content":"x"}]}"#, StatusCode::BAD_REQUEST, "`role`"),
        ];
        for (api, body, status, why) in cases {
            let (st, msg) = parse(api, body, &s).unwrap_err();
            assert_eq!(st, status, "{}", String::from_utf8_lossy(body));
            assert!(msg.contains(why), "{msg:?} should say {why:?}");
        }
    }

    #[test]
    fn stream_chunks_follow_openai() {
        let meta = Meta { api: Api::Chat, id: "chatcmpl-1".into(), created: 5, model: "m".into(), prompt_tokens: 3, include_usage: true };
        let c = meta.chunk(Some(meta.token_choice(" abc", None)), None);
        let v: Value = serde_json::from_str(c.strip_prefix("data: ").unwrap().trim_end()).unwrap();
        assert_eq!(v["object"], "chat.completion.chunk");
        assert_eq!(v["choices"][0]["delta"]["content"], " abc");
        let u = meta.chunk(None, Some(meta.usage(2)));
        let v: Value = serde_json::from_str(u.strip_prefix("data: ").unwrap().trim_end()).unwrap();
        assert_eq!(v["usage"]["total_tokens"], 5);
        assert_eq!(v["choices"].as_array().unwrap().len(), 0);
    }
}
