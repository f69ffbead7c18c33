//! Workload traces: the Standard Workload Format (plain or gzip), the Alibaba GPU trace (v2023,
//! `openb_*` CSV files) and a seeded synthetic generator for GPU clusters of any size.
//!
//! Parsers read from any `BufRead` and name the file and line of every error; [`open`] is the
//! one function here that touches the file system.

mod alibaba;
mod swf;
mod synthetic;

pub use alibaba::{parse_nodes, parse_pod_list, parse_pods};
pub use swf::{Swf, SwfJob, parse_swf};
pub use synthetic::{SyntheticSpec, generate};

use model::{JobRequest, Node, Time};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// A trace-loading error. Messages name the file and line.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be read.
    #[error("{file}: {source}")]
    Io {
        /// File.
        file: String,
        /// Cause.
        source: std::io::Error,
    },
    /// A line is malformed.
    #[error("{file}:{line}: {message}")]
    Line {
        /// File.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The file as a whole is unusable.
    #[error("{file}: {message}")]
    File {
        /// File.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// A synthetic spec is malformed.
    #[error("synthetic spec: {0}")]
    Spec(String),
}

/// One job of a workload: the request the scheduler sees and the run time it will really take.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceJob {
    /// The request (its `time_limit` is the user's estimate).
    pub req: JobRequest,
    /// Actual run time, seconds (never seen by the scheduler).
    pub runtime: Time,
    /// Units of capacity used, for utilisation: processors for CPU traces, GPUs for GPU traces.
    pub units: u64,
}

/// A workload ready to simulate: a cluster and jobs sorted by submission.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Name for reports.
    pub name: String,
    /// The cluster.
    pub nodes: Vec<Node>,
    /// Jobs in submission order.
    pub jobs: Vec<TraceJob>,
    /// Total capacity in the same units as [`TraceJob::units`].
    pub capacity: u64,
    /// Whether utilisation is counted in GPUs.
    pub gpu: bool,
    /// Lines skipped with `lenient` (malformed) or by the trace's rules (runtime 0, never run).
    pub skipped: usize,
}

/// Opens a file for reading, transparently decompressing gzip (detected by its magic bytes).
pub fn open(path: &Path) -> Result<Box<dyn BufRead>, TraceError> {
    let file = path.display().to_string();
    let io = |source| TraceError::Io { file: file.clone(), source };
    let mut f = BufReader::new(std::fs::File::open(path).map_err(io)?);
    let magic = f.fill_buf().map_err(io)?;
    if magic.starts_with(&[0x1f, 0x8b]) { Ok(Box::new(BufReader::new(flate2::bufread::MultiGzDecoder::new(f)))) } else { Ok(Box::new(f)) }
}

/// Reads a whole stream into a string, naming the file on error (bad gzip, not UTF-8).
pub fn read_all(mut r: impl Read, file: &str) -> Result<String, TraceError> {
    let mut s = String::new();
    r.read_to_string(&mut s).map_err(|source| TraceError::Io { file: file.to_string(), source })?;
    Ok(s)
}
