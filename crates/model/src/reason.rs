//! Why a pending job waits, in Slurm's reason codes.

use serde::{Deserialize, Serialize};

use crate::accounting::TresKind;

/// Slurm's pending reasons (`squeue -o %r`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PendingReason {
    /// Not yet considered by the scheduler.
    None,
    /// Higher-priority jobs come first (and may hold reservations).
    Priority,
    /// The job is next, waiting for resources to free up.
    Resources,
    /// Waiting on another job.
    Dependency,
    /// A dependency can never be satisfied.
    DependencyNeverSatisfied,
    /// `--begin` is in the future.
    BeginTime,
    /// The time limit exceeds the partition's maximum.
    PartitionTimeLimit,
    /// Required nodes (`-w`) are down or drained, or no node matches the request now.
    ReqNodeNotAvail,
    /// The QOS's per-user job limit is reached.
    QosMaxJobsPerUserLimit,
    /// The QOS's per-user GPU limit is reached.
    QosMaxGpusPerUserLimit,
    /// Held by the user (`--hold`, `scontrol hold`).
    JobHeldUser,
    /// Requeued and held after its prolog failed on a node (`scontrol release` lets it run).
    LaunchFailedHeld,
    /// No node of the partition can ever hold the request (more GPUs than any node has, ...).
    BadConstraints,
    /// The array's `%N` limit of running tasks is reached.
    JobArrayTaskLimit,
    /// The association's MaxJobs is reached.
    AssocMaxJobsLimit,
    /// The association's (or an account above it) GrpJobs is reached.
    AssocGrpJobsLimit,
    /// The association's (or an account above it) GrpTRES of this resource is reached.
    AssocGrp(TresKind),
    /// The QOS's GrpJobs is reached.
    QosGrpJobsLimit,
    /// The QOS's GrpTRES of this resource is reached.
    QosGrp(TresKind),
    /// The QOS's MaxTRESPerUser of this resource (other than GPUs) is reached.
    QosMaxPerUser(TresKind),
    /// Waiting for the advance reservation it names to start (or to have room).
    Reservation,
    /// The nodes it could use are in a maintenance reservation.
    ReservedForMaintenance,
    /// The nodes it could use are in an advance reservation it may not use.
    ReservedNodes,
    /// The advance reservation it names was deleted.
    ReservationDeleted,
    /// Held because the controller was restored from a backup taken before it ended: it may
    /// have run since; `scontrol release` runs it (again), `scancel` ends it (Tandem's reason).
    Restored,
}

impl PendingReason {
    /// The string Slurm prints.
    pub fn code(self) -> &'static str {
        match self {
            PendingReason::None => "None",
            PendingReason::Priority => "Priority",
            PendingReason::Resources => "Resources",
            PendingReason::Dependency => "Dependency",
            PendingReason::DependencyNeverSatisfied => "DependencyNeverSatisfied",
            PendingReason::BeginTime => "BeginTime",
            PendingReason::PartitionTimeLimit => "PartitionTimeLimit",
            PendingReason::ReqNodeNotAvail => "ReqNodeNotAvail",
            PendingReason::QosMaxJobsPerUserLimit => "QOSMaxJobsPerUserLimit",
            PendingReason::QosMaxGpusPerUserLimit => "QOSMaxGRESPerUser",
            PendingReason::JobHeldUser => "JobHeldUser",
            PendingReason::LaunchFailedHeld => "launch failed requeued held",
            PendingReason::BadConstraints => "BadConstraints",
            PendingReason::JobArrayTaskLimit => "JobArrayTaskLimit",
            PendingReason::AssocMaxJobsLimit => "AssocMaxJobsLimit",
            PendingReason::AssocGrpJobsLimit => "AssocGrpJobsLimit",
            PendingReason::AssocGrp(k) => match k {
                TresKind::Cpu => "AssocGrpCpuLimit",
                TresKind::Mem => "AssocGrpMemLimit",
                TresKind::Node => "AssocGrpNodeLimit",
                TresKind::Gpu => "AssocGrpGRES",
            },
            PendingReason::QosGrpJobsLimit => "QOSGrpJobsLimit",
            PendingReason::QosGrp(k) => match k {
                TresKind::Cpu => "QOSGrpCpuLimit",
                TresKind::Mem => "QOSGrpMemLimit",
                TresKind::Node => "QOSGrpNodeLimit",
                TresKind::Gpu => "QOSGrpGRES",
            },
            PendingReason::QosMaxPerUser(k) => match k {
                TresKind::Cpu => "QOSMaxCpuPerUserLimit",
                TresKind::Mem => "QOSMaxMemoryPerUser",
                TresKind::Node => "QOSMaxNodePerUserLimit",
                TresKind::Gpu => "QOSMaxGRESPerUser",
            },
            PendingReason::Reservation => "Reservation",
            PendingReason::ReservedForMaintenance => "ReqNodeNotAvail, Reserved for maintenance",
            PendingReason::ReservedNodes => "ReqNodeNotAvail, May be reserved for other job",
            PendingReason::ReservationDeleted => "ReservationDeleted",
            PendingReason::Restored => "Restored",
        }
    }
}

impl std::fmt::Display for PendingReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}
