//! Many wasmgate nodes as one gateway (docs/cluster.md).
//!
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

pub use store::EtcdStore;
