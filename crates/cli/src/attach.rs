//! `sattach JOBID.STEPID`: attaches to a running `srun` step's I/O, as Slurm's does. It
//! listens as `srun` does (TLS with a CA of its own, a key of its own), asks the controller to
//! attach it (`POST /v1/jobs/{id}/steps/{step}/attach`: the step's owner or root only), and
//! the step's agents connect to it: it prints the tasks' recent output (the last 128 frames
//! each, as slurmstepd's cache) and then what comes, passes its standard input on, and ends
//! when the tasks' streams end (with the step's exit code) or, detaching and leaving the step
//! running, on SIGINT, SIGTERM, SIGQUIT or SIGHUP.

use crate::srun::{Shared, State, accept, advertised, lock, pass_input};
use anyhow::{Context, Result, bail};
use client::stepio;
use client::{Target, send};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wire::{JobInfo, StepResponse};

const USAGE: &str =
    "Usage: sattach [--error-filter=TASK] [--input-filter=TASK] [--output-filter=TASK] [-l] [--layout] [-Q] [-v] JOBID.STEPID";

/// What the command line asks.
#[derive(Debug, Default, PartialEq, Eq)]
struct Opts {
    job: u64,
    step: u32,
    label: bool,
    layout: bool,
    input: Option<u32>,
    output: Option<u32>,
    error: Option<u32>,
    quiet: bool,
}

/// Parses `sattach`'s arguments; `Ok(None)`: help was printed.
fn parse(args: &[String]) -> Result<Option<Opts>> {
    let mut o = Opts::default();
    let task = |flag: &str, v: Option<&String>| -> Result<u32> {
        let v = v.with_context(|| format!("option '{flag}' requires an argument\n{USAGE}"))?;
        v.trim().parse::<u32>().map_err(|_| anyhow::anyhow!("{flag}: invalid task number {v:?}: want a task number such as 0"))
    };
    let (p, _) = crate::common::parse_env("sattach", args)?;
    for g in &p.opts {
        let flag = format!("--{}", g.key());
        match g.key() {
            "input-filter" => o.input = Some(task(&flag, g.value.as_ref())?),
            "output-filter" => o.output = Some(task(&flag, g.value.as_ref())?),
            "error-filter" => o.error = Some(task(&flag, g.value.as_ref())?),
            "label" => o.label = true,
            "layout" => o.layout = true,
            "quiet" => o.quiet = true,
            "verbose" => {}
            "help" | "usage" => {
                println!("{USAGE}");
                return Ok(None);
            }
            "version" => {
                crate::query::version()?;
                return Ok(None);
            }
            "pty" => bail!("--pty is not supported: a step started with srun --pty cannot be attached"),
            other => unreachable!("sattach's table and its reader disagree on {other}"),
        }
    }
    let id = match p.args.as_slice() {
        [] => None,
        [one] => Some(one.as_str()),
        [_, more, ..] => bail!("more than one job step given: {more:?}\n{USAGE}"),
    };
    let Some(id) = id else { bail!("you must specify a job step: JOBID.STEPID\n{USAGE}") };
    let (j, s) =
        id.split_once('.').with_context(|| format!("invalid job step {id:?}: want JOBID.STEPID (sattach attaches to one step)"))?;
    o.job = j.parse().map_err(|_| anyhow::anyhow!("invalid job id {j:?} in {id:?}"))?;
    o.step = match s {
        "batch" | "extern" => bail!("cannot attach to the {s} step: its output goes to files"),
        s => s.parse().map_err(|_| anyhow::anyhow!("invalid step id {s:?} in {id:?}"))?,
    };
    Ok(Some(o))
}

/// Slurm's `--layout` text.
fn layout_text(layout: &[(String, u32)]) -> String {
    let tasks: u32 = layout.iter().map(|(_, n)| n).sum();
    let names: Vec<String> = layout.iter().map(|(n, _)| n.clone()).collect();
    let mut out = format!("Job step layout:\n\t{tasks} tasks, {} nodes ({})\n\n", layout.len(), slurmcli::compress(&names));
    let mut rank = 0;
    for (i, (name, n)) in layout.iter().enumerate() {
        out.push_str(&format!("\tNode {i} ({name}), {n} task(s): "));
        for _ in 0..*n {
            out.push_str(&format!("{rank} "));
            rank += 1;
        }
        out.push('\n');
    }
    out
}

/// `sattach`.
pub(crate) fn sattach(args: &[String]) -> Result<i32> {
    let Some(o) = parse(args)? else { return Ok(0) };
    let t = Target::from_env()?;
    let name = format!("{}.{}", o.job, o.step);
    let j: JobInfo =
        crate::query::get(&t, &format!("/v1/jobs/{}", o.job)).with_context(|| format!("Could not get job step info for {name}"))?;
    let Some(s) = j.steps.iter().find(|s| s.id == o.step.to_string()) else {
        bail!("Could not get job step info: invalid job step specified: {name}");
    };
    if o.layout {
        print!("{}", layout_text(&s.layout));
        return Ok(0);
    }
    if s.done {
        bail!("job step {name} has already finished");
    }
    // A task whose agent closes as sattach sends it input must not kill sattach.
    exec::ignore_sigpipe();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let id = stepio::identity().map_err(|e| anyhow::anyhow!("{e}"))?;
    let key = stepio::new_key();
    let ip = advertised(&t);
    let listener = rt.block_on(tokio::net::TcpListener::bind((ip, 0))).with_context(|| format!("listening on {ip}"))?;
    let io = wire::StepIo {
        addr: listener.local_addr()?.to_string(),
        cert: id.ca_pem.clone(),
        key: key.clone(),
        stdin: o.input.map_or(wire::StdinTo::All, wire::StdinTo::Rank),
        stdout: true,
        stderr: true,
        ..wire::StepIo::default()
    };
    let path = format!("/v1/jobs/{}/steps/{}/attach", o.job, o.step);
    let r: StepResponse = rt.block_on(send(&t, "POST", &path, Some(&io), &[]))?.json()?;
    let total: u32 = r.layout.iter().map(|(_, n)| n).sum();
    if o.input.is_some_and(|i| i >= total) || o.output.is_some_and(|i| i >= total) || o.error.is_some_and(|i| i >= total) {
        bail!("a task filter names a task the step does not have (tasks 0 to {})", total.saturating_sub(1));
    }
    let (kill, _unused) = tokio::sync::mpsc::unbounded_channel();
    let state: State = Arc::new(Mutex::new(Shared {
        job: o.job,
        step: o.step,
        key,
        total,
        label: o.label,
        unbuffered: false,
        conns: HashMap::new(),
        finished: BTreeSet::new(),
        ended: std::sync::Arc::new(tokio::sync::Notify::new()),
        partial: HashMap::new(),
        pmi: None,
        kill,
        filter: [o.output, o.error],
    }));
    accept(&rt, listener, &id, &state);
    let readers = o.input.map_or_else(|| (0..total).collect(), |r| vec![r]);
    pass_input(state.clone(), readers, None, rt.handle().clone());
    let (job, step) = (o.job, o.step.to_string());
    rt.block_on(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let mut sigs = Vec::new();
        for k in [SignalKind::interrupt(), SignalKind::terminate(), SignalKind::quit(), SignalKind::hangup()] {
            sigs.push(signal(k)?);
        }
        let (detach_tx, mut detach) = tokio::sync::mpsc::unbounded_channel::<()>();
        for mut s in sigs {
            let tx = detach_tx.clone();
            tokio::spawn(async move {
                if s.recv().await.is_some() {
                    let _ = tx.send(());
                }
            });
        }
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        let mut polled = Instant::now();
        let mut done_at: Option<(Instant, i32)> = None;
        loop {
            tokio::select! {
                _ = detach.recv() => {
                    if !o.quiet {
                        eprintln!("sattach: detaching from {name}; the step goes on");
                    }
                    return Ok::<i32, anyhow::Error>(0);
                }
                _ = tick.tick() => {
                    let all_in = lock(&state).finished.len() as u32 >= total;
                    if let Some((at, code)) = done_at {
                        let quiet = lock(&state).conns.is_empty() && at.elapsed() > Duration::from_secs(2);
                        if all_in || quiet || at.elapsed() > Duration::from_secs(30) {
                            return Ok(code);
                        }
                        continue;
                    }
                    if !all_in && polled.elapsed() < Duration::from_secs(1) {
                        continue;
                    }
                    polled = Instant::now();
                    let Ok(j) = send(&t, "GET", &format!("/v1/jobs/{job}"), None::<&()>, &[]).await.and_then(|r| r.json::<JobInfo>()) else {
                        continue;
                    };
                    match j.steps.iter().find(|s| s.id == step) {
                        Some(s) if s.done => done_at = Some((Instant::now(), s.exit_code.clamp(0, 255))),
                        Some(_) if j.running() => {}
                        _ => done_at = Some((Instant::now(), 0)),
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_as_slurms_and_bad_ones_refused_with_why() {
        let o = parse(&args(&["-l", "--output-filter=1", "--input-filter", "0", "12.3"])).unwrap().unwrap();
        assert_eq!(o, Opts { job: 12, step: 3, label: true, input: Some(0), output: Some(1), ..Opts::default() });
        assert!(parse(&args(&["--layout", "5.0"])).unwrap().unwrap().layout);
        for (bad, why) in [
            (vec!["12"], "want JOBID.STEPID"),
            (vec![], "you must specify a job step"),
            (vec!["x.0"], "invalid job id"),
            (vec!["12.x"], "invalid step id"),
            (vec!["12.batch"], "batch step"),
            (vec!["--output-filter=-1", "1.0"], "invalid task number"),
            (vec!["--error-filter"], "requires an argument"),
            (vec!["--pty", "1.0"], "--pty is not supported"),
            (vec!["--bogus", "1.0"], "unrecognized option"),
            (vec!["1.0", "2.0"], "more than one job step"),
        ] {
            let e = parse(&args(&bad)).unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        assert_eq!(parse(&args(&["--help"])).unwrap(), None);
    }

    #[test]
    fn layout_as_slurm_prints_it() {
        let l = vec![("node1".to_string(), 2), ("node2".to_string(), 1)];
        assert_eq!(
            layout_text(&l),
            "Job step layout:\n\t3 tasks, 2 nodes (node[1-2])\n\n\tNode 0 (node1), 2 task(s): 0 1 \n\tNode 1 (node2), 1 task(s): 2 \n"
        );
    }
}
