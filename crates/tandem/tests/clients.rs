//! Real Slurm clients, unchanged, against a real `tandem up` cluster through the shims:
//! submitit 1.5.4 and dask-jobqueue 0.9.0 (pinned with everything they pull in, in
//! `tests/clients/requirements.txt`, installed into
//! `target/clients-venv` by `tests/clients/setup.sh`, which `.ci/run` runs). Under `CI=true`
//! a missing client fails the test; elsewhere it is skipped with a note. A failure prints the
//! command lines the client ran (every Slurm command it called goes through a logging wrapper).

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn venv() -> PathBuf {
    std::env::var_os("TANDEM_CLIENTS_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/clients-venv"))
}

/// The venv's python, if it has `module`.
fn python_with(module: &str) -> Result<PathBuf, String> {
    let py = venv().join("bin/python");
    let ok = Command::new(&py).args(["-c", &format!("import {module}")]).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    if ok { Ok(py) } else { Err(format!("{} has no {module} (run tests/clients/setup.sh)", py.display())) }
}

/// Wrappers for the Slurm commands that log each command line to `log`, then run the shim.
fn logging_wrappers(dir: &Path, shims: &Path, log: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for c in ["sbatch", "squeue", "scancel", "sinfo", "sacct", "srun", "scontrol"] {
        let w = dir.join(c);
        std::fs::write(&w, format!("#!/bin/sh\necho \"{c} $*\" >> {}\nexec {} \"$@\"\n", log.display(), shims.join(c).display())).unwrap();
        Command::new("chmod").arg("755").arg(&w).status().unwrap();
    }
}

/// Runs `script` (in `tests/clients/`) with the venv's python against a fresh `tandem up`
/// cluster of two agents, with `args` after the script and `work` (a directory of the run)
/// first; returns its output, or fails with it and the commands it ran.
fn run_client(tag: &str, module: &str, script: &str, checks: &[&str]) -> Option<String> {
    let py = match python_with(module) {
        Ok(p) => p,
        Err(why) => {
            assert!(std::env::var("CI").is_err(), "the {module} test cannot run under CI=true: {why}");
            eprintln!("skipped: {why}");
            return None;
        }
    };
    let dir = free_dir(tag);
    let (child, server, _) = up(&dir, 2, &["--no-proxy"]);
    let shims = dir.join("shims");
    assert!(Command::new(bin()).arg("shims").arg(&shims).stdout(Stdio::null()).status().unwrap().success());
    let log = dir.join("commands.log");
    logging_wrappers(&dir.join("wrap"), &shims, &log);
    let path = format!("{}:{}:{}", dir.join("wrap").display(), venv().join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients").join(script);
    let mut run = Command::new(&py)
        .arg(&script)
        .arg(&work)
        .arg("batch")
        .env("PATH", &path)
        .env("TANDEM_SERVER", &server)
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    while run.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = run.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = run.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let commands = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        out.status.success() && checks.iter().all(|c| text.contains(c)),
        "{module} failed ({}):\n{text}\ncommands it ran:\n{commands}\nsacct:\n{}",
        out.status,
        run_in(&dir, &server, &["history", "-P", "--format=JobID,JobName,State,ExitCode"]),
    );
    eprintln!("{text}");
    stop_up(child, &dir);
    Some(commands)
}

#[test]
fn submitit_submits_maps_raises_fails_and_cancels() {
    let Some(commands) =
        run_client("submitit", "submitit", "submitit_check.py", &["ok submit", "ok map_array", "ok exception", "ok died", "ok cancel"])
    else {
        return;
    };
    // It really went through sbatch, srun and sacct (with submitit's own options).
    assert!(commands.contains("sacct -o JobID,State,NodeList --parsable2"), "{commands}");
    assert!(commands.contains("scancel"), "{commands}");
}

#[test]
fn dask_jobqueue_scales_computes_and_closes() {
    let Some(commands) = run_client("dask", "dask_jobqueue", "dask_check.py", &["ok scale 2", "ok compute 285", "ok close"]) else {
        return;
    };
    assert!(commands.contains("sbatch") && commands.contains("scancel"), "{commands}");
}

#[test]
fn openmpi_mpirun_inside_an_allocation_launches_over_srun() {
    if !["mpicc.openmpi", "mpirun.openmpi", "orted"].into_iter().all(have) {
        assert!(std::env::var("CI").is_err(), "the OpenMPI test cannot run under CI=true: install openmpi-bin and libopenmpi-dev");
        eprintln!("skipped: OpenMPI (openmpi-bin, libopenmpi-dev) is not installed");
        return;
    }
    let dir = free_dir("openmpi");
    let (child, server, _) = up(&dir, 2, &["--no-proxy", "--cpus-per-agent", "2"]);
    let shims = dir.join("shims");
    assert!(Command::new(bin()).arg("shims").arg(&shims).stdout(Stdio::null()).status().unwrap().success());
    let log = dir.join("commands.log");
    logging_wrappers(&dir.join("wrap"), &shims, &log);
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients/hello_allreduce.c");
    let cc = Command::new("mpicc.openmpi").arg("-o").arg(work.join("hello_allreduce")).arg(&src).output().unwrap();
    assert!(cc.status.success(), "mpicc: {}", String::from_utf8_lossy(&cc.stderr));
    // OpenMPI refuses root without these. Its shared-memory transport (vader) is left out:
    // tandem up's nodes share one kernel, where two of its daemons' segments collide; on
    // separate machines it is not needed (see README).
    std::fs::write(
        work.join("mpi.sh"),
        "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=2\n#SBATCH -o mpi.out\n\
         export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=lo\n\
         mpirun.openmpi ./hello_allreduce\necho mpirun=$?\n",
    )
    .unwrap();
    let path = format!("{}:{}", dir.join("wrap").display(), std::env::var("PATH").unwrap_or_default());
    let o = Command::new("sbatch")
        .args(["-W", "mpi.sh"])
        .env("PATH", &path)
        .env("TANDEM_SERVER", &server)
        .current_dir(&work)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = std::fs::read_to_string(work.join("mpi.out")).unwrap_or_default();
    let commands = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(o.status.success(), "sbatch -W: {}\n{out}\ncommands:\n{commands}", String::from_utf8_lossy(&o.stderr));
    let mut ranks: Vec<&str> = out.lines().filter(|l| l.starts_with("rank ")).collect();
    ranks.sort();
    assert_eq!(
        ranks,
        vec![
            "rank 0 of 4 sum 6 node node1",
            "rank 1 of 4 sum 6 node node1",
            "rank 2 of 4 sum 6 node node2",
            "rank 3 of 4 sum 6 node node2"
        ],
        "{out}\ncommands:\n{commands}"
    );
    assert!(out.contains("mpirun=0"), "{out}");
    // mpirun started its daemons with srun, with OpenMPI's own options.
    assert!(commands.contains("srun --ntasks-per-node=1 --kill-on-bad-exit --mpi=none --ntasks=2 orted"), "{commands}");
    stop_up(child, &dir);
}
