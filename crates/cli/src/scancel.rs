//! `scancel`: cancels (or signals, `-s`) jobs by id (`12`, an array's `12`, a task's `12_3`),
//! or every job matching the filters (`-u`, `--me`, `-n`, `-t`, `-p`, `-A`, `-q`, `-w`,
//! `--wckey`, `-R`), as Slurm's: the filters together select the jobs, ids given narrow them
//! further. `-b` signals the batch step only; `-i` asks before each job.

use anyhow::{Context, Result, anyhow, bail};
use client::{Target, send};
use wire::JobInfo;

use crate::common::runtime;
use crate::query::{get, help, version};

const HELP: &str = "Usage: scancel [OPTIONS] [job_id[_array_id]...]
  -A, --account=account      act only on jobs charging this account
  -b, --batch                signal the batch step only (its shell and what it started), no other step
      --ctld                 accepted: signals always go through the controller here
  -f, --full                 accepted: a job's signal already reaches its batch shell, the shell's
                             children and every step here
  -H, --hurry                accepted: there are no burst buffers here, nothing is staged out
  -i, --interactive          confirm each job before acting on it
  -n, --name=job_name        act only on jobs with this name
      --me                   act only on jobs of the caller
  -p, --partition=partition  act only on jobs in this partition
  -q, --qos=qos              act only on jobs with this quality of service
  -R, --reservation=name     act only on jobs in this advance reservation
  -s, --signal=name | integer  signal to send to the jobs (default: cancel them)
  -t, --state=states         act only on jobs in these states (PENDING, RUNNING, SUSPENDED)
  -u, --user=user_name       act only on jobs of this user
  -w, --nodelist=hostlist    act only on jobs using any of these nodes (a file if it has a '/')
      --wckey=wckey          act only on jobs with this workload characterization key
  -V, --version              output version information and exit
      --help                 show this help message
";

const USAGE: &str = "Usage: scancel [-A account] [--batch] [--interactive] [--me] [-n job_name] [-p partition] [-Q] [-q qos] [-R reservation] [-s signal] [-t PENDING | RUNNING | SUSPENDED] [-u user_name] [-w hosts] [--wckey=wckey] [-vV] [job_id[_array_id][.step_id]]\n";

/// Prints what a bulk cancel refused, as Slurm's scancel does; 1 if it refused any.
fn refusals(r: wire::CancelResponse) -> Result<i32> {
    for (id, why) in &r.refused {
        eprintln!("scancel: error: Kill job error on job id {}: {}", slurmcli::visible(&id.to_string()), slurmcli::visible(why));
    }
    Ok(i32::from(!r.refused.is_empty()))
}

/// `scancel`.
pub(crate) fn scancel(args: &[String]) -> Result<i32> {
    let (p, _) = crate::common::parse_env("scancel", args)?;
    let (mut user, mut signal, mut name, mut states, mut part, mut account) = (None, None, None, None, None, None);
    let (mut qos, mut nodes, mut wckey, mut resv) = (None, None::<Vec<String>>, None, None);
    let (mut batch, mut interactive, mut clusters) = (false, false, None);
    for g in p.opts {
        let v = g.value().to_string();
        match g.key() {
            "user" => user = Some(v),
            "signal" => signal = Some(slurmcli::signal_number(&v).with_context(|| format!("Unknown job signal: {}", v.escape_debug()))?),
            "jobname" => name = Some(v),
            "state" => {
                let s = slurmcli::parse_states(&v).map_err(|e| anyhow!("{}", e.0))?;
                if let Some(bad) = s.iter().find(|s| !["PENDING", "RUNNING", "SUSPENDED"].contains(s)) {
                    bail!("Invalid job state specified: {bad}\nValid job states are PENDING, RUNNING, and SUSPENDED");
                }
                states = Some(s);
            }
            "partition" => part = Some(v),
            "account" => account = Some(v),
            "me" => user = Some(crate::squeue::me()),
            "qos" => qos = Some(v),
            "reservation" => resv = Some(v),
            "wckey" => wckey = Some(v),
            "nodelist" => nodes = Some(nodelist(&v)?),
            "batch" => batch = true,
            "interactive" => interactive = true,
            "clusters" => clusters = Some(v),
            "help" => return help(HELP),
            "usage" => return help(USAGE),
            "version" => return version(),
            "verbose" | "quiet" | "federation" | "local" | "sibling" => {}
            other => unreachable!("scancel's table and its reader disagree on {other}"),
        }
    }
    let targets = p.args;
    if let Some(u) = user.as_ref().filter(|u| crate::query::unknown_user(std::slice::from_ref(u)).is_some()) {
        bail!("Invalid user name: {u}");
    }
    let filtered = user.is_some()
        || name.is_some()
        || states.is_some()
        || part.is_some()
        || account.is_some()
        || qos.is_some()
        || nodes.is_some()
        || wckey.is_some()
        || resv.is_some();
    if targets.is_empty() && !filtered {
        bail!("No job identification provided");
    }
    let t = Target::from_env()?;
    if let Some(c) = &clusters {
        crate::query::check_clusters(&t, c)?;
    }
    let rt = runtime()?;
    // Only users, states and a partition, no job id (`scancel -u alice`, `--me -t PENDING`):
    // the controller chooses the jobs, so a huge queue is not listed here first.
    if targets.is_empty()
        && !interactive
        && name.is_none()
        && account.is_none()
        && qos.is_none()
        && nodes.is_none()
        && wckey.is_none()
        && resv.is_none()
    {
        let matching = wire::CancelMatch {
            users: user.iter().cloned().collect(),
            states: states.iter().flatten().map(|s| s.to_string()).collect(),
            partition: part.clone(),
        };
        let body = wire::CancelRequest { ids: Vec::new(), signal, batch, matching: Some(matching) };
        return refusals(rt.block_on(send(&t, "POST", "/v1/jobs/cancel", Some(&body), &[]))?.json()?);
    }
    // `-u`: the controller lists only that user's jobs.
    let path = match user.as_ref().filter(|u| u.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))) {
        Some(u) => format!("/v1/jobs?user={u}"),
        None => "/v1/jobs".to_string(),
    };
    let all: Vec<JobInfo> = get(&t, &path)?;
    let pass = |j: &JobInfo| {
        user.as_ref().is_none_or(|u| *u == j.user || *u == j.uid.to_string())
            && name.as_ref().is_none_or(|n| *n == j.name)
            && states.as_ref().is_none_or(|s| s.contains(&j.base_state()))
            && part.as_ref().is_none_or(|p| *p == j.partition)
            && account.as_ref().is_none_or(|p| *p == j.account)
            && qos.as_ref().is_none_or(|q| *q == j.qos)
            && wckey.as_ref().is_none_or(|w| j.recorded.iter().any(|(k, v)| k == "WCKey" && v == w))
            && resv.as_ref().is_none_or(|r| j.reservation.as_ref() == Some(r))
            && nodes.as_ref().is_none_or(|w| slurmcli::expand(&j.nodelist, 100_000).unwrap_or_default().iter().any(|n| w.contains(n)))
    };
    let mut ids: Vec<u64> = Vec::new();
    for x in &targets {
        // `N+K`: component K of heterogeneous job N (`N+0` is N's batch script's, which ends
        // the whole job).
        let (x, component) = match x.split_once('+') {
            Some((j, k)) => (j.to_string(), Some(k.parse::<u32>().map_err(|_| anyhow!("Invalid job id {x}"))?)),
            None => (x.clone(), None),
        };
        let x = &x;
        if let Some(k) = component.filter(|&k| k > 0) {
            bail!(
                "Kill job error on job id {x}+{k}: one component of a running heterogeneous job cannot be cancelled alone here; scancel {x} cancels the whole job"
            );
        }
        let (job, task) = match x.split_once('_') {
            Some((j, k)) => (j, Some(k)),
            None => (x.as_str(), None),
        };
        let jid: u64 = job.parse().map_err(|_| anyhow!("Invalid job id {x}"))?;
        if let Some(j) = all.iter().find(|j| j.id == jid && j.het_job_offset.is_some_and(|k| k > 0)) {
            bail!(
                "Kill job error on job id {jid}: it is component {} of heterogeneous job {}, which cannot be cancelled alone here; scancel {} cancels the whole job",
                j.het_job_offset.unwrap_or(0),
                j.het_job_id.unwrap_or(jid),
                j.het_job_id.unwrap_or(jid)
            );
        }
        if let Some(k) = task
            && k.parse::<u32>().is_err()
        {
            bail!("Invalid job id {x}");
        }
        let matched: Vec<u64> = all
            .iter()
            .filter(|j| match task {
                Some(k) => j.display_id == format!("{jid}_{k}"),
                None => j.id == jid || j.array_job_id == Some(jid),
            })
            .filter(|j| pass(j))
            .map(|j| j.het_job_id.unwrap_or(j.id))
            .collect();
        if matched.is_empty() && !filtered {
            ids.push(jid); // let the controller say why (finished, unknown)
        } else {
            ids.extend(matched);
        }
    }
    if targets.is_empty() {
        ids.extend(all.iter().filter(|j| pass(j)).map(|j| j.het_job_id.unwrap_or(j.id)));
    }
    ids.sort_unstable();
    ids.dedup();
    let mut rc = 0;
    // Many jobs (an array, filters with ids): one request, the controller cancels them together.
    if !interactive && ids.len() > 1 {
        let body = wire::CancelRequest { ids, signal, batch, matching: None };
        return refusals(rt.block_on(send(&t, "POST", "/v1/jobs/cancel", Some(&body), &[]))?.json()?);
    }
    for id in ids {
        if interactive && !confirm(all.iter().find(|j| j.id == id), id)? {
            continue;
        }
        let path = match (signal, batch) {
            (Some(s), false) => format!("/v1/jobs/{id}?signal={s}"),
            (None, false) => format!("/v1/jobs/{id}"),
            (Some(s), true) => format!("/v1/jobs/{id}?signal={s}&batch=true"),
            (None, true) => format!("/v1/jobs/{id}?batch=true"),
        };
        let r = rt.block_on(send(&t, "DELETE", &path, None::<&()>, &[]))?;
        if r.status >= 400 {
            eprintln!("scancel: error: Kill job error on job id {}: {}", slurmcli::visible(&id.to_string()), slurmcli::visible(&r.error()));
            rc = 1;
        }
    }
    Ok(rc)
}

/// `-w`: a hostlist, or a file of host names when it has a `/` (Slurm's rule).
fn nodelist(v: &str) -> Result<Vec<String>> {
    let text =
        if v.contains('/') { std::fs::read_to_string(v).with_context(|| format!("Invalid node list file {v}"))? } else { v.to_string() };
    let mut out = Vec::new();
    for part in text.split(|c: char| c.is_whitespace()).filter(|p| !p.is_empty()) {
        out.extend(slurmcli::expand(part, 100_000).map_err(|e| anyhow!("Invalid node list {}: {}", part.escape_debug(), e.0))?);
    }
    Ok(out)
}

/// `-i`: asks on the terminal as Slurm's does, `Cancel job_id=12 name=x partition=batch [y/n]? `;
/// `y` (or `Y`) goes ahead.
fn confirm(job: Option<&JobInfo>, id: u64) -> Result<bool> {
    use std::io::{BufRead, Write};
    let (name, part) = job.map_or(("", ""), |j| (j.name.as_str(), j.partition.as_str()));
    print!("Cancel job_id={id} name={name} partition={part} [y/n]? ");
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(line.trim_start().starts_with(['y', 'Y']))
}
