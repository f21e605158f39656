//! A Proxy-Wasm body rewriting filter (proxy-wasm Rust SDK 0.2.5). Both bodies
//! are buffered whole by the host before they are inspected:
//! - a response body that contains the bytes `secret` is replaced with
//!   `Original message body (<N> bytes) redacted.\n`, N being its length;
//! - a request body that contains `secret` is replaced with `redacted`, so the
//!   upstream only ever sees the rewritten body.
//!
//! Bodies without `secret` pass through untouched. `content-length` is removed
//! from both directions' headers because the body may change size.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType};

proxy_wasm::main! {{
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(HttpBodyRoot) });
}}

const NEEDLE: &[u8] = b"secret";

fn contains_secret(body: &[u8]) -> bool {
    body.windows(NEEDLE.len()).any(|w| w == NEEDLE)
}

struct HttpBodyRoot;

impl Context for HttpBodyRoot {}

impl RootContext for HttpBodyRoot {
    fn create_http_context(&self, _: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(HttpBody))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct HttpBody;

impl Context for HttpBody {}

impl HttpContext for HttpBody {
    fn on_http_request_headers(&mut self, _: usize, _: bool) -> Action {
        // The request body may be rewritten to a different size; a stale
        // content-length would make the upstream wait for (or cut off) bytes.
        self.remove_http_request_header("content-length");
        Action::Continue
    }

    fn on_http_request_body(&mut self, _body_size: usize, end_of_stream: bool) -> Action {
        if !end_of_stream {
            // Pausing on every chunk makes the host keep buffering, so the
            // last call sees the whole body, not only its final chunk.
            return Action::Pause;
        }
        // Ask for everything buffered rather than trusting `body_size`, which
        // some hosts report per chunk.
        let body = self
            .get_http_request_body(0, usize::MAX)
            .unwrap_or_default();
        if contains_secret(&body) {
            self.set_http_request_body(0, body.len(), b"redacted");
        }
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _: usize, _: bool) -> Action {
        // Same reason as for the request: the body may change length.
        self.remove_http_response_header("content-length");
        Action::Continue
    }

    fn on_http_response_body(&mut self, _body_size: usize, end_of_stream: bool) -> Action {
        if !end_of_stream {
            return Action::Pause;
        }
        let body = self
            .get_http_response_body(0, usize::MAX)
            .unwrap_or_default();
        if contains_secret(&body) {
            let replacement = format!("Original message body ({} bytes) redacted.\n", body.len());
            self.set_http_response_body(0, body.len(), replacement.as_bytes());
        }
        Action::Continue
    }
}
