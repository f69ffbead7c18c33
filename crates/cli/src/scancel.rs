//! `scancel`: cancels (or signals, `-s`) jobs by id (`12`, an array's `12`, a task's `12_3`),
//! or every job matching the filters (`-u`, `--me`, `-n`, `-t`, `-p`, `-A`), as Slurm's: the
//! filters together select the jobs, ids given narrow them further.

use anyhow::{Context, Result, anyhow, bail};
use client::{Target, send};
use wire::JobInfo;

use crate::common::runtime;
use crate::query::{Opts, get, help, version};

const HELP: &str = "Usage: scancel [OPTIONS] [job_id[_array_id]...]
  -A, --account=account      act only on jobs charging this account
  -n, --name=job_name        act only on jobs with this name
      --me                   act only on jobs of the caller
  -p, --partition=partition  act only on jobs in this partition
  -s, --signal=name | integer  signal to send to the jobs (default: cancel them)
  -t, --state=states         act only on jobs in these states (PENDING, RUNNING, SUSPENDED)
  -u, --user=user_name       act only on jobs of this user
  -V, --version              output version information and exit
      --help                 show this help message
";

/// `scancel`.
pub(crate) fn scancel(args: &[String]) -> Result<i32> {
    let mut a = Opts::new(args);
    let (mut user, mut signal, mut targets, mut name, mut states, mut part, mut account) = (None, None, Vec::new(), None, None, None, None);
    while let Some(x) = a.next() {
        if let Some(v) = a.value(&x, Some("-u"), "user")? {
            user = Some(v);
        } else if let Some(v) = a.value(&x, Some("-s"), "signal")? {
            signal = Some(slurmcli::signal_number(&v).with_context(|| format!("Unknown job signal: {v}"))?);
        } else if let Some(v) = a.value(&x, Some("-n"), "name")?.or(a.value(&x, None, "jobname")?) {
            name = Some(v);
        } else if let Some(v) = a.value(&x, Some("-t"), "state")? {
            let s = slurmcli::parse_states(&v).map_err(|e| anyhow!("{}", e.0))?;
            if let Some(bad) = s.iter().find(|s| !["PENDING", "RUNNING", "SUSPENDED"].contains(s)) {
                bail!("Invalid job state specified: {bad}\nValid job states are PENDING, RUNNING, and SUSPENDED");
            }
            states = Some(s);
        } else if let Some(v) = a.value(&x, Some("-p"), "partition")? {
            part = Some(v);
        } else if let Some(v) = a.value(&x, Some("-A"), "account")? {
            account = Some(v);
        } else if x == "--me" {
            user = Some(crate::squeue::me());
        } else if x == "--help" {
            return help(HELP);
        } else if x == "-V" || x == "--version" {
            return version();
        } else if x == "-v" || x == "--verbose" || x == "-Q" || x == "--quiet" {
        } else if x.starts_with('-') {
            bail!("unrecognized option '{x}'\nTry \"scancel --help\" for more information");
        } else {
            targets.push(x);
        }
    }
    if let Some(u) = user.as_ref().filter(|u| crate::query::unknown_user(std::slice::from_ref(u)).is_some()) {
        bail!("Invalid user name: {u}");
    }
    let filtered = user.is_some() || name.is_some() || states.is_some() || part.is_some() || account.is_some();
    if targets.is_empty() && !filtered {
        bail!("No job identification provided");
    }
    let t = Target::from_env()?;
    let all: Vec<JobInfo> = get(&t, "/v1/jobs")?;
    let pass = |j: &JobInfo| {
        user.as_ref().is_none_or(|u| *u == j.user || *u == j.uid.to_string())
            && name.as_ref().is_none_or(|n| *n == j.name)
            && states.as_ref().is_none_or(|s| s.contains(&j.state.as_str()))
            && part.as_ref().is_none_or(|p| *p == j.partition)
            && account.as_ref().is_none_or(|p| *p == j.account)
    };
    let mut ids: Vec<u64> = Vec::new();
    for x in &targets {
        let (job, task) = match x.split_once('_') {
            Some((j, k)) => (j, Some(k)),
            None => (x.as_str(), None),
        };
        let jid: u64 = job.parse().map_err(|_| anyhow!("Invalid job id {x}"))?;
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
            .map(|j| j.id)
            .collect();
        if matched.is_empty() && !filtered {
            ids.push(jid); // let the controller say why (finished, unknown)
        } else {
            ids.extend(matched);
        }
    }
    if targets.is_empty() {
        ids.extend(all.iter().filter(|j| pass(j)).map(|j| j.id));
    }
    ids.sort_unstable();
    ids.dedup();
    let rt = runtime()?;
    let mut rc = 0;
    for id in ids {
        let path = match signal {
            Some(s) => format!("/v1/jobs/{id}?signal={s}"),
            None => format!("/v1/jobs/{id}"),
        };
        let r = rt.block_on(send(&t, "DELETE", &path, None::<&()>, &[]))?;
        if r.status >= 400 {
            eprintln!("scancel: error: Kill job error on job id {}: {}", slurmcli::visible(&id.to_string()), slurmcli::visible(&r.error()));
            rc = 1;
        }
    }
    Ok(rc)
}
