//! The etcd backend: the cluster's state in etcd, committed by its quorum, for controllers that
//! take over from each other.
//!
//! Every record ([`crate::rec`]) is one key below the cluster's prefix (`/tandem/` by default):
//! `jobs/ID` (20 digits), `arrays/ID`, `nodes/NAME`, `services/NAME`, `kube/KIND/NS/NAME`,
//! `creds/HOLDER`, `spent/JTI`, `meta/KEY`. Beside it each controller keeps a SQLite replica
//! of the same records in its data directory ([`crate::Store`]): the leader writes it after
//! each commit, a standby from what it watches. It answers what etcd has no index for (`sacct`'s
//! finished jobs by user and end time, an array's tasks by id range), and a standby that takes
//! over loads from it, warm, instead of reading everything from etcd again.
//!
//! **Commits.** One commit (the journal's group) is one etcd transaction when it fits etcd's
//! defaults (`--max-txn-ops` 128, `--max-request-bytes` 1.5 MiB; this module keeps under
//! [`MAX_OPS`] and [`MAX_BYTES`]). A larger group is staged: its records are written in pieces
//! under `groups/G/N`, then one transaction writes `groups/G/done`, which is the commit (what
//! is acknowledged); then the records are written to their keys and the group deleted. A reader
//! (a standby's watch, a full read at start) applies a group's records at its `done` marker
//! and ignores a group without one, so no reader sees part of a group; a leader that stops in
//! the middle leaves a group that the next commit, or the next leader, deletes first.
//!
//! **Fencing.** Every transaction of the leader compares the creation revision of its
//! election key (`election/LEASE`) with the one it won with: once its lease is gone (it lost
//! etcd for longer than the TTL, or another controller leads), none of its writes can commit,
//! and [`StoreError::Deposed`] says so.

use crate::rec::{self, Rec};
use crate::{Store, StoreError};
pub use etcd_client::Client;
use etcd_client::{Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, Txn, TxnOp, WatchOptions};
use std::time::Duration;

/// Most operations in one transaction (etcd's default `--max-txn-ops` is 128).
pub const MAX_OPS: usize = 120;

/// Most bytes of keys and values in one transaction (etcd's default `--max-request-bytes` is
/// 1.5 MiB; the rest is left to the request's framing).
pub const MAX_BYTES: usize = 1 << 20;

/// The largest value one key holds, and the largest record this backend stores: a request
/// with one such value stays under etcd's default 1.5 MiB.
pub const MAX_VALUE: usize = 1_400_000;

/// Where the cluster's state is, and how to reach it.
#[derive(Debug, Clone)]
pub struct Config {
    /// etcd's client addresses: `host:port`.
    pub endpoints: Vec<String>,
    /// The cluster's keys are below this prefix (ends with `/`).
    pub prefix: String,
    /// Client certificates for etcd's TLS (`--client-cert-auth`): the CA that signed etcd's
    /// certificates, this controller's certificate and key (PEM files).
    pub tls: Option<Tls>,
    /// The leader's lease, in seconds.
    pub lease_ttl: i64,
    /// How often the leader compacts etcd's history and defragments its members ([`upkeep`]);
    /// `None`: never (a site whose etcd does its own).
    pub upkeep_every: Option<Duration>,
}

/// [`Config::upkeep_every`]'s default.
pub const UPKEEP_EVERY: Duration = Duration::from_secs(300);

/// A member whose database file holds this many bytes more than its data (and at least a
/// quarter more) is defragmented by [`upkeep`].
pub const DEFRAG_FREE: i64 = 64 << 20;

/// TLS to etcd.
#[derive(Debug, Clone)]
pub struct Tls {
    /// The CA certificate that signed etcd's.
    pub ca: std::path::PathBuf,
    /// This controller's client certificate.
    pub cert: std::path::PathBuf,
    /// Its key.
    pub key: std::path::PathBuf,
}

/// The default lease of a controller's leadership, in seconds: a leader that does not renew
/// it within this long is replaced. 3 s: a leader gives up at four fifths of it (2.4 s), which
/// outlasts etcd's own change of leader at its default settings (an election timeout of 1 s,
/// randomised up to 2 s), so losing an etcd member costs no failover.
pub const LEASE_TTL: i64 = 3;

impl Config {
    /// Reads `etcd://host:port[,host:port...]` (the `--store` value).
    pub fn parse(url: &str, prefix: &str) -> Result<Config, String> {
        let Some(rest) = url.strip_prefix("etcd://") else {
            return Err(format!("{url:?}: expected etcd://HOST:PORT[,HOST:PORT...]"));
        };
        let endpoints: Vec<String> = rest.trim_end_matches('/').split(',').map(|s| s.trim().to_string()).collect();
        for e in &endpoints {
            let ok = e.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0) && !h.contains('/'));
            if !ok {
                return Err(format!("{url:?}: {e:?} is not HOST:PORT"));
            }
        }
        let p = prefix.trim_end_matches('/');
        if !p.starts_with('/') || p.len() < 2 || p.chars().any(|c| c.is_control() || c == ' ') {
            return Err(format!("--etcd-prefix {prefix:?}: expected a path such as /tandem"));
        }
        Ok(Config { endpoints, prefix: format!("{p}/"), tls: None, lease_ttl: LEASE_TTL, upkeep_every: Some(UPKEEP_EVERY) })
    }
}

/// An etcd error, as a store error.
fn e(x: etcd_client::Error) -> StoreError {
    StoreError::Etcd(x.to_string())
}

/// Whether a call that failed so may go again: etcd (or the member asked) was unreachable or
/// without a leader, as opposed to refusing the request itself.
fn transient(x: &etcd_client::Error) -> bool {
    use tonic::Code;
    match x {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(s) => {
            matches!(
                s.code(),
                Code::Unavailable | Code::Unknown | Code::DeadlineExceeded | Code::Aborted | Code::Cancelled | Code::Internal
            )
        }
        _ => false,
    }
}

/// `call` until it succeeds, fails for good, or [`CALL_TIMEOUT`] (the caller's bound) ends it.
async fn retry<T, F, Fut>(mut call: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    let mut pause = Duration::from_millis(20);
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(x) if transient(&x) => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(250));
            }
            Err(x) => return Err(e(x)),
        }
    }
}

/// The end of the range of keys that start with `p`.
fn prefix_end(p: &[u8]) -> Vec<u8> {
    let mut end = p.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The leadership a controller's transactions compare on.
#[derive(Debug, Clone)]
pub struct Fence {
    /// The election key it created.
    pub key: Vec<u8>,
    /// Its creation revision.
    pub rev: i64,
}

/// The link to etcd a [`Store`] commits through.
pub struct Remote {
    /// Each member on its own.
    members: Members,
    /// Its own runtime (`None` once dropped).
    rt: Option<tokio::runtime::Runtime>,
    client: Client,
    cfg: Config,
    fence: Option<Fence>,
    /// The number of the next staged group.
    group: u64,
    /// A staged commit may have left a group behind: the next commit deletes it first.
    leftover: bool,
    /// The revision of the last commit.
    last: i64,
    /// Pieces of groups not yet committed at the last full read.
    pending: Follower,
    /// Keys the last full read could not read.
    skipped: u64,
    /// etcd's cluster id, as the last full read saw it.
    cluster_id: u64,
    /// Records left out of commits for their size since last asked: key, bytes.
    oversized: Vec<(String, usize)>,
    /// What it has done.
    stats: crate::EtcdStats,
}

/// How long one call to etcd (a commit's transactions, a read) may take before it counts as
/// failed. The election's campaign, which waits for the leader to go, has none.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `f` on the backend's runtime, from any thread (inside another runtime too), for
/// [`CALL_TIMEOUT`] at most.
fn block<T: Send>(
    rt: &Option<tokio::runtime::Runtime>,
    f: impl std::future::Future<Output = Result<T, StoreError>> + Send,
) -> Result<T, StoreError> {
    block_for(CALL_TIMEOUT, rt, f)
}

/// [`block`] with a bound of its own (a staged commit's: one [`CALL_TIMEOUT`] per transaction).
fn block_for<T: Send>(
    limit: Duration,
    rt: &Option<tokio::runtime::Runtime>,
    f: impl std::future::Future<Output = Result<T, StoreError>> + Send,
) -> Result<T, StoreError> {
    let rt = rt.as_ref().expect("a runtime until dropped");
    let f =
        async move { tokio::time::timeout(limit, f).await.unwrap_or_else(|_| Err(StoreError::Etcd(format!("no answer in {limit:?}")))) };
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|s| s.spawn(|| rt.block_on(f)).join().expect("the etcd call panicked"))
    } else {
        rt.block_on(f)
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        // Allowed from inside another runtime, unlike dropping it.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// A piece of a staged group: its records, each as key, whether present, value (public for
/// the tests that leave a group half written, as a leader that died would).
pub fn encode_piece(kvs: &[(String, Option<String>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in kvs {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(k.as_bytes());
        match v {
            Some(v) => {
                out.push(1);
                out.extend_from_slice(&(v.len() as u32).to_le_bytes());
                out.extend_from_slice(v.as_bytes());
            }
            None => out.push(0),
        }
    }
    out
}

fn decode_piece(mut b: &[u8]) -> Result<Vec<(String, Option<Vec<u8>>)>, StoreError> {
    let bad = || StoreError::Key("groups/: a staged piece that does not decode".into());
    let take = |b: &mut &[u8], n: usize| -> Result<Vec<u8>, StoreError> {
        if b.len() < n {
            return Err(bad());
        }
        let (h, t) = b.split_at(n);
        *b = t;
        Ok(h.to_vec())
    };
    let mut out = Vec::new();
    while !b.is_empty() {
        let n = u32::from_le_bytes(take(&mut b, 4)?.try_into().map_err(|_| bad())?) as usize;
        let k = String::from_utf8(take(&mut b, n)?).map_err(|_| bad())?;
        let v = match take(&mut b, 1)?[0] {
            1 => {
                let n = u32::from_le_bytes(take(&mut b, 4)?.try_into().map_err(|_| bad())?) as usize;
                Some(take(&mut b, n)?)
            }
            _ => None,
        };
        out.push((k, v));
    }
    Ok(out)
}

/// The records of a group's pieces (in piece order).
fn group_records(pieces: &std::collections::BTreeMap<u64, Vec<u8>>) -> Result<Vec<Rec>, StoreError> {
    let mut out = Vec::new();
    for p in pieces.values() {
        for (k, v) in decode_piece(p)? {
            if let Some(r) = rec::parse(&k, v.as_deref())? {
                out.push(r);
            }
        }
    }
    Ok(out)
}

/// A key below `groups/`: the group and the piece (`None`: the group's `done` marker).
fn group_key(rest: &str) -> Option<(u64, Option<u64>)> {
    let (g, p) = rest.split_once('/')?;
    let g = g.parse().ok()?;
    if p == "done" { Some((g, None)) } else { Some((g, Some(p.parse().ok()?))) }
}

impl Remote {
    /// Connects to etcd (it answers, or this fails after a few seconds).
    pub fn connect(cfg: Config) -> Result<Remote, StoreError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tandem-etcd")
            .enable_all()
            .build()
            .map_err(|x| StoreError::Etcd(format!("starting its runtime: {x}")))?;
        let mut opts = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(3))
            .with_keep_alive(Duration::from_secs(1), Duration::from_secs(2))
            .with_keep_alive_while_idle(true);
        let scheme = if cfg.tls.is_some() { "https" } else { "http" };
        if let Some(t) = &cfg.tls {
            let read = |p: &std::path::Path| std::fs::read(p).map_err(|x| StoreError::Etcd(format!("reading {}: {x}", p.display())));
            let tls = etcd_client::TlsOptions::new()
                .ca_certificate(etcd_client::Certificate::from_pem(read(&t.ca)?))
                .identity(etcd_client::Identity::from_pem(read(&t.cert)?, read(&t.key)?));
            opts = opts.with_tls(tls);
        }
        let endpoints: Vec<String> = cfg.endpoints.iter().map(|h| format!("{scheme}://{h}")).collect();
        let rt = Some(rt);
        let members = Members { endpoints: endpoints.clone(), opts: opts.clone() };
        let client = block(&rt, async {
            let mut c = Client::connect(&endpoints, Some(opts)).await.map_err(e)?;
            // One read, so an etcd that does not answer is said now.
            c.get("health", Some(GetOptions::new().with_count_only())).await.map_err(e)?;
            Ok::<_, StoreError>(c)
        })
        .map_err(|x| StoreError::Etcd(format!("etcd at {}: {x}", endpoints.join(","))))?;
        Ok(Remote {
            members,
            rt,
            client,
            cfg,
            fence: None,
            group: 0,
            leftover: false,
            last: 0,
            pending: Follower::default(),
            skipped: 0,
            cluster_id: 0,
            oversized: Vec::new(),
            stats: Default::default(),
        })
    }

    /// The client (for the election, the watch and the lease: they run on the caller's runtime).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Each member on its own (for a lease's renewals).
    pub fn members(&self) -> Members {
        self.members.clone()
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The election's name (its keys are below it).
    pub fn election(&self) -> String {
        format!("{}election", self.cfg.prefix)
    }

    /// The revision of the last commit.
    pub fn last_revision(&self) -> i64 {
        self.last
    }

    /// From now on every commit compares on this leadership.
    pub fn set_fence(&mut self, f: Fence, boot: u64) {
        self.fence = Some(f);
        self.group = boot << 32;
    }

    fn compare(&self) -> Vec<Compare> {
        match &self.fence {
            Some(f) => vec![Compare::create_revision(f.key.clone(), CompareOp::Equal, f.rev)],
            None => Vec::new(),
        }
    }

    /// One transaction of `ops` under the fence: its revision. Tried again while etcd is
    /// unreachable or between leaders (a member died; the call's time bounds it): a transaction
    /// that did commit and is sent again writes the same values, so nothing doubles.
    async fn txn(client: &mut Client, compare: Vec<Compare>, ops: Vec<TxnOp>) -> Result<i64, StoreError> {
        let fenced = !compare.is_empty();
        let txn = Txn::new().when(compare).and_then(ops);
        let r = retry(|| {
            let (mut c, t) = (client.clone(), txn.clone());
            async move { c.txn(t).await }
        })
        .await?;
        if fenced && !r.succeeded() {
            return Err(StoreError::Deposed);
        }
        Ok(r.header().map_or(0, |h| h.revision()))
    }

    fn full(&self, k: &str) -> Vec<u8> {
        format!("{}{k}", self.cfg.prefix).into_bytes()
    }

    /// Commits `recs` (the spent join tokens that expired before a time are `spent`'s: the
    /// replica knows them); returns the revision the commit made. Refuses a record larger
    /// than [`MAX_VALUE`] before anything is written.
    pub fn commit(&mut self, recs: &[Rec], spent: &dyn Fn(i64) -> Result<Vec<String>, StoreError>) -> Result<i64, StoreError> {
        let mut kvs: Vec<(String, Option<String>)> = Vec::with_capacity(recs.len());
        for r in recs {
            match r {
                Rec::ForgetSpent(t) => {
                    for jti in spent(*t)? {
                        kvs.push(rec::key_value(&Rec::Spent(jti, None)).expect("a key"));
                    }
                }
                r => kvs.push(rec::key_value(r).expect("a key")),
            }
        }
        // etcd refuses a transaction that names a key twice: the last of each stands.
        let mut seen = std::collections::HashSet::new();
        let mut kvs: Vec<(String, Option<String>)> = kvs.into_iter().rev().filter(|(k, _)| seen.insert(k.clone())).collect();
        kvs.reverse();
        // A record larger than etcd takes cannot be stored: it is left out (and said), so it does
        // not hold back every commit after it. Submissions are refused before they could make
        // one; a job's record that grows past it (many steps) stays in this controller alone.
        for (k, v) in &kvs {
            if let Some(v) = v.as_ref().filter(|v| v.len() > MAX_VALUE) {
                self.oversized.push((k.clone(), v.len()));
                self.stats.oversized += 1;
            }
        }
        kvs.retain(|(_, v)| v.as_ref().is_none_or(|v| v.len() <= MAX_VALUE));
        let bytes: usize = kvs.iter().map(|(k, v)| k.len() + self.cfg.prefix.len() + v.as_ref().map_or(0, |v| v.len())).sum();
        let compare = self.compare();
        let groups = self.full("groups/");
        let groups_end = prefix_end(&groups);
        let clear =
            |ops: &mut Vec<TxnOp>| ops.push(TxnOp::delete(groups.clone(), Some(DeleteOptions::new().with_range(groups_end.clone()))));
        let leftover = self.leftover;
        let prefix = self.cfg.prefix.clone();
        let ops_of = |kvs: &[(String, Option<String>)]| -> Vec<TxnOp> {
            kvs.iter()
                .map(|(k, v)| match v {
                    Some(v) => TxnOp::put(format!("{prefix}{k}"), v.clone(), None),
                    None => TxnOp::delete(format!("{prefix}{k}"), None),
                })
                .collect()
        };
        let mut client = self.client.clone();
        if kvs.len() + usize::from(leftover) <= MAX_OPS && bytes <= MAX_BYTES {
            let mut ops = Vec::new();
            if leftover {
                clear(&mut ops);
            }
            ops.extend(ops_of(&kvs));
            let started = std::time::Instant::now();
            let rev = block(&self.rt, Self::txn(&mut client, compare, ops))?;
            self.leftover = false;
            self.last = rev;
            self.stats.transactions += 1;
            self.stats.observe(started.elapsed().as_secs_f64(), kvs.len());
            return Ok(rev);
        }
        // Staged: pieces, the marker (the commit), the keys, the group's deletion.
        self.group += 1;
        let g = self.group;
        self.leftover = true;
        let mut pieces: Vec<Vec<u8>> = Vec::new();
        let mut cur: Vec<(String, Option<String>)> = Vec::new();
        let mut size = 0;
        for kv in &kvs {
            let n = kv.0.len() + kv.1.as_ref().map_or(0, |v| v.len()) + 9;
            if !cur.is_empty() && size + n > MAX_VALUE {
                pieces.push(encode_piece(&std::mem::take(&mut cur)));
                size = 0;
            }
            cur.push(kv.clone());
            size += n;
        }
        if !cur.is_empty() {
            pieces.push(encode_piece(&cur));
        }
        let batches: Vec<Vec<TxnOp>> = {
            let mut out = Vec::new();
            let (mut cur, mut size) = (Vec::new(), 0);
            for kv in &kvs {
                let n = kv.0.len() + self.cfg.prefix.len() + kv.1.as_ref().map_or(0, |v| v.len());
                if !cur.is_empty() && (cur.len() >= MAX_OPS || size + n > MAX_BYTES) {
                    out.push(ops_of(&std::mem::take(&mut cur)));
                    size = 0;
                }
                cur.push(kv.clone());
                size += n;
            }
            if !cur.is_empty() {
                out.push(ops_of(&cur));
            }
            out
        };
        let piece_keys: Vec<Vec<u8>> = (0..pieces.len()).map(|i| self.full(&format!("groups/{g:020}/{i:06}"))).collect();
        let done = self.full(&format!("groups/{g:020}/done"));
        let txns = batches.len() + piece_keys.len() + 3;
        let started = std::time::Instant::now();
        let rev = block_for(CALL_TIMEOUT * txns as u32, &self.rt, async {
            if leftover {
                // What an earlier group left (a leader that stopped in its middle).
                let mut ops = Vec::new();
                clear(&mut ops);
                Self::txn(&mut client, compare.clone(), ops).await?;
            }
            for (k, p) in piece_keys.into_iter().zip(pieces) {
                Self::txn(&mut client, compare.clone(), vec![TxnOp::put(k, p, None)]).await?;
            }
            let rev = Self::txn(&mut client, compare.clone(), vec![TxnOp::put(done, "", None)]).await?;
            for ops in batches {
                Self::txn(&mut client, compare.clone(), ops).await?;
            }
            let mut ops = Vec::new();
            clear(&mut ops);
            Self::txn(&mut client, compare.clone(), ops).await?;
            Ok::<_, StoreError>(rev)
        });
        // Written to their keys and the group deleted: nothing is left behind.
        if let Ok(r) = rev {
            self.leftover = false;
            self.last = r;
            self.stats.staged += 1;
            self.stats.transactions += (txns - 1 + usize::from(leftover)) as u64;
            self.stats.observe(started.elapsed().as_secs_f64(), kvs.len());
        }
        rev
    }

    /// Reads a key's value (below the prefix).
    pub fn get(&self, k: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let c = self.client.clone();
        let key = self.full(k);
        block(&self.rt, async move {
            let r = retry(|| {
                let (mut c, k) = (c.clone(), key.clone());
                async move { c.get(k, None).await }
            })
            .await?;
            Ok(r.kvs().first().map(|kv| kv.value().to_vec()))
        })
    }

    /// Writes `recs`, a SQLite database's whole state ([`Store::records_all`]), below the
    /// prefix (`tandem admin migrate`), which must hold nothing but what a migration cut short
    /// left (deleted first). `meta/migrating` is written first and deleted last, and a
    /// controller refuses to start while it is there ([`StoreError::Migrating`]); the records
    /// go in commits of at most 2,000 (staged where larger than one transaction). Returns the
    /// number of keys written.
    pub fn migrate_into(&mut self, recs: &[Rec]) -> Result<usize, StoreError> {
        self.check_outer()?;
        // A record etcd cannot hold in one value is refused before anything is written (SQLite
        // has no such bound).
        for r in recs {
            if let Some((key, Some(v))) = rec::key_value(r)
                && v.len() > MAX_VALUE
            {
                return Err(StoreError::TooLarge { key, bytes: v.len() });
            }
        }
        let c = self.client.clone();
        let prefix = self.cfg.prefix.clone();
        let end = prefix_end(prefix.as_bytes());
        let (found, cut_short) = block(&self.rt, {
            let (c, prefix, end) = (c.clone(), prefix.clone(), end.clone());
            async move {
                let keys = retry(|| {
                    let (mut c, p, e) = (c.clone(), prefix.clone(), end.clone());
                    async move { c.get(p, Some(GetOptions::new().with_range(e).with_keys_only().with_limit(1))).await }
                })
                .await?;
                let marker = retry(|| {
                    let (mut c, k) = (c.clone(), format!("{prefix}meta/migrating"));
                    async move { c.get(k, Some(GetOptions::new().with_keys_only())).await }
                })
                .await?;
                Ok((keys.count(), marker.count() > 0))
            }
        })?;
        if found > 0 && !cut_short {
            return Err(StoreError::NotEmpty(prefix));
        }
        // What a migration cut short left, then the marker.
        block(&self.rt, async move {
            retry(|| {
                let (mut c, p, e) = (c.clone(), prefix.clone(), end.clone());
                async move {
                    // Two steps: etcd takes no put within a range a transaction deletes. Cut
                    // short between them, the prefix is empty.
                    c.delete(p.clone(), Some(DeleteOptions::new().with_range(e))).await?;
                    c.put(format!("{p}meta/migrating"), "1", None).await
                }
            })
            .await
        })?;
        let none = |_: i64| Ok(Vec::new());
        let mut n = 0;
        for chunk in recs.chunks(2_000) {
            self.commit(chunk, &none)?;
            n += chunk.len();
        }
        self.commit(&[Rec::Meta("migrating".into(), None)], &none)?;
        Ok(n)
    }

    /// Refuses a prefix that lies within another cluster's: one whose parent paths hold a
    /// cluster's schema key (`/a/meta/schema` for `/a/b/`). One within this prefix is found by
    /// [`Remote::read_all`].
    pub fn check_outer(&mut self) -> Result<(), StoreError> {
        let ours = self.cfg.prefix.trim_end_matches('/').to_string();
        let mut at = ours.as_str();
        while let Some((parent, _)) = at.rsplit_once('/') {
            if parent.is_empty() {
                break;
            }
            let c = self.client.clone();
            let key = format!("{parent}/meta/schema");
            let found = block(&self.rt, async move {
                retry(|| {
                    let (mut c, k) = (c.clone(), key.clone());
                    async move { c.get(k, Some(GetOptions::new().with_keys_only())).await }
                })
                .await
            })?;
            if !found.kvs().is_empty() {
                return Err(StoreError::Nested { ours: ours.clone(), other: format!("{parent}/"), relation: "this prefix lies within it" });
            }
            at = parent;
        }
        Ok(())
    }

    /// Reads every record at one revision, a page at a time, into `into` (emptied first);
    /// returns the revision.
    pub fn read_all(&mut self, into: &mut Store) -> Result<i64, StoreError> {
        self.check_outer()?;
        let c = self.client.clone();
        let prefix = self.cfg.prefix.clone();
        let end = prefix_end(prefix.as_bytes());
        into.clear()?;
        let (rev, pending, skipped, cluster_id) = block(&self.rt, async move {
            let mut cluster_id = 0u64;
            let mut skipped = 0u64;
            let mut from = prefix.clone().into_bytes();
            let mut rev = 0i64;
            let mut groups: std::collections::BTreeMap<u64, (bool, std::collections::BTreeMap<u64, Vec<u8>>)> = Default::default();
            loop {
                let mut o = GetOptions::new().with_range(end.clone()).with_limit(500);
                if rev > 0 {
                    o = o.with_revision(rev);
                }
                let r = retry(|| {
                    let (mut c, f, o) = (c.clone(), from.clone(), o.clone());
                    async move { c.get(f, Some(o)).await }
                })
                .await?;
                if rev == 0 {
                    rev = r.header().map_or(0, |h| h.revision());
                    cluster_id = r.header().map_or(0, |h| h.cluster_id());
                }
                let mut recs = Vec::new();
                for kv in r.kvs() {
                    let k = String::from_utf8_lossy(kv.key());
                    let rel = &k[prefix.len().min(k.len())..];
                    if let Some(rest) = rel.strip_prefix("groups/") {
                        if let Some((g, p)) = group_key(rest) {
                            let e = groups.entry(g).or_default();
                            match p {
                                None => e.0 = true,
                                Some(p) => {
                                    e.1.insert(p, kv.value().to_vec());
                                }
                            }
                        }
                        continue;
                    }
                    // A key this build does not read (a newer build's record) is left alone,
                    // counted: the rest of the state still loads; unless it is another
                    // cluster's schema key, whose prefix then lies inside this one's (a record's
                    // key of this cluster's that ends the same, a Kubernetes object named so,
                    // is read as the record it is).
                    match rec::parse(rel, Some(kv.value())) {
                        Ok(Some(r)) => recs.push(r),
                        read => {
                            if let Some(inner) = rel.strip_suffix("/meta/schema") {
                                return Err(StoreError::Nested {
                                    ours: prefix.trim_end_matches('/').to_string(),
                                    other: format!("{prefix}{inner}"),
                                    relation: "lies within this prefix",
                                });
                            }
                            skipped += u64::from(read.is_err());
                        }
                    }
                }
                into.apply(&recs, None)?;
                match r.kvs().last() {
                    Some(last) if r.more() => {
                        from = last.key().to_vec();
                        from.push(0);
                    }
                    _ => break,
                }
            }
            // Groups committed but not yet written to their keys; the pieces of one not yet
            // committed go to the watch that follows, which commits them at their marker.
            let mut pending = Follower::default();
            for (g, (done, pieces)) in groups {
                if done {
                    into.apply(&group_records(&pieces)?, None)?;
                } else {
                    pending.groups.insert(g, pieces);
                }
            }
            into.apply(&[], Some(rev))?;
            Ok((rev, pending, skipped, cluster_id))
        })?;
        self.pending = pending;
        self.skipped = skipped;
        self.cluster_id = cluster_id;
        Ok(rev)
    }

    /// The pieces of groups not yet committed at the last full read, for the watch that
    /// follows it ([`follow`]).
    pub fn take_follower(&mut self) -> Follower {
        std::mem::take(&mut self.pending)
    }

    /// What it has done.
    pub fn stats(&self) -> crate::EtcdStats {
        self.stats
    }

    /// The records left out of commits for their size since the last call: key, bytes.
    pub fn take_oversized(&mut self) -> Vec<(String, usize)> {
        std::mem::take(&mut self.oversized)
    }

    /// etcd's cluster id as it answers now.
    pub fn live_cluster_id(&self) -> Result<u64, StoreError> {
        let c = self.client.clone();
        let r = block(&self.rt, async move {
            retry(|| {
                let mut c = c.clone();
                async move { c.get("\0", Some(GetOptions::new().with_keys_only().with_limit(1))).await }
            })
            .await
        })?;
        Ok(r.header().map_or(0, |h| h.cluster_id()))
    }

    /// etcd's cluster id at the last full read. A snapshot restored with `etcdctl snapshot
    /// restore` makes a cluster with a new id: where the id stored beside the state differs,
    /// the state is a restored snapshot's.
    pub fn cluster_id(&self) -> u64 {
        self.cluster_id
    }

    /// Keys the last full read did not read (not this build's, or not of this cluster).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Settles what a former leader left in `groups/` (the new leader's first step, under its
    /// fence): a committed group's records written to their keys, then every group deleted.
    /// Nothing was committed after a group still there (a leader clears its groups before its
    /// next commit), so its records are the newest of their keys.
    pub fn settle_groups(&mut self) -> Result<(), StoreError> {
        let c = self.client.clone();
        let groups = self.full("groups/");
        let end = prefix_end(&groups);
        let found = block(&self.rt, async move {
            let r = retry(|| {
                let (mut c, g, e) = (c.clone(), groups.clone(), end.clone());
                async move { c.get(g, Some(GetOptions::new().with_range(e))).await }
            })
            .await?;
            Ok(r.kvs().iter().map(|kv| (String::from_utf8_lossy(kv.key()).into_owned(), kv.value().to_vec())).collect::<Vec<_>>())
        })?;
        let mut committed: std::collections::BTreeMap<u64, (bool, std::collections::BTreeMap<u64, Vec<u8>>)> = Default::default();
        for (k, v) in found {
            if let Some((g, p)) = k.strip_prefix(&self.cfg.prefix).and_then(|r| r.strip_prefix("groups/")).and_then(group_key) {
                let e = committed.entry(g).or_default();
                match p {
                    None => e.0 = true,
                    Some(p) => {
                        e.1.insert(p, v);
                    }
                }
            }
        }
        let recs: Vec<Rec> =
            committed.values().filter(|(done, _)| *done).map(|(_, p)| group_records(p)).collect::<Result<Vec<_>, _>>()?.concat();
        // Written as a commit of their own (staged again where large): it clears the groups
        // first, having read them.
        self.leftover = true;
        self.commit(&recs, &|_| Ok(Vec::new()))?;
        Ok(())
    }
}

/// What a standby's watch keeps of groups not yet committed.
#[derive(Default)]
pub struct Follower {
    groups: std::collections::BTreeMap<u64, std::collections::BTreeMap<u64, Vec<u8>>>,
}

/// One change a watch saw: the key below the prefix, its value (`None`: deleted), and its
/// revision.
pub struct Change {
    /// The key below the prefix.
    pub key: String,
    /// Its value; `None` when deleted.
    pub value: Option<Vec<u8>>,
    /// The revision of the change.
    pub rev: i64,
}

impl Follower {
    /// The records that `changes` (in revision order) commit: a group's at its marker, the
    /// rest as they come.
    pub fn records(&mut self, changes: Vec<Change>) -> Result<Vec<Rec>, StoreError> {
        let mut out = Vec::new();
        for c in changes {
            if let Some(rest) = c.key.strip_prefix("groups/") {
                match (group_key(rest), c.value) {
                    (Some((g, Some(p))), Some(v)) => {
                        self.groups.entry(g).or_default().insert(p, v);
                    }
                    (Some((g, None)), Some(_)) => {
                        if let Some(pieces) = self.groups.remove(&g) {
                            out.extend(group_records(&pieces)?);
                        }
                    }
                    (Some((g, _)), None) => {
                        self.groups.remove(&g);
                    }
                    _ => {}
                }
                continue;
            }
            // A key this build does not read is left alone (as the full read does).
            if let Ok(Some(r)) = rec::parse(&c.key, c.value.as_deref()) {
                out.push(r);
            }
        }
        Ok(out)
    }
}

/// Watches the cluster's keys from revision `from` and applies what commits to the replica
/// `db`, reporting each revision applied on `applied`; returns when the watch fails (the caller
/// decides what follows).
pub async fn follow(
    mut client: Client,
    prefix: String,
    from: i64,
    mut f: Follower,
    db: std::sync::Arc<std::sync::Mutex<Store>>,
    applied: tokio::sync::watch::Sender<i64>,
) -> StoreError {
    // The next revision wanted: a watch that breaks (its member died) is opened again from it,
    // on any member.
    let mut next = from;
    let mut failures = 0u32;
    loop {
        let mut stream = match client.watch(prefix.clone(), Some(WatchOptions::new().with_prefix().with_start_revision(next))).await {
            Ok(s) => s,
            Err(x) => {
                failures += 1;
                if failures > 600 {
                    return e(x);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        loop {
            let resp = match stream.message().await {
                Ok(Some(r)) => r,
                Ok(None) | Err(_) => break,
            };
            failures = 0;
            if resp.canceled() {
                return StoreError::Etcd(format!(
                    "the watch was cancelled (compacted at {}): {}",
                    resp.compact_revision(),
                    resp.cancel_reason()
                ));
            }
            let mut changes = Vec::new();
            let mut rev = 0;
            for ev in resp.events() {
                let Some(kv) = ev.kv() else { continue };
                let k = String::from_utf8_lossy(kv.key());
                let key = k.strip_prefix(prefix.as_str()).unwrap_or(&k).to_string();
                let value = match ev.event_type() {
                    etcd_client::EventType::Put => Some(kv.value().to_vec()),
                    etcd_client::EventType::Delete => None,
                };
                rev = rev.max(kv.mod_revision());
                changes.push(Change { key, value, rev: kv.mod_revision() });
            }
            if changes.is_empty() {
                continue;
            }
            let r = f.records(changes).and_then(|recs| db.lock().expect("replica lock").apply(&recs, Some(rev)));
            if let Err(x) = r {
                return x;
            }
            next = rev + 1;
            applied.send_replace(rev);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A controller's lease, kept alive until it cannot be sure of it.
pub struct Lease {
    /// Its id.
    pub id: i64,
    /// Its TTL.
    pub ttl: Duration,
    /// When it was asked for (etcd counts its TTL from later).
    pub asked: tokio::time::Instant,
}

/// Grants a lease of `ttl` seconds.
pub async fn grant(client: &mut Client, ttl: i64) -> Result<Lease, StoreError> {
    let asked = tokio::time::Instant::now();
    let r = client.lease_grant(ttl, None).await.map_err(e)?;
    Ok(Lease { id: r.id(), ttl: Duration::from_secs(r.ttl().max(1) as u64), asked })
}

/// How to reach each etcd member on its own (a lease's renewals go to one member at a time,
/// and move to the next when it fails).
#[derive(Clone)]
pub struct Members {
    endpoints: Vec<String>,
    opts: ConnectOptions,
}

/// What one round of [`upkeep`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Upkeep {
    /// The revision history was compacted to (`None`: it already was, by etcd or another).
    pub compacted_to: Option<i64>,
    /// The members defragmented: address, database file's bytes before and after.
    pub defragmented: Vec<(String, i64, i64)>,
    /// The members whose defragmentation failed, with why.
    pub failed: Vec<(String, String)>,
}

/// etcd's current revision.
pub async fn revision(client: &Client) -> Result<i64, StoreError> {
    let r = retry(|| {
        let mut c = client.clone();
        async move { c.get("\0", Some(GetOptions::new().with_keys_only().with_limit(1))).await }
    })
    .await?;
    Ok(r.header().map_or(0, |h| h.revision()))
}

/// One round of the leader's upkeep of etcd, so that job churn never reaches its space quota:
/// history compacted up to `compact_to` (the revision of the round before, so a standby's watch
/// that lags by less than a round keeps its place), then each member whose database file holds
/// at least `min_free` bytes more than its data, and a quarter more, defragmented: one at a
/// time (a member answers nothing while it defragments), etcd's followers only. `mark` is the
/// key (`PREFIX/meta/upkeep`) that then holds the revision compacted to.
pub async fn upkeep(client: &Client, members: &Members, mark: &str, compact_to: i64, min_free: i64) -> Result<Upkeep, StoreError> {
    let mut out = Upkeep::default();
    if compact_to > 0 {
        let r = retry(|| {
            let mut c = client.clone();
            async move { c.compact(compact_to, Some(etcd_client::CompactionOptions::new().with_physical())).await }
        })
        .await;
        match r {
            Ok(_) => out.compacted_to = Some(compact_to),
            // Already compacted past it (etcd's own auto-compaction, an operator).
            Err(StoreError::Etcd(e)) if e.contains("compacted") => {}
            Err(e) => return Err(e),
        }
    }
    if let Some(rev) = out.compacted_to {
        // The pages a compaction freed are free (and counted so) from the next write on: one
        // is made (`meta/upkeep`, the revision compacted to), and the members' backends commit
        // it (every 100 ms by default).
        retry(|| {
            let (mut c, k) = (client.clone(), mark.to_string());
            async move { c.put(k, rev.to_string(), None).await }
        })
        .await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let due: Vec<MemberStatus> = members
        .status(Duration::from_secs(5))
        .await
        .into_iter()
        // Not etcd's leader: while a member defragments it applies nothing, and the leader's
        // stall would hold every commit and lease renewal (a failover of the controllers).
        .filter(|m| !m.leader)
        .filter(|m| m.error.is_none() && m.db_bytes - m.db_bytes_in_use >= min_free && (m.db_bytes - m.db_bytes_in_use) * 4 >= m.db_bytes)
        .collect();
    for m in due {
        let opts = members.opts.clone().with_connect_timeout(Duration::from_secs(5)).with_timeout(Duration::from_secs(300));
        let ep = m.endpoint.clone();
        let r = async {
            let mut c = Client::connect([ep.as_str()], Some(opts)).await?;
            c.defragment().await?;
            c.status().await
        }
        .await;
        match r {
            Ok(s) => out.defragmented.push((m.endpoint, m.db_bytes, s.db_size())),
            Err(x) => out.failed.push((m.endpoint, x.to_string())),
        }
    }
    Ok(out)
}

/// One etcd member as it answered (`tandem status`).
#[derive(Debug, Clone, PartialEq)]
pub struct MemberStatus {
    /// Its client address.
    pub endpoint: String,
    /// Why it did not answer, if it did not.
    pub error: Option<String>,
    /// etcd's version.
    pub version: String,
    /// Its database file, bytes, and of that in use (the rest is freed by a defragmentation).
    pub db_bytes: i64,
    /// Of `db_bytes`, in use.
    pub db_bytes_in_use: i64,
    /// Whether it is etcd's leader.
    pub leader: bool,
    /// Whether it knows of a leader at all.
    pub has_leader: bool,
    /// Its alarms and errors (`NOSPACE`: the quota is reached).
    pub errors: Vec<String>,
}

impl Members {
    /// Each member's status, asked of each on its own, within `within`.
    pub async fn status(&self, within: Duration) -> Vec<MemberStatus> {
        let mut asks = Vec::new();
        for ep in self.endpoints.clone() {
            let opts = self.opts.clone().with_connect_timeout(within);
            asks.push(tokio::spawn(async move {
                let r = tokio::time::timeout(within, async {
                    let mut c = Client::connect([ep.as_str()], Some(opts)).await?;
                    c.status().await
                })
                .await;
                let mut m = MemberStatus {
                    endpoint: ep,
                    error: None,
                    version: String::new(),
                    db_bytes: 0,
                    db_bytes_in_use: 0,
                    leader: false,
                    has_leader: false,
                    errors: Vec::new(),
                };
                match r {
                    Ok(Ok(s)) => {
                        let me = s.header().map_or(0, |h| h.member_id());
                        m.version = s.version().to_string();
                        m.db_bytes = s.db_size();
                        m.db_bytes_in_use = s.raft_used_db_size();
                        m.leader = me != 0 && s.leader() == me;
                        m.has_leader = s.leader() != 0;
                        m.errors = s.errors().to_vec();
                    }
                    Ok(Err(x)) => m.error = Some(x.to_string()),
                    Err(_) => m.error = Some(format!("no answer in {within:?}")),
                }
                m
            }));
        }
        let mut out = Vec::new();
        for a in asks {
            if let Ok(m) = a.await {
                out.push(m);
            }
        }
        out
    }

    /// Whether a majority of the members answer, within `within`, that they have no leader:
    /// then no leader of etcd's can exist before now, and the one elected next extends every
    /// lease by its whole TTL from its election, so no lease can expire in the meantime.
    async fn leaderless(&self, within: Duration) -> bool {
        let mut asks = tokio::task::JoinSet::new();
        for ep in self.endpoints.clone() {
            let opts = self.opts.clone().with_connect_timeout(within);
            asks.spawn(async move {
                let r = tokio::time::timeout(within, async {
                    let mut c = Client::connect([ep.as_str()], Some(opts)).await?;
                    c.status().await
                })
                .await;
                matches!(r, Ok(Ok(s)) if s.leader() == 0)
            });
        }
        let mut none = 0;
        while let Some(r) = asks.join_next().await {
            none += usize::from(r.unwrap_or(false));
        }
        none * 2 > self.endpoints.len()
    }
}

/// Keeps `lease` alive; returns (with why) as soon as its holder can no longer be sure that
/// etcd still holds it: the lease gone, or no renewal confirmed for four fifths of its TTL,
/// counted from when the last confirmed renewal was sent (so before etcd can let it expire:
/// etcd counts the TTL from when it got that renewal). Renewals go to one member over a stream
/// of its own; where it fails (the member died, or lost its leader), the next member is tried
/// meanwhile. While a majority of the members say they have no leader (etcd is electing one),
/// the time is not counted: etcd extends every lease by its TTL when its new leader is elected.
pub async fn keep_alive(members: Members, lease: &Lease) -> String {
    let mut sure_since = lease.asked;
    let limit = lease.ttl.mul_f64(0.8);
    let lost = |since: tokio::time::Instant, last: &str| {
        format!(
            "no renewal of the lease confirmed for {:?} (its TTL is {:?}){}",
            tokio::time::Instant::now() - since,
            lease.ttl,
            if last.is_empty() { String::new() } else { format!("; the last error: {last}") }
        )
    };
    let mut last_error = String::new();
    let n = members.endpoints.len().max(1);
    let mut at = 0usize;
    loop {
        let now = tokio::time::Instant::now();
        if at > 0 && members.leaderless(lease.ttl / 8).await {
            sure_since = sure_since.max(now);
        }
        let deadline = sure_since + limit;
        if tokio::time::Instant::now() >= deadline {
            return lost(sure_since, &last_error);
        }
        let endpoint = members.endpoints[at % n].clone();
        at += 1;
        let opts = members.opts.clone().with_connect_timeout(Duration::from_millis(300));
        // A member that takes a quarter of the TTL to open a stream (it has no leader, it is
        // starting) is left for the next.
        let open_by = (tokio::time::Instant::now() + lease.ttl / 4).min(deadline);
        let opened = tokio::time::timeout_at(open_by, async {
            let mut c = Client::connect([endpoint.as_str()], Some(opts)).await?;
            let (k, s) = c.lease_keep_alive(lease.id).await?;
            Ok::<_, etcd_client::Error>((c, k, s))
        })
        .await;
        // The client is kept while its stream is used (its connection goes with it).
        let (_client, mut keeper, mut stream) = match opened {
            Ok(Ok(x)) => x,
            Ok(Err(x)) => {
                last_error = format!("{endpoint}: {x}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(_) => {
                last_error = format!("{endpoint}: no renewal stream opened in {:?}", lease.ttl / 4);
                continue;
            }
        };
        loop {
            let sent = tokio::time::Instant::now();
            let deadline = sure_since + limit;
            if sent >= deadline {
                return lost(sure_since, &last_error);
            }
            if let Err(x) = keeper.keep_alive().await {
                last_error = format!("{endpoint}: {x}");
                break;
            }
            // One renewal unanswered for a quarter of the TTL: the next member is asked.
            let wait = (sent + lease.ttl / 4).min(deadline);
            match tokio::time::timeout_at(wait, stream.message()).await {
                Ok(Ok(Some(r))) if r.ttl() > 0 => sure_since = sent,
                Ok(Ok(Some(_))) => return "the lease expired".into(),
                Ok(Ok(None)) => {
                    last_error = format!("{endpoint}: the renewal stream ended");
                    break;
                }
                Ok(Err(x)) => {
                    last_error = format!("{endpoint}: {x}");
                    break;
                }
                Err(_) => {
                    last_error = format!("{endpoint}: no answer to a renewal in {:?}", lease.ttl / 4);
                    break;
                }
            }
            tokio::time::sleep_until((sent + lease.ttl / 4).min(sure_since + limit)).await;
        }
    }
}

/// Campaigns for leadership with `value` (the controller's address) on `lease`; returns the
/// fence once this controller leads.
pub async fn campaign(client: Client, election: String, value: String, lease: i64) -> Result<Fence, StoreError> {
    // Again where the member asked died or lost its leader: a campaign on the same lease takes
    // up the same place in the queue.
    let r = retry(|| {
        let (mut c, el, v) = (client.clone(), election.clone(), value.clone());
        async move { c.campaign(el, v, lease).await }
    })
    .await?;
    let l = r.leader().ok_or_else(|| StoreError::Etcd("the campaign answered without a leader key".into()))?;
    Ok(Fence { key: l.key().to_vec(), rev: l.rev() })
}

/// The current leader's value (its address), if one leads.
pub async fn leader(mut client: Client, election: String) -> Option<String> {
    match client.leader(election).await {
        Ok(r) => r.kv().map(|kv| String::from_utf8_lossy(kv.value()).into_owned()),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_url_reads_and_bad_ones_are_refused() {
        let c = Config::parse("etcd://h1:2379,10.0.0.2:2380", "/tandem").unwrap();
        assert_eq!((c.endpoints, c.prefix.as_str()), (vec!["h1:2379".to_string(), "10.0.0.2:2380".to_string()], "/tandem/"));
        for bad in ["http://h:1", "etcd://", "etcd://h", "etcd://h:0", "etcd://h:x", "etcd://a/b:1"] {
            assert!(Config::parse(bad, "/tandem").is_err(), "{bad}");
        }
        for bad in ["tandem", "/", "/a b", "/a\n"] {
            assert!(Config::parse("etcd://h:1", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_group_is_read_whole_at_its_marker_and_never_in_part() {
        let kvs = vec![("jobs/00000000000000000001".to_string(), None), ("meta/next_id".to_string(), Some("5".to_string()))];
        let piece = encode_piece(&kvs);
        assert_eq!(decode_piece(&piece).unwrap().len(), 2);
        assert!(decode_piece(&piece[..piece.len() - 1]).is_err());
        let ch = |key: &str, value: Option<&[u8]>| Change { key: key.into(), value: value.map(<[u8]>::to_vec), rev: 1 };
        let mut f = Follower::default();
        // The pieces alone commit nothing; the marker commits them all; a group deleted
        // without its marker (a leader that stopped) never does.
        assert!(f.records(vec![ch("groups/00000000000000000007/000000", Some(&piece))]).unwrap().is_empty());
        let got = f.records(vec![ch("groups/00000000000000000007/done", Some(b"")), ch("meta/boot", Some(b"3"))]).unwrap();
        assert_eq!(got, vec![Rec::Job(1, None), Rec::Meta("next_id".into(), Some("5".into())), Rec::Meta("boot".into(), Some("3".into()))]);
        assert!(f.records(vec![ch("groups/00000000000000000008/000000", Some(&piece))]).unwrap().is_empty());
        assert!(f.records(vec![ch("groups/00000000000000000008/000000", None)]).unwrap().is_empty());
        assert!(f.records(vec![ch("groups/00000000000000000008/done", Some(b""))]).unwrap().is_empty());
        assert!(f.records(vec![ch("election/694d7f", Some(b"http://x"))]).unwrap().is_empty());
    }
}
