//! The Kubernetes API on the controller's TLS port (README, "For Kubernetes users"): discovery,
//! `/version`, and reads and watches of Nodes, Namespaces, Pods, Deployments, ReplicaSets and
//! Jobs, each a view of the controller's own state built by the pure `k8s` crate. A kind's
//! objects are computed as root sees them when read (at most every [`FRESH`]) and kept in a
//! `k8s::watch::Cache`, which versions them; each caller then gets what it may see (another
//! user's objects hidden under `private_jobs`, environment values and arguments `(hidden)`).
//! Users are who their bearer token says (`tandem token --kubeconfig`). Errors are
//! `metav1.Status` bodies.

use axum::Json;
use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use k8s::api::Route;
use k8s::objects::{KubeJob, ServiceView, Task};
use k8s::select::{Fields, Labels};
use k8s::watch::{Cache, Watcher};
use k8s::{Failure, Target};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::app::*;
use crate::kshared::{failure_of, failure_of_refused};

pub(crate) fn routes(r: Router<App>) -> Router<App> {
    r.route("/version", any(handle))
        .route("/api", any(handle))
        .route("/api/{*rest}", any(handle))
        .route("/apis", any(handle))
        .route("/apis/{*rest}", any(handle))
        .route("/openapi/v3", any(handle))
        .route("/openapi/v3/{*rest}", any(handle))
}

/// The most a written object's body may hold.
const MAX_BODY: usize = 3 << 20;

fn failure(f: Failure) -> Response {
    (StatusCode::from_u16(f.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), Json(f.body())).into_response()
}

#[allow(clippy::too_many_arguments)] // an axum handler: one argument per extractor
async fn handle(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    q: Result<Query<HashMap<String, String>>, QueryRejection>,
    ws: Result<axum::extract::ws::WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
    body: axum::body::Body,
) -> Response {
    // `kubectl exec` and `cp`: a WebSocket (kubectl's SPDY fallback is answered why not).
    if let Ok(Route::Objects(t)) = k8s::api::route(uri.path())
        && t.resource.kind == "Pod"
        && t.sub.as_deref() == Some("exec")
    {
        let served = async {
            let v = viewer(&app, &peer, &headers)?;
            let opts = crate::podexec::options(uri.query())?;
            let pod = pod_of(&app, &v, &t, opts.container.as_deref())?;
            crate::podexec::serve(&app, &v, pod, opts, &headers, ws.ok()).await
        };
        return served.await.unwrap_or_else(failure);
    }
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return failure(Failure::bad_request(format!("malformed query: {}", e.body_text()))),
    };
    // A declared length over the bound is refused before the body is read: the client that
    // waits for `100 Continue` gets the 413 itself, not a connection cut mid-upload.
    let declared = headers.get(axum::http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return failure(Failure::from_code(413, format!("the request body is larger than {MAX_BODY} bytes")));
    }
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(_) => return failure(Failure::from_code(413, format!("the request body is larger than {MAX_BODY} bytes"))),
    };
    match serve(&app, &peer, &method, uri.path(), &headers, &q, &body).await {
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

async fn serve(
    app: &App,
    peer: &Peer,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    q: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, Failure> {
    let route = k8s::api::route(path)?;
    if route == Route::Version {
        return Ok(Json(k8s::api::version(env!("CARGO_PKG_VERSION"))).into_response());
    }
    let v = viewer(app, peer, headers)?;
    // A Pod's interactive subresources: whatever the method (kubectl tries a WebSocket upgrade,
    // then SPDY), a refusal that says what to use instead.
    if let Route::Objects(t) = &route
        && t.resource.kind == "Pod"
        && let Some(why) = t.sub.as_deref().and_then(not_served)
    {
        return Err(Failure::bad_request(why));
    }
    if method != Method::GET {
        return match route {
            Route::Objects(t) if t.resource.kind == "Pod" && method == Method::DELETE && t.name.is_some() && t.sub.is_none() => {
                delete_pod(app, &v, &t, q).await
            }
            Route::Objects(t) if t.resource.writable() => crate::kube::write(app, &v, method, &t, headers, q, body).await,
            Route::Objects(t) => Err(Failure::method_not_allowed(format!(
                "{method} {path}: {} are read and watched through Tandem's Kubernetes API; change them with `sbatch`, `scancel` \
                 and `tandem service` (docs/kubernetes.md)",
                t.resource.plural
            ))),
            _ => Err(Failure::method_not_allowed(format!("{method} {path}: only GET is served here"))),
        };
    }
    Ok(match route {
        Route::Version => unreachable!("answered above"),
        Route::CoreVersions => Json(k8s::api::core_versions()).into_response(),
        Route::Groups => Json(k8s::api::groups()).into_response(),
        Route::Group(g) => Json(k8s::api::group(g)).into_response(),
        Route::Resources { group } => Json(k8s::api::resources(group)).into_response(),
        Route::OpenApiIndex => {
            Json(k8s::openapi::index(&openapi_docs().iter().map(|(gv, _, h)| (gv.clone(), h.clone())).collect::<Vec<_>>())).into_response()
        }
        Route::OpenApi(g) => {
            let gv = if g.is_empty() { "api/v1".to_string() } else { format!("apis/{g}/v1") };
            let (_, text, _) = openapi_docs().iter().find(|(x, _, _)| *x == gv).ok_or_else(Failure::no_route)?;
            let mut r = Response::new(axum::body::Body::from(text.clone()));
            r.headers_mut().insert("content-type", axum::http::HeaderValue::from_static("application/json"));
            r
        }
        Route::Objects(t) if t.sub.as_deref() == Some("scale") && t.resource.kind == "Deployment" => {
            let name = t.name.clone().ok_or_else(Failure::no_route)?;
            Json(scale_of(app, &v, t.namespace.as_deref().unwrap_or(k8s::DEFAULT_NAMESPACE), &name)?).into_response()
        }
        Route::Objects(t) if t.sub.as_deref() == Some("log") && t.resource.kind == "Pod" => pod_log(app, &v, &t, q).await?,
        Route::Objects(t) => objects(app, &v, &t, headers, q).await?,
    })
}

/// Why a Pod's subresource `sub` is not served, and what to use instead (`None`: it is served).
fn not_served(sub: &str) -> Option<String> {
    match sub {
        "attach" => Some(
            "pods/attach is not served by Tandem (docs/kubernetes.md): a Pod's task has no terminal to attach to; \
             read its output with `kubectl logs -f`, run a command in it with `kubectl exec`, or attach to an srun step with \
             `sattach ID.STEP`"
                .to_string(),
        ),
        "portforward" => Some(
            "pods/portforward is not served by Tandem: a Deployment's replicas are reached through Tandem's proxy \
             (http://PROXY/s/NAME/, or with `Host: NAME`), each also on its node at its $PORT (`tandem service show NAME`)"
                .to_string(),
        ),
        _ => None,
    }
}

/// `GET .../pods/NAME/log`: the Pod's output as its node reads it (`output`), plain text, as it
/// comes with `follow` until the task ends. Options Tandem cannot honour are refused, not
/// ignored: its output files hold no times per line (`timestamps`, `sinceSeconds`, `sinceTime`)
/// and a replica restarted in place appends to the same file (`previous`).
async fn pod_log(app: &App, v: &Viewer, t: &Target, q: &HashMap<String, String>) -> Result<Response, Failure> {
    let why_not = [
        ("previous", "Tandem keeps one output file per task: a restarted replica's earlier output is at the start of the same log"),
        ("timestamps", "Tandem's output files hold no time per line"),
        ("sinceSeconds", "Tandem's output files hold no time per line: use tailLines (--tail)"),
        ("sinceTime", "Tandem's output files hold no time per line: use tailLines (--tail)"),
    ];
    for (k, why) in why_not {
        if q.get(k).is_some_and(|x| !matches!(x.as_str(), "" | "false" | "0")) {
            return Err(Failure::bad_request(format!("{k} is not supported: {why}")));
        }
    }
    let number = |k: &str, least: i64| -> Result<Option<u64>, Failure> {
        let Some(x) = q.get(k) else { return Ok(None) };
        match x.parse::<i64>() {
            Ok(n) if n >= least => Ok(Some(n as u64)),
            _ => Err(Failure::bad_request(format!("{k}: Invalid value {x:?}: must be an integer of at least {least}"))),
        }
    };
    let (tail_lines, limit_bytes) = (number("tailLines", 0)?, number("limitBytes", 1)?);
    let follow = flag(q, "follow");
    let pod = pod_of(app, v, t, q.get("container").map(String::as_str))?;
    let want = crate::output::Want { follow, tail_lines, limit_bytes };
    match crate::output::fetch(app, v.uid, pod.job, Some(&pod.node), want).await {
        Ok(body) => {
            let mut r = Response::new(body);
            r.headers_mut().insert("content-type", axum::http::HeaderValue::from_static("text/plain"));
            Ok(r)
        }
        Err(crate::output::FetchError::Refused(e)) => Err(failure_of_refused(&e)),
        Err(crate::output::FetchError::Node(why)) => Err(Failure::from_code(500, why)),
    }
}

/// `DELETE .../pods/NAME` of a Deployment's Pod: its replica is stopped (`scancel` of its job,
/// with the same rights: its owner, root, operators) and the service starts another, as a
/// ReplicaSet replaces a deleted Pod; the Pod is gone once the replica has stopped (kubectl
/// waits for that). A batch job's Pod ends with its job: a 405 naming `scancel`.
async fn delete_pod(app: &App, v: &Viewer, t: &Target, q: &HashMap<String, String>) -> Result<Response, Failure> {
    let name = t.name.clone().ok_or_else(Failure::no_route)?;
    let dry = dry_run(q)?;
    let pods = with_cache(app, "Pod", |c| c.list());
    let mut pod = pods
        .into_iter()
        .filter(|o| o["metadata"]["name"] == name.as_str() && t.namespace.as_deref().is_none_or(|ns| o["metadata"]["namespace"] == ns))
        .find_map(|o| visible(v, o))
        .ok_or_else(|| Failure::not_found("pods", "", &name))?;
    let labels = &pod["metadata"]["labels"];
    let job = labels[format!("{}/job-id", k8s::PREFIX)].as_str().and_then(|j| j.parse::<u64>().ok());
    let (Some(job), true) = (job, labels[format!("{}/service", k8s::PREFIX)].is_string()) else {
        return Err(Failure::method_not_allowed(format!(
            "pods \"{name}\" is a batch job's: it ends with its job (`scancel`); only a Deployment's Pods are deleted here (its replica is replaced)"
        )));
    };
    if !dry {
        let t = now();
        match app.with(|c| c.cancel(t, v.uid, job, None)).await {
            Ok(Ok(())) => app.service_wake.notify_one(),
            // Already ending: deleting it again is not an error.
            Ok(Err(control::Refused::Conflict(_))) => {}
            Ok(Err(e)) => return Err(failure_of_refused(&e)),
            Err(r) => return Err(failure_of(r).await),
        }
        app.wake_nodes();
    }
    if pod["metadata"]["deletionTimestamp"].is_null() {
        pod["metadata"]["deletionTimestamp"] = serde_json::to_value(k8s::objects::time(now())).unwrap_or(Value::Null);
    }
    Ok(Json(pod).into_response())
}

/// The Pod `t` names, as `v` may see it, with a node (its container's name, `container`,
/// checked where given).
pub(crate) fn pod_of(app: &App, v: &Viewer, t: &Target, container: Option<&str>) -> Result<crate::kshared::PodRef, Failure> {
    let name = t.name.clone().ok_or_else(Failure::no_route)?;
    let pods = with_cache(app, "Pod", |c| c.list());
    let pod = pods
        .into_iter()
        .filter(|o| o["metadata"]["name"] == name.as_str() && t.namespace.as_deref().is_none_or(|ns| o["metadata"]["namespace"] == ns))
        .find_map(|o| visible(v, o))
        .ok_or_else(|| Failure::not_found("pods", "", &name))?;
    let own = pod["spec"]["containers"][0]["name"].as_str().unwrap_or_default().to_string();
    if let Some(c) = container.filter(|c| !c.is_empty() && *c != own) {
        return Err(Failure::bad_request(format!("container {c} is not valid for pod {name}")));
    }
    let job = pod["metadata"]["labels"][format!("{}/job-id", k8s::PREFIX)]
        .as_str()
        .and_then(|j| j.parse::<u64>().ok())
        .ok_or_else(|| Failure::from_code(500, format!("pod {name} names no Tandem job")))?;
    let Some(node) = pod["spec"]["nodeName"].as_str().map(str::to_string) else {
        return Err(Failure::bad_request(format!("container \"{own}\" in pod \"{name}\" is waiting to start: it has no node yet")));
    };
    Ok(crate::kshared::PodRef { name, job, node })
}

/// The `/openapi/v3` documents, made once: (group-version path, text, hash).
fn openapi_docs() -> &'static [(String, String, String)] {
    static DOCS: std::sync::OnceLock<Vec<(String, String, String)>> = std::sync::OnceLock::new();
    DOCS.get_or_init(|| {
        k8s::openapi::group_versions()
            .into_iter()
            .map(|(g, gv)| {
                let text = k8s::openapi::document(g).to_string();
                let h = k8s::openapi::hash(&text);
                (gv, text, h)
            })
            .collect()
    })
}

fn flag(q: &HashMap<String, String>, k: &str) -> bool {
    q.get(k).is_some_and(|v| v == "true" || v == "1")
}

/// One watch event's line: `{"type":TYPE,"object":OBJECT}` (written from the object as it is:
/// a `json!` of it would copy it first).
fn event_line(ty: &str, obj: &Value) -> axum::body::Bytes {
    let mut b = Vec::with_capacity(1024);
    b.extend_from_slice(b"{\"type\":");
    serde_json::to_writer(&mut b, ty).expect("events serialize");
    b.extend_from_slice(b",\"object\":");
    serde_json::to_writer(&mut b, obj).expect("events serialize");
    b.extend_from_slice(b"}\n");
    b.into()
}

/// How long a computation of a kind's objects serves later reads and watches, while the
/// controller has journalled nothing since (a change it acknowledged is always seen).
const FRESH: Duration = Duration::from_millis(250);

/// How old a computation a watch's look for changes may use.
const WATCH_FRESH: Duration = Duration::from_secs(1);

/// How often a watch looks for changes.
const WATCH_EVERY: Duration = Duration::from_millis(500);

/// The cache of `kind`, computed afresh unless it is younger than [`FRESH`]; run with it.
fn with_cache<T>(app: &App, kind: &'static str, f: impl FnOnce(&Cache) -> T) -> T {
    cached(app, kind, false, f)
}

/// A watch's look for changes: [`with_cache`], but any computation younger than [`WATCH_FRESH`]
/// serves, changes since or not (a watch learns of them within a second; the controller does
/// not recompute a kind for every poll while jobs come and go).
fn watch_cache<T>(app: &App, kind: &'static str, f: impl FnOnce(&Cache) -> T) -> T {
    cached(app, kind, true, f)
}

fn cached<T>(app: &App, kind: &'static str, watching: bool, f: impl FnOnce(&Cache) -> T) -> T {
    let mut views = app.kube.lock().expect("views lock");
    let seq = app.journal.last();
    let fresh = views
        .caches
        .get(kind)
        .is_some_and(|(_, at, s)| if watching { at.elapsed() < WATCH_FRESH } else { at.elapsed() < FRESH && *s == seq });
    if !fresh {
        let Views { counter, caches, memo } = &mut *views;
        let first = !caches.contains_key(kind);
        if first {
            memo.retain(|(k, _), _| *k != kind);
        }
        let mut kept = std::collections::BTreeSet::new();
        let objs = gather_with(app, kind, Some((memo, &mut kept)));
        let (cache, at, s) = caches.entry(kind).or_insert_with(|| (Cache::new(*counter), Instant::now(), seq));
        cache.refresh_keeping(objs, &kept, counter);
        (*at, *s) = (Instant::now(), seq);
    }
    f(&views.caches[kind].0)
}

/// What `v` may see of `o`: nothing of another user's under `private_jobs`, no environment
/// values or arguments of another user's.
fn visible(v: &Viewer, mut o: Value) -> Option<Value> {
    match k8s::objects::owner_uid(&o) {
        Some(uid) if !v.sees(uid) => None,
        // A Secret is its owner's (and root's) alone, whatever the site's visibility.
        Some(uid) if o["kind"] == "Secret" && !v.sees_details(uid) => None,
        Some(uid) if !v.sees_details(uid) => {
            k8s::objects::redact(&mut o, HIDDEN);
            Some(o)
        }
        _ => Some(o),
    }
}

/// Every object of `kind`, as root sees it.
fn gather(app: &App, kind: &'static str) -> Vec<Value> {
    gather_with(app, kind, None)
}

/// What a cache keeps from one computation to the next: per batch job, a hash of its rows and
/// its objects' keys; and the keys of the objects not computed again this time.
type Memo<'a> = (&'a mut HashMap<(&'static str, u64), (u64, Vec<(String, String)>)>, &'a mut std::collections::BTreeSet<(String, String)>);

/// [`gather`]; with a memo, a batch job whose rows (and its nodes' addresses) hash as they did
/// last time is not turned into objects again: its objects' keys go to the memo's kept set
/// instead (what a Pod or Job shows is computed from those rows alone).
fn gather_with(app: &App, kind: &'static str, mut memo: Option<Memo>) -> Vec<Value> {
    let v = &Viewer { uid: 0, all: true, private_jobs: false, private_usage: false };
    let to = |x: Result<Value, serde_json::Error>| x.expect("Kubernetes objects serialize");
    let g = app.lock();
    let ctl = &g.ctl;
    let t = now();
    let parts: Vec<String> = ctl.settings().cluster.partitions.iter().map(|p| p.name.clone()).collect();
    let nodes = crate::jobs::node_infos(&ctl.node_reservations(t), ctl.nodes(), &parts);
    let addrs: BTreeMap<String, String> = nodes.iter().map(|n| (n.name.clone(), n.addr.clone())).collect();
    let mut out = Vec::new();
    match kind {
        "Node" => out.extend(nodes.iter().map(|n| to(serde_json::to_value(k8s::objects::node(n))))),
        "Namespace" => {
            out.push(to(serde_json::to_value(k8s::objects::namespace(k8s::DEFAULT_NAMESPACE, None, None))));
            for o in ctl.kube_objects("Namespace") {
                let stored = Some((&o.data, o.uid, o.terminating()));
                out.push(to(serde_json::to_value(k8s::objects::namespace(&o.name, Some(o.created), stored))));
            }
        }
        _ => {}
    }
    if matches!(kind, "Pod" | "Deployment" | "ReplicaSet") {
        for s in ctl.services().filter(|s| v.sees(s.uid)) {
            let info = crate::services::service_info(ctl, s, v);
            let part = crate::jobs::default_partition(ctl);
            let jobs = info.replicas.iter().filter_map(|r| ctl.job(r.job)).map(|j| crate::jobs::job_info(&j, v, &part)).collect();
            let history =
                s.history.iter().map(|(n, sp)| (*n, if v.sees_details(s.uid) { sp.clone() } else { crate::services::hide(sp) })).collect();
            let view = ServiceView { info, created: s.created, uid: s.uid, jobs, history, kube: s.kube.clone() };
            match kind {
                "Deployment" => out.push(k8s::objects::deployment_value(&view)),
                "ReplicaSet" => out.extend(k8s::objects::replica_sets(&view).into_iter().map(|x| to(serde_json::to_value(x)))),
                _ => out.extend(k8s::objects::service_pods(&view, &addrs).into_iter().map(|x| to(serde_json::to_value(x)))),
            }
        }
    }
    drop(g);
    if matches!(kind, "Service" | "ConfigMap" | "Secret") {
        let g = app.lock();
        // Which Tandem services a Service selects: those of its namespace whose Pods carry its
        // selector's labels.
        let templates: Vec<(String, std::collections::BTreeMap<String, String>)> = g
            .ctl
            .services()
            .map(|s| {
                let mut labels: std::collections::BTreeMap<String, String> = s
                    .kube
                    .as_ref()
                    .and_then(|k| k["spec"]["template"]["metadata"]["labels"].as_object())
                    .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
                    .unwrap_or_default();
                labels.insert(format!("{}/service", k8s::PREFIX), s.spec.name.clone());
                (s.spec.name.clone(), labels)
            })
            .collect();
        return g
            .ctl
            .kube_objects(kind)
            .map(|o| {
                let routes: Vec<String> = if kind == "Service" {
                    templates
                        .iter()
                        .filter(|(n, _)| wire::service_namespace(n).0 == o.namespace)
                        .filter(|(_, l)| k8s::objects::selects(&o.data["spec"]["selector"], l))
                        .map(|(n, _)| n.clone())
                        .collect()
                } else {
                    Vec::new()
                };
                let view = k8s::objects::StoredView { kind, namespace: &o.namespace, uid: o.uid, created: o.created, data: &o.data };
                k8s::objects::stored_object(&view, &routes)
            })
            .collect();
    }
    if kind == "Event" {
        let (pods, nodes) = (gather(app, "Pod"), gather(app, "Node"));
        let (deployments, replica_sets) = (gather(app, "Deployment"), gather(app, "ReplicaSet"));
        let mut out = k8s::objects::events(&pods, &nodes);
        out.extend(k8s::objects::deployment_events(&deployments, &replica_sets));
        out.extend(k8s::objects::job_events(&gather(app, "Job"), &pods));
        return out;
    }
    if matches!(kind, "Pod" | "Job") {
        let tasks = batch_tasks(app, v);
        let mut live = std::collections::HashSet::new();
        let addrs_hash = if kind == "Pod" { rows_hash(&addrs, 0) } else { 0 };
        for group in k8s::objects::group_jobs(&tasks) {
            let id = group[0].info.array_job_id.or(group[0].info.het_job_id).unwrap_or(group[0].info.id);
            let h = memo.as_ref().map(|_| {
                group.iter().fold(addrs_hash, |h, t| rows_hash(&(&t.info, &t.image, t.kube.as_ref().map(|k| (&k.name, &k.stored))), h))
            });
            if let (Some((m, kept)), Some(h)) = (memo.as_mut(), h) {
                live.insert(id);
                if let Some((old, keys)) = m.get(&(kind, id))
                    && *old == h
                {
                    kept.extend(keys.iter().cloned());
                    continue;
                }
            }
            let objs: Vec<Value> = if kind == "Job" {
                vec![to(serde_json::to_value(k8s::objects::job(&group)))]
            } else {
                k8s::objects::job_pods(&group, &addrs).into_iter().map(|x| to(serde_json::to_value(x))).collect()
            };
            if let (Some((m, _)), Some(h)) = (memo.as_mut(), h) {
                m.insert((kind, id), (h, objs.iter().map(k8s::watch::key).collect()));
            }
            out.extend(objs);
        }
        if let Some((m, _)) = memo {
            m.retain(|(k, id), _| *k != kind || live.contains(id));
        }
    }
    out
}

/// A hash of `x`'s JSON, chained on `h` (no text is made: the serializer writes to the hasher).
fn rows_hash(x: &impl serde::Serialize, h: u64) -> u64 {
    use std::hash::Hasher;
    struct Sink(std::collections::hash_map::DefaultHasher);
    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.write(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut s = Sink(std::collections::hash_map::DefaultHasher::new());
    s.0.write_u64(h);
    let _ = serde_json::to_writer(&mut s, x);
    s.0.finish()
}

/// The batch jobs the viewer may see (not service replicas), every array task on its own, in
/// pieces of `LIST_CHUNK` under the lock as `squeue`'s listing takes them.
fn batch_tasks(app: &App, v: &Viewer) -> Vec<Task> {
    let mut out = Vec::new();
    let mut from = 0u64;
    // The Jobs written through this API, by their jobs' ids (an array's: its first task's),
    // with how many tasks each has.
    // Deleted Jobs' jobs (cancelled) are not shown until they leave memory.
    let buried: std::collections::HashSet<u64> =
        app.lock().ctl.kube_objects("Job").filter(|o| o.buried()).filter_map(|o| o.data["job"].as_u64()).collect();
    let written: HashMap<u64, (Arc<KubeJob>, u64)> = app
        .lock()
        .ctl
        .kube_objects("Job")
        .filter(|o| v.sees(o.uid) && !o.buried())
        .filter_map(|o| {
            let ids = o.job_ids();
            let kube =
                Arc::new(KubeJob { name: o.name.clone(), namespace: o.namespace.clone(), created: o.created, stored: o.data.clone() });
            (!ids.is_empty()).then(|| (ids.start, (kube, ids.end - ids.start)))
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
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
            let first = j.array.map_or(j.req.id.0, |a| a.array_job);
            if buried.contains(&first) {
                continue;
            }
            let kube = written.get(&first).map(|(k, _)| k.clone());
            if kube.is_some() {
                seen.insert(first);
            }
            out.extend(crate::jobs::job_rows(j, v, &part).into_iter().map(|info| Task { info, image: image.clone(), kube: kube.clone() }));
        }
        drop(g);
        match next {
            Some(id) => from = id,
            None => break,
        }
    }
    // A written Job whose job has left the controller's memory (`min_job_age`) reads from its
    // records in the database, as `sacct` does: a Job is kept until it is deleted.
    let gone: Vec<(&u64, &(Arc<KubeJob>, u64))> = written.iter().filter(|(id, _)| !seen.contains(*id)).collect();
    if !gone.is_empty() {
        let part = crate::jobs::default_partition(&app.lock().ctl);
        let db = app.db.lock().expect("database lock");
        for (&id, (kube, count)) in gone {
            for j in db.jobs_between(id, id.saturating_add(*count)).unwrap_or_default() {
                if j.array.map_or(j.req.id.0, |a| a.array_job) != id {
                    continue;
                }
                let image = j.spec.container.as_ref().map(|c| c.image.clone());
                out.extend(crate::jobs::job_rows(&j, v, &part).into_iter().map(|info| Task {
                    info,
                    image: image.clone(),
                    kube: Some(kube.clone()),
                }));
            }
        }
    }
    out
}

async fn objects(app: &App, v: &Viewer, t: &Target, headers: &HeaderMap, q: &HashMap<String, String>) -> Result<Response, Failure> {
    let kind = t.resource.kind;
    let labels = Labels::parse(q.get("labelSelector").map_or("", String::as_str))?;
    let mut fields = Fields::parse(q.get("fieldSelector").map_or("", String::as_str), kind)?;
    let include = k8s::table::Include::parse(q.get("includeObject").map(String::as_str))?;
    let accept = headers.get("accept").and_then(|h| h.to_str().ok()).unwrap_or("").to_string();
    if flag(q, "watch") {
        if t.sub.is_some() {
            return Err(Failure::no_route());
        }
        if let Some(name) = &t.name {
            // The old form of a watch of one object: `.../pods/NAME?watch=1`.
            let sel = format!("metadata.name={name}{}", q.get("fieldSelector").map_or(String::new(), |f| format!(",{f}")));
            fields = Fields::parse(&sel, kind)?;
        }
        let w = Watcher::new(t.namespace.clone(), labels, fields);
        return watch(app, v, t.resource, w, q, include, k8s::table::wants_table(&accept));
    }
    if flag(q, "sendInitialEvents") {
        return Err(Failure::bad_request("sendInitialEvents is for watches (watch=true)"));
    }
    let now = now();
    let (objs, rv) = with_cache(app, kind, |c| (c.list(), c.version()));
    // Show nothing a crash could undo.
    app.settled(app.journal.last()).await.map_err(|_| Failure::from_code(503, "the controller cannot save its state; try again"))?;
    let rv = rv.to_string();
    let w = Watcher::new(t.namespace.clone(), labels, fields);
    let objs: Vec<Value> = objs.into_iter().filter(|o| w.matches(o)).filter_map(|o| visible(v, o)).collect();
    if let Some(name) = &t.name {
        let Some(obj) = objs.into_iter().find(|o| o["metadata"]["name"] == name.as_str()) else {
            return Err(Failure::not_found(t.resource.plural, t.resource.group, name));
        };
        return match t.sub.as_deref() {
            None | Some("status") if k8s::table::wants_table(&accept) => {
                Ok(Json(k8s::table::table(kind, &[obj], &rv, include, now)).into_response())
            }
            None | Some("status") => Ok(Json(obj).into_response()),
            Some(other) => Err(Failure::bad_request(format!("the subresource {other:?} of {} is not served", t.resource.plural))),
        };
    }
    if t.sub.is_some() {
        return Err(Failure::no_route());
    }
    if k8s::table::wants_table(&accept) {
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

/// Frames from a channel, as a streamed body (a watch's events).
struct Feed(tokio::sync::mpsc::Receiver<axum::body::Bytes>);

impl hyper::body::Body for Feed {
    type Data = axum::body::Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(hyper::body::Frame::data(b))))
    }
}

/// A watch: newline-delimited JSON events (`{"type": ..., "object": ...}`), each object a
/// one-row Table when kubectl asked for Tables. From `resourceVersion` V: the changes after V
/// (410 `Expired` in an `ERROR` event when V is older than what the controller knows); without
/// one, or with `sendInitialEvents=true`: every object as `ADDED` first (then a `BOOKMARK`
/// marked `k8s.io/initial-events-end` when asked for). It ends after `timeoutSeconds` (default
/// 30 minutes) or when the client goes.
fn watch(
    app: &App,
    v: &Viewer,
    resource: &'static k8s::Resource,
    mut w: Watcher,
    q: &HashMap<String, String>,
    include: k8s::table::Include,
    table: bool,
) -> Result<Response, Failure> {
    let kind = resource.kind;
    let since = match q.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(rv) => Some(rv.parse::<u64>().map_err(|_| Failure::bad_request(format!("resourceVersion: {rv:?} is not a version")))?),
    };
    let initial = flag(q, "sendInitialEvents");
    if initial && q.get("resourceVersionMatch").map(String::as_str) != Some("NotOlderThan") {
        return Err(Failure::bad_request("sendInitialEvents needs resourceVersionMatch=NotOlderThan"));
    }
    let bookmarks = flag(q, "allowWatchBookmarks");
    let timeout = match q.get("timeoutSeconds") {
        Some(s) => s.parse::<u64>().map_err(|_| Failure::bad_request(format!("timeoutSeconds: {s:?} is not a number")))?,
        None => 1800,
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<axum::body::Bytes>(64);
    let (app, v) = (app.clone(), *v);
    let api_version = resource.api_version();
    let line = move |ty: &str, obj: Value, rv: u64| -> axum::body::Bytes {
        let obj = if table && ty != "BOOKMARK" && ty != "ERROR" {
            k8s::table::table(kind, std::slice::from_ref(&obj), &rv.to_string(), include, now())
        } else {
            obj
        };
        event_line(ty, &obj)
    };
    tokio::spawn(async move {
        let end = Instant::now() + Duration::from_secs(timeout);
        // Where the watch starts, and what the client knows there.
        let (mut at, first) = with_cache(&app, kind, |c| match since {
            Some(rv) if !initial => {
                w.knows(&c.existed_at(rv));
                // From here on, the changes after what this computation holds.
                (c.version().max(rv), c.since(rv).map(|ch| w.events(ch)))
            }
            _ => {
                let now_objs: Vec<Value> = c.list();
                let changes = now_objs
                    .into_iter()
                    .map(|obj| k8s::watch::Change { kind: "ADDED", rv: c.version(), created: c.version(), obj })
                    .collect();
                (c.version(), Ok(w.events(changes)))
            }
        });
        let mut send = Vec::new();
        match first {
            Ok(events) => send.extend(events.into_iter().filter_map(|(ty, o)| visible(&v, o).map(|o| (ty, o)))),
            Err(f) => {
                let _ = tx.send(line("ERROR", f.body(), at)).await;
                return;
            }
        }
        if app.settled(app.journal.last()).await.is_err() {
            return;
        }
        for (ty, o) in send {
            let rv = o["metadata"]["resourceVersion"].as_str().and_then(|r| r.parse().ok()).unwrap_or(at);
            if tx.send(line(ty, o, rv)).await.is_err() {
                return;
            }
        }
        if initial && bookmarks {
            let mark = json!({"kind": kind, "apiVersion": api_version,
                "metadata": {"resourceVersion": at.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}});
            if tx.send(line("BOOKMARK", mark, at)).await.is_err() {
                return;
            }
        }
        let mut last_mark = Instant::now();
        while Instant::now() < end {
            tokio::time::sleep(WATCH_EVERY).await;
            if tx.is_closed() {
                return;
            }
            // Each change made into its line where it is kept (copied only to be hidden in part
            // or made a Table row).
            let (next, lines) = watch_cache(&app, kind, |c| {
                let mut lines = Vec::new();
                let done = c.since_each(at, |o, rv, deleted| {
                    let Some(ty) = w.event(o, deleted) else { return };
                    match k8s::objects::owner_uid(o) {
                        Some(uid) if !v.sees(uid) => {}
                        _ if table || k8s::objects::owner_uid(o).is_some_and(|uid| !v.sees_details(uid) || o["kind"] == "Secret") => {
                            if let Some(o) = visible(&v, o.clone()) {
                                lines.push(line(ty, o, rv));
                            }
                        }
                        _ => lines.push(event_line(ty, o)),
                    }
                });
                (c.version(), done.map(|()| lines))
            });
            let lines = match lines {
                Ok(l) => l,
                Err(f) => {
                    let _ = tx.send(line("ERROR", f.body(), at)).await;
                    return;
                }
            };
            at = next;
            if app.settled(app.journal.last()).await.is_err() {
                return;
            }
            for l in lines {
                if tx.send(l).await.is_err() {
                    return;
                }
            }
            if bookmarks && last_mark.elapsed() > Duration::from_secs(30) {
                last_mark = Instant::now();
                let mark = json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": at.to_string()}});
                if tx.send(line("BOOKMARK", mark, at)).await.is_err() {
                    return;
                }
            }
        }
    });
    let mut r = Response::new(axum::body::Body::new(Feed(rx)));
    r.headers_mut().insert("content-type", axum::http::HeaderValue::from_static("application/json"));
    Ok(r)
}

// ---- Writes: Deployments are Tandem's services ----

/// A ConfigMap or Secret of namespace `ns` a Deployment or Job written by `v` takes environment
/// values from: a ConfigMap `v` may see, a Secret of `v`'s own (root: anyone's).
fn env_source(app: &App, v: &Viewer, ns: &str, kind: &str, name: &str) -> Option<Value> {
    let g = app.lock();
    let o = g.ctl.kube_object(&(kind.to_string(), ns.to_string(), name.to_string()))?;
    let usable = match kind {
        "Secret" => o.uid == v.uid || v.uid == 0,
        _ => v.sees(o.uid),
    };
    usable.then(|| o.data.clone())
}

/// Where a written Deployment's replicas and a Job's tasks run unless they say: the writer's
/// home directory where it is one, else `/tmp` (where Slurm's slurmstepd goes when it cannot
/// enter a job's directory).
fn work_dir_of(uid: u32) -> String {
    Some(home_of(uid)).filter(|h| std::path::Path::new(h).is_dir()).unwrap_or_else(|| "/tmp".into())
}

/// The home directory of `uid` (`/` where it has none in the password database).
fn home_of(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok().flatten().map_or_else(|| "/".into(), |u| u.dir.display().to_string())
}

fn json_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, Failure> {
    let ct = headers.get("content-type").and_then(|h| h.to_str().ok()).unwrap_or("application/json");
    if ct.starts_with(k8s::proto::CONTENT_TYPE) {
        // `kubectl create configmap|secret|deployment`: read into the same JSON as any body.
        return k8s::proto::decode(body);
    }
    if ct.starts_with("application/yaml") {
        return yaml_serde::from_slice::<Value>(body).map_err(|e| Failure::bad_request(format!("malformed YAML: {e}")));
    }
    serde_json::from_slice(body).map_err(|e| Failure::bad_request(format!("malformed JSON: {e}")))
}

/// `dryRun`: `All`, or nothing.
fn dry_run(q: &HashMap<String, String>) -> Result<bool, Failure> {
    match q.get("dryRun").map(String::as_str) {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(Failure::bad_request(format!("dryRun: {other:?} is not All"))),
    }
}

/// The object a write makes of `live`: a replace's body, or a patch (its kind from the
/// content type) applied to it.
fn written_over(method: &Method, headers: &HeaderMap, body: &[u8], live: &Value) -> Result<Value, Failure> {
    if method == Method::PUT {
        return json_body(headers, body);
    }
    let kind = k8s::patch::Kind::of(headers.get("content-type").and_then(|h| h.to_str().ok()).unwrap_or(""))?;
    let patch: Value = serde_json::from_slice(body).map_err(|e| Failure::bad_request(format!("malformed patch: {e}")))?;
    k8s::patch::apply(kind, live, &patch)
}

fn with_warnings(mut r: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let text = format!("299 - {:?}", w.replace(|c: char| c.is_control(), " "));
        if let Ok(h) = axum::http::HeaderValue::from_str(&text) {
            r.headers_mut().append("warning", h);
        }
    }
    r
}

/// A create, replace, patch or delete of a Deployment, or a change of its scale.
async fn write(
    app: &App,
    v: &Viewer,
    method: &Method,
    t: &Target,
    headers: &HeaderMap,
    q: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, Failure> {
    if t.resource.kind == "Namespace" {
        return write_namespace(app, v, method, t, headers, q, body).await;
    }
    let ns = t.namespace.as_deref().ok_or_else(|| Failure::method_not_allowed(format!("write {} in a namespace", t.resource.plural)))?;
    if method != Method::DELETE {
        // Said before anything else (the controller checks again as it writes).
        let checked = app.lock().ctl.check_namespace(v.uid, ns);
        if let Err(e) = checked {
            return Err(failure_of_refused(&e));
        }
    }
    if t.resource.stored() {
        return write_stored(app, v, method, t, ns, headers, q, body).await;
    }
    if t.resource.kind == "Job" {
        return write_job(app, v, method, t, ns, headers, q, body).await;
    }
    let validation = k8s::write::Validation::parse(q.get("fieldValidation").map(String::as_str))?;
    let dry = dry_run(q)?;
    let name = t.name.clone();
    match (method.as_str(), name, t.sub.as_deref()) {
        ("POST", None, None) => {
            let obj = json_body(headers, body)?;
            let w = k8s::write::deployment(&obj, ns, validation, &|kind, name| env_source(app, v, ns, kind, name))?;
            if app.lock().ctl.service(&w.spec.name).is_some() {
                let mut f = Failure::from_code(409, format!("deployments.apps \"{}\" already exists", w.name));
                f.reason = "AlreadyExists";
                f.details = Some(("deployments".into(), w.name.clone()));
                return Err(f);
            }
            let out = commit(app, v, w, dry, &obj).await?;
            let (status, body, warnings) = out;
            Ok(with_warnings((StatusCode::from_u16(status).expect("status"), Json(body)).into_response(), &warnings))
        }
        ("PUT" | "PATCH", Some(name), None) => {
            let live = current_of(app, v, "Deployment", ns, &name).ok_or_else(|| Failure::not_found("deployments", "apps", &name))?;
            let obj = written_over(method, headers, body, &live)?;
            if obj["metadata"]["name"].as_str().is_some_and(|n| n != name) {
                return Err(Failure::bad_request("the name of the object does not match the name on the URL"));
            }
            if let Some(rv) = obj["metadata"]["resourceVersion"].as_str()
                && rv != live["metadata"]["resourceVersion"].as_str().unwrap_or("")
            {
                let mut f = Failure::from_code(
                    409,
                    format!(
                        "Operation cannot be fulfilled on deployments.apps \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
                    ),
                );
                f.details = Some(("deployments".into(), name.clone()));
                return Err(f);
            }
            let w = k8s::write::deployment(&obj, ns, validation, &|kind, name| env_source(app, v, ns, kind, name))?;
            let (_, body, warnings) = commit(app, v, w, dry, &obj).await?;
            Ok(with_warnings(Json(body).into_response(), &warnings))
        }
        ("DELETE", Some(name), None) => {
            let live = current_of(app, v, "Deployment", ns, &name).ok_or_else(|| Failure::not_found("deployments", "apps", &name))?;
            if !dry {
                let service = wire::service_name(ns, &name);
                match app.with(|c| c.delete_service(v.uid, &service)).await {
                    Ok(Ok(())) => app.service_wake.notify_one(),
                    Ok(Err(e)) => return Err(failure_of(refused(e)).await),
                    Err(r) => return Err(failure_of(r).await),
                }
            }
            Ok(Json(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": "apps", "kind": "deployments", "uid": live["metadata"]["uid"]}}))
            .into_response())
        }
        ("PUT" | "PATCH", Some(name), Some("scale")) => {
            let live = scale_of(app, v, ns, &name)?;
            let obj = written_over(method, headers, body, &live)?;
            let n = obj["spec"]["replicas"].as_u64().filter(|n| *n <= u64::from(u32::MAX)).ok_or_else(|| {
                Failure::from_code(
                    422,
                    format!("Scale.autoscaling \"{name}\" is invalid: spec.replicas: Invalid value: a count of replicas"),
                )
            })?;
            if !dry {
                let t = now_ms();
                let service = wire::service_name(ns, &name);
                match app.with(|c| c.scale_service(t, v.uid, &service, n as u32)).await {
                    Ok(Ok(_)) => app.service_wake.notify_one(),
                    Ok(Err(e)) => return Err(failure_of(refused(e)).await),
                    Err(r) => return Err(failure_of(r).await),
                }
            }
            let mut out = scale_of(app, v, ns, &name)?;
            if dry {
                out["spec"]["replicas"] = json!(n);
            }
            Ok(Json(out).into_response())
        }
        (m, _, sub) => {
            Err(Failure::method_not_allowed(format!("{m} is not served on deployments{}", sub.map_or(String::new(), |s| format!("/{s}")))))
        }
    }
}

/// Makes (or, with `dry`, only checks) a written Deployment: its service is applied as `v`'s
/// (the controller checks ownership, the site's policy and the spec). Answers the status code,
/// the Deployment as it now reads, and the warnings.
async fn commit(app: &App, v: &Viewer, w: k8s::write::Written, dry: bool, obj: &Value) -> Result<(u16, Value, Vec<String>), Failure> {
    let existed = app.lock().ctl.service(&w.spec.name).is_some();
    let status = if existed { 200 } else { 201 };
    if dry {
        w.spec.resolve().map(|_| ()).map_err(|e| Failure::from_code(422, format!("Deployment.apps \"{}\" is invalid: {e}", w.name)))?;
        let mut out = obj.clone();
        out["apiVersion"] = json!("apps/v1");
        out["kind"] = json!("Deployment");
        return Ok((status, out, w.warnings));
    }
    let name = w.name.clone();
    let ns = wire::service_namespace(&w.spec.name).0.to_string();
    let r = crate::services::apply_spec(app, v.uid, w.spec, &work_dir_of(v.uid), None, Some(w.stored)).await;
    let r = match r {
        Ok(r) => r,
        Err(resp) => return Err(failure_of(resp).await),
    };
    let mut warnings = w.warnings;
    warnings.extend(r.user_msg);
    let out = current_of(app, v, "Deployment", &ns, &name)
        .ok_or_else(|| Failure::from_code(500, "the Deployment was written but cannot be read back"))?;
    Ok((status, out, warnings))
}

/// The `autoscaling/v1` Scale of Deployment `name`.
fn scale_of(app: &App, v: &Viewer, ns: &str, name: &str) -> Result<Value, Failure> {
    let d = current_of(app, v, "Deployment", ns, name).ok_or_else(|| Failure::not_found("deployments", "apps", name))?;
    let selector = d["spec"]["selector"]["matchLabels"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect::<Vec<_>>().join(","))
        .unwrap_or_default();
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {"name": name, "namespace": d["metadata"]["namespace"], "uid": d["metadata"]["uid"],
            "resourceVersion": d["metadata"]["resourceVersion"], "creationTimestamp": d["metadata"]["creationTimestamp"]},
        "spec": {"replicas": d["spec"]["replicas"]},
        "status": {"replicas": d["status"]["replicas"].as_i64().unwrap_or(0), "selector": selector},
    }))
}

/// The object `name` of `kind` in namespace `ns` (`""`: a cluster's object) as `v` sees it now
/// (computed afresh), if any.
fn current_of(app: &App, v: &Viewer, kind: &'static str, ns: &str, name: &str) -> Option<Value> {
    let in_ns = |o: &Value| o["metadata"]["namespace"].as_str().unwrap_or("") == ns;
    with_cache(app, kind, |c| c.list()).into_iter().find(|o| o["metadata"]["name"] == name && in_ns(o)).and_then(|o| visible(v, o))
}

fn conflict(plural: &str, name: &str) -> Failure {
    let mut f = Failure::from_code(
        409,
        format!(
            "Operation cannot be fulfilled on {plural} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
        ),
    );
    f.details = Some((plural.into(), name.into()));
    f
}

/// A create, replace, patch or delete of a stored object (Service, ConfigMap, Secret).
#[allow(clippy::too_many_arguments)]
async fn write_stored(
    app: &App,
    v: &Viewer,
    method: &Method,
    t: &Target,
    ns: &str,
    headers: &HeaderMap,
    q: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, Failure> {
    let (kind, plural) = (t.resource.kind, t.resource.plural);
    let validation = k8s::write::Validation::parse(q.get("fieldValidation").map(String::as_str))?;
    let dry = dry_run(q)?;
    if t.sub.is_some() {
        return Err(Failure::no_route());
    }
    let key = |name: &str| (kind.to_string(), ns.to_string(), name.to_string());
    let (obj, status) = match (method.as_str(), t.name.as_deref()) {
        ("POST", None) => {
            let obj = json_body(headers, body)?;
            let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
            if app.lock().ctl.kube_object(&key(&name)).is_some() {
                let mut f = Failure::from_code(409, format!("{plural} \"{name}\" already exists"));
                f.reason = "AlreadyExists";
                f.details = Some((plural.into(), name));
                return Err(f);
            }
            (obj, 201)
        }
        ("PUT" | "PATCH", Some(name)) => {
            let exists = app.lock().ctl.kube_object(&key(name)).is_some();
            let live = current_of(app, v, kind, ns, name);
            let live = match (exists, live) {
                (_, Some(l)) => l,
                (true, None) => return Err(Failure::forbidden(format!("{plural} \"{name}\" belongs to another user"))),
                (false, None) => return Err(Failure::not_found(plural, "", name)),
            };
            let obj = written_over(method, headers, body, &live)?;
            if obj["metadata"]["name"].as_str().is_some_and(|n| n != name) {
                return Err(Failure::bad_request("the name of the object does not match the name on the URL"));
            }
            if let Some(rv) = obj["metadata"]["resourceVersion"].as_str()
                && rv != live["metadata"]["resourceVersion"].as_str().unwrap_or("")
            {
                return Err(conflict(plural, name));
            }
            (obj, 200)
        }
        ("DELETE", Some(name)) => {
            let exists = app.lock().ctl.kube_object(&key(name)).is_some();
            let live = match (exists, current_of(app, v, kind, ns, name)) {
                (_, Some(l)) => l,
                (true, None) => return Err(Failure::forbidden(format!("{plural} \"{name}\" belongs to another user"))),
                (false, None) => return Err(Failure::not_found(plural, "", name)),
            };
            let owner = app.lock().ctl.kube_object(&key(name)).map(|o| o.uid);
            if dry && owner.is_some_and(|o| v.uid != 0 && o != v.uid) {
                return Err(Failure::forbidden(format!("{plural} \"{name}\" belongs to another user")));
            }
            if !dry {
                match app.with(|c| c.delete_kube_object(v.uid, &key(name))).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Err(failure_of(refused(e)).await),
                    Err(r) => return Err(failure_of(r).await),
                }
            }
            // A Service's deletion answers the Service (the API's document says so, and the
            // Python client reads one); the others' a Status.
            if kind == "Service" {
                return Ok(Json(live).into_response());
            }
            return Ok(Json(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "kind": plural, "uid": live["metadata"]["uid"]}}))
            .into_response());
        }
        (m, _) => return Err(Failure::method_not_allowed(format!("{m} is not served on {plural}"))),
    };
    let w = k8s::write::stored(kind, &obj, ns, validation)?;
    if dry {
        // Refused as the write would be: another user's object.
        let owner = app.lock().ctl.kube_object(&key(&w.name)).map(|o| o.uid);
        if owner.is_some_and(|o| v.uid != 0 && o != v.uid) {
            return Err(Failure::forbidden(format!("{plural} \"{}\" belongs to another user", w.name)));
        }
        let mut out = obj.clone();
        out["apiVersion"] = json!("v1");
        out["kind"] = json!(kind);
        return Ok(with_warnings((StatusCode::from_u16(status).expect("status"), Json(out)).into_response(), &w.warnings));
    }
    let o = control::kube::KubeObject {
        kind: kind.into(),
        namespace: ns.into(),
        name: w.name.clone(),
        uid: v.uid,
        created: now(),
        data: w.stored,
    };
    match app.with(|c| c.put_kube_object(v.uid, o)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(failure_of(refused(e)).await),
        Err(r) => return Err(failure_of(r).await),
    }
    let out =
        current_of(app, v, kind, ns, &w.name).ok_or_else(|| Failure::from_code(500, "the object was written but cannot be read back"))?;
    Ok(with_warnings((StatusCode::from_u16(status).expect("status"), Json(out)).into_response(), &w.warnings))
}

/// A create, replace, patch or delete of a Namespace. Anyone makes one, and owns it: only its
/// owner and root make objects in it (the controller checks). Deleting it deletes everything
/// in it (its Jobs' jobs cancelled, its Deployments' services stopped); it reads `Terminating`
/// until its services are gone, as kubectl's `delete namespace` waits for.
async fn write_namespace(
    app: &App,
    v: &Viewer,
    method: &Method,
    t: &Target,
    headers: &HeaderMap,
    q: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, Failure> {
    let (Some(name), &Method::DELETE) = (t.name.as_deref(), method) else {
        return write_stored(app, v, method, t, "", headers, q, body).await;
    };
    if t.sub.is_some() {
        return Err(Failure::no_route());
    }
    let dry = dry_run(q)?;
    let live = current_of(app, v, "Namespace", "", name).ok_or_else(|| Failure::not_found("namespaces", "", name))?;
    if dry {
        // Refused as the deletion would be.
        let owner = app.lock().ctl.kube_object(&control::kube::namespace_key(name)).map(|o| o.uid);
        return match owner {
            None => Err(Failure::forbidden(format!("namespace {name} may not be deleted"))),
            Some(o) if v.uid != 0 && o != v.uid => Err(Failure::forbidden(format!("namespace {name} belongs to another user"))),
            Some(_) => Ok(Json(live).into_response()),
        };
    }
    let (uid, at) = (v.uid, now());
    match app.with(|c| c.delete_namespace(at, uid, name)).await {
        Ok(Ok(_)) => {
            app.wake_nodes();
            app.wake.notify_one();
            app.service_wake.notify_one();
        }
        Ok(Err(e)) => return Err(failure_of(refused(e)).await),
        Err(r) => return Err(failure_of(r).await),
    }
    // A Status, as the API's document says of this call (the Python client reads one); the
    // namespace reads `Terminating` until its services have stopped, which kubectl waits for.
    Ok(Json(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
        "details": {"name": name, "kind": "namespaces", "uid": live["metadata"]["uid"]}}))
    .into_response())
}

/// The batch job a written Job is: `sbatch`'s options from it, read by `sbatch`'s own parser,
/// its command the arguments of a script that runs it (with `JOB_COMPLETION_INDEX` where the
/// Job is `Indexed`), in the user's home directory (or `/tmp`).
fn batch_request(uid: u32, w: &k8s::jobs::WrittenJob) -> Result<wire::SubmitRequest, Failure> {
    let bad = |field: &str, why: String| {
        let mut f = Failure::from_code(422, format!("Job.batch \"{}\" is invalid: {field}: {why}", w.name));
        f.details = Some(("Job".into(), w.name.clone()));
        f.causes = vec![("FieldValueInvalid".into(), why, field.into())];
        f
    };
    let cf = "spec.template.spec.containers[0]";
    let pod = Value::Object(w.pod.clone());
    let mut argv = vec![format!("--job-name={}", w.name)];
    if w.completions > 1 || w.indexed {
        let last = w.completions - 1;
        let range = if last == 0 { "0".to_string() } else { format!("0-{last}") };
        let throttle = if w.parallelism < w.completions { format!("%{}", w.parallelism) } else { String::new() };
        argv.push(format!("--array={range}{throttle}"));
    }
    if let Some(d) = w.deadline {
        argv.push(format!("--time={}:{:02}:{:02}", d / 3600, d % 3600 / 60, d % 60));
    }
    if w.suspend {
        argv.push("--hold".into());
    }
    let res = &pod["resources"];
    if let Some(c) = res["cpus"].as_f64() {
        argv.push(format!("--cpus-per-task={}", c.ceil().max(1.0) as u64));
    }
    if !res["memory"].is_null() {
        let q: wire::Quantity =
            serde_json::from_value(res["memory"].clone()).map_err(|e| bad(&format!("{cf}.resources.limits.memory"), e.to_string()))?;
        let bytes =
            control::service::parse_memory(&q).map_err(|e| bad(&format!("{cf}.resources.limits.memory"), format!("Invalid value: {e}")))?;
        argv.push(format!("--mem={}M", bytes.div_ceil(1 << 20).max(1)));
    }
    if let Some(g) = res["gpus"].as_u64() {
        argv.push(format!("--gpus={g}"));
    }
    if let Some(p) = pod["qos"].as_str() {
        argv.push(format!("--qos={p}"));
    }
    if let Some(p) = pod["partition"].as_str() {
        argv.push(format!("--partition={p}"));
    }
    // The writer's home directory, where it is a directory; else /tmp (where Slurm's
    // slurmstepd goes when it cannot enter a job's directory). Output files are the writer's
    // alone (umask 077) either way.
    let home = work_dir_of(uid);
    match (pod["image"].as_str(), pod["workdir"].as_str()) {
        (Some(i), d) => {
            argv.push(format!("--container-image={i}"));
            if let Some(d) = d {
                argv.push(format!("--container-workdir={d}"));
            }
        }
        (None, Some(d)) => argv.push(format!("--chdir={d}")),
        (None, None) => {}
    }
    argv.push(JOB_SCRIPT.into());
    for k in ["command", "args"] {
        argv.extend(pod[k].as_array().into_iter().flatten().filter_map(|x| x.as_str().map(str::to_string)));
    }
    let index = if w.indexed { "export JOB_COMPLETION_INDEX=\"${SLURM_ARRAY_TASK_ID:-0}\"\n" } else { "" };
    let script = format!("#!/bin/sh\n# The Pod of Kubernetes Job {}: its container's command.\n{index}exec \"$@\"\n", w.name);
    let mut batch =
        slurmcli::parse_sbatch(&argv, now(), &mut |_| Ok(script.clone())).map_err(|e| bad("spec", format!("Invalid value: {}", e.0)))?;
    // Its ConfigMap and Secret volumes, read by the write checks (an image is required there).
    if let (Some(c), Some(v)) = (batch.container.as_mut(), pod.get("volumes")) {
        c.volumes = serde_json::from_value(v.clone()).map_err(|e| bad(&format!("{cf}.volumeMounts"), format!("Invalid value: {e}")))?;
        c.check().map_err(|e| bad(&format!("{cf}.volumeMounts"), format!("Invalid value: {}", e.0)))?;
    }
    let env: Vec<(String, String)> =
        pod["env"].as_object().into_iter().flatten().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect();
    Ok(wire::SubmitRequest { batch, cwd: home, host: KUBE_HOST.into(), env, umask: Some(0o077) })
}

/// The name a written Job's script has (`scontrol show job`'s `Command`).
const JOB_SCRIPT: &str = "kubernetes-job";

/// The submit host of a Job written through the Kubernetes API.
const KUBE_HOST: &str = "kubernetes-api";

/// The stored Job `name` in `ns`, if any, and whether `v` may see it.
fn stored_job(app: &App, v: &Viewer, ns: &str, name: &str) -> Result<control::kube::KubeObject, Failure> {
    let o = app.lock().ctl.kube_object(&("Job".to_string(), ns.to_string(), name.to_string())).filter(|o| !o.buried()).cloned();
    match o {
        Some(o) if o.uid == v.uid || v.uid == 0 => Ok(o),
        Some(o) if v.sees(o.uid) => Err(Failure::forbidden(format!("jobs.batch \"{name}\" belongs to another user"))),
        Some(_) => Err(Failure::not_found("jobs", "batch", name)),
        None if k8s::objects::job_id(name).is_some() && current_of(app, v, "Job", ns, name).is_some() => {
            Err(Failure::method_not_allowed(format!(
                "jobs.batch \"{name}\" is an sbatch job's Job: change it with scontrol (hold, release, update) and cancel it with scancel"
            )))
        }
        None => Err(Failure::not_found("jobs", "batch", name)),
    }
}

/// A create, replace, patch or delete of a Job: a batch job, submitted as `sbatch` submits one
/// (the site's policy, limits and checks), its suspension `scontrol hold`/`release`, its
/// deletion `scancel`'s.
#[allow(clippy::too_many_arguments)]
async fn write_job(
    app: &App,
    v: &Viewer,
    method: &Method,
    t: &Target,
    ns: &str,
    headers: &HeaderMap,
    q: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, Failure> {
    let validation = k8s::write::Validation::parse(q.get("fieldValidation").map(String::as_str))?;
    let dry = dry_run(q)?;
    if t.sub.is_some() {
        return Err(Failure::method_not_allowed(format!("{method} is not served on jobs/{}", t.sub.as_deref().unwrap_or(""))));
    }
    match (method.as_str(), t.name.as_deref()) {
        ("POST", None) => {
            let obj = json_body(headers, body)?;
            let w = k8s::jobs::write(&obj, ns, validation, &|kind, name| env_source(app, v, ns, kind, name))?;
            let key = ("Job".to_string(), ns.to_string(), w.name.clone());
            if app.lock().ctl.kube_object(&key).is_some_and(|o| !o.buried()) {
                let mut f = Failure::from_code(409, format!("jobs.batch \"{}\" already exists", w.name));
                f.reason = "AlreadyExists";
                f.details = Some(("jobs".into(), w.name.clone()));
                return Err(f);
            }
            let mut req = batch_request(v.uid, &w)?;
            let mut warnings = w.warnings.clone();
            if dry {
                req.batch.test_only = true;
                if let Err(r) = crate::jobs::submit_as(app, v.uid, req, None, Some(w.backoff_limit)).await {
                    return Err(failure_of(r).await);
                }
                let mut out = obj.clone();
                out["apiVersion"] = json!("batch/v1");
                out["kind"] = json!("Job");
                return Ok(with_warnings((StatusCode::CREATED, Json(out)).into_response(), &warnings));
            }
            let o = control::kube::KubeObject {
                kind: "Job".into(),
                namespace: ns.into(),
                name: w.name.clone(),
                uid: v.uid,
                created: now(),
                data: w.stored.clone(),
            };
            let r = match crate::jobs::submit_as(app, v.uid, req, Some(o), Some(w.backoff_limit)).await {
                Ok(r) => r,
                Err(resp) => return Err(failure_of(resp).await),
            };
            warnings.extend(r.user_msg);
            let out = current_of(app, v, "Job", ns, &w.name)
                .ok_or_else(|| Failure::from_code(500, "the Job was written but cannot be read back"))?;
            Ok(with_warnings((StatusCode::CREATED, Json(out)).into_response(), &warnings))
        }
        ("PUT" | "PATCH", Some(name)) => {
            let o = stored_job(app, v, ns, name)?;
            let live = current_of(app, v, "Job", ns, name).ok_or_else(|| Failure::not_found("jobs", "batch", name))?;
            let new = written_over(method, headers, body, &live)?;
            if new["metadata"]["name"].as_str().is_some_and(|n| n != name) {
                return Err(Failure::bad_request("the name of the object does not match the name on the URL"));
            }
            if let Some(rv) = new["metadata"]["resourceVersion"].as_str()
                && rv != live["metadata"]["resourceVersion"].as_str().unwrap_or("")
            {
                return Err(conflict("jobs.batch", name));
            }
            let (c, warnings) = k8s::jobs::change(name, &live, &new, &o.data, validation)?;
            if dry {
                return Ok(with_warnings(Json(new).into_response(), &warnings));
            }
            let was = o.data["spec"]["suspend"] == true;
            let ids: Vec<u64> = o.job_ids().collect();
            let uid = v.uid;
            let mut data = c.stored;
            data["job"] = o.data["job"].clone();
            let updated = control::kube::KubeObject { data, ..o };
            let r = app
                .with(|ctl| {
                    ctl.check_namespace(uid, &updated.namespace)?;
                    if c.suspend != was {
                        // Its tasks not started are held, or released (those that run go on).
                        for &id in &ids {
                            match ctl.hold(uid, id, c.suspend) {
                                Ok(()) | Err(control::Refused::Conflict(_) | control::Refused::NotFound(_)) => {}
                                Err(e) => return Err(e),
                            }
                        }
                    }
                    ctl.put_kube_object(uid, updated)
                })
                .await;
            match r {
                Ok(Ok(())) => app.wake.notify_one(),
                Ok(Err(e)) => return Err(failure_of(refused(e)).await),
                Err(r) => return Err(failure_of(r).await),
            }
            let out = current_of(app, v, "Job", ns, name)
                .ok_or_else(|| Failure::from_code(500, "the Job was written but cannot be read back"))?;
            Ok(with_warnings(Json(out).into_response(), &warnings))
        }
        ("DELETE", Some(name)) => {
            let o = stored_job(app, v, ns, name)?;
            let uid_s = current_of(app, v, "Job", ns, name).map(|l| l["metadata"]["uid"].clone()).unwrap_or(Value::Null);
            if !dry {
                // `scancel` of its job (its array's every task), and the object gone.
                let (ids, key, uid, t) = (o.job_ids().collect(), o.key(), v.uid, now());
                let r = app
                    .with(|ctl| {
                        ctl.cancel_many(t, uid, ids, None);
                        ctl.bury_kube_job(uid, &key)
                    })
                    .await;
                match r {
                    Ok(Ok(())) => {
                        app.wake_nodes();
                        app.wake.notify_one();
                    }
                    Ok(Err(e)) => return Err(failure_of(refused(e)).await),
                    Err(r) => return Err(failure_of(r).await),
                }
            }
            Ok(Json(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": "batch", "kind": "jobs", "uid": uid_s}}))
            .into_response())
        }
        (m, _) => Err(Failure::method_not_allowed(format!("{m} is not served on jobs"))),
    }
}
