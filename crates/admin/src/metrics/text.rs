//! The pieces of the Prometheus text format every family is written with:
//! a family's `# HELP` and `# TYPE` lines, a histogram's series, and label
//! values escaped.

use std::fmt::Write;

use wasmgate_runtime::stats::LATENCY_BUCKETS;
use wasmgate_runtime::HistogramSnapshot;

pub(super) fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// One labelled series of a histogram over `LATENCY_BUCKETS`.
pub(super) fn histogram(out: &mut String, name: &str, labels: &str, h: &HistogramSnapshot) {
    let mut cumulative = 0;
    for (i, bound) in LATENCY_BUCKETS.iter().enumerate() {
        cumulative += h.buckets[i];
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum_seconds);
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
}

pub(super) fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
