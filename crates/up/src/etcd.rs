//! A local etcd cluster for controllers that take over from each other (`tandem up --ha`, and
//! the tests and benchmarks of it): N members of Debian's `etcd` (package etcd-server) on
//! loopback, each with its own data directory (0700), started as programs and stopped with
//! the cluster.
//!
//! Members run with etcd's default request limits, given explicitly so that they are stated:
//! `--max-txn-ops 128` and `--max-request-bytes 1572864` (1.5 MiB), which the controller's
//! commits keep under (`store::etcd`), and the default space quota of 2 GiB.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The settings every member runs with (beside its names and addresses).
pub const MEMBER_ARGS: &[&str] = &["--max-txn-ops", "128", "--max-request-bytes", "1572864", "--quota-backend-bytes", "2147483648"];

/// One member.
pub struct Member {
    /// Its name (`etcd1`...).
    pub name: String,
    /// Its client address, `127.0.0.1:PORT`.
    pub client: String,
    /// Its peer address.
    pub peer: String,
    /// Its data directory.
    pub data: PathBuf,
    child: Option<Child>,
}

/// A local etcd cluster, stopped when dropped.
pub struct Etcd {
    /// Its members.
    pub members: Vec<Member>,
    dir: PathBuf,
    initial: String,
}

/// A free TCP port on loopback (bound, then let go).
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Etcd {
    /// Starts `n` members under `dir` (`dir/NAME`) and waits until each answers.
    pub fn start(dir: &Path, n: usize) -> Result<Etcd> {
        if Command::new("etcd").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
            bail!("no etcd program: install Debian's etcd-server (apt-get install etcd-server)");
        }
        std::fs::create_dir_all(dir).with_context(|| format!("making {}", dir.display()))?;
        let mut members = Vec::new();
        for i in 1..=n {
            let name = format!("etcd{i}");
            members.push(Member {
                data: dir.join(&name),
                client: format!("127.0.0.1:{}", free_port()?),
                peer: format!("127.0.0.1:{}", free_port()?),
                name,
                child: None,
            });
        }
        let initial = members.iter().map(|m| format!("{}=http://{}", m.name, m.peer)).collect::<Vec<_>>().join(",");
        let mut e = Etcd { members, dir: dir.to_path_buf(), initial };
        for i in 0..n {
            e.spawn(i)?;
        }
        for i in 0..n {
            e.wait(i)?;
        }
        Ok(e)
    }

    fn spawn(&mut self, i: usize) -> Result<()> {
        let m = &mut self.members[i];
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join(format!("{}.log", m.name)))?;
        let state = if m.data.exists() { "existing" } else { "new" };
        let child = Command::new("etcd")
            .args(["--name", &m.name, "--data-dir"])
            .arg(&m.data)
            .args(["--listen-client-urls", &format!("http://{}", m.client), "--advertise-client-urls", &format!("http://{}", m.client)])
            .args(["--listen-peer-urls", &format!("http://{}", m.peer), "--initial-advertise-peer-urls", &format!("http://{}", m.peer)])
            .args(["--initial-cluster", &self.initial, "--initial-cluster-state", state, "--initial-cluster-token", "tandem-local"])
            .args(MEMBER_ARGS)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting etcd")?;
        m.child = Some(child);
        Ok(())
    }

    /// Waits until member `i` takes connections.
    pub fn wait(&mut self, i: usize) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let m = &mut self.members[i];
        loop {
            if std::net::TcpStream::connect(&m.client).is_ok() {
                return Ok(());
            }
            if let Some(Ok(Some(st))) = m.child.as_mut().map(|c| c.try_wait()) {
                bail!("etcd member {} exited ({st}): see {}", m.name, self.dir.join(format!("{}.log", m.name)).display());
            }
            if Instant::now() > deadline {
                bail!("etcd member {} did not start in 30 s", m.name);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The `--store` value naming every member.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.members.iter().map(|m| m.client.as_str()).collect::<Vec<_>>().join(","))
    }

    /// `kill -9` of member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts member `i` again (after [`Etcd::kill`]) on its data directory.
    pub fn restart(&mut self, i: usize) -> Result<()> {
        self.kill(i);
        self.spawn(i)?;
        self.wait(i)
    }

    /// The members' process ids (for a supervisor's list).
    pub fn pids(&self) -> Vec<u32> {
        self.members.iter().filter_map(|m| m.child.as_ref().map(Child::id)).collect()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
