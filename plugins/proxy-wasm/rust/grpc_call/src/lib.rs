//! A filter that makes a unary gRPC call (`dispatch_grpc_call`) to method
//! `test.Echo/Unary` of the upstream its `conf` names, and answers the
//! request with what came back (tests: crates/cli/tests/e2e/grpc_call.rs).
//!
//! Request headers steer it: `x-grpc-message` is the message sent,
//! `x-grpc-meta` goes as initial metadata `x-meta`, `x-grpc-timeout-ms` is
//! the call's deadline (default 5000), and `x-grpc-cancel-first: yes`
//! dispatches a call with `x-grpc-first` first and cancels it at once.
//! The answer is 200 with the reply as body and `x-grpc-status: 0`, or 502
//! with the status code in `x-grpc-status` and its message as body.
//!
//! With `x-grpc-stream: METHOD` it opens a stream to `test.Echo/METHOD`
//! instead (`open_grpc_stream`), sends each of the comma-separated
//! `x-grpc-messages` and ends its side with the last one (or with
//! `close_grpc_stream` when `x-grpc-end: close`). The answer, once the
//! stream closes, is 200 with a line per event it heard: `initial
//! content-type=...`, `message TEXT`, `trailing x-trailer=...`, `close CODE
//! MESSAGE`. `x-grpc-cancel-first: yes` opens a stream first and cancels it
//! at once: nothing of it may be heard (a line `stray` says otherwise).
//!
//! With `conf` `UPSTREAM root-stream`, the root context opens a
//! bidirectional stream on its first tick, sends `from-root` and keeps the
//! stream open; what it hears is kept in shared data `root-heard`, which a
//! request with `x-grpc-root: yes` gets as its answer.

use std::time::Duration;

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(Root { upstream: String::new(), root_stream: None })
    });
}}

struct Root {
    upstream: String,
    /// `Some(opened)` in `root-stream` mode.
    root_stream: Option<bool>,
}

/// Adds `line` to what the root's stream heard (shared data `root-heard`).
fn root_heard(line: &str) {
    let (heard, cas) = hostcalls::get_shared_data("root-heard").unwrap_or((None, None));
    let mut heard = heard
        .map(|h| String::from_utf8_lossy(&h).into_owned())
        .unwrap_or_default();
    heard.push_str(line);
    heard.push('\n');
    let _ = hostcalls::set_shared_data("root-heard", Some(heard.as_bytes()), cas);
}

impl Context for Root {
    fn on_grpc_stream_message(&mut self, _token_id: u32, message_size: usize) {
        let message = self
            .get_grpc_stream_message(0, message_size)
            .unwrap_or_default();
        root_heard(&format!("message {}", String::from_utf8_lossy(&message)));
    }

    fn on_grpc_stream_close(&mut self, _token_id: u32, status_code: u32) {
        root_heard(&format!("close {status_code}"));
    }
}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        let conf = self
            .get_plugin_configuration()
            .map(|c| String::from_utf8_lossy(&c).trim().to_string())
            .unwrap_or_default();
        let mut words = conf.split_whitespace();
        self.upstream = words.next().unwrap_or_default().to_string();
        if words.next() == Some("root-stream") {
            self.root_stream = Some(false);
            self.set_tick_period(Duration::from_millis(20));
        }
        !self.upstream.is_empty()
    }

    fn on_tick(&mut self) {
        if self.root_stream != Some(false) {
            return;
        }
        self.root_stream = Some(true);
        match self.open_grpc_stream(&self.upstream, "test.Echo", "Bidi", vec![]) {
            Ok(token) => self.send_grpc_stream_message(token, Some(b"from-root"), false),
            Err(status) => root_heard(&format!("open refused: {status:?}")),
        }
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Call {
            upstream: self.upstream.clone(),
            stream: None,
            heard: Vec::new(),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Call {
    upstream: String,
    /// The stream whose events are answered, and the events heard.
    stream: Option<u32>,
    heard: Vec<String>,
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

    /// Opens a stream to `method`, sends `messages` and ends its side.
    fn stream(&mut self, method: &str, messages: &str, end_by_close: bool) -> Result<u32, String> {
        let token = self
            .open_grpc_stream(&self.upstream, "test.Echo", method, vec![("x-meta", b"s")])
            .map_err(|status| format!("open refused: {status:?}"))?;
        let messages: Vec<&str> = messages.split(',').filter(|m| !m.is_empty()).collect();
        for (i, message) in messages.iter().enumerate() {
            let last = i + 1 == messages.len() && !end_by_close;
            self.send_grpc_stream_message(token, Some(message.as_bytes()), last);
        }
        if end_by_close || messages.is_empty() {
            self.close_grpc_stream(token);
        }
        Ok(token)
    }

    fn hear(&mut self, token: u32, line: String) {
        if self.stream == Some(token) {
            self.heard.push(line);
        } else {
            self.heard.push(format!("stray {token}: {line}"));
        }
    }
}

fn pairs(metadata: Vec<(String, Vec<u8>)>, name: &str) -> String {
    metadata
        .into_iter()
        .filter(|(n, _)| n == name)
        .map(|(n, v)| format!("{n}={}", String::from_utf8_lossy(&v)))
        .collect::<Vec<_>>()
        .join(" ")
}

impl Context for Call {
    fn on_grpc_stream_initial_metadata(&mut self, token_id: u32, _num_elements: u32) {
        let line = pairs(self.get_grpc_stream_initial_metadata(), "content-type");
        self.hear(token_id, format!("initial {line}"));
    }

    fn on_grpc_stream_message(&mut self, token_id: u32, message_size: usize) {
        let message = self
            .get_grpc_stream_message(0, message_size)
            .unwrap_or_default();
        let line = format!("message {}", String::from_utf8_lossy(&message));
        self.hear(token_id, line);
    }

    fn on_grpc_stream_trailing_metadata(&mut self, token_id: u32, _num_elements: u32) {
        let line = pairs(self.get_grpc_stream_trailing_metadata(), "x-trailer");
        self.hear(token_id, format!("trailing {line}"));
    }

    fn on_grpc_stream_close(&mut self, token_id: u32, status_code: u32) {
        let (_, message) = self.get_grpc_status();
        let line = format!("close {status_code} {}", message.unwrap_or_default());
        self.hear(token_id, line);
        if self.stream == Some(token_id) {
            let body = self.heard.join("\n");
            self.send_http_response(200, vec![], Some(body.as_bytes()));
        }
    }

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
        if header("x-grpc-root") == "yes" {
            let heard = hostcalls::get_shared_data("root-heard")
                .ok()
                .and_then(|(heard, _)| heard)
                .unwrap_or_default();
            self.send_http_response(200, vec![], Some(&heard));
            return Action::Pause;
        }
        let method = header("x-grpc-stream");
        if !method.is_empty() {
            let end_by_close = header("x-grpc-end") == "close";
            let messages = header("x-grpc-messages");
            let opened = match header("x-grpc-cancel-first").as_str() {
                "yes" => self
                    .stream(&method, &messages, end_by_close)
                    .map(|first| self.cancel_grpc_stream(first)),
                _ => Ok(()),
            };
            match opened.and_then(|()| self.stream(&method, &messages, end_by_close)) {
                Ok(token) => self.stream = Some(token),
                Err(reason) => self.send_http_response(500, vec![], Some(reason.as_bytes())),
            }
            return Action::Pause;
        }
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
