//! Calls a filter makes to the outside while a callback runs: http calls
//! (`proxy_http_call`), unary gRPC calls (`proxy_grpc_call`) and Redis
//! calls (Higress's `proxy_redis_call`). Host
//! functions only record them (with a token); once the callback has
//! returned, the stream or root context that made them starts them here,
//! off the guest, and delivers each answer in its own callback when it
//! comes, in completion order. So no worker thread waits for an upstream or
//! a database, and no answer arrives inside another guest call.

use std::collections::{HashMap, HashSet};

use tokio::task::{AbortHandle, JoinSet};
use wasmgate_services::Grants;

use crate::grpc_call::{GrpcCallRequest, GrpcOutcome, DEADLINE_EXCEEDED};
use crate::http_call::{HttpCallRequest, HttpCallResponse, HttpCaller};
use crate::redis_call::RedisCallRequest;

/// A call recorded by a host function, not yet sent. (Http calls are boxed:
/// with their header maps they are three times a Redis call's size.)
#[derive(Debug)]
pub(crate) enum Callout {
    Http(Box<HttpCallRequest>),
    Grpc(Box<GrpcCallRequest>),
    Redis(RedisCallRequest),
}

/// A call's outcome; an error is the reason it failed.
pub(crate) enum Answer {
    Http(Result<Box<HttpCallResponse>, String>),
    Grpc(GrpcOutcome),
    /// The reply, RESP-encoded as Redis sent it (an error reply included).
    Redis(Result<Vec<u8>, String>),
}

/// Calls in flight for one context.
#[derive(Default)]
pub(crate) struct CallsInFlight {
    calls: JoinSet<(u32, Answer)>,
    /// Each call's task, by token, so the guest can cancel it.
    handles: HashMap<u32, AbortHandle>,
    /// Tokens cancelled whose answer may already be waiting to be joined.
    cancelled: HashSet<u32>,
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
        let handle = match callout {
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
                })
            }
            Callout::Grpc(request) => {
                let Some(caller) = caller else { return };
                let timeout = request.timeout;
                let call = caller.call(request.into_http());
                self.calls.spawn(async move {
                    let outcome = match tokio::time::timeout(timeout, call).await {
                        Ok(answer) => crate::grpc_call::outcome(answer),
                        Err(_) => GrpcOutcome::Status(
                            DEADLINE_EXCEEDED,
                            format!("no answer within {timeout:?}"),
                        ),
                    };
                    (token, Answer::Grpc(outcome))
                })
            }
            Callout::Redis(request) => {
                let grants = grants.clone();
                self.calls
                    .spawn(async move { (token, Answer::Redis(request.send(&grants).await)) })
            }
        };
        self.handles.insert(token, handle);
    }

    /// Stops the call with `token`: its answer is never delivered.
    pub fn cancel(&mut self, token: u32) {
        if let Some(handle) = self.handles.remove(&token) {
            handle.abort();
            self.cancelled.insert(token);
        }
    }

    /// Whether no call is waiting for its answer (cancelled ones do not).
    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// The next answer; pending forever when none is in flight.
    pub async fn next(&mut self) -> (u32, Answer) {
        loop {
            match self.calls.join_next().await {
                Some(Ok((token, _))) if self.cancelled.remove(&token) => continue,
                Some(Ok(answer)) => {
                    self.handles.remove(&answer.0);
                    return answer;
                }
                // A cancelled (aborted) or panicked call: no token to answer.
                Some(Err(_)) => {
                    if self.calls.is_empty() {
                        self.cancelled.clear();
                    }
                    continue;
                }
                None => std::future::pending().await,
            }
        }
    }
}
