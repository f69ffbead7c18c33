//! Launching a task: what must happen in the child between `fork` and `exec`. The child joins
//! its job's cgroup while still root, then drops to the job's user and group, then becomes the
//! task. Doing this in the forked child (instead of exec'ing a launcher program that does it
//! and execs again) saves one program start per task. Also the one process-wide limit Tandem's
//! daemons raise ([`raise_nofile`]).
//!
//! **Invariant:** this is the only crate with `unsafe` code: one `pre_exec` hook that makes only
//! async-signal-safe system calls and does not allocate.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// What the child does before it becomes the task.
#[derive(Debug)]
pub struct Setup<'a> {
    /// The job cgroup's `cgroup.procs`, opened for writing by the caller; the child writes "0"
    /// to it, which moves the writing process itself (cgroup v1 and v2). It must stay open until
    /// the command is spawned.
    pub cgroup_procs: Option<&'a std::fs::File>,
    /// Switch to this uid and gid (supplementary groups: just the gid).
    pub user: Option<(u32, u32)>,
}

/// Installs `setup` on `cmd`, to run in the child after `fork` and before `exec`. A failure
/// fails the spawn with the system call's error.
pub fn prepare(cmd: &mut Command, setup: &Setup) {
    let fd = setup.cgroup_procs.map(AsRawFd::as_raw_fd);
    let user = setup.user;
    let hook = move || -> std::io::Result<()> {
        use nix::unistd::{Gid, Uid};
        if let Some(fd) = fd {
            // SAFETY: `fd` belongs to the caller's open file, which outlives the spawn.
            #[allow(unsafe_code)]
            let procs = unsafe { BorrowedFd::borrow_raw(fd) };
            nix::unistd::write(procs, b"0")?;
        }
        if let Some((uid, gid)) = user {
            nix::unistd::setgroups(&[Gid::from_raw(gid)])?;
            nix::unistd::setgid(Gid::from_raw(gid))?;
            nix::unistd::setuid(Uid::from_raw(uid))?;
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child, where only async-signal-safe calls are allowed:
    // it makes only the system calls write, setgroups, setgid and setuid, and allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Raises this process's open-file limit: the soft limit to the hard one and, where allowed
/// (root), both to `want` (at most the kernel's `fs.nr_open`), as a controller or a host of many
/// agents at scale needs (one descriptor per connection). Returns the soft limit now in force.
pub fn raise_nofile(want: u64) -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else { return 0 };
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open").ok().and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or(hard);
    let want = want.min(nr_open);
    if want > hard && setrlimit(Resource::RLIMIT_NOFILE, want, want).is_ok() {
        return want;
    }
    if hard > soft && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hook_runs_in_the_child_and_its_failure_fails_the_spawn() {
        // Without root, switching to another uid fails: the spawn reports it.
        let mut cmd = Command::new("true");
        prepare(&mut cmd, &Setup { cgroup_procs: None, user: None });
        assert!(cmd.status().unwrap().success());
        if !nix::unistd::geteuid().is_root() {
            let mut cmd = Command::new("true");
            prepare(&mut cmd, &Setup { cgroup_procs: None, user: Some((0, 0)) });
            assert!(cmd.spawn().is_err());
        }
        // Writing to a file that is not a cgroup's: the child writes "0" to it, then execs.
        let path = std::env::temp_dir().join(format!("exec-test-{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        let mut cmd = Command::new("true");
        prepare(&mut cmd, &Setup { cgroup_procs: Some(&f), user: None });
        assert!(cmd.status().unwrap().success());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "0");
        std::fs::remove_file(path).ok();
    }
}
