//! What wasmgate tells about each request, apart from its metrics: the
//! access log, one line per request ([`access_log`]). A request formats
//! its line into its thread's buffer; the writing happens on a thread of
//! its own, so a slow disk costs a request nothing, and a buffer grown
//! past its limit costs a counted line, never a wait. And
//! traces ([`trace`]): a span per request with its filters and upstream
//! call, exported over OTLP in batches, off the request path too.

pub mod access_log;
mod line;
pub mod trace;

pub use access_log::{AccessLog, Entry, FilterTime, Format, LogStats, Target};

/// Whether requests are observed at all (an access log is kept or traces
/// are): when not, the request path skips timing what nobody reads.
#[inline]
pub fn observing() -> bool {
    access_log::global().is_some() || trace::global().is_some()
}
