//! Cluster configuration that scheduling depends on: partitions, QOS and accounts.

use serde::{Deserialize, Serialize};

use crate::Time;

/// A partition (Slurm's queue of nodes with limits).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    /// Name.
    pub name: String,
    /// Time limit given to jobs that set none.
    pub default_time: Time,
    /// Largest time limit a job may ask for.
    pub max_time: Time,
    /// Priority tier: jobs of a higher tier are considered first (Slurm's PriorityTier).
    pub priority_tier: u32,
}

/// A quality of service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Qos {
    /// Name.
    pub name: String,
    /// Priority (normalised against the largest QOS priority for the multifactor QOS factor).
    pub priority: u32,
    /// Preemption tier: work of a higher tier may preempt work of a strictly lower tier.
    pub preempt_tier: u32,
    /// Grace time between the checkpoint signal and the kill when preempted, seconds.
    pub grace_time: Time,
    /// Most running jobs per user, if limited.
    pub max_jobs_per_user: Option<u32>,
    /// Most GPUs held per user, if limited.
    pub max_gpus_per_user: Option<u32>,
}

impl Qos {
    /// The default QOS: `normal`, priority 0, tier 0, no limits.
    pub fn normal() -> Qos {
        Qos { name: "normal".into(), priority: 0, preempt_tier: 0, grace_time: 60, max_jobs_per_user: None, max_gpus_per_user: None }
    }
}

/// An account with fair-share shares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Account {
    /// Name.
    pub name: String,
    /// Fair-share shares (relative weight).
    pub shares: u32,
}

/// Partitions, QOS and accounts together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterConfig {
    /// Partitions; the first is the default one.
    pub partitions: Vec<Partition>,
    /// QOS; the first is the default one.
    pub qos: Vec<Qos>,
    /// Accounts. Accounts not listed get one share.
    pub accounts: Vec<Account>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            partitions: vec![Partition { name: "batch".into(), default_time: 3600, max_time: Time::MAX / 4, priority_tier: 1 }],
            qos: vec![Qos::normal()],
            accounts: Vec::new(),
        }
    }
}

impl ClusterConfig {
    /// The partition a job asking for `name` gets (the default one for `None`).
    pub fn partition(&self, name: Option<&str>) -> Option<&Partition> {
        match name {
            None => self.partitions.first(),
            Some(n) => self.partitions.iter().find(|p| p.name == n),
        }
    }

    /// The QOS a job asking for `name` gets (the default one for `None`).
    pub fn qos(&self, name: Option<&str>) -> Option<&Qos> {
        match name {
            None => self.qos.first(),
            Some(n) => self.qos.iter().find(|q| q.name == n),
        }
    }

    /// Shares of an account (1 when it is not configured).
    pub fn shares(&self, account: &str) -> u32 {
        self.accounts.iter().find(|a| a.name == account).map_or(1, |a| a.shares.max(1))
    }
}
