//! Upstream connections counted per node, for the
//! `wasmgate_upstream_node_connections` gauge: every node's pool
//! (`node_pool`) opens them through it, and each one counts until it is
//! closed. hyper-util's connector is kept for what it does well: name
//! resolution, the connect timeout, `TCP_NODELAY`.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Open connections, by node address (`host:port`, as in the request URI).
pub type ConnectionGauges = Arc<HashMap<String, Arc<AtomicU64>>>;

#[derive(Clone)]
pub struct CountedConnector {
    inner: HttpConnector,
    gauges: ConnectionGauges,
}

impl CountedConnector {
    pub fn new(inner: HttpConnector, gauges: ConnectionGauges) -> Self {
        CountedConnector { inner, gauges }
    }
}

type ConnectError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<Uri> for CountedConnector {
    type Response = CountedConnection;
    type Error = ConnectError;
    type Future =
        Pin<Box<dyn Future<Output = Result<CountedConnection, ConnectError>> + Send + 'static>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let gauge = uri
            .authority()
            .and_then(|authority| self.gauges.get(authority.as_str()))
            .cloned();
        let connecting = self.inner.call(uri);
        Box::pin(async move {
            let io = connecting.await?;
            if let Some(gauge) = &gauge {
                gauge.fetch_add(1, Ordering::Relaxed);
            }
            Ok(CountedConnection { io, gauge })
        })
    }
}

/// A connection that counts in its node's gauge while it is open.
pub struct CountedConnection {
    io: TokioIo<TcpStream>,
    gauge: Option<Arc<AtomicU64>>,
}

impl Drop for CountedConnection {
    fn drop(&mut self) {
        if let Some(gauge) = &self.gauge {
            gauge.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl hyper::rt::Read for CountedConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for CountedConnection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// tokio's I/O traits too, for the connections a request's task reads and
/// writes itself (`http1_client.rs`) and for TLS over them.
impl tokio::io::AsyncRead for CountedConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(self.io.inner_mut()).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for CountedConnection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(self.io.inner_mut()).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(self.io.inner_mut()).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(self.io.inner_mut()).poll_shutdown(cx)
    }
}

#[cfg(test)]
impl CountedConnection {
    /// A connection no gauge counts, for tests of what runs over one.
    pub(crate) fn uncounted(io: TcpStream) -> CountedConnection {
        CountedConnection {
            io: TokioIo::new(io),
            gauge: None,
        }
    }
}
