//! The controller daemon (`tandem server`): a thin shell around `control::Controller`. HTTP/JSON
//! on TCP (agents and proxies, each with a credential of its own) and on a Unix socket (local users, identified by the
//! kernel's peer credentials); SQLite persistence before every acknowledgement (group commit:
//! requests that arrive together share one fsync, see `journal`); a scheduling loop woken by
//! submissions and task exits, plus once a second; the service loop; configuration loading
//! (`tandem.toml`).
//!
//! It owns the cluster's state and its one writer. It never runs a task, proxies a request or
//! prints for a user: it depends on `control` (the decisions, with `sched`, `slurmcli` and
//! `model`), `store` and `wire`, and on `exec` only for its open-file limit and the check of the
//! site's `job_submit.lua`; never on `agent`,
//! `proxy` or `cli` (the tidy test checks). Its public face is [`Options`] and [`main`].
//!
//! Modules, lowest first: `failpoint` (crash points of test builds), `journal` (group commit), `config`,
//! `limits` (the flood defences' caps, tables, deadlines and counters), `app` (state, identity,
//! reply helpers), `listen` (the two accept loops, on `app` and `limits`), then the handlers
//! `jobs` and `services`, which use `app` and `policy` (the site's job-submit script, through
//! `hook`, whose child is `lua`); this file ties the routes and loops together.

use anyhow::{Context, Result, bail};
use axum::Router;
use control::{Controller, Settings};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Notify;

use crate::app::{App, Inner, Metrics, now};

/// `tandem server`'s settings, as given on its command line.
#[derive(Debug, Clone)]
pub struct Options {
    /// TCP address for agents (and `/metrics`, `/openapi.json`).
    pub listen: SocketAddr,
    /// A listening TCP socket inherited at this descriptor, served instead of binding `listen`
    /// (`tandem up` holds the port across restarts).
    pub listen_fd: Option<i32>,
    /// Data directory: database, Unix socket, cluster secret.
    pub data: PathBuf,
    /// Cluster configuration (default: `DATA/tandem.toml` when it exists, else built-in defaults).
    pub config: Option<PathBuf>,
    /// Node lease in seconds (overrides the configuration).
    pub lease: Option<u32>,
    /// Seconds between SIGTERM and SIGKILL at a job's time limit (overrides the configuration).
    pub kill_wait: Option<u32>,
    /// Plain HTTP on the TCP port instead of TLS: loopback development only.
    pub insecure: bool,
    /// More names (DNS names or IP addresses) for the controller's TLS certificate.
    pub tls_san: Vec<String>,
    /// Where the cluster's state is: `None` for the SQLite database in the data directory;
    /// `etcd://HOST:PORT[,HOST:PORT...]` for etcd, with controllers that take over from each
    /// other (builds with the `etcd` feature).
    pub store: Option<String>,
    /// The prefix of the cluster's keys in etcd.
    pub etcd_prefix: String,
    /// TLS to etcd: its CA, this controller's client certificate and key.
    pub etcd_tls: Option<(PathBuf, PathBuf, PathBuf)>,
    /// The leader's lease in etcd, in seconds.
    pub etcd_lease: Option<u32>,
    /// Seconds between the leader's rounds of etcd upkeep (0: none).
    pub etcd_upkeep: Option<u32>,
    /// The address clients are told to reach this controller at (`HOST:PORT`, or a URL of
    /// the TCP port's scheme): what a standby answers while this one leads. Default: the
    /// listening address, an unspecified one read as loopback.
    pub advertise: Option<String>,
}

/// `--advertise`'s value as a URL of `scheme`.
fn advertised(v: &str, scheme: &str) -> Result<String> {
    let hostport = match v.split_once("://") {
        Some((s, rest)) if s == scheme => rest,
        Some((s, _)) => bail!("--advertise {v:?}: this controller's TCP port speaks {scheme}, not {s}"),
        None => v,
    };
    let ok = hostport.rsplit_once(':').is_some_and(|(h, p)| {
        // An IPv6 address goes in brackets, as in a URL.
        let bare_v6 = h.contains(':') && !(h.starts_with('[') && h.ends_with(']'));
        !h.is_empty()
            && !bare_v6
            && p.parse::<u16>().is_ok_and(|p| p > 0)
            && !h.contains(['/', '?', '#', '@'])
            && !h.chars().any(|c| c.is_control() || c.is_whitespace())
    });
    if !ok {
        bail!("--advertise {v:?}: expected HOST:PORT (or {scheme}://HOST:PORT), the address clients reach this controller's TCP port at");
    }
    Ok(format!("{scheme}://{hostport}"))
}

/// The largest job record a submission may make where the state is in etcd: a job's record
/// (its script, environment and options, as JSON) is one etcd value, and etcd takes 1.5 MiB per
/// request by default; the rest is left for the record's other fields.
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub(crate) const RECORD_LIMIT: usize = 1_000_000;

/// Where the controller keeps the cluster's state.
#[derive(Debug, Clone)]
enum Backend {
    /// `DATA/state.db`.
    Sqlite,
    /// etcd, with `DATA/replica.db` its replica.
    #[cfg(feature = "etcd")]
    Etcd(store::etcd::Config),
}

/// The backend `o` names.
fn backend(o: &Options) -> Result<Backend> {
    let Some(url) = &o.store else {
        if o.etcd_tls.is_some() || o.etcd_lease.is_some() || o.etcd_upkeep.is_some() {
            bail!("the --etcd-* options go with --store etcd://HOST:PORT[,...]");
        }
        return Ok(Backend::Sqlite);
    };
    if url == "sqlite" {
        return Ok(Backend::Sqlite);
    }
    #[cfg(feature = "etcd")]
    {
        let mut cfg = store::etcd::Config::parse(url, &o.etcd_prefix).map_err(|e| anyhow::anyhow!("--store {e}"))?;
        if let Some((ca, cert, key)) = &o.etcd_tls {
            cfg.tls = Some(store::etcd::Tls { ca: ca.clone(), cert: cert.clone(), key: key.clone() });
        }
        if let Some(l) = o.etcd_lease {
            if l < 2 {
                bail!("--etcd-lease must be at least 2 seconds (etcd's shortest lease is 1.5 s at its default settings)");
            }
            cfg.lease_ttl = i64::from(l);
        }
        if let Some(u) = o.etcd_upkeep {
            cfg.upkeep_every = (u > 0).then(|| std::time::Duration::from_secs(u.into()));
        }
        Ok(Backend::Etcd(cfg))
    }
    #[cfg(not(feature = "etcd"))]
    bail!(
        "--store {url:?}: this build of tandem has no etcd backend; build it with `cargo build --release -p tandem --features etcd` (which needs protoc: apt-get install protobuf-compiler)"
    )
}

/// `tandem admin migrate`: the state in the SQLite database of the data directory `data`
/// written into etcd below `prefix` (which must be empty), for controllers started with
/// `--store URL` on it afterwards. The controller must be stopped. Returns what was written.
pub fn migrate(data: &std::path::Path, url: &str, prefix: &str, tls: Option<(PathBuf, PathBuf, PathBuf)>) -> Result<String> {
    let db = data.join("state.db");
    if !db.exists() {
        bail!("{}: no such database (give the data directory of a controller that ran on SQLite with --data)", db.display());
    }
    if std::os::unix::net::UnixStream::connect(data.join("tandem.sock")).is_ok() {
        bail!("a controller is running on {}: stop it first (its state must not change while it is copied)", data.display());
    }
    #[cfg(feature = "etcd")]
    {
        let mut cfg = store::etcd::Config::parse(url, prefix).map_err(|e| anyhow::anyhow!("--store {e}"))?;
        if let Some((ca, cert, key)) = tls {
            cfg.tls = Some(store::etcd::Tls { ca, cert, key });
        }
        let endpoints = cfg.endpoints.join(",");
        let prefix = cfg.prefix.clone();
        let s = store::Store::open(&db).with_context(|| format!("opening {}", db.display()))?;
        let mut recs = s.records_all().context("reading the database")?;
        // The start count: the larger of the database's and DATA/boot's (a restored backup's
        // database is behind the file), and past every start since where the database is a
        // backup not yet started (as its first start would have counted).
        let stored: u64 = s.meta("boot")?.and_then(|b| b.parse().ok()).unwrap_or(0);
        let file: u64 = std::fs::read_to_string(data.join("boot")).ok().and_then(|b| b.trim().parse().ok()).unwrap_or(0);
        let boot = stored.max(file) + if s.restored_from()?.is_some() { store::RESTORE_BOOT_STEP } else { 0 };
        recs.retain(|r| !matches!(r, store::rec::Rec::Meta(k, _) if k == "boot"));
        recs.push(store::rec::Rec::Meta("boot".into(), Some(boot.to_string())));
        let jobs = recs.iter().filter(|r| matches!(r, store::rec::Rec::Job(..))).count();
        let arrays = recs.iter().filter(|r| matches!(r, store::rec::Rec::Array(..))).count();
        let nodes = recs.iter().filter(|r| matches!(r, store::rec::Rec::Node(..))).count();
        let mut remote = store::etcd::Remote::connect(cfg).with_context(|| format!("connecting to etcd at {endpoints}"))?;
        let n = remote.migrate_into(&recs).with_context(|| format!("writing into etcd at {endpoints} below {prefix}"))?;
        Ok(format!(
            "migrated {n} records ({jobs} jobs, {arrays} arrays, {nodes} nodes) from {} into etcd at {endpoints} below {prefix}: start the controllers with --store {url} --etcd-prefix {prefix} (this data directory's CA and keys with the first)",
            db.display()
        ))
    }
    #[cfg(not(feature = "etcd"))]
    {
        let _ = (url, prefix, tls);
        bail!(
            "this build of tandem has no etcd backend; build it with `cargo build --release -p tandem --features etcd` (which needs protoc: apt-get install protobuf-compiler)"
        )
    }
}

/// The hidden command that runs the site's job-submit script for the controller.
pub const JOB_SUBMIT_CMD: &str = hook::WORKER_CMD;

/// `tandem __job-submit SCRIPT MEMORY_MB CLUSTER`: the job-submit script's process, started
/// by the controller; returns its exit code.
pub fn job_submit_main(args: &[String]) -> i32 {
    lua::worker_main(args)
}

/// Runs the controller until the process is stopped (on a runtime of its own).
pub fn main(o: Options) -> Result<()> {
    failpoint::init();
    let backend = backend(&o)?;
    let path = o.config.or_else(|| Some(o.data.join("tandem.toml")).filter(|p| p.exists()));
    let source = config::Source { path, lease: o.lease, kill_wait: o.kill_wait };
    let (settings, security, limits) = source.read()?;
    // One descriptor per agent connection (or per proxy's connection) at scale.
    exec::raise_nofile(1 << 20);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let held = match o.listen_fd {
        Some(fd) => Some(exec::inherited_listener(fd).with_context(|| format!("--listen-fd {fd}"))?),
        None => None,
    };
    let listen = match &held {
        Some(l) => l.local_addr()?,
        None => o.listen,
    };
    if o.insecure && !listen.ip().is_loopback() {
        bail!("--insecure (plain HTTP) is for loopback development only, not for {listen}");
    }
    let mut sans = o.tls_san;
    if !listen.ip().is_unspecified() {
        sans.push(listen.ip().to_string());
    }
    let tls = (!o.insecure).then_some(sans);
    let advertise = o.advertise.as_deref().map(|v| advertised(v, if o.insecure { "http" } else { "https" })).transpose()?;
    if advertise.is_none() && listen.ip().is_unspecified() && !matches!(backend, Backend::Sqlite) {
        tracing::warn!(
            "listening on every address without --advertise: while this controller leads, standbys send clients to 127.0.0.1:{}; give --advertise HOST:PORT (an address every client reaches)",
            listen.port()
        );
    }
    rt.block_on(run(ServerArgs { listen, held, data: o.data, settings, security, limits, tls, source, backend, advertise }))
}

/// Server settings, resolved.
struct ServerArgs {
    listen: SocketAddr,
    /// The inherited listening socket (`--listen-fd`), instead of binding `listen`.
    held: Option<std::net::TcpListener>,
    data: PathBuf,
    settings: Settings,
    security: config::Security,
    /// The flood defences (`[limits]`).
    limits: limits::Limits,
    /// TLS with these extra certificate names; `None`: plain HTTP (`--insecure`).
    tls: Option<Vec<String>>,
    /// Where the configuration came from (`scontrol reconfigure` reads it again).
    source: config::Source,
    /// Where the cluster's state is.
    backend: Backend,
    /// `--advertise`, as a URL.
    advertise: Option<String>,
}

/// The controller's two listeners, bound.
struct Bound {
    tcp: TcpListener,
    unix: UnixListener,
    tls: Option<rustls::ServerConfig>,
    local: SocketAddr,
    /// The TCP port's address as clients reach it (`https://`, `http://` with --insecure).
    url: String,
}

/// Binds the TCP port (or takes the inherited one) and the Unix socket, and writes `DATA/addr`.
async fn bind(
    held: &mut Option<std::net::TcpListener>,
    listen: SocketAddr,
    data: &std::path::Path,
    tls: &Option<Vec<String>>,
    advertise: Option<String>,
) -> Result<Bound> {
    let tcp = match held.take() {
        Some(l) => {
            l.set_nonblocking(true)?;
            TcpListener::from_std(l)?
        }
        None => TcpListener::bind(listen).await.with_context(|| format!("binding {listen}"))?,
    };
    let sock = data.join("tandem.sock");
    let _ = std::fs::remove_file(&sock);
    let unix = UnixListener::bind(&sock).with_context(|| format!("binding {}", sock.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666))?;
    let local = tcp.local_addr()?;
    let tls = match tls {
        Some(sans) => Some(tls::Ca::load_or_create(data)?.server_config(sans)?),
        None => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!("listening on {scheme}://{local} and unix://{}", sock.display());
    private::write(&data.join("addr"), &local.to_string()).context("writing the address file")?;
    let reach = if local.ip().is_unspecified() { SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), local.port()) } else { local };
    Ok(Bound { tcp, unix, tls, local, url: advertise.unwrap_or_else(|| format!("{scheme}://{reach}")) })
}

#[macro_use]
mod app;
mod accounting;
#[doc(hidden)]
pub mod config;
mod failpoint;
#[cfg(feature = "etcd")]
mod ha;
mod hook;
mod jobs;
mod journal;
mod kshared;
mod kube;
mod limits;
mod listen;
mod lua;
mod nodes;
mod output;
mod podexec;
mod policy;
mod private;
mod resv;
mod services;
mod tls;
mod token;

fn router(app: App) -> Router {
    output::routes(kube::routes(policy::routes(resv::routes(accounting::routes(nodes::routes(jobs::routes(services::routes(
        Router::new(),
    ))))))))
    .layer(axum::middleware::from_fn_with_state(app.clone(), count_response))
    .with_state(app)
}

/// Counts each reply and its body's bytes (`tandem_response_bytes_total`): what listings cost.
async fn count_response(
    axum::extract::State(app): axum::extract::State<App>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let resp = next.run(req).await;
    let bytes = axum::body::HttpBody::size_hint(resp.body()).exact().unwrap_or(0);
    let mut m = app.metrics.lock().expect("lock");
    m.responses += 1;
    m.response_bytes += bytes;
    resp
}

/// Removes the shared cluster secret an older version kept (in the database, and in
/// `DATA/secret`): nodes now join with single-use tokens and hold credentials of their own.
fn forget_secret(data: &std::path::Path, db: &mut store::Store, loaded: Option<String>) -> Result<()> {
    for name in private::LEGACY {
        if std::fs::remove_file(data.join(name)).is_ok() {
            tracing::info!("removed {name}, the cluster secret of an older version (agents join with `tandem token --join` now)");
        }
    }
    if loaded.is_some() {
        db.forget_secret()?;
    }
    Ok(())
}

/// Most job starts applied per hold of the controller (see the scheduling loop).
const APPLY_PIECE: usize = 128;

/// Runs the controller until the process is stopped.
async fn run(args: ServerArgs) -> Result<()> {
    // Everything the controller creates is its own alone (the socket is opened up below).
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    private::prepare_dir(&args.data)?;
    let mut args = args;
    // With etcd: the listeners first (a standby answers on them), then the state once this
    // controller leads.
    #[cfg_attr(not(feature = "etcd"), allow(unused_mut))]
    let mut bound: Option<Bound> = None;
    #[cfg_attr(not(feature = "etcd"), allow(unused_mut))]
    let mut led_boot: Option<u64> = None;
    let db = match args.backend.clone() {
        Backend::Sqlite => store::Store::open(&args.data.join("state.db")).context("opening the database")?,
        #[cfg(feature = "etcd")]
        Backend::Etcd(cfg) => {
            let endpoints = cfg.endpoints.join(",");
            let remote = store::etcd::Remote::connect(cfg).with_context(|| format!("connecting to etcd at {endpoints}"))?;
            let db = store::Store::open_replica(&args.data.join("replica.db"), remote).context("opening the replica database")?;
            let db = Arc::new(Mutex::new(db));
            let b = bind(&mut args.held, args.listen, &args.data, &args.tls, args.advertise.clone()).await?;
            let led = ha::stand_by(db.clone(), &args.data, &b.tcp, &b.unix, b.tls.clone(), b.url.clone()).await?;
            bound = Some(b);
            led_boot = Some(led.boot);
            // The watch that shared it has stopped.
            let mut db = db;
            loop {
                match Arc::try_unwrap(db) {
                    Ok(m) => break m.into_inner().expect("store lock"),
                    Err(d) => {
                        db = d;
                        tokio::task::yield_now().await;
                    }
                }
            }
        }
    };
    let mut db = db;
    if let Some(m) = db.migrated() {
        tracing::warn!(
            from = m.from,
            to = m.to,
            "the database was of schema {}, written by an older Tandem: migrated to schema {}; its copy from before is {}",
            m.from,
            m.to,
            m.backup.display()
        );
    }
    let mut loaded = db.load().context("loading state")?;
    forget_secret(&args.data, &mut db, loaded.secret.clone())?;
    let restored = db.restored_from().context("reading the database")?;
    let boot = match led_boot {
        Some(b) => b,
        None => {
            // The start count is kept beside the database too (DATA/boot): where a backup is
            // restored into the same directory, the file still knows the starts made since the
            // backup.
            let boot_file = args.data.join("boot");
            let floor = std::fs::read_to_string(&boot_file).ok().and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or(0);
            // Past every start made since the backup was taken (agents skip orders numbered
            // below what they acknowledged; proxies ignore views older than theirs).
            let step = if restored.is_some() { store::RESTORE_BOOT_STEP } else { 1 };
            let boot = db.next_boot_after(floor, step).context("recording this start")?;
            private::write(&boot_file, &boot.to_string()).context("writing DATA/boot")?;
            boot
        }
    };
    if boot >= 1 << 24 {
        anyhow::bail!(
            "the controller's start count is {boot}, at its limit (2^24: order numbers are the count times 2^40); this many starts means a restart loop or many restores: stop it, and report this"
        );
    }
    // What a `tandem admin backup` cut short (a crash) left.
    for e in std::fs::read_dir(&args.data).into_iter().flatten().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with("backup-") && n.ends_with(".tmp") {
            let _ = std::fs::remove_file(e.path());
        }
    }
    if let Some(taken) = restored {
        // Ids given since the backup are not given again.
        loaded.next_id = loaded.next_id.saturating_add(control::RESTORE_ID_STEP);
        let (jobs, arrays) = control::mark_restored(&mut loaded.jobs, &mut loaded.arrays);
        let (job_set, array_set): (HashSet<u64>, HashSet<u64>) = (jobs.iter().copied().collect(), arrays.iter().copied().collect());
        let dirty = control::Dirty {
            jobs: loaded.jobs.iter().filter(|j| job_set.contains(&j.req.id.0)).cloned().collect(),
            arrays: loaded.arrays.iter().filter(|a| array_set.contains(&a.id())).cloned().collect(),
            next_id: Some(loaded.next_id),
            ..Default::default()
        };
        // Stored before the mark is taken away: a crash between the two marks them again.
        db.persist(&dirty).context("storing the restored jobs' holds")?;
        db.finish_restore().context("finishing the restore")?;
        tracing::warn!(
            jobs = jobs.len(),
            arrays = arrays.len(),
            "restored from {}: {} job(s) and {} array(s) it holds unfinished are held (reason Restored) until their agents report them running or an operator releases or cancels them; new job ids start at {}; this start is counted {boot}",
            if taken > 0 { format!("a backup taken at {taken} (unix time)") } else { "an etcd snapshot".to_string() },
            jobs.len(),
            arrays.len(),
            loaded.next_id
        );
    }
    let t = now();
    let mut settings = args.settings;
    let me = nix::unistd::geteuid().as_raw();
    if me != 0 {
        settings.administrators.push(me);
    }
    let seed = control::accounting::Accounting::of(&settings.cluster);
    let mut ctl = Controller::restore(settings, loaded.jobs, loaded.nodes, loaded.services, loaded.next_id, t, boot);
    ctl.restore_arrays(loaded.arrays, &loaded.stored, t);
    ctl.restore_credentials(loaded.credentials);
    if let Some(a) = loaded.accounting {
        if a != seed {
            tracing::info!(
                "the accounting is the one sacctmgr last changed (kept in the database); \
                 tandem.toml's [[qos]], [[account]], [[user]] and [[association]] only seed a new cluster's"
            );
        }
        ctl.restore_accounting(a);
    }
    ctl.restore_reservations(loaded.reservations);
    ctl.restore_kube_objects(loaded.kube_objects);
    accounting::refresh_admins(&mut ctl);
    let heartbeat_ms = ctl.heartbeat_ms();
    let db = Arc::new(Mutex::new(db));
    // The jobs' states as they are: their next change is logged, not their restart.
    let logged: HashMap<u64, model::JobState> = ctl.jobs().filter(|j| !j.state.is_final()).map(|j| (j.req.id.0, j.state)).collect();
    let Bound { tcp, unix, tls, local, url } = match bound {
        Some(b) => b,
        None => bind(&mut args.held, args.listen, &args.data, &args.tls, args.advertise.clone()).await?,
    };
    let app = App {
        settings: Arc::new(std::sync::RwLock::new(Arc::new(ctl.settings().clone()))),
        inner: Arc::new(Mutex::new(Inner { ctl, job_seq: HashMap::new(), logged })),
        journal: journal::Journal::start(db.clone()),
        db,
        nodes: Arc::new(token::NodeTokens::new(private::key(&args.data.join("nodes.key"))?.as_bytes())),
        owner: nix::unistd::geteuid().as_raw(),
        wake: Arc::new(Notify::new()),
        node_wake: Arc::new(Mutex::new(HashMap::new())),
        metrics: Arc::new(Mutex::new(Metrics::default())),
        service_wake: Arc::new(Notify::new()),
        ep_watch: Arc::new(tokio::sync::watch::channel(0).0),
        heartbeat_ms,
        security: Arc::new(args.security),
        tokens: Arc::new(token::Tokens::new(private::key(&args.data.join("jwt.key"))?.as_bytes())),
        gate: Arc::new(limits::Gate::new(args.limits, nix::unistd::geteuid().as_raw())),
        hook: Arc::new(hook::Hook::default()),
        source: Arc::new(args.source.clone()),
        endpoint: Arc::new(std::sync::OnceLock::new()),
        kube: Arc::new(Mutex::new(app::Views::new(boot))),
        outputs: Arc::new(app::Outputs::default()),
        data: Arc::new(args.data.clone()),
        record_limit: match &args.backend {
            Backend::Sqlite => None,
            #[cfg(feature = "etcd")]
            Backend::Etcd(_) => Some(RECORD_LIMIT),
        },
        serving_since: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64),
    };
    // With etcd: the cluster knows its CA and keys by their fingerprints from now on (the first
    // leader made them above), and every controller is checked against them.
    #[cfg(feature = "etcd")]
    if matches!(args.backend, Backend::Etcd(_)) {
        let fp = ha::fingerprints(&args.data);
        let mut d = app.db.lock().expect("database lock");
        if d.meta("key_fingerprints")?.as_deref() != Some(fp.as_str()) {
            d.put_meta("key_fingerprints", Some(fp)).context("storing the keys' fingerprints in etcd")?;
        }
    }
    // The site's job-submit script is loaded now, so an error in it is logged at once; the
    // controller serves either way (and refuses submissions while the script cannot be used).
    let hook_cfg = hook::config_of(app.lock().ctl.settings());
    if let Err(e) = app.hook.configure(hook_cfg).await {
        tracing::warn!("job_submit: {e}");
    }
    tokio::spawn(policy::reconfigure_on_sighup(app.clone()));
    let ca_pem = match tls.is_some() {
        true => Some(std::fs::read_to_string(args.data.join("ca.pem")).context("reading the cluster CA's certificate")?),
        false => None,
    };
    let _ = app.endpoint.set(app::Endpoint { url, ca_pem, bound: local.ip() });
    // Two accept loops, each its own task: a flood of one cannot hold the other back.
    let t1 = tokio::spawn(listen::serve_tcp(tcp, tls, router(app.clone()), app.clone()));
    let t2 = tokio::spawn(listen::serve_unix(unix, router(app.clone()), app.clone()));
    // Both listeners serve: systemd's `Type=notify` may start what waits for the controller.
    if let Err(e) = exec::notify_ready() {
        tracing::warn!("telling systemd the controller is ready: {e}");
    }
    // The scheduling loop: woken by submissions and exits, and at least once a second.
    let sched_app = app.clone();
    let t3 = tokio::spawn(async move {
        let mut last = Duration::ZERO;
        loop {
            let _ = tokio::time::timeout(Duration::from_millis(1000), sched_app.wake.notified()).await;
            // Let a burst of submissions land before the pass; under load, wait at least as long
            // as the last pass took, so passes hold the controller at most about half the time.
            tokio::time::sleep(last.clamp(Duration::from_millis(5), Duration::from_secs(1))).await;
            let started = std::time::Instant::now();
            let t = now();
            // Nothing is acknowledged here: the heartbeats that carry its orders wait for its
            // commit. Not waiting for the disk lets the next pass be paced by this one.
            // The controller is held only to take the pass's inputs (what changed since the last
            // pass) and to apply its plan; the scheduler runs on a blocking thread meanwhile,
            // while requests go on.
            let ((mut pass, events), _) = sched_app.apply(|c| {
                let pass = c.begin_tick(t);
                (pass, c.take_events())
            });
            // Nodes lost (lease lapsed, health check) and what became of their jobs.
            for e in events {
                tracing::warn!("{e}");
            }
            let held = started.elapsed();
            pass = tokio::task::spawn_blocking(move || {
                pass.run();
                pass
            })
            .await
            .expect("the scheduling pass panicked");
            failpoint::hit("pass-planned");
            // The plan is applied a piece at a time (each piece with its own journal batch),
            // so a pass that starts thousands of jobs does not hold the controller for all of
            // them at once; agents with new orders are woken after each piece.
            let mut apply = Duration::ZERO;
            loop {
                let applying = std::time::Instant::now();
                let (done, _) = sched_app.apply(|c| c.finish_some(&mut pass, APPLY_PIECE));
                apply += applying.elapsed();
                if let Some(info) = done {
                    if info.more {
                        // Array tasks behind the ones this pass started are jobs now: at once.
                        sched_app.wake.notify_one();
                    }
                    break;
                }
                failpoint::hit("pass-applying");
                sched_app.wake_nodes();
                tokio::task::yield_now().await;
            }
            let held = held + apply;
            last = started.elapsed();
            let secs = last.as_secs_f64();
            {
                let mut m = sched_app.metrics.lock().expect("lock");
                m.passes += 1;
                m.pass_seconds_total += secs;
                m.last_pass_seconds = secs;
                m.pass_lock_seconds_total += held.as_secs_f64();
                m.pass_apply_seconds_total += apply.as_secs_f64();
            }
            sched_app.wake_nodes();
        }
    });
    let t4 = tokio::spawn(services::service_loop(app.clone()));
    tokio::select! {
        r = t4 => r?,
        r = t1 => r??,
        r = t2 => r??,
        r = t3 => r?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn advertise_takes_host_port_or_a_url_of_the_ports_scheme() {
        assert_eq!(super::advertised("ctl1.example.org:7200", "https").unwrap(), "https://ctl1.example.org:7200");
        assert_eq!(super::advertised("https://10.0.0.1:7200", "https").unwrap(), "https://10.0.0.1:7200");
        assert_eq!(super::advertised("[::1]:7200", "http").unwrap(), "http://[::1]:7200");
        for bad in ["ctl1", "ctl1:0", ":7200", "ctl1:x", "ctl1:7200/path", "a b:1", "u@h:1", "x\u{1b}:1", "::1:7200", "fe80::1:7200"] {
            assert!(super::advertised(bad, "https").is_err(), "{bad}");
        }
        let e = super::advertised("http://ctl1:7200", "https").unwrap_err().to_string();
        assert!(e.contains("speaks https, not http"), "{e}");
    }
}
