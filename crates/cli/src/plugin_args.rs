//! Flags shared by `serve` and `call`: which plugin, and what it may do.
//! They start from the manifest (if one is given) and override it.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use wasmgate_extism::{
    Manifest, Plugin, PluginOptions, PoolConfig, PrecompiledPolicy, Runtime, RuntimeConfig,
};
use wasmgate_services::{ServiceConfig, Services};

#[derive(Args, Clone, Debug)]
pub struct PluginArgs {
    /// Plugin: a .wasm/.wat module, a .cwasm from `wasmgate compile` (with --allow-precompiled), an Extism manifest (.json), or an image in an OCI registry, oci://registry/repository:tag (or @sha256:...).
    pub plugin: PathBuf,
    #[command(flatten)]
    pub registry: crate::registry_args::RegistryArgs,
    /// Load a precompiled module (.cwasm from `wasmgate compile`) named by
    /// this plugin or its manifest's `path` entries. It is native code that
    /// runs without the sandbox's checks: only for files you compiled.
    #[arg(long)]
    pub allow_precompiled: bool,
    /// Config value for the plugin, `KEY=VALUE` (repeatable).
    #[arg(long = "config", value_name = "KEY=VALUE")]
    pub config: Vec<String>,
    /// Host outbound HTTP may reach; globs like `*.example.com` (repeatable).
    #[arg(long = "allow-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
    /// Directory the plugin may open via WASI, `HOST_DIR:GUEST_DIR`; prefix `ro:` for read-only (repeatable).
    #[arg(long = "allow-path", value_name = "[ro:]HOST:GUEST")]
    pub allowed_paths: Vec<String>,
    /// Linear memory cap per instance, in MiB (overrides the manifest's max_pages).
    #[arg(long, value_name = "MIB")]
    pub memory_limit: Option<u32>,
    /// Deadline of one call in milliseconds (overrides the manifest's timeout_ms).
    #[arg(long, value_name = "MS")]
    pub timeout_ms: Option<u64>,
    /// Largest total size of the plugin's vars, in bytes (0 disables vars).
    #[arg(long, value_name = "BYTES")]
    pub max_var_bytes: Option<u64>,
    /// Largest HTTP response body the plugin may receive, in bytes.
    #[arg(long, value_name = "BYTES")]
    pub max_http_response_bytes: Option<u64>,
    /// A service the plugin may use, `NAME=URL` with a `redis://`,
    /// `rediss://` or `postgres://` URL (repeatable; docs/services.md).
    #[arg(long = "service", value_name = "NAME=URL")]
    pub services: Vec<String>,
    /// Connections per service (0: a connection per call, no pooling).
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub service_pool_size: usize,
    /// Deadline of one command or query, in milliseconds (default: 1000
    /// for Redis, 5000 for PostgreSQL).
    #[arg(long, value_name = "MS")]
    pub service_timeout_ms: Option<u64>,
    /// A PEM file of CA certificates the services' TLS trusts (a private CA).
    #[arg(long, value_name = "PEM")]
    pub service_ca_file: Option<PathBuf>,
    /// Name for logs and errors (default: the module's file name).
    #[arg(long)]
    pub name: Option<String>,
    /// Directory for the compiled-module cache (default: $XDG_CACHE_HOME/wasmgate or ~/.cache/wasmgate).
    #[arg(long, env = "WASMGATE_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Compile in memory every time instead of using the on-disk cache.
    #[arg(long)]
    pub no_cache: bool,
}

impl PluginArgs {
    /// An `oci://` plugin is pulled (into the cache directory) and named
    /// after its repository; any other is left as it is.
    pub fn pull_if_in_registry(&mut self) -> Result<()> {
        let text = self.plugin.to_string_lossy().into_owned();
        if !wasmgate_oci::is_oci(&text) {
            return Ok(());
        }
        anyhow::ensure!(
            !self.allow_precompiled,
            "{text}: --allow-precompiled: a module from a registry is never loaded precompiled (it would be native code from the network); push the .wasm"
        );
        self.plugin = self
            .registry
            .local_file(&self.plugin, self.cache_dir().as_deref())?;
        if self.name.is_none() {
            let repository = text.rsplit('/').next().unwrap_or(&text);
            let name = repository.split(['@', ':']).next().unwrap_or(repository);
            self.name = Some(name.to_string());
        }
        Ok(())
    }

    fn cache_dir(&self) -> Option<PathBuf> {
        if self.no_cache {
            None
        } else {
            self.cache_dir.clone().or_else(default_cache_dir)
        }
    }

    /// The manifest the flags describe.
    pub fn manifest(&self) -> Result<Manifest> {
        let mut manifest = if self.plugin.extension().is_some_and(|e| e == "json") {
            Manifest::from_file(&self.plugin)?
        } else {
            Manifest::from_wasm_file(&self.plugin)
        };
        for pair in &self.config {
            let (key, value) = pair
                .split_once('=')
                .with_context(|| format!("--config {pair:?}: expected KEY=VALUE"))?;
            manifest.config.insert(key.to_string(), value.to_string());
        }
        if !self.allowed_hosts.is_empty() {
            manifest
                .allowed_hosts
                .get_or_insert_with(Vec::new)
                .extend(self.allowed_hosts.iter().cloned());
        }
        for mapping in &self.allowed_paths {
            let (ro, rest) = match mapping.strip_prefix("ro:") {
                Some(rest) => ("ro:", rest),
                None => ("", mapping.as_str()),
            };
            let Some((host, guest)) = rest.split_once(':') else {
                bail!("--allow-path {mapping:?}: expected [ro:]HOST_DIR:GUEST_DIR");
            };
            manifest
                .allowed_paths
                .get_or_insert_with(Default::default)
                .insert(format!("{ro}{host}"), PathBuf::from(guest));
        }
        if let Some(mib) = self.memory_limit {
            manifest.memory.max_pages = Some(mib.saturating_mul(16));
        }
        if let Some(ms) = self.timeout_ms {
            manifest.timeout_ms = Some(ms);
        }
        if let Some(bytes) = self.max_var_bytes {
            manifest.memory.max_var_bytes = Some(bytes);
        }
        if let Some(bytes) = self.max_http_response_bytes {
            manifest.memory.max_http_response_bytes = Some(bytes);
        }
        Ok(manifest)
    }

    pub fn runtime(&self) -> Result<Runtime> {
        Runtime::new(RuntimeConfig {
            cache_dir: self.cache_dir(),
            ..RuntimeConfig::default()
        })
    }

    /// The services of `--service`, all granted to the plugin. Their pools
    /// connect on first use, so a database that is down does not stop the
    /// plugin from starting (its calls fail with `unavailable` until then).
    fn services(&self) -> Result<wasmgate_services::Grants> {
        let mut configs = Vec::new();
        for flag in &self.services {
            let mut config = ServiceConfig::from_flag(flag).map_err(anyhow::Error::msg)?;
            config.pool_size = self.service_pool_size;
            config.timeout_ms = self.service_timeout_ms;
            config.tls_ca_file = self.service_ca_file.clone();
            if let Some((_, problem)) = config.check().into_iter().next() {
                bail!("--service {}: {problem}", config.name);
            }
            if configs
                .iter()
                .any(|c: &ServiceConfig| c.name == config.name)
            {
                bail!("--service {}: given twice", config.name);
            }
            configs.push(config);
        }
        let built = Services::build(&configs, &Services::new())
            .map_err(|(name, e)| anyhow::anyhow!("--service {name}: {e}"))?;
        Ok(wasmgate_services::Grants::new(built.all()))
    }

    pub fn load(&self, runtime: &Runtime, pool: PoolConfig, manifest: &Manifest) -> Result<Plugin> {
        let services = self.services()?;
        Plugin::new(
            runtime,
            manifest,
            PluginOptions {
                name: self.name.clone(),
                pool,
                host_functions: Vec::new(),
                services,
                precompiled: if self.allow_precompiled {
                    PrecompiledPolicy::Allowed
                } else {
                    PrecompiledPolicy::Refused
                },
            },
        )
        .with_context(|| {
            // A manifest's errors name its modules' files, not the manifest.
            match self.plugin.extension().is_some_and(|e| e == "json") {
                true => format!("loading plugin {}", self.plugin.display()),
                false => "loading plugin".to_string(),
            }
        })
    }
}

pub fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("wasmgate"))
}

/// Parses a duration in milliseconds from a flag.
pub fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}
