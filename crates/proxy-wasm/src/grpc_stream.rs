//! `proxy_grpc_stream` and `proxy_grpc_send`: a filter opens a gRPC stream
//! (client, server or bidirectional streaming) to a method of an upstream,
//! sends messages on it when it likes, and hears what the server sends as
//! it comes, in Envoy's callbacks:
//!
//! - the server's initial metadata: `proxy_on_grpc_receive_initial_metadata
//!   (context, token, count)`, readable as map 4;
//! - each message: `proxy_on_grpc_receive(context, token, size)`, buffer 5;
//! - the trailing metadata: `proxy_on_grpc_receive_trailing_metadata
//!   (context, token, count)`, map 5;
//! - the end: `proxy_on_grpc_close(context, token, status)`, with the
//!   status message in `proxy_get_status`.
//!
//! `proxy_grpc_send(token, message, end_of_stream)` sends one message;
//! `proxy_grpc_close` ends the filter's side (the server may go on
//! sending), `proxy_grpc_cancel` resets the stream and nothing more is
//! delivered. What a filter sends and the connection has not taken yet is
//! capped per stream (`grpc_send_queue_bytes`, `_messages`: a send beyond
//! is refused), what the servers sent and the filter has not heard yet per
//! context (`grpc_receive_bytes`: beyond it the servers wait). A stream a
//! request's context opened ends with the request;
//! one the root context opened lives as long as the plugin's root. The
//! stream is a streamed exchange through the embedder's
//! [`HttpCaller`](crate::HttpCaller) (`open_stream`), so it needs an
//! upstream with `protocol: h2c` or `h2`, as unary calls do.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use crate::grpc_call::{self, GrpcTarget, INTERNAL, RESOURCE_EXHAUSTED, UNAVAILABLE};
use crate::headers::Headers;
use crate::http_call::{
    HttpStreamFuture, HttpStreamRequest, HttpStreamResponse, StreamBody, StreamPart,
};
use crate::limits::{HostLimits, Limit};

/// The largest message a stream delivers to a filter: gRPC's default limit
/// for what a client receives. A larger one ends the stream with
/// RESOURCE_EXHAUSTED, as a gRPC client would, before it is buffered.
const MAX_MESSAGE: usize = 4 << 20;

/// A stream `proxy_grpc_stream` opened.
#[derive(Debug)]
pub(crate) struct GrpcStreamRequest {
    pub target: GrpcTarget,
}

/// What `proxy_grpc_send` queued on one stream that the connection has not
/// taken yet: framed bytes and messages.
#[derive(Debug, Default)]
pub(crate) struct SendQueue {
    bytes: AtomicUsize,
    messages: AtomicUsize,
}

impl SendQueue {
    /// Frames `message` and counts it in, if the queue stays within
    /// `limits`; it is counted out when the connection takes it or it is
    /// dropped unsent.
    pub fn admit(
        self: &Arc<Self>,
        message: &[u8],
        limits: &HostLimits,
    ) -> Result<QueuedMessage, Limit> {
        let framed = grpc_call::framed(message);
        // Only the guest adds (one callback at a time); the connection only
        // takes away, which can only make room.
        if self.messages.load(Ordering::Relaxed) >= limits.grpc_send_queue_messages {
            return Err(Limit::GrpcSendQueueMessages);
        }
        let bytes = self.bytes.load(Ordering::Relaxed);
        if bytes.saturating_add(framed.len()) > limits.grpc_send_queue_bytes {
            return Err(Limit::GrpcSendQueueBytes);
        }
        self.bytes.fetch_add(framed.len(), Ordering::Relaxed);
        self.messages.fetch_add(1, Ordering::Relaxed);
        Ok(QueuedMessage {
            framed: Bytes::from(framed),
            queue: self.clone(),
        })
    }
}

/// A framed message on its way to a stream's connection: counted in its
/// stream's [`SendQueue`] until it is taken or dropped.
#[derive(Debug)]
pub(crate) struct QueuedMessage {
    framed: Bytes,
    queue: Arc<SendQueue>,
}

impl QueuedMessage {
    /// The bytes to send (the queue stops counting them as the message drops).
    pub fn bytes(&self) -> Bytes {
        self.framed.clone()
    }
}

impl Drop for QueuedMessage {
    fn drop(&mut self) {
        let queue = &self.queue;
        queue.bytes.fetch_sub(self.framed.len(), Ordering::Relaxed);
        queue.messages.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the server sent, in the order the filter hears it; `Close` is last.
#[derive(Debug)]
pub(crate) enum StreamEvent {
    InitialMetadata(Headers),
    Message(Vec<u8>),
    TrailingMetadata(Headers),
    Close(u32, String),
}

impl GrpcStreamRequest {
    /// The streamed HTTP/2 request: `POST /service/method` without a
    /// deadline (a stream lasts as long as its context), its body the
    /// messages the filter sends through `body`.
    pub fn into_http(self, body: StreamBody) -> HttpStreamRequest {
        HttpStreamRequest {
            upstream: self.target.upstream.clone(),
            headers: grpc_call::request_headers(self.target, None),
            body,
        }
    }
}

/// A stream's event, holding its share of the context's receive budget
/// (`grpc_receive_bytes`) until the context takes it.
pub(crate) type Heard = (u32, StreamEvent, Option<OwnedSemaphorePermit>);

/// Follows one stream's answer, sending what happens to `events` in order
/// and `Close` last; stops early when nobody listens any more. Each message
/// first takes its size from `budget`, the bytes the context's streams may
/// have waiting for the filter.
pub(crate) async fn follow(
    token: u32,
    opened: HttpStreamFuture,
    events: mpsc::Sender<Heard>,
    budget: ReceiveBudget,
) {
    let to = Listener {
        token,
        events: &events,
        budget,
    };
    if let Ok((code, message)) = relay(opened, &to).await {
        let _ = to.hear(StreamEvent::Close(code, message)).await;
    }
}

/// Where a stream's events go; `Gone` once the context that opened it is.
struct Listener<'a> {
    token: u32,
    events: &'a mpsc::Sender<Heard>,
    budget: ReceiveBudget,
}

struct Gone;

/// The bytes of stream messages a context may have waiting for its filter
/// (`grpc_receive_bytes`).
#[derive(Clone)]
pub(crate) struct ReceiveBudget {
    permits: Arc<Semaphore>,
    size: u32,
}

impl ReceiveBudget {
    pub fn new(limits: &HostLimits) -> ReceiveBudget {
        let size = limits
            .grpc_receive_bytes
            .clamp(1, (u32::MAX as usize).min(Semaphore::MAX_PERMITS));
        ReceiveBudget {
            permits: Arc::new(Semaphore::new(size)),
            size: size as u32,
        }
    }

    /// Room for `bytes`, once the filter has heard enough of what waits; a
    /// message larger than the whole budget takes all of it.
    async fn room_for(&self, bytes: usize) -> Result<OwnedSemaphorePermit, Gone> {
        let wanted = bytes.min(self.size as usize) as u32;
        self.permits
            .clone()
            .acquire_many_owned(wanted)
            .await
            .map_err(|_| Gone)
    }
}

impl Listener<'_> {
    async fn hear(&self, event: StreamEvent) -> Result<(), Gone> {
        // A bounded channel and a budget of bytes: a server that sends
        // faster than the filter reads waits (HTTP/2 flow control holds
        // it), nothing piles up.
        let room = match &event {
            StreamEvent::Message(message) => Some(self.budget.room_for(message.len()).await?),
            _ => None,
        };
        self.events
            .send((self.token, event, room))
            .await
            .map_err(|_| Gone)
    }
}

/// Reports the answer's metadata and messages; returns its status.
async fn relay(opened: HttpStreamFuture, to: &Listener<'_>) -> Result<(u32, String), Gone> {
    let HttpStreamResponse { headers, mut body } = match opened.await {
        Ok(response) => response,
        Err(reason) => return Ok((UNAVAILABLE, reason)),
    };
    if let Some(status) = grpc_call::status_in(&headers) {
        // A trailers-only answer: its headers are the trailing metadata.
        to.hear(StreamEvent::TrailingMetadata(metadata(headers)))
            .await?;
        return Ok(status);
    }
    if headers.get(b":status") != Some(b"200") {
        return Ok(grpc_call::without_status(&headers));
    }
    to.hear(StreamEvent::InitialMetadata(metadata(headers)))
        .await?;
    let mut received = BytesMut::new();
    loop {
        let part = std::future::poll_fn(|cx| body.as_mut().poll_next(cx)).await;
        match part {
            Some(Ok(StreamPart::Data(data))) => {
                received.extend_from_slice(&data);
                loop {
                    match next_message(&mut received) {
                        Ok(Some(message)) => to.hear(StreamEvent::Message(message)).await?,
                        Ok(None) => break,
                        Err(status) => return Ok(status),
                    }
                }
            }
            Some(Ok(StreamPart::Trailers(trailers))) => {
                let status = grpc_call::status_in(&trailers).unwrap_or_else(|| {
                    (
                        INTERNAL,
                        "the stream's trailers carry no grpc-status".into(),
                    )
                });
                to.hear(StreamEvent::TrailingMetadata(metadata(trailers)))
                    .await?;
                return Ok(status);
            }
            // A connection that broke mid-stream is UNAVAILABLE in gRPC.
            Some(Err(reason)) => return Ok((UNAVAILABLE, reason)),
            None => return Ok((INTERNAL, "the stream ended without a gRPC status".into())),
        }
    }
}

/// The next whole message at the front of `received`, if there is one.
fn next_message(received: &mut BytesMut) -> Result<Option<Vec<u8>>, (u32, String)> {
    let Some(&[compressed, a, b, c, d]) = received.first_chunk::<5>() else {
        return Ok(None);
    };
    if compressed != 0 {
        return Err((
            INTERNAL,
            "the server sent a compressed message, which streams from filters do not ask for"
                .into(),
        ));
    }
    let len = u32::from_be_bytes([a, b, c, d]) as usize;
    if len > MAX_MESSAGE {
        return Err((
            RESOURCE_EXHAUSTED,
            format!("a message of {len} bytes is over the limit of {MAX_MESSAGE}"),
        ));
    }
    if received.len() < 5 + len {
        return Ok(None);
    }
    received.advance(5);
    Ok(Some(received.split_to(len).to_vec()))
}

/// Metadata as the guest reads it: the headers without `:status`.
fn metadata(mut headers: Headers) -> Headers {
    headers.remove(b":status");
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_cut_where_their_lengths_say() {
        let mut received = BytesMut::new();
        received.extend_from_slice(&grpc_call::framed(b"one"));
        received.extend_from_slice(&grpc_call::framed(b""));
        received.extend_from_slice(&grpc_call::framed(b"three")[..6]);
        assert_eq!(next_message(&mut received), Ok(Some(b"one".to_vec())));
        assert_eq!(next_message(&mut received), Ok(Some(Vec::new())));
        assert_eq!(next_message(&mut received), Ok(None), "cut short");
        received.extend_from_slice(b"hree");
        assert_eq!(next_message(&mut received), Ok(Some(b"three".to_vec())));
        assert!(received.is_empty());
    }

    #[test]
    fn compressed_and_oversized_messages_end_the_stream() {
        let mut compressed = BytesMut::from(&[1, 0, 0, 0, 1, 7][..]);
        assert!(matches!(next_message(&mut compressed), Err((INTERNAL, _))));
        let mut huge = BytesMut::from(&[0, 0xff, 0xff, 0xff, 0xff][..]);
        assert!(matches!(
            next_message(&mut huge),
            Err((RESOURCE_EXHAUSTED, _))
        ));
    }
}
