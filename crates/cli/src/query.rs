//! What the query commands (`squeue`, `sacct`, `sinfo`, `scontrol`, `scancel`) share: reading
//! jobs, nodes and the configuration from the controller, `--help` and
//! `--version` as Slurm's, and data_parser v0.0.44's JSON shapes for `--json`.

use anyhow::Result;
use client::{Target, send};
use serde_json::{Value, json};
use wire::{ConfigInfo, JobInfo, NodeInfo};

use crate::common::runtime;

/// The Slurm version the commands answer as (`--version`, `--json`'s meta).
pub(crate) const SLURM_VERSION: (u32, u32, u32) = (25, 11, 0);

/// `--version`/`-V`: Slurm's line (`slurm 25.11.0`); Tandem's own version is in `tandem
/// --version`.
pub(crate) fn version() -> Result<i32> {
    let (a, b, c) = SLURM_VERSION;
    println!("slurm {a}.{b}.{c}");
    Ok(0)
}

/// `--help`: prints `text` (a usage in Slurm's style) and exits 0.
pub(crate) fn help(text: &str) -> Result<i32> {
    print!("{text}");
    Ok(0)
}

/// Prints records of `Key=Value` lines: indented three spaces per line, or on one line with
/// `-o`, as Slurm's.
pub(crate) fn print_record(lines: &[String], oneliner: bool) {
    if oneliner {
        println!("{}", lines.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" "));
    } else {
        for (i, l) in lines.iter().enumerate() {
            println!("{}{}", if i == 0 { "" } else { "   " }, l.trim());
        }
        println!();
    }
}

/// `YYYY-MM-DDTHH:MM:SS` (UTC) for Unix seconds, as Slurm prints times, or the form
/// `SLURM_TIME_FORMAT` asks for (`relative`, a strftime format) where the command reads it.
pub(crate) fn iso(t: i64) -> String {
    crate::common::time_format().format(t, crate::common::now())
}

/// The date line `squeue -l`/`-i` and `sinfo -l` print first (as `ctime`, UTC).
pub(crate) fn print_date(t: i64) {
    println!("{}", jiff::Timestamp::from_second(t).map_or_else(|_| String::new(), |ts| ts.strftime("%a %b %e %H:%M:%S %Y").to_string()));
}

/// `GET path` from the controller, as `T`.
///
/// Every string in the reply (names, comments, paths, reasons, accounts, ... and map keys) comes
/// with its control characters made visible ([`shown`]): what a command prints cannot reach a
/// terminal raw. [`get_raw`] is for what is used rather than printed, and for `--json`.
pub(crate) fn get<T: serde::de::DeserializeOwned>(t: &Target, path: &str) -> Result<T> {
    let reply = runtime()?.block_on(send(t, "GET", path, None::<&()>, &[]))?;
    // Most replies hold no control character at all: decoded as they are, not through a tree
    // of every value (3,000 jobs: 4x faster).
    if !slurmcli::json_may_hold_control(&reply.body) {
        return Ok(reply.json()?);
    }
    shown(reply.json::<Value>()?)
}

/// [`get`] as the controller sent it, control characters and all.
pub(crate) fn get_raw<T: serde::de::DeserializeOwned>(t: &Target, path: &str) -> Result<T> {
    Ok(runtime()?.block_on(send(t, "GET", path, None::<&()>, &[]))?.json()?)
}

/// A reply decoded with every string's control characters made visible
/// ([`slurmcli::visible`]): the one place the commands' printers get the controller's strings
/// from, so none of them can print a user's control characters raw.
pub(crate) fn shown<T: serde::de::DeserializeOwned>(mut v: Value) -> Result<T> {
    fn walk(v: &mut Value) {
        match v {
            Value::String(s) => {
                if let std::borrow::Cow::Owned(o) = slurmcli::visible(s) {
                    *s = o;
                }
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            Value::Object(m) => {
                if m.keys().any(|k| k.chars().any(slurmcli::is_control)) {
                    *m = std::mem::take(m).into_iter().map(|(k, v)| (slurmcli::visible(&k).into_owned(), v)).collect();
                }
                m.values_mut().for_each(walk);
            }
            _ => {}
        }
    }
    walk(&mut v);
    Ok(serde_json::from_value(v)?)
}

/// Prints `v` as pretty JSON whose strings are plain JSON (serde writes C0 as `\u001b`...),
/// with DEL and the C1 controls written `\u007f`..`\u009f` too, so no control character
/// reaches a terminal raw and a JSON reader still gets the string as it was.
pub(crate) fn print_json(v: &impl serde::Serialize) -> Result<()> {
    println!("{}", json_text(v)?);
    Ok(())
}

/// [`print_json`]'s text.
fn json_text(v: &impl serde::Serialize) -> Result<String> {
    struct Escaping(serde_json::ser::PrettyFormatter<'static>);
    impl serde_json::ser::Formatter for Escaping {
        fn write_string_fragment<W: ?Sized + std::io::Write>(&mut self, w: &mut W, fragment: &str) -> std::io::Result<()> {
            let mut rest = fragment;
            while let Some(i) = rest.find(|c: char| slurmcli::is_control(c)) {
                w.write_all(&rest.as_bytes()[..i])?;
                let c = rest[i..].chars().next().expect("found");
                write!(w, "\\u{:04x}", c as u32)?;
                rest = &rest[i + c.len_utf8()..];
            }
            w.write_all(rest.as_bytes())
        }
        fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
            self.0.begin_array(w)
        }
        fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
            self.0.end_array(w)
        }
        fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
            self.0.begin_array_value(w, first)
        }
        fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
            self.0.end_array_value(w)
        }
        fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
            self.0.begin_object(w)
        }
        fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
            self.0.end_object(w)
        }
        fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
            self.0.begin_object_key(w, first)
        }
        fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
            self.0.begin_object_value(w)
        }
        fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
            self.0.end_object_value(w)
        }
    }
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Escaping(serde_json::ser::PrettyFormatter::new()));
    v.serialize(&mut ser)?;
    Ok(String::from_utf8(out)?)
}

/// The nodes in Slurm's order: by name, numbers compared as numbers (`node2` before `node10`).
/// With `raw`, their strings as the controller sent them (for `--json`); else made visible.
pub(crate) fn nodes(t: &Target, raw: bool) -> Result<Vec<NodeInfo>> {
    let mut v: Vec<NodeInfo> = if raw { get_raw(t, "/v1/nodes")? } else { get(t, "/v1/nodes")? };
    v.sort_by_cached_key(|n| {
        let digits = n.name.len() - n.name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (stem, num) = n.name.split_at(n.name.len() - digits);
        (stem.to_string(), num.parse::<u64>().unwrap_or(0), n.name.clone())
    });
    Ok(v)
}

/// The controller's settings and partitions.
pub(crate) fn config(t: &Target) -> Result<ConfigInfo> {
    get(t, "/v1/config")
}

/// Whether job id `id` as a user gives it (`12`, `12_3`) names job `j`: its own id, its
/// display id, or the array it is a task of (an array's id selects all its tasks).
/// The first of these users that is neither a number (a uid, which may have no account here, as
/// Slurm allows) nor a user name this machine knows.
pub(crate) fn unknown_user(users: &[String]) -> Option<&String> {
    users.iter().find(|u| !(u.bytes().all(|b| b.is_ascii_digit()) || nix::unistd::User::from_name(u).ok().flatten().is_some()))
}

/// Whether `job` is a job id as the query commands take it: `12`, an array task `12_3`, or a
/// heterogeneous job's component `12+1`.
pub(crate) fn valid_job_id(job: &str) -> bool {
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    match (job.split_once('_'), job.split_once('+')) {
        (Some((a, k)), None) => digits(a) && digits(k),
        (None, Some((a, k))) => digits(a) && digits(k),
        (None, None) => digits(job),
        (Some(_), Some(_)) => false,
    }
}

pub(crate) fn selects(id: &str, j: &JobInfo) -> bool {
    id == j.display_id
        || id == j.id.to_string()
        || j.array_job_id.is_some_and(|a| a.to_string() == id)
        || j.het_job_id.is_some_and(|h| h.to_string() == id)
}

/// A job's standard output path as Slurm shows it: the pattern expanded for its batch step,
/// relative to its working directory.
pub(crate) fn stdout_path(j: &JobInfo, pattern: &str) -> String {
    let node = first_node(&j.nodelist);
    let p = slurmcli::expand_pattern(pattern, j.id, &j.name, j.array_job_id.zip(j.array_task_id), &node, &j.user);
    if p.starts_with('/') { p } else { format!("{}/{p}", j.workdir.trim_end_matches('/')) }
}

/// The first node of a host list (the batch host), empty for none.
pub(crate) fn first_node(list: &str) -> String {
    slurmcli::expand(list, 1_000_000).ok().and_then(|v| v.into_iter().next()).unwrap_or_default()
}

/// A job's exit code and signal from `code:signal`.
pub(crate) fn exit_parts(j: &JobInfo) -> (i64, i64) {
    let (c, s) = j.exit_code.split_once(':').unwrap_or(("0", "0"));
    (c.parse().unwrap_or(0), s.parse().unwrap_or(0))
}

/// Slurm's elapsed time of a job: from its start to its end (or now), less the time it was
/// suspended.
pub(crate) fn elapsed(j: &JobInfo, now: i64) -> i64 {
    j.start.filter(|_| !j.start_estimated).map_or(0, |s| (j.end.unwrap_or(now) - s - suspended(j, now)).max(0))
}

/// Seconds a job's run has been suspended, up to `now` (sacct's `Suspended`).
pub(crate) fn suspended(j: &JobInfo, now: i64) -> i64 {
    j.suspended + j.suspended_since.map_or(0, |t| (j.end.unwrap_or(now) - t).max(0))
}

// ---- data_parser v0.0.44 ----

/// `{"set": true, "infinite": false, "number": n}` (`set: false` for none).
pub(crate) fn num(n: Option<i64>) -> Value {
    match n {
        Some(n) => json!({"set": true, "infinite": false, "number": n}),
        None => json!({"set": false, "infinite": false, "number": 0}),
    }
}

/// A time limit in minutes (`infinite` for none).
pub(crate) fn limit_minutes(secs: Option<i64>) -> Value {
    match secs {
        Some(s) => json!({"set": true, "infinite": false, "number": s / 60}),
        None => json!({"set": false, "infinite": true, "number": 0}),
    }
}

/// A process exit code as data_parser's `PROCESS_EXIT_CODE_VERBOSE`.
pub(crate) fn exit_json(j: &JobInfo) -> Value {
    let (code, sig) = exit_parts(j);
    let status = match (j.state.as_str(), code, sig) {
        ("PENDING", _, _) => vec!["PENDING"],
        (_, _, s) if s > 0 => vec!["SIGNALED"],
        (_, 0, _) => vec!["SUCCESS"],
        _ => vec!["ERROR"],
    };
    json!({
        "status": status,
        "return_code": num(Some(code)),
        "signal": {"id": num((sig > 0).then_some(sig)), "name": signal_name(sig)},
    })
}

fn signal_name(sig: i64) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        12 => "SIGUSR2",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => "",
    }
}

/// The `meta` object of a reply: the plugin, the client and the Slurm version.
pub(crate) fn meta(command: &[&str]) -> Value {
    let (major, minor, micro) = SLURM_VERSION;
    let user = std::env::var("USER").unwrap_or_default();
    json!({
        "plugin": {"type": "", "name": "", "data_parser": "data_parser/v0.0.44", "accounting_storage": "tandem"},
        "client": {"source": "", "user": user, "group": ""},
        "command": command,
        "slurm": {"version": {"major": major.to_string(), "micro": micro.to_string(), "minor": minor.to_string()},
                  "release": format!("{major}.{minor}.{micro}"), "cluster": "tandem"},
    })
}

/// Prints a reply: `key` holding `items`, with meta, errors and warnings (and `last_update`
/// where Slurm's has it).
pub(crate) fn print_reply(key: &str, items: Vec<Value>, command: &[&str], now: i64, last_update: bool) -> Result<i32> {
    let mut v = json!({ key: items, "meta": meta(command), "errors": [], "warnings": [] });
    if last_update {
        v["last_update"] = num(Some(now));
        if key == "jobs" {
            v["last_backfill"] = num(Some(now));
        }
    }
    print_json(&v)?;
    Ok(0)
}

/// A job as `squeue --json` and `scontrol show job --json` give it (data_parser's `JOB_INFO`).
pub(crate) fn job_info_json(j: &JobInfo, now: i64) -> Value {
    let pending = j.state == "PENDING";
    let mut v = json!({
        "account": j.account,
        "array_job_id": num(Some(j.array_job_id.unwrap_or(0) as i64)),
        "array_task_id": num(j.array_task_id.map(i64::from)),
        "array_max_tasks": num(Some(j.array_max_running.unwrap_or(0) as i64)),
        "array_task_string": "",
        "batch_flag": true,
        "batch_host": first_node(&j.nodelist),
        "command": "",
        "cpus_per_task": num(Some(j.cpus_per_task as i64)),
        "cpus": num(Some(j.cpus as i64)),
        "current_working_directory": j.workdir,
        "dependency": j.dependency,
        "end_time": num(j.end.or_else(|| j.start.zip(j.time_limit).map(|(s, l)| s + l)).or(Some(0))),
        "excluded_nodes": j.exc_nodes,
        "exit_code": exit_json(j),
        "features": j.features.join("&"),
        "group_id": j.gid,
        "job_id": j.id,
        "job_state": [j.state],
        "memory_per_cpu": num(j.mem_per_cpu_mb.map(|m| m as i64)),
        "memory_per_node": num(j.mem_per_node_mb.map(|m| m as i64)),
        "name": j.name,
        "nice": j.nice,
        "node_count": num(Some(j.nodes as i64)),
        "nodes": j.nodelist,
        "partition": j.partition,
        "qos": j.qos,
        "required_nodes": j.req_nodes,
        "restart_cnt": j.restarts,
        "standard_error": stdout_path(j, j.error.as_deref().unwrap_or(&j.output)),
        "standard_input": "/dev/null",
        "standard_output": stdout_path(j, &j.output),
        "start_time": num(Some(j.start.unwrap_or(0))),
        "state_reason": j.reason,
        "submit_time": num(Some(j.submit)),
        "tasks": num(Some(j.ntasks as i64)),
        "time_limit": limit_minutes(j.time_limit),
        "tres_per_node": if j.gpus > 0 { format!("gres/gpu:{}", j.gpus) } else { String::new() },
        "user_id": j.uid,
        "user_name": j.user,
        "run_time": if pending { 0 } else { elapsed(j, now) },
    });
    // A heterogeneous job's component: its leader, offset and the ids of all its components.
    v["het_job_id"] = num(j.het_job_id.map(|h| h as i64).or(Some(0)));
    v["het_job_offset"] = num(j.het_job_offset.map(i64::from));
    v["het_job_id_set"] =
        json!(j.het_job_id.zip(j.het_size).map_or(String::new(), |(h, n)| format!("{h}-{}", h + u64::from(n.max(1)) - 1)));
    // Beside the rest (one `json!` of them all passes its macro's recursion limit).
    v["job_resources"] = job_resources(j);
    crate::data_parser::fill("JOB_INFO", &mut v);
    v
}

/// data_parser v0.0.44's `job_resources` of a job: `null` while it holds nothing (pending, as
/// Slurm 24.11.5 and later print it), else its nodes with what it holds on each.
fn job_resources(j: &JobInfo) -> Value {
    if j.allocation.is_empty() {
        return Value::Null;
    }
    let allocation: Vec<Value> = j
        .allocation
        .iter()
        .enumerate()
        .map(|(i, a)| {
            json!({
                "index": i, "name": a.name,
                "cpus": {"count": a.cpus, "used": a.cpus},
                "memory": {"used": a.memory_mb, "allocated": a.memory_mb},
                "sockets": [],
            })
        })
        .collect();
    let names: Vec<String> = j.allocation.iter().map(|a| a.name.clone()).collect();
    json!({
        "select_type": ["CPU", "MEMORY"],
        "nodes": {
            "count": j.allocation.len(),
            "select_type": ["AVAILABLE"],
            "list": slurmcli::compress(&names),
            "whole": false,
            "allocation": allocation,
        },
        "cpus": j.allocation.iter().map(|a| a.cpus).sum::<u32>(),
        "threads_per_core": num(Some(1)),
    })
}

/// A node as `sinfo --json` (inside its `sinfo` entries) and `scontrol show node --json` give
/// it (data_parser's `NODE`).
pub(crate) fn node_json(n: &NodeInfo) -> Value {
    let mut v = json!({
        "name": n.name,
        "hostname": n.name,
        "address": n.addr,
        "state": node_flags(n),
        "cpus": n.cpus.0,
        "alloc_cpus": n.cpus.1,
        "alloc_idle_cpus": n.cpus.0.saturating_sub(n.cpus.1),
        "real_memory": n.memory_mb.0,
        "alloc_memory": n.memory_mb.1,
        "free_mem": num(Some(n.memory_mb.0.saturating_sub(n.memory_mb.1) as i64)),
        "gres": if n.gpus.0 > 0 { format!("gpu:{}:{}", n.gpus.2.clone().unwrap_or_else(|| "gpu".into()), n.gpus.0) } else { String::new() },
        "gres_used": format!("gpu:{}", n.gpus.1),
        "features": n.features,
        "active_features": n.features,
        "partitions": n.partitions,
        "reason": n.reason.clone().unwrap_or_default(),
    });
    crate::data_parser::fill("NODE", &mut v);
    v
}

/// A node's state and flags as data_parser's list and `scontrol show node`'s `State=` name
/// them: its state's, then `RESERVED` in a reservation, `REBOOT_REQUESTED` or `REBOOT_ISSUED`.
pub(crate) fn node_flags(n: &wire::NodeInfo) -> Vec<&'static str> {
    let mut state = node_state_list(&n.state);
    if n.reservation.is_some() && !state.contains(&"RESERVED") {
        state.push("RESERVED");
    }
    match n.reboot.as_deref() {
        Some("issued") => state.push("REBOOT_ISSUED"),
        Some(_) => state.push("REBOOT_REQUESTED"),
        None => {}
    }
    state
}

/// A node's state as `sinfo` prints it, with Slurm's reboot marks: an empty node with a
/// reboot asked for is `boot` (`reboot` long), `^` once it is issued; a busy one keeps its
/// state with `@` (`mix@`, `alloc@`, `drain@`), `^` once issued.
pub(crate) fn sinfo_state(n: &wire::NodeInfo, compact: bool) -> String {
    let base = if compact { compact_state(&n.state).to_string() } else { n.state.clone() };
    let Some(r) = n.reboot.as_deref() else { return base };
    let mark = if r == "issued" { "^" } else { "@" };
    let empty = n.cpus.1 == 0 && matches!(n.state.as_str(), "idle" | "drain" | "reserved" | "maint");
    match (empty, compact) {
        (true, true) => format!("boot{}", if r == "issued" { "^" } else { "" }),
        (true, false) => format!("reboot{}", if r == "issued" { "^" } else { "" }),
        (false, _) => format!("{base}{mark}"),
    }
}

/// A node state as Slurm's `%t` prints it (`mix`, `alloc`, `drng`, ...).
pub(crate) fn compact_state(s: &str) -> &str {
    match s {
        "mixed" => "mix",
        "allocated" => "alloc",
        "draining" => "drng",
        "drained" => "drain",
        "completing" => "comp",
        "unknown" => "unk",
        "future" => "futr",
        "reserved" => "resv",
        "planned" => "plnd",
        other => other,
    }
}

/// Tandem's node state as data_parser's list (`["IDLE"]`, `["IDLE", "DRAIN"]`).
pub(crate) fn node_state_list(state: &str) -> Vec<&'static str> {
    match state {
        "idle" => vec!["IDLE"],
        "mixed" => vec!["MIXED"],
        "allocated" => vec!["ALLOCATED"],
        "drain" => vec!["IDLE", "DRAIN"],
        "down" => vec!["DOWN"],
        "maint" => vec!["IDLE", "MAINTENANCE", "RESERVED"],
        "reserved" => vec!["IDLE", "RESERVED"],
        _ => vec!["UNKNOWN"],
    }
}

/// A partition as data_parser's `PARTITION_INFO`.
pub(crate) fn partition_json(p: &wire::PartitionInfo, nodes: &[NodeInfo]) -> Value {
    let names: Vec<String> = nodes.iter().filter(|n| n.partitions.contains(&p.name)).map(|n| n.name.clone()).collect();
    let cpus: u32 = nodes.iter().filter(|n| n.partitions.contains(&p.name)).map(|n| n.cpus.0).sum();
    let mut v = json!({
        "name": p.name,
        "nodes": {"configured": slurmcli::compress(&names), "total": names.len(), "allowed_allocation": ""},
        "cpus": {"total": cpus},
        "defaults": {"time": limit_minutes(p.default_time)},
        "maximums": {"time": limit_minutes(p.max_time)},
        "priority": {"tier": p.priority_tier, "job_factor": 1},
        "partition": {"state": ["UP"]},
    });
    crate::data_parser::fill("PARTITION_INFO", &mut v);
    v
}

/// Prints rows under Slurm's header as `sreport` and `sstat` do: `sep` `Some(trailing)` for
/// `|`-separated fields (`-p` with a trailing `|`, `-P` without), else columns of the given
/// widths (values cut to them) with a rule of dashes, right-justified but for the first column
/// when `left_first`.
pub(crate) fn print_table(cols: &[(&str, usize)], rows: &[Vec<String>], header: bool, sep: Option<bool>, left_first: bool) {
    match sep {
        Some(trailing) => {
            let end = if trailing { "|" } else { "" };
            if header {
                println!("{}{end}", cols.iter().map(|c| c.0).collect::<Vec<_>>().join("|"));
            }
            for r in rows {
                println!("{}{end}", r.join("|"));
            }
        }
        None => {
            let line = |cells: Vec<String>| cells.join(" ").trim_end().to_string();
            let cell = |i: usize, v: &str, w: usize| if i == 0 && left_first { format!("{v:<w$.w$}") } else { format!("{v:>w$.w$}") };
            if header {
                println!("{}", line(cols.iter().enumerate().map(|(i, (h, w))| cell(i, h, *w)).collect()));
                println!("{}", line(cols.iter().map(|(_, w)| "-".repeat(*w)).collect()));
            }
            for r in rows {
                println!("{}", line(r.iter().zip(cols).enumerate().map(|(i, (v, (_, w)))| cell(i, v, *w)).collect()));
            }
        }
    }
}

/// `-M`/`--clusters LIST`: each entry must be this cluster's name or `all` (a cluster of one,
/// as Slurm's commands answer for an unknown cluster).
pub(crate) fn check_clusters(t: &client::Target, list: &str) -> Result<()> {
    let name: String = config(t).map(|c| c.cluster_name).unwrap_or_else(|_| "tandem".into());
    for c in list.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        if !c.eq_ignore_ascii_case("all") && !c.eq_ignore_ascii_case(&name) {
            anyhow::bail!(
                "'{}' can't be reached now, or it is an invalid entry for --cluster.  Use 'sacctmgr list clusters' to see available clusters.",
                c.escape_debug()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_shown_with_control_characters_made_visible_and_json_stays_json() {
        let evil = "\u{1b}]0;x\u{7}\u{9b}2J\u{7f}|a";
        let v = json!({"name": evil, "list": [evil, 3], "map": {evil: {"deep": evil}}, "n": 1});
        let s: Value = shown(v.clone()).unwrap();
        let want = "^[]0;x^GM-^[2J^?|a";
        assert_eq!(s["name"], want);
        assert_eq!(s["list"][0], want);
        assert_eq!(s["map"][want]["deep"], want, "{s}");
        assert_eq!(s["n"], 1);
        let text = json_text(&v).unwrap();
        assert!(!text.chars().any(|c: char| slurmcli::is_control(c) && c != '\n'), "{text:?}");
        assert!(text.contains(r"\u001b]0;x\u0007\u009b2J\u007f|a"), "{text}");
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), v, "the same value, read back");
        assert_eq!(json_text(&json!({"a": [1]})).unwrap(), serde_json::to_string_pretty(&json!({"a": [1]})).unwrap());
    }

    fn job() -> JobInfo {
        serde_json::from_value(json!({
            "id": 33, "display_id": "32_1", "name": "train", "user": "alice", "account": "ml", "partition": "gpu",
            "qos": "normal", "state": "CANCELLED", "reason": "None", "nodelist": "node[1-2]", "nodes": 2, "ntasks": 4,
            "cpus": 8, "gpus": 0, "time_limit": 300, "submit": 100, "start": 110, "start_estimated": false, "end": 121,
            "exit_code": "0:15", "restarts": 0, "workdir": "/home/alice/", "output": "out-%A_%a-%N.txt", "steps": [],
            "message": null, "uid": 1000, "array_job_id": 32, "array_task_id": 1
        }))
        .unwrap()
    }

    #[test]
    fn iso_dates() {
        assert_eq!(iso(0), "1970-01-01T00:00:00");
        assert_eq!(iso(1_796_083_200 + 3661), "2026-12-01T01:01:01");
    }

    #[test]
    fn paths_and_selection() {
        let j = job();
        assert_eq!(stdout_path(&j, &j.output), "/home/alice/out-32_1-node1.txt");
        assert_eq!(stdout_path(&j, "/abs/%j.out"), "/abs/33.out");
        assert!(selects("32", &j) && selects("32_1", &j) && selects("33", &j) && !selects("3", &j));
        assert_eq!(elapsed(&j, 1000), 11);
        assert_eq!(exit_parts(&j), (0, 15));
        // Suspended for 4 s in all: left out of the elapsed time; and suspended now.
        let mut s = j.clone();
        (s.suspended, s.end) = (4, None);
        assert_eq!((elapsed(&s, 130), suspended(&s, 130)), (16, 4));
        s.suspended_since = Some(125);
        assert_eq!((elapsed(&s, 130), suspended(&s, 130)), (11, 9));
    }

    #[test]
    fn data_parser_shapes() {
        let v = job_info_json(&job(), 200);
        assert_eq!(v["job_state"], json!(["CANCELLED"]));
        assert_eq!(v["time_limit"], json!({"set": true, "infinite": false, "number": 5}));
        assert_eq!(v["exit_code"]["status"], json!(["SIGNALED"]));
        assert_eq!(v["exit_code"]["signal"]["id"]["number"], 15);
        assert_eq!(v["exit_code"]["signal"]["name"], "SIGTERM");
        assert_eq!(v["array_job_id"]["number"], 32);
        assert_eq!(v["array_task_id"]["number"], 1);
        assert_eq!(v["user_name"], "alice");
        assert_eq!(v["batch_host"], "node1");
        // Nothing held (a pending job, or a record without its allocation): null, as Slurm's.
        assert_eq!(v["job_resources"], Value::Null);
        let mut held = job();
        held.allocation = vec![
            wire::NodeAllocInfo { name: "node1".into(), cpus: 4, memory_mb: 1024, gpus: 1 },
            wire::NodeAllocInfo { name: "node2".into(), cpus: 2, memory_mb: 512, gpus: 0 },
        ];
        let r = &job_info_json(&held, 200)["job_resources"];
        assert_eq!((r["nodes"]["count"].as_u64(), r["nodes"]["list"].as_str(), r["cpus"].as_u64()), (Some(2), Some("node[1-2]"), Some(6)));
        assert_eq!(
            r["nodes"]["allocation"][1],
            json!({"index": 1, "name": "node2", "cpus": {"count": 2, "used": 2}, "memory": {"used": 512, "allocated": 512}, "sockets": []})
        );
        assert_eq!(limit_minutes(None), json!({"set": false, "infinite": true, "number": 0}));
        assert_eq!(node_state_list("drain"), vec!["IDLE", "DRAIN"]);
        assert_eq!(meta(&["squeue"])["slurm"]["release"], "25.11.0");
    }
}
