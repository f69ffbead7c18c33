//! Objects written through the Kubernetes API that are not views of Tandem's own records
//! (Services, ConfigMaps, Secrets): kept as written, keyed by kind, namespace and name, with
//! their owner, persisted with everything else the controller acknowledges.

use crate::Controller;
use serde::{Deserialize, Serialize};

/// (kind, namespace, name).
pub type KubeKey = (String, String, String);

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
    /// Whether it is a deleted Job's tombstone ([`Controller::bury_kube_job`]).
    pub fn buried(&self) -> bool {
        self.data["deleted"] == true
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

    /// Stores `o` (a new object, or a new version of one `uid` owns).
    pub fn put_kube_object(&mut self, uid: u32, mut o: KubeObject) -> Result<(), crate::Refused> {
        let key = o.key();
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

    /// Takes the stored objects as loaded.
    pub fn restore_kube_objects(&mut self, list: Vec<KubeObject>) {
        self.kube = list.into_iter().map(|o| (o.key(), o)).collect();
    }
}
