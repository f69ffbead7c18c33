//! The daemons' one way to log (`tandem server`, `agent`, `proxy`): `tracing` events with
//! levels and fields (`job_id`, `node`, `service`, ...), written as human-readable lines
//! (default) or one JSON object per line (`--log-format json`), to standard error (where
//! journald or `tandem up`'s `DATA/NAME.log` takes them) or to a file (`--log-file`) that
//! [`reopen`] opens afresh after logrotate moved it (the daemons call it at SIGHUP).
//!
//! What is written is chosen by a filter in `tracing-subscriber`'s `EnvFilter` syntax
//! (`info`, `info,server::kube=debug`), from `--log-level`, else `TANDEM_LOG`, else `info`;
//! Slurm's level names are read too (`quiet`, `fatal`, `verbose`, `debug2` ... `debug5`, or
//! `0` to `9`, as `SlurmctldDebug` and `scontrol setdebug` take them). The libraries Tandem
//! is built on (hyper, h2, rustls, ...) are kept at `warn` unless the filter names them, so
//! `debug` is Tandem's own debugging. The filter can be changed while the daemon runs
//! ([`set_filter`]: `scontrol setdebug` on the controller).
//!
//! Control characters in what is logged (a job's name, a reason a user wrote) never reach a
//! terminal raw: the text format escapes them, JSON encodes them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, reload};

/// The environment variable read for the filter when no `--log-level` is given.
pub const ENV: &str = "TANDEM_LOG";

/// The filter when neither `--log-level` nor `TANDEM_LOG` gives one.
pub const DEFAULT_FILTER: &str = "info";

/// The libraries whose debugging is theirs, not Tandem's: kept at `warn` unless a filter names
/// them.
const QUIET_DEPENDENCIES: &[&str] =
    &["h2", "hyper", "hyper_util", "rustls", "tokio_rustls", "tower", "axum", "mio", "reqwest", "oci_client"];

/// How lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// `2026-12-06T19:50:00.123456Z  INFO server: job submitted job_id=1 user="alice"`.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message` and the fields.
    Json,
}

impl std::str::FromStr for Format {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "text" => Ok(Format::Text),
            "json" => Ok(Format::Json),
            other => Err(Error::Format(other.to_string())),
        }
    }
}

/// Where and how a daemon logs.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The filter (`--log-level`); `None`: `TANDEM_LOG`, else [`DEFAULT_FILTER`].
    pub filter: Option<String>,
    /// The format (`--log-format`).
    pub format: Format,
    /// A file to append to instead of standard error (`--log-file`), made 0600 if new.
    pub file: Option<PathBuf>,
}

/// Why logging could not be set up or changed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A filter `EnvFilter` does not read, nor a Slurm level.
    #[error(
        "invalid log filter {0:?}: {1} (give a level: error, warn, info, debug, trace, or Slurm's quiet, fatal, verbose, debug2..debug5, 0..9; or directives such as info,server::jobs=debug)"
    )]
    Filter(String, String),
    /// A format other than `text` and `json`.
    #[error("invalid log format {0:?} (text or json)")]
    Format(String),
    /// The log file could not be opened.
    #[error("opening the log file {path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// [`set_filter`] or [`reopen`] before [`init`].
    #[error("logging is not set up in this process")]
    NotSet,
    /// [`init`] twice.
    #[error("logging is already set up in this process")]
    Twice,
}

/// What [`init`] set up, for [`set_filter`], [`filter`] and [`reopen`].
struct State {
    handle: reload::Handle<EnvFilter, Registry>,
    /// The filter as given (after Slurm names are read), for `scontrol show config`.
    current: Mutex<String>,
    /// The file, where one is written.
    file: Option<&'static Mutex<LogFile>>,
}

static STATE: OnceLock<State> = OnceLock::new();

/// The log file and its path, to open again.
struct LogFile {
    path: PathBuf,
    file: std::fs::File,
}

fn open_log(path: &Path) -> Result<std::fs::File, Error> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| Error::File { path: path.to_path_buf(), source })
}

/// A Slurm debug level's filter (`SlurmctldDebug`, `scontrol setdebug`), for the names and
/// numbers `tracing` has none of.
fn slurm_level(s: &str) -> Option<&'static str> {
    Some(match s {
        "quiet" | "0" => "off",
        "fatal" | "1" => "error",
        "2" => "error",
        "3" => "info",
        "verbose" | "4" => "info",
        "5" => "debug",
        "debug2" | "debug3" | "debug4" | "debug5" | "6" | "7" | "8" | "9" => "trace",
        _ => return None,
    })
}

/// Reads a filter: a Slurm level name, or `EnvFilter` directives; returns the directives as
/// given (Slurm names read) and the filter with the libraries kept quiet.
pub fn parse_filter(s: &str) -> Result<(String, EnvFilter), Error> {
    let given = s.trim();
    if given.is_empty() {
        return Err(Error::Filter(s.to_string(), "empty".into()));
    }
    if given.len() > 1024 || given.chars().any(|c| c.is_control()) {
        return Err(Error::Filter(s.chars().take(64).collect(), "too long or with control characters".into()));
    }
    let directives = slurm_level(given).map_or_else(|| given.to_string(), str::to_string);
    let mut full = directives.clone();
    for dep in QUIET_DEPENDENCIES {
        let named = directives.split(',').any(|d| d.trim().split(['=', '[', ':']).next() == Some(*dep));
        if !named {
            full.push_str(&format!(",{dep}=warn"));
        }
    }
    let filter = EnvFilter::builder().parse(&full).map_err(|e| Error::Filter(given.to_string(), e.to_string()))?;
    Ok((directives, filter))
}

/// Where lines go: standard error, or the log file.
#[derive(Clone, Copy)]
struct Out(Option<&'static Mutex<LogFile>>);

/// One line's writer: the log file held for the line, or standard error.
enum Line<'a> {
    File(std::sync::MutexGuard<'a, LogFile>),
    Stderr(std::io::Stderr),
}

impl Write for Line<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Line::File(f) => f.file.write(buf),
            Line::Stderr(e) => e.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Line::File(f) => f.file.flush(),
            Line::Stderr(e) => e.flush(),
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Out {
    type Writer = Line<'a>;
    fn make_writer(&'a self) -> Line<'a> {
        match self.0 {
            // A poisoned lock only means a line was cut short: keep logging.
            Some(m) => Line::File(m.lock().unwrap_or_else(|p| p.into_inner())),
            None => Line::Stderr(std::io::stderr()),
        }
    }
}

/// Sets up this process's logging; once per process.
pub fn init(o: &Options) -> Result<(), Error> {
    let given = match &o.filter {
        Some(f) => f.clone(),
        None => std::env::var(ENV).ok().filter(|v| !v.trim().is_empty()).unwrap_or_else(|| DEFAULT_FILTER.to_string()),
    };
    let (current, filter) = parse_filter(&given)?;
    let file: Option<&'static Mutex<LogFile>> = match &o.file {
        Some(path) => {
            let file = open_log(path)?;
            Some(Box::leak(Box::new(Mutex::new(LogFile { path: path.clone(), file }))))
        }
        None => None,
    };
    let (filter, handle) = reload::Layer::new(filter);
    let out = Out(file);
    let ansi = file.is_none() && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let text = (o.format == Format::Text).then(|| tracing_subscriber::fmt::layer().with_writer(out).with_ansi(ansi));
    let json = (o.format == Format::Json).then(|| {
        tracing_subscriber::fmt::layer().json().flatten_event(true).with_current_span(false).with_span_list(false).with_writer(out)
    });
    if STATE.set(State { handle, current: Mutex::new(current), file }).is_err() {
        return Err(Error::Twice);
    }
    tracing_subscriber::registry().with(filter).with(text).with(json).try_init().map_err(|_| Error::Twice)
}

/// Changes the filter while the process runs; returns it as it now reads.
pub fn set_filter(s: &str) -> Result<String, Error> {
    let st = STATE.get().ok_or(Error::NotSet)?;
    let (directives, filter) = parse_filter(s)?;
    st.handle.reload(filter).map_err(|e| Error::Filter(s.to_string(), e.to_string()))?;
    *st.current.lock().unwrap_or_else(|p| p.into_inner()) = directives.clone();
    Ok(directives)
}

/// The filter in effect (`None` where logging is not set up).
pub fn filter() -> Option<String> {
    STATE.get().map(|st| st.current.lock().unwrap_or_else(|p| p.into_inner()).clone())
}

/// Opens the log file afresh at its path (after logrotate moved it away); nothing where the
/// process logs to standard error. On failure the old file is kept.
pub fn reopen() -> Result<(), Error> {
    let st = STATE.get().ok_or(Error::NotSet)?;
    if let Some(m) = st.file {
        let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = open_log(&g.path)?;
        g.file = fresh;
    }
    Ok(())
}

/// [`reopen`] at a daemon's SIGHUP: a failure is logged (to the old file) and the daemon goes
/// on; a process that logs to standard error has nothing to reopen.
pub fn reopen_at_sighup() {
    match reopen() {
        Ok(()) | Err(Error::NotSet) => {}
        Err(e) => tracing::error!("reopening the log file (SIGHUP): {e}; still writing to the old one"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_levels_and_directives_are_read_and_the_libraries_kept_quiet() {
        assert_eq!(parse_filter("debug2").unwrap().0, "trace");
        assert_eq!(parse_filter("quiet").unwrap().0, "off");
        assert_eq!(parse_filter("5").unwrap().0, "debug");
        assert_eq!(parse_filter("verbose").unwrap().0, "info");
        assert_eq!(parse_filter(" info,server::jobs=debug ").unwrap().0, "info,server::jobs=debug");
        let f = parse_filter("debug").unwrap().1.to_string();
        assert!(f.contains("h2=warn") && f.contains("hyper=warn"), "{f}");
        // A filter that names a library keeps its choice.
        let f = parse_filter("info,h2=trace").unwrap().1.to_string();
        assert!(f.contains("h2=trace") && !f.contains("h2=warn"), "{f}");
    }

    #[test]
    fn malformed_filters_and_formats_are_refused_clearly() {
        for bad in ["", "  ", "server=loud", "info,[", "a\u{1b}[31m", &"x".repeat(2000)] {
            let e = parse_filter(bad).unwrap_err().to_string();
            assert!(e.starts_with("invalid log filter"), "{bad:?}: {e}");
            assert!(!e.contains('\u{1b}'), "{e}");
        }
        assert!("yaml".parse::<Format>().is_err());
        assert_eq!("json".parse::<Format>().unwrap(), Format::Json);
    }

    #[test]
    fn changing_the_filter_before_setup_says_so() {
        // This test binary never calls init.
        assert!(matches!(set_filter("debug"), Err(Error::NotSet)));
        assert!(matches!(reopen(), Err(Error::NotSet)));
        assert_eq!(filter(), None);
    }
}
