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
    let t = Target::from_env()?;
    if let Some(c) = &batch.clusters {
        crate::query::check_clusters(&t, c)?;
    }
    let req = submission(batch)?;
    crate::common::check_script_size(&t, &req.batch.script)?;
    // Slurm's words before the controller's reason.
    // A key of its own, so that a retry after a broken connection (a controller's failover)
    // cannot submit it twice.
    let key = client::idempotency_key();
    let reply = runtime()?.block_on(send(&t, "POST", "/v1/jobs", Some(&req), &[(wire::IDEMPOTENCY_HEADER, &key)]))?;
    crate::common::show_user_msg("sbatch", &reply);
    let r: SubmitResponse = reply.json().context("Batch job submission failed")?;
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
    id == j.display_id
        || id == j.id.to_string()
        || j.display_id.split_once('_').is_some_and(|(a, _)| a == id)
        || j.het_job_id.is_some_and(|h| h.to_string() == id)
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
    let mut a = slurmcli::parse_srun_env(args, &caller).map_err(|e| anyhow::anyhow!("{}", e.0))?;
    if a.mpi_list {
        println!("MPI plugin types are...\n{}", slurmcli::MPI_TYPES.map(|t| format!("\t{t}")).join("\n"));
        return Ok(0);
    }
    let t = Target::from_env()?;
    // No --mpi (nor SLURM_MPI_TYPE): the cluster's MpiDefault, as Slurm's (not in a container,
    // where only --mpi=pmi2 reaches the tasks).
    if !a.mpi_given && a.container.is_none() {
        match crate::query::config(&t)?.mpi_default.as_deref() {
            Some("pmix") => (a.pmi, a.pmix) = (true, true),
            Some("pmi2") => a.pmi = true,
            _ => {}
        }
    }
    // Outside an allocation srun makes one for its step, as Slurm's.
    if let Some(c) = &a.clusters {
        crate::query::check_clusters(&t, c)?;
    }
    if a.test_only {
        // As Slurm's: when the allocation srun would make could start; nothing runs.
        let mut argv = srun_allocation(&a);
        argv.extend(["--test-only".to_string(), a.argv.first().cloned().unwrap_or_else(|| "srun".into())]);
        let mut batch = slurmcli::parse_sbatch(&argv, now(), &mut |_| Ok("#!/bin/sh\n".into())).map_err(|e| anyhow::anyhow!("{}", e.0))?;
        batch.interactive = true;
        batch.script_args.clear();
        let reply = runtime()?.block_on(send(&t, "POST", "/v1/jobs", Some(&submission(batch)?), &[]))?;
        crate::common::show_user_msg("srun", &reply);
        let r: SubmitResponse = reply.json()?;
        eprintln!("srun: {}", r.test_only.unwrap_or_default());
        return Ok(0);
    }
    // `a.jobid`: --jobid, else SLURM_JOB_ID (srun's input variable for it).
    let (job, made) = match job.or(a.jobid) {
        Some(j) => (j, false),
        None if !a.het.is_empty() => bail!(
            "srun outside an allocation makes no heterogeneous job here: submit one with sbatch (A : B, or #SBATCH hetjob) and run srun --het-group or srun A : B in it"
        ),
        None => (crate::srun::allocate(&t, "srun", &srun_allocation(&a), &[])?.0, true),
    };
    // The tasks get this process's environment (after --export) and directory, as Slurm's.
    let cwd = std::env::current_dir().context("current directory")?.display().to_string();
    let cwd_now = cwd.clone();
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
        container: a.container.clone().map(|mut c| {
            c.resolve(&cwd_now);
            c
        }),
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
        het: a
            .het
            .iter()
            .flat_map(|h| {
                h.groups.iter().map(|&group| HetStep {
                    group,
                    nodes: h.nodes,
                    ntasks: h.ntasks,
                    ntasks_per_node: h.ntasks_per_node,
                    argv: h.argv.clone(),
                })
            })
            .collect(),
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
    let (p, _) = crate::common::parse_env("sprio", args)?;
    let (mut header, mut jobs, mut users, mut clusters) = (true, None::<Vec<String>>, None::<Vec<String>>, None);
    let (mut parts, mut fmt, mut long, mut sort) = (None::<Vec<String>>, None::<String>, false, None::<String>);
    let list = |v: &str| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect::<Vec<_>>();
    for g in &p.opts {
        match g.key() {
            "noheader" => header = false,
            "jobs" => jobs = Some(list(g.value())),
            "user" => users = Some(list(g.value())),
            "partition" => parts = Some(list(g.value())),
            "format" => fmt = Some(g.value().to_string()),
            "long" => long = true,
            "sort" => sort = Some(g.value().to_string()),
            "clusters" => clusters = Some(g.value().to_string()),
            "help" | "usage" => return crate::query::help(SPRIO_HELP),
            "version" => return crate::query::version(),
            "verbose" | "federation" | "local" | "sibling" => {}
            other => unreachable!("sprio's table and its reader disagree on {other}"),
        }
    }
    if let Some(word) = p.args.first() {
        bail!("unexpected argument '{}'\nTry \"sprio --help\" for more information", word.escape_debug());
    }
    let bad = |e: slurmcli::Invalid| anyhow::anyhow!("{}", e.0);
    // Slurm's formats, when one is asked for; Tandem's own columns (with its time-limit and
    // expansion factors) otherwise.
    let items = match (&fmt, long) {
        (Some(f), _) => Some(slurmcli::parse_percent(f, slurmcli::SPRIO_FIELDS, "job").map_err(bad)?),
        (None, true) => Some(slurmcli::parse_percent(slurmcli::SPRIO_LONG, slurmcli::SPRIO_FIELDS, "job").map_err(bad)?),
        (None, false) => None,
    };
    if let Some(n) = items.iter().flat_map(|i| slurmcli::fields_used(i)).find(|n| n.ends_with("Norm") && *n != "PriorityNorm") {
        bail!(
            "Invalid job format specification: {n}: this controller does not publish its priority weights, so the factors are shown weighted only"
        );
    }
    let sort = slurmcli::parse_sort(sort.as_deref().unwrap_or("i"), slurmcli::SPRIO_FIELDS).map_err(bad)?;
    let t = Target::from_env()?;
    if let Some(c) = &clusters {
        crate::query::check_clusters(&t, c)?;
    }
    let rows: Vec<(u64, sched::Breakdown)> = runtime()?.block_on(send(&t, "GET", "/v1/priority", None::<&()>, &[]))?.json()?;
    let all: Vec<JobInfo> = crate::query::get(&t, "/v1/jobs")?;
    let mut rows: Vec<(&JobInfo, sched::Breakdown)> = rows
        .into_iter()
        .filter_map(|(id, b)| all.iter().find(|j| j.id == id).map(|j| (j, b)))
        .filter(|(j, _)| {
            jobs.as_ref().is_none_or(|w| w.iter().any(|x| crate::query::selects(x, j)))
                && users.as_ref().is_none_or(|u| u.contains(&j.user) || u.contains(&j.uid.to_string()))
                && parts.as_ref().is_none_or(|p| p.contains(&j.partition))
        })
        .collect();
    for (name, desc) in sort.iter().rev() {
        rows.sort_by(|x, y| {
            let (a, b) = (sprio_value(name, x.0, &x.1), sprio_value(name, y.0, &y.1));
            let o = match (a.trim().parse::<f64>(), b.trim().parse::<f64>()) {
                (Ok(a), Ok(b)) => a.total_cmp(&b),
                _ => a.cmp(&b),
            };
            if *desc { o.reverse() } else { o }
        });
    }
    let Some(items) = items else {
        if header {
            println!(
                "{:>10} {:>10} {:>8} {:>9} {:>8} {:>9} {:>8} {:>10} {:>8}",
                "JOBID", "PRIORITY", "AGE", "FAIRSHARE", "JOBSIZE", "TIMELIMIT", "XFACTOR", "PARTITION", "QOS"
            );
        }
        for (j, b) in rows {
            println!(
                "{:>10} {:>10.0} {:>8.0} {:>9.0} {:>8.0} {:>9.0} {:>8.0} {:>10.0} {:>8.0}",
                j.id, b.total, b.age, b.fairshare, b.job_size, b.time_limit, b.xfactor, b.partition, b.qos
            );
        }
        return Ok(0);
    };
    if header {
        println!("{}", slurmcli::render(&items, |n| slurmcli::header_of(slurmcli::SPRIO_FIELDS, n).to_string(), &[]));
    }
    for (j, b) in &rows {
        println!("{}", slurmcli::render(&items, |n| sprio_value(n, j, b), &[]));
    }
    Ok(0)
}

const SPRIO_HELP: &str = "Usage: sprio [OPTIONS]
  -h, --noheader      no headers on output
  -j, --jobs=list     comma separated list of jobs to view
  -l, --long          long report (Slurm's columns: admin, association, nice and TRES too)
  -M, --clusters=name this cluster (or all)
  -o, --format=format format specification (%i %r %u %Y %y %A %F %J %P %Q %N %S %B %T %c)
  -p, --partition=list comma separated list of partitions to view
  -S, --sort=fields   comma separated list of fields to sort on (e.g. -y,i; default i)
  -u, --user=list     comma separated list of users to view
  -n, --norm, -w, --weights
                      refused: this controller does not publish its priority weights
  -V, --version       output version information and exit
      --help          show this help message

  Without -o or -l: Tandem's columns, with its time-limit and expansion factors.
";

/// The text of sprio field `name` for pending job `j` with priority breakdown `b`.
fn sprio_value(name: &str, j: &JobInfo, b: &sched::Breakdown) -> String {
    match name {
        "JobID" => j.id.to_string(),
        "PartitionName" => j.partition.clone(),
        "User" => j.user.clone(),
        "Priority" => format!("{:.0}", b.total),
        "PriorityNorm" => format!("{:.10}", b.total.max(0.0) / u32::MAX as f64),
        "Age" => format!("{:.0}", b.age),
        "Fairshare" => format!("{:.0}", b.fairshare),
        "JobSize" => format!("{:.0}", b.job_size),
        "Partition" => format!("{:.0}", b.partition),
        "QOS" => format!("{:.0}", b.qos),
        "Nice" => format!("{:.0}", b.nice),
        // No site (admin) or association factor here; no TRES weights.
        "Admin" | "Assoc" => "0".into(),
        "Cluster" => "tandem".into(),
        _ => String::new(),
    }
}

/// `tandem admin backup FILE`: a consistent copy of the controller's database, taken while it
/// runs (administrators), written to FILE: a new file (never over an existing one or through a
/// link), 0600, synced to disk before the command says so.
pub(crate) fn backup(file: &std::path::Path) -> Result<i32> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let t = Target::from_env()?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(file)
        .with_context(|| format!("creating {} (it must not exist)", file.display()))?;
    let written = (|| -> Result<usize> {
        let reply = runtime()?.block_on(send(&t, "GET", "/v1/backup", None::<&()>, &[]))?;
        if reply.status >= 400 {
            bail!("{}", slurmcli::visible_text(&reply.error()));
        }
        if !reply.body.starts_with(b"SQLite format 3\0") {
            bail!("the controller's answer is not a database");
        }
        f.write_all(&reply.body)?;
        f.sync_all()?;
        Ok(reply.body.len())
    })();
    match written {
        Ok(n) => {
            println!("backup of the controller's database written to {} ({n} bytes)", file.display());
            Ok(0)
        }
        Err(e) => {
            let _ = std::fs::remove_file(file);
            Err(e.context("tandem admin backup"))
        }
    }
}
