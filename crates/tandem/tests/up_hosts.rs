//! `tandem up`'s node names resolve for jobs: as root it adds its marked lines to /etc/hosts
//! (node1 and node2 at 127.0.0.1, the address its agents advertise), a job connects to the
//! first node of its list by that name, and the lines are gone once it stops.

mod common;

use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The lines of /etc/hosts that the `tandem up` of `dir` wrote.
fn our_lines(dir: &std::path::Path) -> Vec<String> {
    let mark = format!(" {}", dir.canonicalize().unwrap_or(dir.to_path_buf()).display());
    std::fs::read_to_string("/etc/hosts")
        .unwrap()
        .lines()
        .filter(|l| l.contains("# tandem-up ") && l.ends_with(&mark))
        .map(str::to_string)
        .collect()
}

/// The addresses /etc/hosts gives `name`: 127.0.0.1 alone, unless another line (the
/// machine's own) names it otherwise; a job resolves it to one of them.
fn addrs_of(name: &str) -> Vec<String> {
    std::fs::read_to_string("/etc/hosts")
        .unwrap()
        .lines()
        .filter_map(|l| {
            let mut words = l.split('#').next().unwrap_or("").split_whitespace();
            let addr = words.next()?;
            words.any(|w| w == name).then(|| addr.to_string())
        })
        .collect()
}

/// Stops a `tandem up` left running by a failed assertion (Ctrl-C: it removes its lines).
struct Interrupt(u32);

impl Drop for Interrupt {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-INT", &self.0.to_string()]).status();
    }
}

/// A 2-node `tandem up`: its lines in /etc/hosts give node1 and node2 127.0.0.1; a `-N2` job
/// finds its first node by name (getent, Python), and its second node's task connects to the
/// first's by that name; the lines are gone at the exit.
#[test]
fn node_names_resolve_for_jobs_and_the_hosts_lines_go_at_the_exit() {
    if !is_root() || !have("python3") || !have("getent") {
        assert!(std::env::var("CI").is_err(), "the node-name test cannot run under CI=true: it needs root, python3 and getent");
        eprintln!("skipped: the node-name test needs root (to write /etc/hosts), python3 and getent");
        return;
    }
    let dir = free_dir("uphosts");
    let (child, server, _) = up(&dir, 2, &["--no-proxy", "--cpus-per-agent", "2"]);
    let canon = dir.canonicalize().unwrap();
    let lines = our_lines(&dir);
    let pid = child.id();
    let guard = Interrupt(pid);
    assert_eq!(
        lines,
        [
            format!("127.0.0.1\tnode1\t# tandem-up {pid} {}", canon.display()),
            format!("127.0.0.1\tnode2\t# tandem-up {pid} {}", canon.display())
        ],
        "{}",
        std::fs::read_to_string("/etc/hosts").unwrap()
    );
    let shims = dir.join("shims");
    assert!(Command::new(bin()).arg("shims").arg(&shims).stdout(Stdio::null()).status().unwrap().success());
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    // Rank 0 (on node1) listens on MASTER_ADDR, the first host name of the job's list; rank 1
    // (on node2) connects to it by that name and says who it is.
    std::fs::write(
        work.join("names.py"),
        r#"import os, socket, sys, time
addr, port, rank = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), int(os.environ["SLURM_PROCID"])
node = os.environ["SLURMD_NODENAME"]
if rank == 0:
    s = socket.create_server((addr, port))
    s.settimeout(30)
    c, peer = s.accept()
    print(f"rank0 on {node} bound {socket.gethostbyname(addr)} heard {c.recv(100).decode()} from {peer[0]}", flush=True)
else:
    deadline = time.time() + 30
    while True:
        try:
            c = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.1)
    c.sendall(f"rank1 on {node}".encode())
    c.close()
"#,
    )
    .unwrap();
    std::fs::write(
        work.join("names.sh"),
        "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=1\n#SBATCH -o names.out\n\
         echo tandem_master=$MASTER_ADDR\n\
         export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -1)\n\
         echo master=$MASTER_ADDR\n\
         getent hosts \"$MASTER_ADDR\" || echo getent=$?\n\
         python3 -c 'import socket;print(\"py\", socket.gethostbyname(\"node1\"), socket.gethostbyname(\"node2\"))'\n\
         srun python3 names.py\necho srun=$?\n",
    )
    .unwrap();
    let path = format!("{}:{}", shims.display(), std::env::var("PATH").unwrap_or_default());
    let o = Command::new(bin())
        .args(["submit", "-W", "names.sh"])
        .env("PATH", &path)
        .env("TANDEM_SERVER", &server)
        .current_dir(&work)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = std::fs::read_to_string(work.join("names.out")).unwrap_or_default();
    assert!(o.status.success(), "sbatch -W: {}\n{out}", String::from_utf8_lossy(&o.stderr));
    // Tandem's own MASTER_ADDR is the first node's address, which its name resolves to.
    assert!(out.contains("tandem_master=127.0.0.1\n"), "{out}");
    assert!(out.contains("\nmaster=node1\n"), "{out}");
    let (one, two) = (addrs_of("node1"), addrs_of("node2"));
    assert!(out.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["127.0.0.1", "node1"]), "{out}");
    let py = out.lines().find_map(|l| l.strip_prefix("py ")).unwrap_or_else(|| panic!("{out}"));
    let py: Vec<String> = py.split(' ').map(str::to_string).collect();
    assert!(py.len() == 2 && one.contains(&py[0]) && two.contains(&py[1]), "{out}\n{one:?} {two:?}");
    assert!(out.contains(&format!("rank0 on node1 bound {} heard rank1 on node2 from ", py[0])), "{out}");
    assert!(out.contains("srun=0"), "{out}");
    std::mem::forget(guard);
    let stderr = stop_up(child, &dir);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !our_lines(&canon).is_empty() {
        assert!(
            Instant::now() < deadline,
            "tandem up left its lines in /etc/hosts:\n{}\n{stderr}",
            std::fs::read_to_string("/etc/hosts").unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
