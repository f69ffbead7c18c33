//! The host entries of `tandem up`'s node names: a block of `/etc/hosts` lines, each marked
//! `# tandem-up PID DATA` (the process that wrote it, the cluster's data directory), added at
//! the start and removed at the exit. Every change is made under an exclusive lock on a file of
//! its own (many clusters start and stop at once in the test suite), and touches no line
//! without that mark: a block of the same data directory (a crashed earlier run) is replaced,
//! and a block whose process is gone is dropped; every other line stays byte for byte.
//!
//! The file is replaced by a rename where it can be, and rewritten in place where it cannot (in
//! a container `/etc/hosts` is a bind mount, where a rename over it fails with EBUSY).

use anyhow::{Context, Result, bail};
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// The comment that marks a line as `tandem up`'s.
const MARK: &str = "# tandem-up ";

/// A hosts file and the lock that guards changes to it.
#[derive(Clone, Debug)]
pub struct Hosts {
    /// The file (`/etc/hosts`).
    pub path: PathBuf,
    /// The lock file, locked (`flock`) around every change.
    pub lock: PathBuf,
}

impl Hosts {
    /// The machine's `/etc/hosts`, locked through `/run/tandem-up-hosts.lock` (or
    /// `/etc/hosts.tandem-up.lock` where there is no `/run`).
    pub fn system() -> Hosts {
        let lock = if Path::new("/run").is_dir() { "/run/tandem-up-hosts.lock" } else { "/etc/hosts.tandem-up.lock" };
        Hosts { path: "/etc/hosts".into(), lock: lock.into() }
    }

    /// Adds the block of cluster `id` (its data directory): `entries` (address, name), each
    /// line marked with `id` and this process's id. A block of the same `id` is replaced, one
    /// of a process that is gone is dropped. Returns the guard that removes the block when
    /// dropped, and a warning for each name an earlier line of the file (another's, or another
    /// cluster's) gives another address (which the resolver may then answer).
    pub fn add(&self, id: &str, entries: &[(Ipv4Addr, String)]) -> Result<(Block, Vec<String>)> {
        check_id(id)?;
        let pid = std::process::id();
        self.change(|old| {
            let mut new = keep_others(old, id);
            if !new.is_empty() && !new.ends_with(b"\n") {
                new.push(b'\n');
            }
            for (addr, name) in entries {
                new.extend_from_slice(format!("{addr}\t{name}\t{MARK}{pid} {id}\n").as_bytes());
            }
            new
        })?;
        let text = std::fs::read(&self.path).unwrap_or_default();
        let shadowed = entries
            .iter()
            .filter_map(|(addr, name)| match first_addr(&text, name) {
                Some((a, theirs)) if a != addr.to_string() => Some(format!(
                    "tandem up: {} already names {name} as {a}{}, not {addr}: jobs may reach {name} there",
                    self.path.display(),
                    if theirs { " (another tandem up's line)" } else { "" }
                )),
                _ => None,
            })
            .collect();
        Ok((Block { hosts: self.clone(), id: id.to_string(), done: false }, shadowed))
    }

    /// Removes the lines of cluster `id` (and those of processes that are gone).
    pub fn remove(&self, id: &str) -> Result<()> {
        check_id(id)?;
        self.change(|old| keep_others(old, id))?;
        Ok(())
    }

    /// Whether the file already gives every name of `entries` its address (its first line
    /// naming it does), so that nothing needs to be added.
    pub fn resolves(&self, entries: &[(Ipv4Addr, String)]) -> bool {
        let text = std::fs::read(&self.path).unwrap_or_default();
        entries.iter().all(|(addr, name)| first_addr(&text, name).is_some_and(|(a, _)| a == addr.to_string()))
    }

    /// Rewrites the file as `f` makes it of its contents, under the lock; a file `f` leaves as
    /// it was is not written.
    fn change(&self, f: impl FnOnce(&[u8]) -> Vec<u8>) -> Result<()> {
        let lock = crate::lock_file(&self.lock)?;
        lock.lock().with_context(|| format!("locking {}", self.lock.display()))?;
        // The file itself, where it is a link (the lines go into what it names).
        let path = std::fs::canonicalize(&self.path).with_context(|| format!("reading {}", self.path.display()))?;
        let old = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let new = f(&old);
        if new != old {
            write(&path, &new)?;
        }
        Ok(())
    }
}

/// Removes the block when dropped (at `tandem up`'s exit, and when its start fails).
pub struct Block {
    hosts: Hosts,
    id: String,
    done: bool,
}

impl Block {
    /// Removes the block now.
    pub fn remove(mut self) -> Result<()> {
        self.done = true;
        self.hosts.remove(&self.id)
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        if !self.done
            && let Err(e) = self.hosts.remove(&self.id)
        {
            tracing::warn!("tandem up: removing its lines from {}: {e:#}", self.hosts.path.display());
        }
    }
}

/// An id fits on one line of the file.
fn check_id(id: &str) -> Result<()> {
    if id.is_empty() || id.contains(['\n', '\r']) {
        bail!("{id:?} cannot mark a line of a hosts file");
    }
    Ok(())
}

/// `old` without the lines of cluster `id` and without those of `tandem up` processes that are
/// gone; every other line as it was.
fn keep_others(old: &[u8], id: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(old.len());
    for line in old.split_inclusive(|&b| b == b'\n') {
        let drop = mark(line).is_some_and(|(pid, theirs)| theirs == id || !alive(pid));
        if !drop {
            out.extend_from_slice(line);
        }
    }
    out
}

/// The process id and cluster of a line `tandem up` wrote (`ADDR NAME # tandem-up PID ID`).
fn mark(line: &[u8]) -> Option<(i32, &str)> {
    let line = std::str::from_utf8(line).ok()?.trim_end_matches(['\n', '\r']);
    let (entry, comment) = line.split_at(line.find('#')?);
    if entry.split_whitespace().count() < 2 {
        return None;
    }
    let (pid, id) = comment.strip_prefix(MARK)?.split_once(' ')?;
    Some((pid.parse().ok().filter(|&p| p > 0)?, id))
}

/// Whether process `pid` exists (one of another user counts).
fn alive(pid: i32) -> bool {
    !matches!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None), Err(nix::errno::Errno::ESRCH))
}

/// The address the first line naming `name` gives it, and whether that line is `tandem up`'s.
fn first_addr(text: &[u8], name: &str) -> Option<(String, bool)> {
    for line in text.split(|&b| b == b'\n') {
        let Ok(s) = std::str::from_utf8(line) else { continue };
        let entry = s.split('#').next().unwrap_or("");
        let mut words = entry.split_whitespace();
        let Some(addr) = words.next() else { continue };
        if words.any(|w| w.eq_ignore_ascii_case(name)) {
            return Some((addr.to_string(), mark(line).is_some()));
        }
    }
    None
}

/// Replaces `path` with `data`: by a rename of a new file beside it (owner and mode kept) where
/// it can, else (a bind mount, a directory it may not write) by rewriting the file in place.
fn write(path: &Path, data: &[u8]) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tandem-up.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let renamed = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(meta.mode() & 0o7777)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&tmp)?;
        let _ = std::os::unix::fs::fchown(&f, Some(meta.uid()), Some(meta.gid()));
        f.set_permissions(meta.permissions())?;
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if renamed.is_ok() {
        return Ok(());
    }
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(data).with_context(|| format!("writing {}", path.display()))?;
    f.set_len(data.len() as u64).with_context(|| format!("writing {}", path.display()))?;
    f.sync_all().with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str, text: &str) -> Hosts {
        let dir = std::env::temp_dir().join(format!("tandem-up-hosts-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("hosts"), text).unwrap();
        Hosts { path: dir.join("hosts"), lock: dir.join("hosts.lock") }
    }

    /// As `tandem up` has them: all on 127.0.0.1 (another address here, to see it kept).
    fn entries(n: u32) -> Vec<(Ipv4Addr, String)> {
        (1..=n).map(|i| (Ipv4Addr::new(127, 0, 2, i as u8), format!("node{i}"))).collect()
    }

    const BASE: &str = "127.0.0.1 localhost\n# a comment # tandem-up 1 x\n::1 localhost ip6-localhost\n127.0.1.1 debian.example debian\n";

    #[test]
    fn adds_and_removes_exactly_its_block() {
        let h = tmp("add", BASE);
        let (block, warn) = h.add("/data/a", &entries(2)).unwrap();
        assert!(warn.is_empty(), "{warn:?}");
        let text = std::fs::read_to_string(&h.path).unwrap();
        let pid = std::process::id();
        assert_eq!(text, format!("{BASE}127.0.2.1\tnode1\t# tandem-up {pid} /data/a\n127.0.2.2\tnode2\t# tandem-up {pid} /data/a\n"));
        assert!(h.resolves(&entries(2)));
        block.remove().unwrap();
        assert_eq!(std::fs::read_to_string(&h.path).unwrap(), BASE);
        assert!(!h.resolves(&entries(2)));
        // Dropping the guard removes the block too.
        drop(h.add("/data/a", &entries(1)).unwrap());
        assert_eq!(std::fs::read_to_string(&h.path).unwrap(), BASE);
    }

    #[test]
    fn a_stale_block_is_replaced_and_a_dead_process_s_dropped_a_live_one_kept() {
        let pid = std::process::id();
        // Pid 0x7ffffff0 is past any pid_max: that process is gone.
        let gone = 0x7fff_fff0;
        let text = format!(
            "{BASE}127.0.2.1\tnode1\t# tandem-up {gone} /data/a\n127.0.2.1 node1 # tandem-up {gone} /data/old\n\
             127.0.2.1\tnode1\t# tandem-up 1 /data/other\n10.0.0.1 node1-bmc # tandem-up-ish\n"
        );
        let h = tmp("stale", &text);
        let (block, _) = h.add("/data/a", &entries(1)).unwrap();
        let live = "127.0.2.1\tnode1\t# tandem-up 1 /data/other\n10.0.0.1 node1-bmc # tandem-up-ish\n";
        assert_eq!(std::fs::read_to_string(&h.path).unwrap(), format!("{BASE}{live}127.0.2.1\tnode1\t# tandem-up {pid} /data/a\n"));
        block.remove().unwrap();
        assert_eq!(std::fs::read_to_string(&h.path).unwrap(), format!("{BASE}{live}"));
    }

    #[test]
    fn a_file_without_a_last_newline_and_an_earlier_name_are_handled() {
        let h = tmp("nl", "127.0.0.1 localhost\n10.1.1.1 node2");
        let (block, warn) = h.add("/d", &entries(2)).unwrap();
        assert_eq!(warn.len(), 1, "{warn:?}");
        assert!(warn[0].contains("already names node2 as 10.1.1.1, not 127.0.2.2"), "{warn:?}");
        assert!(!h.resolves(&entries(2)));
        block.remove().unwrap();
        assert_eq!(std::fs::read_to_string(&h.path).unwrap(), "127.0.0.1 localhost\n10.1.1.1 node2\n");
    }

    #[test]
    fn a_link_is_followed_and_an_id_must_fit_on_a_line() {
        let h = tmp("link", BASE);
        let link = h.path.with_file_name("hosts-link");
        std::os::unix::fs::symlink(&h.path, &link).unwrap();
        let l = Hosts { path: link.clone(), lock: h.lock.clone() };
        let (block, _) = l.add("/d", &entries(1)).unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert!(std::fs::read_to_string(&h.path).unwrap().contains("node1"));
        block.remove().unwrap();
        assert_eq!(std::fs::read_to_string(&h.path).unwrap(), BASE);
        assert!(h.add("/d\n127.0.0.9 evil", &entries(1)).is_err());
    }

    #[test]
    fn many_clusters_at_once_leave_the_file_as_it_was() {
        let h = tmp("many", BASE);
        let threads: Vec<_> = (0..16)
            .map(|t| {
                let h = h.clone();
                std::thread::spawn(move || {
                    for _ in 0..10 {
                        let (block, _) = h.add(&format!("/data/{t}"), &entries(3)).unwrap();
                        assert!(std::fs::read_to_string(&h.path).unwrap().contains(&format!("/data/{t}\n")));
                        block.remove().unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(std::fs::read_to_string(&h.path).unwrap(), BASE);
    }
}
