//! Links `tandem-slurm` as a position-dependent executable on Linux.
//!
//! Every `sbatch`, `squeue` or `srun` a user or a script runs starts `tandem-slurm` afresh, so its
//! start-up is paid once per command. As a position-independent executable, the dynamic loader
//! first applies some 16,000 relative relocations to it, writing (so copying) every page of its
//! relocated read-only data: about 70 page faults of a command's 230. Linked at a fixed address
//! those pages are read from the page cache as they are, and a submission takes about 10% less
//! CPU (BENCHMARKS.md §4.4). The daemons (`tandem`), which serve the network for days, stay
//! position-independent, so their code's address is randomized; the commands run as their own
//! user on that user's input.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bin=tandem-slurm=-no-pie");
    }
}
