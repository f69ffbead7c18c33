//! What a running job holds on each node, and the per-node usage the caller keeps up to date.
//!
//! The caller (the controller, or the simulator) owns one [`NodeUsage`] per node and applies each
//! started allocation with [`NodeUsage::apply`] and each finished one with [`NodeUsage::release`],
//! so the scheduler never rebuilds usage from the running set.

use model::{GPU_MILLI, Node};
use serde::{Deserialize, Serialize};

/// One node's share of an allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alloc {
    /// Index of the node in the snapshot's node list.
    pub node: u32,
    /// CPUs held.
    pub cpus: u32,
    /// Memory held, bytes.
    pub memory: u64,
    /// GPU indices on the node (what `CUDA_VISIBLE_DEVICES` will list).
    pub gpus: Vec<u8>,
    /// Milli-GPUs held on each of those GPUs (1000 for whole GPUs).
    pub gpu_milli: u32,
    /// Other countable resources held, by index into the node's `other` list.
    pub other: Vec<(u16, u64)>,
    /// Whether the job holds the node exclusively.
    pub exclusive: bool,
}

/// What is in use on one node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NodeUsage {
    /// CPUs in use.
    pub cpus: u32,
    /// Memory in use, bytes.
    pub memory: u64,
    /// Milli-GPUs in use on each GPU.
    pub gpu_milli: Vec<u32>,
    /// Other resources in use, parallel to the node's `other` list.
    pub other: Vec<u64>,
    /// Number of allocations on the node.
    pub jobs: u32,
    /// Whether an exclusive allocation holds the node.
    pub exclusive: bool,
}

impl NodeUsage {
    /// Empty usage shaped for `node`.
    pub fn for_node(node: &Node) -> NodeUsage {
        NodeUsage { gpu_milli: vec![0; node.gpus as usize], other: vec![0; node.other.len()], ..NodeUsage::default() }
    }

    /// Adds an allocation. Panics if it over-commits the node (a scheduler bug, never input).
    pub fn apply(&mut self, node: &Node, a: &Alloc) {
        self.cpus += a.cpus;
        self.memory += a.memory;
        assert!(self.cpus <= node.cpus, "node {} over-committed on CPUs", node.name);
        assert!(self.memory <= node.memory, "node {} over-committed on memory", node.name);
        for &g in &a.gpus {
            let slot = &mut self.gpu_milli[g as usize];
            *slot += a.gpu_milli;
            assert!(*slot <= GPU_MILLI, "node {} GPU {g} over-committed", node.name);
        }
        for &(i, n) in &a.other {
            self.other[i as usize] += n;
            assert!(self.other[i as usize] <= node.other[i as usize].1);
        }
        assert!(!self.exclusive, "node {} is held exclusively", node.name);
        assert!(!a.exclusive || self.jobs == 0, "exclusive allocation on a busy node {}", node.name);
        self.jobs += 1;
        self.exclusive = a.exclusive;
    }

    /// Whether [`NodeUsage::apply`] would accept `a` now (a plan made on an older snapshot is
    /// checked with this before it is applied).
    pub fn fits(&self, node: &Node, a: &Alloc) -> bool {
        let gpus_ok = a.gpus.iter().all(|&g| self.gpu_milli.get(g as usize).is_some_and(|&m| m + a.gpu_milli <= GPU_MILLI));
        let other_ok = a
            .other
            .iter()
            .all(|&(i, n)| self.other.get(i as usize).zip(node.other.get(i as usize)).is_some_and(|(&used, (_, cap))| used + n <= *cap));
        self.cpus + a.cpus <= node.cpus
            && self.memory + a.memory <= node.memory
            && gpus_ok
            && other_ok
            && !self.exclusive
            && (!a.exclusive || self.jobs == 0)
    }

    /// Removes an allocation added before.
    pub fn release(&mut self, a: &Alloc) {
        self.cpus -= a.cpus;
        self.memory -= a.memory;
        for &g in &a.gpus {
            self.gpu_milli[g as usize] -= a.gpu_milli;
        }
        for &(i, n) in &a.other {
            self.other[i as usize] -= n;
        }
        self.jobs -= 1;
        if a.exclusive {
            self.exclusive = false;
        }
    }

    /// A job on the node was suspended: it lends its CPUs (it keeps the rest).
    pub fn suspend(&mut self, a: &Alloc) {
        self.cpus -= a.cpus;
    }

    /// Whether a suspended job's CPUs are free again ([`NodeUsage::resume`] would accept it).
    pub fn can_resume(&self, node: &Node, a: &Alloc) -> bool {
        self.cpus + a.cpus <= node.cpus
    }

    /// A suspended job resumes: it takes its CPUs back. Panics if they are not free (check
    /// with [`NodeUsage::can_resume`] first).
    pub fn resume(&mut self, node: &Node, a: &Alloc) {
        self.cpus += a.cpus;
        assert!(self.cpus <= node.cpus, "node {} over-committed on CPUs", node.name);
    }

    /// Whether nothing runs on the node.
    pub fn is_idle(&self) -> bool {
        self.jobs == 0
    }
}
