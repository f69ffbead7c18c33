//! What the Slurm commands share below them all: the time, a runtime, a submission.

use anyhow::{Context, Result};
use wire::SubmitRequest;

/// Unix seconds now.
pub(crate) fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// This process's environment, the variables that are UTF-8 (what a command passes on or
/// reads its input variables from).
pub(crate) fn caller_env() -> Vec<(String, String)> {
    std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect()
}

/// A runtime for one command's requests.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

/// A submission of `batch` from here: this directory, host and environment (`sbatch`, and the
/// allocations of `salloc` and `srun`).
pub(crate) fn submission(batch: slurmcli::BatchSpec) -> Result<SubmitRequest> {
    let cwd = std::env::current_dir().context("current directory")?.display().to_string();
    let host = nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_else(|_| "localhost".into());
    Ok(SubmitRequest { batch, cwd, host, env: std::env::vars().collect() })
}

/// A command line that getopt refused; [`crate::slurm`] prints it as glibc and Slurm do
/// (`squeue: unrecognized option '--x'`, then `Try "squeue --help" for more information`) and
/// exits 1.
#[derive(Debug)]
pub(crate) struct UsageError {
    pub(crate) cmd: &'static str,
    pub(crate) msg: String,
}

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}\nTry \"{} --help\" for more information", self.cmd, self.msg, self.cmd)
    }
}

impl std::error::Error for UsageError {}

/// Reads a Slurm command's command line with its table (`slurmcli::command`), as glibc's
/// getopt_long would; `POSIXLY_CORRECT` in the environment ends the options at the first word.
pub(crate) fn parse(cmd: &'static slurmcli::getopt::Command, args: &[String]) -> Result<slurmcli::getopt::Parsed> {
    let order = if std::env::var_os("POSIXLY_CORRECT").is_some() { slurmcli::getopt::Order::RequireOrder } else { cmd.order };
    slurmcli::getopt::getopt_in(cmd, args, order).map_err(|e| UsageError { cmd: cmd.name, msg: e.0 }.into())
}

/// The table of Slurm command `name` (one of [`crate::COMMANDS`]).
pub(crate) fn table(name: &str) -> &'static slurmcli::getopt::Command {
    slurmcli::command(name).expect("every Slurm command has an option table")
}
