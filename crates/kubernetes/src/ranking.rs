//! The order of the node's routes: the gateway takes the first route that
//! matches, so the routes of every rule of every route are put in the
//! Gateway API's order of precedence.

use wasmgate_config::RouteConfig;

use crate::route_view::{MatchView, RouteView};

/// A route with the key the Gateway API orders matches by: host, path,
/// method, the number of header matches, of query matches, then the oldest
/// route, then by name.
pub(crate) struct Ranked {
    rank: (u8, u8, i64, u8, i64, i64, String, String),
    route: RouteConfig,
}

impl Ranked {
    /// `config`, made of match `m` of a rule of `route`, served for `hosts`.
    pub(crate) fn new(
        route: &RouteView,
        m: &MatchView,
        hosts: &[String],
        config: RouteConfig,
    ) -> Ranked {
        let host_rank = match hosts.first() {
            None => 2,
            Some(h) if h.starts_with("*.") => 1,
            Some(_) => 0,
        };
        let (namespace, name) = (&route.namespace, &route.name);
        Ranked {
            rank: (
                host_rank,
                m.path_rank,
                -m.length,
                u8::from(m.methods.is_empty()),
                -((m.headers.len() + m.header_regex.len()) as i64),
                -((m.query.len() + m.query_regex.len()) as i64),
                format!("{:020}", route.created),
                format!("{namespace}/{name}"),
            ),
            route: config,
        }
    }
}

/// The routes, first the one that takes precedence.
pub(crate) fn in_order(mut served: Vec<Ranked>) -> Vec<RouteConfig> {
    served.sort_by(|a: &Ranked, b: &Ranked| a.rank.cmp(&b.rank));
    served.into_iter().map(|r| r.route).collect()
}
