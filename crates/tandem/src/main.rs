//! The `tandem` command: a thin shell that parses the command line and dispatches. The daemons
//! are crates of their own (`server`, `agent`, `proxy`), as are the user's commands (`cli`), the
//! local cluster (`up`) and the benchmarks (`bench`); `simcmd` is the simulator's front-end.
//! Invoked as `sbatch`, `squeue`, `scancel`, `sinfo`, `sacct`, `srun`, `scontrol` or `sprio`,
//! it behaves as that Slurm command; the links that `tandem shims DIR` writes point to
//! `tandem-slurm` (the same commands in a binary built from `cli` alone, which starts faster).

mod simcmd;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Tandem: one scheduler for training gangs and inference replicas.
#[derive(Parser)]
#[command(name = "tandem", version = cli::VERSION, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// How a daemon logs (the `logging` crate).
#[derive(clap::Args, Clone)]
struct LogArgs {
    /// What to log: a level (error, warn, info, debug, trace; or Slurm's quiet, fatal,
    /// verbose, debug2..debug5) or directives (info,server::jobs=debug). Default: TANDEM_LOG,
    /// else info.
    #[arg(long, value_name = "FILTER")]
    log_level: Option<String>,
    /// text (default) or json: one object per line with the event's fields.
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// Append to this file (0600 if new) instead of standard error; opened afresh at SIGHUP,
    /// after logrotate moved it.
    #[arg(long, value_name = "FILE")]
    log_file: Option<PathBuf>,
}

impl LogArgs {
    /// Sets this process's logging up, before the daemon starts.
    fn init(&self) -> Result<()> {
        logging::init(&logging::Options { filter: self.log_level.clone(), format: self.log_format.parse()?, file: self.log_file.clone() })?;
        Ok(())
    }

    /// The same options for a daemon `tandem up` starts.
    fn to_args(&self) -> Vec<String> {
        let mut a = Vec::new();
        if let Some(l) = &self.log_level {
            a.extend(["--log-level".to_string(), l.clone()]);
        }
        if self.log_format != "text" {
            a.extend(["--log-format".to_string(), self.log_format.clone()]);
        }
        a
    }
}

/// `tandem admin ...`.
#[derive(Subcommand)]
enum AdminCmd {
    /// Write a consistent copy of the controller's database to FILE (administrators; taken
    /// while it runs). A controller started on the copy knows it is restored: it holds the
    /// jobs the copy has unfinished until their agents or an operator settle them.
    Backup {
        /// Where (a new file, made 0600).
        file: PathBuf,
    },
    /// Copy a stopped controller's SQLite state (DATA/state.db) into etcd below an empty
    /// prefix, for controllers started with `--store etcd://...` afterwards (a build with
    /// `--features etcd`). A migration cut short is run again; controllers refuse to start on
    /// its incomplete state.
    Migrate {
        /// The controller's data directory.
        #[arg(long, value_name = "DIR")]
        data: PathBuf,
        /// etcd://HOST:PORT[,HOST:PORT...].
        #[arg(long, value_name = "URL")]
        store: String,
        #[command(flatten)]
        etcd: EtcdArgs,
    },
}

/// Where a cluster's keys are in etcd, and TLS to it (`tandem server`, `tandem admin migrate`).
#[derive(clap::Args)]
struct EtcdArgs {
    /// The prefix of the cluster's keys in etcd.
    #[arg(long, default_value = "/tandem", value_name = "PATH")]
    etcd_prefix: String,
    /// TLS to etcd: the CA that signed etcd's certificates (with --etcd-cert and --etcd-key).
    #[arg(long, value_name = "PEM", requires_all = ["etcd_cert", "etcd_key"])]
    etcd_ca: Option<PathBuf>,
    /// The controller's client certificate for etcd.
    #[arg(long, value_name = "PEM", requires = "etcd_ca")]
    etcd_cert: Option<PathBuf>,
    /// Its key (readable by the controller's user alone).
    #[arg(long, value_name = "PEM", requires = "etcd_ca")]
    etcd_key: Option<PathBuf>,
}

impl EtcdArgs {
    /// The TLS files, where given.
    fn tls(&self) -> Option<(PathBuf, PathBuf, PathBuf)> {
        match (&self.etcd_ca, &self.etcd_cert, &self.etcd_key) {
            (Some(a), Some(c), Some(k)) => Some((a.clone(), c.clone(), k.clone())),
            _ => None,
        }
    }
}

/// `tandem node ...`.
#[derive(Subcommand)]
enum NodeCmd {
    /// Delete nodes (a hostlist, as `n[1-4]`) and revoke their credentials; refused while jobs
    /// run on a node.
    Delete {
        /// The nodes.
        nodes: String,
    },
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a whole local cluster: the controller and N agents, each its own process.
    Up {
        #[command(flatten)]
        log: LogArgs,
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
        /// Leave /etc/hosts alone: add no lines for the node names (node1 ...), print no notice.
        #[arg(long)]
        no_hosts: bool,
        /// Controllers that take over from each other: a three-member etcd in DATA/etcd
        /// (Debian's etcd-server: apt-get install etcd-server) and two controllers on it (a
        /// build with `--features etcd`).
        #[arg(long)]
        ha: bool,
    },
    /// Cluster administration: `tandem admin backup FILE`.
    Admin {
        #[command(subcommand)]
        cmd: AdminCmd,
    },
    /// Stop a local cluster that `tandem up` started: its `tandem up` (which stops its
    /// daemons), or the daemons a killed `tandem up` left running. Running jobs' keepers stay.
    Down {
        /// Its data directory (default: the newest cluster `tandem up` made without --data).
        #[arg(long)]
        data: Option<PathBuf>,
    },
    /// The controller daemon.
    Server {
        #[command(flatten)]
        log: LogArgs,
        /// TCP address for agents (and `/metrics`, `/openapi.json`).
        #[arg(long, default_value = "127.0.0.1:7200")]
        listen: std::net::SocketAddr,
        /// Serve a listening TCP socket inherited at this descriptor instead of binding
        /// --listen (a supervisor such as `tandem up` holds the port across restarts).
        #[arg(long, value_name = "FD", conflicts_with = "listen")]
        listen_fd: Option<i32>,
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
        /// Plain HTTP on the TCP port instead of TLS (loopback development only).
        #[arg(long)]
        insecure: bool,
        /// Another name (DNS name or IP address) for the controller's TLS certificate;
        /// repeatable. Clients verify the name controller.tandem whatever they dial.
        #[arg(long = "tls-san", value_name = "NAME")]
        tls_san: Vec<String>,
        /// Where the cluster's state is: `sqlite` (DATA/state.db, the default) or
        /// etcd://HOST:PORT[,HOST:PORT...], where several controllers take over from each
        /// other (builds with the `etcd` feature).
        #[arg(long, env = "TANDEM_STORE", value_name = "URL")]
        store: Option<String>,
        #[command(flatten)]
        etcd: EtcdArgs,
        /// The leader's lease in etcd, in seconds (default 3): a leader not heard from for
        /// this long is replaced, and one that cannot renew it in four fifths of it stops.
        #[arg(long, value_name = "SECS")]
        etcd_lease: Option<u32>,
        /// Seconds between the leader's rounds of etcd upkeep (default 300; 0: none, where etcd
        /// compacts and defragments itself): history compacted to the round before's revision,
        /// members holding 64 MiB or more of free pages defragmented one at a time.
        #[arg(long, value_name = "SECS")]
        etcd_upkeep: Option<u32>,
        /// The address clients reach this controller's TCP port at, HOST:PORT (or
        /// https://HOST:PORT): what standbys send clients to while it leads. Default: --listen,
        /// an unspecified address read as 127.0.0.1; give it with several controllers.
        #[arg(long, value_name = "HOST:PORT")]
        advertise: Option<String>,
    },
    /// The node daemon.
    Agent {
        #[command(flatten)]
        log: LogArgs,
        /// Controller address, https://host:port (http:// with an --insecure controller).
        #[arg(long, env = "TANDEM_SERVER")]
        server: String,
        /// The cluster CA (DATA/ca.pem of the controller), for https://.
        #[arg(long, env = "TANDEM_CA")]
        ca: Option<PathBuf>,
        /// Node name (default: the host name).
        #[arg(long)]
        name: Option<String>,
        /// File holding a single-use join token (`tandem token --join`), for a node without a
        /// credential in DATA/credential yet; a restart reuses the stored credential (the file may
        /// then be gone).
        #[arg(long)]
        join_token_file: Option<PathBuf>,
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
        /// A registry (host:port) that container images are pulled from in plain HTTP;
        /// repeatable (every other registry is spoken to by HTTPS).
        #[arg(long = "insecure-registry", env = "TANDEM_INSECURE_REGISTRIES", value_delimiter = ',')]
        insecure_registries: Vec<String>,
        /// A CA certificate (PEM) trusted for registries beside the system's; repeatable.
        #[arg(long = "registry-ca", env = "TANDEM_REGISTRY_CA", value_delimiter = ',')]
        registry_ca: Vec<PathBuf>,
        /// A directory of CDI specifications (nvidia-ctk cdi generate) for GPUs in containers;
        /// repeatable (default: /etc/cdi and /var/run/cdi).
        #[arg(long = "cdi-spec-dir", env = "TANDEM_CDI_SPEC_DIRS", value_delimiter = ',')]
        cdi_spec_dirs: Vec<PathBuf>,
        /// The node's image cache bound, e.g. 50G: past it, the least recently used images no
        /// task runs are removed (default: half the data directory's file system, at most 100G).
        #[arg(long, env = "TANDEM_IMAGE_CACHE_SIZE")]
        image_cache_size: Option<String>,
        /// SIGTERM stops the node's tasks too, as SIGINT does: for a supervisor that kills the
        /// agent's whole cgroup once it exits (a Kubernetes pod). Without it, SIGTERM (systemctl
        /// stop or restart, an upgrade) leaves the tasks to their keepers for the next start.
        #[arg(long)]
        stop_tasks_on_sigterm: bool,
    },
    /// The inference proxy: routes `/s/SERVICE/...` (or `Host: SERVICE`) to a ready replica,
    /// with balancing, retries and passive ejection; endpoints from the controller or `--static`.
    Proxy {
        #[command(flatten)]
        log: LogArgs,
        /// Address to listen on (HTTP/1.1 and HTTP/2 cleartext).
        #[arg(long, default_value = "127.0.0.1:7280")]
        listen: String,
        /// Serve a listening TCP socket inherited at this descriptor instead of binding
        /// --listen, one worker thread each; repeatable (a supervisor such as `tandem up`
        /// holds the port across restarts).
        #[arg(long = "listen-fd", value_name = "FD", conflicts_with = "listen")]
        listen_fds: Vec<i32>,
        /// Controller address, https://host:port (endpoints come from it).
        #[arg(long)]
        server: Option<String>,
        /// The cluster CA (DATA/ca.pem of the controller), for https://.
        #[arg(long, env = "TANDEM_CA")]
        ca: Option<PathBuf>,
        /// File holding the proxy's credential (`tandem token --proxy NAME`; with --server).
        #[arg(long)]
        credential_file: Option<PathBuf>,
        /// A fixed service, NAME=HOST:PORT[,HOST:PORT...] (or NAME:POLICY=...; policies
        /// round_robin, least_request, p2c, llm: prefix-cache and load aware, for
        /// OpenAI-compatible LLM servers); repeatable. Instead of --server.
        #[arg(long = "static", value_name = "NAME=ADDRS")]
        statics: Vec<String>,
        /// Retries on another replica for --static services.
        #[arg(long, default_value_t = 2)]
        retries: u32,
        /// A --static service (by NAME) whose streaming OpenAI completions go on on another
        /// replica when theirs fails mid-stream (as `[proxy] resume_streams`); repeatable.
        #[arg(long = "resume-streams", value_name = "NAME")]
        resume_streams: Vec<String>,
        /// Worker threads (default: the machine's cores).
        #[arg(long)]
        threads: Option<usize>,
        /// Seed of the random choices (p2c).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Requests in flight per replica of --static llm services; more wait in the proxy,
        /// served by tenant in weighted fair order (as `[proxy] max_concurrency`).
        #[arg(long)]
        max_concurrency: Option<u32>,
        /// Bound on a request's expected wait in that queue (e.g. 2s, 500ms; default 10s);
        /// longer gets 429 with Retry-After.
        #[arg(long)]
        max_wait: Option<String>,
        /// Header whose value names a request's tenant (one of --tenant).
        #[arg(long)]
        tenant_header: Option<String>,
        /// A tenant of the fair queue, NAME[=WEIGHT] (weight 1 by default); repeatable.
        /// Requests naming no tenant are tenant `default`'s.
        #[arg(long = "tenant", value_name = "NAME[=WEIGHT]")]
        tenants: Vec<String>,
        /// Streamed requests per replica that may await their first token before another
        /// queued one is sent to it (default 1: one prefill at a time; 0: not paced); as
        /// `[proxy] prefill_pace`. Needs --max-concurrency.
        #[arg(long)]
        prefill_pace: Option<u32>,
    },
    /// Issue a signed token for remote use of the API (as `scontrol token`): prints
    /// `export TANDEM_TOKEN=...`. With --join, single-use join tokens for new nodes; with
    /// --proxy NAME, a proxy's credential (root or the controller's user).
    Token {
        /// Lifespan in seconds (default 1800; 3600 for --join).
        #[arg(long)]
        lifespan: Option<i64>,
        /// Print single-use join tokens, one per line, each admitting one new node
        /// (`tandem agent --join-token-file`).
        #[arg(long, conflicts_with = "proxy")]
        join: bool,
        /// How many join tokens.
        #[arg(long, default_value_t = 1, requires = "join")]
        count: u32,
        /// Print a credential for the inference proxy NAME (`tandem proxy --credential-file`);
        /// one issued earlier for NAME stops working.
        #[arg(long, value_name = "NAME")]
        proxy: Option<String>,
        /// Write a kubeconfig for kubectl and the Kubernetes client libraries to FILE (0600;
        /// `-` or no FILE: standard output): the controller's address and CA, and a
        /// credential plugin (`tandem token --exec-credential`) that renews the token by itself.
        #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-", conflicts_with_all = ["join", "proxy"])]
        kubeconfig: Option<String>,
        /// Print a token as a Kubernetes ExecCredential (what a kubeconfig's `exec` plugin runs).
        #[arg(long, conflicts_with_all = ["join", "proxy", "kubeconfig"])]
        exec_credential: bool,
    },
    /// Node administration: `tandem node delete HOSTLIST` (as `scontrol delete NodeName=`)
    /// removes nodes and revokes their credentials.
    Node {
        #[command(subcommand)]
        cmd: NodeCmd,
    },
    /// Write links named after Slurm's commands (sbatch, squeue, ...) to tandem-slurm, beside
    /// this binary.
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
    /// Which controller leads, and the store's health (etcd's members too).
    ///
    /// What each controller named in TANDEM_SERVER answers, then the leader's account of its
    /// store; exits 1 where none leads or etcd has no healthy majority.
    Status {
        /// One JSON document.
        #[arg(long)]
        json: bool,
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
        cmd: cli::ServiceCmd,
    },
    /// Print the shell completion script for `tandem` (bash, zsh, fish, elvish, powershell):
    /// `source <(tandem completion bash)`; the Debian package installs it.
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write the manual pages: `tandem.1` and one per subcommand into DIR (`man1/`), and with
    /// --slurm, the Slurm commands' pages, generated from their option tables, into that
    /// directory (for packaging).
    #[command(hide = true)]
    Manpages {
        /// Where `man1/tandem*.1` go.
        dir: PathBuf,
        /// Where `man1/sbatch.1` and the other Slurm commands' pages go.
        #[arg(long, value_name = "DIR")]
        slurm: Option<PathBuf>,
    },
    /// Replay a workload trace (or a synthetic workload) through the scheduler in virtual time.
    Sim(simcmd::SimArgs),
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        which: bench::BenchCmd,
    },
}

fn exit_with(name: &str, r: Result<i32>) -> std::process::ExitCode {
    match r {
        Ok(code) => std::process::ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("{}", cli::error_line(name, &e));
            std::process::ExitCode::from(1)
        }
    }
}

fn main() -> std::process::ExitCode {
    let argv = match cli::args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let invoked = argv.first().map(|a| a.rsplit('/').next().unwrap_or(a).to_string()).unwrap_or_default();
    // Commands end quietly when their output pipe closes; daemons (and `up`, which must stop
    // its children) keep SIGPIPE ignored.
    let daemon = !cli::COMMANDS.contains(&invoked.as_str())
        && matches!(
            argv.get(1).map(String::as_str),
            Some("server" | "agent" | "proxy" | "up" | "bench" | bench::UPSTREAM_CMD | bench::LLM_CMD | bench::FLOOD_CMD)
        );
    if !daemon {
        exec::quiet_sigpipe();
    }
    if let Some(r) = cli::slurm(&invoked, argv.get(1..).unwrap_or(&[])) {
        return exit_with(&invoked, r);
    }
    if argv.get(1).map(String::as_str) == Some(agent::CONTAINER_ROOT_CMD) {
        // The same, inside the user namespace it made: the container's root, then runc.
        return std::process::ExitCode::from(agent::container_root_main(&argv[2..]).clamp(0, 255) as u8);
    }
    if argv.get(1).map(String::as_str) == Some(agent::CONTAINER_CMD) {
        // A container task, started by an agent as the job's user.
        return std::process::ExitCode::from(agent::container_main(&argv[2..]).clamp(0, 255) as u8);
    }
    if argv.get(1).map(String::as_str) == Some(pmix::NODE_CMD) {
        // The node's PMIx server of an srun --mpi=pmix step, started by its first task host.
        return std::process::ExitCode::from(pmix::node_main(&argv[2..]).clamp(0, 255) as u8);
    }
    if argv.get(1).map(String::as_str) == Some(pmix::TASK_CMD) {
        // An srun --mpi=pmix task, started by an agent as the job's user: its PMIx server.
        return std::process::ExitCode::from(pmix::task_main(&argv[2..]).clamp(0, 255) as u8);
    }
    if argv.get(1).map(String::as_str) == Some(agent::LAUNCHER_CMD) {
        // The process that forks an agent's tasks, started by the agent (its data directory).
        let Some(data) = argv.get(2) else { return std::process::ExitCode::from(2) };
        // Its lines beside its agent's (the filter from TANDEM_LOG, which it inherits).
        let _ = logging::init(&logging::Options::default());
        return exit_with("tandem __launcher", agent::launcher_main(std::path::Path::new(data)).map(|_| 0));
    }
    if argv.get(1).map(String::as_str) == Some(agent::TASK_WRAP_CMD) {
        // A task between the site's task prolog and epilog, started by an agent as its user.
        return std::process::ExitCode::from(agent::task_wrap_main(&argv[2..]).clamp(0, 255) as u8);
    }
    if argv.get(1).map(String::as_str) == Some(agent::READ_OUTPUT_CMD) {
        // A task's output for `kubectl logs`, read by an agent as the job's user.
        return std::process::ExitCode::from(agent::read_output_main(&argv[2..]).clamp(0, 255) as u8);
    }
    if argv.get(1).map(String::as_str) == Some(server::JOB_SUBMIT_CMD) {
        // The site's job_submit.lua, started by the controller.
        return std::process::ExitCode::from(server::job_submit_main(&argv[2..]).clamp(0, 255) as u8);
    }
    if argv.get(1).map(String::as_str) == Some(agent::LOGIN_ENV_CMD) {
        // A batch script with --get-user-env, started by an agent as the job's user.
        return std::process::ExitCode::from(agent::login_env_main(&argv[2..]).clamp(0, 255) as u8);
    }
    if argv.get(1).map(String::as_str) == Some(bench::UPSTREAM_CMD) {
        return exit_with("tandem __upstream", bench::upstream(&argv[2..]).map(|_| 0));
    }
    if argv.get(1).map(String::as_str) == Some(bench::FLOOD_CMD) {
        return exit_with("tandem __flood", bench::flood_attacker(&argv[2..]).map(|_| 0));
    }
    if argv.get(1).map(String::as_str) == Some(bench::LLM_CMD) {
        return exit_with("tandem __llm", bench::llm_server(&argv[2..]).map(|_| 0));
    }
    let cli = match Cli::try_parse_from(&argv) {
        Ok(c) => c,
        Err(e) if matches!(e.kind(), clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion) => e.exit(),
        Err(e) => {
            // Clap's errors echo the arguments: their control characters made visible.
            eprint!("{}", cli::visible_text(&e.render().to_string()));
            return std::process::ExitCode::from(e.exit_code().clamp(0, 255) as u8);
        }
    };
    let (name, r): (&str, Result<i32>) = match cli.cmd {
        Cmd::Submit { args } => ("sbatch", slurm("sbatch", &args)),
        Cmd::Queue { args } => ("squeue", slurm("squeue", &args)),
        Cmd::Cancel { args } => ("scancel", slurm("scancel", &args)),
        Cmd::Nodes { args } => ("sinfo", slurm("sinfo", &args)),
        Cmd::History { args } => ("sacct", slurm("sacct", &args)),
        Cmd::Show { args } => ("scontrol", slurm("scontrol", &args)),
        Cmd::Run { args } => ("srun", slurm("srun", &args)),
        Cmd::Priority { args } => ("sprio", slurm("sprio", &args)),
        Cmd::Status { json } => ("tandem status", cli::status(json)),
        Cmd::Sim(a) => ("tandem", simcmd::run(a).map(|_| 0)),
        Cmd::Service { cmd } => ("tandem service", cli::service(cmd)),
        Cmd::Bench { which } => ("tandem", bench::run(which).map(|_| 0)),
        Cmd::Shims { dir } => ("tandem", shims(&dir).map(|_| 0)),
        Cmd::Completion { shell } => {
            clap_complete::generate(shell, &mut <Cli as clap::CommandFactory>::command(), "tandem", &mut std::io::stdout());
            ("tandem", Ok(0))
        }
        Cmd::Manpages { dir, slurm } => ("tandem", manpages(&dir, slurm.as_deref()).map(|_| 0)),
        Cmd::Proxy {
            log,
            listen,
            listen_fds,
            server,
            ca,
            credential_file,
            statics,
            retries,
            resume_streams,
            threads,
            seed,
            max_concurrency,
            max_wait,
            tenant_header,
            tenants,
            prefill_pace,
        } => (
            "tandem proxy",
            log.init()
                .and_then(|()| {
                    proxy::main(proxy::Options {
                        listen,
                        listen_fds,
                        server,
                        ca,
                        credential_file,
                        statics,
                        retries,
                        resume_streams,
                        threads,
                        seed,
                        max_concurrency,
                        max_wait,
                        tenant_header,
                        tenants,
                        prefill_pace,
                    })
                })
                .map(|_| 0),
        ),
        Cmd::Token { lifespan, join, count, proxy, kubeconfig, exec_credential } => {
            let kind = match (join, proxy, kubeconfig) {
                (true, _, _) => cli::TokenKind::Join { count },
                (false, Some(name), _) => cli::TokenKind::Proxy { name },
                (false, None, Some(path)) => cli::TokenKind::Kubeconfig { path: (path != "-").then_some(path) },
                (false, None, None) if exec_credential => cli::TokenKind::ExecCredential,
                (false, None, None) => cli::TokenKind::User,
            };
            ("tandem token", cli::token(kind, lifespan))
        }
        Cmd::Node { cmd: NodeCmd::Delete { nodes } } => ("tandem node", cli::delete_nodes(&nodes)),
        Cmd::Admin { cmd: AdminCmd::Backup { file } } => ("tandem admin", cli::backup(&file)),
        Cmd::Admin { cmd: AdminCmd::Migrate { data, store, etcd } } => (
            "tandem admin migrate",
            server::migrate(&data, &store, &etcd.etcd_prefix, etcd.tls()).map(|msg| {
                println!("{msg}");
                0
            }),
        ),
        Cmd::Down { data } => (
            "tandem down",
            up::down(data).map(|lines| {
                for l in lines {
                    println!("{l}");
                }
                0
            }),
        ),
        Cmd::Up {
            log,
            agents,
            gpus_per_agent,
            cpus_per_agent,
            mem_per_agent,
            data,
            port,
            lease,
            config,
            proxy_port,
            no_proxy,
            no_hosts,
            ha,
        } => (
            "tandem up",
            log.init().and_then(|()| {
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
                    hosts: (!no_hosts).then(up::hosts::Hosts::system),
                    daemon_args: log.to_args(),
                    ha,
                })
                .map(|_| 0)
            }),
        ),
        Cmd::Server {
            log,
            listen,
            listen_fd,
            data,
            config,
            lease,
            kill_wait,
            insecure,
            tls_san,
            store,
            etcd,
            etcd_lease,
            etcd_upkeep,
            advertise,
        } => (
            "tandem server",
            log.init().and_then(|()| {
                let etcd_tls = etcd.tls();
                server::main(server::Options {
                    listen,
                    listen_fd,
                    data,
                    config,
                    lease,
                    kill_wait,
                    insecure,
                    tls_san,
                    store,
                    etcd_prefix: etcd.etcd_prefix,
                    etcd_tls,
                    etcd_lease,
                    etcd_upkeep,
                    advertise,
                })
                .map(|_| 0)
            }),
        ),
        Cmd::Agent {
            log,
            server,
            ca,
            name,
            join_token_file,
            gpus,
            cpus,
            memory,
            features,
            data,
            addr,
            insecure_registries,
            registry_ca,
            cdi_spec_dirs,
            image_cache_size,
            stop_tasks_on_sigterm,
        } => (
            "tandem agent",
            log.init()
                .and_then(|()| {
                    agent::main(agent::Options {
                        server,
                        ca,
                        name,
                        join_token_file,
                        gpus,
                        cpus,
                        memory,
                        features,
                        data,
                        addr,
                        insecure_registries,
                        registry_ca,
                        cdi_spec_dirs,
                        image_cache_size,
                        stop_tasks_on_sigterm,
                    })
                })
                .map(|_| 0),
        ),
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

/// A Slurm command by name (one of `cli::COMMANDS`, always).
fn slurm(name: &str, args: &[String]) -> Result<i32> {
    cli::slurm(name, args).unwrap_or_else(|| anyhow::bail!("{name} is no Slurm command"))
}

/// `tandem manpages DIR [--slurm DIR2]`: `DIR/man1/tandem.1`, `tandem-SUBCOMMAND.1` (clap's
/// definitions, hidden commands left out), and `DIR2/man1/sbatch.1` and the other Slurm
/// commands' pages (their option tables, `slurmcli::man_page`).
fn manpages(dir: &std::path::Path, slurm: Option<&std::path::Path>) -> Result<()> {
    let man1 = dir.join("man1");
    std::fs::create_dir_all(&man1).with_context(|| format!("creating {}", man1.display()))?;
    clap_mangen::generate_to(<Cli as clap::CommandFactory>::command(), &man1)
        .with_context(|| format!("writing pages in {}", man1.display()))?;
    let page = format!(
        ".TH TANDEM-SLURM 1 \"\" \"tandem {v}\" \"Tandem\"\n.SH NAME\ntandem\\-slurm \\- Tandem's Slurm commands, in one program\n\
         .SH SYNOPSIS\n.B sbatch\n|\n.B squeue\n| ... [\\fIOPTIONS\\fR...]\n.SH DESCRIPTION\n\\fBtandem\\-slurm\\fR runs as the \
         Slurm command it is invoked as: {} (links of those names to it, in /usr/lib/tandem/bin, or made by \
         \\fBtandem shims\\fR \\fIDIR\\fR). Run by any other name, it says so and exits 2. Each command's page lists \
         what Tandem does with each of its options.\n.SH SEE ALSO\n\\fBtandem\\fR(1), {}\n",
        cli::COMMANDS.join(", "),
        cli::COMMANDS.iter().map(|c| format!("\\fB{c}\\fR(1)")).collect::<Vec<_>>().join(", "),
        v = env!("CARGO_PKG_VERSION"),
    );
    std::fs::write(man1.join("tandem-slurm.1"), page).with_context(|| format!("writing {}", man1.display()))?;
    if let Some(slurm) = slurm {
        let man1 = slurm.join("man1");
        std::fs::create_dir_all(&man1).with_context(|| format!("creating {}", man1.display()))?;
        for c in cli::COMMANDS {
            let page = slurmcli::man_page(c, env!("CARGO_PKG_VERSION")).with_context(|| format!("{c} has no option table"))?;
            let path = man1.join(format!("{c}.1"));
            std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(())
}

/// The program `tandem shims` links the Slurm commands to: `tandem-slurm`, beside this one.
const SLURM_BIN: &str = "tandem-slurm";

fn shims(dir: &std::path::Path) -> Result<()> {
    let exe = std::env::current_exe().context("locating the tandem binary")?;
    let target = exe.with_file_name(SLURM_BIN);
    if !target.is_file() {
        bail!(
            "{} is missing: the Slurm commands are linked to it (build it with `cargo build --release -p tandem`, which builds both binaries, and keep it beside {})",
            target.display(),
            exe.display()
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for s in cli::COMMANDS {
        let link = dir.join(s);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).with_context(|| format!("linking {}", link.display()))?;
    }
    // And `tandem` itself, so that `tandem service`, `tandem token` and the rest are on the
    // same PATH (unless the links are being made beside the binary).
    let own = dir.join("tandem");
    if own.canonicalize().ok() != exe.canonicalize().ok() {
        let _ = std::fs::remove_file(&own);
        std::os::unix::fs::symlink(&exe, &own).with_context(|| format!("linking {}", own.display()))?;
    }
    println!(
        "wrote {} in {} (links to {}), and tandem (to {}); add it to PATH",
        cli::COMMANDS.join(", "),
        dir.display(),
        target.display(),
        exe.display()
    );
    Ok(())
}
