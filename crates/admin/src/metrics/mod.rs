//! `/metrics`: everything in the Prometheus text format. Families, in order:
//! configuration reloads, the engine's instance allocator, TLS (handshakes,
//! certificates), routes, upstream nodes, plugins, Proxy-Wasm shared data and
//! queues, services (Redis, PostgreSQL), then the metrics Proxy-Wasm plugins
//! defined themselves.
//!
//! [`render`] writes them in that order; each family's rendering lives with
//! its neighbours by subject:
//!
//! - [`node`]: configuration reloads, the slow lane, the instance allocator.
//! - [`connections`]: TLS, listeners, upgraded connections (tunnels).
//! - [`telemetry`]: the access log and traces.
//! - [`traffic`]: routes and upstream nodes.
//! - [`plugins`]: plugin instance sets and Proxy-Wasm shared state.
//! - [`services`]: Redis and PostgreSQL services.
//! - [`guest`]: the metrics Proxy-Wasm plugins defined themselves.
//! - [`text`]: the text format's pieces (a family's header, a histogram,
//!   label escaping).

mod connections;
mod guest;
mod node;
mod plugins;
mod services;
mod telemetry;
mod text;
mod traffic;

use wasmgate_gateway::LiveGateway;

pub use traffic::route_families;

use connections::{listener_metrics, tls_metrics, tunnel_metrics};
use guest::guest_defined_metrics;
use node::{instance_pool_metrics, long_call_metrics, reload_metrics};
use plugins::{plugin_metrics, shared_state_metrics};
use services::service_metrics;
use telemetry::{access_log_metrics, trace_metrics};
use traffic::{route_metrics, upstream_metrics};

pub fn render(live: &LiveGateway) -> String {
    let gateway = live.current();
    let mut out = String::new();
    reload_metrics(live, &mut out);
    instance_pool_metrics(live, &mut out);
    long_call_metrics(&mut out);
    tls_metrics(&gateway, &mut out);
    listener_metrics(&mut out);
    tunnel_metrics(&mut out);
    access_log_metrics(&mut out);
    trace_metrics(&mut out);
    route_metrics(&gateway, &mut out);
    upstream_metrics(&gateway, &mut out);
    plugin_metrics(&gateway, &mut out);
    shared_state_metrics(&mut out);
    service_metrics(live, &mut out);
    guest_defined_metrics(&mut out);
    out
}
