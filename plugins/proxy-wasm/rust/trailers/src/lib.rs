//! Reads and edits trailers: when a request or a response ends with
//! trailers, rewrites its `x-checksum` trailer to
//! `<value>; seen-by=filter; trailers=<count>`.

use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;

proxy_wasm::main! {{
    proxy_wasm::set_http_context(|_, _| -> Box<dyn HttpContext> { Box::new(Trailers) });
}}

struct Trailers;

impl Context for Trailers {}

impl HttpContext for Trailers {
    fn on_http_request_trailers(&mut self, count: usize) -> Action {
        let seen = mark(self.get_http_request_trailer("x-checksum"), count);
        self.set_http_request_trailer("x-checksum", Some(&seen));
        Action::Continue
    }

    fn on_http_response_trailers(&mut self, count: usize) -> Action {
        let seen = mark(self.get_http_response_trailer("x-checksum"), count);
        self.set_http_response_trailer("x-checksum", Some(&seen));
        Action::Continue
    }
}

/// The rewritten checksum: what came in, marked as seen, with the count.
fn mark(checksum: Option<String>, count: usize) -> String {
    let checksum = checksum.unwrap_or_else(|| "none".to_string());
    format!("{checksum}; seen-by=filter; trailers={count}")
}
