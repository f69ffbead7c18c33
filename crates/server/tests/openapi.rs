//! The OpenAPI document (`wire::OPENAPI`) against the router: every `.route(PATH, METHODS)` in
//! the server's sources is documented with exactly those methods, and every documented
//! operation is routed. Each handler's identity check decides the operation's security
//! (`agent_ok`: the cluster secret; `user_of`/`viewer_of`: a user token; neither: none), a
//! handler that reads a body, path or query has a documented body, parameters and 400, and
//! one that answers 404 documents it.
//!
//! The routes are read from the source text (comments and strings aside), so a route added
//! anywhere in `crates/server/src` is seen; a way of adding routes this reader does not
//! understand (`nest`, `merge`, `route_service`, a method router it cannot name) fails the
//! test rather than slip past it.
//!
//! The Kubernetes API's routes (`src/kube.rs`: `/version`, `/api/...`, `/apis/...`, `/openapi/v3`) are not
//! Tandem's API and are not in this document (Kubernetes clients read discovery instead): the
//! test checks that they stay under those prefixes, in that one file, and that the document
//! names no path there.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One `.route(...)`: where, the path, and each method with its handler.
#[derive(Debug)]
struct Route {
    file: PathBuf,
    path: String,
    methods: Vec<(String, String)>,
}

/// `src` with comments blanked out (strings and character literals kept), so that positions
/// and line numbers stay as they were.
fn strip_comments(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    out[i] = b' ';
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        out[i] = b' ';
                        out[i + 1] = b' ';
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        out[i] = b' ';
                        out[i + 1] = b' ';
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if b[i] != b'\n' {
                            out[i] = b' ';
                        }
                        i += 1;
                    }
                }
            }
            b'r' if matches!(b.get(i + 1), Some(b'"') | Some(b'#')) && (i == 0 || !is_ident(b[i - 1])) => {
                // A raw string: r"..." or r#"..."#.
                let mut j = i + 1;
                let mut hashes = 0;
                while b.get(j) == Some(&b'#') {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
                j += 1;
                while j < b.len() && !b[j..].starts_with(&close) {
                    j += 1;
                }
                i = j + close.len();
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'\'' => {
                // A character literal ('x', '\n', '\''), else a lifetime.
                if b.get(i + 1) == Some(&b'\\') {
                    i += 2;
                    while i < b.len() && b[i] != b'\'' {
                        i += 1;
                    }
                    i += 1;
                } else if b.get(i + 2) == Some(&b'\'') {
                    i += 3;
                } else {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8(out).expect("still UTF-8: only ASCII was replaced")
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The text from `open` (a `(`) to its matching `)`, exclusive, skipping strings.
fn balanced(code: &str, open: usize) -> &str {
    let b = code.as_bytes();
    assert_eq!(b[open], b'(');
    let (mut depth, mut i) = (0, open);
    while i < b.len() {
        match b[i] {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return &code[open + 1..i];
                }
            }
            b'"' => {
                i += 1;
                while b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            _ => {}
        }
        i += 1;
    }
    panic!("unbalanced parentheses");
}

const METHODS: [&str; 9] = ["get", "post", "put", "delete", "patch", "head", "options", "trace", "connect"];

/// The methods and handlers of a method router such as `get(a).post(b)`: each call at the top
/// level must be one of axum's method functions with a handler named by a path.
fn method_router(expr: &str, at: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() || c == b'.' {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && (is_ident(b[i]) || b[i] == b':') {
            i += 1;
        }
        let name = expr[start..i].rsplit("::").next().unwrap_or("");
        assert!(
            i > start && b.get(i) == Some(&b'('),
            "{at}: cannot read the method router `{expr}`: write `.route(\"/path\", get(handler).post(other))`, or teach this test"
        );
        let inner = balanced(expr, i);
        let handler = inner.trim();
        assert!(
            METHODS.contains(&name) && !handler.is_empty() && handler.bytes().all(|c| is_ident(c) || c == b':'),
            "{at}: cannot read `{name}({handler})` in `{expr}`: use axum's method functions with a named handler, or teach this test"
        );
        out.push((name.to_string(), handler.rsplit("::").next().unwrap().to_string()));
        i += inner.len() + 2;
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every source file of the server, with comments blanked.
fn sources() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    files.sort();
    files.into_iter().map(|f| (f.clone(), strip_comments(&std::fs::read_to_string(&f).unwrap()))).collect()
}

/// The Kubernetes API's paths (served by `kube.rs`, described by Kubernetes' discovery).
const KUBE_PREFIXES: [&str; 4] = ["/version", "/api", "/apis", "/openapi/v3"];

fn routes(sources: &[(PathBuf, String)]) -> Vec<Route> {
    let mut out = Vec::new();
    for (file, code) in sources {
        let name = file.file_name().unwrap().to_string_lossy();
        for other in [".nest(", ".nest_service(", ".merge(", ".route_service(", ".route_layer("] {
            assert!(!code.contains(other), "{name}: `{other}` adds routes this test cannot see: teach it, then document them");
        }
        let kube = name == "kube.rs";
        for (at, _) in code.match_indices(".route(") {
            let line = code[..at].matches('\n').count() + 1;
            let where_ = format!("{name}:{line}");
            let args = balanced(code, at + ".route".len());
            let args = args.trim_start();
            assert!(args.starts_with('"'), "{where_}: a route's path must be a string literal");
            let end = args[1..].find('"').unwrap() + 1;
            let path = args[1..end].to_string();
            let rest = args[end + 1..].trim_start().strip_prefix(',').unwrap_or_else(|| panic!("{where_}: no method router")).trim();
            let rest = rest.strip_suffix(',').unwrap_or(rest);
            let k8s = KUBE_PREFIXES.iter().any(|p| path == *p || path.starts_with(&format!("{p}/")));
            assert_eq!(kube, k8s, "{where_}: the Kubernetes API's routes ({KUBE_PREFIXES:?}) are kube.rs's, and only they");
            if kube {
                continue;
            }
            assert!(!path.contains("{*"), "{where_}: wildcard route {path} cannot be documented path by path");
            out.push(Route { file: file.clone(), path, methods: method_router(rest, &where_) });
        }
    }
    out
}

/// The body of `fn name` in `code` (from its signature to the closing brace at the start of a
/// line), if there is one.
fn fn_text<'a>(code: &'a str, name: &str) -> Option<&'a str> {
    let at = code.match_indices(&format!("fn {name}(")).map(|(i, _)| i).find(|&i| i == 0 || !is_ident(code.as_bytes()[i - 1]))?;
    let end = code[at..].find("\n}").map_or(code.len(), |e| at + e + 2);
    Some(&code[at..end])
}

fn doc() -> Value {
    serde_json::from_str(wire::OPENAPI).expect("the OpenAPI document is JSON")
}

fn documented(d: &Value) -> BTreeMap<(String, String), Value> {
    let mut out = BTreeMap::new();
    for (path, item) in d["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if METHODS.contains(&method.as_str()) {
                let mut op = op.clone();
                // Path-level parameters count for each operation.
                if let Some(p) = item.get("parameters") {
                    let mut all = p.as_array().unwrap().clone();
                    all.extend(op.get("parameters").and_then(Value::as_array).cloned().unwrap_or_default());
                    op["parameters"] = Value::Array(all);
                }
                out.insert((method.clone(), path.clone()), op);
            }
        }
    }
    out
}

#[test]
fn the_document_lists_exactly_the_routes() {
    let src = sources();
    let routes = routes(&src);
    assert!(routes.len() >= 16, "found only {} routes: is the reader still reading the router?", routes.len());
    let mut served = BTreeSet::new();
    for r in &routes {
        for (m, _) in &r.methods {
            assert!(served.insert((m.clone(), r.path.clone())), "{} {} is routed twice", m.to_uppercase(), r.path);
        }
    }
    let docs = documented(&doc());
    let documented: BTreeSet<(String, String)> = docs.keys().cloned().collect();
    for (_, p) in &documented {
        assert!(
            !KUBE_PREFIXES.iter().any(|k| p == k || p.starts_with(&format!("{k}/"))),
            "{p} is the Kubernetes API's, not this document's"
        );
    }
    let fmt = |s: &BTreeSet<(String, String)>| s.iter().map(|(m, p)| format!("  {} {p}", m.to_uppercase())).collect::<Vec<_>>().join("\n");
    let undocumented: BTreeSet<_> = served.difference(&documented).cloned().collect();
    let unrouted: BTreeSet<_> = documented.difference(&served).cloned().collect();
    assert!(
        undocumented.is_empty() && unrouted.is_empty(),
        "the router and the OpenAPI document (crates/wire/src/openapi.rs) differ.\nRouted, not documented:\n{}\nDocumented, not routed:\n{}",
        fmt(&undocumented),
        fmt(&unrouted)
    );
}

#[test]
fn each_operation_documents_what_its_handler_does() {
    let src = sources();
    let d = doc();
    let docs = documented(&d);
    let mut errs = Vec::new();
    for r in routes(&src) {
        let code = &src.iter().find(|(f, _)| *f == r.file).unwrap().1;
        for (method, handler) in &r.methods {
            let at = format!("{} {} ({handler})", method.to_uppercase(), r.path);
            let Some(op) = docs.get(&(method.clone(), r.path.clone())) else { continue };
            let body = fn_text(code, handler).unwrap_or_else(|| panic!("{at}: no fn {handler} in {}", r.file.display()));
            let security = op.get("security").unwrap_or(&d["security"]);
            let schemes: BTreeSet<&str> =
                security.as_array().unwrap().iter().flat_map(|s| s.as_object().unwrap().keys().map(String::as_str)).collect();
            let wants: BTreeSet<&str> = if body.contains("node_serial(") && body.contains("user_of(") {
                // A user, or else a node speaking for itself.
                ["bearerAuth", "nodeCredential"].into()
            } else if body.contains("node_serial(") {
                ["nodeCredential"].into()
            } else if body.contains("proxy_ok(") {
                ["proxyCredential"].into()
            } else if body.contains("verify_join(") {
                ["joinToken"].into()
            } else if body.contains("user_of(") || body.contains("viewer_of(") || body.contains("admin_of(") {
                ["bearerAuth"].into()
            } else {
                BTreeSet::new()
            };
            if schemes != wants {
                errs.push(format!("{at}: documented security {schemes:?}, the handler checks {wants:?}"));
            }
            let responses = op["responses"].as_object().unwrap();
            let params: Vec<&Value> = op.get("parameters").and_then(Value::as_array).map(|p| p.iter().collect()).unwrap_or_default();
            // A JSON body, or a raw one streamed on (an agent's upload of a task's output).
            let reads_body = body.contains("json_body(") || body.contains("body: Body");
            if reads_body != op.get("requestBody").is_some() {
                errs.push(format!("{at}: the handler reads a body: {reads_body}; the document has one: {}", !reads_body));
            }
            let reads_query = body.contains("Query<");
            let has_query = params.iter().any(|p| p["in"] == "query");
            if reads_query != has_query {
                errs.push(format!("{at}: the handler reads a query: {reads_query}; query parameters documented: {has_query}"));
            }
            let parses = reads_body || reads_query || body.contains("Path<") || body.contains("BAD_REQUEST");
            if parses && !responses.contains_key("400") {
                errs.push(format!("{at}: the handler can refuse a malformed request, and no 400 is documented"));
            }
            if body.contains("NOT_FOUND") && !responses.contains_key("404") {
                errs.push(format!("{at}: the handler answers 404, and no 404 is documented"));
            }
            if body.contains("Path(") && !body.contains("Result<Path<") {
                errs.push(format!("{at}: take `Result<Path<..>, PathRejection>`, so a bad path gets the JSON error body"));
            }
            if body.contains("Query(") && !body.contains("Result<Query<") {
                errs.push(format!("{at}: take `Result<Query<..>, QueryRejection>`, so a bad query gets the JSON error body"));
            }
        }
    }
    assert!(errs.is_empty(), "{}", errs.join("\n"));
}

#[test]
fn the_reader_reads_routes_as_written() {
    let code = strip_comments(
        "fn r(r: Router) -> Router {\n    // .route(\"/commented\", get(x))\n    r.route(\"/a/{id}\", get(a).delete(b))\n        .route(\n            \"/b\",\n            post(crate::c),\n        )\n}\n/* .route(\"/block\", get(y)) */\nconst S: &str = \"// not a comment\";\n",
    );
    let found = routes(&[(PathBuf::from("x.rs"), code)]);
    let got: Vec<(String, Vec<(String, String)>)> = found.into_iter().map(|r| (r.path, r.methods)).collect();
    assert_eq!(
        got,
        vec![
            ("/a/{id}".to_string(), vec![("get".to_string(), "a".to_string()), ("delete".to_string(), "b".to_string())]),
            ("/b".to_string(), vec![("post".to_string(), "c".to_string())]),
        ]
    );
    let odd = std::panic::catch_unwind(|| method_router("any(x)", "t"));
    assert!(odd.is_err(), "an unknown method router is refused");
}

#[test]
fn priority_breakdowns_match_their_schema() {
    // The one reply type outside `wire` (its own tests check the rest): `sched::Breakdown`.
    let d = doc();
    let v = serde_json::to_value(sched::Breakdown::default()).unwrap();
    let keys: BTreeSet<&String> = v.as_object().unwrap().keys().collect();
    let schema = &d["components"]["schemas"]["Breakdown"];
    let documented: BTreeSet<&String> = schema["properties"].as_object().unwrap().keys().collect();
    let required: BTreeSet<&String> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| match x {
            Value::String(s) => s,
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(keys, documented, "sched::Breakdown and its schema differ");
    assert_eq!(keys, required, "every Breakdown field is always sent");
}
