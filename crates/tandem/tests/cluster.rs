//! End-to-end tests of the batch system: a real controller and real agents (separate OS
//! processes, each its own node name) on loopback, real jobs, real signals, `kill -9`.
//! Every wait is bounded; no test asserts a duration.

mod common;

use common::*;
use std::collections::HashMap;
use std::io::{Read, Write};

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn two_nodes_two_tasks_see_their_ranks_nodes_and_disjoint_gpus() {
    let c = Cluster::new("env", 2, Some("h100:4"), 30);
    let s = c.script(
        "env.sh",
        "#!/bin/bash\n#SBATCH -J envtest\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=2\n#SBATCH --gpus-per-node=4\n#SBATCH -o env-%j.out\n\
         echo batch nodes=$SLURM_JOB_NODELIST ntasks=$SLURM_NTASKS\n\
         srun bash -c 'echo task rank=$SLURM_PROCID local=$SLURM_LOCALID nodeid=$SLURM_NODEID node=$SLURMD_NODENAME cuda=$CUDA_VISIBLE_DEVICES world=$WORLD_SIZE rank2=$RANK local_rank=$LOCAL_RANK node_rank=$NODE_RANK master=$MASTER_ADDR:$MASTER_PORT tandem=$TANDEM_PROCID order=$CUDA_DEVICE_ORDER'\n",
    );
    let id = c.sbatch(&[&s]);
    c.wait_state(id, &["COMPLETED"], 60);
    let out = std::fs::read_to_string(c.work.join(format!("env-{id}.out"))).unwrap();
    assert!(out.contains("batch nodes=node[1-2] ntasks=4"), "{out}");
    let tasks: Vec<&str> = out.lines().filter(|l| l.starts_with("task ")).collect();
    assert_eq!(tasks.len(), 4, "{out}");
    for (rank, nodeid, local, cuda) in [(0, 0, 0, "0,1"), (1, 0, 1, "2,3"), (2, 1, 0, "0,1"), (3, 1, 1, "2,3")] {
        let node = format!("node{}", nodeid + 1);
        let line = format!(
            "task rank={rank} local={local} nodeid={nodeid} node={node} cuda={cuda} world=4 rank2={rank} local_rank={local} node_rank={nodeid} master=127.0.0.1:"
        );
        assert!(
            tasks.iter().any(|t| t.starts_with(&line) && t.ends_with(&format!("tandem={rank} order=PCI_BUS_ID"))),
            "no line {line:?} in\n{out}"
        );
    }
    let acct = c.ok("sacct", &["-j", &id.to_string(), "--format=JobID,State,ExitCode,NodeList", "-P"]);
    assert!(acct.contains(&format!("{id}|COMPLETED|0:0|node[1-2]")), "{acct}");
    assert!(acct.contains(&format!("{id}.batch|COMPLETED")) && acct.contains(&format!("{id}.0|COMPLETED")), "{acct}");
}

#[test]
fn srun_takes_the_callers_environment_directory_and_options() {
    let c = Cluster::new("srunopts", 2, None, 30);
    let s = c.script(
        "steps.sh",
        "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=2\n#SBATCH -o steps.out\n\
         export FOO=bar MASTER_PORT=12345\nmkdir -p sub && cd sub\n\
         srun -N2 --ntasks-per-node=2 --unbuffered --output=out_%j_%t.txt --error=err_%t.txt bash -c 'echo $FOO $MASTER_PORT $RANK $WORLD_SIZE $(pwd); echo e$SLURM_PROCID >&2'\n\
         echo plain=$?\n\
         srun -K -n2 bash -c 'if [ $SLURM_PROCID = 1 ]; then exit 3; fi; exec sleep 300'\necho killed=$?\n\
         srun --kill-on-bad-exit=1 --mpi=none --cpu_bind=none --ntasks-per-node=1 --nodes=2 --nodelist=node[1-2] --ntasks=2 -o mpi_%t.txt printenv SLURMD_NODENAME\n\
         srun -w node2 -n1 -o only.txt printenv SLURMD_NODENAME\n\
         srun -w node2 -n1 -o step.txt bash -c 'echo $WORLD_SIZE $RANK $SLURM_NTASKS $SLURM_NNODES $SLURM_NODELIST $SLURM_JOB_NODELIST $SLURM_NODEID'\nsrun -x node2 -n1 -o other.txt printenv SLURMD_NODENAME\n\
         srun --export=NONE,ONLY=1 -n1 -o none.txt bash -c 'echo only=$ONLY foo=${FOO:-unset}'\n\
         srun --chdir=/tmp -n1 -J named -o $PWD/chdir.txt pwd\n\
         srun --mpi=pmi2 true; echo pmi2=$?\n\
         echo hosts=$(scontrol show hostnames | tr '\\n' ,) list=$(scontrol show hostlist node1,node2)\n",
    );
    let id = c.sbatch(&[&s]);
    // -K ended the sleeping task: the job does not wait for its 300 s.
    c.wait_state(id, &["COMPLETED", "FAILED"], 90);
    let out = std::fs::read_to_string(c.work.join("steps.out")).unwrap();
    let sub = c.work.join("sub");
    for rank in 0..4 {
        let f = std::fs::read_to_string(sub.join(format!("out_{id}_{rank}.txt"))).unwrap_or_else(|e| panic!("{e}\n{out}"));
        assert_eq!(f.trim(), format!("bar 12345 {rank} 4 {}", sub.display()), "rank {rank}");
        assert_eq!(std::fs::read_to_string(sub.join(format!("err_{rank}.txt"))).unwrap().trim(), format!("e{rank}"));
    }
    assert!(out.contains("plain=0") && out.contains("killed=137"), "{out}");
    let mut hosts: Vec<String> =
        (0..2).map(|t| std::fs::read_to_string(sub.join(format!("mpi_{t}.txt"))).unwrap().trim().to_string()).collect();
    hosts.sort();
    assert_eq!(hosts, vec!["node1", "node2"], "one task per node");
    assert_eq!(std::fs::read_to_string(sub.join("only.txt")).unwrap().trim(), "node2");
    // A step on part of the allocation sees its own layout (so PyTorch waits for its ranks only).
    assert_eq!(std::fs::read_to_string(sub.join("step.txt")).unwrap().trim(), "1 0 1 1 node2 node[1-2] 0");
    assert_eq!(std::fs::read_to_string(sub.join("other.txt")).unwrap().trim(), "node1");
    assert_eq!(std::fs::read_to_string(sub.join("none.txt")).unwrap().trim(), "only=1 foo=unset");
    assert_eq!(std::fs::read_to_string(sub.join("chdir.txt")).unwrap().trim(), "/tmp");
    // -J names the step in sacct; a step without it is named by its command.
    let acct = c.ok("sacct", &["-j", &id.to_string(), "-P", "-n", "--format=JobID,JobName"]);
    assert!(acct.contains("|named\n") && acct.contains(&format!("{id}.0|bash\n")) && acct.contains(&format!("{id}.batch|batch")), "{acct}");
    // A program that never speaks PMI runs under --mpi=pmi2 as without it.
    assert!(out.contains("pmi2=0"), "{out}");
    assert!(out.contains("hosts=node1,node2, list=node[1-2]"), "{out}");
    let o = c.run("scontrol", &["show", "hostnames", "node[1-"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("Invalid hostlist"));
    // Bad options are refused before anything is asked of the controller.
    let o = c.run("srun", &["--frobnicate", "true"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("unrecognized option '--frobnicate'"));
}

#[test]
fn srun_is_its_tasks_terminal_inside_and_outside_an_allocation() {
    let c = Cluster::new("srunio", 2, None, 30);
    // Inside a batch job: output through srun (never the job's file directly), pipes, command
    // substitution, labels, input to every task or one, exit codes, a variable and a cd.
    let s = c.script(
        "io.sh",
        "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=2\n#SBATCH -o io.out\n\
         echo count=$(srun -N2 --ntasks-per-node=2 printenv SLURMD_NODENAME | sort | uniq -c | tr -s ' ' | tr '\\n' ,)\n\
         x=$(srun -n1 echo hi); echo \"x=[$x]\"\n\
         srun -l bash -c 'echo out$SLURM_PROCID; echo err$SLURM_PROCID >&2' 2>err.txt | sort | tr '\\n' ,; echo\n\
         export MYVAR=v1 MASTER_PORT=12345; mkdir -p d && cd d\n\
         srun -n2 bash -c 'echo env=$MYVAR,$MASTER_PORT,$(basename $(pwd))' | sort -u\n\
         printf 'a\\nb\\n' | srun -n2 wc -l | tr -d ' ' | tr '\\n' ,; echo\n\
         printf 'one\\n' | srun -n2 --input=1 -l cat\n\
         srun -n2 bash -c 'exit $((SLURM_PROCID + 3))'; echo rc=$?\n\
         srun -n1 bash -c 'kill -9 $$'; echo sig=$?\n\
         srun -n1 -o file_%t.txt echo to-file; echo file=$(cat file_0.txt)\n\
         srun -n1 true | head -c0; echo closed=$?\n",
    );
    let id = c.sbatch(&[&s]);
    c.wait_state(id, &["COMPLETED", "FAILED"], 120);
    let out = std::fs::read_to_string(c.work.join("io.out")).unwrap();
    let err = std::fs::read_to_string(c.work.join("err.txt")).unwrap_or_default();
    assert!(out.contains("count= 2 node1, 2 node2,"), "{out}");
    assert!(out.contains("x=[hi]"), "{out}");
    assert!(out.contains("0: out0,1: out1,2: out2,3: out3,"), "{out}");
    for r in 0..4 {
        assert!(err.contains(&format!("{r}: err{r}\n")), "{err}");
    }
    assert!(out.contains("env=v1,12345,d\n") && !out.contains("env=v1,12345,d\nenv"), "{out}");
    assert!(out.contains("2,2,"), "every task reads srun's input: {out}");
    assert!(out.contains("1: one\n") && !out.contains("0: one"), "{out}");
    assert!(out.contains("rc=4"), "the highest exit code: {out}");
    assert!(out.contains("sig=137"), "128 + the signal: {out}");
    assert!(out.contains("file=to-file"), "{out}");
    assert!(out.contains("closed=0"), "{out}");
    // Outside an allocation: srun makes one for its step; salloc runs a command in one.
    let o = c.run("srun", &["-N2", "--ntasks-per-node=1", "-l", "printenv", "SLURMD_NODENAME"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && text.contains("0: node1") && text.contains("1: node2"), "{o:?}");
    let o = c.run("srun", &["-n1", "bash", "-c", "exit 5"]);
    assert_eq!(o.status.code(), Some(5), "{o:?}");
    let o = c.run("salloc", &["-N2", "bash", "-c", "srun hostname | wc -l; echo $SLURM_JOB_NUM_NODES $SLURM_JOB_NODELIST; exit 3"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "{o:?}");
    assert!(text.contains("2\n2 node[1-2]"), "{text}");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("salloc: Granted job allocation") && e.contains("salloc: Relinquishing job allocation"), "{e}");
    let alloc: u64 = e.split("Granted job allocation ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap().parse().unwrap();
    c.wait_state(alloc, &["FAILED"], 30);
    let acct = c.ok("sacct", &["-j", &alloc.to_string(), "-X", "-P", "-n", "--format=JobID,State,ExitCode"]);
    assert!(acct.contains(&format!("{alloc}|FAILED|3:0")), "{acct}");
    // Signals sent to srun reach every task (SIGUSR1 passed on, SIGTERM too: each task's trap
    // leaves a flag file), and srun ends with its tasks.
    let mut srun = Command::new(c.shims.join("srun"))
        .args(["-N2", "--ntasks-per-node=1", "bash", "-c"])
        .arg(
            "trap 'touch usr1_$SLURM_PROCID' USR1; trap 'touch term_$SLURM_PROCID; exit 7' TERM; \
             touch ready_$SLURM_PROCID; while true; do sleep 0.1; done",
        )
        .current_dir(&c.work)
        .env("TANDEM_SERVER", format!("unix://{}", c.sock))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let wait_files = |prefix: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(0..2).all(|r| c.work.join(format!("{prefix}_{r}")).exists()) {
            assert!(Instant::now() < deadline, "no {prefix}_0 and {prefix}_1 from the tasks");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_files("ready");
    let pid = srun.id().to_string();
    Command::new("kill").args(["-USR1", &pid]).status().unwrap();
    wait_files("usr1");
    assert!(srun.try_wait().unwrap().is_none(), "SIGUSR1 does not end srun");
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    wait_files("term");
    let deadline = Instant::now() + Duration::from_secs(30);
    let st = loop {
        if let Some(st) = srun.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "srun did not end after its tasks");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut e = String::new();
    srun.stderr.as_mut().unwrap().read_to_string(&mut e).unwrap();
    assert_eq!(st.code(), Some(7), "the tasks' exit code: {e}");
    // Bad values get srun's errors and nothing runs.
    for (args, want) in [
        (&["--input=99", "-n1", "true"][..], "--input=99"),
        (&["--mpi=pmix3", "-n1", "true"][..], "--mpi=pmix3: not available"),
        (&["--input=", "-n1", "true"][..], "--input"),
    ] {
        let o = c.run("srun", args);
        assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains(want), "{args:?}: {o:?}");
    }
}

#[test]
fn parallel_steps_share_their_allocation_as_slurms() {
    // Slurm's step allocation inside a job: a default step takes every CPU of the job on its
    // nodes, so a parallel one waits ("Requested nodes are busy") unless --overlap; --exact
    // and -c take what they ask; --gpus* and --mem hold their own; -t ends the step alone.
    let c = Cluster::new("steps", 1, Some("h100:4"), 30);
    let cg = !c.log("node1").contains("no writable cgroup memory controller");
    // Each wait on another step's flag is bounded (timeout 20): the outcome, not the time, is
    // what is checked.
    let waitfor = |f: &str, tag: &str| {
        format!("touch {tag}.started; timeout 20 bash -c \"until [ -e {f} ]; do sleep 0.1; done\" && echo {tag}-saw || echo {tag}-timeout")
    };
    // The script starts a step in the background, waits until it runs (its .started file),
    // then starts the next: the order of the steps is fixed, whatever the machine's speed.
    let started = |tag: &str| format!("until [ -e {tag}.started ]; do sleep 0.1; done; ");
    let s = c.script(
        "res.sh",
        &format!(
            "#!/bin/bash\n#SBATCH -n4\n#SBATCH --mem=1G\n#SBATCH --gpus-per-node=4\n#SBATCH -o res.out\n\
             srun -n1 --overlap -t 1 bash -c 'touch limit.started; trap \"echo got-term; exit 7\" TERM; sleep 300 & wait' > limit.txt & lim=$!\n\
             {s_limit}srun -n1 bash -c '{busy}' & p=$!\n\
             {s_busy}srun -n1 touch busy.flag 2> busy.err; wait $p\n\
             srun -n1 bash -c '{over}' & p=$!\n\
             {s_over}srun -n1 --overlap touch over.flag; wait $p\n\
             srun -n1 --exact bash -c '{exact}; echo cpus=$SLURM_CPUS_ON_NODE' & p=$!\n\
             srun -n1 --exclusive touch exact.flag; wait $p\n\
             srun -n1 -c2 bash -c 'echo c2=$SLURM_CPUS_PER_TASK,$SLURM_CPUS_ON_NODE'\n\
             srun -n1 --exact --gpus=2 bash -c 'echo g1=$CUDA_VISIBLE_DEVICES; {gpu}' & p=$!\n\
             {s_gpu}srun -n1 --exact --gpus=2 bash -c 'echo g2=$CUDA_VISIBLE_DEVICES; touch gpu.flag'; wait $p\n\
             srun -n2 --exact --gpus-per-task=1 -l printenv CUDA_VISIBLE_DEVICES | sort\n\
             srun -n1 --mem=2G true 2> mem.err; echo bigmem=$?\n\
             srun -n1 --gpus=8 true 2> gpus.err; echo biggpus=$?\n\
             srun -n5 true 2> cpus.err; echo bigcpus=$?\n\
             srun -n5 -O true; echo overcommit=$?\n\
             srun -n1 --cpu_bind=verbose,map_cpu:0 grep Cpus_allowed_list /proc/self/status | tr -d '\\t'\n\
             srun -n1 --cpu-bind=map_cpu:1023 true 2> bind.err; echo badbind=$?\n\
             {mem}\
             wait $lim; echo limit=$?\n",
            s_limit = started("limit"),
            busy = waitfor("busy.flag", "busy"),
            s_busy = started("busy"),
            over = waitfor("over.flag", "over"),
            s_over = started("over"),
            exact = waitfor("exact.flag", "exact"),
            gpu = waitfor("gpu.flag", "gpu"),
            s_gpu = started("gpu"),
            mem = if cg { "srun -n1 --mem=32M tail /dev/zero; echo stepoom=$?\n" } else { "" },
        ),
    );
    let id = c.sbatch(&[&s]);
    c.wait_state(id, &["COMPLETED", "FAILED"], 180);
    let out = std::fs::read_to_string(c.work.join("res.out")).unwrap();
    let err = |f: &str| std::fs::read_to_string(c.work.join(f)).unwrap_or_default();
    // A default step holds every CPU: the second waited for the first to end.
    assert!(out.contains("busy-timeout"), "{out}");
    assert!(err("busy.err").contains("step creation temporarily disabled, retrying (Requested nodes are busy)"), "{}", err("busy.err"));
    assert!(err("busy.err").contains(&format!("srun: Step created for job {id}")), "{}", err("busy.err"));
    // --overlap and --exact/--exclusive steps run beside it.
    assert!(out.contains("over-saw") && out.contains("exact-saw") && out.contains("cpus=1"), "{out}");
    assert!(out.contains("c2=2,2"), "{out}");
    // GPUs: distinct per parallel step, one per task with --gpus-per-task.
    assert!(out.contains("gpu-saw") && out.contains("g1=0,1") && out.contains("g2=2,3"), "{out}");
    assert!(out.contains("0: 0\n1: 1\n"), "{out}");
    // Never possible in this job: refused at once with Slurm's words.
    assert!(out.contains("bigmem=1") && err("mem.err").contains("Memory required by task is not available"), "{out}");
    assert!(out.contains("biggpus=1") && err("gpus.err").contains("Invalid generic resource (gres) specification"), "{out}");
    assert!(out.contains("bigcpus=1") && err("cpus.err").contains("More processors requested than permitted"), "{out}");
    assert!(out.contains("overcommit=0"), "{out}");
    // --cpu-bind=map_cpu binds the task; a CPU the node lacks fails its launch, saying why.
    assert!(out.contains("Cpus_allowed_list:0\n"), "{out}");
    assert!(!out.contains("badbind=0"), "{out}");
    if cg {
        // The step's own memory limit: its cgroup inside the job's; the job runs on.
        assert!(out.contains("stepoom=137"), "{out}");
    }
    // srun -t 1: SIGTERM at the step's limit; the job goes on, the step is TIMEOUT.
    assert!(err("limit.txt").contains("got-term") && out.contains("limit=7"), "{out}\n{}", err("limit.txt"));
    let acct = c.ok("sacct", &["-j", &id.to_string(), "-P", "-n", "--format=JobID,State,AllocCPUS"]);
    assert!(acct.contains(&format!("{id}.0|TIMEOUT|4")), "{acct}");
    assert!(acct.contains(&format!("{id}|COMPLETED|4")), "{acct}");
    assert!(acct.lines().any(|l| l.ends_with("|COMPLETED|1")), "an --exact step holds one CPU: {acct}");
}

#[test]
fn scripts_with_the_options_slurm_users_write_submit_and_run() {
    // Every option that used to reject a whole script, in one script (Slurm 25.11's meanings:
    // applied where Tandem can, else recorded and shown).
    let c = Cluster::new("opts", 1, Some("h100:4"), 30);
    let s = c.script(
        "all.sh",
        "#!/bin/bash\n#SBATCH --mail-type=END,FAIL --mail-user=ann@example.org --wckey=proj-w --comment=note\n\
         #SBATCH --gpus-per-node=2 --mem-per-gpu=256M --cpus-per-gpu=1\n\
         #SBATCH --hint=nomultithread --distribution=block --get-user-env --threads-per-core=1 -v -Q -t 0\n\
         #SBATCH -o all.out\necho cpus=$SLURM_CPUS_ON_NODE mem=$SLURM_MEM_PER_NODE gpus=$CUDA_VISIBLE_DEVICES\n",
    );
    let o = c.run("sbatch", &[&s]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "", "-Q: no job id printed");
    assert!(String::from_utf8_lossy(&o.stderr).contains("mail-user           : ann@example.org"), "-v says what it parsed: {o:?}");
    let id: u64 = c
        .ok("squeue", &["-h", "-o", "%i"])
        .lines()
        .chain(c.ok("sacct", &["-n", "-X", "-P", "--format=JobID"]).lines())
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    c.wait_state(id, &["COMPLETED"], 60);
    let out = std::fs::read_to_string(c.work.join("all.out")).unwrap();
    assert!(out.contains("cpus=2 mem=512 gpus=0,1"), "per-GPU memory and CPUs: {out}");
    let show = c.ok("scontrol", &["show", "job", &id.to_string()]);
    assert!(show.contains("Comment=note") && show.contains("WCKey=proj-w") && show.contains("MailUser=ann@example.org"), "{show}");
    assert!(show.contains("MailType=END,FAIL") && show.contains("Hint=nomultithread") && show.contains("TimeLimit=UNLIMITED"), "{show}");
    // Input variables, the command line winning; a bad one is named and nothing is stored.
    let o = c.run_env("sbatch", &["--parsable", "--wrap", "true"], &[("SBATCH_PARTITION", "nosuch")]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("invalid partition specified: nosuch"), "{o:?}");
    let o = c.run_env("sbatch", &["--parsable", "--wrap", "true"], &[("SBATCH_TIMELIMIT", "soon")]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("SBATCH_TIMELIMIT: invalid time limit"), "{o:?}");
    let o = c.run_env("sbatch", &["--parsable", "-J", "cli", "--wrap", "true"], &[("SBATCH_JOB_NAME", "env"), ("SBATCH_COMMENT", "x")]);
    let named: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    assert_eq!(c.job(named)["JobName"], "cli");
    let o = c.run_env("salloc", &["true"], &[("SALLOC_PARTITION", "nosuch")]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("invalid partition specified: nosuch"), "{o:?}");
    // srun's own input variables (here -l and -t), and a bad one named.
    let o = c.run_env("srun", &["-n1", "echo", "hi"], &[("SLURM_LABELIO", "1")]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "0: hi\n", "{o:?}");
    let o = c.run_env("srun", &["-n1", "true"], &[("SLURM_TIMELIMIT", "soon")]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("SLURM_TIMELIMIT: invalid time limit"), "{o:?}");
    // No such reservation: asking for one is refused with Slurm's words.
    let o = c.run("sbatch", &["--reservation=maint", "--wrap", "true"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("Requested reservation is invalid"), "{o:?}");
    let o = c.run("sbatch", &["--mail-type=SOMETIMES", "--wrap", "true"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("--mail-type=SOMETIMES invalid"), "{o:?}");
    // --get-user-env: the login environment (here a profile.d file's variable, which a login
    // shell reads), with the submitted variables over it.
    let mark = format!("/etc/profile.d/zz-tandem-test-{}.sh", std::process::id());
    if nix::unistd::geteuid().is_root() && std::path::Path::new("/etc/profile.d").is_dir() {
        std::fs::write(&mark, "export TANDEM_LOGIN_MARK=from-login\nexport TANDEM_LOGIN_BOTH=from-login\n").unwrap();
        let env = [("TANDEM_LOGIN_BOTH", "from-job")];
        let run = |extra: &[&str]| {
            let mut a = vec!["--parsable", "-o", "login-%j.out"];
            a.extend_from_slice(extra);
            a.extend(["--wrap", "echo mark=$TANDEM_LOGIN_MARK both=$TANDEM_LOGIN_BOTH home=$HOME"]);
            let o = c.run_env("sbatch", &a, &env);
            let id: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap_or_else(|_| panic!("{o:?}"));
            c.wait_state(id, &["COMPLETED"], 60);
            std::fs::read_to_string(c.work.join(format!("login-{id}.out"))).unwrap()
        };
        let with = run(&["--get-user-env"]);
        let without = run(&[]);
        let _ = std::fs::remove_file(&mark);
        assert_eq!(with, "mark=from-login both=from-job home=/root\n", "the job's variables win");
        assert!(without.starts_with("mark= both=from-job"), "{without}");
    }
    // An array's tasks write slurm-%A_%a.out by default.
    let a = c.sbatch(&["--array=1-2", "--wrap", "echo task $SLURM_ARRAY_TASK_ID"]);
    for t in [1, 2] {
        c.wait_state(a + t - 1, &["COMPLETED"], 60);
        let f = c.work.join(format!("slurm-{a}_{t}.out"));
        assert_eq!(std::fs::read_to_string(&f).unwrap_or_default(), format!("task {t}\n"), "{}", f.display());
    }
}

#[test]
fn sstat_shows_a_running_steps_memory_and_cpu_and_sacct_keeps_them() {
    let c = Cluster::new("sstat", 1, None, 30);
    // Two tasks each hold 64 MiB and spin until the test has seen them, then a flag ends them.
    let s = c.script(
        "use.sh",
        "#!/bin/bash\n#SBATCH -n2 -o use.out\n\
         srun -n2 python3 -c 'import os,time\nb=bytearray(64<<20)\nfor i in range(0,len(b),4096): b[i]=1\nt=time.time()\nwhile not os.path.exists(\"done.flag\") and time.time()-t<60: pass\n'\n",
    );
    let id = c.sbatch(&[&s]);
    c.wait_state(id, &["RUNNING"], 30);
    let deadline = Instant::now() + Duration::from_secs(30);
    let row = loop {
        let o = c.run("sstat", &["-j", &format!("{id}.0"), "-n", "-P", "-o", "JobID,MaxRSS,MaxRSSTask,AveRSS,NTasks,TotalCPU"]);
        let text = String::from_utf8_lossy(&o.stdout).trim().to_string();
        let f: Vec<String> = text.split('|').map(str::to_string).collect();
        if f.len() == 6 && f[1].trim_end_matches('K').parse::<u64>().is_ok_and(|k| k >= 64 << 10) {
            break f;
        }
        assert!(Instant::now() < deadline, "sstat never showed 64 MiB: {o:?}");
        std::thread::sleep(Duration::from_millis(300));
    };
    assert_eq!((row[0].as_str(), row[4].as_str()), (format!("{id}.0").as_str(), "2"), "{row:?}");
    assert!(row[3].trim_end_matches('K').parse::<u64>().unwrap() >= 64 << 10, "{row:?}");
    std::fs::write(c.work.join("done.flag"), "").unwrap();
    c.wait_state(id, &["COMPLETED"], 60);
    let acct = c.ok("sacct", &["-j", &id.to_string(), "-P", "-n", "--format=JobID,MaxRSS,TotalCPU"]);
    let step = acct.lines().find(|l| l.starts_with(&format!("{id}.0|"))).unwrap_or_else(|| panic!("{acct}"));
    let f: Vec<&str> = step.split('|').collect();
    assert!(f[1].trim_end_matches('K').parse::<u64>().unwrap() >= 64 << 10 && !f[2].is_empty(), "{acct}");
    // Bad requests.
    for (args, want) in
        [(&["-j", "x"][..], "Invalid job id"), (&[][..], "you must specify a job"), (&["-j", &id.to_string()][..], "not running")]
    {
        let o = c.run("sstat", args);
        assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains(want), "{args:?}: {o:?}");
    }
}

/// `srun cat` with megabytes of input: its input and output flow at once (the agent reads the
/// task's output and writes its input without either waiting on the other), every byte back in
/// order, and the job it runs in is untouched.
#[test]
fn srun_streams_input_and_output_at_once() {
    let c = Cluster::new("srun-cat", 1, None, 30);
    let id = c.sbatch(&["--wrap", "sleep 120"]);
    c.wait_state(id, &["RUNNING"], 30);
    let input: Vec<u8> = (0..(8u32 << 20)).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    let file = c.work.join("cat-input");
    std::fs::write(&file, &input).unwrap();
    let o = Command::new(c.shims.join("srun"))
        .args([&format!("--jobid={id}"), "--overlap", "cat"])
        .current_dir(&c.work)
        .env("TANDEM_SERVER", format!("unix://{}", c.sock))
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
        .unwrap();
    assert!(o.status.success(), "srun cat: {}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stdout == input, "srun cat gave back {} bytes of {}, or not in order", o.stdout.len(), input.len());
    assert_eq!(c.wait_state(id, &["RUNNING"], 5)["JobState"], "RUNNING", "the job runs on");
    let _ = c.run("scancel", &[&id.to_string()]);
}

/// `sattach` started in the background, its output collected as it comes.
struct Attached {
    child: std::process::Child,
    out: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Attached {
    fn start(c: &Cluster, args: &[&str], stdin: bool) -> Attached {
        let path = format!("{}:{}", c.shims.display(), std::env::var("PATH").unwrap_or_default());
        let mut child = Command::new(c.shims.join("sattach"))
            .args(args)
            .current_dir(&c.work)
            .env("TANDEM_SERVER", format!("unix://{}", c.sock))
            .env("PATH", path)
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        for r in [Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>, Box::new(child.stderr.take().unwrap())] {
            let o = out.clone();
            std::thread::spawn(move || {
                let mut r = std::io::BufReader::new(r);
                let mut line = String::new();
                while std::io::BufRead::read_line(&mut r, &mut line).is_ok_and(|n| n > 0) {
                    o.lock().unwrap().push_str(&line);
                    line.clear();
                }
            });
        }
        Attached { child, out }
    }

    fn text(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    fn wait_for(&self, want: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !want.iter().all(|w| self.text().contains(w)) {
            assert!(Instant::now() < deadline, "sattach never printed {want:?}: {:?}", self.text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn sattach_shows_a_running_steps_output_and_passes_input_to_its_owner_only() {
    let c = Cluster::new("sattach", 2, None, 30);
    // Two tasks say hello, wait for a flag, say more; task 0 then reads a line. srun's own
    // input stays open (and empty) so that the line can only come from sattach.
    let s = c.script(
        "att.sh",
        "#!/bin/bash\n#SBATCH -N2 -n2 -o att.out\n\
         srun -l bash -c 'echo early-$SLURM_PROCID; while [ ! -e go.flag ]; do sleep 0.1; done; echo late-$SLURM_PROCID; \
         if [ $SLURM_PROCID = 0 ]; then read -t 30 x; echo got-$x; fi; exit 3' < <(sleep 60)\n",
    );
    let id = c.sbatch(&[&s]);
    c.wait_state(id, &["RUNNING"], 30);
    let step = format!("{id}.0");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(c.work.join("att.out")).unwrap_or_default().contains("early-1") {
        assert!(Instant::now() < deadline, "the step never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Another user may not attach, nor see the layout of a job not theirs.
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(c.shims.join("sattach"))
        .arg(&step)
        .env("TANDEM_SERVER", format!("unix://{}", c.sock))
        .current_dir("/")
        .output()
        .unwrap();
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("permission denied"), "{o:?}");
    let layout = c.ok("sattach", &["--layout", &step]);
    assert!(layout.starts_with("Job step layout:\n\t2 tasks, 2 nodes (node[1-2])\n"), "{layout}");
    assert!(layout.contains("\tNode 1 (node2), 1 task(s): 1 \n"), "{layout}");
    // The owner: what was said before attaching (the cache), then what comes; input to task 0.
    let a = Attached::start(&c, &["-l", "--input-filter=0", &step], true);
    let b = Attached::start(&c, &["-l", "--output-filter=1", &step], false);
    a.wait_for(&["0: early-0", "1: early-1"]);
    b.wait_for(&["1: early-1"]);
    let mut a = a;
    std::io::Write::write_all(a.child.stdin.as_mut().unwrap(), b"hello\n").unwrap();
    std::fs::write(c.work.join("go.flag"), "").unwrap();
    a.wait_for(&["0: late-0", "1: late-1", "0: got-hello"]);
    let code = a.child.wait().unwrap();
    assert_eq!(code.code(), Some(3), "sattach ends with the step's exit code: {}", a.text());
    let mut b = b;
    b.child.wait().unwrap();
    b.wait_for(&["1: late-1"]);
    assert!(!b.text().contains("0: "), "--output-filter=1 shows task 1 only: {}", b.text());
    c.wait_state(id, &["COMPLETED", "FAILED"], 60);
    // srun got everything too.
    let out = std::fs::read_to_string(c.work.join("att.out")).unwrap();
    assert!(out.contains("0: got-hello") && out.contains("1: late-1"), "{out}");
    // A finished step, a batch step, a bad id: clear errors.
    for (args, want) in [(vec![step.as_str()], "already finished"), (vec!["12"], "want JOBID.STEPID"), (vec!["999999.0"], "invalid job id")]
    {
        let o = c.run("sattach", &args);
        assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains(want), "{args:?}: {o:?}");
    }
}

#[test]
fn sbcast_copies_a_file_to_the_jobs_nodes_as_the_user() {
    let c = Cluster::new("sbcast", 2, None, 30);
    // One node: a second copy does not replace the file unless -f; -p keeps mode and time.
    let one = c.script(
        "one.sh",
        "#!/bin/bash\n#SBATCH -N1 -o one.out\nd=/tmp/tandem-sbcast-$SLURM_JOB_ID\necho payload > src.txt; chmod 640 src.txt\n\
         sbcast src.txt $d; echo first=$?\nsbcast src.txt $d 2> clobber.err; echo again=$?\n\
         echo newer > src.txt; sbcast -f -p src.txt $d; echo force=$?\necho content=$(cat $d) mode=$(stat -c %a $d)\n\
         sbcast nosuch.txt $d 2> missing.err; echo missing=$?\nrm -f $d\n",
    );
    let id = c.sbatch(&[&one]);
    c.wait_state(id, &["COMPLETED", "FAILED"], 60);
    let out = std::fs::read_to_string(c.work.join("one.out")).unwrap();
    assert!(out.contains("first=0\nagain=1\nforce=0\ncontent=newer mode=640\nmissing=1\n"), "{out}");
    assert!(std::fs::read_to_string(c.work.join("missing.err")).unwrap().contains("can't open nosuch.txt"));
    // Two nodes: each has it (on this one machine they share /tmp, so -f).
    let two = c.script(
        "two.sh",
        "#!/bin/bash\n#SBATCH -N2 -o two.out\nd=/tmp/tandem-sbcast-$SLURM_JOB_ID\necho hello > src.txt\n\
         sbcast -f src.txt $d; echo copied=$?\nsrun -N2 --ntasks-per-node=1 -l cat $d | sort\nrm -f $d\n",
    );
    let id = c.sbatch(&[&two]);
    c.wait_state(id, &["COMPLETED", "FAILED"], 60);
    let out = std::fs::read_to_string(c.work.join("two.out")).unwrap();
    assert!(out.contains("copied=0\n0: hello\n1: hello\n"), "{out}");
    let acct = c.ok("sacct", &["-j", &id.to_string(), "-P", "-n", "--format=JobID,JobName,State"]);
    assert!(acct.contains(&format!("{id}.0|sbcast|COMPLETED")), "{acct}");
    // Outside an allocation it says what it needs.
    let o = c.run("sbcast", &["a", "b"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("inside an allocation"), "{o:?}");
}

#[test]
fn sshare_shows_each_accounts_shares_usage_and_factor() {
    let cfg = "[[account]]\nname = \"ml\"\nshares = 3\n[[account]]\nname = \"web\"\nshares = 1\n";
    let c = Cluster::with_config("sshare", 1, None, 30, Some(cfg));
    let id = c.sbatch(&["-A", "ml", "-c2", "--wrap", "sleep 1"]);
    c.wait_state(id, &["COMPLETED"], 60);
    let p = c.ok("sshare", &["-P"]);
    let mut lines = p.lines();
    assert_eq!(lines.next(), Some("Account|User|RawShares|NormShares|RawUsage|EffectvUsage|FairShare"), "{p}");
    let row = |a: &str| {
        p.lines()
            .find(|l| l.starts_with(&format!("{a}|")))
            .unwrap_or_else(|| panic!("no {a} in {p}"))
            .split('|')
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let (ml, web) = (row("ml"), row("web"));
    assert_eq!((ml[2].as_str(), ml[3].as_str(), ml[5].as_str()), ("3", "0.750000", "1.000000"), "{p}");
    assert!(ml[4].parse::<f64>().unwrap() > 0.0, "its job's usage: {p}");
    assert_eq!((web[2].as_str(), web[4].as_str(), web[6].as_str()), ("1", "0", "1.000000"), "no usage, full factor: {p}");
    assert!(ml[6].parse::<f64>().unwrap() < 1.0, "used more than nothing: {p}");
    // The usual columns, -h, -A, and a bad option.
    let text = c.ok("sshare", &[]);
    assert!(text.starts_with("             Account       User  RawShares  NormShares    RawUsage  EffectvUsage  FairShare\n"), "{text}");
    assert_eq!(c.ok("sshare", &["-h", "-P", "-A", "web"]).lines().count(), 1);
    let o = c.run("sshare", &["--frobnicate"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("unrecognized option '--frobnicate'"), "{o:?}");
    // sreport over the last hour: the job's CPU-seconds (2 CPUs, at least 1 s), of 4 CPUs x 3600 s.
    let start = "start=now-1hour";
    let end = "end=now";
    let r = c.ok("sreport", &["-P", "-t", "seconds", "cluster", "utilization", start, end]);
    let row: Vec<&str> = r.lines().last().unwrap().split('|').collect();
    assert_eq!(r.lines().nth(4), Some("Cluster|Allocated|Down|PLND Down|Idle|Planned|Reported"), "{r}");
    assert!(r.contains("Usage reported in CPU Seconds"), "{r}");
    let (alloc, idle, reported): (u64, u64, u64) = (row[1].parse().unwrap(), row[4].parse().unwrap(), row[6].parse().unwrap());
    assert!(alloc >= 2 && alloc + idle == reported && (14_390..=14_410).contains(&reported), "{r}");
    let top = c.ok("sreport", &["-n", "-P", "-t", "seconds", "user", "top", start, end]);
    let row: Vec<&str> = top.trim().split('|').collect();
    assert_eq!((row[1], row[3]), ("root", "ml"), "{top}");
    assert_eq!(row[4].parse::<u64>().unwrap(), alloc, "{top}");
    // Conditions as Slurm's sreport reads them: any case, abbreviated; users= and accounts=
    // select whose jobs count.
    let again = c.ok("sreport", &["-n", "-P", "-t", "seconds", "user", "top", "S=now-1hour", "E=now", "TOPC=1", "users=root", "acct=ml"]);
    assert_eq!(again, top);
    assert_eq!(c.ok("sreport", &["-n", "-P", "user", "top", start, end, "users=nobody"]), "");
    for (args, want) in [
        (&["cluster", "utilization", "users=root"][..], " Unknown condition: users=root"),
        (&["user", "top", "bogus=1"][..], " Unknown condition: bogus=1"),
    ] {
        let o = c.run("sreport", args);
        assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).starts_with(want), "{args:?}: {o:?}");
    }
    let text = c.ok("sreport", &["cluster", "utilization"]);
    assert!(text.contains("  Cluster    Allocated       Down  PLND Down         Idle   Planned     Reported\n"), "{text}");
    for (args, want) in [
        (&["cluster", "bogus"][..], "unknown report"),
        (&["-t", "days", "cluster", "utilization"][..], "unknown time format"),
        (&["cluster", "utilization", "start=soon"][..], "Invalid time specification"),
        (&["cluster", "utilization", "start=now", "end=now-1hour"][..], "is after end time"),
    ] {
        let o = c.run("sreport", args);
        assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains(want), "{args:?}: {o:?}");
    }
}

#[test]
fn output_files_are_emptied_at_the_first_start_unless_open_mode_is_append() {
    let c = Cluster::new("openmode", 1, None, 30);
    std::fs::write(c.work.join("t.out"), "old\n").unwrap();
    std::fs::write(c.work.join("a.out"), "old\n").unwrap();
    Command::new("chmod").arg("a+rw").arg(c.work.join("t.out")).arg(c.work.join("a.out")).status().unwrap();
    let t = c.sbatch(&["-o", "t.out", "--wrap", "echo new"]);
    let a = c.sbatch(&["-o", "a.out", "--open-mode=append", "--wrap", "echo new"]);
    c.wait_state(t, &["COMPLETED"], 30);
    c.wait_state(a, &["COMPLETED"], 30);
    assert_eq!(std::fs::read_to_string(c.work.join("t.out")).unwrap(), "new\n");
    assert_eq!(std::fs::read_to_string(c.work.join("a.out")).unwrap(), "old\nnew\n");
    let o = c.run("sbatch", &["--open-mode=sometimes", "--wrap", "true"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("append or truncate"));
    // sbatch --wait returns when the job ends, with its exit code (an array: the highest).
    let o = c.run("sbatch", &["-W", "-o", "/dev/null", "--wrap", "sleep 1; exit 7"]);
    assert_eq!(o.status.code(), Some(7), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("Submitted batch job "));
    let o = c.run("sbatch", &["--wait", "--array=0-2", "-o", "/dev/null", "--wrap", "exit $SLURM_ARRAY_TASK_ID"]);
    assert_eq!(o.status.code(), Some(2));
    let o = c.run("sbatch", &["--wait", "--parsable", "-o", "/dev/null", "--wrap", "true"]);
    assert_eq!(o.status.code(), Some(0));
    // A script on standard input (no file, no --wrap), named "sbatch" as Slurm names it.
    let mut ch = Command::new(c.shims.join("sbatch"))
        .args(["--parsable", "-W"])
        .current_dir(&c.work)
        .env("TANDEM_SERVER", format!("unix://{}", c.sock))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    ch.stdin.take().unwrap().write_all(b"#!/bin/sh\n#SBATCH -o piped.out\necho from stdin\n").unwrap();
    let o = ch.wait_with_output().unwrap();
    assert!(o.status.success());
    let id: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    assert_eq!(c.job(id)["JobName"], "sbatch");
    assert_eq!(std::fs::read_to_string(c.work.join("piped.out")).unwrap(), "from stdin\n");
    let o = c.run("sbatch", &[]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("no batch script"));
}

#[test]
fn arrays_dependencies_and_output_patterns() {
    let c = Cluster::new("array", 2, None, 30);
    let arr =
        c.sbatch(&["--array=1-3%2", "-J", "arr", "-o", "out_%A_%a.txt", "--wrap", "echo task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID"]);
    // A held array is answered once its one record is durable; the next read sees every task.
    let held = c.sbatch(&["--array=0-499", "--hold", "-o", "/dev/null", "--wrap", "true"]);
    let q = c.ok("squeue", &["-h", "-o", "%i", "-j", &held.to_string(), "-r"]);
    assert_eq!(q.lines().filter(|l| l.trim().starts_with(&format!("{held}_"))).count(), 500, "{q}");
    // Without -r the pending tasks are one line, as Slurm's.
    assert_eq!(c.ok("squeue", &["-h", "-o", "%i", "-j", &held.to_string()]).trim(), format!("{held}_[0-499]"));
    c.ok("scancel", &[&held.to_string()]);
    let after = c.sbatch(&["--dependency", &format!("afterok:{arr}"), "-o", "after_%j.txt", "--wrap", "cat out_*.txt | sort"]);
    let fail = c.sbatch(&["--wrap", "exit 3"]);
    let notok = c.sbatch(&["--dependency", &format!("afternotok:{fail}"), "--wrap", "echo rescued"]);
    let never = c.sbatch(&["--dependency", &format!("afterok:{fail}"), "--wrap", "echo never"]);
    c.wait_state(after, &["COMPLETED"], 60);
    for k in 1..=3 {
        let f = std::fs::read_to_string(c.work.join(format!("out_{arr}_{k}.txt"))).unwrap();
        assert_eq!(f.trim(), format!("task {k} of {arr}"));
    }
    let merged = std::fs::read_to_string(c.work.join(format!("after_{after}.txt"))).unwrap();
    assert_eq!(merged.lines().count(), 3, "{merged}");
    let f = c.wait_state(fail, &["FAILED"], 30);
    // sacct: an array's id selects all its tasks; -j repeats and takes lists (submitit's
    // `sacct -j A -j B`), a step selects its job; a bad id is refused.
    let rows = |args: &[&str]| -> Vec<String> {
        let mut a = vec!["-X", "-n", "-P", "--format=JobID"];
        a.extend_from_slice(args);
        let mut v: Vec<String> = c.ok("sacct", &a).lines().map(str::to_string).collect();
        v.sort();
        v
    };
    let tasks: Vec<String> = (1..=3).map(|k| format!("{arr}_{k}")).collect();
    assert_eq!(rows(&["-j", &arr.to_string()]), tasks);
    let mut two = vec![after.to_string(), format!("{arr}_2")];
    two.sort();
    assert_eq!(rows(&["-j", &after.to_string(), "-j", &format!("{arr}_2")]), two);
    assert_eq!(rows(&["-j", &format!("{after},{arr}_2")]), two);
    assert_eq!(rows(&["-j", &format!("{after}.batch")]), vec![after.to_string()]);
    let bad = c.run("sacct", &["-j", "12;rm"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("Invalid job id"));
    assert_eq!(f["ExitCode"], "3:0");
    c.wait_state(notok, &["COMPLETED"], 30);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let j = c.job(never);
        if j["Reason"] == "DependencyNeverSatisfied" {
            assert_eq!(j["JobState"], "PENDING");
            break;
        }
        assert!(Instant::now() < deadline, "{j:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let q = c.ok("squeue", &["-h", "-o", "%i %t %r"]);
    assert!(q.contains(&format!("{never} PD DependencyNeverSatisfied")), "{q}");
}

#[test]
fn cancel_and_time_limit_with_signal() {
    let c = Cluster::new("limits", 1, None, 30);
    let sleeper = c.sbatch(&["--wrap", "sleep 300"]);
    c.wait_state(sleeper, &["RUNNING"], 30);
    c.ok("scancel", &[&sleeper.to_string()]);
    c.wait_state(sleeper, &["CANCELLED"], 30);
    // -t 1 (one minute, Slurm's resolution) with USR1 50 s before the end: USR1 at ~10 s,
    // SIGTERM at 60 s, SIGKILL 2 s later (the test controller's KillWait).
    let s = c.script(
        "limit.sh",
        "#!/bin/bash\n#SBATCH -t 1\n#SBATCH --signal=B:USR1@50\n#SBATCH -o limit.out\n\
         trap 'echo got USR1' USR1\ntrap 'echo got TERM' TERM\necho started\nfor i in $(seq 1 200); do sleep 1; done\n",
    );
    let id = c.sbatch(&[&s]);
    c.wait_state(id, &["RUNNING"], 30);
    c.wait_state(id, &["TIMEOUT"], 120);
    let out = std::fs::read_to_string(c.work.join("limit.out")).unwrap();
    assert!(out.contains("started") && out.contains("got USR1") && out.contains("got TERM"), "{out}");
    let acct = c.ok("sacct", &["-j", &id.to_string(), "-X", "-P", "--format=State"]);
    assert!(acct.contains("TIMEOUT"), "{acct}");
}

#[test]
fn bad_input_gets_clear_errors_and_stores_nothing() {
    let c = Cluster::new("bad", 1, Some("h100:4"), 30);
    let bad = c.script("bad.sh", "#!/bin/sh\n#SBATCH --time=soon\necho hi\n");
    let o = c.run("sbatch", &[&bad]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("sbatch: error: script line 2: invalid time limit \"soon\""), "{o:?}");
    let o = c.run("sbatch", &["--no-such-option", "--wrap", "true"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("unrecognized option '--no-such-option'"), "{o:?}");
    let o = c.run("sbatch", &["--gpus-per-node=8", "--wrap", "true"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("requested node configuration is not available"), "{o:?}");
    let o = c.run("sbatch", &["-p", "nope", "--wrap", "true"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("invalid partition specified: nope"), "{o:?}");
    let o = c.run("sbatch", &["--dependency=afterok:4242", "--wrap", "true"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("dependency"), "{o:?}");
    let o = c.run("sbatch", &["--test-only", "--gpus-per-node=8", "--wrap", "true"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("not available"), "{o:?}");
    let o = c.run("sbatch", &["--test-only", "--wrap", "true"]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stderr).contains("would be accepted"), "{o:?}");
    let noshebang = c.script("plain.sh", "echo hi\n");
    assert!(String::from_utf8_lossy(&c.run("sbatch", &[&noshebang]).stderr).contains("#!"));
    assert_eq!(c.ok("squeue", &["-h"]).trim(), "", "nothing was stored");
    assert_eq!(c.ok("sacct", &["-n"]).trim(), "");
    let body = "{\"batch\": 12";
    let (status, text) = raw_http(
        &c.sock,
        &format!(
            "POST /v1/jobs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("malformed request"), "{text}");
    let (status, _) = raw_http(&c.sock, "GET /openapi.json HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    assert_eq!(status, 200);
    // Over TCP (TLS, verified against the cluster CA) there is no user identity without a
    // token: state changes are refused.
    let ca = c.dir.join("controller/ca.pem").display().to_string();
    let o = Command::new("curl")
        // HTTP/1.1: curl 7.88 over HTTP/2 reports a reply sent before its body was read as an error.
        .args(["-s", "--http1.1", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", &ca, "-X", "POST", "-d", "{}"])
        .arg(format!("https://{}/v1/jobs", c.addr))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "401", "{o:?}");
    // Plain HTTP on the TLS port gets no HTTP reply at all.
    let mut s = std::net::TcpStream::connect(&c.addr).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    assert!(!String::from_utf8_lossy(&buf).starts_with("HTTP/"), "{}", String::from_utf8_lossy(&buf));
    let m = raw_http(&c.sock, "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").1;
    assert!(m.contains("tandem_queue_length") && m.contains("tandem_scheduling_pass_seconds"), "{m}");
}

#[test]
fn sbatch_places_by_node_names_features_switches_memory_per_cpu_and_time_min() {
    // node1 has features fast and ib, node2 slow; 4 CPUs and 4G each.
    // Planned with requested limits, as Slurm plans (the --time-min part below is Slurm's rule;
    // with the default predictions the earlier one-second jobs of this user would make the
    // 60-minute ones below look short enough to backfill whole).
    let c = Cluster::with_features("place", &["fast,ib", "slow"], Some("[scheduler]\npredict = \"limit\"\n"));
    let node_of = |args: &[&str]| -> String {
        let mut a = vec!["-o", "/dev/null"];
        a.extend_from_slice(args);
        a.extend(["--wrap", "true"]);
        let id = c.sbatch(&a);
        c.wait_state(id, &["COMPLETED"], 60)["NodeList"].clone()
    };
    assert_eq!(node_of(&["-w", "node2"]), "node2");
    assert_eq!(node_of(&["--nodelist=node1"]), "node1");
    assert_eq!(node_of(&["-x", "node1"]), "node2");
    assert_eq!(node_of(&["--exclude", "node2"]), "node1");
    assert_eq!(node_of(&["-C", "slow"]), "node2");
    assert_eq!(node_of(&["--constraint=fast&ib"]), "node1");
    assert_eq!(node_of(&["-C", "ib,fast"]), "node1");
    assert_eq!(node_of(&["-N", "2", "-w", "node[1-2]", "--switches=1@10:00"]), "node[1-2]");
    let shown = c.sbatch(&["-w", "node1", "-x", "node2", "-C", "fast", "--hold", "--wrap", "true"]);
    let j = c.job(shown);
    assert_eq!((&*j["ReqNodeList"], &*j["ExcNodeList"], &*j["Features"]), ("node1", "node2", "fast"), "{j:?}");
    c.ok("scancel", &[&shown.to_string()]);
    // --mem-per-cpu: per CPU, for the job and in its environment; sacct's ReqMem is the total.
    let id = c.sbatch(&["-c", "2", "--mem-per-cpu=512M", "-o", "mem.out", "--wrap", "echo $SLURM_MEM_PER_CPU"]);
    let j = c.wait_state(id, &["COMPLETED"], 60);
    assert_eq!(j["MinMemoryCPU"], "512M", "{j:?}");
    assert_eq!(std::fs::read_to_string(c.work.join("mem.out")).unwrap(), "512\n");
    assert_eq!(c.ok("sacct", &["-j", &id.to_string(), "-X", "-n", "-P", "--format=ReqMem"]).trim(), "1G");
    // --time-min: with node1 half busy until a 5-minute limit and a job of 4 CPUs reserved
    // behind it, EASY backfill starts a 60-minute job only if it may cut it to fit (at least its
    // time-min), as Slurm's does; the same job without --time-min waits.
    let busy = c.sbatch(&["-w", "node1", "-c", "2", "-t", "5", "-o", "/dev/null", "--wrap", "sleep 300"]);
    c.wait_state(busy, &["RUNNING"], 30);
    let top = c.sbatch(&["-w", "node1", "-c", "4", "-t", "5", "-o", "/dev/null", "--wrap", "true"]);
    let plain = c.sbatch(&["-w", "node1", "-c", "2", "-t", "60", "-o", "/dev/null", "--wrap", "sleep 300"]);
    let cut = c.sbatch(&["-w", "node1", "-c", "2", "-t", "60", "--time-min=2", "-o", "/dev/null", "--wrap", "sleep 300"]);
    let j = c.wait_state(cut, &["RUNNING"], 30);
    assert_eq!(j["TimeMin"], "00:02:00", "{j:?}");
    let limit = j["TimeLimit"].as_str();
    assert!(("00:02:00"..="00:05:00").contains(&limit), "cut to the reservation: {j:?}");
    assert_eq!(c.job(plain)["JobState"], "PENDING", "submitted first, without --time-min: not backfilled");
    assert_eq!(c.job(top)["JobState"], "PENDING");
    c.ok("scancel", &[&busy.to_string(), &top.to_string(), &plain.to_string(), &cut.to_string()]);
    // Bad values: a Slurm-like error, nothing stored.
    let before = c.ok("sacct", &["-n", "-X", "-P", "--format=JobID"]);
    for (args, want) in [
        (vec!["-C", "fast|slow"], "only features joined by '&' or ','"),
        (vec!["-C", "[fast*1&slow*1]"], "only features joined by '&' or ','"),
        (vec!["-C", "gpu"], "node configuration is not available"),
        (vec!["-C", "fast&slow"], "node configuration is not available"),
        (vec!["-w", "node[1-"], "node"),
        (vec!["-w", "nosuch"], "nosuch"),
        (vec!["-x", "node[1-2]"], "node configuration is not available"),
        (vec!["--switches=many"], "--switches"),
        (vec!["--mem-per-cpu=lots"], "lots"),
        (vec!["--mem-per-cpu=8G", "-c", "4"], "node configuration is not available"),
        (vec!["--time-min=soon"], "invalid time limit"),
    ] {
        let mut a = args.clone();
        a.extend(["--wrap", "true"]);
        let o = c.run("sbatch", &a);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
        assert!(e.starts_with("sbatch: error: ") && e.contains(want), "{args:?}: wanted {want:?} in {e}");
    }
    assert_eq!(c.ok("sacct", &["-n", "-X", "-P", "--format=JobID"]), before, "nothing stored");
}

#[test]
fn another_user_cannot_cancel_a_job() {
    let c = Cluster::new("perm", 1, None, 30);
    let id = c.sbatch(&["--wrap", "sleep 300"]);
    c.wait_state(id, &["RUNNING"], 30);
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(c.shims.join("scancel"))
        .arg(id.to_string())
        .env("TANDEM_SERVER", format!("unix://{}", c.sock))
        .current_dir("/")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("permission denied"), "{o:?}");
    assert_eq!(c.job(id)["JobState"], "RUNNING");
    c.ok("scancel", &[&id.to_string()]);
    c.wait_state(id, &["CANCELLED"], 30);
    // A job submitted by another user runs as that user, and root's jobs are out of its reach.
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(c.shims.join("sbatch"))
        .args(["--parsable", "-o", "nobody.out", "--wrap", "id -u; id -g"])
        .env("TANDEM_SERVER", format!("unix://{}", c.sock))
        .current_dir(&c.work)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let theirs: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    let j = c.wait_state(theirs, &["COMPLETED"], 30);
    assert_eq!(j["UserId"], "nobody(65534)");
    assert_eq!(std::fs::read_to_string(c.work.join("nobody.out")).unwrap(), "65534\n65534\n");
}

#[test]
fn a_dead_node_requeues_its_job_which_completes_elsewhere() {
    let mut c = Cluster::new("nodefail", 2, None, 3);
    let id = c.sbatch(&["-c4", "-o", "nf.out", "--wrap", "echo ran on $SLURMD_NODENAME restart=$SLURM_RESTART_COUNT; sleep 4"]);
    let j = c.wait_state(id, &["RUNNING"], 30);
    let first = j["NodeList"].clone();
    let idx: usize = first.trim_start_matches("node").parse::<usize>().unwrap() - 1;
    // RUNNING means dispatched; wait until the task has really started before the node dies.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(c.work.join("nf.out")).unwrap_or_default().contains("restart=0") {
        assert!(Instant::now() < deadline, "the task never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    c.kill_agent(idx);
    let j = c.wait_state(id, &["COMPLETED"], 60);
    assert_eq!(j["Restarts"], "1");
    assert_ne!(j["NodeList"], first);
    let out = std::fs::read_to_string(c.work.join("nf.out")).unwrap();
    assert!(out.contains(&format!("ran on {first} restart=0")) && out.contains("restart=1"), "{out}");
    let nodes = c.ok("sinfo", &["-N"]);
    assert!(nodes.lines().any(|l| l.starts_with(&first) && l.contains("down")), "{nodes}");
    // Restarted, the agent comes back with the credential it keeps (SECURITY.md N1): its join
    // token was spent at the first start, and no new one is needed.
    let server = format!("https://{}", c.addr);
    c.start_agent(idx, &server);
    c.wait_nodes(2);
    let log = c.log(&first);
    assert_eq!(log.matches("joined the cluster").count(), 1, "{log}");
    assert_eq!(log.matches("registered (").count(), 2, "{log}");
}

#[test]
fn a_controller_restart_within_the_lease_leaves_running_jobs_running() {
    let mut c = Cluster::new("restart", 1, None, 15);
    let id = c.sbatch(&["-o", "r.out", "--wrap", "echo start; sleep 5; echo end"]);
    c.wait_state(id, &["RUNNING"], 30);
    c.kill_server();
    std::thread::sleep(Duration::from_secs(2));
    c.start_server();
    let j = c.wait_state(id, &["COMPLETED"], 60);
    assert_eq!(j["Restarts"], "0");
    let out = std::fs::read_to_string(c.work.join("r.out")).unwrap();
    assert_eq!(out, "start\nend\n");
}

/// A pending array of 300 tasks is a window of jobs and one record (`control::tails`): what
/// was acknowledged about it (a task held alone, a task cancelled alone, then every pending task
/// cancelled together) survives `kill -9` of the controller, and `sacct` finds every task.
#[test]
fn a_large_pending_array_and_its_cancels_survive_kill_9() {
    let mut c = Cluster::new("tails", 1, None, 20);
    let arr = c.sbatch(&["--array=0-299", "--begin=now+1hour", "-o", "/dev/null", "--wrap", "true"]);
    let tasks = |c: &Cluster, state: &str| -> usize {
        c.ok("squeue", &["-h", "-r", "-t", state, "-o", "%i"]).lines().filter(|l| l.starts_with(&format!("{arr}_"))).count()
    };
    assert_eq!(tasks(&c, "PD"), 300);
    c.ok("scontrol", &["hold", &(arr + 250).to_string()]);
    c.ok("scancel", &[&format!("{arr}_200")]);
    c.kill_server();
    c.start_server();
    assert_eq!(tasks(&c, "PD"), 299, "the tail is back, less the task cancelled alone");
    assert_eq!(c.job(arr + 200)["JobState"], "CANCELLED");
    assert_eq!(c.job(arr + 250)["Reason"], "JobHeldUser");
    assert_eq!(c.job(arr + 299)["JobState"], "PENDING");
    // Collapsed, the waiting tasks are rows by reason, one for the held task.
    let rows = c.ok("squeue", &["-h", "-o", "%i %r"]);
    assert!(rows.lines().any(|l| l == format!("{arr}_250 JobHeldUser")), "{rows}");
    c.ok("scancel", &[&arr.to_string()]);
    c.kill_server();
    c.start_server();
    assert_eq!(tasks(&c, "PD"), 0);
    let done = c.ok("sacct", &["-n", "-X", "-P", "-j", &arr.to_string(), "-o", "State"]);
    assert_eq!(done.lines().filter(|l| l.starts_with("CANCELLED")).count(), 300, "{done}");
}

#[test]
fn acknowledged_submissions_survive_kill_9_and_run_exactly_once() {
    let mut c = Cluster::new("durable", 2, None, 20);
    let marks = c.work.join("marks");
    let n = 1000;
    let mut acked = Vec::new();
    let mut killed = false;
    let mut i = 0;
    while i < n {
        if i == n / 3 && !killed {
            // An array is one record until its tasks change: all of it must come back.
            let o = c.run(
                "sbatch",
                &["--parsable", "--array=0-49", "-o", "/dev/null", "--wrap", &format!("echo $SLURM_JOB_ID >> {}", marks.display())],
            );
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let first = String::from_utf8_lossy(&o.stdout).trim().parse::<u64>().unwrap();
            acked.extend(first..first + 50);
            c.kill_server(); // kill -9 in the middle of the stream of submissions
            killed = true;
            // submissions now fail until it is back
            let o = c.run("sbatch", &["--wrap", "true"]);
            assert!(!o.status.success());
            c.start_server();
        }
        let o = c.run("sbatch", &["--parsable", "-o", "/dev/null", "--wrap", &format!("echo $SLURM_JOB_ID >> {}", marks.display())]);
        if o.status.success() {
            acked.push(String::from_utf8_lossy(&o.stdout).trim().parse::<u64>().unwrap());
        }
        i += 1;
    }
    assert!(acked.len() >= n + 50 - 1, "only {} of {n} + 50 acknowledged", acked.len());
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let q = c.ok("squeue", &["-h"]);
        if q.trim().is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "queue did not drain:\n{q}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let acct = c.ok("sacct", &["-X", "-n", "-P", "--format=JobIDRaw,State"]);
    let text = std::fs::read_to_string(&marks).unwrap();
    let mut count: HashMap<u64, u32> = HashMap::new();
    for l in text.lines() {
        *count.entry(l.trim().parse().unwrap()).or_default() += 1;
    }
    for id in &acked {
        assert!(acct.contains(&format!("{id}|COMPLETED")), "acknowledged job {id} missing or not completed:\n{acct}");
        assert_eq!(count.get(id), Some(&1), "job {id} ran {:?} times", count.get(id));
    }
}

#[test]
fn a_partitioned_agent_fences_itself_and_nothing_runs_twice() {
    let mut c = Cluster::new("partition", 1, None, 4);
    let link = Link::new(&c.addr);
    c.start_agent(1, &format!("https://{}", link.addr));
    c.wait_nodes(2);
    // Fill node1 so the job lands on node2, behind the link.
    c.ok("scontrol", &["update", "NodeName=node1", "State=DRAIN", "Reason=test"]);
    let s = c.script(
        "fence.sh",
        "#!/bin/bash\n#SBATCH -o fence.out\n\
         for p in $(grep -o 'pid=[0-9]*' fence.out | cut -d= -f2); do kill -0 $p 2>/dev/null && echo OVERLAP with $p; done\n\
         echo start pid=$$ node=$SLURMD_NODENAME\nsleep 6\necho end node=$SLURMD_NODENAME\n",
    );
    let id = c.sbatch(&[&s]);
    let j = c.wait_state(id, &["RUNNING"], 30);
    assert_eq!(j["NodeList"], "node2");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(c.work.join("fence.out")).unwrap_or_default().contains("start pid=") {
        assert!(Instant::now() < deadline, "the task never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    c.ok("scontrol", &["update", "NodeName=node1", "State=RESUME"]);
    link.cut();
    let j = c.wait_state(id, &["COMPLETED"], 60);
    assert_eq!((j["NodeList"].as_str(), j["Restarts"].as_str()), ("node1", "1"));
    let out = std::fs::read_to_string(c.work.join("fence.out")).unwrap();
    assert!(!out.contains("OVERLAP"), "the fenced copy was still alive:\n{out}");
    assert!(!out.contains("end node=node2"), "the partitioned copy ran to the end:\n{out}");
    assert!(out.contains("end node=node1"), "{out}");
    assert!(c.log("node2").contains("fencing"), "{}", c.log("node2"));
}

#[test]
fn tandem_up_starts_a_local_cluster() {
    let dir = free_dir("up");
    // `tandem up` refuses a directory others may write (SECURITY.md S2); the job writes its
    // output file here as root.
    Command::new("chmod").arg("755").arg(&dir).status().unwrap();
    let mut up = Command::new(bin())
        .args(["up", "--agents", "2", "--port", "0", "--proxy-port", "0", "--data"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !dir.join("env").exists() {
        assert!(Instant::now() < deadline, "tandem up did not write its env file");
        std::thread::sleep(Duration::from_millis(50));
    }
    let env = std::fs::read_to_string(dir.join("env")).unwrap();
    let server = env.lines().find_map(|l| l.strip_prefix("export TANDEM_SERVER=")).unwrap().to_string();
    assert!(env.lines().any(|l| l.starts_with("export TANDEM_PROXY=http://127.0.0.1:")), "{env}");
    let run = |args: &[&str]| Command::new(bin()).args(args).env("TANDEM_SERVER", &server).current_dir(&dir).output().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = run(&["nodes", "-N"]);
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        if text.contains("node1") && text.contains("node2") {
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = run(&["submit", "--wrap", "echo hello from $SLURMD_NODENAME"]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let id: u64 = text.trim().strip_prefix("Submitted batch job ").unwrap().parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(dir.join(format!("slurm-{id}.out"))).unwrap_or_default().contains("hello from node") {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(100));
    }
    // A second cluster asking for the same proxy port is refused at once, not let in beside
    // the first (its proxy holds the port with SO_REUSEPORT, which this user's sockets could
    // join), and leaves nothing running.
    let port = env.lines().find_map(|l| l.strip_prefix("export TANDEM_PROXY=http://127.0.0.1:")).unwrap().to_string();
    let second = dir.join("second");
    let o = Command::new(bin())
        .args(["up", "--agents", "1", "--port", "0", "--no-hosts", "--proxy-port", &port, "--data"])
        .arg(&second)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && said.contains(&format!("cannot listen on 127.0.0.1:{port} for the proxy")), "{said}");
    let left = Command::new("pgrep").args(["-f", &second.display().to_string()]).output().unwrap();
    assert!(left.stdout.is_empty(), "the refused cluster left {}", String::from_utf8_lossy(&left.stdout));
    let _ = Command::new("kill").args(["-INT", &up.id().to_string()]).status();
    let st = up.wait().unwrap();
    assert!(st.success(), "{st}");
    let mut out = String::new();
    up.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    assert!(out.contains("export TANDEM_SERVER=unix://"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_memory_overrun_ends_as_out_of_memory() {
    let c = Cluster::new("oom", 1, None, 30);
    if c.log("node1").contains("no writable cgroup memory controller") {
        eprintln!("skipped: this machine lets the agent set no memory limit ({})", c.log("node1").trim());
        return;
    }
    // `tail` of an endless line keeps growing its buffer until the 64 MiB limit stops it.
    let id = c.sbatch(&["--mem=64M", "-o", "oom.out", "--wrap", "tail /dev/zero"]);
    let j = c.wait_state(id, &["OUT_OF_MEMORY", "FAILED", "COMPLETED"], 60);
    assert_eq!(j["JobState"], "OUT_OF_MEMORY", "{j:?}");
    let acct = c.ok("sacct", &["-j", &id.to_string(), "-X", "-P", "--format=State"]);
    assert!(acct.contains("OUT_OF_MEMORY"), "{acct}");
}

#[test]
fn configured_partitions_qos_limits_and_tokens() {
    let cfg = "[[partition]]\nname = \"cpu\"\nnodes = \"node1\"\nmax_time = \"1:00:00\"\ndefault = true\n\
               [[partition]]\nname = \"gpu\"\nnodes = \"node2\"\n\
               [[qos]]\nname = \"small\"\nmax_jobs_per_user = 1\n";
    let c = Cluster::with_config("config", 2, None, 30, Some(cfg));
    let o = c.run("sbatch", &["-t", "2:00:00", "--wrap", "true"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("time limit"), "{o:?}");
    let a = c.sbatch(&["-o", "a.out", "--wrap", "echo $SLURMD_NODENAME $SLURM_JOB_PARTITION"]);
    let b = c.sbatch(&["-p", "gpu", "-o", "b.out", "--wrap", "echo $SLURMD_NODENAME $SLURM_JOB_PARTITION"]);
    c.wait_state(a, &["COMPLETED"], 30);
    c.wait_state(b, &["COMPLETED"], 30);
    assert_eq!(std::fs::read_to_string(c.work.join("a.out")).unwrap(), "node1 cpu\n");
    assert_eq!(std::fs::read_to_string(c.work.join("b.out")).unwrap(), "node2 gpu\n");
    // QOS limit: one running job per user; the second waits with its reason.
    let q1 = c.sbatch(&["-q", "small", "-p", "gpu", "--wrap", "sleep 30"]);
    let q2 = c.sbatch(&["-q", "small", "-p", "gpu", "--wrap", "true"]);
    c.wait_state(q1, &["RUNNING"], 30);
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.job(q2)["Reason"] != "QOSMaxJobsPerUserLimit" {
        assert!(Instant::now() < deadline, "{:?}", c.job(q2));
        std::thread::sleep(Duration::from_millis(100));
    }
    c.ok("scancel", &[&q1.to_string()]);
    c.wait_state(q2, &["COMPLETED"], 30);
    // A token from the local socket lets a remote client act as the same user over TCP.
    let line = String::from_utf8_lossy(
        &Command::new(bin()).arg("token").env("TANDEM_SERVER", format!("unix://{}", c.sock)).output().unwrap().stdout,
    )
    .trim()
    .to_string();
    let token = line.strip_prefix("export TANDEM_TOKEN=").unwrap().to_string();
    let remote = |tok: &str, args: &[&str]| {
        Command::new(bin())
            .args(args)
            .env("TANDEM_SERVER", format!("https://{}", c.addr))
            .env("TANDEM_CA", c.dir.join("controller/ca.pem"))
            .env("TANDEM_TOKEN", tok)
            .current_dir(&c.work)
            .output()
            .unwrap()
    };
    let o = remote(&token, &["submit", "--parsable", "--wrap", "true"]);
    assert!(o.status.success(), "{o:?}");
    let mut forged = token.clone();
    forged.replace_range(0..1, if token.starts_with('0') { "1" } else { "0" });
    let o = remote(&forged, &["submit", "--wrap", "true"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("invalid or expired token"), "{o:?}");
}

#[test]
fn a_bad_configuration_stops_the_controller_with_a_clear_error() {
    let dir = free_dir("badcfg");
    std::fs::write(dir.join("tandem.toml"), "[[partition]]\nname = \"x\"\nmax_time = \"whenever\"\n").unwrap();
    let o = Command::new(bin()).args(["server", "--listen", "127.0.0.1:0", "--data"]).arg(&dir).output().unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("tandem.toml") && e.contains("max_time"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The controller plans with run times it learned from finished jobs (the default prediction,
/// EASY++): after two of a user's jobs ran about a second against an hour's request, a third
/// that runs long is expected to end at the first step of the ladder above its elapsed time,
/// not at its hour, and the job queued behind it is expected to start then (`squeue --start`).
/// Its time limit, and so its kill, stay the requested hour.
#[test]
fn the_controller_plans_with_run_times_learned_from_finished_jobs() {
    let c = Cluster::new("predict", 1, None, 30);
    for _ in 0..2 {
        let id = c.sbatch(&["-c", "4", "-t", "60", "-o", "/dev/null", "--wrap", "true"]);
        c.wait_state(id, &["COMPLETED"], 60);
    }
    let long = c.sbatch(&["-c", "4", "-t", "60", "-o", "/dev/null", "--wrap", "sleep 300"]);
    let running = c.wait_state(long, &["RUNNING"], 30);
    assert_eq!(running["TimeLimit"], "01:00:00", "the kill stays at the requested limit: {running:?}");
    let behind = c.sbatch(&["-c", "4", "-t", "60", "-o", "/dev/null", "--wrap", "true"]);
    let epoch = |iso: &str| -> i64 {
        let o = Command::new("date").args(["-d", iso, "+%s"]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).trim().parse().unwrap_or_else(|_| panic!("not a time: {iso:?}"))
    };
    let started = epoch(&running["StartTime"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let expected = loop {
        let s = c.ok("squeue", &["-h", "-j", &behind.to_string(), "-o", "%S"]);
        let s = s.trim();
        if s != "N/A" && !s.is_empty() {
            break epoch(s);
        }
        assert!(Instant::now() < deadline, "no expected start for job {behind}: {s:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let ahead = expected - started;
    assert!((1..=300).contains(&ahead), "expected to start {ahead} s after the long job started (its limit: 3600 s)");
    c.ok("scancel", &[&long.to_string(), &behind.to_string()]);
}

/// Issue 32's local path: a second `tandem up` on a data directory in use is refused, naming
/// the process that holds it, and touches nothing (the running controller's log stays whole);
/// plain HTTP to the controller's TLS port says what to set;
/// after `kill -9` of `tandem up`, its daemons are found and named, and `tandem down` stops
/// them; `tandem down` stops a running `tandem up` too.
#[test]
fn a_data_directory_in_use_is_refused_and_tandem_down_stops_what_holds_it() {
    let dir = free_dir("down");
    let (mut first, _server, _) = up(&dir, 1, &["--no-proxy", "--no-hosts"]);
    let pids = |dir: &std::path::Path| -> Vec<(String, u32)> {
        std::fs::read_to_string(dir.join("up.pid"))
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once(' ').map(|(n, p)| (n.to_string(), p.parse().unwrap())))
            .collect()
    };
    let alive = |p: u32| std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| !c.is_empty());
    let recorded = pids(&dir);
    assert_eq!(recorded.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["up", "controller", "agent-node1"]);
    assert_eq!(recorded[0].1, first.id());
    let log_before = std::fs::read_to_string(dir.join("controller.log")).unwrap();
    let second = |dir: &std::path::Path| {
        Command::new(bin()).args(["up", "--agents", "1", "--port", "0", "--no-proxy", "--no-hosts", "--data"]).arg(dir).output().unwrap()
    };
    let o = second(&dir);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success() && err.contains(&format!("is in use by a running `tandem up` (pid {})", first.id())), "{err}");
    assert!(err.contains("tandem down --data"), "{err}");
    assert_eq!(std::fs::read_to_string(dir.join("controller.log")).unwrap(), log_before, "the running cluster's log is untouched");
    // Plain HTTP to the controller's TLS port says what to set, not hyper's words.
    let addr = std::fs::read_to_string(dir.join("controller/addr")).unwrap();
    let o = Command::new(bin()).args(["nodes"]).env("TANDEM_SERVER", format!("http://{}", addr.trim())).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        !o.status.success() && err.contains("not plain HTTP") && err.contains("TANDEM_SERVER") && !err.contains("invalid HTTP version"),
        "{err}"
    );
    // kill -9 of tandem up: its daemons go on; a new one says so, and tandem down stops them.
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(recorded[1..].iter().all(|(_, p)| alive(*p)));
    let o = second(&dir);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success() && err.contains("are still running") && err.contains(&format!("controller {}", recorded[1].1)), "{err}");
    let o = Command::new(bin()).args(["down", "--data"]).arg(&dir).output().unwrap();
    assert!(o.status.success(), "{o:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while recorded[1..].iter().any(|(_, p)| alive(*p)) {
        assert!(Instant::now() < deadline, "tandem down left {recorded:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The directory is free again; tandem down stops a running tandem up, which stops the rest.
    std::fs::remove_file(dir.join("env")).unwrap();
    let (mut again, _, _) = up(&dir, 1, &["--no-proxy", "--no-hosts"]);
    let now = pids(&dir);
    let o = Command::new(bin()).args(["down", "--data"]).arg(&dir).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("stopping tandem up (pid {})", again.id())), "{o:?}");
    again.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while now.iter().any(|(_, p)| alive(*p)) {
        assert!(Instant::now() < deadline, "still running: {now:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = Command::new(bin()).args(["down", "--data"]).arg(&dir).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("nothing of"), "{o:?}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The controller's JSON log lines (every line must be one object).
fn json_log(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l:?}")))
        .collect()
}

/// Waits for a log line of `path` that `pick` accepts (bounded).
fn wait_log(path: &std::path::Path, what: &str, pick: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(l) = json_log(path).into_iter().find(|l| pick(l)) {
            return l;
        }
        assert!(Instant::now() < deadline, "no {what} in {}:\n{}", path.display(), std::fs::read_to_string(path).unwrap_or_default());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn json_logs_tell_a_jobs_life_and_one_modules_debugging_is_turned_on_and_off_at_run_time() {
    let dir = free_dir("logs");
    std::fs::create_dir_all(&dir).unwrap();
    let (child, server, _) = up(&dir, 1, &["--no-proxy", "--no-hosts", "--log-format", "json"]);
    let ctl = dir.join("controller.log");
    let job = |l: &serde_json::Value, id: u64, msg: &str| l["job_id"] == id && l["message"] == msg;
    let id: u64 = run_in(&dir, &server, &["submit", "--parsable", "-o", "/dev/null", "--wrap", "exit 3"]).trim().parse().unwrap();
    let submitted = wait_log(&ctl, "job submitted", |l| job(l, id, "job submitted"));
    assert_eq!(submitted["level"], "INFO");
    assert_eq!(submitted["target"], "server::jobs");
    assert!(submitted["user"].is_string() && submitted["timestamp"].is_string(), "{submitted}");
    let started = wait_log(&ctl, "job started", |l| job(l, id, "job started"));
    assert_eq!(started["nodes"], "node1", "{started}");
    let ended = wait_log(&ctl, "job ended", |l| job(l, id, "job ended"));
    assert_eq!((&ended["state"], &ended["exit_code"]), (&serde_json::json!("FAILED"), &serde_json::json!(3)), "{ended}");
    // In that order, once each.
    let lines = json_log(&ctl);
    let of_job: Vec<&str> = lines.iter().filter(|l| l["job_id"] == id).filter_map(|l| l["message"].as_str()).collect();
    assert_eq!(of_job, ["job submitted", "job started", "job ended"]);
    // The agent's lines are JSON too, with their node.
    let agent = wait_log(&dir.join("node1.log"), "registered", |l| l["message"].as_str().is_some_and(|m| m.starts_with("registered")));
    assert_eq!(agent["node"], "node1");
    // Nothing below info by default: no submission's debug line.
    assert!(!lines.iter().any(|l| l["level"] == "DEBUG"), "debug lines at info");
    // One module's debugging on (as `scontrol setdebug`), then off.
    run_in(&dir, &server, &["show", "setdebug", "info,server::jobs=debug"]);
    assert!(run_in(&dir, &server, &["show", "show", "config"]).contains("SlurmctldDebug          = info,server::jobs=debug"));
    let on: u64 = run_in(&dir, &server, &["submit", "--parsable", "--hold", "--wrap", "true"]).trim().parse().unwrap();
    let debug = wait_log(&ctl, "the submission's debug line", |l| job(l, on, "submission accepted"));
    assert_eq!((&debug["level"], &debug["target"]), (&serde_json::json!("DEBUG"), &serde_json::json!("server::jobs")), "{debug}");
    assert!(debug["workdir"].is_string(), "{debug}");
    // Other modules stayed at info.
    assert!(!json_log(&ctl).iter().any(|l| l["level"] == "DEBUG" && l["target"] != "server::jobs"), "other modules' debug lines");
    run_in(&dir, &server, &["show", "setdebug", "info"]);
    let off: u64 = run_in(&dir, &server, &["submit", "--parsable", "--hold", "--wrap", "true"]).trim().parse().unwrap();
    wait_log(&ctl, "the next submission", |l| job(l, off, "job submitted"));
    assert!(!json_log(&ctl).iter().any(|l| job(l, off, "submission accepted")), "debug lines after setdebug info");
    // A filter that does not parse changes nothing and says why.
    let o = Command::new(bin()).args(["show", "setdebug", "server=loud"]).env("TANDEM_SERVER", &server).output().unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("invalid log filter \"server=loud\""), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(run_in(&dir, &server, &["show", "show", "config"]).contains("SlurmctldDebug          = info\n"));
    // Only operators change it.
    if is_root() {
        let o = Command::new("setpriv")
            .args(["--reuid=1001", "--regid=1001", "--clear-groups"])
            .arg(bin())
            .args(["show", "setdebug", "debug"])
            .env("TANDEM_SERVER", &server)
            .output()
            .unwrap();
        assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("Invalid user id"), "{o:?}");
    }
    stop_up(child, &dir);
}

/// Issue 32's upgrades: a data directory of the schema before it was recorded is migrated at
/// start, a copy taken first, its jobs and accounting intact; one of a newer schema is refused
/// with what to do, and left as it was.
#[test]
fn an_older_database_is_migrated_with_its_jobs_and_a_newer_one_refused() {
    let c = Cluster::new("schema", 1, None, 30);
    let done = c.sbatch(&["--wrap", "true"]);
    c.wait_state(done, &["COMPLETED"], 30);
    let held = c.sbatch(&["--hold", "-J", "kept", "--wrap", "true"]);
    let sacct_before = c.ok("sacct", &["-j", &done.to_string(), "-n", "-X", "-o", "JobID,State,ExitCode"]);
    let mut c = c;
    c.kill_server();
    let db = c.dir.join("controller/state.db");
    let sql = |stmt: &str| {
        let o = Command::new("python3")
            .args([
                "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); r = c.execute(sys.argv[2]).fetchall(); c.commit(); print(r)",
            ])
            .arg(&db)
            .arg(stmt)
            .output()
            .unwrap();
        assert!(o.status.success(), "{stmt}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    assert_eq!(sql("SELECT value FROM meta WHERE key = 'schema'"), "[('2',)]");
    // As a build before schemas were recorded left it.
    sql("DELETE FROM meta WHERE key = 'schema'");
    sql("DROP INDEX jobs_end");
    c.start_server();
    c.wait_nodes(1);
    let log = c.log("controller");
    assert!(log.contains("written by an older Tandem: migrated to schema 2"), "{log}");
    assert_eq!(sql("SELECT value FROM meta WHERE key = 'schema'"), "[('2',)]");
    let backups: Vec<String> = std::fs::read_dir(c.dir.join("controller"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("state.db.schema-1.") && n.ends_with(".bak"))
        .collect();
    assert_eq!(backups.len(), 1, "{backups:?}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(c.dir.join("controller").join(&backups[0])).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the copy is the controller's alone");
    assert_eq!(c.ok("sacct", &["-j", &done.to_string(), "-n", "-X", "-o", "JobID,State,ExitCode"]), sacct_before);
    assert_eq!(c.job(held)["JobState"], "PENDING");
    assert_eq!(c.job(held)["JobName"], "kept");
    // A newer schema: refused, with what to do; the database is left as it was.
    c.kill_server();
    sql("UPDATE meta SET value = '99' WHERE key = 'schema'");
    let o = Command::new(bin()).args(["server", "--listen", "127.0.0.1:0", "--data"]).arg(c.dir.join("controller")).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("schema 99, written by a newer Tandem") && err.contains("reads schemas up to 2"), "{err}");
    assert_eq!(sql("SELECT value FROM meta WHERE key = 'schema'"), "[('99',)]");
    sql("UPDATE meta SET value = '2' WHERE key = 'schema'");
    c.start_server();
}

/// Issue 32's upgrade from a real older release: the controller's data directory that commit
/// 7314e88's build wrote (`tests/fixtures/upgrade-7314e88`, made by
/// `scripts/make-upgrade-fixture.sh`: jobs completed, failed, held, cancelled, an array, a
/// service scaled to 0; before the database recorded its schema) is copied, then migrated to
/// this build's schema at its first start, and `sacct` and `tandem service list` print what
/// that build printed; the held job is still held; a second start migrates nothing.
#[test]
fn a_data_directory_of_commit_7314e88_is_migrated_with_its_jobs_accounting_and_services() {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/upgrade-7314e88");
    let dir = free_dir("fixture7314");
    let data = dir.join("controller");
    std::fs::create_dir_all(&data).unwrap();
    let o = Command::new("tar").arg("-xzf").arg(fixture.join("controller.tar.gz")).arg("-C").arg(&data).output().unwrap();
    assert!(o.status.success(), "{o:?}");
    Command::new("chmod").arg("711").arg(&data).status().unwrap();
    let sock = format!("unix://{}", data.join("tandem.sock").display());
    let start = |log: &str| {
        let f = std::fs::File::create(dir.join(log)).unwrap();
        let child = Command::new(bin())
            .args(["server", "--listen", "127.0.0.1:0", "--data"])
            .arg(&data)
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !Command::new(bin()).args(["nodes", "-h"]).env("TANDEM_SERVER", &sock).output().unwrap().status.success() {
            assert!(
                Instant::now() < deadline,
                "the controller did not start:\n{}",
                std::fs::read_to_string(dir.join(log)).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Procs(vec![child])
    };
    let server = start("controller.log");
    let log = std::fs::read_to_string(dir.join("controller.log")).unwrap();
    assert!(log.contains("written by an older Tandem: migrated to schema 2"), "{log}");
    let backups = std::fs::read_dir(&data)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("state.db.schema-1."))
        .count();
    assert_eq!(backups, 1, "one copy taken before the migration");
    let run = |args: &[&str]| {
        let o = Command::new(bin()).args(args).env("TANDEM_SERVER", &sock).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let sacct = run(&["history", "-a", "-X", "-n", "-P", "-S", "2026-01-01", "-E", "now", "-o", "JobID,JobName,State,ExitCode"]);
    let want = std::fs::read_to_string(fixture.join("sacct.txt")).unwrap();
    assert_eq!(sacct, want, "sacct after the migration");
    for (name, state) in [("done", "COMPLETED"), ("fails", "FAILED"), ("held", "PENDING"), ("cancelled", "CANCELLED")] {
        assert!(
            want.lines().any(|l| l.split('|').nth(1) == Some(name) && l.split('|').nth(2).is_some_and(|s| s.starts_with(state))),
            "{name} {state}:\n{want}"
        );
    }
    let services: String = run(&["service", "list"])
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .map(|w| format!("{} {} {} {}\n", w[0], w[3], w[4], w[5]))
        .collect();
    assert_eq!(services, std::fs::read_to_string(fixture.join("services.txt")).unwrap(), "tandem service list after the migration");
    let held = want.lines().find(|l| l.split('|').nth(1) == Some("held")).unwrap().split('|').next().unwrap().to_string();
    let q = run(&["queue", "-h", "-j", &held, "-o", "%T %r"]);
    assert_eq!(q.trim(), "PENDING JobHeldUser", "{q}");
    // A second start finds the current schema: no migration, no second copy.
    drop(server);
    let _server = start("controller-again.log");
    assert!(!std::fs::read_to_string(dir.join("controller-again.log")).unwrap().contains("migrated"));
    assert_eq!(
        std::fs::read_dir(&data).unwrap().filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".bak")).count(),
        1
    );
}

/// Issue 32's backup and restore: `tandem admin backup` taken while jobs are submitted and
/// run, then the controller restored from it. Every job acknowledged before the backup is
/// there; those it held unfinished are held (`Restored`) or settled by their agent; none runs
/// twice; the restored controller's orders are taken by the agent (its start count passed
/// every start since), so a new job runs.
#[test]
fn a_backup_taken_under_load_restores_every_acknowledged_job_and_runs_none_twice() {
    let mut c = Cluster::new("backup", 1, None, 30);
    let ran = c.work.join("ran.log");
    let submit = |c: &Cluster, n: usize| -> u64 {
        let script = format!("echo tok-{n} >> {}; sleep 1", ran.display());
        c.sbatch(&["-c", "1", "-o", "/dev/null", "--wrap", &script])
    };
    let mut before = Vec::new();
    for n in 0..12 {
        before.push(submit(&c, n));
    }
    c.wait_state(before[0], &["RUNNING", "COMPLETED"], 30);
    // Another user may not take it.
    if is_root() {
        let o = Command::new("setpriv")
            .args(["--reuid=1001", "--regid=1001", "--clear-groups"])
            .arg(bin())
            .args(["admin", "backup", "/tmp/never-written.db"])
            .env("TANDEM_SERVER", format!("unix://{}", c.sock))
            .output()
            .unwrap();
        assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("only administrators"), "{o:?}");
        assert!(!std::path::Path::new("/tmp/never-written.db").exists());
    }
    // The backup, while submissions go on.
    let file = c.dir.join("backup.db");
    let (sock, file2) = (c.sock.clone(), file.clone());
    let taking = std::thread::spawn(move || {
        Command::new(bin()).args(["admin", "backup"]).arg(&file2).env("TANDEM_SERVER", format!("unix://{sock}")).output().unwrap()
    });
    let mut after = Vec::new();
    for n in 12..20 {
        after.push(submit(&c, n));
    }
    let o = taking.join().unwrap();
    assert!(o.status.success(), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("backup of the controller's database written to"), "{o:?}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    // Not over an existing file.
    let o = Command::new(bin()).args(["admin", "backup"]).arg(&file).env("TANDEM_SERVER", format!("unix://{}", c.sock)).output().unwrap();
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("must not exist"), "{o:?}");
    // The cluster goes on for a while (jobs end after the backup), then the controller is lost
    // and restored from the copy.
    std::thread::sleep(Duration::from_secs(3));
    c.kill_server();
    let ctl = c.dir.join("controller");
    for f in ["state.db-wal", "state.db-shm"] {
        let _ = std::fs::remove_file(ctl.join(f));
    }
    std::fs::copy(&file, ctl.join("state.db")).unwrap();
    c.start_server();
    c.wait_nodes(1);
    let log = c.log("controller");
    assert!(log.contains("restored from a backup taken at"), "{log}");
    // Every job acknowledged before the backup began is known, in a state that makes sense.
    for id in &before {
        let j = c.job(*id);
        let state = j["JobState"].as_str();
        assert!(["COMPLETED", "RUNNING", "PENDING"].contains(&state), "job {id}: {j:?}");
        if state == "PENDING" {
            assert_eq!(j["Reason"], "Restored", "job {id}: {j:?}");
        }
    }
    // Nothing runs twice, even after a while (the held ones wait for an operator).
    std::thread::sleep(Duration::from_secs(6));
    let text = std::fs::read_to_string(&ran).unwrap_or_default();
    let mut seen = std::collections::HashSet::new();
    for l in text.lines() {
        assert!(seen.insert(l.to_string()), "{l} ran twice:\n{text}");
    }
    // The restored controller's orders are taken: a new job runs (and so does a released one).
    let fresh = c.sbatch(&["-o", "/dev/null", "--wrap", "true"]);
    c.wait_state(fresh, &["COMPLETED"], 30);
    let held: Vec<u64> = before.iter().copied().filter(|id| c.job(*id)["JobState"] == "PENDING").collect();
    if let Some(&one) = held.first() {
        c.ok("scontrol", &["release", &one.to_string()]);
        c.wait_state(one, &["COMPLETED"], 60);
    }
    // The first start counted 1 (in the copy); the restored one passes every start since.
    assert!(c.log("controller").contains("this start is counted 65537"), "{}", c.log("controller"));
}

/// A body declared larger than the controller takes is refused before it is sent: a client
/// waiting for `100 Continue` (curl's way with large bodies) gets the 413 itself, not a
/// connection cut in the middle of its upload. Both APIs.
#[test]
fn a_declared_oversized_body_gets_its_413_before_any_byte_of_it() {
    let c = Cluster::new("expect", 1, None, 30);
    for path in ["/v1/jobs", "/apis/apps/v1/namespaces/default/deployments"] {
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"
        );
        let (status, raw) = raw_http(&c.sock, &req);
        assert_eq!(status, 413, "{path}: {raw}");
        assert!(!raw.contains("100 Continue"), "{path}: {raw}");
    }
    // The controller serves on.
    let id = c.sbatch(&["--wrap", "true"]);
    c.wait_state(id, &["COMPLETED"], 30);
}

/// Issue 32's upgrade promise, Slurm's: the controller may be one release ahead of its agents,
/// never behind. An agent of a newer release is refused at registration with which to upgrade
/// first, as is one more than a release behind; one that sends no release is 0.1's. The node
/// stays as it was.
#[test]
fn an_agent_of_a_newer_release_is_refused_with_which_to_upgrade_first() {
    let c = Cluster::new("release", 1, None, 30);
    let cred = std::fs::read_to_string(c.dir.join("node1/credential")).unwrap().trim().to_string();
    let ca = c.dir.join("controller/ca.pem").display().to_string();
    let register = |version: Option<&str>| {
        let v = version.map_or(String::new(), |v| format!(r#","version":"{v}""#));
        let body = format!(
            r#"{{"node":{{"name":"node1","cpus":4,"memory":1073741824,"gpus":0,"gpu_type":null,"other":[],"features":[],"partitions":[],"switch":0,"block":0,"state":"Up"}},"addr":"127.0.0.1"{v}}}"#
        );
        let port = c.addr.rsplit(':').next().unwrap();
        let o = Command::new("curl")
            .args([
                "-s",
                "--cacert",
                &ca,
                "--resolve",
                &format!("controller.tandem:{port}:127.0.0.1"),
                "-w",
                "\n%{http_code}",
                "-X",
                "POST",
            ])
            .arg(format!("https://controller.tandem:{port}/v1/agent/register"))
            .args(["-H", "content-type: application/json", "-H", &format!("authorization: Bearer {cred}"), "--data-binary", &body])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let (text, code) = out.rsplit_once('\n').unwrap();
        (code.trim().parse::<u16>().unwrap_or(0), text.to_string())
    };
    let (code, text) = register(Some("99.0.0"));
    assert_eq!(code, 426, "{text}");
    assert!(text.contains("is newer than the controller's") && text.contains("upgrade the controller first"), "{text}");
    let (code, text) = register(Some("1.x"));
    assert_eq!(code, 400, "{text}");
    assert!(c.log("controller").contains("node node1 refused"), "{}", c.log("controller"));
    // Its own release, and none (an agent from before releases were sent): taken.
    assert_eq!(register(Some(env!("CARGO_PKG_VERSION"))).0, 200);
    assert_eq!(register(None).0, 200);
    let id = c.sbatch(&["--wrap", "true"]);
    c.wait_state(id, &["COMPLETED"], 30);
}
