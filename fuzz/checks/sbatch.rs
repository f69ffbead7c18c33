//! The `sbatch` fuzz check: `slurmcli::parse_sbatch` on a command line and a batch script, and
//! the same command line through the one option parser (`slurmcli::getopt`) of every command.
//!
//! Input: the first line is the command line, its words separated by tabs (or, on a line without
//! a tab, by spaces); the rest of the input is the script file that any script path reads as.
//! Shared by `fuzz_targets/sbatch.rs` and the replay test `crates/slurmcli/tests/fuzz_regressions.rs`
//! (which include this file), so a regression replays exactly what the fuzzer ran.

/// A fixed "now" (2026-09-21), as the caller passes the clock.
const NOW: i64 = 1_790_000_000;

/// Runs one input; panics on a bug.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (line, script) = text.split_once('\n').unwrap_or((text, ""));
    let argv: Vec<String> =
        if line.contains('\t') { line.split('\t').map(String::from).collect() } else { line.split(' ').map(String::from).collect() };
    for cmd in slurmcli::COMMANDS {
        getopt_invariants(cmd, &argv);
    }
    let mut reads = 0;
    let parsed = slurmcli::parse_sbatch(&argv, NOW, &mut |path| {
        reads += 1;
        if path == "missing.sh" { Err(slurmcli::Invalid(format!("Unable to open file {path}"))) } else { Ok(script.to_string()) }
    });
    assert!(reads <= 1, "the script was read {reads} times");
    let Ok(spec) = parsed else { return };
    assert!(!spec.script.contains('\0'), "a script with NUL bytes was accepted");
    if let Some(a) = &spec.array {
        assert!(a.indices.windows(2).all(|w| w[0] < w[1]), "array indices not ascending and unique");
        assert!(a.indices.last().is_none_or(|&i| i < slurmcli::MAX_ARRAY_SIZE_CAP), "array index at or above the cap");
    }
    // What the controller does with it: the shape and the scheduler's request.
    let shape = spec.shape();
    assert!(shape.ntasks >= 1, "no tasks: {shape:?}");
    let req = spec.to_request(1, "alice", NOW, 3600);
    assert!(req.time_limit > 0, "time limit {}", req.time_limit);
    // The client sends it as JSON (wire::SubmitRequest): it must arrive unchanged.
    let json = serde_json::to_string(&spec).expect("a BatchSpec serializes");
    let back: slurmcli::BatchSpec = serde_json::from_str(&json).expect("a BatchSpec deserializes");
    assert_eq!(back, spec, "the JSON round trip changed the spec: {json}");
}

/// What getopt's reading of `argv` must hold, whatever the words: a flag has no value, a required
/// value is there, the words left are the command line's own (a suffix where options end at the
/// first word), and an option's letter or name is in the table.
fn getopt_invariants(cmd: &slurmcli::getopt::Command, argv: &[String]) {
    use slurmcli::getopt::Arg;
    let Ok(p) = slurmcli::getopt::getopt(cmd, argv) else { return };
    for g in p.opts.iter().chain(&p.ignored) {
        match g.opt.arg {
            Arg::None => assert!(g.value.is_none(), "{}: flag {} got a value", cmd.name, g.opt.key),
            Arg::Required => assert!(g.value.is_some(), "{}: {} lost its value", cmd.name, g.opt.key),
            Arg::Optional => {}
        }
        assert!(cmd.find_key(g.key()).is_some(), "{}: {} is not in the table", cmd.name, g.key());
    }
    assert!(p.args.len() <= argv.len(), "{}: more words than given", cmd.name);
    if cmd.order == slurmcli::getopt::Order::RequireOrder && !argv.iter().any(|a| a == "--") {
        assert_eq!(p.args[..], argv[argv.len() - p.args.len()..], "{}: the words after the options changed", cmd.name);
    }
}
