//! A GRPCRoute as a [`RouteView`]: a gRPC call is `POST
//! /<package.Service>/<Method>` over HTTP/2, so a method match is a path
//! match (exact when both service and method are named, an expression when
//! one is left out or given as one), and its backends speak h2c.

use std::collections::BTreeMap;

use gateway_api::grpcroutes::{
    GrpcRoute, GrpcRouteRulesMatches, GrpcRouteRulesMatchesHeadersType,
    GrpcRouteRulesMatchesMethodType,
};
use wasmgate_config::PathMatch;

use crate::route_view::{regex_escape, route_view, MatchView, RouteKind, RouteView};

/// `controller`: this node's (other controllers' status entries are kept).
pub fn view(route: &GrpcRoute, controller: &str) -> RouteView {
    route_view!(route, RouteKind::Grpc, match_view, unsupported, controller)
}

fn unsupported(route: &GrpcRoute) -> Option<String> {
    for (i, rule) in route.spec.rules.iter().flatten().enumerate() {
        if (rule.backend_refs.iter().flatten())
            .any(|b| b.filters.as_ref().is_some_and(|f| !f.is_empty()))
        {
            return Some(format!(
                "rules[{i}].backendRefs[].filters: not supported by wasmgate yet"
            ));
        }
    }
    None
}

fn match_view(m: &GrpcRouteRulesMatches) -> MatchView {
    let (path, path_rank, length) = method_path(m);
    MatchView {
        path,
        path_rank,
        length,
        headers: (m.headers.iter().flatten())
            .filter(|h| h.r#type != Some(GrpcRouteRulesMatchesHeadersType::RegularExpression))
            .map(|h| (h.name.to_ascii_lowercase(), h.value.clone()))
            .collect::<BTreeMap<_, _>>(),
        header_regex: (m.headers.iter().flatten())
            .filter(|h| h.r#type == Some(GrpcRouteRulesMatchesHeadersType::RegularExpression))
            .map(|h| (h.name.to_ascii_lowercase(), h.value.clone()))
            .collect(),
        methods: Vec::new(),
        query: BTreeMap::new(),
        query_regex: BTreeMap::new(),
        prefix: None,
    }
}

/// The path a method match stands for, its rank (both named exactly, then
/// one of them, then expressions) and the characters it names.
fn method_path(m: &GrpcRouteRulesMatches) -> (PathMatch, u8, i64) {
    let Some(method) = &m.method else {
        return (PathMatch::default(), 1, 0);
    };
    let service = method.service.as_deref().filter(|s| !s.is_empty());
    let name = method.method.as_deref().filter(|s| !s.is_empty());
    let length = (service.map_or(0, str::len) + name.map_or(0, str::len)) as i64;
    let expressions = method.r#type == Some(GrpcRouteRulesMatchesMethodType::RegularExpression);
    if expressions {
        let regex = format!(
            "^/{}/{}$",
            service.unwrap_or("[^/]+"),
            name.unwrap_or("[^/]+")
        );
        return (
            PathMatch {
                regex: Some(regex),
                ..PathMatch::default()
            },
            2,
            length,
        );
    }
    match (service, name) {
        (Some(service), Some(name)) => (
            PathMatch {
                exact: Some(format!("/{service}/{name}")),
                ..PathMatch::default()
            },
            0,
            length,
        ),
        (None, None) => (PathMatch::default(), 1, 0),
        (service, name) => {
            let part = |p: Option<&str>| p.map_or_else(|| "[^/]+".to_string(), regex_escape);
            let regex = format!("^/{}/{}$", part(service), part(name));
            (
                PathMatch {
                    regex: Some(regex),
                    ..PathMatch::default()
                },
                1,
                length,
            )
        }
    }
}
