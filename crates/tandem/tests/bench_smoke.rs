//! Smoke test of `bench/vs-slurm.sh`, Tandem's side only (10 jobs, no Slurm needed): the
//! comparison runs end to end through `tandem up` and the `sbatch`/`squeue` shims, and its table
//! has every row with a number. No timing assertions: the figures belong in BENCHMARKS.md.

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
