//! A Proxy-Wasm timer (proxy-wasm Rust SDK 0.2.5): the root context asks for
//! a tick every 50 ms and each tick adds one to the VM-wide counter `ticks` in
//! shared data (a decimal string, updated with compare-and-swap). Every
//! response reports the counter's current value in `x-ticks` (0 before the
//! first tick).
//!
//! Every instance of the VM has its own root context and so its own timer: with
//! several pooled instances the counter grows by one per tick per instance.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel, Status};
use std::time::Duration;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(TickRoot) });
}}

const KEY: &str = "ticks";
const PERIOD: Duration = Duration::from_millis(50);

/// The counter as stored; anything unreadable counts as 0 so that one bad
/// write cannot wedge the counter for good.
fn parse(value: Option<&[u8]>) -> u64 {
    value
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

struct TickRoot;

impl Context for TickRoot {}

impl RootContext for TickRoot {
    fn on_configure(&mut self, _: usize) -> bool {
        self.set_tick_period(PERIOD);
        true
    }

    fn on_tick(&mut self) {
        // Other instances tick too and write the same key: read-modify-write
        // under the CAS token, retrying when someone else won the race.
        loop {
            let (value, cas) = self.get_shared_data(KEY);
            let next = parse(value.as_deref()) + 1;
            match self.set_shared_data(KEY, Some(next.to_string().as_bytes()), cas) {
                Ok(()) => return,
                Err(Status::CasMismatch) => continue,
                Err(status) => {
                    log::warn!("tick: set_shared_data: {status:?}");
                    return;
                }
            }
        }
    }

    fn create_http_context(&self, _: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Tick))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Tick;

impl Context for Tick {}

impl HttpContext for Tick {
    fn on_http_response_headers(&mut self, _: usize, _: bool) -> Action {
        let (value, _) = self.get_shared_data(KEY);
        self.add_http_response_header("x-ticks", &parse(value.as_deref()).to_string());
        Action::Continue
    }
}
