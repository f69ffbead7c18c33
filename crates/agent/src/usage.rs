//! What a task uses, read from `/proc` for `sstat` and `sacct`: the resident memory of its
//! process group (now, and the most seen) and the CPU time its processes have used (user and
//! system, with the children they have waited for). Sampled at most every two seconds.

use control::{TaskKey, TaskUsage};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often the processes are read.
const EVERY: Duration = Duration::from_secs(2);

/// The last samples, per task.
#[derive(Default)]
pub(crate) struct Sampler {
    at: Option<Instant>,
    seen: HashMap<TaskKey, TaskUsage>,
}

impl Sampler {
    /// The tasks' usage (sampled anew when due), for `tasks` given as (key, process group).
    pub(crate) fn sample(&mut self, tasks: impl Iterator<Item = (TaskKey, i32)>) -> Vec<TaskUsage> {
        let tasks: Vec<(TaskKey, i32)> = tasks.filter(|(_, pg)| *pg > 0).collect();
        if self.at.is_some_and(|t| t.elapsed() < EVERY) {
            return tasks.iter().filter_map(|(k, _)| self.seen.get(k).cloned()).collect();
        }
        self.at = Some(Instant::now());
        let groups = by_group();
        let page_kb = 4; // x86_64 and aarch64 Linux
        let tick_ms = 10; // USER_HZ = 100
        let mut out = Vec::new();
        for (k, pg) in tasks {
            let (pages, ticks) = groups.get(&pg).copied().unwrap_or((0, 0));
            let rss_kb = pages * page_kb;
            let prev = self.seen.get(&k);
            let u = TaskUsage {
                key: k,
                rss_kb,
                max_rss_kb: prev.map_or(rss_kb, |p| p.max_rss_kb.max(rss_kb)),
                // Processes that ended unwaited take their time with them: never go back.
                cpu_ms: prev.map_or(ticks * tick_ms, |p| p.cpu_ms.max(ticks * tick_ms)),
            };
            out.push(u);
        }
        self.seen = out.iter().map(|u| (u.key, u.clone())).collect();
        out
    }
}

/// For each process group: its processes' resident pages and CPU ticks (user, system and
/// waited-for children), from `/proc/PID/stat`.
fn by_group() -> HashMap<i32, (u64, u64)> {
    let mut out: HashMap<i32, (u64, u64)> = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return out };
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else { continue };
        let Ok(stat) = crate::kfile::read_text(None, std::path::Path::new(&format!("/proc/{pid}/stat"))) else { continue };
        if let Some((pgrp, pages, ticks)) = parse_stat(&stat) {
            let slot = out.entry(pgrp).or_default();
            slot.0 += pages;
            slot.1 += ticks;
        }
    }
    out
}

/// (process group, resident pages, utime + stime + cutime + cstime) of a `/proc/PID/stat` line.
fn parse_stat(s: &str) -> Option<(i32, u64, u64)> {
    // The command name is in parentheses and may hold spaces and parentheses: fields resume
    // after the last ')'.
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ppid(1) pgrp(2) ... utime(11) stime(12) cutime(13) cstime(14) ... rss(21)
    let n = |i: usize| f.get(i).and_then(|x| x.parse::<i64>().ok());
    let ticks = [11, 12, 13, 14].iter().map(|&i| n(i).unwrap_or(0).max(0) as u64).sum();
    Some((n(2)? as i32, n(21)?.max(0) as u64, ticks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_names_parse() {
        let line = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 1 0 0 0 7 3 2 1 20 0 1 0 100 1000 250 18446744073709551615";
        assert_eq!(parse_stat(line), Some((4242, 250, 13)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S"), None);
    }

    #[test]
    fn this_process_group_is_seen() {
        let me = nix::unistd::getpgrp().as_raw();
        let k = TaskKey { job: 1, epoch: 0, step: 0, rank: 0 };
        let mut s = Sampler::default();
        let u = s.sample([(k, me)].into_iter());
        assert_eq!(u.len(), 1);
        assert!(u[0].rss_kb > 0 && u[0].max_rss_kb >= u[0].rss_kb, "{u:?}");
        // Within the interval the last sample is given again.
        assert_eq!(s.sample([(k, me)].into_iter()), u);
    }
}
