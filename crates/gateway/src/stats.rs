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
    /// Its mirrors' copies.
    pub mirrors: Vec<MirrorStats<'a>>,
}

/// What became of a route's copies to one mirror upstream.
pub struct MirrorStats<'a> {
    pub upstream: &'a str,
    /// Answered (any status).
    pub sent: u64,
    /// Cut off for falling behind the original's body.
    pub cut: u64,
    /// Not answered (no node reached, a timeout).
    pub failed: u64,
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

/// TLS handshakes on the traffic listeners since the process started.
pub struct HandshakeStats {
    /// Completed with a full handshake.
    pub full: u64,
    /// Completed by resuming a session (ticket or cache).
    pub resumed: u64,
    /// By reason (`transport::tls::REASONS`), every reason listed.
    pub failed: Vec<(&'static str, u64)>,
}

pub fn tls_handshakes() -> HandshakeStats {
    let (full, resumed, failed) = wasmgate_transport::tls::handshake_counts();
    HandshakeStats {
        full,
        resumed,
        failed,
    }
}

/// Each listener's connections: open now, its cap, refused and closed.
pub use wasmgate_transport::admission::{listener_counts, ListenerCount};

/// A route's upgraded connections (WebSocket tunnels) since the process
/// started: a tunnel outlives the configuration it was opened under, so
/// these are kept by route name, not by the gateway.
pub struct TunnelStats {
    pub route: String,
    pub opened: u64,
    /// Open now.
    pub open: u64,
    pub bytes_to_upstream: u64,
    pub bytes_to_client: u64,
    /// Closed tunnels by why they ended: `closed`, `error`,
    /// `idle_timeout`, `max_duration`.
    pub ends: Vec<(&'static str, u64)>,
}

pub fn tunnels() -> Vec<TunnelStats> {
    crate::endpoint::tunnel::all()
        .into_iter()
        .map(|(route, c)| {
            let opened = c.opened.load(Ordering::Relaxed);
            TunnelStats {
                route,
                opened,
                open: opened.saturating_sub(c.closed.load(Ordering::Relaxed)),
                bytes_to_upstream: c.to_upstream.load(Ordering::Relaxed),
                bytes_to_client: c.to_client.load(Ordering::Relaxed),
                ends: c.ends().collect(),
            }
        })
        .collect()
}

impl Gateway {
    /// Every route, in matching order.
    pub fn route_stats(&self) -> impl Iterator<Item = RouteStats<'_>> {
        self.routes.iter().map(|route| RouteStats {
            name: &route.name,
            responses: std::array::from_fn(|i| route.responses[i].load(Ordering::Relaxed)),
            rejected: route.rejected.load(Ordering::Relaxed),
            latency: &route.latency,
            mirrors: (route.mirrors.iter())
                .map(|m| MirrorStats {
                    upstream: m.upstream_name(),
                    sent: m.counts.sent.load(Ordering::Relaxed),
                    cut: m.counts.cut.load(Ordering::Relaxed),
                    failed: m.counts.failed.load(Ordering::Relaxed),
                })
                .collect(),
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
