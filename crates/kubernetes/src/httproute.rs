//! An HTTPRoute as a [`RouteView`]: its paths (a Gateway API prefix
//! matches whole segments), headers and query parameters (exact or by
//! expression) and method per match.

use std::collections::BTreeMap;

use gateway_api::httproutes::{
    HttpRoute, HttpRouteRulesMatches, HttpRouteRulesMatchesHeadersType,
    HttpRouteRulesMatchesPathType, HttpRouteRulesMatchesQueryParamsType,
};
use wasmgate_config::PathMatch;

use crate::route_view::{regex_escape, route_view, MatchView, RouteKind, RouteView};

/// `controller`: this node's (other controllers' status entries are kept).
pub fn view(route: &HttpRoute, controller: &str) -> RouteView {
    route_view!(route, RouteKind::Http, match_view, unsupported, controller)
}

/// What of the route's matches and backends this node cannot serve yet.
fn unsupported(route: &HttpRoute) -> Option<String> {
    for (i, rule) in route.spec.rules.iter().flatten().enumerate() {
        for backend in rule.backend_refs.iter().flatten() {
            if backend.filters.as_ref().is_some_and(|f| !f.is_empty()) {
                return Some(format!(
                    "rules[{i}].backendRefs[].filters: not supported by wasmgate yet"
                ));
            }
        }
    }
    None
}

fn match_view(m: &HttpRouteRulesMatches) -> MatchView {
    let (path, path_rank, length) = path_match(m);
    MatchView {
        path,
        path_rank,
        length,
        headers: (m.headers.iter().flatten())
            .filter(|h| h.r#type != Some(HttpRouteRulesMatchesHeadersType::RegularExpression))
            .map(|h| (h.name.to_ascii_lowercase(), h.value.clone()))
            .collect::<BTreeMap<_, _>>(),
        header_regex: (m.headers.iter().flatten())
            .filter(|h| h.r#type == Some(HttpRouteRulesMatchesHeadersType::RegularExpression))
            .map(|h| (h.name.to_ascii_lowercase(), h.value.clone()))
            .collect(),
        methods: (m.method.as_ref())
            .and_then(|method| serde_json::to_value(method).ok())
            .and_then(|v| v.as_str().map(str::to_string))
            .into_iter()
            .collect(),
        query: (m.query_params.iter().flatten())
            .filter(|q| q.r#type != Some(HttpRouteRulesMatchesQueryParamsType::RegularExpression))
            .map(|q| (q.name.clone(), q.value.clone()))
            .collect(),
        query_regex: (m.query_params.iter().flatten())
            .filter(|q| q.r#type == Some(HttpRouteRulesMatchesQueryParamsType::RegularExpression))
            .map(|q| (q.name.clone(), q.value.clone()))
            .collect(),
        prefix: match (m.path.as_ref()).and_then(|p| p.r#type.clone()) {
            None | Some(HttpRouteRulesMatchesPathType::PathPrefix) => Some(
                (m.path.as_ref())
                    .and_then(|p| p.value.clone())
                    .unwrap_or_else(|| "/".into()),
            ),
            _ => None,
        },
    }
}

/// The path part of a match: the config, its rank (Exact, then prefixes by
/// length, then expressions) and length.
fn path_match(m: &HttpRouteRulesMatches) -> (PathMatch, u8, i64) {
    let value = (m.path.as_ref())
        .and_then(|p| p.value.clone())
        .unwrap_or_else(|| "/".into());
    let kind = (m.path.as_ref())
        .and_then(|p| p.r#type.clone())
        .unwrap_or(HttpRouteRulesMatchesPathType::PathPrefix);
    let length = value.len() as i64;
    match kind {
        HttpRouteRulesMatchesPathType::Exact => (
            PathMatch {
                exact: Some(value),
                ..PathMatch::default()
            },
            0,
            length,
        ),
        HttpRouteRulesMatchesPathType::PathPrefix if value == "/" => (PathMatch::default(), 1, 1),
        HttpRouteRulesMatchesPathType::PathPrefix => {
            // A Gateway API prefix matches whole segments: `/api` matches
            // `/api` and `/api/x`, not `/apix`.
            let trimmed = value.trim_end_matches('/');
            let regex = format!("^{}(/.*)?$", regex_escape(trimmed));
            (
                PathMatch {
                    regex: Some(regex),
                    ..PathMatch::default()
                },
                1,
                length,
            )
        }
        HttpRouteRulesMatchesPathType::RegularExpression => (
            PathMatch {
                regex: Some(value),
                ..PathMatch::default()
            },
            2,
            length,
        ),
    }
}
