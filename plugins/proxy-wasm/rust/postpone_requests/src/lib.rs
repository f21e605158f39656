//! A Proxy-Wasm filter that holds requests until the next tick (proxy-wasm
//! Rust SDK 0.2.5). Each request gets `x-postponed: true` and is paused; its
//! context id goes on a list owned by the root context. The root ticks every
//! 100 ms and resumes every request on the list, so requests get through
//! after about one tick.

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(PostponeRoot { waiting: Rc::default() })
    });
}}

const PERIOD: Duration = Duration::from_millis(100);

/// Context ids of paused requests. An instance runs on one thread, so a
/// plain `Rc<RefCell<..>>` shared by the root and its HTTP contexts is enough.
type Waiting = Rc<RefCell<Vec<u32>>>;

struct PostponeRoot {
    waiting: Waiting,
}

impl Context for PostponeRoot {}

impl RootContext for PostponeRoot {
    fn on_configure(&mut self, _: usize) -> bool {
        self.set_tick_period(PERIOD);
        true
    }

    fn on_tick(&mut self) {
        // Take the list first: resuming may run the streams' next callbacks
        // right away, and those must not find it borrowed.
        let ids = std::mem::take(&mut *self.waiting.borrow_mut());
        for id in ids {
            // Resume acts on the effective context, which during a tick is
            // the root; point it at the stream first. A stream that ended
            // meanwhile (client gone) is refused and skipped.
            if hostcalls::set_effective_context(id).is_err() {
                log::info!("postpone_requests: context {id} is gone");
                continue;
            }
            if let Err(status) = hostcalls::resume_http_request() {
                log::warn!("postpone_requests: resuming {id}: {status:?}");
            }
        }
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Postpone {
            context_id,
            waiting: Rc::clone(&self.waiting),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Postpone {
    context_id: u32,
    waiting: Waiting,
}

impl Context for Postpone {}

impl HttpContext for Postpone {
    fn on_http_request_headers(&mut self, _: usize, _: bool) -> Action {
        self.add_http_request_header("x-postponed", "true");
        self.waiting.borrow_mut().push(self.context_id);
        Action::Pause
    }
}

impl Drop for Postpone {
    // A stream can end (and its context be deleted) while still on the list;
    // forgetting it here keeps the next tick from resuming a dead context,
    // whose id the host may already have given to a new stream.
    fn drop(&mut self) {
        self.waiting
            .borrow_mut()
            .retain(|&id| id != self.context_id);
    }
}
