//! `tandem status`: which controller leads, what each controller answers, and the store's
//! health (with etcd: each member, its database's size, its alarms).

use crate::common::runtime;
use anyhow::Result;
use client::{Target, send};
use slurmcli::visible;
use wire::ClusterStatus;

/// One controller `TANDEM_SERVER` names, as it answered.
struct Seen {
    at: String,
    role: &'static str,
    note: String,
}

/// Bytes for people: `1.2 MiB`.
fn size(b: i64) -> String {
    let b = b.max(0) as f64;
    match b {
        b if b >= (1u64 << 30) as f64 => format!("{:.1} GiB", b / (1u64 << 30) as f64),
        b if b >= (1u64 << 20) as f64 => format!("{:.1} MiB", b / (1u64 << 20) as f64),
        b if b >= 1024.0 => format!("{:.1} KiB", b / 1024.0),
        b => format!("{b} B"),
    }
}

/// Prints the status; 0 where a controller leads and, with etcd, a majority of its members
/// answer with a leader of their own and no alarm; 1 otherwise.
pub fn status(json: bool) -> Result<i32> {
    let t = Target::from_env()?;
    let rt = runtime()?;
    let members = t.members();
    let mut seen = Vec::new();
    for m in &members {
        let r = rt.block_on(client::probe(m, "GET", "/healthz"));
        let (role, note) = match &r {
            Ok(r) if r.status < 400 => ("leads", String::new()),
            Ok(r) if r.standby() => (
                "stands by",
                r.leader.as_deref().map_or("no controller leads yet".to_string(), |l| format!("the leader is {}", visible(l))),
            ),
            Ok(r) => ("answers", format!("HTTP {}", r.status)),
            Err(e) => ("unreachable", visible(&e.to_string()).into_owned()),
        };
        seen.push(Seen { at: m.url(), role, note });
    }
    // The leader's own account (a standby's Unix socket forwards it there).
    let status: Option<ClusterStatus> =
        rt.block_on(send(&t, "GET", "/v1/status", None::<&()>, &[])).ok().filter(|r| r.status < 400).and_then(|r| r.json().ok());
    let healthy = status.as_ref().is_some_and(|s| {
        s.etcd.as_ref().is_none_or(|e| {
            let ok = e.members.iter().filter(|m| m.error.is_none() && m.has_leader && m.errors.is_empty()).count();
            ok * 2 > e.members.len()
        })
    });
    if json {
        let v = serde_json::json!({
            "controllers": seen.iter().map(|s| serde_json::json!({"address": s.at, "role": s.role, "note": s.note})).collect::<Vec<_>>(),
            "status": status,
            "healthy": healthy,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(if healthy { 0 } else { 1 });
    }
    println!("Controllers:");
    for s in &seen {
        let note = if s.note.is_empty() { String::new() } else { format!(" ({})", s.note) };
        println!("  {:<40} {}{}", visible(&s.at), s.role, note);
    }
    let Some(st) = status else {
        println!("No controller answered /v1/status: none leads, or none could be reached.");
        return Ok(1);
    };
    let since = crate::query::iso(st.serving_since);
    println!("Leader:     {} (serving since {since}; start count {})", visible(&st.controller), st.starts);
    match &st.etcd {
        None => println!("Store:      SQLite (one controller; DATA/state.db)"),
        Some(e) => {
            println!(
                "Store:      etcd, prefix {}; {} leadership(s) so far; this leader's commits: {}, mean {:.1} ms",
                visible(&e.prefix),
                e.leaderships,
                e.commits,
                e.commit_seconds_mean * 1000.0
            );
            for m in &e.members {
                let what = match &m.error {
                    Some(err) => format!("unreachable: {}", visible(err)),
                    None => {
                        let role = if m.leader {
                            "leader"
                        } else if m.has_leader {
                            "follower"
                        } else {
                            "NO LEADER"
                        };
                        let alarms =
                            if m.errors.is_empty() { String::new() } else { format!(", alarms: {}", visible(&m.errors.join("; "))) };
                        format!(
                            "{role}, etcd {}, database {} ({} in use){alarms}",
                            visible(&m.version),
                            size(m.db_bytes),
                            size(m.db_bytes_in_use)
                        )
                    }
                };
                println!("  {:<40} {what}", visible(&m.endpoint));
            }
        }
    }
    println!("Jobs:       {} pending, {} running", st.jobs_pending, st.jobs_running);
    println!("Nodes:      {} up of {}", st.nodes_up, st.nodes);
    if !healthy {
        println!("The store is not healthy: fewer than a majority of etcd's members answer with a leader and no alarm.");
    }
    Ok(if healthy { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_read_as_people_read_them() {
        assert_eq!(super::size(0), "0 B");
        assert_eq!(super::size(2048), "2.0 KiB");
        assert_eq!(super::size(3 << 20), "3.0 MiB");
        assert_eq!(super::size(-5), "0 B");
    }
}
