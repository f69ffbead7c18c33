//! Container tasks (Pyxis's `--container-image`). A task with a container runs as its user
//! through `tandem __container SOCKET BUNDLE KEY SPEC NODE -- ARGV...`, started by the ordinary
//! launch (the job's cgroup joined, the user's identity taken, the output files opened):
//!
//! 1. it reads the user's registry credentials (Enroot's `~/.config/enroot/.credentials`, or
//!    Docker's `config.json`), as the user: they are never sent to the controller;
//! 2. it asks its agent, over the agent's socket `DATA/image.sock`, to make the image ready
//!    (the agent pulls into the node's cache, [`image::Store`], as root: the cache is shared by
//!    every user and job of the node); the agent answers only for a container task of that
//!    user that it launched itself;
//! 3. it writes the OCI runtime spec ([`image::spec`]) into the task's bundle directory
//!    (`DATA/containers/KEY`, the user's, made by the launch) and becomes
//!    `unshare --mount --map-root-user [--map-users=SUBUID,1,1 ...] runc run`: runc, run as the
//!    user, inside a user namespace in which the user is root.
//!
//! A failure before runc runs ends the task with exit code 1, its reason on the task's error
//! stream and in `DATA/containers/KEY/error`, which the agent passes to the controller
//! (`scontrol show job`'s `Reason`, `sacct`).

use anyhow::{Context, Result, anyhow};
use control::TaskKey;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What the agent tells a container task of its node: the task's GPUs (host indices), the
/// job's on this node (the container's devices), where the node's CDI specifications are, and
/// the container the task joins.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct NodeSide {
    pub(crate) gpus: Vec<u8>,
    #[serde(default)]
    pub(crate) job_gpus: Vec<u8>,
    pub(crate) cdi: Vec<PathBuf>,
    /// The container's directory ([`shared_dir`]), shared by the step's tasks on this node.
    #[serde(default)]
    pub(crate) shared: PathBuf,
}

/// The node's CDI specification directories (`tandem agent --cdi-spec-dir`; none: CDI's
/// defaults), set once at the agent's start.
pub(crate) static CDI_DIRS: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();

/// The number of a task's PMI socket inside its container (runc's first passed descriptor).
const PMI_FD_INSIDE: i32 = 3;

/// The hidden subcommand that runs a task in its container.
pub const CONTAINER_CMD: &str = "__container";

/// The OCI runtime the agent uses (Debian's `runc`).
pub const RUNTIME: &str = "runc";

/// The container's process 1 and each task's init (Debian's `catatonit`, a static build: it
/// runs in any image): `catatonit -P` holds the container's namespaces while the step's tasks
/// come and go; `catatonit -g -- COMMAND` in front of each task passes the signals it gets
/// to the command's process group.
pub const INIT: &str = "catatonit";

/// The directory of the container a task joins: one per step and node
/// (`DATA/containers/JOB.RUN.STEP`), or, named (`--container-name`), one per job and node
/// (`DATA/containers/JOB.RUN.name-NAME`), kept from step to step until the job ends; with
/// `join_job` (`kubectl exec`), that of the run's batch script or replica.
pub(crate) fn shared_dir(data: &Path, k: &TaskKey, c: &slurmcli::Container) -> PathBuf {
    let base = data.join("containers");
    match (&c.name, c.join_job) {
        (Some(n), _) => base.join(format!("{}.{}.name-{n}", k.job, k.epoch)),
        (None, true) => base.join(format!("{}.{}.{}", k.job, k.epoch, control::BATCH_STEP)),
        (None, false) => base.join(format!("{}.{}.{}", k.job, k.epoch, k.step)),
    }
}

/// Makes a container's directory, the user's alone, unless the step's first task made it.
pub(crate) fn make_shared(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() && m.uid() == uid => return Ok(()),
        Ok(_) => return Err(std::io::Error::other(format!("{} is someone else's", dir.display()))),
        Err(_) => {}
    }
    std::fs::create_dir(dir)?;
    if nix::unistd::geteuid().is_root() {
        nix::unistd::chown(dir, Some(nix::unistd::Uid::from_raw(uid)), Some(nix::unistd::Gid::from_raw(gid)))?;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// The process 1 of the container in `dir`, if it runs (as its `pid` file names it: for the
/// step's tasks, which trust their own user's file).
fn holder(dir: &Path) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(dir.join("pid")).ok()?.trim().parse().ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    (cmdline == holder_cmdline().as_bytes()).then_some(pid)
}

fn holder_cmdline() -> String {
    format!("{}\0-P\0", image::spec::INIT_PATH)
}

/// The variable that names a container's directory in its process 1's environment.
const HOLDER_ENV: &str = "TANDEM_CONTAINER";

/// The processes 1 of the container in `dir`, as the agent finds them to end it. The directory
/// and its `pid` file are the user's, so that number is not trusted (a user could name another
/// user's container's process 1 there, or hide their own): the agent looks through `/proc`
/// for a container's process 1 whose environment names `dir` and whose user namespace maps
/// the directory's owner, which only that user's own `unshare` can make.
fn holders(dir: &Path) -> Vec<i32> {
    use std::os::unix::fs::MetadataExt;
    let Ok(owner) = std::fs::metadata(dir).map(|m| m.uid().to_string()) else { return Vec::new() };
    let want = holder_cmdline();
    let marker = format!("{HOLDER_ENV}={}", dir.display());
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if std::fs::read(e.path().join("cmdline")).ok().is_none_or(|c| c != want.as_bytes()) {
            continue;
        }
        let named = std::fs::read(e.path().join("environ")).is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == marker.as_bytes()));
        let map = std::fs::read_to_string(e.path().join("uid_map")).unwrap_or_default();
        let mapped =
            map.lines().all(|l| !l.ends_with(" 4294967295")) && map.lines().any(|l| l.split_whitespace().nth(1) == Some(owner.as_str()));
        if named && mapped {
            found.push(pid);
        }
    }
    found
}

/// Ends the container in `dir` (its process 1, and with it every process of its PID
/// namespace). Returns once process 1 is gone, or after 2 s.
fn end_holders(dir: &Path) {
    for pid in holders(dir) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        for _ in 0..100 {
            let gone = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |s| s.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')));
            if gone {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// Ends the container in `dir` and removes the directory (never while its image is still
/// bound in it: that would remove the node's shared copy).
pub(crate) fn release(dir: &Path) {
    end_holders(dir);
    if let Some(v) = volumes_dir(dir) {
        let _ = std::fs::remove_dir_all(v);
    }
    let image = dir.join(IMAGE_DIR);
    for _ in 0..3 {
        if !is_mount_point(&image) {
            let _ = std::fs::remove_dir_all(dir);
            return;
        }
        let _ = nix::mount::umount2(&image, nix::mount::MntFlags::MNT_DETACH);
    }
    tracing::warn!("{} is still mounted; {} is left", image.display(), dir.display());
}

/// Where a container's image is bound in its directory.
const IMAGE_DIR: &str = "image";

/// Whether `path` is a mount point (`/proc/self/mountinfo`).
fn is_mount_point(path: &Path) -> bool {
    let Some(p) = path.to_str() else { return true };
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    // The fifth field, with space, tab, newline and backslash octal-escaped.
    let esc = p.replace('\\', "\\134").replace(' ', "\\040").replace('\t', "\\011").replace('\n', "\\012");
    info.lines().any(|l| l.split(' ').nth(4) == Some(esc.as_str()))
}

/// Binds the unpacked image `image` read-only at `at` (a directory the agent makes in the
/// user's container directory, opened without following a link, so a link the user put there
/// cannot turn the mount elsewhere); a second task of the step finds it there.
fn expose(image: &Path, at: &Path) -> std::io::Result<PathBuf> {
    use nix::mount::{MsFlags, mount};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    match std::fs::create_dir(at) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let dir = std::fs::OpenOptions::new().read(true).custom_flags(nix::libc::O_DIRECTORY | nix::libc::O_NOFOLLOW).open(at)?;
    let (have, want) = (dir.metadata()?, std::fs::metadata(image)?);
    if (have.dev(), have.ino()) == (want.dev(), want.ino()) {
        return Ok(at.to_path_buf());
    }
    if is_mount_point(at) {
        return Err(std::io::Error::other(format!("{} holds another image", at.display())));
    }
    let target = format!("/proc/self/fd/{}", dir.as_raw_fd());
    mount(Some(image), target.as_str(), None::<&str>, MsFlags::MS_BIND, None::<&str>)?;
    let ro = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    if let Err(e) = mount(None::<&str>, at, None::<&str>, ro, None::<&str>) {
        let _ = nix::mount::umount2(at, nix::mount::MntFlags::MNT_DETACH);
        return Err(e.into());
    }
    Ok(at.to_path_buf())
}

/// The runs ordered killed whose tasks have not all ended here: their named containers are
/// removed with their last task.
pub(crate) static ENDING: std::sync::LazyLock<Mutex<std::collections::HashSet<(u64, u32)>>> = std::sync::LazyLock::new(Default::default);

/// Removes the named containers of a run that ended (`Order::Kill`).
pub(crate) fn remove_named(data: &Path, job: u64, epoch: u32) {
    let prefix = format!("{job}.{epoch}.name-");
    for e in std::fs::read_dir(data.join("containers")).into_iter().flatten().flatten() {
        if e.file_name().to_str().is_some_and(|n| n.starts_with(&prefix)) {
            release(&e.path());
        }
    }
}

/// At the agent's start: ends and removes the step containers none of `live` (the adopted
/// tasks' containers) joined. Named containers stay for their jobs' next steps.
pub(crate) fn sweep(data: &Path, live: &std::collections::HashSet<PathBuf>) {
    for e in std::fs::read_dir(data.join("containers")).into_iter().flatten().flatten() {
        let name = e.file_name();
        let Some(n) = name.to_str() else { continue };
        let step = n.split('.').count() == 3 && n.split('.').all(|p| p.parse::<u64>().is_ok());
        if step && !live.contains(&e.path()) {
            release(&e.path());
        }
    }
    // Volumes of containers no task is in (named ones' stay with them), and any half written.
    for e in std::fs::read_dir(data.join("volumes")).into_iter().flatten().flatten() {
        let container = data.join("containers").join(e.file_name());
        let half = e.file_name().to_str().is_none_or(|n| n.starts_with('.'));
        if half || (!live.contains(&container) && !container.is_dir()) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Ends the container in `dir` but keeps its files (a named container between steps).
pub(crate) fn stop(dir: &Path) {
    end_holders(dir);
    let _ = std::fs::remove_file(dir.join("pid"));
}

/// The task's bundle directory: `DATA/containers/JOB.RUN.STEP.RANK`.
pub(crate) fn bundle_dir(data: &Path, k: &TaskKey) -> PathBuf {
    data.join("containers").join(format!("{}.{}.{}.{}", k.job, k.epoch, k.step, k.rank))
}

/// Makes a task's bundle directory, the user's alone (an old one is removed first).
pub(crate) fn make_bundle(data: &Path, k: &TaskKey, uid: u32, gid: u32) -> std::io::Result<PathBuf> {
    let base = data.join("containers");
    std::fs::create_dir_all(&base)?;
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o711))?;
    let dir = bundle_dir(data, k);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir)?;
    if nix::unistd::geteuid().is_root() {
        nix::unistd::chown(&dir, Some(nix::unistd::Uid::from_raw(uid)), Some(nix::unistd::Gid::from_raw(gid)))?;
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

/// Reads at most `max` bytes (the last ones with `tail`) of a file in a user's directory, as
/// the agent (root) may: never through a symbolic link, only a regular file with one name (not
/// a link to a file the user could not read), and never blocking (a FIFO reads as empty).
fn read_users_file(path: &Path, max: u64, tail: bool) -> Option<Vec<u8>> {
    use std::io::{Read, Seek};
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)
        .ok()?;
    let m = f.metadata().ok()?;
    if !m.is_file() || m.nlink() != 1 {
        return None;
    }
    if tail && m.len() > max {
        f.seek(std::io::SeekFrom::Start(m.len() - max)).ok()?;
    }
    let mut b = Vec::new();
    f.take(max).read_to_end(&mut b).ok()?;
    Some(b)
}

/// A container's volumes' directory: `DATA/volumes/NAME`, `NAME` its directory's under
/// `DATA/containers` ([`shared_dir`]): made with the container, removed with it ([`release`]).
fn volumes_dir(shared: &Path) -> Option<PathBuf> {
    let data = shared.parent()?.parent()?;
    Some(data.join("volumes").join(shared.file_name()?))
}

/// The bind mounts that put a container's volumes at their paths (read-only but for
/// `emptyDir`s), in their directory `dir` as [`write_volumes`] lays it out.
fn volume_mounts(dir: &Path, volumes: &[slurmcli::Volume]) -> Vec<slurmcli::Mount> {
    volumes
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let vdir = dir.join(i.to_string());
            let src = if v.file { vdir.join(&v.files[0].name) } else { vdir };
            slurmcli::Mount { src: src.display().to_string(), dst: v.dst.clone(), readonly: !v.scratch }
        })
        .collect()
}

/// Writes the volumes of the container in `shared` (Kubernetes ConfigMap and Secret volumes;
/// `emptyDir`s, empty and writable) once, as it is made, and answers the bind mounts that put
/// them at their paths. A container made already (a replica restarted in it, a second task of
/// its step, a named container's next step) keeps those it has: an `emptyDir` keeps its files
/// across restarts, as Kubernetes'. They are written by the agent into a directory only it
/// can write (`DATA/volumes` is root's; each container's written whole under a new name, with
/// files made new and never through a link, then renamed into place), and handed to the user:
/// each file the user's with its mode, each volume a directory the user may read (and write,
/// for an `emptyDir`). Removed with the container ([`release`]; at an agent's start, those of
/// containers no longer there: [`sweep`]).
pub(crate) fn write_volumes(
    shared: &Path,
    k: &TaskKey,
    uid: u32,
    gid: u32,
    volumes: &[slurmcli::Volume],
) -> anyhow::Result<Vec<slurmcli::Mount>> {
    use base64::Engine;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = volumes_dir(shared).ok_or_else(|| anyhow!("{} has no volumes' directory", shared.display()))?;
    let base = dir.parent().expect("under DATA/volumes");
    std::fs::create_dir_all(base)?;
    std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o711))?;
    if dir.is_dir() {
        return Ok(volume_mounts(&dir, volumes));
    }
    // Written whole under a name of this task's, then renamed into place.
    let tmp = base.join(format!(".{}.{}", dir.file_name().and_then(|n| n.to_str()).unwrap_or("v"), k.rank));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir(&tmp)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o700))?;
    let owner = |p: &Path| -> std::io::Result<()> {
        if nix::unistd::geteuid().is_root() {
            nix::unistd::chown(p, Some(nix::unistd::Uid::from_raw(uid)), Some(nix::unistd::Gid::from_raw(gid)))?;
        }
        Ok(())
    };
    let written = (|| -> anyhow::Result<()> {
        for (i, v) in volumes.iter().enumerate() {
            let vdir = tmp.join(i.to_string());
            std::fs::create_dir(&vdir)?;
            for f in &v.files {
                anyhow::ensure!(slurmcli::container::volume_file_name_ok(&f.name), "volume file name {:?}", f.name);
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(&f.base64)
                    .with_context(|| format!("volume file {}: its contents are not base64", f.name))?;
                let path = vdir.join(&f.name);
                let mut out = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(nix::libc::O_NOFOLLOW)
                    .open(&path)
                    .with_context(|| format!("writing {}", path.display()))?;
                out.write_all(&bytes)?;
                owner(&path)?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(f.mode & 0o777))?;
            }
            owner(&vdir)?;
            // A scratch directory (`emptyDir`) is the task's to write; the others it reads.
            std::fs::set_permissions(&vdir, std::fs::Permissions::from_mode(if v.scratch { 0o700 } else { 0o755 }))?;
        }
        owner(&tmp)?;
        Ok(())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if let Err(e) = std::fs::rename(&tmp, &dir) {
        // Another task of the step wrote them first: theirs are the container's.
        let _ = std::fs::remove_dir_all(&tmp);
        if !dir.is_dir() {
            return Err(e).with_context(|| format!("placing {}", dir.display()));
        }
    }
    Ok(volume_mounts(&dir, volumes))
}

/// Removes a task's bundle once it ended; returns the reason its wrapper left, if any.
pub(crate) fn forget(data: &Path, k: &TaskKey) -> Option<String> {
    let dir = bundle_dir(data, k);
    let why = read_users_file(&dir.join("error"), 4096, false)
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .or_else(|| runc_error(&dir.join("runc.log")).map(|e| format!("container: {e}")));
    let _ = std::fs::remove_dir_all(&dir);
    why.filter(|w| !w.is_empty())
}

/// The container tasks this agent launched: who may ask for an image, which, the container it
/// joins, and the digest of the image it was given (the node's cache keeps those).
#[derive(Default)]
pub(crate) struct Allowed(Mutex<HashMap<String, Entry>>);

struct Entry {
    uid: u32,
    image: String,
    shared: PathBuf,
    given: Option<String>,
}

impl Allowed {
    pub(crate) fn insert(&self, k: &TaskKey, uid: u32, image: &str, shared: &Path) {
        let e = Entry { uid, image: image.to_string(), shared: shared.to_path_buf(), given: None };
        self.0.lock().expect("allowed").insert(stem(k), e);
    }
    pub(crate) fn remove(&self, k: &TaskKey) {
        self.0.lock().expect("allowed").remove(&stem(k));
    }
    /// The container directory of the task `key`, if it is `uid`'s and runs `image`.
    fn check(&self, key: &str, uid: u32, image: &str) -> Option<PathBuf> {
        self.0.lock().expect("allowed").get(key).filter(|e| e.uid == uid && e.image == image).map(|e| e.shared.clone())
    }
    /// Whether any task of `uid` may ask (checked before a request is read).
    fn any_of(&self, uid: u32) -> bool {
        self.0.lock().expect("allowed").values().any(|e| e.uid == uid)
    }
    fn given(&self, key: &str, digest: &str) {
        if let Some(e) = self.0.lock().expect("allowed").get_mut(key) {
            e.given = Some(digest.to_string());
        }
    }
    /// The images the node's container tasks were given, which the cache keeps.
    fn live(&self) -> std::collections::HashSet<String> {
        self.0.lock().expect("allowed").values().filter_map(|e| e.given.clone()).collect()
    }
}

fn stem(k: &TaskKey) -> String {
    format!("{}.{}.{}.{}", k.job, k.epoch, k.step, k.rank)
}

/// What a wrapper asks of its agent: one JSON line.
#[derive(serde::Serialize, serde::Deserialize)]
struct Ask {
    key: String,
    image: String,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    password: Option<String>,
    /// A local layout's image manifest (its bytes as text); its blobs follow the request.
    #[serde(default)]
    manifest: Option<String>,
}

/// The longest request line (a local layout's manifest is in it).
const MAX_ASK: u64 = 4 << 20;

/// The agent's answers: progress lines, then the image or why not.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum Answer {
    Progress(String),
    Ready(image::Ready),
    Error(String),
}

/// Serves `DATA/image.sock` until the agent ends.
pub(crate) fn serve(data: &Path, store: Arc<image::Store>, allowed: Arc<Allowed>) -> Result<()> {
    let sock = data.join("image.sock");
    let sock = sock.as_path();
    let _ = std::fs::remove_file(sock);
    let listener = tokio::net::UnixListener::bind(sock).with_context(|| format!("listening on {}", sock.display()))?;
    std::fs::set_permissions(sock, std::fs::Permissions::from_mode(0o666))?;
    tokio::spawn(async move {
        loop {
            let conn = match listener.accept().await {
                Ok((conn, _)) => conn,
                Err(_) => {
                    // Out of descriptors, say: not a busy loop.
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let store = store.clone();
            let allowed = allowed.clone();
            tokio::spawn(async move {
                if let Ok(Some(digest)) = answer(conn, &store, &allowed).await {
                    // A new image may have taken the cache past its bound.
                    let mut keep = allowed.live();
                    keep.insert(digest);
                    for d in store.trim(&keep).await {
                        tracing::info!("image cache: removed {d}, least recently used");
                    }
                }
            });
        }
    });
    Ok(())
}

/// Answers one task; returns the digest of the image it made ready.
async fn answer(conn: tokio::net::UnixStream, store: &image::Store, allowed: &Allowed) -> std::io::Result<Option<String>> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let uid = conn.peer_cred()?.uid();
    // Nothing is read from a user none of whose container tasks runs here.
    if !allowed.any_of(uid) {
        return Ok(None);
    }
    let (rd, mut wr) = conn.into_split();
    let mut rd = tokio::io::BufReader::new(rd);
    let mut line = String::new();
    // One request of bounded size (a local layout's manifest in it), then a layout's blobs.
    let n = tokio::time::timeout(std::time::Duration::from_secs(30), (&mut rd).take(MAX_ASK).read_line(&mut line))
        .await
        .map_err(|_| std::io::Error::other("the request did not come"))??;
    let send = |a: &Answer| {
        let mut s = serde_json::to_string(a).expect("serializable");
        s.push('\n');
        s
    };
    let ask: Ask = match (n, serde_json::from_str(&line)) {
        (1.., Ok(a)) => a,
        _ => return wr.write_all(send(&Answer::Error("malformed request".into())).as_bytes()).await.map(|()| None),
    };
    let Some(shared) = allowed.check(&ask.key, uid, &ask.image) else {
        return wr
            .write_all(send(&Answer::Error(format!("no container task {} of uid {uid} with this image runs here", ask.key))).as_bytes())
            .await
            .map(|()| None);
    };
    let r = match slurmcli::ImageRef::parse(&ask.image) {
        Err(e) => Answer::Error(e.0),
        Ok(r) => {
            let creds = ask.user.map(|user| image::Credentials { user, password: ask.password.unwrap_or_default() });
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
            let key = key_of(&ask.key);
            let progress = move |s: String| {
                if let Some(k) = key
                    && PULLS.lock().expect("pulls").insert(k, s.clone()).is_none()
                {
                    wake();
                }
                let _ = tx.send(s);
            };
            let fut: std::pin::Pin<Box<dyn std::future::Future<Output = Result<image::Ready, image::Error>> + Send + '_>> =
                match (&r, ask.manifest.as_deref()) {
                    (slurmcli::ImageRef::Layout { .. }, Some(m)) => Box::pin(store.ensure_local(&r, m.as_bytes(), &mut rd, &progress)),
                    _ => Box::pin(store.ensure(&r, creds.as_ref(), &progress)),
                };
            tokio::pin!(fut);
            let mut deaf = false;
            let answer = loop {
                tokio::select! {
                    res = &mut fut => break match res { Ok(ready) => Answer::Ready(ready), Err(e) => Answer::Error(e.to_string()) },
                    Some(p) = rx.recv() => {
                        // A wrapper that does not read hears no more progress (the pull goes on).
                        if !deaf {
                            let line = send(&Answer::Progress(p));
                            let w = tokio::time::timeout(std::time::Duration::from_secs(5), wr.write_all(line.as_bytes())).await;
                            deaf = !matches!(w, Ok(Ok(())));
                        }
                    }
                }
            };
            if let Some(k) = key {
                PULLS.lock().expect("pulls").remove(&k);
                wake();
            }
            answer
        }
    };
    // The node's unpacked images are root's alone: the task reaches its image through its own
    // container directory, where the agent binds it read-only.
    let r = match r {
        Answer::Ready(mut ready) if nix::unistd::geteuid().is_root() => match expose(&ready.rootfs, &shared.join(IMAGE_DIR)) {
            Ok(at) => {
                ready.rootfs = at;
                Answer::Ready(ready)
            }
            Err(e) => Answer::Error(format!("giving the task its image: {e}")),
        },
        other => other,
    };
    let digest = match &r {
        Answer::Ready(ready) => Some(ready.digest.clone()),
        _ => None,
    };
    if let Some(d) = &digest {
        allowed.given(&ask.key, d);
    }
    // The wrapper may be gone (cancelled): the image is ready all the same.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), wr.write_all(send(&r).as_bytes())).await;
    Ok(digest)
}

/// The credentials of the user running this for `registry`, with `login` (Enroot's `USER@`)
/// when given: Enroot's `.credentials` (netrc lines `machine HOST login USER password PASS`),
/// then Docker's `config.json` (`auths.HOST.auth`, base64 of `USER:PASS`).
pub fn credentials(registry: &str, login: Option<&str>, home: &Path) -> Option<(String, String)> {
    let enroot = std::env::var_os("ENROOT_CONFIG_PATH").map(PathBuf::from).unwrap_or_else(|| home.join(".config/enroot"));
    if let Ok(text) = std::fs::read_to_string(enroot.join(".credentials")) {
        let words: Vec<&str> = text.split_whitespace().collect();
        let mut i = 0;
        while i < words.len() {
            if words[i] == "machine" && words.get(i + 1) == Some(&registry) {
                let mut user = None;
                let mut pass = None;
                let mut j = i + 2;
                while j + 1 < words.len() && words[j] != "machine" {
                    match words[j] {
                        "login" => user = Some(words[j + 1]),
                        "password" => pass = Some(words[j + 1]),
                        _ => {}
                    }
                    j += 2;
                }
                if let (Some(u), Some(p)) = (user, pass)
                    && login.is_none_or(|l| l == u)
                {
                    return Some((u.to_string(), p.to_string()));
                }
                i = j;
            } else {
                i += 1;
            }
        }
    }
    let docker = std::env::var_os("DOCKER_CONFIG").map(PathBuf::from).unwrap_or_else(|| home.join(".docker"));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(docker.join("config.json")).ok()?).ok()?;
    let auths = v.get("auths")?.as_object()?;
    let hub = registry == slurmcli::container::DEFAULT_REGISTRY;
    let entry = auths.iter().find(|(k, _)| {
        let k = k.trim_start_matches("https://").trim_start_matches("http://");
        let k = k.split('/').next().unwrap_or("");
        k == registry || (hub && (k == "index.docker.io" || k == "docker.io"))
    })?;
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD.decode(entry.1.get("auth")?.as_str()?.trim()).ok()?;
    let (u, p) = std::str::from_utf8(&raw).ok()?.split_once(':')?;
    login.is_none_or(|l| l == u).then(|| (u.to_string(), p.to_string()))
}

/// The media type of an OCI image index (a manifest list).
const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";

/// Reads a local OCI image layout (`oci:DIR[:TAG]`) as the user: its image manifest's text
/// (an index resolved to this node's platform) and the files of its layers, then its
/// configuration, in the manifest's order.
fn read_layout(dir: &Path, tag: Option<&str>) -> Result<(String, Vec<PathBuf>)> {
    let blob = |digest: &str| -> Result<PathBuf> {
        let hex = digest.strip_prefix("sha256:").filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()));
        let hex = hex.ok_or_else(|| anyhow!("{digest:?} is not a sha256 digest"))?;
        Ok(dir.join("blobs/sha256").join(hex))
    };
    let read_json = |p: &Path| -> Result<(Vec<u8>, serde_json::Value)> {
        let bytes = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
        let v = serde_json::from_slice(&bytes).with_context(|| format!("{} is not JSON", p.display()))?;
        Ok((bytes, v))
    };
    let (_, index) = read_json(&dir.join("index.json"))?;
    let list = |v: &serde_json::Value| v["manifests"].as_array().cloned().unwrap_or_default();
    let name_of = |m: &serde_json::Value| m["annotations"]["org.opencontainers.image.ref.name"].as_str().map(str::to_string);
    let mut found: Vec<serde_json::Value> = list(&index).into_iter().filter(|m| tag.is_none() || name_of(m).as_deref() == tag).collect();
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        a => a,
    };
    let platform_ok = |m: &serde_json::Value| {
        let p = &m["platform"];
        p.is_null() || (p["os"] == "linux" && p["architecture"] == arch)
    };
    found.retain(&platform_ok);
    let mut desc = match (found.len(), tag) {
        (1, _) => found.remove(0),
        (0, Some(t)) => return Err(anyhow!("no image tagged {t:?} for linux/{arch} in {}/index.json", dir.display())),
        (0, None) => return Err(anyhow!("{}/index.json lists no image for linux/{arch}", dir.display())),
        (_, _) => {
            let tags: Vec<String> = list(&index).iter().filter_map(name_of).collect();
            return Err(anyhow!("{} holds several images: name one (oci:DIR:TAG; tags {})", dir.display(), tags.join(", ")));
        }
    };
    // An index (a manifest list): this node's platform's manifest.
    if desc["mediaType"] == INDEX_TYPE {
        let (_, inner) = read_json(&blob(desc["digest"].as_str().unwrap_or(""))?)?;
        desc = list(&inner)
            .into_iter()
            .find(|m| platform_ok(m) && !m["platform"].is_null())
            .ok_or_else(|| anyhow!("no image for linux/{arch} in its index"))?;
    }
    let digest = desc["digest"].as_str().unwrap_or("").to_string();
    let (bytes, manifest) = read_json(&blob(&digest)?)?;
    if image::digest_of(&bytes) != digest {
        return Err(anyhow!("its manifest does not match its digest {digest}"));
    }
    let mut paths = Vec::new();
    for l in manifest["layers"].as_array().into_iter().flatten() {
        paths.push(blob(l["digest"].as_str().unwrap_or(""))?);
    }
    paths.push(blob(manifest["config"]["digest"].as_str().unwrap_or(""))?);
    let text = String::from_utf8(bytes).map_err(|_| anyhow!("its manifest is not UTF-8"))?;
    Ok((text, paths))
}

/// A program of the node's system (not the user's `PATH`: the task's environment is the job's).
fn system_program(name: &str) -> Result<PathBuf> {
    ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow!("{name} is not installed on this node"))
}

/// The container tasks whose image is being pulled, and how far (reported with each heartbeat:
/// their jobs show as `CONFIGURING`).
pub(crate) static PULLS: std::sync::LazyLock<Mutex<HashMap<TaskKey, String>>> = std::sync::LazyLock::new(Default::default);

/// Wakes the heartbeat loop (set by it at start).
pub(crate) static WAKE: std::sync::OnceLock<Arc<tokio::sync::Notify>> = std::sync::OnceLock::new();

fn wake() {
    if let Some(w) = WAKE.get() {
        w.notify_one();
    }
}

/// The pulls now, for a heartbeat.
pub(crate) fn pulls() -> Vec<control::Pulling> {
    PULLS.lock().expect("pulls").iter().map(|(k, p)| control::Pulling { key: *k, progress: p.clone() }).collect()
}

fn key_of(s: &str) -> Option<TaskKey> {
    let mut p = s.split('.').map(str::parse::<u64>);
    let (job, epoch, step, rank) = (p.next()?.ok()?, p.next()?.ok()?, p.next()?.ok()?, p.next()?.ok()?);
    Some(TaskKey { job, epoch: u32::try_from(epoch).ok()?, step: u32::try_from(step).ok()?, rank: u32::try_from(rank).ok()? })
}

/// The agent's container tasks (one agent per process).
pub(crate) static ALLOWED: std::sync::LazyLock<Arc<Allowed>> = std::sync::LazyLock::new(Arc::default);

/// The first subordinate id of `name`/`id` in `/etc/subuid` or `/etc/subgid`.
fn subordinate(file: &str, name: &str, id: u32) -> Option<u32> {
    std::fs::read_to_string(file).ok()?.lines().find_map(|l| {
        let mut p = l.trim().split(':');
        let (who, start, count) = (p.next()?, p.next()?, p.next()?);
        ((who == name || who == id.to_string()) && count.parse::<u32>().ok()? >= 1).then(|| start.parse().ok()).flatten()
    })
}

/// `tandem __container SOCKET BUNDLE KEY SPEC NODE -- ARGV...`: returns only on failure, with
/// the exit code to leave with.
pub fn main(args: &[String]) -> i32 {
    match run(args) {
        Ok(never) => match never {},
        Err(e) => failed(args.get(1), &e),
    }
}

/// A container task that cannot run: its reason on its error stream and in the bundle's
/// `error` (the agent passes it on); the exit code.
fn failed(bundle: Option<&String>, e: &anyhow::Error) -> i32 {
    let why = format!("{e:#}");
    eprintln!("slurmstepd: error: container: {why}");
    if let Some(b) = bundle {
        let _ = std::fs::write(Path::new(b).join("error"), format!("container: {why}"));
    }
    1
}

enum Never {}

/// How many times (a second apart) a container task asks an agent that does not answer.
const ASK_TRIES: u32 = 60;

/// Why an ask failed: the agent refused (final), or could not be reached (asked again).
enum AskError {
    Refused(String),
    Unreachable(anyhow::Error),
}
use AskError::{Refused, Unreachable};

/// One request to the agent (then a local layout's blobs, `blobs`): the image, `None` if the
/// connection ended first.
fn ask_once(sock: &str, line: &str, blobs: &[PathBuf]) -> std::result::Result<Option<image::Ready>, AskError> {
    let mut conn = std::os::unix::net::UnixStream::connect(sock)
        .with_context(|| format!("reaching the node's agent at {sock}"))
        .map_err(Unreachable)?;
    conn.write_all(line.as_bytes()).map_err(|e| Unreachable(e.into()))?;
    for b in blobs {
        let mut f = std::fs::File::open(b).with_context(|| format!("reading {}", b.display())).map_err(|e| Refused(format!("{e:#}")))?;
        if let Err(e) = std::io::copy(&mut f, &mut conn) {
            // The agent stopped reading: its answer says why.
            let _ = e;
            break;
        }
    }
    for l in BufReader::new(conn).lines() {
        let Ok(l) = l else { return Ok(None) };
        match serde_json::from_str::<Answer>(&l).map_err(|e| Unreachable(anyhow!("the agent's answer: {e}")))? {
            Answer::Progress(_) => {}
            Answer::Ready(r) => return Ok(Some(r)),
            Answer::Error(e) => return Err(Refused(e)),
        }
    }
    Ok(None)
}

fn run(args: &[String]) -> Result<Never> {
    let [sock, bundle, key, spec, node, dashes, argv @ ..] = args else {
        return Err(anyhow!("usage: tandem {CONTAINER_CMD} SOCKET BUNDLE KEY SPEC NODE -- ARGV..."));
    };
    if dashes != "--" || argv.is_empty() {
        return Err(anyhow!("usage: tandem {CONTAINER_CMD} SOCKET BUNDLE KEY SPEC NODE -- ARGV..."));
    }
    let c: slurmcli::Container = serde_json::from_str(spec).context("the container options")?;
    let node: NodeSide = serde_json::from_str(node).context("the node's settings")?;
    // The task's GPUs, through the node's CDI specifications.
    // The container has the job's GPUs of this node (CUDA numbers devices in bus order, here
    // the order of their indices); the task sees its own among them.
    let mut job_gpus: Vec<u8> = node.job_gpus.iter().chain(&node.gpus).copied().collect();
    job_gpus.sort_unstable();
    job_gpus.dedup();
    let cdi = if job_gpus.is_empty() {
        Vec::new()
    } else {
        image::cdi::load_gpu_specs(&image::cdi::dirs_or_default(&node.cdi)).map_err(|e| anyhow!(e))?
    };
    let r = slurmcli::ImageRef::parse(&c.image).map_err(|e| anyhow!(e.0))?;
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    let pw = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok().flatten();
    let home = pw.as_ref().map(|p| p.dir.clone()).or_else(|| std::env::var_os("HOME").map(PathBuf::from)).unwrap_or_else(|| "/".into());
    let name = pw.as_ref().map(|p| p.name.clone()).unwrap_or_else(|| uid.to_string());
    // Mount sources: the user must reach them as the user.
    for m in &c.mounts {
        std::fs::metadata(&m.src).with_context(|| format!("--container-mounts: the source {}", m.src))?;
    }
    let (sub_uid, sub_gid) = if c.remap_root {
        (None, None)
    } else {
        let u = subordinate("/etc/subuid", &name, uid);
        let g = subordinate("/etc/subgid", &name, gid);
        match (u, g) {
            (Some(u), Some(g)) => (Some(u), Some(g)),
            _ => {
                return Err(anyhow!(
                    "the container's root needs a subordinate id of {name}'s in /etc/subuid and /etc/subgid (useradd makes them); or run with --container-remap-root"
                ));
            }
        }
    };
    let mut ask = Ask { key: key.clone(), image: c.image.clone(), user: None, password: None, manifest: None };
    // A local layout is read here, as the user, and sent to the agent.
    let mut blobs = Vec::new();
    if let slurmcli::ImageRef::Layout { dir, tag } = &r {
        let (manifest, paths) =
            read_layout(Path::new(dir), tag.as_deref()).with_context(|| format!("the local image {}", r.canonical()))?;
        ask.manifest = Some(manifest);
        blobs = paths;
    }
    if let slurmcli::ImageRef::Registry { registry, user, .. } = &r
        && let Some((u, p)) = credentials(registry, user.as_deref(), &home)
    {
        ask.user = Some(u);
        ask.password = Some(p);
    }
    let mut line = serde_json::to_string(&ask)?;
    line.push('\n');
    // The agent may restart meanwhile (an upgrade, a crash): asked again, for a while (the
    // restarted agent adopts this task and answers for it), then the task fails.
    let mut ready = None;
    let mut last = anyhow!("the node's agent did not answer");
    for _ in 0..ASK_TRIES {
        match ask_once(sock, &line, &blobs) {
            Ok(Some(r)) => {
                ready = Some(r);
                break;
            }
            Ok(None) => last = anyhow!("the node's agent ended before the image was ready"),
            Err(Refused(e)) => return Err(anyhow!(e)),
            Err(Unreachable(e)) => last = e,
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    let ready = ready.ok_or(last)?;
    let init = system_program(INIT)?;
    let mut env: Vec<(String, String)> =
        std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect();
    // The PMI socket (srun --mpi=pmi2): runc passes descriptors on from 3 up, so it is 3 inside.
    let pmi_fd: Option<i32> = env.iter().find(|(k, _)| k == "PMI_FD").and_then(|(_, v)| v.parse().ok()).filter(|fd| *fd > 2);
    if pmi_fd.is_some() {
        for (k, v) in &mut env {
            if k == "PMI_FD" {
                *v = PMI_FD_INSIDE.to_string();
            }
        }
    }
    let mut spec = image::spec::build(&image::spec::Run {
        ready: &ready,
        container: &c,
        argv,
        env: &env,
        uid,
        gid,
        home: home.to_str(),
        init: Some(&init),
    });
    // The container has the job's GPUs of this node; the task sees its own among them.
    image::cdi::apply(&mut spec, &cdi, &job_gpus).map_err(|e| anyhow!(e))?;
    if !job_gpus.is_empty() {
        image::cdi::visible(&mut spec, &job_gpus, &node.gpus);
    }
    let bundle = PathBuf::from(bundle);
    let process = spec.process().clone().ok_or_else(|| anyhow!("the container's spec has no process"))?;
    std::fs::write(bundle.join("process.json"), serde_json::to_vec(&process)?).context("writing the task's process.json")?;
    let shared = node.shared;
    let id = format!("tandem-{}", shared.file_name().and_then(|n| n.to_str()).unwrap_or(key));
    // The step's first task on this node makes the container; the others join it.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(shared.join("lock"))
        .with_context(|| format!("opening {}", shared.join("lock").display()))?;
    let lock = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow!("locking {}: {e}", shared.display()))?;
    // A named container keeps the image and the kind of root it was made with (and what its
    // steps wrote over it): a step asking for others is refused, not joined.
    let made = format!("{} remap_root={} writable={}", ready.digest, c.remap_root, c.writable);
    if c.name.is_some()
        && let Some(was) = std::fs::read_to_string(shared.join("digest")).ok().filter(|w| *w != made)
    {
        return Err(anyhow!(
            "--container-name: this job's container of that name was made as {was:?}, not {made:?}: a named container keeps the image and the --container-remap-root and --container-writable it was made with"
        ));
    }
    let pid = match holder(&shared) {
        Some(pid) => pid,
        None => {
            create(&shared, &id, spec, &made, sub_uid.zip(sub_gid), uid, gid)?;
            // runc returns once it let process 1 go; it becomes catatonit a moment later.
            let mut pid = None;
            for _ in 0..250 {
                pid = holder(&shared);
                if pid.is_some() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            pid.ok_or_else(|| anyhow!("the container started but its process 1 is gone"))?
        }
    };
    drop(lock);
    // runc joins the container as the user namespace's root (the user, or with
    // --container-remap-root its subordinate id), the task then becoming the user inside.
    let mut cmd = std::process::Command::new(system_program("nsenter")?);
    cmd.arg(format!("--target={pid}")).arg("--user");
    if c.remap_root {
        // The user is root there already (and the namespace denies setgroups).
        cmd.arg("--preserve-credentials");
    }
    cmd.arg("--").arg(system_program(RUNTIME)?);
    cmd.arg("--log").arg(bundle.join("runc.log")).arg("--root").arg(shared.join("state"));
    cmd.arg("exec");
    if let Some(fd) = pmi_fd {
        exec::pass_fd_at(&mut cmd, fd, PMI_FD_INSIDE);
        cmd.arg("--preserve-fds=1");
    }
    cmd.arg("--process").arg(bundle.join("process.json")).arg(&id);
    let e = cmd.exec();
    Err(anyhow!("cannot run nsenter (is util-linux installed on this node?): {e}"))
}

/// Makes and starts the container in `shared`, held by `catatonit -P`: `unshare` makes a user
/// namespace in which the user is root (with `sub`, the user's first subordinate id is root
/// and the user is itself), and in it `tandem __container-root` builds the root filesystem
/// and runs `runc run --detach`.
fn create(shared: &Path, id: &str, spec: oci_spec::runtime::Spec, made: &str, sub: Option<(u32, u32)>, uid: u32, gid: u32) -> Result<()> {
    // The container is made under umask 022 whatever the job's (a job submitted under umask
    // 077 would make its root's directories its subordinate root's alone, which process 1,
    // running as the user, cannot enter); the task inside still runs under the job's umask.
    let job_umask = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    let made = make(shared, id, spec, made, sub, uid, gid);
    nix::sys::stat::umask(job_umask);
    made
}

fn make(shared: &Path, id: &str, mut spec: oci_spec::runtime::Spec, made: &str, sub: Option<(u32, u32)>, uid: u32, gid: u32) -> Result<()> {
    std::fs::write(shared.join("digest"), made)?;
    if let Some(p) = spec.process_mut() {
        p.set_args(Some(vec![image::spec::INIT_PATH.to_string(), "-P".to_string()]));
        // How the agent finds it to end it (`holders`).
        let mut env = p.env().clone().unwrap_or_default();
        env.push(format!("{HOLDER_ENV}={}", shared.display()));
        p.set_env(Some(env));
    }
    spec.save(shared.join("config.json")).map_err(|e| anyhow!("writing the container's config.json: {e}"))?;
    for stale in ["state", "pid", "error", "runc.log"] {
        let p = shared.join(stale);
        let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
    }
    let mut cmd = std::process::Command::new(system_program("unshare")?);
    cmd.args(["--user", "--mount"]);
    match sub {
        // The user is itself inside; its subordinate id is root.
        Some((su, sg)) => {
            cmd.arg(format!("--map-user={uid}")).arg(format!("--map-group={gid}"));
            cmd.arg(format!("--map-users={su},0,1")).arg(format!("--map-groups={sg},0,1"));
            cmd.args(["--setuid=0", "--setgid=0"]);
        }
        // --container-remap-root: the user is root inside.
        None => {
            cmd.arg("--map-root-user");
        }
    }
    let exe = std::env::current_exe().context("finding tandem's own program")?;
    cmd.arg("--").arg(exe).arg(ROOT_CMD).arg(shared).arg(id);
    cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
    let st = cmd.status().context("cannot run unshare (are util-linux and uidmap installed on this node?)")?;
    if st.success() {
        return Ok(());
    }
    let why = std::fs::read_to_string(shared.join("error"))
        .ok()
        .map(|e| e.trim().trim_start_matches("container: ").to_string())
        .or_else(|| runc_error(&shared.join("runc.log")))
        .unwrap_or_else(|| format!("making the container failed ({st})"));
    Err(anyhow!(why))
}

/// runc's last error in its log (`time=... level=error msg="..."`).
fn runc_error(log: &Path) -> Option<String> {
    let log = read_users_file(log, 64 * 1024, true)?;
    let log = String::from_utf8_lossy(&log).into_owned();
    let line = log.lines().rev().find(|l| l.contains("level=error"))?;
    let msg = line.split_once("msg=").map_or(line, |(_, m)| m).trim().trim_matches('"').replace("\\\"", "\"");
    Some(format!("{RUNTIME}: {}", slurmcli::visible_text(&msg)))
}

/// The hidden subcommand that, inside the user namespace `unshare` made (where the user or its
/// subordinate id is root, in a mount namespace of its own), builds the container's root and
/// starts it with runc.
pub const ROOT_CMD: &str = "__container-root";

/// `tandem __container-root DIR ID`: the exit code.
pub fn root_main(args: &[String]) -> i32 {
    match stage_root(args) {
        Ok(code) => code,
        Err(e) => failed(args.first(), &e),
    }
}

fn stage_root(args: &[String]) -> Result<i32> {
    let [shared, id] = args else { return Err(anyhow!("usage: tandem {ROOT_CMD} DIR ID")) };
    let shared = PathBuf::from(shared);
    let mut spec =
        oci_spec::runtime::Spec::load(shared.join("config.json")).map_err(|e| anyhow!("reading the container's config.json: {e}"))?;
    let image_root = spec.root().as_ref().map(|r| r.path().clone()).ok_or_else(|| anyhow!("config.json names no root"))?;
    let writable = spec.root().as_ref().and_then(|r| r.readonly()) == Some(false);
    // Bind mounts' destinations (runc makes those of its own mounts, /proc, /dev and /sys,
    // which every unpacked image has).
    let dests: Vec<(PathBuf, bool)> = spec
        .mounts()
        .iter()
        .flatten()
        .filter(|m| m.typ().as_deref() == Some("none"))
        // Under runc's own /dev, /proc and /sys, runc makes them.
        .filter(|m| !["/dev", "/proc", "/sys"].iter().any(|p| m.destination().starts_with(p)))
        .map(|m| (m.destination().clone(), m.source().as_ref().is_some_and(|s| !s.is_dir())))
        .collect();
    let root = shared.join("rootfs");
    std::fs::create_dir_all(&root)?;
    if writable {
        crate::rootfs::overlay(&image_root, &shared, &root, &dests)?;
    } else {
        crate::rootfs::build(&image_root, &root, &dests)?;
    }
    if let Some(r) = spec.root_mut() {
        r.set_path(root);
    }
    spec.save(shared.join("config.json")).map_err(|e| anyhow!("writing the container's config.json: {e}"))?;
    let st = std::process::Command::new(system_program(RUNTIME)?)
        // runc's own words (a warning at every start on cgroup v1) go to its log, whose errors
        // the task reports.
        .arg("--log")
        .arg(shared.join("runc.log"))
        .arg("--root")
        .arg(shared.join("state"))
        .args(["run", "--detach", "--no-new-keyring", "--pid-file"])
        .arg(shared.join("pid"))
        .arg("--bundle")
        .arg(&shared)
        .arg(id)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map_err(|e| anyhow!("cannot run {RUNTIME} (is runc installed on this node?): {e}"))?;
    Ok(st.code().unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volumes_are_written_once_per_container_and_go_with_it() {
        use base64::Engine;
        let data = std::env::temp_dir().join(format!("vols-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        let shared = data.join("containers").join("7.1.0");
        std::fs::create_dir_all(&shared).unwrap();
        let (uid, gid) = (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw());
        let file = |name: &str, text: &str, mode: u32| slurmcli::VolumeFile {
            name: name.into(),
            base64: base64::engine::general_purpose::STANDARD.encode(text),
            mode,
        };
        let volumes = vec![
            slurmcli::Volume { dst: "/etc/cfg".into(), files: vec![file("app.conf", "mode=1", 0o640)], file: false, scratch: false },
            slurmcli::Volume { dst: "/etc/app.conf".into(), files: vec![file("app.conf", "mode=1", 0o644)], file: true, scratch: false },
            slurmcli::Volume { dst: "/scratch".into(), files: vec![], file: false, scratch: true },
        ];
        let k = TaskKey { job: 7, epoch: 1, step: 0, rank: 0 };
        let mounts = write_volumes(&shared, &k, uid, gid, &volumes).unwrap();
        let dir = data.join("volumes/7.1.0");
        assert_eq!(
            mounts.iter().map(|m| (m.src.clone(), m.dst.as_str(), m.readonly)).collect::<Vec<_>>(),
            [
                (dir.join("0").display().to_string(), "/etc/cfg", true),
                (dir.join("1/app.conf").display().to_string(), "/etc/app.conf", true),
                (dir.join("2").display().to_string(), "/scratch", false),
            ]
        );
        assert_eq!(std::fs::read_to_string(dir.join("0/app.conf")).unwrap(), "mode=1");
        assert_eq!(std::fs::metadata(dir.join("0/app.conf")).unwrap().permissions().mode() & 0o777, 0o640);
        // A restart in the same container (another task of it) keeps them: what the task
        // wrote in its emptyDir is still there.
        std::fs::write(dir.join("2/kept"), "x").unwrap();
        let again = write_volumes(&shared, &TaskKey { rank: 1, ..k }, uid, gid, &volumes).unwrap();
        assert_eq!(again, mounts);
        assert!(dir.join("2/kept").exists());
        // Gone with the container; a half-written one goes at the agent's start.
        release(&shared);
        assert!(!dir.exists() && !shared.exists());
        std::fs::create_dir_all(data.join("volumes/.8.1.0.0")).unwrap();
        sweep(&data, &std::collections::HashSet::new());
        assert_eq!(std::fs::read_dir(data.join("volumes")).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(&data);
    }

    #[test]
    fn credentials_from_enroot_then_docker() {
        let d = std::env::temp_dir().join(format!("creds-{}", std::process::id()));
        std::fs::create_dir_all(d.join(".config/enroot")).unwrap();
        std::fs::create_dir_all(d.join(".docker")).unwrap();
        std::fs::write(
            d.join(".config/enroot/.credentials"),
            "machine nvcr.io login $oauthtoken password KEY1\nmachine other login u password p\n",
        )
        .unwrap();
        // "alice:secret"
        std::fs::write(
            d.join(".docker/config.json"),
            r#"{"auths":{"127.0.0.1:5000":{"auth":"YWxpY2U6c2VjcmV0"},"https://index.docker.io/v1/":{"auth":"aHViOmh1Yg=="}}}"#,
        )
        .unwrap();
        assert_eq!(credentials("nvcr.io", None, &d), Some(("$oauthtoken".into(), "KEY1".into())));
        assert_eq!(credentials("127.0.0.1:5000", None, &d), Some(("alice".into(), "secret".into())));
        assert_eq!(credentials("127.0.0.1:5000", Some("bob"), &d), None);
        assert_eq!(credentials(slurmcli::container::DEFAULT_REGISTRY, None, &d), Some(("hub".into(), "hub".into())));
        assert_eq!(credentials("nowhere", None, &d), None);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn subordinate_ids() {
        let f = std::env::temp_dir().join(format!("subuid-{}", std::process::id()));
        std::fs::write(&f, "alice:100000:65536\n1002:200000:10\nbad\n").unwrap();
        let p = f.to_str().unwrap();
        assert_eq!(subordinate(p, "alice", 1001), Some(100000));
        assert_eq!(subordinate(p, "bob", 1002), Some(200000));
        assert_eq!(subordinate(p, "carol", 1003), None);
        std::fs::remove_file(&f).unwrap();
    }
}
