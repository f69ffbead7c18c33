//! Resource versions and watches over views that are computed, not stored. The controller
//! recomputes a kind's objects when it is read or watched; a [`Cache`] compares them with the
//! last computation and gives each object that changed the next resource version, so an object
//! keeps its version until it changes, a list's version is the newest, and a watch from version
//! `v` gets exactly the changes after `v`: `ADDED`, `MODIFIED`, and `DELETED` from the deleted
//! objects kept (tombstones, the newest [`TOMBSTONES`]). A version older than the cache (before
//! the controller's start, or tombstones since dropped) is `410 Expired`: the client lists again.
//!
//! Versions are `boot << 32` plus a counter, so they only grow, across restarts too.

use crate::select::{Fields, Labels};
use crate::status::Failure;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Deleted objects remembered per kind, for watches from before their deletion.
pub const TOMBSTONES: usize = 10_000;

/// The first resource version of a controller's `boot`-th start.
pub fn first_version(boot: u64) -> u64 {
    boot << 32
}

#[derive(Debug, Clone)]
struct Entry {
    /// The object as computed (no `resourceVersion`).
    obj: Value,
    /// The version of its last change.
    rv: u64,
    /// The version it appeared at.
    created: u64,
}

/// One change.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub kind: &'static str,
    /// The object (for `DELETED`, its last state), with its `resourceVersion`.
    pub obj: Value,
    /// Its version.
    pub rv: u64,
    /// The version it appeared at.
    pub created: u64,
}

/// One kind's objects, as last computed, with their versions.
#[derive(Debug, Clone)]
pub struct Cache {
    /// Watches from before this version get 410.
    base: u64,
    /// The newest version.
    rv: u64,
    objs: BTreeMap<(String, String), Entry>,
    /// (version deleted at, version created at, the last state as JSON text: a third of a
    /// parsed object's memory): oldest first.
    tombstones: VecDeque<(u64, u64, Box<str>)>,
}

fn key(o: &Value) -> (String, String) {
    let m = &o["metadata"];
    (m["namespace"].as_str().unwrap_or("").to_string(), m["name"].as_str().unwrap_or("").to_string())
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).expect("a tombstone is the JSON it was written as")
}

fn with_rv(mut o: Value, rv: u64) -> Value {
    o["metadata"]["resourceVersion"] = json!(rv.to_string());
    o
}

impl Cache {
    /// An empty cache whose history starts at `rv` (the shared counter's value now).
    pub fn new(rv: u64) -> Cache {
        Cache { base: rv, rv, objs: BTreeMap::new(), tombstones: VecDeque::new() }
    }

    /// The newest version.
    pub fn version(&self) -> u64 {
        self.rv
    }

    /// Takes a new computation of every object; each that is new, changed or gone takes the next
    /// value of `counter` (shared by the kinds, so versions are comparable across them).
    pub fn refresh(&mut self, objs: Vec<Value>, counter: &mut u64) {
        let mut seen = BTreeSet::new();
        for o in objs {
            let k = key(&o);
            seen.insert(k.clone());
            match self.objs.get_mut(&k) {
                Some(e) if e.obj == o => {}
                Some(e) => {
                    *counter += 1;
                    (e.obj, e.rv) = (o, *counter);
                }
                None => {
                    *counter += 1;
                    self.objs.insert(k, Entry { obj: o, rv: *counter, created: *counter });
                }
            }
        }
        let gone: Vec<(String, String)> = self.objs.keys().filter(|k| !seen.contains(*k)).cloned().collect();
        for k in gone {
            if let Some(e) = self.objs.remove(&k) {
                *counter += 1;
                self.tombstones.push_back((*counter, e.created, e.obj.to_string().into_boxed_str()));
            }
        }
        while self.tombstones.len() > TOMBSTONES {
            if let Some((rv, _, _)) = self.tombstones.pop_front() {
                self.base = self.base.max(rv);
            }
        }
        self.rv = self.rv.max(*counter);
    }

    /// Every object, with its version, in key order.
    pub fn list(&self) -> Vec<Value> {
        self.objs.values().map(|e| with_rv(e.obj.clone(), e.rv)).collect()
    }

    /// The changes after version `since`, oldest first; 410 when the cache no longer knows them.
    pub fn since(&self, since: u64) -> Result<Vec<Change>, Failure> {
        if since < self.base {
            return Err(expired(since));
        }
        let mut out: Vec<Change> = self
            .objs
            .values()
            .filter(|e| e.rv > since)
            .map(|e| Change {
                kind: if e.created > since { "ADDED" } else { "MODIFIED" },
                obj: with_rv(e.obj.clone(), e.rv),
                rv: e.rv,
                created: e.created,
            })
            .collect();
        out.extend(self.tombstones.iter().filter(|(rv, _, _)| *rv > since).map(|(rv, created, text)| Change {
            kind: "DELETED",
            obj: with_rv(parse(text), *rv),
            rv: *rv,
            created: *created,
        }));
        out.sort_by_key(|c| c.rv);
        Ok(out)
    }

    /// What existed at version `at`, as far as the cache knows: the objects that were created
    /// by then and are still here, or were deleted after it (their last state).
    pub fn existed_at(&self, at: u64) -> Vec<Value> {
        let live = self.objs.values().filter(|e| e.created <= at).map(|e| e.obj.clone());
        let dead = self.tombstones.iter().filter(|(rv, created, _)| *rv > at && *created <= at).map(|(_, _, text)| parse(text));
        live.chain(dead).collect()
    }
}

/// The `410 Expired` of a watch from a version the server no longer knows.
pub fn expired(rv: u64) -> Failure {
    Failure { code: 410, reason: "Expired", message: format!("too old resource version: {rv}"), details: None, causes: Vec::new() }
}

/// What one watch has told its client: the objects it matched, so an object that stops matching
/// its selectors is `DELETED` for it, and one that starts is `ADDED`.
#[derive(Debug, Clone, Default)]
pub struct Watcher {
    /// Namespace (none: all).
    pub namespace: Option<String>,
    /// Label selector.
    pub labels: Labels,
    /// Field selector.
    pub fields: Fields,
    known: BTreeSet<(String, String)>,
}

impl Watcher {
    /// A watch of objects in `namespace` matching the selectors.
    pub fn new(namespace: Option<String>, labels: Labels, fields: Fields) -> Watcher {
        Watcher { namespace, labels, fields, known: BTreeSet::new() }
    }

    /// Whether `o` is one this watch is about.
    pub fn matches(&self, o: &Value) -> bool {
        self.namespace.as_deref().is_none_or(|ns| o["metadata"]["namespace"] == ns) && self.labels.matches(o) && self.fields.matches(o)
    }

    /// Takes `objs` as what the client already knows (a watch from a version: what existed then).
    pub fn knows(&mut self, objs: &[Value]) {
        let keys: Vec<(String, String)> = objs.iter().filter(|o| self.matches(o)).map(key).collect();
        self.known.extend(keys);
    }

    /// The events of `changes` for this watch: (type, object).
    pub fn events(&mut self, changes: Vec<Change>) -> Vec<(&'static str, Value)> {
        let mut out = Vec::new();
        for c in changes {
            let k = key(&c.obj);
            let was = self.known.contains(&k);
            let is = c.kind != "DELETED" && self.matches(&c.obj);
            match (was, is) {
                (false, true) => {
                    self.known.insert(k);
                    out.push(("ADDED", c.obj));
                }
                (true, true) => out.push(("MODIFIED", c.obj)),
                (true, false) => {
                    self.known.remove(&k);
                    out.push(("DELETED", c.obj));
                }
                (false, false) => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(name: &str, phase: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "default", "labels": {"app": "x"}}, "status": {"phase": phase}})
    }

    #[test]
    fn versions_move_only_with_changes_and_watches_see_each_change_once() {
        let mut counter = first_version(3);
        let mut c = Cache::new(counter);
        c.refresh(vec![obj("a", "Pending"), obj("b", "Running")], &mut counter);
        let v1 = c.version();
        assert_eq!(v1, (3 << 32) + 2);
        c.refresh(vec![obj("a", "Pending"), obj("b", "Running")], &mut counter);
        assert_eq!(c.version(), v1, "nothing changed, no new version");
        let listed = c.list();
        assert_eq!(listed[0]["metadata"]["resourceVersion"], ((3u64 << 32) + 1).to_string());
        c.refresh(vec![obj("a", "Running"), obj("c", "Pending")], &mut counter);
        let ch = c.since(v1).unwrap();
        let got: Vec<(&str, &str)> = ch.iter().map(|c| (c.kind, c.obj["metadata"]["name"].as_str().unwrap())).collect();
        assert_eq!(got, [("MODIFIED", "a"), ("ADDED", "c"), ("DELETED", "b")]);
        assert!(c.since(c.version()).unwrap().is_empty());
        assert_eq!(c.since(first_version(2)).unwrap_err().code, 410, "a version of an earlier start");
        // What existed at v1: a and b (b since deleted).
        let names: Vec<String> = c.existed_at(v1).iter().map(|o| o["metadata"]["name"].as_str().unwrap().to_string()).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn a_watch_with_a_selector_sees_objects_enter_and_leave_it() {
        let mut counter = 0;
        let mut c = Cache::new(0);
        c.refresh(vec![obj("a", "Pending")], &mut counter);
        let v = c.version();
        let mut w = Watcher::new(Some("default".into()), Labels::default(), Fields::parse("status.phase=Pending", "Pod").unwrap());
        w.knows(&c.existed_at(v));
        c.refresh(vec![obj("a", "Running"), obj("b", "Pending")], &mut counter);
        let ev: Vec<(&str, String)> =
            w.events(c.since(v).unwrap()).into_iter().map(|(t, o)| (t, o["metadata"]["name"].as_str().unwrap().to_string())).collect();
        assert_eq!(ev, [("DELETED", "a".to_string()), ("ADDED", "b".to_string())]);
    }

    #[test]
    fn dropped_tombstones_expire_the_versions_before_them() {
        let mut counter = 0;
        let mut c = Cache::new(0);
        for i in 0..=TOMBSTONES {
            c.refresh(vec![obj(&format!("p{i}"), "Running")], &mut counter);
        }
        c.refresh(vec![], &mut counter);
        assert_eq!(c.since(1).unwrap_err().reason, "Expired");
        assert_eq!(c.since(c.version() - 1).unwrap().len(), 1);
    }
}
