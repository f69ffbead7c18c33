//! The node daemon (`tandem agent`): registers the node's resources, heartbeats (renewing its
//! lease and long-polling for orders), launches tasks as real processes, supervises service
//! replicas (ports, probes, restarts with back-off), reports exits, and fences itself when its
//! lease may have lapsed.
//!
//! It owns the processes of one node and nothing else: it keeps no cluster state, decides no
//! placement, and talks to the controller only through `client` with `wire`'s bodies; it never
//! depends on `server`, `proxy` or `cli` (the tidy test checks). Its public face is [`Options`]
//! and [`main`].
//!
//! Modules, lowest first: `resources` (GPUs, memory), `launch` (cgroups, output files, one fork
//! and exec per task, process-group signals), `replica` (the replica supervisor, on `launch`),
//! `node` (the registration and heartbeat loop, on both), `container` (container tasks: the
//! image socket the node's tasks ask, and `tandem __container`, which becomes runc), `output`
//! (a task's output sent to the controller for `kubectl logs`, read by `tandem __read-output`
//! as the job's user).

mod cgroup2;
mod container;
mod freezer;
mod gpuhealth;
mod kfile;
mod launch;
mod launcher;
mod loginenv;
mod node;
mod output;
mod replica;
mod resources;
mod rootfs;
mod scripts;
mod spare;
mod stepio;
mod taskwrap;
mod usage;

pub use container::{
    CONTAINER_CMD, ROOT_CMD as CONTAINER_ROOT_CMD, credentials as registry_credentials, main as container_main,
    root_main as container_root_main,
};
pub use launcher::{LAUNCHER_CMD, serve as launcher_main};
pub use loginenv::{LOGIN_ENV_CMD, main as login_env_main};
pub use output::{READ_OUTPUT_CMD, main as read_output_main};
pub use taskwrap::{TASK_WRAP_CMD, main as task_wrap_main};

use anyhow::{Context, Result};
use std::path::PathBuf;

/// `tandem agent`'s settings, as given on its command line.
#[derive(Debug, Clone)]
pub struct Options {
    /// Controller address, `https://host:port` (or `http://` with an `--insecure` controller).
    pub server: String,
    /// The cluster CA (`ca.pem` in the controller's data directory), for `https://`.
    pub ca: Option<PathBuf>,
    /// Node name (default: the host name).
    pub name: Option<String>,
    /// File holding a single-use join token (`tandem token --join`), for a node that has no
    /// credential in `DATA/credential` yet.
    pub join_token_file: Option<PathBuf>,
    /// GPUs to declare, as `MODEL:COUNT` or `COUNT`, when NVML does not report them.
    pub gpus: Option<String>,
    /// CPUs to declare (default: the machine's).
    pub cpus: Option<u32>,
    /// Memory to declare, e.g. `16G` (default: the machine's).
    pub memory: Option<String>,
    /// Features, comma-separated.
    pub features: Option<String>,
    /// Data directory (the node's credential, the spool of batch scripts).
    pub data: PathBuf,
    /// Address to advertise to jobs (`MASTER_ADDR`).
    pub addr: String,
    /// Registries (`host:port`) that images are pulled from in plain HTTP.
    pub insecure_registries: Vec<String>,
    /// CA certificates (PEM files) trusted for registries beside the system's.
    pub registry_ca: Vec<PathBuf>,
    /// Directories of CDI specifications, for GPUs in containers (none: `/etc/cdi` and
    /// `/var/run/cdi`).
    pub cdi_spec_dirs: Vec<PathBuf>,
    /// The image cache's bound, e.g. `50G` (default: half the data directory's file system,
    /// at most 100 GiB).
    pub image_cache_size: Option<String>,
    /// SIGTERM stops the node's tasks too, as SIGINT does (where whatever stops the agent then
    /// kills its whole cgroup, the tasks' keepers included: a Kubernetes pod); otherwise SIGTERM
    /// leaves them to their keepers for the agent's next start.
    pub stop_tasks_on_sigterm: bool,
}

/// The image cache's default bound: half the file system of `data`, at most 100 GiB.
fn default_cache_bound(data: &std::path::Path) -> u64 {
    let fs = nix::sys::statvfs::statvfs(data).map(|s| s.blocks() * s.fragment_size()).unwrap_or(0);
    (fs / 2).clamp(1 << 30, 100 << 30)
}

/// Runs the agent until the process is stopped (on a runtime of its own).
pub fn main(o: Options) -> Result<()> {
    let server = client::Target::parse_with_ca(&o.server, o.ca.as_deref())?;
    let name = match o.name {
        Some(n) => n,
        None => nix::unistd::gethostname()?.to_string_lossy().into_owned(),
    };
    // A join token is spent once the node has its credential: the file may be gone by a
    // restart (the service unit names it always), and is read only where it exists.
    let join_token = match &o.join_token_file {
        Some(f) => match std::fs::read_to_string(f) {
            Ok(t) => Some(t.trim().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("reading the join token from {}", f.display())),
        },
        None => None,
    };
    let gpus = o.gpus.as_deref().map(|s| slurmcli::parse_gpus(s).map_err(|e| anyhow::anyhow!("--gpus: {}", e.0))).transpose()?;
    let memory = o.memory.as_deref().map(|m| slurmcli::parse_memory(m).map_err(|e| anyhow::anyhow!("--memory: {}", e.0))).transpose()?;
    let features = o.features.map(|f| f.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect()).unwrap_or_default();
    // What the agent creates is root's alone unless it says otherwise (scripts are given to
    // their user; a task's own files are created by the task under umask 022).
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let ca_pem = o
        .registry_ca
        .iter()
        .map(|f| std::fs::read(f).with_context(|| format!("--registry-ca: reading {}", f.display())))
        .collect::<Result<Vec<_>>>()?;
    let max_bytes = match o.image_cache_size.as_deref() {
        Some(v) => slurmcli::parse_memory(v).map_err(|e| anyhow::anyhow!("--image-cache-size: {}", e.0))?,
        None => {
            std::fs::create_dir_all(&o.data).ok();
            default_cache_bound(&o.data)
        }
    };
    let registries = image::Settings { insecure: o.insecure_registries, ca_pem, max_bytes };
    let _ = container::CDI_DIRS.set(o.cdi_spec_dirs);
    rt.block_on(node::run(node::AgentArgs {
        server,
        server_url: o.server.clone(),
        ca: o.ca.clone(),
        name,
        gpus,
        cpus: o.cpus,
        memory,
        data: o.data,
        join_token,
        addr: o.addr,
        features,
        registries,
        stop_tasks_on_sigterm: o.stop_tasks_on_sigterm,
    }))
}
