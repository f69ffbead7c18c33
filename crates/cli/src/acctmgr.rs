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
                 qos NAME... [Priority= PreemptTier= GraceTime= Description= limits]
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
                r.insert("PreemptMode", "cluster".into());
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
            if col == "QOS" {
                v.split(',').any(|q| want.contains(&q.to_ascii_lowercase()))
            } else {
                want.contains(&v.to_ascii_lowercase())
            }
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
