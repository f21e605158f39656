//! Per-plugin call statistics: what `/metrics` and the admin API report for
//! one plugin. Recording a call is a few relaxed atomic adds, so it stays on
//! even in benchmarks; the last crash report is kept whole (with its frames)
//! for the plugin status page.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::crash::{CrashReport, FailureKind};
pub use wasmgate_base::histogram::{HistogramSnapshot, LatencyHistogram, LATENCY_BUCKETS};

#[derive(Debug, Default)]
pub struct PluginStats {
    /// Latency of every guest call; its count is the number of calls and its
    /// sum their wall-clock time.
    latency: LatencyHistogram,
    /// CPU time of every guest call, in nanoseconds.
    cpu_nanos: AtomicU64,
    failures: [AtomicU64; 4],
    /// Bytes of linear memory held by this plugin's live instances.
    memory_bytes: AtomicU64,
    last_crash: Mutex<Option<LastCrash>>,
    /// Calls a host-side limit refused, by the limit's name (each ABI names
    /// its own; Proxy-Wasm's are in its `limits.rs`). Rare, so a lock.
    refusals: Mutex<Vec<(&'static str, u64)>>,
}

/// The most recent failed call, for the status page.
#[derive(Clone, Debug, Serialize)]
pub struct LastCrash {
    /// When it happened, in ms since the Unix epoch.
    pub at_ms: u64,
    pub report: CrashReport,
}

/// A copy of the counters, for one scrape.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StatsSnapshot {
    /// Guest calls and their latency (wall clock: a call waiting on host
    /// I/O or for a CPU counts).
    pub calls: HistogramSnapshot,
    /// CPU time the calls used (guest code and the host functions it called;
    /// see `slow_lane::run`).
    pub cpu_seconds: f64,
    pub traps: u64,
    pub timeouts: u64,
    pub out_of_memory: u64,
    pub host_errors: u64,
    pub memory_bytes: u64,
}

impl PluginStats {
    /// Records one finished guest call: how long it took and the CPU time
    /// it used.
    pub fn record_call(&self, took: Duration, cpu: Duration) {
        self.latency.record(took);
        self.cpu_nanos
            .fetch_add(cpu.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Records a failed call (after [`PluginStats::record_call`]).
    pub fn record_crash(&self, report: &CrashReport) {
        let index = match report.kind {
            FailureKind::Trap => 0,
            FailureKind::Timeout => 1,
            FailureKind::OutOfMemory => 2,
            FailureKind::HostError => 3,
        };
        self.failures[index].fetch_add(1, Ordering::Relaxed);
        let at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        *self.last_crash.lock().unwrap() = Some(LastCrash {
            at_ms,
            report: report.clone(),
        });
    }

    pub fn last_crash(&self) -> Option<LastCrash> {
        self.last_crash.lock().unwrap().clone()
    }

    /// Lists `limits` among the refusal counters at 0, so that a scrape
    /// shows each before its first refusal.
    pub fn track_refusals(&self, limits: &[&'static str]) {
        let mut refusals = self.refusals.lock().unwrap();
        for limit in limits {
            if !refusals.iter().any(|(name, _)| name == limit) {
                refusals.push((limit, 0));
            }
        }
    }

    /// Counts a call the host refused because of `limit`.
    pub fn record_refusal(&self, limit: &'static str) {
        let mut refusals = self.refusals.lock().unwrap();
        match refusals.iter_mut().find(|(name, _)| *name == limit) {
            Some((_, n)) => *n += 1,
            None => refusals.push((limit, 1)),
        }
    }

    /// Refused calls by limit, in the order the limits were first seen.
    pub fn refusals(&self) -> Vec<(&'static str, u64)> {
        self.refusals.lock().unwrap().clone()
    }

    /// Linear memory of live instances: grown by the memory limiter, given
    /// back when an instance's store is dropped.
    pub(crate) fn memory_grew(&self, bytes: u64) {
        self.memory_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn memory_released(&self, bytes: u64) {
        self.memory_bytes.fetch_sub(bytes, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            calls: self.latency.snapshot(),
            cpu_seconds: load(&self.cpu_nanos) as f64 / 1e9,
            traps: load(&self.failures[0]),
            timeouts: load(&self.failures[1]),
            out_of_memory: load(&self.failures[2]),
            host_errors: load(&self.failures[3]),
            memory_bytes: load(&self.memory_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_land_in_their_latency_bucket_and_crashes_by_kind() {
        let stats = PluginStats::default();
        stats.record_call(Duration::from_micros(7), Duration::from_micros(7));
        stats.record_call(Duration::from_micros(30), Duration::from_micros(3));
        stats.record_call(Duration::from_secs(10), Duration::from_secs(1));
        stats.record_crash(&CrashReport {
            plugin: "p".into(),
            function: "f".into(),
            kind: FailureKind::Timeout,
            message: "late".into(),
            frames: vec![],
            request_id: None,
        });
        let s = stats.snapshot();
        assert_eq!(s.calls.count, 3);
        assert_eq!(s.calls.buckets[0], 1, "7 us <= 10 us");
        assert_eq!(s.calls.buckets[2], 1, "30 us <= 50 us");
        assert_eq!(s.calls.buckets[LATENCY_BUCKETS.len()], 1, "10 s: +Inf");
        assert!((s.calls.sum_seconds - 10.000037).abs() < 1e-9);
        assert!((s.cpu_seconds - 1.00001).abs() < 1e-9);
        assert_eq!((s.timeouts, s.traps), (1, 0));
        assert_eq!(stats.last_crash().unwrap().report.message, "late");
    }

    #[test]
    fn refusals_are_counted_by_limit_and_tracked_ones_start_at_zero() {
        let stats = PluginStats::default();
        stats.track_refusals(&["a", "b"]);
        stats.record_refusal("b");
        stats.record_refusal("b");
        stats.record_refusal("c");
        stats.track_refusals(&["a", "c"]);
        assert_eq!(stats.refusals(), vec![("a", 0), ("b", 2), ("c", 1)]);
    }
}
