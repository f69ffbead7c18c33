//! The hostile-user suite: a real `tandem up` cluster, run as root, shared by two ordinary Unix
//! users, `tandem-alice` (the victim) and `tandem-mallory` (the attacker), whose commands run
//! through `setpriv` with their own uid, gid and groups. Every attack first runs a positive
//! control (the same thing on the attacker's own file, job or service works), then checks the
//! specific refusal and that the victim's data is unchanged (content, owner, mode). Each test
//! names the line of SECURITY.md it checks.
//!
//! `.ci/run` creates the two users. Under `CI=true` these tests fail, never skip, when they
//! cannot run as designed (not root, no users, no setpriv); elsewhere they skip with a reason.

mod common;

use common::bin;
use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const VICTIM: &str = "tandem-alice";
const ATTACKER: &str = "tandem-mallory";

#[derive(Clone, Debug)]
struct User {
    name: String,
    uid: u32,
    gid: u32,
}

fn id_of(name: &str, flag: &str) -> Option<u32> {
    let o = Command::new("id").args([flag, name]).output().ok()?;
    String::from_utf8_lossy(&o.stdout).trim().parse().ok().filter(|_| o.status.success())
}

/// The two users, or `None` (skip) with the reason printed; under CI a missing piece fails.
fn users() -> Option<(User, User)> {
    let why = if !nix::unistd::geteuid().is_root() {
        Some("these tests run as root (they start a cluster and switch users)".to_string())
    } else if Command::new("setpriv").arg("--version").output().is_err() {
        Some("setpriv (util-linux) is not installed".to_string())
    } else {
        [VICTIM, ATTACKER].iter().find(|n| id_of(n, "-u").is_none()).map(|n| format!("no user {n} (`.ci/run` creates it: useradd {n})"))
    };
    if let Some(why) = why {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "the hostile-user tests cannot run: {why}");
        eprintln!("skipped: {why}");
        return None;
    }
    let u = |n: &str| User { name: n.into(), uid: id_of(n, "-u").unwrap(), gid: id_of(n, "-g").unwrap() };
    Some((u(VICTIM), u(ATTACKER)))
}

/// A fresh directory tree for one test, root's, 0755.
fn root_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-hostile-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// A directory owned by `u` with `mode`.
fn user_dir(path: &Path, u: &User, mode: u32) -> PathBuf {
    std::fs::create_dir_all(path).unwrap();
    nix::unistd::chown(path, Some(nix::unistd::Uid::from_raw(u.uid)), Some(nix::unistd::Gid::from_raw(u.gid))).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    path.to_path_buf()
}

/// A file with `text`, owned by `uid:gid`, with `mode`.
fn owned_file(path: &Path, text: &str, uid: u32, gid: u32, mode: u32) -> PathBuf {
    std::fs::write(path, text).unwrap();
    nix::unistd::chown(path, Some(nix::unistd::Uid::from_raw(uid)), Some(nix::unistd::Gid::from_raw(gid))).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    path.to_path_buf()
}

/// What must not change about a file: content, owner, group, mode.
fn fingerprint(p: &Path) -> (String, u32, u32, u32) {
    let m = std::fs::symlink_metadata(p).unwrap();
    (std::fs::read_to_string(p).unwrap(), m.uid(), m.gid(), m.mode() & 0o7777)
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A `tandem up` cluster (one agent, no proxy) in `DIR/cluster`; stopped on drop.
struct Up {
    child: Child,
    dir: PathBuf,
    sock: String,
    addr: String,
    shims: PathBuf,
}

impl Up {
    fn start(root: &Path, config: Option<&str>) -> Up {
        Up::launch(root, config, &["--no-proxy"])
    }

    /// As `start`, with more `tandem up` arguments (none: with the proxy, on a free port).
    fn launch(root: &Path, config: Option<&str>, more: &[&str]) -> Up {
        Up::launch_with(root, config, more, 1, &[])
    }

    /// As `launch`, with `agents` nodes and these variables in the daemons' environment.
    fn launch_with(root: &Path, config: Option<&str>, more: &[&str], agents: u32, env: &[(&str, &str)]) -> Up {
        Self::launch_under(root, config, more, agents, env, &[])
    }

    /// [`Up::launch_with`], `tandem up` run through `prefix` (a program that ends by running
    /// its arguments).
    fn launch_under(root: &Path, config: Option<&str>, more: &[&str], agents: u32, env: &[(&str, &str)], prefix: &[&str]) -> Up {
        let dir = root.join("cluster");
        let shims = root.join("bin");
        std::fs::create_dir_all(&shims).unwrap();
        let st = Command::new(bin()).arg("shims").arg(&shims).stdout(Stdio::null()).status().unwrap();
        assert!(st.success());
        let mut cmd = match prefix.split_first() {
            Some((p, rest)) => {
                let mut c = Command::new(p);
                c.args(rest).arg(bin());
                c
            }
            None => Command::new(bin()),
        };
        cmd.args(["up", "--agents", &agents.to_string(), "--port", "0"]).args(more).envs(env.iter().copied());
        if !more.contains(&"--no-proxy") {
            cmd.args(["--proxy-port", "0"]);
        }
        cmd.arg("--data").arg(&dir);
        if let Some(c) = config {
            let p = root.join("tandem.toml");
            std::fs::write(&p, c).unwrap();
            cmd.arg("--config").arg(p);
        }
        let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !dir.join("env").exists() {
            assert!(Instant::now() < deadline, "tandem up did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        let addr = std::fs::read_to_string(dir.join("controller/addr")).unwrap().trim().to_string();
        let up = Up { child, sock: dir.join("controller/tandem.sock").display().to_string(), dir, addr, shims };
        let deadline = Instant::now() + Duration::from_secs(30);
        while String::from_utf8_lossy(&up.root(&["sinfo", "-N", "-h"]).stdout).matches("idle").count() < agents as usize {
            assert!(Instant::now() < deadline, "node1 did not register");
            std::thread::sleep(Duration::from_millis(100));
        }
        up
    }

    /// A command (a shim name or `tandem`) as `u` (or root), in `cwd`, against this cluster.
    fn cmd(&self, u: Option<&User>, cwd: &Path, args: &[&str]) -> Command {
        let prog = match args[0] {
            "tandem" => PathBuf::from(bin()),
            p if self.shims.join(p).exists() => self.shims.join(p),
            p => PathBuf::from(p),
        };
        let mut c = match u {
            Some(u) => {
                let mut c = Command::new("setpriv");
                c.args(["--reuid", &u.uid.to_string(), "--regid", &u.gid.to_string(), "--init-groups"]).arg(prog);
                c
            }
            None => Command::new(prog),
        };
        c.args(&args[1..])
            .current_dir(cwd)
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", self.shims.display()))
            .env("TANDEM_SERVER", format!("unix://{}", self.sock))
            .env("HOME", "/nonexistent");
        c
    }

    fn run(&self, u: &User, cwd: &Path, args: &[&str]) -> Output {
        self.cmd(Some(u), cwd, args).output().unwrap()
    }

    fn ok(&self, u: &User, cwd: &Path, args: &[&str]) -> String {
        let o = self.run(u, cwd, args);
        assert!(o.status.success(), "{} {args:?} failed: {}", u.name, text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn root(&self, args: &[&str]) -> Output {
        self.cmd(None, &self.dir, args).output().unwrap()
    }

    fn sbatch(&self, u: &User, cwd: &Path, args: &[&str]) -> u64 {
        let mut a = vec!["sbatch", "--parsable"];
        a.extend_from_slice(args);
        self.ok(u, cwd, &a).trim().parse().unwrap()
    }

    fn job(&self, id: u64) -> HashMap<String, String> {
        let o = self.root(&["scontrol", "show", "job", &id.to_string()]);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let mut m: HashMap<String, String> =
            out.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect();
        if let Some(msg) = out.lines().find_map(|l| l.trim().strip_prefix("Message=")) {
            m.insert("Message".into(), msg.to_string());
        }
        m
    }

    fn wait_state(&self, id: u64, want: &[&str]) -> HashMap<String, String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let j = self.job(id);
            if j.get("JobState").is_some_and(|s| want.contains(&s.as_str())) {
                return j;
            }
            assert!(Instant::now() < deadline, "job {id} stayed {:?}, wanted {want:?}", j.get("JobState"));
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// An HTTP request to the controller's TCP port: status and body.
    fn tcp(&self, method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> (u16, String) {
        let mut c = Command::new("curl");
        let ca = self.dir.join("controller/ca.pem");
        // HTTP/1.1: curl 7.88 over HTTP/2 reports a reply sent before its body was read as an error.
        c.args([
            "-s",
            "--http1.1",
            "--cacert",
            &ca.display().to_string(),
            "-X",
            method,
            "-w",
            "\n%{http_code}",
            &format!("https://{}{path}", self.addr),
        ]);
        if let Some(t) = token {
            c.args(["-H", &format!("Authorization: Bearer {t}")]);
        }
        if let Some(b) = body {
            c.args(["-H", "content-type: application/json", "--data-binary", b]);
        }
        let o = c.output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let (body, code) = out.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_string())
    }

    fn token(&self, u: &User) -> String {
        let out = self.ok(u, Path::new("/"), &["tandem", "token"]);
        out.trim().strip_prefix("export TANDEM_TOKEN=").unwrap().to_string()
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
        // Containers a failed test left (their processes 1 name their directories).
        for pid in container_holders(&self.dir.display().to_string()) {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
    }
}

/// The live processes 1 of containers (`catatonit -P`) whose directory starts with `prefix`.
fn container_holders(prefix: &str) -> Vec<i32> {
    let marker = format!("TANDEM_CONTAINER={prefix}");
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<i32>().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let env = std::fs::read(e.path().join("environ")).ok()?;
            (cmd == b"/dev/.tandem-init\0-P\0" && env.split(|b| *b == 0).any(|v| v.starts_with(marker.as_bytes()))).then_some(pid)
        })
        .collect()
}

/// The live processes (`PID COMMAND LINE`) of job `job` of the cluster whose jobs were submitted
/// from `submit_dir`, found by their environment (`SLURM_JOB_ID`, `SLURM_SUBMIT_DIR`), inside
/// containers as outside: each test's cluster numbers its jobs from 1, and other tests run the
/// same commands as the same users meanwhile.
fn job_processes(job: u64, submit_dir: &Path) -> Vec<String> {
    let (id, dir) = (format!("SLURM_JOB_ID={job}"), format!("SLURM_SUBMIT_DIR={}", submit_dir.display()));
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<i32>().ok()?;
            let env = std::fs::read(e.path().join("environ")).ok()?;
            let mut vars = env.split(|b| *b == 0);
            if !(vars.clone().any(|v| v == id.as_bytes()) && vars.any(|v| v == dir.as_bytes())) {
                return None;
            }
            // A zombie (its environment read just before it ended) is gone but for its parent's wait.
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            if stat.rsplit_once(") ").is_none_or(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')) {
                return None;
            }
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            Some(format!("{pid} {}", String::from_utf8_lossy(&cmd).trim_end_matches('\0').replace('\0', " ")))
        })
        .collect()
}

/// The fixture: the victim's files (one readable, one in a private directory), root's file, and
/// the attacker's working directory with links to both.
struct Files {
    root: PathBuf,
    victim_dir: PathBuf,
    victim_file: PathBuf,
    victim_private: PathBuf,
    root_file: PathBuf,
    attacker_dir: PathBuf,
}

fn files(root: &Path, v: &User, a: &User) -> Files {
    let rootonly = root.join("rootonly");
    std::fs::create_dir_all(&rootonly).unwrap();
    let root_file = owned_file(&rootonly.join("shadow"), "root:secret\n", 0, 0, 0o644);
    let victim_dir = user_dir(&root.join("alice"), v, 0o755);
    let victim_file = owned_file(&victim_dir.join("notes.txt"), "alice's notes\n", v.uid, v.gid, 0o644);
    let victim_private = user_dir(&victim_dir.join("private"), v, 0o700);
    let attacker_dir = user_dir(&root.join("mallory"), a, 0o755);
    for (name, target) in [("to-root", &root_file), ("to-alice", &victim_file)] {
        let link = attacker_dir.join(name);
        std::os::unix::fs::symlink(target, &link).unwrap();
        nix::unistd::fchownat(
            nix::fcntl::AT_FDCWD,
            &link,
            Some(nix::unistd::Uid::from_raw(a.uid)),
            Some(nix::unistd::Gid::from_raw(a.gid)),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .unwrap();
    }
    Files { root: root.to_path_buf(), victim_dir, victim_file, victim_private, root_file, attacker_dir }
}

/// SECURITY.md P1, P2: output and error files, and the working directory, with the user's rights.
#[test]
fn output_error_and_working_directory_paths_are_used_with_the_users_rights_only() {
    let Some((v, a)) = users() else { return };
    let root = root_dir("paths");
    let f = files(&root, &v, &a);
    let up = Up::start(&root, None);
    let before = [fingerprint(&f.root_file), fingerprint(&f.victim_file)];
    let wd = &f.attacker_dir;
    // Positive control: the attacker's own output file, relative to its own directory.
    let id = up.sbatch(&a, wd, &["-o", "own.out", "--wrap", "echo mine; id -u"]);
    up.wait_state(id, &["COMPLETED"]);
    assert_eq!(std::fs::read_to_string(wd.join("own.out")).unwrap(), format!("mine\n{}\n", a.uid));
    assert_eq!(std::fs::metadata(wd.join("own.out")).unwrap().uid(), a.uid);
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["-o".into(), f.root_file.display().to_string()], "cannot open the output file"),
        (vec!["-o".into(), "to-root".into()], "cannot open the output file"),
        (vec!["-o".into(), f.victim_file.display().to_string()], "cannot open the output file"),
        (vec!["-o".into(), "to-alice".into()], "cannot open the output file"),
        (vec!["-o".into(), "ok2.out".into(), "-e".into(), "to-root".into()], "cannot open the error file"),
        (vec!["-o".into(), "ok3.out".into(), "-e".into(), f.victim_file.display().to_string()], "cannot open the error file"),
        (vec!["-o".into(), f.victim_dir.join("new.out").display().to_string()], "cannot open the output file"),
        (
            vec!["--chdir".into(), f.victim_private.display().to_string(), "-o".into(), wd.join("cd.out").display().to_string()],
            "cannot enter the working directory",
        ),
    ];
    for (opts, want) in cases {
        let mut args: Vec<&str> = opts.iter().map(String::as_str).collect();
        args.extend(["--wrap", "echo pwned"]);
        let id = up.sbatch(&a, wd, &args);
        let j = up.wait_state(id, &["FAILED"]);
        let msg = j.get("Message").cloned().unwrap_or_default();
        assert!(msg.contains(want) && msg.contains("Permission denied"), "{opts:?}: Message={msg:?}");
        // sacct says the same.
        let acct = up.ok(&a, wd, &["sacct", "-j", &id.to_string(), "-X", "-P", "-n", "--format=State,Reason"]);
        assert!(acct.contains("FAILED|") && acct.contains(want), "{opts:?}: {acct}");
    }
    assert_eq!([fingerprint(&f.root_file), fingerprint(&f.victim_file)], before, "the victims' files are unchanged");
    assert!(!f.victim_dir.join("new.out").exists(), "nothing was created in a directory the attacker may not write");
    assert!(!wd.join("cd.out").exists(), "the job whose directory was refused never ran");
    std::fs::remove_dir_all(&f.root).ok();
}

/// SECURITY.md P1 for `srun` steps: a step's own directory and per-task files, truncation
/// included, are entered and opened with the job owner's rights.
#[test]
fn a_steps_directory_files_and_truncation_use_the_users_rights_only() {
    let Some((v, a)) = users() else { return };
    let root = root_dir("steppaths");
    let f = files(&root, &v, &a);
    let up = Up::start(&root, None);
    let before = [fingerprint(&f.root_file), fingerprint(&f.victim_file)];
    let wd = &f.attacker_dir;
    let script = format!(
        "srun -n1 --open-mode=truncate -o {root} true; echo a=$?\n\
         srun -n1 --open-mode=truncate -o {victim} -e own-step.err true; echo b=$?\n\
         srun -n1 -D {private} -o {wd}/cd-step.out pwd; echo c=$?\n\
         srun -n1 --open-mode=truncate -o own-%t.out id -u; echo d=$?\n",
        root = f.root_file.display(),
        victim = f.victim_file.display(),
        private = f.victim_private.display(),
        wd = wd.display(),
    );
    let id = up.sbatch(&a, wd, &["-o", "steps.out", "--wrap", &script]);
    up.wait_state(id, &["COMPLETED", "FAILED"]);
    let out = std::fs::read_to_string(wd.join("steps.out")).unwrap_or_default();
    for refused in ["a=", "b=", "c="] {
        let line = out.lines().find(|l| l.starts_with(refused)).unwrap_or_else(|| panic!("no {refused} in\n{out}"));
        assert_ne!(line, format!("{refused}0"), "a refused step succeeded:\n{out}");
    }
    // Positive control: its own per-task file, truncated and written as the attacker.
    assert!(out.contains("d=0"), "{out}");
    assert_eq!(std::fs::read_to_string(wd.join("own-0.out")).unwrap().trim(), a.uid.to_string());
    assert_eq!([fingerprint(&f.root_file), fingerprint(&f.victim_file)], before, "the victims' files are unchanged");
    assert!(!wd.join("cd-step.out").exists(), "the step whose directory was refused never ran");
    std::fs::remove_dir_all(&f.root).ok();
}

/// A step's I/O connection: another user who finds `srun`'s port and connects (TLS needs no
/// client certificate) cannot pose as a task without the step's key, so gets none of the
/// step's input and sends nothing into its output; and the key is nowhere in what the API shows.
#[test]
fn another_user_cannot_join_a_steps_io() {
    let Some((v, a)) = users() else { return };
    let root = root_dir("stepio");
    let f = files(&root, &v, &a);
    let up = Up::start(&root, None);
    let vd = user_dir(&root.join("victim-work"), &v, 0o700);
    let script = "printf 'secret-input\\n' | srun -n1 bash -c 'sleep 6; read x; echo got=$x'; echo rc=$?\n";
    let id = up.sbatch(&v, &vd, &["-o", "io.out", "--wrap", script]);
    // srun's listening port, as anyone can see it (ss), once the step runs.
    let deadline = Instant::now() + Duration::from_secs(30);
    let port = loop {
        let o = Command::new("ss").args(["-ltnpH"]).output().unwrap();
        let t = String::from_utf8_lossy(&o.stdout).into_owned();
        if let Some(l) = t.lines().find(|l| l.contains("tandem-slurm") || l.contains("\"srun\"")) {
            break l.split_whitespace().nth(3).and_then(|a| a.rsplit(':').next()).unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "no srun listener:\n{t}");
        std::thread::sleep(Duration::from_millis(100));
    };
    // The attacker speaks the protocol: TLS, then a hello for task 0 with a guessed key, then
    // output of its own; it reads whatever comes back.
    let attack = format!(
        r#"
import json, socket, ssl, struct, sys
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
got = b""
for key in ["0" * 64, "f" * 64]:
    try:
        s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", {port})), server_hostname="srun")
        h = json.dumps({{"key": key, "job": {id}, "step": 0, "rank": 0}}).encode()
        s.sendall(bytes([0]) + struct.pack(">I", len(h)) + h)
        s.sendall(bytes([1]) + struct.pack(">I", 9) + b"injected\n")
        s.settimeout(3)
        while True:
            b = s.recv(4096)
            if not b:
                break
            got += b
    except Exception as e:
        print("refused:", type(e).__name__)
print("received", len(got), "secret" in repr(got))
"#
    );
    let o = up.run(&a, &f.attacker_dir, &["python3", "-c", &attack]);
    let said = text(&o);
    assert!(said.contains("received 0 False"), "the attacker got something: {said}");
    up.wait_state(id, &["COMPLETED", "FAILED"]);
    let out = std::fs::read_to_string(vd.join("io.out")).unwrap_or_default();
    assert!(out.contains("got=secret-input") && out.contains("rc=0"), "the step's own I/O works: {out}");
    assert!(!out.contains("injected"), "the attacker wrote into the step's output: {out}");
    // The step's secrets are not shown to anyone through the API (its owner included).
    for u in [&v, &a] {
        let shown = text(&up.run(u, &f.attacker_dir, &["scontrol", "show", "job", &id.to_string()]));
        assert!(!shown.contains("BEGIN CERTIFICATE") && !shown.to_lowercase().contains("key"), "{shown}");
    }
    std::fs::remove_dir_all(&f.root).ok();
}

/// SECURITY.md, PMIx: a step's PMIx servers take only its user's processes, even from another
/// user who states the job user's ids (OpenPMIx 4 believes what a TCP client says).
#[test]
fn another_user_cannot_join_a_steps_pmix_server() {
    let Some((v, a)) = users() else { return };
    let include = Path::new("/usr/lib/x86_64-linux-gnu/pmix2/include");
    if !include.join("pmix.h").exists() || !common::have("gcc") {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true but gcc or OpenPMIx's headers (libpmix-dev) are missing");
        eprintln!("skipped: gcc or libpmix-dev is not installed");
        return;
    }
    let root = root_dir("pmix");
    let f = files(&root, &v, &a);
    let up = Up::start(&root, None);
    let vd = user_dir(&root.join("victim-work"), &v, 0o700);
    // The attacker's tools: a stock PMIx client, and a library that makes it state other ids.
    let tools = root.join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients");
    let lib = "/usr/lib/x86_64-linux-gnu/pmix2/lib";
    for args in [
        vec![
            "-o".to_string(),
            tools.join("client").display().to_string(),
            src.join("pmix_client.c").display().to_string(),
            format!("-I{}", include.display()),
            format!("-L{lib}"),
            "-lpmix".into(),
            format!("-Wl,-rpath,{lib}"),
        ],
        vec![
            "-shared".into(),
            "-fPIC".into(),
            "-o".into(),
            tools.join("forge.so").display().to_string(),
            src.join("forge_uid.c").display().to_string(),
        ],
    ] {
        let o = Command::new("gcc").args(&args).output().unwrap();
        assert!(o.status.success(), "gcc {args:?}: {}", text(&o));
    }
    // The victim's step shows its PMIx variables where the attacker can read them (the server's
    // port is anyone's to see in /proc/net/tcp anyway), then waits.
    let public = root.join("public");
    std::fs::create_dir_all(&public).unwrap();
    std::fs::set_permissions(&public, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
    let env_file = public.join("env");
    let script = format!(
        "srun --mpi=pmix -n1 bash -c 'env | grep ^PMIX_ > {0}.tmp; chmod 644 {0}.tmp; mv {0}.tmp {0}; sleep 8'; echo rc=$?\n",
        env_file.display()
    );
    let id = up.sbatch(&v, &vd, &["-o", "pmix.out", "--wrap", &script]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !env_file.exists() {
        assert!(Instant::now() < deadline, "the step never ran: {:?}", up.job(id));
        std::thread::sleep(Duration::from_millis(100));
    }
    let vars: Vec<String> = std::fs::read_to_string(&env_file).unwrap().lines().map(str::to_string).collect();
    assert!(vars.iter().any(|l| l.starts_with("PMIX_SERVER_URI")), "{vars:?}");
    let dir = vars.iter().find_map(|l| l.strip_prefix("PMIX_SERVER_TMPDIR=")).unwrap().to_string();
    let m = std::fs::metadata(&dir).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((m.mode() & 0o7777, m.uid()), (0o700, v.uid), "{dir}");
    // First with the victim's ids stated (the library would take it; Tandem's check must not),
    // then with its own (the library refuses those itself).
    let client = tools.join("client").display().to_string();
    let forge = tools.join("forge.so").display().to_string();
    for forged in [true, false] {
        // Bounded: the stock client has been seen to hang in its own shared-memory lock after
        // the refusal (`gds_ds12_lock_pthread.c`), which is not joining either.
        let mut args: Vec<String> = vec!["timeout".into(), "60".into(), "env".into(), "-i".into()];
        args.extend(vars.iter().cloned());
        if forged {
            args.extend([format!("LD_PRELOAD={forge}"), format!("FORGE_UID={}", v.uid), format!("FORGE_GID={}", v.gid)]);
        }
        args.push(client.clone());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = up.run(&a, &f.attacker_dir, &args);
        let said = text(&o);
        let hung = o.status.code() == Some(124) && said.contains("PMIX ERROR");
        assert!(
            (said.contains("init failed") || hung) && !said.contains("init ok"),
            "forged={forged}: the attacker joined the step: {said}"
        );
    }
    up.wait_state(id, &["COMPLETED", "FAILED"]);
    let out = std::fs::read_to_string(vd.join("pmix.out")).unwrap_or_default();
    assert!(out.contains(&format!("refused a connection to the step's PMIx server from another user (uid {})", a.uid)), "{out}");
    assert!(out.contains("rc=0"), "{out}");
    // The server's files were in a directory of the victim's alone, removed with the task.
    assert!(!Path::new(&dir).exists(), "{dir} left behind");
    std::fs::remove_dir_all(&f.root).ok();
}

/// SECURITY.md P1 for services: a replica's output file with the service owner's rights.
#[test]
fn a_service_output_file_is_opened_with_its_owners_rights() {
    let Some((v, a)) = users() else { return };
    let root = root_dir("svcout");
    let f = files(&root, &v, &a);
    let up = Up::start(&root, None);
    let before = fingerprint(&f.victim_file);
    let wd = &f.attacker_dir;
    let spec = |name: &str, output: &str| {
        let p = wd.join(format!("{name}.toml"));
        let text = format!("name = \"{name}\"\ncommand = [\"/bin/sh\", \"-c\", \"echo up; sleep 300\"]\noutput = \"{output}\"\n");
        owned_file(&p, &text, a.uid, a.gid, 0o644);
        p.display().to_string()
    };
    // Positive control: its own file.
    up.ok(&a, wd, &["tandem", "service", "apply", "-f", &spec("own", "own-svc.log")]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(wd.join("own-svc.log")).unwrap_or_default() != "up\n" {
        assert!(Instant::now() < deadline, "the attacker's own service did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    up.ok(&a, wd, &["tandem", "service", "apply", "-f", &spec("evil", "to-alice")]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let show = up.ok(&a, wd, &["tandem", "service", "show", "evil"]);
        if show.contains("cannot open the output file") && show.contains("Permission denied") {
            break;
        }
        assert!(Instant::now() < deadline, "no refusal shown:\n{show}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(fingerprint(&f.victim_file), before);
    std::fs::remove_dir_all(&f.root).ok();
}

/// SECURITY.md S1, P3: the controller's state, the agent's spool and other users' scripts.
#[test]
fn state_secrets_and_spooled_scripts_are_unreadable_to_others() {
    let Some((v, a)) = users() else { return };
    let root = root_dir("state");
    let f = files(&root, &v, &a);
    let up = Up::start(&root, None);
    let ctl = up.dir.join("controller");
    // Positive control: the attacker reads its own file and reaches the controller's socket.
    up.ok(&a, &f.attacker_dir, &["cat", "to-alice"]);
    up.ok(&a, &f.attacker_dir, &["sinfo"]);
    let private = ["state.db", "state.db-wal", "state.db-shm", "nodes.key", "jwt.key", "ca.key", "addr"].map(|n| ctl.join(n));
    for p in private.iter().chain([&up.dir.join("node1/credential"), &up.dir.join("node1/join-token")]) {
        let name = p.display().to_string();
        let p = p.clone();
        let m = std::fs::metadata(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert_eq!((m.mode() & 0o777, m.uid()), (0o600, 0), "{name}");
        let o = up.run(&a, &f.attacker_dir, &["cat", &p.display().to_string()]);
        assert!(!o.status.success() && text(&o).contains("Permission denied"), "{name}: {}", text(&o));
    }
    assert_eq!(std::fs::metadata(&ctl).unwrap().mode() & 0o777, 0o711);
    let o = up.run(&a, &f.attacker_dir, &["ls", &ctl.display().to_string()]);
    assert!(!o.status.success() && text(&o).contains("Permission denied"), "{}", text(&o));
    assert!(!ctl.join("secret").exists(), "no shared cluster secret");
    // No key or credential is in the database either.
    let db = std::fs::read(ctl.join("state.db")).unwrap();
    let wal = std::fs::read(ctl.join("state.db-wal")).unwrap_or_default();
    for f in [ctl.join("nodes.key"), ctl.join("jwt.key"), up.dir.join("node1/credential")] {
        let secret = std::fs::read_to_string(&f).unwrap();
        let secret = secret.trim().as_bytes();
        for bytes in [&db, &wal] {
            assert!(!bytes.windows(secret.len()).any(|w| w == secret), "the database holds {}", f.display());
        }
    }
    // Spooled scripts: the victim's is the victim's alone, and goes when the job ends.
    let spool = up.dir.join("node1/spool");
    let mine = up.sbatch(&a, &f.attacker_dir, &["-o", "/dev/null", "--wrap", "sleep 60 # mallory's"]);
    let theirs = up.sbatch(&v, &f.victim_dir, &["-o", "/dev/null", "--wrap", "sleep 60 # alice's secret plan"]);
    up.wait_state(mine, &["RUNNING"]);
    up.wait_state(theirs, &["RUNNING"]);
    let script = |id: u64| spool.join(format!("job_{id}_1.sh")).display().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !Path::new(&script(theirs)).exists() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(up.ok(&a, &f.attacker_dir, &["cat", &script(mine)]).contains("mallory's"), "positive control");
    assert!(up.ok(&v, &f.victim_dir, &["cat", &script(theirs)]).contains("secret plan"), "the owner reads it");
    let o = up.run(&a, &f.attacker_dir, &["cat", &script(theirs)]);
    assert!(!o.status.success() && text(&o).contains("Permission denied"), "{}", text(&o));
    let o = up.run(&a, &f.attacker_dir, &["ls", &spool.display().to_string()]);
    assert!(!o.status.success() && text(&o).contains("Permission denied"), "{}", text(&o));
    // The agent's task records hold each task's order (script, environment): root's alone.
    let records = up.dir.join("node1/tasks");
    let record = records.join("log");
    assert!(std::fs::read_to_string(&record).unwrap().contains("secret plan"), "the record is there");
    for cmd in [vec!["ls", records.to_str().unwrap()], vec!["cat", record.to_str().unwrap()]] {
        let o = up.run(&a, &f.attacker_dir, &cmd);
        assert!(!o.status.success() && text(&o).contains("Permission denied"), "{cmd:?}: {}", text(&o));
    }
    up.ok(&v, &f.victim_dir, &["scancel", &theirs.to_string()]);
    up.wait_state(theirs, &["CANCELLED"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&script(theirs)).exists() {
        assert!(Instant::now() < deadline, "the script outlived its job");
        std::thread::sleep(Duration::from_millis(50));
    }
    up.root(&["scancel", &mine.to_string()]);
    std::fs::remove_dir_all(&f.root).ok();
}

#[test]
fn the_clusters_state_in_etcd_is_out_of_another_users_reach() {
    let Some((v, a)) = users() else { return };
    if !common::have("etcd") {
        assert!(std::env::var_os("CI").is_none(), "etcd is not installed (.ci/run installs Debian's etcd-server)");
        eprintln!("skipped: no etcd (apt-get install etcd-server)");
        return;
    }
    let root = root_dir("etcd");
    let f = files(&root, &v, &a);
    let up = Up::launch(&root, None, &["--no-proxy", "--ha"]);
    let id = up.sbatch(&v, &f.victim_dir, &["-o", "/dev/null", "-J", "alices-secret-plan", "--wrap", "true"]);
    up.wait_state(id, &["COMPLETED"]);
    let etcd = up.dir.join("etcd");
    let pki = etcd.join("pki");
    // The attacker holds every public file: the etcd CA's certificate and a member's.
    for p in ["ca.pem", "etcd1.pem"] {
        let to = f.attacker_dir.join(p);
        std::fs::copy(pki.join(p), &to).unwrap();
        std::os::unix::fs::chown(&to, Some(a.uid), Some(a.gid)).unwrap();
    }
    // The first member's client address, from its command line.
    let ps = Command::new("pgrep").args(["-af", "--", &format!("--data-dir {}", etcd.join("etcd1").display())]).output().unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout).into_owned();
    let member = regex::Regex::new(r"--listen-client-urls https://(127\.0\.0\.1:\d+)").unwrap().captures(&ps).map(|c| c[1].to_string());
    let member = member.unwrap_or_else(|| panic!("the member's address: {ps}"));
    // etcd's JSON gateway: every key of the cluster's prefix (base64 of /tandem/ to /tandem0).
    let body = r#"{"key":"L3RhbmRlbS8=","range_end":"L3RhbmRlbTA="}"#;
    let url = format!("https://{member}/v3/kv/range");
    // Positive control: with the controllers' client certificate (root's) the state reads.
    let ok = Command::new("curl")
        .args(["-s", "--cacert"])
        .arg(pki.join("ca.pem"))
        .arg("--cert")
        .arg(pki.join("client.pem"))
        .arg("--key")
        .arg(pki.join("client.key"))
        .args(["-X", "POST", "-d", body, &url])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&ok.stdout).contains("\"kvs\""), "{}", text(&ok));
    // The attacker: without a client certificate TLS is refused, plain HTTP is no protocol
    // there, and the keys cannot be read.
    let cmds: Vec<Vec<String>> = vec![
        vec![
            "curl".into(),
            "-sS".into(),
            "--cacert".into(),
            "ca.pem".into(),
            "-X".into(),
            "POST".into(),
            "-d".into(),
            body.into(),
            url.clone(),
        ],
        vec![
            "curl".into(),
            "-sS".into(),
            "--cacert".into(),
            "ca.pem".into(),
            "-X".into(),
            "POST".into(),
            "-d".into(),
            r#"{"key":"L3RhbmRlbS9tZXRhL2Jvb3Q=","value":"OTk5"}"#.into(),
            format!("https://{member}/v3/kv/put"),
        ],
        vec!["curl".into(), "-sS".into(), "-X".into(), "POST".into(), "-d".into(), body.into(), format!("http://{member}/v3/kv/range")],
    ];
    for c in &cmds {
        let args: Vec<&str> = c.iter().map(String::as_str).collect();
        let o = up.run(&a, &f.attacker_dir, &args);
        assert!(!o.status.success() && !String::from_utf8_lossy(&o.stdout).contains("kvs"), "{c:?}: {}", text(&o));
    }
    for p in [pki.join("client.key"), pki.join("etcd1.key"), etcd.join("etcd1/member/snap/db")] {
        let o = up.run(&a, &f.attacker_dir, &["cat", p.to_str().unwrap()]);
        assert!(!o.status.success() && text(&o).contains("Permission denied"), "{}: {}", p.display(), text(&o));
    }
    assert_eq!(std::fs::metadata(&etcd).unwrap().mode() & 0o777, 0o700);
    // What the attacker could not write did not happen: the state is as it was.
    assert!(up.ok(&v, &f.victim_dir, &["sacct", "-X", "-n", "-o", "JobName%30"]).contains("alices-secret-plan"));
    std::fs::remove_dir_all(&f.root).ok();
}

/// Base64url without padding (as in a JWT).
fn b64url(s: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for c in s.chunks(3) {
        let n = c.iter().enumerate().fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
        for i in 0..=c.len() {
            out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// SECURITY.md N1: a node acts only with its own credential, got with a single-use join token
/// that only an administrator makes; deleting a node revokes it.
#[test]
fn nodes_need_their_own_credential_from_a_single_use_join_token() {
    let Some((v, a)) = users() else { return };
    let root = root_dir("nodes");
    let f = files(&root, &v, &a);
    let up = Up::start(&root, None);
    let reg = |name: &str| {
        format!(
            r#"{{"node":{{"name":"{name}","cpus":2,"memory":1073741824,"gpus":0,"gpu_type":null,"other":[],"features":[],"partitions":[],"switch":0,"block":0,"state":"Up"}},"addr":"127.0.0.1"}}"#
        )
    };
    let hb = |name: &str| format!(r#"{{"node":"{name}","ack":0,"running":[],"exits":[],"wait_ms":0}}"#);
    let root_out = |args: &[&str]| {
        let o = up.root(args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    // Positive control: a join token made by root admits one node, which then registers and
    // heartbeats with its credential.
    let join = root_out(&["tandem", "token", "--join"]);
    let (st, body) = up.tcp("POST", "/v1/agent/join", Some(&join), Some(r#"{"name":"fake1"}"#));
    assert_eq!(st, 200, "{body}");
    let cred: serde_json::Value = serde_json::from_str(&body).unwrap();
    let cred = cred["credential"].as_str().unwrap().to_string();
    assert_eq!(up.tcp("POST", "/v1/agent/register", Some(&cred), Some(&reg("fake1"))).0, 200);
    assert_eq!(up.tcp("POST", "/v1/agent/heartbeat", Some(&cred), Some(&hb("fake1"))).0, 200);
    assert!(root_out(&["sinfo", "-N", "-h"]).contains("fake1"));
    // The join token is spent: not for a second node, nor again for the same one.
    for name in ["fake2", "fake1"] {
        let (st, body) = up.tcp("POST", "/v1/agent/join", Some(&join), Some(&format!(r#"{{"name":"{name}"}}"#)));
        assert!(st == 403 && body.contains("already used"), "{name}: {st} {body}");
    }
    // Bad values get a clear refusal and spend nothing.
    for (args, want) in [
        (&["tandem", "token", "--join", "--count", "0"][..], "count must be between 1 and 100000"),
        (&["tandem", "token", "--join", "--lifespan", "0"][..], "lifetime must be between 1 s and 30 days"),
        (&["tandem", "token", "--join", "--lifespan", "99999999"][..], "lifetime must be between 1 s and 30 days"),
        (&["tandem", "token", "--proxy", "bad/name"][..], "invalid proxy name"),
        (&["tandem", "node", "delete", "n[1-"][..], "invalid hostlist"),
        (&["tandem", "node", "delete", "nosuchnode"][..], "invalid node name specified: nosuchnode"),
    ] {
        let o = up.root(args);
        assert!(!o.status.success() && text(&o).contains(want), "{args:?}: {}", text(&o));
    }
    let spare = root_out(&["tandem", "token", "--join"]);
    for name in ["", "../etc", "a b", &"x".repeat(65)] {
        let (st, body) = up.tcp("POST", "/v1/agent/join", Some(&spare), Some(&format!(r#"{{"name":"{name}"}}"#)));
        assert!(st == 400 && body.contains("invalid node name"), "{name:?}: {st} {body}");
    }
    let (st, body) = up.tcp("POST", "/v1/agent/join", Some(&spare), Some(r#"{"name":"fake3","extra":1}"#));
    assert!(st == 400 && body.contains("unknown field"), "{st} {body}");
    let (st, body) = up.tcp("POST", "/v1/agent/join", Some(&spare), Some(r#"{"name":"fake3"}"#));
    assert_eq!(st, 200, "refused attempts did not spend the token: {body}");
    // A fresh token cannot take a name that has a credential (node1's, the real agent's).
    let join2 = root_out(&["tandem", "token", "--join"]);
    let (st, body) = up.tcp("POST", "/v1/agent/join", Some(&join2), Some(r#"{"name":"node1"}"#));
    assert!(st == 409 && body.contains("already has a credential"), "{st} {body}");
    // An ordinary user makes no join token, and reads no node's credential.
    let o = up.run(&a, &f.attacker_dir, &["tandem", "token", "--join"]);
    assert!(!o.status.success() && text(&o).contains("only root"), "{}", text(&o));
    let o = up.run(&a, &f.attacker_dir, &["tandem", "token", "--proxy", "evil"]);
    assert!(!o.status.success() && text(&o).contains("only root"), "{}", text(&o));
    let o = up.run(&a, &f.attacker_dir, &["cat", &up.dir.join("node1/credential").display().to_string()]);
    assert!(!o.status.success() && text(&o).contains("Permission denied"), "{}", text(&o));
    // No credential, a user's token, a join token, a forged or re-signed one: refused.
    let user = up.token(&a);
    let parts: Vec<&str> = cred.split('.').collect();
    // fake1's header and signature on claims naming node1.
    let forged = format!("{}.{}.{}", parts[0], b64url(br#"{"aud":"tandem-node","sub":"node1","ser":1,"iat":0}"#), parts[2]);
    for (what, t) in
        [("none", None), ("a user token", Some(user.as_str())), ("a join token", Some(join2.as_str())), ("forged", Some(&forged))]
    {
        for (path, body) in
            [("/v1/agent/register", reg("node1")), ("/v1/agent/heartbeat", hb("node1")), ("/v1/proxy/sync", r#"{"proxy":"p"}"#.into())]
        {
            let (st, text) = up.tcp("POST", path, t, Some(&body));
            assert_eq!(st, 401, "{what} at {path}: {text}");
        }
    }
    // One node's credential does not speak for another.
    for (path, body) in [("/v1/agent/register", reg("node1")), ("/v1/agent/heartbeat", hb("node1"))] {
        let (st, text) = up.tcp("POST", path, Some(&cred), Some(&body));
        assert!(st == 403 && text.contains("fake1") && text.contains("not node"), "{path}: {st} {text}");
    }
    // Deleting: not by an ordinary user; not a node with running work; then the credential
    // is dead and the node gone.
    let o = up.run(&a, &f.attacker_dir, &["scontrol", "delete", "NodeName=fake1"]);
    assert!(!o.status.success() && text(&o).contains("only root"), "{}", text(&o));
    let job = up.sbatch(&a, &f.attacker_dir, &["-o", "/dev/null", "-w", "node1", "--wrap", "sleep 60"]);
    up.wait_state(job, &["RUNNING"]);
    let o = up.root(&["tandem", "node", "delete", "node1"]);
    assert!(!o.status.success() && text(&o).contains(&format!("running jobs ({job})")), "{}", text(&o));
    root_out(&["scontrol", "delete", "NodeName=fake1"]);
    assert!(!root_out(&["sinfo", "-N", "-h"]).contains("fake1"));
    for (path, body) in [("/v1/agent/register", reg("fake1")), ("/v1/agent/heartbeat", hb("fake1"))] {
        let (st, text) = up.tcp("POST", path, Some(&cred), Some(&body));
        assert!(st == 401 && text.contains("revoked"), "{path}: {st} {text}");
    }
    let o = up.root(&["scontrol", "delete", "NodeName=fake1"]);
    assert!(!o.status.success() && text(&o).contains("invalid node name"), "{}", text(&o));
    // The name may join again with a new token, as a new node with a new credential.
    let (st, body) = up.tcp("POST", "/v1/agent/join", Some(&join2), Some(r#"{"name":"fake1"}"#));
    assert_eq!(st, 200, "{body}");
    assert_ne!(serde_json::from_str::<serde_json::Value>(&body).unwrap()["credential"].as_str().unwrap(), cred);
    up.root(&["scancel", &job.to_string()]);
    std::fs::remove_dir_all(&f.root).ok();
}

/// SECURITY.md S2: `tandem up` never uses a directory another user prepared.
#[test]
fn tandem_up_refuses_directories_another_user_prepared() {
    let Some((v, a)) = users() else { return };
    let root = root_dir("updir");
    let shared = root.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let up_as = |u: &User, xdg: &Path, extra: &[&str]| -> Output {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            &u.uid.to_string(),
            "--regid",
            &u.gid.to_string(),
            "--init-groups",
            bin(),
            "up",
            "--agents",
            "1",
            "--port",
            "0",
            "--no-proxy",
        ])
        .args(extra)
        .env_clear()
        .env("XDG_RUNTIME_DIR", xdg)
        .env("PATH", "/usr/bin:/bin")
        .current_dir("/");
        // A refusal returns at once; a cluster that starts is stopped after 20 s.
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        let child = c.spawn().unwrap();
        let pid = child.id();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(20));
            let _ = Command::new("kill").args(["-INT", &pid.to_string()]).status();
        });
        let o = child.wait_with_output().unwrap();
        drop(killer);
        o
    };
    // Pre-created by the attacker: its own directory where the victim's base would be.
    let xdg1 = user_dir(&shared.join("run1"), &v, 0o1777);
    user_dir(&xdg1.join("tandem"), &a, 0o777);
    let o = up_as(&v, &xdg1, &[]);
    assert!(!o.status.success() && text(&o).contains("another user's"), "{}", text(&o));
    // Pre-linked: a link to a directory of the attacker's.
    let xdg2 = user_dir(&shared.join("run2"), &v, 0o1777);
    let trap = user_dir(&shared.join("trap"), &a, 0o777);
    std::os::unix::fs::symlink(&trap, xdg2.join("tandem")).unwrap();
    let o = up_as(&v, &xdg2, &[]);
    assert!(!o.status.success() && text(&o).contains("a link"), "{}", text(&o));
    assert_eq!(std::fs::read_dir(&trap).unwrap().count(), 0, "nothing was written into the trap");
    // --data: another user's directory, a link, one others may write.
    let theirs = user_dir(&shared.join("theirs"), &a, 0o755);
    let o = up_as(&v, &xdg2, &["--data", &theirs.display().to_string()]);
    assert!(!o.status.success() && text(&o).contains("another user's"), "{}", text(&o));
    let link = shared.join("link");
    std::os::unix::fs::symlink(&trap, &link).unwrap();
    let o = up_as(&v, &xdg2, &["--data", &link.display().to_string()]);
    assert!(!o.status.success() && text(&o).contains("a link"), "{}", text(&o));
    let open = user_dir(&shared.join("open"), &v, 0o777);
    let o = up_as(&v, &xdg2, &["--data", &open.display().to_string()]);
    assert!(!o.status.success() && text(&o).contains("writable by other users"), "{}", text(&o));
    // Positive control: the victim's own runtime directory; the cluster goes in a fresh 0700
    // directory and `BASE/env` names it.
    let own = user_dir(&root.join("alice-run"), &v, 0o700);
    let o = up_as(&v, &own, &[]);
    assert!(text(&o).contains("Tandem is up"), "{}", text(&o));
    let base = own.join("tandem");
    assert_eq!(std::fs::metadata(&base).unwrap().mode() & 0o777, 0o700);
    let env = std::fs::read_to_string(base.join("env")).unwrap();
    let dir = env
        .lines()
        .find_map(|l| l.strip_prefix("export TANDEM_SERVER=unix://"))
        .unwrap()
        .trim_end_matches("/controller/tandem.sock")
        .to_string();
    let m = std::fs::metadata(&dir).unwrap();
    assert_eq!((m.mode() & 0o777, m.uid()), (0o700, v.uid), "{dir}");
    assert!(Path::new(&dir).starts_with(&base));
    std::fs::remove_dir_all(&root).ok();
}

/// SECURITY.md I2: tokens over TCP; nothing but health without one.
#[test]
fn tcp_needs_a_genuine_canonical_token() {
    let Some((_v, a)) = users() else { return };
    let root = root_dir("tokens");
    let up = Up::start(&root, None);
    let tok = up.token(&a);
    // Positive control: the attacker's own token works.
    let (code, body) = up.tcp("GET", "/v1/jobs", Some(&tok), None);
    assert_eq!(code, 200, "{body}");
    let (code, body) = up.tcp("GET", "/healthz", None, None);
    assert_eq!((code, body.trim()), (200, "ok"));
    for path in ["/v1/jobs", "/v1/nodes", "/v1/services", "/v1/history", "/v1/priority", "/metrics", "/openapi.json"] {
        let (code, body) = up.tcp("GET", path, None, None);
        assert_eq!(code, 401, "{path} without a token: {body}");
    }
    let (code, _) = up.tcp("POST", "/v1/jobs", None, Some("{}"));
    assert_eq!(code, 401);
    // Forged, altered and re-encoded tokens.
    let parts: Vec<&str> = tok.split('.').collect();
    let b64 = |s: &str| {
        let o = Command::new("sh").args(["-c", &format!("printf '%s' '{s}' | base64 -w0 | tr '+/' '-_' | tr -d '='")]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let root_claims = b64(r#"{"sub":"0","iat":1,"exp":9999999999}"#);
    let none = b64(r#"{"alg":"none","typ":"JWT"}"#);
    let mut flipped = tok.clone();
    let last = flipped.pop().unwrap();
    flipped.push(if last == 'A' { 'B' } else { 'A' });
    let forged = [
        format!("{}.{root_claims}.{}", parts[0], parts[2]),
        format!("{none}.{root_claims}."),
        format!("{tok}="),
        format!("{}=.{}.{}", parts[0], parts[1], parts[2]),
        flipped,
        format!("0.9999999999.{}", "0".repeat(64)),
        "garbage".into(),
    ];
    for t in &forged {
        let (code, body) = up.tcp("GET", "/v1/jobs", Some(t), None);
        assert_eq!(code, 401, "{t}: {body}");
        let (code, _) = up.tcp("POST", "/v1/token", Some(t), None);
        assert_eq!(code, 401, "{t}");
    }
    // Agents' and proxies' paths without a credential (a user's token is none).
    let (code, _) = up.tcp("POST", "/v1/agent/register", Some(&tok), Some("{}"));
    assert_eq!(code, 401);
    let (code, _) = up.tcp("POST", "/v1/agent/heartbeat", None, Some(r#"{"node":"node1","ack":0,"running":[],"exits":[]}"#));
    assert_eq!(code, 401);
    let (code, _) = up.tcp("POST", "/v1/proxy/sync", None, Some("{}"));
    assert_eq!(code, 401);
    std::fs::remove_dir_all(&root).ok();
}

/// SECURITY.md V1: others' jobs and services are listed, their command lines, environment
/// values and arguments are not, on the Unix socket and over TCP.
#[test]
fn other_users_command_lines_and_service_environments_are_hidden() {
    let Some((v, a)) = users() else { return };
    let root = root_dir("visible");
    let f = files(&root, &v, &a);
    let up = Up::start(&root, None);
    let secret = "alice-api-key-0451";
    let job = up.sbatch(&v, &f.victim_dir, &["-J", "alicejob", "-o", "/dev/null", "--wrap", &format!("srun sh -c 'sleep 60 # {secret}'")]);
    up.wait_state(job, &["RUNNING"]);
    let spec = owned_file(
        &f.victim_dir.join("svc.toml"),
        &format!(
            "name = \"alicesvc\"\ncommand = [\"/bin/sleep\"]\nargs = [\"300\", \"{secret}-arg\"]\noutput = \"/dev/null\"\n[env]\nAPI_KEY = \"{secret}-env\"\n"
        ),
        v.uid,
        v.gid,
        0o644,
    );
    up.ok(&v, &f.victim_dir, &["tandem", "service", "apply", "-f", &spec.display().to_string()]);
    // The step exists once srun ran.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !up.ok(&v, &f.victim_dir, &["sacct", "-j", &job.to_string(), "-P", "-n", "--format=JobID"]).contains(&format!("{job}.0")) {
        assert!(Instant::now() < deadline, "the step did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Positive control: the owner sees all of it.
    let owner_tok = up.token(&v);
    let (_, svc) = up.tcp("GET", "/v1/services/alicesvc", Some(&owner_tok), None);
    assert!(svc.contains(&format!("{secret}-env")) && svc.contains(&format!("{secret}-arg")), "{svc}");
    let (_, jobs) = up.tcp("GET", &format!("/v1/jobs/{job}"), Some(&owner_tok), None);
    assert!(jobs.contains(secret), "{jobs}");
    // The attacker sees that they exist, and who runs them ...
    let q = up.ok(&a, &f.attacker_dir, &["squeue", "-h", "-o", "%i %u %j %T"]);
    assert!(q.contains(&format!("{job} {VICTIM} alicejob RUNNING")), "{q}");
    // ... but no command line, environment value or argument, through any command or path.
    let tok = up.token(&a);
    let mut seen = String::new();
    for args in [
        vec!["squeue".to_string()],
        vec!["scontrol".into(), "show".into(), "job".into(), job.to_string()],
        vec!["sacct".into(), "-a".into(), "--format=JobID,JobName,User,State".into()],
        vec!["tandem".into(), "service".into(), "show".into(), "alicesvc".into()],
        vec!["tandem".into(), "service".into(), "list".into()],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        seen.push_str(&up.ok(&a, &f.attacker_dir, &args));
    }
    for path in [format!("/v1/jobs/{job}"), "/v1/jobs".into(), "/v1/history".into(), "/v1/services".into(), "/v1/services/alicesvc".into()]
    {
        let (code, body) = up.tcp("GET", &path, Some(&tok), None);
        assert_eq!(code, 200, "{path}: {body}");
        seen.push_str(&body);
        let (code, body) = up.tcp("GET", &path, None, None);
        assert_eq!(code, 401, "{path} without a token: {body}");
    }
    assert!(seen.contains("alicesvc") && seen.contains("(hidden)"), "{seen}");
    assert!(!seen.contains(secret), "the attacker saw the victim's secret:\n{seen}");
    up.root(&["scancel", &job.to_string()]);
    std::fs::remove_dir_all(&f.root).ok();
}

/// SECURITY.md V2: `private_data = ["jobs", "usage"]` hides other users' jobs and services.
#[test]
fn private_data_hides_other_users_jobs_and_services() {
    let Some((v, a)) = users() else { return };
    let root = root_dir("private");
    let f = files(&root, &v, &a);
    let up = Up::start(&root, Some("[security]\nprivate_data = [\"jobs\", \"usage\"]\n"));
    let theirs = up.sbatch(&v, &f.victim_dir, &["-J", "alicejob", "-o", "/dev/null", "--hold", "--wrap", "true"]);
    let mine = up.sbatch(&a, &f.attacker_dir, &["-J", "mallojob", "-o", "/dev/null", "--hold", "--wrap", "true"]);
    // Positive control: each sees its own; root sees both.
    let q = up.ok(&a, &f.attacker_dir, &["squeue", "-h", "-o", "%i %j"]);
    assert!(q.contains(&format!("{mine} mallojob")) && !q.contains("alicejob"), "{q}");
    let all = String::from_utf8_lossy(&up.root(&["squeue", "-h", "-o", "%i %j"]).stdout).into_owned();
    assert!(all.contains("alicejob") && all.contains("mallojob"), "{all}");
    assert!(up.ok(&v, &f.victim_dir, &["squeue", "-h", "-o", "%j"]).contains("alicejob"));
    let o = up.run(&a, &f.attacker_dir, &["scontrol", "show", "job", &theirs.to_string()]);
    assert!(!o.status.success() && text(&o).contains("nvalid job id"), "{}", text(&o));
    let acct = up.ok(&a, &f.attacker_dir, &["sacct", "-a", "-n", "-P", "--format=JobID,JobName"]);
    assert!(acct.contains("mallojob") && !acct.contains("alicejob"), "{acct}");
    let prio = up.ok(&a, &f.attacker_dir, &["sprio"]);
    let ids: Vec<&str> = prio.lines().skip(1).filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(ids, vec![mine.to_string()], "{prio}");
    let tok = up.token(&a);
    let (_, body) = up.tcp("GET", "/v1/jobs?all=true", Some(&tok), None);
    assert!(body.contains("mallojob") && !body.contains("alicejob"), "{body}");
    let (code, _) = up.tcp("GET", &format!("/v1/jobs/{theirs}"), Some(&tok), None);
    assert_eq!(code, 404);
    up.root(&["scancel", &theirs.to_string(), &mine.to_string()]);
    std::fs::remove_dir_all(&f.root).ok();
}

/// SECURITY.md V3: only the owner (or root) acts on a job or a service.
#[test]
fn another_users_jobs_and_services_cannot_be_touched() {
    let Some((v, a)) = users() else { return };
    let root = root_dir("actions");
    let f = files(&root, &v, &a);
    let up = Up::start(&root, None);
    let running = up.sbatch(&v, &f.victim_dir, &["-o", "/dev/null", "--wrap", "sleep 300"]);
    let held = up.sbatch(&v, &f.victim_dir, &["-o", "/dev/null", "--hold", "--wrap", "true"]);
    up.wait_state(running, &["RUNNING"]);
    let spec = owned_file(
        &f.victim_dir.join("svc.toml"),
        "name = \"alicesvc\"\ncommand = [\"/bin/sleep\"]\nargs = [\"300\"]\noutput = \"/dev/null\"\n",
        v.uid,
        v.gid,
        0o644,
    );
    up.ok(&v, &f.victim_dir, &["tandem", "service", "apply", "-f", &spec.display().to_string()]);
    // Positive controls: the attacker does each of these to its own job and service.
    let own = up.sbatch(&a, &f.attacker_dir, &["-o", "/dev/null", "--hold", "--wrap", "true"]);
    up.ok(&a, &f.attacker_dir, &["scontrol", "update", &format!("JobId={own}"), "TimeLimit=5"]);
    up.ok(&a, &f.attacker_dir, &["scontrol", "release", &own.to_string()]);
    up.ok(&a, &f.attacker_dir, &["scontrol", "hold", &own.to_string()]);
    up.ok(&a, &f.attacker_dir, &["scancel", &own.to_string()]);
    let own_spec = owned_file(
        &f.attacker_dir.join("svc.toml"),
        "name = \"mallsvc\"\ncommand = [\"/bin/sleep\"]\nargs = [\"300\"]\noutput = \"/dev/null\"\n",
        a.uid,
        a.gid,
        0o644,
    );
    up.ok(&a, &f.attacker_dir, &["tandem", "service", "apply", "-f", &own_spec.display().to_string()]);
    up.ok(&a, &f.attacker_dir, &["tandem", "service", "scale", "mallsvc", "2"]);
    up.ok(&a, &f.attacker_dir, &["tandem", "service", "delete", "mallsvc"]);
    // sacct as Slurm's (no PrivateData here): a user other than root sees only their own jobs
    // unless they ask for others (-a, -u, -j); root sees everyone's.
    let ids = |out: String| out.lines().map(str::to_string).collect::<Vec<_>>();
    let acct = |args: &[&str]| {
        let mut all = vec!["sacct", "-n", "-X", "-P", "--format=JobID"];
        all.extend_from_slice(args);
        ids(up.ok(&a, &f.attacker_dir, &all))
    };
    let (r, h, o) = (running.to_string(), held.to_string(), own.to_string());
    // (The attacker's own: its job and its service's replicas.)
    let mine = acct(&[]);
    assert!(mine.contains(&o) && !mine.contains(&r) && !mine.contains(&h), "the caller's own jobs by default: {mine:?}");
    let every = acct(&["-a"]);
    assert!(every.contains(&o) && every.contains(&r) && every.contains(&h), "{every:?}");
    // (The victim's: its two jobs and its service's replica.)
    let theirs = acct(&["-u", VICTIM]);
    assert!(theirs.contains(&r) && theirs.contains(&h) && !theirs.contains(&o), "{theirs:?}");
    assert_eq!(acct(&["-u", &v.uid.to_string()]), theirs);
    assert_eq!(acct(&["-j", &r]), vec![r.clone()]);
    let all = ids(String::from_utf8_lossy(&up.root(&["sacct", "-n", "-X", "-P", "--format=JobID"]).stdout).into_owned());
    assert_eq!(all, every, "root: every user's");
    let before = (up.job(running), up.job(held));
    let r = running.to_string();
    let h = held.to_string();
    let attacks: Vec<Vec<&str>> = vec![
        vec!["scancel", &r],
        vec!["scancel", "--signal=KILL", &r],
        vec!["scontrol", "hold", &r],
        vec!["scontrol", "requeue", &r],
        vec!["scontrol", "release", &h],
        vec!["scancel", &h],
    ];
    let update = format!("JobId={h}");
    let mut attacks = attacks;
    attacks.push(vec!["scontrol", "update", &update, "TimeLimit=1"]);
    for args in &attacks {
        let o = up.run(&a, &f.attacker_dir, args);
        assert!(!o.status.success() && text(&o).contains("permission denied"), "{args:?}: {}", text(&o));
    }
    // A step in the victim's allocation, as srun inside a job would ask for one.
    let o = up.cmd(Some(&a), &f.attacker_dir, &["srun", "true"]).env("SLURM_JOB_ID", &r).output().unwrap();
    assert!(!o.status.success() && text(&o).contains("permission denied"), "srun: {}", text(&o));
    for args in [
        vec!["tandem", "service", "scale", "alicesvc", "3"],
        vec!["tandem", "service", "delete", "alicesvc"],
        vec!["tandem", "service", "rollout", "undo", "alicesvc"],
        vec!["tandem", "service", "apply", "-f", &own_spec.display().to_string().replace("svc.toml", "steal.toml")],
    ] {
        if args[3] == "-f" {
            owned_file(Path::new(args[4]), "name = \"alicesvc\"\ncommand = [\"/bin/sh\"]\nargs = [\"-c\", \"id\"]\n", a.uid, a.gid, 0o644);
        }
        let o = up.run(&a, &f.attacker_dir, &args);
        assert!(!o.status.success() && text(&o).contains("belongs to another user"), "{args:?}: {}", text(&o));
    }
    let after = (up.job(running), up.job(held));
    for k in ["JobState", "TimeLimit", "Restarts"] {
        assert_eq!((&before.0[k], &before.1[k]), (&after.0[k], &after.1[k]), "{k}");
    }
    let show = up.ok(&v, &f.victim_dir, &["tandem", "service", "show", "alicesvc"]);
    assert!(show.contains("/bin/sleep") && !show.contains("\"id\""), "{show}");
    up.root(&["scancel", &r, &h]);
    std::fs::remove_dir_all(&f.root).ok();
}

/// SECURITY.md M1: a closed output pipe and a non-UTF-8 argument.
#[test]
fn closed_pipes_and_odd_bytes_end_commands_quietly() {
    let Some((_v, a)) = users() else { return };
    let root = root_dir("misuse");
    let up = Up::start(&root, None);
    let wd = user_dir(&root.join("mallory"), &a, 0o755);
    for i in 0..30 {
        up.sbatch(&a, &wd, &["-o", "/dev/null", "--hold", "-J", &format!("j{i}"), "--wrap", "true"]);
    }
    for cmd in ["squeue", "sacct", "sinfo -N", "scontrol show job", "tandem --help"] {
        let prog = if cmd.starts_with("tandem") { cmd.replacen("tandem", bin(), 1) } else { format!("{}/{cmd}", up.shims.display()) };
        let o = Command::new("bash")
            .args(["-c", &format!("set -o pipefail; {prog} | head -c 1 > /dev/null; echo rc=$?")])
            .env("TANDEM_SERVER", format!("unix://{}", up.sock))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{cmd}: {err}");
    }
    use std::os::unix::ffi::OsStrExt;
    for prog in [up.shims.join("sbatch"), PathBuf::from(bin())] {
        let o = Command::new(&prog)
            .arg(std::ffi::OsStr::from_bytes(b"--wrap=\xff\xfe"))
            .env("TANDEM_SERVER", format!("unix://{}", up.sock))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("not valid UTF-8") && err.lines().count() == 1 && !err.contains("panicked"), "{err}");
    }
    let bad = wd.join("bad.sh");
    std::fs::write(&bad, b"#!/bin/sh\necho \xff\n").unwrap();
    let o = up.run(&a, &wd, &["sbatch", &bad.display().to_string()]);
    assert!(!o.status.success() && !text(&o).contains("panicked") && text(&o).trim().lines().count() == 1, "{}", text(&o));
    up.root(&["scancel", "-u", ATTACKER]);
    std::fs::remove_dir_all(&root).ok();
}

/// SECURITY.md N2: over TCP, clients accept only the cluster's controller, and the controller
/// speaks only TLS.
#[test]
fn tcp_clients_trust_only_the_cluster_ca_and_plain_http_gets_nothing() {
    let Some((_v, a)) = users() else { return };
    let root = root_dir("tls");
    let up = Up::start(&root, None);
    let ca = up.dir.join("controller/ca.pem");
    let tok = up.token(&a);
    let remote = |server: &str, ca: Option<&Path>| {
        let mut c = Command::new(bin());
        c.args(["queue"]).env_clear().env("TANDEM_SERVER", server).env("TANDEM_TOKEN", &tok).env("PATH", "/usr/bin:/bin");
        if let Some(ca) = ca {
            c.env("TANDEM_CA", ca);
        }
        c.output().unwrap()
    };
    // Positive control: the cluster's CA.
    let o = remote(&format!("https://{}", up.addr), Some(&ca));
    assert!(o.status.success(), "{}", text(&o));
    // No CA, another CA (an impostor's, or another cluster's): refused before any request.
    let o = remote(&format!("https://{}", up.addr), None);
    assert!(!o.status.success() && text(&o).contains("needs the cluster CA"), "{}", text(&o));
    // A CA file that is missing or holds no certificate: said so.
    let junk = root.join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    for bad in [root.join("missing.pem"), junk] {
        let o = remote(&format!("https://{}", up.addr), Some(&bad));
        assert!(!o.status.success() && text(&o).contains("as the cluster CA"), "{}", text(&o));
    }
    let other = root.join("other-ca.pem");
    let st = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=Tandem cluster CA",
        ])
        .arg("-keyout")
        .arg(root.join("other-ca.key"))
        .arg("-out")
        .arg(&other)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let o = remote(&format!("https://{}", up.addr), Some(&other));
    assert!(!o.status.success() && text(&o).contains("TLS with the controller"), "{}", text(&o));
    // Plain HTTP to the TLS port: no HTTP answer, so nothing a token could be sent to in clear.
    let o = remote(&format!("http://{}", up.addr), None);
    assert!(!o.status.success(), "{}", text(&o));
    let (code, _) = {
        let o = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", &format!("http://{}/healthz", up.addr)])
            .output()
            .unwrap();
        (String::from_utf8_lossy(&o.stdout).into_owned(), ())
    };
    assert_eq!(code, "000", "plain HTTP got an HTTP reply");
    // --insecure is for loopback only.
    let o =
        Command::new(bin()).args(["server", "--insecure", "--listen", "0.0.0.0:0", "--data"]).arg(root.join("insecure")).output().unwrap();
    assert!(!o.status.success() && text(&o).contains("loopback development only"), "{}", text(&o));
    std::fs::remove_dir_all(&root).ok();
}

/// A batch script of `size` bytes: a shell script that prints `say`, padded with comment lines
/// of `pad` (one byte each).
fn big_script(path: &Path, size: usize, say: &str, pad: char, u: &User) -> String {
    let mut s = format!("#!/bin/sh\necho {say}\n");
    while s.len() < size {
        let n = (size - s.len()).min(1000);
        s.push('#');
        s.extend(std::iter::repeat_n(pad, n.saturating_sub(2)));
        s.push('\n');
    }
    s.truncate(size);
    owned_file(path, &s, u.uid, u.gid, 0o644);
    path.display().to_string()
}

/// SECURITY.md M2: a batch script over `max_script_size` is refused with a message that says
/// its size, the limit and the setting (by the client before sending, and by the controller),
/// and a body over the controller's limit is refused, never killing `sbatch` with SIGPIPE.
#[test]
fn an_oversized_batch_script_is_refused_with_a_message_not_a_signal() {
    let Some((_v, a)) = users() else { return };
    let root = root_dir("bigscript");
    let up = Up::start(&root, None);
    let wd = user_dir(&root.join("mallory"), &a, 0o755);
    let sbatch = |script: &str| up.run(&a, &wd, &["sbatch", "-o", "big.out", script]);
    let how = |o: &Output| format!("status {:?}: {}", o.status, text(o));
    // Under Slurm's default limit (4 MB) and over axum's default body limit (2 MB): it runs.
    let s = big_script(&wd.join("three.sh"), 3 << 20, "three", 'x', &a);
    let o = sbatch(&s);
    assert!(o.status.success(), "a 3 MiB script under max_script_size is accepted: {}", how(&o));
    let id: u64 = String::from_utf8_lossy(&o.stdout).trim().rsplit(' ').next().unwrap().parse().unwrap();
    up.wait_state(id, &["COMPLETED"]);
    assert_eq!(std::fs::read_to_string(wd.join("big.out")).unwrap(), "three\n");
    // Over it: the client refuses before sending, naming the size, the limit and the setting.
    let s = big_script(&wd.join("five.sh"), 5 << 20, "five", 'x', &a);
    let o = sbatch(&s);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{}", how(&o));
    assert!(t.contains("5242880") && t.contains("4194304") && t.contains("max_script_size"), "{}", how(&o));
    // Under the limit in bytes but over the controller's body limit once encoded (control
    // bytes become \u0001 in JSON): the controller refuses while the body is still being sent;
    // sbatch reads and shows its refusal instead of dying of SIGPIPE.
    let s = big_script(&wd.join("ctl.sh"), 3 << 20, "ctl", '\u{1}', &a);
    let o = sbatch(&s);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{}", how(&o));
    assert!(t.contains("sbatch: error:") && t.contains("max_script_size") && !t.contains("panicked"), "{}", how(&o));
    drop(up);
    // A site's own limit: the controller refuses a script under the size the client checks
    // (1 MiB) itself, and the client learns the limit from the controller's configuration.
    let root2 = root_dir("bigscript2");
    let up = Up::start(&root2, Some("max_script_size = 65536\n"));
    for (size, name) in [(100_000, "small"), (2 << 20, "two")] {
        let s = big_script(&wd.join(format!("{name}.sh")), size, name, 'x', &a);
        let o = up.run(&a, &wd, &["sbatch", "-o", "big.out", &s]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{}", how(&o));
        assert!(t.contains(&size.to_string()) && t.contains("65536") && t.contains("max_script_size"), "{}", how(&o));
    }
    std::fs::remove_dir_all(&root).ok();
    std::fs::remove_dir_all(&root2).ok();
}

/// SECURITY.md P4: jobs, steps and services run under the umask of the command that submitted
/// them (`SLURM_UMASK`), and their output files are created 0666 under it: a user whose umask
/// is 077 gets 0600 files that no other user can read.
#[test]
fn jobs_steps_and_services_run_under_the_submitters_umask() {
    let Some((v, a)) = users() else { return };
    let root = root_dir("umask");
    let up = Up::start(&root, None);
    let wd = user_dir(&root.join("alice"), &v, 0o755);
    let mode = |p: &Path| std::fs::metadata(p).map(|m| m.mode() & 0o777).unwrap_or(0);
    let wait_for = |p: &Path| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !std::fs::read_to_string(p).is_ok_and(|s| s.ends_with('\n')) {
            assert!(Instant::now() < deadline, "{} was not written", p.display());
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    for (mask, want) in [("077", 0o600), ("002", 0o664)] {
        let batch = format!(
            "umask {mask}; sbatch --parsable -o out{mask}.log --wrap 'echo $SLURM_UMASK; umask; touch made{mask}; srun -o step{mask}.log echo step'"
        );
        let id: u64 = up.ok(&v, &wd, &["bash", "-c", &batch]).trim().parse().unwrap();
        let j = up.wait_state(id, &["COMPLETED", "FAILED"]);
        assert_eq!(j["JobState"], "COMPLETED", "{j:?}");
        let out = std::fs::read_to_string(wd.join(format!("out{mask}.log"))).unwrap();
        assert_eq!(out, format!("0{mask}\n0{mask}\n"), "SLURM_UMASK and the task's umask");
        for f in [format!("out{mask}.log"), format!("made{mask}"), format!("step{mask}.log")] {
            assert_eq!(mode(&wd.join(&f)), want, "umask {mask}: {f} is {:o}", mode(&wd.join(&f)));
        }
        // srun outside an allocation, and a service.
        up.ok(&v, &wd, &["bash", "-c", &format!("umask {mask}; srun -o direct{mask}.log echo direct")]);
        assert_eq!(mode(&wd.join(format!("direct{mask}.log"))), want, "umask {mask}: srun's own step");
        let spec = wd.join(format!("um{mask}.toml"));
        let body = format!("name = \"um{mask}\"\ncommand = [\"/bin/sh\", \"-c\", \"echo up; sleep 300\"]\noutput = \"svc{mask}.log\"\n");
        owned_file(&spec, &body, v.uid, v.gid, 0o644);
        up.ok(&v, &wd, &["bash", "-c", &format!("umask {mask}; {} service apply -f {}", bin(), spec.display())]);
        wait_for(&wd.join(format!("svc{mask}.log")));
        assert_eq!(mode(&wd.join(format!("svc{mask}.log"))), want, "umask {mask}: the service's output file");
        up.ok(&v, &wd, &["tandem", "service", "delete", &format!("um{mask}")]);
    }
    // The attacker cannot read the 0600 output of the victim.
    let o = up.run(&a, &wd, &["cat", &wd.join("out077.log").display().to_string()]);
    assert!(!o.status.success(), "{}", text(&o));
    std::fs::remove_dir_all(&root).ok();
}

/// The control characters a hostile name carries: OSC (retitle), BEL, CSI clear, the C1 CSI
/// (U+009B), DEL and a carriage return.
const EVIL: &str = "\u{1b}]0;pwned\u{7}\u{1b}[2J\u{9b}31mX\u{7f}\r";

/// Whether `out` holds a raw control character other than newline and tab.
fn raw_control(out: &[u8]) -> Option<String> {
    let s = String::from_utf8_lossy(out);
    s.char_indices()
        .find(|(_, c)| matches!(*c, '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}'))
        .map(|(i, c)| format!("{c:?} at byte {i}: {:?}", &s[i.saturating_sub(40)..(i + 40).min(s.len())]))
}

/// SECURITY.md V5: user-chosen strings (job and step names, comments, wckeys, paths,
/// node reasons, service commands, arguments echoed in errors) reach no terminal raw: every
/// command that prints one shows its control characters in caret notation (`^[`), `-P` output
/// included; `--json` is JSON (its strings escaped as JSON escapes them, C1 and DEL included).
#[test]
fn control_characters_in_user_strings_never_reach_a_terminal_raw() {
    let Some((v, a)) = users() else { return };
    let root = root_dir("escapes");
    let up = Up::start(&root, None);
    let wd = user_dir(&root.join("mallory"), &a, 0o755);
    let out = format!("out{EVIL}.log");
    // The attacker's jobs: one running with a named step, one finished, one held.
    let running =
        up.sbatch(&a, &wd, &["-J", EVIL, "--comment", EVIL, "--wckey", EVIL, "-o", &out, "--wrap", &format!("srun -J '{EVIL}' sleep 60")]);
    let done = up.sbatch(&a, &wd, &["-J", EVIL, "--comment", EVIL, "-o", &out, "--wrap", "true"]);
    up.wait_state(done, &["COMPLETED"]);
    let held = up.sbatch(&a, &wd, &["-J", EVIL, "--hold", "-o", &out, "--wrap", "true"]);
    up.wait_state(running, &["RUNNING"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !up.ok(&a, &wd, &["sacct", "-j", &running.to_string(), "-n", "-P", "--format=JobID"]).contains(&format!("{running}.0")) {
        assert!(Instant::now() < deadline, "the step did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A service whose command carries them (its name must be a DNS label).
    let spec = wd.join("evil.json");
    let body = serde_json::json!({"name": "evil", "command": ["/bin/sh", "-c", format!("sleep 300 # {EVIL}")], "output": format!("svc{EVIL}.log")});
    owned_file(&spec, &body.to_string(), a.uid, a.gid, 0o644);
    up.ok(&a, &wd, &["tandem", "service", "apply", "-f", &spec.display().to_string()]);
    // Root drains the node with a reason a user gave (copied from a ticket, say).
    let o = up.root(&["scontrol", "update", "NodeName=node1", "State=DRAIN", &format!("Reason={EVIL}")]);
    assert!(o.status.success(), "{}", text(&o));
    let (r, d, h) = (running.to_string(), done.to_string(), held.to_string());
    let step = format!("{running}.0");
    let bad_option = format!("--{EVIL}");
    let evil_format = format!("format={EVIL}");
    let commands: Vec<Vec<&str>> = vec![
        vec!["squeue"],
        vec!["squeue", "-l"],
        vec!["squeue", "-o", "%i %j %k %a %Z %o %r"],
        vec!["squeue", "-O", "JobID,Name,Comment,Account,WCKey,StdOut,WorkDir,Command,Reason"],
        vec!["sacct", "-a"],
        vec!["sacct", "-a", "--format=JobID,JobName%60,Account%60,Comment%60,WCKey%60,Reason%60,WorkDir%60"],
        vec!["sacct", "-a", "-P", "--format=JobID,JobName,Account,Comment,WCKey,Reason,WorkDir"],
        vec!["sacct", "-a", "-p", "--format=JobID,JobName,Account"],
        vec!["sacct", "-a", "-l"],
        vec!["scontrol", "show", "job"],
        vec!["scontrol", "show", "job", &r],
        vec!["scontrol", "show", "job", &d],
        vec!["scontrol", "show", "job", &h],
        vec!["scontrol", "-o", "show", "job", &r],
        vec!["scontrol", "show", "step", &step],
        vec!["scontrol", "show", "node", "node1"],
        vec!["sinfo", "-R"],
        vec!["sinfo", "-N", "-l"],
        vec!["sinfo", "-o", "%N %E %H"],
        vec!["sprio"],
        vec!["sshare", "-a"],
        vec!["sshare", "-a", "-P"],
        vec!["sstat", "-j", &r],
        vec!["sstat", "-j", &r, "-P", "--format=JobID,AveCPU"],
        vec!["sreport", "cluster", "AccountUtilizationByUser"],
        vec!["sreport", "user", "TopUsage"],
        vec!["tandem", "service", "list"],
        vec!["tandem", "service", "show", "evil"],
        vec!["tandem", "queue"],
        // Arguments echoed in errors.
        vec!["scontrol", "show", "job", EVIL],
        vec!["squeue", "-u", EVIL],
        vec!["squeue", "-j", EVIL],
        vec!["scancel", EVIL],
        vec!["sbatch", "-p", EVIL, "--wrap", "true"],
        vec!["sbatch", "-A", EVIL, "--wrap", "true"],
        vec!["sbatch", &bad_option],
        vec!["tandem", "service", "show", EVIL],
        vec!["sacct", "-j", EVIL],
        vec!["tandem", EVIL],
        vec!["tandem", "service", "scale", EVIL, "1"],
        vec!["sacctmgr", "show", "assoc"],
        vec!["sacctmgr", "-P", "show", "user", "withassoc"],
        vec!["sacctmgr", "show", EVIL],
        vec!["sacctmgr", "-i", "add", "account", EVIL],
        vec!["sacctmgr", "show", "assoc", &evil_format],
    ];
    let mut shown_somewhere = 0;
    for u in [Some(&v), Some(&a), None] {
        for args in &commands {
            let o = match u {
                Some(u) => up.run(u, &wd, args),
                None => up.cmd(None, &wd, args).output().unwrap(),
            };
            let who = u.map_or("root", |u| u.name.as_str());
            for (stream, bytes) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
                if let Some(bad) = raw_control(bytes) {
                    panic!("{who}: {args:?} printed a raw control character on {stream}: {bad}");
                }
            }
            shown_somewhere += usize::from(text(&o).contains("^[]0;pwned^G^[[2JM-^[31mX^?"));
        }
    }
    assert!(shown_somewhere >= 3 * 10, "the strings are shown, made visible ({shown_somewhere} outputs)");
    // --json is JSON: the strings as they were, escaped as JSON escapes them.
    for args in
        [vec!["squeue", "--json"], vec!["sacct", "-a", "--json"], vec!["scontrol", "show", "job", "--json", &r], vec!["sinfo", "--json"]]
    {
        let o = up.root(&args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        assert!(raw_control(&o.stdout).is_none(), "{args:?}: {:?}", raw_control(&o.stdout));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(j.to_string().contains("pwned") && String::from_utf8_lossy(&o.stdout).contains("\\u001b]0;pwned\\u0007"), "{args:?}");
        assert!(serde_json::to_string(&j).unwrap().contains(&serde_json::to_string(EVIL).unwrap()[1..10]), "{args:?}");
    }
    let o = up.run(&a, &wd, &["tandem", "service", "show", "evil", "--json"]);
    assert!(raw_control(&o.stdout).is_none() && String::from_utf8_lossy(&o.stdout).contains("\\u009b31mX\\u007f"), "{}", text(&o));
    up.root(&["scontrol", "update", "NodeName=node1", "State=RESUME"]);
    up.ok(&a, &wd, &["tandem", "service", "delete", "evil"]);
    up.root(&["scancel", &r, &h]);
    std::fs::remove_dir_all(&root).ok();
}

/// The README's QOS tiers: training below, inference above, the most important training above
/// both.
const TIERS: &str = "[[qos]]\nname = \"scavenger\"\npreempt_tier = 0\n[[qos]]\nname = \"serve\"\npriority = 100\npreempt_tier = 2\n\
                     [[qos]]\nname = \"critical\"\npriority = 200\npreempt_tier = 3\n";

/// The pending reason of job `id` (`squeue -o %r`).
fn reason_of(up: &Up, id: u64) -> String {
    String::from_utf8_lossy(&up.root(&["squeue", "-h", "-o", "%r", "-j", &id.to_string()]).stdout).trim().to_string()
}

/// SECURITY.md, A1: associations keep users to their accounts, to QOS that preempt nobody
/// unless granted, and to their limits; only administrators and operators change them.
#[test]
fn associations_keep_users_to_their_accounts_qos_and_limits() {
    let Some((v, a)) = users() else { return };
    let root = root_dir("assoc");
    let f = files(&root, &v, &a);
    let parts = format!(
        "{TIERS}[[partition]]\nname = \"batch\"\ndefault = true\n\
         [[partition]]\nname = \"lab\"\nallow_groups = [\"{VICTIM}\"]\nallow_accounts = [\"lab\"]\nallow_qos = [\"normal\"]\n"
    );
    let up = Up::start(&root, Some(&parts));
    let (wd, vd) = (&f.attacker_dir, &f.victim_dir);
    // Every job stored, finished ones included (the positive controls' `true` may end while
    // the attacks run).
    let jobs_of =
        |u: &User| String::from_utf8_lossy(&up.root(&["sacct", "-n", "-X", "-P", "--format=JobID", "-u", &u.name]).stdout).lines().count();
    // Positive controls: an ordinary user with nothing configured has an account of their own
    // and the QOS that preempt nobody.
    let own = up.sbatch(&a, wd, &["-o", "/dev/null", "--wrap", "true"]);
    up.sbatch(&a, wd, &["-o", "/dev/null", "-q", "scavenger", "--nice=100", "--wrap", "true"]);
    assert_eq!(up.ok(&a, wd, &["sacctmgr", "-nP", "show", "user", &a.name, "format=DefaultAccount"]).trim(), a.name);
    assert_eq!(up.job(own)["Account"], a.name, "no -A: the association's default account");
    // The attacks: a QOS that preempts others, another user's account, a negative nice, each
    // refused with Slurm's words, and nothing stored.
    let before = jobs_of(&a);
    for (args, words) in [
        (vec!["sbatch", "-q", "critical", "-N1", "--wrap", "sleep 60"], "Invalid qos specification"),
        (vec!["sbatch", "-q", "serve", "--wrap", "sleep 60"], "Invalid qos specification"),
        (vec!["sbatch", "-A", VICTIM, "--wrap", "true"], "Invalid account or account/partition combination specified"),
        (vec!["sbatch", "-A", "nosuchaccount", "--wrap", "true"], "Invalid account"),
        (vec!["sbatch", "--nice=-10000", "--wrap", "true"], "Invalid --nice value"),
        (vec!["srun", "-q", "critical", "true"], "Invalid qos specification"),
        (vec!["salloc", "--no-shell", "-A", VICTIM], "Invalid account"),
        (vec!["sbatch", "-p", "lab", "--wrap", "true"], "User's group not permitted to use this partition"),
    ] {
        let o = up.run(&a, wd, &args);
        assert!(!o.status.success() && text(&o).contains(words), "{args:?}: {}", text(&o));
    }
    assert_eq!(jobs_of(&a), before, "nothing refused was stored");
    let spec = owned_file(
        &wd.join("crit.toml"),
        "name = \"crit\"\ncommand = [\"/bin/sleep\"]\nargs = [\"300\"]\nqos = \"critical\"\noutput = \"/dev/null\"\n",
        a.uid,
        a.gid,
        0o644,
    );
    let o = up.run(&a, wd, &["tandem", "service", "apply", "-f", &spec.display().to_string()]);
    assert!(!o.status.success() && text(&o).contains("Invalid qos specification"), "{}", text(&o));
    // An ordinary user changes no accounting.
    for args in [
        vec!["sacctmgr", "-i", "add", "account", "evil"],
        vec!["sacctmgr", "-i", "add", "qos", "evil"],
        vec!["sacctmgr", "-i", "modify", "user", &a.name, "set", "AdminLevel=Administrator"],
        vec!["sacctmgr", "-i", "modify", "qos", "critical", "set", "PreemptTier=0"],
        vec!["sacctmgr", "-i", "delete", "qos", "critical"],
    ] {
        let o = up.run(&a, wd, &args);
        assert!(!o.status.success() && text(&o).contains("doesn't have privilege"), "{args:?}: {}", text(&o));
    }
    // An administrator grants: an account with a GPU-less group limit and the victim in it
    // with limits of their own and the serve QOS.
    let root_ok = |args: &[&str]| {
        let o = up.root(args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    root_ok(&["sacctmgr", "-i", "add", "account", "lab", "Description=the lab", "GrpTRES=cpu=64"]);
    root_ok(&["sacctmgr", "-i", "add", "user", &v.name, "account=lab", "MaxJobs=1", "MaxSubmitJobs=3", "QOS=normal,serve"]);
    assert_eq!(up.ok(&v, vd, &["sacctmgr", "-nP", "show", "user", &v.name, "format=DefaultAccount"]).trim(), "lab");
    // The partition's AllowGroups, AllowAccounts and AllowQos: the victim's group and account
    // pass, with its QOS only.
    let held = up.sbatch(&v, vd, &["-p", "lab", "--hold", "-o", "/dev/null", "--wrap", "true"]);
    up.ok(&v, vd, &["scancel", &held.to_string()]);
    let o = up.run(&v, vd, &["sbatch", "-p", "lab", "-q", "serve", "--wrap", "true"]);
    assert!(!o.status.success() && text(&o).contains("AllowQos"), "{}", text(&o));
    let listed = up.ok(&a, wd, &["sacctmgr", "-nP", "show", "assoc", "where", "account=lab", "format=Account,User,MaxJobs,MaxSubmit,QOS"]);
    assert!(listed.contains(&format!("lab|{}|1|3|normal,serve", v.name)), "{listed}");
    // Its limits, each with Slurm's reason or refusal.
    let j1 = up.sbatch(&v, vd, &["-o", "/dev/null", "--wrap", "sleep 300"]);
    up.wait_state(j1, &["RUNNING"]);
    let j2 = up.sbatch(&v, vd, &["-o", "/dev/null", "-q", "serve", "--wrap", "sleep 300"]);
    up.sbatch(&v, vd, &["-o", "/dev/null", "--wrap", "sleep 300"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while reason_of(&up, j2) != "AssocMaxJobsLimit" {
        assert!(Instant::now() < deadline, "job {j2}: {}", reason_of(&up, j2));
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = up.run(&v, vd, &["sbatch", "--wrap", "true"]);
    assert!(
        !o.status.success() && text(&o).contains("Job violates accounting/QOS policy") && text(&o).contains("MaxSubmitJobs"),
        "{}",
        text(&o)
    );
    let o = up.run(&v, vd, &["sbatch", "-q", "critical", "--wrap", "true"]);
    assert!(!o.status.success() && text(&o).contains("Invalid qos specification"), "{}", text(&o));
    // Changed without a restart: MaxJobs=2 lets the second start; a group CPU limit of one
    // keeps the third waiting with its reason; MaxWall refuses a longer limit.
    root_ok(&["sacctmgr", "-i", "modify", "user", "where", &format!("name={}", v.name), "set", "MaxJobs=3", "MaxSubmitJobs=-1"]);
    up.wait_state(j2, &["RUNNING"]);
    root_ok(&["sacctmgr", "-i", "modify", "account", "lab", "set", "GrpTRES=cpu=2", "MaxWall=10:00"]);
    let j4 = up.sbatch(&v, vd, &["-o", "/dev/null", "-t", "5", "--wrap", "sleep 300"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !reason_of(&up, j4).starts_with("AssocGrpCpu") {
        assert!(
            Instant::now() < deadline,
            "job {j4}: {}\n{}",
            reason_of(&up, j4),
            String::from_utf8_lossy(&up.root(&["squeue", "-o", "%i %u %a %q %T %r %C %p"]).stdout)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = up.run(&v, vd, &["sbatch", "-t", "1:00:00", "--wrap", "true"]);
    assert!(!o.status.success() && text(&o).contains("MaxWall"), "{}", text(&o));
    // A QOS limit per user (it counts running jobs: the victim's leave room first).
    root_ok(&["scancel", "-u", &v.name]);
    root_ok(&["sacctmgr", "-i", "modify", "qos", "scavenger", "set", "MaxJobsPerUser=1"]);
    let s1 = up.sbatch(&a, wd, &["-o", "/dev/null", "-q", "scavenger", "--wrap", "sleep 300"]);
    up.wait_state(s1, &["RUNNING"]);
    let s2 = up.sbatch(&a, wd, &["-o", "/dev/null", "-q", "scavenger", "--wrap", "sleep 300"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while reason_of(&up, s2) != "QOSMaxJobsPerUserLimit" {
        assert!(Instant::now() < deadline, "job {s2}: {}", reason_of(&up, s2));
        std::thread::sleep(Duration::from_millis(100));
    }
    // Survives a kill -9 of the controller (tandem up starts it again).
    let pid =
        String::from_utf8_lossy(&Command::new("pgrep").args(["-f", &format!("server .*{}", up.dir.display())]).output().unwrap().stdout)
            .lines()
            .next()
            .unwrap()
            .trim()
            .to_string();
    Command::new("kill").args(["-9", &pid]).status().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = up.run(&v, vd, &["sacctmgr", "-nP", "show", "assoc", "where", "account=lab", "format=User,MaxJobs"]);
        if o.status.success() && String::from_utf8_lossy(&o.stdout).contains(&format!("{}|3", v.name)) {
            break;
        }
        assert!(Instant::now() < deadline, "after the restart: {}", text(&o));
        std::thread::sleep(Duration::from_millis(200));
    }
    // scontrol show assoc_mgr: each limit with its use now; sshare: the victim's row under lab.
    let am = up.ok(&v, vd, &["scontrol", "show", "assoc_mgr", &format!("users={}", v.name), "flags=assoc"]);
    assert!(am.contains(&format!("Account=lab UserName={}({})", v.name, v.uid)) && am.contains("MaxJobs=3("), "{am}");
    let am = up.ok(&v, vd, &["scontrol", "show", "assoc_mgr", "accounts=lab", "flags=assoc"]);
    assert!(am.contains("GrpTRES=cpu=2("), "{am}");
    let sh = up.ok(&v, vd, &["sshare", "-a", "-P", "-A", "lab"]);
    assert!(sh.lines().any(|l| l.starts_with(&format!("lab|{}|1|", v.name))), "{sh}");
    // An operator made by sacctmgr may act on others' jobs; before, the attacker may not.
    let later = up.sbatch(&v, vd, &["-o", "/dev/null", "-t", "5", "--begin=now+1hour", "--wrap", "true"]);
    let o = up.run(&a, wd, &["scontrol", "hold", &later.to_string()]);
    assert!(!o.status.success(), "{}", text(&o));
    root_ok(&["sacctmgr", "-i", "modify", "user", &a.name, "set", "AdminLevel=Operator"]);
    up.ok(&a, wd, &["scontrol", "hold", &later.to_string()]);
    up.ok(&a, wd, &["sbatch", "--nice=-5", "-o", "/dev/null", "--wrap", "true"]);
    let o = up.run(&a, wd, &["sacctmgr", "-i", "modify", "user", &a.name, "set", "AdminLevel=Administrator"]);
    assert!(!o.status.success() && text(&o).contains("only an administrator"), "{}", text(&o));
    root_ok(&["scancel", "-u", &v.name]);
    root_ok(&["scancel", "-u", &a.name]);
    std::fs::remove_dir_all(&root).ok();
}

/// A metric's value in the controller's Prometheus text.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (k, v) = l.rsplit_once(' ')?;
        (k == name).then(|| v.parse().ok()).flatten()
    })
}

/// SECURITY.md F1, F2, F3: one user floods the controller (three processes making 5,100
/// connections, holding them with half-sent requests and sending requests in a loop over
/// others; a fourth holding unauthenticated TCP connections) while another user submits and
/// queries and the agent heartbeats. The attacker never holds more than its cap, is refused
/// at once beyond it, its half-sent requests are closed by the controller, every one of the
/// victim's and root's commands succeeds meanwhile, and the node never goes DOWN.
#[test]
fn one_users_flood_of_connections_leaves_the_controller_to_everyone_else() {
    let Some((v, a)) = users() else { return };
    let root = root_dir("flood");
    let wd = user_dir(&root.join("alice"), &v, 0o755);
    let up = Up::start(&root, None);
    let metrics = || {
        let o = Command::new("curl").args(["-s", "--unix-socket", &up.sock, "http://tandem/metrics"]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let flood = |args: &[&str]| {
        let mut all = vec!["tandem", "__flood"];
        all.extend_from_slice(args);
        up.cmd(Some(&a), &root, &all).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
    };
    let mut attackers: Vec<Child> =
        (0..3).map(|_| flood(&["--unix", &up.sock, "--attempts", "1700", "--hold", "400", "--rate", "200", "--requests", "8"])).collect();
    attackers.push(flood(&["--tcp", &up.addr, "--attempts", "500", "--hold", "500", "--rate", "250"]));
    // The attack is on once the attacker holds its cap.
    let limit = loop {
        let m = metrics();
        let (busiest, limit) = (metric(&m, "tandem_user_connections_busiest"), metric(&m, "tandem_user_connections_limit"));
        if let (Some(b), Some(l)) = (busiest, limit)
            && b >= l
        {
            break l;
        }
        assert!(attackers.iter_mut().all(|c| c.try_wait().unwrap().is_none()), "an attacker ended before it reached the cap");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(limit, 64.0, "the default max_connections_per_user");
    // The victim's and root's commands, round after round, while any attacker runs.
    let mut rounds = 0;
    let mut jobs = Vec::new();
    while attackers.iter_mut().any(|c| c.try_wait().unwrap().is_none()) {
        jobs.push(up.sbatch(&v, &wd, &["-o", "/dev/null", "--wrap", "true"]));
        let q = up.ok(&v, &wd, &["squeue", "--me", "-h", "-o", "%i"]);
        assert!(q.lines().count() <= jobs.len(), "{q}");
        let s = up.root(&["sinfo", "-h", "-N", "-o", "%N %T"]);
        assert!(s.status.success(), "root's sinfo: {}", text(&s));
        assert!(!String::from_utf8_lossy(&s.stdout).contains("down"), "a node went down: {}", text(&s));
        rounds += 1;
    }
    assert!(rounds >= 1);
    let mut total = (0.0, 0.0, 0.0);
    for (i, c) in attackers.into_iter().enumerate() {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "an attacker failed: {}", text(&o));
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let n = |k: &str| r[k].as_f64().unwrap();
        // On the Unix socket every connection is the controller's to close. (Over TCP, a
        // connect whose handshake the kernel's accept queue dropped looks established to the
        // attacker but never reached the controller: not counted.)
        if i < 3 {
            assert_eq!(n("outlived"), 0.0, "the controller closed every connection the attacker held: {r}");
        }
        total = (total.0 + n("attempts"), total.1 + n("refused"), total.2 + n("closed_by_server"));
    }
    assert_eq!(total.0, 5600.0, "the attackers made every attempt");
    assert!(total.1 > 0.0 && total.2 > 0.0, "refused at once beyond the cap, closed by the controller within it: {total:?}");
    let m = metrics();
    let peak = metric(&m, "tandem_user_connections_peak").unwrap();
    assert!(peak <= limit, "the attacker held {peak} connections at once, over the cap of {limit}");
    assert!(metric(&m, "tandem_connections_refused_total{reason=\"per_user\"}").unwrap() > 0.0);
    assert!(metric(&m, "tandem_connections_closed_total{reason=\"evicted\"}").unwrap() > 0.0, "the TCP flood's oldest were closed: {m}");
    assert!(metric(&m, "tandem_nodes{state=\"down\"}").is_none(), "{m}");
    // Every job of the victim's ran to its end.
    for id in jobs {
        up.wait_state(id, &["COMPLETED"]);
    }
    std::fs::remove_dir_all(&root).ok();
}

/// SECURITY.md, F4: one user's huge queue costs other users' listings nothing, and its owner's
/// listing one row per array; cancelling it is one request. Bytes, never times.
#[test]
fn a_huge_queue_costs_other_users_listings_nothing() {
    let Some((v, a)) = users() else { return };
    let root = root_dir("bigq");
    let f = files(&root, &v, &a);
    let up = Up::start(&root, None);
    let (vd, wd) = (&f.victim_dir, &f.attacker_dir);
    let bytes = || {
        let m = String::from_utf8_lossy(&up.root(&["curl", "-s", "--unix-socket", &up.sock, "http://x/metrics"]).stdout).into_owned();
        metric(&m, "tandem_response_bytes_total").unwrap_or_else(|| panic!("no reply bytes metric: {m}"))
    };
    // The attacker's queue: 3 arrays of 300 pending tasks; the victim's one job.
    for _ in 0..3 {
        up.sbatch(&a, wd, &["-o", "/dev/null", "--begin=now+1day", "--array=0-299", "--wrap", "true"]);
    }
    let own = up.sbatch(&v, vd, &["-o", "/dev/null", "--begin=now+1day", "--wrap", "true"]);
    // Pending tasks cost no record each: a window of each array is jobs, the rest its record.
    let m = String::from_utf8_lossy(&up.root(&["curl", "-s", "--unix-socket", &up.sock, "http://x/metrics"]).stdout).into_owned();
    let window = 64.0; // the default `array_window`
    assert_eq!(metric(&m, "tandem_job_records"), Some(3.0 * window + 1.0), "{m}");
    assert_eq!(metric(&m, "tandem_array_tail_tasks"), Some(900.0 - 3.0 * window), "{m}");
    assert_eq!(metric(&m, "tandem_queue_length"), Some(901.0), "{m}");
    let listed = |u: &User, args: &[&str]| {
        let b0 = bytes();
        let out = up.ok(u, wd, args);
        (out, bytes() - b0)
    };
    let (out, mine) = listed(&v, &["squeue", "--me", "-h", "-o", "%i"]);
    assert_eq!(out.trim(), own.to_string());
    let (_, one) = listed(&v, &["squeue", "-h", "-j", &own.to_string()]);
    // The victim's listing carries her one job (and the metrics reply read between), not 900.
    assert!(mine < 4.0 * one + 20_000.0, "squeue --me transferred {mine} bytes; one job's listing {one}");
    let (out, collapsed) = listed(&a, &["squeue", "--me", "-h", "-o", "%i"]);
    assert_eq!(out.lines().count(), 3, "one line per array: {out}");
    let (out, every) = listed(&a, &["squeue", "--me", "-h", "-r", "-o", "%i"]);
    assert_eq!(out.lines().count(), 900);
    assert!(collapsed * 20.0 < every, "collapsed listing {collapsed} bytes, every task {every}");
    // The attacker cannot cancel the victim's job by filter either: the controller chooses the
    // jobs and refuses each that is not the caller's.
    let o = up.run(&a, wd, &["scancel", "-u", &v.name]);
    assert!(!o.status.success() && text(&o).contains(&format!("Kill job error on job id {own}")), "{}", text(&o));
    assert_eq!(up.job(own)["JobState"], "PENDING");
    // A state filter is applied by the controller: none of the attacker's tasks is running.
    up.ok(&a, wd, &["scancel", "-u", &a.name, "-t", "RUNNING"]);
    let (out, _) = listed(&a, &["squeue", "--me", "-h", "-r", "-o", "%i"]);
    assert_eq!(out.lines().count(), 900);
    // Cancelling them all is one request that names no job (nothing is listed first), and
    // leaves the victim's job alone.
    let (_, cancel) = listed(&a, &["scancel", "-u", &a.name]);
    assert!(cancel * 10.0 < every, "scancel -u transferred {cancel} bytes; listing every task {every}");
    let left = String::from_utf8_lossy(&up.root(&["squeue", "-h", "-r", "-t", "PD", "-o", "%u"]).stdout).into_owned();
    assert_eq!(left.trim(), v.name, "only the victim's job is left pending: {left}");
    up.ok(&v, vd, &["scancel", &own.to_string()]);
    std::fs::remove_dir_all(&root).ok();
}

/// Binds a port as the attacker would: `python3 -c SQUAT PORT SECONDS MODE`. First a port of
/// its own (the positive control: "own port ok"); then, until SECONDS pass, PORT on 127.0.0.1
/// and 0.0.0.0 with and without SO_REUSEADDR and SO_REUSEPORT, printing "TOOK ..." for any bind
/// that works; with MODE `serve`, once it holds PORT it answers every request "mallory-squatter".
const SQUAT: &str = r#"
import http.server, socket, sys, time
port, secs, mode = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
own = socket.socket(); own.bind(("127.0.0.1", 0)); own.listen(); own.close(); print("own port ok", flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(s):
        s.send_response(200); s.end_headers(); s.wfile.write(b"mallory-squatter")
    def log_message(s, *a):
        pass
end = time.time() + secs
tries = 0
while time.time() < end:
    for host in ["127.0.0.1", "0.0.0.0"]:
        for opts in [(), ("SO_REUSEADDR",), ("SO_REUSEPORT",), ("SO_REUSEADDR", "SO_REUSEPORT")]:
            s = socket.socket()
            for o in opts:
                s.setsockopt(socket.SOL_SOCKET, getattr(socket, o), 1)
            tries += 1
            try:
                s.bind((host, port)); s.listen()
            except OSError:
                s.close(); continue
            print("TOOK", host, opts, flush=True)
            if mode == "serve":
                srv = http.server.HTTPServer(("127.0.0.1", 0), H, bind_and_activate=False)
                srv.socket.close(); srv.socket = s; srv.timeout = 0.2
                while time.time() < end:
                    srv.handle_request()
                sys.exit(0)
            s.close()
    time.sleep(0.005)
print("tries", tries, flush=True)
"#;

/// Issue 27, item 5 (SECURITY.md F5): the proxy's and the controller's ports stay `tandem
/// up`'s while they restart (it holds the listening sockets; each run inherits them), and a
/// restarted replica gets a fresh port, so a local user who takes the old one gets no request.
#[test]
fn ports_stay_with_their_owners_while_daemons_and_replicas_restart() {
    let Some((v, a)) = users() else { return };
    let root = root_dir("ports");
    let f = files(&root, &v, &a);
    let up = Up::launch(&root, None, &[]);
    let env = std::fs::read_to_string(up.dir.join("env")).unwrap();
    let proxy = env.lines().find_map(|l| l.strip_prefix("export TANDEM_PROXY=http://")).expect("a proxy").to_string();
    let proxy_port = proxy.rsplit_once(':').unwrap().1.to_string();
    let ctl_port = up.addr.rsplit_once(':').unwrap().1.to_string();
    let spec = owned_file(
        &f.victim_dir.join("svc.toml"),
        r#"name = "alicesvc"
command = ["python3", "-c", '''
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(s):
        s.send_response(200); s.end_headers(); s.wfile.write(b"alice-replica")
    def log_message(s, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
''', "$PORT"]
output = "/dev/null"
"#,
        v.uid,
        v.gid,
        0o644,
    );
    up.ok(&v, &f.victim_dir, &["tandem", "service", "apply", "-f", &spec.display().to_string()]);
    let get = || {
        let o = Command::new("curl").args(["-s", "-m", "10", &format!("http://{proxy}/s/alicesvc/")]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let until_served = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let got = get();
            assert!(!got.contains("mallory"), "{what}: a request reached the attacker");
            if got == "alice-replica" {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: the service is not served again: {got:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    until_served("at first");
    let squat = |port: &str, secs: &str| {
        let said = text(&up.run(&a, &f.attacker_dir, &["python3", "-c", SQUAT, port, secs, "bind"]));
        assert!(said.contains("own port ok") && said.contains("tries"), "the attacker's script did not run: {said}");
        said
    };
    let kill = |pattern: &str| {
        let o = Command::new("pkill").args(["-KILL", "-f", pattern]).output().unwrap();
        assert!(o.status.success(), "nothing matched {pattern}");
    };
    let dir = up.dir.display().to_string();
    // 1. The proxy dies: its port is never free while `tandem up` restarts it.
    kill(&format!("tandem proxy --listen-fd .*{dir}"));
    let said = squat(&proxy_port, "2");
    assert!(!said.contains("TOOK"), "the attacker took the proxy's port: {said}");
    until_served("after the proxy's restart");
    // 2. The controller dies: the same for its port.
    kill(&format!("tandem server --listen-fd .* --data {dir}/controller"));
    let said = squat(&ctl_port, "2");
    assert!(!said.contains("TOOK"), "the attacker took the controller's port: {said}");
    let deadline = Instant::now() + Duration::from_secs(60);
    // (node1 runs the replica: mixed or allocated, not idle.)
    while !String::from_utf8_lossy(&up.root(&["sinfo", "-N", "-h"]).stdout).contains("node1") {
        assert!(Instant::now() < deadline, "the controller did not come back");
        std::thread::sleep(Duration::from_millis(200));
    }
    // 3. The replica dies: once the agent has reported it, the attacker takes its old port (she
    // may: the port is free) and serves there; the restarted replica is on another port and
    // every request reaches it, none the attacker.
    let show = |what: &str| -> serde_json::Value {
        let out = up.ok(&v, &f.victim_dir, &["tandem", "service", "show", "alicesvc", "--json"]);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{what}: {e}: {out}"))
    };
    let old = show("before")["replicas"][0]["addr"].as_str().unwrap().to_string();
    let old_port = old.rsplit_once(':').unwrap().1.to_string();
    kill("alice-replica");
    let deadline = Instant::now() + Duration::from_secs(30);
    while show("after the kill")["replicas"][0]["state"] == "Ready" {
        assert!(Instant::now() < deadline, "the replica's end was not reported");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut squatter =
        up.cmd(Some(&a), &f.attacker_dir, &["python3", "-c", SQUAT, &old_port, "90", "serve"]).stdout(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let new = loop {
        let s = show("restarting");
        if s["replicas"][0]["state"] == "Ready" {
            break s["replicas"][0]["addr"].as_str().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "the replica did not restart: {s:#}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_ne!(new, old, "the replica restarted on the port it had");
    until_served("after the replica's restart");
    for _ in 0..10 {
        assert_eq!(get(), "alice-replica");
    }
    let _ = squatter.kill();
    let out = squatter.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    // The positive control: the attacker really held the old port meanwhile.
    assert!(said.contains("TOOK"), "the attacker never bound the free old port {old_port}: {said}");
    std::fs::remove_dir_all(&f.root).ok();
}

/// A registry in front of another (`PORT UPSTREAM`) that answers each blob 3 s late.
const SLOW_REGISTRY: &str = r#"
import http.server, sys, time, urllib.request, urllib.error
up = sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(s): s.fwd()
    def do_HEAD(s): s.fwd()
    def fwd(s):
        if "/blobs/" in s.path:
            time.sleep(3)
        hdrs = {k: v for k, v in s.headers.items() if k.lower() in ("accept", "authorization", "range")}
        req = urllib.request.Request("http://" + up + s.path, method=s.command, headers=hdrs)
        try:
            r = urllib.request.urlopen(req)
        except urllib.error.HTTPError as e:
            r = e
        body = r.read()
        s.send_response(r.status)
        for k, v in r.headers.items():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                s.send_header(k, v)
        s.send_header("Content-Length", str(len(body)))
        s.end_headers()
        if s.command != "HEAD":
            s.wfile.write(body)
    def log_message(s, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"#;

/// The container tools, or `None` (skip) with the reason; under CI a missing tool fails.
fn container_tools() -> Option<()> {
    if let Err(why) = common::container_tools() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "the container tests cannot run: {why}");
        eprintln!("skipped: {why}");
        return None;
    }
    Some(())
}

/// Containers on a host whose only cgroup hierarchy is v2 (current Debian's): the cluster runs
/// in a mount namespace where `/sys/fs/cgroup` is the unified hierarchy alone (this machine's
/// is hybrid), so runc sees cgroup v2; a step's tasks run in their image as their user, share
/// the step's container, and `scancel` and a time limit end them and it.
#[test]
fn container_tasks_run_on_a_cgroup_v2_host() {
    let Some((v, _)) = users() else { return };
    let Some(()) = container_tools() else { return };
    let root = root_dir("containers-v2");
    let img = root.join("img");
    std::fs::create_dir_all(&img).unwrap();
    let reg = common::Registry::start(&root.join("reg"), false, &[]);
    reg.push(&common::busybox_image(&img, "Bars V2"), "bars/v2", None);
    let host = reg.host();
    let prefix = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        "umount -R /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup && exec \"$@\"",
        "sh",
    ];
    let up = Up::launch_under(&root, None, &["--no-proxy", "--cpus-per-agent", "8"], 1, &[("TANDEM_INSECURE_REGISTRIES", &host)], &prefix);
    let vdir = user_dir(&root.join("alice"), &v, 0o755);
    let image = format!("--container-image={host}#bars/v2:1");
    // A time limit (a minute: Slurm's granularity) reaches the processes inside; started first,
    // it runs out while the rest of the test goes on.
    let limited = vdir.join("limited.sh");
    owned_file(&limited, &format!("#!/bin/sh\nsrun {image} sleep 300\n"), v.uid, v.gid, 0o755);
    let tj = up.sbatch(&v, &vdir, &["-t", "1", "-o", "/dev/null", &limited.display().to_string()]);
    let o = up.run(
        &v,
        &vdir,
        &["srun", "-l", "-n2", &image, "sh", "-c", "echo v1=$(grep -c \" - cgroup \" /proc/self/mountinfo) v2=$(grep -c \" - cgroup2 \" /proc/self/mountinfo) uid=$(id -u) $(grep PRETTY /etc/os-release) ns=$(readlink /proc/self/ns/pid)"],
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let agent = std::fs::read_to_string(up.dir.join("node1.log")).unwrap_or_default();
    for r in 0..2 {
        // The unified hierarchy alone, inside as on the host.
        assert!(out.contains(&format!("{r}: v1=0 v2=")) && !out.contains("v2=0"), "{out}");
        assert!(out.contains(&format!("uid={} PRETTY_NAME=\"Bars V2\"", v.uid)), "{out}\n{agent}");
    }
    let ns: Vec<&str> = out.lines().filter_map(|l| l.split_once("ns=").map(|x| x.1)).collect();
    assert!(ns.len() == 2 && ns[0] == ns[1], "one container for the step: {out}");
    let script = vdir.join("long.sh");
    owned_file(&script, &format!("#!/bin/sh\nsrun {image} sleep 300\n"), v.uid, v.gid, 0o755);
    let id = up.sbatch(&v, &vdir, &["-o", "/dev/null", &script.display().to_string()]);
    let mine = |j: u64| container_holders(&up.dir.join("node1/containers").join(format!("{j}.")).display().to_string());
    let deadline = Instant::now() + Duration::from_secs(30);
    while mine(id).is_empty() {
        assert!(Instant::now() < deadline, "the container never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    up.ok(&v, &vdir, &["scancel", &id.to_string()]);
    up.wait_state(id, &["CANCELLED"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !mine(id).is_empty() {
        assert!(Instant::now() < deadline, "the cancelled step's container outlived it");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!mine(tj).is_empty(), "the limited job's container is not running");
    let deadline = Instant::now() + Duration::from_secs(150);
    let j = loop {
        let j = up.job(tj);
        if j.get("JobState").is_some_and(|s| s != "RUNNING" && s != "PENDING" && s != "CONFIGURING") {
            break j;
        }
        assert!(Instant::now() < deadline, "the time limit never ended the job: {j:?}");
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(j["JobState"], "TIMEOUT", "{j:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !mine(tj).is_empty() {
        assert!(Instant::now() < deadline, "the timed-out step's container outlived it");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// SECURITY.md, "Containers": a task in an image from a registry runs as its user, in a user
/// namespace, on 2 nodes x 2 tasks (Enroot's and Docker's spellings); `--container-remap-root`
/// makes the user root inside and nothing more; mounts keep the user's rights; each node pulls
/// each blob once; a private image in the node's cache runs only for a user whose credentials
/// the registry takes; bad images and mounts fail with the reason in `scontrol show job`.
#[test]
fn container_tasks_run_as_their_user_from_a_registry_and_no_further() {
    let Some((v, a)) = users() else { return };
    let Some(()) = container_tools() else { return };
    let root = root_dir("containers");
    let img = root.join("img");
    std::fs::create_dir_all(&img).unwrap();
    let layout = common::busybox_image(&img, "Bars BusyBox 1");
    let open_reg = common::Registry::start(&root.join("reg-open"), false, &[]);
    open_reg.push(&layout, "bars/busybox", None);
    let ca_dir = root.join("reg-private");
    std::fs::create_dir_all(&ca_dir).unwrap();
    let ca = common::test_ca(&ca_dir);
    let private = common::Registry::start(&ca_dir, true, &[("alice", "secret")]);
    private.push(&layout, "team/private", Some("alice:secret"));
    // A slow way to the open registry (each blob answered 3 s late), to watch a pull.
    let slow_port = common::free_port();
    let mut slow = Command::new("python3")
        .args(["-c", SLOW_REGISTRY, &slow_port.to_string(), &open_reg.host()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let insecure = open_reg.host();
    let insecure_list = format!("{insecure},127.0.0.1:{slow_port}");
    let ca_s = ca.display().to_string();
    // A fake CDI specification of each node's 2 GPUs: device nodes bound from /dev/null.
    let cdi = root.join("cdi");
    std::fs::create_dir_all(&cdi).unwrap();
    std::fs::write(
        cdi.join("fake.yaml"),
        "cdiVersion: \"0.5.0\"\nkind: nvidia.com/gpu\ndevices:\n\
         - name: \"0\"\n  containerEdits:\n    deviceNodes: [{path: /dev/fakegpu0, hostPath: /dev/null}]\n\
         - name: \"1\"\n  containerEdits:\n    deviceNodes: [{path: /dev/fakegpu1, hostPath: /dev/null}]\n\
         containerEdits:\n  env: [FAKE_CDI=yes]\n",
    )
    .unwrap();
    let cdi_s = cdi.display().to_string();
    let up = Up::launch_with(
        &root,
        None,
        &["--gpus-per-agent", "2"],
        2,
        &[("TANDEM_INSECURE_REGISTRIES", &insecure_list), ("TANDEM_REGISTRY_CA", &ca_s), ("TANDEM_CDI_SPEC_DIRS", &cdi_s)],
    );
    let vdir = user_dir(&root.join("alice"), &v, 0o755);
    let adir = user_dir(&root.join("mallory"), &a, 0o755);
    let ro = user_dir(&vdir.join("ro"), &v, 0o755);
    owned_file(&ro.join("data"), "read only\n", v.uid, v.gid, 0o644);
    let rw = user_dir(&vdir.join("rw"), &v, 0o755);
    // Root's, which alice cannot enter.
    let secret = root.join("root-only");
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(secret.join("f"), "root's\n").unwrap();

    // 2 nodes x 2 tasks, both spellings, then as root inside.
    let enroot = format!("{insecure}#bars/busybox:1");
    let docker = format!("{insecure}/bars/busybox:1");
    let (ro_s, rw_s) = (ro.display(), rw.display());
    let script = format!(
        "#!/bin/sh\n\
         srun -l --container-image={enroot} sh -c 'echo rank=$SLURM_PROCID uid=$(id -u) map=$(cat /proc/self/uid_map | tr -s \" \" | tr \"\\n\" \";\"); grep PRETTY /etc/os-release; echo ns=$(readlink /proc/self/ns/pid)$(readlink /proc/self/ns/ipc)$(readlink /proc/self/ns/mnt)'\n\
         srun -N1 -n1 --container-image={enroot} --container-name=keep --container-writable --container-remap-root sh -c 'echo kept > /kept && mkdir /etc/mine && echo mine > /etc/mine/f && rm /etc/os-release && echo PRETTY_NAME=Replaced > /etc/os-release && echo wrote'\n\
         srun -N1 -n1 --container-image={enroot} --container-name=keep --container-writable --container-remap-root sh -c 'echo named: $(cat /kept /etc/mine/f) $(cat /etc/os-release)'\n\
         srun -N1 -n1 --container-image={enroot} --container-name=keep sh -c 'echo should-not-run' || echo named-refused\n\
         srun -N1 -n1 --container-image={enroot} sh -c 'echo unnamed: $(cat /kept 2>&1)'\n\
         srun -N1 -n1 --container-image={enroot} sh -c 'echo private > /tmp/t && echo tmp: $(cat /tmp/t)'\n\
         srun -N1 -n1 --container-image={docker} --container-remap-root --container-mounts={ro_s}:/ro:ro,{rw_s}:/rw sh -c 'id -u; touch /rw/by-root; touch /ro/nope 2>&1 || echo ro-refused; cat /ro/data'\n\
         srun -N1 -n1 --container-image={enroot} --container-mounts={rw_s}:/rw sh -c 'touch /rw/by-user && echo made'\n"
    );
    let sp = vdir.join("c.sh");
    owned_file(&sp, &script, v.uid, v.gid, 0o755);
    let id =
        up.sbatch(&v, &vdir, &["-N2", "--ntasks-per-node=2", "-o", &vdir.join("c.out").display().to_string(), &sp.display().to_string()]);
    let j = up.wait_state(id, &["COMPLETED", "FAILED"]);
    let out = std::fs::read_to_string(vdir.join("c.out")).unwrap_or_default();
    assert_eq!(j["JobState"], "COMPLETED", "{out}");
    for r in 0..4 {
        assert!(out.contains(&format!("{r}: rank={r} uid={}", v.uid)), "task {r} runs as alice: {out}");
    }
    assert_eq!(out.matches("PRETTY_NAME=\"Bars BusyBox 1\"").count(), 4, "{out}");
    // A user namespace: the user's own uid and one subordinate id, not the host's whole range.
    assert!(out.contains(&format!("{0} {0} 1", v.uid)) && !out.contains("4294967295"), "{out}");
    // The tasks of the step on one node share its container (PID, IPC and mount namespaces);
    // the other node's have their own.
    let ns = |r: u32| out.lines().find_map(|l| l.strip_prefix(&format!("{r}: ns="))).unwrap_or_else(|| panic!("rank {r}: {out}"));
    assert!(ns(0) == ns(1) && ns(2) == ns(3) && ns(0) != ns(2), "{out}");
    // A named, writable container: the next step of the job finds what the first wrote (a new
    // file anywhere, an image file replaced); another step's container does not.
    assert!(out.contains("wrote") && out.contains("named: kept mine PRETTY_NAME=Replaced"), "{out}");
    assert!(out.contains("unnamed: cat: can't open '/kept'"), "{out}");
    // ... and keeps the kind of root it was made with: a step asking for another is refused.
    assert!(out.contains("named-refused") && out.contains("a named container keeps") && !out.contains("should-not-run"), "{out}");
    // A container's /tmp is its own: nothing reaches the node's shared copy of the image.
    assert!(out.contains("tmp: private"), "{out}");
    for node in ["node1", "node2"] {
        for e in std::fs::read_dir(up.dir.join(node).join("images/rootfs")).unwrap().flatten().filter(|e| e.path().is_dir()) {
            assert_eq!(std::fs::read_dir(e.path().join("tmp")).map(|d| d.count()).unwrap_or(0), 0, "{}", e.path().display());
        }
    }
    assert!(out.contains("\n0\n") || out.starts_with("0\n"), "remap-root: uid 0 inside: {out}");
    assert!(out.contains("ro-refused") && out.contains("read only"), "{out}");
    assert!(out.contains("made"), "{out}");
    // Root inside is the user outside: what it makes is the user's.
    for f in ["by-root", "by-user"] {
        let m = std::fs::metadata(rw.join(f)).unwrap();
        assert_eq!((m.uid(), m.gid()), (v.uid, v.gid), "{f}");
    }
    assert!(!ro.join("nope").exists());
    // Each node fetched each blob once (the layer and the config), for 3 steps and 6 tasks;
    // nothing was left half-made.
    assert_eq!(open_reg.blob_gets("bars/busybox"), 2 * 2, "{:?}", open_reg.gets());
    for node in ["node1", "node2"] {
        let tmp = up.dir.join(node).join("images/tmp");
        assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "{}", tmp.display());
        // The named container goes when the node hears that its job ended.
        let left = || {
            std::fs::read_dir(up.dir.join(node).join("containers"))
                .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
                .unwrap_or_default()
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !left().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(left(), Vec::<std::ffi::OsString>::new(), "containers removed");
    }

    // A private image: alice's credentials (Docker's config.json, read on the node as alice)
    // open it; mallory, with none, is refused though the image is in the node's cache now.
    let docker_cfg = user_dir(&vdir.join("docker"), &v, 0o700);
    owned_file(
        &docker_cfg.join("config.json"),
        &format!("{{\"auths\":{{\"{}\":{{\"auth\":\"YWxpY2U6c2VjcmV0\"}}}}}}", private.host()),
        v.uid,
        v.gid,
        0o600,
    );
    let pimg = format!("{}#team/private:1", private.host());
    let run = |u: &User, dir: &Path, env: &str, img: &str, more: &str| {
        let s = format!("#!/bin/sh\n{env} srun -N1 -n1 --container-image={img} {more} cat /etc/os-release\n");
        let p = dir.join(format!("p{}.sh", img.len() + more.len()));
        owned_file(&p, &s, u.uid, u.gid, 0o755);
        let id = up.sbatch(
            u,
            dir,
            &[
                "-N1",
                "-w",
                "node1",
                "-o",
                &dir.join(format!("p{id}.out", id = img.len() + more.len())).display().to_string(),
                &p.display().to_string(),
            ],
        );
        (id, up.wait_state(id, &["COMPLETED", "FAILED"]))
    };
    let (_, j) = run(&v, &vdir, &format!("DOCKER_CONFIG={}", docker_cfg.display()), &pimg, "");
    assert_eq!(j["JobState"], "COMPLETED", "alice reads her private image");
    let (mid, j) = run(&a, &adir, "", &pimg, "");
    assert_eq!(j["JobState"], "FAILED", "mallory has no credentials for it");
    let why = up.job(mid).get("Message").cloned().unwrap_or_default();
    assert!(why.contains("team/private") && why.contains("authorized"), "{why}");
    // Nor can she read its files in the node's cache, by any path: the unpacked images are
    // root's; a task reaches its own through its container's directory.
    for node in ["node1", "node2"] {
        let rootfs = up.dir.join(node).join("images/rootfs");
        for e in std::fs::read_dir(&rootfs).unwrap().flatten().filter(|e| e.path().is_dir()) {
            let f = e.path().join("etc/os-release");
            let o = up.run(&a, &adir, &["cat", &f.display().to_string()]);
            assert!(!o.status.success() && text(&o).contains("Permission denied"), "{}: {}", f.display(), text(&o));
        }
    }

    // Bad input: no such image; a mount source alice cannot reach; a malformed mount.
    let (nid, j) = run(&v, &vdir, "", &format!("{insecure}#bars/nothing:1"), "");
    assert_eq!(j["JobState"], "FAILED");
    let why = up.job(nid).get("Message").cloned().unwrap_or_default();
    assert!(why.contains("bars/nothing"), "{why}");
    let (sid, j) = run(&v, &vdir, "", &enroot, &format!("--container-mounts={}:/s", secret.join("f").display()));
    assert_eq!(j["JobState"], "FAILED");
    let why = up.job(sid).get("Message").cloned().unwrap_or_default();
    assert!(why.contains("--container-mounts") && why.contains("Permission denied"), "{why}");
    // A registry that serves a layer whose bytes do not match its digest (its stored copy
    // damaged): the step fails with that reason, and nothing of it is kept.
    let bad_dir = img.join("bad");
    std::fs::create_dir_all(&bad_dir).unwrap();
    let bad_layout = common::busybox_image(&bad_dir, "Bars Bad");
    open_reg.push(&bad_layout, "bars/bad", None);
    let json = |p: PathBuf| serde_json::from_slice::<serde_json::Value>(&std::fs::read(p).unwrap()).unwrap();
    let blob = |d: &str| bad_layout.join("blobs/sha256").join(d.trim_start_matches("sha256:"));
    let index = json(bad_layout.join("index.json"));
    let manifest = json(blob(index["manifests"][0]["digest"].as_str().unwrap()));
    let layer = manifest["layers"][0]["digest"].as_str().unwrap().trim_start_matches("sha256:").to_string();
    let stored = root.join("reg-open/storage/docker/registry/v2/blobs/sha256").join(&layer[..2]).join(&layer).join("data");
    let mut bytes = std::fs::read(&stored).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&stored, bytes).unwrap();
    let (did, j) = run(&v, &vdir, "", &format!("{insecure}#bars/bad:1"), "");
    assert_eq!(j["JobState"], "FAILED");
    let why = up.job(did).get("Message").cloned().unwrap_or_default();
    assert!(why.contains("bars/bad") && why.contains(&layer[..12]), "{why}");
    for node in ["node1", "node2"] {
        let cache = up.dir.join(node).join("images");
        assert!(!cache.join("blobs/sha256").join(&layer).exists(), "the damaged layer was kept on {node}");
        assert_eq!(std::fs::read_dir(cache.join("tmp")).unwrap().count(), 0, "{node}");
    }
    let o = up.run(&v, &vdir, &["srun", "-N1", "--container-image", &enroot, "--container-mounts=/a:rel", "true"]);
    assert!(!o.status.success() && text(&o).contains("must be an absolute path"), "{}", text(&o));
    let o = up.run(&v, &vdir, &["salloc", &format!("--container-image={enroot}"), "true"]);
    assert!(!o.status.success() && text(&o).contains("give --container-image to srun inside it"), "{}", text(&o));
    let o = up.run(&v, &vdir, &["srun", "-N1", "--container-image=UPPER/x", "true"]);
    assert!(!o.status.success() && text(&o).contains("invalid --container-image"), "{}", text(&o));

    // GPUs: a job holding GPU 0 of node1, then one with a GPU of node1 (so GPU 1): inside, its
    // device alone, numbered 0, with the specification's common edits.
    let hold = up.sbatch(&v, &vdir, &["-w", "node1", "--gpus=1", "-o", "/dev/null", "--wrap", "sleep 60"]);
    up.wait_state(hold, &["RUNNING"]);
    let g = format!(
        "#!/bin/sh\necho host=$CUDA_VISIBLE_DEVICES\nsrun --container-image={enroot} sh -c 'echo devices=$(ls /dev | grep fakegpu | tr \"\\n\" \" \") inside=$CUDA_VISIBLE_DEVICES cdi=$FAKE_CDI'\n"
    );
    let gp = owned_file(&vdir.join("g.sh"), &g, v.uid, v.gid, 0o755);
    let gid =
        up.sbatch(&v, &vdir, &["-w", "node1", "--gpus=1", "-o", &vdir.join("g.out").display().to_string(), &gp.display().to_string()]);
    assert_eq!(
        up.wait_state(gid, &["COMPLETED", "FAILED"])["JobState"],
        "COMPLETED",
        "{}",
        std::fs::read_to_string(vdir.join("g.out")).unwrap_or_default()
    );
    let out = std::fs::read_to_string(vdir.join("g.out")).unwrap();
    assert!(out.contains("host=1") && out.contains("devices=fakegpu1 inside=0 cdi=yes"), "{out}");
    up.ok(&v, &vdir, &["scancel", &hold.to_string()]);

    // While a node pulls a job's image, the job is CONFIGURING, the pull's progress in its
    // message; it then runs (the pull counts in its run time and against its limit).
    let slowimg = root.join("img-slow");
    std::fs::create_dir_all(&slowimg).unwrap();
    open_reg.push(&common::busybox_image(&slowimg, "Bars Slow"), "bars/slow", None);
    let cj = up.sbatch(
        &v,
        &vdir,
        &["-w", "node1", &format!("--container-image=127.0.0.1:{slow_port}#bars/slow:1"), "-o", "/dev/null", "--wrap", "true"],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let seen = loop {
        let j = up.job(cj);
        if j["JobState"] == "CONFIGURING" {
            break j;
        }
        assert!(j["JobState"] != "COMPLETED" && Instant::now() < deadline, "never seen CONFIGURING: {j:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(seen.get("Message").is_some_and(|m| m.contains("bars/slow") && m.contains("on node1")), "{seen:?}");
    let st = String::from_utf8_lossy(&up.root(&["squeue", "-h", "-o", "%t", "-j", &cj.to_string()]).stdout).trim().to_string();
    assert!(st == "CF" || st == "R", "{st}");
    let done = up.wait_state(cj, &["COMPLETED", "FAILED"]);
    assert_eq!(done["JobState"], "COMPLETED");
    // `true` ran at once: the run time is the pull's (2 blobs, 3 s each).
    let secs: Vec<u64> = done["RunTime"].split(':').map(|x| x.parse().unwrap()).collect();
    assert!(secs.iter().fold(0, |a, x| a * 60 + x) >= 5, "{done:?}");
    // srun outside an allocation waits through CONFIGURING (its image new to node2).
    let o = up.run(
        &v,
        &vdir,
        &["srun", "-w", "node2", &format!("--container-image=127.0.0.1:{slow_port}#bars/slow:1"), "cat", "/etc/os-release"],
    );
    assert!(o.status.success() && text(&o).contains("Bars Slow"), "{}", text(&o));
    let _ = slow.kill();

    // A local OCI layout (oci:DIR:TAG), alice's own and private: read by her process on the
    // node and sent to the agent; mallory, who cannot read it, cannot run it, nor can a tag
    // the layout lacks.
    let local = user_dir(&vdir.join("local"), &v, 0o700);
    let llayout = common::busybox_image(&local, "Bars Local");
    assert!(Command::new("chown").args(["-R", &format!("{}:{}", v.uid, v.gid)]).arg(&local).status().unwrap().success());
    let lref = format!("--container-image=oci:{}:1", llayout.display());
    let o = up.run(&v, &vdir, &["srun", "-w", "node1", &lref, "cat", "/etc/os-release"]);
    assert!(o.status.success() && text(&o).contains("Bars Local"), "{}", text(&o));
    let o = up.run(&v, &vdir, &["srun", "-w", "node1", &lref, "cat", "/etc/os-release"]);
    assert!(o.status.success() && text(&o).contains("Bars Local"), "again, from the cache: {}", text(&o));
    let o = up.run(&a, &adir, &["srun", "-w", "node1", &lref, "cat", "/etc/os-release"]);
    assert!(!o.status.success() && text(&o).contains("Permission denied") && !text(&o).contains("Bars Local"), "{}", text(&o));
    let o = up.run(&v, &vdir, &["srun", "-w", "node1", &format!("--container-image=oci:{}:9", llayout.display()), "true"]);
    assert!(!o.status.success() && text(&o).contains("no image tagged \"9\""), "{}", text(&o));

    // MPICH ranks in a container (an image of the host's MPICH files) on one node, over srun's
    // PMI-2: they share the step's container, so MPI's shared memory works between them (each
    // reads the next one's window by load, not by message).
    let mpicc = ["mpicc.mpich", "mpicc"].into_iter().find(|c| common::have(c));
    assert!(mpicc.is_some() || std::env::var("CI").as_deref() != Ok("true"), "CI=true but MPICH (mpicc.mpich) is missing");
    if let Some(mpicc) = mpicc {
        let mdir = img.join("mpi");
        std::fs::create_dir_all(&mdir).unwrap();
        std::fs::write(mdir.join("shm.c"), MPI_SHM).unwrap();
        let prog = mdir.join("shm");
        let o = Command::new(mpicc).arg("-o").arg(&prog).arg(mdir.join("shm.c")).output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        let ldd = Command::new("ldd").arg(&prog).output().unwrap();
        let mut files: Vec<(PathBuf, PathBuf)> = text(&ldd)
            .lines()
            .filter_map(|l| l.split_whitespace().find(|w| w.starts_with('/')).map(|p| (PathBuf::from(p), PathBuf::from(p))))
            .collect();
        files.push((prog.clone(), PathBuf::from("/opt/mpi/shm")));
        open_reg.push(&common::busybox_image_with(&mdir, "Bars MPICH", &files), "bars/mpich", None);
        let o = up.run(
            &v,
            &vdir,
            &["srun", "-w", "node1", "-n2", "--mpi=pmi2", &format!("--container-image={insecure}#bars/mpich:1"), "/opt/mpi/shm"],
        );
        let out = text(&o);
        assert!(o.status.success(), "{out}");
        for r in 0..2 {
            assert!(
                out.contains(&format!(
                    "rank {r} of 2: ranks sharing memory 2, read {} from the next one's memory, sum 1",
                    100 + (r + 1) % 2
                )),
                "{out}"
            );
        }
    }

    // Other users' processes are not seen from inside (a PID namespace of its own): mallory's
    // bare job runs beside alice's container, which sees its own processes only.
    let m = up.sbatch(&a, &adir, &["-w", "node2", "-o", "/dev/null", "--wrap", "sleep 61"]);
    up.wait_state(m, &["RUNNING"]);
    let pid_out = vdir.join("pids.out");
    let pj = up.sbatch(
        &v,
        &vdir,
        &[
            "-w",
            "node2",
            &format!("--container-image={enroot}"),
            "-o",
            &pid_out.display().to_string(),
            "--wrap",
            "cat /proc/[0-9]*/cmdline | tr '\\0' ' '; echo; echo pids=$(ls -d /proc/[0-9]* | wc -l)",
        ],
    );
    assert_eq!(up.wait_state(pj, &["COMPLETED", "FAILED"])["JobState"], "COMPLETED");
    let out = std::fs::read_to_string(&pid_out).unwrap();
    assert!(!out.contains("sleep 61") && out.contains("tandem-init"), "{out}");
    up.ok(&a, &adir, &["scancel", &m.to_string()]);

    // The agent ends a step's container by the pid its user's directory names: mallory names
    // alice's container's process 1 in hers; her step ends, alice's container runs on.
    let victim = up.sbatch(&v, &vdir, &["-w", "node2", &format!("--container-image={enroot}"), "-o", "/dev/null", "--wrap", "sleep 60"]);
    up.wait_state(victim, &["RUNNING"]);
    let cdir = up.dir.join("node2").join("containers");
    let deadline = Instant::now() + Duration::from_secs(30);
    let victim_pid = loop {
        let found = std::fs::read_dir(&cdir).unwrap().flatten().find_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            (n.starts_with(&format!("{victim}.")) && n.split('.').count() == 3)
                .then(|| std::fs::read_to_string(e.path().join("pid")).ok())
                .flatten()
        });
        if let Some(p) = found.filter(|p| !p.trim().is_empty()) {
            break p.trim().to_string();
        }
        assert!(Instant::now() < deadline, "alice's container never started");
        std::thread::sleep(Duration::from_millis(100));
    };
    let plant = format!(
        "#!/bin/sh\nsrun --container-image={enroot} sleep 3 &\nsleep 2\nfor d in {0}/$SLURM_JOB_ID.0.0 {0}/$SLURM_JOB_ID.1.0; do [ -f $d/pid ] && rm -f $d/pid && echo {victim_pid} > $d/pid && echo planted; done\nwait\n",
        cdir.display()
    );
    let pp = adir.join("plant.sh");
    owned_file(&pp, &plant, a.uid, a.gid, 0o755);
    let plant_out = adir.join("plant.out");
    let mj = up.sbatch(&a, &adir, &["-w", "node2", "-o", &plant_out.display().to_string(), &pp.display().to_string()]);
    assert_eq!(up.wait_state(mj, &["COMPLETED", "FAILED"])["JobState"], "COMPLETED");
    let planted = std::fs::read_to_string(&plant_out).unwrap_or_default();
    assert!(planted.contains("planted"), "the attack was not made: {planted}");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(up.job(victim)["JobState"], "RUNNING", "alice's container was killed by mallory's step's end");
    assert!(std::path::Path::new(&format!("/proc/{victim_pid}")).exists(), "alice's container's process 1 is gone");
    // ... and mallory's own container, whose process 1 her file no longer names, ended all the same.
    let hers = container_holders(&cdir.join(format!("{mj}.")).display().to_string());
    assert!(hers.is_empty(), "mallory's container outlived her step: {hers:?}");
    up.ok(&v, &vdir, &["scancel", &victim.to_string()]);

    // --signal reaches the script inside its container (5 s into a 1-minute limit).
    let sig_out = vdir.join("sig.out");
    let sj = up.sbatch(
        &v,
        &vdir,
        &[
            "-t",
            "1",
            "--signal=B:USR1@55",
            &format!("--container-image={enroot}"),
            "-o",
            &sig_out.display().to_string(),
            "--wrap",
            "trap 'echo got-usr1; exit 0' USR1; sleep 100 & wait",
        ],
    );
    assert_eq!(up.wait_state(sj, &["COMPLETED", "FAILED", "TIMEOUT", "CANCELLED"])["JobState"], "COMPLETED");
    assert!(std::fs::read_to_string(&sig_out).unwrap().contains("got-usr1"));

    // sbatch --container-image: the batch script itself runs in the image.
    let bid = up.sbatch(
        &v,
        &vdir,
        &[
            &format!("--container-image={enroot}"),
            "-o",
            &vdir.join("b.out").display().to_string(),
            "--wrap",
            "grep PRETTY /etc/os-release; id -u",
        ],
    );
    assert_eq!(up.wait_state(bid, &["COMPLETED", "FAILED"])["JobState"], "COMPLETED");
    let out = std::fs::read_to_string(vdir.join("b.out")).unwrap();
    assert!(out.contains("Bars BusyBox 1") && out.contains(&v.uid.to_string()), "{out}");

    // Ten single-task jobs of two users at once on one node, from an image no node has: each
    // blob is fetched once; a later job fetches none and asks for the manifest once.
    let ten = root.join("img-ten");
    std::fs::create_dir_all(&ten).unwrap();
    open_reg.push(&common::busybox_image(&ten, "Bars Ten"), "bars/ten", None);
    let ten_ref = format!("--container-image={insecure}#bars/ten:1");
    let mut ids = Vec::new();
    for i in 0..10 {
        let (u, d) = if i % 2 == 0 { (&v, &vdir) } else { (&a, &adir) };
        ids.push(up.sbatch(u, d, &["-w", "node1", &ten_ref, "-o", "/dev/null", "--wrap", "grep -q 'Bars Ten' /etc/os-release"]));
    }
    for id in &ids {
        assert_eq!(up.wait_state(*id, &["COMPLETED", "FAILED"])["JobState"], "COMPLETED", "job {id}");
    }
    assert_eq!(open_reg.blob_gets("bars/ten"), 2, "one layer and one configuration, once: {:?}", open_reg.gets());
    let manifests = open_reg.manifest_gets("bars/ten");
    let id = up.sbatch(&a, &adir, &["-w", "node1", &ten_ref, "-o", "/dev/null", "--wrap", "true"]);
    assert_eq!(up.wait_state(id, &["COMPLETED", "FAILED"])["JobState"], "COMPLETED");
    assert_eq!((open_reg.blob_gets("bars/ten"), open_reg.manifest_gets("bars/ten")), (2, manifests + 1));

    // kill -9 of the agent while a container task runs: adopted, its exit code reaches sacct.
    let kid =
        up.sbatch(&v, &vdir, &["-w", "node2", &format!("--container-image={enroot}"), "-o", "/dev/null", "--wrap", "sleep 3; exit 7"]);
    up.wait_state(kid, &["RUNNING"]);
    std::thread::sleep(Duration::from_millis(500));
    // The oldest match: the agent, not its tasks' keepers (forks of it, with its command line).
    let o =
        Command::new("pkill").args(["-o", "-KILL", "-f", &format!("tandem agent .*--name node2 .*{}", up.dir.display())]).output().unwrap();
    assert!(o.status.success(), "no agent node2 to kill");
    let deadline = Instant::now() + Duration::from_secs(60);
    let j = loop {
        let j = up.job(kid);
        if j.get("JobState").is_some_and(|s| s != "RUNNING") {
            break j;
        }
        assert!(Instant::now() < deadline, "the container job outlived its agent's restart: {j:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!((j["JobState"].as_str(), j["ExitCode"].as_str()), ("FAILED", "7:0"), "{j:?}");

    // A service whose replicas run in the image (busybox's httpd), reached through the proxy.
    let www = user_dir(&vdir.join("www"), &v, 0o755);
    owned_file(&www.join("index.html"), "alice-container\n", v.uid, v.gid, 0o644);
    let env = std::fs::read_to_string(up.dir.join("env")).unwrap();
    let proxy = env.lines().find_map(|l| l.strip_prefix("export TANDEM_PROXY=http://")).expect("a proxy").to_string();
    let svc = owned_file(
        &vdir.join("web.toml"),
        &format!(
            "name = \"web\"\nimage = \"{docker}\"\nmounts = [\"{}:/www:ro\"]\ncommand = [\"httpd\", \"-f\", \"-p\", \"$PORT\", \"-h\", \"/\"]\nreplicas = 2\noutput = \"/dev/null\"\n",
            www.display()
        ),
        v.uid,
        v.gid,
        0o644,
    );
    up.ok(&v, &vdir, &["tandem", "service", "apply", "-f", &svc.display().to_string()]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = Command::new("curl").args(["-s", "-m", "10", &format!("http://{proxy}/s/web/www/index.html")]).output().unwrap();
        if String::from_utf8_lossy(&o.stdout).contains("alice-container") {
            break;
        }
        assert!(Instant::now() < deadline, "the container service is not served: {}", text(&o));
        std::thread::sleep(Duration::from_millis(200));
    }
    let o = Command::new("pgrep").args(["-u", &v.uid.to_string(), "-x", "httpd"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 2, "two replicas, each httpd of alice's");
    // A node dies with everything it runs (its agent, the tasks' keepers, the containers) under a
    // stream of requests: none fails, as with bare replicas.
    let show = |up: &Up| -> serde_json::Value {
        serde_json::from_str(&up.ok(&v, &vdir, &["tandem", "service", "show", "web", "--json"])).unwrap()
    };
    let before = show(&up);
    let nodes: Vec<String> = before["replicas"].as_array().unwrap().iter().map(|r| r["node"].as_str().unwrap_or("").to_string()).collect();
    let ids = |s: &serde_json::Value| -> Vec<String> { s["replicas"].as_array().unwrap().iter().map(|r| r["id"].to_string()).collect() };
    assert!(nodes.len() == 2 && nodes[0] != nodes[1], "one replica on each node: {nodes:?}");
    let victim = nodes[1].clone();
    let url = format!("http://{proxy}/s/web/www/index.html");
    let load = std::thread::spawn(move || {
        let o = Command::new(bin())
            .args(["bench", "load", &url, "--json", "--requests", "1500", "--rate", "250", "--concurrency", "16"])
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)))
    });
    std::thread::sleep(Duration::from_secs(2));
    let pauses: Vec<String> = std::fs::read_dir(up.dir.join(&victim).join("containers"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("pid")).ok())
        .map(|p| p.trim().to_string())
        .collect();
    assert!(!pauses.is_empty(), "no container runs on {victim}");
    // The agent and its keepers (forks of it, with its command line), then the containers.
    let o =
        Command::new("pkill").args(["-KILL", "-f", &format!("tandem agent .*--name {victim} .*{}", up.dir.display())]).output().unwrap();
    assert!(o.status.success(), "no agent {victim} to kill");
    for p in &pauses {
        let _ = Command::new("kill").args(["-KILL", p]).status();
    }
    let r = load.join().unwrap();
    eprintln!("a container service through kill -9 of {victim} and its containers: {} requests, {} failed", r["sent"], r["failed"]);
    assert_eq!(r["sent"], 1500, "{r:#}");
    assert_eq!(r["failed"], 0, "requests failed while a node died: {r:#}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = show(&up);
        let ready = now["replicas"].as_array().unwrap().iter().filter(|r| r["state"] == "Ready").count();
        // Replaced: a replica that was not there before the kill.
        if ready == 2 && ids(&now).iter().any(|i| !ids(&before).contains(i)) {
            break;
        }
        assert!(Instant::now() < deadline, "the lost replica was not replaced: {now:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // A new image rolls out like any other change: the replicas are replaced, one at a time,
    // by ones of the new image (its /etc/os-release), still served meanwhile.
    let o = Command::new("curl").args(["-s", "-m", "10", &format!("http://{proxy}/s/web/etc/os-release")]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("Bars BusyBox 1"), "{}", text(&o));
    let changed =
        std::fs::read_to_string(&svc).unwrap().replace(&format!("image = \"{docker}\""), &format!("image = \"{insecure}/bars/ten:1\""));
    owned_file(&svc, &changed, v.uid, v.gid, 0o644);
    up.ok(&v, &vdir, &["tandem", "service", "apply", "-f", &svc.display().to_string()]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = Command::new("curl").args(["-s", "-m", "10", &format!("http://{proxy}/s/web/etc/os-release")]).output().unwrap();
        if String::from_utf8_lossy(&o.stdout).contains("Bars Ten") {
            break;
        }
        assert!(Instant::now() < deadline, "the new image never served: {}", text(&o));
        std::thread::sleep(Duration::from_millis(200));
    }
    let o = Command::new("curl").args(["-s", "-m", "10", &format!("http://{proxy}/s/web/www/index.html")]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("alice-container"), "the mount came along: {}", text(&o));
    // `kubectl exec` into a replica joins its container: the image's files, the mount, and the
    // replica's own httpd beside it (one PID namespace); the replica serves on after.
    let kubectl = common::venv().join("bin/kubectl");
    if kubectl.exists() {
        up.ok(&v, &vdir, &["tandem", "token", "--kubeconfig", "kc"]);
        let kube = |args: &[&str]| -> Output {
            let mut c = up.cmd(Some(&v), &vdir, &[kubectl.to_str().unwrap()]);
            c.args(args).env("KUBECONFIG", vdir.join("kc")).env("HOME", &vdir);
            c.output().unwrap()
        };
        let o = kube(&["get", "pods", "-l", "tandem.dev/service=web", "-o", "jsonpath={.items[0].metadata.name}"]);
        let pod = String::from_utf8_lossy(&o.stdout).trim().to_string();
        assert!(o.status.success() && !pod.is_empty(), "{}", text(&o));
        let o = kube(&["exec", &pod, "--", "sh", "-c", "cat /etc/os-release /www/index.html; ps -o comm; exit 6"]);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert_eq!(o.status.code(), Some(6), "{}", text(&o));
        // The image's /etc/os-release (the old image's or the new: the rollout may still go on).
        assert!(out.contains("PRETTY_NAME=\"Bars") && out.contains("alice-container") && out.contains("httpd"), "{}", text(&o));
        let o = Command::new("curl").args(["-s", "-m", "10", &format!("http://{proxy}/s/web/www/index.html")]).output().unwrap();
        assert!(String::from_utf8_lossy(&o.stdout).contains("alice-container"), "the replica serves on after exec: {}", text(&o));
        // `kubectl create job` (a protobuf body) runs its command in the image, as her.
        let o = kube(&["create", "job", "osr", &format!("--image={docker}"), "--", "sh", "-c", "cat /etc/os-release; id -u"]);
        assert!(o.status.success(), "{}", text(&o));
        let o = kube(&["wait", "--for=condition=Complete", "job/osr", "--timeout=60s"]);
        assert!(o.status.success(), "{}\n{}", text(&o), text(&kube(&["describe", "job,pods", "-l", "job-name=osr"])));
        let o = kube(&["logs", "job/osr"]);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(out.contains("PRETTY_NAME=\"Bars BusyBox 1") && out.contains(&v.uid.to_string()), "{}", text(&o));
        assert!(kube(&["delete", "job", "osr"]).status.success());
        // A ConfigMap and a Secret as files in the image: a directory of the ConfigMap's keys,
        // a Secret's key under another name with its own mode, one key alone as a file
        // (`subPath`); hers, read-only; and an `emptyDir` she writes. Nothing of them is left
        // on the node after.
        assert!(kube(&["create", "configmap", "vcfg", "--from-literal=app.conf=mode=fast", "--from-literal=level=3"]).status.success());
        assert!(kube(&["create", "secret", "generic", "vsec", "--from-literal=token=s3cret"]).status.success());
        let job = format!(
            "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: vols}}\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: c\n        image: {docker}\n        command: [sh, -c, 'ls /etc/cfg; cat /etc/cfg/app.conf /etc/sec/tok /etc/app.conf; stat -c \"%a %u\" /etc/sec/tok; touch /etc/cfg/x 2>/dev/null || echo read-only; echo w > /scratch/f && cat /scratch/f']\n        volumeMounts:\n        - {{name: cfg, mountPath: /etc/cfg}}\n        - {{name: sec, mountPath: /etc/sec}}\n        - {{name: cfg, mountPath: /etc/app.conf, subPath: app.conf}}\n        - {{name: tmp, mountPath: /scratch}}\n      volumes:\n      - {{name: tmp, emptyDir: {{}}}}\n      - {{name: cfg, configMap: {{name: vcfg}}}}\n      - {{name: sec, secret: {{secretName: vsec, items: [{{key: token, path: tok, mode: 256}}]}}}}\n"
        );
        owned_file(&vdir.join("vols.yaml"), &job, v.uid, v.gid, 0o644);
        let o = kube(&["apply", "-f", "vols.yaml"]);
        assert!(o.status.success(), "{}", text(&o));
        let o = kube(&["wait", "--for=condition=Complete", "job/vols", "--timeout=60s"]);
        assert!(o.status.success(), "{}\n{}", text(&o), text(&kube(&["describe", "job,pods", "-l", "job-name=vols"])));
        let out = String::from_utf8_lossy(&kube(&["logs", "job/vols"]).stdout).into_owned();
        let want = format!("app.conf\nlevel\nmode=fasts3cretmode=fast400 {}\nread-only\nw\n", v.uid);
        assert!(out.ends_with(&want), "{out:?}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left: Vec<PathBuf> = std::fs::read_dir(&up.dir)
                .unwrap()
                .flatten()
                .flat_map(|n| std::fs::read_dir(n.path().join("volumes")).into_iter().flatten().flatten().map(|e| e.path()))
                .collect();
            if left.is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "volumes left on the node: {left:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
        // Without an image there is nowhere to mount them: a 422 naming the field.
        let bare = job.replace(&format!("        image: {docker}\n"), "").replace("name: vols", "name: bare");
        owned_file(&vdir.join("bare.yaml"), &bare, v.uid, v.gid, 0o644);
        let o = kube(&["apply", "-f", "bare.yaml"]);
        assert!(!o.status.success() && text(&o).contains("volumeMounts: Forbidden: volumes need an image"), "{}", text(&o));
    } else {
        assert!(std::env::var("CI").is_err(), "kubectl is missing under CI=true (tests/clients/setup.sh installs it)");
    }
    up.ok(&v, &vdir, &["tandem", "service", "delete", "web"]);
    // A replica's stop (SIGTERM, which busybox's httpd leaves to its default) reaches the
    // program inside: the replicas end well before the 30 s grace's SIGKILL.
    let deadline = Instant::now() + Duration::from_secs(15);
    while Command::new("pgrep").args(["-u", &v.uid.to_string(), "-x", "httpd"]).output().unwrap().status.success() {
        assert!(Instant::now() < deadline, "the deleted service's replicas are still running");
        std::thread::sleep(Duration::from_millis(100));
    }

    // scancel reaches the processes inside: nothing of the step is left.
    let s = format!("#!/bin/sh\nsrun -N1 -n1 --container-image={enroot} sleep 300\n");
    let p = vdir.join("long.sh");
    owned_file(&p, &s, v.uid, v.gid, 0o755);
    let lid = up.sbatch(&v, &vdir, &["-N1", "-o", "/dev/null", &p.display().to_string()]);
    let deadline = Instant::now() + Duration::from_secs(30);
    // This job's own processes, not any `sleep 300` of alice's: the cgroup v2 test's time-limited
    // container step runs one for a minute beside this test.
    while !job_processes(lid, &vdir).iter().any(|p| p.split_once(' ').is_some_and(|(_, c)| c == "sleep 300")) {
        assert!(Instant::now() < deadline, "the container's sleep never started: {:?}", job_processes(lid, &vdir));
        std::thread::sleep(Duration::from_millis(100));
    }
    up.ok(&v, &vdir, &["scancel", &lid.to_string()]);
    up.wait_state(lid, &["CANCELLED"]);
    // None of the job is left: the batch script, srun, runc, the container's processes.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !job_processes(lid, &vdir).is_empty() {
        assert!(Instant::now() < deadline, "processes of the cancelled job are left: {:?}", job_processes(lid, &vdir));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// An MPI program whose ranks on one node write a shared window and read each other's part
/// by load (`MPI_Win_allocate_shared`), then sum their ranks.
const MPI_SHM: &str = r#"#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r, n, ns, du, sum = 0, *mine, *theirs;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &ns);
    MPI_Win w;
    MPI_Win_allocate_shared(sizeof(int), sizeof(int), MPI_INFO_NULL, node, &mine, &w);
    MPI_Win_lock_all(0, w);
    *mine = 100 + r;
    MPI_Win_sync(w);
    MPI_Barrier(node);
    MPI_Win_sync(w);
    MPI_Aint sz;
    MPI_Win_shared_query(w, (r + 1) % ns, &sz, &du, &theirs);
    MPI_Allreduce(&r, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d of %d: ranks sharing memory %d, read %d from the next one's memory, sum %d\n", r, n, ns, *theirs, sum);
    MPI_Win_unlock_all(w);
    MPI_Win_free(&w);
    MPI_Finalize();
    return 0;
}
"#;

/// An HTTP request to the controller's TCP port with a body of `content_type`: status and body.
fn kube_req(up: &Up, method: &str, path: &str, token: Option<&str>, body: &[u8], content_type: &str) -> (u16, serde_json::Value) {
    let file = up.dir.join(format!("body-{}", std::process::id()));
    std::fs::write(&file, body).unwrap();
    let mut c = Command::new("curl");
    c.args(["-s", "--http1.1", "--cacert", &up.dir.join("controller/ca.pem").display().to_string(), "-X", method, "-w", "\n%{http_code}"])
        .arg(format!("https://{}{path}", up.addr))
        .args(["-H", &format!("content-type: {content_type}"), "--data-binary"])
        .arg(format!("@{}", file.display()));
    if let Some(t) = token {
        c.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    let o = c.output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let (body, code) = out.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), serde_json::from_str(body).unwrap_or(serde_json::Value::String(body.to_string())))
}

/// `kubectl logs` with two users: Alice reads her Pod's output; Mallory cannot read it (403),
/// nor read through her own job a file she may not read (its output named `/etc/shadow`: the
/// node reads as her); malformed and unsupported options are 400s; nothing is read twice.
#[test]
fn another_user_cannot_read_the_output_of_a_pod_through_the_kubernetes_api() {
    let Some((alice, mallory)) = users() else { return };
    let root = root_dir("kube-logs");
    let up = Up::start(&root, None);
    let (ta, tm) = (up.token(&alice), up.token(&mallory));
    let ad = user_dir(&root.join("alice-work"), &alice, 0o700);
    let md = user_dir(&root.join("mallory-work"), &mallory, 0o755);
    let id = up.sbatch(&alice, &ad, &["-o", "secret-%j.out", "--wrap", "echo alice-private-output; sleep 60"]);
    up.wait_state(id, &["RUNNING"]);
    let log = format!("/api/v1/namespaces/default/pods/job-{id}-0/log");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, body) = kube_req(&up, "GET", &log, Some(&ta), b"", "application/json");
        if code == 200 && body.to_string().contains("alice-private-output") {
            break;
        }
        assert!(Instant::now() < deadline, "Alice never read her own output: {code} {body}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (code, st) = kube_req(&up, "GET", &log, Some(&tm), b"", "application/json");
    assert_eq!((code, st["kind"].as_str(), st["reason"].as_str()), (403, Some("Status"), Some("Forbidden")), "{st}");
    assert!(!st.to_string().contains("alice-private-output"), "{st}");
    let (code, _) = kube_req(&up, "GET", &log, None, b"", "application/json");
    assert_eq!(code, 401, "no identity, no output");
    for (query, want) in [
        ("tailLines=-1", 400),
        ("tailLines=abc", 400),
        ("limitBytes=0", 400),
        ("previous=true", 400),
        ("timestamps=true", 400),
        ("sinceSeconds=60", 400),
        ("container=other", 400),
    ] {
        let (code, st) = kube_req(&up, "GET", &format!("{log}?{query}"), Some(&ta), b"", "application/json");
        assert_eq!((code, st["kind"].as_str()), (want, Some("Status")), "{query}: {st}");
    }
    let (code, st) = kube_req(&up, "GET", "/api/v1/namespaces/default/pods/job-999999-0/log", Some(&ta), b"", "application/json");
    assert_eq!(code, 404, "{st}");
    // Mallory's own job whose output file is one she may not read: the node reads it as her.
    let own = up.sbatch(&mallory, &md, &["-o", "/etc/shadow", "--wrap", "sleep 60"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let st = loop {
        let (code, st) =
            kube_req(&up, "GET", &format!("/api/v1/namespaces/default/pods/job-{own}-0/log"), Some(&tm), b"", "application/json");
        if code != 400 {
            assert_eq!(code, 500, "{st}");
            break st;
        }
        assert!(Instant::now() < deadline, "Mallory's job never ran: {st}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(st["message"].as_str().is_some_and(|m| m.contains("/etc/shadow") && m.contains("ermission denied")), "{st}");
    assert!(!st.to_string().contains("root:"), "a line of /etc/shadow was sent: {st}");
    let _ = up.root(&["scancel", &id.to_string(), &own.to_string()]);
    let _ = std::fs::remove_dir_all(&root);
}

/// `kubectl exec` with two users: Alice runs a command in her Pod (the real kubectl, over
/// WebSocket: it runs as her); Mallory's exec into it is refused (403, through kubectl and as a
/// bare request, GET or SPDY's POST) and nothing of hers runs there; no identity is a 401;
/// malformed options are 400s.
#[test]
fn another_user_cannot_exec_into_a_pod_through_the_kubernetes_api() {
    let Some((alice, mallory)) = users() else { return };
    let kubectl = common::venv().join("bin/kubectl");
    if !kubectl.exists() {
        assert!(std::env::var("CI").is_err(), "kubectl is missing under CI=true (tests/clients/setup.sh installs it)");
        eprintln!("skipped: {} is missing (run tests/clients/setup.sh)", kubectl.display());
        return;
    }
    let root = root_dir("kube-exec");
    let up = Up::start(&root, None);
    let (ta, tm) = (up.token(&alice), up.token(&mallory));
    let ad = user_dir(&root.join("alice-work"), &alice, 0o700);
    let md = user_dir(&root.join("mallory-work"), &mallory, 0o700);
    let id = up.sbatch(&alice, &ad, &["--wrap", "sleep 120"]);
    up.wait_state(id, &["RUNNING"]);
    let pod = format!("job-{id}-0");
    let kube = |u: &User, dir: &Path, args: &[&str]| -> Output {
        let mut c = up.cmd(Some(u), dir, &[kubectl.to_str().unwrap()]);
        c.args(args).env("KUBECONFIG", dir.join("kc")).env("HOME", dir);
        c.output().unwrap()
    };
    up.ok(&alice, &ad, &["tandem", "token", "--kubeconfig", "kc"]);
    up.ok(&mallory, &md, &["tandem", "token", "--kubeconfig", "kc"]);
    // Positive control: Alice's command runs in her Pod, as her.
    let o = kube(&alice, &ad, &["exec", &pod, "--", "id", "-u"]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == alice.uid.to_string(), "{}", text(&o));
    // Where the command would leave its mark if it ran (it would run as Alice: her directory).
    let pwned = ad.join(format!("pwned-{id}"));
    let o = kube(&mallory, &md, &["exec", &pod, "--", "touch", pwned.to_str().unwrap()]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("forbidden"), "{}", text(&o));
    let exec = format!("/api/v1/namespaces/default/pods/{pod}/exec?command=touch&command={}&stdout=true", pwned.display());
    for method in ["GET", "POST"] {
        let (code, st) = kube_req(&up, method, &exec, Some(&tm), b"", "application/json");
        assert_eq!((code, st["kind"].as_str(), st["reason"].as_str()), (403, Some("Status"), Some("Forbidden")), "{method}: {st}");
    }
    let (code, _) = kube_req(&up, "GET", &exec, None, b"", "application/json");
    assert_eq!(code, 401, "no identity, no exec");
    let base = format!("/api/v1/namespaces/default/pods/{pod}/exec");
    for (query, says) in [
        ("stdout=true", "at least one command"),
        ("command=id", "at least 1 of stdin, stdout, stderr"),
        ("command=id&stdout=maybe", "not a boolean"),
        ("command=id&stdout=true&stderr=true&tty=true", "tty"),
        ("command=id&stdout=true&container=other", "not valid for pod"),
        ("command=id&stdout=true", "WebSocket upgrade"),
    ] {
        let (code, st) = kube_req(&up, "GET", &format!("{base}?{query}"), Some(&ta), b"", "application/json");
        assert_eq!((code, st["kind"].as_str()), (400, Some("Status")), "{query}: {st}");
        assert!(st["message"].as_str().is_some_and(|m| m.contains(says)), "{query}: {st}");
    }
    let (code, st) = kube_req(
        &up,
        "GET",
        "/api/v1/namespaces/default/pods/job-999999-0/exec?command=id&stdout=true",
        Some(&ta),
        b"",
        "application/json",
    );
    assert_eq!(code, 404, "{st}");
    std::thread::sleep(Duration::from_millis(500));
    assert!(!pwned.exists(), "Mallory's command ran in Alice's Pod");
    // One user's sessions are capped (16 at once), and a client that goes away ends its
    // command, giving its session back.
    let running_execs = || -> usize {
        let o = up.root(&["sacct", "-j", &id.to_string(), "-n", "-P", "-o", "jobname,state"]);
        String::from_utf8_lossy(&o.stdout).lines().filter(|l| *l == "kubectl-exec|RUNNING").count()
    };
    let mut held = Vec::new();
    for _ in 0..16 {
        let mut c = up.cmd(Some(&alice), &ad, &[kubectl.to_str().unwrap()]);
        c.args(["exec", &pod, "--", "sleep", "300"]).env("KUBECONFIG", ad.join("kc")).env("HOME", &ad);
        held.push(c.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while running_execs() < 16 {
        assert!(Instant::now() < deadline, "16 sessions never ran: {}", running_execs());
        std::thread::sleep(Duration::from_millis(200));
    }
    let o = kube(&alice, &ad, &["exec", &pod, "--", "true"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("at most 16 exec sessions"), "{}", text(&o));
    for mut c in held {
        let _ = c.kill();
        let _ = c.wait();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while running_execs() > 0 {
        assert!(Instant::now() < deadline, "commands outlived their clients: {} still run", running_execs());
        std::thread::sleep(Duration::from_millis(200));
    }
    let o = kube(&alice, &ad, &["exec", &pod, "--", "true"]);
    assert!(o.status.success(), "the sessions were given back: {}", text(&o));
    let _ = up.root(&["scancel", &id.to_string()]);
    let _ = std::fs::remove_dir_all(&root);
}

/// The Kubernetes API with two users: Mallory cannot read Alice's environment values (nor
/// kubectl's copy of them), patch, scale, replace or delete her Deployment; malformed, wrong and
/// huge bodies are refused as `Status` errors; nothing of Alice's changes.
#[test]
fn another_user_cannot_read_the_secrets_of_or_change_a_deployment_through_the_kubernetes_api() {
    let Some((alice, mallory)) = users() else { return };
    let root = root_dir("kube");
    let up = Up::start(&root, None);
    let (ta, tm) = (up.token(&alice), up.token(&mallory));
    let base = "/apis/apps/v1/namespaces/default/deployments";
    let dep = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "secret-web", "labels": {"app": "s"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"env\":\"API_KEY=alice-secret\"}"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "s"}}, "template": {"metadata": {"labels": {"app": "s"}},
            "spec": {"containers": [{"name": "web", "command": ["sleep", "600"], "env": [{"name": "API_KEY", "value": "alice-secret"}]}]}}}});
    // Positive control: Alice writes and reads her own.
    let (code, made) = kube_req(&up, "POST", base, Some(&ta), dep.to_string().as_bytes(), "application/json");
    assert_eq!(code, 201, "{made}");
    let (code, mine) = kube_req(&up, "GET", &format!("{base}/secret-web"), Some(&ta), b"", "application/json");
    assert_eq!(code, 200);
    assert!(mine.to_string().contains("alice-secret"), "the owner sees her values: {mine}");
    // Mallory sees the Deployment (as `tandem service list` shows it) but not its values.
    let (code, seen) = kube_req(&up, "GET", &format!("{base}/secret-web"), Some(&tm), b"", "application/json");
    assert_eq!(code, 200, "{seen}");
    assert!(!seen.to_string().contains("alice-secret"), "another user read a value: {seen}");
    assert_eq!(seen["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"], "(hidden)");
    let (_, list) = kube_req(&up, "GET", base, Some(&tm), b"", "application/json");
    assert!(!list.to_string().contains("alice-secret"), "{list}");
    let (_, pods) = kube_req(&up, "GET", "/api/v1/namespaces/default/pods", Some(&tm), b"", "application/json");
    assert!(!pods.to_string().contains("alice-secret"), "{pods}");
    // Every write of Mallory's is a 403 Status; nothing changes.
    let attacks: Vec<(&str, String, Vec<u8>, &str)> = vec![
        ("PATCH", format!("{base}/secret-web"), br#"{"spec":{"replicas":0}}"#.to_vec(), "application/merge-patch+json"),
        (
            "PATCH",
            format!("{base}/secret-web"),
            br#"[{"op":"replace","path":"/spec/template/spec/containers/0/command","value":["sh"]}]"#.to_vec(),
            "application/json-patch+json",
        ),
        ("PATCH", format!("{base}/secret-web/scale"), br#"{"spec":{"replicas":5}}"#.to_vec(), "application/merge-patch+json"),
        ("PUT", format!("{base}/secret-web"), seen.to_string().into_bytes(), "application/json"),
        ("DELETE", format!("{base}/secret-web"), Vec::new(), "application/json"),
    ];
    for (method, path, body, ct) in &attacks {
        let (code, st) = kube_req(&up, method, path, Some(&tm), body, ct);
        assert_eq!(code, 403, "{method} {path}: {st}");
        assert_eq!(st["kind"], "Status");
        assert_eq!(st["reason"], "Forbidden", "{st}");
    }
    // Nor may she delete its Pod (which would stop the replica for another): 403, it runs on.
    let mine = "/api/v1/namespaces/default/pods?labelSelector=tandem.dev%2Fservice%3Dsecret-web";
    let deadline = Instant::now() + Duration::from_secs(30);
    let pod = loop {
        let (_, list) = kube_req(&up, "GET", mine, Some(&ta), b"", "application/json");
        if let Some(n) = list["items"][0]["metadata"]["name"].as_str() {
            break n.to_string();
        }
        assert!(Instant::now() < deadline, "Alice's replica has no Pod: {list}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let (code, st) = kube_req(&up, "DELETE", &format!("/api/v1/namespaces/default/pods/{pod}"), Some(&tm), b"", "application/json");
    assert_eq!((code, st["reason"].as_str()), (403, Some("Forbidden")), "{st}");
    let (_, list) = kube_req(&up, "GET", mine, Some(&ta), b"", "application/json");
    assert!(list["items"][0]["metadata"]["name"] == pod.as_str() && list["items"][0]["metadata"]["deletionTimestamp"].is_null(), "{list}");
    // Malformed, wrong, huge and anonymous requests: clear Status errors.
    // (method, token, body, content type, the status wanted)
    type Bad<'a> = (&'a str, Option<&'a str>, Vec<u8>, &'a str, u16);
    let bad: Vec<Bad> = vec![
        ("POST", Some(&tm), b"{".to_vec(), "application/json", 400),
        ("POST", Some(&tm), b"kind: [".to_vec(), "application/yaml", 400),
        ("POST", Some(&tm), br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}"#.to_vec(), "application/json", 400),
        // Protobuf: no magic number, a malformed envelope, a kind not read from protobuf.
        ("POST", Some(&tm), b"\x0a\x0b\x00\xff".to_vec(), "application/vnd.kubernetes.protobuf", 400),
        ("POST", Some(&tm), b"k8s\x00\x0a\xff\xff\xff".to_vec(), "application/vnd.kubernetes.protobuf", 400),
        ("POST", Some(&tm), b"k8s\x00\x0a\x09\x0a\x02v1\x12\x03Pod\x12\x00".to_vec(), "application/vnd.kubernetes.protobuf", 415),
        ("POST", Some(&tm), vec![b' '; 4 << 20], "application/json", 413),
        ("POST", None, dep.to_string().into_bytes(), "application/json", 401),
    ];
    for (method, tok, body, ct, want) in bad {
        let (code, st) = kube_req(&up, method, base, tok, &body, ct);
        assert_eq!(code, want, "{ct}: {st}");
        assert_eq!(st["kind"], "Status", "{st}");
    }
    // Alice's Secret is hers alone; her ConfigMap is readable, not writable, by Mallory.
    let core = "/api/v1/namespaces/default";
    let secret = br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"alice-key"},"stringData":{"key":"alice-secret"}}"#;
    assert_eq!(kube_req(&up, "POST", &format!("{core}/secrets"), Some(&ta), secret, "application/json").0, 201);
    let cm = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"alice-cm"},"data":{"mode":"fast"}}"#;
    assert_eq!(kube_req(&up, "POST", &format!("{core}/configmaps"), Some(&ta), cm, "application/json").0, 201);
    let (code, mine) = kube_req(&up, "GET", &format!("{core}/secrets/alice-key"), Some(&ta), b"", "application/json");
    assert!(code == 200 && mine["data"]["key"] == "YWxpY2Utc2VjcmV0", "{mine}");
    let (code, st) = kube_req(&up, "GET", &format!("{core}/secrets/alice-key"), Some(&tm), b"", "application/json");
    assert_eq!(code, 404, "{st}");
    // Nor can Mallory's Deployment take its environment from Alice's Secret: not found for her.
    for env in [
        serde_json::json!({"env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "alice-key", "key": "key"}}}]}),
        serde_json::json!({"envFrom": [{"secretRef": {"name": "alice-key"}}]}),
    ] {
        let mut thief = dep.clone();
        thief["metadata"] = serde_json::json!({"name": "thief", "labels": {"app": "t"}});
        thief["spec"]["selector"] = serde_json::json!({"matchLabels": {"app": "t"}});
        thief["spec"]["template"]["metadata"] = serde_json::json!({"labels": {"app": "t"}});
        let c = &mut thief["spec"]["template"]["spec"]["containers"][0];
        c.as_object_mut().unwrap().remove("env");
        for (k, v) in env.as_object().unwrap() {
            c[k] = v.clone();
        }
        let (code, st) = kube_req(&up, "POST", base, Some(&tm), thief.to_string().as_bytes(), "application/json");
        assert_eq!(code, 422, "{st}");
        assert!(st["message"].as_str().is_some_and(|m| m.contains("Not found")) && !st.to_string().contains("alice-secret"), "{st}");
    }
    let (_, list) = kube_req(&up, "GET", &format!("{core}/secrets"), Some(&tm), b"", "application/json");
    assert!(!list.to_string().contains("alice"), "{list}");
    let (code, _) = kube_req(&up, "GET", &format!("{core}/configmaps/alice-cm"), Some(&tm), b"", "application/json");
    assert_eq!(code, 200);
    for (method, path, body, ct) in [
        ("PATCH", format!("{core}/configmaps/alice-cm"), br#"{"data":{"mode":"slow"}}"#.to_vec(), "application/merge-patch+json"),
        ("DELETE", format!("{core}/configmaps/alice-cm"), Vec::new(), "application/json"),
        ("PUT", format!("{core}/configmaps/alice-cm"), cm.to_vec(), "application/json"),
        ("POST", format!("{core}/secrets"), secret.to_vec(), "application/json"),
    ] {
        let (code, st) = kube_req(&up, method, &path, Some(&tm), &body, ct);
        assert!(code == 403 || (method == "POST" && code == 409), "{method} {path}: {st}");
    }
    let (_, cm_after) = kube_req(&up, "GET", &format!("{core}/configmaps/alice-cm"), Some(&ta), b"", "application/json");
    assert_eq!(cm_after["data"]["mode"], "fast");
    let (_, after) = kube_req(&up, "GET", &format!("{base}/secret-web"), Some(&ta), b"", "application/json");
    assert_eq!(after["spec"]["replicas"], 1);
    assert_eq!(after["spec"]["template"]["spec"]["containers"][0]["command"], serde_json::json!(["sleep", "600"]));
    assert_eq!(after["metadata"]["generation"], 1, "no new revision");
    // Alice's Job (held: suspended): Mallory sees it, not its values, and cannot resume,
    // replace, relabel or delete it, nor take its name or its Secret.
    let jobs = "/apis/batch/v1/namespaces/default/jobs";
    let job = serde_json::json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "alice-job"},
        "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "command": ["sleep", "600"], "env": [{"name": "API_KEY", "value": "alice-secret"}]}]}}}});
    let (code, made) = kube_req(&up, "POST", jobs, Some(&ta), job.to_string().as_bytes(), "application/json");
    assert_eq!(code, 201, "{made}");
    let (code, seen) = kube_req(&up, "GET", &format!("{jobs}/alice-job"), Some(&tm), b"", "application/json");
    assert_eq!(code, 200, "{seen}");
    assert!(!seen.to_string().contains("alice-secret"), "another user read a Job's value: {seen}");
    for (method, body, ct) in [
        ("PATCH", br#"{"spec":{"suspend":false}}"#.to_vec(), "application/merge-patch+json"),
        ("PATCH", br#"{"metadata":{"labels":{"owned":"mallory"}}}"#.to_vec(), "application/merge-patch+json"),
        ("PUT", seen.to_string().into_bytes(), "application/json"),
        ("DELETE", Vec::new(), "application/json"),
    ] {
        let (code, st) = kube_req(&up, method, &format!("{jobs}/alice-job"), Some(&tm), &body, ct);
        assert_eq!((code, st["reason"].as_str()), (403, Some("Forbidden")), "{method}: {st}");
    }
    let (code, st) = kube_req(&up, "POST", jobs, Some(&tm), job.to_string().as_bytes(), "application/json");
    assert_eq!((code, st["reason"].as_str()), (409, Some("AlreadyExists")), "{st}");
    let mut thief = job.clone();
    thief["metadata"]["name"] = serde_json::json!("thief-job");
    thief["spec"]["template"]["spec"]["containers"][0]["env"] =
        serde_json::json!([{"name": "K", "valueFrom": {"secretKeyRef": {"name": "alice-key", "key": "key"}}}]);
    let (code, st) = kube_req(&up, "POST", jobs, Some(&tm), thief.to_string().as_bytes(), "application/json");
    assert_eq!(code, 422, "{st}");
    thief["metadata"]["name"] = serde_json::json!("job-1");
    let (code, st) = kube_req(&up, "POST", jobs, Some(&tm), thief.to_string().as_bytes(), "application/json");
    assert_eq!(code, 422, "an sbatch job's name: {st}");
    let (_, after) = kube_req(&up, "GET", &format!("{jobs}/alice-job"), Some(&ta), b"", "application/json");
    assert_eq!(after["spec"]["suspend"], true, "{after}");
    assert!(after["metadata"]["labels"]["owned"].is_null(), "{after}");
    let id = after["metadata"]["annotations"]["tandem.dev/job-id"].as_str().unwrap().to_string();
    let q = String::from_utf8_lossy(&up.root(&["squeue", "-h", "-j", &id, "-o", "%T %r"]).stdout).into_owned();
    assert!(q.contains("PENDING") && q.contains("JobHeldUser"), "{q}");
    let (code, _) = kube_req(&up, "DELETE", &format!("{jobs}/alice-job"), Some(&ta), b"", "application/json");
    assert_eq!(code, 200, "the owner deletes it");
    // Alice's namespace is hers: Mallory makes nothing in it (a Deployment, a Job, a Secret,
    // a Service), reads no Secret of it, and neither relabels, takes nor deletes it.
    let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "alice-team"}});
    let (code, st) = kube_req(&up, "POST", "/api/v1/namespaces", Some(&ta), ns.to_string().as_bytes(), "application/json");
    assert_eq!(code, 201, "{st}");
    let secret =
        serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "alice-key"}, "stringData": {"key": "alice-secret"}});
    let in_ns = |kind: &str| match kind {
        "deployments" => "/apis/apps/v1/namespaces/alice-team/deployments".to_string(),
        "jobs" => "/apis/batch/v1/namespaces/alice-team/jobs".to_string(),
        other => format!("/api/v1/namespaces/alice-team/{other}"),
    };
    let (code, st) = kube_req(&up, "POST", &in_ns("secrets"), Some(&ta), secret.to_string().as_bytes(), "application/json");
    assert_eq!(code, 201, "{st}");
    let mut mallory_dep = dep.clone();
    mallory_dep["metadata"]["name"] = serde_json::json!("squatter");
    let service =
        serde_json::json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "squatter"}, "spec": {"selector": {"app": "s"}}});
    for (kind, body) in [("deployments", &mallory_dep), ("jobs", &thief), ("secrets", &secret), ("services", &service)] {
        let (code, st) = kube_req(&up, "POST", &in_ns(kind), Some(&tm), body.to_string().as_bytes(), "application/json");
        assert_eq!((code, st["reason"].as_str()), (403, Some("Forbidden")), "{kind}: {st}");
        assert!(st["message"].as_str().unwrap().contains("belongs to another user"), "{st}");
    }
    let (code, st) = kube_req(&up, "GET", &format!("{}/alice-key", in_ns("secrets")), Some(&tm), b"", "application/json");
    assert!(code == 404 && !st.to_string().contains("alice-secret"), "{st}");
    for (method, body, ct) in [
        ("PATCH", br#"{"metadata":{"labels":{"owned":"mallory"}}}"#.to_vec(), "application/merge-patch+json"),
        ("DELETE", Vec::new(), "application/json"),
    ] {
        let (code, st) = kube_req(&up, method, "/api/v1/namespaces/alice-team", Some(&tm), &body, ct);
        assert_eq!((code, st["reason"].as_str()), (403, Some("Forbidden")), "{method}: {st}");
    }
    let (code, st) = kube_req(&up, "POST", "/api/v1/namespaces", Some(&tm), ns.to_string().as_bytes(), "application/json");
    assert_eq!((code, st["reason"].as_str()), (409, Some("AlreadyExists")), "{st}");
    let (code, st) = kube_req(&up, "DELETE", "/api/v1/namespaces/default", Some(&tm), b"", "application/json");
    assert_eq!(code, 403, "{st}");
    // Kubernetes' own namespaces (what tools trust) are root's to make; a dry run of a deletion
    // is refused as the deletion is.
    let kube_public = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-public"}});
    let (code, st) = kube_req(&up, "POST", "/api/v1/namespaces", Some(&tm), kube_public.to_string().as_bytes(), "application/json");
    assert_eq!(code, 403, "{st}");
    let (code, st) = kube_req(&up, "DELETE", "/api/v1/namespaces/alice-team?dryRun=All", Some(&tm), b"", "application/json");
    assert_eq!(code, 403, "{st}");
    // Nor as a Tandem service named into it.
    let md = user_dir(&root.join("mallory"), &mallory, 0o755);
    owned_file(&md.join("squat.toml"), "name = \"web.alice-team\"\ncommand = [\"sleep\", \"600\"]\n", mallory.uid, mallory.gid, 0o644);
    let o = up.run(&mallory, &md, &["tandem", "service", "apply", "-f", "squat.toml"]);
    assert!(!o.status.success() && text(&o).contains("belongs to another user"), "{}", text(&o));
    let (code, _) = kube_req(&up, "GET", &format!("{}/alice-key", in_ns("secrets")), Some(&ta), b"", "application/json");
    assert_eq!(code, 200, "Alice's Secret is untouched");
    let (code, _) = kube_req(&up, "DELETE", "/api/v1/namespaces/alice-team", Some(&ta), b"", "application/json");
    assert_eq!(code, 200, "the owner deletes it");
    let _ = std::fs::remove_dir_all(&root);
}
