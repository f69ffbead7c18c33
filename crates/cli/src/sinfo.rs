//! `sinfo`: partitions and nodes as Slurm's (`-N`, `-R`, `-l`, `-s`, `-o` codes with widths,
//! `-O` long names, `-p`, `-h`, `SINFO_FORMAT`, `--json` in data_parser v0.0.44's shape),
//! nodes filtered (`-n`, `-t`, `-d`, `-r`), grouped by configuration too (`-e`), sorted (`-S`),
//! repeated (`-i`); `-T` lists the advance reservations.

use anyhow::{Result, anyhow, bail};
use client::Target;
use serde_json::json;
use wire::{NodeInfo, PartitionInfo};

use crate::common::now;
use crate::query::{config, help, node_json, nodes, print_reply, version};
use slurmcli::SINFO_FIELDS;

const HELP: &str = "Usage: sinfo [OPTIONS]
  -d, --dead                 show only non-responding (down) nodes
  -e, --exact                group only nodes of identical CPUs, memory and GPUs
  -h, --noheader             no headers on output
  -i, --iterate=seconds      specify an iteration period
      --json                 produce JSON output (data_parser v0.0.44)
  -l, --long                 long output
  -n, --nodes=NODES          report on specific node(s)
  -N, --Node                 node-centric format
  -o, --format=format        format specification (%P %a %l %D %t %N %c %m %G %E %C %F %A ...)
  -O, --Format=format        long format specification (Partition,NodeList:30,...)
  -p, --partition=partition  report on specific partition(s)
  -r, --responding           report only responding nodes
  -R, --list-reasons         list reason nodes are down or drained
  -s, --summarize            report state summary only
  -S, --sort=fields          comma separated list of fields to sort on (e.g. -P,N)
  -t, --states=node_state    specify what node states to report on (idle,alloc,mix,drain,down,...)
  -T, --reservation          show only reservation information
  -V, --version              output version information and exit
      --help                 show this help message
";

/// What one line of `sinfo` describes: a partition's nodes in one state (or one node).
struct Group<'a> {
    part: &'a PartitionInfo,
    nodes: Vec<&'a NodeInfo>,
}

/// `sinfo`.
pub(crate) fn sinfo(args: &[String]) -> Result<i32> {
    let (mut node_oriented, mut reasons, mut header, mut long, mut summarize, mut json) = (false, false, true, false, false, false);
    let (mut fmt, mut long_fmt, mut parts) = (None, None, None::<Vec<String>>);
    let (p, from_env) = crate::common::parse_env("sinfo", args)?;
    let (mut clusters, mut node_names, mut states, mut dead, mut responding) = (None, None::<Vec<String>>, None, false, false);
    let (mut exact, mut sort, mut iterate, mut reservations) = (false, None, None::<u64>, false);
    for g in p.opts {
        let v = g.value().to_string();
        match g.key() {
            "format" => fmt = Some(v),
            "Format" => long_fmt = Some(v),
            "partition" => parts = Some(v.split(',').map(str::to_string).collect()),
            "Node" => node_oriented = true,
            "list-reasons" => reasons = true,
            "long" => long = true,
            "summarize" => summarize = true,
            "noheader" => header = false,
            "json" => json = true,
            "clusters" => clusters = Some(v),
            "nodes" => node_names = Some(slurmcli::expand(&v, 100_000).map_err(|e| anyhow!("Invalid node name specified: {}", e.0))?),
            "states" => states = Some(slurmcli::parse_node_states(&v).map_err(|e| anyhow!("{}", e.0))?),
            "dead" => dead = true,
            "responding" => responding = true,
            "exact" => exact = true,
            "sort" => sort = Some(slurmcli::parse_sort(&v, SINFO_FIELDS).map_err(|e| anyhow!("{}", e.0))?),
            "reservation" => reservations = true,
            "iterate" => {
                iterate = Some(v.parse().ok().filter(|n| *n > 0).ok_or_else(|| anyhow!("--iterate={v}: a positive number of seconds"))?)
            }
            "help" => return help(HELP),
            "usage" => return help("Usage: sinfo [-alNRsv] [-p partition] [-o format] [-O format] [--json]\n"),
            "version" => return version(),
            // Every partition is shown; sizes are printed as they are; one cluster.
            "all" | "verbose" | "hide" | "noconvert" | "federation" | "local" | "sibling" => {}
            other => unreachable!("sinfo's table and its reader disagree on {other}"),
        }
    }
    // SINFO_FORMAT: the format when none is given, unless -s, -N or -R choose theirs (as Slurm's).
    if fmt.is_none() && long_fmt.is_none() && !summarize && !node_oriented && !reasons {
        fmt = from_env.setting("SINFO_FORMAT").map(str::to_string);
    }
    if let Some(word) = p.args.first() {
        bail!("unexpected argument '{}'\nTry \"sinfo --help\" for more information", word.escape_debug());
    }
    let t = Target::from_env()?;
    if let Some(c) = &clusters {
        crate::query::check_clusters(&t, c)?;
    }
    if reservations {
        // Slurm's reservation listing (-o does not apply).
        return crate::resv::sinfo_table(header);
    }
    let mut first = true;
    loop {
        if iterate.is_some() {
            if !first {
                println!();
            }
            if header {
                crate::query::print_date(now());
            }
        }
        first = false;
        let o = Show { node_oriented, reasons, header, long, summarize, json, exact };
        let filter = |n: &NodeInfo| {
            node_names.as_ref().is_none_or(|w| w.contains(&n.name))
                && states.as_ref().is_none_or(|s| slurmcli::node_in_states(s, &n.state, n.cpus.1 > 0))
                && (!dead || n.state == "down")
                && (!responding || n.state != "down")
        };
        let rc = show(&t, &o, fmt.clone(), long_fmt.as_deref(), parts.as_deref(), &filter, sort.as_deref())?;
        match iterate {
            Some(s) => {
                use std::io::Write;
                let _ = std::io::stdout().flush();
                std::thread::sleep(std::time::Duration::from_secs(s));
            }
            None => return Ok(rc),
        }
    }
}

/// What `sinfo` shows, read from its options.
struct Show {
    node_oriented: bool,
    reasons: bool,
    header: bool,
    long: bool,
    summarize: bool,
    json: bool,
    exact: bool,
}

/// One listing of `sinfo`: the nodes `filter` passes, of the partitions `parts` (all: none),
/// grouped, sorted by `sort` and printed as `fmt` or `long_fmt` say.
fn show(
    t: &Target,
    o: &Show,
    mut fmt: Option<String>,
    long_fmt: Option<&str>,
    parts: Option<&[String]>,
    filter: &dyn Fn(&NodeInfo) -> bool,
    sort: Option<&[(&'static str, bool)]>,
) -> Result<i32> {
    let Show { node_oriented, reasons, header, long, summarize, json, exact } = *o;
    let long_fmt = long_fmt.map(str::to_string);
    let (mut list, cfg) = (nodes(t, json)?, config(t)?);
    list.retain(|n| filter(n));
    let mut partitions = cfg.partitions.clone();
    if let Some(p) = &parts {
        partitions.retain(|x| p.contains(&x.name));
    }
    if json {
        let mut items = Vec::new();
        for p in &partitions {
            for n in list.iter().filter(|n| n.partitions.contains(&p.name)) {
                let mut v = json!({"node": {"state": crate::query::node_flags(n)}, "nodes": {"nodes": [n.name], "total": 1,
                    "allocated": u32::from(n.state == "allocated" || n.state == "mixed"), "idle": u32::from(n.state == "idle")},
                    "cpus": {"allocated": n.cpus.1, "idle": n.cpus.0.saturating_sub(n.cpus.1), "other": 0, "total": n.cpus.0},
                    "memory": {"minimum": n.memory_mb.0, "maximum": n.memory_mb.0, "allocated": n.memory_mb.1},
                    "partition": crate::query::partition_json(p, &list), "reason": {"description": n.reason.clone().unwrap_or_default()}});
                v["node_info"] = node_json(n);
                items.push(v);
            }
        }
        return print_reply("sinfo", items, &["sinfo", "--json"], now(), false);
    }
    if reasons && fmt.is_none() && long_fmt.is_none() {
        if header {
            println!("{:<20} {:<9} NODELIST", "REASON", "STATE");
        }
        for n in list.iter().filter(|n| n.reason.is_some()) {
            println!("{:<20} {:<9} {}", n.reason.clone().unwrap_or_default(), n.state, n.name);
        }
        return Ok(0);
    }
    // As Slurm's defaults: the partition and node list columns as wide as their longest value,
    // at least 9.
    let pw = partitions.iter().map(|p| p.name.len() + usize::from(p.default)).max().unwrap_or(0).max(9);
    let nw = list.iter().map(|n| n.name.len()).max().unwrap_or(0).max(9);
    let default = match (node_oriented, long, summarize) {
        (_, _, true) => format!("%{pw}P %.5a %.10l %.16F %N"),
        (true, true, _) => format!("%{nw}N %.6D %.{pw}P %.11T %4c %.8z %.6m %.8d %.6w %.8f %20E"),
        (true, false, _) => format!("%{nw}N %.6D %.{pw}P %6t"),
        // 25.11's, with its RESERVATION column.
        (false, true, _) => format!("%{pw}P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %.11i %N"),
        (false, false, _) => format!("%{pw}P %.5a %.10l %.6D %.6t %N"),
    };
    // Tandem's own node-oriented layout (with CPUs, memory and GPUs) when nothing is asked.
    if node_oriented && !long && fmt.is_none() && long_fmt.is_none() {
        fmt = Some("%12N %.5D %9P %10t %.9C %.10m %16G %E".into());
    }
    let items = match (&fmt, &long_fmt) {
        (Some(f), _) => slurmcli::parse_percent(f, SINFO_FIELDS, "node"),
        (None, Some(f)) => slurmcli::parse_long(f, SINFO_FIELDS, "node"),
        _ => slurmcli::parse_percent(&default, SINFO_FIELDS, "node"),
    }
    .map_err(|e| anyhow!("{}", e.0))?;
    let mut groups: Vec<Group<'_>> = Vec::new();
    let by_state =
        !summarize && fmt.is_none() && long_fmt.is_none() || slurmcli::fields_used(&items).iter().any(|f| f.starts_with("State"));
    for p in &partitions {
        for n in list.iter().filter(|n| n.partitions.contains(&p.name)) {
            let same = groups.iter_mut().find(|g| {
                let n0 = g.nodes[0];
                std::ptr::eq(g.part, p)
                    && !node_oriented
                    && (!by_state || (n0.state == n.state && n0.reboot == n.reboot))
                    && (!exact || (n0.cpus.0, n0.memory_mb.0, n0.gpus.0) == (n.cpus.0, n.memory_mb.0, n.gpus.0))
            });
            match same {
                Some(g) => g.nodes.push(n),
                None => groups.push(Group { part: p, nodes: vec![n] }),
            }
        }
    }
    // Each key from the last, stable: numbers by value, the rest as text.
    for (name, desc) in sort.unwrap_or_default().iter().rev() {
        groups.sort_by(|x, y| {
            let (a, b) = (value(name, x, node_oriented), value(name, y, node_oriented));
            let o = match (a.parse::<f64>(), b.parse::<f64>()) {
                (Ok(a), Ok(b)) => a.total_cmp(&b),
                _ => a.cmp(&b),
            };
            if *desc { o.reverse() } else { o }
        });
    }
    if header && long {
        crate::query::print_date(now());
    }
    if header {
        let h = |f: &str| match (f, node_oriented) {
            ("NodeList", true) => "NODELIST".to_string(),
            ("CPUsState", true) => "CPUS(A/T)".to_string(),
            _ => slurmcli::header_of(SINFO_FIELDS, f).to_string(),
        };
        println!("{}", slurmcli::render(&items, h, &[]));
    }
    for g in &groups {
        println!("{}", slurmcli::render(&items, |f| value(f, g, node_oriented), &[]));
    }
    Ok(0)
}

fn value(f: &str, g: &Group<'_>, node_oriented: bool) -> String {
    let n0 = g.nodes[0];
    let names: Vec<String> = g.nodes.iter().map(|n| n.name.clone()).collect();
    let count = |s: &[&str]| g.nodes.iter().filter(|n| s.contains(&n.state.as_str())).count();
    let (alloc, idle) = (count(&["allocated", "mixed"]), count(&["idle"]));
    let other = g.nodes.len() - alloc - idle;
    let limit = |s: Option<i64>| s.map_or_else(|| "infinite".into(), slurmcli::squeue_secs);
    match f {
        "Partition" => format!("{}{}", g.part.name, if g.part.default { "*" } else { "" }),
        "PartitionName" => g.part.name.clone(),
        "Available" => "up".into(),
        "Time" => limit(g.part.max_time),
        "DefaultTime" => limit(g.part.default_time),
        "Nodes" => g.nodes.len().to_string(),
        "NodeList" | "NodeHost" => slurmcli::compress(&names),
        "NodeAddr" => g.nodes.iter().map(|n| n.addr.clone()).collect::<Vec<_>>().join(","),
        "StateCompact" => crate::query::sinfo_state(n0, true),
        "StateLong" | "StateComplete" => crate::query::sinfo_state(n0, false),
        "NodeAIOT" => format!("{alloc}/{idle}/{other}/{}", g.nodes.len()),
        "NodeAI" => format!("{alloc}/{idle}"),
        "CPUs" => n0.cpus.0.to_string(),
        "CPUsState" => {
            let (a, t): (u32, u32) = g.nodes.iter().fold((0, 0), |(a, t), n| (a + n.cpus.1, t + n.cpus.0));
            if node_oriented { format!("{a}/{t}") } else { format!("{a}/{}/0/{t}", t - a) }
        }
        "CPUsLoad" => "N/A".into(),
        "Memory" => n0.memory_mb.0.to_string(),
        "FreeMem" => n0.memory_mb.0.saturating_sub(n0.memory_mb.1).to_string(),
        "Gres" => {
            if n0.gpus.0 > 0 {
                format!("gpu:{}:{}", n0.gpus.2.clone().unwrap_or_else(|| "gpu".into()), n0.gpus.0)
            } else {
                "(null)".into()
            }
        }
        "Features" => {
            if n0.features.is_empty() {
                "(null)".into()
            } else {
                n0.features.join(",")
            }
        }
        "Reason" => n0.reason.clone().unwrap_or_else(|| "none".into()),
        "PriorityTier" => g.part.priority_tier.to_string(),
        "Size" => "1-infinite".into(),
        "Root" => "no".into(),
        "OverSubscribe" => "NO".into(),
        "Groups" => "all".into(),
        // As Slurm's for a node configured with CPUs only: one core per socket.
        "SocketCoreThread" => format!("{}:1:1", n0.cpus.0),
        "Disk" => "0".into(),
        "Weight" => "1".into(),
        "Cluster" => "tandem".into(),
        "Reservation" => n0.reservation.clone().unwrap_or_default(),
        _ => String::new(),
    }
}
