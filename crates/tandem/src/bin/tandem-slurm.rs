//! `tandem-slurm`: the Slurm-compatible commands alone (`sbatch`, `squeue`, `scancel`, `sinfo`,
//! `sacct`, `srun`, `scontrol`, `sprio`), answering to the name it is invoked by, as the links
//! `tandem shims DIR` writes. Built from the `cli` crate only (no server, agent, proxy, NVML or
//! benchmarks), so each command a user or a script runs starts a small program.

fn main() -> std::process::ExitCode {
    exec::quiet_sigpipe();
    let argv = match cli::args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let invoked = argv.first().map(|a| a.rsplit('/').next().unwrap_or(a).to_string()).unwrap_or_default();
    match cli::slurm(&invoked, argv.get(1..).unwrap_or(&[])) {
        Some(Ok(code)) => std::process::ExitCode::from(code.clamp(0, 255) as u8),
        Some(Err(e)) => {
            eprintln!("{}", cli::error_line(&invoked, &e));
            std::process::ExitCode::from(1)
        }
        None => {
            eprintln!(
                "tandem-slurm: run me as one of {} (a link of that name, as `tandem shims DIR` writes), not as {invoked:?}",
                cli::COMMANDS.join(", ")
            );
            std::process::ExitCode::from(2)
        }
    }
}
