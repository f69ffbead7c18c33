//! Preemption planning: to start a request of a higher QOS preemption tier, choose lower-tier
//! running jobs to evict so that the least work is lost.
//!
//! Tiers decide (as Slurm's preempt/qos): only jobs of a strictly lower tier are candidates, never
//! by the age-growing multifactor priority. Work lost is counted as resource-seconds already run
//! (elapsed × (CPUs + 1000 × GPUs) over all the victim's nodes); the plan says whom to signal and
//! with what grace time (the victim QOS's grace time). A batch job whose QOS preempts by
//! suspension (`PreemptMode::Suspend`) gives back only its CPUs: it keeps its memory, GPUs and
//! other resources while it is frozen.

use model::{JobId, JobRequest, Time};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};

use crate::view::View;
use crate::{Facts, Resolved, Snapshot, try_place};

/// A job to evict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Victim {
    /// The running job.
    pub job: JobId,
    /// Seconds between its checkpoint signal and the kill.
    pub grace: Time,
    /// Suspended (at once, no grace) rather than requeued: only its CPUs make room.
    #[serde(default)]
    pub suspend: bool,
}

/// Evictions that make room for one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preemption {
    /// The request that needs the room.
    pub for_job: JobId,
    /// Whom to signal.
    pub victims: Vec<Victim>,
    /// Work lost, resource-seconds.
    pub cost: f64,
}

fn tier(snap: &Snapshot, req: &JobRequest) -> u32 {
    snap.config.qos(req.qos.as_deref()).map_or(0, |q| q.preempt_tier)
}

/// Whether preempting `req` suspends it: a batch job of a QOS that asks for it.
fn suspends(snap: &Snapshot, req: &JobRequest) -> bool {
    req.kind == model::RequestKind::Batch
        && snap.config.qos(req.qos.as_deref()).is_some_and(|q| q.preempt_mode == model::PreemptMode::Suspend)
}

/// Makes room on `view` as preempting `run` would: all it holds, or only its CPUs when it is
/// suspended; `back` undoes it.
fn give(view: &mut View, a: &crate::Alloc, suspend: bool, back: bool) {
    match (suspend, back) {
        (false, false) => view.give(a),
        (false, true) => view.hold(a),
        (true, false) => view.give_cpus(a),
        (true, true) => view.hold_cpus(a),
    }
}

/// Plans evictions for `req` against the snapshot, excluding jobs already chosen as victims.
/// `None` when no lower-tier work could make room (or none is needed).
pub fn plan_preemption(snap: &Snapshot, req: &JobRequest, now: Time, excluded: &FxHashSet<JobId>) -> Option<Preemption> {
    let my_tier = tier(snap, req);
    if my_tier == 0 || !snap.running.iter().any(|r| tier(snap, &r.req) < my_tier) {
        return None;
    }
    let facts = Facts::new(snap.nodes, snap.config, !req.nodelist.is_empty() || !req.exclude.is_empty());
    let r = facts.resolve(0, req, snap.config).ok()?;
    let mut view = View::new(snap.nodes, std::sync::Arc::new(crate::view::Topology::new(snap.nodes)), snap.usage);
    preempt_for(snap, &mut view, &r, now, my_tier, excluded)
}

pub(crate) fn preempt_for(
    snap: &Snapshot,
    view: &mut View,
    r: &Resolved,
    now: Time,
    my_tier: u32,
    excluded: &FxHashSet<JobId>,
) -> Option<Preemption> {
    if my_tier == 0 {
        return None;
    }
    // Candidate victims per node, with their cost.
    let mut on_node: FxHashMap<u32, Vec<(f64, usize)>> = FxHashMap::default();
    for (k, run) in snap.running.iter().enumerate() {
        if tier(snap, &run.req) >= my_tier || excluded.contains(&run.req.id) {
            continue;
        }
        let size: f64 = run.allocs.iter().map(|a| a.cpus as f64 + 1000.0 * a.gpus.len() as f64).sum();
        let cost = (now - run.start).max(0) as f64 * size;
        for a in &run.allocs {
            on_node.entry(a.node).or_default().push((cost, k));
        }
    }
    let mut nodes: Vec<u32> = on_node.keys().copied().collect();
    nodes.sort_unstable();
    // Cheapest eviction set per node that makes the node fit the per-node demand.
    let mut options: Vec<(f64, u32, Vec<usize>)> = Vec::new();
    for n in nodes {
        if !r.filter.ok(n, &snap.nodes[n as usize]) || !snap.nodes[n as usize].state.schedulable() {
            continue;
        }
        if view.fits(n, &r.demand) {
            options.push((0.0, n, Vec::new()));
            continue;
        }
        let mut victims = on_node[&n].clone();
        victims.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut given = Vec::new();
        let mut cost = 0.0;
        let mut ok = false;
        for (c, k) in victims {
            let sus = suspends(snap, &snap.running[k].req);
            for a in snap.running[k].allocs.iter().filter(|a| a.node == n) {
                give(view, a, sus, false);
            }
            given.push(k);
            cost += c;
            if view.fits(n, &r.demand) {
                ok = true;
                break;
            }
        }
        for &k in &given {
            let sus = suspends(snap, &snap.running[k].req);
            for a in snap.running[k].allocs.iter().filter(|a| a.node == n) {
                give(view, a, sus, true);
            }
        }
        if ok {
            options.push((cost, n, given));
        }
    }
    options.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    // Also count nodes that fit without eviction and have no candidates at all.
    let free_now = (0..view.len() as u32)
        .filter(|&n| !on_node.contains_key(&n) && r.filter.ok(n, &snap.nodes[n as usize]) && view.fits(n, &r.demand))
        .take(r.nodes as usize)
        .count();
    let need = (r.nodes as usize).saturating_sub(free_now);
    if need == 0 || options.len() < need {
        return None;
    }
    let mut chosen: Vec<usize> = options.iter().take(need).flat_map(|o| o.2.iter().copied()).collect();
    chosen.sort_unstable();
    chosen.dedup();
    if chosen.is_empty() {
        return None;
    }
    // Check the whole gang really fits once the victims are gone.
    let mut trial = view.clone();
    for &k in &chosen {
        let sus = suspends(snap, &snap.running[k].req);
        for a in &snap.running[k].allocs {
            give(&mut trial, a, sus, false);
        }
    }
    let mut none = crate::Placer::tight();
    try_place(snap, &mut trial, r, &mut none)?;
    let cost = chosen
        .iter()
        .map(|&k| {
            let run = &snap.running[k];
            let size: f64 = run.allocs.iter().map(|a| a.cpus as f64 + 1000.0 * a.gpus.len() as f64).sum();
            (now - run.start).max(0) as f64 * size
        })
        .sum();
    let victims = chosen
        .into_iter()
        .map(|k| {
            let run = &snap.running[k];
            let suspend = suspends(snap, &run.req);
            let grace = if suspend { 0 } else { snap.config.qos(run.req.qos.as_deref()).map_or(0, |q| q.grace_time) };
            Victim { job: run.req.id, grace, suspend }
        })
        .collect();
    Some(Preemption { for_job: r.req.id, victims, cost })
}
