//! `proxy_http_call`: a filter asks the host to call an upstream; the answer
//! comes back later in `proxy_on_http_call_response`. The host function only
//! records the call; the stream (or root context) that made it sends it once
//! the callback has returned (`callout.rs`), through the embedder's
//! [`HttpCaller`], so no worker thread waits for the upstream.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

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

/// How filters reach upstreams; the gateway implements it with its own
/// upstreams (load balancing, pooled connections).
pub trait HttpCaller: Send + Sync + Debug {
    /// Whether `upstream` names something callable (the SDKs expect
    /// BadArgument at dispatch time for an unknown one).
    fn has_upstream(&self, upstream: &str) -> bool;
    fn call(&self, request: HttpCallRequest) -> HttpCallFuture;
}
