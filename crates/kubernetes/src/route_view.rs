//! HTTPRoutes and GRPCRoutes as one shape: what attaching to a Gateway,
//! resolving backends, applying filters and ordering matches need. Each
//! kind is turned into it by its own module (`httproute.rs`,
//! `grpcroute.rs`), so `translate.rs` serves both with one path.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
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
    /// Other controllers' `status.parents` entries, kept as written (the
    /// list is written whole).
    pub others_parents: Vec<serde_json::Value>,
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
    /// `RegularExpression` header and query matches.
    pub header_regex: BTreeMap<String, String>,
    pub query_regex: BTreeMap<String, String>,
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
            header_regex: BTreeMap::new(),
            query_regex: BTreeMap::new(),
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

/// The [`RouteView`] of a generated HTTPRoute or GRPCRoute (`$route`) of
/// kind `$kind`: the two types have the same field names but types of
/// their own (hence a macro, not a function). `$matches` turns one match
/// into a [`MatchView`]; `$unsupported` finds what of the route's own
/// fields this node cannot serve; `$controller` is this node's.
macro_rules! route_view {
    ($route:expr, $kind:expr, $matches:expr, $unsupported:expr, $controller:expr) => {{
        use $crate::route_view::{BackendRef, MatchView, ParentRef, RouteView, RuleView};
        let route = $route;
        let spec = &route.spec;
        let rules: Vec<RuleView> = (spec.rules.iter().flatten())
            .map(|rule| RuleView {
                matches: match rule.matches.as_deref() {
                    Some(m) if !m.is_empty() => m.iter().map($matches).collect(),
                    _ => vec![MatchView::any()],
                },
                filters: (rule.filters.iter().flatten())
                    .map($crate::route_view::filter_json)
                    .collect(),
                backends: (rule.backend_refs.iter().flatten())
                    .map(|b| BackendRef {
                        group: b.group.clone(),
                        kind: b.kind.clone(),
                        name: b.name.clone(),
                        namespace: b.namespace.clone(),
                        port: b.port,
                        weight: b.weight,
                    })
                    .collect(),
            })
            .collect();
        let unsupported =
            $unsupported(route).or_else(|| $crate::route_view::first_filter_problem($kind, &rules));
        let (namespace, name, generation, created) = $crate::route_view::identity(&route.metadata);
        RouteView {
            kind: $kind,
            namespace,
            name,
            generation,
            created,
            hostnames: spec.hostnames.clone().unwrap_or_default(),
            parents: (spec.parent_refs.iter().flatten())
                .map(|p| ParentRef {
                    group: p.group.clone(),
                    kind: p.kind.clone(),
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                    section_name: p.section_name.clone(),
                    port: p.port,
                })
                .collect(),
            rules,
            unsupported,
            others_parents: (route.status.as_ref())
                .map(|s| {
                    $crate::route_view::others_parents(
                        &s.parents,
                        |p| &p.controller_name,
                        $controller,
                    )
                })
                .unwrap_or_default(),
        }
    }};
}
pub(crate) use route_view;

/// The first filter of `rules` this node does not serve, said as a reason.
pub fn first_filter_problem(kind: RouteKind, rules: &[RuleView]) -> Option<String> {
    (rules.iter().enumerate())
        .flat_map(|(i, r)| r.filters.iter().map(move |f| (i, f)))
        .find_map(|(i, f)| filter_problem(kind, i, f))
}

/// A route's namespace, name, generation and creation time (seconds).
pub fn identity(meta: &ObjectMeta) -> (String, String, Option<i64>, i64) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
        meta.generation,
        (meta.creation_timestamp.as_ref()).map_or(0, |t| t.0.as_second()),
    )
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
            "CORS",
        ],
        RouteKind::Grpc => &[
            "RequestHeaderModifier",
            "ResponseHeaderModifier",
            "RequestMirror",
        ],
    };
    if name == "ExtensionRef" {
        let r = &filter["extensionRef"];
        let (group, kind) = (
            r["group"].as_str().unwrap_or(""),
            r["kind"].as_str().unwrap_or(""),
        );
        if (group, kind) != (crate::wasmplugin::GROUP, "WasmPlugin") {
            return Some(format!(
                "rules[{i}].filters: an ExtensionRef to {group}/{kind}: wasmgate's is to a WasmPlugin ({}/WasmPlugin)",
                crate::wasmplugin::GROUP
            ));
        }
        return None;
    }
    if !supported.contains(&name) {
        return Some(format!(
            "rules[{i}].filters: {name} is not supported by wasmgate yet ({}, and ExtensionRef to a WasmPlugin, are)",
            supported.join(", ")
        ));
    }
    if name == "CORS" {
        let mut problems = Vec::new();
        cors(filter).check("", &mut |_, why| problems.push(why));
        if let Some(why) = problems.first() {
            return Some(format!("rules[{i}].filters: CORS: {why}"));
        }
    }
    None
}

/// A rule's `CORS` filter as the route's `cors`.
pub fn cors(filter: &serde_json::Value) -> wasmgate_config::CorsConfig {
    let c = &filter["cors"];
    let list = |key: &str| -> Vec<String> {
        (c[key].as_array().into_iter().flatten())
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    };
    wasmgate_config::CorsConfig {
        allow_origins: list("allowOrigins"),
        allow_methods: list("allowMethods"),
        allow_headers: list("allowHeaders"),
        expose_headers: list("exposeHeaders"),
        max_age_seconds: c["maxAge"]
            .as_u64()
            .map_or(5, |s| s.min(u64::from(u32::MAX)) as u32),
        allow_credentials: c["allowCredentials"].as_bool().unwrap_or(false),
    }
}

impl RuleView {
    /// The WasmPlugins (of the route's namespace) its `ExtensionRef`
    /// filters name.
    pub fn extension_plugins(&self) -> impl Iterator<Item = &str> {
        (self.filters.iter())
            .filter(|f| f["type"] == "ExtensionRef")
            .filter_map(|f| f["extensionRef"]["name"].as_str())
    }
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

/// The `status.parents` entries of controllers other than `controller`
/// (`controller_of` reads an entry's), as JSON. Ours are not converted:
/// every route has one, and converting them cost a pass at 1,000 routes
/// more than a tenth of its CPU.
pub fn others_parents<T: serde::Serialize>(
    parents: &[T],
    controller_of: impl Fn(&T) -> &str,
    controller: &str,
) -> Vec<serde_json::Value> {
    (parents.iter())
        .filter(|p| controller_of(p) != controller)
        .filter_map(|p| serde_json::to_value(p).ok())
        .collect()
}
