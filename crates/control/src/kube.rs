//! Objects written through the Kubernetes API that are not views of Tandem's own records
//! (Services, ConfigMaps, Secrets): kept as written, keyed by kind, namespace and name, with
//! their owner, persisted with everything else the controller acknowledges.

use crate::Controller;
use serde::{Deserialize, Serialize};

/// (kind, namespace, name); a Namespace's own namespace is `""`.
pub type KubeKey = (String, String, String);

use crate::service::DEFAULT_NAMESPACE;

/// The key of the Namespace `ns`.
pub fn namespace_key(ns: &str) -> KubeKey {
    ("Namespace".into(), String::new(), ns.into())
}

/// One stored object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KubeObject {
    /// Kind (`Service`).
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Who wrote it first: only they (and root) change or delete it.
    pub uid: u32,
    /// Created, Unix seconds.
    pub created: i64,
    /// The object as written (metadata's labels and annotations, and its body: `spec`,
    /// `data`, ...).
    pub data: serde_json::Value,
}

impl KubeObject {
    /// A written Job's job ids: its job's, or its array's every task's (`completions` of them
    /// where it is `Indexed` or has more than one); empty for another kind.
    pub fn job_ids(&self) -> std::ops::Range<u64> {
        let Some(first) = self.data["job"].as_u64() else { return 0..0 };
        let spec = &self.data["spec"];
        let count = if spec["completionMode"] == "Indexed" || spec["completions"].as_u64().is_some_and(|c| c > 1) {
            spec["completions"].as_u64().unwrap_or(1)
        } else {
            1
        };
        first..first.saturating_add(count)
    }

    /// Whether it is a deleted Job's tombstone ([`Controller::bury_kube_job`]).
    pub fn buried(&self) -> bool {
        self.data["deleted"] == true
    }

    /// Whether it is a Namespace being deleted ([`Controller::delete_namespace`]).
    pub fn terminating(&self) -> bool {
        self.kind == "Namespace" && self.data["terminating"] == true
    }

    /// Its key.
    pub fn key(&self) -> KubeKey {
        (self.kind.clone(), self.namespace.clone(), self.name.clone())
    }
}

impl Controller {
    /// The stored object of `key`.
    pub fn kube_object(&self, key: &KubeKey) -> Option<&KubeObject> {
        self.kube.get(key)
    }

    /// Every stored object of `kind`, in key order.
    pub fn kube_objects<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a KubeObject> + 'a {
        self.kube.values().filter(move |o| o.kind == kind)
    }

    /// Whether `uid` may make or change objects in the Kubernetes namespace `ns`: anyone in
    /// `default`; elsewhere the namespace's owner (who created it) and root, while it is not
    /// being deleted.
    pub fn check_namespace(&self, uid: u32, ns: &str) -> Result<(), crate::Refused> {
        if ns.is_empty() || ns == DEFAULT_NAMESPACE {
            return Ok(());
        }
        match self.kube.get(&namespace_key(ns)) {
            None => {
                Err(crate::Refused::NotFound(format!("namespaces \"{ns}\" not found: create it first (`kubectl create namespace {ns}`)")))
            }
            Some(o) if o.terminating() => {
                Err(crate::Refused::Forbidden(format!("unable to create new content in namespace {ns} because it is being terminated")))
            }
            Some(o) if uid != 0 && o.uid != uid => Err(crate::Refused::Forbidden(format!(
                "namespace {ns} belongs to another user: only its owner and root make objects in it"
            ))),
            Some(_) => Ok(()),
        }
    }

    /// Stores `o` (a new object, or a new version of one `uid` owns), in a namespace `uid` may
    /// write in ([`Controller::check_namespace`]).
    pub fn put_kube_object(&mut self, uid: u32, mut o: KubeObject) -> Result<(), crate::Refused> {
        let key = o.key();
        if o.kind == "Namespace" {
            if o.name == DEFAULT_NAMESPACE || !crate::service::dns_label(&o.name) {
                return Err(crate::Refused::Invalid(format!(
                    "namespace {:?} cannot be made: name one a DNS label other than default",
                    o.name
                )));
            }
            // Kubernetes' own (`kube-system`, `kube-public`: what tools trust) are root's to make.
            if uid != 0 && o.name.starts_with("kube-") {
                return Err(crate::Refused::Forbidden(format!("namespace {}: names starting kube- are root's to make", o.name)));
            }
            if self.kube.get(&key).is_some_and(KubeObject::terminating) {
                return Err(crate::Refused::Conflict(format!("namespace {} is being deleted", o.name)));
            }
            o.data["terminating"] = serde_json::Value::Null;
        } else {
            self.check_namespace(uid, &o.namespace)?;
        }
        if let Some(old) = self.kube.get(&key) {
            if uid != 0 && old.uid != uid {
                return Err(crate::Refused::Forbidden(format!("{} {} belongs to another user", o.kind, o.name)));
            }
            (o.uid, o.created) = (old.uid, old.created);
        }
        self.kube.insert(key.clone(), o.clone());
        self.dirty_kube.push((key, Some(o)));
        Ok(())
    }

    /// Deletes the object of `key`, which `uid` must own.
    pub fn delete_kube_object(&mut self, uid: u32, key: &KubeKey) -> Result<(), crate::Refused> {
        let Some(old) = self.kube.get(key) else {
            return Err(crate::Refused::NotFound(format!("no {} named {}", key.0, key.2)));
        };
        if uid != 0 && old.uid != uid {
            return Err(crate::Refused::Forbidden(format!("{} {} belongs to another user", key.0, key.2)));
        }
        self.kube.remove(key);
        self.dirty_kube.push((key.clone(), None));
        Ok(())
    }

    /// Deletes the Job of `key`, leaving a tombstone (`"deleted": true` in its data, under the
    /// name `NAME#JOB`, which no object can have): its job, cancelled, stays hidden from the
    /// Kubernetes API's views until it leaves memory, when [`Controller::purge`] drops the
    /// tombstone. The name is free at once.
    pub fn bury_kube_job(&mut self, uid: u32, key: &KubeKey) -> Result<(), crate::Refused> {
        let Some(old) = self.kube.get(key).filter(|o| !o.buried()).cloned() else {
            return Err(crate::Refused::NotFound(format!("no {} named {}", key.0, key.2)));
        };
        self.delete_kube_object(uid, key)?;
        let mut o = old;
        o.name = format!("{}#{}", o.name, o.data["job"]);
        o.data["deleted"] = serde_json::Value::Bool(true);
        let k = o.key();
        self.kube.insert(k.clone(), o.clone());
        self.dirty_kube.push((k, Some(o)));
        Ok(())
    }

    /// Deletes the Jobs whose `ttlSecondsAfterFinished` has passed since every task of their job
    /// ended, as Kubernetes' TTL-after-finished controller does (a Job whose job left memory
    /// ended at least `min_job_age` ago). Looked at once a second at most.
    pub(crate) fn expire_kube_jobs(&mut self, now: model::Time) {
        if now <= self.last_ttl_check {
            return;
        }
        self.last_ttl_check = now;
        let due: Vec<(KubeKey, u32)> = self
            .kube
            .values()
            .filter(|o| o.kind == "Job" && !o.buried())
            .filter_map(|o| {
                let ttl = o.data["spec"]["ttlSecondsAfterFinished"].as_i64()?;
                let mut end = 0;
                for id in o.job_ids() {
                    match self.jobs.get(&id) {
                        Some(j) if j.state.is_final() => end = end.max(j.end.unwrap_or(0)),
                        Some(_) => return None,
                        None if self.tail_of(id).is_some_and(|t| t.pending()) => return None,
                        None => {}
                    }
                }
                (end.saturating_add(ttl) <= now).then(|| (o.key(), o.uid))
            })
            .collect();
        for (key, uid) in due {
            // Only a Job not already buried is listed: this cannot be refused.
            let _ = self.bury_kube_job(uid, &key);
        }
    }

    /// Drops the tombstones of buried Jobs whose jobs have left memory.
    pub(crate) fn drop_buried(&mut self) {
        let gone: Vec<KubeKey> = self
            .kube
            .values()
            .filter(|o| o.kind == "Job" && o.buried())
            .filter(|o| {
                o.data["job"].as_u64().is_none_or(|id| {
                    self.tail_of(id).is_none()
                        && !self.jobs.values().any(|j| j.req.id.0 == id || j.array.is_some_and(|a| a.array_job == id))
                })
            })
            .map(KubeObject::key)
            .collect();
        for key in gone {
            self.kube.remove(&key);
            self.dirty_kube.push((key, None));
        }
    }

    /// Deletes the namespace `ns` (its owner or root) and everything in it, as Kubernetes'
    /// namespace controller does: its Services, ConfigMaps and Secrets at once, its Jobs'
    /// jobs cancelled, its Deployments' services deleted (their replicas stop). The namespace
    /// reads `Terminating`, nothing new can be made in it, until its last service is gone
    /// ([`Controller::drop_terminated_namespaces`]). Answers the jobs cancelled.
    pub fn delete_namespace(&mut self, now: model::Time, uid: u32, ns: &str) -> Result<Vec<u64>, crate::Refused> {
        let key = namespace_key(ns);
        let Some(o) = self.kube.get(&key).cloned() else {
            return Err(if ns == DEFAULT_NAMESPACE {
                crate::Refused::Forbidden("namespace default may not be deleted".into())
            } else {
                crate::Refused::NotFound(format!("namespaces \"{ns}\" not found"))
            });
        };
        if uid != 0 && o.uid != uid {
            return Err(crate::Refused::Forbidden(format!("namespace {ns} belongs to another user")));
        }
        let inside: Vec<KubeObject> = self.kube.values().filter(|x| x.kind != "Namespace" && x.namespace == ns).cloned().collect();
        let mut cancelled = Vec::new();
        for x in inside {
            if x.kind == "Job" && !x.buried() {
                let ids: Vec<u64> = x.job_ids().collect();
                // As the Job's owner (the namespace's, or root): with their rights, no more.
                self.cancel_many(now, x.uid, ids.clone(), None);
                cancelled.extend(ids);
                self.bury_kube_job(0, &x.key())?;
            } else if x.kind != "Job" {
                self.delete_kube_object(0, &x.key())?;
            }
        }
        let services: Vec<String> =
            self.services.iter().filter(|(n, s)| crate::service::split_name(n).0 == ns && !s.deleting).map(|(n, _)| n.clone()).collect();
        for s in services {
            self.delete_service(0, &s)?;
        }
        let mut o = o;
        o.data["terminating"] = serde_json::Value::Bool(true);
        self.kube.insert(key.clone(), o.clone());
        self.dirty_kube.push((key, Some(o)));
        self.drop_terminated_namespaces();
        Ok(cancelled)
    }

    /// Drops the namespaces being deleted that no service is left in.
    pub(crate) fn drop_terminated_namespaces(&mut self) {
        let first = namespace_key("");
        let done: Vec<KubeKey> = self
            .kube
            .range(first..)
            .map(|(_, o)| o)
            .take_while(|o| o.kind == "Namespace")
            .filter(|o| o.terminating())
            .filter(|o| !self.services.keys().any(|n| crate::service::split_name(n).0 == o.name))
            .map(KubeObject::key)
            .collect();
        for key in done {
            self.kube.remove(&key);
            self.dirty_kube.push((key, None));
        }
    }

    /// Takes the stored objects as loaded.
    pub fn restore_kube_objects(&mut self, list: Vec<KubeObject>) {
        self.kube = list.into_iter().map(|o| (o.key(), o)).collect();
    }
}
