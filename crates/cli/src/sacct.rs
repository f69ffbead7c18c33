//! `sacct`: accounting of jobs and their steps as Slurm's prints it: fields matched and sized
//! as Slurm's (`JobName%20`, a `+` where a value is cut), `-p`/`-P`/`--delimiter`, `-b`, `-l`,
//! `SACCT_FORMAT`, `-S`/`-E` in Slurm's time forms, `-s` states, `-X`, `--units`, durations as
//! `[D-]HH:MM:SS`, cancelled jobs as `CANCELLED by UID`, `--json` (data_parser v0.0.44) and
//! `--yaml`; filtered by `-A -C -g -i -I -k/-K -N -q -r -R -s -u -W -x --name`, with `-T`
//! truncating times to the window.

use anyhow::{Result, anyhow, bail};
use client::Target;
use serde_json::{Value, json};
use wire::{JobInfo, StepInfo};

use crate::common::now;
use crate::query::{elapsed, exit_json, get, help, iso, limit_minutes, meta, num, selects, stdout_path, unknown_user, version};
use slurmcli::{Layout, Unit};

const HELP: &str = "Usage: sacct [OPTIONS]
  -a, --allusers        display jobs of all users (those the caller may see; root's default)
  -A, --accounts        comma separated list of accounts
  -b, --brief           brief listing: jobid, state, exitcode
  -C, --constraints     comma separated list of features the jobs asked for (all of them)
  -D, --duplicates      accepted: Tandem keeps one record per job (its last run; Restarts counts the others)
      --delimiter       the delimiter of -p and -P (default '|')
  -E, --endtime         jobs that started before this time (now[-N{seconds|minutes|hours|days|weeks}],
                        YYYY-MM-DD[THH:MM[:SS]], MMDD[YY], MM/DD[/YY], HH:MM[:SS], midnight, noon, ...)
  -e, --helpformat      list the fields --format takes
  -g, --gid, --group    comma separated list of group ids or names
  -i, --nnodes=min[-max]  jobs that ran on this number (range) of nodes
  -I, --ncpus=min[-max]   jobs that ran on this number (range) of CPUs
  -j, --jobs            comma separated list of jobs (job or job_task, a step selects its job)
      --json            produce JSON output (data_parser v0.0.44)
  -k, --timelimit-min   jobs with this time limit (or, with -K, at least it)
  -K, --timelimit-max   with -k: jobs with at most this time limit
  -l, --long            long listing
      --name            comma separated list of job names
  -n, --noheader        no header
  -N, --nodelist        jobs that ran on any of these nodes (a hostlist)
      --noconvert       print sizes in the unit they are kept in
  -o, --format          comma separated list of fields, each with an optional %width (JobName%20)
  -p, --parsable        '|' after every field
  -P, --parsable2       '|' between fields
  -q, --qos             comma separated list of QOS
  -r, --partition       comma separated list of partitions
  -R, --reason          comma separated list of pending reasons (Priority, Resources, Dependency, ...)
  -s, --state           comma separated list of states (CA, CD, F, PD, R, TO, NF, OOM, ...)
  -S, --starttime       jobs that ran after this time (default: midnight today, or any with -j or -s)
  -T, --truncate        start and end times cut to the -S/-E window
      --units=[KMGTP]   the unit of sizes
  -u, --user            comma separated list of users (default: the caller's own jobs unless root
                        or -j; -1: all users)
  -W, --wckeys          comma separated list of workload characterization keys
  -x, --associations    comma separated list of association ids (there are none here: no job)
  -X, --allocations     the jobs' own lines only, not their steps
      --yaml            produce YAML output (the --json data)
      --use-local-uid   accepted: every node shares the controller's users
      --whole-hetjob    accepted: no job here has heterogeneous components
  -B, --batch-script, -c, --completion, --env-vars, -f, --file, -F, --flags
                        refused: job scripts, environments, job completion records and the
                        scheduler that started a job are not kept here
  -V, --version         output version information and exit
      --help            show this help message
";

/// `sacct`.
pub(crate) fn sacct(args: &[String]) -> Result<i32> {
    let t_now = now();
    let bad = |e: slurmcli::Invalid| anyhow!("{}", e.0);
    let (mut users, mut accounts, mut names, mut parts) =
        (None::<Vec<String>>, None::<Vec<String>>, None::<Vec<String>>, None::<Vec<String>>);
    let (mut fields, mut noheader, mut layout, mut no_steps, mut json) = (String::new(), false, Layout::Columns, false, false);
    let (mut since, mut until, mut states) = (None, None, None::<Vec<&'static str>>);
    let (mut brief, mut long, mut units, mut noconvert, mut delimiter) = (false, false, None::<Unit>, false, "|".to_string());
    let mut ids: Option<Vec<String>> = None;
    let mut all_users = false;
    let (mut features, mut gids, mut qos, mut reasons, mut wckeys) =
        (Vec::<String>::new(), None::<Vec<u32>>, None::<Vec<String>>, None::<Vec<String>>, None::<Vec<String>>);
    let (mut nnodes, mut ncpus, mut on_nodes) = (None::<(u64, u64)>, None::<(u64, u64)>, None::<Vec<String>>);
    let (mut limit_min, mut limit_max, mut truncate, mut yaml, mut nothing) = (None::<String>, None::<String>, false, false, false);
    let list = |v: &str| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect::<Vec<_>>();
    let (p, from_env) = crate::common::parse_env("sacct", args)?;
    let mut clusters = None;
    // `--whole-hetjob`: every component of a heterogeneous job named by any of them (`yes`),
    // only those named (`no`); by default, the leader's id names them all.
    let mut whole_hetjob: Option<bool> = None;
    for g in p.opts {
        let v = g.value();
        match g.key() {
            "whole-hetjob" => {
                whole_hetjob = match g.value.as_deref() {
                    None | Some("yes") => Some(true),
                    Some("no") => Some(false),
                    Some(o) => bail!("Invalid --whole-hetjob value: {o} (yes or no)"),
                };
            }
            "uid" => {
                // As Slurm's: `-u -1` is every user; a later -u undoes an earlier -a.
                all_users = v.trim() == "-1";
                users = Some(list(v)).filter(|_| !all_users);
            }
            "jobs" => {
                let l = ids.get_or_insert_with(Vec::new);
                for id in list(v) {
                    // A step (`12.batch`, `12.0`) selects its job.
                    let job = id.split('.').next().unwrap_or(&id);
                    if !crate::query::valid_job_id(job) {
                        bail!("Invalid job id: {}", id.escape_debug());
                    }
                    l.push(job.to_string());
                }
            }
            "format" => {
                fields.push_str(v);
                fields.push(',');
            }
            "starttime" => since = Some(slurmcli::parse_when(v, t_now).map_err(bad)?),
            "endtime" => until = Some(slurmcli::parse_when(v, t_now).map_err(bad)?),
            "state" => states = Some(slurmcli::parse_states(v).map_err(bad)?),
            "accounts" => accounts = Some(list(v)),
            "partition" => parts = Some(list(v)),
            "name" => names = Some(list(v)),
            "units" => units = Some(slurmcli::parse_unit(v).map_err(bad)?),
            "delimiter" => delimiter = v.to_string(),
            "noheader" => noheader = true,
            "parsable" => layout = Layout::Parsable,
            "parsable2" => layout = Layout::Parsable2,
            "allocations" => no_steps = true,
            "allusers" => all_users = true,
            "brief" => brief = true,
            "long" => long = true,
            "noconvert" => noconvert = true,
            "json" => json = true,
            "yaml" => yaml = true,
            "clusters" => clusters = Some(v.to_string()),
            // All of them, over every -C.
            "constraints" => features.extend(list(v)),
            "gid" => gids = Some(list(v).iter().map(|g| gid_of(g)).collect::<Result<_>>()?),
            "nnodes" => nnodes = Some(slurmcli::parse_count_range(v, "--nnodes").map_err(bad)?),
            "ncpus" => ncpus = Some(slurmcli::parse_count_range(v, "--ncpus").map_err(bad)?),
            "timelimit-min" => limit_min = Some(v.to_string()),
            "timelimit-max" => limit_max = Some(v.to_string()),
            "nodelist" => {
                on_nodes = Some(slurmcli::expand(v, 100_000).map_err(|e| anyhow!("Invalid node list {}: {}", v.escape_debug(), e.0))?)
            }
            "qos" => qos = Some(list(v)),
            "reason" => reasons = Some(list(v).iter().map(|r| r.to_ascii_lowercase()).collect()),
            "wckeys" => wckeys = Some(list(v)),
            // There are no association ids here: no job has one.
            "associations" => nothing = true,
            "truncate" => truncate = true,
            "helpformat" => {
                for row in slurmcli::SACCT_FIELDS.chunks(4) {
                    println!("{}", row.iter().map(|(n, _)| format!("{n:<20}")).collect::<String>().trim_end());
                }
                return Ok(0);
            }
            "help" => return help(HELP),
            "usage" => {
                return help("Usage: sacct [-abDlnPpX] [-j jobs] [-o fields] [-S time] [-E time] [-s states] [-u users] [--json]\n");
            }
            "version" => return version(),
            // One cluster, and no duplicates of a job id in its records.
            "duplicates" | "verbose" | "allclusters" | "federation" | "local" | "sibling" => {}
            other => unreachable!("sacct's table and its reader disagree on {other}"),
        }
    }
    if let Some(word) = p.args.first() {
        bail!("unexpected argument '{}'\nTry \"sacct --help\" for more information", word.escape_debug());
    }
    if brief {
        fields.push_str(slurmcli::SACCT_BRIEF);
        fields.push(',');
    }
    if long {
        fields.push_str(slurmcli::SACCT_LONG);
        fields.push(',');
    }
    if fields.is_empty() {
        fields = from_env.setting("SACCT_FORMAT").filter(|v| !v.trim().is_empty()).unwrap_or(slurmcli::SACCT_DEFAULT).to_string();
    }
    let cols = slurmcli::parse_sacct_fields(&fields).map_err(bad)?;
    let limits = slurmcli::parse_limit_range(limit_min.as_deref(), limit_max.as_deref()).map_err(bad)?;
    // Slurm's default window starts at midnight today, unless jobs or states are named.
    let since = since.unwrap_or(if ids.is_some() || states.is_some() { 0 } else { t_now - t_now.rem_euclid(86400) });
    if let Some(u) = until
        && u < since
    {
        bail!("Start time ({}) requested is after end time ({}).", iso(since), iso(u));
    }
    // Slurm's default: a user other than root sees their own jobs, unless they ask for all
    // (-a), name users (-u) or jobs (-j); root sees every job.
    if let Some(u) = users.as_deref().and_then(unknown_user) {
        bail!("Invalid user id: {u}");
    }
    let uid = nix::unistd::getuid().as_raw();
    if all_users {
        users = None;
    } else if users.is_none() && ids.is_none() && uid != 0 {
        users = Some(vec![uid.to_string()]);
    }
    let mut q = vec![format!("since={since}")];
    // Jobs named: the controller reads those alone (by id, not every finished job), each by
    // its number (an array task's N_K and a component's N+K are the job N's).
    if let Some(w) = &ids {
        let nums: Option<Vec<u64>> = w.iter().map(|x| x.split(['_', '+', '.']).next().and_then(|n| n.parse::<u64>().ok())).collect();
        // (More than the query takes: every finished job, filtered here as before.)
        let list = nums.filter(|n| !n.is_empty()).map(|n| n.iter().map(u64::to_string).collect::<Vec<_>>().join(","));
        if let Some(list) = list.filter(|l| l.len() <= 19_999) {
            q.push(format!("jobs={list}"));
        }
    }
    // The controller filters by name; a uid is matched below.
    if let Some([u]) = users.as_deref()
        && !u.bytes().all(|b| b.is_ascii_digit())
    {
        q.push(format!("user={u}"));
    }
    let t = Target::from_env()?;
    if let Some(c) = &clusters {
        crate::query::check_clusters(&t, c)?;
    }
    let path = format!("/v1/history?{}", q.join("&"));
    // --json and --yaml get the strings as they are (they escape them); the table, made visible.
    let mut jobs: Vec<JobInfo> = if json || yaml { crate::query::get_raw(&t, &path)? } else { get(&t, &path)? };
    jobs.retain(|j| {
        ids.as_ref().is_none_or(|w| {
            w.iter().any(|x| match (whole_hetjob, j.het_job_id) {
                (Some(true), Some(h)) => {
                    // Any component's id (N+K, or its own number) names them all.
                    let named = |x: &str| x == h.to_string() || x.split_once('+').is_some_and(|(a, _)| a == h.to_string());
                    named(x.as_str()) || x.parse::<u64>().is_ok_and(|n| n >= h && n < h + u64::from(j.het_size.unwrap_or(1)))
                }
                (Some(false), Some(_)) => *x == j.display_id || *x == j.id.to_string(),
                _ => selects(x, j),
            })
        }) && users.as_ref().is_none_or(|u| u.contains(&j.user) || u.contains(&j.uid.to_string()))
            && accounts.as_ref().is_none_or(|v| v.contains(&j.account))
            && names.as_ref().is_none_or(|v| v.contains(&j.name))
            && parts.as_ref().is_none_or(|v| v.contains(&j.partition))
            && states.as_ref().is_none_or(|s| s.contains(&j.state.as_str()))
            && until.is_none_or(|u| j.start.filter(|_| !j.start_estimated).unwrap_or(j.submit) <= u)
            && features.iter().all(|f| j.features.contains(f))
            && gids.as_ref().is_none_or(|g| g.contains(&j.gid))
            && nnodes.is_none_or(|(lo, hi)| (lo..=hi).contains(&u64::from(j.nodes)))
            && ncpus.is_none_or(|(lo, hi)| (lo..=hi).contains(&u64::from(j.cpus)))
            && limits.is_none_or(|r| slurmcli::limit_in(r, j.time_limit))
            && on_nodes.as_ref().is_none_or(|w| slurmcli::expand(&j.nodelist, 100_000).unwrap_or_default().iter().any(|n| w.contains(n)))
            && qos.as_ref().is_none_or(|q| q.contains(&j.qos))
            && reasons.as_ref().is_none_or(|r| r.contains(&j.reason.to_ascii_lowercase()))
            && wckeys.as_ref().is_none_or(|w| j.recorded.iter().any(|(k, v)| k == "WCKey" && w.contains(v)))
            && !nothing
    });
    // -T: times outside the window cut to it, as Slurm's.
    if truncate {
        for j in &mut jobs {
            let cut = |x: i64| until.map_or(x, |u| x.min(u)).max(since);
            if j.start.is_some() && !j.start_estimated {
                j.start = j.start.map(cut);
                j.end = j.end.or(until.filter(|u| *u < t_now)).map(cut);
            }
            for st in &mut j.steps {
                st.start = cut(st.start);
                st.end = st.end.or(until.filter(|u| *u < t_now)).map(cut);
            }
        }
    }
    if json || yaml {
        let items = jobs.iter().map(|j| job_json(j, t_now)).collect::<Vec<_>>();
        let v = json!({"jobs": items, "meta": meta(&["sacct", if yaml { "--yaml" } else { "--json" }]), "errors": [], "warnings": []});
        if yaml {
            print!("{}", yaml_serde::to_string(&v)?);
        } else {
            crate::query::print_json(&v)?;
        }
        return Ok(0);
    }
    // As Slurm's: --units wins over --noconvert.
    let units = units.or(noconvert.then_some(Unit::M));
    if !noheader {
        let names: Vec<String> = cols.iter().map(|c| c.name.to_string()).collect();
        println!("{}", slurmcli::sacct_line(&cols, &names, layout, &delimiter));
        if layout == Layout::Columns {
            println!("{}", slurmcli::sacct_rule(&cols));
        }
    }
    for j in &jobs {
        let vals: Vec<String> = cols.iter().map(|c| job_value(c.name, j, t_now, units)).collect();
        println!("{}", slurmcli::sacct_line(&cols, &vals, layout, &delimiter));
        if !no_steps {
            for s in &j.steps {
                let vals: Vec<String> = cols.iter().map(|c| step_value(c.name, j, s, t_now)).collect();
                println!("{}", slurmcli::sacct_line(&cols, &vals, layout, &delimiter));
            }
        }
    }
    Ok(0)
}

/// A group id, or the id of the group named `g` (`-g`).
fn gid_of(g: &str) -> Result<u32> {
    if let Ok(n) = g.parse() {
        return Ok(n);
    }
    match nix::unistd::Group::from_name(g) {
        Ok(Some(gr)) => Ok(gr.gid.as_raw()),
        _ => bail!("Invalid group id: {}", g.escape_debug()),
    }
}

/// The memory a job asked for in all, MiB.
fn req_mem(j: &JobInfo) -> u64 {
    match (j.mem_per_node_mb, j.mem_per_cpu_mb) {
        (Some(m), _) => m.saturating_mul(j.nodes as u64),
        (None, Some(m)) => m.saturating_mul(j.cpus as u64),
        _ => 0,
    }
}

/// TRES as Slurm lists them, by name: `billing=4,cpu=4,gres/gpu=2,mem=8G,node=1`.
fn tres(j: &JobInfo) -> String {
    let mut v = vec![format!("billing={}", j.cpus), format!("cpu={}", j.cpus)];
    if j.gpus > 0 {
        v.push(format!("gres/gpu={}", j.gpus));
    }
    let mem = req_mem(j);
    if mem > 0 {
        v.push(format!("mem={}", slurmcli::size(mem as f64, Unit::M, None)));
    }
    v.push(format!("node={}", j.nodes));
    v.join(",")
}

/// A job's state as sacct prints it: `CANCELLED by UID` for one a user cancelled.
fn state(j: &JobInfo) -> String {
    match (j.state.as_str(), j.cancelled_by) {
        ("CANCELLED", Some(uid)) => format!("CANCELLED by {uid}"),
        (s, _) => s.to_string(),
    }
}

fn job_value(field: &str, j: &JobInfo, t: i64, units: Option<Unit>) -> String {
    let el = elapsed(j, t);
    let started = j.start.is_some() && !j.start_estimated;
    match field {
        "JobID" => j.display_id.clone(),
        "JobIDRaw" => j.id.to_string(),
        "JobName" => j.name.clone(),
        // Recorded with the job (its owner and root see them).
        "Comment" | "WCKey" => j.recorded.iter().find(|(k, _)| k == field).map(|(_, v)| v.clone()).unwrap_or_default(),
        "Partition" => j.partition.clone(),
        "Account" => j.account.clone(),
        "User" => j.user.clone(),
        "UID" => j.uid.to_string(),
        "GID" | "Group" => j.gid.to_string(),
        "AllocCPUS" | "NCPUS" => if started || j.state != "PENDING" { j.cpus } else { 0 }.to_string(),
        "ReqCPUS" => j.cpus.to_string(),
        "AllocNodes" => if started { j.nodes } else { 0 }.to_string(),
        "NNodes" | "ReqNodes" => j.nodes.to_string(),
        "NTasks" => String::new(),
        "AllocTRES" => {
            if started {
                tres(j)
            } else {
                String::new()
            }
        }
        "ReqTRES" => tres(j),
        "ReqMem" => slurmcli::size(req_mem(j) as f64, Unit::M, units),
        "State" => state(j),
        "ExitCode" => j.exit_code.clone(),
        "DerivedExitCode" => j.exit_code.clone(),
        "Elapsed" => slurmcli::hms(Some(el)),
        "ElapsedRaw" => el.to_string(),
        "CPUTime" => slurmcli::hms(Some(el * j.cpus as i64)),
        "CPUTimeRAW" => (el * j.cpus as i64).to_string(),
        "NodeList" => {
            if j.nodelist.is_empty() {
                "None assigned".into()
            } else {
                j.nodelist.clone()
            }
        }
        "Start" => j.start.filter(|_| started).map_or("Unknown".into(), iso),
        "End" => j.end.map_or("Unknown".into(), iso),
        "Submit" | "Eligible" => iso(j.submit),
        "Timelimit" => slurmcli::hms(j.time_limit),
        "TimelimitRaw" => j.time_limit.map_or("UNLIMITED".into(), |l| (l / 60).to_string()),
        "Restarts" => j.restarts.to_string(),
        // Why it waits, or why it failed to start (a path its user may not use).
        "Reason" => j.message.clone().unwrap_or_else(|| j.reason.clone()),
        "QOS" | "QOSREQ" => j.qos.clone(),
        "Reservation" | "ReqReservation" => j.reservation.clone().unwrap_or_default(),
        "WorkDir" => j.workdir.clone(),
        "StdOut" => stdout_path(j, &j.output),
        "StdErr" => stdout_path(j, j.error.as_deref().unwrap_or(&j.output)),
        "StdIn" => "/dev/null".into(),
        "Constraints" => j.features.join("&"),
        "Cluster" => "tandem".into(),
        "Suspended" => slurmcli::hms(Some(crate::query::suspended(j, t))),
        _ => String::new(),
    }
}

/// A step's state: a cancelled job's steps are CANCELLED, as Slurm's.
fn step_state(j: &JobInfo, s: &StepInfo) -> &'static str {
    if !s.done {
        if j.state == "SUSPENDED" { "SUSPENDED" } else { "RUNNING" }
    } else if j.state == "CANCELLED" && (s.exit_code > 128 || s.id == "batch") {
        "CANCELLED"
    } else if s.timed_out {
        "TIMEOUT"
    } else if s.exit_code == 0 {
        "COMPLETED"
    } else {
        "FAILED"
    }
}

/// A step's exit code as `code:signal` (a task killed by signal n reports 128 + n).
fn step_exit(s: &StepInfo) -> String {
    if s.exit_code > 128 { format!("0:{}", s.exit_code - 128) } else { format!("{}:0", s.exit_code) }
}

fn step_value(field: &str, j: &JobInfo, s: &StepInfo, t: i64) -> String {
    let el = (s.end.unwrap_or(t) - s.start).max(0);
    let cpus = if s.cpus > 0 { s.cpus } else { j.cpus };
    match field {
        "JobID" | "JobIDRaw" => format!("{}.{}", if field == "JobID" { j.display_id.clone() } else { j.id.to_string() }, s.id),
        "JobName" => s.name.clone(),
        "Account" => j.account.clone(),
        "User" | "UID" | "GID" | "Group" | "Partition" | "ReqMem" | "Timelimit" | "QOS" | "Submit" | "Eligible" => String::new(),
        "AllocCPUS" | "NCPUS" | "ReqCPUS" => cpus.to_string(),
        "NNodes" | "AllocNodes" => slurmcli::expand(&s.nodelist, 100_000).map_or(0, |v| v.len()).to_string(),
        "NTasks" => s.ntasks.to_string(),
        "AllocTRES" | "ReqTRES" => format!("cpu={cpus},node={}", slurmcli::expand(&s.nodelist, 100_000).map_or(0, |v| v.len())),
        "State" => step_state(j, s).into(),
        "ExitCode" => step_exit(s),
        "Elapsed" => slurmcli::hms(Some(el)),
        "ElapsedRaw" => el.to_string(),
        "CPUTime" => slurmcli::hms(Some(el * cpus as i64)),
        "CPUTimeRAW" => (el * cpus as i64).to_string(),
        "NodeList" => s.nodelist.clone(),
        "Start" => iso(s.start),
        "End" => s.end.map_or("Unknown".into(), iso),
        "WorkDir" => j.workdir.clone(),
        "Cluster" => "tandem".into(),
        f => usage_value(f, s).unwrap_or_default(),
    }
}

/// A step's usage fields as Slurm prints them (`sacct`'s and `sstat`'s), from its tasks'
/// reports: MaxRSS (`2048K`) with its node and task, AveRSS, MinCPU with its node and task,
/// AveCPU (`HH:MM:SS`), TotalCPU (`MM:SS.mmm`). `None`: no such field, or nothing reported.
pub(crate) fn usage_value(field: &str, s: &StepInfo) -> Option<String> {
    let u = &s.usage;
    let max_rss = u.iter().max_by_key(|x| (x.2, std::cmp::Reverse(x.0)))?;
    let min_cpu = u.iter().min_by_key(|x| (x.3, x.0))?;
    let n = u.len() as u64;
    let cpu = |ms: u64| slurmcli::hms(Some((ms / 1000) as i64));
    Some(match field {
        "MaxRSS" => format!("{}K", max_rss.2),
        "MaxRSSNode" => max_rss.1.clone(),
        "MaxRSSTask" => max_rss.0.to_string(),
        "AveRSS" => format!("{}K", u.iter().map(|x| x.2).sum::<u64>() / n),
        "MinCPU" => cpu(min_cpu.3),
        "MinCPUNode" => min_cpu.1.clone(),
        "MinCPUTask" => min_cpu.0.to_string(),
        "AveCPU" => cpu(u.iter().map(|x| x.3).sum::<u64>() / n),
        "TotalCPU" => total_cpu(u.iter().map(|x| x.3).sum()),
        _ => return None,
    })
}

/// Slurm's TotalCPU: `[D-][HH:]MM:SS.mmm`.
fn total_cpu(ms: u64) -> String {
    let (s, m) = (ms / 1000, ms % 1000);
    let (d, h, mi, se) = (s / 86400, s % 86400 / 3600, s % 3600 / 60, s % 60);
    match (d, h) {
        (0, 0) => format!("{mi:02}:{se:02}.{m:03}"),
        (0, h) => format!("{h:02}:{mi:02}:{se:02}"),
        (d, h) => format!("{d}-{h:02}:{mi:02}:{se:02}"),
    }
}

#[cfg(test)]
mod usage_tests {
    use super::*;

    #[test]
    fn usage_fields_as_slurm_prints_them() {
        let s = StepInfo {
            id: "0".into(),
            command: String::new(),
            name: String::new(),
            ntasks: 2,
            nodelist: "node[1-2]".into(),
            done: false,
            exit_code: 0,
            start: 0,
            end: None,
            timed_out: false,
            cpus: 2,
            usage: vec![(0, "node1".into(), 1000, 61_500), (1, "node2".into(), 3000, 1_250)],
            layout: vec![("node1".into(), 1), ("node2".into(), 1)],
            error: None,
        };
        let v = |f: &str| usage_value(f, &s).unwrap();
        assert_eq!(
            (v("MaxRSS"), v("MaxRSSNode"), v("MaxRSSTask"), v("AveRSS")),
            ("3000K".into(), "node2".into(), "1".into(), "2000K".into())
        );
        assert_eq!(
            (v("MinCPU"), v("MinCPUTask"), v("AveCPU"), v("TotalCPU")),
            ("00:00:01".into(), "1".into(), "00:00:31".into(), "01:02.750".into())
        );
        assert_eq!(total_cpu(3_723_004), "01:02:03");
        assert_eq!(total_cpu(90_000_000), "1-01:00:00");
        assert_eq!(usage_value("MaxRSS", &StepInfo { usage: vec![], ..s.clone() }), None, "nothing reported: empty");
        assert_eq!(usage_value("JobName", &s), None);
    }
}

/// A job's TRES as data_parser's `TRES_LIST`: `[{type, name, id, count}]` (memory in MiB).
fn tres_json(j: &JobInfo) -> Value {
    let mut v = vec![
        json!({"type": "cpu", "name": "", "id": 1, "count": j.cpus}),
        json!({"type": "node", "name": "", "id": 4, "count": j.nodes}),
        json!({"type": "billing", "name": "", "id": 5, "count": j.cpus}),
    ];
    let mem = req_mem(j);
    if mem > 0 {
        v.insert(1, json!({"type": "mem", "name": "", "id": 2, "count": mem}));
    }
    if j.gpus > 0 {
        v.push(json!({"type": "gres", "name": "gpu", "id": 1001, "count": j.gpus}));
    }
    Value::Array(v)
}

/// A job as `sacct --json` gives it (data_parser's `JOB`).
fn job_json(j: &JobInfo, t: i64) -> Value {
    let el = elapsed(j, t);
    let steps: Vec<Value> = j
        .steps
        .iter()
        .map(|s| {
            let (code, sig) = if s.exit_code > 128 { (0, s.exit_code as i64 - 128) } else { (s.exit_code as i64, 0) };
            json!({
                "step": {"id": format!("{}.{}", j.id, s.id), "name": s.name},
                "state": [step_state(j, s)],
                "exit_code": {"status": [if sig > 0 { "SIGNALED" } else if code == 0 { "SUCCESS" } else { "ERROR" }],
                              "return_code": num(Some(code)), "signal": {"id": num((sig > 0).then_some(sig)), "name": ""}},
                "nodes": {"count": slurmcli::expand(&s.nodelist, 100_000).map_or(0, |v| v.len()), "range": s.nodelist},
                "tasks": {"count": s.ntasks},
                "time": {"start": num(Some(s.start)), "end": num(Some(s.end.unwrap_or(0))), "elapsed": (s.end.unwrap_or(t) - s.start).max(0)},
            })
        })
        .collect();
    let mut v = json!({
        "account": j.account,
        "array": {"job_id": j.array_job_id.unwrap_or(0), "task_id": num(j.array_task_id.map(i64::from)),
                  "limits": {"max": {"running": {"tasks": j.array_max_running.unwrap_or(0)}}}, "task": ""},
        "cluster": "tandem",
        "constraints": j.features.join("&"),
        "exit_code": exit_json(j),
        "derived_exit_code": exit_json(j),
        "group": j.gid.to_string(),
        "job_id": j.id,
        "name": j.name,
        "nodes": j.nodelist,
        "partition": j.partition,
        "qos": j.qos,
        "required": {"CPUs": j.cpus, "memory_per_node": num(j.mem_per_node_mb.map(|m| m as i64)), "memory_per_cpu": num(j.mem_per_cpu_mb.map(|m| m as i64))},
        "kill_request_user": j.cancelled_by.map(|u| u.to_string()).unwrap_or_default(),
        "restart_cnt": j.restarts,
        "state": {"current": [j.state], "reason": j.reason},
        "steps": steps,
        "stdout_expanded": stdout_path(j, &j.output),
        "stderr_expanded": stdout_path(j, j.error.as_deref().unwrap_or(&j.output)),
        "time": {
            "elapsed": el,
            "eligible": j.submit,
            "end": j.end.unwrap_or(0),
            "start": j.start.filter(|_| !j.start_estimated).unwrap_or(0),
            "submission": j.submit,
            "limit": limit_minutes(j.time_limit),
            "suspended": crate::query::suspended(j, t),
        },
        "tres": {"allocated": if j.start.is_some() && !j.start_estimated { tres_json(j) } else { json!([]) }, "requested": tres_json(j)},
        "user": j.user,
        "working_directory": j.workdir,
    });
    crate::data_parser::fill("JOB", &mut v);
    v
}
