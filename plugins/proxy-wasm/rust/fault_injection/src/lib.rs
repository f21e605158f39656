//! Fault injection in the shape of Apache APISIX's wasm example (proxy-wasm
//! Rust SDK 0.2.5): with plugin configuration
//! `{"body":"hello world","http_status":200}` every request is answered
//! locally with that status and body, and the upstream is never reached.
//! A configuration that does not parse is refused at `on_configure`.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType};
use serde::Deserialize;

proxy_wasm::main! {{
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(FaultRoot { fault: None })
    });
}}

#[derive(Clone, Deserialize)]
struct Fault {
    http_status: u32,
    #[serde(default)]
    body: String,
}

struct FaultRoot {
    fault: Option<Fault>,
}

impl Context for FaultRoot {}

impl RootContext for FaultRoot {
    fn on_configure(&mut self, _size: usize) -> bool {
        let Some(conf) = self.get_plugin_configuration() else {
            return false;
        };
        match serde_json::from_slice::<Fault>(&conf) {
            Ok(fault) => {
                self.fault = Some(fault);
                true
            }
            Err(_) => false,
        }
    }

    fn create_http_context(&self, _: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(FaultInjection {
            fault: self.fault.clone().expect("configured"),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct FaultInjection {
    fault: Fault,
}

impl Context for FaultInjection {}

impl HttpContext for FaultInjection {
    fn on_http_request_headers(&mut self, _: usize, _: bool) -> Action {
        self.send_http_response(
            self.fault.http_status,
            vec![("content-type", "text/plain"), ("x-fault", "injected")],
            Some(self.fault.body.as_bytes()),
        );
        Action::Pause
    }
}
