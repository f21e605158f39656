//! A Proxy-Wasm filter driven by its plugin configuration (proxy-wasm Rust SDK
//! 0.2.5): the configuration, read as a UTF-8 string, is sent back on every
//! response as header `custom-header: <configuration>`. A missing, empty or
//! non-UTF-8 configuration is refused at `on_configure`.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};
use std::rc::Rc;

proxy_wasm::main! {{
    // Installs the SDK logger, so refusals below reach the host log.
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(HttpConfigRoot { header: Rc::from("") })
    });
}}

struct HttpConfigRoot {
    // Shared with every HTTP context instead of copied per stream: one pooled
    // instance serves many streams and the value never changes between
    // configurations.
    header: Rc<str>,
}

impl Context for HttpConfigRoot {}

impl RootContext for HttpConfigRoot {
    fn on_configure(&mut self, _: usize) -> bool {
        let Some(conf) = self.get_plugin_configuration() else {
            log::warn!("http_config: no plugin configuration");
            return false;
        };
        match String::from_utf8(conf) {
            Ok(value) if !value.is_empty() => {
                self.header = Rc::from(value);
                true
            }
            Ok(_) => {
                log::warn!("http_config: empty plugin configuration");
                false
            }
            Err(_) => {
                log::warn!("http_config: plugin configuration is not UTF-8");
                false
            }
        }
    }

    fn create_http_context(&self, _: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(HttpConfig {
            header: Rc::clone(&self.header),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct HttpConfig {
    header: Rc<str>,
}

impl Context for HttpConfig {}

impl HttpContext for HttpConfig {
    fn on_http_response_headers(&mut self, _: usize, _: bool) -> Action {
        self.add_http_response_header("custom-header", &self.header);
        Action::Continue
    }
}
