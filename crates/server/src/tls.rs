//! TLS on the controller's TCP port (SECURITY.md, N2): a cluster CA the controller creates at
//! its first start (`DATA/ca.pem`, public, and `DATA/ca.key`, 0600), and a server certificate
//! it issues itself from that CA at every start (kept in memory only). Clients verify the
//! controller against the CA under the name [`wire::CONTROLLER_NAME`], whatever address they
//! dial; the certificate also names `localhost`, the loopback addresses, this host's name, the
//! listen address and any `--tls-san`, so `curl --cacert DATA/ca.pem https://127.0.0.1:PORT`
//! works too. `listen`'s TCP accept loop serves HTTP/1.1 and HTTP/2 (ALPN) over it.

use anyhow::{Context, Result};
use std::path::Path;

use rustls_pki_types::pem::PemObject;

/// The distinguished name of the cluster CA, fixed: an issuer rebuilt from the stored key and
/// these parameters signs certificates that chain to the stored CA certificate.
fn ca_params() -> rcgen::CertificateParams {
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name.push(rcgen::DnType::CommonName, "Tandem cluster CA");
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign, rcgen::KeyUsagePurpose::DigitalSignature];
    p
}

/// The cluster CA: loaded from `DATA/ca.pem` and `DATA/ca.key`, or made (first start).
pub(crate) struct Ca {
    key: rcgen::KeyPair,
    cert_pem: String,
}

impl Ca {
    pub(crate) fn load_or_create(data: &Path) -> Result<Ca> {
        let (cert_path, key_path) = (data.join("ca.pem"), data.join("ca.key"));
        if let (Ok(cert_pem), Ok(key_pem)) = (std::fs::read_to_string(&cert_path), std::fs::read_to_string(&key_path)) {
            let key = rcgen::KeyPair::from_pem(&key_pem).with_context(|| format!("reading {}", key_path.display()))?;
            return Ok(Ca { key, cert_pem });
        }
        let key = rcgen::KeyPair::generate().context("making the cluster CA's key")?;
        let cert = ca_params().self_signed(&key).context("making the cluster CA")?;
        crate::private::write(&key_path, &key.serialize_pem())?;
        crate::private::write(&cert_path, &cert.pem())?;
        // The CA certificate is public: clients over TCP need it.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cert_path, std::fs::Permissions::from_mode(0o644))?;
        Ok(Ca { key, cert_pem: cert.pem() })
    }

    /// A server configuration with a fresh certificate for the controller, naming
    /// [`wire::CONTROLLER_NAME`] and `sans`.
    pub(crate) fn server_config(&self, sans: &[String]) -> Result<rustls::ServerConfig> {
        let mut names = vec![wire::CONTROLLER_NAME.to_string(), "localhost".into(), "127.0.0.1".into(), "::1".into()];
        if let Ok(h) = nix::unistd::gethostname() {
            names.push(h.to_string_lossy().into_owned());
        }
        for s in sans {
            if !names.contains(s) {
                names.push(s.clone());
            }
        }
        let mut params = rcgen::CertificateParams::new(names).context("the controller certificate's names")?;
        params.distinguished_name.push(rcgen::DnType::CommonName, wire::CONTROLLER_NAME);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let key = rcgen::KeyPair::generate()?;
        let issuer = rcgen::Issuer::new(ca_params(), &self.key);
        let cert = params.signed_by(&key, &issuer).context("issuing the controller certificate")?;
        let ca_der = rustls_pki_types::CertificateDer::from_pem_slice(self.cert_pem.as_bytes()).context("the CA certificate")?;
        let key_der =
            rustls_pki_types::PrivateKeyDer::try_from(key.serialize_der()).map_err(|e| anyhow::anyhow!("the controller key: {e}"))?;
        let mut cfg = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone(), ca_der], key_der)
            .context("the controller's TLS configuration")?;
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_ca_is_made_once_and_signs_a_controller_certificate_clients_accept() {
        let d = std::env::temp_dir().join(format!("tandem-tls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let ca = Ca::load_or_create(&d).unwrap();
        let again = Ca::load_or_create(&d).unwrap();
        assert_eq!(ca.cert_pem, again.cert_pem, "the stored CA is reused");
        use std::os::unix::fs::MetadataExt;
        assert_eq!(std::fs::metadata(d.join("ca.key")).unwrap().mode() & 0o777, 0o600);
        // A certificate from the reloaded CA verifies against the stored CA certificate.
        let cfg = again.server_config(&["10.1.2.3".into()]).unwrap();
        assert_eq!(cfg.alpn_protocols.len(), 2);
        let mut roots = rustls::RootCertStore::empty();
        roots.add(rustls_pki_types::CertificateDer::from_pem_file(d.join("ca.pem")).unwrap()).unwrap();
        let client = Arc::new(rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
            let server = tokio::spawn(async move {
                let (tcp, _) = l.accept().await.unwrap();
                acceptor.accept(tcp).await.map(|_| ())
            });
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let name = rustls_pki_types::ServerName::try_from(wire::CONTROLLER_NAME).unwrap();
            tokio_rustls::TlsConnector::from(client).connect(name, tcp).await.unwrap();
            server.await.unwrap().unwrap();
        });
        std::fs::remove_dir_all(d).ok();
    }
}
