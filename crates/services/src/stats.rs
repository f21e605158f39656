//! What `/metrics` reports per service: calls and errors by kind, a latency
//! histogram (the same buckets as plugin calls), and the pool's gauges.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use wasmgate_base::histogram::{HistogramSnapshot, LatencyHistogram};

/// Error kinds, in the order their counters are kept.
pub const ERROR_KINDS: [&str; 6] = [
    "not_granted",
    "bad_request",
    "unavailable",
    "timeout",
    "redis",
    "query",
];

#[derive(Debug)]
pub struct ServiceStats {
    pub name: String,
    calls: AtomicU64,
    errors: [AtomicU64; ERROR_KINDS.len()],
    latency: LatencyHistogram,
    /// Connections opened since start (a pool that keeps reconnecting shows
    /// here): PostgreSQL's, and Redis's per-call ones (`pool_size: 0`);
    /// pooled Redis connections reconnect inside the client, uncounted.
    connects: AtomicU64,
}

/// Connections of a service's pool now.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct PoolStatus {
    pub max_size: usize,
    pub in_use: usize,
    pub idle: usize,
    /// Calls waiting for a connection to come free.
    pub waiting: usize,
}

impl ServiceStats {
    pub fn new(name: &str) -> ServiceStats {
        ServiceStats {
            name: name.to_string(),
            calls: AtomicU64::new(0),
            errors: Default::default(),
            latency: LatencyHistogram::default(),
            connects: AtomicU64::new(0),
        }
    }

    /// Records one finished operation (whatever its outcome).
    pub fn record(&self, took: Duration, error: Option<&crate::ServiceError>) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.latency.record(took);
        if let Some(error) = error {
            let kind = ERROR_KINDS
                .iter()
                .position(|k| *k == error.kind())
                .expect("every error kind is listed");
            self.errors[kind].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn connected(&self) {
        self.connects.fetch_add(1, Ordering::Relaxed);
    }

    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    pub fn connects(&self) -> u64 {
        self.connects.load(Ordering::Relaxed)
    }

    /// (kind, count) for every error kind.
    pub fn errors(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        ERROR_KINDS
            .iter()
            .zip(&self.errors)
            .map(|(kind, count)| (*kind, count.load(Ordering::Relaxed)))
    }

    pub fn latency(&self) -> HistogramSnapshot {
        self.latency.snapshot()
    }
}
