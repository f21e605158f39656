//! Hostnames: which hosts a route is served for under the listeners that
//! took it (the route's `hostnames` against the listeners' `hostname`),
//! and the host lists its routes are made for when WasmPlugins apply per
//! domain.

use crate::listeners::ListenerState;
use crate::place::Place;
use crate::plugins::RouteContext;
use crate::route_view::{RouteView, RuleView};

/// The hosts the route serves under these listeners (empty: any host), or
/// None when its hostnames and the listeners' have nothing in common.
pub(crate) fn route_hosts(
    route_hosts: &[String],
    listeners: &[&ListenerState],
) -> Option<Vec<String>> {
    let listener_hosts: Vec<&str> = listeners
        .iter()
        .filter_map(|l| l.spec.hostname.as_deref())
        .collect();
    if listener_hosts.len() < listeners.len() {
        // A listener without a hostname takes any: the route's own.
        return Some(route_hosts.to_vec());
    }
    if route_hosts.is_empty() {
        return Some(listener_hosts.iter().map(|h| h.to_string()).collect());
    }
    let matching: Vec<String> = (route_hosts.iter())
        .filter(|h| {
            listener_hosts
                .iter()
                .any(|l| host_matches(l, h) || host_matches(h, l))
        })
        .cloned()
        .collect();
    (!matching.is_empty()).then_some(matching)
}

/// Whether `pattern` (a name or `*.suffix`) covers `host`.
pub(crate) fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => host.len() > suffix.len() + 1 && host.ends_with(&format!(".{suffix}")),
        None => pattern.eq_ignore_ascii_case(host),
    }
}

/// The host lists the route is served under: its hosts as one list when no
/// WasmPlugin's match rule names a domain; otherwise one route per host,
/// plus one per named domain the route's hosts cover (with the any-host
/// route last), so that each host gets the chain its rules say.
pub(crate) fn host_variants(route: &RouteView, place: &Place) -> Vec<Vec<String>> {
    let all_named: Vec<&str> = (route.rules.iter())
        .flat_map(RuleView::extension_plugins)
        .collect();
    let at = RouteContext {
        kind: route.kind,
        namespace: &route.namespace,
        name: &route.name,
        gateways: place.gateways,
        host: None,
        named: &all_named,
    };
    let domains = place.plugins.domains(&at);
    if domains.is_empty() {
        return vec![place.hosts.clone()];
    }
    let mut hosts = place.hosts.clone();
    for d in domains {
        let covered = place.hosts.is_empty() || place.hosts.iter().any(|h| host_matches(h, &d));
        if covered && !hosts.contains(&d) {
            hosts.push(d);
        }
    }
    let mut variants: Vec<Vec<String>> = hosts.into_iter().map(|h| vec![h]).collect();
    if place.hosts.is_empty() {
        variants.push(Vec::new());
    }
    variants
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_patterns() {
        assert!(host_matches("*.example.com", "a.example.com"));
        assert!(!host_matches("*.example.com", "example.com"));
        assert!(host_matches("API.example.com", "api.example.com"));
    }
}
