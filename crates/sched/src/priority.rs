//! Priority policies: FCFS, SJF, F1 and Slurm-style multifactor, with each factor visible.

use model::{ClusterConfig, JobRequest, Time};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// Weights of the multifactor policy. Each factor is in 0..=1 and is multiplied by its weight;
/// the nice value is subtracted; the sum is the job's priority (higher runs first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Weights {
    /// Weight of age (time eligible, capped at `max_age`).
    pub age: f64,
    /// Weight of fair-share (2^(-usage/shares), Slurm's classic formula).
    pub fairshare: f64,
    /// Weight of job size: nodes/cluster nodes, or 1 − that with `favor_small`.
    pub job_size: f64,
    /// Whether the job-size factor favours small jobs (Slurm's PriorityFavorSmall).
    pub favor_small: bool,
    /// Weight of the time-limit factor (favouring short limits: 1 − log(limit)/log(max_limit)).
    pub time_limit: f64,
    /// Weight of the expansion factor (Maui/Moab's XFactor): (wait + limit) / limit, capped at
    /// `xfactor_cap` and scaled to 0..=1. Short jobs that have waited long relative to their
    /// length rise fastest.
    pub xfactor: f64,
    /// Expansion factor at which the xfactor factor reaches 1.
    pub xfactor_cap: f64,
    /// Starvation guard: a job eligible for longer than this many seconds outranks every job
    /// of its partition and QOS that has not (0 turns the guard off).
    pub starve_after: Time,
    /// Weight of the partition's priority tier.
    pub partition: f64,
    /// Weight of the QOS priority.
    pub qos: f64,
    /// Age at which the age factor reaches 1, seconds (Slurm's PriorityMaxAge, default 7 days).
    pub max_age: Time,
    /// Time limit at which the time-limit factor reaches 0, seconds.
    pub max_time_limit: Time,
    /// Whether the time-limit and expansion factors read the run time the pass plans with (a
    /// prediction from history when the scheduler predicts, EASY++; the requested limit
    /// otherwise) instead of the requested limit.
    #[serde(default)]
    pub estimate: bool,
}

impl Weights {
    /// Plain Slurm multifactor with Slurm-like weights: age, fair-share, job size, partition and
    /// QOS, no time-limit factor.
    pub fn slurm() -> Weights {
        Weights {
            age: 1000.0,
            fairshare: 1000.0,
            job_size: 1000.0,
            favor_small: false,
            time_limit: 0.0,
            xfactor: 0.0,
            xfactor_cap: 100.0,
            starve_after: 0,
            partition: 1000.0,
            qos: 1000.0,
            max_age: 7 * 86400,
            max_time_limit: 7 * 86400,
            estimate: false,
        }
    }

    /// Tandem's production default (what `tandem server` uses and `--policy default` names),
    /// chosen in issue 15 on the first half of 24 segments of every SWF trace and on the whole
    /// traces, and reported on the second half (BENCHMARKS.md §2.3). With the run times the
    /// pass plans with (predictions from the user's finished jobs of the same shape, EASY++:
    /// [`crate::Config::default`] predicts) it is a response-ratio order with a preference for
    /// short jobs: the expansion factor counts one point per estimated run time waited
    /// ((wait + est) / est − 1, the response ratio), a short estimate adds up to 15,000 points
    /// (1 − ln(est) / ln(7 days)), and a small job up to 100 (1 − nodes / cluster nodes). No age
    /// factor, no starvation threshold (the expansion factor is the aging, with no setting that
    /// depends on a site's load; it ages long jobs slowly), no fair-share. Partition tier and QOS
    /// dominate everything else: the expansion factor stops at 100,000 points.
    pub fn default_production() -> Weights {
        Weights {
            age: 0.0,
            fairshare: 0.0,
            job_size: 100.0,
            favor_small: true,
            time_limit: 15_000.0,
            xfactor: 100_000.0,
            xfactor_cap: 100_001.0,
            starve_after: 0,
            partition: 10_000_000.0,
            qos: 1_000_000.0,
            max_age: 7 * 86400,
            max_time_limit: 7 * 86400,
            estimate: true,
        }
    }

    /// The production default until issue 15 (`--policy default-v1`), chosen on RLScheduler's
    /// ten windows: short requested limits first, jobs that have waited long relative to their
    /// limit next, large gangs favoured, a little age. (It named a 7-day starvation guard that
    /// never took effect; it is given here as it ran, without it.)
    pub fn default_v1() -> Weights {
        Weights {
            age: 1_000.0,
            fairshare: 0.0,
            job_size: 1_000.0,
            favor_small: false,
            time_limit: 12_000.0,
            xfactor: 2_500.0,
            xfactor_cap: 100.0,
            starve_after: 0,
            partition: 10_000_000.0,
            qos: 1_000_000.0,
            max_age: 7 * 86400,
            max_time_limit: 7 * 86400,
            estimate: false,
        }
    }
}

impl Weights {
    /// The keys [`Weights::set`] accepts.
    pub const KEYS: &'static str = "age, fairshare, job_size, favor_small, time_limit, xfactor, xfactor_cap, starve_after, partition, qos, max_age, max_time_limit, estimate";

    /// Sets one weight by name (the keys of `--weights` and of `[weights]` in tandem.toml).
    /// `value` must be finite and non-negative; times are seconds; `favor_small` is 0 or 1.
    pub fn set(&mut self, key: &str, value: f64) -> Result<(), String> {
        if !value.is_finite() || value < 0.0 {
            return Err(format!("{key}: {value} is not a non-negative number"));
        }
        match key {
            "age" => self.age = value,
            "fairshare" => self.fairshare = value,
            "job_size" => self.job_size = value,
            "favor_small" => self.favor_small = value != 0.0,
            "time_limit" => self.time_limit = value,
            "xfactor" => self.xfactor = value,
            "xfactor_cap" => self.xfactor_cap = value.max(1.0),
            "starve_after" => self.starve_after = value as Time,
            "partition" => self.partition = value,
            "qos" => self.qos = value,
            "max_age" => self.max_age = value as Time,
            "max_time_limit" => self.max_time_limit = value as Time,
            "estimate" => self.estimate = value != 0.0,
            other => return Err(format!("unknown key {other:?} ({})", Weights::KEYS)),
        }
        Ok(())
    }
}

/// How pending jobs are ordered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Policy {
    /// First come, first served (submit time).
    Fcfs,
    /// Shortest (requested) job first, then submit time.
    Sjf,
    /// Carastan-Santos & de Camargo's F1: log10(r)·n + 870·log10(s), smallest first.
    F1,
    /// Slurm-style multifactor with these weights.
    Multifactor(Weights),
}

impl Policy {
    /// Parses a policy name: `fcfs`, `sjf`, `f1`, `multifactor` (Slurm-like weights),
    /// `default` (Tandem's production weights) or `default-v1` (the earlier default).
    pub fn parse(name: &str) -> Option<Policy> {
        Some(match name {
            "fcfs" => Policy::Fcfs,
            "sjf" => Policy::Sjf,
            "f1" => Policy::F1,
            "multifactor" => Policy::Multifactor(Weights::slurm()),
            "default" => Policy::Multifactor(Weights::default_production()),
            "default-v1" => Policy::Multifactor(Weights::default_v1()),
            _ => return None,
        })
    }
}

/// Decayed usage per account and per user within an account, for fair-share. The caller
/// accrues usage as jobs run ([`FairShare::accrue`]) and decays it with a half-life
/// ([`FairShare::decay`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FairShare {
    usage: FxHashMap<String, f64>,
    total: f64,
    /// Per user within an account, keyed [`user_key`].
    #[serde(default)]
    users: FxHashMap<String, f64>,
}

/// The key of a user's usage within an account.
fn user_key(account: &str, user: &str) -> String {
    format!("{account}\u{1f}{user}")
}

impl FairShare {
    /// Adds `amount` (resource-seconds) of usage to `account`, and to `user` within it.
    pub fn accrue(&mut self, account: &str, user: &str, amount: f64) {
        *self.usage.entry(account.to_string()).or_default() += amount;
        *self.users.entry(user_key(account, user)).or_default() += amount;
        self.total += amount;
    }

    /// A user's decayed usage within an account.
    pub fn user_usage(&self, account: &str, user: &str) -> f64 {
        self.users.get(&user_key(account, user)).copied().unwrap_or(0.0)
    }

    /// Slurm's classic fair-share factor of a user within an account: 2^(-(the user's usage
    /// share)/(the account's shares share x the user's share of the account's users' shares)).
    /// Two users sharing an account each get half its shares: the heavier user's jobs wait.
    pub fn user_factor(&self, account: &str, user: &str, shares: (u32, u32), user_shares: (u32, u32)) -> f64 {
        if self.total <= 0.0 {
            return 1.0;
        }
        let u = self.user_usage(account, user) / self.total;
        let s = shares.0.max(1) as f64 / shares.1.max(1) as f64 * (user_shares.0.max(1) as f64 / user_shares.1.max(1) as f64);
        2f64.powf(-u / s)
    }

    /// Decays all usage by `elapsed` seconds with the given half-life.
    pub fn decay(&mut self, elapsed: Time, half_life: Time) {
        if elapsed <= 0 || half_life <= 0 {
            return;
        }
        let f = 0.5f64.powf(elapsed as f64 / half_life as f64);
        for v in self.usage.values_mut().chain(self.users.values_mut()) {
            *v *= f;
        }
        self.total *= f;
    }

    /// An account's decayed usage.
    pub fn usage(&self, account: &str) -> f64 {
        self.usage.get(account).copied().unwrap_or(0.0)
    }

    /// All accounts' decayed usage together.
    pub fn total(&self) -> f64 {
        self.total
    }

    /// Each account with usage, and its usage (in no particular order).
    pub fn accounts(&self) -> impl Iterator<Item = (&str, f64)> {
        self.usage.iter().map(|(a, u)| (a.as_str(), *u))
    }

    /// Slurm's classic fair-share factor: 2^(-(usage share)/(shares share)).
    pub fn factor(&self, account: &str, shares: u32, total_shares: u32) -> f64 {
        if self.total <= 0.0 {
            return 1.0;
        }
        let u = self.usage.get(account).copied().unwrap_or(0.0) / self.total;
        let s = shares.max(1) as f64 / total_shares.max(1) as f64;
        2f64.powf(-u / s)
    }
}

/// What the starvation guard adds: more than all time-dependent and shape factors together,
/// less than one step of QOS or partition tier at their default weights.
pub const STARVING_BOOST: f64 = 100_000.0;

/// The most a starving job's wait adds on top of [`STARVING_BOOST`] (one point a minute, up to
/// about 555 days): below one step of QOS at its default weight.
pub const STARVING_SPAN: f64 = 800_000.0;

/// One job's priority, factor by factor (what `tandem priority` / `sprio` shows).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Breakdown {
    /// Weighted age contribution.
    pub age: f64,
    /// Weighted fair-share contribution.
    pub fairshare: f64,
    /// Weighted job-size contribution.
    pub job_size: f64,
    /// Weighted time-limit contribution.
    pub time_limit: f64,
    /// Weighted expansion-factor contribution.
    pub xfactor: f64,
    /// Starvation-guard boost (0 or the guard's fixed amount).
    pub starving: f64,
    /// Weighted partition contribution.
    pub partition: f64,
    /// Weighted QOS contribution.
    pub qos: f64,
    /// Nice (subtracted).
    pub nice: f64,
    /// The sum.
    pub total: f64,
}

/// Everything priority depends on besides the job itself.
pub(crate) struct PriorityContext<'a> {
    pub now: Time,
    pub config: &'a ClusterConfig,
    pub fairshare: &'a FairShare,
    pub total_nodes: u32,
    pub max_part_tier: u32,
    pub max_qos: u32,
    pub total_shares: u32,
    /// With associations configured: each (account, user)'s shares, and each account's users'
    /// shares summed (a user's fair share is their part of their account's).
    pub assoc_shares: Option<(FxHashMap<(&'a str, &'a str), u32>, FxHashMap<&'a str, u32>)>,
}

impl<'a> PriorityContext<'a> {
    /// The associations' shares, when any are configured ([`PriorityContext::assoc_shares`]).
    pub fn assoc_shares(config: &'a ClusterConfig) -> Option<(FxHashMap<(&'a str, &'a str), u32>, FxHashMap<&'a str, u32>)> {
        if config.assocs.is_empty() {
            return None;
        }
        let (mut pairs, mut sums) = (FxHashMap::default(), FxHashMap::default());
        for a in &config.assocs {
            pairs.insert((a.account.as_str(), a.user.as_str()), a.shares.max(1));
            *sums.entry(a.account.as_str()).or_default() += a.shares.max(1);
        }
        Some((pairs, sums))
    }

    /// A job's fair-share factor: its user's within the account where the user has an
    /// association, else its account's.
    pub fn fairshare_factor(&self, job: &JobRequest) -> f64 {
        let shares = (self.config.shares(&job.account), self.total_shares);
        if let Some((pairs, sums)) = &self.assoc_shares
            && let Some(&s) = pairs.get(&(job.account.as_str(), job.user.as_str()))
        {
            let sum = sums.get(job.account.as_str()).copied().unwrap_or(s);
            return self.fairshare.user_factor(&job.account, &job.user, shares, (s, sum));
        }
        self.fairshare.factor(&job.account, shares.0, shares.1)
    }
}

impl PriorityContext<'_> {
    /// `est` is the run time the pass plans with for this job (its limit, or its prediction).
    pub fn breakdown(&self, w: &Weights, job: &JobRequest, nodes: u32, est: Time) -> Breakdown {
        let age = ((self.now - job.eligible_time()).max(0) as f64 / w.max_age.max(1) as f64).min(1.0);
        let fs = self.fairshare_factor(job);
        let share = (nodes as f64 / self.total_nodes.max(1) as f64).min(1.0);
        let size = if w.favor_small { 1.0 - share } else { share };
        let limit = if w.estimate { est } else { job.time_limit }.max(1) as f64;
        let tl = 1.0 - (limit.ln() / (w.max_time_limit.max(2) as f64).ln()).clamp(0.0, 1.0);
        let wait = (self.now - job.eligible_time()).max(0) as f64;
        let cap = w.xfactor_cap.max(1.0 + 1e-9);
        let xf = (((wait + limit) / limit).min(cap) - 1.0) / (cap - 1.0);
        let part = self.config.partition(job.partition.as_deref()).map_or(0, |p| p.priority_tier);
        let part = if self.max_part_tier == 0 { 0.0 } else { part as f64 / self.max_part_tier as f64 };
        let qos = self.config.qos(job.qos.as_deref()).map_or(0, |q| q.priority);
        let qos = if self.max_qos == 0 { 0.0 } else { qos as f64 / self.max_qos as f64 };
        let starving = w.starve_after > 0 && wait as Time > w.starve_after;
        let mut b = Breakdown {
            age: w.age * age,
            fairshare: w.fairshare * fs,
            job_size: w.job_size * size,
            time_limit: w.time_limit * tl,
            xfactor: w.xfactor * xf,
            starving: if starving { STARVING_BOOST + (wait / 60.0).min(STARVING_SPAN) } else { 0.0 },
            partition: w.partition * part,
            qos: w.qos * qos,
            nice: job.nice as f64,
            total: 0.0,
        };
        if starving {
            // Starving jobs go oldest first, ahead of every job that is not: their other
            // factors no longer count (they would let a short job overtake one starving longer).
            (b.age, b.fairshare, b.job_size, b.time_limit, b.xfactor) = (0.0, 0.0, 0.0, 0.0, 0.0);
        }
        b.total = b.age + b.fairshare + b.job_size + b.time_limit + b.xfactor + b.starving + b.partition + b.qos - b.nice;
        b
    }
}

/// Sort key: smaller runs first. Ties fall to arrival order, then job id.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub(crate) struct Key(pub f64, pub f64);

/// Processors a job asks for (what F1's `n` counts).
pub(crate) fn processors(job: &JobRequest) -> f64 {
    let s = &job.shape;
    let nodes = s.nodes_min.max(1);
    (s.tasks_per_node(nodes) * nodes * s.cpus_per_task.max(1)) as f64
}

/// `est`: the run time the pass plans with for the job (its limit, or its prediction).
pub(crate) fn key(policy: &Policy, ctx: &PriorityContext, job: &JobRequest, nodes: u32, est: Time) -> Key {
    match policy {
        Policy::Fcfs => Key(job.submit_time as f64, 0.0),
        Policy::Sjf => Key(job.time_limit as f64, job.submit_time as f64),
        Policy::F1 => {
            let r = job.time_limit as f64;
            let s = job.submit_time as f64;
            let r = if r > 0.0 { r } else { 0.1 };
            let s = if s > 0.0 { s } else { 0.1 };
            Key(r.log10() * processors(job) + 870.0 * s.log10(), 0.0)
        }
        Policy::Multifactor(w) => Key(-ctx.breakdown(w, job, nodes, est).total, 0.0),
    }
}
