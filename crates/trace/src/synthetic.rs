//! A seeded synthetic GPU workload for clusters of any size.
//!
//! The mix follows the published GPU-cluster statistics (BASELINES.md §3): most jobs use one
//! GPU (median 1), a tail of multi-node gangs up to 64 nodes, run times log-normal with a median
//! near two minutes and a heavy tail (mean ≈ 1,400 s, as Seren's), arrivals Poisson at a rate
//! that offers the requested load. Users overestimate: the time limit is the run time times a
//! factor in [1, 5), rounded up to whole minutes.

use model::{GpuPer, GpuRequest, JobRequest, MemRequest, Node, Shape};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use crate::{TraceError, TraceJob, Workload};

/// Parameters of a synthetic workload: `nodes=N,gpus=G,jobs=J,load=L,cpus=C,mem_gib=M,users=U`
/// (every key optional; defaults 1024 nodes, 8 GPUs, 10,000 jobs, load 0.9, 64 CPUs,
/// 1024 GiB, 64 users).
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticSpec {
    /// Nodes.
    pub nodes: u32,
    /// GPUs per node.
    pub gpus: u32,
    /// Jobs.
    pub jobs: u32,
    /// Offered load (GPU-seconds asked ÷ GPU-seconds available over the arrival span).
    pub load: f64,
    /// CPUs per node.
    pub cpus: u32,
    /// Memory per node, GiB.
    pub mem_gib: u64,
    /// Distinct users.
    pub users: u32,
}

impl Default for SyntheticSpec {
    fn default() -> Self {
        SyntheticSpec { nodes: 1024, gpus: 8, jobs: 10_000, load: 0.9, cpus: 64, mem_gib: 1024, users: 64 }
    }
}

impl std::str::FromStr for SyntheticSpec {
    type Err = TraceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut spec = SyntheticSpec::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| TraceError::Spec(format!("{part:?} is not key=value")))?;
            let int = |v: &str| -> Result<u64, TraceError> {
                let v = v.replace('_', "");
                let (n, mult) = match v.strip_suffix(['k', 'K']) {
                    Some(n) => (n.to_string(), 1000),
                    None => (v.clone(), 1),
                };
                n.parse::<u64>().map(|x| x * mult).map_err(|_| TraceError::Spec(format!("{k}: {v:?} is not a whole number")))
            };
            match k {
                "nodes" => spec.nodes = int(v)?.try_into().map_err(|_| TraceError::Spec("nodes too large".into()))?,
                "gpus" => spec.gpus = int(v)?.min(64) as u32,
                "jobs" => spec.jobs = int(v)?.try_into().map_err(|_| TraceError::Spec("jobs too large".into()))?,
                "cpus" => spec.cpus = int(v)?.try_into().map_err(|_| TraceError::Spec("cpus too large".into()))?,
                "mem_gib" => spec.mem_gib = int(v)?,
                "users" => spec.users = int(v)?.max(1) as u32,
                "load" => {
                    spec.load = v.parse::<f64>().map_err(|_| TraceError::Spec(format!("load: {v:?} is not a number")))?;
                    if !(spec.load > 0.0 && spec.load <= 10.0) {
                        return Err(TraceError::Spec(format!("load: {v} is outside (0, 10]")));
                    }
                }
                _ => {
                    return Err(TraceError::Spec(format!("unknown key {k:?} (known: nodes, gpus, jobs, load, cpus, mem_gib, users)")));
                }
            }
        }
        if spec.nodes == 0 || spec.jobs == 0 || spec.cpus == 0 {
            return Err(TraceError::Spec("nodes, jobs and cpus must be positive".into()));
        }
        Ok(spec)
    }
}

/// Nodes of a synthetic cluster: 32 per leaf switch, 8 switches per block.
pub fn cluster(spec: &SyntheticSpec) -> Vec<Node> {
    (0..spec.nodes)
        .map(|i| {
            let mut n = Node::new(format!("gpu{i:06}"), spec.cpus, spec.mem_gib << 30, spec.gpus);
            n.gpu_type = (spec.gpus > 0).then(|| "h100".to_string());
            n.switch = i / 32;
            n.block = i / 256;
            n
        })
        .collect()
}

/// Draws one job's GPU count: the published shape, median 1 GPU, gangs up to 64 nodes.
fn gpus_for(rng: &mut SmallRng, per_node: u32, nodes: u32) -> u32 {
    let x: f64 = rng.random();
    let g = match x {
        x if x < 0.60 => 1,
        x if x < 0.72 => 2,
        x if x < 0.82 => 4,
        x if x < 0.91 => 8,
        x if x < 0.95 => 16,
        x if x < 0.975 => 32,
        x if x < 0.99 => 64,
        x if x < 0.997 => 128,
        x if x < 0.999 => 256,
        _ => 512,
    };
    let max = (per_node.max(1) * nodes.min(64)).max(1);
    g.min(max)
}

/// Generates the workload from the spec and a seed.
pub fn generate(spec: &SyntheticSpec, seed: u64) -> Workload {
    let mut rng = SmallRng::seed_from_u64(seed);
    let nodes = cluster(spec);
    let g = spec.gpus.max(1);
    let mut jobs = Vec::with_capacity(spec.jobs as usize);
    let mut raw: Vec<(u32, i64)> = Vec::with_capacity(spec.jobs as usize);
    let mut work = 0f64;
    for _ in 0..spec.jobs {
        let gpus = gpus_for(&mut rng, g, spec.nodes);
        // log-normal: median e^mu = 120 s, sigma 2.2, cut at 10 s and 1 day (mean ≈ 1,200 s)
        let z = normal(&mut rng);
        let run = (120f64.ln() + 2.2 * z).exp().clamp(10.0, 86400.0) as i64;
        work += gpus as f64 * run as f64;
        raw.push((gpus, run));
    }
    let capacity = (spec.nodes as u64 * g as u64) as f64;
    let span = work / (capacity * spec.load);
    let mean_gap = span / spec.jobs as f64;
    let mut t = 0f64;
    for (i, (gpus, run)) in raw.into_iter().enumerate() {
        let u: f64 = rng.random();
        t += -mean_gap * (1.0 - u).ln();
        let factor = 1.0 + 4.0 * rng.random::<f64>();
        let limit = ((run as f64 * factor / 60.0).ceil() as i64 * 60).max(60);
        let mut shape = Shape::single();
        if spec.gpus == 0 {
            shape.ntasks = gpus;
        } else if gpus <= g {
            shape.ntasks = gpus;
            shape.cpus_per_task = (spec.cpus / g).max(1);
            shape.mem = MemRequest::PerCpu(4 << 30);
            shape.gpus = Some(GpuRequest { per: GpuPer::Task(1), gpu_type: None, milli: 1000 });
        } else {
            let k = gpus.div_ceil(g);
            shape.nodes_min = k;
            shape.nodes_max = k;
            shape.ntasks = k * g;
            shape.ntasks_per_node = Some(g);
            shape.cpus_per_task = (spec.cpus / g).max(1);
            shape.mem = MemRequest::PerCpu(4 << 30);
            shape.gpus = Some(GpuRequest { per: GpuPer::Task(1), gpu_type: None, milli: 1000 });
        }
        let mut req = JobRequest::new(i as u64 + 1, t as i64, limit, shape);
        let user = zipf_user(&mut rng, spec.users);
        req.user = format!("user{user}");
        req.account = format!("acct{}", user % 8);
        // GPU workloads count capacity in milli-GPUs (as the Alibaba trace, where GPUs are shared).
        let units = if spec.gpus == 0 { gpus as u64 } else { gpus as u64 * 1000 };
        jobs.push(TraceJob { req, runtime: run, units });
    }
    Workload {
        name: format!("synthetic({} nodes x {} GPUs, {} jobs)", spec.nodes, spec.gpus, spec.jobs),
        nodes,
        jobs,
        capacity: if spec.gpus == 0 { capacity as u64 } else { capacity as u64 * 1000 },
        gpu: spec.gpus > 0,
        skipped: 0,
    }
}

fn normal(rng: &mut SmallRng) -> f64 {
    let u1: f64 = rng.random::<f64>().max(1e-12);
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

fn zipf_user(rng: &mut SmallRng, users: u32) -> u32 {
    // P(user k) ∝ 1/(k+1): a few heavy users, a long tail.
    let h: f64 = (1..=users).map(|k| 1.0 / k as f64).sum();
    let mut x = rng.random::<f64>() * h;
    for k in 1..=users {
        x -= 1.0 / k as f64;
        if x <= 0.0 {
            return k - 1;
        }
    }
    users - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_parsing() {
        let s: SyntheticSpec = "nodes=30k,gpus=8,jobs=1000,load=0.8".parse().unwrap();
        assert_eq!((s.nodes, s.gpus, s.jobs), (30_000, 8, 1000));
        assert!("nodes=abc".parse::<SyntheticSpec>().unwrap_err().to_string().contains("not a whole number"));
        assert!("color=red".parse::<SyntheticSpec>().unwrap_err().to_string().contains("unknown key"));
        assert!("load=-1".parse::<SyntheticSpec>().is_err());
        assert!("nodes".parse::<SyntheticSpec>().is_err());
    }

    #[test]
    fn deterministic_and_shaped() {
        let s: SyntheticSpec = "nodes=64,jobs=2000".parse().unwrap();
        let a = generate(&s, 7);
        assert_eq!(a, generate(&s, 7));
        assert_ne!(a.jobs, generate(&s, 8).jobs);
        let mut g: Vec<u64> = a.jobs.iter().map(|j| j.units).collect();
        g.sort();
        assert_eq!(g[g.len() / 2], 1000, "median job uses one GPU (1000 milli-GPUs)");
        assert!(a.jobs.iter().all(|j| j.req.time_limit >= j.runtime));
    }
}
