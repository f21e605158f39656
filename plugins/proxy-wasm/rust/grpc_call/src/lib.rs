//! A filter that makes a unary gRPC call (`dispatch_grpc_call`) to method
//! `test.Echo/Unary` of the upstream its `conf` names, and answers the
//! request with what came back (tests: crates/cli/tests/grpc_call.rs).
//!
//! Request headers steer it: `x-grpc-message` is the message sent,
//! `x-grpc-meta` goes as initial metadata `x-meta`, `x-grpc-timeout-ms` is
//! the call's deadline (default 5000), and `x-grpc-cancel-first: yes`
//! dispatches a call with `x-grpc-first` first and cancels it at once.
//! The answer is 200 with the reply as body and `x-grpc-status: 0`, or 502
//! with the status code in `x-grpc-status` and its message as body.

use std::time::Duration;

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(Root { upstream: String::new() })
    });
}}

struct Root {
    upstream: String,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        self.upstream = self
            .get_plugin_configuration()
            .map(|c| String::from_utf8_lossy(&c).trim().to_string())
            .unwrap_or_default();
        !self.upstream.is_empty()
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Call {
            upstream: self.upstream.clone(),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Call {
    upstream: String,
}

impl Call {
    fn dispatch(&self, message: &[u8], meta: &[u8], timeout: Duration) -> Result<u32, String> {
        let metadata: Vec<(&str, &[u8])> = if meta.is_empty() {
            Vec::new()
        } else {
            vec![("x-meta", meta)]
        };
        self.dispatch_grpc_call(
            &self.upstream,
            "test.Echo",
            "Unary",
            metadata,
            Some(message),
            timeout,
        )
        .map_err(|status| format!("dispatch refused: {status:?}"))
    }
}

impl Context for Call {
    fn on_grpc_call_response(&mut self, _token_id: u32, status_code: u32, response_size: usize) {
        let status = status_code.to_string();
        if status_code == 0 {
            let body = self
                .get_grpc_call_response_body(0, response_size)
                .unwrap_or_default();
            self.send_http_response(200, vec![("x-grpc-status", &status)], Some(&body));
        } else {
            let (_, message) = self.get_grpc_status();
            let message = message.unwrap_or_default();
            self.send_http_response(
                502,
                vec![("x-grpc-status", &status)],
                Some(message.as_bytes()),
            );
        }
    }
}

impl HttpContext for Call {
    fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        let header = |name: &str| self.get_http_request_header(name).unwrap_or_default();
        let timeout = header("x-grpc-timeout-ms").parse().unwrap_or(5000);
        let timeout = Duration::from_millis(timeout);
        if header("x-grpc-cancel-first") == "yes" {
            match self.dispatch(header("x-grpc-first").as_bytes(), b"", timeout) {
                Ok(token) => self.cancel_grpc_call(token),
                Err(reason) => {
                    self.send_http_response(500, vec![], Some(reason.as_bytes()));
                    return Action::Pause;
                }
            }
        }
        let message = header("x-grpc-message");
        let meta = header("x-grpc-meta");
        match self.dispatch(message.as_bytes(), meta.as_bytes(), timeout) {
            Ok(_) => Action::Pause,
            Err(reason) => {
                self.send_http_response(500, vec![], Some(reason.as_bytes()));
                Action::Pause
            }
        }
    }
}
