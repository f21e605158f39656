//! A guest's WASI stdout and stderr as log events, naming the plugin (and,
//! for gateway filters, the route), shared by both ABIs.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

/// One log event per write.
#[derive(Clone)]
pub struct LogStream {
    plugin: Arc<str>,
    /// Empty outside the gateway.
    route: Arc<str>,
    stream: &'static str,
}

impl LogStream {
    pub fn new(plugin: &str, route: &str, stream: &'static str) -> LogStream {
        LogStream {
            plugin: plugin.into(),
            route: route.into(),
            stream,
        }
    }

    /// `(stdout, stderr)`.
    pub fn pair(plugin: &str, route: &str) -> (LogStream, LogStream) {
        (
            LogStream::new(plugin, route, "stdout"),
            LogStream::new(plugin, route, "stderr"),
        )
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
        let (plugin, stream) = (&self.plugin, self.stream);
        match (text.is_empty(), self.route.is_empty()) {
            (true, _) => {}
            (false, true) => tracing::info!(target: "wasmgate::plugin", %plugin, stream, "{text}"),
            (false, false) => {
                let route = &self.route;
                tracing::info!(target: "wasmgate::plugin", %plugin, %route, stream, "{text}")
            }
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
