//! The systemd units of `deploy/systemd`, run as systemd would run them, without systemd (CI
//! has none running): each daemon started with its unit's own `ExecStart=` line (the unit's
//! `Environment=` defaults, then an environment file's values, expanded as systemd expands
//! `${VAR}` and `$VAR`; paths moved under a scratch directory) and `NOTIFY_SOCKET` set, and
//! `READY=1` is seen once, when the daemon serves: the controller answers on both listeners, the
//! agent is registered, the proxy answers. The proxy is started by `systemd-socket-activate`
//! with the `.socket` unit's address: the request that wakes it waits in the socket's queue and
//! is answered. `systemd-analyze verify` prints nothing for any unit.

mod common;

use common::*;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

fn unit(name: &str) -> String {
    std::fs::read_to_string(deploy().join("systemd").join(name)).unwrap()
}

/// The host's paths the units name, moved under `root`, and the test's binary for
/// `/usr/bin/tandem`.
fn relocate(argv: Vec<String>, root: &Path) -> Vec<String> {
    argv.into_iter()
        .map(|a| {
            if a == "/usr/bin/tandem" {
                return bin().to_string();
            }
            for p in ["/var/lib/", "/etc/tandem/"] {
                if let Some(rest) = a.strip_prefix(p) {
                    return root.join(&p[1..]).join(rest).display().to_string();
                }
            }
            a
        })
        .collect()
}

/// A daemon started as its unit says, with its notify socket.
struct Daemon {
    child: Child,
    notify: UnixDatagram,
    name: &'static str,
    log: PathBuf,
}

impl Daemon {
    fn start(name: &'static str, root: &Path, argv: Vec<String>, extra_env: &[(&str, String)]) -> Daemon {
        let sock = root.join(format!("{name}.notify"));
        let _ = std::fs::remove_file(&sock);
        let notify = UnixDatagram::bind(&sock).unwrap();
        // A daemon started as another user may send to it too.
        Command::new("chmod").arg("666").arg(&sock).status().unwrap();
        notify.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let log = root.join(format!("{name}.log"));
        let f = std::fs::File::create(&log).unwrap();
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]).env("NOTIFY_SOCKET", &sock).stdout(f.try_clone().unwrap()).stderr(f).stdin(Stdio::null());
        for (k, v) in extra_env {
            c.env(k, v);
        }
        Daemon { child: c.spawn().unwrap_or_else(|e| panic!("{argv:?}: {e}")), notify, name, log }
    }

    /// Waits for `READY=1`; nothing else is sent before it.
    fn ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut buf = [0u8; 4096];
        loop {
            if let Ok(n) = self.notify.recv(&mut buf) {
                let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                assert_eq!(msg.trim(), "READY=1", "{}: {msg:?}", self.name);
                return;
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("{} exited ({st}) before READY=1:\n{}", self.name, std::fs::read_to_string(&self.log).unwrap_or_default());
            }
            assert!(
                Instant::now() < deadline,
                "no READY=1 from {}:\n{}",
                self.name,
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }

    /// No second notification came.
    fn no_more(&self) {
        let mut buf = [0u8; 4096];
        assert!(self.notify.recv(&mut buf).is_err(), "{} notified again: {:?}", self.name, String::from_utf8_lossy(&buf));
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && self.child.try_wait().ok().flatten().is_none() {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn curl_code(args: &[&str]) -> String {
    let o = Command::new("curl").args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "20"]).args(args).output().unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn systemd_analyze_verify_says_nothing_of_any_unit() {
    if Command::new("systemd-analyze").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "systemd-analyze is missing (apt-get install systemd)");
        eprintln!("skipped: no systemd-analyze");
        return;
    }
    let dir = free_dir("units-verify");
    std::fs::create_dir_all(&dir).unwrap();
    let names: Vec<String> =
        std::fs::read_dir(deploy().join("systemd")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.len() >= 4, "{names:?}");
    // The binary where the package puts it: here, the test's.
    for n in &names {
        std::fs::write(dir.join(n), unit(n).replace("/usr/bin/tandem", bin())).unwrap();
    }
    for n in &names {
        let o = Command::new("systemd-analyze").arg("verify").arg(dir.join(n)).output().unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success() && said.trim().is_empty(), "systemd-analyze verify {n}:\n{said}");
    }
    // Stopping the agent's unit never stops its jobs; the agent manages its cgroups; nothing
    // that would bind its jobs too (they run in its cgroup) is set.
    let agent = unit("tandem-agent.service");
    assert_eq!(unit_values(&agent, "KillMode"), ["process"]);
    assert_eq!(unit_values(&agent, "Delegate"), ["yes"]);
    for k in [
        "ProtectClock",
        "DeviceAllow",
        "SystemCallArchitectures",
        "SystemCallFilter",
        "RestrictRealtime",
        "OOMScoreAdjust",
        "ProtectKernelModules",
        "RestrictAddressFamilies",
        "NoNewPrivileges",
        "PrivateDevices",
    ] {
        assert!(unit_values(&agent, k).is_empty(), "{k}= in the agent's unit would bind its jobs");
    }
    for n in ["tandem-server.service", "tandem-agent.service", "tandem-proxy.service"] {
        assert_eq!(unit_values(&unit(n), "Type"), ["notify"], "{n}");
        assert_eq!(unit_values(&unit(n), "Restart"), ["on-failure"], "{n}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn each_daemon_started_by_its_units_command_line_is_ready_once_it_serves() {
    let root = free_dir("units");
    std::fs::create_dir_all(root.join("etc/tandem")).unwrap();
    std::fs::create_dir_all(root.join("var/lib")).unwrap();
    // Directories the units' StateDirectory= would make, with their modes.
    for d in ["var/lib/tandem", "var/lib/tandem-agent"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
        Command::new("chmod").arg("711").arg(root.join(d)).status().unwrap();
    }
    std::fs::copy(deploy().join("tandem.toml"), root.join("etc/tandem/tandem.toml")).unwrap();
    // The controller: the unit's defaults, and the environment file's TANDEM_LISTEN.
    let server_unit = unit("tandem-server.service");
    let mut env = unit_environment(&server_unit);
    assert_eq!(env["TANDEM_LISTEN"], "0.0.0.0:7200", "the unit's default");
    env.insert("TANDEM_LISTEN".into(), "127.0.0.1:0".into());
    env.insert("TANDEM_SERVER_OPTS".into(), "--tls-san localhost --log-format json".into());
    let argv = relocate(unit_exec_start(&server_unit, &env), &root);
    assert_eq!(argv[1], "server");
    let mut server = Daemon::start("server", &root, argv, &[]);
    server.ready();
    // Ready means serving: both listeners answer at once.
    let data = root.join("var/lib/tandem");
    let sock = data.join("tandem.sock");
    let addr = std::fs::read_to_string(data.join("addr")).unwrap().trim().to_string();
    let unix = format!("unix://{}", sock.display());
    assert_eq!(curl_code(&["--unix-socket", &sock.display().to_string(), "http://x/healthz"]), "200");
    assert_eq!(
        curl_code(&[
            "--cacert",
            &data.join("ca.pem").display().to_string(),
            &format!("https://localhost:{}/healthz", addr.rsplit(':').next().unwrap())
        ]),
        "200"
    );
    server.no_more();
    let first = std::fs::read_to_string(&server.log).unwrap();
    assert!(first.lines().next().is_some_and(|l| l.starts_with('{')), "--log-format json from TANDEM_SERVER_OPTS: {first}");

    // An agent: the CA and a join token where the unit reads them.
    std::fs::copy(data.join("ca.pem"), root.join("etc/tandem/ca.pem")).unwrap();
    let tok = |args: &[&str]| {
        let o = Command::new(bin()).arg("token").args(args).env("TANDEM_SERVER", &unix).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    std::fs::write(root.join("etc/tandem/join-token"), tok(&["--join"])).unwrap();
    let agent_unit = unit("tandem-agent.service");
    let mut env = unit_environment(&agent_unit);
    assert_eq!(env["TANDEM_AGENT_OPTS"], "--join-token-file /etc/tandem/join-token", "the unit's default");
    env.insert("TANDEM_SERVER".into(), format!("https://localhost:{}", addr.rsplit(':').next().unwrap()));
    env.insert("TANDEM_AGENT_OPTS".into(), "--join-token-file /etc/tandem/join-token --name unit1 --cpus 2 --memory 2G".into());
    let argv = relocate(unit_exec_start(&agent_unit, &env), &root);
    let registered = || {
        let o = Command::new(bin()).args(["nodes", "-N", "-h", "-o", "%N %t"]).env("TANDEM_SERVER", &unix).output().unwrap();
        String::from_utf8_lossy(&o.stdout).lines().any(|l| l.starts_with("unit1 ") && !l.contains("down") && !l.contains('*'))
    };
    {
        let mut agent = Daemon::start("agent", &root, argv.clone(), &[]);
        agent.ready();
        assert!(registered(), "READY=1 before the agent registered");
        agent.no_more();
    }
    // Its second start (the unit restarted) uses the credential it keeps; the spent token may be
    // gone.
    std::fs::remove_file(root.join("etc/tandem/join-token")).unwrap();
    let mut agent = Daemon::start("agent", &root, argv, &[]);
    agent.ready();
    assert!(registered());
    drop(agent);

    // The proxy, as the .socket unit and the service start it.
    let socket_unit = unit("tandem-proxy.socket");
    assert_eq!(unit_values(&socket_unit, "ListenStream"), ["0.0.0.0:7280"]);
    let creds = root.join("credentials");
    std::fs::create_dir_all(&creds).unwrap();
    std::fs::write(creds.join("proxy.credential"), tok(&["--proxy", "unit-proxy"])).unwrap();
    std::fs::copy(data.join("ca.pem"), creds.join("ca.pem")).unwrap();
    let proxy_unit = unit("tandem-proxy.service");
    assert_eq!(unit_values(&proxy_unit, "LoadCredential"), ["proxy.credential:/etc/tandem/proxy.credential", "ca.pem:/etc/tandem/ca.pem"]);
    let mut env = unit_environment(&proxy_unit);
    env.insert("TANDEM_SERVER".into(), format!("https://localhost:{}", addr.rsplit(':').next().unwrap()));
    env.insert("CREDENTIALS_DIRECTORY".into(), creds.display().to_string());
    let argv = relocate(unit_exec_start(&proxy_unit, &env), &root);
    if Command::new("systemd-socket-activate").arg("--help").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "systemd-socket-activate is missing (apt-get install systemd)");
        eprintln!("skipped: the proxy under systemd-socket-activate (not installed)");
        return;
    }
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut sa = vec!["systemd-socket-activate".to_string(), "-l".into(), listen.clone()];
    // The variables the proxy needs, passed on as systemd would set them.
    for k in ["NOTIFY_SOCKET", "TANDEM_LOG"] {
        sa.push(format!("--setenv={k}"));
    }
    sa.extend(argv);
    let mut proxy = Daemon::start("proxy", &root, sa, &[]);
    // Wait for the socket, then one request: it starts the proxy, waits in the queue, and is
    // answered by the proxy (a 404 naming no such service: Tandem's, not a refusal).
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(&listen).is_err() {
        assert!(Instant::now() < deadline, "systemd-socket-activate did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    let asked = std::thread::spawn({
        let listen = listen.clone();
        move || curl_code(&[&format!("http://{listen}/s/no-such-service/")])
    });
    proxy.ready();
    assert_eq!(asked.join().unwrap(), "404");
    assert_eq!(curl_code(&[&format!("http://{listen}/s/no-such-service/")]), "404");
    proxy.no_more();
    let log = std::fs::read_to_string(&proxy.log).unwrap();
    assert!(log.contains(&format!("tandem proxy listening on {listen}")), "{log}");
    drop(proxy);
    drop(server);
    // The unit runs the controller as a system user of its own (User=tandem): nothing it does
    // needs root. The same command line as an unprivileged user, on a state directory of its
    // own, is ready too.
    if is_root() && Path::new("/etc/passwd").exists() && std::fs::read_to_string("/etc/passwd").unwrap().contains("tandem-alice:") {
        let own = root.join("var/lib/tandem-unprivileged");
        std::fs::create_dir_all(&own).unwrap();
        Command::new("chown").args(["1001:1001"]).arg(&own).status().unwrap();
        Command::new("chmod").args(["711"]).arg(&own).status().unwrap();
        Command::new("chmod").args(["755"]).arg(&root).status().unwrap();
        let mut env = unit_environment(&server_unit);
        env.insert("TANDEM_LISTEN".into(), "127.0.0.1:0".into());
        let argv: Vec<String> = relocate(unit_exec_start(&server_unit, &env), &root)
            .into_iter()
            .map(|a| if a.ends_with("var/lib/tandem") { own.display().to_string() } else { a })
            .collect();
        let mut sa = vec!["setpriv".to_string(), "--reuid=1001".into(), "--regid=1001".into(), "--clear-groups".into()];
        sa.extend(argv);
        let mut unprivileged = Daemon::start("server-unprivileged", &root, sa, &[]);
        unprivileged.ready();
        let sock = own.join("tandem.sock").display().to_string();
        assert_eq!(curl_code(&["--unix-socket", &sock, "http://x/healthz"]), "200");
        // Root is an administrator to it: root makes join tokens.
        let o = Command::new(bin()).args(["token", "--join"]).env("TANDEM_SERVER", format!("unix://{sock}")).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let _ = std::fs::remove_dir_all(&root);
}
