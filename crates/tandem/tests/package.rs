//! The Debian package and the multi-machine guide (README, "Many machines: the Debian
//! package"), from outside. The package is built from the test build (`scripts/deb.sh --debug`:
//! cargo-deb's `--no-build`), checked with lintian, installed with `dpkg -i` (its maintainer
//! scripts run: the system user, the directories and their modes), and then the guide's steps
//! run on five "machines" made of network namespaces with their own addresses: the controller,
//! two nodes, the proxy's host and a login host. Each daemon is started as its installed unit
//! says (its `ExecStart=` with the unit's `Environment=` and the machine's `/etc/default/tandem`,
//! as the unit's user), since CI runs no systemd; each machine has its own `/etc/tandem`,
//! `/etc/default` (`ip netns exec` binds `/etc/netns/NAME/*` over them) and agent state. Over
//! TLS with join tokens: a user on the login host runs a 2-node MPI job and a service reached
//! through the proxy; the administrator drains and removes a node. Then `apt-get remove`
//! keeps the state, a reinstall finds it, and `purge` removes it.
//!
//! One test: it installs a package on this host (and removes it). It needs root, dpkg,
//! lintian, cargo-deb, iproute2, setpriv, Open MPI with OpenPMIx and the test user
//! `tandem-alice` (.ci/run installs them); under CI=true it fails without them.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const LIBPMIX: &str = "/usr/lib/x86_64-linux-gnu/libpmix.so.2";
const USER: &str = "tandem-alice";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn cargo_deb() -> bool {
    have("cargo-deb") || repo().join("target/tools/bin/cargo-deb").exists()
}

fn missing() -> Option<String> {
    if !is_root() {
        return Some("not root".into());
    }
    for tool in ["dpkg", "apt-get", "lintian", "ip", "setpriv", "mpicc.openmpi", "man", "python3", "curl", "systemd-socket-activate"] {
        if !have(tool) {
            return Some(format!("{tool} is not installed"));
        }
    }
    if !cargo_deb() {
        return Some("cargo-deb is not installed (cargo install cargo-deb --locked --version 3.8.0 --root target/tools)".into());
    }
    if !Path::new(LIBPMIX).exists() {
        return Some("libpmix2 is not installed".into());
    }
    if !std::fs::read_to_string("/etc/passwd").unwrap_or_default().contains(&format!("{USER}:")) {
        return Some(format!("the test user {USER} does not exist (.ci/run makes it)"));
    }
    None
}

fn ok(o: &Output, what: &str) -> String {
    assert!(o.status.success(), "{what}: {}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A command on machine `ns` (a login shell, so `/etc/profile.d/tandem.sh` sets PATH,
/// `TANDEM_SERVER` and `TANDEM_CA` as on a real host), as `user` (root when `None`).
fn on(ns: &str, user: Option<&str>, script: &str) -> Output {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]);
    if let Some(u) = user {
        c.args(["setpriv", "--reuid", u, "--regid", u, "--init-groups", "--reset-env"]);
    }
    // A clean environment, as a login gives: nothing of this test's.
    c.args(["env", "-i", "HOME=/tmp", "TERM=dumb", "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "bash", "--login", "-c", script]);
    c.output().unwrap()
}

/// The installed unit `name`'s command line for machine `ns`: its `Environment=` defaults, then
/// the machine's `/etc/default/tandem` (`EnvironmentFile=`), expanded as systemd expands them.
fn unit_command(name: &str, etc: &Path, extra: &[(&str, String)]) -> Vec<String> {
    let unit = std::fs::read_to_string(Path::new("/lib/systemd/system").join(name)).unwrap();
    assert_eq!(unit_values(&unit, "EnvironmentFile"), ["-/etc/default/tandem"], "{name}");
    let mut env = unit_environment(&unit);
    env.extend(env_file(&std::fs::read_to_string(etc.join("default/tandem")).unwrap_or_default()));
    for (k, v) in extra {
        env.insert(k.to_string(), v.clone());
    }
    unit_exec_start(&unit, &env)
}

/// A daemon of machine `ns`, started as its unit would: as `user`, with `umask`, a host name
/// of its own (`hostname`), and `binds` (host directory over path) in its mount namespace.
struct Daemon {
    child: std::process::Child,
    log: PathBuf,
}

impl Daemon {
    #[allow(clippy::too_many_arguments)]
    fn start(
        ns: &str,
        hostname: &str,
        user: Option<&str>,
        umask: &str,
        binds: &[(&Path, &str)],
        argv: &[String],
        env: &[(&str, String)],
        log: PathBuf,
    ) -> Daemon {
        let mut prep = format!("hostname {hostname} && umask {umask}");
        for (from, to) in binds {
            prep.push_str(&format!(" && mount --bind {} {to}", from.display()));
        }
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, "unshare", "--uts", "sh", "-c"]);
        match user {
            // A uid of no user (DynamicUser=) has no groups to take.
            Some(u) if u.parse::<u32>().is_ok() => c.arg(format!("{prep} && exec setpriv --reuid {u} --regid {u} --clear-groups \"$@\"")),
            Some(u) => c.arg(format!("{prep} && exec setpriv --reuid {u} --regid {u} --init-groups \"$@\"")),
            None => c.arg(format!("{prep} && exec \"$@\"")),
        };
        c.arg("sh").args(argv).env_clear().env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        for (k, v) in env {
            c.env(k, v);
        }
        let f = std::fs::File::create(&log).unwrap();
        c.stdin(Stdio::null()).stdout(f.try_clone().unwrap()).stderr(f);
        Daemon { child: c.spawn().unwrap(), log }
    }

    fn stop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).stderr(Stdio::null()).status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline && self.child.try_wait().ok().flatten().is_none() {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Polls `f` until it returns true, at most `secs`; the failure says `what` and shows `logs`.
fn until(secs: u64, what: &str, logs: &[&Daemon], mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        if Instant::now() > deadline {
            let l: Vec<String> = logs.iter().map(|d| format!("--- {}\n{}", d.log.display(), d.log())).collect();
            panic!("{what}\n{}", l.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The package's state on this host: removed whatever the test's end.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").args(["--purge", "tandem"]).stdout(Stdio::null()).stderr(Stdio::null()).status();
    }
}

fn mode(path: &str) -> String {
    let o = Command::new("stat").args(["-c", "%U:%G %a", path]).output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn the_debian_package_installs_runs_the_multi_machine_guide_in_namespaces_and_removes_cleanly() {
    if let Some(why) = missing() {
        assert!(std::env::var_os("CI").is_none(), "the package test cannot run under CI=true: {why}");
        eprintln!("skipped: {why}");
        return;
    }
    // A tandem package of the host's own is never touched (purged, its state removed).
    if Command::new("dpkg").args(["-s", "tandem"]).output().unwrap().status.success() {
        assert!(std::env::var_os("CI").is_none(), "a tandem package is installed on the CI host before the package test");
        eprintln!("skipped: a tandem package is installed on this host; the test would purge it");
        return;
    }
    let dir = free_dir("package");
    // The package, from the binaries this test run built.
    let built = Command::new("bash")
        .arg(repo().join("scripts/deb.sh"))
        .arg("--debug")
        .env("PATH", format!("{}:{}", repo().join("target/tools/bin").display(), std::env::var("PATH").unwrap_or_default()))
        .current_dir(repo())
        .output()
        .unwrap();
    let deb = ok(&built, "scripts/deb.sh --debug").lines().last().expect("the .deb's path").to_string();
    let deb = repo().join(deb);
    assert!(deb.exists(), "{}", deb.display());
    // lintian: nothing left but what deploy/debian/lintian-overrides justifies.
    let l = Command::new("lintian").args(["--pedantic", "--allow-root"]).arg(&deb).output().unwrap();
    let findings: Vec<String> = String::from_utf8_lossy(&l.stdout)
        .lines()
        .filter(|l| l.len() > 2 && &l[1..2] == ":" && "EWIPX".contains(&l[..1]))
        .map(str::to_string)
        .collect();
    assert!(findings.is_empty(), "lintian: {findings:#?}\n{}", String::from_utf8_lossy(&l.stderr));

    // dpkg -i: the maintainer scripts make the controller's user and the directories.
    let _installed = Installed;
    ok(&Command::new("dpkg").arg("-i").arg(&deb).output().unwrap(), "dpkg -i");
    let pw = ok(&Command::new("getent").args(["passwd", "tandem"]).output().unwrap(), "getent passwd tandem");
    let f: Vec<&str> = pw.trim().split(':').collect();
    assert_eq!((f[5], f[6]), ("/var/lib/tandem", "/usr/sbin/nologin"), "{pw}");
    assert!(f[2].parse::<u32>().unwrap() < 1000, "a system user: {pw}");
    assert_eq!(mode("/var/lib/tandem"), "tandem:tandem 711");
    assert_eq!(mode("/var/lib/tandem-agent"), "root:root 711");
    assert_eq!(mode("/var/log/tandem"), "tandem:tandem 750");
    assert_eq!(mode("/etc/tandem/tandem.toml"), "root:root 644");
    let listed = ok(&Command::new("dpkg").args(["-L", "tandem"]).output().unwrap(), "dpkg -L");
    for want in [
        "/usr/bin/tandem",
        "/usr/bin/tandem-slurm",
        "/lib/systemd/system/tandem-server.service",
        "/lib/systemd/system/tandem-proxy.socket",
        "/usr/lib/tandem/bin/sbatch",
        "/usr/share/man/man1/tandem-server.1.gz",
        "/usr/lib/tandem/share/man/man1/sbatch.1.gz",
        "/usr/share/bash-completion/completions/tandem",
    ] {
        assert!(listed.lines().any(|l| l == want), "{want} is not in the package:\n{listed}");
    }
    let conffiles = std::fs::read_to_string("/var/lib/dpkg/info/tandem.conffiles").unwrap();
    for want in ["/etc/tandem/tandem.toml", "/etc/default/tandem", "/etc/profile.d/tandem.sh"] {
        assert!(conffiles.lines().any(|l| l == want), "{want} is no conffile: {conffiles}");
    }
    // Every manual page renders without a warning; a login shell finds Tandem's sbatch and its
    // page first; bash completes tandem's subcommands.
    let pages: Vec<&str> = listed.lines().filter(|l| l.ends_with(".1.gz")).collect();
    assert!(pages.len() > 30, "{pages:?}");
    for p in &pages {
        let o = Command::new("man").args(["--warnings", "-l", p]).env("MANWIDTH", "80").output().unwrap();
        assert!(o.status.success() && o.stderr.is_empty() && o.stdout.len() > 200, "man -l {p}: {}", String::from_utf8_lossy(&o.stderr));
    }
    let o = Command::new("bash")
        .args(["--login", "-c", "command -v sbatch; man -w sbatch; sbatch --version"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", "/tmp")
        .output()
        .unwrap();
    let out = ok(&o, "a login shell");
    assert!(out.starts_with("/usr/lib/tandem/bin/sbatch\n/usr/lib/tandem/share/man/man1/sbatch.1.gz\n"), "{out}");
    let o = Command::new("bash")
        .args([
            "-c",
            "source /usr/share/bash-completion/completions/tandem && COMP_WORDS=(tandem se) COMP_CWORD=1 COMP_LINE='tandem se' COMP_POINT=9 && _tandem tandem se tandem && printf '%s\\n' \"${COMPREPLY[@]}\"",
        ])
        .output()
        .unwrap();
    let words = ok(&o, "bash completion");
    assert!(words.lines().any(|w| w == "server") && words.lines().any(|w| w == "service"), "{words}");

    // The machines.
    let net = Netns::new(5);
    let (ctl, node1, node2, edge, login) = (net.ns(1), net.ns(2), net.ns(3), net.ns(4), net.ns(5));
    let ctl_ip = net.node_ip(1);
    let etc = |ns: &str| PathBuf::from("/etc/netns").join(ns);
    struct Etc(Vec<PathBuf>);
    impl Drop for Etc {
        fn drop(&mut self) {
            for d in &self.0 {
                let _ = std::fs::remove_dir_all(d);
            }
        }
    }
    let _etc = Etc([&ctl, &node1, &node2, &edge, &login].iter().map(|n| etc(n)).collect());
    for n in [&ctl, &node1, &node2, &edge, &login] {
        std::fs::create_dir_all(etc(n).join("default")).unwrap();
        if n != &ctl {
            // The controller's host keeps the package's /etc/tandem; the others get their own.
            std::fs::create_dir_all(etc(n).join("tandem")).unwrap();
        }
    }
    let write = |path: PathBuf, text: &str, mode: &str| {
        std::fs::write(&path, text).unwrap();
        Command::new("chmod").arg(mode).arg(&path).status().unwrap();
    };

    // Guide, the controller's host: the address agents dial in its certificate, then the unit.
    write(etc(&ctl).join("default/tandem"), &format!("TANDEM_SERVER_OPTS=--tls-san {ctl_ip}\n"), "644");
    let argv = unit_command("tandem-server.service", &etc(&ctl), &[]);
    assert_eq!(argv[..2], ["/usr/bin/tandem".to_string(), "server".to_string()], "{argv:?}");
    let server = Daemon::start(&ctl, "controller", Some("tandem"), "077", &[], &argv, &[], dir.join("controller.log"));
    until(60, "the controller did not start", &[&server], || Path::new("/var/lib/tandem/tandem.sock").exists());
    until(30, "the controller does not answer on its host", &[&server], || on(&ctl, None, "sinfo -h").status.success());
    assert_eq!(mode("/var/lib/tandem/state.db").split(' ').next(), Some("tandem:tandem"));
    // Join tokens, one per node (root on the controller's host; its Unix socket, by the
    // profile's TANDEM_SERVER), and the CA for every other host.
    let tokens = ok(&on(&ctl, None, "tandem token --join --count 2"), "tandem token --join");
    let tokens: Vec<&str> = tokens.lines().collect();
    assert_eq!(tokens.len(), 2, "{tokens:?}");
    let ca = std::fs::read_to_string("/var/lib/tandem/ca.pem").unwrap();
    let server_url = format!("https://{ctl_ip}:7200");

    // Guide, each node: the CA, its token, where the controller is and the node's address.
    let mut agents = Vec::new();
    for (i, ns) in [&node1, &node2].into_iter().enumerate() {
        let name = format!("node{}", i + 1);
        let e = etc(ns);
        write(e.join("tandem/ca.pem"), &ca, "644");
        write(e.join("tandem/join-token"), &format!("{}\n", tokens[i]), "600");
        write(
            e.join("default/tandem"),
            &format!(
                "TANDEM_SERVER={server_url}\nTANDEM_AGENT_OPTS=--join-token-file /etc/tandem/join-token --addr {} --cpus 2 --memory 2G\n",
                net.node_ip(i as u32 + 2)
            ),
            "644",
        );
        let state = dir.join(format!("{name}-state"));
        std::fs::create_dir_all(&state).unwrap();
        Command::new("chmod").arg("711").arg(&state).status().unwrap();
        let argv = unit_command("tandem-agent.service", &e, &[]);
        assert!(argv.contains(&"/var/lib/tandem-agent".to_string()), "{argv:?}");
        agents.push(Daemon::start(
            ns,
            &name,
            None,
            "022",
            &[(&state, "/var/lib/tandem-agent")],
            &argv,
            &[],
            dir.join(format!("{name}.log")),
        ));
    }
    let idle = || String::from_utf8_lossy(&on(&ctl, None, "sinfo -h -N -o '%N %t'").stdout).into_owned();
    until(60, "the nodes did not register", &[&server, &agents[0], &agents[1]], || {
        let s = idle();
        s.contains("node1 idle") && s.contains("node2 idle")
    });

    // Guide, the proxy's host: its credential and the CA, handed over as LoadCredential= does
    // (a directory of the service's own), the port from the .socket unit.
    let proxy_cred = ok(&on(&ctl, None, "tandem token --proxy edge"), "tandem token --proxy");
    write(etc(&edge).join("tandem/ca.pem"), &ca, "644");
    write(etc(&edge).join("tandem/proxy.credential"), &proxy_cred, "600");
    write(etc(&edge).join("default/tandem"), &format!("TANDEM_SERVER={server_url}\n"), "644");
    let socket = std::fs::read_to_string("/lib/systemd/system/tandem-proxy.socket").unwrap();
    assert_eq!(unit_values(&socket, "ListenStream"), ["0.0.0.0:7280"]);
    let creds = dir.join("proxy-credentials");
    std::fs::create_dir_all(&creds).unwrap();
    // DynamicUser=: a uid of its own, which alone reads the copies.
    let dynamic = "61234";
    for f in ["ca.pem", "proxy.credential"] {
        std::fs::copy(etc(&edge).join("tandem").join(f), creds.join(f)).unwrap();
        Command::new("chown").arg(format!("{dynamic}:{dynamic}")).arg(creds.join(f)).status().unwrap();
        Command::new("chmod").arg("400").arg(creds.join(f)).status().unwrap();
    }
    Command::new("chmod").arg("755").arg(&creds).status().unwrap();
    let argv = unit_command("tandem-proxy.service", &etc(&edge), &[("CREDENTIALS_DIRECTORY", creds.display().to_string())]);
    let mut activate = vec!["systemd-socket-activate".to_string(), "-l".into(), "0.0.0.0:7280".into()];
    activate.extend(argv);
    let proxy = Daemon::start(&edge, "edge", Some(dynamic), "077", &[], &activate, &[], dir.join("proxy.log"));

    // Guide, a user on the login host: a token from the controller's host, then the commands
    // over TLS (the profile points TANDEM_CA at /etc/tandem/ca.pem).
    write(etc(&login).join("tandem/ca.pem"), &ca, "644");
    let work = dir.join("alice");
    std::fs::create_dir_all(work.join("site")).unwrap();
    std::fs::write(work.join("site/hello.txt"), "served through the proxy\n").unwrap();
    let src = repo().join("tests/clients/hello_local.c");
    ok(&Command::new("mpicc.openmpi").arg("-o").arg(work.join("hello_local")).arg(&src).output().unwrap(), "mpicc.openmpi");
    Command::new("chown").args(["-R", &format!("{USER}:{USER}")]).arg(&work).status().unwrap();
    Command::new("chmod").arg("755").arg(&dir).status().unwrap();
    let token = ok(&on(&ctl, Some(USER), "tandem token"), "tandem token");
    let token = token.trim().strip_prefix("export ").expect("export TANDEM_TOKEN=...").to_string();
    let as_alice = |script: &str| {
        on(&login, Some(USER), &format!("export TANDEM_SERVER={server_url} {token} OMPI_MCA_btl=tcp,self; cd {}; {script}", work.display()))
    };
    let who = ok(&as_alice("echo $TANDEM_CA; sinfo -h -N -o '%N %t'"), "sinfo from the login host");
    assert!(who.starts_with("/etc/tandem/ca.pem\n") && who.contains("node1 idle") && who.contains("node2 idle"), "{who}");
    // A 2-node MPI job: srun in the batch script reaches the controller from node1 as the
    // submitter's environment says, and the ranks reach each other across the machines.
    let o = as_alice("sbatch -W -N2 --ntasks-per-node=2 -o mpi.out --wrap 'srun --mpi=pmix ./hello_local; echo srun=$?'");
    let out = std::fs::read_to_string(work.join("mpi.out")).unwrap_or_default();
    let logs: Vec<String> = agents.iter().map(Daemon::log).collect();
    ok(&o, &format!("sbatch -W\n{out}\n{}", logs.join("\n")));
    let mut ranks: Vec<&str> = out.lines().filter(|l| l.starts_with("rank ")).collect();
    ranks.sort();
    assert_eq!(
        ranks,
        [
            "rank 0 of 4 sum 6 local 2 node node1",
            "rank 1 of 4 sum 6 local 2 node node1",
            "rank 2 of 4 sum 6 local 2 node node2",
            "rank 3 of 4 sum 6 local 2 node node2"
        ],
        "{out}"
    );
    assert!(out.contains("srun=0"), "{out}");
    // A service, reached through the proxy from the login host.
    let spec = format!(
        "name = \"site\"\ncommand = [\"python3\", \"-m\", \"http.server\", \"--bind\", \"0.0.0.0\", \"--directory\", \"{}\", \"$PORT\"]\nreplicas = 2\n[resources]\ncpus = 1\nmemory = \"256MiB\"\n[readiness]\nhttp = \"/\"\n",
        work.join("site").display()
    );
    std::fs::write(work.join("site.toml"), spec).unwrap();
    ok(&as_alice("tandem service apply -f site.toml"), "tandem service apply");
    let url = format!("http://{}:7280/s/site/hello.txt", net.node_ip(4));
    until(90, "the service is not served through the proxy", &[&server, &proxy, &agents[0], &agents[1]], || {
        String::from_utf8_lossy(&as_alice(&format!("curl -s --max-time 5 {url}")).stdout) == "served through the proxy\n"
    });
    let shown = ok(&as_alice("tandem service show site"), "tandem service show");
    assert!(shown.contains("node1") && shown.contains("node2"), "spread over both nodes: {shown}");
    ok(&as_alice("tandem service delete site"), "tandem service delete");

    // Guide, removing a node: drain it, stop its agent, delete it (its credential revoked).
    ok(&on(&ctl, None, "scontrol update NodeName=node2 State=DRAIN Reason=retired"), "scontrol update");
    until(60, "node2 did not drain", &[&server], || {
        idle().contains("node2 drain") && on(&ctl, None, "squeue -h -a -w node2").stdout.is_empty()
    });
    agents[1].stop();
    ok(&on(&ctl, None, "tandem node delete node2"), "tandem node delete");
    let left = idle();
    assert!(!left.contains("node2") && left.contains("node1"), "{left}");
    // Its credential no longer admits it.
    let mut again = Daemon::start(
        &node2,
        "node2",
        None,
        "022",
        &[(&dir.join("node2-state"), "/var/lib/tandem-agent")],
        &unit_command("tandem-agent.service", &etc(&node2), &[]),
        &[],
        dir.join("node2-again.log"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while again.child.try_wait().ok().flatten().is_none() {
        assert!(Instant::now() < deadline, "a deleted node's agent was not refused:\n{}", again.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    again.stop();
    assert!(!idle().contains("node2"));
    let jobs_before = ok(&on(&ctl, None, "sacct -X -n -a -o JobID,State"), "sacct");
    assert!(jobs_before.contains("COMPLETED"), "{jobs_before}");
    drop(proxy);
    drop(agents);
    drop(server);

    // apt-get remove keeps the state and the configuration; the binaries go.
    ok(&Command::new("apt-get").args(["remove", "-y", "-qq", "tandem"]).output().unwrap(), "apt-get remove");
    assert!(!Path::new("/usr/bin/tandem").exists());
    for kept in ["/var/lib/tandem/state.db", "/var/lib/tandem/ca.pem", "/etc/tandem/tandem.toml"] {
        assert!(Path::new(kept).exists(), "{kept} went with apt-get remove");
    }
    // A reinstall finds it: the controller starts on the same database.
    ok(&Command::new("dpkg").arg("-i").arg(&deb).output().unwrap(), "dpkg -i again");
    assert_eq!(mode("/var/lib/tandem"), "tandem:tandem 711");
    let argv = unit_command("tandem-server.service", &etc(&ctl), &[]);
    let server = Daemon::start(&ctl, "controller", Some("tandem"), "077", &[], &argv, &[], dir.join("controller-again.log"));
    until(60, "the reinstalled controller did not answer", &[&server], || on(&ctl, None, "sinfo -h").status.success());
    let jobs_after = ok(&on(&ctl, None, "sacct -X -n -a -o JobID,State"), "sacct after the reinstall");
    assert_eq!(jobs_after, jobs_before);
    drop(server);
    // purge removes the state; the system user stays (Debian's custom).
    ok(&Command::new("apt-get").args(["purge", "-y", "-qq", "tandem"]).output().unwrap(), "apt-get purge");
    for gone in
        ["/var/lib/tandem", "/var/lib/tandem-agent", "/var/log/tandem", "/etc/tandem", "/etc/profile.d/tandem.sh", "/usr/bin/tandem"]
    {
        assert!(!Path::new(gone).exists(), "{gone} stayed after purge");
    }
    assert!(Command::new("getent").args(["passwd", "tandem"]).output().unwrap().status.success());
    drop(net);
    let _ = std::fs::remove_dir_all(&dir);
}
