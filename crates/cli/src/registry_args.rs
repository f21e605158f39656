//! `serve`, `call` and `compile` take `oci://registry/repository:tag` (or
//! `@sha256:...`) where they take a module's path: the module is pulled
//! into the cache directory first (docs/plugins.md), then used like a file.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use wasmgate_oci::{Credentials, OciReference, PullPolicy, PullSettings};

#[derive(Args, Clone, Debug, Default)]
pub struct RegistryArgs {
    /// For an oci:// module: when to ask the registry what a tag points to
    /// (default: always for `latest`, else if-not-present).
    #[arg(long, value_enum, value_name = "POLICY")]
    pub pull: Option<PullArg>,
    /// For an oci:// module: plain HTTP to the registry (a local one).
    #[arg(long, visible_alias = "insecure")]
    pub plain_http: bool,
    /// For an oci:// module: a PEM file of CA certificates the registry's
    /// certificate may chain to (a private CA).
    #[arg(long, value_name = "PEM")]
    pub registry_ca_file: Option<PathBuf>,
    /// For an oci:// module: the registry user, whose password is read from
    /// $WASMGATE_REGISTRY_PASSWORD (never from a flag). Without it, a token
    /// in $WASMGATE_REGISTRY_TOKEN, else Docker's config.json, else none.
    #[arg(long, env = "WASMGATE_REGISTRY_USERNAME", value_name = "USER")]
    pub registry_username: Option<String>,
    /// For an oci:// module: the SHA-256 the image (its digest) or the
    /// module must have.
    #[arg(long, value_name = "HEX")]
    pub sha256: Option<String>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum PullArg {
    IfNotPresent,
    Always,
}

impl RegistryArgs {
    /// The local file of `module`: itself, or, for an `oci://` reference,
    /// the module pulled into `cache_dir`'s store. Runs outside any async
    /// runtime (on a thread of its own).
    pub fn local_file(&self, module: &Path, cache_dir: Option<&Path>) -> Result<PathBuf> {
        let text = module.to_string_lossy();
        if !wasmgate_oci::is_oci(&text) {
            return Ok(module.to_path_buf());
        }
        let reference = OciReference::parse(&text)?;
        let settings = self.settings()?;
        let root = wasmgate_gateway::pulled_plugins_dir(cache_dir)?;
        let pulled = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?
                        .block_on(wasmgate_oci::pull(&reference, &settings, root))
                })
                .join()
                .expect("the pull's thread does not panic")
        })?;
        tracing::info!(
            image = %pulled.pinned,
            module_sha256 = %pulled.module_sha256,
            from = if pulled.asked_registry { "registry" } else { "this node's store" },
            "plugin module pulled"
        );
        Ok(pulled.file)
    }

    fn settings(&self) -> Result<PullSettings> {
        let secret = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let credentials = match (&self.registry_username, secret("WASMGATE_REGISTRY_TOKEN")) {
            (Some(username), _) => Credentials::Basic {
                username: username.clone(),
                password: secret("WASMGATE_REGISTRY_PASSWORD").context(
                    "--registry-username: the password is read from $WASMGATE_REGISTRY_PASSWORD, which is not set",
                )?,
            },
            (None, Some(token)) => Credentials::Token(token),
            (None, None) => Credentials::FromDockerConfig,
        };
        Ok(PullSettings {
            policy: self.pull.map(|p| match p {
                PullArg::IfNotPresent => PullPolicy::IfNotPresent,
                PullArg::Always => PullPolicy::Always,
            }),
            credentials,
            plain_http: self.plain_http,
            ca_file: self.registry_ca_file.clone(),
            expected_sha256: self.sha256.clone(),
            ..PullSettings::default()
        })
    }
}
