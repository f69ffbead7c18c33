//! The Slurm commands that submit and run work: `sbatch`, `srun`, `sprio` (also `tandem
//! submit`, `run`, `priority`), and node deletion; the query commands have modules of their
//! own (`squeue`, `sacct`, `scontrol`, `sinfo`, `scancel`). They parse Slurm's options, talk to
//! the controller over its API, and print what Slurm prints. Errors go to stderr as
//! `<command>: error: ...` with exit code 1.

use anyhow::{Context, Result, bail};

use crate::common::{now, runtime, submission};
use client::{Target, send};
use wire::*;

/// `sbatch`.
pub(crate) fn sbatch(args: &[String]) -> Result<i32> {
    let env: Vec<(String, String)> = crate::common::caller_env();
    let batch = slurmcli::parse_sbatch_env(args, now(), "SBATCH_", &env, &mut |p| {
        if p == slurmcli::STDIN {
            // A script on standard input (`sbatch < job.sh`, a here-document), as Slurm's.
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut text)
                .map_err(|e| slurmcli::Invalid(format!("cannot read the batch script from standard input: {e}")))?;
            return Ok(text);
        }
        std::fs::read_to_string(p).map_err(|e| slurmcli::Invalid(format!("Unable to open file {p}: {e}")))
    })
    .map_err(|e| anyhow::anyhow!("{}", e.0))?;
    let (parsable, wait, submitted, quiet) = (batch.parsable, batch.wait, now(), batch.quiet);
    if batch.verbose > 0 {
        for line in slurmcli::describe(&batch) {
            eprintln!("sbatch: {}", slurmcli::visible(&line));
        }
    }
    let req = submission(batch)?;
    let t = Target::from_env()?;
    crate::common::check_script_size(&t, &req.batch.script)?;
    let r: SubmitResponse = runtime()?.block_on(send(&t, "POST", "/v1/jobs", Some(&req), &[]))?.json()?;
    if let Some(msg) = r.test_only {
        eprintln!("sbatch: {}", slurmcli::visible(&msg));
        return Ok(0);
    }
    let first = r.job_ids.first().copied().context("no job id returned")?;
    if parsable {
        println!("{first}");
    } else if !quiet {
        println!("Submitted batch job {first}");
    }
    if wait {
        return wait_for_jobs(&t, &r.job_ids, submitted - 1);
    }
    Ok(0)
}

/// Whether job id `id` as a user gives it (`12`, `12_3`) names job `j`: its own id, its
/// display id, or the array it is a task of (an array's id selects all its tasks, as Slurm's).
fn selects(id: &str, j: &JobInfo) -> bool {
    id == j.display_id || id == j.id.to_string() || j.display_id.split_once('_').is_some_and(|(a, _)| a == id)
}

/// `sbatch --wait`: polls until every job (an array's tasks included) has ended, then returns
/// the highest exit code among them (a job killed by a signal counts as 128 + it, a job that
/// ended without an exit status, cancelled before it ran say, as 1), as Slurm's.
fn wait_for_jobs(t: &Target, ids: &[u64], since: i64) -> Result<i32> {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let rt = runtime()?;
    let mut delay = std::time::Duration::from_millis(200);
    loop {
        let mut worst = 0;
        let mut all_done = true;
        // Jobs that ended before this submission are not these.
        let list: Vec<JobInfo> = rt.block_on(send(t, "GET", &format!("/v1/history?since={since}"), None::<&()>, &[]))?.json()?;
        for id in ids {
            let mine: Vec<&JobInfo> = list.iter().filter(|j| selects(&id.to_string(), j)).collect();
            if mine.is_empty() {
                all_done = false;
            }
            for j in mine {
                match j.state.as_str() {
                    "PENDING" | "RUNNING" | "SUSPENDED" | "REQUEUED" | "CONFIGURING" | "COMPLETING" => all_done = false,
                    state => {
                        let (code, sig) = j.exit_code.split_once(':').unwrap_or(("0", "0"));
                        let (code, sig) = (code.parse::<i32>().unwrap_or(0), sig.parse::<i32>().unwrap_or(0));
                        let e = if sig > 0 {
                            128 + sig
                        } else if code == 0 && state != "COMPLETED" {
                            1
                        } else {
                            code
                        };
                        worst = worst.max(e);
                    }
                }
            }
        }
        if all_done {
            return Ok(worst.clamp(0, 255));
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(std::time::Duration::from_secs(2));
    }
}

/// `scontrol delete NodeName=HOSTLIST` and `tandem node delete HOSTLIST`: deletes the nodes and
/// revokes their credentials (root or the controller's user).
pub(crate) fn delete_nodes(list: &str) -> Result<i32> {
    let names = slurmcli::expand(list, 100_000).map_err(|e| anyhow::anyhow!("{}", e.0))?;
    let t = Target::from_env()?;
    let rt = runtime()?;
    for n in names {
        if n.is_empty() || n.contains(['/', '?', '#', '%']) {
            bail!("invalid node name specified: {n}");
        }
        rt.block_on(send(&t, "DELETE", &format!("/v1/nodes/{n}"), None::<&()>, &[]))?.ok()?;
    }
    Ok(0)
}

/// `srun` inside an allocation: launches a job step and waits for it.
pub(crate) fn srun(args: &[String]) -> Result<i32> {
    srun_in(args, None)
}

/// [`srun`] in job `job` (else `$SLURM_JOB_ID`'s, else an allocation of its own).
pub(crate) fn srun_in(args: &[String], job: Option<u64>) -> Result<i32> {
    let caller: Vec<(String, String)> = crate::common::caller_env();
    let a = slurmcli::parse_srun_env(args, &caller).map_err(|e| anyhow::anyhow!("{}", e.0))?;
    if a.mpi_list {
        println!("MPI plugin types are...\n{}", slurmcli::MPI_TYPES.map(|t| format!("\t{t}")).join("\n"));
        return Ok(0);
    }
    let t = Target::from_env()?;
    // Outside an allocation srun makes one for its step, as Slurm's.
    let (job, made) = match job.or_else(|| std::env::var("SLURM_JOB_ID").ok().and_then(|v| v.parse().ok())) {
        Some(j) => (j, false),
        None => (crate::srun::allocate(&t, "srun", &srun_allocation(&a), &[])?.0, true),
    };
    // The tasks get this process's environment (after --export) and directory, as Slurm's.
    let cwd = std::env::current_dir().context("current directory")?.display().to_string();
    let workdir = match &a.chdir {
        Some(d) if d.starts_with('/') => d.clone(),
        Some(d) => format!("{cwd}/{d}"),
        None => cwd,
    };
    let spec = StepSpec {
        env: Some(slurmcli::apply_export(a.export.as_deref(), &caller)),
        workdir: Some(workdir),
        output: a.output.clone(),
        error: a.error.clone(),
        truncate: a.open_append == Some(false),
        kill_on_bad_exit: a.kill_on_bad_exit,
        name: a.name.clone(),
        nodelist: a.nodelist.clone(),
        exclude: a.exclude.clone(),
        io: None,
        umask: Some(crate::common::umask()),
        cpu_bind: a.recorded.iter().find(|(k, _)| k == "cpu-bind").map(|(_, v)| v.clone()),
        distribution: a.recorded.iter().find(|(k, _)| k == "distribution").map(|(_, v)| v.clone()),
        res: StepRes {
            cpus_per_task: a.cpus_per_task,
            exact: a.exact,
            whole: a.whole,
            overlap: a.overlap,
            overcommit: a.overcommit,
            mem: a.mem,
            gpus: a.gpus.clone(),
            time_limit: a.time,
        },
    };
    let req = StepRequest { nodes: a.nodes, ntasks: a.ntasks, ntasks_per_node: a.ntasks_per_node, argv: a.argv.clone(), spec };
    let code = crate::srun::run_step(&t, job, req, &a);
    if made {
        crate::srun::complete(&t, "srun", job, *code.as_ref().unwrap_or(&1));
    }
    code
}

/// The sbatch options of the job that `srun` outside an allocation makes.
fn srun_allocation(a: &slurmcli::SrunSpec) -> Vec<String> {
    let mut v = a.allocation.clone();
    if let Some(n) = a.nodes {
        v.push(format!("--nodes={n}"));
    }
    if let Some(n) = a.ntasks {
        v.push(format!("--ntasks={n}"));
    }
    if let Some(n) = a.ntasks_per_node {
        v.push(format!("--ntasks-per-node={n}"));
    }
    if let Some(n) = &a.name {
        v.push(format!("--job-name={n}"));
    }
    if !a.nodelist.is_empty() {
        v.push(format!("--nodelist={}", slurmcli::compress(&a.nodelist)));
    }
    if !a.exclude.is_empty() {
        v.push(format!("--exclude={}", slurmcli::compress(&a.exclude)));
    }
    if a.name.is_none() {
        v.push(format!("--job-name={}", a.argv.first().map_or("srun", |c| c.rsplit('/').next().unwrap_or(c))));
    }
    v
}

/// `sprio`.
pub(crate) fn sprio(args: &[String]) -> Result<i32> {
    match args.first().map(String::as_str) {
        None => {}
        Some("--help" | "--usage") => {
            return crate::query::help("Usage: sprio [--help] [-V]\n  Shows the pending jobs' priorities, factor by factor.\n");
        }
        Some("-V" | "--version") => return crate::query::version(),
        Some(x) => bail!("unrecognized option '{x}'\nUsage: sprio"),
    }
    let rows: Vec<(u64, sched::Breakdown)> =
        runtime()?.block_on(send(&Target::from_env()?, "GET", "/v1/priority", None::<&()>, &[]))?.json()?;
    println!(
        "{:>10} {:>10} {:>8} {:>9} {:>8} {:>9} {:>8} {:>10} {:>8}",
        "JOBID", "PRIORITY", "AGE", "FAIRSHARE", "JOBSIZE", "TIMELIMIT", "XFACTOR", "PARTITION", "QOS"
    );
    for (id, b) in rows {
        println!(
            "{:>10} {:>10.0} {:>8.0} {:>9.0} {:>8.0} {:>9.0} {:>8.0} {:>10.0} {:>8.0}",
            id, b.total, b.age, b.fairshare, b.job_size, b.time_limit, b.xfactor, b.partition, b.qos
        );
    }
    Ok(0)
}
