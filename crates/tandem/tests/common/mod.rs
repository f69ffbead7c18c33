//! The end-to-end harness shared by the cluster and service tests: a real controller and real
//! agents (separate OS processes, each its own node name) on loopback, driven through the
//! Slurm-compatible commands. Every wait is bounded.
#![allow(dead_code)]

use std::collections::HashMap;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tandem")
}

/// Children killed when the test ends, however it ends.
pub struct Procs(pub Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn free_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-e2e-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    // Tasks may run as another user (the permission test): let them in.
    Command::new("chmod").args(["-R", "a+rwx"]).arg(&d).status().unwrap();
    d
}

pub fn kill_tree(pid: u32, sig: &str) {
    // Tasks lead process groups below their keepers, below the agent's launcher, below the
    // agent. Note them all, signal the agent first (so it cannot report their deaths: the node
    // dies as a whole), then the rest and their groups.
    let children = |p: &str| -> Vec<String> {
        Command::new("pgrep")
            .args(["-P", p])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().map(str::to_string).collect())
            .unwrap_or_default()
    };
    let mut below = Vec::new();
    let mut next = children(&pid.to_string());
    while !next.is_empty() {
        let more: Vec<String> = next.iter().flat_map(|c| children(c)).collect();
        below.append(&mut next);
        next = more;
    }
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
    for c in &below {
        let _ = Command::new("kill").args([sig, "--", &format!("-{c}")]).status();
        let _ = Command::new("kill").args([sig, c]).status();
    }
}

pub struct Cluster {
    pub dir: PathBuf,
    pub work: PathBuf,
    pub shims: PathBuf,
    pub sock: String,
    pub addr: String,
    pub lease: u32,
    pub server: Option<Child>,
    pub agents: Vec<Option<Child>>,
    pub gpus: Option<String>,
    pub agent_server: Vec<String>,
    /// Each agent's `--features` (by index; none where missing or empty).
    pub features: Vec<String>,
    /// More arguments for every agent started from now on.
    pub agent_args: Vec<String>,
}

impl Cluster {
    pub fn new(tag: &str, agents: usize, gpus: Option<&str>, lease: u32) -> Cluster {
        Cluster::with_config(tag, agents, gpus, lease, None)
    }

    pub fn with_config(tag: &str, agents: usize, gpus: Option<&str>, lease: u32, config: Option<&str>) -> Cluster {
        Cluster::build(tag, agents, gpus, lease, config, &[])
    }

    /// One agent per entry of `features`, each declaring those features (`--features`), and
    /// the controller's `config` (tandem.toml) if any.
    pub fn with_features(tag: &str, features: &[&str], config: Option<&str>) -> Cluster {
        Cluster::build(tag, features.len(), None, 30, config, features)
    }

    fn build(tag: &str, agents: usize, gpus: Option<&str>, lease: u32, config: Option<&str>, features: &[&str]) -> Cluster {
        let dir = free_dir(tag);
        if let Some(cfg) = config {
            std::fs::create_dir_all(dir.join("controller")).unwrap();
            std::fs::write(dir.join("controller/tandem.toml"), cfg).unwrap();
        }
        let work = dir.join("work");
        std::fs::create_dir_all(&work).unwrap();
        Command::new("chmod").args(["a+rwx"]).arg(&work).status().unwrap();
        let shims = dir.join("bin");
        let st = Command::new(bin()).arg("shims").arg(&shims).stdout(Stdio::null()).status().unwrap();
        assert!(st.success());
        let mut c = Cluster {
            sock: dir.join("controller/tandem.sock").display().to_string(),
            dir,
            work,
            shims,
            addr: String::new(),
            lease,
            server: None,
            agents: Vec::new(),
            gpus: gpus.map(str::to_string),
            agent_server: Vec::new(),
            features: features.iter().map(|f| f.to_string()).collect(),
            agent_args: Vec::new(),
        };
        c.start_server();
        for i in 0..agents {
            let a = format!("https://{}", c.addr);
            c.start_agent(i, &a);
        }
        c.wait_nodes(agents);
        c
    }

    pub fn start_server(&mut self) {
        let ctl = self.dir.join("controller");
        std::fs::create_dir_all(&ctl).unwrap();
        let _ = std::fs::remove_file(ctl.join("addr"));
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("controller.log")).unwrap();
        let listen = if self.addr.is_empty() { "127.0.0.1:0".to_string() } else { self.addr.clone() };
        let child = Command::new(bin())
            .args(["server", "--listen", &listen, "--lease", &self.lease.to_string(), "--kill-wait", "2", "--data"])
            .arg(&ctl)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.server = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(a) = std::fs::read_to_string(ctl.join("addr"))
                && !a.trim().is_empty()
            {
                self.addr = a.trim().to_string();
                break;
            }
            assert!(Instant::now() < deadline, "controller did not start: {}", self.log("controller"));
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn start_agent(&mut self, i: usize, server: &str) {
        self.start_agent_with(i, server, std::path::Path::new(bin()));
    }

    /// Agent `i` started from `program` (another build of tandem: an upgrade's).
    pub fn start_agent_with(&mut self, i: usize, server: &str, program: &std::path::Path) {
        let name = format!("node{}", i + 1);
        let data = self.dir.join(&name);
        std::fs::create_dir_all(&data).unwrap();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join(format!("{name}.log"))).unwrap();
        // A new node joins with a single-use token; a restarted one keeps its credential.
        let join = data.join("join-token");
        if !data.join("credential").exists() {
            std::fs::write(&join, self.token(&["--join"])).unwrap();
        }
        let mut cmd = Command::new(program);
        cmd.args(["agent", "--server", server, "--name", &name, "--cpus", "4", "--memory", "4G", "--join-token-file"])
            .arg(&join)
            .arg("--ca")
            .arg(self.dir.join("controller/ca.pem"))
            .arg("--data")
            .arg(&data)
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        if let Some(g) = &self.gpus {
            cmd.args(["--gpus", g]);
        }
        if let Some(f) = self.features.get(i).filter(|f| !f.is_empty()) {
            cmd.args(["--features", f]);
        }
        cmd.args(&self.agent_args);
        let child = cmd.spawn().unwrap();
        if self.agents.len() <= i {
            self.agents.resize_with(i + 1, || None);
            self.agent_server.resize(i + 1, String::new());
        }
        self.agents[i] = Some(child);
        self.agent_server[i] = server.to_string();
    }

    /// What `tandem token ARGS` prints, asked of the controller as its own user (an
    /// administrator).
    pub fn token(&self, args: &[&str]) -> String {
        let o = Command::new(bin()).arg("token").args(args).env("TANDEM_SERVER", format!("unix://{}", self.sock)).output().unwrap();
        assert!(o.status.success(), "tandem token {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    }

    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }

    pub fn run(&self, cmd: &str, args: &[&str]) -> Output {
        self.run_env(cmd, args, &[])
    }

    /// [`Cluster::run`] with these variables set too.
    pub fn run_env(&self, cmd: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
        let path = format!("{}:{}", self.shims.display(), std::env::var("PATH").unwrap_or_default());
        Command::new(self.shims.join(cmd))
            .args(args)
            .current_dir(&self.work)
            .env("TANDEM_SERVER", format!("unix://{}", self.sock))
            .env("PATH", path)
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }

    pub fn ok(&self, cmd: &str, args: &[&str]) -> String {
        let o = self.run(cmd, args);
        assert!(o.status.success(), "{cmd} {args:?} failed: {}{}", String::from_utf8_lossy(&o.stderr), String::from_utf8_lossy(&o.stdout));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Runs `tandem ARGS` against this cluster.
    pub fn tandem(&self, args: &[&str]) -> Output {
        Command::new(bin()).args(args).current_dir(&self.work).env("TANDEM_SERVER", format!("unix://{}", self.sock)).output().unwrap()
    }

    /// Runs `tandem ARGS`, which must succeed; returns its output.
    pub fn tandem_ok(&self, args: &[&str]) -> String {
        let o = self.tandem(args);
        assert!(o.status.success(), "tandem {args:?} failed: {}{}", String::from_utf8_lossy(&o.stderr), String::from_utf8_lossy(&o.stdout));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    pub fn sbatch(&self, args: &[&str]) -> u64 {
        let mut a = vec!["--parsable"];
        a.extend_from_slice(args);
        self.ok("sbatch", &a).trim().parse().unwrap()
    }

    pub fn script(&self, name: &str, body: &str) -> String {
        let p = self.work.join(name);
        std::fs::write(&p, body).unwrap();
        p.display().to_string()
    }

    pub fn job(&self, id: u64) -> HashMap<String, String> {
        let out = self.ok("scontrol", &["show", "job", &id.to_string()]);
        out.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    pub fn wait_state(&self, id: u64, want: &[&str], secs: u64) -> HashMap<String, String> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let j = self.job(id);
            if want.contains(&j["JobState"].as_str()) {
                return j;
            }
            assert!(
                Instant::now() < deadline,
                "job {id} stayed {:?} (wanted {want:?}); controller log:\n{}",
                j["JobState"],
                self.log("controller")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn wait_nodes(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self.ok("sinfo", &["-N"]);
            if out.lines().skip(1).filter(|l| !l.contains(" down ")).count() >= n {
                return;
            }
            assert!(Instant::now() < deadline, "nodes did not register:\n{out}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn kill_agent(&mut self, i: usize) {
        if let Some(mut c) = self.agents[i].take() {
            kill_tree(c.id(), "-9");
            let _ = c.wait();
        }
    }

    /// SIGTERM to agent `i` alone, as `systemctl stop` of its unit sends it (`KillMode=process`):
    /// its tasks live on. Returns once it exited.
    pub fn stop_agent(&mut self, i: usize) {
        if let Some(mut c) = self.agents[i].take() {
            let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
            let _ = c.wait();
        }
    }

    /// `kill -9` of agent `i` alone: its tasks live on, as when a daemon crashes.
    pub fn crash_agent(&mut self, i: usize) {
        if let Some(mut c) = self.agents[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn kill_server(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in self.agents.iter_mut().flatten() {
            kill_tree(c.id(), "-9");
            let _ = c.wait();
        }
        self.kill_server();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A free TCP port on loopback (bound and released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A `tandem proxy` following a cluster's controller; killed on drop.
pub struct Proxy {
    pub child: Child,
    pub addr: String,
}

impl Proxy {
    pub fn start(c: &Cluster) -> Proxy {
        let addr = format!("127.0.0.1:{}", free_port());
        let log = std::fs::OpenOptions::new().create(true).append(true).open(c.dir.join("proxy.log")).unwrap();
        let cred = c.dir.join("proxy.credential");
        std::fs::write(&cred, c.token(&["--proxy", "test"])).unwrap();
        let child = Command::new(bin())
            .args(["proxy", "--listen", &addr, "--server", &format!("https://{}", c.addr), "--credential-file"])
            .arg(&cred)
            .arg("--ca")
            .arg(c.dir.join("controller/ca.pem"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let p = Proxy { child, addr };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&p.addr).is_err() {
            assert!(Instant::now() < deadline, "the proxy did not start: {}", c.log("proxy"));
            std::thread::sleep(Duration::from_millis(50));
        }
        p
    }

    /// Waits until the proxy routes `path` (it has the controller's view of the service).
    pub fn wait_routes(&self, path: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let o = Command::new("curl")
                .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", &format!("http://{}{path}", self.addr)])
                .output()
                .unwrap();
            if String::from_utf8_lossy(&o.stdout) == "200" {
                return;
            }
            assert!(Instant::now() < deadline, "the proxy never routed {path}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs `tandem bench load URL ARGS --json` against a path of the proxy; returns its report.
    pub fn load(&self, path: &str, args: &[&str]) -> serde_json::Value {
        let o = Command::new(bin()).args(["bench", "load", &format!("http://{}{path}", self.addr), "--json"]).args(args).output().unwrap();
        assert!(o.status.success(), "bench load failed: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One raw HTTP/1.1 exchange over a Unix socket (`connection: close`): status and whole reply.
pub fn raw_http(sock: &str, req: &str) -> (u16, String) {
    let mut s = std::os::unix::net::UnixStream::connect(sock).unwrap();
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    let status = buf.split_whitespace().nth(1).unwrap_or("0").parse().unwrap_or(0);
    (status, buf)
}

/// A JSON POST request text for `raw_http`, with extra headers.
pub fn post(path: &str, body: &str, headers: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{headers}connection: close\r\n\r\n{body}",
        body.len()
    )
}

/// A TCP forwarder the test can cut, standing for the network between one agent and the
/// controller.
pub struct Link {
    pub addr: String,
    up: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Link {
    pub fn new(target: &str) -> Link {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let target = target.to_string();
        let flag = up.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(a) = conn else { continue };
                if !flag.load(std::sync::atomic::Ordering::SeqCst) {
                    continue; // dropped: the partition
                }
                let Ok(b) = std::net::TcpStream::connect(&target) else { continue };
                for (mut r, mut w) in [(a.try_clone().unwrap(), b.try_clone().unwrap()), (b, a)] {
                    let f = flag.clone();
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 8192];
                        while let Ok(n) = r.read(&mut buf) {
                            if n == 0 || !f.load(std::sync::atomic::Ordering::SeqCst) || w.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = w.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Link { addr, up }
    }

    pub fn cut(&self) {
        self.up.store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// Heals the cut: new connections go through again.
    pub fn heal(&self) {
        self.up.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A small threaded HTTP server for replicas (`python3 slow.py`): answers GET with its
/// `VERSION` after `DELAY` seconds.
pub const SLOW: &str = r#"import http.server, os, time
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        time.sleep(float(os.environ.get("DELAY", "0")))
        body = ("version=%s\n" % os.environ.get("VERSION", "")).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
"#;

/// `tandem up` in the background on `dir`, with its standard output piped; its env file read.
pub fn up(dir: &std::path::Path, agents: u32, extra: &[&str]) -> (std::process::Child, String, String) {
    // `tandem up` refuses a directory others may write (SECURITY.md S2).
    Command::new("chmod").arg("755").arg(dir).status().unwrap();
    let mut child = Command::new(bin())
        .args(["up", "--agents", &agents.to_string(), "--port", "0", "--data"])
        .arg(dir)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dir.join("env").exists() {
        assert!(Instant::now() < deadline, "tandem up did not write its env file");
        assert!(child.try_wait().unwrap().is_none(), "tandem up exited");
        std::thread::sleep(Duration::from_millis(50));
    }
    let env = std::fs::read_to_string(dir.join("env")).unwrap();
    let var = |k: &str| env.lines().find_map(|l| l.strip_prefix(&format!("export {k}="))).unwrap_or_default().to_string();
    let server = var("TANDEM_SERVER");
    // Every agent registered (a job asking for more nodes than there are is refused).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let n = run_in(dir, &server, &["nodes", "-N", "-h"]);
        if n.lines().filter(|l| l.starts_with("node") && !l.contains("down")).count() == agents as usize {
            break;
        }
        assert!(Instant::now() < deadline, "the agents did not register:\n{n}");
        std::thread::sleep(Duration::from_millis(100));
    }
    (child, server, var("TANDEM_PROXY"))
}

pub fn run_in(dir: &std::path::Path, server: &str, args: &[&str]) -> String {
    let o = Command::new(bin()).args(args).env("TANDEM_SERVER", server).current_dir(dir).output().unwrap();
    assert!(o.status.success(), "tandem {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Stops `tandem up` with Ctrl-C (SIGINT), checks it exited cleanly, removes `dir`, and returns
/// what it wrote to stderr.
pub fn stop_up(mut child: std::process::Child, dir: &std::path::Path) -> String {
    let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
    let st = child.wait().unwrap();
    let mut out = String::new();
    child.stderr.take().unwrap().read_to_string(&mut out).unwrap();
    assert!(st.success(), "tandem up: {st}\n{out}");
    let _ = std::fs::remove_dir_all(dir);
    out
}

/// Whether the tests run as root.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Whether `tool` is on the PATH.
pub fn have(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool}")]).stdout(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// The client tests' virtual environment (tests/clients/setup.sh makes it).
#[allow(dead_code)]
pub fn venv() -> PathBuf {
    std::env::var_os("TANDEM_CLIENTS_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/clients-venv"))
}

/// The venv's python, if it has `module`.
#[allow(dead_code)]
pub fn python_with(module: &str) -> Result<PathBuf, String> {
    let py = venv().join("bin/python");
    let ok = Command::new(&py).args(["-c", &format!("import {module}")]).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    if ok { Ok(py) } else { Err(format!("{} has no {module} (run tests/clients/setup.sh)", py.display())) }
}

/// The container tools the container tests need (`.ci/run` installs them), or what is missing.
pub fn container_tools() -> Result<(), String> {
    let missing: Vec<&str> = ["runc", "umoci", "skopeo", "docker-registry", "newuidmap", "unshare", "openssl", "htpasswd"]
        .into_iter()
        .filter(|t| !have(t))
        .collect();
    if !std::path::Path::new("/bin/busybox").exists() {
        return Err("busybox-static is not installed".into());
    }
    if !std::path::Path::new("/usr/bin/catatonit").exists() {
        return Err("catatonit is not installed".into());
    }
    if missing.is_empty() { Ok(()) } else { Err(format!("not installed: {}", missing.join(", "))) }
}

fn run_ok(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{cmd:?}: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A small image made here from local files only (Debian's busybox-static, with umoci): an OCI
/// layout at `DIR/layout`, tag `1`, whose `/etc/os-release` names `pretty`. Returns the layout.
pub fn busybox_image(dir: &std::path::Path, pretty: &str) -> PathBuf {
    busybox_image_with(dir, pretty, &[])
}

/// [`busybox_image`] with these files of the host's too (the host's path, the path inside;
/// content copied, links followed).
pub fn busybox_image_with(dir: &std::path::Path, pretty: &str, host_files: &[(PathBuf, PathBuf)]) -> PathBuf {
    let layout = dir.join("layout");
    let bundle = dir.join("bundle");
    let _ = std::fs::remove_dir_all(&layout);
    let _ = std::fs::remove_dir_all(&bundle);
    let l = layout.display().to_string();
    run_ok(Command::new("umoci").args(["init", "--layout", &l]));
    run_ok(Command::new("umoci").args(["new", "--image", &format!("{l}:1")]));
    run_ok(Command::new("umoci").args(["unpack", "--image", &format!("{l}:1")]).arg(&bundle));
    let root = bundle.join("rootfs");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
    for applet in ["sh", "cat", "id", "echo", "ls", "sleep", "touch", "stat", "grep", "tr", "httpd", "wget", "kill", "ps", "head"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
    }
    std::fs::write(root.join("etc/os-release"), format!("PRETTY_NAME=\"{pretty}\"\n")).unwrap();
    for (f, at) in host_files {
        let to = root.join(at.strip_prefix("/").unwrap_or(at));
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(f, &to).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
    }
    run_ok(Command::new("umoci").args(["repack", "--image", &format!("{l}:1")]).arg(&bundle));
    run_ok(Command::new("umoci").args(["config", "--image", &format!("{l}:1"), "--config.env", "PATH=/bin", "--config.workingdir", "/"]));
    let _ = std::fs::remove_dir_all(&bundle);
    layout
}

/// A test CA and a certificate for 127.0.0.1 signed by it (openssl): `DIR/ca.pem`,
/// `DIR/server.pem`, `DIR/server.key`, and `DIR/certs.d/ca.crt` (skopeo's CA directory).
pub fn test_ca(dir: &std::path::Path) -> PathBuf {
    std::fs::create_dir_all(dir.join("certs.d")).unwrap();
    let p = |f: &str| dir.join(f).display().to_string();
    run_ok(Command::new("openssl").args([
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=tandem test CA",
        "-keyout",
        &p("ca.key"),
        "-out",
        &p("ca.pem"),
    ]));
    run_ok(Command::new("openssl").args([
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        &p("server.key"),
        "-out",
        &p("server.csr"),
    ]));
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    run_ok(Command::new("openssl").args([
        "x509",
        "-req",
        "-in",
        &p("server.csr"),
        "-CA",
        &p("ca.pem"),
        "-CAkey",
        &p("ca.key"),
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        &p("ext.cnf"),
        "-out",
        &p("server.pem"),
    ]));
    std::fs::copy(dir.join("ca.pem"), dir.join("certs.d/ca.crt")).unwrap();
    dir.join("ca.pem")
}

/// Debian's `docker-registry` on 127.0.0.1, started by hand; its log (every request) in
/// `DIR/registry.log`. With `tls`, HTTPS with `DIR/server.pem` (see [`test_ca`]); with `users`,
/// htpasswd logins (`user:password`). Killed on drop.
pub struct Registry {
    pub child: Child,
    pub port: u16,
    pub dir: PathBuf,
    pub tls: bool,
}

impl Registry {
    pub fn start(dir: &std::path::Path, tls: bool, users: &[(&str, &str)]) -> Registry {
        std::fs::create_dir_all(dir.join("storage")).unwrap();
        let port = free_port();
        let mut cfg = format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
            dir.join("storage").display()
        );
        if tls {
            cfg +=
                &format!("  tls:\n    certificate: {}\n    key: {}\n", dir.join("server.pem").display(), dir.join("server.key").display());
        }
        if !users.is_empty() {
            let mut lines = String::new();
            for (u, p) in users {
                lines += &run_ok(Command::new("htpasswd").args(["-Bbn", u, p]));
            }
            std::fs::write(dir.join("htpasswd"), lines.replace("\n\n", "\n")).unwrap();
            cfg += &format!("auth:\n  htpasswd:\n    realm: tandem-test\n    path: {}\n", dir.join("htpasswd").display());
        }
        std::fs::write(dir.join("config.yml"), cfg).unwrap();
        let log = std::fs::File::create(dir.join("registry.log")).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "docker-registry did not start: {}",
                std::fs::read_to_string(dir.join("registry.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Registry { child, port, dir: dir.to_path_buf(), tls }
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Pushes `layout:1` as `REPO:1` (skopeo), with `creds` (`user:password`) if given.
    pub fn push(&self, layout: &std::path::Path, repo: &str, creds: Option<&str>) {
        let mut c = Command::new("skopeo");
        c.arg("copy");
        if self.tls {
            c.arg("--dest-cert-dir").arg(self.dir.join("certs.d"));
        } else {
            c.arg("--dest-tls-verify=false");
        }
        if let Some(cr) = creds {
            c.args(["--dest-creds", cr]);
        }
        c.arg(format!("oci:{}:1", layout.display())).arg(format!("docker://{}/{repo}:1", self.host()));
        run_ok(&mut c);
    }

    /// How many times each path was asked for with GET so far (from the registry's log).
    pub fn gets(&self) -> HashMap<String, usize> {
        let log = std::fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default();
        let mut m = HashMap::new();
        // The access log's lines: `... "GET PATH HTTP/1.1" STATUS SIZE ...`; answered ones only
        // (not a 401 that asks for credentials).
        for l in log.lines() {
            let Some(rest) = l.split("\"GET ").nth(1) else { continue };
            let (path, status) = (rest.split(' ').next(), rest.split("\" ").nth(1).and_then(|r| r.split(' ').next()));
            if let (Some(path), Some("200" | "307")) = (path, status) {
                *m.entry(path.to_string()).or_insert(0) += 1;
            }
        }
        m
    }

    /// GETs of blobs (layers and configs) of `repo`.
    pub fn blob_gets(&self, repo: &str) -> usize {
        self.gets().iter().filter(|(p, _)| p.starts_with(&format!("/v2/{repo}/blobs/"))).map(|(_, n)| n).sum()
    }

    /// GETs of manifests of `repo`.
    pub fn manifest_gets(&self, repo: &str) -> usize {
        self.gets().iter().filter(|(p, _)| p.starts_with(&format!("/v2/{repo}/manifests/"))).map(|(_, n)| n).sum()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Network namespaces ("machines" 1..=count) joined to the host by veth links (`10.B.I.1` the host's end,
/// `10.B.I.2` the node's, a default route through the host), as `tandem bench chaos` makes
/// them, with the host forwarding between them; all undone on drop.
pub struct Netns {
    count: u32,
    tag: String,
    b: u32,
    forward_was: String,
}

impl Netns {
    pub fn new(count: u32) -> Netns {
        let pid = std::process::id();
        let n = Netns {
            count,
            tag: format!("px{}", pid % 100_000),
            b: 200 + pid % 50,
            forward_was: std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap_or_default().trim().to_string(),
        };
        let sh = |args: &[&str]| {
            let o = Command::new(args[0]).args(&args[1..]).output().unwrap();
            assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        };
        for i in 1..=count {
            let (ns, host, inner) = (n.ns(i), format!("{}h{i}", n.tag), format!("{}n{i}", n.tag));
            sh(&["ip", "netns", "add", &ns]);
            sh(&["ip", "link", "add", &host, "type", "veth", "peer", "name", &inner]);
            sh(&["ip", "link", "set", &inner, "netns", &ns]);
            sh(&["ip", "addr", "add", &format!("{}/24", n.host_ip(i)), "dev", &host]);
            sh(&["ip", "link", "set", &host, "up"]);
            sh(&["ip", "-n", &ns, "addr", "add", &format!("{}/24", n.node_ip(i)), "dev", &inner]);
            sh(&["ip", "-n", &ns, "link", "set", &inner, "up"]);
            sh(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
            sh(&["ip", "-n", &ns, "route", "add", "default", "via", &n.host_ip(i)]);
        }
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "1").unwrap();
        n
    }

    pub fn ns(&self, i: u32) -> String {
        format!("{}-{i}", self.tag)
    }

    pub fn host_ip(&self, i: u32) -> String {
        format!("10.{}.{i}.1", self.b)
    }

    pub fn node_ip(&self, i: u32) -> String {
        format!("10.{}.{i}.2", self.b)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for i in 1..=self.count {
            let _ = Command::new("sh").args(["-c", &format!("ip netns pids {} | xargs -r kill -9", self.ns(i))]).status();
            let _ = Command::new("ip").args(["netns", "del", &self.ns(i)]).stderr(Stdio::null()).status();
        }
        if !self.forward_was.is_empty() {
            let _ = std::fs::write("/proc/sys/net/ipv4/ip_forward", &self.forward_was);
        }
    }
}

/// A unit's `KEY=` values, in order (`[Service]` and the others alike).
pub fn unit_values(unit: &str, key: &str) -> Vec<String> {
    unit.lines().filter_map(|l| l.strip_prefix(&format!("{key}="))).map(str::to_string).collect()
}

/// `Environment=` assignments: `A=b` or `"A=b c"`.
pub fn unit_environment(unit: &str) -> HashMap<String, String> {
    unit_values(unit, "Environment")
        .iter()
        .map(|v| {
            let v = v.trim_matches('"');
            let (k, v) = v.split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// `ExecStart=` expanded as systemd does: `${VAR}` is one word, `$VAR` splits on whitespace
/// (an unset one expands to nothing).
pub fn unit_exec_start(unit: &str, env: &HashMap<String, String>) -> Vec<String> {
    let line = unit_values(unit, "ExecStart").pop().expect("an ExecStart line");
    let mut argv = Vec::new();
    for word in line.split_whitespace() {
        if let Some(name) = word.strip_prefix('$').filter(|w| !w.starts_with('{')) {
            argv.extend(env.get(name).map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>()).unwrap_or_default());
            continue;
        }
        let mut w = word.to_string();
        while let Some(at) = w.find("${") {
            let end = w[at..].find('}').unwrap() + at;
            let v = env.get(&w[at + 2..end]).cloned().unwrap_or_default();
            w.replace_range(at..=end, &v);
        }
        argv.push(w);
    }
    argv
}

/// An environment file's `KEY=value` lines (as systemd's `EnvironmentFile=` reads them: comments
/// and blank lines skipped, one pair of quotes around a value removed).
pub fn env_file(text: &str) -> HashMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().trim_matches('"').to_string()))
        .collect()
}
