//! The access log's vocabulary: what a request tells it ([`Entry`],
//! [`FilterTime`]), how a line looks ([`Format`]), where lines go
//! ([`Target`]), and the log's counters ([`LogStats`]).

use std::borrow::Cow;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a line looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per line (the fields of [`Entry`]).
    Json,
    /// `client [time] "METHOD host/path PROTO" status bytes name=value...`
    Text,
}

/// Where lines go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Stdout,
    File(PathBuf),
}

/// One request, as the log shows it (docs/observability.md lists the
/// fields of its line, whose names are fixed: log pipelines key on them).
/// The request's side fills it with what it has at hand, cheaply (shared
/// names, times as durations, ids as bytes); the writer turns it into text.
#[derive(Clone, Debug, Default)]
pub struct Entry {
    /// When the request came in; the writer puts it on the wall clock
    /// (one clock reading per batch rather than one per request).
    pub began: Option<Instant>,
    pub request_id: u64,
    pub client: Option<SocketAddr>,
    pub method: Cow<'static, str>,
    pub host: String,
    /// Path and query, as the client sent them.
    pub path: String,
    /// `HTTP/1.1`, `HTTP/2`, `HTTP/1.0`.
    pub protocol: &'static str,
    pub status: u16,
    /// Request body bytes read from the client.
    pub bytes_in: u64,
    /// Response body bytes sent to the client.
    pub bytes_out: u64,
    /// From the request's arrival to its response's last byte.
    pub duration: Duration,
    /// The route that matched (none: no route did).
    pub route: Option<Arc<str>>,
    /// The upstream node that answered (`host:port`), if one did.
    pub upstream: Option<Arc<str>>,
    /// From sending the request to the node until its response head.
    pub upstream_time: Option<Duration>,
    /// The filters that ran, in chain order, with the time their callbacks took.
    pub filters: Vec<FilterTime>,
    /// The filter that answered the request itself, if one did.
    pub local_response: Option<String>,
    /// The kind of the gateway's own error answer (`no_route`,
    /// `upstream_unavailable`, ...), if the answer was one.
    pub error: Option<String>,
    /// The W3C trace id the request belongs to, when tracing knows it.
    pub trace_id: Option<[u8; 16]>,
}

/// A filter's share of a request.
#[derive(Clone, Debug)]
pub struct FilterTime {
    pub name: Arc<str>,
    pub time: Duration,
}

/// Milliseconds with microseconds, for trace attributes.
pub fn millis(duration: Duration) -> f64 {
    (duration.as_micros() as f64) / 1000.0
}

/// Counters of the log, for `/metrics`.
#[derive(Debug, Default)]
pub struct LogStats {
    /// Lines written.
    pub lines: AtomicU64,
    /// Lines dropped because the writer fell behind (a thread's buffer full).
    pub dropped: AtomicU64,
    /// Lines lost to a failed write (or a file that could not be opened).
    pub write_errors: AtomicU64,
    /// Times the file was opened again (SIGUSR1).
    pub reopened: AtomicU64,
    /// Lines the writer has written (or lost to a write error) and
    /// flushed: all the threads' recorded ones when nothing waits
    /// ([`AccessLog::drain`]).
    pub(super) handled: AtomicU64,
}
