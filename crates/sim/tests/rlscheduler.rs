//! Exact reproduction of RLScheduler's published numbers (SC'20, Tables V and VI; BASELINES.md
//! §1): FCFS, SJF and F1, without backfilling and with RLScheduler's backfilling, on the ten
//! 1,024-job windows of Lublin-1, SDSC-SP2, HPC2N and Lublin-2. Every pair must match to the
//! printed precision (bounded slowdown to 0.01, utilisation to 0.001), and each window's bounded
//! slowdown to 0.01. One published cell (SDSC-SP2, SJF with backfilling, utilisation 0.661) is
//! not what the authors' simulator gives on this file (0.660464); we match the simulator.

use sched::{Backfill, Config, Policy};
use std::path::PathBuf;

fn traces() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces")
}

fn load(file: &str) -> trace::Workload {
    let path = traces().join(file);
    let r = trace::open(&path).unwrap_or_else(|e| panic!("{e} (the traces live in ../shared/traces beside the checkout)"));
    trace::parse_swf(r, file, false).unwrap().into_workload(file, None).unwrap()
}

/// (policy, backfill, [(trace file, published bsld, published util, per-window bsld)])
fn check(trace_file: &str, rows: &[(&str, Backfill, f64, f64, [f64; 10])]) {
    let w = load(trace_file);
    let mut failures = Vec::new();
    for (policy, backfill, bsld, util, windows) in rows {
        let cfg = Config { policy: Policy::parse(policy).unwrap(), backfill: *backfill, ..Config::default() };
        let sim = sim::rlscheduler_config(cfg, 1);
        let mut clock = || 0u64;
        let per = sim::rlscheduler_windows(&w, &sim, &mut clock).unwrap();
        let mean = sim::Metrics::mean(&per);
        let got_b = format!("{:.2}", mean.avg_bounded_slowdown);
        let got_u = format!("{:.3}", mean.utilization);
        if got_b != format!("{bsld:.2}") || got_u != format!("{util:.3}") {
            failures.push(format!(
                "{trace_file} {policy} {backfill:?}: bsld {got_b} (published {bsld:.2}), util {got_u} (published {util:.3})"
            ));
        }
        for (k, (m, want)) in per.iter().zip(windows).enumerate() {
            if format!("{:.2}", m.avg_bounded_slowdown) != format!("{want:.2}") {
                failures.push(format!("{trace_file} {policy} {backfill:?} window {k}: {:.2} vs {want:.2}", m.avg_bounded_slowdown));
            }
        }
    }
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
}

use Backfill::{None as NoBf, Rls};

#[test]
fn lublin_1() {
    check(
        "lublin_256.swf",
        &[
            ("fcfs", NoBf, 7273.77, 0.657, [6862.26, 7034.45, 9090.84, 5405.50, 7847.37, 6366.98, 7655.81, 7535.14, 10071.42, 4867.95]),
            ("sjf", NoBf, 277.35, 0.762, [204.26, 251.42, 214.32, 169.69, 297.43, 245.30, 496.14, 229.90, 235.68, 429.36]),
            ("f1", NoBf, 258.37, 0.816, [266.73, 159.08, 156.82, 206.02, 376.38, 161.33, 423.66, 217.20, 349.41, 267.04]),
            ("fcfs", Rls, 235.82, 0.868, [163.71, 263.50, 247.54, 128.57, 261.42, 239.81, 192.07, 358.81, 297.78, 204.96]),
            ("sjf", Rls, 73.31, 0.778, [69.87, 55.17, 64.00, 34.96, 113.95, 49.19, 93.04, 121.19, 59.54, 72.15]),
            ("f1", Rls, 75.07, 0.840, [66.75, 32.53, 45.23, 51.08, 161.90, 32.74, 95.43, 33.99, 95.04, 135.99]),
        ],
    );
}

#[test]
fn sdsc_sp2() {
    check(
        "SDSC-SP2-1998-4.2-cln.swf.gz",
        &[
            ("fcfs", NoBf, 1727.54, 0.670, [134.00, 352.88, 794.05, 1400.28, 1666.81, 317.09, 535.82, 2752.70, 667.13, 8654.68]),
            ("sjf", NoBf, 2680.55, 0.645, [83.21, 288.59, 348.33, 292.53, 1506.16, 263.81, 330.11, 9080.34, 518.17, 14094.28]),
            ("f1", NoBf, 1232.06, 0.674, [63.74, 162.84, 301.47, 183.08, 882.02, 152.97, 113.43, 3247.16, 407.70, 6806.17]),
            ("fcfs", Rls, 1595.12, 0.682, [21.62, 99.87, 211.47, 439.36, 471.41, 97.47, 338.00, 3298.17, 302.89, 10670.90]),
            // Published utilisation 0.661; RLScheduler's own simulator (commit cd433e3, run
            // unmodified on this file with the same ten windows) gives 0.660464, as we do.
            ("sjf", Rls, 2167.84, 0.660, [17.76, 121.80, 294.38, 200.65, 1011.17, 107.74, 231.46, 5559.33, 340.97, 13793.11]),
            ("f1", Rls, 1098.22, 0.677, [17.33, 140.07, 238.30, 165.51, 730.26, 115.64, 92.23, 2923.49, 252.75, 6306.59]),
        ],
    );
}

#[test]
fn hpc2n() {
    check(
        "HPC2N-2002-2.2-cln.swf.gz",
        &[
            ("fcfs", NoBf, 297.18, 0.638, [66.19, 153.62, 552.34, 95.63, 287.99, 154.03, 333.63, 316.15, 655.15, 357.04]),
            ("sjf", NoBf, 157.71, 0.640, [93.92, 90.81, 273.16, 43.03, 210.21, 91.29, 212.26, 71.18, 365.45, 125.74]),
            ("f1", NoBf, 118.01, 0.637, [38.86, 77.81, 155.98, 36.54, 114.15, 75.25, 163.01, 108.66, 197.80, 212.12]),
            ("fcfs", Rls, 127.38, 0.639, [40.87, 65.92, 257.00, 30.68, 131.34, 64.25, 134.01, 135.99, 278.60, 135.17]),
            ("sjf", Rls, 122.04, 0.641, [78.02, 60.05, 243.07, 20.03, 170.82, 58.41, 126.33, 65.35, 326.41, 71.90]),
            ("f1", Rls, 71.95, 0.638, [21.67, 55.37, 124.89, 7.64, 64.16, 52.75, 90.60, 86.14, 135.09, 81.14]),
        ],
    );
}

#[test]
fn lublin_2() {
    check(
        "lublin_256_new2",
        &[
            ("fcfs", NoBf, 7842.47, 0.404, [7922.33, 8673.90, 12469.31, 2844.93, 1388.99, 8355.93, 3546.16, 12516.34, 10226.66, 10480.16]),
            ("sjf", NoBf, 787.89, 0.562, [442.99, 1400.46, 1218.99, 328.49, 410.95, 1414.17, 482.28, 1164.72, 495.19, 520.66]),
            ("f1", NoBf, 698.34, 0.478, [534.22, 919.80, 582.99, 220.57, 315.42, 930.58, 504.00, 1248.41, 587.16, 1140.21]),
            ("fcfs", Rls, 247.61, 0.587, [150.08, 202.23, 821.08, 78.23, 71.43, 199.74, 254.93, 311.33, 271.54, 115.48]),
            ("sjf", Rls, 91.99, 0.593, [60.15, 118.67, 55.28, 31.75, 53.77, 117.59, 114.65, 172.22, 98.15, 97.71]),
            ("f1", Rls, 148.25, 0.552, [298.33, 258.26, 128.95, 41.57, 71.65, 255.77, 81.27, 87.16, 181.42, 78.11]),
        ],
    );
}

/// Tandem's production default (multifactor default weights, EASY backfill, requested times
/// only) against the best published entry of each row with backfilling, heuristic or RL
/// (BASELINES.md §1): Lublin-1 58.64, SDSC-SP2 397.82, HPC2N 71.95, Lublin-2 91.99. Lower is
/// better; the figures themselves are in BENCHMARKS.md.
#[test]
fn default_policy_beats_the_best_published_entry_of_every_row() {
    let best = [
        ("lublin_256.swf", 58.64),
        ("SDSC-SP2-1998-4.2-cln.swf.gz", 397.82),
        ("HPC2N-2002-2.2-cln.swf.gz", 71.95),
        ("lublin_256_new2", 91.99),
    ];
    let mut worse = Vec::new();
    for (file, published) in best {
        let w = load(file);
        let sim = sim::rlscheduler_config(Config::default(), 1);
        let per = sim::rlscheduler_windows(&w, &sim, &mut || 0).unwrap();
        let ours = sim::Metrics::mean(&per).avg_bounded_slowdown;
        if ours >= published {
            worse.push(format!("{file}: {ours:.2} >= {published}"));
        }
    }
    assert!(worse.is_empty(), "default policy (seed 1) not ahead: {}", worse.join(", "));
}

/// Issue 15's hard target, on the segments the default was not chosen on (BENCHMARKS.md §2.3):
/// on every trace the default (with its predictions) has a lower mean bounded slowdown over the
/// second half of 24 segments than FCFS with EASY backfilling.
#[test]
fn default_policy_beats_fcfs_on_every_traces_held_out_segments() {
    let mut worse = Vec::new();
    for file in ["lublin_256.swf", "SDSC-SP2-1998-4.2-cln.swf.gz", "HPC2N-2002-2.2-cln.swf.gz", "lublin_256_new2"] {
        let w = load(file);
        let starts = sim::segment_starts(w.jobs.len(), 24, 1024, sim::Half::Report).unwrap();
        let mean = |cfg: Config| {
            let sc = sim::rlscheduler_config(cfg, 1);
            sim::Metrics::mean(&sim::windows(&w, &starts, 1024, &sc, &mut || 0)).avg_bounded_slowdown
        };
        let fcfs = mean(Config { policy: Policy::Fcfs, predict: sched::Predict::Limit, ..Config::default() });
        let ours = mean(Config::default());
        if ours >= fcfs {
            worse.push(format!("{file}: default {ours:.2} >= fcfs {fcfs:.2}"));
        }
    }
    assert!(worse.is_empty(), "the default lost to FCFS+EASY: {}", worse.join(", "));
}
