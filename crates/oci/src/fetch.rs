//! Where a plugin's module comes from on this node. A path is read where it
//! is (relative to the configuration file); an `http://` or `https://` URL,
//! which every node of a cluster can reach, is fetched once into
//! `<cache dir>/plugins/<sha256>.wasm` and read from there afterwards. A URL
//! needs the module's `sha256`, checked before the copy is kept, so a
//! changed or tampered file at the URL is refused, not run; any module with
//! a `sha256` is checked against it when loaded (`plugins.rs`). An
//! `oci://` reference is pulled from its registry (`pull.rs`) into the same
//! directory (its `sha256`, the image's digest or the module's, is checked
//! there). Here, not in the gateway, so that every way a module reaches
//! this node is one crate's concern.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

use wasmgate_config::PluginConfig;

/// Largest module fetched (a Go plugin is a few MiB).
const MAX_MODULE_BYTES: usize = 256 << 20;
const FETCH_TIMEOUT: Duration = Duration::from_secs(60);
/// As plugins' own outbound requests (`wasmgate_services::outbound_http`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Whether `p`'s module is given by URL.
pub fn is_url(p: &PluginConfig) -> bool {
    p.wasm
        .to_str()
        .is_some_and(|w| w.starts_with("http://") || w.starts_with("https://"))
}

/// Where a module was found.
pub struct ModuleFile {
    pub path: PathBuf,
    /// An `oci://` module: the image it was pulled from, pinned to its
    /// digest (its `sha256` was checked by the pull).
    pub image: Option<String>,
}

/// The local file `p`'s module is read from, fetching it first if it is a
/// URL, pulling it if it is in an OCI registry.
pub async fn module_file(
    p: &PluginConfig,
    base: &Path,
    cache_dir: Option<&Path>,
) -> Result<ModuleFile> {
    if p.is_oci() {
        let reference = crate::OciReference::parse(&p.wasm.to_string_lossy())?;
        let settings = pull_settings(p, base)?;
        let pulled = crate::pull(&reference, &settings, pulled_plugins_dir(cache_dir)?).await?;
        tracing::info!(
            plugin = %p.name,
            image = %pulled.pinned,
            module_sha256 = %pulled.module_sha256,
            from = if pulled.asked_registry { "registry" } else { "this node's store" },
            "plugin module pulled"
        );
        return Ok(ModuleFile {
            path: pulled.file,
            image: Some(pulled.pinned.to_string()),
        });
    }
    let path = url_or_path(p, base, cache_dir).await?;
    Ok(ModuleFile { path, image: None })
}

/// How `p`'s registry is reached, from its `pull` and `registry` settings.
pub fn pull_settings(p: &PluginConfig, base: &Path) -> Result<crate::PullSettings> {
    let registry = p.registry.clone().unwrap_or_default();
    let from_env = |name: &str| {
        std::env::var(name).with_context(|| {
            format!("the registry's secret is to come from ${name}, which is not set")
        })
    };
    let password = match (&registry.password, &registry.password_env) {
        (Some(password), _) => Some(password.clone()),
        (None, Some(name)) => Some(from_env(name)?),
        (None, None) => None,
    };
    let token = match (&registry.token, &registry.token_env) {
        (Some(token), _) => Some(token.clone()),
        (None, Some(name)) => Some(from_env(name)?),
        (None, None) => None,
    };
    let credentials = match (registry.username, password, token) {
        (Some(username), Some(password), _) => crate::Credentials::Basic { username, password },
        (_, _, Some(token)) => crate::Credentials::Token(token),
        _ => crate::Credentials::FromDockerConfig,
    };
    Ok(crate::PullSettings {
        policy: p.pull.map(|policy| match policy {
            wasmgate_config::PullPolicy::IfNotPresent => crate::PullPolicy::IfNotPresent,
            wasmgate_config::PullPolicy::Always => crate::PullPolicy::Always,
        }),
        credentials,
        plain_http: registry.plain_http,
        ca_file: registry
            .ca_file
            .map(|f| wasmgate_base::paths::resolve(base, f)),
        expected_sha256: p.sha256.clone(),
        max_bytes: registry
            .max_mb
            .map_or(crate::DEFAULT_MAX_BYTES, |mib| mib << 20),
        timeout: registry
            .timeout_ms
            .map_or(crate::DEFAULT_TIMEOUT, Duration::from_millis),
    })
}

/// Where pulled images are kept: the compile cache's directory (private to
/// this user), else a private directory of this process.
pub fn pulled_plugins_dir(cache_dir: Option<&Path>) -> Result<PathBuf> {
    static PRIVATE: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    if let Some(dir) = cache_dir {
        return Ok(dir.to_path_buf());
    }
    if let Some(dir) = PRIVATE.get() {
        return Ok(dir.path().to_path_buf());
    }
    let dir = tempfile::Builder::new()
        .prefix("wasmgate-pulled-")
        .tempdir()
        .context("creating a directory for pulled plugins")?;
    Ok(PRIVATE.get_or_init(|| dir).path().to_path_buf())
}

async fn url_or_path(p: &PluginConfig, base: &Path, cache_dir: Option<&Path>) -> Result<PathBuf> {
    if !is_url(p) {
        let path = wasmgate_base::paths::resolve(base, &p.wasm);
        if p.wasm.is_relative() && !path.exists() {
            // Say where a relative path led: it is the configuration's
            // directory, not the one wasmgate was started in.
            let shown = std::path::absolute(&path).unwrap_or(path);
            anyhow::bail!(
                "no file {}: `{}` is resolved against the configuration's directory",
                shown.display(),
                p.wasm.display()
            );
        }
        return Ok(path);
    }
    let url = p.wasm.to_string_lossy().into_owned();
    let expected = p
        .sha256
        .as_deref()
        .map(str::to_ascii_lowercase)
        .context("a module fetched from a URL needs its `sha256`")?;
    let dir = match cache_dir {
        Some(dir) => dir.join("plugins"),
        None => std::env::temp_dir().join("wasmgate-plugins"),
    };
    let file = dir.join(format!("{expected}.wasm"));
    if file_has_hash(&file, &expected) {
        return Ok(file);
    }
    let bytes = fetch(&url)
        .await
        .with_context(|| format!("fetching {url}"))?;
    let actual = hex::encode(Sha256::digest(&bytes));
    if actual != expected {
        bail!("{url}: sha256 mismatch: the configuration expects {expected}, the module fetched has {actual}");
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    wasmgate_base::fs::write_atomically(&file, &bytes)
        .with_context(|| format!("writing {}", file.display()))?;
    Ok(file)
}

/// Whether `file` exists with SHA-256 `expected` (a copy fetched before).
fn file_has_hash(file: &Path, expected: &str) -> bool {
    std::fs::read(file).is_ok_and(|bytes| hex::encode(Sha256::digest(&bytes)) == expected)
}

async fn fetch(url: &str) -> Result<Vec<u8>> {
    // The roots plugins' own requests trust (wasmgate_base::tls), no
    // redirects followed: a URL names the module's one place.
    let tls = wasmgate_base::tls::client_config(None)?;
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured((*tls).clone())
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .context("building the HTTP client")?;
    let exchange = async {
        let mut response = client.get(url).send().await?;
        if !response.status().is_success() {
            bail!("answered {}", response.status());
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| anyhow::anyhow!("reading the body: {e}"))?
        {
            if bytes.len() + chunk.len() > MAX_MODULE_BYTES {
                bail!("reading the body: longer than {MAX_MODULE_BYTES} bytes");
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    };
    tokio::time::timeout(FETCH_TIMEOUT, exchange)
        .await
        .with_context(|| format!("no answer in {FETCH_TIMEOUT:?}"))?
}
