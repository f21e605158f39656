//! TLS client settings for what wasmgate reaches over TLS besides its
//! upstreams: services whose URL asks for it (`rediss://`,
//! `sslmode=require`) and the trace collector (`https://`). rustls,
//! trusting the Mozilla roots, or the CAs of a file for a private CA or a
//! self-signed server.

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

/// The root store: `ca_file`'s certificates, or the Mozilla roots.
pub fn roots(ca_file: Option<&Path>) -> Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            for cert in read_ca_file(path)? {
                roots
                    .add(cert)
                    .with_context(|| format!("{}: unusable certificate", path.display()))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    Ok(roots)
}

pub fn client_config(ca_file: Option<&Path>) -> Result<Arc<rustls::ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots(ca_file)?)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
