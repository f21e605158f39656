//! A Proxy-Wasm shared queue producer and consumer (proxy-wasm Rust SDK
//! 0.2.5). The root context registers queue `messages`; every request enqueues
//! its `:path` there. When the host reports the queue ready, the root drains
//! it, counting each item in shared data `received` (a decimal string, updated
//! with compare-and-swap) and keeping the latest in `last_message`. Every
//! response reports both as `x-received` and `x-last-message`.
//!
//! The queue is drained asynchronously, so a response may or may not already
//! count its own request.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel, Status};

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(QueueRoot) });
}}

const QUEUE: &str = "messages";
const RECEIVED: &str = "received";
const LAST_MESSAGE: &str = "last_message";

fn parse(value: Option<&[u8]>) -> u64 {
    value
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

struct QueueRoot;

impl QueueRoot {
    /// Adds one to `received`. Every instance drains the same queue and
    /// writes the same key, so the update retries until its CAS holds.
    fn count_one(&self) {
        loop {
            let (value, cas) = self.get_shared_data(RECEIVED);
            let next = parse(value.as_deref()) + 1;
            match self.set_shared_data(RECEIVED, Some(next.to_string().as_bytes()), cas) {
                Ok(()) => return,
                Err(Status::CasMismatch) => continue,
                Err(status) => {
                    log::warn!("shared_queue: set_shared_data: {status:?}");
                    return;
                }
            }
        }
    }
}

impl Context for QueueRoot {}

impl RootContext for QueueRoot {
    fn on_configure(&mut self, _: usize) -> bool {
        // Registering makes this root the one the host notifies through
        // on_queue_ready; the id is not kept because on_queue_ready names it.
        self.register_shared_queue(QUEUE);
        true
    }

    fn on_queue_ready(&mut self, queue_id: u32) {
        // One notification may stand for several items: drain until empty.
        loop {
            match self.dequeue_shared_queue(queue_id) {
                Ok(Some(item)) => {
                    self.count_one();
                    // Last writer wins by design: no CAS for a "latest" value.
                    if let Err(status) = self.set_shared_data(LAST_MESSAGE, Some(&item), None) {
                        log::warn!("shared_queue: storing last_message: {status:?}");
                    }
                }
                Ok(None) => return,
                Err(status) => {
                    log::warn!("shared_queue: dequeue: {status:?}");
                    return;
                }
            }
        }
    }

    fn create_http_context(&self, _: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Queue))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Queue;

impl Context for Queue {}

impl HttpContext for Queue {
    fn on_http_request_headers(&mut self, _: usize, _: bool) -> Action {
        // Resolved per request, as a producer that is not the registering
        // root would: vm_id "" means this VM's own queues.
        let Some(queue) = self.resolve_shared_queue("", QUEUE) else {
            log::warn!("shared_queue: queue {QUEUE} not found");
            return Action::Continue;
        };
        let path = self.get_http_request_header(":path").unwrap_or_default();
        if let Err(status) = self.enqueue_shared_queue(queue, Some(path.as_bytes())) {
            log::warn!("shared_queue: enqueue: {status:?}");
        }
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _: usize, _: bool) -> Action {
        let (received, _) = self.get_shared_data(RECEIVED);
        let (last, _) = self.get_shared_data(LAST_MESSAGE);
        self.add_http_response_header("x-received", &parse(received.as_deref()).to_string());
        let last = last
            .map(|v| String::from_utf8_lossy(&v).into_owned())
            .unwrap_or_default();
        self.add_http_response_header("x-last-message", &last);
        Action::Continue
    }
}
