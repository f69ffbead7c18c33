//! The user's commands: the Slurm-compatible ones (`sbatch`, `squeue`, `scancel`, `sinfo`,
//! `sacct`, `scontrol`, `srun`, `sprio`), `tandem service` and `tandem token`. They parse what
//! the user typed (Slurm's options through `slurmcli`), talk to the controller through `client`
//! with `wire`'s bodies, and print what Slurm (or kubectl) prints. Errors go to stderr as
//! `<command>: error: ...` with exit code 1 (the caller prints them).
//!
//! It owns a user's view and nothing else: it keeps no state between runs and decides nothing a
//! controller decides; it never depends on `server`, `agent` or `proxy` (the tidy test checks),
//! so a binary built from it alone (`tandem-slurm`) starts fast. Its public face: [`slurm`],
//! [`COMMANDS`], [`ServiceCmd`] (with [`RolloutCmd`]) and [`service`], [`token`] (with
//! [`TokenKind`]), [`delete_nodes`], and [`error_line`] and [`visible_text`], which print errors
//! with control characters made visible.

mod acctmgr;
mod attach;
mod bcast;
mod common;
mod data_parser;
mod kube;
mod query;
mod report;
mod resv;
mod sacct;
mod scancel;
mod scontrol;
mod service;
mod share;
mod sinfo;
mod slurm;
mod squeue;
mod srun;
mod stat;
mod status;

use anyhow::{Context, Result};

pub use service::{RolloutCmd, ServiceCmd};
pub use status::status;

/// Tandem's version and the commit it was built from (`0.1.0 (commit 1a2b3c4d5e6f)`; `unknown`
/// outside a git checkout): `tandem --version`.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("TANDEM_COMMIT"), ")");

/// The Slurm commands, by the names they answer to (the links `tandem shims DIR` writes).
pub const COMMANDS: [&str; 15] = [
    "sbatch", "squeue", "scancel", "sinfo", "sacct", "srun", "salloc", "scontrol", "sprio", "sshare", "sreport", "sbcast", "sstat",
    "sattach", "sacctmgr",
];

/// The line a command prints for an error (`NAME: error: ...`, the causes after colons), with
/// control characters made visible ([`slurmcli::visible_text`]): errors echo what users gave
/// (a job name, a path, an id) and what the controller answered.
pub fn error_line(name: &str, e: &anyhow::Error) -> String {
    format!("{}: error: {}", slurmcli::visible(name), slurmcli::visible_text(&format!("{e:#}")))
}

/// A message of several lines (a usage error that echoes an argument) with its control
/// characters, newlines and tabs excepted, made visible.
pub fn visible_text(s: &str) -> String {
    slurmcli::visible_text(s).into_owned()
}

/// Runs the Slurm command `name` (one of [`COMMANDS`]) with its arguments (without the program
/// name) and returns its exit code; `None` when `name` is no Slurm command.
pub fn slurm(name: &str, args: &[String]) -> Option<Result<i32>> {
    if !COMMANDS.contains(&name) {
        return None;
    }
    // The commands that read their options in `slurmcli` (with their scripts and input
    // variables) have their command line read here first, so that a refusal reads as glibc's,
    // and `--help`, `--usage` and `-V` answer before anything else (Tandem's own version is
    // `tandem --version`).
    if matches!(name, "sbatch" | "srun" | "salloc") {
        match common::parse(common::table(name), args) {
            Err(e) => return Some(usage_exit(e)),
            Ok(p) => match p.opts.iter().map(|g| g.key()).find(|k| matches!(*k, "help" | "usage" | "version")) {
                Some("version") => return Some(query::version()),
                Some(_) => return Some(query::help(&run_usage(name))),
                None => {}
            },
        }
    }
    let r = match name {
        "sbatch" => slurm::sbatch(args),
        "squeue" => squeue::squeue(args),
        "scancel" => scancel::scancel(args),
        "sinfo" => sinfo::sinfo(args),
        "sacct" => sacct::sacct(args),
        "srun" => slurm::srun(args),
        "salloc" => srun::salloc(args),
        "scontrol" => scontrol::scontrol(args),
        "sprio" => slurm::sprio(args),
        "sshare" => share::sshare(args),
        "sreport" => report::sreport(args),
        "sbcast" => bcast::sbcast(args),
        "sstat" => stat::sstat(args),
        "sattach" => attach::sattach(args),
        "sacctmgr" => acctmgr::sacctmgr(args),
        _ => return None,
    };
    Some(r.or_else(usage_exit))
}

/// A refused command line ([`common::UsageError`]) printed as glibc and Slurm print it, exit 1;
/// any other error goes on to the caller.
fn usage_exit(e: anyhow::Error) -> Result<i32> {
    match e.downcast_ref::<common::UsageError>() {
        Some(u) => {
            eprintln!("{u}");
            Ok(1)
        }
        None => Err(e),
    }
}

/// The usage of `sbatch`, `srun` and `salloc` (their options are listed in the README's
/// compatibility table).
fn run_usage(name: &str) -> String {
    let what = match name {
        "sbatch" => "[OPTIONS...] executable [args...]\n  Submits a batch script (or --wrap=\"command\") to the queue.",
        "salloc" => "[OPTIONS...] [command [args...]]\n  Obtains an allocation and runs the command (default $SHELL) in it.",
        _ => "[OPTIONS...] executable [args...]\n  Runs a parallel job step (in an allocation, or one made for it).",
    };
    format!(
        "Usage: {name} {what}\n\nCommon options: -A, --account  -a, --array  -c, --cpus-per-task  -C, --constraint  -d, --dependency\n  -D, --chdir  -e, --error  --exclusive  --export  -G, --gpus  --gpus-per-node  --gpus-per-task\n  --gres  -J, --job-name  --mem  --mem-per-cpu  -n, --ntasks  -N, --nodes  --ntasks-per-node\n  -o, --output  -p, --partition  -q, --qos  -t, --time  -w, --nodelist  -x, --exclude\n\n  -V, --version  print Slurm's version line\n  --help         show this help message\n"
    )
}

/// This process's arguments, each as UTF-8; otherwise a one-line error that names the
/// argument (as `std::env::args` would panic instead).
pub fn args() -> std::result::Result<Vec<String>, String> {
    std::env::args_os()
        .enumerate()
        .map(|(i, a)| a.into_string().map_err(|a| format!("argument {i} ({:?}) is not valid UTF-8", a.to_string_lossy())))
        .collect()
}

/// `tandem service ...`: returns the exit code.
pub fn service(cmd: ServiceCmd) -> Result<i32> {
    service::run(cmd)
}

/// What `tandem token` makes.
#[derive(Debug, Clone)]
pub enum TokenKind {
    /// A token for the caller (as `scontrol token`), printed as `export TANDEM_TOKEN=...`.
    User,
    /// `count` single-use join tokens for new nodes, one per line (an administrator).
    Join {
        /// How many.
        count: u32,
    },
    /// A credential for the inference proxy `name` (an administrator); it revokes an older one.
    Proxy {
        /// The proxy's name.
        name: String,
    },
    /// A kubeconfig (to `path`, else standard output).
    Kubeconfig {
        /// Where to write it.
        path: Option<String>,
    },
    /// A token as a Kubernetes `ExecCredential` (a kubeconfig's credential plugin).
    ExecCredential,
}

/// `tandem token`: asks the controller for a token and prints it. `lifespan`: seconds (default
/// 1,800 for a user token, 3,600 for join tokens).
pub fn token(kind: TokenKind, lifespan: Option<i64>) -> Result<i32> {
    let t = client::Target::from_env()?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let send = |path: &str, body: serde_json::Value| rt.block_on(client::send(&t, "POST", path, Some(&body), &[]));
    match kind {
        TokenKind::User => {
            let v: serde_json::Value = rt
                .block_on(client::send(&t, "POST", &format!("/v1/token?lifespan={}", lifespan.unwrap_or(1800)), None::<&()>, &[]))?
                .json()?;
            println!("export TANDEM_TOKEN={}", v["token"].as_str().context("no token in the reply")?);
        }
        TokenKind::Kubeconfig { path } => {
            let v: serde_json::Value = rt
                .block_on(client::send(&t, "POST", &format!("/v1/token?lifespan={}", lifespan.unwrap_or(1800)), None::<&()>, &[]))?
                .json()?;
            let text = kube::kubeconfig(&v, lifespan)?;
            match path {
                Some(p) => kube::write_private(std::path::Path::new(&p), &text)?,
                None => print!("{text}"),
            }
        }
        TokenKind::ExecCredential => {
            let v: serde_json::Value = rt
                .block_on(client::send(&t, "POST", &format!("/v1/token?lifespan={}", lifespan.unwrap_or(1800)), None::<&()>, &[]))?
                .json()?;
            println!("{}", kube::exec_credential(&v)?);
        }
        TokenKind::Join { count } => {
            let v: wire::JoinTokens = send("/v1/join-tokens", serde_json::json!({"count": count, "lifetime": lifespan}))?.json()?;
            for tok in v.tokens {
                println!("{tok}");
            }
        }
        TokenKind::Proxy { name } => {
            if lifespan.is_some() {
                anyhow::bail!("--lifespan does not apply to a proxy credential (it lasts until replaced)");
            }
            let v: wire::Credential = send("/v1/proxy-credentials", serde_json::json!({ "name": name }))?.json()?;
            println!("{}", v.credential);
        }
    }
    Ok(0)
}

/// `tandem admin backup FILE`: a consistent copy of the controller's database.
pub fn backup(file: &std::path::Path) -> Result<i32> {
    slurm::backup(file)
}

/// `tandem node delete HOSTLIST`: deletes nodes and revokes their credentials (as
/// `scontrol delete NodeName=`).
pub fn delete_nodes(list: &str) -> Result<i32> {
    slurm::delete_nodes(list)
}
