//! `proxy_http_call`: a filter asks the host to call an upstream; the answer
//! comes back later in `proxy_on_http_call_response`. The host function only
//! records the call; the stream (or root context) that made it sends it once
//! the callback has returned (`callout.rs`), through the embedder's
//! [`HttpCaller`], so no worker thread waits for the upstream. gRPC streams
//! (`proxy_grpc_stream`) go through the same caller as a streamed exchange
//! ([`HttpCaller::open_stream`]): a request body sent piece by piece and
//! an answer read piece by piece.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;

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
}

/// The upstream's answer; `headers` starts with `:status`.
#[derive(Clone, Debug, Default)]
pub struct HttpCallResponse {
    pub headers: Headers,
    pub body: Vec<u8>,
    pub trailers: Headers,
}

pub type HttpCallFuture = Pin<Box<dyn Future<Output = Result<HttpCallResponse, String>> + Send>>;

/// A streamed exchange: the request's head now, its body as the filter
/// sends it (the channel closing is the end of the body).
#[derive(Debug)]
pub struct HttpStreamRequest {
    pub upstream: String,
    pub headers: Headers,
    pub body: tokio::sync::mpsc::UnboundedReceiver<Bytes>,
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
