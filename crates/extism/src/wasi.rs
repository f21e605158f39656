//! WASI preview 1 for Extism plugins that import it: nothing granted by
//! default (no environment, no arguments, no sockets, no files), stdout and
//! stderr sent to the log under the plugin's name, and the manifest's
//! `allowed_paths` as preopened directories (`ro:` for read-only).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use anyhow::{Context as _, Result};
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

pub(crate) fn build_context(
    plugin: &Arc<str>,
    allowed_paths: &BTreeMap<String, PathBuf>,
) -> Result<WasiP1Ctx> {
    let mut builder = WasiCtxBuilder::new();
    builder
        .stdout(LogStream::new(plugin, "stdout"))
        .stderr(LogStream::new(plugin, "stderr"));
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

/// A guest's stdout or stderr, one log event per write.
#[derive(Clone)]
struct LogStream {
    plugin: Arc<str>,
    stream: &'static str,
}

impl LogStream {
    fn new(plugin: &Arc<str>, stream: &'static str) -> LogStream {
        LogStream {
            plugin: plugin.clone(),
            stream,
        }
    }
}

impl IsTerminal for LogStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogStream {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl AsyncWrite for LogStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let text = String::from_utf8_lossy(buf);
        let text = text.trim_end_matches('\n');
        if !text.is_empty() {
            tracing::info!(target: "wasmgate::plugin", plugin = %self.plugin, stream = self.stream, "{text}");
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
