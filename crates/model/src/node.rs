//! Nodes: what a machine offers, where it sits in the network, and its lifecycle.

use serde::{Deserialize, Serialize};

use crate::job::InvalidTransition;

/// One machine the scheduler may place work on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Unique node name (`node001`).
    pub name: String,
    /// CPU cores.
    pub cpus: u32,
    /// Memory in bytes.
    pub memory: u64,
    /// Number of GPUs.
    pub gpus: u32,
    /// GPU model such as `h100`, matched case-insensitively against `--gpus h100:2`.
    pub gpu_type: Option<String>,
    /// Other countable resources (generic resources), name and count.
    pub other: Vec<(String, u64)>,
    /// Features / labels, matched by `--constraint`.
    pub features: Vec<String>,
    /// Partitions the node belongs to; empty means every partition.
    pub partitions: Vec<String>,
    /// Leaf switch index (topology level 1).
    pub switch: u32,
    /// Block index: an NVLink domain or a group of switches (topology level 2).
    pub block: u32,
    /// Lifecycle state.
    pub state: NodeState,
}

impl Node {
    /// A node with the given name and resources, idle, on switch 0 / block 0.
    pub fn new(name: impl Into<String>, cpus: u32, memory: u64, gpus: u32) -> Node {
        Node {
            name: name.into(),
            cpus,
            memory,
            gpus,
            gpu_type: None,
            other: Vec::new(),
            features: Vec::new(),
            partitions: Vec::new(),
            switch: 0,
            block: 0,
            state: NodeState::Up,
        }
    }

    /// Whether the node is in `partition` (a node with no partition list is in all of them).
    pub fn in_partition(&self, partition: &str) -> bool {
        self.partitions.is_empty() || self.partitions.iter().any(|p| p == partition)
    }
}

/// Node lifecycle.
///
/// ```text
///            drain                 fail / lease lapses
///   Up  ───────────────► Drain ──────────────────────► Down
///    ▲ ◄─────────────── resume         │                 │
///    │                                 └─── fail ────────┤
///    └──────────────────────── resume / register ◄───────┘
/// ```
/// Only `Up` nodes receive new work; `Drain` nodes finish what they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NodeState {
    /// Accepting work.
    Up,
    /// Finishing running work, accepting none (`scontrol update state=drain`).
    Drain,
    /// Unreachable or failed; its work has been requeued or failed.
    Down,
}

/// Events that move a node through its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeEvent {
    /// An operator drains the node.
    Drain,
    /// An operator resumes the node, or its agent registers again.
    Resume,
    /// The node failed or its lease lapsed.
    Fail,
}

impl NodeState {
    /// The one transition function of the node lifecycle.
    pub fn step(self, event: NodeEvent) -> Result<NodeState, InvalidTransition> {
        use NodeEvent as E;
        use NodeState as S;
        match (self, event) {
            (S::Up, E::Drain) => Ok(S::Drain),
            (S::Up, E::Resume) => Ok(S::Up),
            (S::Up, E::Fail) => Ok(S::Down),
            (S::Drain, E::Drain) => Ok(S::Drain),
            (S::Drain, E::Resume) => Ok(S::Up),
            (S::Drain, E::Fail) => Ok(S::Down),
            (S::Down, E::Resume) => Ok(S::Up),
            (S::Down, E::Fail) => Ok(S::Down),
            (S::Down, E::Drain) => Err(InvalidTransition::new("node", "Down", "Drain")),
        }
    }

    /// Whether new work may be placed on a node in this state.
    pub fn schedulable(self) -> bool {
        match self {
            NodeState::Up => true,
            NodeState::Drain | NodeState::Down => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lifecycle() {
        let s = NodeState::Up.step(NodeEvent::Drain).unwrap();
        assert_eq!(s, NodeState::Drain);
        assert!(!s.schedulable());
        let s = s.step(NodeEvent::Fail).unwrap();
        assert!(s.step(NodeEvent::Drain).is_err());
        assert_eq!(s.step(NodeEvent::Resume).unwrap(), NodeState::Up);
    }
}
