//! Proxy-Wasm metrics (proxy-wasm Rust SDK 0.2.5). The root context defines
//! counter `wasm_requests_total`, gauge `wasm_last_request_headers` and
//! histogram `wasm_request_header_count`. Each request adds one to the
//! counter, sets the gauge to its number of request headers and records the
//! same number in the histogram; its response carries the counter's value as
//! read back from the host in `x-requests-seen`.

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel, MetricType};

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(MetricsRoot { ids: None })
    });
}}

#[derive(Clone, Copy)]
struct MetricIds {
    requests: u32,
    last_headers: u32,
    header_count: u32,
}

struct MetricsRoot {
    ids: Option<MetricIds>,
}

impl Context for MetricsRoot {}

impl RootContext for MetricsRoot {
    fn on_configure(&mut self, _: usize) -> bool {
        // Hosts with Envoy's semantics hand back the existing id for a name
        // already defined, so a reconfiguration (or another instance) feeds
        // the same metrics rather than new ones.
        self.ids = Some(MetricIds {
            requests: hostcalls::define_metric(MetricType::Counter, "wasm_requests_total").unwrap(),
            last_headers: hostcalls::define_metric(MetricType::Gauge, "wasm_last_request_headers")
                .unwrap(),
            header_count: hostcalls::define_metric(
                MetricType::Histogram,
                "wasm_request_header_count",
            )
            .unwrap(),
        });
        true
    }

    fn create_http_context(&self, _: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Metrics { ids: self.ids }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Metrics {
    // None only if the host skipped on_configure; the stream then goes
    // through uncounted instead of failing.
    ids: Option<MetricIds>,
}

impl Context for Metrics {}

impl HttpContext for Metrics {
    fn on_http_request_headers(&mut self, _: usize, _: bool) -> Action {
        let Some(ids) = self.ids else {
            return Action::Continue;
        };
        // Counted from the map itself rather than the callback's argument, so
        // the number is what this filter actually sees.
        let headers = self.get_http_request_headers().len() as u64;
        let recorded = hostcalls::increment_metric(ids.requests, 1)
            .and_then(|()| hostcalls::record_metric(ids.last_headers, headers))
            .and_then(|()| hostcalls::record_metric(ids.header_count, headers));
        if let Err(status) = recorded {
            log::warn!("metrics: recording: {status:?}");
        }
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _: usize, _: bool) -> Action {
        let Some(ids) = self.ids else {
            return Action::Continue;
        };
        match hostcalls::get_metric(ids.requests) {
            Ok(seen) => self.add_http_response_header("x-requests-seen", &seen.to_string()),
            Err(status) => log::warn!("metrics: get_metric: {status:?}"),
        }
        Action::Continue
    }
}
