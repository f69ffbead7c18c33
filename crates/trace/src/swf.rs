//! The Standard Workload Format (Parallel Workloads Archive, version 2.2).
//!
//! Loading follows RLScheduler's rules (so its published numbers reproduce): processors =
//! max(allocated, requested); requested time = field 9, or the actual run time when field 9 is
//! −1 (so the Lublin models get perfect estimates); then a run time of −1 becomes 10 s and jobs
//! with run time 0 are dropped (counted in `skipped`); jobs are sorted by job number.

use model::{JobRequest, Node, Shape};
use std::io::BufRead;

use crate::{TraceError, TraceJob, Workload};

/// One SWF job after the loading rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwfJob {
    /// Field 1.
    pub id: u64,
    /// Field 2, seconds.
    pub submit: i64,
    /// Field 4 after the −1 → 10 rule.
    pub run: i64,
    /// max(field 5, field 8).
    pub procs: u32,
    /// Field 9, or the run time when field 9 is −1.
    pub requested: i64,
    /// Field 12.
    pub user: i64,
    /// Field 13.
    pub group: i64,
    /// Field 15.
    pub queue: i64,
}

/// A parsed SWF file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Swf {
    /// `MaxNodes` from the header.
    pub max_nodes: Option<u64>,
    /// `MaxProcs` from the header.
    pub max_procs: Option<u64>,
    /// Jobs, sorted by job number.
    pub jobs: Vec<SwfJob>,
    /// Jobs dropped by the rules (run time 0).
    pub dropped: usize,
    /// Malformed lines skipped (only with `lenient`).
    pub malformed: usize,
}

fn leading_int(v: &str) -> Option<u64> {
    let digits: String = v.trim().chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

fn field(tok: &str, name: &str) -> Result<i64, String> {
    if let Ok(v) = tok.parse::<i64>() {
        return Ok(v);
    }
    match tok.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v.trunc() as i64),
        _ => Err(format!("field {name}: {tok:?} is not a number")),
    }
}

/// Parses SWF text. A malformed line is an error naming `file` and the line, or with `lenient`
/// is skipped and counted.
pub fn parse_swf(reader: impl BufRead, file: &str, lenient: bool) -> Result<Swf, TraceError> {
    let mut swf = Swf { max_nodes: None, max_procs: None, jobs: Vec::new(), dropped: 0, malformed: 0 };
    for (n, line) in reader.lines().enumerate() {
        let lineno = n + 1;
        let line = line.map_err(|e| TraceError::Line { file: file.into(), line: lineno, message: format!("unreadable: {e}") })?;
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if let Some(h) = t.strip_prefix(';') {
            if let Some((k, v)) = h.split_once(':') {
                match k.trim() {
                    "MaxNodes" => swf.max_nodes = leading_int(v),
                    "MaxProcs" => swf.max_procs = leading_int(v),
                    _ => {}
                }
            }
            continue;
        }
        match parse_line(t) {
            Ok(Some(job)) => swf.jobs.push(job),
            Ok(None) => swf.dropped += 1,
            Err(message) if lenient => {
                let _ = message;
                swf.malformed += 1;
            }
            Err(message) => {
                return Err(TraceError::Line { file: file.into(), line: lineno, message });
            }
        }
    }
    swf.jobs.sort_by_key(|j| j.id);
    Ok(swf)
}

fn parse_line(t: &str) -> Result<Option<SwfJob>, String> {
    let toks: Vec<&str> = t.split_whitespace().collect();
    if toks.len() != 18 {
        return Err(format!("expected 18 fields, found {}", toks.len()));
    }
    let f = |i: usize, name: &str| field(toks[i], name);
    let id = f(0, "1 (job number)")?;
    if id < 0 {
        return Err(format!("field 1 (job number): {id} is negative"));
    }
    let submit = f(1, "2 (submit time)")?;
    if submit < 0 {
        return Err(format!("field 2 (submit time): {submit} is negative"));
    }
    let mut run = f(3, "4 (run time)")?;
    let alloc = f(4, "5 (allocated processors)")?;
    let req_procs = f(7, "8 (requested processors)")?;
    let mut requested = f(8, "9 (requested time)")?;
    let user = f(11, "12 (user)")?;
    let group = f(12, "13 (group)")?;
    let queue = f(14, "15 (queue)")?;
    for (i, name) in [(2, "3"), (5, "6"), (6, "7"), (9, "10"), (10, "11"), (13, "14"), (15, "16"), (16, "17"), (17, "18")] {
        field(toks[i], name)?;
    }
    let procs = alloc.max(req_procs);
    if procs <= 0 {
        return Err(format!("fields 5 and 8 (processors): no positive processor count ({alloc}, {req_procs})"));
    }
    if procs > u32::MAX as i64 {
        return Err(format!("fields 5 and 8 (processors): {procs} is too large"));
    }
    if requested == -1 {
        requested = run;
    }
    if run < 0 {
        run = 10;
    }
    if run == 0 {
        return Ok(None);
    }
    Ok(Some(SwfJob { id: id as u64, submit, run, procs: procs as u32, requested, user, group, queue }))
}

impl Swf {
    /// Turns the trace into a workload on `MaxNodes` nodes of `MaxProcs / MaxNodes` processors
    /// each (either defaults to the other; `procs_override` replaces both when the header lacks
    /// them). A job of `p` processors asks for ceil(p / procs per node) whole nodes.
    pub fn into_workload(self, name: &str, procs_override: Option<u64>) -> Result<Workload, TraceError> {
        let (nodes, procs) = match (procs_override, self.max_nodes, self.max_procs) {
            (Some(p), _, _) => (p, p),
            (None, Some(n), Some(p)) => (n, p),
            (None, Some(n), None) => (n, n),
            (None, None, Some(p)) => (p, p),
            (None, None, None) => {
                return Err(TraceError::File {
                    file: name.into(),
                    message: "no MaxNodes or MaxProcs in the header: give the machine size with --procs".into(),
                });
            }
        };
        if nodes == 0 || procs < nodes {
            return Err(TraceError::File { file: name.into(), message: format!("bad machine size: {nodes} nodes, {procs} processors") });
        }
        let ppn = (procs / nodes) as u32;
        let cluster: Vec<Node> = (0..nodes)
            .map(|i| {
                let mut n = Node::new(format!("n{i:05}"), ppn, 0, 0);
                n.switch = (i / 32) as u32;
                n.block = (i / 256) as u32;
                n
            })
            .collect();
        let mut jobs = Vec::with_capacity(self.jobs.len());
        for j in self.jobs {
            let k = j.procs.div_ceil(ppn.max(1));
            let mut shape = Shape::whole_nodes(k);
            shape.ntasks = j.procs;
            shape.ntasks_per_node = None;
            let mut req = JobRequest::new(j.id, j.submit, j.requested, shape);
            // SWF's -1 is "unknown": no user, so nothing is learned per user (the Lublin
            // models give every job -1).
            req.user = if j.user < 0 { String::new() } else { format!("u{}", j.user) };
            req.account = format!("g{}", j.group);
            jobs.push(TraceJob { req, runtime: j.run, units: j.procs as u64 });
        }
        Ok(Workload { name: name.into(), nodes: cluster, jobs, capacity: procs, gpu: false, skipped: self.dropped + self.malformed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "; Version: 2\n; MaxNodes: 338 (batch partition; 512 total)\n";

    #[test]
    fn header_and_rules() {
        let text = format!(
            "{HEAD}1 0 5 100 4 -1 -1 8 -1 -1 1 3 1 -1 1 -1 -1 -1\n2 5 0 0 1 -1 -1 -1 50 -1 1 1 1 -1 1 -1 -1 -1\n3 7 0 -1 2 -1 -1 -1 -1 -1 5 1 1 -1 1 -1 -1 -1\n"
        );
        let s = parse_swf(text.as_bytes(), "t.swf", false).unwrap();
        assert_eq!(s.max_nodes, Some(338));
        assert_eq!(s.dropped, 1);
        assert_eq!(s.jobs.len(), 2);
        assert_eq!(s.jobs[0].procs, 8);
        assert_eq!(s.jobs[0].requested, 100);
        assert_eq!((s.jobs[1].run, s.jobs[1].requested), (10, -1));
    }

    #[test]
    fn malformed_lines_name_file_and_line() {
        let text = format!("{HEAD}1 0 5 100 4 -1 -1 8 -1 -1 1 3 1 -1 1 -1 -1 -1\n2 5 0 abc 1\n");
        let e = parse_swf(text.as_bytes(), "t.swf", false).unwrap_err().to_string();
        assert_eq!(e, "t.swf:4: expected 18 fields, found 5");
        let text = format!("{HEAD}2 5 0 1x 1 -1 -1 -1 50 -1 1 1 1 -1 1 -1 -1 -1\n");
        let e = parse_swf(text.as_bytes(), "t.swf", false).unwrap_err().to_string();
        assert!(e.starts_with("t.swf:3: field 4 (run time)"), "{e}");
        let s = parse_swf(text.as_bytes(), "t.swf", true).unwrap();
        assert_eq!((s.jobs.len(), s.malformed), (0, 1));
        let text = format!("{HEAD}1 0 5 100 0 -1 -1 -1 -1 -1 1 3 1 -1 1 -1 -1 -1\n");
        let e = parse_swf(text.as_bytes(), "t.swf", false).unwrap_err().to_string();
        assert!(e.contains("no positive processor count"), "{e}");
    }

    #[test]
    fn machine_size_required() {
        let s = parse_swf("1 0 5 100 4 -1 -1 8 -1 -1 1 3 1 -1 1 -1 -1 -1\n".as_bytes(), "x", false).unwrap();
        assert!(s.clone().into_workload("x", None).unwrap_err().to_string().contains("--procs"));
        let w = s.into_workload("x", Some(16)).unwrap();
        assert_eq!(w.nodes.len(), 16);
        assert_eq!(w.jobs[0].req.shape.nodes_min, 8);
    }
}
