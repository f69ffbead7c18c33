//! A scheduling pass in three steps, so that a daemon need not hold the controller while the
//! scheduler runs (Nomad's optimistic plan apply):
//!
//! 1. [`Controller::begin_tick`] (holding the controller): leases, preemption grace, time limits,
//!    then the scheduler's inputs, as *changes* since the last pass: the jobs and nodes touched
//!    since then, each copied once. O(changes), not O(nodes + jobs).
//! 2. [`Pass::run`] (holding nothing): brings the pass's [`Mirror`] (what the scheduler saw last
//!    time) up to date with those changes and runs [`sched::schedule`] on it. Pure.
//! 3. [`Controller::finish_tick`] (holding the controller), or [`Controller::finish_some`] a
//!    piece at a time: applies the plan after checking it is still valid. Whatever changed
//!    meanwhile is left to the next pass: a job touched since step 1 is neither started, nor
//!    failed, nor given a reason, nor preempted; a start whose nodes are no longer up, or no
//!    longer have room, is not made.
//!
//! [`Controller::tick`] runs the three in a row: with nothing in between, every check passes and
//! the plan is exactly the one a pass over a snapshot rebuilt from scratch would make (the mirror
//! holds the same pending and running jobs, in the same order, and the same usage; debug builds
//! assert it at each pass that nothing interrupted).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use model::{ClusterConfig, DepStatus, JobState, Node, NodeState, PendingReason, Time};
use sched::{Carry, FairShare, NodeUsage, Pending, Plan, Running, Snapshot};

use crate::{Controller, Job, Order, TickInfo};

/// Jobs changed since they were last handed out to persist, and since the scheduler's mirror
/// last saw them. Every change of a job marks it here.
#[derive(Debug, Default)]
pub(crate) struct Touched {
    /// For [`Controller::take_dirty`].
    pub persist: BTreeSet<u64>,
    /// For the next [`Controller::begin_tick`].
    pub sched: BTreeSet<u64>,
}

impl Touched {
    /// Marks a job changed.
    pub fn insert(&mut self, id: u64) {
        self.persist.insert(id);
        self.sched.insert(id);
    }
}

/// What the scheduler saw at the last pass, kept from pass to pass: usage per node, and the
/// pending and running jobs in id order (the order a scan of the controller's jobs gives).
#[derive(Debug, Default)]
pub(crate) struct Mirror {
    usage: Vec<NodeUsage>,
    pending: Vec<Pending>,
    running: Vec<Running>,
    /// Suspended jobs (they count toward limits).
    suspended: Vec<Running>,
    /// Pending jobs whose admission depends on other jobs, recomputed at every pass: those with
    /// dependencies, and array tasks with a limit on running tasks.
    special: BTreeSet<u64>,
    /// The reason and expected start each untouched waiting job was given by an earlier pass:
    /// a plan hands the controller only the reasons that differ, so a long queue that waits for
    /// the same reason pass after pass costs the controller nothing. A job touched since loses
    /// its entry.
    reasons: HashMap<u64, (PendingReason, Option<Time>)>,
    /// The node definitions of the last pass, and what the scheduler derived from them.
    last_nodes: Option<Arc<Vec<Node>>>,
    reuse: sched::Reuse,
}

/// A job as the mirror should have it now.
#[derive(Debug)]
enum Entry {
    Pending(Pending),
    Running(Running),
    Suspended(Running),
    Gone,
}

/// One scheduling pass taken out of the controller by [`Controller::begin_tick`]: run it with
/// [`Pass::run`] (anywhere: it shares nothing with the controller) and hand it back with
/// [`Controller::finish_tick`]. One pass at a time.
#[derive(Debug)]
pub struct Pass {
    now: Time,
    info: TickInfo,
    mirror: Box<Mirror>,
    n_nodes: usize,
    usage: Vec<(u32, NodeUsage)>,
    jobs: Vec<(u64, Entry)>,
    nodes: Arc<Vec<Node>>,
    suspect: Vec<u32>,
    deps: Vec<(u64, DepStatus)>,
    capped: Vec<u64>,
    cluster: ClusterConfig,
    config: sched::Config,
    fairshare: FairShare,
    /// Finished jobs' run times (copied only when the scheduler predicts from them).
    history: sched::History,
    carry: Carry,
    /// Advance reservations, and their generation when the pass began.
    reservations: Arc<Vec<model::Reservation>>,
    resv_gen: u64,
    ran: bool,
    plan: Option<Plan>,
    /// Applying: the reasons, rejections and preemptions are done.
    head_done: bool,
    /// Applying: starts looked at so far.
    applied: usize,
    /// Applied in full.
    spent: bool,
}

impl Pass {
    /// Brings the mirror up to date and runs the scheduler on it. Pure: no controller, no lock.
    pub fn run(&mut self) {
        self.ran = true;
        let m = &mut *self.mirror;
        m.sync(self.n_nodes, std::mem::take(&mut self.usage), std::mem::take(&mut self.jobs));
        for (id, dep) in &self.deps {
            if let Ok(k) = m.pending.binary_search_by_key(id, |p| p.req.id.0) {
                m.pending[k].dep = *dep;
            }
        }
        let filtered: Vec<Pending>;
        let pending: &[Pending] = if self.capped.is_empty() {
            &m.pending
        } else {
            let capped: BTreeSet<u64> = self.capped.iter().copied().collect();
            filtered = m.pending.iter().filter(|p| !capped.contains(&p.req.id.0)).cloned().collect();
            &filtered
        };
        if pending.is_empty() {
            // Nothing to start, reserve, reject or preempt for.
            self.plan = None;
            return;
        }
        // Nodes silent beyond the failover time get nothing new (their replicas are being
        // replaced elsewhere).
        let nodes = if self.suspect.is_empty() {
            self.nodes.clone()
        } else {
            let mut v: Vec<Node> = (*self.nodes).clone();
            for &i in &self.suspect {
                v[i as usize].state = NodeState::Down;
            }
            Arc::new(v)
        };
        assert_eq!(nodes.len(), m.usage.len(), "usage for every node");
        let snap = Snapshot {
            nodes: nodes.as_slice(),
            usage: &m.usage,
            pending,
            running: &m.running,
            suspended: &m.suspended,
            config: &self.cluster,
            fairshare: &self.fairshare,
            carry: &self.carry,
            history: &self.history,
            reservations: &self.reservations,
        };
        // The controller's cached definitions are a new list whenever a node changed.
        let same = m.last_nodes.as_ref().is_some_and(|n| Arc::ptr_eq(n, &self.nodes));
        let mut plan = sched::schedule_reusing(&snap, self.now, 0, &self.config, &mut m.reuse, same);
        m.last_nodes = Some(self.nodes.clone());
        // Only the reasons that changed go to the controller.
        plan.waiting.retain(|w| m.reasons.insert(w.job.0, (w.reason, w.expected_start)) != Some((w.reason, w.expected_start)));
        self.plan = Some(plan);
    }

    /// The plan, once run (`None`: nothing was pending).
    pub fn plan(&self) -> Option<&Plan> {
        self.plan.as_ref()
    }
}

impl Mirror {
    /// Applies what changed: usage of the listed nodes, and the listed jobs (id order) replaced,
    /// added or removed.
    fn sync(&mut self, n_nodes: usize, usage: Vec<(u32, NodeUsage)>, jobs: Vec<(u64, Entry)>) {
        self.usage.resize(n_nodes, NodeUsage::default());
        for (i, u) in usage {
            self.usage[i as usize] = u;
        }
        if jobs.is_empty() {
            return;
        }
        let changed: Vec<u64> = jobs.iter().map(|(id, _)| *id).collect();
        for id in &changed {
            self.reasons.remove(id);
        }
        let (mut pend, mut run, mut sus) = (Vec::new(), Vec::new(), Vec::new());
        for (_, e) in jobs {
            match e {
                Entry::Pending(p) => pend.push(p),
                Entry::Running(r) => run.push(r),
                Entry::Suspended(r) => sus.push(r),
                Entry::Gone => {}
            }
        }
        self.pending = merge(std::mem::take(&mut self.pending), &changed, pend, |p| p.req.id.0);
        self.running = merge(std::mem::take(&mut self.running), &changed, run, |r| r.req.id.0);
        if !sus.is_empty() || !self.suspended.is_empty() {
            self.suspended = merge(std::mem::take(&mut self.suspended), &changed, sus, |r| r.req.id.0);
        }
    }
}

/// `old` without the entries whose key is in `changed`, plus `new`; all three sorted by key.
fn merge<T>(old: Vec<T>, changed: &[u64], new: Vec<T>, key: impl Fn(&T) -> u64) -> Vec<T> {
    let mut out = Vec::with_capacity(old.len() + new.len());
    let mut new = new.into_iter().peekable();
    let mut c = 0;
    for x in old {
        let k = key(&x);
        while let Some(n) = new.next_if(|n| key(n) < k) {
            out.push(n);
        }
        while c < changed.len() && changed[c] < k {
            c += 1;
        }
        if c < changed.len() && changed[c] == k {
            continue;
        }
        out.push(x);
    }
    out.extend(new);
    out
}

impl Controller {
    /// The scheduler's view of one job now.
    fn entry(&self, j: &Job, now: Time) -> Entry {
        match j.state {
            // A held job waits for its release, whatever the cluster: the scheduler would only
            // say so (its reason is set when it is held), so the pass does not carry it.
            JobState::Pending if j.req.held => Entry::Gone,
            JobState::Pending => Entry::Pending(Pending { req: j.req.clone(), seq: j.req.id.0, dep: DepStatus::Satisfied }),
            // Its time limit ends later by the time it spent suspended.
            JobState::Running | JobState::Suspended => {
                let r = Running {
                    req: j.req.clone(),
                    start: j.start.unwrap_or(now).saturating_add(j.suspended_secs),
                    allocs: j
                        .allocs
                        .iter()
                        .filter_map(|(n, a)| self.node_index.get(n).map(|&i| sched::Alloc { node: i as u32, ..a.clone() }))
                        .collect(),
                };
                if j.state == JobState::Suspended { Entry::Suspended(r) } else { Entry::Running(r) }
            }
            _ => Entry::Gone,
        }
    }

    /// Whether a pending job's admission depends on other jobs (see [`Mirror::special`]).
    fn is_special(j: &Job) -> bool {
        !j.req.dependencies.is_empty() || j.array.is_some_and(|a| a.max_running.is_some())
    }

    /// The mirror built from scratch: every pending and running job, every node's usage.
    fn full_mirror(&self, now: Time) -> Mirror {
        let mut m = Mirror { usage: self.nodes.iter().map(|n| n.usage.clone()).collect(), ..Mirror::default() };
        for j in self.active() {
            match self.entry(j, now) {
                Entry::Pending(mut p) => {
                    if Self::is_special(j) {
                        m.special.insert(j.req.id.0);
                        p.dep = self.dep_status(j);
                    }
                    m.pending.push(p);
                }
                Entry::Running(r) => m.running.push(r),
                Entry::Suspended(r) => m.suspended.push(r),
                Entry::Gone => {}
            }
        }
        m
    }

    /// Marks a node's usage or definition changed, for the scheduler's mirror.
    pub(crate) fn touch_node(&mut self, i: usize) {
        self.touched_nodes.insert(i as u32);
    }

    /// Step 1 of a tick: leases, preemption grace, time limits, purge; then the scheduler's
    /// inputs as changes since the last pass. Panics if a pass is already out.
    pub fn begin_tick(&mut self, now: Time) -> Pass {
        assert!(self.mirror.is_some() || !self.pass_out, "one scheduling pass at a time");
        let mut info = TickInfo::default();
        self.expire_leases(now, &mut info);
        self.reboots(now);
        self.enforce_limits(now, &mut info);
        self.purge(now);
        self.expire_kube_jobs(now);
        self.drop_terminated_namespaces();
        self.decay_usage(now);
        self.expire_reservations(now);
        // Before the scheduler sees free CPUs: jobs preempted by suspension take theirs back.
        self.resume_preempted(now);
        let (mirror, jobs, usage) = match self.mirror.take() {
            None => {
                self.dirty_jobs.sched.clear();
                self.touched_nodes.clear();
                (Box::new(self.full_mirror(now)), Vec::new(), Vec::new())
            }
            Some(mut m) => {
                let ids = std::mem::take(&mut self.dirty_jobs.sched);
                let mut jobs = Vec::with_capacity(ids.len());
                for id in ids {
                    let e = match self.jobs.get(&id) {
                        Some(j) => {
                            let e = self.entry(j, now);
                            if matches!(e, Entry::Pending(_)) && Self::is_special(j) {
                                m.special.insert(id);
                            } else {
                                m.special.remove(&id);
                            }
                            e
                        }
                        None => {
                            m.special.remove(&id);
                            Entry::Gone
                        }
                    };
                    jobs.push((id, e));
                }
                let usage = std::mem::take(&mut self.touched_nodes)
                    .into_iter()
                    .filter_map(|i| self.nodes.get(i as usize).map(|n| (i, n.usage.clone())))
                    .collect();
                (m, jobs, usage)
            }
        };
        // Admission that depends on other jobs: each pass, for the few pending jobs it concerns.
        let (mut deps, mut capped) = (Vec::new(), Vec::new());
        let throttled = mirror.special.iter().any(|id| self.jobs.get(id).is_some_and(|j| j.array.is_some_and(|a| a.max_running.is_some())));
        let mut array_running: HashMap<u64, u32> = HashMap::new();
        if throttled {
            for j in self.active().filter(|j| j.state.on_nodes()) {
                if let Some(a) = j.array {
                    *array_running.entry(a.array_job).or_default() += 1;
                }
            }
        }
        for &id in &mirror.special {
            let Some(j) = self.jobs.get(&id) else { continue };
            deps.push((id, self.dep_status(j)));
            if let Some(a) = j.array
                && let Some(m) = a.max_running
            {
                // The array's budget of starts: tasks beyond it wait with their reason.
                let used = array_running.entry(a.array_job).or_default();
                if *used >= m {
                    capped.push(id);
                    continue;
                }
                *used += 1;
            }
        }
        let suspect = self.suspect_up();
        self.pass_out = true;
        Pass {
            now,
            info,
            mirror,
            n_nodes: self.nodes.len(),
            usage,
            jobs,
            nodes: self.defs(),
            suspect,
            deps,
            capped,
            cluster: self.settings.cluster.clone(),
            config: self.settings.sched.clone(),
            fairshare: self.fairshare.clone(),
            history: if self.settings.sched.predicting() { self.history.clone() } else { sched::History::default() },
            carry: self.carry.clone(),
            reservations: self.reservation_list(),
            resv_gen: self.resv_gen,
            ran: false,
            plan: None,
            head_done: false,
            applied: 0,
            spent: false,
        }
    }

    /// Step 3 of a tick: applies the pass's plan, except what changed since
    /// [`Controller::begin_tick`] (see the module doc), and takes its mirror back.
    pub fn finish_tick(&mut self, mut pass: Pass) -> TickInfo {
        loop {
            if let Some(info) = self.finish_some(&mut pass, usize::MAX) {
                return info;
            }
        }
    }

    /// Step 3 a piece at a time, so that a daemon need not hold the controller while a large
    /// plan is applied: the first call applies the reasons, rejections and preemptions, and
    /// each call up to `max_starts` starts. Each piece checks the plan against the controller
    /// as it is then. Returns the tick's counts once the whole plan is applied (the mirror is
    /// then back in the controller and the pass is spent).
    pub fn finish_some(&mut self, pass: &mut Pass, max_starts: usize) -> Option<TickInfo> {
        assert!(pass.ran, "Pass::run before finish_tick");
        assert!(!pass.spent, "a pass is finished once");
        let now = pass.now;
        if !pass.head_done {
            pass.head_done = true;
            #[cfg(debug_assertions)]
            if self.dirty_jobs.sched.is_empty() && self.touched_nodes.is_empty() {
                let full = self.full_mirror(now);
                assert_eq!(full.usage, pass.mirror.usage, "the mirror's usage is the controller's");
                assert_eq!(full.pending, pass.mirror.pending, "the mirror's pending jobs are the controller's");
                assert_eq!(full.running, pass.mirror.running, "the mirror's running jobs are the controller's");
                assert_eq!(full.special, pass.mirror.special);
            }
            match &mut pass.plan {
                None => self.carry = Carry::default(),
                Some(plan) => {
                    let rejected = self.apply_head(now, &pass.capped, plan);
                    pass.info.pending = pass.mirror.pending.len().saturating_sub(rejected);
                }
            }
        }
        if let Some(plan) = &mut pass.plan {
            let end = pass.applied.saturating_add(max_starts).min(plan.starts.len());
            // A reservation made or changed while the pass ran: its starts wait for the next.
            let stale = pass.resv_gen != self.resv_gen;
            for k in pass.applied..end {
                if stale {
                    break;
                }
                let s = &mut plan.starts[k];
                // Only jobs untouched since the pass began (this apply touches no job it starts
                // before starting it), on nodes that are still up and have room.
                if !self.plannable(s.job.0) || !self.start_fits(&s.allocs) {
                    continue; // the next pass decides again
                }
                if let (Some(limit), Some(j)) = (s.time_limit, self.jobs.get_mut(&s.job.0)) {
                    j.req.time_limit = limit; // backfill cut it down towards --time-min
                }
                let het = std::mem::take(&mut s.het);
                self.start_job(now, s.job.0, std::mem::take(&mut s.allocs), het);
                pass.info.started += 1;
                pass.info.pending = pass.info.pending.saturating_sub(1);
            }
            pass.applied = end;
            if end < plan.starts.len() {
                return None;
            }
        }
        pass.spent = true;
        self.mirror = Some(std::mem::take(&mut pass.mirror));
        self.pass_out = false;
        pass.info.more = self.refill();
        self.advance_active();
        Some(pass.info)
    }

    /// Whether `id` is a pending job the plan may still act on: untouched since the pass began
    /// (the apply itself touches each job of the plan once, as it acts on it).
    fn plannable(&self, id: u64) -> bool {
        !self.dirty_jobs.sched.contains(&id) && self.jobs.get(&id).is_some_and(|j| j.state == JobState::Pending)
    }

    /// Whether every allocation of a start still fits: its nodes up, not silent, with room.
    fn start_fits(&self, allocs: &[sched::Alloc]) -> bool {
        allocs.iter().all(|a| {
            self.nodes.get(a.node as usize).is_some_and(|n| n.node.state == NodeState::Up && !self.suspect(n) && n.usage.fits(&n.node, a))
        })
    }

    /// Everything of a plan but its starts. Returns the number of jobs failed as impossible.
    fn apply_head(&mut self, now: Time, capped: &[u64], plan: &Plan) -> usize {
        self.carry = plan.carry.clone();
        for &id in capped {
            if self.plannable(id) {
                self.set_reason(id, PendingReason::JobArrayTaskLimit, None);
            }
        }
        for w in &plan.waiting {
            if self.plannable(w.job.0) {
                self.set_reason(w.job.0, w.reason, w.expected_start);
            }
        }
        let mut failed = 0;
        for r in &plan.rejected {
            if !self.plannable(r.job.0) {
                continue;
            }
            if let Some(j) = self.jobs.get_mut(&r.job.0) {
                j.state = JobState::Failed;
                j.reason = r.reason;
                j.message = Some(r.message.clone());
                j.end = Some(now);
                self.dirty_jobs.insert(r.job.0);
                failed += 1;
            }
        }
        for p in &plan.preemptions {
            // Only victims still running as the pass saw them.
            let current = p.victims.iter().all(|v| {
                !self.dirty_jobs.sched.contains(&v.job.0) && self.jobs.get(&v.job.0).is_some_and(|j| j.state == JobState::Running)
            });
            if !current {
                continue;
            }
            // Voluntary disruption respects a service's min_available: a preemption that would
            // take a service below it does not happen (the requester keeps waiting).
            if !self.disruption_allowed(p.victims.iter().map(|v| v.job.0)) {
                continue;
            }
            for v in &p.victims {
                let Some(j) = self.jobs.get_mut(&v.job.0) else { continue };
                if v.suspend && j.replica.is_none() && j.state == JobState::Running && j.preempt_at.is_none() {
                    if j.cancelling || j.requeueing || j.completed.is_some() || j.timeout_at.is_some() || j.kill_at.is_some() {
                        continue; // ending already: its CPUs come back with its end
                    }
                    // Frozen at once; its CPUs are free for the preemptor's start.
                    self.freeze(now, v.job.0, Some(p.for_job.0));
                    continue;
                }
                if j.preempt_at.is_none() && j.state == JobState::Running {
                    j.preempt_at = Some(now + v.grace);
                    j.preempted_by = Some(p.for_job.0);
                    self.limits_due = self.limits_due.min(now + v.grace);
                    if j.replica.is_some() {
                        // A preempted replica drains first: out of the endpoint set, in-flight
                        // requests finish, then it stops (at the latest when its grace ends).
                        self.dirty_jobs.insert(v.job.0);
                        self.drain_replica(v.job.0, self.now_ms);
                        continue;
                    }
                    let sig = j.spec.signal.map_or(15, |s| s.0);
                    let (epoch, nodes) = (j.epoch, j.allocs.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>());
                    self.dirty_jobs.insert(v.job.0);
                    for n in nodes {
                        self.order(&n, Order::Signal { job: v.job.0, epoch, signal: sig, batch_only: false, step: None });
                    }
                }
            }
        }
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::merge;

    #[test]
    fn merge_replaces_removes_and_adds_in_order() {
        let old = vec![1, 3, 5, 7, 9];
        // 3 replaced, 5 removed, 4 and 10 added.
        let out = merge(old, &[3, 4, 5, 10], vec![3, 4, 10], |x| *x);
        assert_eq!(out, vec![1, 3, 4, 7, 9, 10]);
        assert_eq!(merge(Vec::new(), &[2], vec![2], |x| *x), vec![2]);
        assert_eq!(merge(vec![2], &[2], Vec::new(), |x| *x), Vec::<u64>::new());
    }
}
