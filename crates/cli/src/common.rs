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
    Ok(SubmitRequest { batch, cwd, host, env: std::env::vars().collect(), umask: Some(umask()) })
}

/// This process's umask (sent with submissions, steps and services: their tasks run with it).
pub(crate) fn umask() -> u32 {
    use nix::sys::stat::{Mode, umask};
    // Reading it means setting it: set it back at once (one thread does this, at a time when
    // it creates no file).
    let m = umask(Mode::from_bits_truncate(0o022));
    umask(m);
    m.bits() & 0o777
}

/// Refuses a batch script over the controller's `max_script_size` before sending it, with a
/// message that names its size, the limit and the setting. Only a script over
/// [`slurmcli::SCRIPT_SIZE_CHECK_FROM`] costs the request for the limit; a smaller one over a
/// site's lower limit is refused by the controller, in the same words.
pub(crate) fn check_script_size(t: &client::Target, script: &str) -> Result<()> {
    let size = script.len() as u64;
    if size <= slurmcli::SCRIPT_SIZE_CHECK_FROM {
        return Ok(());
    }
    let c: wire::ConfigInfo = runtime()?.block_on(client::send(t, "GET", "/v1/config", None::<&()>, &[]))?.json()?;
    match c.max_script_size {
        Some(limit) if size > limit => anyhow::bail!("{}", slurmcli::script_too_large(size, limit)),
        _ => Ok(()),
    }
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

/// Reads Slurm command `name`'s command line ([`parse`]) after its input variables
/// (`slurmcli::env_table`: `SQUEUE_USERS`, `SINFO_SORT`, ...), each read as the option it stands
/// for: those options come first in the result's `opts`, so that the command line's override
/// them; the variables it sets aside are among `ignored`. The settings the command reads itself
/// (`SQUEUE_FORMAT`, ...) are in the second value; `SLURM_TIME_FORMAT` is applied here, to every
/// time the command prints ([`time_format`]; a bad one is said, and the standard form kept, as
/// Slurm's commands do).
pub(crate) fn parse_env(name: &str, args: &[String]) -> Result<(slurmcli::getopt::Parsed, slurmcli::envvars::FromEnv)> {
    let cmd = table(name);
    let mut p = parse(cmd, args)?;
    let Some(vars) = slurmcli::env_table(name) else { return Ok((p, Default::default())) };
    let from = slurmcli::read_env(vars, cmd, &caller_env()).map_err(|e| anyhow::anyhow!("{}", e.0))?;
    if let Some(v) = from.setting("SLURM_TIME_FORMAT") {
        match slurmcli::TimeFormat::parse(v) {
            Ok(f) => {
                let _ = TIME_FORMAT.set(f);
            }
            Err(e) => eprintln!("{name}: error: {}", e.0),
        }
    }
    let mut opts: Vec<slurmcli::getopt::Given> = from.opts.iter().map(|(_, g)| g.clone()).collect();
    opts.append(&mut p.opts);
    p.opts = opts;
    p.ignored.extend(from.ignored.iter().filter_map(|(_, g)| g.clone()));
    Ok((p, from))
}

/// How this command prints times (`SLURM_TIME_FORMAT`, read by [`parse_env`]).
static TIME_FORMAT: std::sync::OnceLock<slurmcli::TimeFormat> = std::sync::OnceLock::new();

/// How this command prints times: `SLURM_TIME_FORMAT`'s form where the command reads it, else
/// Slurm's standard one.
pub(crate) fn time_format() -> &'static slurmcli::TimeFormat {
    TIME_FORMAT.get_or_init(slurmcli::TimeFormat::default)
}

/// The table of Slurm command `name` (one of [`crate::COMMANDS`]).
pub(crate) fn table(name: &str) -> &'static slurmcli::getopt::Command {
    slurmcli::command(name).expect("every Slurm command has an option table")
}

/// Prints the site's job-submit policy's message to the user, as Slurm's commands do: each line
/// as `CMD: LINE` after a success, `CMD: error: LINE` before a refusal's own error.
pub(crate) fn show_user_msg(cmd: &str, reply: &client::Reply) {
    if let Some(m) = reply.user_msg() {
        let error = if reply.status >= 400 { "error: " } else { "" };
        for line in m.lines() {
            eprintln!("{cmd}: {error}{}", slurmcli::visible(line));
        }
    }
}
