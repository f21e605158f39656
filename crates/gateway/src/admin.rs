//! The admin listener: `/metrics` (Prometheus text format), `/healthz` and
//! `/readyz`. It binds to its own address (127.0.0.1 by default in the
//! examples) so traffic and operations stay apart.

use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use wasmgate_proxy_wasm::shared::{shared, MetricKind};

use crate::body::{self, Body};
use crate::gateway::Gateway;
use crate::listener::{Connection, Handler};

pub struct Admin {
    pub gateway: Arc<Gateway>,
}

impl Handler for Admin {
    async fn handle(&self, request: Request<Incoming>, _connection: Connection) -> Response<Body> {
        let (status, content_type, text) = match request.uri().path() {
            "/metrics" => (StatusCode::OK, "text/plain; version=0.0.4", self.metrics()),
            "/healthz" | "/readyz" => (StatusCode::OK, "text/plain", "ok\n".to_string()),
            _ => (
                StatusCode::NOT_FOUND,
                "text/plain",
                "not found\n".to_string(),
            ),
        };
        Response::builder()
            .status(status)
            .header(hyper::header::CONTENT_TYPE, content_type)
            .body(body::full(text))
            .expect("static response parts are valid")
    }
}

impl Admin {
    fn metrics(&self) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP wasmgate_route_requests_total Requests answered per route and status class.\n",
        );
        out.push_str("# TYPE wasmgate_route_requests_total counter\n");
        for route in &self.gateway.routes {
            for (i, class) in ["1xx", "2xx", "3xx", "4xx", "5xx"].iter().enumerate() {
                let n = route.responses[i].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "wasmgate_route_requests_total{{route=\"{}\",class=\"{class}\"}} {n}",
                    escape(&route.name)
                );
            }
        }
        out.push_str("# HELP wasmgate_upstream_node_healthy Whether a node is in rotation.\n");
        out.push_str("# TYPE wasmgate_upstream_node_healthy gauge\n");
        let mut upstreams: Vec<_> = self.gateway.upstreams.values().collect();
        upstreams.sort_by(|a, b| a.name.cmp(&b.name));
        for upstream in &upstreams {
            for (i, node) in upstream.nodes().iter().enumerate() {
                let _ = writeln!(
                    out,
                    "wasmgate_upstream_node_healthy{{upstream=\"{}\",node=\"{}\"}} {}",
                    escape(&upstream.name),
                    escape(&node.address),
                    upstream.is_available(i) as u8
                );
            }
        }
        out.push_str("# TYPE wasmgate_upstream_node_retries_total counter\n");
        for upstream in &upstreams {
            for node in upstream.nodes() {
                let _ = writeln!(
                    out,
                    "wasmgate_upstream_node_retries_total{{upstream=\"{}\",node=\"{}\"}} {}",
                    escape(&upstream.name),
                    escape(&node.address),
                    node.retries.load(Ordering::Relaxed)
                );
            }
        }
        // Metrics Proxy-Wasm plugins defined, under their own names (made
        // Prometheus-safe) with a `wasm_` prefix kept if they chose one.
        for metric in shared().metrics() {
            let name = prometheus_name(&metric.name);
            match metric.kind {
                MetricKind::Counter => {
                    let _ = writeln!(out, "# TYPE {name} counter\n{name} {}", metric.value);
                }
                MetricKind::Gauge => {
                    let _ = writeln!(out, "# TYPE {name} gauge\n{name} {}", metric.value);
                }
                MetricKind::Histogram => {
                    let _ = writeln!(
                        out,
                        "# TYPE {name} summary\n{name}_count {}\n{name}_sum {}",
                        metric.count, metric.sum
                    );
                }
            }
        }
        out
    }
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

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
