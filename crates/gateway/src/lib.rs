//! wasmgate's HTTP front.
//!
//! [`listener`] accepts connections (HTTP/1.1 and h2c) with graceful
//! shutdown; a [`Handler`] answers each request. Two handlers exist:
//! [`FunctionRoute`] (`wasmgate serve`: one Extism plugin, whose functions
//! are called with the request body as input) and [`Gateway`] (`wasmgate
//! run`: routes, upstreams and Proxy-Wasm filter chains, built from a
//! [`config::GatewayConfig`]). The gateway's request path is in `proxy.rs`.

pub mod body;
mod build;
mod chain;
pub mod config_store;
mod endpoint;
pub mod error_response;
mod function_route;
mod gateway;
mod proxy;
pub mod reload;
pub mod request_id;
mod router;
pub mod stats;
pub mod transport;
mod upstream;

pub use function_route::{FunctionRoute, FunctionRouteConfig};
pub use gateway::Gateway;
pub use reload::{LiveGateway, ReloadStatus};
pub use transport::listener::{serve, serve_workers, Connection, Handler, ListenerConfig, Workers};
