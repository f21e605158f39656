//! Request mirroring (`mirror`: the Gateway API's RequestMirror, Envoy's
//! request mirror policies): a copy of a route's requests, or a share of
//! them, goes to other upstreams while the original goes to its own, and
//! the copies' answers are read and dropped.
//!
//! The original never waits for a copy: a copy's body is fed from the
//! original's frames as they stream through (a body already whole is
//! shared), and a copy that falls [`COPY_FRAMES`] frames behind is cut off
//! (its request aborted, counted) rather than slowing the original.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, SizeHint};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::body_pump::channel_body;
use wasmgate_transport::body::{Body, BoxError};
use wasmgate_upstream::{OutboundBody, RequestHead, Upstream};

/// Frames a copy may lag behind the original before it is cut off.
const COPY_FRAMES: usize = 16;

/// One `mirror` entry of a route, built with it.
pub(crate) struct Mirror {
    upstream: Arc<Upstream>,
    percent: u64,
    /// Requests seen, for the share: request n is copied when `n % 100 <
    /// percent`, so exactly `percent` of every hundred are.
    seen: AtomicU64,
    pub counts: MirrorCounts,
}

/// What became of the copies (`/metrics`).
#[derive(Default)]
pub(crate) struct MirrorCounts {
    /// Answered by the mirror upstream (any status).
    pub sent: AtomicU64,
    /// Cut off: the copy fell behind the original's body.
    pub cut: AtomicU64,
    /// The mirror upstream could not be reached or did not answer.
    pub failed: AtomicU64,
}

impl Mirror {
    pub fn new(upstream: Arc<Upstream>, percent: u32) -> Mirror {
        Mirror {
            upstream,
            percent: u64::from(percent),
            seen: AtomicU64::new(0),
            counts: MirrorCounts::default(),
        }
    }

    pub fn upstream_name(&self) -> &str {
        &self.upstream.name
    }

    fn takes_this_one(&self) -> bool {
        self.seen.fetch_add(1, Ordering::Relaxed) % 100 < self.percent
    }
}

/// Starts the copies of a request whose head and body are `head` and
/// `body` (as they go to the route's own upstream), and gives back the body
/// to send there: the same, or one that feeds the copies as it is read.
pub(crate) fn copy(
    mirrors: &[Arc<Mirror>],
    head: &RequestHead,
    body: OutboundBody,
) -> OutboundBody {
    let chosen: Vec<&Arc<Mirror>> = mirrors.iter().filter(|m| m.takes_this_one()).collect();
    if chosen.is_empty() {
        return body;
    }
    match body {
        OutboundBody::Replayable(bytes) => {
            for mirror in chosen {
                let copy = OutboundBody::Replayable(bytes.clone());
                start(mirror.clone(), head.clone(), copy);
            }
            OutboundBody::Replayable(bytes)
        }
        OutboundBody::Streaming(original) => {
            let copies = chosen
                .into_iter()
                .map(|mirror| {
                    let (tx, rx) = mpsc::channel(COPY_FRAMES);
                    let copy = OutboundBody::Streaming(channel_body(rx));
                    let task = start(mirror.clone(), head.clone(), copy);
                    Copy {
                        tx,
                        task,
                        mirror: mirror.clone(),
                    }
                })
                .collect();
            OutboundBody::Streaming(Tee { original, copies }.boxed_unsync())
        }
        OutboundBody::Upgrade => OutboundBody::Upgrade,
    }
}

/// Sends one copy; its answer is read to the end (so its connection is
/// kept) and dropped.
fn start(mirror: Arc<Mirror>, head: RequestHead, body: OutboundBody) -> AbortHandle {
    // Boxed before it is spawned: the sending future is tens of kilobytes,
    // which tokio's spawn copied several times over (107,000 instructions
    // of memcpy a copy, bench/instructions.sh); boxed, it moves a pointer.
    tokio::spawn(Box::pin(async move {
        match mirror.upstream.send(head, body, None).await {
            Ok(response) => {
                let _ = response.into_body().collect().await;
                mirror.counts.sent.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                mirror.counts.failed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(upstream = %mirror.upstream.name, error = %e, "a mirrored request failed");
            }
        }
    }))
    .abort_handle()
}

/// A copy being fed.
struct Copy {
    tx: mpsc::Sender<Result<Frame<Bytes>, BoxError>>,
    task: AbortHandle,
    mirror: Arc<Mirror>,
}

/// The original body, handing each frame to the copies as it passes.
struct Tee {
    original: Body,
    copies: Vec<Copy>,
}

impl hyper::body::Body for Tee {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.original).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                let last = self.original.is_end_stream();
                let duplicate = || match (frame.data_ref(), frame.trailers_ref()) {
                    (Some(data), _) => Some(Frame::data(data.clone())),
                    (None, Some(trailers)) => Some(Frame::trailers(trailers.clone())),
                    (None, None) => None,
                };
                self.copies.retain(|copy| {
                    let Some(frame) = duplicate() else {
                        return true;
                    };
                    match copy.tx.try_send(Ok(frame)) {
                        Ok(()) => true,
                        Err(mpsc::error::TrySendError::Full(_)) => {
                            copy.task.abort();
                            copy.mirror.counts.cut.fetch_add(1, Ordering::Relaxed);
                            false
                        }
                        // The copy's request is over (its upstream failed).
                        Err(mpsc::error::TrySendError::Closed(_)) => false,
                    }
                });
                if last {
                    // The reader stops here without asking for the end:
                    // dropping the senders ends the copies' bodies.
                    self.copies.clear();
                }
            }
            Poll::Ready(Some(Err(_))) => {
                // The original failed: the copies are not sent whole.
                for copy in self.copies.drain(..) {
                    copy.task.abort();
                }
            }
            // The end: dropping the senders ends the copies' bodies.
            Poll::Ready(None) => self.copies.clear(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.original.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.original.size_hint()
    }
}

impl Drop for Tee {
    /// A body dropped before its end (the client went away): the copies
    /// would otherwise end as if whole.
    fn drop(&mut self) {
        for copy in self.copies.drain(..) {
            copy.task.abort();
        }
    }
}
