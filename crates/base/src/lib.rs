//! The small pieces every wasmgate crate shares and none owns, with nothing
//! of WebAssembly or HTTP in them: so a crate that needs only these (the
//! services, the configuration) does not depend on the wasmtime-carrying
//! runtime.
//!
//! - [`histogram`]: lock-free latency histograms over fixed buckets.
//! - [`backoff`]: the exponential backoff with jitter every retry loop uses.
//! - [`fs`]: files written whole or not at all.
//! - [`hex`]: lower-case hexadecimal.
//! - [`paths`]: a configuration's paths, relative to its file's directory.
//! - [`tls`]: rustls client settings trusting Mozilla's roots or a CA file.
//! - [`traceparent`]: the W3C Trace Context header.
//! - [`upstream_facts`]: an upstream's cluster name and nodes, as filters read them.

pub mod backoff;
pub mod fs;
pub mod hex;
pub mod histogram;
pub mod paths;
pub mod tls;
pub mod traceparent;
pub mod upstream_facts;

/// Milliseconds since the Unix epoch (0 if the clock is before it): the
/// timestamps of reports, samples and registrations.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
