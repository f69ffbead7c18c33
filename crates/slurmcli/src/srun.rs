//! `srun` options inside an allocation, as Slurm's `srun` reads them (the subset a step can
//! honour; the rest is refused with what to do instead).

use crate::Invalid;
use crate::hostlist::expand;

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
    /// The command and its arguments.
    pub argv: Vec<String>,
}

/// The MPI types `--mpi` takes.
pub const MPI_TYPES: [&str; 1] = ["none"];

#[derive(PartialEq, Clone, Copy)]
enum Arg {
    Required,
    Optional,
    None,
}

/// (long name, short letter, argument).
const OPTS: &[(&str, Option<char>, Arg)] = &[
    ("nodes", Some('N'), Arg::Required),
    ("ntasks", Some('n'), Arg::Required),
    ("ntasks-per-node", None, Arg::Required),
    ("cpus-per-task", Some('c'), Arg::Required),
    ("job-name", Some('J'), Arg::Required),
    ("output", Some('o'), Arg::Required),
    ("error", Some('e'), Arg::Required),
    ("input", Some('i'), Arg::Required),
    ("open-mode", None, Arg::Required),
    ("kill-on-bad-exit", Some('K'), Arg::Optional),
    ("mpi", None, Arg::Required),
    ("unbuffered", Some('u'), Arg::None),
    ("label", Some('l'), Arg::None),
    ("export", None, Arg::Required),
    ("chdir", Some('D'), Arg::Required),
    ("nodelist", Some('w'), Arg::Required),
    ("exclude", Some('x'), Arg::Required),
    ("exclusive", None, Arg::Optional),
    ("overlap", None, Arg::None),
    ("whole", None, Arg::None),
    ("cpu-bind", None, Arg::Required),
    ("distribution", Some('m'), Arg::Required),
    ("time", Some('t'), Arg::Required),
    ("verbose", Some('v'), Arg::None),
    ("quiet", Some('Q'), Arg::None),
];

fn count(v: &str, what: &str) -> Result<u32, Invalid> {
    v.parse::<u32>().ok().filter(|n| (1..=100_000).contains(n)).ok_or_else(|| Invalid::new(format!("invalid {what}: {v}")))
}

fn text(v: &str, what: &str) -> Result<String, Invalid> {
    if v.is_empty() || v.contains('\0') || v.contains('\n') || v.len() > 4096 {
        return Err(Invalid::new(format!("invalid {what}: not empty, no newlines or NUL bytes, at most 4096 bytes")));
    }
    Ok(v.to_string())
}

/// Parses `srun`'s arguments: options, then the command (everything from the first word that
/// is not an option, or after `--`). Long options take Slurm's underscore spellings too
/// (`--cpu_bind`, `--ntasks_per_node`).
pub fn parse_srun(args: &[String]) -> Result<SrunSpec, Invalid> {
    let mut s = SrunSpec::default();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            s.argv = args[i..].to_vec();
            break;
        }
        if !a.starts_with('-') || a == "-" {
            s.argv = args[i - 1..].to_vec();
            break;
        }
        // (option, inline value)
        let (opt, inline): (&(&str, Option<char>, Arg), Option<String>) = if let Some(rest) = a.strip_prefix("--") {
            let (name, v) = match rest.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (rest, None),
            };
            let name = name.replace('_', "-");
            let o = OPTS.iter().find(|o| o.0 == name).ok_or_else(|| Invalid::new(format!("unrecognized option '--{name}'")))?;
            (o, v)
        } else {
            let c = a[1..].chars().next().unwrap_or('?');
            let o = OPTS.iter().find(|o| o.1 == Some(c)).ok_or_else(|| Invalid::new(format!("invalid option -- '{c}'")))?;
            let rest = &a[1 + c.len_utf8()..];
            (o, (!rest.is_empty()).then(|| rest.to_string()))
        };
        let (name, _, arg) = *opt;
        let value = match (arg, inline) {
            (Arg::None, Some(_)) if a.starts_with("--") => {
                return Err(Invalid::new(format!("option '--{name}' doesn't allow an argument")));
            }
            (Arg::None, Some(_)) => return Err(Invalid::new(format!("invalid option -- '{}'", &a[1..]))),
            (Arg::None, None) => None,
            (Arg::Required, Some(v)) | (Arg::Optional, Some(v)) => Some(v),
            (Arg::Required, None) => {
                let v = args.get(i).cloned().ok_or_else(|| Invalid::new(format!("option '{a}' requires an argument")))?;
                i += 1;
                Some(v)
            }
            (Arg::Optional, None) => None,
        };
        let v = || value.clone().unwrap_or_default();
        match name {
            "nodes" => {
                let min = v().split('-').next().unwrap_or("").to_string();
                s.nodes = Some(count(&min, "node count")?);
            }
            "ntasks" => s.ntasks = Some(count(&v(), "number of tasks")?),
            "ntasks-per-node" => s.ntasks_per_node = Some(count(&v(), "--ntasks-per-node")?),
            "cpus-per-task" => s.cpus_per_task = Some(count(&v(), "--cpus-per-task")?),
            "job-name" => s.name = Some(text(&v(), "job name")?),
            "output" => s.output = Some(text(&v(), "--output")?),
            "error" => s.error = Some(text(&v(), "--error")?),
            "input" => {
                if !matches!(v().as_str(), "none" | "/dev/null") {
                    return Err(Invalid::new(
                        "--input: only --input=none (or /dev/null) for now; tasks get no standard input from srun yet",
                    ));
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
                "none" => {}
                other => {
                    return Err(Invalid::new(format!(
                        "--mpi={other}: not available; MPI types: {} (OpenMPI's mpirun inside an allocation launches over srun)",
                        MPI_TYPES.join(", ")
                    )));
                }
            },
            "label" => {
                return Err(Invalid::new("-l/--label is not available yet: tasks write to the output files directly, not through srun"));
            }
            "export" => s.export = Some(text(&v(), "--export")?),
            "chdir" => s.chdir = Some(text(&v(), "--chdir")?),
            "nodelist" => s.nodelist = expand(&v(), 100_000).map_err(|e| Invalid::new(format!("invalid --nodelist: {}", e.0)))?,
            "exclude" => s.exclude = expand(&v(), 100_000).map_err(|e| Invalid::new(format!("invalid --exclude: {}", e.0)))?,
            "cpu-bind" | "distribution" => s.recorded.push((name.to_string(), text(&v(), name)?)),
            "time" => {
                crate::formats::parse_time(&v())?;
            }
            // A step shares its job's allocation; what these change does not arise.
            "exclusive" | "overlap" | "whole" | "unbuffered" | "verbose" | "quiet" => {}
            _ => unreachable!("every option in OPTS is handled"),
        }
    }
    if s.argv.is_empty() && !s.mpi_list {
        return Err(Invalid::new("no command given"));
    }
    Ok(s)
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
        assert_eq!(e(&["-n"]), "option '-n' requires an argument");
        assert!(e(&["-n", "0", "x"]).contains("number of tasks"));
        assert!(e(&["--unbuffered=yes", "x"]).contains("doesn't allow an argument"));
        assert!(e(&["--mpi=pmi2", "x"]).contains("not available"));
        assert!(e(&["--open-mode=maybe", "x"]).contains("append or truncate"));
        assert!(p(&["-K", "x"]).unwrap().kill_on_bad_exit);
        assert!(e(&["--kill-on-bad-exit=yes", "x"]).contains("a number"));
        assert!(e(&["-o", "a\nb", "x"]).contains("--output"));
        assert!(e(&["-w", "node[", "x"]).contains("--nodelist"));
        assert!(e(&["-t", "soon", "x"]).contains("time"));
        assert_eq!(e(&["-N2"]), "no command given");
    }
}
