//! Request bodies in protobuf (`application/vnd.kubernetes.protobuf`), as kubectl's typed
//! commands send them (`kubectl create configmap|secret generic|deployment`): the envelope
//! (`k8s\0` and a `runtime.Unknown` naming the kind), the object decoded with `k8s-pb`'s types,
//! and turned into the JSON the write path reads for every other body. What is read: a
//! ConfigMap and a Secret whole, and of a Deployment what Tandem implements (metadata, replicas,
//! selector, strategy, and the template's labels and containers' image, command, args,
//! workingDir, ports, env values, resources and imagePullPolicy). A body that sets anything
//! else is refused (415, saying to send it as JSON or YAML), never read in part: each part read
//! is taken out of the decoded message, and what is left must encode to nothing.

use crate::Failure;
use base64::Engine;
use k8s_pb::api::apps::v1::Deployment;
use k8s_pb::api::batch::v1::Job;
use k8s_pb::api::core::v1::{ConfigMap, Container, Namespace, PodSpec, PodTemplateSpec, Secret, Service};
use k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// The content type of a protobuf body.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// What every protobuf body starts with.
const MAGIC: &[u8] = b"k8s\0";

/// A body that sets what is not read from protobuf.
fn unread(what: &str) -> Failure {
    Failure::from_code(
        415,
        format!(
            "{what} sets fields Tandem does not read from a protobuf body: send the object as JSON or YAML (`kubectl apply -f`), \
             which names any field Tandem does not implement"
        ),
    )
}

/// `what`'s remains after every part read was taken out: nothing, or [`unread`]. Go's encoder
/// writes every field that is not a pointer, set or not, so "nothing" is a message whose every
/// field holds its zero value (`""`, 0, false, or an empty message), as an omitted field reads
/// in Kubernetes' JSON. Limits: a field newer than `k8s-pb`'s Kubernetes version is dropped by
/// the decoder unseen; a pointer field Go writes only when set (`paused`,
/// `minReadySeconds`, ...) set to its zero value reads as unset; and a string whose bytes
/// happen to read as zero-valued fields (`"\x08\x00"`) as empty. The fields Tandem implements
/// are all read explicitly, so none of these changes what runs.
fn nothing_left<M: Message>(m: &M, what: &str) -> Result<(), Failure> {
    if all_zero(&m.encode_to_vec(), 0) { Ok(()) } else { Err(unread(what)) }
}

/// How deep [`all_zero`] looks into nested messages: deeper is taken as set (no object
/// Tandem reads nests empty messages this deep, and a body cannot make it recurse further).
const MAX_DEPTH: u32 = 16;

/// Whether `b` is a message whose every field is zero: varints and fixed values 0, and every
/// length-delimited field empty or itself such a message (a non-empty string is almost never
/// one: its bytes do not parse as fields that are all zero).
fn all_zero(mut b: &[u8], depth: u32) -> bool {
    if depth > MAX_DEPTH {
        return b.is_empty();
    }
    fn varint(b: &mut &[u8]) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let (&x, rest) = b.split_first()?;
            *b = rest;
            v |= u64::from(x & 0x7f) << (7 * i);
            if x & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    while !b.is_empty() {
        let Some(key) = varint(&mut b) else { return false };
        let zero = match key & 7 {
            0 => varint(&mut b) == Some(0),
            1 => {
                b.len() >= 8 && b[..8].iter().all(|x| *x == 0) && {
                    b = &b[8..];
                    true
                }
            }
            5 => {
                b.len() >= 4 && b[..4].iter().all(|x| *x == 0) && {
                    b = &b[4..];
                    true
                }
            }
            2 => match varint(&mut b).and_then(|n| usize::try_from(n).ok()).filter(|n| *n <= b.len()) {
                Some(n) => {
                    let (inner, rest) = b.split_at(n);
                    b = rest;
                    all_zero(inner, depth + 1)
                }
                None => false,
            },
            _ => false,
        };
        if !zero {
            return false;
        }
    }
    true
}

/// A string field as JSON: absent when empty (Go writes unset strings as `""`).
fn text(s: Option<String>) -> Option<Value> {
    s.filter(|s| !s.is_empty()).map(Value::from)
}

/// Decodes a protobuf request body into the object as JSON (with its `apiVersion` and `kind`).
pub fn decode(body: &[u8]) -> Result<Value, Failure> {
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| Failure::bad_request("malformed protobuf body: it does not start with the Kubernetes magic number"))?;
    let u = Unknown::decode(rest).map_err(|e| Failure::bad_request(format!("malformed protobuf body: {e}")))?;
    if u.content_encoding.as_deref().is_some_and(|e| !e.is_empty()) {
        return Err(Failure::from_code(415, "a protobuf body with a content encoding is not read: send it as JSON or YAML"));
    }
    let tm = u.type_meta.unwrap_or_default();
    let (api_version, kind) = (tm.api_version.unwrap_or_default(), tm.kind.unwrap_or_default());
    let raw = u.raw.unwrap_or_default();
    let bad = |e: prost::DecodeError| Failure::bad_request(format!("malformed protobuf {kind}: {e}"));
    let mut obj = match (api_version.as_str(), kind.as_str()) {
        ("v1", "ConfigMap") => config_map(ConfigMap::decode(raw.as_slice()).map_err(bad)?)?,
        ("v1", "Secret") => secret(Secret::decode(raw.as_slice()).map_err(bad)?)?,
        ("v1", "Namespace") => namespace(Namespace::decode(raw.as_slice()).map_err(bad)?)?,
        ("v1", "Service") => service(Service::decode(raw.as_slice()).map_err(bad)?)?,
        ("apps/v1", "Deployment") => deployment(Deployment::decode(raw.as_slice()).map_err(bad)?)?,
        ("batch/v1", "Job") => job(Job::decode(raw.as_slice()).map_err(bad)?)?,
        (v, k) => {
            return Err(Failure::from_code(
                415,
                format!("a protobuf body of {k:?} ({v:?}) is not read: send it as JSON or YAML (`kubectl apply -f`)"),
            ));
        }
    };
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    Ok(obj)
}

fn b64(b: &[u8]) -> Value {
    json!(base64::engine::general_purpose::STANDARD.encode(b))
}

fn strings(m: BTreeMap<String, String>) -> Value {
    Value::Object(m.into_iter().map(|(k, v)| (k, json!(v))).collect())
}

/// Puts `v` at `k` unless it is absent.
fn put(o: &mut Map<String, Value>, k: &str, v: Option<Value>) {
    if let Some(v) = v {
        o.insert(k.into(), v);
    }
}

/// An object's metadata as written: its names, labels and annotations (a creation time, which
/// kubectl sends empty, is the server's to set).
fn meta(m: Option<ObjectMeta>, what: &str) -> Result<Value, Failure> {
    let mut m = m.unwrap_or_default();
    let mut o = Map::new();
    put(&mut o, "name", text(m.name.take()));
    put(&mut o, "generateName", text(m.generate_name.take()));
    put(&mut o, "namespace", text(m.namespace.take()));
    let labels = std::mem::take(&mut m.labels);
    if !labels.is_empty() {
        o.insert("labels".into(), strings(labels));
    }
    let annotations = std::mem::take(&mut m.annotations);
    if !annotations.is_empty() {
        o.insert("annotations".into(), strings(annotations));
    }
    m.creation_timestamp = None;
    nothing_left(&m, what)?;
    Ok(Value::Object(o))
}

fn namespace(mut n: Namespace) -> Result<Value, Failure> {
    let mut o = Map::new();
    o.insert("metadata".into(), meta(n.metadata.take(), "the Namespace's metadata")?);
    // `kubectl create namespace` sends an empty spec and status.
    n.spec = None;
    n.status = None;
    nothing_left(&n, "the Namespace")?;
    Ok(Value::Object(o))
}

/// A Service as `kubectl create service clusterip` sends it: its selector, ports, type, cluster
/// IP and session affinity (the write checks then refuse what Tandem does not provide).
fn service(mut svc: Service) -> Result<Value, Failure> {
    let mut o = Map::new();
    o.insert("metadata".into(), meta(svc.metadata.take(), "the Service's metadata")?);
    svc.status = None;
    let mut spec = svc.spec.take().unwrap_or_default();
    nothing_left(&svc, "the Service")?;
    let mut s = Map::new();
    let selector = std::mem::take(&mut spec.selector);
    if !selector.is_empty() {
        s.insert("selector".into(), strings(selector));
    }
    let mut ports = Vec::new();
    for mut p in std::mem::take(&mut spec.ports) {
        let mut q = Map::new();
        put(&mut q, "name", text(p.name.take()));
        put(&mut q, "protocol", text(p.protocol.take()));
        put(&mut q, "port", p.port.take().map(Value::from));
        put(&mut q, "targetPort", int_or_string(p.target_port.take(), "targetPort")?);
        nothing_left(&p, "a port of the Service")?;
        ports.push(Value::Object(q));
    }
    if !ports.is_empty() {
        s.insert("ports".into(), Value::Array(ports));
    }
    put(&mut s, "type", text(spec.r#type.take()));
    put(&mut s, "clusterIP", text(spec.cluster_ip.take()));
    put(&mut s, "sessionAffinity", text(spec.session_affinity.take()));
    nothing_left(&spec, "the Service's spec")?;
    o.insert("spec".into(), Value::Object(s));
    Ok(Value::Object(o))
}

fn config_map(mut c: ConfigMap) -> Result<Value, Failure> {
    let mut o = Map::new();
    o.insert("metadata".into(), meta(c.metadata.take(), "the ConfigMap's metadata")?);
    let data = std::mem::take(&mut c.data);
    if !data.is_empty() {
        o.insert("data".into(), strings(data));
    }
    let binary = std::mem::take(&mut c.binary_data);
    if !binary.is_empty() {
        o.insert("binaryData".into(), Value::Object(binary.into_iter().map(|(k, v)| (k, b64(&v))).collect()));
    }
    put(&mut o, "immutable", c.immutable.take().map(Value::from));
    nothing_left(&c, "the ConfigMap")?;
    Ok(Value::Object(o))
}

fn secret(mut s: Secret) -> Result<Value, Failure> {
    let mut o = Map::new();
    o.insert("metadata".into(), meta(s.metadata.take(), "the Secret's metadata")?);
    let data = std::mem::take(&mut s.data);
    if !data.is_empty() {
        o.insert("data".into(), Value::Object(data.into_iter().map(|(k, v)| (k, b64(&v))).collect()));
    }
    let string_data = std::mem::take(&mut s.string_data);
    if !string_data.is_empty() {
        o.insert("stringData".into(), strings(string_data));
    }
    put(&mut o, "type", text(s.r#type.take()));
    put(&mut o, "immutable", s.immutable.take().map(Value::from));
    nothing_left(&s, "the Secret")?;
    Ok(Value::Object(o))
}

/// An `IntOrString` (type 0: the number; type 1: the string, as `"25%"`); one whose type and
/// value disagree is refused.
fn int_or_string(v: Option<IntOrString>, what: &str) -> Result<Option<Value>, Failure> {
    let Some(v) = v else { return Ok(None) };
    match (v.r#type.unwrap_or(0), v.int_val, v.str_val.filter(|s| !s.is_empty())) {
        (0, i, None) => Ok(Some(json!(i.unwrap_or(0)))),
        (1, None | Some(0), Some(s)) => Ok(Some(json!(s))),
        _ => Err(Failure::bad_request(format!("malformed protobuf {what}: its type and value disagree"))),
    }
}

fn deployment(mut d: Deployment) -> Result<Value, Failure> {
    let mut o = Map::new();
    o.insert("metadata".into(), meta(d.metadata.take(), "the Deployment's metadata")?);
    // kubectl sends an empty status; any other is not the client's to write.
    if let Some(st) = d.status.take() {
        nothing_left(&st, "the Deployment's status")?;
    }
    let mut spec = d.spec.take().unwrap_or_default();
    nothing_left(&d, "the Deployment")?;
    let mut s = Map::new();
    put(&mut s, "replicas", spec.replicas.take().map(Value::from));
    if let Some(mut sel) = spec.selector.take() {
        let labels = std::mem::take(&mut sel.match_labels);
        nothing_left(&sel, "spec.selector (matchExpressions)")?;
        s.insert("selector".into(), json!({"matchLabels": strings(labels)}));
    }
    if let Some(mut st) = spec.strategy.take() {
        let mut so = Map::new();
        put(&mut so, "type", text(st.r#type.take()));
        if let Some(mut ru) = st.rolling_update.take() {
            let mut r = Map::new();
            put(&mut r, "maxSurge", int_or_string(ru.max_surge.take(), "maxSurge")?);
            put(&mut r, "maxUnavailable", int_or_string(ru.max_unavailable.take(), "maxUnavailable")?);
            nothing_left(&ru, "spec.strategy.rollingUpdate")?;
            so.insert("rollingUpdate".into(), Value::Object(r));
        }
        nothing_left(&st, "spec.strategy")?;
        // kubectl sends an empty strategy: the default, as if absent.
        if !so.is_empty() {
            s.insert("strategy".into(), Value::Object(so));
        }
    }
    if let Some(t) = spec.template.take() {
        s.insert("template".into(), template(t)?);
    }
    nothing_left(&spec, "spec (minReadySeconds, revisionHistoryLimit, paused, progressDeadlineSeconds)")?;
    o.insert("spec".into(), Value::Object(s));
    Ok(Value::Object(o))
}

/// A Job as `kubectl create job` sends it: metadata, the counts, limits and mode Tandem
/// implements, and the template.
fn job(mut j: Job) -> Result<Value, Failure> {
    let mut o = Map::new();
    o.insert("metadata".into(), meta(j.metadata.take(), "the Job's metadata")?);
    if let Some(st) = j.status.take() {
        nothing_left(&st, "the Job's status")?;
    }
    let mut spec = j.spec.take().unwrap_or_default();
    nothing_left(&j, "the Job")?;
    let mut s = Map::new();
    put(&mut s, "parallelism", spec.parallelism.take().map(Value::from));
    put(&mut s, "completions", spec.completions.take().map(Value::from));
    put(&mut s, "backoffLimit", spec.backoff_limit.take().map(Value::from));
    put(&mut s, "activeDeadlineSeconds", spec.active_deadline_seconds.take().map(Value::from));
    put(&mut s, "completionMode", text(spec.completion_mode.take()));
    put(&mut s, "suspend", spec.suspend.take().map(Value::from));
    if let Some(t) = spec.template.take() {
        s.insert("template".into(), template(t)?);
    }
    nothing_left(&spec, "spec (selector, ttlSecondsAfterFinished, podFailurePolicy, ...)")?;
    o.insert("spec".into(), Value::Object(s));
    Ok(Value::Object(o))
}

/// A Pod template (a Deployment's, a Job's): its metadata and Pod spec.
fn template(mut t: PodTemplateSpec) -> Result<Value, Failure> {
    let mut to = Map::new();
    to.insert("metadata".into(), meta(t.metadata.take(), "spec.template.metadata")?);
    let ps = t.spec.take().unwrap_or_default();
    nothing_left(&t, "spec.template")?;
    to.insert("spec".into(), pod_spec(ps)?);
    Ok(Value::Object(to))
}

fn pod_spec(mut ps: PodSpec) -> Result<Value, Failure> {
    let mut o = Map::new();
    let containers = std::mem::take(&mut ps.containers);
    put(&mut o, "terminationGracePeriodSeconds", ps.termination_grace_period_seconds.take().map(Value::from));
    put(&mut o, "priorityClassName", text(ps.priority_class_name.take()));
    put(&mut o, "restartPolicy", text(ps.restart_policy.take()));
    let selector = std::mem::take(&mut ps.node_selector);
    if !selector.is_empty() {
        o.insert("nodeSelector".into(), strings(selector));
    }
    nothing_left(
        &ps,
        "spec.template.spec (beyond its containers, terminationGracePeriodSeconds, priorityClassName, restartPolicy, nodeSelector)",
    )?;
    let mut list = Vec::new();
    for (i, c) in containers.into_iter().enumerate() {
        list.push(container(c, i)?);
    }
    o.insert("containers".into(), json!(list));
    Ok(Value::Object(o))
}

fn container(mut c: Container, i: usize) -> Result<Value, Failure> {
    let at = format!("spec.template.spec.containers[{i}]");
    let mut o = Map::new();
    put(&mut o, "name", text(c.name.take()));
    put(&mut o, "image", text(c.image.take()));
    put(&mut o, "imagePullPolicy", text(c.image_pull_policy.take()));
    put(&mut o, "workingDir", text(c.working_dir.take()));
    let command = std::mem::take(&mut c.command);
    if !command.is_empty() {
        o.insert("command".into(), json!(command));
    }
    let args = std::mem::take(&mut c.args);
    if !args.is_empty() {
        o.insert("args".into(), json!(args));
    }
    let mut ports = Vec::new();
    for mut p in std::mem::take(&mut c.ports) {
        let mut po = Map::new();
        put(&mut po, "containerPort", p.container_port.take().map(Value::from));
        put(&mut po, "name", text(p.name.take()));
        put(&mut po, "protocol", text(p.protocol.take()));
        nothing_left(&p, &format!("{at}.ports (hostPort, hostIP)"))?;
        ports.push(Value::Object(po));
    }
    if !ports.is_empty() {
        o.insert("ports".into(), json!(ports));
    }
    let mut env = Vec::new();
    for mut e in std::mem::take(&mut c.env) {
        let mut eo = Map::new();
        put(&mut eo, "name", text(e.name.take()));
        put(&mut eo, "value", e.value.take().map(Value::from));
        nothing_left(&e, &format!("{at}.env (valueFrom)"))?;
        env.push(Value::Object(eo));
    }
    if !env.is_empty() {
        o.insert("env".into(), json!(env));
    }
    if let Some(mut r) = c.resources.take() {
        let quantities = |m: BTreeMap<String, k8s_pb::apimachinery::pkg::api::resource::Quantity>| {
            Value::Object(m.into_iter().map(|(k, q)| (k, json!(q.string.unwrap_or_default()))).collect())
        };
        let mut ro = Map::new();
        let (limits, requests) = (std::mem::take(&mut r.limits), std::mem::take(&mut r.requests));
        if !limits.is_empty() {
            ro.insert("limits".into(), quantities(limits));
        }
        if !requests.is_empty() {
            ro.insert("requests".into(), quantities(requests));
        }
        nothing_left(&r, &format!("{at}.resources (claims)"))?;
        if !ro.is_empty() {
            o.insert("resources".into(), Value::Object(ro));
        }
    }
    nothing_left(&c, &at)?;
    Ok(Value::Object(o))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::api::core::v1::{ContainerPort, EnvVar, PodTemplateSpec};
    use k8s_pb::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
    use k8s_pb::apimachinery::pkg::runtime::TypeMeta;

    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let u = Unknown {
            type_meta: Some(TypeMeta { api_version: Some(api_version.into()), kind: Some(kind.into()) }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        [MAGIC.to_vec(), u.encode_to_vec()].concat()
    }

    /// Metadata as Go's encoder writes it: every string and number, set or not.
    fn named(name: &str) -> Option<ObjectMeta> {
        Some(ObjectMeta {
            name: Some(name.into()),
            generate_name: Some(String::new()),
            namespace: Some(String::new()),
            self_link: Some(String::new()),
            uid: Some(String::new()),
            resource_version: Some(String::new()),
            generation: Some(0),
            creation_timestamp: Some(Time { seconds: Some(0), nanos: Some(0) }),
            ..Default::default()
        })
    }

    #[test]
    fn a_service_and_a_namespace_as_kubectl_create_sends_them() {
        use k8s_pb::api::core::v1::{NamespaceSpec, ServicePort, ServiceSpec};
        let port = ServicePort {
            name: Some("80-8080".into()),
            protocol: Some("TCP".into()),
            port: Some(80),
            target_port: Some(IntOrString { r#type: Some(0), int_val: Some(8080), str_val: Some(String::new()) }),
            node_port: Some(0),
            ..Default::default()
        };
        let svc = Service {
            metadata: named("web"),
            spec: Some(ServiceSpec {
                ports: vec![port],
                selector: BTreeMap::from([("app".to_string(), "web".to_string())]),
                cluster_ip: Some(String::new()),
                r#type: Some("ClusterIP".into()),
                session_affinity: Some(String::new()),
                ..Default::default()
            }),
            status: Some(Default::default()),
        };
        let v = decode(&envelope("v1", "Service", svc.encode_to_vec())).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"selector": {"app": "web"},
                "ports": [{"name": "80-8080", "protocol": "TCP", "port": 80, "targetPort": 8080}], "type": "ClusterIP"}})
        );
        let mut odd = svc.clone();
        odd.spec.as_mut().unwrap().external_ips = vec!["10.0.0.1".into()];
        assert_eq!(decode(&envelope("v1", "Service", odd.encode_to_vec())).unwrap_err().code, 415, "a field not read");
        let ns = Namespace { metadata: named("team-a"), spec: Some(NamespaceSpec { finalizers: vec![] }), status: None };
        let v = decode(&envelope("v1", "Namespace", ns.encode_to_vec())).unwrap();
        assert_eq!(v, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}));
    }

    #[test]
    fn zero_fields_are_nothing_and_anything_else_is_something() {
        assert!(all_zero(&[], 0));
        assert!(all_zero(&[0x08, 0x00, 0x12, 0x00, 0x1a, 0x02, 0x08, 0x00], 0), "0, \"\", a message of a 0");
        assert!(!all_zero(&[0x08, 0x01], 0), "1");
        assert!(!all_zero(&[0x12, 0x01, b'f'], 0), "the string \"f\"");
        assert!(!all_zero(&[0x12, 0x05, 0x00], 0), "a length past the end");
        assert!(!all_zero(&[0x0b], 0), "a group");
        assert!(all_zero(&[0x09, 0, 0, 0, 0, 0, 0, 0, 0], 0) && !all_zero(&[0x0d, 0, 0, 1, 0], 0), "fixed");
        // Empty messages nested 1,000 deep: no recursion past MAX_DEPTH, and not nothing.
        let mut deep: Vec<u8> = Vec::new();
        for _ in 0..1_000 {
            let mut m = vec![0x0a];
            let mut n = deep.len();
            while n >= 0x80 {
                m.push((n as u8 & 0x7f) | 0x80);
                n >>= 7;
            }
            m.push(n as u8);
            m.extend_from_slice(&deep);
            deep = m;
        }
        assert!(!all_zero(&deep, 0), "deeper than MAX_DEPTH is something");
        // A ConfigMap whose managedFields carry bytes nested 3,000 deep: refused, not a crash.
        let body = include_bytes!("../../../fuzz/regressions/k8s_body/deep-nesting-in-bytes");
        assert_eq!(decode(body).unwrap_err().code, 415);
    }

    #[test]
    fn a_configmap_and_a_secret_read_as_kubectl_create_sends_them() {
        let cm = ConfigMap {
            metadata: named("c"),
            data: [("a".to_string(), "b".to_string())].into(),
            binary_data: [("bin".to_string(), vec![0u8, 255])].into(),
            ..Default::default()
        };
        let v = decode(&envelope("v1", "ConfigMap", cm.encode_to_vec())).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}, "binaryData": {"bin": "AP8="}})
        );
        let s = Secret {
            metadata: named("s"),
            data: [("k".to_string(), b"v".to_vec())].into(),
            r#type: Some("Opaque".into()),
            ..Default::default()
        };
        let v = decode(&envelope("v1", "Secret", s.encode_to_vec())).unwrap();
        assert_eq!(v, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "dg=="}, "type": "Opaque"}));
    }

    #[test]
    fn a_deployment_reads_as_kubectl_create_deployment_sends_it() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "x".to_string())].into();
        let d = Deployment {
            metadata: Some(ObjectMeta { labels: labels.clone(), ..named("x").unwrap() }),
            spec: Some(k8s_pb::api::apps::v1::DeploymentSpec {
                replicas: Some(2),
                selector: Some(LabelSelector { match_labels: labels.clone(), ..Default::default() }),
                template: Some(PodTemplateSpec {
                    metadata: Some(ObjectMeta { labels, creation_timestamp: Some(Time::default()), ..Default::default() }),
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: Some("busybox".into()),
                            image: Some("busybox".into()),
                            command: vec!["sleep".into(), "60".into()],
                            ports: vec![ContainerPort { container_port: Some(8080), ..Default::default() }],
                            env: vec![EnvVar { name: Some("A".into()), value: Some("1".into()), value_from: None }],
                            resources: Some(Default::default()),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                }),
                strategy: Some(Default::default()),
                ..Default::default()
            }),
            status: Some(Default::default()),
        };
        let v = decode(&envelope("apps/v1", "Deployment", d.encode_to_vec())).unwrap();
        assert_eq!(v["metadata"], json!({"name": "x", "labels": {"app": "x"}}));
        assert_eq!(v["spec"]["replicas"], 2);
        assert_eq!(v["spec"]["selector"], json!({"matchLabels": {"app": "x"}}));
        assert_eq!(
            v["spec"]["template"]["spec"]["containers"][0],
            json!({"name": "busybox", "image": "busybox", "command": ["sleep", "60"], "ports": [{"containerPort": 8080}],
                   "env": [{"name": "A", "value": "1"}]})
        );
    }

    #[test]
    fn what_is_not_read_is_refused_not_dropped() {
        let mut d = Deployment { metadata: named("x"), ..Default::default() };
        d.spec = Some(k8s_pb::api::apps::v1::DeploymentSpec { paused: Some(true), ..Default::default() });
        let e = decode(&envelope("apps/v1", "Deployment", d.encode_to_vec())).unwrap_err();
        assert!(e.code == 415 && e.message.contains("paused"), "{e:?}");
        let c = ConfigMap { metadata: Some(ObjectMeta { finalizers: vec!["f".into()], ..named("c").unwrap() }), ..Default::default() };
        let e = decode(&envelope("v1", "ConfigMap", c.encode_to_vec())).unwrap_err();
        assert!(e.code == 415 && e.message.contains("metadata"), "{e:?}");
        let e = decode(&envelope("v1", "Pod", Vec::new())).unwrap_err();
        assert!(e.code == 415 && e.message.contains("Pod"), "{e:?}");
        assert_eq!(decode(b"{\"kind\":\"ConfigMap\"}").unwrap_err().code, 400, "no magic number");
        assert_eq!(decode(b"k8s\0\xff\xff\xff").unwrap_err().code, 400, "malformed");
        assert_eq!(decode(&envelope("v1", "ConfigMap", vec![0x0a, 0x7f])).unwrap_err().code, 400, "a truncated object");
    }
}
