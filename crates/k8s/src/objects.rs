//! Kubernetes objects built from Tandem's views. Every field is derived from the ledger, none is
//! stored apart from it, so `kubectl` and `squeue` cannot disagree:
//!
//! - a **node** is a Node: capacity and allocatable from its CPUs, memory and GPUs
//!   (`nvidia.com/gpu`), `Ready` from its lease, drained nodes unschedulable with Kubernetes'
//!   taint, its partitions and features as labels;
//! - a **service** is a Deployment (`spec.replicas` its desired count, the rolling update limits,
//!   the current revision's container; `generation` and `observedGeneration` its revision), a
//!   ReplicaSet per kept revision (`NAME-rREV`, with the `deployment.kubernetes.io/revision`
//!   annotation `rollout history` reads), and a Pod per replica, named by the replica's id as in
//!   `tandem service show`;
//! - a **batch job** is a Job named `job-ID`, and an array is one Job with a Pod per task
//!   (`completionMode: Indexed`, the task's index as `batch.kubernetes.io/job-completion-index`);
//!   a task on several nodes has a Pod per node. Pods are named `job-ID-INDEX` (`-RANK` added on
//!   several nodes); a job that is not an array is index 0.

use crate::{DEFAULT_NAMESPACE, PREFIX};
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentCondition, DeploymentSpec, DeploymentStatus, DeploymentStrategy, ReplicaSet, ReplicaSetSpec, ReplicaSetStatus,
    RollingUpdateDeployment,
};
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, EnvVar,
    HTTPGetAction, Namespace, NamespaceSpec, NamespaceStatus, Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, Pod, PodCondition,
    PodSpec, PodStatus, PodTemplateSpec, Probe, ResourceRequirements, TCPSocketAction, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;
use wire::{JobInfo, NodeInfo, ServiceInfo};

/// A batch job (or one task of an array) as the controller shows it, with what `JobInfo` leaves
/// out.
#[derive(Debug, Clone)]
pub struct Task {
    /// The job as `squeue` sees it.
    pub info: JobInfo,
    /// The image its batch step runs in (`--container-image`), if any.
    pub image: Option<String>,
    /// The Job it was written as through the Kubernetes API, if it was.
    pub kube: Option<std::sync::Arc<KubeJob>>,
}

/// A Job written through the Kubernetes API: its name, when, and what is stored of it
/// ([`crate::jobs::WrittenJob::stored`]).
#[derive(Debug, Clone, PartialEq)]
pub struct KubeJob {
    /// Its name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// When it was written, Unix seconds.
    pub created: i64,
    /// Its metadata's labels and annotations and its spec, as written (and changed since).
    pub stored: serde_json::Value,
}

impl KubeJob {
    /// Whether its Pods have indices (`completionMode: Indexed`).
    fn indexed(&self) -> bool {
        self.stored["spec"]["completionMode"] == "Indexed"
    }

    /// Its template's labels, as written.
    fn template_labels(&self) -> Vec<(String, String)> {
        self.stored["spec"]["template"]["metadata"]["labels"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect()
    }
}

/// A service as the controller shows it, with what `ServiceInfo` leaves out.
#[derive(Debug, Clone)]
pub struct ServiceView {
    /// The service as `tandem service show` sees it.
    pub info: ServiceInfo,
    /// When it was first applied, Unix seconds.
    pub created: i64,
    /// Its owner's uid.
    pub uid: u32,
    /// Its replicas' jobs (for their times).
    pub jobs: Vec<JobInfo>,
    /// The earlier revisions kept for undo, with their specs (hidden as `info.spec` is).
    pub history: Vec<(u32, wire::ServiceSpec)>,
    /// The Deployment it was last written as through the Kubernetes API (`Service::kube`).
    pub kube: Option<serde_json::Value>,
}

impl ServiceView {
    /// The labels its Pods carry beyond Tandem's: the written template's (what the Deployment's
    /// selector selects).
    fn template_labels(&self) -> BTreeMap<String, String> {
        self.kube
            .as_ref()
            .and_then(|k| k["spec"]["template"]["metadata"]["labels"].as_object())
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
            .unwrap_or_default()
    }
}

/// How the controller's message of a preempted, requeued job begins (`control::PREEMPTED_PREFIX`).
pub const PREEMPTED: &str = "preempted by ";

/// The Job name of a batch job (an array's, for its tasks).
pub fn job_name(id: u64) -> String {
    format!("job-{id}")
}

/// The job id a Job name stands for.
pub fn job_id(name: &str) -> Option<u64> {
    name.strip_prefix("job-").filter(|d| !d.starts_with('0') || *d == "0").and_then(|d| d.parse().ok())
}

/// A Unix time (seconds) as a Kubernetes time.
pub fn time(secs: i64) -> Option<Time> {
    k8s_openapi::jiff::Timestamp::from_second(secs).ok().map(Time)
}

/// A stable UID for an object: the same kind, name and creation time give the same UID, a
/// service deleted and applied again gets a new one. In UUID form (FNV-1a, 128 bits).
pub fn uid(kind: &str, name: &str, created: i64) -> String {
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    for b in kind.bytes().chain([0]).chain(name.bytes()).chain([0]).chain(created.to_le_bytes()) {
        h ^= u128::from(b);
        h = h.wrapping_mul(0x0000000001000000000000000000013B);
    }
    let s = format!("{h:032x}");
    format!("{}-{}-{}-{}-{}", &s[0..8], &s[8..12], &s[12..16], &s[16..20], &s[20..32])
}

/// What an object's uid is made from beside its kind: its name, in a namespace other than
/// `default` after it (`team-a/web`: no name has a `/`, so no two objects share one).
fn scoped(ns: &str, name: &str) -> String {
    if ns == DEFAULT_NAMESPACE || ns.is_empty() { name.to_string() } else { format!("{ns}/{name}") }
}

/// Whether `v` may be a label value (at most 63 characters, alphanumerics, `-`, `_`, `.`, with
/// alphanumerics at both ends).
pub fn label_value_ok(v: &str) -> bool {
    v.len() <= 63
        && (v.is_empty()
            || (v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                && v.as_bytes()[0].is_ascii_alphanumeric()
                && v.as_bytes()[v.len() - 1].is_ascii_alphanumeric()))
}

/// The annotation that names an object's owner's uid (what the controller filters and hides by,
/// as `squeue` and `tandem service show` do).
pub const UID_ANNOTATION: &str = "tandem.dev/uid";

/// kubectl's annotation of the configuration it last applied.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The owner's uid an object carries, if any.
pub fn owner_uid(o: &serde_json::Value) -> Option<u32> {
    o["metadata"]["annotations"][UID_ANNOTATION].as_str()?.parse().ok()
}

/// Hides what another user may not see of an object: its containers' environment values and
/// arguments read `(hidden)`, as in `tandem service show`.
pub fn redact(o: &mut serde_json::Value, hidden: &str) {
    fn containers(spec: &mut serde_json::Value, hidden: &str) {
        for c in spec["containers"].as_array_mut().into_iter().flatten() {
            for e in c["env"].as_array_mut().into_iter().flatten() {
                if e.get("value").is_some() {
                    e["value"] = hidden.into();
                }
            }
            for a in c["args"].as_array_mut().into_iter().flatten() {
                *a = hidden.into();
            }
        }
    }
    if o["spec"]["template"]["spec"].is_object() {
        containers(&mut o["spec"]["template"]["spec"], hidden);
    }
    // kubectl's copy of what was applied holds the same values.
    if let Some(a) = o["metadata"]["annotations"].get_mut(LAST_APPLIED) {
        *a = hidden.into();
    }
    if o["spec"]["containers"].is_array() {
        containers(&mut o["spec"], hidden);
    }
}

fn labels(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    let m: BTreeMap<String, String> =
        pairs.iter().filter(|(_, v)| label_value_ok(v)).map(|(k, v)| (k.to_string(), v.to_string())).collect();
    (!m.is_empty()).then_some(m)
}

fn meta(name: &str, namespace: Option<&str>, uid: String, created: Option<i64>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(str::to_string),
        uid: Some(uid),
        creation_timestamp: created.and_then(time),
        ..Default::default()
    }
}

fn q(s: impl Into<String>) -> Quantity {
    Quantity(s.into())
}

fn host_of(addr: &str) -> String {
    match addr.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h.trim_start_matches('[').trim_end_matches(']').to_string(),
        _ => addr.to_string(),
    }
}

/// A Pod's conditions: `PodScheduled` (false with Tandem's pending reason), then, once placed,
/// `Initialized`, `ContainersReady` and `Ready` (the last two with `why_not`'s reason and
/// message while not ready).
fn pod_conditions(scheduled: bool, pending: &str, ready: bool, why_not: Option<String>, message: Option<String>) -> Vec<PodCondition> {
    let mut conditions = vec![PodCondition {
        type_: "PodScheduled".into(),
        status: condition_status(scheduled),
        reason: (!scheduled).then(|| "Unschedulable".into()),
        message: (!scheduled && !pending.is_empty()).then(|| format!("pending: {pending}")),
        ..Default::default()
    }];
    if scheduled {
        for ty in ["Initialized", "ContainersReady", "Ready"] {
            let ok = ty == "Initialized" || ready;
            conditions.push(PodCondition {
                type_: ty.into(),
                status: condition_status(ok),
                reason: if ok { None } else { why_not.clone() },
                message: if ok { None } else { message.clone() },
                ..Default::default()
            });
        }
    }
    conditions
}

fn condition_status(b: bool) -> String {
    if b { "True" } else { "False" }.into()
}

// ---- Nodes ----

/// A node. `Ready` is `Unknown` for a node that is down (its lease ran out) and `True`
/// otherwise; a drained node is unschedulable with `node.kubernetes.io/unschedulable`.
pub fn node(n: &NodeInfo) -> Node {
    let state = n.state.to_ascii_lowercase();
    let down = state.starts_with("down") || state.contains("not_responding") || state.starts_with("fail");
    let drained = state.starts_with("drain") || state.contains("drain") || n.reboot.is_some();
    let hostname = [("kubernetes.io/hostname", n.name.as_str()), ("kubernetes.io/os", "linux")];
    let mut lab = labels(&hostname).unwrap_or_default();
    for p in &n.partitions {
        if label_value_ok(p) && !p.is_empty() {
            lab.insert(format!("{PREFIX}/partition-{p}"), "true".into());
        }
    }
    for f in &n.features {
        if label_value_ok(f) && !f.is_empty() {
            lab.insert(format!("{PREFIX}/feature-{f}"), "true".into());
        }
    }
    if let Some(model) = n.gpus.2.as_deref().filter(|m| label_value_ok(m) && !m.is_empty()) {
        lab.insert("nvidia.com/gpu.product".into(), model.into());
    }
    let mut capacity = BTreeMap::from([
        ("cpu".to_string(), q(n.cpus.0.to_string())),
        ("memory".to_string(), q(format!("{}Mi", n.memory_mb.0))),
        ("pods".to_string(), q("110")),
    ]);
    if n.gpus.0 > 0 {
        capacity.insert("nvidia.com/gpu".into(), q(n.gpus.0.to_string()));
    }
    let mut taints = Vec::new();
    if drained {
        taints.push(Taint { key: "node.kubernetes.io/unschedulable".into(), effect: "NoSchedule".into(), ..Default::default() });
    }
    if down {
        taints.push(Taint { key: "node.kubernetes.io/unreachable".into(), effect: "NoExecute".into(), ..Default::default() });
    }
    let (ready, reason, message) = if down {
        ("Unknown", "NodeStatusUnknown", n.reason.clone().unwrap_or_else(|| "Tandem's agent stopped posting its lease".into()))
    } else {
        ("True", "AgentReady", "Tandem's agent is posting its lease".into())
    };
    let mut addresses = vec![NodeAddress { type_: "Hostname".into(), address: n.name.clone() }];
    if !n.addr.is_empty() {
        addresses.insert(0, NodeAddress { type_: "InternalIP".into(), address: host_of(&n.addr) });
    }
    let mut annotations = BTreeMap::from([
        (format!("{PREFIX}/state"), n.state.clone()),
        (format!("{PREFIX}/cpus"), format!("{}/{}", n.cpus.1, n.cpus.0)),
        (format!("{PREFIX}/gpus"), format!("{}/{}", n.gpus.1, n.gpus.0)),
        (format!("{PREFIX}/version"), format!("tandem-{}", env!("CARGO_PKG_VERSION"))),
    ]);
    if let Some(r) = &n.reason {
        annotations.insert(format!("{PREFIX}/reason"), r.clone());
    }
    Node {
        metadata: ObjectMeta {
            labels: Some(lab),
            annotations: Some(annotations),
            ..meta(&n.name, None, uid("Node", &n.name, n.registered.unwrap_or(0)), n.registered)
        },
        spec: Some(NodeSpec {
            unschedulable: drained.then_some(true),
            taints: (!taints.is_empty()).then_some(taints),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            allocatable: Some(capacity.clone()),
            capacity: Some(capacity),
            addresses: Some(addresses),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: ready.into(),
                reason: Some(reason.into()),
                message: Some(message),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// A namespace: `default`, or one made through the API (`stored`: its labels and annotations
/// as written, its owner's uid, whether it is being deleted); `created`: Unix seconds, if known.
pub fn namespace(name: &str, created: Option<i64>, stored: Option<(&serde_json::Value, u32, bool)>) -> Namespace {
    let mut lab: BTreeMap<String, String> = BTreeMap::new();
    let mut annotations = BTreeMap::new();
    if let Some((data, owner, _)) = stored {
        for (key, v) in data["metadata"]["labels"].as_object().into_iter().flatten() {
            lab.insert(key.clone(), v.as_str().unwrap_or_default().to_string());
        }
        for (key, v) in data["metadata"]["annotations"].as_object().into_iter().flatten() {
            annotations.insert(key.clone(), v.as_str().unwrap_or_default().to_string());
        }
        annotations.insert(UID_ANNOTATION.to_string(), owner.to_string());
    }
    lab.insert("kubernetes.io/metadata.name".into(), name.into());
    let terminating = stored.is_some_and(|(_, _, t)| t);
    Namespace {
        metadata: ObjectMeta {
            labels: Some(lab),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..meta(name, None, uid("Namespace", name, created.unwrap_or(0)), created)
        },
        spec: Some(NamespaceSpec { finalizers: (!terminating).then(|| vec!["kubernetes".into()]) }),
        status: Some(NamespaceStatus { phase: Some(if terminating { "Terminating" } else { "Active" }.into()), ..Default::default() }),
    }
}

// ---- Batch jobs ----

/// The Jobs of a listing's batch jobs: one per job, one per array (its tasks together, in
/// index order), in the order of first appearance.
pub fn group_jobs(tasks: &[Task]) -> Vec<Vec<&Task>> {
    let mut order: Vec<u64> = Vec::new();
    let mut by: BTreeMap<u64, Vec<&Task>> = BTreeMap::new();
    for t in tasks {
        // A heterogeneous job's components are one job (the leader's id).
        let key = t.info.array_job_id.or(t.info.het_job_id).unwrap_or(t.info.id);
        let e = by.entry(key).or_default();
        if e.is_empty() {
            order.push(key);
        }
        e.push(t);
    }
    order
        .into_iter()
        .map(|k| {
            let mut v = by.remove(&k).unwrap_or_default();
            v.sort_by_key(|t| (t.info.array_task_id, t.info.het_job_offset, t.info.id));
            v
        })
        .collect()
}

fn final_state(s: &str) -> bool {
    !matches!(s, "PENDING" | "RUNNING" | "CONFIGURING" | "SUSPENDED" | "COMPLETING" | "REQUEUED" | "RESIZING" | "STOPPED")
}

fn exit_of(code: &str) -> (i32, i32) {
    let mut it = code.split(':').map(|x| x.parse::<i32>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// The Job of one job's tasks (from [`group_jobs`]).
pub fn job(tasks: &[&Task]) -> Job {
    let first = &tasks[0].info;
    let id = first.array_job_id.or(first.het_job_id).unwrap_or(first.id);
    let kube = tasks[0].kube.as_deref();
    let (name, ns, created) = job_identity(tasks);
    let the_uid = uid("Job", &scoped(ns, &name), created);
    let array = first.array_job_id.is_some();
    let indexed = kube.map_or(array, KubeJob::indexed);
    let count = if first.het_job_id.is_some() { 1 } else { tasks.len() as i32 };
    let (mut active, mut succeeded, mut failed, mut suspended) = (0, 0, 0, false);
    for t in tasks {
        match t.info.base_state() {
            "COMPLETED" => succeeded += 1,
            "PENDING" => {}
            "SUSPENDED" => {
                suspended = true;
                active += 1
            }
            s if final_state(s) => failed += 1,
            _ => active += 1,
        }
    }
    if first.het_job_id.is_some() {
        (succeeded, failed, active) = (succeeded.min(1), failed.min(1), active.min(1));
    }
    let start = tasks.iter().filter_map(|t| t.info.start.filter(|_| !t.info.start_estimated)).min();
    let done = tasks.iter().all(|t| final_state(t.info.base_state()));
    let end = tasks.iter().filter_map(|t| t.info.end).max();
    let mut conditions = Vec::new();
    // Suspended: a task frozen (`scontrol suspend`), or a written Job's `suspend` until it ends.
    if suspended || (!done && kube.is_some_and(|k| k.stored["spec"]["suspend"] == true)) {
        conditions.push(JobCondition {
            type_: "Suspended".into(),
            status: "True".into(),
            reason: Some("JobSuspended".into()),
            message: Some("Job suspended".into()),
            ..Default::default()
        });
    }
    if done {
        let t = end.and_then(time);
        if failed == 0 {
            for ty in ["SuccessCriteriaMet", "Complete"] {
                conditions.push(JobCondition {
                    type_: ty.into(),
                    status: "True".into(),
                    reason: Some("CompletionsReached".into()),
                    message: Some("Reached expected number of succeeded pods".into()),
                    last_transition_time: t.clone(),
                    last_probe_time: t.clone(),
                });
            }
        } else {
            let bad = tasks.iter().find(|t| t.info.base_state() != "COMPLETED").map(|t| &t.info).unwrap_or(first);
            let reason = match bad.base_state() {
                "TIMEOUT" => "DeadlineExceeded",
                _ => "BackoffLimitExceeded",
            };
            let why =
                bad.message.clone().unwrap_or_else(|| format!("{} ended {} (exit code {})", bad.display_id, bad.state, bad.exit_code));
            for ty in ["FailureTarget", "Failed"] {
                conditions.push(JobCondition {
                    type_: ty.into(),
                    status: "True".into(),
                    reason: Some(reason.into()),
                    message: Some(why.clone()),
                    last_transition_time: t.clone(),
                    last_probe_time: t.clone(),
                });
            }
        }
    }
    let selector = labels(&[("batch.kubernetes.io/controller-uid", &the_uid)]);
    let mut annotations = BTreeMap::from([
        (format!("{PREFIX}/job-id"), id.to_string()),
        (format!("{PREFIX}/job-name"), first.name.clone()),
        (UID_ANNOTATION.to_string(), first.uid.to_string()),
    ]);
    if array {
        let ids: Vec<String> = tasks.iter().filter_map(|t| t.info.array_task_id).map(|i| i.to_string()).collect();
        annotations.insert(format!("{PREFIX}/array-indexes"), ids.join(","));
    }
    let completed = index_ranges(tasks.iter().filter(|t| t.info.base_state() == "COMPLETED").filter_map(|t| t.info.array_task_id));
    let mut job_labels = labels(&[(&format!("{PREFIX}/user"), &first.user), (&format!("{PREFIX}/partition"), &first.partition)]);
    let spec = match kube {
        Some(k) => {
            for (key, v) in k.stored["metadata"]["labels"].as_object().into_iter().flatten() {
                job_labels.get_or_insert_default().insert(key.clone(), v.as_str().unwrap_or_default().to_string());
            }
            for (key, v) in k.stored["metadata"]["annotations"].as_object().into_iter().flatten() {
                annotations.entry(key.clone()).or_insert_with(|| v.as_str().unwrap_or_default().to_string());
            }
            kube_spec(k, &the_uid)
        }
        None => JobSpec {
            parallelism: Some(first.array_max_running.map_or(count, |m| (m as i32).min(count))),
            completions: Some(count),
            completion_mode: Some(if indexed { "Indexed" } else { "NonIndexed" }.into()),
            backoff_limit: Some(0),
            active_deadline_seconds: first.time_limit,
            suspend: Some(false),
            selector: Some(LabelSelector { match_labels: selector.clone(), ..Default::default() }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: labels(&[("batch.kubernetes.io/controller-uid", &the_uid), ("batch.kubernetes.io/job-name", &name)]),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![batch_container(tasks[0], None)],
                    restart_policy: Some("Never".into()),
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
    };
    Job {
        metadata: ObjectMeta {
            labels: job_labels,
            annotations: Some(annotations),
            ..meta(&name, Some(ns), the_uid.clone(), Some(created))
        },
        spec: Some(spec),
        status: Some(JobStatus {
            active: (active > 0).then_some(active),
            succeeded: (succeeded > 0).then_some(succeeded),
            failed: (failed > 0).then_some(failed),
            ready: Some(active),
            start_time: start.and_then(time),
            completion_time: if done && failed == 0 { end.and_then(time) } else { None },
            completed_indexes: (indexed && !completed.is_empty()).then_some(completed),
            conditions: (!conditions.is_empty()).then_some(conditions),
            ..Default::default()
        }),
    }
}

/// Indices as Kubernetes writes `completedIndexes`: ascending, runs as ranges (`0-2,5`).
fn index_ranges(indices: impl Iterator<Item = u32>) -> String {
    let mut v: Vec<u32> = indices.collect();
    v.sort_unstable();
    v.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if j == i { v[i].to_string() } else { format!("{}-{}", v[i], v[j]) });
        i = j + 1;
    }
    out.join(",")
}

/// A job's Job name, namespace and creation time: as written through the Kubernetes API, else
/// `job-ID` in `default` and its first submission.
fn job_identity<'a>(tasks: &[&'a Task]) -> (String, &'a str, i64) {
    let first = &tasks[0].info;
    match tasks[0].kube.as_deref() {
        Some(k) => (k.name.clone(), &k.namespace, k.created),
        None => {
            let id = first.array_job_id.or(first.het_job_id).unwrap_or(first.id);
            (job_name(id), DEFAULT_NAMESPACE, tasks.iter().map(|t| t.info.submit).min().unwrap_or(first.submit))
        }
    }
}

/// The labels Kubernetes gives a Job's template and Pods.
fn job_pod_labels(name: &str, job_uid: &str) -> [(&'static str, String); 4] {
    [
        ("batch.kubernetes.io/controller-uid", job_uid.to_string()),
        ("batch.kubernetes.io/job-name", name.to_string()),
        ("controller-uid", job_uid.to_string()),
        ("job-name", name.to_string()),
    ]
}

/// A written Job's spec as it reads: as written, with Kubernetes' defaults and the selector
/// and template labels its uid makes.
fn kube_spec(k: &KubeJob, job_uid: &str) -> JobSpec {
    let mut s: JobSpec = serde_json::from_value(k.stored["spec"].clone()).unwrap_or_default();
    s.parallelism.get_or_insert(1);
    s.completions.get_or_insert(1);
    s.completion_mode.get_or_insert_with(|| "NonIndexed".into());
    s.backoff_limit.get_or_insert(crate::DEFAULT_BACKOFF_LIMIT as i32);
    s.suspend.get_or_insert(false);
    s.manual_selector = Some(false);
    s.selector = Some(LabelSelector { match_labels: labels(&[("batch.kubernetes.io/controller-uid", job_uid)]), ..Default::default() });
    let l = s.template.metadata.get_or_insert_default().labels.get_or_insert_default();
    for (key, v) in job_pod_labels(&k.name, job_uid) {
        l.insert(key.into(), v);
    }
    s
}

/// A short suffix for a written Job's Pod (as Kubernetes' random one), from its Job's uid and
/// its place: five letters and digits.
fn pod_suffix(job_uid: &str, index: u32, rank: usize) -> String {
    let u = uid("PodSuffix", job_uid, i64::from(index) << 16 | rank as i64);
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    u.bytes().filter(u8::is_ascii_hexdigit).take(5).map(|b| ALPHABET[(b as usize * 7) % ALPHABET.len()] as char).collect()
}

/// The container of a batch task (`cpus`, memory and GPUs: on that node, else the request).
fn batch_container(t: &Task, on: Option<&wire::NodeAllocInfo>) -> Container {
    let (cpus, mem, gpus) = match on {
        Some(a) => (a.cpus, a.memory_mb, a.gpus),
        None => (t.info.cpus, t.info.mem_per_node_mb.unwrap_or(0), t.info.gpus),
    };
    let mut res = BTreeMap::from([("cpu".to_string(), q(cpus.max(1).to_string()))]);
    if mem > 0 {
        res.insert("memory".into(), q(format!("{mem}Mi")));
    }
    if gpus > 0 {
        res.insert("nvidia.com/gpu".into(), q(gpus.to_string()));
    }
    Container {
        name: "batch".into(),
        image: t.image.clone(),
        resources: Some(ResourceRequirements { limits: Some(res.clone()), requests: Some(res), ..Default::default() }),
        ..Default::default()
    }
}

/// The Pods of one job's tasks: one per task and node it holds (a pending task: one per node it
/// asks for).
pub fn job_pods(tasks: &[&Task], addrs: &BTreeMap<String, String>) -> Vec<Pod> {
    let (jname, ns, created) = job_identity(tasks);
    let job_uid = uid("Job", &scoped(ns, &jname), created);
    let kube = tasks[0].kube.as_deref();
    let mut out = Vec::new();
    for t in tasks {
        let info = &t.info;
        let index = info.array_task_id.or(info.het_job_offset).unwrap_or(0);
        let nodes: Vec<Option<&wire::NodeAllocInfo>> = if info.allocation.is_empty() {
            (0..info.nodes.max(1)).map(|_| None).collect()
        } else {
            info.allocation.iter().map(Some).collect()
        };
        let several = nodes.len() > 1;
        for (rank, on) in nodes.into_iter().enumerate() {
            let mut name = if several { format!("{jname}-{index}-{rank}") } else { format!("{jname}-{index}") };
            if kube.is_some() {
                // Not to be taken for a Deployment's Pod (`NAME-ID`): Kubernetes' own suffix.
                name = format!("{name}-{}", pod_suffix(&job_uid, index, rank));
            }
            out.push(task_pod(t, &name, &jname, &job_uid, index, on, addrs));
        }
    }
    out
}

fn task_pod(
    t: &Task,
    name: &str,
    jname: &str,
    job_uid: &str,
    index: u32,
    on: Option<&wire::NodeAllocInfo>,
    addrs: &BTreeMap<String, String>,
) -> Pod {
    let info = &t.info;
    let state = info.base_state();
    let fin = final_state(state);
    let started = info.start.filter(|_| !info.start_estimated && state != "PENDING");
    let phase = match state {
        "PENDING" => "Pending",
        "COMPLETED" => "Succeeded",
        s if final_state(s) => "Failed",
        _ => "Running",
    };
    let index_s = index.to_string();
    let kube = t.kube.as_deref();
    let indexed = kube.map_or(info.array_job_id.is_some(), KubeJob::indexed);
    let mut lab: BTreeMap<String, String> = kube.map(KubeJob::template_labels).unwrap_or_default().into_iter().collect();
    lab.extend(job_pod_labels(jname, job_uid).into_iter().map(|(k, v)| (k.to_string(), v)));
    if indexed {
        lab.insert("batch.kubernetes.io/job-completion-index".into(), index_s.clone());
    }
    lab.insert(format!("{PREFIX}/job-id"), info.id.to_string());
    let mut annotations =
        BTreeMap::from([(format!("{PREFIX}/job-id"), info.display_id.clone()), (UID_ANNOTATION.to_string(), info.uid.to_string())]);
    if indexed {
        annotations.insert("batch.kubernetes.io/job-completion-index".into(), index_s.clone());
    }
    // A run preempted and requeued: who preempted it (the `Preempted` event).
    if let Some(m) = info.message.as_deref().filter(|m| m.starts_with(PREEMPTED)) {
        annotations.insert(format!("{PREFIX}/preempted"), m.to_string());
    }
    let node = on.map(|a| a.name.clone());
    let ip = node.as_ref().and_then(|n| addrs.get(n)).map(|a| host_of(a));
    let mut container = batch_container(t, on);
    if let Some(mut c) =
        kube.and_then(|k| serde_json::from_value::<Container>(k.stored["spec"]["template"]["spec"]["containers"][0].clone()).ok())
    {
        // A written Job's Pod: its container as written, with what it was given.
        c.resources = container.resources.take();
        container = c;
    }
    let restart = kube.and_then(|k| k.stored["spec"]["template"]["spec"]["restartPolicy"].as_str()).unwrap_or("Never").to_string();
    let (exit, signal) = exit_of(&info.exit_code);
    let cstate = if fin {
        let reason = match state {
            "COMPLETED" => "Completed",
            "OUT_OF_MEMORY" => "OOMKilled",
            "TIMEOUT" => "DeadlineExceeded",
            "CANCELLED" => "Cancelled",
            "PREEMPTED" => "Preempted",
            "NODE_FAIL" => "NodeLost",
            _ => "Error",
        };
        ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: if signal > 0 { 128 + signal } else { exit },
                signal: (signal > 0).then_some(signal),
                reason: Some(reason.into()),
                message: info.message.clone(),
                started_at: started.and_then(time),
                finished_at: info.end.and_then(time),
                ..Default::default()
            }),
            ..Default::default()
        }
    } else if let Some(s) = started {
        ContainerState { running: Some(ContainerStateRunning { started_at: time(s) }), ..Default::default() }
    } else {
        let reason = if node.is_some() || info.state == "CONFIGURING" { "ContainerCreating" } else { "Pending" };
        ContainerState { waiting: Some(ContainerStateWaiting { reason: Some(reason.into()), message: None }), ..Default::default() }
    };
    let running = phase == "Running" && started.is_some();
    let scheduled = node.is_some() || started.is_some() || fin;
    let conditions = pod_conditions(scheduled, &info.reason, running, fin.then(|| "PodCompleted".into()), None);
    Pod {
        metadata: ObjectMeta {
            labels: Some(lab),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".into(),
                kind: "Job".into(),
                name: jname.into(),
                uid: job_uid.into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..meta(name, Some(kube.map_or(DEFAULT_NAMESPACE, |k| &k.namespace)), uid("Pod", name, info.submit), Some(info.submit))
        },
        spec: Some(PodSpec {
            containers: vec![container.clone()],
            node_name: node,
            restart_policy: Some(restart),
            scheduler_name: Some("tandem".into()),
            priority_class_name: (!info.qos.is_empty() && label_value_ok(&info.qos)).then(|| info.qos.clone()),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some(phase.into()),
            conditions: Some(conditions),
            host_ip: ip.clone(),
            pod_ip: ip,
            start_time: started.and_then(time),
            reason: (state == "SUSPENDED").then(|| "Suspended".into()),
            container_statuses: scheduled.then(|| {
                vec![ContainerStatus {
                    name: container.name.clone(),
                    image: container.image.clone().unwrap_or_default(),
                    image_id: String::new(),
                    ready: running,
                    restart_count: info.restarts as i32,
                    started: Some(running),
                    state: Some(cstate),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }),
    }
}

// ---- Services ----

fn quantity_text(q: &wire::Quantity) -> String {
    match q {
        wire::Quantity::Num(n) if n.fract() == 0.0 => format!("{}", *n as i64),
        wire::Quantity::Num(n) => n.to_string(),
        wire::Quantity::Text(t) => t.clone(),
    }
}

fn int_or_percent(q: &Option<wire::Quantity>) -> Option<IntOrString> {
    Some(match q.as_ref()? {
        wire::Quantity::Num(n) => IntOrString::Int(*n as i32),
        wire::Quantity::Text(t) => match t.trim().parse::<i32>() {
            Ok(n) => IntOrString::Int(n),
            Err(_) => IntOrString::String(t.trim().into()),
        },
    })
}

/// Memory as Kubernetes writes it: a bare number is MiB (as in a service spec); `MiB`, `GiB`
/// become `Mi`, `Gi`.
fn memory_text(q: &wire::Quantity) -> String {
    match q {
        wire::Quantity::Num(n) => format!("{}Mi", *n as i64),
        wire::Quantity::Text(t) => {
            let t = t.trim();
            for (from, to) in
                [("KiB", "Ki"), ("MiB", "Mi"), ("GiB", "Gi"), ("TiB", "Ti"), ("KB", "k"), ("MB", "M"), ("GB", "G"), ("TB", "T")]
            {
                if let Some(n) = t.strip_suffix(from) {
                    return format!("{n}{to}");
                }
            }
            if t.bytes().all(|b| b.is_ascii_digit()) { format!("{t}Mi") } else { t.to_string() }
        }
    }
}

/// The container a service's revision runs (values another user may not see are `(hidden)`,
/// as in `tandem service show`).
pub fn service_container(spec: &wire::ServiceSpec) -> Container {
    let r = &spec.resources;
    let mut res = BTreeMap::from([("cpu".to_string(), q(r.cpus.as_ref().map_or("1".into(), quantity_text)))]);
    if let Some(m) = &r.memory {
        res.insert("memory".into(), q(memory_text(m)));
    }
    if let Some(g) = r.gpus.as_ref().map(quantity_text).filter(|g| g != "0") {
        res.insert("nvidia.com/gpu".into(), q(g));
    }
    let env: Vec<EnvVar> = spec.env.iter().map(|(k, v)| EnvVar { name: k.clone(), value: Some(v.clone()), value_from: None }).collect();
    let probe = |p: &Option<wire::ProbeSpec>| {
        let p = p.as_ref()?;
        // The replica's own port is `$PORT` (a name, as Kubernetes writes a named port).
        let port = p.port.as_ref().map_or(IntOrString::String("$PORT".into()), |q| match int_or_percent(&Some(q.clone())) {
            Some(IntOrString::Int(n)) => IntOrString::Int(n),
            _ => IntOrString::String("$PORT".into()),
        });
        let secs = |q: &Option<wire::Quantity>| q.as_ref().and_then(|q| quantity_text(q).trim_end_matches('s').parse::<i32>().ok());
        Some(Probe {
            http_get: p.http.as_ref().map(|path| HTTPGetAction { path: Some(path.clone()), port: port.clone(), ..Default::default() }),
            tcp_socket: (p.http.is_none() && p.tcp == Some(true)).then(|| TCPSocketAction { port: port.clone(), host: None }),
            period_seconds: secs(&p.period),
            timeout_seconds: secs(&p.timeout),
            failure_threshold: secs(&p.failure_threshold),
            success_threshold: secs(&p.success_threshold),
            initial_delay_seconds: secs(&p.initial_delay),
            ..Default::default()
        })
    };
    Container {
        readiness_probe: probe(&spec.readiness),
        liveness_probe: probe(&spec.liveness),
        startup_probe: probe(&spec.startup),
        name: wire::service_namespace(&spec.name).1.to_string(),
        image: spec.image.clone(),
        command: Some(spec.command.clone()),
        args: (!spec.args.is_empty()).then(|| spec.args.clone()),
        env: (!env.is_empty()).then_some(env),
        working_dir: spec.workdir.clone(),
        resources: Some(ResourceRequirements { limits: Some(res.clone()), requests: Some(res), ..Default::default() }),
        ..Default::default()
    }
}

fn template_hash(rev: u32) -> String {
    format!("r{rev}")
}

/// The ReplicaSet name of a service's revision.
pub fn replica_set_name(service: &str, rev: u32) -> String {
    format!("{service}-{}", template_hash(rev))
}

fn service_labels(name: &str) -> Option<BTreeMap<String, String>> {
    labels(&[(&format!("{PREFIX}/service"), name)])
}

fn pod_template(spec: &wire::ServiceSpec, rev: Option<u32>, extra: BTreeMap<String, String>) -> PodTemplateSpec {
    let mut lab = extra;
    lab.extend(service_labels(&spec.name).unwrap_or_default());
    if let Some(r) = rev {
        lab.insert("pod-template-hash".into(), template_hash(r));
    }
    let annotations = spec.restarted_at.as_ref().map(|t| BTreeMap::from([(crate::write::RESTARTED_AT.to_string(), t.clone())]));
    PodTemplateSpec {
        metadata: Some(ObjectMeta { labels: Some(lab), annotations, ..Default::default() }),
        spec: Some(PodSpec {
            containers: vec![service_container(spec)],
            termination_grace_period_seconds: spec.termination_grace.as_ref().and_then(|g| quantity_text(g).parse().ok()),
            restart_policy: Some("Always".into()),
            priority_class_name: spec.qos.clone().filter(|q| label_value_ok(q)),
            ..Default::default()
        }),
    }
}

/// A service's Deployment. Its `generation` is the revision: `observedGeneration` equals it, as
/// the controller acts on a revision the moment it is applied.
pub fn deployment(s: &ServiceView) -> Deployment {
    let i = &s.info;
    let (ns, short) = wire::service_namespace(&i.name);
    let name = &i.name;
    let live: Vec<&wire::ReplicaRow> =
        i.replicas.iter().filter(|r| !matches!(r.state.as_str(), "Draining" | "Stopping" | "Gone")).collect();
    let updated = live.iter().filter(|r| r.revision == i.revision).count() as i32;
    let desired = i.desired as i32;
    let ready = i.ready as i32;
    let max_unavailable = match int_or_percent(&i.spec.rolling_update.max_unavailable) {
        Some(IntOrString::Int(n)) => n,
        Some(IntOrString::String(p)) => p.trim_end_matches('%').parse::<i32>().map_or(0, |p| desired * p / 100),
        None => desired / 4,
    };
    let available = ready >= desired - max_unavailable;
    let complete = i.updated_ready as i32 >= desired && live.len() as i32 == updated && !i.deleting;
    let rs = replica_set_name(short, i.revision);
    let created = time(s.created);
    let conditions = vec![
        DeploymentCondition {
            type_: Some("Available".into()),
            status: Some(condition_status(available)),
            reason: Some(if available { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" }.into()),
            message: Some(
                if available { "Deployment has minimum availability." } else { "Deployment does not have minimum availability." }.into(),
            ),
            last_transition_time: created.clone(),
            last_update_time: created.clone(),
        },
        DeploymentCondition {
            type_: Some("Progressing".into()),
            status: Some("True".into()),
            reason: Some(if complete { "NewReplicaSetAvailable" } else { "ReplicaSetUpdated" }.into()),
            message: Some(if complete {
                format!("ReplicaSet \"{rs}\" has successfully progressed.")
            } else {
                format!("ReplicaSet \"{rs}\" is progressing.")
            }),
            last_transition_time: created.clone(),
            last_update_time: created,
        },
    ];
    let ru = &i.spec.rolling_update;
    Deployment {
        metadata: ObjectMeta {
            generation: Some(i64::from(i.revision)),
            labels: service_labels(name),
            annotations: Some(BTreeMap::from([
                ("deployment.kubernetes.io/revision".to_string(), i.revision.to_string()),
                (format!("{PREFIX}/user"), i.user.clone()),
                (UID_ANNOTATION.to_string(), s.uid.to_string()),
            ])),
            ..meta(short, Some(ns), uid("Deployment", name, s.created), Some(s.created))
        },
        spec: DeploymentSpec {
            replicas: Some(desired),
            selector: LabelSelector { match_labels: service_labels(name), ..Default::default() },
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: int_or_percent(&ru.max_surge).or(Some(IntOrString::String("25%".into()))),
                    max_unavailable: int_or_percent(&ru.max_unavailable).or(Some(IntOrString::String("25%".into()))),
                }),
            }),
            template: pod_template(&i.spec, None, s.template_labels()),
            revision_history_limit: Some(10),
            progress_deadline_seconds: Some(600),
            ..Default::default()
        },
        status: Some(DeploymentStatus {
            observed_generation: Some(i64::from(i.revision)),
            replicas: Some(live.len() as i32),
            updated_replicas: Some(updated),
            ready_replicas: Some(ready),
            available_replicas: Some(ready),
            unavailable_replicas: (desired > ready).then_some(desired - ready),
            conditions: Some(conditions),
            ..Default::default()
        }),
    }
}

/// A service's Deployment as JSON: [`deployment`], and for one written through the Kubernetes
/// API its labels, annotations and spec as written (the annotations Tandem derives added, the
/// replica count the service's now: a `scale` or the autoscaler may have changed it).
pub fn deployment_value(s: &ServiceView) -> serde_json::Value {
    let mut d = serde_json::to_value(deployment(s)).expect("a Deployment serializes");
    let Some(k) = &s.kube else { return d };
    d["metadata"]["labels"] = k["metadata"]["labels"].clone();
    if d["metadata"]["labels"].is_null() {
        d["metadata"].as_object_mut().expect("metadata").remove("labels");
    }
    let derived = d["metadata"]["annotations"].as_object().cloned().unwrap_or_default();
    let mut annotations = k["metadata"]["annotations"].as_object().cloned().unwrap_or_default();
    annotations.extend(derived);
    d["metadata"]["annotations"] = serde_json::Value::Object(annotations);
    for (key, v) in k["spec"].as_object().into_iter().flatten() {
        d["spec"][key] = v.clone();
    }
    d["spec"]["replicas"] = serde_json::json!(s.info.desired);
    d
}

/// A service's ReplicaSets: one per revision kept, the current one last.
pub fn replica_sets(s: &ServiceView) -> Vec<ReplicaSet> {
    let i = &s.info;
    let (ns, short) = wire::service_namespace(&i.name);
    let dep_uid = uid("Deployment", &i.name, s.created);
    let mut revs: Vec<(u32, &wire::ServiceSpec)> = s.history.iter().map(|(r, sp)| (*r, sp)).collect();
    revs.retain(|(r, _)| *r != i.revision);
    revs.push((i.revision, &i.spec));
    revs.into_iter()
        .map(|(rev, spec)| {
            let name = replica_set_name(short, rev);
            let mine: Vec<&wire::ReplicaRow> = i.replicas.iter().filter(|r| r.revision == rev).collect();
            let ready = mine.iter().filter(|r| r.state == "Ready").count() as i32;
            let want = if rev == i.revision { i.desired as i32 } else { 0 };
            let mut sel = s.template_labels();
            sel.extend(service_labels(&i.name).unwrap_or_default());
            sel.insert("pod-template-hash".into(), template_hash(rev));
            ReplicaSet {
                metadata: ObjectMeta {
                    labels: Some(sel.clone()),
                    generation: Some(1),
                    annotations: Some(BTreeMap::from([
                        ("deployment.kubernetes.io/revision".to_string(), rev.to_string()),
                        ("deployment.kubernetes.io/desired-replicas".to_string(), i.desired.to_string()),
                        (UID_ANNOTATION.to_string(), s.uid.to_string()),
                    ])),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "apps/v1".into(),
                        kind: "Deployment".into(),
                        name: short.to_string(),
                        uid: dep_uid.clone(),
                        controller: Some(true),
                        block_owner_deletion: Some(true),
                    }]),
                    ..meta(&name, Some(ns), uid("ReplicaSet", &replica_set_name(&i.name, rev), s.created), Some(s.created))
                },
                spec: ReplicaSetSpec {
                    replicas: Some(want),
                    selector: LabelSelector { match_labels: Some(sel), ..Default::default() },
                    template: Some(rs_template(s, spec, rev)),
                    ..Default::default()
                },
                status: Some(ReplicaSetStatus {
                    replicas: mine.len() as i32,
                    fully_labeled_replicas: Some(mine.len() as i32),
                    ready_replicas: Some(ready),
                    available_replicas: Some(ready),
                    observed_generation: Some(1),
                    ..Default::default()
                }),
            }
        })
        .collect()
}

/// A ReplicaSet's Pod template: the current revision's of a Deployment written through the
/// API is the template as written (with its `pod-template-hash`), so that kubectl finds it as
/// the Deployment's new ReplicaSet (`describe`'s `NewReplicaSet`, which compares templates);
/// otherwise the one its service spec makes.
fn rs_template(s: &ServiceView, spec: &wire::ServiceSpec, rev: u32) -> PodTemplateSpec {
    let written = s.kube.as_ref().filter(|_| rev == s.info.revision).map(|k| &k["spec"]["template"]);
    match written.and_then(|t| serde_json::from_value::<PodTemplateSpec>(t.clone()).ok()) {
        Some(mut t) => {
            let m = t.metadata.get_or_insert_default();
            m.labels.get_or_insert_default().insert("pod-template-hash".into(), template_hash(rev));
            m.creation_timestamp = None;
            t
        }
        None => pod_template(spec, Some(rev), s.template_labels()),
    }
}

/// A service's Pods, one per replica. A replica on its way out has a `deletionTimestamp` (its
/// job's end, else its start: stable, so a watch sees it change once).
pub fn service_pods(s: &ServiceView, addrs: &BTreeMap<String, String>) -> Vec<Pod> {
    let i = &s.info;
    let (ns, short) = wire::service_namespace(&i.name);
    let spec_of = |rev: u32| s.history.iter().find(|(r, _)| *r == rev).map_or(&i.spec, |(_, sp)| sp);
    i.replicas
        .iter()
        .map(|r| {
            let job = s.jobs.iter().find(|j| j.id == r.job);
            let created = job.map_or(s.created, |j| j.submit);
            let started = job.and_then(|j| j.start.filter(|_| !j.start_estimated && j.state != "PENDING"));
            let container = service_container(spec_of(r.revision));
            let rs = replica_set_name(short, r.revision);
            // A replica `web.team-a-17` is the Pod `web-17` of namespace `team-a`.
            let pod = r.id.strip_prefix(i.name.as_str()).map_or_else(|| r.id.clone(), |rest| format!("{short}{rest}"));
            let mut lab = s.template_labels();
            lab.extend(service_labels(&i.name).unwrap_or_default());
            lab.insert("pod-template-hash".into(), template_hash(r.revision));
            lab.insert(format!("{PREFIX}/job-id"), r.job.to_string());
            let leaving = matches!(r.state.as_str(), "Draining" | "Stopping" | "Gone");
            let phase = match r.state.as_str() {
                "Pending" => "Pending",
                "Lost" => "Unknown",
                "Gone" => "Succeeded",
                _ if started.is_none() => "Pending",
                _ => "Running",
            };
            let ready = r.state == "Ready";
            let cstate = match (r.state.as_str(), started) {
                ("CrashLoopBackOff", _) => ContainerState {
                    waiting: Some(ContainerStateWaiting { reason: Some("CrashLoopBackOff".into()), message: r.message.clone() }),
                    ..Default::default()
                },
                (_, Some(t)) => ContainerState { running: Some(ContainerStateRunning { started_at: time(t) }), ..Default::default() },
                _ => ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some(if r.node.is_some() { "ContainerCreating" } else { "Pending" }.into()),
                        message: None,
                    }),
                    ..Default::default()
                },
            };
            let scheduled = r.node.is_some();
            let conditions = pod_conditions(scheduled, &r.reason, ready, None, r.message.clone());
            let ip = r.node.as_ref().and_then(|n| addrs.get(n)).map(|a| host_of(a));
            Pod {
                metadata: ObjectMeta {
                    labels: Some(lab),
                    deletion_timestamp: leaving.then(|| time(job.and_then(|j| j.end).or(started).unwrap_or(created))).flatten(),
                    annotations: Some(BTreeMap::from([
                        (format!("{PREFIX}/replica-state"), r.state.clone()),
                        (UID_ANNOTATION.to_string(), s.uid.to_string()),
                    ])),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "apps/v1".into(),
                        kind: "ReplicaSet".into(),
                        name: rs.clone(),
                        uid: uid("ReplicaSet", &replica_set_name(&i.name, r.revision), s.created),
                        controller: Some(true),
                        block_owner_deletion: Some(true),
                    }]),
                    ..meta(&pod, Some(ns), uid("Pod", &r.id, created), Some(created))
                },
                spec: Some(PodSpec {
                    containers: vec![container.clone()],
                    node_name: r.node.clone(),
                    restart_policy: Some("Always".into()),
                    scheduler_name: Some("tandem".into()),
                    ..Default::default()
                }),
                status: Some(PodStatus {
                    phase: Some(phase.into()),
                    conditions: Some(conditions),
                    host_ip: ip.clone(),
                    pod_ip: ip,
                    start_time: started.and_then(time),
                    container_statuses: scheduled.then(|| {
                        vec![ContainerStatus {
                            name: container.name.clone(),
                            image: container.image.clone().unwrap_or_default(),
                            image_id: String::new(),
                            ready,
                            restart_count: r.restarts as i32,
                            started: Some(started.is_some()),
                            state: Some(cstate),
                            ..Default::default()
                        }]
                    }),
                    ..Default::default()
                }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn info(id: u64, state: &str, extra: Value) -> JobInfo {
        let mut v = json!({"id": id, "display_id": id.to_string(), "name": "train", "user": "alice", "account": "a", "partition": "batch",
            "qos": "normal", "state": state, "reason": if state == "PENDING" { "Resources" } else { "None" }, "nodelist": "", "nodes": 1,
            "ntasks": 1, "cpus": 2, "gpus": 0, "time_limit": 3600, "submit": 1_800_000_000i64, "start": 1_800_000_010i64,
            "start_estimated": false, "end": null, "exit_code": "0:0", "restarts": 0, "workdir": "/w", "output": "o", "steps": []});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        serde_json::from_value(v).unwrap()
    }

    fn task(id: u64, state: &str, extra: Value) -> Task {
        Task { info: info(id, state, extra), image: None, kube: None }
    }

    fn alloc(node: &str) -> Value {
        json!([{"name": node, "cpus": 2, "memory_mb": 1024, "gpus": 1}])
    }

    #[test]
    fn a_deployment_has_an_event_per_replica_set_it_scaled() {
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "uid": "u1", "annotations": {UID_ANNOTATION: "1000"}}});
        let rs = |n: &str, r: i64| {
            json!({"metadata": {"name": n, "creationTimestamp": "2026-12-06T10:00:00Z",
            "ownerReferences": [{"name": "web", "uid": "u1"}]}, "spec": {"replicas": r}})
        };
        let ev = deployment_events(&[d], &[rs("web-r1", 0), rs("web-r2", 3), json!({"metadata": {"name": "orphan"}})]);
        let got: Vec<(&str, &str, &str)> = ev
            .iter()
            .map(|e| {
                (e["metadata"]["name"].as_str().unwrap(), e["involvedObject"]["kind"].as_str().unwrap(), e["message"].as_str().unwrap())
            })
            .collect();
        assert_eq!(
            got,
            [
                ("web.web-r1.scalingreplicaset", "Deployment", "Scaled down replica set web-r1 to 0"),
                ("web.web-r2.scalingreplicaset", "Deployment", "Scaled up replica set web-r2 to 3")
            ]
        );
        assert_eq!(ev[0]["involvedObject"]["uid"], "u1");
        assert_eq!(ev[0]["metadata"]["annotations"][UID_ANNOTATION], "1000", "seen by whom the Deployment is");
    }

    #[test]
    fn a_preempted_requeued_job_has_a_preempted_event_that_names_its_preemptor() {
        let msg = "preempted by job 9, a replica of service llm (qos serve); requeued";
        let t = task(4, "PENDING", json!({"message": msg, "restarts": 1, "reason": "Priority"}));
        let pod = serde_json::to_value(&job_pods(&[&t], &BTreeMap::new())[0]).unwrap();
        assert_eq!(pod["metadata"]["annotations"]["tandem.dev/preempted"], msg);
        let ev = events(&[pod], &[]);
        let p: Vec<&Value> = ev.iter().filter(|e| e["reason"] == "Preempted").collect();
        assert_eq!(p.len(), 1, "{ev:?}");
        assert_eq!((p[0]["type"].as_str(), p[0]["message"].as_str()), (Some("Warning"), Some(msg)));
        assert_eq!(p[0]["involvedObject"]["name"], "job-4-0");
        // Another message is no preemption.
        let t = task(5, "PENDING", json!({"message": "held by its user"}));
        let pod = serde_json::to_value(&job_pods(&[&t], &BTreeMap::new())[0]).unwrap();
        assert!(events(&[pod], &[]).iter().all(|e| e["reason"] != "Preempted"));
    }

    #[test]
    fn a_written_job_reads_with_its_name_spec_and_template() {
        let stored = json!({"metadata": {"name": "pi", "labels": {"team": "a"}},
            "spec": {"completions": 3, "completionMode": "Indexed", "suspend": true,
                "template": {"metadata": {"labels": {"app": "pi"}}, "spec": {"restartPolicy": "OnFailure",
                    "containers": [{"name": "calc", "image": "busybox", "command": ["true"]}]}}}, "job": 10});
        let kube = std::sync::Arc::new(KubeJob { name: "pi".into(), namespace: "default".into(), created: 1_800_000_000, stored });
        let mut tasks = vec![
            task(10, "COMPLETED", json!({"array_job_id": 10, "array_task_id": 0, "allocation": alloc("n1")})),
            task(11, "COMPLETED", json!({"array_job_id": 10, "array_task_id": 1, "allocation": alloc("n1")})),
            task(12, "PENDING", json!({"array_job_id": 10, "array_task_id": 2, "start": null})),
        ];
        for t in &mut tasks {
            t.kube = Some(kube.clone());
        }
        let groups = group_jobs(&tasks);
        let j = serde_json::to_value(job(&groups[0])).unwrap();
        assert_eq!(j["metadata"]["name"], "pi");
        assert_eq!(j["metadata"]["labels"]["team"], "a");
        assert_eq!(j["metadata"]["annotations"]["tandem.dev/job-id"], "10");
        assert_eq!(
            (j["spec"]["completions"].as_i64(), j["spec"]["parallelism"].as_i64(), j["spec"]["backoffLimit"].as_i64()),
            (Some(3), Some(1), Some(6))
        );
        assert_eq!(j["status"]["completedIndexes"], "0-1");
        assert_eq!(j["status"]["conditions"][0]["type"], "Suspended");
        let sel = &j["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"];
        assert_eq!(&j["spec"]["template"]["metadata"]["labels"]["batch.kubernetes.io/controller-uid"], sel);
        assert_eq!(j["spec"]["template"]["metadata"]["labels"]["job-name"], "pi");
        let pods: Vec<Value> = job_pods(&groups[0], &BTreeMap::new()).into_iter().map(|p| serde_json::to_value(p).unwrap()).collect();
        let names: Vec<&str> = pods.iter().map(|p| p["metadata"]["name"].as_str().unwrap()).collect();
        assert!(names.iter().enumerate().all(|(i, n)| n.starts_with(&format!("pi-{i}-")) && n.len() == 10), "{names:?}");
        assert_ne!(names[0][5..], names[1][5..], "suffixes differ");
        let p = &pods[1];
        assert_eq!(p["metadata"]["labels"]["app"], "pi");
        assert_eq!(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"], "1");
        assert_eq!(&p["metadata"]["labels"]["controller-uid"], sel);
        assert_eq!(p["metadata"]["ownerReferences"][0]["name"], "pi");
        assert_eq!(p["spec"]["containers"][0]["name"], "calc");
        assert_eq!(p["spec"]["restartPolicy"], "OnFailure");
        assert_eq!(index_ranges([5, 0, 1, 2, 9, 8].into_iter()), "0-2,5,8-9");
        // `kubectl describe job`'s Events: a Pod created for each task, suspended.
        let ev = job_events(&[j], &pods);
        let said: Vec<(&str, &str)> = ev.iter().map(|e| (e["reason"].as_str().unwrap(), e["message"].as_str().unwrap())).collect();
        assert_eq!(said.len(), 4, "{said:?}");
        assert!(said[..3].iter().zip(&names).all(|((r, m), n)| *r == "SuccessfulCreate" && *m == format!("Created pod: {n}")), "{said:?}");
        assert_eq!(said[3], ("Suspended", "Job suspended"));
        assert_eq!(ev[0]["involvedObject"]["kind"], "Job");
    }

    #[test]
    fn an_array_is_one_indexed_job_with_a_pod_per_task() {
        let tasks = vec![
            task(10, "COMPLETED", json!({"array_job_id": 10, "array_task_id": 0, "allocation": alloc("n1"), "end": 1_800_000_100i64})),
            task(11, "RUNNING", json!({"array_job_id": 10, "array_task_id": 1, "allocation": alloc("n2")})),
            task(12, "PENDING", json!({"array_job_id": 10, "array_task_id": 2, "start": null})),
            task(
                20,
                "RUNNING",
                json!({"nodes": 2, "allocation": [{"name": "n1", "cpus": 1, "memory_mb": 0, "gpus": 0},
                {"name": "n2", "cpus": 1, "memory_mb": 0, "gpus": 0}]}),
            ),
        ];
        let groups = group_jobs(&tasks);
        assert_eq!(groups.len(), 2);
        let j = serde_json::to_value(job(&groups[0])).unwrap();
        assert_eq!(j["metadata"]["name"], "job-10");
        assert_eq!(j["spec"]["completionMode"], "Indexed");
        assert_eq!(j["spec"]["completions"], 3);
        assert_eq!(j["status"]["succeeded"], 1);
        assert_eq!(j["status"]["active"], 1);
        assert_eq!(j["status"]["completedIndexes"], "0");
        assert!(j["status"]["conditions"].is_null(), "not done: {j}");
        let addrs = BTreeMap::from([("n1".to_string(), "10.0.0.1:7201".to_string())]);
        let pods: Vec<Value> = job_pods(&groups[0], &addrs).into_iter().map(|p| serde_json::to_value(p).unwrap()).collect();
        let names: Vec<&str> = pods.iter().map(|p| p["metadata"]["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["job-10-0", "job-10-1", "job-10-2"]);
        assert_eq!(pods[0]["status"]["phase"], "Succeeded");
        assert_eq!(pods[0]["status"]["podIP"], "10.0.0.1");
        assert_eq!(pods[0]["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"], "0");
        assert_eq!(pods[0]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], "1");
        assert_eq!(pods[1]["status"]["phase"], "Running");
        assert_eq!(pods[2]["status"]["phase"], "Pending");
        assert_eq!(pods[2]["status"]["conditions"][0]["message"], "pending: Resources");
        assert_eq!(crate::table::pod_status(&pods[0]), "Completed");
        // Owned by their Job, as kubectl's `logs job/x` and garbage collection expect.
        assert_eq!(pods[1]["metadata"]["ownerReferences"][0]["uid"], j["metadata"]["uid"]);
        let multi: Vec<Value> = job_pods(&groups[1], &addrs).into_iter().map(|p| serde_json::to_value(p).unwrap()).collect();
        let names: Vec<&str> = multi.iter().map(|p| p["metadata"]["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["job-20-0-0", "job-20-0-1"]);
        assert_eq!(job_id("job-20"), Some(20));
        assert_eq!(job_id("job-020"), None);
        assert_eq!(job_id("web"), None);
    }

    #[test]
    fn a_job_that_ended_says_how() {
        let done = [task(5, "COMPLETED", json!({"end": 1_800_000_100i64}))];
        let j = serde_json::to_value(job(&done.iter().collect::<Vec<_>>())).unwrap();
        let types: Vec<&str> = j["status"]["conditions"].as_array().unwrap().iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["SuccessCriteriaMet", "Complete"]);
        assert_eq!(j["status"]["completionTime"], "2027-01-15T08:01:40Z");
        let late = [task(6, "TIMEOUT", json!({"end": 1_800_000_100i64, "exit_code": "0:15"}))];
        let j = serde_json::to_value(job(&late.iter().collect::<Vec<_>>())).unwrap();
        assert_eq!(j["status"]["conditions"][1]["type"], "Failed");
        assert_eq!(j["status"]["conditions"][1]["reason"], "DeadlineExceeded");
        assert!(j["status"]["completionTime"].is_null());
        let pod = serde_json::to_value(&job_pods(&late.iter().collect::<Vec<_>>(), &BTreeMap::new())[0]).unwrap();
        assert_eq!(pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 143);
        assert_eq!(crate::table::pod_status(&pod), "DeadlineExceeded");
    }

    fn service(replicas: Vec<wire::ReplicaRow>, desired: u32, ready: u32, updated_ready: u32) -> ServiceView {
        let spec: wire::ServiceSpec = serde_json::from_value(json!({"name": "web", "command": ["serve", "$PORT"], "env": {"A": "1"},
            "image": "busybox", "resources": {"cpus": 2, "memory": "512MiB", "gpus": 1}}))
        .unwrap();
        let mut old = spec.clone();
        old.image = Some("busybox:old".into());
        ServiceView {
            info: ServiceInfo {
                name: "web".into(),
                user: "alice".into(),
                revision: 2,
                history: vec![1],
                desired,
                ready,
                updated_ready,
                replicas,
                deleting: false,
                scale_log: vec![],
                stats: Default::default(),
                spec,
            },
            created: 1_800_000_000,
            uid: 1000,
            kube: None,
            jobs: vec![],
            history: vec![(1, old)],
        }
    }

    fn replica(job: u64, state: &str, revision: u32) -> wire::ReplicaRow {
        wire::ReplicaRow {
            id: format!("web-{job}"),
            job,
            state: state.into(),
            revision,
            node: (state != "Pending").then(|| "n1".into()),
            addr: None,
            restarts: 0,
            message: None,
            reason: String::new(),
            log: String::new(),
        }
    }

    #[test]
    fn a_service_is_a_deployment_with_a_replica_set_per_revision() {
        let s = service(vec![replica(7, "Ready", 2), replica(8, "Ready", 2)], 2, 2, 2);
        let d = serde_json::to_value(deployment(&s)).unwrap();
        assert_eq!(d["spec"]["replicas"], 2);
        assert_eq!(d["metadata"]["generation"], d["status"]["observedGeneration"]);
        assert_eq!(d["status"]["updatedReplicas"], 2);
        assert_eq!(d["status"]["availableReplicas"], 2);
        assert_eq!(d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"], "512Mi");
        assert_eq!(d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], "1");
        let cond = |t: &str| d["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == t).unwrap().clone();
        assert_eq!(cond("Available")["status"], "True");
        assert_eq!(cond("Progressing")["reason"], "NewReplicaSetAvailable");
        let rs: Vec<Value> = replica_sets(&s).into_iter().map(|r| serde_json::to_value(r).unwrap()).collect();
        assert_eq!(rs.len(), 2);
        assert_eq!(rs[0]["metadata"]["name"], "web-r1");
        assert_eq!(rs[0]["spec"]["template"]["spec"]["containers"][0]["image"], "busybox:old");
        assert_eq!(rs[0]["spec"]["replicas"], 0);
        assert_eq!(rs[1]["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "2");
        assert_eq!(rs[1]["status"]["readyReplicas"], 2);
        // A rollout under way: an old replica still serves, a new one starts.
        let s = service(vec![replica(7, "Ready", 1), replica(9, "Starting", 2), replica(3, "Draining", 1)], 1, 1, 0);
        let d = serde_json::to_value(deployment(&s)).unwrap();
        assert_eq!(d["status"]["replicas"], 2);
        assert_eq!(d["status"]["updatedReplicas"], 1);
        assert_eq!(d["status"]["conditions"][1]["reason"], "ReplicaSetUpdated");
        let pods: Vec<Value> = service_pods(&s, &BTreeMap::new()).into_iter().map(|p| serde_json::to_value(p).unwrap()).collect();
        assert_eq!(pods[0]["metadata"]["labels"]["pod-template-hash"], "r1");
        assert_eq!(pods[0]["metadata"]["ownerReferences"][0]["name"], "web-r1");
        assert_eq!(pods[0]["spec"]["containers"][0]["image"], "busybox:old");
        assert_eq!(crate::table::pod_status(&pods[2]), "Terminating");
        assert!(pods[0]["metadata"]["deletionTimestamp"].is_null());
    }

    #[test]
    fn a_drained_or_lost_node_says_so() {
        let n: NodeInfo = serde_json::from_value(json!({"name": "n1", "state": "drain", "cpus": [8, 2], "memory_mb": [16384, 0],
            "gpus": [4, 1, "h100"], "reason": "maintenance", "addr": "10.0.0.5:7201", "partitions": ["gpu"], "features": ["ib"]}))
        .unwrap();
        let v = serde_json::to_value(node(&n)).unwrap();
        assert_eq!(v["spec"]["unschedulable"], true);
        assert_eq!(v["spec"]["taints"][0]["key"], "node.kubernetes.io/unschedulable");
        assert_eq!(v["status"]["capacity"]["nvidia.com/gpu"], "4");
        assert_eq!(v["status"]["capacity"]["memory"], "16384Mi");
        assert_eq!(v["status"]["addresses"][0]["address"], "10.0.0.5");
        assert_eq!(v["metadata"]["labels"]["tandem.dev/partition-gpu"], "true");
        assert_eq!(v["metadata"]["labels"]["nvidia.com/gpu.product"], "h100");
        assert_eq!(crate::table::cells("Node", &v, 0)[1], "Ready,SchedulingDisabled");
        let mut down = n.clone();
        down.state = "down".into();
        let v = serde_json::to_value(node(&down)).unwrap();
        assert_eq!(v["status"]["conditions"][0]["status"], "Unknown");
        assert_eq!(crate::table::cells("Node", &v, 0)[1], "Unknown");
    }

    #[test]
    fn uids_are_stable_and_differ_by_kind_name_and_creation() {
        assert_eq!(uid("Pod", "a", 1), uid("Pod", "a", 1));
        assert_ne!(uid("Pod", "a", 1), uid("Pod", "a", 2));
        assert_ne!(uid("Pod", "a", 1), uid("Job", "a", 1));
        assert_eq!(uid("Pod", "a", 1).len(), 36);
        assert!(label_value_ok("a.b-c_d") && label_value_ok("") && !label_value_ok("-a") && !label_value_ok(&"a".repeat(64)));
    }
}

// ---- Events ----

/// An Event's uid, from its namespace and name.
fn event_uid(ns: &str, name: &str) -> String {
    uid("Event", &scoped(ns, name), 0)
}

/// Renames an Event (one of several about the same object).
fn rename_event(ev: &mut serde_json::Value, name: String) {
    let ns = ev["metadata"]["namespace"].as_str().unwrap_or(DEFAULT_NAMESPACE).to_string();
    ev["metadata"]["uid"] = serde_json::json!(event_uid(&ns, &name));
    ev["metadata"]["name"] = serde_json::json!(name);
}

fn event(obj: &serde_json::Value, reason: &str, kind: &str, message: &str, at: Option<&serde_json::Value>) -> serde_json::Value {
    let m = &obj["metadata"];
    let name = format!("{}.{}", m["name"].as_str().unwrap_or(""), reason.to_ascii_lowercase());
    let at = at.filter(|t| t.is_string()).unwrap_or(&m["creationTimestamp"]).clone();
    let ns = m["namespace"].as_str().unwrap_or(DEFAULT_NAMESPACE);
    let mut ev = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": ns, "uid": event_uid(ns, &name), "creationTimestamp": at},
        "involvedObject": {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": m["name"], "uid": m["uid"]},
        "reason": reason,
        "message": message,
        "type": kind,
        "count": 1,
        "firstTimestamp": at,
        "lastTimestamp": at,
        "source": {"component": "tandem"},
        "reportingComponent": "tandem",
        "reportingInstance": "controller",
    });
    if !m["namespace"].is_null() {
        ev["involvedObject"]["namespace"] = m["namespace"].clone();
    }
    if let Some(u) = m["annotations"][UID_ANNOTATION].as_str() {
        ev["metadata"]["annotations"] = serde_json::json!({UID_ANNOTATION: u});
    }
    ev
}

/// A Deployment's Events, derived from its ReplicaSets as they are now (`kubectl describe
/// deploy`): `ScalingReplicaSet`, "Scaled up replica set NAME to N" for each with replicas
/// wanted, "Scaled down ... to 0" for the earlier revisions'.
pub fn deployment_events(deployments: &[serde_json::Value], replica_sets: &[serde_json::Value]) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for rs in replica_sets {
        let owner_ref = &rs["metadata"]["ownerReferences"][0];
        let Some(owner) = owner_ref["name"].as_str() else { continue };
        let Some(d) = deployments.iter().find(|d| d["metadata"]["uid"] == owner_ref["uid"]) else { continue };
        let name = rs["metadata"]["name"].as_str().unwrap_or("");
        let want = rs["spec"]["replicas"].as_i64().unwrap_or(0);
        let how = if want > 0 { "up" } else { "down" };
        let mut ev = event(
            d,
            "ScalingReplicaSet",
            "Normal",
            &format!("Scaled {how} replica set {name} to {want}"),
            Some(&rs["metadata"]["creationTimestamp"]),
        );
        // One per ReplicaSet.
        rename_event(&mut ev, format!("{owner}.{name}.scalingreplicaset"));
        out.push(ev);
    }
    out
}

/// A Job's Events, derived from its Pods and conditions as they are now (`kubectl describe
/// job`): `SuccessfulCreate` per Pod ("Created pod: NAME"), `Suspended`, `Completed`, and why
/// it failed (`BackoffLimitExceeded`, `DeadlineExceeded`).
pub fn job_events(jobs: &[serde_json::Value], pods: &[serde_json::Value]) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for p in pods {
        let owner = &p["metadata"]["ownerReferences"][0];
        if owner["kind"] != "Job" {
            continue;
        }
        let Some(j) = jobs.iter().find(|j| j["metadata"]["uid"] == owner["uid"]) else { continue };
        let pod = p["metadata"]["name"].as_str().unwrap_or("");
        let mut ev = event(j, "SuccessfulCreate", "Normal", &format!("Created pod: {pod}"), Some(&p["metadata"]["creationTimestamp"]));
        rename_event(&mut ev, format!("{}.{pod}.successfulcreate", j["metadata"]["name"].as_str().unwrap_or("")));
        out.push(ev);
    }
    for j in jobs {
        for c in j["status"]["conditions"].as_array().into_iter().flatten().filter(|c| c["status"] == "True") {
            let at = Some(&c["lastTransitionTime"]);
            match (c["type"].as_str(), c["reason"].as_str()) {
                (Some("Complete"), _) => out.push(event(j, "Completed", "Normal", "Job completed", at)),
                (Some("Suspended"), _) => out.push(event(j, "Suspended", "Normal", "Job suspended", at)),
                (Some("Failed"), Some(reason)) => {
                    let why = c["message"].as_str().unwrap_or("");
                    let said = match reason {
                        "BackoffLimitExceeded" => format!("Job has reached the specified backoff limit: {why}"),
                        "DeadlineExceeded" => format!("Job was active longer than specified deadline: {why}"),
                        _ => why.to_string(),
                    };
                    out.push(event(j, reason, "Warning", &said, at));
                }
                _ => {}
            }
        }
    }
    out
}

/// The Events of the objects' states, derived as the objects are (no history is kept): why a
/// Pod waits (`FailedScheduling`, with Tandem's pending reason), where it was placed
/// (`Scheduled`), why its container is not ready (`Unhealthy`, `BackOff`) or how it ended
/// (`Preempted`, `Cancelled`, `OOMKilled`, `DeadlineExceeded`, `NodeLost`, `Error`), and a Node
/// that stopped posting its lease (`NodeNotReady`).
pub fn events(pods: &[serde_json::Value], nodes: &[serde_json::Value]) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for p in pods {
        let st = &p["status"];
        let cond = |t: &str| st["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == t).cloned();
        match cond("PodScheduled") {
            Some(c) if c["status"] == "False" => {
                let why = c["message"].as_str().unwrap_or("pending");
                out.push(event(p, "FailedScheduling", "Warning", &format!("Tandem's scheduler: {why}"), None));
            }
            Some(_) => {
                if let Some(n) = p["spec"]["nodeName"].as_str() {
                    let name = p["metadata"]["name"].as_str().unwrap_or("");
                    let ns = p["metadata"]["namespace"].as_str().unwrap_or(DEFAULT_NAMESPACE);
                    out.push(event(p, "Scheduled", "Normal", &format!("Successfully assigned {ns}/{name} to {n}"), Some(&st["startTime"])));
                }
            }
            None => {}
        }
        if let Some(c) = cond("Ready").filter(|c| c["status"] == "False" && c["message"].is_string()) {
            out.push(event(p, "Unhealthy", "Warning", c["message"].as_str().unwrap_or(""), None));
        }
        let ended_preempted = st["containerStatuses"][0]["state"]["terminated"]["reason"] == "Preempted";
        if let Some(m) = p["metadata"]["annotations"][format!("{PREFIX}/preempted")].as_str().filter(|_| !ended_preempted) {
            out.push(event(p, "Preempted", "Warning", m, None));
        }
        for cs in st["containerStatuses"].as_array().into_iter().flatten() {
            if cs["state"]["waiting"]["reason"] == "CrashLoopBackOff" {
                let why = cs["state"]["waiting"]["message"].as_str().unwrap_or("the replica keeps exiting");
                out.push(event(p, "BackOff", "Warning", &format!("Back-off restarting failed container: {why}"), None));
            }
            let t = &cs["state"]["terminated"];
            if let Some(reason) = t["reason"].as_str().filter(|r| *r != "Completed") {
                let msg = t["message"].as_str().map_or_else(|| format!("ended {reason}, exit code {}", t["exitCode"]), str::to_string);
                let kind = if reason == "Cancelled" { "Normal" } else { "Warning" };
                out.push(event(p, reason, kind, &msg, Some(&t["finishedAt"])));
            }
        }
    }
    for n in nodes {
        let ready = n["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Ready");
        if let Some(c) = ready.filter(|c| c["status"] != "True") {
            out.push(event(n, "NodeNotReady", "Warning", c["message"].as_str().unwrap_or("not ready"), None));
        }
    }
    out
}

// ---- Stored kinds: Services, ConfigMaps, Secrets ----

/// An object written through the Kubernetes API and stored as written (`control::kube`).
#[derive(Debug, Clone)]
pub struct StoredView<'a> {
    /// Kind.
    pub kind: &'a str,
    /// Namespace.
    pub namespace: &'a str,
    /// Its owner's uid.
    pub uid: u32,
    /// Created, Unix seconds.
    pub created: i64,
    /// As written: `metadata` (name, namespace, labels, annotations) and its body.
    pub data: &'a serde_json::Value,
}

/// Whether `selector` (a Service's) selects a Pod with `labels`.
pub fn selects(selector: &serde_json::Value, labels: &BTreeMap<String, String>) -> bool {
    let Some(sel) = selector.as_object().filter(|m| !m.is_empty()) else { return false };
    sel.iter().all(|(k, v)| v.as_str().is_some_and(|v| labels.get(k).is_some_and(|l| l == v)))
}

/// A stored object as read: the written metadata and body, with what the server adds (uid,
/// creation time, the owner annotation; for a Service its defaults and, as annotations, the
/// Tandem services it selects, `routes`, with their proxy paths).
pub fn stored_object(o: &StoredView<'_>, routes: &[String]) -> serde_json::Value {
    let d = o.data;
    let name = d["metadata"]["name"].as_str().unwrap_or("");
    let mut obj = serde_json::json!({
        "apiVersion": "v1",
        "kind": o.kind,
        "metadata": {"name": name, "namespace": o.namespace, "uid": uid(o.kind, &scoped(o.namespace, name), o.created),
            "creationTimestamp": time(o.created)},
    });
    if !d["metadata"]["labels"].is_null() {
        obj["metadata"]["labels"] = d["metadata"]["labels"].clone();
    }
    let mut annotations = d["metadata"]["annotations"].as_object().cloned().unwrap_or_default();
    annotations.insert(UID_ANNOTATION.into(), o.uid.to_string().into());
    if o.kind == "Service" {
        annotations.insert(format!("{PREFIX}/routes-to"), routes.join(",").into());
        let paths: Vec<String> = routes.iter().map(|r| format!("/s/{r}/")).collect();
        annotations.insert(format!("{PREFIX}/proxy-paths"), paths.join(",").into());
    }
    obj["metadata"]["annotations"] = serde_json::Value::Object(annotations);
    for (k, v) in d.as_object().into_iter().flatten().filter(|(k, _)| *k != "metadata") {
        obj[k] = v.clone();
    }
    if o.kind == "Service" {
        let spec = &mut obj["spec"];
        if spec["type"].is_null() {
            spec["type"] = "ClusterIP".into();
        }
        spec["clusterIP"] = "None".into();
        spec["clusterIPs"] = serde_json::json!(["None"]);
        if spec["sessionAffinity"].is_null() {
            spec["sessionAffinity"] = "None".into();
        }
        for p in spec["ports"].as_array_mut().into_iter().flatten() {
            if p["protocol"].is_null() {
                p["protocol"] = "TCP".into();
            }
            if p["targetPort"].is_null() {
                p["targetPort"] = p["port"].clone();
            }
        }
        obj["status"] = serde_json::json!({"loadBalancer": {}});
    }
    obj
}
