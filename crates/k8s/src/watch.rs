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
    /// The object as computed, with its `resourceVersion` (`rv`) set.
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

/// An object's key in a cache: its namespace and name.
pub fn key(o: &Value) -> (String, String) {
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
        self.refresh_keeping(objs, &BTreeSet::new(), counter);
    }

    /// [`Cache::refresh`] with a part of the computation skipped: `kept` are the keys
    /// (namespace, name) of objects known unchanged since the last one (their inputs were the
    /// same), kept as they are; every other object not in `objs` is gone.
    pub fn refresh_keeping(&mut self, objs: Vec<Value>, kept: &BTreeSet<(String, String)>, counter: &mut u64) {
        let mut seen = BTreeSet::new();
        for o in objs {
            let k = key(&o);
            seen.insert(k.clone());
            match self.objs.get_mut(&k) {
                Some(e) => {
                    // Compared as kept: with the version it has.
                    let o = with_rv(o, e.rv);
                    if e.obj != o {
                        *counter += 1;
                        (e.obj, e.rv) = (with_rv(o, *counter), *counter);
                    }
                }
                None => {
                    *counter += 1;
                    self.objs.insert(k, Entry { obj: with_rv(o, *counter), rv: *counter, created: *counter });
                }
            }
        }
        let gone: Vec<(String, String)> = self.objs.keys().filter(|k| !seen.contains(*k) && !kept.contains(*k)).cloned().collect();
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
        self.objs.values().map(|e| e.obj.clone()).collect()
    }

    /// [`Cache::since`] without copies: `f` sees each change after `since`, oldest first, as
    /// (the object with its `resourceVersion`, its version, whether it was deleted).
    pub fn since_each(&self, since: u64, mut f: impl FnMut(&Value, u64, bool)) -> Result<(), Failure> {
        if since < self.base {
            return Err(expired(since));
        }
        let mut live: Vec<&Entry> = self.objs.values().filter(|e| e.rv > since).collect();
        live.sort_by_key(|e| e.rv);
        let mut dead = self.tombstones.iter().filter(|(rv, _, _)| *rv > since).peekable();
        for e in live {
            while let Some((rv, _, text)) = dead.next_if(|(rv, _, _)| *rv < e.rv) {
                f(&with_rv(parse(text), *rv), *rv, true);
            }
            f(&e.obj, e.rv, false);
        }
        for (rv, _, text) in dead {
            f(&with_rv(parse(text), *rv), *rv, true);
        }
        Ok(())
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
                obj: e.obj.clone(),
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
        changes.into_iter().filter_map(|c| self.event(&c.obj, c.kind == "DELETED").map(|ty| (ty, c.obj))).collect()
    }

    /// The event one change (of `obj`, `deleted` or not) is for this watch, if any.
    pub fn event(&mut self, obj: &Value, deleted: bool) -> Option<&'static str> {
        let k = key(obj);
        let was = self.known.contains(&k);
        let is = !deleted && self.matches(obj);
        match (was, is) {
            (false, true) => {
                self.known.insert(k);
                Some("ADDED")
            }
            (true, true) => Some("MODIFIED"),
            (true, false) => {
                self.known.remove(&k);
                Some("DELETED")
            }
            (false, false) => None,
        }
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
    fn objects_kept_unchanged_keep_their_versions_and_the_rest_not_computed_are_gone() {
        let mut counter = 0;
        let mut c = Cache::new(0);
        c.refresh(vec![obj("a", "Running"), obj("b", "Running"), obj("c", "Running")], &mut counter);
        let v = c.version();
        let kept = BTreeSet::from([("default".to_string(), "a".to_string())]);
        c.refresh_keeping(vec![obj("b", "Succeeded")], &kept, &mut counter);
        let got: Vec<(&str, String)> =
            c.since(v).unwrap().iter().map(|x| (x.kind, x.obj["metadata"]["name"].as_str().unwrap().into())).collect();
        assert_eq!(got, [("MODIFIED", "b".to_string()), ("DELETED", "c".to_string())], "a kept as it was");
        let a = c.list().into_iter().find(|o| o["metadata"]["name"] == "a").unwrap();
        assert_eq!(a["status"]["phase"], "Running");
        assert_eq!(key(&a), ("default".to_string(), "a".to_string()));
    }

    #[test]
    fn a_visit_of_the_changes_sees_what_since_lists_in_the_same_order() {
        let mut counter = 0;
        let mut c = Cache::new(0);
        c.refresh(vec![obj("a", "Pending"), obj("b", "Pending"), obj("c", "Pending")], &mut counter);
        let v = c.version();
        c.refresh(vec![obj("a", "Running"), obj("c", "Pending")], &mut counter);
        c.refresh(vec![obj("c", "Running"), obj("d", "Pending")], &mut counter);
        let listed: Vec<(String, u64, bool)> = c
            .since(v)
            .unwrap()
            .into_iter()
            .map(|x| (x.obj["metadata"]["name"].as_str().unwrap().to_string(), x.rv, x.kind == "DELETED"))
            .collect();
        let mut visited = Vec::new();
        c.since_each(v, |o, rv, deleted| {
            assert_eq!(o["metadata"]["resourceVersion"], rv.to_string());
            visited.push((o["metadata"]["name"].as_str().unwrap().to_string(), rv, deleted));
        })
        .unwrap();
        assert_eq!(visited, listed);
        let names: Vec<&str> = visited.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, ["b", "c", "d", "a"], "b deleted, c changed, d added, then a deleted (left out of the last computation)");
        assert!(visited[0].2 && visited[3].2 && !visited[1].2);
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
