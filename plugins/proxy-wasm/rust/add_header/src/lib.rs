//! A Proxy-Wasm header filter (proxy-wasm Rust SDK 0.2.5): adds
//! `x-wasmgate-filter: <plugin configuration>` to the request, reports the
//! request's path and host back in response headers, and logs each request.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Trace);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(AddHeaderRoot { value: String::new() })
    });
}}

struct AddHeaderRoot {
    value: String,
}

impl Context for AddHeaderRoot {}

impl RootContext for AddHeaderRoot {
    fn on_configure(&mut self, _size: usize) -> bool {
        self.value = self
            .get_plugin_configuration()
            .map(|c| String::from_utf8_lossy(&c).into_owned())
            .unwrap_or_else(|| "on".to_string());
        true
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(AddHeader {
            context_id,
            value: self.value.clone(),
            path: String::new(),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct AddHeader {
    context_id: u32,
    value: String,
    path: String,
}

impl Context for AddHeader {}

impl HttpContext for AddHeader {
    fn on_http_request_headers(&mut self, _: usize, _: bool) -> Action {
        self.add_http_request_header("x-wasmgate-filter", &self.value);
        self.path = self.get_http_request_header(":path").unwrap_or_default();
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _: usize, _: bool) -> Action {
        self.set_http_response_header("x-seen-path", Some(&self.path));
        let host = self
            .get_property(vec!["request", "host"])
            .map(|h| String::from_utf8_lossy(&h).into_owned())
            .unwrap_or_default();
        self.set_http_response_header("x-seen-host", Some(&host));
        Action::Continue
    }

    fn on_log(&mut self) {
        log::info!("#{} done with {}", self.context_id, self.path);
    }
}
