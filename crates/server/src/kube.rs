//! The Kubernetes API on the controller's TLS port (README, "For Kubernetes users"): discovery,
//! `/version`, and reads of Nodes, Namespaces, Pods, Deployments, ReplicaSets and Jobs, each a
//! view of the controller's own state built by the pure `k8s` crate. Users are who their bearer
//! token says (`tandem token --kubeconfig`), and see what `squeue` would show them. Errors are
//! `metav1.Status` bodies.

use axum::Json;
use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use k8s::api::Route;
use k8s::objects::{ServiceView, Task};
use k8s::select::{Fields, Labels};
use k8s::{Failure, Target};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};

use crate::app::*;

pub(crate) fn routes(r: Router<App>) -> Router<App> {
    r.route("/version", any(handle))
        .route("/api", any(handle))
        .route("/api/{*rest}", any(handle))
        .route("/apis", any(handle))
        .route("/apis/{*rest}", any(handle))
}

fn failure(f: Failure) -> Response {
    (StatusCode::from_u16(f.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), Json(f.body())).into_response()
}

async fn handle(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    q: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return failure(Failure::bad_request(format!("malformed query: {}", e.body_text()))),
    };
    match serve(&app, &peer, &method, uri.path(), &headers, &q).await {
        Ok(r) => r,
        Err(f) => failure(f),
    }
}

/// The caller's identity, as a Kubernetes server refuses one.
fn viewer(app: &App, peer: &Peer, headers: &HeaderMap) -> Result<Viewer, Failure> {
    let uid = match (peer.uid, bearer(headers)) {
        (Some(uid), _) => uid,
        (None, Some(t)) => app.tokens.verify(t, now()).ok_or_else(|| {
            Failure::unauthorized("invalid or expired token (a kubeconfig from `tandem token --kubeconfig` gets a new one by itself)")
        })?,
        (None, None) => {
            return Err(Failure::unauthorized(
                "this request needs a user identity: a bearer token (`tandem token --kubeconfig` writes a kubeconfig that gets one)",
            ));
        }
    };
    Ok(viewer_for(app, uid))
}

async fn serve(app: &App, peer: &Peer, method: &Method, path: &str, headers: &HeaderMap, q: &HashMap<String, String>) -> Result<Response, Failure> {
    let route = k8s::api::route(path)?;
    if route == Route::Version {
        return Ok(Json(k8s::api::version(env!("CARGO_PKG_VERSION"))).into_response());
    }
    let v = viewer(app, peer, headers)?;
    if method != Method::GET {
        return Err(Failure::method_not_allowed(format!(
            "{method} {path}: Tandem's Kubernetes API serves reads for now (get, list); use `tandem service`, `sbatch` or `scancel` to change things"
        )));
    }
    Ok(match route {
        Route::Version => unreachable!("answered above"),
        Route::CoreVersions => Json(k8s::api::core_versions()).into_response(),
        Route::Groups => Json(k8s::api::groups()).into_response(),
        Route::Group(g) => Json(k8s::api::group(g)).into_response(),
        Route::Resources { group } => Json(k8s::api::resources(group)).into_response(),
        Route::Objects(t) => objects(app, &v, &t, headers, q).await?,
    })
}

fn flag(q: &HashMap<String, String>, k: &str) -> bool {
    q.get(k).is_some_and(|v| v == "true" || v == "1")
}

/// Every object of `kind` the viewer may see, as JSON, and the journal position they reflect.
fn gather(app: &App, v: &Viewer, kind: &str, now: i64) -> (Vec<Value>, u64) {
    let to = |x: Result<Value, serde_json::Error>| x.expect("Kubernetes objects serialize");
    let g = app.lock();
    let ctl = &g.ctl;
    let t = crate::app::now();
    let parts: Vec<String> = ctl.settings().cluster.partitions.iter().map(|p| p.name.clone()).collect();
    let nodes = crate::jobs::node_infos(&ctl.node_reservations(t), ctl.nodes(), &parts);
    let addrs: BTreeMap<String, String> = nodes.iter().map(|n| (n.name.clone(), n.addr.clone())).collect();
    let mut out = Vec::new();
    match kind {
        "Node" => out.extend(nodes.iter().map(|n| to(serde_json::to_value(k8s::objects::node(n))))),
        "Namespace" => out.push(to(serde_json::to_value(k8s::objects::namespace(k8s::DEFAULT_NAMESPACE, None)))),
        _ => {}
    }
    if matches!(kind, "Pod" | "Deployment" | "ReplicaSet") {
        for s in ctl.services().filter(|s| v.sees(s.uid)) {
            let info = crate::services::service_info(ctl, s, v);
            let part = crate::jobs::default_partition(ctl);
            let jobs = info.replicas.iter().filter_map(|r| ctl.job(r.job)).map(|j| crate::jobs::job_info(&j, v, &part)).collect();
            let history =
                s.history.iter().map(|(n, sp)| (*n, if v.sees_details(s.uid) { sp.clone() } else { crate::services::hide(sp) })).collect();
            let view = ServiceView { info, created: s.created, jobs, history };
            match kind {
                "Deployment" => out.push(to(serde_json::to_value(k8s::objects::deployment(&view)))),
                "ReplicaSet" => out.extend(k8s::objects::replica_sets(&view).into_iter().map(|x| to(serde_json::to_value(x)))),
                _ => out.extend(k8s::objects::service_pods(&view, &addrs, now).into_iter().map(|x| to(serde_json::to_value(x)))),
            }
        }
    }
    let seq = app.journal.last();
    drop(g);
    if matches!(kind, "Pod" | "Job") {
        let tasks = batch_tasks(app, v);
        for group in k8s::objects::group_jobs(&tasks) {
            if kind == "Job" {
                out.push(to(serde_json::to_value(k8s::objects::job(&group))));
            } else {
                out.extend(k8s::objects::job_pods(&group, &addrs).into_iter().map(|x| to(serde_json::to_value(x))));
            }
        }
    }
    (out, seq.max(app.journal.last()))
}

/// The batch jobs the viewer may see (not service replicas), every array task on its own, in
/// pieces of `LIST_CHUNK` under the lock as `squeue`'s listing takes them.
fn batch_tasks(app: &App, v: &Viewer) -> Vec<Task> {
    let mut out = Vec::new();
    let mut from = 0u64;
    loop {
        let g = app.lock();
        let part = crate::jobs::default_partition(&g.ctl);
        let mut next = None;
        for (n, j) in g.ctl.jobs_from_where(from, false, |t| v.sees(t.spec.uid)).first_of_tails(false).enumerate() {
            let j = &*j;
            if n == crate::jobs::LIST_CHUNK {
                next = Some(j.req.id.0);
                break;
            }
            if j.replica.is_some() || !v.sees(j.spec.uid) {
                continue;
            }
            let image = j.spec.container.as_ref().map(|c| c.image.clone());
            out.extend(crate::jobs::job_rows(j, v, &part).into_iter().map(|info| Task { info, image: image.clone() }));
        }
        drop(g);
        match next {
            Some(id) => from = id,
            None => return out,
        }
    }
}

async fn objects(app: &App, v: &Viewer, t: &Target, headers: &HeaderMap, q: &HashMap<String, String>) -> Result<Response, Failure> {
    let kind = t.resource.kind;
    if flag(q, "watch") || flag(q, "sendInitialEvents") {
        return Err(Failure::method_not_allowed(
            "watch is not served yet by Tandem's Kubernetes API: list again, or use `squeue -i` / `tandem service show`",
        ));
    }
    let labels = Labels::parse(q.get("labelSelector").map_or("", String::as_str))?;
    let fields = Fields::parse(q.get("fieldSelector").map_or("", String::as_str), kind)?;
    let include = k8s::table::Include::parse(q.get("includeObject").map(String::as_str))?;
    let now = now();
    let (mut objs, seq) = gather(app, v, kind, now);
    app.settled(seq).await.map_err(|_| Failure::from_code(503, "the controller cannot save its state; try again"))?;
    let rv = seq.to_string();
    let ns_ok = |o: &Value| t.namespace.as_deref().is_none_or(|ns| o["metadata"]["namespace"] == ns);
    objs.retain(|o| ns_ok(o) && labels.matches(o) && fields.matches(o));
    // In the order of their keys, as an etcd-backed server lists them.
    let key = |o: &Value| (o["metadata"]["namespace"].as_str().unwrap_or("").to_string(), o["metadata"]["name"].as_str().unwrap_or("").to_string());
    objs.sort_by_cached_key(key);
    for o in &mut objs {
        o["metadata"]["resourceVersion"] = json!(rv);
    }
    let accept = headers.get("accept").and_then(|h| h.to_str().ok()).unwrap_or("");
    if let Some(name) = &t.name {
        let Some(obj) = objs.into_iter().find(|o| o["metadata"]["name"] == name.as_str()) else {
            return Err(Failure::not_found(t.resource.plural, t.resource.group, name));
        };
        return match t.sub.as_deref() {
            None | Some("status") if k8s::table::wants_table(accept) => {
                Ok(Json(k8s::table::table(kind, &[obj], &rv, include, now)).into_response())
            }
            None | Some("status") => Ok(Json(obj).into_response()),
            Some(other) => Err(Failure::bad_request(format!("the subresource {other:?} of {} is not served", t.resource.plural))),
        };
    }
    if t.sub.is_some() {
        return Err(Failure::no_route());
    }
    if k8s::table::wants_table(accept) {
        return Ok(Json(k8s::table::table(kind, &objs, &rv, include, now)).into_response());
    }
    Ok(Json(json!({
        "kind": format!("{kind}List"),
        "apiVersion": t.resource.api_version(),
        "metadata": {"resourceVersion": rv},
        "items": objs,
    }))
    .into_response())
}
