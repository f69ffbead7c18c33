//! The `tandem` command. This binary is a thin shell: argument parsing, file IO, the wall
//! clock and output formatting; the decisions live in the `sched` and `sim` crates.

mod bench;
mod simcmd;

use clap::{Parser, Subcommand};

/// Tandem: one scheduler for training gangs and inference replicas.
#[derive(Parser)]
#[command(name = "tandem", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Replay a workload trace (or a synthetic workload) through the scheduler in virtual time.
    Sim(simcmd::SimArgs),
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        which: bench::BenchCmd,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Sim(a) => simcmd::run(a),
        Cmd::Bench { which } => bench::run(which),
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tandem: error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
