//! TLS facts and settings every part shares. The one place wasmgate's TLS
//! clients get the certificates they trust ([`roots`]): the Mozilla roots
//! (webpki-roots) unless a CA file or PEM text names a private CA or a
//! self-signed server; used by the gateway's upstreams and listeners
//! (client CAs), the services (`rediss://`, `sslmode=require`), plugins'
//! outbound HTTP and the trace collector. And what a handshake told of a
//! connection ([`TlsInfo`]), which the transport writes and filters read.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

/// The certificates of a PEM file.
pub fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let pem = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .with_context(|| format!("{}: not PEM certificates", path.display()))?;
    anyhow::ensure!(
        !certs.is_empty(),
        "{}: no certificate in it",
        path.display()
    );
    Ok(certs)
}

/// The Mozilla roots (webpki-roots, compiled in): what a TLS client trusts
/// when it is given no CA of its own. Compiled in rather than read from the
/// system so a node trusts the same roots on every machine.
pub fn public_roots() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    roots
}

/// The same Mozilla roots as whole certificates (webpki-root-certs, made
/// from the same list as webpki-roots), for a client that takes
/// certificates rather than a root store (oci-client's reqwest), so that
/// it trusts what every other client trusts, not the machine's own store.
pub fn public_root_certs() -> &'static [CertificateDer<'static>] {
    webpki_root_certs::TLS_SERVER_ROOT_CERTS
}

/// The CA certificates of PEM text as a root store. `source` names where
/// the text came from (a file's path, a setting) in the errors.
pub fn roots_from_pem(pem: &[u8], source: &str) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| format!("{source}: not PEM certificates: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("{source}: unusable CA certificate: {e}"))?;
    }
    if roots.is_empty() {
        return Err(format!("{source}: no CA certificate in it"));
    }
    Ok(roots)
}

/// The root store: `ca_file`'s certificates, or the Mozilla roots.
pub fn roots(ca_file: Option<&Path>) -> Result<rustls::RootCertStore> {
    match ca_file {
        Some(path) => {
            let pem =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            roots_from_pem(&pem, &path.display().to_string()).map_err(anyhow::Error::msg)
        }
        None => Ok(public_roots()),
    }
}

pub fn client_config(ca_file: Option<&Path>) -> Result<Arc<rustls::ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots(ca_file)?)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// What a TLS handshake told of its connection: told by the transport,
/// read by filters as Envoy's `connection.*` properties give it. A type of
/// its own here so the transport needs no filter ABI and the ABI no transport.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TlsInfo {
    /// `TLSv1.2` or `TLSv1.3`.
    pub version: &'static str,
    /// The SNI the client sent.
    pub sni: Option<String>,
    /// The protocol ALPN chose (`h2`, `http/1.1`).
    pub alpn: Option<String>,
    /// The client's certificate, when it sent one that verified: its
    /// subject (RFC 2253 order, as `CN=a,O=b`), its URI and DNS SANs.
    pub peer_subject: Option<String>,
    pub peer_uri_sans: Vec<String>,
    pub peer_dns_sans: Vec<String>,
    /// The client's certificate itself (DER), for the properties derived
    /// from it when a filter asks (`connection.sha256_peer_certificate_digest`,
    /// `connection.peer_certificate`).
    pub peer_certificate: Option<Vec<u8>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The certificates a registry client is given and the root store every
    /// other client gets are one list: the same subjects, as many of them.
    #[test]
    fn the_roots_as_certificates_are_the_roots_of_the_store() {
        let mut from_certs = rustls::RootCertStore::empty();
        let (added, ignored) = from_certs.add_parsable_certificates(public_root_certs().to_vec());
        assert_eq!(ignored, 0);
        let store = public_roots();
        assert_eq!(added, store.len());
        let subjects = |s: &rustls::RootCertStore| {
            let mut v: Vec<Vec<u8>> = s.roots.iter().map(|a| a.subject.to_vec()).collect();
            v.sort();
            v
        };
        assert_eq!(subjects(&from_certs), subjects(&store));
    }
}
