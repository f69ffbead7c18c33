//! Slurm's `TaskProlog` and `TaskEpilog` (`task_prolog`, `task_epilog` in `tandem.toml`): the
//! site's programs run as the job's user around each task. Where either is set, the agent starts
//! a task through `tandem __task-wrap`, which starts as the task would (the launch has already
//! joined the job's cgroup, dropped to the user, entered the working directory and opened the
//! output files), runs the task prolog with the task's environment, takes its `export
//! NAME=value`, `unset NAME` and `print TEXT` lines as Slurm's slurmstepd does, then becomes the
//! task with one exec; with a task epilog it starts the task as its child instead, passes it the
//! signals it gets, runs the epilog once the task has ended, and ends as the task did.
//!
//! The programs are checked as the node's prolog is (root's alone, up every directory): a
//! program the user could change is refused, and the task fails with the reason on its error
//! stream, as it does when the task prolog fails.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The hidden subcommand that runs a task between its task prolog and epilog.
pub const TASK_WRAP_CMD: &str = "__task-wrap";

/// Most bytes of the task prolog's output that are read.
const OUTPUT_BYTES: usize = 64 * 1024;

/// The arguments the agent gives: `PROLOG EPILOG TIMEOUT_S TRUSTED_UID -- PROGRAM ARGS...`
/// (`-` for a program not set).
pub fn args_for(prolog: Option<&str>, epilog: Option<&str>, timeout_s: u64, program: String, args: Vec<String>) -> Vec<String> {
    let mut a = vec![
        TASK_WRAP_CMD.to_string(),
        prolog.unwrap_or("-").to_string(),
        epilog.unwrap_or("-").to_string(),
        timeout_s.to_string(),
        nix::unistd::geteuid().as_raw().to_string(),
        "--".to_string(),
        program,
    ];
    a.extend(args);
    a
}

/// Runs the task between its task prolog and epilog; returns the exit code to leave with.
pub fn main(args: &[String]) -> i32 {
    let [prolog, epilog, timeout, trusted, dashes, program, rest @ ..] = args else {
        eprintln!("tandem {TASK_WRAP_CMD}: usage: tandem {TASK_WRAP_CMD} PROLOG EPILOG TIMEOUT_S TRUSTED_UID -- PROGRAM [ARGS...]");
        return 2;
    };
    if dashes != "--" {
        eprintln!("tandem {TASK_WRAP_CMD}: usage: ... -- PROGRAM [ARGS...]");
        return 2;
    }
    let timeout = Duration::from_secs(timeout.parse::<u64>().unwrap_or(0).clamp(1, 86_400));
    let trusted: u32 = trusted.parse().unwrap_or(0);
    let mut env: Vec<(String, String)> =
        std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect();
    if prolog != "-" {
        let out = match checked(prolog, trusted).and_then(|p| run(&p, &env, timeout, true)) {
            Ok(out) => out,
            Err(why) => {
                eprintln!("slurmstepd: error: task prolog {prolog}: {why}");
                return 1;
            }
        };
        apply(&out, &mut env);
    }
    let mut cmd = Command::new(program);
    cmd.args(rest).env_clear().envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    if epilog == "-" {
        let e = cmd.exec();
        eprintln!("slurmstepd: error: cannot run {program}: {e}");
        return 127;
    }
    // With an epilog: the task is a child. The signals a job's tasks get are sent to their
    // process group, so the task gets them itself; the wrapper lives on through them (they are
    // taken here) to run the epilog after the task.
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("slurmstepd: error: cannot run {program}: {e}");
            return 127;
        }
    };
    let status = match outlive_signals(|| child.wait()).and_then(|r| r) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("slurmstepd: error: waiting for {program}: {e}");
            return 1;
        }
    };
    if let Err(why) = checked(epilog, trusted).and_then(|p| run(&p, &env, timeout, false)) {
        eprintln!("slurmstepd: error: task epilog {epilog}: {why}");
    }
    // As the task ended (one killed by a signal: 128 + its number, as a shell reports it).
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    }
}

/// Runs `wait` while the signals meant for the job's tasks (`TERM`, `INT`, `HUP`, `QUIT`,
/// `USR1`, `USR2`, `ALRM`) are taken and dropped, so that they do not end the wrapper.
fn outlive_signals<T>(wait: impl FnOnce() -> T) -> std::io::Result<T> {
    use tokio::signal::unix::{SignalKind, signal};
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
    let _guard = rt.enter();
    let kinds = [
        SignalKind::terminate(),
        SignalKind::interrupt(),
        SignalKind::hangup(),
        SignalKind::quit(),
        SignalKind::user_defined1(),
        SignalKind::user_defined2(),
        SignalKind::alarm(),
    ];
    let _taken: Vec<_> = kinds.into_iter().filter_map(|k| signal(k).ok()).collect();
    Ok(wait())
}

/// The program at `path` if root (or the agent's user, `trusted`) alone controls it, as the
/// node's prolog must be.
fn checked(path: &str, trusted: u32) -> Result<PathBuf, String> {
    exec::trusted_file(path, trusted, true)
}

/// Runs `path` with `env`, bounded by `timeout`; returns its output when `read` (the task
/// prolog's), or nothing. Its error stream is the task's.
fn run(path: &Path, env: &[(String, String)], timeout: Duration, read: bool) -> Result<Vec<u8>, String> {
    let mut child = Command::new(path)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(if read { Stdio::piped() } else { Stdio::null() })
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run it: {e}"))?;
    let reader = child.stdout.take().map(|mut o| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = (&mut o).take(OUTPUT_BYTES as u64).read_to_end(&mut buf);
            let _ = std::io::copy(&mut o, &mut std::io::sink());
            buf
        })
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL);
                let _ = child.wait();
                return Err(format!("ran past {} s and was killed", timeout.as_secs()));
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL);
    let out = reader.and_then(|r| r.join().ok()).unwrap_or_default();
    match (status.code(), status.signal()) {
        (Some(0), _) => Ok(out),
        (Some(c), _) => Err(format!("failed with exit code {c}")),
        (None, Some(s)) => Err(format!("was killed by signal {s}")),
        (None, None) => Err("failed".into()),
    }
}

/// Applies a task prolog's lines to the task's environment, as Slurm's slurmstepd reads them:
/// `export NAME=value`, `unset NAME`, `print TEXT` (to the task's output); anything else is
/// ignored.
fn apply(out: &[u8], env: &mut Vec<(String, String)>) {
    let text = String::from_utf8_lossy(out);
    for line in text.lines() {
        let line = line.trim_start();
        if let Some(rest) = line.strip_prefix("export ") {
            let Some((k, v)) = rest.trim().split_once('=') else { continue };
            if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || v.contains('\0') {
                continue;
            }
            let v = v.to_string();
            match env.iter_mut().find(|(n, _)| n == k) {
                Some(slot) => slot.1 = v,
                None => env.push((k.to_string(), v)),
            }
        } else if let Some(k) = line.strip_prefix("unset ") {
            let k = k.trim();
            env.retain(|(n, _)| n != k);
        } else if let Some(t) = line.strip_prefix("print ") {
            println!("{t}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_prologs_lines_are_read_as_slurmstepd_reads_them() {
        let mut env = vec![("A".to_string(), "1".to_string()), ("B".to_string(), "2".to_string())];
        apply(b"export A=10\nexport NEW=x=y\nunset B\nexport bad-name=1\nexport NOEQ\nignored line\n  export SPACED=ok\n", &mut env);
        assert_eq!(env, vec![("A".into(), "10".into()), ("NEW".into(), "x=y".into()), ("SPACED".into(), "ok".into())]);
    }
}
