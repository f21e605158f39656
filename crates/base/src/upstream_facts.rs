//! What is known of an upstream (Envoy's cluster) without sending to it:
//! its name in Envoy's form and its nodes. The upstream crate makes one per
//! upstream when the configuration loads; a filtered request's exchange
//! shares it, and the Proxy-Wasm host reads `cluster_name`,
//! `upstream.num_endpoints` (and, for an upstream of one node,
//! `upstream.address`) from it only when a filter asks.

use std::sync::Arc;

#[derive(Debug, Default)]
pub struct UpstreamFacts {
    /// `outbound|<port of its first node>||<name>`, as Envoy and Higress
    /// name clusters (Higress's `_match_service_` rules parse it).
    pub cluster_name: String,
    /// Each node's address as configured (`host:port`), in order.
    pub nodes: Vec<Arc<str>>,
}

impl UpstreamFacts {
    /// The address of the only node, when there is one node: the node any
    /// request to it went to.
    pub fn only_node(&self) -> Option<&str> {
        match self.nodes.as_slice() {
            [only] => Some(only),
            _ => None,
        }
    }
}
