//! `exec::spawn_single_threaded` in a process with one thread (no test harness: its threads
//! would make the clone unsafe): what runs, where its streams go, how it fails.

use exec::{Program, Setup, Stage, spawn_single_threaded};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use std::ffi::CString;
use std::path::Path;

fn setup<'a>(out: Option<&Path>, workdir: Option<&Path>) -> Setup<'a> {
    let c = |p: &Path| CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    Setup { workdir: workdir.map(c), stdout: out.map(c), ..Setup::default() }
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

fn exit_of(pid: i32) -> i32 {
    match waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap() {
        WaitStatus::Exited(_, c) => c,
        other => panic!("{other:?}"),
    }
}

fn main() {
    let dir = std::env::temp_dir().join(format!("exec-spawn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("out");
    // Signals the parent blocks are not blocked in the task.
    let mut set = nix::sys::signal::SigSet::empty();
    set.add(nix::sys::signal::Signal::SIGTERM);
    set.thread_block().unwrap();

    // The task's own environment (a name given twice: its last value), found in its own PATH,
    // its output appended to the file, its signal mask empty.
    let mut p = Program::new(
        "sh",
        &args(&["-c", "echo \"$A $B\"; grep SigBlk /proc/self/status; exit 7"]),
        &env(&[("PATH", "/nonexistent:/usr/bin:/bin"), ("A", "one"), ("B", "x"), ("B", "two")]),
    )
    .unwrap();
    let pid = spawn_single_threaded(&mut p, setup(Some(&out), None)).unwrap();
    assert_eq!(exit_of(pid), 7);
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.starts_with("one two\n"), "{text}");
    assert!(text.contains("SigBlk:\t0000000000000000"), "{text}");

    // A file that is not an executable format runs with /bin/sh, its arguments after it.
    let script = dir.join("plain");
    std::fs::write(&script, "echo plain \"$1\" >> out\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut p = Program::new(script.to_str().unwrap(), &args(&["arg1"]), &env(&[])).unwrap();
    let pid = spawn_single_threaded(&mut p, setup(None, Some(&dir))).unwrap();
    assert_eq!(exit_of(pid), 0);
    assert!(std::fs::read_to_string(&out).unwrap().ends_with("plain arg1\n"));

    // Failures: with the step that failed, or the exec's error; the child is reaped.
    let mut p = Program::new("no-such-program-here", &[], &env(&[("PATH", "/usr/bin:/bin")])).unwrap();
    let e = spawn_single_threaded(&mut p, setup(None, None)).unwrap_err();
    assert_eq!((e.error.raw_os_error(), e.stage), (Some(nix::libc::ENOENT), None), "{e:?}");
    let not_exec = dir.join("not-executable");
    std::fs::write(&not_exec, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&not_exec, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let mut p = Program::new(not_exec.to_str().unwrap(), &[], &env(&[])).unwrap();
    let e = spawn_single_threaded(&mut p, setup(None, None)).unwrap_err();
    // (root too: no execute bit at all)
    assert_eq!(e.error.raw_os_error(), Some(nix::libc::EACCES), "{e:?}");
    let mut p = Program::new("/bin/true", &[], &env(&[])).unwrap();
    let e = spawn_single_threaded(&mut p, setup(None, Some(&dir.join("missing")))).unwrap_err();
    assert_eq!(e.stage, Some(Stage::Workdir), "{e:?}");
    assert!(matches!(waitpid(None, Some(WaitPidFlag::WNOHANG)), Err(nix::errno::Errno::ECHILD)), "a failed child was left unreaped");

    // What cannot be passed to exec is refused before any child.
    assert!(Program::new("/bin/true", &args(&["a\0b"]), &env(&[])).is_err());
    assert!(Program::new("/bin/true", &[], &env(&[("A=B", "c")])).is_err());
    assert!(Program::new("", &[], &env(&[])).is_err());

    // Many in a row (one stack, reused), and this process still has one thread.
    for _ in 0..200 {
        let mut p = Program::new("/bin/true", &[], &env(&[])).unwrap();
        let pid = spawn_single_threaded(&mut p, setup(None, None)).unwrap();
        assert_eq!(exit_of(pid), 0);
    }
    let threads = std::fs::read_dir("/proc/self/task").unwrap().count();
    assert_eq!(threads, 1);
    std::fs::remove_dir_all(&dir).ok();
    println!("exec spawn: all passed");
}
