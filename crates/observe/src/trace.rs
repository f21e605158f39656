//! Traces: each request is a span of a W3C trace (continued from the
//! client's `traceparent`, or a new one), with a child span per filter and
//! one for the upstream call, exported over OTLP (gRPC) by OpenTelemetry's
//! own SDK. The SDK batches spans on its own thread with a bounded queue,
//! so a collector that is slow or down costs a request nothing; spans it
//! could not deliver are counted ([`TraceStats`]).
//!
//! A request's span starts when the request comes in ([`Tracing::begin`]);
//! its children are recorded when it ends, from the times the gateway
//! measured anyway (the chain's per-filter times, the upstream's), so the
//! request path does no tracing work beyond one span. The upstream span's
//! id is chosen up front: it is the parent the upstream request's
//! `traceparent` names.

use std::borrow::Cow;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use opentelemetry::propagation::{Extractor, TextMapPropagator};
pub use opentelemetry::trace::SpanKind;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, Status, TraceContextExt, TraceId, Tracer as _,
    TracerProvider as _,
};
use opentelemetry::Context;
pub use opentelemetry::KeyValue;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, IdGenerator, RandomIdGenerator, Sampler, SdkTracer,
    SdkTracerProvider, SpanData, SpanExporter,
};
use opentelemetry_sdk::Resource;

/// Where and how a node traces.
#[derive(Clone, Debug)]
pub struct TraceSettings {
    /// The OTLP/gRPC endpoint (`http://collector:4317`).
    pub endpoint: String,
    /// The share of new traces recorded (0 to 1); a request that comes with
    /// a `traceparent` follows its sampled flag.
    pub sample_ratio: f64,
    /// `service.name` of every span.
    pub service_name: String,
    /// How long finished spans wait to be sent in one batch.
    pub batch_delay: Duration,
    /// How many finished spans wait at most; more are dropped.
    pub queue_spans: usize,
}

/// Spans recorded, handed to the collector, and those it could not take.
#[derive(Debug, Default)]
pub struct TraceStats {
    pub recorded: AtomicU64,
    pub exported: AtomicU64,
    pub failed: AtomicU64,
}

/// The process's tracer.
pub struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    stats: Arc<TraceStats>,
}

static TRACING: OnceLock<Tracing> = OnceLock::new();

/// The process's tracer, if tracing is on.
pub fn global() -> Option<&'static Tracing> {
    TRACING.get()
}

/// Starts tracing for the process (once; later calls change nothing).
/// Call from within the tokio runtime: the gRPC channel lives on it.
pub fn install(settings: &TraceSettings) -> Result<(), String> {
    let tracing = Tracing::start(settings)?;
    let _ = TRACING.set(tracing);
    Ok(())
}

impl Tracing {
    fn start(settings: &TraceSettings) -> Result<Tracing, String> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(settings.endpoint.clone())
            .with_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| format!("tracing: the OTLP exporter for {}: {e}", settings.endpoint))?;
        let stats = Arc::new(TraceStats::default());
        let counted = Counted {
            inner: exporter,
            stats: stats.clone(),
        };
        let ratio = settings.sample_ratio.clamp(0.0, 1.0);
        let provider = SdkTracerProvider::builder()
            .with_span_processor(
                BatchSpanProcessor::builder(counted)
                    .with_batch_config(
                        BatchConfigBuilder::default()
                            .with_scheduled_delay(settings.batch_delay)
                            .with_max_queue_size(settings.queue_spans.max(1))
                            .build(),
                    )
                    .build(),
            )
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                ratio,
            ))))
            .with_id_generator(Ids::default())
            .with_resource(
                Resource::builder()
                    .with_service_name(settings.service_name.clone())
                    .build(),
            )
            .build();
        let tracer = provider.tracer("wasmgate");
        Ok(Tracing {
            provider,
            tracer,
            stats,
        })
    }

    pub fn stats(&self) -> &TraceStats {
        &self.stats
    }

    /// The span of a request that just came in, a child of the client's
    /// `traceparent` (with its `tracestate`) when it sent a valid one.
    pub fn begin(
        &'static self,
        traceparent: Option<&str>,
        tracestate: Option<&str>,
        name: String,
    ) -> RequestTrace {
        let carrier = Carrier {
            traceparent,
            tracestate,
        };
        let parent = TraceContextPropagator::new().extract(&carrier);
        let span = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .start_with_context(&self.tracer, &parent);
        let context = span.span_context().clone();
        RequestTrace {
            tracing: self,
            span,
            context,
            upstream_span: SpanId::from_bytes(rand_span_id()),
        }
    }

    /// Sends what is queued (at exit).
    pub fn flush(&self) {
        let _ = self.provider.force_flush();
    }
}

/// One request's trace while the request runs.
pub struct RequestTrace {
    tracing: &'static Tracing,
    span: opentelemetry_sdk::trace::Span,
    context: SpanContext,
    upstream_span: SpanId,
}

/// A child span recorded when the request ends.
pub struct ChildSpan {
    pub name: String,
    pub kind: SpanKind,
    pub start: SystemTime,
    pub duration: Duration,
    pub attributes: Vec<KeyValue>,
    pub error: Option<String>,
}

impl RequestTrace {
    /// Whether the trace is recorded (sampled).
    pub fn sampled(&self) -> bool {
        self.context.is_sampled()
    }

    /// The trace id, as 32 hex digits.
    pub fn trace_id(&self) -> String {
        self.context.trace_id().to_string()
    }

    /// The request span's id, as 16 hex digits.
    pub fn span_id(&self) -> String {
        self.context.span_id().to_string()
    }

    /// The `traceparent` the upstream request carries: this trace, with
    /// the upstream span as parent.
    pub fn upstream_traceparent(&self) -> String {
        let flags = if self.sampled() { 1 } else { 0 };
        format!(
            "00-{}-{}-{flags:02x}",
            self.context.trace_id(),
            self.upstream_span
        )
    }

    /// The `tracestate` passed on (the client's, unchanged).
    pub fn tracestate(&self) -> Option<String> {
        let state = self.context.trace_state().header();
        (!state.is_empty()).then_some(state)
    }

    /// Renames the request's span (`GET route`, once the route is known).
    pub fn name(&mut self, name: String) {
        self.span.update_name(name);
    }

    pub fn set_attribute(&mut self, attribute: KeyValue) {
        self.span.set_attribute(attribute);
    }

    /// Ends the request's span at `end`, its children first; the upstream
    /// call's child gets the id its `traceparent` named.
    pub fn end(mut self, children: Vec<ChildSpan>, upstream: Option<ChildSpan>, end: SystemTime) {
        if self.sampled() {
            let spans = 1 + children.len() + usize::from(upstream.is_some());
            let stats = &self.tracing.stats;
            stats.recorded.fetch_add(spans as u64, Ordering::Relaxed);
            let parent = Context::new().with_remote_span_context(self.context.clone());
            let tracer = &self.tracing.tracer;
            let with_ids = children
                .into_iter()
                .map(|child| (child, None))
                .chain(upstream.map(|u| (u, Some(self.upstream_span))));
            for (child, id) in with_ids {
                let builder = tracer
                    .span_builder(child.name)
                    .with_kind(child.kind)
                    .with_start_time(child.start)
                    .with_attributes(child.attributes);
                NEXT_SPAN_ID.set(id);
                let mut span = builder.start_with_context(tracer, &parent);
                NEXT_SPAN_ID.set(None);
                if let Some(error) = child.error {
                    span.set_status(Status::error(error));
                }
                span.end_with_timestamp(child.start + child.duration);
            }
        }
        self.span.end_with_timestamp(end);
    }

    /// Marks the request's span as failed (a 5xx answer, say).
    pub fn fail(&mut self, why: impl Into<Cow<'static, str>>) {
        self.span.set_status(Status::error(why));
    }
}

/// A random span id that is not zero.
fn rand_span_id() -> [u8; 8] {
    RandomIdGenerator::default().new_span_id().to_bytes()
}

thread_local! {
    /// The id the next span started on this thread gets, if set: the
    /// upstream span's, which its `traceparent` named before the span was
    /// recorded (the SDK's span builder takes no id of its own).
    static NEXT_SPAN_ID: Cell<Option<SpanId>> = const { Cell::new(None) };
}

/// Random ids, except for a span whose id was chosen up front.
#[derive(Debug, Default)]
struct Ids(RandomIdGenerator);

impl IdGenerator for Ids {
    fn new_trace_id(&self) -> TraceId {
        self.0.new_trace_id()
    }

    fn new_span_id(&self) -> SpanId {
        NEXT_SPAN_ID.take().unwrap_or_else(|| self.0.new_span_id())
    }
}

/// The two headers a request's trace context comes in.
struct Carrier<'a> {
    traceparent: Option<&'a str>,
    tracestate: Option<&'a str>,
}

impl Extractor for Carrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => self.traceparent,
            "tracestate" => self.tracestate,
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// The OTLP exporter, counting what it delivered and what it could not.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    stats: Arc<TraceStats>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let count = batch.len() as u64;
        let result = self.inner.export(batch).await;
        let counter = match result {
            Ok(()) => &self.stats.exported,
            Err(_) => &self.stats.failed,
        };
        counter.fetch_add(count, Ordering::Relaxed);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
