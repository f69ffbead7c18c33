//! What the Kubernetes API's handlers (`kube`, `podexec`) share: a Pod as its log and exec find
//! it, and Tandem's refusals as `metav1.Status` failures.

use axum::response::Response;
use k8s::Failure;

/// A Pod that runs, as its log and exec find it.
pub(crate) struct PodRef {
    pub(crate) name: String,
    /// The Tandem job it is a task or replica of.
    pub(crate) job: u64,
    /// Its node.
    pub(crate) node: String,
}

/// The failure a controller's refusal is, keeping its code (400 stays a bad request).
pub(crate) fn failure_of_refused(e: &control::Refused) -> Failure {
    let code = match e {
        control::Refused::NotFound(_) => 404,
        control::Refused::Forbidden(_) => 403,
        control::Refused::Unauthorized(_) => 401,
        control::Refused::Conflict(_) => 409,
        control::Refused::Busy(_) => 503,
        control::Refused::Invalid(_) => 400,
    };
    Failure::from_code(code, e.to_string())
}

/// The failure a Tandem error reply stands for.
pub(crate) async fn failure_of(r: Response) -> Failure {
    let code = r.status().as_u16();
    let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap_or_default();
    let msg =
        serde_json::from_slice::<wire::ApiError>(&body).map(|e| e.error).unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned());
    let mut f = Failure::from_code(code, msg);
    if code == 400 {
        // The controller refused the spec: to a Kubernetes client that is an invalid object.
        f = Failure::from_code(422, f.message);
    }
    f
}
