//! The admin listener: `/metrics` (Prometheus text format), `/healthz`,
//! `/readyz`, `GET /status` (reload generation and last error) and
//! `POST /reload`. It binds to its own address (127.0.0.1 by default in the
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
use crate::reload::LiveGateway;

pub struct Admin {
    pub live: Arc<LiveGateway>,
}

const JSON: &str = "application/json";

impl Handler for Admin {
    async fn handle(&self, request: Request<Incoming>, _connection: Connection) -> Response<Body> {
        let method = request.method().clone();
        let (status, content_type, text) = match (&method, request.uri().path()) {
            (_, "/metrics") => (StatusCode::OK, "text/plain; version=0.0.4", self.metrics()),
            (_, "/healthz" | "/readyz") => (StatusCode::OK, "text/plain", "ok\n".to_string()),
            (_, "/status") => (StatusCode::OK, JSON, self.status()),
            (&hyper::Method::POST, "/reload") => match self.live.reload("admin API").await {
                Ok(generation) => (
                    StatusCode::OK,
                    JSON,
                    serde_json::json!({"reloaded": true, "generation": generation}).to_string(),
                ),
                Err(reason) => (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    JSON,
                    serde_json::json!({"reloaded": false, "error": reason}).to_string(),
                ),
            },
            (_, "/reload") => (
                StatusCode::METHOD_NOT_ALLOWED,
                "text/plain",
                "POST /reload\n".to_string(),
            ),
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
    fn status(&self) -> String {
        let gateway = self.live.current();
        let plugins: Vec<_> = gateway
            .plugin_kinds
            .iter()
            .map(|(name, kind)| serde_json::json!({"name": name, "kind": kind}))
            .collect();
        serde_json::json!({
            "reload": self.live.status(),
            "routes": gateway.config().routes.len(),
            "upstreams": gateway.config().upstreams.len(),
            "plugins": plugins,
        })
        .to_string()
    }

    fn metrics(&self) -> String {
        let gateway: Arc<Gateway> = self.live.current();
        let reload = self.live.status();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP wasmgate_config_generation Configuration generation serving (1 at start-up).\n\
             # TYPE wasmgate_config_generation gauge\nwasmgate_config_generation {}\n\
             # TYPE wasmgate_config_reloads_total counter\nwasmgate_config_reloads_total {}\n\
             # TYPE wasmgate_config_reload_failures_total counter\nwasmgate_config_reload_failures_total {}",
            reload.generation, reload.reloads, reload.failed_reloads
        );
        self.instance_pool_metrics(&mut out);
        out.push_str(
            "# HELP wasmgate_route_requests_total Requests answered per route and status class.\n",
        );
        out.push_str("# TYPE wasmgate_route_requests_total counter\n");
        for route in &gateway.routes {
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
        let mut upstreams: Vec<_> = gateway.upstreams.values().collect();
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

impl Admin {
    /// The engine's instance allocator: what is alive (instances and
    /// memories of every plugin and version) and what freed slots keep
    /// resident for reuse, which is how memory after reloads is accounted.
    fn instance_pool_metrics(&self, out: &mut String) {
        let Some(pool) = self.live.runtime().engine().pooling_allocator_metrics() else {
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
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
            );
        }
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
