//! `sreport`: Slurm's common reports from the accounting records, `cluster utilization`,
//! `user top` and `reservation utilization`, over a period (`start=`, `end=`; by default
//! yesterday, midnight to midnight), in CPU minutes (`-t` hours, seconds, percent), as Slurm
//! prints them. The arithmetic is slurmcli's (`utilization`, `top_users`,
//! `reservation_usage`); this reads the jobs, nodes and reservations and prints.

use anyhow::{Result, bail};
use client::Target;
use slurmcli::keywords::Keyword;
use wire::{JobInfo, NodeInfo};

use crate::common::now;
use crate::query::{get, iso};

const USAGE: &str = "Usage: sreport [-n] [-p|-P] [-t seconds|minutes|hours|percent] cluster utilization | user top | reservation utilization [start=TIME] [end=TIME] [topcount=N] [users=LIST] [accounts=LIST] [names=LIST]";

/// `sreport`.
pub(crate) fn sreport(args: &[String]) -> Result<i32> {
    let (mut header, mut sep, mut unit) = (true, None::<bool>, slurmcli::ReportUnit::Minutes);
    let (p, _) = crate::common::parse_env("sreport", args)?;
    let mut clusters = None;
    for g in &p.opts {
        let v = g.value();
        match g.key() {
            "noheader" => header = false,
            "parsable" => sep = Some(true),
            "parsable2" => sep = Some(false),
            "time-format" => unit = slurmcli::ReportUnit::parse(v).map_err(|e| anyhow::anyhow!("{}", e.0))?,
            "tres" => {
                if !v.eq_ignore_ascii_case("cpu") {
                    bail!("only -T cpu is reported here");
                }
            }
            "clusters" => clusters = Some(v.to_string()),
            "help" | "usage" => {
                println!("{USAGE}");
                return Ok(0);
            }
            "version" => return crate::query::version(),
            // One cluster; nothing but the report is printed anyway.
            "all_clusters" | "quiet" | "verbose" | "federation" | "local" | "sibling" => {}
            other => unreachable!("sreport's table and its reader disagree on {other}"),
        }
    }
    if let Some(c) = &clusters {
        crate::query::check_clusters(&Target::from_env()?, c)?;
    }
    let words = p.args;
    let t = now();
    let today = t - t.rem_euclid(86400);
    let (mut from, mut to, mut top) = (today - 86400, today, 10usize);
    let mut command = Vec::new();
    let (mut users, mut accounts): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    let mut filter_word = String::new();
    let (mut names, mut names_word): (Vec<String>, String) = (Vec::new(), String::new());
    // The conditions as Slurm's sreport reads them (`xstrncasecmp` with its minimum lengths):
    // any case, abbreviated; the report's two words come first.
    const CONDITIONS: &[Keyword] = &[
        Keyword::new("Start", 1),
        Keyword::new("End", 1),
        Keyword::new("TopCount", 1),
        Keyword::new("Users", 1),
        Keyword::new("Accounts", 2),
        Keyword::alias("Acct", 4, "Accounts"),
        Keyword::new("Clusters", 1),
        Keyword::new("Format", 1),
        Keyword::new("Names", 2),
    ];
    for w in &words {
        let Some((k, v)) = w.split_once('=') else {
            if command.len() < 2 {
                command.push(w.to_ascii_lowercase());
            } else if w.eq_ignore_ascii_case("all_clusters") {
            } else {
                eprintln!(" Unknown condition: {}\nUse keyword set to modify value", slurmcli::visible(w));
                return Ok(1);
            }
            continue;
        };
        let key = match slurmcli::keywords::lookup(k, CONDITIONS) {
            Ok(key) => key.key,
            Err(_) => {
                eprintln!(" Unknown condition: {}\nUse keyword set to modify value", slurmcli::visible(w));
                return Ok(1);
            }
        };
        let list = || v.split(',').map(str::trim).filter(|x| !x.is_empty()).map(str::to_string).collect::<Vec<_>>();
        match key {
            "Start" => from = slurmcli::parse_when(v, t).map_err(|e| anyhow::anyhow!("{}", e.0))?,
            "End" => to = slurmcli::parse_when(v, t).map_err(|e| anyhow::anyhow!("{}", e.0))?,
            "TopCount" => top = v.parse().map_err(|_| anyhow::anyhow!("invalid TopCount {:?}: a whole number", slurmcli::visible(v)))?,
            "Users" | "Accounts" => {
                if filter_word.is_empty() {
                    filter_word = w.clone();
                }
                if key == "Users" { users.extend(list()) } else { accounts.extend(list()) }
            }
            "Clusters" => crate::query::check_clusters(&Target::from_env()?, v)?,
            "Names" => {
                names_word = w.clone();
                names.extend(list());
            }
            _ => bail!("Format= is not supported by this sreport (its columns are Slurm's defaults)"),
        }
    }
    if to <= from {
        bail!("Start time ({}) requested is after end time ({}).", iso(from), iso(to));
    }
    let report = match command.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        [c, u] if "cluster".starts_with(c) && c.len() >= 2 && "utilization".starts_with(u) && u.len() >= 2 => Report::Cluster,
        [c, u] if "user".starts_with(c) && !c.is_empty() && "topusage".starts_with(u) && u.len() >= 2 => Report::Top,
        [c, u] if "reservation".starts_with(c) && c.len() >= 2 && "utilization".starts_with(u) && u.len() >= 2 => Report::Resv,
        [] => bail!("no report named\n{USAGE}"),
        other => bail!("unknown report: {}\n{USAGE}", other.join(" ")),
    };
    if !matches!(report, Report::Top) && !(users.is_empty() && accounts.is_empty()) {
        // Slurm's cluster and reservation utilization take no user or account condition.
        eprintln!(" Unknown condition: {}\nUse keyword set to modify value", slurmcli::visible(&filter_word));
        return Ok(1);
    }
    if !matches!(report, Report::Resv) && !names_word.is_empty() {
        eprintln!(" Unknown condition: {}\nUse keyword set to modify value", slurmcli::visible(&names_word));
        return Ok(1);
    }
    let target = Target::from_env()?;
    let jobs: Vec<JobInfo> = get(&target, &format!("/v1/history?since={from}"))?;
    let usage: Vec<slurmcli::UsageJob> = jobs
        .iter()
        .filter(|j| users.is_empty() || users.iter().any(|u| *u == j.user))
        .filter(|j| accounts.is_empty() || accounts.iter().any(|a| *a == j.account))
        .map(|j| slurmcli::UsageJob {
            user: j.user.clone(),
            account: j.account.clone(),
            cpus: j.cpus,
            start: j.start.filter(|_| !j.start_estimated),
            end: j.end,
            reservation: j.reservation.clone(),
        })
        .collect();
    let out = Out { header, sep };
    let period = (from, to - 1);
    match report {
        Report::Cluster => {
            let nodes: Vec<NodeInfo> = get(&target, "/v1/nodes")?;
            let cpus: u64 = nodes.iter().map(|n| n.cpus.0 as u64).sum();
            let resvs: Vec<wire::ResvInfo> = get(&target, "/v1/reservations")?;
            let resvs: Vec<(wire::Reservation, u64)> = resvs.into_iter().map(|r| (r.resv, u64::from(r.cpus))).collect();
            let u = slurmcli::utilization(&usage, cpus, &resvs, from, to, t);
            out.banner(&format!("Cluster Utilization {} - {}", iso(period.0), iso(period.1)), unit);
            let cols = [("Cluster", 9), ("Allocated", 12), ("Down", 10), ("PLND Down", 10), ("Idle", 12), ("Planned", 9), ("Reported", 12)];
            let name = cluster_name(&target);
            let v = |s| unit.value(s, u.reported);
            out.table(&cols, &[vec![name, v(u.allocated), v(u.down), v(u.planned_down), v(u.idle), v(u.planned), v(u.reported)]]);
        }
        Report::Top => {
            let rows = slurmcli::top_users(&usage, from, to, t, top);
            let total: u64 = usage.iter().map(|j| j.cpu_seconds(from, to, t)).sum();
            out.banner(&format!("Top {top} Users {} - {} ({} secs)", iso(period.0), iso(period.1), to - from), unit);
            let cols = [("Cluster", 9), ("Login", 9), ("Proper Name", 15), ("Account", 15), ("Used", 10), ("Energy", 10)];
            let name = cluster_name(&target);
            let cells: Vec<Vec<String>> = rows
                .into_iter()
                .map(|(user, acct, s)| vec![name.clone(), user.clone(), proper_name(&user), acct, unit.value(s, total), "0".into()])
                .collect();
            out.table(&cols, &cells);
        }
        Report::Resv => {
            // Each occurrence that ran at any time in the period, whole (as Slurm's: the
            // period does not cut a reservation's time), up to now.
            let resvs: Vec<wire::ResvInfo> = get(&target, "/v1/reservations")?;
            out.banner(&format!("Reservation Utilization {} - {}", iso(period.0), iso(period.1)), unit);
            let cols = [("Cluster", 9), ("Name", 9), ("Start", 19), ("End", 19), ("TRES Name", 14), ("Allocated", 20), ("Idle", 20)];
            let name = cluster_name(&target);
            let mut rows = Vec::new();
            for r in resvs.iter().filter(|r| names.is_empty() || names.contains(&r.resv.name)) {
                for w in slurmcli::reservation_windows(&r.resv, from, to).into_iter().filter(|w| w.0 < t) {
                    let (used, idle) = slurmcli::reservation_usage(&r.resv, u64::from(r.cpus), &usage, w, t);
                    let total = used + idle;
                    rows.push(vec![
                        name.clone(),
                        r.resv.name.clone(),
                        iso(w.0),
                        iso(w.1),
                        "cpu".into(),
                        unit.value(used, total),
                        unit.value(idle, total),
                    ]);
                }
            }
            out.table(&cols, &rows);
        }
    }
    Ok(0)
}

enum Report {
    Cluster,
    Top,
    Resv,
}

/// How rows are printed: columns or separated fields, with or without the header.
struct Out {
    header: bool,
    sep: Option<bool>,
}

impl Out {
    fn banner(&self, title: &str, unit: slurmcli::ReportUnit) {
        if !self.header {
            return;
        }
        let rule = "-".repeat(80);
        println!("{rule}\n{title}");
        match unit {
            slurmcli::ReportUnit::Percent => println!("Usage reported in {}", unit.name()),
            u => println!("Usage reported in CPU {}", u.name()),
        }
        println!("{rule}");
    }

    fn table(&self, cols: &[(&str, usize)], rows: &[Vec<String>]) {
        crate::query::print_table(cols, rows, self.header, self.sep, false);
    }
}

/// The cluster's name, as `scontrol show config` has it.
fn cluster_name(t: &Target) -> String {
    get::<serde_json::Value>(t, "/v1/config")
        .ok()
        .and_then(|c| c["cluster_name"].as_str().map(str::to_string))
        .unwrap_or_else(|| "tandem".into())
}

/// The user's full name from the password database (its first GECOS field), else the login.
fn proper_name(user: &str) -> String {
    nix::unistd::User::from_name(user)
        .ok()
        .flatten()
        .and_then(|u| u.gecos.to_str().ok().and_then(|g| g.split(',').next()).filter(|g| !g.is_empty()).map(str::to_string))
        .unwrap_or_else(|| user.to_string())
}
