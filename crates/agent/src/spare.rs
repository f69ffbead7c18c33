//! Emptied cgroup v1 directories kept for the next run. Making a cgroup and removing it are
//! among the dearest system calls a short task costs its agent (`mkdir` and `rmdir` of a memory
//! cgroup allocate and free the kernel's per-CPU counters, and its freezer's: together about
//! 0.15 ms a run, a third of the agent's CPU for trivial jobs). cgroup v1 lets a directory be
//! renamed within its parent, so a run's cgroup that ended empty and clean is renamed to
//! `spare_N` beside the runs' `job_J_E`, and the next run's is that spare renamed. At most
//! [`KEPT`] are kept per hierarchy; the rest are removed as before. cgroup v2 refuses the rename:
//! there every run's cgroups are made and removed.
//!
//! A directory is kept only when nothing of its run can reach the next one: no process is left
//! in it (`cgroup.procs` is empty), nothing was made below it, and what its hierarchy holds is
//! reset by the next run or was never changed ([`Spares::keep`]'s caller checks its own
//! controller: the memory cgroup's OOM count is 0 and its charge small, the freezer thawed).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// How many spares a hierarchy keeps per agent: enough for a burst of short runs ending
/// together on one node, little kernel memory.
pub(crate) const KEPT: usize = 32;

/// A cgroup v1 hierarchy's spares, in the agent's own directory of it.
pub(crate) struct Spares {
    /// The agent's directory, where the runs' cgroups are made, held open (`None`: none are
    /// kept).
    parent: Option<crate::kfile::Dir>,
    pool: Mutex<Pool>,
}

#[derive(Default)]
struct Pool {
    /// Spares' names, each with the memory limit it was left with (0: none).
    free: Vec<(String, u64)>,
    /// The number of the next spare's name.
    next: u64,
}

/// What [`Spares::take`] gave.
#[derive(Debug, PartialEq)]
pub(crate) enum Taken {
    /// A spare, now the run's directory, with the memory limit it was left with (0: none).
    Spare { dir: PathBuf, limit: u64 },
    /// The run's directory is there already (another of its tasks made it): the spare stays.
    Exists(PathBuf),
}

impl Spares {
    /// Nothing kept (cgroup v2, or no hierarchy).
    pub(crate) fn off() -> Spares {
        Spares { parent: None, pool: Mutex::new(Pool::default()) }
    }

    /// Spares kept in `parent`, the agent's directory of a cgroup v1 hierarchy (none where it
    /// cannot be opened).
    pub(crate) fn in_dir(parent: PathBuf) -> Spares {
        Spares { parent: crate::kfile::Dir::open(parent).ok(), pool: Mutex::new(Pool::default()) }
    }

    /// The agent's directory, held open: the runs' cgroups' files are looked up from it.
    pub(crate) fn dir(&self) -> Option<&crate::kfile::Dir> {
        self.parent.as_ref()
    }

    /// How many are kept now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.pool.lock().expect("spares").free.len()
    }

    /// The run's directory `name` made from a spare (renamed); `None` where there is no spare
    /// or the rename failed (the caller makes the directory).
    pub(crate) fn take(&self, name: &str) -> Option<Taken> {
        let parent = self.parent.as_ref()?;
        let mut pool = self.pool.lock().expect("spares");
        let (spare, limit) = pool.free.pop()?;
        let dir = parent.path().join(name);
        match parent.rename(&spare, name) {
            Ok(()) => Some(Taken::Spare { dir, limit }),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                pool.free.push((spare, limit));
                Some(Taken::Exists(dir))
            }
            Err(e) => {
                let spare = parent.path().join(spare);
                tracing::debug!("reusing the cgroup {}: {e}", spare.display());
                let _ = std::fs::remove_dir(&spare);
                None
            }
        }
    }

    /// Keeps `dir`, a run's cgroup directory that ended with the memory limit `limit`, as a
    /// spare where there is room, it is in the agent's directory, no process is left in it and
    /// `clean` says its controller's state may pass to another run. `false`: not kept (the
    /// caller removes it).
    pub(crate) fn keep(&self, dir: &Path, limit: u64, clean: impl FnOnce(&Path) -> bool) -> bool {
        let Some(parent) = self.parent.as_ref() else { return false };
        let mut pool = self.pool.lock().expect("spares");
        let name = dir.file_name().and_then(|n| n.to_str());
        let Some(name) = name.filter(|_| dir.parent() == Some(parent.path()) && pool.free.len() < KEPT) else { return false };
        // Empty: the file reads as nothing (one that cannot be read is not kept).
        if !crate::kfile::read(Some(parent), &dir.join("cgroup.procs")).is_ok_and(|p| p.is_empty()) || !clean(dir) {
            return false;
        }
        let spare = format!("spare_{}", pool.next);
        pool.next += 1;
        match parent.rename(name, &spare) {
            Ok(()) => {
                pool.free.push((spare, limit));
                true
            }
            Err(_) => false,
        }
    }
}

impl Drop for Spares {
    /// An agent that ends removes its spares (one killed leaves them to [`sweep`]).
    fn drop(&mut self) {
        if let (Some(parent), Ok(pool)) = (&self.parent, self.pool.get_mut()) {
            for (spare, _) in pool.free.drain(..) {
                let _ = std::fs::remove_dir(parent.path().join(spare));
            }
        }
    }
}

/// Whether `name` is a spare's.
pub(crate) fn is_spare(name: &str) -> bool {
    name.strip_prefix("spare_").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The directories that agents now gone left in `hierarchy_dir`: each `tandem-NAME-PID` whose
/// process no longer exists.
pub(crate) fn gone_agents(hierarchy_dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(hierarchy_dir) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name.strip_prefix("tandem-").and_then(|r| r.rsplit_once('-')).and_then(|(_, p)| p.parse::<u32>().ok());
            pid.is_some_and(|pid| pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists())
        })
        .map(|e| e.path())
        .collect()
}

/// Removes the spares that agents now gone left in `hierarchy_dir` ([`gone_agents`]), and each
/// such directory that is then empty. Runs' cgroups stay (a restarted agent reads an ended
/// task's OOM count from its).
pub(crate) fn sweep(hierarchy_dir: &Path) {
    for dir in gone_agents(hierarchy_dir) {
        let Ok(inside) = std::fs::read_dir(&dir) else { continue };
        for s in inside.flatten() {
            if is_spare(&s.file_name().to_string_lossy()) {
                let _ = std::fs::remove_dir(s.path());
            }
        }
        let _ = std::fs::remove_dir(&dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of the v1 `hierarchy` this test may use, or `None` (skipped: not root, or no
    /// such hierarchy here).
    fn v1_dir(hierarchy: &str, tag: &str) -> Option<PathBuf> {
        let d = PathBuf::from("/sys/fs/cgroup").join(hierarchy).join(format!("tandem-spare-{tag}-{}", std::process::id()));
        let ok = nix::unistd::geteuid().is_root() && std::fs::create_dir_all(&d).is_ok() && d.join("cgroup.procs").exists();
        if !ok {
            let _ = std::fs::remove_dir(&d);
            eprintln!("skipped: {} cannot be made here (needs root and cgroup v1's {hierarchy})", d.display());
            return None;
        }
        Some(d)
    }

    #[test]
    fn names_of_spares() {
        assert!(is_spare("spare_0") && is_spare("spare_12"));
        for n in ["spare_", "spare_x", "job_1_1", "spare_1/..", "spare_-1", " spare_1"] {
            assert!(!is_spare(n), "{n}");
        }
    }

    /// An emptied run's directory becomes a spare and the next run's is that spare; one with a
    /// process in it, one its controller calls unclean, one outside the agent's directory and
    /// one past the bound are not kept; a spare is not renamed over a run's directory that is
    /// there already; dropping the spares removes them.
    #[test]
    fn an_emptied_cgroup_is_the_next_runs_and_a_used_one_is_not_kept() {
        let Some(parent) = v1_dir("memory", "keep") else { return };
        let s = Spares::in_dir(parent.clone());
        assert_eq!(s.take("job_1_1"), None, "no spare yet");
        let a = parent.join("job_1_1");
        std::fs::create_dir(&a).unwrap();
        std::fs::write(a.join("memory.limit_in_bytes"), "104857600").unwrap();
        assert!(!s.keep(&a, 104857600, |_| false), "its controller said no");
        assert!(s.keep(&a, 104857600, |_| true));
        assert!(!a.exists() && s.len() == 1);
        // The next run's directory is the spare, with the limit it was left with.
        let Some(Taken::Spare { dir, limit }) = s.take("job_2_1") else { panic!("a spare") };
        assert_eq!((dir.clone(), limit), (parent.join("job_2_1"), 104857600));
        assert_eq!(std::fs::read_to_string(dir.join("memory.limit_in_bytes")).unwrap().trim(), "104857600");
        // A process left in it: not kept.
        let procs = std::fs::OpenOptions::new().write(true).open(dir.join("cgroup.procs")).unwrap();
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("30");
        let _report = exec::prepare(&mut cmd, exec::Setup { cgroup_procs: &[&procs], ..exec::Setup::default() }).unwrap();
        let mut child = cmd.spawn().unwrap();
        for _ in 0..500 {
            if !std::fs::read_to_string(dir.join("cgroup.procs")).unwrap().is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!s.keep(&dir, 0, |_| true), "a cgroup with a process in it is not kept");
        child.kill().unwrap();
        child.wait().unwrap();
        // Another task of the run made its directory already: the spare stays a spare.
        std::fs::create_dir(parent.join("job_3_1")).unwrap();
        std::fs::create_dir(parent.join("job_4_1")).unwrap();
        assert!(s.keep(&parent.join("job_4_1"), 0, |_| true));
        assert_eq!(s.take("job_3_1"), Some(Taken::Exists(parent.join("job_3_1"))));
        assert_eq!(s.len(), 1);
        // Not the agent's directory (a step's, below a run's): not kept.
        let step = parent.join("job_3_1").join("step_0");
        std::fs::create_dir(&step).unwrap();
        assert!(!s.keep(&step, 0, |_| true));
        std::fs::remove_dir(&step).unwrap();
        // At most KEPT.
        for i in 0..KEPT + 3 {
            let d = parent.join(format!("job_{}_2", 10 + i));
            std::fs::create_dir(&d).unwrap();
            if !s.keep(&d, 0, |_| true) {
                std::fs::remove_dir(&d).unwrap();
            }
        }
        assert_eq!(s.len(), KEPT);
        drop(s);
        for d in [dir, parent.join("job_3_1")] {
            std::fs::remove_dir(d).unwrap();
        }
        std::fs::remove_dir(&parent).expect("dropping the spares removed them: the agent's directory is empty");
    }

    /// A gone agent's spares and its then empty directory are swept; its runs' cgroups, a live
    /// agent's spares and what is not ours stay.
    #[test]
    fn a_gone_agents_spares_are_swept_and_its_runs_cgroups_are_not() {
        let Some(top) = v1_dir("memory", "sweep") else { return };
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let dead = gone.id();
        gone.wait().unwrap();
        let (only_spares, with_run) = (top.join(format!("tandem-n1-{dead}")), top.join(format!("tandem-n2-{dead}")));
        let live = top.join(format!("tandem-n3-{}", std::process::id()));
        for d in [
            only_spares.join("spare_0"),
            only_spares.join("spare_7"),
            with_run.join("spare_1"),
            with_run.join("job_5_1"),
            live.join("spare_0"),
        ] {
            std::fs::create_dir_all(d).unwrap();
        }
        let other = top.join("not-ours");
        std::fs::create_dir_all(other.join("spare_0")).unwrap();
        sweep(&top);
        assert!(!only_spares.exists(), "a gone agent's directory with spares alone goes");
        assert!(with_run.join("job_5_1").exists() && !with_run.join("spare_1").exists(), "its run's cgroup stays, its spare goes");
        assert!(live.join("spare_0").exists() && other.join("spare_0").exists());
        for d in [with_run.join("job_5_1"), with_run, live.join("spare_0"), live, other.join("spare_0"), other, top] {
            std::fs::remove_dir(d).unwrap();
        }
    }
}
