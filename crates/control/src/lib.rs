//! The controller's decisions, sans IO: submissions, the job lifecycle, node registration and
//! leases, dispatch of scheduler plans to node agents, time limits and `--signal`, job steps
//! (`srun`), requeue on node failure, preemption by QOS tier, and authorisation by uid.
//!
//! **Invariant:** no IO, no clock, no randomness: every method takes `now`; the daemon persists
//! what [`Controller::take_dirty`] returns before it acknowledges a request, and delivers the
//! orders that heartbeats return.
//!
//! Fencing rule: a node's lease is renewed by each heartbeat (default 30 s). When it lapses the
//! controller marks the node DOWN and requeues (or fails) its jobs, bumping their run number
//! (`epoch`), so any report from the old run is ignored and any task of it still alive is killed
//! when its agent comes back. The agent, for its part, kills every task once its own last
//! successful heartbeat is older than the lease, so a job never runs twice at once, even across
//! a partition. A restarted controller renews every lease it loads before it judges any.
//!
//! Reconciling rule: an agent reports, at registration and in every heartbeat, every task it
//! was given until the controller has the task's end (its records outlive its process). A run
//! placed on a node with a task there that the report lacks, and whose launch is not still
//! queued for that node, was lost (the agent restarted without it, the machine rebooted): the
//! job meets a node failure at once, without waiting for the lease. A cancel or a time limit
//! decided before a node failure stands: the job ends CANCELLED (TIMEOUT), never requeued.

pub mod accounting;
pub mod config;
pub mod creds;
pub mod kube;
mod pass;
pub mod reboot;
pub mod resv;
pub mod service;
mod services;
mod steps;
pub mod suspend;
mod tails;
mod types;

pub use model::Reservation;
pub use pass::Pass;
pub use service::{Service, ServiceSpec};
pub use services::{Endpoint, EndpointView, ProxyServiceStats, ServiceEndpoints, replica_id};
pub use tails::{ARRAY_WINDOW, Listing};
pub use types::{
    ArrayInfo, ArrayRecord, BATCH_STEP, HetStep, Job, JobSpec, NodeRec, Order, OutputRead, Pulling, ReplicaInfo, ReplicaReport,
    ReplicaTask, StdinTo, Step, StepHold, StepIo, StepRes, StepSpec, TailCancel, Task, TaskExit, TaskKey, TaskOutput, TaskScripts,
    TaskUsage,
};

use model::{ClusterConfig, DepKind, DepStatus, JobEvent, JobId, JobState, Node, NodeEvent, NodeState, PendingReason, Time};
use sched::{Carry, FairShare, NodeUsage, Pending, Snapshot};
use serde::{Deserialize, Serialize};
use slurmcli::BatchSpec;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Controller settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Cluster name (`SLURM_CLUSTER_NAME`).
    pub cluster_name: String,
    /// Partitions, QOS, accounts.
    pub cluster: ClusterConfig,
    /// Scheduler settings.
    pub sched: sched::Config,
    /// Node lease, seconds.
    pub lease: Time,
    /// Heartbeat interval agents are told to use (and the longest a heartbeat's long poll is
    /// held), milliseconds (default 500); 0: a tenth of the lease, between 0.2 s and 10 s.
    #[serde(default)]
    pub heartbeat_ms: u64,
    /// Seconds between SIGTERM and SIGKILL at the time limit (Slurm's KillWait).
    pub kill_wait: Time,
    /// Slurm's MaxArraySize: array indices must be below it (default 1001, as Slurm's).
    pub max_array: u32,
    /// The largest batch script, bytes (Slurm's `max_script_size`, default 4 MB).
    #[serde(default = "max_script_size")]
    pub max_script_size: u64,
    /// Which nodes each partition holds, by name (`None`: every node).
    pub partition_nodes: Vec<(String, Option<Vec<String>>)>,
    /// Finished jobs leave the controller's memory this long after they end, seconds (Slurm's
    /// MinJobAge, default 300); they stay in the database for `sacct`. 0: never.
    #[serde(default)]
    pub min_job_age: Time,
    /// Slurm's MpiDefault: the MPI type of an `srun` that names none (`pmi2` or `pmix`;
    /// `None`: none).
    #[serde(default)]
    pub mpi_default: Option<String>,
    /// A node silent this long (milliseconds) loses its service replicas to replacements at
    /// once, long before its lease lapses (batch jobs wait for the lease); 0: three heartbeat
    /// intervals, at least 1.5 s.
    #[serde(default)]
    pub failover_ms: i64,
    /// Fair-share usage halves in this many seconds (Slurm's PriorityDecayHalfLife, default 7
    /// days, as the simulator's); 0: no decay.
    #[serde(default = "week")]
    pub half_life: Time,
    /// Uids that are operators (`[security] operators`, looked up by the daemon).
    #[serde(default)]
    pub operators: Vec<u32>,
    /// Uids that are administrators besides root (the user the controller runs as).
    #[serde(default)]
    pub administrators: Vec<u32>,
    /// Pending tasks of an array that are jobs of their own (the scheduler sees these); the
    /// rest wait as the array's one record until these start (default 64; see `tails`).
    #[serde(default = "array_window")]
    pub array_window: u64,
    /// Slurm's Prolog: a node-local program each agent runs as root before a job's first
    /// task on its node (with the job's `SLURM_*` variables); one that fails drains the node
    /// and requeues the job held.
    #[serde(default)]
    pub prolog: Option<String>,
    /// Slurm's Epilog: run on each node of a job's allocation once its run there is over; one
    /// that fails drains the node.
    #[serde(default)]
    pub epilog: Option<String>,
    /// Slurm's PrologEpilogTimeout, seconds: a prolog or epilog still running then is killed and
    /// counts as failed; 0: no limit.
    #[serde(default)]
    pub prolog_epilog_timeout: Time,
    /// Slurm's `SchedulerParameters=nohold_on_prolog_fail`: a job whose prolog failed is
    /// requeued without a hold (and runs elsewhere, its node drained).
    #[serde(default)]
    pub nohold_on_prolog_fail: bool,
    /// Slurm's HealthCheckProgram: a node-local program each agent runs as root every
    /// `health_check_interval` seconds; one that fails drains the node with what it wrote, one
    /// that passes resumes a drain it made.
    #[serde(default)]
    pub health_check_program: Option<String>,
    /// Slurm's HealthCheckInterval, seconds (0: the check never runs).
    #[serde(default)]
    pub health_check_interval: Time,
    /// Slurm's HealthCheckNodeState: `any`, `idle` (no job's task on the node) or `alloc`
    /// (some).
    #[serde(default)]
    pub health_check_node_state: Option<String>,
    /// The agents' built-in GPU check (XID errors, retired pages, ECC, temperature, a device
    /// that stopped answering) at each health check turn.
    #[serde(default = "types::yes")]
    pub gpu_health_check: bool,
    /// Slurm's `TaskProlog`: a node-local program each agent runs as the job's user before each
    /// task (its `export NAME=value` lines reach the task's environment).
    #[serde(default)]
    pub task_prolog: Option<String>,
    /// Slurm's `TaskEpilog`: likewise after each task.
    #[serde(default)]
    pub task_epilog: Option<String>,
    /// Slurm's `SlurmctldParameters=enable_expedited_requeue`: jobs may ask for
    /// `--requeue=expedite` (requeued first in the queue when their node fails).
    #[serde(default)]
    pub enable_expedited_requeue: bool,
    /// Slurm's `JobSubmitPlugins=lua`: the site's `job_submit.lua`, run by the controller (in a
    /// child process of its own) for every submission and modification.
    #[serde(default)]
    pub job_submit: Option<String>,
    /// The longest one call of it may take, milliseconds.
    #[serde(default = "job_submit_timeout_ms")]
    pub job_submit_timeout_ms: i64,
    /// Its memory limit, MiB.
    #[serde(default = "job_submit_memory")]
    pub job_submit_memory: u64,
    /// Slurm's RebootProgram: the node-local program each agent runs as root for `scontrol
    /// reboot` (`None`: reboots are refused).
    #[serde(default)]
    pub reboot_program: Option<String>,
    /// Slurm's ResumeTimeout, seconds: a node whose reboot was issued and whose agent has not
    /// registered again this long after is marked down (`reboot timed out`).
    #[serde(default = "resume_timeout")]
    pub resume_timeout: Time,
}

fn resume_timeout() -> Time {
    600
}

fn job_submit_timeout_ms() -> i64 {
    5000
}

fn job_submit_memory() -> u64 {
    256
}

fn array_window() -> u64 {
    tails::ARRAY_WINDOW
}

/// The umask of a job whose submission did not say (a body from an older client).
pub const DEFAULT_UMASK: u32 = 0o022;

/// How a preempted job's message begins (`preempted by job 7, a replica of service llm (qos
/// serve); requeued`): the Kubernetes view makes it a `Preempted` event.
pub const PREEMPTED_PREFIX: &str = "preempted by ";

fn week() -> Time {
    7 * 86400
}

fn max_script_size() -> u64 {
    slurmcli::DEFAULT_MAX_SCRIPT_SIZE
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            cluster_name: "tandem".into(),
            cluster: ClusterConfig::default(),
            sched: sched::Config::default(),
            lease: 30,
            heartbeat_ms: 500,
            kill_wait: 30,
            max_array: slurmcli::MAX_ARRAY_SIZE,
            max_script_size: max_script_size(),
            min_job_age: 300,
            mpi_default: None,
            partition_nodes: Vec::new(),
            failover_ms: 0,
            half_life: week(),
            operators: Vec::new(),
            administrators: Vec::new(),
            array_window: array_window(),
            prolog: None,
            epilog: None,
            prolog_epilog_timeout: 0,
            nohold_on_prolog_fail: false,
            health_check_program: None,
            health_check_interval: 0,
            health_check_node_state: None,
            gpu_health_check: true,
            task_prolog: None,
            task_epilog: None,
            enable_expedited_requeue: false,
            job_submit: None,
            job_submit_timeout_ms: job_submit_timeout_ms(),
            job_submit_memory: job_submit_memory(),
            reboot_program: None,
            resume_timeout: resume_timeout(),
        }
    }
}

/// A request the controller refuses. The message is for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The submission can never run as asked.
    #[error("{0}")]
    Invalid(String),
    /// No such job, node or step.
    #[error("{0}")]
    NotFound(String),
    /// The caller may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// The object is not in a state that allows it.
    #[error("{0}")]
    Conflict(String),
    /// The caller's credential is not (or no longer) valid.
    #[error("{0}")]
    Unauthorized(String),
    /// Not now, but later: what it needs is in use (a step waiting for its job's other steps,
    /// as Slurm's "Requested nodes are busy"). The caller may ask again.
    #[error("{0}")]
    Busy(String),
}

/// One account (or one user within an account) of the fair-share tree (`sshare`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShareRow {
    /// Account.
    pub account: String,
    /// The user, for a user's row within the account; empty for the account's row.
    #[serde(default)]
    pub user: String,
    /// Its configured shares (1 when not configured).
    pub raw_shares: u32,
    /// Its shares over those of all accounts listed.
    pub norm_shares: f64,
    /// Its decayed usage (the resource-seconds the scheduler counts).
    pub raw_usage: f64,
    /// Its usage over all accounts' usage.
    pub effective_usage: f64,
    /// The fair-share factor, 2^(-effective usage / normalised shares).
    pub fairshare: f64,
}

/// What a scheduling tick did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TickInfo {
    /// Jobs started.
    pub started: usize,
    /// Jobs requeued (node failure, preemption).
    pub requeued: usize,
    /// Nodes marked down.
    pub nodes_down: usize,
    /// Pending jobs the pass saw, less those it started or failed.
    pub pending: usize,
    /// Array tasks were made jobs of their own after the pass (its window's tasks started):
    /// another pass now would see them.
    pub more: bool,
}

/// Something that happened that an operator reads in the controller's log: the controller
/// returns it ([`Controller::take_events`]), the daemon writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A node went down (its lease lapsed, or its health check failed): the jobs that ran there
    /// were requeued or ended (`--no-requeue`, service replicas).
    NodeDown {
        /// The node.
        node: String,
        /// Why (`not responding (lease expired)`, the health check's message).
        reason: String,
        /// Jobs requeued.
        requeued: Vec<u64>,
        /// Jobs ended with it (`--no-requeue`, cancelled, service replicas).
        ended: Vec<u64>,
    },
}

/// Seconds past the scheduler's decision after which a run's reported start replaces it
/// ([`Controller::runs_started`]): a launch that waited for the controller's disk or a
/// restart, not the ordinary delay of a burst of launches.
pub const LATE_START_S: Time = 5;

/// A controller restored from a backup: every job the backup holds unfinished may have run, or
/// ended, since it was taken. Each is marked [`Job::restored`]: a pending one is held (reason
/// `Restored`), a running one waits for its agents' reports (a run still going settles it; one
/// found lost is held, not run again), and an array's tasks not yet made are held with it.
/// Returns the jobs and arrays changed, for the caller to store before anything else runs.
pub fn mark_restored(jobs: &mut [Job], arrays: &mut [ArrayRecord]) -> (Vec<u64>, Vec<u64>) {
    let mut changed = Vec::new();
    // Service replicas are left to their services (a replica run twice is one too many for a
    // moment, and the service ends it).
    for j in jobs.iter_mut().filter(|j| !j.state.is_final() && j.replica.is_none()) {
        j.restored = true;
        if j.state == JobState::Pending {
            j.req.held = true;
            (j.reason, j.expected_start) = (PendingReason::Restored, None);
            // Its run numbers move past any it may have had since (an agent ignores a launch
            // of a run it already had).
            j.epoch += RESTORE_EPOCH_STEP;
        }
        changed.push(j.req.id.0);
    }
    let mut held = Vec::new();
    for a in arrays.iter_mut() {
        a.first.restored = true;
        a.first.req.held = true;
        a.first.reason = PendingReason::Restored;
        held.push(a.id());
    }
    (changed, held)
}

/// How far a restored pending job's run number moves ([`mark_restored`]).
pub const RESTORE_EPOCH_STEP: u32 = 100;

/// How far a restored controller's next job id moves past the backup's: the ids given since the
/// backup are not given again (they name jobs users were told of, and an agent may run one).
pub const RESTORE_ID_STEP: u64 = 100_000;

/// Most events kept for the daemon to take; older ones are dropped (a simulator takes none).
const EVENTS_KEPT: usize = 10_000;

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids = |v: &[u64]| {
            let shown: Vec<String> = v.iter().take(20).map(u64::to_string).collect();
            let more = if v.len() > 20 { format!(" and {} more", v.len() - 20) } else { String::new() };
            format!("{}{more}", shown.join(","))
        };
        match self {
            Event::NodeDown { node, reason, requeued, ended } => {
                write!(f, "node {node} down: {reason}")?;
                if !requeued.is_empty() {
                    write!(f, "; {} job(s) requeued: {}", requeued.len(), ids(requeued))?;
                }
                if !ended.is_empty() {
                    write!(f, "; {} job(s) ended: {}", ended.len(), ids(ended))?;
                }
                if requeued.is_empty() && ended.is_empty() {
                    write!(f, "; no job ran there")?;
                }
                Ok(())
            }
        }
    }
}

/// A node name: 1 to 64 of `A-Za-z0-9-_.`.
fn valid_node_name(name: &str) -> Result<(), Refused> {
    if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.') {
        return Err(Refused::Invalid(format!("invalid node name {name:?}")));
    }
    Ok(())
}

/// How long a submission's idempotency key is remembered, in seconds: a retry within it of the
/// same submission by the same user (a client whose connection broke before the answer, across
/// a controller's failover) answers with the jobs it made. 24 hours, as common HTTP APIs keep
/// theirs.
pub const IDEMPOTENCY_RETENTION: Time = 86_400;

/// The controller.
#[derive(Debug)]
pub struct Controller {
    settings: Settings,
    /// Submissions' idempotency keys, by user and key: the first job id and how many the
    /// submission made, and when it was accepted (kept [`IDEMPOTENCY_RETENTION`]).
    idempotency: HashMap<(String, String), (u64, u64, Time)>,
    /// The same keys in the order they were accepted, to forget them.
    idempotency_order: std::collections::VecDeque<(Time, String, String)>,
    jobs: BTreeMap<u64, Box<Job>>,
    nodes: Vec<NodeRec>,
    node_index: HashMap<String, usize>,
    next_id: u64,
    fairshare: FairShare,
    /// Finished jobs' actual run times, recorded at their exits (for run-time predictions).
    history: sched::History,
    /// When fair-share usage was last decayed (0: not yet).
    last_decay: Time,
    carry: Carry,
    dirty_jobs: pass::Touched,
    dirty_nodes: BTreeSet<usize>,
    /// What the operator should read in the log, for the daemon to write ([`Controller::take_events`]).
    events: Vec<Event>,
    next_id_dirty: bool,
    seq_base: u64,
    services: BTreeMap<String, Service>,
    dirty_services: BTreeSet<String>,
    removed_services: Vec<String>,
    proxies: HashMap<String, services::ProxyState>,
    ep_version: u64,
    ep_view: Vec<ServiceEndpoints>,
    ep_changed_ms: i64,
    now_ms: i64,
    live_replicas: BTreeSet<u64>,
    /// Most live nodes are silent at once: no fast failover (see `suspect`).
    silence_storm: bool,
    /// When finished jobs were last purged from memory.
    last_purge: Time,
    /// When Jobs' `ttlSecondsAfterFinished` were last looked at ([`Controller::expire_kube_jobs`]).
    last_ttl_check: Time,
    /// Node definitions as the scheduler takes them, rebuilt only after a node changed
    /// ([`Controller::nodes_changed`]): a pass or a submission no longer copies every node.
    defs: Option<std::sync::Arc<Vec<Node>>>,
    /// Submission checks made against the current nodes, by the request's shape (its `Debug`
    /// text without id, name and submit time): the refusal, if any. Cleared when a node changes,
    /// and bounded.
    checked: HashMap<String, Option<String>>,
    /// Every job with a smaller id has ended: the per-tick scans start here. Only a requeue
    /// brings an ended job back, and it lowers the mark.
    active_from: u64,
    /// Arrays submitted since the last [`Controller::take_dirty`].
    dirty_arrays: Vec<ArrayRecord>,
    /// Arrays accepted by [`Controller::accept`] whose tasks are not yet in `jobs`
    /// ([`Controller::expand`]).
    unexpanded: Vec<ArrayRecord>,
    /// Arrays' pending tasks that are not jobs of their own yet, by array id (`tails`).
    lazy: BTreeMap<u64, tails::Tail>,
    /// The specs of the last few submissions: a submission with the same script, environment
    /// and options (a loop of `sbatch` from one shell) shares one copy instead of keeping its own.
    recent_specs: std::collections::VecDeque<std::sync::Arc<JobSpec>>,
    /// Nodes whose usage or definition changed since the last scheduling pass began.
    touched_nodes: BTreeSet<u32>,
    /// What the scheduler saw at the last pass (`None` before the first, and while a pass is out).
    mirror: Option<Box<pass::Mirror>>,
    /// A pass is out ([`Controller::begin_tick`] without its [`Controller::finish_tick`] yet).
    pass_out: bool,
    /// No running job reaches a time limit, a `--signal` time or the end of a preemption grace
    /// before this time: the per-tick scan of running jobs waits for it. Lowered whenever a job
    /// starts or is preempted.
    limits_due: Time,
    /// Node and proxy identities, and spent join tokens.
    creds: creds::Credentials,
    /// Nodes deleted since the last [`Controller::take_dirty`], by name.
    removed_nodes: Vec<String>,
    /// Uids of users whose accounting record makes them operators or administrators.
    admin_uids: std::collections::HashSet<u32>,
    /// `sacctmgr` changed the accounting since the last [`Controller::take_dirty`].
    accounting_dirty: bool,
    /// Advance reservations, by name.
    reservations: BTreeMap<String, model::Reservation>,
    /// The reservations changed since the last [`Controller::take_dirty`].
    reservations_dirty: bool,
    /// Objects written through the Kubernetes API that are not views (`kube`).
    kube: BTreeMap<kube::KubeKey, kube::KubeObject>,
    /// Their changes since the last [`Controller::take_dirty`], in order (`None`: deleted).
    dirty_kube: Vec<(kube::KubeKey, Option<kube::KubeObject>)>,
    /// The reservations as passes take them (rebuilt after a change), and how many changes
    /// there have been: a pass planned before a change starts nothing ([`Pass`]).
    resv_list: Option<std::sync::Arc<Vec<model::Reservation>>>,
    resv_gen: u64,
    /// Suspended jobs (`suspend`), rebuilt at restore.
    suspended: BTreeSet<u64>,
}

/// How many recent submissions' specs [`Controller::share_spec`] compares a new one with.
const RECENT_SPECS: usize = 8;

/// Most remembered submission checks ([`Controller::submit`]); past it the memo starts over.
const MAX_CHECKED: usize = 4096;

/// What must be persisted since the last call.
#[derive(Debug, Clone, Default)]
pub struct Dirty {
    /// Changed jobs.
    pub jobs: Vec<Job>,
    /// Changed nodes.
    pub nodes: Vec<NodeRec>,
    /// The next job id, if it changed.
    pub next_id: Option<u64>,
    /// Changed services.
    pub services: Vec<Service>,
    /// Deleted services, by name.
    pub removed_services: Vec<String>,
    /// New job arrays: one record each; their tasks are not in `jobs` until they change.
    pub arrays: Vec<ArrayRecord>,
    /// Deleted nodes, by name.
    pub removed_nodes: Vec<String>,
    /// Credentials issued and revoked, join tokens spent.
    pub creds: creds::CredDirty,
    /// The accounting, when `sacctmgr` changed it.
    pub accounting: Option<accounting::Accounting>,
    /// Every advance reservation, when one changed (they are few: kept whole).
    pub reservations: Option<Vec<model::Reservation>>,
    /// Objects written through the Kubernetes API, changed (`Some`) or deleted (`None`), in
    /// order.
    pub kube: Vec<(kube::KubeKey, Option<kube::KubeObject>)>,
}

impl Dirty {
    /// Nothing to persist.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.arrays.is_empty()
            && self.nodes.is_empty()
            && self.next_id.is_none()
            && self.services.is_empty()
            && self.removed_services.is_empty()
            && self.removed_nodes.is_empty()
            && self.creds.is_empty()
            && self.accounting.is_none()
            && self.reservations.is_none()
            && self.kube.is_empty()
    }
}

/// Sort key that orders `node2` before `node10` (the order of a hostlist).
fn natural(name: &str) -> (&str, u64, &str) {
    let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count();
    let (p, d) = name.split_at(name.len() - digits);
    (p, d.parse().unwrap_or(0), name)
}

/// Whether a dependency of `kind` on a job in `state` is met, may be met, or never will be.
fn dep_on(kind: DepKind, state: JobState) -> DepStatus {
    match (kind, state) {
        (DepKind::After, JobState::Pending) => DepStatus::Waiting,
        (DepKind::After, _) => DepStatus::Satisfied,
        (_, JobState::Pending | JobState::Running | JobState::Suspended) => DepStatus::Waiting,
        (DepKind::AfterAny, _) => DepStatus::Satisfied,
        (DepKind::AfterOk, JobState::Completed) => DepStatus::Satisfied,
        (DepKind::AfterOk, _) => DepStatus::Never,
        (DepKind::AfterNotOk, JobState::Completed) => DepStatus::Never,
        (DepKind::AfterNotOk, _) => DepStatus::Satisfied,
        (DepKind::Singleton, _) => DepStatus::Satisfied,
    }
}

fn is_final(s: JobState) -> bool {
    s.is_final()
}

impl Controller {
    /// An empty controller.
    pub fn new(settings: Settings) -> Controller {
        Controller {
            settings,
            idempotency: HashMap::new(),
            idempotency_order: std::collections::VecDeque::new(),
            jobs: BTreeMap::new(),
            nodes: Vec::new(),
            node_index: HashMap::new(),
            next_id: 1,
            fairshare: FairShare::default(),
            history: sched::History::default(),
            last_decay: 0,
            carry: Carry::default(),
            dirty_jobs: pass::Touched::default(),
            dirty_nodes: BTreeSet::new(),
            events: Vec::new(),
            next_id_dirty: false,
            seq_base: 1,
            services: BTreeMap::new(),
            dirty_services: BTreeSet::new(),
            removed_services: Vec::new(),
            proxies: HashMap::new(),
            ep_version: 1,
            ep_view: Vec::new(),
            ep_changed_ms: 0,
            now_ms: 0,
            live_replicas: BTreeSet::new(),
            silence_storm: false,
            last_purge: 0,
            last_ttl_check: 0,
            defs: None,
            checked: HashMap::new(),
            active_from: 0,
            dirty_arrays: Vec::new(),
            unexpanded: Vec::new(),
            lazy: BTreeMap::new(),
            recent_specs: std::collections::VecDeque::new(),
            touched_nodes: BTreeSet::new(),
            mirror: None,
            pass_out: false,
            limits_due: Time::MIN,
            creds: creds::Credentials::default(),
            removed_nodes: Vec::new(),
            admin_uids: std::collections::HashSet::new(),
            accounting_dirty: false,
            reservations: BTreeMap::new(),
            reservations_dirty: false,
            kube: BTreeMap::new(),
            dirty_kube: Vec::new(),
            resv_list: None,
            resv_gen: 0,
            suspended: BTreeSet::new(),
        }
    }

    /// One shared copy of `spec`: a recent submission's, if equal, else a new one.
    fn share_spec(&mut self, spec: impl Into<std::sync::Arc<JobSpec>>) -> std::sync::Arc<JobSpec> {
        let spec = spec.into();
        if let Some(i) = self.recent_specs.iter().position(|s| std::sync::Arc::ptr_eq(s, &spec) || **s == *spec) {
            let shared = self.recent_specs.remove(i).expect("found");
            self.recent_specs.push_front(shared.clone());
            return shared;
        }
        self.recent_specs.push_front(spec.clone());
        self.recent_specs.truncate(RECENT_SPECS);
        spec
    }

    /// Rebuilds the controller from persisted records. Every lease is renewed to `now + lease`
    /// before any is judged, so a restart shorter than the lease stops nothing. `boot` counts
    /// controller starts (kept by the store): order sequence numbers start above every number an
    /// earlier start could have used, so agents' acknowledgements stay meaningful.
    pub fn restore(
        settings: Settings,
        jobs: Vec<Job>,
        nodes: Vec<NodeRec>,
        services: Vec<Service>,
        next_id: u64,
        now: Time,
        boot: u64,
    ) -> Controller {
        let mut c = Controller::new(settings);
        c.seq_base = (boot << 40) + 1;
        c.now_ms = now * 1000;
        // Endpoint versions only grow, across restarts too (proxies compare them).
        c.ep_version = boot << 32;
        for mut s in services {
            // Autoscaler history is not kept: the scale-down window starts again.
            s.recommendations.push_back((now * 1000, s.desired));
            c.services.insert(s.spec.name.clone(), s);
        }
        c.next_id = next_id.max(jobs.iter().map(|j| j.req.id.0 + j.req.components() as u64).max().unwrap_or(1));
        for mut n in nodes {
            n.lease_until = now + c.settings.lease;
            n.usage = NodeUsage::for_node(&n.node);
            n.orders.clear();
            n.next_seq = c.seq_base;
            n.seen_ms = now * 1000;
            n.runs.clear();
            // A reboot issued before the restart: its order may have been lost with the old
            // process; again (a node that already went down registers first, which ends it).
            if let (Some(true), Some(p)) = (n.reboot.as_ref().map(|r| r.issued_at.is_some()), &c.settings.reboot_program) {
                n.push(Order::Reboot { program: p.clone() });
            }
            c.node_index.insert(n.node.name.clone(), c.nodes.len());
            c.nodes.push(n);
        }
        c.nodes_changed();
        let age = c.settings.min_job_age;
        let mut keyed: Vec<&Job> = jobs.iter().filter(|j| j.idempotency_key.is_some() && j.array.is_none()).collect();
        keyed.sort_by_key(|j| j.req.submit_time);
        for j in keyed.into_iter().cloned().collect::<Vec<_>>() {
            c.remember_key(&j, 1, now);
        }
        for mut j in jobs {
            if age > 0 && j.state.is_final() && j.end.is_some_and(|e| e < now - age) {
                continue; // in the database for sacct; no longer in memory
            }
            if j.replica.is_some() && !j.state.is_final() {
                c.live_replicas.insert(j.req.id.0);
            }
            j.spec = c.share_spec(j.spec);
            c.jobs.insert(j.req.id.0, Box::new(j));
        }
        c.advance_active();
        // Re-apply running allocations to node usage (a suspended job's without its CPUs, and
        // its freeze ordered again: the order may have been lost with the old process).
        let running: Vec<u64> = c.jobs.values().filter(|j| j.state.on_nodes()).map(|j| j.req.id.0).collect();
        for id in running {
            let allocs = c.jobs[&id].allocs.clone();
            let (suspended, epoch) = (c.jobs[&id].state == JobState::Suspended, c.jobs[&id].epoch);
            // Being cancelled or requeued: thawed for its signals, not frozen again.
            let ending = c.jobs[&id].cancelling || c.jobs[&id].requeueing || c.jobs[&id].kill_at.is_some();
            if suspended {
                c.suspended.insert(id);
            }
            for (name, a) in &allocs {
                if let Some(&i) = c.node_index.get(name) {
                    let node = c.nodes[i].node.clone();
                    if suspended {
                        // Without its CPUs: another job may hold them now.
                        c.nodes[i].usage.apply(&node, &sched::Alloc { cpus: 0, ..a.clone() });
                        if !ending {
                            c.nodes[i].push(Order::Suspend { job: id, epoch });
                        }
                    } else {
                        c.nodes[i].usage.apply(&node, a);
                    }
                    c.nodes[i].runs.push(id);
                }
            }
            // Launch orders of steps are not persisted: every task of a running step whose end
            // is not known is sent again (an agent that has it ignores the repeat: it keeps
            // its tasks' records until their ends are acknowledged).
            // Not for a job restored from a backup: its steps and launch may have run and ended
            // since, and their agents forgotten them; only their agents' reports settle it.
            let restored = c.jobs[&id].restored;
            let steps: Vec<(u32, Vec<u32>)> = c.jobs[&id]
                .steps
                .iter()
                .filter(|s| !restored && s.id != BATCH_STEP && s.end.is_none())
                .map(|s| (s.id, s.done.clone()))
                .collect();
            for (step, done) in steps {
                for (name, t) in c.step_tasks(id, step) {
                    if !done.contains(&t.rank) {
                        c.order(&name, Order::Launch(t));
                    }
                }
            }
            // A kill order of a job being cancelled was lost with the old process: again.
            if c.jobs[&id].cancelling {
                let epoch = c.jobs[&id].epoch;
                for (name, _) in &allocs {
                    c.order(name, Order::Kill { job: id, epoch });
                }
            }
            // A launch that no agent confirmed may have been lost with the old process: send it
            // again, same run number; an agent that already has it ignores the repeat.
            if !c.jobs[&id].confirmed
                && !restored
                && let Some(first) = allocs.first().map(|(n, _)| n.clone())
            {
                let task = c.make_task(id, BATCH_STEP, 0, 0, 0, None, Vec::new());
                c.order(&first, Order::Launch(task));
            }
        }
        // Proxies get the same endpoints as before the restart, not an empty view.
        c.refresh_view();
        c
    }

    /// Settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// `scontrol reconfigure`: takes the settings of `new` (the configuration file read again)
    /// that apply at once (the job-submit script and its limits, KillWait, MinJobAge, the
    /// script and array size limits, expedited requeue, `nohold_on_prolog_fail`, the task
    /// prolog and epilog, the MPI default, the reboot program and ResumeTimeout). Returns the names of the keys that differ but take
    /// effect only when the controller (and, for the node scripts, the agents) restart.
    pub fn reconfigure(&mut self, new: &Settings) -> Vec<&'static str> {
        let s = &mut self.settings;
        s.job_submit = new.job_submit.clone();
        s.job_submit_timeout_ms = new.job_submit_timeout_ms;
        s.job_submit_memory = new.job_submit_memory;
        s.kill_wait = new.kill_wait;
        s.min_job_age = new.min_job_age;
        s.max_script_size = new.max_script_size;
        s.max_array = new.max_array;
        s.enable_expedited_requeue = new.enable_expedited_requeue;
        s.nohold_on_prolog_fail = new.nohold_on_prolog_fail;
        s.task_prolog = new.task_prolog.clone();
        s.task_epilog = new.task_epilog.clone();
        s.mpi_default = new.mpi_default.clone();
        s.reboot_program = new.reboot_program.clone();
        s.resume_timeout = new.resume_timeout;
        let mut later = Vec::new();
        let mut differs = |name: &'static str, d: bool| {
            if d {
                later.push(name);
            }
        };
        differs("cluster_name", s.cluster_name != new.cluster_name);
        differs("lease", s.lease != new.lease);
        differs("heartbeat", s.heartbeat_ms != new.heartbeat_ms);
        differs("failover", s.failover_ms != new.failover_ms);
        differs("array_window", s.array_window != new.array_window);
        differs("[[partition]]", s.cluster.partitions != new.cluster.partitions || s.partition_nodes != new.partition_nodes);
        differs("[scheduler]", s.sched != new.sched);
        differs("prolog", s.prolog != new.prolog);
        differs("epilog", s.epilog != new.epilog);
        differs("prolog_epilog_timeout", s.prolog_epilog_timeout != new.prolog_epilog_timeout);
        differs("health_check_program", s.health_check_program != new.health_check_program);
        differs("health_check_interval", s.health_check_interval != new.health_check_interval);
        differs("health_check_node_state", s.health_check_node_state != new.health_check_node_state);
        differs("gpu_health_check", s.gpu_health_check != new.gpu_health_check);
        later
    }

    /// The heartbeat interval agents are told to use, milliseconds: the configured one, else a
    /// tenth of the lease between 0.2 s and 10 s. Never more than half the lease, so an agent
    /// renews its lease at least twice per lease period.
    pub fn heartbeat_ms(&self) -> u64 {
        let lease_ms = (self.settings.lease.max(1) as u64) * 1000;
        let hb = if self.settings.heartbeat_ms > 0 { self.settings.heartbeat_ms } else { (lease_ms / 10).clamp(200, 10_000) };
        hb.min(lease_ms / 2).max(1)
    }

    /// How long a node may be silent before its replicas are replaced, milliseconds: the
    /// configured time, else three heartbeat intervals (at least 1.5 s).
    pub fn failover_ms(&self) -> i64 {
        if self.settings.failover_ms > 0 { self.settings.failover_ms } else { (3 * self.heartbeat_ms() as i64).max(1500) }
    }

    /// All jobs, by id, arrays' tails included ([`Controller::expand`] first, after
    /// [`Controller::accept`]).
    pub fn jobs(&self) -> Listing<'_> {
        debug_assert!(self.unexpanded.is_empty(), "expand() after accept()");
        self.jobs_from(0, false)
    }

    /// One job, a task of an array's tail too ([`Controller::expand`] first, after
    /// [`Controller::accept`]).
    pub fn job(&self, id: u64) -> Option<std::borrow::Cow<'_, Job>> {
        debug_assert!(self.unexpanded.is_empty(), "expand() after accept()");
        match self.jobs.get(&id) {
            Some(j) => Some(std::borrow::Cow::Borrowed(&**j)),
            None => self.jobs_from(id, false).next().filter(|j| j.req.id.0 == id),
        }
    }

    /// All nodes.
    pub fn nodes(&self) -> &[NodeRec] {
        &self.nodes
    }

    /// Names of nodes with orders waiting for their next heartbeat.
    pub fn nodes_with_orders(&self) -> Vec<String> {
        self.nodes.iter().filter(|n| !n.orders.is_empty()).map(|n| n.node.name.clone()).collect()
    }

    /// Records changed since the last call (to persist).
    pub fn take_dirty(&mut self) -> Dirty {
        let jobs =
            std::mem::take(&mut self.dirty_jobs.persist).into_iter().filter_map(|id| self.jobs.get(&id).map(|j| Job::clone(j))).collect();
        let nodes =
            std::mem::take(&mut self.dirty_nodes).into_iter().filter_map(|i| self.nodes.get(i).filter(|n| !n.deleted).cloned()).collect();
        let next_id = std::mem::take(&mut self.next_id_dirty).then_some(self.next_id);
        let services = std::mem::take(&mut self.dirty_services).into_iter().filter_map(|n| self.services.get(&n).cloned()).collect();
        let removed_services = std::mem::take(&mut self.removed_services);
        let arrays = std::mem::take(&mut self.dirty_arrays);
        let removed_nodes = std::mem::take(&mut self.removed_nodes);
        let creds = self.creds.take_dirty();
        let accounting = self.take_accounting();
        let reservations = std::mem::take(&mut self.reservations_dirty).then(|| self.reservations.values().cloned().collect());
        let kube = std::mem::take(&mut self.dirty_kube);
        Dirty { jobs, nodes, next_id, services, removed_services, arrays, removed_nodes, creds, accounting, reservations, kube }
    }

    fn node_defs(&self) -> Vec<Node> {
        self.nodes.iter().map(|n| n.node.clone()).collect()
    }

    /// Jobs that may not have ended (a superset: from the low-water mark on).
    fn active(&self) -> impl Iterator<Item = &Job> {
        self.jobs.range(self.active_from..).map(|(_, j)| &**j)
    }

    /// Moves the low-water mark past the jobs that have ended.
    fn advance_active(&mut self) {
        while let Some((&id, j)) = self.jobs.range(self.active_from..).next() {
            if !j.state.is_final() {
                break;
            }
            self.active_from = id + 1;
        }
    }

    /// The node definitions, from the cache while no node has changed.
    fn defs(&mut self) -> std::sync::Arc<Vec<Node>> {
        if self.defs.is_none() {
            self.defs = Some(std::sync::Arc::new(self.node_defs()));
        }
        self.defs.clone().expect("just built")
    }

    /// A node was added or its definition or state changed: what was derived from the nodes is
    /// stale. Every change of a `NodeRec::node` must call this.
    fn nodes_changed(&mut self) {
        self.defs = None;
        self.checked.clear();
    }

    /// [`sched::check_request`] against the current nodes, remembered by the request's shape: a
    /// check is O(nodes), and a busy cluster gets many submissions of few shapes.
    fn check_cached(&mut self, probe: &model::JobRequest) -> Result<(), Refused> {
        let mut key_req = probe.clone();
        key_req.id = JobId(0);
        key_req.submit_time = 0;
        key_req.name = String::new();
        // JSON, not `Debug`: the same fields, in a third of the time (this runs per submission).
        // A field of `JobRequest` marked `#[serde(skip)]` would drop out of this key.
        let key = serde_json::to_string(&key_req).unwrap_or_else(|_| format!("{key_req:?}"));
        if let Some(r) = self.checked.get(&key) {
            return r.clone().map_or(Ok(()), |m| Err(Refused::Invalid(m)));
        }
        let defs = self.defs();
        let r = sched::check_request(&defs, &self.settings.cluster, probe).err().map(|r| r.message);
        if self.checked.len() >= MAX_CHECKED {
            self.checked.clear();
        }
        self.checked.insert(key, r.clone());
        r.map_or(Ok(()), |m| Err(Refused::Invalid(m)))
    }

    /// Checks a submission as [`Controller::submit`] would, storing nothing (`sbatch
    /// --test-only`). Returns the partition it would run in.
    pub fn check_submit(&self, now: Time, batch: &BatchSpec, uid: u32, user: &str) -> Result<String, Refused> {
        let batch = &*self.in_reservation_partition(batch);
        let part = self
            .settings
            .cluster
            .partition(batch.partition.as_deref())
            .ok_or_else(|| Refused::Invalid(format!("invalid partition specified: {}", batch.partition.as_deref().unwrap_or(""))))?;
        let mut probe = batch.to_request(self.next_id, user, now, part.default_time);
        self.check_script_size(batch)?;
        Self::check_extras(batch, &JobSpec::script(""))?;
        if batch.time == Some(None) {
            probe.time_limit = probe.time_limit.min(part.max_time);
        }
        self.clamp_to_components(batch, &mut probe);
        (probe.account, probe.qos) = self.charge(uid, user, batch.account.as_deref(), batch.qos.as_deref(), batch.nice)?;
        self.check_partition_access(uid, user, batch.partition.as_deref(), &probe.account, probe.qos.as_deref())?;
        self.check_expedite(&probe)?;
        self.check_reservation(now, uid, user, &probe.account, batch.reservation.as_deref())?;
        self.check_components(uid, user, batch, &probe)?;
        sched::check_request(&self.node_defs(), &self.settings.cluster, &probe).map_err(|r| Refused::Invalid(r.message))?;
        self.check_job_limits(&probe, batch.array.as_ref().map_or(1, |a| a.indices.len() as u64) * probe.components() as u64)?;
        self.resolve_dependencies(&mut probe)?;
        Ok(part.name.clone())
    }

    /// `--requeue=expedite` needs the cluster's leave (Slurm's `enable_expedited_requeue`).
    fn check_expedite(&self, probe: &model::JobRequest) -> Result<(), Refused> {
        if probe.expedite && !self.settings.enable_expedited_requeue {
            return Err(Refused::Invalid(
                "--requeue=expedite is not enabled on this cluster (enable_expedited_requeue in the controller's tandem.toml, Slurm's SlurmctldParameters=enable_expedited_requeue)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// A job in an advance reservation that names no partition runs in the reservation's.
    fn in_reservation_partition<'b>(&self, batch: &'b BatchSpec) -> std::borrow::Cow<'b, BatchSpec> {
        match (&batch.partition, self.reservation_partition(batch.reservation.as_deref())) {
            (None, Some(p)) => std::borrow::Cow::Owned(BatchSpec { partition: Some(p), ..batch.clone() }),
            _ => std::borrow::Cow::Borrowed(batch),
        }
    }

    /// A limit the user did not give (`-t 0`, or none: the default) is cut to what every
    /// component's partition allows, as the first's is.
    fn clamp_to_components(&self, batch: &BatchSpec, probe: &mut model::JobRequest) {
        if batch.time.is_some_and(|t| t.is_some()) {
            return;
        }
        for c in &batch.het {
            if let Some(p) = self.settings.cluster.partition(c.partition.as_deref()) {
                probe.time_limit = probe.time_limit.min(p.max_time);
            }
        }
    }

    /// The heterogeneous job that id `id` is a later component of: its leader's id.
    fn het_leader(&self, id: u64) -> Option<u64> {
        (1..slurmcli::MAX_COMPONENTS as u64)
            .take_while(|&k| k < id)
            .find(|&k| self.jobs.get(&(id - k)).is_some_and(|j| j.req.components() as u64 > k))
            .map(|k| id - k)
    }

    /// Every job a submission depends on exists; one named by a heterogeneous job's component
    /// id is the whole job (its leader's).
    fn resolve_dependencies(&self, probe: &mut model::JobRequest) -> Result<(), Refused> {
        for d in &mut probe.dependencies {
            if let Some(j) = d.job {
                if self.exists(j.0) {
                    continue;
                }
                match self.het_leader(j.0) {
                    Some(leader) => d.job = Some(JobId(leader)),
                    None => return Err(Refused::Invalid(format!("job dependency problem: job {} does not exist", j.0))),
                }
            }
        }
        Ok(())
    }

    /// A heterogeneous job's later components: each partition exists and may be used, and the
    /// job is charged to one account and QOS and has one time limit (what a component gives
    /// differently is refused, not silently dropped).
    fn check_components(&self, uid: u32, user: &str, batch: &BatchSpec, probe: &model::JobRequest) -> Result<(), Refused> {
        if batch.het.is_empty() {
            return Ok(());
        }
        if batch.interactive {
            return Err(Refused::Invalid("heterogeneous allocations are not supported: submit a heterogeneous batch job".into()));
        }
        if batch.array.is_some() {
            return Err(Refused::Invalid("job arrays of heterogeneous jobs are not supported".into()));
        }
        if batch.het.len() + 1 > slurmcli::MAX_COMPONENTS {
            return Err(Refused::Invalid(format!("at most {} heterogeneous job components", slurmcli::MAX_COMPONENTS)));
        }
        for (k, c) in batch.het.iter().enumerate().map(|(k, c)| (k + 1, c)) {
            let differs = |what: &str| {
                Err(Refused::Invalid(format!(
                    "heterogeneous job component {k}: a different {what} than component 0's; here a heterogeneous job has one {what} for all its components"
                )))
            };
            if c.account.is_some() && c.account != batch.account {
                return differs("account");
            }
            if c.qos.is_some() && c.qos != batch.qos {
                return differs("QOS");
            }
            if c.time.is_some() && c.time != batch.time {
                return differs("time limit");
            }
            if !c.het.is_empty() || !c.script.is_empty() || c.array.is_some() || c.container.is_some() {
                return Err(Refused::Invalid(format!(
                    "heterogeneous job component {k}: only resource options belong to a later component"
                )));
            }
            let part = self.settings.cluster.partition(c.partition.as_deref()).ok_or_else(|| {
                Refused::Invalid(format!(
                    "heterogeneous job component {k}: invalid partition specified: {}",
                    c.partition.as_deref().unwrap_or("")
                ))
            })?;
            if probe.time_limit > part.max_time {
                return Err(Refused::Invalid(format!(
                    "heterogeneous job component {k}: requested time limit is invalid (exceeds the {} partition's limit of {} s)",
                    part.name, part.max_time
                )));
            }
            self.check_partition_access(uid, user, c.partition.as_deref(), &probe.account, probe.qos.as_deref())?;
        }
        Ok(())
    }

    /// The batch script is at most `max_script_size` bytes.
    fn check_script_size(&self, batch: &BatchSpec) -> Result<(), Refused> {
        let (size, limit) = (batch.script.len() as u64, self.settings.max_script_size);
        if size > limit {
            return Err(Refused::Invalid(slurmcli::script_too_large(size, limit)));
        }
        Ok(())
    }

    /// What a submission asks beyond its shape: the recorded
    /// options' sizes, and a name and script path that can be environment values (they reach
    /// the tasks' and the prolog's: no NUL bytes, bounded; a hand-made body may send anything).
    fn check_extras(batch: &BatchSpec, spec: &JobSpec) -> Result<(), Refused> {
        for (what, v, max) in [("job name", &batch.job_name, 200), ("script path", &batch.script_path, 4096)] {
            if let Some(v) = v
                && (v.len() > max || v.contains('\0'))
            {
                return Err(Refused::Invalid(format!("invalid {what}: no NUL bytes, at most {max} bytes")));
            }
        }
        if let Some(c) = &spec.container {
            c.check().map_err(|e| Refused::Invalid(e.0))?;
        }
        if let Some((k, _)) = spec.recorded.iter().find(|(_, v)| v.len() > 4096 || v.contains(['\0', '\n'])) {
            return Err(Refused::Invalid(format!("invalid {k}: no newlines or NUL bytes, at most 4096 bytes")));
        }
        Ok(())
    }

    /// Accepts a submission: validates it against the cluster (nothing is stored when it is
    /// refused), expands arrays into their tasks, and returns the new job ids.
    pub fn submit(&mut self, now: Time, spec: JobSpec, batch: &BatchSpec, user: &str) -> Result<Vec<u64>, Refused> {
        let ids = self.accept(now, spec, batch, user)?;
        self.expand();
        Ok(ids)
    }

    /// [`Controller::submit`] without making an array's tasks yet: what must be durable (the
    /// array's one record, the next id) is in [`Controller::take_dirty`] at once, and the tasks
    /// appear at the next [`Controller::expand`]. A daemon answers the submission once the
    /// record is durable and calls `expand` before anything else reads or changes the controller,
    /// so a large array is acknowledged without waiting for its tasks to be built in memory
    /// (as Slurm keeps a pending array as one record).
    pub fn accept(&mut self, now: Time, spec: JobSpec, batch: &BatchSpec, user: &str) -> Result<Vec<u64>, Refused> {
        self.accept_new(now, spec, batch, user, None)
    }

    /// [`Controller::accept`] of a submission that carries an idempotency key (the client's
    /// own, for its retries: `Idempotency-Key`): a user's second submission with a key given
    /// in the last [`IDEMPOTENCY_RETENTION`] makes nothing and answers with the first one's
    /// job ids. Returns the ids, and whether they are a former submission's.
    pub fn accept_once(
        &mut self,
        now: Time,
        spec: JobSpec,
        batch: &BatchSpec,
        user: &str,
        key: Option<&str>,
    ) -> Result<(Vec<u64>, bool), Refused> {
        if let Some(k) = key {
            self.forget_keys(now);
            if let Some(&(first, count, _)) = self.idempotency.get(&(user.to_string(), k.to_string())) {
                return Ok(((first..first + count).collect(), true));
            }
        }
        let ids = self.accept_new(now, spec, batch, user, key)?;
        Ok((ids, false))
    }

    /// Forgets the idempotency keys given before `now` less the retention.
    fn forget_keys(&mut self, now: Time) {
        while let Some((t, _, _)) = self.idempotency_order.front()
            && *t < now - IDEMPOTENCY_RETENTION
        {
            let (t, u, k) = self.idempotency_order.pop_front().expect("a front");
            if self.idempotency.get(&(u.clone(), k.clone())).is_some_and(|e| e.2 == t) {
                self.idempotency.remove(&(u, k));
            }
        }
    }

    /// Remembers the idempotency key of a job (or an array's record) that has one: at
    /// acceptance, and when state is loaded.
    fn remember_key(&mut self, j: &Job, count: u64, now: Time) {
        let Some(k) = &j.idempotency_key else { return };
        let t = j.req.submit_time;
        if t < now - IDEMPOTENCY_RETENTION {
            return;
        }
        let id = j.array.as_ref().map_or(j.req.id.0, |a| a.array_job);
        self.idempotency.insert((j.req.user.clone(), k.clone()), (id, count, t));
        self.idempotency_order.push_back((t, j.req.user.clone(), k.clone()));
    }

    fn accept_new(&mut self, now: Time, spec: JobSpec, batch: &BatchSpec, user: &str, key: Option<&str>) -> Result<Vec<u64>, Refused> {
        let resv_batch = self.in_reservation_partition(batch);
        let batch = &*resv_batch;
        let part = self
            .settings
            .cluster
            .partition(batch.partition.as_deref())
            .ok_or_else(|| Refused::Invalid(format!("invalid partition specified: {}", batch.partition.as_deref().unwrap_or(""))))?;
        let default_time = part.default_time;
        let first = self.next_id;
        let mut probe = batch.to_request(first, user, now, default_time);
        self.check_script_size(batch)?;
        Self::check_extras(batch, &spec)?;
        if batch.time == Some(None) {
            // -t 0 (unlimited): as long as the partition allows.
            probe.time_limit = probe.time_limit.min(part.max_time);
        }
        self.clamp_to_components(batch, &mut probe);
        (probe.account, probe.qos) = self.charge(spec.uid, user, batch.account.as_deref(), batch.qos.as_deref(), batch.nice)?;
        self.check_partition_access(spec.uid, user, batch.partition.as_deref(), &probe.account, probe.qos.as_deref())?;
        self.check_expedite(&probe)?;
        self.check_reservation(now, spec.uid, user, &probe.account, batch.reservation.as_deref())?;
        self.check_components(spec.uid, user, batch, &probe)?;
        self.check_cached(&probe)?;
        // Each component of a heterogeneous job counts as a job (Slurm's rule).
        self.check_job_limits(&probe, batch.array.as_ref().map_or(1, |a| a.indices.len() as u64) * probe.components() as u64)?;
        self.resolve_dependencies(&mut probe)?;
        if let Some(a) = &batch.array
            && (a.indices.is_empty() || a.indices.windows(2).any(|w| w[0] >= w[1]) || a.max_running == Some(0))
        {
            // The CLI never sends this; a hand-made API body might.
            return Err(Refused::Invalid(
                "invalid job array specification: indices must be non-empty and ascending without repeats, and %N positive".into(),
            ));
        }
        if let Some(&last) = batch.array.as_ref().and_then(|a| a.indices.last())
            && last >= self.settings.max_array
        {
            return Err(Refused::Invalid(format!(
                "invalid job array specification: the largest index is {} (MaxArraySize {})",
                self.settings.max_array.saturating_sub(1),
                self.settings.max_array
            )));
        }
        let mut req = probe;
        req.id = JobId(first);
        let spec = self.share_spec(spec);
        let reason = if batch.hold { PendingReason::JobHeldUser } else { PendingReason::None };
        let Some(a) = &batch.array else {
            // A heterogeneous job's later components have ids of their own (the leader's plus
            // the offset, `SLURM_JOB_ID_HET_GROUP_k`): no other job gets them.
            let ids = req.components() as u64;
            let job = Job { reason, idempotency_key: key.map(str::to_string), ..Job::new(req, spec) };
            self.remember_key(&job, 1, now);
            self.jobs.insert(first, Box::new(job));
            self.dirty_jobs.insert(first);
            self.next_id = first + ids;
            self.next_id_dirty = true;
            return Ok(vec![first]);
        };
        // An array: one durable record; its tasks share one copy of the spec and get records of
        // their own only when something happens to them.
        let (min, max) = (a.indices[0], *a.indices.last().expect("non-empty"));
        let info = ArrayInfo { array_job: first, task: min, count: a.indices.len() as u32, min, max, max_running: a.max_running };
        req.array = Some(model::ArrayTask { array_job: JobId(first), task: min });
        let record = ArrayRecord::new(
            Job { reason, array: Some(info), idempotency_key: key.map(str::to_string), ..Job::new(req, spec) },
            &a.indices,
        );
        self.remember_key(&record.first, a.indices.len() as u64, now);
        let ids: Vec<u64> = (first..first + a.indices.len() as u64).collect();
        self.dirty_arrays.push(record.clone());
        self.unexpanded.push(record);
        self.next_id = first + ids.len() as u64;
        self.next_id_dirty = true;
        Ok(ids)
    }

    /// Makes the tasks of the arrays accepted since the last call ([`Controller::accept`]):
    /// the first window of each (`tails`).
    pub fn expand(&mut self) {
        for record in std::mem::take(&mut self.unexpanded) {
            self.take_array(record);
        }
    }

    fn owned(&self, uid: u32, id: u64) -> Result<&Job, Refused> {
        let j = self.jobs.get(&id).ok_or_else(|| Refused::NotFound(format!("invalid job id specified: {id}")))?;
        if uid != j.spec.uid && !self.is_operator(uid) {
            return Err(Refused::Forbidden(format!("access/permission denied: job {id} belongs to another user")));
        }
        Ok(j)
    }

    /// Cancels a job (or, with `signal`, only signals its running tasks).
    pub fn cancel(&mut self, now: Time, uid: u32, id: u64, signal: Option<i32>) -> Result<(), Refused> {
        self.ensure_owned(uid, id)?;
        let state = self.owned(uid, id)?.state;
        match (state, signal) {
            (s, _) if is_final(s) => Err(Refused::Conflict(format!("job {id} has already finished"))),
            (JobState::Pending, Some(_)) => Err(Refused::Conflict(format!("job {id} is pending: nothing to signal"))),
            (JobState::Pending, None) => {
                let j = self.jobs.get_mut(&id).expect("checked");
                j.state = j.state.step(JobEvent::Cancel).expect("pending can be cancelled");
                j.end = Some(now);
                j.cancelled_by = Some(uid);
                self.dirty_jobs.insert(id);
                Ok(())
            }
            (_, Some(sig)) => {
                let j = &self.jobs[&id];
                let (epoch, nodes) = (j.epoch, j.allocs.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>());
                for n in nodes {
                    self.order(&n, Order::Signal { job: id, epoch, signal: sig, batch_only: false, step: None });
                }
                Ok(())
            }
            (_, None) => {
                // As Slurm's: SIGCONT and SIGTERM to every task now, SIGKILL to what is left
                // KillWait later (`enforce_limits`), so a script that exits at SIGTERM ends with
                // signal 15.
                let kill_at = now.saturating_add(self.settings.kill_wait);
                let j = self.jobs.get_mut(&id).expect("checked");
                if j.state == JobState::Suspended {
                    // Thawed first, so that it sees its SIGTERM (it stays suspended, its CPUs
                    // lent, for the KillWait it has to end).
                    let (epoch, nodes) = (j.epoch, j.allocs.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>());
                    for n in nodes {
                        self.order(&n, Order::Resume { job: id, epoch });
                    }
                }
                let j = self.jobs.get_mut(&id).expect("checked");
                j.cancelling = true;
                j.cancelled_by = Some(uid);
                j.kill_at = Some(j.kill_at.map_or(kill_at, |k| k.min(kill_at)));
                let (epoch, nodes) = (j.epoch, j.allocs.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>());
                self.dirty_jobs.insert(id);
                for n in nodes {
                    for signal in [18, 15] {
                        self.order(&n, Order::Signal { job: id, epoch, signal, batch_only: false, step: None });
                    }
                }
                self.limits_due = self.limits_due.min(kill_at);
                Ok(())
            }
        }
    }

    /// Cancels (or, with `signal`, signals) many jobs as [`Controller::cancel`] does each, the
    /// pending tails of arrays wholly among them in one change each (`tails`): returns the jobs
    /// refused, with why.
    pub fn cancel_many(&mut self, now: Time, uid: u32, mut ids: Vec<u64>, signal: Option<i32>) -> Vec<(u64, Refused)> {
        ids.sort_unstable();
        ids.dedup();
        if signal.is_none() {
            self.cancel_tails(now, uid, &mut ids);
        }
        let mut out = Vec::new();
        for id in ids {
            if let Err(e) = self.cancel(now, uid, id, signal) {
                out.push((id, e));
            }
        }
        out
    }

    /// Sends `signal` to the batch step of a running job only (its shell and the processes it
    /// started), not to its other steps: `scancel --batch`.
    pub fn signal_batch(&mut self, uid: u32, id: u64, signal: i32) -> Result<(), Refused> {
        self.ensure_owned(uid, id)?;
        let j = self.owned(uid, id)?;
        if !j.state.on_nodes() {
            return Err(Refused::Conflict(format!("job {id} is not running")));
        }
        if !(1..=64).contains(&signal) {
            return Err(Refused::Invalid(format!("invalid signal {signal}")));
        }
        let (epoch, nodes) = (j.epoch, j.allocs.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>());
        for n in nodes {
            self.order(&n, Order::Signal { job: id, epoch, signal, batch_only: true, step: None });
        }
        Ok(())
    }

    /// Sends `signal` to the tasks of one step of a running job (`srun` passing on a signal or
    /// a Ctrl-C, `scancel --signal=N J.S`; SIGKILL ends the step: `scancel J.S`).
    pub fn signal_step(&mut self, uid: u32, id: u64, step: u32, signal: i32) -> Result<(), Refused> {
        self.ensure_owned(uid, id)?;
        let j = self.owned(uid, id)?;
        if !j.state.on_nodes() {
            return Err(Refused::Conflict(format!("job {id} is not running")));
        }
        if !(1..=64).contains(&signal) {
            return Err(Refused::Invalid(format!("invalid signal {signal}")));
        }
        let Some(st) = j.steps.iter().find(|s| s.id == step) else {
            return Err(Refused::NotFound(format!("invalid job step specified: {id}.{step}")));
        };
        if st.end.is_some() {
            return Err(Refused::Conflict(format!("job step {id}.{step} has already finished")));
        }
        let (epoch, nodes) = (j.epoch, st.layout.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>());
        for n in nodes {
            self.order(&n, Order::Signal { job: id, epoch, signal, batch_only: false, step: Some(step) });
        }
        Ok(())
    }

    /// Attaches `io` (a `sattach` listener) to running step `step` of job `id`: its owner's
    /// (or root's) only, and only a step whose streams go to its `srun` (the batch step's and
    /// an `srun -o` step's go to files). Returns the step's layout.
    pub fn attach_step(&mut self, uid: u32, id: u64, step: u32, io: StepIo) -> Result<Vec<(String, u32)>, Refused> {
        self.ensure_owned(uid, id)?;
        let j = self.owned(uid, id)?;
        if !j.state.on_nodes() {
            return Err(Refused::Conflict(format!("job {id} is not running")));
        }
        let Some(st) = j.steps.iter().find(|s| s.id == step) else {
            return Err(Refused::NotFound(format!("invalid job step specified: {id}.{step}")));
        };
        if st.end.is_some() {
            return Err(Refused::Conflict(format!("job step {id}.{step} has already finished")));
        }
        match &st.spec.io {
            None => {
                return Err(Refused::Invalid(format!(
                    "job step {id}.{step} has no I/O to attach to: its output goes to files (sattach attaches to srun steps)"
                )));
            }
            Some(own) if own.pty => {
                return Err(Refused::Invalid(format!("job step {id}.{step} runs on a terminal (srun --pty): not attachable")));
            }
            Some(_) => {}
        }
        let check = StepSpec { io: Some(io.clone()), ..StepSpec::default() };
        check.check().map_err(Refused::Invalid)?;
        if io.pty || io.pmi || io.winsize.is_some() {
            return Err(Refused::Invalid("sattach: a terminal or PMI cannot be attached".into()));
        }
        let (epoch, layout) = (j.epoch, st.layout.clone());
        for (n, _) in &layout {
            self.order(n, Order::Attach { job: id, epoch, step, io: io.clone() });
        }
        Ok(layout)
    }

    /// Where a job's batch script (or a service replica) writes its output, for `kubectl logs`
    /// of its Pod: on `node` (the job's first node when `None`), as its user. Only the job's
    /// owner and root may read it (the files are the owner's, read on the node as the owner).
    pub fn task_output(&self, uid: u32, id: u64, node: Option<&str>) -> Result<TaskOutput, Refused> {
        let j = self.jobs.get(&id).ok_or_else(|| Refused::NotFound(format!("invalid job id specified: {id}")))?;
        if uid != j.spec.uid && uid != 0 {
            return Err(Refused::Forbidden(format!("access/permission denied: job {id} belongs to another user")));
        }
        if j.spec.interactive {
            return Err(Refused::Conflict(format!(
                "job {id} is an allocation (salloc): it has no output of its own, its steps write theirs"
            )));
        }
        let allocs = if j.allocs.is_empty() { &j.last_allocs } else { &j.allocs };
        let Some((first, _)) = allocs.first() else {
            return Err(Refused::Conflict(format!("job {id} has not started: it has no output yet")));
        };
        if let Some(n) = node
            && n != first
        {
            let why = if allocs.iter().any(|(a, _)| a == n) {
                format!("job {id}'s batch script runs on {first}, not on {n}: {n} runs only its srun steps, whose output srun writes")
            } else {
                format!("job {id} did not run on {n}")
            };
            return Err(Refused::NotFound(why));
        }
        let (out, err) = output_files(j, None, BATCH_STEP, 0, 0, first);
        let mut files = vec![out];
        if err != files[0] {
            files.push(err);
        }
        Ok(TaskOutput {
            node: first.clone(),
            job: id,
            epoch: j.epoch,
            files,
            uid: j.spec.uid,
            gid: j.spec.gid,
            running: !j.state.is_final() && !j.allocs.is_empty(),
        })
    }

    /// Orders `node`'s agent to send a job's output to the controller ([`Order::Output`]).
    pub fn order_output(&mut self, node: &str, job: u64, epoch: u32, read: OutputRead) {
        self.order(node, Order::Output { job, epoch, read });
    }

    /// Ends an allocation (`salloc`'s command exited with `code`): its placeholder and any
    /// step still running are stopped, and the job ends COMPLETED (or FAILED) with `code`.
    pub fn complete(&mut self, uid: u32, id: u64, code: i32) -> Result<(), Refused> {
        self.ensure_owned(uid, id)?;
        let j = self.owned(uid, id)?;
        if !j.spec.interactive {
            return Err(Refused::Invalid(format!("job {id} is a batch job: its script's end completes it")));
        }
        if !j.state.on_nodes() {
            return Err(Refused::Conflict(format!("job {id} is not running")));
        }
        if !(0..=255).contains(&code) {
            return Err(Refused::Invalid(format!("invalid exit code {code}: 0 to 255")));
        }
        let j = self.jobs.get_mut(&id).expect("checked");
        j.completed = Some(code);
        let (epoch, nodes) = (j.epoch, j.allocs.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>());
        self.dirty_jobs.insert(id);
        for n in nodes {
            self.order(&n, Order::Kill { job: id, epoch });
        }
        Ok(())
    }

    /// Holds a pending job (`scontrol hold`).
    pub fn hold(&mut self, uid: u32, id: u64, hold: bool) -> Result<(), Refused> {
        self.ensure_owned(uid, id)?;
        if self.owned(uid, id)?.state != JobState::Pending {
            return Err(Refused::Conflict(format!("job {id} is not pending")));
        }
        // Whether a job restored from a backup runs again is an operator's call: it may have
        // run since the backup.
        if !hold && self.jobs.get(&id).is_some_and(|j| j.restored) && !self.is_operator(uid) {
            return Err(Refused::Forbidden(format!(
                "job {id} is held because the controller was restored from a backup (it may have run since): an operator releases it"
            )));
        }
        let j = self.jobs.get_mut(&id).expect("checked");
        j.req.held = hold;
        j.prolog_held &= hold;
        j.restored &= hold;
        if hold {
            // Held jobs are not in scheduling passes; a released one gets its reason from the next.
            (j.reason, j.expected_start) = (PendingReason::JobHeldUser, None);
        }
        self.dirty_jobs.insert(id);
        Ok(())
    }

    /// Changes a pending job's time limit (`scontrol update JobId=.. TimeLimit=..`). Users may
    /// only lower it; root may raise it within the partition's maximum.
    pub fn set_time_limit(&mut self, uid: u32, id: u64, limit: Time) -> Result<(), Refused> {
        self.ensure_owned(uid, id)?;
        let j = self.owned(uid, id)?;
        if j.state != JobState::Pending {
            return Err(Refused::Conflict(format!("job {id} is not pending")));
        }
        if !self.is_operator(uid) && limit > j.req.time_limit {
            return Err(Refused::Forbidden("only root can raise a job's time limit".into()));
        }
        let max = self.settings.cluster.partition(j.req.partition.as_deref()).map_or(Time::MAX, |p| p.max_time);
        if limit > max {
            return Err(Refused::Invalid(format!("requested time limit exceeds the partition's limit of {max} s")));
        }
        self.jobs.get_mut(&id).expect("checked").req.time_limit = limit;
        self.dirty_jobs.insert(id);
        Ok(())
    }

    /// Requeues a running (or finished) job (`scontrol requeue`). A cancelled job, or one
    /// being cancelled, is never run again.
    pub fn requeue(&mut self, uid: u32, id: u64) -> Result<(), Refused> {
        self.ensure_owned(uid, id)?;
        let j = self.owned(uid, id)?;
        let s = j.state;
        if s == JobState::Pending {
            return Err(Refused::Conflict(format!("job {id} is already pending")));
        }
        if s == JobState::Cancelled || j.cancelling {
            return Err(Refused::Conflict(format!("job {id} was cancelled: it is not run again")));
        }
        if s.on_nodes() {
            // Back to the queue once this run's tasks are gone (as Slurm's requeue waits for
            // its job to complete): kill them now, requeue at the batch script's end. A
            // suspended job comes back held, as Slurm's.
            let j = self.jobs.get_mut(&id).expect("checked");
            j.requeueing = true;
            j.req.held |= s == JobState::Suspended;
            let (epoch, nodes) = (j.epoch, j.allocs.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>());
            self.dirty_jobs.insert(id);
            for n in nodes {
                self.order(&n, Order::Kill { job: id, epoch });
            }
            return Ok(());
        }
        self.requeue_job(id, true);
        Ok(())
    }

    fn order(&mut self, node: &str, o: Order) {
        if let Some(&i) = self.node_index.get(node) {
            self.nodes[i].push(o);
        }
    }

    /// Releases a job's allocation and, for a running job, orders its tasks killed.
    fn release(&mut self, id: u64) {
        let Some(j) = self.jobs.get(&id) else { return };
        // The epilog's environment on each node, while the allocation is known (service
        // replicas run none: their nodes are the service's, not a job's).
        let epilogs: Vec<Vec<(String, String)>> = match (&self.settings.epilog, &j.replica) {
            (Some(_), None) => (0..j.allocs.len()).map(|k| self.script_env(j, k, "epilog_slurmd")).collect(),
            _ => Vec::new(),
        };
        let Some(j) = self.jobs.get_mut(&id) else { return };
        let allocs = std::mem::take(&mut j.allocs);
        let epoch = j.epoch;
        // A run that ends suspended lent its CPUs: they are not taken back twice.
        let lent = j.suspension.as_ref().map(|s| j.end.unwrap_or(s.since));
        if let Some(at) = lent {
            self.end_suspension(id, at);
        }
        for (k, (name, a)) in allocs.iter().enumerate() {
            if let Some(&i) = self.node_index.get(name) {
                match lent {
                    Some(_) => self.nodes[i].usage.release(&sched::Alloc { cpus: 0, ..a.clone() }),
                    None => self.nodes[i].usage.release(a),
                }
                self.nodes[i].runs.retain(|r| *r != id);
                self.nodes[i].push(Order::Kill { job: id, epoch });
                if let Some(env) = epilogs.get(k) {
                    self.nodes[i].push(Order::Epilog { job: id, epoch, env: env.clone() });
                }
                self.touched_nodes.insert(i as u32);
            }
        }
    }

    /// What a prolog or epilog (`context`: `prolog_slurmd`, `epilog_slurmd`) on node `k` of
    /// job `j`'s allocation sees, as Slurm's: the job's id, user, uid and gid, nodes,
    /// partition, account, name, the node's GPUs of the job, the node's and cluster's names.
    fn script_env(&self, j: &Job, k: usize, context: &str) -> Vec<(String, String)> {
        let nodes: Vec<String> = j.allocs.iter().map(|(n, _)| n.clone()).collect();
        let (node, gpus) = j
            .allocs
            .get(k)
            .map_or((String::new(), String::new()), |(n, a)| (n.clone(), a.gpus.iter().map(u8::to_string).collect::<Vec<_>>().join(",")));
        let part = j.req.partition.clone().or_else(|| self.settings.cluster.partitions.first().map(|p| p.name.clone())).unwrap_or_default();
        [
            ("SLURM_SCRIPT_CONTEXT", context.to_string()),
            ("SLURM_JOB_ID", j.req.id.0.to_string()),
            ("SLURM_JOBID", j.req.id.0.to_string()),
            ("SLURM_JOB_USER", j.req.user.clone()),
            ("SLURM_JOB_UID", j.spec.uid.to_string()),
            ("SLURM_JOB_GID", j.spec.gid.to_string()),
            ("SLURM_JOB_NAME", j.req.name.clone()),
            ("SLURM_JOB_NODELIST", slurmcli::compress(&nodes)),
            ("SLURM_JOB_PARTITION", part),
            ("SLURM_JOB_ACCOUNT", j.req.account.clone()),
            ("SLURM_JOB_GPUS", gpus.clone()),
            ("CUDA_VISIBLE_DEVICES", gpus),
            ("SLURM_CLUSTER_NAME", self.settings.cluster_name.clone()),
            ("SLURMD_NODENAME", node),
            ("SLURM_RESTART_COUNT", j.restart_count.to_string()),
        ]
        .into_iter()
        .chain(j.req.reservation.clone().map(|r| ("SLURM_JOB_RESERVATION", r)))
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// A node's own report that it must be drained (its epilog, prolog or health check
    /// failed): drained with the reason, as Slurm's, unless already drained or down (whose
    /// reason stays). `health`: the health check's drain, which its next pass undoes.
    pub fn agent_drain(&mut self, name: &str, reason: &str, health: bool) -> Result<(), Refused> {
        let &i = self.node_index.get(name).ok_or_else(|| Refused::NotFound(format!("node {name} is not registered")))?;
        let rec = &mut self.nodes[i];
        let reason: String = reason.chars().filter(|c| !c.is_control()).take(256).collect();
        if rec.reboot.as_ref().is_some_and(|r| r.issued_at.is_some()) {
            // Its reboot program failed (or anything else went wrong before it rebooted): the
            // reboot is over, the node stays out of service with the agent's words.
            rec.reboot = None;
            rec.orders.retain(|(_, o)| !matches!(o, Order::Reboot { .. }));
            if rec.node.state == NodeState::Up {
                rec.node.state = NodeState::Drain;
            }
            rec.reason = Some(reason);
            (rec.health_drained, rec.self_drained) = (health, false);
            self.dirty_nodes.insert(i);
            self.nodes_changed();
            return Ok(());
        }
        if rec.node.state == NodeState::Drain {
            // Drained by its health check, now by a failed prolog or epilog: that reason wins,
            // and the check's next pass no longer resumes it.
            if rec.health_drained && !health {
                rec.health_drained = false;
                rec.reason = Some(reason);
                self.dirty_nodes.insert(i);
            }
        } else if let Ok(next) = rec.node.state.step(NodeEvent::Drain) {
            rec.node.state = next;
            rec.reason = Some(reason);
            rec.health_drained = health;
            self.dirty_nodes.insert(i);
            self.nodes_changed();
        }
        Ok(())
    }

    /// A program on node `name` (NHC), with the node's own credential, drains or resumes that
    /// node (`scontrol update nodename=... state=drain|resume`): it may drain it, and resume a
    /// drain the node made itself (by such a program or by its health check), nothing else.
    pub fn node_self_state(&mut self, name: &str, drain: bool, reason: Option<String>) -> Result<(), Refused> {
        let &i = self.node_index.get(name).ok_or_else(|| Refused::NotFound(format!("invalid node name specified: {name}")))?;
        if drain {
            let reason = reason.unwrap_or_else(|| "drained by the node's own check".into());
            let rec = &mut self.nodes[i];
            if rec.node.state == NodeState::Drain {
                return Ok(());
            }
            rec.node.state = rec.node.state.step(NodeEvent::Drain).map_err(|e| Refused::Conflict(e.to_string()))?;
            rec.reason = Some(reason.chars().filter(|c| !c.is_control()).take(256).collect());
            (rec.self_drained, rec.health_drained) = (true, false);
            self.dirty_nodes.insert(i);
            self.nodes_changed();
            return Ok(());
        }
        let rec = &mut self.nodes[i];
        if rec.node.state != NodeState::Drain {
            return Ok(());
        }
        if !(rec.self_drained || rec.health_drained) {
            return Err(Refused::Forbidden(format!(
                "node {name} may resume only a drain it made itself; this one is {:?}'s to undo (root)",
                rec.reason.clone().unwrap_or_default()
            )));
        }
        rec.node.state = rec.node.state.step(NodeEvent::Resume).map_err(|e| Refused::Conflict(e.to_string()))?;
        (rec.reason, rec.self_drained, rec.health_drained) = (None, false, false);
        self.dirty_nodes.insert(i);
        self.nodes_changed();
        Ok(())
    }

    /// A node's health check passed: a drain (or a down) the check made is undone (any other
    /// stays).
    pub fn agent_healthy(&mut self, name: &str) -> Result<(), Refused> {
        let &i = self.node_index.get(name).ok_or_else(|| Refused::NotFound(format!("node {name} is not registered")))?;
        let rec = &mut self.nodes[i];
        if rec.health_down && rec.node.state == NodeState::Down {
            rec.node.state = rec.node.state.step(NodeEvent::Resume).map_err(|e| Refused::Conflict(e.to_string()))?;
            rec.reason = None;
            rec.health_down = false;
            self.dirty_nodes.insert(i);
            self.nodes_changed();
            return Ok(());
        }
        if rec.health_drained && rec.node.state == NodeState::Drain {
            rec.node.state = rec.node.state.step(NodeEvent::Resume).map_err(|e| Refused::Conflict(e.to_string()))?;
            rec.reason = None;
            rec.health_drained = false;
            self.dirty_nodes.insert(i);
            self.nodes_changed();
        }
        Ok(())
    }

    /// Puts a running job back in the queue (same id, restart count + 1), or fails it as
    /// NODE_FAIL when it may not be requeued and `force` is off.
    /// Says in a preempted job's message who preempted it (`scontrol show job`'s `Message`, the
    /// Kubernetes `Preempted` event): the job, and the service it is a replica of.
    fn note_preemption(&mut self, id: u64) {
        let Some(by) = self.jobs.get(&id).and_then(|j| j.preempted_by) else { return };
        let what = match self.jobs.get(&by) {
            Some(p) => {
                let qos = p.req.qos.as_deref().map(|q| format!(" (qos {q})")).unwrap_or_default();
                match &p.replica {
                    Some(r) => format!("job {by}, a replica of service {}{qos}", r.service),
                    None => format!("job {by}{qos}"),
                }
            }
            None => format!("job {by}"),
        };
        if let Some(j) = self.jobs.get_mut(&id) {
            j.message = Some(format!("{PREEMPTED_PREFIX}{what}; requeued"));
            j.preempted_by = None;
        }
    }

    fn requeue_job(&mut self, id: u64, force: bool) -> bool {
        self.release(id);
        let Some(j) = self.jobs.get_mut(&id) else { return false };
        self.dirty_jobs.insert(id);
        self.active_from = self.active_from.min(id);
        if let Some(r) = &mut j.replica {
            // A replica is never requeued: its service makes a new one (already, if it was
            // lost or drained first).
            r.state = r.state.step(model::ReplicaEvent::Ended).unwrap_or(model::ReplicaState::Gone);
            j.state = if j.cancelling || j.preempt_at.is_some() { JobState::Cancelled } else { JobState::NodeFail };
            j.end = Some(j.end.unwrap_or(0).max(j.start.unwrap_or(0)));
            return false;
        }
        let force = force || j.requeueing;
        if !force && (j.cancelling || j.timeout_at.is_some()) {
            // A cancel (or a time limit) already decided how this run ends: its node failing
            // now changes nothing, and the job is not run again.
            let ev = if j.cancelling { JobEvent::Cancel } else { JobEvent::TimeLimit };
            j.state = j.state.step(ev).unwrap_or(if j.cancelling { JobState::Cancelled } else { JobState::Timeout });
            j.end = Some(j.end.unwrap_or(0).max(j.start.unwrap_or(0)));
            return false;
        }
        // A job restored from a backup whose run is found lost may have ended after the backup:
        // held, not failed and not run again, until an operator says which.
        let restored = j.restored;
        if !force && !j.spec.requeue && !restored {
            j.state = j.state.step(JobEvent::NodeFail).unwrap_or(JobState::NodeFail);
            j.end = Some(j.end.unwrap_or(0).max(j.start.unwrap_or(0)));
            j.node_failed = true;
            return false;
        }
        j.state = JobState::Pending;
        j.restart_count += 1;
        j.reason = if j.req.held { PendingReason::JobHeldUser } else { PendingReason::None };
        j.steps.clear();
        j.start = None;
        j.timeout_at = None;
        j.warned = false;
        j.cancelling = false;
        j.kill_at = None;
        j.preempt_at = None;
        j.preempted_by = None;
        j.requeueing = false;
        j.confirmed = false;
        if restored {
            j.req.held = true;
            (j.reason, j.expected_start) = (PendingReason::Restored, None);
        }
        true
    }

    /// The partitions a node belongs to (empty: every partition).
    fn partitions_of(&self, name: &str) -> Vec<String> {
        let member: Vec<String> = self
            .settings
            .cluster
            .partitions
            .iter()
            .filter(|p| {
                self.settings
                    .partition_nodes
                    .iter()
                    .find(|(n, _)| *n == p.name)
                    .is_none_or(|(_, nodes)| nodes.as_ref().is_none_or(|l| l.iter().any(|x| x == name)))
            })
            .map(|p| p.name.clone())
            .collect();
        if member.len() == self.settings.cluster.partitions.len() { Vec::new() } else { member }
    }

    /// Registers (or re-registers) a node agent that runs nothing.
    pub fn register(&mut self, now: Time, node: Node, addr: String) -> Result<(), Refused> {
        self.register_with(now, node, addr, &[], &[])
    }

    /// Registers (or re-registers) a node agent, with the tasks it runs (adopted ones
    /// included) and those that ended since it last reported. Reconciles: every run placed
    /// here whose tasks the agent does not have ends at once, as a node failure (requeued, or
    /// NODE_FAIL, per the job's requeue setting); every task it has of a run that is over is
    /// ordered killed.
    pub fn register_with(
        &mut self,
        now: Time,
        mut node: Node,
        addr: String,
        running: &[TaskKey],
        exits: &[TaskExit],
    ) -> Result<(), Refused> {
        node.partitions = self.partitions_of(&node.name);
        if node.partitions.is_empty()
            && !self.settings.partition_nodes.is_empty()
            && self.settings.partition_nodes.iter().all(|(_, n)| n.is_some())
        {
            // Every partition lists its nodes and none lists this one.
            let all: Vec<String> = self.settings.cluster.partitions.iter().map(|p| p.name.clone()).collect();
            let listed = self.settings.partition_nodes.iter().any(|(_, n)| n.as_ref().is_some_and(|l| l.contains(&node.name)));
            if !listed {
                node.partitions = vec![format!("(none of {})", all.join(","))];
            }
        }
        valid_node_name(&node.name)?;
        let node_name = node.name.clone();
        let lease_until = now + self.settings.lease;
        match self.node_index.get(&node.name).copied() {
            Some(i) => {
                let rec = &mut self.nodes[i];
                // Keep the state an operator set (drain); a node that was down comes back up,
                // unless its health check marked it down.
                node.state = match rec.node.state {
                    NodeState::Drain => NodeState::Drain,
                    NodeState::Down if rec.health_down || rec.reboot_down => NodeState::Down,
                    NodeState::Up | NodeState::Down => NodeState::Up,
                };
                if rec.usage.jobs == 0 {
                    rec.usage = NodeUsage::for_node(&node);
                    rec.node = node;
                } else {
                    rec.node.state = node.state;
                }
                if rec.node.state == NodeState::Up {
                    rec.reason = None;
                }
                rec.lease_until = lease_until;
                rec.last_seen = now;
                rec.seen_ms = self.now_ms.max(now * 1000);
                rec.addr = addr;
                rec.agent_started = now;
                // A registered agent counts its acknowledgements from 0 again.
                rec.acked = 0;
                if rec.registered == 0 {
                    rec.registered = now;
                }
                self.dirty_nodes.insert(i);
                self.touch_node(i);
            }
            None => {
                let i = self.nodes.len();
                node.switch = i as u32 / 32;
                node.block = i as u32 / 256;
                node.state = NodeState::Up;
                self.node_index.insert(node.name.clone(), i);
                self.nodes.push(NodeRec {
                    usage: NodeUsage::for_node(&node),
                    node,
                    reason: None,
                    lease_until,
                    last_seen: now,
                    addr,
                    registered: now,
                    agent_started: now,
                    orders: Vec::new(),
                    next_seq: self.seq_base,
                    acked: 0,
                    seen_ms: self.now_ms.max(now * 1000),
                    deleted: false,
                    runs: Vec::new(),
                    health_drained: false,
                    self_drained: false,
                    health_down: false,
                    reboot_down: false,
                    reboot: None,
                });
                self.dirty_nodes.insert(i);
                self.touch_node(i);
            }
        }
        let i = self.node_index[&node_name];
        self.rebooted(i);
        self.nodes_changed();
        for e in exits {
            self.task_exit(now, &node_name, e);
        }
        self.kill_unwanted(i, running);
        self.reconcile(now, i, running);
        Ok(())
    }

    /// Orders killed every task the agent reports of a run that is not (or no longer) placed
    /// on its node; confirms the batch tasks of runs that are.
    fn kill_unwanted(&mut self, i: usize, running: &[TaskKey]) {
        let name = self.nodes[i].node.name.clone();
        for t in running {
            let live =
                self.jobs.get(&t.job).is_some_and(|j| j.state.on_nodes() && j.epoch == t.epoch && j.allocs.iter().any(|(n, _)| *n == name));
            if live {
                let j = self.jobs.get_mut(&t.job).expect("live");
                // A job restored from a backup stays marked while it runs: one of its steps may
                // have ended since, unreported, and a run found lost is held, not run again.
                if t.step == BATCH_STEP && !j.confirmed {
                    j.confirmed = true;
                    self.dirty_jobs.insert(t.job);
                }
            } else {
                self.nodes[i].push(Order::Kill { job: t.job, epoch: t.epoch });
            }
        }
    }

    /// Ends, as a node failure, every run on node `i` with a task there that the agent neither
    /// reports running nor has yet to receive (its launch order is still queued). The agent
    /// reports every task it has been given (an exit is reported until acknowledged), so a
    /// missing one was lost: its agent restarted without it, or the machine rebooted.
    fn reconcile(&mut self, now: Time, i: usize, running: &[TaskKey]) {
        let rec = &self.nodes[i];
        let name = &rec.node.name;
        let mut lost = Vec::new();
        for &id in &rec.runs {
            let Some(j) = self.jobs.get(&id) else { continue };
            if !j.state.on_nodes() {
                continue;
            }
            let missing = j.steps.iter().filter(|s| s.end.is_none()).find_map(|s| {
                let at = s.layout.iter().position(|(n, _)| n == name)?;
                let want = s.left.get(at).copied().unwrap_or(0);
                let have = running.iter().filter(|t| t.job == id && t.epoch == j.epoch && t.step == s.id).count() as u32;
                let queued = rec
                    .orders
                    .iter()
                    .filter(|(_, o)| matches!(o, Order::Launch(t) if t.job == id && t.epoch == j.epoch && t.step == s.id))
                    .count() as u32;
                (have + queued < want).then_some(s.id)
            });
            if let Some(step) = missing {
                lost.push((id, step));
            }
        }
        for (id, step) in lost {
            let name = self.nodes[i].node.name.clone();
            if let Some(j) = self.jobs.get_mut(&id) {
                j.end = Some(now);
                let what = if step == BATCH_STEP { "the batch script".to_string() } else { format!("step {step}") };
                j.message = Some(format!("node {name} lost {what} (its agent restarted without it, or the machine rebooted)"));
            }
            self.requeue_job(id, false);
        }
    }

    /// Node and proxy identities.
    pub fn credentials(&self) -> &creds::Credentials {
        &self.creds
    }

    /// Puts back the identities the database holds (at start).
    pub fn restore_credentials(&mut self, c: creds::Credentials) {
        self.creds = c;
    }

    /// Spends join token `jti` (valid until `exp`) on a credential for node `name`: its serial.
    /// Refused for a spent token, a bad name, or a name that holds a credential already (a node
    /// is deleted first, which revokes it): a stolen join token cannot take a node's identity.
    pub fn join(&mut self, now: Time, jti: &str, exp: Time, name: &str) -> Result<u64, Refused> {
        valid_node_name(name)?;
        self.creds.join(now, jti, exp, name).map_err(|e| match e {
            creds::CredError::Spent => Refused::Forbidden(e.to_string()),
            creds::CredError::Taken(_) => Refused::Conflict(e.to_string()),
        })
    }

    /// A credential for proxy `name`, revoking any earlier one of that name: its serial.
    pub fn issue_proxy_credential(&mut self, name: &str) -> Result<u64, Refused> {
        valid_node_name(name).map_err(|_| Refused::Invalid(format!("invalid proxy name {name:?}")))?;
        Ok(self.creds.proxy(name))
    }

    /// Deletes node `name` (`scontrol delete NodeName=`, `tandem node delete`) and revokes its
    /// credential: its agent can no longer register or heartbeat, and it is no longer listed or
    /// scheduled. Refused while jobs run on it (cancel them, or drain it and let them end). A
    /// name that holds a credential but never registered only loses the credential.
    ///
    /// The node's slot stays, emptied and hidden (node indices are stable while a scheduling
    /// pass is out); its record leaves the database, so after a restart it is gone.
    pub fn delete_node(&mut self, name: &str) -> Result<(), Refused> {
        let Some(&i) = self.node_index.get(name) else {
            return if self.creds.revoke(creds::Holder::Node, name) {
                Ok(())
            } else {
                Err(Refused::NotFound(format!("invalid node name specified: {name}")))
            };
        };
        if self.nodes[i].usage.jobs > 0 {
            let on: Vec<String> = self
                .active()
                .filter(|j| j.state.on_nodes() && j.allocs.iter().any(|(n, _)| n == name))
                .map(|j| j.req.id.0.to_string())
                .collect();
            return Err(Refused::Conflict(format!(
                "node {name} has running jobs ({}): cancel them, or drain the node and let them end, then delete it",
                on.join(",")
            )));
        }
        self.creds.revoke(creds::Holder::Node, name);
        self.node_index.remove(name);
        let rec = &mut self.nodes[i];
        rec.deleted = true;
        rec.node.state = NodeState::Down;
        rec.node.cpus = 0;
        rec.node.memory = 0;
        rec.node.gpus = 0;
        rec.node.partitions = vec!["(deleted)".into()];
        rec.usage = NodeUsage::for_node(&rec.node);
        rec.reason = Some("deleted".into());
        rec.orders.clear();
        self.dirty_nodes.remove(&i);
        self.removed_nodes.push(name.to_string());
        self.touch_node(i);
        self.nodes_changed();
        Ok(())
    }

    /// Drains or resumes a node (`scontrol update NodeName=.. State=DRAIN Reason=..`).
    pub fn set_node_state(&mut self, uid: u32, name: &str, drain: bool, reason: Option<String>) -> Result<(), Refused> {
        if uid != 0 {
            return Err(Refused::Forbidden("only root can drain or resume nodes".into()));
        }
        let &i = self.node_index.get(name).ok_or_else(|| Refused::NotFound(format!("invalid node name specified: {name}")))?;
        let rec = &mut self.nodes[i];
        if !drain && rec.reboot.as_ref().is_some_and(|r| r.issued_at.is_some()) {
            return Err(Refused::Conflict(format!(
                "node {name} is rebooting (its reboot was issued): it returns when its agent registers again"
            )));
        }
        let ev = if drain { NodeEvent::Drain } else { NodeEvent::Resume };
        rec.node.state = rec.node.state.step(ev).map_err(|e| Refused::Conflict(e.to_string()))?;
        rec.reason = if drain { Some(reason.unwrap_or_else(|| "drained by root".into())) } else { None };
        rec.health_drained = false;
        rec.self_drained = false;
        rec.health_down = false;
        rec.reboot_down = false;
        self.dirty_nodes.insert(i);
        self.nodes_changed();
        Ok(())
    }

    /// A heartbeat: renews the node's lease, drops the orders the agent acknowledges (sequence
    /// numbers up to `ack`), takes task exits and the list of running tasks (which it
    /// reconciles: see [`Controller::register_with`]), and returns every order not yet
    /// acknowledged.
    pub fn heartbeat(
        &mut self,
        now: Time,
        name: &str,
        ack: u64,
        running: &[TaskKey],
        exits: &[TaskExit],
    ) -> Result<Vec<(u64, Order)>, Refused> {
        let i = self.renew(now, name, ack)?;
        // A report older than one already taken (it acknowledges less) may lack a task that
        // the later one had: its exits are still news (each is taken once), its list is not.
        let stale = ack < self.nodes[i].acked;
        self.nodes[i].acked = self.nodes[i].acked.max(ack);
        for e in exits {
            self.task_exit(now, name, e);
        }
        if !stale {
            self.kill_unwanted(i, running);
            self.reconcile(now, i, running);
        }
        Ok(self.nodes[i].orders.clone())
    }

    /// Takes an agent's report of the batch steps it started, each with the second it
    /// started (at most `now`): a run whose first node reports its batch step started later
    /// than the scheduler decided (its launch waited, for the controller's disk say) has that
    /// as its start, for accounting (`sacct`'s Start and Elapsed) and its time limit. The first
    /// report of a run is taken, while it runs unsuspended, and only when it is more than
    /// [`LATE_START_S`] later; reports of another node, an older run, or a second report change
    /// nothing.
    pub fn runs_started(&mut self, now: Time, node: &str, started: &[(TaskKey, Time)]) {
        for &(k, at) in started {
            if k.step != BATCH_STEP {
                continue;
            }
            let Some(j) = self.jobs.get_mut(&k.job) else { continue };
            let at = at.min(now);
            // Once a run, from its first node, while it runs unsuspended. A start within
            // LATE_START_S of the decision stands: the ordinary launch, a backlog of launches
            // (no write per job; Slurm's Start is the allocation's too).
            if j.epoch != k.epoch
                || j.state != JobState::Running
                || j.start_reported
                || j.suspended_secs > 0
                || j.allocs.first().is_none_or(|(n, _)| n != node)
            {
                continue;
            }
            j.start_reported = true;
            if j.start.is_none_or(|s| at <= s + LATE_START_S) {
                continue;
            }
            j.start = Some(at);
            if let Some(s) = j.steps.iter_mut().find(|s| s.id == BATCH_STEP) {
                s.start = s.start.max(at);
            }
            self.limits_due = self.limits_due.min(Self::due_at(j, now, self.settings.kill_wait));
            self.dirty_jobs.insert(k.job);
        }
    }

    /// Takes an agent's report of the tasks whose image it is pulling: their jobs show as
    /// `CONFIGURING` with the progress until the node's next report without them (in memory
    /// only; the job runs, and its time limit counts, all along).
    pub fn record_pulls(&mut self, node: &str, pulls: &[Pulling]) {
        for p in pulls {
            if let Some(j) = self.jobs.get_mut(&p.key.job)
                && j.epoch == p.key.epoch
                && j.state == JobState::Running
                && j.allocs.iter().any(|(n, _)| n == node)
            {
                j.pulling = Some((node.to_string(), p.progress.clone()));
            }
        }
        let Some(&i) = self.node_index.get(node) else { return };
        // The node's runs that it no longer reports pulling.
        for id in self.nodes[i].runs.clone() {
            if let Some(j) = self.jobs.get_mut(&id)
                && j.pulling.as_ref().is_some_and(|(n, _)| n == node)
                && !pulls.iter().any(|p| p.key.job == id && p.key.epoch == j.epoch)
            {
                j.pulling = None;
            }
        }
    }

    /// Takes an agent's report of its tasks' usage (`sstat`): kept with each task's step of its
    /// job's current run, in memory only (it is saved with the step's next change, its end).
    pub fn record_usage(&mut self, node: &str, usage: &[TaskUsage]) {
        for u in usage {
            let Some(j) = self.jobs.get_mut(&u.key.job) else { continue };
            if j.epoch != u.key.epoch || !j.state.on_nodes() || !j.allocs.iter().any(|(n, _)| n == node) {
                continue;
            }
            let Some(s) = j.steps.iter_mut().find(|s| s.id == u.key.step && s.end.is_none()) else { continue };
            if let Some(x) = s.usage.iter_mut().find(|x| x.0 == u.key.rank) {
                x.2 = x.2.max(u.max_rss_kb);
                x.3 = x.3.max(u.cpu_ms);
            } else if s.usage.len() < 100_000 {
                s.usage.push((u.key.rank, node.to_string(), u.max_rss_kb, u.cpu_ms));
            }
        }
    }

    /// The end of a heartbeat's long poll: renews the node's lease, drops the orders the agent
    /// acknowledges, and returns every order not yet acknowledged (the agent's report was
    /// taken when the heartbeat arrived).
    pub fn poll(&mut self, now: Time, name: &str, ack: u64) -> Result<Vec<(u64, Order)>, Refused> {
        let i = self.renew(now, name, ack)?;
        Ok(self.nodes[i].orders.clone())
    }

    /// [`Controller::poll`] but for its answer: the node's index.
    fn renew(&mut self, now: Time, name: &str, ack: u64) -> Result<usize, Refused> {
        let &i = self.node_index.get(name).ok_or_else(|| Refused::NotFound(format!("node {name} is not registered")))?;
        let rec = &mut self.nodes[i];
        rec.orders.retain(|(seq, _)| *seq > ack);
        rec.lease_until = now + self.settings.lease;
        rec.last_seen = now;
        if rec.node.state == NodeState::Down && !rec.health_down && !rec.reboot_down {
            rec.node.state = rec.node.state.step(NodeEvent::Resume).expect("down nodes resume");
            rec.reason = None;
            self.dirty_nodes.insert(i);
            self.nodes_changed();
        }
        Ok(i)
    }

    fn task_exit(&mut self, now: Time, node: &str, e: &TaskExit) {
        let Some(j) = self.jobs.get_mut(&e.job) else { return };
        // Only the run's own nodes report on it.
        if j.epoch != e.epoch || !j.state.on_nodes() || !j.allocs.iter().any(|(n, _)| n == node) {
            return;
        }
        let code = e.code.unwrap_or(0).max(e.signal.map_or(0, |s| 128 + s));
        let mut kill = None;
        if let Some(step) = j.steps.iter_mut().find(|s| s.id == e.step) {
            if step.done.contains(&e.rank) {
                return; // reported again: its reply was lost
            }
            step.done.push(e.rank);
            step.remaining = step.remaining.saturating_sub(1);
            if let Some(at) = step.layout.iter().position(|(n, _)| n == node)
                && let Some(l) = step.left.get_mut(at)
            {
                *l = l.saturating_sub(1);
            }
            step.exit = step.exit.max(code);
            if step.remaining == 0 {
                step.end = Some(now);
            } else if code != 0 && step.spec.kill_on_bad_exit && step.id != BATCH_STEP {
                // srun -K: a task that failed ends the others of its step.
                let order = Order::Signal { job: e.job, epoch: j.epoch, signal: 9, batch_only: false, step: Some(step.id) };
                kill = Some((order, step.layout.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>()));
            }
        }
        if let Some((order, nodes)) = kill {
            for n in nodes {
                self.order(&n, order.clone());
            }
        }
        let Some(j) = self.jobs.get_mut(&e.job) else { return };
        self.dirty_jobs.insert(e.job);
        if e.prolog_failed && !j.cancelling && j.replica.is_none() {
            // Slurm's rule: the node is drained (its agent reports that) and a batch job goes
            // back to the queue, held unless nohold_on_prolog_fail, to run elsewhere; an
            // allocation (salloc, srun) fails.
            let id = e.job;
            if j.spec.interactive {
                j.message = e.error.clone();
                j.end = Some(now);
                j.state = j.state.step(JobEvent::NodeFail).unwrap_or(JobState::NodeFail);
                j.node_failed = true;
                self.release(id);
                return;
            }
            let hold = !self.settings.nohold_on_prolog_fail;
            j.message = e.error.clone();
            j.end = Some(now);
            self.requeue_job(id, true);
            if let Some(j) = self.jobs.get_mut(&id)
                && j.state == JobState::Pending
            {
                j.req.held |= hold;
                j.prolog_held = hold;
                if hold {
                    (j.reason, j.expected_start) = (PendingReason::LaunchFailedHeld, None);
                }
            }
            return;
        }
        if e.lost && !j.cancelling && j.replica.is_none() {
            // How a task ended is not known (it outlived its agent and its keeper, or the
            // machine restarted): its job met a node failure.
            let id = e.job;
            j.end = Some(now);
            j.message = e.error.clone();
            self.requeue_job(id, false);
            return;
        }
        if e.step != BATCH_STEP {
            // A step's task that could not run (a launch, a container's image): the job says
            // why (`scontrol show job`), the first such reason kept.
            if let Some(why) = &e.error {
                if j.message.is_none() {
                    j.message = Some(format!("step {}: {why}", e.step));
                }
                if let Some(s) = j.steps.iter_mut().find(|s| s.id == e.step)
                    && s.error.is_none()
                {
                    s.error = Some(why.clone());
                }
            }
            return;
        }
        j.confirmed = true;
        if let Some(why) = &e.error {
            j.message = Some(why.clone());
        }
        j.exit_code = e.code;
        j.exit_signal = e.signal;
        j.end = Some(now);
        if let Some(c) = j.completed.filter(|_| !j.cancelling && j.timeout_at.is_none()) {
            // An allocation its owner completed: its placeholder's kill is not the job's end.
            (j.exit_code, j.exit_signal) = (Some(c), None);
            j.state = j.state.step(JobEvent::Exit(c)).expect("a running job can end");
            let usage = self.job_usage(e.job);
            let (acct, user) = (self.jobs[&e.job].req.account.clone(), self.jobs[&e.job].req.user.clone());
            self.fairshare.accrue(&acct, &user, usage);
            self.learn(e.job);
            self.release(e.job);
            return;
        }
        if let Some(r) = &mut j.replica {
            // A replica's process ends only when told to (its agent restarts it otherwise), or
            // when its agent fenced: either way this replica is over.
            r.state = r.state.step(model::ReplicaEvent::Ended).unwrap_or(model::ReplicaState::Gone);
            j.state = j.state.step(JobEvent::Cancel).expect("a running job can end");
            self.release(e.job);
            return;
        }
        if e.fenced && !j.cancelling {
            // Its node lost contact: the same as a node failure.
            let id = e.job;
            if let Some(j) = self.jobs.get_mut(&id) {
                j.end = Some(now);
            }
            self.requeue_job(id, false);
            return;
        }
        if j.requeueing && !j.cancelling {
            let id = e.job;
            self.requeue_job(id, true);
            return;
        }
        let ev = if j.cancelling {
            JobEvent::Cancel
        } else if e.oom {
            JobEvent::OutOfMemory
        } else if j.timeout_at.is_some() {
            JobEvent::TimeLimit
        } else if j.preempt_at.is_some() {
            // Preempted work that exits within its grace time is requeued, saying why.
            let id = e.job;
            self.note_preemption(id);
            self.requeue_job(id, true);
            return;
        } else {
            JobEvent::Exit(code)
        };
        // A failed run of a job that runs failures again (a Kubernetes Job's backoffLimit):
        // again while the array's failures so far are under its limit; past it, the array's
        // other tasks are cancelled (the Job failed).
        let mut exceeded = None;
        if let (JobEvent::Exit(c), Some(limit)) = (ev, j.spec.retries)
            && c != 0
        {
            let (id, array, own) = (e.job, j.array.map(|a| a.array_job), j.failed_runs);
            let failed: u32 = match array {
                Some(a) => self.jobs.values().filter(|x| x.array.is_some_and(|y| y.array_job == a)).map(|x| x.failed_runs).sum(),
                None => own,
            };
            if failed < limit {
                let j = self.jobs.get_mut(&id).expect("listed");
                j.failed_runs += 1;
                j.message = Some(format!("exit code {c}: run again (failure {} of the {limit} allowed)", failed + 1));
                self.requeue_job(id, true);
                return;
            }
            exceeded = Some(array.unwrap_or(id));
        }
        let j = self.jobs.get_mut(&e.job).expect("listed");
        j.state = j.state.step(ev).expect("a running job can end");
        let usage = self.job_usage(e.job);
        let (acct, user) = (self.jobs[&e.job].req.account.clone(), self.jobs[&e.job].req.user.clone());
        self.fairshare.accrue(&acct, &user, usage);
        self.learn(e.job);
        self.release(e.job);
        if let Some(a) = exceeded {
            let by = self.jobs[&e.job].spec.uid;
            let mut ids: Vec<u64> = self
                .jobs
                .values()
                .filter(|x| x.array.is_some_and(|y| y.array_job == a) && !x.state.is_final())
                .map(|x| x.req.id.0)
                .collect();
            ids.extend(self.lazy.get(&a).map(|t| t.ids()).into_iter().flatten());
            // Refusals (a task that ended meanwhile) leave nothing to do.
            let _ = self.cancel_many(now, by, ids, None);
        }
    }

    /// Records a finished job's actual run time in the history predictions learn from: its
    /// exit is the only way a run time reaches the scheduler.
    fn learn(&mut self, id: u64) {
        let j = &self.jobs[&id];
        if let (Some(start), Some(end)) = (j.start, j.end) {
            self.history.record(&j.req, end - start - j.suspended_secs);
        }
    }

    fn job_usage(&self, id: u64) -> f64 {
        let j = &self.jobs[&id];
        // Suspended time is not charged: its CPUs were lent.
        let secs = (j.end.unwrap_or(0) - j.start.unwrap_or(0) - j.suspended_secs).max(0) as f64;
        let size: f64 = j.allocs.iter().map(|(_, a)| a.cpus as f64 + 1000.0 * a.gpus.len() as f64).sum();
        secs * size
    }

    fn dep_status(&self, j: &Job) -> DepStatus {
        let mut status = DepStatus::Satisfied;
        for d in &j.req.dependencies {
            let s = match d.kind {
                DepKind::Singleton => {
                    let other = self
                        .active()
                        .any(|o| o.req.id != j.req.id && o.req.name == j.req.name && o.req.user == j.req.user && o.state.on_nodes());
                    if other { DepStatus::Waiting } else { DepStatus::Satisfied }
                }
                kind => match d.job.and_then(|id| self.jobs.get(&id.0)) {
                    None => match d.job.and_then(|id| self.tail_of(id.0)) {
                        Some(t) => dep_on(kind, if t.pending() { JobState::Pending } else { JobState::Cancelled }),
                        None => DepStatus::Never,
                    },
                    Some(o) if o.array.is_some_and(|a| a.array_job == o.req.id.0) && j.array.is_none_or(|a| a.array_job != o.req.id.0) => {
                        // A dependency on an array job is on every task of it.
                        let tasks: Vec<&Job> =
                            self.jobs.values().map(|t| &**t).filter(|t| t.array.is_some_and(|a| a.array_job == o.req.id.0)).collect();
                        let mut each: Vec<DepStatus> = tasks.iter().map(|t| dep_on(kind, t.state)).collect();
                        each.extend(self.tail_state(o.req.id.0).map(|s| dep_on(kind, s)));
                        if each.contains(&DepStatus::Never) {
                            DepStatus::Never
                        } else if each.contains(&DepStatus::Waiting) {
                            DepStatus::Waiting
                        } else {
                            DepStatus::Satisfied
                        }
                    }
                    Some(o) => dep_on(kind, o.state),
                },
            };
            status = match (status, s) {
                (DepStatus::Never, _) | (_, DepStatus::Never) => DepStatus::Never,
                (DepStatus::Waiting, _) | (_, DepStatus::Waiting) => DepStatus::Waiting,
                _ => DepStatus::Satisfied,
            };
        }
        status
    }

    /// What happened since the last call that the operator should read in the log, oldest
    /// first (at most the last 10,000).
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// The periodic and event-driven work: leases, preemption grace, time limits, then a
    /// scheduling pass and the dispatch of its plan. The same as [`Controller::begin_tick`],
    /// [`Pass::run`] and [`Controller::finish_tick`] in a row; a daemon calls those instead, to
    /// run the pass without holding the controller.
    pub fn tick(&mut self, now: Time) -> TickInfo {
        let mut pass = self.begin_tick(now);
        pass.run();
        self.finish_tick(pass)
    }

    /// Nodes whose lease lapsed go down; their jobs are requeued (or fail).
    fn expire_leases(&mut self, now: Time, info: &mut TickInfo) {
        for i in 0..self.nodes.len() {
            // A node whose reboot was issued is expected silent (`resume_timeout` bounds it).
            let rebooting = self.nodes[i].reboot.as_ref().is_some_and(|r| r.issued_at.is_some());
            if self.nodes[i].node.state != NodeState::Down && self.nodes[i].lease_until < now && !rebooting {
                self.fail_node(i, "not responding (lease expired)".into(), now, info);
            }
        }
    }

    /// Node `i` goes down with `reason`: the jobs on it are requeued (those with
    /// `--requeue=expedite`, where the cluster allows it, first in the queue) or fail.
    fn fail_node(&mut self, i: usize, reason: String, now: Time, info: &mut TickInfo) {
        let rec = &mut self.nodes[i];
        rec.node.state = rec.node.state.step(NodeEvent::Fail).expect("any state can fail");
        rec.reason = Some(reason.clone());
        self.dirty_nodes.insert(i);
        info.nodes_down += 1;
        let name = rec.node.name.clone();
        self.nodes_changed();
        let hit: Vec<u64> =
            self.active().filter(|j| j.state.on_nodes() && j.allocs.iter().any(|(n, _)| *n == name)).map(|j| j.req.id.0).collect();
        let (mut requeued, mut ended) = (Vec::new(), Vec::new());
        for id in hit {
            if let Some(j) = self.jobs.get_mut(&id) {
                j.end = Some(now);
            }
            if !self.requeue_job(id, false) {
                ended.push(id);
            } else {
                requeued.push(id);
                info.requeued += 1;
                let expedite = self.settings.enable_expedited_requeue;
                if let Some(j) = self.jobs.get_mut(&id)
                    && expedite
                    && j.req.expedite
                {
                    j.req.expedited = true;
                }
            }
        }
        if self.events.len() >= EVENTS_KEPT {
            self.events.remove(0);
        }
        self.events.push(Event::NodeDown { node: name, reason, requeued, ended });
    }

    /// A node's health check marked it down (the program exited 2): its jobs are requeued or
    /// fail, as when a node is lost, and it stays down until a pass of the check (or root)
    /// resumes it.
    pub fn agent_health_down(&mut self, now: Time, name: &str, reason: &str) -> Result<(), Refused> {
        let &i = self.node_index.get(name).ok_or_else(|| Refused::NotFound(format!("node {name} is not registered")))?;
        let reason: String = reason.chars().filter(|c| !c.is_control()).take(256).collect();
        if self.nodes[i].node.state == NodeState::Down {
            return Ok(());
        }
        self.nodes[i].health_down = true;
        self.nodes[i].health_drained = false;
        self.fail_node(i, reason, now, &mut TickInfo::default());
        Ok(())
    }

    /// Preemption grace and time limits (`--signal`, SIGTERM, SIGKILL after KillWait).
    fn enforce_limits(&mut self, now: Time, info: &mut TickInfo) {
        if now < self.limits_due {
            return; // the common case: no running job is due for anything yet
        }
        // One scan, no lookups, no copies of node names; it also finds when the next is due.
        let mut next = Time::MAX;
        let mut due = Vec::new();
        for j in self.active().filter(|j| j.state.on_nodes()) {
            let t = Self::due_at(j, now, self.settings.kill_wait);
            if t <= now {
                due.push(j.req.id.0);
            } else {
                next = next.min(t);
            }
        }
        self.limits_due = next;
        for id in due.clone() {
            let j = &self.jobs[&id];
            let end = j.start.unwrap_or(now).saturating_add(j.req.time_limit).saturating_add(j.suspended_secs);
            let suspended = j.state == JobState::Suspended;
            let nodes: Vec<String> = j.allocs.iter().map(|(n, _)| n.clone()).collect();
            let epoch = j.epoch;
            if j.preempt_at.is_some_and(|t| t <= now) {
                self.note_preemption(id);
                self.requeue_job(id, true);
                info.requeued += 1;
                continue;
            }
            if j.kill_at.is_some_and(|k| k <= now) {
                // A cancelled job still running KillWait after its SIGTERM.
                for n in &nodes {
                    self.order(n, Order::Kill { job: id, epoch });
                }
                self.jobs.get_mut(&id).expect("running").kill_at = None;
                self.dirty_jobs.insert(id);
                continue;
            }
            if suspended {
                continue; // its clock is stopped: nothing else comes due
            }
            if let Some((sig, before, batch_only)) = j.spec.signal
                && !j.warned
                && now >= end - before
            {
                for n in &nodes {
                    self.order(n, Order::Signal { job: id, epoch, signal: sig, batch_only, step: None });
                }
                self.jobs.get_mut(&id).expect("running").warned = true;
                self.dirty_jobs.insert(id);
            }
            self.step_limits(now, id);
            let j = &self.jobs[&id];
            match j.timeout_at {
                None if now >= end => {
                    for n in &nodes {
                        self.order(n, Order::Signal { job: id, epoch, signal: 15, batch_only: false, step: None });
                    }
                    self.jobs.get_mut(&id).expect("running").timeout_at = Some(now);
                    self.dirty_jobs.insert(id);
                }
                Some(t) if now >= t + self.settings.kill_wait => {
                    for n in &nodes {
                        self.order(n, Order::Kill { job: id, epoch });
                    }
                }
                _ => {}
            }
        }
        // What was just done changes when those jobs are next due.
        for id in due {
            if let Some(j) = self.jobs.get(&id).filter(|j| j.state.on_nodes()) {
                self.limits_due = self.limits_due.min(Self::due_at(j, now, self.settings.kill_wait));
            }
        }
    }

    /// Time limits of a running job's steps (`srun -t`): SIGTERM to the step's tasks at its
    /// limit, SIGKILL `KillWait` later; the step ends TIMEOUT, the job runs on (as Slurm's).
    fn step_limits(&mut self, now: Time, id: u64) {
        let kill_wait = self.settings.kill_wait;
        let Some(j) = self.jobs.get_mut(&id) else { return };
        let (epoch, suspended) = (j.epoch, j.suspended_secs);
        let mut orders = Vec::new();
        for s in j.steps.iter_mut().filter(|s| s.end.is_none()) {
            let Some(limit) = s.spec.res.time_limit else { continue };
            let signal = match s.timeout_at {
                None if now >= s.start.saturating_add(limit).saturating_add(suspended - s.suspended_base) => {
                    s.timeout_at = Some(now);
                    15
                }
                Some(at) if now >= at.saturating_add(kill_wait) => 9,
                _ => continue,
            };
            for (n, _) in &s.layout {
                orders.push((n.clone(), Order::Signal { job: id, epoch, signal, batch_only: false, step: Some(s.id) }));
            }
        }
        if !orders.is_empty() {
            self.dirty_jobs.insert(id);
        }
        for (n, o) in orders {
            self.order(&n, o);
        }
    }

    /// When a running job is next due for the time-limit scan: the end of its preemption grace,
    /// its `--signal` time, or its time limit (at `now` or before: due now, as every tick after
    /// its limit until it ends).
    fn due_at(j: &Job, now: Time, kill_wait: Time) -> Time {
        if j.state == JobState::Suspended {
            return j.kill_at.unwrap_or(Time::MAX);
        }
        let end = j.start.unwrap_or(now).saturating_add(j.req.time_limit).saturating_add(j.suspended_secs);
        let mut t = end;
        // Steps with a time limit of their own (`srun -t`): its end, then KillWait after.
        for s in j.steps.iter().filter(|s| s.end.is_none()) {
            if let Some(limit) = s.spec.res.time_limit {
                t = t.min(match s.timeout_at {
                    None => s.start.saturating_add(limit).saturating_add(j.suspended_secs - s.suspended_base),
                    Some(at) => at.saturating_add(kill_wait),
                });
            }
        }
        if let Some(p) = j.preempt_at {
            t = t.min(p);
        }
        if let Some(k) = j.kill_at {
            t = t.min(k);
        }
        if let Some((_, before, _)) = j.spec.signal
            && !j.warned
        {
            t = t.min(end.saturating_sub(before));
        }
        t
    }

    /// Drops finished jobs that ended more than `min_job_age` ago from memory (they are in the
    /// database), except those a job not yet ended depends on, and array tasks of such arrays.
    fn purge(&mut self, now: Time) {
        let age = self.settings.min_job_age;
        if age <= 0 || now - self.last_purge < 30 {
            return;
        }
        self.last_purge = now;
        let needed: std::collections::HashSet<u64> = self
            .active()
            .filter(|j| !j.state.is_final())
            .flat_map(|j| j.req.dependencies.iter().filter_map(|d| d.job.map(|x| x.0)))
            .collect();
        self.jobs.retain(|id, j| {
            !(j.state.is_final()
                && j.end.is_some_and(|e| e < now - age)
                && !needed.contains(id)
                && j.array.is_none_or(|a| !needed.contains(&a.array_job)))
        });
        self.purge_tails(now, age, &needed);
        self.drop_buried();
    }

    /// Sets a pending job's reason and expected start. Both are derived from the queue by every
    /// pass, so a change is not written to the database (a restarted controller's first pass
    /// sets them again): a queue of N pending jobs whose estimates move costs no N writes per pass.
    fn set_reason(&mut self, id: u64, reason: PendingReason, expected: Option<Time>) {
        if let Some(j) = self.jobs.get_mut(&id) {
            j.reason = match reason {
                PendingReason::JobHeldUser if j.prolog_held => PendingReason::LaunchFailedHeld,
                PendingReason::JobHeldUser if j.restored => PendingReason::Restored,
                other => other,
            };
            j.expected_start = expected;
        }
    }

    fn start_job(&mut self, now: Time, id: u64, mut allocs: Vec<sched::Alloc>, het: Vec<u32>) {
        debug_assert!(
            het.is_empty() || het.iter().map(|&n| n as usize).sum::<usize>() == allocs.len(),
            "components' nodes are the allocation"
        );
        let het = if het.iter().map(|&n| n as usize).sum::<usize>() == allocs.len() { het } else { Vec::new() };
        // The batch script runs on the first node, in node order (as Slurm's first node of the
        // node list); a heterogeneous job's components keep their order, each in node order,
        // and the script runs on component 0's first node.
        let named: Vec<(String, sched::Alloc)> = {
            let mut v: Vec<(String, sched::Alloc)> = allocs.drain(..).map(|a| (self.nodes[a.node as usize].node.name.clone(), a)).collect();
            let bounds: Vec<usize> = if het.is_empty() { vec![v.len()] } else { het.iter().map(|&n| n as usize).collect() };
            let mut at = 0;
            for n in bounds {
                v[at..at + n].sort_by(|a, b| natural(&a.0).cmp(&natural(&b.0)));
                at += n;
            }
            v
        };
        for (name, a) in &named {
            let i = self.node_index[name];
            let node = self.nodes[i].node.clone();
            self.nodes[i].usage.apply(&node, a);
            self.nodes[i].runs.push(id);
            self.touch_node(i);
        }
        let j = self.jobs.get_mut(&id).expect("started job exists");
        j.state = j.state.step(JobEvent::Start).expect("pending jobs start");
        j.start = Some(now);
        j.end = None;
        (j.suspension, j.suspended_secs, j.start_reported) = (None, 0, false);
        j.epoch += 1;
        j.last_allocs = named.clone();
        j.allocs = named;
        j.het = het;
        j.reason = PendingReason::None;
        j.expected_start = None;
        j.exit_code = None;
        j.exit_signal = None;
        j.req.expedited = false;
        let first = j.allocs[0].0.clone();
        self.limits_due = self.limits_due.min(Self::due_at(j, now, self.settings.kill_wait));
        j.steps = vec![Step {
            id: BATCH_STEP,
            argv: Vec::new(),
            layout: vec![(first.clone(), 1)],
            remaining: 1,
            left: vec![1],
            done: Vec::new(),
            exit: 0,
            start: now,
            end: None,
            spec: StepSpec::default(),
            held: Vec::new(),
            timeout_at: None,
            usage: Vec::new(),
            het: Vec::new(),
            suspended_base: 0,
            error: None,
        }];
        self.dirty_jobs.insert(id);
        if let Some(r) = &mut j.replica {
            r.state = r.state.step(model::ReplicaEvent::Placed).unwrap_or(model::ReplicaState::Starting);
            r.since_ms = self.now_ms;
        }
        let task = self.make_task(id, BATCH_STEP, 0, 0, 0, None, Vec::new());
        self.order(&first, Order::Launch(task));
    }

    /// A heterogeneous job's components as their `SLURM_*_HET_GROUP_k` variables describe
    /// them (ids from the job's own, nodes and CPUs from its allocation, tasks from each
    /// component's shape); empty for an ordinary job.
    fn het_groups(&self, j: &Job) -> Vec<slurmcli::HetGroup> {
        (0..j.het.len())
            .map(|k| {
                let req = j.req.component(k).unwrap_or_else(|| j.req.clone());
                let allocs = &j.allocs[j.component_range(k, j.allocs.len())];
                let n = allocs.len() as u32;
                slurmcli::HetGroup {
                    job_id: j.req.id.0 + k as u64,
                    nodes: allocs.iter().map(|(name, _)| name.clone()).collect(),
                    tasks_per_node: allocs.iter().map(|_| req.shape.tasks_per_node(n)).collect(),
                    cpus_per_node: allocs.iter().map(|(_, a)| a.cpus).collect(),
                    cpus_per_task: req.shape.cpus_per_task,
                    partition: req
                        .partition
                        .clone()
                        .or_else(|| self.settings.cluster.partitions.first().map(|p| p.name.clone()))
                        .unwrap_or_default(),
                }
            })
            .collect()
    }

    /// Builds one task of a job's current run.
    #[allow(clippy::too_many_arguments)]
    fn make_task(&self, id: u64, step: u32, node_index: usize, rank: u32, localid: u32, gpus: Option<Vec<u8>>, argv: Vec<String>) -> Task {
        let het = self.het_groups(&self.jobs[&id]);
        self.make_task_in(id, step, node_index, rank, localid, gpus, argv, &het)
    }

    /// [`Controller::make_task`] with the job's heterogeneous components already described
    /// (a step's tasks share them).
    #[allow(clippy::too_many_arguments)]
    fn make_task_in(
        &self,
        id: u64,
        step: u32,
        node_index: usize,
        rank: u32,
        localid: u32,
        gpus: Option<Vec<u8>>,
        argv: Vec<String>,
        het: &[slurmcli::HetGroup],
    ) -> Task {
        let j = &self.jobs[&id];
        let job_names: Vec<String> = j.allocs.iter().map(|(n, _)| n.clone()).collect();
        // A step sees its own layout (its nodes, its tasks: WORLD_SIZE is the step's), the job
        // its allocation (a heterogeneous job's batch script: component 0's).
        let srun = j.steps.iter().find(|s| s.id == step && step != BATCH_STEP);
        let layout = srun.map(|s| &s.layout);
        let (names, tasks_per_node): (Vec<String>, Vec<u32>) = match (layout, het.first()) {
            (Some(l), _) => l.iter().cloned().unzip(),
            (None, Some(g)) => (g.nodes.clone(), g.tasks_per_node.clone()),
            (None, None) => {
                (job_names.clone(), (0..job_names.len() as u32).map(|_| j.req.shape.tasks_per_node(job_names.len() as u32)).collect())
            }
        };
        // The component this task's node is in (0 for an ordinary job).
        let component = (0..het.len()).find(|&k| j.component_range(k, j.allocs.len()).contains(&node_index)).unwrap_or(0);
        let own = if het.is_empty() { None } else { j.req.component(component) };
        let own = own.as_ref().unwrap_or(&j.req);
        let shape_cpus = own.shape.cpus_per_task;
        // A heterogeneous job's step sees the nodes of the components it runs on as the job's
        // (component 0's for a step that names none), as Slurm's.
        let step_job_nodes: Vec<String> = match srun {
            Some(s) if !het.is_empty() => {
                let groups: Vec<usize> = if s.het.is_empty() { vec![0] } else { s.het.iter().map(|(g, _, _)| *g as usize).collect() };
                groups.iter().filter_map(|&g| het.get(g)).flat_map(|g| g.nodes.iter().cloned()).collect()
            }
            _ => job_names.clone(),
        };
        // A step that holds CPUs sees its own count (`SLURM_CPUS_ON_NODE`), else the job's.
        let cpus_per_node: Vec<u32> = names
            .iter()
            .enumerate()
            .map(|(i, n)| match srun.and_then(|s| s.held.get(i)) {
                Some(h) if h.cpus > 0 => h.cpus,
                _ => j.allocs.iter().find(|(a, _)| a == n).map_or(0, |(_, a)| a.cpus),
            })
            .collect();
        let step_index = names.iter().position(|n| Some(n) == job_names.get(node_index)).unwrap_or(0);
        let node_gpus = j.allocs.get(node_index).map(|(_, a)| a.gpus.clone()).unwrap_or_default();
        let part = own.partition.clone().or_else(|| self.settings.cluster.partitions.first().map(|p| p.name.clone())).unwrap_or_default();
        let qos = j.req.qos.clone().or_else(|| self.settings.cluster.qos.first().map(|q| q.name.clone())).unwrap_or_default();
        let master_addr: Vec<String> =
            names.iter().map(|n| self.node_index.get(n).map_or(n.clone(), |&i| self.nodes[i].addr.clone())).collect();
        let (mem_node, mem_cpu) = match own.shape.mem {
            model::MemRequest::PerNode(0) => (None, None),
            model::MemRequest::PerNode(b) => (Some(b >> 20), None),
            model::MemRequest::PerCpu(b) => (None, Some(b >> 20)),
        };
        let env_in = slurmcli::TaskEnv {
            job_id: id,
            job_name: &j.req.name,
            account: &j.req.account,
            partition: &part,
            qos: &qos,
            cluster: &self.settings.cluster_name,
            submit_dir: &j.spec.submit_dir,
            submit_host: &j.spec.submit_host,
            nodes: &names,
            job_nodes: if layout.is_some() { &step_job_nodes } else { &[] },
            tasks_per_node: &tasks_per_node,
            cpus_per_node: &cpus_per_node,
            cpus_per_task: srun.and_then(|s| s.spec.res.cpus_per_task).unwrap_or(shape_cpus),
            node_index: step_index,
            procid: rank,
            localid,
            node_gpus: &node_gpus,
            task_gpus: gpus.as_deref(),
            mem_per_node_mb: mem_node,
            mem_per_cpu_mb: mem_cpu,
            restart_count: j.restart_count,
            array: j.array.map(|a| (a.array_job, a.task, a.count, a.min, a.max, 1)),
            step_id: (step != BATCH_STEP).then_some(step),
            start_end: (j.start.unwrap_or(0), j.start.map(|s| s.saturating_add(j.req.time_limit).saturating_add(j.suspended_secs))),
            master_port: 20_000 + (id % 20_000) as u16,
            het,
        };
        let st = srun.map(|s| &s.spec);
        let mut env = st.and_then(|s| s.env.clone()).unwrap_or_else(|| j.spec.env.clone());
        let mut slurm = slurmcli::task_env(&env_in);
        if let Some(addr) = master_addr.first() {
            for (k, v) in slurm.iter_mut() {
                if k == "MASTER_ADDR" {
                    *v = addr.clone();
                }
            }
        }
        // The PyTorch variables are Tandem's, not Slurm's: one the user exported wins, unless
        // it still holds the value Tandem set in the batch script (`TANDEM_DEFAULTED` lists
        // those, `K=V` separated by spaces), which an srun inside it passes on.
        let defaulted: Vec<(String, String)> = env
            .iter()
            .find(|(k, _)| k == slurmcli::DEFAULTED)
            .map(|(_, v)| v.split(' ').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect())
            .unwrap_or_default();
        let mut ours = Vec::new();
        slurm.retain(|(k, v)| {
            if !slurmcli::PYTORCH_VARS.contains(&k.as_str()) {
                return true;
            }
            let users = env.iter().find(|(e, _)| e == k).is_some_and(|(_, uv)| !defaulted.iter().any(|(dk, dv)| dk == k && dv == uv));
            if !users {
                ours.push(format!("{k}={v}"));
            }
            !users
        });
        slurm.push((slurmcli::DEFAULTED.to_string(), ours.join(" ")));
        // Slurm's SLURM_UMASK: the submitting command's umask, four octal digits.
        let umask = st.and_then(|s| s.umask).or(j.spec.umask).unwrap_or(DEFAULT_UMASK) & 0o777;
        slurm.push(("SLURM_UMASK".to_string(), format!("{umask:04o}")));
        env.retain(|(k, _)| !slurm.iter().any(|(s, _)| s == k));
        env.extend(slurm);
        let node_name = job_names.get(node_index).cloned().unwrap_or_default();
        let workdir = st.and_then(|s| s.workdir.clone()).unwrap_or_else(|| j.spec.workdir.clone());
        let (out_pat, err_pat) = output_patterns(j, st);
        let (stdout, stderr) = output_files(j, st, step, rank, node_index, &node_name);
        let mem_limit = j.allocs.get(node_index).map_or(0, |(_, a)| a.memory);
        let io = st.and_then(|s| s.io.clone());
        if io.as_ref().is_some_and(|io| io.pmix) {
            // The task's PMIx server sets the PMIX_ variables its client reads (the user's own,
            // such as PMIX_MCA_*, pass); PMI-1/2 variables would mislead a library that has
            // both clients.
            env.retain(|(k, _)| !k.starts_with("PMI_"));
            env.retain(|(k, _)| k != "SLURM_MPI_TYPE");
            env.push(("SLURM_MPI_TYPE".into(), "pmix".into()));
        } else if io.as_ref().is_some_and(|io| io.pmi) {
            // PMI-1 and PMI-2 clients (MPICH's) read these; the agent adds PMI_FD.
            let size: u32 = tasks_per_node.iter().sum();
            env.retain(|(k, _)| !k.starts_with("PMI_"));
            env.push(("PMI_RANK".into(), rank.to_string()));
            env.push(("PMI_SIZE".into(), size.to_string()));
            env.push(("PMI_JOBID".into(), format!("{id}.{step}")));
            env.push(("PMI_APPNUM".into(), "0".into()));
        }
        let replica = self.replica_task(j);
        if let Some(r) = &replica {
            env.push(("TANDEM_SERVICE".into(), r.service.clone()));
            env.push(("TANDEM_REPLICA".into(), r.replica.clone()));
        }
        Task {
            job: id,
            epoch: j.epoch,
            step,
            rank,
            script: (step == BATCH_STEP && replica.is_none() && !j.spec.interactive).then(|| j.spec.script.clone()),
            // An allocation's placeholder: it holds the job's place until completed.
            argv: match step {
                BATCH_STEP if j.spec.interactive => vec!["sleep".into(), "infinity".into()],
                BATCH_STEP => j.spec.script_args.clone(),
                _ => argv,
            },
            env,
            workdir,
            stdout,
            stderr,
            truncate: match st {
                // Tasks sharing one file: only rank 0 empties it.
                Some(s) => s.truncate && (rank == 0 || (out_pat.contains("%t") && err_pat.contains("%t"))),
                // The batch script empties the job's files at its first start (Slurm's
                // JobFileAppend=0), a service replica never.
                None => step == BATCH_STEP && !j.spec.append && j.restart_count == 0 && j.replica.is_none(),
            },
            uid: j.spec.uid,
            gid: j.spec.gid,
            gpus: gpus.unwrap_or(node_gpus),
            mem_limit,
            step_mem: 0,
            cpu_limit: j.allocs.get(node_index).map_or(0, |(_, a)| a.cpus),
            cpus: st
                .and_then(|s| s.cpu_bind.as_deref())
                .and_then(|b| slurmcli::cpu_bind_cpus(b, localid).ok().flatten())
                .unwrap_or_default(),
            login_env: step == BATCH_STEP && j.spec.login_env && !j.spec.interactive && j.replica.is_none(),
            umask: Some(umask),
            // The replica is its batch step; a step beside it (`kubectl exec`) is an ordinary task.
            replica: replica.filter(|_| step == BATCH_STEP),
            io,
            container: match st {
                Some(s) => s.container.clone(),
                // sbatch --container-image: the batch script runs in the image, as a service's
                // `image` runs its replicas (not an allocation's placeholder).
                None if step == BATCH_STEP && !j.spec.interactive => j.spec.container.clone(),
                None => None,
            },
            script_env: match (&self.settings.prolog, &j.replica) {
                (Some(_), None) => self.script_env(j, node_index, "prolog_slurmd"),
                _ => Vec::new(),
            },
            // Around every task of a job (not a service's replica, not an allocation's
            // placeholder, which runs nothing of the user's).
            task_scripts: (j.replica.is_none()
                && !(step == BATCH_STEP && j.spec.interactive)
                && (self.settings.task_prolog.is_some() || self.settings.task_epilog.is_some()))
            .then(|| TaskScripts {
                prolog: self.settings.task_prolog.clone(),
                epilog: self.settings.task_epilog.clone(),
                timeout_s: self.settings.prolog_epilog_timeout.max(0) as u64,
            }),
        }
    }

    /// Creates a job step (`srun` inside an allocation): by default one task per allocated task
    /// slot, spread as allocated; `nodes`, `ntasks` and `ntasks_per_node` pick a subset.
    /// Returns the step id.
    #[allow(clippy::too_many_arguments)]
    pub fn create_step(
        &mut self,
        now: Time,
        uid: u32,
        id: u64,
        nodes: Option<u32>,
        ntasks: Option<u32>,
        ntasks_per_node: Option<u32>,
        argv: Vec<String>,
        spec: StepSpec,
    ) -> Result<u32, Refused> {
        self.ensure_owned(uid, id)?;
        let j = self.owned(uid, id)?;
        if j.state == JobState::Suspended {
            // As Slurm's: srun waits ("Job step creation temporarily disabled, retrying").
            return Err(Refused::Busy(format!("Requested operation is presently disabled: job {id} is suspended")));
        }
        if j.state != JobState::Running {
            return Err(Refused::Conflict(format!("job {id} is not running")));
        }
        if argv.is_empty() {
            return Err(Refused::Invalid("srun needs a command".into()));
        }
        if argv.iter().any(|a| a.contains('\0')) {
            return Err(Refused::Invalid("the command must not contain NUL bytes".into()));
        }
        spec.check().map_err(Refused::Invalid)?;
        for n in spec.nodelist.iter().chain(&spec.exclude) {
            if !j.allocs.iter().any(|(a, _)| a == n) {
                return Err(Refused::Invalid(format!("node {n} is not in this job's allocation")));
            }
        }
        // The components it runs on: a heterogeneous job's (component 0 unless `--het-group`
        // names others), else the whole allocation as one.
        let parts: Vec<HetStep> = match (j.het.len(), spec.het.is_empty()) {
            (0, true) => vec![HetStep { group: 0, nodes, ntasks, ntasks_per_node, argv: Vec::new() }],
            (0, false) => return Err(Refused::Invalid("--het-group expected to be used within an HetJob allocation".into())),
            (_, true) => vec![HetStep { group: 0, nodes, ntasks, ntasks_per_node, argv: Vec::new() }],
            (_, false) => spec.het.clone(),
        };
        let size = j.het.len().max(1);
        let mut seen = vec![false; size];
        for p in &parts {
            match seen.get_mut(p.group as usize) {
                None => {
                    return Err(Refused::Invalid(format!("--het-group={}: job {id} has heterogeneous components 0-{}", p.group, size - 1)));
                }
                Some(true) => return Err(Refused::Invalid(format!("--het-group={} is given twice", p.group))),
                Some(s) => *s = true,
            }
            if p.argv.iter().any(|a| a.contains('\0')) {
                return Err(Refused::Invalid("the command must not contain NUL bytes".into()));
            }
        }
        let mut layout: Vec<(String, u32)> = Vec::new();
        let mut held: Vec<StepHold> = Vec::new();
        let mut het_parts: Vec<(u32, u32, Vec<String>)> = Vec::new();
        for p in &parts {
            let (l, h) = self.lay_out(j, p, &spec)?;
            if !j.het.is_empty() {
                het_parts.push((p.group, l.len() as u32, p.argv.clone()));
            }
            layout.extend(l);
            held.extend(h);
        }
        let total: u32 = layout.iter().map(|(_, k)| k).sum();
        if let Some(StepIo { stdin: StdinTo::Rank(r), .. }) = &spec.io
            && *r >= total
        {
            return Err(Refused::Invalid(format!("--input={r}: the step has tasks 0-{}", total - 1)));
        }
        let step_id = j.steps.iter().filter(|s| s.id != BATCH_STEP).map(|s| s.id + 1).max().unwrap_or(0);
        let held: Vec<StepHold> = if spec.res.overlap { Vec::new() } else { held };
        let total = layout.iter().map(|(_, k)| k).sum();
        if let Some(limit) = spec.res.time_limit {
            self.limits_due = self.limits_due.min(now.saturating_add(limit));
        }
        let j = self.jobs.get_mut(&id).expect("checked");
        let left = layout.iter().map(|(_, n)| *n).collect();
        j.steps.push(Step {
            id: step_id,
            argv,
            layout,
            remaining: total,
            left,
            done: Vec::new(),
            exit: 0,
            start: now,
            end: None,
            spec,
            held,
            timeout_at: None,
            usage: Vec::new(),
            het: het_parts,
            suspended_base: j.suspended_secs,
            error: None,
        });
        let built = self.step_tasks(id, step_id);
        self.dirty_jobs.insert(id);
        for (name, t) in built {
            self.order(&name, Order::Launch(t));
        }
        Ok(step_id)
    }

    /// Where one component's part of a step goes (an ordinary job's whole allocation is its
    /// component 0): its nodes and tasks on each, and what it holds there.
    fn lay_out(&self, j: &Job, p: &HetStep, spec: &StepSpec) -> Result<StepPart, Refused> {
        let (nodes, ntasks, ntasks_per_node) = (p.nodes, p.ntasks, p.ntasks_per_node);
        let range = j.component_range(p.group as usize, j.allocs.len());
        let mine = &j.allocs[range];
        // The nodes it may use: the component's, in its order, narrowed by -w and -x.
        let usable: Vec<String> = mine
            .iter()
            .map(|(n, _)| n.clone())
            .filter(|n| (spec.nodelist.is_empty() || spec.nodelist.contains(n)) && !spec.exclude.contains(n))
            .collect();
        let alloc_nodes = usable.len() as u32;
        if alloc_nodes == 0 {
            return Err(Refused::Invalid(if j.het.is_empty() {
                "-w and -x leave no node of the allocation".into()
            } else {
                format!("-w and -x leave no node of heterogeneous component {}", p.group)
            }));
        }
        let shape = j.req.component(p.group as usize).map_or_else(|| j.req.shape.clone(), |c| c.shape);
        let per_alloc = shape.tasks_per_node(mine.len() as u32);
        let n_nodes = nodes.unwrap_or(match (ntasks, ntasks_per_node) {
            (Some(t), Some(p)) => t.div_ceil(p.max(1)),
            (Some(t), None) => t.div_ceil(per_alloc.max(1)).min(alloc_nodes).max(1),
            _ => alloc_nodes,
        });
        if n_nodes == 0 || n_nodes > alloc_nodes {
            return Err(Refused::Invalid(format!("requested {n_nodes} nodes but the allocation has {alloc_nodes} it may use")));
        }
        let per_node = ntasks_per_node.unwrap_or_else(|| match ntasks {
            Some(t) => t.div_ceil(n_nodes),
            None => per_alloc,
        });
        let total = ntasks.unwrap_or(per_node.saturating_mul(n_nodes));
        if total == 0 || total > per_node.saturating_mul(n_nodes) || per_node > 10_000 {
            return Err(Refused::Invalid(format!("cannot lay out {total} tasks on {n_nodes} nodes with {per_node} per node")));
        }
        // What the job's other running steps hold on each node it may use.
        let rooms: Vec<steps::Room> = usable
            .iter()
            .filter_map(|name| {
                let (_, a) = j.allocs.iter().find(|(n, _)| n == name)?;
                let node = self.node_index.get(name).map(|&i| &self.nodes[i].node);
                let mut used = StepHold::default();
                for s in j.steps.iter().filter(|s| s.end.is_none() && s.id != BATCH_STEP) {
                    if let Some(h) = s.layout.iter().position(|(n, _)| n == name).and_then(|at| s.held.get(at)) {
                        used.cpus += h.cpus;
                        used.memory += h.memory;
                        used.gpus.extend(&h.gpus);
                    }
                }
                Some(steps::Room {
                    name,
                    cpus: a.cpus,
                    memory: if a.memory > 0 { a.memory } else { node.map_or(u64::MAX, |n| n.memory) },
                    gpus: &a.gpus,
                    gpu_type: node.and_then(|n| n.gpu_type.as_deref()),
                    used,
                })
            })
            .collect();
        let placed = steps::place(&rooms, n_nodes, per_node, total, &spec.res)?;
        let layout: Vec<(String, u32)> = placed.iter().map(|(i, k, _)| (rooms[*i].name.to_string(), *k)).collect();
        Ok((layout, placed.into_iter().map(|(_, _, h)| h).collect()))
    }

    /// The tasks of step `step` of job `id`'s current run as its layout places them (node,
    /// tasks there; ranks in that order), each with its node and GPUs: with `--gpus-per-task`
    /// its own, with another GPU request the step's on the node, else the job's on the node
    /// split evenly between its tasks when they divide.
    fn step_tasks(&self, id: u64, step: u32) -> Vec<(String, Task)> {
        let j = &self.jobs[&id];
        let Some(st) = j.steps.iter().find(|s| s.id == step) else { return Vec::new() };
        let mut out = Vec::new();
        let mut rank = 0;
        let het = self.het_groups(j);
        for (at, (name, here)) in st.layout.iter().enumerate() {
            let Some(ni) = j.allocs.iter().position(|(n, _)| n == name) else { continue };
            let held = st.held.get(at);
            let g = &j.allocs[ni].1.gpus;
            for local in 0..*here {
                let gpus = match (&st.spec.res.gpus, held) {
                    (Some((model::GpuPer::Task(n), _)), Some(h)) => {
                        let n = *n as usize;
                        Some(h.gpus.iter().skip(local as usize * n).take(n).copied().collect())
                    }
                    (Some(_), Some(h)) => Some(h.gpus.clone()),
                    _ if !g.is_empty() && (g.len() as u32).is_multiple_of(*here) => {
                        let k = g.len() / *here as usize;
                        Some(g[local as usize * k..(local as usize + 1) * k].to_vec())
                    }
                    _ => None,
                };
                let argv = st_argv(st, at);
                let mut t = self.make_task_in(id, step, ni, rank, local, gpus, argv, &het);
                t.step_mem = held.map_or(0, |h| h.memory);
                out.push((name.clone(), t));
                rank += 1;
            }
        }
        out
    }

    /// Decays fair-share usage with the half-life, once a minute at most (as Slurm's
    /// PriorityCalcPeriod), as the simulator does.
    fn decay_usage(&mut self, now: Time) {
        if self.last_decay == 0 || now < self.last_decay {
            self.last_decay = now;
        } else if now - self.last_decay >= 60 {
            self.fairshare.decay(now - self.last_decay, self.settings.half_life);
            self.last_decay = now;
        }
    }

    /// The fair-share tree as `sshare` shows it: each account's shares and decayed usage, and
    /// the fair-share factor its pending jobs get (accounts configured or with usage; the
    /// normalised shares are among the accounts listed), each followed by its users' rows where
    /// associations name them (their part of the account's shares, their usage and factor).
    pub fn shares(&self) -> Vec<ShareRow> {
        let c = &self.settings.cluster;
        let mut names: BTreeSet<String> = c.accounts.iter().map(|a| a.name.clone()).collect();
        names.extend(self.fairshare.accounts().map(|(a, _)| a.to_string()));
        names.extend(self.active().filter(|j| !j.state.is_final()).map(|j| j.req.account.clone()));
        let total_shares: u32 = names.iter().map(|a| c.shares(a)).sum();
        let total_usage = self.fairshare.total();
        let mut rows = Vec::new();
        for account in names {
            let shares = c.shares(&account);
            let usage = self.fairshare.usage(&account);
            let norm = shares as f64 / total_shares.max(1) as f64;
            rows.push(ShareRow {
                norm_shares: norm,
                effective_usage: if total_usage > 0.0 { usage / total_usage } else { 0.0 },
                fairshare: self.fairshare.factor(&account, shares, total_shares),
                raw_shares: shares,
                raw_usage: usage,
                account: account.clone(),
                user: String::new(),
            });
            let users: Vec<&model::Assoc> = c.assocs.iter().filter(|a| a.account == account).collect();
            let sum: u32 = users.iter().map(|a| a.shares.max(1)).sum();
            for a in users {
                let u = self.fairshare.user_usage(&account, &a.user);
                rows.push(ShareRow {
                    norm_shares: norm * a.shares.max(1) as f64 / sum.max(1) as f64,
                    effective_usage: if total_usage > 0.0 { u / total_usage } else { 0.0 },
                    fairshare: self.fairshare.user_factor(&account, &a.user, (shares, total_shares), (a.shares, sum)),
                    raw_shares: a.shares,
                    raw_usage: u,
                    account: account.clone(),
                    user: a.user.clone(),
                });
            }
        }
        rows
    }

    /// Per-factor priority of every pending job (`tandem priority` / `sprio`).
    pub fn priorities(&self, now: Time) -> Vec<(u64, sched::Breakdown)> {
        let node_defs = self.node_defs();
        let usage: Vec<NodeUsage> = self.nodes.iter().map(|n| n.usage.clone()).collect();
        let pending: Vec<Pending> = self
            .jobs
            .values()
            .filter(|j| j.state == JobState::Pending)
            .map(|j| Pending { req: j.req.clone(), seq: j.req.id.0, dep: DepStatus::Satisfied })
            .collect();
        let snap = Snapshot {
            nodes: &node_defs,
            usage: &usage,
            pending: &pending,
            running: &[],
            suspended: &[],
            config: &self.settings.cluster,
            fairshare: &self.fairshare,
            carry: &self.carry,
            history: &self.history,
            reservations: &[],
        };
        sched::priority_breakdown(&snap, now, &self.settings.sched).into_iter().map(|(j, b)| (j.0, b)).collect()
    }
}

/// A task's output and error patterns (`-o`, `-e`): its step's, else its job's (`-e` defaults to
/// `-o`).
fn output_patterns(j: &Job, st: Option<&StepSpec>) -> (String, String) {
    match st.map(|s| (&s.output, &s.error)) {
        Some((Some(o), e)) => (o.clone(), e.clone().unwrap_or_else(|| o.clone())),
        Some((None, Some(e))) => (j.spec.output.clone(), e.clone()),
        _ => (j.spec.output.clone(), j.spec.error.clone().unwrap_or_else(|| j.spec.output.clone())),
    }
}

/// The files a task's standard output and error go to (absolute: a relative pattern is under
/// the working directory), its patterns expanded as Slurm's (`%j`, `%t`, `%N`, ...); an
/// allocation's placeholder (`salloc`) writes nowhere.
fn output_files(j: &Job, st: Option<&StepSpec>, step: u32, rank: u32, node_index: usize, node_name: &str) -> (String, String) {
    if step == BATCH_STEP && j.spec.interactive {
        return ("/dev/null".to_string(), "/dev/null".to_string());
    }
    let workdir = st.and_then(|s| s.workdir.clone()).unwrap_or_else(|| j.spec.workdir.clone());
    let (out_pat, err_pat) = output_patterns(j, st);
    let abs = |p: String| if p.starts_with('/') { p } else { format!("{}/{}", workdir.trim_end_matches('/'), p) };
    let at = slurmcli::PatternAt {
        job: j.req.id.0,
        name: &j.req.name,
        array: j.array.map(|a| (a.array_job, a.task)),
        node: node_name,
        user: &j.req.user,
        step: (step != BATCH_STEP).then_some(step),
        task: rank,
        node_index: node_index as u32,
    };
    (abs(slurmcli::expand_pattern_at(&out_pat, &at)), abs(slurmcli::expand_pattern_at(&err_pat, &at)))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tests_services;

/// One component's part of a step: its nodes with their task counts, and what it holds there.
type StepPart = (Vec<(String, u32)>, Vec<StepHold>);

/// The command of the tasks on entry `at` of a step's layout: its component's, else the step's.
fn st_argv(st: &Step, at: usize) -> Vec<String> {
    let mut upto = 0usize;
    for (_, n, argv) in &st.het {
        upto += *n as usize;
        if at < upto {
            return if argv.is_empty() { st.argv.clone() } else { argv.clone() };
        }
    }
    st.argv.clone()
}
