//! A Proxy-Wasm JSON request validator (proxy-wasm Rust SDK 0.2.5). A request
//! whose content-type is not `application/json` is answered with 403
//! `content-type must be application/json\n`. Otherwise its whole body is
//! buffered and must be a JSON object holding every key listed in plugin
//! configuration `{"requiredKeys":[...]}` (default `id` and `token`), or it is
//! answered with 403 `invalid payload\n`. Valid requests go upstream
//! unchanged.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};
use serde::Deserialize;
use std::rc::Rc;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(ValidationRoot { required: default_required_keys().into() })
    });
}}

#[derive(Deserialize)]
struct Config {
    #[serde(rename = "requiredKeys", default = "default_required_keys")]
    required_keys: Vec<String>,
}

fn default_required_keys() -> Vec<String> {
    vec!["id".to_string(), "token".to_string()]
}

struct ValidationRoot {
    required: Rc<[String]>,
}

impl Context for ValidationRoot {}

impl RootContext for ValidationRoot {
    fn on_configure(&mut self, _: usize) -> bool {
        let conf = match self.get_plugin_configuration() {
            Some(conf) if !conf.is_empty() => conf,
            _ => {
                self.required = default_required_keys().into();
                return true;
            }
        };
        // A malformed configuration is refused rather than replaced by the
        // defaults: validating against keys nobody asked for hides the typo.
        match serde_json::from_slice::<Config>(&conf) {
            Ok(config) => {
                self.required = config.required_keys.into();
                true
            }
            Err(err) => {
                log::warn!("json_validation: bad plugin configuration: {err}");
                false
            }
        }
    }

    fn create_http_context(&self, _: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Validation {
            required: Rc::clone(&self.required),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Validation {
    required: Rc<[String]>,
}

impl Validation {
    fn is_valid(&self, body: &[u8]) -> bool {
        match serde_json::from_slice::<serde_json::Value>(body) {
            Ok(serde_json::Value::Object(object)) => {
                self.required.iter().all(|key| object.contains_key(key))
            }
            _ => false,
        }
    }

    fn reject(&self, body: &[u8]) -> Action {
        self.send_http_response(403, vec![("content-type", "text/plain")], Some(body));
        Action::Pause
    }
}

/// Whether a content-type names JSON. Parameters such as `; charset=utf-8`
/// are ignored: they do not change what the body is.
fn is_json(content_type: &str) -> bool {
    let media_type = content_type.split(';').next().unwrap_or_default().trim();
    media_type.eq_ignore_ascii_case("application/json")
}

impl Context for Validation {}

impl HttpContext for Validation {
    fn on_http_request_headers(&mut self, _: usize, end_of_stream: bool) -> Action {
        let content_type = self.get_http_request_header("content-type");
        if !content_type.as_deref().is_some_and(is_json) {
            return self.reject(b"content-type must be application/json\n");
        }
        // With no body to come, on_http_request_body is never called; an
        // empty body is not a JSON object, so decide here.
        if end_of_stream {
            return self.reject(b"invalid payload\n");
        }
        Action::Continue
    }

    fn on_http_request_body(&mut self, _body_size: usize, end_of_stream: bool) -> Action {
        if !end_of_stream {
            // Keep the host buffering until the body is complete.
            return Action::Pause;
        }
        let body = self
            .get_http_request_body(0, usize::MAX)
            .unwrap_or_default();
        if !self.is_valid(&body) {
            return self.reject(b"invalid payload\n");
        }
        Action::Continue
    }
}
