//! `tandem bench failover`: a service of replicas behind the proxy on a real local cluster
//! (`tandem up`'s processes), an open-loop stream of requests, and `kill -9` of one node's agent
//! and every process it launched in the middle of it. Reports failed requests, when the dead
//! replica left the endpoint set and when its replacement was ready, latency with and without
//! the failure, and how long endpoint changes take to reach the proxy; beside Kubernetes'
//! defaults.

use anyhow::{Context, Result, bail};
use serde::Serialize;
use std::time::{Duration, Instant};

use crate::loadgen::{LoadArgs, LoadReport, run_load};
use crate::procs::kill_node;
use client::{Target, send};
use wire::{ApplyRequest, ServiceInfo};

/// `tandem bench failover` arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct FailoverArgs {
    /// Node agents (one replica each, plus room for the replacement).
    #[arg(long, default_value_t = 4)]
    pub agents: u32,
    /// Replicas of the service.
    #[arg(long, default_value_t = 3)]
    pub replicas: u32,
    /// Requests in the run with the failure.
    #[arg(long, default_value_t = 20_000)]
    pub requests: u64,
    /// Offered load, requests per second.
    #[arg(long, default_value_t = 1000.0)]
    pub rate: f64,
    /// Seconds into the run when the node dies.
    #[arg(long, default_value_t = 5.0)]
    pub kill_after: f64,
    /// Readiness probe period of the replicas, seconds.
    #[arg(long, default_value_t = 1.0)]
    pub probe_period: f64,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// What the run measured.
#[derive(Serialize, Debug)]
pub struct FailoverReport {
    /// Agents.
    pub agents: u32,
    /// Replicas.
    pub replicas: u32,
    /// Heartbeat interval and failover time of the controller, milliseconds.
    pub heartbeat_ms: u64,
    /// Failover time, milliseconds.
    pub failover_ms: i64,
    /// Readiness probe period, seconds.
    pub probe_period_s: f64,
    /// Seconds into the run when the node died.
    pub kill_after_s: f64,
    /// Endpoint-change propagation to the proxy, milliseconds (median and largest of a few
    /// scale changes).
    pub propagation_ms: (f64, f64),
    /// Load without a failure.
    pub baseline: LoadReport,
    /// Load with the failure.
    pub failure: LoadReport,
    /// From the kill until the dead replica was out of the endpoint set, seconds.
    pub out_of_endpoints_s: f64,
    /// From the kill until a replacement was ready (the service at full strength), seconds.
    pub replaced_ready_s: f64,
}

async fn service(t: &Target, name: &str) -> Result<ServiceInfo> {
    Ok(send(t, "GET", &format!("/v1/services/{name}"), None::<&()>, &[]).await?.json()?)
}

fn ready(s: &ServiceInfo) -> usize {
    s.replicas.iter().filter(|r| r.state == "Ready").count()
}

fn load_args(url: &str, requests: u64, rate: f64) -> LoadArgs {
    LoadArgs {
        url: url.to_string(),
        requests: Some(requests),
        rate,
        concurrency: 256,
        duration: None,
        http2: false,
        headers: Vec::new(),
        timeout: 30.0,
        threads: None,
        json: true,
    }
}

/// Reads the proxy's propagation figure from its metrics (milliseconds), if it has one.
async fn proxy_propagation(proxy: &str) -> Option<f64> {
    let t = Target::parse(&format!("http://{proxy}")).ok()?;
    let r = send(&t, "GET", "/_tandem/metrics", None::<&()>, &[]).await.ok()?;
    let text = String::from_utf8_lossy(&r.body).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("tandem_proxy_view_propagation_seconds "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|s| s * 1000.0)
}

/// Runs the benchmark.
pub fn run(a: FailoverArgs) -> Result<FailoverReport> {
    if a.agents < 2 || a.replicas == 0 || a.replicas > a.agents || a.rate <= 0.0 || a.requests == 0 {
        bail!("need --agents >= 2, 1 <= --replicas <= --agents, a positive --rate and --requests");
    }
    let data = std::env::temp_dir().join(format!("tandem-bench-failover-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let cluster = up::start(up::UpArgs {
        agents: a.agents,
        gpus: None,
        cpus: Some(4),
        memory: Some("4G".into()),
        data: Some(data.clone()),
        port: 0,
        lease: None,
        config: None,
        proxy_port: Some(0),
        hosts: None,
        daemon_args: Vec::new(),
        ha: false,
    })?;
    let proxy = cluster.proxy.clone().context("the proxy did not start")?;
    let t = Target::parse(&cluster.server)?;
    let settings = control::Settings::default();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let exe = std::env::current_exe()?.display().to_string();
    let r = rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let nodes: Vec<wire::NodeInfo> = send(&t, "GET", "/v1/nodes", None::<&()>, &[]).await?.json()?;
            if nodes.len() as u32 >= a.agents {
                break;
            }
            if Instant::now() > deadline {
                bail!("the agents did not register");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let spec_text = format!(
            "name = \"echo\"\ncommand = [{exe:?}, \"__upstream\", \"--port\", \"$PORT\"]\nreplicas = {}\n[resources]\ncpus = 1\n[readiness]\nhttp = \"/\"\nperiod = \"{}ms\"\n",
            a.replicas,
            (a.probe_period * 1000.0) as u64
        );
        let spec = wire::parse_spec(&spec_text, "echo.toml")?;
        let cwd = data.display().to_string();
        send(&t, "POST", "/v1/services", Some(&ApplyRequest { spec, cwd, umask: None }), &[]).await?.ok()?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while ready(&service(&t, "echo").await?) < a.replicas as usize {
            if Instant::now() > deadline {
                bail!("the replicas did not become ready");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let url = format!("http://{proxy}/s/echo/");
        // The proxy knows every replica before the clock starts.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let w = run_load(&load_args(&url, 60, 0.0)).await?;
            if w.replicas.len() == a.replicas as usize && w.failed == 0 {
                break;
            }
            if Instant::now() > deadline {
                bail!("the proxy did not route to every replica");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Propagation: scale up and down a few times; the proxy measures each view's delay.
        let mut prop = Vec::new();
        for n in [a.replicas + 1, a.replicas] {
            let body = wire::ServiceAction::Scale { replicas: n };
            send(&t, "POST", "/v1/services/echo", Some(&body), &[]).await?.ok()?;
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let s = service(&t, "echo").await?;
                if ready(&s) == n as usize && s.replicas.len() == n as usize {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("scaling to {n} did not finish");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            if let Some(p) = proxy_propagation(&proxy).await {
                prop.push(p);
            }
        }
        let baseline_n = (a.rate * 5.0) as u64;
        let baseline = run_load(&load_args(&url, baseline_n, a.rate)).await?;
        let s = service(&t, "echo").await?;
        let victim = s.replicas.first().context("no replica")?.clone();
        let node = victim.node.clone().context("replica without a node")?;
        let idx: usize = node.trim_start_matches("node").parse::<usize>().context("node name")? - 1;
        let pid = cluster.agent_pids[idx];
        let load = tokio::spawn({
            let args = load_args(&url, a.requests, a.rate);
            async move { run_load(&args).await }
        });
        tokio::time::sleep(Duration::from_secs_f64(a.kill_after)).await;
        let killed = Instant::now();
        kill_node(pid);
        let (mut out_s, mut ready_s) = (None, None);
        let deadline = Instant::now() + Duration::from_secs(120);
        while ready_s.is_none() {
            let s = service(&t, "echo").await?;
            if out_s.is_none() && s.replicas.iter().any(|r| r.id == victim.id && r.state != "Ready") {
                out_s = Some(killed.elapsed().as_secs_f64());
            }
            if s.replicas.iter().filter(|r| r.state == "Ready" && r.node.as_deref() != Some(node.as_str())).count() >= a.replicas as usize {
                ready_s = Some(killed.elapsed().as_secs_f64());
            }
            if Instant::now() > deadline {
                bail!("no replacement within 120 s");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let failure = load.await??;
        prop.sort_by(f64::total_cmp);
        Ok(FailoverReport {
            agents: a.agents,
            replicas: a.replicas,
            heartbeat_ms: settings.heartbeat_ms,
            failover_ms: if settings.failover_ms > 0 { settings.failover_ms } else { (3 * settings.heartbeat_ms as i64).max(1500) },
            probe_period_s: a.probe_period,
            kill_after_s: a.kill_after,
            propagation_ms: (prop.get(prop.len() / 2).copied().unwrap_or(f64::NAN), prop.last().copied().unwrap_or(f64::NAN)),
            baseline,
            failure,
            out_of_endpoints_s: out_s.unwrap_or(f64::NAN),
            replaced_ready_s: ready_s.unwrap_or(f64::NAN),
        })
    });
    drop(cluster);
    let _ = std::fs::remove_dir_all(&data);
    r
}

/// Prints the report beside Kubernetes' defaults.
pub fn print(r: &FailoverReport) {
    println!(
        "setup: {} agents, {} replicas of `tandem __upstream` behind `tandem proxy`; heartbeat {} ms, failover after {} ms of silence; readiness probe every {} s",
        r.agents, r.replicas, r.heartbeat_ms, r.failover_ms, r.probe_period_s
    );
    println!(
        "load: open loop, {} requests at {:.0}/s; kill -9 of one node's agent and all its processes {:.0} s in",
        r.failure.sent, r.failure.rate_target, r.kill_after_s
    );
    println!("{:<44} {:>14} {:>26}", "", "Tandem", "Kubernetes defaults");
    println!("{:<44} {:>14} {:>26}", "failed requests", r.failure.failed, "(fail until it leaves)");
    println!("{:<44} {:>13.2}s {:>26}", "dead replica out of the endpoint set", r.out_of_endpoints_s, "~50 s (node NotReady)");
    println!("{:<44} {:>13.2}s {:>26}", "replacement ready", r.replaced_ready_s, "~350 s (+300 s eviction)");
    println!(
        "{:<44} {:>14} {:>26}",
        "p50 / p99 / max latency, no failure (ms)",
        format!("{:.1}/{:.1}/{:.0}", r.baseline.latency_ms.p50, r.baseline.latency_ms.p99, r.baseline.latency_ms.max),
        ""
    );
    println!(
        "{:<44} {:>14} {:>26}",
        "p50 / p99 / max latency, with failure (ms)",
        format!("{:.1}/{:.1}/{:.0}", r.failure.latency_ms.p50, r.failure.latency_ms.p99, r.failure.latency_ms.max),
        ""
    );
    println!(
        "{:<44} {:>14} {:>26}",
        "endpoint change to proxy, median/max (ms)",
        format!("{:.1}/{:.1}", r.propagation_ms.0, r.propagation_ms.1),
        "(kube-proxy: ~1 s sync period)"
    );
    println!("errors by kind: {:?}; statuses: {:?}; answered per replica: {:?}", r.failure.errors, r.failure.statuses, r.failure.replicas);
}
