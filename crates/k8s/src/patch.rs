//! The three patch dialects kubectl sends: JSON merge patch (RFC 7386: `scale`, CRDs), JSON
//! Patch (RFC 6902: `rollout undo`), both from the `json-patch` crate, and strategic merge
//! patch (`apply` and `rollout restart` on built-in kinds), which has no Rust crate and is
//! written here from its rules (kubernetes/community, "strategic-merge-patch.md"): maps merge,
//! `null` deletes, lists with a merge key merge item by item, other lists are replaced, and
//! the directives `$patch` (`replace`, `delete`, `merge`), `$retainKeys`,
//! `$setElementOrder/FIELD` and `$deleteFromPrimitiveList/FIELD`.

use crate::status::Failure;
use serde_json::{Map, Value};

/// The lists that merge by a key, by field name: the `x-kubernetes-patch-merge-key` of the
/// upstream API for the fields of the kinds served (core/v1 PodSpec, Container, ObjectMeta,
/// the workloads' conditions).
pub const MERGE_KEYS: &[(&str, &str)] = &[
    ("containers", "name"),
    ("initContainers", "name"),
    ("ephemeralContainers", "name"),
    ("env", "name"),
    ("ports", "containerPort"),
    ("volumeMounts", "mountPath"),
    ("volumeDevices", "devicePath"),
    ("volumes", "name"),
    ("imagePullSecrets", "name"),
    ("hostAliases", "ip"),
    ("resourceClaims", "name"),
    ("conditions", "type"),
    ("ownerReferences", "uid"),
    ("topologySpreadConstraints", "topologyKey"),
];

/// The primitive lists that merge (set union) rather than being replaced.
pub const MERGED_PRIMITIVES: &[&str] = &["finalizers"];

/// The patch types of `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/json-patch+json`.
    Json,
    /// `application/strategic-merge-patch+json`.
    Strategic,
}

impl Kind {
    /// The patch type a `Content-Type` names; 415 for others (server-side apply included).
    pub fn of(content_type: &str) -> Result<Kind, Failure> {
        match content_type.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Ok(Kind::Merge),
            "application/json-patch+json" => Ok(Kind::Json),
            "application/strategic-merge-patch+json" => Ok(Kind::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
                Err(Failure::from_code(415, "server-side apply is not served yet: use client-side `kubectl apply` (without --server-side)"))
            }
            other => Err(Failure::from_code(415, format!("the patch type {other:?} is not supported"))),
        }
    }
}

/// Applies `patch` of `kind` to `target`.
pub fn apply(kind: Kind, target: &Value, patch: &Value) -> Result<Value, Failure> {
    let mut out = target.clone();
    match kind {
        Kind::Merge => json_patch::merge(&mut out, patch),
        Kind::Json => {
            let p: json_patch::Patch =
                serde_json::from_value(patch.clone()).map_err(|e| Failure::bad_request(format!("malformed JSON Patch: {e}")))?;
            json_patch::patch(&mut out, &p).map_err(|e| Failure::from_code(422, format!("the JSON Patch does not apply: {e}")))?;
        }
        Kind::Strategic => {
            if !patch.is_object() {
                return Err(Failure::bad_request("a strategic merge patch is a JSON object"));
            }
            out = strategic(Some(target), patch)?.unwrap_or(Value::Object(Map::new()));
        }
    }
    Ok(out)
}

fn merge_key(field: &str) -> Option<&'static str> {
    MERGE_KEYS.iter().find(|(f, _)| *f == field).map(|(_, k)| *k)
}

fn bad(msg: impl Into<String>) -> Failure {
    Failure::bad_request(format!("malformed strategic merge patch: {}", msg.into()))
}

/// A map merged with a patch map (`None`: `$patch: delete`).
fn strategic(target: Option<&Value>, patch: &Value) -> Result<Option<Value>, Failure> {
    let Value::Object(p) = patch else { return Ok(Some(patch.clone())) };
    match p.get("$patch").and_then(Value::as_str) {
        Some("delete") => return Ok(None),
        Some("replace") => {
            let mut m = p.clone();
            m.remove("$patch");
            return Ok(Some(Value::Object(m)));
        }
        Some("merge") | None => {}
        Some(other) => return Err(bad(format!("unknown $patch {other:?}"))),
    }
    let mut out = match target {
        Some(Value::Object(t)) => t.clone(),
        _ => Map::new(),
    };
    let mut orders: Vec<(&str, &Value)> = Vec::new();
    for (k, v) in p {
        if k == "$patch" {
            continue;
        }
        if k == "$retainKeys" {
            continue;
        }
        if let Some(f) = k.strip_prefix("$setElementOrder/") {
            orders.push((f, v));
            continue;
        }
        if let Some(f) = k.strip_prefix("$deleteFromPrimitiveList/") {
            let drop = v.as_array().ok_or_else(|| bad(format!("{k} is not a list")))?;
            if let Some(Value::Array(items)) = out.get_mut(f) {
                items.retain(|x| !drop.contains(x));
            }
            continue;
        }
        if k.starts_with('$') {
            return Err(bad(format!("unknown directive {k:?}")));
        }
        match v {
            Value::Null => {
                out.remove(k);
            }
            Value::Object(_) => match strategic(out.get(k), v)? {
                Some(m) => {
                    out.insert(k.clone(), m);
                }
                None => {
                    out.remove(k);
                }
            },
            Value::Array(items) => {
                let merged = merge_list(k, out.get(k), items)?;
                out.insert(k.clone(), merged);
            }
            other => {
                out.insert(k.clone(), other.clone());
            }
        }
    }
    for (f, order) in orders {
        if let (Some(Value::Array(items)), Some(order)) = (out.get_mut(f), order.as_array()) {
            reorder(items, order, merge_key(f));
        }
    }
    if let Some(Value::Array(keep)) = p.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        out.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(Some(Value::Object(out)))
}

fn key_of<'a>(item: &'a Value, key: &str) -> Option<&'a Value> {
    item.get(key)
}

/// A list of field `field` merged with a patch list.
fn merge_list(field: &str, target: Option<&Value>, patch: &[Value]) -> Result<Value, Failure> {
    // A list replaced whole: `[{"$patch": "replace"}, ...]`.
    if patch.iter().any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace")) {
        return Ok(Value::Array(patch.iter().filter(|i| i.get("$patch").is_none()).cloned().collect()));
    }
    let current: Vec<Value> = target.and_then(Value::as_array).cloned().unwrap_or_default();
    if let Some(key) = merge_key(field) {
        let mut out = current;
        for item in patch {
            let Some(k) = key_of(item, key).cloned() else {
                return Err(bad(format!("an item of {field} has no {key}")));
            };
            let at = out.iter().position(|x| key_of(x, key) == Some(&k));
            match (item.get("$patch").and_then(Value::as_str), at) {
                (Some("delete"), Some(i)) => {
                    out.remove(i);
                }
                (Some("delete"), None) => {}
                (_, Some(i)) => match strategic(Some(&out[i]), item)? {
                    Some(m) => out[i] = m,
                    None => {
                        out.remove(i);
                    }
                },
                (_, None) => {
                    if let Some(m) = strategic(None, item)? {
                        out.push(m);
                    }
                }
            }
        }
        return Ok(Value::Array(out));
    }
    if MERGED_PRIMITIVES.contains(&field) {
        let mut out = current;
        for i in patch {
            if !out.contains(i) {
                out.push(i.clone());
            }
        }
        return Ok(Value::Array(out));
    }
    Ok(Value::Array(patch.to_vec()))
}

/// Puts `items` in the order of `order` (`$setElementOrder`); items it does not name keep
/// their place after those it does.
fn reorder(items: &mut Vec<Value>, order: &[Value], key: Option<&str>) {
    let pos = |x: &Value| {
        order.iter().position(|o| match key {
            Some(k) => key_of(o, k).is_some() && key_of(o, k) == key_of(x, k),
            None => o == x,
        })
    };
    let mut keyed: Vec<(usize, Value)> = Vec::new();
    let mut rest = Vec::new();
    for x in items.drain(..) {
        match pos(&x) {
            Some(p) => keyed.push((p, x)),
            None => rest.push(x),
        }
    }
    keyed.sort_by_key(|(p, _)| *p);
    items.extend(keyed.into_iter().map(|(_, x)| x));
    items.extend(rest);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn smp(t: Value, p: Value) -> Value {
        apply(Kind::Strategic, &t, &p).unwrap()
    }

    #[test]
    fn kubectl_apply_s_env_change_merges_by_name() {
        let live = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "web", "image": "a", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
            {"name": "side", "image": "s"}]}}}});
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "web"}, {"name": "side"}],
            "containers": [{"name": "web", "image": "b", "$setElementOrder/env": [{"name": "A"}, {"name": "B"}],
                "env": [{"name": "B", "value": "3"}]}]}}}});
        let out = smp(live, patch);
        let c = &out["spec"]["template"]["spec"]["containers"];
        assert_eq!(c[0]["image"], "b");
        assert_eq!(c[0]["env"], json!([{"name": "A", "value": "1"}, {"name": "B", "value": "3"}]));
        assert_eq!(c[1], json!({"name": "side", "image": "s"}));
    }

    #[test]
    fn directives_delete_replace_retain_and_order() {
        let t = json!({"a": {"x": 1, "y": 2}, "env": [{"name": "A"}, {"name": "B"}], "finalizers": ["f1"], "args": ["1", "2"],
            "keep": {"p": 1, "q": 2}});
        let out = smp(
            t.clone(),
            json!({"a": {"$patch": "replace", "z": 3}, "env": [{"name": "A", "$patch": "delete"}, {"name": "C"}],
                "finalizers": ["f2"], "args": ["3"], "keep": {"$retainKeys": ["p"], "p": 5}, "$deleteFromPrimitiveList/finalizers": ["f1"]}),
        );
        assert_eq!(out["a"], json!({"z": 3}));
        assert_eq!(out["env"], json!([{"name": "B"}, {"name": "C"}]));
        assert_eq!(out["args"], json!(["3"]), "a list without a merge key is replaced");
        assert_eq!(out["keep"], json!({"p": 5}));
        assert_eq!(out["finalizers"], json!(["f2"]));
        let out = smp(t.clone(), json!({"a": null, "env": [{"$patch": "replace"}, {"name": "Z"}]}));
        assert!(out.get("a").is_none());
        assert_eq!(out["env"], json!([{"name": "Z"}]));
        let out = smp(t, json!({"$setElementOrder/env": [{"name": "B"}, {"name": "A"}]}));
        assert_eq!(out["env"], json!([{"name": "B"}, {"name": "A"}]));
    }

    #[test]
    fn malformed_patches_are_400s_and_other_types_415s() {
        let t = json!({"env": []});
        for p in [json!({"env": [{"value": "no name"}]}), json!({"$bogus": 1}), json!({"a": {"$patch": "sideways"}}), json!([1])] {
            assert_eq!(apply(Kind::Strategic, &t, &p).unwrap_err().code, 400, "{p}");
        }
        assert_eq!(apply(Kind::Json, &t, &json!({"op": "add"})).unwrap_err().code, 400);
        assert_eq!(apply(Kind::Json, &t, &json!([{"op": "remove", "path": "/nope"}])).unwrap_err().code, 422);
        assert_eq!(Kind::of("application/apply-patch+yaml").unwrap_err().code, 415);
        assert_eq!(Kind::of("text/plain").unwrap_err().code, 415);
        assert_eq!(Kind::of("application/merge-patch+json; charset=utf-8").unwrap(), Kind::Merge);
        let out = apply(Kind::Json, &json!({"spec": {"replicas": 1}}), &json!([{"op": "replace", "path": "/spec/replicas", "value": 3}]));
        assert_eq!(out.unwrap()["spec"]["replicas"], 3);
        assert_eq!(apply(Kind::Merge, &json!({"a": 1, "b": 2}), &json!({"a": null, "c": 3})).unwrap(), json!({"b": 2, "c": 3}));
    }

    fn env() -> impl Strategy<Value = Vec<(u8, u8)>> {
        prop::collection::vec((0u8..6, 0u8..4), 0..6)
    }

    fn env_json(v: &[(u8, u8)]) -> Value {
        let mut seen = std::collections::BTreeSet::new();
        Value::Array(
            v.iter().filter(|(n, _)| seen.insert(*n)).map(|(n, x)| json!({"name": format!("E{n}"), "value": x.to_string()})).collect(),
        )
    }

    proptest! {
        /// An empty patch changes nothing; a keyed patch touches only the items it names, and
        /// every one of them ends with the patch's value.
        #[test]
        fn keyed_merges_touch_only_what_they_name(target in env(), patch in env()) {
            let t = json!({"env": env_json(&target)});
            prop_assert_eq!(smp(t.clone(), json!({})), t.clone());
            let p = env_json(&patch);
            let out = smp(t.clone(), json!({"env": p.clone()}));
            let items = out["env"].as_array().unwrap();
            for item in p.as_array().unwrap() {
                prop_assert!(items.contains(item));
            }
            for old in t["env"].as_array().unwrap() {
                let named = p.as_array().unwrap().iter().any(|i| i["name"] == old["name"]);
                prop_assert_eq!(items.contains(old) || named, true);
            }
            let names: std::collections::BTreeSet<String> = items.iter().map(|i| i["name"].to_string()).collect();
            prop_assert_eq!(names.len(), items.len());
        }
    }
}
