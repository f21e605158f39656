//! The traffic families: requests per route (answered, refused, mirrored,
//! their latency) and per upstream node (health, requests, retries,
//! connections, latency).

use std::fmt::Write;

use wasmgate_gateway::stats::{NodeStats, RouteStats};
use wasmgate_gateway::Gateway;

use super::text::{escape, family, histogram};

pub(super) fn route_metrics(gateway: &Gateway, out: &mut String) {
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

pub(super) fn upstream_metrics(gateway: &Gateway, out: &mut String) {
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

/// A per-node family: name, type, help, value.
type NodeFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&NodeStats) -> u64,
);
