//! Cluster configuration that scheduling depends on: partitions, QOS and accounts.

use serde::{Deserialize, Serialize};

use crate::Time;
use crate::accounting::{Assoc, Enforce, Limits, Unlisted, User};

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
    /// Only these accounts may use it (Slurm's AllowAccounts; `None`: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_accounts: Option<Vec<String>>,
    /// Only these QOS may use it (AllowQos; `None`: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_qos: Option<Vec<String>>,
    /// Only members of these Unix groups may use it (AllowGroups; `None`: all). The daemon
    /// checks membership; root is always allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_groups: Option<Vec<String>>,
}

impl Partition {
    /// A partition open to all.
    pub fn new(name: &str, default_time: Time, max_time: Time, priority_tier: u32) -> Partition {
        Partition { name: name.into(), default_time, max_time, priority_tier, allow_accounts: None, allow_qos: None, allow_groups: None }
    }
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
    /// What preemption does to this QOS's batch jobs (Slurm's per-QOS `PreemptMode`).
    #[serde(default)]
    pub preempt_mode: PreemptMode,
    /// Limits (`max_jobs` and `max_submit_jobs` count per user: Slurm's MaxJobsPerUser and
    /// MaxSubmitJobsPerUser).
    #[serde(default, skip_serializing_if = "Limits::is_empty")]
    pub limits: Limits,
    /// Description (`sacctmgr`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
}

impl Qos {
    /// The default QOS: `normal`, priority 0, tier 0, no limits.
    pub fn normal() -> Qos {
        Qos {
            name: "normal".into(),
            priority: 0,
            preempt_tier: 0,
            grace_time: 60,
            preempt_mode: PreemptMode::Requeue,
            limits: Limits::default(),
            description: "Normal QOS default".into(),
        }
    }
}

/// How a preempted job of a QOS makes room (Slurm's `PreemptMode`, per QOS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PreemptMode {
    /// Signalled, then after its grace time killed and put back in the queue.
    #[default]
    Requeue,
    /// Frozen at once, keeping its memory and GPUs and lending its CPUs, and thawed once the
    /// job it was suspended for has started and its CPUs are free again. Service replicas are
    /// never suspended: they drain and are replaced, as with `requeue`.
    Suspend,
}

impl PreemptMode {
    /// Slurm's upper-case name (`REQUEUE`, `SUSPEND`).
    pub fn slurm_name(self) -> &'static str {
        match self {
            PreemptMode::Requeue => "REQUEUE",
            PreemptMode::Suspend => "SUSPEND",
        }
    }

    /// Parses Slurm's words, any case (`requeue`, `suspend`); `None` for anything else.
    pub fn parse(s: &str) -> Option<PreemptMode> {
        match s.to_ascii_lowercase().as_str() {
            "requeue" => Some(PreemptMode::Requeue),
            "suspend" => Some(PreemptMode::Suspend),
            _ => None,
        }
    }
}

/// An account with fair-share shares (and its own association: QOS, limits for all its users
/// together).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Account {
    /// Name.
    pub name: String,
    /// Fair-share shares (relative weight).
    pub shares: u32,
    /// The parent account (`None`: `root`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Description (`sacctmgr`; the name when not given).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Organization (`sacctmgr`; the name when not given).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub organization: String,
    /// QOS its users may use (empty: the parent's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub qos: Vec<String>,
    /// The QOS its users' jobs get without `-q` (`None`: the parent's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_qos: Option<String>,
    /// Limits of the account (Grp*: its users together; Max*: each association below it that
    /// sets none).
    #[serde(default, skip_serializing_if = "Limits::is_empty")]
    pub limits: Limits,
}

impl Account {
    /// An account of `shares` under `root`, with nothing else set.
    pub fn new(name: &str, shares: u32) -> Account {
        Account {
            name: name.into(),
            shares,
            parent: None,
            description: String::new(),
            organization: String::new(),
            qos: Vec::new(),
            default_qos: None,
            limits: Limits::default(),
        }
    }
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
    /// Users of the accounting.
    #[serde(default)]
    pub users: Vec<User>,
    /// Users' associations with accounts.
    #[serde(default)]
    pub assocs: Vec<Assoc>,
    /// What is enforced.
    #[serde(default = "Enforce::none")]
    pub enforce: Enforce,
    /// The root association's QOS (inherited by accounts that list none); `None`: every QOS of
    /// the lowest preemption tier.
    #[serde(default)]
    pub root_qos: Option<Vec<String>>,
    /// What becomes of users with no association.
    #[serde(default)]
    pub unlisted: Unlisted,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            partitions: vec![Partition::new("batch", 3600, Time::MAX / 4, 1)],
            qos: vec![Qos::normal()],
            accounts: Vec::new(),
            users: Vec::new(),
            assocs: Vec::new(),
            enforce: Enforce::none(),
            root_qos: None,
            unlisted: Unlisted::OwnAccount,
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
        self.account(account).map_or(1, |a| a.shares.max(1))
    }

    /// The account named `name`.
    pub fn account(&self, name: &str) -> Option<&Account> {
        self.accounts.iter().find(|a| a.name == name)
    }

    /// The account and its ancestors, nearest first (at most 64: a loop is cut).
    pub fn lineage(&self, name: &str) -> Vec<&Account> {
        let mut out: Vec<&Account> = Vec::new();
        let mut next = self.account(name);
        while let Some(a) = next {
            if out.len() >= 64 || out.iter().any(|o| o.name == a.name) {
                break;
            }
            out.push(a);
            next = a.parent.as_deref().filter(|p| *p != "root").and_then(|p| self.account(p));
        }
        out
    }

    /// The user named `name`, if listed.
    pub fn user(&self, name: &str) -> Option<&User> {
        self.users.iter().find(|u| u.name == name)
    }

    /// Whether `name` has any association (or a user record) of their own.
    pub fn listed(&self, name: &str) -> bool {
        self.user(name).is_some() || self.assocs.iter().any(|a| a.user == name)
    }

    /// The root association's QOS: as configured, else every QOS of the lowest preemption tier
    /// (which preempts nobody).
    pub fn root_qos(&self) -> Vec<String> {
        if let Some(q) = &self.root_qos {
            return q.clone();
        }
        let low = self.qos.iter().map(|q| q.preempt_tier).min().unwrap_or(0);
        self.qos.iter().filter(|q| q.preempt_tier == low).map(|q| q.name.clone()).collect()
    }

    /// The QOS an account's users may use: its own list, else its parent's, else the root's.
    pub fn account_qos(&self, account: &str) -> Vec<String> {
        self.lineage(account).into_iter().find(|a| !a.qos.is_empty()).map_or_else(|| self.root_qos(), |a| a.qos.clone())
    }

    /// The default QOS of an account's users: its own, else its parent's, else the cluster's
    /// default QOS when the account may use it, else the first the account may use.
    pub fn account_default_qos(&self, account: &str) -> Option<String> {
        if let Some(q) = self.lineage(account).into_iter().find_map(|a| a.default_qos.clone()) {
            return Some(q);
        }
        let allowed = self.account_qos(account);
        let first = self.qos.first().map(|q| q.name.clone());
        match first {
            Some(f) if allowed.contains(&f) => Some(f),
            _ => allowed.into_iter().next().or(first),
        }
    }

    /// The account a job of `user` without `-A` charges: the user's default account, else the
    /// account of their first association, else (for users with none, unless they are
    /// refused) an account of their own name.
    pub fn default_account(&self, user: &str) -> Option<String> {
        if let Some(u) = self.user(user) {
            return Some(u.default_account.clone());
        }
        if let Some(a) = self.assocs.iter().find(|a| a.user == user) {
            return Some(a.account.clone());
        }
        match self.unlisted {
            Unlisted::OwnAccount => Some(user.to_string()),
            Unlisted::Refuse => None,
        }
    }

    /// The association of `user` with `account`, resolved (QOS and defaults inherited from
    /// the account), if the user may charge it.
    pub fn association(&self, user: &str, account: &str) -> Option<Association> {
        if let Some(a) = self.assocs.iter().find(|a| a.user == user && a.account == account) {
            return Some(Association {
                account: a.account.clone(),
                user: a.user.clone(),
                shares: a.shares.max(1),
                qos: a.qos.clone().unwrap_or_else(|| self.account_qos(account)),
                default_qos: a.default_qos.clone().or_else(|| self.account_default_qos(account)),
                limits: a.limits.clone(),
                implicit: false,
            });
        }
        // A listed user with no row for this account: only their default account when it names
        // an account with no rows at all (a [[user]] whose default account was not listed).
        let own = match self.user(user) {
            Some(u) => u.default_account == account && !self.assocs.iter().any(|a| a.user == user),
            None => !self.listed(user) && self.unlisted == Unlisted::OwnAccount && account == user,
        };
        own.then(|| Association {
            account: account.to_string(),
            user: user.to_string(),
            shares: 1,
            qos: self.account_qos(account),
            default_qos: self.account_default_qos(account),
            limits: Limits::default(),
            implicit: true,
        })
    }

    /// Every association of `user`, resolved.
    pub fn associations_of(&self, user: &str) -> Vec<Association> {
        let mut accounts: Vec<String> = self.assocs.iter().filter(|a| a.user == user).map(|a| a.account.clone()).collect();
        if accounts.is_empty()
            && let Some(d) = self.default_account(user)
        {
            accounts.push(d);
        }
        accounts.iter().filter_map(|a| self.association(user, a)).collect()
    }
}

/// A user's association with an account, with what it inherits filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Association {
    /// Account.
    pub account: String,
    /// User.
    pub user: String,
    /// Shares within the account.
    pub shares: u32,
    /// QOS it may use.
    pub qos: Vec<String>,
    /// QOS of a job without `-q`.
    pub default_qos: Option<String>,
    /// Its own limits (the account's Grp* limits apply besides).
    pub limits: Limits,
    /// Made for a user with no association listed (their own account), not stored.
    pub implicit: bool,
}
