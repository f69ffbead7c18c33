//! `tandem.toml` for the daemon: reads the file and parses it with `control::config` (the
//! format, its keys and checks are documented there), then looks the operators' names up.
//! `[limits]` (the flood defences, `crate::limits`) is read beside the rest.

use anyhow::{Context, Result, bail};
use std::path::Path;

/// Who may see what (`[security]`), with operators as uids.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Security {
    /// Uids that see every job's and service's details, as root does.
    pub operators: Vec<u32>,
    /// Other users' jobs and services are hidden entirely (`private_data = ["jobs"]`).
    pub private_jobs: bool,
    /// Other users' priorities are hidden (`private_data = ["usage"]`).
    pub private_usage: bool,
    /// `/metrics` needs no identity.
    pub metrics_open: bool,
}

/// Reads the configuration; `None` gives the defaults.
/// Where the configuration comes from, with the command line's overrides: read at start and
/// again at `scontrol reconfigure`.
#[derive(Debug, Clone, Default)]
pub struct Source {
    /// The file (`None`: the built-in defaults).
    pub path: Option<std::path::PathBuf>,
    /// `--lease`.
    pub lease: Option<u32>,
    /// `--kill-wait`.
    pub kill_wait: Option<u32>,
}

impl Source {
    /// Reads the configuration, with the overrides applied.
    pub fn read(&self) -> Result<(control::Settings, Security, control::config::Limits)> {
        let (mut settings, security, limits) = load(self.path.as_deref())?;
        if let Some(l) = self.lease {
            if l == 0 {
                bail!("--lease must be at least 1 second");
            }
            settings.lease = i64::from(l);
        }
        if let Some(k) = self.kill_wait {
            settings.kill_wait = i64::from(k);
        }
        Ok((settings, security, limits))
    }
}

pub fn load(path: Option<&Path>) -> Result<(control::Settings, Security, control::config::Limits)> {
    let text = match path {
        Some(p) => std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
        // No file: the defaults, with accounting enforced (control::config's defaults).
        None => {
            let (settings, security) = parse_all("")?;
            return Ok((settings, security, control::config::Limits::default()));
        }
    };
    let within = || format!("in {}", path.map_or("tandem.toml".into(), |p| p.display().to_string()));
    let (settings, security) = parse_all(&text).with_context(within)?;
    let limits = control::config::parse_limits(&text).with_context(within)?;
    Ok((settings, security, limits))
}

/// Parses configuration text: the controller's settings and who may see what.
pub fn parse_all(text: &str) -> Result<(control::Settings, Security)> {
    let (settings, s) = control::config::parse(text)?;
    let mut operators = Vec::new();
    for o in s.operators {
        let uid = match o.parse::<u32>() {
            Ok(uid) => uid,
            Err(_) => match nix::unistd::User::from_name(&o) {
                Ok(Some(u)) => u.uid.as_raw(),
                _ => bail!("security.operators: no user named {o:?}"),
            },
        };
        operators.push(uid);
    }
    let mut settings = settings;
    settings.operators = operators.clone();
    Ok((settings, Security { operators, private_jobs: s.private_jobs, private_usage: s.private_usage, metrics_open: s.metrics_open }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_are_looked_up() {
        assert_eq!(parse_all("").unwrap().1, Security::default());
        let (_, s) =
            parse_all("[security]\noperators = [\"root\", \"1234\"]\nprivate_data = [\"jobs\", \"usage\"]\nmetrics_open = true").unwrap();
        assert_eq!(s, Security { operators: vec![0, 1234], private_jobs: true, private_usage: true, metrics_open: true });
        let e = format!("{:#}", parse_all("[security]\noperators = [\"no-such-user-here\"]").unwrap_err());
        assert!(e.contains("no user named"), "{e}");
        assert!(format!("{:#}", parse_all("lease = 0").unwrap_err()).contains("lease"));
    }
}
