//! The controller's state as records: what a commit writes, one record per stored thing. The
//! SQLite database writes them into its tables ([`crate::Store::apply`]); the etcd backend
//! writes each as one key (`crate::etcd`), and a standby applies the keys it watches back into
//! its replica as the same records. One mapping, both ways, so the two cannot drift.

use crate::StoreError;
use control::Dirty;

/// A job's row: the columns `sacct` filters on, beside the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRow {
    /// Slurm's name of its state.
    pub state: String,
    /// Its user.
    pub user: String,
    /// When it ended.
    pub end: Option<i64>,
    /// The job, as JSON.
    pub data: String,
}

/// One record: `None` where it is deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rec {
    /// A job with a record of its own.
    Job(u64, Option<JobRow>),
    /// A job array's record.
    Array(u64, Option<String>),
    /// A node.
    Node(String, Option<String>),
    /// A service.
    Service(String, Option<String>),
    /// An object written through the Kubernetes API: kind, namespace, name.
    Kube(String, String, String, Option<String>),
    /// A credential holder's current serial.
    Cred(String, Option<u64>),
    /// A spent join token and its expiry.
    Spent(String, Option<i64>),
    /// Spent join tokens that expired at or before this time are forgotten (the SQLite
    /// database deletes them by range; the etcd backend turns it into the keys' deletions).
    ForgetSpent(i64),
    /// A setting of the cluster's: `next_id`, `next_serial`, `accounting`, `reservations`,
    /// `boot`, `schema`, `secret`, `backup_taken`.
    Meta(String, Option<String>),
}

/// The columns of a job's document (the rest of it is not read).
#[derive(serde::Deserialize)]
struct JobCols {
    state: model::JobState,
    req: UserOf,
    end: Option<i64>,
}

#[derive(serde::Deserialize)]
struct UserOf {
    user: String,
}

impl JobRow {
    /// The row of a job's document.
    pub fn of_data(data: String) -> Result<JobRow, StoreError> {
        let c: JobCols = serde_json::from_str(&data)?;
        Ok(JobRow { state: c.state.slurm_name().to_string(), user: c.req.user, end: c.end, data })
    }
}

/// What a commit of `d` writes, in the order it writes it (a later record of the same key
/// wins: a node changed and deleted in one commit is deleted).
pub fn records(d: &Dirty) -> Result<Vec<Rec>, StoreError> {
    let mut out = Vec::with_capacity(d.jobs.len() + d.arrays.len() + d.nodes.len() + 4);
    for j in &d.jobs {
        let row = JobRow { state: j.state.slurm_name().to_string(), user: j.req.user.clone(), end: j.end, data: serde_json::to_string(j)? };
        out.push(Rec::Job(j.req.id.0, Some(row)));
    }
    for a in &d.arrays {
        out.push(Rec::Array(a.id(), Some(serde_json::to_string(a)?)));
    }
    for n in &d.nodes {
        out.push(Rec::Node(n.node.name.clone(), Some(serde_json::to_string(n)?)));
    }
    for s in &d.services {
        out.push(Rec::Service(s.spec.name.clone(), Some(serde_json::to_string(s)?)));
    }
    for n in &d.removed_services {
        out.push(Rec::Service(n.clone(), None));
    }
    for ((kind, ns, name), o) in &d.kube {
        let data = match o {
            Some(o) => Some(serde_json::to_string(o)?),
            None => None,
        };
        out.push(Rec::Kube(kind.clone(), ns.clone(), name.clone(), data));
    }
    for n in &d.removed_nodes {
        out.push(Rec::Node(n.clone(), None));
    }
    for (k, serial) in &d.creds.serials {
        out.push(Rec::Cred(k.clone(), *serial));
    }
    if let Some(t) = d.creds.forget_spent_before {
        out.push(Rec::ForgetSpent(t));
    }
    for (jti, exp) in &d.creds.spent {
        out.push(Rec::Spent(jti.clone(), Some(*exp)));
    }
    if let Some(n) = d.creds.next_serial {
        out.push(Rec::Meta("next_serial".into(), Some(n.to_string())));
    }
    if let Some(id) = d.next_id {
        out.push(Rec::Meta("next_id".into(), Some(id.to_string())));
    }
    if let Some(a) = &d.accounting {
        out.push(Rec::Meta("accounting".into(), Some(serde_json::to_string(a)?)));
    }
    if let Some(r) = &d.reservations {
        out.push(Rec::Meta("reservations".into(), Some(serde_json::to_string(r)?)));
    }
    Ok(out)
}

/// A name inside a key: `%` and `/` escaped, so a name cannot reach another key's place.
fn esc(s: &str) -> String {
    s.replace('%', "%25").replace('/', "%2F")
}

fn unesc(s: &str) -> String {
    s.replace("%2F", "/").replace("%25", "%")
}

/// A record's key below the cluster's prefix, and its value (`None`: deleted). Job and array
/// ids are zero-padded, so keys sort in id order. [`Rec::ForgetSpent`] has no key.
pub fn key_value(r: &Rec) -> Option<(String, Option<String>)> {
    Some(match r {
        Rec::Job(id, row) => (format!("jobs/{id:020}"), row.as_ref().map(|r| r.data.clone())),
        Rec::Array(id, d) => (format!("arrays/{id:020}"), d.clone()),
        Rec::Node(n, d) => (format!("nodes/{}", esc(n)), d.clone()),
        Rec::Service(n, d) => (format!("services/{}", esc(n)), d.clone()),
        Rec::Kube(k, ns, n, d) => (format!("kube/{}/{}/{}", esc(k), esc(ns), esc(n)), d.clone()),
        Rec::Cred(h, s) => (format!("creds/{}", esc(h)), s.map(|s| s.to_string())),
        Rec::Spent(j, e) => (format!("spent/{}", esc(j)), e.map(|e| e.to_string())),
        Rec::Meta(k, v) => (format!("meta/{}", esc(k)), v.clone()),
        Rec::ForgetSpent(_) => return None,
    })
}

/// The record a key below the prefix holds, with its value (`None`: deleted); `Ok(None)` for a
/// key that holds no record (the election's, a staged group's).
pub fn parse(key: &str, value: Option<&[u8]>) -> Result<Option<Rec>, StoreError> {
    let text = |v: &[u8]| String::from_utf8(v.to_vec()).map_err(|_| StoreError::Key(format!("{key}: a value that is not UTF-8")));
    let v = match value {
        Some(v) => Some(text(v)?),
        None => None,
    };
    let bad = || StoreError::Key(key.to_string());
    let num = |s: &str| s.parse::<u64>().map_err(|_| bad());
    let Some((kind, rest)) = key.split_once('/') else { return Ok(None) };
    Ok(Some(match kind {
        "jobs" => Rec::Job(
            num(rest)?,
            match v {
                Some(d) => Some(JobRow::of_data(d)?),
                None => None,
            },
        ),
        "arrays" => Rec::Array(num(rest)?, v),
        "nodes" => Rec::Node(unesc(rest), v),
        "services" => Rec::Service(unesc(rest), v),
        "kube" => {
            let mut p = rest.splitn(3, '/');
            let (Some(k), Some(ns), Some(n)) = (p.next(), p.next(), p.next()) else { return Err(bad()) };
            Rec::Kube(unesc(k), unesc(ns), unesc(n), v)
        }
        "creds" => Rec::Cred(unesc(rest), v.map(|s| num(&s)).transpose()?),
        "spent" => Rec::Spent(unesc(rest), v.map(|s| s.parse::<i64>().map_err(|_| bad())).transpose()?),
        "meta" => Rec::Meta(unesc(rest), v),
        _ => return Ok(None),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_record_comes_back_from_its_key_and_hostile_names_stay_in_their_place() {
        let recs = vec![
            Rec::Array(7, Some("{}".into())),
            Rec::Node("a/../b%2F".into(), Some("{}".into())),
            Rec::Service("s".into(), None),
            Rec::Kube("ConfigMap".into(), "ns/x".into(), "n%".into(), Some("{}".into())),
            Rec::Cred("node:n1".into(), Some(4)),
            Rec::Spent("j/t/i".into(), Some(-3)),
            Rec::Meta("next_id".into(), Some("12".into())),
            Rec::Node("gone".into(), None),
        ];
        for r in recs {
            let (k, v) = key_value(&r).unwrap();
            assert_eq!(parse(&k, v.as_deref().map(str::as_bytes)).unwrap(), Some(r.clone()), "{k}");
        }
        assert_eq!(key_value(&Rec::Job(3, None)).unwrap().0, "jobs/00000000000000000003");
        assert!(key_value(&Rec::ForgetSpent(9)).is_none());
        assert_eq!(parse("election/694d", Some(b"x")).unwrap(), None);
        assert!(parse("jobs/x", None).is_err());
        assert!(parse("creds/a", Some(b"many")).is_err());
        assert!(parse("kube/a/b", Some(b"{}")).is_err());
    }
}
