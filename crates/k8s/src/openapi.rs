//! `/openapi/v3`: the index of group-versions and one OpenAPI 3.0 document per group-version
//! served, generated: the schemas from `k8s-openapi`'s types (`schemars`), with the
//! `x-kubernetes-group-version-kind` of each kind; the paths from the resources served here
//! ([`crate::RESOURCES`]), each operation with its verb and kind, the write operations with the
//! `dryRun`, `fieldManager` and `fieldValidation` parameters (kubectl validates on the server
//! when a kind's PATCH lists `fieldValidation`). PATCH bodies are listed as JSON Patch and JSON
//! merge patch only: without the strategic merge patch type here, kubectl computes its
//! strategic merge patches from its own built-in types, which carry Kubernetes' merge keys.

use crate::api::{RESOURCES, Resource};
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

/// The group-versions documented, as their paths (`api/v1`, `apis/apps/v1`).
pub fn group_versions() -> Vec<(&'static str, String)> {
    let mut out = vec![("", "api/v1".to_string())];
    out.extend(crate::api::GROUPS.iter().map(|g| (*g, format!("apis/{g}/v1"))));
    out
}

/// A stable hash of a document's text (the index's `hash`, which clients cache by).
pub fn hash(text: &str) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016X}")
}

/// The index at `/openapi/v3`, given each group-version's document hash.
pub fn index(hashes: &[(String, String)]) -> Value {
    let paths: Map<String, Value> =
        hashes.iter().map(|(gv, h)| (gv.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{gv}?hash={h}")}))).collect();
    json!({"paths": paths})
}

fn gvk(group: &str, kind: &str) -> Value {
    json!({"group": group, "version": "v1", "kind": kind})
}

fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn add<T: JsonSchema>(g: &mut schemars::SchemaGenerator, kinds: &mut Vec<(String, Value)>, group: &str, kind: &str) -> String {
    g.subschema_for::<T>();
    let name = T::schema_name().to_string();
    kinds.push((name.clone(), gvk(group, kind)));
    name
}

fn param(name: &str, at: &str, description: &str) -> Value {
    json!({"name": name, "in": at, "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn write_params() -> Vec<Value> {
    vec![
        param("dryRun", "query", "When present (All), the change is checked and answered, not made."),
        param("fieldManager", "query", "The name of the actor making the change."),
        param(
            "fieldValidation",
            "query",
            "What to do with unknown fields: Ignore, Warn (the default) or Strict (refuse them, kubectl's default).",
        ),
    ]
}

fn op(r: &Resource, action: &str, schema: &str, body: Option<&[&str]>, path_params: &[&str]) -> Value {
    let mut params: Vec<Value> = path_params
        .iter()
        .map(|p| {
            let mut v = param(p, "path", &format!("the {p}"));
            v["required"] = json!(true);
            v
        })
        .collect();
    if body.is_some() || action == "delete" {
        params.extend(write_params());
    }
    if matches!(action, "list" | "watchlist") {
        params.extend([
            param("labelSelector", "query", "A label selector."),
            param("fieldSelector", "query", "A field selector."),
            param("watch", "query", "Watch for changes."),
            param("resourceVersion", "query", "The version to watch from."),
        ]);
    }
    let kind_gvk = gvk(r.group, r.kind);
    let mut o = json!({
        "operationId": format!("{action}{}", r.kind),
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": reference(schema)}}},
                      "401": {"description": "Unauthorized"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": kind_gvk,
    });
    if let Some(types) = body {
        let content: Map<String, Value> = types.iter().map(|t| (t.to_string(), json!({"schema": reference(schema)}))).collect();
        o["requestBody"] = json!({"required": true, "content": content});
    }
    o
}

/// `GET .../pods/{name}/log`: a Pod's output as plain text, with the options Tandem honours.
fn log_path() -> Value {
    let param = |name: &str, ty: &str, what: &str| json!({"name": name, "in": "query", "description": what, "schema": {"type": ty}});
    let path = |name: &str| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}});
    json!({"get": {
        "operationId": "readCoreV1NamespacedPodLog",
        "description": "read the output of the specified Pod (its task's output and error files, as its node reads them)",
        "parameters": [
            path("namespace"),
            path("name"),
            param("container", "string", "The container (a Pod has one)."),
            param("follow", "boolean", "Send what is written until the task ends."),
            param("tailLines", "integer", "Only the last lines of each file."),
            param("limitBytes", "integer", "At most this many bytes."),
        ],
        "responses": {"200": {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}},
        "x-kubernetes-action": "get",
        "x-kubernetes-group-version-kind": {"group": "", "version": "v1", "kind": "Pod"},
    }})
}

/// The OpenAPI document of group `group` (`""`: the core group).
pub fn document(group: &str) -> Value {
    let mut g = SchemaSettings::openapi3().into_generator();
    let mut kinds = Vec::new();
    let mut names = std::collections::HashMap::new();
    for r in RESOURCES.iter().filter(|r| r.group == group) {
        use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch, core::v1 as core};
        let name = match r.kind {
            "Pod" => add::<core::Pod>(&mut g, &mut kinds, group, r.kind),
            "Event" => add::<core::Event>(&mut g, &mut kinds, group, r.kind),
            "Service" => add::<core::Service>(&mut g, &mut kinds, group, r.kind),
            "ConfigMap" => add::<core::ConfigMap>(&mut g, &mut kinds, group, r.kind),
            "Secret" => add::<core::Secret>(&mut g, &mut kinds, group, r.kind),
            "Node" => add::<core::Node>(&mut g, &mut kinds, group, r.kind),
            "Namespace" => add::<core::Namespace>(&mut g, &mut kinds, group, r.kind),
            "Deployment" => add::<apps::Deployment>(&mut g, &mut kinds, group, r.kind),
            "ReplicaSet" => add::<apps::ReplicaSet>(&mut g, &mut kinds, group, r.kind),
            "Job" => add::<batch::Job>(&mut g, &mut kinds, group, r.kind),
            other => unreachable!("no schema for {other}"),
        };
        names.insert(r.kind, name);
    }
    let scale = if group == "apps" {
        let n = add::<k8s_openapi::api::autoscaling::v1::Scale>(&mut g, &mut kinds, "autoscaling", "Scale");
        Some(n)
    } else {
        None
    };
    g.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>();
    let mut schemas = g.take_definitions(true);
    for (name, v) in kinds {
        if let Some(Value::Object(s)) = schemas.get_mut(&name) {
            s.insert("x-kubernetes-group-version-kind".into(), json!([v]));
        }
    }
    let base = if group.is_empty() { "/api/v1".to_string() } else { format!("/apis/{group}/v1") };
    let patch_types: &[&str] = &["application/json-patch+json", "application/merge-patch+json"];
    let mut paths = Map::new();
    for r in RESOURCES.iter().filter(|r| r.group == group) {
        let s = &names[r.kind];
        let writes = r.writable();
        if r.namespaced {
            let mut list = json!({"get": op(r, "list", s, None, &["namespace"])});
            if writes {
                list["post"] = op(r, "post", s, Some(&["application/json"]), &["namespace"]);
            }
            paths.insert(format!("{base}/namespaces/{{namespace}}/{}", r.plural), list);
            let mut item = json!({"get": op(r, "get", s, None, &["namespace", "name"])});
            if writes {
                item["put"] = op(r, "put", s, Some(&["application/json"]), &["namespace", "name"]);
                item["patch"] = op(r, "patch", s, Some(patch_types), &["namespace", "name"]);
                item["delete"] = op(r, "delete", s, None, &["namespace", "name"]);
            }
            paths.insert(format!("{base}/namespaces/{{namespace}}/{}/{{name}}", r.plural), item);
            paths.insert(format!("{base}/{}", r.plural), json!({"get": op(r, "list", s, None, &[])}));
            if let (true, Some(scale)) = (r.kind == "Deployment", &scale) {
                let mut o = json!({
                    "get": op(r, "get", scale, None, &["namespace", "name"]),
                    "put": op(r, "put", scale, Some(&["application/json"]), &["namespace", "name"]),
                    "patch": op(r, "patch", scale, Some(patch_types), &["namespace", "name"]),
                });
                for m in ["get", "put", "patch"] {
                    o[m]["x-kubernetes-group-version-kind"] = gvk("autoscaling", "Scale");
                }
                paths.insert(format!("{base}/namespaces/{{namespace}}/{}/{{name}}/scale", r.plural), o);
            }
            if r.kind == "Pod" {
                paths.insert(format!("{base}/namespaces/{{namespace}}/pods/{{name}}/log"), log_path());
            }
        } else {
            paths.insert(format!("{base}/{}", r.plural), json!({"get": op(r, "list", s, None, &[])}));
            paths.insert(format!("{base}/{}/{{name}}", r.plural), json!({"get": op(r, "get", s, None, &["name"])}));
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (Tandem)", "version": format!("v1.{}.0", crate::api::KUBE_MINOR)},
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"}}},
        "security": [{"BearerToken": []}],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_document_has_its_kinds_and_the_patch_parameters_kubectl_looks_for() {
        let d = document("apps");
        let dep = &d["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(dep["x-kubernetes-group-version-kind"][0]["kind"], "Deployment");
        assert!(dep["properties"]["spec"]["allOf"][0]["$ref"].as_str().unwrap().ends_with("DeploymentSpec"), "{dep}");
        let strategy = &d["components"]["schemas"]["io.k8s.api.apps.v1.DeploymentStrategy"];
        assert!(strategy["properties"]["rollingUpdate"].is_object());
        let log = &document("")["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/log"]["get"];
        assert!(log["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "tailLines"), "{log}");
        let patch = &d["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert!(patch["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Deployment");
        assert!(patch["requestBody"]["content"].get("application/strategic-merge-patch+json").is_none());
        // A kind that is only read has no write operations.
        let rs = &d["paths"]["/apis/apps/v1/namespaces/{namespace}/replicasets/{name}"];
        assert!(rs["get"].is_object() && rs["patch"].is_null());
        let core = document("");
        assert!(core["components"]["schemas"]["io.k8s.api.core.v1.Pod"].is_object());
        assert!(core["paths"]["/api/v1/nodes/{name}"]["get"].is_object());
        // Every reference resolves.
        let text = d.to_string();
        for r in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = &r[..r.find('"').unwrap()];
            assert!(d["components"]["schemas"][name].is_object(), "{name} is referenced, not defined");
        }
        let idx = index(&[("apis/apps/v1".into(), hash(&text))]);
        assert!(idx["paths"]["apis/apps/v1"]["serverRelativeURL"].as_str().unwrap().starts_with("/openapi/v3/apis/apps/v1?hash="));
    }
}
