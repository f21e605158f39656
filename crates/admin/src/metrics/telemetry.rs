//! What became of the node's own telemetry: access-log lines and trace
//! spans.

use std::fmt::Write;

use super::text::family;

/// The access log's lines: written, and lost (a buffer full because the
/// disk is slower than the traffic, or a write that failed), by reason.
pub(super) fn access_log_metrics(out: &mut String) {
    use std::sync::atomic::Ordering::Relaxed;
    let Some(log) = wasmgate_observe::access_log::global() else {
        return;
    };
    let stats = log.stats();
    family(
        out,
        "wasmgate_access_log_lines_total",
        "counter",
        "Access-log lines written.",
    );
    let _ = writeln!(
        out,
        "wasmgate_access_log_lines_total {}",
        stats.lines.load(Relaxed)
    );
    family(
        out,
        "wasmgate_access_log_lost_total",
        "counter",
        "Access-log lines lost, by reason (queue_full: the writer fell behind and a thread's buffer was full; write_error).",
    );
    for (reason, n) in [
        ("queue_full", stats.dropped.load(Relaxed)),
        ("write_error", stats.write_errors.load(Relaxed)),
    ] {
        let _ = writeln!(
            out,
            "wasmgate_access_log_lost_total{{reason=\"{reason}\"}} {n}"
        );
    }
    family(
        out,
        "wasmgate_access_log_reopens_total",
        "counter",
        "Times the access-log file was opened again (SIGUSR1).",
    );
    let _ = writeln!(
        out,
        "wasmgate_access_log_reopens_total {}",
        stats.reopened.load(Relaxed)
    );
}

pub(super) fn trace_metrics(out: &mut String) {
    use std::sync::atomic::Ordering::Relaxed;
    let Some(tracing) = wasmgate_observe::trace::global() else {
        return;
    };
    let stats = tracing.stats();
    family(
        out,
        "wasmgate_trace_spans_total",
        "counter",
        "Spans of sampled requests, by what became of them (recorded: ended and queued for export; exported: the collector took them; failed: the export failed, the collector down, say). Recorded minus the others is what is queued, or was dropped from a full queue.",
    );
    for (outcome, n) in [
        ("recorded", stats.recorded.load(Relaxed)),
        ("exported", stats.exported.load(Relaxed)),
        ("failed", stats.failed.load(Relaxed)),
    ] {
        let _ = writeln!(
            out,
            "wasmgate_trace_spans_total{{outcome=\"{outcome}\"}} {n}"
        );
    }
}
