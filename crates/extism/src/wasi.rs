//! WASI preview 1 for Extism plugins that import it: nothing granted by
//! default (no environment, no arguments, no sockets, no files), stdout and
//! stderr sent to the log under the plugin's name, and the manifest's
//! `allowed_paths` as preopened directories (`ro:` for read-only).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use wasmgate_runtime::guest_log::LogStream;
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

pub(crate) fn build_context(
    plugin: &Arc<str>,
    allowed_paths: &BTreeMap<String, PathBuf>,
) -> Result<WasiP1Ctx> {
    let mut builder = WasiCtxBuilder::new();
    let (stdout, stderr) = LogStream::pair(plugin, "");
    builder.stdout(stdout).stderr(stderr);
    for (host, guest) in allowed_paths {
        let (perms, host) = match host.strip_prefix("ro:") {
            Some(path) => (FsPerms::ReadOnly, path),
            None => (FsPerms::ReadWrite, host.as_str()),
        };
        let guest = guest.to_string_lossy();
        builder
            .preopened_dir(host, guest.as_ref(), perms)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("allowed_paths: cannot open {host} for the plugin"))?;
    }
    Ok(builder.build_p1())
}
