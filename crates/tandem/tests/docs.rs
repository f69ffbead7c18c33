//! The documentation, run: every shell block (` ```sh `) of the README and of the book
//! (`docs/`) runs as written, in order, page by page, each page on a fresh `tandem up` of its
//! own (a reader's shell after "Getting started": the cluster's `env` sourced and the Slurm
//! commands' links on PATH; a private HOME; the checkout's `target/release/tandem` is this
//! build). A block preceded by `<!-- not run: REASON -->` is left out; the reason is required.
//! Each runs under `bash -e -o pipefail`: the first command that fails fails the test, with
//! the block's output.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// A page's shell blocks: the line each starts on, the reason it is not run (if marked), its
/// text.
fn shell_blocks(md: &str) -> Vec<(usize, Option<String>, String)> {
    let lines: Vec<&str> = md.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if l.trim_start().starts_with("```") {
            let lang = l.trim_start().trim_start_matches('`').trim();
            let start = i;
            i += 1;
            let mut body = String::new();
            while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                body.push_str(lines[i]);
                body.push('\n');
                i += 1;
            }
            if lang == "sh" || lang == "bash" || lang == "shell" {
                let marker = start.checked_sub(1).map(|p| lines[p].trim()).and_then(|m| m.strip_prefix("<!-- not run:"));
                let reason = marker.map(|m| m.trim_end_matches("-->").trim().to_string());
                out.push((start + 1, reason, body));
            }
        }
        i += 1;
    }
    out
}

fn pages() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut e: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        e.sort();
        for p in e {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut files = vec![repo().join("README.md")];
    walk(&repo().join("docs"), &mut files);
    files.into_iter().map(|p| (p.strip_prefix(repo()).unwrap().to_path_buf(), std::fs::read_to_string(&p).unwrap())).collect()
}

/// A `tandem up`, ended as a reader ends it (Ctrl-C: it stops its daemons and their tasks),
/// however the test ends; killed only if it does not stop.
struct Up(std::process::Child);

impl Drop for Up {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-INT", &self.0.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.0.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_marker_needs_a_reason_and_only_shell_blocks_are_taken() {
    let md = "a\n<!-- not run: needs a GPU -->\n```sh\nnvidia-smi\n```\n```toml\nx = 1\n```\n```sh\nsinfo\n```\n<!-- not run: -->\n```sh\ntrue\n```\n";
    let b = shell_blocks(md);
    assert_eq!(b.len(), 3);
    assert_eq!((b[0].0, b[0].1.as_deref(), b[0].2.as_str()), (3, Some("needs a GPU"), "nvidia-smi\n"));
    assert_eq!((b[1].1.as_deref(), b[1].2.as_str()), (None, "sinfo\n"));
    assert_eq!(b[2].1.as_deref(), Some(""));
}

#[test]
fn every_shell_block_of_the_readme_and_the_book_runs_as_written() {
    let pages = pages();
    let mut ran = 0;
    let mut left_out = Vec::new();
    for (n, (page, text)) in pages.iter().enumerate() {
        let blocks = shell_blocks(text);
        for (line, reason, _) in &blocks {
            if let Some(r) = reason {
                assert!(!r.is_empty(), "{}:{line}: a block marked not run says why", page.display());
                left_out.push(format!("{}:{line}: {r}", page.display()));
            }
        }
        let run: Vec<&(usize, Option<String>, String)> = blocks.iter().filter(|(_, r, _)| r.is_none()).collect();
        if run.is_empty() {
            continue;
        }
        // Short: the cluster's socket path must fit the kernel's 107 bytes.
        let dir = free_dir(&format!("doc{n}"));
        let (home, work) = (dir.join("home"), dir.join("work"));
        std::fs::create_dir_all(home.join(".local/bin")).unwrap();
        // The checkout's release binaries, as the pages name them: this build.
        std::fs::create_dir_all(work.join("target/release")).unwrap();
        for b in ["tandem", "tandem-slurm"] {
            std::os::unix::fs::symlink(Path::new(bin()).with_file_name(b), work.join("target/release").join(b)).unwrap();
        }
        let path = format!("{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", home.join(".local/bin").display());
        let log = std::fs::File::create(dir.join("up.log")).unwrap();
        let mut up = Up(Command::new(bin())
            .args(["up", "--port", "0", "--no-hosts"])
            .env_clear()
            .env("HOME", &home)
            .env("PATH", &path)
            .current_dir(&work)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap());
        let env = home.join(".local/state/tandem/env");
        let deadline = Instant::now() + Duration::from_secs(60);
        let shell = |script: &str| {
            Command::new("bash")
                .args(["-e", "-o", "pipefail", "-c", script])
                .env_clear()
                .env("HOME", &home)
                .env("PATH", &path)
                .env("TERM", "dumb")
                .current_dir(&work)
                .stdin(Stdio::null())
                .output()
                .unwrap()
        };
        let idle = |s: &str| s.matches("idle").count() >= 2;
        loop {
            let o = if env.exists() { shell(&format!("source {}; {} nodes -h -N -o %t", env.display(), bin())) } else { shell("false") };
            if o.status.success() && idle(&String::from_utf8_lossy(&o.stdout)) {
                break;
            }
            let exited = up.0.try_wait().ok().flatten().is_some();
            assert!(
                !exited && Instant::now() < deadline,
                "tandem up did not start:\n{}",
                std::fs::read_to_string(dir.join("up.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        // A reader's shell after "Getting started"'s first lines.
        let prelude = "source \"$HOME/.local/state/tandem/env\"\n[ -e ~/.local/bin/sbatch ] || target/release/tandem shims ~/.local/bin >/dev/null\nexport PATH=~/.local/bin:$PATH\n";
        for (line, _, body) in run {
            let o = shell(&format!("{prelude}{body}"));
            assert!(
                o.status.success(),
                "{}:{line}: the block failed ({}):\n{body}\n--- its output\n{}{}\n--- tandem up\n{}",
                page.display(),
                o.status,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr),
                std::fs::read_to_string(dir.join("up.log")).unwrap_or_default()
            );
            ran += 1;
        }
        drop(up);
        let _ = std::fs::remove_dir_all(&dir);
    }
    eprintln!("ran {ran} shell blocks; left out {}:\n{}", left_out.len(), left_out.join("\n"));
    assert!(ran >= 2, "the newcomer's path and the services' walk-through at the least: ran {ran}");
}
