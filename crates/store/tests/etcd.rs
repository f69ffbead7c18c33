//! The etcd backend against a real etcd (Debian's etcd-server, started here on loopback):
//! commits small and staged, the replica a full read makes, a standby's watch, and the fence.
#![cfg(feature = "etcd")]

use control::{Controller, Settings};
use std::sync::{Arc, Mutex};
use store::Store;
use store::etcd::{self, Config, Remote};

/// One etcd member on free loopback ports, stopped when dropped.
struct Etcd {
    child: std::process::Child,
    client: String,
    dir: std::path::PathBuf,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn etcd(tag: &str) -> Option<Etcd> {
    if std::process::Command::new("etcd").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "etcd is not installed (.ci/run installs Debian's etcd-server)");
        eprintln!("skipped: no etcd (apt-get install etcd-server)");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("tandem-store-etcd-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (c, p) = (free_port(), free_port());
    let client = format!("127.0.0.1:{c}");
    let child = std::process::Command::new("etcd")
        .args(["--name", "m0", "--data-dir"])
        .arg(dir.join("data"))
        .args(["--listen-client-urls", &format!("http://{client}"), "--advertise-client-urls", &format!("http://{client}")])
        .args(["--listen-peer-urls", &format!("http://127.0.0.1:{p}"), "--initial-advertise-peer-urls", &format!("http://127.0.0.1:{p}")])
        .args(["--initial-cluster", &format!("m0=http://127.0.0.1:{p}")])
        .stdout(std::fs::File::create(dir.join("etcd.log")).unwrap())
        .stderr(std::fs::File::create(dir.join("etcd.err")).unwrap())
        .spawn()
        .unwrap();
    let e = Etcd { child, client, dir };
    for _ in 0..100 {
        if std::net::TcpStream::connect(&e.client).is_ok() {
            return Some(e);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("etcd did not start: {}", std::fs::read_to_string(e.dir.join("etcd.err")).unwrap_or_default());
}

fn spec(name: &str, big: usize) -> (control::JobSpec, slurmcli::BatchSpec) {
    let b = slurmcli::parse_sbatch(&[format!("--job-name={name}"), "--wrap=true".to_string()], 0, &mut |_| unreachable!()).unwrap();
    (control::JobSpec::script(&format!("#!/bin/sh\n# {}\ntrue\n", "x".repeat(big))), b)
}

fn replica(e: &Etcd, dir: &std::path::Path, name: &str) -> Store {
    let cfg = Config::parse(&format!("etcd://{}", e.client), "/t").unwrap();
    Store::open_replica(&dir.join(name), Remote::connect(cfg).unwrap()).unwrap()
}

#[test]
fn commits_small_and_staged_read_back_whole_and_a_watching_standby_keeps_the_same_state() {
    let Some(e) = etcd("commits") else { return };
    let dir = e.dir.clone();
    let mut leader = replica(&e, &dir, "a.db");
    assert_eq!(leader.sync().unwrap() > 0, true);
    assert_eq!(leader.next_boot_after(0, 1).unwrap(), 1);
    // A standby: a full read, then a watch from the next revision.
    let mut standby = replica(&e, &dir, "b.db");
    let from = standby.sync().unwrap() + 1;
    let client = standby.remote().unwrap().client();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (tx, mut rx) = tokio::sync::watch::channel(0i64);
    let follower = standby.remote().unwrap().take_follower();
    let standby = Arc::new(Mutex::new(standby));
    rt.spawn(etcd::follow(client, "/t/".into(), from, follower, standby.clone(), tx));
    let mut c = Controller::new(Settings::default());
    c.register(0, model::Node::new("n0", 2, 1 << 30, 0), "127.0.0.1".into()).unwrap();
    // One small commit (one transaction), then 600 jobs with 3 kB scripts: about 2 MB, more
    // than one transaction holds, so staged.
    let (s, b) = spec("small", 10);
    c.submit(0, s, &b, "alice").unwrap();
    leader.persist(&c.take_dirty()).unwrap();
    for i in 0..600 {
        let (s, b) = spec(&format!("j{i}"), 3000);
        c.submit(0, s, &b, "bob").unwrap();
    }
    let big = c.take_dirty();
    assert_eq!(big.jobs.len(), 600);
    leader.persist(&big).unwrap();
    let want = leader.load().unwrap();
    assert_eq!((want.jobs.len(), want.nodes.len(), want.next_id), (601, 1, 602));
    // A full read from etcd makes the same replica.
    let mut third = replica(&e, &dir, "c.db");
    third.sync().unwrap();
    let got = third.load().unwrap();
    assert_eq!((got.jobs, got.nodes.len(), got.next_id), (want.jobs.clone(), 1, want.next_id));
    // The standby's watch caught up with every commit (the staged group whole).
    let last = leader.replica_revision().unwrap().unwrap();
    rt.block_on(async { tokio::time::timeout(std::time::Duration::from_secs(10), rx.wait_for(|r| *r >= last)).await.unwrap().unwrap() });
    let watched = standby.lock().unwrap().load().unwrap();
    assert_eq!((watched.jobs, watched.next_id), (want.jobs, want.next_id));
    // Nothing of the group is left in etcd.
    assert_eq!(leader.remote().unwrap().get("groups/").unwrap(), None);
}

#[test]
fn a_deposed_leader_cannot_commit_and_its_successor_raises_the_boot_count() {
    let Some(e) = etcd("fence") else { return };
    let dir = e.dir.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut a = replica(&e, &dir, "a.db");
    let mut b = replica(&e, &dir, "b.db");
    a.sync().unwrap();
    b.sync().unwrap();
    let (ca, cb) = (a.remote().unwrap().client(), b.remote().unwrap().client());
    let election = a.remote().unwrap().election();
    let la = rt.block_on(async { etcd::grant(&mut ca.clone(), 2).await }).unwrap();
    let fa = rt.block_on(etcd::campaign(ca.clone(), election.clone(), "http://a".into(), la.id)).unwrap();
    let boot = a.next_boot_after(0, 1).unwrap();
    a.remote().unwrap().set_fence(fa, boot);
    let boot = a.next_boot_after(0, 1).unwrap();
    assert_eq!(boot, 2);
    assert_eq!(rt.block_on(etcd::leader(cb.clone(), election.clone())).as_deref(), Some("http://a"));
    // b waits while a leads; a's lease is let go (as if a lost etcd for its TTL).
    let lb = rt.block_on(async { etcd::grant(&mut cb.clone(), 2).await }).unwrap();
    let won = rt.spawn(etcd::campaign(cb.clone(), election.clone(), "http://b".into(), lb.id));
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!won.is_finished(), "b does not lead while a does");
    rt.block_on(async { ca.clone().lease_revoke(la.id).await }).unwrap();
    let fb = rt.block_on(won).unwrap().unwrap();
    let mut c = Controller::new(Settings::default());
    let (s, bs) = spec("late", 1);
    c.submit(0, s, &bs, "alice").unwrap();
    let d = c.take_dirty();
    assert!(matches!(a.persist(&d), Err(store::StoreError::Deposed)), "a no longer leads");
    // b: a full read, then its first fenced commit raises the count past a's.
    b.sync().unwrap();
    b.remote().unwrap().set_fence(fb, 3);
    assert_eq!(b.next_boot_after(0, 1).unwrap(), 3);
    b.persist(&d).unwrap();
    let mut r = replica(&e, &dir, "r.db");
    r.sync().unwrap();
    assert_eq!(r.load().unwrap().jobs.len(), 1, "b's commit, and none of a's after it was deposed");
    assert_eq!(r.meta("boot").unwrap().as_deref(), Some("3"));
}

#[test]
fn a_kept_lease_outlives_its_ttl() {
    let Some(e) = etcd("lease") else { return };
    let dir = e.dir.clone();
    let mut a = replica(&e, &dir, "a.db");
    let members = a.remote().unwrap().members();
    let mut c = a.remote().unwrap().client();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let lease = rt.block_on(etcd::grant(&mut c, 2)).unwrap();
    let id = lease.id;
    let kept = rt.spawn(async move { etcd::keep_alive(members, &lease).await });
    std::thread::sleep(std::time::Duration::from_secs(4));
    assert!(!kept.is_finished(), "{}", rt.block_on(kept).unwrap());
    // The question goes over `c`'s connection, idle these 4 s but for the client's keep-alive
    // pings (every second): etcd's default policy (`--grpc-keepalive-min-time` 5 s, no pings
    // without a stream) may hang up on it for them (GOAWAY "too_many_pings") just as it is asked,
    // and then a second try opens another. The renewals have connections of their own.
    let ttl = rt
        .block_on(async {
            match c.lease_time_to_live(id, None).await {
                Ok(r) => Ok(r),
                Err(_) => c.lease_time_to_live(id, None).await,
            }
        })
        .unwrap()
        .ttl();
    assert!(ttl > 0, "the lease is alive: {ttl}");
}

#[test]
fn a_group_a_dead_leader_committed_but_did_not_write_out_is_settled_by_the_next_and_seen_whole_by_a_standby() {
    let Some(e) = etcd("settle") else { return };
    let dir = e.dir.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    // (The store is kept: its client runs on the store's runtime.)
    let mut raw_store = replica(&e, &dir, "raw.db");
    let mut raw = raw_store.remote().unwrap().client();
    let put = |c: &mut etcd_client::Client, k: &str, v: Vec<u8>| rt.block_on(c.put(format!("/t/{k}"), v, None)).unwrap();
    let piece = |id: u64| etcd::encode_piece(&[(format!("meta/next_id"), Some(id.to_string()))]);
    // Group 5: committed (its marker), never written out. Group 6: a piece, no marker yet.
    put(&mut raw, "meta/next_id", b"3".to_vec());
    put(&mut raw, "groups/00000000000000000005/000000", piece(40));
    put(&mut raw, "groups/00000000000000000005/done", Vec::new());
    put(&mut raw, "groups/00000000000000000006/000000", piece(70));
    // A standby reads now: group 5 is in its state, group 6 is not yet.
    let mut standby = replica(&e, &dir, "s.db");
    let from = standby.sync().unwrap() + 1;
    assert_eq!(standby.meta("next_id").unwrap().as_deref(), Some("40"));
    let (client, follower) = (standby.remote().unwrap().client(), standby.remote().unwrap().take_follower());
    let standby = Arc::new(Mutex::new(standby));
    let (tx, mut rx) = tokio::sync::watch::channel(0i64);
    rt.spawn(etcd::follow(client, "/t/".into(), from, follower, standby.clone(), tx));
    // Group 6's marker comes: the standby applies its piece, read before it started watching.
    let r = put(&mut raw, "groups/00000000000000000006/done", Vec::new()).header().unwrap().revision();
    rt.block_on(async { tokio::time::timeout(std::time::Duration::from_secs(10), rx.wait_for(|x| *x >= r)).await.unwrap().unwrap() });
    assert_eq!(standby.lock().unwrap().meta("next_id").unwrap().as_deref(), Some("70"));
    // A new leader settles both groups to their keys and deletes them.
    let mut leader = replica(&e, &dir, "l.db");
    leader.sync().unwrap();
    let mut c = leader.remote().unwrap().client();
    let lease = rt.block_on(etcd::grant(&mut c, 5)).unwrap();
    let f = rt.block_on(etcd::campaign(c, leader.remote().unwrap().election(), "x".into(), lease.id)).unwrap();
    leader.remote().unwrap().set_fence(f, 1);
    leader.remote().unwrap().settle_groups().unwrap();
    assert_eq!(leader.remote().unwrap().get("meta/next_id").unwrap().as_deref(), Some(&b"70"[..]));
    let left = rt.block_on(raw.get("/t/groups/", Some(etcd_client::GetOptions::new().with_prefix()))).unwrap();
    assert_eq!(left.kvs().len(), 0, "no group is left");
}

fn replica_at(e: &Etcd, dir: &std::path::Path, name: &str, prefix: &str) -> Result<Store, store::StoreError> {
    let cfg = Config::parse(&format!("etcd://{}", e.client), prefix).unwrap();
    let mut s = Store::open_replica(&dir.join(name), Remote::connect(cfg).unwrap()).unwrap();
    s.sync()?;
    Ok(s)
}

#[test]
fn two_clusters_on_one_etcd_are_independent_and_nested_prefixes_or_a_newer_schema_are_refused() {
    let Some(e) = etcd("prefixes") else { return };
    let dir = e.dir.clone();
    // Two clusters side by side (one prefix the other's name with a suffix): each sees its own.
    let mut a = replica_at(&e, &dir, "a.db", "/tandem").unwrap();
    let mut b = replica_at(&e, &dir, "b.db", "/tandem-b/").unwrap();
    assert_eq!((a.next_boot_after(0, 1).unwrap(), b.next_boot_after(0, 1).unwrap()), (1, 1));
    for (s, n, user) in [(&mut a, 3, "alice"), (&mut b, 5, "bob")] {
        let mut c = Controller::new(Settings::default());
        for i in 0..n {
            let (sp, bs) = spec(&format!("j{i}"), 1);
            c.submit(0, sp, &bs, user).unwrap();
        }
        s.persist(&c.take_dirty()).unwrap();
    }
    assert_eq!(a.next_boot_after(0, 1).unwrap(), 2, "b's start count is its own");
    let ra = replica_at(&e, &dir, "ra.db", "/tandem").unwrap().load().unwrap();
    let rb = replica_at(&e, &dir, "rb.db", "/tandem-b").unwrap().load().unwrap();
    assert_eq!((ra.jobs.len(), rb.jobs.len()), (3, 5));
    assert!(ra.jobs.iter().all(|j| j.req.user == "alice") && rb.jobs.iter().all(|j| j.req.user == "bob"));
    // A prefix within a cluster's is refused, and so is one that holds a cluster.
    let inner = replica_at(&e, &dir, "in.db", "/tandem/inner").map(|_| ()).unwrap_err();
    assert!(matches!(&inner, store::StoreError::Nested { other, .. } if other == "/tandem/"), "{inner}");
    assert!(inner.to_string().contains("this prefix lies within it"), "{inner}");
    let mut deep = replica_at(&e, &dir, "deep.db", "/outer/x/y").unwrap();
    deep.next_boot_after(0, 1).unwrap();
    let outer = replica_at(&e, &dir, "out.db", "/outer").map(|_| ()).unwrap_err();
    assert!(matches!(&outer, store::StoreError::Nested { other, .. } if other == "/outer/x/y"), "{outer}");
    // A cluster written by a newer schema: refused at its full read, and at a start.
    let mut n = replica_at(&e, &dir, "n.db", "/newer").unwrap();
    n.next_boot_after(0, 1).unwrap();
    let mut c = n.remote().unwrap().client();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(c.put("/newer/meta/schema", "999", None)).unwrap();
    let err = replica_at(&e, &dir, "n2.db", "/newer").map(|_| ()).unwrap_err();
    assert!(matches!(err, store::StoreError::Newer { found: 999, .. }), "{err}");
    assert!(matches!(n.next_boot_after(0, 1), Err(store::StoreError::Newer { found: 999, .. })));
}

#[test]
fn upkeep_compacts_the_history_and_leaves_etcds_leader_undefragmented() {
    let Some(e) = etcd("upkeep") else { return };
    let dir = e.dir.clone();
    let mut s = replica_at(&e, &dir, "u.db", "/u").unwrap();
    let (mut c, members) = (s.remote().unwrap().client(), s.remote().unwrap().members());
    let rt = tokio::runtime::Runtime::new().unwrap();
    // 20 MB of history on one key (a job's record rewritten as it runs, many times over).
    let first = rt.block_on(etcd::revision(&c)).unwrap();
    for i in 0..200 {
        rt.block_on(c.put("/u/meta/churn", format!("{i}{}", "x".repeat(100_000)), None)).unwrap();
    }
    let rev = rt.block_on(etcd::revision(&c)).unwrap();
    assert!(rev >= first + 200);
    let before = rt.block_on(members.status(std::time::Duration::from_secs(5)));
    assert!(before[0].db_bytes >= 5 << 20, "{before:?}");
    // Nothing is due below the threshold, and a revision of 0 compacts nothing.
    let none = rt.block_on(etcd::upkeep(&c, &members, "/u/meta/upkeep", 0, 1 << 40)).unwrap();
    assert_eq!(none, etcd::Upkeep::default());
    let u = rt.block_on(etcd::upkeep(&c, &members, "/u/meta/upkeep", rev, 1 << 20)).unwrap();
    assert_eq!(u.compacted_to, Some(rev));
    assert!(u.failed.is_empty(), "{u:?}");
    // The one member is etcd's leader, which is not defragmented (its stall would hold every
    // commit); the pages the compaction freed are free in its file.
    assert!(u.defragmented.is_empty(), "{u:?}");
    // (Counted at the member's next backend commits.)
    let mut after = Vec::new();
    for _ in 0..50 {
        after = rt.block_on(members.status(std::time::Duration::from_secs(5)));
        if after[0].db_bytes_in_use * 4 < before[0].db_bytes {
            break;
        }
        rt.block_on(c.put("/u/meta/tick", "1", None)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(after[0].db_bytes_in_use * 4 < before[0].db_bytes, "{before:?} {after:?}");
    // The history before is gone; the newest value and the cluster's state are not.
    let old = rt.block_on(c.get("/u/meta/churn", Some(etcd_client::GetOptions::new().with_revision(first + 1))));
    assert!(old.unwrap_err().to_string().contains("compacted"));
    let v = rt.block_on(c.get("/u/meta/churn", None)).unwrap();
    assert!(v.kvs()[0].value().starts_with(b"199x"));
    let v = rt.block_on(c.get("/u/meta/upkeep", None)).unwrap();
    assert_eq!(v.kvs()[0].value(), rev.to_string().as_bytes());
    // A round again: already compacted there, nothing to defragment.
    let again = rt.block_on(etcd::upkeep(&c, &members, "/u/meta/upkeep", rev, 1 << 20)).unwrap();
    assert_eq!((again.compacted_to, again.defragmented.len()), (None, 0));
    drop(s);
}

#[test]
fn a_sqlite_state_migrates_into_an_empty_prefix_whole_and_a_cut_short_migration_is_refused_then_redone() {
    let Some(e) = etcd("migrate") else { return };
    let dir = e.dir.clone();
    // A SQLite database with 300 jobs, one of them with a large script, and its settings.
    let mut sq = Store::open(&dir.join("state.db")).unwrap();
    sq.next_boot().unwrap();
    let mut c = Controller::new(Settings::default());
    c.register(0, model::Node::new("n0", 2, 1 << 30, 0), "127.0.0.1".into()).unwrap();
    for i in 0..300 {
        let (s, b) = spec(&format!("j{i}"), if i == 7 { 200_000 } else { 10 });
        c.submit(0, s, &b, "alice").unwrap();
    }
    sq.persist(&c.take_dirty()).unwrap();
    let want = sq.load().unwrap();
    let recs = sq.records_all().unwrap();
    let cfg = Config::parse(&format!("etcd://{}", e.client), "/m").unwrap();
    let mut r = Remote::connect(cfg).unwrap();
    assert_eq!(r.migrate_into(&recs).unwrap(), recs.len());
    let got = replica_at(&e, &dir, "r.db", "/m").unwrap();
    let l = got.load().unwrap();
    assert_eq!((l.jobs, l.nodes.len(), l.next_id), (want.jobs.clone(), 1, want.next_id));
    assert_eq!(got.meta("boot").unwrap().as_deref(), Some("1"));
    // Into a prefix that holds a cluster: refused.
    assert!(matches!(r.migrate_into(&recs), Err(store::StoreError::NotEmpty(p)) if p == "/m/"));
    // A migration cut short (its marker left): controllers refuse the state; run again, whole.
    let mut got = got;
    let mut client = got.remote().unwrap().client();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(client.put("/m/meta/migrating", "1", None)).unwrap();
    rt.block_on(client.delete("/m/jobs/", Some(etcd_client::DeleteOptions::new().with_prefix()))).unwrap();
    let err = replica_at(&e, &dir, "r2.db", "/m").map(|_| ()).unwrap_err();
    assert!(matches!(err, store::StoreError::Migrating), "{err}");
    assert_eq!(r.migrate_into(&recs).unwrap(), recs.len());
    assert_eq!(replica_at(&e, &dir, "r3.db", "/m").unwrap().load().unwrap().jobs, want.jobs);
    drop(got);
}
