//! `tandem sim`: load a trace, run the simulator, print a table, JSON and/or a plot.

use anyhow::{Context, Result, bail};
use clap::Args;
use sched::{Backfill, Config, Placement, Policy, Predict};
use serde::Serialize;
use sim::{Metrics, SimConfig};
use std::path::PathBuf;
use std::time::Instant;

const SYNTHETIC_HELP: &str = "Synthetic GPU workload instead of a trace: comma-separated key=value \
pairs, all optional: nodes (default 1024), gpus per node (8), jobs (10000), load (offered load, 0.9), \
cpus per node (64), mem_gib per node (1024), users (64); counts accept a k suffix. \
Example: --synthetic nodes=30k,gpus=8,jobs=100k,load=0.95";

/// Arguments of `tandem sim`.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  tandem sim --trace ../shared/traces/lublin_256.swf --windows rlscheduler --policy sjf --backfill rls\n  tandem sim --trace ../shared/traces/HPC2N-2002-2.2-cln.swf.gz --policy default --backfill easy --json\n  tandem sim --trace ../shared/traces/openb_pod_list_default.csv --nodes-file ../shared/traces/openb_node_list_gpu_node.csv\n  tandem sim --synthetic nodes=1024,gpus=8,jobs=20000 --plot queue.svg"
)]
pub struct SimArgs {
    /// Trace file: SWF (plain or gzip) or the Alibaba pod list (CSV, with --nodes-file).
    #[arg(long, required_unless_present = "synthetic", conflicts_with = "synthetic")]
    trace: Option<PathBuf>,
    /// Node list for the Alibaba trace (openb_node_list_*.csv).
    #[arg(long)]
    nodes_file: Option<PathBuf>,
    #[arg(long, help = SYNTHETIC_HELP)]
    synthetic: Option<String>,
    /// Priority policy: fcfs, sjf, f1, multifactor (Slurm-like weights), default (Tandem's
    /// production weights) or default-v1 (the earlier default).
    #[arg(long, default_value = "default")]
    policy: String,
    /// Override multifactor weights: comma-separated key=value among age, fairshare, job_size,
    /// time_limit, partition, qos, max_age (s), max_time_limit (s), favor_small (0 or 1), xfactor, xfactor_cap, starve_after (s, 0 = off), estimate (0 or 1: the time factors read the prediction). Applies to multifactor and default.
    #[arg(long)]
    weights: Option<String>,
    /// Backfill: none, rls (RLScheduler's variant), easy or conservative.
    #[arg(long, default_value = "easy")]
    backfill: String,
    /// Run time that EASY and conservative backfill plan with: limit (the requested time limit),
    /// history (EASY++: the mean of the user's last two finished jobs, capped by the limit,
    /// raised step-wise when a job outlives it), history-name or history-shape (the same user's
    /// jobs of the same name or shape first: the default, as the controller's). Kills use the
    /// limit either way.
    #[arg(long, default_value = "history-shape")]
    predict: String,
    /// Run a set of 1,024-job windows instead of the whole trace, each on an empty cluster to its
    /// last start: `rlscheduler` (its ten windows), or `segments[:N[:tune|report]]` (N windows,
    /// default 24, with start offsets spread evenly over the whole trace; `tune` the first half
    /// of them, on which the default policy was chosen, `report` the second half).
    #[arg(long)]
    windows: Option<String>,
    /// Seed for the scheduler and the synthetic generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Write an SVG plot of queue length and utilisation over time.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Skip malformed trace lines (counted) instead of failing on the first.
    #[arg(long)]
    lenient: bool,
    /// Machine size in processors, for SWF files whose header lacks MaxNodes/MaxProcs.
    #[arg(long)]
    procs: Option<u64>,
    /// Placement mode (as the FGD simulator): jobs never end; report the GPU allocation rate and
    /// fragmentation once every job has arrived.
    #[arg(long)]
    no_departures: bool,
    /// Replay only the first N jobs.
    #[arg(long)]
    limit: Option<usize>,
    /// Node choice for single-node jobs: default (least growth of FGD's GPU fragmentation when
    /// the workload shares GPUs, else tight), tight (fewest whole GPUs, then CPUs left), FGD's
    /// baselines random, dotprod, clustering, packing, bestfit, and fgd (as FGD's simulator
    /// scores it); with --inflate, `all` runs each in turn.
    #[arg(long, default_value = "default")]
    placement: String,
    /// FGD's workload inflation (GPU traces): pods of the trace, then pods drawn from it at random
    /// (seeded), arrive in a seeded random order and never leave, until their GPU requests add up
    /// to RATIO × the GPU capacity (FGD uses 1.3); a pod that does not fit fails. Reports the GPU
    /// allocation ratio against the arrived workload every 10 % and when the first pod fails.
    #[arg(long, value_name = "RATIO")]
    inflate: Option<f64>,
    /// With --inflate: run seeds SEED, SEED+1, ... (N runs) and report the mean curve.
    #[arg(long, default_value_t = 1, value_name = "N")]
    repeat: u32,
}

#[derive(Serialize)]
struct Report<'a> {
    trace: &'a str,
    nodes: usize,
    capacity: u64,
    policy: &'a str,
    backfill: &'a str,
    #[serde(skip_serializing_if = "is_limit")]
    predict: &'a str,
    seed: u64,
    windows: Option<&'a str>,
    skipped_lines: usize,
    #[serde(flatten)]
    metrics: &'a Metrics,
    per_window_bounded_slowdown: Option<Vec<f64>>,
    wall_s: f64,
}

fn load(a: &SimArgs) -> Result<trace::Workload> {
    if let Some(spec) = &a.synthetic {
        let spec: trace::SyntheticSpec = spec.parse()?;
        return Ok(trace::generate(&spec, a.seed));
    }
    let path = a.trace.as_ref().expect("clap requires --trace or --synthetic");
    let name = path.display().to_string();
    let is_csv = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    if is_csv {
        let Some(nf) = &a.nodes_file else {
            bail!("{name} is a CSV pod list: give its node list with --nodes-file");
        };
        let nodes = trace::parse_nodes(trace::open(nf)?, &nf.display().to_string())?;
        // Inflation samples the whole pod list, as FGD does, never-scheduled pods included.
        return Ok(trace::parse_pod_list(trace::open(path)?, &name, nodes, a.lenient, a.inflate.is_some())?);
    }
    if a.nodes_file.is_some() {
        bail!("--nodes-file goes with the Alibaba pod list (a .csv trace), not with {name}");
    }
    let swf = trace::parse_swf(trace::open(path)?, &name, a.lenient)?;
    Ok(swf.into_workload(&name, a.procs)?)
}

/// Runs `tandem sim`.
pub fn run(a: SimArgs) -> Result<()> {
    let policy = Policy::parse(&a.policy)
        .with_context(|| format!("unknown --policy {:?} (fcfs, sjf, f1, multifactor, default, default-v1)", a.policy))?;
    let policy = match (&a.weights, policy) {
        (None, p) => p,
        (Some(w), Policy::Multifactor(base)) => Policy::Multifactor(parse_weights(w, base)?),
        (Some(_), _) => bail!("--weights applies to --policy multifactor or default"),
    };
    let backfill =
        Backfill::parse(&a.backfill).with_context(|| format!("unknown --backfill {:?} (none, rls, easy, conservative)", a.backfill))?;
    let windows = a.windows.as_deref().map(parse_windows).transpose()?;
    if a.no_departures && a.windows.is_some() {
        bail!("--no-departures is a whole-trace placement run; it cannot be combined with --windows");
    }
    if let Some(p) = &a.plot {
        if !p.extension().is_some_and(|e| e.eq_ignore_ascii_case("svg")) {
            bail!("--plot writes SVG: give a file name ending in .svg (got {})", p.display());
        }
        if a.windows.is_some() {
            bail!("--plot draws one run over time; it cannot be combined with --windows");
        }
    }
    let placements: Vec<Placement> =
        match a.placement.as_str() {
            "all" if a.inflate.is_some() => Placement::ALL.to_vec(),
            "all" => bail!("--placement all goes with --inflate"),
            p => vec![Placement::parse(p).with_context(|| {
                format!("unknown --placement {p:?} (default, tight, random, dotprod, clustering, packing, bestfit, fgd)")
            })?],
        };
    if let Some(r) = a.inflate {
        if !(r.is_finite() && r > 0.0 && r <= 10.0) {
            bail!("--inflate takes a ratio of the GPU capacity in (0, 10], e.g. 1.3 (got {r})");
        }
        if a.windows.is_some() || a.no_departures {
            bail!("--inflate is a placement run of its own; it cannot be combined with --windows or --no-departures");
        }
    } else if a.repeat != 1 {
        bail!("--repeat goes with --inflate");
    }
    if a.repeat == 0 {
        bail!("--repeat takes at least 1 run");
    }
    let mut w = load(&a)?;
    if let Some(n) = a.limit {
        w.jobs.truncate(n);
    }
    if w.jobs.is_empty() {
        bail!("{}: no jobs to simulate", w.name);
    }
    let predict = Predict::parse(&a.predict)
        .with_context(|| format!("unknown --predict {:?} (limit, history, history-name, history-shape)", a.predict))?;
    let cfg = Config { policy, backfill, predict, placement: placements[0], ..Config::default() };
    if let Some(ratio) = a.inflate {
        return inflation(&a, &w, cfg, ratio, &placements);
    }
    let origin = Instant::now();
    let mut clock = move || origin.elapsed().as_nanos() as u64;
    let started = Instant::now();
    let (metrics, per_window, series) = if let Some(win) = windows {
        let sc = sim::rlscheduler_config(cfg, a.seed);
        let per = match win {
            Windows::Rlscheduler => sim::rlscheduler_windows(&w, &sc, &mut clock).map_err(anyhow::Error::msg)?,
            Windows::Segments(n, half) => {
                let starts = sim::segment_starts(w.jobs.len(), n, sim::RLSCHEDULER_LEN, half)
                    .map_err(|e| anyhow::anyhow!("--windows segments: {}: {e}", w.name))?;
                sim::windows(&w, &starts, sim::RLSCHEDULER_LEN, &sc, &mut clock)
            }
        };
        let bs = per.iter().map(|m| m.avg_bounded_slowdown).collect();
        (Metrics::mean(&per), Some(bs), Vec::new())
    } else {
        let mut sc = SimConfig::new(cfg, a.seed);
        sc.record_series = a.plot.is_some();
        sc.no_departures = a.no_departures;
        let out = sim::run(&w, 0..w.jobs.len(), &sc, &mut clock);
        (sim::summarize(&out, w.capacity, w.gpu), None, out.series)
    };
    let wall = started.elapsed().as_secs_f64();
    if let Some(p) = &a.plot {
        let title = format!("{} — {} / {}", w.name, a.policy, a.backfill);
        std::fs::write(p, sim::svg(&title, &series)).with_context(|| format!("writing {}", p.display()))?;
    }
    let report = Report {
        trace: &w.name,
        nodes: w.nodes.len(),
        capacity: w.capacity,
        policy: &a.policy,
        backfill: &a.backfill,
        predict: &a.predict,
        seed: a.seed,
        windows: a.windows.as_deref(),
        skipped_lines: w.skipped,
        metrics: &metrics,
        per_window_bounded_slowdown: per_window,
        wall_s: wall,
    };
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

#[derive(Serialize)]
struct PolicyCurve {
    placement: &'static str,
    /// Points every 10 % of the capacity arrived.
    curve: Vec<sim::CurvePoint>,
    first_failure: Option<sim::CurvePoint>,
    end: sim::CurvePoint,
    fragmented_of_free: f64,
    pass_us_mean: f64,
}

#[derive(Serialize)]
struct InflationReport<'a> {
    trace: &'a str,
    nodes: usize,
    gpu_capacity_milli: u64,
    trace_pods: usize,
    inflate: f64,
    seeds: Vec<u64>,
    placements: Vec<PolicyCurve>,
    wall_s: f64,
}

/// `--inflate`: FGD's placement evaluation, for each placement policy asked for.
fn inflation(a: &SimArgs, w: &trace::Workload, cfg: Config, ratio: f64, placements: &[Placement]) -> Result<()> {
    if !w.gpu {
        bail!("--inflate evaluates GPU placement: give a GPU trace (the Alibaba pod list or --synthetic)");
    }
    let origin = Instant::now();
    let mut clock = move || origin.elapsed().as_nanos() as u64;
    let started = Instant::now();
    let seeds: Vec<u64> = (0..a.repeat as u64).map(|k| a.seed + k).collect();
    let mut out = Vec::new();
    for &p in placements {
        let runs: Vec<sim::Inflation> =
            seeds.iter().map(|&s| sim::inflate(w, Config { placement: p, ..cfg.clone() }, ratio, 0.1, s, &mut clock)).collect();
        let m = sim::mean_inflation(&runs);
        let pass_us_mean = if m.pass_ns.is_empty() { 0.0 } else { m.pass_ns.iter().sum::<u64>() as f64 / m.pass_ns.len() as f64 / 1000.0 };
        out.push(PolicyCurve {
            placement: p.name(),
            curve: m.curve,
            first_failure: m.first_failure,
            end: m.end,
            fragmented_of_free: m.fragmented_of_free,
            pass_us_mean,
        });
    }
    let report = InflationReport {
        trace: &w.name,
        nodes: w.nodes.len(),
        gpu_capacity_milli: w.capacity,
        trace_pods: w.jobs.len(),
        inflate: ratio,
        seeds,
        placements: out,
        wall_s: started.elapsed().as_secs_f64(),
    };
    let named: Vec<(String, Vec<sim::CurvePoint>)> = report.placements.iter().map(|p| (p.placement.to_string(), p.curve.clone())).collect();
    if let Some(path) = &a.plot {
        let title = format!("{}: GPU allocation vs arrived workload", w.name);
        std::fs::write(path, sim::curve_svg(&title, &named)).with_context(|| format!("writing {}", path.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(());
    }
    println!("trace      {} ({} nodes, {:.0} GPUs, {} pods)", report.trace, report.nodes, w.capacity as f64 / 1000.0, report.trace_pods);
    println!("inflation  {ratio} x GPU capacity, seeds {:?}", report.seeds);
    println!("GPU allocation ratio (% of GPU capacity) against the arrived workload:");
    print!("{}", sim::curve_table(&named));
    println!(
        "{:<11} {:>14} {:>14} {:>8} {:>12} {:>13} {:>9}",
        "placement", "first failure", "alloc at end", "failed", "frag at end", "frag of free", "pass us"
    );
    for p in &report.placements {
        let ff = p.first_failure.map_or("none".to_string(), |f| format!("{:.2}% @{:.0}%", f.allocated * 100.0, f.arrived * 100.0));
        println!(
            "{:<11} {:>14} {:>13.2}% {:>8} {:>11.2}% {:>12.1}% {:>9.1}",
            p.placement,
            ff,
            p.end.allocated * 100.0,
            p.end.failed,
            p.end.fragmented * 100.0,
            p.fragmented_of_free * 100.0,
            p.pass_us_mean
        );
    }
    println!("wall time (s)  {:.2}", report.wall_s);
    Ok(())
}

/// What `--windows` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Windows {
    Rlscheduler,
    Segments(usize, sim::Half),
}

fn parse_windows(s: &str) -> Result<Windows> {
    let bad = || anyhow::anyhow!("unknown --windows {s:?} (rlscheduler, or segments[:N[:tune|report]] with N from 1 to 1000)");
    if s == "rlscheduler" {
        return Ok(Windows::Rlscheduler);
    }
    let mut parts = s.split(':');
    if parts.next() != Some("segments") {
        return Err(bad());
    }
    let n = match parts.next() {
        None => 24,
        Some(n) => n.parse::<usize>().ok().filter(|n| (1..=1000).contains(n)).ok_or_else(bad)?,
    };
    let half = match parts.next() {
        None | Some("all") => sim::Half::All,
        Some("tune") => sim::Half::Tune,
        Some("report") => sim::Half::Report,
        Some(_) => return Err(bad()),
    };
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(Windows::Segments(n, half))
}

fn parse_weights(spec: &str, mut w: sched::Weights) -> Result<sched::Weights> {
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').with_context(|| format!("--weights: {part:?} is not key=value"))?;
        let x: f64 = v
            .parse()
            .ok()
            .filter(|x: &f64| x.is_finite() && *x >= 0.0)
            .with_context(|| format!("--weights: {k}={v:?} is not a non-negative number"))?;
        w.set(k, x).map_err(|e| anyhow::anyhow!("--weights: {e}"))?;
    }
    Ok(w)
}

fn print_table(r: &Report) {
    let m = r.metrics;
    let rows: Vec<(&str, String)> = vec![
        ("trace", r.trace.to_string()),
        ("cluster", format!("{} nodes, capacity {}", r.nodes, r.capacity)),
        (
            "policy / backfill",
            if is_limit(&r.predict) {
                format!("{} / {}", r.policy, r.backfill)
            } else {
                format!("{} / {} / predict {}", r.policy, r.backfill, r.predict)
            },
        ),
        ("seed", r.seed.to_string()),
        ("windows", r.windows.unwrap_or("whole trace").to_string()),
        ("jobs", format!("{} started, {} rejected, {} skipped lines", m.jobs, m.rejected, r.skipped_lines)),
        ("avg bounded slowdown", format!("{:.2}", m.avg_bounded_slowdown)),
        ("utilization (RLScheduler)", format!("{:.3}", m.utilization)),
        ("utilization (busy/makespan)", format!("{:.3}", m.utilization_makespan)),
        (
            "wait avg / p50 / p95 / p99 (s)",
            format!("{:.0} / {:.0} / {:.0} / {:.0}", m.avg_wait_s, m.p50_wait_s, m.p95_wait_s, m.p99_wait_s),
        ),
        ("backfilled jobs", m.backfilled.to_string()),
        ("pending at the end", m.pending_at_end.to_string()),
        ("scheduling passes", m.passes.to_string()),
        ("pass time mean / p99 / max (us)", format!("{:.1} / {:.1} / {:.1}", m.pass_us_mean, m.pass_us_p99, m.pass_us_max)),
        ("wall time (s)", format!("{:.2}", r.wall_s)),
    ];
    let mut rows = rows;
    if let Some(g) = m.gpu_allocation_rate {
        rows.push(("GPU allocation rate", format!("{g:.3}")));
    }
    if let Some(f) = m.gpu_fragmentation {
        rows.push(("GPU fragmentation", format!("{f:.3}")));
    }
    if let Some(pw) = &r.per_window_bounded_slowdown {
        rows.push(("per-window bounded slowdown", pw.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(" ")));
    }
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in rows {
        println!("{k:<width$}  {v}");
    }
}

fn is_limit(p: &&str) -> bool {
    matches!(*p, "limit" | "none")
}
