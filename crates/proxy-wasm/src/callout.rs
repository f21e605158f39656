//! Calls a filter makes to the outside while a callback runs: http calls
//! (`proxy_http_call`) and Redis calls (Higress's `proxy_redis_call`). Host
//! functions only record them (with a token); once the callback has
//! returned, the stream or root context that made them starts them here,
//! off the guest, and delivers each answer in its own callback when it
//! comes, in completion order. So no worker thread waits for an upstream or
//! a database, and no answer arrives inside another guest call.

use tokio::task::JoinSet;
use wasmgate_services::Grants;

use crate::http_call::{HttpCallRequest, HttpCallResponse, HttpCaller};
use crate::redis_call::RedisCallRequest;

/// A call recorded by a host function, not yet sent. (Http calls are boxed:
/// with their header maps they are three times a Redis call's size.)
#[derive(Debug)]
pub(crate) enum Callout {
    Http(Box<HttpCallRequest>),
    Redis(RedisCallRequest),
}

/// A call's outcome; an error is the reason it failed.
pub(crate) enum Answer {
    Http(Result<Box<HttpCallResponse>, String>),
    /// The reply, RESP-encoded as Redis sent it (an error reply included).
    Redis(Result<Vec<u8>, String>),
}

/// Calls in flight for one context.
#[derive(Default)]
pub(crate) struct CallsInFlight {
    calls: JoinSet<(u32, Answer)>,
}

impl CallsInFlight {
    /// Sends `callout`: http calls through `caller`, Redis calls to the
    /// service `grants` maps their cluster to (host functions refuse calls
    /// without either, so both are there when one was recorded).
    pub fn start(
        &mut self,
        token: u32,
        callout: Callout,
        caller: Option<&dyn HttpCaller>,
        grants: &Grants,
    ) {
        match callout {
            Callout::Http(request) => {
                let Some(caller) = caller else { return };
                let timeout = request.timeout;
                let call = caller.call(*request);
                self.calls.spawn(async move {
                    let result = match tokio::time::timeout(timeout, call).await {
                        Ok(result) => result.map(Box::new),
                        Err(_) => Err(format!("timed out after {timeout:?}")),
                    };
                    (token, Answer::Http(result))
                });
            }
            Callout::Redis(request) => {
                let grants = grants.clone();
                self.calls
                    .spawn(async move { (token, Answer::Redis(request.send(&grants).await)) });
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The next answer; pending forever when none is in flight.
    pub async fn next(&mut self) -> (u32, Answer) {
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
