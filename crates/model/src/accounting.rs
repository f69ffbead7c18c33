//! Associations, as Slurm's accounting keeps them: who may charge which account, with which QOS,
//! and the limits of each association and QOS (`AccountingStorageEnforce`,
//! `sacctmgr`'s objects). Plain data and the pure rules that read it; the controller decides
//! with them at submission and the scheduler at each pass.

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::Time;

/// Trackable resources of a limit (Slurm's TRES: `cpu`, `mem`, `node`, `gres/gpu`); `None` is
/// no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tres {
    /// CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u64>,
    /// Memory, MiB (Slurm counts TRES memory in megabytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem: Option<u64>,
    /// Nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u64>,
    /// GPUs (`gres/gpu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u64>,
}

/// A TRES string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadValue(pub String);

impl Tres {
    /// Whether no resource is limited.
    pub fn is_empty(&self) -> bool {
        *self == Tres::default()
    }

    /// Reads Slurm's form, `cpu=4,mem=10G,node=2,gres/gpu=8` (memory in MiB unless it has a
    /// K, M, G or T suffix; `-1` clears a resource, as in `sacctmgr modify`).
    pub fn parse(s: &str) -> Result<Tres, BadValue> {
        let mut t = Tres::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| BadValue(format!("invalid TRES {part:?}: expected name=count (cpu, mem, node, gres/gpu)")))?;
            let clear = v.trim() == "-1";
            let n = if clear { None } else { Some(Self::count(k, v.trim())?) };
            match k.trim().to_ascii_lowercase().as_str() {
                "cpu" => t.cpu = n,
                "mem" => t.mem = n,
                "node" => t.node = n,
                "gres/gpu" | "gpu" => t.gpu = n,
                other => {
                    return Err(BadValue(format!("invalid TRES name {other:?}: this cluster tracks cpu, mem, node and gres/gpu")));
                }
            }
        }
        Ok(t)
    }

    fn count(k: &str, v: &str) -> Result<u64, BadValue> {
        let bad = || BadValue(format!("invalid TRES count {v:?} for {k}: a non-negative whole number"));
        if k.trim().eq_ignore_ascii_case("mem") {
            let (num, mult) = match v.char_indices().last() {
                Some((i, c)) if c.is_ascii_alphabetic() => {
                    let m = match c.to_ascii_uppercase() {
                        'K' => return v[..i].parse::<u64>().map(|x| x.div_ceil(1024)).map_err(|_| bad()),
                        'M' => 1,
                        'G' => 1024,
                        'T' => 1024 * 1024,
                        _ => return Err(bad()),
                    };
                    (&v[..i], m)
                }
                _ => (v, 1),
            };
            return num.parse::<u64>().ok().and_then(|x| x.checked_mul(mult)).ok_or_else(bad);
        }
        v.parse::<u64>().map_err(|_| bad())
    }

    /// Sets every resource `other` names (an update: `sacctmgr modify ... set GrpTRES=gres/gpu=4`
    /// keeps the CPU limit). A cleared resource (`-1`) is given by `clear`.
    pub fn merge(&mut self, other: &Tres, clear: &Tres) {
        for (mine, theirs, cleared) in [
            (&mut self.cpu, other.cpu, clear.cpu),
            (&mut self.mem, other.mem, clear.mem),
            (&mut self.node, other.node, clear.node),
            (&mut self.gpu, other.gpu, clear.gpu),
        ] {
            if theirs.is_some() {
                *mine = theirs;
            }
            if cleared.is_some() {
                *mine = None;
            }
        }
    }

    /// The resources `s` clears with `-1`, marked `Some(0)`.
    pub fn cleared(s: &str) -> Tres {
        let mut t = Tres::default();
        for part in s.split(',') {
            if let Some((k, v)) = part.split_once('=')
                && v.trim() == "-1"
            {
                match k.trim().to_ascii_lowercase().as_str() {
                    "cpu" => t.cpu = Some(0),
                    "mem" => t.mem = Some(0),
                    "node" => t.node = Some(0),
                    "gres/gpu" | "gpu" => t.gpu = Some(0),
                    _ => {}
                }
            }
        }
        t
    }
}

impl fmt::Display for Tres {
    /// Slurm's form, in Slurm's order (`cpu=4,mem=1024M,node=2,gres/gpu=8`); empty when nothing
    /// is limited.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(c) = self.cpu {
            parts.push(format!("cpu={c}"));
        }
        if let Some(m) = self.mem {
            parts.push(format!("mem={m}M"));
        }
        if let Some(n) = self.node {
            parts.push(format!("node={n}"));
        }
        if let Some(g) = self.gpu {
            parts.push(format!("gres/gpu={g}"));
        }
        f.write_str(&parts.join(","))
    }
}

/// What a job or a set of jobs holds, in TRES terms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Jobs.
    pub jobs: u64,
    /// CPUs.
    pub cpu: u64,
    /// Memory, MiB.
    pub mem: u64,
    /// Nodes.
    pub node: u64,
    /// GPUs.
    pub gpu: u64,
}

impl Usage {
    /// Adds `o`.
    pub fn add(&mut self, o: &Usage) {
        self.jobs += o.jobs;
        self.cpu += o.cpu;
        self.mem += o.mem;
        self.node += o.node;
        self.gpu += o.gpu;
    }

    /// The first resource of `limit` that `self + more` would exceed.
    pub fn exceeds(&self, more: &Usage, limit: &Tres) -> Option<TresKind> {
        let over = |used: u64, add: u64, lim: Option<u64>| lim.is_some_and(|l| used.saturating_add(add) > l);
        if over(self.gpu, more.gpu, limit.gpu) {
            return Some(TresKind::Gpu);
        }
        if over(self.cpu, more.cpu, limit.cpu) {
            return Some(TresKind::Cpu);
        }
        if over(self.mem, more.mem, limit.mem) {
            return Some(TresKind::Mem);
        }
        if over(self.node, more.node, limit.node) {
            return Some(TresKind::Node);
        }
        None
    }
}

/// One kind of trackable resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TresKind {
    /// CPUs.
    Cpu,
    /// Memory.
    Mem,
    /// Nodes.
    Node,
    /// GPUs (`gres/gpu`).
    Gpu,
}

/// The limits of an association or a QOS (Slurm's names in `sacctmgr`). On a QOS, `max_jobs`,
/// `max_submit_jobs` and `max_tres_per_user` count per user (MaxJobsPerUser,
/// MaxSubmitJobsPerUser, MaxTRESPerUser); on an association they count for the association.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Running jobs at once (MaxJobs; a QOS's MaxJobsPerUser).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_jobs: Option<u32>,
    /// Jobs pending or running at once (MaxSubmitJobs; a QOS's MaxSubmitJobsPerUser).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_submit_jobs: Option<u32>,
    /// The longest time limit of one job, seconds (MaxWall).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_wall: Option<Time>,
    /// What one job may hold (MaxTRESPerJob, or MaxTRES).
    #[serde(skip_serializing_if = "Tres::is_empty")]
    pub max_tres_per_job: Tres,
    /// What one user's running jobs may hold together (a QOS's MaxTRESPerUser).
    #[serde(skip_serializing_if = "Tres::is_empty")]
    pub max_tres_per_user: Tres,
    /// Running jobs of the association (and those below it) or QOS together (GrpJobs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grp_jobs: Option<u32>,
    /// Pending or running jobs together (GrpSubmitJobs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grp_submit_jobs: Option<u32>,
    /// What running jobs together may hold (GrpTRES).
    #[serde(skip_serializing_if = "Tres::is_empty")]
    pub grp_tres: Tres,
}

impl Limits {
    /// Whether nothing is limited.
    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }
}

/// Slurm's administrator levels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum AdminLevel {
    /// An ordinary user.
    #[default]
    None,
    /// Sees everything, holds and releases anyone's jobs, changes accounting.
    Operator,
    /// All of an operator's rights, and may make administrators.
    Administrator,
}

impl AdminLevel {
    /// Slurm's name.
    pub fn name(self) -> &'static str {
        match self {
            AdminLevel::None => "None",
            AdminLevel::Operator => "Operator",
            AdminLevel::Administrator => "Administrator",
        }
    }

    /// Reads a level as `sacctmgr` and `tandem.toml` write it (any case; `admin` for
    /// Administrator).
    pub fn parse(s: &str) -> Option<AdminLevel> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Some(AdminLevel::None),
            "operator" => Some(AdminLevel::Operator),
            "administrator" | "admin" => Some(AdminLevel::Administrator),
            _ => None,
        }
    }
}

/// A user of the accounting (`sacctmgr show user`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// Login name.
    pub name: String,
    /// The account a job without `-A` charges.
    pub default_account: String,
    /// Administrator level.
    #[serde(default)]
    pub admin_level: AdminLevel,
    /// Accounts this user coordinates: may add, change and remove users of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub coordinator: Vec<String>,
}

/// A user's association with an account (`sacctmgr show assoc`): what the user may charge it
/// with. QOS and default QOS unset are the account's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assoc {
    /// Account.
    pub account: String,
    /// User.
    pub user: String,
    /// Fair-share shares of the user within the account.
    #[serde(default = "one")]
    pub shares: u32,
    /// QOS the user may use through this account; `None`: the account's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<Vec<String>>,
    /// The QOS a job without `-q` gets; `None`: the account's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_qos: Option<String>,
    /// Limits of this user in this account.
    #[serde(default, skip_serializing_if = "Limits::is_empty")]
    pub limits: Limits,
}

fn one() -> u32 {
    1
}

/// What `AccountingStorageEnforce` turns on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforce {
    /// A job's user must have an association with its account.
    pub associations: bool,
    /// Association and QOS limits hold.
    pub limits: bool,
    /// A job's QOS must be one its association allows.
    pub qos: bool,
}

impl Default for Enforce {
    /// All three: a cluster with nothing configured still keeps users to their own account and
    /// to QOS that preempt nobody.
    fn default() -> Self {
        Enforce { associations: true, limits: true, qos: true }
    }
}

impl Enforce {
    /// Nothing enforced (Slurm's default, and the simulator's).
    pub fn none() -> Enforce {
        Enforce { associations: false, limits: false, qos: false }
    }

    /// Slurm's `AccountingStorageEnforce` words, comma-separated.
    pub fn words(&self) -> String {
        let mut w = Vec::new();
        if self.associations {
            w.push("associations");
        }
        if self.limits {
            w.push("limits");
        }
        if self.qos {
            w.push("qos");
        }
        if w.is_empty() { "none".into() } else { w.join(",") }
    }
}

/// What becomes of users with no association of their own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unlisted {
    /// Each gets an association with an account of their own name, under `root`, with the
    /// root's QOS and no limits (a workstation or a small lab needs no setup).
    #[default]
    OwnAccount,
    /// They are refused, as Slurm refuses users not in its database.
    Refuse,
}
