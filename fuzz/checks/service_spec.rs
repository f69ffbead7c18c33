//! The `service_spec` fuzz check: `wire::parse_spec` (TOML, YAML, JSON) and
//! `control::ServiceSpec::resolve`.
//!
//! Input: a spec file's text, read under each file name the format is picked by (`.toml`,
//! `.yaml`, `.json`, and none: TOML, then YAML). Property: a spec that resolves survives the JSON
//! round trip that `tandem service apply` puts it through, and resolves the same. Shared by
//! `fuzz_targets/service_spec.rs` and `crates/wire/tests/fuzz_regressions.rs`.

/// Runs one input; panics on a bug.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for path in ["svc.toml", "svc.yaml", "svc.json", "svc"] {
        let Ok(spec) = wire::parse_spec(text, path) else { continue };
        let Ok(resolved) = spec.resolve() else { continue };
        let json = serde_json::to_string(&spec).expect("a ServiceSpec serializes");
        let back =
            wire::parse_spec(&json, "svc.json").unwrap_or_else(|e| panic!("the JSON of a resolved spec does not parse: {e}\n{json}"));
        assert_eq!(back, spec, "the JSON round trip changed the spec: {json}");
        assert_eq!(back.resolve().as_ref(), Ok(&resolved), "the JSON round trip resolves differently: {json}");
    }
}
