//! The `k8s_body` fuzz check: what a Kubernetes client sends that Tandem decodes itself, a
//! protobuf request body (`k8s::proto::decode`: the `k8s\0` envelope, a ConfigMap, Secret or
//! Deployment) and a `pods/exec` WebSocket message (`k8s::exec::from_client`).
//!
//! Input: the bytes. Properties: no panic; a decoded body is a JSON object naming its
//! `apiVersion` and `kind`, the same each time; a refusal is a 400 or a 415. Shared by
//! `fuzz_targets/k8s_body.rs` and `crates/k8s/tests/fuzz_regressions.rs`.

/// Runs one input; panics on a bug.
pub fn check(data: &[u8]) {
    for v5 in [false, true] {
        let _ = k8s::exec::from_client(data, v5);
    }
    // The bytes as they are, and as the body of an envelope's prefix (most inputs lack it).
    let framed = [b"k8s\0".as_slice(), data].concat();
    for body in [data, framed.as_slice()] {
        match k8s::proto::decode(body) {
            Ok(v) => {
                assert!(v.is_object() && v["apiVersion"].is_string() && v["kind"].is_string(), "{v}");
                assert_eq!(k8s::proto::decode(body).ok(), Some(v), "decoded twice, differently");
            }
            Err(f) => assert!(f.code == 400 || f.code == 415, "{f:?}"),
        }
    }
}
