//! The plugins' families: each instance set's module, calls, failures,
//! memory and pool, and what Proxy-Wasm VM ids hold in shared data and
//! queues.

use std::fmt::Write;

use wasmgate_gateway::Gateway;
use wasmgate_proxy_wasm::shared::{shared, VmUsage};
use wasmgate_runtime::PoolStats;

use super::text::{escape, family, histogram};

/// Per plugin instance set: a filter on a route (`route` label) or an
/// Extism function plugin (`route=""`, shared by the routes calling it).
pub(super) fn plugin_metrics(gateway: &Gateway, out: &mut String) {
    let name = "wasmgate_plugin_module_info";
    family(out, name, "gauge", "1 per plugin: the SHA-256 of the module serving, and the image (pinned to its digest) it was pulled from, if from an OCI registry.");
    for (plugin, kind) in &gateway.plugin_kinds {
        let _ = writeln!(
            out,
            "{name}{{plugin=\"{}\",kind=\"{}\",sha256=\"{}\",image=\"{}\"}} 1",
            escape(plugin),
            escape(kind),
            gateway.plugin_hash(plugin).unwrap_or(""),
            escape(gateway.plugin_image(plugin).unwrap_or(""))
        );
    }
    let name = "wasmgate_plugin_compiling_since_seconds";
    family(out, name, "gauge", "Components still compiling in the background, by plugin: when the build left them (seconds since the epoch); their routes answer 503 until the node reloads with them.");
    for (plugin, since_ms) in &gateway.compiling {
        let _ = writeln!(
            out,
            "{name}{{plugin=\"{}\"}} {}",
            escape(plugin),
            *since_ms as f64 / 1000.0
        );
    }
    let name = "wasmgate_filter_starting_since_seconds";
    family(out, name, "gauge", "Filters still starting in the background, by plugin and route: since when (seconds since the epoch); the route is served by the filter's version before, or answers 503, until the node reloads with it.");
    for s in &gateway.filters_starting {
        let _ = writeln!(
            out,
            "{name}{{plugin=\"{}\",route=\"{}\"}} {}",
            escape(&s.plugin),
            escape(&s.route),
            s.since_ms as f64 / 1000.0
        );
    }
    let sets = gateway.plugin_sets();
    let labels: Vec<String> = sets
        .iter()
        .map(|s| {
            format!(
                "plugin=\"{}\",route=\"{}\"",
                escape(s.name),
                escape(s.route.unwrap_or(""))
            )
        })
        .collect();
    let snapshots: Vec<_> = sets.iter().map(|s| s.stats.snapshot()).collect();
    let name = "wasmgate_plugin_call_seconds";
    family(
        out,
        name,
        "histogram",
        "Guest calls and their duration (wall clock, waits included).",
    );
    for (l, s) in labels.iter().zip(&snapshots) {
        histogram(out, name, l, &s.calls);
    }
    let name = "wasmgate_plugin_cpu_seconds_total";
    family(
        out,
        name,
        "counter",
        "CPU time of guest calls (wasm and the host functions it called).",
    );
    for (l, s) in labels.iter().zip(&snapshots) {
        let _ = writeln!(out, "{name}{{{l}}} {}", s.cpu_seconds);
    }
    let name = "wasmgate_plugin_failures_total";
    family(
        out,
        name,
        "counter",
        "Failed guest calls by kind (trap, timeout, out_of_memory, host_error).",
    );
    for (l, s) in labels.iter().zip(&snapshots) {
        for (kind, n) in [
            ("trap", s.traps),
            ("timeout", s.timeouts),
            ("out_of_memory", s.out_of_memory),
            ("host_error", s.host_errors),
        ] {
            let _ = writeln!(out, "{name}{{{l},kind=\"{kind}\"}} {n}");
        }
    }
    let name = "wasmgate_plugin_host_limit_refusals_total";
    family(
        out,
        name,
        "counter",
        "Calls of a Proxy-Wasm filter a host limit refused, by limit (limits.proxy_wasm).",
    );
    for (l, set) in labels.iter().zip(&sets) {
        for (limit, n) in set.stats.refusals() {
            let _ = writeln!(out, "{name}{{{l},limit=\"{limit}\"}} {n}");
        }
    }
    let name = "wasmgate_plugin_memory_bytes";
    family(
        out,
        name,
        "gauge",
        "Linear memory held by the plugin's live instances.",
    );
    for (l, s) in labels.iter().zip(&snapshots) {
        let _ = writeln!(out, "{name}{{{l}}} {}", s.memory_bytes);
    }
    let name = "wasmgate_plugin_instances";
    family(
        out,
        name,
        "gauge",
        "Live instances, idle in the pool or serving a call.",
    );
    for (l, set) in labels.iter().zip(&sets) {
        let _ = writeln!(out, "{name}{{{l},state=\"idle\"}} {}", set.pool.idle);
        let _ = writeln!(out, "{name}{{{l},state=\"in_use\"}} {}", set.pool.in_use);
    }
    let pool_counters: [PoolFamily; 7] = [
        ("wasmgate_plugin_instances_created_total", "counter", "Instances created.", |p| p.created),
        ("wasmgate_plugin_restarts_total", "counter", "Instances discarded (after a failed call, a call cut off, a cleared pool or a rebuild the plugin asked for) and so replaced.", |p| p.discarded),
        ("wasmgate_plugin_instantiation_failures_total", "counter", "Instances that failed to start.", |p| p.instantiation_failures),
        ("wasmgate_plugin_instances_expired_total", "counter", "Idle instances dropped after pool_idle_timeout_ms (the pool shrinking back).", |p| p.expired),
        ("wasmgate_plugin_pool_waits_total", "counter", "Calls that found every instance busy and waited.", |p| p.waits),
        ("wasmgate_plugin_pool_rejections_total", "counter", "Calls refused: no instance within queue_timeout_ms, or crash-loop backoff (503).", |p| p.rejected),
        ("wasmgate_plugin_backing_off", "gauge", "1 while instantiation is in crash-loop backoff.", |p| p.backing_off as u64),
    ];
    for (name, kind, help, value) in pool_counters {
        family(out, name, kind, help);
        for (l, set) in labels.iter().zip(&sets) {
            let _ = writeln!(out, "{name}{{{l}}} {}", value(&set.pool));
        }
    }
}

/// A per-plugin family read from the pool's counters: name, type, help, value.
type PoolFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&PoolStats) -> u64,
);

/// What each Proxy-Wasm VM id holds in shared data and queues, against
/// `limits.proxy_wasm` (the VM id is the plugin's name unless it sets one).
pub(super) fn shared_state_metrics(out: &mut String) {
    /// A gauge family: its name, help, and what it reads of a VM id's usage.
    type Family = (&'static str, &'static str, fn(&VmUsage) -> usize);
    let usage = shared().usage();
    let families: [Family; 5] = [
        (
            "wasmgate_proxy_wasm_shared_data_bytes",
            "Keys and values of the VM id's shared data.",
            |u| u.data_bytes,
        ),
        (
            "wasmgate_proxy_wasm_shared_data_keys",
            "Keys of the VM id's shared data.",
            |u| u.data_keys,
        ),
        (
            "wasmgate_proxy_wasm_shared_queues",
            "Shared queues the VM id registered.",
            |u| u.queues,
        ),
        (
            "wasmgate_proxy_wasm_shared_queue_items",
            "Items waiting in the VM id's shared queues.",
            |u| u.queue_items,
        ),
        (
            "wasmgate_proxy_wasm_shared_queue_bytes",
            "Bytes waiting in the VM id's shared queues.",
            |u| u.queue_bytes,
        ),
    ];
    for (name, help, value) in families {
        family(out, name, "gauge", help);
        for vm in &usage {
            let _ = writeln!(
                out,
                "{name}{{vm_id=\"{}\"}} {}",
                escape(&vm.vm_id),
                value(vm)
            );
        }
    }
}
