//! The commit Tandem was built from, for `tandem --version` and `scontrol show config`
//! (`TANDEM_COMMIT`: git's short hash, or `unknown` outside a git checkout, as in a source
//! tarball). Runs again when the checkout's HEAD or branches move, not at every build.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git").args(args).output().ok()?;
    let s = String::from_utf8(o.stdout).ok()?.trim().to_string();
    (o.status.success() && !s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).filter(|c| c.bytes().all(|b| b.is_ascii_hexdigit()));
    // Watch what moves when a commit is made or checked out (a worktree's HEAD is its own;
    // its branches are the common directory's). Only paths that exist: a missing one would
    // run this script at every build.
    for (flag, under) in [("--git-dir", "HEAD"), ("--git-common-dir", "refs/heads"), ("--git-common-dir", "packed-refs")] {
        if let Some(dir) = git(&["rev-parse", flag]) {
            let p = std::path::Path::new(&dir).join(under);
            if p.exists() {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }
    println!("cargo:rustc-env=TANDEM_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
}
