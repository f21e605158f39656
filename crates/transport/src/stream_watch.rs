//! What an HTTP/2 connection is doing with its streams, and the two rules
//! that close one (docs/security.md, "Connections"):
//!
//! - **idle**: a connection with no open stream for `http2_idle_timeout_ms`
//!   gets a GOAWAY and is closed (nginx's `keepalive_timeout`, Envoy's
//!   `idle_timeout`). hyper has no idle timer for HTTP/2, and HTTP/1.1's
//!   (the header read timeout between requests) never applies to it, so a
//!   client that sent the preface and went quiet was kept for ever.
//! - **canceled streams** (CVE-2023-44487, "rapid reset"): h2 already sends
//!   GOAWAY when a client resets more than 20 streams the server has not
//!   accepted yet; a client that waits until each stream is accepted (a
//!   handler started) and then resets it makes the gateway start work it
//!   never finishes. A connection whose client canceled at least
//!   [`CANCELED_FLOOR`] streams, more than half of those it opened, is
//!   closed, as Envoy closes one with too many premature resets.
//!
//! A stream is open from its request to the end of its response body (a
//! long stream keeps its connection). HTTP/1.1 connections are left to
//! hyper: the watch is armed only once the connection is known to be HTTP/2
//! (its preface, or ALPN `h2`).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::Frame;
use hyper_util::server::graceful::GracefulConnection;

use crate::admission::{CloseReason, ListenerCounters};
use crate::body::{Body, BoxError};

/// Canceled streams a connection may have before the half rule applies.
pub const CANCELED_FLOOR: u64 = 100;

/// How long an idle connection that was sent GOAWAY has to close itself
/// before the gateway drops it.
pub const IDLE_CLOSE_GRACE: Duration = Duration::from_secs(1);

/// One connection's streams, shared by its requests and its watcher.
#[derive(Default)]
pub(crate) struct StreamWatch {
    http2: AtomicBool,
    open: AtomicUsize,
    started: AtomicU64,
    canceled: AtomicU64,
    /// When the last stream ended, in ms since [`epoch`].
    idle_since_ms: AtomicU64,
    /// Told once the canceled-streams rule is broken.
    abuse: tokio::sync::Notify,
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    epoch().elapsed().as_millis() as u64
}

impl StreamWatch {
    pub(crate) fn new() -> Arc<StreamWatch> {
        let watch = StreamWatch::default();
        watch.idle_since_ms.store(now_ms(), Ordering::Relaxed);
        Arc::new(watch)
    }

    /// The connection speaks HTTP/2: the idle rule applies from now.
    pub(crate) fn is_http2(&self) {
        self.http2.store(true, Ordering::Relaxed);
    }

    #[cfg(test)]
    pub(crate) fn http2(&self) -> bool {
        self.http2.load(Ordering::Relaxed)
    }

    /// A request began on the connection; the guard ends its stream.
    pub(crate) fn opened(self: &Arc<Self>) -> StreamGuard {
        self.open.fetch_add(1, Ordering::Relaxed);
        self.started.fetch_add(1, Ordering::Relaxed);
        StreamGuard {
            watch: self.clone(),
            answered: false,
        }
    }

    /// How long until the idle rule closes the connection (`None`: now).
    /// Busy, or not HTTP/2: a whole timeout from now, to look again.
    fn idle_left(&self, idle_timeout: Duration) -> Option<Duration> {
        if !self.http2.load(Ordering::Relaxed) || self.open.load(Ordering::Relaxed) > 0 {
            return Some(idle_timeout);
        }
        let idle_for = now_ms().saturating_sub(self.idle_since_ms.load(Ordering::Relaxed));
        let left = idle_timeout.saturating_sub(Duration::from_millis(idle_for));
        (!left.is_zero()).then_some(left)
    }
}

/// An open stream. Dropped before [`StreamGuard::answered`], its request
/// was canceled (the client reset the stream, or the connection ended).
pub(crate) struct StreamGuard {
    watch: Arc<StreamWatch>,
    answered: bool,
}

impl StreamGuard {
    /// The handler produced its response; the guard now goes with its body.
    pub(crate) fn answered(mut self, response: hyper::Response<Body>) -> hyper::Response<Body> {
        self.answered = true;
        response.map(|body| {
            use http_body_util::BodyExt;
            Held { body, _guard: self }.boxed_unsync()
        })
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let watch = &self.watch;
        if !self.answered {
            let canceled = watch.canceled.fetch_add(1, Ordering::Relaxed) + 1;
            if canceled >= CANCELED_FLOOR && canceled * 2 > watch.started.load(Ordering::Relaxed) {
                watch.abuse.notify_one();
            }
        }
        if watch.open.fetch_sub(1, Ordering::Relaxed) == 1 {
            watch.idle_since_ms.store(now_ms(), Ordering::Relaxed);
        }
    }
}

/// A response body that keeps its stream open until it is dropped.
struct Held {
    body: Body,
    _guard: StreamGuard,
}

impl hyper::body::Body for Held {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// Serves `connection` under the two rules until it ends: closed
/// gracefully (GOAWAY; open streams finish) once it has been idle too long
/// (and dropped [`IDLE_CLOSE_GRACE`] later if the client keeps it, with no
/// stream open) or `stop` turns true (shutdown), and at once when its client cancels
/// too many streams.
///
/// Polled by hand rather than with `select!`: this runs at every wake of
/// every connection, HTTP/1.1's included, and `select!` in a loop made new
/// waiters and drew a random branch order at each (about 850 instructions
/// per proxied request, `bench/instructions.sh`). The connection is polled
/// first; the stop signal and the abuse notice are futures made once; the
/// idle timer exists only once the connection is known to be HTTP/2.
pub(crate) async fn watched<C: GracefulConnection>(
    connection: C,
    watch: Arc<StreamWatch>,
    idle_timeout: Duration,
    counters: &ListenerCounters,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), C::Error> {
    tokio::pin!(connection);
    let stopped = stop.wait_for(|stop| *stop);
    tokio::pin!(stopped);
    let abused = watch.abuse.notified();
    tokio::pin!(abused);
    let mut timer: Option<Pin<Box<tokio::time::Sleep>>> = None;
    let mut closing = false;
    // Closing for idleness: the GOAWAY was sent, and the timer now runs
    // out the grace the client has to go.
    let mut idle_closing = false;
    std::future::poll_fn(|cx| loop {
        if let Poll::Ready(ended) = connection.as_mut().poll(cx) {
            return Poll::Ready(ended);
        }
        if !closing && stopped.as_mut().poll(cx).is_ready() {
            closing = true;
            connection.as_mut().graceful_shutdown();
            continue; // the connection has work to do now
        }
        if !watch.http2.load(Ordering::Relaxed) {
            // HTTP/1.1 (or not known yet): hyper times it; no stream is
            // followed, so no stream can be canceled either.
            return Poll::Pending;
        }
        if abused.as_mut().poll(cx).is_ready() {
            // Dropping the connection closes it and cancels its streams.
            counters.closed(CloseReason::CanceledStreams);
            tracing::warn!(
                canceled = watch.canceled.load(Ordering::Relaxed),
                started = watch.started.load(Ordering::Relaxed),
                "an HTTP/2 client canceled most of its streams: connection closed"
            );
            return Poll::Ready(Ok(()));
        }
        if closing && !idle_closing {
            return Poll::Pending; // shutting down: open streams finish
        }
        let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(idle_timeout)));
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        let now = tokio::time::Instant::now();
        if idle_closing {
            // h2's graceful close waits for the client to answer a PING
            // before its last GOAWAY; a client that went quiet never does,
            // and would keep the connection for ever.
            if watch.open.load(Ordering::Relaxed) == 0 {
                return Poll::Ready(Ok(()));
            }
            timer.as_mut().reset(now + IDLE_CLOSE_GRACE);
            continue;
        }
        match watch.idle_left(idle_timeout) {
            None => {
                closing = true;
                idle_closing = true;
                counters.closed(CloseReason::IdleTimeout);
                connection.as_mut().graceful_shutdown();
                timer.as_mut().reset(now + IDLE_CLOSE_GRACE);
            }
            Some(left) => timer.as_mut().reset(now + left),
        }
    })
    .await
}
