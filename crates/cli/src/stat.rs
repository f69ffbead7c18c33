//! `sstat`: the live usage of a running job's steps (resident memory, CPU time), as their
//! agents report it from `/proc` every few seconds, with Slurm's fields and layout.

use anyhow::{Result, bail};
use client::Target;
use wire::JobInfo;

use crate::query::get;

const USAGE: &str = "Usage: sstat -j JOBID[.STEP][,...] [-a] [-n] [-p|-P] [-o FIELDS]
  -i, --pidformat  refused: the agents of this cluster do not report their tasks' process ids";

/// The fields `sstat` fills, with Slurm's widths; the default list is all but TotalCPU.
const FIELDS: [(&str, usize); 11] = [
    ("JobID", 12),
    ("MaxRSS", 10),
    ("MaxRSSNode", 10),
    ("MaxRSSTask", 10),
    ("AveRSS", 10),
    ("MinCPU", 10),
    ("MinCPUNode", 10),
    ("MinCPUTask", 10),
    ("AveCPU", 10),
    ("NTasks", 8),
    ("TotalCPU", 10),
];

/// `sstat`.
pub(crate) fn sstat(args: &[String]) -> Result<i32> {
    let (mut ids, mut header, mut sep, mut fields) = (Vec::<String>::new(), true, None::<bool>, None::<String>);
    let (p, _) = crate::common::parse_env("sstat", args)?;
    for g in &p.opts {
        let v = g.value();
        match g.key() {
            "jobs" => ids.extend(v.split(',').map(str::to_string)),
            "noheader" => header = false,
            "parsable" => sep = Some(true),
            "parsable2" => sep = Some(false),
            "format" => fields = Some(v.to_string()),
            "helpformat" => {
                println!("{}", FIELDS.map(|f| f.0).join(" "));
                return Ok(0);
            }
            "help" | "usage" => {
                println!("{USAGE}");
                return Ok(0);
            }
            "version" => return crate::query::version(),
            // Every step is shown; sizes are printed as they are.
            "allsteps" | "noconvert" | "verbose" => {}
            other => unreachable!("sstat's table and its reader disagree on {other}"),
        }
    }
    // As Slurm's: job ids may also be given as words.
    for w in &p.args {
        ids.extend(w.split(',').map(str::to_string));
    }
    if ids.is_empty() {
        bail!("you must specify a job: sstat -j JOBID[.STEP]");
    }
    let cols: Vec<(&str, usize)> = match &fields {
        None => FIELDS[..10].to_vec(),
        Some(f) => f
            .split(',')
            .map(|name| {
                FIELDS
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name.trim()))
                    .copied()
                    .ok_or_else(|| anyhow::anyhow!("Invalid field requested: \"{name}\""))
            })
            .collect::<Result<_>>()?,
    };
    let t = Target::from_env()?;
    let mut rows: Vec<Vec<String>> = Vec::new();
    for id in &ids {
        let (job, step) = id.split_once('.').map_or((id.as_str(), None), |(j, s)| (j, Some(s)));
        let n: u64 = job.parse().map_err(|_| anyhow::anyhow!("Invalid job id: {id}"))?;
        let j: JobInfo = get(&t, &format!("/v1/jobs/{n}"))?;
        if !j.running() {
            bail!("job {id} is not running ({})", j.state);
        }
        let steps: Vec<_> = j.steps.iter().filter(|s| !s.done && step.is_none_or(|w| w == s.id)).collect();
        if steps.is_empty() {
            bail!("no running step {id}");
        }
        for s in steps {
            rows.push(
                cols.iter()
                    .map(|(f, _)| match *f {
                        "JobID" => format!("{}.{}", j.display_id, s.id),
                        "NTasks" => s.ntasks.to_string(),
                        f => crate::sacct::usage_value(f, s).unwrap_or_default(),
                    })
                    .collect(),
            );
        }
    }
    crate::query::print_table(&cols, &rows, header, sep, true);
    Ok(0)
}
