//! End-to-end tests of the query commands against a real cluster: `squeue`, `sacct`,
//! `scontrol`, `sinfo` and `scancel` with Slurm's options, formats, input variables, `--json`,
//! `--help` and `--version`, bad values included (a clear Slurm-style error, exit 1).

mod common;

use common::*;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Runs a Slurm command with extra environment variables.
fn run_env(c: &Cluster, cmd: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut k = Command::new(c.shims.join(cmd));
    k.args(args).current_dir(&c.work).env("TANDEM_SERVER", format!("unix://{}", c.sock));
    for (a, b) in env {
        k.env(a, b);
    }
    k.output().unwrap()
}

fn out(o: &Output) -> String {
    assert!(o.status.success(), "failed: {}{}", String::from_utf8_lossy(&o.stderr), String::from_utf8_lossy(&o.stdout));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The command fails with exit code 1 and this on its standard error.
fn fails(c: &Cluster, cmd: &str, args: &[&str], want: &str) {
    let o = c.run(cmd, args);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{cmd} {args:?}: {e}");
    assert!(e.contains(want), "{cmd} {args:?}: wanted {want:?} in {e:?}");
}

/// This year, as the date line ends.
fn jiff_year() -> String {
    String::from_utf8(Command::new("date").args(["-u", "+%Y"]).output().unwrap().stdout).unwrap().trim().to_string()
}

fn user() -> String {
    String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout).unwrap().trim().to_string()
}

fn uid() -> String {
    String::from_utf8(Command::new("id").arg("-u").output().unwrap().stdout).unwrap().trim().to_string()
}

#[test]
fn query_commands_as_slurms() {
    let cfg = "[[partition]]\nname = \"cpu\"\nnodes = \"node1\"\nmax_time = \"1:00:00\"\ndefault = true\n\
               [[partition]]\nname = \"gpu\"\nnodes = \"node2\"\n";
    let c = Cluster::with_config("query", 2, None, 30, Some(cfg));

    // --version and --help on every command.
    for cmd in ["sbatch", "squeue", "scancel", "sinfo", "sacct", "srun", "salloc", "scontrol", "sprio"] {
        assert_eq!(c.ok(cmd, &["--version"]), "slurm 25.11.0\n", "{cmd}");
        assert_eq!(c.ok(cmd, &["-V"]), "slurm 25.11.0\n", "{cmd}");
        assert!(c.ok(cmd, &["--help"]).starts_with(&format!("Usage: {cmd}")), "{cmd}");
    }

    // A job that ends, one cancelled while running, an array held pending.
    let done = c.sbatch(&["-J", "a-rather-long-job-name", "--mem=1G", "-o", "done-%j.out", "--wrap", "sleep 1"]);
    let sleeper = c.sbatch(&["-J", "sleeper", "-p", "gpu", "-t", "5", "--wrap", "sleep 300"]);
    let arr = c.sbatch(&["--array=3-5%2", "--hold", "-J", "arr", "-o", "/dev/null", "--wrap", "true"]);
    c.wait_state(done, &["COMPLETED"], 30);
    c.wait_state(sleeper, &["RUNNING"], 30);

    // squeue: Slurm's default, -l, codes, -O, filters, collapsed array tasks, -r, sort.
    let q = c.ok("squeue", &[]);
    assert!(q.starts_with("             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n"), "{q}");
    assert!(q.contains(&format!("{arr}_[3-5%2]")), "pending tasks collapse: {q}");
    let r = c.ok("squeue", &["-h", "-r", "-o", "%i"]);
    for k in 3..=5 {
        assert!(r.lines().any(|l| l == format!("{arr}_{k}")), "{r}");
    }
    let l = c.ok("squeue", &["-l", "-n", "sleeper"]);
    assert!(l.lines().nth(1).unwrap().contains("STATE       TIME TIME_LIMI  NODES"), "{l}");
    assert!(l.lines().next().unwrap().ends_with(&jiff_year()), "a date line first, as Slurm's: {l}");
    assert!(l.contains("RUNNING") && l.contains("5:00"), "{l}");
    let codes = c.ok("squeue", &["-h", "-n", "sleeper", "-o", "%L|%e|%m|%c|%E|%F|%K|%o|%p"]);
    let f: Vec<&str> = codes.trim().split('|').collect();
    assert!(f[0].starts_with('4') || f[0].starts_with('5'), "time left: {codes}");
    assert_eq!((f[2], f[3], f[4], f[5], f[6]), ("0", "1", "(null)", &*sleeper.to_string(), "N/A"), "{codes}");
    let long = c.ok("squeue", &["-h", "-O", "JobID:10,Name:.8,Partition:4|", "-w", "node2"]);
    assert_eq!(long.trim_end(), format!("{:<10} sleepergpu |", sleeper), "{long}");
    assert_eq!(c.ok("squeue", &["-h", "-A", "nosuch"]).trim(), "");
    let sorted = c.ok("squeue", &["-h", "-r", "-o", "%i", "--sort=-i"]);
    assert_eq!(sorted.lines().next().unwrap(), format!("{arr}_5"), "{sorted}");
    let env = out(&run_env(&c, "squeue", &["-h", "-n", "sleeper"], &[("SQUEUE_FORMAT", "%j:%P")]));
    assert_eq!(env.trim(), "sleeper:gpu");
    let env = out(&run_env(&c, "squeue", &["-h", "-n", "sleeper"], &[("SQUEUE_FORMAT2", "name:10,partition:5")]));
    assert_eq!(env.trim(), "sleeper   gpu");
    // SLURM_TIME_FORMAT: relative (today: the time alone), a strftime format, and a bad one
    // said and the standard form kept, as Slurm's.
    let rel = out(&run_env(&c, "squeue", &["-h", "-n", "sleeper", "-o", "%V"], &[("SLURM_TIME_FORMAT", "relative")]));
    let rel = rel.trim();
    assert!(rel.len() == 8 && rel.as_bytes()[2] == b':' || rel.starts_with("Ystday"), "{rel}");
    let year = out(&run_env(&c, "squeue", &["-h", "-n", "sleeper", "-o", "%V"], &[("SLURM_TIME_FORMAT", "%Y!")]));
    assert_eq!(year.trim(), format!("{}!", jiff_year()));
    let o = run_env(&c, "squeue", &["-h", "-n", "sleeper", "-o", "%V"], &[("SLURM_TIME_FORMAT", "bogus")]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("squeue: error: invalid SLURM_TIME_FORMAT = 'bogus'"), "{o:?}");
    assert!(out(&o).trim().starts_with(&format!("{}-", jiff_year())), "{o:?}");
    let j = out(&run_env(&c, "squeue", &["--json", "-n", "sleeper"], &[]));
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v["jobs"][0]["job_id"], sleeper);
    assert_eq!(v["jobs"][0]["job_state"], serde_json::json!(["RUNNING"]));
    assert_eq!(v["jobs"][0]["time_limit"]["number"], 5);
    assert_eq!(v["meta"]["plugin"]["data_parser"], "data_parser/v0.0.44");
    // Every field of data_parser v0.0.44's objects, as the generated list from Slurm's parser
    // table names them (scripts/data-parser-fields.sh), in each command's --json.
    let json_of = |cmd: &str, args: &[&str]| -> serde_json::Value { serde_json::from_str(&out(&run_env(&c, cmd, args, &[]))).unwrap() };
    let sid = sleeper.to_string();
    for (object, v) in [
        ("JOB_INFO", json_of("squeue", &["--json", "-n", "sleeper"])["jobs"][0].clone()),
        ("JOB_INFO", json_of("scontrol", &["show", "job", &sid, "--json"])["jobs"][0].clone()),
        ("JOB", json_of("sacct", &["--json", "-j", &sid])["jobs"][0].clone()),
        ("NODE", json_of("scontrol", &["show", "node", "--json"])["nodes"][0].clone()),
        ("PARTITION_INFO", json_of("scontrol", &["show", "partition", "--json"])["partitions"][0].clone()),
    ] {
        assert!(v.is_object(), "{object}: {v}");
        let fields = include_str!("../../cli/data-parser-v0.0.44.txt");
        let mut n = 0;
        for (path, ty) in fields.lines().filter(|l| !l.starts_with('#')).filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[0] == object).then(|| (w[1], w[2]))
        }) {
            let at = path.split('/').try_fold(&v, |at, k| at.get(k));
            assert!(at.is_some(), "{object}: no {path} ({ty}) in {v}");
            n += 1;
        }
        assert!(n > 20, "{object}: {n} fields checked");
    }
    assert!(v["jobs"][0]["job_resources"]["nodes"]["allocation"].is_array(), "a running job's allocation: {v}");
    fails(&c, "squeue", &["-o", "%!"], "Invalid job format specification: !");
    fails(&c, "squeue", &["-O", "Bogus"], "Invalid job format specification: Bogus");
    fails(&c, "squeue", &["--sort", "X"], "Invalid sort specification");
    fails(&c, "squeue", &["-t", "nope"], "Invalid job state specified: nope");
    fails(&c, "squeue", &["-l", "-o", "%i"], "mutually exclusive");
    fails(&c, "squeue", &["-i", "0"], "--iterate");
    fails(&c, "squeue", &["--bogus"], "unrecognized option '--bogus'");
    fails(&c, "squeue", &["-j", "12;rm"], "Invalid job id: 12;rm");

    // squeue's filters -u -p -q, --start, and the SQUEUE_* variables (an option wins).
    let me = user();
    let ids = |args: &[&str], env: &[(&str, &str)]| -> Vec<String> {
        let mut a = vec!["-h", "-o", "%i"];
        a.extend_from_slice(args);
        out(&run_env(&c, "squeue", &a, env)).lines().map(str::to_string).collect()
    };
    let (s, pend) = (sleeper.to_string(), format!("{arr}_[3-5%2]"));
    assert_eq!(ids(&["-u", &me], &[]), vec![pend.clone(), s.clone()]);
    assert_eq!(ids(&["-u", &uid()], &[]), vec![pend.clone(), s.clone()], "a uid as a user");
    assert!(ids(&["-u", "4242"], &[]).is_empty(), "a uid without jobs (or an account here)");
    let o = c.run("squeue", &["-h", "-u", &format!("nosuchuser,{me}")]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("squeue: error: Invalid user: nosuchuser"), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 2, "the known user's jobs still listed: {o:?}");
    assert_eq!(ids(&["-p", "gpu"], &[]), vec![s.clone()]);
    assert_eq!(ids(&["-p", "cpu,gpu"], &[]), vec![pend.clone(), s.clone()]);
    assert!(ids(&["-p", "nosuch"], &[]).is_empty());
    assert_eq!(ids(&["-q", "normal"], &[]), vec![pend.clone(), s.clone()]);
    assert!(ids(&["--qos=nosuch"], &[]).is_empty());
    let start = c.ok("squeue", &["--start"]);
    assert!(start.lines().next().unwrap().contains("ST          START_TIME  NODES SCHEDNODES           NODELIST(REASON)"), "{start}");
    let first: Vec<&str> = start.lines().skip(1).filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(first, vec![pend.as_str()], "--start lists pending jobs only: {start}");
    assert_eq!(ids(&[], &[("SQUEUE_PARTITION", "gpu")]), vec![s.clone()]);
    assert_eq!(ids(&["-p", "cpu"], &[("SQUEUE_PARTITION", "gpu")]), vec![pend.clone()], "the option wins");
    assert_eq!(ids(&[], &[("SQUEUE_USERS", "4242")]), Vec::<String>::new());
    assert_eq!(ids(&["-u", &me], &[("SQUEUE_USERS", "4242")]), vec![pend.clone(), s.clone()]);
    assert_eq!(ids(&[], &[("SQUEUE_ACCOUNT", &me)]), vec![pend.clone(), s.clone()]);
    assert!(ids(&[], &[("SQUEUE_ACCOUNT", "nosuch")]).is_empty());
    assert_eq!(ids(&[], &[("SQUEUE_NAMES", "sleeper")]), vec![s.clone()]);
    assert!(ids(&[], &[("SQUEUE_QOS", "nosuch")]).is_empty());
    assert_eq!(ids(&[], &[("SQUEUE_STATES", "R")]), vec![s.clone()]);
    assert_eq!(ids(&["-t", "PD"], &[("SQUEUE_STATES", "R")]), vec![pend.clone()]);
    let r = ids(&[], &[("SQUEUE_ARRAY", "1"), ("SQUEUE_SORT", "-i")]);
    assert_eq!(r, vec![format!("{arr}_5"), format!("{arr}_4"), format!("{arr}_3"), s.clone()], "SQUEUE_ARRAY, SQUEUE_SORT");
    assert_eq!(ids(&["-S", "i"], &[("SQUEUE_SORT", "-i")])[0], s, "-S wins over SQUEUE_SORT");
    let o = run_env(&c, "squeue", &[], &[("SQUEUE_STATES", "nope")]);
    assert!(o.status.code() == Some(1) && String::from_utf8_lossy(&o.stderr).contains("Invalid job state specified: nope"), "{o:?}");

    // scontrol: every job, an array task, times as HH:MM:SS, StdOut expanded, -o, partitions,
    // nodes, config, ping, --json.
    let all = c.ok("scontrol", &["show", "job"]);
    assert!(all.contains(&format!("JobId={done} ")) && all.contains(&format!("JobId={sleeper} ")), "{all}");
    let j = c.job(done);
    assert!(j["TimeLimit"].len() == 8 && j["TimeLimit"].ends_with(":00:00"), "{j:?}");
    assert!(j["RunTime"].len() == 8 && j["RunTime"].starts_with("00:00:0"), "{j:?}");
    assert_eq!(j["StdOut"], format!("{}/done-{done}.out", c.work.display()));
    assert_eq!(j["MinMemoryNode"], "1G");
    let task = c.ok("scontrol", &["show", "job", &format!("{arr}_4")]);
    assert!(task.contains(&format!("ArrayJobId={arr} ArrayTaskId=4")), "{task}");
    let one = c.ok("scontrol", &["-o", "show", "job", &sleeper.to_string()]);
    assert_eq!(one.lines().count(), 1, "{one}");
    assert!(one.contains("JobState=RUNNING") && one.contains("Partition=gpu"), "{one}");
    let parts = c.ok("scontrol", &["show", "partition"]);
    assert!(parts.contains("PartitionName=cpu") && parts.contains("Default=YES") && parts.contains("MaxTime=01:00:00"), "{parts}");
    assert!(c.ok("scontrol", &["show", "partition", "gpu"]).contains("Nodes=node2"));
    let nodes = c.ok("scontrol", &["-o", "show", "node"]);
    assert_eq!(nodes.lines().count(), 2, "{nodes}");
    assert!(nodes.lines().next().unwrap().starts_with("NodeName=node1 ") && nodes.contains("Partitions=gpu"), "{nodes}");
    let conf = c.ok("scontrol", &["show", "config"]);
    assert!(conf.contains("ClusterName") && conf.contains("SLURM_VERSION           = 25.11.0"), "{conf}");
    assert!(conf.lines().any(|l| l.starts_with("TandemCommit            = ") && l.len() > 26), "{conf}");
    assert!(c.ok("scontrol", &["ping"]).contains("is UP"));
    // tandem status: one controller on SQLite, leading, its nodes.
    let st = c.tandem(&["status"]);
    let text = String::from_utf8_lossy(&st.stdout);
    assert!(st.status.success(), "{text}{}", String::from_utf8_lossy(&st.stderr));
    assert!(text.contains(" leads\n") && text.contains("Store:      SQLite") && text.contains("Nodes:      2 up of 2"), "{text}");
    let st = c.tandem(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(
        (v["healthy"].as_bool(), v["status"]["store"].as_str(), v["status"]["nodes_up"].as_u64()),
        (Some(true), Some("sqlite"), Some(2))
    );
    let v: serde_json::Value = serde_json::from_str(&c.ok("scontrol", &["show", "node", "node2", "--json"])).unwrap();
    assert_eq!(v["nodes"][0]["name"], "node2");
    let v: serde_json::Value = serde_json::from_str(&c.ok("scontrol", &["--json", "show", "partition"])).unwrap();
    assert_eq!(v["partitions"].as_array().unwrap().len(), 2);
    fails(&c, "scontrol", &["show", "job", "12;rm"], "Invalid job id specified");
    fails(&c, "scontrol", &["show", "job", "999999"], "Invalid job id specified");
    fails(&c, "scontrol", &["show", "partition", "nosuch"], "Partition nosuch not found");
    fails(&c, "scontrol", &["show", "node", "nosuch"], "Node nosuch not found");
    fails(&c, "scontrol", &["frobnicate"], "invalid scontrol command");

    // sinfo: -o, -p, -s, SINFO_FORMAT, --json.
    assert_eq!(c.ok("sinfo", &["-h", "-o", "%P %N", "-p", "gpu"]).trim(), "gpu node2");
    let s = c.ok("sinfo", &["-s"]);
    assert!(s.starts_with("PARTITION AVAIL  TIMELIMIT   NODES(A/I/O/T) NODELIST"), "{s}");
    assert!(s.contains("cpu*") && s.contains("0/1/0/1") && s.contains("1/0/0/1"), "{s}");
    let l = c.ok("sinfo", &["-l"]);
    assert!(
        l.lines()
            .nth(1)
            .unwrap()
            .starts_with("PARTITION AVAIL  TIMELIMIT   JOB_SIZE ROOT OVERSUBS     GROUPS  NODES       STATE RESERVATION NODELIST"),
        "{l}"
    );
    let nl = c.ok("sinfo", &["-N", "-l", "-h"]);
    assert_eq!(nl.lines().count(), 2, "{nl}");
    let env = out(&run_env(&c, "sinfo", &["-h"], &[("SINFO_FORMAT", "%R:%D")]));
    assert_eq!(env.lines().collect::<Vec<_>>(), vec!["cpu:1", "gpu:1"]);
    // SINFO_PARTITION and SINFO_SORT stand for -p and -S; -N keeps its own format over SINFO_FORMAT.
    let env = out(&run_env(&c, "sinfo", &["-h", "-o", "%R"], &[("SINFO_PARTITION", "gpu")]));
    assert_eq!(env.trim(), "gpu");
    let env = out(&run_env(&c, "sinfo", &["-h", "-o", "%R"], &[("SINFO_SORT", "-P")]));
    assert_eq!(env.lines().collect::<Vec<_>>(), vec!["gpu", "cpu"]);
    let env = out(&run_env(&c, "sinfo", &["-h", "-N"], &[("SINFO_FORMAT", "%R:%D")]));
    assert!(!env.contains("cpu:1"), "{env}");
    let v: serde_json::Value = serde_json::from_str(&c.ok("sinfo", &["--json"])).unwrap();
    assert_eq!(v["sinfo"].as_array().unwrap().len(), 2);
    fails(&c, "sinfo", &["-o", "%Y"], "Invalid node format specification: Y");
    fails(&c, "sinfo", &["--bogus"], "unrecognized option");
    let long = c.ok("sinfo", &["-h", "-O", "PartitionName:6,Nodes:.4,NodeList:6|", "-p", "gpu"]);
    assert_eq!(long.trim_end(), "gpu      1node2 |", "{long}");
    let long = c.ok("sinfo", &["-O", "Partition,StateLong"]);
    assert_eq!(long.lines().next().unwrap().trim_end(), format!("{:<20}{:<20}", "PARTITION", "STATE").trim_end(), "{long}");
    fails(&c, "sinfo", &["-O", "Bogus"], "Invalid node format specification: Bogus");
    fails(&c, "sinfo", &["-O", "NodeList|"], "Invalid node format specification: NodeList|");

    // scancel -u -p -A: the filters select together; a job in another partition or account
    // stays, an unknown user is refused.
    let held_cpu = c.sbatch(&["-p", "cpu", "--hold", "-o", "/dev/null", "--wrap", "true"]);
    let held_gpu = c.sbatch(&["-p", "gpu", "--hold", "-o", "/dev/null", "--wrap", "true"]);
    fails(&c, "scancel", &["-u", "nosuchuser"], "Invalid user name: nosuchuser");
    c.ok("scancel", &["-A", "nosuch", "-u", &me]);
    c.ok("scancel", &["-u", &me, "-p", "gpu", "-t", "PD", &held_cpu.to_string(), &held_gpu.to_string()]);
    c.wait_state(held_gpu, &["CANCELLED"], 30);
    assert_eq!(c.job(held_cpu)["JobState"], "PENDING", "another partition's job stays");
    c.ok("scancel", &["-A", &me, "-p", "cpu", "-n", "wrap"]);
    c.wait_state(held_cpu, &["CANCELLED"], 30);
    assert_eq!(c.job(sleeper)["JobState"], "RUNNING", "{:?}", c.job(sleeper));

    // scancel: by name and state; a bad state is refused.
    fails(&c, "scancel", &["-t", "COMPLETED"], "Invalid job state specified");
    fails(&c, "scancel", &["-t", "nope"], "Invalid job state specified: nope");
    c.ok("scancel", &["-n", "sleeper", "-t", "R"]);
    c.wait_state(sleeper, &["CANCELLED"], 30);
    c.ok("scancel", &["--me", "-n", "arr"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !c.ok("squeue", &["-h"]).trim().is_empty() {
        assert!(Instant::now() < deadline, "{}", c.ok("squeue", &[]));
        std::thread::sleep(Duration::from_millis(100));
    }

    // sacct: Elapsed as HH:MM:SS, widths, the fields the controller knows, a cancelled job as
    // Slurm's, -S/-E, -s, -b, -l, --units, SACCT_FORMAT, --json.
    let id = done.to_string();
    let a = c.ok("sacct", &["-j", &id, "-X", "-P", "-n", "--format=Elapsed,NNodes,NCPUS,ReqMem,CPUTime,WorkDir,QOS,ReqTRES,AllocTRES"]);
    let f: Vec<&str> = a.trim().split('|').collect();
    assert!(f[0].starts_with("00:00:0"), "{a}");
    assert_eq!((f[1], f[2], f[3]), ("1", "1", "1G"), "{a}");
    assert!(f[4].starts_with("00:00:0"), "{a}");
    assert_eq!((f[5], f[6]), (&*c.work.display().to_string(), "normal"), "{a}");
    assert_eq!(f[7], "billing=1,cpu=1,mem=1G,node=1", "{a}");
    assert_eq!(f[8], f[7], "{a}");
    assert_eq!(c.ok("sacct", &["-j", &id, "-X", "-P", "-n", "--format=ReqMem", "--units=K"]).trim(), "1048576K");
    let w = c.ok("sacct", &["-j", &id, "-X", "-n", "--format=JobName%30,JobName"]);
    assert_eq!(w.trim_end(), format!("{:>30} a-rather-+", "a-rather-long-job-name"), "{w}");
    // As Slurm's: scancel sends SIGTERM first, so the job ends with signal 15.
    let cancelled = c.ok("sacct", &["-j", &sleeper.to_string(), "-P", "-n", "--format=JobID,State,ExitCode"]);
    assert!(cancelled.lines().next().unwrap().ends_with(&format!("|CANCELLED by {}|0:15", uid())), "{cancelled}");
    assert!(cancelled.lines().any(|l| l == format!("{sleeper}.batch|CANCELLED|0:15")), "{cancelled}");
    let since = c.ok("sacct", &["-X", "-n", "-P", "--format=JobID", "-S", "now-1hour"]);
    assert!(since.lines().any(|l| l == id), "{since}");
    assert_eq!(c.ok("sacct", &["-X", "-n", "-S", "now+1hour", "-E", "now+2hours"]).trim(), "");
    assert_eq!(c.ok("sacct", &["-X", "-n", "-P", "--format=JobID", "-S", "2000-01-01", "-E", "2000-01-02"]).trim(), "");
    let st = c.ok("sacct", &["-X", "-n", "-P", "--format=JobID", "-s", "CA"]);
    assert!(st.lines().any(|l| l == sleeper.to_string()) && !st.lines().any(|l| l == id), "{st}");
    let b = c.ok("sacct", &["-b", "-j", &id, "-X"]);
    assert!(b.starts_with(&format!("{:<12} {:>10} {:>8} \n------------ ---------- -------- \n", "JobID", "State", "ExitCode")), "{b:?}");
    let l = c.ok("sacct", &["-l", "-j", &id, "-X", "-P"]);
    assert!(l.starts_with("JobID|JobIDRaw|JobName|Partition|MaxVMSize|"), "{l}");
    let env = out(&run_env(&c, "sacct", &["-j", &id, "-X", "-n", "-P"], &[("SACCT_FORMAT", "JobName,Partition")]));
    assert_eq!(env.trim(), "a-rather-long-job-name|cpu");
    let p = c.ok("sacct", &["-j", &id, "-X", "-n", "-p", "--format=JobID,State"]);
    assert_eq!(p.trim(), format!("{id}|COMPLETED|"));
    let v: serde_json::Value = serde_json::from_str(&c.ok("sacct", &["-j", &id, "--json"])).unwrap();
    assert_eq!(v["jobs"][0]["job_id"], done);
    assert_eq!(v["jobs"][0]["state"]["current"], serde_json::json!(["COMPLETED"]));
    assert_eq!(v["jobs"][0]["exit_code"]["status"], serde_json::json!(["SUCCESS"]));
    assert_eq!(v["jobs"][0]["tres"]["requested"][1], serde_json::json!({"type": "mem", "name": "", "id": 2, "count": 1024}));
    assert_eq!(v["jobs"][0]["time"]["limit"]["number"], 60);
    // sacct -u -A -r --name --delimiter --noconvert -e -D.
    let jobs = |args: &[&str]| -> Vec<String> {
        let mut a = vec!["-X", "-n", "-P", "--format=JobID", "-S", "now-1hour"];
        a.extend_from_slice(args);
        c.ok("sacct", &a).lines().map(str::to_string).collect()
    };
    let (sl, hc, hg) = (sleeper.to_string(), held_cpu.to_string(), held_gpu.to_string());
    let every = jobs(&[]);
    assert!([&id, &sl, &hc, &hg].iter().all(|j| every.contains(j)), "{every:?}");
    assert_eq!(jobs(&["-u", &me]), every);
    assert_eq!(jobs(&["--uid", &uid()]), every, "a uid");
    assert_eq!(jobs(&["-a"]), every);
    assert!(jobs(&["-u", "4242"]).is_empty());
    assert_eq!(jobs(&["-u", "4242", "-a"]), every, "-a after -u: all users");
    assert_eq!(jobs(&["-u", "-1"]), every, "-u -1: all users");
    assert_eq!(jobs(&["-A", &me]), every);
    assert!(jobs(&["--accounts=nosuch"]).is_empty());
    assert_eq!(jobs(&["-r", "gpu"]), vec![sl.clone(), hg.clone()]);
    assert_eq!(jobs(&["--partition=gpu", "--name=sleeper"]), vec![sl.clone()]);
    assert_eq!(jobs(&["--name", "nosuch,a-rather-long-job-name"]), vec![id.clone()]);
    assert_eq!(jobs(&["-D"]), every, "one record per job");
    let d = c.ok("sacct", &["-j", &id, "-X", "-n", "-P", "--delimiter=;", "--format=JobID,State,ReqMem"]);
    assert_eq!(d.trim(), format!("{id};COMPLETED;1G"));
    let d = c.ok("sacct", &["-j", &id, "-X", "-n", "-p", "--delimiter", "::", "--format=JobID,State"]);
    assert_eq!(d.trim(), format!("{id}::COMPLETED::"));
    let d = c.ok("sacct", &["-j", &id, "-X", "-n", "--delimiter=;", "--format=JobID%8,State"]);
    assert_eq!(d.trim_end(), format!("{id:<8}  COMPLETED"), "the delimiter only with -p/-P: {d:?}");
    assert_eq!(c.ok("sacct", &["-j", &id, "-X", "-n", "-P", "--noconvert", "--format=ReqMem"]).trim(), "1024M");
    assert_eq!(c.ok("sacct", &["-j", &id, "-X", "-n", "-P", "--noconvert", "--units=G", "--format=ReqMem"]).trim(), "1G", "--units wins");
    let e = c.ok("sacct", &["-e"]);
    for f in ["JobID", "JobName", "MaxRSS", "ReqMem", "Elapsed", "WCKey"] {
        assert!(e.split_whitespace().any(|w| w == f), "{f} in {e}");
    }
    assert_eq!(c.ok("sacct", &["--helpformat"]), e);
    fails(&c, "sacct", &["-u", "nosuchuser"], "Invalid user id: nosuchuser");
    fails(&c, "sacct", &["--delimiter"], "requires an argument");
    fails(&c, "sacct", &["-S", "yesterdayish"], "Invalid time specification: yesterdayish");
    fails(&c, "sacct", &["-E", "now-5parsecs"], "Invalid time specification");
    fails(&c, "sacct", &["--format=JobName%x"], "Invalid field width");
    fails(&c, "sacct", &["--format=Nope"], "Invalid field requested: \"Nope\"");
    fails(&c, "sacct", &["-s", "nope"], "Invalid job state specified: nope");
    fails(&c, "sacct", &["--units=X"], "Invalid unit type");
    fails(&c, "sacct", &["-S", "now", "-E", "now-1day"], "after end time");
}

/// The options of Slurm's man pages that issue 28 added to the query commands, each with
/// Slurm's meaning: squeue's steps, licenses and reservations; sinfo's node filters, sort and
/// reservations; sacct's filters and --yaml; scancel's filters; sshare's and sprio's formats;
/// and the options refused or set aside saying so.
#[test]
fn query_options_of_slurms_man_pages() {
    let c = Cluster::with_features("qopts", &["fast", "slow"], None);
    let me = user();
    // A job with a running step, on the fast node, with a WCKey.
    let a = c.sbatch(&["-J", "stepper", "-C", "fast", "--wckey=wk1", "-t", "10", "--wrap", "srun -J inner sleep 60"]);
    c.wait_state(a, &["RUNNING"], 30);
    let deadline = Instant::now() + Duration::from_secs(20);
    let step = format!("{a}.0");
    while !c.ok("squeue", &["-h", "-s", "-o", "%i"]).lines().any(|l| l == step) {
        assert!(Instant::now() < deadline, "no step {step}: {}", c.ok("squeue", &["-s"]));
        std::thread::sleep(Duration::from_millis(100));
    }

    // squeue -s: Slurm's step format, a step by id attached, no step of another job.
    let s = c.ok("squeue", &["-s"]);
    assert!(s.starts_with("         STEPID     NAME PARTITION     USER      TIME NODELIST\n"), "{s}");
    assert_eq!(c.ok("squeue", &["-h", &format!("-s{step}"), "-o", "%i %j %N"]).trim(), format!("{step} inner node1"));
    assert_eq!(c.ok("squeue", &["-h", &format!("--steps={a}.7"), "-o", "%i"]), "");
    // No licenses here, and no job in a reservation: those filters match no job.
    assert_eq!(c.ok("squeue", &["-h", "-L", "matlab"]), "");
    assert_eq!(c.ok("squeue", &["-h", "--reservation=maint"]), "");
    assert_eq!(c.ok("squeue", &["-hP", "-o", "%i"]).trim(), a.to_string());

    // sinfo: node states, names, dead and responding nodes, sort, reservations.
    let nodes = |args: &[&str]| c.ok("sinfo", args).lines().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(nodes(&["-hN", "-t", "alloc,MIX", "-o", "%N"]), ["node1"]);
    assert_eq!(nodes(&["-hN", "--states=idle", "-o", "%N"]), ["node2"]);
    assert_eq!(nodes(&["-hN", "-n", "node[2-3]", "-o", "%N"]), ["node2"]);
    assert_eq!(nodes(&["-hNr", "-S", "-N", "-o", "%N"]), ["node2", "node1"]);
    assert!(nodes(&["-hd"]).is_empty());
    // Both nodes alike: one line still.
    assert_eq!(nodes(&["-he", "-o", "%D"]), ["2"]);
    assert_eq!(c.ok("sinfo", &["-T"]), "No reservations in the system\n", "as Slurm's");
    assert_eq!(c.ok("scontrol", &["show", "reservation"]), "No reservations in the system\n");
    fails(&c, "sinfo", &["-t", "sleepy"], "Invalid node state specified: sleepy");

    // sacct: the new filters, each for and against the job.
    let ids = |args: &[&str]| {
        let mut a = vec!["-nXP", "-o", "JobID"];
        a.extend_from_slice(args);
        c.ok("sacct", &a).trim().to_string()
    };
    let id = a.to_string();
    let field = |f: &str| c.ok("sacct", &["-nXP", "-j", &id, "-o", f]).trim().to_string();
    let (qos, gid) = (field("QOS"), field("GID"));
    let reason = c.ok("squeue", &["-h", "-j", &id, "-o", "%r"]).trim().to_string();
    for (yes, no) in [
        (vec!["-N", "node1"], vec!["-N", "node2"]),
        (vec!["-C", "fast"], vec!["--constraints=slow"]),
        (vec!["-W", "wk1"], vec!["--wckeys=wk2"]),
        (vec!["-i", "1"], vec!["--nnodes=2-3"]),
        (vec!["-I", "1-64"], vec!["--ncpus=65-"]),
        (vec!["-k", "10"], vec!["-k", "5", "-K", "9"]),
        (vec!["-q", &qos], vec!["--qos=nosuchqos"]),
        (vec!["-R", &reason], vec!["--reason=BadConstraints"]),
        (vec!["-g", &gid], vec!["--group=99999"]),
    ] {
        assert_eq!(ids(&yes), id, "{yes:?}");
        assert_eq!(ids(&no), "", "{no:?}");
    }
    assert_eq!(ids(&["-x", "1"]), "");
    assert!(c.ok("sacct", &["-X", "--yaml", "-j", &id]).contains(&format!("job_id: {a}")));
    fails(&c, "sacct", &["-f", "/var/log/slurm/jobcomp.log"], "--file: this cluster keeps no job completion files");
    fails(&c, "sacct", &["-B", "-j", &id], "--batch-script: job scripts are not stored");
    assert!(c.ok("sacct", &["--help"]).contains("--use-local-uid   accepted"));

    // sprio and sshare: Slurm's formats.
    assert_eq!(c.ok("sprio", &["-o", "%i %u %Y"]).trim(), "JOBID USER PRIORITY");
    fails(&c, "sprio", &["-w"], "--weights: this controller does not publish its priority weights");
    let sh = c.ok("sshare", &["-P", "-o", "Account,FairShare"]);
    assert!(sh.starts_with("Account|FairShare\n"), "{sh}");
    assert!(sh.lines().skip(1).all(|l| l.split('|').count() == 2), "{sh}");

    // scancel: filters that match nothing leave the job; --wckey and -w cancel it.
    for f in [&["--wckey=wk2"][..], &["-q", "high"], &["-w", "node2"], &["-R", "maint"]] {
        let mut args = vec!["-u", me.as_str()];
        args.extend_from_slice(f);
        assert!(c.run("scancel", &args).status.success(), "{f:?}");
    }
    assert_eq!(c.job(a)["JobState"], "RUNNING");
    assert!(c.run("scancel", &["-u", &me, "--wckey=wk1", "-w", "node[1-2]", "-H", "--ctld"]).status.success());
    c.wait_state(a, &["CANCELLED"], 30);
}
