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

fn open_append(path: &str, uid: u32, gid: u32) -> std::io::Result<std::fs::File> {
    let f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    if nix::unistd::geteuid().is_root() {
        let _ = nix::unistd::chown(path, Some(nix::unistd::Uid::from_raw(uid)), Some(nix::unistd::Gid::from_raw(gid)));
    }
    Ok(f)
}

pub(crate) fn launch(t: &Task, spool: &Path, cg: &Cgroups) -> Result<(tokio::process::Child, Option<PathBuf>)> {
    let (program, args): (String, Vec<String>) = match &t.script {
        Some(text) => {
            let path = spool.join(format!("job_{}_{}.sh", t.job, t.epoch));
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
            (path.display().to_string(), t.argv.clone())
        }
        None => (t.argv.first().cloned().context("empty command")?, t.argv[1..].to_vec()),
    };
    let out = open_append(&t.stdout, t.uid, t.gid).with_context(|| format!("cannot open output file {}", t.stdout))?;
    let err = if t.stderr == t.stdout {
        out.try_clone()?
    } else {
        open_append(&t.stderr, t.uid, t.gid).with_context(|| format!("cannot open error file {}", t.stderr))?
    };
    let cgroup = cg.create(t.job, t.epoch, t.mem_limit);
    // The child joins the job's cgroup while still root, then drops to the user, then becomes
    // the task: all between fork and exec, with system calls only (no exec of a launcher).
    let procs = match &cgroup {
        Some(p) => Some(
            std::fs::OpenOptions::new()
                .write(true)
                .open(p.join("cgroup.procs"))
                .with_context(|| format!("joining cgroup {}", p.display()))?,
        ),
        None => None,
    };
    let user = (nix::unistd::geteuid().is_root() && t.uid != 0).then_some((t.uid, t.gid));
    let mut cmd = tokio::process::Command::new(&program);
    exec::prepare(cmd.as_std_mut(), &exec::Setup { cgroup_procs: procs.as_ref(), user });
    cmd.args(&args)
        .env_clear()
        .envs(t.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err);
    cmd.current_dir(if Path::new(&t.workdir).is_dir() { t.workdir.as_str() } else { "/" });
    cmd.process_group(0);
    let child = cmd.spawn().with_context(|| format!("cannot run {program}"))?;
    Ok((child, cgroup))
}

pub(crate) fn kill_group(pgid: i32, sig: Signal) {
    if pgid <= 0 {
        return;
    }
    let _ = killpg(Pid::from_raw(pgid), sig);
}
