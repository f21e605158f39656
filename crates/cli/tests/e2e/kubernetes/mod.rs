//! A wasmgate node following a real Kubernetes API server (docs/kubernetes.md):
//! kube-apiserver v1.34.2 built from source on an etcd of its own, the
//! Gateway API v1.5.1 CRDs installed, resources created through the API as
//! `kubectl apply` would, and real HTTP through the node to upstream
//! processes that Services' EndpointSlices point at. Routes appear, split
//! by weight, answer 500 for a missing backend and go away; statuses say
//! why; the API server killed under load fails no request. WasmPlugins
//! (a Higress-framework filter built from source) run on their routes with
//! per-route and per-domain configuration; one that does not load fails
//! only its own routes; two replicas agree on one status writer. The API
//! server restarted: the watches say so in /status and come back at once.
//!
//! One module a concern: Gateway API routes and listeners, WasmPlugins and
//! wasmgate's own extensions, what a node may do (RBAC, namespaces), and
//! backends (TLS policies, services from a ConfigMap).

mod backends;
mod permissions;
mod routes;
mod wasm_plugins;

use crate::common::gateway::{send, GatewayProc};
use crate::common::HttpClient;

/// A GET of `path` through `gw` with Host `host`.
async fn get_host(
    c: &HttpClient,
    gw: &GatewayProc,
    path: &str,
    host: &str,
) -> crate::common::Reply {
    send(c, "GET", &gw.url(path), &[("host", host)], "").await
}
