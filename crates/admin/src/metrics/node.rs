//! The node's own families: the configuration generation it serves and its
//! reloads, guest calls moved to the slow lane, and the engine's instance
//! allocator.

use std::fmt::Write;

use wasmgate_gateway::LiveGateway;

use super::text::family;

pub(super) fn reload_metrics(live: &LiveGateway, out: &mut String) {
    let reload = live.status();
    family(
        out,
        "wasmgate_config_generation",
        "gauge",
        "Configuration generation serving (1 at start-up).",
    );
    let _ = writeln!(out, "wasmgate_config_generation {}", reload.generation);
    family(
        out,
        "wasmgate_config_reloads_total",
        "counter",
        "Successful reloads.",
    );
    let _ = writeln!(out, "wasmgate_config_reloads_total {}", reload.reloads);
    family(
        out,
        "wasmgate_config_reload_failures_total",
        "counter",
        "Rejected reloads.",
    );
    let _ = writeln!(
        out,
        "wasmgate_config_reload_failures_total {}",
        reload.failed_reloads
    );
    family(
        out,
        "wasmgate_config_filters",
        "gauge",
        "The serving configuration's filters (one per route and plugin), by whether the reload that made it kept them from the configuration before (`kept`: not started again) or started them.",
    );
    let started = reload.filters.saturating_sub(reload.filters_kept);
    let _ = writeln!(
        out,
        "wasmgate_config_filters{{origin=\"kept\"}} {}",
        reload.filters_kept
    );
    let _ = writeln!(
        out,
        "wasmgate_config_filters{{origin=\"started\"}} {started}"
    );
    if let Some(store) = live.store() {
        family(
            out,
            "wasmgate_config_revision",
            "gauge",
            "The configuration store's (etcd's) revision this node serves: a node whose value lags the others' fell behind.",
        );
        let _ = writeln!(out, "wasmgate_config_revision {}", store.revision());
    }
}

pub(super) fn long_call_metrics(out: &mut String) {
    family(
        out,
        "wasmgate_long_calls_moved_total",
        "counter",
        "Guest calls that ran past 1 ms and moved off their worker thread to the slow lane.",
    );
    let _ = writeln!(
        out,
        "wasmgate_long_calls_moved_total {}",
        wasmgate_runtime::slow_lane::moved_calls()
    );
}

/// The engine's instance allocator: what is alive (instances and memories
/// of every plugin and version) and what freed slots keep resident for
/// reuse, which is how memory after reloads is accounted.
pub(super) fn instance_pool_metrics(live: &LiveGateway, out: &mut String) {
    let Some(pool) = live.runtime().engine().pooling_allocator_metrics() else {
        return;
    };
    let gauges = [
        (
            "wasmgate_pool_instances",
            "Live wasm module instances.",
            pool.core_instances(),
        ),
        (
            "wasmgate_pool_memories",
            "Live linear memories.",
            pool.memories() as u64,
        ),
        (
            "wasmgate_pool_stacks",
            "Async stacks in use.",
            pool.stacks() as u64,
        ),
        (
            "wasmgate_pool_unused_warm_memories",
            "Freed memory slots kept warm for reuse.",
            pool.unused_warm_memories() as u64,
        ),
        (
            "wasmgate_pool_unused_memory_bytes_resident",
            "Bytes of freed memory slots kept resident for reuse.",
            pool.unused_memory_bytes_resident() as u64,
        ),
    ];
    for (name, help, value) in gauges {
        family(out, name, "gauge", help);
        let _ = writeln!(out, "{name} {value}");
    }
}
