//! Where a plugin's module comes from on this node. A path is read where it
//! is (relative to the configuration file); an `http://` or `https://` URL,
//! which every node of a cluster can reach, is fetched once into
//! `<cache dir>/plugins/<sha256>.wasm` and read from there afterwards. A URL
//! needs the module's `sha256`, checked before the copy is kept, so a
//! changed or tampered file at the URL is refused, not run; any module with
//! a `sha256` is checked against it when loaded (`plugins.rs`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use sha2::{Digest, Sha256};

use wasmgate_config::PluginConfig;

/// Largest module fetched (a Go plugin is a few MiB).
const MAX_MODULE_BYTES: usize = 256 << 20;
const FETCH_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether `p`'s module is given by URL.
pub(crate) fn is_url(p: &PluginConfig) -> bool {
    p.wasm
        .to_str()
        .is_some_and(|w| w.starts_with("http://") || w.starts_with("https://"))
}

/// The local file `p`'s module is read from, fetching it first if it is a URL.
pub(crate) async fn module_file(
    p: &PluginConfig,
    base: &Path,
    cache_dir: Option<&Path>,
) -> Result<PathBuf> {
    if !is_url(p) {
        let path = crate::gateway::plugin_path(base, p);
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

async fn fetch(url: &str) -> Result<Bytes> {
    let uri: hyper::Uri = url.parse().context("not a URL")?;
    let exchange = async {
        // The client plugins' own requests go out with (the same timeouts, TLS roots).
        let response = wasmgate_services::outbound_http::client().get(uri).await?;
        if !response.status().is_success() {
            bail!("answered {}", response.status());
        }
        let body = Limited::new(response.into_body(), MAX_MODULE_BYTES)
            .collect()
            .await
            .map_err(|e| anyhow::anyhow!("reading the body: {e}"))?;
        Ok(body.to_bytes())
    };
    tokio::time::timeout(FETCH_TIMEOUT, exchange)
        .await
        .with_context(|| format!("no answer in {FETCH_TIMEOUT:?}"))?
}
