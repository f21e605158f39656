//! Traces: each request is a span of a W3C trace (continued from the
//! client's `traceparent`, or a new one), with a child span per filter and
//! one for the upstream call, exported over OTLP (gRPC or HTTP, plain or
//! TLS) by OpenTelemetry's own SDK. The SDK batches spans on its own thread with a bounded queue,
//! so a collector that is slow or down costs a request nothing; spans it
//! could not deliver are counted ([`TraceStats`]).
//!
//! A request's trace is decided when it comes in ([`Tracing::begin`]): the
//! client's `traceparent` is parsed here, and whether the trace is recorded
//! (the client's sampled flag, or the ratio for a new trace) is known before
//! any SDK object exists, so a request that is not recorded only carries
//! its ids as bytes. A recorded request's span starts then; its children are
//! recorded when it ends, from the times the gateway measured anyway (the
//! chain's per-filter times, the upstream's). The upstream span's id is
//! chosen up front: it is the parent the upstream request's `traceparent`
//! names.

use std::borrow::Cow;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

pub use opentelemetry::trace::SpanKind;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer as _, TracerProvider as _,
};
use opentelemetry::Context;
pub use opentelemetry::KeyValue;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, IdGenerator, RandomIdGenerator, Sampler, SdkTracer,
    SdkTracerProvider, SpanData, SpanExporter,
};
use opentelemetry_sdk::Resource;
use wasmgate_base::traceparent::{self, TraceParent};

/// How spans travel to the collector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP over gRPC (a collector's port 4317).
    Grpc,
    /// OTLP over HTTP, protobuf bodies POSTed to `<endpoint>/v1/traces`
    /// (a collector's port 4318).
    Http,
}

/// Where and how a node traces.
#[derive(Clone, Debug)]
pub struct TraceSettings {
    /// The collector: `http://collector:4317`, or `https://` for TLS.
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    /// For an `https://` endpoint: the CAs to trust (a private CA, a
    /// self-signed collector); without it, Mozilla's roots.
    pub ca_file: Option<std::path::PathBuf>,
    /// The share of new traces recorded (0 to 1); a request that comes with
    /// a `traceparent` follows its sampled flag when `respect_sampled`.
    pub sample_ratio: f64,
    /// Whether a client's `traceparent` decides that its request is
    /// recorded (W3C's usual rule). Off, every request is recorded at
    /// `sample_ratio` (by its trace id, so a trace continued through
    /// several nodes gets the same decision on each), and a client cannot
    /// fill the collector by setting the flag.
    pub respect_sampled: bool,
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
    /// A new trace is recorded when its id's last 63 bits are below this.
    ratio_bound: u64,
    respect_sampled: bool,
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
        let exporter = exporter(settings)
            .map_err(|e| format!("tracing: the OTLP exporter for {}: {e}", settings.endpoint))?;
        let stats = Arc::new(TraceStats::default());
        let counted = Counted {
            inner: exporter,
            stats: stats.clone(),
        };
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
            // The decision is made before a span is started
            // (`Tracing::begin`): the SDK only sees recorded spans.
            .with_sampler(Sampler::AlwaysOn)
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
            ratio_bound: ratio_bound(settings.sample_ratio),
            respect_sampled: settings.respect_sampled,
        })
    }

    pub fn stats(&self) -> &TraceStats {
        &self.stats
    }

    /// A request that just came in: it continues the client's trace when
    /// `traceparent` is valid (and is recorded when the client's flag
    /// says so), or starts one (recorded at the configured ratio). The
    /// decision comes first and is made on plain bytes: a request that is
    /// not recorded costs a few random numbers, not an SDK span. `name`
    /// is asked for only when the span is recorded.
    pub fn begin(
        &'static self,
        traceparent: Option<&[u8]>,
        tracestate: Option<&str>,
        name: impl FnOnce() -> String,
    ) -> RequestTrace {
        let parent = traceparent.and_then(TraceParent::parse);
        let span_id = new_span_id();
        let (trace_id, sampled) = match &parent {
            Some(parent) if self.respect_sampled => (parent.trace_id, parent.sampled),
            Some(parent) => (
                parent.trace_id,
                ratio_samples(self.ratio_bound, &parent.trace_id),
            ),
            None => {
                let trace_id = random_trace_id();
                (trace_id, ratio_samples(self.ratio_bound, &trace_id))
            }
        };
        let span = sampled.then(|| {
            let context = match &parent {
                Some(parent) => Context::new().with_remote_span_context(SpanContext::new(
                    TraceId::from_bytes(parent.trace_id),
                    SpanId::from_bytes(parent.span_id),
                    TraceFlags::SAMPLED,
                    true,
                    tracestate
                        .and_then(|state| state.parse::<TraceState>().ok())
                        .unwrap_or_default(),
                )),
                None => Context::new(),
            };
            NEXT_IDS.set(Some((trace_id, span_id)));
            let span = self
                .tracer
                .span_builder(name())
                .with_kind(SpanKind::Server)
                .start_with_context(&self.tracer, &context);
            NEXT_IDS.set(None);
            span
        });
        RequestTrace {
            tracing: self,
            trace_id,
            span_id,
            upstream_span: new_span_id(),
            continued: parent.is_some(),
            overruled_parent: parent
                .filter(|parent| parent.sampled && span.is_none())
                .map(|parent| parent.span_id),
            span,
        }
    }

    /// Sends what is queued (at exit).
    pub fn flush(&self) {
        let _ = self.provider.force_flush();
    }
}

/// OpenTelemetry's OTLP exporter for `settings`: over gRPC (tonic) or HTTP
/// (hyper, the client already in the tree), each with rustls when the
/// endpoint is `https://`.
fn exporter(settings: &TraceSettings) -> Result<opentelemetry_otlp::SpanExporter, String> {
    const TIMEOUT: Duration = Duration::from_secs(5);
    let tls = settings.endpoint.starts_with("https://");
    match settings.protocol {
        OtlpProtocol::Grpc => {
            let mut builder = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(settings.endpoint.clone())
                .with_timeout(TIMEOUT);
            if tls {
                use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig};
                let config = match &settings.ca_file {
                    Some(path) => {
                        // Checked here so a bad file is an error now, not
                        // a failed export later.
                        wasmgate_base::tls::read_ca_file(path).map_err(|e| format!("{e:#}"))?;
                        let pem = std::fs::read(path).map_err(|e| e.to_string())?;
                        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem))
                    }
                    None => ClientTlsConfig::new().with_webpki_roots(),
                };
                builder = builder.with_tls_config(config);
            }
            builder.build().map_err(|e| e.to_string())
        }
        OtlpProtocol::Http => {
            let tls_config = wasmgate_base::tls::client_config(settings.ca_file.as_deref())
                .map_err(|e| format!("{e:#}"))?;
            let connector = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config((*tls_config).clone())
                .https_or_http()
                .enable_http1()
                .build();
            let client = OnRuntime {
                client: Arc::new(opentelemetry_http::hyper::HyperClient::new(
                    connector, TIMEOUT, None,
                )),
                runtime: tokio::runtime::Handle::try_current()
                    .map_err(|_| "tracing starts within the tokio runtime".to_string())?,
            };
            let url = format!("{}/v1/traces", settings.endpoint.trim_end_matches('/'));
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_endpoint(url)
                .with_http_client(client)
                .with_timeout(TIMEOUT)
                .build()
                .map_err(|e| e.to_string())
        }
    }
}

/// An OTLP/HTTP client whose requests run on the tokio runtime tracing
/// started in: the SDK's batch processor exports from a thread of its own,
/// which has no reactor for hyper's connections and timers (the hyper
/// client panicked there).
#[derive(Debug)]
struct OnRuntime<C> {
    client: Arc<C>,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl<C: opentelemetry_http::HttpClient + 'static> opentelemetry_http::HttpClient for OnRuntime<C> {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<
        opentelemetry_http::Response<opentelemetry_http::Bytes>,
        opentelemetry_http::HttpError,
    > {
        let client = self.client.clone();
        let sent = self
            .runtime
            .spawn(async move { client.send_bytes(request).await });
        sent.await?
    }
}

/// One request's trace while the request runs: its ids as bytes, and the
/// SDK's span only when it is recorded.
pub struct RequestTrace {
    tracing: &'static Tracing,
    trace_id: [u8; 16],
    span_id: [u8; 8],
    upstream_span: [u8; 8],
    /// Whether the client sent a valid `traceparent`.
    continued: bool,
    /// The client's parent span, when its sampled flag was overruled
    /// (`respect_sampled: false`): the upstream hears "not sampled".
    overruled_parent: Option<[u8; 8]>,
    span: Option<opentelemetry_sdk::trace::Span>,
}

/// A child span recorded when the request ends.
pub struct ChildSpan {
    /// Its id, when another child names it as parent ([`new_span_id`]);
    /// random otherwise.
    pub id: Option<[u8; 8]>,
    /// The child it hangs under; the request's span when `None`.
    pub parent: Option<[u8; 8]>,
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
        self.span.is_some()
    }

    pub fn trace_id(&self) -> [u8; 16] {
        self.trace_id
    }

    /// The request span's id (the span is recorded only when sampled).
    pub fn span_id(&self) -> [u8; 8] {
        self.span_id
    }

    /// The `traceparent` the upstream request carries, when it is not the
    /// client's own: a recorded trace names the upstream span as parent;
    /// a trace this node started (and does not record) still reaches the
    /// upstream, unsampled. An unrecorded continued trace passes the
    /// client's header on unchanged (`None`), unless the client's sampled
    /// flag was overruled: then the upstream hears the same parent, unsampled.
    pub fn upstream_traceparent(&self) -> Option<[u8; traceparent::LEN]> {
        if !self.sampled() && self.continued {
            return self
                .overruled_parent
                .map(|parent| traceparent::format(&self.trace_id, &parent, false));
        }
        Some(traceparent::format(
            &self.trace_id,
            &self.upstream_span,
            self.sampled(),
        ))
    }

    /// Renames the request's span (`GET route`, once the route is known).
    pub fn name(&mut self, name: String) {
        if let Some(span) = &mut self.span {
            span.update_name(name);
        }
    }

    pub fn set_attribute(&mut self, attribute: KeyValue) {
        if let Some(span) = &mut self.span {
            span.set_attribute(attribute);
        }
    }

    /// Ends the request's span at `end`, its children first; the upstream
    /// call's child gets the id its `traceparent` named. An unrecorded
    /// trace records nothing.
    pub fn end(self, children: Vec<ChildSpan>, upstream: Option<ChildSpan>, end: SystemTime) {
        let Some(mut span) = self.span else {
            return;
        };
        let spans = 1 + children.len() + usize::from(upstream.is_some());
        let stats = &self.tracing.stats;
        stats.recorded.fetch_add(spans as u64, Ordering::Relaxed);
        let request = Context::new().with_remote_span_context(span.span_context().clone());
        let tracer = &self.tracing.tracer;
        let upstream = upstream.map(|u| ChildSpan {
            id: Some(self.upstream_span),
            ..u
        });
        for child in children.into_iter().chain(upstream) {
            let builder = tracer
                .span_builder(child.name)
                .with_kind(child.kind)
                .with_start_time(child.start)
                .with_attributes(child.attributes);
            let parent = child.parent.map(|id| {
                Context::new().with_remote_span_context(SpanContext::new(
                    TraceId::from_bytes(self.trace_id),
                    SpanId::from_bytes(id),
                    TraceFlags::SAMPLED,
                    false,
                    TraceState::default(),
                ))
            });
            NEXT_IDS.set(child.id.map(|id| (self.trace_id, id)));
            let mut child_span =
                builder.start_with_context(tracer, parent.as_ref().unwrap_or(&request));
            NEXT_IDS.set(None);
            if let Some(error) = child.error {
                child_span.set_status(Status::error(error));
            }
            child_span.end_with_timestamp(child.start + child.duration);
        }
        span.end_with_timestamp(end);
    }

    /// Marks the request's span as failed (a 5xx answer, say).
    pub fn fail(&mut self, why: impl Into<Cow<'static, str>>) {
        if let Some(span) = &mut self.span {
            span.set_status(Status::error(why));
        }
    }
}

/// The bound of [`ratio_samples`] for a ratio from 0 to 1.
fn ratio_bound(ratio: f64) -> u64 {
    (ratio.clamp(0.0, 1.0) * (1u64 << 63) as f64) as u64
}

/// The ratio's decision on a new trace: the trace id's last eight bytes
/// (their 63 high bits) against the ratio's share of their range, the rule
/// of OpenTelemetry's `TraceIdRatioBased`, so services that sample the same
/// way agree on a trace.
fn ratio_samples(bound: u64, trace_id: &[u8; 16]) -> bool {
    let low = u64::from_be_bytes(trace_id[8..].try_into().expect("eight bytes"));
    (low >> 1) < bound
}

thread_local! {
    /// The ids the next span started on this thread gets, if set: the
    /// request's (chosen before the SDK saw it) or the upstream span's,
    /// which its `traceparent` named before the span was recorded (the
    /// SDK's span builder takes no ids of its own).
    static NEXT_IDS: Cell<Option<([u8; 16], [u8; 8])>> = const { Cell::new(None) };
    /// This thread's id generator: splitmix64, seeded from the SDK's random
    /// generator once. Ids must be unique, not secret; a request that is
    /// not recorded pays a few multiplications for its ids.
    static RANDOM: Cell<u64> = Cell::new(
        u64::from_ne_bytes(RandomIdGenerator::default().new_span_id().to_bytes()),
    );
}

fn next_random() -> u64 {
    RANDOM.with(|state| {
        let next = state.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        state.set(next);
        let mut z = next;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

/// A random span id that is not zero (also for a child another child
/// names as its parent).
pub fn new_span_id() -> [u8; 8] {
    loop {
        let id = next_random();
        if id != 0 {
            return id.to_be_bytes();
        }
    }
}

/// A random trace id that is not zero.
fn random_trace_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&next_random().to_be_bytes());
    id[8..].copy_from_slice(&new_span_id());
    id
}

/// The ids chosen up front for the span being started, random otherwise
/// (the SDK asks for the span id first, then, for a root, the trace id; the
/// caller clears the ids after the span started).
#[derive(Debug, Default)]
struct Ids(RandomIdGenerator);

impl IdGenerator for Ids {
    fn new_trace_id(&self) -> TraceId {
        match NEXT_IDS.get() {
            Some((trace_id, _)) => TraceId::from_bytes(trace_id),
            None => self.0.new_trace_id(),
        }
    }

    fn new_span_id(&self) -> SpanId {
        match NEXT_IDS.get() {
            Some((_, span_id)) => SpanId::from_bytes(span_id),
            None => self.0.new_span_id(),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_records_its_share_of_new_traces() {
        let ids: Vec<[u8; 16]> = (0..100_000).map(|_| random_trace_id()).collect();
        let recorded = |ratio| {
            let bound = ratio_bound(ratio);
            ids.iter().filter(|id| ratio_samples(bound, id)).count()
        };
        assert_eq!(recorded(0.0), 0);
        assert_eq!(recorded(1.0), ids.len());
        let one_percent = recorded(0.01);
        assert!((800..1200).contains(&one_percent), "{one_percent}");
    }

    #[test]
    fn random_ids_are_not_zero_and_differ() {
        let ids: std::collections::HashSet<[u8; 16]> =
            (0..10_000).map(|_| random_trace_id()).collect();
        assert_eq!(ids.len(), 10_000);
        assert!(!ids.contains(&[0; 16]));
    }
}
