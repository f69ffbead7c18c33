//! Launching a task: its script in the spool directory, its output files, its cgroup (cgroup v1
//! memory, where one can be made), and one fork and exec that joins the cgroup and drops to the
//! user in between (the `exec` crate). Also signalling a task's process group. The lower layer of
//! the agent: the node loop (`node`) and the replica supervisor (`replica`) both launch through
//! it; it knows neither.

use anyhow::{Context, Result};
use control::Task;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// cgroup v1 memory hierarchy under the agent's own cgroup, when it can be used.
pub(crate) struct Cgroups {
    base: Option<PathBuf>,
}

impl Cgroups {
    pub(crate) fn detect(name: &str) -> Cgroups {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let rel = own.lines().find_map(|l| {
            let mut p = l.splitn(3, ':');
            let (_, ctrls, path) = (p.next()?, p.next()?, p.next()?);
            ctrls.split(',').any(|c| c == "memory").then(|| path.to_string())
        });
        // One directory per agent process: several agents (a local cluster, tests) may share a
        // node name on one machine, and must not share job cgroups.
        let base = rel.map(|r| {
            PathBuf::from("/sys/fs/cgroup/memory").join(r.trim_start_matches('/')).join(format!("tandem-{name}-{}", std::process::id()))
        });
        match base {
            Some(b) if std::fs::create_dir_all(&b).is_ok() && b.join("memory.limit_in_bytes").exists() => Cgroups { base: Some(b) },
            _ => {
                eprintln!(
                    "tandem agent {name}: no writable cgroup memory controller here; tasks are tracked and killed by process group, without memory limits"
                );
                Cgroups { base: None }
            }
        }
    }

    pub(crate) fn create(&self, job: u64, epoch: u32, limit: u64) -> Option<PathBuf> {
        let base = self.base.as_ref()?;
        let dir = base.join(format!("job_{job}_{epoch}"));
        std::fs::create_dir_all(&dir).ok()?;
        if limit > 0 {
            std::fs::write(dir.join("memory.limit_in_bytes"), limit.to_string()).ok()?;
            let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), limit.to_string());
        }
        Some(dir)
    }

    pub(crate) fn oom(dir: &Path) -> bool {
        let ctl = std::fs::read_to_string(dir.join("memory.oom_control")).unwrap_or_default();
        ctl.lines().any(|l| l.strip_prefix("oom_kill ").is_some_and(|n| n.trim() != "0"))
    }
}

/// Where a task's batch script is kept while it runs: `SPOOL/job_JOB_EPOCH.sh`.
pub(crate) fn script_path(spool: &Path, job: u64, epoch: u32) -> PathBuf {
    spool.join(format!("job_{job}_{epoch}.sh"))
}

/// Writes a batch script where only root and the job's user can read it: a fresh file
/// (created exclusively, never through a link), owned by the user, mode 0500, in the agent's
/// spool directory (root's, 0711: others may not list it). Removed when the task ends.
fn write_script(path: &Path, text: &str, uid: u32, gid: u32) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(text.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
    if nix::unistd::geteuid().is_root() {
        nix::unistd::fchown(&f, Some(nix::unistd::Uid::from_raw(uid)), Some(nix::unistd::Gid::from_raw(gid)))
            .with_context(|| format!("giving {} to uid {uid}", path.display()))?;
    }
    f.set_permissions(std::fs::Permissions::from_mode(0o500))?;
    Ok(())
}

/// A task that could not start, and why, in words for the user (`scontrol show job`).
#[derive(Debug)]
pub(crate) struct LaunchError(pub(crate) String);

impl std::fmt::Display for LaunchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LaunchError {}

fn cstring(what: &str, s: &str) -> Result<std::ffi::CString, LaunchError> {
    std::ffi::CString::new(s).map_err(|_| LaunchError(format!("the {what} {s:?} contains a NUL byte")))
}

/// Starts a task. Its working directory and its output and error files are entered and opened
/// by the child after it has dropped to the job's user (the `exec` crate), never by the agent.
pub(crate) fn launch(t: &Task, spool: &Path, cg: &Cgroups) -> Result<(tokio::process::Child, Option<PathBuf>), LaunchError> {
    let (program, args): (String, Vec<String>) = match &t.script {
        Some(text) => {
            let path = script_path(spool, t.job, t.epoch);
            write_script(&path, text, t.uid, t.gid).map_err(|e| LaunchError(format!("{e:#}")))?;
            (path.display().to_string(), t.argv.clone())
        }
        None => match t.argv.split_first() {
            Some((p, rest)) => (p.clone(), rest.to_vec()),
            None => return Err(LaunchError("empty command".into())),
        },
    };
    let cgroup = cg.create(t.job, t.epoch, t.mem_limit);
    // The child joins the job's cgroup while still root, then drops to the user, then enters
    // the working directory and opens its files, then becomes the task: all between fork and
    // exec, with system calls only (no exec of a launcher).
    let procs = match &cgroup {
        Some(p) => Some(
            std::fs::OpenOptions::new()
                .write(true)
                .open(p.join("cgroup.procs"))
                .map_err(|e| LaunchError(format!("joining cgroup {}: {e}", p.display())))?,
        ),
        None => None,
    };
    let user = (nix::unistd::geteuid().is_root() && t.uid != 0).then(|| exec::User::lookup(t.uid, t.gid));
    let setup = exec::Setup {
        cgroup_procs: procs.as_ref(),
        user,
        workdir: Some(cstring("working directory", &t.workdir)?),
        stdout: Some(cstring("output file", &t.stdout)?),
        stderr: if t.stderr == t.stdout { None } else { Some(cstring("error file", &t.stderr)?) },
    };
    let mut cmd = tokio::process::Command::new(&program);
    let mut report = exec::prepare(cmd.as_std_mut(), setup).map_err(|e| LaunchError(format!("preparing the launch: {e}")))?;
    cmd.args(&args)
        .env_clear()
        .envs(t.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    cmd.process_group(0);
    match cmd.spawn() {
        Ok(child) => Ok((child, cgroup)),
        Err(e) => {
            if let Some(dir) = &cgroup {
                let _ = std::fs::remove_dir(dir);
            }
            let e = e.to_string();
            let e = e.split(" (os error").next().unwrap_or(&e);
            Err(LaunchError(match report.failed() {
                Some(exec::Stage::Cgroup) => format!("cannot join the job's cgroup: {e}"),
                Some(exec::Stage::User) => format!("cannot switch to uid {}: {e}", t.uid),
                Some(exec::Stage::Workdir) => format!("cannot enter the working directory {} as uid {}: {e}", t.workdir, t.uid),
                Some(exec::Stage::Stdout) => format!("cannot open the output file {} as uid {}: {e}", t.stdout, t.uid),
                Some(exec::Stage::Stderr) => format!("cannot open the error file {} as uid {}: {e}", t.stderr, t.uid),
                None => format!("cannot run {program}: {e}"),
            }))
        }
    }
}

pub(crate) fn kill_group(pgid: i32, sig: Signal) {
    if pgid <= 0 {
        return;
    }
    let _ = killpg(Pid::from_raw(pgid), sig);
}
