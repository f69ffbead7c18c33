//! A task's output for `kubectl logs` ([`control::Order::Output`]): the agent starts
//! `tandem __read-output` as the job's user (so it reads nothing its user could not: the file
//! names come from the user's own `--output` pattern), and sends what that prints to the
//! controller on a connection of its own (`POST /v1/agent/output/ID`, with the request's key),
//! as it comes. Following, the reader goes on until the agent closes its standard input (the
//! task ended here), then sends what was written last and ends.

use control::OutputRead;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use tokio::io::AsyncReadExt;

/// The reader's hidden subcommand.
pub const READ_OUTPUT_CMD: &str = "__read-output";

/// How often a follower looks for more output, milliseconds.
const FOLLOW_TICK_MS: u16 = 200;

/// Where an agent's uploads go: the controller, with the agent's credential.
#[derive(Clone)]
pub(crate) struct Uplink {
    pub(crate) target: client::Target,
    pub(crate) authorization: String,
}

/// Serves one [`control::Order::Output`]: reads as the job's user and sends it. `finish`, when
/// following, fires once the task has ended here.
pub(crate) async fn serve(up: Uplink, read: OutputRead, finish: Option<tokio::sync::oneshot::Receiver<()>>, node: String) {
    let path = format!("/v1/agent/output/{}", read.id);
    let failed = |why: String| {
        let up = up.clone();
        let path = path.clone();
        let key = read.key.clone();
        async move {
            let hdr =
                [("authorization", up.authorization.as_str()), ("x-tandem-output-key", key.as_str()), ("x-tandem-output-failed", "1")];
            let _ = client::upload(&up.target, &path, &hdr, std::io::Cursor::new(why.into_bytes())).await;
        }
    };
    let mut child = match spawn(&read, finish.is_some()) {
        Ok(c) => c,
        Err(e) => return failed(format!("cannot start the reader on {node}: {e}")).await,
    };
    let (Some(mut out), stdin) = (child.stdout.take(), child.stdin.take()) else {
        return failed(format!("the reader on {node} has no pipe")).await;
    };
    // The first byte says whether every file could be read.
    let mut first = [0u8; 1];
    match out.read_exact(&mut first).await {
        Ok(_) if first[0] == b'+' => {}
        Ok(_) => {
            let mut why = String::new();
            let _ = out.read_to_string(&mut why).await;
            let _ = child.wait().await;
            return failed(format!("{} (on {node})", why.trim())).await;
        }
        Err(e) => {
            let _ = child.kill().await;
            return failed(format!("the reader on {node} ended early: {e}")).await;
        }
    }
    let hdr = [("authorization", up.authorization.as_str()), ("x-tandem-output-key", read.key.as_str())];
    let upload = client::upload(&up.target, &path, &hdr, out);
    tokio::pin!(upload);
    let mut stdin = stdin;
    if let Some(finish) = finish {
        tokio::select! {
            _ = &mut upload => {}
            _ = finish => {
                // The task ended: the reader sends what is left and ends, and so does the body.
                stdin.take();
                let _ = (&mut upload).await;
            }
        }
    } else {
        let _ = (&mut upload).await;
    }
    drop(stdin);
    // The controller no longer wants it (kubectl went away), or it has ended.
    let _ = child.kill().await;
}

/// Starts the reader, as the job's user where the agent is root.
fn spawn(read: &OutputRead, follow: bool) -> std::io::Result<tokio::process::Child> {
    let exe = std::env::current_exe()?;
    let exe = std::path::PathBuf::from(exe.to_string_lossy().trim_end_matches(" (deleted)"));
    let mut cmd = std::process::Command::new(exe);
    cmd.arg(READ_OUTPUT_CMD)
        .arg(if follow { "1" } else { "0" })
        .arg(read.tail_lines.map_or("-".to_string(), |n| n.to_string()))
        .arg(read.limit_bytes.map_or("-".to_string(), |n| n.to_string()))
        .arg("--")
        .args(&read.files)
        .env_clear()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let user = (nix::unistd::geteuid().is_root() && read.uid != 0).then(|| exec::User::lookup(read.uid, read.gid));
    let setup = exec::Setup { user, ..exec::Setup::default() };
    exec::prepare(&mut cmd, setup)?;
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    cmd.spawn()
}

/// `tandem __read-output FOLLOW TAIL LIMIT -- FILE...`: prints `+` then the files' contents
/// (the last TAIL lines of each, at most LIMIT bytes in all; `-` for no bound), and with FOLLOW
/// `1` what is appended to them afterwards, until its standard input closes; or `!` and why a
/// file cannot be read. A file not there yet is empty (followed, it is read once it appears); one
/// that is not a regular file (`/dev/null`) is empty.
pub fn main(args: &[String]) -> i32 {
    let usage = || {
        eprintln!("usage: tandem {READ_OUTPUT_CMD} FOLLOW(0|1) TAIL_LINES|- LIMIT_BYTES|- -- FILE...");
        2
    };
    let (Some(follow), Some(tail), Some(limit), Some("--")) = (args.first(), args.get(1), args.get(2), args.get(3).map(String::as_str))
    else {
        return usage();
    };
    let bound = |s: &str| if s == "-" { Ok(None) } else { s.parse::<u64>().map(Some) };
    let (Ok(tail), Ok(limit)) = (bound(tail), bound(limit)) else { return usage() };
    let follow = follow == "1";
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut files: Vec<Source> = args[4..].iter().map(|p| Source { path: p.into(), file: None, at: 0, regular: true }).collect();
    for f in &mut files {
        if let Err(e) = f.open(tail) {
            let _ = write!(out, "!cannot read {}: {e}", f.path.display());
            return 1;
        }
    }
    if out.write_all(b"+").and_then(|()| out.flush()).is_err() {
        return 0;
    }
    let mut left = limit.unwrap_or(u64::MAX);
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let mut moved = false;
        for f in &mut files {
            match f.pump(&mut out, &mut buf, &mut left) {
                Ok(n) => moved |= n > 0,
                Err(_) => return 0, // the agent stopped reading
            }
            if left == 0 {
                return 0;
            }
        }
        if out.flush().is_err() || !follow {
            return 0;
        }
        if !moved {
            // The agent closes our standard input once the task has ended: one last pass.
            use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
            use std::os::fd::AsFd;
            let stdin = std::io::stdin();
            let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
            let ended = matches!(poll(&mut fds, PollTimeout::from(FOLLOW_TICK_MS)), Ok(n) if n > 0);
            if ended {
                for f in &mut files {
                    if f.pump(&mut out, &mut buf, &mut left).is_err() || left == 0 {
                        return 0;
                    }
                }
                let _ = out.flush();
                return 0;
            }
        }
        for f in &mut files {
            if f.file.is_none() && f.regular {
                let _ = f.open(None);
            }
        }
    }
}

/// One file being read.
struct Source {
    path: std::path::PathBuf,
    file: Option<std::fs::File>,
    /// Where the next read starts.
    at: u64,
    /// Not a regular file: always empty.
    regular: bool,
}

impl Source {
    /// Opens it if it is there (without blocking on a FIFO), at the start of its last `tail`
    /// lines.
    fn open(&mut self, tail: Option<u64>) -> std::io::Result<()> {
        let f = match std::fs::OpenOptions::new().read(true).custom_flags(nix::libc::O_NONBLOCK).open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        if !f.metadata()?.is_file() {
            self.regular = false;
            return Ok(());
        }
        self.at = match tail {
            Some(n) => tail_start(&f, n)?,
            None => 0,
        };
        self.file = Some(f);
        Ok(())
    }

    /// Copies what is there from `at` on; a file cut shorter is read again from its start.
    fn pump(&mut self, out: &mut impl Write, buf: &mut [u8], left: &mut u64) -> std::io::Result<u64> {
        let Some(f) = self.file.as_mut() else { return Ok(0) };
        let len = f.metadata()?.len();
        if len < self.at {
            self.at = 0;
        }
        f.seek(SeekFrom::Start(self.at))?;
        let mut moved = 0;
        while *left > 0 {
            let want = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
            let n = match f.read(&mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            out.write_all(&buf[..n])?;
            self.at += n as u64;
            moved += n as u64;
            *left -= n as u64;
        }
        Ok(moved)
    }
}

/// The offset where a file's last `n` lines start (a last line without its newline counts).
fn tail_start(f: &std::fs::File, n: u64) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let len = f.metadata()?.len();
    if n == 0 {
        return Ok(len);
    }
    let mut end = len;
    let mut seen = 0u64;
    let mut block = vec![0u8; 64 << 10];
    // A newline that ends the file ends the last line; it does not start one.
    let mut skip_last = true;
    while end > 0 {
        let start = end.saturating_sub(block.len() as u64);
        let chunk = &mut block[..(end - start) as usize];
        f.read_exact_at(chunk, start)?;
        for (i, b) in chunk.iter().enumerate().rev() {
            let at = start + i as u64;
            if *b != b'\n' {
                continue;
            }
            if skip_last && at + 1 == len {
                skip_last = false;
                continue;
            }
            seen += 1;
            if seen == n {
                return Ok(at + 1);
            }
        }
        skip_last = false;
        end = start;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> (std::path::PathBuf, std::fs::File) {
        let p = std::env::temp_dir().join(format!("tandem-output-{}-{}", std::process::id(), rand_name()));
        std::fs::write(&p, text).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        (p, f)
    }

    fn rand_name() -> u64 {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        N.fetch_add(1, Ordering::Relaxed)
    }

    #[test]
    fn the_last_lines_start_where_kubectl_tail_says() {
        for (text, n, want) in [
            ("a\nb\nc\n", 1, "c\n"),
            ("a\nb\nc\n", 2, "b\nc\n"),
            ("a\nb\nc\n", 3, "a\nb\nc\n"),
            ("a\nb\nc\n", 9, "a\nb\nc\n"),
            ("a\nb\nc", 1, "c"),
            ("a\nb\nc", 2, "b\nc"),
            ("a\n\n\n", 2, "\n\n"),
            ("", 3, ""),
            ("a\nb\n", 0, ""),
        ] {
            let (p, f) = file(text);
            let at = tail_start(&f, n).unwrap() as usize;
            assert_eq!(&text[at..], want, "{text:?} tail {n}");
            std::fs::remove_file(p).ok();
        }
        // Across the block boundary.
        let long: String = (0..30_000).map(|i| format!("line {i}\n")).collect();
        let (p, f) = file(&long);
        let at = tail_start(&f, 20_000).unwrap() as usize;
        assert!(long[at..].starts_with("line 10000\n") && long[at..].lines().count() == 20_000);
        std::fs::remove_file(p).ok();
    }

    #[test]
    fn a_source_reads_on_from_where_it_was_and_again_after_a_truncation() {
        let (p, _) = file("one\n");
        let mut s = Source { path: p.clone(), file: None, at: 0, regular: true };
        s.open(None).unwrap();
        let (mut out, mut buf, mut left) = (Vec::new(), vec![0u8; 3], u64::MAX);
        assert_eq!(s.pump(&mut out, &mut buf, &mut left).unwrap(), 4);
        std::fs::OpenOptions::new().append(true).open(&p).unwrap().write_all(b"two\n").unwrap();
        assert_eq!(s.pump(&mut out, &mut buf, &mut left).unwrap(), 4);
        assert_eq!(out, b"one\ntwo\n");
        std::fs::write(&p, "x\n").unwrap();
        s.pump(&mut out, &mut buf, &mut left).unwrap();
        assert_eq!(out, b"one\ntwo\nx\n");
        // The byte limit stops it mid-file.
        let mut left = 1;
        std::fs::write(&p, "abc").unwrap();
        s.at = 0;
        let mut cut = Vec::new();
        s.pump(&mut cut, &mut buf, &mut left).unwrap();
        assert_eq!((cut, left), (b"a".to_vec(), 0));
        std::fs::remove_file(p).ok();
    }

    #[test]
    fn a_missing_file_is_empty_and_a_fifo_does_not_block() {
        let mut s = Source { path: "/nonexistent/tandem/out".into(), file: None, at: 0, regular: true };
        s.open(Some(3)).unwrap();
        assert!(s.file.is_none());
        let fifo = std::env::temp_dir().join(format!("tandem-output-fifo-{}", std::process::id()));
        let _ = std::fs::remove_file(&fifo);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let mut s = Source { path: fifo.clone(), file: None, at: 0, regular: true };
        s.open(None).unwrap();
        assert!(s.file.is_none() && !s.regular);
        std::fs::remove_file(fifo).ok();
    }
}
