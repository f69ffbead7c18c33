//! `batch/v1` Jobs written through the Kubernetes API: checked as the API server checks them
//! (unknown fields under `fieldValidation`, a 422 naming any field Tandem does not implement)
//! and turned into a batch job, an array where it has several completions. What is stored
//! ([`WrittenJob::stored`]): the metadata's labels and annotations and the spec, as written,
//! with the job's id; the Job's status and its Pods are derived from the job's records, as an
//! `sbatch` job's are.
//!
//! The mapping: `completions` C is an array `0-(C-1)` (one job where C is 1 and the Job is not
//! `Indexed`), `parallelism` P its `%P`; `Indexed` Pods get `JOB_COMPLETION_INDEX`, the task's
//! index; `activeDeadlineSeconds` is each Pod's time limit; `suspend` holds the job;
//! `backoffLimit` failed runs are run again (the array's failures together) before the Job
//! fails; `ttlSecondsAfterFinished` deletes it that long after its job ended (the
//! controller's tick); the container's command, image, environment and resources as a
//! Deployment's are.

use crate::DEFAULT_BACKOFF_LIMIT;
use crate::status::Failure;
use crate::write::{
    EnvSources, TEMPLATE, Validation, check_namespace, check_unknown, dns_label, invalid_kind, leaves, shown_matches, supported_in,
    template_container, unknown_fields,
};
use serde_json::{Map, Value, json};

/// A Job accepted for writing.
#[derive(Debug, Clone)]
pub struct WrittenJob {
    /// Its name.
    pub name: String,
    /// Its one container, as a service spec's fields write it (`command`, `args`, `env`,
    /// `resources` with `cpus`, `memory` and `gpus`, `image`, `workdir`, `qos`, `partition`).
    pub pod: Map<String, Value>,
    /// Pods that must succeed (`completions`, 1 by default).
    pub completions: u32,
    /// Most Pods running at once (`parallelism`, 1 by default).
    pub parallelism: u32,
    /// `completionMode: Indexed`: each Pod has its index (`JOB_COMPLETION_INDEX`).
    pub indexed: bool,
    /// `activeDeadlineSeconds`: each Pod's time limit.
    pub deadline: Option<i64>,
    /// `suspend`: held until it is set false.
    pub suspend: bool,
    /// `backoffLimit`: failed runs run again before the Job fails.
    pub backoff_limit: u32,
    /// What is kept of it: `metadata` (name, namespace, labels, annotations) and `spec`.
    pub stored: Value,
    /// Warnings for the client (`Warning` headers).
    pub warnings: Vec<String>,
}

/// The paths a Job may carry beyond [`TEMPLATE`] (`*` ends a path under which anything goes);
/// any other field present is refused with a 422 naming it.
const SUPPORTED: &[&str] = &[
    "spec.parallelism",
    "spec.completions",
    "spec.completionMode",
    "spec.backoffLimit",
    "spec.activeDeadlineSeconds",
    "spec.suspend",
    "spec.ttlSecondsAfterFinished",
    "spec.manualSelector",
];

fn invalid(name: &str, field: &str, why: &str) -> Failure {
    invalid_kind("Job.batch", name, field, why)
}

/// A Job body read as Kubernetes' type, once its `apiVersion` and `kind` are the Job's (or
/// absent).
fn typed_job(obj: &Value) -> Result<k8s_openapi::api::batch::v1::Job, Failure> {
    match (obj["apiVersion"].as_str(), obj["kind"].as_str()) {
        (Some("batch/v1") | None, Some("Job") | None) => {}
        (v, k) => {
            return Err(Failure::bad_request(format!(
                "this is the Job resource of batch/v1; the body is {} {}",
                v.unwrap_or("(no apiVersion)"),
                k.unwrap_or("(no kind)")
            )));
        }
    }
    serde_json::from_value(obj.clone()).map_err(|e| Failure::bad_request(format!("malformed Job: {e}")))
}

/// A whole number of `spec`'s field `k`, at least `min`, if given.
fn count(name: &str, spec: &Value, k: &str, min: i64) -> Result<Option<u32>, Failure> {
    match &spec[k] {
        Value::Null => Ok(None),
        v => match v.as_i64() {
            Some(n) if n >= min && n <= i64::from(i32::MAX) => Ok(Some(n as u32)),
            _ => Err(invalid(name, &format!("spec.{k}"), &format!("Invalid value: {v}: must be a whole number, at least {min}"))),
        },
    }
}

/// Checks a Job written to `namespace` and turns it into what its batch job is made of; the
/// values its environment takes from ConfigMaps and Secrets come from `sources`.
pub fn write(obj: &Value, namespace: &str, validation: Validation, sources: EnvSources) -> Result<WrittenJob, Failure> {
    if !obj.is_object() {
        return Err(Failure::bad_request("the body is not a JSON object"));
    }
    let typed = typed_job(obj)?;
    let name = typed.metadata.name.clone().unwrap_or_default();
    let unknown = unknown_fields(obj, &serde_json::to_value(&typed).expect("a Job serializes"));
    let warnings = check_unknown(&unknown, validation)?;
    if name.is_empty() {
        return Err(invalid("", "metadata.name", "Required value: name is required"));
    }
    if !dns_label(&name) {
        return Err(invalid(
            &name,
            "metadata.name",
            &format!(
                "Invalid value: {name:?}: a Job's name is a DNS label: 1 to 63 lower-case letters, digits and '-', not starting or ending with '-'"
            ),
        ));
    }
    if crate::objects::job_id(&name).is_some() {
        return Err(invalid(&name, "metadata.name", &format!("Invalid value: {name:?}: job-ID names the Jobs of sbatch's jobs")));
    }
    check_namespace(typed.metadata.namespace.as_deref(), namespace, &|field, why| invalid(&name, field, why))?;
    let mut paths = Vec::new();
    leaves(obj, String::new(), String::new(), &mut paths);
    if let Some((_, shown)) = paths
        .iter()
        .find(|(p, _)| !(unknown.iter().any(|u| shown_matches(u, p)) || supported_in(TEMPLATE, p) || supported_in(SUPPORTED, p)))
    {
        return Err(invalid(&name, shown, "Forbidden: not supported by Tandem (docs/kubernetes.md)"));
    }
    let spec = &obj["spec"];
    let tspec = &spec["template"]["spec"];
    if spec["manualSelector"].as_bool() == Some(true) {
        return Err(invalid(&name, "spec.manualSelector", "Forbidden: Tandem makes a Job's selector"));
    }
    match tspec["restartPolicy"].as_str() {
        Some("Never" | "OnFailure") => {}
        None => return Err(invalid(&name, "spec.template.spec.restartPolicy", "Required value: valid values: \"OnFailure\", \"Never\"")),
        Some(p) => {
            return Err(invalid(
                &name,
                "spec.template.spec.restartPolicy",
                &format!("Unsupported value: {p:?}: supported values: \"OnFailure\", \"Never\""),
            ));
        }
    }
    if tspec["securityContext"].as_object().is_some_and(|m| !m.is_empty()) {
        return Err(invalid(&name, "spec.template.spec.securityContext", "Forbidden: a Job's Pods run as the user who wrote it"));
    }
    let indexed = match spec["completionMode"].as_str() {
        None | Some("NonIndexed") => false,
        Some("Indexed") => true,
        Some(m) => {
            return Err(invalid(
                &name,
                "spec.completionMode",
                &format!("Unsupported value: {m:?}: supported values: \"NonIndexed\", \"Indexed\""),
            ));
        }
    };
    let parallelism = count(&name, spec, "parallelism", 1)?;
    let completions = count(&name, spec, "completions", 1)?;
    let completions = match (completions, parallelism) {
        (Some(c), _) => c,
        (None, _) if indexed => return Err(invalid(&name, "spec.completions", "Required value: when completionMode is Indexed")),
        (None, Some(p)) if p > 1 => {
            return Err(invalid(
                &name,
                "spec.completions",
                "Required value: Tandem runs a fixed number of completions (a work queue, parallelism without completions, is not supported)",
            ));
        }
        (None, _) => 1,
    };
    let backoff_limit = count(&name, spec, "backoffLimit", 0)?.unwrap_or(DEFAULT_BACKOFF_LIMIT);
    let deadline = count(&name, spec, "activeDeadlineSeconds", 1)?.map(i64::from);
    count(&name, spec, "ttlSecondsAfterFinished", 0)?;
    let suspend = match &spec["suspend"] {
        Value::Null => false,
        Value::Bool(b) => *b,
        v => return Err(invalid(&name, "spec.suspend", &format!("Invalid value: {v}: true or false"))),
    };
    let pod = template_container(tspec, sources, &|field, why| invalid(&name, field, why))?;
    let stored = json!({
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": obj["metadata"]["labels"],
            "annotations": obj["metadata"]["annotations"],
        },
        "spec": spec_as_written(spec),
    });
    Ok(WrittenJob {
        name,
        pod,
        completions,
        parallelism: parallelism.unwrap_or(1),
        indexed,
        deadline,
        suspend,
        backoff_limit,
        stored,
        warnings,
    })
}

/// A Job's spec as kept: what its writer gave, without the selector and template labels the
/// Job shows (derived from its uid).
fn spec_as_written(spec: &Value) -> Value {
    let mut s = spec.clone();
    if let Some(m) = s.as_object_mut() {
        m.remove("selector");
        m.remove("manualSelector");
    }
    if let Some(l) = s["template"]["metadata"]["labels"].as_object_mut() {
        l.retain(|k, _| !DERIVED_LABELS.contains(&k.as_str()));
        if l.is_empty() {
            s["template"]["metadata"].as_object_mut().map(|m| m.remove("labels"));
        }
    }
    s
}

/// The labels a Job's template and Pods carry that Kubernetes derives.
pub const DERIVED_LABELS: &[&str] = &["batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name", "controller-uid", "job-name"];

/// What a write to an existing Job changes: Kubernetes lets a Job's `suspend` and
/// `ttlSecondsAfterFinished` change, and its labels and annotations; the rest of its spec is
/// immutable.
#[derive(Debug, Clone, PartialEq)]
pub struct JobChange {
    /// `spec.suspend` as now written.
    pub suspend: bool,
    /// The stored object as it becomes.
    pub stored: Value,
}

/// Checks `new`, a replace or patch of the Job `live` (as it reads) whose stored object is
/// `stored`.
pub fn change(name: &str, live: &Value, new: &Value, stored: &Value, validation: Validation) -> Result<(JobChange, Vec<String>), Failure> {
    if !new.is_object() {
        return Err(Failure::bad_request("the body is not a JSON object"));
    }
    let typed = typed_job(new)?;
    let unknown = unknown_fields(new, &serde_json::to_value(&typed).expect("a Job serializes"));
    let warnings = check_unknown(&unknown, validation)?;
    let suspend = match &new["spec"]["suspend"] {
        Value::Null => false,
        Value::Bool(b) => *b,
        v => return Err(invalid(name, "spec.suspend", &format!("Invalid value: {v}: true or false"))),
    };
    if let Some(t) = new["spec"].get("ttlSecondsAfterFinished").filter(|t| !t.is_null())
        && t.as_i64().is_none_or(|t| !(0..=i64::from(i32::MAX)).contains(&t))
    {
        return Err(invalid(name, "spec.ttlSecondsAfterFinished", &format!("Invalid value: {t}: must be a whole number, at least 0")));
    }
    // Everything but `suspend` and `ttlSecondsAfterFinished` as it was.
    let without = |s: &Value| {
        let mut s = s.clone();
        if let Some(m) = s.as_object_mut() {
            m.remove("suspend");
            m.remove("ttlSecondsAfterFinished");
        }
        s
    };
    let (was, now) = (without(&live["spec"]), without(&new["spec"]));
    if was != now {
        let field = ["parallelism", "completions", "completionMode", "backoffLimit", "activeDeadlineSeconds", "selector", "template"]
            .into_iter()
            .find(|k| was[*k] != now[*k])
            .unwrap_or("");
        let field = if field.is_empty() { "spec".to_string() } else { format!("spec.{field}") };
        return Err(invalid(
            name,
            &field,
            "Invalid value: field is immutable (a Job's suspend, ttlSecondsAfterFinished, labels and annotations change)",
        ));
    }
    let mut stored = stored.clone();
    stored["spec"]["suspend"] = json!(suspend);
    match new["spec"].get("ttlSecondsAfterFinished").filter(|t| !t.is_null()) {
        Some(t) => stored["spec"]["ttlSecondsAfterFinished"] = t.clone(),
        None => {
            stored["spec"].as_object_mut().map(|m| m.remove("ttlSecondsAfterFinished"));
        }
    }
    for k in ["labels", "annotations"] {
        stored["metadata"][k] = new["metadata"][k].clone();
    }
    if let Some(l) = stored["metadata"]["labels"].as_object_mut() {
        l.retain(|k, _| !k.starts_with(&format!("{}/", crate::PREFIX)));
    }
    if let Some(a) = stored["metadata"]["annotations"].as_object_mut() {
        a.retain(|k, _| !k.starts_with(&format!("{}/", crate::PREFIX)) && k != crate::objects::UID_ANNOTATION);
    }
    Ok((JobChange { suspend, stored }, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi", "labels": {"team": "a"}},
            "spec": {"completions": 4, "parallelism": 2, "completionMode": "Indexed", "backoffLimit": 1,
                "activeDeadlineSeconds": 90,
                "template": {"metadata": {"labels": {"app": "pi"}}, "spec": {"restartPolicy": "Never",
                    "containers": [{"name": "pi", "image": "busybox", "command": ["sh", "-c", "echo $JOB_COMPLETION_INDEX"],
                        "env": [{"name": "A", "value": "1"}], "resources": {"limits": {"cpu": "2", "memory": "64Mi"}}}]}}}})
    }

    fn none(_: &str, _: &str) -> Option<Value> {
        None
    }

    #[test]
    fn a_job_becomes_an_array_with_its_limits() {
        let w = write(&job(), "default", Validation::Strict, &none).unwrap();
        assert_eq!((w.completions, w.parallelism, w.indexed, w.deadline, w.suspend, w.backoff_limit), (4, 2, true, Some(90), false, 1));
        assert_eq!(w.pod["command"], json!(["sh", "-c", "echo $JOB_COMPLETION_INDEX"]));
        assert_eq!(w.pod["image"], "busybox");
        assert_eq!(w.pod["env"]["A"], "1");
        assert_eq!(w.pod["resources"]["cpus"], 2.0);
        assert_eq!(w.stored["spec"]["template"]["metadata"]["labels"]["app"], "pi");
        // kubectl create job's: no completions, no parallelism.
        let mut j = job();
        for k in ["completions", "parallelism", "completionMode", "backoffLimit", "activeDeadlineSeconds"] {
            j["spec"].as_object_mut().unwrap().remove(k);
        }
        let w = write(&j, "default", Validation::Strict, &none).unwrap();
        assert_eq!((w.completions, w.parallelism, w.indexed, w.deadline, w.backoff_limit), (1, 1, false, None, DEFAULT_BACKOFF_LIMIT));
    }

    #[test]
    fn what_a_job_cannot_be_is_a_422_naming_the_field() {
        type Edit = Box<dyn Fn(&mut Value)>;
        let cases: Vec<(Edit, &str)> = vec![
            (Box::new(|j| j["spec"]["template"]["spec"]["restartPolicy"] = json!("Always")), "spec.template.spec.restartPolicy"),
            (
                Box::new(|j| j["spec"]["template"]["spec"].as_object_mut().unwrap().remove("restartPolicy").map(|_| ()).unwrap()),
                "spec.template.spec.restartPolicy",
            ),
            (Box::new(|j| j["spec"]["completions"] = json!(0)), "spec.completions"),
            (Box::new(|j| j["spec"]["parallelism"] = json!(-1)), "spec.parallelism"),
            (Box::new(|j| j["spec"]["backoffLimit"] = json!(-1)), "spec.backoffLimit"),
            (Box::new(|j| j["spec"]["completionMode"] = json!("Sometimes")), "spec.completionMode"),
            (Box::new(|j| j["spec"].as_object_mut().unwrap().remove("completions").map(|_| ()).unwrap()), "spec.completions"),
            (Box::new(|j| j["spec"]["ttlSecondsAfterFinished"] = json!(-5)), "spec.ttlSecondsAfterFinished"),
            (
                Box::new(|j| {
                    j["spec"]["podFailurePolicy"] =
                        json!({"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [1]}}]})
                }),
                "spec.podFailurePolicy.rules[0].action",
            ),
            (Box::new(|j| j["spec"]["selector"] = json!({"matchLabels": {"app": "pi"}})), "spec.selector.matchLabels.app"),
            (Box::new(|j| j["spec"]["manualSelector"] = json!(true)), "spec.manualSelector"),
            (
                Box::new(|j| j["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] = json!({"tcpSocket": {"port": 1}})),
                "spec.template.spec.containers[0].readinessProbe.tcpSocket.port",
            ),
            (
                Box::new(|j| {
                    j["spec"]["template"]["spec"]["containers"][0].as_object_mut().unwrap().remove("command").map(|_| ()).unwrap()
                }),
                "spec.template.spec.containers[0].command",
            ),
            (Box::new(|j| j["metadata"]["name"] = json!("job-12")), "metadata.name"),
            (Box::new(|j| j["metadata"]["name"] = json!("Pi")), "metadata.name"),
        ];
        for (edit, field) in cases {
            let mut j = job();
            edit(&mut j);
            let e = write(&j, "default", Validation::Strict, &none).unwrap_err();
            assert_eq!(e.code, 422, "{field}: {e:?}");
            assert!(e.causes.iter().any(|c| c.2 == field), "{field}: {e:?}");
            assert!(e.message.starts_with("Job.batch \""), "{e:?}");
        }
        let e = write(&job(), "Not_A_Namespace", Validation::Strict, &none).unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(write(&job(), "team-a", Validation::Strict, &none).unwrap().name, "pi");
        let mut j = job();
        j["spec"]["bogus"] = json!(1);
        assert_eq!(write(&j, "default", Validation::Strict, &none).unwrap_err().code, 400);
        assert_eq!(write(&j, "default", Validation::Warn, &none).unwrap().warnings, vec!["unknown field \"spec.bogus\"".to_string()]);
        assert_eq!(write(&json!({"kind": "Deployment"}), "default", Validation::Strict, &none).unwrap_err().code, 400);
        assert_eq!(write(&json!([1]), "default", Validation::Strict, &none).unwrap_err().code, 400);
    }

    #[test]
    fn a_job_changes_its_suspend_and_labels_only() {
        let w = write(&job(), "default", Validation::Strict, &none).unwrap();
        let live = job();
        let mut new = live.clone();
        new["spec"]["suspend"] = json!(true);
        new["metadata"]["labels"]["more"] = json!("x");
        let (c, _) = change("pi", &live, &new, &w.stored, Validation::Strict).unwrap();
        assert!(c.suspend);
        assert_eq!(c.stored["metadata"]["labels"]["more"], "x");
        assert_eq!(c.stored["spec"]["suspend"], true);
        for (k, v) in [("parallelism", json!(3)), ("completions", json!(9)), ("template", json!({}))] {
            let mut new = live.clone();
            new["spec"][k] = v;
            let e = change("pi", &live, &new, &w.stored, Validation::Strict).unwrap_err();
            assert_eq!(e.code, 422);
            assert_eq!(e.causes[0].2, format!("spec.{k}"), "{e:?}");
        }
    }
}
