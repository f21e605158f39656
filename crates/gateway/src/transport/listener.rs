//! Accepting connections and serving HTTP/1.1 and cleartext HTTP/2 (h2c,
//! told apart by the connection preface) on them.
//!
//! [`serve_workers`] is how the CLI serves traffic: one thread per core, each
//! with its own single-threaded tokio runtime accepting from the shared
//! socket, so that a request is read, proxied and answered without waking
//! another thread. (A multi-thread runtime parks and unparks its workers
//! around requests even with one worker: docs/benchmarks.md.)

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use crate::body::Body;
use crate::transport::head_deadline::HeadDeadline;

/// Answers requests. One handler serves every connection of a listener.
pub trait Handler: Send + Sync + 'static {
    fn handle(
        &self,
        request: Request<Incoming>,
        connection: Connection,
    ) -> impl Future<Output = Response<Body>> + Send;
}

/// The connection a request came on.
#[derive(Clone, Copy, Debug)]
pub struct Connection {
    /// Unique per process.
    pub id: u64,
    /// The client.
    pub peer: SocketAddr,
    /// The listener's address the client connected to.
    pub local: SocketAddr,
}

static CONNECTION_IDS: AtomicU64 = AtomicU64::new(1);

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
    // hyper's header timer covers keep-alive connections between requests;
    // `HeadDeadline` a connection's first request (with a 408 for a half-sent
    // head, and a close for a silent client that hyper's timer never sees).
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
        let connection = Connection {
            id: CONNECTION_IDS.fetch_add(1, Ordering::Relaxed),
            peer,
            local: stream.local_addr().unwrap_or(peer),
        };
        let handler = handler.clone();
        let service = service_fn(move |request| {
            let handler = handler.clone();
            async move { Ok::<_, Infallible>(handler.handle(request, connection).await) }
        });
        let stream = HeadDeadline::new(stream, config.header_read_timeout);
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
    tracing::debug!("listener stopped accepting; waiting for in-flight requests");
    if tokio::time::timeout(config.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(grace = ?config.shutdown_grace, "in-flight requests did not finish within the grace period");
    }
    Ok(())
}

/// Worker threads serving one listening socket; see [`serve_workers`].
pub struct Workers {
    done: Vec<oneshot::Receiver<std::io::Result<()>>>,
}

impl Workers {
    /// Waits until every worker has stopped (after the shutdown signal and
    /// its grace period); the first error wins.
    pub async fn wait(self) -> std::io::Result<()> {
        let mut result = Ok(());
        for done in self.done {
            let outcome = done
                .await
                .unwrap_or_else(|_| Err(std::io::Error::other("a worker thread panicked")));
            if result.is_ok() {
                result = outcome;
            }
        }
        result
    }
}

/// Serves `handler` on `threads` threads, each running its own
/// single-threaded runtime that accepts from `listener`. Work a request
/// spawns (streaming a body, an upstream connection) stays on its thread.
/// Setting `shutdown` to true stops them all gracefully.
pub fn serve_workers<H: Handler>(
    listener: std::net::TcpListener,
    threads: usize,
    handler: Arc<H>,
    config: ListenerConfig,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<Workers> {
    listener.set_nonblocking(true)?;
    let mut done = Vec::with_capacity(threads);
    for index in 0..threads.max(1) {
        let listener = listener.try_clone()?;
        let handler = handler.clone();
        let config = config.clone();
        let mut shutdown = shutdown.clone();
        let (report, finished) = oneshot::channel();
        std::thread::Builder::new()
            .name(format!("wasmgate-worker-{index}"))
            .spawn(move || {
                let result = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .and_then(|runtime| {
                        runtime.block_on(async move {
                            let listener = TcpListener::from_std(listener)?;
                            let stop = async move {
                                let _ = shutdown.wait_for(|stop| *stop).await;
                            };
                            serve(listener, handler, config, stop).await
                        })
                    });
                let _ = report.send(result);
            })?;
        done.push(finished);
    }
    Ok(Workers { done })
}
