//! The site's job-submit policy (`job_submit = "/etc/tandem/job_submit.lua"`, Slurm's
//! `JobSubmitPlugins=lua`): the controller's side. The script runs in a child process of its
//! own (`tandem __job-submit`, the `lua` module), started once and kept, which answers one call
//! at a time over a pipe: a submission's `job_desc` in, the fields it set, its return code and
//! its messages out. The child has a memory limit (Lua's allocator, and the address space as a
//! backstop) and each call a wall-clock limit: a script that loops, sleeps or runs away is
//! killed with its whole process group, the submission refused with a clear message, and the
//! next call starts a fresh child. The controller itself never runs a line of the script.
//!
//! A call that fails in any way (the script cannot be loaded, raises an error, runs out of
//! memory or time) refuses the submission: a site policy that cannot be applied is not
//! skipped. (Slurm 22.05 accepts a job whose script raised an error; Tandem does not.)

use serde::{Deserialize, Serialize};
use slurmcli::jobdesc::Fields;
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// The hidden command that runs the script (`tandem __job-submit SCRIPT MEMORY_MB CLUSTER`).
pub const WORKER_CMD: &str = "__job-submit";

/// The longest answer line read from the child.
const MAX_ANSWER: u64 = 64 << 20;

/// Which of the script's functions a call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallKind {
    /// `slurm_job_submit(job_desc, part_list, submit_uid)`.
    Submit,
    /// `slurm_job_modify(job_desc, job_rec, part_list, modify_uid)`.
    Modify,
}

/// One call of the script, as the child reads it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Call {
    /// The function.
    pub kind: CallKind,
    /// The request's fields.
    pub job_desc: Fields,
    /// `job_desc.environment` (sbatch's submissions alone; nil otherwise, as Slurm's).
    pub environment: Option<BTreeMap<String, String>>,
    /// The job as it stands (a modification's `job_rec`).
    pub job_rec: Option<Fields>,
    /// The partitions the user may use, by name.
    pub part_list: BTreeMap<String, Fields>,
    /// Who asks.
    pub uid: u32,
}

/// What a call did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Answer {
    /// The script's return code (`slurm.SUCCESS` is 0).
    pub rc: i64,
    /// The `job_desc` fields it set, with their final values.
    pub set: Fields,
    /// The environment variables it set (`None`: removed).
    pub env_set: BTreeMap<String, Option<String>>,
    /// Its messages to the user (`slurm.log_user`), one per line.
    pub user_msg: Vec<String>,
    /// Its log lines (`slurm.log_info` ...), with Slurm's level names.
    pub log: Vec<(String, String)>,
    /// The Lua error that stopped it, if any.
    pub error: Option<String>,
}

/// The child's first line: whether the script loaded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Loaded {
    /// Why it did not.
    pub error: Option<String>,
}

/// The hook's settings (from the configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookConfig {
    /// The script.
    pub path: String,
    /// Each call's limit.
    pub timeout: Duration,
    /// The Lua state's memory limit, MiB.
    pub memory_mb: u64,
    /// `slurm.CLUSTER_NAME`.
    pub cluster: String,
}

/// The hook's settings from the controller's, `None` when no script is configured.
pub fn config_of(s: &control::Settings) -> Option<HookConfig> {
    s.job_submit.as_ref().map(|p| HookConfig {
        path: p.clone(),
        timeout: Duration::from_millis(u64::try_from(s.job_submit_timeout_ms).unwrap_or(5000)),
        memory_mb: s.job_submit_memory,
        cluster: s.cluster_name.clone(),
    })
}

/// A running child.
struct Worker {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    out: BufReader<tokio::process::ChildStdout>,
}

impl Worker {
    /// Kills the child's whole process group (what `os.execute` started too); tokio reaps it.
    fn kill(self) {
        drop(self);
    }
}

impl Drop for Worker {
    /// However a worker goes (killed, or dropped with a request its caller abandoned), its
    /// whole process group goes with it.
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// Why a call could not be made or finished: the user's message (the log has the details).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookError {
    /// What the user is told.
    pub user: String,
    /// What the log (and an operator's `scontrol reconfigure`) is told.
    pub detail: String,
}

impl HookError {
    fn new(user: String, detail: String) -> HookError {
        tracing::warn!("job_submit: {}", slurmcli::visible(&detail));
        HookError { user, detail }
    }
}

impl std::fmt::Display for HookError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.user)
    }
}

/// The job-submit hook: its settings and its child, one call at a time.
#[derive(Default)]
pub struct Hook {
    state: tokio::sync::Mutex<(Option<HookConfig>, Option<Worker>)>,
    /// Calls made, refused by the script's return code, and failed (not loaded, an error,
    /// out of time or memory): `/metrics`.
    counts: [std::sync::atomic::AtomicU64; 3],
}

impl Hook {
    /// `/metrics`' lines for the hook.
    pub fn render(&self) -> String {
        let [calls, refused, failed] = self.counts.each_ref().map(|c| c.load(std::sync::atomic::Ordering::Relaxed));
        format!(
            "# HELP tandem_job_submit_calls_total Calls of the site's job_submit.lua.\n# TYPE tandem_job_submit_calls_total counter\ntandem_job_submit_calls_total {calls}\n\
             # HELP tandem_job_submit_refused_total Requests the script refused (a non-zero return code).\n# TYPE tandem_job_submit_refused_total counter\ntandem_job_submit_refused_total {refused}\n\
             # HELP tandem_job_submit_failures_total Calls that failed (not loaded, a Lua error, out of time or memory): requests refused.\n# TYPE tandem_job_submit_failures_total counter\ntandem_job_submit_failures_total {failed}\n"
        )
    }

    fn count(&self, which: usize) {
        self.counts[which].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether a script is configured.
    pub async fn enabled(&self) -> bool {
        self.state.lock().await.0.is_some()
    }

    /// Installs new settings (`scontrol reconfigure`): the running child, if any, is stopped,
    /// and the script is loaded again now, so that an error in it is reported at once.
    pub async fn configure(&self, cfg: Option<HookConfig>) -> Result<(), HookError> {
        let mut st = self.state.lock().await;
        if let Some(w) = st.1.take() {
            w.kill();
        }
        st.0 = cfg;
        let Some(cfg) = st.0.clone() else { return Ok(()) };
        let w = spawn(&cfg).await?;
        st.1 = Some(w);
        Ok(())
    }

    /// Runs `call`; `None` when no script is configured.
    pub async fn call(&self, call: &Call) -> Result<Option<Answer>, HookError> {
        let r = self.call_inner(call).await;
        match &r {
            Ok(None) => {}
            Ok(Some(a)) => {
                self.count(0);
                if a.rc != 0 {
                    self.count(1);
                }
            }
            Err(_) => {
                self.count(0);
                self.count(2);
            }
        }
        r
    }

    async fn call_inner(&self, call: &Call) -> Result<Option<Answer>, HookError> {
        let mut st = self.state.lock().await;
        let Some(cfg) = st.0.clone() else { return Ok(None) };
        let mut w = match st.1.take() {
            Some(w) => w,
            None => spawn(&cfg).await?,
        };
        let mut line = serde_json::to_vec(call)
            .map_err(|e| HookError::new(refused(&cfg, "could not be called"), format!("cannot encode the call: {e}")))?;
        line.push(b'\n');
        let exchange = async {
            w.stdin.write_all(&line).await?;
            w.stdin.flush().await?;
            let mut answer = String::new();
            (&mut w.out).take(MAX_ANSWER).read_line(&mut answer).await?;
            Ok::<_, std::io::Error>(answer)
        };
        let secs = cfg.timeout.as_secs_f64();
        let answer = match tokio::time::timeout(cfg.timeout, exchange).await {
            Err(_) => {
                w.kill();
                return Err(HookError::new(
                    refused(&cfg, &format!("did not finish within {secs} s")),
                    format!("{} ran past its {secs} s limit: killed", cfg.path),
                ));
            }
            Ok(Err(e)) => {
                w.kill();
                return Err(ended(&cfg, &e.to_string()));
            }
            Ok(Ok(a)) if a.is_empty() => {
                w.kill();
                return Err(ended(&cfg, "it closed its output (out of memory, or killed)"));
            }
            Ok(Ok(a)) => a,
        };
        let answer: Answer = match serde_json::from_str(&answer) {
            Ok(a) => a,
            Err(e) => {
                w.kill();
                return Err(ended(&cfg, &format!("unreadable answer: {e}")));
            }
        };
        st.1 = Some(w);
        for (level, msg) in &answer.log {
            tracing::warn!("job_submit/lua: {level}: {}", slurmcli::visible(msg));
        }
        if let Some(e) = &answer.error {
            return Err(HookError::new(
                refused(&cfg, "failed with an error (the controller's log has it)"),
                format!("{}: {}", cfg.path, e),
            ));
        }
        Ok(Some(answer))
    }
}

/// The user's words for a call that could not be made or finished.
fn refused(cfg: &HookConfig, what: &str) -> String {
    format!("the site's job submit policy ({}) {what}; the request is refused", cfg.path)
}

fn ended(cfg: &HookConfig, why: &str) -> HookError {
    HookError::new(refused(cfg, "stopped before it answered"), format!("{}: the script's process ended: {why}", cfg.path))
}

/// Starts a child for `cfg` and waits for its script to load.
async fn spawn(cfg: &HookConfig) -> Result<Worker, HookError> {
    let me = nix::unistd::geteuid().as_raw();
    let path = exec::trusted_file(&cfg.path, me, false).map_err(|e| HookError::new(refused(cfg, "cannot be used"), e))?;
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
    let mut cmd = std::process::Command::new(exe);
    cmd.arg(WORKER_CMD)
        .arg(&path)
        .arg(cfg.memory_mb.to_string())
        .arg(&cfg.cluster)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .current_dir("/")
        .process_group(0);
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| HookError::new(refused(cfg, "cannot be started"), format!("starting it: {e}")))?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(HookError::new(refused(cfg, "cannot be started"), "no pipes to it".into()));
    };
    let mut w = Worker { child, stdin, out: BufReader::new(stdout) };
    let mut first = String::new();
    let loaded = tokio::time::timeout(cfg.timeout, (&mut w.out).take(MAX_ANSWER).read_line(&mut first)).await;
    let loaded = match loaded {
        Ok(Ok(n)) if n > 0 => serde_json::from_str::<Loaded>(&first).map_err(|e| e.to_string()),
        Ok(Ok(_)) => Err("it exited while loading".into()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("loading took more than {} s", cfg.timeout.as_secs_f64())),
    };
    match loaded {
        Ok(Loaded { error: None }) => Ok(w),
        Ok(Loaded { error: Some(e) }) | Err(e) => {
            w.kill();
            Err(HookError::new(refused(cfg, "cannot be loaded (the controller's log says why)"), format!("cannot load {}: {e}", cfg.path)))
        }
    }
}
