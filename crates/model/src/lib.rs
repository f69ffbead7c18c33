//! Tandem's domain model: nodes and their resources, job and service-replica requests, cluster
//! configuration (partitions, QOS, accounts) and the lifecycle state machines.
//!
//! **Invariant:** this crate is plain data plus pure functions. It performs no IO, reads no clock
//! and draws no randomness; times are plain seconds ([`Time`]) handed in by the caller.

pub mod accounting;
mod config;
mod job;
mod node;
mod reason;
mod replica;
pub mod resv;

pub use accounting::{AdminLevel, Assoc, Enforce, Limits, Tres, Unlisted, User};
pub use config::{Account, Association, ClusterConfig, Partition, PreemptMode, Qos};
pub use job::{
    ArrayTask, DepKind, DepStatus, Dependency, GpuPer, GpuRequest, HetPart, InvalidTransition, JobEvent, JobId, JobRequest, JobState,
    MemRequest, RequestKind, Shape,
};
pub use node::{Node, NodeEvent, NodeState};
pub use reason::PendingReason;
pub use replica::{ReplicaEvent, ReplicaState};
pub use resv::{Reservation, ResvFlags};

/// Seconds. Absolute times are seconds since an epoch the caller chooses (the Unix epoch in the
/// daemons, the trace's time zero in the simulator); durations use the same unit.
pub type Time = i64;

/// Milli-GPUs in one whole GPU: a request of 500 is half a GPU (shared, as in the Alibaba trace).
pub const GPU_MILLI: u32 = 1000;
