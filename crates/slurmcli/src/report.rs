//! `sreport`'s arithmetic, as Slurm's: usage over a period from the jobs' CPU allocations
//! and the advance reservations (`cluster utilization`, `user top`, `reservation
//! utilization`) and its units. Pure: the caller passes the jobs, the reservations and the
//! cluster's CPUs.

use crate::Invalid;

/// One job's part in a report: who, and how many CPUs over which interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageJob {
    /// User name.
    pub user: String,
    /// Account.
    pub account: String,
    /// CPUs allocated.
    pub cpus: u32,
    /// Start (None: never started).
    pub start: Option<i64>,
    /// End (None: still running).
    pub end: Option<i64>,
    /// The advance reservation it ran in.
    pub reservation: Option<String>,
}

impl UsageJob {
    /// CPU-seconds it held within `[from, to)`; a running job counts up to `now`.
    pub fn cpu_seconds(&self, from: i64, to: i64, now: i64) -> u64 {
        let Some(s) = self.start else { return 0 };
        let e = self.end.unwrap_or(now);
        let (a, b) = (s.max(from), e.min(to));
        if b <= a { 0 } else { (b - a) as u64 * self.cpus as u64 }
    }
}

/// `cluster utilization`, in CPU-seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Utilization {
    /// Held by jobs.
    pub allocated: u64,
    /// Down or drained (Tandem keeps no node-state history: 0).
    pub down: u64,
    /// Planned down: `MAINT` reservations' time that no job in them used.
    pub planned_down: u64,
    /// Neither allocated nor down.
    pub idle: u64,
    /// Idle time with jobs waiting that could not start (not counted: 0).
    pub planned: u64,
    /// The whole: CPUs times the period.
    pub reported: u64,
}

/// The cluster's utilization over `[from, to)` with `cpus` CPUs in all, as Slurm's: jobs'
/// time is allocated; so is the time of an advance reservation that no job in it used (its
/// CPUs were kept from everyone else), unless it is a `MAINT` one (planned down) or has
/// `IGNORE_JOBS` (not counted). `resvs` pairs each reservation with its nodes' CPUs.
pub fn utilization(jobs: &[UsageJob], cpus: u64, resvs: &[(model::Reservation, u64)], from: i64, to: i64, now: i64) -> Utilization {
    let reported = cpus.saturating_mul((to - from).max(0) as u64);
    let mut allocated: u64 = jobs.iter().map(|j| j.cpu_seconds(from, to, now)).sum::<u64>();
    let mut planned_down = 0u64;
    for (r, c) in resvs.iter().filter(|(r, _)| !r.flags.ignore_jobs) {
        let idle: u64 =
            reservation_windows(r, from, to).iter().map(|&(s, e)| reservation_usage(r, *c, jobs, (s.max(from), e.min(to)), now).1).sum();
        if r.flags.maint {
            planned_down += idle;
        } else {
            allocated += idle;
        }
    }
    let allocated = allocated.min(reported);
    let planned_down = planned_down.min(reported - allocated);
    Utilization { allocated, planned_down, idle: reported - allocated - planned_down, reported, ..Utilization::default() }
}

/// The windows of reservation `r` that share time with `[from, to)`: its one window, or each
/// occurrence of a `DAILY` or `WEEKLY` one.
pub fn reservation_windows(r: &model::Reservation, from: i64, to: i64) -> Vec<(i64, i64)> {
    let Some(p) = r.flags.period() else {
        return if r.start < to && from < r.end { vec![(r.start, r.end)] } else { Vec::new() };
    };
    let first = if from > r.end { (from - r.end) / p } else { 0 };
    (first..).map(|k| (r.start + k * p, r.end + k * p)).take_while(|&(s, _)| s < to).filter(|&(_, e)| from < e).take(10_000).collect()
}

/// CPU-seconds of reservation `r` (with `cpus` CPUs on its nodes) over `window`, up to `now`:
/// what jobs in it used, and what stayed idle.
pub fn reservation_usage(r: &model::Reservation, cpus: u64, jobs: &[UsageJob], window: (i64, i64), now: i64) -> (u64, u64) {
    let (a, b) = (window.0, window.1.min(now));
    if b <= a {
        return (0, 0);
    }
    let total = cpus.saturating_mul((b - a) as u64);
    let used: u64 = jobs.iter().filter(|j| j.reservation.as_deref() == Some(r.name.as_str())).map(|j| j.cpu_seconds(a, b, now)).sum();
    let used = used.min(total);
    (used, total - used)
}

/// `user top`: each (user, account) with the CPU-seconds its jobs held in `[from, to)`, most
/// first (ties by user name), at most `top`; users with none are left out.
pub fn top_users(jobs: &[UsageJob], from: i64, to: i64, now: i64, top: usize) -> Vec<(String, String, u64)> {
    let mut by: std::collections::BTreeMap<(String, String), u64> = std::collections::BTreeMap::new();
    for j in jobs {
        let s = j.cpu_seconds(from, to, now);
        if s > 0 {
            *by.entry((j.user.clone(), j.account.clone())).or_default() += s;
        }
    }
    let mut v: Vec<(String, String, u64)> = by.into_iter().map(|((u, a), s)| (u, a, s)).collect();
    v.sort_by(|x, y| y.2.cmp(&x.2).then_with(|| x.0.cmp(&y.0)));
    v.truncate(top);
    v
}

/// The unit a report prints in (`-t`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReportUnit {
    /// Seconds.
    Seconds,
    /// Minutes (Slurm's default).
    #[default]
    Minutes,
    /// Hours.
    Hours,
    /// A percentage of the whole.
    Percent,
}

impl ReportUnit {
    /// Reads `-t`'s value as Slurm does (a prefix, any case: `min`, `Hours`, `percent`).
    pub fn parse(s: &str) -> Result<ReportUnit, Invalid> {
        let l = s.to_ascii_lowercase();
        let is = |w: &str| !l.is_empty() && w.starts_with(&l);
        Ok(if is("seconds") {
            ReportUnit::Seconds
        } else if is("minutes") {
            ReportUnit::Minutes
        } else if is("hours") {
            ReportUnit::Hours
        } else if is("percent") {
            ReportUnit::Percent
        } else {
            return Err(Invalid::new(format!("unknown time format {s}: Seconds, Minutes, Hours or Percent")));
        })
    }

    /// What the header says (`Usage reported in CPU Minutes`).
    pub fn name(self) -> &'static str {
        match self {
            ReportUnit::Seconds => "Seconds",
            ReportUnit::Minutes => "Minutes",
            ReportUnit::Hours => "Hours",
            ReportUnit::Percent => "Percentage of Total",
        }
    }

    /// `secs` of a whole `total` in this unit, as Slurm prints it.
    pub fn value(self, secs: u64, total: u64) -> String {
        match self {
            ReportUnit::Seconds => secs.to_string(),
            ReportUnit::Minutes => (secs / 60).to_string(),
            ReportUnit::Hours => (secs / 3600).to_string(),
            ReportUnit::Percent if total == 0 => "0.00%".into(),
            ReportUnit::Percent => format!("{:.2}%", secs as f64 * 100.0 / total as f64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(user: &str, cpus: u32, start: Option<i64>, end: Option<i64>) -> UsageJob {
        UsageJob { user: user.into(), account: format!("{user}-acct"), cpus, start, end, reservation: None }
    }

    #[test]
    fn usage_counts_only_the_period_and_running_jobs_up_to_now() {
        let j = job("a", 4, Some(100), Some(400));
        assert_eq!(j.cpu_seconds(0, 1000, 2000), 1200);
        assert_eq!(j.cpu_seconds(200, 300, 2000), 400, "clipped to the period");
        assert_eq!(j.cpu_seconds(500, 600, 2000), 0);
        assert_eq!(job("b", 2, Some(100), None).cpu_seconds(0, 1000, 300), 400, "running: up to now");
        assert_eq!(job("c", 2, None, None).cpu_seconds(0, 1000, 300), 0, "never started");
        let u = utilization(&[j, job("b", 2, Some(100), None)], 8, &[], 0, 1000, 300);
        assert_eq!(u, Utilization { allocated: 1600, idle: 6400, reported: 8000, ..Utilization::default() });
        // More than the cluster held (clocks, a shrunk cluster) never makes idle negative.
        let over = utilization(&[job("x", 100, Some(0), Some(1000))], 1, &[], 0, 1000, 1000);
        assert_eq!((over.allocated, over.idle), (1000, 0));
    }

    fn resv(name: &str, start: i64, end: i64, flags: model::ResvFlags) -> model::Reservation {
        model::Reservation {
            name: name.into(),
            start,
            end,
            nodes: vec!["n1".into()],
            users: vec!["a".into()],
            users_negated: false,
            accounts: vec![],
            accounts_negated: false,
            partition: None,
            flags,
            tres: String::new(),
        }
    }

    #[test]
    fn reserved_time_is_allocated_unless_maintenance_and_jobs_in_it_count_once() {
        // 4 CPUs reserved over [100, 300); a job in it used 2 CPUs over [100, 200).
        let mut inside = job("a", 2, Some(100), Some(200));
        inside.reservation = Some("team".into());
        let team = resv("team", 100, 300, model::ResvFlags::default());
        assert_eq!(reservation_usage(&team, 4, std::slice::from_ref(&inside), (100, 300), 1000), (200, 600));
        assert_eq!(reservation_usage(&team, 4, std::slice::from_ref(&inside), (100, 300), 150), (100, 100), "up to now");
        let u = utilization(std::slice::from_ref(&inside), 8, &[(team.clone(), 4)], 0, 1000, 1000);
        assert_eq!(u, Utilization { allocated: 800, idle: 7200, reported: 8000, ..Utilization::default() });
        let maint = resv("team", 100, 300, model::ResvFlags { maint: true, ..Default::default() });
        let u = utilization(std::slice::from_ref(&inside), 8, &[(maint, 4)], 0, 1000, 1000);
        assert_eq!((u.allocated, u.planned_down, u.idle), (200, 600, 7200));
        let ignored = resv("team", 100, 300, model::ResvFlags { ignore_jobs: true, ..Default::default() });
        assert_eq!(utilization(std::slice::from_ref(&inside), 8, &[(ignored, 4)], 0, 1000, 1000).allocated, 200);
        // A daily one: each occurrence within the period.
        let daily = resv("d", 3600, 7200, model::ResvFlags { daily: true, ..Default::default() });
        assert_eq!(reservation_windows(&daily, 0, 2 * 86400), vec![(3600, 7200), (86400 + 3600, 86400 + 7200)]);
        assert_eq!(reservation_windows(&daily, 5 * 86400, 5 * 86400 + 4000), vec![(5 * 86400 + 3600, 5 * 86400 + 7200)]);
        assert!(reservation_windows(&team, 300, 1000).is_empty());
        // A period that starts inside the reservation counts only its part of it.
        let u = utilization(&[], 8, &[(team, 4)], 200, 1000, 1000);
        assert_eq!(u.allocated, 4 * 100, "{u:?}");
    }

    #[test]
    fn top_users_most_first_and_bounded() {
        let jobs =
            [job("a", 1, Some(0), Some(100)), job("b", 4, Some(0), Some(100)), job("a", 1, Some(0), Some(100)), job("c", 1, None, None)];
        let t = top_users(&jobs, 0, 100, 100, 10);
        assert_eq!(t, vec![("b".into(), "b-acct".into(), 400), ("a".into(), "a-acct".into(), 200)]);
        assert_eq!(top_users(&jobs, 0, 100, 100, 1).len(), 1);
    }

    #[test]
    fn units_as_slurm_prints_them() {
        assert_eq!(ReportUnit::parse("min").unwrap(), ReportUnit::Minutes);
        assert_eq!(ReportUnit::parse("Hours").unwrap(), ReportUnit::Hours);
        assert_eq!(ReportUnit::parse("p").unwrap(), ReportUnit::Percent);
        assert!(ReportUnit::parse("").is_err() && ReportUnit::parse("days").is_err());
        assert_eq!(ReportUnit::Minutes.value(119, 0), "1");
        assert_eq!(ReportUnit::Percent.value(1, 3), "33.33%");
        assert_eq!(ReportUnit::Percent.value(1, 0), "0.00%");
    }
}
