//! wasmgate's HTTP front.
//!
//! [`listener`] accepts connections and drives HTTP/1.1 keep-alive with
//! hyper, with graceful shutdown; a [`Handler`] answers each request. Today the
//! only handler is [`FunctionRoute`] (`wasmgate serve`): one Extism plugin,
//! whose functions are called with the request body as input. The gateway's
//! routes and Proxy-Wasm filter chains plug in as further handlers on the same
//! listener.

pub mod error_response;
mod function_route;
pub mod listener;

pub use function_route::{FunctionRoute, FunctionRouteConfig};
pub use listener::{serve, Handler, ListenerConfig};
