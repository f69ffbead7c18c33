//! The fault-injection harness in the suite: `tandem bench chaos` with fixed seeds (each a
//! schedule of faults that once found a defect, or covers every kind of fault), short runs.
//! It needs root, network namespaces, iptables and flock: under `CI=true` their absence fails
//! the test; elsewhere it is skipped with a note.

mod common;

use common::*;
use std::process::Command;

fn can_run() -> Result<(), String> {
    if !is_root() {
        return Err("not root".into());
    }
    if let Some(tool) = ["ip", "iptables", "flock"].into_iter().find(|t| !have(t)) {
        return Err(format!("{tool} is missing"));
    }
    let probe = format!("tandem-probe-{}", std::process::id());
    let made = Command::new("ip").args(["netns", "add", &probe]).status().is_ok_and(|s| s.success());
    let _ = Command::new("ip").args(["netns", "del", &probe]).status();
    if !made { Err("cannot make a network namespace".into()) } else { Ok(()) }
}

#[test]
fn regression_seeds_hold_every_invariant() {
    if let Err(why) = can_run() {
        assert!(std::env::var("CI").is_err(), "the chaos harness cannot run under CI=true: {why}");
        eprintln!("skipped: the chaos harness needs root, network namespaces, iptables and flock ({why})");
        return;
    }
    // (seed, seconds of faults) (`tandem bench chaos --seed N --duration 60 --plan` prints a
    // schedule): seed 17 a controller crash at a failpoint, the controller's disk full, an
    // agent killed alone, a task killed, a one-way partition; seed 13 agents killed alone and
    // with their tasks, the controller killed; seed 6 the controller's disk full for longer
    // than the lease (every node fenced its work before heartbeats renewed leases while the
    // controller could not save). (A partition both ways: tests/faults.rs.)
    for (seed, secs) in [(17u64, 60u32), (13, 60), (6, 60)] {
        let o = Command::new(bin())
            .args(["bench", "chaos", "--seed", &seed.to_string(), "--duration", &secs.to_string(), "--agents", "3", "--json"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        let r: serde_json::Value = serde_json::from_str(text.trim())
            .unwrap_or_else(|e| panic!("seed {seed}: no report ({e}):\n{text}\n{}", String::from_utf8_lossy(&o.stderr)));
        eprintln!(
            "chaos seed {seed}: faults {}, {} jobs, {} runs, {} requests ({} failed), violations {}",
            r["faults"], r["jobs"], r["runs"], r["requests"], r["requests_failed"], r["violations"]
        );
        assert!(o.status.success() && r["violations"].as_array().is_some_and(|v| v.is_empty()), "seed {seed}: {r:#}");
        assert!(r["runs"].as_u64().unwrap() > 0 && r["requests"].as_u64().unwrap() > 0, "seed {seed}: {r:#}");
    }
}

#[test]
fn an_etcd_seed_holds_every_invariant_across_controller_failovers() {
    if let Err(why) = can_run() {
        assert!(std::env::var("CI").is_err(), "the chaos harness cannot run under CI=true: {why}");
        eprintln!("skipped: the chaos harness needs root, network namespaces, iptables and flock ({why})");
        return;
    }
    if !have("etcd") {
        assert!(std::env::var("CI").is_err(), "etcd is not installed (.ci/run installs Debian's etcd-server)");
        eprintln!("skipped: no etcd (apt-get install etcd-server)");
        return;
    }
    // Seed 9 with etcd: an agent killed with its tasks, the leading controller killed (the
    // standby takes over), an etcd member killed, and the leader cut off from etcd (it steps
    // down; the other takes over).
    let o = Command::new(bin())
        .args(["bench", "chaos", "--seed", "9", "--duration", "60", "--agents", "3", "--etcd", "--json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let r: serde_json::Value =
        serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("no report ({e}):\n{text}\n{}", String::from_utf8_lossy(&o.stderr)));
    eprintln!(
        "chaos seed 9 on etcd: faults {}, {} jobs, {} runs, {} requests ({} failed), leaderships {}, cut leader stepped down after {} s, violations {}",
        r["faults"], r["jobs"], r["runs"], r["requests"], r["requests_failed"], r["leaderships"], r["cut_step_down_s"], r["violations"]
    );
    assert!(o.status.success() && r["violations"].as_array().is_some_and(|v| v.is_empty()), "{r:#}");
    assert_eq!(r["store"], "etcd", "{r:#}");
    assert_eq!(r["leaderships"], 3, "the first leader, the one after the kill, the one after the cut: {r:#}");
    assert_eq!(r["cut_step_down_s"].as_array().map(Vec::len), Some(1), "{r:#}");
    assert!(r["runs"].as_u64().unwrap() > 0 && r["requests"].as_u64().unwrap() > 0 && r["requests_failed"] == 0, "{r:#}");
}

#[test]
fn bad_arguments_are_refused_with_what_to_fix_and_a_plan_needs_nothing() {
    for bad in [&["--agents", "1"][..], &["--agents", "51"], &["--lease", "2"], &["--duration", "0"], &["--duration=-5"]] {
        let o = Command::new(bin()).args(["bench", "chaos"]).args(bad).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("--agents must be 2 to 50, --lease at least 3"), "{bad:?}: {err}");
    }
    for bad in ["/nonexistent/tandem", "/etc/passwd"] {
        let o = Command::new(bin()).args(["bench", "chaos", "--daemons", bad]).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("not a tandem binary that runs here"), "{bad}: {err}");
    }
    let o = Command::new(bin()).args(["bench", "chaos", "--agents", "nine"]).output().unwrap();
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("invalid value 'nine'"));
    // The schedule alone: the same for a seed, run nothing (no root needed).
    let plan = |seed: &str| Command::new(bin()).args(["bench", "chaos", "--seed", seed, "--duration", "60", "--plan"]).output().unwrap();
    let (a, b) = (plan("3"), plan("3"));
    assert!(a.status.success() && !a.stdout.is_empty() && a.stdout == b.stdout, "{}", String::from_utf8_lossy(&a.stderr));
    assert_ne!(a.stdout, plan("4").stdout);
}
