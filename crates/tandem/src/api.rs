//! The HTTP/JSON API's request and response bodies, shared by the server, the agent and the
//! CLI. Domain records (`control::Job`, orders, task reports) are converted at this edge.

use control::{Order, TaskExit, TaskKey};
use model::Node;
use serde::{Deserialize, Serialize};
use slurmcli::BatchSpec;

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
}

/// Response to a submission.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubmitResponse {
    /// New job ids (several for an array).
    pub job_ids: Vec<u64>,
    /// `--test-only`: the expected start instead of a submission.
    pub test_only: Option<String>,
}

/// One job as `squeue`/`sacct`/`scontrol show job` show it.
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
    /// Why it failed or was rejected.
    pub message: Option<String>,
}

/// One step.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepInfo {
    /// `batch` or the number.
    pub id: String,
    /// Command.
    pub command: String,
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
}

/// Response to a step creation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepResponse {
    /// Step id.
    pub step: u32,
}

/// `POST /v1/agent/register`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RegisterRequest {
    /// The node and its resources.
    pub node: Node,
    /// Address other nodes reach it at.
    pub addr: String,
}

/// Response to a registration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RegisterResponse {
    /// Lease, seconds.
    pub lease_s: i64,
    /// Heartbeat interval the agent should use, milliseconds.
    pub heartbeat_ms: u64,
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
}

/// Response to a heartbeat.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Orders {
    /// What to do, with sequence numbers; resent until acknowledged.
    pub orders: Vec<(u64, Order)>,
}

/// Error body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApiError {
    /// Message for the user.
    pub error: String,
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

/// One service's figures in a `ProxySync`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProxyServiceStats {
    /// Requests in flight to replicas.
    #[serde(default)]
    pub inflight: u64,
    /// Requests held because the service has no endpoint (scale from zero).
    #[serde(default)]
    pub waiting: u64,
    /// Requests received (cumulative).
    #[serde(default)]
    pub requests: u64,
    /// Requests answered with a proxy error (502/503/504) (cumulative).
    #[serde(default)]
    pub failures: u64,
    /// In flight per replica, draining and no-longer-listed replicas included until 0.
    #[serde(default)]
    pub replicas: std::collections::BTreeMap<String, u64>,
}

/// Response to `POST /v1/proxy/sync`: every service's endpoints at a version.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EndpointView {
    /// Version of this view; increases with every change.
    pub version: u64,
    /// Every service the proxy may route to.
    #[serde(default)]
    pub services: Vec<ServiceEndpoints>,
}

/// One service in an `EndpointView`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceEndpoints {
    /// Service name (routing key: `/s/NAME/...` or `Host: NAME`).
    pub name: String,
    /// `round_robin` (default), `least_request` or `p2c`.
    #[serde(default = "default_balance")]
    pub balance: String,
    /// How long to hold a request while the service has no endpoint, ms (then 503).
    #[serde(default = "default_hold_ms")]
    pub hold_ms: u64,
    /// Retries on another replica after a retryable failure.
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// Ready, non-draining replicas: the only ones that get new requests.
    #[serde(default)]
    pub endpoints: Vec<Endpoint>,
    /// Replicas being drained: no new requests; in-flight ones finish.
    #[serde(default)]
    pub draining: Vec<String>,
}

fn default_balance() -> String {
    "round_robin".into()
}

fn default_hold_ms() -> u64 {
    60_000
}

fn default_retries() -> u32 {
    2
}

/// One ready replica of a service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Endpoint {
    /// Replica id (shown to clients in `x-tandem-replica`).
    pub replica: String,
    /// host:port to send requests to.
    pub addr: String,
    /// Node it runs on.
    #[serde(default)]
    pub node: String,
}
