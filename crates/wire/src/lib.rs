//! The wire format: the HTTP/JSON API's request and response bodies, shared by the server, the
//! agent, the proxy, the CLI and the benchmarks; the OpenAPI document that describes them
//! ([`OPENAPI`]); and reading a service spec file ([`parse_spec`]). Domain records
//! (`control::Job`, orders, task reports) are converted at this edge.
//!
//! This is the one place the wire format is defined. It owns no connection and does no IO: it
//! never opens a file or a socket, reads the clock or spawns anything (the tidy test checks),
//! so every daemon and client can share it.

mod openapi;
mod spec;

pub use openapi::DOCUMENT as OPENAPI;
pub use spec::{SpecError, parse_spec};

use control::{Order, TaskExit, TaskKey};
use model::Node;
use serde::{Deserialize, Serialize};
use slurmcli::BatchSpec;

/// The name clients verify the controller's TLS certificate against, whatever address they
/// dial: the cluster CA issues it to the controller alone (SECURITY.md, N2).
pub const CONTROLLER_NAME: &str = "controller.tandem";

/// The header of a standby controller's answer (503) that names the leading controller's
/// address; clients send their request there instead.
pub const LEADER_HEADER: &str = "x-tandem-leader";

/// The header of a submission (`POST /v1/jobs`) that names it for its retries: the same user's
/// second submission with the same key, within a day, makes nothing and is answered with the
/// first one's jobs (the commands send a fresh random key with each submission and retry with
/// it where a connection broke before the answer).
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";

/// `POST /v1/jobs`: a submission, parsed by the client from its command line and script.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubmitRequest {
    /// The parsed sbatch options and script.
    pub batch: BatchSpec,
    /// Submit directory.
    pub cwd: String,
    /// Submit host.
    pub host: String,
    /// Exported environment.
    pub env: Vec<(String, String)>,
    /// The submitting command's umask (`SLURM_UMASK`); absent from older clients: 0022.
    #[serde(default)]
    pub umask: Option<u32>,
}

/// Response to a submission.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubmitResponse {
    /// New job ids (several for an array).
    pub job_ids: Vec<u64>,
    /// `--test-only`: the expected start instead of a submission.
    pub test_only: Option<String>,
    /// The site's job-submit policy's message to the user (Slurm's `slurm.log_user`).
    #[serde(default)]
    pub user_msg: Option<String>,
}

/// What a job holds on one of its nodes (`squeue --json`'s `job_resources.nodes.allocation`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAllocInfo {
    /// The node.
    pub name: String,
    /// CPUs held there.
    pub cpus: u32,
    /// Memory held there, MiB.
    pub memory_mb: u64,
    /// GPUs held there.
    pub gpus: u32,
}

/// One job as `squeue`/`sacct`/`scontrol show job` show it. The fields after `message` that
/// are null, empty lists or empty strings are left out of the JSON (the OpenAPI document lists
/// them as optional): a listing of thousands of jobs is half as long.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobInfo {
    /// Id (`123` or `120_3` for an array task).
    pub id: u64,
    /// Display id.
    pub display_id: String,
    /// Name.
    pub name: String,
    /// User.
    pub user: String,
    /// Account.
    pub account: String,
    /// Partition.
    pub partition: String,
    /// QOS.
    pub qos: String,
    /// State (Slurm's name).
    pub state: String,
    /// Pending reason.
    pub reason: String,
    /// Nodes, hostlist syntax.
    pub nodelist: String,
    /// Node count.
    pub nodes: u32,
    /// Tasks.
    pub ntasks: u32,
    /// CPUs allocated (or requested).
    pub cpus: u32,
    /// GPUs allocated (or requested).
    pub gpus: u32,
    /// Time limit, seconds (None: unlimited).
    pub time_limit: Option<i64>,
    /// Submit time.
    pub submit: i64,
    /// Start time (or expected start for pending jobs under backfill).
    pub start: Option<i64>,
    /// Whether `start` is an estimate.
    pub start_estimated: bool,
    /// End time.
    pub end: Option<i64>,
    /// Exit code and signal (`0:0`).
    pub exit_code: String,
    /// Restart count.
    pub restarts: u32,
    /// Work directory.
    pub workdir: String,
    /// Output file pattern.
    pub output: String,
    /// Steps: id, command, state.
    pub steps: Vec<StepInfo>,
    /// Options recorded with no effect here (`--comment`, `--wckey`, `--mail-user`, ...), as
    /// (`scontrol show job` key, value); only for the job's owner and root.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recorded: Vec<(String, String)>,
    /// Why it failed or was rejected.
    pub message: Option<String>,
    /// The submitter's uid and primary gid.
    #[serde(default)]
    pub uid: u32,
    /// See `uid`.
    #[serde(default)]
    pub gid: u32,
    /// An array task's array job id (`%F`, `SLURM_ARRAY_JOB_ID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_job_id: Option<u64>,
    /// An array task's index (`%K`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_task_id: Option<u32>,
    /// The array's most tasks running at once (`--array=...%N`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_max_running: Option<u32>,
    /// With `collapse=true`: the pending tasks of this array that wait for the same reason,
    /// this one among them, as index ranges (first, last); they are listed only here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub array_collapsed: Vec<(u32, u32)>,
    /// Memory asked per node, MiB (`--mem`; 0: none asked).
    #[serde(default)]
    pub mem_per_node_mb: Option<u64>,
    /// Memory asked per CPU, MiB (`--mem-per-cpu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_per_cpu_mb: Option<u64>,
    /// CPUs per task (`-c`).
    #[serde(default)]
    pub cpus_per_task: u32,
    /// The uid that cancelled it (`scancel`): sacct's `CANCELLED by UID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_by: Option<u32>,
    /// Standard error file pattern (`-e`; none: with the output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Features asked for (`-C`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
    /// Dependencies as Slurm prints them (`afterok:12,singleton`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dependency: String,
    /// Nodes asked for (`-w`) and excluded (`-x`), hostlist syntax.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub req_nodes: String,
    /// See `req_nodes`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub exc_nodes: String,
    /// Nice value.
    #[serde(default)]
    pub nice: i32,
    /// Submit directory.
    #[serde(default)]
    pub submit_dir: String,
    /// The shortest time limit backfill may cut it to (`--time-min`), seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_min: Option<i64>,
    /// What it holds on each node: the current run's, else the last run's (empty while pending).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allocation: Vec<NodeAllocInfo>,
    /// A heterogeneous job's component (lists show one row per component: `id` is the
    /// leader's plus the offset, `display_id` is `N+K`): the leader's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub het_job_id: Option<u64>,
    /// Its offset (component index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub het_job_offset: Option<u32>,
    /// How many components the job has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub het_size: Option<u32>,
    /// The advance reservation it runs in (`--reservation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// Seconds its run has been suspended, up to the answer (sacct's `Suspended`; its
    /// elapsed time leaves them out).
    #[serde(default)]
    pub suspended: i64,
    /// Suspended now, since then: the time since counts as suspended too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended_since: Option<i64>,
}

impl JobInfo {
    /// Its base state: a `CONFIGURING` job (its image is being pulled) is `RUNNING`, as in
    /// Slurm, where CONFIGURING is a flag on a running job.
    pub fn base_state(&self) -> &str {
        if self.state == "CONFIGURING" { "RUNNING" } else { &self.state }
    }

    /// Running (or configuring: its nodes are its own and its time counts).
    pub fn running(&self) -> bool {
        self.base_state() == "RUNNING"
    }
}

/// One step.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepInfo {
    /// `batch` or the number.
    pub id: String,
    /// Command.
    pub command: String,
    /// Name (`srun -J`, else the command's first word; `batch` for the batch step).
    #[serde(default)]
    pub name: String,
    /// Tasks.
    pub ntasks: u32,
    /// Nodes.
    pub nodelist: String,
    /// Done.
    pub done: bool,
    /// Exit code (largest of the tasks).
    pub exit_code: i32,
    /// Start.
    pub start: i64,
    /// End.
    pub end: Option<i64>,
    /// Ended by its own time limit (`srun -t`): TIMEOUT.
    #[serde(default)]
    pub timed_out: bool,
    /// CPUs it holds (`srun --exact`, `-c`: its own; else the job's on its nodes).
    #[serde(default)]
    pub cpus: u32,
    /// Its tasks' usage as last reported: (rank, node, most resident memory KiB, CPU ms).
    #[serde(default)]
    pub usage: Vec<(u32, String, u64, u64)>,
    /// Its nodes and the number of tasks on each, in rank order (`sattach --layout`).
    #[serde(default)]
    pub layout: Vec<(String, u32)>,
    /// Why a task of it could not run (owner and root only).
    #[serde(default)]
    pub error: Option<String>,
}

/// One node as `sinfo` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Name.
    pub name: String,
    /// State: idle, mixed, allocated, drain, down.
    pub state: String,
    /// CPUs total and allocated.
    pub cpus: (u32, u32),
    /// Memory total and allocated, MiB.
    pub memory_mb: (u64, u64),
    /// GPUs total and allocated, and the model.
    pub gpus: (u32, u32, Option<String>),
    /// Why drained or down.
    pub reason: Option<String>,
    /// Address.
    pub addr: String,
    /// The partitions it belongs to.
    #[serde(default)]
    pub partitions: Vec<String>,
    /// Its features.
    #[serde(default)]
    pub features: Vec<String>,
    /// The advance reservation in force on it, if any (`sinfo %i`, `+RESERVED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// A reboot asked for (`scontrol reboot`): `requested` (Slurm's `@`), or `issued` (`^`:
    /// the reboot program runs; the node takes no work until its agent registers again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot: Option<String>,
    /// When it first registered, Unix seconds (a Node's `creationTimestamp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered: Option<i64>,
    /// When its agent last registered, Unix seconds (`SlurmdStartTime`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_started: Option<i64>,
}

/// `POST /v1/reboot`: `scontrol reboot [ASAP] [nextstate=RESUME|DOWN] [reason=..] NODES`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RebootRequest {
    /// A hostlist, or `ALL`.
    pub nodes: String,
    /// Drain the nodes now, so they empty (`ASAP`).
    #[serde(default)]
    pub asap: bool,
    /// `resume` or `down` after the reboot (absent: the node's state before it; `resume` with
    /// `asap`).
    #[serde(default)]
    pub next_state: Option<String>,
    /// The nodes' reason meanwhile.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `POST /v1/reboot/cancel`: `scontrol cancel_reboot NODES`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelRebootRequest {
    /// A hostlist, or `ALL`.
    pub nodes: String,
}

/// One advance reservation as `scontrol show reservation` and `sinfo -T` show it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResvInfo {
    /// The reservation as kept.
    pub resv: model::Reservation,
    /// The window in force or next (a repeating one moves forward).
    pub start: i64,
    /// Its end.
    pub end: i64,
    /// In force now (`State=ACTIVE`).
    pub active: bool,
    /// CPUs of its nodes (`CoreCnt`).
    pub cpus: u32,
    /// GPUs of its nodes.
    pub gpus: u32,
}

/// `POST /v1/reconfigure`'s answer (`scontrol reconfigure`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Reconfigured {
    /// Keys of the configuration that changed but take effect only at the next start of the
    /// controller (and, for the node scripts, of the agents).
    pub restart_needed: Vec<String>,
}

/// `POST /v1/debug` (`scontrol setdebug`): the controller's log filter, asked for and as it
/// then reads.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DebugLevel {
    /// A level (`info`, `debug`; Slurm's `quiet`, `verbose`, `debug2`...) or `EnvFilter`
    /// directives (`info,server::jobs=debug`).
    pub filter: String,
}

/// `POST /v1/reservations`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResvCreated {
    /// The reservation's name (generated when none was given).
    pub name: String,
}

/// `GET /v1/status` (`tandem status`): the controller that answered (the leader, with etcd),
/// its store, and the store's health.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// The controller's address (with etcd: the one standbys give clients).
    pub controller: String,
    /// Since when it serves (with etcd: since it took the lead), Unix seconds.
    pub serving_since: i64,
    /// The cluster's start count: raised by each start, and with etcd by each new leader.
    pub starts: u64,
    /// `sqlite` or `etcd`.
    pub store: String,
    /// With etcd: its prefix, members and figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd: Option<EtcdStatus>,
    /// Jobs pending.
    pub jobs_pending: u64,
    /// Jobs running (or suspended, or completing).
    pub jobs_running: u64,
    /// Nodes registered.
    pub nodes: u64,
    /// Of them, up.
    pub nodes_up: u64,
}

/// [`ClusterStatus`]'s etcd part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EtcdStatus {
    /// The cluster's keys are below it.
    pub prefix: String,
    /// How many times a controller has taken the lead of this cluster (the first included).
    pub leaderships: u64,
    /// Commits this leader made, and their mean time, seconds.
    pub commits: u64,
    /// The mean time of those commits, seconds.
    pub commit_seconds_mean: f64,
    /// Each member, as it answered.
    pub members: Vec<EtcdMember>,
}

/// One etcd member's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EtcdMember {
    /// Its client address.
    pub endpoint: String,
    /// Why it did not answer (the fields below are then empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// etcd's version.
    pub version: String,
    /// Its database file, bytes.
    pub db_bytes: i64,
    /// Of that, in use (the rest is returned by a defragmentation).
    pub db_bytes_in_use: i64,
    /// Whether it is etcd's leader.
    pub leader: bool,
    /// Whether it knows of a leader.
    pub has_leader: bool,
    /// Its alarms and errors (`NOSPACE`: the space quota is reached).
    pub errors: Vec<String>,
}

/// `GET /v1/config`: what `scontrol show config`, `show partition` and `sinfo` read.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ConfigInfo {
    /// Cluster name.
    pub cluster_name: String,
    /// Seconds between SIGTERM and SIGKILL (KillWait).
    pub kill_wait: i64,
    /// Node lease, seconds.
    pub lease: i64,
    /// Largest array size (MaxArraySize).
    pub max_array: u32,
    /// Seconds a finished job stays in memory (MinJobAge).
    pub min_job_age: i64,
    /// The scheduler's policy, as `SchedulerType` would name it.
    pub scheduler: String,
    /// Partitions, the default first.
    pub partitions: Vec<PartitionInfo>,
    /// QOS names, the default first.
    pub qos: Vec<String>,
    /// The largest batch script, bytes (`max_script_size`); absent from older controllers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_script_size: Option<u64>,
    /// Slurm's MpiDefault (`pmi2` or `pmix`): srun's MPI type when it names none; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi_default: Option<String>,
    /// The site's job-submit script (`JobSubmitPlugins=lua`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_submit: Option<String>,
    /// Slurm's RebootProgram, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_program: Option<String>,
    /// Slurm's ResumeTimeout, seconds; absent from older controllers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_timeout: Option<i64>,
    /// The controller's log filter (`SlurmctldDebug`); absent from older controllers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_filter: Option<String>,
}

/// `POST /v1/jobs/cancel`: many jobs cancelled (or signalled) in one request (`scancel -u`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Job ids.
    pub ids: Vec<u64>,
    /// Only signal their tasks with this signal (`scancel -s`).
    #[serde(default)]
    pub signal: Option<i32>,
    /// With `signal`: the batch step's shell only (`scancel -b`).
    #[serde(default)]
    pub batch: bool,
    /// Besides `ids`: every unfinished job the caller can see that matches all of these,
    /// chosen by the controller (`scancel -u`, `-t`, `-p` without job ids, as Slurm's
    /// `REQUEST_KILL_JOBS`), so the client sends no list and lists nothing first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matching: Option<CancelMatch>,
}

/// Which jobs a bulk cancel chooses; at least one field must be set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelMatch {
    /// Jobs of any of these users (names or uids).
    #[serde(default)]
    pub users: Vec<String>,
    /// In any of these states (`PENDING`, `RUNNING`, `SUSPENDED`).
    #[serde(default)]
    pub states: Vec<String>,
    /// In this partition.
    #[serde(default)]
    pub partition: Option<String>,
}

/// What a bulk cancel refused: each job id with the reason.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CancelResponse {
    /// Ids refused, and why.
    pub refused: Vec<(u64, String)>,
}

/// `GET /v1/accounting`: what `sacctmgr show` and `scontrol show assoc_mgr` read.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AccountingInfo {
    /// Cluster name.
    pub cluster: String,
    /// What is enforced, as Slurm's `AccountingStorageEnforce` (`associations,limits,qos`).
    pub enforce: String,
    /// QOS, the default first.
    pub qos: Vec<model::Qos>,
    /// Accounts.
    pub accounts: Vec<model::Account>,
    /// Users (and the caller, when the caller has only the account of their own name).
    pub users: Vec<model::User>,
    /// Associations: each account's own row (`user` empty), then each user's, resolved.
    pub assocs: Vec<AssocRow>,
}

/// One association, with what it inherits filled in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssocRow {
    /// Account.
    pub account: String,
    /// User; empty for the account's own row.
    pub user: String,
    /// The parent account of an account's row (`root` at the top); empty for a user's row.
    pub parent: String,
    /// Fair-share shares.
    pub shares: u32,
    /// QOS it may use.
    pub qos: Vec<String>,
    /// QOS of a job without `-q` (empty: the cluster's default).
    pub default_qos: String,
    /// Its own limits.
    pub limits: model::Limits,
}

/// `POST /v1/accounting`: one `sacctmgr add|modify|delete`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AcctRequest {
    /// The change.
    pub change: control::accounting::AcctChange,
    /// Only say what it would do (`sacctmgr` asks before committing).
    #[serde(default)]
    pub dry_run: bool,
}

/// What a `sacctmgr` change did, as `sacctmgr` prints it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AcctResponse {
    /// The text.
    pub text: String,
}

/// One partition.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PartitionInfo {
    /// Name.
    pub name: String,
    /// The default partition.
    pub default: bool,
    /// Default time limit, seconds (None: unlimited).
    pub default_time: Option<i64>,
    /// Largest time limit, seconds (None: unlimited).
    pub max_time: Option<i64>,
    /// Priority tier.
    pub priority_tier: u32,
    /// Its nodes (None: every node).
    pub nodes: Option<Vec<String>>,
}

/// `POST /v1/jobs/{id}/steps`: an `srun` inside an allocation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepRequest {
    /// `-N`.
    pub nodes: Option<u32>,
    /// `-n`.
    pub ntasks: Option<u32>,
    /// `--ntasks-per-node`.
    pub ntasks_per_node: Option<u32>,
    /// Command.
    pub argv: Vec<String>,
    /// Environment, directory, output and the rest (absent: the job's).
    #[serde(default)]
    pub spec: StepSpec,
}

/// Response to a step creation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepResponse {
    /// Step id.
    pub step: u32,
    /// Its nodes and tasks on each, in rank order (ranks 0.. on the first node, ...).
    #[serde(default)]
    pub layout: Vec<(String, u32)>,
}

/// `POST /v1/join-tokens` (root or the controller's own user): single-use tokens, each of
/// which admits one new node (`tandem token --join`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinTokensRequest {
    /// How many (default 1, at most [`MAX_JOIN_TOKENS`]).
    #[serde(default)]
    pub count: Option<u32>,
    /// Seconds each is valid (default 3,600, at most 30 days).
    #[serde(default)]
    pub lifetime: Option<i64>,
}

/// Most join tokens one request makes.
pub const MAX_JOIN_TOKENS: u32 = 100_000;

/// The answer to [`JoinTokensRequest`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinTokens {
    /// The tokens.
    pub tokens: Vec<String>,
    /// When they expire, Unix seconds.
    pub expires: i64,
}

/// `POST /v1/agent/join` (header `authorization: Bearer JOIN-TOKEN`): spends the join token on
/// a credential for this node name.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinRequest {
    /// The node's name.
    pub name: String,
}

/// A node's or a proxy's credential, sent as `authorization: Bearer CREDENTIAL` with each of
/// its requests.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Credential {
    /// The credential.
    pub credential: String,
}

/// `POST /v1/proxy-credentials` (root or the controller's own user): a credential for an
/// inference proxy (`tandem token --proxy NAME`); one issued before for the name is revoked.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyCredentialRequest {
    /// The proxy's name.
    pub name: String,
}

/// `POST /v1/agent/register`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RegisterRequest {
    /// The node and its resources.
    pub node: Node,
    /// Address other nodes reach it at.
    pub addr: String,
    /// The tasks it runs (those an earlier agent process started included, once adopted):
    /// the controller ends at once every run it placed here that the agent does not have.
    #[serde(default)]
    pub running: Vec<TaskKey>,
    /// Tasks that ended and were not reported yet (an earlier agent process's included).
    #[serde(default)]
    pub exits: Vec<TaskExit>,
    /// The agent's release (`MAJOR.MINOR.PATCH`, its `tandem --version`); absent from agents
    /// from before releases were sent, which are release 0.1 ([`agent_release_ok`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// Whether a controller of release `controller` takes an agent of release `agent` (`None`:
/// an agent from before releases were sent, 0.1). As Slurm's promise: the controller may be
/// one release ahead of its agents (a release is `MAJOR.MINOR`; patch levels are the same
/// release), never behind, so a cluster upgrades its controller first, then its agents. The
/// error says which to upgrade.
pub fn agent_release_ok(controller: &str, agent: Option<&str>) -> Result<(), String> {
    fn release(v: &str) -> Option<(u64, u64)> {
        let mut p = v.trim().split(['.', '-', '+']);
        let major = p.next()?.parse().ok()?;
        let minor = p.next()?.parse().ok()?;
        Some((major, minor))
    }
    let ctl = release(controller).ok_or_else(|| format!("the controller's release {controller:?} does not read"))?;
    let a = match agent {
        None => (0, 1),
        Some(v) => {
            release(v).ok_or_else(|| format!("malformed agent release {:?} (MAJOR.MINOR.PATCH)", v.chars().take(40).collect::<String>()))?
        }
    };
    let shown = agent.unwrap_or("0.1 (sent none)");
    if a > ctl {
        return Err(format!(
            "this agent's release {shown} is newer than the controller's {controller}: upgrade the controller first (a controller may be one release ahead of its agents, never behind)"
        ));
    }
    // One release behind: the previous minor of the same major, or any of the previous major
    // when the controller's is the first minor of its major.
    let one_behind = a == ctl || (a.0 == ctl.0 && a.1 + 1 == ctl.1) || (a.0 + 1 == ctl.0 && ctl.1 == 0);
    if !one_behind {
        return Err(format!(
            "this agent's release {shown} is more than one release behind the controller's {controller}: upgrade the agent (a controller may be one release ahead of its agents)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod release_tests {
    use super::agent_release_ok;

    #[test]
    fn a_controller_takes_its_own_and_the_previous_release_never_a_newer_one() {
        for (ctl, agent) in [
            ("0.1.0", Some("0.1.0")),
            ("0.1.3", Some("0.1.0")),
            ("0.2.0", Some("0.1.9")),
            ("0.1.0", None),
            ("0.2.1", None),
            ("1.0.0", Some("0.7.2")),
            ("1.4.0", Some("1.3.0")),
            ("0.1.0-rc1", Some("0.1.0")),
        ] {
            assert_eq!(agent_release_ok(ctl, agent), Ok(()), "{ctl} {agent:?}");
        }
        let newer = agent_release_ok("0.1.0", Some("0.2.0")).unwrap_err();
        assert!(newer.contains("newer than the controller's 0.1.0: upgrade the controller first"), "{newer}");
        assert!(agent_release_ok("0.1.5", Some("1.0.0")).is_err());
        let older = agent_release_ok("0.3.0", Some("0.1.0")).unwrap_err();
        assert!(older.contains("more than one release behind") && older.contains("upgrade the agent"), "{older}");
        assert!(agent_release_ok("0.3.0", None).is_err(), "an agent that sends none is 0.1");
        assert!(agent_release_ok("1.1.0", Some("0.9.0")).is_err());
        for bad in ["", "x", "1", "1.x.0", "\u{1b}[31m"] {
            let e = agent_release_ok("0.1.0", Some(bad)).unwrap_err();
            assert!(e.starts_with("malformed agent release"), "{bad:?}: {e}");
        }
    }
}

/// Response to a registration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RegisterResponse {
    /// Lease, seconds.
    pub lease_s: i64,
    /// Heartbeat interval the agent should use, milliseconds.
    pub heartbeat_ms: u64,
    /// The node-local prolog (Slurm's Prolog), run as root before a job's first task here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prolog: Option<String>,
    /// The node-local epilog (Slurm's Epilog), run once a job's run here is over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epilog: Option<String>,
    /// A prolog or epilog running this long (seconds) is killed and counts as failed; 0: none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prolog_epilog_timeout_s: u64,
    /// The node-local health check (Slurm's HealthCheckProgram), run as root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check_program: Option<String>,
    /// Seconds between health checks (0: never).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub health_check_interval_s: u64,
    /// When the check runs: `any`, `idle` (no task here), `alloc` (some); absent: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check_node_state: Option<String>,
    /// The built-in GPU check runs at each health check turn.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gpu_health_check: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `POST /v1/agent/heartbeat`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Heartbeat {
    /// Node name.
    pub node: String,
    /// Highest order sequence number received so far (acknowledges it and all before it).
    pub ack: u64,
    /// Tasks running.
    pub running: Vec<TaskKey>,
    /// Tasks that ended since the last heartbeat.
    pub exits: Vec<TaskExit>,
    /// Wait up to this long for orders before answering (long poll).
    pub wait_ms: u64,
    /// Service replicas running here: port, readiness, restarts.
    #[serde(default)]
    pub replicas: Vec<control::ReplicaReport>,
    /// The running tasks' usage (memory, CPU time), for `sstat`.
    #[serde(default)]
    pub usage: Vec<control::TaskUsage>,
    /// Tasks whose image the agent is pulling (their jobs show as `CONFIGURING`).
    #[serde(default)]
    pub pulling: Vec<control::Pulling>,
    /// The node drains itself with this reason (its prolog or epilog failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<String>,
    /// Its health check failed since the last heartbeat, saying this: the node drains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_failed: Option<String>,
    /// The failed check marks the node down (the program exited 2) instead.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub health_down: bool,
    /// Its health check passed since the last heartbeat: a drain the check made is undone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub health_passed: bool,
    /// Runs (job, run number) it holds suspended (`scontrol suspend`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frozen: Vec<(u64, u32)>,
    /// Batch steps it started since its last heartbeat that was answered, with the Unix second
    /// each started: the run's start in accounting (the scheduler's decision may be earlier,
    /// when the launch waited for the controller's disk).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub started: Vec<(TaskKey, i64)>,
}

/// Response to a heartbeat.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Orders {
    /// What to do, with sequence numbers; resent until acknowledged.
    pub orders: Vec<(u64, Order)>,
}

/// Response to a heartbeat the controller took (the node's lease renewed, in its memory) but
/// could not make durable (its disk is full, say), with HTTP 503. It carries no orders and
/// acknowledges no exit: the agent reports them again. It lets the agent and its tasks'
/// keepers renew their fencing deadlines, so a controller that is up but cannot write does
/// not make every node kill its work; a controller that restarts from its database renews
/// every lease at restore, so the renewal never outlives the controller's own view.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Unsaved {
    /// Why it could not save.
    pub error: String,
    /// Always true: the lease was renewed in memory.
    pub lease_renewed: bool,
}

/// Error body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApiError {
    /// Message for the user.
    pub error: String,
    /// The site's job-submit policy's message to the user (Slurm's `slurm.log_user`), shown
    /// before the error.
    #[serde(default)]
    pub user_msg: Option<String>,
}

// ---- Services ----

/// `POST /v1/services`: apply a service spec.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyRequest {
    /// The spec.
    pub spec: control::ServiceSpec,
    /// Directory it was applied from (the default working directory).
    pub cwd: String,
    /// The applying command's umask, the replicas' (absent from older clients: 0022).
    #[serde(default)]
    pub umask: Option<u32>,
}

/// Response to an apply.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApplyResponse {
    /// Service.
    pub name: String,
    /// Its revision now.
    pub revision: u32,
    /// Whether anything changed.
    pub changed: bool,
    /// The site's job-submit policy's message to the user (`slurm.log_user`).
    #[serde(default)]
    pub user_msg: Option<String>,
}

/// `POST /v1/services/{name}`: scale or undo.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum ServiceAction {
    /// Set the replica count.
    Scale {
        /// Count.
        replicas: u32,
    },
    /// Go back to an earlier revision (default: the previous one).
    Undo {
        /// Revision.
        revision: Option<u32>,
    },
}

/// One replica as `tandem service show` prints it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplicaRow {
    /// Replica id.
    pub id: String,
    /// Its job id.
    pub job: u64,
    /// Replica state.
    pub state: String,
    /// Revision.
    pub revision: u32,
    /// Node.
    pub node: Option<String>,
    /// `host:port`.
    pub addr: Option<String>,
    /// Restarts by its agent.
    pub restarts: u32,
    /// Last problem.
    pub message: Option<String>,
    /// Why it waits (pending).
    pub reason: String,
    /// Output file.
    pub log: String,
}

/// A service as `tandem service list/show` print it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServiceInfo {
    /// Name.
    pub name: String,
    /// Owner.
    pub user: String,
    /// Current revision.
    pub revision: u32,
    /// Earlier revisions kept for undo.
    pub history: Vec<u32>,
    /// Desired replicas.
    pub desired: u32,
    /// Ready replicas.
    pub ready: u32,
    /// Replicas of the current revision that are ready.
    pub updated_ready: u32,
    /// Replicas (live ones, and those on their way out).
    pub replicas: Vec<ReplicaRow>,
    /// Being deleted.
    pub deleting: bool,
    /// Desired count over time: (Unix milliseconds, count).
    pub scale_log: Vec<(i64, u32)>,
    /// Proxy gauges, summed.
    pub stats: control::ProxyServiceStats,
    /// The spec of the current revision.
    pub spec: control::ServiceSpec,
}

// ---- The inference proxy's contract with the controller: `POST /v1/proxy/sync` ----

/// `POST /v1/proxy/sync` (header `x-tandem-secret`): a proxy's report, and its long poll for a
/// newer endpoint view.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProxySync {
    /// The proxy's listen address (identifies the proxy).
    pub proxy: String,
    /// The view version the proxy holds (0: none yet).
    #[serde(default)]
    pub since: u64,
    /// Hold the answer up to this long while the version is not newer than `since` (long poll).
    #[serde(default)]
    pub wait_ms: u64,
    /// Gauges and counters per service.
    #[serde(default)]
    pub services: std::collections::BTreeMap<String, ProxyServiceStats>,
}

/// A service's spec file, and its quantities, are the controller's own.
pub use control::ServiceSpec;
/// What the controller answers a caller without the right to change the accounting.
pub use control::accounting::NO_PRIVILEGE;
/// `sacctmgr`'s changes are the controller's own type.
pub use control::accounting::{AcctChange, Entity as AcctEntity, SetOp, Setting, Verb as AcctVerb};
/// `[proxy] prefill_pace` when a spec does not say (also `tandem proxy --prefill-pace`'s default).
pub use control::service::DEFAULT_PREFILL_PACE;
/// A service's Kubernetes namespace and name (`web.team-a`: `web` in `team-a`).
pub use control::service::{DEFAULT_NAMESPACE, join_name as service_name, split_name as service_namespace};
pub use control::service::{ProbeSpec, Quantity};
/// The view types are the controller's own (the wire format is defined there).
pub use control::{EndpointView, HetStep, ProxyServiceStats, ServiceEndpoints, ShareRow, StdinTo, StepIo, StepRes, StepSpec};
/// The accounting's objects are the model's.
pub use model::{Account, AdminLevel, Limits, Qos, Reservation, Tres, User};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_of_older_clients_without_a_umask_still_read() {
        let req = SubmitRequest { batch: Default::default(), cwd: "/".into(), host: "h".into(), env: vec![], umask: Some(0o077) };
        let mut v = serde_json::to_value(&req).unwrap();
        assert_eq!(v["umask"], 63);
        v.as_object_mut().unwrap().remove("umask");
        assert_eq!(serde_json::from_value::<SubmitRequest>(v).unwrap().umask, None);
        let mut v = serde_json::to_value(StepSpec::default()).unwrap();
        v.as_object_mut().unwrap().remove("umask");
        assert_eq!(serde_json::from_value::<StepSpec>(v).unwrap().umask, None);
        let v = serde_json::json!({"spec": {"name": "a", "command": ["x"]}, "cwd": "/"});
        assert_eq!(serde_json::from_value::<ApplyRequest>(v).unwrap().umask, None);
        let v = serde_json::json!({"cluster_name": "c", "kill_wait": 1, "lease": 1, "max_array": 1, "min_job_age": 1, "scheduler": "s",
            "partitions": [], "qos": []});
        assert_eq!(serde_json::from_value::<ConfigInfo>(v).unwrap().max_script_size, None);
    }
}
