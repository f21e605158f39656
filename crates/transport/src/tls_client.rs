//! TLS to upstream nodes (rustls): the CAs trusted (a file, or the Mozilla
//! roots), the name sent and verified (`sni`, or the node's host), a client
//! certificate for upstreams that want mTLS. A node whose certificate does
//! not verify fails the connection with [`UpstreamTlsError`], which the
//! gateway answers as 502 `upstream_tls`: never a silent fallback to
//! anything else.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use wasmgate_base::paths::resolve;
use wasmgate_base::tls::{public_roots, roots_from_pem};
use wasmgate_config::{UpstreamProtocol, UpstreamTls};

/// How one node's connections are encrypted.
#[derive(Clone)]
pub struct UpstreamTlsClient {
    pub connector: tokio_rustls::TlsConnector,
    pub server_name: ServerName<'static>,
}

/// A TLS handshake with a node failed (its certificate did not verify, it
/// spoke no TLS, ...): told apart from other connection failures.
#[derive(Debug, thiserror::Error)]
#[error("TLS with {node} failed: {message}")]
pub struct UpstreamTlsError {
    pub node: String,
    pub message: String,
}

/// What an upstream's connections offer by ALPN: for its requests (as its
/// `protocol` says), and for upgrades (always HTTP/1.1).
pub fn alpn(protocol: UpstreamProtocol) -> Vec<Vec<u8>> {
    match protocol {
        UpstreamProtocol::Http1 | UpstreamProtocol::H2c => vec![b"http/1.1".to_vec()],
        UpstreamProtocol::H2 => vec![b"h2".to_vec()],
        UpstreamProtocol::Auto => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
    }
}

/// The client settings of an upstream (files relative to `base`), offering
/// `alpn`.
pub fn client_config(
    tls: &UpstreamTls,
    base: &Path,
    alpn: Vec<Vec<u8>>,
) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS versions: {e}"))?;
    let builder = if tls.verify {
        let roots = match (&tls.ca_file, &tls.ca_pem) {
            (Some(file), _) => {
                let path = resolve(base, file);
                let pem = std::fs::read(&path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                roots_from_pem(&pem, &path.display().to_string())?
            }
            (None, Some(text)) => roots_from_pem(text.as_bytes(), "ca_pem")?,
            (None, None) => public_roots(),
        };
        builder.with_root_certificates(roots)
    } else {
        tracing::warn!("an upstream's TLS certificates are not verified (`verify: false`): anyone between the gateway and it can read and change its traffic");
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
    };
    let mut config = match (&tls.client_cert, &tls.client_key) {
        (Some(cert), Some(key)) => {
            let (cert, key) = (resolve(base, cert), resolve(base, key));
            let pem =
                std::fs::read(&cert).map_err(|e| format!("cannot read {}: {e}", cert.display()))?;
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("{}: not PEM certificates: {e}", cert.display()))?;
            let key = PrivateKeyDer::from_pem_file(&key)
                .map_err(|e| format!("{}: no private key in it: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("{}: {e}", cert.display()))?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn;
    Ok(Arc::new(config))
}

/// The TLS of node `address` (`host:port`) of an upstream with `config`.
pub fn for_node(
    config: &Arc<ClientConfig>,
    tls: &UpstreamTls,
    address: &str,
) -> Result<UpstreamTlsClient, String> {
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = tls.sni.as_deref().unwrap_or(host);
    let server_name = ServerName::try_from(name.to_string())
        .map_err(|e| format!("`{name}` cannot be a TLS server name: {e}"))?;
    Ok(UpstreamTlsClient {
        connector: tokio_rustls::TlsConnector::from(config.clone()),
        server_name,
    })
}

/// `verify: false`: every certificate is accepted (signatures still checked
/// against the presented key, so the session is encrypted, but to anyone).
#[derive(Debug)]
struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
