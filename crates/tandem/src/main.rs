//! The `tandem` command. This binary is a thin shell: argument parsing, file and network IO,
//! the wall clock and output formatting; the decisions live in `sched`, `control` and `sim`.
//! Invoked as `sbatch`, `squeue`, `scancel`, `sinfo`, `sacct`, `srun`, `scontrol` or `sprio`
//! (links that `tandem shims DIR` writes), it behaves as that Slurm command.

mod agent;
mod api;
mod bench;
mod benchagents;
mod benchfailover;
mod benchproxy;
mod benchsubmit;
mod cli;
mod client;
mod config;
mod journal;
mod loadgen;
mod openapi;
mod proxy;
mod replica;
mod server;
mod simcmd;
mod svccli;
mod up;
mod upstream;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Tandem: one scheduler for training gangs and inference replicas.
#[derive(Parser)]
#[command(name = "tandem", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a whole local cluster: the controller and N agents, each its own process.
    Up {
        /// Node agents to start.
        #[arg(long, default_value_t = 2)]
        agents: u32,
        /// GPUs each agent declares, as MODEL:COUNT or COUNT (e.g. h100:8).
        #[arg(long)]
        gpus_per_agent: Option<String>,
        /// CPUs each agent declares (default: the machine's).
        #[arg(long)]
        cpus_per_agent: Option<u32>,
        /// Memory each agent declares (e.g. 16G; default: the machine's).
        #[arg(long)]
        mem_per_agent: Option<String>,
        /// Data directory (default: a new directory under the system temp dir, printed).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Controller TCP port (0 picks a free one).
        #[arg(long, default_value_t = 7200)]
        port: u16,
        /// Node lease in seconds.
        #[arg(long)]
        lease: Option<u32>,
        /// Cluster configuration file (tandem.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Inference proxy port on 127.0.0.1 (0 picks a free one).
        #[arg(long, default_value_t = 7280)]
        proxy_port: u16,
        /// Start no inference proxy.
        #[arg(long)]
        no_proxy: bool,
    },
    /// The controller daemon.
    Server {
        /// TCP address for agents (and `/metrics`, `/openapi.json`).
        #[arg(long, default_value = "127.0.0.1:7200")]
        listen: std::net::SocketAddr,
        /// Data directory: database, Unix socket, cluster secret.
        #[arg(long, default_value = "/var/lib/tandem")]
        data: PathBuf,
        /// Cluster configuration (default: DATA/tandem.toml when it exists, else built-in defaults).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Node lease in seconds (overrides the configuration; default 30).
        #[arg(long)]
        lease: Option<u32>,
        /// Seconds between SIGTERM and SIGKILL at a job's time limit (overrides; default 30).
        #[arg(long)]
        kill_wait: Option<u32>,
    },
    /// The node daemon.
    Agent {
        /// Controller address, http://host:port.
        #[arg(long, env = "TANDEM_SERVER")]
        server: String,
        /// Node name (default: the host name).
        #[arg(long)]
        name: Option<String>,
        /// File holding the cluster secret (created by the controller at first start).
        #[arg(long)]
        secret_file: PathBuf,
        /// GPUs to declare, as MODEL:COUNT or COUNT, when NVML does not report them.
        #[arg(long)]
        gpus: Option<String>,
        /// CPUs to declare (default: the machine's).
        #[arg(long)]
        cpus: Option<u32>,
        /// Memory to declare (default: the machine's).
        #[arg(long)]
        memory: Option<String>,
        /// Features (comma-separated).
        #[arg(long)]
        features: Option<String>,
        /// Data directory.
        #[arg(long, default_value = "/var/lib/tandem-agent")]
        data: PathBuf,
        /// Address to advertise to jobs (MASTER_ADDR); default 127.0.0.1.
        #[arg(long, default_value = "127.0.0.1")]
        addr: String,
    },
    /// The inference proxy: routes `/s/SERVICE/...` (or `Host: SERVICE`) to a ready replica,
    /// with balancing, retries and passive ejection; endpoints from the controller or `--static`.
    Proxy {
        /// Address to listen on (HTTP/1.1 and HTTP/2 cleartext).
        #[arg(long, default_value = "127.0.0.1:7280")]
        listen: String,
        /// Controller address, http://host:port (endpoints come from it).
        #[arg(long)]
        server: Option<String>,
        /// File holding the cluster secret (with --server).
        #[arg(long)]
        secret_file: Option<PathBuf>,
        /// A fixed service, NAME=HOST:PORT[,HOST:PORT...] (or NAME:POLICY=...; policies
        /// round_robin, least_request, p2c); repeatable. Instead of --server.
        #[arg(long = "static", value_name = "NAME=ADDRS")]
        statics: Vec<String>,
        /// Retries on another replica for --static services.
        #[arg(long, default_value_t = 2)]
        retries: u32,
        /// Worker threads (default: the machine's cores).
        #[arg(long)]
        threads: Option<usize>,
        /// Seed of the random choices (p2c).
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Issue a signed token for remote use of the API (as `scontrol token`): prints
    /// `export TANDEM_TOKEN=...`.
    Token {
        /// Lifespan in seconds.
        #[arg(long, default_value_t = 1800)]
        lifespan: i64,
    },
    /// Write links named after Slurm's commands (sbatch, squeue, ...) to this binary.
    Shims {
        /// Directory for the links.
        dir: PathBuf,
    },
    /// Submit a batch job (sbatch).
    #[command(disable_help_flag = true)]
    Submit {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Show the queue (squeue).
    #[command(disable_help_flag = true)]
    Queue {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Cancel or signal jobs (scancel).
    #[command(disable_help_flag = true)]
    Cancel {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Show nodes (sinfo).
    #[command(disable_help_flag = true)]
    Nodes {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Accounting history (sacct).
    #[command(disable_help_flag = true)]
    History {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Show, hold, release, requeue, update (scontrol).
    #[command(disable_help_flag = true)]
    Show {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Launch a job step inside an allocation (srun).
    #[command(disable_help_flag = true)]
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Per-factor priority of pending jobs (sprio).
    #[command(disable_help_flag = true)]
    Priority {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Inference services: apply, list, show, scale, delete, rollout, logs.
    Service {
        #[command(subcommand)]
        cmd: svccli::ServiceCmd,
    },
    /// Replay a workload trace (or a synthetic workload) through the scheduler in virtual time.
    Sim(simcmd::SimArgs),
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        which: bench::BenchCmd,
    },
}

const SHIMS: [&str; 8] = ["sbatch", "squeue", "scancel", "sinfo", "sacct", "srun", "scontrol", "sprio"];

fn slurm(name: &str, args: &[String]) -> Option<Result<i32>> {
    Some(match name {
        "sbatch" => cli::sbatch(args),
        "squeue" => cli::squeue(args),
        "scancel" => cli::scancel(args),
        "sinfo" => cli::sinfo(args),
        "sacct" => cli::sacct(args),
        "srun" => cli::srun(args),
        "scontrol" => cli::scontrol(args),
        "sprio" => cli::sprio(args),
        _ => return None,
    })
}

fn exit_with(name: &str, r: Result<i32>) -> std::process::ExitCode {
    match r {
        Ok(code) => std::process::ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("{name}: error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

fn gpus_spec(s: &str) -> Result<(Option<String>, u32)> {
    let (t, n) = slurmcli::parse_gpus(s).map_err(|e| anyhow::anyhow!("--gpus: {}", e.0))?;
    Ok((t, n))
}

fn main() -> std::process::ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let invoked = argv.first().map(|a| a.rsplit('/').next().unwrap_or(a).to_string()).unwrap_or_default();
    if let Some(r) = slurm(&invoked, &argv[1..]) {
        return exit_with(&invoked, r);
    }
    if argv.get(1).map(String::as_str) == Some(upstream::UPSTREAM_CMD) {
        return exit_with("tandem __upstream", upstream::run(&argv[2..]).map(|_| 0));
    }
    let cli = Cli::parse();
    let (name, r): (&str, Result<i32>) = match cli.cmd {
        Cmd::Submit { args } => ("sbatch", cli::sbatch(&args)),
        Cmd::Queue { args } => ("squeue", cli::squeue(&args)),
        Cmd::Cancel { args } => ("scancel", cli::scancel(&args)),
        Cmd::Nodes { args } => ("sinfo", cli::sinfo(&args)),
        Cmd::History { args } => ("sacct", cli::sacct(&args)),
        Cmd::Show { args } => ("scontrol", cli::scontrol(&args)),
        Cmd::Run { args } => ("srun", cli::srun(&args)),
        Cmd::Priority { args } => ("sprio", cli::sprio(&args)),
        Cmd::Sim(a) => ("tandem", simcmd::run(a).map(|_| 0)),
        Cmd::Service { cmd } => ("tandem service", svccli::run(cmd)),
        Cmd::Bench { which } => ("tandem", bench::run(which).map(|_| 0)),
        Cmd::Shims { dir } => ("tandem", shims(&dir).map(|_| 0)),
        Cmd::Proxy { listen, server, secret_file, statics, retries, threads, seed } => {
            ("tandem proxy", run_proxy(&listen, server, secret_file, &statics, retries, threads, seed))
        }
        Cmd::Token { lifespan } => ("tandem token", get_token(lifespan)),
        Cmd::Up { agents, gpus_per_agent, cpus_per_agent, mem_per_agent, data, port, lease, config, proxy_port, no_proxy } => (
            "tandem up",
            up::run(up::UpArgs {
                agents,
                gpus: gpus_per_agent,
                cpus: cpus_per_agent,
                memory: mem_per_agent,
                data,
                port,
                lease,
                config,
                proxy_port: (!no_proxy).then_some(proxy_port),
            })
            .map(|_| 0),
        ),
        Cmd::Server { listen, data, config, lease, kill_wait } => ("tandem server", run_server(listen, data, config, lease, kill_wait)),
        Cmd::Agent { server, name, secret_file, gpus, cpus, memory, features, data, addr } => {
            ("tandem agent", run_agent(server, name, secret_file, gpus, cpus, memory, features, data, addr))
        }
    };
    if name == "tandem" {
        return match r {
            Ok(_) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tandem: error: {e:#}");
                std::process::ExitCode::from(2)
            }
        };
    }
    exit_with(name, r)
}

fn get_token(lifespan: i64) -> Result<i32> {
    let t = client::Target::from_env()?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let v: serde_json::Value =
        rt.block_on(client::send(&t, "POST", &format!("/v1/token?lifespan={lifespan}"), None::<&()>, &[]))?.json()?;
    println!("export TANDEM_TOKEN={}", v["token"].as_str().context("no token in the reply")?);
    Ok(0)
}

fn shims(dir: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let exe = std::env::current_exe()?;
    for s in SHIMS {
        let link = dir.join(s);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&exe, &link).with_context(|| format!("linking {}", link.display()))?;
    }
    println!("wrote {} in {}; add it to PATH", SHIMS.join(", "), dir.display());
    Ok(())
}

/// Raises this process's open-file limit: the soft limit to the hard one and, where allowed
/// (root), both to `want` (at most the kernel's `fs.nr_open`), as a controller or a host of many
/// agents at scale needs (one descriptor per connection). Returns the soft limit now in force.
pub(crate) fn raise_nofile(want: u64) -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else { return 0 };
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open").ok().and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or(hard);
    let want = want.min(nr_open);
    if want > hard && setrlimit(Resource::RLIMIT_NOFILE, want, want).is_ok() {
        return want;
    }
    if hard > soft && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

fn run_server(
    listen: std::net::SocketAddr,
    data: PathBuf,
    config: Option<PathBuf>,
    lease: Option<u32>,
    kill_wait: Option<u32>,
) -> Result<i32> {
    let path = config.or_else(|| Some(data.join("tandem.toml")).filter(|p| p.exists()));
    let mut settings = config::load(path.as_deref())?;
    if let Some(l) = lease {
        if l == 0 {
            bail!("--lease must be at least 1 second");
        }
        settings.lease = l as i64;
    }
    if let Some(k) = kill_wait {
        settings.kill_wait = k as i64;
    }
    // One descriptor per agent connection (or per proxy's connection) at scale.
    raise_nofile(1 << 20);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(server::run(server::ServerArgs { listen, data, settings }))?;
    Ok(0)
}

#[allow(clippy::too_many_arguments)]
fn run_agent(
    server: String,
    name: Option<String>,
    secret_file: PathBuf,
    gpus: Option<String>,
    cpus: Option<u32>,
    memory: Option<String>,
    features: Option<String>,
    data: PathBuf,
    addr: String,
) -> Result<i32> {
    let target = client::Target::parse(&server)?;
    let name = match name {
        Some(n) => n,
        None => nix::unistd::gethostname()?.to_string_lossy().into_owned(),
    };
    let secret = std::fs::read_to_string(&secret_file)
        .with_context(|| format!("reading the cluster secret from {}", secret_file.display()))?
        .trim()
        .to_string();
    let gpus = gpus.as_deref().map(gpus_spec).transpose()?;
    let memory = memory.as_deref().map(|m| slurmcli::parse_memory(m).map_err(|e| anyhow::anyhow!("--memory: {}", e.0))).transpose()?;
    let features = features.map(|f| f.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect()).unwrap_or_default();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(agent::run(agent::AgentArgs { server: target, name, gpus, cpus, memory, data, secret, addr, features }))?;
    Ok(0)
}

fn run_proxy(
    listen: &str,
    server: Option<String>,
    secret_file: Option<PathBuf>,
    statics: &[String],
    retries: u32,
    threads: Option<usize>,
    seed: u64,
) -> Result<i32> {
    let listen: std::net::SocketAddr =
        listen.parse().with_context(|| format!("--listen {listen:?}: expected IP:PORT, e.g. 127.0.0.1:7280"))?;
    let statics = statics.iter().map(|s| proxy::parse_static(s)).collect::<Result<Vec<_>>>()?;
    let controller = match (server, secret_file) {
        (Some(_), _) if !statics.is_empty() => bail!("use either --server (endpoints from the controller) or --static, not both"),
        (Some(s), Some(f)) => {
            let secret =
                std::fs::read_to_string(&f).with_context(|| format!("reading the cluster secret from {}", f.display()))?.trim().to_string();
            Some((client::Target::parse(&s)?, secret))
        }
        (Some(_), None) => bail!("--server needs --secret-file (the cluster secret)"),
        (None, Some(_)) => bail!("--secret-file goes with --server"),
        (None, None) if statics.is_empty() => bail!("no upstreams: give --server URL --secret-file FILE, or --static NAME=HOST:PORT[,...]"),
        (None, None) => None,
    };
    if retries > 7 {
        bail!("--retries: at most 7");
    }
    let threads = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())).max(1);
    proxy::run(proxy::ProxyArgs { listen, controller, statics, retries, seed }, threads)?;
    Ok(0)
}
