//! What operations read of a serving gateway: each route's and each
//! upstream node's counters, as plain values. The admin crate (metrics,
//! history, dashboard) reads these and nothing else of the data plane's
//! internals.

use std::sync::atomic::Ordering;

use wasmgate_base::histogram::LatencyHistogram;

use crate::Gateway;

/// One route's traffic since its gateway was built.
pub struct RouteStats<'a> {
    pub name: &'a str,
    /// Answers by status class: 1xx, 2xx, 3xx, 4xx, 5xx.
    pub responses: [u64; 5],
    /// Requests refused by `max_concurrent_requests`.
    pub rejected: u64,
    /// Arrival to response headers.
    pub latency: &'a LatencyHistogram,
}

/// One upstream node's traffic and state.
pub struct NodeStats<'a> {
    pub address: &'a str,
    /// In rotation: healthy and not ejected.
    pub available: bool,
    pub requests: u64,
    pub retries: u64,
    /// Sent, waiting for response headers.
    pub waiting: u64,
    /// Open connections, in use or idle.
    pub connections: u64,
    /// Send to response headers.
    pub latency: &'a LatencyHistogram,
}

impl Gateway {
    /// Every route, in matching order.
    pub fn route_stats(&self) -> impl Iterator<Item = RouteStats<'_>> {
        self.routes.iter().map(|route| RouteStats {
            name: &route.name,
            responses: std::array::from_fn(|i| route.responses[i].load(Ordering::Relaxed)),
            rejected: route.rejected.load(Ordering::Relaxed),
            latency: &route.latency,
        })
    }

    /// Every upstream's nodes, upstreams by name.
    pub fn upstream_stats(&self) -> Vec<(&str, Vec<NodeStats<'_>>)> {
        let mut upstreams: Vec<_> = self.upstreams.values().collect();
        upstreams.sort_by(|a, b| a.name.cmp(&b.name));
        upstreams
            .into_iter()
            .map(|upstream| {
                let nodes = upstream
                    .nodes()
                    .iter()
                    .enumerate()
                    .map(|(i, node)| NodeStats {
                        address: &node.address,
                        available: upstream.is_available(i),
                        requests: node.requests.load(Ordering::Relaxed),
                        retries: node.retries.load(Ordering::Relaxed),
                        waiting: node.waiting.load(Ordering::Relaxed),
                        connections: node.connections.load(Ordering::Relaxed),
                        latency: &node.latency,
                    })
                    .collect();
                (&*upstream.name, nodes)
            })
            .collect()
    }
}
