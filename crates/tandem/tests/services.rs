//! End-to-end tests of inference services: a real controller and real agents on loopback,
//! replicas that are real HTTP servers, real probes, real signals. Every wait is bounded; no
//! test asserts a duration.

mod common;

use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

const ECHO: &str = r#"
name = "echo"
command = ["python3", "-m", "http.server", "--bind", "127.0.0.1", "$PORT"]
replicas = 3
[resources]
cpus = 1
memory = "256MiB"
[readiness]
http = "/"
period = "500ms"
"#;

fn show(c: &Cluster, name: &str) -> serde_json::Value {
    serde_json::from_str(&c.tandem_ok(&["service", "show", name, "--json"])).unwrap()
}

/// Waits until `f` holds of the service (shown as JSON), or fails with the last view.
fn wait_service(c: &Cluster, name: &str, secs: u64, what: &str, f: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let s = show(c, name);
        if f(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "service {name}: never {what}:\n{s:#}\ncontroller log:\n{}", c.log("controller"));
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn ready(s: &serde_json::Value) -> usize {
    s["replicas"].as_array().unwrap().iter().filter(|r| r["state"] == "Ready").count()
}

fn http_get(addr: &str) -> u16 {
    let out = std::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", &format!("http://{addr}/")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0)
}

#[test]
fn replicas_spread_over_nodes_serve_scale_and_delete() {
    let c = Cluster::new("svc", 3, None, 30);
    std::fs::write(c.work.join("echo.toml"), ECHO).unwrap();
    let out = c.tandem_ok(&["service", "apply", "-f", "echo.toml"]);
    assert!(out.contains("service/echo created (revision 1)"), "{out}");
    let out = c.tandem_ok(&["service", "apply", "-f", "echo.toml"]);
    assert!(out.contains("unchanged"), "{out}");
    let s = wait_service(&c, "echo", 60, "3 ready", |s| ready(s) == 3);
    let reps = s["replicas"].as_array().unwrap();
    let nodes: std::collections::BTreeSet<&str> = reps.iter().map(|r| r["node"].as_str().unwrap()).collect();
    assert_eq!(nodes.len(), 3, "spread over the three nodes: {s:#}");
    for r in reps {
        assert_eq!(http_get(r["addr"].as_str().unwrap()), 200, "{r}");
    }
    // /metrics over TCP takes a token (SECURITY.md I2); the Unix socket needs none.
    let m = std::process::Command::new("curl").args(["-s", "--unix-socket", &c.sock, "http://tandem/metrics"]).output().unwrap();
    let m = String::from_utf8_lossy(&m.stdout);
    assert!(m.contains("tandem_service_replicas{service=\"echo\",state=\"Ready\"} 3"), "{m}");
    let list = c.tandem_ok(&["service", "list"]);
    assert!(list.lines().any(|l| l.starts_with("echo") && l.contains("3/3")), "{list}");
    let logs = c.tandem_ok(&["service", "logs", "echo"]);
    assert!(logs.lines().any(|l| l.starts_with("[echo-") && l.contains("\"GET / HTTP/1.1\" 200")), "{logs}");
    // Replicas are jobs too: squeue shows them running, under the service's name.
    let q = c.ok("squeue", &["-h", "-o", "%j %t"]);
    assert_eq!(q.lines().filter(|l| *l == "echo R").count(), 3, "{q}");

    // More replicas than the nodes hold (3 x 4 CPUs): a rollout that cannot finish says why.
    c.tandem_ok(&["service", "scale", "echo", "40"]);
    let o = c.tandem(&["service", "rollout", "status", "echo", "--timeout", "2"]);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(!o.status.success(), "{out}");
    assert!(out.contains(" of 40 updated replicas are ready..."), "{out}");
    assert!(out.contains("replica(s) pending (Resources)"), "the reason is printed as it waits: {out}");
    assert!(err.contains("did not finish within 2 s: ") && err.contains("replica(s) pending (Resources)"), "{err}");
    c.tandem_ok(&["service", "scale", "echo", "1"]);
    let s = wait_service(&c, "echo", 60, "scaled to 1", |s| s["replicas"].as_array().unwrap().len() == 1 && ready(s) == 1);
    assert_eq!(s["scale_log"].as_array().unwrap().iter().map(|e| e[1].as_u64().unwrap()).collect::<Vec<_>>(), vec![3, 40, 1]);
    c.tandem_ok(&["service", "delete", "echo"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.tandem_ok(&["service", "list"]).lines().nth(1).is_some() {
        assert!(Instant::now() < deadline, "not deleted: {}", c.tandem_ok(&["service", "list"]));
        std::thread::sleep(Duration::from_millis(200));
    }
    let q = c.ok("squeue", &["-h"]);
    assert!(q.trim().is_empty(), "replica jobs left: {q}");
}

#[test]
fn bad_specs_are_refused_and_crash_loops_back_off_without_disturbing_others() {
    let c = Cluster::new("svcbad", 2, None, 30);
    let apply = |name: &str, text: &str| {
        std::fs::write(c.work.join(name), text).unwrap();
        c.tandem(&["service", "apply", "-f", name])
    };
    let err = |o: std::process::Output| {
        assert!(!o.status.success());
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let e = err(apply("neg.toml", &ECHO.replace("replicas = 3", "replicas = -1")));
    assert!(e.contains("replicas must be 0 or more"), "{e}");
    let e = err(apply("unknown.toml", &ECHO.replace("replicas = 3", "replicas = 3\nreplika = 2")));
    assert!(e.contains("replika"), "{e}");
    let e = err(apply("cpus.toml", &ECHO.replace("cpus = 1", "cpus = 64")));
    assert!(e.contains("CPU") || e.contains("cpu") || e.contains("node"), "{e}");
    let e = err(apply("name.toml", &ECHO.replace("name = \"echo\"", "name = \"Echo Server\"")));
    assert!(e.contains("invalid service name"), "{e}");
    let e = err(apply("yaml.yaml", "name: x\ncommand: [true]\nreplicas: [1]\n"));
    assert!(e.contains("yaml.yaml"), "{e}");
    // The fair queue's settings ([proxy] max_concurrency, max_wait, tenants).
    let fair = |extra: &str| format!("{ECHO}\n[proxy]\nbalance = \"llm\"\nmax_concurrency = 4\n{extra}");
    for (file, text, want) in [
        (
            "limit.toml",
            ECHO.replace("replicas = 3", "replicas = 3\n[proxy]\nbalance = \"llm\"\nmax_concurrency = -2"),
            "proxy.max_concurrency must be between 1",
        ),
        ("nollm.toml", ECHO.replace("replicas = 3", "replicas = 3\n[proxy]\nmax_concurrency = 4"), "needs balance = \"llm\""),
        ("weight.toml", fair("[proxy.tenants.alice]\nweight = \"heavy\"\n"), "proxy.tenants.alice.weight must be a number"),
        ("zero.toml", fair("[proxy.tenants.alice]\nweight = 0\n"), "proxy.tenants.alice.weight must be between 1 and 1000"),
        ("field.toml", fair("[proxy.tenants.alice]\nwieght = 2\n"), "wieght"),
        ("wait.toml", fair("max_wait = \"-1s\"\n"), "proxy.max_wait"),
    ] {
        let e = err(apply(file, &text));
        assert!(e.contains(want), "{file}: {e}");
    }
    // Hostile API bodies get a 400 that says what is wrong, and store nothing.
    for (path, body, want) in [
        ("/v1/services", "{\"spec\": {\"name\": \"x\", \"command\": [\"true\"]", "malformed"),
        ("/v1/services", "{\"spec\": {\"name\": \"x\", \"command\": [\"true\"], \"replicaz\": 2}, \"cwd\": \"/tmp\"}", "replicaz"),
        ("/v1/services", "{\"spec\": {\"name\": \"x\", \"command\": []}, \"cwd\": \"/tmp\"}", "command"),
        ("/v1/services", "{\"spec\": {\"name\": \"x\", \"command\": [\"true\"], \"replicas\": 1e9}, \"cwd\": \"/tmp\"}", "replicas"),
        ("/v1/services/x", "{\"action\": \"explode\"}", "malformed"),
    ] {
        let (status, text) = raw_http(&c.sock, &post(path, body, ""));
        assert_eq!(status, 400, "{path} {body}: {text}");
        assert!(text.contains(want), "{path} {body}: {text}");
    }
    // The proxies' endpoint needs a proxy's credential.
    let o = std::process::Command::new("curl")
        .args(["-s", "--http1.1", "-w", " %{http_code}", "-X", "POST", "-H", "content-type: application/json", "-d", "{\"proxy\":\"p\"}"])
        .arg("--cacert")
        .arg(c.dir.join("controller/ca.pem"))
        .arg(format!("https://{}/v1/proxy/sync", c.addr))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.ends_with(" 401") && out.contains("proxy's credential"), "{out}");
    assert!(c.tandem_ok(&["service", "list"]).lines().count() == 1, "nothing was stored");

    // A healthy service beside the broken ones.
    assert!(apply("ok.toml", &ECHO.replace("name = \"echo\"", "name = \"ok\"").replace("replicas = 3", "replicas = 2")).status.success());
    // A command that exits at once: a visible crash loop with a growing back-off.
    assert!(apply("crash.toml", "name = \"crash\"\ncommand = [\"sh\", \"-c\", \"echo dying; exit 3\"]\nreplicas = 1\n").status.success());
    // A readiness probe on a port nothing listens on: never ready, never in the endpoint set.
    assert!(
        apply(
            "deaf.toml",
            "name = \"deaf\"\ncommand = [\"sleep\", \"600\"]\nreplicas = 1\n[readiness]\ntcp = true\nport = 9\nperiod = \"500ms\"\n"
        )
        .status
        .success()
    );
    let s = wait_service(&c, "crash", 60, "crash-looping", |s| {
        s["replicas"].as_array().unwrap().iter().any(|r| r["state"] == "CrashLoopBackOff" && r["restarts"].as_u64().unwrap() >= 1)
    });
    let r = &s["replicas"][0];
    assert!(r["message"].as_str().unwrap().contains("exited with code 3"), "{r}");
    assert!(r["message"].as_str().unwrap().contains("back-off 10 s"), "{r}");
    // A command found in no directory of the replica's PATH says where it looked.
    assert!(apply("nocmd.toml", "name = \"nocmd\"\ncommand = [\"tandem-no-such-program\"]\nreplicas = 1\n").status.success());
    let s = wait_service(&c, "nocmd", 60, "its launch failed", |s| {
        s["replicas"].as_array().unwrap().iter().any(|r| r["message"].as_str().is_some_and(|m| m.contains("cannot run")))
    });
    let m = s["replicas"][0]["message"].as_str().unwrap().to_string();
    assert!(
        m.contains("cannot run tandem-no-such-program: not found in PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin; give its full path"),
        "{m}"
    );
    c.tandem_ok(&["service", "delete", "nocmd"]);
    let ok = wait_service(&c, "ok", 60, "2 ready", |s| ready(s) == 2);
    std::thread::sleep(Duration::from_secs(5));
    // Back-off, not a hot loop: 10 s before the first restart, 20 s before the second.
    let s = show(&c, "crash");
    assert!(s["replicas"][0]["restarts"].as_u64().unwrap() <= 2, "{s:#}");
    let deaf = show(&c, "deaf");
    assert_eq!(deaf["replicas"][0]["state"], "Starting", "{deaf:#}");
    assert_eq!(ready(&show(&c, "ok")), 2, "the healthy service was not disturbed");
    assert_eq!(show(&c, "ok")["replicas"], ok["replicas"]);
    let logs = c.tandem_ok(&["service", "logs", "crash"]);
    assert!(logs.contains("dying"), "{logs}");
}

#[test]
fn a_gpu_service_preempts_lower_tier_training_which_resumes_after() {
    let config = r#"
[[qos]]
name = "low"
preempt_tier = 0
grace_time = 10
[[qos]]
name = "serve"
priority = 100
preempt_tier = 2
[[qos]]
name = "high"
priority = 200
preempt_tier = 3
"#;
    let c = Cluster::with_config("svcpreempt", 2, Some("h100:2"), 30, Some(config));
    // Training that checkpoints on its signal: SIGUSR1 (its --signal) ends the run cleanly.
    let train = c.script(
        "train.sh",
        "#!/bin/bash\ntrap 'echo checkpoint run=$SLURM_RESTART_COUNT >> ckpt-$SLURM_JOB_ID.txt; exit 0' USR1 TERM\n\
         if [ \"$SLURM_RESTART_COUNT\" -gt 0 ]; then echo resumed >> ckpt-$SLURM_JOB_ID.txt; exit 0; fi\n\
         touch trapped-$SLURM_JOB_ID.txt\n\
         for i in $(seq 600); do sleep 0.1; done\n",
    );
    let low = c.sbatch(&["--qos=low", "--gpus-per-node=2", "--signal=USR1@30", "--requeue", &train]);
    let high = c.sbatch(&["--qos=high", "--gpus-per-node=2", "--wrap", "sleep 120"]);
    c.wait_state(low, &["RUNNING"], 30);
    c.wait_state(high, &["RUNNING"], 30);
    // RUNNING is the controller's word; the script must also have set its trap before it is
    // signalled, or SIGUSR1 ends it before it can checkpoint.
    let trapped = c.work.join(format!("trapped-{low}.txt"));
    let t0 = std::time::Instant::now();
    while !trapped.exists() {
        assert!(t0.elapsed() < Duration::from_secs(30), "the training script never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let svc = "name = \"llm\"\ncommand = [\"python3\", \"-m\", \"http.server\", \"--bind\", \"127.0.0.1\", \"$PORT\"]\nreplicas = 1\nqos = \"serve\"\n[resources]\ngpus = 1\n[readiness]\nhttp = \"/\"\nperiod = \"500ms\"\n";
    std::fs::write(c.work.join("llm.toml"), svc).unwrap();
    c.tandem_ok(&["service", "apply", "-f", "llm.toml"]);
    let s = wait_service(&c, "llm", 60, "ready on the preempted GPUs", |s| ready(s) == 1);
    let node = s["replicas"][0]["node"].as_str().unwrap().to_string();
    let ckpt = std::fs::read_to_string(c.work.join(format!("ckpt-{low}.txt"))).unwrap();
    assert!(ckpt.contains("checkpoint run=0"), "the training job got its signal: {ckpt}");
    let j = c.job(low);
    assert_eq!(j["JobState"], "PENDING", "{j:?}");
    assert_eq!(j["Restarts"], "1", "{j:?}");
    // Who preempted it, in scontrol and as a Kubernetes Event of its Pod (one ledger).
    let shown = c.ok("scontrol", &["show", "job", &low.to_string()]);
    let replica_job = s["replicas"][0]["job"].as_u64().unwrap();
    let said = format!("preempted by job {replica_job}, a replica of service llm (qos serve); requeued");
    assert!(shown.contains(&format!("Message={said}")), "{shown}");
    let o = Command::new("curl")
        .args(["-s", "--unix-socket", &c.sock])
        .arg(format!("http://localhost/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Djob-{low}-0"))
        .output()
        .unwrap();
    let events: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let pre: Vec<&serde_json::Value> = events["items"].as_array().unwrap().iter().filter(|e| e["reason"] == "Preempted").collect();
    assert!(pre.len() == 1 && pre[0]["message"] == said.as_str(), "{events:#}");
    let h = c.job(high);
    assert_eq!((h["JobState"].as_str(), h["Restarts"].as_str()), ("RUNNING", "0"), "the higher tier is untouched: {h:?}");
    assert_ne!(h["NodeList"], node);
    // The service goes: the training job takes the GPUs back and finishes.
    c.tandem_ok(&["service", "delete", "llm"]);
    c.wait_state(low, &["COMPLETED"], 60);
    let ckpt = std::fs::read_to_string(c.work.join(format!("ckpt-{low}.txt"))).unwrap();
    assert!(ckpt.contains("resumed"), "{ckpt}");
    c.ok("scancel", &[&high.to_string()]);
}

/// Answers every GET after a pause (a model that takes a while), with its `VERSION`.
fn slow_spec(name: &str, extra: &str) -> String {
    format!(
        "name = \"{name}\"\ncommand = [\"python3\", \"slow.py\"]\n{extra}\n[readiness]\nhttp = \"/\"\nperiod = \"300ms\"\n[resources]\ncpus = 1\n"
    )
}

#[test]
fn the_proxy_spreads_requests_and_a_dying_node_loses_none() {
    let mut c = Cluster::new("svcfail", 3, None, 30);
    std::fs::write(c.work.join("slow.py"), SLOW).unwrap();
    std::fs::write(c.work.join("echo.toml"), slow_spec("echo", "replicas = 3")).unwrap();
    c.tandem_ok(&["service", "apply", "-f", "echo.toml"]);
    wait_service(&c, "echo", 60, "3 ready", |s| ready(s) == 3);
    let p = Proxy::start(&c);
    p.wait_routes("/s/echo/");
    // Round robin: each replica in turn.
    let r = p.load("/s/echo/", &["--requests", "30", "--concurrency", "1"]);
    assert_eq!(r["failed"], 0, "{r:#}");
    let per: Vec<u64> = r["replicas"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(per, vec![10, 10, 10], "{r:#}");
    // Host routing.
    let r = p.load("/", &["--requests", "5", "--header", "Host:echo.cluster.local"]);
    assert_eq!(r["ok"], 5, "{r:#}");

    // A bounded stream of requests while a node dies with everything it runs.
    let victim = show(&c, "echo")["replicas"][0]["node"].as_str().unwrap().to_string();
    let idx: usize = victim.trim_start_matches("node").parse::<usize>().unwrap() - 1;
    let url = format!("http://{}/s/echo/", p.addr);
    let load = std::thread::spawn(move || {
        let o = std::process::Command::new(bin())
            .args(["bench", "load", &url, "--json", "--requests", "3000", "--rate", "300", "--concurrency", "64"])
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    });
    std::thread::sleep(Duration::from_secs(3));
    let killed = Instant::now();
    c.kill_agent(idx);
    let s = wait_service(&c, "echo", 60, "replaced", |s| {
        s["replicas"].as_array().unwrap().iter().filter(|r| r["state"] == "Ready" && r["node"] != victim.as_str()).count() == 3
    });
    let replaced = killed.elapsed();
    let r = load.join().unwrap();
    eprintln!(
        "failover: replica replaced and ready {:.2} s after kill -9 of {victim}; {} requests, {} failed, p50 {} ms, p99 {} ms, max {} ms",
        replaced.as_secs_f64(),
        r["sent"],
        r["failed"],
        r["latency_ms"]["p50"],
        r["latency_ms"]["p99"],
        r["latency_ms"]["max"]
    );
    assert_eq!(r["sent"], 3000, "{r:#}");
    assert_eq!(r["failed"], 0, "requests failed while a node died: {r:#}\nproxy log:\n{}", c.log("proxy"));
    assert!(s["replicas"].as_array().unwrap().iter().any(|r| r["state"] == "Lost"), "{s:#}");
}

#[test]
fn a_rolling_update_and_its_undo_lose_no_request() {
    let c = Cluster::new("svcroll", 3, None, 30);
    std::fs::write(c.work.join("slow.py"), SLOW).unwrap();
    std::fs::write(c.work.join("v1.toml"), slow_spec("web", "replicas = 3\n[env]\nVERSION = \"1\"\nDELAY = \"0.01\"")).unwrap();
    std::fs::write(c.work.join("v2.toml"), slow_spec("web", "replicas = 3\n[env]\nVERSION = \"2\"\nDELAY = \"0.01\"")).unwrap();
    c.tandem_ok(&["service", "apply", "-f", "v1.toml"]);
    let out = c.tandem_ok(&["service", "rollout", "status", "web", "--timeout", "60"]);
    assert!(out.contains("successfully rolled out (revision 1)"), "{out}");
    let p = Proxy::start(&c);
    p.wait_routes("/s/web/");
    let url = format!("http://{}/s/web/", p.addr);
    let load = std::thread::spawn(move || {
        let o = std::process::Command::new(bin())
            .args(["bench", "load", &url, "--json", "--requests", "4000", "--rate", "250", "--concurrency", "64"])
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    });
    std::thread::sleep(Duration::from_secs(1));
    let out = c.tandem_ok(&["service", "apply", "-f", "v2.toml"]);
    assert!(out.contains("configured (revision 2)"), "{out}");
    let out = c.tandem_ok(&["service", "rollout", "status", "web", "--timeout", "60"]);
    assert!(out.contains("successfully rolled out (revision 2)"), "{out}");
    let body = std::process::Command::new("curl").args(["-s", &format!("http://{}/s/web/", p.addr)]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&body.stdout), "version=2\n");
    let out = c.tandem_ok(&["service", "rollout", "undo", "web"]);
    assert!(out.contains("now revision 3"), "{out}");
    let out = c.tandem_ok(&["service", "rollout", "status", "web", "--timeout", "60"]);
    assert!(out.contains("successfully rolled out (revision 3)"), "{out}");
    let body = std::process::Command::new("curl").args(["-s", &format!("http://{}/s/web/", p.addr)]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&body.stdout), "version=1\n", "undo restored the first version");
    let r = load.join().unwrap();
    eprintln!("rolling update + undo under load: {} requests, {} failed, p99 {} ms", r["sent"], r["failed"], r["latency_ms"]["p99"]);
    assert_eq!(r["failed"], 0, "{r:#}\nproxy log:\n{}", c.log("proxy"));
    let s = show(&c, "web");
    assert_eq!(s["history"], serde_json::json!([1, 2]), "{s:#}");
}

#[test]
fn autoscaling_follows_load_up_and_down_and_scales_from_zero() {
    let c = Cluster::new("svcauto", 3, None, 30);
    std::fs::write(c.work.join("slow.py"), SLOW).unwrap();
    let auto = "[env]\nDELAY = \"0.2\"\n[autoscale]\nmin = 0\nmax = 3\ntarget_inflight = 2\nscale_down_window = \"3s\"";
    std::fs::write(c.work.join("auto.toml"), slow_spec("auto", auto)).unwrap();
    c.tandem_ok(&["service", "apply", "-f", "auto.toml"]);
    wait_service(&c, "auto", 60, "1 ready", |s| ready(s) == 1);
    let p = Proxy::start(&c);
    p.wait_routes("/s/auto/");
    // 8 requests always in flight, 2 per replica wanted: up to the maximum of 3.
    let url = format!("http://{}/s/auto/", p.addr);
    let load = std::thread::spawn(move || {
        let o = std::process::Command::new(bin())
            .args(["bench", "load", &url, "--json", "--duration", "10", "--concurrency", "8"])
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    });
    wait_service(&c, "auto", 30, "scaled up to 3 ready", |s| s["desired"] == 3 && ready(s) == 3);
    let r = load.join().unwrap();
    assert_eq!(r["failed"], 0, "{r:#}");
    // Idle: down after the 3 s window, to zero (min = 0).
    let s = wait_service(&c, "auto", 60, "scaled to zero", |s| s["desired"] == 0 && s["replicas"].as_array().unwrap().is_empty());
    // A request to a service with no replica is held until one is ready.
    let r = p.load("/s/auto/", &["--requests", "1"]);
    assert_eq!(r["ok"], 1, "{r:#}");
    let s2 = show(&c, "auto");
    let counts: Vec<u64> = s2["scale_log"].as_array().unwrap().iter().map(|e| e[1].as_u64().unwrap()).collect();
    eprintln!("autoscaler: replica count over time {:?}", s2["scale_log"]);
    assert_eq!(counts.first(), Some(&1), "{counts:?}");
    assert!(counts.contains(&3), "{counts:?}");
    assert!(counts.windows(2).any(|w| w[0] > 0 && w[1] == 0), "{counts:?}");
    assert_eq!(counts.last(), Some(&1), "{counts:?} (last view {s:#})");
}

#[test]
fn services_survive_a_controller_kill_9() {
    let mut c = Cluster::new("svcrestart", 2, None, 30);
    std::fs::write(c.work.join("slow.py"), SLOW).unwrap();
    std::fs::write(c.work.join("web.toml"), slow_spec("web", "replicas = 2")).unwrap();
    c.tandem_ok(&["service", "apply", "-f", "web.toml"]);
    let before = wait_service(&c, "web", 60, "2 ready", |s| ready(s) == 2);
    let p = Proxy::start(&c);
    p.wait_routes("/s/web/");
    let url = format!("http://{}/s/web/", p.addr);
    let load = std::thread::spawn(move || {
        let o = std::process::Command::new(bin())
            .args(["bench", "load", &url, "--json", "--requests", "1500", "--rate", "250", "--concurrency", "32"])
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    });
    std::thread::sleep(Duration::from_secs(1));
    c.kill_server();
    std::thread::sleep(Duration::from_secs(1));
    c.start_server();
    let r = load.join().unwrap();
    assert_eq!(r["failed"], 0, "the proxy kept serving its last view: {r:#}");
    let after = wait_service(&c, "web", 30, "2 ready", |s| ready(s) == 2);
    let ids = |s: &serde_json::Value| s["replicas"].as_array().unwrap().iter().map(|r| r["id"].clone()).collect::<Vec<_>>();
    assert_eq!(ids(&before), ids(&after), "the same replicas, none restarted or duplicated");
    let r = p.load("/s/web/", &["--requests", "50"]);
    assert_eq!(r["ok"], 50, "{r:#}");
}

/// One streaming request through the proxy, read to its end as the client sees it.
struct Streamed {
    /// The replica that first answered (`x-tandem-replica`).
    replica: String,
    /// The body's bytes, chunked encoding removed.
    body: String,
    /// The chunked body ended properly (its last, empty chunk came).
    whole: bool,
    /// `data: [DONE]` came before the node was killed.
    done_before_kill: bool,
    /// How reading the answer ended: `eof` (the proxy closed it), or the error and when.
    end: String,
}

impl Streamed {
    /// The stream's events, parsed (`[DONE]` as a string), `id` and `created` taken out (a
    /// stream served elsewhere has its replica's own).
    fn events(&self) -> Vec<serde_json::Value> {
        self.body
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let d = e.strip_prefix("data: ").unwrap_or_else(|| panic!("not an event: {e:?}"));
                let mut v = serde_json::from_str(d).unwrap_or(serde_json::Value::String(d.to_string()));
                if let Some(o) = v.as_object_mut() {
                    o.remove("id");
                    o.remove("created");
                }
                v
            })
            .collect()
    }

    /// The text the client read.
    fn text(&self) -> String {
        let mut out = String::new();
        for v in self.events() {
            let c = &v["choices"][0];
            out.push_str(c["text"].as_str().or(c["delta"]["content"].as_str()).unwrap_or(""));
        }
        out
    }

    fn ids(&self) -> std::collections::BTreeSet<String> {
        self.body
            .split("\n\n")
            .filter_map(|e| serde_json::from_str::<serde_json::Value>(e.strip_prefix("data: ")?).ok())
            .filter_map(|v| v["id"].as_str().map(str::to_string))
            .collect()
    }
}

/// POSTs `body` to the proxy and reads the answer until the connection closes; `seen` counts
/// the events read so far, `killed` tells when the node died.
fn stream_through(
    proxy: &str,
    path: &str,
    body: &serde_json::Value,
    seen: &std::sync::atomic::AtomicUsize,
    killed: &std::sync::atomic::AtomicBool,
) -> Streamed {
    use std::io::{Read, Write};
    use std::sync::atomic::Ordering::SeqCst;
    let body = body.to_string();
    let mut s = std::net::TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let (mut raw, mut buf, mut done_before_kill) = (Vec::new(), [0u8; 16384], false);
    let (started, mut end) = (Instant::now(), String::new());
    loop {
        match s.read(&mut buf) {
            Ok(0) => {
                end = format!("eof after {:.1} s", started.elapsed().as_secs_f64());
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                end = format!("{e} after {:.1} s", started.elapsed().as_secs_f64());
                break;
            }
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
        let text = String::from_utf8_lossy(&raw);
        seen.store(text.matches("data: ").count(), SeqCst);
        if !done_before_kill && !killed.load(SeqCst) && text.contains("data: [DONE]") {
            done_before_kill = true;
        }
    }
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("an answer head");
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let replica = head.lines().find_map(|l| l.strip_prefix("x-tandem-replica:")).unwrap_or("").trim().to_string();
    // Chunked encoding, read as far as it goes.
    let (mut rest, mut out, mut whole) = (&raw[split + 4..], Vec::new(), false);
    while let Some(nl) = rest.windows(2).position(|w| w == b"\r\n") {
        let Ok(n) = usize::from_str_radix(String::from_utf8_lossy(&rest[..nl]).trim(), 16) else { break };
        if n == 0 {
            whole = true;
            break;
        }
        let Some(chunk) = rest.get(nl + 2..nl + 2 + n) else {
            out.extend_from_slice(&rest[nl + 2..]);
            break;
        };
        out.extend_from_slice(chunk);
        rest = rest.get(nl + 4 + n..).unwrap_or(&[]);
    }
    Streamed { replica, body: String::from_utf8_lossy(&out).into_owned(), whole, done_before_kill, end }
}

/// The requests of the streaming test to service `svc`: chat (with usage) and completions,
/// each its own prompt.
fn stream_requests(svc: &str, n: usize) -> Vec<(String, serde_json::Value)> {
    (0..n)
        .map(|i| {
            if i % 2 == 0 {
                let msgs =
                    serde_json::json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": format!("Question {i}?")}]);
                let body = serde_json::json!({"model": "m", "messages": msgs, "max_tokens": 200, "stream": true,
                    "stream_options": {"include_usage": true}});
                (format!("/s/{svc}/v1/chat/completions"), body)
            } else {
                (
                    format!("/s/{svc}/v1/completions"),
                    serde_json::json!({"model": "m", "prompt": format!("Story {i}: once upon a time"), "max_tokens": 200, "stream": true}),
                )
            }
        })
        .collect()
}

/// Runs every request of `reqs` (path, body) at once; once each has read at least `before`
/// events, calls `kill` (if any).
fn stream_all(proxy: &str, reqs: &[(String, serde_json::Value)], before: usize, kill: Option<&mut dyn FnMut()>) -> Vec<Streamed> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    let killed = Arc::new(AtomicBool::new(false));
    let seen: Vec<Arc<AtomicUsize>> = reqs.iter().map(|_| Arc::new(AtomicUsize::new(0))).collect();
    let threads: Vec<_> = reqs
        .iter()
        .zip(&seen)
        .map(|((path, body), seen)| {
            let (proxy, path, body, seen, killed) = (proxy.to_string(), path.clone(), body.clone(), seen.clone(), killed.clone());
            std::thread::spawn(move || stream_through(&proxy, &path, &body, &seen, &killed))
        })
        .collect();
    if let Some(kill) = kill {
        let deadline = Instant::now() + Duration::from_secs(60);
        while seen.iter().any(|s| s.load(SeqCst) < before) {
            assert!(Instant::now() < deadline, "streams never got {before} events each: {:?}", seen);
            std::thread::sleep(Duration::from_millis(5));
        }
        killed.store(true, SeqCst);
        kill();
    }
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

fn llm_service(name: &str, balance: &str, resume: bool) -> String {
    format!(
        "name = \"{name}\"\ncommand = [\"{}\", \"__llm\", \"--port\", \"$PORT\", \"--model\", \"m\"]\nreplicas = 3\n\
         [resources]\ncpus = 1\n[readiness]\nhttp = \"/health\"\nperiod = \"300ms\"\n[proxy]\nbalance = \"{balance}\"\nresume_streams = {resume}\n",
        bin()
    )
}

#[test]
fn streams_survive_a_dying_node_with_resume_streams_and_break_without() {
    let mut c = Cluster::new("svcstream", 3, None, 30);
    std::fs::write(c.work.join("resumed.toml"), llm_service("resumed", "llm", true)).unwrap();
    std::fs::write(c.work.join("bare.toml"), llm_service("bare", "least_request", false)).unwrap();
    std::fs::write(c.work.join("bad.toml"), llm_service("bad", "llm", true) + "retries = 0\n").unwrap();
    let o = c.tandem(&["service", "apply", "-f", "bad.toml"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("resume_streams needs proxy.retries"), "{o:?}");
    c.tandem_ok(&["service", "apply", "-f", "resumed.toml"]);
    c.tandem_ok(&["service", "apply", "-f", "bare.toml"]);
    let resumed = wait_service(&c, "resumed", 60, "3 ready", |s| ready(s) == 3);
    let bare = wait_service(&c, "bare", 60, "3 ready", |s| ready(s) == 3);
    let p = Proxy::start(&c);
    p.wait_routes("/s/resumed/health");
    p.wait_routes("/s/bare/health");
    let reqs = stream_requests("resumed", 12);
    // The reference: every stream uninterrupted.
    let reference = stream_all(&p.addr, &reqs, 0, None);
    for (r, (path, _)) in reference.iter().zip(&reqs) {
        assert!(r.whole && r.body.ends_with("data: [DONE]\n\n"), "{path}: {}", r.body);
        assert_eq!(r.text().len(), 800, "200 tokens of 4 bytes: {}", r.body);
    }

    // A node dies with its replicas (one of each service) while every stream is under way.
    let node_of = |s: &serde_json::Value| -> std::collections::BTreeMap<String, String> {
        s["replicas"].as_array().unwrap().iter().map(|r| (r["id"].as_str().unwrap().into(), r["node"].as_str().unwrap().into())).collect()
    };
    let (resumed_nodes, bare_nodes) = (node_of(&resumed), node_of(&bare));
    let victim = resumed_nodes.values().next().unwrap().clone();
    assert!(bare_nodes.values().any(|n| *n == victim), "both services have a replica on {victim}: {bare:#}");
    let idx: usize = victim.trim_start_matches("node").parse::<usize>().unwrap() - 1;
    let mut both = reqs.clone();
    both.extend(stream_requests("bare", 12));
    let mut got = stream_all(&p.addr, &both, 8, Some(&mut || c.kill_agent(idx)));
    let without = got.split_off(reqs.len());
    let with = got;
    let on_victim = |r: &Streamed, nodes: &std::collections::BTreeMap<String, String>| nodes.get(&r.replica) == Some(&victim);

    // With resume_streams: no broken stream, every text as in the reference, one id, one role chunk.
    let mut moved = 0;
    for ((got, want), (path, _)) in with.iter().zip(&reference).zip(&reqs) {
        assert!(
            got.whole && got.body.ends_with("data: [DONE]\n\n"),
            "{path} from {}: broken ({}):\n{}\nproxy log:\n{}",
            got.replica,
            got.end,
            got.body,
            c.log("proxy")
        );
        assert_eq!(got.text(), want.text(), "{path} from {}", got.replica);
        assert_eq!(got.events(), want.events(), "{path} from {}: the same chunks", got.replica);
        assert_eq!(got.ids().len(), 1, "one id: {}", got.body);
        moved += usize::from(on_victim(got, &resumed_nodes) && !got.done_before_kill);
    }
    // Without: the streams the dead node served broke, visibly; the others are whole.
    let mut broken = 0;
    for ((got, want), (path, _)) in without.iter().zip(&reference).zip(&reqs) {
        if on_victim(got, &bare_nodes) && !got.done_before_kill {
            assert!(!got.whole && !got.body.contains("[DONE]"), "{path}: a stream from the dead node ended as if whole:\n{}", got.body);
            assert!(want.text().starts_with(&got.text()), "{path}: what came is the reference's start");
            broken += 1;
        } else {
            assert!(got.whole && got.text() == want.text(), "{path} from {}: {}", got.replica, got.body);
        }
    }
    let m = std::process::Command::new("curl").args(["-s", &format!("http://{}/_tandem/metrics", p.addr)]).output().unwrap();
    let m = String::from_utf8_lossy(&m.stdout);
    let resumes = m.lines().find_map(|l| l.strip_prefix("tandem_proxy_resumed_streams_total{service=\"resumed\"} ")).unwrap_or("?");
    eprintln!(
        "streams through a node's kill -9: {} with resume_streams, {moved} of them on the dead node, 0 broken, {resumes} resumed; \
         {} without, {broken} broken",
        with.len(),
        without.len()
    );
    assert!(moved > 0 && broken > 0, "the dead node served no stream under way ({moved} resumed, {broken} broken): nothing was tested");
    assert_eq!(resumes, moved.to_string(), "{m}");
    assert!(m.contains("tandem_proxy_resumed_streams_total{service=\"bare\"} 0"), "{m}");
}

#[test]
fn streams_from_a_frozen_node_resume_once_the_node_is_declared_lost() {
    // SIGSTOP of an agent and its replicas: a node that vanished without closing a connection
    // (powered off, cut off). Its streams stall until the controller declares it lost and the
    // replica leaves the view; then they go on elsewhere.
    let c = Cluster::new("svcfrozen", 3, None, 30);
    std::fs::write(c.work.join("resumed.toml"), llm_service("resumed", "least_request", true)).unwrap();
    c.tandem_ok(&["service", "apply", "-f", "resumed.toml"]);
    let s = wait_service(&c, "resumed", 60, "3 ready", |s| ready(s) == 3);
    let p = Proxy::start(&c);
    p.wait_routes("/s/resumed/health");
    let reqs = stream_requests("resumed", 6);
    let reference = stream_all(&p.addr, &reqs, 0, None);
    let victim = s["replicas"][0]["node"].as_str().unwrap().to_string();
    let on_victim: Vec<String> = s["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["node"] == victim.as_str())
        .map(|r| r["id"].as_str().unwrap().into())
        .collect();
    let idx: usize = victim.trim_start_matches("node").parse::<usize>().unwrap() - 1;
    let pid = c.agents[idx].as_ref().unwrap().id();
    let got = stream_all(&p.addr, &reqs, 8, Some(&mut || kill_tree(pid, "-STOP")));
    let mut moved = 0;
    for ((got, want), (path, _)) in got.iter().zip(&reference).zip(&reqs) {
        assert!(got.whole, "{path} from {}: broken ({}):\n{}\nproxy log:\n{}", got.replica, got.end, got.body, c.log("proxy"));
        assert_eq!(got.events(), want.events(), "{path} from {}", got.replica);
        moved += usize::from(on_victim.contains(&got.replica) && !got.done_before_kill);
    }
    eprintln!("streams through a frozen node: {} streams, {moved} resumed after the node was declared lost, 0 broken", got.len());
    assert!(moved > 0, "the frozen node served no stream under way: nothing was tested");
    assert!(c.log("proxy").contains("left the endpoint view"), "{}", c.log("proxy"));
}
