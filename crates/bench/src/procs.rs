//! Processes of a node, as the harnesses kill them: a node's agent, its tasks' keepers and the
//! tasks' process groups (found through `/proc`).

/// The children of process `parent`, from `/proc`.
pub(crate) fn children(parent: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| s.rsplit(')').next()?.split_whitespace().nth(1)?.parse::<i32>().ok())
                == Some(parent)
        })
        .collect()
}

/// The task keepers of agent `pid`: its launcher's children (and its own, as an agent before
/// the launcher had them).
pub(crate) fn keepers_of(pid: i32) -> Vec<i32> {
    let keeper = |p: &i32| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "tandem-keeper");
    let mut out = Vec::new();
    for c in children(pid) {
        if keeper(&c) {
            out.push(c);
        } else {
            out.extend(children(c).into_iter().filter(keeper));
        }
    }
    out
}

/// Kills (SIGKILL) every keeper of agent `pid` and its task's process group, not the agent.
pub(crate) fn kill_tasks_of(pid: u32) {
    use nix::sys::signal::{Signal, kill, killpg};
    use nix::unistd::Pid;
    for k in keepers_of(pid as i32) {
        for t in children(k) {
            let _ = killpg(Pid::from_raw(t), Signal::SIGKILL);
        }
        let _ = killpg(Pid::from_raw(k), Signal::SIGKILL);
        let _ = kill(Pid::from_raw(k), Signal::SIGKILL);
    }
}

/// A node dies as a whole: its agent first (so it reports nothing), then its other processes
/// (its launcher), each task's keeper and the task's process group.
pub(crate) fn kill_node(agent_pid: u32) {
    use nix::sys::signal::{Signal, kill, killpg};
    use nix::unistd::Pid;
    let keepers = keepers_of(agent_pid as i32);
    let others = children(agent_pid as i32);
    let _ = kill(Pid::from_raw(agent_pid as i32), Signal::SIGKILL);
    for o in others {
        let _ = kill(Pid::from_raw(o), Signal::SIGKILL);
    }
    for k in keepers {
        for t in children(k) {
            let _ = killpg(Pid::from_raw(t), Signal::SIGKILL);
        }
        let _ = kill(Pid::from_raw(k), Signal::SIGKILL);
    }
}

/// Kills (SIGKILL) every task keeper whose command line (its launcher's, which forked it: the
/// agent's data directory is in it) holds
/// `pattern`, and its task's process group: keepers adopted by a later agent, or orphaned, are
/// no agent's children.
pub(crate) fn kill_keepers_matching(pattern: &str) {
    use nix::sys::signal::{Signal, kill, killpg};
    use nix::unistd::Pid;
    let keepers: Vec<i32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "tandem-keeper")
                && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(pattern))
        })
        .collect();
    for k in keepers {
        for t in children(k) {
            let _ = killpg(Pid::from_raw(t), Signal::SIGKILL);
        }
        let _ = kill(Pid::from_raw(k), Signal::SIGKILL);
    }
}
