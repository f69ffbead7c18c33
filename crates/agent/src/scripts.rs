//! The node's prolog and epilog (Slurm's `Prolog` and `Epilog`): programs the administrator
//! keeps on each node, which the agent runs as its own user (root on a real cluster) around a
//! job's run there: the prolog before the run's first task on the node (its tasks wait for it),
//! the epilog once the run is over on the node and its tasks here are gone. Each gets the job's
//! `SLURM_*` variables from the controller and nothing else of the agent's environment.
//!
//! A failure (a non-zero exit, a signal, the timeout, or a program that may not be run) is
//! Slurm's: the node drains with the reason, and for a prolog the job goes back to the queue.
//! Before it runs a program as root, the agent checks that only root (or the agent's own user)
//! can change it: a regular, executable file owned by one of them, not writable by its group or
//! others, in a directory likewise.

use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;

/// Which of the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Before a run's first task on the node.
    Prolog,
    /// After a run is over on the node.
    Epilog,
    /// The node's health check (`health_check_program`), every `health_check_interval`.
    Health,
    /// The site's reboot program (`scontrol reboot`).
    Reboot,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Prolog => "prolog",
            Kind::Epilog => "epilog",
            Kind::Health => "health check",
            Kind::Reboot => "reboot program",
        }
    }

    /// The reason a failure drains the node with (Slurm's words first).
    pub(crate) fn drain_reason(self, why: &str) -> String {
        match self {
            Kind::Prolog => format!("Prolog error: {why}"),
            Kind::Epilog => format!("Epilog error: {why}"),
            // Tandem's rule: what the check said is the reason (`sinfo -R`).
            Kind::Health => why.to_string(),
            Kind::Reboot => format!("Reboot program error: {why}"),
        }
    }
}

/// A prolog's or epilog's end.
#[derive(Debug)]
pub(crate) struct Done {
    /// Which.
    pub(crate) kind: Kind,
    /// The job's run.
    pub(crate) job: u64,
    /// See `job`.
    pub(crate) epoch: u32,
    /// `Err`: why it failed, in words.
    pub(crate) result: Result<(), String>,
}

/// Most bytes of a failed program's output kept for the reason.
const REASON_BYTES: usize = 200;

/// Whether `path` may be run as the agent's user: root or the agent's own user alone controls
/// it ([`exec::trusted_file`]). Returns the resolved path, which is what is run.
pub(crate) fn check(path: &str) -> Result<std::path::PathBuf, String> {
    exec::trusted_file(path, nix::unistd::geteuid().as_raw(), true)
}

/// Runs `path` for job `job`'s run `epoch` in the background, with `env` only (and a plain
/// `PATH`), in `/`, standard input empty, in a process group of its own, killed whole at
/// `timeout`; its end comes on `done`.
pub(crate) fn spawn(
    kind: Kind,
    path: String,
    job: u64,
    epoch: u32,
    env: Vec<(String, String)>,
    timeout: Option<Duration>,
    done: UnboundedSender<Done>,
) {
    tokio::spawn(async move {
        let result = run(kind, &path, env, timeout).await;
        let _ = done.send(Done { kind, job, epoch, result });
    });
}

/// Most bytes of each of a program's output streams that are read (the rest is discarded).
const OUTPUT_BYTES: usize = 4096;

/// Reads at most [`OUTPUT_BYTES`] of a stream, then drains the rest unread.
async fn read_some(mut r: impl tokio::io::AsyncRead + Unpin) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return out,
            Ok(n) if out.len() < OUTPUT_BYTES => out.extend_from_slice(&buf[..n.min(OUTPUT_BYTES - out.len())]),
            Ok(_) => {}
        }
    }
}

pub(crate) async fn run(kind: Kind, path: &str, env: Vec<(String, String)>, timeout: Option<Duration>) -> Result<(), String> {
    run_status(kind, path, env, timeout).await.map_err(|(why, _)| why)
}

/// A health check's exit code that marks the node down (its jobs fail) instead of draining it.
pub(crate) const DOWN_EXIT: i32 = 2;

/// [`run`], with the exit code of a program that failed by exiting.
pub(crate) async fn run_status(
    kind: Kind,
    path: &str,
    env: Vec<(String, String)>,
    timeout: Option<Duration>,
) -> Result<(), (String, Option<i32>)> {
    let real = check(path).map_err(|e| (e, None))?;
    let mut cmd = tokio::process::Command::new(&real);
    cmd.env_clear()
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .envs(env)
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| (format!("cannot run {path}: {e}"), None))?;
    let pgid = child.id().map(|p| p as i32);
    let kill_group = || {
        if let Some(g) = pgid {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(g), nix::sys::signal::Signal::SIGKILL);
        }
    };
    // Its output is read beside it, a little of each stream; it has ended when it exits, even if
    // something it started in the background still holds the pipes.
    let out = child.stdout.take().map(|o| tokio::spawn(read_some(o)));
    let err = child.stderr.take().map(|e| tokio::spawn(read_some(e)));
    let status = match timeout {
        Some(t) => match tokio::time::timeout(t, child.wait()).await {
            Ok(st) => st,
            Err(_) => {
                kill_group();
                let what = match kind {
                    Kind::Health => "health_check_interval",
                    _ => "prolog_epilog_timeout",
                };
                return Err((format!("{} {path} ran past {what} ({} s) and was killed", kind.name(), t.as_secs()), None));
            }
        },
        None => child.wait().await,
    }
    .map_err(|e| (format!("{} {path}: {e}", kind.name()), None))?;
    // Whatever it left behind in its process group goes with it.
    kill_group();
    let collect = |h: Option<tokio::task::JoinHandle<Vec<u8>>>| async move {
        match h {
            Some(h) => tokio::time::timeout(Duration::from_millis(200), h).await.ok().and_then(Result::ok).unwrap_or_default(),
            None => Vec::new(),
        }
    };
    let (stdout, stderr) = (collect(out).await, collect(err).await);
    if status.success() {
        return Ok(());
    }
    let said = if stderr.iter().any(|b| !b.is_ascii_whitespace()) { &stderr } else { &stdout };
    let said: String = String::from_utf8_lossy(said).chars().filter(|c| !c.is_control() || *c == ' ').take(REASON_BYTES).collect();
    let how = match (status.code(), std::os::unix::process::ExitStatusExt::signal(&status)) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("signal {s}"),
        (None, None) => "an unknown status".into(),
    };
    let said = said.trim();
    let code = status.code();
    if kind == Kind::Health && !said.is_empty() {
        return Err((said.to_string(), code));
    }
    Err((
        if said.is_empty() {
            format!("{} {path} failed with {how}", kind.name())
        } else {
            format!("{} {path} failed with {how}: {said}", kind.name())
        },
        code,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    fn script(dir: &Path, name: &str, body: &str, mode: u32) -> String {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p.display().to_string()
    }

    #[tokio::test]
    async fn a_script_runs_with_its_environment_and_fails_with_its_words() {
        let dir = std::env::temp_dir().join(format!("tandem-scripts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = dir.join("out");
        let ok = script(&dir, "ok", &format!("#!/bin/sh\necho \"$SLURM_JOB_ID $HOME\" > {}\n", out.display()), 0o755);
        let env = vec![("SLURM_JOB_ID".to_string(), "7".to_string())];
        assert_eq!(run(Kind::Prolog, &ok, env.clone(), None).await, Ok(()));
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "7 \n", "the job's variables, nothing of the agent's");
        let bad = script(&dir, "bad", "#!/bin/sh\necho 'no GPU 3\x1b[31m' >&2\nexit 3\n", 0o755);
        let e = run(Kind::Epilog, &bad, env.clone(), None).await.unwrap_err();
        assert!(e.ends_with("failed with exit code 3: no GPU 3[31m"), "{e}");
        let slow = script(&dir, "slow", "#!/bin/sh\nsleep 30 &\nsleep 30\n", 0o755);
        let t = std::time::Instant::now();
        let e = run(Kind::Prolog, &slow, env.clone(), Some(Duration::from_millis(300))).await.unwrap_err();
        assert!(e.contains("prolog_epilog_timeout") && t.elapsed() < Duration::from_secs(10), "{e}");
        // A program that leaves something running in the background has ended when it exits.
        let bg = script(&dir, "bg", "#!/bin/sh\nsleep 30 &\nexit 0\n", 0o755);
        let t = std::time::Instant::now();
        assert_eq!(run(Kind::Prolog, &bg, env.clone(), None).await, Ok(()));
        assert!(t.elapsed() < Duration::from_secs(10));
        let open = script(&dir, "open", "#!/bin/sh\ntrue\n", 0o777);
        assert!(run(Kind::Prolog, &open, env.clone(), None).await.unwrap_err().contains("writable by its group or others"));
        let plain = script(&dir, "plain", "#!/bin/sh\ntrue\n", 0o644);
        assert!(check(&plain).unwrap_err().contains("not executable"));
        assert!(check("relative").unwrap_err().contains("absolute"));
        assert!(check(&dir.join("missing").display().to_string()).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
