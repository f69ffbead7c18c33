//! The Slurm-compatible commands: `sbatch`, `squeue`, `scancel`, `sinfo`, `sacct`, `scontrol`,
//! `srun`, `sprio` (also `tandem submit`, `queue`, `cancel`, `nodes`, `history`, `show`, `run`,
//! `priority`). They parse Slurm's options, talk to the controller over its API, and print what
//! Slurm prints. Errors go to stderr as `<command>: error: ...` with exit code 1.

use anyhow::{Context, Result, bail};
use std::collections::HashMap;

use crate::common::{now, runtime, submission};
use client::{Target, send};
use wire::*;

/// `YYYY-MM-DDTHH:MM:SS` (UTC) for Unix seconds, as Slurm prints times.
pub(crate) fn iso(t: i64) -> String {
    jiff::Timestamp::from_second(t).map_or_else(|_| "Unknown".into(), |ts| ts.strftime("%Y-%m-%dT%H:%M:%S").to_string())
}

fn short_state(s: &str) -> &'static str {
    match s {
        "PENDING" => "PD",
        "RUNNING" => "R",
        "COMPLETED" => "CD",
        "FAILED" => "F",
        "CANCELLED" => "CA",
        "TIMEOUT" => "TO",
        "NODE_FAIL" => "NF",
        "OUT_OF_MEMORY" => "OOM",
        _ => "??",
    }
}

/// Takes an option's value from `--opt=value`, `--opt value`, `-o value` or `-ovalue`.
struct Args {
    v: Vec<String>,
    i: usize,
}

impl Args {
    fn new(v: &[String]) -> Args {
        Args { v: v.to_vec(), i: 0 }
    }

    fn next(&mut self) -> Option<String> {
        let a = self.v.get(self.i).cloned();
        self.i += 1;
        a
    }

    /// If `a` is one of the names, returns its value (consuming the next word if needed).
    fn value(&mut self, a: &str, short: Option<&str>, long: &str) -> Result<Option<String>> {
        if let Some(v) = a.strip_prefix(&format!("--{long}=")) {
            return Ok(Some(v.to_string()));
        }
        if a == format!("--{long}") || short.is_some_and(|s| a == s) {
            return self.next().map(Some).with_context(|| format!("option '{a}' requires an argument"));
        }
        if let Some(s) = short
            && let Some(v) = a.strip_prefix(s)
            && !v.is_empty()
            && s.len() == 2
        {
            return Ok(Some(v.to_string()));
        }
        Ok(None)
    }
}

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
            eprintln!("sbatch: {line}");
        }
    }
    let req = submission(batch)?;
    let t = Target::from_env()?;
    let r: SubmitResponse = runtime()?.block_on(send(&t, "POST", "/v1/jobs", Some(&req), &[]))?.json()?;
    if let Some(msg) = r.test_only {
        eprintln!("sbatch: {msg}");
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

fn jobs(t: &Target, query: &str) -> Result<Vec<JobInfo>> {
    Ok(runtime()?.block_on(send(t, "GET", &format!("/v1/jobs{query}"), None::<&()>, &[]))?.json()?)
}

fn field(j: &JobInfo, c: char, t: i64) -> String {
    match c {
        'i' | 'A' => j.display_id.clone(),
        'j' => j.name.clone(),
        'u' => j.user.clone(),
        'a' => j.account.clone(),
        'P' => j.partition.clone(),
        'q' => j.qos.clone(),
        't' => short_state(&j.state).into(),
        'T' => j.state.clone(),
        'M' => match (j.state.as_str(), j.start) {
            ("RUNNING", Some(s)) => slurmcli::format_time(Some(t - s)),
            (_, Some(s)) if j.end.is_some() && !j.start_estimated => slurmcli::format_time(Some(j.end.unwrap_or(s) - s)),
            _ => "0:00".into(),
        },
        'l' => slurmcli::format_time(j.time_limit),
        'D' => j.nodes.to_string(),
        'C' => j.cpus.to_string(),
        'b' => {
            if j.gpus > 0 {
                format!("gres/gpu:{}", j.gpus)
            } else {
                "N/A".into()
            }
        }
        'N' => j.nodelist.clone(),
        'r' => j.reason.clone(),
        'R' => {
            if j.state == "PENDING" {
                format!("({})", j.reason)
            } else {
                j.nodelist.clone()
            }
        }
        'S' => j.start.map_or("N/A".into(), iso),
        'V' => iso(j.submit),
        'Z' => j.workdir.clone(),
        _ => String::new(),
    }
}

fn header(c: char) -> &'static str {
    match c {
        'i' => "JOBID",
        'A' => "JOBID",
        'j' => "NAME",
        'u' => "USER",
        'a' => "ACCOUNT",
        'P' => "PARTITION",
        'q' => "QOS",
        't' => "ST",
        'T' => "STATE",
        'M' => "TIME",
        'l' => "TIME_LIMIT",
        'D' => "NODES",
        'C' => "CPUS",
        'b' => "TRES_PER_NODE",
        'N' => "NODELIST",
        'r' => "REASON",
        'R' => "NODELIST(REASON)",
        'S' => "START_TIME",
        'V' => "SUBMIT_TIME",
        'Z' => "WORK_DIR",
        _ => "?",
    }
}

/// Parses a squeue `--format` string into (right-aligned, width, field) items and literals.
fn parse_format(f: &str) -> Result<Vec<(bool, Option<usize>, Option<char>, String)>> {
    let mut out = Vec::new();
    let mut chars = f.chars().peekable();
    let mut lit = String::new();
    while let Some(c) = chars.next() {
        if c != '%' {
            lit.push(c);
            continue;
        }
        if !lit.is_empty() {
            out.push((false, None, None, std::mem::take(&mut lit)));
        }
        let right = chars.peek() == Some(&'.');
        if right {
            chars.next();
        }
        let mut w = String::new();
        while chars.peek().is_some_and(|c| c.is_ascii_digit()) {
            w.push(chars.next().expect("peeked"));
        }
        let code = chars.next().context("--format ends in '%'")?;
        if header(code) == "?" {
            bail!("invalid --format field '%{code}'");
        }
        out.push((right, w.parse().ok(), Some(code), String::new()));
    }
    if !lit.is_empty() {
        out.push((false, None, None, lit));
    }
    Ok(out)
}

fn render(items: &[(bool, Option<usize>, Option<char>, String)], value: impl Fn(char) -> String) -> String {
    let mut s = String::new();
    for (right, w, code, lit) in items {
        match code {
            None => s.push_str(lit),
            Some(c) => {
                let mut v = value(*c);
                if let Some(w) = w {
                    v.truncate(*w);
                    if *right {
                        s.push_str(&format!("{v:>w$}"));
                    } else {
                        s.push_str(&format!("{v:<w$}"));
                    }
                } else {
                    s.push_str(&v);
                }
            }
        }
    }
    s.trim_end().to_string()
}

/// `squeue`.
pub(crate) fn squeue(args: &[String]) -> Result<i32> {
    let mut a = Args::new(args);
    let (mut user, mut part, mut states, mut fmt, mut noheader, mut start, mut ids) = (None, None, None, None, false, false, None);
    while let Some(x) = a.next() {
        if let Some(v) = a.value(&x, Some("-u"), "user")? {
            user = Some(v);
        } else if let Some(v) = a.value(&x, Some("-p"), "partition")? {
            part = Some(v);
        } else if let Some(v) = a.value(&x, Some("-t"), "states")? {
            states = Some(v);
        } else if let Some(v) = a.value(&x, Some("-o"), "format")? {
            fmt = Some(v);
        } else if let Some(v) = a.value(&x, Some("-j"), "jobs")? {
            ids = Some(v);
        } else if x == "-h" || x == "--noheader" {
            noheader = true;
        } else if x == "--start" {
            start = true;
        } else if x == "--me" {
            user = Some(nix::unistd::User::from_uid(nix::unistd::getuid()).ok().flatten().map_or_else(|| "root".into(), |u| u.name));
        } else {
            bail!("unrecognized option '{x}'\nUsage: squeue [-u user] [-p partition] [-t states] [-j ids] [--start] [-o format] [-h]");
        }
    }
    let mut q = vec![];
    if let Some(u) = &user {
        q.push(format!("user={u}"));
    }
    if let Some(p) = &part {
        q.push(format!("partition={p}"));
    }
    if let Some(s) = &states {
        let norm: Vec<String> = s
            .split(',')
            .map(|x| match x.to_ascii_uppercase().as_str() {
                "PD" => "PENDING".into(),
                "R" => "RUNNING".into(),
                o => o.to_string(),
            })
            .collect();
        q.push(format!("state={}", norm.join(",")));
    }
    let query = if q.is_empty() { String::new() } else { format!("?{}", q.join("&")) };
    let mut list = jobs(&Target::from_env()?, &query)?;
    if let Some(ids) = ids {
        let want: Vec<String> = ids.split(',').map(str::to_string).collect();
        // An array's job id selects all its tasks, as in Slurm.
        list.retain(|j| want.iter().any(|w| selects(w, j)));
    }
    if start {
        list.retain(|j| j.state == "PENDING");
    }
    let default = if start { "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %R" } else { "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R" };
    let items = parse_format(fmt.as_deref().unwrap_or(default))?;
    let t = now();
    if !noheader {
        println!("{}", render(&items, |c| header(c).to_string()));
    }
    for j in &list {
        println!("{}", render(&items, |c| field(j, c, t)));
    }
    Ok(0)
}

/// `scancel`.
pub(crate) fn scancel(args: &[String]) -> Result<i32> {
    let mut a = Args::new(args);
    let (mut user, mut signal, mut targets) = (None, None, Vec::new());
    while let Some(x) = a.next() {
        if let Some(v) = a.value(&x, Some("-u"), "user")? {
            user = Some(v);
        } else if let Some(v) = a.value(&x, Some("-s"), "signal")? {
            signal = Some(slurmcli::signal_number(&v).with_context(|| format!("Unknown job signal: {v}"))?);
        } else if x.starts_with('-') {
            bail!("unrecognized option '{x}'\nUsage: scancel [-s signal] [-u user] job_id[_array_id] ...");
        } else {
            targets.push(x);
        }
    }
    let t = Target::from_env()?;
    let all = jobs(&t, "")?;
    let mut ids: Vec<u64> = Vec::new();
    for x in &targets {
        let (job, task) = match x.split_once('_') {
            Some((j, k)) => (j, Some(k)),
            None => (x.as_str(), None),
        };
        let jid: u64 = job.parse().with_context(|| format!("Invalid job id {x}"))?;
        let matched: Vec<u64> = all
            .iter()
            .filter(|j| match task {
                Some(k) => j.display_id == format!("{jid}_{k}"),
                None => j.id == jid || j.display_id.starts_with(&format!("{jid}_")),
            })
            .map(|j| j.id)
            .collect();
        if matched.is_empty() {
            ids.push(jid); // let the controller say why (finished, unknown)
        } else {
            ids.extend(matched);
        }
    }
    if let Some(u) = &user {
        ids.extend(all.iter().filter(|j| &j.user == u).map(|j| j.id));
    }
    if ids.is_empty() {
        bail!("No job identification provided");
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
            eprintln!("scancel: error: Kill job error on job id {id}: {}", r.error());
            rc = 1;
        }
    }
    Ok(rc)
}

/// The nodes in Slurm's order: by name, numbers compared as numbers (`node2` before `node10`),
/// whatever order they registered in.
fn nodes(t: &Target) -> Result<Vec<NodeInfo>> {
    let mut v: Vec<NodeInfo> = runtime()?.block_on(send(t, "GET", "/v1/nodes", None::<&()>, &[]))?.json()?;
    v.sort_by_cached_key(|n| {
        let digits = n.name.len() - n.name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (stem, num) = n.name.split_at(n.name.len() - digits);
        (stem.to_string(), num.parse::<u64>().unwrap_or(0), n.name.clone())
    });
    Ok(v)
}

/// `sinfo`.
pub(crate) fn sinfo(args: &[String]) -> Result<i32> {
    let (mut node_oriented, mut reasons, mut header) = (false, false, true);
    for x in args {
        match x.as_str() {
            "-N" | "--Node" => node_oriented = true,
            "-R" | "--list-reasons" => reasons = true,
            "-l" | "--long" => {}
            "-h" | "--noheader" => header = false,
            o => bail!("unrecognized option '{o}'\nUsage: sinfo [-N] [-R] [-l] [-h]"),
        }
    }
    let list = nodes(&Target::from_env()?)?;
    if reasons {
        if header {
            println!("{:<20} {:<9} NODELIST", "REASON", "STATE");
        }
        for n in list.iter().filter(|n| n.reason.is_some()) {
            println!("{:<20} {:<9} {}", n.reason.clone().unwrap_or_default(), n.state, n.name);
        }
        return Ok(0);
    }
    if node_oriented {
        if header {
            println!(
                "{:<12} {:>5} {:<9} {:<10} {:>9} {:>10} {:<16} REASON",
                "NODELIST", "NODES", "PARTITION", "STATE", "CPUS(A/T)", "MEMORY", "GRES"
            );
        }
        for n in &list {
            let gres = if n.gpus.0 > 0 {
                format!("gpu:{}:{}", n.gpus.2.clone().unwrap_or_else(|| "gpu".into()), n.gpus.0)
            } else {
                "(null)".into()
            };
            println!(
                "{:<12} {:>5} {:<9} {:<10} {:>9} {:>10} {:<16} {}",
                n.name,
                1,
                "batch*",
                n.state,
                format!("{}/{}", n.cpus.1, n.cpus.0),
                n.memory_mb.0,
                gres,
                n.reason.clone().unwrap_or_else(|| "none".into())
            );
        }
        return Ok(0);
    }
    if header {
        println!("{:<9} {:>5} {:>10} {:>5} {:<6} NODELIST", "PARTITION", "AVAIL", "TIMELIMIT", "NODES", "STATE");
    }
    let mut by: Vec<(String, Vec<String>)> = Vec::new();
    for n in &list {
        match by.iter_mut().find(|(s, _)| *s == n.state) {
            Some((_, v)) => v.push(n.name.clone()),
            None => by.push((n.state.clone(), vec![n.name.clone()])),
        }
    }
    for (state, names) in by {
        println!("{:<9} {:>5} {:>10} {:>5} {:<6} {}", "batch*", "up", "infinite", names.len(), state, slurmcli::compress(&names));
    }
    Ok(0)
}

/// `sacct`.
pub(crate) fn sacct(args: &[String]) -> Result<i32> {
    let mut a = Args::new(args);
    let (mut user, mut fmt, mut noheader, mut parsable, mut no_steps, mut since) = (None, None, false, false, false, 0i64);
    // `-j` repeats and takes comma lists; every id given counts (Slurm's).
    let mut ids: Option<Vec<String>> = None;
    while let Some(x) = a.next() {
        if let Some(v) = a.value(&x, Some("-u"), "user")? {
            user = Some(v);
        } else if let Some(v) = a.value(&x, Some("-j"), "jobs")? {
            let list = ids.get_or_insert_with(Vec::new);
            for id in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                // A step (`12.batch`, `12.0`) selects its job.
                let job = id.split('.').next().unwrap_or(id);
                if !job.split('_').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) || job.split('_').count() > 2 {
                    bail!("Invalid job id: {id}");
                }
                list.push(job.to_string());
            }
        } else if let Some(v) = a.value(&x, Some("-o"), "format")? {
            fmt = Some(v);
        } else if let Some(v) = a.value(&x, Some("-S"), "starttime")? {
            since = slurmcli::parse_begin(&v, now()).map_err(|e| anyhow::anyhow!("{}", e.0))?;
        } else if x == "-n" || x == "--noheader" {
            noheader = true;
        } else if x == "-P" || x == "--parsable2" || x == "-p" || x == "--parsable" {
            parsable = true;
        } else if x == "-X" || x == "--allocations" {
            no_steps = true;
        } else if x == "-a" || x == "--allusers" {
        } else {
            bail!("unrecognized option '{x}'\nUsage: sacct [-j ids] [-u user] [-S time] [-X] [-P] [-n] [--format=fields]");
        }
    }
    let mut q = vec![format!("since={since}")];
    if let Some(u) = &user {
        q.push(format!("user={u}"));
    }
    let list: Vec<JobInfo> =
        runtime()?.block_on(send(&Target::from_env()?, "GET", &format!("/v1/history?{}", q.join("&")), None::<&()>, &[]))?.json()?;
    // An array's id selects all its tasks (`ID_N`), as Slurm's does.
    let want = ids;
    let fields: Vec<String> = fmt
        .unwrap_or_else(|| "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode".into())
        .split(',')
        .map(|f| f.trim().to_string())
        .collect();
    let width = |f: &str| match f.to_ascii_lowercase().as_str() {
        "jobid" => 12,
        "nodelist" | "alloctres" => 20,
        "reason" => 30,
        "start" | "end" | "submit" => 19,
        _ => 10,
    };
    let t = now();
    let row = |vals: Vec<String>| {
        if parsable {
            vals.join("|")
        } else {
            vals.iter()
                .zip(&fields)
                .map(|(v, f)| {
                    let w = width(f);
                    let mut v = v.clone();
                    if v.len() > w {
                        v.truncate(w - 1);
                        v.push('+');
                    }
                    format!("{v:>w$}")
                })
                .collect::<Vec<_>>()
                .join(" ")
        }
    };
    if !noheader {
        println!("{}", row(fields.clone()));
        if !parsable {
            println!("{}", fields.iter().map(|f| "-".repeat(width(f))).collect::<Vec<_>>().join(" "));
        }
    }
    for j in list.iter().filter(|j| want.as_ref().is_none_or(|w| w.iter().any(|x| selects(x, j)))) {
        let elapsed = j.start.filter(|_| !j.start_estimated).map(|s| j.end.unwrap_or(t) - s).unwrap_or(0);
        let val = |f: &str| -> String {
            match f.to_ascii_lowercase().as_str() {
                "jobid" => j.display_id.clone(),
                "jobidraw" => j.id.to_string(),
                "jobname" => j.name.clone(),
                "partition" => j.partition.clone(),
                "account" => j.account.clone(),
                "user" => j.user.clone(),
                "alloccpus" => j.cpus.to_string(),
                "allocnodes" => j.nodes.to_string(),
                "alloctres" => {
                    format!("cpu={},node={}{}", j.cpus, j.nodes, if j.gpus > 0 { format!(",gres/gpu={}", j.gpus) } else { String::new() })
                }
                "state" => j.state.clone(),
                "exitcode" => j.exit_code.clone(),
                "elapsed" => slurmcli::format_time(Some(elapsed)),
                "elapsedraw" => elapsed.to_string(),
                "nodelist" => j.nodelist.clone(),
                "start" => j.start.filter(|_| !j.start_estimated).map_or("Unknown".into(), iso),
                "end" => j.end.map_or("Unknown".into(), iso),
                "submit" => iso(j.submit),
                "timelimit" => slurmcli::format_time(j.time_limit),
                "restarts" => j.restarts.to_string(),
                // Why it waits, or why it failed to start (a path its user may not use).
                "reason" => j.message.clone().unwrap_or_else(|| j.reason.clone()),
                _ => String::new(),
            }
        };
        println!("{}", row(fields.iter().map(|f| val(f)).collect()));
        if !no_steps {
            for s in &j.steps {
                let sval = |f: &str| -> String {
                    match f.to_ascii_lowercase().as_str() {
                        "jobid" | "jobidraw" => format!("{}.{}", j.display_id, s.id),
                        "jobname" => s.name.clone(),
                        "account" => j.account.clone(),
                        "alloccpus" => if s.cpus > 0 { s.cpus } else { j.cpus }.to_string(),
                        "state" => {
                            if !s.done {
                                "RUNNING".into()
                            } else if s.timed_out {
                                "TIMEOUT".into()
                            } else if s.exit_code == 0 {
                                "COMPLETED".into()
                            } else {
                                "FAILED".into()
                            }
                        }
                        "exitcode" => format!("{}:0", s.exit_code),
                        "elapsed" => slurmcli::format_time(Some(s.end.unwrap_or(t) - s.start)),
                        "nodelist" => s.nodelist.clone(),
                        "start" => iso(s.start),
                        "end" => s.end.map_or("Unknown".into(), iso),
                        _ => String::new(),
                    }
                };
                println!("{}", row(fields.iter().map(|f| sval(f)).collect()));
            }
        }
    }
    Ok(0)
}

/// `scontrol`.
pub(crate) fn scontrol(args: &[String]) -> Result<i32> {
    // Host lists need no controller: `show hostnames [LIST]` (default $SLURM_JOB_NODELIST) one
    // name a line, `show hostlist a,b` compressed, as Slurm's.
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["show", "hostnames", rest @ ..] if rest.len() <= 1 => {
            let list = match rest.first() {
                Some(l) => l.to_string(),
                None => std::env::var("SLURM_JOB_NODELIST").context("no host list given and SLURM_JOB_NODELIST is not set")?,
            };
            let names = slurmcli::expand(&list, 1_000_000).map_err(|e| anyhow::anyhow!("Invalid hostlist: {}", e.0))?;
            for n in names {
                println!("{n}");
            }
            return Ok(0);
        }
        ["show", "hostlist", list] => {
            let names = slurmcli::expand(list, 1_000_000).map_err(|e| anyhow::anyhow!("Invalid hostlist: {}", e.0))?;
            println!("{}", slurmcli::compress(&names));
            return Ok(0);
        }
        _ => {}
    }
    let t = Target::from_env()?;
    let rt = runtime()?;
    let kv: HashMap<String, String> =
        args.iter().filter_map(|a| a.split_once('=').map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))).collect();
    let action = |id: &str, body: serde_json::Value| -> Result<i32> {
        let id: u64 = id.parse().with_context(|| format!("Invalid job id specified: {id}"))?;
        rt.block_on(send(&t, "POST", &format!("/v1/jobs/{id}"), Some(&body), &[]))?.ok()?;
        Ok(0)
    };
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["show", "job", id] | ["show", "jobs", id] => {
            let id: u64 = id.parse().with_context(|| format!("Invalid job id specified: {id}"))?;
            let j: JobInfo = rt.block_on(send(&t, "GET", &format!("/v1/jobs/{id}"), None::<&()>, &[]))?.json()?;
            println!("JobId={} JobName={}", j.display_id, j.name);
            println!("   UserId={} Account={} QOS={}", j.user, j.account, j.qos);
            println!("   JobState={} Reason={} ExitCode={}", j.state, j.reason, j.exit_code);
            println!("   RunTime={} TimeLimit={} Restarts={}", field(&j, 'M', now()), slurmcli::format_time(j.time_limit), j.restarts);
            println!(
                "   SubmitTime={} StartTime={} EndTime={}",
                iso(j.submit),
                j.start.map_or("Unknown".into(), iso),
                j.end.map_or("Unknown".into(), iso)
            );
            println!(
                "   Partition={} NodeList={} NumNodes={} NumCPUs={} NumTasks={}",
                j.partition,
                if j.nodelist.is_empty() { "(null)".into() } else { j.nodelist.clone() },
                j.nodes,
                j.cpus,
                j.ntasks
            );
            if j.gpus > 0 {
                println!("   TresPerJob=gres/gpu:{}", j.gpus);
            }
            println!("   WorkDir={} StdOut={}", j.workdir, j.output);
            if !j.recorded.is_empty() {
                // Recorded with no effect here: --comment, --wckey, --mail-*, --hint, ...
                println!("   {}", j.recorded.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "));
            }
            if let Some(m) = &j.message {
                println!("   Message={m}");
            }
            Ok(0)
        }
        ["show", "node", name] | ["show", "nodes", name] => {
            let list = nodes(&t)?;
            let n = list.iter().find(|n| n.name == *name).with_context(|| format!("Node {name} not found"))?;
            println!(
                "NodeName={} State={} CPUAlloc={} CPUTot={} RealMemory={} AllocMem={} Gres=gpu:{} Reason={}",
                n.name,
                n.state.to_ascii_uppercase(),
                n.cpus.1,
                n.cpus.0,
                n.memory_mb.0,
                n.memory_mb.1,
                n.gpus.0,
                n.reason.clone().unwrap_or_default()
            );
            Ok(0)
        }
        ["hold", id] => action(id, serde_json::json!({"action": "hold"})),
        ["release", id] => action(id, serde_json::json!({"action": "release"})),
        ["requeue", id] => action(id, serde_json::json!({"action": "requeue"})),
        ["update", ..] if kv.contains_key("jobid") => {
            let limit = kv.get("timelimit").context("scontrol update JobId=.. needs TimeLimit=..")?;
            let secs = slurmcli::parse_time(limit).map_err(|e| anyhow::anyhow!("{}", e.0))?.unwrap_or(i64::MAX / 4);
            action(&kv["jobid"], serde_json::json!({"action": "update", "time_limit": secs}))
        }
        ["update", ..] if kv.contains_key("nodename") => {
            let state = kv.get("state").context("scontrol update NodeName=.. needs State=DRAIN or State=RESUME")?;
            let body = serde_json::json!({"state": state, "reason": kv.get("reason")});
            rt.block_on(send(&t, "POST", &format!("/v1/nodes/{}", kv["nodename"]), Some(&body), &[]))?.ok()?;
            Ok(0)
        }
        ["delete", ..] if kv.contains_key("nodename") => delete_nodes(&kv["nodename"]),
        _ => bail!(
            "unsupported scontrol command: {}\nSupported: show job ID, show node NAME, hold ID, release ID, requeue ID, update JobId=ID TimeLimit=T, update NodeName=N State=DRAIN|RESUME Reason=R, delete NodeName=HOSTLIST",
            args.join(" ")
        ),
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
    let caller: Vec<(String, String)> = crate::common::caller_env();
    let a = slurmcli::parse_srun_env(args, &caller).map_err(|e| anyhow::anyhow!("{}", e.0))?;
    if a.mpi_list {
        println!("MPI plugin types are...\n{}", slurmcli::MPI_TYPES.map(|t| format!("\t{t}")).join("\n"));
        return Ok(0);
    }
    let t = Target::from_env()?;
    // Outside an allocation srun makes one for its step, as Slurm's.
    let (job, made) = match std::env::var("SLURM_JOB_ID").ok().and_then(|v| v.parse().ok()) {
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
    if let Some(x) = args.first() {
        bail!("unrecognized option '{x}'\nUsage: sprio");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_dates() {
        assert_eq!(iso(0), "1970-01-01T00:00:00");
        assert_eq!(iso(1_796_083_200 + 3661), "2026-12-01T01:01:01");
    }

    #[test]
    fn squeue_formats() {
        let items = parse_format("%.6i %j|%t").unwrap();
        assert_eq!(
            render(&items, |c| match c {
                'i' => "42".into(),
                'j' => "train".into(),
                _ => "R".into(),
            }),
            "    42 train|R"
        );
        assert!(parse_format("%").is_err());
        assert!(parse_format("%Y").is_err());
    }
}
