//! The controller's records: jobs, steps, nodes, and the orders and reports exchanged with
//! node agents. These are what the store persists (as JSON) and what the API shows.

use model::{JobRequest, JobState, Node, NodeState, PendingReason, ReplicaState, Time};

use crate::service::Probe;
use sched::{Alloc, NodeUsage};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The step id of a job's batch script (Slurm prints it as `.batch`).
pub const BATCH_STEP: u32 = u32::MAX;

/// What to run and how, beyond the scheduler's request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    /// The batch script's text.
    pub script: String,
    /// Arguments to the script.
    pub script_args: Vec<String>,
    /// Working directory (`--chdir`, else the submit directory).
    pub workdir: String,
    /// Submit directory.
    pub submit_dir: String,
    /// Submit host.
    pub submit_host: String,
    /// Environment exported from the submitting shell (per `--export`).
    pub env: Vec<(String, String)>,
    /// `-o` pattern (default `slurm-%j.out`).
    pub output: String,
    /// `-e` pattern (default: same as output).
    pub error: Option<String>,
    /// `--open-mode=append`: never empty the files (else they are emptied when the job first
    /// starts; a requeued run appends, as Slurm's).
    #[serde(default = "yes")]
    pub append: bool,
    /// Requeue on node failure or preemption.
    pub requeue: bool,
    /// `--signal`: signal number, seconds before the limit, batch shell only.
    pub signal: Option<(i32, Time, bool)>,
    /// An allocation (`salloc`, `srun` outside one): nothing runs but a placeholder that
    /// holds the nodes until its owner completes it (or cancels it, or its limit comes).
    #[serde(default)]
    pub interactive: bool,
    /// Submitting user's uid and gid.
    pub uid: u32,
    /// Primary group.
    pub gid: u32,
    /// Options recorded and shown, with no effect here (`--comment`, `--wckey`, `--mail-*`,
    /// `--hint`, ...), as (Slurm's `scontrol show job` key, value).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recorded: Vec<(String, String)>,
    /// `--get-user-env`: the batch script starts from the user's login environment on the
    /// node, the submitted variables winning.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub login_env: bool,
    /// The submitting command's umask (`SLURM_UMASK`): the tasks run with it and their
    /// output files are created 0666 under it. `None` (an older body): 0022.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub umask: Option<u32>,
    /// `sbatch --container-image` and the rest: the batch script runs in this image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<slurmcli::Container>,
    /// How many failed runs (a batch script that exits non-zero or is killed by a signal) run
    /// again, an array's tasks counted together: a Kubernetes Job's `backoffLimit`. Once one
    /// more fails, the array's other tasks are cancelled. `None` (sbatch's): a failed run ends
    /// its job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
}

impl JobSpec {
    /// The options of `b` that are recorded and shown only, as (`scontrol show job` key,
    /// value).
    pub fn recorded_of(b: &slurmcli::BatchSpec) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = [
            ("Comment", &b.comment),
            ("WCKey", &b.wckey),
            ("MailUser", &b.mail_user),
            ("MailType", &b.mail_type),
            ("Hint", &b.hint),
            ("Distribution", &b.distribution),
            ("GetUserEnv", &b.get_user_env),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (k.to_string(), v.clone())))
        .collect();
        if let Some(t) = b.threads_per_core {
            out.push(("ThreadsPerCore".into(), t.to_string()));
        }
        out
    }

    /// A root job that runs `script` in `/tmp`, default output, requeueable: what tests and
    /// tools start from.
    pub fn script(script: &str) -> JobSpec {
        JobSpec {
            script: script.into(),
            script_args: Vec::new(),
            workdir: "/tmp".into(),
            submit_dir: "/tmp".into(),
            submit_host: "localhost".into(),
            env: Vec::new(),
            output: "slurm-%j.out".into(),
            error: None,
            append: true,
            requeue: true,
            signal: None,
            interactive: false,
            uid: 0,
            gid: 0,
            recorded: Vec::new(),
            login_env: false,
            umask: None,
            container: None,
            retries: None,
        }
    }
}

/// An array task's place in its array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayInfo {
    /// The array job id (the first task's id).
    pub array_job: u64,
    /// This task's index.
    pub task: u32,
    /// Number of tasks, smallest and largest index, step.
    pub count: u32,
    /// Smallest index.
    pub min: u32,
    /// Largest index.
    pub max: u32,
    /// Most tasks of the array running at once.
    pub max_running: Option<u32>,
}

/// A job step: the batch script, or one `srun`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// Step id ([`BATCH_STEP`] for the batch script).
    pub id: u32,
    /// Command (for `srun` steps).
    pub argv: Vec<String>,
    /// Nodes used, by name, and tasks on each.
    pub layout: Vec<(String, u32)>,
    /// Tasks not yet exited.
    pub remaining: u32,
    /// Tasks not yet exited on each node of `layout`, in its order (empty in records from
    /// before it was kept: then not known).
    #[serde(default)]
    pub left: Vec<u32>,
    /// Ranks whose end was reported (a report repeated after a lost reply counts once).
    #[serde(default)]
    pub done: Vec<u32>,
    /// Largest exit code so far (or 128 + signal).
    pub exit: i32,
    /// Started.
    pub start: Time,
    /// Ended.
    pub end: Option<Time>,
    /// How its tasks run (`srun`'s environment, directory, output, ...).
    #[serde(default)]
    pub spec: StepSpec,
    /// What it holds of its job's allocation on each node of `layout`, in its order (empty
    /// for `--overlap`, the batch step, and records from before steps held anything): other
    /// steps may not use it while it runs.
    #[serde(default)]
    pub held: Vec<StepHold>,
    /// When its time limit (`srun -t`) sent it SIGTERM; its tasks are killed `KillWait` later
    /// and it ends TIMEOUT.
    #[serde(default)]
    pub timeout_at: Option<Time>,
    /// Its tasks' usage as their agents last reported it: (rank, node, most resident memory
    /// in KiB, CPU milliseconds). Kept in memory as reports come, and saved with the step's
    /// other changes (its end).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usage: Vec<(u32, String, u64, u64)>,
    /// A step of a heterogeneous job: per component it runs on, in `layout`'s order, the
    /// component, how many entries of `layout` are its, and its command (empty: `argv`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub het: Vec<(u32, u32, Vec<String>)>,
    /// Its job's suspended seconds when it started: its own time limit moves on by those
    /// added since.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub suspended_base: Time,
    /// Why a task of it could not run (its launch, its container), the first reason given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What one task has used so far, as its agent reads it (`sstat`, sacct's MaxRSS and AveCPU).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskUsage {
    /// The task.
    pub key: TaskKey,
    /// Resident memory of its processes now, KiB.
    pub rss_kb: u64,
    /// The most seen, KiB.
    pub max_rss_kb: u64,
    /// CPU time its processes used (user and system), milliseconds.
    pub cpu_ms: u64,
}

/// What a running step holds of its job's allocation on one node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepHold {
    /// CPUs.
    pub cpus: u32,
    /// Memory, bytes (0: the step is limited by the job's memory only, and holds none, as
    /// Slurm's `--mem=0`).
    pub memory: u64,
    /// GPU indices (of the job's on the node) it holds.
    pub gpus: Vec<u8>,
}

/// What an `srun` step asks of its job's allocation, as Slurm's step options inside one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepRes {
    /// `-c`: CPUs per task (default 1); given, it implies `exact`.
    #[serde(default)]
    pub cpus_per_task: Option<u32>,
    /// `--exact`, or `--exclusive` inside an allocation: only the CPUs asked for (else every
    /// free CPU of the job on each of the step's nodes).
    #[serde(default)]
    pub exact: bool,
    /// `--whole`: every free CPU of the job on each node, even with `-c`.
    #[serde(default)]
    pub whole: bool,
    /// `--overlap`: holds nothing and waits for nothing, sharing what other steps hold.
    #[serde(default)]
    pub overlap: bool,
    /// `-O/--overcommit`: more tasks than CPUs on a node.
    #[serde(default)]
    pub overcommit: bool,
    /// `--mem` (per node) or `--mem-per-cpu`; absent or `--mem=0`: the job's memory, none held.
    #[serde(default)]
    pub mem: Option<model::MemRequest>,
    /// `--gpus`, `--gpus-per-node`, `--gpus-per-task` (with a type, which must be the job's);
    /// absent: the tasks see the job's GPUs on their node, and hold none.
    #[serde(default)]
    pub gpus: Option<(model::GpuPer, Option<String>)>,
    /// `-t`: the step's own time limit, seconds.
    #[serde(default)]
    pub time_limit: Option<Time>,
}

/// How an `srun` step's tasks run, beyond their layout; what is not given comes from the job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepSpec {
    /// The tasks' environment (`srun`'s, after `--export`); `None`: the job's.
    #[serde(default)]
    pub env: Option<Vec<(String, String)>>,
    /// Working directory (absolute); `None`: the job's.
    #[serde(default)]
    pub workdir: Option<String>,
    /// `-o` pattern (`%t %n %N %j %J %s %u %x %A %a`), relative to the working directory;
    /// `None`: the job's output file.
    #[serde(default)]
    pub output: Option<String>,
    /// `-e` pattern; `None`: with `output`, the same; else the job's error file.
    #[serde(default)]
    pub error: Option<String>,
    /// `--open-mode=truncate`: the files are emptied when each task opens them.
    #[serde(default)]
    pub truncate: bool,
    /// `-K`: a task that exits non-zero (or is killed) ends the step's other tasks.
    #[serde(default)]
    pub kill_on_bad_exit: bool,
    /// `-J`: the step's name (default: the command).
    #[serde(default)]
    pub name: Option<String>,
    /// Nodes it may use (`-w`), of the job's; empty: any of them.
    #[serde(default)]
    pub nodelist: Vec<String>,
    /// Nodes it may not use (`-x`).
    #[serde(default)]
    pub exclude: Vec<String>,
    /// The tasks' standard streams (and PMI) go to `srun` over its own connection; `None`:
    /// the files above.
    #[serde(default)]
    pub io: Option<StepIo>,
    /// `srun`'s umask: the tasks run with it (`SLURM_UMASK`); `None`: the job's.
    #[serde(default)]
    pub umask: Option<u32>,
    /// What it takes of the job's allocation (CPUs, memory, GPUs, time).
    #[serde(default)]
    pub res: StepRes,
    /// `--cpu-bind` as given: each task is bound to the CPUs it names (`rank`, `map_cpu`,
    /// `mask_cpu`), else unbound.
    #[serde(default)]
    pub cpu_bind: Option<String>,
    /// `-m/--distribution` as given (recorded: tasks are laid out in blocks).
    #[serde(default)]
    pub distribution: Option<String>,
    /// Pyxis's `--container-*`: the tasks run in an image.
    #[serde(default)]
    pub container: Option<slurmcli::Container>,
    /// In a heterogeneous job, the components the step runs on (`srun --het-group`, `srun A :
    /// B`), in rank order; empty: component 0 alone, with the step's own node and task counts.
    #[serde(default)]
    pub het: Vec<HetStep>,
}

/// One component of a heterogeneous job that a step runs on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HetStep {
    /// The component (`--het-group`'s index).
    pub group: u32,
    /// `-N` there; absent: the component's nodes.
    #[serde(default)]
    pub nodes: Option<u32>,
    /// `-n` there; absent: the component's tasks.
    #[serde(default)]
    pub ntasks: Option<u32>,
    /// `--ntasks-per-node` there.
    #[serde(default)]
    pub ntasks_per_node: Option<u32>,
    /// The command its tasks run; empty: the step's.
    #[serde(default)]
    pub argv: Vec<String>,
}

/// Where a step's tasks connect for their I/O: `srun` listens, each task's agent connects
/// over TLS to exactly the certificate given here and proves itself with the step's key (the
/// two secrets travel only over the users' and the agents' authenticated connections to the
/// controller, and are never shown).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepIo {
    /// `host:port` that `srun` listens on.
    pub addr: String,
    /// `srun`'s certificate (PEM), the only one the agents accept there.
    pub cert: String,
    /// The step's key (64 hex digits), which the agents present.
    pub key: String,
    /// Whose standard input is `srun`'s: every task, one (`--input=N`) or none.
    #[serde(default)]
    pub stdin: StdinTo,
    /// Standard output goes to `srun` (else to `output`).
    #[serde(default)]
    pub stdout: bool,
    /// Standard error goes to `srun` (else to `error`).
    #[serde(default)]
    pub stderr: bool,
    /// `--pty`: task 0 runs on a pseudo-terminal (the others' streams are discarded).
    #[serde(default)]
    pub pty: bool,
    /// `--pty`: the terminal's size when the step starts (rows, columns).
    #[serde(default)]
    pub winsize: Option<(u16, u16)>,
    /// `--mpi=pmi2` (or PMI-1): each task gets a PMI socket (`PMI_FD`), tunnelled to `srun`.
    #[serde(default)]
    pub pmi: bool,
    /// `--mpi=pmix` (with `pmi`): each task runs under `tandem __pmix-task`, which hosts an
    /// OpenPMIx server for it and talks to `srun`'s hub over the PMI socket.
    #[serde(default)]
    pub pmix: bool,
}

impl std::fmt::Debug for StepIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepIo").field("addr", &self.addr).field("stdin", &self.stdin).field("pty", &self.pty).finish_non_exhaustive()
    }
}

/// Which tasks read `srun`'s standard input (`--input`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum StdinTo {
    /// Every task (Slurm's default).
    #[default]
    All,
    /// Only this task.
    Rank(u32),
    /// None: they read `/dev/null`.
    Null,
}

impl StepSpec {
    /// Checks what a user may put in a step (the tasks run as that user: this is about
    /// well-formed values, not permissions).
    pub fn check(&self) -> Result<(), String> {
        if let Some(c) = &self.container {
            c.check().map_err(|e| e.0)?;
        }
        if let Some(env) = &self.env {
            if env.len() > 10_000 || env.iter().map(|(k, v)| k.len() + v.len() + 2).sum::<usize>() > 4 << 20 {
                return Err("the environment is too large (at most 10,000 variables, 4 MiB)".into());
            }
            if let Some((k, _)) = env.iter().find(|(k, v)| k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0')) {
                return Err(format!("invalid environment variable name {k:?}"));
            }
        }
        for (what, v) in [("working directory", &self.workdir), ("output", &self.output), ("error", &self.error), ("name", &self.name)] {
            if let Some(v) = v
                && (v.is_empty() || v.contains('\0') || v.contains('\n') || v.len() > 4096)
            {
                return Err(format!("invalid {what} {v:?}: not empty, no newlines or NUL bytes, at most 4096 bytes"));
            }
        }
        if self.workdir.as_ref().is_some_and(|d| !d.starts_with('/')) {
            return Err("the working directory must be absolute".into());
        }
        for (what, v) in [("--cpu-bind", &self.cpu_bind), ("--distribution", &self.distribution)] {
            if v.as_ref().is_some_and(|v| v.is_empty() || v.len() > 64 << 10 || v.chars().any(char::is_control)) {
                return Err(format!("invalid {what}: not empty, at most 64 KiB, no control characters"));
            }
        }
        if let Some(b) = &self.cpu_bind {
            slurmcli::cpu_bind_cpus(b, 0).map_err(|e| e.0)?;
        }
        let r = &self.res;
        if r.cpus_per_task.is_some_and(|c| c == 0 || c > 100_000) {
            return Err("invalid --cpus-per-task: 1 to 100000".into());
        }
        if let Some((per, ty)) = &r.gpus {
            let n = match per {
                model::GpuPer::Job(n) | model::GpuPer::Node(n) | model::GpuPer::Task(n) => *n,
            };
            if n == 0 || n > 1024 || ty.as_ref().is_some_and(|t| t.is_empty() || t.len() > 64) {
                return Err("invalid GPU request: 1 to 1024 GPUs, a type name of at most 64 bytes".into());
            }
        }
        if r.time_limit.is_some_and(|t| t <= 0) {
            return Err("invalid step time limit: at least one minute".into());
        }
        if let Some(io) = &self.io {
            if io.addr.parse::<core::net::SocketAddr>().is_err() {
                return Err(format!("invalid I/O address {:?}: want IP:PORT", io.addr));
            }
            if io.key.len() != 64 || !io.key.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err("invalid step key: want 64 hex digits".into());
            }
            if io.cert.len() > 16 << 10 || !io.cert.starts_with("-----BEGIN CERTIFICATE-----") {
                return Err("invalid I/O certificate: want one PEM certificate of at most 16 KiB".into());
            }
        }
        Ok(())
    }
}

/// A job as the controller keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// The scheduler's request (id, name, user, shape, limit, ...).
    pub req: JobRequest,
    /// How to run it; shared by the tasks of an array (one copy of the script and
    /// environment for all of them).
    pub spec: Arc<JobSpec>,
    /// Lifecycle state.
    pub state: JobState,
    /// Why it waits (pending jobs).
    pub reason: PendingReason,
    /// Expected start from the last pass (`squeue --start`).
    pub expected_start: Option<Time>,
    /// Start of the current run.
    pub start: Option<Time>,
    /// End.
    pub end: Option<Time>,
    /// Exit code of the batch script.
    pub exit_code: Option<i32>,
    /// Signal that ended the batch script.
    pub exit_signal: Option<i32>,
    /// Allocation of the current run: node name and what it holds there.
    pub allocs: Vec<(String, Alloc)>,
    /// Allocation of the last run, kept after it ends (for accounting).
    #[serde(default)]
    pub last_allocs: Vec<(String, Alloc)>,
    /// Times requeued (`SLURM_RESTART_COUNT`).
    pub restart_count: u32,
    /// Its failed runs that ran again ([`JobSpec::retries`]).
    #[serde(default, skip_serializing_if = "none_failed")]
    pub failed_runs: u32,
    /// Array position.
    pub array: Option<ArrayInfo>,
    /// Steps of the current run.
    pub steps: Vec<Step>,
    /// Run number: bumped at each start, carried by tasks, so reports of an old run are ignored.
    pub epoch: u32,
    /// The user cancelled it while running.
    pub cancelling: bool,
    /// When the time-limit SIGTERM went out.
    pub timeout_at: Option<Time>,
    /// Whether `--signal` has been sent in this run.
    pub warned: bool,
    /// A node of the job failed and it was not requeued.
    pub node_failed: bool,
    /// Why it was rejected or failed, for the user.
    pub message: Option<String>,
    /// Preemption: requeue at this time (after its grace time) unless it exits first.
    pub preempt_at: Option<Time>,
    /// The job whose start preempted this one's run (kept until the run ends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_by: Option<u64>,
    /// The agent confirmed the batch script started (reported it running or exited).
    pub confirmed: bool,
    /// Requeued by a user (`scontrol requeue`) while running: its tasks are being killed, and
    /// it goes back to the queue once its batch script's end is reported (or its node fails),
    /// never while a task of this run may still be alive.
    #[serde(default)]
    pub requeueing: bool,
    /// For a service replica: its service and serving state.
    #[serde(default)]
    pub replica: Option<ReplicaInfo>,
    /// An allocation its owner completed with this exit code (`salloc`'s command's): its
    /// placeholder is being stopped, and the job ends with this code.
    #[serde(default)]
    pub completed: Option<i32>,
    /// The uid that cancelled it (`scancel`), as Slurm's `requid` (sacct's `CANCELLED by UID`).
    #[serde(default)]
    pub cancelled_by: Option<u32>,
    /// A cancelled running job's SIGKILL is due then (SIGTERM went out at the cancel; Slurm's
    /// KillWait later the rest is killed).
    #[serde(default)]
    pub kill_at: Option<Time>,
    /// Its image is being pulled on a node (`--container-image`): the node and the pull's
    /// progress in words. It shows as `CONFIGURING` meanwhile; in memory only.
    #[serde(skip)]
    pub pulling: Option<(String, String)>,
    /// A heterogeneous job's node count per component in its allocation (`allocs`, and
    /// `last_allocs` after it ends, hold component 0's nodes first, then 1's, ...); empty for
    /// an ordinary job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub het: Vec<u32>,
    /// Held because its prolog failed (shown as `launch failed requeued held` until released).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prolog_held: bool,
    /// Not finished in the backup the controller was restored from, and not settled since: a
    /// pending one is held (reason `Restored`); a running one is settled by its agent's report
    /// (still running), else held when its run is found lost, never run again by itself
    /// ([`crate::Controller::restore`] with `from_backup`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restored: bool,
    /// While suspended: since when, and for whom.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspension: Option<crate::suspend::Suspension>,
    /// Seconds this run spent suspended before now (its time limit ends that much later;
    /// `sacct`'s `Suspended`, taken out of its `Elapsed`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub suspended_secs: Time,
    /// The current run's start is the one its node reported (`Controller::runs_started`):
    /// taken once a run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub start_reported: bool,
    /// The idempotency key its submission carried (on the submission's first job, and an
    /// array's record): a retry of the same submission by the same user answers with this job
    /// instead of making another ([`crate::IDEMPOTENCY_RETENTION`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

fn is_zero(t: &Time) -> bool {
    *t == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

impl Job {
    /// The range of `allocs` (or `last_allocs`) that component `k` of a heterogeneous job
    /// holds; for an ordinary job, component 0 is all of them.
    pub fn component_range(&self, k: usize, len: usize) -> std::ops::Range<usize> {
        if self.het.is_empty() {
            return if k == 0 { 0..len } else { len..len };
        }
        let start: usize = self.het.iter().take(k).map(|&n| n as usize).sum();
        let end = start + self.het.get(k).map_or(0, |&n| n as usize);
        start.min(len)..end.min(len)
    }
}

impl Job {
    /// A new pending job: the request and how to run it, nothing run yet.
    pub fn new(req: JobRequest, spec: impl Into<Arc<JobSpec>>) -> Job {
        Job {
            req,
            spec: spec.into(),
            state: JobState::Pending,
            reason: PendingReason::None,
            expected_start: None,
            start: None,
            end: None,
            exit_code: None,
            exit_signal: None,
            allocs: Vec::new(),
            last_allocs: Vec::new(),
            restart_count: 0,
            failed_runs: 0,
            array: None,
            steps: Vec::new(),
            epoch: 0,
            cancelling: false,
            timeout_at: None,
            warned: false,
            node_failed: false,
            message: None,
            preempt_at: None,
            preempted_by: None,
            requeueing: false,
            confirmed: false,
            completed: None,
            cancelled_by: None,
            kill_at: None,
            replica: None,
            pulling: None,
            het: Vec::new(),
            prolog_held: false,
            restored: false,
            suspension: None,
            suspended_secs: 0,
            start_reported: false,
            idempotency_key: None,
        }
    }
}

/// A service replica's serving state (the job holds its allocation and run number).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicaInfo {
    /// Service name.
    pub service: String,
    /// Service revision it runs.
    pub revision: u32,
    /// Lifecycle state.
    pub state: ReplicaState,
    /// Port its agent gave it.
    pub port: Option<u16>,
    /// Restarts by its agent (exits, liveness failures).
    pub restarts: u32,
    /// Last problem its agent reported.
    pub message: Option<String>,
    /// When it entered its state, milliseconds.
    pub since_ms: i64,
    /// The endpoint-view version that first left it out (draining).
    pub drain_version: u64,
    /// When SIGTERM went out, milliseconds.
    pub stop_ms: Option<i64>,
}

/// The replica part of a task: what the agent needs to serve and supervise it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaTask {
    /// Service name.
    pub service: String,
    /// Replica id (`SERVICE-JOBID`).
    pub replica: String,
    /// Readiness probe.
    pub readiness: Option<Probe>,
    /// Liveness probe.
    pub liveness: Option<Probe>,
    /// Startup probe.
    pub startup: Option<Probe>,
    /// SIGTERM-to-SIGKILL time when it stops, milliseconds.
    pub grace_ms: u64,
}

/// What an agent reports of a replica it runs (with every heartbeat).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaReport {
    /// Job.
    pub job: u64,
    /// Run.
    pub epoch: u32,
    /// Its port.
    pub port: u16,
    /// Passing its readiness probe (and startup probe).
    pub ready: bool,
    /// Restarts so far.
    pub restarts: u32,
    /// Waiting to be restarted after an exit or a liveness failure.
    pub crashloop: bool,
    /// What went wrong last.
    pub message: Option<String>,
}

/// A node as the controller keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRec {
    /// Definition (resources, features, topology, state).
    pub node: Node,
    /// What its running jobs hold.
    pub usage: NodeUsage,
    /// Why it is drained or down.
    pub reason: Option<String>,
    /// Its lease: renewed by each heartbeat; when it lapses the node is down.
    pub lease_until: Time,
    /// Last heartbeat.
    pub last_seen: Time,
    /// Address other nodes reach it at (MASTER_ADDR).
    pub addr: String,
    /// When it first registered (0: before this was recorded).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub registered: Time,
    /// When its agent last registered (`scontrol show node`'s `SlurmdStartTime`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub agent_started: Time,
    /// Orders not yet acknowledged by the agent, with their sequence numbers (not persisted
    /// across controller restarts). They are sent with every heartbeat reply until acknowledged,
    /// so a reply lost on the way costs nothing.
    #[serde(skip)]
    pub orders: Vec<(u64, Order)>,
    /// Next order sequence number.
    #[serde(skip)]
    pub next_seq: u64,
    /// The highest acknowledgement of its agent's heartbeats since it last registered: a
    /// heartbeat acknowledging less was sent before one already taken (a request its agent gave
    /// up on that reached the controller late) and is not judged by.
    #[serde(skip)]
    pub acked: u64,
    /// Last heartbeat, milliseconds (for replica failover; not persisted).
    #[serde(skip)]
    pub seen_ms: i64,
    /// Deleted ([`crate::Controller::delete_node`]): an empty, hidden slot kept until the next
    /// restart (not persisted: a deleted node has no record).
    #[serde(skip)]
    pub deleted: bool,
    /// The jobs that hold an allocation here (not persisted: rebuilt from the jobs at start).
    #[serde(skip)]
    pub runs: Vec<u64>,
    /// Drained by its health check (`health_check_program`): a later pass of the check resumes
    /// it; a drain by anyone else stays.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub health_drained: bool,
    /// Drained by a program on the node itself, with the node's credential (NHC's `scontrol
    /// update nodename=$(hostname) state=drain`): the node may resume it, and only it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub self_drained: bool,
    /// Marked down by its health check (the program exited 2): its heartbeats and a new
    /// registration do not bring it back; a later pass of the check does (or root's resume).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub health_down: bool,
    /// Down after a reboot with `nextstate=DOWN`: its heartbeats and registrations do not bring
    /// it back; root's `state=resume` does.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reboot_down: bool,
    /// A reboot asked for (`scontrol reboot`) and not yet complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot: Option<crate::reboot::Reboot>,
}

impl NodeRec {
    /// Queues an order (an identical one already waiting is not queued twice).
    pub fn push(&mut self, o: Order) {
        if self.orders.iter().any(|(_, x)| *x == o) {
            return;
        }
        self.orders.push((self.next_seq, o));
        self.next_seq += 1;
    }

    /// Its state.
    pub fn state(&self) -> NodeState {
        self.node.state
    }
}

/// One task to start on a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// Job.
    pub job: u64,
    /// Run number.
    pub epoch: u32,
    /// Step.
    pub step: u32,
    /// Global rank.
    pub rank: u32,
    /// The batch script's text (batch step), or `None` for a command.
    pub script: Option<String>,
    /// Command and arguments (script arguments for the batch step).
    pub argv: Vec<String>,
    /// Environment.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub workdir: String,
    /// Output file (absolute), appended to.
    pub stdout: String,
    /// Error file (absolute), appended to.
    pub stderr: String,
    /// Empty the output and error files when the task opens them (`--open-mode=truncate`).
    #[serde(default)]
    pub truncate: bool,
    /// Run as this uid/gid (when the agent is root).
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// GPU indices this task may see.
    pub gpus: Vec<u8>,
    /// Memory limit of the job on this node, bytes (0 = none).
    pub mem_limit: u64,
    /// Memory limit of the task's step on this node, bytes (0 = the job's only): `srun
    /// --mem`, a cgroup of its own inside the job's.
    #[serde(default)]
    pub step_mem: u64,
    /// CPUs of the job on this node (0 = no limit): a cgroup v2 agent's `cpu.max` quota.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub cpu_limit: u32,
    /// CPUs the task is bound to (`srun --cpu-bind`); empty: unbound.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpus: Vec<u32>,
    /// The batch script starts from the user's login environment (`--get-user-env`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub login_env: bool,
    /// The umask the task runs with, its output files created 0666 under it; `None` (an
    /// older controller): 0022.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub umask: Option<u32>,
    /// For a service replica: probes and stop settings (the agent picks its port).
    #[serde(default)]
    pub replica: Option<ReplicaTask>,
    /// An `srun` step's task whose streams go to `srun` (`stdout`/`stderr` above then name
    /// the files of the streams that do not).
    #[serde(default)]
    pub io: Option<StepIo>,
    /// The image the task runs in (its step's `--container-*`), else a bare process.
    #[serde(default)]
    pub container: Option<slurmcli::Container>,
    /// The environment of the node's prolog for this run (`SLURM_JOB_ID`, `SLURM_JOB_USER`,
    /// ...), when the cluster has one: the agent runs it before the run's first task there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub script_env: Vec<(String, String)>,
    /// The site's task prolog and epilog (Slurm's TaskProlog, TaskEpilog), run as the user
    /// around this task, when the cluster has either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_scripts: Option<TaskScripts>,
}

/// Slurm's `TaskProlog` and `TaskEpilog`: node-local programs run as the job's user before and
/// after each task ([`Task::task_scripts`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskScripts {
    /// Run before the task; its `export NAME=value` lines reach the task's environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prolog: Option<String>,
    /// Run after the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epilog: Option<String>,
    /// Each runs at most this long, seconds (`prolog_epilog_timeout`; 0: a minute).
    #[serde(default)]
    pub timeout_s: u64,
}

/// A task whose image its agent is pulling, and how far it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pulling {
    /// The task.
    pub key: TaskKey,
    /// Its progress, in words (`pulling REF: layer 2/5 (1234 bytes)`).
    pub progress: String,
}

/// What the controller asks of an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Order {
    /// Start a task.
    Launch(Task),
    /// Send a signal to a job's tasks (one step, or all; the batch shell only with `batch_only`).
    Signal {
        /// Job.
        job: u64,
        /// Run.
        epoch: u32,
        /// Signal number.
        signal: i32,
        /// Only the batch script.
        batch_only: bool,
        /// Only this step's tasks (`srun -K`); `None`: every step's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<u32>,
    },
    /// Kill every task of a job's run.
    Kill {
        /// Job.
        job: u64,
        /// Run.
        epoch: u32,
    },
    /// A job's run is over on this node (sent after its `Kill`, when the cluster has an
    /// epilog): run the epilog once the run's tasks here are gone, with this environment.
    Epilog {
        /// Job.
        job: u64,
        /// Run.
        epoch: u32,
        /// `SLURM_JOB_ID`, `SLURM_JOB_USER`, ... as the prolog's.
        env: Vec<(String, String)>,
    },
    /// Freeze every process of a job's run through its cgroup (`scontrol suspend`).
    Suspend {
        /// Job.
        job: u64,
        /// Run.
        epoch: u32,
    },
    /// Thaw a run frozen by [`Order::Suspend`].
    Resume {
        /// Job.
        job: u64,
        /// Run.
        epoch: u32,
    },
    /// Run the site's reboot program (`scontrol reboot`): the node is idle and takes no work
    /// until its agent registers again.
    Reboot {
        /// The program (`reboot_program`).
        program: String,
    },
    /// Send a task's output files to the controller (`kubectl logs`), read as the job's user,
    /// on a connection of its own (`POST /v1/agent/output/ID` with the key).
    Output {
        /// Job.
        job: u64,
        /// Run.
        epoch: u32,
        /// What to read and where it goes.
        read: OutputRead,
    },
    /// Connect a running step's tasks' I/O to one more listener (`sattach`) as well as to
    /// the `srun` that started them: output (the last 128 frames first, then as it comes) and,
    /// where `io.stdin` says, input.
    Attach {
        /// Job.
        job: u64,
        /// Run.
        epoch: u32,
        /// Step.
        step: u32,
        /// Where `sattach` listens, its certificate and its key.
        io: StepIo,
    },
}

/// What an agent reads for [`Order::Output`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputRead {
    /// The request's number at the controller.
    pub id: u64,
    /// Its key (64 hex digits), which the agent presents with the output.
    pub key: String,
    /// The files, in order (output, then error where it differs).
    pub files: Vec<String>,
    /// Read as this user.
    pub uid: u32,
    /// And group.
    pub gid: u32,
    /// Go on sending what is written until the task ends here.
    pub follow: bool,
    /// Only the last lines of each file.
    pub tail_lines: Option<u64>,
    /// At most this many bytes in all.
    pub limit_bytes: Option<u64>,
}

/// Where a job's output is ([`crate::Controller::task_output`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskOutput {
    /// The node that holds it.
    pub node: String,
    /// The job.
    pub job: u64,
    /// Its run.
    pub epoch: u32,
    /// Its output file, then its error file where that differs.
    pub files: Vec<String>,
    /// Its owner.
    pub uid: u32,
    /// Its group.
    pub gid: u32,
    /// Its run has not ended: the files may still grow.
    pub running: bool,
}

/// A task's end, as an agent reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskExit {
    /// Job.
    pub job: u64,
    /// Run.
    pub epoch: u32,
    /// Step.
    pub step: u32,
    /// Rank.
    pub rank: u32,
    /// Exit code, if it exited.
    pub code: Option<i32>,
    /// Signal, if killed by one.
    pub signal: Option<i32>,
    /// Killed for exceeding its memory limit.
    pub oom: bool,
    /// Killed by its agent's fencing (the agent lost contact for a lease).
    #[serde(default)]
    pub fenced: bool,
    /// It never started: why, for the user (a working directory or output file the user may
    /// not use, a program that is not there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How it ended is not known: it outlived its agent and its keeper, or its machine
    /// restarted. The same as a node failure for its job.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lost: bool,
    /// It never started because the node's prolog failed (`error` says how): the node is
    /// drained and the job requeued, held unless `nohold_on_prolog_fail`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prolog_failed: bool,
}

/// A task an agent runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TaskKey {
    /// Job.
    pub job: u64,
    /// Run.
    pub epoch: u32,
    /// Step.
    pub step: u32,
    /// Rank.
    pub rank: u32,
}

/// A job array as submitted: one durable record for all its tasks (Slurm likewise stores a
/// pending array as one job record). Task `k` (counting from 0) has job id `first + k` and the
/// `k`-th index of `indices`; a task gets a record of its own only once something happens to it
/// (it starts, is cancelled, held, ...), so submitting an array of N tasks writes one record,
/// not N.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArrayRecord {
    /// The first task, as submitted; the others differ only in id and index.
    pub first: Job,
    /// The task indices, as runs `[from, to, step]` (`to` included), in submission order: an
    /// array of any size given as `a-b:s` ranges is a few numbers.
    pub runs: Vec<[u32; 3]>,
    /// The tasks from `from` on that had no record of their own were cancelled while pending,
    /// together (`scancel` of the array or of its user's jobs): one change of this record, not
    /// one record per task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<TailCancel>,
}

/// The pending tasks of an array cancelled together: every task from `from` (counting from 0)
/// on that has no record of its own ended then, cancelled by that uid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TailCancel {
    /// The first task cancelled this way.
    pub from: u64,
    /// When.
    pub end: Time,
    /// By whom (`requid`).
    pub by: u32,
}

impl ArrayRecord {
    /// The record of an array whose first task is `first`, with these indices (ascending).
    pub fn new(first: Job, indices: &[u32]) -> ArrayRecord {
        let mut runs: Vec<[u32; 3]> = Vec::new();
        for &i in indices {
            match runs.last_mut() {
                // A run of one index takes any step; a longer one keeps its step.
                Some(r) if r[0] == r[1] && i > r[1] => (r[1], r[2]) = (i, i - r[0]),
                Some(r) if i > r[1] && i - r[1] == r[2] => r[1] = i,
                _ => runs.push([i, i, 1]),
            }
        }
        ArrayRecord { first, runs, cancelled: None }
    }

    /// Number of tasks.
    pub fn count(&self) -> u64 {
        self.runs.iter().map(|r| u64::from((r[1] - r[0]) / r[2].max(1) + 1)).sum()
    }

    /// Task `k` as it stands when it has no record of its own: as submitted, or cancelled with
    /// the array's pending tasks.
    pub fn task_now(&self, k: u64, task: u32) -> Job {
        let mut j = self.task(k, task);
        if let Some(c) = self.cancelled.filter(|c| k >= c.from) {
            j.state = JobState::Cancelled;
            j.end = Some(c.end);
            j.cancelled_by = Some(c.by);
        }
        j
    }

    /// The array's job id (its first task's).
    pub fn id(&self) -> u64 {
        self.first.req.id.0
    }

    /// Every task index, in order.
    pub fn indices(&self) -> impl Iterator<Item = u32> + '_ {
        self.runs.iter().flat_map(|r| (r[0]..=r[1]).step_by(r[2].max(1) as usize))
    }

    /// Task `k` with index `task`, as it was submitted.
    pub fn task(&self, k: u64, task: u32) -> Job {
        let mut j = self.first.clone();
        j.req.id = model::JobId(self.id() + k);
        if let Some(a) = j.array.as_mut() {
            a.task = task;
        }
        if let Some(a) = j.req.array.as_mut() {
            a.task = task;
        }
        j
    }
}

/// Serde default of fields that were always on before they were kept.
pub(crate) fn yes() -> bool {
    true
}

fn none_failed(n: &u32) -> bool {
    *n == 0
}
