//! The kernel's small files (`/proc/PID/stat`, a cgroup's `memory.oom_control`) read and
//! written in as few system calls as it takes, for what an agent does at every task's launch
//! and end. `std::fs::read_to_string` asks a file's size first (`statx`), and the kernel's say
//! 0, so it reads them 32 bytes, then 32, 64, 128...: six system calls for a process's `stat`.
//! Here: open, reads into one page-sized buffer until the end, close. And a cgroup's paths run
//! six or more components deep (`/sys/fs/cgroup/memory/SLICE/UNIT/tandem-NODE-PID/job_J_E/...`),
//! each walked at every look-up: a [`Dir`] held open looks paths below it up from itself.

use nix::fcntl::{AT_FDCWD, OFlag};
use nix::sys::stat::Mode;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// A directory held open (`O_PATH`); paths below it are looked up from it.
pub(crate) struct Dir {
    path: PathBuf,
    fd: OwnedFd,
}

impl Dir {
    pub(crate) fn open(path: PathBuf) -> std::io::Result<Dir> {
        let fd = nix::fcntl::open(&path, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())?;
        Ok(Dir { path, fd })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Where to look `p` up from: this directory, with `p`'s rest below it, or (`p` not below
    /// it) `p` as it is.
    pub(crate) fn at<'a>(&'a self, p: &'a Path) -> (BorrowedFd<'a>, &'a Path) {
        match p.strip_prefix(&self.path) {
            Ok(rest) if !rest.as_os_str().is_empty() => (self.fd.as_fd(), rest),
            _ => (AT_FDCWD, p),
        }
    }

    /// Renames `from` to `to`, both names in this directory.
    pub(crate) fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        Ok(nix::fcntl::renameat(self.fd.as_fd(), from, self.fd.as_fd(), to)?)
    }
}

/// Reads the file `p` (looked up from `dir` where it is below it).
pub(crate) fn read(dir: Option<&Dir>, p: &Path) -> std::io::Result<Vec<u8>> {
    let (at, rest) = dir.map_or((AT_FDCWD, p), |d| d.at(p));
    let mut f = std::fs::File::from(nix::fcntl::openat(at, rest, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())?);
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(2 * len, 0);
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    Ok(buf)
}

/// [`read`], as text (what is not UTF-8 is replaced).
pub(crate) fn read_text(dir: Option<&Dir>, p: &Path) -> std::io::Result<String> {
    read(dir, p).map(|b| String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

/// Whether `p` exists (looked up from `dir` where it is below it).
pub(crate) fn exists(dir: Option<&Dir>, p: &Path) -> bool {
    let (at, rest) = dir.map_or((AT_FDCWD, p), |d| d.at(p));
    nix::sys::stat::fstatat(at, rest, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).is_ok()
}

/// Opens the existing file `p` to write (looked up from `dir` where it is below it).
pub(crate) fn open_write(dir: Option<&Dir>, p: &Path) -> std::io::Result<std::fs::File> {
    let (at, rest) = dir.map_or((AT_FDCWD, p), |d| d.at(p));
    Ok(std::fs::File::from(nix::fcntl::openat(at, rest, OFlag::O_WRONLY | OFlag::O_CLOEXEC, Mode::empty())?))
}

/// Writes `value` to the existing file `p` in one `write` (a cgroup's setting), looked up
/// from `dir` where it is below it.
pub(crate) fn write(dir: Option<&Dir>, p: &Path, value: &[u8]) -> std::io::Result<()> {
    open_write(dir, p)?.write_all(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_below_a_held_directory_and_elsewhere() {
        let d = std::env::temp_dir().join(format!("agent-kfile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("a")).unwrap();
        let big: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(d.join("a/big"), &big).unwrap();
        std::fs::write(d.join("small"), "x").unwrap();
        let dir = Dir::open(d.clone()).unwrap();
        assert_eq!(read(Some(&dir), &d.join("a/big")).unwrap(), big, "past one buffer");
        assert_eq!(read(None, &d.join("a/big")).unwrap(), big);
        write(Some(&dir), &d.join("small"), b"yz").unwrap();
        assert_eq!(read_text(Some(&dir), &d.join("small")).unwrap(), "yz");
        // Not below it: looked up as it is.
        assert!(read_text(Some(&dir), Path::new("/proc/self/stat")).unwrap().starts_with(&std::process::id().to_string()));
        assert_eq!(read(Some(&dir), &d.join("missing")).unwrap_err().kind(), std::io::ErrorKind::NotFound);
        assert_eq!(write(None, &d.join("missing"), b"1").unwrap_err().kind(), std::io::ErrorKind::NotFound, "never made");
        assert!(!exists(Some(&dir), &d.join("missing")) && exists(Some(&dir), &d.join("a/big")) && exists(None, &d.join("a")));
        dir.rename("small", "renamed").unwrap();
        assert!(d.join("renamed").exists() && !d.join("small").exists());
        // The directory itself is no path below it.
        assert_eq!(dir.at(&d).1, d.as_path());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
