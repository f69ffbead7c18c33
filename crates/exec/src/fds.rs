//! Held listening sockets: a supervisor (`tandem up`) opens a daemon's listening sockets once
//! and keeps them for its whole life, and each run of the daemon inherits them
//! ([`pass_fds`], then [`inherited_listener`] in the daemon, `--listen-fd`). The port is never
//! free between a daemon's death and its restart, so no other local user can bind it then and
//! receive its clients' connections; the ones that arrive meanwhile wait in the socket's queue
//! for the next run instead of being refused.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::sys::socket::{self, AddressFamily, Backlog, SockFlag, SockType, SockaddrLike, SockaddrStorage, sockopt};

/// A listening TCP socket on `addr` (close-on-exec, `SO_REUSEADDR`; with `reuseport`, also
/// `SO_REUSEPORT`, so that more sockets of this user, and only of this user, may listen on the
/// same address beside it).
pub fn listen_tcp(addr: SocketAddr, reuseport: bool) -> std::io::Result<std::net::TcpListener> {
    let family = if addr.is_ipv4() { AddressFamily::Inet } else { AddressFamily::Inet6 };
    let fd = socket::socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    socket::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    if reuseport {
        socket::setsockopt(&fd, sockopt::ReusePort, &true)?;
    }
    socket::bind(fd.as_raw_fd(), &SockaddrStorage::from(addr))?;
    socket::listen(&fd, Backlog::MAXCONN)?;
    Ok(std::net::TcpListener::from(fd))
}

/// Makes `cmd`'s program inherit these descriptors of this process, at the same numbers: in
/// the child, between fork and exec, it clears their close-on-exec flag (this process's own
/// stay close-on-exec, so no other child inherits them).
pub fn pass_fds(cmd: &mut Command, fds: &[BorrowedFd<'_>]) {
    let fds: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
    // SAFETY: the hook only calls fcntl (async-signal-safe) on numbers it owns a copy of, and
    // allocates nothing (an error is made from errno without allocating).
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &fds {
                if nix::libc::fcntl(fd, nix::libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Makes `cmd`'s program inherit this process's descriptor `fd` at the number `at` (a
/// container task's PMI socket, which the OCI runtime passes on only from 3 up): in the child
/// (or, for `CommandExt::exec`, this process, just before its exec), between fork and exec,
/// `dup2(fd, at)`, which leaves `at` open across exec. Whatever `at` was is closed.
pub fn pass_fd_at(cmd: &mut Command, fd: i32, at: i32) {
    // SAFETY: the hook makes one dup2 or fcntl call (async-signal-safe) on plain numbers and
    // allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            let r = if fd == at { nix::libc::fcntl(fd, nix::libc::F_SETFD, 0) } else { nix::libc::dup2(fd, at) };
            if r == -1 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
        });
    }
}

/// Why an inherited descriptor cannot be used as a listening socket.
#[derive(Debug)]
pub enum HeldError {
    /// 0, 1 and 2 are the standard streams.
    Stdio(i32),
    /// Not an open descriptor.
    NotOpen(i32, nix::Error),
    /// Open, but not a listening TCP socket.
    NotListening(i32),
    /// `LISTEN_PID` names this process but `LISTEN_FDS` does not read (socket activation).
    Activation(String),
}

impl std::fmt::Display for HeldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeldError::Stdio(fd) => write!(f, "descriptor {fd} is a standard stream, not a listening socket"),
            HeldError::NotOpen(fd, e) => write!(f, "descriptor {fd} is not open ({e})"),
            HeldError::NotListening(fd) => write!(f, "descriptor {fd} is not a listening TCP socket"),
            HeldError::Activation(e) => write!(f, "the sockets systemd passed: {e}"),
        }
    }
}

impl std::error::Error for HeldError {}

/// Takes ownership of a listening TCP socket this process inherited at `fd` (from
/// [`pass_fds`], or from systemd's socket activation), after checking that it is one; it is
/// made close-on-exec again, so this process's own children do not inherit it. Each number
/// may be taken once: the caller refuses a number given twice.
pub fn inherited_listener(fd: i32) -> Result<std::net::TcpListener, HeldError> {
    if (0..=2).contains(&fd) {
        return Err(HeldError::Stdio(fd));
    }
    if fd < 0 {
        return Err(HeldError::NotOpen(fd, nix::Error::EBADF));
    }
    // SAFETY: only borrowed for the checks below; fcntl fails with EBADF on a number not open.
    #[allow(unsafe_code)]
    let b = unsafe { BorrowedFd::borrow_raw(fd) };
    nix::fcntl::fcntl(b, nix::fcntl::FcntlArg::F_GETFD).map_err(|e| HeldError::NotOpen(fd, e))?;
    let st = nix::sys::stat::fstat(b).map_err(|e| HeldError::NotOpen(fd, e))?;
    let is_socket = (st.st_mode & nix::libc::S_IFMT) == nix::libc::S_IFSOCK;
    let stream = is_socket && socket::getsockopt(&b, sockopt::SockType).is_ok_and(|t| t == SockType::Stream);
    let listening = stream && socket::getsockopt(&b, sockopt::AcceptConn).unwrap_or(false);
    let inet = listening
        && socket::getsockname::<SockaddrStorage>(fd)
            .is_ok_and(|a| matches!(a.family(), Some(AddressFamily::Inet) | Some(AddressFamily::Inet6)));
    if !inet {
        return Err(HeldError::NotListening(fd));
    }
    nix::fcntl::fcntl(b, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC)).map_err(|e| HeldError::NotOpen(fd, e))?;
    // SAFETY: the number is an open listening socket (checked above) that nothing else in this
    // process owns: it was inherited, and the caller takes each number once.
    #[allow(unsafe_code)]
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(std::net::TcpListener::from(owned))
}

/// Takes ownership of a connected Unix stream socket this process inherited at `fd` (from
/// [`pass_fd_at`]: the agent's launcher), after checking that it is one; it is made
/// close-on-exec again. Each number may be taken once.
pub fn inherited_unix_stream(fd: i32) -> std::io::Result<std::os::unix::net::UnixStream> {
    let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("descriptor {fd} {why}"));
    if fd <= 2 {
        return Err(bad("is a standard stream or not a descriptor"));
    }
    // SAFETY: only borrowed for the checks below; fcntl fails with EBADF on a number not open.
    #[allow(unsafe_code)]
    let b = unsafe { BorrowedFd::borrow_raw(fd) };
    nix::fcntl::fcntl(b, nix::fcntl::FcntlArg::F_GETFD)?;
    let st = nix::sys::stat::fstat(b)?;
    let is_socket = (st.st_mode & nix::libc::S_IFMT) == nix::libc::S_IFSOCK;
    let stream = is_socket && socket::getsockopt(&b, sockopt::SockType).is_ok_and(|t| t == SockType::Stream);
    let unix = stream && socket::getsockname::<SockaddrStorage>(fd).is_ok_and(|a| a.family() == Some(AddressFamily::Unix));
    if !unix {
        return Err(bad("is not a Unix stream socket"));
    }
    nix::fcntl::fcntl(b, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))?;
    // SAFETY: the number is an open Unix stream socket (checked above) that nothing else in
    // this process owns: it was inherited, and the caller takes each number once.
    #[allow(unsafe_code)]
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(std::os::unix::net::UnixStream::from(owned))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn an_inherited_unix_stream_is_taken_only_if_it_is_one() {
        assert!(inherited_unix_stream(1).is_err());
        assert!(inherited_unix_stream(987_654).is_err());
        let file = std::fs::File::open("/proc/self/status").unwrap();
        assert!(inherited_unix_stream(file.as_raw_fd()).is_err());
        let l = listen_tcp("127.0.0.1:0".parse().unwrap(), false).unwrap();
        assert!(inherited_unix_stream(l.as_raw_fd()).is_err());
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let fd = nix::unistd::dup(a.as_fd()).unwrap();
        let mut taken = inherited_unix_stream(std::os::fd::IntoRawFd::into_raw_fd(fd)).unwrap();
        use std::io::{Read, Write};
        taken.write_all(b"hi").unwrap();
        let mut got = [0u8; 2];
        (&b).read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hi");
    }

    #[test]
    fn refuses_what_is_not_a_listening_socket() {
        assert!(matches!(inherited_listener(0), Err(HeldError::Stdio(0))));
        assert!(matches!(inherited_listener(-4), Err(HeldError::NotOpen(..))));
        assert!(matches!(inherited_listener(987_654), Err(HeldError::NotOpen(..))));
        let file = std::fs::File::open("/proc/self/status").unwrap();
        assert!(matches!(inherited_listener(file.as_raw_fd()), Err(HeldError::NotListening(_))));
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(matches!(inherited_listener(udp.as_raw_fd()), Err(HeldError::NotListening(_))));
        // Bound but not listening.
        let fd = socket::socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None).unwrap();
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        socket::bind(fd.as_raw_fd(), &SockaddrStorage::from(any)).unwrap();
        assert!(matches!(inherited_listener(fd.as_raw_fd()), Err(HeldError::NotListening(_))));
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(matches!(inherited_listener(a.as_raw_fd()), Err(HeldError::NotListening(_))));
        drop(b);
    }

    #[test]
    fn a_passed_listener_serves_in_the_child_and_stays_with_the_parent() {
        let l = listen_tcp("127.0.0.1:0".parse().unwrap(), true).unwrap();
        let port = l.local_addr().unwrap().port();
        // A second socket of the same user may join it (SO_REUSEPORT) ...
        let again = listen_tcp(SocketAddr::from(([127, 0, 0, 1], port)), true).unwrap();
        drop(again);
        // ... but not one without SO_REUSEPORT.
        assert!(listen_tcp(SocketAddr::from(([127, 0, 0, 1], port)), false).is_err());
        // The child finds it at the same number, accepts a connection on it and answers.
        let fd = l.as_raw_fd();
        let script = format!("python3 -c 'import socket; s = socket.socket(fileno={fd}); c, _ = s.accept(); c.sendall(b\"hi\")'");
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &script]);
        pass_fds(&mut cmd, &[l.as_fd()]);
        let mut child = cmd.spawn().unwrap();
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut got = String::new();
        std::io::Read::read_to_string(&mut s, &mut got).unwrap();
        assert!(child.wait().unwrap().success());
        assert_eq!(got, "hi");
        // The parent's copy is still close-on-exec and still listening.
        let flags = nix::fcntl::fcntl(l.as_fd(), nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert_ne!(flags & nix::libc::FD_CLOEXEC, 0);
        std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    }
}
