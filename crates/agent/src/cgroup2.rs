//! Jobs' limits on cgroup v2 (a host whose only hierarchy is the unified one: current Debian,
//! the GPU machines): the agent's runs get `memory.max` (and `memory.swap.max` 0: what the v1
//! hierarchy's `memsw` limit gives) and `cpu.max` (the job's CPUs on the node, as a quota of
//! that many full CPUs per period).
//!
//! cgroup v2 lets a cgroup either hold processes or hand controllers to its children, not both
//! ("no internal processes"). The agent's own cgroup (its systemd unit's) holds the agent, its
//! launcher and the keepers, which outlive it; were the controllers enabled there, systemd could
//! not put the next agent of a restarted unit into it (EBUSY; `DelegateSubgroup=` solves that
//! only from systemd 254). So the runs live in a tree of their own beside the units, as
//! container runtimes' cgroupfs drivers keep theirs: `/sys/fs/cgroup/tandem/tandem-NAME-PID`,
//! with the memory and CPU controllers enabled down to it, no process moved. Each run's
//! `job_J_E` holds its limits (and is its freezer: `cgroup.freeze` freezes every descendant);
//! each step's tasks are in `job_J_E/step_S` (`step_batch` for the batch script), which has the
//! step's own memory limit (`srun --mem`) when it has one. Stopping the agent's unit never
//! touches them (`KillMode=process`). Everything is plain file writes under a directory, so the
//! unit tests drive it against a tree of ordinary files.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The name of a step's cgroup inside its job's, before the step id (both hierarchies).
pub(crate) const STEP_CGROUP: &str = "step_";

/// The tree of the agents' runs under the unified hierarchy's root.
pub(crate) const TREE: &str = "tandem";

/// The controllers the agent sets limits with, where its cgroup has them.
const CONTROLLERS: [&str; 2] = ["memory", "cpu"];

/// `cpu.max`'s period, microseconds (the kernel's default).
const PERIOD_US: u64 = 100_000;

/// The leaf of a step's tasks inside its run's cgroup.
pub(crate) fn step_leaf(step: u32) -> String {
    if step == control::BATCH_STEP { format!("{STEP_CGROUP}batch") } else { format!("{STEP_CGROUP}{step}") }
}

/// The unified hierarchy's root among `mounts`, where this host is pure v2 (or its unified
/// hierarchy has the memory controller to give: on a hybrid host the controllers are v1's) and
/// `/proc/self/cgroup`'s text shows the v2 line.
pub(crate) fn unified_root(proc_self_cgroup: &str, mounts: &[&Path]) -> Option<PathBuf> {
    proc_self_cgroup.lines().find(|l| l.starts_with("0::"))?;
    let mount = mounts.iter().find(|m| m.join("cgroup.controllers").exists())?;
    let available = std::fs::read_to_string(mount.join("cgroup.controllers")).ok()?;
    available.split_whitespace().any(|c| c == "memory").then(|| mount.to_path_buf())
}

/// Makes the agent's subtree for its runs, `mount/tandem/dir`, with the memory and CPU
/// controllers enabled from the root down to it (the root may hold processes; `tandem` and the
/// subtree hold none). Returns the subtree.
pub(crate) fn prepare(mount: &Path, dir: &str) -> std::io::Result<PathBuf> {
    let available = std::fs::read_to_string(mount.join("cgroup.controllers"))?;
    let wanted: Vec<&str> = CONTROLLERS.into_iter().filter(|c| available.split_whitespace().any(|a| a == *c)).collect();
    enable(mount, &wanted)?;
    let tree = mount.join(TREE);
    make_dir(&tree)?;
    enable(&tree, &wanted)?;
    let base = tree.join(dir);
    make_dir(&base)?;
    enable(&base, &wanted)?;
    Ok(base)
}

/// A run's cgroup (`base/job_J_E`, with the job's limits on this node: `mem` bytes, `cpus`
/// CPUs; 0 for none) and the leaf its step's tasks join (`step_S`, limited to `step_mem` bytes
/// when that is not 0). Returns the leaf.
pub(crate) fn create(base: &Path, job: u64, epoch: u32, step: u32, mem: u64, cpus: u32, step_mem: u64) -> std::io::Result<PathBuf> {
    let run = base.join(format!("job_{job}_{epoch}"));
    make_dir(&run)?;
    if mem > 0 {
        limit_memory(&run, mem)?;
    }
    if cpus > 0 && run.join("cpu.max").exists() {
        std::fs::write(run.join("cpu.max"), format!("{} {PERIOD_US}", u64::from(cpus) * PERIOD_US))?;
    }
    let given = std::fs::read_to_string(base.join("cgroup.subtree_control")).unwrap_or_default();
    enable(&run, &given.split_whitespace().collect::<Vec<_>>())?;
    let leaf = run.join(step_leaf(step));
    make_dir(&leaf)?;
    if step_mem > 0 {
        limit_memory(&leaf, step_mem)?;
    }
    Ok(leaf)
}

fn limit_memory(dir: &Path, bytes: u64) -> std::io::Result<()> {
    std::fs::write(dir.join("memory.max"), bytes.to_string())?;
    if dir.join("memory.swap.max").exists() {
        std::fs::write(dir.join("memory.swap.max"), "0")?;
    }
    Ok(())
}

/// Whether the kernel killed a process of `leaf`'s cgroup for memory: `memory.events`'
/// `oom_kill`, which counts a kill in the cgroup of its victim and every cgroup above it, so a
/// kill under the run's limit is counted in the leaf of the step that lost the process (and no
/// other step's).
pub(crate) fn oom(leaf: &Path) -> bool {
    std::fs::read_to_string(leaf.join("memory.events"))
        .unwrap_or_default()
        .lines()
        .any(|l| l.strip_prefix("oom_kill ").is_some_and(|n| n.trim() != "0"))
}

/// Removes the empty subtrees (`tandem-NAME-PID`) that agents gone left in `tree`; one that
/// still holds a run (a task a restarted agent adopts, or an ended task's OOM count it has yet
/// to read) stays, until that agent has released it.
pub(crate) fn sweep(tree: &Path) {
    let Ok(entries) = std::fs::read_dir(tree) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name.strip_prefix("tandem-").and_then(|r| r.rsplit_once('-')).and_then(|(_, p)| p.parse::<u32>().ok());
        if pid.is_some_and(|p| p != std::process::id() && !Path::new(&format!("/proc/{p}")).exists()) {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

fn make_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        r => r,
    }
}

/// Enables `ctrls` for `dir`'s children (those not enabled yet).
fn enable(dir: &Path, ctrls: &[&str]) -> std::io::Result<()> {
    let on = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    let add: Vec<String> = ctrls.iter().filter(|c| !on.split_whitespace().any(|o| o == **c)).map(|c| format!("+{c}")).collect();
    if add.is_empty() {
        return Ok(());
    }
    append(&dir.join("cgroup.subtree_control"), &add.join(" "))
}

/// One write to a cgroup file (`echo VALUE >> FILE`).
fn append(file: &Path, value: &str) -> std::io::Result<()> {
    std::fs::OpenOptions::new().append(true).open(file)?.write_all(value.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cgroup directory of ordinary files, as the kernel shows one.
    fn cgroup(dir: &Path, controllers: &str, procs: &str) {
        std::fs::create_dir_all(dir).unwrap();
        for (f, v) in [
            ("cgroup.controllers", controllers),
            ("cgroup.subtree_control", ""),
            ("cgroup.procs", procs),
            ("cgroup.freeze", "0"),
            ("memory.max", "max"),
            ("memory.swap.max", "max"),
            ("cpu.max", "max 100000"),
            ("memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n"),
        ] {
            std::fs::write(dir.join(f), v).unwrap();
        }
    }

    fn read(p: PathBuf) -> String {
        std::fs::read_to_string(p).unwrap()
    }

    #[test]
    fn runs_get_their_limits_in_leaves_of_a_tree_beside_the_units() {
        let tmp = std::env::temp_dir().join(format!("tandem-cgroup2-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let mount = tmp.join("sys/fs/cgroup");
        cgroup(&mount, "cpuset cpu io memory pids", "1\n");
        std::fs::write(mount.join("cgroup.subtree_control"), "cpu memory pids").unwrap();
        // Found from /proc/self/cgroup's v2 line where the root gives the memory controller.
        let unit = "0::/system.slice/tandem-agent.service\n";
        assert_eq!(unified_root(unit, &[&tmp.join("nowhere"), &mount]), Some(mount.clone()));
        // A hybrid host: v1 lines, a unified hierarchy without the memory controller.
        let hybrid = tmp.join("hybrid");
        cgroup(&hybrid, "", "");
        assert_eq!(unified_root("4:memory:/user.slice\n0::/user.slice\n", &[&hybrid]), None);
        assert_eq!(unified_root("4:memory:/user.slice\n", &[&mount]), None);

        // The controllers go down to the runs' subtree; no process moves, and what the root
        // enables already is not written again.
        cgroup(&mount.join("tandem"), "cpu memory pids", "");
        cgroup(&mount.join("tandem/tandem-node1-77"), "cpu memory", "");
        let base = prepare(&mount, "tandem-node1-77").unwrap();
        assert_eq!(base, mount.join("tandem/tandem-node1-77"));
        assert_eq!(read(mount.join("cgroup.procs")), "1\n");
        assert_eq!(read(mount.join("cgroup.subtree_control")), "cpu memory pids");
        assert_eq!(read(mount.join("tandem/cgroup.subtree_control")), "+memory +cpu");
        assert_eq!(read(base.join("cgroup.subtree_control")), "+memory +cpu");
        std::fs::write(mount.join("cgroup.subtree_control"), "pids").unwrap();
        std::fs::write(mount.join("tandem/cgroup.subtree_control"), "memory cpu").unwrap();
        prepare(&mount, "tandem-node1-77").unwrap();
        assert_eq!(read(mount.join("cgroup.subtree_control")), "pids+memory +cpu");
        assert_eq!(read(mount.join("tandem/cgroup.subtree_control")), "memory cpu");

        // A run of 2 CPUs and 1 GiB; its batch script in step_batch, a step with --mem of its
        // own in step_3.
        std::fs::write(base.join("cgroup.subtree_control"), "memory cpu").unwrap();
        let run = base.join("job_12_0");
        cgroup(&run, "memory cpu", "");
        cgroup(&run.join("step_batch"), "memory cpu", "");
        cgroup(&run.join("step_3"), "memory cpu", "");
        let leaf = create(&base, 12, 0, control::BATCH_STEP, 1 << 30, 2, 0).unwrap();
        assert_eq!(leaf, run.join("step_batch"));
        assert_eq!(read(run.join("memory.max")), (1u64 << 30).to_string());
        assert_eq!(read(run.join("memory.swap.max")), "0");
        assert_eq!(read(run.join("cpu.max")), "200000 100000");
        assert_eq!(read(run.join("cgroup.subtree_control")), "+memory +cpu");
        assert_eq!(read(leaf.join("memory.max")), "max", "the batch step has the job's limit only");
        let step = create(&base, 12, 0, 3, 1 << 30, 2, 256 << 20).unwrap();
        assert_eq!(step, run.join("step_3"));
        assert_eq!(read(step.join("memory.max")), (256u64 << 20).to_string());
        // OOM: counted in the leaf whose process was killed (the kernel counts upwards too);
        // another step's kill is not this one's.
        assert!(!oom(&step));
        std::fs::write(run.join("memory.events"), "oom 1\noom_kill 1\n").unwrap();
        std::fs::write(step.join("memory.events"), "oom 1\noom_kill 1\n").unwrap();
        assert!(oom(&step) && !oom(&leaf));

        // Agents gone leave empty subtrees: swept; one still holding a run stays.
        std::fs::create_dir_all(mount.join("tandem/tandem-node1-999999999")).unwrap();
        std::fs::create_dir_all(mount.join("tandem/tandem-node1-999999998/job_1_1")).unwrap();
        sweep(&mount.join("tandem"));
        assert!(!mount.join("tandem/tandem-node1-999999999").exists());
        assert!(mount.join("tandem/tandem-node1-999999998").exists());
        assert!(base.exists(), "its own");
        // A limit that cannot be written is an error the launch reports.
        std::fs::remove_dir_all(&run).unwrap();
        std::fs::create_dir_all(run.join("memory.max")).unwrap();
        assert!(create(&base, 12, 0, 1, 1 << 30, 0, 0).is_err());
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
