//! Label selectors (`-l`: `a=b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, `a>1`) and
//! field selectors (`--field-selector`: `f=v`, `f!=v`, on the fields each kind supports), as the
//! API server parses them; matched against an object's JSON.

use crate::status::Failure;
use serde_json::Value;

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
    Gt(i64),
    Lt(i64),
}

/// A parsed label selector: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels(Vec<(String, Op)>);

fn bad(what: &str, sel: &str, why: &str) -> Failure {
    Failure::bad_request(format!("unable to parse requirement: {what} selector {sel:?}: {why}"))
}

fn key_ok(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty() && p.len() <= 253 && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.".contains(&b))
    });
    name_ok && prefix_ok
}

/// Splits at top-level commas (not inside parentheses).
fn split_top(s: &str) -> Result<Vec<&str>, &'static str> {
    let (mut depth, mut start, mut out) = (0i32, 0, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err("unbalanced parentheses");
                }
            }
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced parentheses");
    }
    out.push(&s[start..]);
    Ok(out)
}

fn set_of(s: &str) -> Option<Vec<String>> {
    let inner = s.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(|v| v.trim().to_string()).collect())
}

impl Labels {
    /// Parses `-l`'s value; an empty one selects everything.
    pub fn parse(sel: &str) -> Result<Labels, Failure> {
        let mut out = Vec::new();
        if sel.trim().is_empty() {
            return Ok(Labels(out));
        }
        for req in split_top(sel).map_err(|e| bad("label", sel, e))? {
            let req = req.trim();
            let word_op = |op: &str| {
                req.find(op)
                    .map(|i| (req[..i].trim(), req[i + op.len()..].trim()))
                    .filter(|(k, _)| !k.is_empty() && !k.contains(['=', '!', '<', '>']))
            };
            let (key, op) = if let Some(k) = req.strip_prefix('!') {
                (k.trim(), Op::NotExists)
            } else if let Some((k, v)) = word_op(" notin ") {
                (k, Op::NotIn(set_of(v).ok_or_else(|| bad("label", sel, "expected a set: (a,b)"))?))
            } else if let Some((k, v)) = word_op(" in ") {
                (k, Op::In(set_of(v).ok_or_else(|| bad("label", sel, "expected a set: (a,b)"))?))
            } else if let Some((k, v)) = req.split_once("!=") {
                (k.trim(), Op::NotIn(vec![v.trim().to_string()]))
            } else if let Some((k, v)) = req.split_once("==").or_else(|| req.split_once('=')) {
                (k.trim(), Op::In(vec![v.trim().to_string()]))
            } else if let Some((k, v)) = req.split_once('>') {
                (k.trim(), Op::Gt(v.trim().parse().map_err(|_| bad("label", sel, "expected an integer after >"))?))
            } else if let Some((k, v)) = req.split_once('<') {
                (k.trim(), Op::Lt(v.trim().parse().map_err(|_| bad("label", sel, "expected an integer after <"))?))
            } else {
                (req, Op::Exists)
            };
            if !key_ok(key) {
                return Err(bad("label", sel, &format!("invalid label key {key:?}")));
            }
            let values_ok = |vs: &[String]| vs.iter().all(|v| crate::objects::label_value_ok(v));
            if let Op::In(vs) | Op::NotIn(vs) = &op
                && !values_ok(vs)
            {
                return Err(bad("label", sel, "invalid label value"));
            }
            out.push((key.to_string(), op));
        }
        Ok(Labels(out))
    }

    /// Whether an object's labels satisfy it.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        self.0.iter().all(|(k, op)| {
            let v = labels.get(k).and_then(Value::as_str);
            match op {
                Op::In(vs) => v.is_some_and(|v| vs.iter().any(|x| x == v)),
                Op::NotIn(vs) => v.is_none_or(|v| !vs.iter().any(|x| x == v)),
                Op::Exists => v.is_some(),
                Op::NotExists => v.is_none(),
                Op::Gt(n) => v.and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v > *n),
                Op::Lt(n) => v.and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v < *n),
            }
        })
    }
}

/// A parsed field selector: every term must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fields(Vec<(String, bool, String)>);

/// The fields a kind may be selected on, beyond `metadata.name` and `metadata.namespace`
/// (the API server's field label conversions).
pub fn fields_of(kind: &str) -> &'static [&'static str] {
    match kind {
        "Pod" => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        "Node" => &["spec.unschedulable"],
        "Namespace" => &["status.phase"],
        "Job" => &["status.successful"],
        "ReplicaSet" => &["status.replicas"],
        "Event" => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        _ => &[],
    }
}

/// Splits at commas not escaped by a backslash, and unescapes `\,`, `\=`, `\\`.
fn split_escaped(s: &str, at: char) -> Vec<String> {
    let (mut out, mut cur, mut esc) = (Vec::new(), String::new(), false);
    for c in s.chars() {
        if esc {
            cur.push(c);
            esc = false;
        } else if c == '\\' {
            esc = true;
        } else if c == at {
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    out.push(cur);
    out
}

impl Fields {
    /// Parses `--field-selector`'s value for `kind`; an empty one selects everything.
    pub fn parse(sel: &str, kind: &str) -> Result<Fields, Failure> {
        let mut out = Vec::new();
        if sel.trim().is_empty() {
            return Ok(Fields(out));
        }
        for term in split_escaped(sel, ',') {
            let (k, eq, v) = if let Some((k, v)) = term.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (k, true, v)
            } else {
                return Err(Failure::bad_request(format!("invalid field selector: {term:?}: expected FIELD=VALUE or FIELD!=VALUE")));
            };
            let k = k.trim();
            if !["metadata.name", "metadata.namespace"].contains(&k) && !fields_of(kind).contains(&k) {
                return Err(Failure::bad_request(format!("field label not supported: {k}")));
            }
            out.push((k.to_string(), eq, v.to_string()));
        }
        Ok(Fields(out))
    }

    /// Whether an object's fields satisfy it.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(k, eq, want)| {
            let v = k.split('.').try_fold(obj, |o, part| o.get(part));
            let got = match v {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            // An absent boolean reads as false (`spec.unschedulable!=true`).
            let got = if got.is_empty() && (k == "spec.unschedulable" || k == "spec.hostNetwork") { "false".into() } else { got };
            (got == *want) == *eq
        })
    }

    /// The name a `metadata.name=X` term asks for, if any (a fast path: one object).
    pub fn name(&self) -> Option<&str> {
        self.0.iter().find(|(k, eq, _)| k == "metadata.name" && *eq).map(|(_, _, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj() -> Value {
        json!({"metadata": {"name": "p", "namespace": "default", "labels": {"app": "web", "tier": "front", "n": "5"}},
               "spec": {"nodeName": "node1"}, "status": {"phase": "Running"}})
    }

    #[test]
    fn label_selectors_as_kubectl_writes_them() {
        let o = obj();
        for (sel, want) in [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app=db", false),
            ("app,tier=front", true),
            ("app in (web,db)", true),
            ("app in (db)", false),
            ("app notin (db)", true),
            ("missing notin (db)", true),
            ("!missing", true),
            ("!app", false),
            ("missing", false),
            ("n>4", true),
            ("n<5", false),
            ("app in (web, db),tier", true),
        ] {
            assert_eq!(Labels::parse(sel).unwrap().matches(&o), want, "{sel}");
        }
    }

    #[test]
    fn malformed_label_selectors_are_400s_that_say_why() {
        for sel in ["app in web", "a=b=c", "(", "app in (a", "=x", "n>x", "bad key!=1=", "a b=c", "app=no spaces here"] {
            let e = Labels::parse(sel).expect_err(sel);
            assert_eq!(e.code, 400, "{sel}");
            assert!(e.message.contains("unable to parse requirement"), "{}", e.message);
        }
    }

    #[test]
    fn field_selectors_on_the_fields_each_kind_has() {
        let o = obj();
        for (sel, want) in [
            ("status.phase=Running", true),
            ("status.phase!=Running", false),
            ("metadata.name=p,spec.nodeName=node1", true),
            ("spec.nodeName==node2", false),
            ("spec.nodeName=", false),
            ("status.podIP=", true),
        ] {
            assert_eq!(Fields::parse(sel, "Pod").unwrap().matches(&o), want, "{sel}");
        }
        assert_eq!(Fields::parse("metadata.name=p", "Pod").unwrap().name(), Some("p"));
        let e = Fields::parse("status.phase=Running", "Deployment").unwrap_err();
        assert_eq!(e.message, "field label not supported: status.phase");
        assert_eq!(Fields::parse("nonsense", "Pod").unwrap_err().code, 400);
        let node = json!({"metadata": {"name": "n"}, "spec": {}});
        assert!(Fields::parse("spec.unschedulable=false", "Node").unwrap().matches(&node));
        assert!(Fields::parse(r"metadata.name=a\,b", "Pod").unwrap().matches(&json!({"metadata": {"name": "a,b"}})));
    }
}
