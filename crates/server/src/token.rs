//! User tokens: JSON Web Tokens signed with HS256 (as Slurm's auth/jwt and `scontrol token`),
//! by the jsonwebtoken crate, with the claims `sub` (the uid, in decimal), `iat` and `exp`
//! (Unix seconds). The key is the controller's own (`DATA/jwt.key`, 0600), not the agents'
//! secret. Only the canonical encoding of a token is accepted: the one this module would
//! issue for the same claims (no padding, no other header, no extra claim, no re-encoded
//! base64 or JSON), so a token is valid in exactly one spelling.

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

/// The claims of a user token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Claims {
    /// The uid, in decimal.
    sub: String,
    /// Issued at, Unix seconds.
    iat: i64,
    /// Expires at, Unix seconds.
    exp: i64,
}

/// Issues and checks user tokens with one key.
pub(crate) struct Tokens {
    enc: EncodingKey,
    dec: DecodingKey,
}

impl Tokens {
    /// Tokens signed with `key` (at least 32 bytes).
    pub(crate) fn new(key: &[u8]) -> Tokens {
        assert!(key.len() >= 32, "an HS256 key of at least 256 bits");
        Tokens {
            enc: EncodingKey::from_secret(key).expect("a non-empty key"),
            dec: DecodingKey::from_secret(key).expect("a non-empty key"),
        }
    }

    /// A token for `uid`, issued at `now`, valid until `exp` (Unix seconds).
    pub(crate) fn issue(&self, uid: u32, now: i64, exp: i64) -> String {
        let claims = Claims { sub: uid.to_string(), iat: now, exp };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.enc).expect("HS256 signing cannot fail")
    }

    /// The uid `token` stands for, if it is genuine, canonical, issued no later than `now`
    /// (plus a minute of clock skew) and unexpired at `now`.
    pub(crate) fn verify(&self, token: &str, now: i64) -> Option<u32> {
        let mut v = Validation::new(Algorithm::HS256);
        // The clock is the caller's (`now`), checked below.
        v.validate_exp = false;
        v.set_required_spec_claims(&["exp", "sub"]);
        let data = jsonwebtoken::decode::<Claims>(token, &self.dec, &v).ok()?;
        let c = data.claims;
        let uid: u32 = c.sub.parse().ok()?;
        if uid.to_string() != c.sub || c.exp <= now || c.iat > now + 60 || c.iat > c.exp {
            return None;
        }
        // Canonical: the very spelling this module issues for these claims.
        (self.issue(uid, c.iat, c.exp) == token).then_some(uid)
    }
}

/// The audience of a join token.
const JOIN: &str = "tandem-join";
/// The audience of a node agent's credential.
const NODE: &str = "tandem-node";
/// The audience of a proxy's credential.
const PROXY: &str = "tandem-proxy";

/// The claims of a single-use join token (`tandem token --join`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct JoinClaims {
    aud: String,
    /// Its one-time id (spent when a node joins with it).
    jti: String,
    iat: i64,
    exp: i64,
}

/// The claims of a node's or proxy's credential: whom it names and its serial (valid while the
/// controller holds that serial for that name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CredClaims {
    aud: String,
    sub: String,
    ser: u64,
    iat: i64,
}

/// Join tokens and node and proxy credentials, signed (HS256) with the controller's
/// `DATA/nodes.key`: a key of their own, so that no user token is a node's credential or the
/// reverse, and the audience (`aud`) tells the three kinds apart. Canonical spellings only, as
/// for user tokens.
pub(crate) struct NodeTokens {
    keys: Tokens,
    /// Credentials already verified under these keys, by their exact text: what each says
    /// (audience, name, serial). An agent presents the same credential with every heartbeat,
    /// and verifying it costs two HMACs and a JSON parse; the same bytes under the same key
    /// verify the same way, so a credential seen before is looked up instead. Only credentials
    /// that verified are kept (a flood of forged ones cannot grow it), at most
    /// [`VERIFIED_MAX`] (then it starts afresh). Revocation is not the signature's business:
    /// the serial is checked against the ledger on every request, as before.
    verified: std::sync::Mutex<std::collections::HashMap<String, (String, String, u64)>>,
}

/// The most verified credentials remembered (one per node and proxy of a large cluster).
const VERIFIED_MAX: usize = 100_000;

impl NodeTokens {
    /// Tokens signed with `key` (at least 32 bytes).
    pub(crate) fn new(key: &[u8]) -> NodeTokens {
        NodeTokens { keys: Tokens::new(key), verified: std::sync::Mutex::new(std::collections::HashMap::new()) }
    }

    fn sign<T: Serialize>(&self, claims: &T) -> String {
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &self.keys.enc).expect("HS256 signing cannot fail")
    }

    fn decode<T: serde::de::DeserializeOwned + Serialize>(&self, token: &str, required: &[&str]) -> Option<T> {
        let mut v = Validation::new(Algorithm::HS256);
        v.validate_exp = false;
        v.validate_aud = false;
        v.required_spec_claims = required.iter().map(|s| s.to_string()).collect();
        let c = jsonwebtoken::decode::<T>(token, &self.keys.dec, &v).ok()?.claims;
        (self.sign(&c) == token).then_some(c)
    }

    /// A join token with one-time id `jti`, issued at `now`, valid until `exp`.
    pub(crate) fn join_token(&self, jti: &str, now: i64, exp: i64) -> String {
        self.sign(&JoinClaims { aud: JOIN.into(), jti: jti.into(), iat: now, exp })
    }

    /// The one-time id and expiry of join token `token`, if genuine, canonical and unexpired.
    pub(crate) fn verify_join(&self, token: &str, now: i64) -> Option<(String, i64)> {
        let c: JoinClaims = self.decode(token, &["aud", "exp"])?;
        (c.aud == JOIN && c.exp > now && c.iat <= now + 60 && !c.jti.is_empty()).then_some((c.jti, c.exp))
    }

    /// A credential for `name` (a node's, or a proxy's when `proxy`) with `serial`.
    pub(crate) fn credential(&self, proxy: bool, name: &str, serial: u64, now: i64) -> String {
        self.sign(&CredClaims { aud: if proxy { PROXY } else { NODE }.into(), sub: name.into(), ser: serial, iat: now })
    }

    /// The name and serial a credential carries, if genuine and canonical and of the kind asked
    /// for (a node's, or a proxy's when `proxy`). Whether the serial is still valid is the
    /// controller's to say.
    pub(crate) fn verify_credential(&self, token: &str, proxy: bool) -> Option<(String, u64)> {
        let want = if proxy { PROXY } else { NODE };
        let known = self.verified.lock().expect("verified credentials").get(token).cloned();
        let (aud, sub, ser) = match known {
            Some(k) => k,
            None => {
                let c: CredClaims = self.decode(token, &["aud", "sub"])?;
                let mut v = self.verified.lock().expect("verified credentials");
                if v.len() >= VERIFIED_MAX {
                    v.clear();
                }
                v.insert(token.to_string(), (c.aud.clone(), c.sub.clone(), c.ser));
                (c.aud, c.sub, c.ser)
            }
        };
        (aud == want).then_some((sub, ser))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8; 32] = b"0123456789abcdef0123456789abcdef";

    fn b64(s: &[u8]) -> String {
        const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for c in s.chunks(3) {
            let n = c.iter().enumerate().fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
            for i in 0..=c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        out
    }

    #[test]
    fn a_token_stands_for_its_uid_until_it_expires() {
        let t = Tokens::new(KEY);
        let tok = t.issue(1000, 100, 200);
        assert_eq!(tok.split('.').count(), 3, "a JWS compact token");
        assert_eq!(t.verify(&tok, 150), Some(1000));
        assert_eq!(t.verify(&tok, 200), None, "expired");
        assert_eq!(t.verify(&tok, 30), None, "issued in the future");
        assert_eq!(Tokens::new(b"another key, also 32 bytes long!").verify(&tok, 150), None, "another key");
    }

    #[test]
    fn forged_altered_and_re_encoded_tokens_are_refused() {
        let t = Tokens::new(KEY);
        let tok = t.issue(1000, 100, 200);
        let parts: Vec<&str> = tok.split('.').collect();
        // Another uid with the old signature.
        let claims = b64(br#"{"sub":"0","iat":100,"exp":200}"#);
        assert_eq!(t.verify(&format!("{}.{claims}.{}", parts[0], parts[2]), 150), None);
        // alg "none", no signature.
        let none = b64(br#"{"typ":"JWT","alg":"none"}"#);
        assert_eq!(t.verify(&format!("{none}.{}.", parts[1]), 150), None);
        // Padding added, a signature with a flipped last character, whitespace, a second dot.
        assert_eq!(t.verify(&format!("{tok}="), 150), None);
        let mut flipped = tok.clone();
        let last = flipped.pop().unwrap();
        flipped.push(if last == 'A' { 'B' } else { 'A' });
        assert_eq!(t.verify(&flipped, 150), None);
        assert_eq!(t.verify(&format!(" {tok}"), 150), None);
        assert_eq!(t.verify(&format!("{tok}."), 150), None);
        // The same claims signed by the same key, spelled differently (JSON with a space, a
        // leading zero in the uid, an extra claim): genuine signatures, but not canonical.
        for body in [
            br#"{"sub": "1000","iat":100,"exp":200}"#.as_slice(),
            br#"{"sub":"01000","iat":100,"exp":200}"#,
            br#"{"sub":"1000","iat":100,"exp":200,"adm":1}"#,
        ] {
            let msg = format!("{}.{}", parts[0], b64(body));
            let sig = jsonwebtoken::crypto::sign(msg.as_bytes(), &EncodingKey::from_secret(KEY).unwrap(), Algorithm::HS256).unwrap();
            assert_eq!(t.verify(&format!("{msg}.{sig}"), 150), None, "{}", String::from_utf8_lossy(body));
        }
        assert_eq!(t.verify("", 150), None);
        assert_eq!(t.verify("1000.200.abcdef", 150), None, "the old format");
    }

    #[test]
    fn join_tokens_and_credentials_are_told_apart_and_checked() {
        let n = NodeTokens::new(KEY);
        let j = n.join_token("abc", 100, 200);
        assert_eq!(n.verify_join(&j, 150), Some(("abc".into(), 200)));
        assert_eq!(n.verify_join(&j, 200), None, "expired");
        assert_eq!(NodeTokens::new(b"another key, also 32 bytes long!").verify_join(&j, 150), None);
        let c = n.credential(false, "n1", 7, 100);
        assert_eq!(n.verify_credential(&c, false), Some(("n1".into(), 7)));
        assert_eq!(n.verify_credential(&c, true), None, "a node's credential is no proxy's");
        assert_eq!(n.verify_credential(&j, false), None, "a join token is no credential");
        assert_eq!(n.verify_join(&c, 150), None, "a credential is no join token");
        let p = n.credential(true, "edge", 8, 100);
        assert_eq!(n.verify_credential(&p, true), Some(("edge".into(), 8)));
        // A user token signed with the same key is neither.
        let u = Tokens::new(KEY).issue(0, 100, 200);
        assert_eq!((n.verify_credential(&u, false), n.verify_join(&u, 150)), (None, None));
        // Another name under the old signature; a re-encoded body.
        let parts: Vec<&str> = c.split('.').collect();
        let other = b64(br#"{"aud":"tandem-node","sub":"n2","ser":7,"iat":100}"#);
        assert_eq!(n.verify_credential(&format!("{}.{other}.{}", parts[0], parts[2]), false), None);
        let spaced = format!("{}.{}", parts[0], b64(br#"{"aud":"tandem-node","sub":"n1","ser":7,"iat":100} "#));
        let sig = jsonwebtoken::crypto::sign(spaced.as_bytes(), &EncodingKey::from_secret(KEY).unwrap(), Algorithm::HS256).unwrap();
        assert_eq!(n.verify_credential(&format!("{spaced}.{sig}"), false), None, "not canonical");
        // Verified once, remembered: the same answers again, forged ones never kept, and
        // another key's verifier knows nothing of this one's.
        assert_eq!(n.verified.lock().unwrap().len(), 2, "the two genuine credentials alone");
        for _ in 0..2 {
            assert_eq!(n.verify_credential(&c, false), Some(("n1".into(), 7)));
            assert_eq!(n.verify_credential(&c, true), None);
            assert_eq!(n.verify_credential(&p, true), Some(("edge".into(), 8)));
            assert_eq!(n.verify_credential(&p, false), None);
            assert_eq!(n.verify_credential(&format!("{spaced}.{sig}"), false), None);
        }
        assert_eq!(n.verified.lock().unwrap().len(), 2);
        assert_eq!(NodeTokens::new(b"another key, also 32 bytes long!").verify_credential(&c, false), None);
    }
}
