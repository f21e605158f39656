//! One HTTP request/response as filters see it: header maps with HTTP/2-style
//! pseudo-headers (`:method`, `:path`, `:authority`, `:scheme`, `:status`),
//! bodies, trailers, properties, and the local response a filter may send.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use crate::headers::Headers;

#[derive(Clone, Debug, Default)]
pub struct HttpExchange {
    pub request_headers: Headers,
    pub request_body: Vec<u8>,
    pub request_trailers: Headers,
    pub response_headers: Headers,
    pub response_body: Vec<u8>,
    pub response_trailers: Headers,
    /// What the embedder knows about the request and its connection.
    pub info: RequestInfo,
    /// Values for `proxy_get_property` beyond the derived ones, keyed by the
    /// NUL-joined path (`my\0key`); filters add their own with
    /// `proxy_set_property`, and they win over derived values.
    pub properties: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Set by `proxy_send_local_response`: answer with this, skip the upstream.
    pub local_response: Option<LocalResponse>,
    /// How the response came about, as Envoy's `response.code_details` says
    /// it: `via_upstream` for an upstream's answer, a local reply's details
    /// (Higress's framework reads it to tell the two apart).
    pub response_details: Option<std::borrow::Cow<'static, str>>,
}

/// Facts about a request that are not in its headers. Properties
/// (`request.id`, `source.address`, `connection.id`, ...) are derived from
/// them only when a filter asks: most filters never do, and formatting them
/// for every request showed in the gateway's profiles.
#[derive(Clone, Debug, Default)]
pub struct RequestInfo {
    /// Unique per process; `request.id` is its 16 hex digits.
    pub id: u64,
    /// `HTTP/1.0`, `HTTP/1.1` or `HTTP/2`.
    pub protocol: &'static str,
    pub start_time: Option<SystemTime>,
    /// The client's address (`source.*`).
    pub source: Option<SocketAddr>,
    /// The address the client connected to (`destination.*`).
    pub destination: Option<SocketAddr>,
    /// Unique per accepted connection (`connection.id`).
    pub connection_id: u64,
    /// The upstream the route sends to (`cluster_name`, `upstream.*`).
    pub cluster: Option<Arc<UpstreamFacts>>,
    /// Set once the request has gone to the route's upstream (its answer,
    /// or its failure, is in): from then on `upstream.address` names the
    /// node, when it is known.
    pub upstream_sent: bool,
    /// The node that answered, when the upstream reported it (it does
    /// while the access log or tracing is on); for an upstream of one node
    /// that node is known without it.
    pub upstream_node: Option<Arc<str>>,
    /// Request body bytes received so far (`request.size` without a
    /// `Content-Length`, `request.total_size`), and response body bytes
    /// sent on so far (`response.size`), as the filters pass them.
    pub request_body_bytes: u64,
    pub response_body_bytes: u64,
    /// Set when the stream is over and its filters' `proxy_on_log` runs:
    /// `request.duration` exists from then on, as in Envoy.
    pub complete: bool,
    /// The connection's TLS, if it is a TLS connection (`connection.*`).
    pub tls: Option<Arc<TlsInfo>>,
    /// The request's place in a trace, when the gateway traces requests.
    pub trace: Option<Box<TraceIds>>,
}

/// A traced request's ids (`request.trace_id`, `request.span_id`, read
/// as hex, as W3C `traceparent` writes them).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TraceIds {
    pub trace_id: [u8; 16],
    /// The request's span in the gateway.
    pub span_id: [u8; 8],
    /// Whether the trace is recorded (its callouts say so to the callee).
    pub sampled: bool,
}

/// What is known of a TLS connection (the transport's facts, read by the
/// `connection.*` properties).
pub use wasmgate_base::tls::TlsInfo;

/// What is known of the route's upstream (`cluster_name`, `upstream.*`).
pub use wasmgate_base::upstream_facts::UpstreamFacts;

#[derive(Clone, Debug, PartialEq)]
pub struct LocalResponse {
    pub status: u32,
    pub details: String,
    pub headers: Headers,
    pub body: Vec<u8>,
    /// The gRPC status a gRPC client gets instead (`grpc-status`), when the
    /// filter gave one.
    pub grpc_status: Option<u32>,
}

impl HttpExchange {
    pub fn set_property(&mut self, path: &[&str], value: impl Into<Vec<u8>>) {
        self.properties
            .insert(path.join("\0").into_bytes(), value.into());
    }
}
