//! Durable controller state in an embedded SQLite database: WAL journal with
//! `synchronous=FULL`, so a commit that returned is on disk and survives `kill -9` of the
//! controller (and a power loss). The controller persists what changed before it acknowledges a
//! request; on start it loads everything back.
//!
//! Jobs and nodes are stored as JSON documents beside the columns that `sacct`-style queries
//! filter on (state, user, end time).

#[cfg(feature = "etcd")]
pub mod etcd;
pub mod rec;

pub use rec::Rec;

use control::{ArrayRecord, Dirty, Job, NodeRec};
use rusqlite::{Connection, OptionalExtension, params};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A storage error.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed.
    #[error("database: {0}")]
    Sql(#[from] rusqlite::Error),
    /// A stored document does not decode.
    #[error("database holds a record that does not decode: {0}")]
    Decode(#[from] serde_json::Error),
    /// A key of the cluster's prefix in etcd that holds no record this build reads.
    #[error("etcd holds a key this Tandem does not read: {0}")]
    Key(String),
    /// etcd failed (or did not answer in time): whether the commit happened is unknown.
    #[error("etcd: {0}")]
    Etcd(String),
    /// This controller no longer leads: its leadership's key is gone from etcd, so its
    /// transactions cannot commit.
    #[error("this controller no longer leads (its election key is gone from etcd): it must stop")]
    Deposed,
    /// A record larger than etcd takes in one request.
    #[error("the record {key} is {bytes} bytes: larger than the etcd backend stores (1.4 MB; etcd's default request limit is 1.5 MiB)")]
    TooLarge {
        /// Its key.
        key: String,
        /// Its size.
        bytes: usize,
    },
    /// The etcd prefix is inside another cluster's, or holds one: each cluster's keys must be
    /// out of every other's range, or one would read (and a full read delete) the other's.
    #[error(
        "--etcd-prefix {ours}: {other} holds another Tandem cluster's keys, and {relation}; give each cluster a prefix that neither starts nor lies within another's, such as /tandem-a and /tandem-b"
    )]
    Nested {
        /// This controller's prefix.
        ours: String,
        /// The other cluster's.
        other: String,
        /// How they overlap.
        relation: &'static str,
    },
    /// etcd's prefix already holds a cluster's state (`tandem admin migrate` writes only into
    /// an empty one).
    #[error(
        "etcd already holds a cluster's state below {0}: a migration writes only below an empty prefix (give another --etcd-prefix, or remove that cluster's keys)"
    )]
    NotEmpty(String),
    /// A migration into this prefix was cut short.
    #[error(
        "a migration into etcd (tandem admin migrate) was cut short: its state is incomplete; run the migration again (it starts over), then the controllers"
    )]
    Migrating,
    /// The database was written by a newer Tandem, whose schema this one does not know.
    #[error(
        "the database is of schema {found}, written by a newer Tandem; this one reads schemas up to {reads}: run that version (or newer), or restore a backup taken by this one"
    )]
    Newer {
        /// The database's schema.
        found: u32,
        /// The newest this build reads ([`SCHEMA`]).
        reads: u32,
    },
}

/// The schema this build writes, and the newest it reads; an older database is migrated
/// forward at open, a copy of it taken first. 1: every database written before the schema was
/// recorded (no `schema` row in `meta`); 2: the index `jobs_end` on jobs' end time (`sacct`'s
/// time windows).
pub const SCHEMA: u32 = 2;

/// Each schema's change from the one before, in order (`MIGRATIONS[i]` makes schema `i + 2`).
const MIGRATIONS: &[&str] = &["CREATE INDEX IF NOT EXISTS jobs_end ON jobs(end_time);"];

/// The `meta` key of the etcd revision a replica database holds (the etcd backend's).
const REPLICA_REVISION: &str = "replica_revision";

/// How far a controller restored from a backup moves its start count past the backup's: more
/// starts than any controller makes between a backup and its restore (one a minute for 45
/// days), so the order numbers agents have acknowledged and the endpoint versions proxies hold
/// are behind the restored controller's, never ahead.
pub const RESTORE_BOOT_STEP: u64 = 1 << 16;

/// The copy an earlier attempt to migrate the database at `path` from schema `found` made.
fn earlier_copy(path: &Path, found: u32) -> Option<std::path::PathBuf> {
    let dir = path.parent()?;
    let prefix = format!("{}.schema-{found}.", path.file_name()?.to_string_lossy());
    let mut copies: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix) && e.file_name().to_string_lossy().ends_with(".bak"))
        .map(|e| e.path())
        .collect();
    copies.sort();
    copies.pop()
}

/// Marks a copy of the database as a backup taken at `now`.
fn mark_backup(dest: &Path, now: i64) -> Result<(), StoreError> {
    let copy = Connection::open(dest)?;
    copy.execute(
        "INSERT INTO meta (key, value) VALUES ('backup_taken', ?1) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        params![now.to_string()],
    )?;
    Ok(())
}

/// Writes a consistent copy of the database at `db` to `dest` (a new file, the caller's mode),
/// while the controller goes on committing: a read transaction's state of the WAL database,
/// marked as a backup (`backup_taken`, `now`) so that a controller started on it knows it is
/// restored ([`Store::restored_from`]).
pub fn backup(db: &Path, dest: &Path, now: i64) -> Result<(), StoreError> {
    let conn = Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    conn.pragma_update(None, "busy_timeout", 5000)?;
    conn.execute("VACUUM INTO ?1", params![dest.to_string_lossy()])?;
    drop(conn);
    mark_backup(dest, now)
}

/// A migration [`Store::open`] made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migrated {
    /// The schema the database had.
    pub from: u32,
    /// The schema it has now ([`SCHEMA`]).
    pub to: u32,
    /// The copy taken before (`DB.schema-FROM.UNIXTIME.bak`, beside the database).
    pub backup: std::path::PathBuf,
}

/// What the etcd backend has done (for `/metrics`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EtcdStats {
    /// Commits (group commits), each one transaction or one staged group.
    pub commits: u64,
    /// etcd transactions written.
    pub transactions: u64,
    /// Commits staged in pieces (larger than one transaction).
    pub staged: u64,
    /// Seconds spent committing to etcd, in all.
    pub seconds: f64,
    /// Records left out for their size.
    pub oversized: u64,
    /// Records written (the sum of commits' sizes).
    pub records: u64,
    /// Commits by how long they took: one count per bound of [`LATENCY_BUCKETS`] (at most
    /// that many seconds, above the bound before), and the last for longer ones.
    pub latency: [u64; LATENCY_BUCKETS.len() + 1],
    /// Commits by how many records they held: per bound of [`BATCH_BUCKETS`], as `latency`.
    pub batch: [u64; BATCH_BUCKETS.len() + 1],
}

/// The bounds of [`EtcdStats::latency`]'s buckets, seconds.
pub const LATENCY_BUCKETS: [f64; 12] = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0];
/// The bounds of [`EtcdStats::batch`]'s buckets, records.
pub const BATCH_BUCKETS: [u64; 10] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];

impl EtcdStats {
    /// Counts one commit of `records` records that took `seconds`.
    pub fn observe(&mut self, seconds: f64, records: usize) {
        self.commits += 1;
        self.seconds += seconds;
        self.records += records as u64;
        self.latency[LATENCY_BUCKETS.iter().position(|b| seconds <= *b).unwrap_or(LATENCY_BUCKETS.len())] += 1;
        self.batch[BATCH_BUCKETS.iter().position(|b| records as u64 <= *b).unwrap_or(BATCH_BUCKETS.len())] += 1;
    }
}

/// The database.
pub struct Store {
    conn: Connection,
    /// The migration made at open, if any.
    migrated: Option<Migrated>,
    /// With the etcd backend: etcd, which every commit goes to first (this database is then its
    /// replica).
    #[cfg(feature = "etcd")]
    remote: Option<etcd::Remote>,
}

/// Everything loaded at start.
pub struct Loaded {
    /// Jobs with records of their own (an array's other tasks are in its record, `arrays`).
    pub jobs: Vec<Job>,
    /// Job arrays as submitted (with their pending tasks' cancel, if any):
    /// [`control::Controller::restore_arrays`].
    pub arrays: Vec<ArrayRecord>,
    /// The ids of `jobs`.
    pub stored: BTreeSet<u64>,
    /// Nodes.
    pub nodes: Vec<NodeRec>,
    /// Next job id.
    pub next_id: u64,
    /// The shared cluster secret, where an older version stored it here (the controller
    /// deletes it: nodes now hold credentials of their own).
    pub secret: Option<String>,
    /// Services.
    pub services: Vec<control::Service>,
    /// Node and proxy identities, spent join tokens.
    pub credentials: control::creds::Credentials,
    /// The accounting `sacctmgr` last changed (`None`: never; the configuration file's seed
    /// stands).
    pub accounting: Option<control::accounting::Accounting>,
    /// Advance reservations.
    pub reservations: Vec<control::Reservation>,
    /// Objects written through the Kubernetes API that are not views.
    pub kube_objects: Vec<control::kube::KubeObject>,
}

impl Store {
    /// Opens (creating if needed) the database at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "busy_timeout", 5000)?;
        let fresh: bool =
            conn.query_row("SELECT count(*) = 0 FROM sqlite_master WHERE type = 'table' AND name = 'jobs'", [], |r| r.get(0))?;
        let found = if fresh {
            SCHEMA
        } else {
            let has_meta: bool =
                conn.query_row("SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'meta'", [], |r| r.get(0))?;
            let v: Option<String> =
                if has_meta { conn.query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| r.get(0)).optional()? } else { None };
            // A value that does not read is no schema this build knows.
            v.map_or(1, |v| v.parse().unwrap_or(u32::MAX))
        };
        if found > SCHEMA || found == 0 {
            return Err(StoreError::Newer { found, reads: SCHEMA });
        }
        // A copy of an older database before it is changed: the consistent state of a read
        // transaction (WAL included), written as a new file.
        // A copy an earlier attempt of this same migration made (it failed, or the start was cut
        // short) is the database as it was: kept, not taken again at every retry.
        let earlier = (found < SCHEMA).then(|| earlier_copy(path, found)).flatten().filter(|c| {
            // Made by a start in the last ten minutes (a crash loop): older ones are of another
            // time the database had this schema (a restored backup, say).
            std::fs::metadata(c).and_then(|m| m.modified()).is_ok_and(|t| t.elapsed().is_ok_and(|e| e.as_secs() < 600))
        });
        let backup = (found < SCHEMA && earlier.is_none()).then(|| {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            // A name not taken (an earlier attempt in the same second).
            (0..)
                .map(|n: u32| {
                    let mut name = path.as_os_str().to_owned();
                    name.push(if n == 0 { format!(".schema-{found}.{t}.bak") } else { format!(".schema-{found}.{t}-{n}.bak") });
                    std::path::PathBuf::from(name)
                })
                .find(|p| !p.exists())
                .expect("a free name")
        });
        if let Some(b) = &backup {
            conn.execute("VACUUM INTO ?1", params![b.to_string_lossy()])?;
            // Marked as a backup: a controller started on it is a restored one.
            mark_backup(b, std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64))?;
        }
        let backup = backup.or(earlier);
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS jobs (id INTEGER PRIMARY KEY, state TEXT NOT NULL, user TEXT NOT NULL, end_time INTEGER, data TEXT NOT NULL);
             CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
             CREATE INDEX IF NOT EXISTS jobs_user ON jobs(user);
             CREATE TABLE IF NOT EXISTS arrays (id INTEGER PRIMARY KEY, data TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS nodes (name TEXT PRIMARY KEY, data TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS services (name TEXT PRIMARY KEY, data TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS credentials (holder TEXT PRIMARY KEY, serial INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS spent_joins (jti TEXT PRIMARY KEY, exp INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS kube_objects (kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL, data TEXT NOT NULL,
                 PRIMARY KEY (kind, namespace, name));",
        )?;
        let mut conn = conn;
        let tx = conn.transaction()?;
        // A fresh database is made at this schema: every change applies (each is idempotent).
        let from = if fresh { 1 } else { found };
        for step in &MIGRATIONS[(from as usize - 1).min(MIGRATIONS.len())..] {
            tx.execute_batch(step)?;
        }
        tx.execute(
            "INSERT INTO meta (key, value) VALUES ('schema', ?1) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![SCHEMA.to_string()],
        )?;
        tx.commit()?;
        let migrated = backup.map(|backup| Migrated { from: found, to: SCHEMA, backup });
        Ok(Store {
            conn,
            migrated,
            #[cfg(feature = "etcd")]
            remote: None,
        })
    }

    /// The migration [`Store::open`] made, if the database was of an older schema.
    pub fn migrated(&self) -> Option<&Migrated> {
        self.migrated.as_ref()
    }

    /// When the backup this database was restored from was taken ([`backup`] marks its copies),
    /// until [`Store::finish_restore`]; `None` for a database that is no restored backup.
    pub fn restored_from(&self) -> Result<Option<i64>, StoreError> {
        let v: Option<String> = self.conn.query_row("SELECT value FROM meta WHERE key = 'backup_taken'", [], |r| r.get(0)).optional()?;
        Ok(v.map(|v| v.parse().unwrap_or(0)))
    }

    /// The restore is settled (the caller stored what it changed): the database is the
    /// controller's own again, and its next start an ordinary one.
    pub fn finish_restore(&mut self) -> Result<(), StoreError> {
        self.commit(vec![Rec::Meta("backup_taken".into(), None)])
    }

    /// Opens (creating if needed) the replica database at `path` of the cluster's state in
    /// etcd, which every commit goes to first. It is filled by [`Store::sync`] (and a standby's
    /// watch, [`etcd::follow`]); it needs no fsync of its own (etcd holds what is durable).
    #[cfg(feature = "etcd")]
    pub fn open_replica(path: &Path, remote: etcd::Remote) -> Result<Store, StoreError> {
        let mut s = Store::open(path)?;
        s.conn.pragma_update(None, "synchronous", "OFF")?;
        s.remote = Some(remote);
        Ok(s)
    }

    /// Reads the whole state from etcd into this replica (emptied first); returns the revision
    /// read at. Refuses a state written by a newer Tandem.
    #[cfg(feature = "etcd")]
    pub fn sync(&mut self) -> Result<i64, StoreError> {
        let Some(mut r) = self.remote.take() else { return Err(StoreError::Etcd("this store has no etcd".into())) };
        let out = r.read_all(self);
        self.remote = Some(r);
        let rev = out?;
        let found = self.meta("schema")?.map_or(SCHEMA, |v| v.parse().unwrap_or(u32::MAX));
        if found > SCHEMA {
            return Err(StoreError::Newer { found, reads: SCHEMA });
        }
        if self.meta("migrating")?.is_some() {
            return Err(StoreError::Migrating);
        }
        Ok(rev)
    }

    /// The etcd link, where this store has one.
    #[cfg(feature = "etcd")]
    pub fn remote(&mut self) -> Option<&mut etcd::Remote> {
        self.remote.as_mut()
    }

    /// The database's schema (after [`Store::open`]: [`SCHEMA`]).
    pub fn schema(&self) -> Result<u32, StoreError> {
        let v: String = self.conn.query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| r.get(0))?;
        Ok(v.parse().unwrap_or(0))
    }

    /// Writes the changes in one transaction; returns once they are durable.
    pub fn persist(&mut self, d: &Dirty) -> Result<(), StoreError> {
        if d.is_empty() {
            return Ok(());
        }
        self.commit(rec::records(d)?)
    }

    /// Commits records: to etcd first where this store has it (then to this replica, with the
    /// revision), or to this database.
    fn commit(&mut self, recs: Vec<Rec>) -> Result<(), StoreError> {
        #[cfg(feature = "etcd")]
        if let Some(mut r) = self.remote.take() {
            let out = r.commit(&recs, &|t| self.spent_before(t));
            self.remote = Some(r);
            let rev = out?;
            return self.apply(&recs, Some(rev));
        }
        self.apply(&recs, None)
    }

    /// Writes records in one transaction, and with them (where given) the etcd revision they
    /// bring this replica to ([`Store::replica_revision`]).
    pub fn apply(&mut self, recs: &[Rec], revision: Option<i64>) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        {
            let mut put_job = tx.prepare_cached(
                "INSERT INTO jobs (id, state, user, end_time, data) VALUES (?1, ?2, ?3, ?4, ?5) \
                 ON CONFLICT(id) DO UPDATE SET state = excluded.state, end_time = excluded.end_time, data = excluded.data",
            )?;
            let mut put_array =
                tx.prepare_cached("INSERT INTO arrays (id, data) VALUES (?1, ?2) ON CONFLICT(id) DO UPDATE SET data = excluded.data")?;
            let mut put_node =
                tx.prepare_cached("INSERT INTO nodes (name, data) VALUES (?1, ?2) ON CONFLICT(name) DO UPDATE SET data = excluded.data")?;
            let mut put_service = tx
                .prepare_cached("INSERT INTO services (name, data) VALUES (?1, ?2) ON CONFLICT(name) DO UPDATE SET data = excluded.data")?;
            let mut put_meta =
                tx.prepare_cached("INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value")?;
            for r in recs {
                match r {
                    Rec::Job(id, Some(j)) => {
                        put_job.execute(params![*id as i64, j.state, j.user, j.end, j.data])?;
                    }
                    Rec::Job(id, None) => {
                        tx.execute("DELETE FROM jobs WHERE id = ?1", params![*id as i64])?;
                    }
                    Rec::Array(id, Some(d)) => {
                        put_array.execute(params![*id as i64, d])?;
                    }
                    Rec::Array(id, None) => {
                        tx.execute("DELETE FROM arrays WHERE id = ?1", params![*id as i64])?;
                    }
                    Rec::Node(n, Some(d)) => {
                        put_node.execute(params![n, d])?;
                    }
                    Rec::Node(n, None) => {
                        tx.execute("DELETE FROM nodes WHERE name = ?1", params![n])?;
                    }
                    Rec::Service(n, Some(d)) => {
                        put_service.execute(params![n, d])?;
                    }
                    Rec::Service(n, None) => {
                        tx.execute("DELETE FROM services WHERE name = ?1", params![n])?;
                    }
                    Rec::Kube(kind, ns, name, Some(d)) => {
                        tx.prepare_cached(
                            "INSERT INTO kube_objects (kind, namespace, name, data) VALUES (?1, ?2, ?3, ?4) \
                             ON CONFLICT(kind, namespace, name) DO UPDATE SET data = excluded.data",
                        )?
                        .execute(params![kind, ns, name, d])?;
                    }
                    Rec::Kube(kind, ns, name, None) => {
                        tx.execute("DELETE FROM kube_objects WHERE kind = ?1 AND namespace = ?2 AND name = ?3", params![kind, ns, name])?;
                    }
                    Rec::Cred(k, Some(s)) => {
                        tx.prepare_cached("INSERT OR REPLACE INTO credentials (holder, serial) VALUES (?1, ?2)")?
                            .execute(params![k, *s as i64])?;
                    }
                    Rec::Cred(k, None) => {
                        tx.execute("DELETE FROM credentials WHERE holder = ?1", params![k])?;
                    }
                    Rec::Spent(jti, Some(exp)) => {
                        tx.prepare_cached("INSERT OR REPLACE INTO spent_joins (jti, exp) VALUES (?1, ?2)")?.execute(params![jti, exp])?;
                    }
                    Rec::Spent(jti, None) => {
                        tx.execute("DELETE FROM spent_joins WHERE jti = ?1", params![jti])?;
                    }
                    Rec::ForgetSpent(t) => {
                        tx.execute("DELETE FROM spent_joins WHERE exp <= ?1", params![t])?;
                    }
                    Rec::Meta(k, Some(v)) => {
                        put_meta.execute(params![k, v])?;
                    }
                    Rec::Meta(k, None) => {
                        tx.execute("DELETE FROM meta WHERE key = ?1", params![k])?;
                    }
                }
            }
            if let Some(rev) = revision {
                put_meta.execute(params![REPLICA_REVISION, rev.to_string()])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Every record of the cluster's state in this database, as they would be committed
    /// (`tandem admin migrate`: a SQLite data directory into etcd). The replica's own
    /// bookkeeping (its revision) is left out.
    pub fn records_all(&self) -> Result<Vec<Rec>, StoreError> {
        let mut out = Vec::new();
        let c = &self.conn;
        let mut q = c.prepare("SELECT id, state, user, end_time, data FROM jobs ORDER BY id")?;
        for r in q.query_map([], |r| {
            Ok((r.get::<_, i64>(0)?, rec::JobRow { state: r.get(1)?, user: r.get(2)?, end: r.get(3)?, data: r.get(4)? }))
        })? {
            let (id, row) = r?;
            out.push(Rec::Job(id as u64, Some(row)));
        }
        let mut q = c.prepare("SELECT id, data FROM arrays ORDER BY id")?;
        for r in q.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))? {
            let (id, d) = r?;
            out.push(Rec::Array(id as u64, Some(d)));
        }
        for (table, key) in [("nodes", "name"), ("services", "name")] {
            let mut q = c.prepare(&format!("SELECT {key}, data FROM {table} ORDER BY {key}"))?;
            for r in q.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))? {
                let (k, d) = r?;
                out.push(if table == "nodes" { Rec::Node(k, Some(d)) } else { Rec::Service(k, Some(d)) });
            }
        }
        let mut q = c.prepare("SELECT kind, namespace, name, data FROM kube_objects ORDER BY kind, namespace, name")?;
        for r in q.query_map([], |r| Ok(Rec::Kube(r.get(0)?, r.get(1)?, r.get(2)?, Some(r.get(3)?))))? {
            out.push(r?);
        }
        let mut q = c.prepare("SELECT holder, serial FROM credentials ORDER BY holder")?;
        for r in q.query_map([], |r| Ok(Rec::Cred(r.get(0)?, Some(r.get::<_, i64>(1)? as u64))))? {
            out.push(r?);
        }
        let mut q = c.prepare("SELECT jti, exp FROM spent_joins ORDER BY jti")?;
        for r in q.query_map([], |r| Ok(Rec::Spent(r.get(0)?, Some(r.get(1)?))))? {
            out.push(r?);
        }
        let mut q = c.prepare("SELECT key, value FROM meta WHERE key != ?1 ORDER BY key")?;
        for r in q.query_map(params![REPLICA_REVISION], |r| Ok(Rec::Meta(r.get(0)?, Some(r.get(1)?))))? {
            out.push(r?);
        }
        Ok(out)
    }

    /// The etcd revision this database is a replica of (`None`: it is no replica, or not yet
    /// filled).
    pub fn replica_revision(&self) -> Result<Option<i64>, StoreError> {
        let v: Option<String> =
            self.conn.query_row("SELECT value FROM meta WHERE key = ?1", params![REPLICA_REVISION], |r| r.get(0)).optional()?;
        Ok(v.and_then(|v| v.parse().ok()))
    }

    /// Empties the database of the cluster's state (keeping its own schema), to be filled
    /// again as a replica ([`Store::apply`]).
    pub fn clear(&mut self) -> Result<(), StoreError> {
        self.conn.execute_batch(
            "BEGIN; DELETE FROM jobs; DELETE FROM arrays; DELETE FROM nodes; DELETE FROM services; DELETE FROM credentials;
             DELETE FROM spent_joins; DELETE FROM kube_objects; DELETE FROM meta WHERE key != 'schema'; COMMIT;",
        )?;
        Ok(())
    }

    /// The expiries of spent join tokens that expired at or before `t`.
    pub fn spent_before(&self, t: i64) -> Result<Vec<String>, StoreError> {
        let mut stmt = self.conn.prepare_cached("SELECT jti FROM spent_joins WHERE exp <= ?1")?;
        let rows = stmt.query_map(params![t], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// Sets (or, with `None`, deletes) a setting of the cluster's, committed as any change.
    pub fn put_meta(&mut self, key: &str, value: Option<String>) -> Result<(), StoreError> {
        self.commit(vec![Rec::Meta(key.to_string(), value)])
    }

    /// The records the etcd backend left out of commits for their size since the last call
    /// (key, bytes); none with SQLite.
    pub fn take_oversized(&mut self) -> Vec<(String, usize)> {
        #[cfg(feature = "etcd")]
        if let Some(r) = self.remote.as_mut() {
            return r.take_oversized();
        }
        Vec::new()
    }

    /// What the etcd backend has done, where this store has one.
    pub fn etcd_stats(&self) -> Option<EtcdStats> {
        #[cfg(feature = "etcd")]
        if let Some(r) = self.remote.as_ref() {
            return Some(r.stats());
        }
        None
    }

    /// How many jobs have records of their own.
    pub fn count_jobs(&self) -> Result<u64, StoreError> {
        Ok(self.conn.query_row("SELECT count(*) FROM jobs", [], |r| r.get::<_, i64>(0))? as u64)
    }

    /// A setting of the cluster's (`meta`).
    pub fn meta(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self.conn.query_row("SELECT value FROM meta WHERE key = ?1", params![key], |r| r.get(0)).optional()?)
    }

    /// Counts this start of the controller and returns the count (1 for the first start). Order
    /// sequence numbers are based on it, so they grow across restarts.
    pub fn next_boot(&mut self) -> Result<u64, StoreError> {
        self.next_boot_after(0, 1)
    }

    /// As [`Store::next_boot`], from the larger of the stored count and `floor` (the count the
    /// controller also keeps beside the database), raised by `step`: a restored backup's count
    /// is behind the starts made since it was taken, and must pass them all
    /// ([`RESTORE_BOOT_STEP`]).
    pub fn next_boot_after(&mut self, floor: u64, step: u64) -> Result<u64, StoreError> {
        self.next_boot_with(floor, step, Vec::new())
    }

    /// [`Store::next_boot_after`], with settings (`meta` keys) written in the same commit.
    pub fn next_boot_with(&mut self, floor: u64, step: u64, extra: Vec<(String, Option<String>)>) -> Result<u64, StoreError> {
        #[cfg(feature = "etcd")]
        if let Some(r) = &self.remote {
            let stored = r.get("meta/boot")?.and_then(|v| String::from_utf8(v).ok()).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            let n = stored.max(floor) + step.max(1);
            // Each call is a new leader's first transaction: counted (`tandem status`, metrics).
            let led = r.get("meta/leaderships")?.and_then(|v| String::from_utf8(v).ok()).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            let mut recs =
                vec![Rec::Meta("boot".into(), Some(n.to_string())), Rec::Meta("leaderships".into(), Some((led + 1).to_string()))];
            recs.extend(extra.iter().map(|(k, v)| Rec::Meta(k.clone(), v.clone())));
            match r.get("meta/schema")?.and_then(|v| String::from_utf8(v).ok()) {
                Some(v) => {
                    let found = v.parse().unwrap_or(u32::MAX);
                    if found > SCHEMA {
                        return Err(StoreError::Newer { found, reads: SCHEMA });
                    }
                }
                None => recs.push(Rec::Meta("schema".into(), Some(SCHEMA.to_string()))),
            }
            self.commit(recs)?;
            return Ok(n);
        }
        let tx = self.conn.transaction()?;
        let n: u64 = tx
            .query_row("SELECT value FROM meta WHERE key = 'boot'", [], |r| r.get::<_, String>(0))
            .optional()?
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            .max(floor)
            + step.max(1);
        tx.execute(
            "INSERT INTO meta (key, value) VALUES ('boot', ?1) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![n.to_string()],
        )?;
        for (k, v) in &extra {
            match v {
                Some(v) => tx.execute(
                    "INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    params![k, v],
                )?,
                None => tx.execute("DELETE FROM meta WHERE key = ?1", params![k])?,
            };
        }
        tx.commit()?;
        Ok(n)
    }

    /// Removes the cluster secret an older version kept here: the database must not be a
    /// second copy of any secret (it lives in its own 0600 file, SECURITY.md).
    pub fn forget_secret(&mut self) -> Result<(), StoreError> {
        self.commit(vec![Rec::Meta("secret".into(), None)])
    }

    /// Loads everything. A task of an array with a record of its own shares the array's one
    /// copy of its spec when they are equal; the array's other tasks are in its record.
    pub fn load(&self) -> Result<Loaded, StoreError> {
        let mut jobs: Vec<Job> = Vec::new();
        let mut stmt = self.conn.prepare("SELECT data FROM jobs ORDER BY id")?;
        for row in stmt.query_map([], |r| r.get::<_, String>(0))? {
            jobs.push(serde_json::from_str(&row?)?);
        }
        let arrays = self.arrays()?;
        let by_id: BTreeMap<u64, &ArrayRecord> = arrays.iter().map(|a| (a.id(), a)).collect();
        for j in &mut jobs {
            if let Some(a) = j.array.and_then(|a| by_id.get(&a.array_job))
                && a.first.spec == j.spec
            {
                j.spec = a.first.spec.clone();
            }
        }
        let stored: BTreeSet<u64> = jobs.iter().map(|j| j.req.id.0).collect();
        let mut nodes = Vec::new();
        let mut stmt = self.conn.prepare("SELECT data FROM nodes ORDER BY rowid")?;
        for row in stmt.query_map([], |r| r.get::<_, String>(0))? {
            nodes.push(serde_json::from_str(&row?)?);
        }
        let mut services = Vec::new();
        let mut stmt = self.conn.prepare("SELECT data FROM services ORDER BY name")?;
        for row in stmt.query_map([], |r| r.get::<_, String>(0))? {
            services.push(serde_json::from_str(&row?)?);
        }
        let mut kube_objects = Vec::new();
        let mut stmt = self.conn.prepare("SELECT data FROM kube_objects ORDER BY kind, namespace, name")?;
        for row in stmt.query_map([], |r| r.get::<_, String>(0))? {
            kube_objects.push(serde_json::from_str(&row?)?);
        }
        let meta = |k: &str| self.conn.query_row("SELECT value FROM meta WHERE key = ?1", params![k], |r| r.get::<_, String>(0)).optional();
        let next_id = meta("next_id")?.and_then(|v| v.parse().ok()).unwrap_or(1);
        let secret = meta("secret")?;
        let mut serials = BTreeMap::new();
        let mut stmt = self.conn.prepare("SELECT holder, serial FROM credentials")?;
        for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))? {
            let (k, s) = row?;
            serials.insert(k, s as u64);
        }
        let mut spent = BTreeMap::new();
        let mut stmt = self.conn.prepare("SELECT jti, exp FROM spent_joins")?;
        for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))? {
            let (j, e) = row?;
            spent.insert(j, e);
        }
        let next_serial = meta("next_serial")?.and_then(|v| v.parse().ok()).unwrap_or(1);
        let credentials = control::creds::Credentials::restore(serials, spent, next_serial);
        let accounting = match meta("accounting")? {
            Some(v) => Some(serde_json::from_str(&v)?),
            None => None,
        };
        let reservations = match meta("reservations")? {
            Some(v) => serde_json::from_str(&v)?,
            None => Vec::new(),
        };
        Ok(Loaded { jobs, arrays, stored, nodes, next_id, secret, services, credentials, accounting, reservations, kube_objects })
    }

    fn arrays(&self) -> Result<Vec<ArrayRecord>, StoreError> {
        let mut out = Vec::new();
        let mut stmt = self.conn.prepare("SELECT data FROM arrays ORDER BY id")?;
        for row in stmt.query_map([], |r| r.get::<_, String>(0))? {
            out.push(serde_json::from_str(&row?)?);
        }
        Ok(out)
    }

    /// The jobs with ids from `lo` up to (not including) `hi` that have records of their own,
    /// in id order: an array's tasks, read back once they have left the controller's memory.
    pub fn jobs_between(&self, lo: u64, hi: u64) -> Result<Vec<Job>, StoreError> {
        let mut stmt = self.conn.prepare_cached("SELECT data FROM jobs WHERE id >= ?1 AND id < ?2 ORDER BY id")?;
        let rows = stmt.query_map(params![lo as i64, hi.min(i64::MAX as u64) as i64], |r| r.get::<_, String>(0))?;
        let mut out = Vec::new();
        for r in rows {
            out.push(serde_json::from_str(&r?)?);
        }
        Ok(out)
    }

    /// Finished jobs, optionally of one user, ended at or after `since` (for `sacct`): those
    /// with records of their own, and arrays' pending tasks cancelled together (from the
    /// arrays' records).
    pub fn history(&self, user: Option<&str>, since: i64) -> Result<Vec<Job>, StoreError> {
        self.history_of(user, since, None)
    }

    /// [`Store::history`], of the jobs named by `named` (numbers, and the span of ids after
    /// each that its array's tasks may have) where given: each number's job and its array's
    /// tasks, read by their ids (`sacct -j` among many finished jobs reads these alone).
    pub fn history_of(&self, user: Option<&str>, since: i64, named: Option<(&[u64], u64)>) -> Result<Vec<Job>, StoreError> {
        let mut out: Vec<Job> = Vec::new();
        // A number with no record of its own (a heterogeneous job's component N+K, an array's
        // task without a record) is the job's or array's just below it: those are read too
        // (the caller picks the rows it named).
        let wanted: Option<BTreeSet<u64>> = match named {
            None => None,
            Some((ids, _)) => {
                let mut w: BTreeSet<u64> = ids.iter().copied().collect();
                for &n in ids {
                    let n = n.min(i64::MAX as u64) as i64;
                    let own: bool = self.conn.query_row("SELECT EXISTS(SELECT 1 FROM jobs WHERE id = ?1)", params![n], |r| r.get(0))?;
                    if own {
                        continue;
                    }
                    for table in ["jobs", "arrays"] {
                        let below: Option<i64> = self
                            .conn
                            .query_row(&format!("SELECT id FROM {table} WHERE id < ?1 ORDER BY id DESC LIMIT 1"), params![n], |r| r.get(0))
                            .optional()?;
                        w.extend(below.map(|b| b as u64));
                    }
                }
                Some(w)
            }
        };
        match named {
            None => {
                let mut stmt = self.conn.prepare(
                    "SELECT data FROM jobs WHERE state NOT IN ('PENDING', 'RUNNING') AND (?1 IS NULL OR user = ?1) AND COALESCE(end_time, 0) >= ?2 ORDER BY id",
                )?;
                let rows = stmt.query_map(params![user, since], |r| r.get::<_, String>(0))?;
                for r in rows {
                    out.push(serde_json::from_str(&r?)?);
                }
            }
            Some((_, span)) => {
                let mut stmt = self.conn.prepare(
                    "SELECT id, data FROM jobs WHERE state NOT IN ('PENDING', 'RUNNING') AND (?1 IS NULL OR user = ?1) AND COALESCE(end_time, 0) >= ?2 AND id >= ?3 AND id <= ?4 ORDER BY id",
                )?;
                let mut seen = BTreeSet::new();
                for &n in wanted.as_ref().expect("with named") {
                    // Only an array's tasks follow its id: a range read for arrays alone.
                    let is_array: bool = self.conn.query_row(
                        "SELECT EXISTS(SELECT 1 FROM arrays WHERE id = ?1) OR EXISTS(SELECT 1 FROM jobs WHERE id = ?1 AND instr(data, '\"array_job\"') > 0)",
                        params![n.min(i64::MAX as u64) as i64],
                        |r| r.get(0),
                    )?;
                    let hi = if is_array { n.saturating_add(span) } else { n }.min(i64::MAX as u64);
                    for r in stmt.query_map(params![user, since, n.min(i64::MAX as u64) as i64, hi as i64], |r| {
                        Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
                    })? {
                        let (id, data) = r?;
                        if seen.contains(&(id as u64)) {
                            continue;
                        }
                        let j: Job = serde_json::from_str(&data)?;
                        if j.req.id.0 == n || j.array.as_ref().is_some_and(|a| a.array_job == n) {
                            seen.insert(id as u64);
                            out.push(j);
                        }
                    }
                }
                out.sort_by_key(|j| j.req.id.0);
            }
        }
        let mut ids = self.conn.prepare("SELECT id FROM jobs WHERE id >= ?1 AND id < ?2")?;
        let mut more = false;
        for a in self.arrays()? {
            let Some(c) = a.cancelled else { continue };
            if c.end < since || user.is_some_and(|u| u != a.first.req.user) || wanted.as_ref().is_some_and(|w| !w.contains(&a.id())) {
                continue;
            }
            let (id, count) = (a.id(), a.count());
            let own: BTreeSet<u64> = ids
                .query_map(params![id as i64, (id + count) as i64], |r| r.get::<_, i64>(0))?
                .collect::<Result<Vec<_>, _>>()?
                .into_iter()
                .map(|i| i as u64)
                .collect();
            for (k, task) in a.indices().enumerate().skip(c.from as usize) {
                if !own.contains(&(id + k as u64)) {
                    out.push(a.task_now(k as u64, task));
                    more = true;
                }
            }
        }
        if more {
            out.sort_by_key(|j| j.req.id.0);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use control::{Controller, JobSpec, Settings};

    /// The tables as every build before the schema was recorded made them (schema 1).
    const SCHEMA_1: &str =
        "CREATE TABLE jobs (id INTEGER PRIMARY KEY, state TEXT NOT NULL, user TEXT NOT NULL, end_time INTEGER, data TEXT NOT NULL);
         CREATE INDEX jobs_state ON jobs(state);
         CREATE INDEX jobs_user ON jobs(user);
         CREATE TABLE arrays (id INTEGER PRIMARY KEY, data TEXT NOT NULL);
         CREATE TABLE nodes (name TEXT PRIMARY KEY, data TEXT NOT NULL);
         CREATE TABLE services (name TEXT PRIMARY KEY, data TEXT NOT NULL);
         CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
         CREATE TABLE credentials (holder TEXT PRIMARY KEY, serial INTEGER NOT NULL);
         CREATE TABLE spent_joins (jti TEXT PRIMARY KEY, exp INTEGER NOT NULL);
         CREATE TABLE kube_objects (kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL, data TEXT NOT NULL,
             PRIMARY KEY (kind, namespace, name));";

    fn fresh(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("tandem-store-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn an_older_schema_is_migrated_after_a_copy_and_a_newer_one_refused() {
        let dir = fresh("schema");
        // A new database is made at this schema, with nothing to migrate.
        let new = dir.join("new.db");
        let s = Store::open(&new).unwrap();
        assert_eq!((s.schema().unwrap(), s.migrated()), (SCHEMA, None));
        drop(s);
        assert_eq!(Store::open(&new).unwrap().migrated(), None, "opened again: nothing to do");
        // A schema-1 database with a job in it (an array, a node, the next id).
        let old = dir.join("state.db");
        let mut c = Controller::new(Settings::default());
        c.register(0, model::Node::new("n0", 2, 1 << 30, 0), "127.0.0.1".into()).unwrap();
        c.submit(0, control_spec(), &slurmcli_batch(), "root").unwrap();
        {
            let conn = Connection::open(&old).unwrap();
            conn.execute_batch(SCHEMA_1).unwrap();
            drop(conn);
            // Written as that build wrote (persist writes the same tables), then its schema row
            // taken away: what such a directory holds.
            let mut s = Store::open(&old).unwrap();
            s.persist(&c.take_dirty()).unwrap();
            s.conn.execute_batch("DELETE FROM meta WHERE key = 'schema'; DROP INDEX jobs_end;").unwrap();
        }
        // The copy that first open made (of the empty tables) is not the one wanted below.
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.to_string_lossy().ends_with(".bak") {
                std::fs::remove_file(p).unwrap();
            }
        }
        let s = Store::open(&old).unwrap();
        let m = s.migrated().cloned().expect("migrated");
        assert_eq!((m.from, m.to), (1, SCHEMA));
        assert_eq!(s.schema().unwrap(), SCHEMA);
        let l = s.load().unwrap();
        assert_eq!((l.jobs.len(), l.nodes.len(), l.next_id), (1, 1, 2), "the data is intact");
        let index: bool = s
            .conn
            .query_row("SELECT count(*) = 1 FROM sqlite_master WHERE type = 'index' AND name = 'jobs_end'", [], |r| r.get(0))
            .unwrap();
        assert!(index);
        // The copy is the database as it was: schema 1, the same job.
        let name = m.backup.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("state.db.schema-1.") && name.ends_with(".bak"), "{name}");
        let copy = Connection::open(&m.backup).unwrap();
        let (jobs, schema): (i64, Option<String>) = (
            copy.query_row("SELECT count(*) FROM jobs", [], |r| r.get(0)).unwrap(),
            copy.query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| r.get(0)).optional().unwrap(),
        );
        assert_eq!((jobs, schema), (1, None));
        let marked: Option<String> =
            copy.query_row("SELECT value FROM meta WHERE key = 'backup_taken'", [], |r| r.get(0)).optional().unwrap();
        assert!(marked.is_some(), "a controller started on the copy knows it is restored");
        drop(s);
        // A start cut short after the copy was made keeps that copy instead of taking another.
        let conn = Connection::open(&old).unwrap();
        conn.execute_batch("DELETE FROM meta WHERE key = 'schema';").unwrap();
        drop(conn);
        let again = Store::open(&old).unwrap().migrated().cloned().unwrap();
        assert_eq!(again.backup, m.backup, "the earlier copy is kept");
        // A newer schema is refused, and left as it was.
        let conn = Connection::open(&old).unwrap();
        conn.execute("UPDATE meta SET value = ?1 WHERE key = 'schema'", params![(SCHEMA + 1).to_string()]).unwrap();
        drop(conn);
        let e = Store::open(&old).err().expect("refused").to_string();
        // Schema 0 is no schema.
        let zero = dir.join("zero.db");
        drop(Store::open(&zero).unwrap());
        Connection::open(&zero).unwrap().execute("UPDATE meta SET value = '0' WHERE key = 'schema'", []).unwrap();
        assert!(Store::open(&zero).is_err());
        assert!(e.contains(&format!("schema {}", SCHEMA + 1)) && e.contains("newer Tandem") && e.contains("restore a backup"), "{e}");
        let conn = Connection::open(&old).unwrap();
        let v: String = conn.query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| r.get(0)).unwrap();
        assert_eq!(v, (SCHEMA + 1).to_string());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn round_trip_survives_reopen() {
        let dir = std::env::temp_dir().join(format!("tandem-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.db");
        let _ = std::fs::remove_file(&path);
        let mut c = Controller::new(Settings::default());
        c.register(0, model::Node::new("n0", 2, 1 << 30, 0), "127.0.0.1".into()).unwrap();
        let spec = control_spec();
        let b = slurmcli_batch();
        c.submit(0, spec, &b, "root").unwrap();
        {
            let mut s = Store::open(&path).unwrap();
            // As an older version stored it.
            s.conn.execute("INSERT INTO meta (key, value) VALUES ('secret', 's3cret')", []).unwrap();
            s.persist(&c.take_dirty()).unwrap();
        }
        let mut s = Store::open(&path).unwrap();
        let l = s.load().unwrap();
        assert_eq!((l.jobs.len(), l.nodes.len(), l.next_id, l.secret.as_deref()), (1, 1, 2, Some("s3cret")));
        s.forget_secret().unwrap();
        assert_eq!(s.load().unwrap().secret, None);
        assert_eq!(l.jobs[0].req.id.0, 1);
        let mode: String = s.conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
        let sync: i64 = s.conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
        assert_eq!(sync, 2, "FULL");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn identities_and_deletions_survive_reopen() {
        use control::creds::Holder;
        let dir = std::env::temp_dir().join(format!("tandem-store-creds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.db");
        let _ = std::fs::remove_file(&path);
        let mut c = Controller::new(Settings::default());
        let s0 = c.join(10, "jti-0", 1000, "n0").unwrap();
        let s1 = c.join(10, "jti-1", 1000, "n1").unwrap();
        let p = c.issue_proxy_credential("edge").unwrap();
        for n in ["n0", "n1"] {
            c.register(0, model::Node::new(n, 2, 1 << 30, 0), "127.0.0.1".into()).unwrap();
        }
        let mut s = Store::open(&path).unwrap();
        s.persist(&c.take_dirty()).unwrap();
        c.delete_node("n1").unwrap();
        s.persist(&c.take_dirty()).unwrap();
        drop(s);
        let l = Store::open(&path).unwrap().load().unwrap();
        let names: Vec<&str> = l.nodes.iter().map(|n| n.node.name.as_str()).collect();
        assert_eq!(names, ["n0"], "the deleted node's record is gone");
        let mut creds = l.credentials;
        assert!(creds.valid(Holder::Node, "n0", s0) && !creds.valid(Holder::Node, "n1", s1) && creds.valid(Holder::Proxy, "edge", p));
        assert!(creds.join(20, "jti-1", 1000, "n2").is_err(), "a spent join token stays spent");
        assert!(creds.join(20, "jti-2", 1000, "n1").unwrap() > p, "serials go on from the stored counter");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn an_array_is_one_record_and_loads_back_whole() {
        let dir = std::env::temp_dir().join(format!("tandem-store-array-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.db");
        let _ = std::fs::remove_file(&path);
        let settings = Settings { max_array: 20_001, ..Settings::default() };
        let mut c = Controller::new(settings.clone());
        c.register(0, model::Node::new("n0", 2, 1 << 30, 0), "127.0.0.1".into()).unwrap();
        let env: Vec<(String, String)> = (0..50).map(|i| (format!("VAR{i}"), "x".repeat(40))).collect();
        let spec = JobSpec { env, ..control_spec() };
        let b = slurmcli::parse_sbatch(&["--wrap=true".into(), "--array=0-9999:3,20000%4".into()], 0, &mut |_| unreachable!()).unwrap();
        let ids = c.submit(0, spec, &b, "root").unwrap();
        assert_eq!(ids.len(), 3335);
        assert_eq!(c.tail_tasks(), 3335 - 64, "one window of tasks are jobs; the rest are the array's record");
        let d = c.take_dirty();
        assert_eq!((d.jobs.len(), d.arrays.len()), (0, 1), "one record for the whole array");
        assert!(serde_json::to_string(&d.arrays[0]).unwrap().len() < 40_000, "runs, not one entry per task");
        let mut s = Store::open(&path).unwrap();
        s.persist(&d).unwrap();
        // One task changes (it is cancelled): it gets its own record; the rest still come from
        // the array record. One far in the tail is held: it and the tasks before it are made.
        c.cancel(1, 0, ids[7], None).unwrap();
        c.hold(0, ids[100], true).unwrap();
        assert_eq!(c.tail_tasks(), 3335 - 101);
        let d = c.take_dirty();
        assert_eq!(d.jobs.len(), 2);
        s.persist(&d).unwrap();
        drop(s);
        let restore = |path: &Path| {
            let l = Store::open(path).unwrap().load().unwrap();
            assert_eq!(l.jobs.len(), l.stored.len());
            let mut r = Controller::restore(settings.clone(), l.jobs, l.nodes, Vec::new(), l.next_id, 2, 2);
            r.restore_arrays(l.arrays, &l.stored, 2);
            r
        };
        let r = restore(&path);
        assert_eq!(r.jobs().count(), 3335);
        assert_eq!(r.tail_tasks(), 3335 - 101, "the tail is made again after the last task with a record");
        for (a, b) in r.jobs().zip(c.jobs()) {
            assert_eq!(a.req.id, b.req.id);
            assert_eq!((a.state, a.req.held, a.array.unwrap().task), (b.state, b.req.held, b.array.unwrap().task));
        }
        let l: Vec<_> = r.jobs().collect();
        assert_eq!(l[7].state, model::JobState::Cancelled);
        assert_eq!(l.last().unwrap().array.unwrap().task, 20_000);
        assert!(l.iter().all(|j| std::sync::Arc::ptr_eq(&j.spec, &l[0].spec)), "one shared spec");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn cancelling_an_arrays_pending_tasks_is_one_change_and_sacct_sees_them() {
        let dir = std::env::temp_dir().join(format!("tandem-store-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.db");
        let _ = std::fs::remove_file(&path);
        let settings = Settings { array_window: 8, ..Settings::default() };
        let mut c = Controller::new(settings.clone());
        c.register(0, model::Node::new("n0", 2, 1 << 30, 0), "127.0.0.1".into()).unwrap();
        let b = slurmcli::parse_sbatch(&["--wrap=true".into(), "--array=0-999".into()], 0, &mut |_| unreachable!()).unwrap();
        let ids = c.submit(0, JobSpec { uid: 1000, ..control_spec() }, &b, "alice").unwrap();
        let mut s = Store::open(&path).unwrap();
        s.persist(&c.take_dirty()).unwrap();
        // Another user's cancel makes nothing and cancels nothing.
        let refused = c.cancel_many(5, 1001, ids.clone(), None);
        assert_eq!(refused.len(), 1000);
        assert_eq!(c.tail_tasks(), 992);
        let refused = c.cancel_many(5, 1000, ids.clone(), None);
        assert!(refused.is_empty(), "{refused:?}");
        let d = c.take_dirty();
        assert_eq!((d.jobs.len(), d.arrays.len()), (8, 1), "the window's tasks one by one, the tail in the array's record");
        assert_eq!(c.count_by_state().get("CANCELLED"), Some(&1000));
        s.persist(&d).unwrap();
        let h = s.history(Some("alice"), 0).unwrap();
        assert_eq!(h.len(), 1000);
        assert!(h.iter().all(|j| j.state == model::JobState::Cancelled && j.cancelled_by == Some(1000) && j.end == Some(5)));
        assert!(s.history(Some("bob"), 0).unwrap().is_empty());
        assert!(s.history(None, 6).unwrap().is_empty());
        drop(s);
        let l = Store::open(&path).unwrap().load().unwrap();
        assert_eq!(l.jobs.len(), 8);
        let mut r = Controller::restore(settings.clone(), l.jobs, l.nodes, Vec::new(), l.next_id, 10, 2);
        r.restore_arrays(l.arrays, &l.stored, 10);
        assert_eq!(r.jobs().filter(|j| j.state == model::JobState::Cancelled).count(), 1000);
        assert_eq!(r.jobs_from(0, true).filter(|j| !j.state.is_final()).count(), 0, "nothing is live");
        // Long after, the cancelled tail stays in the database only.
        let l = Store::open(&path).unwrap().load().unwrap();
        let mut r = Controller::restore(settings, l.jobs, l.nodes, Vec::new(), l.next_id, 10_000, 2);
        r.restore_arrays(l.arrays, &l.stored, 10_000);
        assert_eq!((r.jobs().count(), r.tail_tasks()), (0, 0));
        std::fs::remove_dir_all(dir).ok();
    }

    fn control_spec() -> JobSpec {
        JobSpec::script("#!/bin/sh\ntrue\n")
    }

    fn slurmcli_batch() -> control_batch::BatchSpec {
        control_batch::parse()
    }

    mod control_batch {
        pub use slurmcli::BatchSpec;
        pub fn parse() -> BatchSpec {
            slurmcli::parse_sbatch(&["--wrap=true".to_string()], 0, &mut |_| unreachable!()).unwrap()
        }
    }
}
