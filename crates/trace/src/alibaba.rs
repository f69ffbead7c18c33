//! The Alibaba GPU cluster trace v2023 (`openb_node_list_*.csv`, `openb_pod_list_*.csv`).
//!
//! CPU amounts are kept in milli-cores (a node's `cpus` and a pod's CPU request are both
//! milli-cores), so fractional CPU requests stay exact. A pod's `gpu_milli` is the share of each
//! of its `num_gpu` GPUs (GPU sharing). Duration is `deletion_time − scheduled_time`; pods never
//! scheduled in the trace (empty `scheduled_time`) are skipped and counted. The trace has no user
//! estimate, so the time limit is the duration itself (a perfect estimate, as for the Lublin
//! models).

use model::{GpuPer, GpuRequest, JobRequest, MemRequest, Node, Shape};
use std::io::BufRead;

use crate::{TraceError, TraceJob, Workload};

const MIB: u64 = 1 << 20;

fn header(lines: &mut impl Iterator<Item = (usize, std::io::Result<String>)>, file: &str, want: &[&str]) -> Result<(), TraceError> {
    let (_, first) = lines.next().ok_or_else(|| TraceError::File { file: file.into(), message: "empty file".into() })?;
    let first = first.map_err(|source| TraceError::Io { file: file.into(), source })?;
    let cols: Vec<&str> = first.trim().split(',').collect();
    if cols != want {
        return Err(TraceError::Line {
            file: file.into(),
            line: 1,
            message: format!("expected header {:?}, found {:?}", want.join(","), first.trim()),
        });
    }
    Ok(())
}

fn num(tok: &str, col: &str) -> Result<u64, String> {
    tok.trim().parse::<u64>().map_err(|_| format!("column {col}: {tok:?} is not a non-negative integer"))
}

/// Parses the node list: `sn,cpu_milli,memory_mib,gpu,model`. Nodes are placed 16 to a switch.
pub fn parse_nodes(reader: impl BufRead, file: &str) -> Result<Vec<Node>, TraceError> {
    let mut lines = reader.lines().enumerate();
    header(&mut lines, file, &["sn", "cpu_milli", "memory_mib", "gpu", "model"])?;
    let mut nodes = Vec::new();
    for (n, line) in lines {
        let line = line.map_err(|source| TraceError::Io { file: file.into(), source })?;
        if line.trim().is_empty() {
            continue;
        }
        let err = |message| TraceError::Line { file: file.into(), line: n + 1, message };
        let c: Vec<&str> = line.trim().split(',').collect();
        if c.len() != 5 {
            return Err(err(format!("expected 5 columns, found {}", c.len())));
        }
        let cpus = num(c[1], "cpu_milli").map_err(err)?;
        let mem = num(c[2], "memory_mib").map_err(err)?;
        let gpus = num(c[3], "gpu").map_err(err)?;
        if cpus > u32::MAX as u64 || gpus > 64 {
            return Err(err("cpu_milli or gpu out of range".into()));
        }
        let i = nodes.len() as u32;
        let mut node = Node::new(c[0], cpus as u32, mem * MIB, gpus as u32);
        node.gpu_type = (!c[4].is_empty()).then(|| c[4].to_string());
        node.switch = i / 16;
        node.block = i / 128;
        nodes.push(node);
    }
    if nodes.is_empty() {
        return Err(TraceError::File { file: file.into(), message: "no nodes".into() });
    }
    Ok(nodes)
}

/// Parses the pod list and builds a workload on `nodes`. With `lenient`, malformed lines are
/// skipped and counted instead of failing.
pub fn parse_pods(reader: impl BufRead, file: &str, nodes: Vec<Node>, lenient: bool) -> Result<Workload, TraceError> {
    parse_pod_list(reader, file, nodes, lenient, false)
}

/// [`parse_pods`], and with `all` the pods the trace never scheduled too (with a run time of one
/// second from their creation): the whole pod list, as FGD's placement evaluation samples it.
pub fn parse_pod_list(reader: impl BufRead, file: &str, nodes: Vec<Node>, lenient: bool, all: bool) -> Result<Workload, TraceError> {
    let mut lines = reader.lines().enumerate();
    let cols = [
        "name",
        "cpu_milli",
        "memory_mib",
        "num_gpu",
        "gpu_milli",
        "gpu_spec",
        "qos",
        "pod_phase",
        "creation_time",
        "deletion_time",
        "scheduled_time",
    ];
    header(&mut lines, file, &cols)?;
    let mut jobs = Vec::new();
    let mut skipped = 0;
    for (n, line) in lines {
        let line = line.map_err(|source| TraceError::Io { file: file.into(), source })?;
        if line.trim().is_empty() {
            continue;
        }
        match pod(&line, jobs.len() as u64 + 1, all) {
            Ok(Some(j)) => jobs.push(j),
            Ok(None) => skipped += 1,
            Err(_) if lenient => skipped += 1,
            Err(message) => {
                return Err(TraceError::Line { file: file.into(), line: n + 1, message });
            }
        }
    }
    jobs.sort_by_key(|j: &TraceJob| (j.req.submit_time, j.req.id));
    // Utilisation is counted in milli-GPUs, so shared GPUs count by their share.
    let capacity = nodes.iter().map(|n| n.gpus as u64 * 1000).sum();
    Ok(Workload { name: file.into(), nodes, jobs, capacity, gpu: true, skipped })
}

fn pod(line: &str, id: u64, all: bool) -> Result<Option<TraceJob>, String> {
    let c: Vec<&str> = line.trim().split(',').collect();
    if c.len() != 11 {
        return Err(format!("expected 11 columns, found {}", c.len()));
    }
    let cpu = num(c[1], "cpu_milli")?;
    let mem = num(c[2], "memory_mib")?;
    let ngpu = num(c[3], "num_gpu")?;
    let milli = num(c[4], "gpu_milli")?;
    let created = num(c[8], "creation_time")? as i64;
    let deleted = num(c[9], "deletion_time")? as i64;
    if cpu > u32::MAX as u64 || ngpu > 64 || milli > 1000 {
        return Err("cpu_milli, num_gpu or gpu_milli out of range".into());
    }
    if c[10].trim().is_empty() && !all {
        return Ok(None);
    }
    let scheduled = if c[10].trim().is_empty() { deleted.min(created) } else { num(c[10], "scheduled_time")? as i64 };
    if deleted < scheduled {
        return Err(format!("deletion_time {deleted} is before scheduled_time {scheduled}"));
    }
    let runtime = (deleted - scheduled).max(1);
    let mut shape = Shape::single();
    shape.cpus_per_task = cpu.max(1) as u32;
    shape.mem = MemRequest::PerNode(mem * MIB);
    if ngpu > 0 {
        let spec = c[5].trim();
        shape.gpus = Some(GpuRequest {
            per: GpuPer::Node(ngpu as u32),
            gpu_type: (!spec.is_empty()).then(|| spec.split('|').next().unwrap_or(spec).to_string()),
            milli: milli.clamp(1, 1000) as u32,
        });
    }
    let mut req = JobRequest::new(id, created, runtime, shape);
    req.name = c[0].to_string();
    req.qos = None;
    Ok(Some(TraceJob { req, runtime, units: ngpu * milli }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_and_pods() {
        let nodes = parse_nodes("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\n".as_bytes(), "n.csv").unwrap();
        assert_eq!((nodes[0].cpus, nodes[0].gpus), (64000, 2));
        let pods = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
                    p0,12000,16384,1,500,,LS,Running,0,100,10\np1,1000,10,0,0,,BE,Pending,5,50,\n";
        let w = parse_pods(pods.as_bytes(), "p.csv", nodes.clone(), false).unwrap();
        assert_eq!((w.jobs.len(), w.skipped), (1, 1));
        assert_eq!(w.jobs[0].runtime, 90);
        let all = parse_pod_list(pods.as_bytes(), "p.csv", nodes.clone(), false, true).unwrap();
        assert_eq!((all.jobs.len(), all.skipped), (2, 0), "the never-scheduled pod is kept");
        let bad = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\np0,x,1,1,1,,LS,Running,0,1,0\n";
        let e = parse_pods(bad.as_bytes(), "p.csv", nodes.clone(), false).unwrap_err().to_string();
        assert_eq!(e, "p.csv:2: column cpu_milli: \"x\" is not a non-negative integer");
        let e = parse_nodes("a,b\n".as_bytes(), "n.csv").unwrap_err().to_string();
        assert!(e.starts_with("n.csv:1: expected header"), "{e}");
    }
}
