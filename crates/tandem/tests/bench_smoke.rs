//! Smoke tests of the benchmarks. `bench/vs-slurm.sh`, Tandem's side only (10 jobs, no Slurm
//! needed): the comparison runs end to end through `tandem up` and the `sbatch`/`squeue` shims,
//! and its table has every row with a number. `tandem bench llm`, small: its JSON has every
//! policy with its figures. No timing assertions: the figures belong in BENCHMARKS.md.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn tandem_side_of_the_slurm_comparison_prints_every_row() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("bash")
        .arg(repo.join("bench/vs-slurm.sh"))
        .args([
            "--tandem-only",
            "--jobs",
            "10",
            "--latency-jobs",
            "5",
            "--latency-gap",
            "0.05",
            "--tandem-bin",
            env!("CARGO_BIN_EXE_tandem"),
        ])
        .output()
        .expect("run bench/vs-slurm.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "vs-slurm.sh failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    let rows = [
        "submissions/s, one sbatch loop",
        "submissions/s, 4 parallel sbatch loops",
        "submissions/s, one job array of 10",
        "s, first submission to all 10 completed (one loop)",
        "s, first submission to all 10 completed (4 loops)",
        "s, first submission to all 10 completed (array)",
        "completed jobs/s (array)",
        "ms, submit-to-start latency p50",
        "ms, submit-to-start latency p99",
        "ms, squeue with 10 jobs pending",
        "MiB, controller RSS with 10 jobs pending",
        "MiB, controller peak RSS",
        "CPU ms per job, controller",
        "CPU ms per job, node daemons",
        "CPU ms per job, node side incl. step processes and job",
    ];
    for row in rows {
        let line = stdout.lines().find(|l| l.starts_with(&format!("| {row}"))).unwrap_or_else(|| panic!("no row {row:?} in\n{stdout}"));
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 2, "one Tandem column in {line:?}");
        // The cgroup row may be n/a where cpuacct cannot be written (not root); every other is a number.
        if row.contains("incl. step processes") && cells[1] == "n/a" {
            continue;
        }
        let v: f64 = cells[1].parse().unwrap_or_else(|_| panic!("not a number in {line:?}"));
        assert!(v.is_finite() && v >= 0.0, "{line:?}");
    }
    assert!(
        stdout.contains("## Tandem") && stdout.contains("tandem up --agents 16 --cpus-per-agent 8"),
        "configuration printed:\n{stdout}"
    );
    assert!(stdout.contains("jobs that ended COMPLETED"), "{stdout}");
}

#[test]
fn llm_bench_reports_every_policy_side_by_side() {
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["bench", "llm", "--replicas", "2", "--duration", "3", "--json"])
        .output()
        .expect("run tandem bench llm");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tandem bench llm failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not one JSON object ({e}):\n{stdout}"));
    assert_eq!(v["workload"], "shared-prefix");
    assert!(v["capacity_rps"].as_f64().is_some_and(|c| c > 0.0), "{v}");
    let policies = v["policies"].as_array().expect("a list of policies");
    let names: Vec<&str> = policies.iter().map(|p| p["balance"].as_str().unwrap()).collect();
    assert_eq!(names, ["round_robin", "least_request", "p2c", "llm"]);
    for p in policies {
        for k in ["ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "e2e_p99_ms", "throughput_rps", "cache_hit_rate"] {
            let x = p[k].as_f64().unwrap_or_else(|| panic!("{k} missing in {p}"));
            assert!(x.is_finite() && x >= 0.0, "{k} in {p}");
        }
        assert!(p["requests"].as_u64().is_some_and(|n| n > 0), "{p}");
        assert!(p["shed"].as_u64().is_some() && p["failed"].as_u64().is_some(), "{p}");
    }
    let llm = &policies[3];
    let hit = llm["cache_hit_rate"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&hit), "{llm}");
}

#[test]
fn llm_bench_fairness_reports_both_tenants() {
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["bench", "llm", "--workload", "fairness", "--replicas", "1", "--capacity", "20", "--quiet-requests", "8", "--json"])
        .output()
        .expect("run tandem bench llm --workload fairness");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tandem bench llm --workload fairness failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not one JSON object ({e}):\n{stdout}"));
    assert_eq!(v["workload"], "fairness");
    let rows = v["policies"].as_array().expect("a list of rows");
    let names: Vec<(&str, &str)> = rows.iter().map(|r| (r["tenant"].as_str().unwrap(), r["run"].as_str().unwrap())).collect();
    assert_eq!(names, [("quiet", "alone"), ("quiet", "beside noisy"), ("noisy", "beside quiet")]);
    for r in rows {
        for k in ["ttft_p50_ms", "ttft_p99_ms", "e2e_p99_ms", "queue_wait_mean_ms"] {
            let x = r[k].as_f64().unwrap_or_else(|| panic!("{k} missing in {r}"));
            assert!(x.is_finite() && x >= 0.0, "{k} in {r}");
        }
        assert!(r["shed"].as_u64().is_some() && r["failed"].as_u64().is_some(), "{r}");
    }
    assert_eq!(rows[0]["requests"], 8);
    assert_eq!(rows[1]["requests"], 8);
    assert!(v["quiet_ttft_p99_ratio"].as_f64().is_some_and(|x| x.is_finite() && x >= 0.0), "{v}");
}
