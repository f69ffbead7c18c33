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

/// Wrappers for the Slurm commands that log each command line to `log`, then run the shim.
fn logging_wrappers(dir: &Path, shims: &Path, log: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for c in ["sbatch", "squeue", "scancel", "sinfo", "sacct", "srun", "salloc", "scontrol"] {
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

/// hello_allreduce's lines: 4 ranks of one world, 2 on each node, with the right sum.
fn assert_one_world_of_four(out: &str, commands: &str) {
    let mut ranks: Vec<&str> = out.lines().filter(|l| l.starts_with("rank ")).collect();
    ranks.sort();
    let want =
        ["rank 0 of 4 sum 6 node node1", "rank 1 of 4 sum 6 node node1", "rank 2 of 4 sum 6 node node2", "rank 3 of 4 sum 6 node node2"];
    assert_eq!(ranks, want, "{out}\ncommands:\n{commands}");
}

#[test]
fn openmpi_mpirun_inside_an_allocation_launches_over_srun() {
    if !["mpicc.openmpi", "mpirun.openmpi", "orted"].into_iter().all(have) {
        assert!(std::env::var("CI").is_err(), "the OpenMPI test cannot run under CI=true: install openmpi-bin and libopenmpi-dev");
        eprintln!("skipped: OpenMPI (openmpi-bin, libopenmpi-dev) is not installed");
        return;
    }
    let (child, dir, server, path, log, work) = cluster("openmpi", "2");
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
         mpirun.openmpi --mca plm_base_verbose 10 ./hello_allreduce\necho mpirun=$?\n",
    )
    .unwrap();
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
    assert_one_world_of_four(&out, &commands);
    assert!(out.contains("mpirun=0"), "{out}");
    // mpirun started its daemons with srun, with OpenMPI's own options: the very command line
    // recorded in tests/clients/openmpi-4.1-srun-argv.txt, but for what varies between runs
    // (numbers, addresses, the host's name).
    assert!(commands.contains("srun --ntasks-per-node=1 --kill-on-bad-exit --mpi=none --ntasks=2 orted"), "{commands}");
    let said = out.lines().skip_while(|l| !l.contains("plm:slurm: final top-level argv:")).nth(1).unwrap_or_default().trim().to_string();
    let recorded = include_str!("../../../tests/clients/openmpi-4.1-srun-argv.txt").lines().find(|l| l.starts_with("srun ")).unwrap();
    let shape = |l: &str| -> Vec<String> {
        l.split_whitespace().map(|w| if w.starts_with('"') { "\"VALUE\"".to_string() } else { w.to_string() }).collect()
    };
    assert_eq!(shape(&said), shape(recorded), "OpenMPI's srun command line changed:\n{said}\nrecorded:\n{recorded}");
    stop_up(child, &dir);
}

/// A fresh `tandem up` of two agents with the shims (behind logging wrappers) first on PATH:
/// (the child, its directory, its server, PATH, the command log, a work directory).
fn cluster(tag: &str, cpus: &str) -> (std::process::Child, PathBuf, String, String, PathBuf, PathBuf) {
    cluster_with(tag, cpus, None)
}

/// [`cluster`] with this `tandem.toml`.
fn cluster_with(tag: &str, cpus: &str, config: Option<&str>) -> (std::process::Child, PathBuf, String, String, PathBuf, PathBuf) {
    let dir = free_dir(tag);
    let mut more = vec!["--no-proxy".to_string(), "--cpus-per-agent".into(), cpus.into()];
    if let Some(c) = config {
        let file = std::env::temp_dir().join(format!("{tag}-{}.toml", std::process::id()));
        std::fs::write(&file, c).unwrap();
        more.extend(["--config".to_string(), file.display().to_string()]);
    }
    let more: Vec<&str> = more.iter().map(String::as_str).collect();
    let (child, server, _) = up(&dir, 2, &more);
    let shims = dir.join("shims");
    assert!(Command::new(bin()).arg("shims").arg(&shims).stdout(Stdio::null()).status().unwrap().success());
    let log = dir.join("commands.log");
    logging_wrappers(&dir.join("wrap"), &shims, &log);
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let path = format!("{}:{}", dir.join("wrap").display(), std::env::var("PATH").unwrap_or_default());
    (child, dir, server, path, log, work)
}

#[test]
fn mpich_runs_under_srun_with_pmi() {
    if !["mpicc.mpich"].into_iter().all(have) {
        assert!(std::env::var("CI").is_err(), "the MPICH test cannot run under CI=true: install mpich and libmpich-dev");
        eprintln!("skipped: MPICH (mpich, libmpich-dev) is not installed");
        return;
    }
    let (child, dir, server, path, log, work) = cluster("mpich", "2");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients/hello_allreduce.c");
    let cc = Command::new("mpicc.mpich").arg("-o").arg(work.join("hello_allreduce")).arg(&src).output().unwrap();
    assert!(cc.status.success(), "mpicc.mpich: {}", String::from_utf8_lossy(&cc.stderr));
    // Direct launch from outside an allocation (srun makes one), and inside one with salloc.
    for args in [
        vec!["srun", "--mpi=pmi2", "-N2", "--ntasks-per-node=2", "./hello_allreduce"],
        vec!["salloc", "-N2", "--ntasks-per-node=2", "srun", "--mpi=pmi2", "./hello_allreduce"],
    ] {
        let o =
            Command::new(args[0]).args(&args[1..]).env("PATH", &path).env("TANDEM_SERVER", &server).current_dir(&work).output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        let commands = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(o.status.success(), "{args:?}: {}\n{out}\ncommands:\n{commands}", String::from_utf8_lossy(&o.stderr));
        assert_one_world_of_four(&out, &format!("{args:?}\n{commands}"));
    }
    // Without PMI every rank is a world of its own, as under Slurm with --mpi=none.
    let o = Command::new("srun")
        .args(["-n2", "./hello_allreduce"])
        .env("PATH", &path)
        .env("TANDEM_SERVER", &server)
        .current_dir(&work)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.lines().filter(|l| l.starts_with("rank 0 of 1 sum 0")).count(), 2, "{out}");
    stop_up(child, &dir);
}

/// hello_local's lines: 4 ranks of one world, 2 on each of node1 and node2, each seeing 2 on
/// its node.
fn assert_one_world_of_two_by_two(out: &str, context: &str) {
    let mut ranks: Vec<&str> = out.lines().filter(|l| l.starts_with("rank ")).collect();
    ranks.sort();
    let want = [
        "rank 0 of 4 sum 6 local 2 node node1",
        "rank 1 of 4 sum 6 local 2 node node1",
        "rank 2 of 4 sum 6 local 2 node node2",
        "rank 3 of 4 sum 6 local 2 node node2",
    ];
    assert_eq!(ranks, want, "{out}\n{context}");
}

/// OpenPMIx's library, where Debian's libpmix2 puts it.
const LIBPMIX: &str = "/usr/lib/x86_64-linux-gnu/libpmix.so.2";

#[test]
fn openmpi_ranks_started_by_srun_form_one_world_over_pmix() {
    if !have("mpicc.openmpi") || !Path::new(LIBPMIX).exists() {
        assert!(std::env::var("CI").is_err(), "the PMIx test cannot run under CI=true: install libopenmpi-dev and libpmix2");
        eprintln!("skipped: OpenMPI (libopenmpi-dev) or OpenPMIx (libpmix2) is not installed");
        return;
    }
    // The site's MpiDefault is pmix, as at most Slurm sites.
    let (child, dir, server, path, log, work) = cluster_with("pmix", "2", Some("mpi_default = \"pmix\"\n"));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients/hello_local.c");
    let cc = Command::new("mpicc.openmpi").arg("-o").arg(work.join("hello_local")).arg(&src).output().unwrap();
    assert!(cc.status.success(), "mpicc.openmpi: {}", String::from_utf8_lossy(&cc.stderr));
    // The tasks' TMPDIR, where the nodes' PMIx directories are made.
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    // tandem up's two nodes share one host name and one /dev/shm, where Open MPI's shared-memory
    // segments of node1's and node2's first ranks would have the same name: TCP between all.
    let run = |args: &[&str]| {
        Command::new(args[0])
            .args(&args[1..])
            .env("PATH", &path)
            .env("TANDEM_SERVER", &server)
            .env("OMPI_MCA_btl", "tcp,self")
            .env("OMPI_MCA_btl_tcp_if_include", "lo")
            .env("TMPDIR", &tmp)
            .current_dir(&work)
            .output()
            .unwrap()
    };
    for args in [
        vec!["srun", "--mpi=pmix", "-N2", "--ntasks-per-node=2", "./hello_local"],
        vec!["salloc", "-N2", "--ntasks-per-node=2", "srun", "--mpi=pmix_v4", "./hello_local"],
        // No --mpi: the cluster's MpiDefault.
        vec!["srun", "-N2", "--ntasks-per-node=2", "./hello_local"],
    ] {
        let o = run(&args);
        let out = String::from_utf8_lossy(&o.stdout);
        let commands = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(o.status.success(), "{args:?}: {}\n{out}\ncommands:\n{commands}", String::from_utf8_lossy(&o.stderr));
        assert_one_world_of_two_by_two(&out, &format!("{args:?}\n{}", String::from_utf8_lossy(&o.stderr)));
    }
    // On one node the ranks share the node's PMIx server, so Open MPI's shared-memory
    // transport alone joins them.
    let o = Command::new("srun")
        .args(["--mpi=pmix", "-N1", "-n2", "./hello_local"])
        .env("PATH", &path)
        .env("TANDEM_SERVER", &server)
        .env("OMPI_MCA_btl", "vader,self")
        .env("TMPDIR", &tmp)
        .current_dir(&work)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(out.lines().filter(|l| l.starts_with("rank ") && l.contains(" of 2 sum 1 local 2 node node")).count(), 2, "{out}");
    // --mpi=none overrides the default (no PMIx server: Open MPI itself refuses to start under
    // srun without one, as under Slurm); scontrol says the default.
    let o = run(&["srun", "--mpi=none", "-n1", "sh", "-c", "echo ${PMIX_RANK:-none}"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "none", "{o:?}");
    let o = run(&["scontrol", "show", "config"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["MpiDefault", "=", "pmix"]),
        "{o:?}"
    );
    // MPI_Abort in one rank ends the step, with its message.
    let o = run(&["srun", "--mpi=pmix", "-N2", "--ntasks-per-node=2", "./hello_local", "2"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("task 2: aborted"), "{o:?}");
    // A program that never speaks PMIx runs under it as without it; --mpi=list names it.
    let o = run(&["srun", "--mpi=pmix", "-n2", "sh", "-c", "echo $SLURM_MPI_TYPE ${PMIX_RANK:-none}"]);
    let mut lines: Vec<String> = String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).collect();
    lines.sort();
    assert!(o.status.success() && lines == ["pmix 0", "pmix 1"], "{o:?}");
    let o = run(&["srun", "--mpi=list"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("\tpmix"), "{o:?}");
    // A library that cannot be loaded is said so, and the step fails.
    let o = Command::new("srun")
        .args(["--mpi=pmix", "-n1", "true"])
        .env("PATH", &path)
        .env("TANDEM_SERVER", &server)
        .env("TANDEM_PMIX_LIBRARY", "/nonexistent/libpmix.so.2")
        .env("TMPDIR", &tmp)
        .current_dir(&work)
        .output()
        .unwrap();
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("cannot load OpenPMIx"), "{o:?}");
    // Every step's node directories went with it (an aborted one's, a failed one's too).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<String> = std::fs::read_dir(&tmp)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("tandem-pmix."))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "left behind in TMPDIR: {left:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    stop_up(child, &dir);
}

/// The PMIx test's world again, with each agent in a network namespace of its own: each node's
/// PMIx server listens on its own loopback, srun runs in the batch script on node1, and the
/// ranks reach each other through the host.
#[test]
fn openmpi_over_pmix_across_network_namespaces() {
    let root = nix::unistd::geteuid().is_root();
    if !root || !have("ip") || !have("mpicc.openmpi") || !Path::new(LIBPMIX).exists() {
        assert!(
            std::env::var("CI").is_err(),
            "the PMIx network-namespace test cannot run under CI=true: it needs root, iproute2, libopenmpi-dev and libpmix2"
        );
        eprintln!("skipped: needs root, iproute2, Open MPI and OpenPMIx");
        return;
    }
    let dir = free_dir("pmixns");
    let net = Netns::new(2);
    let port = std::net::TcpListener::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port();
    let ctl = dir.join("controller");
    std::fs::create_dir_all(&ctl).unwrap();
    let log = |name: &str| std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let mut procs: Vec<std::process::Child> = Vec::new();
    procs.push(
        Command::new(bin())
            .args(["server", "--listen", &format!("0.0.0.0:{port}"), "--data"])
            .arg(&ctl)
            .stdout(log("controller"))
            .stderr(log("controller-err"))
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ctl.join("addr").exists() {
        assert!(Instant::now() < deadline, "the controller did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let server = format!("unix://{}", ctl.join("tandem.sock").display());
    let o = Command::new(bin()).args(["token", "--join", "--count", "2"]).env("TANDEM_SERVER", &server).output().unwrap();
    assert!(o.status.success(), "{o:?}");
    let tokens: Vec<String> = String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).collect();
    for i in 1..=2u32 {
        let data = dir.join(format!("node{i}"));
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("join-token"), format!("{}\n", tokens[i as usize - 1])).unwrap();
        procs.push(
            Command::new("ip")
                .args(["netns", "exec", &net.ns(i), bin(), "agent", "--server", &format!("https://{}:{port}", net.host_ip(i))])
                .args(["--name", &format!("node{i}"), "--cpus", "2", "--memory", "2G", "--addr", &net.node_ip(i), "--join-token-file"])
                .arg(data.join("join-token"))
                .arg("--ca")
                .arg(ctl.join("ca.pem"))
                .arg("--data")
                .arg(&data)
                .stdout(log(&format!("node{i}")))
                .stderr(log(&format!("node{i}-err")))
                .spawn()
                .unwrap(),
        );
    }
    let shims = dir.join("bin");
    assert!(Command::new(bin()).arg("shims").arg(&shims).stdout(Stdio::null()).status().unwrap().success());
    let path = format!("{}:{}", shims.display(), std::env::var("PATH").unwrap_or_default());
    let run = |args: &[&str]| {
        Command::new(args[0]).args(&args[1..]).env("PATH", &path).env("TANDEM_SERVER", &server).current_dir(&dir).output().unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while String::from_utf8_lossy(&run(&["sinfo", "-h", "-N", "-o", "%t"]).stdout).matches("idle").count() < 2 {
        assert!(Instant::now() < deadline, "the agents did not register: see {}/node*.log", dir.display());
        std::thread::sleep(Duration::from_millis(200));
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients/hello_local.c");
    let cc = Command::new("mpicc.openmpi").arg("-o").arg(dir.join("hello_local")).arg(&src).output().unwrap();
    assert!(cc.status.success(), "mpicc.openmpi: {}", String::from_utf8_lossy(&cc.stderr));
    // In the job, srun reaches the controller as a node would (TLS to the host's end of the
    // link, with a token): the agents then reach srun at its node's own address.
    let o = Command::new(bin()).arg("token").env("TANDEM_SERVER", &server).output().unwrap();
    let token = String::from_utf8_lossy(&o.stdout).trim().strip_prefix("export TANDEM_TOKEN=").map(str::to_string).expect("a token");
    let script = format!(
        "export TANDEM_SERVER=https://{}:{port} TANDEM_CA={} TANDEM_TOKEN={token}\nsrun --mpi=pmix ./hello_local; echo srun=$?\n",
        net.host_ip(1),
        ctl.join("ca.pem").display()
    );
    // Both namespaces share this host's name and /dev/shm: TCP between all ranks, over the
    // nodes' own addresses (Open MPI leaves loopback out).
    let o = Command::new("sbatch")
        .args(["-W", "-N2", "--ntasks-per-node=2", "-o", "mpi.out", "--wrap", &script])
        .env("PATH", &path)
        .env("TANDEM_SERVER", &server)
        .env("OMPI_MCA_btl", "tcp,self")
        .current_dir(&dir)
        .output()
        .unwrap();
    let out = std::fs::read_to_string(dir.join("mpi.out")).unwrap_or_default();
    for mut c in procs {
        let _ = c.kill();
        let _ = c.wait();
    }
    drop(net);
    assert!(o.status.success(), "sbatch -W: {o:?}\n{out}");
    assert_one_world_of_two_by_two(&out, "");
    assert!(out.contains("srun=0"), "{out}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn interactive_salloc_and_srun_pty_through_a_real_terminal() {
    if !have("tmux") {
        assert!(std::env::var("CI").is_err(), "the interactive test cannot run under CI=true: install tmux");
        eprintln!("skipped: tmux is not installed");
        return;
    }
    let (child, dir, server, path, log, work) = cluster("pty", "2");
    let session = format!("tandem-pty-{}", std::process::id());
    let sock = dir.join("tmux.sock");
    let tmux = |args: &[&str]| Command::new("tmux").arg("-S").arg(&sock).args(args).status().unwrap();
    assert!(
        tmux(&[
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "120",
            "-y",
            "40",
            "env",
            "-i",
            &format!("PATH={path}"),
            &format!("TANDEM_SERVER={server}"),
            "HOME=/tmp",
            "TERM=xterm",
            "PS1=$ ",
            "bash",
            "--norc",
            "--noprofile"
        ])
        .success()
    );
    let s = format!("{session}:0");
    let sock_s = sock.display().to_string();
    let until = |keys: &[&str], want: &str| -> String {
        // Send, then poll the screen until it shows `want`.
        let mut a = vec!["-S", sock_s.as_str(), "send-keys", "-t", &s];
        a.extend_from_slice(keys);
        assert!(Command::new("tmux").args(&a).status().unwrap().success());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let o = Command::new("tmux").args(["-S", &sock_s, "capture-pane", "-p", "-t", &s]).output().unwrap();
            let screen = String::from_utf8_lossy(&o.stdout).into_owned();
            if screen.contains(want) {
                return screen;
            }
            let commands = std::fs::read_to_string(&log).unwrap_or_default();
            assert!(Instant::now() < deadline, "waited for {want:?} after {keys:?}; the screen:\n{screen}\ncommands:\n{commands}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    until(&[&format!("cd {}", work.display()), "Enter"], "$ ");
    // salloc -N2, then srun in it.
    until(&["salloc -N2", "Enter"], "Granted job allocation");
    until(&["srun hostname | wc -l; echo n=$SLURM_NNODES", "Enter"], "n=2");
    until(&["exit", "Enter"], "Relinquishing job allocation");
    // srun --pty bash: a real terminal, its size, and what is typed into it.
    until(&["srun --pty env PS1=in-the-job: bash --norc", "Enter"], "\nin-the-job:");
    let screen = until(&["tty; stty size; echo in-job=$SLURM_JOB_ID", "Enter"], "in-job=2");
    assert!(screen.contains("/dev/pts/") && screen.contains("40 120"), "{screen}");
    assert!(tmux(&["resize-window", "-t", &session, "-x", "100", "-y", "30"]).success());
    until(&["stty size | sed s/^/size=/", "Enter"], "size=30 100");
    // srun is back (and its terminal cooked again) when the local prompt shows.
    until(&["exit 4", "Enter"], "exit\n$");
    until(&["echo rc=$?", "Enter"], "rc=4");
    let _ = tmux(&["kill-server"]);
    stop_up(child, &dir);
}
