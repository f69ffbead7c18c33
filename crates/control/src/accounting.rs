//! Associations and limits at the controller (Slurm's `AccountingStorageEnforce` and
//! `sacctmgr`): which account and QOS a submission charges, the limits checked at submission
//! (MaxSubmitJobs, MaxWall, MaxTRESPerJob: refused with Slurm's words), who is an operator or
//! an administrator, and `sacctmgr`'s changes (add, modify, delete of accounts, users and
//! QOS), checked against the caller's rights. The limits that hold at scheduling are the
//! scheduler's (`sched::Limits`).
//!
//! What wins after a restart: `tandem.toml`'s `[[qos]]`, `[[account]]`, `[[user]]` and
//! `[[association]]` seed an empty state; once `sacctmgr` has changed anything, the state kept
//! in the database is the accounting, and the file's sections are read only by a new cluster.

use model::{Account, AdminLevel, Assoc, ClusterConfig, JobRequest, Limits, MemRequest, Qos, Time, Tres, User};
use serde::{Deserialize, Serialize};

use crate::{Controller, Refused};

/// Slurm's refusal of a job over an association or QOS limit (ESLURM_ACCOUNTING_POLICY).
pub const POLICY: &str = "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)";
/// Slurm's refusal of an account the user may not charge (ESLURM_INVALID_ACCOUNT).
pub const INVALID_ACCOUNT: &str = "Invalid account or account/partition combination specified";
/// Slurm's refusal of a QOS the association does not allow (ESLURM_INVALID_QOS).
pub const INVALID_QOS: &str = "Invalid qos specification";
/// Slurm's refusal of a negative nice by an ordinary user (ESLURM_INVALID_NICE).
pub const INVALID_NICE: &str = "Invalid --nice value";
/// What slurmdbd answers a caller without the right.
pub const NO_PRIVILEGE: &str = "Your user doesn't have privilege to perform this action";

/// The accounting as `sacctmgr` changes it and the database keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Accounting {
    /// QOS.
    pub qos: Vec<Qos>,
    /// Accounts.
    pub accounts: Vec<Account>,
    /// Users.
    pub users: Vec<User>,
    /// Associations of users with accounts.
    pub assocs: Vec<Assoc>,
}

impl Accounting {
    /// The accounting part of a cluster configuration.
    pub fn of(c: &ClusterConfig) -> Accounting {
        Accounting { qos: c.qos.clone(), accounts: c.accounts.clone(), users: c.users.clone(), assocs: c.assocs.clone() }
    }

    /// Puts it into a cluster configuration.
    pub fn install(self, c: &mut ClusterConfig) {
        c.qos = self.qos;
        c.accounts = self.accounts;
        c.users = self.users;
        c.assocs = self.assocs;
    }
}

/// What `sacctmgr` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// `add` (`create`).
    Add,
    /// `modify` (`update`).
    Modify,
    /// `delete` (`remove`).
    Delete,
}

/// What it changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Entity {
    /// Accounts.
    Account,
    /// Users (and their associations).
    User,
    /// QOS.
    Qos,
}

/// How a setting changes a list (`QOS=a,b`, `QOS+=c`, `QOS-=a`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SetOp {
    /// `=`.
    Set,
    /// `+=`.
    Add,
    /// `-=`.
    Remove,
}

/// One `key=value` of a `sacctmgr` command, its key in Slurm's canonical spelling (the client's
/// keyword parser resolves abbreviations and case).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    /// Canonical key (`GrpTRES`, `DefaultAccount`, ...).
    pub key: String,
    /// `=`, `+=` or `-=`.
    pub op: SetOp,
    /// Value as given.
    pub value: String,
}

/// One `sacctmgr add|modify|delete` command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcctChange {
    /// Add, modify or delete.
    pub verb: Verb,
    /// Of what.
    pub entity: Entity,
    /// The conditions (`where ...`, and for `add` the names and `Account=`).
    pub filter: Vec<Setting>,
    /// What to set (`set ...`; for `add`, every other `key=value`).
    pub set: Vec<Setting>,
}

/// The keys each entity takes in `set` (canonical spellings).
pub const ACCOUNT_KEYS: &[&str] = &[
    "Description",
    "Organization",
    "Parent",
    "Fairshare",
    "QOS",
    "DefaultQOS",
    "MaxJobs",
    "MaxSubmitJobs",
    "MaxWall",
    "MaxTRESPerJob",
    "GrpJobs",
    "GrpSubmitJobs",
    "GrpTRES",
];
/// Keys of a user (and of the user's associations).
pub const USER_KEYS: &[&str] = &[
    "DefaultAccount",
    "AdminLevel",
    "Fairshare",
    "QOS",
    "DefaultQOS",
    "MaxJobs",
    "MaxSubmitJobs",
    "MaxWall",
    "MaxTRESPerJob",
    "GrpJobs",
    "GrpSubmitJobs",
    "GrpTRES",
];
/// Keys of a QOS.
pub const QOS_KEYS: &[&str] = &[
    "Description",
    "Priority",
    "PreemptTier",
    "PreemptMode",
    "GraceTime",
    "MaxJobsPerUser",
    "MaxSubmitJobsPerUser",
    "MaxWall",
    "MaxTRESPerJob",
    "MaxTRESPerUser",
    "GrpJobs",
    "GrpSubmitJobs",
    "GrpTRES",
];
/// Keys of a `where` (and the names of `add`).
pub const FILTER_KEYS: &[&str] = &["Name", "Names", "Account", "Accounts", "User", "Users", "Cluster", "Clusters", "Parent"];

/// A name of an account, user or QOS: 1 to 64 of `A-Za-z0-9_.-`, not starting with `-`.
fn valid_name(kind: &str, n: &str) -> Result<(), Refused> {
    if n.is_empty() || n.len() > 64 || n.starts_with('-') || !n.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')) {
        return Err(Refused::Invalid(format!("invalid {kind} name {:?}: 1 to 64 letters, digits, '_', '-' or '.'", slurmcli::visible(n))));
    }
    Ok(())
}

fn number<T: std::str::FromStr>(key: &str, v: &str) -> Result<Option<T>, Refused> {
    if v == "-1" {
        return Ok(None);
    }
    v.parse::<T>()
        .map(Some)
        .map_err(|_| Refused::Invalid(format!("invalid value for {key}: {:?} (a whole number, or -1 for none)", slurmcli::visible(v))))
}

fn wall(v: &str) -> Result<Option<Time>, Refused> {
    if v == "-1" {
        return Ok(None);
    }
    slurmcli::parse_time(v).map_err(|e| Refused::Invalid(format!("invalid value for MaxWall: {}", e.0)))
}

fn tres(key: &str, t: &mut Tres, v: &str) -> Result<(), Refused> {
    let new = Tres::parse(v).map_err(|e| Refused::Invalid(format!("invalid value for {key}: {}", e.0)))?;
    t.merge(&new, &Tres::cleared(v));
    Ok(())
}

/// Sets one limit key; `Ok(false)` when `key` is not a limit.
fn set_limit(l: &mut Limits, key: &str, v: &str) -> Result<bool, Refused> {
    match key {
        "MaxJobs" | "MaxJobsPerUser" => l.max_jobs = number(key, v)?,
        "MaxSubmitJobs" | "MaxSubmitJobsPerUser" => l.max_submit_jobs = number(key, v)?,
        "MaxWall" => l.max_wall = wall(v)?,
        "MaxTRESPerJob" => tres(key, &mut l.max_tres_per_job, v)?,
        "MaxTRESPerUser" => tres(key, &mut l.max_tres_per_user, v)?,
        "GrpJobs" => l.grp_jobs = number(key, v)?,
        "GrpSubmitJobs" => l.grp_submit_jobs = number(key, v)?,
        "GrpTRES" => tres(key, &mut l.grp_tres, v)?,
        _ => return Ok(false),
    }
    Ok(true)
}

fn names(v: &str) -> Vec<String> {
    v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
}

/// A QOS list changed by `=`, `+=` or `-=`.
fn qos_list(current: &[String], s: &Setting, known: &[Qos]) -> Result<Vec<String>, Refused> {
    let given = names(&s.value);
    for q in &given {
        if !known.iter().any(|k| &k.name == q) {
            return Err(Refused::Invalid(format!("Invalid qos name: {}", slurmcli::visible(q))));
        }
    }
    Ok(match s.op {
        SetOp::Set => given,
        SetOp::Add => {
            let mut v = current.to_vec();
            v.extend(given.into_iter().filter(|g| !current.contains(g)));
            v
        }
        SetOp::Remove => current.iter().filter(|c| !given.contains(c)).cloned().collect(),
    })
}

/// What a request holds, as it states it (the nodes it asks at least, its tasks' CPUs, its
/// memory, its GPUs).
pub fn request_usage(r: &JobRequest) -> model::accounting::Usage {
    let s = &r.shape;
    let nodes = s.nodes_min.max(1) as u64;
    let cpu = (s.ntasks.max(1) as u64 * s.cpus_per_task.max(1) as u64).max(nodes);
    let mem = match s.mem {
        MemRequest::PerNode(b) => (b >> 20) * nodes,
        MemRequest::PerCpu(b) => (b >> 20) * cpu,
    };
    model::accounting::Usage { jobs: 1, cpu, mem, node: nodes, gpu: s.total_gpus(nodes as u32) as u64 }
}

impl Controller {
    /// The administrator level of the caller `uid` named `user`: root and the uids the daemon
    /// names administrators (the user it runs as) are administrators; `[security] operators`
    /// are operators; others have their accounting record's level.
    pub fn admin_level(&self, uid: u32, user: &str) -> AdminLevel {
        if uid == 0 || self.settings.administrators.contains(&uid) {
            return AdminLevel::Administrator;
        }
        let recorded = self.settings.cluster.user(user).map_or(AdminLevel::None, |u| u.admin_level);
        if self.settings.operators.contains(&uid) { recorded.max(AdminLevel::Operator) } else { recorded }
    }

    /// Whether the caller may act on other users' jobs (hold, release, cancel, signal), as
    /// Slurm's operators may. Users made operators by `sacctmgr` are known by uid once the
    /// daemon has looked their names up ([`Controller::set_admin_uids`]).
    pub fn is_operator(&self, uid: u32) -> bool {
        uid == 0 || self.settings.administrators.contains(&uid) || self.settings.operators.contains(&uid) || self.admin_uids.contains(&uid)
    }

    /// Tells the controller the uids of users whose accounting record makes them operators or
    /// administrators (the daemon looks the names of [`Controller::admin_names`] up).
    pub fn set_admin_uids(&mut self, uids: Vec<u32>) {
        self.admin_uids = uids.into_iter().collect();
    }

    /// The names of users whose accounting record makes them operators or administrators.
    pub fn admin_names(&self) -> Vec<String> {
        self.settings.cluster.users.iter().filter(|u| u.admin_level > AdminLevel::None).map(|u| u.name.clone()).collect()
    }

    /// The account and QOS a submission of `user` charges: `-A` or the user's default
    /// account, `-q` or the association's default QOS; refused with Slurm's words where the
    /// enforcement says the user may not (administrators may charge any account and QOS). A
    /// negative nice needs an operator.
    pub fn charge(
        &self,
        uid: u32,
        user: &str,
        account: Option<&str>,
        qos: Option<&str>,
        nice: i32,
    ) -> Result<(String, Option<String>), Refused> {
        let level = self.admin_level(uid, user);
        if nice < 0 && level < AdminLevel::Operator {
            return Err(Refused::Forbidden(format!(
                "{INVALID_NICE}: a negative nice ({nice}) needs an operator or administrator; ordinary users may only lower their priority"
            )));
        }
        let c = &self.settings.cluster;
        let e = c.enforce;
        let admin = level == AdminLevel::Administrator;
        let account = match account {
            Some(a) => a.to_string(),
            None => c.default_account(user).ok_or_else(|| {
                Refused::Forbidden(format!(
                    "{INVALID_ACCOUNT}: user {} has no association on this cluster (ask an administrator: sacctmgr add user {} account=...)",
                    slurmcli::visible(user),
                    slurmcli::visible(user)
                ))
            })?,
        };
        let assoc = c.association(user, &account);
        if (e.associations || e.qos) && assoc.is_none() && !admin {
            return Err(Refused::Forbidden(format!(
                "{INVALID_ACCOUNT}: user {} may not charge account {} (its associations: {})",
                slurmcli::visible(user),
                slurmcli::visible(&account),
                {
                    let mine: Vec<String> = c.associations_of(user).into_iter().map(|a| a.account).collect();
                    if mine.is_empty() { "none".to_string() } else { mine.join(",") }
                }
            )));
        }
        let qos = match qos {
            Some(q) => Some(q.to_string()),
            None => assoc.as_ref().and_then(|a| a.default_qos.clone()),
        };
        if let Some(q) = &qos {
            if c.qos(Some(q)).is_none() {
                return Err(Refused::Invalid(format!("{INVALID_QOS}: there is no QOS {}", slurmcli::visible(q))));
            }
            if e.qos
                && !admin
                && let Some(a) = &assoc
                && !a.qos.contains(q)
            {
                return Err(Refused::Forbidden(format!(
                    "{INVALID_QOS}: user {} may not use QOS {} through account {} (allowed: {})",
                    slurmcli::visible(user),
                    slurmcli::visible(q),
                    slurmcli::visible(&account),
                    if a.qos.is_empty() { "none".to_string() } else { a.qos.join(",") }
                )));
            }
        }
        Ok((account, qos))
    }

    /// A partition's AllowAccounts and AllowQos (AllowGroups is the daemon's: it knows the
    /// groups): refused with Slurm's words. Administrators pass.
    pub fn check_partition_access(
        &self,
        uid: u32,
        user: &str,
        partition: Option<&str>,
        account: &str,
        qos: Option<&str>,
    ) -> Result<(), Refused> {
        let c = &self.settings.cluster;
        let Some(p) = c.partition(partition) else { return Ok(()) };
        if self.admin_level(uid, user) == AdminLevel::Administrator {
            return Ok(());
        }
        if let Some(allowed) = &p.allow_accounts
            && !allowed.iter().any(|a| a == account)
        {
            return Err(Refused::Forbidden(format!(
                "{INVALID_ACCOUNT}: partition {} allows accounts {} (AllowAccounts), not {}",
                p.name,
                allowed.join(","),
                slurmcli::visible(account)
            )));
        }
        let q = qos.map(str::to_string).or_else(|| c.qos.first().map(|q| q.name.clone())).unwrap_or_default();
        if let Some(allowed) = &p.allow_qos
            && !allowed.contains(&q)
        {
            return Err(Refused::Forbidden(format!(
                "{INVALID_QOS}: partition {} allows QOS {} (AllowQos), not {}",
                p.name,
                allowed.join(","),
                slurmcli::visible(&q)
            )));
        }
        Ok(())
    }

    /// The limits checked at submission of `count` jobs like `req` (an array's tasks each
    /// count): MaxSubmitJobs of the association, the accounts above it and the QOS (per user
    /// and together), MaxWall and MaxTRESPerJob. Refused as Slurm refuses, with which limit.
    pub fn check_job_limits(&self, req: &JobRequest, count: u64) -> Result<(), Refused> {
        let c = &self.settings.cluster;
        if !c.enforce.limits {
            return Ok(());
        }
        let qos = c.qos(req.qos.as_deref());
        let own = c.assocs.iter().find(|a| a.user == req.user && a.account == req.account).map(|a| &a.limits);
        let lineage = c.lineage(&req.account);
        let over = |what: String| Err(Refused::Invalid(format!("{POLICY}: {what}")));
        // Per-job limits: the association's, else the nearest account's; and the QOS's.
        let pick = |f: &dyn Fn(&Limits) -> bool| own.filter(|l| f(l)).or_else(|| lineage.iter().map(|a| &a.limits).find(|l| f(l)));
        let wall_of = |l: &Limits| l.max_wall;
        for (who, max) in
            [("the association's", pick(&|l| l.max_wall.is_some()).and_then(wall_of)), ("the QOS's", qos.and_then(|q| q.limits.max_wall))]
        {
            if let Some(m) = max
                && req.time_limit > m
            {
                return over(format!(
                    "the time limit {} is over {who} MaxWall {}",
                    slurmcli::format_time(Some(req.time_limit)),
                    slurmcli::format_time(Some(m))
                ));
            }
        }
        let none = model::accounting::Usage::default();
        // Each component of a heterogeneous job is a job of its own for these (Slurm's rule).
        for part in (0..req.components()).filter_map(|k| req.component(k)) {
            let usage = request_usage(&part);
            for (who, lim) in [
                ("the association's", pick(&|l| !l.max_tres_per_job.is_empty()).map(|l| l.max_tres_per_job)),
                ("the QOS's", qos.map(|q| q.limits.max_tres_per_job)),
            ] {
                if let Some(l) = lim
                    && let Some(k) = none.exceeds(&usage, &l)
                {
                    return over(format!("the job asks more {} than {who} MaxTRESPerJob {l}", tres_name(k)));
                }
            }
        }
        // Submitted (pending or running) jobs.
        let any_submit = own.is_some_and(|l| l.max_submit_jobs.is_some() || l.grp_submit_jobs.is_some())
            || lineage.iter().any(|a| a.limits.max_submit_jobs.is_some() || a.limits.grp_submit_jobs.is_some())
            || qos.is_some_and(|q| q.limits.max_submit_jobs.is_some() || q.limits.grp_submit_jobs.is_some());
        if !any_submit {
            return Ok(());
        }
        let qname = qos.map(|q| q.name.as_str());
        let (mut assoc_n, mut user_qos_n, mut qos_n) = (0u64, 0u64, 0u64);
        let mut account_n: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
        for (j, n) in self.live_weighted() {
            let r = &j.req;
            if r.user == req.user && r.account == req.account {
                assoc_n += n;
            }
            let jq = c.qos(r.qos.as_deref()).map(|q| q.name.as_str());
            if jq == qname {
                qos_n += n;
                if r.user == req.user {
                    user_qos_n += n;
                }
            }
            for a in &lineage {
                if r.account == a.name || c.lineage(&r.account).iter().any(|x| x.name == a.name) {
                    *account_n.entry(a.name.as_str()).or_default() += n;
                }
            }
        }
        let max_submit = own.and_then(|l| l.max_submit_jobs).or_else(|| lineage.iter().find_map(|a| a.limits.max_submit_jobs));
        if let Some(m) = max_submit
            && assoc_n + count > m as u64
        {
            return over(format!(
                "MaxSubmitJobs {m} of the association of user {} and account {} ({assoc_n} submitted)",
                req.user, req.account
            ));
        }
        if let Some(m) = own.and_then(|l| l.grp_submit_jobs)
            && assoc_n + count > m as u64
        {
            return over(format!("GrpSubmitJobs {m} of the association ({assoc_n} submitted)"));
        }
        for a in &lineage {
            if let Some(m) = a.limits.grp_submit_jobs {
                let n = account_n.get(a.name.as_str()).copied().unwrap_or(0);
                if n + count > m as u64 {
                    return over(format!("GrpSubmitJobs {m} of account {} ({n} submitted)", a.name));
                }
            }
        }
        if let Some(q) = qos {
            if let Some(m) = q.limits.max_submit_jobs
                && user_qos_n + count > m as u64
            {
                return over(format!("MaxSubmitJobsPerUser {m} of QOS {} ({user_qos_n} submitted)", q.name));
            }
            if let Some(m) = q.limits.grp_submit_jobs
                && qos_n + count > m as u64
            {
                return over(format!("GrpSubmitJobs {m} of QOS {} ({qos_n} submitted)", q.name));
            }
        }
        Ok(())
    }

    /// Applies (or, with `dry_run`, only describes) a `sacctmgr add|modify|delete` by the
    /// caller `uid` named `user`. Returns what `sacctmgr` prints. Nothing changes when it is
    /// refused.
    pub fn change_accounting(&mut self, uid: u32, user: &str, ch: &AcctChange, dry_run: bool) -> Result<String, Refused> {
        let level = self.admin_level(uid, user);
        let mut next = Accounting::of(&self.settings.cluster);
        let text = match (ch.verb, ch.entity) {
            (Verb::Add, Entity::Account) => add_accounts(&mut next, ch, level, user, &self.settings.cluster_name)?,
            (Verb::Add, Entity::User) => add_users(&mut next, ch, level, user, &self.settings.cluster_name)?,
            (Verb::Add, Entity::Qos) => add_qos(&mut next, ch, level)?,
            (Verb::Modify, Entity::Account) => modify_accounts(&mut next, ch, level, user)?,
            (Verb::Modify, Entity::User) => {
                let own = self.settings.cluster.unlisted == model::Unlisted::OwnAccount;
                modify_users(&mut next, ch, level, user, own, &self.settings.cluster_name)?
            }
            (Verb::Modify, Entity::Qos) => modify_qos(&mut next, ch, level)?,
            (Verb::Delete, e) => self.delete(&mut next, e, ch, level, user)?,
        };
        let mut check = self.settings.cluster.clone();
        next.clone().install(&mut check);
        validate(&check).map_err(Refused::Invalid)?;
        if !dry_run && text.changed {
            next.install(&mut self.settings.cluster);
            self.accounting_dirty = true;
        }
        Ok(text.out)
    }

    fn delete(&self, next: &mut Accounting, e: Entity, ch: &AcctChange, level: AdminLevel, caller: &str) -> Result<Said, Refused> {
        let want = filter_names(ch, &["Name", "Names"]);
        let accounts = filter_names(ch, &["Account", "Accounts"]);
        let active = |f: &dyn Fn(&JobRequest) -> bool| self.live_weighted().any(|(j, _)| f(&j.req));
        match e {
            Entity::Account => {
                need(level >= AdminLevel::Operator)?;
                let hit: Vec<String> = next.accounts.iter().filter(|a| want.contains(&a.name)).map(|a| a.name.clone()).collect();
                if hit.is_empty() {
                    return Ok(Said::nothing(" Nothing deleted\n"));
                }
                for a in &hit {
                    if let Some(child) = next.accounts.iter().find(|c| c.parent.as_deref() == Some(a.as_str())) {
                        return Err(Refused::Conflict(format!(
                            " Error with request: account {a} has a sub-account {}: delete it first",
                            child.name
                        )));
                    }
                    if active(&|r: &JobRequest| &r.account == a) {
                        return Err(Refused::Conflict(format!(
                            " Error with request: Job(s) active, cancel job(s) before remove (account {a})"
                        )));
                    }
                    if let Some(u) = next.users.iter().find(|u| &u.default_account == a) {
                        return Err(Refused::Conflict(format!(
                            " Error with request: account {a} is the default account of user {}: change it first (sacctmgr modify user {} set DefaultAccount=...)",
                            u.name, u.name
                        )));
                    }
                }
                next.accounts.retain(|a| !hit.contains(&a.name));
                next.assocs.retain(|a| !hit.contains(&a.account));
                Ok(Said::changed(format!(" Deleting accounts...\n{}", lines(&hit))))
            }
            Entity::User => {
                let users: Vec<String> =
                    next.users.iter().map(|u| u.name.clone()).chain(next.assocs.iter().map(|a| a.user.clone())).collect();
                let hit: Vec<String> = want.iter().filter(|w| users.contains(w)).cloned().collect();
                if hit.is_empty() {
                    return Ok(Said::nothing(" Nothing deleted\n"));
                }
                if level < AdminLevel::Operator {
                    // A coordinator removes users from the accounts they coordinate.
                    let mine = coordinated(next, caller);
                    if accounts.is_empty() || !accounts.iter().all(|a| mine.contains(a)) {
                        return Err(Refused::Forbidden(NO_PRIVILEGE.into()));
                    }
                }
                let mut out = Vec::new();
                for u in &hit {
                    let gone: Vec<String> = next
                        .assocs
                        .iter()
                        .filter(|a| &a.user == u && (accounts.is_empty() || accounts.contains(&a.account)))
                        .map(|a| a.account.clone())
                        .collect();
                    for a in &gone {
                        if active(&|r: &JobRequest| &r.user == u && &r.account == a) {
                            return Err(Refused::Conflict(format!(
                                " Error with request: Job(s) active, cancel job(s) before remove (user {u}, account {a})"
                            )));
                        }
                        out.push(assoc_line(&self.settings.cluster_name, a, u));
                    }
                    next.assocs.retain(|a| !(&a.user == u && gone.contains(&a.account)));
                    let left: Vec<String> = next.assocs.iter().filter(|a| &a.user == u).map(|a| a.account.clone()).collect();
                    if left.is_empty() {
                        next.users.retain(|x| &x.name != u);
                    } else if let Some(rec) = next.users.iter_mut().find(|x| &x.name == u)
                        && !left.contains(&rec.default_account)
                    {
                        rec.default_account = left[0].clone();
                    }
                }
                if accounts.is_empty() {
                    // Slurm's words when only users are named: the users go, with every
                    // association of theirs.
                    return Ok(Said::changed(format!(" Deleting users...\n{}", lines(&hit))));
                }
                Ok(Said::changed(format!(" Deleting user associations...\n{}\n", out.join("\n"))))
            }
            Entity::Qos => {
                need(level >= AdminLevel::Operator)?;
                let hit: Vec<String> = next.qos.iter().filter(|q| want.contains(&q.name)).map(|q| q.name.clone()).collect();
                if hit.is_empty() {
                    return Ok(Said::nothing(" Nothing deleted\n"));
                }
                if let Some(first) = next.qos.first()
                    && hit.contains(&first.name)
                {
                    return Err(Refused::Conflict(format!(" Error with request: QOS {} is the cluster's default QOS", first.name)));
                }
                for q in &hit {
                    if active(&|r: &JobRequest| r.qos.as_deref() == Some(q.as_str())) {
                        return Err(Refused::Conflict(format!(
                            " Error with request: Job(s) active, cancel job(s) before remove (QOS {q})"
                        )));
                    }
                }
                next.qos.retain(|q| !hit.contains(&q.name));
                for a in &mut next.accounts {
                    a.qos.retain(|q| !hit.contains(q));
                    if a.default_qos.as_ref().is_some_and(|d| hit.contains(d)) {
                        a.default_qos = None;
                    }
                }
                for a in &mut next.assocs {
                    if let Some(l) = &mut a.qos {
                        l.retain(|q| !hit.contains(q));
                    }
                    if a.default_qos.as_ref().is_some_and(|d| hit.contains(d)) {
                        a.default_qos = None;
                    }
                }
                Ok(Said::changed(format!(" Deleting QOS(s)...\n{}", lines(&hit))))
            }
        }
    }

    /// The accounting as the database keeps it, when `sacctmgr` changed it since the last call.
    pub(crate) fn take_accounting(&mut self) -> Option<Accounting> {
        std::mem::take(&mut self.accounting_dirty).then(|| Accounting::of(&self.settings.cluster))
    }

    /// Replaces the accounting with what the database kept (`sacctmgr`'s changes win over the
    /// file's seed). The file's enforcement settings stay.
    pub fn restore_accounting(&mut self, a: Accounting) {
        a.install(&mut self.settings.cluster);
    }
}

/// What a change prints, and whether it changed anything.
struct Said {
    out: String,
    changed: bool,
}

impl Said {
    fn changed(out: String) -> Said {
        Said { out, changed: true }
    }
    fn nothing(out: &str) -> Said {
        Said { out: out.into(), changed: false }
    }
}

/// An association as Slurm's slurmdbd names one in its answers (`C = %-10s A = %-20s U = %-9s`).
fn assoc_line(cluster: &str, account: &str, user: &str) -> String {
    format!("  C = {cluster:<10} A = {account:<20} U = {user:<9}")
}

/// The QOS settings `sacctmgr add qos` echoes, in Slurm's order, with its labels.
const QOS_SETTINGS: &[(&str, &str)] = &[
    ("GraceTime", "GraceTime               "),
    ("GrpJobs", "GrpJobs                 "),
    ("GrpSubmitJobs", "GrpSubmitJobs           "),
    ("GrpTRES", "GrpTRES                 "),
    ("MaxJobsPerUser", "MaxJobsPerUser"),
    ("MaxJobs", "MaxJobsPerUser"),
    ("MaxSubmitJobsPerUser", "MaxSubmitJobsPerUser    "),
    ("MaxSubmitJobs", "MaxSubmitJobsPerUser    "),
    ("MaxTRESPerJob", "MaxTRESPerJob           "),
    ("MaxTRESPerUser", "MaxTRESPerUser          "),
    ("MaxWall", "MaxWall                 "),
    ("PreemptMode", "PreemptMode             "),
    ("PreemptTier", "PreemptTier             "),
    ("Priority", "Priority                "),
];

fn lines(names: &[String]) -> String {
    names.iter().map(|n| format!("  {n}\n")).collect()
}

fn need(ok: bool) -> Result<(), Refused> {
    if ok { Ok(()) } else { Err(Refused::Forbidden(NO_PRIVILEGE.into())) }
}

fn tres_name(k: model::accounting::TresKind) -> &'static str {
    match k {
        model::accounting::TresKind::Cpu => "cpu",
        model::accounting::TresKind::Mem => "mem",
        model::accounting::TresKind::Node => "node",
        model::accounting::TresKind::Gpu => "gres/gpu",
    }
}

/// The values of the filter's `keys`, split at commas.
fn filter_names(ch: &AcctChange, keys: &[&str]) -> Vec<String> {
    ch.filter.iter().filter(|s| keys.contains(&s.key.as_str())).flat_map(|s| names(&s.value)).collect()
}

/// The accounts `user` coordinates, and every account below them.
fn coordinated(a: &Accounting, user: &str) -> Vec<String> {
    let Some(u) = a.users.iter().find(|u| u.name == user) else { return Vec::new() };
    let mut out: Vec<String> = u.coordinator.clone();
    // Descendants, to a fixed point (bounded by the number of accounts).
    for _ in 0..a.accounts.len() {
        let more: Vec<String> = a
            .accounts
            .iter()
            .filter(|x| x.parent.as_ref().is_some_and(|p| out.contains(p)) && !out.contains(&x.name))
            .map(|x| x.name.clone())
            .collect();
        if more.is_empty() {
            break;
        }
        out.extend(more);
    }
    out
}

fn unknown(key: &str, entity: &str) -> Refused {
    Refused::Invalid(format!(
        " Unknown option: {key} (a {entity} takes {})",
        match entity {
            "account" => ACCOUNT_KEYS.join(", "),
            "user" => USER_KEYS.join(", "),
            _ => QOS_KEYS.join(", "),
        }
    ))
}

fn apply_account(a: &mut Account, s: &Setting, known_qos: &[Qos]) -> Result<(), Refused> {
    let v = s.value.as_str();
    match s.key.as_str() {
        "Description" => a.description = v.to_string(),
        "Organization" => a.organization = v.to_string(),
        "Parent" => a.parent = (v != "root").then(|| v.to_string()),
        "Fairshare" => a.shares = number::<u32>("Fairshare", v)?.unwrap_or(1).max(1),
        "QOS" => a.qos = qos_list(&a.qos, s, known_qos)?,
        "DefaultQOS" => {
            a.default_qos =
                if v == "-1" || v.is_empty() { None } else { Some(qos_list(&[], s, known_qos)?.into_iter().next().unwrap_or_default()) }
        }
        k if ["MaxJobs", "MaxSubmitJobs", "MaxWall", "MaxTRESPerJob", "GrpJobs", "GrpSubmitJobs", "GrpTRES"].contains(&k) => {
            set_limit(&mut a.limits, k, v)?;
        }
        k => return Err(unknown(k, "account")),
    }
    Ok(())
}

fn apply_assoc(a: &mut Assoc, s: &Setting, known_qos: &[Qos], account_qos: &[String]) -> Result<(), Refused> {
    let v = s.value.as_str();
    match s.key.as_str() {
        "Fairshare" => a.shares = number::<u32>("Fairshare", v)?.unwrap_or(1).max(1),
        "QOS" => {
            let cur = a.qos.clone().unwrap_or_else(|| account_qos.to_vec());
            a.qos = Some(qos_list(&cur, s, known_qos)?);
        }
        "DefaultQOS" => {
            a.default_qos =
                if v == "-1" || v.is_empty() { None } else { Some(qos_list(&[], s, known_qos)?.into_iter().next().unwrap_or_default()) }
        }
        k if ["MaxJobs", "MaxSubmitJobs", "MaxWall", "MaxTRESPerJob", "GrpJobs", "GrpSubmitJobs", "GrpTRES"].contains(&k) => {
            set_limit(&mut a.limits, k, v)?;
        }
        "DefaultAccount" | "AdminLevel" => {}
        k => return Err(unknown(k, "user")),
    }
    Ok(())
}

fn apply_qos(q: &mut Qos, s: &Setting) -> Result<(), Refused> {
    let v = s.value.as_str();
    match s.key.as_str() {
        "Description" => q.description = v.to_string(),
        "Priority" => q.priority = number::<u32>("Priority", v)?.unwrap_or(0),
        "PreemptTier" => q.preempt_tier = number::<u32>("PreemptTier", v)?.unwrap_or(0),
        "GraceTime" => q.grace_time = wall(v)?.unwrap_or(0),
        "PreemptMode" => {
            q.preempt_mode = model::PreemptMode::parse(v).ok_or_else(|| {
                Refused::Invalid(format!("invalid value for PreemptMode: {:?} (REQUEUE or SUSPEND)", slurmcli::visible(v)))
            })?
        }
        k => {
            if !set_limit(&mut q.limits, k, v)? {
                return Err(unknown(k, "qos"));
            }
        }
    }
    Ok(())
}

fn add_accounts(next: &mut Accounting, ch: &AcctChange, level: AdminLevel, caller: &str, cluster: &str) -> Result<Said, Refused> {
    let want = filter_names(ch, &["Name", "Names", "Account", "Accounts"]);
    if want.is_empty() {
        return Err(Refused::Invalid(" Need name of account to add.".into()));
    }
    let parent = ch.set.iter().chain(&ch.filter).find(|s| s.key == "Parent").map(|s| s.value.clone());
    if level < AdminLevel::Operator {
        // A coordinator adds accounts below the ones they coordinate.
        let mine = coordinated(next, caller);
        if !parent.as_ref().is_some_and(|p| mine.contains(p)) {
            return Err(Refused::Forbidden(NO_PRIVILEGE.into()));
        }
    }
    if let Some(p) = &parent
        && p != "root"
        && !next.accounts.iter().any(|a| &a.name == p)
    {
        return Err(Refused::Invalid(format!(" error: The parent account {} doesn't exist", slurmcli::visible(p))));
    }
    let mut added = Vec::new();
    for n in &want {
        valid_name("account", n)?;
        if n == "root" || next.accounts.iter().any(|a| &a.name == n) {
            continue;
        }
        let mut a = Account::new(n, 1);
        for s in ch.set.iter().chain(ch.filter.iter().filter(|s| s.key == "Parent")) {
            apply_account(&mut a, s, &next.qos)?;
        }
        next.accounts.push(a);
        added.push(n.clone());
    }
    if added.is_empty() {
        return Ok(Said::nothing(" Nothing new added.\n"));
    }
    let last = next.accounts.last().expect("added");
    let mut out = format!(" Adding Account(s)\n{}", lines(&added));
    out += &format!(
        " Settings\n  Description     = {}\n  Organization    = {}\n Associations\n{} Settings\n  Parent        = {}\n",
        if last.description.is_empty() { "Account Name" } else { &last.description },
        if last.organization.is_empty() { "Parent/Account Name" } else { &last.organization },
        added.iter().map(|a| format!("  A = {a:<10} C = {cluster:<10}\n")).collect::<String>(),
        last.parent.as_deref().unwrap_or("root")
    );
    Ok(Said::changed(out))
}

fn add_users(next: &mut Accounting, ch: &AcctChange, level: AdminLevel, caller: &str, cluster: &str) -> Result<Said, Refused> {
    let want = filter_names(ch, &["Name", "Names", "User", "Users"]);
    if want.is_empty() {
        return Err(Refused::Invalid(" Need name of user to add.".into()));
    }
    let mut accounts = filter_names(ch, &["Account", "Accounts"]);
    let default = ch.set.iter().find(|s| s.key == "DefaultAccount").map(|s| s.value.clone());
    if let Some(d) = &default
        && !accounts.contains(d)
    {
        accounts.insert(0, d.clone());
    }
    if accounts.is_empty() {
        return Err(Refused::Invalid(" Need name of account to add user to (Account= or DefaultAccount=).".into()));
    }
    for a in &accounts {
        if !next.accounts.iter().any(|x| &x.name == a) {
            // Slurm's words (22.05's sacctmgr).
            return Err(Refused::Invalid(format!(
                " This account '{}' doesn't exist.\n        Contact your admin to add this account.\n No associations or wckeys created.",
                slurmcli::visible(a)
            )));
        }
    }
    let admin_level = match ch.set.iter().find(|s| s.key == "AdminLevel") {
        Some(s) => Some(AdminLevel::parse(&s.value).ok_or_else(|| {
            Refused::Invalid(format!("invalid AdminLevel {:?}: None, Operator or Administrator", slurmcli::visible(&s.value)))
        })?),
        None => None,
    };
    if level < AdminLevel::Operator {
        let mine = coordinated(next, caller);
        if admin_level.is_some_and(|l| l > AdminLevel::None) || !accounts.iter().all(|a| mine.contains(a)) {
            return Err(Refused::Forbidden(NO_PRIVILEGE.into()));
        }
    }
    if admin_level.is_some_and(|l| l > level) {
        return Err(Refused::Forbidden(format!("{NO_PRIVILEGE}: only an administrator makes administrators")));
    }
    let mut out = Vec::new();
    for u in &want {
        valid_name("user", u)?;
        if !next.users.iter().any(|x| &x.name == u) {
            next.users.push(User {
                name: u.clone(),
                default_account: default.clone().unwrap_or_else(|| accounts[0].clone()),
                admin_level: admin_level.unwrap_or_default(),
                coordinator: Vec::new(),
            });
        }
        for a in &accounts {
            if next.assocs.iter().any(|x| &x.user == u && &x.account == a) {
                continue;
            }
            let account_qos =
                ClusterConfig { qos: next.qos.clone(), accounts: next.accounts.clone(), ..ClusterConfig::default() }.account_qos(a);
            let mut assoc =
                Assoc { account: a.clone(), user: u.clone(), shares: 1, qos: None, default_qos: None, limits: Limits::default() };
            for s in &ch.set {
                apply_assoc(&mut assoc, s, &next.qos, &account_qos)?;
            }
            next.assocs.push(assoc);
            out.push(assoc_line(cluster, a, u));
        }
    }
    if out.is_empty() {
        return Ok(Said::nothing(" Nothing new added.\n"));
    }
    Ok(Said::changed(format!(" Adding User(s)\n{}\n Associations =\n{}\n", lines(&want).trim_end(), out.join("\n"))))
}

fn add_qos(next: &mut Accounting, ch: &AcctChange, level: AdminLevel) -> Result<Said, Refused> {
    need(level >= AdminLevel::Operator)?;
    let want = filter_names(ch, &["Name", "Names"]);
    if want.is_empty() {
        return Err(Refused::Invalid(" Need name of qos to add.".into()));
    }
    let mut added = Vec::new();
    for n in &want {
        valid_name("QOS", n)?;
        if next.qos.iter().any(|q| &q.name == n) {
            continue;
        }
        let mut q = Qos { name: n.clone(), description: n.clone(), ..Qos::normal() };
        for s in &ch.set {
            apply_qos(&mut q, s)?;
        }
        next.qos.push(q);
        added.push(n.clone());
    }
    if added.is_empty() {
        return Ok(Said::nothing(" Nothing new added.\n"));
    }
    // Slurm's summary: the names, then the settings given, in its order and with its labels.
    let description = ch.set.iter().find(|s| s.key == "Description").map_or(added[0].clone(), |s| s.value.clone());
    let mut out = format!(" Adding QOS(s)\n{} Settings\n  Description    = {}\n", lines(&added), slurmcli::visible(&description));
    for (key, label) in QOS_SETTINGS {
        if let Some(s) = ch.set.iter().rev().find(|s| s.key == *key) {
            out.push_str(&format!("  {label} = {}\n", slurmcli::visible(&s.value)));
        }
    }
    Ok(Said::changed(out))
}

fn modify_accounts(next: &mut Accounting, ch: &AcctChange, level: AdminLevel, caller: &str) -> Result<Said, Refused> {
    let want = filter_names(ch, &["Name", "Names", "Account", "Accounts"]);
    if level < AdminLevel::Operator {
        let mine = coordinated(next, caller);
        if want.is_empty() || !want.iter().all(|w| mine.contains(w)) {
            return Err(Refused::Forbidden(NO_PRIVILEGE.into()));
        }
    }
    if ch.set.is_empty() {
        return Err(Refused::Invalid(" You didn't give me anything to set".into()));
    }
    let qos = next.qos.clone();
    let mut hit = Vec::new();
    for a in next.accounts.iter_mut().filter(|a| want.is_empty() || want.contains(&a.name)) {
        for s in &ch.set {
            apply_account(a, s, &qos)?;
        }
        hit.push(a.name.clone());
    }
    if hit.is_empty() {
        return Ok(Said::nothing(" Nothing modified\n"));
    }
    Ok(Said::changed(format!(" Modified account associations...\n{}", lines(&hit))))
}

/// `own`: users with no association have the account of their own name (`Unlisted::OwnAccount`):
/// naming one in `modify user ... set AdminLevel=` records them with it.
fn modify_users(
    next: &mut Accounting,
    ch: &AcctChange,
    level: AdminLevel,
    caller: &str,
    own: bool,
    cluster: &str,
) -> Result<Said, Refused> {
    let want = filter_names(ch, &["Name", "Names", "User", "Users"]);
    let accounts = filter_names(ch, &["Account", "Accounts"]);
    if ch.set.is_empty() {
        return Err(Refused::Invalid(" You didn't give me anything to set".into()));
    }
    let user_keys = ch.set.iter().any(|s| s.key == "DefaultAccount" || s.key == "AdminLevel");
    if level < AdminLevel::Operator {
        let mine = coordinated(next, caller);
        if user_keys || accounts.is_empty() || !accounts.iter().all(|a| mine.contains(a)) {
            return Err(Refused::Forbidden(NO_PRIVILEGE.into()));
        }
    }
    if own && user_keys {
        for w in &want {
            valid_name("user", w)?;
            if !next.users.iter().any(|u| &u.name == w) && !next.assocs.iter().any(|a| &a.user == w) {
                next.users.push(User {
                    name: w.clone(),
                    default_account: w.clone(),
                    admin_level: AdminLevel::None,
                    coordinator: Vec::new(),
                });
            }
        }
    }
    let mut out = Vec::new();
    for s in ch.set.iter().filter(|s| s.key == "DefaultAccount" || s.key == "AdminLevel") {
        for u in next.users.iter_mut().filter(|u| want.is_empty() || want.contains(&u.name)) {
            if s.key == "DefaultAccount" {
                if !next.assocs.iter().any(|a| a.user == u.name && a.account == s.value) {
                    return Err(Refused::Invalid(format!(
                        " error: user {} has no association with account {} (sacctmgr add user {} account={} first)",
                        u.name,
                        slurmcli::visible(&s.value),
                        u.name,
                        slurmcli::visible(&s.value)
                    )));
                }
                u.default_account = s.value.clone();
            } else {
                let l = AdminLevel::parse(&s.value).ok_or_else(|| {
                    Refused::Invalid(format!("invalid AdminLevel {:?}: None, Operator or Administrator", slurmcli::visible(&s.value)))
                })?;
                if l > level || u.admin_level > level {
                    return Err(Refused::Forbidden(format!("{NO_PRIVILEGE}: only an administrator makes or unmakes administrators")));
                }
                u.admin_level = l;
            }
            out.push(format!("  {}", u.name));
        }
    }
    let assoc_sets: Vec<&Setting> = ch.set.iter().filter(|s| s.key != "DefaultAccount" && s.key != "AdminLevel").collect();
    if !assoc_sets.is_empty() {
        let cfg = ClusterConfig { qos: next.qos.clone(), accounts: next.accounts.clone(), ..ClusterConfig::default() };
        let qos = next.qos.clone();
        for a in next
            .assocs
            .iter_mut()
            .filter(|a| (want.is_empty() || want.contains(&a.user)) && (accounts.is_empty() || accounts.contains(&a.account)))
        {
            let account_qos = cfg.account_qos(&a.account);
            for s in &assoc_sets {
                apply_assoc(a, s, &qos, &account_qos)?;
            }
            out.push(assoc_line(cluster, &a.account, &a.user));
        }
    }
    if out.is_empty() {
        return Ok(Said::nothing(" Nothing modified\n"));
    }
    Ok(Said::changed(format!(" Modified user associations...\n{}\n", out.join("\n"))))
}

fn modify_qos(next: &mut Accounting, ch: &AcctChange, level: AdminLevel) -> Result<Said, Refused> {
    need(level >= AdminLevel::Operator)?;
    let want = filter_names(ch, &["Name", "Names"]);
    if ch.set.is_empty() {
        return Err(Refused::Invalid(" You didn't give me anything to set".into()));
    }
    let mut hit = Vec::new();
    for q in next.qos.iter_mut().filter(|q| want.is_empty() || want.contains(&q.name)) {
        for s in &ch.set {
            apply_qos(q, s)?;
        }
        hit.push(q.name.clone());
    }
    if hit.is_empty() {
        return Ok(Said::nothing(" Nothing modified\n"));
    }
    Ok(Said::changed(format!(" Modified qos...\n{}", lines(&hit))))
}

/// Checks that an accounting hangs together: names unique, parents and QOS exist, every
/// association's user and account exist, each user's default account is one of theirs.
pub fn validate(c: &ClusterConfig) -> Result<(), String> {
    let dup = |names: Vec<&str>, what: &str| -> Result<(), String> {
        let mut n = names.clone();
        n.sort_unstable();
        match n.windows(2).find(|w| w[0] == w[1]) {
            Some(w) => Err(format!("two {what} named {}", w[0])),
            None => Ok(()),
        }
    };
    dup(c.qos.iter().map(|q| q.name.as_str()).collect(), "QOS")?;
    dup(c.accounts.iter().map(|a| a.name.as_str()).collect(), "accounts")?;
    dup(c.users.iter().map(|u| u.name.as_str()).collect(), "users")?;
    let has_qos = |q: &str| c.qos.iter().any(|x| x.name == q);
    let has_account = |a: &str| c.accounts.iter().any(|x| x.name == a);
    for q in c.root_qos.iter().flatten() {
        if !has_qos(q) {
            return Err(format!("accounting.qos names QOS {q}, which is not configured"));
        }
    }
    for a in &c.accounts {
        if let Some(p) = &a.parent
            && !has_account(p)
        {
            return Err(format!("account {}: parent {p} is not an account", a.name));
        }
        if c.lineage(&a.name).len() > 32 {
            return Err(format!("account {}: its parents form a loop or are nested over 32 deep", a.name));
        }
        for q in a.qos.iter().chain(&a.default_qos) {
            if !has_qos(q) {
                return Err(format!("account {}: QOS {q} is not configured", a.name));
            }
        }
    }
    for s in &c.assocs {
        if !has_account(&s.account) {
            return Err(format!("association of user {}: account {} is not configured", s.user, s.account));
        }
        for q in s.qos.iter().flatten().chain(&s.default_qos) {
            if !has_qos(q) {
                return Err(format!("association of user {} and account {}: QOS {q} is not configured", s.user, s.account));
            }
        }
    }
    for u in &c.users {
        let rows: Vec<&Assoc> = c.assocs.iter().filter(|a| a.user == u.name).collect();
        if !rows.is_empty() && !rows.iter().any(|a| a.account == u.default_account) {
            return Err(format!("user {}: default account {} is not one of the user's accounts", u.name, u.default_account));
        }
        for a in &u.coordinator {
            if !has_account(a) {
                return Err(format!("user {}: coordinates account {a}, which is not configured", u.name));
            }
        }
    }
    Ok(())
}
