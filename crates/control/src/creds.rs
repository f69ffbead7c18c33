//! Node and proxy identities (SECURITY.md, N1): which name holds a credential, with which serial,
//! and which single-use join tokens have been spent. Pure bookkeeping: the signatures that carry
//! a name and serial are the server's; here a credential is valid exactly while its name maps to
//! its serial. Serials are never reused, so a credential revoked (a node deleted) stays invalid
//! after the same name joins again.

use std::collections::BTreeMap;

/// What a credential names: a node's agent or an inference proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Holder {
    /// A node agent (`tandem agent`), by node name.
    Node,
    /// An inference proxy (`tandem proxy`), by the name it was issued for.
    Proxy,
}

impl Holder {
    /// The key of a name of this kind in [`Credentials`] (and the database): node names as they
    /// are, proxy names under `proxy/` (a node name has no `/`).
    pub fn key(self, name: &str) -> String {
        match self {
            Holder::Node => name.to_string(),
            Holder::Proxy => format!("proxy/{name}"),
        }
    }
}

/// Identities issued, and spent join tokens.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// Key ([`Holder::key`]) to the serial of its one valid credential.
    serials: BTreeMap<String, u64>,
    /// Spent join tokens (their `jti`) and when each expires (Unix seconds): after that the
    /// token is refused as expired anyway and its entry can go.
    spent: BTreeMap<String, i64>,
    /// The next serial (never reused).
    next_serial: u64,
    /// Changed since the last [`Credentials::take_dirty`].
    dirty: CredDirty,
}

/// What changed, for the database.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CredDirty {
    /// Keys with a new serial (`Some`) or revoked (`None`).
    pub serials: Vec<(String, Option<u64>)>,
    /// Join tokens spent, with their expiry.
    pub spent: Vec<(String, i64)>,
    /// Spent tokens that expired before this time may be forgotten.
    pub forget_spent_before: Option<i64>,
    /// The next serial, when it moved.
    pub next_serial: Option<u64>,
}

impl CredDirty {
    /// Nothing changed.
    pub fn is_empty(&self) -> bool {
        self.serials.is_empty() && self.spent.is_empty() && self.forget_spent_before.is_none() && self.next_serial.is_none()
    }
}

/// Why an identity was not issued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredError {
    /// The join token was used before.
    #[error("this join token was already used (a join token admits one node; make another with `tandem token --join`)")]
    Spent,
    /// The name already holds a credential.
    #[error("{0} already has a credential: remove it first (`tandem node delete {0}`, or `scontrol delete NodeName={0}`)")]
    Taken(String),
}

impl Credentials {
    /// As loaded from the database.
    pub fn restore(serials: BTreeMap<String, u64>, spent: BTreeMap<String, i64>, next_serial: u64) -> Credentials {
        let floor = serials.values().max().map_or(1, |s| s + 1);
        Credentials { serials, spent, next_serial: next_serial.max(floor), dirty: CredDirty::default() }
    }

    /// Spends join token `jti` (valid until `exp`) on a node credential for `name`: its serial.
    pub fn join(&mut self, now: i64, jti: &str, exp: i64, name: &str) -> Result<u64, CredError> {
        self.forget_expired(now);
        if self.spent.contains_key(jti) {
            return Err(CredError::Spent);
        }
        let key = Holder::Node.key(name);
        if self.serials.contains_key(&key) {
            return Err(CredError::Taken(name.to_string()));
        }
        self.spent.insert(jti.to_string(), exp);
        self.dirty.spent.push((jti.to_string(), exp));
        Ok(self.issue(key))
    }

    /// A proxy credential for `name`: its serial. One issued earlier for the same name is
    /// revoked by it.
    pub fn proxy(&mut self, name: &str) -> u64 {
        self.issue(Holder::Proxy.key(name))
    }

    fn issue(&mut self, key: String) -> u64 {
        let serial = self.next_serial.max(1);
        self.next_serial = serial + 1;
        self.dirty.next_serial = Some(self.next_serial);
        self.serials.insert(key.clone(), serial);
        self.dirty.serials.push((key, Some(serial)));
        serial
    }

    /// Whether `serial` is the valid credential of `name`.
    pub fn valid(&self, holder: Holder, name: &str, serial: u64) -> bool {
        self.serials.get(&holder.key(name)) == Some(&serial)
    }

    /// Whether `name` holds a credential.
    pub fn held(&self, holder: Holder, name: &str) -> bool {
        self.serials.contains_key(&holder.key(name))
    }

    /// Revokes `name`'s credential; whether it had one.
    pub fn revoke(&mut self, holder: Holder, name: &str) -> bool {
        let key = holder.key(name);
        let had = self.serials.remove(&key).is_some();
        if had {
            self.dirty.serials.push((key, None));
        }
        had
    }

    fn forget_expired(&mut self, now: i64) {
        let before = self.spent.len();
        self.spent.retain(|_, exp| *exp > now);
        if self.spent.len() != before {
            self.dirty.forget_spent_before = Some(now);
        }
    }

    /// Changes since the last call.
    pub fn take_dirty(&mut self) -> CredDirty {
        std::mem::take(&mut self.dirty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_join_token_admits_one_node_once_and_serials_are_never_reused() {
        let mut c = Credentials::restore(BTreeMap::new(), BTreeMap::new(), 1);
        let s1 = c.join(100, "j1", 200, "n1").unwrap();
        assert!(c.valid(Holder::Node, "n1", s1));
        assert_eq!(c.join(100, "j1", 200, "n2"), Err(CredError::Spent), "the same token again, for another name");
        assert_eq!(c.join(100, "j2", 200, "n1"), Err(CredError::Taken("n1".into())), "a name that holds a credential");
        assert!(!c.valid(Holder::Node, "n2", s1), "n1's serial is not n2's");
        assert!(!c.valid(Holder::Proxy, "n1", s1), "nor a proxy's");
        assert!(c.revoke(Holder::Node, "n1"));
        assert!(!c.valid(Holder::Node, "n1", s1), "revoked");
        let s2 = c.join(100, "j2", 200, "n1").unwrap();
        assert!(s2 > s1 && !c.valid(Holder::Node, "n1", s1) && c.valid(Holder::Node, "n1", s2), "a new serial");
        // A reload keeps all of it, and the serial counter.
        let d = c.take_dirty();
        assert_eq!(d.spent, vec![("j1".to_string(), 200), ("j2".to_string(), 200)]);
        assert_eq!(d.serials.last(), Some(&("n1".to_string(), Some(s2))));
        let mut r = Credentials::restore([("n1".to_string(), s2)].into(), [("j1".into(), 200), ("j2".into(), 200)].into(), 0);
        assert_eq!(r.join(150, "j1", 200, "n9"), Err(CredError::Spent));
        assert!(r.join(150, "j3", 200, "n9").unwrap() > s2, "serials go on growing after a restart");
        // Spent tokens are forgotten once expired (the signature check refuses them then).
        let _ = r.take_dirty();
        r.join(300, "j4", 400, "n10").unwrap();
        assert_eq!(r.take_dirty().forget_spent_before, Some(300));
    }

    #[test]
    fn a_new_proxy_credential_revokes_the_old_one() {
        let mut c = Credentials::restore(BTreeMap::new(), BTreeMap::new(), 1);
        let a = c.proxy("edge");
        let b = c.proxy("edge");
        assert!(!c.valid(Holder::Proxy, "edge", a) && c.valid(Holder::Proxy, "edge", b));
        assert!(!c.valid(Holder::Node, "edge", b), "a proxy's credential is no node's");
    }
}
