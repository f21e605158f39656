//! What the driver (`translate.rs`) hands the translation of a route's
//! rules (`rules.rs`): where the route is served, and where what its rules
//! use is counted for the statuses.

use std::collections::{BTreeMap, BTreeSet};

use wasmgate_config::Scheme;

use crate::backend_tls::TlsPolicies;
use crate::model::RouteKey;
use crate::plugins::WasmPlugins;

/// Where a route is served: its hosts (empty: any), its scheme (None:
/// both), the node's ports (empty: any), the Gateways that accepted it and
/// the WasmPlugins that may apply.
pub(crate) struct Place<'a> {
    pub(crate) hosts: Vec<String>,
    pub(crate) scheme: Option<Scheme>,
    pub(crate) ports: Vec<u16>,
    pub(crate) gateways: &'a [(String, String)],
    pub(crate) plugins: &'a WasmPlugins<'a>,
    pub(crate) tls: &'a TlsPolicies,
}

/// What a route's rules use, for the statuses: the routes each plugin
/// runs on, and the Gateways each BackendTLSPolicy (by index) is used by.
pub(crate) struct Used<'a> {
    pub(crate) plugins: &'a mut BTreeMap<String, BTreeSet<RouteKey>>,
    pub(crate) policies: &'a mut BTreeMap<usize, BTreeSet<(String, String)>>,
}
