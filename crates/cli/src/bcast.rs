//! `sbcast SOURCE DEST`: copies a file to every node of the caller's allocation, as Slurm's.
//! It travels as a step's standard input (srun's TLS connection to the agents, with the step's
//! own credential; never a shared disk), one task on each node writing DEST as the user. The
//! copy shows in `sacct` as a step named `sbcast`.

use anyhow::{Context, Result, bail};

const USAGE: &str = "Usage: sbcast [-f] [-p] [-C] [-j JOBID] SOURCE DEST
  -f, --force          replace DEST where it exists
  -j, --jobid=ID       the allocation whose nodes get the file (default: SLURM_JOB_ID)
  -p, --preserve       keep the file's mode and modification time
  -C, --compress[=LIB] accepted: the file travels over the step's TLS connection as it is
  --send-libs[=no]     refused but for =no: the executable's libraries are not sent here
  -F, --fanout, -s, --size, -t, --timeout, --exclude
                       accepted: the file goes to every node at once as one step, streamed whole";

/// `sbcast [-f|--force] [-p|--preserve] [-C|--compress[=LIB]] [-j|--jobid=ID] SOURCE DEST`.
pub(crate) fn sbcast(args: &[String]) -> Result<i32> {
    // SLURM_JOB_ID (the allocation sbcast runs in) stands for -j, before the command line's.
    let (mut force, mut preserve, mut job) = (false, false, None);
    let (p, _) = crate::common::parse_env("sbcast", args)?;
    for g in &p.opts {
        match g.key() {
            "force" => force = true,
            "preserve" => preserve = true,
            "jobid" => job = Some(g.value().to_string()),
            // As Slurm's: `--send-libs=no` sends none; sending them is not available here.
            "send-libs" => {
                if !g.value.as_deref().is_some_and(|v| v.eq_ignore_ascii_case("no")) {
                    bail!(
                        "--send-libs: sending an executable's shared libraries is not available here (the nodes use their own); use --send-libs=no"
                    );
                }
            }
            "help" | "usage" => {
                println!("{USAGE}");
                return Ok(0);
            }
            "version" => return crate::query::version(),
            // The file travels over the step's TLS connection as it is.
            "compress" | "verbose" => {}
            other => unreachable!("sbcast's table and its reader disagree on {other}"),
        }
    }
    let files = p.args;
    let [source, dest] = files.as_slice() else { bail!("need a source and a destination file\n{USAGE}") };
    let Some(job) = job.filter(|j| !j.is_empty()) else {
        bail!("sbcast runs inside an allocation (SLURM_JOB_ID), or with -j JOBID");
    };
    let job: u64 = job.split('.').next().unwrap_or("").parse().map_err(|_| anyhow::anyhow!("invalid job id {job:?}"))?;
    let meta = std::fs::metadata(source).with_context(|| format!("can't open {source}"))?;
    if !meta.is_file() {
        bail!("{source} is not a regular file");
    }
    let source = std::fs::canonicalize(source)?.display().to_string();
    // The job's nodes: one task on each, all of them (--overlap: it waits for no step).
    let info: wire::JobInfo = crate::query::get(&client::Target::from_env()?, &format!("/v1/jobs/{job}"))?;
    if !info.running() {
        bail!("job {job} is not running");
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o7777;
    let mtime = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_secs());
    // As the user on each node: refuse to replace a file unless -f (noclobber), then the
    // permissions and time with -p.
    let mut script = String::from(if force { "cat > \"$1\"" } else { "set -C; cat > \"$1\"" });
    if preserve {
        script.push_str(&format!(" && chmod {mode:o} \"$1\" && touch -d @{mtime} \"$1\""));
    }
    let argv: Vec<String> = [
        "--overlap",
        "-N",
        &info.nodes.to_string(),
        "--ntasks-per-node=1",
        "--input",
        &source,
        "-J",
        "sbcast",
        "sh",
        "-c",
        &script,
        "sbcast",
        dest,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Slurm's sbcast exits 1 when a node could not write the file (its reason on stderr).
    Ok(i32::from(crate::slurm::srun_in(&argv, Some(job))? != 0))
}
