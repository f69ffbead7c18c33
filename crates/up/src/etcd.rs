//! A local etcd cluster for controllers that take over from each other (`tandem up --ha`, and
//! the tests and benchmarks of it): N members of Debian's `etcd` (package etcd-server) on
//! loopback, each with its own data directory (0700), started as programs and stopped with
//! the cluster.
//!
//! Everything is over TLS with client certificates (etcd's `--client-cert-auth` and
//! `--peer-client-cert-auth`): a CA of the cluster's etcd alone (`DIR/pki/ca.pem`, its key
//! 0600), a certificate per member for clients and peers, and one client certificate
//! (`DIR/pki/client.pem`, `client.key`, 0600) that only the controllers' user can read. Another
//! user of the machine, holding every public file, can neither read nor write the state.
//!
//! Members run with etcd's default request limits, given explicitly so that they are stated:
//! `--max-txn-ops 128` and `--max-request-bytes 1572864` (1.5 MiB), which the controller's
//! commits keep under (`store::etcd`), and the default space quota of 2 GiB; and with a
//! heartbeat of 50 ms and an election timeout of 500 ms (etcd's defaults are 100 ms and 1 s,
//! for networks between machines), so that etcd replaces a lost leader of its own well within
//! the controller's lease (3 s, given up at 2.4 s): losing an etcd member costs no failover.
//! History is compacted by etcd itself to the last 10,000 revisions (`--auto-compaction-mode
//! revision`), so job churn does not fill the quota; a standby whose watch falls further behind
//! than that starts again and reads the state afresh.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The settings every member runs with (beside its names and addresses).
pub const MEMBER_ARGS: &[&str] = &[
    "--max-txn-ops",
    "128",
    "--max-request-bytes",
    "1572864",
    "--quota-backend-bytes",
    "2147483648",
    "--heartbeat-interval",
    "50",
    "--election-timeout",
    "500",
    "--auto-compaction-mode",
    "revision",
    "--auto-compaction-retention",
    "10000",
];

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
    /// The CA that signed the members' certificates and the client's.
    pub ca: PathBuf,
    /// The controllers' client certificate and key.
    pub client_cert: PathBuf,
    /// Its key (0600).
    pub client_key: PathBuf,
}

/// Writes `text` to `path` (created afresh with `mode`).
fn put(path: &Path, text: &str, mode: u32) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

/// Makes the CA, each member's certificate (for clients and peers, naming 127.0.0.1 and
/// localhost) and the controllers' client certificate, in `pki` (0700).
fn make_pki(pki: &Path, members: &[Member]) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).recursive(true).create(pki).with_context(|| format!("making {}", pki.display()))?;
    let mut ca = rcgen::CertificateParams::default();
    ca.distinguished_name.push(rcgen::DnType::CommonName, "Tandem local etcd CA");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::DigitalSignature];
    let ca_key = rcgen::KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = rcgen::Issuer::new(ca, &ca_key);
    put(&pki.join("ca.pem"), &ca_cert.pem(), 0o644)?;
    let issue = |name: &str, cn: &str, server: bool| -> Result<()> {
        let mut p = rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p.extended_key_usages = if server {
            vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth, rcgen::ExtendedKeyUsagePurpose::ClientAuth]
        } else {
            vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth]
        };
        let key = rcgen::KeyPair::generate()?;
        let cert = p.signed_by(&key, &issuer)?;
        put(&pki.join(format!("{name}.pem")), &cert.pem(), 0o644)?;
        put(&pki.join(format!("{name}.key")), &key.serialize_pem(), 0o600)
    };
    for m in members {
        issue(&m.name, &m.name, true)?;
    }
    issue("client", "tandem-controller", false)
}

/// A free TCP port on loopback (bound, then let go).
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Etcd {
    /// Starts `n` members under `dir` (`dir/NAME`) and waits until each answers. Their ports
    /// are free when picked but not held until etcd binds them: where another process took one
    /// meanwhile (a member says `address already in use`) and the members are new, they are
    /// started again on other ports, twice at most.
    pub fn start(dir: &Path, n: usize) -> Result<Etcd> {
        if Command::new("etcd").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
            bail!("no etcd program: install Debian's etcd-server (apt-get install etcd-server)");
        }
        let names: Vec<String> = (1..=n).map(|i| format!("etcd{i}")).collect();
        let fresh = names.iter().all(|m| !dir.join(m).exists());
        let mut tries = 0;
        loop {
            match Self::start_once(dir, n) {
                Ok(e) => return Ok(e),
                Err(e) if fresh && tries < 2 && names.iter().any(|m| Self::port_taken(&dir.join(format!("{m}.log")))) => {
                    tries += 1;
                    tracing::debug!("starting etcd again on other ports: {e:#}");
                    for m in &names {
                        let _ = std::fs::remove_dir_all(dir.join(m));
                        let _ = std::fs::remove_file(dir.join(format!("{m}.log")));
                    }
                    let _ = std::fs::remove_dir_all(dir.join("pki"));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether a member's log says a port it was given was taken.
    fn port_taken(log: &Path) -> bool {
        std::fs::read_to_string(log).is_ok_and(|l| l.contains("address already in use"))
    }

    fn start_once(dir: &Path, n: usize) -> Result<Etcd> {
        // The controllers' user's alone: members' data, logs, keys.
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        std::fs::DirBuilder::new().mode(0o700).recursive(true).create(dir).with_context(|| format!("making {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
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
        let initial = members.iter().map(|m| format!("{}=https://{}", m.name, m.peer)).collect::<Vec<_>>().join(",");
        let pki = dir.join("pki");
        make_pki(&pki, &members)?;
        let mut e = Etcd {
            members,
            dir: dir.to_path_buf(),
            initial,
            ca: pki.join("ca.pem"),
            client_cert: pki.join("client.pem"),
            client_key: pki.join("client.key"),
        };
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
        let pki = self.dir.join("pki");
        let (cert, key, ca) = (pki.join(format!("{}.pem", m.name)), pki.join(format!("{}.key", m.name)), pki.join("ca.pem"));
        let child = Command::new("etcd")
            .args(["--name", &m.name, "--data-dir"])
            .arg(&m.data)
            .args(["--listen-client-urls", &format!("https://{}", m.client), "--advertise-client-urls", &format!("https://{}", m.client)])
            .args(["--listen-peer-urls", &format!("https://{}", m.peer), "--initial-advertise-peer-urls", &format!("https://{}", m.peer)])
            .arg("--client-cert-auth")
            .arg("--trusted-ca-file")
            .arg(&ca)
            .arg("--cert-file")
            .arg(&cert)
            .arg("--key-file")
            .arg(&key)
            .arg("--peer-client-cert-auth")
            .arg("--peer-trusted-ca-file")
            .arg(&ca)
            .arg("--peer-cert-file")
            .arg(&cert)
            .arg("--peer-key-file")
            .arg(&key)
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

    /// The controller's options that name the store and its TLS.
    pub fn server_args(&self) -> Vec<String> {
        let p = |p: &Path| p.display().to_string();
        vec![
            "--store".into(),
            self.url(),
            "--etcd-ca".into(),
            p(&self.ca),
            "--etcd-cert".into(),
            p(&self.client_cert),
            "--etcd-key".into(),
            p(&self.client_key),
        ]
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

    /// `etcdctl` with this cluster's TLS, against member `i`.
    fn etcdctl(&self, i: usize) -> Command {
        let mut c = Command::new("etcdctl");
        c.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints=https://{}", self.members[i].client))
            .arg(format!("--cacert={}", self.ca.display()))
            .arg(format!("--cert={}", self.client_cert.display()))
            .arg(format!("--key={}", self.client_key.display()));
        c
    }

    /// Saves a snapshot of the cluster's data to `file` (`etcdctl snapshot save`, from the
    /// first member that answers).
    pub fn snapshot(&self, file: &Path) -> Result<()> {
        let mut why = String::new();
        for i in 0..self.members.len() {
            let o =
                self.etcdctl(i).args(["snapshot", "save"]).arg(file).output().context("running etcdctl (apt-get install etcd-client)")?;
            if o.status.success() {
                return Ok(());
            }
            why = String::from_utf8_lossy(&o.stderr).trim().to_string();
        }
        bail!("etcdctl snapshot save: {why}")
    }

    /// Replaces every member's data with the snapshot `file` (`etcdctl snapshot restore`,
    /// with a new cluster token, so the restored cluster has an id of its own), and starts them
    /// again: the members are stopped first.
    pub fn restore(&mut self, file: &Path) -> Result<()> {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        let token =
            format!("tandem-restored-{}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()));
        for i in 0..self.members.len() {
            let m = &self.members[i];
            let _ = std::fs::remove_dir_all(&m.data);
            let o = Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["snapshot", "restore"])
                .arg(file)
                .args(["--name", &m.name, "--data-dir"])
                .arg(&m.data)
                .args(["--initial-cluster", &self.initial, "--initial-cluster-token", &token])
                .args(["--initial-advertise-peer-urls", &format!("https://{}", m.peer)])
                .output()
                .context("running etcdctl (apt-get install etcd-client)")?;
            if !o.status.success() {
                bail!("etcdctl snapshot restore for {}: {}", m.name, String::from_utf8_lossy(&o.stderr).trim());
            }
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&m.data, std::fs::Permissions::from_mode(0o700))?;
        }
        for i in 0..self.members.len() {
            self.spawn(i)?;
        }
        for i in 0..self.members.len() {
            self.wait(i)?;
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// etcd's own words when a port it was given is taken (`listen tcp 127.0.0.1:P: bind:
    /// address already in use`) are what starts the members again; any other failure is not.
    #[test]
    fn a_taken_port_is_told_from_other_failures() {
        let d = std::env::temp_dir().join(format!("up-etcd-ports-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let (taken, other) = (d.join("etcd2.log"), d.join("etcd1.log"));
        std::fs::write(&taken, "2026-12-07 14:13:08.375938 C | etcdmain: listen tcp 127.0.0.1:34407: bind: address already in use\n")
            .unwrap();
        std::fs::write(&other, "2026-12-07 14:13:08.375938 C | etcdmain: cannot access data directory: permission denied\n").unwrap();
        assert!(Etcd::port_taken(&taken));
        assert!(!Etcd::port_taken(&other) && !Etcd::port_taken(&d.join("missing.log")));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
