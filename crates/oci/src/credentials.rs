//! Who the registry is told the node is. Credentials the configuration (or
//! the command line) gives come first; without them, the registry's entry
//! in Docker's `config.json` (`$DOCKER_CONFIG`, else `~/.docker`), as
//! `docker login` or `oras login` leave it, credential helpers included;
//! without that, anonymous. Either way oci-client answers the registry's
//! challenge: HTTP basic auth, or the bearer-token flow (a token fetched
//! from the registry's token service with the credentials, per repository).

use std::fmt;

use anyhow::Result;
use docker_credential::{CredentialRetrievalError, DockerCredential};
use oci_client::secrets::RegistryAuth;

#[derive(Clone, Default, PartialEq, Eq)]
pub enum Credentials {
    /// Docker's `config.json` if it has the registry, else anonymous.
    #[default]
    FromDockerConfig,
    Anonymous,
    Basic {
        username: String,
        password: String,
    },
    /// A token sent as `Authorization: Bearer` as is (a registry access
    /// token obtained elsewhere), without the token flow.
    Token(String),
}

/// Never the secrets themselves: these reach logs and errors.
impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

impl Credentials {
    /// What kind of credentials, for messages (no secret in it).
    pub fn describe(&self) -> &'static str {
        match self {
            Credentials::FromDockerConfig => "Docker config.json or anonymous",
            Credentials::Anonymous => "anonymous",
            Credentials::Basic { .. } => "username and password",
            Credentials::Token(_) => "bearer token",
        }
    }

    /// What to give oci-client for `registry`, and where it came from.
    pub(crate) async fn for_registry(&self, registry: &str) -> Result<(RegistryAuth, String)> {
        Ok(match self {
            Credentials::Anonymous => (RegistryAuth::Anonymous, "anonymous".into()),
            Credentials::Basic { username, password } => (
                RegistryAuth::Basic(username.clone(), password.clone()),
                format!("user `{username}` from the configuration"),
            ),
            Credentials::Token(token) => (
                RegistryAuth::Bearer(token.clone()),
                "a bearer token from the configuration".into(),
            ),
            Credentials::FromDockerConfig => {
                let server = registry.to_string();
                // A credential helper is a process: not on the async threads.
                let found =
                    tokio::task::spawn_blocking(move || docker_credential::get_credential(&server))
                        .await?;
                match found {
                    Ok(DockerCredential::UsernamePassword(username, password)) => {
                        let from = format!("user `{username}` from Docker's config.json");
                        (RegistryAuth::Basic(username, password), from)
                    }
                    Ok(DockerCredential::IdentityToken(_)) => anyhow::bail!(
                        "Docker's config.json holds an identity token for {registry}, which wasmgate cannot exchange: give `username`/`password` (or a `token`) in the plugin's `registry` settings"
                    ),
                    Err(CredentialRetrievalError::ConfigNotFound)
                    | Err(CredentialRetrievalError::ConfigReadError)
                    | Err(CredentialRetrievalError::NoCredentialConfigured) => {
                        (RegistryAuth::Anonymous, "anonymous".into())
                    }
                    // A `credsStore` whose helper is not installed here (a
                    // laptop's config.json on a server) must not stop pulls
                    // from a public registry: anonymous, and say why.
                    Err(e) => {
                        tracing::warn!(registry, error = %e, "Docker's config.json gives no usable credentials for the registry; pulling anonymously");
                        (RegistryAuth::Anonymous, "anonymous (config.json unusable)".into())
                    }
                }
            }
        })
    }
}
