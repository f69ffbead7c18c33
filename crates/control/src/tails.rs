//! Pending array tasks kept as one record, as Slurm keeps a pending job array as one job
//! record: an array's tasks become jobs of their own a window at a time
//! ([`Settings::array_window`], by default 64), in task order, as the ones before them start;
//! the rest stay in the array's [`ArrayRecord`], a tail that costs no memory per task. The
//! scheduler sees the window only: the tail's tasks are identical to it but later (the same
//! request, user, priority and submit time, higher ids), so nothing the tail would change in a
//! pass's plan is lost, except reservations for more than a window of one array's tasks (Slurm's
//! backfill likewise reserves for at most `bf_max_job_array_resv`, 20, tasks of an array).
//!
//! A tail task is made a job of its own (with every task before it) when something is done to it
//! alone: a cancel, hold or update of that task by its owner. Cancelling an array's pending tasks
//! together (`scancel` of the array or of a user's jobs) cancels its tail in one change of the
//! array's record ([`ArrayRecord::cancelled`]). Listings, limits and dependencies count a tail's
//! tasks as the jobs they stand for.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashSet, btree_map};
use std::ops::Range;

use model::{JobState, PendingReason, Time};

use crate::{ArrayRecord, Controller, Job, Refused};

/// The default of [`crate::Settings::array_window`].
pub const ARRAY_WINDOW: u64 = 64;

/// An array's tasks that are not jobs of their own yet.
#[derive(Debug, Clone)]
pub(crate) struct Tail {
    /// The array as submitted (with the tail's cancel, if it was cancelled).
    pub record: ArrayRecord,
    /// The first task of the tail, counting from 0: every task before it is a job of its own.
    pub next_k: u64,
    /// The array's number of tasks.
    pub count: u64,
}

impl Tail {
    /// The tail's job ids.
    pub fn ids(&self) -> Range<u64> {
        self.record.id() + self.next_k..self.record.id() + self.count
    }

    /// Its tasks wait (not cancelled).
    pub fn pending(&self) -> bool {
        self.record.cancelled.is_none()
    }

    /// Its tasks as jobs, from job id `from` on; pending ones with `reason`.
    fn tasks_from(&self, from: u64, reason: PendingReason) -> impl Iterator<Item = Job> + '_ {
        let skip = from.max(self.ids().start) - self.record.id();
        self.record.indices().enumerate().skip(skip as usize).map(move |(k, task)| {
            let mut j = self.record.task_now(k as u64, task);
            if j.state == JobState::Pending {
                j.reason = reason;
            }
            j
        })
    }
}

/// Jobs by id, tails' tasks included: see [`Controller::jobs_from`].
pub struct Listing<'a> {
    jobs: std::iter::Peekable<btree_map::Range<'a, u64, Box<Job>>>,
    tails: Vec<(&'a Tail, PendingReason)>,
    current: Option<Box<dyn Iterator<Item = Job> + 'a>>,
    from: u64,
    first_only: bool,
}

impl Listing<'_> {
    /// Of each waiting tail, only its first task (the caller collapses a pending array's tasks
    /// into one row: [`Controller::tail_rest`] gives the rest's indices).
    pub fn first_of_tails(mut self, yes: bool) -> Self {
        self.first_only = yes;
        self
    }
}

impl<'a> Iterator for Listing<'a> {
    type Item = Cow<'a, Job>;

    fn next(&mut self) -> Option<Cow<'a, Job>> {
        loop {
            if let Some(cur) = &mut self.current {
                // Job ids within an array's range are its own: nothing interleaves a tail.
                match cur.next() {
                    Some(j) => return Some(Cow::Owned(j)),
                    None => self.current = None,
                }
            }
            let next_tail = self.tails.last().map(|(t, _)| t.ids().start.max(self.from));
            let next_job = self.jobs.peek().map(|(id, _)| **id);
            match (next_job, next_tail) {
                (Some(j), t) if t.is_none_or(|t| j < t) => return self.jobs.next().map(|(_, j)| Cow::Borrowed(&**j)),
                (_, Some(start)) => {
                    let (t, reason) = self.tails.pop().expect("peeked");
                    let n = if self.first_only && t.pending() { 1 } else { usize::MAX };
                    self.current = Some(Box::new(t.tasks_from(start, reason).take(n)));
                }
                (None, None) => return None,
                (Some(_), None) => unreachable!("matched above"),
            }
        }
    }
}

impl Controller {
    /// Jobs with ids from `from` on, by id, the tasks of arrays' tails included (made for the
    /// listing: see the module doc); with `live_only`, starting past the jobs known to have ended
    /// and without cancelled tails (those after may still include some that ended). A tail whose
    /// array's first task, as submitted, fails `keep` is left out whole (every task of a tail
    /// has the same user, account, partition and state). For listings read a piece at a time.
    pub fn jobs_from_where(&self, from: u64, live_only: bool, keep: impl Fn(&Job) -> bool) -> Listing<'_> {
        let start = if live_only { from.max(self.active_from) } else { from };
        let mut tails: Vec<(&Tail, PendingReason)> = self
            .lazy
            .values()
            .filter(|t| t.ids().end > start && (!live_only || t.pending()) && keep(&t.record.first))
            .map(|t| (t, self.tail_reason(t)))
            .collect();
        tails.reverse();
        Listing { jobs: self.jobs.range(start..).peekable(), tails, current: None, from: start, first_only: false }
    }

    /// Jobs with ids from `from` on ([`Controller::jobs_from_where`] keeping every tail).
    pub fn jobs_from(&self, from: u64, live_only: bool) -> Listing<'_> {
        self.jobs_from_where(from, live_only, |_| true)
    }

    /// The reason a tail's pending tasks show: that of the last task of the array made a job
    /// that still waits (they wait behind it), else the array's as submitted.
    fn tail_reason(&self, t: &Tail) -> PendingReason {
        self.jobs
            .range(t.record.id()..t.ids().start)
            .rev()
            .map(|(_, j)| j)
            .find(|j| j.state == JobState::Pending && !j.req.held)
            .map_or(t.record.first.reason, |j| j.reason)
    }

    /// When job `id` is the first task of a waiting tail: the indices of the tail's other tasks.
    pub fn tail_rest(&self, id: u64) -> Option<impl Iterator<Item = u32> + '_> {
        let t = self.lazy.get(&self.tail_of(id)?.record.id())?;
        (t.pending() && t.ids().start == id).then(|| t.record.indices().skip(t.next_k as usize + 1))
    }

    /// The tail holding job id `id`, if any.
    pub(crate) fn tail_of(&self, id: u64) -> Option<&Tail> {
        self.lazy.range(..=id).next_back().map(|(_, t)| t).filter(|t| t.ids().contains(&id))
    }

    /// Whether job `id` exists (as a job or in a tail).
    pub(crate) fn exists(&self, id: u64) -> bool {
        self.jobs.contains_key(&id) || self.tail_of(id).is_some()
    }

    /// Tails' tasks as jobs of their own up to task `upto` of array `array` (excluded).
    fn make_tasks(&mut self, array: u64, upto: u64) -> usize {
        let Some(t) = self.lazy.get_mut(&array) else { return 0 };
        let upto = upto.min(t.count);
        if upto <= t.next_k {
            return 0;
        }
        let from = t.next_k;
        let made: Vec<Job> = t
            .record
            .indices()
            .enumerate()
            .skip(from as usize)
            .take((upto - from) as usize)
            .map(|(k, task)| t.record.task_now(k as u64, task))
            .collect();
        t.next_k = upto;
        if t.next_k >= t.count {
            self.lazy.remove(&array);
        }
        let n = made.len();
        for j in made {
            let id = j.req.id.0;
            if !j.state.is_final() {
                self.active_from = self.active_from.min(id);
            }
            self.jobs.insert(id, Box::new(j));
            // New to the scheduler, not to the database (the array's record holds it).
            self.dirty_jobs.sched.insert(id);
        }
        n
    }

    /// Makes job `id` a job of its own if it is in a tail (with the tasks before it), after
    /// checking that `uid` may act on it: another user's request never makes anything.
    pub(crate) fn ensure_owned(&mut self, uid: u32, id: u64) -> Result<(), Refused> {
        let Some(t) = self.tail_of(id) else { return Ok(()) };
        if uid != t.record.first.spec.uid && !self.is_operator(uid) {
            return Err(Refused::Forbidden(format!("access/permission denied: job {id} belongs to another user")));
        }
        let (array, k) = (t.record.id(), id - t.record.id());
        self.make_tasks(array, k + 1);
        Ok(())
    }

    /// New arrays' tasks: the first window of each as jobs, the rest as its tail.
    pub(crate) fn take_array(&mut self, record: ArrayRecord) {
        let count = record.count();
        let id = record.id();
        self.lazy.insert(id, Tail { record, next_k: 0, count });
        let w = self.settings.array_window.max(1);
        self.make_tasks(id, w);
    }

    /// Tops up each waiting tail's window: when fewer than half a window of the array's tasks
    /// made so far still wait, the next ones are made. Returns whether any were.
    pub(crate) fn refill(&mut self) -> bool {
        let w = self.settings.array_window.max(1);
        let mut want: Vec<(u64, u64)> = Vec::new();
        for (&array, t) in &self.lazy {
            if !t.pending() {
                continue;
            }
            let start = t.ids().start;
            let waiting = self
                .jobs
                .range(start.saturating_sub(w).max(array)..start)
                .filter(|(_, j)| j.state == JobState::Pending && !j.req.held)
                .count() as u64;
            if waiting < w / 2 + 1 && !t.record.first.req.held {
                want.push((array, t.next_k + (w - waiting)));
            }
        }
        let mut made = false;
        for (array, upto) in want {
            made |= self.make_tasks(array, upto) > 0;
        }
        made
    }

    /// Cancels the waiting tails of the arrays in `ids` (job ids, ascending) whose every tail
    /// task is listed, by `uid` if they are theirs: one change of each array's record. The ids
    /// of the tasks so cancelled are taken out of `ids`; the rest are for one-by-one cancels.
    pub(crate) fn cancel_tails(&mut self, now: Time, uid: u32, ids: &mut Vec<u64>) {
        let mut whole: HashSet<u64> = HashSet::new();
        let mut gone: Vec<Range<u64>> = Vec::new();
        for (&array, t) in &self.lazy {
            let r = t.ids();
            if !t.pending() || (uid != t.record.first.spec.uid && !self.is_operator(uid)) {
                continue;
            }
            let lo = ids.partition_point(|&i| i < r.start);
            let hi = ids.partition_point(|&i| i < r.end);
            if (hi - lo) as u64 == r.end - r.start {
                whole.insert(array);
                gone.push(r);
            }
        }
        if whole.is_empty() {
            return;
        }
        for array in &whole {
            let t = self.lazy.get_mut(array).expect("listed");
            t.record.cancelled = Some(crate::types::TailCancel { from: t.next_k, end: now, by: uid });
            self.dirty_arrays.push(t.record.clone());
        }
        ids.retain(|i| !gone.iter().any(|r| r.contains(i)));
    }

    /// Drops cancelled tails that ended more than `age` seconds ago from memory (their record
    /// is in the database), except those of arrays a job not yet ended depends on.
    pub(crate) fn purge_tails(&mut self, now: Time, age: Time, needed: &HashSet<u64>) {
        self.lazy.retain(|id, t| {
            let old = t.record.cancelled.is_some_and(|c| c.end < now - age);
            !old || needed.iter().any(|n| n == id || t.ids().contains(n))
        });
    }

    /// Waiting (or running) jobs with the number each stands for: a job 1, an array's waiting
    /// tail as many as its tasks (for limits that count submitted jobs).
    pub(crate) fn live_weighted(&self) -> impl Iterator<Item = (&Job, u64)> {
        self.active()
            .filter(|j| !j.state.is_final())
            .map(|j| (j, j.req.components() as u64))
            .chain(self.lazy.values().filter(|t| t.pending()).map(|t| (&t.record.first, t.count - t.next_k)))
    }

    /// The state of array `array`'s tail tasks and how many there are, if it has a tail.
    pub(crate) fn tail_state(&self, array: u64) -> Option<JobState> {
        self.lazy.get(&array).map(|t| if t.pending() { JobState::Pending } else { JobState::Cancelled })
    }

    /// Jobs by state (Slurm's names), tails' tasks included.
    pub fn count_by_state(&self) -> std::collections::BTreeMap<&'static str, u64> {
        let mut m = std::collections::BTreeMap::new();
        for j in self.jobs.values() {
            *m.entry(j.state.slurm_name()).or_default() += 1;
        }
        for t in self.lazy.values() {
            let s = if t.pending() { JobState::Pending } else { JobState::Cancelled };
            *m.entry(s.slurm_name()).or_default() += t.count - t.next_k;
        }
        m
    }

    /// Jobs held as records of their own (an array's tail tasks are not).
    pub fn job_records(&self) -> usize {
        self.jobs.len()
    }

    /// Array tasks that are not jobs of their own yet (in tails).
    pub fn tail_tasks(&self) -> u64 {
        self.lazy.values().map(|t| t.count - t.next_k).sum()
    }

    /// Arrays' records after a restart, with the tasks that have records of their own already
    /// restored ([`Controller::restore`]): each array's first window (and every task up to the
    /// last with a record) becomes jobs, the rest its tail again; a cancelled tail that ended
    /// more than `min_job_age` ago stays in the database only.
    /// `stored`: the ids of every job with a record of its own in the database (those left out
    /// of memory as long finished included).
    pub fn restore_arrays(&mut self, arrays: Vec<ArrayRecord>, stored: &BTreeSet<u64>, now: Time) {
        let w = self.settings.array_window.max(1);
        let age = self.settings.min_job_age;
        let mut keyed: Vec<&ArrayRecord> = arrays.iter().filter(|r| r.first.idempotency_key.is_some()).collect();
        keyed.sort_by_key(|r| r.first.req.submit_time);
        for r in keyed.into_iter().cloned().collect::<Vec<_>>() {
            self.remember_key(&r.first, r.count(), now);
        }
        // Jobs' keys and arrays' in one order of time, so they are forgotten in it.
        self.idempotency_order.make_contiguous().sort();
        for record in arrays {
            let (id, count) = (record.id(), record.count());
            let last = stored.range(id..id + count).next_back().map_or(0, |&i| i - id + 1);
            let upto = last.max(w).min(count);
            let old = |j: &Job| age > 0 && j.state.is_final() && j.end.is_some_and(|e| e < now - age);
            for (k, task) in record.indices().enumerate().take(upto as usize) {
                if stored.contains(&(id + k as u64)) {
                    continue;
                }
                let j = record.task_now(k as u64, task);
                if old(&j) {
                    continue;
                }
                if !j.state.is_final() {
                    self.active_from = self.active_from.min(id + k as u64);
                }
                self.dirty_jobs.sched.insert(id + k as u64);
                self.jobs.insert(id + k as u64, Box::new(j));
            }
            if upto < count && !record.cancelled.is_some_and(|c| age > 0 && c.end < now - age) {
                self.lazy.insert(id, Tail { record, next_k: upto, count });
            }
        }
        self.advance_active();
    }
}
