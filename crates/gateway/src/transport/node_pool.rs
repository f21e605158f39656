//! Keep-alive HTTP/1.1 connections to one upstream node, on hyper's
//! connection API.
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
//! proxy has) goes out again on a new connection, since nothing of it was
//! sent; idle connections are closed after `idle_timeout`; at most
//! `max_idle` wait per node; connections count in the node's gauge while
//! open (the connector).

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, Response, Uri};
use tower_service::Service;

use crate::body::{Body, BoxError};
use crate::transport::connector::CountedConnector;

pub(crate) struct NodePool {
    /// `http://<node address>/`: what the connector resolves and dials
    /// (None: the address is not `host:port`, and every request fails).
    target: Option<Uri>,
    address: String,
    connector: CountedConnector,
    /// Most recently used last: requests take from the end, so under light
    /// load a few connections stay warm and the rest age out from the front.
    idle: Mutex<Vec<IdleConnection>>,
    max_idle: usize,
    idle_timeout: Duration,
}

struct IdleConnection {
    sender: SendRequest<Body>,
    since: Instant,
}

impl NodePool {
    pub(crate) fn new(
        address: &str,
        connector: CountedConnector,
        max_idle: usize,
        idle_timeout: Duration,
    ) -> Arc<NodePool> {
        Arc::new(NodePool {
            target: format!("http://{address}/").parse().ok(),
            address: address.to_string(),
            connector,
            idle: Mutex::new(Vec::new()),
            max_idle,
            idle_timeout,
        })
    }

    /// Sends `request` (origin-form URI, `Host` set) on an idle connection
    /// or a new one; the response's body returns the connection when read
    /// to its end (dropping it early closes the connection instead).
    pub(crate) async fn send(
        self: &Arc<Self>,
        mut request: Request<Body>,
    ) -> Result<Response<PooledBody>, BoxError> {
        loop {
            let (mut sender, reused) = match self.checkout().await {
                Some(sender) => (sender, true),
                None => (self.connect().await?, false),
            };
            match sender.try_send_request(request).await {
                Ok(response) => {
                    let (parts, inner) = response.into_parts();
                    let mut body = PooledBody {
                        inner,
                        lease: Some((sender, self.clone())),
                    };
                    if body.inner.is_end_stream() {
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
            let mut sender = self.idle.lock().unwrap().pop()?.sender;
            // Idle connections were ready when they came back, so this does
            // not wait; it fails for one the node has closed meanwhile.
            if sender.ready().await.is_ok() {
                return Some(sender);
            }
        }
    }

    async fn connect(&self) -> Result<SendRequest<Body>, BoxError> {
        let Some(target) = &self.target else {
            return Err(format!("bad upstream address `{}`", self.address).into());
        };
        let io = self.connector.clone().call(target.clone()).await?;
        let (sender, connection) = http1::handshake(io).await?;
        let address = self.address.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(node = %address, error = %e, "upstream connection ended");
            }
        });
        Ok(sender)
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
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap();
        let expired = idle
            .iter()
            .take_while(|c| now.duration_since(c.since) >= self.idle_timeout)
            .count();
        idle.drain(..expired);
        if idle.len() < self.max_idle {
            idle.push(IdleConnection { sender, since: now });
        }
    }

    /// Closes the connections idle for longer than `idle_timeout` (those
    /// no request has come for since, which `keep` does not reach).
    pub(crate) fn close_expired(&self) {
        let now = Instant::now();
        self.idle
            .lock()
            .unwrap()
            .retain(|c| now.duration_since(c.since) < self.idle_timeout && !c.sender.is_closed());
    }
}

/// An upstream response's body that gives its connection back to the pool
/// when it ends.
pub struct PooledBody {
    inner: Incoming,
    lease: Option<(SendRequest<Body>, Arc<NodePool>)>,
}

impl PooledBody {
    fn give_back(&mut self) {
        if let Some((sender, pool)) = self.lease.take() {
            pool.give_back(sender);
        }
    }
}

impl hyper::body::Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.give_back(),
            Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => self.give_back(),
            // A broken body leaves the connection unusable: dropped.
            Poll::Ready(Some(Err(_))) => self.lease = None,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
