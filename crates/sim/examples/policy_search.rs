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
//! Sets: `tune` (segments starting in the first half of each trace), `report` (the second half),
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

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        eprintln!("usage: policy_search TRACE_DIR [--set tune|report|all|whole] [--segments N] CANDIDATE...");
        std::process::exit(2);
    }
    let dir = std::path::PathBuf::from(args.remove(0));
    let mut set = "tune".to_string();
    let mut segments = 24;
    let mut specs = Vec::new();
    let mut only: Option<String> = None;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--set" => set = it.next().expect("--set VALUE"),
            "--only" => only = it.next(),
            "--segments" => segments = it.next().and_then(|s| s.parse().ok()).expect("--segments N"),
            _ => specs.push(a),
        }
    }
    let cfgs: Vec<Config> = specs.iter().map(|s| parse(s).unwrap_or_else(|e| panic!("{e}"))).collect();
    let files: Vec<&str> = ["lublin_256.swf", "SDSC-SP2-1998-4.2-cln.swf.gz", "HPC2N-2002-2.2-cln.swf.gz", "lublin_256_new2"]
        .into_iter()
        .filter(|f| only.as_ref().is_none_or(|o| f.contains(o.as_str())))
        .collect();
    let loads: Vec<trace::Workload> = files
        .iter()
        .map(|f| {
            let r = trace::open(&dir.join(f)).unwrap_or_else(|e| panic!("{e}"));
            trace::parse_swf(r, f, false).unwrap().into_workload(f, None).unwrap()
        })
        .collect();
    // Work items: (candidate, trace, range, whole).
    let mut work = Vec::new();
    for c in 0..cfgs.len() {
        for (t, w) in loads.iter().enumerate() {
            if set == "whole" {
                work.push((c, t, 0..w.jobs.len(), true));
                continue;
            }
            if set == "rls" {
                for s in sim::RLSCHEDULER_STARTS {
                    work.push((c, t, s..s + LEN, false));
                }
                continue;
            }
            let half = match set.as_str() {
                "tune" => sim::Half::Tune,
                "report" => sim::Half::Report,
                _ => sim::Half::All,
            };
            for s in sim::segment_starts(w.jobs.len(), segments, LEN, half).unwrap() {
                work.push((c, t, s..s + LEN, false));
            }
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
                    let Some((c, t, range, whole)) = work.get(i).cloned() else { break };
                    let mut sc = sim::SimConfig::new(cfgs[c].clone(), 1);
                    sc.stop_at_last_start = !whole;
                    let mut clock = || 0u64;
                    let o = sim::run(&loads[t], range, &sc, &mut clock);
                    let m = sim::summarize(&o, loads[t].capacity, false);
                    results.lock().unwrap()[c * loads.len() + t].push(m);
                }
            });
        }
    });
    let results = results.into_inner().unwrap();
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
