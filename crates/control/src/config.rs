//! `tandem.toml`: the cluster configuration, parsed from its text (the daemon reads the file and
//! looks operators' names up) (partitions, QOS, accounts, scheduler, multifactor
//! weights, lease). Every key is optional; unknown keys are errors. Absent file: defaults.
//!
//! ```toml
//! cluster_name = "tandem"
//! lease = 30              # seconds; a node whose heartbeats stop this long is DOWN
//! heartbeat = 0.5         # seconds between an agent's heartbeats (at most half the lease)
//! failover = 1.5          # a node silent this long loses its service replicas to new ones
//!                         # (default: 3 heartbeats, at least 1.5 s)
//! kill_wait = 30          # seconds between SIGTERM and SIGKILL at a time limit
//! max_array_size = 1001   # Slurm's MaxArraySize: array indices must be below it
//! array_window = 64       # a pending array's tasks kept as jobs; the rest are its one record
//! max_script_size = 4194304 # Slurm's max_script_size: the largest batch script, bytes
//! min_job_age = 300       # Slurm's MinJobAge: finished jobs leave memory after this (0: never)
//! mpi_default = "none"    # Slurm's MpiDefault: srun's --mpi when it names none (none, pmi2, pmix)
//! prolog = "/etc/tandem/prolog"  # Slurm's Prolog: on each node, as root, before a job's first task
//! epilog = "/etc/tandem/epilog"  # Slurm's Epilog: on each node of a job once its run there is over
//! prolog_epilog_timeout = 60     # seconds; a prolog or epilog still running then fails (0: none)
//! nohold_on_prolog_fail = false  # a job whose prolog failed is requeued without a hold
//! health_check_program = "/usr/sbin/nhc"  # Slurm's HealthCheckProgram: run on each node as root
//! health_check_interval = 60     # seconds between checks (0: never)
//! health_check_node_state = "any" # any, idle (no job's task on the node), alloc (some)
//! task_prolog = "/etc/tandem/task_prolog"  # Slurm's TaskProlog: as the user, before each task
//! task_epilog = "/etc/tandem/task_epilog"  # Slurm's TaskEpilog: as the user, after each task
//! gpu_health_check = true        # the built-in GPU check at each health check turn
//! enable_expedited_requeue = false # Slurm's SlurmctldParameters=enable_expedited_requeue
//! job_submit = "/etc/tandem/job_submit.lua" # Slurm's JobSubmitPlugins=lua: the site's policy
//!                         # script, run by the controller for each submission and modification
//! job_submit_timeout = 5  # seconds one call of it may take; past it, killed and refused
//! job_submit_memory = 256 # MiB of memory it may use
//! reboot_program = "/usr/sbin/reboot" # Slurm's RebootProgram: run on each node as root for
//!                         # `scontrol reboot` (none: reboots are refused)
//! resume_timeout = 600    # Slurm's ResumeTimeout: a rebooted node not back this long is down
//! [scheduler]
//! policy = "default"      # fcfs, sjf, f1, multifactor, default
//! backfill = "easy"       # none, easy, conservative
//! predict = "history-shape" # limit, history, history-name, history-shape
//! [weights]               # multifactor weights (see README)
//! age = 1000
//! [[partition]]
//! name = "gpu"
//! nodes = "node[1-4]"     # hostlist; absent = every node
//! default_time = "1:00:00"
//! max_time = "7-0"
//! priority_tier = 1
//! default = true
//! allow_accounts = ["research"] # Slurm's AllowAccounts, AllowQos, AllowGroups (absent: all)
//! allow_qos = ["normal", "serve"]
//! allow_groups = ["gpuusers"]
//! [[qos]]
//! name = "serve"
//! priority = 100
//! preempt_tier = 1
//! grace_time = 60
//! preempt_mode = "requeue" # or "suspend": preempted batch jobs are frozen, then resumed
//! max_jobs_per_user = 10
//! max_gpus_per_user = 16
//! [[account]]
//! name = "research"
//! shares = 10
//! parent = "root"          # another account, or root
//! qos = ["normal", "serve"] # QOS its users may use (default: the parent's)
//! default_qos = "normal"
//! grp_tres = "gres/gpu=16" # all its users' running jobs together
//! [[user]]
//! name = "alice"
//! accounts = ["research"]
//! default_account = "research"
//! admin_level = "none"     # none, operator, administrator
//! coordinator = []         # accounts whose users alice manages
//! [[association]]          # one user in one account: QOS and limits of their own
//! user = "alice"
//! account = "research"
//! max_jobs = 10
//! max_submit_jobs = 100
//! max_wall = "1-0"
//! max_tres_per_job = "gres/gpu=8"
//! [accounting]
//! enforce = ["associations", "limits", "qos"] # Slurm's AccountingStorageEnforce (default: all)
//! unlisted_users = "own-account"  # users with no association: an account of their own name
//!                                 # with the root's QOS, or "refuse" (Slurm's way)
//! qos = ["normal"]         # the root's QOS (default: every QOS of the lowest preemption tier)
//! [security]              # who sees what (SECURITY.md)
//! operators = ["alice"]   # users (names or uids) who, like root, see every job's and
//!                         # service's details
//! private_data = ["jobs", "usage"]  # Slurm's PrivateData: hide other users' jobs and services
//!                         # entirely ("jobs"), and their priorities ("usage")
//! metrics_open = false    # serve /metrics to callers without a token (Slurm's
//!                         # MetricsAuthUsers left open); default: only to identified users
//! [limits]                # the controller's flood defences (SECURITY.md, F1-F3)
//! max_connections_per_user = 64  # connections one uid may hold (Unix socket and token TCP
//!                         # together); root and the controller's user: 4 times as many
//! max_requests_per_user = 2      # requests of one uid handled at once; the rest wait their turn
//! max_user_connections = 8192    # users' connections in all (agents and proxies not counted)
//! ```

use serde::Deserialize;

/// A configuration that cannot be used: what is wrong, in the file's terms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

type Result<T> = std::result::Result<T, ConfigError>;

macro_rules! bail {
    ($($t:tt)*) => {
        return Err(ConfigError(format!($($t)*)))
    };
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct File {
    cluster_name: Option<String>,
    lease: Option<u32>,
    heartbeat: Option<f64>,
    kill_wait: Option<u32>,
    failover: Option<f64>,
    max_array_size: Option<u32>,
    array_window: Option<u32>,
    max_script_size: Option<u64>,
    min_job_age: Option<u32>,
    mpi_default: Option<String>,
    prolog: Option<String>,
    epilog: Option<String>,
    prolog_epilog_timeout: Option<u32>,
    nohold_on_prolog_fail: Option<bool>,
    health_check_program: Option<String>,
    health_check_interval: Option<u32>,
    health_check_node_state: Option<String>,
    gpu_health_check: Option<bool>,
    enable_expedited_requeue: Option<bool>,
    job_submit: Option<String>,
    job_submit_timeout: Option<f64>,
    job_submit_memory: Option<u64>,
    reboot_program: Option<String>,
    resume_timeout: Option<u32>,
    task_prolog: Option<String>,
    task_epilog: Option<String>,
    scheduler: Option<Sched>,
    weights: Option<toml::Table>,
    #[serde(default)]
    partition: Vec<Part>,
    #[serde(default)]
    qos: Vec<Qos>,
    #[serde(default)]
    account: Vec<Account>,
    #[serde(default)]
    user: Vec<UserFile>,
    #[serde(default)]
    association: Vec<AssocFile>,
    accounting: Option<AccountingFile>,
    security: Option<SecurityFile>,
    /// `[limits]`, read by [`parse_limits`].
    limits: Option<LimitsFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AccountingFile {
    enforce: Option<Vec<String>>,
    unlisted_users: Option<String>,
    qos: Option<Vec<String>>,
}

#[allow(clippy::too_many_arguments)]
fn limits_of(
    what: &str,
    max_jobs: Option<u32>,
    max_submit: Option<u32>,
    max_wall: &Option<String>,
    per_job: &Option<String>,
    grp_jobs: Option<u32>,
    grp_submit: Option<u32>,
    grp_tres: &Option<String>,
) -> Result<model::Limits> {
    let tres = |k: &str, v: &Option<String>| -> Result<model::Tres> {
        match v {
            None => Ok(model::Tres::default()),
            Some(v) => model::Tres::parse(v).map_err(|e| ConfigError(format!("{what} {k}: {}", e.0))),
        }
    };
    Ok(model::Limits {
        max_jobs,
        max_submit_jobs: max_submit,
        max_wall: match max_wall {
            None => None,
            Some(w) => slurmcli::parse_time(w).map_err(|e| ConfigError(format!("{what} max_wall: {}", e.0)))?,
        },
        max_tres_per_job: tres("max_tres_per_job", per_job)?,
        max_tres_per_user: model::Tres::default(),
        grp_jobs,
        grp_submit_jobs: grp_submit,
        grp_tres: tres("grp_tres", grp_tres)?,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserFile {
    name: String,
    default_account: Option<String>,
    #[serde(default)]
    accounts: Vec<String>,
    admin_level: Option<String>,
    #[serde(default)]
    coordinator: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AssocFile {
    user: String,
    account: String,
    shares: Option<u32>,
    qos: Option<Vec<String>>,
    default_qos: Option<String>,
    max_jobs: Option<u32>,
    max_submit_jobs: Option<u32>,
    max_wall: Option<String>,
    max_tres_per_job: Option<String>,
    grp_jobs: Option<u32>,
    grp_submit_jobs: Option<u32>,
    grp_tres: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SecurityFile {
    #[serde(default)]
    operators: Vec<String>,
    #[serde(default)]
    private_data: Vec<String>,
    #[serde(default)]
    metrics_open: bool,
}

/// Who may see what: `tandem.toml`'s `[security]`, as written (operators by name or uid; the
/// daemon looks the names up).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Security {
    /// Users that see every job's and service's details, as root does: names or uids.
    pub operators: Vec<String>,
    /// Other users' jobs and services are hidden entirely (`private_data = ["jobs"]`).
    pub private_jobs: bool,
    /// Other users' priorities are hidden (`private_data = ["usage"]`).
    pub private_usage: bool,
    /// `/metrics` needs no identity.
    pub metrics_open: bool,
}

fn security(f: Option<SecurityFile>) -> Result<Security> {
    let Some(f) = f else { return Ok(Security::default()) };
    let mut s = Security { metrics_open: f.metrics_open, operators: f.operators, ..Security::default() };
    for p in f.private_data {
        match p.as_str() {
            "jobs" => s.private_jobs = true,
            "usage" => s.private_usage = true,
            other => bail!("security.private_data: unknown value {other:?} (jobs, usage)"),
        }
    }
    Ok(s)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LimitsFile {
    max_connections_per_user: Option<u32>,
    max_requests_per_user: Option<u32>,
    max_user_connections: Option<u32>,
}

/// The controller's flood defences: `tandem.toml`'s `[limits]` (SECURITY.md, F1-F3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections one ordinary uid may hold at once (its Unix socket connections and its
    /// token-authenticated TCP connections together); more are refused at once.
    pub max_connections_per_user: u32,
    /// Requests of one ordinary uid handled at once; the others wait for a turn.
    pub max_requests_per_user: u32,
    /// Users' connections in all; agents' and proxies' are not counted.
    pub max_user_connections: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_connections_per_user: 64, max_requests_per_user: 2, max_user_connections: 8192 }
    }
}

/// Parses `[limits]` out of configuration text (the rest is [`parse`]'s).
pub fn parse_limits(text: &str) -> Result<Limits> {
    #[derive(Deserialize)]
    struct Only {
        limits: Option<LimitsFile>,
    }
    let f: Only = toml::from_str(text).map_err(|e| ConfigError(e.to_string()))?;
    let f = f.limits.unwrap_or_default();
    let d = Limits::default();
    let positive = |v: Option<u32>, name: &str, default: u32| match v {
        Some(0) => Err(ConfigError(format!("limits.{name} must be at least 1"))),
        Some(n) => Ok(n),
        None => Ok(default),
    };
    Ok(Limits {
        max_connections_per_user: positive(f.max_connections_per_user, "max_connections_per_user", d.max_connections_per_user)?,
        max_requests_per_user: positive(f.max_requests_per_user, "max_requests_per_user", d.max_requests_per_user)?,
        max_user_connections: positive(f.max_user_connections, "max_user_connections", d.max_user_connections)?,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Sched {
    policy: Option<String>,
    backfill: Option<String>,
    predict: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Part {
    name: String,
    nodes: Option<String>,
    default_time: Option<String>,
    max_time: Option<String>,
    priority_tier: Option<u32>,
    #[serde(default)]
    default: bool,
    allow_accounts: Option<Vec<String>>,
    allow_qos: Option<Vec<String>>,
    allow_groups: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Qos {
    name: String,
    priority: Option<u32>,
    preempt_tier: Option<u32>,
    grace_time: Option<u32>,
    preempt_mode: Option<String>,
    description: Option<String>,
    max_jobs_per_user: Option<u32>,
    max_submit_jobs_per_user: Option<u32>,
    /// The older spelling of `max_tres_per_user = "gres/gpu=N"`.
    max_gpus_per_user: Option<u32>,
    max_tres_per_user: Option<String>,
    max_wall: Option<String>,
    max_tres_per_job: Option<String>,
    grp_jobs: Option<u32>,
    grp_submit_jobs: Option<u32>,
    grp_tres: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Account {
    name: String,
    #[serde(default = "one")]
    shares: u32,
    parent: Option<String>,
    description: Option<String>,
    organization: Option<String>,
    #[serde(default)]
    qos: Vec<String>,
    default_qos: Option<String>,
    max_jobs: Option<u32>,
    max_submit_jobs: Option<u32>,
    max_wall: Option<String>,
    max_tres_per_job: Option<String>,
    grp_jobs: Option<u32>,
    grp_submit_jobs: Option<u32>,
    grp_tres: Option<String>,
}

fn one() -> u32 {
    1
}

fn time(v: &Option<String>, what: &str, default: i64) -> Result<i64> {
    match v {
        None => Ok(default),
        Some(s) => Ok(slurmcli::parse_time(s).map_err(|e| ConfigError(format!("{what}: {}", e.0)))?.unwrap_or(i64::MAX / 4)),
    }
}

/// The largest `max_script_size` a file may set (512 MiB).
const MAX_SCRIPT_SIZE_CAP: u64 = 512 << 20;

/// Parses configuration text: the controller's settings and who may see what.
pub fn parse(text: &str) -> Result<(crate::Settings, Security)> {
    let f: File = toml::from_str(text).map_err(|e| ConfigError(e.to_string()))?;
    let sec = security(f.security)?;
    // `[limits]` is checked by the parse above and read by `parse_limits`.
    let _ = &f.limits;
    let mut s = crate::Settings::default();
    if let Some(n) = f.cluster_name {
        s.cluster_name = n;
    }
    if let Some(l) = f.lease {
        if l == 0 {
            bail!("lease must be at least 1 second");
        }
        s.lease = l as i64;
    }
    if let Some(h) = f.heartbeat {
        if !(h >= 0.1 && h * 2.0 <= s.lease as f64) {
            bail!("heartbeat must be at least 0.1 s and at most half the lease ({} s)", s.lease);
        }
        s.heartbeat_ms = (h * 1000.0).round() as u64;
    }
    if let Some(k) = f.kill_wait {
        s.kill_wait = k as i64;
    }
    if let Some(fo) = f.failover {
        let ms = fo * 1000.0;
        if !(ms > s.heartbeat_ms as f64 && ms <= (s.lease * 1000) as f64) {
            bail!(
                "failover must be longer than the heartbeat ({} s) and at most the lease ({} s), got {fo}",
                s.heartbeat_ms as f64 / 1000.0,
                s.lease
            );
        }
        s.failover_ms = ms.round() as i64;
    }
    if let Some(a) = f.min_job_age {
        s.min_job_age = a as i64;
    }
    if let Some(m) = f.mpi_default {
        s.mpi_default = match m.as_str() {
            "none" => None,
            "pmi2" => Some("pmi2".into()),
            "pmix" | "pmix_v3" | "pmix_v4" | "pmix_v5" => Some("pmix".into()),
            other => bail!("mpi_default must be one of none, pmi2, pmix (or pmix_v3, pmix_v4, pmix_v5), not {other:?}"),
        };
    }
    for (key, path, slot) in [
        ("prolog", f.prolog, &mut s.prolog),
        ("epilog", f.epilog, &mut s.epilog),
        ("health_check_program", f.health_check_program, &mut s.health_check_program),
        ("task_prolog", f.task_prolog, &mut s.task_prolog),
        ("task_epilog", f.task_epilog, &mut s.task_epilog),
        ("reboot_program", f.reboot_program, &mut s.reboot_program),
    ] {
        if let Some(p) = path {
            if !p.starts_with('/') || p.len() > 4096 || p.chars().any(char::is_control) {
                bail!("{key} must be an absolute path (a program on each node), at most 4096 bytes, got {p:?}");
            }
            *slot = Some(p);
        }
    }
    if let Some(t) = f.prolog_epilog_timeout {
        s.prolog_epilog_timeout = i64::from(t);
    }
    if let Some(n) = f.nohold_on_prolog_fail {
        s.nohold_on_prolog_fail = n;
    }
    if let Some(t) = f.health_check_interval {
        s.health_check_interval = i64::from(t);
    }
    if let Some(g) = f.gpu_health_check {
        s.gpu_health_check = g;
    }
    if let Some(e) = f.enable_expedited_requeue {
        s.enable_expedited_requeue = e;
    }
    if let Some(p) = f.job_submit {
        if !p.starts_with('/') || p.len() > 4096 || p.chars().any(char::is_control) {
            bail!("job_submit must be an absolute path (the controller's job_submit.lua), at most 4096 bytes, got {p:?}");
        }
        s.job_submit = Some(p);
    }
    if let Some(t) = f.job_submit_timeout {
        if !(t.is_finite() && (0.1..=600.0).contains(&t)) {
            bail!("job_submit_timeout must be from 0.1 to 600 seconds, got {t}");
        }
        s.job_submit_timeout_ms = (t * 1000.0).round() as i64;
    }
    if let Some(t) = f.resume_timeout {
        if t == 0 {
            bail!("resume_timeout must be at least 1 second");
        }
        s.resume_timeout = i64::from(t);
    }
    if let Some(m) = f.job_submit_memory {
        if !(16..=65_536).contains(&m) {
            bail!("job_submit_memory must be from 16 to 65536 MiB, got {m}");
        }
        s.job_submit_memory = m;
    }
    if let Some(st) = f.health_check_node_state {
        let v = st.to_ascii_lowercase();
        if !["any", "idle", "alloc"].contains(&v.as_str()) {
            bail!("health_check_node_state must be one of any, idle, alloc, not {st:?}");
        }
        s.health_check_node_state = Some(v);
    }
    if let Some(m) = f.max_array_size {
        if m == 0 || m > slurmcli::MAX_ARRAY_SIZE_CAP {
            bail!("max_array_size must be between 1 and {} (Slurm's cap)", slurmcli::MAX_ARRAY_SIZE_CAP);
        }
        s.max_array = m;
    }
    if let Some(w) = f.array_window {
        if !(20..=1_000_000).contains(&w) {
            bail!("array_window must be between 20 (Slurm's bf_max_job_array_resv) and 1000000, got {w}");
        }
        s.array_window = u64::from(w);
    }
    if let Some(m) = f.max_script_size {
        if m == 0 || m > MAX_SCRIPT_SIZE_CAP {
            bail!("max_script_size must be between 1 and {MAX_SCRIPT_SIZE_CAP} bytes");
        }
        s.max_script_size = m;
    }
    if let Some(sc) = f.scheduler {
        if let Some(p) = sc.policy {
            s.sched.policy = sched::Policy::parse(&p)
                .ok_or_else(|| ConfigError(format!("scheduler.policy {p:?}: fcfs, sjf, f1, multifactor, default or default-v1")))?;
        }
        if let Some(p) = sc.predict {
            s.sched.predict = sched::Predict::parse(&p)
                .ok_or_else(|| ConfigError(format!("scheduler.predict {p:?}: limit, history, history-name or history-shape")))?;
        }
        if let Some(b) = sc.backfill {
            s.sched.backfill = match sched::Backfill::parse(&b) {
                Some(x @ (sched::Backfill::None | sched::Backfill::Easy | sched::Backfill::Conservative)) => x,
                _ => bail!("scheduler.backfill {b:?}: none, easy or conservative"),
            };
        }
    }
    if let Some(w) = f.weights {
        let sched::Policy::Multifactor(mut weights) = s.sched.policy.clone() else {
            bail!("[weights] needs scheduler.policy = \"multifactor\" or \"default\"");
        };
        for (k, v) in w {
            let x = v
                .as_float()
                .or_else(|| v.as_integer().map(|i| i as f64))
                .filter(|x| *x >= 0.0)
                .ok_or_else(|| ConfigError(format!("weights.{k}: a non-negative number")))?;
            weights.set(&k, x).map_err(|e| ConfigError(format!("weights.{e}")))?;
        }
        s.sched.policy = sched::Policy::Multifactor(weights);
    }
    if !f.partition.is_empty() {
        let mut parts = Vec::new();
        // All partitions together name at most this many nodes (fuzz/regressions/config: fifty
        // partitions of a million names each took gigabytes).
        const MAX_PARTITION_NODES: usize = 1_000_000;
        let mut named = 0usize;
        for p in &f.partition {
            if p.name.is_empty() || !p.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                bail!("partition name {:?}: letters, digits, '_' and '-'", p.name);
            }
            let nodes = match &p.nodes {
                None => None,
                Some(h) => {
                    let names = slurmcli::expand(h, MAX_PARTITION_NODES - named).map_err(|e| {
                        ConfigError(format!(
                            "partition {}: {} (all partitions together name at most {MAX_PARTITION_NODES} nodes)",
                            p.name, e.0
                        ))
                    })?;
                    named += names.len();
                    Some(names)
                }
            };
            let default_time = time(&p.default_time, &format!("partition {} default_time", p.name), 3600)?;
            let max_time = time(&p.max_time, &format!("partition {} max_time", p.name), i64::MAX / 4)?;
            if default_time > max_time {
                bail!("partition {}: default_time is longer than max_time", p.name);
            }
            parts.push((
                p.default,
                model::Partition {
                    allow_accounts: p.allow_accounts.clone(),
                    allow_qos: p.allow_qos.clone(),
                    allow_groups: p.allow_groups.clone(),
                    ..model::Partition::new(&p.name, default_time, max_time, p.priority_tier.unwrap_or(1))
                },
                nodes,
            ));
        }
        if parts.iter().filter(|p| p.0).count() > 1 {
            bail!("more than one partition has default = true");
        }
        let mut names: Vec<&str> = parts.iter().map(|p| p.1.name.as_str()).collect();
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) {
            bail!("two partitions share a name");
        }
        parts.sort_by_key(|p| !p.0); // the default partition first
        s.cluster.partitions = parts.iter().map(|p| p.1.clone()).collect();
        s.partition_nodes = parts.into_iter().map(|p| (p.1.name, p.2)).collect();
    }
    if !f.qos.is_empty() {
        let mut qos = Vec::new();
        for q in f.qos {
            let what = format!("qos {}", q.name);
            let mut limits = limits_of(
                &what,
                q.max_jobs_per_user,
                q.max_submit_jobs_per_user,
                &q.max_wall,
                &q.max_tres_per_job,
                q.grp_jobs,
                q.grp_submit_jobs,
                &q.grp_tres,
            )?;
            if let Some(t) = &q.max_tres_per_user {
                limits.max_tres_per_user = model::Tres::parse(t).map_err(|e| ConfigError(format!("{what} max_tres_per_user: {}", e.0)))?;
            }
            if let Some(g) = q.max_gpus_per_user {
                limits.max_tres_per_user.gpu = Some(g as u64);
            }
            let preempt_mode = match q.preempt_mode.as_deref() {
                None => model::PreemptMode::Requeue,
                Some(m) => model::PreemptMode::parse(m)
                    .ok_or_else(|| ConfigError(format!("{what} preempt_mode: {m:?} is not one of \"requeue\", \"suspend\"")))?,
            };
            qos.push(model::Qos {
                description: q.description.unwrap_or_else(|| q.name.clone()),
                preempt_mode,
                name: q.name,
                priority: q.priority.unwrap_or(0),
                preempt_tier: q.preempt_tier.unwrap_or(0),
                grace_time: q.grace_time.unwrap_or(60) as i64,
                limits,
            });
        }
        s.cluster.qos = qos;
        if !s.cluster.qos.iter().any(|q| q.name == "normal") {
            s.cluster.qos.insert(0, model::Qos::normal());
        }
    }
    for a in f.account {
        let what = format!("account {}", a.name);
        let limits =
            limits_of(&what, a.max_jobs, a.max_submit_jobs, &a.max_wall, &a.max_tres_per_job, a.grp_jobs, a.grp_submit_jobs, &a.grp_tres)?;
        s.cluster.accounts.push(model::Account {
            shares: a.shares.max(1),
            parent: a.parent.filter(|p| p != "root"),
            description: a.description.unwrap_or_default(),
            organization: a.organization.unwrap_or_default(),
            qos: a.qos,
            default_qos: a.default_qos,
            limits,
            name: a.name,
        });
    }
    for u in f.user {
        let default_account = u.default_account.clone().or_else(|| u.accounts.first().cloned()).unwrap_or_else(|| u.name.clone());
        let admin_level = match &u.admin_level {
            None => model::AdminLevel::None,
            Some(l) => model::AdminLevel::parse(l)
                .ok_or_else(|| ConfigError(format!("user {}: admin_level {l:?}: none, operator or administrator", u.name)))?,
        };
        let mut accounts = u.accounts.clone();
        if !accounts.contains(&default_account) && s.cluster.account(&default_account).is_some() {
            accounts.insert(0, default_account.clone());
        }
        for a in accounts {
            s.cluster.assocs.push(model::Assoc {
                account: a,
                user: u.name.clone(),
                shares: 1,
                qos: None,
                default_qos: None,
                limits: model::Limits::default(),
            });
        }
        s.cluster.users.push(model::User { name: u.name, default_account, admin_level, coordinator: u.coordinator });
    }
    for a in f.association {
        let what = format!("association of user {} and account {}", a.user, a.account);
        let limits =
            limits_of(&what, a.max_jobs, a.max_submit_jobs, &a.max_wall, &a.max_tres_per_job, a.grp_jobs, a.grp_submit_jobs, &a.grp_tres)?;
        let row = model::Assoc {
            account: a.account.clone(),
            user: a.user.clone(),
            shares: a.shares.unwrap_or(1).max(1),
            qos: a.qos,
            default_qos: a.default_qos,
            limits,
        };
        match s.cluster.assocs.iter_mut().find(|x| x.user == a.user && x.account == a.account) {
            Some(x) => *x = row,
            None => s.cluster.assocs.push(row),
        }
    }
    s.cluster.enforce = model::Enforce::default();
    if let Some(acc) = f.accounting {
        if let Some(words) = acc.enforce {
            let mut e = model::Enforce::none();
            for w in words {
                match w.as_str() {
                    "associations" => e.associations = true,
                    "limits" => e.limits = true,
                    "qos" => e.qos = true,
                    "safe" | "nojobs" | "nosteps" | "wckeys" => {
                        bail!("accounting.enforce: {w:?} is Slurm's, but not this cluster's (associations, limits, qos)")
                    }
                    other => bail!("accounting.enforce: unknown value {other:?} (associations, limits, qos)"),
                }
            }
            // As Slurm's: limits and qos imply associations.
            e.associations |= e.limits || e.qos;
            s.cluster.enforce = e;
        }
        match acc.unlisted_users.as_deref() {
            None | Some("own-account") => s.cluster.unlisted = model::Unlisted::OwnAccount,
            Some("refuse") => s.cluster.unlisted = model::Unlisted::Refuse,
            Some(other) => bail!("accounting.unlisted_users {other:?}: own-account or refuse"),
        }
        s.cluster.root_qos = acc.qos;
    }
    crate::accounting::validate(&s.cluster).map_err(ConfigError)?;
    Ok((s, sec))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(text: &str) -> Result<(crate::Settings, Security)> {
        super::parse(text)
    }

    fn parse(text: &str) -> Result<crate::Settings> {
        Ok(super::parse(text)?.0)
    }

    #[test]
    fn full_and_empty() {
        let s = parse("").unwrap();
        assert_eq!(s.lease, 30);
        assert_eq!(s.max_array, 1001);
        assert_eq!(parse("max_array_size = 10001").unwrap().max_array, 10_001);
        assert_eq!(s.max_script_size, 4194304);
        assert_eq!(parse("max_script_size = 65536").unwrap().max_script_size, 65536);
        let s = parse(
            "lease = 5\n[scheduler]\nbackfill = \"conservative\"\npredict = \"limit\"\n[weights]\nage = 7\n\
             [[partition]]\nname = \"cpu\"\nmax_time = \"1:00:00\"\n[[partition]]\nname = \"gpu\"\nnodes = \"node[1-2]\"\ndefault = true\n\
             [[qos]]\nname = \"serve\"\npreempt_tier = 1\n[[account]]\nname = \"a\"\nshares = 3\n",
        )
        .unwrap();
        assert_eq!(s.lease, 5);
        assert_eq!(s.sched.predict, sched::Predict::Limit);
        assert_eq!(parse("").unwrap().sched.predict, sched::Predict::UserShape, "predictions by default");
        assert_eq!(s.heartbeat_ms, 500, "the default heartbeat");
        assert_eq!(parse("lease = 300\nheartbeat = 100").unwrap().heartbeat_ms, 100_000);
        assert_eq!(s.cluster.partitions[0].name, "gpu", "default partition first");
        assert_eq!(s.cluster.partitions[1].max_time, 3600);
        assert_eq!(s.partition_nodes[0].1.as_ref().unwrap().len(), 2);
        assert_eq!(s.cluster.qos.len(), 2, "normal is kept");
        match &s.sched.policy {
            sched::Policy::Multifactor(w) => assert_eq!(w.age, 7.0),
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn bad_configs_say_what_is_wrong() {
        let e = |t: &str| format!("{:#}", parse(t).unwrap_err());
        assert!(e("leese = 3").contains("unknown field"));
        let s = parse("job_submit = \"/etc/tandem/job_submit.lua\"\njob_submit_timeout = 0.5\njob_submit_memory = 64").unwrap();
        assert_eq!((s.job_submit.as_deref(), s.job_submit_timeout_ms, s.job_submit_memory), (Some("/etc/tandem/job_submit.lua"), 500, 64));
        assert_eq!((parse("").unwrap().job_submit_timeout_ms, parse("").unwrap().job_submit_memory), (5000, 256));
        assert!(e("job_submit = \"job_submit.lua\"").contains("job_submit must be an absolute path"));
        assert!(e("job_submit = \"/etc/x\\n\"").contains("job_submit must be an absolute path"));
        assert!(e("job_submit_timeout = 0").contains("job_submit_timeout must be from 0.1 to 600"));
        assert!(e("job_submit_timeout = 1e9").contains("job_submit_timeout must be from 0.1 to 600"));
        assert!(e("job_submit_timeout = nan").contains("job_submit_timeout"));
        assert!(e("job_submit_memory = 1").contains("job_submit_memory must be from 16 to 65536"));
        assert!(e("job_submit_memory = -5").contains("invalid value"));
        let s = parse("reboot_program = \"/usr/sbin/reboot\"\nresume_timeout = 30").unwrap();
        assert_eq!((s.reboot_program.as_deref(), s.resume_timeout), (Some("/usr/sbin/reboot"), 30));
        assert!(e("reboot_program = \"reboot\"").contains("reboot_program must be an absolute path"));
        assert!(e("resume_timeout = 0").contains("resume_timeout must be at least 1 second"));
        assert!(e("resume_timeout = -1").contains("invalid value"));
        assert!(e("lease = 0").contains("lease"));
        assert!(e("heartbeat = 2\nfailover = 1").contains("longer"));
        assert!(e("heartbeat = 0.01").contains("heartbeat"));
        assert!(e("max_array_size = 0").contains("max_array_size"));
        assert!(e("array_window = 19").contains("array_window"));
        assert!(e("array_window = -1").contains("invalid value"));
        assert_eq!(parse("array_window = 1000").unwrap().array_window, 1000);
        assert!(e("max_script_size = 0").contains("max_script_size"));
        assert!(e("max_array_size = 4000002").contains("max_array_size"));
        assert!(e("lease = \"soon\"").contains("invalid type"));
        assert!(e("lease = 30\nheartbeat = 20").contains("half the lease"));
        assert!(e("heartbeat = 0").contains("heartbeat"));
        assert!(e("[scheduler]\npolicy = \"lottery\"").contains("scheduler.policy"));
        assert!(e("mpi_default = \"openmpi\"").contains("mpi_default must be one of"));
        assert_eq!(parse("mpi_default = \"pmix_v4\"").unwrap().mpi_default.as_deref(), Some("pmix"));
        assert_eq!(parse("mpi_default = \"none\"").unwrap().mpi_default, None);
        let s = parse("prolog = \"/etc/p\"\nepilog = \"/etc/e\"\nprolog_epilog_timeout = 5\nnohold_on_prolog_fail = true").unwrap();
        assert_eq!(
            (s.prolog.as_deref(), s.epilog.as_deref(), s.prolog_epilog_timeout, s.nohold_on_prolog_fail),
            (Some("/etc/p"), Some("/etc/e"), 5, true)
        );
        assert!(e("prolog = \"relative.sh\"").contains("prolog must be an absolute path"));
        assert!(e("epilog = \"/a\\nb\"").contains("epilog must be an absolute path"));
        assert!(e("prolog_epilog_timeout = -1").contains("prolog_epilog_timeout"));
        let s = parse("health_check_program = \"/usr/sbin/nhc\"\nhealth_check_interval = 30\nhealth_check_node_state = \"IDLE\"").unwrap();
        assert_eq!(
            (s.health_check_program.as_deref(), s.health_check_interval, s.health_check_node_state.as_deref()),
            (Some("/usr/sbin/nhc"), 30, Some("idle"))
        );
        assert!(e("health_check_node_state = \"cycle\"").contains("health_check_node_state must be one of"));
        let s = parse("task_prolog = \"/etc/tp\"\ntask_epilog = \"/etc/te\"").unwrap();
        assert_eq!((s.task_prolog.as_deref(), s.task_epilog.as_deref()), (Some("/etc/tp"), Some("/etc/te")));
        assert!(e("task_epilog = \"te\"").contains("task_epilog must be an absolute path"));
        let s = parse("gpu_health_check = false\nenable_expedited_requeue = true").unwrap();
        assert_eq!((s.gpu_health_check, s.enable_expedited_requeue), (false, true));
        assert!(parse("").unwrap().gpu_health_check, "on by default");
        assert!(e("gpu_health_check = \"yes\"").contains("gpu_health_check"));
        assert!(e("health_check_program = \"nhc\"").contains("health_check_program must be an absolute path"));
        assert!(e("[scheduler]\nbackfill = \"rls\"").contains("scheduler.backfill"));
        assert!(e("[scheduler]\npredict = \"oracle\"").contains("scheduler.predict"));
        assert!(e("[scheduler]\npredict = 3").contains("invalid type"));
        assert!(e("[weights]\nage = -1").contains("non-negative"));
        assert!(e("[weights]\nluck = 1").contains("unknown key \"luck\""));
        assert!(e("[[partition]]\nname = \"a\"\nmax_time = \"forever\"").contains("max_time"));
        assert!(e("[[partition]]\nname = \"a\"\ndefault_time = \"2:00:00\"\nmax_time = \"1:00:00\"").contains("longer"));
        assert!(e("[[partition]]\nname = \"a b\"").contains("partition name"));
        assert!(e("[[partition]]\nname = \"a\"\nnodes = \"n[1-\"").contains("hostlist"));
        assert!(e("[[partition]]\nname = \"a\"\n[[partition]]\nname = \"a\"").contains("share a name"));
        assert!(e("[[partition]]\nname=\"a\"\ndefault=true\n[[partition]]\nname=\"b\"\ndefault=true").contains("more than one"));
        assert!(e("[[qos]]\nname = \"x\"\nbogus = 1").contains("unknown field"));
        assert!(e("[[qos]]\nname = \"x\"\npreempt_mode = \"gang\"").contains("qos x preempt_mode: \"gang\" is not one of"));
        assert!(e("[[qos]]\nname = \"x\"\npreempt_mode = 1").contains("invalid type"));
        assert!(e("not toml at all [").contains("TOML") || !e("not toml at all [").is_empty());
        assert!(e("[security]\nprivate_data = [\"secrets\"]").contains("unknown value"));
        assert!(e("[security]\nmetrics = true").contains("unknown field"));
    }

    #[test]
    fn limits_settings() {
        assert_eq!(parse_limits("").unwrap(), Limits::default());
        let l = parse_limits("lease = 5\n[limits]\nmax_connections_per_user = 3\nmax_requests_per_user = 2").unwrap();
        assert_eq!(l, Limits { max_connections_per_user: 3, max_requests_per_user: 2, ..Limits::default() });
        assert!(parse_limits("[limits]\nmax_user_connections = 0").unwrap_err().0.contains("at least 1"));
        assert!(parse("[limits]\nmax_connections_per_user = 3").is_ok());
        assert!(parse("[limits]\nmax_sockets = 3").unwrap_err().0.contains("unknown field"));
    }

    #[test]
    fn security_settings() {
        assert_eq!(parse_all("").unwrap().1, Security::default());
        let (_, s) =
            parse_all("[security]\noperators = [\"root\", \"1234\"]\nprivate_data = [\"jobs\", \"usage\"]\nmetrics_open = true").unwrap();
        let operators = vec!["root".to_string(), "1234".to_string()];
        assert_eq!(s, Security { operators, private_jobs: true, private_usage: true, metrics_open: true });
    }
}
