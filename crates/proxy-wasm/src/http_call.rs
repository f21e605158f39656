//! `proxy_http_call`: a filter asks the host to call an upstream; the answer
//! comes back later in `proxy_on_http_call_response`. The host function only
//! records the call; the stream (or root context) that made it sends it once
//! the callback has returned (`callout.rs`), through the embedder's
//! [`HttpCaller`], so no worker thread waits for the upstream. gRPC streams
//! (`proxy_grpc_stream`) go through the same caller as a streamed exchange
//! ([`HttpCaller::open_stream`]): a request body sent piece by piece and
//! an answer read piece by piece.
//!
//! What the host holds for a filter is capped (`limits.rs`): the caller is
//! told the largest reply body the call may read
//! ([`HttpCallRequest::max_reply_bytes`]) and stops there with
//! [`CallFailure::ReplyTooLarge`]; a stream's body holds only what the
//! filter's send queue admitted.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::grpc_stream::QueuedMessage;
use crate::headers::Headers;

/// A call a filter dispatched: headers include `:method`, `:path` and
/// `:authority`, as the SDKs send them.
#[derive(Clone, Debug)]
pub struct HttpCallRequest {
    /// The upstream (Envoy: cluster) the call goes to.
    pub upstream: String,
    pub headers: Headers,
    pub body: Vec<u8>,
    pub trailers: Headers,
    pub timeout: Duration,
    /// The largest reply body to read (`limits.proxy_wasm.call_reply_bytes`):
    /// a caller reads no further than this and fails the call with
    /// [`CallFailure::ReplyTooLarge`] (the host checks again what it gets).
    pub max_reply_bytes: usize,
}

/// Why a call got no answer the filter may read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallFailure {
    /// No answer: the upstream is down, refused, reset, timed out.
    #[error("{0}")]
    Failed(String),
    /// The reply's body is larger than the call may read.
    #[error("the reply's body is over limits.proxy_wasm.call_reply_bytes ({limit} bytes)")]
    ReplyTooLarge { limit: usize },
}

impl From<String> for CallFailure {
    fn from(reason: String) -> CallFailure {
        CallFailure::Failed(reason)
    }
}

impl From<&str> for CallFailure {
    fn from(reason: &str) -> CallFailure {
        CallFailure::Failed(reason.to_string())
    }
}

/// The upstream's answer; `headers` starts with `:status`.
#[derive(Clone, Debug, Default)]
pub struct HttpCallResponse {
    pub headers: Headers,
    pub body: Vec<u8>,
    pub trailers: Headers,
}

pub type HttpCallFuture =
    Pin<Box<dyn Future<Output = Result<HttpCallResponse, CallFailure>> + Send>>;

/// A streamed exchange: the request's head now, its body as the filter
/// sends it.
#[derive(Debug)]
pub struct HttpStreamRequest {
    pub upstream: String,
    pub headers: Headers,
    pub body: StreamBody,
}

/// A streamed request's body: the pieces the filter sends, in order, until
/// it ends its side. What waits here counts in the filter's send queue
/// (`grpc_send_queue_bytes`) until [`StreamBody::poll_recv`] takes it.
#[derive(Debug)]
pub struct StreamBody(mpsc::UnboundedReceiver<QueuedMessage>);

impl StreamBody {
    pub(crate) fn new(receiver: mpsc::UnboundedReceiver<QueuedMessage>) -> StreamBody {
        StreamBody(receiver)
    }

    /// The next piece; `None` once the filter has ended its side.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        self.0
            .poll_recv(cx)
            .map(|queued| queued.map(|message| message.bytes()))
    }
}

/// A piece of a streamed answer's body.
#[derive(Debug)]
pub enum StreamPart {
    Data(Bytes),
    Trailers(Headers),
}

/// A streamed answer: its head (`headers` starts with `:status`), and its
/// body as it comes (an item that is an error ends it).
pub struct HttpStreamResponse {
    pub headers: Headers,
    pub body: Pin<Box<dyn futures_core::Stream<Item = Result<StreamPart, String>> + Send>>,
}

pub type HttpStreamFuture =
    Pin<Box<dyn Future<Output = Result<HttpStreamResponse, String>> + Send>>;

/// How filters reach upstreams; the gateway implements it with its own
/// upstreams (load balancing, pooled connections).
pub trait HttpCaller: Send + Sync + Debug {
    /// Whether `upstream` names something callable (the SDKs expect
    /// BadArgument at dispatch time for an unknown one).
    fn has_upstream(&self, upstream: &str) -> bool;
    fn call(&self, request: HttpCallRequest) -> HttpCallFuture;
    /// Opens a streamed exchange (what gRPC streams need). A caller that
    /// cannot stream refuses every one, which filters see as UNAVAILABLE.
    fn open_stream(&self, request: HttpStreamRequest) -> HttpStreamFuture {
        let upstream = request.upstream;
        Box::pin(async move { Err(format!("streams to `{upstream}` are not offered here")) })
    }
}
