//! TLS: the node's listeners (plain or TLS, with SNI, ALPN and client
//! certificates), the certificates they serve (shared configuration, like
//! routes: files in file mode, PEM text through the admin API and etcd),
//! and TLS to upstreams.

use std::collections::HashSet;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One traffic listener: an address, and TLS if it has a `tls` section.
/// Both speak HTTP/1.1 and HTTP/2 (h2c on a plain one; by ALPN over TLS).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// `IP:port`.
    pub address: String,
    /// Serve HTTPS here (docs/tls.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsListener>,
    /// Connections this listener holds at once (default: `limits.max_connections`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<usize>,
}

/// A TLS listener's settings (a node setting: certificates themselves are
/// the shared `certificates` section).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsListener {
    /// The certificates served, by name (default: every one of
    /// `certificates`). A handshake gets the one whose names match its SNI
    /// (exact names first, then `*.` wildcards).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<String>,
    /// What a client without SNI, or with a name no certificate covers,
    /// gets: the default certificate (`default`) or a refused handshake
    /// (`refuse`).
    #[serde(default)]
    pub unknown_sni: UnknownSni,
    /// The certificate `unknown_sni: default` serves (default: the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_certificate: Option<String>,
    /// Client certificates: not asked for (`none`), verified when sent
    /// (`optional`), or required (`required`, mTLS).
    #[serde(default)]
    pub client_auth: ClientAuth,
    /// PEM file of the CAs client certificates must chain to (needed with
    /// `client_auth`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<PathBuf>,
    /// Time a client has to complete its handshake (then the connection is
    /// closed and counted as `timeout`).
    #[serde(default = "default_handshake_timeout_ms")]
    pub handshake_timeout_ms: u64,
}

fn default_handshake_timeout_ms() -> u64 {
    10_000
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum UnknownSni {
    /// The default certificate.
    #[default]
    Default,
    /// The handshake fails (`unrecognized_name`).
    Refuse,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuth {
    #[default]
    None,
    Optional,
    Required,
}

/// A certificate chain and its private key, served by TLS listeners to the
/// names it covers. Given as files (paths relative to the configuration
/// file, watched for changes) or as PEM text (what the admin API and etcd
/// carry; `key_pem` is never shown back).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CertificateConfig {
    /// 1-64 letters, digits, `.`, `_` and `-`, beginning with a letter or digit.
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"))]
    pub name: String,
    /// PEM file of the chain, leaf first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    /// PEM file of the private key (RSA, ECDSA or Ed25519; PKCS#8, PKCS#1 or SEC1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
    /// The chain as PEM text, instead of `cert`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_pem: Option<String>,
    /// The private key as PEM text, instead of `key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_pem: Option<String>,
    /// Names it is served for (exact, or `*.` wildcards); default: the DNS
    /// names of its subjectAltName.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snis: Vec<String>,
}

/// TLS to an upstream's nodes.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTls {
    /// The name sent as SNI and verified in the node's certificate (default:
    /// the node's host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
    /// PEM file of the CAs to trust (default: the Mozilla roots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// The same as PEM text (as a Kubernetes ConfigMap's `ca.crt` brings
    /// them); one of `ca_file` and `ca_pem`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_pem: Option<String>,
    /// Verify the node's certificate (default: yes). Turning it off is for
    /// tests; the log says so at every build.
    #[serde(default = "yes")]
    pub verify: bool,
    /// Client certificate (PEM file) and key, for upstreams that want mTLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key: Option<PathBuf>,
}

fn yes() -> bool {
    true
}

/// `listeners`: addresses, certificates named, client CA given when
/// asked for; `certificates` (the names declared) each with a chain and a
/// key from one source. In a cluster (`clustered`) certificates are
/// written through the admin API after the nodes start, so a TLS listener
/// may name certificates not there yet: it refuses handshakes for those
/// names until they are (docs/tls.md).
pub(crate) fn check(
    clustered: bool,
    listen: Option<&str>,
    listeners: &[ListenerConfig],
    certificates: &[CertificateConfig],
    declared: &HashSet<&str>,
    problem: &mut dyn FnMut(String, String),
) {
    for (i, c) in certificates.iter().enumerate() {
        let at = crate::names::entry("certificates", i, &c.name);
        for (what, file, pem) in [
            ("cert", c.cert.is_some(), c.cert_pem.is_some()),
            ("key", c.key.is_some(), c.key_pem.is_some()),
        ] {
            if file == pem {
                problem(
                    at.clone(),
                    format!("give one of `{what}` (a PEM file) or `{what}_pem` (the PEM text)"),
                );
            }
        }
        for (j, sni) in c.snis.iter().enumerate() {
            let wildcard_ok = sni
                .strip_prefix("*.")
                .is_some_and(|rest| !rest.contains('*'));
            if sni.contains('*') && !wildcard_ok {
                problem(
                    format!("{at}.snis[{j}]"),
                    format!("`{sni}`: only a leading `*.` wildcard is supported"),
                );
            }
        }
    }
    let mut addresses: HashSet<&str> = listen.into_iter().collect();
    for (i, l) in listeners.iter().enumerate() {
        let at = format!("listeners[{i}]");
        if l.address.parse::<std::net::SocketAddr>().is_err() {
            problem(
                format!("{at}.address"),
                format!("`{}` is not an IP:port address", l.address),
            );
        } else if !addresses.insert(l.address.as_str()) {
            problem(
                format!("{at}.address"),
                format!("`{}` is listened on twice", l.address),
            );
        }
        let Some(tls) = &l.tls else { continue };
        for (j, name) in tls.certificates.iter().enumerate() {
            if !clustered && !declared.contains(name.as_str()) {
                problem(
                    format!("{at}.tls.certificates[{j}]"),
                    format!("no certificate named `{name}` in `certificates`"),
                );
            }
        }
        if let Some(name) = &tls.default_certificate {
            if !clustered && !declared.contains(name.as_str()) {
                problem(
                    format!("{at}.tls.default_certificate"),
                    format!("no certificate named `{name}` in `certificates`"),
                );
            }
        }
        if tls.client_auth != ClientAuth::None && tls.client_ca.is_none() {
            problem(
                format!("{at}.tls.client_ca"),
                "client_auth needs client_ca (the CAs client certificates chain to)".into(),
            );
        }
        if !clustered && certificates.is_empty() {
            problem(
                format!("{at}.tls"),
                "a TLS listener needs a certificate: declare one in `certificates`".into(),
            );
        }
    }
}

/// An upstream's TLS: a client key comes with its certificate.
pub(crate) fn check_upstream(at: &str, tls: &UpstreamTls, problem: &mut dyn FnMut(String, String)) {
    if tls.client_cert.is_some() != tls.client_key.is_some() {
        problem(
            format!("{at}.tls"),
            "give client_cert and client_key together".into(),
        );
    }
    if tls.ca_file.is_some() && tls.ca_pem.is_some() {
        problem(
            format!("{at}.tls"),
            "give ca_file or ca_pem, not both".into(),
        );
    }
}
