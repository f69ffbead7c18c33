//! Slurm's `job_submit.lua` interface, the pure half: a submission's `job_desc` fields as a
//! site's hook reads them (Slurm 22.05's names, units and unset values: `slurm.NO_VAL` for an
//! unset number, nil for an unset string), and the fields the hook sets applied back through
//! the one option parser ([`BatchSpec::set_option`]), so a hook's value meets the checks a
//! command line's would. The controller checks the result again as any submission's: a hook
//! can change a request, never grant what its user may not have.

use crate::{BatchSpec, Invalid};
use model::{DepKind, Dependency, GpuPer, MemRequest, Time};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Slurm's `NO_VAL`: a 32-bit number not given.
pub const NO_VAL: f64 = 4_294_967_294.0;
/// Slurm's `NO_VAL16`.
pub const NO_VAL16: f64 = 65_534.0;
/// Slurm's `NO_VAL64`, as Lua 5.1's double holds it.
pub const NO_VAL64: f64 = 18_446_744_073_709_551_614.0;
/// Slurm's `NO_VAL8`.
pub const NO_VAL8: f64 = 254.0;
/// Slurm's `INFINITE` (an unlimited time limit, in minutes).
pub const INFINITE: f64 = 4_294_967_295.0;
/// Slurm's `INFINITE16`.
pub const INFINITE16: f64 = 65_535.0;
/// Slurm's `INFINITE64`.
pub const INFINITE64: f64 = 18_446_744_073_709_551_615.0;
/// Slurm's `MEM_PER_CPU` flag bit of `pn_min_memory`.
pub const MEM_PER_CPU: f64 = 9_223_372_036_854_775_808.0;
/// Slurm's `NICE_OFFSET`: `job_desc.nice` holds the nice value plus this.
pub const NICE_OFFSET: f64 = 2_147_483_648.0;

/// Slurm's return codes a hook may give, with their words (`slurm_strerror`).
pub const RETURN_CODES: &[(&str, i64, &str)] = &[
    ("SUCCESS", 0, "No error"),
    ("ERROR", -1, "Unspecified error"),
    ("FAILURE", -1, "Unspecified error"),
    ("ESLURM_ACCESS_DENIED", 2002, "Access/permission denied"),
    ("ESLURM_ACCOUNTING_POLICY", 2050, "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"),
    ("ESLURM_INVALID_ACCOUNT", 2045, "Invalid account or account/partition combination specified"),
    ("ESLURM_INVALID_LICENSES", 2048, "Invalid license specification"),
    ("ESLURM_INVALID_NODE_COUNT", 2006, "Node count specification invalid"),
    ("ESLURM_INVALID_TIME_LIMIT", 2051, "Requested time limit is invalid (missing or exceeds some limit)"),
    ("ESLURM_JOB_MISSING_SIZE_SPECIFICATION", 2008, "Job size specification needs to be provided"),
    ("ESLURM_MISSING_TIME_LIMIT", 8000, "Time limit specification required, but not provided"),
];

/// Slurm's words for a hook's non-zero return code.
pub fn return_code_text(rc: i64) -> String {
    RETURN_CODES.iter().find(|(_, n, _)| *n == rc).map_or_else(|| format!("Unexpected error {rc}"), |(_, _, w)| (*w).to_string())
}

/// A field's value as Lua sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    /// A number (Lua 5.1 has only doubles).
    Num(f64),
    /// A string.
    Str(String),
    /// A boolean.
    Bool(bool),
}

/// Fields by name; an absent field reads as nil.
pub type Fields = BTreeMap<String, Value>;

/// The fields a hook may set (Slurm 22.05's `_set_job_req_field`); setting another is logged
/// and ignored, as Slurm does.
pub const WRITABLE: &[&str] = &[
    "account",
    "acctg_freq",
    "admin_comment",
    "array_inx",
    "batch_features",
    "begin_time",
    "bitflags",
    "burst_buffer",
    "clusters",
    "comment",
    "container",
    "contiguous",
    "cores_per_socket",
    "cpu_freq_min",
    "cpu_freq_max",
    "cpu_freq_gov",
    "cpus_per_task",
    "cpus_per_tres",
    "dependency",
    "delay_boot",
    "end_time",
    "extra",
    "exc_nodes",
    "features",
    "gres",
    "immediate",
    "licenses",
    "mail_type",
    "mail_user",
    "max_cpus",
    "max_nodes",
    "mem_per_tres",
    "min_cpus",
    "min_mem_per_cpu",
    "min_mem_per_node",
    "min_nodes",
    "name",
    "nice",
    "ntasks_per_gpu",
    "ntasks_per_node",
    "ntasks_per_socket",
    "ntasks_per_tres",
    "num_tasks",
    "partition",
    "prefer",
    "power_flags",
    "pn_min_cpus",
    "pn_min_memory",
    "pn_min_tmp_disk",
    "priority",
    "qos",
    "reboot",
    "req_nodes",
    "req_switch",
    "requeue",
    "reservation",
    "script",
    "selinux_context",
    "shared",
    "oversubscribe",
    "site_factor",
    "sockets_per_node",
    "std_err",
    "std_in",
    "std_out",
    "threads_per_core",
    "time_limit",
    "time_min",
    "tres_bind",
    "tres_freq",
    "tres_per_job",
    "tres_per_node",
    "tres_per_socket",
    "tres_per_task",
    "wait4switch",
    "wckey",
    "work_dir",
];

/// Who submits, and what the controller knows of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Submitter {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// User name.
    pub user: String,
    /// Their default account, if any.
    pub default_account: Option<String>,
    /// Their default QOS, if any.
    pub default_qos: Option<String>,
}

fn num(f: &mut Fields, k: &str, v: f64) {
    f.insert(k.into(), Value::Num(v));
}

fn text(f: &mut Fields, k: &str, v: Option<&str>) {
    if let Some(v) = v.filter(|v| !v.is_empty()) {
        f.insert(k.into(), Value::Str(v.into()));
    }
}

fn or(v: Option<u32>, unset: f64) -> f64 {
    v.map_or(unset, f64::from)
}

/// Minutes of a limit in seconds, rounded up, as Slurm keeps time limits.
fn minutes(secs: Time) -> f64 {
    (secs.max(0) as f64 / 60.0).ceil()
}

/// A dependency list in Slurm's words (`afterok:12,singleton`).
pub fn dependency_text(deps: &[Dependency]) -> String {
    deps.iter()
        .map(|d| {
            let kind = match d.kind {
                DepKind::After => "after",
                DepKind::AfterOk => "afterok",
                DepKind::AfterNotOk => "afternotok",
                DepKind::AfterAny => "afterany",
                DepKind::Singleton => "singleton",
            };
            d.job.map_or_else(|| kind.to_string(), |id| format!("{kind}:{}", id.0))
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// An array's indices as ranges (`1-5,7,9%2`).
fn array_text(a: &crate::ArraySpec) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < a.indices.len() {
        let mut j = i;
        while j + 1 < a.indices.len() && a.indices[j + 1] == a.indices[j] + 1 {
            j += 1;
        }
        parts.push(if i == j { a.indices[i].to_string() } else { format!("{}-{}", a.indices[i], a.indices[j]) });
        i = j + 1;
    }
    let mut s = parts.join(",");
    if let Some(m) = a.max_running {
        s.push_str(&format!("%{m}"));
    }
    s
}

/// `gres:gpu[:type]:N`, Slurm's form of a GPU count in `tres_per_*`.
fn gpu_tres(ty: Option<&str>, n: u32) -> String {
    match ty {
        Some(t) => format!("gres:gpu:{t}:{n}"),
        None => format!("gres:gpu:{n}"),
    }
}

/// The `job_desc` a hook sees for submission `b` of `who`, run in `work_dir`, with its
/// environment `env` (sbatch's alone, as Slurm's: `environment` is nil for others).
pub fn job_desc(b: &BatchSpec, work_dir: &str, who: &Submitter) -> Fields {
    let mut f = Fields::new();
    text(&mut f, "account", b.account.as_deref());
    text(&mut f, "array_inx", b.array.as_ref().map(array_text).as_deref());
    num(&mut f, "begin_time", b.begin.map_or(0.0, |t| t as f64));
    text(&mut f, "clusters", b.clusters.as_deref());
    text(&mut f, "comment", b.comment.as_deref());
    num(&mut f, "contiguous", NO_VAL16);
    num(&mut f, "cpus_per_task", or(b.cpus_per_task, NO_VAL16));
    text(&mut f, "default_account", who.default_account.as_deref());
    text(&mut f, "default_qos", who.default_qos.as_deref());
    text(&mut f, "dependency", Some(dependency_text(&b.dependency).as_str()));
    text(&mut f, "exc_nodes", Some(crate::compress(&b.exclude).as_str()));
    text(&mut f, "features", Some(b.constraint.join("&").as_str()));
    num(&mut f, "group_id", f64::from(who.gid));
    num(&mut f, "immediate", 0.0);
    text(&mut f, "mail_user", b.mail_user.as_deref());
    let (min_nodes, max_nodes) = b.nodes.map_or((NO_VAL, NO_VAL), |(a, z)| (f64::from(a), f64::from(z)));
    num(&mut f, "min_nodes", min_nodes);
    num(&mut f, "max_nodes", max_nodes);
    num(&mut f, "max_cpus", NO_VAL);
    let min_cpus = b.ntasks.map_or(NO_VAL, |n| f64::from(n) * f64::from(b.cpus_per_task.unwrap_or(1)));
    num(&mut f, "min_cpus", min_cpus);
    num(&mut f, "pn_min_cpus", NO_VAL16);
    match b.mem {
        Some(MemRequest::PerNode(bytes)) => {
            let mb = (bytes >> 20) as f64;
            num(&mut f, "pn_min_memory", mb);
            num(&mut f, "min_mem_per_node", mb);
        }
        Some(MemRequest::PerCpu(bytes)) => {
            let mb = (bytes >> 20) as f64;
            num(&mut f, "pn_min_memory", mb + MEM_PER_CPU);
            num(&mut f, "min_mem_per_cpu", mb);
        }
        None => num(&mut f, "pn_min_memory", NO_VAL64),
    }
    text(&mut f, "name", b.job_name.as_deref());
    num(&mut f, "nice", if b.nice == 0 { NO_VAL } else { NICE_OFFSET + f64::from(b.nice) });
    num(&mut f, "ntasks_per_node", or(b.ntasks_per_node, NO_VAL16));
    num(&mut f, "num_tasks", or(b.ntasks, NO_VAL));
    text(&mut f, "partition", b.partition.as_deref());
    num(&mut f, "priority", NO_VAL);
    text(&mut f, "qos", b.qos.as_deref());
    num(&mut f, "reboot", NO_VAL16);
    text(&mut f, "req_nodes", Some(crate::compress(&b.nodelist).as_str()));
    num(&mut f, "req_switch", or(b.switches, NO_VAL));
    num(&mut f, "requeue", b.requeue.map_or(NO_VAL16, |r| f64::from(u8::from(r))));
    text(&mut f, "reservation", b.reservation.as_deref());
    text(&mut f, "script", Some(b.script.as_str()));
    let shared = if b.exclusive { 0.0 } else { NO_VAL16 };
    num(&mut f, "shared", shared);
    num(&mut f, "oversubscribe", shared);
    num(&mut f, "site_factor", NO_VAL);
    text(&mut f, "std_err", b.error.as_deref());
    text(&mut f, "std_out", b.output.as_deref());
    num(&mut f, "threads_per_core", or(b.threads_per_core, NO_VAL16));
    let limit = match b.time {
        None => NO_VAL,
        Some(None) => INFINITE,
        Some(Some(t)) => minutes(t),
    };
    num(&mut f, "time_limit", limit);
    num(&mut f, "time_min", b.time_min.map_or(NO_VAL, minutes));
    let mut per_node: Vec<String> = Vec::new();
    if let Some(g) = &b.gpus {
        let (key, n) = match g.per {
            GpuPer::Job(n) => ("tres_per_job", n),
            GpuPer::Node(n) => ("tres_per_node", n),
            GpuPer::Task(n) => ("tres_per_task", n),
        };
        let t = gpu_tres(g.gpu_type.as_deref(), n);
        if key == "tres_per_node" {
            per_node.push(t);
        } else {
            text(&mut f, key, Some(&t));
        }
    }
    per_node.extend(b.gres_other.iter().map(|(name, n)| format!("gres:{name}:{n}")));
    text(&mut f, "tres_per_node", Some(per_node.join(",").as_str()));
    text(&mut f, "gres", Some(per_node.join(",").as_str()));
    num(&mut f, "user_id", f64::from(who.uid));
    text(&mut f, "user_name", Some(&who.user));
    num(&mut f, "wait4switch", NO_VAL);
    text(&mut f, "wckey", b.wckey.as_deref());
    text(&mut f, "work_dir", Some(work_dir));
    f
}

/// A number a hook set, as a whole count within `max`, or the unset value.
fn count(k: &str, v: &Value, unset: f64, max: f64) -> Result<Option<u64>, Invalid> {
    let n = match v {
        Value::Num(n) => *n,
        Value::Str(s) => s.trim().parse::<f64>().map_err(|_| Invalid::new(format!("job_desc.{k}: want a number, got {s:?}")))?,
        Value::Bool(_) => return Err(Invalid::new(format!("job_desc.{k}: want a number, got a boolean"))),
    };
    if n == unset {
        return Ok(None);
    }
    if !n.is_finite() || n < 0.0 || n.fract() != 0.0 || n > max {
        return Err(Invalid::new(format!("job_desc.{k}: want a whole number from 0 to {max}, got {n}")));
    }
    Ok(Some(n as u64))
}

fn string(k: &str, v: &Value) -> Result<String, Invalid> {
    match v {
        Value::Str(s) => Ok(s.clone()),
        Value::Num(n) if n.fract() == 0.0 && n.abs() < 1e15 => Ok(format!("{}", *n as i64)),
        Value::Num(n) => Ok(n.to_string()),
        Value::Bool(_) => Err(Invalid::new(format!("job_desc.{k}: want a string, got a boolean"))),
    }
}

/// `gres:name[:type]:N` items without their `gres:` prefix (`gres/` too); other TRES are not
/// generic resources.
fn strip_gres(k: &str, s: &str) -> Result<String, Invalid> {
    s.split(',')
        .map(|item| {
            let item = item.trim();
            item.strip_prefix("gres:")
                .or_else(|| item.strip_prefix("gres/"))
                .map(str::to_string)
                .or_else(|| (!item.contains('/') && !item.starts_with("license")).then(|| item.to_string()))
                .ok_or_else(|| Invalid::new(format!("job_desc.{k}: {item:?} is not a generic resource (gres:NAME[:TYPE]:COUNT)")))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(|v| v.join(","))
}

/// A GPU count of `tres_per_job` or `tres_per_task` (`gres:gpu[:type]:N`), as `--gpus`'
/// value (`[type:]N`).
fn gpu_value(k: &str, s: &str) -> Result<String, Invalid> {
    let g = strip_gres(k, s)?;
    match g.strip_prefix("gpu:").or_else(|| (g == "gpu").then_some("1")) {
        Some(rest) if !g.contains(',') => Ok(rest.to_string()),
        _ => Err(Invalid::new(format!("job_desc.{k}: only one GPU count (gres:gpu[:TYPE]:COUNT) is supported, got {s:?}"))),
    }
}

/// Applies the fields a hook set (`set`, their final values) to `b`, each through the option
/// parser as its sbatch option; an empty string unsets a field, as Slurm's setter does.
/// Returns notes for the controller's log (fields Slurm lets a hook set that Tandem does not
/// keep, and so ignores); an invalid value is an error that names the field.
pub fn apply(b: &mut BatchSpec, set: &Fields, now: Time) -> Result<Vec<String>, Invalid> {
    let mut notes = Vec::new();
    let opt = |b: &mut BatchSpec, long: &str, v: &str| {
        b.set_option(long, Some(v), now).map_err(|e| Invalid::new(format!("job_desc value refused: {}", e.0)))
    };
    let (mut min_nodes, mut max_nodes) = (None::<Option<u64>>, None::<Option<u64>>);
    for (k, v) in set {
        let s = || string(k, v);
        let blank = matches!(v, Value::Str(s) if s.is_empty());
        match k.as_str() {
            "account" | "partition" | "qos" | "reservation" | "comment" | "wckey" | "mail_user" | "name" | "std_out" | "std_err"
            | "work_dir" | "features" | "exc_nodes" | "req_nodes" | "dependency" | "array_inx" | "mail_type"
                if blank =>
            {
                match k.as_str() {
                    "account" => b.account = None,
                    "partition" => b.partition = None,
                    "qos" => b.qos = None,
                    "reservation" => b.reservation = None,
                    "comment" => b.comment = None,
                    "wckey" => b.wckey = None,
                    "mail_user" => b.mail_user = None,
                    "name" => b.job_name = None,
                    "std_out" => b.output = None,
                    "std_err" => b.error = None,
                    "work_dir" => b.chdir = None,
                    "features" => b.constraint.clear(),
                    "exc_nodes" => b.exclude.clear(),
                    "req_nodes" => b.nodelist.clear(),
                    "dependency" => b.dependency.clear(),
                    "array_inx" => b.array = None,
                    _ => b.mail_type = None,
                }
            }
            "account" => opt(b, "account", &s()?)?,
            "partition" => opt(b, "partition", &s()?)?,
            "qos" => opt(b, "qos", &s()?)?,
            "reservation" => opt(b, "reservation", &s()?)?,
            "comment" => opt(b, "comment", &s()?)?,
            "wckey" => opt(b, "wckey", &s()?)?,
            "mail_user" => opt(b, "mail-user", &s()?)?,
            "mail_type" => opt(b, "mail-type", &s()?)?,
            "name" => opt(b, "job-name", &s()?)?,
            "std_out" => opt(b, "output", &s()?)?,
            "std_err" => opt(b, "error", &s()?)?,
            "work_dir" => opt(b, "chdir", &s()?)?,
            "features" => opt(b, "constraint", &s()?)?,
            "exc_nodes" => opt(b, "exclude", &s()?)?,
            "req_nodes" => opt(b, "nodelist", &s()?)?,
            "dependency" => opt(b, "dependency", &s()?)?,
            "array_inx" => opt(b, "array", &s()?)?,
            "time_limit" => match v {
                Value::Num(n) if *n == INFINITE => b.time = Some(None),
                _ => match count(k, v, NO_VAL, 1e9)? {
                    None => b.time = None,
                    Some(m) => opt(b, "time", &m.to_string())?,
                },
            },
            "time_min" => match count(k, v, NO_VAL, 1e9)? {
                None => b.time_min = None,
                Some(m) => opt(b, "time-min", &m.to_string())?,
            },
            "min_nodes" => min_nodes = Some(count(k, v, NO_VAL, 1e6)?),
            "max_nodes" => max_nodes = Some(count(k, v, NO_VAL, 1e6)?),
            "num_tasks" => match count(k, v, NO_VAL, 1e9)? {
                None => b.ntasks = None,
                Some(n) => opt(b, "ntasks", &n.to_string())?,
            },
            "ntasks_per_node" => match count(k, v, NO_VAL16, 1e6)? {
                None => b.ntasks_per_node = None,
                Some(n) => opt(b, "ntasks-per-node", &n.to_string())?,
            },
            "cpus_per_task" => match count(k, v, NO_VAL16, 1e6)? {
                None => b.cpus_per_task = None,
                Some(n) => opt(b, "cpus-per-task", &n.to_string())?,
            },
            "threads_per_core" => match count(k, v, NO_VAL16, 1e6)? {
                None => b.threads_per_core = None,
                Some(n) => opt(b, "threads-per-core", &n.to_string())?,
            },
            "min_mem_per_node" => match count(k, v, NO_VAL64, 1e15)? {
                None => b.mem = None,
                Some(mb) => opt(b, "mem", &format!("{mb}M"))?,
            },
            "min_mem_per_cpu" => match count(k, v, NO_VAL64, 1e15)? {
                None => b.mem = None,
                Some(mb) => opt(b, "mem-per-cpu", &format!("{mb}M"))?,
            },
            "pn_min_memory" => match v {
                Value::Num(n) if *n >= MEM_PER_CPU && *n != NO_VAL64 => {
                    let mb = count(k, &Value::Num(n - MEM_PER_CPU), NO_VAL64, 1e15)?.unwrap_or(0);
                    opt(b, "mem-per-cpu", &format!("{mb}M"))?;
                }
                _ => match count(k, v, NO_VAL64, 1e15)? {
                    None => b.mem = None,
                    Some(mb) => opt(b, "mem", &format!("{mb}M"))?,
                },
            },
            "tres_per_node" | "gres" => {
                let g = strip_gres(k, &s()?)?;
                b.gres_other.clear();
                if matches!(&b.gpus, Some(g) if matches!(g.per, GpuPer::Node(_))) {
                    b.gpus = None;
                }
                if !g.is_empty() {
                    opt(b, "gres", &g)?;
                }
            }
            "tres_per_job" | "tres_per_task" => {
                let per_job = k == "tres_per_job";
                let mine = |g: &model::GpuRequest| matches!(g.per, GpuPer::Job(_)) == per_job && !matches!(g.per, GpuPer::Node(_));
                if blank {
                    if b.gpus.as_ref().is_some_and(mine) {
                        b.gpus = None;
                    }
                } else {
                    opt(b, if per_job { "gpus" } else { "gpus-per-task" }, &gpu_value(k, &s()?)?)?;
                }
            }
            "nice" => match count(k, v, NO_VAL, 2.0 * NICE_OFFSET)? {
                None => b.nice = 0,
                Some(n) => {
                    let n = n as f64 - if n as f64 >= NICE_OFFSET / 2.0 { NICE_OFFSET } else { 0.0 };
                    opt(b, "nice", &(n as i64).to_string())?;
                }
            },
            "requeue" => match count(k, v, NO_VAL16, 1.0)? {
                None => b.requeue = None,
                Some(r) => b.requeue = Some(r == 1),
            },
            "shared" | "oversubscribe" => b.exclusive = count(k, v, NO_VAL16, 65_535.0)? == Some(0),
            "begin_time" => match count(k, v, NO_VAL, 1e12)? {
                None | Some(0) => b.begin = None,
                Some(t) => b.begin = Some(t as Time),
            },
            "script" => {
                let s = s()?;
                if !s.starts_with("#!") {
                    return Err(Invalid::new("job_desc.script: a batch script must start with #! (its interpreter)"));
                }
                b.script = s;
            }
            other if WRITABLE.contains(&other) => {
                notes.push(format!("job_desc.{other} was set, which Tandem does not keep: ignored"));
            }
            other => notes.push(format!("_set_job_field: unrecognized field: {other}")),
        }
    }
    if min_nodes.is_some() || max_nodes.is_some() {
        let (a0, z0) = b.nodes.map_or((None, None), |(a, z)| (Some(u64::from(a)), Some(u64::from(z))));
        let a = min_nodes.unwrap_or(a0);
        let z = max_nodes.unwrap_or(z0);
        match (a, z) {
            (None, None) => b.nodes = None,
            (Some(a), None) => opt(b, "nodes", &a.to_string())?,
            (None, Some(z)) => opt(b, "nodes", &format!("1-{z}"))?,
            (Some(a), Some(z)) => opt(b, "nodes", &format!("{a}-{z}"))?,
        }
    }
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(args: &[&str]) -> BatchSpec {
        let mut argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        argv.push("--wrap=true".into());
        crate::parse_sbatch(&argv, 0, &mut |_| Ok("#!/bin/sh\ntrue\n".into())).unwrap()
    }

    fn who() -> Submitter {
        Submitter { uid: 1001, gid: 1001, user: "alice".into(), default_account: Some("research".into()), default_qos: None }
    }

    #[test]
    fn unset_values_are_slurms() {
        let d = job_desc(&spec(&[]), "/home/alice", &who());
        assert_eq!(d["time_limit"], Value::Num(NO_VAL));
        assert_eq!(d["max_nodes"], Value::Num(NO_VAL));
        assert_eq!(d["cpus_per_task"], Value::Num(NO_VAL16));
        assert_eq!(d["pn_min_memory"], Value::Num(NO_VAL64));
        assert!(!d.contains_key("partition") && !d.contains_key("tres_per_node") && !d.contains_key("min_mem_per_node"));
        assert_eq!(d["user_name"], Value::Str("alice".into()));
        assert_eq!(d["default_account"], Value::Str("research".into()));
    }

    #[test]
    fn given_values_in_slurms_units() {
        let b = spec(&["-p", "gpu", "-t", "90", "-N", "2", "--gpus-per-node=h100:2", "--gres=gpu:h100:2,nvme:1", "--mem-per-cpu=2G"]);
        let d = job_desc(&b, "/w", &who());
        assert_eq!(d["partition"], Value::Str("gpu".into()));
        assert_eq!(d["time_limit"], Value::Num(90.0));
        assert_eq!((&d["min_nodes"], &d["max_nodes"]), (&Value::Num(2.0), &Value::Num(2.0)));
        assert_eq!(d["tres_per_node"], Value::Str("gres:gpu:h100:2,gres:nvme:1".into()));
        assert_eq!(d["min_mem_per_cpu"], Value::Num(2048.0));
        assert_eq!(d["pn_min_memory"], Value::Num(2048.0 + MEM_PER_CPU));
        let d = job_desc(&spec(&["--gpus=4", "-t", "UNLIMITED"]), "/w", &who());
        assert_eq!(d["tres_per_job"], Value::Str("gres:gpu:4".into()));
        assert_eq!(d["time_limit"], Value::Num(INFINITE));
    }

    fn set(pairs: &[(&str, Value)]) -> Fields {
        pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    #[test]
    fn sets_go_through_the_option_parser() {
        let mut b = spec(&["-N", "4"]);
        let notes = apply(
            &mut b,
            &set(&[
                ("partition", Value::Str("debug".into())),
                ("time_limit", Value::Num(30.0)),
                ("tres_per_node", Value::Str("gres:gpu:1".into())),
                ("max_nodes", Value::Num(8.0)),
                ("admin_comment", Value::Str("x".into())),
                ("bogus", Value::Num(1.0)),
            ]),
            0,
        )
        .unwrap();
        assert_eq!(b.partition.as_deref(), Some("debug"));
        assert_eq!(b.time, Some(Some(1800)));
        assert_eq!(b.nodes, Some((4, 8)));
        assert!(matches!(b.gpus, Some(model::GpuRequest { per: GpuPer::Node(1), .. })));
        assert_eq!(notes.len(), 2, "{notes:?}");
        // Round trip: what the hook reads back is what it set.
        let d = job_desc(&b, "/w", &who());
        assert_eq!(d["tres_per_node"], Value::Str("gres:gpu:1".into()));
        // Unsetting.
        apply(&mut b, &set(&[("partition", Value::Str(String::new())), ("tres_per_node", Value::Str(String::new()))]), 0).unwrap();
        assert!(b.partition.is_none() && b.gpus.is_none());
    }

    #[test]
    fn hostile_values_are_refused_by_field() {
        for (k, v) in [
            ("time_limit", Value::Num(-5.0)),
            ("time_limit", Value::Num(1.5)),
            ("num_tasks", Value::Str("many".into())),
            ("partition", Value::Str("bad\nname".into())),
            ("qos", Value::Bool(true)),
            ("tres_per_node", Value::Str("license/foo:1".into())),
            ("tres_per_job", Value::Str("gres:gpu:1,gres:gpu:a:2".into())),
            ("min_nodes", Value::Num(f64::NAN)),
            ("script", Value::Str("no interpreter".into())),
            ("dependency", Value::Str("afterok:".into())),
        ] {
            let mut b = spec(&[]);
            let e = apply(&mut b, &set(&[(k, v.clone())]), 0).unwrap_err();
            assert!(e.0.contains(k) || e.0.contains("refused"), "{k}={v:?}: {}", e.0);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
        /// Whatever a script sets, to whatever value, applying it never panics, and what is
        /// accepted reads back as a job_desc again.
        #[test]
        fn any_field_set_to_anything_is_applied_or_refused_never_a_panic(
            k in proptest::sample::select(WRITABLE.iter().copied().chain(["bogus", "environment", "user_id"]).collect::<Vec<_>>()),
            n in proptest::num::f64::ANY,
            text in "\\PC{0,40}",
            pick in 0u8..3,
        ) {
            let v = match pick { 0 => Value::Num(n), 1 => Value::Str(text), _ => Value::Bool(n > 0.0) };
            let mut b = spec(&["-N", "2", "--gpus-per-node=1"]);
            if apply(&mut b, &set(&[(k, v)]), 0).is_ok() {
                let _ = job_desc(&b, "/w", &who());
            }
        }
    }

    #[test]
    fn return_codes_have_slurms_words() {
        assert_eq!(return_code_text(-1), "Unspecified error");
        assert_eq!(return_code_text(8000), "Time limit specification required, but not provided");
        assert_eq!(return_code_text(7), "Unexpected error 7");
    }
}
