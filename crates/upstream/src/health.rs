//! Which nodes are in rotation: active probes on a timer (a node goes out
//! after `unhealthy_threshold` failed probes and comes back after
//! `healthy_threshold` good ones), and passive ejection (consecutive failed
//! requests take a node out for `ejection_ms`).

use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::{HeaderMap, Method};
use wasmgate_config::ActiveCheck;

use super::{build_request, interval_of, next_tick, Node, RequestHead, Upstream};
use wasmgate_transport::body;

impl Upstream {
    /// Passive health: consecutive failures eject a node for a while.
    pub(super) fn report(&self, i: usize, ok: bool) {
        let Some(passive) = &self.passive else { return };
        let node = &self.nodes[i];
        if ok {
            node.failures.store(0, Ordering::Relaxed);
            return;
        }
        let failures = node.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures >= passive.max_failures.max(1) {
            node.failures.store(0, Ordering::Relaxed);
            *node.ejected_until.lock().unwrap() =
                Some(Instant::now() + Duration::from_millis(passive.ejection_ms));
            tracing::warn!(upstream = %self.name, node = %node.address, failures, "node ejected after consecutive failures");
        }
    }
}

/// Probes every node until the upstream is dropped.
pub(super) async fn probe_forever(upstream: Weak<Upstream>, check: ActiveCheck) {
    let mut interval = interval_of(Duration::from_millis(check.interval_ms.max(10)));
    while let Some(upstream) = next_tick(&mut interval, &upstream).await {
        for node in &upstream.nodes {
            let ok = probe(node, &check).await;
            let streak = &node.probe_streak;
            let healthy = node.healthy.load(Ordering::Relaxed);
            if ok == healthy {
                streak.store(0, Ordering::Relaxed);
                continue;
            }
            let n = streak.fetch_add(1, Ordering::Relaxed) + 1;
            let threshold = if ok {
                check.healthy_threshold
            } else {
                check.unhealthy_threshold
            };
            if n >= threshold.max(1) {
                streak.store(0, Ordering::Relaxed);
                node.healthy.store(ok, Ordering::Relaxed);
                tracing::warn!(upstream = %upstream.name, node = %node.address, healthy = ok, "active health check changed a node's state");
            }
        }
    }
}

async fn probe(node: &Node, check: &ActiveCheck) -> bool {
    let head = RequestHead {
        method: Method::GET,
        path: check.path.clone(),
        headers: HeaderMap::new(),
    };
    let Ok(request) = build_request(&head, HeaderMap::new(), node, body::empty()) else {
        return false;
    };
    let timeout = Duration::from_millis(check.timeout_ms);
    let exchange = async {
        let response = node.pool.send(request, timeout).await.ok()?;
        let healthy = response.status().as_u16() < 500;
        // Read to the end, so the connection is kept for the next probe.
        let mut body = response.into_body();
        while let Some(frame) = body.frame().await {
            frame.ok()?;
        }
        Some(healthy)
    };
    // The body's reading too is within the check's time.
    matches!(
        tokio::time::timeout(timeout, exchange).await,
        Ok(Some(true))
    )
}
