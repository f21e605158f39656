//! Reaching etcd as a node's file says (`config.etcd`, `etcd_tls`,
//! `etcd_auth`, `encryption`), for the node's store and for `wasmgate
//! config push --node`. Files (CA, client certificate, password) are read
//! at every connection, so a renewed certificate is used at the next
//! reconnect without a restart.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use wasmgate_config::{ConfigSource, EtcdAuth, EtcdTls};

use crate::seal::Keyring;

pub struct EtcdAccess {
    pub endpoints: Vec<String>,
    tls: Option<EtcdTls>,
    auth: Option<EtcdAuth>,
    /// The directory the node's file is in: relative paths start there.
    base: PathBuf,
    /// Seals what is written and opens what is read, when set.
    pub keyring: Option<Keyring>,
}

impl EtcdAccess {
    /// Access as `source` describes it; `base` is its file's directory.
    /// The encryption keys are read now: a node without them does not start.
    pub fn new(source: &ConfigSource, base: &Path) -> Result<EtcdAccess> {
        let keyring = match &source.encryption {
            Some(encryption) => Some(Keyring::load(encryption, base)?),
            None => None,
        };
        Ok(EtcdAccess {
            endpoints: source.etcd.clone(),
            tls: source.etcd_tls.clone(),
            auth: source.etcd_auth.clone(),
            base: base.to_path_buf(),
            keyring,
        })
    }

    /// Plain access to `endpoints` (`config push --etcd`).
    pub fn plain(endpoints: &[String]) -> EtcdAccess {
        EtcdAccess {
            endpoints: endpoints.to_vec(),
            tls: None,
            auth: None,
            base: PathBuf::from("."),
            keyring: None,
        }
    }

    /// A connected client.
    pub async fn connect(&self, connect_timeout: Duration, timeout: Duration) -> Result<Client> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(connect_timeout)
            .with_timeout(timeout);
        if let Some(tls) = &self.tls {
            options = options.with_tls(self.tls_options(tls)?);
        }
        if let Some(auth) = &self.auth {
            options = options.with_user(auth.user.clone(), self.password(auth)?);
        }
        Client::connect(&self.endpoints, Some(options))
            .await
            .with_context(|| format!("connecting to etcd at {}", self.endpoints.join(", ")))
    }

    fn read(&self, what: &str, file: &Path) -> Result<String> {
        let path = wasmgate_base::paths::resolve(&self.base, file);
        std::fs::read_to_string(&path)
            .with_context(|| format!("config.{what}: cannot read {}", path.display()))
    }

    fn tls_options(&self, tls: &EtcdTls) -> Result<TlsOptions> {
        let mut options = TlsOptions::new()
            .ca_certificate(Certificate::from_pem(self.read("etcd_tls.ca", &tls.ca)?));
        if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
            options = options.identity(Identity::from_pem(
                self.read("etcd_tls.cert", cert)?,
                self.read("etcd_tls.key", key)?,
            ));
        }
        if let Some(name) = &tls.server_name {
            options = options.domain_name(name.clone());
        }
        Ok(options)
    }

    fn password(&self, auth: &EtcdAuth) -> Result<String> {
        match (&auth.password_env, &auth.password_file) {
            (Some(env), _) => std::env::var(env)
                .with_context(|| format!("config.etcd_auth.password_env: ${env} is not set")),
            (None, Some(file)) => Ok(self
                .read("etcd_auth.password_file", file)?
                .trim_end_matches(['\r', '\n'])
                .to_string()),
            (None, None) => anyhow::bail!("config.etcd_auth: no password given"),
        }
    }
}
