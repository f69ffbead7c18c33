//! `srun` options inside an allocation, as Slurm's `srun` reads them (the subset a step can
//! honour; the rest is refused with what to do instead).

use crate::Invalid;
use crate::formats::{parse_gpus, parse_gres, parse_memory, parse_time};
use crate::getopt::{Arg, Command, Given, Opt, Order, Parsed, getopt};
use crate::hostlist::expand;
use crate::options::{count, text};
use model::{GpuPer, MemRequest, Time};

/// An `srun` command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SrunSpec {
    /// `--test-only`: say when the allocation srun would make could start, and run nothing.
    pub test_only: bool,
    /// `--jobid`: the allocation to run the step in (else `SLURM_JOB_ID`'s).
    pub jobid: Option<u64>,
    /// `-M`/`--clusters` (the command checks that it names this cluster, or `all`).
    pub clusters: Option<String>,
    /// `-W`/`--wait=SECONDS`: after the first task ends, how long the others may run on (0:
    /// as long as they like, Slurm's default).
    pub wait: Option<u32>,
    /// `-N` (the minimum of `min-max`).
    pub nodes: Option<u32>,
    /// `-n`.
    pub ntasks: Option<u32>,
    /// `--ntasks-per-node`.
    pub ntasks_per_node: Option<u32>,
    /// `-c`: CPUs per task (implies `exact` for a step).
    pub cpus_per_task: Option<u32>,
    /// `--exact`, or `--exclusive` (inside an allocation they mean the same): a step takes
    /// only the CPUs its tasks ask for, else every free CPU of the job on its nodes.
    pub exact: bool,
    /// `--overlap`: the step shares what other steps hold, and waits for nothing.
    pub overlap: bool,
    /// `--whole`: every free CPU of the job on each node, even with `-c`.
    pub whole: bool,
    /// `-O/--overcommit`: more tasks than CPUs.
    pub overcommit: bool,
    /// `--mem` or `--mem-per-cpu`.
    pub mem: Option<MemRequest>,
    /// `--gpus`, `--gpus-per-node`, `--gpus-per-task`, `--gres=gpu[:type]:N`, with the type.
    pub gpus: Option<(GpuPer, Option<String>)>,
    /// `-t`: the step's time limit, seconds (`None` inside: unlimited within the job's).
    pub time: Option<Time>,
    /// `-J`.
    pub name: Option<String>,
    /// `-o`.
    pub output: Option<String>,
    /// `-e`.
    pub error: Option<String>,
    /// `--open-mode`: `Some(true)` append, `Some(false)` truncate.
    pub open_append: Option<bool>,
    /// `-K`.
    pub kill_on_bad_exit: bool,
    /// `--export`.
    pub export: Option<String>,
    /// `-D`.
    pub chdir: Option<String>,
    /// `-w`, expanded.
    pub nodelist: Vec<String>,
    /// `-x`, expanded.
    pub exclude: Vec<String>,
    /// `--mpi=list`: print the MPI types and exit.
    pub mpi_list: bool,
    /// `--mpi` was given (else the cluster's MpiDefault applies).
    pub mpi_given: bool,
    /// `--cpu-bind` (applied where it names CPUs: `rank`, `map_cpu`, `mask_cpu`) and
    /// `--distribution` (recorded), as given.
    pub recorded: Vec<(String, String)>,
    /// `-l`: each line of output starts with its task's rank.
    pub label: bool,
    /// `-u`: output is passed on as it comes, not a line at a time.
    pub unbuffered: bool,
    /// `-i/--input`: who reads srun's standard input.
    pub input: Input,
    /// `--pty`: task 0 runs on a pseudo-terminal.
    pub pty: bool,
    /// `--mpi=pmi2` or `pmix`: each task gets a PMI socket tunnelled to srun.
    pub pmi: bool,
    /// `--mpi=pmix` (`pmix_v3`, `pmix_v4`, `pmix_v5`): each task runs under an OpenPMIx
    /// server of its own (`tandem __pmix-task`), whose host talks to srun over that socket.
    pub pmix: bool,
    /// The options that shape an allocation, as given, for `srun` outside one (its job gets
    /// them as `sbatch` would: `-p`, `-A`, `-q`, `-t`, `--mem`, `--mem-per-cpu`, `--gpus`,
    /// `--gpus-per-node`, `--gpus-per-task`, `-c`, `--exclusive`); inside an allocation a step
    /// shares its job's.
    pub allocation: Vec<String>,
    /// The command and its arguments.
    pub argv: Vec<String>,
    /// Pyxis's `--container-*` options: the tasks run in an image.
    pub container: Option<crate::Container>,
    /// `--het-group` of this part of the command line: the components of a heterogeneous job
    /// its tasks run on.
    pub het_group: Option<Vec<u32>>,
    /// In a heterogeneous job (`--het-group`, or parts separated by `:`): each part's
    /// components, shape and command, in order (the first is this spec's); empty otherwise.
    pub het: Vec<HetSegment>,
}

/// One part of an `srun` command line in a heterogeneous job (`srun A : B`): the components
/// it runs on, its node and task counts, its command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HetSegment {
    /// Components (`--het-group`; else the one after the previous part's last, from 0).
    pub groups: Vec<u32>,
    /// `-N`.
    pub nodes: Option<u32>,
    /// `-n`.
    pub ntasks: Option<u32>,
    /// `--ntasks-per-node`.
    pub ntasks_per_node: Option<u32>,
    /// The command (a part without one takes the next part's, as Slurm's).
    pub argv: Vec<String>,
}

/// `--het-group=EXPR`: component indices and ranges (`0`, `0,4`, `1,3-5`), ascending.
fn parse_het_group(v: &str) -> Result<Vec<u32>, Invalid> {
    let bad = || Invalid::new(format!("invalid --het-group={v}: component indices and ranges such as 0,2-3"));
    let max = crate::options::MAX_COMPONENTS as u32 - 1;
    let mut out = Vec::new();
    for item in v.split(',') {
        let (a, b) = item.split_once('-').unwrap_or((item, item));
        let (a, b) = (a.trim().parse::<u32>().map_err(|_| bad())?, b.trim().parse::<u32>().map_err(|_| bad())?);
        if a > b || b > max {
            return Err(bad());
        }
        out.extend(a..=b);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Where `srun`'s standard input goes (`--input`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Input {
    /// Every task (`all`, the default).
    #[default]
    All,
    /// One task, by rank.
    Task(u32),
    /// No task (`none`): they read `/dev/null`.
    Null,
    /// Every task reads this file, which `srun` opens.
    File(String),
}

/// The MPI types `--mpi` takes (`pmi2` serves PMI-1 clients too, as Slurm's; `pmix` takes
/// Slurm's version aliases `pmix_v3`, `pmix_v4` and `pmix_v5`).
pub const MPI_TYPES: [&str; 3] = ["none", "pmi2", "pmix"];

/// srun's options (the long name, the letter, whether it takes a value).
const OPTS: &[Opt] = &[
    Opt::both('N', "nodes", Arg::Required),
    Opt::both('n', "ntasks", Arg::Required),
    Opt::long("ntasks-per-node", Arg::Required),
    Opt::both('c', "cpus-per-task", Arg::Required),
    Opt::both('J', "job-name", Arg::Required),
    Opt::both('o', "output", Arg::Required),
    Opt::both('e', "error", Arg::Required),
    Opt::both('i', "input", Arg::Required),
    Opt::long("open-mode", Arg::Required),
    Opt::both('K', "kill-on-bad-exit", Arg::Optional),
    Opt::long("mpi", Arg::Required),
    Opt::both('u', "unbuffered", Arg::None),
    Opt::both('l', "label", Arg::None),
    Opt::long("export", Arg::Required),
    Opt::both('D', "chdir", Arg::Required),
    Opt::both('w', "nodelist", Arg::Required),
    Opt::both('x', "exclude", Arg::Required),
    Opt::long("exclusive", Arg::Optional),
    Opt::long("overlap", Arg::None),
    Opt::long("whole", Arg::None),
    Opt::long("cpu-bind", Arg::Required),
    Opt::both('m', "distribution", Arg::Required),
    Opt::both('t', "time", Arg::Required),
    Opt::both('v', "verbose", Arg::None),
    Opt::both('Q', "quiet", Arg::None),
    Opt::long("pty", Arg::None),
    Opt::both('p', "partition", Arg::Required),
    Opt::both('A', "account", Arg::Required),
    Opt::both('q', "qos", Arg::Required),
    Opt::long("mem", Arg::Required),
    Opt::long("mem-per-cpu", Arg::Required),
    Opt::both('G', "gpus", Arg::Required),
    Opt::long("gpus-per-node", Arg::Required),
    Opt::long("gpus-per-task", Arg::Required),
    Opt::long("gres", Arg::Required),
    Opt::long("exact", Arg::None),
    Opt::both('O', "overcommit", Arg::None),
    Opt::both('M', "clusters", Arg::Required),
    Opt::alias("cluster", "clusters", Arg::Required),
    Opt::both('W', "wait", Arg::Required),
    Opt::long("jobid", Arg::Required),
    Opt::both('h', "help", Arg::None),
    Opt::long("usage", Arg::None),
    Opt::both('V', "version", Arg::None),
];

/// srun's options that shape only the allocation `srun` makes when it runs outside one (they
/// are passed on to it, as `sbatch` reads them; inside an allocation they change nothing).
const FOR_ALLOCATION: &[Opt] = &[
    Opt::both('b', "begin", Arg::Required),
    Opt::long("comment", Arg::Required),
    Opt::both('C', "constraint", Arg::Required),
    Opt::long("cpus-per-gpu", Arg::Required),
    Opt::both('d', "dependency", Arg::Required),
    Opt::long("hint", Arg::Required),
    Opt::both('H', "hold", Arg::None),
    Opt::long("mail-type", Arg::Required),
    Opt::long("mail-user", Arg::Required),
    Opt::long("mem-per-gpu", Arg::Required),
    Opt::long("nice", Arg::Optional),
    Opt::long("reservation", Arg::Required),
    Opt::long("signal", Arg::Required),
    Opt::long("switches", Arg::Required),
    Opt::long("threads-per-core", Arg::Required),
    Opt::long("time-min", Arg::Required),
    Opt::long("wckey", Arg::Required),
    Opt::long("test-only", Arg::None),
];

/// srun's options that steps read beyond [`OPTS`].
const STEP_MORE: &[Opt] = &[
    // Slurm 23.11: a launcher such as mpirun starting its daemons: a step beside the others.
    Opt::long("external-launcher", Arg::None),
];

/// srun's own options that Tandem sets aside (saying why) or refuses.
const SRUN_ASIDE: &[Opt] = &[
    Opt::long("accel-bind", Arg::Required).ignored("every task sees the job's GPUs on its node"),
    Opt::long("bcast", Arg::Optional).ignored("the program runs from its path on each node (sbcast copies files)"),
    Opt::long("bcast-exclude", Arg::Required).ignored("the program runs from its path on each node (sbcast copies files)"),
    Opt::long("compress", Arg::Optional).ignored("nothing is broadcast to compress"),
    Opt::both('X', "disable-status", Arg::None).ignored("one Ctrl-C prints the tasks' state, two within a second end the step"),
    Opt::long("epilog", Arg::Required).refused("--epilog: srun runs no epilog here"),
    Opt::long("het-group", Arg::Required),
    Opt::both('I', "immediate", Arg::Optional).ignored("srun waits for its allocation until it is granted or Ctrl-C"),
    Opt::long("msg-timeout", Arg::Required).ignored("srun's messages to the controller retry on their own schedule"),
    Opt::long("multi-prog", Arg::None).refused("--multi-prog is not supported: run one program that looks at SLURM_PROCID"),
    Opt::both('Z', "no-allocate", Arg::None).refused("--no-allocate: every step runs in an allocation here"),
    Opt::both('E', "preserve-env", Arg::None).ignored("SLURM_NNODES and SLURM_NTASKS follow the step's own shape"),
    Opt::long("prolog", Arg::Required).refused("--prolog: srun runs no prolog here"),
    Opt::long("propagate", Arg::Optional).ignored("tasks get the node's resource limits"),
    Opt::long("quit-on-interrupt", Arg::None).ignored("one Ctrl-C prints the tasks' state, two within a second end the step"),
    Opt::both('r', "relative", Arg::Required).refused("--relative is not supported: give the step's nodes with -w"),
    Opt::long("resv-ports", Arg::Optional).ignored("no ports are reserved: srun --mpi=pmi2 serves MPI's wire-up"),
    Opt::long("send-libs", Arg::Optional).ignored("the program runs from its path on each node"),
    Opt::long("slurmd-debug", Arg::Required).ignored("the agents' logs are the node's (tandem agent --log)"),
    Opt::long("task-epilog", Arg::Required).refused("--task-epilog: no task epilog is run here"),
    Opt::long("task-prolog", Arg::Required).refused("--task-prolog: no task prolog is run here"),
    Opt::both('T', "threads", Arg::Required).ignored("srun's own launch threads: tasks start from each node's agent"),
    Opt::long("x11", Arg::Optional).refused("--x11: X11 forwarding is not available"),
    // Added to Slurm after 22.05 (slurm-options-newer.txt says when).
    Opt::long("treewidth", Arg::Required).ignored("tasks start from each node's agent, not through a tree of daemons"),
    Opt::long("wait-for-children", Arg::None).ignored("a task ends when its process does; its leftover children are ended with its step"),
];

/// `srun`: the options end at the command; `_` in a long name reads as `-`, as Slurm's.
pub const SRUN: Command = Command {
    name: "srun",
    opts: &[OPTS, STEP_MORE, FOR_ALLOCATION, crate::options::RUN_ASIDE, SRUN_ASIDE, crate::container::CONTAINER_OPTS],
    order: Order::RequireOrder,
    underscores: true,
};

/// A value that must be there and be plain text.
fn nonempty(v: &str, what: &str) -> Result<String, Invalid> {
    if v.is_empty() {
        return Err(Invalid::new(format!("invalid {what}: it must not be empty")));
    }
    text(v, what)
}

/// Parses `srun`'s arguments: options, then the command (everything from the first word that
/// is not an option, or after `--`). Long options take Slurm's underscore spellings too
/// (`--cpu_bind`, `--ntasks_per_node`).
pub fn parse_srun(args: &[String]) -> Result<SrunSpec, Invalid> {
    let mut s = parse_part(args)?;
    if s.het.is_empty() && s.het_group.is_some() {
        s.het = vec![HetSegment {
            groups: s.het_group.clone().unwrap_or_default(),
            nodes: s.nodes,
            ntasks: s.ntasks,
            ntasks_per_node: s.ntasks_per_node,
            argv: s.argv.clone(),
        }];
    }
    if !s.het.is_empty() {
        // A part without a command takes the next part's.
        for i in (0..s.het.len().saturating_sub(1)).rev() {
            if s.het[i].argv.is_empty() {
                s.het[i].argv = s.het[i + 1].argv.clone();
            }
        }
        s.argv = s.het[0].argv.clone();
        // A part without --het-group runs on the component after the previous part's last.
        let mut next = 0;
        for h in &mut s.het {
            if h.groups.is_empty() {
                h.groups = vec![next];
            }
            next = h.groups.last().map_or(0, |g| g + 1);
        }
        if next as usize > crate::options::MAX_COMPONENTS {
            return Err(Invalid::new(format!("at most {} heterogeneous job components", crate::options::MAX_COMPONENTS)));
        }
        let mut seen: Vec<u32> = s.het.iter().flat_map(|h| h.groups.iter().copied()).collect();
        let n = seen.len();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != n {
            return Err(Invalid::new("each heterogeneous component may run one part of a step: a --het-group is named twice"));
        }
    }
    if s.argv.is_empty() && !s.mpi_list {
        return Err(Invalid::new("no command given"));
    }
    Ok(s)
}

/// One `:`-separated part of `srun`'s command line (the parts after it too, in `het`).
fn parse_part(args: &[String]) -> Result<SrunSpec, Invalid> {
    let Parsed { opts, args: mut command, .. } = getopt(&SRUN, args)?;
    let rest: Option<Vec<String>> = command.iter().position(|w| w == crate::options::HET_SEPARATOR).map(|i| {
        let rest = command[i + 1..].to_vec();
        command.truncate(i);
        rest
    });
    let mut s = SrunSpec { argv: command, ..SrunSpec::default() };
    for Given { opt, value } in opts {
        if crate::container::read_option(&mut s.container, opt.key, value.as_deref())? {
            continue;
        }
        let v = || value.clone().unwrap_or_default();
        match opt.key {
            "nodes" => {
                let min = v().split('-').next().unwrap_or("").to_string();
                s.nodes = Some(count(&min, "node count", MAX)?);
            }
            "ntasks" => s.ntasks = Some(count(&v(), "number of tasks", MAX)?),
            "ntasks-per-node" => s.ntasks_per_node = Some(count(&v(), "--ntasks-per-node", MAX)?),
            "cpus-per-task" => {
                s.cpus_per_task = Some(count(&v(), "--cpus-per-task", MAX)?);
                s.allocation.push(format!("--cpus-per-task={}", v()));
            }
            "job-name" => s.name = Some(nonempty(&v(), "job name")?),
            "output" => s.output = Some(nonempty(&v(), "--output")?),
            "error" => s.error = Some(nonempty(&v(), "--error")?),
            "input" => {
                let v = nonempty(&v(), "--input")?;
                s.input = match v.as_str() {
                    "all" => Input::All,
                    "none" | "/dev/null" => Input::Null,
                    n if n.bytes().all(|b| b.is_ascii_digit()) => Input::Task(count0(n, "--input task", MAX)?),
                    _ => Input::File(v),
                }
            }
            "open-mode" => {
                s.open_append = Some(match v().as_str() {
                    "append" | "a" => true,
                    "truncate" | "t" => false,
                    o => return Err(Invalid::new(format!("invalid --open-mode={o}: append or truncate"))),
                })
            }
            "kill-on-bad-exit" => {
                s.kill_on_bad_exit = match value.as_deref() {
                    None => true,
                    Some(n) => n.parse::<i64>().map_err(|_| Invalid::new(format!("invalid --kill-on-bad-exit={n}: a number")))? != 0,
                }
            }
            "mpi" => {
                s.mpi_given = true;
                match v().as_str() {
                    "list" => s.mpi_list = true,
                    "none" => (s.pmi, s.pmix) = (false, false),
                    "pmi2" => (s.pmi, s.pmix) = (true, false),
                    "pmix" | "pmix_v3" | "pmix_v4" | "pmix_v5" => (s.pmi, s.pmix) = (true, true),
                    other => {
                        return Err(Invalid::new(format!(
                            "--mpi={other}: not available; MPI types: {} (OpenMPI's mpirun inside an allocation launches over srun)",
                            MPI_TYPES.join(", ")
                        )));
                    }
                }
            }
            "label" => s.label = true,
            "unbuffered" => s.unbuffered = true,
            "pty" => s.pty = true,
            "export" => s.export = Some(nonempty(&v(), "--export")?),
            "chdir" => s.chdir = Some(nonempty(&v(), "--chdir")?),
            "nodelist" => s.nodelist = expand(&v(), 100_000).map_err(|e| Invalid::new(format!("invalid --nodelist: {}", e.0)))?,
            "exclude" => s.exclude = expand(&v(), 100_000).map_err(|e| Invalid::new(format!("invalid --exclude: {}", e.0)))?,
            "cpu-bind" => {
                let v = nonempty(&v(), opt.key)?;
                cpu_bind_cpus(&v, 0)?;
                s.recorded.push((opt.key.to_string(), v));
            }
            "distribution" => s.recorded.push((opt.key.to_string(), nonempty(&v(), opt.key)?)),
            "time" => {
                s.time = parse_time(&v())?;
                s.allocation.push(format!("--time={}", v()));
            }
            "mem" => {
                s.mem = Some(MemRequest::PerNode(parse_memory(&v())?));
                s.allocation.push(format!("--mem={}", v()));
            }
            "mem-per-cpu" => {
                s.mem = Some(MemRequest::PerCpu(parse_memory(&v())?));
                s.allocation.push(format!("--mem-per-cpu={}", v()));
            }
            "gpus" | "gpus-per-node" | "gpus-per-task" => {
                let (ty, n) = parse_gpus(&v())?;
                s.gpus = Some((
                    match opt.key {
                        "gpus" => GpuPer::Job(n),
                        "gpus-per-node" => GpuPer::Node(n),
                        _ => GpuPer::Task(n),
                    },
                    ty,
                ));
                s.allocation.push(format!("--{}={}", opt.key, v()));
            }
            "gres" => {
                for (name, ty, n) in parse_gres(&v())? {
                    if name != "gpu" {
                        return Err(Invalid::new(format!("invalid generic resource (gres) specification {name:?}: steps take gpu only")));
                    }
                    s.gpus = Some((GpuPer::Node(n as u32), ty));
                }
                s.allocation.push(format!("--gres={}", v()));
            }
            "partition" | "account" | "qos" => {
                s.allocation.push(format!("--{}={}", opt.key, nonempty(&v(), opt.key)?));
            }
            "exclusive" => {
                // `=allocation`: whole nodes for a job srun makes, without --exact for its step.
                s.exact = value.as_deref() != Some("allocation");
                s.allocation.push(match value.as_deref() {
                    None | Some("allocation") => "--exclusive".to_string(),
                    Some(x) => format!("--exclusive={x}"),
                });
            }
            "exact" => s.exact = true,
            "overlap" => s.overlap = true,
            "whole" => s.whole = true,
            "overcommit" => s.overcommit = true,
            // `--help`, `--usage` and `-V` are answered before.
            "verbose" | "quiet" | "help" | "usage" | "version" => {}
            // `-M`: the cluster's own name or `all` (the command checks the name).
            "clusters" => s.clusters = Some(nonempty(&v(), "--clusters")?),
            "external-launcher" => s.overlap = true,
            "tres-per-task" => {
                let crate::options::TresPerTask { cpus, gpus } = crate::options::parse_tres_per_task(&v())?;
                if let Some(c) = cpus {
                    s.cpus_per_task = Some(c);
                    s.allocation.push(format!("--cpus-per-task={c}"));
                }
                if let Some((ty, n)) = gpus {
                    s.gpus = Some((GpuPer::Task(n), ty.clone()));
                    s.allocation.push(format!("--gpus-per-task={}{n}", ty.map(|t| format!("{t}:")).unwrap_or_default()));
                }
            }
            "hold" => s.allocation.push("--hold".into()),
            "nice" => s.allocation.push(value.as_ref().map_or_else(|| "--nice".into(), |n| format!("--nice={n}"))),
            "test-only" => s.test_only = true,
            "begin" | "comment" | "constraint" | "cpus-per-gpu" | "dependency" | "hint" | "mail-type" | "mail-user" | "mem-per-gpu"
            | "reservation" | "signal" | "switches" | "threads-per-core" | "time-min" | "wckey" => {
                s.allocation.push(format!("--{}={}", opt.key, nonempty(&v(), opt.key)?));
            }
            "jobid" => {
                let id = v();
                let job = id.split('.').next().unwrap_or("");
                s.jobid = Some(job.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| Invalid::new(format!("Invalid job id: {id}")))?);
            }
            "wait" => {
                s.wait = Some(
                    v().trim().parse::<u32>().map_err(|_| Invalid::new(format!("invalid --wait={}: a whole number of seconds", v())))?,
                )
            }
            "het-group" => s.het_group = Some(parse_het_group(&v())?),
            _ => unreachable!("every option in OPTS is handled"),
        }
    }
    if let Some(rest) = rest {
        // What a later part may give for itself; the rest (-c, --mem, --gpus, -w, -l, ...)
        // is the step's, given once before the first `:`.
        const OWN: &[&str] = &["nodes", "ntasks", "ntasks-per-node", "het-group"];
        if let Some(g) = getopt(&SRUN, &rest)?.opts.iter().find(|g| !OWN.contains(&g.opt.key)) {
            return Err(Invalid::new(format!(
                "a part of a heterogeneous step after ':' may give only -N, -n, --ntasks-per-node and --het-group: give --{} before the first ':', where it applies to every part",
                g.opt.key
            )));
        }
        let next = parse_part(&rest)?;
        let mine = HetSegment {
            groups: s.het_group.clone().unwrap_or_default(),
            nodes: s.nodes,
            ntasks: s.ntasks,
            ntasks_per_node: s.ntasks_per_node,
            argv: s.argv.clone(),
        };
        let theirs = if next.het.is_empty() {
            vec![HetSegment {
                groups: next.het_group.clone().unwrap_or_default(),
                nodes: next.nodes,
                ntasks: next.ntasks,
                ntasks_per_node: next.ntasks_per_node,
                argv: next.argv.clone(),
            }]
        } else {
            next.het
        };
        if theirs.len() + 1 > crate::options::MAX_COMPONENTS {
            return Err(Invalid::new(format!("at most {} heterogeneous job components", crate::options::MAX_COMPONENTS)));
        }
        s.het = std::iter::once(mine).chain(theirs).collect();
    }
    s.container = crate::container::finish(s.container.take())?;
    if s.pmix && s.container.is_some() {
        return Err(Invalid::new(
            "--mpi=pmix cannot be used with --container-image yet: the tasks' PMIx servers run on the node, outside the image (--mpi=pmi2 works in a container)",
        ));
    }
    Ok(s)
}

/// [`parse_srun`] after the input variables of `env` that `srun` reads
/// ([`crate::envvars::SRUN_ENV`]: each stands for an option; the command line wins); a bad
/// value names its variable. Those that would make every step of a job ask for the job's whole
/// shape (`SLURM_NTASKS`, `SLURM_MEM_PER_NODE`, ..., which a job's own environment holds) are
/// set aside: give `srun` the option instead.
pub fn parse_srun_env(args: &[String], env: &[(String, String)]) -> Result<SrunSpec, Invalid> {
    let mut pre = Vec::new();
    for (var, given) in crate::envvars::read_env(&crate::envvars::SRUN_ENV, &SRUN, env)?.opts {
        let o = given.opt;
        let word = match (&given.value, o.long, o.short) {
            (Some(v), "", Some(c)) => format!("-{c}{v}"),
            (Some(v), long, _) => format!("--{long}={v}"),
            (None, "", Some(c)) => format!("-{c}"),
            (None, long, _) => format!("--{long}"),
        };
        // Each alone first, so that the variable is named if its value is wrong.
        parse_srun(&[word.clone(), "true".to_string()]).map_err(|e| Invalid::new(format!("{var}: {}", e.0)))?;
        pre.push(word);
    }
    // Before the command line's own options, which so override them.
    pre.extend(args.iter().cloned());
    parse_srun(&pre)
}

/// Highest CPU id `--cpu-bind=map_cpu:`/`mask_cpu:` may name (a `cpu_set_t` holds 1,024).
pub const MAX_CPU_ID: u32 = 1023;

/// The CPUs a task with local id `localid` is bound to under `--cpu-bind=SPEC`, as Slurm's
/// task/affinity reads it: `[verbose,]` then `none`/`no` (unbound: `None`), `rank` (CPU =
/// local id), `map_cpu:<id>[,<id>...]` (the local id picks an entry, cyclically),
/// `mask_cpu:<hex>[,<hex>...]` (likewise, a hexadecimal mask), or a binding by hardware unit
/// (`cores`, `threads`, `sockets`, `ldoms`, `boards`: accepted, unbound, as allocations here
/// are CPU counts, not CPU ids). Errors say what is wrong.
pub fn cpu_bind_cpus(spec: &str, localid: u32) -> Result<Option<Vec<u32>>, Invalid> {
    let bad = |why: &str| Invalid::new(format!("invalid --cpu-bind={spec}: {why}"));
    let mut what: Option<(String, Vec<String>)> = None;
    for part in spec.split(',').map(str::trim) {
        let flag = matches!(part, "verbose" | "v" | "quiet" | "q");
        match &mut what {
            // The list of map_cpu/mask_cpu goes on after commas.
            Some((_, list)) if !flag => list.push(part.to_string()),
            Some(_) => {}
            None if flag => {}
            None => what = Some((part.to_string(), Vec::new())),
        }
    }
    let Some((head, mut rest)) = what else {
        // `q`/`quiet`, `v`/`verbose` alone keep the default binding (none here), as Slurm's.
        if !spec.trim().is_empty() {
            return Ok(None);
        }
        return Err(bad("want none, rank, map_cpu:<list>, mask_cpu:<list>, cores, threads, sockets or ldoms"));
    };
    let (kind, first) = head.split_once(':').map_or((head.as_str(), None), |(k, v)| (k, Some(v.to_string())));
    if let Some(f) = first {
        rest.insert(0, f);
    }
    let plain = |rest: &[String]| if rest.is_empty() { Ok(None) } else { Err(bad("this binding takes no list")) };
    match kind {
        "none" | "no" | "cores" | "threads" | "sockets" | "ldoms" | "boards" => plain(&rest),
        "rank" => {
            plain(&rest)?;
            if localid > MAX_CPU_ID {
                return Err(bad("more tasks on a node than CPU ids"));
            }
            Ok(Some(vec![localid]))
        }
        "map_cpu" | "mask_cpu" => {
            if rest.is_empty() || rest.len() > 4096 {
                return Err(bad("want a list of 1 to 4096 entries"));
            }
            let mut all = Vec::new();
            for e in &rest {
                all.push(if kind == "map_cpu" {
                    let id = e
                        .parse::<u32>()
                        .ok()
                        .filter(|&n| n <= MAX_CPU_ID)
                        .ok_or_else(|| bad(&format!("{e:?} is not a CPU id 0-{MAX_CPU_ID}")))?;
                    vec![id]
                } else {
                    let hex = e.strip_prefix("0x").or_else(|| e.strip_prefix("0X")).unwrap_or(e);
                    if hex.is_empty() || hex.len() > (MAX_CPU_ID as usize + 1) / 4 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return Err(bad(&format!("{e:?} is not a hexadecimal CPU mask")));
                    }
                    let mut ids = Vec::new();
                    for (i, c) in hex.bytes().rev().enumerate() {
                        let v = (c as char).to_digit(16).expect("checked");
                        ids.extend((0..4).filter(|b| v & (1 << b) != 0).map(|b| (i * 4 + b) as u32));
                    }
                    if ids.is_empty() {
                        return Err(bad(&format!("{e:?} selects no CPU")));
                    }
                    ids
                });
            }
            Ok(Some(all[localid as usize % all.len()].clone()))
        }
        _ => Err(bad("want none, rank, map_cpu:<list>, mask_cpu:<list>, cores, threads, sockets or ldoms")),
    }
}

/// A task number (from 0).
fn count0(v: &str, what: &str, max: u32) -> Result<u32, Invalid> {
    match v.parse::<u32>() {
        Ok(n) if n < max => Ok(n),
        _ => Err(Invalid::new(format!("invalid {what} {v:?}: a whole number below {max}"))),
    }
}

/// Most nodes or tasks a step may ask for.
const MAX: u32 = 100_000;

#[cfg(test)]
mod tests {
    use super::*;

    fn p(a: &[&str]) -> Result<SrunSpec, Invalid> {
        parse_srun(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn openmpi_and_submitit_command_lines() {
        // OpenMPI 4.1's plm/slurm launch of its daemons.
        let s = p(&[
            "--ntasks-per-node=1",
            "--kill-on-bad-exit",
            "--cpu_bind=none",
            "--nodes=2",
            "--nodelist=node[1-2]",
            "--ntasks=2",
            "orted",
            "-mca",
            "ess",
            "slurm",
        ])
        .unwrap();
        assert_eq!((s.nodes, s.ntasks, s.ntasks_per_node, s.kill_on_bad_exit), (Some(2), Some(2), Some(1), true));
        assert_eq!(s.nodelist, vec!["node1", "node2"]);
        assert_eq!(s.argv, vec!["orted", "-mca", "ess", "slurm"]);
        assert_eq!(s.recorded, vec![("cpu-bind".to_string(), "none".to_string())]);
        // submitit's.
        let s = p(&["--unbuffered", "--output", "/l/%j_%t_log.out", "--error", "/l/%j_%t_log.err", "python3", "-u", "-m", "x"]).unwrap();
        assert_eq!((s.output.as_deref(), s.error.as_deref()), (Some("/l/%j_%t_log.out"), Some("/l/%j_%t_log.err")));
        assert_eq!(s.argv, vec!["python3", "-u", "-m", "x"]);
        let s = p(&["-N2", "-n4", "-K0", "-J", "t", "-D", "/w", "--export=ALL,A=1", "--", "-x"]).unwrap();
        assert_eq!(
            (s.nodes, s.ntasks, s.kill_on_bad_exit, s.name.as_deref(), s.chdir.as_deref()),
            (Some(2), Some(4), false, Some("t"), Some("/w"))
        );
        assert_eq!((s.export.as_deref(), s.argv.clone()), (Some("ALL,A=1"), vec!["-x".to_string()]));
        assert!(p(&["--mpi=list"]).unwrap().mpi_list);
    }

    #[test]
    fn bad_input_is_refused_with_what_to_fix() {
        let e = |a: &[&str]| p(a).unwrap_err().0;
        assert_eq!(e(&["--frobnicate", "x"]), "unrecognized option '--frobnicate'");
        assert_eq!(e(&["-Y", "x"]), "invalid option -- 'Y'");
        assert_eq!(e(&["-Z", "x"]), "--no-allocate: every step runs in an allocation here");
        assert_eq!(e(&["-n"]), "option requires an argument -- 'n'");
        assert_eq!(e(&["--ntasks"]), "option '--ntasks' requires an argument");
        assert!(e(&["-o", "", "x"]).contains("must not be empty"));
        assert!(e(&["-n", "0", "x"]).contains("number of tasks"));
        assert!(e(&["--unbuffered=yes", "x"]).contains("doesn't allow an argument"));
        // Letters bundle, as glibc's: `-ux` is `-u -x`, whose value here is the command's word.
        assert_eq!(e(&["-ux", "x"]), "no command given");
        assert_eq!(e(&["-uY", "x"]), "invalid option -- 'Y'");
        assert!(p(&["-lN1", "hostname"]).is_ok_and(|s| s.label && s.nodes == Some(1) && s.argv == ["hostname"]));
        for t in ["pmix", "pmix_v4", "pmix_v5"] {
            let s = p(&[&format!("--mpi={t}"), "x"]).unwrap();
            assert!(s.pmi && s.pmix, "{t}");
        }
        assert!(!p(&["--mpi=pmix", "--mpi=pmi2", "x"]).unwrap().pmix, "the last one wins");
        assert!(p(&["--mpi=none", "x"]).unwrap().mpi_given && !p(&["x"]).unwrap().mpi_given);
        assert!(e(&["--mpi=pmix", "--container-image=busybox", "x"]).contains("--mpi=pmix"));
        assert!(e(&["--mpi=cray_shasta", "x"]).contains("not available"));
        assert!(p(&["--mpi=pmi2", "x"]).unwrap().pmi);
        assert!(e(&["--input=", "x"]).contains("must not be empty"));
        assert!(e(&["--input=4294967295", "x"]).contains("--input task"));
        assert_eq!(p(&["-i3", "x"]).unwrap().input, Input::Task(3));
        assert_eq!(p(&["--input=none", "x"]).unwrap().input, Input::Null);
        assert_eq!(p(&["--input=in.txt", "x"]).unwrap().input, Input::File("in.txt".into()));
        let s = p(&["-l", "-u", "--pty", "-p", "gpu", "--mem=4G", "-t", "5", "bash"]).unwrap();
        assert!(s.label && s.unbuffered && s.pty);
        assert_eq!(s.allocation, vec!["--partition=gpu", "--mem=4G", "--time=5"]);
        assert!(e(&["--open-mode=maybe", "x"]).contains("append or truncate"));
        assert!(p(&["-K", "x"]).unwrap().kill_on_bad_exit);
        assert!(e(&["--kill-on-bad-exit=yes", "x"]).contains("a number"));
        assert!(e(&["-o", "a\nb", "x"]).contains("--output"));
        assert!(e(&["-w", "node[", "x"]).contains("--nodelist"));
        assert!(e(&["-t", "soon", "x"]).contains("time"));
        assert_eq!(e(&["-N2"]), "no command given");
        assert!(e(&["--mem=lots", "x"]).contains("memory"));
        assert!(e(&["--gpus=0", "x"]).contains("GPU"));
        assert!(e(&["--gpus-per-task=h100:", "x"]).contains("GPU"));
        assert!(e(&["--gres=nic:1", "x"]).contains("steps take gpu only"));
        assert!(e(&["--gres=gpu:", "x"]).contains("gres"));
        assert!(e(&["--exact=1", "x"]).contains("doesn't allow an argument"));
    }

    #[test]
    fn openmpi_4_1_s_captured_command_line_parses_whole() {
        // Captured with `mpirun.openmpi --mca plm_base_verbose 10` (tests/clients/).
        let text = include_str!("../../../tests/clients/openmpi-4.1-srun-argv.txt");
        let line = text.lines().find(|l| l.starts_with("srun ")).expect("the captured line");
        let words: Vec<String> = line.split_whitespace().skip(1).map(str::to_string).collect();
        let s = parse_srun(&words).unwrap();
        assert_eq!((s.ntasks_per_node, s.ntasks, s.kill_on_bad_exit, s.pmi), (Some(1), Some(2), true, false));
        assert_eq!((s.nodes, s.exact, s.overlap), (None, false, false), "a default step: every CPU of its nodes");
        let orted = words.iter().position(|w| w == "orted").unwrap();
        assert_eq!(s.argv, words[orted..].to_vec(), "everything from orted on is its command, untouched");
        assert_eq!(s.argv.last().map(String::as_str), Some("\"10\""));
    }

    #[test]
    fn srun_reads_its_input_variables_the_command_line_winning() {
        let env = |kv: &[(&str, &str)]| kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let e = env(&[
            ("SLURM_OVERLAP", "1"),
            ("SLURM_LABELIO", ""),
            ("SLURM_MPI_TYPE", "pmi2"),
            ("SLURM_EXPORT_ENV", "NONE"),
            ("SRUN_EXPORT_ENV", "ALL"),
        ]);
        let s = parse_srun_env(&args(&["hostname"]), &e).unwrap();
        assert!(s.overlap && s.label && s.pmi);
        assert_eq!(s.export.as_deref(), Some("ALL"), "SRUN_EXPORT_ENV over SLURM_EXPORT_ENV");
        assert_eq!(s.argv, args(&["hostname"]));
        let s = parse_srun_env(&args(&["--mpi=none", "--export=FOO", "--", "-x"]), &e).unwrap();
        assert_eq!((s.pmi, s.export.as_deref(), s.argv.clone()), (false, Some("FOO"), args(&["-x"])), "the command line wins");
        assert!(parse_srun_env(&args(&["--mpi=list"]), &e).unwrap().mpi_list);
        let err = parse_srun_env(&args(&["true"]), &env(&[("SLURM_TIMELIMIT", "soon")])).unwrap_err().0;
        assert!(err.starts_with("SLURM_TIMELIMIT: invalid time limit"), "{err}");
        let err = parse_srun_env(&args(&["true"]), &env(&[("SLURM_CPU_BIND", "map_cpu:x")])).unwrap_err().0;
        assert!(err.starts_with("SLURM_CPU_BIND: invalid --cpu-bind"), "{err}");
        // What a job's own environment holds is not read as a step's request.
        let s =
            parse_srun_env(&args(&["true"]), &env(&[("SLURM_MEM_PER_NODE", "4096"), ("SLURM_NTASKS", "8"), ("SLURM_CPUS_PER_TASK", "2")]))
                .unwrap();
        assert_eq!((s.mem, s.ntasks, s.cpus_per_task), (None, None, None));
    }

    #[test]
    fn cpu_bind_names_cpus_as_slurms_task_affinity() {
        assert_eq!(cpu_bind_cpus("none", 3).unwrap(), None);
        assert_eq!(cpu_bind_cpus("verbose,cores", 0).unwrap(), None);
        assert_eq!(cpu_bind_cpus("rank", 3).unwrap(), Some(vec![3]));
        assert_eq!(cpu_bind_cpus("map_cpu:5,7", 0).unwrap(), Some(vec![5]));
        assert_eq!(cpu_bind_cpus("verbose,map_cpu:5,7", 3).unwrap(), Some(vec![7]), "cyclic over the list");
        assert_eq!(cpu_bind_cpus("mask_cpu:0x3,0x30", 1).unwrap(), Some(vec![4, 5]));
        assert_eq!(cpu_bind_cpus("mask_cpu:f0", 0).unwrap(), Some(vec![4, 5, 6, 7]));
        for bad in ["", "map_cpu:", "map_cpu:x", "map_cpu:4096", "mask_cpu:0", "mask_cpu:zz", "rank:1", "sideways", "none:2"] {
            assert!(cpu_bind_cpus(bad, 0).unwrap_err().0.starts_with("invalid --cpu-bind"), "{bad}");
        }
        let long = format!("mask_cpu:{}", "f".repeat(2000));
        assert!(cpu_bind_cpus(&long, 0).is_err());
        assert!(p(&["--cpu_bind=map_cpu:1,x", "true"]).is_err(), "checked when parsed");
    }

    #[test]
    fn job_options_pass_to_the_allocation_srun_makes() {
        let s = p(&["-C", "a100", "-b", "now+1", "-H", "--nice", "--time-min=5", "--wckey=w", "--mem-per-gpu=4G", "x"]).unwrap();
        assert_eq!(
            s.allocation,
            ["--constraint=a100", "--begin=now+1", "--hold", "--nice", "--time-min=5", "--wckey=w", "--mem-per-gpu=4G"]
        );
        assert!(e_of(&["--constraint=", "x"]).contains("must not be empty"));
        let s = p(&["--tres-per-task=cpu=2,gres/gpu=1", "--external-launcher", "--test-only", "--jobid=12.3", "-W", "30", "x"]).unwrap();
        assert_eq!(
            (s.cpus_per_task, s.gpus.clone(), s.overlap, s.test_only, s.jobid, s.wait),
            (Some(2), Some((GpuPer::Task(1), None)), true, true, Some(12), Some(30))
        );
        assert_eq!(s.allocation, ["--cpus-per-task=2", "--gpus-per-task=1"]);
        assert!(e_of(&["--jobid=x", "x"]).contains("Invalid job id"));
        assert!(e_of(&["--wait=-1", "x"]).contains("--wait"));
        assert!(e_of(&["-M", "", "x"]).contains("must not be empty"));
        // Set aside: the step is the same as without them.
        assert_eq!(p(&["--profile=all", "-X", "--treewidth=4", "-l", "x"]).unwrap(), p(&["-l", "x"]).unwrap());
        assert_eq!(e_of(&["--multi-prog", "x"]), "--multi-prog is not supported: run one program that looks at SLURM_PROCID");
    }

    fn e_of(a: &[&str]) -> String {
        p(a).unwrap_err().0
    }

    #[test]
    fn step_resources_as_slurms_step_options() {
        let s = p(&["--exact", "-c2", "--mem-per-cpu=512M", "--gpus-per-task=h100:1", "-t", "1:30", "x"]).unwrap();
        assert_eq!((s.exact, s.cpus_per_task, s.mem), (true, Some(2), Some(MemRequest::PerCpu(512 << 20))));
        assert_eq!(s.gpus, Some((GpuPer::Task(1), Some("h100".into()))));
        assert_eq!(s.time, Some(120), "one-minute resolution, rounded up");
        // --exclusive inside an allocation is --exact; =allocation is not.
        assert!(p(&["--exclusive", "x"]).unwrap().exact);
        assert!(!p(&["--exclusive=allocation", "x"]).unwrap().exact);
        let s = p(&["--overlap", "--whole", "-O", "--mem=0", "--gres=gpu:a100:2", "-G", "3", "x"]).unwrap();
        assert!(s.overlap && s.whole && s.overcommit);
        assert_eq!((s.mem, s.gpus), (Some(MemRequest::PerNode(0)), Some((GpuPer::Job(3), None))));
        assert_eq!(p(&["--gres=gpu:a100:2", "x"]).unwrap().gpus, Some((GpuPer::Node(2), Some("a100".into()))));
        assert_eq!(p(&["-t", "0", "x"]).unwrap().time, None, "0 is no limit of its own");
        // Underscore spellings.
        let s = p(&["--cpus_per_task=3", "--mem_per_cpu=1G", "--gpus_per_node=2", "--ntasks_per_node=1", "x"]).unwrap();
        assert_eq!((s.cpus_per_task, s.mem, s.ntasks_per_node), (Some(3), Some(MemRequest::PerCpu(1 << 30)), Some(1)));
    }

    #[test]
    fn heterogeneous_parts_and_het_groups() {
        let a = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
        let s = parse_srun(&a(&["-l", "-n2", ":", "-n1", "hostname"])).unwrap();
        assert_eq!(s.het.len(), 2);
        assert_eq!((s.het[0].groups.clone(), s.het[0].ntasks, s.het[0].argv.clone()), (vec![0], Some(2), a(&["hostname"])));
        assert_eq!((s.het[1].groups.clone(), s.het[1].ntasks), (vec![1], Some(1)));
        assert!(s.label && s.argv == a(&["hostname"]));
        let s = parse_srun(&a(&["--het-group=0,1", "env"])).unwrap();
        assert_eq!((s.het.len(), s.het[0].groups.clone()), (1, vec![0, 1]));
        let s = parse_srun(&a(&["--het-group=1", "a", ":", "b", ":", "--het-group=0", "c"])).unwrap();
        let groups: Vec<Vec<u32>> = s.het.iter().map(|h| h.groups.clone()).collect();
        assert_eq!(groups, vec![vec![1], vec![2], vec![0]]);
        assert_eq!(s.het.iter().map(|h| h.argv[0].clone()).collect::<Vec<_>>(), a(&["a", "b", "c"]));
        assert!(parse_srun(&a(&["hostname"])).unwrap().het.is_empty());
        for bad in [
            &["--het-group=x", "true"][..],
            &["--het-group=3-1", "true"],
            &["--het-group=999", "true"],
            &["-n1", ":"],
            &["--het-group=0", "a", ":", "--het-group=0", "b"],
        ] {
            assert!(parse_srun(&a(bad)).is_err(), "{bad:?}");
        }
    }
}
