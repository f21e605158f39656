//! A filter instance ([`FilterInstance`]): one store with its guest, the
//! guest's exports, and the callbacks run on it under the plugin's
//! deadline, including the delivery of the answers to the calls its filter
//! dispatched (http, Redis, gRPC) and its ticks.

use std::sync::Arc;
use std::time::Duration;

use wasmgate_runtime::slow_lane;
use wasmgate_runtime::CrashReport;
use wasmtime::Store;

use crate::abi::MapType;
use crate::batch::WholeStep;
use crate::callout::{Answer, CallsInFlight};
use crate::error::FilterError;
use crate::exchange::HttpExchange;
use crate::exports::{Callback, Exports};
use crate::grpc_call::GrpcOutcome;
use crate::grpc_stream::StreamEvent;
use crate::http_call::{CallFailure, HttpCallResponse};
use crate::limits::{refuse, Limit};
use crate::redis_call::{REDIS_NETWORK_ERROR, REDIS_OK};
use crate::state::FilterState;

/// Every instance has one root context, with this id (the SDKs look root
/// contexts up by the id the host passes to root callbacks).
pub(crate) const ROOT_CONTEXT_ID: u32 = 1;

pub(crate) struct FilterInstance {
    /// Out (None) only while a callback runs, which takes it along so that it
    /// can move threads (see [`FilterInstance::run`]); a callback whose
    /// request went away takes it down with it, and the lease drops the rest.
    store: Option<Store<FilterState>>,
    /// Shared so a callback can borrow its function while the store is in use.
    pub exports: Arc<Exports>,
    pub next_context_id: u32,
    /// A callback trapped or ran out of time: the instance's memory may be
    /// half-written, so it is never run again.
    pub crashed: bool,
}

/// gRPC status codes `proxy_get_status` reports for a callout.
const GRPC_OK: u32 = 0;
const GRPC_RESOURCE_EXHAUSTED: u32 = crate::grpc_call::RESOURCE_EXHAUSTED;
const GRPC_UNAVAILABLE: u32 = 14;

/// A `FilterInstance` whose store is out means its last callback was dropped
/// mid-call, and the instance is in no state to be used again.
const STORE_OUT: &str = "a filter instance was used after a callback on it was cancelled";

impl FilterInstance {
    /// An instance just started (its root context created and configured),
    /// with no stream on it yet.
    pub(crate) fn new(store: Store<FilterState>, exports: Arc<Exports>) -> FilterInstance {
        FilterInstance {
            store: Some(store),
            exports,
            next_context_id: ROOT_CONTEXT_ID,
            crashed: false,
        }
    }

    /// Runs one guest call under the plugin's deadline; a failure becomes a
    /// crash report (the caller must then drop the instance).
    pub async fn run<C: Callback>(
        &mut self,
        name: &'static str,
        callback: C,
    ) -> Result<C::Output, FilterError> {
        let mut store = self.store.take().expect(STORE_OUT);
        let plugin = store.data().plugin.clone();
        let ticks = store.data_mut().budget.start(plugin.config.timeout);
        let started = store.data().budget.started();
        store.set_epoch_deadline(ticks);
        // The callback owns the store while it runs, so that it can move to
        // the slow lane if it runs long.
        let call = Box::pin(async move {
            let outcome = callback.call(&mut store).await;
            (store, outcome)
        });
        let finished = slow_lane::run(started, call).await;
        plugin.stats.record_call(finished.wall, finished.cpu);
        let (store, outcome) = finished.output;
        self.crashed |= outcome.is_err();
        let store = self.store.insert(store);
        outcome.map_err(|error| {
            // A whole response's batched callbacks (batch.rs) report the
            // one that failed.
            let name = match store.data().whole_step {
                WholeStep::Headers => name,
                WholeStep::Body => "proxy_on_response_body",
                WholeStep::End => "proxy_on_log",
            };
            let timed_out = store.data().budget.timed_out();
            let mut report = CrashReport::from_error(&plugin.config.name, name, &error, timed_out);
            // A stream's callback has the request's exchange; a root
            // context's (ticks, queues) has none (id 0).
            let request = store.data().exchange.info.id;
            report.request_id = (request != 0).then_some(request);
            plugin.stats.record_crash(&report);
            tracing::warn!(plugin = %plugin.config.name, route = %plugin.config.route, callback = name, kind = report.kind.as_str(), "{report}");
            FilterError::Crash(Box::new(report))
        })
    }

    /// Lends `exchange` to the instance for one callback.
    pub async fn run_with<C: Callback>(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        name: &'static str,
        callback: C,
    ) -> Result<C::Output, FilterError> {
        // The boxes are swapped, not the exchanges (close to a kilobyte, moved
        // twice per callback), nor taken (`take` builds an empty exchange and
        // drops the one it replaces: 1 k instructions a request,
        // bench/instructions.py); the store's slot holds an empty one between
        // callbacks.
        std::mem::swap(exchange, &mut self.store_mut().data_mut().exchange);
        let result = self.run(name, callback).await;
        std::mem::swap(exchange, &mut self.store_mut().data_mut().exchange);
        result
    }

    /// Whether the instance may run again: no callback of it was cut off
    /// half-way (its request went away mid-call, which takes the store
    /// along) and none crashed.
    pub fn is_intact(&self) -> bool {
        self.store.is_some() && !self.crashed
    }

    pub fn store(&self) -> &Store<FilterState> {
        self.store.as_ref().expect(STORE_OUT)
    }

    pub fn store_mut(&mut self) -> &mut Store<FilterState> {
        self.store.as_mut().expect(STORE_OUT)
    }

    /// Sends the calls the last callback dispatched.
    pub fn start_dispatched_calls(&mut self, calls: &mut CallsInFlight) {
        let dispatched = std::mem::take(&mut self.store_mut().data_mut().dispatched_calls);
        let config = &self.store().data().plugin.config;
        let caller = config.http_caller.as_deref();
        let plugin = (config.name.as_str(), &config.limits);
        for (token, callout) in dispatched {
            calls.start(token, callout, caller, &config.services, plugin);
        }
        for token in std::mem::take(&mut self.store_mut().data_mut().cancelled_calls) {
            calls.cancel(token);
        }
        self.store_mut().data_mut().calls_in_flight = calls.len();
    }

    /// Delivers a call's answer in the callback its kind has.
    pub async fn deliver_answer(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        token: u32,
        answer: Answer,
    ) -> Result<(), FilterError> {
        // The call is over, unless this is a stream's event before its close.
        let over =
            !matches!(&answer, Answer::GrpcStream(e) if !matches!(e, StreamEvent::Close(..)));
        if over {
            let state = self.store_mut().data_mut();
            state.calls_in_flight = state.calls_in_flight.saturating_sub(1);
        }
        match answer {
            Answer::Http(result) => self.deliver_call_response(exchange, token, result).await,
            Answer::Redis(result) => self.deliver_redis_response(exchange, token, result).await,
            Answer::Grpc(outcome) => self.deliver_grpc_outcome(exchange, token, outcome).await,
            Answer::GrpcStream(event) => self.deliver_stream_event(exchange, token, event).await,
        }
    }

    /// What a gRPC stream's server sent (see `grpc_stream.rs`): metadata
    /// readable as map 4 or 5 during its callback, a message as buffer 5,
    /// the close with its status message in `proxy_get_status`.
    async fn deliver_stream_event(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        token: u32,
        event: StreamEvent,
    ) -> Result<(), FilterError> {
        let (name, f, size) = match event {
            StreamEvent::InitialMetadata(metadata) => {
                let count = metadata.len() as u32;
                let kind = MapType::GrpcReceiveInitialMetadata;
                self.store_mut().data_mut().grpc_metadata = Some((kind, metadata));
                let f = self.exports.grpc_initial_metadata.clone();
                ("proxy_on_grpc_receive_initial_metadata", f, count)
            }
            StreamEvent::TrailingMetadata(metadata) => {
                let count = metadata.len() as u32;
                let kind = MapType::GrpcReceiveTrailingMetadata;
                self.store_mut().data_mut().grpc_metadata = Some((kind, metadata));
                let f = self.exports.grpc_trailing_metadata.clone();
                ("proxy_on_grpc_receive_trailing_metadata", f, count)
            }
            StreamEvent::Message(message) => {
                let size = message.len() as u32;
                self.store_mut().data_mut().grpc_reply = Some(message);
                (
                    "proxy_on_grpc_receive",
                    self.exports.grpc_receive.clone(),
                    size,
                )
            }
            StreamEvent::Close(code, message) => {
                let state = self.store_mut().data_mut();
                state.grpc_streams.remove(&token);
                if code != GRPC_OK {
                    let plugin = &state.plugin.config;
                    tracing::info!(plugin = %plugin.name, route = %plugin.route, token, code, %message, "grpc stream closed with an error");
                }
                state.last_call_status = (code, message);
                ("proxy_on_grpc_close", self.exports.grpc_close.clone(), code)
            }
        };
        let result = match f {
            Some(f) => {
                let params = (ROOT_CONTEXT_ID, token, size);
                self.run_with(exchange, name, (f, params)).await
            }
            None => Ok(()),
        };
        let state = self.store_mut().data_mut();
        state.grpc_metadata = None;
        state.grpc_reply = None;
        result
    }

    /// A unary gRPC call's end (see `grpc_call.rs`): its reply's message
    /// through `proxy_on_grpc_receive`, readable as buffer 5, or its status
    /// through `proxy_on_grpc_close`, with the message in `proxy_get_status`.
    async fn deliver_grpc_outcome(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        token: u32,
        outcome: GrpcOutcome,
    ) -> Result<(), FilterError> {
        match outcome {
            GrpcOutcome::Reply(message) => {
                let Some(f) = self.exports.grpc_receive.clone() else {
                    return Ok(());
                };
                let size = message.len() as u32;
                let state = self.store_mut().data_mut();
                state.last_call_status = (GRPC_OK, String::new());
                state.grpc_reply = Some(message);
                let result = self
                    .run_with(
                        exchange,
                        "proxy_on_grpc_receive",
                        (f, (ROOT_CONTEXT_ID, token, size)),
                    )
                    .await;
                self.store_mut().data_mut().grpc_reply = None;
                result
            }
            GrpcOutcome::ReplyTooLarge(limit) => {
                let plugin = &self.store().data().plugin;
                refuse(plugin, Limit::CallReplyBytes, "proxy_grpc_call");
                let message = CallFailure::ReplyTooLarge { limit }.to_string();
                self.close_grpc_call(exchange, token, GRPC_RESOURCE_EXHAUSTED, message)
                    .await
            }
            GrpcOutcome::Status(code, message) => {
                self.close_grpc_call(exchange, token, code, message).await
            }
        }
    }

    /// A unary gRPC call's end with status `code`.
    async fn close_grpc_call(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        token: u32,
        code: u32,
        message: String,
    ) -> Result<(), FilterError> {
        let Some(f) = self.exports.grpc_close.clone() else {
            return Ok(());
        };
        let plugin = &self.store().data().plugin.config;
        tracing::info!(plugin = %plugin.name, route = %plugin.route, token, code, %message, "grpc call failed");
        self.store_mut().data_mut().last_call_status = (code, message);
        self.run_with(
            exchange,
            "proxy_on_grpc_close",
            (f, (ROOT_CONTEXT_ID, token, code)),
        )
        .await
    }

    /// `proxy_on_redis_call_response` on the root context (Higress's
    /// framework finds the stream that made the call by the token), with
    /// the reply in buffer 9; a call that got no reply is status 1 and size
    /// 0, as Envoy reports it.
    async fn deliver_redis_response(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        token: u32,
        result: Result<Vec<u8>, String>,
    ) -> Result<(), FilterError> {
        let Some(f) = self.exports.redis_call_response.clone() else {
            return Ok(());
        };
        let (status, reply) = match result {
            Ok(reply) => (REDIS_OK, reply),
            Err(reason) => {
                let plugin = &self.store().data().plugin.config;
                tracing::info!(plugin = %plugin.name, route = %plugin.route, token, %reason, "redis call failed");
                (REDIS_NETWORK_ERROR, Vec::new())
            }
        };
        let size = reply.len() as u32;
        self.store_mut().data_mut().redis_reply = Some(reply);
        let result = self
            .run_with(
                exchange,
                "proxy_on_redis_call_response",
                (f, (ROOT_CONTEXT_ID, token, status, size)),
            )
            .await;
        self.store_mut().data_mut().redis_reply = None;
        result
    }

    /// `proxy_on_http_call_response` on the root context. A failed call is
    /// reported as an answer with no headers and no body, as Envoy does,
    /// with the reason in `proxy_get_status`: UNAVAILABLE (14) when no
    /// answer came, RESOURCE_EXHAUSTED (8) when it was over
    /// `call_reply_bytes` (and not read further).
    async fn deliver_call_response(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        token: u32,
        result: Result<Box<HttpCallResponse>, CallFailure>,
    ) -> Result<(), FilterError> {
        if let Err(CallFailure::ReplyTooLarge { .. }) = &result {
            let plugin = &self.store().data().plugin;
            refuse(plugin, Limit::CallReplyBytes, "proxy_http_call");
        }
        let Some(f) = self.exports.http_call_response.clone() else {
            return Ok(());
        };
        let response = match result {
            Ok(response) => {
                self.store_mut().data_mut().last_call_status = (GRPC_OK, String::new());
                response
            }
            Err(failure) => {
                let code = match failure {
                    CallFailure::Failed(_) => GRPC_UNAVAILABLE,
                    CallFailure::ReplyTooLarge { .. } => GRPC_RESOURCE_EXHAUSTED,
                };
                let reason = failure.to_string();
                let plugin = &self.store().data().plugin.config;
                tracing::info!(plugin = %plugin.name, route = %plugin.route, token, %reason, "http call failed");
                self.store_mut().data_mut().last_call_status = (code, reason);
                Box::default()
            }
        };
        let sizes = (
            response.headers.len() as u32,
            response.body.len() as u32,
            response.trailers.len() as u32,
        );
        self.store_mut().data_mut().call_response = Some(response);
        let result = self
            .run_with(
                exchange,
                "proxy_on_http_call_response",
                (f, (ROOT_CONTEXT_ID, token, sizes.0, sizes.1, sizes.2)),
            )
            .await;
        self.store_mut().data_mut().call_response = None;
        result
    }

    /// `proxy_on_tick` on the root context.
    pub async fn tick(&mut self, exchange: &mut Box<HttpExchange>) -> Result<(), FilterError> {
        let Some(f) = self.exports.tick.clone() else {
            return Ok(());
        };
        self.run_with(exchange, "proxy_on_tick", (f, ROOT_CONTEXT_ID))
            .await
    }

    pub fn tick_period(&self) -> Option<Duration> {
        match self.store().data().tick_period_ms {
            0 => None,
            ms => Some(Duration::from_millis(ms as u64)),
        }
    }
}
