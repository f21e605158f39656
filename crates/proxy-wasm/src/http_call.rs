//! `proxy_http_call`: a filter asks the host to call an upstream; the answer
//! comes back later in `proxy_on_http_call_response`. The host function only
//! records the call; the stream (or root context) that made it sends it once
//! the callback has returned, through the embedder's [`HttpCaller`], so no
//! worker thread waits for the upstream.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::task::JoinSet;

use crate::pairs::Pairs;

/// A call a filter dispatched: headers include `:method`, `:path` and
/// `:authority`, as the SDKs send them.
#[derive(Clone, Debug)]
pub struct HttpCallRequest {
    /// The upstream (Envoy: cluster) the call goes to.
    pub upstream: String,
    pub headers: Pairs,
    pub body: Vec<u8>,
    pub trailers: Pairs,
    pub timeout: Duration,
}

/// The upstream's answer; `headers` starts with `:status`.
#[derive(Clone, Debug, Default)]
pub struct HttpCallResponse {
    pub headers: Pairs,
    pub body: Vec<u8>,
    pub trailers: Pairs,
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

/// Calls in flight for one context, answered in completion order.
#[derive(Default)]
pub(crate) struct CallsInFlight {
    calls: JoinSet<(u32, Result<HttpCallResponse, String>)>,
}

impl CallsInFlight {
    pub fn start(&mut self, caller: &dyn HttpCaller, token: u32, request: HttpCallRequest) {
        let timeout = request.timeout;
        let call = caller.call(request);
        self.calls.spawn(async move {
            let result = match tokio::time::timeout(timeout, call).await {
                Ok(result) => result,
                Err(_) => Err(format!("timed out after {timeout:?}")),
            };
            (token, result)
        });
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The next answer; pending forever when none is in flight.
    pub async fn next(&mut self) -> (u32, Result<HttpCallResponse, String>) {
        loop {
            match self.calls.join_next().await {
                Some(Ok(answer)) => return answer,
                // A panicked call task is dropped; there is no token to answer.
                Some(Err(_)) => continue,
                None => std::future::pending().await,
            }
        }
    }
}
