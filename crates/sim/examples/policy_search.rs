//! The default policy's search and report harness (issue 15; BENCHMARKS §2.3): every SWF trace
//! of a folder, cut into segments of 1,024 jobs with start offsets spread evenly over the whole
//! trace, each run as `tandem sim --windows` runs (empty cluster, to the last start), and each
//! whole trace (empty cluster to the last completion), for any number of candidate policies in
//! one process, on all cores.
//!
//! ```sh
//! cargo run --release -p sim --example policy_search -- ../shared/traces --set tune fcfs sjf f1 default default@history
//! ```
//!
//! A candidate is `POLICY[+KEY=VALUE...][@PREDICT][/BACKFILL]`: a `--policy` name, `--weights`
//! keys (for multifactor and default), a `--predict` mode and a `--backfill` mode (default easy).
//! Sets: `tune` (the first half of each trace's segments), `report` (the second half),
//! `all`, `whole` (whole traces), `rls` (RLScheduler's ten windows). The figures are means over a trace's segments.

use sched::{Backfill, Config, Policy, Predict};
use std::sync::atomic::{AtomicUsize, Ordering};

const LEN: usize = 1024;

fn parse(spec: &str) -> Result<Config, String> {
    let (rest, backfill) = match spec.split_once('/') {
        Some((r, b)) => (r, Backfill::parse(b).ok_or(format!("bad backfill in {spec}"))?),
        None => (spec, Backfill::Easy),
    };
    let (rest, predict) = match rest.split_once('@') {
        Some((r, p)) => (r, Predict::parse(p).ok_or(format!("bad predict in {spec}"))?),
        None => (rest, Predict::Limit),
    };
    let mut parts = rest.split('+');
    let mut policy = Policy::parse(parts.next().unwrap_or("")).ok_or(format!("bad policy in {spec}"))?;
    for kv in parts {
        let (k, v) = kv.split_once('=').ok_or(format!("bad weight {kv}"))?;
        let v: f64 = v.parse().map_err(|_| format!("bad value {kv}"))?;
        match &mut policy {
            Policy::Multifactor(w) => w.set(k, v)?,
            _ => return Err(format!("weights need multifactor: {spec}")),
        }
    }
    Ok(Config { policy, backfill, predict, ..Config::default() })
}

/// Stops with a message and exit status 2 (bad arguments or traces).
fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("policy_search: {msg}");
    std::process::exit(2);
}

fn main() {
    let usage = "usage: policy_search TRACE_DIR [--set tune|report|all|whole|rls] [--segments N] [--only NAME] CANDIDATE...";
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().unwrap_or_else(|| fail(usage)));
    let (mut set, mut segments, mut only, mut specs) = ("tune".to_string(), 24, None::<String>, Vec::new());
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| fail(format!("{a} needs a value ({usage})")));
        match a.as_str() {
            "--set" => set = value(),
            "--only" => only = Some(value()),
            "--segments" => segments = value().parse().unwrap_or_else(|_| fail("--segments takes a count")),
            _ => specs.push(a),
        }
    }
    let half = match set.as_str() {
        "tune" => Some(sim::Half::Tune),
        "report" => Some(sim::Half::Report),
        "all" => Some(sim::Half::All),
        "whole" | "rls" => None,
        other => fail(format!("unknown --set {other:?} ({usage})")),
    };
    if specs.is_empty() {
        fail(usage);
    }
    let cfgs: Vec<Config> = specs.iter().map(|s| parse(s).unwrap_or_else(|e| fail(e))).collect();
    let files: Vec<&str> = ["lublin_256.swf", "SDSC-SP2-1998-4.2-cln.swf.gz", "HPC2N-2002-2.2-cln.swf.gz", "lublin_256_new2"]
        .into_iter()
        .filter(|f| only.as_ref().is_none_or(|o| f.contains(o.as_str())))
        .collect();
    let loads: Vec<trace::Workload> = files
        .iter()
        .map(|f| {
            let r = trace::open(&dir.join(f)).unwrap_or_else(|e| fail(e));
            let swf = trace::parse_swf(r, f, false).unwrap_or_else(|e| fail(e));
            swf.into_workload(f, None).unwrap_or_else(|e| fail(e))
        })
        .collect();
    // Work items: (candidate, trace, the window's first job, or None for the whole trace).
    let mut work = Vec::new();
    for c in 0..cfgs.len() {
        for (t, w) in loads.iter().enumerate() {
            let starts: Vec<Option<usize>> = match (set.as_str(), half) {
                ("whole", _) => vec![None],
                ("rls", _) => sim::RLSCHEDULER_STARTS.iter().map(|&s| Some(s)).collect(),
                (_, Some(h)) => {
                    sim::segment_starts(w.jobs.len(), segments, LEN, h).unwrap_or_else(|e| fail(e)).into_iter().map(Some).collect()
                }
                (_, None) => unreachable!("every other set has a half"),
            };
            work.extend(starts.into_iter().map(|s| (c, t, s)));
        }
    }
    let next = AtomicUsize::new(0);
    let results = std::sync::Mutex::new(vec![Vec::new(); cfgs.len() * loads.len()]);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(c, t, start)) = work.get(i) else { break };
                    let w = &loads[t];
                    let mut clock = || 0u64;
                    // As `tandem sim` runs them: windows with `--windows`'s settings, whole traces with its default ones.
                    let m = match start {
                        Some(s) => sim::windows(w, &[s], LEN, &sim::rlscheduler_config(cfgs[c].clone(), 1), &mut clock).remove(0),
                        None => {
                            let o = sim::run(w, 0..w.jobs.len(), &sim::SimConfig::new(cfgs[c].clone(), 1), &mut clock);
                            sim::summarize(&o, w.capacity, w.gpu)
                        }
                    };
                    results.lock().expect("no worker panics")[c * loads.len() + t].push(m);
                }
            });
        }
    });
    let results = results.into_inner().expect("no worker panics");
    println!("set {set}, {segments} segments per trace; per trace: bsld / avg wait (s) / p95 wait (s)");
    for f in &files {
        print!("{:>28} | ", &f[..f.len().min(28)]);
    }
    println!("candidate");
    for (c, spec) in specs.iter().enumerate() {
        for t in 0..loads.len() {
            let m = sim::Metrics::mean(&results[c * loads.len() + t]);
            print!("{:>9.2} {:>9.0} {:>8.0} | ", m.avg_bounded_slowdown, m.avg_wait_s, m.p95_wait_s);
        }
        println!("{spec}");
    }
}
