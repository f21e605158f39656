//! Connections to one upstream node, on hyper's connection API: a pool of
//! keep-alive HTTP/1.1 connections, or one multiplexed HTTP/2 connection
//! that carries every request (h2c, or h2 over TLS), as the upstream's
//! `protocol` says (`auto`: as the node's ALPN answer says).
//!
//! It replaces hyper-util's pooled `Client`, which per request hashed a
//! pool key with SipHash, looked it up in a map shared by every node under
//! one lock, and spawned a task to put the connection back once it was
//! ready: together about 7k of a proxied request's 51k instructions
//! (bench/instructions.py, docs/benchmarks.md). Here every node owns its
//! list of idle connections, and a connection goes back to it when its
//! response body has been read to the end.
//!
//! What the old client did that matters is kept: a request that meets an
//! idle connection the node has just closed (the race every keep-alive
//! proxy has; for HTTP/2, a connection the node has sent GOAWAY on) goes
//! out again on a new connection, since nothing of it was sent; idle
//! connections are closed after `idle_timeout`; at most `max_idle` wait per
//! node; connections count in the node's gauge while open (the connector).
//!
//! An upgrade request (WebSocket) gets a new HTTP/1.1 connection of its own
//! that allows upgrades, whatever the protocol: after the node's `101` it
//! becomes the tunnel and never returns to the pool.
//!
//! A request without a body to a node spoken to in HTTP/1.1 does not go
//! through hyper's client at all: the request's own task writes it and
//! reads the answer (`http1_client.rs`, issue 57's design step), on
//! connections kept in a list of their own. A node that closes one of them
//! while it is idle wakes the pool, which drops it (`IdleWatch`), as
//! hyper's connection task notices for its own.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::client::conn::http2;
use hyper::header::HOST;
use hyper::{Request, Response, Uri, Version};
use tower_service::Service;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use wasmgate_config::UpstreamProtocol;

use crate::body::{Body, BoxError};
use crate::connector::CountedConnector;
use crate::held_writes::HeldWrites;
use crate::http1_client::Http1Body;
use crate::tls_client::{UpstreamTlsClient, UpstreamTlsError};
use own::{IdleWatch, Leased};

mod own;

/// How often an idle HTTP/2 connection is pinged, and how long a ping may
/// go unanswered before the connection counts as dead (a node that vanished
/// without closing it, which no request would notice until its timeout).
/// A node that sent no answer's head within the read timeout
/// ([`NodePool::send`]).
#[derive(Debug)]
pub struct ReadTimedOut;

impl std::fmt::Display for ReadTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no answer within the read timeout")
    }
}

impl std::error::Error for ReadTimedOut {}

const H2_PING_INTERVAL: Duration = Duration::from_secs(30);
const H2_PING_TIMEOUT: Duration = Duration::from_secs(10);

pub struct NodePool {
    /// `http://<node address>/`: what the connector resolves and dials
    /// (None: the address is not `host:port`, and every request fails).
    target: Option<Uri>,
    address: String,
    connector: CountedConnector,
    protocol: UpstreamProtocol,
    /// TLS over the dialed connection, for an upstream with `tls`, offering
    /// by ALPN what `protocol` says ...
    tls: Option<UpstreamTlsClient>,
    /// ... and offering only `http/1.1`, for upgrades (a tunnel is an
    /// HTTP/1.1 connection).
    tls_http1: Option<UpstreamTlsClient>,
    /// HTTP/1.1: most recently used last: requests take from the end, so
    /// under light load a few connections stay warm and the rest age out
    /// from the front.
    idle: Mutex<Vec<Idle<SendRequest<Body>>>>,
    /// The same for the connections requests without a body read and
    /// write themselves (`http1_client.rs`).
    own_idle: Mutex<Vec<Idle<Leased>>>,
    /// HTTP/2: the connection every request shares while it is open.
    multiplexed: Mutex<Option<http2::SendRequest<Body>>>,
    /// Held while an HTTP/2 connection is being made, so that the requests
    /// that find none wait for one instead of each dialing their own.
    connecting: tokio::sync::Mutex<()>,
    max_idle: usize,
    idle_timeout: Duration,
}

/// A new connection, as the protocol (or the node's ALPN answer) made it.
enum Connected {
    Http1(SendRequest<Body>),
    Http2(http2::SendRequest<Body>),
}

/// TLS settings of a node: for its requests, and for its upgrades.
pub struct NodeTls {
    pub requests: UpstreamTlsClient,
    pub upgrades: UpstreamTlsClient,
}

/// A connection waiting in one of a node's idle lists, and since when.
struct Idle<C> {
    connection: C,
    since: Instant,
}

impl NodePool {
    pub fn new(
        address: &str,
        connector: CountedConnector,
        protocol: UpstreamProtocol,
        tls: Option<NodeTls>,
        max_idle: usize,
        idle_timeout: Duration,
    ) -> Arc<NodePool> {
        let (tls, tls_http1) = match tls {
            Some(tls) => (Some(tls.requests), Some(tls.upgrades)),
            None => (None, None),
        };
        Arc::new(NodePool {
            target: format!("http://{address}/").parse().ok(),
            address: address.to_string(),
            connector,
            protocol,
            tls,
            tls_http1,
            idle: Mutex::new(Vec::new()),
            own_idle: Mutex::new(Vec::new()),
            multiplexed: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            max_idle,
            idle_timeout,
        })
    }

    /// Sends `request` (origin-form URI, `Host` set) on an idle connection
    /// or a new one; the response's body returns an HTTP/1.1 connection
    /// when read to its end (dropping it early closes the connection
    /// instead).
    ///
    /// No answer's head within `read_timeout` (dialing included) is a
    /// [`ReadTimedOut`] error.
    pub async fn send(
        self: &Arc<Self>,
        request: Request<Body>,
        read_timeout: Duration,
    ) -> Result<Response<PooledBody>, BoxError> {
        let deadline = tokio::time::Instant::now() + read_timeout;
        if self.speaks_only_http1() && request.body().is_end_stream() {
            return self.send_own(request, deadline).await;
        }
        tokio::time::timeout_at(deadline, self.send_on_hyper(request))
            .await
            .unwrap_or_else(|_| Err(ReadTimedOut.into()))
    }

    /// [`NodePool::send`] on hyper's connections.
    async fn send_on_hyper(
        self: &Arc<Self>,
        request: Request<Body>,
    ) -> Result<Response<PooledBody>, BoxError> {
        match self.protocol {
            UpstreamProtocol::Http1 => self.send_http1(request, None).await,
            UpstreamProtocol::H2c | UpstreamProtocol::H2 => self.send_http2(request, None).await,
            // The node's ALPN answer decides, once per connection.
            UpstreamProtocol::Auto => {
                if let Some(sender) = self.shared_http2() {
                    return self.send_http2(request, Some(sender)).await;
                }
                if let Some(sender) = self.checkout().await {
                    return self.send_http1(request, Some(sender)).await;
                }
                match self.connect(false).await? {
                    Connected::Http2(sender) => self.send_http2(request, Some(sender)).await,
                    Connected::Http1(sender) => self.send_http1(request, Some(sender)).await,
                }
            }
        }
    }

    /// Sends an upgrade request (`Connection: upgrade`) on a new HTTP/1.1
    /// connection of its own; after a `101`, `hyper::upgrade::on` of the
    /// response gives the connection, which never returns to the pool.
    pub async fn send_upgrade(
        &self,
        request: Request<Body>,
    ) -> Result<Response<Incoming>, BoxError> {
        let Connected::Http1(mut sender) = self.connect(true).await? else {
            unreachable!("an upgrade connection is HTTP/1.1");
        };
        Ok(sender.send_request(request).await?)
    }

    /// Whether every connection to the node is HTTP/1.1 (`auto` in plain
    /// TCP is: only TLS's ALPN could choose HTTP/2).
    fn speaks_only_http1(&self) -> bool {
        match self.protocol {
            UpstreamProtocol::Http1 => true,
            UpstreamProtocol::Auto => self.tls.is_none(),
            UpstreamProtocol::H2c | UpstreamProtocol::H2 => false,
        }
    }

    /// HTTP/1.1: on `first` (a connection just made), an idle connection or
    /// a new one.
    async fn send_http1(
        self: &Arc<Self>,
        mut request: Request<Body>,
        mut first: Option<SendRequest<Body>>,
    ) -> Result<Response<PooledBody>, BoxError> {
        loop {
            let (mut sender, reused) = match first.take() {
                Some(sender) => (sender, false),
                None => match self.checkout().await {
                    Some(sender) => (sender, true),
                    None => (self.connect_http1().await?, false),
                },
            };
            match sender.try_send_request(request).await {
                Ok(response) => {
                    let (parts, inner) = response.into_parts();
                    let ended = inner.is_end_stream();
                    let mut body = PooledBody {
                        kind: Kind::Hyper {
                            inner,
                            lease: Some((sender, self.clone())),
                        },
                    };
                    if ended {
                        body.give_back();
                    }
                    return Ok(Response::from_parts(parts, body));
                }
                Err(mut failed) => match failed.take_message() {
                    // Closed before anything was written: a reused
                    // connection the node had closed while idle.
                    Some(unsent) if reused => request = unsent,
                    _ => return Err(failed.into_error().into()),
                },
            }
        }
    }

    /// The most recently used idle connection still open.
    async fn checkout(&self) -> Option<SendRequest<Body>> {
        loop {
            let mut sender = self.idle.lock().unwrap().pop()?.connection;
            // Idle connections were ready when they came back, so this does
            // not wait; it fails for one the node has closed meanwhile.
            if sender.ready().await.is_ok() {
                return Some(sender);
            }
        }
    }

    /// HTTP/2: every request on the node's one connection (`first`, or the
    /// shared one, or a new one). The request goes in the form HTTP/2 wants:
    /// an absolute URI whose authority is the `Host` field.
    async fn send_http2(
        &self,
        mut request: Request<Body>,
        mut first: Option<http2::SendRequest<Body>>,
    ) -> Result<Response<PooledBody>, BoxError> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        to_http2_form(&mut request, scheme, &self.address)?;
        loop {
            let (mut sender, reused) = match first.take() {
                Some(sender) => (sender, false),
                None => match self.shared_http2() {
                    Some(sender) => (sender, true),
                    None => (self.connect_http2().await?, false),
                },
            };
            match sender.try_send_request(request).await {
                Ok(response) => {
                    let response = response.map(PooledBody::unpooled);
                    return Ok(response);
                }
                Err(mut failed) => match failed.take_message() {
                    // Refused before any of it was sent: the connection
                    // was closing (GOAWAY). Forget it and try a new one.
                    Some(unsent) if reused => {
                        self.forget_http2(&sender);
                        request = unsent;
                    }
                    _ => return Err(failed.into_error().into()),
                },
            }
        }
    }

    /// The node's HTTP/2 connection, if one is open.
    fn shared_http2(&self) -> Option<http2::SendRequest<Body>> {
        let mut shared = self.multiplexed.lock().unwrap();
        match &*shared {
            Some(sender) if !sender.is_closed() => Some(sender.clone()),
            Some(_) => {
                *shared = None;
                None
            }
            None => None,
        }
    }

    fn forget_http2(&self, closed: &http2::SendRequest<Body>) {
        let mut shared = self.multiplexed.lock().unwrap();
        if shared
            .as_ref()
            .is_some_and(|s| s.is_closed() || closed.is_closed())
        {
            *shared = None;
        }
    }

    /// A new HTTP/2 connection, made by one request while the others that
    /// need one wait for it.
    async fn connect_http2(&self) -> Result<http2::SendRequest<Body>, BoxError> {
        let _one_at_a_time = self.connecting.lock().await;
        if let Some(sender) = self.shared_http2() {
            return Ok(sender);
        }
        match self.connect(false).await? {
            Connected::Http2(sender) => Ok(sender),
            Connected::Http1(_) => Err(format!(
                "node {} did not agree to HTTP/2 (ALPN) though the upstream's protocol is h2",
                self.address
            )
            .into()),
        }
    }

    async fn connect_http1(&self) -> Result<SendRequest<Body>, BoxError> {
        match self.connect(false).await? {
            Connected::Http1(sender) => Ok(sender),
            Connected::Http2(_) => unreachable!("HTTP/1.1 connections offer only http/1.1"),
        }
    }

    /// Dials the node, makes the TLS handshake when the upstream has `tls`,
    /// and starts HTTP on the connection: HTTP/2 for h2c, for h2, and for
    /// auto when the node chose `h2`; HTTP/1.1 otherwise and for upgrades.
    async fn connect(&self, upgrade: bool) -> Result<Connected, BoxError> {
        let Some(target) = &self.target else {
            return Err(format!("bad upstream address `{}`", self.address).into());
        };
        let io = self.connector.clone().call(target.clone()).await?;
        let tls = if upgrade && self.protocol != UpstreamProtocol::Http1 {
            &self.tls_http1
        } else {
            &self.tls
        };
        let Some(tls) = tls else {
            let http2 = !upgrade && self.protocol == UpstreamProtocol::H2c;
            return self.handshake(io, http2, upgrade).await;
        };
        let encrypted = tls
            .connector
            .connect(tls.server_name.clone(), TokioIo::new(io))
            .await
            .map_err(|e| UpstreamTlsError {
                node: self.address.clone(),
                message: e.to_string(),
            })?;
        let http2 = encrypted.get_ref().1.alpn_protocol() == Some(b"h2");
        if self.protocol == UpstreamProtocol::H2 && !http2 && !upgrade {
            return Err(UpstreamTlsError {
                node: self.address.clone(),
                message: "the node did not choose h2 by ALPN (protocol: h2)".into(),
            }
            .into());
        }
        self.handshake(TokioIo::new(encrypted), http2, upgrade)
            .await
    }

    /// HTTP on a connection; its driver runs on a task of its own. An
    /// HTTP/2 connection becomes the node's shared one.
    async fn handshake<I>(&self, io: I, http2: bool, upgrade: bool) -> Result<Connected, BoxError>
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let address = self.address.clone();
        if http2 {
            let (sender, connection) = http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .keep_alive_interval(H2_PING_INTERVAL)
                .keep_alive_timeout(H2_PING_TIMEOUT)
                .handshake(HeldWrites::new(io))
                .await?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(node = %address, error = %e, "upstream HTTP/2 connection ended");
                }
            });
            *self.multiplexed.lock().unwrap() = Some(sender.clone());
            return Ok(Connected::Http2(sender));
        }
        let (sender, connection) = http1::handshake(io).await?;
        tokio::spawn(async move {
            let ended = if upgrade {
                connection.with_upgrades().await
            } else {
                connection.await
            };
            if let Err(e) = ended {
                tracing::debug!(node = %address, error = %e, "upstream connection ended");
            }
        });
        Ok(Connected::Http1(sender))
    }

    /// A connection whose exchange is over: kept for the next request once
    /// it is ready for one. It is at once unless the node answered before
    /// the request's body was all sent, which a task then waits for.
    fn give_back(self: Arc<Self>, mut sender: SendRequest<Body>) {
        if sender.is_ready() {
            self.keep(sender);
            return;
        }
        tokio::spawn(async move {
            if sender.ready().await.is_ok() {
                self.keep(sender);
            }
        });
    }

    fn keep(&self, sender: SendRequest<Body>) {
        self.park(&self.idle, sender);
    }

    /// Puts `connection` at the end of an idle list (most recently used
    /// last), dropping those at the front idle for `idle_timeout` and
    /// `connection` itself when `max_idle` already wait.
    fn park<C>(&self, list: &Mutex<Vec<Idle<C>>>, connection: C) {
        let now = Instant::now();
        let mut idle = list.lock().unwrap();
        let expired = idle
            .iter()
            .take_while(|c| now.duration_since(c.since) >= self.idle_timeout)
            .count();
        idle.drain(..expired);
        if idle.len() < self.max_idle {
            idle.push(Idle {
                connection,
                since: now,
            });
        }
    }

    /// Closes the connections idle for longer than `idle_timeout` (those
    /// no request has come for since, which `keep` does not reach).
    pub fn close_expired(&self) {
        let now = Instant::now();
        self.idle.lock().unwrap().retain(|c| {
            now.duration_since(c.since) < self.idle_timeout && !c.connection.is_closed()
        });
        self.own_idle
            .lock()
            .unwrap()
            .retain(|c| now.duration_since(c.since) < self.idle_timeout);
    }
}

/// `request` as HTTP/2 sends it: an absolute URI (`scheme://authority/path`)
/// with the `Host` field as its authority (or the node's address), and no
/// `Host` field beside `:authority`.
fn to_http2_form(request: &mut Request<Body>, scheme: &str, node: &str) -> Result<(), BoxError> {
    let host = request.headers_mut().remove(HOST);
    let authority = match &host {
        Some(host) => host.to_str().map_err(|_| "a Host field that is not text")?,
        None => node,
    };
    let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
    *request.uri_mut() = format!("{scheme}://{authority}{path}").parse()?;
    *request.version_mut() = Version::HTTP_2;
    Ok(())
}

/// An upstream response's body that gives its connection back to the pool
/// when it ends.
pub struct PooledBody {
    kind: Kind,
}

enum Kind {
    /// Read by hyper's connection task.
    Hyper {
        inner: Incoming,
        lease: Option<(SendRequest<Body>, Arc<NodePool>)>,
    },
    /// Read by the polling task itself (`http1_client.rs`).
    Own {
        body: Http1Body,
        watch: Arc<IdleWatch>,
    },
}

impl PooledBody {
    /// The body of a response whose connection is not the pool's (an
    /// upgrade's, an HTTP/2 stream's).
    pub fn unpooled(inner: Incoming) -> PooledBody {
        PooledBody {
            kind: Kind::Hyper { inner, lease: None },
        }
    }

    fn own(body: Http1Body, watch: Arc<IdleWatch>) -> PooledBody {
        PooledBody {
            kind: Kind::Own { body, watch },
        }
    }

    fn give_back(&mut self) {
        if let Kind::Hyper { lease, .. } = &mut self.kind {
            if let Some((sender, pool)) = lease.take() {
                pool.give_back(sender);
            }
        }
    }

    /// An own connection whose answer has ended goes back to its pool.
    fn give_back_own(&mut self) {
        let Kind::Own { body, watch } = &mut self.kind else {
            return;
        };
        if let Some(connection) = body.take_finished() {
            if let Some(pool) = watch.pool.upgrade() {
                pool.keep_own(Leased {
                    connection,
                    watch: watch.clone(),
                });
            }
        }
    }
}

impl hyper::body::Body for PooledBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match &mut this.kind {
            Kind::Own { body, .. } => {
                let polled = Pin::new(body).poll_frame(cx);
                this.give_back_own();
                polled
            }
            Kind::Hyper { inner, lease } => {
                let polled = Pin::new(&mut *inner).poll_frame(cx);
                match &polled {
                    Poll::Ready(None) => this.give_back(),
                    Poll::Ready(Some(Ok(_))) if inner.is_end_stream() => this.give_back(),
                    // A broken body leaves the connection unusable: dropped.
                    Poll::Ready(Some(Err(_))) => *lease = None,
                    _ => {}
                }
                polled.map(|frame| frame.map(|f| f.map_err(Into::into)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Hyper { inner, .. } => inner.is_end_stream(),
            Kind::Own { body, .. } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Hyper { inner, .. } => inner.size_hint(),
            Kind::Own { body, .. } => body.size_hint(),
        }
    }
}
