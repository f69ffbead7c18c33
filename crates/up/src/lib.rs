//! `tandem up`: a whole local cluster in one command: the controller, N node agents and the
//! inference proxy, each its own OS process of the `tandem` binary (this process's own
//! executable) with its own node name, in the foreground until Ctrl-C. It supervises them: a
//! process that dies is started again (with a growing back-off, and a line on standard error)
//! while the others keep running, as systemd would restart a daemon. [`start`] is shared with
//! the benchmarks, which start clusters the same way.
//!
//! It only starts, watches and stops processes, and writes `DATA/env` (and, as root, the node
//! names' lines of `/etc/hosts`: [`hosts`]): it links none of the daemons (it runs them as
//! programs), so it depends on no other Tandem crate.

pub mod etcd;
pub mod hosts;

use anyhow::{Context, Result, bail};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// `tandem up` settings.
pub struct UpArgs {
    /// Number of agents.
    pub agents: u32,
    /// GPUs per agent (`h100:8`).
    pub gpus: Option<String>,
    /// CPUs per agent.
    pub cpus: Option<u32>,
    /// Memory per agent (`16G`).
    pub memory: Option<String>,
    /// Data directory.
    pub data: Option<PathBuf>,
    /// Controller TCP port (0: any free port).
    pub port: u16,
    /// Node lease, seconds.
    pub lease: Option<u32>,
    /// Cluster configuration file.
    pub config: Option<PathBuf>,
    /// Inference proxy port on 127.0.0.1 (0: any free port; `None`: no proxy).
    pub proxy_port: Option<u16>,
    /// Where to add the node names' lines (`/etc/hosts`: [`hosts::Hosts::system`]); `None`:
    /// nowhere (`--no-hosts`).
    pub hosts: Option<hosts::Hosts>,
    /// Options given to every daemon (`--log-level`, `--log-format`).
    pub daemon_args: Vec<String>,
    /// Controllers that take over from each other (`--ha`): a three-member etcd (Debian's
    /// etcd-server) in `DATA/etcd` and two controllers on it, `DATA/controller` and
    /// `DATA/controller2` (a build with the `etcd` feature).
    pub ha: bool,
}

/// Where every agent of a local cluster is reached, and what its node name resolves to.
pub const NODE_ADDR: std::net::Ipv4Addr = std::net::Ipv4Addr::LOCALHOST;

/// Child processes, stopped (SIGINT, then SIGKILL after 5 s) when dropped: SIGINT, as Ctrl-C,
/// so that agents stop their tasks too (SIGTERM would leave them to their keepers, for the
/// agent's next start).
pub struct Kids(pub Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), nix::sys::signal::Signal::SIGINT);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for c in &mut self.0 {
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn wait_for(path: &Path, kids: &mut Kids, what: &str) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && !s.trim().is_empty()
        {
            return Ok(s.trim().to_string());
        }
        for c in &mut kids.0 {
            if let Ok(Some(st)) = c.try_wait() {
                bail!("{what} exited early ({st})");
            }
        }
        if Instant::now() > deadline {
            bail!("{what} did not start within 30 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// First restart delay of a process that died, and the cap; a process that ran this long
/// without dying starts its back-off afresh.
const BACKOFF_START: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
const BACKOFF_RESET: Duration = Duration::from_secs(60);

/// The files every controller of a cluster shares (SECURITY.md): the cluster CA's certificate
/// and key, and the keys that sign users' tokens and nodes' credentials.
pub const SHARED_FILES: [&str; 4] = ["ca.pem", "ca.key", "jwt.key", "nodes.key"];

/// How to start one process of the cluster again (its log is appended to).
type Respawn = Box<dyn Fn() -> Result<Child>>;

/// One supervised process: its name, how to start it again, and its back-off.
struct Daemon {
    name: String,
    respawn: Respawn,
    backoff: Duration,
    started: Instant,
    /// Dead, to be started again at this time.
    due: Option<Instant>,
}

/// A running local cluster.
pub struct LocalCluster {
    /// Data directory.
    pub data: PathBuf,
    /// Controller TCP address.
    pub addr: String,
    /// Controller Unix socket (`unix://...`).
    pub server: String,
    /// Proxy address, when one runs.
    pub proxy: Option<String>,
    /// The `env` file other shells source: the newest default cluster's (`BASE/env`), or
    /// `DATA/env` for a cluster given `--data`.
    pub env: PathBuf,
    /// Process ids of the agents, in order (`node1` first).
    pub agent_pids: Vec<u32>,
    /// Every process: controller, agents, proxy.
    pub kids: Kids,
    /// How to restart each of `kids`, in the same order.
    daemons: Vec<Daemon>,
    /// The node names' lines in the hosts file, removed when the cluster is dropped (after its
    /// processes stopped); `None` where none were added.
    pub hosts_block: Option<hosts::Block>,
    /// What to tell the operator about the node names (they could not be added, or an earlier
    /// line of the hosts file names one of them otherwise), one line each.
    pub hosts_notes: Vec<String>,
    /// The etcd members of a cluster started with `--ha` (stopped after the daemons).
    pub etcd: Option<etcd::Etcd>,
    /// The controllers' TCP addresses (two with `--ha`).
    pub controllers: Vec<String>,
    /// `DATA/up.lock`, locked for the cluster's life: a second `tandem up` on the same data
    /// directory is refused before it touches anything (its logs included).
    _lock: std::fs::File,
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        // The daemons first (a controller that loses etcd steps down; agents keep running
        // tasks), then etcd.
        drop(Kids(std::mem::take(&mut self.kids.0)));
        self.etcd.take();
    }
}

impl LocalCluster {
    /// One round of supervision: notes the processes that died and starts again those whose
    /// back-off is over. Returns what happened, one line each, for the operator.
    pub fn supervise(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        let now = Instant::now();
        let mut restarted = false;
        for (i, d) in self.daemons.iter_mut().enumerate() {
            let child = &mut self.kids.0[i];
            match d.due {
                None => {
                    if let Ok(Some(st)) = child.try_wait() {
                        if d.started.elapsed() > BACKOFF_RESET {
                            d.backoff = BACKOFF_START;
                        }
                        lines.push(format!(
                            "tandem up: {} exited ({st}); restarting in {:.1} s (log: {}/{}.log)",
                            d.name,
                            d.backoff.as_secs_f64(),
                            self.data.display(),
                            d.name.rsplit(' ').next().unwrap_or(&d.name)
                        ));
                        d.due = Some(now + d.backoff);
                        d.backoff = (d.backoff * 2).min(BACKOFF_MAX);
                    }
                }
                Some(at) if now >= at => match (d.respawn)() {
                    Ok(c) => {
                        lines.push(format!("tandem up: {} restarted (pid {})", d.name, c.id()));
                        *child = c;
                        d.started = now;
                        d.due = None;
                        restarted = true;
                    }
                    Err(e) => {
                        lines.push(format!("tandem up: restarting {}: {e:#}; trying again in {:.1} s", d.name, d.backoff.as_secs_f64()));
                        d.due = Some(now + d.backoff);
                        d.backoff = (d.backoff * 2).min(BACKOFF_MAX);
                    }
                },
                Some(_) => {}
            }
        }
        if restarted && let Err(e) = self.write_pids() {
            lines.push(format!("tandem up: writing {}/up.pid: {e:#}", self.data.display()));
        }
        lines
    }

    /// Writes `DATA/up.pid`: this process's id, then each daemon's (`NAME PID`), for `tandem
    /// down` and for a later `tandem up` to find them.
    fn write_pids(&self) -> Result<()> {
        let mut text = format!("up {}\n", std::process::id());
        for (d, c) in self.daemons.iter().zip(&self.kids.0) {
            text.push_str(&format!("{} {}\n", d.name.replace(' ', "-"), c.id()));
        }
        if let Some(e) = &self.etcd {
            for (m, pid) in e.members.iter().zip(e.pids()) {
                text.push_str(&format!("{} {pid}\n", m.name));
            }
        }
        write_file(&self.data.join("up.pid"), &text, 0o644)
    }
}

/// The processes `DATA/up.pid` names that are still running and still this cluster's (their
/// command line names the data directory, or they are `tandem up` itself): `(name, pid)`.
fn recorded_pids(data: &Path) -> Vec<(String, i32)> {
    let text = std::fs::read_to_string(data.join("up.pid")).unwrap_or_default();
    let mark = data.to_string_lossy().into_owned();
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(n, p)| p.trim().parse::<i32>().ok().map(|p| (n.to_string(), p)))
        .filter(|(n, pid)| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            // `tandem up` without --data names no directory: its own word stands.
            !cmd.is_empty() && (cmd.contains(&mark) || (n == "up" && cmd.split(' ').any(|w| w == "up")))
        })
        .collect()
}

/// Opens (creating, 0600, never through a link) a file used only for its lock.
pub(crate) fn lock_file(path: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))
}

/// Takes `DATA/up.lock`, or says who holds the data directory: a running `tandem up`, or the
/// daemons a killed one left behind. Nothing in the directory is changed before this.
fn lock_data(data: &Path) -> Result<std::fs::File> {
    let f = lock_file(&data.join("up.lock"))?;
    let d = data.display();
    if f.try_lock().is_err() {
        let who = recorded_pids(data).iter().find(|(n, _)| n == "up").map_or(String::new(), |(_, p)| format!(" (pid {p})"));
        bail!(
            "{d} is in use by a running `tandem up`{who}: stop it with Ctrl-C in its terminal or `tandem down --data {d}`, or give another --data"
        );
    }
    let left: Vec<String> = recorded_pids(data).into_iter().filter(|(n, _)| n != "up").map(|(n, p)| format!("{n} {p}")).collect();
    if !left.is_empty() {
        bail!(
            "the daemons of an earlier `tandem up` on {d} are still running ({}): its `tandem up` was killed; `tandem down --data {d}` stops them",
            left.join(", ")
        );
    }
    Ok(f)
}

/// `tandem down`: stops the local cluster on `data` (by default the newest one `tandem up`
/// made without `--data`): its `tandem up` (which stops its daemons), or, when that was
/// killed, the daemons it left. Running jobs' keepers are left alone, as an agent's restart
/// leaves them. Returns what it did, one line each.
pub fn down(data: Option<PathBuf>) -> Result<Vec<String>> {
    let data = match data {
        Some(d) => d.canonicalize().with_context(|| format!("no data directory {}", d.display()))?,
        None => {
            let env = std::fs::read_to_string(private_base()?.join("env")).context("no local cluster to stop (give --data)")?;
            let sock = env
                .lines()
                .find_map(|l| l.strip_prefix("export TANDEM_SERVER=unix://"))
                .context("the env file names no controller socket (give --data)")?;
            Path::new(sock.trim()).ancestors().nth(2).context("the controller socket's path has no data directory")?.to_path_buf()
        }
    };
    let d = data.display();
    let running = recorded_pids(&data);
    if running.is_empty() {
        return Ok(vec![format!("tandem down: nothing of {d} is running")]);
    }
    let up = running.iter().find(|(n, _)| n == "up").map(|(_, p)| *p);
    let targets: Vec<(String, i32)> = match up {
        Some(p) => vec![("tandem up".into(), p)],
        None => running.clone(),
    };
    let mut out = Vec::new();
    for (n, p) in &targets {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*p), nix::sys::signal::Signal::SIGTERM);
        out.push(format!("tandem down: stopping {n} (pid {p})"));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && !recorded_pids(&data).is_empty() {
        std::thread::sleep(Duration::from_millis(100));
    }
    for (n, p) in recorded_pids(&data) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
        out.push(format!("tandem down: {n} (pid {p}) did not stop in 20 s: killed"));
    }
    out.push(format!("tandem down: {d} stopped"));
    Ok(out)
}

/// Runs the local cluster until SIGINT/SIGTERM/SIGHUP, then stops it and removes its lines from
/// the hosts file.
pub fn run(a: UpArgs) -> Result<()> {
    let agents = a.agents;
    // Before the start, so that a Ctrl-C during it still stops the cluster and removes its
    // lines from the hosts file (once it is up).
    let mut signals = signal_hook();
    let mut c = start(a)?;
    let data = c.data.clone();
    let proxy_line = c.proxy.as_ref().map_or(String::new(), |p| format!(", the inference proxy on http://{p} (/s/SERVICE/...)"));
    let env_line = std::fs::read_to_string(data.join("env"))?;
    let controllers = match (&c.etcd, c.controllers.as_slice()) {
        (Some(e), [one, two, ..]) => {
            format!(
                "two controllers on https://{one} and https://{two} (one leads, the other stands by; their state in etcd at {})",
                e.url()
            )
        }
        _ => format!("a controller on https://{}", c.addr),
    };
    println!("Tandem is up: {controllers}{proxy_line} and {agents} agent(s) (node1..node{agents}), data in {}", data.display());
    println!("In another shell:\n  {}\n  (or: source {})", env_line.trim().replace('\n', "\n  "), c.env.display());
    println!("Logs: {}/*.log. Ctrl-C stops the cluster.", data.display());
    // Its own lines go to its log (standard error, `--log-format`, `--log-level`), as the
    // daemons' do; what the user reads to use the cluster goes to standard output above.
    for line in &c.hosts_notes {
        tracing::info!("{line}");
    }
    loop {
        if signals() {
            println!("stopping");
            return Ok(());
        }
        for line in c.supervise() {
            tracing::warn!("{line}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts a local cluster: the controller, the agents and (unless turned off) the proxy, each
/// its own process, and writes `DATA/env`.
pub fn start(a: UpArgs) -> Result<LocalCluster> {
    if a.agents == 0 || a.agents > 1000 {
        bail!("--agents must be between 1 and 1000");
    }
    let daemon_args = a.daemon_args.clone();
    let (data, base) = match a.data {
        Some(d) => (shared_dir(&d)?, None),
        None => {
            let base = private_base()?;
            (fresh_dir(&base)?, Some(base))
        }
    };
    let data = data.canonicalize()?;
    let lock = lock_data(&data)?;
    let sock_len = data.join("controller/tandem.sock").as_os_str().len();
    if sock_len >= 108 {
        bail!(
            "the controller's socket path under {} would be {sock_len} bytes, over the kernel's 107: give a shorter --data",
            data.display()
        );
    }
    let exe = std::env::current_exe().context("locating the tandem binary")?;
    let ctl_dir = data.join("controller");
    subdir(&ctl_dir)?;
    let _ = std::fs::remove_file(ctl_dir.join("addr"));
    let mut kids = Kids(Vec::new());
    let mut daemons: Vec<Daemon> = Vec::new();
    let config = a.config.as_ref().map(|c| c.canonicalize().with_context(|| format!("reading {}", c.display()))).transpose()?;
    // With --ha: etcd first, three members, then the controllers on it.
    let etcd = match a.ha {
        true => Some(etcd::Etcd::start(&data.join("etcd"), 3).context("starting etcd for --ha")?),
        false => None,
    };
    let store = etcd.as_ref().map(etcd::Etcd::server_args);
    let mut controllers = Vec::new();
    let mut ctl_dirs = Vec::new();
    for k in 0..if a.ha { 2 } else { 1 } {
        let name = if k == 0 { "controller".to_string() } else { format!("controller{}", k + 1) };
        let dir = data.join(&name);
        subdir(&dir)?;
        let _ = std::fs::remove_file(dir.join("addr"));
        if k > 0 {
            // Every controller of a cluster shares the first's CA and the keys that sign users'
            // tokens and nodes' credentials (its first answer means it made them).
            token(&exe, &ctl_dir.join("tandem.sock"), &["--lifespan", "60"]).context("waiting for the first controller to lead")?;
            for f in SHARED_FILES {
                let text = std::fs::read(ctl_dir.join(f)).with_context(|| format!("reading {}", ctl_dir.join(f).display()))?;
                write_file(&dir.join(f), &String::from_utf8_lossy(&text), if f.ends_with(".pem") { 0o644 } else { 0o600 })?;
            }
        }
        // The controller's port, held here for the cluster's life: each run of the controller
        // inherits the listening socket (`--listen-fd`), so the port is never free for another
        // user to take while it restarts, and agents connecting meanwhile wait in its queue.
        let port = if k == 0 { a.port } else { 0 };
        let held = std::sync::Arc::new(
            exec::listen_tcp(std::net::SocketAddr::from((NODE_ADDR, port)), false)
                .with_context(|| format!("cannot listen on {NODE_ADDR}:{port} for the controller"))?,
        );
        let server_cmd = {
            let (exe, dir, lease, daemon_args, config, store) =
                (exe.clone(), dir.clone(), a.lease, daemon_args.clone(), config.clone(), store.clone());
            move || {
                use std::os::fd::AsFd;
                let mut server = Command::new(&exe);
                server.args(["server", "--listen-fd", &held.as_raw_fd().to_string(), "--data"]).arg(&dir).args(&daemon_args);
                exec::pass_fds(&mut server, &[held.as_fd()]);
                if let Some(l) = lease {
                    server.args(["--lease", &l.to_string()]);
                }
                if let Some(c) = &config {
                    server.arg("--config").arg(c);
                }
                if let Some(s) = &store {
                    server.args(s);
                }
                server
            }
        };
        let mut server = server_cmd();
        let f = log(&data, &name, true)?;
        kids.0.push(server.stdout(f.try_clone()?).stderr(f).spawn().with_context(|| format!("starting the {name}"))?);
        controllers.push(wait_for(&dir.join("addr"), &mut kids, &format!("the {name}"))?);
        daemons.push(Daemon {
            name: name.clone(),
            respawn: {
                let data = data.clone();
                Box::new(move || {
                    let f = log(&data, &name, false)?;
                    Ok(server_cmd().stdout(f.try_clone()?).stderr(f).spawn()?)
                })
            },
            backoff: BACKOFF_START,
            started: Instant::now(),
            due: None,
        });
        ctl_dirs.push(dir);
    }
    let addr = controllers[0].clone();
    // What agents and the proxy are given: every controller.
    let servers = controllers.iter().map(|c| format!("https://{c}")).collect::<Vec<_>>().join(",");
    // Each agent joins with a single-use token of its own (a restarted one reuses the
    // credential it keeps); the proxy gets a credential.
    let sock = ctl_dir.join("tandem.sock");
    let joins = token(&exe, &sock, &["--join", "--count", &a.agents.to_string()])?;
    if joins.len() != a.agents as usize {
        bail!("tandem token --join made {} tokens, not {}", joins.len(), a.agents);
    }
    // The node names, for jobs (`MASTER_ADDR=$(scontrol show hostnames ... | head -1)`): all
    // at 127.0.0.1, which each agent advertises too (jobs' MASTER_ADDR, its replicas'
    // endpoints), so a name and MASTER_ADDR agree, a replica listening on 127.0.0.1 (where the
    // agent probes it) is reached through the proxy, and every cluster on this machine writes
    // the same addresses: two at once never disagree on what node1 is.
    let names: Vec<(std::net::Ipv4Addr, String)> = (1..=a.agents).map(|i| (NODE_ADDR, format!("node{i}"))).collect();
    let (hosts_block, hosts_notes) = match &a.hosts {
        Some(h) => add_hosts(h, &data, &names)?,
        None => (None, Vec::new()),
    };
    let mut agent_pids = Vec::new();
    for i in 1..=a.agents {
        let name = format!("node{i}");
        let node_addr = NODE_ADDR.to_string();
        let dir = data.join(&name);
        subdir(&dir)?;
        let join = dir.join("join-token");
        write_file(&join, &format!("{}\n", joins[i as usize - 1]), 0o600)?;
        let agent_cmd = {
            let (exe, servers, name, ctl_dir, gpus, cpus, memory, daemon_args) = (
                exe.clone(),
                servers.clone(),
                name.clone(),
                ctl_dir.clone(),
                a.gpus.clone(),
                a.cpus,
                a.memory.clone(),
                daemon_args.clone(),
            );
            move || {
                let mut c = Command::new(&exe);
                c.args(["agent", "--server", &servers, "--name", &name, "--addr", &node_addr, "--join-token-file"])
                    .arg(&join)
                    .arg("--ca")
                    .arg(ctl_dir.join("ca.pem"))
                    .arg("--data")
                    .arg(&dir)
                    .args(&daemon_args);
                if let Some(g) = &gpus {
                    c.args(["--gpus", g]);
                }
                if let Some(n) = cpus {
                    c.args(["--cpus", &n.to_string()]);
                }
                if let Some(m) = &memory {
                    c.args(["--memory", m]);
                }
                c
            }
        };
        let f = log(&data, &name, true)?;
        let child = agent_cmd().stdout(f.try_clone()?).stderr(f).spawn().with_context(|| format!("starting agent {name}"))?;
        agent_pids.push(child.id());
        kids.0.push(child);
        daemons.push(Daemon {
            name: format!("agent {name}"),
            respawn: {
                let (data, name) = (data.clone(), name.clone());
                Box::new(move || {
                    let f = log(&data, &name, false)?;
                    Ok(agent_cmd().stdout(f.try_clone()?).stderr(f).spawn()?)
                })
            },
            backoff: BACKOFF_START,
            started: Instant::now(),
            due: None,
        });
    }
    // The socket for this machine's users; the CA for clients over TCP (TANDEM_SERVER=https://).
    let socks = ctl_dirs.iter().map(|d| format!("unix://{}", d.join("tandem.sock").display())).collect::<Vec<_>>().join(",");
    let mut env_line = format!("export TANDEM_SERVER={socks}\nexport TANDEM_CA={}", ctl_dir.join("ca.pem").display());
    let mut proxy = None;
    if let Some(port) = a.proxy_port {
        // The proxy's port, held here as the controller's is (a proxy restarting must not leave
        // it for another user to take and receive clients' requests and credentials): one
        // socket per worker thread (SO_REUSEPORT, which only this user's sockets may join).
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
        // First a plain bind: one without SO_REUSEPORT fails where any socket holds the port,
        // the proxy of another cluster of this same user included (which SO_REUSEPORT would
        // let the sockets below join, sharing its clients). Were the port taken in the moment
        // between, the binds below fail: nothing is shared.
        if port != 0 {
            drop(exec::listen_tcp(std::net::SocketAddr::from((NODE_ADDR, port)), false).with_context(|| {
                format!("cannot listen on {NODE_ADDR}:{port} for the proxy (another cluster's proxy? give --proxy-port)")
            })?);
        }
        let mut socks = vec![
            exec::listen_tcp(std::net::SocketAddr::from((NODE_ADDR, port)), true)
                .with_context(|| format!("cannot listen on {NODE_ADDR}:{port} for the proxy"))?,
        ];
        let at = socks[0].local_addr()?;
        for _ in 1..workers {
            socks.push(exec::listen_tcp(at, true).with_context(|| format!("cannot listen on {at} for the proxy"))?);
        }
        let listen = at.to_string();
        let cred = data.join("proxy.credential");
        let issued = token(&exe, &sock, &["--proxy", "proxy"])?;
        write_file(&cred, &format!("{}\n", issued.first().context("tandem token --proxy printed nothing")?), 0o600)?;
        let proxy_cmd = {
            let (exe, servers, ctl_dir, daemon_args) = (exe.clone(), servers.clone(), ctl_dir.clone(), daemon_args.clone());
            move || {
                use std::os::fd::AsFd;
                let mut p = Command::new(&exe);
                p.arg("proxy").args(&daemon_args);
                for s in &socks {
                    p.args(["--listen-fd", &s.as_raw_fd().to_string()]);
                }
                p.args(["--server", &servers, "--credential-file"]).arg(&cred).arg("--ca").arg(ctl_dir.join("ca.pem"));
                let fds: Vec<_> = socks.iter().map(|s| s.as_fd()).collect();
                exec::pass_fds(&mut p, &fds);
                p
            }
        };
        let f = log(&data, "proxy", true)?;
        kids.0.push(proxy_cmd().stdout(f.try_clone()?).stderr(f).spawn().context("starting the proxy")?);
        daemons.push(Daemon {
            name: "proxy".into(),
            respawn: {
                let data = data.clone();
                Box::new(move || {
                    let f = log(&data, "proxy", false)?;
                    Ok(proxy_cmd().stdout(f.try_clone()?).stderr(f).spawn()?)
                })
            },
            backoff: BACKOFF_START,
            started: Instant::now(),
            due: None,
        });
        env_line.push_str(&format!("\nexport TANDEM_PROXY=http://{listen}"));
        proxy = Some(listen);
    }
    write_env(&data.join("env"), &format!("{env_line}\n"))?;
    let env = match base {
        Some(base) => {
            // The newest cluster this user started in the default place, for other shells.
            write_env(&base.join("env"), &format!("{env_line}\n"))?;
            base.join("env")
        }
        None => data.join("env"),
    };
    let server = socks;
    let c = LocalCluster {
        data,
        addr,
        server,
        proxy,
        env,
        agent_pids,
        kids,
        daemons,
        hosts_block,
        hosts_notes,
        etcd,
        controllers,
        _lock: lock,
    };
    c.write_pids()?;
    Ok(c)
}

/// Adds the node names to the hosts file, marked with the data directory (a block left by a
/// crashed run of the same directory is replaced), and writes them to `DATA/hosts` too. Where
/// the file cannot be changed (not root), it returns a notice naming the lines to add instead,
/// unless the file names them so already: the cluster runs either way, only the names do not
/// resolve.
fn add_hosts(h: &hosts::Hosts, data: &Path, names: &[(std::net::Ipv4Addr, String)]) -> Result<(Option<hosts::Block>, Vec<String>)> {
    let lines: String = names.iter().map(|(a, n)| format!("{a}\t{n}\n")).collect();
    let copy = data.join("hosts");
    write_file(&copy, &lines, 0o644)?;
    let id = data.display().to_string();
    match h.add(&id, names) {
        Ok((block, warnings)) => Ok((Some(block), warnings)),
        Err(_) if h.resolves(names) => Ok((None, Vec::new())),
        Err(e) => {
            let listed = if names.len() <= 4 {
                format!(" ({})", names.iter().map(|(a, n)| format!("{a} {n}")).collect::<Vec<_>>().join(", "))
            } else {
                String::new()
            };
            let range = match names {
                [(_, one)] => one.clone(),
                [(_, first), .., (_, last)] => format!("{first}..{last}"),
                [] => String::new(),
            };
            let why = if nix::unistd::geteuid().is_root() { format!("{e:#}") } else { "not root".to_string() };
            Ok((
                None,
                vec![format!(
                    "tandem up: the node names {range} do not resolve for jobs: cannot write {} ({why}); add the lines of {}{listed} to it as root, or pass --no-hosts",
                    h.path.display(),
                    copy.display(),
                )],
            ))
        }
    }
}

/// A process's log, `DATA/NAME.log`: the caller's alone (0600), never through a link; emptied
/// at the cluster's start, appended to by a restarted process.
fn log(data: &Path, name: &str, fresh: bool) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = data.join(format!("{name}.log"));
    let mut o = std::fs::OpenOptions::new();
    if fresh {
        o.write(true).truncate(true);
    } else {
        o.append(true);
    }
    o.create(true).mode(0o600).custom_flags(nix::libc::O_NOFOLLOW).open(&path).with_context(|| format!("opening {}", path.display()))
}

/// Where default clusters go: `$XDG_RUNTIME_DIR/tandem` when that is set (a private per-user
/// directory), else `$XDG_STATE_HOME/tandem` or `~/.local/state/tandem`. Created 0700; an
/// existing one must be the caller's, not a link, and open to no one else (it is narrowed to
/// 0700 if others could only read or enter it, refused if they could write it).
pub fn private_base() -> Result<PathBuf> {
    let var = |k: &str| std::env::var_os(k).map(PathBuf::from).filter(|p| p.is_absolute());
    let base = match var("XDG_RUNTIME_DIR") {
        Some(r) => r.join("tandem"),
        None => match var("XDG_STATE_HOME").or_else(|| var("HOME").map(|h| h.join(".local/state"))) {
            Some(s) => s.join("tandem"),
            None => bail!("neither XDG_RUNTIME_DIR nor HOME is set: give the cluster a directory with --data DIR"),
        },
    };
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    if let Some(parent) = base.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(&base) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("creating {}", base.display())),
    }
    let m = std::fs::symlink_metadata(&base).with_context(|| format!("checking {}", base.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    if !m.is_dir() || m.uid() != me {
        bail!(
            "{} is not a directory of uid {me} (a link, or another user's): refusing to put a cluster in it; remove it or give --data DIR",
            base.display()
        );
    }
    if m.mode() & 0o022 != 0 {
        bail!("{} is writable by other users (mode {:o}): refusing to put a cluster in it", base.display(), m.mode() & 0o7777);
    }
    if m.mode() & 0o077 != 0 {
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(base)
}

/// A new directory with a random name under `base`, created exclusively (never one that
/// already exists), mode 0700.
fn fresh_dir(base: &Path) -> Result<PathBuf> {
    use std::io::Read;
    use std::os::unix::fs::DirBuilderExt;
    for _ in 0..16 {
        let mut b = [0u8; 6];
        std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)).context("reading /dev/urandom")?;
        let dir = base.join(format!("up-{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
        }
    }
    bail!("could not make a fresh directory under {}", base.display())
}

/// A directory named with `--data`: created 0711 (other users may reach the controller's
/// socket inside, not list it), or an existing one that is the caller's, not a link and not
/// writable by others.
fn shared_dir(d: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    match std::fs::symlink_metadata(d) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new().recursive(true).mode(0o711).create(d).with_context(|| format!("creating {}", d.display()))?;
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o711))?;
        }
        Err(e) => return Err(e).with_context(|| format!("checking {}", d.display())),
        Ok(m) => {
            let me = nix::unistd::geteuid().as_raw();
            if !m.is_dir() || m.uid() != me {
                bail!("{} is not a directory of uid {me} (a link, or another user's): refusing to use it", d.display());
            }
            if m.mode() & 0o022 != 0 {
                bail!("{} is writable by other users (mode {:o}): refusing to use it", d.display(), m.mode() & 0o7777);
            }
        }
    }
    Ok(d.to_path_buf())
}

/// A daemon's directory in the cluster's: mode 0711, as the daemon itself wants it.
fn subdir(d: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o711).create(d) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating {}", d.display())),
    }
}

/// Writes an `env` file afresh (0644: it names only paths and addresses), never through a link.
fn write_env(path: &Path, text: &str) -> Result<()> {
    write_file(path, text, 0o644)
}

/// Asks the controller (over its Unix socket, as its own user: an administrator) for what
/// `tandem token ARGS` prints: join tokens for the agents, the proxy's credential.
fn token(exe: &Path, sock: &Path, args: &[&str]) -> Result<Vec<String>> {
    let out = Command::new(exe)
        .arg("token")
        .args(args)
        .env("TANDEM_SERVER", format!("unix://{}", sock.display()))
        .stderr(std::process::Stdio::piped())
        .output()
        .context("running tandem token")?;
    if !out.status.success() {
        bail!("tandem token {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect())
}

/// Writes `text` to `path` afresh with `mode`, never through a link (by rename, so a reader
/// never sees it half written).
pub fn write_file(path: &Path, text: &str, mode: u32) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("new");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    f.write_all(text.as_bytes())?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// A poll for SIGINT/SIGTERM/SIGHUP without a runtime: a thread waiting on a tokio signal.
fn signal_hook() -> impl FnMut() -> bool {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("signal");
            let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).expect("signal");
            // The terminal closed: stop as for Ctrl-C (the processes, and the hosts lines).
            let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).expect("signal");
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
                _ = hup.recv() => {}
            }
        });
        let _ = tx.send(());
    });
    move || rx.try_recv().is_ok()
}
