//! What the proxy reads for `balance = "llm"`: the prompt and model of an OpenAI-shaped request
//! body (`/v1/completions`, `/v1/chat/completions`), and the gauges of a replica's Prometheus
//! `/metrics` (vLLM's names). Both are plain functions over bytes; the request path and the
//! scrape loop in the crate root do the IO, and `balance` decides.
//!
//! **Prompt bytes** (what `balance::prefix` hashes; they need not be what the server tokenises,
//! only the same for requests that share a prefix): for completions the `prompt` string (of a
//! list of strings, the first; a list of token ids, each id as 4 little-endian bytes; of a
//! list of such lists, the first); for chat, every message in order as its role, a `\n`, its
//! content (a string, or its text parts joined) and a `\x1e` separator. At most `max` bytes
//! are kept (the prefix hash never reads further).

use serde_json::Value;

/// The OpenAI paths whose bodies are read.
pub(crate) fn is_openai_path(path: &str) -> bool {
    path == "/v1/completions" || path == "/v1/chat/completions"
}

/// Whether an OpenAI request body asks for a streamed answer (`"stream": true`).
pub(crate) fn streams(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body).ok().and_then(|v| v.get("stream").and_then(Value::as_bool)).unwrap_or(false)
}

/// The model and the leading `max` prompt bytes of an OpenAI request body, or `None` when the
/// body is not such a request (not JSON, not an object, no prompt or messages).
pub(crate) fn prompt_of(body: &[u8], max: usize) -> Option<(String, Vec<u8>)> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let o = v.as_object()?;
    let model = o.get("model").and_then(Value::as_str).unwrap_or("").to_string();
    let mut out = Vec::new();
    let push = |out: &mut Vec<u8>, b: &[u8]| {
        let room = max.saturating_sub(out.len());
        out.extend_from_slice(&b[..b.len().min(room)]);
    };
    let tokens = |out: &mut Vec<u8>, ids: &[Value]| -> Option<()> {
        for id in ids {
            let id = u32::try_from(id.as_u64()?).ok()?;
            push(out, &id.to_le_bytes());
        }
        Some(())
    };
    if let Some(p) = o.get("prompt") {
        match p {
            Value::String(s) => push(&mut out, s.as_bytes()),
            Value::Array(a) => match a.first()? {
                Value::String(s) => push(&mut out, s.as_bytes()),
                Value::Number(_) => tokens(&mut out, a)?,
                Value::Array(ids) => tokens(&mut out, ids)?,
                _ => return None,
            },
            _ => return None,
        }
    } else {
        let msgs = o.get("messages")?.as_array()?;
        for m in msgs {
            if out.len() >= max {
                break;
            }
            push(&mut out, m.get("role").and_then(Value::as_str).unwrap_or("").as_bytes());
            push(&mut out, b"\n");
            match m.get("content") {
                Some(Value::String(s)) => push(&mut out, s.as_bytes()),
                Some(Value::Array(parts)) => {
                    for part in parts {
                        if let Some(t) = part.get("text").and_then(Value::as_str) {
                            push(&mut out, t.as_bytes());
                        }
                    }
                }
                _ => {}
            }
            push(&mut out, b"\x1e");
        }
    }
    Some((model, out))
}

/// Gauges from a replica's Prometheus text: `vllm:num_requests_running`,
/// `vllm:num_requests_waiting` (each summed over its label sets: one per engine or model) and
/// `vllm:kv_cache_usage_perc` (the largest). `None` when neither request gauge is there (not a
/// vLLM-like server).
pub(crate) fn gauges_of(text: &str) -> Option<(u32, u32, f64)> {
    let (mut running, mut waiting, mut kv, mut seen) = (0f64, 0f64, 0f64, false);
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let (name, rest) = line.split_at(name_end);
        let Some(value) = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else { continue };
        if !value.is_finite() {
            continue;
        }
        match name {
            "vllm:num_requests_running" => {
                running += value;
                seen = true;
            }
            "vllm:num_requests_waiting" => {
                waiting += value;
                seen = true;
            }
            "vllm:kv_cache_usage_perc" | "vllm:gpu_cache_usage_perc" => kv = kv.max(value),
            _ => {}
        }
    }
    let count = |x: f64| x.clamp(0.0, u32::MAX as f64) as u32;
    seen.then(|| (count(running), count(waiting), kv))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_json_true_stream_field_is_a_stream() {
        assert!(streams(br#"{"model":"m","prompt":"p","stream":true}"#));
        for body in [
            &br#"{"stream":false}"#[..],
            br#"{"stream":"true"}"#,
            br#"{"stream":1}"#,
            br#"{"prompt":"no stream field"}"#,
            br#"[true]"#,
            b"not json",
            b"",
            b"\xff\xfe{\"stream\":true}",
            br#"{"stream":true"#,
        ] {
            assert!(!streams(body), "{:?}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn prompts_of_completions_and_chat() {
        let (m, p) = prompt_of(br#"{"model":"llama","prompt":"hello world","max_tokens":3}"#, 100).unwrap();
        assert_eq!((m.as_str(), p.as_slice()), ("llama", &b"hello world"[..]));
        assert_eq!(prompt_of(br#"{"prompt":"hello world"}"#, 5).unwrap().1, b"hello");
        assert_eq!(prompt_of(br#"{"prompt":["first","second"]}"#, 100).unwrap().1, b"first");
        assert_eq!(prompt_of(br#"{"prompt":[1,256]}"#, 100).unwrap().1, [1, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(prompt_of(br#"{"prompt":[[7],[8]]}"#, 100).unwrap().1, [7, 0, 0, 0]);
        let chat = br#"{"model":"m","messages":[{"role":"system","content":"Be brief."},
            {"role":"user","content":[{"type":"text","text":"Hi"},{"type":"image_url","image_url":{}},{"type":"text","text":"!"}]}]}"#;
        assert_eq!(prompt_of(chat, 100).unwrap().1, b"system\nBe brief.\x1euser\nHi!\x1e");
        // A longer conversation starts with the shorter one's bytes (prefix sharing survives).
        let longer = br#"{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi!"},{"role":"assistant","content":"Yes?"}]}"#;
        assert!(prompt_of(longer, 100).unwrap().1.starts_with(b"system\nBe brief.\x1euser\nHi!\x1e"));
        for bad in [&b"not json"[..], b"[1]", b"{}", br#"{"prompt":7}"#, br#"{"messages":"x"}"#, br#"{"prompt":[-1]}"#, br#"{"prompt":[]}"#]
        {
            assert!(prompt_of(bad, 100).is_none(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn gauges_of_vllm_metrics() {
        let text = "# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n\
            vllm:num_requests_running{model_name=\"m\",engine=\"0\"} 3.0\n\
            vllm:num_requests_running{model_name=\"m\",engine=\"1\"} 2\n\
            vllm:num_requests_waiting{model_name=\"m\"} 7\n\
            vllm:num_requests_waiting_by_reason{reason=\"x\"} 100\n\
            vllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n\
            vllm:prefix_cache_hits_total{model_name=\"m\"} 12\n";
        assert_eq!(gauges_of(text), Some((5, 7, 0.25)));
        assert_eq!(gauges_of("vllm:num_requests_waiting 1\n"), Some((0, 1, 0.0)));
        assert_eq!(gauges_of("http_requests_total 5\nhello\n"), None);
        assert_eq!(gauges_of("vllm:num_requests_running{a=\"b\"} NaN\nvllm:num_requests_waiting -4\n"), Some((0, 0, 0.0)));
    }
}
