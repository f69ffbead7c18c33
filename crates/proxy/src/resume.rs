//! Streams that survive the loss of their replica (`resume_streams`), the pure part: what the
//! proxy reads of an OpenAI server-sent event stream as it passes, and the request that goes on
//! from where a broken one stopped. `resumer` does the IO.
//!
//! - [`Plan`]: a streaming `POST /v1/completions` or `/v1/chat/completions` body that can be
//!   resumed (JSON, `stream: true`, one choice, no `echo`, a text prompt), and the body of the
//!   request that continues it: the text already sent appended to the prompt (completions), or
//!   as a final assistant message to continue (chat: `continue_final_message: true`,
//!   `add_generation_prompt: false`, as vLLM has them; appended to that message when the request
//!   was already continuing one), with `max_tokens` (and `max_completion_tokens`, `min_tokens`)
//!   less the tokens already sent.
//! - [`Events`]: splits a byte stream into server-sent events (an event ends at an empty line;
//!   lines end with `\n`, `\r\n` or `\r`), so only whole events reach the client and a replica
//!   that stops mid-event leaves nothing half-sent. An event over [`EVENT_LIMIT`] bytes is an
//!   error: not an event stream.
//! - [`Tracker`]: follows the events sent: the text (`choices[0].text`, or
//!   `choices[0].delta.content`), the tokens (content-bearing chunks: vLLM sends one per decoding
//!   step), the first chunk's `id`, `object`, `created` and `model`, a `finish_reason`, and
//!   `data: [DONE]`. The events of a resumed attempt are rewritten so the client sees one stream:
//!   no second role chunk (`delta.role` removed, a chunk left empty dropped), the first chunk's
//!   `id` and `created`, and `usage` counted from the original prompt (`prompt_tokens` less and
//!   `completion_tokens` more by the tokens sent before). A rewritten chunk is serialised again
//!   (same fields, keys in sorted order); the others go on byte for byte. An event that is not an
//!   OpenAI chunk (not JSON, an `error`, a second choice, tool calls, reasoning text) passes on
//!   unchanged but makes the stream not resumable, with the reason.

use bytes::{Bytes, BytesMut};
use serde_json::{Map, Value, json};

/// The largest server-sent event the proxy holds while waiting for its end.
pub(crate) const EVENT_LIMIT: usize = 1 << 20;

/// The OpenAI API of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Api {
    /// `/v1/completions`.
    Completions,
    /// `/v1/chat/completions`.
    Chat,
}

impl Api {
    /// The API served at `path`, if it is one of the two.
    pub(crate) fn of_path(path: &str) -> Option<Api> {
        match path {
            "/v1/completions" => Some(Api::Completions),
            "/v1/chat/completions" => Some(Api::Chat),
            _ => None,
        }
    }
}

/// Why a request's stream cannot be resumed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NotResumable {
    /// The body is not a JSON object.
    #[error("the body is not a JSON object")]
    NotJson,
    /// `stream` is not true.
    #[error("not a stream (`stream` is not true)")]
    NotStreaming,
    /// `n` or `best_of` over 1.
    #[error("`{0}` asks for more than one choice")]
    SeveralChoices(&'static str),
    /// `echo: true` repeats the prompt in the answer.
    #[error("`echo` repeats the prompt")]
    Echo,
    /// A completions prompt that is not a string or a list of one string (token ids, several).
    #[error("the prompt is not a string (or a list of one string)")]
    PromptNotText,
    /// Chat without a list of messages.
    #[error("`messages` is not a non-empty list")]
    NoMessages,
    /// A token limit that is not a whole number.
    #[error("`{0}` is not a whole number")]
    BadLimit(&'static str),
}

/// The token limits a resumed request lowers by the tokens already sent.
const LIMITS: [&str; 3] = ["max_tokens", "max_completion_tokens", "min_tokens"];

/// A streaming OpenAI request that can be resumed.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    api: Api,
    body: Map<String, Value>,
}

impl Plan {
    /// Reads a request body (`Err`: why its stream cannot be resumed).
    pub(crate) fn new(api: Api, body: &[u8]) -> Result<Plan, NotResumable> {
        let Ok(Value::Object(o)) = serde_json::from_slice::<Value>(body) else { return Err(NotResumable::NotJson) };
        if o.get("stream") != Some(&Value::Bool(true)) {
            return Err(NotResumable::NotStreaming);
        }
        for k in ["n", "best_of"] {
            match o.get(k) {
                None | Some(Value::Null) => {}
                Some(v) if v.as_u64() == Some(1) => {}
                Some(_) => return Err(NotResumable::SeveralChoices(if k == "n" { "n" } else { "best_of" })),
            }
        }
        if o.get("echo").is_some_and(|e| e != &Value::Bool(false) && !e.is_null()) {
            return Err(NotResumable::Echo);
        }
        for k in LIMITS {
            if o.get(k).is_some_and(|v| !v.is_null() && v.as_u64().is_none()) {
                return Err(NotResumable::BadLimit(k));
            }
        }
        match api {
            Api::Completions => match o.get("prompt") {
                Some(Value::String(_)) => {}
                Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => {}
                _ => return Err(NotResumable::PromptNotText),
            },
            Api::Chat => match o.get("messages") {
                Some(Value::Array(m)) if !m.is_empty() && m.iter().all(Value::is_object) => {}
                _ => return Err(NotResumable::NoMessages),
            },
        }
        Ok(Plan { api, body: o })
    }

    /// The API.
    pub(crate) fn api(&self) -> Api {
        self.api
    }

    /// The body of the request that goes on after `text` (`tokens` tokens) was sent, or `None`
    /// when the token limit is used up (nothing is left to generate). With nothing sent yet it
    /// is the original request.
    pub(crate) fn resumed_body(&self, text: &str, tokens: u64) -> Option<Bytes> {
        let mut o = self.body.clone();
        if text.is_empty() && tokens == 0 {
            return Some(Bytes::from(Value::Object(o).to_string()));
        }
        for k in LIMITS {
            if let Some(n) = o.get(k).and_then(Value::as_u64) {
                let left = n.saturating_sub(tokens);
                if left == 0 && k != "min_tokens" {
                    return None;
                }
                o.insert(k.to_string(), left.into());
            }
        }
        match self.api {
            Api::Completions => match o.get_mut("prompt") {
                Some(Value::String(p)) => p.push_str(text),
                Some(Value::Array(a)) => match a.first_mut() {
                    Some(Value::String(p)) => p.push_str(text),
                    _ => unreachable!("Plan::new checked the prompt"),
                },
                _ => unreachable!("Plan::new checked the prompt"),
            },
            Api::Chat => {
                let continuing = o.get("continue_final_message") == Some(&Value::Bool(true));
                let Some(Value::Array(msgs)) = o.get_mut("messages") else { unreachable!("Plan::new checked the messages") };
                let last = msgs.last_mut().filter(|m| continuing && m.get("role").and_then(Value::as_str) == Some("assistant"));
                match last.and_then(Value::as_object_mut) {
                    Some(m) => match m.get_mut("content") {
                        Some(Value::String(c)) => c.push_str(text),
                        Some(Value::Array(parts)) => parts.push(json!({"type": "text", "text": text})),
                        _ => {
                            m.insert("content".into(), text.into());
                        }
                    },
                    None => msgs.push(json!({"role": "assistant", "content": text})),
                }
                o.insert("continue_final_message".into(), true.into());
                o.insert("add_generation_prompt".into(), false.into());
            }
        }
        Some(Bytes::from(Value::Object(o).to_string()))
    }
}

/// A stream that is not made of server-sent events.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SseError {
    /// No event end within the limit.
    #[error("{0} bytes without the end of a server-sent event: not an event stream")]
    TooLong(usize),
}

/// Splits a byte stream into server-sent events.
#[derive(Debug, Default)]
pub(crate) struct Events {
    buf: BytesMut,
    /// Bytes of `buf` already scanned for line ends.
    scan: usize,
    /// Where the line being scanned starts.
    line: usize,
}

impl Events {
    /// Appends bytes read.
    pub(crate) fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next whole event (with the empty line that ends it), `None` until one is whole.
    pub(crate) fn next_event(&mut self) -> Result<Option<Bytes>, SseError> {
        let b = &self.buf;
        while self.scan < b.len() {
            let eol = match b[self.scan] {
                b'\n' => 1,
                // A `\r` last in the buffer may be the start of `\r\n`: wait for the next byte.
                b'\r' if self.scan + 1 == b.len() => break,
                b'\r' if b[self.scan + 1] == b'\n' => 2,
                b'\r' => 1,
                _ => {
                    self.scan += 1;
                    continue;
                }
            };
            let empty = self.scan == self.line;
            self.scan += eol;
            self.line = self.scan;
            if empty {
                let ev = self.buf.split_to(self.scan).freeze();
                (self.scan, self.line) = (0, 0);
                return Ok(Some(ev));
            }
        }
        if self.buf.len() > EVENT_LIMIT {
            return Err(SseError::TooLong(self.buf.len()));
        }
        Ok(None)
    }

    /// The bytes of an unfinished event, taken.
    pub(crate) fn take_rest(&mut self) -> Bytes {
        (self.scan, self.line) = (0, 0);
        self.buf.split().freeze()
    }
}

/// The `data` of an event (its `data:` lines joined by `\n`), `None` when it has none (a
/// comment, a keep-alive).
fn data_of(ev: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(ev);
    let mut data: Option<String> = None;
    for line in text.split('\n').flat_map(|l| l.split('\r')) {
        let Some(v) = line.strip_prefix("data") else { continue };
        let v = match v.strip_prefix(':') {
            Some(v) => v.strip_prefix(' ').unwrap_or(v),
            None if v.is_empty() => "",
            None => continue,
        };
        match &mut data {
            Some(d) => {
                d.push('\n');
                d.push_str(v);
            }
            None => data = Some(v.to_string()),
        }
    }
    data
}

/// Whether an event has a line that is neither a comment nor one of the four fields of a
/// server-sent event (`data`, `event`, `id`, `retry`).
fn has_stray_line(ev: &[u8]) -> bool {
    let text = String::from_utf8_lossy(ev);
    text.split(['\n', '\r']).filter(|l| !l.is_empty() && !l.starts_with(':')).any(|l| {
        let field = l.split_once(':').map_or(l, |(f, _)| f);
        !matches!(field, "data" | "event" | "id" | "retry")
    })
}

/// Whether an event (perhaps without its empty line) is `data: [DONE]`.
pub(crate) fn is_done(ev: &[u8]) -> bool {
    data_of(ev).is_some_and(|d| d.trim() == "[DONE]")
}

/// What the first chunk said of the stream.
#[derive(Debug, Clone)]
struct Head {
    id: Value,
    object: Value,
    created: Value,
    model: Value,
}

/// Follows the events sent to the client (the module doc says what it reads and rewrites).
#[derive(Debug)]
pub(crate) struct Tracker {
    api: Api,
    text: String,
    tokens: u64,
    /// Tokens sent before the current attempt.
    prior: u64,
    /// Attempts after the first.
    resumed: u32,
    head: Option<Head>,
    role_sent: bool,
    finished: bool,
    done: bool,
    opaque: Option<String>,
}

impl Tracker {
    /// A stream of `api` chunks, nothing sent yet.
    pub(crate) fn new(api: Api) -> Tracker {
        Tracker {
            api,
            text: String::new(),
            tokens: 0,
            prior: 0,
            resumed: 0,
            head: None,
            role_sent: false,
            finished: false,
            done: false,
            opaque: None,
        }
    }

    /// The text sent so far.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The tokens (content-bearing chunks) sent so far.
    pub(crate) fn tokens(&self) -> u64 {
        self.tokens
    }

    /// `data: [DONE]` was sent.
    pub(crate) fn done(&self) -> bool {
        self.done
    }

    /// Why the stream cannot be resumed, if it cannot.
    pub(crate) fn not_resumable(&self) -> Option<&str> {
        self.opaque.as_deref()
    }

    /// Marks the stream not resumable (the first reason is kept).
    pub(crate) fn give_up(&mut self, why: impl Into<String>) {
        self.opaque.get_or_insert_with(|| why.into());
    }

    /// A new attempt begins: its events are rewritten to continue the stream.
    pub(crate) fn resume(&mut self) {
        self.resumed += 1;
        self.prior = self.tokens;
    }

    /// Reads one whole event and returns what the client gets of it (`None`: nothing).
    pub(crate) fn event(&mut self, ev: Bytes) -> Option<Bytes> {
        if has_stray_line(&ev) {
            self.give_up("the replica sent bytes that are not server-sent events");
        }
        let Some(data) = data_of(&ev) else { return Some(ev) };
        if data.trim() == "[DONE]" {
            self.done = true;
            return Some(ev);
        }
        let mut v = match serde_json::from_str::<Value>(&data) {
            Ok(v @ Value::Object(_)) => v,
            _ => {
                self.give_up("the replica sent an event that is not an OpenAI chunk");
                return Some(ev);
            }
        };
        if v.get("error").is_some_and(|e| !e.is_null()) {
            self.give_up("the replica reported an error in the stream");
            return Some(ev);
        }
        let mut content = String::new();
        let mut role = false;
        if let Some(choices) = v.get("choices").and_then(Value::as_array) {
            for c in choices {
                if c.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                    self.give_up("the stream has more than one choice");
                    continue;
                }
                let piece = match self.api {
                    Api::Completions => c.get("text"),
                    Api::Chat => {
                        let d = c.get("delta");
                        let set = |k: &str| d.and_then(|d| d.get(k)).is_some_and(|x| !x.is_null() && x != "" && x != &json!([]));
                        if set("tool_calls") || set("function_call") {
                            self.give_up("the stream holds tool calls");
                        }
                        if set("reasoning_content") || set("reasoning") {
                            self.give_up("the stream holds reasoning text");
                        }
                        role |= d.and_then(|d| d.get("role")).is_some_and(|r| !r.is_null());
                        d.and_then(|d| d.get("content"))
                    }
                };
                if let Some(t) = piece.and_then(Value::as_str) {
                    content.push_str(t);
                }
                if c.get("finish_reason").is_some_and(|f| !f.is_null()) {
                    self.finished = true;
                }
            }
        }
        if !content.is_empty() {
            self.text.push_str(&content);
            self.tokens += 1;
        }
        if self.head.is_none()
            && let Some(id) = v.get("id")
        {
            let field = |k: &str| v.get(k).cloned().unwrap_or(Value::Null);
            self.head = Some(Head { id: id.clone(), object: field("object"), created: field("created"), model: field("model") });
        }
        let role_was_sent = self.role_sent;
        self.role_sent |= role;
        if self.resumed == 0 {
            return Some(ev);
        }
        // A resumed attempt: rewrite what would show the seam.
        let mut changed = false;
        if let (Some(h), Some(o)) = (&self.head, v.as_object_mut()) {
            for (k, want) in [("id", &h.id), ("created", &h.created)] {
                if o.get(k).is_some_and(|x| x != want) {
                    o.insert(k.to_string(), want.clone());
                    changed = true;
                }
            }
        }
        if self.api == Api::Chat
            && role_was_sent
            && let Some(choices) = v.get_mut("choices").and_then(Value::as_array_mut)
        {
            let mut dropped = false;
            for c in choices.iter_mut() {
                if let Some(d) = c.get_mut("delta").and_then(Value::as_object_mut)
                    && d.remove("role").is_some()
                {
                    changed = true;
                    let empty = d.iter().all(|(k, x)| k == "content" && (x.is_null() || x == ""));
                    let ends = c.get("finish_reason").is_some_and(|f| !f.is_null());
                    let logprobs = c.get("logprobs").is_some_and(|l| !l.is_null());
                    dropped |= empty && !ends && !logprobs;
                }
            }
            if dropped && choices.len() == 1 && v.get("usage").is_none_or(Value::is_null) {
                return None;
            }
        }
        if self.prior > 0
            && let Some(u) = v.get_mut("usage").and_then(Value::as_object_mut)
        {
            if let Some(p) = u.get("prompt_tokens").and_then(Value::as_u64) {
                u.insert("prompt_tokens".into(), p.saturating_sub(self.prior).into());
                changed = true;
            }
            if let Some(c) = u.get("completion_tokens").and_then(Value::as_u64) {
                u.insert("completion_tokens".into(), (c + self.prior).into());
                changed = true;
            }
        }
        if !changed {
            return Some(ev);
        }
        Some(Bytes::from(format!("data: {v}\n\n")))
    }

    /// The end of a stream whose token limit was used up before its replica said so: a last
    /// chunk with `finish_reason: "length"` (unless one was sent), then `data: [DONE]`.
    pub(crate) fn ending(&self) -> Bytes {
        let mut out = String::new();
        if !self.finished {
            let h = self.head.clone().unwrap_or(Head { id: Value::Null, object: Value::Null, created: Value::Null, model: Value::Null });
            let choice = match self.api {
                Api::Completions => json!({"index": 0, "text": "", "logprobs": null, "finish_reason": "length"}),
                Api::Chat => json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": "length"}),
            };
            let v = json!({"id": h.id, "object": h.object, "created": h.created, "model": h.model, "choices": [choice]});
            out.push_str(&format!("data: {v}\n\n"));
        }
        out.push_str("data: [DONE]\n\n");
        Bytes::from(out)
    }

    /// Whether a `finish_reason` was sent (the answer is complete; only `[DONE]` may be missing).
    pub(crate) fn finished(&self) -> bool {
        self.finished
    }
}

/// The event that tells a client its stream could not go on (OpenAI's error object).
pub(crate) fn error_event(msg: &str) -> Bytes {
    let v = json!({"error": {"message": msg, "type": "proxy_error", "param": null, "code": 502}});
    Bytes::from(format!("data: {v}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(b: &Bytes) -> Value {
        serde_json::from_slice(b).unwrap()
    }

    #[test]
    fn plans_accept_text_streams_only() {
        assert!(Plan::new(Api::Completions, br#"{"model":"m","prompt":"hi","stream":true}"#).is_ok());
        assert!(Plan::new(Api::Completions, br#"{"prompt":["hi"],"stream":true,"n":1,"echo":false}"#).is_ok());
        assert!(Plan::new(Api::Chat, br#"{"messages":[{"role":"user","content":"hi"}],"stream":true}"#).is_ok());
        let cases: [(Api, &[u8], NotResumable); 11] = [
            (Api::Completions, b"not json", NotResumable::NotJson),
            (Api::Completions, b"[1]", NotResumable::NotJson),
            (Api::Completions, br#"{"prompt":"hi"}"#, NotResumable::NotStreaming),
            (Api::Completions, br#"{"prompt":"hi","stream":"yes"}"#, NotResumable::NotStreaming),
            (Api::Completions, br#"{"prompt":"hi","stream":true,"n":2}"#, NotResumable::SeveralChoices("n")),
            (Api::Completions, br#"{"prompt":"hi","stream":true,"best_of":3}"#, NotResumable::SeveralChoices("best_of")),
            (Api::Completions, br#"{"prompt":"hi","stream":true,"echo":true}"#, NotResumable::Echo),
            (Api::Completions, br#"{"prompt":[1,2],"stream":true}"#, NotResumable::PromptNotText),
            (Api::Completions, br#"{"prompt":["a","b"],"stream":true}"#, NotResumable::PromptNotText),
            (Api::Chat, br#"{"messages":[],"stream":true}"#, NotResumable::NoMessages),
            (Api::Chat, br#"{"messages":[{"role":"user"}],"stream":true,"max_tokens":-1}"#, NotResumable::BadLimit("max_tokens")),
        ];
        for (api, b, want) in cases {
            assert_eq!(Plan::new(api, b).unwrap_err(), want, "{}", String::from_utf8_lossy(b));
        }
    }

    #[test]
    fn resumed_completions_carry_the_text_and_fewer_tokens() {
        let p = Plan::new(Api::Completions, br#"{"model":"m","prompt":"Once","max_tokens":10,"min_tokens":2,"stream":true}"#).unwrap();
        let b = body(&p.resumed_body(" upon a", 2).unwrap());
        assert_eq!(b["prompt"], "Once upon a");
        assert_eq!((b["max_tokens"].as_u64(), b["min_tokens"].as_u64()), (Some(8), Some(0)));
        assert_eq!(b["stream"], true);
        assert_eq!(body(&p.resumed_body("", 0).unwrap())["prompt"], "Once", "nothing sent: the request as it was");
        assert_eq!(p.resumed_body(" x", 10), None, "the limit used up");
        let p = Plan::new(Api::Completions, br#"{"prompt":["Once"],"stream":true}"#).unwrap();
        let b = body(&p.resumed_body(" upon", 1).unwrap());
        assert_eq!(b["prompt"], json!(["Once upon"]));
        assert!(b.get("max_tokens").is_none(), "no limit given, none added");
    }

    #[test]
    fn resumed_chat_continues_a_final_assistant_message() {
        let p = Plan::new(
            Api::Chat,
            br#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_completion_tokens":5,"max_tokens":6,"stream":true}"#,
        )
        .unwrap();
        let b = body(&p.resumed_body(" abc def", 2).unwrap());
        assert_eq!(b["messages"], json!([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": " abc def"}]));
        assert_eq!((b["continue_final_message"].clone(), b["add_generation_prompt"].clone()), (json!(true), json!(false)));
        assert_eq!((b["max_completion_tokens"].as_u64(), b["max_tokens"].as_u64()), (Some(3), Some(4)));
        // A request that was itself continuing an answer: the text goes on that message.
        let p = Plan::new(
            Api::Chat,
            br#"{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Sure,"}],"continue_final_message":true,
                "add_generation_prompt":false,"stream":true}"#,
        )
        .unwrap();
        let b = body(&p.resumed_body(" abc", 1).unwrap());
        assert_eq!(b["messages"][1], json!({"role": "assistant", "content": "Sure, abc"}));
        assert_eq!(b["messages"].as_array().unwrap().len(), 2);
        let p = Plan::new(
            Api::Chat,
            br#"{"messages":[{"role":"assistant","content":[{"type":"text","text":"A"}]}],"continue_final_message":true,"stream":true}"#,
        )
        .unwrap();
        let b = body(&p.resumed_body(" b", 1).unwrap());
        assert_eq!(b["messages"][0]["content"], json!([{"type": "text", "text": "A"}, {"type": "text", "text": " b"}]));
    }

    fn split(chunks: &[&[u8]]) -> (Vec<String>, Bytes) {
        let mut e = Events::default();
        let mut out = Vec::new();
        for c in chunks {
            e.push(c);
            while let Some(ev) = e.next_event().unwrap() {
                out.push(String::from_utf8(ev.to_vec()).unwrap());
            }
        }
        (out, e.take_rest())
    }

    #[test]
    fn events_split_however_the_bytes_are_cut() {
        let stream = b"data: {\"a\":1}\n\ndata: x\r\n\r\n: keep-alive\n\ndata: [DONE]\r\rdata: half";
        let want = ["data: {\"a\":1}\n\n", "data: x\r\n\r\n", ": keep-alive\n\n", "data: [DONE]\r\r"];
        for cut in 0..stream.len() {
            let (evs, rest) = split(&[&stream[..cut], &stream[cut..]]);
            assert_eq!(evs, want, "cut at {cut}");
            assert_eq!(&rest[..], b"data: half", "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(split(&bytes).0, want);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut e = Events::default();
        e.push(&vec![b'x'; EVENT_LIMIT]);
        assert_eq!(e.next_event(), Ok(None));
        e.push(b"yy");
        assert_eq!(e.next_event(), Err(SseError::TooLong(EVENT_LIMIT + 2)));
        assert!(SseError::TooLong(3).to_string().contains("not an event stream"));
        // Events that are not OpenAI chunks pass on, and say why the stream cannot go on.
        for ev in [&b"data: not json\n\n"[..], b"data: [1,2]\n\n", b"data: {\"error\":{\"message\":\"boom\"}}\n\n", b"data: \xff\xfe\n\n"] {
            let mut t = Tracker::new(Api::Completions);
            assert_eq!(t.event(Bytes::copy_from_slice(ev)).as_deref(), Some(ev));
            assert!(t.not_resumable().is_some(), "{}", String::from_utf8_lossy(ev));
        }
        let mut t = Tracker::new(Api::Chat);
        t.event(Bytes::from_static(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"id\":\"x\"}]}}]}\n\n"));
        assert_eq!(t.not_resumable(), Some("the stream holds tool calls"));
        let mut t = Tracker::new(Api::Completions);
        t.event(Bytes::from_static(b"data: {\"choices\":[{\"index\":1,\"text\":\"a\"}]}\n\n"));
        assert_eq!(t.not_resumable(), Some("the stream has more than one choice"));
        // No data, other fields, a comment: passed on.
        let mut t = Tracker::new(Api::Completions);
        assert_eq!(
            t.event(Bytes::from_static(b"event: x\nid: 3\n: hi\nretry\n\n")).as_deref(),
            Some(&b"event: x\nid: 3\n: hi\nretry\n\n"[..])
        );
        assert_eq!(t.not_resumable(), None);
        // Lines that are not SSE: passed on, but the stream cannot be resumed.
        let mut t = Tracker::new(Api::Completions);
        assert!(t.event(Bytes::from_static(b"\x00\xffgarbage\r\n\r\n")).is_some());
        assert_eq!(t.not_resumable(), Some("the replica sent bytes that are not server-sent events"));
    }

    fn chat_chunk(id: &str, created: u64, delta: Value, finish: Value) -> Bytes {
        let v = json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": "m",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]});
        Bytes::from(format!("data: {v}\n\n"))
    }

    #[test]
    fn a_resumed_chat_stream_reads_as_one() {
        let mut t = Tracker::new(Api::Chat);
        let first = [
            chat_chunk("a", 1, json!({"role": "assistant", "content": ""}), Value::Null),
            chat_chunk("a", 1, json!({"content": " abc"}), Value::Null),
            chat_chunk("a", 1, json!({"content": " def"}), Value::Null),
        ];
        for ev in &first {
            assert_eq!(t.event(ev.clone()).as_ref(), Some(ev), "the first attempt goes on byte for byte");
        }
        assert_eq!((t.text(), t.tokens(), t.done()), (" abc def", 2, false));
        t.resume();
        assert_eq!(t.event(chat_chunk("b", 2, json!({"role": "assistant", "content": ""}), Value::Null)), None, "no second role chunk");
        let next = t.event(chat_chunk("b", 2, json!({"content": " ghi"}), Value::Null)).unwrap();
        assert_eq!(next, chat_chunk("a", 1, json!({"content": " ghi"}), Value::Null), "the first id and created");
        let end = t.event(chat_chunk("b", 2, json!({}), json!("length"))).unwrap();
        assert_eq!(end, chat_chunk("a", 1, json!({}), json!("length")));
        let usage = json!({"id": "b", "object": "chat.completion.chunk", "created": 2, "model": "m", "choices": [],
            "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13}});
        let u = t.event(Bytes::from(format!("data: {usage}\n\n"))).unwrap();
        let u: Value = serde_json::from_str(std::str::from_utf8(&u).unwrap().strip_prefix("data: ").unwrap().trim()).unwrap();
        assert_eq!(u["usage"], json!({"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}));
        assert_eq!(u["id"], "a");
        assert_eq!(t.event(Bytes::from_static(b"data: [DONE]\n\n")).as_deref(), Some(&b"data: [DONE]\n\n"[..]));
        assert!(t.done());
        assert_eq!((t.text(), t.tokens(), t.not_resumable()), (" abc def ghi", 3, None));
    }

    #[test]
    fn a_role_chunk_is_kept_when_none_was_sent() {
        let mut t = Tracker::new(Api::Chat);
        t.resume();
        let role = chat_chunk("b", 2, json!({"role": "assistant", "content": ""}), Value::Null);
        assert_eq!(t.event(role.clone()), Some(role));
    }

    #[test]
    fn an_ending_is_made_when_the_limit_was_reached() {
        let mut t = Tracker::new(Api::Completions);
        let v = json!({"id": "c", "object": "text_completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "text": " abc", "logprobs": null, "finish_reason": null}]});
        t.event(Bytes::from(format!("data: {v}\n\n")));
        let end = String::from_utf8(t.ending().to_vec()).unwrap();
        let mut evs = end.split("\n\n");
        let last: Value = serde_json::from_str(evs.next().unwrap().strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(last["id"], "c");
        assert_eq!(last["choices"][0]["finish_reason"], "length");
        assert_eq!(evs.next(), Some("data: [DONE]"));
        assert!(!t.finished());
        let v = json!({"id": "c", "choices": [{"index": 0, "text": "", "finish_reason": "stop"}]});
        t.event(Bytes::from(format!("data: {v}\n\n")));
        assert!(t.finished());
        assert_eq!(&t.ending()[..], b"data: [DONE]\n\n");
        assert!(is_done(b"data: [DONE]\n") && is_done(b"data:[DONE]"));
        assert!(!is_done(b"data: {\"choices\":[{\"te") && !is_done(b"") && !is_done(b": [DONE]"));
        assert!(String::from_utf8(error_event("gone").to_vec()).unwrap().starts_with("data: {\"error\":{"));
    }
}
