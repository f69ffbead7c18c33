//! Job and service-replica requests (Slurm's request shapes) and the job lifecycle.

use serde::{Deserialize, Serialize};

use crate::Time;

/// Job identifier (Slurm's job id). Array tasks get their own id and carry [`ArrayTask`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JobId(pub u64);

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What kind of work a request is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequestKind {
    /// A batch job (a training gang): placed all at once, bin-packed.
    Batch,
    /// One replica of an inference service: placed one by one, spread over failure domains.
    Replica {
        /// Service name; replicas of one service are spread apart.
        service: String,
    },
}

/// How many GPUs, counted per what.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum GpuPer {
    /// `--gpus N`: N in total, spread evenly over the job's nodes.
    Job(u32),
    /// `--gpus-per-node N` or `--gres=gpu:N`.
    Node(u32),
    /// `--gpus-per-task N`.
    Task(u32),
}

/// A GPU request: count, optional model, and the share of each GPU (1000 = a whole GPU).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuRequest {
    /// Count and what it is counted per.
    pub per: GpuPer,
    /// Required GPU model (`h100`), or any.
    pub gpu_type: Option<String>,
    /// Milli-GPUs needed on each GPU used: 1000 for whole GPUs, less for a shared GPU.
    pub milli: u32,
}

/// Memory request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemRequest {
    /// `--mem`: bytes per node. Zero means "no memory requirement".
    PerNode(u64),
    /// `--mem-per-cpu`: bytes per allocated CPU.
    PerCpu(u64),
}

/// The resource shape of a request, as Slurm's `-N -n --ntasks-per-node -c --mem --gpus*` give it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    /// Minimum node count (`-N min-max`); 0 means "as few as the tasks need".
    pub nodes_min: u32,
    /// Maximum node count; the scheduler uses `nodes_min` when set.
    pub nodes_max: u32,
    /// Number of tasks (`-n`), at least 1.
    pub ntasks: u32,
    /// Tasks per node (`--ntasks-per-node`), if fixed.
    pub ntasks_per_node: Option<u32>,
    /// CPUs per task (`-c`), at least 1.
    pub cpus_per_task: u32,
    /// Memory.
    pub mem: MemRequest,
    /// GPUs, if any.
    pub gpus: Option<GpuRequest>,
    /// Other countable resources needed on each node.
    pub other: Vec<(String, u64)>,
    /// Whole nodes (`--exclusive`).
    pub exclusive: bool,
}

impl Shape {
    /// One task with one CPU and nothing else.
    pub fn single() -> Shape {
        Shape {
            nodes_min: 1,
            nodes_max: 1,
            ntasks: 1,
            ntasks_per_node: None,
            cpus_per_task: 1,
            mem: MemRequest::PerNode(0),
            gpus: None,
            other: Vec::new(),
            exclusive: false,
        }
    }

    /// `n` whole nodes (what a rigid SWF job of `n` processors on single-processor nodes asks).
    pub fn whole_nodes(n: u32) -> Shape {
        Shape { nodes_min: n, nodes_max: n, ntasks: n, ntasks_per_node: Some(1), exclusive: true, ..Shape::single() }
    }

    /// Tasks placed on each node when the job runs on `nodes` nodes.
    pub fn tasks_per_node(&self, nodes: u32) -> u32 {
        let nodes = nodes.max(1);
        match self.ntasks_per_node {
            Some(t) => t.max(1),
            None => self.ntasks.max(1).div_ceil(nodes),
        }
    }

    /// GPUs needed on each node when the job runs on `nodes` nodes.
    pub fn gpus_per_node(&self, nodes: u32) -> u32 {
        match &self.gpus {
            None => 0,
            Some(g) => match g.per {
                GpuPer::Job(n) => n.div_ceil(nodes.max(1)),
                GpuPer::Node(n) => n,
                GpuPer::Task(n) => n * self.tasks_per_node(nodes),
            },
        }
    }

    /// Total GPUs the job holds on `nodes` nodes.
    pub fn total_gpus(&self, nodes: u32) -> u32 {
        self.gpus_per_node(nodes) * nodes.max(1)
    }
}

/// Dependency kinds (`--dependency`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DepKind {
    /// `after`: the other job has started (or ended).
    After,
    /// `afterok`: the other job completed with exit code 0.
    AfterOk,
    /// `afternotok`: the other job failed.
    AfterNotOk,
    /// `afterany`: the other job ended in any way.
    AfterAny,
    /// `singleton`: no other job of the same name and user is running.
    Singleton,
}

/// One dependency of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dependency {
    /// Kind.
    pub kind: DepKind,
    /// The job depended on (unused for `singleton`).
    pub job: Option<JobId>,
}

/// Where a pending job's dependencies stand, resolved by the caller from job states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DepStatus {
    /// No dependency, or all satisfied.
    Satisfied,
    /// Some dependency may still be satisfied later.
    Waiting,
    /// Some dependency can never be satisfied (`DependencyNeverSatisfied`).
    Never,
}

/// An array task's place in its array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayTask {
    /// The array's job id (`SLURM_ARRAY_JOB_ID`).
    pub array_job: JobId,
    /// The task index (`SLURM_ARRAY_TASK_ID`).
    pub task: u32,
}

/// Everything the scheduler knows about a request for resources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRequest {
    /// Identifier.
    pub id: JobId,
    /// Name (`-J`).
    pub name: String,
    /// Batch job or service replica.
    pub kind: RequestKind,
    /// Submitting user.
    pub user: String,
    /// Account charged (`-A`).
    pub account: String,
    /// Partition (`-p`); `None` for the default partition.
    pub partition: Option<String>,
    /// QOS (`-q`); `None` for the default QOS.
    pub qos: Option<String>,
    /// Nice value (`--nice`), -10000..=10000; higher means lower priority.
    pub nice: i32,
    /// Submission time.
    pub submit_time: Time,
    /// Not before this time (`--begin`).
    pub begin_time: Option<Time>,
    /// Time limit in seconds (`-t`); the scheduler plans with this, never with actual run times.
    pub time_limit: Time,
    /// Smallest acceptable time limit (`--time-min`): backfill may start the job with a limit
    /// cut down to what fits before a reservation, but not below this.
    #[serde(default)]
    pub time_min: Option<Time>,
    /// Resource shape.
    pub shape: Shape,
    /// Required node features (`-C`), all must be present.
    pub features: Vec<String>,
    /// Nodes that must be used (`-w`).
    pub nodelist: Vec<String>,
    /// Nodes that must not be used (`-x`).
    pub exclude: Vec<String>,
    /// At most this many leaf switches (`--switches`).
    pub max_switches: Option<u32>,
    /// Dependencies.
    pub dependencies: Vec<Dependency>,
    /// Array task position, if an array task.
    pub array: Option<ArrayTask>,
    /// Held by the user or an operator (`--hold`).
    pub held: bool,
    /// A heterogeneous job's components after the first (`sbatch ... : ...`, `#SBATCH
    /// hetjob`): each its own shape and node constraints, all started together or none, on
    /// nodes apart from each other's. Empty for an ordinary job. The first component is the
    /// request's own shape and constraints; the rest (user, account, QOS, limit) is shared.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub het: Vec<HetPart>,
    /// The advance reservation it runs in (`--reservation`), by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// `--requeue=expedite`: when its node fails, it is requeued first in the queue (where the
    /// cluster allows it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expedite: bool,
    /// Requeued expedited after its node failed: it comes first in the queue until it starts.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expedited: bool,
}

/// One component of a heterogeneous job beyond the first ([`JobRequest::het`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HetPart {
    /// Resource shape.
    pub shape: Shape,
    /// Partition; `None` for the default partition.
    #[serde(default)]
    pub partition: Option<String>,
    /// Required node features (`-C`).
    #[serde(default)]
    pub features: Vec<String>,
    /// Nodes that must be used (`-w`).
    #[serde(default)]
    pub nodelist: Vec<String>,
    /// Nodes that must not be used (`-x`).
    #[serde(default)]
    pub exclude: Vec<String>,
}

impl JobRequest {
    /// A one-task batch job with defaults; tests and loaders fill in the rest.
    pub fn new(id: u64, submit_time: Time, time_limit: Time, shape: Shape) -> JobRequest {
        JobRequest {
            id: JobId(id),
            name: format!("job{id}"),
            kind: RequestKind::Batch,
            user: "user".into(),
            account: "default".into(),
            partition: None,
            qos: None,
            nice: 0,
            submit_time,
            begin_time: None,
            time_limit,
            time_min: None,
            shape,
            features: Vec::new(),
            nodelist: Vec::new(),
            exclude: Vec::new(),
            max_switches: None,
            dependencies: Vec::new(),
            array: None,
            held: false,
            het: Vec::new(),
            reservation: None,
            expedite: false,
            expedited: false,
        }
    }

    /// Component `k` of a heterogeneous job as a request of its own (its shape and node
    /// constraints, the rest shared); the request itself for 0; `None` past the last.
    pub fn component(&self, k: usize) -> Option<JobRequest> {
        // Field by field: the other components are not copied.
        let shared =
            |shape: &Shape, partition: &Option<String>, features: &Vec<String>, nodelist: &Vec<String>, exclude: &Vec<String>| JobRequest {
                id: self.id,
                name: self.name.clone(),
                kind: self.kind.clone(),
                user: self.user.clone(),
                account: self.account.clone(),
                partition: partition.clone(),
                qos: self.qos.clone(),
                nice: self.nice,
                submit_time: self.submit_time,
                begin_time: self.begin_time,
                time_limit: self.time_limit,
                time_min: self.time_min,
                shape: shape.clone(),
                features: features.clone(),
                nodelist: nodelist.clone(),
                exclude: exclude.clone(),
                max_switches: self.max_switches,
                dependencies: self.dependencies.clone(),
                array: self.array,
                held: self.held,
                het: Vec::new(),
                reservation: self.reservation.clone(),
                expedite: self.expedite,
                expedited: self.expedited,
            };
        if k == 0 {
            return Some(shared(&self.shape, &self.partition, &self.features, &self.nodelist, &self.exclude));
        }
        let p = self.het.get(k - 1)?;
        Some(shared(&p.shape, &p.partition, &p.features, &p.nodelist, &p.exclude))
    }

    /// Number of components: 1 for an ordinary job.
    pub fn components(&self) -> usize {
        1 + self.het.len()
    }

    /// The time from which the job is eligible to start (its age counts from here).
    pub fn eligible_time(&self) -> Time {
        self.begin_time.map_or(self.submit_time, |b| b.max(self.submit_time))
    }
}

/// An attempted lifecycle transition that the state machine does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} transition: {event} in state {from}")]
pub struct InvalidTransition {
    what: &'static str,
    from: &'static str,
    event: &'static str,
}

impl InvalidTransition {
    pub(crate) fn new(what: &'static str, from: &'static str, event: &'static str) -> Self {
        InvalidTransition { what, from, event }
    }
}

/// Job lifecycle (Slurm's job states).
///
/// ```text
///             start               exit 0
///  Pending ─────────► Running ───────────► Completed
///    │ ▲                │  │ exit≠0 ─────► Failed
///    │ │   requeue /    │  │ time limit ─► Timeout
///    │ └── preempt ─────┘  │ oom ────────► OutOfMemory
///    │     node fail       │ node fail ──► NodeFail   (no requeue)
///    └──── cancel ─────────┴─ cancel ────► Cancelled
///                       suspend │ ▲ resume
///                               ▼ │
///                          Suspended   (ends, is requeued or fails as Running does; its
///                                       time limit does not run)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum JobState {
    /// Waiting to be scheduled.
    Pending,
    /// Running on its allocation.
    Running,
    /// Ended with exit code 0.
    Completed,
    /// Ended with a non-zero exit code.
    Failed,
    /// Cancelled by a user or an operator.
    Cancelled,
    /// Killed at its time limit.
    Timeout,
    /// Killed for exceeding its memory.
    OutOfMemory,
    /// Its node failed and it was not requeued.
    NodeFail,
    /// Stopped (`scontrol suspend`, or preempted by suspension): its processes frozen, its
    /// memory and GPUs kept, its CPUs lent.
    Suspended,
}

/// Events of the job lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobEvent {
    /// The scheduler started it.
    Start,
    /// Its processes exited with this code.
    Exit(i32),
    /// It hit its time limit.
    TimeLimit,
    /// It exceeded its memory limit.
    OutOfMemory,
    /// Cancelled.
    Cancel,
    /// Put back in the queue: preemption, `scontrol requeue`, or a node failure with requeue on.
    Requeue,
    /// Its node failed and it may not be requeued.
    NodeFail,
    /// Its processes were frozen (`scontrol suspend`, preemption by suspension).
    Suspend,
    /// Its processes were thawed (`scontrol resume`, or its preemptor ended).
    Resume,
}

impl JobState {
    /// The one transition function of the job lifecycle.
    pub fn step(self, event: JobEvent) -> Result<JobState, InvalidTransition> {
        use JobEvent as E;
        use JobState as S;
        let bad = |from: &'static str, ev: &'static str| Err(InvalidTransition::new("job", from, ev));
        match self {
            S::Pending => match event {
                E::Start => Ok(S::Running),
                E::Cancel => Ok(S::Cancelled),
                E::Requeue => Ok(S::Pending),
                E::Exit(_) => bad("Pending", "Exit"),
                E::TimeLimit => bad("Pending", "TimeLimit"),
                E::OutOfMemory => bad("Pending", "OutOfMemory"),
                E::NodeFail => bad("Pending", "NodeFail"),
                E::Suspend => bad("Pending", "Suspend"),
                E::Resume => bad("Pending", "Resume"),
            },
            // A suspended job's processes may still end (killed, out of memory) and a cancel,
            // requeue or node failure ends it as a running one's; only its clock is stopped.
            S::Running | S::Suspended => match event {
                E::Start => bad(self.name(), "Start"),
                E::Suspend if self == S::Running => Ok(S::Suspended),
                E::Suspend => bad(self.name(), "Suspend"),
                E::Resume if self == S::Suspended => Ok(S::Running),
                E::Resume => bad(self.name(), "Resume"),
                E::Exit(0) => Ok(S::Completed),
                E::Exit(_) => Ok(S::Failed),
                E::TimeLimit => Ok(S::Timeout),
                E::OutOfMemory => Ok(S::OutOfMemory),
                E::Cancel => Ok(S::Cancelled),
                E::Requeue => Ok(S::Pending),
                E::NodeFail => Ok(S::NodeFail),
            },
            S::Completed | S::Failed | S::Cancelled | S::Timeout | S::OutOfMemory | S::NodeFail => {
                match event {
                    // Slurm allows requeueing a finished batch job.
                    E::Requeue => Ok(S::Pending),
                    E::Start => bad(self.name(), "Start"),
                    E::Exit(_) => bad(self.name(), "Exit"),
                    E::TimeLimit => bad(self.name(), "TimeLimit"),
                    E::OutOfMemory => bad(self.name(), "OutOfMemory"),
                    E::Cancel => bad(self.name(), "Cancel"),
                    E::NodeFail => bad(self.name(), "NodeFail"),
                    E::Suspend => bad(self.name(), "Suspend"),
                    E::Resume => bad(self.name(), "Resume"),
                }
            }
        }
    }

    /// Slurm's upper-case name of the state (`PENDING`, `NODE_FAIL`, ...).
    pub fn slurm_name(self) -> &'static str {
        match self {
            JobState::Pending => "PENDING",
            JobState::Running => "RUNNING",
            JobState::Completed => "COMPLETED",
            JobState::Failed => "FAILED",
            JobState::Cancelled => "CANCELLED",
            JobState::Timeout => "TIMEOUT",
            JobState::OutOfMemory => "OUT_OF_MEMORY",
            JobState::NodeFail => "NODE_FAIL",
            JobState::Suspended => "SUSPENDED",
        }
    }

    fn name(self) -> &'static str {
        match self {
            JobState::Pending => "Pending",
            JobState::Running => "Running",
            JobState::Completed => "Completed",
            JobState::Failed => "Failed",
            JobState::Cancelled => "Cancelled",
            JobState::Timeout => "Timeout",
            JobState::OutOfMemory => "OutOfMemory",
            JobState::NodeFail => "NodeFail",
            JobState::Suspended => "Suspended",
        }
    }

    /// Whether the job holds its allocation and has processes on it: running or suspended.
    pub fn on_nodes(self) -> bool {
        matches!(self, JobState::Running | JobState::Suspended)
    }

    /// Whether the job has ended.
    pub fn is_final(self) -> bool {
        match self {
            JobState::Pending | JobState::Running | JobState::Suspended => false,
            JobState::Completed
            | JobState::Failed
            | JobState::Cancelled
            | JobState::Timeout
            | JobState::OutOfMemory
            | JobState::NodeFail => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_lifecycle() {
        let s = JobState::Pending.step(JobEvent::Start).unwrap();
        assert_eq!(s.step(JobEvent::Exit(0)).unwrap(), JobState::Completed);
        assert_eq!(s.step(JobEvent::Exit(3)).unwrap(), JobState::Failed);
        assert_eq!(s.step(JobEvent::Requeue).unwrap(), JobState::Pending);
        assert!(JobState::Completed.step(JobEvent::Start).is_err());
        assert!(JobState::Pending.step(JobEvent::Exit(0)).is_err());
        assert_eq!(JobState::NodeFail.slurm_name(), "NODE_FAIL");
        let z = s.step(JobEvent::Suspend).unwrap();
        assert_eq!(z, JobState::Suspended);
        assert!(z.on_nodes() && !z.is_final());
        assert!(z.step(JobEvent::Suspend).is_err() && s.step(JobEvent::Resume).is_err());
        assert!(JobState::Pending.step(JobEvent::Suspend).is_err());
        assert_eq!(z.step(JobEvent::Resume).unwrap(), JobState::Running);
        assert_eq!(z.step(JobEvent::Cancel).unwrap(), JobState::Cancelled);
        assert_eq!(z.step(JobEvent::Requeue).unwrap(), JobState::Pending);
        assert_eq!(z.slurm_name(), "SUSPENDED");
    }

    #[test]
    fn shape_arithmetic() {
        let mut s = Shape::single();
        s.ntasks = 8;
        s.gpus = Some(GpuRequest { per: GpuPer::Task(1), gpu_type: None, milli: 1000 });
        assert_eq!(s.tasks_per_node(2), 4);
        assert_eq!(s.gpus_per_node(2), 4);
        s.gpus = Some(GpuRequest { per: GpuPer::Job(6), gpu_type: None, milli: 1000 });
        assert_eq!(s.gpus_per_node(4), 2);
        assert_eq!(s.total_gpus(4), 8);
    }
}
