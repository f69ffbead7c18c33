//! `sshare`: the fair-share tree, as Slurm's prints it, from the controller's decayed usage
//! (`GET /v1/shares`): each account, and under it each user its associations name, with the
//! fair-share factor their jobs get.

use anyhow::{Result, bail};
use client::Target;

/// The columns, Slurm's headers and widths.
const COLUMNS: [(&str, usize); 7] =
    [("Account", 20), ("User", 10), ("RawShares", 10), ("NormShares", 11), ("RawUsage", 11), ("EffectvUsage", 13), ("FairShare", 10)];

const USAGE: &str = "Usage: sshare [-n] [-P] [-p] [-a] [-l] [-U] [-A accounts] [-u users] [-o fields] [-M cluster]
  -o, --format=fields  comma separated fields, each with an optional %width (Account,FairShare%12):
                       Account, User, RawShares, NormShares, RawUsage, EffectvUsage, FairShare
  -m, --partition      accepted: usage is kept per account here, not per partition";

/// `sshare [-n] [-P|--parsable|--parsable2] [-a] [-l] [-U] [-A ACCOUNTS] [-u USERS]`.
pub(crate) fn sshare(args: &[String]) -> Result<i32> {
    let (mut header, mut sep, mut accounts, mut users_only, mut clusters) = (true, None::<(&str, bool)>, None::<Vec<String>>, false, None);
    let (mut all_users, mut users) = (false, None::<Vec<String>>);
    let mut fields = None;
    let (p, _) = crate::common::parse_env("sshare", args)?;
    for g in &p.opts {
        match g.key() {
            "noheader" => header = false,
            "parsable" => sep = Some(("|", true)),
            "parsable2" => sep = Some(("|", false)),
            "accounts" => accounts = Some(list(Some(g.value()), "-A")?),
            "users" => users = Some(list(Some(g.value()), "-u")?),
            // Rows of users alone.
            "Users" => users_only = true,
            "clusters" => clusters = Some(g.value().to_string()),
            "format" => {
                let names = COLUMNS.map(|c| c.0);
                fields = Some(slurmcli::parse_fields(g.value(), &names).map_err(|e| anyhow::anyhow!("{}", e.0))?);
            }
            "help" | "usage" => {
                println!("{USAGE}");
                return Ok(0);
            }
            "version" => return crate::query::version(),
            // Every account is listed, with Slurm's default columns.
            "all" => all_users = true,
            "long" | "verbose" => {}
            other => unreachable!("sshare's table and its reader disagree on {other}"),
        }
    }
    if let Some(word) = p.args.first() {
        bail!("unexpected argument '{}'\n{USAGE}", word.escape_debug());
    }
    let t = Target::from_env()?;
    if let Some(c) = &clusters {
        crate::query::check_clusters(&t, c)?;
    }
    let rows: Vec<control_row::Row> = crate::query::get(&t, "/v1/shares")?;
    // As Slurm's: every account's row; users' rows for the caller (`-a`: everyone; `-u`: those
    // named); `-U`: users' rows alone.
    let me = nix::unistd::User::from_uid(nix::unistd::getuid()).ok().flatten().map(|u| u.name).unwrap_or_default();
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|r| accounts.as_ref().is_none_or(|a| a.contains(&r.account)))
        .filter(|r| {
            if r.user.is_empty() {
                return !users_only && users.is_none();
            }
            match &users {
                Some(u) => u.contains(&r.user),
                None => all_users || r.user == me,
            }
        })
        .collect();
    // The columns shown: -o's, or all of them at Slurm's widths.
    let cols: Vec<(usize, usize)> = match &fields {
        Some(f) => f.iter().map(|&(i, w)| (i, w.unwrap_or(COLUMNS[i].1))).collect(),
        None => (0..COLUMNS.len()).map(|i| (i, COLUMNS[i].1)).collect(),
    };
    let all_cells = |r: &control_row::Row| {
        vec![
            if r.user.is_empty() { format!(" {}", r.account) } else { format!("  {}", r.account) },
            r.user.clone(),
            r.raw_shares.to_string(),
            format!("{:.6}", r.norm_shares),
            format!("{:.0}", r.raw_usage),
            format!("{:.6}", r.effective_usage),
            format!("{:.6}", r.fairshare),
        ]
    };
    let cells = |r: &control_row::Row| {
        let c = all_cells(r);
        cols.iter().map(|&(i, _)| c[i].clone()).collect::<Vec<_>>()
    };
    let heads: Vec<&str> = cols.iter().map(|&(i, _)| COLUMNS[i].0).collect();
    match sep {
        Some((s, trailing)) => {
            let end = if trailing { s } else { "" };
            if header {
                println!("{}{end}", heads.join(s));
            }
            for r in &rows {
                println!("{}{end}", cells(r).iter().map(|c| c.trim_start()).collect::<Vec<_>>().join(s));
            }
        }
        None => {
            if header {
                // Every header right-justified, the account's too (its values are not), as Slurm's.
                println!("{}", heads.iter().zip(&cols).map(|(h, (_, w))| format!("{h:>w$}")).collect::<Vec<_>>().join(" "));
                println!("{}", cols.iter().map(|(_, w)| "-".repeat(*w)).collect::<Vec<_>>().join(" "));
            }
            for r in &rows {
                let c = cells(r);
                let line: Vec<String> =
                    c.iter().zip(&cols).map(|(v, &(i, w))| if i == 0 { format!("{v:<w$.w$}") } else { format!("{v:>w$.w$}") }).collect();
                println!("{}", line.join(" "));
            }
        }
    }
    Ok(0)
}

fn list(v: Option<&str>, what: &str) -> Result<Vec<String>> {
    match v {
        Some(v) if !v.is_empty() => Ok(v.split(',').map(str::to_string).collect()),
        _ => bail!("option {what} requires a list"),
    }
}

/// The controller's rows as this command reads them (the wire's `ShareRow`).
mod control_row {
    pub(super) use wire::ShareRow as Row;
}
