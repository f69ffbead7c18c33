//! `tandem service`: apply a service spec (TOML, YAML or JSON), list, show, scale and delete
//! services, follow and undo rollouts, and print replica output.

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use client::{Target, send};
use wire::{ApplyRequest, ApplyResponse, ServiceAction, ServiceInfo, parse_spec};

/// `tandem service` subcommands.
#[derive(Subcommand)]
pub enum ServiceCmd {
    /// Create or update a service from a spec file (TOML, YAML or JSON; `-` reads stdin).
    Apply {
        /// Spec file.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// List services.
    List,
    /// Show a service: replicas, revisions, replica count over time, proxy figures.
    Show {
        /// Service.
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Set the replica count.
    Scale {
        /// Service.
        name: String,
        /// Replicas.
        replicas: u32,
    },
    /// Delete a service (its replicas drain, then stop).
    Delete {
        /// Service.
        name: String,
    },
    /// Follow or undo a rollout.
    Rollout {
        /// What to do with the rollout.
        #[command(subcommand)]
        cmd: RolloutCmd,
    },
    /// Print replica output (each line prefixed with its replica).
    Logs {
        /// Service.
        name: String,
        /// Last lines of each replica.
        #[arg(long, default_value_t = 100)]
        tail: usize,
    },
}

/// `tandem service rollout` subcommands.
#[derive(Subcommand)]
pub enum RolloutCmd {
    /// Wait until every replica runs the current revision and is ready.
    Status {
        /// Service.
        name: String,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
    /// Go back to the previous revision (or `--to-revision`).
    Undo {
        /// Service.
        name: String,
        /// Revision to go back to.
        #[arg(long)]
        to_revision: Option<u32>,
    },
}

fn rt() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

/// A service, its strings made visible for printing (`crate::query::get`).
fn get(t: &Target, name: &str) -> Result<ServiceInfo> {
    crate::query::get(t, &format!("/v1/services/{name}"))
}

fn age(ms: i64) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let s = ((now - ms) / 1000).max(0);
    match s {
        0..120 => format!("{s}s"),
        120..7200 => format!("{}m", s / 60),
        _ => format!("{}h", s / 3600),
    }
}

/// Runs a `tandem service` command.
pub(crate) fn run(cmd: ServiceCmd) -> Result<i32> {
    let t = Target::from_env()?;
    match cmd {
        ServiceCmd::Apply { file } => {
            let path = file.display().to_string();
            let text = if path == "-" {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
                s
            } else {
                std::fs::read_to_string(&file).with_context(|| format!("reading {path}"))?
            };
            let spec = parse_spec(&text, &path)?;
            spec.resolve().map_err(|e| anyhow::anyhow!("{path}: {e}"))?;
            let cwd = std::env::current_dir()?.display().to_string();
            let reply = rt()?.block_on(send(
                &t,
                "POST",
                "/v1/services",
                Some(&ApplyRequest { spec, cwd, umask: Some(crate::common::umask()) }),
                &[],
            ))?;
            crate::common::show_user_msg("tandem service apply", &reply);
            let r: ApplyResponse = reply.json()?;
            let what = match (r.changed, r.revision) {
                (false, _) => "unchanged",
                (true, 1) => "created",
                (true, _) => "configured",
            };
            println!("service/{} {what} (revision {})", r.name, r.revision);
        }
        ServiceCmd::List => {
            let all: Vec<ServiceInfo> = crate::query::get(&t, "/v1/services")?;
            println!("{:<24} {:>7} {:>10} {:>8} {:>9}  {:<10} AGE", "NAME", "READY", "UP-TO-DATE", "DESIRED", "REVISION", "USER");
            for s in all {
                let created = s.scale_log.first().map_or(0, |(t, _)| *t);
                println!(
                    "{:<24} {:>7} {:>10} {:>8} {:>9}  {:<10} {}{}",
                    s.name,
                    format!("{}/{}", s.ready, s.desired),
                    s.updated_ready,
                    s.desired,
                    s.revision,
                    s.user,
                    age(created),
                    if s.deleting { " (deleting)" } else { "" }
                );
            }
        }
        ServiceCmd::Show { name, json } => {
            let s: ServiceInfo = if json { crate::query::get_raw(&t, &format!("/v1/services/{name}"))? } else { get(&t, &name)? };
            if json {
                crate::query::print_json(&s)?;
                return Ok(0);
            }
            println!("Name:        {}", s.name);
            println!("User:        {}", s.user);
            println!("Revision:    {} (earlier: {:?})", s.revision, s.history);
            println!("Replicas:    {} desired, {} ready, {} ready at the current revision", s.desired, s.ready, s.updated_ready);
            println!("Command:     {}", s.spec.command.iter().chain(&s.spec.args).cloned().collect::<Vec<_>>().join(" "));
            println!(
                "Proxy:       {} in flight, {} held, {} requests, {} failed",
                s.stats.inflight, s.stats.waiting, s.stats.requests, s.stats.failures
            );
            if s.deleting {
                println!("Deleting:    yes");
            }
            println!("\n{:<20} {:<17} {:>4} {:<12} {:<22} {:>8}  MESSAGE", "REPLICA", "STATE", "REV", "NODE", "ADDRESS", "RESTARTS");
            for r in &s.replicas {
                println!(
                    "{:<20} {:<17} {:>4} {:<12} {:<22} {:>8}  {}",
                    r.id,
                    r.state,
                    r.revision,
                    r.node.as_deref().unwrap_or("-"),
                    r.addr.as_deref().unwrap_or("-"),
                    r.restarts,
                    r.message.as_deref().unwrap_or(if r.reason.is_empty() || r.reason == "None" { "" } else { &r.reason })
                );
            }
            println!("\nReplica count over time:");
            let t0 = s.scale_log.first().map_or(0, |(t, _)| *t);
            for (t, n) in &s.scale_log {
                println!("  +{:>8.1} s  {n}", (t - t0) as f64 / 1000.0);
            }
        }
        ServiceCmd::Scale { name, replicas } => {
            rt()?.block_on(send(&t, "POST", &format!("/v1/services/{name}"), Some(&ServiceAction::Scale { replicas }), &[]))?.ok()?;
            println!("service/{name} scaled to {replicas}");
        }
        ServiceCmd::Delete { name } => {
            rt()?.block_on(send(&t, "DELETE", &format!("/v1/services/{name}"), None::<&()>, &[]))?.ok()?;
            println!("service/{name} deleted (its replicas drain, then stop)");
        }
        ServiceCmd::Rollout { cmd: RolloutCmd::Undo { name, to_revision } } => {
            let v: serde_json::Value = rt()?
                .block_on(send(&t, "POST", &format!("/v1/services/{name}"), Some(&ServiceAction::Undo { revision: to_revision }), &[]))?
                .json()?;
            println!("service/{name} rolled back (now revision {})", v["revision"]);
        }
        ServiceCmd::Rollout { cmd: RolloutCmd::Status { name, timeout } } => {
            let deadline = Instant::now() + Duration::from_secs(timeout);
            let mut last = String::new();
            loop {
                let s = get(&t, &name)?;
                let live: Vec<_> =
                    s.replicas.iter().filter(|r| !matches!(r.state.as_str(), "Draining" | "Stopping" | "Lost" | "Gone")).collect();
                let old = live.iter().filter(|r| r.revision != s.revision).count();
                let msg = if s.updated_ready < s.desired {
                    format!("Waiting for rollout to finish: {} of {} updated replicas are ready...", s.updated_ready, s.desired)
                } else if old > 0 {
                    format!("Waiting for rollout to finish: {old} old replicas are pending termination...")
                } else {
                    String::new()
                };
                if msg.is_empty() {
                    println!("service \"{name}\" successfully rolled out (revision {})", s.revision);
                    return Ok(0);
                }
                // What the rollout waits for, when the controller knows (pending reasons, the
                // last problem of a replica that does not get ready).
                let why = waiting_for(&s);
                let msg = if why.is_empty() { msg } else { format!("{msg}\n  {why}") };
                if msg != last {
                    println!("{msg}");
                    last = msg;
                }
                if Instant::now() > deadline {
                    let why = if why.is_empty() { String::new() } else { format!(": {why}") };
                    bail!("rollout of {name} did not finish within {timeout} s{why}");
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        ServiceCmd::Logs { name, tail } => {
            let s = get(&t, &name)?;
            // Each replica's output as its node reads it (`GET /v1/jobs/ID/output`), so from
            // any machine.
            let rt = rt()?;
            for r in s.replicas.iter().filter(|r| r.node.is_some()) {
                let reply = rt.block_on(send(&t, "GET", &format!("/v1/jobs/{}/output?tail={tail}", r.job), None::<&()>, &[]))?;
                if reply.status != 200 {
                    eprintln!("[{}] cannot read {}: {}", r.id, slurmcli::visible(&r.log), slurmcli::visible(&reply.error()));
                    continue;
                }
                for l in String::from_utf8_lossy(&reply.body).lines() {
                    println!("[{}] {}", r.id, slurmcli::visible_text(l));
                }
            }
        }
    }
    Ok(0)
}

/// Why a rollout's replicas of the current revision are not ready yet, one clause per kind:
/// `3 replica(s) pending (Resources), 1 starting (node2: readiness probe failed: ...)`; empty
/// when every one is ready.
fn waiting_for(s: &wire::ServiceInfo) -> String {
    let mut kinds: std::collections::BTreeMap<String, u32> = std::collections::BTreeMap::new();
    let waited = |st: &str| !matches!(st, "Ready" | "Draining" | "Stopping" | "Lost" | "Gone");
    for r in s.replicas.iter().filter(|r| r.revision == s.revision && waited(&r.state)) {
        let what = match (r.state.as_str(), r.message.as_deref()) {
            ("Pending", _) if !r.reason.is_empty() && r.reason != "None" => format!("pending ({})", r.reason),
            (st, Some(m)) if !m.is_empty() => format!("{} ({})", st.to_lowercase(), m),
            (st, _) => st.to_lowercase(),
        };
        *kinds.entry(slurmcli::visible(&what).into_owned()).or_default() += 1;
    }
    kinds.iter().map(|(what, n)| format!("{n} replica(s) {what}")).collect::<Vec<_>>().join(", ")
}
