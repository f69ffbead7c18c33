//! A step's I/O connection: `srun` listens, and each task's agent connects to it over TLS
//! (trusting only the one-time CA that this `srun` made and sent with the step) and proves
//! itself with the step's key. Then frames flow both ways: the task's output and error (and
//! PMI messages) to `srun`, its input, window size and PMI replies back.
//!
//! A frame is a kind byte, a big-endian `u32` length and that many bytes (at most
//! [`MAX_FRAME`]). For the stream kinds an empty frame means the stream ended.

use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The name in `srun`'s certificate, which agents check whatever address they dial.
pub const SRUN_NAME: &str = "srun.tandem.internal";
/// The largest frame either side accepts.
pub const MAX_FRAME: usize = 1 << 20;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Agent to srun, first: [`Hello`] as JSON.
    Hello,
    /// The task's standard output (empty: ended).
    Stdout,
    /// The task's standard error (empty: ended).
    Stderr,
    /// srun to agent: input for the task (empty: end of input).
    Stdin,
    /// srun to agent: the terminal's size, rows and columns as two big-endian `u16`.
    Winsize,
    /// Either way: PMI bytes between the task's `PMI_FD` and srun's PMI server (empty: closed).
    Pmi,
}

impl Kind {
    fn byte(self) -> u8 {
        match self {
            Kind::Hello => 0,
            Kind::Stdout => 1,
            Kind::Stderr => 2,
            Kind::Stdin => 3,
            Kind::Winsize => 4,
            Kind::Pmi => 5,
        }
    }

    fn of(b: u8) -> Option<Kind> {
        Some(match b {
            0 => Kind::Hello,
            1 => Kind::Stdout,
            2 => Kind::Stderr,
            3 => Kind::Stdin,
            4 => Kind::Winsize,
            5 => Kind::Pmi,
            _ => return None,
        })
    }
}

/// The agent's first frame: which task this connection carries, and the step's key.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    /// The step's key (64 hex digits).
    pub key: String,
    /// Job.
    pub job: u64,
    /// Step.
    pub step: u32,
    /// The task's rank.
    pub rank: u32,
}

/// Reads one frame; `None` at a clean end of the connection.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Option<(Kind, Vec<u8>)>> {
    let mut head = [0u8; 5];
    match r.read_exact(&mut head[..1]).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    r.read_exact(&mut head[1..]).await?;
    let kind =
        Kind::of(head[0]).ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("unknown frame kind {}", head[0])))?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("a frame of {len} bytes (at most {MAX_FRAME})")));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    Ok(Some((kind, body)))
}

/// Writes one frame (split if longer than [`MAX_FRAME`]; an empty one stays one).
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, kind: Kind, data: &[u8]) -> std::io::Result<()> {
    let mut chunks: Vec<&[u8]> = data.chunks(MAX_FRAME).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    for c in chunks {
        let mut b = Vec::with_capacity(5 + c.len());
        b.push(kind.byte());
        b.extend_from_slice(&(c.len() as u32).to_be_bytes());
        b.extend_from_slice(c);
        w.write_all(&b).await?;
    }
    w.flush().await
}

/// Compares two keys in time independent of where they differ.
pub fn same_key(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What `srun` needs to listen: a fresh CA (sent with the step) and a certificate from it.
pub struct Identity {
    /// The CA's certificate, PEM: the agents trust only this.
    pub ca_pem: String,
    /// TLS settings for the listener.
    pub server: Arc<rustls::ServerConfig>,
}

/// A one-time CA and a server certificate for [`SRUN_NAME`], made in memory (nothing on disk).
pub fn identity() -> Result<Identity, String> {
    let mut ca = rcgen::CertificateParams::default();
    ca.distinguished_name.push(rcgen::DnType::CommonName, "Tandem srun step CA");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::DigitalSignature];
    let ca_key = rcgen::KeyPair::generate().map_err(|e| format!("making a key: {e}"))?;
    let ca_cert = ca.self_signed(&ca_key).map_err(|e| format!("making a certificate: {e}"))?;
    let mut leaf = rcgen::CertificateParams::new(vec![SRUN_NAME.to_string()]).map_err(|e| format!("certificate names: {e}"))?;
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let key = rcgen::KeyPair::generate().map_err(|e| format!("making a key: {e}"))?;
    let issuer = rcgen::Issuer::new(ca, &ca_key);
    let cert = leaf.signed_by(&key, &issuer).map_err(|e| format!("making a certificate: {e}"))?;
    let key_der = rustls_pki_types::PrivateKeyDer::try_from(key.serialize_der()).map_err(|e| format!("the key: {e}"))?;
    let server = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone(), ca_cert.der().clone()], key_der)
        .map_err(|e| format!("TLS settings: {e}"))?;
    Ok(Identity { ca_pem: ca_cert.pem(), server: Arc::new(server) })
}

/// TLS settings that trust only `ca_pem` (a step's CA).
pub fn connector(ca_pem: &str) -> Result<tokio_rustls::TlsConnector, String> {
    use rustls_pki_types::pem::PemObject;
    let der = rustls_pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes()).map_err(|e| format!("the step's CA: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der).map_err(|e| format!("the step's CA: {e}"))?;
    let cfg = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(cfg)))
}

/// 32 random bytes as 64 hex digits (the step's key).
pub fn new_key() -> String {
    let mut b = [0u8; 32];
    crate::kernel_random(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_bad_ones_are_errors() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        write_frame(&mut a, Kind::Stdout, b"hi\n").await.unwrap();
        write_frame(&mut a, Kind::Stdin, b"").await.unwrap();
        drop(a);
        assert_eq!(read_frame(&mut b).await.unwrap(), Some((Kind::Stdout, b"hi\n".to_vec())));
        assert_eq!(read_frame(&mut b).await.unwrap(), Some((Kind::Stdin, vec![])));
        assert_eq!(read_frame(&mut b).await.unwrap(), None);
        for bad in [vec![9u8, 0, 0, 0, 0], vec![1, 0xff, 0xff, 0xff, 0xff], vec![1, 0, 0, 0, 9, 1]] {
            let (mut a, mut b) = tokio::io::duplex(64);
            a.write_all(&bad).await.unwrap();
            drop(a);
            assert!(read_frame(&mut b).await.is_err(), "{bad:?}");
        }
    }

    #[test]
    fn keys_compare() {
        let k = new_key();
        assert_eq!(k.len(), 64);
        assert!(same_key(&k, &k.clone()));
        assert!(!same_key(&k, &new_key()));
        assert!(!same_key(&k, &k[..63]));
    }

    #[tokio::test]
    async fn an_agent_trusts_only_its_steps_srun() {
        let id = identity().unwrap();
        let other = identity().unwrap();
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let acc = tokio_rustls::TlsAcceptor::from(id.server.clone());
        tokio::spawn(async move {
            loop {
                let (s, _) = l.accept().await.unwrap();
                if let Ok(mut t) = acc.accept(s).await {
                    let _ = write_frame(&mut t, Kind::Stdin, b"x").await;
                }
            }
        });
        let name = rustls_pki_types::ServerName::try_from(SRUN_NAME).unwrap();
        let good = connector(&id.ca_pem).unwrap();
        let s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut t = good.connect(name.clone(), s).await.unwrap();
        assert_eq!(read_frame(&mut t).await.unwrap(), Some((Kind::Stdin, b"x".to_vec())));
        let bad = connector(&other.ca_pem).unwrap();
        let s = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(bad.connect(name, s).await.is_err());
        assert!(connector("not a certificate").is_err());
    }
}
