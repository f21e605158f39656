//! A wasmgate node that follows a Kubernetes API server as a Gateway API
//! implementation (docs/kubernetes.md): `config: {kubernetes: {...}}` in
//! the node's file. The Gateway API resources of its GatewayClass, and the
//! Services' EndpointSlices, are turned into routes and upstreams
//! (`translate.rs`), WasmPlugin resources into plugins and filter chains
//! (`plugins.rs`), applied through the node's one build-and-swap
//! (`store.rs`), and their status written back (`status.rs`) by the one
//! replica that holds the Lease (`leader.rs`). The
//! Kubernetes client is kube-rs; the Gateway API types are the kube-rs
//! project's `gateway-api` crate.

mod attachment;
mod backend_tls;
mod backends;
mod grpcroute;
mod hosts;
mod httproute;
mod leader;
mod listeners;
mod model;
mod names;
mod place;
mod plugins;
mod pull_secrets;
mod ranking;
mod route_view;
mod rule_filters;
mod rules;
mod secrets;
mod services;
mod status;
mod store;
mod translate;
pub mod wasmplugin;
mod watches;

use std::path::Path;
use std::sync::Arc;

use wasmgate_config::GatewayConfig;
use wasmgate_gateway::{Gateway, LiveGateway};

pub use model::{Snapshot, Translation};
pub use route_view::RouteKind;
pub use store::KubernetesStore;
pub use translate::translate;
pub use wasmplugin::WasmPlugin;

/// Starts a node whose routes come from the API server: it answers 503
/// (and `/readyz` 503) until the first snapshot is applied, then serves it
/// and follows every change.
pub async fn start(
    node: GatewayConfig,
    file: &Path,
    runtime: wasmgate_runtime::Runtime,
) -> Result<Arc<LiveGateway>, String> {
    let source = (node.config.as_ref())
        .and_then(|c| c.kubernetes.clone())
        .ok_or("the node's file has no `config.kubernetes` section")?;
    let base = wasmgate_base::paths::config_dir(file);
    let client = store::client(&source, base)
        .await
        .map_err(|e| format!("connecting to the Kubernetes API server: {e:#}"))?;
    let gateway = Gateway::build(node.clone(), file, &runtime, None)
        .await
        .map_err(|e| e.to_string())?;
    let live = Arc::new(LiveGateway::new(gateway, file, runtime));
    live.set_waiting("waiting for the Kubernetes API server (docs/kubernetes.md)");
    let store = KubernetesStore::new(node, &source, client, &live);
    live.set_store(store.clone());
    tokio::spawn(store.run());
    Ok(live)
}
