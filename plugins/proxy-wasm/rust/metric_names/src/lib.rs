//! Metrics named by the operator (proxy-wasm Rust SDK 0.2.5), to try what a
//! plugin can do with the names it chooses: the plugin configuration is a
//! JSON list of `{"type": "counter" | "gauge" | "histogram", "name": ...,
//! "value": N}`. The root context defines each; every request adds `value`
//! to the counters, sets the gauges to it and records it in the histograms.
//! It also tries to reach metric ids it did not define (1 to 64) and tells
//! in `x-foreign-metrics` how many of those the host let it read.

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, MetricType};
use serde::Deserialize;

proxy_wasm::main! {{
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(Root { metrics: Vec::new() })
    });
}}

#[derive(Deserialize)]
struct Wanted {
    #[serde(rename = "type")]
    kind: String,
    name: String,
    value: u64,
}

#[derive(Clone, Copy)]
struct Defined {
    kind: MetricType,
    id: u32,
    value: u64,
}

struct Root {
    metrics: Vec<Defined>,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, _: usize) -> bool {
        let Some(config) = self.get_plugin_configuration() else {
            return true;
        };
        let Ok(wanted) = serde_json::from_slice::<Vec<Wanted>>(&config) else {
            return false;
        };
        for w in wanted {
            let kind = match w.kind.as_str() {
                "counter" => MetricType::Counter,
                "gauge" => MetricType::Gauge,
                "histogram" => MetricType::Histogram,
                _ => return false,
            };
            let Ok(id) = hostcalls::define_metric(kind, &w.name) else {
                return false;
            };
            self.metrics.push(Defined {
                kind,
                id,
                value: w.value,
            });
        }
        true
    }

    fn create_http_context(&self, _: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Request {
            metrics: self.metrics.clone(),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Request {
    metrics: Vec<Defined>,
}

impl Context for Request {}

impl HttpContext for Request {
    fn on_http_request_headers(&mut self, _: usize, _: bool) -> Action {
        for m in &self.metrics {
            let _ = match m.kind {
                MetricType::Counter => hostcalls::increment_metric(m.id, m.value as i64),
                _ => hostcalls::record_metric(m.id, m.value),
            };
        }
        // Ids this plugin did not define: another plugin's metrics.
        let own: Vec<u32> = self.metrics.iter().map(|m| m.id).collect();
        let foreign = (1..=64)
            .filter(|id| !own.contains(id))
            .filter(|&id| hostcalls::get_metric(id).is_ok())
            .count();
        self.send_http_response(
            200,
            vec![("x-foreign-metrics", &foreign.to_string())],
            Some(b"counted"),
        );
        Action::Pause
    }
}
