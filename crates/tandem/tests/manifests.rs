//! Tandem's Kubernetes manifests (`deploy/kubernetes/*.yaml`; README, "Tandem's own image"),
//! checked without an API server: every document validates with `kubernetes-validate --strict`
//! (pinned in `tests/clients/requirements.txt`, installed into `target/clients-venv` by
//! `tests/clients/setup.sh`, which `.ci/run` runs), where a document of a kind it has no schema
//! for fails (the tool itself only warns); the agent's DaemonSet has the host access the agent
//! needs (the host's PID namespace and network, the host's `/sys/fs/cgroup`, privileged); the
//! daemons' flags are the binary's; the controller's `tandem.toml` parses. Under `CI=true` a
//! missing validator fails the test; elsewhere that test is skipped with a note.

use std::path::{Path, PathBuf};
use std::process::Command;
use yaml_serde::Value;

/// The Kubernetes version the manifests are validated against.
const KUBERNETES: &str = "1.33";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every manifest file, sorted.
fn manifests() -> Vec<PathBuf> {
    let dir = root().join("deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in {}", dir.display());
    files
}

/// A file's documents (empty ones left out, as kubectl and kubernetes-validate do).
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    yaml_serde::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn all_documents() -> Vec<Value> {
    manifests().iter().flat_map(|p| documents(p)).collect()
}

/// The one document of `kind` named `name`.
fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let found: Vec<&Value> =
        docs.iter().filter(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name)).collect();
    assert_eq!(found.len(), 1, "expected one {kind} {name}, found {}", found.len());
    found[0]
}

fn seq(v: &Value) -> &[Value] {
    v.as_sequence().map_or(&[], |s| s.as_slice())
}

/// The container `name` of a workload's pod template.
fn container<'a>(workload: &'a Value, name: &str) -> &'a Value {
    seq(&workload["spec"]["template"]["spec"]["containers"])
        .iter()
        .find(|c| c["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no container {name}"))
}

/// The pod volume `name` of a workload.
fn volume<'a>(workload: &'a Value, name: &str) -> &'a Value {
    seq(&workload["spec"]["template"]["spec"]["volumes"])
        .iter()
        .find(|v| v["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no volume {name}"))
}

/// The mount at `path` of a container.
fn mount_at<'a>(c: &'a Value, path: &str) -> &'a Value {
    seq(&c["volumeMounts"]).iter().find(|m| m["mountPath"].as_str() == Some(path)).unwrap_or_else(|| panic!("no mount at {path}"))
}

/// A container's arguments (`command` then `args`) as strings.
fn argv(c: &Value) -> Vec<String> {
    seq(&c["command"]).iter().chain(seq(&c["args"])).map(|a| a.as_str().expect("an argument that is no string").to_string()).collect()
}

/// The value of `--flag=VALUE` (or `--flag VALUE`) among `args`.
fn flag(args: &[String], name: &str) -> Option<String> {
    let eq = format!("{name}=");
    args.iter().enumerate().find_map(|(i, a)| match a.strip_prefix(&eq) {
        Some(v) => Some(v.to_string()),
        None if a == name => args.get(i + 1).cloned(),
        None => None,
    })
}

/// kubernetes-validate from the clients' venv, or `None` (skip) with the reason printed; under
/// CI its absence fails.
fn validator() -> Option<PathBuf> {
    let venv = std::env::var_os("TANDEM_CLIENTS_VENV").map(PathBuf::from).unwrap_or_else(|| root().join("target/clients-venv"));
    let kv = venv.join("bin/kubernetes-validate");
    if kv.is_file() {
        return Some(kv);
    }
    let why = format!("no {} (bash tests/clients/setup.sh installs it)", kv.display());
    assert!(std::env::var("CI").is_err(), "the manifest validation cannot run under CI=true: {why}");
    eprintln!("skipped: {why}");
    None
}

/// `kubernetes-validate --strict -k KUBERNETES FILE`, held to more than its exit status: it
/// only warns about a kind it has no schema for, so any WARN or ERROR line fails, and every
/// document of the file must have its INFO "passed" line. Returns its output.
fn validate(kv: &Path, file: &Path) -> Result<String, String> {
    let out = Command::new(kv).args(["--strict", "-k", KUBERNETES]).arg(file).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let passed = text.lines().filter(|l| l.starts_with("INFO ") && l.contains(" passed for resource ")).count();
    let expected = documents(file).len();
    if !out.status.success() {
        return Err(format!("exit status {}:\n{text}", out.status));
    }
    if text.lines().any(|l| l.starts_with("WARN") || l.starts_with("ERROR") || l.starts_with("FATAL")) {
        return Err(format!("warnings or errors:\n{text}"));
    }
    if passed != expected {
        return Err(format!("{passed} documents passed of {expected}:\n{text}"));
    }
    Ok(text)
}

#[test]
fn every_document_validates_in_strict_mode() {
    let Some(kv) = validator() else { return };
    for f in manifests() {
        match validate(&kv, &f) {
            Ok(text) => eprint!("{text}"),
            Err(e) => panic!("{}: {e}", f.display()),
        }
    }
}

#[test]
fn a_kind_without_a_schema_or_an_unknown_field_fails_the_check() {
    let Some(kv) = validator() else { return };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("manifests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bogus = dir.join("bogus-kind.yaml");
    std::fs::write(&bogus, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: fine\n---\napiVersion: tandem.example/v1\nkind: TandemCluster\nmetadata:\n  name: x\n").unwrap();
    let e = validate(&kv, &bogus).expect_err("a kind without a schema passed");
    assert!(e.contains("Couldn't find schema for kind TandemCluster"), "{e}");
    let typo = dir.join("typo.yaml");
    std::fs::write(&typo, "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  clusterIp: None\n").unwrap();
    let e = validate(&kv, &typo).expect_err("an unknown field passed in strict mode");
    assert!(e.contains("'clusterIp' was unexpected"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_agent_daemonset_has_the_hosts_pid_namespace_cgroups_and_privileges() {
    let docs = all_documents();
    let ds = find(&docs, "DaemonSet", "tandem-agent");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"].as_bool(), Some(true), "the agent's tasks are the host's processes: hostPID");
    assert_eq!(pod["hostNetwork"].as_bool(), Some(true), "jobs and replicas listen on the node's addresses: hostNetwork");
    let c = container(ds, "agent");
    assert_eq!(c["securityContext"]["privileged"].as_bool(), Some(true), "the agent must be privileged");
    let m = mount_at(c, "/sys/fs/cgroup");
    assert_ne!(m["readOnly"].as_bool(), Some(true), "the agent writes the cgroup hierarchy");
    let v = volume(ds, m["name"].as_str().unwrap());
    assert_eq!(v["hostPath"]["path"].as_str(), Some("/sys/fs/cgroup"), "the cgroup mount must be the host's /sys/fs/cgroup: {v:?}");
    // Its data directory (credential, tasks' records, image cache) is the host's, kept across pods.
    let args = argv(c);
    let data = flag(&args, "--data").expect("the agent's --data");
    let v = volume(ds, mount_at(c, &data)["name"].as_str().unwrap());
    assert_eq!(v["hostPath"]["path"].as_str(), Some(data.as_str()), "the agent's data directory must be a hostPath");
    // The host's users and programs: /etc and /usr are the host's, so the binary is run from
    // where the image keeps it outside them.
    for dir in ["/usr", "/etc"] {
        let v = volume(ds, mount_at(c, dir)["name"].as_str().unwrap());
        assert_eq!(v["hostPath"]["path"].as_str(), Some(dir), "{dir} must be the host's");
    }
    assert_eq!(args[0], "/tandem/bin/tandem");
    let image = std::fs::read_to_string(root().join("scripts/image.sh")).unwrap();
    assert!(image.contains("\"$rootfs/tandem/bin/tandem\""), "scripts/image.sh no longer puts the binary at /tandem/bin/tandem");
    // No memory limit: on cgroup v1 the jobs' cgroups are inside the agent's.
    assert!(c["resources"]["limits"]["memory"].is_null(), "the agent's pod must have no memory limit");
    assert_eq!(flag(&args, "--name").as_deref(), Some("$(NODE_NAME)"));
}

#[test]
fn the_controller_and_the_proxy() {
    let docs = all_documents();
    let sts = find(&docs, "StatefulSet", "tandem-controller");
    assert_eq!(sts["spec"]["replicas"].as_u64(), Some(1));
    let headless = find(&docs, "Service", sts["spec"]["serviceName"].as_str().unwrap());
    assert_eq!(headless["spec"]["clusterIP"].as_str(), Some("None"), "the StatefulSet's Service is headless");
    let c = container(sts, "controller");
    let args = argv(c);
    assert_eq!(args[0], "server");
    let data = flag(&args, "--data").expect("the controller's --data");
    let claim = mount_at(c, &data)["name"].as_str().unwrap();
    assert!(
        seq(&sts["spec"]["volumeClaimTemplates"]).iter().any(|t| t["metadata"]["name"].as_str() == Some(claim)),
        "the controller's data directory must be its volume claim"
    );
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(c[probe]["httpGet"]["path"].as_str(), Some("/healthz"), "{probe}");
        assert_eq!(c[probe]["httpGet"]["scheme"].as_str(), Some("HTTPS"), "{probe}: the controller's port is TLS only");
    }
    // The configuration it is given parses as the controller parses it.
    let config = flag(&args, "--config").expect("the controller's --config");
    let dir = Path::new(&config).parent().unwrap().to_str().unwrap();
    let cm = find(&docs, "ConfigMap", volume(sts, mount_at(c, dir)["name"].as_str().unwrap())["configMap"]["name"].as_str().unwrap());
    let toml = cm["data"][Path::new(&config).file_name().unwrap().to_str().unwrap()].as_str().expect("tandem.toml in the ConfigMap");
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("manifests-tandem-{}.toml", std::process::id()));
    std::fs::write(&file, toml).unwrap();
    server::config::load(Some(&file)).unwrap_or_else(|e| panic!("the ConfigMap's tandem.toml: {e:#}"));
    std::fs::remove_file(&file).ok();

    let proxy = find(&docs, "Deployment", "tandem-proxy");
    let c = container(proxy, "proxy");
    assert_eq!(argv(c)[0], "proxy");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"].as_str(), Some("/_tandem/healthz"));
    let svc = find(&docs, "Service", "tandem-proxy");
    assert_eq!(svc["spec"]["selector"], proxy["spec"]["template"]["metadata"]["labels"], "the proxy's Service selects its pods");
}

/// Every `--flag` the manifests give `tandem server`, `agent` and `proxy` is one the binary
/// takes, and every container runs the one image.
#[test]
fn the_flags_are_the_binarys() {
    let docs = all_documents();
    let mut images = std::collections::BTreeSet::new();
    for (kind, name, cname) in [
        ("StatefulSet", "tandem-controller", "controller"),
        ("DaemonSet", "tandem-agent", "agent"),
        ("Deployment", "tandem-proxy", "proxy"),
    ] {
        let c = container(find(&docs, kind, name), cname);
        images.insert(c["image"].as_str().unwrap().to_string());
        let args = argv(c);
        let sub = args.iter().find(|a| ["server", "agent", "proxy"].contains(&a.as_str())).expect("a daemon subcommand");
        let help = Command::new(env!("CARGO_BIN_EXE_tandem")).args([sub, "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&help.stdout);
        for a in args.iter().filter(|a| a.starts_with("--")) {
            let f = a.split('=').next().unwrap();
            assert!(help.contains(&format!("{f} ")) || help.contains(&format!("{f}\n")), "tandem {sub} has no {f}");
        }
    }
    assert_eq!(images.len(), 1, "one image for all: {images:?}");
}
