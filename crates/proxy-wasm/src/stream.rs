//! One HTTP stream on a leased instance: the stream callbacks in order, and
//! what happens when one pauses. A paused stream waits, on the same
//! instance, for what can resume it: answers to the http and Redis calls its
//! filter dispatched (`proxy_on_http_call_response`,
//! `proxy_on_redis_call_response`) and the instance's ticks
//! (`proxy_on_tick`); it goes on when a callback calls
//! `proxy_continue_stream`, and ends when one sends a local response or
//! closes the stream.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use wasmgate_runtime::Lease;
use wasmtime::Store;

use crate::abi::{Action, StreamType, HEADERS_STOP_ITERATION};
use crate::batch::WholeStep;
use crate::callout::CallsInFlight;
use crate::error::FilterError;
use crate::exchange::HttpExchange;
use crate::exports::{Callback, ExportCall, Exports, PickExport};
use crate::instance::{FilterInstance, ROOT_CONTEXT_ID};
use crate::plugin::FilterPlugin;
use crate::state::FilterState;

/// What the host does after a stream callback (and any pause) is over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Go on to the next filter / the upstream.
    Continue,
    /// Body callbacks only: hold this chunk and the ones after it until a
    /// later call continues (StopIterationAndBuffer); the filter sees the
    /// whole buffer each time.
    Buffer,
    /// Headers callbacks with a body to come only: the headers stop at this
    /// filter (Envoy's StopIteration). The body keeps coming to this
    /// filter, which may still edit the headers; they go on to the next
    /// filters when one of its body callbacks continues (or it calls
    /// `proxy_continue_stream`).
    Stop,
    /// A local response is in `HttpExchange::local_response`: answer with it.
    Respond,
    /// The filter closed the stream: reset it.
    Close,
}

/// What [`FilterStream::on_response_whole`] got through.
pub enum Whole {
    /// The headers callback's outcome (the body's callback did not run):
    /// the body is given back, for the host to filter as usual.
    Headers(Flow, Vec<u8>),
    /// The body callback's outcome after the headers went on; what the
    /// filter left of the body is in the exchange's response body.
    Body(Flow),
    /// Both went on and the stream's end callbacks ran: the body as the
    /// filter left it. The stream is over ([`FilterStream::ended`]).
    Ended(Vec<u8>),
}

pub struct FilterStream {
    plugin: Arc<FilterPlugin>,
    lease: Lease<FilterInstance>,
    context_id: u32,
    /// Whether `proxy_on_context_create` ran: it runs in the same guest call
    /// as the stream's first callback (see [`CreateThen`]).
    created: bool,
    calls: CallsInFlight,
}

impl FilterStream {
    pub(crate) async fn start(
        plugin: Arc<FilterPlugin>,
        mut lease: Lease<FilterInstance>,
    ) -> Result<FilterStream, FilterError> {
        let instance = lease.instance();
        instance.next_context_id = instance.next_context_id.wrapping_add(1).max(2);
        let context_id = instance.next_context_id;
        let state = instance.store_mut().data_mut();
        state.stream_context = Some(context_id);
        // The last stream's calls went with it.
        state.calls_in_flight = 0;
        Ok(FilterStream {
            plugin,
            lease,
            context_id,
            created: false,
            calls: CallsInFlight::default(),
        })
    }

    /// `call`, preceded by `proxy_on_context_create` in the same hand-off
    /// if the stream's context does not exist yet. Envoy creates the context
    /// right before the first stream callback too; making it part of that
    /// call saves the budget and slow-lane bookkeeping of a call per filter
    /// and request. (When the first callback is the request's headers,
    /// `stream_callback` makes both one guest call, on one fiber: batch.rs.)
    async fn run<C: Callback>(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        name: &'static str,
        call: C,
    ) -> Result<C::Output, FilterError> {
        let instance = self.lease.instance();
        if self.created {
            return instance.run_with(exchange, name, call).await;
        }
        self.created = true;
        let call = CreateThen {
            exports: instance.exports.clone(),
            context_id: self.context_id,
            then: call,
        };
        instance.run_with(exchange, name, call).await
    }

    pub fn plugin(&self) -> &Arc<FilterPlugin> {
        &self.plugin
    }

    /// Whether the stream's context exists (a callback of it ran).
    pub fn started(&self) -> bool {
        self.created
    }

    pub async fn on_request_headers(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        end_of_stream: bool,
    ) -> Result<Flow, FilterError> {
        let count = exchange.request_headers.len() as u32;
        let phase = Phase::headers("proxy_on_request_headers", StreamType::Request);
        self.stream_callback(
            phase,
            |e| e.request_headers.as_ref(),
            exchange,
            count,
            end_of_stream,
        )
        .await
    }

    /// `exchange.request_body` holds the bytes the filter sees: the new
    /// chunk, after any it asked to buffer.
    pub async fn on_request_body(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        end_of_stream: bool,
    ) -> Result<Flow, FilterError> {
        let size = exchange.request_body.len() as u32;
        let phase = Phase::body("proxy_on_request_body", StreamType::Request);
        self.stream_callback(
            phase,
            |e| e.request_body.as_ref(),
            exchange,
            size,
            end_of_stream,
        )
        .await
    }

    pub async fn on_request_trailers(
        &mut self,
        exchange: &mut Box<HttpExchange>,
    ) -> Result<Flow, FilterError> {
        let count = exchange.request_trailers.len() as u32;
        let phase = Phase::headers("proxy_on_request_trailers", StreamType::Request);
        self.trailers_callback(phase, |e| e.request_trailers.as_ref(), exchange, count)
            .await
    }

    pub async fn on_response_headers(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        end_of_stream: bool,
    ) -> Result<Flow, FilterError> {
        let count = exchange.response_headers.len() as u32;
        let phase = Phase::headers("proxy_on_response_headers", StreamType::Response);
        self.stream_callback(
            phase,
            |e| e.response_headers.as_ref(),
            exchange,
            count,
            end_of_stream,
        )
        .await
    }

    pub async fn on_response_body(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        end_of_stream: bool,
    ) -> Result<Flow, FilterError> {
        let size = exchange.response_body.len() as u32;
        let phase = Phase::body("proxy_on_response_body", StreamType::Response);
        self.stream_callback(
            phase,
            |e| e.response_body.as_ref(),
            exchange,
            size,
            end_of_stream,
        )
        .await
    }

    pub async fn on_response_trailers(
        &mut self,
        exchange: &mut Box<HttpExchange>,
    ) -> Result<Flow, FilterError> {
        let count = exchange.response_trailers.len() as u32;
        let phase = Phase::headers("proxy_on_response_trailers", StreamType::Response);
        self.trailers_callback(phase, |e| e.response_trailers.as_ref(), exchange, count)
            .await
    }

    /// Ends the stream: `proxy_on_log`, `proxy_on_done`, `proxy_on_delete`;
    /// the instance goes back to the pool. Calls still in flight are dropped.
    pub async fn finish(mut self, exchange: &mut Box<HttpExchange>) -> Result<(), FilterError> {
        exchange.info.complete = true;
        let end = EndOfStream {
            exports: self.lease.instance().exports.clone(),
            context_id: self.context_id,
        };
        self.run(exchange, "proxy_on_log", end).await?;
        self.release();
        Ok(())
    }

    /// The instance goes back to its pool (or is dropped, if the filter
    /// asked for a fresh one), once the stream's end callbacks ran.
    fn release(mut self) {
        let state = self.lease.instance().store_mut().data_mut();
        if state.rebuild_requested {
            // Dropped, not released: the pool starts a fresh one.
            tracing::debug!(plugin = %self.plugin.name(), "the filter asked for its instance to be rebuilt");
            return;
        }
        state.stream_context = None;
        state.dispatched_calls.clear();
        // This context's gRPC streams end with it (`self.calls` drops them).
        if !state.grpc_streams.is_empty() {
            state
                .grpc_streams
                .retain(|token, _| !self.calls.holds(*token));
        }
        self.lease.release();
    }

    /// Whether [`FilterStream::on_response_whole`] can run: the stream has
    /// begun and the filter has every callback it makes.
    pub fn takes_whole_responses(&mut self) -> bool {
        self.created
            && (self.lease.instance().exports.batched.as_ref())
                .is_some_and(|b| b.response_whole.is_some())
    }

    /// A response whose body came whole with its head: the response
    /// headers callback, then the body's, then the stream's end, in one
    /// guest call as long as each goes on (batch.rs). Where one stops,
    /// the outcome is what the separate call would have given, and the
    /// host carries on from there.
    /// After [`Whole::Ended`], the stream is over: end it with
    /// [`FilterStream::ended`].
    pub async fn on_response_whole(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        body: Vec<u8>,
    ) -> Result<Whole, FilterError> {
        let count = exchange.response_headers.len() as u32;
        let size = body.len() as u32;
        self.reset_signals();
        let state = self.lease.instance().store_mut().data_mut();
        state.whole_body = body;
        let call = ExportCall {
            exports: self.lease.instance().exports.clone(),
            pick: |e| e.batched.as_ref().and_then(|b| b.response_whole.as_ref()),
            params: (self.context_id, count, size),
        };
        let outcome = self.run(exchange, "proxy_on_response_headers", call).await;
        let state = self.lease.instance().store_mut().data_mut();
        let step = std::mem::take(&mut state.whole_step);
        let rest = std::mem::take(&mut state.whole_body);
        let code = match (outcome, step) {
            (Ok(code), _) => code,
            // The body, wherever it was, goes back where the caller's
            // failure handling finds it (fail open lets it through).
            (Err(error), WholeStep::Headers) => {
                exchange.response_body = rest;
                return Err(error);
            }
            (Err(error), WholeStep::Body) => return Err(error),
            // A failure in the end callbacks fails no request (as in
            // `finish`): the response is whole; the instance is dropped.
            (Err(error), WholeStep::End) => {
                let plugin = self.plugin.name().to_string();
                tracing::warn!(%plugin, %error, "filter failed while finishing the stream");
                return Ok(Whole::Ended(rest));
            }
        };
        let whole = match step {
            WholeStep::Headers => {
                let phase = Phase::headers("proxy_on_response_headers", StreamType::Response);
                let stops_headers = code == HEADERS_STOP_ITERATION
                    && self.plugin.abi_version().honours_stop_iteration();
                let phase = Phase {
                    stops_headers,
                    ..phase
                };
                let action = Action::from_code(code);
                let flow = self.after_callback(phase, action, exchange, false).await?;
                Whole::Headers(flow, rest)
            }
            WholeStep::Body => {
                let phase = Phase::body("proxy_on_response_body", StreamType::Response);
                let action = Action::from_code(code);
                Whole::Body(self.after_callback(phase, action, exchange, true).await?)
            }
            WholeStep::End => Whole::Ended(rest),
        };
        Ok(whole)
    }

    /// Ends a stream whose end callbacks ran in [`FilterStream::on_response_whole`]:
    /// its instance goes back to the pool, unless one of them failed.
    pub fn ended(mut self) {
        if self.lease.instance().is_intact() {
            self.release();
        }
    }

    /// Ends a stream whose request went away before it ended (the client
    /// left, or a gateway deadline passed). Envoy still ends its context
    /// then (`proxy_on_log`, `proxy_on_done`, `proxy_on_delete`: the SDKs
    /// free what they keep per stream there), and so does this, on a task
    /// of its own, after which the instance goes back to its pool instead of
    /// being replaced: a heavy filter's start costs far more than these
    /// callbacks. An instance cut off in a callback (or that crashed) is
    /// dropped as before.
    pub fn end_detached(mut self) {
        if !self.lease.instance().is_intact() {
            return;
        }
        if !self.created {
            // Nothing of this stream in the guest.
            self.lease.release();
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let plugin = self.plugin.clone();
            if let Err(error) = self.finish(&mut Box::default()).await {
                let plugin = plugin.name();
                tracing::debug!(%plugin, %error, "filter failed ending a stream its request left");
            }
        });
    }

    async fn stream_callback(
        &mut self,
        phase: Phase,
        pick: PickExport<(u32, u32, u32), i32>,
        exchange: &mut Box<HttpExchange>,
        size: u32,
        end_of_stream: bool,
    ) -> Result<Flow, FilterError> {
        let instance = self.lease.instance();
        if pick(&instance.exports).is_none() {
            return Ok(Flow::Continue);
        }
        let exports = instance.exports.clone();
        self.reset_signals();
        let is_request_headers = phase.direction == StreamType::Request && !phase.body;
        let code = if !self.created && is_request_headers && exports.batched.is_some() {
            // The usual first callback: the context is created in the same
            // guest call (batch.rs).
            self.created = true;
            let call = ExportCall {
                exports,
                pick: |e| e.batched.as_ref().map(|b| &b.create_then_request_headers),
                params: (self.context_id, ROOT_CONTEXT_ID, size, end_of_stream as u32),
            };
            let instance = self.lease.instance();
            instance.run_with(exchange, phase.name, call).await?
        } else {
            let call = ExportCall {
                exports,
                pick,
                params: (self.context_id, size, end_of_stream as u32),
            };
            self.run(exchange, phase.name, call).await?
        };
        // Higress's StopIteration: only for its ABI, only from headers with a
        // body to come.
        let stops_headers = code == HEADERS_STOP_ITERATION
            && phase.may_stop_headers(end_of_stream)
            && self.plugin.abi_version().honours_stop_iteration();
        let phase = Phase {
            stops_headers,
            ..phase
        };
        self.after_callback(phase, Action::from_code(code), exchange, end_of_stream)
            .await
    }

    async fn trailers_callback(
        &mut self,
        phase: Phase,
        pick: PickExport<(u32, u32), i32>,
        exchange: &mut Box<HttpExchange>,
        count: u32,
    ) -> Result<Flow, FilterError> {
        let instance = self.lease.instance();
        if pick(&instance.exports).is_none() {
            return Ok(Flow::Continue);
        }
        let call = ExportCall {
            exports: instance.exports.clone(),
            pick,
            params: (self.context_id, count),
        };
        self.reset_signals();
        let code = self.run(exchange, phase.name, call).await?;
        self.after_callback(phase, Action::from_code(code), exchange, true)
            .await
    }

    fn reset_signals(&mut self) {
        let state = self.lease.instance().store_mut().data_mut();
        state.resumed.clear();
        state.closed.clear();
    }

    async fn after_callback(
        &mut self,
        phase: Phase,
        action: Action,
        exchange: &mut Box<HttpExchange>,
        end_of_stream: bool,
    ) -> Result<Flow, FilterError> {
        self.lease
            .instance()
            .start_dispatched_calls(&mut self.calls);
        if let Some(flow) = self.settled(phase, exchange) {
            return Ok(flow);
        }
        match action {
            Action::Continue => Ok(Flow::Continue),
            // Pausing a body chunk that is not the last one means "buffer":
            // the host collects more and calls again.
            Action::Pause if phase.body && !end_of_stream => Ok(Flow::Buffer),
            // Higress's StopIteration with no call to wait for: its Envoy
            // goes on delivering the body to this filter.
            Action::Pause if phase.stops_headers && self.calls.is_empty() => Ok(Flow::Stop),
            Action::Pause => self.wait_until_resumed(phase, exchange).await,
        }
    }

    /// A local response, a close or a resume of this direction ends the pause.
    fn settled(&mut self, phase: Phase, exchange: &HttpExchange) -> Option<Flow> {
        let state = self.lease.instance().store_mut().data_mut();
        if exchange.local_response.is_some() {
            Some(Flow::Respond)
        } else if !state.closed.is_empty() {
            Some(Flow::Close)
        } else if state.resumed.contains(&phase.direction) {
            state.resumed.clear();
            Some(Flow::Continue)
        } else {
            None
        }
    }

    async fn wait_until_resumed(
        &mut self,
        phase: Phase,
        exchange: &mut Box<HttpExchange>,
    ) -> Result<Flow, FilterError> {
        // Without a bound, a filter that answers each call's response with
        // another call (or ticks forever) held the request and its instance
        // for good (found by tests/host/fuzz_host/).
        let limit = max_pause(self.plugin.shared.config.timeout);
        let deadline = Instant::now() + limit;
        loop {
            let tick = self.lease.instance().tick_period();
            // Headers of a StopIteration still paused once their calls are
            // answered: the body goes to the filter (`Flow::Stop`).
            if self.calls.is_empty() && phase.stops_headers {
                return Ok(Flow::Stop);
            }
            if self.calls.is_empty() && tick.is_none() {
                return Err(FilterError::Stalled {
                    plugin: self.plugin.name().to_string(),
                    callback: phase.name,
                });
            }
            let paused_too_long = || FilterError::PausedTooLong {
                plugin: self.plugin.name().to_string(),
                callback: phase.name,
                limit,
            };
            if Instant::now() >= deadline {
                return Err(paused_too_long());
            }
            let instance = self.lease.instance();
            tokio::select! {
                (token, answer) = self.calls.next() => {
                    instance.deliver_answer(exchange, token, answer).await?;
                }
                _ = tokio::time::sleep(tick.unwrap_or_default()), if tick.is_some() => {
                    instance.tick(exchange).await?;
                }
                _ = tokio::time::sleep_until(deadline) => return Err(paused_too_long()),
            }
            instance.start_dispatched_calls(&mut self.calls);
            if let Some(flow) = self.settled(phase, exchange) {
                return Ok(flow);
            }
        }
    }
}

/// `proxy_on_context_create` for a stream, then `then`.
struct CreateThen<C> {
    exports: Arc<Exports>,
    context_id: u32,
    then: C,
}

impl<C: Callback> Callback for CreateThen<C> {
    type Output = C::Output;
    async fn call(self, store: &mut Store<FilterState>) -> wasmtime::Result<C::Output> {
        self.exports
            .context_create
            .call_async(&mut *store, (self.context_id, ROOT_CONTEXT_ID))
            .await?;
        self.then.call(store).await
    }
}

/// `proxy_on_log`, `proxy_on_done` and `proxy_on_delete`, in one hand-off
/// (and one guest call where the filter has all three, see batch.rs).
struct EndOfStream {
    exports: Arc<Exports>,
    context_id: u32,
}

impl Callback for EndOfStream {
    type Output = ();
    async fn call(self, store: &mut Store<FilterState>) -> wasmtime::Result<()> {
        let id = self.context_id;
        if let Some(batched) = &self.exports.batched {
            return batched.end_of_stream.call_async(&mut *store, id).await;
        }
        if let Some(f) = &self.exports.log {
            f.call_async(&mut *store, id).await?;
        }
        if let Some(f) = &self.exports.done {
            f.call_async(&mut *store, id).await?;
        }
        if let Some(f) = &self.exports.delete {
            f.call_async(&mut *store, id).await?;
        }
        Ok(())
    }
}

/// How long one pause may last: 10 callback deadlines (10 s with the
/// gateway's default 1 s), or 60 s for a plugin without a deadline.
fn max_pause(callback_timeout: Option<Duration>) -> Duration {
    callback_timeout.map_or(Duration::from_secs(60), |t| t.saturating_mul(10))
}

#[derive(Clone, Copy)]
struct Phase {
    name: &'static str,
    direction: StreamType,
    body: bool,
    /// A pause here is Higress's StopIteration: the headers wait, the
    /// body goes on to the filter (`Flow::Stop`).
    stops_headers: bool,
}

impl Phase {
    /// Whether a pause here may stop only the headers: a headers callback
    /// (not trailers, which end the stream) with a body to come.
    fn may_stop_headers(&self, end_of_stream: bool) -> bool {
        !self.body && !end_of_stream
    }

    fn headers(name: &'static str, direction: StreamType) -> Phase {
        Phase {
            name,
            direction,
            body: false,
            stops_headers: false,
        }
    }

    fn body(name: &'static str, direction: StreamType) -> Phase {
        Phase {
            name,
            direction,
            body: true,
            stops_headers: false,
        }
    }
}
