//! Shared fixtures for the scheduler's tests: a small cluster builder and a world that applies
//! plans the way the controller and the simulator do.

#![allow(dead_code, missing_docs)]

use model::{ClusterConfig, DepStatus, GpuPer, GpuRequest, JobRequest, MemRequest, Node, Shape, Time};
use sched::{Carry, Config, FairShare, History, NodeUsage, Pending, Plan, Running, Snapshot};

pub const GIB: u64 = 1 << 30;

/// `n` nodes of `cpus` CPUs, 256 GiB and `gpus` GPUs of type `h100`, `per_switch` to a switch.
pub fn nodes(n: u32, cpus: u32, gpus: u32, per_switch: u32) -> Vec<Node> {
    (0..n)
        .map(|i| {
            let mut node = Node::new(format!("n{i:03}"), cpus, 256 * GIB, gpus);
            node.gpu_type = (gpus > 0).then(|| "h100".into());
            node.switch = i / per_switch.max(1);
            node.block = i / (per_switch.max(1) * 4);
            node
        })
        .collect()
}

/// A job of `k` nodes with `g` GPUs and `c` CPUs each.
pub fn job(id: u64, submit: Time, limit: Time, k: u32, g: u32, c: u32) -> JobRequest {
    let mut s = Shape::single();
    s.nodes_min = k;
    s.nodes_max = k;
    s.ntasks = k;
    s.ntasks_per_node = Some(1);
    s.cpus_per_task = c.max(1);
    s.mem = MemRequest::PerNode(GIB);
    if g > 0 {
        s.gpus = Some(GpuRequest { per: GpuPer::Node(g), gpu_type: None, milli: 1000 });
    }
    JobRequest::new(id, submit, limit, s)
}

/// The controller's view of a cluster, in memory.
pub struct World {
    pub nodes: Vec<Node>,
    pub usage: Vec<NodeUsage>,
    pub pending: Vec<Pending>,
    pub running: Vec<Running>,
    /// Suspended jobs (limits count them).
    pub suspended: Vec<Running>,
    pub config: ClusterConfig,
    pub fairshare: FairShare,
    pub carry: Carry,
    pub history: History,
    pub reservations: Vec<model::Reservation>,
    seq: u64,
}

impl World {
    pub fn new(nodes: Vec<Node>) -> World {
        World {
            usage: nodes.iter().map(NodeUsage::for_node).collect(),
            nodes,
            pending: Vec::new(),
            running: Vec::new(),
            suspended: Vec::new(),
            config: ClusterConfig::default(),
            fairshare: FairShare::default(),
            carry: Carry::default(),
            history: History::default(),
            reservations: Vec::new(),
            seq: 0,
        }
    }

    pub fn submit(&mut self, req: JobRequest) {
        self.pending.push(Pending { req, seq: self.seq, dep: DepStatus::Satisfied });
        self.seq += 1;
    }

    pub fn snap(&self) -> Snapshot<'_> {
        Snapshot {
            nodes: &self.nodes,
            usage: &self.usage,
            pending: &self.pending,
            running: &self.running,
            suspended: &self.suspended,
            config: &self.config,
            fairshare: &self.fairshare,
            carry: &self.carry,
            history: &self.history,
            reservations: &self.reservations,
        }
    }

    pub fn pass(&self, now: Time, cfg: &Config) -> Plan {
        sched::schedule(&self.snap(), now, 7, cfg)
    }

    /// Applies the plan's starts (asserting no node is over-committed) and carry.
    pub fn apply(&mut self, plan: &Plan, now: Time) {
        for s in &plan.starts {
            let i = self.pending.iter().position(|p| p.req.id == s.job).expect("started job was pending");
            let p = self.pending.remove(i);
            for a in &s.allocs {
                self.usage[a.node as usize].apply(&self.nodes[a.node as usize], a);
            }
            self.running.push(Running { req: p.req, start: now, allocs: s.allocs.clone() });
        }
        for r in &plan.rejected {
            self.pending.retain(|p| p.req.id != r.job);
        }
        self.carry = plan.carry.clone();
    }

    /// Ends a running job.
    pub fn finish(&mut self, id: u64) {
        let i = self.running.iter().position(|r| r.req.id.0 == id).expect("running");
        let r = self.running.remove(i);
        for a in &r.allocs {
            self.usage[a.node as usize].release(a);
        }
    }
}
