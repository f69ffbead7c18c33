//! Issue 28's table, end to end: command lines that every Slurm accepts (bundled letters,
//! prefixes of long names, `-M`, `--no-shell`, `--cpu-bind=q`, `-W`, ...) run against a real
//! cluster through the Slurm command links, each with Slurm's meaning; and the refusals read as
//! glibc's getopt prints them, exit 1, with nothing stored.

mod common;

use common::Cluster;
use std::process::Output;

fn me() -> String {
    nix::unistd::User::from_uid(nix::unistd::getuid()).unwrap().unwrap().name
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every job the controller holds, by id (states change between two listings, and with them
/// squeue's default order).
fn all_ids(c: &Cluster) -> String {
    c.ok("squeue", &["-h", "-t", "all", "-o", "%i", "-S", "i"])
}

/// A refused command line: exit 1, glibc's message after the command's name, then Slurm's hint.
fn refused(c: &Cluster, cmd: &str, args: &[&str], msg: &str) {
    let o = c.run(cmd, args);
    assert_eq!(o.status.code(), Some(1), "{cmd} {args:?}: {}", err(&o));
    assert_eq!(err(&o), format!("{cmd}: {msg}\nTry \"{cmd} --help\" for more information\n"), "{cmd} {args:?}");
    assert!(out(&o).is_empty(), "{cmd} {args:?} printed {}", out(&o));
}

#[test]
fn slurm_command_lines_read_as_getopt_long_reads_them() {
    let c = Cluster::new("getopt", 2, None, 30);
    c.wait_nodes(2);
    let user = me();

    // Bundled letters, attached values, prefixes.
    let id = c.sbatch(&["--partit=batch", "--wr", "sleep 300"]);
    c.wait_state(id, &["RUNNING"], 30);
    let ids = c.ok("squeue", &["-hu", &user, "-o", "%i"]);
    assert_eq!(ids.trim(), id.to_string());
    assert_eq!(c.ok("squeue", &["-ho", "%i"]).trim(), id.to_string());
    assert_eq!(c.ok("squeue", &["--noh", "-o%i"]).trim(), id.to_string());
    assert_eq!(c.ok("squeue", &["-M", "all", "-h", "-j", &id.to_string(), "-o", "%i"]).trim(), id.to_string());
    assert_eq!(c.ok("sinfo", &["-hN", "-o", "%N"]).lines().collect::<Vec<_>>(), ["node1", "node2"]);
    assert!(c.ok("sinfo", &["-Nel"]).contains("NODELIST"));
    // `squeue --json`: a running job's resources node by node, a pending one's null (Slurm 24.11.5+).
    let held = c.sbatch(&["-H", "-J", "held", "--wrap", "true"]);
    let v: serde_json::Value = serde_json::from_str(&c.ok("squeue", &["--json", "-j", &format!("{id},{held}")])).unwrap();
    let jobs = v["jobs"].as_array().unwrap();
    let of = |j: u64| jobs.iter().find(|x| x["job_id"] == j).unwrap_or_else(|| panic!("job {j} not in {v}"));
    let res = &of(id)["job_resources"];
    assert_eq!(res["nodes"]["count"], 1, "{res}");
    assert!(["node1", "node2"].contains(&res["nodes"]["allocation"][0]["name"].as_str().unwrap()), "{res}");
    assert!(res["nodes"]["allocation"][0]["cpus"]["used"].as_u64().unwrap() >= 1, "{res}");
    assert_eq!(of(held)["job_resources"], serde_json::Value::Null);
    assert!(c.run("scancel", &[&held.to_string()]).status.success());
    assert!(c.ok("sinfo", &["--noconvert", "-h"]).contains("batch"));
    assert_eq!(c.ok("sacct", &["-nXP", "-j", &id.to_string(), "-o", "State"]).trim(), "RUNNING");
    assert_eq!(c.ok("sacct", &[&format!("-j{id}"), "-XnPoState"]).trim(), "RUNNING");
    assert_eq!(c.ok("sacct", &["-nu", &user, "-X", "-j", &id.to_string(), "-o", "Account%256"]).trim(), user);
    assert_eq!(c.ok("sacct", &["--clusters", "all", "-nXP", "-j", &id.to_string(), "-o", "JobID"]).trim(), id.to_string());
    assert_eq!(c.ok("sacct", &["-M", "tandem", "-nXPj", &id.to_string(), "-o", "JobID"]).trim(), id.to_string());
    assert!(c.ok("sshare", &["-U"]).trim_start().starts_with("Account"));
    assert!(c.ok("sprio", &["-h", "-u", &user]).is_empty());
    // `srun -lN1`: a label, one node.
    let o = c.ok("srun", &["-lN1", "--cpu-bind=q", "--wait=60", "hostname"]);
    assert!(o.starts_with("0: "), "{o}");
    // `-W`: the others are ended a while after the first task ends (here rank 1 would sleep on).
    let o = c.run("srun", &["-n2", "-W", "1", "bash", "-c", "[ $SLURM_PROCID = 0 ] || exec sleep 600"]);
    assert!(err(&o).contains("srun: error: Timed out waiting for job step to complete"), "{}", err(&o));
    assert_ne!(o.status.code(), Some(0));
    assert_eq!(c.run("scancel", &["-Q", &id.to_string()]).status.code(), Some(0));
    c.wait_state(id, &["CANCELLED"], 30);
    // A finished job stays visible for MinJobAge when asked for by state, as Slurm's; by id
    // alone it is no error, and not listed.
    assert!(c.ok("squeue", &["-h", "-t", "all", "-o", "%i %T"]).lines().any(|l| l == format!("{id} CANCELLED")));
    assert_eq!(c.ok("squeue", &["-h", "-t", "CA,CD", "--name", "wrap", "-o", "%i"]).trim(), id.to_string());
    assert_eq!(c.ok("squeue", &["-h", "-j", &id.to_string()]), "");
    assert_eq!(c.ok("squeue", &["-h", &format!("-j{id}"), "-t", "all", "-o", "%T"]).trim(), "CANCELLED");

    // `scontrol update`'s keywords as Slurm reads them: any case, abbreviated to Slurm's
    // minimums; a key this cluster does not change, in Slurm's words.
    let held = c.sbatch(&["-H", "-o", "/dev/null", "--wrap", "true"]);
    c.ok("scontrol", &["update", &format!("jobid={held}"), "timel=7"]);
    assert_eq!(c.job(held)["TimeLimit"], "00:07:00");
    let o = c.run("scontrol", &["update", &format!("JobId={held}"), "Partition=gpu"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).starts_with("Update of this parameter is not supported: Partition=gpu\nRequest aborted"), "{}", err(&o));
    let o = c.run("scontrol", &["update", "Bogus=1"]);
    assert!(err(&o).starts_with("No valid entity in update command"), "{}", err(&o));
    assert!(c.run("scancel", &[&held.to_string()]).status.success());

    // `salloc --no-shell`: an allocation that stays, which `srun --jobid` uses.
    let o = c.run("salloc", &["-N1", "--no-shell"]);
    assert!(o.status.success(), "{}", err(&o));
    let granted = err(&o).lines().find_map(|l| l.strip_prefix("salloc: Granted job allocation ")).map(str::to_string);
    let alloc = granted.unwrap_or_else(|| panic!("no allocation: {}", err(&o)));
    assert_eq!(c.job(alloc.parse().unwrap())["JobState"], "RUNNING");
    assert_eq!(c.ok("srun", &["--jobid", &alloc, "echo", "in the allocation"]).trim(), "in the allocation");
    assert!(c.run("scancel", &[&alloc]).status.success());

    // One unknown job id is an error, as Slurm's; among several, unknown ones are skipped.
    let o = c.run("squeue", &["-j", "99999"]);
    assert_eq!((o.status.code(), err(&o).trim()), (Some(1), "slurm_load_jobs error: Invalid job id specified"));
    assert!(c.run("squeue", &["-j", "99999,99998"]).status.success());

    // Another cluster's name is refused, as Slurm's.
    for (cmd, args) in
        [("squeue", vec!["-M", "elsewhere"]), ("sacct", vec!["--clusters=elsewhere"]), ("sbatch", vec!["-M", "x", "--wrap", "true"])]
    {
        let o = c.run(cmd, &args);
        assert_eq!(o.status.code(), Some(1), "{cmd} {args:?}");
        assert!(err(&o).contains("can't be reached now, or it is an invalid entry for --cluster"), "{cmd}: {}", err(&o));
    }

    // Refusals: glibc's words, exit 1, nothing stored.
    let before = all_ids(&c);
    refused(
        &c,
        "sbatch",
        &["--mem-per=1G", "--wrap", "true"],
        "option '--mem-per' is ambiguous; possibilities: '--mem-per-cpu' '--mem-per-gpu'",
    );
    refused(&c, "sbatch", &["--frobnicate", "--wrap", "true"], "unrecognized option '--frobnicate'");
    refused(&c, "sbatch", &["--hold=yes", "--wrap", "true"], "option '--hold' doesn't allow an argument");
    refused(&c, "sbatch", &["-J"], "option requires an argument -- 'J'");
    refused(&c, "squeue", &["-hz"], "invalid option -- 'z'");
    refused(&c, "squeue", &["--user"], "option '--user' requires an argument");
    refused(&c, "sacct", &["--par"], "option '--par' is ambiguous; possibilities: '--parsable' '--parsable2' '--partition'");
    refused(&c, "scancel", &["--nope", "1"], "unrecognized option '--nope'");
    refused(
        &c,
        "srun",
        &["--ex=1", "true"],
        "option '--ex' is ambiguous; possibilities: '--export' '--exclude' '--exclusive' '--exact' '--external-launcher' '--extra-node-info' '--extra'",
    );
    refused(&c, "salloc", &["--no-shel=1"], "option '--no-shell' doesn't allow an argument");
    assert_eq!(all_ids(&c), before);
    // Input variables read as the options they stand for: an SBATCH_* one, a flag's that the man
    // page's rule leaves unset ("no"), one for a refused option (named, nothing stored).
    let o = c.run_env("sbatch", &["--parsable", "--wrap", "true"], &[("SBATCH_JOB_NAME", "fromenv"), ("SBATCH_REQUEUE", "no")]);
    let named: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap_or_else(|_| panic!("{o:?}"));
    assert_eq!(c.job(named)["JobName"], "fromenv");
    let before = all_ids(&c);
    let o = c.run_env("sbatch", &["--parsable", "--wrap", "true"], &[("SBATCH_CONTAINER", "/img")]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.code() == Some(1) && e.contains("SBATCH_CONTAINER: --container"), "{o:?}");
    assert_eq!(all_ids(&c), before);
}

/// A heterogeneous batch job (issue 28): a 1-task component and a 2-node one, separated by
/// `#SBATCH hetjob`, start together or not at all, and `srun --het-group=0,1` runs one step over
/// both, each task with its component's variables.
#[test]
fn a_heterogeneous_batch_job_starts_its_components_together_and_srun_spans_them() {
    let c = Cluster::new("hetjob", 3, None, 30);
    c.wait_nodes(3);
    // node3 is held whole: component 1 (which needs it) cannot start, though component 0 could.
    let blocker = c.sbatch(&["-w", "node3", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 300"]);
    c.wait_state(blocker, &["RUNNING"], 30);
    let out = c.work.join("het.out");
    let script = c.script(
        "het.sh",
        &format!(
            "#!/bin/bash\n#SBATCH -J het -o {}\n#SBATCH -n1 -c2\n#SBATCH hetjob\n#SBATCH -N2 --ntasks-per-node=1 -w node[2-3]\n\
             echo batch size=$SLURM_HET_SIZE id=$SLURM_JOB_ID id1=$SLURM_JOB_ID_HET_GROUP_1 g0=$SLURM_JOB_NODELIST_HET_GROUP_0 g1=$SLURM_JOB_NODELIST_HET_GROUP_1 n1=$SLURM_NTASKS_HET_GROUP_1 nodes=$SLURM_JOB_NODELIST\n\
             srun --het-group=0,1 bash -c 'echo task rank=$SLURM_PROCID of=$SLURM_NTASKS on=$SLURMD_NODENAME cpt=$SLURM_CPUS_PER_TASK size=$SLURM_HET_SIZE g1=$SLURM_JOB_NODELIST_HET_GROUP_1' | sort\n\
             srun bash -c 'echo default on=$SLURMD_NODENAME'\n\
             srun -n1 : -n2 bash -c 'echo parts rank=$SLURM_PROCID on=$SLURMD_NODENAME' | sort\n\
             srun --het-group=1 bash -c 'echo one on=$SLURMD_NODENAME' | sort\n",
            out.display()
        ),
    );
    let id = c.sbatch(&[&script]);
    // Both components wait, one row each, as N+0 and N+1.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let rows = loop {
        let rows = c.ok("squeue", &["-h", "-j", &id.to_string(), "-o", "%i %T %r %D"]);
        if rows.contains("Resources") || std::time::Instant::now() > deadline {
            break rows;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(rows, format!("{id}+0 PENDING Resources 1\n{id}+1 PENDING Resources 2\n"));
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert_eq!(c.job(id)["JobState"], "PENDING", "component 0 alone must not start");
    assert!(c.ok("squeue", &["-h", "-t", "R", "-o", "%i"]).trim() == blocker.to_string());
    // A later component cannot be cancelled alone; N+1 names it in squeue.
    let o = c.run("scancel", &[&format!("{id}+1")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("cancels the whole job"), "{}", err(&o));
    assert_eq!(c.ok("squeue", &["-h", "-j", &format!("{id}+1"), "-o", "%i"]).trim(), format!("{id}+1"));
    assert!(c.run("scancel", &[&blocker.to_string()]).status.success());
    c.wait_state(id, &["COMPLETED", "FAILED"], 60);
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            format!("batch size=2 id={id} id1={} g0=node1 g1=node[2-3] n1=2 nodes=node1", id + 1).as_str(),
            "task rank=0 of=3 on=node1 cpt=2 size=2 g1=node[2-3]",
            "task rank=1 of=3 on=node2 cpt=1 size=2 g1=node[2-3]",
            "task rank=2 of=3 on=node3 cpt=1 size=2 g1=node[2-3]",
            "default on=node1",
            "parts rank=0 on=node1",
            "parts rank=1 on=node2",
            "parts rank=2 on=node3",
            "one on=node2",
            "one on=node3",
        ],
        "{text}"
    );
    assert_eq!(c.job(id)["JobState"], "COMPLETED");
    // scontrol shows each component, with Slurm's HetJob keys.
    let shown = c.ok("scontrol", &["show", "job", &id.to_string()]);
    assert!(shown.contains(&format!("JobId={id} HetJobId={id} HetJobOffset=0")), "{shown}");
    assert!(shown.contains(&format!("JobId={} HetJobId={id} HetJobOffset=1", id + 1)), "{shown}");
    assert!(shown.contains(&format!("HetJobIdSet={id}-{}", id + 1)), "{shown}");
    let one = c.ok("scontrol", &["show", "job", &format!("{id}+1")]);
    assert!(one.contains("HetJobOffset=1") && !one.contains("HetJobOffset=0"), "{one}");
    // Accounting: one row per component, by N+K, with each component's own nodes.
    let acct = c.ok("sacct", &["-nXP", "-j", &id.to_string(), "-o", "JobID,State,NodeList"]);
    assert_eq!(acct, format!("{id}+0|COMPLETED|node1\n{id}+1|COMPLETED|node[2-3]\n"));
    assert_eq!(c.ok("sacct", &["-nXP", "-j", &format!("{id}+1"), "-o", "JobID"]).trim(), format!("{id}+1"));
    assert_eq!(c.ok("sacct", &["-nXP", "-j", &id.to_string(), "--whole-hetjob=no", "-o", "JobID"]).trim(), format!("{id}+0"));
    assert_eq!(c.ok("sacct", &["-nXP", "-j", &format!("{id}+1"), "--whole-hetjob", "-o", "JobID"]), format!("{id}+0\n{id}+1\n"));
    // The next job's id is past the components' ids.
    let next = c.sbatch(&["-o", "/dev/null", "--wrap", "sleep 300"]);
    assert_eq!(next, id + 2);
    c.wait_state(next, &["RUNNING"], 30);
    // Refused: a later component charged elsewhere, --het-group in an ordinary job.
    let o = c.run("sbatch", &["-n1", ":", "-A", "other", "-n1", "--wrap", "true"]);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(err(&o).contains("one account"), "{}", err(&o));
    let o = c.run("srun", &["--jobid", &next.to_string(), "--het-group=1", "true"]);
    assert_ne!(o.status.code(), Some(0));
    assert!(err(&o).contains("--het-group expected to be used within an HetJob allocation"), "{}", err(&o));
    assert!(c.run("scancel", &[&next.to_string()]).status.success());
}
