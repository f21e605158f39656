//! A Proxy-Wasm authorization filter that asks an upstream (proxy-wasm Rust SDK
//! 0.2.5). Every request is held while `GET /bytes/1` is sent to the upstream
//! named by plugin configuration `{"upstream":"<name>"}` (default `auth`),
//! forwarding the request's `x-token` header. If the answer's body is
//! non-empty and its last byte is even the request goes on with
//! `x-auth: allowed`; otherwise it is answered locally with 403 and
//! `x-auth: denied`. When the call cannot even be dispatched the answer is 503.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};
use serde::Deserialize;
use std::rc::Rc;
use std::time::Duration;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(AuthRoot { upstream: Rc::from(DEFAULT_UPSTREAM) })
    });
}}

const DEFAULT_UPSTREAM: &str = "auth";
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Deserialize)]
struct Config {
    #[serde(default = "default_upstream")]
    upstream: String,
}

fn default_upstream() -> String {
    DEFAULT_UPSTREAM.to_string()
}

struct AuthRoot {
    upstream: Rc<str>,
}

impl Context for AuthRoot {}

impl RootContext for AuthRoot {
    fn on_configure(&mut self, _: usize) -> bool {
        // No configuration at all means "use the default upstream"; a
        // configuration that is there but malformed is a mistake worth
        // refusing rather than silently authorizing against `auth`.
        let conf = match self.get_plugin_configuration() {
            Some(conf) if !conf.is_empty() => conf,
            _ => {
                self.upstream = Rc::from(DEFAULT_UPSTREAM);
                return true;
            }
        };
        match serde_json::from_slice::<Config>(&conf) {
            Ok(config) => {
                self.upstream = Rc::from(config.upstream);
                true
            }
            Err(err) => {
                log::warn!("http_auth_random: bad plugin configuration: {err}");
                false
            }
        }
    }

    fn create_http_context(&self, _: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Auth {
            upstream: Rc::clone(&self.upstream),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Auth {
    upstream: Rc<str>,
}

impl Context for Auth {
    fn on_http_call_response(&mut self, _token: u32, _: usize, body_size: usize, _: usize) {
        let body = self
            .get_http_call_response_body(0, body_size)
            .unwrap_or_default();
        // An empty body (failed or timed-out call) counts as a denial: the
        // decision must be positive to let the request through.
        match body.last() {
            Some(byte) if byte % 2 == 0 => {
                self.add_http_request_header("x-auth", "allowed");
                self.resume_http_request();
            }
            _ => {
                // Why the decision was negative: 0 when the service answered,
                // another gRPC-style code (and a reason) when the call failed.
                let (code, reason) = self.get_grpc_status();
                let status = format!("{code} {}", reason.unwrap_or_default());
                self.send_http_response(
                    403,
                    vec![("x-auth", "denied"), ("x-callout-status", status.trim_end())],
                    Some(b"Access forbidden.\n"),
                )
            }
        }
    }
}

impl HttpContext for Auth {
    fn on_http_request_headers(&mut self, _: usize, _: bool) -> Action {
        let token = self.get_http_request_header("x-token").unwrap_or_default();
        let dispatched = self.dispatch_http_call(
            &self.upstream,
            vec![
                (":method", "GET"),
                (":path", "/bytes/1"),
                (":authority", "auth"),
                ("x-token", &token),
            ],
            None,
            vec![],
            CALL_TIMEOUT,
        );
        if let Err(status) = dispatched {
            log::warn!(
                "http_auth_random: dispatch to {} failed: {status:?}",
                self.upstream
            );
            self.send_http_response(503, vec![], Some(b"auth upstream unavailable\n"));
        }
        // Held either way: until the callout answers, or for good because a
        // local reply has been sent.
        Action::Pause
    }
}
