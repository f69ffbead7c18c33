//! Group commit for the controller's database. Changes are taken from the controller in order,
//! under its lock, each batch with a sequence number; one writer thread writes everything queued
//! so far in one SQLite transaction (one fsync) and then publishes the highest durable sequence
//! number. A reply waits until everything taken up to the moment it looked at the controller is
//! durable, so nothing a reply reveals can be lost, and concurrent requests share an fsync
//! instead of queueing behind one fsync each.

use control::Dirty;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use tokio::sync::watch;

#[derive(Default)]
struct Queue {
    /// Sequence number of the newest batch taken.
    last: u64,
    /// Batches taken but not yet handed to the writer.
    pending: Vec<Dirty>,
}

/// What the writer has done so far.
#[derive(Clone, Default)]
struct Written {
    /// Every batch up to this sequence number has been attempted.
    upto: u64,
    /// Since a commit failed: the first sequence number not on disk, and the last error. Every
    /// batch from it up to `upto` is not durable until a commit succeeds (what failed is
    /// carried into every later commit, so one success makes all of it durable).
    failed: Option<(u64, Arc<str>)>,
}

/// The journal: a queue of batches, a writer thread, and what it has made durable.
pub struct Journal {
    /// Transactions and records written (for `/metrics`).
    stats: Mutex<(u64, u64)>,
    queue: Mutex<Queue>,
    kick: Condvar,
    written: watch::Sender<Written>,
}

/// A commit that did not reach the disk.
#[derive(Debug)]
pub struct CommitFailed(pub Arc<str>);

impl Journal {
    /// Starts the writer thread over `db`; the store is shared so that reads can use it.
    pub fn start(db: Arc<Mutex<store::Store>>) -> Arc<Journal> {
        let j = Arc::new(Journal {
            stats: Mutex::new((0, 0)),
            queue: Mutex::new(Queue::default()),
            kick: Condvar::new(),
            written: watch::Sender::new(Written::default()),
        });
        let w = j.clone();
        std::thread::Builder::new().name("tandem-journal".into()).spawn(move || w.writer(&db)).expect("starting the journal thread");
        j
    }

    /// Queues what changed (call it under the controller's lock, right after `take_dirty`, so
    /// that sequence order is the order of the changes). Returns the sequence number a reply must
    /// wait for: this batch's, or the newest one taken when nothing changed.
    pub fn push(&self, d: Dirty) -> u64 {
        let mut q = self.queue.lock().expect("journal lock");
        if d.is_empty() {
            return q.last;
        }
        q.last += 1;
        q.pending.push(d);
        self.kick.notify_one();
        q.last
    }

    /// Transactions and records written so far.
    pub fn stats(&self) -> (u64, u64) {
        *self.stats.lock().expect("stats lock")
    }

    /// The newest sequence number taken (a read waits for it before it answers).
    pub fn last(&self) -> u64 {
        self.queue.lock().expect("journal lock").last
    }

    /// Waits until every batch up to `seq` is on disk.
    pub async fn durable(&self, seq: u64) -> Result<(), CommitFailed> {
        // A request that waits here holds no user's turn (`limits`).
        crate::limits::give_back_turn();
        let mut rx = self.written.subscribe();
        let w = rx.wait_for(|w| w.upto >= seq).await.map_err(|_| CommitFailed("the journal writer stopped".into()))?;
        match &w.failed {
            Some((from, e)) if seq >= *from => Err(CommitFailed(e.clone())),
            _ => Ok(()),
        }
    }

    fn writer(&self, db: &Mutex<store::Store>) {
        // Records of a failed commit, retried with the next batch so the database catches up,
        // and since when commits fail.
        let mut carry: Option<(Dirty, std::time::Instant)> = None;
        let mut first_unwritten = 1u64;
        loop {
            let (batches, last) = {
                let mut q = self.queue.lock().expect("journal lock");
                // A failed commit is retried on its own (a full disk that has room again),
                // not only when the next change comes.
                while q.pending.is_empty() && carry.is_none() {
                    q = self.kick.wait(q).expect("journal lock");
                }
                (std::mem::take(&mut q.pending), q.last)
            };
            let (carried, failing) = carry.take().unzip();
            let merged = merge(carried, batches);
            let records =
                (merged.jobs.len() + merged.arrays.len() + merged.nodes.len() + merged.services.len() + merged.removed_services.len())
                    as u64;
            crate::failpoint::hit("commit-taken");
            let (r, oversized) = {
                let mut d = db.lock().expect("database lock");
                let r = d.persist(&merged);
                (r, d.take_oversized())
            };
            for (key, bytes) in oversized {
                tracing::error!(
                    "the record {key} ({bytes} bytes) is larger than etcd takes (1.4 MB): it is kept by this controller only, and lost at a failover"
                );
            }
            if let Err(store::StoreError::Deposed) = r {
                // Another controller leads (etcd): nothing of this one's may go out any more.
                tracing::error!("stepping down: {}", store::StoreError::Deposed);
                std::process::exit(75);
            }
            if r.is_ok() {
                crate::failpoint::hit("commit-written");
            }
            if r.is_ok() {
                let mut st = self.stats.lock().expect("stats lock");
                st.0 += 1;
                st.1 += records;
            }
            let range = (first_unwritten, last);
            first_unwritten = last + 1;
            self.written.send_modify(|w| {
                w.upto = last;
                match &r {
                    Ok(()) => w.failed = None,
                    Err(e) => {
                        let from = w.failed.as_ref().map_or(range.0, |f| f.0);
                        w.failed = Some((from, Arc::from(e.to_string())));
                    }
                }
            });
            match r {
                Err(e) => {
                    // Said once per outage (it is retried ten times a second).
                    if failing.is_none() {
                        tracing::error!("cannot commit to the database: {e}; retrying, and answering nothing that needs it");
                    }
                    carry = Some((merged, failing.unwrap_or_else(std::time::Instant::now)));
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Ok(()) => {
                    if let Some(since) = failing {
                        tracing::warn!(
                            "the database takes commits again after {:.1} s; {records} record(s) caught up",
                            since.elapsed().as_secs_f64()
                        );
                    }
                }
            }
        }
    }
}

/// Folds batches (oldest first) into one: the newest version of each job and node wins.
fn merge(carry: Option<Dirty>, batches: Vec<Dirty>) -> Dirty {
    let mut all = carry.into_iter().chain(batches);
    let mut a = all.next().unwrap_or_default();
    let mut jobs: HashMap<u64, usize> = a.jobs.iter().enumerate().map(|(i, j)| (j.req.id.0, i)).collect();
    let mut nodes: HashMap<String, usize> = a.nodes.iter().enumerate().map(|(i, n)| (n.node.name.clone(), i)).collect();
    for b in all {
        for j in b.jobs {
            match jobs.get(&j.req.id.0) {
                Some(&i) => a.jobs[i] = j,
                None => {
                    jobs.insert(j.req.id.0, a.jobs.len());
                    a.jobs.push(j);
                }
            }
        }
        // Nodes: a deletion drops the versions before it; a later version (the name joined
        // again) cancels an earlier deletion.
        for name in b.removed_nodes {
            if let Some(i) = nodes.remove(&name) {
                a.nodes.remove(i);
                nodes = a.nodes.iter().enumerate().map(|(i, n)| (n.node.name.clone(), i)).collect();
            }
            if !a.removed_nodes.contains(&name) {
                a.removed_nodes.push(name);
            }
        }
        for n in b.nodes {
            a.removed_nodes.retain(|r| *r != n.node.name);
            match nodes.get(&n.node.name) {
                Some(&i) => a.nodes[i] = n,
                None => {
                    nodes.insert(n.node.name.clone(), a.nodes.len());
                    a.nodes.push(n);
                }
            }
        }
        // Credentials: every change, in order (a later one of the same name wins when applied).
        a.creds.serials.extend(b.creds.serials);
        a.creds.spent.extend(b.creds.spent);
        a.creds.forget_spent_before = a.creds.forget_spent_before.max(b.creds.forget_spent_before);
        a.creds.next_serial = a.creds.next_serial.max(b.creds.next_serial);
        if b.next_id.is_some() {
            a.next_id = b.next_id;
        }
        // Kept whole: the newest copy wins.
        if b.accounting.is_some() {
            a.accounting = b.accounting;
        }
        if b.reservations.is_some() {
            a.reservations = b.reservations;
        }
        // Kubernetes objects: every change in order (the store applies them in order).
        a.kube.extend(b.kube);
        // An array record never changes after submission; its tasks' changes are job records.
        a.arrays.extend(b.arrays);
        // Services: the newest version wins; a removal cancels earlier versions, a later
        // version cancels an earlier removal.
        for name in b.removed_services {
            a.services.retain(|s| s.spec.name != name);
            if !a.removed_services.contains(&name) {
                a.removed_services.push(name);
            }
        }
        for svc in b.services {
            a.removed_services.retain(|n| *n != svc.spec.name);
            a.services.retain(|s| s.spec.name != svc.spec.name);
            a.services.push(svc);
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::merge;
    use control::{Controller, JobSpec, Settings};

    #[test]
    fn merging_batches_keeps_every_array_and_the_newest_job_versions() {
        let mut c = Controller::new(Settings::default());
        c.register(0, model::Node::new("n0", 2, 1 << 30, 0), "127.0.0.1".into()).unwrap();
        let spec = JobSpec::script("#!/bin/sh\ntrue\n");
        let b =
            |a: &[&str]| slurmcli::parse_sbatch(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>(), 0, &mut |_| unreachable!()).unwrap();
        let mut batches = Vec::new();
        let single = c.submit(0, spec.clone(), &b(&["--wrap=true"]), "root").unwrap()[0];
        batches.push(c.take_dirty());
        for n in ["--array=0-9", "--array=0-4"] {
            c.submit(0, spec.clone(), &b(&["--wrap=true", n]), "root").unwrap();
            batches.push(c.take_dirty());
        }
        c.cancel(1, 0, single, None).unwrap();
        batches.push(c.take_dirty());
        let m = merge(None, batches);
        assert_eq!(m.arrays.iter().map(|a| a.indices().count()).collect::<Vec<_>>(), vec![10, 5]);
        assert_eq!(m.jobs.len(), 1);
        assert_eq!(m.jobs[0].state, model::JobState::Cancelled, "the newest version wins");
        assert_eq!(m.next_id, Some(17));
    }

    #[test]
    fn merging_batches_keeps_every_credential_and_node_deletion() {
        // Found by `tandem bench chaos --seed 4`: nodes that joined together were merged into
        // one commit that kept only the first join's credential, so after a controller restart
        // the others' credentials read as revoked.
        let mut c = Controller::new(Settings::default());
        let mut batches = Vec::new();
        let mut serials = Vec::new();
        for (i, n) in ["n1", "n2", "n3"].iter().enumerate() {
            serials.push(c.join(0, &format!("jti-{i}"), 1000, n).unwrap());
            batches.push(c.take_dirty());
        }
        c.register(0, model::Node::new("n1", 2, 1 << 30, 0), "127.0.0.1".into()).unwrap();
        batches.push(c.take_dirty());
        c.delete_node("n1").unwrap();
        batches.push(c.take_dirty());
        let m = merge(None, batches);
        let keys: Vec<&str> = m.creds.serials.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, vec!["n1", "n2", "n3", "n1"], "{:?}", m.creds);
        assert_eq!(m.creds.serials[3].1, None, "n1's deletion revokes it, last");
        assert_eq!(m.creds.spent.len(), 3);
        assert!(m.nodes.is_empty() && m.removed_nodes == vec!["n1".to_string()], "{:?} {:?}", m.nodes.len(), m.removed_nodes);
        // Joined again after the deletion: the new record stays.
        let n = c.join(1, "jti-9", 1000, "n1").unwrap();
        assert!(n > serials[2]);
        c.register(1, model::Node::new("n1", 2, 1 << 30, 0), "127.0.0.1".into()).unwrap();
        let again = c.take_dirty();
        let m = merge(Some(m), vec![again]);
        assert!(m.removed_nodes.is_empty() && m.nodes.len() == 1, "{:?}", m.removed_nodes);
    }
}
