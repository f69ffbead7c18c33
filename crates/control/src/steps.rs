//! Step allocation inside a job, as Slurm's `srun` in an allocation: which of the job's nodes a
//! step's tasks go to and what each holds of the job's CPUs, memory and GPUs there, so that
//! parallel steps share the allocation as Slurm's do. By default a step takes every free CPU
//! of the job on its nodes (so a second parallel step waits: "Requested nodes are busy");
//! `--exact`/`--exclusive` and `-c` take only `tasks x cpus-per-task`; `--overlap` holds
//! nothing and waits for nothing; `--mem` and `--gpus*` hold memory and distinct GPUs.

use crate::Refused;
use crate::types::{StepHold, StepRes};
use model::{GpuPer, MemRequest};

/// One node of the job as a step sees it: what the job holds there and what its other running
/// steps hold of that.
#[derive(Debug, Clone)]
pub(crate) struct Room<'a> {
    /// The node's name.
    pub name: &'a str,
    /// CPUs the job holds on it.
    pub cpus: u32,
    /// Memory the job may use on it, bytes (the node's when the job asked for none).
    pub memory: u64,
    /// The job's GPU indices on it.
    pub gpus: &'a [u8],
    /// The node's GPU model.
    pub gpu_type: Option<&'a str>,
    /// Held by the job's other running steps (summed; GPUs listed).
    pub used: StepHold,
}

/// What one node gives a step: the room's index, tasks there, and what it holds.
pub(crate) type Placed = (usize, u32, StepHold);

/// Places a step of `total` tasks on `n_nodes` of `rooms` (in their order), `per_node` tasks
/// on each but the last. `Invalid` when it could never fit in the job's allocation (with
/// Slurm's words), `Busy` when it fits once other steps end.
pub(crate) fn place(rooms: &[Room], n_nodes: u32, per_node: u32, total: u32, res: &StepRes) -> Result<Vec<Placed>, Refused> {
    let mut out: Vec<Placed> = Vec::new();
    let mut rank = 0u32;
    let mut never: Option<String> = None;
    for (i, room) in rooms.iter().enumerate() {
        if out.len() as u32 == n_nodes || rank >= total {
            break;
        }
        let k = per_node.min(total - rank);
        let at = out.len() as u32;
        match need(room, k, at, n_nodes, res) {
            Err(why) => {
                never.get_or_insert(why);
            }
            Ok(n) => {
                if let Some(h) = take(room, &n, res) {
                    out.push((i, k, h));
                    rank += k;
                }
            }
        }
    }
    if out.len() as u32 == n_nodes || (rank >= total && !out.is_empty()) {
        return Ok(out);
    }
    // Could it ever fit? Count the nodes on which the full per-node share is possible at all.
    let could = rooms.iter().filter(|r| need(r, per_node.min(total), 0, n_nodes, res).is_ok()).count() as u32;
    if could >= n_nodes.min(total).max(1) {
        Err(Refused::Busy("Requested nodes are busy".into()))
    } else {
        Err(Refused::Invalid(never.unwrap_or_else(|| format!("Requested node configuration is not available ({n_nodes} nodes)"))))
    }
}

/// What `k` tasks need on a room, the `at`-th of the step's `n_nodes` nodes.
struct Need {
    cpus: u32,
    memory: u64,
    gpus: usize,
}

fn need(room: &Room, k: u32, at: u32, n_nodes: u32, res: &StepRes) -> Result<Need, String> {
    let cpt = res.cpus_per_task.unwrap_or(1).max(1);
    let mut cpus = k.saturating_mul(cpt);
    if cpus > room.cpus {
        if !res.overcommit {
            return Err(format!(
                "More processors requested than permitted ({k} tasks x {cpt} CPUs on {}, which has {} of the job's)",
                room.name, room.cpus
            ));
        }
        cpus = room.cpus;
    }
    let memory = match res.mem {
        None | Some(MemRequest::PerNode(0)) => 0,
        Some(MemRequest::PerNode(b)) => b,
        Some(MemRequest::PerCpu(b)) => b.saturating_mul(cpus.max(1) as u64),
    };
    if memory > room.memory {
        return Err(format!(
            "Memory required by task is not available ({} MiB on {}, where the job has {} MiB)",
            memory >> 20,
            room.name,
            room.memory >> 20
        ));
    }
    let gpus = match &res.gpus {
        None => 0,
        Some((per, ty)) => {
            if let Some(t) = ty
                && !room.gpu_type.is_some_and(|g| g.eq_ignore_ascii_case(t))
            {
                return Err(format!("Invalid generic resource (gres) specification: the job has no {t} GPUs on {}", room.name));
            }
            let n = match *per {
                GpuPer::Node(n) => n,
                GpuPer::Task(n) => n.saturating_mul(k),
                GpuPer::Job(n) => n / n_nodes.max(1) + u32::from(at < n % n_nodes.max(1)),
            };
            if n as usize > room.gpus.len() {
                return Err(format!(
                    "Invalid generic resource (gres) specification: {n} GPUs on {}, where the job has {}",
                    room.name,
                    room.gpus.len()
                ));
            }
            n as usize
        }
    };
    Ok(Need { cpus, memory, gpus })
}

/// What the step holds on a room if `n` fits in what is free now (`--overlap`: nothing, and it
/// always fits).
fn take(room: &Room, n: &Need, res: &StepRes) -> Option<StepHold> {
    if res.overlap {
        return Some(StepHold::default());
    }
    let free_cpus = room.cpus.saturating_sub(room.used.cpus);
    let exact = (res.exact || res.cpus_per_task.is_some()) && !res.whole;
    if free_cpus < n.cpus.max(1) {
        return None;
    }
    if room.memory.saturating_sub(room.used.memory) < n.memory {
        return None;
    }
    let free_gpus: Vec<u8> = room.gpus.iter().copied().filter(|g| !room.used.gpus.contains(g)).collect();
    if free_gpus.len() < n.gpus {
        return None;
    }
    Some(StepHold { cpus: if exact { n.cpus } else { free_cpus }, memory: n.memory, gpus: free_gpus[..n.gpus].to_vec() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn room<'a>(name: &'a str, cpus: u32, gpus: &'a [u8]) -> Room<'a> {
        Room { name, cpus, memory: 8 << 30, gpus, gpu_type: Some("h100"), used: StepHold::default() }
    }

    fn exact() -> StepRes {
        StepRes { exact: true, ..StepRes::default() }
    }

    #[test]
    fn a_default_step_takes_every_free_cpu_and_a_second_waits() {
        let rooms = [room("n1", 4, &[])];
        let p = place(&rooms, 1, 1, 1, &StepRes::default()).unwrap();
        assert_eq!(p, vec![(0, 1, StepHold { cpus: 4, memory: 0, gpus: vec![] })]);
        let mut busy = rooms.clone();
        busy[0].used.cpus = 4;
        assert_eq!(place(&busy, 1, 1, 1, &StepRes::default()), Err(Refused::Busy("Requested nodes are busy".into())));
        // --overlap shares; it holds nothing.
        let o = StepRes { overlap: true, ..StepRes::default() };
        assert_eq!(place(&busy, 1, 1, 1, &o).unwrap(), vec![(0, 1, StepHold::default())]);
    }

    #[test]
    fn exact_steps_share_a_node_and_fill_the_next() {
        let mut rooms = vec![room("n1", 2, &[]), room("n2", 2, &[])];
        let one = place(&rooms, 1, 1, 1, &exact()).unwrap();
        assert_eq!(one, vec![(0, 1, StepHold { cpus: 1, memory: 0, gpus: vec![] })]);
        rooms[0].used.cpus = 2;
        // The first node is full: a one-node step goes to the second.
        assert_eq!(place(&rooms, 1, 1, 1, &exact()).unwrap()[0].0, 1);
        // -c takes tasks x cpus, and implies --exact; --whole takes every free CPU anyway.
        rooms[0].used.cpus = 0;
        let c = StepRes { cpus_per_task: Some(2), ..StepRes::default() };
        assert_eq!(place(&rooms, 2, 1, 2, &c).unwrap().iter().map(|p| p.2.cpus).collect::<Vec<_>>(), vec![2, 2]);
        let w = StepRes { cpus_per_task: Some(1), whole: true, ..StepRes::default() };
        assert_eq!(place(&rooms, 1, 1, 1, &w).unwrap()[0].2.cpus, 2);
    }

    #[test]
    fn impossible_requests_say_why_and_busy_ones_wait() {
        let rooms = [room("n1", 2, &[0, 1])];
        let e = place(&rooms, 1, 3, 3, &exact()).unwrap_err();
        assert!(matches!(&e, Refused::Invalid(m) if m.starts_with("More processors requested than permitted")), "{e:?}");
        let oc = StepRes { overcommit: true, ..exact() };
        assert_eq!(place(&rooms, 1, 3, 3, &oc).unwrap()[0].2.cpus, 2);
        let mem = StepRes { mem: Some(MemRequest::PerNode(16 << 30)), ..exact() };
        assert!(matches!(place(&rooms, 1, 1, 1, &mem), Err(Refused::Invalid(m)) if m.starts_with("Memory required by task")));
        let g = StepRes { gpus: Some((GpuPer::Node(3), None)), ..exact() };
        assert!(matches!(place(&rooms, 1, 1, 1, &g), Err(Refused::Invalid(m)) if m.starts_with("Invalid generic resource")));
        let t = StepRes { gpus: Some((GpuPer::Node(1), Some("a100".into()))), ..exact() };
        assert!(matches!(place(&rooms, 1, 1, 1, &t), Err(Refused::Invalid(m)) if m.contains("no a100 GPUs")));
        // Memory held by another step: wait.
        let mut busy = rooms.clone();
        busy[0].used.memory = 7 << 30;
        let m2 = StepRes { mem: Some(MemRequest::PerNode(2 << 30)), ..exact() };
        assert!(matches!(place(&busy, 1, 1, 1, &m2), Err(Refused::Busy(_))));
    }

    #[test]
    fn gpus_are_held_apart() {
        let mut rooms = vec![room("n1", 8, &[0, 1, 2, 3])];
        let two = StepRes { gpus: Some((GpuPer::Node(2), Some("H100".into()))), ..exact() };
        let a = place(&rooms, 1, 1, 1, &two).unwrap();
        assert_eq!(a[0].2.gpus, vec![0, 1]);
        rooms[0].used = a[0].2.clone();
        let b = place(&rooms, 1, 1, 1, &two).unwrap();
        assert_eq!(b[0].2.gpus, vec![2, 3]);
        rooms[0].used.gpus.extend(b[0].2.gpus.clone());
        assert!(matches!(place(&rooms, 1, 1, 1, &two), Err(Refused::Busy(_))));
        // --gpus-per-task: tasks x n on the node; --gpus=N: spread over the step's nodes.
        let rooms = vec![room("n1", 8, &[0, 1, 2, 3]), room("n2", 8, &[0, 1, 2, 3])];
        let pt = StepRes { gpus: Some((GpuPer::Task(1), None)), ..exact() };
        assert_eq!(place(&rooms, 1, 3, 3, &pt).unwrap()[0].2.gpus, vec![0, 1, 2]);
        let job = StepRes { gpus: Some((GpuPer::Job(3), None)), ..exact() };
        let p = place(&rooms, 2, 1, 2, &job).unwrap();
        assert_eq!(p.iter().map(|x| x.2.gpus.len()).collect::<Vec<_>>(), vec![2, 1]);
    }

    #[test]
    fn hostile_sizes_neither_panic_nor_overflow() {
        let rooms = [room("n1", 4, &[0])];
        let big = StepRes {
            cpus_per_task: Some(u32::MAX),
            mem: Some(MemRequest::PerCpu(u64::MAX)),
            gpus: Some((GpuPer::Task(u32::MAX), None)),
            ..StepRes::default()
        };
        assert!(matches!(place(&rooms, 1, u32::MAX, u32::MAX, &big), Err(Refused::Invalid(_))));
        assert!(matches!(place(&[], 1, 1, 1, &StepRes::default()), Err(Refused::Invalid(_))));
        let oc = StepRes { overcommit: true, mem: Some(MemRequest::PerCpu(u64::MAX)), ..StepRes::default() };
        assert!(matches!(place(&rooms, 1, 1, 1, &oc), Err(Refused::Invalid(_))));
    }
}
