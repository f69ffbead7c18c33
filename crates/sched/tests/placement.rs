//! Property tests of GPU placement: every policy places single-node jobs (shared GPUs, whole
//! GPUs, CPU only) without over-committing a GPU, and the default and fgd choose a node whose
//! expected fragmentation (FGD's measure) grows least, on FGD's integer score.

mod common;

use common::World;
use model::{GpuPer, GpuRequest, JobRequest, MemRequest, Node, Shape};
use proptest::prelude::*;
use sched::{Backfill, Config, GpuProfile, NodeUsage, Placement, Policy};

/// A single-node request: `g` GPUs of `milli` each (a shared GPU when `g == 1` and `milli <
/// 1000`), `c` CPUs.
fn pod(id: u64, c: u32, g: u32, milli: u32) -> JobRequest {
    let mut s = Shape::single();
    s.cpus_per_task = c.max(1);
    s.mem = MemRequest::PerNode(1 << 30);
    if g > 0 {
        s.gpus = Some(GpuRequest { per: GpuPer::Node(g), gpu_type: None, milli: if g == 1 { milli } else { 1000 } });
    }
    JobRequest::new(id, 0, 100, s)
}

fn cluster(spec: &[(u32, u32)]) -> Vec<Node> {
    spec.iter().enumerate().map(|(i, &(cpus, gpus))| Node::new(format!("n{i}"), cpus, 64 << 30, gpus)).collect()
}

fn requests() -> impl Strategy<Value = Vec<(u32, u32, u32)>> {
    prop::collection::vec((1u32..=16, 0u32..=4, prop_oneof![Just(1000u32), 100u32..1000]), 1..40)
}

fn placement() -> impl Strategy<Value = Placement> {
    prop::sample::select(Placement::ALL.to_vec())
}

/// Free milli-GPUs of each GPU of a node.
fn free(u: &NodeUsage) -> Vec<u32> {
    u.gpu_milli.iter().map(|&m| 1000 - m).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Jobs arrive one at a time and never leave; whatever the policy, no GPU holds more than a
    /// whole GPU (`NodeUsage::apply` asserts it) and nothing is placed where it does not fit.
    #[test]
    fn placement_never_overcommits(
        spec in prop::collection::vec((4u32..=32, 0u32..=8), 1..12),
        reqs in requests(),
        how in placement(),
        seed in 0u64..1000,
    ) {
        let nodes = cluster(&spec);
        let mut w = World::new(nodes);
        let cfg = Config { policy: Policy::Fcfs, backfill: Backfill::None, placement: how, ..Config::default() };
        for (k, &(c, g, milli)) in reqs.iter().enumerate() {
            w.pending.clear();
            w.submit(pod(k as u64 + 1, c, g, milli));
            let plan = sched::schedule(&w.snap(), k as i64, seed, &cfg);
            for s in &plan.starts {
                prop_assert_eq!(s.allocs.len(), 1);
                let a = &s.allocs[0];
                prop_assert_eq!(a.gpus.len() as u32, g, "the GPUs asked for");
            }
            w.apply(&plan, k as i64); // panics on any over-commitment
            for (n, u) in w.nodes.iter().zip(&w.usage) {
                prop_assert!(u.gpu_milli.iter().all(|&m| m <= 1000) && u.cpus <= n.cpus);
            }
        }
    }

    /// The default and fgd place a job (on a cluster whose workload shares GPUs) on a node where
    /// the expected fragmentation against the profile grows least, as FGD scores it
    /// (`100 · sigmoid(−Δ / 1000)`, an integer): no other node, with any choice of GPUs, scores
    /// higher.
    #[test]
    fn fgd_chooses_least_fragmentation_growth(
        spec in prop::collection::vec((8u32..=32, 1u32..=8), 1..10),
        fill in requests(),
        next in (1u32..=16, 0u32..=4, prop_oneof![Just(1000u32), 100u32..1000]),
        how in prop_oneof![Just(Placement::Default), Just(Placement::Fgd)],
    ) {
        let nodes = cluster(&spec);
        let mut w = World::new(nodes);
        // The workload: the filling jobs and the next one, with a shared-GPU kind in it.
        let mut all: Vec<JobRequest> = fill.iter().enumerate().map(|(k, &(c, g, m))| pod(k as u64 + 1, c, g, m)).collect();
        all.push(pod(999, 2, 1, 300));
        let profile = GpuProfile::from_requests(&all, 1.0);
        prop_assume!(profile.shares());
        let cfg = Config { policy: Policy::Fcfs, backfill: Backfill::None, placement: how, profile: profile.clone(), ..Config::default() };
        // Fill the cluster with a random placement, so nodes differ.
        let random = Config { placement: Placement::Random, ..cfg.clone() };
        for (k, &(c, g, m)) in fill.iter().enumerate() {
            w.pending.clear();
            w.submit(pod(k as u64 + 1, c, g, m));
            let plan = sched::schedule(&w.snap(), 0, k as u64, &random);
            w.apply(&plan, 0);
        }
        w.pending.clear();
        let (c, g, milli) = next;
        let req = pod(500, c, g, milli);
        let milli = if g == 1 { milli } else { 1000 };
        w.submit(req);
        let plan = sched::schedule(&w.snap(), 1, 7, &cfg);
        // The growth of each node's fragmentation for each way the job could go there.
        let frag = |n: &Node, cpus: u32, f: &[u32]| profile.node_fragmentation(cpus, profile.access(n), f);
        let mut best = f64::INFINITY;
        for (n, u) in w.nodes.iter().zip(&w.usage) {
            let f = free(u);
            let cpus = n.cpus - u.cpus;
            if cpus < c.max(1) || f.iter().filter(|&&x| x >= milli).count() < g as usize {
                continue;
            }
            let before = frag(n, cpus, &f);
            let after = if g == 0 {
                frag(n, cpus - c.max(1), &f)
            } else if g == 1 {
                (0..f.len()).filter(|&i| f[i] >= milli).map(|i| {
                    let mut t = f.clone();
                    t[i] -= milli;
                    frag(n, cpus - c.max(1), &t)
                }).fold(f64::INFINITY, f64::min)
            } else {
                // Whole GPUs: only fully free ones fit, and which of them makes no difference.
                let mut t = f.clone();
                for x in t.iter_mut().filter(|x| **x == 1000).take(g as usize) {
                    *x = 0;
                }
                frag(n, cpus - c.max(1), &t)
            };
            best = best.min(after - before);
        }
        match plan.starts.first() {
            None => prop_assert!(best.is_infinite(), "a node fits but nothing started"),
            Some(s) => {
                let a = &s.allocs[0];
                let i = a.node as usize;
                let n = &w.nodes[i];
                let f = free(&w.usage[i]);
                let cpus = n.cpus - w.usage[i].cpus;
                let mut t = f.clone();
                for &gi in &a.gpus {
                    t[gi as usize] -= a.gpu_milli;
                }
                let delta = frag(n, cpus - a.cpus, &t) - frag(n, cpus, &f);
                let score = |x: f64| (100.0 / (1.0 + (x / 1000.0).exp())) as i64;
                prop_assert!(score(delta) >= score(best), "chose growth {delta}, {best} was possible");
            }
        }
    }
}

/// A node with half a GPU free is wholly fragmented for a workload of whole-GPU jobs, and FGD's
/// cluster measure says so.
#[test]
fn half_a_free_gpu_is_fragmented_for_whole_gpu_work() {
    let nodes = cluster(&[(16, 1), (16, 1)]);
    let mut w = World::new(nodes);
    let whole: Vec<JobRequest> = (1..=4).map(|k| pod(k, 1, 1, 1000)).collect();
    let profile = GpuProfile::from_requests(&whole, 1.0);
    let cfg = Config { policy: Policy::Fcfs, backfill: Backfill::None, placement: Placement::Tight, ..Config::default() };
    w.submit(pod(9, 1, 1, 500));
    let plan = sched::schedule(&w.snap(), 0, 1, &cfg);
    w.apply(&plan, 0);
    let f = sched::cluster_fragmentation(&w.nodes, &w.usage, &profile);
    assert_eq!(f.free_milli, 1500);
    assert_eq!(f.fragmented_milli, 500.0, "the half GPU, and only it");
}
