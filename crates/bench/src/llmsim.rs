//! The LLM server stand-in's model, sans IO (`tandem __llm` in `llmserver` drives it with a
//! clock): tokens, the chat template, the deterministic "model", the prefix cache and the
//! continuous-batching engine. Time never appears here: a step says how long it takes, and the
//! caller waits that long before ending it.
//!
//! **Tokens.** A token is 4 bytes of the UTF-8 prompt (the last one may be shorter): a prompt
//! of `b` bytes is `ceil(b / 4)` tokens. Output tokens are 4 ASCII bytes each (a space and three
//! lowercase letters), so the text sent back re-tokenises to the same tokens.
//!
//! **Model.** Greedy and deterministic whatever the temperature: the next token is a function
//! of *all* the bytes before it, prompt and output so far (FNV-1a over the byte stream, then
//! SplitMix64's finaliser picks the letters). A byte stream hashes the same however it is cut,
//! so a request whose prompt is the original prompt followed by the text already generated
//! continues exactly as the original would have: a stream resumed on another replica is
//! byte-identical.
//!
//! **Chat template** ([`chat_prompt`]): each message becomes `<|ROLE|>\n` + content + `\n`,
//! then `<|assistant|>\n` (the generation prompt) unless `add_generation_prompt` is false. With
//! `continue_final_message` (vLLM's option; the last message must be the assistant's) the last
//! message is rendered `<|assistant|>\n` + content with no newline after it and no generation
//! prompt, so a partial answer sent back as the last message continues where it stopped.
//!
//! **Prefix cache** ([`PrefixCache`]): blocks of `block_tokens` tokens (default 16, i.e. 64
//! bytes), each named by a chain hash of every block up to it; `capacity` blocks per replica
//! (default 1,024), least recently used evicted first. At admission a request looks up its
//! prompt's leading whole blocks (counted in `vllm:prefix_cache_queries_total` and
//! `vllm:prefix_cache_hits_total`, in tokens, as vLLM counts them; at least one token is always
//! computed), then touches them from the last to the first (so the shared heads of prompts
//! outlive their tails); when it finishes, the whole blocks of prompt plus output are touched
//! (the next turn of a conversation hits its history). The cache never holds up admission.
//!
//! **Engine** ([`Engine`]): continuous batching. A batch holds at most `max_batch` sequences
//! (32); the others wait in arrival order. A step admits waiting requests into free slots, then
//! costs `decode_us` (10 ms) plus `prefill_ns_per_token` (50,000 ns = 0.05 ms) for every
//! uncached prompt token of the requests it admitted; at its end every running sequence gets one
//! token (a request admitted in the step gets its first one). A sequence ends after `max_tokens`
//! tokens (finish reason `length`).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

/// Bytes of prompt per token.
pub(crate) const BYTES_PER_TOKEN: usize = 4;

/// Tokens in `bytes` bytes of text.
pub(crate) fn token_count(bytes: usize) -> usize {
    bytes.div_ceil(BYTES_PER_TOKEN)
}

/// The engine's parameters (the fixed values by default; `tandem __llm`'s flags
/// change them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct EngineConfig {
    /// Tokens per prefix-cache block.
    pub(crate) block_tokens: usize,
    /// Blocks the prefix cache holds.
    pub(crate) cache_blocks: usize,
    /// Sequences in a batch at most.
    pub(crate) max_batch: usize,
    /// Prefill cost per uncached prompt token, nanoseconds.
    pub(crate) prefill_ns_per_token: u64,
    /// Cost of one decode step (one token for every running sequence), microseconds.
    pub(crate) decode_us: u64,
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig { block_tokens: 16, cache_blocks: 1024, max_batch: 32, prefill_ns_per_token: 50_000, decode_us: 10_000 }
    }
}

// ---------------------------------------------------------------------------------------------
// The model

/// SplitMix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What the model has read so far: FNV-1a (64 bits) over the byte stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Context(u64);

impl Context {
    /// Nothing read.
    pub(crate) fn new() -> Context {
        Context(0xcbf2_9ce4_8422_2325)
    }

    /// Reads more bytes (the result does not depend on how the stream is cut).
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3);
        }
    }

    /// The next token after what was read.
    pub(crate) fn next_token(&self) -> [u8; 4] {
        let z = mix(self.0);
        let letter = |shift: u32| b'a' + ((z >> shift) % 26) as u8;
        [b' ', letter(0), letter(16), letter(32)]
    }

    /// Generates `n` tokens: each is appended to what was read before the next is chosen.
    #[cfg(test)]
    pub(crate) fn generate(&mut self, n: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(n * BYTES_PER_TOKEN);
        for _ in 0..n {
            let t = self.next_token();
            self.feed(&t);
            out.extend_from_slice(&t);
        }
        out
    }
}

/// A chat template error (a 400 for the client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TemplateError(pub(crate) &'static str);

/// Flattens chat messages `(role, content)` into a prompt (the module doc gives the template).
pub(crate) fn chat_prompt(messages: &[(&str, &str)], add_generation_prompt: bool, continue_final: bool) -> Result<String, TemplateError> {
    if messages.is_empty() {
        return Err(TemplateError("messages must hold at least one message"));
    }
    if continue_final && add_generation_prompt {
        return Err(TemplateError("continue_final_message and add_generation_prompt cannot both be true"));
    }
    if continue_final && messages.last().is_some_and(|m| m.0 != "assistant") {
        return Err(TemplateError("continue_final_message needs the last message to be the assistant's"));
    }
    let mut out = String::new();
    for (i, (role, content)) in messages.iter().enumerate() {
        out.push_str("<|");
        out.push_str(role);
        out.push_str("|>\n");
        out.push_str(content);
        if !(continue_final && i + 1 == messages.len()) {
            out.push('\n');
        }
    }
    if add_generation_prompt {
        out.push_str("<|assistant|>\n");
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// The prefix cache

/// Chain hashes of the whole blocks of `bytes` (`block_bytes` each).
pub(crate) fn block_hashes(bytes: &[u8], block_bytes: usize) -> Vec<u64> {
    let mut h = 0x7072_6566_6978_0000u64;
    bytes
        .chunks_exact(block_bytes.max(1))
        .map(|b| {
            let mut c = Context(h);
            c.feed(b);
            h = mix(c.0);
            h
        })
        .collect()
}

/// An LRU set of block hashes.
#[derive(Clone, Debug)]
pub(crate) struct PrefixCache {
    capacity: usize,
    clock: u64,
    stamp: HashMap<u64, u64>,
    order: BTreeMap<u64, u64>,
}

impl PrefixCache {
    /// An empty cache of `capacity` blocks.
    pub(crate) fn new(capacity: usize) -> PrefixCache {
        PrefixCache { capacity, clock: 0, stamp: HashMap::new(), order: BTreeMap::new() }
    }

    /// Leading blocks of `blocks` held.
    pub(crate) fn hit(&self, blocks: &[u64]) -> usize {
        blocks.iter().take_while(|h| self.stamp.contains_key(h)).count()
    }

    /// Marks `blocks` used, the last first (the first ends most recent); evicts the least
    /// recently used beyond the capacity.
    pub(crate) fn touch(&mut self, blocks: &[u64]) {
        for &h in blocks.iter().rev() {
            self.clock += 1;
            if let Some(old) = self.stamp.insert(h, self.clock) {
                self.order.remove(&old);
            }
            self.order.insert(self.clock, h);
        }
        while self.stamp.len() > self.capacity {
            let Some((_, h)) = self.order.pop_first() else { break };
            self.stamp.remove(&h);
        }
    }

    /// Blocks held.
    pub(crate) fn len(&self) -> usize {
        self.stamp.len()
    }
}

// ---------------------------------------------------------------------------------------------
// The engine

/// One sequence (request) in the engine.
#[derive(Debug)]
struct Seq {
    id: u64,
    text: Vec<u8>,
    prompt_blocks: Vec<u64>,
    ctx: Context,
    generated: usize,
    max_tokens: usize,
}

/// One token for one sequence, at the end of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Out {
    /// The sequence.
    pub(crate) id: u64,
    /// The token's text.
    pub(crate) token: [u8; 4],
    /// Its last token (`max_tokens` reached).
    pub(crate) last: bool,
}

/// The continuous-batching engine of one replica.
#[derive(Debug)]
pub(crate) struct Engine {
    cfg: EngineConfig,
    cache: PrefixCache,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    next_id: u64,
    queries: u64,
    hits: u64,
}

impl Engine {
    /// An idle engine.
    pub(crate) fn new(cfg: EngineConfig) -> Engine {
        Engine {
            cache: PrefixCache::new(cfg.cache_blocks),
            cfg,
            waiting: VecDeque::new(),
            running: Vec::new(),
            next_id: 0,
            queries: 0,
            hits: 0,
        }
    }

    fn block_bytes(&self) -> usize {
        self.cfg.block_tokens.max(1) * BYTES_PER_TOKEN
    }

    /// Queues a request (`max_tokens >= 1`); returns its id.
    pub(crate) fn submit(&mut self, prompt: &[u8], max_tokens: usize) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let mut ctx = Context::new();
        ctx.feed(prompt);
        let prompt_blocks = block_hashes(prompt, self.block_bytes());
        self.waiting.push_back(Seq { id, text: prompt.to_vec(), prompt_blocks, ctx, generated: 0, max_tokens: max_tokens.max(1) });
        id
    }

    /// Drops a request (its client went away).
    pub(crate) fn cancel(&mut self, id: u64) {
        self.waiting.retain(|s| s.id != id);
        self.running.retain(|s| s.id != id);
    }

    /// Starts a step: admits waiting requests into free slots of the batch (looking up and
    /// filling the prefix cache) and returns the step's cost in microseconds, or `None` when
    /// there is nothing to run.
    pub(crate) fn begin_step(&mut self) -> Option<u64> {
        let mut uncached = 0u64;
        while self.running.len() < self.cfg.max_batch.max(1) {
            let Some(s) = self.waiting.pop_front() else { break };
            let tokens = token_count(s.text.len()) as u64;
            let hit = (self.cache.hit(&s.prompt_blocks) * self.cfg.block_tokens) as u64;
            let hit = hit.min(tokens.saturating_sub(1));
            self.queries += tokens;
            self.hits += hit;
            uncached += tokens - hit;
            self.cache.touch(&s.prompt_blocks);
            self.running.push(s);
        }
        if self.running.is_empty() {
            return None;
        }
        Some(self.cfg.decode_us + (uncached * self.cfg.prefill_ns_per_token).div_ceil(1000))
    }

    /// Ends the step begun by `begin_step`: one token for every running sequence; finished
    /// ones leave the batch (their prompt and output blocks stay in the cache).
    pub(crate) fn end_step(&mut self) -> Vec<Out> {
        let mut out = Vec::with_capacity(self.running.len());
        let bb = self.block_bytes();
        let mut i = 0;
        while i < self.running.len() {
            let s = &mut self.running[i];
            let token = s.ctx.next_token();
            s.ctx.feed(&token);
            s.text.extend_from_slice(&token);
            s.generated += 1;
            let last = s.generated >= s.max_tokens;
            out.push(Out { id: s.id, token, last });
            if last {
                let s = self.running.swap_remove(i);
                self.cache.touch(&block_hashes(&s.text, bb));
            } else {
                i += 1;
            }
        }
        out
    }

    /// Sequences in the batch.
    pub(crate) fn running(&self) -> usize {
        self.running.len()
    }

    /// Requests waiting for a slot.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Fraction of the cache's blocks the running sequences use (shared prompt blocks once,
    /// plus their output so far), at most 1.
    pub(crate) fn kv_usage(&self) -> f64 {
        let mut shared = HashSet::new();
        let mut own = 0usize;
        for s in &self.running {
            shared.extend(s.prompt_blocks.iter().copied());
            own += s.generated.div_ceil(self.cfg.block_tokens.max(1));
        }
        ((shared.len() + own) as f64 / self.cfg.cache_blocks.max(1) as f64).min(1.0)
    }

    /// Prompt tokens looked up in the prefix cache, in total.
    pub(crate) fn queries(&self) -> u64 {
        self.queries
    }

    /// Prompt tokens found in the prefix cache, in total.
    pub(crate) fn hits(&self) -> u64 {
        self.hits
    }

    /// Blocks the prefix cache holds.
    pub(crate) fn cached_blocks(&self) -> usize {
        self.cache.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_to_end(e: &mut Engine) -> (Vec<u64>, HashMap<u64, Vec<u8>>) {
        let mut costs = Vec::new();
        let mut texts: HashMap<u64, Vec<u8>> = HashMap::new();
        while let Some(c) = e.begin_step() {
            costs.push(c);
            for o in e.end_step() {
                texts.entry(o.id).or_default().extend_from_slice(&o.token);
            }
        }
        (costs, texts)
    }

    #[test]
    fn tokens_are_four_bytes() {
        assert_eq!(token_count(0), 0);
        assert_eq!(token_count(1), 1);
        assert_eq!(token_count(8), 2);
        assert_eq!(token_count(9), 3);
        let mut c = Context::new();
        c.feed(b"hello");
        let t = c.generate(5);
        assert_eq!(t.len(), 20);
        assert!(t.chunks(4).all(|w| w[0] == b' ' && w[1..].iter().all(u8::is_ascii_lowercase)), "{:?}", String::from_utf8_lossy(&t));
    }

    #[test]
    fn output_continues_identically_from_any_cut() {
        let prompt = "Tell me a story about a cat. ".repeat(7);
        for extra in 0..4 {
            // Prompts of every length modulo 4: the token boundaries move, the text does not.
            let p = format!("{prompt}{}", "x".repeat(extra));
            let mut c = Context::new();
            c.feed(p.as_bytes());
            let whole = c.generate(30);
            for k in [0, 1, 7, 29] {
                let sent = &whole[..k * 4];
                let mut r = Context::new();
                r.feed(p.as_bytes());
                r.feed(sent);
                assert_eq!(r.generate(30 - k), whole[k * 4..], "prompt +{extra} bytes, resumed after {k} tokens");
            }
        }
        // Different prompts give different outputs.
        let (mut a, mut b) = (Context::new(), Context::new());
        a.feed(b"one prompt");
        b.feed(b"another prompt");
        assert_ne!(a.generate(8), b.generate(8));
    }

    #[test]
    fn engine_output_matches_the_model_and_resumes() {
        let mut e = Engine::new(EngineConfig::default());
        let id = e.submit(b"The prompt of a completion", 12);
        let (_, texts) = run_to_end(&mut e);
        let whole = texts[&id].clone();
        let mut c = Context::new();
        c.feed(b"The prompt of a completion");
        assert_eq!(whole, c.generate(12));
        let mut resumed = b"The prompt of a completion".to_vec();
        resumed.extend_from_slice(&whole[..20]);
        let id2 = e.submit(&resumed, 7);
        let (_, texts) = run_to_end(&mut e);
        assert_eq!(texts[&id2], whole[20..]);
    }

    #[test]
    fn chat_template_and_continuation() {
        let m = [("system", "Be brief."), ("user", "Hi")];
        let p = chat_prompt(&m, true, false).unwrap();
        assert_eq!(p, "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\n");
        let partial = [("system", "Be brief."), ("user", "Hi"), ("assistant", " abc def")];
        let q = chat_prompt(&partial, false, true).unwrap();
        assert_eq!(q, format!("{p} abc def"), "a partial answer continues the generation prompt");
        assert!(chat_prompt(&[], true, false).is_err());
        assert!(chat_prompt(&partial, true, true).is_err());
        assert!(chat_prompt(&m, false, true).is_err(), "the last message must be the assistant's");
    }

    #[test]
    fn prefix_cache_is_lru_of_leading_blocks() {
        let mut c = PrefixCache::new(4);
        let a = block_hashes(&[b'a'; 64 * 3], 64);
        assert_eq!(a.len(), 3);
        assert_eq!(block_hashes(&[b'a'; 64 * 3 + 63], 64), a, "partial blocks are not cached");
        assert_eq!(c.hit(&a), 0);
        c.touch(&a);
        assert_eq!(c.hit(&a), 3);
        // Chain hashes: the same block after a different head is another block.
        let mut b_text = vec![b'b'; 64];
        b_text.extend_from_slice(&[b'a'; 128]);
        let b = block_hashes(&b_text, 64);
        assert!(b.iter().all(|h| !a.contains(h)));
        c.touch(&b[..2]);
        assert_eq!(c.len(), 4);
        // a's last block was the oldest (touched first): evicted; its head stays.
        assert_eq!(c.hit(&a), 2);
        c.touch(&a[..1]);
        c.touch(&b);
        assert_eq!(c.hit(&b), 3);
        assert_eq!(c.hit(&a), 1, "a[0] touched recently, a[1] evicted");
    }

    #[test]
    fn batch_holds_32_and_others_wait() {
        let mut e = Engine::new(EngineConfig::default());
        let ids: Vec<u64> = (0..40).map(|i| e.submit(format!("request {i:04}").as_bytes(), 3)).collect();
        assert_eq!((e.running(), e.waiting()), (0, 40));
        let cost = e.begin_step().unwrap();
        assert_eq!((e.running(), e.waiting()), (32, 8));
        // 32 prompts of 12 bytes (3 tokens), none cached: 10 ms + 96 * 0.05 ms.
        assert_eq!(cost, 10_000 + 96 * 50);
        let out = e.end_step();
        assert_eq!(out.len(), 32);
        assert!(out.iter().all(|o| !o.last));
        e.begin_step();
        e.end_step();
        e.begin_step();
        let out = e.end_step();
        assert!(out.iter().all(|o| o.last), "3 tokens each");
        assert_eq!((e.running(), e.waiting()), (0, 8));
        let cost = e.begin_step().unwrap();
        assert_eq!(e.running(), 8);
        assert_eq!(cost, 10_000 + 8 * 3 * 50);
        let _ = ids;
    }

    #[test]
    fn shared_prefix_hits_and_cost() {
        let mut e = Engine::new(EngineConfig::default());
        let system = "s".repeat(8000); // 2,000 tokens, 125 blocks
        let p1 = format!("{system}{}", "u".repeat(800));
        e.submit(p1.as_bytes(), 1);
        let c1 = e.begin_step().unwrap();
        assert_eq!(c1, 10_000 + 2200 * 50, "nothing cached: 2,200 tokens of prefill");
        e.end_step();
        assert_eq!((e.queries(), e.hits()), (2200, 0));
        let p2 = format!("{system}{}", "v".repeat(800));
        e.submit(p2.as_bytes(), 1);
        let c2 = e.begin_step().unwrap();
        assert_eq!(c2, 10_000 + 200 * 50, "the system prompt's 2,000 tokens are cached");
        e.end_step();
        assert_eq!((e.queries(), e.hits()), (4400, 2000));
        // The same prompt again: its 137 whole blocks cached, the 8 tokens after them not.
        e.submit(p2.as_bytes(), 1);
        assert_eq!(e.begin_step().unwrap(), 10_000 + 8 * 50);
        e.end_step();
        // Output joins the cache: the next turn hits the history.
        let mut e = Engine::new(EngineConfig::default());
        let turn1 = "q".repeat(60);
        let id = e.submit(turn1.as_bytes(), 4); // 60 + 16 bytes = one whole block after
        let (_, texts) = run_to_end(&mut e);
        let mut turn2 = turn1.into_bytes();
        turn2.extend_from_slice(&texts[&id]);
        turn2.extend_from_slice(b"and more");
        let before = e.hits();
        e.submit(&turn2, 1);
        e.begin_step();
        assert_eq!(e.hits() - before, 16, "the first block (prompt and output) was cached");
    }

    #[test]
    fn cancel_and_kv_usage() {
        let mut e = Engine::new(EngineConfig { cache_blocks: 100, ..EngineConfig::default() });
        let a = e.submit(&[b'x'; 640], 50); // 10 blocks
        let b = e.submit(&[b'x'; 640], 50); // the same 10 blocks
        let _c = e.submit(&[b'y'; 320], 50); // 5 blocks
        e.begin_step();
        assert!((e.kv_usage() - 0.15).abs() < 1e-9, "{}", e.kv_usage());
        e.end_step();
        assert!((e.kv_usage() - 0.18).abs() < 1e-9, "plus one output block each: {}", e.kv_usage());
        e.cancel(a);
        e.cancel(b);
        assert_eq!(e.running(), 1);
        assert!(e.begin_step().is_some());
        assert_eq!(e.end_step().len(), 1);
    }
}
