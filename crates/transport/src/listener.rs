//! Accepting connections and serving HTTP/1.1 and HTTP/2 on them: on a
//! plain listener told apart by the connection preface (h2c), on a TLS
//! listener after the handshake (`tls.rs`), by ALPN.
//!
//! [`serve_workers`] is how the CLI serves traffic: one thread per core, each
//! with its own single-threaded tokio runtime accepting from every shared
//! listening socket, so that a request is read, proxied and answered
//! without waking another thread. (A multi-thread runtime parks and unparks
//! its workers around requests even with one worker: docs/benchmarks.md.)

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
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use crate::admission;
use crate::body::{Body, RequestBody};
use crate::head_deadline::HeadDeadline;
use crate::http1_server::Served;
use crate::stream_watch::{self, StreamWatch};
use crate::tls::TlsAcceptorConfig;
use wasmgate_base::tls::TlsInfo;

/// Answers requests. One handler serves every connection of a listener.
pub trait Handler: Send + Sync + 'static {
    fn handle(
        &self,
        request: Request<RequestBody>,
        connection: Connection,
    ) -> impl Future<Output = Response<Body>> + Send;

    /// What the TLS listener configured at `address` accepts with, now: a
    /// gateway's certificates change with its configuration (looked up by
    /// address, so a reload that reorders listeners changes nothing).
    /// `None` refuses connections on it.
    fn tls(&self, _address: &str) -> Option<TlsAcceptorConfig> {
        None
    }
}

/// The connection a request came on.
#[derive(Clone, Debug)]
pub struct Connection {
    /// Unique per process.
    pub id: u64,
    /// The client.
    pub peer: SocketAddr,
    /// The listener's address the client connected to.
    pub local: SocketAddr,
    /// The connection's TLS, on a TLS listener.
    pub tls: Option<Arc<TlsInfo>>,
}

static CONNECTION_IDS: AtomicU64 = AtomicU64::new(1);

#[derive(Clone, Debug)]
pub struct ListenerConfig {
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// How long in-flight requests may take to finish after shutdown begins.
    pub shutdown_grace: Duration,
    /// HTTP/2's limits and timers.
    pub http2: Http2Limits,
    /// Open connections a listener served by [`serve`] takes (those of
    /// [`serve_workers`] carry their own, [`Listening::max_connections`]).
    pub max_connections: usize,
}

/// An HTTP/2 connection's limits (docs/security.md, "Connections").
#[derive(Clone, Debug)]
pub struct Http2Limits {
    /// A connection with no open stream this long is closed (GOAWAY).
    pub idle_timeout: Duration,
    /// A PING after this long without a frame from the client (`None`: never)...
    pub keepalive_interval: Option<Duration>,
    /// ...and the connection closed if its ACK takes longer than this.
    pub keepalive_timeout: Duration,
    /// Streams a client may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub max_concurrent_streams: u32,
    /// Largest request header list, HPACK-decoded (SETTINGS_MAX_HEADER_LIST_SIZE);
    /// also what bounds a CONTINUATION flood.
    pub max_header_list_bytes: u32,
}

impl Default for ListenerConfig {
    fn default() -> Self {
        ListenerConfig {
            header_read_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(30),
            http2: Http2Limits {
                idle_timeout: Duration::from_secs(60),
                keepalive_interval: Some(Duration::from_secs(30)),
                keepalive_timeout: Duration::from_secs(10),
                max_concurrent_streams: 128,
                max_header_list_bytes: 64 * 1024,
            },
            max_connections: 10_000,
        }
    }
}

/// A bound listening socket, and for a TLS listener its address as
/// configured (what [`Handler::tls`] is asked with).
pub struct Listening {
    pub socket: std::net::TcpListener,
    pub tls: Option<Arc<str>>,
    /// Connections it holds at once; one more is closed when accepted.
    pub max_connections: usize,
}

/// Serves `handler` on `listener` (plain) until `shutdown` resolves, then
/// stops accepting, lets in-flight requests finish (up to the grace period)
/// and returns.
pub async fn serve<H: Handler>(
    listener: TcpListener,
    handler: Arc<H>,
    config: ListenerConfig,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let max_connections = config.max_connections;
    serve_listener(listener, None, max_connections, handler, config, shutdown).await
}

/// [`serve`], or for the TLS listener configured at `tls` (`Some(address)`)
/// each connection's handshake (bounded by its deadline, counted when it
/// fails) in the connection's own task, then HTTP by ALPN. Past
/// `max_connections` open ones, a new connection is closed at once.
async fn serve_listener<H: Handler>(
    listener: TcpListener,
    tls: Option<Arc<str>>,
    max_connections: usize,
    handler: Arc<H>,
    config: ListenerConfig,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let counters = admission::listener(
        &tls.as_deref().map_or_else(
            || {
                listener
                    .local_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_default()
            },
            str::to_string,
        ),
        max_connections,
    );
    let (stop, stopping) = watch::channel(false);
    let mut http = auto::Builder::new(TokioExecutor::new());
    // hyper's header timer covers keep-alive connections between requests;
    // `HeadDeadline` a connection's first request (with a 408 for a half-sent
    // head, and a close for a silent client that hyper's timer never sees).
    http.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout)
        .keep_alive(true);
    let limits = &config.http2;
    http.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_concurrent_streams)
        .max_header_list_size(limits.max_header_list_bytes)
        .keep_alive_interval(limits.keepalive_interval)
        .keep_alive_timeout(limits.keepalive_timeout);
    let idle_timeout = limits.idle_timeout;
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
        let Some(admitted) = counters.admit() else {
            tracing::debug!(%peer, max_connections, "connection refused: the listener holds its maximum");
            continue; // dropped: closed
        };
        let _ = stream.set_nodelay(true);
        let mut connection = Connection {
            id: CONNECTION_IDS.fetch_add(1, Ordering::Relaxed),
            peer,
            local: stream.local_addr().unwrap_or(peer),
            tls: None,
        };
        let (counters, stopping) = (counters.clone(), stopping.clone());
        let streams = StreamWatch::new();
        let Some(address) = &tls else {
            // HTTP/1.1 by the listener's own codec (http1_server.rs); an
            // h2c preface or an upgrade goes on to hyper.
            let (handler, http) = (handler.clone(), http.clone());
            let header_read_timeout = config.header_read_timeout;
            tokio::spawn(async move {
                let _admitted = admitted;
                let mut stopping = stopping;
                let served = crate::http1_server::serve(
                    stream,
                    &*handler,
                    &connection,
                    header_read_timeout,
                    &mut stopping,
                )
                .await;
                let Served::HandOff(stream) = served else {
                    return;
                };
                let stream = HeadDeadline::new(stream, header_read_timeout, Some(streams.clone()));
                let served = http.serve_connection_with_upgrades(
                    TokioIo::new(stream),
                    service(handler, connection, streams.clone()),
                );
                let served =
                    stream_watch::watched(served, streams, idle_timeout, &counters, stopping);
                if let Err(e) = served.await {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
            });
            continue;
        };
        let Some(acceptor) = handler.tls(address) else {
            continue; // no certificate to serve: the connection is closed
        };
        let (handler, http) = (handler.clone(), http.clone());
        let header_read_timeout = config.header_read_timeout;
        tokio::spawn(async move {
            let _admitted = admitted;
            let handshake = crate::tls_accept::handshake(stream, acceptor.server);
            let stream = match tokio::time::timeout(acceptor.handshake_timeout, handshake).await {
                Ok(Ok(stream)) => stream,
                failed => {
                    let error = failed.ok().and_then(Result::err);
                    let reason = crate::tls::count_failure(error.as_ref());
                    tracing::debug!(%peer, reason, error = ?error, "TLS handshake failed");
                    return;
                }
            };
            if acceptor.requires_client_certificate
                && stream.get_ref().1.peer_certificates().is_none()
            {
                // Resumption state is kept per listener and policy, so this
                // does not happen; if it ever did, no request is served.
                crate::tls::count_failure(Some(&std::io::Error::other(
                    rustls::Error::NoCertificatesPresented,
                )));
                tracing::warn!(%peer, "a TLS session without a client certificate on a listener that requires one: closed");
                return;
            }
            crate::tls::count_handshake(stream.get_ref().1);
            let info = crate::tls::connection_info(stream.get_ref().1);
            // The protocol ALPN chose is the connection's: no guessing from
            // its first bytes (a client that said `h2` and sends something
            // else gets an HTTP/2 connection error, as RFC 9113 wants). An
            // HTTP/2 connection is served without hyper's upgrade support,
            // whose connection always sniffs the first bytes (and HTTP/2 has
            // no upgrades); HTTP/1.1 keeps it, for WebSockets.
            let h2 = info.alpn.as_deref() == Some("h2");
            if h2 {
                streams.is_http2();
            }
            connection.tls = Some(Arc::new(info));
            let io = TokioIo::new(HeadDeadline::new(stream, header_read_timeout, None));
            let service = service(handler, connection, streams.clone());
            let ended = if h2 {
                let http = http.http2_only();
                let served = http.serve_connection(io, service);
                stream_watch::watched(served, streams, idle_timeout, &counters, stopping).await
            } else {
                let served = http.serve_connection_with_upgrades(io, service);
                stream_watch::watched(served, streams, idle_timeout, &counters, stopping).await
            };
            if let Err(e) = ended {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tracing::debug!("listener stopped accepting; waiting for in-flight requests");
    let _ = stop.send(true);
    if tokio::time::timeout(config.shutdown_grace, counters.drained())
        .await
        .is_err()
    {
        tracing::warn!(grace = ?config.shutdown_grace, "in-flight requests did not finish within the grace period");
    }
    Ok(())
}

/// The hyper service of one connection: every request to `handler`, with
/// the connection it came on.
fn service<H: Handler>(
    handler: Arc<H>,
    connection: Connection,
    streams: Arc<StreamWatch>,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Body>, Infallible>> + Send,
> + Clone {
    service_fn(move |request: Request<Incoming>| {
        let request = request.map(RequestBody::hyper);
        let (handler, connection) = (handler.clone(), connection.clone());
        // HTTP/2 streams are followed (idle connections, canceled streams);
        // HTTP/1.1's one request at a time is hyper's to time.
        let stream = (request.version() == hyper::Version::HTTP_2).then(|| streams.opened());
        async move {
            let response = handler.handle(request, connection).await;
            Ok::<_, Infallible>(match stream {
                Some(stream) => stream.answered(response),
                None => response,
            })
        }
    })
}

/// Worker threads serving the listening sockets; see [`serve_workers`].
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
/// single-threaded runtime that accepts from every one of `listeners`.
/// Work a request spawns (streaming a body, an upstream connection) stays
/// on its thread. Setting `shutdown` to true stops them all gracefully.
pub fn serve_workers<H: Handler>(
    listeners: Vec<Listening>,
    threads: usize,
    handler: Arc<H>,
    config: ListenerConfig,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<Workers> {
    for listening in &listeners {
        listening.socket.set_nonblocking(true)?;
    }
    let mut done = Vec::with_capacity(threads);
    for index in 0..threads.max(1) {
        let sockets = listeners
            .iter()
            .map(|l| Ok((l.socket.try_clone()?, l.tls.clone(), l.max_connections)))
            .collect::<std::io::Result<Vec<_>>>()?;
        let handler = handler.clone();
        let config = config.clone();
        let shutdown = shutdown.clone();
        let (report, finished) = oneshot::channel();
        std::thread::Builder::new()
            .name(format!("wasmgate-worker-{index}"))
            .spawn(move || {
                let result = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .and_then(|runtime| {
                        runtime.block_on(serve_all(sockets, handler, config, shutdown))
                    });
                let _ = report.send(result);
            })?;
        done.push(finished);
    }
    Ok(Workers { done })
}

/// One worker's listeners, each accepting on a task of its own.
async fn serve_all<H: Handler>(
    sockets: Vec<(std::net::TcpListener, Option<Arc<str>>, usize)>,
    handler: Arc<H>,
    config: ListenerConfig,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async move {
            let mut serving = Vec::with_capacity(sockets.len());
            for (socket, tls, max_connections) in sockets {
                let listener = TcpListener::from_std(socket)?;
                let (handler, config, mut shutdown) =
                    (handler.clone(), config.clone(), shutdown.clone());
                let stop = async move {
                    let _ = shutdown.wait_for(|stop| *stop).await;
                };
                serving.push(tokio::task::spawn_local(serve_listener(
                    listener,
                    tls,
                    max_connections,
                    handler,
                    config,
                    stop,
                )));
            }
            let mut result = Ok(());
            for task in serving {
                let outcome = task.await.unwrap_or_else(|e| {
                    Err(std::io::Error::other(format!(
                        "a listener task failed: {e}"
                    )))
                });
                if result.is_ok() {
                    result = outcome;
                }
            }
            result
        })
        .await
}
