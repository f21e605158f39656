//! TLS on the traffic listeners, on rustls with its safe defaults (TLS 1.2
//! and 1.3 only, its cipher suites, the `ring` provider): certificates
//! loaded and checked (chain and key match, names from the subjectAltName),
//! one chosen per handshake by SNI (exact names, then `*.` wildcards, then
//! the default or a refusal), ALPN `h2` and `http/1.1`, session resumption
//! (a session cache and tickets per listener and client-certificate policy,
//! kept across reloads that keep both), client certificates when a listener
//! asks for them, and a count of failed handshakes by reason.
//!
//! A gateway builds its listeners' `ServerConfig`s with the rest of its
//! configuration, so a changed certificate is a reload: new handshakes get
//! the new one, established connections keep theirs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use sha2::{Digest, Sha256};
use wasmgate_base::tls::TlsInfo;
use wasmgate_config::{CertificateConfig, ClientAuth, TlsListener, UnknownSni};

/// What a TLS listener accepts with: the gateway's current configuration
/// for it, and how long a handshake may take.
#[derive(Clone)]
pub struct TlsAcceptorConfig {
    pub server: Arc<ServerConfig>,
    pub handshake_timeout: Duration,
    /// `client_auth: required`: a connection whose handshake ends without
    /// a verified client certificate is closed (a second lock behind the
    /// per-policy session state, which keeps such sessions from resuming
    /// here at all).
    pub requires_client_certificate: bool,
}

/// A certificate as loaded: the chain and key rustls serves, the names it
/// is for, and what operators see of it.
pub struct LoadedCertificate {
    pub name: String,
    pub key: Arc<CertifiedKey>,
    /// Exact names and `*.` wildcards, lower case.
    pub names: Vec<String>,
    /// The leaf's subject and its validity end (seconds since the epoch).
    pub subject: String,
    pub not_after: i64,
}

/// Loads every certificate of the configuration (files relative to `base`).
/// An error is (field, message) and names the file.
pub fn load_certificates(
    configs: &[CertificateConfig],
    base: &Path,
) -> Result<Vec<LoadedCertificate>, (String, String)> {
    configs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            load_certificate(c, base)
                .map_err(|e| (wasmgate_config::names::entry("certificates", i, &c.name), e))
        })
        .collect()
}

fn load_certificate(config: &CertificateConfig, base: &Path) -> Result<LoadedCertificate, String> {
    let (chain_pem, chain_from) =
        pem_source(config.cert.as_ref(), config.cert_pem.as_ref(), base, "cert")?;
    let (key_pem, key_from) =
        pem_source(config.key.as_ref(), config.key_pem.as_ref(), base, "key")?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&chain_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{chain_from}: not PEM certificates: {e}"))?;
    let leaf = chain
        .first()
        .ok_or_else(|| format!("{chain_from}: no certificate in it"))?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| format!("{key_from}: no private key in it: {e}"))?;
    let signing =
        signing_key(&key).map_err(|e| format!("{key_from}: unusable private key: {e}"))?;
    let certified = CertifiedKey::new(chain.clone(), signing);
    certified.keys_match().map_err(|e| {
        format!("{key_from} is not the key of {chain_from} ({e}): the certificate and the key do not match")
    })?;
    let facts = crate::x509::Facts::of(leaf).map_err(|e| format!("{chain_from}: {e}"))?;
    let names: Vec<String> = if config.snis.is_empty() {
        facts.dns_names.clone()
    } else {
        config.snis.clone()
    };
    let names: Vec<String> = names.iter().map(|n| n.to_ascii_lowercase()).collect();
    if names.is_empty() {
        return Err(format!(
            "{chain_from}: the certificate names no DNS name (subjectAltName): give the names it serves in `snis`"
        ));
    }
    Ok(LoadedCertificate {
        name: config.name.clone(),
        key: Arc::new(certified),
        names,
        subject: facts.subject,
        not_after: facts.not_after,
    })
}

/// The key that signs handshakes. RSA keys sign with aws-lc-rs, whose
/// RSA-2048 signature costs 257 µs against ring's 563 on the benchmark
/// machine (a full RSA handshake was 1.28x nginx's CPU with ring); ECDSA and
/// Ed25519 keys with ring, faster there (P-256: 17 µs against 31).
fn signing_key(
    key: &PrivateKeyDer<'_>,
) -> Result<Arc<dyn rustls::sign::SigningKey>, rustls::Error> {
    match rustls::crypto::aws_lc_rs::sign::RsaSigningKey::new(key) {
        Ok(rsa) => Ok(Arc::new(rsa)),
        Err(_) => rustls::crypto::ring::sign::any_supported_type(key),
    }
}

/// The PEM bytes of a file or of inline text, with where they came from.
fn pem_source(
    file: Option<&PathBuf>,
    inline: Option<&String>,
    base: &Path,
    what: &str,
) -> Result<(Vec<u8>, String), String> {
    match (file, inline) {
        (Some(file), _) => {
            let path = wasmgate_base::paths::resolve(base, file);
            let bytes = std::fs::read(&path).map_err(|e| {
                format!(
                    "cannot read {}: {e} (`{what}` is resolved against the configuration's directory)",
                    path.display()
                )
            })?;
            Ok((bytes, path.display().to_string()))
        }
        (None, Some(text)) => Ok((text.as_bytes().to_vec(), format!("`{what}_pem`"))),
        (None, None) => Err(format!("no `{what}` or `{what}_pem`")),
    }
}

/// The files a configuration's certificates are read from (to watch).
pub fn certificate_files(configs: &[CertificateConfig], base: &Path) -> Vec<PathBuf> {
    configs
        .iter()
        .flat_map(|c| [c.cert.as_ref(), c.key.as_ref()])
        .flatten()
        .map(|f| wasmgate_base::paths::resolve(base, f))
        .collect()
}

/// Chooses a certificate by SNI.
#[derive(Debug)]
struct SniResolver {
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// By the part after `*.`.
    wildcard: HashMap<String, Arc<CertifiedKey>>,
    /// For a client without SNI or with an unknown name (`unknown_sni: default`).
    default: Option<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let Some(name) = hello.server_name() else {
            return self.default.clone();
        };
        let name = name.to_ascii_lowercase();
        if let Some(key) = self.exact.get(&name) {
            return Some(key.clone());
        }
        // A wildcard covers one label: `*.example.com` is `a.example.com`,
        // not `example.com` nor `a.b.example.com`.
        if let Some((_, parent)) = name.split_once('.') {
            if let Some(key) = self.wildcard.get(parent) {
                return Some(key.clone());
            }
        }
        self.default.clone()
    }
}

/// The `ServerConfig` of the TLS listener at `address`: its certificates
/// (all of them when it names none), its client-certificate policy (CA file
/// relative to `base`), ALPN, and its session state (see [`resumption`]).
pub fn server_config(
    address: &str,
    listener: &TlsListener,
    certificates: &[LoadedCertificate],
    base: &Path,
) -> Result<Arc<ServerConfig>, String> {
    let served: Vec<&LoadedCertificate> = if listener.certificates.is_empty() {
        certificates.iter().collect()
    } else {
        certificates
            .iter()
            .filter(|c| listener.certificates.contains(&c.name))
            .collect()
    };
    let mut resolver = SniResolver {
        exact: HashMap::new(),
        wildcard: HashMap::new(),
        default: None,
    };
    for cert in &served {
        for name in &cert.names {
            let map = match name.strip_prefix("*.") {
                Some(parent) => resolver.wildcard.entry(parent.to_string()),
                None => resolver.exact.entry(name.clone()),
            };
            // The first certificate listed for a name wins.
            map.or_insert_with(|| cert.key.clone());
        }
    }
    if listener.unknown_sni == UnknownSni::Default {
        let default = match &listener.default_certificate {
            Some(name) => served.iter().find(|c| &c.name == name),
            None => served.first(),
        };
        resolver.default = default.map(|c| c.key.clone());
    }
    let builder =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| format!("TLS versions: {e}"))?;
    // The policy's identity: the mode and the exact CA bytes.
    let mut policy = Sha256::new();
    policy.update(format!("{:?}", listener.client_auth));
    let builder = match listener.client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        auth => {
            let file = listener
                .client_ca
                .as_ref()
                .ok_or("client_auth needs client_ca")?;
            let path = wasmgate_base::paths::resolve(base, file);
            let pem =
                std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            policy.update(&pem);
            let roots = wasmgate_base::tls::roots_from_pem(&pem, &path.display().to_string())?;
            let verifier = WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                Arc::new(rustls::crypto::ring::default_provider()),
            );
            let verifier = match auth {
                ClientAuth::Optional => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            let verifier = verifier
                .build()
                .map_err(|e| format!("{}: {e}", path.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    (config.session_storage, config.ticketer) = resumption(address, policy.finalize().into());
    Ok(Arc::new(config))
}

type SessionState = (
    Arc<dyn rustls::server::StoresServerSessions>,
    Arc<dyn rustls::server::ProducesTickets>,
);

/// The session cache and ticketer of the listener at `address` under the
/// client-certificate policy `policy` (a digest of the mode and the CA's
/// bytes). A session is resumed only where it was made under the same
/// policy: a client that shook hands without a certificate on one listener
/// cannot resume on a listener that requires one, nor after a reload that
/// tightened `client_auth` or changed `client_ca` (its ticket no longer
/// decrypts, its session id is not found, so it gets a full handshake,
/// certificate request included). A reload that keeps both keeps the state,
/// and clients keep resuming across it.
///
/// Only weak references are kept here: the state lives as long as a
/// configuration using it (the current one, or the one an older connection
/// was accepted with).
fn resumption(address: &str, policy: [u8; 32]) -> SessionState {
    type Weakly = (
        Weak<dyn rustls::server::StoresServerSessions>,
        Weak<dyn rustls::server::ProducesTickets>,
    );
    static STATES: Mutex<Vec<(String, [u8; 32], Weakly)>> = Mutex::new(Vec::new());
    let mut states = STATES.lock().unwrap_or_else(|e| e.into_inner());
    states.retain(|(_, _, (cache, _))| cache.strong_count() > 0);
    let found = states
        .iter()
        .filter(|(a, p, _)| a == address && *p == policy)
        .find_map(|(_, _, (cache, ticketer))| Some((cache.upgrade()?, ticketer.upgrade()?)));
    if let Some(state) = found {
        return state;
    }
    let cache: Arc<dyn rustls::server::StoresServerSessions> =
        rustls::server::ServerSessionMemoryCache::new(4096);
    let ticketer =
        rustls::crypto::ring::Ticketer::new().expect("the ring ticketer needs only randomness");
    states.push((
        address.to_string(),
        policy,
        (Arc::downgrade(&cache), Arc::downgrade(&ticketer)),
    ));
    (cache, ticketer)
}

/// What a finished handshake tells about the connection.
pub fn connection_info(connection: &rustls::ServerConnection) -> TlsInfo {
    let version = match connection.protocol_version() {
        Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
        Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
        _ => "unknown",
    };
    let leaf = connection
        .peer_certificates()
        .and_then(|chain| chain.first());
    let peer = leaf.and_then(|leaf| crate::x509::Facts::of(leaf).ok());
    TlsInfo {
        version,
        sni: connection.server_name().map(str::to_string),
        alpn: connection
            .alpn_protocol()
            .map(|p| String::from_utf8_lossy(p).into_owned()),
        peer_subject: peer.as_ref().map(|p| p.subject.clone()),
        peer_uri_sans: peer
            .as_ref()
            .map(|p| p.uri_names.clone())
            .unwrap_or_default(),
        peer_certificate: peer.as_ref().and(leaf).map(|leaf| leaf.to_vec()),
        peer_dns_sans: peer.map(|p| p.dns_names).unwrap_or_default(),
    }
}

/// Handshakes completed (full, resumed), and failed by reason, since the
/// process started.
static HANDSHAKES: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];
static FAILURES: [AtomicU64; REASONS.len()] = [const { AtomicU64::new(0) }; REASONS.len()];

/// Why handshakes fail, as `wasmgate_tls_handshake_failures_total{reason}` names it.
pub const REASONS: [&str; 7] = [
    "timeout",
    "not_tls",
    "protocol_version",
    "no_shared_cipher",
    "unknown_sni",
    "client_certificate",
    "other",
];

pub fn count_handshake(connection: &rustls::ServerConnection) {
    let resumed = connection.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    HANDSHAKES[usize::from(resumed)].fetch_add(1, Ordering::Relaxed);
}

/// Counts a failed handshake under the reason `error` shows (a timeout is
/// `None`).
pub fn count_failure(error: Option<&std::io::Error>) -> &'static str {
    let reason = match error {
        None => "timeout",
        Some(error) => reason(error),
    };
    let i = REASONS
        .iter()
        .position(|r| *r == reason)
        .unwrap_or(REASONS.len() - 1);
    FAILURES[i].fetch_add(1, Ordering::Relaxed);
    reason
}

fn reason(error: &std::io::Error) -> &'static str {
    use rustls::{AlertDescription, Error, PeerIncompatible, PeerMisbehaved};
    let Some(tls) = error.get_ref().and_then(|e| e.downcast_ref::<Error>()) else {
        return "other";
    };
    match tls {
        Error::InvalidMessage(_) => "not_tls",
        Error::PeerIncompatible(PeerIncompatible::Tls12NotOfferedOrEnabled)
        | Error::PeerIncompatible(PeerIncompatible::SupportedVersionsExtensionRequired) => {
            "protocol_version"
        }
        Error::PeerIncompatible(PeerIncompatible::NoCipherSuitesInCommon)
        | Error::PeerIncompatible(PeerIncompatible::NoKxGroupsInCommon)
        | Error::PeerIncompatible(PeerIncompatible::NoSignatureSchemesInCommon) => {
            "no_shared_cipher"
        }
        Error::PeerIncompatible(_) => "protocol_version",
        Error::General(message) if message == crate::tls_accept::NO_CERTIFICATE => "unknown_sni",
        Error::NoCertificatesPresented | Error::InvalidCertificate(_) => "client_certificate",
        Error::PeerMisbehaved(PeerMisbehaved::SelectedUnofferedApplicationProtocol) => "other",
        Error::AlertReceived(AlertDescription::ProtocolVersion) => "protocol_version",
        Error::AlertReceived(AlertDescription::BadCertificate)
        | Error::AlertReceived(AlertDescription::UnknownCA) => "client_certificate",
        _ => "other",
    }
}

/// (full handshakes, resumed ones, failures by reason) for `/metrics`.
pub fn handshake_counts() -> (u64, u64, Vec<(&'static str, u64)>) {
    let failures = REASONS
        .iter()
        .zip(&FAILURES)
        .map(|(reason, n)| (*reason, n.load(Ordering::Relaxed)))
        .collect();
    let [full, resumed] = &HANDSHAKES;
    (
        full.load(Ordering::Relaxed),
        resumed.load(Ordering::Relaxed),
        failures,
    )
}
