//! The environment a task sees: Slurm's variables (which PyTorch Lightning, NeMo and job
//! scripts read), the same under `TANDEM_*`, and PyTorch's rendezvous variables.

use crate::hostlist::compress;

/// Everything the task environment is computed from.
#[derive(Debug, Clone, Default)]
pub struct TaskEnv<'a> {
    /// Job id.
    pub job_id: u64,
    /// Job name.
    pub job_name: &'a str,
    /// Account.
    pub account: &'a str,
    /// Partition.
    pub partition: &'a str,
    /// QOS.
    pub qos: &'a str,
    /// Cluster name.
    pub cluster: &'a str,
    /// Directory the job was submitted from.
    pub submit_dir: &'a str,
    /// Host the job was submitted from.
    pub submit_host: &'a str,
    /// The nodes of the task's step (the job's for the batch script), in allocation order.
    pub nodes: &'a [String],
    /// The job's nodes, when they are not `nodes` (a step on some of them); empty: `nodes`.
    pub job_nodes: &'a [String],
    /// Tasks on each of `nodes`.
    pub tasks_per_node: &'a [u32],
    /// CPUs allocated on each of those nodes.
    pub cpus_per_node: &'a [u32],
    /// CPUs per task (`-c`).
    pub cpus_per_task: u32,
    /// Index of this task's node in `nodes`.
    pub node_index: usize,
    /// Global rank of this task.
    pub procid: u32,
    /// Rank of this task on its node.
    pub localid: u32,
    /// The job's GPU indices on this node.
    pub node_gpus: &'a [u8],
    /// This task's GPUs (what CUDA_VISIBLE_DEVICES lists); the node's when `None`.
    pub task_gpus: Option<&'a [u8]>,
    /// Memory per node in MiB, when requested that way.
    pub mem_per_node_mb: Option<u64>,
    /// Memory per CPU in MiB, when requested that way.
    pub mem_per_cpu_mb: Option<u64>,
    /// Times the job has been requeued.
    pub restart_count: u32,
    /// Array job id, task id, and the array's count, min, max and step.
    pub array: Option<(u64, u32, u32, u32, u32, u32)>,
    /// Job step id (0 for the first `srun`; none for the batch script).
    pub step_id: Option<u32>,
    /// Start time and end time (time limit), Unix seconds.
    pub start_end: (i64, Option<i64>),
    /// Port for PyTorch's rendezvous (MASTER_PORT).
    pub master_port: u16,
    /// A heterogeneous job's components, each described by `SLURM_*_HET_GROUP_k` variables
    /// (and `SLURM_HET_SIZE`); empty for an ordinary job.
    pub het: &'a [HetGroup],
}

/// One component of a heterogeneous job, as its `SLURM_*_HET_GROUP_k` variables describe it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HetGroup {
    /// The component's job id (the leader's id plus its offset).
    pub job_id: u64,
    /// Its nodes, in allocation order.
    pub nodes: Vec<String>,
    /// Tasks on each of them.
    pub tasks_per_node: Vec<u32>,
    /// CPUs it holds on each of them.
    pub cpus_per_node: Vec<u32>,
    /// CPUs per task (`-c`).
    pub cpus_per_task: u32,
    /// Its partition.
    pub partition: String,
}

/// PyTorch's rendezvous variables, which Tandem sets in every task (Slurm does not) unless
/// the user exported them.
pub const PYTORCH_VARS: [&str; 8] =
    ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK"];

/// The PyTorch variables Tandem set in a task itself, with their values (`K=V` separated by
/// spaces), so that an `srun` in a batch script, which passes its environment on, does not
/// pass the batch task's values off as the user's (a value the script changed is the user's).
pub const DEFAULTED: &str = "TANDEM_DEFAULTED";

/// The environment `--export` gives a job or step: `ALL` (the default) the caller's, `NONE`
/// nothing (Slurm's `NONE` still passes the SLURM_* variables, which the task gets anyway),
/// else the named variables (`NAME` from the caller's, `NAME=value` as given), with the
/// caller's too when the list has `ALL`.
pub fn apply_export(export: Option<&str>, env: &[(String, String)]) -> Vec<(String, String)> {
    match export {
        None | Some("ALL") => env.to_vec(),
        Some("NONE") => Vec::new(),
        Some(list) => {
            let mut out: Vec<(String, String)> = if list.split(',').any(|x| x == "ALL") { env.to_vec() } else { Vec::new() };
            for item in list.split(',').filter(|x| *x != "ALL" && *x != "NONE" && !x.is_empty()) {
                let kv = match item.split_once('=') {
                    Some((k, v)) => Some((k.to_string(), v.to_string())),
                    None => env.iter().find(|(k, _)| k == item).cloned(),
                };
                if let Some((k, v)) = kv {
                    out.retain(|(o, _)| *o != k);
                    out.push((k, v));
                }
            }
            out
        }
    }
}

/// Slurm's compact tasks-per-node form: `2(x3),1`.
fn tasks_per_node(t: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < t.len() {
        let mut j = i;
        while j + 1 < t.len() && t[j + 1] == t[i] {
            j += 1;
        }
        let n = j - i + 1;
        parts.push(if n > 1 { format!("{}(x{n})", t[i]) } else { t[i].to_string() });
        i = j + 1;
    }
    parts.join(",")
}

fn list(v: &[u8]) -> String {
    v.iter().map(u8::to_string).collect::<Vec<_>>().join(",")
}

/// The variables for one task, in a stable order. Every `SLURM_*` variable also appears as
/// `TANDEM_*`.
pub fn task_env(e: &TaskEnv) -> Vec<(String, String)> {
    let nodelist = compress(e.nodes);
    let ntasks: u32 = e.tasks_per_node.iter().sum();
    let node_name = e.nodes.get(e.node_index).cloned().unwrap_or_default();
    let tasks_here = e.tasks_per_node.get(e.node_index).copied().unwrap_or(1);
    let mut s: Vec<(&str, String)> = vec![
        ("JOB_ID", e.job_id.to_string()),
        ("JOBID", e.job_id.to_string()),
        ("JOB_NAME", e.job_name.to_string()),
        ("JOB_ACCOUNT", e.account.to_string()),
        ("JOB_PARTITION", e.partition.to_string()),
        ("JOB_QOS", e.qos.to_string()),
        ("CLUSTER_NAME", e.cluster.to_string()),
        ("SUBMIT_DIR", e.submit_dir.to_string()),
        ("SUBMIT_HOST", e.submit_host.to_string()),
        ("JOB_NODELIST", if e.job_nodes.is_empty() { nodelist.clone() } else { compress(e.job_nodes) }),
        ("NODELIST", nodelist),
        ("JOB_NUM_NODES", if e.job_nodes.is_empty() { e.nodes.len() } else { e.job_nodes.len() }.to_string()),
        ("NNODES", e.nodes.len().to_string()),
        ("NTASKS", ntasks.to_string()),
        ("NPROCS", ntasks.to_string()),
        ("TASKS_PER_NODE", tasks_per_node(e.tasks_per_node)),
        ("NTASKS_PER_NODE", tasks_here.to_string()),
        ("JOB_CPUS_PER_NODE", tasks_per_node(e.cpus_per_node)),
        ("CPUS_ON_NODE", e.cpus_per_node.get(e.node_index).copied().unwrap_or(0).to_string()),
        ("CPUS_PER_TASK", e.cpus_per_task.max(1).to_string()),
        ("PROCID", e.procid.to_string()),
        ("LOCALID", e.localid.to_string()),
        ("NODEID", e.node_index.to_string()),
        ("TOPOLOGY_ADDR", node_name.clone()),
        ("GPUS_ON_NODE", e.node_gpus.len().to_string()),
        ("JOB_GPUS", list(e.node_gpus)),
        ("RESTART_COUNT", e.restart_count.to_string()),
        ("JOB_START_TIME", e.start_end.0.to_string()),
    ];
    if let Some(end) = e.start_end.1 {
        s.push(("JOB_END_TIME", end.to_string()));
    }
    if let Some(m) = e.mem_per_node_mb {
        s.push(("MEM_PER_NODE", m.to_string()));
    }
    if let Some(m) = e.mem_per_cpu_mb {
        s.push(("MEM_PER_CPU", m.to_string()));
    }
    if let Some((aj, t, count, min, max, step)) = e.array {
        s.push(("ARRAY_JOB_ID", aj.to_string()));
        s.push(("ARRAY_TASK_ID", t.to_string()));
        s.push(("ARRAY_TASK_COUNT", count.to_string()));
        s.push(("ARRAY_TASK_MIN", min.to_string()));
        s.push(("ARRAY_TASK_MAX", max.to_string()));
        s.push(("ARRAY_TASK_STEP", step.to_string()));
    }
    if let Some(step) = e.step_id {
        s.push(("STEP_ID", step.to_string()));
        s.push(("STEPID", step.to_string()));
    }
    let mut out: Vec<(String, String)> = Vec::with_capacity(s.len() * 2 + 12);
    for (k, v) in &s {
        out.push((format!("SLURM_{k}"), v.clone()));
    }
    out.push(("SLURMD_NODENAME".into(), node_name.clone()));
    if !e.het.is_empty() {
        out.push(("SLURM_HET_SIZE".into(), e.het.len().to_string()));
        for (k, g) in e.het.iter().enumerate() {
            let ntasks: u32 = g.tasks_per_node.iter().sum();
            let vars = [
                ("JOB_ID", g.job_id.to_string()),
                ("JOB_NODELIST", compress(&g.nodes)),
                ("JOB_NUM_NODES", g.nodes.len().to_string()),
                ("NNODES", g.nodes.len().to_string()),
                ("NTASKS", ntasks.to_string()),
                ("NPROCS", ntasks.to_string()),
                ("TASKS_PER_NODE", tasks_per_node(&g.tasks_per_node)),
                ("JOB_CPUS_PER_NODE", tasks_per_node(&g.cpus_per_node)),
                ("CPUS_PER_TASK", g.cpus_per_task.max(1).to_string()),
                ("JOB_PARTITION", g.partition.clone()),
            ];
            out.extend(vars.into_iter().map(|(v, x)| (format!("SLURM_{v}_HET_GROUP_{k}"), x)));
        }
    }
    for (k, v) in &s {
        out.push((format!("TANDEM_{k}"), v.clone()));
    }
    out.push(("TANDEM_NODENAME".into(), node_name));
    let gpus = e.task_gpus.unwrap_or(e.node_gpus);
    out.push(("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into()));
    out.push(("CUDA_VISIBLE_DEVICES".into(), list(gpus)));
    let first = e.nodes.first().cloned().unwrap_or_else(|| "localhost".into());
    let pytorch = [
        ("MASTER_ADDR", first),
        ("MASTER_PORT", e.master_port.to_string()),
        ("WORLD_SIZE", ntasks.to_string()),
        ("RANK", e.procid.to_string()),
        ("LOCAL_RANK", e.localid.to_string()),
        ("LOCAL_WORLD_SIZE", tasks_here.to_string()),
        ("NODE_RANK", e.node_index.to_string()),
        ("GROUP_RANK", e.node_index.to_string()),
    ];
    out.extend(pytorch.into_iter().map(|(k, v)| (k.to_string(), v)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_rules() {
        let env = vec![("A".to_string(), "1".to_string()), ("B".to_string(), "2".to_string())];
        assert_eq!(apply_export(None, &env), env);
        assert!(apply_export(Some("NONE"), &env).is_empty());
        assert_eq!(apply_export(Some("B,C=3"), &env), vec![("B".into(), "2".into()), ("C".into(), "3".into())]);
        assert_eq!(apply_export(Some("ALL,A=9"), &env), vec![("B".to_string(), "2".to_string()), ("A".to_string(), "9".to_string())]);
    }

    #[test]
    fn two_nodes_two_tasks() {
        let nodes = vec!["gpu01".to_string(), "gpu02".to_string()];
        let e = TaskEnv {
            job_id: 42,
            job_name: "train",
            nodes: &nodes,
            tasks_per_node: &[2, 2],
            cpus_per_node: &[8, 8],
            cpus_per_task: 4,
            node_index: 1,
            procid: 3,
            localid: 1,
            node_gpus: &[2, 3],
            task_gpus: Some(&[3]),
            master_port: 29500,
            ..TaskEnv::default()
        };
        let env: std::collections::HashMap<String, String> = task_env(&e).into_iter().collect();
        let get = |k: &str| env.get(k).map(String::as_str).unwrap_or_else(|| panic!("missing {k}"));
        assert_eq!(get("SLURM_JOB_NODELIST"), "gpu[01-02]");
        assert_eq!(get("SLURM_TASKS_PER_NODE"), "2(x2)");
        assert_eq!((get("SLURM_PROCID"), get("SLURM_LOCALID"), get("SLURM_NODEID")), ("3", "1", "1"));
        assert_eq!((get("SLURM_NTASKS"), get("SLURM_JOB_NUM_NODES")), ("4", "2"));
        assert_eq!(get("TANDEM_PROCID"), "3");
        assert_eq!((get("SLURM_JOB_GPUS"), get("CUDA_VISIBLE_DEVICES")), ("2,3", "3"));
        assert_eq!(
            (get("MASTER_ADDR"), get("MASTER_PORT"), get("WORLD_SIZE"), get("RANK"), get("LOCAL_RANK"), get("NODE_RANK")),
            ("gpu01", "29500", "4", "3", "1", "1")
        );
        assert_eq!(get("CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
        assert_eq!(tasks_per_node(&[2, 2, 2, 1]), "2(x3),1");
    }
}
