//! `srun` options inside an allocation, as Slurm's `srun` reads them (the subset a step can
//! honour; the rest is refused with what to do instead).

use crate::Invalid;
use crate::hostlist::expand;
use crate::options::{Arg, Opt, count, parse_options, text};

/// An `srun` command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SrunSpec {
    /// `-N` (the minimum of `min-max`).
    pub nodes: Option<u32>,
    /// `-n`.
    pub ntasks: Option<u32>,
    /// `--ntasks-per-node`.
    pub ntasks_per_node: Option<u32>,
    /// `-c` (recorded: a step's tasks share the job's CPUs on each node).
    pub cpus_per_task: Option<u32>,
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
    /// `--cpu-bind`, `--distribution` as given (recorded, not applied).
    pub recorded: Vec<(String, String)>,
    /// `-l`: each line of output starts with its task's rank.
    pub label: bool,
    /// `-u`: output is passed on as it comes, not a line at a time.
    pub unbuffered: bool,
    /// `-i/--input`: who reads srun's standard input.
    pub input: Input,
    /// `--pty`: task 0 runs on a pseudo-terminal.
    pub pty: bool,
    /// `--mpi=pmi2`: a PMI-2 (and PMI-1) server for the tasks.
    pub pmi: bool,
    /// The options that shape an allocation, as given, for `srun` outside one (its job gets
    /// them as `sbatch` would: `-p`, `-A`, `-q`, `-t`, `--mem`, `--mem-per-cpu`, `--gpus`,
    /// `--gpus-per-node`, `--gpus-per-task`, `-c`, `--exclusive`); inside an allocation a step
    /// shares its job's.
    pub allocation: Vec<String>,
    /// The command and its arguments.
    pub argv: Vec<String>,
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

/// The MPI types `--mpi` takes (`pmi2` serves PMI-1 clients too, as Slurm's).
pub const MPI_TYPES: [&str; 2] = ["none", "pmi2"];

/// srun's options (the long name, the letter, whether it takes a value).
const OPTS: &[Opt] = &[
    Opt { long: "nodes", short: Some('N'), arg: Arg::Required },
    Opt { long: "ntasks", short: Some('n'), arg: Arg::Required },
    Opt { long: "ntasks-per-node", short: None, arg: Arg::Required },
    Opt { long: "cpus-per-task", short: Some('c'), arg: Arg::Required },
    Opt { long: "job-name", short: Some('J'), arg: Arg::Required },
    Opt { long: "output", short: Some('o'), arg: Arg::Required },
    Opt { long: "error", short: Some('e'), arg: Arg::Required },
    Opt { long: "input", short: Some('i'), arg: Arg::Required },
    Opt { long: "open-mode", short: None, arg: Arg::Required },
    Opt { long: "kill-on-bad-exit", short: Some('K'), arg: Arg::Optional },
    Opt { long: "mpi", short: None, arg: Arg::Required },
    Opt { long: "unbuffered", short: Some('u'), arg: Arg::None },
    Opt { long: "label", short: Some('l'), arg: Arg::None },
    Opt { long: "export", short: None, arg: Arg::Required },
    Opt { long: "chdir", short: Some('D'), arg: Arg::Required },
    Opt { long: "nodelist", short: Some('w'), arg: Arg::Required },
    Opt { long: "exclude", short: Some('x'), arg: Arg::Required },
    Opt { long: "exclusive", short: None, arg: Arg::Optional },
    Opt { long: "overlap", short: None, arg: Arg::None },
    Opt { long: "whole", short: None, arg: Arg::None },
    Opt { long: "cpu-bind", short: None, arg: Arg::Required },
    Opt { long: "distribution", short: Some('m'), arg: Arg::Required },
    Opt { long: "time", short: Some('t'), arg: Arg::Required },
    Opt { long: "verbose", short: Some('v'), arg: Arg::None },
    Opt { long: "quiet", short: Some('Q'), arg: Arg::None },
    Opt { long: "pty", short: None, arg: Arg::None },
    Opt { long: "partition", short: Some('p'), arg: Arg::Required },
    Opt { long: "account", short: Some('A'), arg: Arg::Required },
    Opt { long: "qos", short: Some('q'), arg: Arg::Required },
    Opt { long: "mem", short: None, arg: Arg::Required },
    Opt { long: "mem-per-cpu", short: None, arg: Arg::Required },
    Opt { long: "gpus", short: Some('G'), arg: Arg::Required },
    Opt { long: "gpus-per-node", short: None, arg: Arg::Required },
    Opt { long: "gpus-per-task", short: None, arg: Arg::Required },
];

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
    let (opts, end) = parse_options(OPTS, &respelled(args), true)?;
    let mut s = SrunSpec { argv: args[end..].to_vec(), ..SrunSpec::default() };
    for (opt, value) in opts {
        let v = || value.clone().unwrap_or_default();
        match opt.long {
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
            "mpi" => match v().as_str() {
                "list" => s.mpi_list = true,
                "none" => s.pmi = false,
                "pmi2" => s.pmi = true,
                "pmix" | "pmix_v3" | "pmix_v4" | "pmix_v5" => {
                    return Err(Invalid::new(format!(
                        "--mpi={}: PMIx is not available; MPI types: {} (OpenMPI: mpirun inside an allocation, or its PMI-2 support; MPICH: --mpi=pmi2)",
                        v(),
                        MPI_TYPES.join(", ")
                    )));
                }
                other => {
                    return Err(Invalid::new(format!(
                        "--mpi={other}: not available; MPI types: {} (OpenMPI's mpirun inside an allocation launches over srun)",
                        MPI_TYPES.join(", ")
                    )));
                }
            },
            "label" => s.label = true,
            "unbuffered" => s.unbuffered = true,
            "pty" => s.pty = true,
            "export" => s.export = Some(nonempty(&v(), "--export")?),
            "chdir" => s.chdir = Some(nonempty(&v(), "--chdir")?),
            "nodelist" => s.nodelist = expand(&v(), 100_000).map_err(|e| Invalid::new(format!("invalid --nodelist: {}", e.0)))?,
            "exclude" => s.exclude = expand(&v(), 100_000).map_err(|e| Invalid::new(format!("invalid --exclude: {}", e.0)))?,
            "cpu-bind" | "distribution" => s.recorded.push((opt.long.to_string(), nonempty(&v(), opt.long)?)),
            "time" => {
                crate::formats::parse_time(&v())?;
                s.allocation.push(format!("--time={}", v()));
            }
            "partition" | "account" | "qos" | "mem" | "mem-per-cpu" | "gpus" | "gpus-per-node" | "gpus-per-task" => {
                s.allocation.push(format!("--{}={}", opt.long, nonempty(&v(), opt.long)?));
            }
            // A step shares its job's allocation; what these change does not arise.
            "exclusive" | "overlap" | "whole" | "verbose" | "quiet" => {}
            _ => unreachable!("every option in OPTS is handled"),
        }
    }
    if s.argv.is_empty() && !s.mpi_list {
        return Err(Invalid::new("no command given"));
    }
    Ok(s)
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

/// Long options with Slurm's underscore spellings respelled with dashes (`--cpu_bind=x` is
/// `--cpu-bind=x`); an `=value` and words not starting with `--` are left alone (the command
/// itself is taken from the words as given).
fn respelled(args: &[String]) -> Vec<String> {
    args.iter()
        .map(|a| match a.strip_prefix("--") {
            Some(rest) if !rest.is_empty() => {
                let (name, value) = rest.split_once('=').map_or((rest, None), |(n, v)| (n, Some(v)));
                let name = name.replace('_', "-");
                value.map_or_else(|| format!("--{name}"), |v| format!("--{name}={v}"))
            }
            _ => a.clone(),
        })
        .collect()
}

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
        assert_eq!(e(&["-Z", "x"]), "invalid option -- 'Z'");
        assert_eq!(e(&["-n"]), "option requires an argument -- 'n'");
        assert_eq!(e(&["--ntasks"]), "option '--ntasks' requires an argument");
        assert!(e(&["-o", "", "x"]).contains("must not be empty"));
        assert!(e(&["-n", "0", "x"]).contains("number of tasks"));
        assert!(e(&["--unbuffered=yes", "x"]).contains("doesn't allow an argument"));
        assert!(e(&["-ux", "x"]).contains("doesn't allow an argument"));
        assert!(e(&["--mpi=pmix", "x"]).contains("PMIx is not available"));
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
    }
}
