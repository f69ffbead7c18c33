//! `sacctmgr`: the associations, accounts, users and QOS the controller enforces
//! (`GET /v1/accounting`), listed as Slurm's `sacctmgr show` lists them, and changed by
//! `add`, `modify` and `delete` (`POST /v1/accounting`), which the controller checks against
//! the caller's administrator level. Its words are read by `slurmcli::sacctmgr`.

use anyhow::{Result, bail};
use client::{Target, send};
use slurmcli::keywords::{Assign, Op};
use slurmcli::sacctmgr::{Entity, Request, Verb, cell, default_format, parse, parse_format};
use std::collections::HashMap;
use std::io::IsTerminal;
use wire::{AccountingInfo, AcctChange, AcctEntity, AcctRequest, AcctResponse, AcctVerb, SetOp, Setting};

use crate::common::runtime;

const USAGE: &str = "Usage: sacctmgr [-hinpPQrsvV] COMMAND
  add|create     account NAME... [Parent= Description= Organization= Fairshare= QOS= DefaultQOS= limits]
                 user NAME... Account=A[,B] [DefaultAccount= AdminLevel= Fairshare= QOS= DefaultQOS= limits]
                 qos NAME... [Priority= PreemptTier= PreemptMode=REQUEUE|SUSPEND GraceTime= Description= limits]
  modify|update  account|user|qos [where CONDITIONS] set SETTINGS   (QOS+=x and QOS-=x change a list)
  delete|remove  account|user|qos [where] CONDITIONS
  show|list      account|user|association|qos|cluster [where CONDITIONS] [format=F[%W],...] [withassoc]
  limits: MaxJobs MaxSubmitJobs MaxWall MaxTRESPerJob GrpJobs GrpSubmitJobs GrpTRES (TRES: cpu=N,mem=NG,node=N,gres/gpu=N);
          a QOS has MaxJobsPerUser MaxSubmitJobsPerUser MaxTRESPerUser; -1 clears a limit
  -i, --immediate   commit without asking      -n, --noheader   no header
  -p, --parsable    '|' after every field      -P, --parsable2  '|' between fields
  -s, --associations  show accounts and users with their associations (withassoc)";

/// `sacctmgr [OPTIONS] COMMAND ...`.
pub(crate) fn sacctmgr(args: &[String]) -> Result<i32> {
    let (p, _) = crate::common::parse_env("sacctmgr", args)?;
    let (mut header, mut sep, mut immediate, mut with_assoc, mut readonly, mut quiet) = (true, None::<bool>, false, false, false, false);
    for g in &p.opts {
        match g.key() {
            "noheader" => header = false,
            "parsable" => sep = Some(true),
            "parsable2" => sep = Some(false),
            "immediate" => immediate = true,
            "associations" => with_assoc = true,
            "readonly" => readonly = true,
            "quiet" => quiet = true,
            "help" | "usage" => {
                println!("{USAGE}");
                return Ok(0);
            }
            "version" => return crate::query::version(),
            "verbose" => {}
            other => unreachable!("sacctmgr's table and its reader disagree on {other}"),
        }
    }
    if p.args.is_empty() {
        bail!("no command given: this sacctmgr has no interactive mode\n{USAGE}");
    }
    let req = match parse(&p.args) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{}", crate::visible_text(&e.0));
            return Ok(1);
        }
    };
    let t = Target::from_env()?;
    match req {
        Request::Show { entity, filter, format, with_assoc: w } => {
            let info: AccountingInfo = crate::query::get(&t, "/v1/accounting")?;
            let fields = match parse_format(format.as_deref().unwrap_or(default_format(entity, w || with_assoc))) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("{}", crate::visible_text(&e.0));
                    return Ok(1);
                }
            };
            let rows = match rows(&info, entity, &filter, w || with_assoc) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("{}", crate::visible_text(&e));
                    return Ok(1);
                }
            };
            print_rows(&rows, &fields, header, sep);
            Ok(0)
        }
        Request::Change { verb, entity, filter, set } => {
            if readonly {
                eprintln!(" Can't run this command in readonly mode.");
                return Ok(1);
            }
            let change = AcctChange {
                verb: match verb {
                    Verb::Add => AcctVerb::Add,
                    Verb::Modify => AcctVerb::Modify,
                    Verb::Delete => AcctVerb::Delete,
                },
                entity: match entity {
                    Entity::Account => AcctEntity::Account,
                    Entity::User => AcctEntity::User,
                    _ => AcctEntity::Qos,
                },
                filter: filter.iter().map(setting).collect(),
                set: set.iter().map(setting).collect(),
            };
            let ask = !immediate;
            let first = post(&t, &change, ask)?;
            let text = match first {
                Ok(r) => r.text,
                Err(e) => {
                    print_refusal(verb, entity, &e);
                    return Ok(1);
                }
            };
            if !quiet || ask {
                print!("{}", crate::visible_text(&text));
            }
            let nothing = text.contains("Nothing new added") || text.contains("Nothing modified") || text.contains("Nothing deleted");
            if !ask || nothing {
                return Ok(0);
            }
            if !commit_check() {
                println!(" Changes Discarded");
                return Ok(0);
            }
            match post(&t, &change, false)? {
                Ok(_) => Ok(0),
                Err(e) => {
                    print_refusal(verb, entity, &e);
                    Ok(1)
                }
            }
        }
    }
}

fn setting(a: &Assign) -> Setting {
    Setting {
        key: a.key.to_string(),
        op: match a.op {
            Op::Set => SetOp::Set,
            Op::Add => SetOp::Add,
            Op::Remove => SetOp::Remove,
        },
        value: a.value.clone(),
    }
}

/// Sends a change; the controller's refusal comes back as its message.
fn post(t: &Target, change: &AcctChange, dry_run: bool) -> Result<std::result::Result<AcctResponse, String>> {
    let body = AcctRequest { change: change.clone(), dry_run };
    let reply = runtime()?.block_on(send(t, "POST", "/v1/accounting", Some(&body), &[]))?;
    if reply.status >= 400 {
        return Ok(Err(reply.error()));
    }
    Ok(Ok(reply.json()?))
}

/// A refusal as `sacctmgr` prints one: slurmdbd's comment, then the command's own line.
fn print_refusal(verb: Verb, entity: Entity, msg: &str) {
    let msg = crate::visible_text(msg);
    if msg.starts_with(wire::NO_PRIVILEGE) {
        eprintln!(" {msg}");
        let what = match entity {
            Entity::Account => "account associations",
            Entity::User => "user associations",
            _ => "qos",
        };
        let doing = match verb {
            Verb::Add => "adding",
            Verb::Modify => "modifying",
            Verb::Delete => "deleting",
        };
        eprintln!(" error: Problem {doing} {what}: Access/permission denied");
    } else if msg.starts_with(' ') {
        eprintln!("{msg}");
    } else {
        eprintln!(" error: {msg}");
    }
}

/// Slurm's `commit_check`: asks on the terminal; anything but `y` (or no answer) discards.
fn commit_check() -> bool {
    use std::io::Write;
    print!("Would you like to commit changes? (You have 30 seconds to decide)\n(N/y): ");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    if !std::io::stdin().is_terminal() && std::io::stdin().read_line(&mut line).is_err() {
        return false;
    }
    if std::io::stdin().is_terminal() && std::io::stdin().read_line(&mut line).is_err() {
        return false;
    }
    line.trim().eq_ignore_ascii_case("y") || line.trim().eq_ignore_ascii_case("yes")
}

type Row = HashMap<&'static str, String>;

fn tres(t: &wire::Tres) -> String {
    t.to_string()
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(String::new, |x| x.to_string())
}

fn wall(v: Option<i64>) -> String {
    v.map_or_else(String::new, |s| slurmcli::format_time(Some(s)))
}

/// The limit columns of a row.
fn limits(r: &mut Row, l: &wire::Limits, qos: bool) {
    r.insert("GrpJobs", opt(l.grp_jobs));
    r.insert("GrpTRES", tres(&l.grp_tres));
    r.insert("GrpSubmitJobs", opt(l.grp_submit_jobs));
    r.insert("MaxTRES", tres(&l.max_tres_per_job));
    r.insert("MaxWall", wall(l.max_wall));
    if qos {
        r.insert("MaxJobsPerUser", opt(l.max_jobs));
        r.insert("MaxSubmitJobsPerUser", opt(l.max_submit_jobs));
        r.insert("MaxTRESPerUser", tres(&l.max_tres_per_user));
    } else {
        r.insert("MaxJobs", opt(l.max_jobs));
        r.insert("MaxSubmitJobs", opt(l.max_submit_jobs));
    }
}

/// The rows of a listing, filtered by its conditions.
fn rows(info: &AccountingInfo, entity: Entity, filter: &[Assign], with_assoc: bool) -> std::result::Result<Vec<Row>, String> {
    let cluster = info.cluster.clone();
    let assoc_row = |a: &wire::AssocRow| -> Row {
        let mut r: Row = HashMap::new();
        r.insert("Cluster", cluster.clone());
        r.insert("Account", a.account.clone());
        r.insert("User", a.user.clone());
        r.insert("ParentName", a.parent.clone());
        r.insert("Share", a.shares.to_string());
        r.insert("QOS", a.qos.join(","));
        r.insert("DefaultQOS", a.default_qos.clone());
        limits(&mut r, &a.limits, false);
        r
    };
    let mut out: Vec<Row> = Vec::new();
    match entity {
        Entity::Account => {
            let mut accounts: Vec<(String, String, String)> = vec![("root".into(), "default root account".into(), "root".into())];
            accounts.extend(info.accounts.iter().map(|a| {
                let d = if a.description.is_empty() { a.name.clone() } else { a.description.clone() };
                let o = if a.organization.is_empty() { a.name.clone() } else { a.organization.clone() };
                (a.name.clone(), d, o)
            }));
            for (name, descr, org) in accounts {
                let coords: Vec<String> = info.users.iter().filter(|u| u.coordinator.contains(&name)).map(|u| u.name.clone()).collect();
                let base = |r: &mut Row| {
                    r.insert("Account", name.clone());
                    r.insert("Description", descr.clone());
                    r.insert("Organization", org.clone());
                    r.insert("Coordinators", coords.join(","));
                };
                if with_assoc {
                    for a in info.assocs.iter().filter(|a| a.account == name) {
                        let mut r = assoc_row(a);
                        base(&mut r);
                        out.push(r);
                    }
                    if name == "root" {
                        let mut r: Row = HashMap::new();
                        base(&mut r);
                        r.insert("Cluster", cluster.clone());
                        r.insert("Share", "1".into());
                        out.push(r);
                    }
                } else {
                    let mut r: Row = HashMap::new();
                    base(&mut r);
                    out.push(r);
                }
            }
        }
        Entity::User => {
            for u in &info.users {
                let base = |r: &mut Row| {
                    r.insert("User", u.name.clone());
                    r.insert("DefaultAccount", u.default_account.clone());
                    r.insert("AdminLevel", u.admin_level.name().to_string());
                    r.insert("Coordinators", u.coordinator.join(","));
                };
                if with_assoc {
                    for a in info.assocs.iter().filter(|a| a.user == u.name) {
                        let mut r = assoc_row(a);
                        base(&mut r);
                        out.push(r);
                    }
                } else {
                    let mut r: Row = HashMap::new();
                    base(&mut r);
                    out.push(r);
                }
            }
        }
        Entity::Assoc => {
            let mut root: Row = HashMap::new();
            root.insert("Cluster", cluster.clone());
            root.insert("Account", "root".into());
            root.insert("Share", "1".into());
            out.push(root);
            out.extend(info.assocs.iter().map(assoc_row));
        }
        Entity::Qos => {
            for q in &info.qos {
                let mut r: Row = HashMap::new();
                r.insert("Name", q.name.clone());
                r.insert("Description", q.description.clone());
                r.insert("Priority", q.priority.to_string());
                r.insert("PreemptTier", q.preempt_tier.to_string());
                r.insert("GraceTime", slurmcli::format_time(Some(q.grace_time)));
                let lower: Vec<String> = info.qos.iter().filter(|o| o.preempt_tier < q.preempt_tier).map(|o| o.name.clone()).collect();
                r.insert("Preempt", lower.join(","));
                r.insert("PreemptMode", q.preempt_mode.slurm_name().into());
                r.insert("UsageFactor", "1.000000".into());
                limits(&mut r, &q.limits, true);
                out.push(r);
            }
        }
        Entity::Cluster => {
            let mut r: Row = HashMap::new();
            r.insert("Cluster", cluster.clone());
            r.insert("Name", cluster.clone());
            r.insert("Share", "1".into());
            r.insert("QOS", info.qos.iter().map(|q| q.name.clone()).collect::<Vec<_>>().join(","));
            r.insert("DefaultQOS", info.qos.first().map(|q| q.name.clone()).unwrap_or_default());
            out.push(r);
        }
    }
    // Conditions: each key's values (comma-separated, any of them); keys this entity has no
    // column for are refused.
    for a in filter {
        let col: &str = match (entity, a.key) {
            (Entity::Account, "Names") => "Account",
            (Entity::User, "Names") => "User",
            (Entity::Qos, "Names") => "Name",
            (Entity::Cluster, "Names" | "Cluster") => "Cluster",
            (Entity::Assoc, "Names") => return Err(" Unknown condition: Name (an association has Account and User)".into()),
            (_, "Cluster") => "Cluster",
            (_, "Account") => "Account",
            (Entity::User | Entity::Assoc, "User") => "User",
            (Entity::Account, "User") if with_assoc => "User",
            (_, "DefaultAccount") => "DefaultAccount",
            (_, "AdminLevel") => "AdminLevel",
            (_, "Description") => "Description",
            (_, "Organization") => "Organization",
            (Entity::Account | Entity::Assoc, "Parent") => "ParentName",
            (_, "QOS") => "QOS",
            (_, "DefaultQOS") => "DefaultQOS",
            (_, k) => return Err(format!(" Unknown condition: {k}")),
        };
        let want: Vec<String> = a.value.split(',').filter(|s| !s.is_empty()).map(str::to_ascii_lowercase).collect();
        out.retain(|r| {
            let v = r.get(col).map(String::as_str).unwrap_or("");
            if col == "QOS" { v.split(',').any(|q| want.contains(&q.to_ascii_lowercase())) } else { want.contains(&v.to_ascii_lowercase()) }
        });
    }
    Ok(out)
}

fn print_rows(rows: &[Row], fields: &[(slurmcli::sacctmgr::Field, i32)], header: bool, sep: Option<bool>) {
    let value = |r: &Row, key: &str| -> String {
        let k = match key {
            "Acct" => "Account",
            "FairShare" => "Share",
            "MaxTRESPerJob" => "MaxTRES",
            "MaxJobsPU" => "MaxJobsPerUser",
            "MaxSubmitPU" => "MaxSubmitJobsPerUser",
            "MaxTRESPU" => "MaxTRESPerUser",
            k => k,
        };
        r.get(k).cloned().unwrap_or_default()
    };
    match sep {
        Some(trailing) => {
            let end = if trailing { "|" } else { "" };
            if header {
                println!("{}{end}", fields.iter().map(|(f, _)| f.header).collect::<Vec<_>>().join("|"));
            }
            for r in rows {
                println!("{}{end}", fields.iter().map(|(f, _)| value(r, f.key)).collect::<Vec<_>>().join("|"));
            }
        }
        None => {
            if header {
                println!("{}", fields.iter().map(|(f, w)| cell(f.header, *w)).collect::<Vec<_>>().join(" "));
                println!("{}", fields.iter().map(|(_, w)| "-".repeat(w.unsigned_abs() as usize)).collect::<Vec<_>>().join(" "));
            }
            for r in rows {
                println!("{}", fields.iter().map(|(f, w)| cell(&value(r, f.key), *w)).collect::<Vec<_>>().join(" "));
            }
        }
    }
}

/// What running and submitted jobs hold, per association, account, QOS and user in a QOS.
#[derive(Default, Clone, Copy)]
struct Used {
    jobs: u64,
    submitted: u64,
    cpu: u64,
    mem: u64,
    node: u64,
    gpu: u64,
}

impl Used {
    fn add(&mut self, j: &wire::JobInfo) {
        self.submitted += 1;
        if j.running() || j.state == "COMPLETING" {
            self.jobs += 1;
            self.node += j.allocation.len() as u64;
            for a in &j.allocation {
                self.cpu += a.cpus as u64;
                self.mem += a.memory_mb;
                self.gpu += a.gpus as u64;
            }
        }
    }
}

/// Slurm's `_print_tres_line`: each TRES's limit (`N` for none) and, with `used`, its use;
/// without `used`, only the TRES that have a limit.
fn tres_line(name: &str, limit: &wire::Tres, used: Option<&Used>) -> String {
    let parts: Vec<String> = [
        ("cpu", limit.cpu, used.map(|u| u.cpu)),
        ("mem", limit.mem, used.map(|u| u.mem)),
        ("node", limit.node, used.map(|u| u.node)),
        ("gres/gpu", limit.gpu, used.map(|u| u.gpu)),
    ]
    .iter()
    .filter(|(_, l, u)| l.is_some() || u.is_some())
    .map(|(n, l, u)| {
        format!("{n}={}{}", l.map_or_else(|| "N".to_string(), |x| x.to_string()), u.map_or_else(String::new, |x| format!("({x})")))
    })
    .collect();
    format!("{name}={}", parts.join(","))
}

fn lim(v: Option<u32>, used: u64) -> String {
    v.map_or_else(|| format!("N({used})"), |m| format!("{m}({used})"))
}

fn lim_max(v: Option<u32>, used: u64) -> String {
    v.map_or_else(String::new, |m| format!("{m}({used})"))
}

/// `scontrol show assoc_mgr [users=U,...] [accounts=A,...] [qos=Q,...] [flags=users,assoc,qos]`:
/// the associations, users and QOS the controller enforces, each limit with what running and
/// submitted jobs use of it now (`N` where none is set), as Slurm's.
pub(crate) fn show_assoc_mgr(words: &[&str], oneliner: bool) -> Result<i32> {
    const KEYS: &[slurmcli::keywords::Keyword] = &[
        slurmcli::keywords::Keyword::new("Accounts", 1),
        slurmcli::keywords::Keyword::new("Flags", 1),
        slurmcli::keywords::Keyword::new("QOS", 1),
        slurmcli::keywords::Keyword::new("Users", 1),
    ];
    let owned: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    let r = slurmcli::keywords::read(&owned, KEYS).map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some((_, w)) = r.bare.first() {
        bail!("invalid keyword for show assoc_mgr: {} (accounts=, users=, qos=, flags=)", slurmcli::visible(w));
    }
    let list = |k: &str| -> Option<Vec<String>> {
        r.assigns.iter().find(|(_, a)| a.key == k).map(|(_, a)| a.value.split(',').map(|s| s.trim().to_ascii_lowercase()).collect())
    };
    let (accounts, users, qos) = (list("Accounts"), list("Users"), list("QOS"));
    let flags = list("Flags").unwrap_or_else(|| vec!["users".into(), "assoc".into(), "qos".into()]);
    let want = |l: &Option<Vec<String>>, v: &str| l.as_ref().is_none_or(|l| l.contains(&v.to_ascii_lowercase()));
    let t = Target::from_env()?;
    let info: AccountingInfo = crate::query::get(&t, "/v1/accounting")?;
    let jobs: Vec<wire::JobInfo> = crate::query::get(&t, "/v1/jobs")?;
    let live: Vec<&wire::JobInfo> =
        jobs.iter().filter(|j| matches!(j.base_state(), "PENDING" | "RUNNING" | "COMPLETING" | "SUSPENDED")).collect();
    let nl = if oneliner { " " } else { "\n    " };
    let uid = |name: &str| nix::unistd::User::from_name(name).ok().flatten().map_or(0, |u| u.uid.as_raw());
    println!("Current Association Manager state");
    let sep = |title: &str| if oneliner { println!("{title}") } else { println!("\n{title}\n") };
    if flags.iter().any(|f| f.starts_with("user")) {
        sep("User Records");
        for u in info.users.iter().filter(|u| want(&users, &u.name)) {
            println!(
                "UserName={}({}) DefAccount={} DefWckey= AdminLevel={}",
                u.name,
                uid(&u.name),
                u.default_account,
                u.admin_level.name()
            );
        }
    }
    if flags.iter().any(|f| f.starts_with("assoc")) {
        sep("Association Records");
        // Ids as Slurm's: root first, then the rows in order.
        let ids: HashMap<String, usize> =
            info.assocs.iter().enumerate().filter(|(_, a)| a.user.is_empty()).map(|(i, a)| (a.account.clone(), i + 2)).collect();
        let mut rows: Vec<(usize, &wire::AssocRow)> = info.assocs.iter().enumerate().map(|(i, a)| (i + 2, a)).collect();
        let root = wire::AssocRow { account: "root".into(), shares: 1, ..Default::default() };
        rows.insert(0, (1, &root));
        for (id, a) in rows {
            if !want(&accounts, &a.account) || (users.is_some() && (a.user.is_empty() || !want(&users, &a.user))) {
                continue;
            }
            // What this row's jobs hold: a user's own in the account; an account's, every job
            // charged to it or an account below it.
            let below = |acct: &str| -> bool {
                let mut cur = Some(acct.to_string());
                for _ in 0..64 {
                    let Some(c) = cur else { return false };
                    if c == a.account || a.account == "root" {
                        return true;
                    }
                    cur = info.accounts.iter().find(|x| x.name == c).and_then(|x| x.parent.clone());
                }
                false
            };
            let mut used = Used::default();
            for j in &live {
                if (a.user.is_empty() && below(&j.account)) || (!a.user.is_empty() && j.user == a.user && j.account == a.account) {
                    used.add(j);
                }
            }
            let user = if a.user.is_empty() { "UserName= ".to_string() } else { format!("UserName={}({}) ", a.user, uid(&a.user)) };
            let parent = if a.user.is_empty() {
                if a.account == "root" {
                    "ParentAccount= ".to_string()
                } else {
                    format!("ParentAccount={}({}) ", a.parent, ids.get(&a.parent).copied().unwrap_or(1))
                }
            } else {
                format!("ParentAccount={}({}) ", a.account, ids.get(&a.account).copied().unwrap_or(1))
            };
            let l = &a.limits;
            let def = info.users.iter().any(|u| u.name == a.user && u.default_account == a.account);
            print!("ClusterName={} Account={} {user}Partition= Priority=0 ID={id}{nl}", info.cluster, a.account);
            print!("SharesRaw/Norm/Level/Factor={}/0.00/{}/0.00{nl}", a.shares, a.shares);
            print!("UsageRaw/Norm/Efctv=0.00/0.00/0.00{nl}");
            print!("{parent}Lft=0 DefAssoc={}{nl}", if def { "Yes" } else { "No" });
            print!("GrpJobs={} GrpJobsAccrue=N(0){nl}", lim(l.grp_jobs, used.jobs));
            print!("GrpSubmitJobs={} GrpWall=N(0.00){nl}", lim(l.grp_submit_jobs, used.submitted));
            print!("{}{nl}", tres_line("GrpTRES", &l.grp_tres, Some(&used)));
            print!("{}{nl}", tres_line("GrpTRESMins", &wire::Tres::default(), Some(&Used::default())));
            print!("{}{nl}", tres_line("GrpTRESRunMins", &wire::Tres::default(), Some(&Used::default())));
            print!(
                "MaxJobs={} MaxJobsAccrue= MaxSubmitJobs={} MaxWallPJ={}{nl}",
                lim_max(l.max_jobs, used.jobs),
                lim_max(l.max_submit_jobs, used.submitted),
                l.max_wall.map_or_else(String::new, |w| (w / 60).to_string())
            );
            print!("{}{nl}", tres_line("MaxTRESPJ", &l.max_tres_per_job, None));
            print!("{}{nl}", tres_line("MaxTRESPN", &wire::Tres::default(), None));
            print!("{}{nl}", tres_line("MaxTRESMinsPJ", &wire::Tres::default(), None));
            println!("MinPrioThresh=");
        }
    }
    if flags.iter().any(|f| f == "qos") {
        sep("QOS Records");
        for (i, q) in info.qos.iter().enumerate() {
            if !want(&qos, &q.name) {
                continue;
            }
            let of_q: Vec<&&wire::JobInfo> = live.iter().filter(|j| j.qos == q.name).collect();
            let mut used = Used::default();
            for j in &of_q {
                used.add(j);
            }
            let l = &q.limits;
            print!("QOS={}({}){nl}", q.name, i + 1);
            print!("UsageRaw=0.000000{nl}");
            print!(
                "GrpJobs={} GrpJobsAccrue=N(0) GrpSubmitJobs={} GrpWall=N(0.00){nl}",
                lim(l.grp_jobs, used.jobs),
                lim(l.grp_submit_jobs, used.submitted)
            );
            print!("{}{nl}", tres_line("GrpTRES", &l.grp_tres, Some(&used)));
            print!("{}{nl}", tres_line("GrpTRESMins", &wire::Tres::default(), Some(&Used::default())));
            print!("{}{nl}", tres_line("GrpTRESRunMins", &wire::Tres::default(), Some(&Used::default())));
            print!("MaxWallPJ={}{nl}", l.max_wall.map_or_else(String::new, |w| (w / 60).to_string()));
            print!("{}{nl}", tres_line("MaxTRESPJ", &l.max_tres_per_job, None));
            print!("{}{nl}", tres_line("MaxTRESPN", &wire::Tres::default(), None));
            print!("{}{nl}", tres_line("MaxTRESMinsPJ", &wire::Tres::default(), None));
            print!("{}{nl}", tres_line("MinTRESPJ", &wire::Tres::default(), None));
            // Per user: what each user's jobs in the QOS use of its per-user limits.
            let mut by_user: Vec<(String, Used)> = Vec::new();
            for j in &of_q {
                match by_user.iter_mut().find(|(u, _)| *u == j.user) {
                    Some((_, u)) => u.add(j),
                    None => {
                        let mut u = Used::default();
                        u.add(j);
                        by_user.push((j.user.clone(), u));
                    }
                }
            }
            print!("PreemptMode=CLUSTER{nl}Priority={}{nl}Account Limits{nl}  No Accounts{nl}User Limits", q.priority);
            if by_user.is_empty() {
                print!("{nl}  No Users");
            }
            for (name, u) in &by_user {
                print!(
                    "{nl}  {}{nl}  MaxJobsPU={} MaxJobsAccruePU=N(0) MaxSubmitJobsPU={}{nl}  {}",
                    uid(name),
                    l.max_jobs.map_or_else(|| format!("N({})", u.jobs), |m| format!("{m}({})", u.jobs)),
                    l.max_submit_jobs.map_or_else(|| format!("N({})", u.submitted), |m| format!("{m}({})", u.submitted)),
                    tres_line("MaxTRESPU", &l.max_tres_per_user, Some(u))
                );
            }
            println!();
        }
    }
    Ok(0)
}
