//! Latency histograms: lock-free, fixed buckets, shared by every part that
//! times something (plugin calls, routes, upstream nodes, services).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

/// Upper bounds (seconds) of the call-latency histogram's buckets: guest
/// calls range from a few microseconds (a header filter) to seconds (a
/// function route doing I/O).
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.005, 0.025, 0.1, 0.5, 2.5,
];

/// A latency histogram over [`LATENCY_BUCKETS`], lock-free.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    /// Observations per bucket (not cumulative; the exporter sums them).
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

/// A copy of a histogram, for one scrape.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HistogramSnapshot {
    pub buckets: Vec<u64>,
    pub count: u64,
    pub sum_seconds: f64,
}

impl LatencyHistogram {
    pub fn record(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        let bucket = LATENCY_BUCKETS
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos
            .fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let buckets: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        HistogramSnapshot {
            count: buckets.iter().sum(),
            buckets,
            sum_seconds: self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}
