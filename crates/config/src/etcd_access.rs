//! How a node reaches etcd and what it asks of the values there: TLS with
//! a private CA and a client certificate (etcd's `--client-cert-auth`), a
//! user and password (etcd's `auth enable`), and the keys that seal every
//! configuration object at rest (docs/cluster.md, "Securing etcd").

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// TLS to etcd (`https://` endpoints). Files are relative to the node's file.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EtcdTls {
    /// PEM of the CA that signed etcd's serving certificate (etcd's
    /// `--trusted-ca-file` side is the client's `cert`).
    pub ca: PathBuf,
    /// This node's client certificate (PEM), for etcd's `--client-cert-auth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
    /// The name etcd's certificate is checked against, when it is not the
    /// endpoints' host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
}

/// etcd's own authentication: the node signs in as `user`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EtcdAuth {
    pub user: String,
    /// The environment variable holding the password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_env: Option<String>,
    /// Or a file holding it (relative to the node's file; one trailing
    /// newline is ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
}

/// The keys that seal configuration objects in etcd (AES-256-GCM): the
/// first seals what this node or `config push --node` writes, every one
/// opens. With keys set, a value that is not sealed by one of them is
/// refused, so an etcd writer without a key can neither read the
/// configuration nor add to it.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Encryption {
    pub keys: Vec<EncryptionKey>,
}

/// One key: 32 random bytes, base64 (`head -c 32 /dev/urandom | base64`),
/// from a file or an environment variable.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EncryptionKey {
    /// Written beside each sealed value, to find the key that opens it.
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
}

/// The checks of `config.etcd_tls`, `config.etcd_auth` and
/// `config.encryption` against the endpoints.
pub(crate) fn check(
    endpoints: &[String],
    tls: Option<&EtcdTls>,
    auth: Option<&EtcdAuth>,
    encryption: Option<&Encryption>,
    problem: &mut dyn FnMut(String, String),
) {
    let https = endpoints
        .iter()
        .filter(|e| e.starts_with("https://"))
        .count();
    if https > 0 && https < endpoints.len() {
        problem(
            "config.etcd".into(),
            "every endpoint `https://` or none: a node would send its password in plain text to the others".into(),
        );
    }
    match tls {
        None if https > 0 => problem(
            "config.etcd_tls".into(),
            "`https://` endpoints need `etcd_tls.ca`, the CA that signed etcd's certificate".into(),
        ),
        Some(_) if https == 0 && !endpoints.is_empty() => problem(
            "config.etcd_tls".into(),
            "TLS is set but the endpoints are `http://`: name them `https://`".into(),
        ),
        Some(t) if t.cert.is_some() != t.key.is_some() => problem(
            "config.etcd_tls".into(),
            "a client certificate needs both `cert` and `key`".into(),
        ),
        _ => {}
    }
    if let Some(auth) = auth {
        if auth.user.is_empty() {
            problem("config.etcd_auth.user".into(), "name the etcd user".into());
        }
        if auth.password_env.is_some() == auth.password_file.is_some() {
            problem(
                "config.etcd_auth".into(),
                "give the password as one of `password_env` or `password_file`".into(),
            );
        }
        if https == 0 && !endpoints.is_empty() {
            problem(
                "config.etcd_auth".into(),
                "a password over `http://` goes in plain text: use `https://` endpoints with `etcd_tls`".into(),
            );
        }
    }
    if let Some(encryption) = encryption {
        if encryption.keys.is_empty() {
            problem(
                "config.encryption.keys".into(),
                "name at least one key (the first seals)".into(),
            );
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, key) in encryption.keys.iter().enumerate() {
            let at = format!("config.encryption.keys[{i}]");
            if key.id.is_empty() || !seen.insert(key.id.as_str()) {
                problem(format!("{at}.id"), "a unique, non-empty id".into());
            }
            if key.file.is_some() == key.env.is_some() {
                problem(at, "give the key as one of `file` or `env`".into());
            }
        }
    }
}
