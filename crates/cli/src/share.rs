//! `sshare`: the fair-share tree, as Slurm's prints it, from the controller's decayed usage
//! (`GET /v1/shares`). Tandem keeps usage per account, so each row is an account, with the
//! fair-share factor its jobs get.

use anyhow::{Result, bail};
use client::Target;

/// The columns, Slurm's headers and widths.
const COLUMNS: [(&str, usize); 7] =
    [("Account", 20), ("User", 10), ("RawShares", 10), ("NormShares", 11), ("RawUsage", 11), ("EffectvUsage", 13), ("FairShare", 10)];

/// `sshare [-h] [-P|--parsable|--parsable2] [-a] [-l] [-A ACCOUNTS] [-u USERS]`.
pub(crate) fn sshare(args: &[String]) -> Result<i32> {
    let (mut header, mut sep, mut accounts) = (true, None::<(&str, bool)>, None::<Vec<String>>);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--noheader" => header = false,
            "-p" | "--parsable" => sep = Some(("|", true)),
            "-P" | "--parsable2" => sep = Some(("|", false)),
            "-a" | "--all" | "-l" | "--long" | "-v" | "--verbose" => {}
            "-A" | "--accounts" => accounts = Some(list(it.next().map(String::as_str), "-A")?),
            "-u" | "--users" => {
                list(it.next().map(String::as_str), "-u")?;
            }
            "--help" | "--usage" => {
                println!("Usage: sshare [-h] [-P] [-p] [-a] [-l] [-A accounts] [-u users]");
                return Ok(0);
            }
            "-V" | "--version" => {
                println!("slurm 25.11.0");
                return Ok(0);
            }
            o if o.starts_with("--accounts=") => accounts = Some(list(o.split_once('=').map(|x| x.1), "--accounts")?),
            o if o.starts_with("--users=") => {}
            o if o.starts_with("-A") && o.len() > 2 => accounts = Some(list(Some(&o[2..]), "-A")?),
            o => bail!("unrecognized option '{o}'\nUsage: sshare [-h] [-P] [-p] [-a] [-l] [-A accounts] [-u users]"),
        }
    }
    let rows: Vec<control_row::Row> = crate::query::get(&Target::from_env()?, "/v1/shares")?;
    let rows: Vec<_> = rows.into_iter().filter(|r| accounts.as_ref().is_none_or(|a| a.contains(&r.account))).collect();
    let cells = |r: &control_row::Row| {
        vec![
            format!(" {}", r.account),
            String::new(),
            r.raw_shares.to_string(),
            format!("{:.6}", r.norm_shares),
            format!("{:.0}", r.raw_usage),
            format!("{:.6}", r.effective_usage),
            format!("{:.6}", r.fairshare),
        ]
    };
    match sep {
        Some((s, trailing)) => {
            let end = if trailing { s } else { "" };
            if header {
                println!("{}{end}", COLUMNS.map(|c| c.0).join(s));
            }
            for r in &rows {
                println!("{}{end}", cells(r).iter().map(|c| c.trim_start()).collect::<Vec<_>>().join(s));
            }
        }
        None => {
            if header {
                println!("{}", COLUMNS.iter().map(|(h, w)| format!("{h:>w$}")).collect::<Vec<_>>().join(" "));
                println!("{}", COLUMNS.iter().map(|(_, w)| "-".repeat(*w)).collect::<Vec<_>>().join(" "));
            }
            for r in &rows {
                let c = cells(r);
                let line: Vec<String> = c
                    .iter()
                    .zip(COLUMNS)
                    .enumerate()
                    .map(|(i, (v, (_, w)))| if i == 0 { format!("{v:<w$.w$}") } else { format!("{v:>w$.w$}") })
                    .collect();
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
