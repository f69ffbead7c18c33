//! `scontrol`: `show job [ID]` (every job, or one, an array task by `32_3` or all of an
//! array's), `show node [NAME]`, `show partition [NAME]`, `show config`, `show hostnames`,
//! `show hostlist`, `-o` (one line per record), `--json`, `ping`, and the actions (`hold`,
//! `release`, `requeue`, `update`, `delete`).

use anyhow::{Context, Result, anyhow, bail};
use client::{Target, send};
use std::collections::HashMap;
use wire::{JobInfo, NodeInfo};

use crate::common::{now, runtime};
use crate::query::{
    config, elapsed, get, help, iso, job_info_json, node_json, nodes, partition_json, print_record, print_reply, selects, stdout_path,
    version,
};

const HELP: &str = "Usage: scontrol [<OPTION>] [<COMMAND>]
  Valid <OPTION> values are:
     -o or --oneliner   Print information one line per record.
     --json             Produce JSON output (data_parser v0.0.44) of show job, node, partition.
     -F or --future     Accepted: no node is in the FUTURE state here, every node is shown.
     --hide             Accepted: no partition is hidden here, every partition is shown.
     -u or --uid=<uid>  Refused: acting as another user is not available; run as that user.
     -V or --version    Print version information and exit.
     --help             Print this description.

  Valid <COMMAND> values are:
     show job [<jobid>]               every job, or one (an array task as 32_3, all of an array as 32)
     show node [<name>]               every node, or one
     show partition [<name>]          every partition, or one
     show config                      the cluster's settings
     show hostnames [<hostlist>]      one host name a line (default $SLURM_JOB_NODELIST)
     show hostlist <name,...>         a compressed host list
     ping                             whether the controller answers
     hold <jobid>                     hold a pending job
     release <jobid>                  release a held job
     requeue <jobid>                  requeue a job
     suspend <job_list>               freeze running jobs; their CPUs are lent (operators)
     resume <job_list>                thaw suspended jobs once their CPUs are free (operators)
     update JobId=<id> TimeLimit=<t>  change a job's time limit
     update NodeName=<n> State=DRAIN|RESUME [Reason=<r>]
     delete NodeName=<hostlist>       delete nodes (administrators)
     reconfigure                      read tandem.toml again and reload job_submit.lua (operators)
     setdebug LEVEL|FILTER            the controller's log level (info, debug, Slurm's verbose,
                                      debug2...) or filter (info,server::jobs=debug) (operators)
     reboot [ASAP] [nextstate=RESUME|DOWN] [reason=<r>] ALL|<nodes>
                                      reboot nodes by reboot_program once idle (administrators)
     cancel_reboot <nodes>            forget reboots not yet issued (administrators)
";

fn or_null(s: &str) -> String {
    if s.is_empty() { "(null)".into() } else { s.to_string() }
}

fn job_lines(j: &JobInfo, t: i64) -> Vec<String> {
    let pending = j.state == "PENDING";
    let run = if pending { 0 } else { elapsed(j, t) };
    let mut v = vec![format!("JobId={} JobName={}", j.id, j.name)];
    if let (Some(a), Some(k)) = (j.array_job_id, j.array_task_id) {
        v[0] = format!("JobId={} ArrayJobId={a} ArrayTaskId={k} JobName={}", j.id, j.name);
    }
    if let (Some(h), Some(k), Some(n)) = (j.het_job_id, j.het_job_offset, j.het_size) {
        // A heterogeneous job's component, as Slurm's: its leader, offset and the ids of all.
        v[0] = format!("JobId={} HetJobId={h} HetJobOffset={k} JobName={}", j.id, j.name);
        v.insert(1, format!("HetJobIdSet={h}-{}", h + u64::from(n.max(1)) - 1));
    }
    let group =
        nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(j.gid)).ok().flatten().map_or_else(|| j.gid.to_string(), |g| g.name);
    v.push(format!("UserId={}({}) GroupId={group}({}) MCS_label=N/A", j.user, j.uid, j.gid));
    v.push(format!("Priority=1 Nice={} Account={} QOS={}", j.nice, j.account, j.qos));
    v.push(format!("JobState={} Reason={} Dependency={}", j.state, j.reason, or_null(&j.dependency)));
    v.push(format!("Requeue=1 Restarts={} BatchFlag=1 Reboot=0 ExitCode={}", j.restarts, j.exit_code));
    let time_min = j.time_min.map_or_else(|| "N/A".into(), |m| slurmcli::hms(Some(m)));
    v.push(format!("RunTime={} TimeLimit={} TimeMin={time_min}", slurmcli::hms(Some(run)), slurmcli::hms(j.time_limit)));
    // A held job is not eligible yet, nor accruing age.
    let eligible = if j.reason.starts_with("JobHeld") { "Unknown".into() } else { iso(j.submit) };
    v.push(format!("SubmitTime={} EligibleTime={eligible}", iso(j.submit)));
    v.push(format!("AccrueTime={eligible}"));
    let start = j.start.map_or("Unknown".into(), iso);
    let end = j.end.or_else(|| j.start.zip(j.time_limit).map(|(s, l)| s + l)).map_or("Unknown".into(), iso);
    v.push(format!("StartTime={start} EndTime={end} Deadline=N/A"));
    let (sus_at, pre) = match (j.suspended_since, j.start) {
        (Some(at), Some(s)) => (iso(at), (at - s - j.suspended).max(0)),
        _ => ("None".to_string(), 0),
    };
    v.push(format!("SuspendTime={sus_at} SecsPreSuspend={pre} LastSchedEval={} Scheduler=Main", iso(j.submit)));
    v.push(format!("Partition={} AllocNode:Sid=tandem:0", j.partition));
    if let Some(r) = &j.reservation {
        v.push(format!("Reservation={}", slurmcli::visible(r)));
    }
    v.push(format!("ReqNodeList={} ExcNodeList={}", or_null(&j.req_nodes), or_null(&j.exc_nodes)));
    v.push(format!("NodeList={}", or_null(&j.nodelist)));
    if !pending && !j.nodelist.is_empty() {
        v.push(format!("BatchHost={}", crate::query::first_node(&j.nodelist)));
    }
    v.push(format!("NumNodes={} NumCPUs={} NumTasks={} CPUs/Task={} ReqB:S:C:T=0:0:*:*", j.nodes, j.cpus, j.ntasks, j.cpus_per_task));
    // TRES in Slurm's order: cpu, mem, node, billing, gres.
    let mem_mb = j.mem_per_node_mb.map(|m| m * j.nodes as u64).or(j.mem_per_cpu_mb.map(|m| m * j.cpus as u64)).unwrap_or(0);
    let mut tres = vec![format!("cpu={}", j.cpus)];
    if mem_mb > 0 {
        tres.push(format!("mem={}", slurmcli::size(mem_mb as f64, slurmcli::Unit::M, None)));
    }
    tres.push(format!("node={}", j.nodes));
    tres.push(format!("billing={}", j.cpus));
    if j.gpus > 0 {
        tres.push(format!("gres/gpu={}", j.gpus));
    }
    v.push(format!("TRES={}", tres.join(",")));
    v.push("Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*".into());
    let mem = match (j.mem_per_node_mb, j.mem_per_cpu_mb) {
        (_, Some(m)) => format!("MinMemoryCPU={}", slurmcli::size(m as f64, slurmcli::Unit::M, None)),
        (m, None) => format!("MinMemoryNode={}", slurmcli::size(m.unwrap_or(0) as f64, slurmcli::Unit::M, None)),
    };
    v.push(format!("MinCPUsNode={} {mem} MinTmpDiskNode=0", j.cpus_per_task));
    v.push(format!("Features={} DelayBoot=00:00:00", if j.features.is_empty() { "(null)".into() } else { j.features.join("&") }));
    if j.gpus > 0 {
        v.push(format!("TresPerJob=gres/gpu:{}", j.gpus));
    }
    v.push("OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)".into());
    v.push("Command=(batch script)".into());
    v.push(format!("WorkDir={}", j.workdir));
    v.push(format!("StdErr={}", stdout_path(j, j.error.as_deref().unwrap_or(&j.output))));
    v.push("StdIn=/dev/null".into());
    v.push(format!("StdOut={}", stdout_path(j, &j.output)));
    if !j.recorded.is_empty() {
        // Recorded with no effect here: --comment, --wckey, --mail-*, --hint, ...
        v.push(j.recorded.iter().map(|(k, x)| format!("{k}={x}")).collect::<Vec<_>>().join(" "));
    }
    if let Some(m) = &j.message {
        v.push(format!("Message={m}"));
    }
    v
}

fn node_lines(n: &NodeInfo) -> Vec<String> {
    let gres =
        if n.gpus.0 > 0 { format!("gpu:{}:{}", n.gpus.2.clone().unwrap_or_else(|| "gpu".into()), n.gpus.0) } else { "(null)".into() };
    let state = crate::query::node_flags(n).join("+");
    let mut v = vec![
        format!("NodeName={} Arch=x86_64 CoresPerSocket=1", n.name),
        format!("CPUAlloc={} CPUEfctv={} CPUTot={} CPULoad=N/A", n.cpus.1, n.cpus.0, n.cpus.0),
        format!("AvailableFeatures={}", if n.features.is_empty() { "(null)".into() } else { n.features.join(",") }),
        format!("ActiveFeatures={}", if n.features.is_empty() { "(null)".into() } else { n.features.join(",") }),
        format!("Gres={gres}"),
        format!("NodeAddr={} NodeHostName={}", n.addr, n.name),
        format!("RealMemory={} AllocMem={} FreeMem=N/A Sockets=1 Boards=1", n.memory_mb.0, n.memory_mb.1),
        format!("State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1"),
        format!("Partitions={}", n.partitions.join(",")),
        // The machine's boot time is not known to Tandem; its agent's start is.
        format!("BootTime=None SlurmdStartTime={}", n.agent_started.map_or_else(|| "None".to_string(), iso)),
        format!("CfgTRES={}", node_tres(n.cpus.0, n.memory_mb.0, n.gpus.0)),
        format!("AllocTRES={}", if n.cpus.1 == 0 && n.gpus.1 == 0 { String::new() } else { node_tres(n.cpus.1, n.memory_mb.1, n.gpus.1) }),
    ];
    if let Some(r) = &n.reason {
        v.push(format!("Reason={r}"));
    }
    v
}

/// A node's TRES as Slurm lists them: `cpu=4,mem=8G,billing=4,gres/gpu=2`.
fn node_tres(cpus: u32, mem_mb: u64, gpus: u32) -> String {
    let mut v = vec![format!("cpu={cpus}")];
    if mem_mb > 0 {
        v.push(format!("mem={}", slurmcli::size(mem_mb as f64, slurmcli::Unit::M, None)));
    }
    v.push(format!("billing={cpus}"));
    if gpus > 0 {
        v.push(format!("gres/gpu={gpus}"));
    }
    v.join(",")
}

fn limit(s: Option<i64>) -> String {
    s.map_or_else(|| "UNLIMITED".into(), |s| slurmcli::hms(Some(s)))
}

/// `scontrol`.
pub(crate) fn scontrol(args: &[String]) -> Result<i32> {
    let (mut oneliner, mut json, mut clusters) = (false, false, None);
    let (p, _) = crate::common::parse_env("scontrol", args)?;
    for g in &p.opts {
        match g.key() {
            "oneliner" => oneliner = true,
            "json" => json = true,
            "clusters" => clusters = Some(g.value().to_string()),
            "version" => return version(),
            "help" => return help(HELP),
            "usage" => return help(HELP),
            // Details are always shown; every partition is; one cluster.
            "details" | "all" | "verbose" | "quiet" | "hide" | "federation" | "local" | "sibling" => {}
            other => unreachable!("scontrol's table and its reader disagree on {other}"),
        }
    }
    let words = p.args;
    match words.first().map(|w| w.to_ascii_lowercase()).as_deref() {
        Some("version") if words.len() == 1 => return version(),
        Some("help") if words.len() == 1 => return help(HELP),
        _ => {}
    }
    if let Some(c) = &clusters {
        crate::query::check_clusters(&Target::from_env()?, c)?;
    }
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    // Reservations: `show reservation [NAME]`, `show res=NAME`, `create reservation ...`,
    // `delete ReservationName=NAME` or `delete reservation NAME`.
    let verb = w.first().map(|c| c.to_ascii_lowercase());
    let second = w.get(1).map(|e| e.split_once('=').map_or((*e, None), |(k, v)| (k, Some(v))));
    if let (Some(verb), Some((entity, value))) = (verb.as_deref(), second)
        && crate::resv::is_entity(entity)
    {
        let rest = w.get(2..).unwrap_or(&[]);
        match (verb, value, rest) {
            ("show", v, []) => return crate::resv::show(v, oneliner),
            ("show", None, [name]) => return crate::resv::show(Some(name), oneliner),
            ("create", None, _) => return crate::resv::create(&words[2..]),
            ("delete", Some(name), []) => return crate::resv::delete(w[1], name),
            ("delete", None, [name]) => return crate::resv::delete(w[1], name),
            ("delete", None, []) => {
                eprintln!("scontrol: error: Proper format is 'delete <ENTITY>=<ID>' or 'delete <ENTITY> <ID>'");
                return Ok(1);
            }
            _ => {}
        }
    }
    // The entity's name is case-insensitive and may be plural, as Slurm's.
    let entity = w.get(1).map(|e| e.to_ascii_lowercase());
    let entity = entity.as_deref().map(|e| e.trim_end_matches('s'));
    match (w.first().map(|c| c.to_ascii_lowercase()).as_deref(), entity, w.get(2..).unwrap_or(&[])) {
        (Some("show"), Some("hostname"), rest) if rest.len() <= 1 => {
            let list = match rest.first() {
                Some(l) => l.to_string(),
                None => std::env::var("SLURM_JOB_NODELIST").context("no host list given and SLURM_JOB_NODELIST is not set")?,
            };
            let names = slurmcli::expand(&list, 1_000_000).map_err(|e| anyhow!("Invalid hostlist: {}", e.0))?;
            for n in names {
                println!("{n}");
            }
            Ok(0)
        }
        (Some("show"), Some("hostlist"), [list]) => {
            let names = slurmcli::expand(list, 1_000_000).map_err(|e| anyhow!("Invalid hostlist: {}", e.0))?;
            println!("{}", slurmcli::compress(&names));
            Ok(0)
        }
        (Some("show"), Some("job"), rest) if rest.len() <= 1 => show_jobs(rest.first().copied(), oneliner, json),
        (Some("show"), Some("node"), rest) if rest.len() <= 1 => {
            let t = Target::from_env()?;
            let mut list = nodes(&t, json)?;
            if let Some(name) = rest.first() {
                let want = slurmcli::expand(name, 100_000).map_err(|e| anyhow!("Invalid hostlist: {}", e.0))?;
                list.retain(|n| want.contains(&n.name));
                if list.is_empty() {
                    bail!("Node {name} not found");
                }
            }
            if json {
                return print_reply("nodes", list.iter().map(node_json).collect(), &["scontrol", "show", "node", "--json"], now(), true);
            }
            for n in &list {
                print_record(&node_lines(n), oneliner);
            }
            Ok(0)
        }
        (Some("show"), Some("partition"), rest) if rest.len() <= 1 => {
            let t = Target::from_env()?;
            let (cfg, all) = (config(&t)?, nodes(&t, json)?);
            let mut parts = cfg.partitions;
            if let Some(name) = rest.first() {
                parts.retain(|p| p.name == *name);
                if parts.is_empty() {
                    bail!("Partition {name} not found");
                }
            }
            if json {
                let v = parts.iter().map(|p| partition_json(p, &all)).collect();
                return print_reply("partitions", v, &["scontrol", "show", "partition", "--json"], now(), true);
            }
            for p in &parts {
                let mine: Vec<&NodeInfo> = all.iter().filter(|n| n.partitions.contains(&p.name)).collect();
                let names: Vec<String> = mine.iter().map(|n| n.name.clone()).collect();
                let cpus: u32 = mine.iter().map(|n| n.cpus.0).sum();
                print_record(
                    &[
                        format!("PartitionName={}", p.name),
                        "AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL".into(),
                        format!("Default={} QoS=N/A", if p.default { "YES" } else { "NO" }),
                        format!("DefaultTime={} DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO", limit(p.default_time)),
                        format!("MaxNodes=UNLIMITED MaxTime={} MinNodes=0 LLN=NO", limit(p.max_time)),
                        format!("Nodes={}", or_null(&slurmcli::compress(&names))),
                        format!("PriorityJobFactor=1 PriorityTier={} RootOnly=NO ReqResv=NO OverSubscribe=NO", p.priority_tier),
                        "OverTimeLimit=NONE PreemptMode=REQUEUE".into(),
                        format!("State=UP TotalCPUs={cpus} TotalNodes={}", names.len()),
                    ],
                    oneliner,
                );
            }
            Ok(0)
        }
        (Some("show"), Some("assoc_mgr"), rest) => crate::acctmgr::show_assoc_mgr(rest, oneliner),
        (Some("show"), Some("config"), []) => {
            let cfg = config(&Target::from_env()?)?;
            let (x, y, z) = crate::query::SLURM_VERSION;
            println!("Configuration data as of {}", iso(now()));
            let rows: Vec<(&str, String)> = vec![
                ("ClusterName", cfg.cluster_name.clone()),
                ("JobSubmitPlugins", if cfg.job_submit.is_some() { "lua".into() } else { "(null)".into() }),
                ("KillWait", format!("{} sec", cfg.kill_wait)),
                ("MaxArraySize", cfg.max_array.to_string()),
                ("MinJobAge", format!("{} sec", cfg.min_job_age)),
                ("MpiDefault", cfg.mpi_default.clone().unwrap_or_else(|| "none".into())),
                ("PartitionNames", cfg.partitions.iter().map(|p| p.name.clone()).collect::<Vec<_>>().join(",")),
                ("QOSNames", cfg.qos.join(",")),
                ("RebootProgram", cfg.reboot_program.clone().unwrap_or_else(|| "(null)".into())),
                ("ResumeTimeout", cfg.resume_timeout.map_or_else(|| "(null)".into(), |t| format!("{t} sec"))),
                ("SchedulerType", cfg.scheduler.clone()),
                ("SlurmctldDebug", cfg.log_filter.clone().unwrap_or_else(|| "info".into())),
                ("SlurmctldTimeout", format!("{} sec", cfg.lease)),
                ("SLURM_VERSION", format!("{x}.{y}.{z}")),
                ("TandemVersion", env!("CARGO_PKG_VERSION").into()),
                ("TandemCommit", env!("TANDEM_COMMIT").into()),
            ];
            for (k, v) in rows {
                println!("{k:<23} = {v}");
            }
            Ok(0)
        }
        (Some("ping"), None, _) => {
            // Each controller TANDEM_SERVER names, once: the one that leads is Slurm's primary,
            // a standby its backup.
            let t = Target::from_env()?;
            let rt = runtime()?;
            let members = t.members();
            let mut leading = false;
            for m in &members {
                let r = rt.block_on(client::probe(m, "GET", "/healthz"));
                let (role, up) = match &r {
                    Ok(r) if r.status < 400 => ("primary", true),
                    Ok(r) if r.standby() => ("backup", true),
                    _ => (if members.len() == 1 { "primary" } else { "unknown" }, false),
                };
                leading |= role == "primary" && up;
                let at = if members.len() == 1 { std::env::var("TANDEM_SERVER").unwrap_or_else(|_| "localhost".into()) } else { m.url() };
                let leader = match &r {
                    Ok(r) if r.standby() => {
                        r.leader.as_deref().map_or(", no controller leads yet".to_string(), |l| format!(", following {l}"))
                    }
                    _ => String::new(),
                };
                println!(
                    "Slurmctld({role}) at {} is {}{}",
                    slurmcli::visible(&at),
                    if up { "UP" } else { "DOWN" },
                    slurmcli::visible(&leader)
                );
            }
            Ok(if leading { 0 } else { 1 })
        }
        _ => actions(&words),
    }
}

/// `scontrol show job [ID]`.
fn show_jobs(id: Option<&str>, oneliner: bool, json: bool) -> Result<i32> {
    let t = Target::from_env()?;
    // --json gets the strings as they are (JSON escapes them); the text, made visible.
    let fetch = |path: &str| -> Result<Vec<JobInfo>> { if json { crate::query::get_raw(&t, path) } else { get(&t, path) } };
    let mut list: Vec<JobInfo> = fetch("/v1/jobs?all=true")?;
    if let Some(id) = id {
        if !crate::query::valid_job_id(id) {
            bail!("Invalid job id specified: {id}");
        }
        list.retain(|j| selects(id, j));
        if list.is_empty() {
            // One the controller no longer holds in memory: ask for it by id.
            let one = |n: u64| -> Result<JobInfo> {
                let path = format!("/v1/jobs/{n}");
                if json { crate::query::get_raw(&t, &path) } else { get(&t, &path) }
            };
            match id.parse::<u64>().ok().map(one) {
                Some(Ok(j)) => list.push(j),
                _ => bail!("Invalid job id specified"),
            }
        }
    }
    let t_now = now();
    if json {
        return print_reply(
            "jobs",
            list.iter().map(|j| job_info_json(j, t_now)).collect(),
            &["scontrol", "show", "job", "--json"],
            t_now,
            true,
        );
    }
    if list.is_empty() {
        println!("No jobs in the system");
    }
    for j in &list {
        print_record(&job_lines(j, t_now), oneliner);
    }
    Ok(0)
}

/// `scontrol suspend|resume JOB_LIST...`: each argument a job id or a comma list of them
/// (`jobid=` or `job=` before it allowed); each job refused says why, as Slurm's
/// (`Access/permission denied for job 12`), and the exit code is 1.
fn suspend(t: &Target, rt: &tokio::runtime::Runtime, action: &str, op: &str, args: &[&str]) -> Result<i32> {
    if args.is_empty() {
        eprintln!("too few arguments for keyword:{}", slurmcli::visible(op));
        return Ok(1);
    }
    let mut rc = 0;
    for arg in args {
        let lower = arg.to_ascii_lowercase();
        let list = if lower.starts_with("jobid=") {
            &arg[6..]
        } else if lower.starts_with("job=") {
            &arg[4..]
        } else {
            arg
        };
        for id in list.split(',') {
            let Ok(n) = id.parse::<u64>() else {
                eprintln!("Invalid job id specified for job {}", slurmcli::visible(id));
                rc = 1;
                continue;
            };
            let reply = rt.block_on(send(t, "POST", &format!("/v1/jobs/{n}"), Some(&serde_json::json!({ "action": action })), &[]))?;
            if reply.status >= 400 {
                eprintln!("{} for job {n}", slurmcli::visible_text(&reply.error()));
                rc = 1;
            }
        }
    }
    Ok(rc)
}

/// The actions: hold, release, requeue, update, delete.
fn actions(args: &[String]) -> Result<i32> {
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
        ["hold", id] => action(id, serde_json::json!({"action": "hold"})),
        ["release", id] => action(id, serde_json::json!({"action": "release"})),
        ["requeue", id] => action(id, serde_json::json!({"action": "requeue"})),
        ["update", ..]
            if args[1..].iter().any(|a| a.split_once('=').is_some_and(|(k, _)| crate::resv::is_entity(k)))
                && !args[1..].iter().any(|a| {
                    a.split_once('=').is_some_and(|(k, _)| {
                        let k = k.to_ascii_lowercase();
                        k.starts_with("job") || k.starts_with("nodename")
                    })
                }) =>
        {
            crate::resv::update(&args[1..])
        }
        ["update", ..] => match slurmcli::update::parse_update(&args[1..]) {
            Err(msg) => {
                eprintln!("{msg}");
                Ok(1)
            }
            Ok(slurmcli::update::Update::Job { ids, time_limit }) => {
                let limit = time_limit.expect("checked");
                let secs = slurmcli::parse_time(&limit).map_err(|e| anyhow!("{}", e.0))?.unwrap_or(i64::MAX / 4);
                action(&ids, serde_json::json!({"action": "update", "time_limit": secs}))
            }
            Ok(slurmcli::update::Update::Node { names, state, reason }) => {
                let Some(state) = state else { bail!("scontrol update NodeName=.. needs State=DRAIN or State=RESUME (with Reason=)") };
                let body = serde_json::json!({"state": state, "reason": reason});
                rt.block_on(send(&t, "POST", &format!("/v1/nodes/{names}"), Some(&body), &[]))?.ok()?;
                Ok(0)
            }
        },
        ["delete", ..] if kv.contains_key("nodename") => crate::slurm::delete_nodes(&kv["nodename"]),
        // Slurm's abbreviations: `su`, `res` at the least.
        [op, rest @ ..]
            if (op.len() >= 2 && "suspend".starts_with(&op.to_ascii_lowercase()))
                || (op.len() >= 3 && "resume".starts_with(&op.to_ascii_lowercase())) =>
        {
            let action = if op.to_ascii_lowercase().starts_with("su") { "suspend" } else { "resume" };
            suspend(&t, &rt, action, op, rest)
        }
        [r, ..] if r.len() >= 3 && "reboot_nodes".starts_with(&r.to_ascii_lowercase()) => {
            let cmd = match slurmcli::update::parse_reboot(args) {
                Ok(c) => c,
                Err(msg) => {
                    eprintln!("{msg}");
                    return Ok(1);
                }
            };
            let body = wire::RebootRequest { nodes: cmd.nodes, asap: cmd.asap, next_state: cmd.next_state, reason: cmd.reason };
            let reply = rt.block_on(send(&t, "POST", "/v1/reboot", Some(&body), &[]))?;
            if reply.status >= 400 {
                eprintln!("scontrol_reboot_nodes error: {}", slurmcli::visible_text(&reply.error()));
                return Ok(1);
            }
            Ok(0)
        }
        [c, rest @ ..] if c.len() >= 3 && "cancel_reboot".starts_with(&c.to_ascii_lowercase()) => {
            let [nodes] = rest else {
                let why = if rest.is_empty() { "missing argument" } else { "too many arguments" };
                eprintln!("{why} for keyword:{c}");
                return Ok(1);
            };
            let body = wire::CancelRebootRequest { nodes: nodes.to_string() };
            let reply = rt.block_on(send(&t, "POST", "/v1/reboot/cancel", Some(&body), &[]))?;
            if reply.status >= 400 {
                eprintln!("slurm_update error: {}", slurmcli::visible_text(&reply.error()));
                return Ok(1);
            }
            Ok(0)
        }
        [c, rest @ ..] if c.len() >= 5 && "setdebug".starts_with(&c.to_ascii_lowercase()) => {
            let [level] = rest else {
                let why = if rest.is_empty() { "missing argument" } else { "too many arguments" };
                eprintln!("{why} for keyword:{c}");
                return Ok(1);
            };
            let body = wire::DebugLevel { filter: level.to_string() };
            let reply = rt.block_on(send(&t, "POST", "/v1/debug", Some(&body), &[]))?;
            if reply.status >= 400 {
                eprintln!("slurm_set_debug_level error: {}", slurmcli::visible_text(&reply.error()));
                return Ok(1);
            }
            Ok(0)
        }
        [r] if r.len() >= 3 && "reconfigure".starts_with(&r.to_ascii_lowercase()) => {
            let reply = rt.block_on(send(&t, "POST", "/v1/reconfigure", Some(&serde_json::json!({})), &[]))?;
            if reply.status >= 400 {
                eprintln!("slurm_reconfigure error: {}", slurmcli::visible_text(&reply.error()));
                return Ok(1);
            }
            let r: wire::Reconfigured = reply.json()?;
            if !r.restart_needed.is_empty() {
                eprintln!(
                    "scontrol: changed, in effect when the controller (and for node scripts, the agents) restart: {}",
                    r.restart_needed.join(", ")
                );
            }
            Ok(0)
        }
        _ => bail!("invalid scontrol command: {}\n{HELP}", args.join(" ")),
    }
}
