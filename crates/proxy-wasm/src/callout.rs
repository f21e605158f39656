//! Calls a filter makes to the outside while a callback runs: http calls
//! (`proxy_http_call`), unary gRPC calls (`proxy_grpc_call`), gRPC streams
//! (`proxy_grpc_stream`, `proxy_grpc_send`) and Redis calls (Higress's
//! `proxy_redis_call`). Host
//! functions only record them (with a token); once the callback has
//! returned, the stream or root context that made them starts them here,
//! off the guest, and delivers each answer in its own callback when it
//! comes, in completion order. So no worker thread waits for an upstream or
//! a database, and no answer arrives inside another guest call. A stream
//! has many answers (its metadata, each message, its close): they come
//! through a channel, in order, its close last. How many calls a context
//! has in flight, how much a reply or a stream's queues may hold, is capped
//! (`limits.rs`).

use std::collections::{HashMap, HashSet};
use std::task::Poll;

use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use wasmgate_services::Grants;

use crate::grpc_call::{GrpcCallRequest, GrpcOutcome, DEADLINE_EXCEEDED};
use crate::grpc_stream::{GrpcStreamRequest, Heard, QueuedMessage, ReceiveBudget, StreamEvent};
use crate::http_call::{CallFailure, HttpCallRequest, HttpCallResponse, HttpCaller, StreamBody};
use crate::limits::HostLimits;
use crate::redis_call::RedisCallRequest;

/// A call recorded by a host function, not yet sent. (Http calls are boxed:
/// with their header maps they are three times a Redis call's size.)
#[derive(Debug)]
pub(crate) enum Callout {
    Http(Box<HttpCallRequest>),
    Grpc(Box<GrpcCallRequest>),
    GrpcStream(Box<GrpcStreamRequest>),
    /// A message for an open stream (`proxy_grpc_send`, framed and
    /// counted in the stream's send queue), or only the end of the
    /// filter's side (`proxy_grpc_close`).
    GrpcSend {
        message: Option<QueuedMessage>,
        end_of_stream: bool,
    },
    Redis(RedisCallRequest),
}

/// A call's outcome; an error is the reason it failed.
pub(crate) enum Answer {
    Http(Result<Box<HttpCallResponse>, CallFailure>),
    Grpc(GrpcOutcome),
    GrpcStream(StreamEvent),
    /// The reply, RESP-encoded as Redis sent it (an error reply included).
    Redis(Result<Vec<u8>, String>),
}

/// Calls in flight for one context.
#[derive(Default)]
pub(crate) struct CallsInFlight {
    /// Single-answer calls give their answer here; a stream's task gives
    /// `None` (its answers go through `streams`).
    calls: JoinSet<Option<(u32, Answer)>>,
    /// Each call's (and stream's) task, by token, so the guest can cancel
    /// it; a stream's stays until its close is delivered.
    handles: HashMap<u32, AbortHandle>,
    /// Tokens cancelled whose answer may already be waiting to be joined.
    cancelled: HashSet<u32>,
    /// Boxed and made at the first stream: most contexts open none.
    streams: Option<Box<OpenStreams>>,
}

/// The gRPC streams of one context.
struct OpenStreams {
    /// Where each stream's request body goes, until the filter ends it.
    senders: HashMap<u32, mpsc::UnboundedSender<QueuedMessage>>,
    /// What the servers sent, tagged with the stream's token.
    events: mpsc::Receiver<Heard>,
    events_in: mpsc::Sender<Heard>,
    /// The bytes of messages that may wait in `events` (`grpc_receive_bytes`).
    budget: ReceiveBudget,
}

impl OpenStreams {
    fn new(limits: &HostLimits) -> Box<OpenStreams> {
        // Enough to keep a fast server busy while the filter reads; beyond
        // it (or beyond the budget's bytes), the servers wait.
        let (events_in, events) = mpsc::channel(64);
        Box::new(OpenStreams {
            senders: HashMap::new(),
            events,
            events_in,
            budget: ReceiveBudget::new(limits),
        })
    }
}

/// What `next` found ready.
enum Ready {
    Stream(u32, StreamEvent),
    Joined(Result<Option<(u32, Answer)>, tokio::task::JoinError>),
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
        (plugin, limits): (&str, &HostLimits),
    ) {
        let handle = match callout {
            Callout::Http(request) => {
                let Some(caller) = caller else { return };
                let (timeout, limit) = (request.timeout, request.max_reply_bytes);
                let call = caller.call(*request);
                self.calls.spawn(async move {
                    let result = match tokio::time::timeout(timeout, call).await {
                        Ok(result) => within(result, limit).map(Box::new),
                        Err(_) => Err(CallFailure::Failed(format!("timed out after {timeout:?}"))),
                    };
                    Some((token, Answer::Http(result)))
                })
            }
            Callout::Grpc(request) => {
                let Some(caller) = caller else { return };
                let (timeout, limit) = (request.timeout, limits.call_reply_bytes);
                let call = caller.call(request.into_http(limit));
                self.calls.spawn(async move {
                    let outcome = match tokio::time::timeout(timeout, call).await {
                        Ok(answer) => crate::grpc_call::outcome(within(answer, limit)),
                        Err(_) => GrpcOutcome::Status(
                            DEADLINE_EXCEEDED,
                            format!("no answer within {timeout:?}"),
                        ),
                    };
                    Some((token, Answer::Grpc(outcome)))
                })
            }
            Callout::GrpcStream(request) => {
                let Some(caller) = caller else { return };
                let streams = self.streams.get_or_insert_with(|| OpenStreams::new(limits));
                let (body_in, body) = mpsc::unbounded_channel();
                streams.senders.insert(token, body_in);
                let opened = caller.open_stream(request.into_http(StreamBody::new(body)));
                let (events, budget) = (streams.events_in.clone(), streams.budget.clone());
                self.calls.spawn(async move {
                    crate::grpc_stream::follow(token, opened, events, budget).await;
                    None
                })
            }
            Callout::GrpcSend {
                message,
                end_of_stream,
            } => {
                self.send(token, message, end_of_stream);
                return;
            }
            Callout::Redis(request) => {
                let grants = grants.clone();
                // Its own task: a traced request's log of service calls goes
                // along, naming the filter that made the call.
                let call = async move { Some((token, Answer::Redis(request.send(&grants).await))) };
                self.calls
                    .spawn(wasmgate_services::calls::carry(plugin, call))
            }
        };
        self.handles.insert(token, handle);
    }

    /// Sends a message on stream `token` (the guest checked it is one of
    /// its open streams); `end_of_stream` ends the filter's side. After the
    /// end, or once the server has closed, there is nowhere to send to (a
    /// message dropped leaves its stream's send queue).
    fn send(&mut self, token: u32, message: Option<QueuedMessage>, end_of_stream: bool) {
        let sender = self.streams.as_ref().and_then(|s| s.senders.get(&token));
        match (message, sender) {
            (Some(message), Some(sender)) => {
                let _ = sender.send(message);
            }
            (Some(_), None) => {
                tracing::debug!(token, "a gRPC stream message dropped: the stream is not this context's, or its side has ended");
            }
            (None, _) => {}
        }
        if let (true, Some(streams)) = (end_of_stream, self.streams.as_mut()) {
            streams.senders.remove(&token);
        }
    }

    /// Stops the call (or resets the stream) with `token`: nothing more of
    /// it is delivered.
    pub fn cancel(&mut self, token: u32) {
        if let Some(handle) = self.handles.remove(&token) {
            handle.abort();
            self.cancelled.insert(token);
        }
        if let Some(streams) = self.streams.as_mut() {
            streams.senders.remove(&token);
        }
    }

    /// Whether the call or stream with `token` is this context's and has
    /// not ended.
    pub fn holds(&self, token: u32) -> bool {
        self.handles.contains_key(&token)
    }

    /// Whether no call is waiting for its answer (cancelled ones do not).
    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// Calls and streams waiting for their answers or their close.
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// The next answer; pending forever when none is in flight.
    pub async fn next(&mut self) -> (u32, Answer) {
        loop {
            match self.ready().await {
                Ready::Stream(token, event) => {
                    // Events of a stream the guest cancelled may be queued.
                    if !self.handles.contains_key(&token) {
                        continue;
                    }
                    if let StreamEvent::Close(..) = event {
                        self.handles.remove(&token);
                        if let Some(streams) = self.streams.as_mut() {
                            streams.senders.remove(&token);
                        }
                    }
                    return (token, Answer::GrpcStream(event));
                }
                Ready::Joined(joined) => {
                    if let Some(answer) = self.joined(joined) {
                        return answer;
                    }
                }
            }
        }
    }

    /// A stream's next event (first, so that a stream's events are not
    /// overtaken), else the next task to finish.
    async fn ready(&mut self) -> Ready {
        std::future::poll_fn(|cx| {
            if let Some(streams) = self.streams.as_mut() {
                // The event's room in the budget is freed as it is taken:
                // the next may come while the filter hears this one.
                if let Poll::Ready(Some((token, event, _room))) = streams.events.poll_recv(cx) {
                    return Poll::Ready(Ready::Stream(token, event));
                }
            }
            match self.calls.poll_join_next(cx) {
                Poll::Ready(Some(joined)) => Poll::Ready(Ready::Joined(joined)),
                // No task: wait for a stream's event (or forever).
                Poll::Ready(None) | Poll::Pending => Poll::Pending,
            }
        })
        .await
    }

    /// The answer of a task that finished, if it is one to deliver.
    fn joined(
        &mut self,
        joined: Result<Option<(u32, Answer)>, tokio::task::JoinError>,
    ) -> Option<(u32, Answer)> {
        match joined {
            // A stream's task: its close came through the channel.
            Ok(None) => None,
            Ok(Some((token, _))) if self.cancelled.remove(&token) => None,
            Ok(Some(answer)) => {
                self.handles.remove(&answer.0);
                Some(answer)
            }
            // A cancelled (aborted) or panicked call: no token to answer.
            Err(_) => {
                if self.calls.is_empty() {
                    self.cancelled.clear();
                }
                None
            }
        }
    }
}

/// A reply as the filter may read it: one with a body over `limit` (from a
/// caller that did not stop at it) is refused as if the caller had.
fn within(
    reply: Result<HttpCallResponse, CallFailure>,
    limit: usize,
) -> Result<HttpCallResponse, CallFailure> {
    match reply {
        Ok(response) if response.body.len() > limit => Err(CallFailure::ReplyTooLarge { limit }),
        other => other,
    }
}
