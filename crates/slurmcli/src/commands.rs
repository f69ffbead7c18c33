//! The option tables of the query and helper commands (`squeue`, `sinfo`, `sacct`, `scancel`,
//! `scontrol`, `sprio`, `sshare`, `sreport`, `sstat`, `sbcast`, `sattach`, `sacctmgr`); `sbatch`'s, `salloc`'s
//! and `srun`'s live beside their parsers. [`command`] finds any of them by the command's name,
//! for the one parser ([`crate::getopt`]). Long names and letters are Slurm's man pages'; the
//! spellings Slurm's sources also accept (`--users`, `--accounts`) are aliases.

use crate::getopt::{Arg, Command, Opt, Order};
use crate::options::{SALLOC, SBATCH};
use crate::srun::SRUN;

/// The options every query command has: `-v`, `-V`, `--usage`.
const BASIC: &[Opt] = &[Opt::both('v', "verbose", Arg::None), Opt::both('V', "version", Arg::None), Opt::long("usage", Arg::None)];

/// `-M`/`--clusters` (the command checks that it names this cluster, or `all`) and the
/// query commands' `-v`, `-V`, `--usage`.
const COMMON: &[Opt] = &[
    Opt::both('M', "clusters", Arg::Required),
    Opt::alias("cluster", "clusters", Arg::Required),
    Opt::both('v', "verbose", Arg::None),
    Opt::both('V', "version", Arg::None),
    Opt::long("usage", Arg::None),
];

/// Accepted by the commands that have them, with no effect on a cluster of one (there is no
/// federation).
const ONE_CLUSTER: &[Opt] = &[Opt::long("federation", Arg::None), Opt::long("local", Arg::None), Opt::long("sibling", Arg::None)];

const SQUEUE_OPTS: &[Opt] = &[
    Opt::both('A', "account", Arg::Required),
    Opt::alias("accounts", "account", Arg::Required),
    Opt::both('a', "all", Arg::None),
    Opt::both('r', "array", Arg::None),
    Opt::long("array-unique", Arg::None),
    Opt::both('o', "format", Arg::Required),
    Opt::both('O', "Format", Arg::Required),
    Opt::long("help", Arg::None),
    Opt::long("hide", Arg::None),
    Opt::both('i', "iterate", Arg::Required),
    // Optional, as Slurm's: `-j12`, or `-j 12` with the list as the next word.
    Opt::both('j', "jobs", Arg::Optional),
    Opt::long("json", Arg::None),
    Opt::both('l', "long", Arg::None),
    Opt::long("me", Arg::None),
    // Slurm 24.05 and 25.11 (slurm-options-newer.txt).
    Opt::long("notme", Arg::None),
    Opt::long("running-over", Arg::Required),
    Opt::long("running-under", Arg::Required),
    Opt::long("expand-patterns", Arg::None).ignored("standard output and error paths are always shown with their patterns expanded"),
    Opt::long("only-job-state", Arg::None).ignored("the listing is read from the controller in pieces whatever the columns"),
    // A filter over what this cluster has none of: it matches no job.
    Opt::both('L', "licenses", Arg::Required),
    Opt::both('n', "name", Arg::Required),
    Opt::long("noconvert", Arg::None),
    Opt::both('w', "nodelist", Arg::Required),
    Opt::alias("nodes", "nodelist", Arg::Required),
    Opt::both('h', "noheader", Arg::None),
    Opt::both('p', "partition", Arg::Required),
    Opt::alias("partitions", "partition", Arg::Required),
    Opt::both('q', "qos", Arg::Required),
    Opt::both('P', "priority", Arg::None)
        .ignored("a job is submitted to one partition here, so each pending job is listed once, as -P would"),
    // A filter over what this cluster has none of: it matches no job.
    Opt::both('R', "reservation", Arg::Required),
    Opt::both('S', "sort", Arg::Required),
    Opt::long("start", Arg::None),
    // Optional, as Slurm's: `-s12.0`, or `-s` alone for every step.
    Opt::both('s', "steps", Arg::Optional),
    Opt::both('t', "states", Arg::Required),
    Opt::alias("state", "states", Arg::Required),
    Opt::both('u', "user", Arg::Required),
    Opt::alias("users", "user", Arg::Required),
];

const SINFO_OPTS: &[Opt] = &[
    // Slurm 23.02 (slurm-options-newer.txt).
    Opt::both('F', "future", Arg::None).ignored("no node is in the FUTURE state here: nodes join when their agent does"),
    Opt::both('a', "all", Arg::None),
    Opt::both('d', "dead", Arg::None),
    Opt::both('e', "exact", Arg::None),
    Opt::both('o', "format", Arg::Required),
    Opt::both('O', "Format", Arg::Required),
    Opt::long("help", Arg::None),
    Opt::long("hide", Arg::None),
    Opt::long("json", Arg::None),
    Opt::both('R', "list-reasons", Arg::None),
    Opt::both('i', "iterate", Arg::Required),
    Opt::both('n', "nodes", Arg::Required),
    Opt::both('r', "responding", Arg::None),
    Opt::both('S', "sort", Arg::Required),
    Opt::both('t', "states", Arg::Required),
    Opt::alias("state", "states", Arg::Required),
    // Lists the advance reservations.
    Opt::both('T', "reservation", Arg::None),
    Opt::both('l', "long", Arg::None),
    Opt::long("noconvert", Arg::None),
    Opt::both('N', "Node", Arg::None),
    Opt::both('h', "noheader", Arg::None),
    Opt::both('p', "partition", Arg::Required),
    Opt::both('s', "summarize", Arg::None),
];

const SACCT_OPTS: &[Opt] = &[
    // Slurm 23.02 and 24.05 (slurm-options-newer.txt).
    Opt::long("array", Arg::None).ignored("array tasks are always listed one per line"),
    Opt::long("expand-patterns", Arg::None).ignored("StdOut and StdErr are always shown with their patterns expanded"),
    Opt::both('A', "accounts", Arg::Required),
    Opt::alias("account", "accounts", Arg::Required),
    Opt::both('L', "allclusters", Arg::None),
    Opt::both('X', "allocations", Arg::None),
    Opt::both('a', "allusers", Arg::None),
    Opt::both('b', "brief", Arg::None),
    Opt::both('B', "batch-script", Arg::None)
        .refused("--batch-script: job scripts are not stored in accounting on this cluster (AccountingStoreFlags has no job_script)"),
    Opt::both('c', "completion", Arg::None)
        .refused("--completion: no job completion plugin is configured on this cluster (JobCompType=jobcomp/none)"),
    Opt::both('C', "constraints", Arg::Required),
    Opt::long("env-vars", Arg::None)
        .refused("--env-vars: job environments are not stored in accounting on this cluster (AccountingStoreFlags has no job_env)"),
    Opt::both('f', "file", Arg::Required).refused(
        "--file: this cluster keeps no job completion files to read (JobCompType=jobcomp/none); its accounting is read from the controller",
    ),
    Opt::both('F', "flags", Arg::Required)
        .refused("--flags: the scheduler that started each job (SchedSubmit, SchedMain, SchedBackfill) is not recorded on this cluster"),
    Opt::both('g', "gid", Arg::Required),
    Opt::alias("group", "gid", Arg::Required),
    Opt::both('i', "nnodes", Arg::Required),
    Opt::both('I', "ncpus", Arg::Required),
    Opt::both('K', "timelimit-max", Arg::Required),
    Opt::both('k', "timelimit-min", Arg::Required),
    Opt::both('N', "nodelist", Arg::Required),
    Opt::both('q', "qos", Arg::Required),
    Opt::both('R', "reason", Arg::Required),
    Opt::both('T', "truncate", Arg::None),
    Opt::long("use-local-uid", Arg::None).ignored("every node shares the controller's users, so the uid recorded is the local one"),
    Opt::both('W', "wckeys", Arg::Required),
    Opt::long("whole-hetjob", Arg::Optional),
    // There are no association ids here: the filter matches no job.
    Opt::both('x', "associations", Arg::Required),
    Opt::long("yaml", Arg::None),
    Opt::long("delimiter", Arg::Required),
    Opt::both('D', "duplicates", Arg::None),
    Opt::both('E', "endtime", Arg::Required),
    Opt::both('o', "format", Arg::Required),
    Opt::alias("fields", "format", Arg::Required),
    Opt::both('h', "help", Arg::None),
    Opt::both('e', "helpformat", Arg::None),
    Opt::both('j', "jobs", Arg::Required),
    Opt::long("json", Arg::None),
    Opt::both('l', "long", Arg::None),
    Opt::long("name", Arg::Required),
    Opt::long("noconvert", Arg::None),
    Opt::both('n', "noheader", Arg::None),
    Opt::both('p', "parsable", Arg::None),
    Opt::both('P', "parsable2", Arg::None),
    Opt::both('r', "partition", Arg::Required),
    Opt::both('S', "starttime", Arg::Required),
    Opt::both('s', "state", Arg::Required),
    Opt::both('u', "uid", Arg::Required),
    Opt::alias("user", "uid", Arg::Required),
    Opt::long("units", Arg::Required),
];

const SCANCEL_OPTS: &[Opt] = &[
    Opt::both('A', "account", Arg::Required),
    Opt::both('b', "batch", Arg::None),
    Opt::long("ctld", Arg::None).ignored("signals always go through the controller here"),
    Opt::both('f', "full", Arg::None).ignored("a job's signal already reaches its batch shell, the shell's children and every step here"),
    Opt::both('H', "hurry", Arg::None).ignored("there are no burst buffers here: nothing is staged out"),
    Opt::both('i', "interactive", Arg::None),
    Opt::long("help", Arg::None),
    Opt::both('n', "jobname", Arg::Required),
    Opt::alias("name", "jobname", Arg::Required),
    Opt::long("me", Arg::None),
    // Slurm 23.11 and 25.11 (slurm-options-newer.txt).
    Opt::both('c', "cron", Arg::None).ignored("there are no scrontab jobs to protect from scancel"),
    Opt::long("admin-comment", Arg::Required).ignored("administrators' comments are not kept on jobs"),
    Opt::both('p', "partition", Arg::Required),
    Opt::both('Q', "quiet", Arg::None),
    Opt::both('q', "qos", Arg::Required),
    // Jobs in this advance reservation.
    Opt::both('R', "reservation", Arg::Required),
    Opt::both('s', "signal", Arg::Required),
    Opt::both('t', "state", Arg::Required),
    Opt::both('u', "user", Arg::Required),
    Opt::both('w', "nodelist", Arg::Required),
    Opt::long("wckey", Arg::Required),
];

const SCONTROL_OPTS: &[Opt] = &[
    Opt::both('a', "all", Arg::None),
    Opt::both('d', "details", Arg::None),
    Opt::both('h', "help", Arg::None),
    Opt::both('F', "future", Arg::None).ignored("no node is in the FUTURE state here: every node is shown"),
    Opt::long("hide", Arg::None).ignored("no partition is hidden here: every partition is shown"),
    Opt::long("json", Arg::None),
    Opt::both('o', "oneliner", Arg::None),
    Opt::both('Q', "quiet", Arg::None),
    Opt::both('u', "uid", Arg::Required)
        .refused("--uid: acting as another user is not available here: run scontrol as that user (or as root)"),
];

const SPRIO_OPTS: &[Opt] = &[
    Opt::both('o', "format", Arg::Required),
    Opt::long("help", Arg::None),
    Opt::both('j', "jobs", Arg::Required),
    Opt::both('l', "long", Arg::None),
    Opt::both('n', "norm", Arg::None)
        .refused("--norm: this controller does not publish its priority weights, so the factors are shown weighted only"),
    Opt::both('h', "noheader", Arg::None),
    Opt::both('p', "partition", Arg::Required),
    Opt::both('S', "sort", Arg::Required),
    Opt::both('u', "user", Arg::Required),
    Opt::both('w', "weights", Arg::None)
        .refused("--weights: this controller does not publish its priority weights (see tandem.toml's [sched] policy)"),
];

const SSHARE_OPTS: &[Opt] = &[
    Opt::both('A', "accounts", Arg::Required),
    Opt::both('a', "all", Arg::None),
    Opt::long("help", Arg::None),
    Opt::both('l', "long", Arg::None),
    Opt::both('n', "noheader", Arg::None),
    Opt::short('h', "noheader", Arg::None),
    Opt::both('o', "format", Arg::Required),
    Opt::both('m', "partition", Arg::None)
        .ignored("usage is kept per account here, not per partition: there is no partition column to add"),
    Opt::both('p', "parsable", Arg::None),
    Opt::both('P', "parsable2", Arg::None),
    Opt::both('u', "users", Arg::Required),
    Opt::both('U', "Users", Arg::None),
];

const SREPORT_OPTS: &[Opt] = &[
    Opt::both('a', "all_clusters", Arg::None),
    Opt::both('h', "help", Arg::None),
    Opt::both('n', "noheader", Arg::None),
    Opt::both('p', "parsable", Arg::None),
    Opt::both('P', "parsable2", Arg::None),
    Opt::both('Q', "quiet", Arg::None),
    Opt::short('t', "time-format", Arg::Required),
    Opt::both('T', "tres", Arg::Required),
];

const SSTAT_OPTS: &[Opt] = &[
    Opt::both('a', "allsteps", Arg::None),
    Opt::both('o', "format", Arg::Required),
    Opt::alias("fields", "format", Arg::Required),
    Opt::both('h', "help", Arg::None),
    Opt::both('e', "helpformat", Arg::None),
    Opt::both('j', "jobs", Arg::Required),
    Opt::both('i', "pidformat", Arg::None).refused("--pidformat: the agents of this cluster do not report their tasks' process ids"),
    Opt::long("noconvert", Arg::None),
    Opt::both('n', "noheader", Arg::None),
    Opt::both('p', "parsable", Arg::None),
    Opt::both('P', "parsable2", Arg::None),
];

const SBCAST_OPTS: &[Opt] = &[
    Opt::both('C', "compress", Arg::Optional),
    Opt::long("exclude", Arg::Required).ignored("only with --send-libs, which sends no libraries here"),
    Opt::both('F', "fanout", Arg::Required)
        .ignored("the file goes to every node at once over the step's own connections: there is no tree to fan out"),
    // Slurm 23.11's name for -F; 24.11's copy outside an allocation (root's, with -w).
    Opt::alias("treewidth", "fanout", Arg::Required)
        .ignored("the file goes to every node at once over the step's own connections: there is no tree to fan out"),
    Opt::both('Z', "no-allocation", Arg::None).refused("--no-allocation: sbcast copies files to the nodes of an allocation only"),
    Opt::both('w', "nodelist", Arg::Required).refused("--nodelist: sbcast copies files to every node of its allocation"),
    Opt::long("send-libs", Arg::Optional),
    Opt::both('s', "size", Arg::Required).ignored("the file is streamed whole: there is no block size to set"),
    Opt::both('t', "timeout", Arg::Required).ignored("the copy is one step, which waits for every node's answer"),
    Opt::both('f', "force", Arg::None),
    Opt::long("help", Arg::None),
    Opt::both('j', "jobid", Arg::Required),
    Opt::both('p', "preserve", Arg::None),
];

const SATTACH_OPTS: &[Opt] = &[
    Opt::long("error-filter", Arg::Required),
    Opt::both('h', "help", Arg::None),
    Opt::long("input-filter", Arg::Required),
    Opt::both('l', "label", Arg::None),
    Opt::long("layout", Arg::None),
    Opt::long("output-filter", Arg::Required),
    Opt::long("pty", Arg::None),
    Opt::both('Q', "quiet", Arg::None),
    Opt::both('u', "usage", Arg::None),
    Opt::both('v', "verbose", Arg::None),
    Opt::both('V', "version", Arg::None),
];

const SACCTMGR_OPTS: &[Opt] = &[
    Opt::both('h', "help", Arg::None),
    Opt::both('i', "immediate", Arg::None),
    Opt::both('n', "noheader", Arg::None),
    Opt::both('p', "parsable", Arg::None),
    Opt::both('P', "parsable2", Arg::None),
    Opt::both('Q', "quiet", Arg::None),
    Opt::both('r', "readonly", Arg::None),
    Opt::both('s', "associations", Arg::None),
    Opt::long("json", Arg::None).refused("--json: sacctmgr prints its tables here; the same objects are at GET /v1/accounting as JSON"),
    Opt::long("yaml", Arg::None).refused("--yaml: sacctmgr prints its tables here; the same objects are at GET /v1/accounting as JSON"),
];

/// `sacctmgr` (its words after the options are read by [`crate::sacctmgr::parse`]).
pub const SACCTMGR: Command = Command { name: "sacctmgr", opts: &[SACCTMGR_OPTS, BASIC], order: Order::Permute, underscores: false };

/// `squeue`.
pub const SQUEUE: Command =
    Command { name: "squeue", opts: &[SQUEUE_OPTS, COMMON, ONE_CLUSTER], order: Order::Permute, underscores: false };
/// `sinfo`.
pub const SINFO: Command = Command { name: "sinfo", opts: &[SINFO_OPTS, COMMON, ONE_CLUSTER], order: Order::Permute, underscores: false };
/// `sacct`.
pub const SACCT: Command = Command { name: "sacct", opts: &[SACCT_OPTS, COMMON, ONE_CLUSTER], order: Order::Permute, underscores: false };
/// `scancel`.
pub const SCANCEL: Command =
    Command { name: "scancel", opts: &[SCANCEL_OPTS, COMMON, ONE_CLUSTER], order: Order::Permute, underscores: false };
/// `scontrol`.
pub const SCONTROL: Command =
    Command { name: "scontrol", opts: &[SCONTROL_OPTS, COMMON, ONE_CLUSTER], order: Order::Permute, underscores: false };
/// `sprio`.
pub const SPRIO: Command = Command { name: "sprio", opts: &[SPRIO_OPTS, COMMON, ONE_CLUSTER], order: Order::Permute, underscores: false };
/// `sshare`.
pub const SSHARE: Command = Command { name: "sshare", opts: &[SSHARE_OPTS, COMMON], order: Order::Permute, underscores: false };
/// `sreport`.
pub const SREPORT: Command =
    Command { name: "sreport", opts: &[SREPORT_OPTS, COMMON, ONE_CLUSTER], order: Order::Permute, underscores: false };
/// `sstat`.
pub const SSTAT: Command = Command { name: "sstat", opts: &[SSTAT_OPTS, BASIC], order: Order::Permute, underscores: false };
/// `sbcast`.
pub const SBCAST: Command = Command { name: "sbcast", opts: &[SBCAST_OPTS, BASIC], order: Order::Permute, underscores: false };
/// `sattach`.
pub const SATTACH: Command = Command { name: "sattach", opts: &[SATTACH_OPTS], order: Order::Permute, underscores: false };

/// Every Slurm command's table, `sbatch`, `salloc` and `srun` included.
pub const COMMANDS: [&Command; 15] = [
    &SBATCH, &SRUN, &SALLOC, &SQUEUE, &SINFO, &SACCT, &SCANCEL, &SCONTROL, &SPRIO, &SSHARE, &SREPORT, &SSTAT, &SBCAST, &SATTACH, &SACCTMGR,
];

/// The table of the Slurm command `name`.
pub fn command(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().copied().find(|c| c.name == name)
}

/// Every option of Slurm's man pages for the commands Tandem ships (`scripts/slurm-options.sh`
/// writes it from Debian's slurm-client), then those added since, by hand with their sources:
/// `command short long arg` rows, tab-separated, `-` where a form is absent.
pub const SLURM_OPTIONS: [&str; 2] = [include_str!("../slurm-options.txt"), include_str!("../slurm-options-newer.txt")];

/// The options of [`SLURM_OPTIONS`] that a command Tandem ships does not know: each
/// `command -x/--long`. Empty: every one is implemented, set aside with a stated effect, or
/// refused on purpose.
pub fn unknown_options() -> Vec<String> {
    let mut out = Vec::new();
    for line in SLURM_OPTIONS.iter().flat_map(|f| f.lines()).filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        let [cmd, short, long, ..] = f[..] else {
            out.push(format!("malformed row {line:?}"));
            continue;
        };
        let Some(c) = command(cmd) else { continue };
        let short_known = short == "-" || short.chars().next().is_some_and(|s| c.find_short(s).is_some());
        let long_known = long == "-" || c.find_long(long).is_some();
        if !short_known || !long_known {
            out.push(format!(
                "{cmd} {}{}",
                if short == "-" { String::new() } else { format!("-{short}/") },
                if long == "-" { String::new() } else { format!("--{long}") }
            ));
        }
    }
    out
}

/// The README's reference of every option of every Slurm command Tandem ships, rendered from
/// the tables the parser reads (so the two cannot drift): per command, the options it reads,
/// then those it sets aside and those it refuses, grouped by the reason. Markdown.
pub fn option_reference() -> String {
    use crate::getopt::Effect;
    let mut out = String::new();
    for c in COMMANDS {
        let names = |o: &Opt| {
            // Every spelling of one option together: `-x, --long, --other`.
            let mut v: Vec<String> = Vec::new();
            for s in c.options().filter(|s| s.key == o.key) {
                if let Some(l) = s.short {
                    v.insert(0, format!("`-{l}`"));
                }
                if !s.long.is_empty() {
                    v.push(format!("`--{}`", s.long));
                }
            }
            v.join("/")
        };
        let firsts: Vec<&Opt> = c.options().filter(|o| c.find_key(o.key).is_some_and(|f| std::ptr::eq(f, *o))).collect();
        let read: Vec<String> = firsts.iter().filter(|o| o.effect == Effect::Read).map(|o| names(o)).collect();
        out.push_str(&format!("- **{}** reads {}.\n", c.name, read.join(", ")));
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for o in &firsts {
            let why = match o.effect {
                Effect::Read => continue,
                Effect::Ignored(why) => format!("accepted, no effect: {why}"),
                Effect::Refused(words) => format!("refused: \"{words}\""),
            };
            match groups.iter_mut().find(|(w, _)| *w == why) {
                Some((_, v)) => v.push(names(o)),
                None => groups.push((why, vec![names(o)])),
            }
        }
        for (why, opts) in groups {
            out.push_str(&format!("  - {}: {why}\n", opts.join(", ")));
        }
        if let Some(t) = crate::envvars::env_table(c.name) {
            out.push_str(&variable_reference(c, t));
        }
    }
    out
}

/// What each Slurm command Tandem ships does, in a line (its manual page's NAME).
const SUMMARIES: [(&str, &str); 15] = [
    ("sbatch", "submit a batch script to Tandem"),
    ("srun", "run a parallel job step (in an allocation, or one made for it)"),
    ("salloc", "obtain an allocation and run a command in it"),
    ("squeue", "show the jobs in Tandem's queue"),
    ("sinfo", "show Tandem's nodes and partitions"),
    ("sacct", "show accounting records of finished and running jobs"),
    ("scancel", "cancel or signal jobs"),
    ("scontrol", "show and change jobs, nodes, partitions, reservations and the configuration"),
    ("sprio", "show the priority factors of pending jobs"),
    ("sshare", "show fair-share usage and shares"),
    ("sreport", "report cluster utilization and top users"),
    ("sstat", "show the resources of running job steps"),
    ("sbcast", "copy a file to the nodes of an allocation"),
    ("sattach", "attach to a running job step's input and output"),
    ("sacctmgr", "show and change accounts, users, associations and QOS"),
];

/// Text for roff: backslashes escaped, and a line that would start with `.` or `'` (a request)
/// kept as text.
fn roff(s: &str) -> String {
    let s = s.replace('\\', "\\e").replace('-', "\\-");
    s.lines().map(|l| if l.starts_with(['.', '\'']) { format!("\\&{l}") } else { l.to_string() }).collect::<Vec<_>>().join("\n")
}

/// The manual page (roff, section 1) of the Slurm command `name` as Tandem ships it, rendered
/// from the option table its parser reads (so the two cannot drift): every spelling of every
/// option, with what Tandem does with it (read; accepted with no effect, and why; refused, and
/// why) and its input variables, pointing to Slurm's own page for what each option means.
/// `None` for a command Tandem does not ship.
pub fn man_page(name: &str, version: &str) -> Option<String> {
    use crate::getopt::{Arg, Effect};
    let c = command(name)?;
    let summary = SUMMARIES.iter().find(|(n, _)| *n == name).map_or("a Slurm command", |(_, s)| s);
    let upper = name.to_uppercase();
    let mut out = format!(".TH {upper} 1 \"\" \"tandem {}\" \"Tandem's Slurm commands\"\n", roff(version));
    out.push_str(&format!(".SH NAME\n{name} \\- {}\n", roff(summary)));
    out.push_str(&format!(".SH SYNOPSIS\n.B {name}\n[\\fIOPTIONS\\fR...] [\\fIARGUMENTS\\fR...]\n"));
    out.push_str(&format!(
        ".SH DESCRIPTION\nThis is Tandem's \\fB{name}\\fR: it reads Slurm's command line, options and input variables, and \
         speaks to a Tandem controller (\\fBTANDEM_SERVER\\fR; see \\fBtandem\\fR(1)). What each option means is Slurm's \
         own manual page's; this page lists what Tandem does with each one: read, accepted with no effect (and why), or \
         refused (and why).\n"
    ));
    out.push_str(".SH OPTIONS\n");
    let firsts: Vec<&Opt> = c.options().filter(|o| c.find_key(o.key).is_some_and(|f| std::ptr::eq(f, *o))).collect();
    for o in firsts {
        let mut spellings: Vec<String> = Vec::new();
        for s in c.options().filter(|s| s.key == o.key) {
            let value = match s.arg {
                Arg::None => String::new(),
                Arg::Required => "=\\fIvalue\\fR".to_string(),
                Arg::Optional => "[=\\fIvalue\\fR]".to_string(),
            };
            if let Some(l) = s.short {
                spellings.insert(0, format!("\\fB\\-{}\\fR", roff(&l.to_string())));
            }
            if !s.long.is_empty() {
                spellings.push(format!("\\fB\\-\\-{}\\fR{value}", roff(s.long)));
            }
        }
        let what = match o.effect {
            Effect::Read => "Read as Slurm reads it.".to_string(),
            Effect::Ignored(why) => format!("Accepted, with no effect: {}.", roff(why)),
            Effect::Refused(words) => format!("Refused: \\(lq{}\\(rq", roff(words)),
        };
        out.push_str(&format!(".TP\n{}\n{what}\n", spellings.join(", ")));
    }
    if let Some(t) = crate::envvars::env_table(c.name) {
        out.push_str(".SH ENVIRONMENT\n");
        for v in t.all() {
            let what = match v.means {
                crate::envvars::Means::Opt(key) => match c.find_key(key) {
                    Some(o) => format!("As \\fB{}\\fR.", roff(&o.name())),
                    None => "Read.".to_string(),
                },
                crate::envvars::Means::Setting(what) => format!("{}.", roff(what)),
                crate::envvars::Means::Ignored(why) => format!("Accepted, with no effect: {}.", roff(why)),
            };
            out.push_str(&format!(".TP\n\\fB{}\\fR\n{what}\n", roff(v.name)));
        }
    }
    out.push_str(&format!(".SH SEE ALSO\n\\fBtandem\\fR(1), and Slurm's own \\fB{name}\\fR(1): https://slurm.schedmd.com/{name}.html\n"));
    Some(out)
}

/// The README's lines for the input variables of `c` ([`option_reference`]): those read (as
/// which option, or as what setting), then those set aside and refused, grouped by the reason.
fn variable_reference(c: &Command, t: &crate::envvars::EnvTable) -> String {
    use crate::envvars::Means;
    use crate::getopt::Effect;
    let (mut read, mut groups): (Vec<String>, Vec<(String, Vec<String>)>) = (Vec::new(), Vec::new());
    for v in t.all() {
        let (shown, why) = match v.means {
            Means::Opt(key) => {
                let o = c.find_key(key).expect("a variable's option is in its command's table");
                let shown = format!("`{}` (`{}`)", v.name, o.name());
                match o.effect {
                    Effect::Read => (shown, None),
                    Effect::Ignored(why) => (shown, Some(format!("accepted, no effect: {why}"))),
                    Effect::Refused(words) => (shown, Some(format!("refused: \"{}: {words}\"", v.name))),
                }
            }
            Means::Setting(what) => (format!("`{}` ({what})", v.name), None),
            Means::Ignored(why) => (format!("`{}`", v.name), Some(format!("accepted, no effect: {why}"))),
        };
        match why {
            None => read.push(shown),
            Some(why) => match groups.iter_mut().find(|(w, _)| *w == why) {
                Some((_, g)) => g.push(shown),
                None => groups.push((why, vec![shown])),
            },
        }
    }
    let mut out = format!("  - input variables read: {}.\n", if read.is_empty() { "none".to_string() } else { read.join(", ") });
    for (why, vars) in groups {
        out.push_str(&format!("  - variables {}: {why}\n", vars.join(", ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn each_commands_manual_page_names_every_option_and_what_is_done_with_it() {
        use crate::getopt::Effect;
        assert!(man_page("nope", "1").is_none());
        for c in COMMANDS {
            let page = man_page(c.name, "0.1.0").unwrap();
            assert!(page.starts_with(&format!(".TH {} 1 ", c.name.to_uppercase())), "{page}");
            assert!(page.contains(&format!(".SH NAME\n{} \\- ", c.name)), "{page}");
            for o in c.options() {
                if !o.long.is_empty() {
                    assert!(page.contains(&format!("\\fB\\-\\-{}\\fR", o.long.replace('-', "\\-"))), "{} --{}", c.name, o.long);
                }
                if let Effect::Refused(words) = o.effect {
                    assert!(page.contains(&roff(words)), "{} --{}: {words}", c.name, o.long);
                }
            }
            // Every line is text or one of the requests the page uses: nothing from a table
            // reads as a request.
            for line in page.lines() {
                assert!(
                    !line.starts_with(['.', '\'']) || [".TH ", ".SH ", ".TP", ".B "].iter().any(|r| line.starts_with(r)),
                    "{}: {line}",
                    c.name
                );
            }
        }
        assert_eq!(roff(".x -y \\z"), "\\&.x \\-y \\ez");
    }

    #[test]
    fn every_option_of_slurms_man_pages_is_known() {
        let unknown = unknown_options();
        assert!(
            unknown.is_empty(),
            "{} options of Slurm's are unknown (implement them, or add them to the table with .ignored(why) or .refused(words)):\n{}",
            unknown.len(),
            unknown.join("\n")
        );
        // Every command Tandem ships is in the list (but sacctmgr, which Tandem does not ship yet).
        for c in COMMANDS {
            assert!(SLURM_OPTIONS[0].lines().any(|l| l.starts_with(&format!("{}\t", c.name))), "{} has no options in the list", c.name);
        }
    }

    #[test]
    fn each_table_names_each_option_once_and_spellings_agree() {
        for c in COMMANDS {
            let (mut longs, mut shorts, mut keys) = (HashSet::new(), HashSet::new(), std::collections::HashMap::new());
            for o in c.options() {
                assert!(o.long.is_empty() || longs.insert(o.long), "{}: --{} twice", c.name, o.long);
                assert!(o.short.is_none_or(|s| shorts.insert(s)), "{}: -{:?} twice", c.name, o.short);
                assert!(!o.long.starts_with('-') && !o.long.contains('='), "{}: {:?}", c.name, o.long);
                // Every spelling of an option takes a value alike.
                let arg = *keys.entry(o.key).or_insert(o.arg);
                assert_eq!(arg, o.arg, "{}: spellings of {} disagree", c.name, o.key);
            }
            for o in c.options() {
                assert!(c.find_key(o.key).is_some(), "{}: {} names no option", c.name, o.key);
            }
        }
    }
}
