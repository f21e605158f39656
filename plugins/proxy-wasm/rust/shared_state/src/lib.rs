//! Shared data, a shared queue and a metric (proxy-wasm Rust SDK 0.2.5): every
//! request increments the VM-wide counter `hits` with compare-and-swap (so
//! concurrent instances never lose an update), answers its new value in
//! response header `x-hits`, enqueues its path on queue `paths`, and counts
//! itself in counter metric `shared_state_requests`.

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, MetricType, Status};

proxy_wasm::main! {{
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(Root { queue: 0, metric: 0 })
    });
}}

struct Root {
    queue: u32,
    metric: u32,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, _: usize) -> bool {
        self.queue = self.register_shared_queue("paths");
        self.metric = hostcalls::define_metric(MetricType::Counter, "shared_state_requests").unwrap();
        true
    }

    fn create_http_context(&self, _: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Counter {
            queue: self.queue,
            metric: self.metric,
            hits: 0,
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Counter {
    queue: u32,
    metric: u32,
    hits: u64,
}

impl Context for Counter {}

impl Counter {
    fn increment(&self) -> u64 {
        loop {
            let (value, cas) = self.get_shared_data("hits");
            let current = value
                .map(|v| u64::from_le_bytes(v.try_into().unwrap_or_default()))
                .unwrap_or(0);
            let next = current + 1;
            match self.set_shared_data("hits", Some(&next.to_le_bytes()), cas) {
                Ok(()) => return next,
                Err(Status::CasMismatch) => continue,
                Err(status) => panic!("set_shared_data: {status:?}"),
            }
        }
    }
}

impl HttpContext for Counter {
    fn on_http_request_headers(&mut self, _: usize, _: bool) -> Action {
        self.hits = self.increment();
        let path = self.get_http_request_header(":path").unwrap_or_default();
        self.enqueue_shared_queue(self.queue, Some(path.as_bytes())).unwrap();
        hostcalls::increment_metric(self.metric, 1).unwrap();
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _: usize, _: bool) -> Action {
        self.set_http_response_header("x-hits", Some(&self.hits.to_string()));
        Action::Continue
    }
}
