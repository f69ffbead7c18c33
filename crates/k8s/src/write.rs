//! Writes: a Deployment as a client submits it, checked the way the API server checks it
//! (`fieldValidation`: an unknown field is refused under `Strict`, kubectl's default, and
//! warned about under `Warn`), refused with a 422 naming any field Tandem does not implement
//! (never silently dropped), and turned into Tandem's own service spec. What is stored of it
//! ([`Written::stored`]): its metadata's labels and annotations (kubectl's last-applied
//! configuration among them) and its spec, as submitted; everything else is derived.

use crate::status::Failure;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// The template annotation `kubectl rollout restart` sets: a new revision, nothing else changed.
pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

/// `fieldValidation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validation {
    /// Refuse unknown and duplicate fields (kubectl's default).
    Strict,
    /// Accept them with a warning (the server's default).
    Warn,
    /// Accept them.
    Ignore,
}

impl Validation {
    /// `fieldValidation`'s value (absent: `Warn`).
    pub fn parse(v: Option<&str>) -> Result<Validation, Failure> {
        match v {
            None | Some("") | Some("Warn") => Ok(Validation::Warn),
            Some("Strict") => Ok(Validation::Strict),
            Some("Ignore") => Ok(Validation::Ignore),
            Some(other) => Err(Failure::bad_request(format!("fieldValidation: {other:?} is not Strict, Warn or Ignore"))),
        }
    }
}

/// A Deployment accepted for writing.
#[derive(Debug, Clone)]
pub struct Written {
    /// Its name: the service's.
    pub name: String,
    /// The service spec it is.
    pub spec: wire::ServiceSpec,
    /// What is kept of it: `metadata` (name, namespace, labels, annotations) and `spec`.
    pub stored: Value,
    /// Warnings for the client (`Warning` headers): unknown fields under `Warn`.
    pub warnings: Vec<String>,
}

/// The paths every written object with a Pod template may carry (a Deployment, a Job): its
/// metadata, its template's and its one container's fields Tandem implements.
pub(crate) const TEMPLATE: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata.name",
    "metadata.namespace",
    "metadata.labels.*",
    "metadata.annotations.*",
    "metadata.uid",
    "metadata.resourceVersion",
    "metadata.generation",
    "metadata.creationTimestamp",
    "metadata.managedFields.*",
    "status.*",
    "spec.template.metadata.labels.*",
    "spec.template.metadata.annotations.*",
    "spec.template.metadata.name",
    "spec.template.metadata.creationTimestamp",
    "spec.template.spec.containers[].name",
    "spec.template.spec.containers[].image",
    "spec.template.spec.containers[].imagePullPolicy",
    "spec.template.spec.containers[].command[]",
    "spec.template.spec.containers[].args[]",
    "spec.template.spec.containers[].workingDir",
    "spec.template.spec.containers[].env[].name",
    "spec.template.spec.containers[].env[].value",
    "spec.template.spec.containers[].env[].valueFrom.configMapKeyRef.name",
    "spec.template.spec.containers[].env[].valueFrom.configMapKeyRef.key",
    "spec.template.spec.containers[].env[].valueFrom.configMapKeyRef.optional",
    "spec.template.spec.containers[].env[].valueFrom.secretKeyRef.name",
    "spec.template.spec.containers[].env[].valueFrom.secretKeyRef.key",
    "spec.template.spec.containers[].env[].valueFrom.secretKeyRef.optional",
    "spec.template.spec.containers[].envFrom[].configMapRef.name",
    "spec.template.spec.containers[].envFrom[].configMapRef.optional",
    "spec.template.spec.containers[].envFrom[].secretRef.name",
    "spec.template.spec.containers[].envFrom[].secretRef.optional",
    "spec.template.spec.containers[].envFrom[].prefix",
    "spec.template.spec.containers[].ports[].containerPort",
    "spec.template.spec.containers[].ports[].name",
    "spec.template.spec.containers[].ports[].protocol",
    "spec.template.spec.containers[].resources.limits.*",
    "spec.template.spec.containers[].resources.requests.*",
    "spec.template.spec.containers[].terminationMessagePath",
    "spec.template.spec.containers[].volumeMounts[].name",
    "spec.template.spec.containers[].volumeMounts[].mountPath",
    "spec.template.spec.containers[].volumeMounts[].readOnly",
    "spec.template.spec.containers[].volumeMounts[].subPath",
    "spec.template.spec.volumes[].name",
    "spec.template.spec.volumes[].configMap.name",
    "spec.template.spec.volumes[].configMap.items[].key",
    "spec.template.spec.volumes[].configMap.items[].path",
    "spec.template.spec.volumes[].configMap.items[].mode",
    "spec.template.spec.volumes[].configMap.defaultMode",
    "spec.template.spec.volumes[].configMap.optional",
    "spec.template.spec.volumes[].secret.secretName",
    "spec.template.spec.volumes[].secret.items[].key",
    "spec.template.spec.volumes[].secret.items[].path",
    "spec.template.spec.volumes[].secret.items[].mode",
    "spec.template.spec.volumes[].secret.defaultMode",
    "spec.template.spec.volumes[].secret.optional",
    "spec.template.spec.containers[].terminationMessagePolicy",
    "spec.template.spec.nodeSelector.*",
    "spec.template.spec.priorityClassName",
    "spec.template.spec.restartPolicy",
    "spec.template.spec.schedulerName",
    "spec.template.spec.dnsPolicy",
    "spec.template.spec.securityContext",
];

/// The paths (`a.b[].c`) a Deployment may carry; `*` ends a path under which anything goes.
/// Every other field present is refused with a 422 that names it.
const SUPPORTED: &[&str] = &[
    "spec.replicas",
    "spec.selector.matchLabels.*",
    "spec.strategy.type",
    "spec.strategy.rollingUpdate.maxSurge",
    "spec.strategy.rollingUpdate.maxUnavailable",
    "spec.revisionHistoryLimit",
    "spec.progressDeadlineSeconds",
    "spec.minReadySeconds",
    "spec.paused",
    "spec.template.spec.containers[].readinessProbe.*",
    "spec.template.spec.containers[].livenessProbe.*",
    "spec.template.spec.containers[].startupProbe.*",
    "spec.template.spec.terminationGracePeriodSeconds",
];

/// Every leaf path of `v` (objects' keys joined with `.`, list items as `[]`), with the path
/// as written (indices kept) for messages. An empty object or list sets nothing, as a null
/// does (`kubectl create ... --dry-run=client -o yaml` writes `resources: {}`, `strategy: {}`).
pub(crate) fn leaves(v: &Value, pattern: String, shown: String, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) if m.is_empty() => {}
        Value::Array(a) if a.is_empty() => {}
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                let dot = if pattern.is_empty() { "" } else { "." };
                leaves(x, format!("{pattern}{dot}{k}"), format!("{shown}{dot}{k}"), out);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for (i, x) in a.iter().enumerate() {
                leaves(x, format!("{pattern}[]"), format!("{shown}[{i}]"), out);
            }
        }
        Value::Null => {}
        _ => out.push((pattern, shown)),
    }
}

fn supported(pattern: &str) -> bool {
    supported_in(TEMPLATE, pattern) || supported_in(SUPPORTED, pattern)
}

/// Whether `pattern` is one of `list`'s paths (or under one ending in `.*`).
pub(crate) fn supported_in(list: &[&str], pattern: &str) -> bool {
    list.iter().any(|s| match s.strip_suffix(".*") {
        Some(prefix) => pattern == prefix || pattern.starts_with(&format!("{prefix}.")),
        None => pattern == *s,
    })
}

/// The fields of `input` that a typed round trip (`typed`) lost: fields Kubernetes does not
/// know, as `a.b[0].c`.
pub fn unknown_fields(input: &Value, typed: &Value) -> Vec<String> {
    fn walk(i: &Value, t: &Value, at: &str, out: &mut Vec<String>) {
        match (i, t) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, x) in a {
                    let path = if at.is_empty() { k.clone() } else { format!("{at}.{k}") };
                    match b.get(k) {
                        Some(y) => walk(x, y, &path, out),
                        None if x.is_null() => {}
                        None => out.push(path),
                    }
                }
            }
            (Value::Array(a), Value::Array(b)) => {
                for (n, (x, y)) in a.iter().zip(b).enumerate() {
                    walk(x, y, &format!("{at}[{n}]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(input, typed, "", &mut out);
    out
}

fn invalid(name: &str, field: &str, why: &str) -> Failure {
    let mut f = Failure::from_code(422, format!("Deployment.apps \"{name}\" is invalid: {field}: {why}"));
    f.details = Some(("Deployment".into(), name.into()));
    let reason = match why.split(':').next().unwrap_or("") {
        "Required value" => "FieldValueRequired",
        "Unsupported value" => "FieldValueNotSupported",
        "Forbidden" => "FieldValueForbidden",
        "Not found" => "FieldValueNotFound",
        _ => "FieldValueInvalid",
    };
    f.causes = vec![(reason.into(), why.into(), field.into())];
    f
}

/// What `fieldValidation` makes of unknown fields: a 400 under `Strict`, warnings under `Warn`.
pub(crate) fn check_unknown(unknown: &[String], validation: Validation) -> Result<Vec<String>, Failure> {
    let said: Vec<String> = unknown.iter().map(|f| format!("unknown field \"{f}\"")).collect();
    match validation {
        Validation::Strict if !said.is_empty() => Err(Failure::bad_request(format!("strict decoding error: {}", said.join(", ")))),
        Validation::Warn => Ok(said),
        _ => Ok(Vec::new()),
    }
}

/// Whether `name` is a DNS label (what a Tandem service's name is).
pub(crate) fn dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// CPUs from a Kubernetes quantity: millicores round up to whole CPUs.
fn cpus(q: &str) -> Option<f64> {
    match q.strip_suffix('m') {
        Some(m) => m.parse::<f64>().ok().map(|m| (m / 1000.0).ceil().max(1.0)),
        None => q.parse::<f64>().ok().map(|c| c.ceil().max(1.0)),
    }
}

/// A probe, as a service spec writes it.
fn probe(name: &str, field: &str, p: &Value, container_ports: &[i64]) -> Result<Value, Failure> {
    let mut out = Map::new();
    let port = |h: &Value| -> Result<Option<i64>, Failure> {
        match &h["port"] {
            Value::Number(n) => {
                let n = n.as_i64().unwrap_or(0);
                // The container's own port is the replica's `$PORT`.
                Ok(if container_ports.contains(&n) { None } else { Some(n) })
            }
            Value::String(_) => Ok(None),
            Value::Null => Ok(None),
            _ => Err(invalid(name, &format!("{field}.port"), "Invalid value: a number or a port's name")),
        }
    };
    if let Some(h) = p.get("httpGet") {
        for k in h.as_object().into_iter().flatten().map(|(k, _)| k) {
            if !["path", "port", "scheme"].contains(&k.as_str()) || (k == "scheme" && h[k] != "HTTP") {
                return Err(invalid(name, &format!("{field}.httpGet.{k}"), "Forbidden: not supported by Tandem (path and port are)"));
            }
        }
        out.insert("http".into(), json!(h["path"].as_str().unwrap_or("/")));
        if let Some(n) = port(h)? {
            out.insert("port".into(), json!(n));
        }
    } else if let Some(t) = p.get("tcpSocket") {
        out.insert("tcp".into(), json!(true));
        if let Some(n) = port(t)? {
            out.insert("port".into(), json!(n));
        }
    } else {
        let which = ["exec", "grpc"].into_iter().find(|k| p.get(*k).is_some()).unwrap_or("handler");
        return Err(invalid(name, &format!("{field}.{which}"), "Forbidden: Tandem probes with httpGet or tcpSocket"));
    }
    for (k, to) in [
        ("periodSeconds", "period"),
        ("timeoutSeconds", "timeout"),
        ("failureThreshold", "failure_threshold"),
        ("successThreshold", "success_threshold"),
        ("initialDelaySeconds", "initial_delay"),
    ] {
        if let Some(v) = p.get(k).and_then(Value::as_i64) {
            out.insert(to.into(), json!(v));
        }
    }
    if let Some(k) = ["terminationGracePeriodSeconds"].into_iter().find(|k| p.get(*k).is_some()) {
        return Err(invalid(name, &format!("{field}.{k}"), "Forbidden: not supported by Tandem"));
    }
    Ok(Value::Object(out))
}

/// The ConfigMaps and Secrets a Deployment's or Job's environment and volumes may name, for its
/// writer: (kind, name) to the object as stored (its `data`, `binaryData`; read with
/// [`env_data`] and [`file_data`]); `None` where there is none the writer may use.
pub type EnvSources<'a> = &'a dyn Fn(&str, &str) -> Option<Value>;

/// A stored ConfigMap's or Secret's entries as files: each key's bytes, base64 (a ConfigMap's
/// `data` and `binaryData`, a Secret's `data` and any `stringData`).
pub fn file_data(kind: &str, obj: &Value) -> BTreeMap<String, String> {
    use base64::Engine;
    let mut out = BTreeMap::new();
    let (text, encoded) = if kind == "Secret" { ("stringData", "data") } else { ("data", "binaryData") };
    for (k, v) in obj[encoded].as_object().into_iter().flatten() {
        if let Some(t) = v.as_str() {
            out.insert(k.clone(), t.to_string());
        }
    }
    for (k, v) in obj[text].as_object().into_iter().flatten() {
        if let Some(t) = v.as_str() {
            out.insert(k.clone(), base64::engine::general_purpose::STANDARD.encode(t));
        }
    }
    out
}

/// A Pod template's ConfigMap and Secret volumes its container mounts, as the files Tandem's
/// agent writes and mounts read-only into the container (`slurmcli::Volume`'s JSON): each
/// `volumeMount` a directory of the source's keys (or `items`' paths) at `mountPath`, or with
/// `subPath` the one file at it; modes `items[].mode`, else `defaultMode`, else 0644. The
/// contents are copied when the object is written, as environment values are. An `emptyDir`
/// is an empty directory the container writes.
fn volumes(tspec: &Value, sources: EnvSources, bad: &dyn Fn(&str, &str) -> Failure) -> Result<Vec<Value>, Failure> {
    let c = &tspec["containers"][0];
    let cf = "spec.template.spec.containers[0]";
    let declared = tspec["volumes"].as_array().cloned().unwrap_or_default();
    for (i, v) in declared.iter().enumerate() {
        let at = format!("spec.template.spec.volumes[{i}]");
        if v["name"].as_str().is_none_or(|n| !dns_label(n)) {
            return Err(bad(&format!("{at}.name"), "Required value: a DNS label"));
        }
        if declared[..i].iter().any(|d| d["name"] == v["name"]) {
            return Err(bad(&format!("{at}.name"), &format!("Duplicate value: {}", v["name"])));
        }
        let kinds = ["configMap", "secret", "emptyDir"];
        let sources_given = kinds.iter().filter(|k| v[**k].is_object()).count();
        if sources_given != 1 {
            let other = v.as_object().and_then(|m| m.keys().find(|k| *k != "name" && !kinds.contains(&k.as_str())).cloned());
            return Err(bad(
                &other.map_or(at.clone(), |k| format!("{at}.{k}")),
                "Unsupported value: Tandem mounts a configMap, secret or emptyDir volume, one of them (docs/kubernetes.md)",
            ));
        }
    }
    let mut out = Vec::new();
    for (j, m) in c["volumeMounts"].as_array().into_iter().flatten().enumerate() {
        let at = format!("{cf}.volumeMounts[{j}]");
        let name = m["name"].as_str().unwrap_or("");
        let Some(v) = declared.iter().find(|v| v["name"] == name) else {
            return Err(bad(&format!("{at}.name"), &format!("Not found: {name:?}: no volume of that name")));
        };
        let dst = m["mountPath"].as_str().unwrap_or("");
        if !dst.starts_with('/')
            || dst.split('/').any(|p| p == "..")
            || dst.contains([',', ':'])
            || dst.bytes().any(|b| b.is_ascii_control())
        {
            return Err(bad(&format!("{at}.mountPath"), &format!("Invalid value: {dst:?}: an absolute path without '..', ',' or ':'")));
        }
        if v["emptyDir"].is_object() {
            // Scratch space: an empty directory the container writes, gone with the task.
            if m["subPath"].as_str().is_some_and(|p| !p.is_empty()) {
                return Err(bad(&format!("{at}.subPath"), "Unsupported value: an emptyDir is mounted whole"));
            }
            out.push(json!({"dst": dst, "files": [], "scratch": true}));
            continue;
        }
        let (kind, field, src) =
            if v["configMap"].is_object() { ("ConfigMap", "configMap", &v["configMap"]) } else { ("Secret", "secret", &v["secret"]) };
        let vi = declared.iter().position(|d| d["name"] == name).unwrap_or(0);
        let vat = format!("spec.template.spec.volumes[{vi}].{field}");
        let rname = if kind == "Secret" { src["secretName"].as_str() } else { src["name"].as_str() }.unwrap_or("");
        let optional = src["optional"].as_bool() == Some(true);
        let mode_of = |x: &Value, at: &str| -> Result<Option<u32>, Failure> {
            match x.as_i64() {
                None if x.is_null() => Ok(None),
                Some(n) if (0..=0o777).contains(&n) => Ok(Some(n as u32)),
                _ => Err(bad(at, "Invalid value: must be a number between 0 and 0777 (octal), both inclusive")),
            }
        };
        let default_mode = mode_of(&src["defaultMode"], &format!("{vat}.defaultMode"))?.unwrap_or(0o644);
        let data = match sources(kind, rname) {
            Some(o) => file_data(kind, &o),
            None if optional => BTreeMap::new(),
            None => {
                let which = if kind == "Secret" { "secretName" } else { "name" };
                return Err(bad(
                    &format!("{vat}.{which}"),
                    &format!("Not found: {kind} {rname:?} (in the object's namespace, that its writer may use)"),
                ));
            }
        };
        let mut files = Vec::new();
        match src["items"].as_array() {
            Some(items) => {
                for (k, it) in items.iter().enumerate() {
                    let key = it["key"].as_str().unwrap_or("");
                    let path = it["path"].as_str().unwrap_or("");
                    if !slurm_file_name_ok(path) {
                        return Err(bad(
                            &format!("{vat}.items[{k}].path"),
                            &format!("Unsupported value: {path:?}: Tandem writes a volume's files in its directory, not in subdirectories"),
                        ));
                    }
                    let mode = mode_of(&it["mode"], &format!("{vat}.items[{k}].mode"))?.unwrap_or(default_mode);
                    match data.get(key) {
                        Some(b) => files.push(json!({"name": path, "base64": b, "mode": mode})),
                        None if optional => {}
                        None => {
                            return Err(bad(&format!("{vat}.items[{k}].key"), &format!("Not found: key {key:?} in {kind} {rname:?}")));
                        }
                    }
                }
            }
            None => {
                for (key, b) in &data {
                    files.push(json!({"name": key, "base64": b, "mode": default_mode}));
                }
            }
        }
        let mut vol = json!({"dst": dst, "files": files});
        if let Some(sub) = m["subPath"].as_str().filter(|p| !p.is_empty()) {
            let one: Vec<Value> = vol["files"].as_array().into_iter().flatten().filter(|f| f["name"] == sub).cloned().collect();
            if one.is_empty() {
                return Err(bad(&format!("{at}.subPath"), &format!("Not found: {sub:?} in volume {name:?}")));
            }
            vol = json!({"dst": dst, "files": one, "file": true});
        }
        out.push(vol);
    }
    Ok(out)
}

/// Whether `p` can name a file of a volume (`slurmcli`'s rule: letters, digits, '.', '_' and
/// '-', not `.` or `..`).
fn slurm_file_name_ok(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 253
        && p != "."
        && p != ".."
        && p.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A stored ConfigMap's or Secret's entries as environment values: a ConfigMap's `data`, and
/// its `binaryData` that is text; a Secret's `data` (base64) that is text, and any
/// `stringData`.
pub fn env_data(kind: &str, obj: &Value) -> BTreeMap<String, String> {
    use base64::Engine;
    let b64 = |v: &Value| {
        v.as_str().and_then(|t| base64::engine::general_purpose::STANDARD.decode(t).ok()).and_then(|b| String::from_utf8(b).ok())
    };
    let mut out = BTreeMap::new();
    let (text, encoded) = if kind == "Secret" { ("stringData", "data") } else { ("data", "binaryData") };
    for (k, v) in obj[encoded].as_object().into_iter().flatten() {
        if let Some(t) = b64(v) {
            out.insert(k.clone(), t);
        }
    }
    for (k, v) in obj[text].as_object().into_iter().flatten() {
        if let Some(t) = v.as_str() {
            out.insert(k.clone(), t.to_string());
        }
    }
    out
}

/// An object's namespace (`given` in its metadata) against the request's: the same, and a
/// namespace's name (whether it exists, and who may write in it, is the controller's to say).
/// `bad` makes the 422 of a field.
pub(crate) fn check_namespace(given: Option<&str>, namespace: &str, bad: &dyn Fn(&str, &str) -> Failure) -> Result<(), Failure> {
    if given.is_some_and(|ns| !ns.is_empty() && ns != namespace) {
        return Err(Failure::bad_request("the namespace of the provided object does not match the namespace sent on the request"));
    }
    if !dns_label(namespace) {
        return Err(bad("metadata.namespace", &format!("Invalid value: {namespace:?}: a namespace's name is a DNS label")));
    }
    Ok(())
}

/// Whether `k` can be an environment variable's name as Kubernetes requires (a C identifier,
/// or with `.` and `-`, not starting with a digit).
fn env_name_ok(k: &str) -> bool {
    !k.is_empty() && !k.starts_with(|c: char| c.is_ascii_digit()) && k.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

/// Checks a Deployment written to `namespace` and turns it into a service spec; the values its
/// environment takes from ConfigMaps and Secrets come from `sources`.
pub fn deployment(obj: &Value, namespace: &str, validation: Validation, sources: EnvSources) -> Result<Written, Failure> {
    if !obj.is_object() {
        return Err(Failure::bad_request("the body is not a JSON object"));
    }
    match (obj["apiVersion"].as_str(), obj["kind"].as_str()) {
        (Some("apps/v1") | None, Some("Deployment") | None) => {}
        (v, k) => {
            return Err(Failure::bad_request(format!(
                "this is the Deployment resource of apps/v1; the body is {} {}",
                v.unwrap_or("(no apiVersion)"),
                k.unwrap_or("(no kind)")
            )));
        }
    }
    let typed: k8s_openapi::api::apps::v1::Deployment =
        serde_json::from_value(obj.clone()).map_err(|e| Failure::bad_request(format!("malformed Deployment: {e}")))?;
    let name = typed.metadata.name.clone().unwrap_or_default();
    let unknown = unknown_fields(obj, &serde_json::to_value(&typed).expect("a Deployment serializes"));
    let warnings = check_unknown(&unknown, validation)?;
    if name.is_empty() {
        return Err(invalid("", "metadata.name", "Required value: name is required"));
    }
    if !dns_label(&name) {
        return Err(invalid(
            &name,
            "metadata.name",
            &format!(
                "Invalid value: {name:?}: a Tandem service's name is a DNS label: 1 to 63 lower-case letters, digits and '-', not starting or ending with '-'"
            ),
        ));
    }
    check_namespace(typed.metadata.namespace.as_deref(), namespace, &|field, why| invalid(&name, field, why))?;
    // Every field present must be one Tandem implements.
    let mut paths = Vec::new();
    leaves(obj, String::new(), String::new(), &mut paths);
    if let Some((_, shown)) = paths.iter().find(|(p, _)| !unknown.iter().any(|u| shown_matches(u, p)) && !supported(p)) {
        return Err(invalid(&name, shown, "Forbidden: not supported by Tandem (docs/kubernetes.md)"));
    }
    let spec = &obj["spec"];
    let tspec = &spec["template"]["spec"];
    if spec["paused"].as_bool() == Some(true) {
        return Err(invalid(&name, "spec.paused", "Forbidden: not supported by Tandem"));
    }
    if spec["minReadySeconds"].as_i64().is_some_and(|s| s != 0) {
        return Err(invalid(&name, "spec.minReadySeconds", "Forbidden: Tandem counts a replica available when it is ready (0)"));
    }
    match spec["strategy"]["type"].as_str() {
        None | Some("RollingUpdate") => {}
        Some(other) => {
            return Err(invalid(
                &name,
                "spec.strategy.type",
                &format!("Unsupported value: {other:?}: Tandem rolls updates (RollingUpdate)"),
            ));
        }
    }
    if tspec["restartPolicy"].as_str().is_some_and(|p| p != "Always") {
        return Err(invalid(&name, "spec.template.spec.restartPolicy", "Unsupported value: a Deployment's pods restart Always"));
    }
    if tspec["securityContext"].as_object().is_some_and(|m| !m.is_empty()) {
        return Err(invalid(&name, "spec.template.spec.securityContext", "Forbidden: replicas run as the user who wrote them"));
    }
    // The selector must select the template (as the API server requires).
    let labels = spec["template"]["metadata"]["labels"].as_object().cloned().unwrap_or_default();
    let selector = spec["selector"]["matchLabels"].as_object().cloned().unwrap_or_default();
    if selector.is_empty() {
        return Err(invalid(&name, "spec.selector", "Required value"));
    }
    if selector.iter().any(|(k, v)| labels.get(k) != Some(v)) {
        return Err(invalid(&name, "spec.template.metadata.labels", "Invalid value: `selector` does not match template `labels`"));
    }
    let mut out = template_container(tspec, sources, &|field, why| invalid(&name, field, why))?;
    // `web` of namespace `team-a` is the service `web.team-a`.
    out.insert("name".into(), json!(wire::service_name(namespace, &name)));
    let mut out = Value::Object(out);
    let c = &tspec["containers"][0];
    let cf = "spec.template.spec.containers[0]";
    let ports: Vec<i64> = c["ports"].as_array().into_iter().flatten().filter_map(|p| p["containerPort"].as_i64()).collect();
    out["replicas"] = json!(spec["replicas"].as_i64().unwrap_or(1));
    for (k, to) in [("readinessProbe", "readiness"), ("livenessProbe", "liveness"), ("startupProbe", "startup")] {
        if let Some(p) = c.get(k).filter(|p| !p.is_null()) {
            out[to] = probe(&name, &format!("{cf}.{k}"), p, &ports)?;
        }
    }
    let ru = &spec["strategy"]["rollingUpdate"];
    let mut rolling = Map::new();
    for (k, to) in [("maxSurge", "max_surge"), ("maxUnavailable", "max_unavailable")] {
        if !ru[k].is_null() {
            rolling.insert(to.into(), ru[k].clone());
        }
    }
    out["rolling_update"] = Value::Object(rolling);
    if let Some(g) = tspec["terminationGracePeriodSeconds"].as_i64() {
        out["termination_grace"] = json!(g);
    }
    if let Some(t) = spec["template"]["metadata"]["annotations"][RESTARTED_AT].as_str() {
        out["restarted_at"] = json!(t);
    }
    let spec: wire::ServiceSpec = serde_json::from_value(out).map_err(|e| invalid(&name, "spec", &format!("Invalid value: {e}")))?;
    let stored = json!({
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": obj["metadata"]["labels"],
            "annotations": obj["metadata"]["annotations"],
        },
        "spec": obj["spec"],
    });
    Ok(Written { name, spec, stored, warnings })
}

/// The one container of a Pod template's spec (`tspec`), as a service spec's fields write it:
/// `command`, `args`, `env` (from ConfigMaps and Secrets through `sources`), `resources`,
/// `image`, `workdir`, `qos` (`priorityClassName`) and `partition` (`nodeSelector`). `bad` makes
/// the 422 of a field (`spec.template...`) and why.
pub(crate) fn template_container(
    tspec: &Value,
    sources: EnvSources,
    bad: &dyn Fn(&str, &str) -> Failure,
) -> Result<Map<String, Value>, Failure> {
    let containers = tspec["containers"].as_array().cloned().unwrap_or_default();
    if containers.len() != 1 {
        return Err(bad(
            "spec.template.spec.containers",
            &format!("Invalid value: {} containers: a Tandem Pod runs one container", containers.len()),
        ));
    }
    let c = &containers[0];
    let cf = "spec.template.spec.containers[0]";
    let mut command: Vec<String> = c["command"].as_array().into_iter().flatten().filter_map(|x| x.as_str().map(str::to_string)).collect();
    let args: Vec<String> = c["args"].as_array().into_iter().flatten().filter_map(|x| x.as_str().map(str::to_string)).collect();
    if command.is_empty() {
        return Err(bad(
            &format!("{cf}.command"),
            "Required value: Tandem runs the command given, not the image's entrypoint (docs/containers.md)",
        ));
    }
    // The environment: `envFrom` first, then `env` (which wins), values from ConfigMaps and
    // Secrets copied as the Deployment is written.
    let mut env = Map::new();
    let refs = |e: &Value| -> Option<(&'static str, &'static str)> {
        if e["configMapRef"].is_object() || e["configMapKeyRef"].is_object() {
            Some(("ConfigMap", if e["configMapRef"].is_object() { "configMapRef" } else { "configMapKeyRef" }))
        } else if e["secretRef"].is_object() || e["secretKeyRef"].is_object() {
            Some(("Secret", if e["secretRef"].is_object() { "secretRef" } else { "secretKeyRef" }))
        } else {
            None
        }
    };
    for (i, e) in c["envFrom"].as_array().into_iter().flatten().enumerate() {
        let at = format!("{cf}.envFrom[{i}]");
        let Some((kind, field)) = refs(e) else {
            return Err(bad(&at, "Required value: configMapRef or secretRef"));
        };
        let r = &e[field];
        let rname = r["name"].as_str().unwrap_or("");
        let prefix = e["prefix"].as_str().unwrap_or("");
        match sources(kind, rname).map(|o| env_data(kind, &o)) {
            Some(data) => {
                for (k, v) in data {
                    let k = format!("{prefix}{k}");
                    // Kubernetes leaves out the keys that cannot be variables' names.
                    if env_name_ok(&k) {
                        env.insert(k, json!(v));
                    }
                }
            }
            None if r["optional"].as_bool() == Some(true) => {}
            None => {
                return Err(bad(
                    &format!("{at}.{field}.name"),
                    &format!("Not found: {kind} {rname:?} (in the object's namespace, that its writer may use)"),
                ));
            }
        }
    }
    for (i, e) in c["env"].as_array().into_iter().flatten().enumerate() {
        let at = format!("{cf}.env[{i}]");
        let key = e["name"].as_str().unwrap_or("").to_string();
        let value = if e["valueFrom"].is_null() {
            e["value"].as_str().unwrap_or("").to_string()
        } else {
            let Some((kind, field)) = refs(&e["valueFrom"]) else {
                return Err(bad(&format!("{at}.valueFrom"), "Required value: configMapKeyRef or secretKeyRef"));
            };
            let r = &e["valueFrom"][field];
            let (rname, rkey) = (r["name"].as_str().unwrap_or(""), r["key"].as_str().unwrap_or(""));
            match sources(kind, rname).map(|o| env_data(kind, &o).get(rkey).cloned()) {
                Some(Some(v)) => v,
                _ if r["optional"].as_bool() == Some(true) => continue,
                Some(None) => {
                    return Err(bad(&format!("{at}.valueFrom.{field}.key"), &format!("Not found: key {rkey:?} in {kind} {rname:?}")));
                }
                None => {
                    return Err(bad(
                        &format!("{at}.valueFrom.{field}.name"),
                        &format!("Not found: {kind} {rname:?} (in the object's namespace, that its writer may use)"),
                    ));
                }
            }
        };
        env.insert(key, json!(value));
    }
    let mut resources = Map::new();
    let res = |k: &str| c["resources"]["limits"][k].as_str().or(c["resources"]["requests"][k].as_str()).map(str::to_string);
    for (k, _) in c["resources"]["limits"].as_object().into_iter().chain(c["resources"]["requests"].as_object()).flatten() {
        if !["cpu", "memory", "nvidia.com/gpu"].contains(&k.as_str()) {
            return Err(bad(
                &format!("{cf}.resources"),
                &format!("Unsupported value: {k:?}: Tandem allocates cpu, memory and nvidia.com/gpu"),
            ));
        }
    }
    if let Some(q) = res("cpu") {
        let n = cpus(&q).ok_or_else(|| bad(&format!("{cf}.resources.limits.cpu"), &format!("Invalid value: {q:?}")))?;
        resources.insert("cpus".into(), json!(n));
    }
    if let Some(q) = res("memory") {
        resources.insert("memory".into(), json!(q));
    }
    if let Some(q) = res("nvidia.com/gpu") {
        let n: u32 = q
            .parse()
            .map_err(|_| bad(&format!("{cf}.resources.limits.nvidia.com/gpu"), &format!("Invalid value: {q:?}: a whole number")))?;
        resources.insert("gpus".into(), json!(n));
    }
    let mut out = json!({"command": [], "env": env, "resources": resources});
    out["command"] = json!(std::mem::take(&mut command));
    if !args.is_empty() {
        out["args"] = json!(args);
    }
    if let Some(i) = c["image"].as_str() {
        out["image"] = json!(i);
    }
    let vols = volumes(tspec, sources, bad)?;
    if !vols.is_empty() {
        if c["image"].as_str().is_none() {
            return Err(bad(
                &format!("{cf}.volumeMounts"),
                "Forbidden: volumes need an image (a container without one runs on the node's own files)",
            ));
        }
        out["volumes"] = json!(vols);
    }
    if let Some(w) = c["workingDir"].as_str() {
        out["workdir"] = json!(w);
    }
    if let Some(p) = tspec["priorityClassName"].as_str() {
        out["qos"] = json!(p);
    }
    for (k, v) in tspec["nodeSelector"].as_object().into_iter().flatten() {
        match k.strip_prefix(&format!("{}/partition-", crate::PREFIX)) {
            Some(p) if v == "true" => out["partition"] = json!(p),
            _ => {
                return Err(bad(
                    &format!("spec.template.spec.nodeSelector.{k}"),
                    "Unsupported value: Tandem selects a partition (tandem.dev/partition-NAME: \"true\")",
                ));
            }
        }
    }
    match out {
        Value::Object(m) => Ok(m),
        _ => unreachable!("made as an object"),
    }
}

/// Whether an unknown field's shown path (`a.b[0].c`) is the pattern `p` (`a.b[].c`) or under it.
pub(crate) fn shown_matches(unknown: &str, p: &str) -> bool {
    let mut pat = String::new();
    let mut skip = false;
    for ch in unknown.chars() {
        match ch {
            '[' => {
                pat.push_str("[]");
                skip = true;
            }
            ']' => skip = false,
            _ if skip => {}
            _ => pat.push(ch),
        }
    }
    p == pat || p.starts_with(&format!("{pat}.")) || p.starts_with(&format!("{pat}["))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dep() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"app": "web"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "50%"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "busybox",
                    "command": ["httpd", "-f", "-p", "$PORT"], "env": [{"name": "A", "value": "1"}], "ports": [{"containerPort": 8080}],
                    "resources": {"limits": {"cpu": "500m", "memory": "64Mi", "nvidia.com/gpu": "1"}},
                    "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1}}],
                    "terminationGracePeriodSeconds": 5, "nodeSelector": {"tandem.dev/partition-batch": "true"}}}}})
    }

    fn no_sources(_: &str, _: &str) -> Option<Value> {
        None
    }

    #[test]
    fn environment_values_come_from_configmaps_and_secrets_and_env_wins() {
        use base64::Engine;
        let cm = json!({"data": {"MODE": "fast", "LEVEL": "3", "bad key": "x"}, "binaryData": {"BLOB": base64::engine::general_purpose::STANDARD.encode("text")}});
        let secret = json!({"data": {"TOKEN": base64::engine::general_purpose::STANDARD.encode("s3cret"), "RAW": base64::engine::general_purpose::STANDARD.encode([0xff, 0xfe])}});
        assert_eq!(
            env_data("Secret", &secret),
            BTreeMap::from([("TOKEN".to_string(), "s3cret".to_string())]),
            "bytes that are not text are left out"
        );
        let sources = |kind: &str, name: &str| match (kind, name) {
            ("ConfigMap", "settings") => Some(cm.clone()),
            ("Secret", "keys") => Some(secret.clone()),
            _ => None,
        };
        let mut d = dep();
        let c = &mut d["spec"]["template"]["spec"]["containers"][0];
        c["envFrom"] = json!([{"configMapRef": {"name": "settings"}}, {"secretRef": {"name": "keys"}, "prefix": "K_"}, {"configMapRef": {"name": "gone", "optional": true}}]);
        c["env"] = json!([
            {"name": "MODE", "value": "slow"},
            {"name": "API", "valueFrom": {"secretKeyRef": {"name": "keys", "key": "TOKEN"}}},
            {"name": "LVL", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "LEVEL"}}},
            {"name": "MAYBE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "nope", "optional": true}}}
        ]);
        let w = deployment(&d, "default", Validation::Strict, &sources).unwrap();
        let env = w.spec.env.clone();
        let get = |k: &str| env.get(k).map(String::as_str);
        assert_eq!(
            (get("MODE"), get("LEVEL"), get("BLOB"), get("K_TOKEN"), get("API"), get("LVL")),
            (Some("slow"), Some("3"), Some("text"), Some("s3cret"), Some("s3cret"), Some("3"))
        );
        assert_eq!((get("bad key"), get("MAYBE")), (None, None), "invalid names and optional misses are left out");
        // What is missing, and not optional, is named.
        for (change, field) in [
            (json!([{"name": "X", "valueFrom": {"secretKeyRef": {"name": "other", "key": "k"}}}]), "env[0].valueFrom.secretKeyRef.name"),
            (
                json!([{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "k"}}}]),
                "env[0].valueFrom.configMapKeyRef.key",
            ),
            (json!([{"name": "X", "valueFrom": {}}]), "env[0].valueFrom"),
        ] {
            let mut d = dep();
            d["spec"]["template"]["spec"]["containers"][0]["env"] = change;
            let e = deployment(&d, "default", Validation::Strict, &sources).unwrap_err();
            assert_eq!(e.code, 422);
            assert!(e.causes.iter().any(|c| c.2.ends_with(field)), "{field}: {e:?}");
        }
        let mut d = dep();
        d["spec"]["template"]["spec"]["containers"][0]["envFrom"] = json!([{"secretRef": {"name": "other"}}]);
        let e = deployment(&d, "default", Validation::Strict, &sources).unwrap_err();
        assert!(e.causes.iter().any(|c| c.2.ends_with("envFrom[0].secretRef.name") && c.1.contains("Not found")), "{e:?}");
    }

    #[test]
    fn a_deployment_becomes_a_service_spec() {
        let w = deployment(&dep(), "default", Validation::Strict, &no_sources).unwrap();
        let s = serde_json::to_value(&w.spec).unwrap();
        assert_eq!(w.name, "web");
        assert_eq!(s["command"], json!(["httpd", "-f", "-p", "$PORT"]));
        assert_eq!(s["env"]["A"], "1");
        assert_eq!(s["image"], "busybox");
        assert_eq!(s["replicas"], 2.0);
        assert_eq!(s["resources"]["cpus"], 1.0);
        assert_eq!(s["resources"]["memory"], "64Mi");
        assert_eq!(s["resources"]["gpus"], 1.0);
        assert_eq!(s["readiness"]["http"], "/");
        assert!(s["readiness"]["port"].is_null(), "the container's port is the replica's $PORT: {s}");
        assert_eq!(s["rolling_update"]["max_unavailable"], "50%");
        assert_eq!(s["partition"], "batch");
        assert_eq!(w.stored["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"], "{}");
        assert_eq!(w.stored["spec"], dep()["spec"]);
    }

    #[test]
    fn unknown_fields_are_refused_under_strict_and_warned_about_under_warn() {
        let mut d = dep();
        d["spec"]["replicaz"] = json!(3);
        d["spec"]["template"]["spec"]["containers"][0]["imag"] = json!("x");
        let e = deployment(&d, "default", Validation::Strict, &no_sources).unwrap_err();
        assert_eq!(e.code, 400);
        assert!(e.message.contains("unknown field \"spec.replicaz\""), "{}", e.message);
        assert!(e.message.contains("unknown field \"spec.template.spec.containers[0].imag\""), "{}", e.message);
        let w = deployment(&d, "default", Validation::Warn, &no_sources).unwrap();
        assert_eq!(w.warnings.len(), 2);
        assert!(deployment(&d, "default", Validation::Ignore, &no_sources).unwrap().warnings.is_empty());
    }

    #[test]
    fn configmap_and_secret_volumes_become_files_mounted_in_the_image() {
        use base64::Engine;
        let b64 = |t: &str| base64::engine::general_purpose::STANDARD.encode(t);
        let cm = json!({"data": {"app.conf": "mode=fast", "level": "3"}, "binaryData": {"blob": b64("\u{1}")}});
        let secret = json!({"data": {"token": b64("s3cret"), "other": b64("x")}});
        let sources = |kind: &str, name: &str| match (kind, name) {
            ("ConfigMap", "cfg") => Some(cm.clone()),
            ("Secret", "sec") => Some(secret.clone()),
            _ => None,
        };
        let with = |mounts: Value, volumes: Value| {
            let mut d = dep();
            let t = &mut d["spec"]["template"]["spec"];
            t["containers"][0]["image"] = json!("oci:/x:1");
            t["containers"][0]["volumeMounts"] = mounts;
            t["volumes"] = volumes;
            d
        };
        let d = with(
            json!([{"name": "cfg", "mountPath": "/etc/cfg", "readOnly": true}, {"name": "sec", "mountPath": "/etc/sec"},
                {"name": "cfg", "mountPath": "/etc/app.conf", "subPath": "app.conf"}]),
            json!([{"name": "cfg", "configMap": {"name": "cfg", "defaultMode": 0o440}},
                {"name": "sec", "secret": {"secretName": "sec", "items": [{"key": "token", "path": "tok", "mode": 0o400}]}},
                {"name": "unused", "configMap": {"name": "nowhere"}}]),
        );
        let w = deployment(&d, "default", Validation::Strict, &sources).unwrap();
        let v = serde_json::to_value(&w.spec.volumes).unwrap();
        assert_eq!(
            v,
            json!([
                {"dst": "/etc/cfg", "files": [{"name": "app.conf", "base64": b64("mode=fast"), "mode": 0o440},
                    {"name": "blob", "base64": b64("\u{1}"), "mode": 0o440}, {"name": "level", "base64": b64("3"), "mode": 0o440}], "file": false},
                {"dst": "/etc/sec", "files": [{"name": "tok", "base64": b64("s3cret"), "mode": 0o400}], "file": false},
                {"dst": "/etc/app.conf", "files": [{"name": "app.conf", "base64": b64("mode=fast"), "mode": 0o440}], "file": true},
            ])
        );
        // What cannot be is a 422 naming the field.
        let cases = [
            (with(json!([{"name": "x", "mountPath": "/x"}]), json!([])), "volumeMounts[0].name"),
            (
                with(json!([{"name": "e", "mountPath": "/x"}]), json!([{"name": "e", "hostPath": {"path": "/"}}])),
                "spec.template.spec.volumes[0].hostPath",
            ),
            (with(json!([{"name": "e", "mountPath": "/x"}]), json!([{"name": "e", "emptyDir": {"medium": "Memory"}}])), "emptyDir.medium"),
            (with(json!([{"name": "e", "mountPath": "/x", "subPath": "a"}]), json!([{"name": "e", "emptyDir": {}}])), "subPath"),
            (with(json!([{"name": "c", "mountPath": "x"}]), json!([{"name": "c", "configMap": {"name": "cfg"}}])), "mountPath"),
            (with(json!([{"name": "c", "mountPath": "/a/../b"}]), json!([{"name": "c", "configMap": {"name": "cfg"}}])), "mountPath"),
            (with(json!([{"name": "c", "mountPath": "/x"}]), json!([{"name": "c", "configMap": {"name": "gone"}}])), "configMap.name"),
            (
                with(json!([{"name": "s", "mountPath": "/x"}]), json!([{"name": "s", "secret": {"secretName": "gone"}}])),
                "secret.secretName",
            ),
            (
                with(
                    json!([{"name": "c", "mountPath": "/x"}]),
                    json!([{"name": "c", "configMap": {"name": "cfg", "items": [{"key": "nope", "path": "p"}]}}]),
                ),
                "items[0].key",
            ),
            (
                with(
                    json!([{"name": "c", "mountPath": "/x"}]),
                    json!([{"name": "c", "configMap": {"name": "cfg", "items": [{"key": "level", "path": "a/b"}]}}]),
                ),
                "items[0].path",
            ),
            (
                with(json!([{"name": "c", "mountPath": "/x"}]), json!([{"name": "c", "configMap": {"name": "cfg", "defaultMode": 4096}}])),
                "defaultMode",
            ),
            (
                with(json!([{"name": "c", "mountPath": "/x", "subPath": "nope"}]), json!([{"name": "c", "configMap": {"name": "cfg"}}])),
                "subPath",
            ),
            (
                with(
                    json!([{"name": "c", "mountPath": "/x", "subPathExpr": "$(X)"}]),
                    json!([{"name": "c", "configMap": {"name": "cfg"}}]),
                ),
                "subPathExpr",
            ),
            (
                with(json!([]), json!([{"name": "c", "configMap": {"name": "cfg"}}, {"name": "c", "secret": {"secretName": "sec"}}])),
                "volumes[1].name",
            ),
        ];
        for (d, field) in cases {
            let e = deployment(&d, "default", Validation::Strict, &sources).unwrap_err();
            assert_eq!(e.code, 422, "{field}: {}", e.message);
            assert!(e.message.contains(field), "{field}: {}", e.message);
        }
        // An emptyDir: scratch space.
        let d = with(json!([{"name": "e", "mountPath": "/scratch"}]), json!([{"name": "e", "emptyDir": {}}]));
        let v = serde_json::to_value(deployment(&d, "default", Validation::Strict, &sources).unwrap().spec.volumes).unwrap();
        assert_eq!(v, json!([{"dst": "/scratch", "files": [], "file": false, "scratch": true}]));
        // Optional: a source not there mounts an empty directory.
        let d = with(json!([{"name": "c", "mountPath": "/x"}]), json!([{"name": "c", "configMap": {"name": "gone", "optional": true}}]));
        assert_eq!(
            serde_json::to_value(deployment(&d, "default", Validation::Strict, &sources).unwrap().spec.volumes).unwrap()[0]["files"],
            json!([])
        );
        // Without an image there is nowhere to mount them.
        let mut d = with(json!([{"name": "c", "mountPath": "/x"}]), json!([{"name": "c", "configMap": {"name": "cfg"}}]));
        d["spec"]["template"]["spec"]["containers"][0].as_object_mut().unwrap().remove("image");
        let e = deployment(&d, "default", Validation::Strict, &sources).unwrap_err();
        assert!(e.message.contains("volumes need an image"), "{}", e.message);
    }

    #[test]
    fn what_tandem_does_not_implement_is_a_422_naming_the_field() {
        type Change = Box<dyn Fn(&mut Value)>;
        let cases: Vec<(Change, &str)> = vec![
            (
                Box::new(|d| d["spec"]["template"]["spec"]["initContainers"] = json!([{"name": "i", "image": "x"}])),
                "spec.template.spec.initContainers[0].image",
            ),
            (
                Box::new(
                    |d| d["spec"]["template"]["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Exists"}]}]}}}),
                ),
                "spec.template.spec.affinity.nodeAffinity",
            ),
            (
                Box::new(|d| d["spec"]["template"]["spec"]["securityContext"] = json!({"runAsUser": 0})),
                "spec.template.spec.securityContext.runAsUser",
            ),
            (
                Box::new(|d| d["spec"]["template"]["spec"]["imagePullSecrets"] = json!([{"name": "s"}])),
                "spec.template.spec.imagePullSecrets[0].name",
            ),
            (
                Box::new(|d| {
                    d["spec"]["template"]["spec"]["containers"][0]["env"][0] =
                        json!({"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
                }),
                "spec.template.spec.containers[0].env[0].valueFrom.fieldRef.fieldPath",
            ),
            (
                Box::new(|d| {
                    d["spec"]["template"]["spec"]["containers"][0].as_object_mut().unwrap().remove("command");
                }),
                "spec.template.spec.containers[0].command",
            ),
            (Box::new(|d| d["spec"]["strategy"] = json!({"type": "Recreate"})), "spec.strategy.type"),
            (Box::new(|d| d["spec"]["template"]["spec"]["nodeSelector"] = json!({"zone": "a"})), "spec.template.spec.nodeSelector.zone"),
            (Box::new(|d| d["spec"]["template"]["metadata"]["labels"] = json!({"app": "other"})), "spec.template.metadata.labels"),
            (Box::new(|d| d["metadata"]["name"] = json!("Web_1")), "metadata.name"),
            (
                Box::new(|d| {
                    let c = d["spec"]["template"]["spec"]["containers"][0].clone();
                    d["spec"]["template"]["spec"]["containers"] = json!([c.clone(), c]);
                }),
                "spec.template.spec.containers",
            ),
            (
                Box::new(|d| d["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] = json!({"exec": {"command": ["true"]}})),
                "readinessProbe.exec",
            ),
        ];
        for (change, field) in cases {
            let mut d = dep();
            change(&mut d);
            let e = deployment(&d, "default", Validation::Strict, &no_sources).unwrap_err();
            assert_eq!(e.code, 422, "{field}: {}", e.message);
            assert!(e.message.contains(field), "{field}: {}", e.message);
        }
        // What `kubectl create deployment --dry-run=client -o yaml` writes sets nothing more.
        let mut d = dep();
        d["spec"]["strategy"] = json!({});
        d["status"] = json!({});
        d["spec"]["template"]["metadata"]["creationTimestamp"] = Value::Null;
        d["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({});
        d["spec"]["template"]["spec"]["tolerations"] = json!([]);
        deployment(&d, "default", Validation::Strict, &no_sources).unwrap();
        // `web` of namespace `team-a` is the service `web.team-a`.
        let w = deployment(&dep(), "team-a", Validation::Strict, &no_sources).unwrap();
        assert_eq!(
            (w.name.as_str(), w.spec.name.as_str(), w.stored["metadata"]["namespace"].as_str()),
            ("web", "web.team-a", Some("team-a"))
        );
        let e = deployment(&dep(), "Team_A", Validation::Strict, &no_sources).unwrap_err();
        assert!(e.code == 422 && e.message.contains("metadata.namespace"), "{}", e.message);
        let mut d = dep();
        d["metadata"]["namespace"] = json!("other");
        assert_eq!(deployment(&d, "default", Validation::Strict, &no_sources).unwrap_err().code, 400);
        for bad in [json!([]), json!({"kind": "Pod", "apiVersion": "v1"}), json!({"spec": {"replicas": "many"}})] {
            assert_eq!(deployment(&bad, "default", Validation::Strict, &no_sources).unwrap_err().code, 400, "{bad}");
        }
    }
}

/// An object of a stored kind (Service, ConfigMap, Secret) accepted for writing: its name, what
/// is kept of it, and the warnings.
#[derive(Debug, Clone)]
pub struct Stored {
    /// Its name.
    pub name: String,
    /// `metadata` (name, namespace, labels, annotations) and its body as written.
    pub stored: Value,
    /// Warnings (`Warning` headers).
    pub warnings: Vec<String>,
}

/// The most a ConfigMap's or Secret's data may hold (Kubernetes' limit).
pub const MAX_DATA: usize = 1 << 20;

pub(crate) fn invalid_kind(kind: &str, name: &str, field: &str, why: &str) -> Failure {
    let mut f = invalid(name, field, why);
    f.message = format!("{kind} \"{name}\" is invalid: {field}: {why}");
    f.details = Some((kind.into(), name.into()));
    f
}

/// A DNS subdomain (a ConfigMap's or Secret's name).
fn dns_subdomain(name: &str) -> bool {
    !name.is_empty() && name.len() <= 253 && name.split('.').all(dns_label)
}

fn roundtrip<T: serde::de::DeserializeOwned + serde::Serialize>(obj: &Value, kind: &str) -> Result<(Value, Vec<String>), Failure> {
    let typed: T = serde_json::from_value(obj.clone()).map_err(|e| Failure::bad_request(format!("malformed {kind}: {e}")))?;
    let back = serde_json::to_value(&typed).expect("objects serialize");
    Ok((back.clone(), unknown_fields(obj, &back)))
}

/// Checks an object of a stored kind (`Service`, `ConfigMap`, `Secret` written to `namespace`;
/// `Namespace`, in none).
pub fn stored(kind: &str, obj: &Value, namespace: &str, validation: Validation) -> Result<Stored, Failure> {
    if !obj.is_object() {
        return Err(Failure::bad_request("the body is not a JSON object"));
    }
    match (obj["apiVersion"].as_str(), obj["kind"].as_str()) {
        (Some("v1") | None, Some(k)) if k == kind => {}
        (Some("v1") | None, None) => {}
        (v, k) => {
            return Err(Failure::bad_request(format!(
                "this is the {kind} resource of v1; the body is {} {}",
                v.unwrap_or("(no apiVersion)"),
                k.unwrap_or("(no kind)")
            )));
        }
    }
    use k8s_openapi::api::core::v1 as core;
    let (typed, unknown) = match kind {
        "Service" => roundtrip::<core::Service>(obj, kind)?,
        "ConfigMap" => roundtrip::<core::ConfigMap>(obj, kind)?,
        "Secret" => roundtrip::<core::Secret>(obj, kind)?,
        "Namespace" => roundtrip::<core::Namespace>(obj, kind)?,
        other => return Err(Failure::method_not_allowed(format!("{other} is not written here"))),
    };
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    let warnings = check_unknown(&unknown, validation)?;
    let name_ok = if matches!(kind, "Service" | "Namespace") { dns_label(&name) } else { dns_subdomain(&name) };
    if !name_ok {
        return Err(invalid_kind(kind, &name, "metadata.name", &format!("Invalid value: {name:?}: a lower-case DNS name")));
    }
    if kind != "Namespace" {
        check_namespace(obj["metadata"]["namespace"].as_str(), namespace, &|field, why| invalid_kind(kind, &name, field, why))?;
    }
    let mut body = Map::new();
    match kind {
        "Service" => {
            let spec = &typed["spec"];
            match spec["type"].as_str() {
                None | Some("ClusterIP") => {}
                Some(other) => {
                    return Err(invalid_kind(
                        kind,
                        &name,
                        "spec.type",
                        &format!("Unsupported value: {other:?}: Tandem's Services are reached through its proxy (ClusterIP)"),
                    ));
                }
            }
            if spec["clusterIP"].as_str().is_some_and(|ip| ip != "None" && !ip.is_empty()) {
                return Err(invalid_kind(
                    kind,
                    &name,
                    "spec.clusterIP",
                    "Forbidden: Tandem assigns no cluster IPs (its proxy routes by name)",
                ));
            }
            for (i, p) in spec["ports"].as_array().into_iter().flatten().enumerate() {
                if p["protocol"].as_str().is_some_and(|x| x != "TCP") {
                    return Err(invalid_kind(
                        kind,
                        &name,
                        &format!("spec.ports[{i}].protocol"),
                        "Unsupported value: the proxy carries TCP (HTTP)",
                    ));
                }
            }
            let mut paths = Vec::new();
            leaves(obj, String::new(), String::new(), &mut paths);
            let allowed = [
                "spec.selector.",
                "spec.ports[].",
                "spec.type",
                "spec.clusterIP",
                "spec.sessionAffinity",
                "apiVersion",
                "kind",
                "metadata.",
                "status.",
            ];
            if let Some((_, shown)) = paths.iter().find(|(p, s)| !allowed.iter().any(|a| p.starts_with(a)) && !unknown.contains(s)) {
                return Err(invalid_kind(kind, &name, shown, "Forbidden: not supported by Tandem (docs/kubernetes.md)"));
            }
            body.insert("spec".into(), obj["spec"].clone());
        }
        "Namespace" => {
            // Its labels and annotations are all it keeps; its spec's one field is the
            // finalizer Kubernetes itself sets, its status the server's.
            let mut paths = Vec::new();
            leaves(obj, String::new(), String::new(), &mut paths);
            let allowed = ["spec.finalizers", "apiVersion", "kind", "metadata.", "status."];
            if let Some((_, shown)) = paths.iter().find(|(p, s)| !allowed.iter().any(|a| p.starts_with(a)) && !unknown.contains(s)) {
                return Err(invalid_kind(kind, &name, shown, "Forbidden: not supported by Tandem (docs/kubernetes.md)"));
            }
            if name == crate::DEFAULT_NAMESPACE {
                return Err(invalid_kind(kind, &name, "metadata.name", "Invalid value: \"default\" always exists"));
            }
        }
        _ => {
            let mut size = 0;
            let mut data = typed["data"].as_object().cloned().unwrap_or_default();
            if kind == "Secret" {
                // `stringData` is written into `data` (base64), as the API server does.
                use base64::Engine;
                for (k, v) in obj["stringData"].as_object().into_iter().flatten() {
                    let text = v.as_str().unwrap_or("");
                    data.insert(k.clone(), json!(base64::engine::general_purpose::STANDARD.encode(text)));
                }
                body.insert("type".into(), json!(obj["type"].as_str().unwrap_or("Opaque")));
            }
            for (k, v) in &data {
                if k.is_empty() || !k.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
                    return Err(invalid_kind(
                        kind,
                        &name,
                        &format!("data[{k}]"),
                        "Invalid value: a key is letters, digits, '-', '_' or '.'",
                    ));
                }
                size += k.len() + v.as_str().map_or(0, str::len);
            }
            for (k, v) in typed["binaryData"].as_object().into_iter().flatten() {
                size += k.len() + v.as_str().map_or(0, str::len);
            }
            if size > MAX_DATA {
                let mut f = Failure::from_code(413, format!("{kind} \"{name}\" is larger than {MAX_DATA} bytes"));
                f.reason = "RequestEntityTooLarge";
                return Err(f);
            }
            if !data.is_empty() {
                body.insert("data".into(), Value::Object(data));
            }
            for k in ["binaryData", "immutable"] {
                if !obj[k].is_null() {
                    body.insert(k.into(), obj[k].clone());
                }
            }
        }
    }
    let mut stored = json!({"metadata": {"name": name}});
    if kind != "Namespace" {
        stored["metadata"]["namespace"] = json!(namespace);
    }
    for k in ["labels", "annotations"] {
        if !obj["metadata"][k].is_null() {
            stored["metadata"][k] = obj["metadata"][k].clone();
        }
    }
    for (k, v) in body {
        stored[k] = v;
    }
    Ok(Stored { name, stored, warnings })
}
