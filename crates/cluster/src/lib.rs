//! Many wasmgate nodes as one gateway (docs/cluster.md).
//!
//! - [`start`]: a node in etcd mode (`wasmgate run` on a node file with
//!   `config.etcd`), its own file checked by [`check_node_file`].
//! - [`store::EtcdStore`]: a node's configuration in etcd, one key per
//!   object ([`layout`]); loaded, watched and applied through the node's
//!   atomic reload; admin writes with compare-and-swap.
//! - [`nodes`]: every node registered under a lease; `GET /cluster`.
//! - [`push`]: `wasmgate config push`, a file's configuration into etcd.
//! - [`access`]: reaching etcd (TLS, a user) as a node's file says;
//!   [`seal`]: the objects sealed at rest with the nodes' keys.
//!
//! What must hold for the whole cluster (rate limits, counters) lives in
//! Redis, which filters reach through the host (docs/services.md); what
//! Proxy-Wasm keeps per VM (shared data, queues) stays per node, as in Envoy.

pub mod access;
pub mod layout;
pub mod nodes;
pub mod push;
pub mod seal;
pub mod store;

use std::path::Path;
use std::sync::Arc;

use wasmgate_config::GatewayConfig;
use wasmgate_gateway::{Gateway, LiveGateway};

pub use store::EtcdStore;

/// A node's own file, in etcd mode, holds only the node's settings.
pub fn check_node_file(config: &GatewayConfig) -> Result<(), String> {
    let held: Vec<&str> = [
        ("routes", config.routes.is_empty()),
        ("upstreams", config.upstreams.is_empty()),
        ("plugins", config.plugins.is_empty()),
        ("services", config.services.is_empty()),
        ("certificates", config.certificates.is_empty()),
        ("global_plugins", config.global_plugins.is_empty()),
    ]
    .into_iter()
    .filter(|(_, empty)| !empty)
    .map(|(section, _)| section)
    .collect();
    if held.is_empty() {
        return Ok(());
    }
    Err(format!(
        "this node's configuration comes from etcd (`config.etcd`), so its file holds only the node's own settings; move {} to etcd with `wasmgate config push`",
        held.join(", ")
    ))
}

/// Starts a node in etcd mode: it answers 503 (and `/readyz` 503) until the
/// configuration arrives from etcd (or its cache file), then serves it and
/// follows every change; it registers itself for `GET /cluster`.
pub async fn start(
    node: GatewayConfig,
    file: &Path,
    runtime: wasmgate_runtime::Runtime,
) -> Result<Arc<LiveGateway>, String> {
    check_node_file(&node)?;
    // Nothing to serve until etcd (or the cache file) gives a configuration:
    // the node answers 503 with the reason meanwhile (`set_waiting`).
    let gateway = Gateway::build(node.clone(), file, &runtime, None)
        .await
        .map_err(|e| e.to_string())?;
    let live = Arc::new(LiveGateway::new(gateway, file, runtime));
    live.set_waiting(&format!(
        "waiting for etcd ({}; docs/cluster.md)",
        node.config
            .as_ref()
            .map_or(String::new(), |c| c.etcd.join(", "))
    ));
    let store = EtcdStore::new(node, file, &live).map_err(|e| format!("{e:#}"))?;
    live.set_store(store.clone());
    tokio::spawn(store.clone().run());
    tokio::spawn(nodes::register(store));
    Ok(live)
}
