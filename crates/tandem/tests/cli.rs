//! End-to-end tests of the `tandem` binary: real processes, real files, the shared traces.

use std::path::PathBuf;
use std::process::{Command, Output};

fn traces() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces")
}

fn tandem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tandem")).args(args).output().expect("run tandem")
}

fn ok_json(args: &[&str]) -> serde_json::Value {
    let out = tandem(args);
    assert!(out.status.success(), "tandem {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn err(args: &[&str]) -> String {
    let out = tandem(args);
    assert!(!out.status.success(), "tandem {args:?} should fail");
    assert_eq!(out.status.code(), Some(2));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn tmp(name: &str, body: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tandem-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

fn path(p: &PathBuf) -> &str {
    p.to_str().unwrap()
}

#[test]
fn windows_reproduce_rlscheduler_through_the_binary() {
    let lublin = traces().join("lublin_256.swf");
    let v = ok_json(&["sim", "--trace", path(&lublin), "--windows", "rlscheduler", "--policy", "fcfs", "--backfill", "rls", "--json"]);
    assert_eq!(format!("{:.2}", v["avg_bounded_slowdown"].as_f64().unwrap()), "235.82");
    assert_eq!(format!("{:.3}", v["utilization"].as_f64().unwrap()), "0.868");
    assert_eq!(v["jobs"].as_u64(), Some(10 * 1024));
    assert!(v["avg_wait_s"].as_f64().unwrap() > 0.0);
    assert_eq!(v["per_window_bounded_slowdown"].as_array().unwrap().len(), 10);
}

#[test]
fn segments_spread_over_the_trace_split_into_tune_and_report_halves() {
    let lublin = traces().join("lublin_256_new2");
    let run = |w: &str| ok_json(&["sim", "--trace", path(&lublin), "--windows", w, "--policy", "fcfs", "--json"]);
    let all = run("segments:6");
    let (tune, report) = (run("segments:6:tune"), run("segments:6:report"));
    let per = |v: &serde_json::Value| -> Vec<f64> {
        v["per_window_bounded_slowdown"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
    };
    assert_eq!(all["jobs"].as_u64(), Some(6 * 1024));
    assert_eq!(per(&all).len(), 6);
    let joined: Vec<f64> = per(&tune).into_iter().chain(per(&report)).collect();
    assert_eq!(joined, per(&all), "tune is the first half of the segments, report the second");
    assert_ne!(per(&tune), per(&report));
    assert_eq!(run("segments")["per_window_bounded_slowdown"].as_array().unwrap().len(), 24, "24 by default");
    for bad in ["segments:0", "segments:x", "segments:1001", "segments:6:other", "segments:6:tune:1", "segment", ""] {
        assert!(err(&["sim", "--trace", path(&lublin), "--windows", bad]).contains("unknown --windows"), "{bad:?}");
    }
    let tiny = tmp("tiny.swf", "; MaxProcs: 4\n1 0 0 10 1 -1 -1 1 20 -1 1 1 1 -1 1 -1 -1 -1\n");
    assert!(err(&["sim", "--trace", path(&tiny), "--windows", "segments:2"]).contains("needs at least 1024 jobs"));
}

#[test]
fn whole_gzip_trace_table_and_plot() {
    let sdsc = traces().join("SDSC-SP2-1998-4.2-cln.swf.gz");
    let plot = std::env::temp_dir().join(format!("tandem-plot-{}.svg", std::process::id()));
    let out = tandem(&["sim", "--trace", path(&sdsc), "--limit", "3000", "--plot", plot.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    for row in ["avg bounded slowdown", "utilization (RLScheduler)", "wait avg / p50 / p95 / p99", "pass time mean"] {
        assert!(table.contains(row), "missing {row:?} in\n{table}");
    }
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("polyline") && svg.trim_end().ends_with("</svg>"));
    std::fs::remove_file(plot).ok();
}

#[test]
fn alibaba_gpu_trace_reports_gpu_metrics() {
    let pods = traces().join("openb_pod_list_default.csv");
    let nodes = traces().join("openb_node_list_gpu_node.csv");
    let v = ok_json(&["sim", "--trace", path(&pods), "--nodes-file", path(&nodes), "--json"]);
    assert_eq!(v["nodes"].as_u64(), Some(1213));
    assert_eq!(v["skipped_lines"].as_u64(), Some(897), "the 897 never-scheduled pods are skipped");
    let alloc = v["gpu_allocation_rate"].as_f64().unwrap();
    assert!(alloc > 0.0 && alloc <= 1.0);
    assert!(v["gpu_fragmentation"].as_f64().is_some());
    assert!(err(&["sim", "--trace", path(&pods)]).contains("--nodes-file"));
    // Placement mode (as the FGD simulator): pods never leave; the figures describe the packing.
    let p = ok_json(&["sim", "--trace", path(&pods), "--nodes-file", path(&nodes), "--no-departures", "--json"]);
    let packed = p["gpu_allocation_rate"].as_f64().unwrap();
    assert!(packed > alloc && packed <= 1.0, "packing {packed} vs time-averaged {alloc}");
    assert_eq!(p["jobs"].as_u64().unwrap() + p["pending_at_end"].as_u64().unwrap(), 7255);
    assert!(
        err(&["sim", "--trace", path(&pods), "--nodes-file", path(&nodes), "--no-departures", "--windows", "rlscheduler"])
            .contains("--no-departures")
    );
}

#[test]
fn gpu_placement_under_workload_inflation() {
    // FGD's evaluation: pods arrive until their GPU requests reach 1.3 × the GPU capacity.
    let pods = traces().join("openb_pod_list_default.csv");
    let nodes = traces().join("openb_node_list_gpu_node.csv");
    let run = |placement: &str| {
        ok_json(&[
            "sim",
            "--trace",
            path(&pods),
            "--nodes-file",
            path(&nodes),
            "--inflate",
            "1.3",
            "--placement",
            placement,
            "--seed",
            "42",
            "--json",
        ])
    };
    let (fgd, random) = (run("fgd"), run("random"));
    assert_eq!(fgd["trace_pods"].as_u64(), Some(8152), "inflation samples the whole pod list");
    let p = &fgd["placements"][0];
    let curve = p["curve"].as_array().unwrap();
    assert_eq!(curve.len(), 12, "a point every 10 % of capacity up to 120 %");
    let end = p["end"]["allocated"].as_f64().unwrap();
    let first = p["first_failure"]["allocated"].as_f64().unwrap();
    assert!(first > 0.9 && end > first && end < 1.0, "fgd packs past 90 % before a pod fails: {first} then {end}");
    let r = random["placements"][0]["end"]["allocated"].as_f64().unwrap();
    assert!(end > r, "fgd {end} allocates more than random {r}");
    assert!(p["end"]["fragmented"].as_f64().unwrap() < random["placements"][0]["end"]["fragmented"].as_f64().unwrap());
    let again = run("fgd");
    assert_eq!((&again["placements"][0]["curve"], &again["placements"][0]["end"]), (&p["curve"], &p["end"]), "the same seed, the same run");
    assert!(err(&["sim", "--trace", path(&pods), "--nodes-file", path(&nodes), "--placement", "spread"]).contains("unknown --placement"));
    assert!(err(&["sim", "--trace", path(&pods), "--nodes-file", path(&nodes), "--inflate", "0"]).contains("--inflate"));
    let lublin = traces().join("lublin_256.swf");
    assert!(err(&["sim", "--trace", path(&lublin), "--inflate", "1.3"]).contains("GPU trace"));
}

#[test]
fn synthetic_runs_are_reproducible_from_the_seed() {
    let run = |seed: &str| {
        let mut v = ok_json(&["sim", "--synthetic", "nodes=64,gpus=8,jobs=3000", "--seed", seed, "--json"]);
        for k in ["wall_s", "pass_us_mean", "pass_us_p99", "pass_us_max"] {
            v.as_object_mut().unwrap().remove(k);
        }
        v
    };
    assert_eq!(run("5"), run("5"));
    assert_ne!(run("5")["avg_wait_s"], run("6")["avg_wait_s"]);
}

#[test]
fn malformed_traces_name_the_file_and_line() {
    let good = "1 0 -1 100 4 -1 -1 4 200 -1 1 1 1 -1 0 -1 -1 -1\n";
    let bad = tmp("bad.swf", &format!("; MaxNodes: 8\n{good}2 5 -1 1x0 4 -1 -1 4 200 -1 1 1 1 -1 0 -1 -1 -1\n3 9 -1 10\n"));
    let e = err(&["sim", "--trace", path(&bad)]);
    assert!(e.contains("bad.swf:3: field 4 (run time)"), "{e}");
    let v = ok_json(&["sim", "--trace", path(&bad), "--lenient", "--json"]);
    assert_eq!((v["jobs"].as_u64(), v["skipped_lines"].as_u64()), (Some(1), Some(2)));
    let truncated = tmp("trunc.swf", &format!("; MaxNodes: 8\n{good}2 5 -1 100 4 -1"));
    assert!(err(&["sim", "--trace", path(&truncated)]).contains("trunc.swf:3: expected 18 fields, found 6"));
    let headless = tmp("nohead.swf", good);
    assert!(err(&["sim", "--trace", path(&headless)]).contains("--procs"));
    assert_eq!(ok_json(&["sim", "--trace", path(&headless), "--procs", "8", "--json"])["jobs"].as_u64(), Some(1));
    let gz = tmp("notgz.swf.gz", "\u{1f}\u{8b}garbage");
    assert!(err(&["sim", "--trace", path(&gz)]).contains("notgz.swf.gz"));
    assert!(err(&["sim", "--trace", "/nonexistent/x.swf"]).contains("/nonexistent/x.swf"));
    let badcsv = tmp("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,-5,2,P100\n");
    let pods = traces().join("openb_pod_list_default.csv");
    assert!(err(&["sim", "--trace", path(&pods), "--nodes-file", path(&badcsv)]).contains("nodes.csv:2: column memory_mib"));
}

#[test]
fn impossible_jobs_are_rejected_not_blocking() {
    // 8 processors; job 2 asks for 64: rejected with a reason, job 3 still runs.
    let t = tmp(
        "big.swf",
        "; MaxNodes: 8\n1 0 -1 100 4 -1 -1 4 200 -1 1 1 1 -1 0 -1 -1 -1\n2 1 -1 100 64 -1 -1 64 200 -1 1 1 1 -1 0 -1 -1 -1\n3 2 -1 100 2 -1 -1 2 200 -1 1 1 1 -1 0 -1 -1 -1\n",
    );
    let v = ok_json(&["sim", "--trace", path(&t), "--json"]);
    assert_eq!((v["jobs"].as_u64(), v["rejected"].as_u64()), (Some(2), Some(1)));
}

#[test]
fn bad_flags_get_clear_errors() {
    let lublin = traces().join("lublin_256.swf");
    let l = path(&lublin);
    assert!(err(&["sim", "--trace", l, "--policy", "lifo"]).contains("unknown --policy \"lifo\""));
    assert!(err(&["sim", "--trace", l, "--backfill", "greedy"]).contains("unknown --backfill"));
    assert!(err(&["sim", "--trace", l, "--windows", "ten"]).contains("unknown --windows"));
    assert!(err(&["sim", "--trace", l, "--plot", "x.png"]).contains("SVG"));
    assert!(err(&["sim", "--trace", l, "--policy", "sjf", "--weights", "age=1"]).contains("--weights applies"));
    assert!(err(&["sim", "--trace", l, "--weights", "age=-1"]).contains("non-negative"));
    assert!(err(&["sim", "--trace", l, "--weights", "speed=1"]).contains("unknown key"));
    assert!(err(&["sim", "--synthetic", "nodes=x"]).contains("not a whole number"));
    assert!(err(&["sim", "--synthetic", "nodes=8,jobs=100", "--windows", "rlscheduler"]).contains("needs at least"));
    let out = tandem(&["sim"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--trace"));
}

#[test]
fn bench_sched_smoke() {
    let v = ok_json(&["bench", "sched", "--nodes", "200", "--pending", "2000", "--repeat", "2", "--submissions", "20", "--json"]);
    assert!(v["full_pass_ms_median"].as_f64().unwrap() > 0.0);
    assert_eq!(v["pending"].as_u64(), Some(2000));
    assert!(v["submit_fast_path_share"].as_f64().unwrap() > 0.0);
    let c = ok_json(&["bench", "sched", "--nodes", "100", "--pending", "300", "--repeat", "1", "--backfill", "conservative", "--json"]);
    assert!(c["full_pass_ms_median"].as_f64().unwrap() > 0.0);
    assert!(err(&["bench", "sched", "--backfill", "rls"]).contains("easy or conservative"));
}

#[test]
fn bench_agents_smoke() {
    // 50 simulated agents on 4 HTTP/2 connections against a real controller, 10 jobs of the mix.
    let v = ok_json(&[
        "bench",
        "agents",
        "--count",
        "50",
        "--jobs",
        "10",
        "--run-time",
        "1-2",
        "--agents-per-conn",
        "16",
        "--max-gang",
        "4",
        "--idle",
        "0.5",
        "--timeout",
        "300",
        "--services",
        "2",
        "--replicas",
        "3",
        "--json",
    ]);
    assert!(v["services_ready_s"].as_f64().is_some(), "every service replica became ready: {v}");
    assert_eq!(v["all_complete"], true, "{v}");
    assert_eq!(v["completed"].as_u64(), Some(10), "{v}");
    assert_eq!(v["ended_otherwise"].as_u64(), Some(0), "{v}");
    assert_eq!(v["task_starts"].as_u64(), Some(10), "{v}");
    assert_eq!(v["api_submit"]["count"].as_u64(), Some(10), "{v}");
    assert_eq!(v["register_rtt"]["count"].as_u64(), Some(50), "{v}");
    assert_eq!(v["connections"].as_u64(), Some(4), "{v}");
    assert_eq!(v["heartbeat_errors"].as_u64(), Some(0), "{v}");
    assert_eq!(v["unsupported_scripts"].as_u64(), Some(0), "{v}");
    assert!(v["heartbeat_rtt_with_exits"]["count"].as_u64().unwrap() >= 1, "{v}");
    assert!(err(&["bench", "agents", "--count", "0"]).contains("must be positive"));
    assert!(err(&["bench", "agents", "--count", "5", "--heartbeat", "20", "--lease", "30"]).contains("half the lease"));
}

#[test]
fn bench_submit_smoke() {
    let v = ok_json(&["bench", "submit", "--jobs", "10", "--cli-jobs", "3", "--agents", "2", "--cpus-per-agent", "4", "--json"]);
    assert!(v["completed_jobs_per_s"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["cli_submissions_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(v["pending_for_squeue"].as_u64(), Some(10));
    assert!(err(&["bench", "submit", "--jobs", "0"]).contains("must be positive"));
    // With Kubernetes watches of every Pod open: they see the jobs come and go.
    let v = ok_json(&["bench", "submit", "--jobs", "10", "--cli-jobs", "3", "--agents", "1", "--kube-watchers", "2", "--json"]);
    assert_eq!(v["kube_watchers"].as_u64(), Some(2), "{v}");
    assert!(v["kube_watch_events"].as_u64().unwrap() >= 2 * 13, "every job's Pod, to each watch: {v}");
}

#[test]
fn benches_on_etcd_smoke() {
    if Command::new("etcd").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "etcd is not installed (.ci/run installs Debian's etcd-server)");
        eprintln!("skipped: no etcd (apt-get install etcd-server)");
        return;
    }
    let v = ok_json(&["bench", "submit", "--jobs", "10", "--cli-jobs", "3", "--agents", "2", "--cpus-per-agent", "4", "--etcd", "--json"]);
    assert!(v["completed_jobs_per_s"].as_f64().unwrap() > 0.0 && v["settings"].as_str().unwrap().contains("etcd"), "{v}");
    // The idle cluster's heartbeats write nothing to etcd.
    let v = ok_json(&[
        "bench",
        "agents",
        "--count",
        "20",
        "--jobs",
        "4",
        "--run-time",
        "1-2",
        "--max-gang",
        "2",
        "--idle",
        "4",
        "--heartbeat",
        "1",
        "--lease",
        "30",
        "--services",
        "0",
        "--timeout",
        "300",
        "--etcd",
        "--json",
    ]);
    assert_eq!(
        (v["store"].as_str(), v["all_complete"].as_bool(), v["idle_db_commits"].as_u64()),
        (Some("etcd"), Some(true), Some(0)),
        "{v}"
    );
    assert!(v["idle_heartbeats_per_s"].as_f64().unwrap() > 5.0 && v["etcd_transactions"].as_u64().unwrap() > 0, "{v}");
    // A takeover with 40 jobs stored, 30 of them finished.
    let v = ok_json(&["bench", "takeover", "--jobs", "40", "--finished", "0.75", "--agents", "1", "--json"]);
    assert_eq!((v["finished"].as_u64(), v["held"].as_u64(), v["sacct_lines"].as_u64()), (Some(30), Some(10), Some(30)), "{v}");
    assert_eq!(v["jobs_after_takeover"].as_u64(), Some(11), "the held jobs and the one acknowledged by the new leader: {v}");
    assert!(v["takeover_s"].as_f64().unwrap() > 0.0 && v["etcd_db_bytes_max"].as_i64().unwrap() > 0, "{v}");
    assert!(err(&["bench", "takeover", "--finished", "2"]).contains("between 0 and 1"));
}

#[test]
fn shims_link_the_slurm_commands_to_tandem_slurm() {
    let dir = std::env::temp_dir().join(format!("tandem-shims-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = tandem(&["shims", path(&dir)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let slurm = PathBuf::from(env!("CARGO_BIN_EXE_tandem-slurm"));
    for c in ["sbatch", "squeue", "scancel", "sinfo", "sacct", "srun", "salloc", "scontrol", "sprio"] {
        let target = std::fs::read_link(dir.join(c)).unwrap();
        assert_eq!(target.canonicalize().unwrap(), slurm.canonicalize().unwrap(), "{c}");
    }
    // The links answer as the Slurm commands: a bad option is refused before any connection.
    let o = Command::new(dir.join("sbatch")).arg("--bogus").env("TANDEM_SERVER", "unix:///nonexistent").output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("sbatch: unrecognized option '--bogus'\nTry \"sbatch --help\" for more information"),
        "{o:?}"
    );
    // And say why when the controller is not there.
    let o = Command::new(dir.join("squeue")).env("TANDEM_SERVER", "unix:///nonexistent/tandem.sock").output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("squeue: error: cannot reach the controller at unix:///nonexistent/tandem.sock"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tandem_slurm_under_another_name_says_how_to_use_it() {
    let o = Command::new(env!("CARGO_BIN_EXE_tandem-slurm")).arg("--help").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("run me as one of sbatch, squeue"), "{e}");
}

#[test]
fn shims_fail_clearly_without_tandem_slurm_beside_tandem() {
    // A copy of `tandem` (hard-linked, so no bytes are copied) alone in a directory.
    let lonely = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("lonely-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&lonely);
    std::fs::create_dir_all(&lonely).unwrap();
    let exe = lonely.join("tandem");
    if std::fs::hard_link(env!("CARGO_BIN_EXE_tandem"), &exe).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_tandem"), &exe).unwrap();
    }
    let dir = lonely.join("bin");
    let o = Command::new(&exe).arg("shims").arg(&dir).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("tandem-slurm is missing") && e.contains("cargo build --release -p tandem"), "{e}");
    assert!(!dir.exists(), "nothing is written when the target is missing");
    let _ = std::fs::remove_dir_all(&lonely);
}

/// `tandem --version`: the version and the commit it was built from (git's, where the source is
/// a checkout, as in CI), so an operator can tell which build a machine runs.
#[test]
fn the_version_names_the_commit_it_was_built_from() {
    let out = tandem(&["--version"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let commit = head.unwrap_or_else(|| "unknown".into());
    assert_eq!(text, format!("tandem {} (commit {commit})\n", env!("CARGO_PKG_VERSION")));
}
