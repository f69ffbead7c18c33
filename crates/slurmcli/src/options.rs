//! `sbatch` options, from the command line and from `#SBATCH` lines (Slurm's rule: read until
//! the first line that is neither blank nor a comment; command-line values override).

use model::{Dependency, GpuPer, GpuRequest, JobRequest, MemRequest, Shape, Time};
use serde::{Deserialize, Serialize};

use crate::Invalid;
use crate::formats::{
    ArraySpec, Signal, parse_array, parse_begin, parse_dependency, parse_gpus, parse_gres, parse_memory, parse_signal, parse_time,
};
use crate::getopt::{Arg, Command, Given, Opt, Order, Parsed, getopt};
use crate::hostlist::expand;

/// A submission as `sbatch` describes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BatchSpec {
    /// `-J`.
    pub job_name: Option<String>,
    /// `-p`.
    pub partition: Option<String>,
    /// `-A`.
    pub account: Option<String>,
    /// `-q`.
    pub qos: Option<String>,
    /// `--nice`.
    pub nice: i32,
    /// `-N min[-max]`.
    pub nodes: Option<(u32, u32)>,
    /// `-n`.
    pub ntasks: Option<u32>,
    /// `--ntasks-per-node`.
    pub ntasks_per_node: Option<u32>,
    /// `-c`.
    pub cpus_per_task: Option<u32>,
    /// `--mem` / `--mem-per-cpu`, bytes (0 = all of the node's memory).
    pub mem: Option<MemRequest>,
    /// `--gpus`, `--gpus-per-node`, `--gpus-per-task`, `--gres=gpu...`.
    pub gpus: Option<GpuRequest>,
    /// Other `--gres` resources per node.
    pub gres_other: Vec<(String, u64)>,
    /// `-C` features (all required).
    pub constraint: Vec<String>,
    /// `-w`.
    pub nodelist: Vec<String>,
    /// `-x`.
    pub exclude: Vec<String>,
    /// `-t`: `None` not given, `Some(None)` unlimited. In JSON (the client sends this to the
    /// controller): absent or `null` when not given, `0` for unlimited (Slurm's `-t 0`), else
    /// seconds; plain `Option<Option<_>>` would read unlimited back as not given.
    #[serde(default, with = "time_limit")]
    pub time: Option<Option<Time>>,
    /// `--time-min`.
    pub time_min: Option<Time>,
    /// `-o` pattern.
    pub output: Option<String>,
    /// `-e` pattern.
    pub error: Option<String>,
    /// `--array`.
    pub array: Option<ArraySpec>,
    /// `--dependency`.
    pub dependency: Vec<Dependency>,
    /// `--requeue` / `--no-requeue` (None: the cluster default, requeue on).
    pub requeue: Option<bool>,
    /// `--requeue=expedite`: requeued first in the queue when its node fails.
    #[serde(default)]
    pub expedite: bool,
    /// `--signal`.
    pub signal: Option<Signal>,
    /// `--exclusive`.
    pub exclusive: bool,
    /// `--hold`.
    pub hold: bool,
    /// `--begin`, resolved to Unix seconds.
    pub begin: Option<Time>,
    /// `-D`.
    pub chdir: Option<String>,
    /// `--export`.
    pub export: Option<String>,
    /// `--parsable`.
    pub parsable: bool,
    /// `--test-only`.
    pub test_only: bool,
    /// `--switches=N[@wait]`: at most N leaf switches.
    pub switches: Option<u32>,
    /// `--open-mode`: `Some(true)` append, `Some(false)` truncate; `None` Slurm's default
    /// (truncate when the job first starts; a requeued run appends).
    #[serde(default)]
    pub open_append: Option<bool>,
    /// `-W`/`--wait`: `sbatch` returns when the job ends, with its exit code.
    #[serde(default)]
    pub wait: bool,
    /// An allocation for `salloc` or `srun` (no script runs).
    #[serde(default)]
    pub interactive: bool,
    /// `--wckey` (recorded).
    #[serde(default)]
    pub wckey: Option<String>,
    /// `--comment` (recorded).
    #[serde(default)]
    pub comment: Option<String>,
    /// `--mail-type` (recorded: no mail is sent), upper case, as given.
    #[serde(default)]
    pub mail_type: Option<String>,
    /// `--mail-user` (recorded).
    #[serde(default)]
    pub mail_user: Option<String>,
    /// `--mem-per-gpu`, bytes: memory per node from the GPUs the job gets on a node.
    #[serde(default)]
    pub mem_per_gpu: Option<u64>,
    /// `--cpus-per-gpu`: CPUs per task from the GPUs the job gets on a node.
    #[serde(default)]
    pub cpus_per_gpu: Option<u32>,
    /// `--reservation`: the advance reservation to run in.
    #[serde(default)]
    pub reservation: Option<String>,
    /// `--hint` (recorded: nodes here count CPUs, not cores and threads).
    #[serde(default)]
    pub hint: Option<String>,
    /// `-m/--distribution` (recorded: tasks are laid out in blocks).
    #[serde(default)]
    pub distribution: Option<String>,
    /// `--threads-per-core` (recorded, as `--hint`).
    #[serde(default)]
    pub threads_per_core: Option<u32>,
    /// `--get-user-env[=timeout][S|L]`: the job's environment starts from the user's login
    /// environment on the node, the submitted one winning (`Some("")` for the bare flag; the
    /// older timeout and mode are accepted and not used).
    #[serde(default)]
    pub get_user_env: Option<String>,
    /// `-v`, once per `v`: say what was parsed.
    #[serde(default)]
    pub verbose: u32,
    /// `-Q`: no informational messages (sbatch prints no job id).
    #[serde(default)]
    pub quiet: bool,
    /// `-M`/`--clusters`: the cluster's own name or `all` (the command checks it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<String>,
    /// The batch script's text (the file's, or one made from `--wrap`).
    pub script: String,
    /// Path of the script as given, if any.
    pub script_path: Option<String>,
    /// Arguments after the script path.
    pub script_args: Vec<String>,
    /// Pyxis's `--container-*` (sbatch): the batch script runs in this image.
    #[serde(default)]
    pub container: Option<crate::Container>,
    /// A heterogeneous job's components after the first (`sbatch A : B script`, `#SBATCH
    /// hetjob`), each as its own options give it (no script); empty for an ordinary job.
    #[serde(default)]
    pub het: Vec<BatchSpec>,
}

/// `BatchSpec::time` in serde: `None` is none, unlimited is `0`, a limit is its seconds.
mod time_limit {
    use model::Time;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(t: &Option<Option<Time>>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            None => s.serialize_none(),
            Some(limit) => s.serialize_some(&limit.unwrap_or(0)),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<Time>>, D::Error> {
        Ok(Option::<Time>::deserialize(d)?.map(|secs| (secs != 0).then_some(secs)))
    }
}

/// sbatch's options (salloc's too, with [`SALLOC_ONLY`]).
const OPTS: &[Opt] = &[
    Opt::both('J', "job-name", Arg::Required),
    Opt::both('p', "partition", Arg::Required),
    Opt::both('A', "account", Arg::Required),
    Opt::both('q', "qos", Arg::Required),
    Opt::long("nice", Arg::Optional),
    Opt::both('N', "nodes", Arg::Required),
    Opt::both('n', "ntasks", Arg::Required),
    Opt::long("ntasks-per-node", Arg::Required),
    Opt::both('c', "cpus-per-task", Arg::Required),
    Opt::long("mem", Arg::Required),
    Opt::long("mem-per-cpu", Arg::Required),
    Opt::both('G', "gpus", Arg::Required),
    Opt::long("gpus-per-node", Arg::Required),
    Opt::long("gpus-per-task", Arg::Required),
    Opt::long("gres", Arg::Required),
    Opt::both('C', "constraint", Arg::Required),
    Opt::both('w', "nodelist", Arg::Required),
    Opt::both('x', "exclude", Arg::Required),
    Opt::both('t', "time", Arg::Required),
    Opt::long("time-min", Arg::Required),
    Opt::both('o', "output", Arg::Required),
    Opt::both('e', "error", Arg::Required),
    Opt::both('a', "array", Arg::Required),
    Opt::both('d', "dependency", Arg::Required),
    Opt::long("requeue", Arg::Optional),
    Opt::long("no-requeue", Arg::None),
    Opt::long("signal", Arg::Required),
    Opt::long("exclusive", Arg::Optional),
    Opt::both('H', "hold", Arg::None),
    Opt::both('b', "begin", Arg::Required),
    Opt::both('D', "chdir", Arg::Required),
    Opt::long("export", Arg::Required),
    Opt::long("parsable", Arg::None),
    Opt::long("test-only", Arg::None),
    Opt::long("wrap", Arg::Required),
    Opt::long("switches", Arg::Required),
    Opt::long("open-mode", Arg::Required),
    Opt::long("wckey", Arg::Required),
    Opt::both('W', "wait", Arg::None),
    Opt::long("comment", Arg::Required),
    Opt::long("mail-type", Arg::Required),
    Opt::long("mail-user", Arg::Required),
    Opt::long("mem-per-gpu", Arg::Required),
    Opt::long("cpus-per-gpu", Arg::Required),
    Opt::long("reservation", Arg::Required),
    Opt::long("hint", Arg::Required),
    Opt::both('m', "distribution", Arg::Required),
    Opt::long("threads-per-core", Arg::Required),
    Opt::long("get-user-env", Arg::Optional),
    Opt::both('v', "verbose", Arg::None),
    Opt::both('Q', "quiet", Arg::None),
    Opt::both('M', "clusters", Arg::Required),
    Opt::alias("cluster", "clusters", Arg::Required),
    Opt::both('h', "help", Arg::None),
    Opt::long("usage", Arg::None),
    Opt::both('V', "version", Arg::None),
];

/// Why the node-layout options change nothing: nodes here are counted in CPUs.
const CPUS_ONLY: &str = "nodes here are counted in CPUs, not sockets, cores and threads";
/// Why the power and boot options change nothing.
const NO_POWER: &str = "Tandem neither reboots nor power-manages nodes; a job starts on nodes that are up";

/// The options of Slurm's that `sbatch`, `salloc` and `srun` share and that Tandem sets aside
/// (with what they would do, and why they change nothing here) or refuses.
pub(crate) const RUN_ASIDE: &[Opt] = &[
    Opt::long("acctg-freq", Arg::Required).ignored("each agent samples its tasks' usage at its own period"),
    Opt::long("bb", Arg::Required).refused("--bb: burst buffers are not available on this cluster"),
    Opt::long("bbf", Arg::Required).refused("--bbf: burst buffers are not available on this cluster"),
    Opt::long("cluster-constraint", Arg::Required).ignored("cluster features select among federated clusters: there is one cluster"),
    Opt::long("container", Arg::Required).refused("--container: OCI containers are not available on this cluster yet"),
    Opt::long("contiguous", Arg::None).ignored("nodes have no rank order here: any set of nodes is taken as contiguous"),
    Opt::both('S', "core-spec", Arg::Required).ignored(CPUS_ONLY),
    Opt::long("cores-per-socket", Arg::Required).ignored(CPUS_ONLY),
    Opt::long("cpu-freq", Arg::Required).ignored("CPU frequency is the node's own governor's"),
    Opt::long("deadline", Arg::Required).refused("--deadline is not supported: give --time (and --begin) instead"),
    Opt::long("delay-boot", Arg::Required).ignored(NO_POWER),
    Opt::both('B', "extra-node-info", Arg::Required).ignored(CPUS_ONLY),
    Opt::long("gid", Arg::Required).refused("--gid: jobs run with the submitting user's own groups"),
    Opt::long("gpu-bind", Arg::Required).ignored("every task sees the job's GPUs on its node (CUDA_VISIBLE_DEVICES)"),
    Opt::long("gpu-freq", Arg::Required).ignored("GPU clocks are the node's own settings"),
    Opt::long("gpus-per-socket", Arg::Required).refused("--gpus-per-socket: nodes here have no sockets; use --gpus-per-node"),
    Opt::long("gres-flags", Arg::Required).ignored("GPUs are not bound to sockets here"),
    Opt::both('L', "licenses", Arg::Required).refused("Invalid license specification: this cluster has no licenses"),
    Opt::long("mcs-label", Arg::Required).ignored("there is no MCS plugin: jobs are private to their users as SECURITY.md says"),
    Opt::long("mem-bind", Arg::Required).ignored("memory is not bound to NUMA nodes here"),
    Opt::long("mincpus", Arg::Required).refused("--mincpus is not supported: ask for --cpus-per-task, --ntasks-per-node or --exclusive"),
    Opt::long("network", Arg::Required).ignored("there is no network plugin: tasks use the nodes' own interfaces"),
    Opt::both('k', "no-kill", Arg::Optional).ignored("a job whose node fails is requeued or ends, whatever this says"),
    Opt::both('F', "nodefile", Arg::Required).refused("--nodefile is not supported: give the nodes with -w/--nodelist"),
    Opt::long("ntasks-per-core", Arg::Required).ignored(CPUS_ONLY),
    Opt::long("ntasks-per-gpu", Arg::Required).refused("--ntasks-per-gpu is not supported: use --gpus-per-task"),
    Opt::long("ntasks-per-socket", Arg::Required).ignored(CPUS_ONLY),
    Opt::both('s', "oversubscribe", Arg::None).ignored("whether nodes are shared is the partition's setting"),
    Opt::long("power", Arg::Required).ignored(NO_POWER),
    Opt::long("prefer", Arg::Required).ignored("preferred features are not weighed: only --constraint's are required"),
    Opt::long("priority", Arg::Required)
        .refused("--priority: only an operator sets a job's priority (scontrol update JobId=N Priority=P); use --nice"),
    Opt::long("profile", Arg::Required).ignored("there is no HDF5 profiling plugin; sstat and sacct report usage"),
    Opt::long("reboot", Arg::None).ignored(NO_POWER),
    Opt::long("sockets-per-node", Arg::Required).ignored(CPUS_ONLY),
    Opt::long("spread-job", Arg::None).ignored("nodes are chosen by the scheduler's placement"),
    Opt::long("thread-spec", Arg::Required).ignored(CPUS_ONLY),
    Opt::long("tmp", Arg::Required).ignored("nodes do not report temporary disk space: it is not checked"),
    Opt::long("uid", Arg::Required).refused("--uid: jobs run as the submitting user"),
    Opt::long("use-min-nodes", Arg::None).ignored("a job gets its minimum node count unless more are needed"),
    // Added to Slurm after 22.05 (slurm-options-newer.txt says when).
    Opt::long("container-id", Arg::Required).refused("--container-id: OCI containers are not available on this cluster yet"),
    Opt::long("extra", Arg::Required).refused("--extra: nodes here have no Extra field to match"),
    Opt::long("tres-per-task", Arg::Required),
    Opt::long("tres-bind", Arg::Required).ignored("every task sees the job's GPUs on its node (CUDA_VISIBLE_DEVICES)"),
    Opt::long("segment", Arg::Required).refused("--segment: there is no topology/block plugin on this cluster"),
    Opt::long("consolidate-segments", Arg::None).ignored("there are no segments without the topology/block plugin"),
    Opt::long("spread-segments", Arg::None).ignored("there are no segments without the topology/block plugin"),
    Opt::long("stepmgr", Arg::None).ignored("the controller manages every job's steps itself"),
    Opt::long("oom-kill-step", Arg::Optional).ignored("a task killed for memory ends its step as any failed task does"),
    Opt::long("resources", Arg::Required).refused("--resources: there are no hierarchical resources on this cluster"),
];

/// The options `sbatch` and `salloc` share beyond [`OPTS`] and [`RUN_ASIDE`].
const BATCH_ASIDE: &[Opt] = &[
    Opt::both('O', "overcommit", Arg::None).ignored("tasks are laid out on the CPUs allocated"),
    Opt::long("wait-all-nodes", Arg::Required).ignored(NO_POWER),
    Opt::long("resv-ports", Arg::Optional).ignored("no ports are reserved: srun --mpi=pmi2 serves MPI's wire-up"),
];

/// The options `sbatch` alone has beyond [`OPTS`].
const SBATCH_ASIDE: &[Opt] = &[
    Opt::long("batch", Arg::Required).ignored("the batch step runs on the job's first node, whatever its features"),
    Opt::long("export-file", Arg::Required).refused("--export-file is not supported: use --export"),
    Opt::long("ignore-pbs", Arg::None).ignored("#PBS lines are never read here"),
    Opt::both('i', "input", Arg::Required).refused("--input: a batch script's standard input is /dev/null here"),
    Opt::long("kill-on-invalid-dep", Arg::Required)
        .ignored("a job whose dependency can never be met stays pending (DependencyNeverSatisfied) until cancelled, Slurm's default"),
    Opt::long("propagate", Arg::Optional).ignored("tasks get the node's resource limits"),
];

/// The options `salloc` has beside sbatch's.
const SALLOC_ONLY: &[Opt] = &[
    Opt::long("no-shell", Arg::None),
    Opt::long("bell", Arg::None).ignored("salloc does not ring the terminal bell"),
    Opt::long("no-bell", Arg::None).ignored("salloc does not ring the terminal bell"),
    Opt::both('I', "immediate", Arg::Optional).ignored("salloc waits for its allocation until it is granted or Ctrl-C"),
    Opt::both('K', "kill-command", Arg::Optional).ignored("the command is ended by the allocation's end, not signalled first"),
    Opt::long("x11", Arg::Optional).refused("--x11: X11 forwarding is not available"),
    Opt::long("container-image", Arg::Required)
        .refused("--container-image: an allocation runs no command in an image; give --container-image to srun inside it"),
];

/// `sbatch`: the options end at the script.
pub const SBATCH: Command = Command {
    name: "sbatch",
    opts: &[OPTS, RUN_ASIDE, BATCH_ASIDE, SBATCH_ASIDE, crate::container::CONTAINER_OPTS],
    order: Order::RequireOrder,
    underscores: false,
};

/// `salloc`: the options end at the command.
pub const SALLOC: Command =
    Command { name: "salloc", opts: &[OPTS, RUN_ASIDE, BATCH_ASIDE, SALLOC_ONLY], order: Order::RequireOrder, underscores: false };

/// Slurm's `--mail-type` values.
const MAIL_TYPES: &[&str] = &[
    "NONE",
    "BEGIN",
    "END",
    "FAIL",
    "REQUEUE",
    "ALL",
    "INVALID_DEPEND",
    "STAGE_OUT",
    "TIME_LIMIT",
    "TIME_LIMIT_90",
    "TIME_LIMIT_80",
    "TIME_LIMIT_50",
    "ARRAY_TASKS",
];

/// Slurm's `--hint` values.
const HINTS: &[&str] = &["compute_bound", "memory_bound", "multithread", "nomultithread"];

/// Splits an `#SBATCH` line's text into words: quotes group, nothing is expanded, a word
/// starting with `#` ends the line.
fn words(line: &str) -> Result<Vec<String>, Invalid> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut in_word = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, '#') if !in_word => break,
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err(Invalid::new("unterminated quote"));
    }
    if in_word {
        out.push(cur);
    }
    Ok(out)
}

/// Reads sbatch's options from `argv` (a command line, or the words of one `#SBATCH` line).
fn pairs(argv: &[String]) -> Result<Parsed, Invalid> {
    Ok(getopt(&SBATCH, argv)?)
}

/// `--tres-per-task=cpu=N,gres/gpu[:type]=N` (Slurm 23.02): CPUs and GPUs per task, as
/// `--cpus-per-task` and `--gpus-per-task` would give them; other resources are refused.
pub(crate) fn parse_tres_per_task(v: &str) -> Result<TresPerTask, Invalid> {
    let (mut cpus, mut gpus) = (None, None);
    for item in v.split(',').map(str::trim) {
        let bad = || Invalid::new(format!("invalid --tres-per-task={v}: want cpu=N and gres/gpu[:type]=N, comma separated"));
        let (name, n) = item.split_once('=').ok_or_else(bad)?;
        let n = count(n, "--tres-per-task count", 100_000)?;
        match name.split_once(':') {
            None if name == "cpu" => cpus = Some(n),
            None if name == "gres/gpu" => gpus = Some((None, n)),
            Some(("gres/gpu", ty)) if !ty.is_empty() => gpus = Some((Some(name_like(ty, "GPU type")?), n)),
            _ => return Err(bad()),
        }
    }
    Ok(TresPerTask { cpus, gpus })
}

/// What `--tres-per-task` asks of each task.
pub(crate) struct TresPerTask {
    /// `cpu=N`.
    pub(crate) cpus: Option<u32>,
    /// `gres/gpu[:type]=N`: the type, the count.
    pub(crate) gpus: Option<(Option<String>, u32)>,
}

/// Most tasks a job may ask for (`-n`, or `--ntasks-per-node` times `-N`).
const MAX_TASKS: u32 = 10_000_000;

fn name_like(v: &str, what: &str) -> Result<String, Invalid> {
    if v.is_empty() || v.len() > 64 || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.') {
        return Err(Invalid::new(format!("invalid {what} {v:?}: letters, digits, '_', '-' and '.' only")));
    }
    Ok(v.to_string())
}

pub(crate) fn count(v: &str, what: &str, max: u32) -> Result<u32, Invalid> {
    match v.trim().parse::<u32>() {
        Ok(n) if n >= 1 && n <= max => Ok(n),
        _ => Err(Invalid::new(format!("invalid {what} {v:?}: a whole number from 1 to {max}"))),
    }
}

pub(crate) fn text(v: &str, what: &str) -> Result<String, Invalid> {
    if v.contains('\0') || v.contains('\n') || v.len() > 4096 {
        return Err(Invalid::new(format!("invalid {what}: no newlines or NUL bytes, at most 4096 bytes")));
    }
    Ok(v.to_string())
}

impl BatchSpec {
    /// Sets one of sbatch's own options by its long name, as `--long=value` would: the
    /// job-submit hook's changes go through here, so they meet the command line's checks.
    pub fn set_option(&mut self, long: &str, value: Option<&str>, now: Time) -> Result<(), Invalid> {
        let opt = OPTS.iter().find(|o| o.long == long).ok_or_else(|| Invalid::new(format!("sbatch has no option --{long}")))?;
        self.set(Given { opt, value: value.map(str::to_string) }, now)
    }

    fn set(&mut self, given: Given, now: Time) -> Result<(), Invalid> {
        if crate::container::read_option(&mut self.container, given.opt.key, given.value.as_deref())? {
            return Ok(());
        }
        let v = given.value;
        let val = || v.clone().unwrap_or_default();
        match given.opt.key {
            "job-name" => {
                let n = text(&val(), "job name")?;
                if n.is_empty() || n.len() > 200 {
                    return Err(Invalid::new("invalid job name: 1 to 200 characters"));
                }
                self.job_name = Some(n);
            }
            "partition" => self.partition = Some(name_like(&val(), "partition")?),
            "account" => self.account = Some(name_like(&val(), "account")?),
            "qos" => self.qos = Some(name_like(&val(), "qos")?),
            "nice" => {
                self.nice = match &v {
                    None => 100,
                    Some(s) => match s.parse::<i32>() {
                        Ok(n) if (-10_000..=10_000).contains(&n) => n,
                        _ => return Err(Invalid::new(format!("invalid --nice {s:?}: an integer from -10000 to 10000"))),
                    },
                }
            }
            "nodes" => {
                let s = val();
                let (a, b) = s.split_once('-').unwrap_or((&s, &s));
                let (a, b) = (count(a, "node count", 100_000)?, count(b, "node count", 100_000)?);
                if a > b {
                    return Err(Invalid::new(format!("invalid node count {s:?}: min is larger than max")));
                }
                self.nodes = Some((a, b));
            }
            "ntasks" => self.ntasks = Some(count(&val(), "number of tasks", MAX_TASKS)?),
            "ntasks-per-node" => self.ntasks_per_node = Some(count(&val(), "--ntasks-per-node", 100_000)?),
            "cpus-per-task" => self.cpus_per_task = Some(count(&val(), "--cpus-per-task", 100_000)?),
            "mem" => self.mem = Some(MemRequest::PerNode(parse_memory(&val())?)),
            "mem-per-cpu" => self.mem = Some(MemRequest::PerCpu(parse_memory(&val())?)),
            "gpus" => {
                let (t, n) = parse_gpus(&val())?;
                self.gpus = Some(GpuRequest { per: GpuPer::Job(n), gpu_type: t, milli: 1000 });
            }
            "gpus-per-node" => {
                let (t, n) = parse_gpus(&val())?;
                self.gpus = Some(GpuRequest { per: GpuPer::Node(n), gpu_type: t, milli: 1000 });
            }
            "gpus-per-task" => {
                let (t, n) = parse_gpus(&val())?;
                self.gpus = Some(GpuRequest { per: GpuPer::Task(n), gpu_type: t, milli: 1000 });
            }
            "gres" => {
                self.gres_other.clear();
                for (name, ty, n) in parse_gres(&val())? {
                    if name == "gpu" {
                        let n = u32::try_from(n).map_err(|_| Invalid::new("gres gpu count too large"))?;
                        self.gpus = Some(GpuRequest { per: GpuPer::Node(n), gpu_type: ty, milli: 1000 });
                    } else if ty.is_some() {
                        return Err(Invalid::new(format!("invalid --gres {name}: only gpu takes a type")));
                    } else {
                        self.gres_other.push((name, n));
                    }
                }
            }
            "constraint" => {
                let s = val();
                if s.contains('|') || s.contains('[') {
                    return Err(Invalid::new(format!("invalid --constraint {s:?}: only features joined by '&' or ',' are supported")));
                }
                self.constraint = s.split(['&', ',']).map(|f| name_like(f.trim(), "feature")).collect::<Result<_, _>>()?;
            }
            "nodelist" => self.nodelist = expand(&val(), 100_000)?,
            "exclude" => self.exclude = expand(&val(), 100_000)?,
            "time" => self.time = Some(parse_time(&val())?),
            "time-min" => self.time_min = parse_time(&val())?,
            "output" => self.output = Some(text(&val(), "--output")?),
            "error" => self.error = Some(text(&val(), "--error")?),
            "array" => self.array = Some(parse_array(&val())?),
            "dependency" => self.dependency = parse_dependency(&val())?,
            "requeue" => {
                match v.as_deref() {
                    None => {}
                    Some(e) if e.eq_ignore_ascii_case("expedite") => self.expedite = true,
                    Some(o) => return Err(Invalid::new(format!("invalid --requeue={o}: the only value is expedite"))),
                }
                self.requeue = Some(true);
            }
            "no-requeue" => self.requeue = Some(false),
            "signal" => self.signal = Some(parse_signal(&val())?),
            "exclusive" => {
                match v.as_deref() {
                    None | Some("user") | Some("mcs") | Some("topo") => {}
                    Some(o) => return Err(Invalid::new(format!("invalid --exclusive={o}: user, mcs or topo"))),
                }
                self.exclusive = true;
            }
            "hold" => self.hold = true,
            "begin" => self.begin = Some(parse_begin(&val(), now)?),
            "chdir" => self.chdir = Some(text(&val(), "--chdir")?),
            "export" => self.export = Some(text(&val(), "--export")?),
            "parsable" => self.parsable = true,
            "wckey" => self.wckey = Some(text(&val(), "--wckey")?),
            "wait" => self.wait = true,
            "comment" => self.comment = Some(text(&val(), "--comment")?),
            "mail-type" => {
                let v = val().to_ascii_uppercase();
                if let Some(bad) = v.split(',').find(|t| !MAIL_TYPES.contains(t)) {
                    return Err(Invalid::new(format!("--mail-type={} invalid: {bad:?} is not one of {}", val(), MAIL_TYPES.join(", "))));
                }
                self.mail_type = Some(v);
            }
            "mail-user" => {
                let v = text(&val(), "--mail-user")?;
                if v.is_empty() || v.len() > 256 || v.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return Err(Invalid::new("invalid --mail-user: an address without spaces, at most 256 characters"));
                }
                self.mail_user = Some(v);
            }
            "tres-per-task" => {
                let TresPerTask { cpus, gpus } = parse_tres_per_task(&val())?;
                if let Some(c) = cpus {
                    self.cpus_per_task = Some(c);
                }
                if let Some((t, n)) = gpus {
                    self.gpus = Some(GpuRequest { per: GpuPer::Task(n), gpu_type: t, milli: 1000 });
                }
            }
            "mem-per-gpu" => self.mem_per_gpu = Some(parse_memory(&val())?),
            "cpus-per-gpu" => self.cpus_per_gpu = Some(count(&val(), "--cpus-per-gpu", 100_000)?),
            "reservation" => self.reservation = Some(name_like(&val(), "reservation")?),
            "hint" => {
                let v = val();
                if !HINTS.contains(&v.as_str()) {
                    return Err(Invalid::new(format!("invalid --hint={v}: one of {}", HINTS.join(", "))));
                }
                self.hint = Some(v);
            }
            "distribution" => {
                let v = val();
                let first = v.split([':', ',']).next().unwrap_or("");
                if !["block", "cyclic", "arbitrary", "plane", "*"].contains(&first) && !first.starts_with("plane=") {
                    return Err(Invalid::new(format!(
                        "invalid --distribution={v}: block, cyclic, arbitrary or plane=N, then :block|cyclic|fcyclic"
                    )));
                }
                self.distribution = Some(text(&v, "--distribution")?);
            }
            "threads-per-core" => self.threads_per_core = Some(count(&val(), "--threads-per-core", 1024)?),
            "get-user-env" => {
                let v = v.clone().unwrap_or_default();
                let digits = v.trim_end_matches(['S', 'L']);
                if v.len() > 12 || !digits.bytes().all(|b| b.is_ascii_digit()) || v.len() - digits.len() > 1 {
                    return Err(Invalid::new(format!("invalid --get-user-env={v}: [timeout][S|L]")));
                }
                self.get_user_env = Some(v);
            }
            "verbose" => self.verbose += 1,
            "quiet" => self.quiet = true,
            "open-mode" => {
                self.open_append = Some(match val().as_str() {
                    "append" | "a" => true,
                    "truncate" | "t" => false,
                    o => return Err(Invalid::new(format!("invalid --open-mode={o}: append or truncate"))),
                })
            }
            "test-only" => self.test_only = true,
            "wrap" => {
                let w = val();
                if w.trim().is_empty() || w.contains('\0') {
                    return Err(Invalid::new("--wrap needs a command"));
                }
                self.script = format!("#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{w}\n");
                self.script_path = None;
            }
            "switches" => {
                let s = val();
                let n = s.split_once('@').map_or(s.as_str(), |(n, _)| n);
                self.switches = Some(count(n, "--switches", 100_000)?);
            }
            // `-M`: the cluster's own name or `all` (the command checks it against the
            // cluster's name); `salloc --no-shell` is salloc's to read.
            "clusters" => self.clusters = Some(text(&val(), "--clusters")?),
            // The command answers these before it reads a script.
            "no-shell" | "help" | "usage" | "version" => {}
            other => unreachable!("option table and setter disagree on {other}"),
        }
        Ok(())
    }

    /// The script's `#SBATCH` options, in order, with their 1-based line numbers.
    fn script_options(script: &str) -> Result<Vec<(usize, Vec<String>)>, Invalid> {
        let mut out = Vec::new();
        for (n, line) in script.lines().enumerate().skip(1) {
            let t = line.trim_start();
            if let Some(rest) = t.strip_prefix("#SBATCH") {
                if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
                    continue; // "#SBATCHED" is only a comment
                }
                out.push((n + 1, words(rest).map_err(|e| Invalid::new(format!("script line {}: {}", n + 1, e.0)))?));
            } else if t.is_empty() || t.starts_with('#') {
                continue;
            } else {
                break; // Slurm stops at the first command
            }
        }
        Ok(out)
    }

    /// Resolves the request shape Slurm would: nodes, tasks, CPUs, memory, GPUs.
    pub fn shape(&self) -> Shape {
        let (nmin, nmax) = self.nodes.unwrap_or((0, 0));
        let ntasks = self.ntasks.unwrap_or_else(|| match (self.ntasks_per_node, nmin) {
            (Some(t), n) if n > 0 => t.saturating_mul(n), // parse_sbatch refuses more than MAX_TASKS
            _ => nmin.max(1),
        });
        let mut shape = Shape {
            nodes_min: nmin,
            nodes_max: nmax.max(nmin),
            ntasks,
            ntasks_per_node: self.ntasks_per_node,
            cpus_per_task: self.cpus_per_task.unwrap_or(1),
            mem: self.mem.unwrap_or(MemRequest::PerNode(0)),
            gpus: self.gpus.clone(),
            other: self.gres_other.clone(),
            exclusive: self.exclusive,
        };
        // Per-GPU requests become per-node and per-task ones from the GPUs a node gets (with
        // --gpus=N on as few nodes as the tasks need: N on one node, the most it can be).
        let nodes = nmin.max(1);
        let gpn = shape.gpus_per_node(nodes) as u64;
        if let Some(m) = self.mem_per_gpu {
            shape.mem = MemRequest::PerNode(m.saturating_mul(gpn.max(1)));
        }
        if let Some(c) = self.cpus_per_gpu {
            let tpn = shape.tasks_per_node(nodes).max(1) as u64;
            shape.cpus_per_task = (c as u64 * gpn.max(1)).div_ceil(tpn).clamp(1, 100_000) as u32;
        }
        shape
    }

    /// The scheduler's request for this submission (partition and QOS defaults are the
    /// controller's to fill in; `default_time` applies when `-t` was not given).
    pub fn to_request(&self, id: u64, user: &str, submit_time: Time, default_time: Time) -> JobRequest {
        let limit = match self.time {
            None => default_time,
            Some(None) => Time::MAX / 4,
            Some(Some(t)) => t,
        };
        let mut r = JobRequest::new(id, submit_time, limit, self.shape());
        r.name = self.job_name.clone().unwrap_or_else(|| self.script_path.as_deref().map_or("wrap", base_name).to_string());
        r.user = user.to_string();
        r.account = self.account.clone().unwrap_or_else(|| user.to_string());
        r.partition = self.partition.clone();
        r.qos = self.qos.clone();
        r.nice = self.nice;
        r.time_min = self.time_min.map(|m| m.min(limit));
        r.begin_time = self.begin;
        r.features = self.constraint.clone();
        r.nodelist = self.nodelist.clone();
        r.exclude = self.exclude.clone();
        r.max_switches = self.switches;
        r.dependencies = self.dependency.clone();
        r.held = self.hold;
        r.reservation = self.reservation.clone();
        r.expedite = self.expedite;
        r.het = self
            .het
            .iter()
            .map(|c| model::HetPart {
                shape: c.shape(),
                partition: c.partition.clone(),
                features: c.constraint.clone(),
                nodelist: c.nodelist.clone(),
                exclude: c.exclude.clone(),
            })
            .collect();
        r
    }

    /// What a later component of a heterogeneous job starts from: the options Slurm carries
    /// from one component to the next (account, QOS, time, output, dependencies, ...; not the
    /// shape, partition or constraints, which each component gives for itself, `--mem`
    /// excepted).
    fn propagated(&self) -> BatchSpec {
        BatchSpec {
            job_name: self.job_name.clone(),
            account: self.account.clone(),
            qos: self.qos.clone(),
            nice: self.nice,
            exclude: self.exclude.clone(),
            time: self.time,
            time_min: self.time_min,
            output: self.output.clone(),
            error: self.error.clone(),
            dependency: self.dependency.clone(),
            requeue: self.requeue,
            signal: self.signal,
            hold: self.hold,
            begin: self.begin,
            chdir: self.chdir.clone(),
            export: self.export.clone(),
            parsable: self.parsable,
            test_only: self.test_only,
            wait: self.wait,
            wckey: self.wckey.clone(),
            comment: self.comment.clone(),
            reservation: self.reservation.clone(),
            distribution: self.distribution.clone(),
            get_user_env: self.get_user_env.clone(),
            verbose: self.verbose,
            quiet: self.quiet,
            clusters: self.clusters.clone(),
            mem: match self.mem {
                Some(MemRequest::PerNode(m)) => Some(MemRequest::PerNode(m)),
                _ => None,
            },
            ..BatchSpec::default()
        }
    }
}

/// The word that separates a heterogeneous job's components on a command line.
pub const HET_SEPARATOR: &str = ":";

/// Whether an `#SBATCH` line's words start a heterogeneous job's next component (`hetjob`,
/// or the older `packjob`).
fn is_het_line(words: &[String]) -> bool {
    matches!(words, [w] if w == "hetjob" || w == "packjob")
}

/// What `sbatch -v` says of a parsed submission: one `name: value` line per option given, as
/// Slurm's "defined options".
pub fn describe(b: &BatchSpec) -> Vec<String> {
    let mut out = vec!["-------------------- --------------------".to_string()];
    let mut add = |k: &str, v: String| out.push(format!("{k:<20}: {v}"));
    if let Some(v) = &b.job_name {
        add("job-name", v.clone());
    }
    if let Some(v) = &b.partition {
        add("partition", v.clone());
    }
    if let Some(v) = &b.account {
        add("account", v.clone());
    }
    if let Some(v) = &b.qos {
        add("qos", v.clone());
    }
    if let Some((a, z)) = b.nodes {
        add("nodes", if a == z { a.to_string() } else { format!("{a}-{z}") });
    }
    if let Some(v) = b.ntasks {
        add("ntasks", v.to_string());
    }
    if let Some(v) = b.ntasks_per_node {
        add("ntasks-per-node", v.to_string());
    }
    if let Some(v) = b.cpus_per_task {
        add("cpus-per-task", v.to_string());
    }
    match b.mem {
        Some(MemRequest::PerNode(m)) => add("mem", format!("{}M", m >> 20)),
        Some(MemRequest::PerCpu(m)) => add("mem-per-cpu", format!("{}M", m >> 20)),
        None => {}
    }
    if let Some(m) = b.mem_per_gpu {
        add("mem-per-gpu", format!("{}M", m >> 20));
    }
    if let Some(v) = b.cpus_per_gpu {
        add("cpus-per-gpu", v.to_string());
    }
    if let Some(g) = &b.gpus {
        let n = match g.per {
            GpuPer::Job(n) | GpuPer::Node(n) | GpuPer::Task(n) => n,
        };
        let what = match g.per {
            GpuPer::Job(_) => "gpus",
            GpuPer::Node(_) => "gpus-per-node",
            GpuPer::Task(_) => "gpus-per-task",
        };
        add(what, g.gpu_type.as_ref().map_or(n.to_string(), |t| format!("{t}:{n}")));
    }
    match b.time {
        Some(None) => add("time", "UNLIMITED".into()),
        Some(Some(t)) => add("time", crate::formats::format_time(Some(t))),
        None => {}
    }
    for (k, v) in [
        ("output", &b.output),
        ("error", &b.error),
        ("chdir", &b.chdir),
        ("export", &b.export),
        ("mail-type", &b.mail_type),
        ("mail-user", &b.mail_user),
        ("wckey", &b.wckey),
        ("comment", &b.comment),
        ("reservation", &b.reservation),
        ("hint", &b.hint),
        ("distribution", &b.distribution),
        ("get-user-env", &b.get_user_env),
    ] {
        if let Some(v) = v {
            add(k, v.clone());
        }
    }
    if b.exclusive {
        add("exclusive", "exclusive".into());
    }
    if let Some(a) = &b.array {
        add("array", format!("{} tasks", a.indices.len()));
    }
    out.push("-------------------- --------------------".into());
    out
}

fn base_name(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// What `parse_sbatch` asks `read_script` for when the script comes on standard input (no
/// script file, no `--wrap`).
pub const STDIN: &str = "";

/// Parses `sbatch` arguments. The first word that is not an option is the script path; the
/// words after it are the script's arguments; with neither it nor `--wrap` the script is read
/// from standard input (`read_script(STDIN)`). `read_script` reads the script (the caller's IO);
/// its `#SBATCH` lines apply first and the command line overrides them. `now` resolves
/// `--begin`. Errors read like sbatch's.
pub fn parse_sbatch(
    argv: &[String],
    now: Time,
    read_script: &mut dyn FnMut(&str) -> Result<String, Invalid>,
) -> Result<BatchSpec, Invalid> {
    parse_sbatch_env(argv, now, "", &[], read_script)
}

/// [`parse_sbatch`] with the input variables of `env` that start with `prefix` (`SBATCH_` for
/// sbatch, `SALLOC_` for salloc and the allocation of `srun`), as Slurm reads them: they
/// override the script's `#SBATCH` lines and the command line overrides them. An empty
/// `prefix` reads none. Which variables there are, and what each stands for, is
/// [`crate::envvars`]' table of the command the prefix names.
pub fn parse_sbatch_env(
    argv: &[String],
    now: Time,
    prefix: &str,
    env: &[(String, String)],
    read_script: &mut dyn FnMut(&str) -> Result<String, Invalid>,
) -> Result<BatchSpec, Invalid> {
    parse_batch(&SBATCH, argv, now, prefix, env, read_script)
}

/// [`parse_sbatch_env`] with the options of `cmd` ([`SBATCH`], or [`SALLOC`], whose own
/// options the caller reads from the same words).
pub fn parse_batch(
    cmd: &Command,
    argv: &[String],
    now: Time,
    prefix: &str,
    env: &[(String, String)],
    read_script: &mut dyn FnMut(&str) -> Result<String, Invalid>,
) -> Result<BatchSpec, Invalid> {
    // A heterogeneous job's components are separated by a `:` word: each segment's options
    // end there, the last one's at the script.
    let mut segments: Vec<Vec<Given>> = Vec::new();
    let mut rest: Vec<String> = argv.to_vec();
    let positional = loop {
        let Parsed { opts, args, .. } = getopt(cmd, &rest)?;
        segments.push(opts);
        match args.split_first() {
            Some((sep, more)) if sep == HET_SEPARATOR => {
                if cmd.name != "sbatch" {
                    return Err(Invalid::new(format!(
                        "heterogeneous allocations are not supported by {} here: submit one with sbatch (A : B, or #SBATCH hetjob)",
                        cmd.name
                    )));
                }
                if segments.len() >= MAX_COMPONENTS {
                    return Err(Invalid::new(format!("at most {MAX_COMPONENTS} heterogeneous job components")));
                }
                rest = more.to_vec();
            }
            _ => break args,
        }
    };
    // The input variables (`SBATCH_*` for sbatch, `SALLOC_*` for salloc), read as their options.
    let from_env = match prefix {
        "SBATCH_" => crate::envvars::read_env(&crate::envvars::SBATCH_ENV, cmd, env)?.opts,
        "SALLOC_" => crate::envvars::read_env(&crate::envvars::SALLOC_ENV, cmd, env)?.opts,
        _ => Vec::new(),
    };
    let mut spec = BatchSpec::default();
    let wrap = segments.iter().flatten().any(|g| g.key() == "wrap");
    // The script's options, one group per component (`#SBATCH hetjob` separates them).
    let mut groups: Vec<Vec<(usize, Vec<Given>)>> = vec![Vec::new()];
    let from_stdin = positional.is_empty() && !wrap;
    if !positional.is_empty() && wrap {
        return Err(Invalid::new("cannot use --wrap together with a batch script"));
    }
    if !positional.is_empty() || from_stdin {
        // No script file and no --wrap: the script comes on standard input, as Slurm's.
        let path = if from_stdin { STDIN.to_string() } else { positional[0].clone() };
        let text = read_script(&path)?;
        if from_stdin && text.is_empty() {
            return Err(Invalid::new("no batch script: give a script file, --wrap=\"command\", or the script on standard input"));
        }
        if !text.starts_with("#!") {
            return Err(Invalid::new(
                "This does not look like a batch script. The first line must start with #! followed by the path to an interpreter.",
            ));
        }
        if text.contains('\0') {
            return Err(Invalid::new("the batch script contains NUL bytes"));
        }
        for (line, words) in BatchSpec::script_options(&text)? {
            let at = |e: Invalid| Invalid::new(format!("script line {line}: {}", e.0));
            if is_het_line(&words) {
                if groups.len() >= MAX_COMPONENTS {
                    return Err(at(Invalid::new(format!("at most {MAX_COMPONENTS} heterogeneous job components"))));
                }
                groups.push(Vec::new());
                continue;
            }
            let Parsed { opts, args, .. } = pairs(&words).map_err(at)?;
            if let Some(word) = args.first() {
                return Err(at(Invalid::new(format!("unexpected word {word:?} (each #SBATCH line holds options only)"))));
            }
            if opts.iter().any(|g| g.key() == "wrap") {
                return Err(at(Invalid::new("--wrap cannot be used in a script")));
            }
            groups.last_mut().expect("one group at least").push((line, opts));
        }
        spec.script = text;
        if from_stdin {
            // Slurm names such a job "sbatch".
            spec.job_name.get_or_insert_with(|| "sbatch".into());
        } else {
            spec.script_path = Some(path);
            spec.script_args = positional[1..].to_vec();
        }
    }
    let script = std::mem::take(&mut spec.script);
    let n = segments.len().max(groups.len());
    let mut components: Vec<BatchSpec> = Vec::with_capacity(n);
    for k in 0..n {
        let mut c = match components.last() {
            None => std::mem::take(&mut spec),
            Some(prev) => prev.propagated(),
        };
        let tag = |e: Invalid| if n > 1 { Invalid::new(format!("heterogeneous job component {k}: {}", e.0)) } else { e };
        // The script's lines first, then the input variables, then the command line.
        for (line, opts) in groups.get(k).into_iter().flatten() {
            for given in opts {
                c.set(given.clone(), now).map_err(|e| tag(Invalid::new(format!("script line {line}: {}", e.0))))?;
            }
        }
        crate::envvars::name_errors(&from_env, |given| c.set(given.clone(), now)).map_err(tag)?;
        for given in segments.get(k).into_iter().flatten() {
            c.set(given.clone(), now).map_err(tag)?;
        }
        // A propagated --mem gives way to this component's own --mem-per-gpu.
        let own = |key: &str| {
            groups.get(k).into_iter().flatten().any(|(_, opts)| opts.iter().any(|g| g.key() == key))
                || segments.get(k).into_iter().flatten().any(|g| g.key() == key)
        };
        if k > 0 && c.mem_per_gpu.is_some() && !own("mem") && !own("mem-per-cpu") {
            c.mem = None;
        }
        let c = finish_component(c).map_err(tag)?;
        components.push(c);
    }
    // The script (a file's, or --wrap's in any component) is the first component's.
    let wrapped = components.iter_mut().find_map(|c| (!c.script.is_empty()).then(|| std::mem::take(&mut c.script)));
    let mut spec = components.remove(0);
    spec.script = wrapped.unwrap_or(script);
    if !components.is_empty() {
        if spec.array.is_some() || components.iter().any(|c| c.array.is_some()) {
            return Err(Invalid::new("job arrays of heterogeneous jobs are not supported"));
        }
        if components.iter().any(|c| c.container.is_some()) {
            return Err(Invalid::new("--container-image applies to the batch script: give it in the first component only"));
        }
        for c in &mut components {
            c.script_path = None;
            c.script_args = Vec::new();
        }
        spec.het = components;
    }
    Ok(spec)
}

/// Most components a heterogeneous job may have.
pub const MAX_COMPONENTS: usize = 128;

/// The checks and defaults of one component's options, once all are read.
fn finish_component(mut spec: BatchSpec) -> Result<BatchSpec, Invalid> {
    spec.container = crate::container::finish(spec.container.take())?;
    if spec.cpus_per_gpu.is_some() && spec.cpus_per_task.is_some() {
        return Err(Invalid::new("--cpus-per-gpu is mutually exclusive with --cpus-per-task"));
    }
    if spec.mem_per_gpu.is_some() && spec.mem.is_some() {
        return Err(Invalid::new("--mem, --mem-per-cpu and --mem-per-gpu are mutually exclusive"));
    }
    if (spec.mem_per_gpu.is_some() || spec.cpus_per_gpu.is_some()) && spec.gpus.is_none() {
        return Err(Invalid::new(
            "--mem-per-gpu and --cpus-per-gpu need a GPU request (--gpus, --gpus-per-node, --gpus-per-task, --gres=gpu)",
        ));
    }
    if let (None, Some(per_node), Some((nodes, _))) = (spec.ntasks, spec.ntasks_per_node, spec.nodes)
        && per_node as u64 * nodes as u64 > MAX_TASKS as u64
    {
        return Err(Invalid::new(format!(
            "--ntasks-per-node={per_node} on {nodes} nodes is more than {MAX_TASKS} tasks; give fewer, or -n"
        )));
    }
    if let (Some(GpuRequest { per: GpuPer::Task(_), .. }), None) = (&spec.gpus, spec.ntasks)
        && spec.ntasks_per_node.is_none()
        && spec.nodes.is_none()
    {
        spec.ntasks = Some(1);
    }
    Ok(spec)
}

/// Expands a batch output pattern (`%j %x %A %a %N %u %%`; see [`expand_pattern_at`]).
pub fn expand_pattern(p: &str, job: u64, name: &str, array: Option<(u64, u32)>, node: &str, user: &str) -> String {
    expand_pattern_at(p, &PatternAt { job, name, array, node, user, step: None, task: 0, node_index: 0 })
}

/// What an output pattern names: a task of a job's step.
#[derive(Debug, Clone, Copy)]
pub struct PatternAt<'a> {
    /// Job id.
    pub job: u64,
    /// Job name.
    pub name: &'a str,
    /// (array job id, task id) of an array task.
    pub array: Option<(u64, u32)>,
    /// The node's name.
    pub node: &'a str,
    /// The user's name.
    pub user: &'a str,
    /// Step id (`None`: the batch step).
    pub step: Option<u32>,
    /// The task's rank in its step.
    pub task: u32,
    /// The node's index in the job.
    pub node_index: u32,
}

/// Expands Slurm's output file pattern: `%j` job id, `%J` job.step (`12.0`; the batch
/// script's: `12`),
/// `%s` step, `%t` task rank, `%n` node index, `%N` node name, `%x` job name, `%A`/`%a`
/// array job and task id (`%a` of a plain job is 4294967294, as Slurm's), `%u` user, `%%`;
/// a width between `%` and the letter pads numbers with zeros (`%4t` is `0003`). Anything
/// else is kept as written.
pub fn expand_pattern_at(p: &str, at: &PatternAt<'_>) -> String {
    let mut out = String::new();
    let mut chars = p.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut width = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(*d);
            chars.next();
        }
        let w: usize = width.parse().unwrap_or(0).min(10);
        let num = |n: u64| format!("{n:0w$}");
        match chars.next() {
            Some('j') => out.push_str(&num(at.job)),
            // The batch script's `%J` is the job id alone (Slurm's).
            Some('J') => out.push_str(&at.step.map_or_else(|| num(at.job), |s| format!("{}.{s}", num(at.job)))),
            Some('s') => out.push_str(&at.step.map_or_else(|| "batch".to_string(), |s| num(s as u64))),
            Some('t') => out.push_str(&num(at.task as u64)),
            Some('n') => out.push_str(&num(at.node_index as u64)),
            Some('x') => out.push_str(at.name),
            Some('A') => out.push_str(&num(at.array.map_or(at.job, |a| a.0))),
            Some('a') => out.push_str(&num(at.array.map_or(4_294_967_294u64, |a| a.1 as u64))),
            Some('N') => out.push_str(at.node),
            Some('u') => out.push_str(at.user),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push_str(&width);
                out.push(other);
            }
            None => {
                out.push('%');
                out.push_str(&width);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    fn with_script(args: &[&str], script: &str) -> Result<BatchSpec, Invalid> {
        let script = script.to_string();
        parse_sbatch(&argv(args), 1_000_000, &mut |_| Ok(script.clone()))
    }

    const SCRIPT: &str = "#!/bin/bash\n#SBATCH -J train\n#SBATCH --nodes=2 --ntasks-per-node=4   # comment\n\n# plain comment\n#SBATCH --gres=gpu:h100:4\n#SBATCH -t 1-00:00:00\n#SBATCHED not an option\nsrun python train.py\n#SBATCH --partition=ignored-after-first-command\n";

    #[test]
    fn tres_per_task() {
        let b = parse_sbatch(&argv(&["--tres-per-task=cpu=4,gres/gpu:h100=2", "--wrap", "true"]), 0, &mut |_| unreachable!()).unwrap();
        assert_eq!(b.cpus_per_task, Some(4));
        assert_eq!(b.gpus, Some(GpuRequest { per: GpuPer::Task(2), gpu_type: Some("h100".into()), milli: 1000 }));
        let b = parse_sbatch(&argv(&["--tres-per-task", "gres/gpu=1", "--wrap", "true"]), 0, &mut |_| unreachable!()).unwrap();
        assert_eq!((b.cpus_per_task, b.gpus.map(|g| g.per)), (None, Some(GpuPer::Task(1))));
        for bad in ["", "cpu", "cpu=0", "cpu=x", "mem=4G", "gres/gpu:=1", "gres/fpga=1", "cpu=1,,gres/gpu=1", "gres/gpu:a b=1"] {
            let e = parse_sbatch(&argv(&[&format!("--tres-per-task={bad}"), "--wrap", "true"]), 0, &mut |_| unreachable!());
            assert!(e.is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn options_set_aside_or_refused_say_so() {
        let p = |a: &[&str]| parse_sbatch(&argv(a), 0, &mut |_| unreachable!());
        // Set aside: the job is the same as without them.
        let plain = p(&["-N2", "--wrap", "true"]).unwrap();
        let aside = p(&["-N2", "--profile=all", "--cores-per-socket=4", "-k", "--acctg-freq=30", "--wrap", "true"]).unwrap();
        assert_eq!(aside, plain);
        assert_eq!(p(&["--bb=x", "--wrap", "true"]).unwrap_err().0, "--bb: burst buffers are not available on this cluster");
        assert!(p(&["-L", "matlab", "--wrap", "true"]).unwrap_err().0.contains("Invalid license specification"));
        assert!(p(&["--uid=0", "--wrap", "true"]).unwrap_err().0.contains("submitting user"));
        // In a script too.
        let e = parse_sbatch(&argv(&["job.sh"]), 0, &mut |_| Ok("#!/bin/sh\n#SBATCH --container=/img\ntrue\n".into())).unwrap_err();
        assert_eq!(e.0, "script line 2: --container: OCI containers are not available on this cluster yet");
    }

    #[test]
    fn the_options_users_scripts_carry_are_accepted_with_slurms_meaning() {
        let script = "#!/bin/bash\n#SBATCH --mail-type=END,fail --mail-user=ann@example.org --wckey=w --comment=\"a note\"\n\
                      #SBATCH --gpus-per-node=2 --mem-per-gpu=8G --cpus-per-gpu=3 --ntasks-per-node=2 -N1\n\
                      #SBATCH --hint=nomultithread --distribution=block:cyclic --threads-per-core=1 --get-user-env=10L -v -v -Q\ntrue\n";
        let s = with_script(&["job.sh"], script).unwrap();
        assert_eq!((s.mail_type.as_deref(), s.mail_user.as_deref()), (Some("END,FAIL"), Some("ann@example.org")));
        assert_eq!(
            (s.hint.as_deref(), s.distribution.as_deref(), s.threads_per_core),
            (Some("nomultithread"), Some("block:cyclic"), Some(1))
        );
        assert_eq!((s.get_user_env.as_deref(), s.verbose, s.quiet), (Some("10L"), 2, true));
        let shape = s.shape();
        assert_eq!(shape.mem, MemRequest::PerNode(16 << 30), "8G per GPU x 2 GPUs on the node");
        assert_eq!(shape.cpus_per_task, 3, "3 per GPU x 2 GPUs over 2 tasks");
        assert_eq!(with_script(&["--get-user-env", "j.sh"], "#!/bin/sh\n").unwrap().get_user_env.as_deref(), Some(""));
        assert_eq!(with_script(&["--reservation=maint", "j.sh"], "#!/bin/sh\n").unwrap().reservation.as_deref(), Some("maint"));
        let describe = describe(&s).join("\n");
        assert!(describe.contains("mail-user           : ann@example.org") && describe.contains("mem-per-gpu"), "{describe}");
        // Bad values: what is wrong, and which option.
        let e = |args: &[&str]| with_script(args, "#!/bin/sh\n").unwrap_err().0;
        assert!(e(&["--mail-type=SOMETIMES", "j"]).contains("--mail-type=SOMETIMES invalid"));
        assert!(e(&["--mail-user=a b", "j"]).contains("--mail-user"));
        assert!(e(&["--hint=fast", "j"]).contains("invalid --hint=fast"));
        assert!(e(&["-m", "diagonal", "j"]).contains("invalid --distribution"));
        assert!(e(&["--threads-per-core=0", "j"]).contains("--threads-per-core"));
        assert!(e(&["--get-user-env=soon", "j"]).contains("--get-user-env"));
        assert!(e(&["--mem-per-gpu=1G", "j"]).contains("need a GPU request"));
        assert!(e(&["--gpus=1", "--mem-per-gpu=1G", "--mem=1G", "j"]).contains("mutually exclusive"));
        assert!(e(&["--gpus=1", "--cpus-per-gpu=2", "-c2", "j"]).contains("mutually exclusive"));
        assert!(e(&["--reservation=a b", "j"]).contains("reservation"));
    }

    #[test]
    fn input_variables_sit_between_the_script_and_the_command_line() {
        let env = |kv: &[(&str, &str)]| kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
        let script = "#!/bin/sh\n#SBATCH -p script -t 5 -J fromscript\ntrue\n".to_string();
        let parse =
            |args: &[&str], prefix: &str, e: &[(String, String)]| parse_sbatch_env(&argv(args), 0, prefix, e, &mut |_| Ok(script.clone()));
        let e = env(&[("SBATCH_PARTITION", "fromenv"), ("SBATCH_TIMELIMIT", "10"), ("SBATCH_REQUEUE", "yes"), ("SBATCH_EXCLUSIVE", "")]);
        let s = parse(&["j.sh"], "SBATCH_", &e).unwrap();
        assert_eq!((s.partition.as_deref(), s.time, s.job_name.as_deref()), (Some("fromenv"), Some(Some(600)), Some("fromscript")));
        assert_eq!((s.requeue, s.exclusive), (Some(true), true), "a flag's variable counts when empty, yes or a non-zero number");
        let s = parse(&["j.sh"], "SBATCH_", &env(&[("SBATCH_REQUEUE", "no"), ("SBATCH_WAIT", "x")])).unwrap();
        assert_eq!((s.requeue, s.wait), (None, false), "any other value leaves the flag unset, as sbatch's page says");
        // --requeue also takes a value (Slurm 25.11's expedite), which its variable may give.
        let s = parse(&["j.sh"], "SBATCH_", &env(&[("SBATCH_REQUEUE", "expedite")])).unwrap();
        assert_eq!((s.requeue, s.expedite), (Some(true), true));
        assert!(
            parse(&["j.sh"], "SBATCH_", &env(&[("SBATCH_REQUEUE", "x")])).unwrap_err().0.contains("SBATCH_REQUEUE: invalid --requeue=x")
        );
        let s = parse(&["-p", "cli", "j.sh"], "SBATCH_", &e).unwrap();
        assert_eq!(s.partition.as_deref(), Some("cli"), "the command line wins");
        // salloc reads SALLOC_*, not SBATCH_*; SLURM_HINT stands for either's.
        let s = parse(&["j.sh"], "SALLOC_", &e).unwrap();
        assert_eq!(s.partition.as_deref(), Some("script"));
        let s = parse(&["j.sh"], "SALLOC_", &env(&[("SALLOC_ACCOUNT", "proj"), ("SLURM_HINT", "compute_bound")])).unwrap();
        assert_eq!((s.account.as_deref(), s.hint.as_deref()), (Some("proj"), Some("compute_bound")));
        // A bad value names its variable.
        let err = parse(&["j.sh"], "SBATCH_", &env(&[("SBATCH_TIMELIMIT", "soon")])).unwrap_err().0;
        assert!(err.starts_with("SBATCH_TIMELIMIT: invalid time limit"), "{err}");
        let err = parse(&["j.sh"], "SBATCH_", &env(&[("SBATCH_PARTITION", "no such")])).unwrap_err().0;
        assert!(err.starts_with("SBATCH_PARTITION: invalid partition"), "{err}");
        assert_eq!(parse(&["j.sh"], "", &e).unwrap().partition.as_deref(), Some("script"), "no prefix: none read");
    }

    #[test]
    fn script_lines_then_command_line_overrides() {
        let s = with_script(&["-t", "30", "job.sh", "--lr", "3"], SCRIPT).unwrap();
        assert_eq!(s.job_name.as_deref(), Some("train"));
        assert_eq!(s.nodes, Some((2, 2)));
        assert_eq!(s.ntasks_per_node, Some(4));
        assert_eq!(s.gpus, Some(GpuRequest { per: GpuPer::Node(4), gpu_type: Some("h100".into()), milli: 1000 }));
        assert_eq!(s.time, Some(Some(1800)), "command line wins");
        assert_eq!(s.partition, None, "lines after the first command are not read");
        assert_eq!(s.script_args, argv(&["--lr", "3"]));
        let shape = s.shape();
        assert_eq!((shape.nodes_min, shape.ntasks, shape.gpus_per_node(2)), (2, 8, 4));
        let r = s.to_request(7, "alice", 100, 3600);
        assert_eq!((r.name.as_str(), r.user.as_str(), r.account.as_str(), r.time_limit), ("train", "alice", "alice", 1800));
    }

    #[test]
    fn wrap_and_short_forms() {
        let s = parse_sbatch(
            &argv(&["-N2", "-n", "8", "-c4", "--mem=16G", "--wrap", "hostname", "--parsable", "-H"]),
            0,
            &mut |_| unreachable!(),
        )
        .unwrap();
        assert_eq!((s.nodes, s.ntasks, s.cpus_per_task, s.mem), (Some((2, 2)), Some(8), Some(4), Some(MemRequest::PerNode(16 << 30))));
        assert!(s.script.contains("hostname") && s.parsable && s.hold);
        assert_eq!(s.to_request(1, "u", 0, 60).name, "wrap");
        let s = parse_sbatch(
            &argv(&["--array=1-4%2", "--dependency=afterok:3", "--signal=B:USR1@120", "--wrap=true"]),
            0,
            &mut |_| unreachable!(),
        )
        .unwrap();
        assert_eq!(s.array.unwrap().indices, vec![1, 2, 3, 4]);
        assert_eq!(s.signal.unwrap().before, 120);
        assert_eq!(s.dependency.len(), 1);
    }

    #[test]
    fn errors_read_like_sbatch() {
        let e = |args: &[&str]| parse_sbatch(&argv(args), 0, &mut |p| Err(Invalid::new(format!("unable to open file {p}")))).unwrap_err().0;
        assert_eq!(e(&["--frobnicate", "--wrap=x"]), "unrecognized option '--frobnicate'");
        assert_eq!(e(&["-Z", "--wrap=x"]), "invalid option -- 'Z'");
        assert_eq!(e(&["--wrap=x", "--time"]), "option '--time' requires an argument");
        assert!(e(&["--time=abc", "--wrap=x"]).starts_with("invalid time limit \"abc\""));
        assert!(e(&["-N", "0", "--wrap=x"]).contains("node count"));
        assert!(e(&["-N", "4-2", "--wrap=x"]).contains("min is larger"));
        assert!(e(&["--mem=lots", "--wrap=x"]).contains("memory"));
        assert!(e(&["--gpus=h100:-1", "--wrap=x"]).contains("GPU"));
        assert!(e(&["-p", "batch;rm", "--wrap=x"]).contains("invalid partition"));
        assert!(e(&["--nice=99999", "--wrap=x"]).contains("--nice"));
        assert!(e(&["--exclusive=everyone", "--wrap=x"]).contains("--exclusive"));
        assert!(e(&["--requeue=sometimes", "--wrap=x"]).contains("invalid --requeue=sometimes: the only value is expedite"));
        assert!(e(&["--no-requeue=yes", "--wrap=x"]).contains("doesn't allow an argument"));
        assert!(with_script(&["--requeue=expedite", "job.sh"], SCRIPT).unwrap().expedite);
        assert!(e(&["--open-mode=sometimes", "--wrap=x"]).contains("append or truncate"));
        assert_eq!(with_script(&["--open-mode=append", "job.sh"], SCRIPT).unwrap().open_append, Some(true));
        let s = with_script(&["--wckey=submitit", "--comment", "a run", "job.sh"], SCRIPT).unwrap();
        assert_eq!((s.wckey.as_deref(), s.comment.as_deref()), (Some("submitit"), Some("a run")));
        assert!(e(&["--comment", "a\nb", "--wrap=x"]).contains("--comment"));
        assert_eq!(with_script(&["--open-mode", "truncate", "job.sh"], SCRIPT).unwrap().open_append, Some(false));
        assert!(e(&["--job-name", "a\nb", "--wrap=x"]).contains("job name"));
        let stdin = |text: &'static str| {
            parse_sbatch(&argv(&["-t", "5"]), 0, &mut |p| {
                assert_eq!(p, STDIN);
                Ok(text.to_string())
            })
        };
        assert!(stdin("").unwrap_err().0.contains("no batch script"));
        assert!(stdin("echo hi\n").unwrap_err().0.contains("does not look like a batch script"));
        let s = stdin("#!/bin/sh\n#SBATCH -J piped\ntrue\n").unwrap();
        assert_eq!((s.job_name.as_deref(), s.script_path.as_deref(), s.time), (Some("piped"), None, Some(Some(300))));
        assert_eq!(stdin("#!/bin/sh\ntrue\n").unwrap().job_name.as_deref(), Some("sbatch"));
        assert!(e(&["missing.sh"]).contains("unable to open file missing.sh"));
        assert!(e(&["--wrap=x", "job.sh"]).contains("--wrap together"));
        let bad = |script: &str| with_script(&["job.sh"], script).unwrap_err().0;
        assert!(bad("echo hi\n").contains("#!"));
        assert_eq!(
            bad("#!/bin/sh\n#SBATCH --time=forever\n"),
            "script line 2: invalid time limit \"forever\": use minutes, M:S, H:M:S, D-H, D-H:M or D-H:M:S"
        );
        assert_eq!(bad("#!/bin/sh\n\n#SBATCH --bogus\n"), "script line 3: unrecognized option '--bogus'");
        assert!(bad("#!/bin/sh\n#SBATCH -J \"unterminated\n").contains("unterminated quote"));
        assert!(bad("#!/bin/sh\n#SBATCH --wrap=ls\n").contains("--wrap cannot"));
        assert!(bad("#!/bin/sh\n#SBATCH stray\n").contains("options only"));
        // fuzz/regressions/sbatch/: 100,000 × 100,000 tasks overflowed u32 (a panic in debug builds).
        assert!(e(&["--ntasks-per-node=100000", "-N", "100000", "--wrap=x"]).contains("more than 10000000 tasks"));
        let many = BatchSpec { ntasks_per_node: Some(100_000), nodes: Some((100_000, 100_000)), ..BatchSpec::default() };
        assert_eq!(many.shape().ntasks, u32::MAX, "a spec from elsewhere (JSON) saturates, never panics");
    }

    #[test]
    fn json_keeps_the_time_limit() {
        // Found by fuzzing (fuzz/regressions/sbatch/): `-t UNLIMITED` came back from JSON, the
        // way the client sends it, as "not given" (the partition's default).
        for (t, json) in [(None, "null"), (Some(None), "0"), (Some(Some(1800)), "1800")] {
            let s = BatchSpec { time: t, ..BatchSpec::default() };
            let v = serde_json::to_value(&s).unwrap();
            assert_eq!(v["time"].to_string(), json);
            assert_eq!(serde_json::from_value::<BatchSpec>(v).unwrap().time, t);
        }
        let mut v = serde_json::to_value(BatchSpec::default()).unwrap();
        v.as_object_mut().unwrap().remove("time");
        assert_eq!(serde_json::from_value::<BatchSpec>(v).unwrap().time, None, "absent: not given");
    }

    #[test]
    fn patterns() {
        assert_eq!(expand_pattern("slurm-%j.out", 12, "x", None, "n1", "u"), "slurm-12.out");
        assert_eq!(expand_pattern("%x_%A_%a.%N.%u.%%.%q", 12, "job", Some((10, 3)), "n1", "ann"), "job_10_3.n1.ann.%.%q");
        assert_eq!(expand_pattern("%a", 5, "x", None, "n", "u"), "4294967294");
        let at = PatternAt { job: 7, name: "j", array: None, node: "node2", user: "u", step: Some(3), task: 5, node_index: 1 };
        assert_eq!(expand_pattern_at("%j_%t_log.out", &at), "7_5_log.out");
        assert_eq!(expand_pattern_at("%J.%s.%n.%N.%4t.%3q.%", &at), "7.3.3.1.node2.0005.%3q.%");
        assert_eq!(expand_pattern("%J-%s-%t", 9, "x", None, "n", "u"), "9-batch-0");
    }

    #[test]
    fn heterogeneous_components_from_hetjob_lines_and_the_command_line() {
        let script = "#!/bin/bash\n#SBATCH -J het -A ml -t 10 -n1 -c2 --mem=1G\n#SBATCH hetjob\n#SBATCH -N2 --ntasks-per-node=1 -C gpu\n#SBATCH packjob\n#SBATCH -p other --mem-per-cpu=100\nsrun true\n";
        let b = with_script(&["het.sh"], script).unwrap();
        assert_eq!(b.het.len(), 2);
        assert_eq!((b.ntasks, b.cpus_per_task, b.job_name.as_deref()), (Some(1), Some(2), Some("het")));
        let (c1, c2) = (&b.het[0], &b.het[1]);
        // Propagated: name, account, time, --mem; reset: the shape, partition, constraints.
        assert_eq!((c1.job_name.as_deref(), c1.account.as_deref(), c1.time), (Some("het"), Some("ml"), Some(Some(600))));
        assert_eq!((c1.nodes, c1.ntasks_per_node, c1.cpus_per_task), (Some((2, 2)), Some(1), None));
        assert_eq!(c1.constraint, vec!["gpu".to_string()]);
        assert_eq!(c1.mem, Some(MemRequest::PerNode(1 << 30)));
        assert_eq!((c2.partition.as_deref(), c2.constraint.len(), c2.mem), (Some("other"), 0, Some(MemRequest::PerCpu(100 << 20))));
        assert!(c1.script.is_empty() && b.script.starts_with("#!/bin/bash"));
        let r = b.to_request(5, "alice", 0, 60);
        assert_eq!(r.components(), 3);
        assert_eq!(r.het[0].shape.nodes_min, 2);
        assert_eq!(r.component(1).unwrap().features, vec!["gpu".to_string()]);
        // The command line's components override the script's, index by index.
        let b = with_script(&["-n3", ":", "-N1", "--wrap=hostname"], "").unwrap();
        assert_eq!((b.ntasks, b.het.len(), b.het[0].nodes), (Some(3), 1, Some((1, 1))));
        assert!(b.script.contains("hostname") && b.het[0].script.is_empty());
        let b = with_script(&["-n4", "het.sh"], script).unwrap();
        assert_eq!((b.ntasks, b.het.len()), (Some(4), 2));
        // The JSON the client sends keeps them.
        let back: BatchSpec = serde_json::from_str(&serde_json::to_string(&b).unwrap()).unwrap();
        assert_eq!(back, b);
        // An ordinary job has none.
        let plain = with_script(&["--wrap=true"], "").unwrap();
        assert!(plain.het.is_empty() && serde_json::to_string(&plain).unwrap().contains("\"het\":[]"));
    }

    #[test]
    fn heterogeneous_errors_name_the_component() {
        let e = with_script(&["-n1", ":", "-N", "x", "--wrap=true"], "").unwrap_err();
        assert!(e.0.contains("component 1") && e.0.contains("node count"), "{}", e.0);
        let b = with_script(&["--mem=4G", "-n1", ":", "--gpus=1", "--mem-per-gpu=8G", "--wrap=true"], "").unwrap();
        assert_eq!((b.mem, b.het[0].mem, b.het[0].mem_per_gpu), (Some(MemRequest::PerNode(4 << 30)), None, Some(8 << 30)));
        let e = with_script(&["-a", "1-3", ":", "-n1", "--wrap=true"], "").unwrap_err();
        assert!(e.0.contains("arrays of heterogeneous jobs"), "{}", e.0);
        let e = with_script(&["x.sh"], "#!/bin/sh\n#SBATCH hetjob extra\n").unwrap_err();
        assert!(e.0.contains("line 2") && e.0.contains("unexpected word"), "{}", e.0);
        let many: Vec<&str> = std::iter::repeat_n(["-n1", ":"], MAX_COMPONENTS + 1).flatten().chain(["--wrap=true"]).collect();
        assert!(with_script(&many, "").unwrap_err().0.contains("at most"));
        let mut salloc = parse_batch(&SALLOC, &argv(&["-N1", ":", "-N2", "bash"]), 0, "", &[], &mut |_| Ok(String::new()));
        assert!(salloc.as_mut().unwrap_err().0.contains("sbatch"));
    }
}
