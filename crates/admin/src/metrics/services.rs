//! The services' families (Redis, PostgreSQL): calls, errors, latency,
//! connections and the pool.

use std::fmt::Write;

use wasmgate_gateway::LiveGateway;

use super::text::{escape, family, histogram};

/// Per service: operations, errors by kind, latency, connections opened,
/// and the pool's gauges.
pub(super) fn service_metrics(live: &LiveGateway, out: &mut String) {
    let services = live.current().services().all();
    if services.is_empty() {
        return;
    }
    let labels = |s: &wasmgate_services::Service| {
        format!(
            "service=\"{}\",kind=\"{}\"",
            escape(s.name()),
            s.kind().as_str()
        )
    };
    family(
        out,
        "wasmgate_service_calls_total",
        "counter",
        "Commands and queries plugins sent to a service, whatever their outcome.",
    );
    for s in &services {
        let _ = writeln!(
            out,
            "wasmgate_service_calls_total{{{}}} {}",
            labels(s),
            s.stats().calls()
        );
    }
    family(
        out,
        "wasmgate_service_errors_total",
        "counter",
        "Failed commands and queries by kind (not_granted, bad_request, unavailable, timeout, redis, query).",
    );
    for s in &services {
        for (kind, count) in s.stats().errors() {
            let _ = writeln!(
                out,
                "wasmgate_service_errors_total{{{},error=\"{kind}\"}} {count}",
                labels(s)
            );
        }
    }
    family(
        out,
        "wasmgate_service_call_seconds",
        "histogram",
        "Latency of commands and queries, waiting for a connection included.",
    );
    for s in &services {
        histogram(
            out,
            "wasmgate_service_call_seconds",
            &labels(s),
            &s.stats().latency(),
        );
    }
    family(
        out,
        "wasmgate_service_connects_total",
        "counter",
        "Connections opened to a service (with pool_size 0, one per call).",
    );
    for s in &services {
        let _ = writeln!(
            out,
            "wasmgate_service_connects_total{{{}}} {}",
            labels(s),
            s.stats().connects()
        );
    }
    family(
        out,
        "wasmgate_service_pool_connections",
        "gauge",
        "Pooled connections: in_use, idle, and calls waiting for one (Redis connections are shared: in_use counts commands in flight).",
    );
    for s in &services {
        let status = s.pool_status();
        for (state, n) in [
            ("in_use", status.in_use),
            ("idle", status.idle),
            ("waiting", status.waiting),
        ] {
            let _ = writeln!(
                out,
                "wasmgate_service_pool_connections{{{},state=\"{state}\"}} {n}",
                labels(s)
            );
        }
    }
}
