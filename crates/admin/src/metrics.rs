//! `/metrics`: everything in the Prometheus text format. Families, in order:
//! configuration reloads, the engine's instance allocator, TLS (handshakes,
//! certificates), routes, upstream nodes, plugins, Proxy-Wasm shared data and
//! queues, services (Redis, PostgreSQL), then the metrics Proxy-Wasm plugins
//! defined themselves.

use std::fmt::Write;

use wasmgate_proxy_wasm::shared::{shared, Metric, MetricKind, VmUsage};
use wasmgate_runtime::stats::LATENCY_BUCKETS;
use wasmgate_runtime::{HistogramSnapshot, PoolStats};

use wasmgate_gateway::stats::{ListenerCount, NodeStats, RouteStats};
use wasmgate_gateway::{Gateway, LiveGateway};

pub fn render(live: &LiveGateway) -> String {
    let gateway = live.current();
    let mut out = String::new();
    reload_metrics(live, &mut out);
    instance_pool_metrics(live, &mut out);
    long_call_metrics(&mut out);
    tls_metrics(&gateway, &mut out);
    listener_metrics(&mut out);
    tunnel_metrics(&mut out);
    access_log_metrics(&mut out);
    trace_metrics(&mut out);
    route_metrics(&gateway, &mut out);
    upstream_metrics(&gateway, &mut out);
    plugin_metrics(&gateway, &mut out);
    shared_state_metrics(&mut out);
    service_metrics(live, &mut out);
    guest_defined_metrics(&mut out);
    out
}

fn reload_metrics(live: &LiveGateway, out: &mut String) {
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

fn long_call_metrics(out: &mut String) {
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
fn instance_pool_metrics(live: &LiveGateway, out: &mut String) {
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

fn route_metrics(gateway: &Gateway, out: &mut String) {
    let routes: Vec<RouteStats> = gateway.route_stats().collect();
    route_families(&routes, out);
}

/// The route families of `routes`. Public for the comparison with the
/// `prometheus-client` crate (examples/prometheus_client_cost.rs).
pub fn route_families(routes: &[RouteStats], out: &mut String) {
    family(
        out,
        "wasmgate_route_requests_total",
        "counter",
        "Requests answered per route and status class.",
    );
    for route in routes {
        for (n, class) in route
            .responses
            .iter()
            .zip(["1xx", "2xx", "3xx", "4xx", "5xx"])
        {
            let labels = format!("route=\"{}\",class=\"{class}\"", escape(route.name));
            let _ = writeln!(out, "wasmgate_route_requests_total{{{labels}}} {n}");
        }
    }
    family(
        out,
        "wasmgate_route_rejected_total",
        "counter",
        "Requests refused by the route's max_concurrent_requests (503).",
    );
    for route in routes {
        let _ = writeln!(
            out,
            "wasmgate_route_rejected_total{{route=\"{}\"}} {}",
            escape(route.name),
            route.rejected
        );
    }
    family(
        out,
        "wasmgate_route_mirrored_total",
        "counter",
        "Copies of the route's requests sent to a mirror upstream, by what became of them: sent (answered), cut (fell behind the original's body), failed.",
    );
    for route in routes {
        for m in &route.mirrors {
            for (outcome, n) in [("sent", m.sent), ("cut", m.cut), ("failed", m.failed)] {
                let _ = writeln!(
                    out,
                    "wasmgate_route_mirrored_total{{route=\"{}\",upstream=\"{}\",outcome=\"{outcome}\"}} {n}",
                    escape(route.name),
                    escape(m.upstream)
                );
            }
        }
    }
    let name = "wasmgate_route_response_seconds";
    family(
        out,
        name,
        "histogram",
        "Time from a request's arrival to its response headers.",
    );
    for route in routes {
        let labels = format!("route=\"{}\"", escape(route.name));
        histogram(out, name, &labels, &route.latency.snapshot());
    }
}

fn upstream_metrics(gateway: &Gateway, out: &mut String) {
    let upstreams = gateway.upstream_stats();
    let node_labels = |upstream: &str, node: &str| {
        format!(
            "upstream=\"{}\",node=\"{}\"",
            escape(upstream),
            escape(node)
        )
    };
    let gauges_and_counters: [NodeFamily; 5] = [
        (
            "wasmgate_upstream_node_healthy",
            "gauge",
            "Whether a node is in rotation.",
            |n| n.available as u64,
        ),
        (
            "wasmgate_upstream_node_requests_total",
            "counter",
            "Requests sent to the node (retries included).",
            |n| n.requests,
        ),
        (
            "wasmgate_upstream_node_retries_total",
            "counter",
            "Requests retried on the node after another node failed.",
            |n| n.retries,
        ),
        (
            "wasmgate_upstream_node_waiting",
            "gauge",
            "Requests sent to the node and waiting for its response headers.",
            |n| n.waiting,
        ),
        (
            "wasmgate_upstream_node_connections",
            "gauge",
            "Connections open to the node, in use or idle in the pool.",
            |n| n.connections,
        ),
    ];
    for (name, kind, help, value) in gauges_and_counters {
        family(out, name, kind, help);
        for (upstream, nodes) in &upstreams {
            for node in nodes {
                let labels = node_labels(upstream, node.address);
                let _ = writeln!(out, "{name}{{{labels}}} {}", value(node));
            }
        }
    }
    let name = "wasmgate_upstream_node_response_seconds";
    family(
        out,
        name,
        "histogram",
        "Time from sending a request to the node to its response headers.",
    );
    for (upstream, nodes) in &upstreams {
        for node in nodes {
            let labels = node_labels(upstream, node.address);
            histogram(out, name, &labels, &node.latency.snapshot());
        }
    }
}

/// Per plugin instance set: a filter on a route (`route` label) or an
/// Extism function plugin (`route=""`, shared by the routes calling it).
fn plugin_metrics(gateway: &Gateway, out: &mut String) {
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

/// What each Proxy-Wasm VM id holds in shared data and queues, against
/// `limits.proxy_wasm` (the VM id is the plugin's name unless it sets one).
fn shared_state_metrics(out: &mut String) {
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

/// A per-node family: name, type, help, value.
type NodeFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&NodeStats) -> u64,
);

/// A per-plugin family read from the pool's counters: name, type, help, value.
type PoolFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&PoolStats) -> u64,
);

/// Metrics Proxy-Wasm plugins defined. A plugin chooses its metrics' names,
/// so none may become one of ours, clash with another's, or break the
/// scrape: each family is `wasmcustom_<name made Prometheus-safe>` (Envoy's
/// prefix for them; counters end in `_total`), each series carries the
/// plugin that defined it and its name as given (`{plugin="auth",
/// name="a.b"}`), so names that collapse into one family stay apart, and a
/// family whose samples would clash with another's (of another type, say)
/// gets its type appended to its name (`_gauge`, `_summary`, ...).
fn guest_defined_metrics(out: &mut String) {
    // Families by (name made safe, type), in a fixed order, so the renaming
    // of a clash does not depend on which plugin defined its metric first.
    let mut groups: std::collections::BTreeMap<(String, &str), Vec<Metric>> = Default::default();
    for metric in shared().metrics() {
        let base = format!("wasmcustom_{}", prometheus_name(&metric.name));
        let base = match metric.kind {
            MetricKind::Counter if !base.ends_with("_total") => format!("{base}_total"),
            _ => base,
        };
        groups
            .entry((base, kind_name(metric.kind)))
            .or_default()
            .push(metric);
    }
    let mut taken = std::collections::HashSet::new();
    for ((base, kind), mut members) in groups {
        let mut name = base.clone();
        let mut n = 1;
        while sample_names(&name, kind).iter().any(|s| taken.contains(s)) {
            n += 1;
            name = match n {
                2 => format!("{base}_{kind}"),
                _ => format!("{base}_{kind}_{n}"),
            };
        }
        taken.extend(sample_names(&name, kind));
        family(
            out,
            &name,
            kind,
            "Defined by a Proxy-Wasm plugin (labels: the plugin, and the name it gave).",
        );
        members.sort_by(|a, b| (&a.plugin, &a.name).cmp(&(&b.plugin, &b.name)));
        for m in members {
            let labels = format!(
                "plugin=\"{}\",name=\"{}\"",
                escape(&m.plugin),
                escape(&m.name)
            );
            match m.kind {
                MetricKind::Counter | MetricKind::Gauge => {
                    let _ = writeln!(out, "{name}{{{labels}}} {}", m.value);
                }
                MetricKind::Histogram => {
                    let _ = writeln!(out, "{name}_count{{{labels}}} {}", m.count);
                    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", m.sum);
                }
            }
        }
    }
}

/// The Prometheus type a plugin's metric is exposed as.
fn kind_name(kind: MetricKind) -> &'static str {
    match kind {
        MetricKind::Counter => "counter",
        MetricKind::Gauge => "gauge",
        MetricKind::Histogram => "summary",
    }
}

/// The sample names a family of type `kind` called `name` writes.
fn sample_names(name: &str, kind: &str) -> Vec<String> {
    match kind {
        "counter" | "gauge" => vec![name.to_string()],
        _ => vec![
            name.to_string(),
            format!("{name}_count"),
            format!("{name}_sum"),
        ],
    }
}

/// Per service: operations, errors by kind, latency, connections opened,
/// and the pool's gauges.
fn service_metrics(live: &LiveGateway, out: &mut String) {
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

fn tls_metrics(gateway: &Gateway, out: &mut String) {
    let handshakes = wasmgate_gateway::stats::tls_handshakes();
    family(
        out,
        "wasmgate_tls_handshakes_total",
        "counter",
        "TLS handshakes completed on the traffic listeners, full or resumed (a session ticket or the session cache).",
    );
    for (kind, n) in [("full", handshakes.full), ("resumed", handshakes.resumed)] {
        let _ = writeln!(out, "wasmgate_tls_handshakes_total{{kind=\"{kind}\"}} {n}");
    }
    family(
        out,
        "wasmgate_tls_handshake_failures_total",
        "counter",
        "TLS handshakes refused or abandoned, by reason (timeout, not_tls, protocol_version, no_shared_cipher, unknown_sni, client_certificate, other).",
    );
    for (reason, n) in handshakes.failed {
        let _ = writeln!(
            out,
            "wasmgate_tls_handshake_failures_total{{reason=\"{reason}\"}} {n}"
        );
    }
    if gateway.certificates.is_empty() {
        return;
    }
    family(
        out,
        "wasmgate_tls_certificate_expiry_timestamp_seconds",
        "gauge",
        "When each served certificate's leaf expires (notAfter), in seconds since the epoch.",
    );
    for certificate in &gateway.certificates {
        let _ = writeln!(
            out,
            "wasmgate_tls_certificate_expiry_timestamp_seconds{{certificate=\"{}\"}} {}",
            escape(&certificate.name),
            certificate.not_after
        );
    }
}

/// Each listener's connections (traffic and admin), since the process started.
fn listener_metrics(out: &mut String) {
    /// A family: its name, type, help, and what it reads of a listener.
    type Family = (
        &'static str,
        &'static str,
        &'static str,
        fn(&ListenerCount) -> u64,
    );
    let listeners = wasmgate_gateway::stats::listener_counts();
    let families: [Family; 3] = [
        (
            "wasmgate_listener_connections",
            "gauge",
            "Connections open now, by listener.",
            |l| l.open_connections as u64,
        ),
        (
            "wasmgate_listener_max_connections",
            "gauge",
            "The most connections each listener holds at once (max_connections).",
            |l| l.max_connections as u64,
        ),
        (
            "wasmgate_listener_connections_refused_total",
            "counter",
            "Connections closed as soon as they were accepted because the listener held max_connections.",
            |l| l.refused,
        ),
    ];
    for (name, kind, help, value) in families {
        family(out, name, kind, help);
        for l in &listeners {
            let address = escape(&l.address);
            let _ = writeln!(out, "{name}{{listener=\"{address}\"}} {}", value(l));
        }
    }
    family(
        out,
        "wasmgate_listener_connections_closed_total",
        "counter",
        "Connections the gateway closed while their client kept them, by listener and why (http2_idle_timeout: no open stream for limits.http2_idle_timeout_ms; canceled_streams: the client canceled most of its HTTP/2 streams).",
    );
    for l in &listeners {
        for (reason, n) in [
            ("http2_idle_timeout", l.closed_idle),
            ("canceled_streams", l.closed_canceled_streams),
        ] {
            let _ = writeln!(
                out,
                "wasmgate_listener_connections_closed_total{{listener=\"{}\",reason=\"{reason}\"}} {n}",
                escape(&l.address),
            );
        }
    }
}

/// Upgraded connections (WebSocket) by route: kept since the process
/// started, across reloads, since a tunnel outlives its configuration.
fn tunnel_metrics(out: &mut String) {
    let tunnels = wasmgate_gateway::stats::tunnels();
    if tunnels.is_empty() {
        return;
    }
    family(
        out,
        "wasmgate_tunnels_open",
        "gauge",
        "Upgraded connections (WebSocket tunnels) open now, by route.",
    );
    for t in &tunnels {
        let route = escape(&t.route);
        let _ = writeln!(out, "wasmgate_tunnels_open{{route=\"{route}\"}} {}", t.open);
    }
    family(
        out,
        "wasmgate_tunnels_total",
        "counter",
        "Upgraded connections opened (the upstream answered 101 and both sides switched), by route.",
    );
    for t in &tunnels {
        let route = escape(&t.route);
        let _ = writeln!(
            out,
            "wasmgate_tunnels_total{{route=\"{route}\"}} {}",
            t.opened
        );
    }
    family(
        out,
        "wasmgate_tunnels_closed_total",
        "counter",
        "Upgraded connections closed, by route and why (closed, error, idle_timeout, max_duration).",
    );
    for t in &tunnels {
        let route = escape(&t.route);
        for (end, n) in &t.ends {
            let _ = writeln!(
                out,
                "wasmgate_tunnels_closed_total{{route=\"{route}\",reason=\"{end}\"}} {n}"
            );
        }
    }
    family(
        out,
        "wasmgate_tunnel_bytes_total",
        "counter",
        "Bytes copied through upgraded connections, by route and direction (to_upstream, to_client).",
    );
    for t in &tunnels {
        let route = escape(&t.route);
        for (direction, n) in [
            ("to_upstream", t.bytes_to_upstream),
            ("to_client", t.bytes_to_client),
        ] {
            let _ = writeln!(
                out,
                "wasmgate_tunnel_bytes_total{{route=\"{route}\",direction=\"{direction}\"}} {n}"
            );
        }
    }
}

/// The access log's lines: written, and lost (a buffer full because the
/// disk is slower than the traffic, or a write that failed), by reason.
fn access_log_metrics(out: &mut String) {
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

fn trace_metrics(out: &mut String) {
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

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// One labelled series of a histogram over `LATENCY_BUCKETS`.
fn histogram(out: &mut String, name: &str, labels: &str, h: &HistogramSnapshot) {
    let mut cumulative = 0;
    for (i, bound) in LATENCY_BUCKETS.iter().enumerate() {
        cumulative += h.buckets[i];
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum_seconds);
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
}

fn prometheus_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) || out.is_empty() {
        out.insert(0, '_');
    }
    out
}

pub(crate) fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
