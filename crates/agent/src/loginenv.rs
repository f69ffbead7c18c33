//! `sbatch --get-user-env`: the batch script starts from the user's login environment. The
//! agent runs such a script through `tandem __login-env SCRIPT ARGS...`, which starts as the
//! job's user (the launch has already dropped to it, entered the working directory and opened
//! the output files), asks the user's login shell for its environment (`SHELL -l -c 'env -0'`
//! from a clean one, bounded in time), lays the job's own environment over it (the submitted
//! variables win, as Slurm's), and becomes the script with one exec. A failure ends the job
//! with the reason on its error stream.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The hidden subcommand that runs a script from the login environment.
pub const LOGIN_ENV_CMD: &str = "__login-env";

/// How long the login shell may take (Slurm's default for its `su - USER -c env`).
const TIMEOUT: Duration = Duration::from_secs(8);

/// Runs `args` (the script and its arguments) from the login environment; returns only on
/// failure, with the exit code to leave with.
pub fn main(args: &[String]) -> i32 {
    let Some((script, rest)) = args.split_first() else {
        eprintln!("tandem {LOGIN_ENV_CMD}: usage: tandem {LOGIN_ENV_CMD} SCRIPT [ARGS...]");
        return 2;
    };
    let login = match login_env() {
        Ok(env) => env,
        Err(why) => {
            eprintln!("slurmstepd: error: --get-user-env: cannot load the login environment: {why}");
            return 1;
        }
    };
    let mut cmd = Command::new(script);
    cmd.args(rest)
        .env_clear()
        .envs(merge(login, std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))));
    let e = cmd.exec();
    eprintln!("slurmstepd: error: cannot run {script}: {e}");
    127
}

/// The login environment, then the job's variables over it.
fn merge(login: Vec<(String, String)>, job: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut out = login;
    for (k, v) in job {
        match out.iter_mut().find(|(o, _)| *o == k) {
            Some(slot) => slot.1 = v,
            None => out.push((k, v)),
        }
    }
    out
}

/// What the user's login shell exports, read from a clean environment.
fn login_env() -> Result<Vec<(String, String)>, String> {
    let uid = nix::unistd::getuid();
    let user = nix::unistd::User::from_uid(uid).ok().flatten().ok_or_else(|| format!("no user with uid {uid}"))?;
    // A shell that is no shell (nologin, false) logs nobody in: bash reads the same files.
    let shell = user.shell.to_string_lossy().into_owned();
    let shell = if shell.ends_with("nologin") || shell.ends_with("false") || shell.is_empty() { "/bin/bash".to_string() } else { shell };
    let mut child = Command::new(&shell)
        .args(["-l", "-c", "env -0"])
        .env_clear()
        .env("HOME", &user.dir)
        .env("USER", &user.name)
        .env("LOGNAME", &user.name)
        .env("SHELL", &shell)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .current_dir(&user.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start {shell}: {e}"))?;
    let mut out = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = out.read_to_end(&mut buf);
        buf
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(st) => break st,
            None if start.elapsed() > TIMEOUT => {
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL);
                let _ = child.wait();
                return Err(format!("{shell} -l took more than {} s", TIMEOUT.as_secs()));
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let buf = reader.join().map_err(|_| "reading its output failed".to_string())?;
    if !status.success() {
        return Err(format!("{shell} -l -c 'env -0' ended with {status}"));
    }
    Ok(parse(&buf))
}

/// `env -0`'s output: NUL-separated `NAME=value`; the shell's own bookkeeping left out.
fn parse(buf: &[u8]) -> Vec<(String, String)> {
    buf.split(|&b| b == 0)
        .filter_map(|e| std::str::from_utf8(e).ok())
        .filter_map(|e| e.split_once('='))
        .filter(|(k, _)| !k.is_empty() && !matches!(*k, "_" | "SHLVL" | "PWD" | "OLDPWD"))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jobs_variables_win_and_odd_bytes_are_dropped() {
        let login = parse(b"HOME=/root\0PATH=/bin\0SHLVL=1\0_=/usr/bin/env\0A=x=y\0\xff\xfe=bad\0=empty\0");
        assert_eq!(login, vec![("HOME".into(), "/root".into()), ("PATH".into(), "/bin".into()), ("A".into(), "x=y".into())]);
        let m = merge(login, vec![("PATH".to_string(), "/job".to_string()), ("J".to_string(), "1".to_string())].into_iter());
        assert_eq!(m.iter().find(|(k, _)| k == "PATH").unwrap().1, "/job");
        assert!(m.contains(&("HOME".into(), "/root".into())) && m.contains(&("J".into(), "1".into())));
    }

    #[test]
    fn this_users_login_environment_is_read() {
        let env = login_env().unwrap();
        let home = nix::unistd::User::from_uid(nix::unistd::getuid()).unwrap().unwrap().dir;
        assert!(env.iter().any(|(k, v)| k == "HOME" && std::path::Path::new(v) == home), "{env:?}");
        assert!(env.iter().any(|(k, _)| k == "PATH"), "{env:?}");
    }
}
