//! `squeue`: the jobs the controller holds, in Slurm's formats (`-o` codes with widths, `-O`
//! long names, `-l`, `--start`), filtered (`-u -p -t -j -n -w -A -q -L -R --me`), sorted (`-S`),
//! their running steps (`-s`), pending array tasks collapsed into one line (`32_[3-5]`) unless `-r`, repeated (`-i`), or
//! as data_parser v0.0.44's JSON (`--json`). `SQUEUE_FORMAT`, `SQUEUE_FORMAT2`, `SQUEUE_SORT`,
//! `SQUEUE_ARRAY` and the filters' `SQUEUE_*` variables are read as Slurm reads them.

use anyhow::{Result, anyhow, bail};
use client::Target;
use std::collections::HashMap;
use wire::JobInfo;

use crate::common::now;
use crate::query::{get, help, iso, job_info_json, print_reply, selects, stdout_path, version};
use slurmcli::SQUEUE_FIELDS;

const USAGE: &str = "Usage: squeue [-A account] [--json] [-i seconds] [-j jobs] [-l] [--me] [-n names] [-o format] [-O fields]
              [-p partitions] [-q qos] [-r] [-S fields] [--start] [-t states] [-u users] [-w nodes] [-hV] [--help]
";

const HELP: &str = "Usage: squeue [OPTIONS]
  -A, --account=account(s)        comma separated list of accounts to view
  -a, --all                       accepted (every partition is shown)
  -h, --noheader                  no headers on output
  -i, --iterate=seconds           specify an interation period
  -j, --jobs=job(s)               comma separated list of jobs IDs to view
      --json                      produce JSON output (data_parser v0.0.44)
  -l, --long                      long report
  -L, --licenses=(license names)  jobs using these licenses (none here: no job)
      --me                        equivalent to --user=<my username>
  -n, --name=job_name(s)          comma separated list of job names to view
  -o, --format=format             format specification (%i %j %u %t %M %l %L %D %C %P %R %p %e %m %c %E %F %K %o ...)
  -O, --Format=format             long format specification (JobID,Name:30,TimeLeft:.10,...)
  -p, --partition=partition(s)    comma separated list of partitions to view
  -P, --priority                  accepted: a job is submitted to one partition here, so each
                                  pending job is listed once, as -P would
  -q, --qos=qos(s)                comma separated list of qos's to view
  -r, --array                     display one job array element per line
  -R, --reservation=name          jobs in this advance reservation
  -s, --steps[=step(s)]           the running steps (job.step, comma separated, attached: -s12.0)
  -S, --sort=fields               comma separated list of fields to sort on (e.g. -t,e,S)
      --start                     print expected start times of pending jobs
  -t, --states=states             comma separated list of states to view
  -u, --user=user_name(s)         comma separated list of users to view
  -v, --verbose                   accepted
  -w, --nodelist=hostlist         list of nodes to view
  -V, --version                   output version information and exit

Help options:
  --help                          show this help message
  --usage                         display a brief summary of squeue options
";

/// Fields printed right-justified without being cut (times, counts and node lists), as
/// Slurm's squeue.
const NEVER_CUT: &[&str] = &["TimeUsed", "TimeLimit", "TimeLeft", "NodeList", "ReasonList", "NumCPUs", "NumNodes"];

/// The states of jobs that have ended (shown only when asked for with `-t`).
const FINAL: &[&str] =
    &["BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT", "SPECIAL_EXIT"];

/// One line of the listing: a job, or pending tasks of an array collapsed into it.
struct Row<'a> {
    job: &'a JobInfo,
    /// The collapsed tasks' id (`32_[3-5]`).
    id: Option<String>,
}

fn split_list(v: &str) -> Vec<String> {
    v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
}

/// `squeue`.
pub(crate) fn squeue(args: &[String]) -> Result<i32> {
    // The input variables (SQUEUE_USERS, ...) come first among the options, as what they stand for.
    let (mut users, mut parts, mut accounts, mut names, mut qos) =
        (None::<Vec<String>>, None::<Vec<String>>, None::<Vec<String>>, None::<Vec<String>>, None::<Vec<String>>);
    let (mut states, mut sort, mut expand) = (None::<Vec<&'static str>>, None::<String>, false);
    let (mut fmt, mut long_fmt, mut noheader, mut start, mut long, mut json) = (None, None, false, false, false, false);
    let (mut ids, mut nodes, mut iterate): (Option<Vec<String>>, Option<Vec<String>>, Option<u64>) = (None, None, None);
    let (p, from_env) = crate::common::parse_env("squeue", args)?;
    let (mut clusters, mut steps, mut nothing, mut reservation) = (None, None::<Vec<String>>, false, None::<String>);
    // `--notme`; `--running-over`/`--running-under` (over or not, seconds).
    let (mut not_me, mut running) = (false, None::<(bool, i64)>);
    for g in p.opts {
        let v = g.value();
        match g.key() {
            "user" => users = Some(split_list(v)),
            "partition" => parts = Some(split_list(v)),
            "states" => states = Some(slurmcli::parse_states(v).map_err(|e| anyhow!("{}", e.0))?),
            "format" => {
                if long_fmt.is_some() {
                    bail!("-o (--format) is incompatible with -O (--Format)");
                }
                fmt = Some(v.to_string());
            }
            "Format" => {
                if fmt.is_some() {
                    bail!("-O (--Format) is incompatible with -o (--format)");
                }
                long_fmt = Some(v.to_string());
            }
            // As Slurm's: `-j` takes its list attached (`-j12`); otherwise the next word is it.
            "jobs" => {
                if let Some(v) = &g.value {
                    ids = Some(split_list(v));
                }
            }
            "name" => names = Some(split_list(v)),
            "account" => accounts = Some(split_list(v)),
            "qos" => qos = Some(split_list(v)),
            // There are no licenses here: no job uses one.
            "licenses" => nothing = true,
            "reservation" => reservation = Some(v.to_string()),
            "steps" => steps = Some(g.value.as_deref().map(split_list).unwrap_or_default()),
            "nodelist" => nodes = Some(slurmcli::expand(v, 100_000).map_err(|e| anyhow!("'{v}' invalid entry for --nodelist: {}", e.0))?),
            "sort" => sort = Some(v.to_string()),
            "iterate" => {
                iterate = Some(v.parse().ok().filter(|n| *n > 0).ok_or_else(|| anyhow!("--iterate={v}: a positive number of seconds"))?)
            }
            "noheader" => noheader = true,
            "start" => start = true,
            "long" => long = true,
            "array" => expand = true,
            "json" => json = true,
            "me" => users = Some(vec![me()]),
            "notme" => not_me = true,
            "running-over" | "running-under" => {
                let limit = slurmcli::parse_time(v).map_err(|e| anyhow!("--{}: {}", g.key(), e.0))?.unwrap_or(i64::MAX / 4);
                running = Some((g.key() == "running-over", limit));
            }
            "clusters" => clusters = Some(v.to_string()),
            "help" => return help(HELP),
            "usage" => return help(USAGE),
            "version" => return version(),
            // Every partition is shown; sizes are printed as they are; one cluster.
            "all" | "verbose" | "hide" | "local" | "federation" | "sibling" | "noconvert" | "array-unique" => {}
            other => unreachable!("squeue's table and its reader disagree on {other}"),
        }
    }
    // As Slurm's: job ids may also be given as a word (after a bare `-j`, or alone).
    if let Some(first) = p.args.first() {
        if ids.is_some() || p.args.len() > 1 {
            bail!(
                "unexpected argument '{}'\n{USAGE}Try \"squeue --help\" for more information",
                p.args[ids.is_none() as usize].escape_debug()
            );
        }
        ids = Some(split_list(first));
    }
    if let Some(bad) = ids.iter().flatten().find(|id| {
        let job = id.split('.').next().unwrap_or(id);
        !crate::query::valid_job_id(job)
    }) {
        bail!("Invalid job id: {bad}");
    }
    // As Slurm's: an unknown user is an error message, the others still listed.
    if let Some(u) = users.as_deref().and_then(crate::query::unknown_user) {
        eprintln!("squeue: error: Invalid user: {}", slurmcli::visible(u));
    }
    if long && fmt.is_some() {
        bail!("Options -o(--format) and -l(--long) are mutually exclusive. Please remove one and retry.");
    }
    if fmt.is_none() && long_fmt.is_none() && !long && !start {
        fmt = from_env.setting("SQUEUE_FORMAT").map(str::to_string);
        if fmt.is_none() {
            long_fmt = from_env.setting("SQUEUE_FORMAT2").map(str::to_string);
        }
    }
    if let Some(sel) = steps {
        let only = Only { users: users.as_deref(), parts: parts.as_deref(), nothing };
        return list_steps(&sel, fmt.as_deref().or(long_fmt.as_deref()), long_fmt.is_some(), noheader, &only);
    }
    if start && states.is_none() {
        states = Some(vec!["PENDING"]);
    }
    let items = match (&fmt, &long_fmt) {
        (Some(f), _) => slurmcli::parse_percent(f, SQUEUE_FIELDS, "job"),
        (None, Some(f)) => slurmcli::parse_long(f, SQUEUE_FIELDS, "job"),
        _ if start => slurmcli::parse_percent("%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R", SQUEUE_FIELDS, "job"),
        _ if long => slurmcli::parse_percent("%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R", SQUEUE_FIELDS, "job"),
        _ => slurmcli::parse_percent("%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R", SQUEUE_FIELDS, "job"),
    }
    .map_err(|e| anyhow!("{}", e.0))?;
    let sort_keys = match sort.as_deref() {
        Some(s) => slurmcli::parse_sort(s, SQUEUE_FIELDS).map_err(|e| anyhow!("{}", e.0))?,
        None if start => vec![("StartTime", false)],
        None => vec![("Partition", false), ("StateCompact", false)],
    };
    let t = Target::from_env()?;
    if let Some(c) = &clusters {
        crate::query::check_clusters(&t, c)?;
    }
    let mut first = true;
    loop {
        // Finished jobs stay in the controller for MinJobAge: asked for by state (`-t all`,
        // `-t CD`), or to tell a finished job from one that never was (`-j`).
        let finished_too = ids.is_some() || states.as_ref().is_some_and(|s| s.iter().any(|x| FINAL.contains(x)));
        // The controller filters by user and collapses pending array tasks itself, so a user's
        // listing of their own jobs carries only those, and a large array one row.
        let mut params: Vec<String> = Vec::new();
        if finished_too {
            params.push("all=true".into());
        }
        if let Some(u) =
            users.as_ref().filter(|u| !u.is_empty() && u.iter().all(|x| x.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))))
        {
            params.push(format!("user={}", u.join(",")));
        }
        if !expand && !json && ids.is_none() {
            params.push("collapse=true".into());
        }
        let path = if params.is_empty() { "/v1/jobs".to_string() } else { format!("/v1/jobs?{}", params.join("&")) };
        let path = path.as_str();
        // --json gets the strings as they are (JSON escapes them); the table, made visible.
        let mut list: Vec<JobInfo> = if json { crate::query::get_raw(&t, path)? } else { get(&t, path)? };
        // One job id that names no job the controller holds is an error, as Slurm's (of
        // several, unknown ones are skipped).
        if let Some([id]) = ids.as_deref()
            && !list.iter().any(|j| selects(id, j))
        {
            eprintln!("slurm_load_jobs error: Invalid job id specified");
            return Ok(1);
        }
        // Without `-t`: pending, running, suspended and completing jobs, as Slurm's.
        list.retain(|j| states.is_some() || !FINAL.contains(&j.state.as_str()));
        list.retain(|j| {
            users.as_ref().is_none_or(|u| u.contains(&j.user) || u.contains(&j.uid.to_string()))
                && parts.as_ref().is_none_or(|p| p.contains(&j.partition))
                && accounts.as_ref().is_none_or(|p| p.contains(&j.account))
                && names.as_ref().is_none_or(|p| p.contains(&j.name))
                && qos.as_ref().is_none_or(|p| p.contains(&j.qos))
                && states.as_ref().is_none_or(|s| s.contains(&j.state.as_str()))
                && ids.as_ref().is_none_or(|w| w.iter().any(|x| selects(x, j)))
                && nodes.as_ref().is_none_or(|w| slurmcli::expand(&j.nodelist, 100_000).unwrap_or_default().iter().any(|n| w.contains(n)))
                && !nothing
                && reservation.as_ref().is_none_or(|r| j.reservation.as_ref() == Some(r))
                && !(not_me && j.uid == nix::unistd::getuid().as_raw())
                && running.is_none_or(|(over, limit)| {
                    let ran = j.start.filter(|_| j.running() && !j.start_estimated).map(|s| now() - s);
                    ran.is_some_and(|r| if over { r > limit } else { r < limit })
                })
        });
        let t_now = now();
        let used = slurmcli::fields_used(&items);
        let needs_prio = used.iter().chain(sort_keys.iter().map(|(n, _)| n)).any(|n| *n == "Priority" || *n == "PriorityLong");
        let prio: HashMap<u64, f64> = if needs_prio {
            get::<Vec<(u64, serde_json::Value)>>(&t, "/v1/priority")?
                .into_iter()
                .map(|(id, b)| (id, b["total"].as_f64().unwrap_or(0.0)))
                .collect()
        } else {
            HashMap::new()
        };
        if json {
            let jobs = list.iter().map(|j| job_info_json(j, t_now)).collect();
            return print_reply("jobs", jobs, &["squeue", "--json"], t_now, true);
        }
        // Slurm's default order, then each key from the last, as Slurm's sorts: stable here,
        // so ties keep the job id order.
        list.sort_by_key(|j| j.id);
        for (name, desc) in sort_keys.iter().rev() {
            list.sort_by(|x, y| {
                let o = compare(name, x, y, &prio, t_now);
                if *desc { o.reverse() } else { o }
            });
        }
        let rows = if expand { list.iter().map(|job| Row { job, id: None }).collect() } else { collapse(&list) };
        if iterate.is_some() && !first {
            println!();
        }
        if !noheader && (iterate.is_some() || long) {
            crate::query::print_date(t_now);
        }
        if !noheader {
            println!("{}", slurmcli::render(&items, |n| slurmcli::header_of(SQUEUE_FIELDS, n).to_string(), &[]));
        }
        for r in &rows {
            println!("{}", slurmcli::render(&items, |n| value(n, r, &prio, t_now), NEVER_CUT));
        }
        first = false;
        match iterate {
            Some(s) => {
                use std::io::Write;
                let _ = std::io::stdout().flush();
                std::thread::sleep(std::time::Duration::from_secs(s));
            }
            None => return Ok(0),
        }
    }
}

/// The filters `squeue -s` applies to the steps' jobs.
struct Only<'a> {
    users: Option<&'a [String]>,
    parts: Option<&'a [String]>,
    /// A filter no job passes (`-L`).
    nothing: bool,
}

/// `squeue -s`: the running steps of the running jobs (those of `sel` when it names some), in
/// Slurm's step format (`%.15i %.8j %.9P %.8u %.9M %N` unless `-o`/`-O`).
fn list_steps(sel: &[String], fmt: Option<&str>, long_form: bool, noheader: bool, only: &Only<'_>) -> Result<i32> {
    let items = match fmt {
        Some(f) if long_form => slurmcli::parse_long(f, SQUEUE_FIELDS, "step"),
        Some(f) => slurmcli::parse_percent(f, SQUEUE_FIELDS, "step"),
        None => slurmcli::parse_percent("%.15i %.8j %.9P %.8u %.9M %N", SQUEUE_FIELDS, "step"),
    }
    .map_err(|e| anyhow!("{}", e.0))?;
    let t = Target::from_env()?;
    let mut jobs: Vec<JobInfo> = get(&t, "/v1/jobs")?;
    jobs.sort_by_key(|j| j.id);
    let t_now = now();
    if !noheader {
        println!("{}", slurmcli::render(&items, |n| step_header(n).to_string(), &[]));
    }
    for j in jobs.iter().filter(|j| {
        j.running()
            && !only.nothing
            && only.users.is_none_or(|u| u.contains(&j.user) || u.contains(&j.uid.to_string()))
            && only.parts.is_none_or(|p| p.contains(&j.partition))
    }) {
        for st in j.steps.iter().filter(|st| !st.done && (sel.is_empty() || slurmcli::step_selected(sel, j.id, &j.display_id, &st.id))) {
            println!("{}", slurmcli::render(&items, |n| step_value(n, j, st, t_now), NEVER_CUT));
        }
    }
    Ok(0)
}

/// A step field's header: Slurm's `STEPID` for the id, else the job field's.
fn step_header(name: &str) -> &'static str {
    match name {
        "JobArrayID" | "JobID" => "STEPID",
        _ => slurmcli::header_of(SQUEUE_FIELDS, name),
    }
}

/// The text of field `name` for step `st` of job `j` (the fields Slurm fills for steps; the
/// others empty).
fn step_value(name: &str, j: &JobInfo, st: &wire::StepInfo, t: i64) -> String {
    match name {
        "JobArrayID" | "JobID" => format!("{}.{}", j.display_id, st.id),
        "Name" => st.name.clone(),
        "Partition" => j.partition.clone(),
        "UserName" => j.user.clone(),
        "UserID" => j.uid.to_string(),
        "TimeUsed" => slurmcli::squeue_secs(st.end.unwrap_or(t).saturating_sub(st.start).max(0)),
        "TimeLimit" => j.time_limit.map_or_else(|| "UNLIMITED".into(), slurmcli::squeue_secs),
        "StartTime" => iso(st.start),
        "NodeList" => st.nodelist.clone(),
        "NumTasks" => st.ntasks.to_string(),
        "NumCPUs" => st.cpus.to_string(),
        "NumNodes" => slurmcli::expand(&st.nodelist, 100_000).map_or(0, |n| n.len()).to_string(),
        "State" => "RUNNING".into(),
        "StateCompact" => "R".into(),
        "Account" => j.account.clone(),
        "QOS" => j.qos.clone(),
        "Cluster" => "tandem".into(),
        _ => String::new(),
    }
}

/// The caller's user name.
pub(crate) fn me() -> String {
    nix::unistd::User::from_uid(nix::unistd::getuid()).ok().flatten().map_or_else(|| "root".into(), |u| u.name)
}

/// Pending tasks of an array that wait for the same reason collapse into one line, as the
/// tasks Slurm has not split off its array's record (`32_[3-5]`).
fn collapse(list: &[JobInfo]) -> Vec<Row<'_>> {
    let mut rows: Vec<Row<'_>> = Vec::new();
    let mut groups: HashMap<(u64, String), (usize, Vec<u32>)> = HashMap::new();
    for j in list {
        if let (Some(a), Some(task), "PENDING") = (j.array_job_id, j.array_task_id, j.state.as_str()) {
            // The controller may have collapsed them already (`array_collapsed`).
            let mine: Vec<u32> = if j.array_collapsed.is_empty() {
                vec![task]
            } else {
                j.array_collapsed.iter().flat_map(|&(a, b)| a..=b.min(a.saturating_add(1 << 20))).collect()
            };
            let key = (a, j.reason.clone());
            if let Some((at, tasks)) = groups.get_mut(&key) {
                tasks.extend(mine);
                rows[*at].id = None;
                continue;
            }
            groups.insert(key, (rows.len(), mine));
        }
        rows.push(Row { job: j, id: None });
    }
    for ((a, _), (at, tasks)) in groups {
        if tasks.len() > 1 {
            rows[at].id = Some(slurmcli::array_id(a, &tasks, rows[at].job.array_max_running));
        }
    }
    rows
}

fn compare(name: &str, x: &JobInfo, y: &JobInfo, prio: &HashMap<u64, f64>, now: i64) -> std::cmp::Ordering {
    let n = |j: &JobInfo| -> f64 {
        match name {
            "NumCPUs" => j.cpus as f64,
            "NumNodes" => j.nodes as f64,
            "EndTime" => j.end.unwrap_or(0) as f64,
            "StartTime" => j.start.unwrap_or(0) as f64,
            "SubmitTime" => j.submit as f64,
            "TimeLimit" => j.time_limit.unwrap_or(i64::MAX) as f64,
            "TimeUsed" => crate::query::elapsed(j, now) as f64,
            "TimeLeft" => j.time_limit.map_or(f64::MAX, |l| (l - crate::query::elapsed(j, now)) as f64),
            "Priority" | "PriorityLong" => prio.get(&j.id).copied().unwrap_or(0.0),
            "JobArrayID" | "JobID" => j.id as f64,
            "MinMemory" => j.mem_per_node_mb.or(j.mem_per_cpu_mb).unwrap_or(0) as f64,
            _ => f64::NAN,
        }
    };
    let (a, b) = (n(x), n(y));
    if a.is_nan() {
        let r0 = Row { job: x, id: None };
        let r1 = Row { job: y, id: None };
        value(name, &r0, prio, now).cmp(&value(name, &r1, prio, now))
    } else {
        a.total_cmp(&b)
    }
}

/// The text of field `name` for a row.
fn value(name: &str, r: &Row<'_>, prio: &HashMap<u64, f64>, t: i64) -> String {
    let j = r.job;
    let pending = j.state == "PENDING";
    let used = crate::query::elapsed(j, t);
    match name {
        "JobArrayID" => r.id.clone().unwrap_or_else(|| j.display_id.clone()),
        "JobID" => j.id.to_string(),
        "ArrayJobID" => j.array_job_id.unwrap_or(j.id).to_string(),
        "ArrayTaskID" => match (&r.id, j.array_task_id) {
            (Some(id), _) => id.split_once('_').map_or("N/A", |(_, x)| x).trim_matches(['[', ']']).to_string(),
            (None, Some(k)) => k.to_string(),
            (None, None) => "N/A".into(),
        },
        "Name" => j.name.clone(),
        "UserName" => j.user.clone(),
        "UserID" => j.uid.to_string(),
        "GroupName" | "GroupID" => j.gid.to_string(),
        "Account" => j.account.clone(),
        "Partition" => j.partition.clone(),
        "QOS" => j.qos.clone(),
        "Reservation" => j.reservation.clone().unwrap_or_else(|| "(null)".into()),
        "StateCompact" => slurmcli::state_code(&j.state).into(),
        "State" => j.state.clone(),
        "TimeUsed" => slurmcli::squeue_secs(if pending { 0 } else { used }),
        "TimeLimit" => j.time_limit.map_or_else(|| "UNLIMITED".into(), slurmcli::squeue_secs),
        "TimeLeft" => j.time_limit.map_or_else(|| "UNLIMITED".into(), |l| slurmcli::squeue_secs(l - if pending { 0 } else { used })),
        "NumNodes" => j.nodes.to_string(),
        "NumCPUs" => j.cpus.to_string(),
        "NumTasks" => j.ntasks.to_string(),
        "CPUsPerTask" => j.cpus_per_task.to_string(),
        "MinCPUs" => j.cpus_per_task.to_string(),
        "MinMemory" => slurmcli::size(j.mem_per_node_mb.or(j.mem_per_cpu_mb).unwrap_or(0) as f64, slurmcli::Unit::M, None),
        "tres-per-node" => {
            if j.gpus > 0 {
                format!("gres/gpu:{}", j.gpus)
            } else {
                "N/A".into()
            }
        }
        "NodeList" => j.nodelist.clone(),
        // The nodes a pending job is expected to start on: not predicted here.
        "SchedNodes" => "(null)".into(),
        "BatchHost" => {
            if j.nodelist.is_empty() {
                "n/a".into()
            } else {
                crate::query::first_node(&j.nodelist)
            }
        }
        "ReqNodes" => j.req_nodes.clone(),
        "ExcNodes" => j.exc_nodes.clone(),
        "Reason" => j.reason.clone(),
        "ReasonList" => {
            if pending {
                format!("({})", j.reason)
            } else {
                j.nodelist.clone()
            }
        }
        "StartTime" => j.start.map_or("N/A".into(), iso),
        "EndTime" => match (j.end, j.start.zip(j.time_limit)) {
            (Some(e), _) => iso(e),
            (None, Some((s, l))) => iso(s + l),
            (None, None) if !pending => "NONE".into(),
            _ => "N/A".into(),
        },
        "SubmitTime" => iso(j.submit),
        "Dependency" => {
            if j.dependency.is_empty() {
                "(null)".into()
            } else {
                j.dependency.clone()
            }
        }
        "Feature" => {
            if j.features.is_empty() {
                "(null)".into()
            } else {
                j.features.join("&")
            }
        }
        "Priority" => format!("{:16.14}", prio.get(&j.id).copied().unwrap_or(0.0) / u32::MAX as f64),
        "PriorityLong" => format!("{:.0}", prio.get(&j.id).copied().unwrap_or(0.0)),
        "Command" => "(batch script)".into(),
        "WorkDir" => j.workdir.clone(),
        "Nice" => j.nice.to_string(),
        "STDOUT" => stdout_path(j, &j.output),
        "STDERR" => stdout_path(j, j.error.as_deref().unwrap_or(&j.output)),
        "ExitCode" => j.exit_code.clone(),
        "RestartCnt" => j.restarts.to_string(),
        "Cluster" => "tandem".into(),
        _ => String::new(),
    }
}
