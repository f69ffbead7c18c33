//! The server-side `Table` (`meta.k8s.io/v1`) that `kubectl get` asks for: the columns the
//! Kubernetes API server prints for each kind (those of priority 1 only with `-o wide`), each
//! row with its object's metadata (kubectl adds `NAMESPACE` for `-A` and `LABELS` for
//! `--show-labels` from it) or the whole object (`includeObject=Object`, for `--sort-by`).

use serde_json::{Value, json};

/// What each row carries besides its cells (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Include {
    /// Nothing.
    None,
    /// The object's metadata (`PartialObjectMetadata`, the default).
    Metadata,
    /// The whole object.
    Object,
}

impl Include {
    /// `includeObject`'s value (absent: `Metadata`).
    pub fn parse(v: Option<&str>) -> Result<Include, crate::Failure> {
        match v {
            None | Some("") | Some("Metadata") => Ok(Include::Metadata),
            Some("None") => Ok(Include::None),
            Some("Object") => Ok(Include::Object),
            Some(other) => Err(crate::Failure::bad_request(format!("includeObject: {other:?} is not None, Metadata or Object"))),
        }
    }
}

/// Whether an `Accept` header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept.split(',').any(|m| {
        let params: Vec<&str> = m.split(';').map(str::trim).collect();
        params.contains(&"as=Table") && params.contains(&"g=meta.k8s.io")
    })
}

/// Kubernetes' short form of a duration (`HumanDuration`: `45s`, `5m3s`, `2h`, `3d4h`, `400d`).
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let s = secs.max(0);
    let (m, h) = (s / 60, s / 3600);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s % 60 == 0 { format!("{m}m") } else { format!("{m}m{}s", s % 60) }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 { format!("{h}h") } else { format!("{h}h{}m", m % 60) }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        if h % 24 == 0 { format!("{}d", h / 24) } else { format!("{}d{}h", h / 24, h % 24) }
    } else if h < 24 * 365 * 2 {
        format!("{}d", h / 24)
    } else if h < 24 * 365 * 8 {
        let (y, d) = (h / 24 / 365, (h / 24) % 365);
        if d == 0 { format!("{y}y") } else { format!("{y}y{d}d") }
    } else {
        format!("{}y", h / 24 / 365)
    }
}

fn seconds(v: &Value) -> Option<i64> {
    v.as_str()?.parse::<k8s_openapi::jiff::Timestamp>().ok().map(|t| t.as_second())
}

fn age(obj: &Value, now: i64) -> String {
    seconds(&obj["metadata"]["creationTimestamp"]).map_or_else(|| "<unknown>".into(), |t| human_duration(now - t))
}

fn col(name: &str, ty: &str, priority: i32, description: &str) -> Value {
    json!({"name": name, "type": ty, "format": if name == "Name" { "name" } else { "" }, "description": description, "priority": priority})
}

/// The columns of a kind.
pub fn columns(kind: &str) -> Vec<Value> {
    let name = col("Name", "string", 0, "Name must be unique within a namespace.");
    let age = col("Age", "string", 0, "CreationTimestamp is a timestamp representing the server time when this object was created.");
    let wide_workload = [
        col("Containers", "string", 1, "Names of each container in the template."),
        col("Images", "string", 1, "Images referenced by each container in the template."),
        col("Selector", "string", 1, "Label selector for pods."),
    ];
    let mut c = match kind {
        "Pod" => vec![
            name,
            col("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
            col("Status", "string", 0, "The aggregate status of the containers in this pod."),
            col("Restarts", "string", 0, "The number of times the containers in this pod have been restarted."),
            age,
            col("IP", "string", 1, "IP address allocated to the pod."),
            col("Node", "string", 1, "Name of the node this pod is assigned to."),
            col("Nominated Node", "string", 1, "Name of the node this pod may run on once preemption ends."),
            col("Readiness Gates", "string", 1, "Pod readiness gates."),
        ],
        "Node" => vec![
            name,
            col("Status", "string", 0, "The status of the node"),
            col("Roles", "string", 0, "The roles of the node"),
            age,
            col("Version", "string", 0, "The agent's version"),
            col("Internal-IP", "string", 1, "List of internal IPs."),
            col("External-IP", "string", 1, "List of external IPs."),
            col("CPU", "string", 1, "CPUs: allocated/total (sinfo's CPUS(A/T))."),
            col("GPU", "string", 1, "GPUs: allocated/total."),
            col("Partitions", "string", 1, "The partitions the node belongs to."),
        ],
        "Namespace" => vec![name, col("Status", "string", 0, "The status of the namespace"), age],
        "Service" => vec![
            name,
            col("Type", "string", 0, "The type of the service."),
            col("Cluster-IP", "string", 0, "The cluster IP (none: reached through Tandem's proxy)."),
            col("External-IP", "string", 0, "External IPs."),
            col("Port(s)", "string", 0, "The ports exposed."),
            age,
            col("Selector", "string", 1, "The pods it selects."),
        ],
        "ConfigMap" => vec![name, col("Data", "integer", 0, "Number of keys."), age],
        "Secret" => vec![name, col("Type", "string", 0, "The type of the secret."), col("Data", "integer", 0, "Number of keys."), age],
        "Event" => vec![
            col("Last Seen", "string", 0, "Time since the most recent occurrence"),
            col("Type", "string", 0, "Normal or Warning"),
            col("Reason", "string", 0, "Why the event happened"),
            col("Object", "string", 0, "The object it is about"),
            col("Message", "string", 0, "A description of the status of this operation."),
        ],
        "Deployment" => {
            let mut v = vec![
                name,
                col("Ready", "string", 0, "Number of the pod with ready state"),
                col(
                    "Up-to-date",
                    "integer",
                    0,
                    "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
                ),
                col(
                    "Available",
                    "integer",
                    0,
                    "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
                ),
                age,
            ];
            v.extend(wide_workload);
            v
        }
        "ReplicaSet" => {
            let mut v = vec![
                name,
                col("Desired", "integer", 0, "Replicas is the number of desired replicas."),
                col("Current", "integer", 0, "Replicas is the most recently observed number of replicas."),
                col("Ready", "integer", 0, "The number of ready replicas for this replica set."),
                age,
            ];
            v.extend(wide_workload);
            v
        }
        "Job" => {
            let mut v = vec![
                name,
                col("Status", "string", 0, "Status of the job."),
                col("Completions", "string", 0, "The completion status of the job"),
                col("Duration", "string", 0, "Time required to complete the job."),
                age,
            ];
            v.extend(wide_workload);
            v
        }
        _ => vec![name, age],
    };
    c.shrink_to_fit();
    c
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

fn i(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

fn none_if_empty(v: String) -> String {
    if v.is_empty() { "<none>".into() } else { v }
}

fn workload_wide(obj: &Value, template: &Value) -> [Value; 3] {
    let cs = template["spec"]["containers"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = cs.iter().map(|c| s(&c["name"])).collect();
    let images: Vec<&str> = cs.iter().map(|c| s(&c["image"])).collect();
    let sel = obj["spec"]["selector"]["matchLabels"].as_object().map(|m| {
        let mut v: Vec<String> = m.iter().map(|(k, v)| format!("{k}={}", s(v))).collect();
        v.sort();
        v.join(",")
    });
    [json!(names.join(",")), json!(none_if_empty(images.join(","))), json!(none_if_empty(sel.unwrap_or_default()))]
}

/// A Pod's `STATUS` as kubectl prints it: the phase, or what its container waits for or ended
/// with, or `Terminating`.
pub fn pod_status(pod: &Value) -> String {
    let st = &pod["status"];
    let mut reason = st["reason"].as_str().or(st["phase"].as_str()).unwrap_or("Unknown").to_string();
    for c in st["containerStatuses"].as_array().into_iter().flatten() {
        let state = &c["state"];
        if let Some(r) = state["waiting"]["reason"].as_str().filter(|r| !r.is_empty()) {
            reason = r.into();
        } else if let Some(t) = state["terminated"].as_object() {
            reason = match t.get("reason").and_then(Value::as_str) {
                Some(r) if !r.is_empty() => r.into(),
                _ => match t.get("signal").and_then(Value::as_i64) {
                    Some(sig) if sig != 0 => format!("Signal:{sig}"),
                    _ => format!("ExitCode:{}", t.get("exitCode").and_then(Value::as_i64).unwrap_or(0)),
                },
            };
        }
    }
    if !pod["metadata"]["deletionTimestamp"].is_null() && reason != "Succeeded" && reason != "Completed" {
        reason = "Terminating".into();
    }
    reason
}

/// One row's cells.
pub fn cells(kind: &str, obj: &Value, now: i64) -> Vec<Value> {
    let name = json!(s(&obj["metadata"]["name"]));
    match kind {
        "Pod" => {
            let cs = obj["status"]["containerStatuses"].as_array().cloned().unwrap_or_default();
            let total = obj["spec"]["containers"].as_array().map_or(0, Vec::len);
            let ready = cs.iter().filter(|c| c["ready"].as_bool() == Some(true)).count();
            let restarts: i64 = cs.iter().map(|c| i(&c["restartCount"])).sum();
            vec![
                name,
                json!(format!("{ready}/{total}")),
                json!(pod_status(obj)),
                json!(restarts.to_string()),
                json!(age(obj, now)),
                json!(none_if_empty(s(&obj["status"]["podIP"]).into())),
                json!(none_if_empty(s(&obj["spec"]["nodeName"]).into())),
                json!("<none>"),
                json!("<none>"),
            ]
        }
        "Node" => {
            let ready = obj["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Ready");
            let mut status = match ready.map(|c| s(&c["status"])) {
                Some("True") => "Ready".to_string(),
                Some("False") => "NotReady".into(),
                _ => "Unknown".into(),
            };
            if obj["spec"]["unschedulable"].as_bool() == Some(true) {
                status.push_str(",SchedulingDisabled");
            }
            let addr = |ty: &str| {
                obj["status"]["addresses"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|a| a["type"] == ty)
                    .map_or_else(|| "<none>".to_string(), |a| s(&a["address"]).to_string())
            };
            let ann = &obj["metadata"]["annotations"];
            let parts: Vec<String> = obj["metadata"]["labels"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(k, _)| k.strip_prefix(&format!("{}/partition-", crate::PREFIX)).map(str::to_string))
                .collect();
            vec![
                name,
                json!(status),
                json!("<none>"),
                json!(age(obj, now)),
                json!(s(&ann[format!("{}/version", crate::PREFIX)]).to_string()),
                json!(addr("InternalIP")),
                json!(addr("ExternalIP")),
                json!(none_if_empty(s(&ann[format!("{}/cpus", crate::PREFIX)]).into())),
                json!(none_if_empty(s(&ann[format!("{}/gpus", crate::PREFIX)]).into())),
                json!(none_if_empty(parts.join(","))),
            ]
        }
        "Namespace" => vec![name, json!(s(&obj["status"]["phase"])), json!(age(obj, now))],
        "Service" => {
            let ports: Vec<String> = obj["spec"]["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| format!("{}/{}", p["port"], p["protocol"].as_str().unwrap_or("TCP")))
                .collect();
            let sel = obj["spec"]["selector"].as_object().map(|m| {
                let mut v: Vec<String> = m.iter().map(|(k, v)| format!("{k}={}", s(v))).collect();
                v.sort();
                v.join(",")
            });
            vec![
                name,
                json!(s(&obj["spec"]["type"])),
                json!(s(&obj["spec"]["clusterIP"])),
                json!("<none>"),
                json!(none_if_empty(ports.join(","))),
                json!(age(obj, now)),
                json!(none_if_empty(sel.unwrap_or_default())),
            ]
        }
        "ConfigMap" => {
            let n = obj["data"].as_object().map_or(0, |m| m.len()) + obj["binaryData"].as_object().map_or(0, |m| m.len());
            vec![name, json!(n), json!(age(obj, now))]
        }
        "Secret" => {
            let n = obj["data"].as_object().map_or(0, |m| m.len());
            vec![name, json!(s(&obj["type"])), json!(n), json!(age(obj, now))]
        }
        "Event" => {
            let last = seconds(&obj["lastTimestamp"]).map_or_else(|| "<unknown>".into(), |t| human_duration(now - t));
            let what = format!("{}/{}", s(&obj["involvedObject"]["kind"]).to_ascii_lowercase(), s(&obj["involvedObject"]["name"]));
            vec![json!(last), json!(s(&obj["type"])), json!(s(&obj["reason"])), json!(what), json!(s(&obj["message"]))]
        }
        "Deployment" => {
            let st = &obj["status"];
            let mut v = vec![
                name,
                json!(format!("{}/{}", i(&st["readyReplicas"]), i(&obj["spec"]["replicas"]))),
                json!(i(&st["updatedReplicas"])),
                json!(i(&st["availableReplicas"])),
                json!(age(obj, now)),
            ];
            v.extend(workload_wide(obj, &obj["spec"]["template"]));
            v
        }
        "ReplicaSet" => {
            let st = &obj["status"];
            let mut v = vec![
                name,
                json!(i(&obj["spec"]["replicas"])),
                json!(i(&st["replicas"])),
                json!(i(&st["readyReplicas"])),
                json!(age(obj, now)),
            ];
            v.extend(workload_wide(obj, &obj["spec"]["template"]));
            v
        }
        "Job" => {
            let st = &obj["status"];
            let conds: Vec<&str> =
                st["conditions"].as_array().into_iter().flatten().filter(|c| c["status"] == "True").map(|c| s(&c["type"])).collect();
            let status = ["Failed", "Complete", "Suspended", "FailureTarget", "SuccessCriteriaMet"]
                .into_iter()
                .find(|c| conds.contains(c))
                .unwrap_or("Running");
            let completions = format!("{}/{}", i(&st["succeeded"]), i(&obj["spec"]["completions"]));
            let duration = match seconds(&st["startTime"]) {
                Some(t0) => human_duration(seconds(&st["completionTime"]).unwrap_or(now) - t0),
                None => String::new(),
            };
            let mut v = vec![name, json!(status), json!(completions), json!(duration), json!(age(obj, now))];
            v.extend(workload_wide(obj, &obj["spec"]["template"]));
            v
        }
        _ => vec![name, json!(age(obj, now))],
    }
}

/// The Table of `objects` (each of `kind`), at list resource version `rv`.
pub fn table(kind: &str, objects: &[Value], rv: &str, include: Include, now: i64) -> Value {
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let object = match include {
                Include::None => Value::Null,
                Include::Metadata => json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}),
                Include::Object => o.clone(),
            };
            let mut row = json!({"cells": cells(kind, o, now)});
            if !object.is_null() {
                row["object"] = object;
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv},
        "columnDefinitions": columns(kind),
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_kubectl_prints_them() {
        for (s, want) in [
            (0, "0s"),
            (-1, "0s"),
            (-5, "<invalid>"),
            (59, "59s"),
            (119, "119s"),
            (120, "2m"),
            (303, "5m3s"),
            (600, "10m"),
            (179 * 60, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 600, "3h10m"),
            (30 * 3600, "30h"),
            (3 * 86400 + 4 * 3600, "3d4h"),
            (9 * 86400, "9d"),
            (400 * 86400, "400d"),
            (3 * 365 * 86400, "3y"),
            (10 * 365 * 86400, "10y"),
        ] {
            assert_eq!(human_duration(s), want, "{s}");
        }
    }

    #[test]
    fn the_table_accept_header_is_recognised() {
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
        assert!(!wants_table("application/vnd.kubernetes.protobuf,application/json"));
    }

    #[test]
    fn every_row_has_a_cell_per_column() {
        let pod = json!({"metadata": {"name": "p", "creationTimestamp": "2026-12-06T00:00:00Z", "deletionTimestamp": "2026-12-06T00:01:00Z"},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 2, "state": {"running": {}}}]}});
        for kind in ["Pod", "Node", "Namespace", "Deployment", "ReplicaSet", "Job", "Event", "Service", "ConfigMap", "Secret", "Other"] {
            assert_eq!(cells(kind, &pod, 0).len(), columns(kind).len(), "{kind}");
        }
        let c = cells("Pod", &pod, k8s_openapi::jiff::Timestamp::from_second(1_796_515_200 + 45).unwrap().as_second());
        assert_eq!(c[1], "1/1");
        assert_eq!(c[2], "Terminating");
        assert_eq!(c[3], "2");
        assert_eq!(c[4], "45s");
        let t = table("Pod", &[pod], "7", Include::Metadata, 0);
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn a_pod_status_is_what_its_container_says() {
        let p = |st: Value| json!({"status": st, "metadata": {}});
        assert_eq!(pod_status(&p(json!({"phase": "Pending"}))), "Pending");
        assert_eq!(
            pod_status(&p(json!({"phase": "Running", "containerStatuses": [{"state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}))),
            "CrashLoopBackOff"
        );
        assert_eq!(
            pod_status(&p(json!({"phase": "Succeeded", "containerStatuses": [{"state": {"terminated": {"reason": "Completed"}}}]}))),
            "Completed"
        );
        assert_eq!(
            pod_status(&p(json!({"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"exitCode": 3}}}]}))),
            "ExitCode:3"
        );
        assert_eq!(pod_status(&p(json!({"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"signal": 9}}}]}))), "Signal:9");
    }
}
