//! Accepting connections and serving HTTP/1.1 and cleartext HTTP/2 (h2c,
//! told apart by the connection preface) on them.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use crate::body::Body;

/// Answers requests. One handler serves every connection of a listener.
pub trait Handler: Send + Sync + 'static {
    fn handle(
        &self,
        request: Request<Incoming>,
        peer: SocketAddr,
    ) -> impl Future<Output = Response<Body>> + Send;
}

#[derive(Clone, Debug)]
pub struct ListenerConfig {
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// How long in-flight requests may take to finish after shutdown begins.
    pub shutdown_grace: Duration,
}

impl Default for ListenerConfig {
    fn default() -> Self {
        ListenerConfig {
            header_read_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

/// Serves `handler` on `listener` until `shutdown` resolves, then stops
/// accepting, lets in-flight requests finish (up to the grace period) and returns.
pub async fn serve<H: Handler>(
    listener: TcpListener,
    handler: Arc<H>,
    config: ListenerConfig,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let mut http = auto::Builder::new(TokioExecutor::new());
    http.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout)
        .keep_alive(true);
    http.http2().timer(TokioTimer::new());
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors and the like: back off briefly, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        let service = service_fn(move |request| {
            let handler = handler.clone();
            async move { Ok::<_, Infallible>(handler.handle(request, peer).await) }
        });
        let connection = http
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tracing::info!("shutting down: waiting for in-flight requests");
    if tokio::time::timeout(config.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(grace = ?config.shutdown_grace, "in-flight requests did not finish within the grace period");
    }
    Ok(())
}
