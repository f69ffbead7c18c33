//! Tokenizer-free prefix hashing and the per-service prefix index (which replica was recently
//! sent which prompt blocks), as llm-d's approximate prefix-cache scorer does it.
//!
//! **Blocks.** A prompt's UTF-8 bytes (any bytes: nothing here decodes them) are cut into
//! blocks of `block_bytes` bytes (default [`BLOCK_BYTES`] = 64, llm-d's default `blockSize`);
//! only whole blocks are hashed (a trailing partial block is dropped: an engine caches whole
//! blocks too), and at most `max_blocks` leading blocks (default [`MAX_BLOCKS`] = 256, llm-d's
//! `maxPrefixBlocksToMatch`: 16 KiB of prompt). The block size is a number of *bytes*, on
//! purpose: it assumes nothing about how many bytes a model's tokenizer puts in a token, so it
//! never has to match an engine's block size; it only has to be small enough that prompts
//! sharing a prefix share whole blocks.
//!
//! **Chain.** Block `i`'s hash covers blocks `0..=i` and a context (the model name, so two
//! models never share entries): `h(-1) = H(seed, context)`, `h(i) = H(h(i-1), block i)`. Two
//! prompts therefore share block hash `i` only if they share their first `(i+1) * block_bytes`
//! bytes (up to a 64-bit collision). The hash is a fixed, seedless mixing function (words of 8
//! bytes multiplied and folded, then SplitMix64's finaliser): every proxy computes the same
//! values. It is not collision-resistant against an adversary; a forged collision can only
//! steer a request towards a replica, and the load bound still applies.
//!
//! **Index.** [`PrefixIndex`] remembers, per replica, the block hashes of the requests recently
//! routed to it, in a least-recently-used set of at most `capacity_blocks` entries (default
//! [`CAPACITY_BLOCKS`] = 31,250, llm-d's `lruCapacityPerServer`: about 2 MB of prompt text, which
//! should approximate what the replica's KV cache holds). A request's blocks are touched from
//! the last to the first, so a prompt's leading blocks are the most recent and the index, like
//! an engine, evicts the tails of old prompts before their shared heads. The expected cache hit
//! of a replica for a request is the number of the request's *leading* blocks it holds.

use std::collections::{BTreeMap, VecDeque};

use rustc_hash::FxHashMap;

use crate::Key;

/// Default block size in bytes of prompt (llm-d's approximate prefix scorer's default).
pub const BLOCK_BYTES: usize = 64;

/// Default bound on the leading blocks hashed per request (16 KiB of prompt at 64 bytes).
pub const MAX_BLOCKS: usize = 256;

/// Default per-replica capacity of the prefix index, in blocks.
pub const CAPACITY_BLOCKS: usize = 31_250;

/// The chain hash of one block of a prompt (covering every block before it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockHash(pub u64);

/// How prompts are cut into blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefixConfig {
    /// Bytes per block (0 is read as 1).
    pub block_bytes: usize,
    /// Leading blocks hashed at most (0: none, so requests route as if they had no prompt).
    pub max_blocks: usize,
}

impl Default for PrefixConfig {
    fn default() -> PrefixConfig {
        PrefixConfig { block_bytes: BLOCK_BYTES, max_blocks: MAX_BLOCKS }
    }
}

impl PrefixConfig {
    /// The prompt bytes worth reading for hashing: anything past this is never looked at, so a
    /// caller may stop buffering a body there.
    pub fn max_bytes(&self) -> usize {
        self.block_bytes.max(1).saturating_mul(self.max_blocks)
    }
}

/// SplitMix64's finaliser: a bijection that spreads every input bit over the output.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Hash of `bytes` continuing from `prev` (length included, so zero padding is not ambiguous).
pub(crate) fn hash_bytes(prev: u64, bytes: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = mix(prev ^ (bytes.len() as u64).wrapping_mul(K));
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let w = u64::from_le_bytes(w.try_into().expect("chunks of 8"));
        h = (h ^ w).wrapping_mul(K).rotate_left(29);
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(last)).wrapping_mul(K).rotate_left(29);
    }
    mix(h)
}

/// The chain hashes of a prompt's leading whole blocks, after `context` (the model name; empty
/// if none): at most `cfg.max_blocks` of them, none for a prompt shorter than one block.
pub fn block_hashes(context: &[u8], prompt: &[u8], cfg: &PrefixConfig) -> Vec<BlockHash> {
    let size = cfg.block_bytes.max(1);
    let n = (prompt.len() / size).min(cfg.max_blocks);
    let mut out = Vec::with_capacity(n);
    let mut h = hash_bytes(0x7A6E_6465_6D2D_7066, context);
    for block in prompt.chunks_exact(size).take(n) {
        h = hash_bytes(h, block);
        out.push(BlockHash(h));
    }
    out
}

/// One replica's least-recently-used set of block hashes.
///
/// `stamp` of a live hash is its last touch; `log` lists touches oldest first, including stale
/// ones (a hash touched again since), which eviction skips. The log is rebuilt from the map
/// when stale entries outnumber live ones, so memory stays within about three entries per
/// live block and every operation is amortised O(1).
#[derive(Clone, Debug, Default)]
struct Lru {
    clock: u64,
    stamp: FxHashMap<BlockHash, u64>,
    log: VecDeque<(u64, BlockHash)>,
}

impl Lru {
    fn touch(&mut self, h: BlockHash, capacity: usize) {
        self.clock += 1;
        self.stamp.insert(h, self.clock);
        self.log.push_back((self.clock, h));
        while self.stamp.len() > capacity {
            let Some((s, old)) = self.log.pop_front() else { break };
            if self.stamp.get(&old) == Some(&s) {
                self.stamp.remove(&old);
            }
        }
        if self.log.len() > 2 * self.stamp.len() + 64 {
            let mut live: Vec<(u64, BlockHash)> = self.stamp.iter().map(|(h, s)| (*s, *h)).collect();
            live.sort_unstable();
            self.log = live.into();
        }
    }
}

/// Which replica recently served which block hashes: one bounded LRU set per replica.
#[derive(Clone, Debug)]
pub struct PrefixIndex {
    capacity: usize,
    replicas: BTreeMap<Key, Lru>,
}

impl PrefixIndex {
    /// An empty index holding at most `capacity_blocks` block hashes per replica (0: the index
    /// remembers nothing and every expected hit is 0).
    pub fn new(capacity_blocks: usize) -> PrefixIndex {
        PrefixIndex { capacity: capacity_blocks, replicas: BTreeMap::new() }
    }

    /// The per-replica capacity in blocks.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Notes that a request with these blocks was sent to `replica` (which will cache them).
    pub fn record(&mut self, replica: Key, blocks: &[BlockHash]) {
        if self.capacity == 0 || blocks.is_empty() {
            return;
        }
        let lru = self.replicas.entry(replica).or_default();
        // Last block first: the leading blocks end up the most recently used.
        for &h in blocks.iter().rev() {
            lru.touch(h, self.capacity);
        }
    }

    /// The number of leading blocks of `blocks` that `replica` is believed to hold.
    pub fn hit(&self, replica: Key, blocks: &[BlockHash]) -> usize {
        match self.replicas.get(&replica) {
            Some(lru) => blocks.iter().take_while(|h| lru.stamp.contains_key(h)).count(),
            None => 0,
        }
    }

    /// Forgets a replica (it left the service).
    pub fn forget(&mut self, replica: Key) {
        self.replicas.remove(&replica);
    }

    /// Keeps only the replicas for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(Key) -> bool) {
        self.replicas.retain(|k, _| keep(*k));
    }

    /// The replicas the index holds anything for, in key order.
    pub fn replicas(&self) -> impl Iterator<Item = Key> + '_ {
        self.replicas.keys().copied()
    }

    /// Block hashes held for `replica`.
    pub fn len(&self, replica: Key) -> usize {
        self.replicas.get(&replica).map_or(0, |l| l.stamp.len())
    }

    /// Whether the index holds nothing at all.
    pub fn is_empty(&self) -> bool {
        self.replicas.values().all(|l| l.stamp.is_empty())
    }
}
