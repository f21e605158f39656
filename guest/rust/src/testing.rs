//! Native builds only: stands in for the host, so a plugin's logic can be
//! unit-tested with `cargo test` (no wasm, no database).
//!
//! A handler installed with [`set_host`] receives every request of the
//! current thread as the host would (the import's name and the JSON request
//! bytes) and returns the answer bytes. Without one, every call answers
//! `{"error": {"kind": "unavailable", ...}}`.
//!
//! ```
//! use wasmgate_pdk::{raw::Function, redis, testing};
//!
//! testing::set_host(|function, _request| {
//!     assert_eq!(function, Function::Redis);
//!     br#"{"reply": 7}"#.to_vec()
//! });
//! assert_eq!(redis::incr("cache", "visits").unwrap(), 7);
//! testing::clear_host();
//! ```

use std::cell::RefCell;

use crate::raw::Function;

type Handler = Box<dyn FnMut(Function, &[u8]) -> Vec<u8>>;

thread_local! {
    static HOST: RefCell<Option<Handler>> = RefCell::new(None);
}

/// Answers this thread's calls with `handler` from now on.
pub fn set_host(handler: impl FnMut(Function, &[u8]) -> Vec<u8> + 'static) {
    HOST.with(|host| *host.borrow_mut() = Some(Box::new(handler)));
}

/// Removes this thread's handler.
pub fn clear_host() {
    HOST.with(|host| *host.borrow_mut() = None);
}

pub(crate) fn dispatch(function: Function, request: &[u8]) -> Vec<u8> {
    // The handler is taken out while it runs: a call made from inside it
    // answers `unavailable` instead of panicking on a double borrow, and a
    // handler it installs with set_host stays.
    let handler = HOST.with(|host| host.borrow_mut().take());
    match handler {
        Some(mut handler) => {
            let answer = handler(function, request);
            HOST.with(|host| {
                let mut host = host.borrow_mut();
                if host.is_none() {
                    *host = Some(handler);
                }
            });
            answer
        }
        None => serde_json::to_vec(&serde_json::json!({"error": {
            "kind": "unavailable",
            "message": format!(
                "wasmgate:host/services::{} exists only inside a wasm plugin; natively, install a handler with wasmgate_pdk::testing::set_host",
                function.name()
            ),
        }}))
        .expect("JSON values serialise"),
    }
}
