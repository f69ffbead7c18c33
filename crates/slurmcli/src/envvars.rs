//! The input environment variables of every Slurm command: one table per command ([`EnvTable`]),
//! each variable standing for an option of the command's own getopt table (read exactly as
//! that option: its value checked the same way, its effect the option's), or a setting the
//! command reads itself (`SQUEUE_FORMAT`, `SLURM_TIME_FORMAT`), or set aside with the reason.
//! [`read_env`] reads a process environment (which the caller passes: this crate reads none)
//! against a table; [`unknown_variables`] checks the tables against every variable of Slurm's
//! man pages (`slurm-env.txt`, written by `scripts/slurm-options.sh`, and
//! `slurm-env-newer.txt`).

use crate::Invalid;
use crate::getopt::{Arg, Command, Effect, Given};

/// What a variable stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Means {
    /// The option with this key of the command's table: read as that option would be, with its
    /// effect (read, set aside or refused).
    Opt(&'static str),
    /// A setting the command reads itself; the text says what it does.
    Setting(&'static str),
    /// Accepted and set aside, for the reason given.
    Ignored(&'static str),
}

/// One input variable of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Var {
    /// `SQUEUE_FORMAT`, ...
    pub name: &'static str,
    /// What it stands for.
    pub means: Means,
}

impl Var {
    /// `name` stands for the option with key `key`.
    pub const fn opt(name: &'static str, key: &'static str) -> Var {
        Var { name, means: Means::Opt(key) }
    }

    /// `name` is a setting the command reads itself (`what` it does).
    pub const fn setting(name: &'static str, what: &'static str) -> Var {
        Var { name, means: Means::Setting(what) }
    }

    /// `name` is accepted and set aside (`why`).
    pub const fn ignored(name: &'static str, why: &'static str) -> Var {
        Var { name, means: Means::Ignored(why) }
    }
}

/// How a variable that stands for a flag (an option without a value) is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flags {
    /// As `sbatch`, `salloc` and `srun` (their man pages): set when empty, `yes` or a non-zero
    /// number; any other value leaves the option unset.
    Truthy,
    /// As the query commands (`getenv` alone): set whatever the value.
    Set,
}

/// A command's input variables.
#[derive(Debug)]
pub struct EnvTable {
    /// The command (its getopt table's name).
    pub command: &'static str,
    /// Its variables, in parts; where two stand for one option, the later one wins.
    pub vars: &'static [&'static [Var]],
    /// How a flag's variable is read.
    pub flags: Flags,
}

impl EnvTable {
    /// Every variable of the table.
    pub fn all(&self) -> impl Iterator<Item = &'static Var> + use<> {
        self.vars.iter().flat_map(|p| p.iter())
    }

    /// The variable `name`.
    pub fn find(&self, name: &str) -> Option<&'static Var> {
        self.all().find(|v| v.name == name)
    }
}

/// What a process environment gives a command ([`read_env`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FromEnv {
    /// The options its variables stand for, each with the variable's name, in the order to
    /// apply them (before the command line's, which so override them).
    pub opts: Vec<(&'static str, Given)>,
    /// The options set aside (their option's effect, or the variable's).
    pub ignored: Vec<(&'static str, Option<Given>)>,
    /// The settings the command reads itself: (variable, value).
    pub settings: Vec<(&'static str, String)>,
}

impl FromEnv {
    /// The value of setting `name`, if set.
    pub fn setting(&self, name: &str) -> Option<&str> {
        self.settings.iter().rev().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }
}

/// Reads the variables of `table` in `env` (`(name, value)`, later ones winning, as a process
/// environment holds one of each) as options of `cmd`. A variable for a flag counts as the
/// table's [`Flags`] say; one for an option with a value counts when its value is not empty (an
/// optional value may be empty: the option alone). A variable standing for a refused option is
/// refused, naming the variable. The values are checked by whoever applies the options (each
/// error naming the variable: see [`name_errors`]).
pub fn read_env(table: &EnvTable, cmd: &Command, env: &[(String, String)]) -> Result<FromEnv, Invalid> {
    let mut out = FromEnv::default();
    for var in table.all() {
        let Some((_, value)) = env.iter().rev().find(|(k, _)| k == var.name) else { continue };
        match var.means {
            Means::Setting(_) => {
                if !value.is_empty() {
                    out.settings.push((var.name, value.clone()));
                }
            }
            Means::Ignored(_) => out.ignored.push((var.name, None)),
            Means::Opt(key) => {
                // (A table read against another command's options skips what that one lacks.)
                let Some(opt) = cmd.find_key(key) else { continue };
                let value = match opt.arg {
                    Arg::None => match table.flags {
                        Flags::Set => None,
                        Flags::Truthy if truthy(value) => None,
                        Flags::Truthy => continue,
                    },
                    Arg::Optional if value.is_empty() => None,
                    // A flag with an optional value (`--requeue[=expedite]`, `--exclusive[=user]`)
                    // reads as a flag where the variable's value is one, is unset by a false one
                    // (`0`, `no`), and is the option's value otherwise.
                    Arg::Optional if table.flags == Flags::Truthy && truthy(value) => None,
                    Arg::Optional if table.flags == Flags::Truthy && falsy(value) => continue,
                    Arg::Required if value.is_empty() => continue,
                    _ => Some(value.clone()),
                };
                let given = Given { opt, value };
                match opt.effect {
                    Effect::Read => out.opts.push((var.name, given)),
                    Effect::Ignored(_) => out.ignored.push((var.name, Some(given))),
                    Effect::Refused(words) => return Err(Invalid::new(format!("{}: {words}", var.name))),
                }
            }
        }
    }
    Ok(out)
}

/// Whether a flag's variable says no: `no` or zero.
fn falsy(v: &str) -> bool {
    let v = v.trim();
    v.eq_ignore_ascii_case("no") || v.parse::<i64>().is_ok_and(|n| n == 0)
}

/// Whether a flag's variable sets its option, as Slurm's sbatch, salloc and srun read one: empty,
/// `yes`, or a non-zero number.
fn truthy(v: &str) -> bool {
    let v = v.trim();
    v.is_empty() || v.eq_ignore_ascii_case("yes") || v.parse::<i64>().is_ok_and(|n| n != 0)
}

/// `f` applied to each option of `from`, an error naming the variable that gave it
/// (`SBATCH_TIMELIMIT: invalid time limit "soon"`).
pub fn name_errors(from: &[(&'static str, Given)], mut f: impl FnMut(&Given) -> Result<(), Invalid>) -> Result<(), Invalid> {
    for (var, given) in from {
        f(given).map_err(|e| Invalid::new(format!("{var}: {}", e.0)))?;
    }
    Ok(())
}

/// How `SLURM_TIME_FORMAT` has the commands print a time stamp ([`TimeFormat::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TimeFormat {
    /// `YYYY-MM-DDTHH:MM:SS` (unset, empty or `standard`).
    #[default]
    Standard,
    /// `relative`: short, against today (`12:26:38`, `Ystday 20:13`, `Tomorr 03:22`, `Sat
    /// 02:17`, `18 Jun 13:14`, `19 Jan 2003`).
    Relative,
    /// A strftime(3) format.
    Strftime(String),
}

impl TimeFormat {
    /// Reads `SLURM_TIME_FORMAT`'s value as Slurm's commands do: `standard` (or empty),
    /// `relative`, or a strftime format (it must hold a `%` and be under 32 bytes, and every
    /// directive must be one strftime knows). An error names the variable, as Slurm's (which
    /// then prints the standard form).
    pub fn parse(v: &str) -> Result<TimeFormat, Invalid> {
        match v {
            "" | "standard" => Ok(TimeFormat::Standard),
            "relative" => Ok(TimeFormat::Relative),
            f if f.contains('%')
                && f.len() < 32
                && jiff::fmt::strtime::format(f, jiff::tz::Offset::UTC.to_datetime(jiff::Timestamp::UNIX_EPOCH)).is_ok() =>
            {
                Ok(TimeFormat::Strftime(f.to_string()))
            }
            f => Err(Invalid::new(format!("invalid SLURM_TIME_FORMAT = '{}'", f.escape_debug()))),
        }
    }

    /// Unix seconds `t` as this format prints it (UTC, as Tandem's commands print times), `now`
    /// being the time of the listing (for [`TimeFormat::Relative`]).
    pub fn format(&self, t: i64, now: i64) -> String {
        let Ok(ts) = jiff::Timestamp::from_second(t) else { return "Unknown".into() };
        let z = jiff::tz::Offset::UTC.to_datetime(ts);
        let fmt = match self {
            TimeFormat::Standard => "%Y-%m-%dT%H:%M:%S",
            TimeFormat::Strftime(f) => f.as_str(),
            TimeFormat::Relative => {
                // Slurm's distance in days: year * 1000 + day of the year, as its parse_time.c.
                let day = |z: &jiff::civil::DateTime| 1000 * i64::from(z.year()) + i64::from(z.day_of_year()) - 1;
                let today = jiff::Timestamp::from_second(now).map(|n| day(&jiff::tz::Offset::UTC.to_datetime(n))).unwrap_or(0);
                match day(&z) - today {
                    -1 => "Ystday %H:%M",
                    0 => "%H:%M:%S",
                    1 => "Tomorr %H:%M",
                    d if !(-365..=365).contains(&d) => "%-d %b %Y",
                    d if !(-1..=6).contains(&d) => "%-d %b %H:%M",
                    _ => "%a %H:%M",
                }
            }
        };
        jiff::fmt::strtime::format(fmt, z).unwrap_or_else(|_| "#".repeat(31))
    }
}

/// Why `SLURM_CONF` changes nothing.
const NO_CONF: &str = "there is no slurm.conf: the commands find the controller through TANDEM_SERVER";
/// Why `SLURM_DEBUG_FLAGS` changes nothing.
const NO_DEBUG_FLAGS: &str = "Slurm's debug flags name its daemons' subsystems: Tandem's logs are its own (RUST_LOG)";
/// Why `SLURM_BITSTR_LEN` changes nothing.
const BITSTR: &str = "array task ids are printed whole, whatever their length";
/// Why `SLURM_EXIT_ERROR` changes nothing.
const EXIT_ERROR: &str = "an error of the command itself exits with code 1";
/// Why `SLURM_JSON` and `SLURM_YAML` change nothing.
const SERIALIZE: &str = "--json (and sacct's --yaml) print one form, Slurm's indented one";
/// `SLURM_TIME_FORMAT`.
const TIME_FORMAT: Var =
    Var::setting("SLURM_TIME_FORMAT", "how times print: standard (YYYY-MM-DDTHH:MM:SS), relative, or a strftime format (UTC)");

/// The variables of `sbatch` and `salloc` with prefix `$p` (`SBATCH_`, `SALLOC_`), beside
/// those each has alone.
macro_rules! batch_vars {
    ($p:literal) => {
        &[
            Var::opt(concat!($p, "ACCOUNT"), "account"),
            Var::opt(concat!($p, "ACCTG_FREQ"), "acctg-freq"),
            Var::opt("SLURM_CLUSTERS", "clusters"),
            Var::opt(concat!($p, "CLUSTERS"), "clusters"),
            Var::opt(concat!($p, "CONSTRAINT"), "constraint"),
            Var::opt(concat!($p, "CONTAINER"), "container"),
            Var::opt(concat!($p, "CONTAINER_ID"), "container-id"),
            Var::opt(concat!($p, "CORE_SPEC"), "core-spec"),
            Var::opt(concat!($p, "CPUS_PER_GPU"), "cpus-per-gpu"),
            Var::opt(concat!($p, "DEBUG"), "verbose"),
            Var::opt(concat!($p, "DELAY_BOOT"), "delay-boot"),
            Var::opt(concat!($p, "EXCLUSIVE"), "exclusive"),
            Var::opt(concat!($p, "GPU_BIND"), "gpu-bind"),
            Var::opt(concat!($p, "GPU_FREQ"), "gpu-freq"),
            Var::opt(concat!($p, "GPUS"), "gpus"),
            Var::opt(concat!($p, "GPUS_PER_NODE"), "gpus-per-node"),
            Var::opt(concat!($p, "GPUS_PER_TASK"), "gpus-per-task"),
            Var::opt(concat!($p, "GRES"), "gres"),
            Var::opt(concat!($p, "GRES_FLAGS"), "gres-flags"),
            Var::opt("SLURM_HINT", "hint"),
            Var::opt(concat!($p, "HINT"), "hint"),
            Var::opt(concat!($p, "MEM_BIND"), "mem-bind"),
            Var::opt(concat!($p, "MEM_PER_CPU"), "mem-per-cpu"),
            Var::opt(concat!($p, "MEM_PER_GPU"), "mem-per-gpu"),
            Var::opt(concat!($p, "MEM_PER_NODE"), "mem"),
            Var::opt(concat!($p, "NETWORK"), "network"),
            Var::opt(concat!($p, "NO_KILL"), "no-kill"),
            Var::opt(concat!($p, "OVERCOMMIT"), "overcommit"),
            Var::opt(concat!($p, "PARTITION"), "partition"),
            Var::opt(concat!($p, "POWER"), "power"),
            Var::opt(concat!($p, "PROFILE"), "profile"),
            Var::opt(concat!($p, "QOS"), "qos"),
            Var::opt(concat!($p, "REQ_SWITCH"), "switches"),
            Var::opt(concat!($p, "RESERVATION"), "reservation"),
            Var::opt(concat!($p, "SEGMENT_SIZE"), "segment"),
            Var::opt(concat!($p, "SIGNAL"), "signal"),
            Var::opt(concat!($p, "SPREAD_JOB"), "spread-job"),
            Var::opt(concat!($p, "THREAD_SPEC"), "thread-spec"),
            Var::opt(concat!($p, "THREADS_PER_CORE"), "threads-per-core"),
            Var::opt(concat!($p, "TIMELIMIT"), "time"),
            Var::opt(concat!($p, "TRES_BIND"), "tres-bind"),
            Var::opt(concat!($p, "TRES_PER_TASK"), "tres-per-task"),
            Var::opt(concat!($p, "USE_MIN_NODES"), "use-min-nodes"),
            Var::opt(concat!($p, "WAIT_ALL_NODES"), "wait-all-nodes"),
            Var::ignored(
                concat!($p, "WAIT4SWITCH"),
                "the longest wait for --switches' count: switches are not counted here, so nothing waits",
            ),
            Var::opt(concat!($p, "WCKEY"), "wckey"),
            Var::ignored("SLURM_CONF", NO_CONF),
            Var::ignored("SLURM_DEBUG_FLAGS", NO_DEBUG_FLAGS),
            Var::ignored("SLURM_EXIT_ERROR", EXIT_ERROR),
        ]
    };
}

const SBATCH_VARS: &[Var] = batch_vars!("SBATCH_");
const SBATCH_ONLY: &[Var] = &[
    Var::opt("SBATCH_ARRAY_INX", "array"),
    Var::opt("SBATCH_BATCH", "batch"),
    Var::opt("SBATCH_DISTRIBUTION", "distribution"),
    Var::opt("SBATCH_ERROR", "error"),
    Var::opt("SBATCH_EXPORT", "export"),
    Var::opt("SBATCH_GET_USER_ENV", "get-user-env"),
    Var::opt("SBATCH_IGNORE_PBS", "ignore-pbs"),
    Var::opt("SBATCH_INPUT", "input"),
    Var::opt("SBATCH_JOB_NAME", "job-name"),
    Var::opt("SBATCH_NO_REQUEUE", "no-requeue"),
    Var::opt("SBATCH_OPEN_MODE", "open-mode"),
    Var::opt("SBATCH_OUTPUT", "output"),
    Var::opt("SBATCH_REQUEUE", "requeue"),
    Var::opt("SBATCH_WAIT", "wait"),
    Var::ignored("SLURM_STEP_KILLED_MSG_NODE_ID", "which node logs a killed step: the controller reports each end once"),
    Var::ignored("SLURM_UMASK", "output files are created by the job's own processes, under the job's own umask"),
];

const SALLOC_VARS: &[Var] = batch_vars!("SALLOC_");
const SALLOC_ONLY: &[Var] = &[
    Var::opt("SALLOC_BELL", "bell"),
    Var::opt("SALLOC_BURST_BUFFER", "bb"),
    Var::opt("SALLOC_IMMEDIATE", "immediate"),
    Var::opt("SALLOC_KILL_CMD", "kill-command"),
    Var::opt("SALLOC_NO_BELL", "no-bell"),
    Var::ignored("SLURM_EXIT_IMMEDIATE", "the exit code of --immediate's failure: salloc waits for its allocation (see --immediate)"),
];

/// Why a variable of a job's own environment is not read as a step's request.
const JOB_SHAPE: &str = "every job's environment holds it (sbatch and salloc set it), so reading it would make each step ask \
                         for the whole job: a step inside an allocation takes the job's nodes and CPUs unless srun's options say \
                         otherwise; outside one, give srun the option";

const SRUN_VARS: &[Var] = &[
    Var::ignored("PMI_FANOUT", "PMI-1's fan-out of its key-value data: srun --mpi=pmi2 answers every task itself"),
    Var::ignored("PMI_FANOUT_OFF_HOST", "PMI-1's fan-out of its key-value data: srun --mpi=pmi2 answers every task itself"),
    Var::ignored("PMI_TIME", "PMI-1's spreading of its tasks' messages: srun --mpi=pmi2 answers every task itself"),
    Var::opt("SLURM_ACCOUNT", "account"),
    Var::opt("SLURM_ACCTG_FREQ", "acctg-freq"),
    Var::opt("SLURM_BCAST", "bcast"),
    Var::opt("SLURM_BCAST_EXCLUDE", "bcast-exclude"),
    Var::opt("SLURM_BURST_BUFFER", "bb"),
    Var::opt("SLURM_CLUSTERS", "clusters"),
    Var::opt("SLURM_COMPRESS", "compress"),
    Var::ignored("SLURM_CONF", NO_CONF),
    Var::opt("SLURM_CONSTRAINT", "constraint"),
    Var::opt("SLURM_CORE_SPEC", "core-spec"),
    Var::opt("SLURM_CPU_BIND", "cpu-bind"),
    Var::opt("SLURM_CPU_FREQ_REQ", "cpu-freq"),
    Var::ignored("SLURM_CPUS_PER_GPU", JOB_SHAPE),
    Var::ignored("SLURM_CPUS_PER_TASK", JOB_SHAPE),
    Var::opt("SRUN_CPUS_PER_TASK", "cpus-per-task"),
    Var::opt("SLURM_DEBUG", "verbose"),
    Var::ignored("SLURM_DEBUG_FLAGS", NO_DEBUG_FLAGS),
    Var::opt("SLURM_DELAY_BOOT", "delay-boot"),
    Var::opt("SLURM_DEPENDENCY", "dependency"),
    Var::opt("SLURM_DISABLE_STATUS", "disable-status"),
    Var::ignored("SLURM_DIST_PLANESIZE", "the plane size of --distribution=plane: tasks are laid out block by block here"),
    Var::opt("SLURM_DISTRIBUTION", "distribution"),
    Var::opt("SLURM_EPILOG", "epilog"),
    Var::opt("SLURM_EXACT", "exact"),
    Var::opt("SLURM_EXCLUSIVE", "exclusive"),
    Var::ignored("SLURM_EXIT_ERROR", EXIT_ERROR),
    Var::ignored("SLURM_EXIT_IMMEDIATE", "the exit code of --immediate's failure: srun waits for its allocation (see --immediate)"),
    Var::opt("SLURM_EXPORT_ENV", "export"),
    Var::opt("SRUN_EXPORT_ENV", "export"),
    Var::ignored("SLURM_GPU_BIND", JOB_SHAPE),
    Var::ignored("SLURM_GPU_FREQ", JOB_SHAPE),
    Var::ignored("SLURM_GPUS", JOB_SHAPE),
    Var::ignored("SLURM_GPUS_PER_NODE", JOB_SHAPE),
    Var::ignored("SLURM_GPUS_PER_TASK", JOB_SHAPE),
    Var::opt("SLURM_GRES", "gres"),
    Var::opt("SLURM_GRES_FLAGS", "gres-flags"),
    Var::opt("SLURM_HINT", "hint"),
    Var::opt("SLURM_IMMEDIATE", "immediate"),
    Var::opt("SLURM_JOB_ID", "jobid"),
    Var::ignored(
        "SLURM_JOB_NAME",
        "the job's own name, which its environment holds: as Slurm's srun inside an allocation, a step is not named by it (give -J)",
    ),
    Var::ignored("SLURM_JOB_NUM_NODES", JOB_SHAPE),
    Var::opt("SLURM_KILL_BAD_EXIT", "kill-on-bad-exit"),
    Var::opt("SLURM_LABELIO", "label"),
    Var::opt("SLURM_MEM_BIND", "mem-bind"),
    Var::ignored("SLURM_MEM_PER_CPU", JOB_SHAPE),
    Var::ignored("SLURM_MEM_PER_GPU", JOB_SHAPE),
    Var::ignored("SLURM_MEM_PER_NODE", JOB_SHAPE),
    Var::opt("SLURM_MPI_TYPE", "mpi"),
    Var::opt("SLURM_NETWORK", "network"),
    Var::ignored("SLURM_NNODES", JOB_SHAPE),
    Var::opt("SLURM_NO_KILL", "no-kill"),
    Var::ignored("SLURM_NPROCS", JOB_SHAPE),
    Var::ignored("SLURM_NTASKS", JOB_SHAPE),
    Var::ignored("SLURM_NTASKS_PER_CORE", JOB_SHAPE),
    Var::ignored("SLURM_NTASKS_PER_GPU", JOB_SHAPE),
    Var::ignored("SLURM_NTASKS_PER_NODE", JOB_SHAPE),
    Var::ignored("SLURM_NTASKS_PER_SOCKET", JOB_SHAPE),
    Var::opt("SLURM_OOMKILLSTEP", "oom-kill-step"),
    Var::opt("SLURM_OPEN_MODE", "open-mode"),
    Var::ignored("SLURM_OVERCOMMIT", JOB_SHAPE),
    Var::opt("SLURM_OVERLAP", "overlap"),
    Var::opt("SLURM_PARTITION", "partition"),
    Var::ignored("SLURM_PMI_KVS_NO_DUP_KEYS", "PMI-1's check for duplicate keys: srun --mpi=pmi2 keeps the last value of a key"),
    Var::opt("SLURM_POWER", "power"),
    Var::ignored("SLURM_PROFILE", JOB_SHAPE),
    Var::opt("SLURM_PROLOG", "prolog"),
    Var::opt("SLURM_QOS", "qos"),
    Var::opt("SLURM_REMOTE_CWD", "chdir"),
    Var::opt("SLURM_REQ_SWITCH", "switches"),
    Var::opt("SLURM_RESERVATION", "reservation"),
    Var::opt("SLURM_RESV_PORTS", "resv-ports"),
    Var::opt("SLURM_SEND_LIBS", "send-libs"),
    Var::opt("SLURM_SIGNAL", "signal"),
    Var::opt("SLURM_SPREAD_JOB", "spread-job"),
    Var::ignored("SLURM_SRUN_REDUCE_TASK_EXIT_MSG", "srun reports a step's failed tasks in one message already"),
    Var::opt("SLURM_STDERRMODE", "error"),
    Var::opt("SLURM_STDINMODE", "input"),
    Var::opt("SLURM_STDOUTMODE", "output"),
    Var::ignored("SLURM_STEP_GRES", "a step's GPUs are those of --gpus-per-task, --gpus or --gres on srun's command line"),
    Var::ignored("SLURM_STEP_KILLED_MSG_NODE_ID", "which node logs a killed step: the controller reports each end once"),
    Var::opt("SLURM_TASK_EPILOG", "task-epilog"),
    Var::opt("SLURM_TASK_PROLOG", "task-prolog"),
    Var::ignored("SLURM_TEST_EXEC", "the program is looked up on each node when its task starts"),
    Var::opt("SLURM_THREAD_SPEC", "thread-spec"),
    Var::opt("SLURM_THREADS", "threads"),
    Var::ignored("SLURM_THREADS_PER_CORE", JOB_SHAPE),
    Var::opt("SLURM_TIMELIMIT", "time"),
    Var::opt("SLURM_TRES_BIND", "tres-bind"),
    Var::ignored("SLURM_TRES_PER_TASK", JOB_SHAPE),
    Var::ignored("SLURM_UMASK", "output files are created by the step's own processes, under their own umask"),
    Var::opt("SLURM_UNBUFFEREDIO", "unbuffered"),
    Var::opt("SLURM_USE_MIN_NODES", "use-min-nodes"),
    Var::opt("SLURM_WAIT", "wait"),
    Var::ignored("SLURM_WAIT4SWITCH", "the longest wait for --switches' count: switches are not counted here, so nothing waits"),
    Var::opt("SLURM_WCKEY", "wckey"),
    Var::opt("SLURM_WORKING_DIR", "chdir"),
    Var::opt("SLURMD_DEBUG", "slurmd-debug"),
    Var::opt("SRUN_CONTAINER", "container"),
    Var::opt("SRUN_CONTAINER_ID", "container-id"),
    Var::opt("SRUN_ERROR", "error"),
    Var::opt("SRUN_INPUT", "input"),
    Var::opt("SRUN_OUTPUT", "output"),
    Var::opt("SRUN_SEGMENT_SIZE", "segment"),
];

const SQUEUE_VARS: &[Var] = &[
    Var::ignored("SLURM_BITSTR_LEN", BITSTR),
    Var::opt("SLURM_CLUSTERS", "clusters"),
    Var::ignored("SLURM_CONF", NO_CONF),
    Var::ignored("SLURM_DEBUG_FLAGS", NO_DEBUG_FLAGS),
    Var::ignored("SLURM_JSON", SERIALIZE),
    TIME_FORMAT,
    Var::ignored("SLURM_YAML", SERIALIZE),
    Var::opt("SQUEUE_ACCOUNT", "account"),
    Var::opt("SQUEUE_ALL", "all"),
    Var::opt("SQUEUE_ARRAY", "array"),
    Var::opt("SQUEUE_NAMES", "name"),
    Var::opt("SQUEUE_FEDERATION", "federation"),
    Var::setting("SQUEUE_FORMAT", "the -o format when none of -o, -O, -l or --start is given"),
    Var::setting("SQUEUE_FORMAT2", "the -O format when none of -o, -O, -l, --start or SQUEUE_FORMAT is given"),
    Var::opt("SQUEUE_LICENSES", "licenses"),
    Var::opt("SQUEUE_LOCAL", "local"),
    Var::opt("SQUEUE_PARTITION", "partition"),
    Var::opt("SQUEUE_PRIORITY", "priority"),
    Var::opt("SQUEUE_QOS", "qos"),
    Var::opt("SQUEUE_SIBLING", "sibling"),
    Var::opt("SQUEUE_SORT", "sort"),
    Var::opt("SQUEUE_STATES", "states"),
    Var::opt("SQUEUE_USERS", "user"),
];

const SINFO_VARS: &[Var] = &[
    Var::opt("SINFO_ALL", "all"),
    Var::opt("SINFO_FEDERATION", "federation"),
    Var::setting("SINFO_FORMAT", "the -o format when neither -o nor -O is given"),
    Var::opt("SINFO_FUTURE", "future"),
    Var::ignored("SCONTROL_FUTURE", "sinfo reads SINFO_FUTURE (Slurm's sinfo page prints SCONTROL_FUTURE by mistake)"),
    Var::opt("SINFO_LOCAL", "local"),
    Var::opt("SINFO_PARTITION", "partition"),
    Var::opt("SINFO_SORT", "sort"),
    Var::opt("SLURM_CLUSTERS", "clusters"),
    Var::ignored("SLURM_CONF", NO_CONF),
    Var::ignored("SLURM_DEBUG_FLAGS", NO_DEBUG_FLAGS),
    Var::ignored("SLURM_JSON", SERIALIZE),
    TIME_FORMAT,
    Var::ignored("SLURM_YAML", SERIALIZE),
];

const SACCT_VARS: &[Var] = &[
    Var::opt("SACCT_FEDERATION", "federation"),
    Var::setting("SACCT_FORMAT", "the --format fields when none of --format, --brief and --long is given"),
    Var::opt("SACCT_LOCAL", "local"),
    Var::ignored("SLURM_BITSTR_LEN", BITSTR),
    Var::ignored("SLURM_CONF", NO_CONF),
    Var::ignored("SLURM_DEBUG_FLAGS", NO_DEBUG_FLAGS),
    Var::ignored("SLURM_JSON", SERIALIZE),
    TIME_FORMAT,
    Var::ignored("SLURM_YAML", SERIALIZE),
];

const SCANCEL_VARS: &[Var] = &[
    Var::opt("SCANCEL_ACCOUNT", "account"),
    Var::opt("SCANCEL_BATCH", "batch"),
    Var::opt("SCANCEL_CRON", "cron"),
    Var::opt("SCANCEL_CTLD", "ctld"),
    Var::opt("SCANCEL_FULL", "full"),
    Var::opt("SCANCEL_HURRY", "hurry"),
    Var::opt("SCANCEL_INTERACTIVE", "interactive"),
    Var::opt("SCANCEL_NAME", "jobname"),
    Var::opt("SCANCEL_PARTITION", "partition"),
    Var::opt("SCANCEL_QOS", "qos"),
    Var::opt("SCANCEL_STATE", "state"),
    Var::opt("SCANCEL_USER", "user"),
    Var::opt("SCANCEL_VERBOSE", "verbose"),
    Var::opt("SCANCEL_WCKEY", "wckey"),
    Var::ignored("SLURM_CONF", NO_CONF),
    Var::opt("SLURM_CLUSTERS", "clusters"),
    Var::ignored("SLURM_DEBUG_FLAGS", NO_DEBUG_FLAGS),
];

const SCONTROL_VARS: &[Var] = &[
    Var::opt("SCONTROL_ALL", "all"),
    Var::opt("SCONTROL_FEDERATION", "federation"),
    Var::opt("SCONTROL_FUTURE", "future"),
    Var::opt("SCONTROL_LOCAL", "local"),
    Var::opt("SCONTROL_SIBLING", "sibling"),
    Var::ignored("SLURM_BITSTR_LEN", BITSTR),
    Var::opt("SLURM_CLUSTERS", "clusters"),
    Var::ignored("SLURM_CONF", NO_CONF),
    Var::ignored("SLURM_CONF_OUT", "where 'scontrol write config' writes: there is no slurm.conf to write"),
    Var::ignored("SLURM_DEBUG_FLAGS", NO_DEBUG_FLAGS),
    Var::ignored("SLURM_JSON", SERIALIZE),
    TIME_FORMAT,
    Var::ignored("SLURM_TOPO_LEN", "the line length of 'show topology': there is no topology to show"),
    Var::ignored("SLURM_YAML", SERIALIZE),
];

const SPRIO_VARS: &[Var] = &[
    Var::opt("SLURM_CLUSTERS", "clusters"),
    Var::ignored("SLURM_CONF", NO_CONF),
    Var::ignored("SLURM_DEBUG_FLAGS", NO_DEBUG_FLAGS),
    Var::opt("SPRIO_FEDERATION", "federation"),
    Var::opt("SPRIO_FORMAT", "format"),
    Var::opt("SPRIO_LOCAL", "local"),
    Var::opt("SPRIO_SIBLING", "sibling"),
];

const SSHARE_VARS: &[Var] = &[
    Var::ignored("SLURM_CONF", NO_CONF),
    Var::ignored("SLURM_DEBUG_FLAGS", NO_DEBUG_FLAGS),
    Var::ignored("SLURM_JSON", SERIALIZE),
    Var::ignored("SLURM_YAML", SERIALIZE),
];

const SREPORT_VARS: &[Var] = &[
    Var::opt("SREPORT_CLUSTER", "clusters"),
    Var::opt("SREPORT_FEDERATION", "federation"),
    Var::opt("SREPORT_LOCAL", "local"),
    Var::opt("SREPORT_TRES", "tres"),
    Var::ignored("SLURM_CONF", NO_CONF),
];

const SSTAT_VARS: &[Var] = &[Var::ignored("SLURM_CONF", NO_CONF), Var::ignored("SLURM_DEBUG_FLAGS", NO_DEBUG_FLAGS)];

const SBCAST_VARS: &[Var] = &[
    Var::opt("SBCAST_COMPRESS", "compress"),
    Var::opt("SBCAST_EXCLUDE", "exclude"),
    Var::opt("SBCAST_FANOUT", "fanout"),
    Var::opt("SBCAST_FORCE", "force"),
    Var::opt("SBCAST_SEND_LIBS", "send-libs"),
    Var::opt("SBCAST_PRESERVE", "preserve"),
    Var::opt("SBCAST_SIZE", "size"),
    Var::opt("SBCAST_TIMEOUT", "timeout"),
    // Not in the man page's list, but read by Slurm's sbcast (src/sbcast/opts.c): the allocation.
    Var::opt("SLURM_JOB_ID", "jobid"),
    Var::ignored("SLURM_CONF", NO_CONF),
    Var::ignored("SLURM_DEBUG_FLAGS", NO_DEBUG_FLAGS),
];

const SATTACH_VARS: &[Var] =
    &[Var::ignored("SLURM_CONF", NO_CONF), Var::ignored("SLURM_DEBUG_FLAGS", NO_DEBUG_FLAGS), Var::ignored("SLURM_EXIT_ERROR", EXIT_ERROR)];

/// `sbatch`'s input variables.
pub const SBATCH_ENV: EnvTable = EnvTable { command: "sbatch", vars: &[SBATCH_VARS, SBATCH_ONLY], flags: Flags::Truthy };
/// `salloc`'s (and those of the allocation `salloc` makes).
pub const SALLOC_ENV: EnvTable = EnvTable { command: "salloc", vars: &[SALLOC_VARS, SALLOC_ONLY], flags: Flags::Truthy };
/// `srun`'s.
pub const SRUN_ENV: EnvTable = EnvTable { command: "srun", vars: &[SRUN_VARS], flags: Flags::Truthy };

/// Every command's table of input variables.
pub const ENV_TABLES: [&EnvTable; 14] = [
    &SBATCH_ENV,
    &SRUN_ENV,
    &SALLOC_ENV,
    &EnvTable { command: "squeue", vars: &[SQUEUE_VARS], flags: Flags::Set },
    &EnvTable { command: "sinfo", vars: &[SINFO_VARS], flags: Flags::Set },
    &EnvTable { command: "sacct", vars: &[SACCT_VARS], flags: Flags::Set },
    &EnvTable { command: "scancel", vars: &[SCANCEL_VARS], flags: Flags::Set },
    &EnvTable { command: "scontrol", vars: &[SCONTROL_VARS], flags: Flags::Set },
    &EnvTable { command: "sprio", vars: &[SPRIO_VARS], flags: Flags::Set },
    &EnvTable { command: "sshare", vars: &[SSHARE_VARS], flags: Flags::Set },
    &EnvTable { command: "sreport", vars: &[SREPORT_VARS], flags: Flags::Set },
    &EnvTable { command: "sstat", vars: &[SSTAT_VARS], flags: Flags::Set },
    &EnvTable { command: "sbcast", vars: &[SBCAST_VARS], flags: Flags::Set },
    &EnvTable { command: "sattach", vars: &[SATTACH_VARS], flags: Flags::Set },
];

/// The input variables of the Slurm command `name`.
pub fn env_table(name: &str) -> Option<&'static EnvTable> {
    ENV_TABLES.iter().copied().find(|t| t.command == name)
}

/// Every input variable of Slurm's man pages for the commands Tandem ships
/// (`scripts/slurm-options.sh` writes the first from Debian's slurm-client), then those added
/// since, by hand with their sources: `command variable option` rows, tab-separated.
pub const SLURM_ENV: [&str; 2] = [include_str!("../slurm-env.txt"), include_str!("../slurm-env-newer.txt")];

/// The variables of [`SLURM_ENV`] that a command Tandem ships does not know (`command
/// VARIABLE`), and those its table maps to another option than the man page names. Empty:
/// every one is read, or set aside with a stated effect.
pub fn unknown_variables() -> Vec<String> {
    let mut out = Vec::new();
    for line in SLURM_ENV.iter().flat_map(|f| f.lines()).filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        let [cmd, var, page_opt, ..] = f[..] else {
            out.push(format!("malformed row {line:?}"));
            continue;
        };
        let (Some(t), Some(c)) = (env_table(cmd), crate::command(cmd)) else { continue };
        match t.find(var).map(|v| v.means) {
            None => out.push(format!("{cmd} {var}")),
            // Where the page names an option the command knows, the variable stands for it.
            Some(Means::Opt(key)) => {
                if let Some(o) = c.find_long(page_opt)
                    && o.key != key
                {
                    out.push(format!("{cmd} {var}: the man page says --{page_opt}, the table --{key}"));
                }
            }
            Some(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(kv: &[(&str, &str)]) -> Vec<(String, String)> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn every_input_variable_of_slurms_man_pages_is_known() {
        let unknown = unknown_variables();
        assert!(
            unknown.is_empty(),
            "{} input variables of Slurm's are unknown (add them to the command's table in envvars.rs: an option, a setting, or ignored(why)):\n{}",
            unknown.len(),
            unknown.join("\n")
        );
        for t in ENV_TABLES {
            assert!(SLURM_ENV[0].lines().any(|l| l.starts_with(&format!("{}\t", t.command))), "{} has no variables in the list", t.command);
            let c = crate::command(t.command).expect("a table per command");
            let mut seen = std::collections::HashSet::new();
            for v in t.all() {
                assert!(seen.insert(v.name), "{}: {} twice", t.command, v.name);
                if let Means::Opt(key) = v.means {
                    assert!(c.find_key(key).is_some(), "{}: {} stands for --{key}, which it has not", t.command, v.name);
                }
            }
        }
    }

    #[test]
    fn flags_count_as_slurms_pages_say() {
        let t = &SBATCH_ENV;
        let on = |v: &str| read_env(t, &crate::options::SBATCH, &env(&[("SBATCH_REQUEUE", v)])).unwrap().opts.len() == 1;
        assert!(on("") && on("yes") && on("1") && on("7"));
        assert!(!on("0") && !on("no"), "a false value leaves the option unset");
        // --requeue takes a value too (Slurm 25.11's `expedite`): any other word is its value,
        // which the option then checks.
        let r = read_env(t, &crate::options::SBATCH, &env(&[("SBATCH_REQUEUE", "expedite")])).unwrap();
        assert_eq!(r.opts[0].1.value.as_deref(), Some("expedite"));
        let r = read_env(t, &crate::options::SBATCH, &env(&[("SBATCH_REQUEUE", "yes")])).unwrap();
        assert_eq!(r.opts[0].1.value, None);
        // An optional value may be empty; a required one empty counts as unset.
        let r = read_env(t, &crate::options::SBATCH, &env(&[("SBATCH_EXCLUSIVE", ""), ("SBATCH_PARTITION", "")])).unwrap();
        assert_eq!(r.opts.iter().map(|(v, g)| (*v, g.value.clone())).collect::<Vec<_>>(), vec![("SBATCH_EXCLUSIVE", None)]);
        // The query commands set a flag whatever its value (getenv alone).
        let squeue = env_table("squeue").unwrap();
        let r = read_env(squeue, crate::command("squeue").unwrap(), &env(&[("SQUEUE_ALL", "no")])).unwrap();
        assert_eq!(r.opts[0].1.key(), "all");
    }

    #[test]
    fn variables_follow_their_options_effect() {
        let e = env(&[("SBATCH_ACCTG_FREQ", "30"), ("SBATCH_TIMELIMIT", "5"), ("SLURM_CONF", "/etc/slurm.conf")]);
        let r = read_env(&SBATCH_ENV, &crate::options::SBATCH, &e).unwrap();
        assert_eq!(r.opts.len(), 1);
        assert_eq!((r.opts[0].0, r.opts[0].1.key(), r.opts[0].1.value()), ("SBATCH_TIMELIMIT", "time", "5"));
        assert_eq!(r.ignored.iter().map(|(v, _)| *v).collect::<Vec<_>>(), vec!["SBATCH_ACCTG_FREQ", "SLURM_CONF"]);
        // A refused option's variable is refused, naming it.
        let err = read_env(&SBATCH_ENV, &crate::options::SBATCH, &env(&[("SBATCH_CONTAINER", "/img")])).unwrap_err().0;
        assert!(err.starts_with("SBATCH_CONTAINER: --container"), "{err}");
        // Settings are the command's own; later entries of the environment win.
        let squeue = env_table("squeue").unwrap();
        let r = read_env(squeue, crate::command("squeue").unwrap(), &env(&[("SQUEUE_FORMAT", "%i"), ("SQUEUE_FORMAT", "%j %i")])).unwrap();
        assert_eq!(r.setting("SQUEUE_FORMAT"), Some("%j %i"));
        assert_eq!(r.setting("SQUEUE_FORMAT2"), None);
        // Hostile values are only values: the option's own check refuses them later.
        let r = read_env(squeue, crate::command("squeue").unwrap(), &env(&[("SQUEUE_USERS", "a\u{0}b\n--all")])).unwrap();
        assert_eq!(r.opts[0].1.value(), "a\u{0}b\n--all");
        let named = name_errors(&r.opts, |g| Err(Invalid::new(format!("bad {}", g.value().len()))));
        assert_eq!(named.unwrap_err().0, "SQUEUE_USERS: bad 9");
    }

    #[test]
    fn slurm_time_format_as_slurms_parse_time() {
        let day = 1_796_083_200; // 2026-12-01T00:00:00, a Tuesday
        let now = day + 12 * 3600;
        assert_eq!(TimeFormat::parse("").unwrap(), TimeFormat::Standard);
        assert_eq!(TimeFormat::parse("standard").unwrap().format(day + 3661, now), "2026-12-01T01:01:01");
        let r = TimeFormat::parse("relative").unwrap();
        assert_eq!(r.format(day + 3661, now), "01:01:01");
        assert_eq!(r.format(day - 3600, now), "Ystday 23:00");
        assert_eq!(r.format(day + 86400 + 60, now), "Tomorr 00:01");
        assert_eq!(r.format(day + 3 * 86400, now), "Fri 00:00");
        assert_eq!(r.format(day - 5 * 86400 + 600, now), "26 Nov 00:10");
        assert_eq!(r.format(day - 400 * 86400, now), "27 Oct 2025");
        assert_eq!(TimeFormat::parse("%a %T").unwrap().format(day + 3661, now), "Tue 01:01:01");
        for bad in ["yesterday", "%Q%Q", "%Y-%m-%d %H:%M:%S and then some more"] {
            let err = TimeFormat::parse(bad).unwrap_err().0;
            assert!(err.starts_with("invalid SLURM_TIME_FORMAT = '"), "{bad}: {err}");
        }
    }
}
