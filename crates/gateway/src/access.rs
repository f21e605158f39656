//! A request's access-log line (`wasmgate_observe::access_log`): what is
//! known when the request comes in ([`Pending::begin`]), what its answer
//! says ([`Pending::finish`]: the status, the node that answered, the
//! gateway's own error kind), and what its chain did (`ChainNotes`). The
//! line is written (into its thread's buffer) when the response body ends, or is dropped by a client
//! that went away, so `bytes_out` and `duration_ms` cover the whole answer.
//! The request's trace (`wasmgate_observe::trace`) goes the same way: its
//! span begins with the request (the upstream request carries its
//! `traceparent`) and ends, with a child per filter and one for the
//! upstream call, when the line would be written.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, Response};
use wasmgate_observe::access_log::{millis, AccessLog, Entry, FilterTime};
use wasmgate_observe::trace::{new_span_id, ChildSpan, KeyValue, RequestTrace, SpanKind};
use wasmgate_transport::body::RequestBody;

use crate::chain::ChainNotes;
use crate::endpoint::function::FunctionServed;
use wasmgate_answers::grpc::GatewayAnswer;
use wasmgate_services::calls::CallLog;
use wasmgate_transport::body::{self, Body, BoxError};
use wasmgate_upstream::UpstreamServed;

/// What the node observes of a request that came in: its trace, when the
/// node traces (decided, recorded or not, before anything else is done for
/// it, and its `traceparent` set for the upstream request), as the ids its
/// filters read; and its access-log line with a recorded trace's spans,
/// when the node keeps either. Not inlined into the request's handling:
/// a trace held there, even briefly, made the handling future's moves
/// copies (77,000 instructions a request, bench/instructions.sh).
#[inline(never)]
pub(crate) fn observe(
    request: &mut Request<RequestBody>,
    host: &str,
    peer: SocketAddr,
) -> (
    Option<Box<wasmgate_proxy_wasm::TraceIds>>,
    Option<Box<Pending>>,
) {
    let trace = wasmgate_observe::trace::global().map(|tracing| begin_trace(tracing, request));
    let ids = trace.as_ref().map(|trace| {
        Box::new(wasmgate_proxy_wasm::TraceIds {
            trace_id: trace.trace_id(),
            span_id: trace.span_id(),
            sampled: trace.sampled(),
        })
    });
    (ids, Pending::begin(request, host, peer, trace))
}

/// A line (and a recorded trace) being put together. Boxed: the request's
/// handling moves it from step to step as one pointer.
pub(crate) struct Pending {
    log: Option<&'static AccessLog>,
    /// Only a recorded trace: one the ratio left out has nothing to end.
    trace: Option<RequestTrace>,
    entry: Entry,
    started: Instant,
    bytes_in: Arc<AtomicU64>,
    notes: Option<Arc<ChainNotes>>,
    /// The node that answered, for the trace's upstream span.
    served: Option<UpstreamServed>,
    /// Or the function that did, for its span.
    function: Option<FunctionServed>,
    /// A recorded request's Redis and PostgreSQL calls, for their spans.
    service_calls: Option<Arc<CallLog>>,
    /// A gRPC call: the gateway's own answers reach it as HTTP 200 with a
    /// `grpc-status` (grpc.rs), which is the status its line says.
    grpc: bool,
}

impl Pending {
    /// What the request says about itself, if the node keeps a log or
    /// records its trace; `None` when neither.
    fn begin(
        request: &Request<RequestBody>,
        host: &str,
        peer: SocketAddr,
        trace: Option<RequestTrace>,
    ) -> Option<Box<Pending>> {
        let log = wasmgate_observe::access_log::global();
        let trace_id = trace.as_ref().map(RequestTrace::trace_id);
        let trace = trace.filter(RequestTrace::sampled);
        if log.is_none() && trace.is_none() {
            return None;
        }
        let started = Instant::now();
        let mut entry = Entry {
            trace_id,
            // The writer puts `began` on the wall clock.
            began: Some(started),
            request_id: crate::request_id::next(),
            client: Some(peer),
            method: method_name(request.method()),
            protocol: match request.version() {
                hyper::Version::HTTP_2 => "HTTP/2",
                hyper::Version::HTTP_10 => "HTTP/1.0",
                _ => "HTTP/1.1",
            },
            ..Entry::default()
        };
        if log.is_some() {
            entry.host = host.to_string();
            entry.path = request
                .uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_string();
        }
        Some(Box::new(Pending {
            log,
            entry,
            started,
            bytes_in: Arc::default(),
            notes: None,
            served: None,
            function: None,
            service_calls: trace.as_ref().map(|_| Arc::default()),
            trace,
            // gRPC is HTTP/2 only: other requests skip the header lookup.
            grpc: request.version() == hyper::Version::HTTP_2
                && wasmgate_answers::grpc::is_grpc(request.headers()),
        }))
    }

    /// For a route that keeps no log: the trace goes on, if it is recorded.
    pub fn without_log(mut self: Box<Self>) -> Option<Box<Pending>> {
        self.log = None;
        self.trace.is_some().then_some(self)
    }

    /// What the request's handling runs in: a recorded request's log span
    /// (its log lines carry the trace id) and its service-call log.
    /// Only a recorded request has one: wrapping the handling costs a copy
    /// of its future (23 KB), too much for the requests a ratio leaves out.
    pub fn scope(&self) -> Option<RequestScope> {
        let trace = self.trace.as_ref()?;
        let trace_id = wasmgate_base::hex::encode(&trace.trace_id());
        Some(RequestScope {
            log_span: tracing::info_span!("request", trace_id = %trace_id),
            service_calls: self.service_calls.clone(),
        })
    }

    /// When the request came in (its route's latency counts from it).
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The request's id: the one its filters, errors and crash reports use.
    pub fn request_id(&self) -> u64 {
        self.entry.request_id
    }

    /// Where the client body's reader counts its bytes.
    pub fn bytes_in(&self) -> Arc<AtomicU64> {
        self.bytes_in.clone()
    }

    /// Request body bytes read by someone else than a counting reader.
    pub fn read(&self, bytes: u64) {
        self.bytes_in.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn set_route(&mut self, route: &Arc<str>) {
        self.entry.route = Some(route.clone());
        if let Some(trace) = &mut self.trace {
            trace.name(format!("{} {route}", self.entry.method));
            trace.set_attribute(KeyValue::new("wasmgate.route", route.to_string()));
        }
    }

    /// The chain's notes, shared with the chain that fills them.
    pub fn notes(&mut self, notes: Arc<ChainNotes>) {
        self.notes = Some(notes);
    }

    /// What the answer tells; the line goes when its body is over.
    pub fn finish(mut self: Box<Self>, response: Response<Body>) -> Response<Body> {
        self.entry.status = response.status().as_u16();
        if let Some(answer) = response.extensions().get::<GatewayAnswer>() {
            if answer.kind != "local" {
                self.entry.error = Some(answer.kind.clone());
            }
            if self.grpc && !wasmgate_answers::grpc::is_grpc(response.headers()) {
                self.entry.status = 200; // made a gRPC status (grpc::answer)
            }
        }
        let served = response.extensions().get::<UpstreamServed>().cloned();
        let served = served.or_else(|| self.notes.as_ref()?.upstream());
        if let Some(served) = served {
            self.entry.upstream = Some(served.node.clone());
            self.entry.upstream_time = Some(served.elapsed);
            self.served = Some(served);
        }
        if self.trace.is_some() {
            let function = response.extensions().get::<FunctionServed>().cloned();
            self.function = function.or_else(|| self.notes.as_ref()?.function());
        }
        response.map(|inner| {
            body::boxed(LoggedBody {
                inner,
                sent: 0,
                pending: Some(self),
            })
        })
    }

    fn send(mut self: Box<Self>, bytes_out: u64) {
        self.entry.bytes_out = bytes_out;
        self.entry.bytes_in = self.bytes_in.load(Ordering::Relaxed);
        self.entry.duration = self.started.elapsed();
        if let Some(notes) = &self.notes {
            self.entry.filters = notes
                .times()
                .map(|(name, time)| FilterTime {
                    name: name.clone(),
                    time,
                })
                .collect();
            self.entry.local_response = notes.local_response().map(str::to_string);
        }
        if let Some(trace) = self.trace.take() {
            self.end_trace(trace);
        }
        if let Some(log) = self.log {
            log.record(self.entry);
        }
    }

    /// Ends the request's span, with its filters' and the upstream call's.
    fn end_trace(&self, mut trace: RequestTrace) {
        let entry = &self.entry;
        let came = SystemTime::now() - self.started.elapsed();
        let at = |offset: std::time::Duration| came + offset;
        trace.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(entry.status),
        ));
        trace.set_attribute(KeyValue::new(
            "http.response.body.size",
            entry.bytes_out as i64,
        ));
        if let Some(error) = &entry.error {
            trace.set_attribute(KeyValue::new("error.type", error.clone()));
        }
        if entry.status >= 500 {
            trace.fail(format!("HTTP {}", entry.status));
        }
        // Each filter's span and the function's get their ids now: the
        // service calls each made hang under them.
        let mut owners: Vec<(&str, [u8; 8])> = Vec::new();
        let mut children = Vec::new();
        if let Some(notes) = &self.notes {
            for (name, first, last, spent) in notes.spans() {
                let id = new_span_id();
                owners.push((name, id));
                children.push(ChildSpan {
                    id: Some(id),
                    parent: None,
                    name: format!("filter {name}"),
                    kind: SpanKind::Internal,
                    start: at(first),
                    duration: last.saturating_sub(first),
                    attributes: vec![
                        KeyValue::new("wasmgate.plugin", name.to_string()),
                        KeyValue::new("wasmgate.filter.callbacks_ms", millis(spent)),
                        KeyValue::new(
                            "wasmgate.filter.local_response",
                            notes.local_response() == Some(name),
                        ),
                    ],
                    error: None,
                });
            }
        }
        let upstream = self.served.as_ref().map(|served| ChildSpan {
            id: None,
            parent: None,
            name: entry.method.to_string(),
            kind: SpanKind::Client,
            start: at(served.sent_at.saturating_duration_since(self.started)),
            duration: served.elapsed,
            attributes: vec![
                KeyValue::new("server.address", served.node.to_string()),
                KeyValue::new("http.request.method", entry.method.to_string()),
            ],
            error: None,
        });
        if let Some(call) = &self.function {
            let id = new_span_id();
            owners.push((&call.plugin, id));
            children.push(ChildSpan {
                id: Some(id),
                parent: None,
                name: format!("call {}.{}", call.plugin, call.function),
                kind: SpanKind::Internal,
                start: at(call.started.saturating_duration_since(self.started)),
                duration: call.elapsed,
                attributes: vec![
                    KeyValue::new("wasmgate.plugin", call.plugin.clone()),
                    KeyValue::new("wasmgate.function", call.function.clone()),
                ],
                error: (entry.status >= 500).then(|| format!("HTTP {}", entry.status)),
            });
        }
        if let Some(calls) = &self.service_calls {
            for call in calls.take() {
                let mut attributes = vec![
                    KeyValue::new("db.system.name", call.system),
                    KeyValue::new("db.operation.name", call.operation.clone()),
                    KeyValue::new("wasmgate.service", call.service.clone()),
                ];
                if let Some(text) = call.text {
                    attributes.push(KeyValue::new("db.query.text", text));
                }
                // Under the filter or function that made it (the last of
                // that name: a function's plugin may also be a filter's).
                let parent = call.caller.as_deref().and_then(|caller| {
                    owners
                        .iter()
                        .rev()
                        .find(|(name, _)| *name == caller)
                        .map(|(_, id)| *id)
                });
                children.push(ChildSpan {
                    id: None,
                    parent,
                    name: format!("{} {}", call.operation, call.service),
                    kind: SpanKind::Client,
                    start: at(call.started.saturating_duration_since(self.started)),
                    duration: call.elapsed,
                    attributes,
                    error: call.error,
                });
            }
        }
        trace.end(children, upstream, came + entry.duration);
    }
}

/// What a traced request's handling runs in (see [`Pending::scope`]).
pub(crate) struct RequestScope {
    log_span: tracing::Span,
    service_calls: Option<Arc<CallLog>>,
}

impl RequestScope {
    /// Runs `handling` in the scope. Give it a boxed future: the wrappers
    /// then hold a pointer, and a large future is not moved into each of
    /// them.
    pub async fn run<F: std::future::Future + Unpin>(self, handling: F) -> F::Output {
        use tracing::Instrument;
        match self.service_calls {
            Some(calls) => {
                wasmgate_services::calls::scope(calls, handling)
                    .instrument(self.log_span)
                    .await
            }
            None => handling.instrument(self.log_span).await,
        }
    }
}

/// `response`, logged when `pending` is a line being made.
pub(crate) fn logged(pending: Option<Box<Pending>>, response: Response<Body>) -> Response<Body> {
    match pending {
        Some(pending) => pending.finish(response),
        None => response,
    }
}

/// The response body, counted; its end (or drop) writes the line.
struct LoggedBody {
    inner: Body,
    sent: u64,
    pending: Option<Box<Pending>>,
}

impl hyper::body::Body for LoggedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                this.sent += frame.data_ref().map_or(0, Bytes::len) as u64;
                if this.inner.is_end_stream() {
                    this.done();
                }
            }
            Poll::Ready(Some(Err(error))) => {
                // A component that failed after its response's head: the
                // client got its status and a cut body; the line says why.
                if let Some(cut) = error.downcast_ref::<wasmgate_component::CutBody>() {
                    if let Some(pending) = &mut this.pending {
                        pending.entry.error = Some(cut.kind.to_string());
                    }
                }
                this.done()
            }
            Poll::Ready(None) => this.done(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl LoggedBody {
    fn done(&mut self) {
        if let Some(pending) = self.pending.take() {
            pending.send(self.sent);
        }
    }
}

impl Drop for LoggedBody {
    fn drop(&mut self) {
        self.done();
    }
}

/// The W3C Trace Context headers, parsed once.
const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// The request's trace: its span's attributes from the request
/// (OpenTelemetry's HTTP server conventions) when it is recorded, and the
/// `traceparent` its upstream request carries in place of the client's.
fn begin_trace(
    tracing: &'static wasmgate_observe::trace::Tracing,
    request: &mut Request<RequestBody>,
) -> RequestTrace {
    let headers = request.headers();
    let traceparent = headers.get(&TRACEPARENT).map(HeaderValue::as_bytes);
    let tracestate = headers.get(&TRACESTATE).and_then(|v| v.to_str().ok());
    let method = request.method().as_str();
    let mut trace = tracing.begin(traceparent, tracestate, || method.to_string());
    if trace.sampled() {
        trace.set_attribute(KeyValue::new("http.request.method", method.to_string()));
        trace.set_attribute(KeyValue::new("url.path", request.uri().path().to_string()));
    }
    if let Some(traceparent) = trace.upstream_traceparent() {
        if let Ok(value) = HeaderValue::from_bytes(&traceparent) {
            request.headers_mut().insert(TRACEPARENT, value);
        }
    }
    trace
}

/// The method's name, without an allocation for the standard ones.
fn method_name(method: &hyper::Method) -> Cow<'static, str> {
    use hyper::Method;
    let known = [
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::HEAD,
        Method::OPTIONS,
        Method::PATCH,
        Method::CONNECT,
        Method::TRACE,
    ];
    const NAMES: [&str; 9] = [
        "GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "CONNECT", "TRACE",
    ];
    match known.iter().position(|m| m == method) {
        Some(i) => Cow::Borrowed(NAMES[i]),
        None => Cow::Owned(method.as_str().to_string()),
    }
}
