//! Starting a task from a single-threaded process without copying it: `clone` with `CLONE_VM`
//! and `CLONE_VFORK` (what `posix_spawn` does), then the same child steps as [`crate::prepare`]
//! and the exec. The parent is suspended until the child has exec'd or exited, so the child
//! may use the parent's memory, which is prepared before the clone: no page tables are copied
//! and no copy-on-write fault follows, in the parent or in the child. It is what the agent's
//! launcher uses for every task; `std::process::Command` with a `pre_exec` hook forks.
//!
//! The program is found as `execvp` finds it (which `Command` uses): a name without `/` is
//! looked up in the task's own `PATH` (`/bin:/usr/bin` without one), trying each directory in
//! turn, and a file that is not an executable format (`ENOEXEC`) is run by `/bin/sh`.

use std::ffi::{CString, c_void};
use std::os::fd::{AsRawFd, OwnedFd};

use nix::libc;

use crate::{Setup, Stage};

/// A program, its arguments and its environment, made ready for the exec before the clone.
pub struct Program {
    /// The paths to try, in order.
    candidates: Vec<CString>,
    /// `argv`, its strings owned by `strings`, null-terminated.
    argv: Vec<*const libc::c_char>,
    /// `/bin/sh`, a slot for the path tried, then `argv[1..]`: for a file that is not an
    /// executable format.
    sh_argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    /// What the pointers point into (the `CString`s' buffers do not move).
    #[allow(dead_code)]
    strings: Vec<CString>,
}

// SAFETY: the raw pointers point into `strings`, which `Program` owns and never changes.
#[allow(unsafe_code)]
unsafe impl Send for Program {}

/// Where a spawn failed.
#[derive(Debug)]
pub struct SpawnFailed {
    /// The system call's error.
    pub error: std::io::Error,
    /// The child's step that failed (none: before the child, or its exec).
    pub stage: Option<Stage>,
}

fn invalid(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{what} holds a NUL byte"))
}

impl Program {
    /// `program` with `args` (after `argv[0]`, which is `program`) and exactly the environment
    /// `env`.
    pub fn new(program: &str, args: &[String], env: &[(String, String)]) -> std::io::Result<Program> {
        let c = |s: &str, what: &str| CString::new(s).map_err(|_| invalid(what));
        let mut strings = Vec::with_capacity(args.len() + env.len() + 4);
        let prog = c(program, "the program")?;
        let candidates = if program.contains('/') {
            vec![prog.clone()]
        } else if program.is_empty() {
            return Err(std::io::Error::from_raw_os_error(libc::ENOENT));
        } else {
            let path = env.iter().rev().find(|(k, _)| k == "PATH").map_or("/bin:/usr/bin", |(_, v)| v.as_str());
            path.split(':')
                .map(|dir| {
                    if dir.is_empty() { c(program, "the program") } else { c(&format!("{}/{program}", dir.trim_end_matches('/')), "PATH") }
                })
                .collect::<std::io::Result<Vec<_>>>()?
        };
        strings.push(prog);
        for a in args {
            strings.push(c(a, "an argument")?);
        }
        let nargs = strings.len();
        // A name given twice: the last value, as `Command::envs` keeps it.
        let mut last = std::collections::HashMap::with_capacity(env.len());
        for (i, (k, _)) in env.iter().enumerate() {
            if k.is_empty() || k.contains('=') {
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("bad environment variable name {k:?}")));
            }
            last.insert(k.as_str(), i);
        }
        for (i, (k, v)) in env.iter().enumerate() {
            if last.get(k.as_str()) == Some(&i) {
                strings.push(c(&format!("{k}={v}"), "the environment")?);
            }
        }
        strings.push(c("/bin/sh", "")?);
        let argv: Vec<*const libc::c_char> = strings[..nargs].iter().map(|s| s.as_ptr()).chain([std::ptr::null()]).collect();
        let envp: Vec<*const libc::c_char> =
            strings[nargs..strings.len() - 1].iter().map(|s| s.as_ptr()).chain([std::ptr::null()]).collect();
        let sh_argv: Vec<*const libc::c_char> = [strings[strings.len() - 1].as_ptr(), std::ptr::null()]
            .into_iter()
            .chain(strings[1..nargs].iter().map(|s| s.as_ptr()))
            .chain([std::ptr::null()])
            .collect();
        Ok(Program { candidates, argv, sh_argv, envp, strings })
    }
}

/// What the child reads and writes: all of it prepared by the parent.
struct Child<'a, F> {
    hook: &'a mut F,
    program: &'a mut Program,
    null: libc::c_int,
    /// Set by the child when it fails: the error number.
    errno: libc::c_int,
}

/// The stack the child runs on (the parent is suspended meanwhile, and the process has one
/// thread, so one is enough).
const STACK: usize = 256 * 1024;

/// Starts `program` with `setup`'s child steps, its standard streams on `/dev/null` unless
/// `setup` gives them, an empty signal mask and SIGPIPE's default action (as `Command` does).
/// Returns the child's pid.
///
/// The calling process must have one thread: the child shares its memory and runs the C
/// library's `setuid` and `setgroups`, which in a process with threads would signal them.
pub fn spawn_single_threaded(program: &mut Program, setup: Setup) -> Result<i32, SpawnFailed> {
    let before = |error: std::io::Error| SpawnFailed { error, stage: None };
    let (mut hook, mut report) = crate::hook_of(setup).map_err(before)?;
    let null: OwnedFd =
        nix::fcntl::open("/dev/null", nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())
            .map_err(|e| before(e.into()))?;
    let mut stack = STACK_MEM.with(|s| s.take()).unwrap_or_else(|| vec![0u8; STACK].into_boxed_slice());
    let mut child = Child { hook: &mut hook, program, null: null.as_raw_fd(), errno: 0 };
    // SAFETY: the stack is ours and unused while the child runs (the parent is suspended until
    // the child execs or exits: CLONE_VFORK); its top is 16-byte aligned as the ABI wants.
    // `child` outlives the clone for the same reason. The child runs `run`, which makes only
    // async-signal-safe system calls on memory prepared here and allocates nothing.
    let pid = clone_into(&mut child, &mut stack);
    STACK_MEM.with(|s| s.set(Some(stack)));
    if pid < 0 {
        return Err(before(std::io::Error::last_os_error()));
    }
    let errno = child.errno;
    if errno != 0 {
        // The child exited without exec'ing: reap it here (it is no task of the caller's).
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
        return Err(SpawnFailed { error: std::io::Error::from_raw_os_error(errno), stage: report.failed() });
    }
    Ok(pid)
}

/// `clone` with `run` over `child` on `stack` (see [`spawn_single_threaded`]).
fn clone_into<F: FnMut() -> std::io::Result<()>>(child: &mut Child<'_, F>, stack: &mut [u8]) -> libc::c_int {
    // SAFETY: as in `spawn_single_threaded`.
    #[allow(unsafe_code)]
    unsafe {
        let top = stack.as_mut_ptr().add(stack.len()) as usize & !15;
        libc::clone(run::<F>, top as *mut c_void, libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD, (child as *mut Child<'_, F>).cast())
    }
}

thread_local! {
    static STACK_MEM: std::cell::Cell<Option<Box<[u8]>>> = const { std::cell::Cell::new(None) };
}

/// The child: standard streams, signals, `setup`'s steps, then the exec; on a failure, the
/// error number for the parent and exit status 127.
extern "C" fn run<F: FnMut() -> std::io::Result<()>>(arg: *mut c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `Child`, alive and untouched by the parent until this
    // process execs or exits (CLONE_VFORK).
    #[allow(unsafe_code)]
    let c = unsafe { &mut *arg.cast::<Child<F>>() };
    let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL);
    // SAFETY: dup2, sigprocmask and signal on descriptors and values of this process.
    #[allow(unsafe_code)]
    unsafe {
        for fd in 0..3 {
            if libc::dup2(c.null, fd) < 0 {
                c.errno = errno();
                return 127;
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        if libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) < 0
            || libc::signal(libc::SIGPIPE, libc::SIG_DFL) == libc::SIG_ERR
        {
            c.errno = errno();
            return 127;
        }
    }
    if let Err(e) = (c.hook)() {
        c.errno = e.raw_os_error().unwrap_or(libc::EINVAL);
        return 127;
    }
    // As execvp: each candidate in turn; ENOENT and the like go on to the next, EACCES is
    // remembered, ENOEXEC runs the file with /bin/sh.
    let p = &mut *c.program;
    let mut failed = libc::ENOENT;
    let mut denied = false;
    for cand in &p.candidates {
        // SAFETY: the strings and arrays are null-terminated and owned by `p`.
        #[allow(unsafe_code)]
        unsafe {
            libc::execve(cand.as_ptr(), p.argv.as_ptr(), p.envp.as_ptr());
        }
        match errno() {
            libc::ENOEXEC => {
                p.sh_argv[1] = cand.as_ptr();
                // SAFETY: as above; `sh_argv[0]` is "/bin/sh".
                #[allow(unsafe_code)]
                unsafe {
                    libc::execve(p.sh_argv[0], p.sh_argv.as_ptr(), p.envp.as_ptr());
                }
                failed = errno();
                break;
            }
            libc::EACCES => denied = true,
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
            e => {
                failed = e;
                break;
            }
        }
    }
    c.errno = if denied && failed == libc::ENOENT { libc::EACCES } else { failed };
    127
}
