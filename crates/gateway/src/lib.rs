//! wasmgate's data plane.
//!
//! The `wasmgate-transport` crate accepts connections (HTTP/1.1 and h2c,
//! TLS) with graceful shutdown and keeps upstream connections; a
//! [`Handler`] answers each request. Three handlers exist: [`FunctionRoute`] (`wasmgate serve`: one
//! Extism plugin, whose functions are called with the request body as
//! input), [`ComponentRoute`] (`wasmgate serve` for a `wasi:http`
//! component, which answers every request) and [`LiveGateway`] (`wasmgate run`: the [`Gateway`] built from a
//! `wasmgate_config::GatewayConfig` (`build/`), swapped whole by its one
//! reload function). The gateway's request path is `proxy.rs`, in order;
//! its endpoints are `endpoint/`; its upstreams (balancing, health,
//! retries) are the `wasmgate-upstream` crate, which filters' HTTP calls
//! reach through `http_call.rs`. What
//! operations read of it is [`stats`]; the admin API is a crate of its own.

mod access;
mod body_pump;
mod build;
mod chain;
mod component_route;
pub mod config_store;
mod endpoint;
mod function_route;
mod gateway;
mod http_call;
mod proxy;
pub mod reload;
pub mod request_id;
pub mod stats;

pub use build::background::enable as compile_components_in_background;
pub use component_route::{ComponentRoute, ComponentRouteConfig};
pub use function_route::{FunctionRoute, FunctionRouteConfig};
pub use gateway::{FilterStarting, Gateway};
pub use reload::{LiveGateway, ReloadStatus};
/// The gateway's own answers (a crate of their own).
pub use wasmgate_answers::error_response;
pub use wasmgate_oci::fetch::pulled_plugins_dir;
/// The body type every handler answers with (the transport's).
pub use wasmgate_transport::body;
pub use wasmgate_transport::listener::{
    serve, serve_workers, Connection, Handler, Http2Limits, ListenerConfig, Listening, Workers,
};
