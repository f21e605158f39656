//! The node pool's HTTP/1.1 connections that requests without a body
//! write and read themselves (`http1_client.rs`): sending on them, dialing
//! them, keeping them idle, and the watch that drops one the node closes
//! while it is idle.

use std::sync::{Arc, Weak};
use std::task::{Context, Wake, Waker};

use hyper::{Request, Response};
use tokio::time::Instant;
use tower_service::Service;

use super::{NodePool, PooledBody, ReadTimedOut};
use crate::body::{Body, BoxError};
use crate::http1_client::{ExchangeError, Http1Connection, Stream};
use crate::tls_client::UpstreamTlsError;

/// An HTTP/1.1 connection the request's task drives, with the watch that
/// finds it again in the idle list when the node closes it there.
pub(super) struct Leased {
    pub(super) connection: Http1Connection,
    pub(super) watch: Arc<IdleWatch>,
}

/// The waker an idle connection's socket holds: a node that closes the
/// connection (or writes on it) while it is idle wakes it, and the pool
/// drops the connection at once, so the node's connection gauge says what
/// is really open and no request picks a dead connection. One per
/// connection, made when it is dialed.
pub(super) struct IdleWatch {
    pub(super) pool: Weak<NodePool>,
}

impl Wake for IdleWatch {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(pool) = self.pool.upgrade() {
            pool.recheck_idle(self);
        }
    }
}

impl NodePool {
    /// A request without a body, written and answered by this task
    /// (`http1_client.rs`) on an idle connection or a new one. A reused
    /// connection that gets no answer at all was closed by the node while
    /// idle (the race of every keep-alive client); an idempotent request
    /// (RFC 9110 9.2.2) then goes again on another connection. hyper's
    /// client resent any request it knew it had not written; this one
    /// cannot know, so a POST is not resent.
    pub(super) async fn send_own(
        self: &Arc<Self>,
        request: Request<Body>,
        deadline: Instant,
    ) -> Result<Response<PooledBody>, BoxError> {
        let resend = request.method().is_idempotent();
        loop {
            let (leased, reused) = match self.checkout_own() {
                Some(leased) => (leased, true),
                None => match tokio::time::timeout_at(deadline, self.connect_own()).await {
                    Ok(dialed) => (dialed?, false),
                    Err(_) => return Err(ReadTimedOut.into()),
                },
            };
            let Leased { connection, watch } = leased;
            let (method, uri, headers) = (request.method(), request.uri(), request.headers());
            let exchange = connection.exchange(method, uri, headers, deadline);
            match exchange.await {
                Ok((parts, body)) => {
                    let mut body = PooledBody::own(body, watch);
                    body.give_back_own();
                    return Ok(Response::from_parts(parts, body));
                }
                Err(ExchangeError::NoAnswer(_)) if reused && resend => continue,
                Err(ExchangeError::NoAnswer(e)) => return Err(e.into()),
                Err(ExchangeError::Failed(e)) => return Err(e),
                Err(ExchangeError::TimedOut) => return Err(ReadTimedOut.into()),
            }
        }
    }

    /// The most recently used idle connection of [`send_own`]'s that is
    /// still open.
    fn checkout_own(&self) -> Option<Leased> {
        let mut idle = self.own_idle.lock().unwrap();
        let mut unwatched = Context::from_waker(Waker::noop());
        while let Some(mut kept) = idle.pop() {
            // A close the reactor has seen but whose wake has not run yet.
            if !kept.connection.connection.poll_idle_closed(&mut unwatched) {
                return Some(kept.connection);
            }
        }
        None
    }

    /// Dials the node for [`send_own`] (TLS when the upstream has it).
    async fn connect_own(self: &Arc<Self>) -> Result<Leased, BoxError> {
        let Some(target) = &self.target else {
            return Err(format!("bad upstream address `{}`", self.address).into());
        };
        let io = self.connector.clone().call(target.clone()).await?;
        let stream = match &self.tls {
            None => Stream::Plain(io),
            Some(tls) => {
                let encrypted = tls
                    .connector
                    .connect(tls.server_name.clone(), io)
                    .await
                    .map_err(|e| UpstreamTlsError {
                        node: self.address.clone(),
                        message: e.to_string(),
                    })?;
                Stream::Tls(Box::new(encrypted))
            }
        };
        Ok(Leased {
            connection: Http1Connection::new(stream),
            watch: Arc::new(IdleWatch {
                pool: Arc::downgrade(self),
            }),
        })
    }

    /// A connection of [`send_own`]'s whose answer has ended: kept, its
    /// socket watched for the node closing it.
    pub(super) fn keep_own(&self, mut leased: Leased) {
        leased.connection.forget_deadline_waker();
        let waker = Waker::from(leased.watch.clone());
        if leased
            .connection
            .poll_idle_closed(&mut Context::from_waker(&waker))
        {
            return;
        }
        self.park(&self.own_idle, leased);
    }

    /// A watched idle connection's socket woke: dropped if the node closed
    /// it, watched again if not.
    fn recheck_idle(&self, watch: &Arc<IdleWatch>) {
        let mut idle = self.own_idle.lock().unwrap();
        let Some(i) = idle
            .iter()
            .position(|c| Arc::ptr_eq(&c.connection.watch, watch))
        else {
            return;
        };
        let waker = Waker::from(watch.clone());
        if idle[i]
            .connection
            .connection
            .poll_idle_closed(&mut Context::from_waker(&waker))
        {
            let closed = idle.remove(i);
            drop(idle);
            drop(closed);
        }
    }
}
