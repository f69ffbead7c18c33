//! Suspend and resume (Slurm's `scontrol suspend|resume`, and preemption by suspension): a
//! suspended job's processes are frozen through its cgroup on every node of its allocation
//! ([`Order::Suspend`]); it keeps its memory, GPUs and other resources and lends its CPUs,
//! which the scheduler may give to other jobs; its time limit does not run meanwhile. It
//! resumes when an operator says so and its CPUs are free, or, when it was suspended for a
//! higher-tier job, as soon as that job has started and the CPUs are free again.

use crate::{Controller, Order, Refused};
use model::{JobEvent, JobState, Time};
use serde::{Deserialize, Serialize};

/// Why and since when a job is suspended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suspension {
    /// When it was suspended.
    pub since: Time,
    /// Preempted by suspension for this job: it resumes by itself once that job is no longer
    /// pending and its CPUs are free. `None`: suspended by an operator, resumed by one.
    pub for_job: Option<u64>,
}

impl Controller {
    /// `scontrol suspend JOB` by `uid`: operators and administrators only, as Slurm's.
    pub fn suspend(&mut self, now: Time, uid: u32, id: u64) -> Result<(), Refused> {
        let j = self.operators_job(uid, id)?;
        match j.state {
            JobState::Running => {}
            JobState::Pending => return Err(Refused::Conflict("Job is pending execution".into())),
            JobState::Suspended => return Err(Refused::Conflict("Job is current suspended, requested operation disabled".into())),
            s if s.is_final() => return Err(Refused::Conflict("Job/step already completing or completed".into())),
            _ => return Err(Refused::Conflict("Job is not running".into())),
        }
        if j.replica.is_some() {
            return Err(Refused::Conflict(format!(
                "job {id} is a replica of service {}: services are scaled, not suspended",
                j.replica.as_ref().map_or("", |r| r.service.as_str())
            )));
        }
        if j.cancelling || j.requeueing || j.preempt_at.is_some() || j.completed.is_some() || j.timeout_at.is_some() || j.kill_at.is_some()
        {
            return Err(Refused::Conflict("Job/step already completing or completed".into()));
        }
        self.freeze(now, id, None);
        Ok(())
    }

    /// `scontrol resume JOB` by `uid`: operators and administrators only. Refused while
    /// another job uses the CPUs the suspended one lent (it may be asked again later).
    pub fn resume(&mut self, now: Time, uid: u32, id: u64) -> Result<(), Refused> {
        let j = self.operators_job(uid, id)?;
        match j.state {
            JobState::Suspended => {}
            JobState::Pending => return Err(Refused::Conflict("Job is pending execution".into())),
            s if s.is_final() => return Err(Refused::Conflict("Job/step already completing or completed".into())),
            _ => return Err(Refused::Conflict("Job is not suspended".into())),
        }
        if let Some(node) = self.busy_node(id) {
            let users: Vec<String> = self
                .active()
                .filter(|o| o.state == JobState::Running && o.allocs.iter().any(|(n, _)| *n == node))
                .map(|o| o.req.id.0.to_string())
                .collect();
            return Err(Refused::Busy(format!(
                "Requested nodes are busy: job {id}'s CPUs on {node} are in use (job {}); it can resume once they are free",
                users.join(",")
            )));
        }
        self.thaw(now, id);
        Ok(())
    }

    /// The job `uid` asks to suspend or resume, if it exists and `uid` may (Slurm's words).
    fn operators_job(&mut self, uid: u32, id: u64) -> Result<&crate::Job, Refused> {
        self.ensure_owned(uid, id)?;
        if !self.jobs.contains_key(&id) {
            return Err(Refused::NotFound("Invalid job id specified".into()));
        }
        if !self.is_operator(uid) {
            return Err(Refused::Forbidden("Access/permission denied".into()));
        }
        Ok(&self.jobs[&id])
    }

    /// The first node of a suspended job's allocation whose CPUs are not free for it.
    fn busy_node(&self, id: u64) -> Option<String> {
        let j = self.jobs.get(&id)?;
        j.allocs.iter().find_map(|(name, a)| {
            let rec = self.node_index.get(name).map(|&i| &self.nodes[i])?;
            (!rec.usage.can_resume(&rec.node, a)).then(|| name.clone())
        })
    }

    /// Suspends a running job: frozen on its nodes, its CPUs lent, its clock stopped.
    pub(crate) fn freeze(&mut self, now: Time, id: u64, for_job: Option<u64>) {
        let Some(j) = self.jobs.get_mut(&id) else { return };
        let Ok(next) = j.state.step(JobEvent::Suspend) else { return };
        j.state = next;
        j.suspension = Some(Suspension { since: now, for_job });
        let (epoch, allocs) = (j.epoch, j.allocs.clone());
        self.suspended.insert(id);
        self.dirty_jobs.insert(id);
        for (name, a) in &allocs {
            if let Some(&i) = self.node_index.get(name) {
                self.nodes[i].usage.suspend(a);
                self.nodes[i].push(Order::Suspend { job: id, epoch });
                self.touch_node(i);
            }
        }
    }

    /// Resumes a suspended job whose CPUs are free: thawed, its CPUs taken back, its time
    /// limit moved on by the time it was suspended.
    fn thaw(&mut self, now: Time, id: u64) {
        let Some(j) = self.jobs.get_mut(&id) else { return };
        let Ok(next) = j.state.step(JobEvent::Resume) else { return };
        j.state = next;
        if let Some(s) = j.suspension.take() {
            j.suspended_secs += (now - s.since).max(0);
        }
        let (epoch, allocs) = (j.epoch, j.allocs.clone());
        self.suspended.remove(&id);
        self.dirty_jobs.insert(id);
        for (name, a) in &allocs {
            if let Some(&i) = self.node_index.get(name) {
                let node = self.nodes[i].node.clone();
                self.nodes[i].usage.resume(&node, a);
                self.nodes[i].push(Order::Resume { job: id, epoch });
                self.touch_node(i);
            }
        }
        // Its time limit (and `--signal` time) moved: the next scan finds when it is due.
        self.limits_due = self.limits_due.min(now);
    }

    /// A suspended job's run ends (it exited, was cancelled, requeued or lost its node): its
    /// suspended time is counted, and it no longer lends its CPUs (they were released when it
    /// was suspended: `release` must not take them again).
    pub(crate) fn end_suspension(&mut self, id: u64, at: Time) {
        let Some(j) = self.jobs.get_mut(&id) else { return };
        if let Some(s) = j.suspension.take() {
            j.suspended_secs += (at - s.since).max(0);
        }
        self.suspended.remove(&id);
    }

    /// Resumes every job preempted by suspension whose preemptor has started (or is gone, or
    /// was held: it would keep its victims frozen for as long) and whose CPUs are free again,
    /// oldest suspension first.
    pub(crate) fn resume_preempted(&mut self, now: Time) {
        if self.suspended.is_empty() {
            return;
        }
        let mut ready: Vec<(Time, u64)> = Vec::new();
        for &id in &self.suspended {
            let Some(j) = self.jobs.get(&id) else { continue };
            let Some(Suspension { since, for_job: Some(p) }) = j.suspension else { continue };
            let waiting = self.jobs.get(&p).is_some_and(|pj| pj.state == JobState::Pending && !pj.req.held);
            if !waiting {
                ready.push((since, id));
            }
        }
        ready.sort_unstable();
        for (_, id) in ready {
            if self.busy_node(id).is_none() {
                self.thaw(now, id);
            }
        }
    }

    /// What the agent of node `i` reports frozen, against what should be: a suspended job's
    /// run it does not report is ordered frozen again, a running one it reports is ordered
    /// thawed (an order lost with a restarted controller or agent), unless such an order is
    /// still on its way.
    pub fn reconcile_frozen(&mut self, node: &str, frozen: &[(u64, u32)]) {
        let Some(&i) = self.node_index.get(node) else { return };
        let mut orders = Vec::new();
        for &id in &self.nodes[i].runs {
            let Some(j) = self.jobs.get(&id) else { continue };
            if j.cancelling || j.requeueing || j.kill_at.is_some() {
                continue; // being killed: its agent thaws it for its signals
            }
            let is_frozen = frozen.contains(&(id, j.epoch));
            let want = match j.state {
                JobState::Suspended if !is_frozen => Order::Suspend { job: id, epoch: j.epoch },
                JobState::Running if is_frozen => Order::Resume { job: id, epoch: j.epoch },
                _ => continue,
            };
            let queued =
                self.nodes[i].orders.iter().any(|(_, o)| matches!(o, Order::Suspend { job, .. } | Order::Resume { job, .. } if *job == id));
            if !queued {
                orders.push(want);
            }
        }
        for o in orders {
            self.nodes[i].push(o);
        }
    }
}
