//! A first Proxy-Wasm HTTP filter: adds `x-first-plugin: <value>` to every
//! response, where the value is the route's `conf` (default "hello").

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(Root { value: String::new() })
    });
}}

/// One per route: reads the route's `conf` once.
struct Root {
    value: String,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        self.value = match self.get_plugin_configuration() {
            Some(conf) => String::from_utf8_lossy(&conf).into_owned(),
            None => "hello".to_string(),
        };
        true // false would refuse the configuration (and fail `wasmgate check`)
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Filter { value: self.value.clone() }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

/// One per request.
struct Filter {
    value: String,
}

impl Context for Filter {}

impl HttpContext for Filter {
    fn on_http_response_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        self.add_http_response_header("x-first-plugin", &self.value);
        Action::Continue
    }
}
