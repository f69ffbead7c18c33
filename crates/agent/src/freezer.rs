//! Freezing a job's processes (`scontrol suspend`): every task of a job's run joins, at its
//! launch, the run's freezer cgroup (`job_J_E` under the agent's own): cgroup v1's freezer
//! hierarchy where it is mounted, else cgroup v2's `cgroup.freeze`. Whatever a task starts
//! afterwards, a `setsid` daemon included, is born in it, so freezing the cgroup stops them
//! all, with no signal the job could catch or miss. Where neither can be made, the agent falls
//! back to SIGSTOP and SIGCONT to every process of the job's memory cgroup and process groups.

use std::path::{Path, PathBuf};

/// Where the agent makes its runs' freezer cgroups.
pub(crate) struct Freezer {
    base: Option<PathBuf>,
    /// Whether tasks join the run's freezer cgroup themselves (a hierarchy of its own), or
    /// are in a cgroup below it already (cgroup v2 with limits: the run's cgroup is both).
    joined: bool,
    /// cgroup v1: emptied runs' freezer cgroups kept for the next runs ([`crate::spare`]).
    spares: crate::spare::Spares,
}

/// Which interface a freezer cgroup has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// cgroup v1's freezer controller: `freezer.state` (`FROZEN`, `THAWED`).
    V1,
    /// cgroup v2: `cgroup.freeze` (`1`, `0`), `cgroup.events`'s `frozen`.
    V2,
}

fn kind(dir: &Path) -> Option<Kind> {
    if dir.join("freezer.state").exists() {
        Some(Kind::V1)
    } else if dir.join("cgroup.freeze").exists() {
        Some(Kind::V2)
    } else {
        None
    }
}

/// The agent's own cgroup in the hierarchy that `line_of` picks out of `/proc/self/cgroup`.
fn own(line_of: impl Fn(&str, &str) -> bool) -> Option<String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    own.lines().find_map(|l| {
        let mut p = l.splitn(3, ':');
        let (id, ctrls, path) = (p.next()?, p.next()?, p.next()?);
        line_of(id, ctrls).then(|| path.trim_start_matches('/').to_string())
    })
}

impl Freezer {
    /// The v1 freezer hierarchy if mounted, else the v2 one (the unified hierarchy of a hybrid
    /// system, or the only one); `None` where neither can be written.
    pub(crate) fn detect(name: &str) -> Freezer {
        let dir = format!("tandem-{name}-{}", std::process::id());
        let v1 = own(|_, c| c.split(',').any(|c| c == "freezer")).map(|r| PathBuf::from("/sys/fs/cgroup/freezer").join(r).join(&dir));
        let v2 = own(|id, c| id == "0" && c.is_empty()).and_then(|r| {
            ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
                .into_iter()
                .map(PathBuf::from)
                .find(|m| m.join("cgroup.controllers").exists())
                .map(|m| m.join(r).join(&dir))
        });
        for base in [v1, v2].into_iter().flatten() {
            if let Some(parent) = base.parent() {
                sweep(parent);
            }
            if std::fs::create_dir_all(&base).is_ok()
                && let Some(k) = kind(&base)
            {
                let spares = if k == Kind::V1 { crate::spare::Spares::in_dir(base.clone()) } else { crate::spare::Spares::off() };
                return Freezer { base: Some(base), joined: true, spares };
            }
            let _ = std::fs::remove_dir(&base);
        }
        tracing::warn!(node = %name, "no writable freezer cgroup here; suspended jobs are stopped with SIGSTOP");
        Freezer { base: None, joined: true, spares: crate::spare::Spares::off() }
    }

    /// The runs' cgroups of cgroup v2 with limits ([`crate::cgroup2`]): each run's
    /// `job_J_E` under `base` is its freezer, and its tasks are in leaves below it.
    pub(crate) fn within(base: PathBuf) -> Freezer {
        Freezer { base: Some(base), joined: false, spares: crate::spare::Spares::off() }
    }

    /// Whether a task joins its run's freezer cgroup (else it is below it).
    pub(crate) fn joined(&self) -> bool {
        self.joined
    }

    /// No freezer (tests).
    #[cfg(test)]
    pub(crate) fn none() -> Freezer {
        Freezer { base: None, joined: true, spares: crate::spare::Spares::off() }
    }

    /// A freezer of a given hierarchy's directory (tests).
    #[cfg(test)]
    pub(crate) fn at(base: PathBuf) -> Freezer {
        Freezer { base: Some(base), joined: true, spares: crate::spare::Spares::off() }
    }

    /// A freezer of cgroup v1's hierarchy at `base` that keeps emptied runs' cgroups (tests).
    #[cfg(test)]
    pub(crate) fn v1_at(base: PathBuf) -> Freezer {
        Freezer { base: Some(base.clone()), joined: true, spares: crate::spare::Spares::in_dir(base) }
    }

    /// A run's freezer cgroup, if it was made.
    pub(crate) fn existing(&self, job: u64, epoch: u32) -> Option<PathBuf> {
        let dir = self.base.as_ref()?.join(format!("job_{job}_{epoch}"));
        crate::kfile::exists(self.spares.dir(), &dir).then_some(dir)
    }

    /// The freezer cgroup a run's tasks join (made if needed).
    pub(crate) fn create(&self, job: u64, epoch: u32) -> Option<PathBuf> {
        let name = format!("job_{job}_{epoch}");
        if let Some(crate::spare::Taken::Spare { dir, .. } | crate::spare::Taken::Exists(dir)) = self.spares.take(&name) {
            return Some(dir);
        }
        let dir = self.base.as_ref()?.join(name);
        std::fs::create_dir_all(&dir).ok()?;
        Some(dir)
    }

    /// A run's freezer cgroup once its last task here ended: kept for the next run where it
    /// is empty and thawed (cgroup v1), else [`remove`]d.
    pub(crate) fn release(&self, dir: &Path) {
        let thawed = |d: &Path| crate::kfile::read(self.spares.dir(), &d.join("freezer.state")).is_ok_and(|s| s.trim_ascii() == b"THAWED");
        if !self.spares.keep(dir, 0, thawed) {
            remove(dir);
        }
    }
}

/// Removes what agents that are gone left in `parent` (the freezer hierarchy's directory of
/// agents): each `tandem-NAME-PID` directory whose process no longer exists, with the run
/// and step cgroups inside it that are empty (spares too). A cgroup that still holds a process
/// (a task an agent started after a restart adopted) is left: `rmdir` refuses it. (Memory
/// cgroups are swept of spares alone, [`crate::spare::sweep`]: a restarted agent reads an ended
/// task's OOM count from its cgroup.)
pub(crate) fn sweep(parent: &Path) {
    for dir in crate::spare::gone_agents(parent) {
        for run in subdirs(&dir) {
            for step in subdirs(&run) {
                let _ = std::fs::remove_dir(step);
            }
            let _ = std::fs::remove_dir(run);
        }
        let _ = std::fs::remove_dir(&dir);
    }
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map_or_else(|_| Vec::new(), |r| r.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()).collect())
}

/// Freezes every process in `dir` (and below it). Returns at once: the kernel completes it.
pub(crate) fn freeze(dir: &Path) -> std::io::Result<()> {
    match kind(dir) {
        Some(Kind::V1) => std::fs::write(dir.join("freezer.state"), "FROZEN"),
        Some(Kind::V2) => std::fs::write(dir.join("cgroup.freeze"), "1"),
        None => Err(std::io::Error::new(std::io::ErrorKind::NotFound, format!("{} is not a freezer cgroup", dir.display()))),
    }
}

/// Thaws what [`freeze`] froze.
pub(crate) fn thaw(dir: &Path) -> std::io::Result<()> {
    match kind(dir) {
        Some(Kind::V1) => std::fs::write(dir.join("freezer.state"), "THAWED"),
        Some(Kind::V2) => std::fs::write(dir.join("cgroup.freeze"), "0"),
        None => Ok(()),
    }
}

/// Whether `dir` is asked to be frozen (found again by an agent restarted meanwhile).
pub(crate) fn is_frozen(dir: &Path) -> bool {
    match kind(dir) {
        Some(Kind::V1) => std::fs::read_to_string(dir.join("freezer.self_freezing")).is_ok_and(|s| s.trim() == "1"),
        Some(Kind::V2) => std::fs::read_to_string(dir.join("cgroup.freeze")).is_ok_and(|s| s.trim() == "1"),
        None => false,
    }
}

/// Removes a run's freezer cgroup once its last task here ended (thawed first: a frozen
/// cgroup keeps any process left in it stopped).
pub(crate) fn remove(dir: &Path) {
    // An empty cgroup is removed frozen or not; only one that still holds a process is thawed
    // (and tried again), so the common case costs one `rmdir` and no look-up.
    if std::fs::remove_dir(dir).is_err_and(|e| e.kind() != std::io::ErrorKind::NotFound) {
        let _ = thaw(dir);
        let _ = std::fs::remove_dir(dir);
    }
}

/// Every process of a cgroup directory and those below it.
pub(crate) fn procs(dir: &Path) -> Vec<i32> {
    let mut out: Vec<i32> =
        std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(procs(&e.path()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn wait_for(what: &str, f: impl Fn() -> bool) {
        for _ in 0..500 {
            if f() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("timed out waiting for {what}");
    }

    /// What the kernel says: the whole cgroup is frozen (not just asked to be).
    fn frozen_now(dir: &Path) -> bool {
        match kind(dir) {
            Some(Kind::V1) => std::fs::read_to_string(dir.join("freezer.state")).is_ok_and(|s| s.trim() == "FROZEN"),
            Some(Kind::V2) => std::fs::read_to_string(dir.join("cgroup.events")).is_ok_and(|s| s.lines().any(|l| l == "frozen 1")),
            None => false,
        }
    }

    fn count(f: &Path) -> u64 {
        std::fs::read_to_string(f).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
    }

    /// A shell in the freezer cgroup counts into a file, and so does a child it starts in a
    /// session of its own; frozen (the cgroup, not a signal), neither counts on; thawed, both do.
    fn freezes_a_setsid_child(base: PathBuf) {
        let f = Freezer::at(base.clone());
        let dir = f.create(7, 1).expect("freezer cgroup");
        let tag = base.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = std::env::temp_dir().join(format!("{tag}-counts"));
        std::fs::create_dir_all(&tmp).unwrap();
        let (a, b) = (tmp.join("a"), tmp.join("b"));
        let counter = |f: &Path| format!("i=0; while :; do i=$((i+1)); echo $i > {}; sleep 0.02; done", f.display());
        let script = format!("setsid sh -c '{}' & exec sh -c '{}'", counter(&b), counter(&a));
        let procs_file = std::fs::OpenOptions::new().write(true).open(dir.join("cgroup.procs")).unwrap();
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", &script]);
        let _report = exec::prepare(&mut cmd, exec::Setup { cgroup_procs: &[&procs_file], ..exec::Setup::default() }).unwrap();
        let mut child = cmd.spawn().unwrap();
        wait_for("both counting", || count(&a) > 2 && count(&b) > 2);
        assert!(procs(&dir).contains(&(child.id() as i32)));
        freeze(&dir).unwrap();
        assert!(is_frozen(&dir));
        wait_for("the cgroup frozen", || frozen_now(&dir));
        let (x, y) = (count(&a), count(&b));
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!((count(&a), count(&b)), (x, y), "nothing counts while frozen, the setsid child included");
        thaw(&dir).unwrap();
        assert!(!is_frozen(&dir));
        wait_for("both counting again", || count(&a) > x + 2 && count(&b) > y + 2);
        for p in procs(&dir) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
        }
        let _ = child.wait();
        wait_for("the cgroup empty", || procs(&dir).is_empty());
        remove(&dir);
        let _ = std::fs::remove_dir(&base);
        let _ = std::fs::remove_dir_all(&tmp);
        assert!(!dir.exists());
    }

    fn writable(base: &Path) -> bool {
        let ok = nix::unistd::geteuid().is_root() && std::fs::create_dir_all(base).is_ok() && kind(base).is_some();
        if !ok {
            let _ = std::fs::remove_dir(base);
            eprintln!("skipped: {} cannot be made here (needs root and that hierarchy)", base.display());
        }
        ok
    }

    #[test]
    fn what_gone_agents_left_is_swept_and_what_live_ones_hold_is_not() {
        let parent = PathBuf::from("/sys/fs/cgroup/freezer").join(format!("tandem-sweep-test-{}", std::process::id()));
        if !writable(&parent) {
            return;
        }
        // A process that is gone, and its pid.
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let dead = gone.id();
        gone.wait().unwrap();
        let left = parent.join(format!("tandem-node9-{dead}"));
        std::fs::create_dir_all(left.join("job_3_1").join("step_0")).unwrap();
        let live = parent.join(format!("tandem-node9-{}", std::process::id()));
        std::fs::create_dir_all(live.join("job_4_1")).unwrap();
        let other = parent.join("not-ours");
        std::fs::create_dir_all(&other).unwrap();
        sweep(&parent);
        assert!(!left.exists(), "a gone agent's directory is removed");
        assert!(live.join("job_4_1").exists() && other.exists(), "a live agent's, and anything not ours, stay");
        for d in [live.join("job_4_1"), live, other, parent] {
            let _ = std::fs::remove_dir(d);
        }
    }

    #[test]
    fn the_v1_freezer_stops_every_process_of_the_cgroup() {
        let base = PathBuf::from("/sys/fs/cgroup/freezer").join(format!("tandem-test-v1-{}", std::process::id()));
        if writable(&base) {
            freezes_a_setsid_child(base);
        }
    }

    /// `remove` takes an empty cgroup frozen or not, in one `rmdir`; one a process is left in
    /// stays, thawed (a frozen cgroup would keep it stopped for ever).
    #[test]
    fn removing_a_frozen_cgroup_thaws_what_is_left_in_it() {
        let base = PathBuf::from("/sys/fs/cgroup/freezer").join(format!("tandem-test-remove-{}", std::process::id()));
        if !writable(&base) {
            return;
        }
        let f = Freezer::at(base.clone());
        let empty = f.create(1, 1).expect("freezer cgroup");
        freeze(&empty).unwrap();
        remove(&empty);
        assert!(!empty.exists(), "an empty frozen cgroup is removed");
        remove(&empty); // gone already: nothing to do, no error
        let dir = f.create(2, 1).expect("freezer cgroup");
        let procs_file = std::fs::OpenOptions::new().write(true).open(dir.join("cgroup.procs")).unwrap();
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("30");
        let _report = exec::prepare(&mut cmd, exec::Setup { cgroup_procs: &[&procs_file], ..exec::Setup::default() }).unwrap();
        let mut child = cmd.spawn().unwrap();
        wait_for("the sleep in the cgroup", || procs(&dir).contains(&(child.id() as i32)));
        freeze(&dir).unwrap();
        wait_for("the cgroup frozen", || frozen_now(&dir));
        remove(&dir);
        assert!(dir.exists(), "a cgroup with a process left stays");
        assert!(!is_frozen(&dir), "and is thawed");
        child.kill().unwrap();
        let _ = child.wait();
        wait_for("the cgroup empty", || procs(&dir).is_empty());
        remove(&dir);
        assert!(!dir.exists());
        let _ = std::fs::remove_dir(&base);
    }

    /// cgroup v1: a run's emptied, thawed freezer cgroup is the next run's; a frozen one is
    /// removed; the spares go with the agent.
    #[test]
    fn an_emptied_thawed_freezer_cgroup_is_the_next_runs_and_a_frozen_one_is_not() {
        let base = PathBuf::from("/sys/fs/cgroup/freezer").join(format!("tandem-test-spares-{}", std::process::id()));
        if !writable(&base) || kind(&base) != Some(Kind::V1) {
            let _ = std::fs::remove_dir(&base);
            return;
        }
        let f = Freezer::v1_at(base.clone());
        let d1 = f.create(1, 1).expect("freezer cgroup");
        f.release(&d1);
        assert!(!d1.exists() && base.join("spare_0").exists(), "kept as a spare");
        let d2 = f.create(2, 1).expect("freezer cgroup");
        assert!(d2.exists() && !base.join("spare_0").exists(), "the spare is the next run's");
        assert_eq!(f.existing(2, 1), Some(d2.clone()));
        assert_eq!(f.existing(1, 1), None, "the first run's is gone");
        freeze(&d2).unwrap();
        f.release(&d2);
        assert!(!d2.exists() && !base.join("spare_1").exists(), "a frozen cgroup is removed, not kept");
        let d3 = f.create(3, 1).expect("freezer cgroup");
        f.release(&d3);
        drop(f);
        std::fs::remove_dir(&base).expect("the spares went with the freezer");
    }

    #[test]
    fn the_v2_freezer_stops_every_process_of_the_cgroup() {
        let m = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"].into_iter().map(PathBuf::from).find(|m| m.join("cgroup.controllers").exists());
        let Some(m) = m else {
            eprintln!("skipped: no cgroup v2 hierarchy here");
            return;
        };
        let base = m.join(format!("tandem-test-v2-{}", std::process::id()));
        if writable(&base) {
            freezes_a_setsid_child(base);
        }
    }
}
