//! `metav1.Status`: how a Kubernetes server says no. kubectl and the client libraries branch on
//! `reason` (`IsNotFound`, `IsConflict`, ...) and print `message`.

use serde_json::{Value, json};

/// A refusal, as the HTTP status code and the `Status` body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason` (`NotFound`, `BadRequest`, ...).
    pub reason: &'static str,
    /// What went wrong, for a person.
    pub message: String,
    /// The object it is about: (kind's resource, name), for `details`.
    pub details: Option<(String, String)>,
    /// The fields at fault (`details.causes`: reason, message, field), which kubectl prints
    /// after "is invalid:".
    pub causes: Vec<(String, String, String)>,
}

impl Failure {
    /// 404 for a path or resource this server does not serve.
    pub fn no_route() -> Failure {
        Failure {
            code: 404,
            reason: "NotFound",
            message: "the server could not find the requested resource".into(),
            details: None,
            causes: Vec::new(),
        }
    }

    /// 404 for an object that does not exist: `pods "x" not found`, as the API server words it.
    pub fn not_found(resource: &str, group: &str, name: &str) -> Failure {
        let what = if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") };
        Failure {
            code: 404,
            reason: "NotFound",
            message: format!("{what} \"{name}\" not found"),
            details: Some((resource.into(), name.into())),
            causes: Vec::new(),
        }
    }

    /// 400 for a malformed request (a selector, a parameter).
    pub fn bad_request(message: impl Into<String>) -> Failure {
        Failure { code: 400, reason: "BadRequest", message: message.into(), details: None, causes: Vec::new() }
    }

    /// 405 for a verb this server does not serve on a resource.
    pub fn method_not_allowed(message: impl Into<String>) -> Failure {
        Failure { code: 405, reason: "MethodNotAllowed", message: message.into(), details: None, causes: Vec::new() }
    }

    /// 401: no identity, or a bad token.
    pub fn unauthorized(message: impl Into<String>) -> Failure {
        Failure { code: 401, reason: "Unauthorized", message: message.into(), details: None, causes: Vec::new() }
    }

    /// 403: an identity without the right.
    pub fn forbidden(message: impl Into<String>) -> Failure {
        Failure { code: 403, reason: "Forbidden", message: message.into(), details: None, causes: Vec::new() }
    }

    /// The reason Kubernetes gives for an HTTP status code that no more specific reason fits.
    pub fn from_code(code: u16, message: impl Into<String>) -> Failure {
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            405 => "MethodNotAllowed",
            409 => "Conflict",
            410 => "Expired",
            413 => "RequestEntityTooLarge",
            415 => "UnsupportedMediaType",
            422 => "Invalid",
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        };
        Failure { code, reason, message: message.into(), details: None, causes: Vec::new() }
    }

    /// The `Status` object.
    pub fn body(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some((kind, name)) = &self.details {
            v["details"] = json!({"name": name, "kind": kind});
        }
        if !self.causes.is_empty() {
            let causes: Vec<Value> = self.causes.iter().map(|(r, m, f)| json!({"reason": r, "message": m, "field": f})).collect();
            v["details"]["causes"] = json!(causes);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_object_reads_as_the_api_server_words_it() {
        let f = Failure::not_found("deployments", "apps", "web");
        assert_eq!(f.message, "deployments.apps \"web\" not found");
        let b = f.body();
        assert_eq!(b["reason"], "NotFound");
        assert_eq!(b["code"], 404);
        assert_eq!(b["details"]["name"], "web");
        assert_eq!(Failure::not_found("pods", "", "p").message, "pods \"p\" not found");
        assert_eq!(Failure::from_code(409, "x").reason, "Conflict");
        assert_eq!(Failure::from_code(599, "x").reason, "InternalError");
    }
}
