//! HTTPRoutes and GRPCRoutes as one shape: what attaching to a Gateway,
//! resolving backends, applying filters and ordering matches need. Each
//! kind is turned into it by its own module (`httproute.rs`,
//! `grpcroute.rs`), so `translate.rs` serves both with one path.

use std::collections::BTreeMap;

use wasmgate_config::{PathMatch, UpstreamProtocol};

/// The route kinds this node serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteKind {
    Http,
    Grpc,
}

impl RouteKind {
    pub fn name(self) -> &'static str {
        match self {
            RouteKind::Http => "HTTPRoute",
            RouteKind::Grpc => "GRPCRoute",
        }
    }

    /// What the backends speak unless their Service port's `appProtocol`
    /// says otherwise: gRPC needs HTTP/2, and a Service's gRPC port speaks
    /// it without TLS (prior knowledge), as Envoy Gateway assumes too.
    pub fn default_protocol(self) -> UpstreamProtocol {
        match self {
            RouteKind::Http => UpstreamProtocol::Http1,
            RouteKind::Grpc => UpstreamProtocol::H2c,
        }
    }
}

pub struct RouteView {
    pub kind: RouteKind,
    pub namespace: String,
    pub name: String,
    pub generation: Option<i64>,
    /// Creation time (seconds), the Gateway API's tie-breaker.
    pub created: i64,
    pub hostnames: Vec<String>,
    pub parents: Vec<ParentRef>,
    pub rules: Vec<RuleView>,
    /// What of the route this node cannot serve, said as the reason of its
    /// `Accepted=False`.
    pub unsupported: Option<String>,
    /// `status.parents` as written, to keep other controllers' entries.
    pub status_parents: Vec<serde_json::Value>,
}

pub struct ParentRef {
    pub group: Option<String>,
    pub kind: Option<String>,
    pub namespace: Option<String>,
    pub name: String,
    pub section_name: Option<String>,
    pub port: Option<i32>,
}

pub struct RuleView {
    /// Never empty: a rule without matches matches every request.
    pub matches: Vec<MatchView>,
    /// The rule's filters as JSON (their shapes are the same in both kinds).
    pub filters: Vec<serde_json::Value>,
    pub backends: Vec<BackendRef>,
}

/// One match of a rule, as the gateway's router takes it, with what the
/// Gateway API orders matches by.
#[derive(Clone)]
pub struct MatchView {
    pub path: PathMatch,
    /// Exact paths, then prefixes (or partial gRPC methods), then
    /// expressions.
    pub path_rank: u8,
    /// Longer first within a rank.
    pub length: i64,
    pub headers: BTreeMap<String, String>,
    pub methods: Vec<String>,
    /// Query parameters and their exact values.
    pub query: BTreeMap<String, String>,
    /// A `PathPrefix` match's prefix (what ReplacePrefixMatch replaces).
    pub prefix: Option<String>,
}

impl MatchView {
    /// Matches every request.
    pub fn any() -> MatchView {
        MatchView {
            path: PathMatch::default(),
            path_rank: 1,
            length: 1,
            headers: BTreeMap::new(),
            methods: Vec::new(),
            query: BTreeMap::new(),
            prefix: Some("/".into()),
        }
    }
}

pub struct BackendRef {
    pub group: Option<String>,
    pub kind: Option<String>,
    pub name: String,
    pub namespace: Option<String>,
    pub port: Option<i32>,
    pub weight: Option<i32>,
}

/// The filter types a rule of either kind may carry here.
pub fn filter_problem(kind: RouteKind, i: usize, filter: &serde_json::Value) -> Option<String> {
    let name = filter["type"].as_str().unwrap_or_default();
    let supported: &[&str] = match kind {
        RouteKind::Http => &[
            "RequestRedirect",
            "URLRewrite",
            "RequestHeaderModifier",
            "ResponseHeaderModifier",
            "RequestMirror",
        ],
        RouteKind::Grpc => &[
            "RequestHeaderModifier",
            "ResponseHeaderModifier",
            "RequestMirror",
        ],
    };
    if !supported.contains(&name) {
        return Some(format!(
            "rules[{i}].filters: {name} is not supported by wasmgate yet ({} are; WasmPlugins attach filters)",
            supported.join(", ")
        ));
    }
    None
}

/// Characters a regular expression must escape to match them as text.
pub fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// JSON of a typed filter (the generated types serialize as the API's).
pub fn filter_json<T: serde::Serialize>(filter: &T) -> serde_json::Value {
    serde_json::to_value(filter).unwrap_or_default()
}

/// Another controller's entries stay; ours are rewritten whole.
pub fn status_parents<T: serde::Serialize>(parents: &[T]) -> Vec<serde_json::Value> {
    parents
        .iter()
        .filter_map(|p| serde_json::to_value(p).ok())
        .collect()
}
