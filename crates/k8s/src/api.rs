//! What is served, and where: the resources, the discovery documents kubectl and the Python
//! client read first (legacy discovery: `/api`, `/apis`, one `APIResourceList` per
//! group-version), `/version`, and the parsing of a request path into a [`Route`].

use crate::status::Failure;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, APIVersions, GroupVersionForDiscovery, ServerAddressByClientCIDR,
};
use k8s_openapi::apimachinery::pkg::version::Info;

/// One resource served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resource {
    /// API group (`""`: the core group, under `/api`).
    pub group: &'static str,
    /// Version.
    pub version: &'static str,
    /// The plural name in paths (`pods`).
    pub plural: &'static str,
    /// The singular name (`pod`).
    pub singular: &'static str,
    /// The kind (`Pod`).
    pub kind: &'static str,
    /// Whether its objects live in a namespace.
    pub namespaced: bool,
    /// Short names (`po`).
    pub short: &'static [&'static str],
    /// Categories (`all`: `kubectl get all`).
    pub categories: &'static [&'static str],
}

impl Resource {
    /// `apps/v1`, or `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.to_string() } else { format!("{}/{}", self.group, self.version) }
    }

    /// Whether it is written through this API (the others are read and watched only; README,
    /// "For Kubernetes users").
    pub fn writable(&self) -> bool {
        matches!(self.kind, "Deployment" | "Job" | "Service" | "ConfigMap" | "Secret" | "Namespace")
    }

    /// Whether its objects are stored as written (not views of Tandem's own records).
    pub fn stored(&self) -> bool {
        matches!(self.kind, "Service" | "ConfigMap" | "Secret" | "Namespace")
    }

    /// The verbs served on it.
    pub fn verbs(&self) -> &'static [&'static str] {
        if self.writable() { &["create", "delete", "get", "list", "patch", "update", "watch"] } else { &["get", "list", "watch"] }
    }
}

const fn res(
    group: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    categories: &'static [&'static str],
) -> Resource {
    Resource { group, version: "v1", plural, singular, kind, namespaced, short, categories }
}

/// Every resource served, by group.
pub const RESOURCES: &[Resource] = &[
    res("", "namespaces", "namespace", "Namespace", false, &["ns"], &[]),
    res("", "nodes", "node", "Node", false, &["no"], &[]),
    res("", "pods", "pod", "Pod", true, &["po"], &["all"]),
    res("", "events", "event", "Event", true, &["ev"], &[]),
    res("", "services", "service", "Service", true, &["svc"], &["all"]),
    res("", "configmaps", "configmap", "ConfigMap", true, &["cm"], &[]),
    res("", "secrets", "secret", "Secret", true, &[], &[]),
    res("apps", "deployments", "deployment", "Deployment", true, &["deploy"], &["all"]),
    res("apps", "replicasets", "replicaset", "ReplicaSet", true, &["rs"], &["all"]),
    res("batch", "jobs", "job", "Job", true, &[], &["all"]),
];

/// The groups under `/apis`, in order.
pub const GROUPS: &[&str] = &["apps", "batch"];

/// The Kubernetes minor version whose API this server follows (kubectl warns of a skew of more
/// than one minor version).
pub const KUBE_MINOR: u32 = 37;

/// What a request path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/version`.
    Version,
    /// `/api`.
    CoreVersions,
    /// `/apis`.
    Groups,
    /// `/apis/GROUP`.
    Group(&'static str),
    /// `/api/v1`, `/apis/GROUP/VERSION`: the group-version's resources.
    Resources {
        /// Group.
        group: &'static str,
    },
    /// A resource's objects, or one of them.
    Objects(Target),
    /// `/openapi/v3`: the index of documents.
    OpenApiIndex,
    /// `/openapi/v3/api/v1`, `/openapi/v3/apis/GROUP/v1`.
    OpenApi(&'static str),
}

/// A resource, in a namespace or all, and maybe one object of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The resource.
    pub resource: &'static Resource,
    /// The namespace (none: every namespace, or a cluster-scoped resource).
    pub namespace: Option<String>,
    /// The object's name (none: the list).
    pub name: Option<String>,
    /// A subresource (`status`, `scale`, `log`).
    pub sub: Option<String>,
}

/// The route of a request path (without its query), or a 404.
pub fn route(path: &str) -> Result<Route, Failure> {
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segs.as_slice() {
        ["version"] | ["version", ""] => Ok(Route::Version),
        ["api"] | ["api", ""] => Ok(Route::CoreVersions),
        ["apis"] | ["apis", ""] => Ok(Route::Groups),
        ["openapi", "v3"] | ["openapi", "v3", ""] => Ok(Route::OpenApiIndex),
        ["openapi", "v3", "api", "v1"] => Ok(Route::OpenApi("")),
        ["openapi", "v3", "apis", g, "v1"] => GROUPS.iter().find(|x| *x == g).map(|g| Route::OpenApi(g)).ok_or_else(Failure::no_route),
        ["api", v, rest @ ..] => group_route("", v, rest),
        ["apis", g, rest @ ..] => {
            let group = GROUPS.iter().find(|x| *x == g).ok_or_else(Failure::no_route)?;
            match rest {
                [] | [""] => Ok(Route::Group(group)),
                [v, rest @ ..] => group_route(group, v, rest),
            }
        }
        _ => Err(Failure::no_route()),
    }
}

fn group_route(group: &'static str, version: &str, rest: &[&str]) -> Result<Route, Failure> {
    if version != "v1" {
        return Err(Failure::no_route());
    }
    let find = |plural: &str| RESOURCES.iter().find(|r| r.group == group && r.plural == plural).ok_or_else(Failure::no_route);
    let target = |resource: &'static Resource, namespace: Option<&str>, name: Option<&str>, sub: Option<&str>| {
        if namespace.is_some() && !resource.namespaced {
            return Err(Failure::no_route());
        }
        let (namespace, name) = (namespace.map(str::to_string), name.map(str::to_string));
        if name.as_deref() == Some("") || namespace.as_deref() == Some("") {
            return Err(Failure::no_route());
        }
        Ok(Route::Objects(Target { resource, namespace, name, sub: sub.map(str::to_string) }))
    };
    match rest {
        [] | [""] => Ok(Route::Resources { group }),
        // A namespace itself (`/api/v1/namespaces/NS`, and its `status`).
        ["namespaces", ns] if group.is_empty() => target(find("namespaces")?, None, Some(ns), None),
        ["namespaces", ns, "status"] if group.is_empty() => target(find("namespaces")?, None, Some(ns), Some("status")),
        ["namespaces", ns, plural] => target(find(plural)?, Some(ns), None, None),
        ["namespaces", ns, plural, name] => target(find(plural)?, Some(ns), Some(name), None),
        ["namespaces", ns, plural, name, sub] => target(find(plural)?, Some(ns), Some(name), Some(sub)),
        [plural] => target(find(plural)?, None, None, None),
        [plural, name] => {
            let r = find(plural)?;
            // A namespaced resource's objects are named within a namespace.
            if r.namespaced {
                return Err(Failure::no_route());
            }
            target(r, None, Some(name), None)
        }
        [plural, name, sub] => {
            let r = find(plural)?;
            if r.namespaced {
                return Err(Failure::no_route());
            }
            target(r, None, Some(name), Some(sub))
        }
        _ => Err(Failure::no_route()),
    }
}

/// `/version`. `version`: Tandem's own.
pub fn version(version: &str) -> Info {
    Info {
        major: "1".into(),
        minor: KUBE_MINOR.to_string(),
        git_version: format!("v1.{KUBE_MINOR}.0+tandem-{version}"),
        git_commit: String::new(),
        git_tree_state: "clean".into(),
        build_date: String::new(),
        go_version: String::new(),
        compiler: "rustc".into(),
        platform: "linux/amd64".into(),
        ..Default::default()
    }
}

/// `/api`.
pub fn core_versions() -> APIVersions {
    APIVersions {
        versions: vec!["v1".into()],
        server_address_by_client_cidrs: vec![ServerAddressByClientCIDR { client_cidr: "0.0.0.0/0".into(), server_address: String::new() }],
    }
}

fn api_group(name: &str) -> APIGroup {
    let gv = GroupVersionForDiscovery { group_version: format!("{name}/v1"), version: "v1".into() };
    APIGroup { name: name.into(), preferred_version: Some(gv.clone()), versions: vec![gv], server_address_by_client_cidrs: None }
}

/// `/apis`.
pub fn groups() -> APIGroupList {
    APIGroupList { groups: GROUPS.iter().map(|g| api_group(g)).collect() }
}

/// `/apis/GROUP`.
pub fn group(name: &str) -> APIGroup {
    api_group(name)
}

/// `/api/v1`, `/apis/GROUP/v1`.
pub fn resources(group: &str) -> APIResourceList {
    let list = RESOURCES.iter().filter(|r| r.group == group);
    let mut resources: Vec<APIResource> = list
        .map(|r| APIResource {
            name: r.plural.into(),
            singular_name: r.singular.into(),
            namespaced: r.namespaced,
            kind: r.kind.into(),
            verbs: r.verbs().iter().map(|v| v.to_string()).collect(),
            short_names: (!r.short.is_empty()).then(|| r.short.iter().map(|s| s.to_string()).collect()),
            categories: (!r.categories.is_empty()).then(|| r.categories.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        })
        .collect();
    // `kubectl scale` finds the scale subresource here.
    if group == "apps" {
        resources.push(APIResource {
            name: "deployments/scale".into(),
            group: Some("autoscaling".into()),
            version: Some("v1".into()),
            kind: "Scale".into(),
            namespaced: true,
            verbs: vec!["get".into(), "patch".into(), "update".into()],
            ..Default::default()
        });
    }
    // A Pod's output (`kubectl logs`).
    if group.is_empty() {
        resources.push(APIResource {
            name: "pods/log".into(),
            kind: "Pod".into(),
            namespaced: true,
            verbs: vec!["get".into()],
            ..Default::default()
        });
        // A command in a Pod (`kubectl exec`, `cp`): a WebSocket upgrade of GET or POST.
        resources.push(APIResource {
            name: "pods/exec".into(),
            kind: "PodExecOptions".into(),
            namespaced: true,
            verbs: vec!["create".into(), "get".into()],
            ..Default::default()
        });
    }
    APIResourceList { group_version: if group.is_empty() { "v1".into() } else { format!("{group}/v1") }, resources }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(p: &str) -> Target {
        match route(p) {
            Ok(Route::Objects(t)) => t,
            other => panic!("{p}: {other:?}"),
        }
    }

    #[test]
    fn paths_name_what_kubectl_asks_for() {
        assert_eq!(route("/version").unwrap(), Route::Version);
        assert_eq!(route("/api").unwrap(), Route::CoreVersions);
        assert_eq!(route("/apis").unwrap(), Route::Groups);
        assert_eq!(route("/apis/apps").unwrap(), Route::Group("apps"));
        assert_eq!(route("/api/v1").unwrap(), Route::Resources { group: "" });
        assert_eq!(route("/apis/batch/v1").unwrap(), Route::Resources { group: "batch" });
        let t = obj("/api/v1/namespaces/default/pods");
        assert_eq!((t.resource.kind, t.namespace.as_deref(), t.name), ("Pod", Some("default"), None));
        let t = obj("/apis/apps/v1/namespaces/default/deployments/web/scale");
        assert_eq!((t.resource.kind, t.name.as_deref(), t.sub.as_deref()), ("Deployment", Some("web"), Some("scale")));
        let t = obj("/api/v1/pods");
        assert_eq!((t.resource.kind, t.namespace), ("Pod", None));
        let t = obj("/api/v1/nodes/node1");
        assert_eq!((t.resource.kind, t.name.as_deref()), ("Node", Some("node1")));
        let t = obj("/api/v1/namespaces/default");
        assert_eq!((t.resource.kind, t.name.as_deref()), ("Namespace", Some("default")));
        let t = obj("/api/v1/namespaces");
        assert_eq!((t.resource.kind, t.name), ("Namespace", None));
    }

    #[test]
    fn what_is_not_served_is_a_404() {
        for p in [
            "/",
            "/api/v2",
            "/apis/extensions/v1beta1",
            "/apis/apps/v2/deployments",
            "/api/v1/persistentvolumeclaims",
            "/api/v1/pods/x",
            "/api/v1/namespaces/default/nodes",
            "/api/v1/namespaces//pods",
            "/api/v1/namespaces/default/pods/",
            "/apis/apps/v1/namespaces/a/deployments/b/c/d",
            "/apis/batch/v1/pods",
        ] {
            let e = route(p).expect_err(p);
            assert_eq!(e.code, 404, "{p}");
        }
    }

    #[test]
    fn discovery_lists_every_resource_once_with_its_verbs() {
        let core = resources("");
        assert_eq!(core.group_version, "v1");
        let names: Vec<&str> = core.resources.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["namespaces", "nodes", "pods", "events", "services", "configmaps", "secrets", "pods/log", "pods/exec"]);
        let apps = resources("apps");
        assert!(apps.resources.iter().all(|r| r.namespaced));
        assert!(apps.resources.iter().any(|r| r.name == "deployments/scale" && r.kind == "Scale"));
        assert!(resources("").resources.iter().any(|r| r.name == "pods/log" && r.verbs == ["get"]));
        assert!(apps.resources.iter().find(|r| r.name == "replicasets").unwrap().verbs == ["get", "list", "watch"]);
        assert_eq!(groups().groups.len(), GROUPS.len());
        let v = serde_json::to_value(groups()).unwrap();
        assert_eq!(v["kind"], "APIGroupList");
        assert_eq!(v["groups"][0]["preferredVersion"]["groupVersion"], "apps/v1");
        let v = serde_json::to_value(core_versions()).unwrap();
        assert_eq!(v["kind"], "APIVersions");
        assert_eq!(serde_json::to_value(version("0.1.0")).unwrap()["minor"], "37");
    }
}
