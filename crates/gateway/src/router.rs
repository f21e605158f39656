//! Route matching: host (exact or `*.` wildcard), path (exact, prefix or
//! regex), method and headers. Routes are tried in listing order and the
//! first that matches wins, so specific routes go first.

use hyper::{HeaderMap, Method};
use regex::Regex;

use crate::config::RouteConfig;

pub struct RouteMatcher {
    hosts: Vec<HostPattern>,
    path: PathPattern,
    methods: Vec<Method>,
    headers: Vec<(String, String)>,
}

enum HostPattern {
    Exact(String),
    /// `*.example.com` stored as `.example.com`: any subdomain, not the apex.
    Suffix(String),
}

enum PathPattern {
    Any,
    Exact(String),
    Prefix(String),
    Regex(Regex),
}

impl RouteMatcher {
    /// Patterns were checked with the configuration; a bad one here is a bug.
    pub fn new(route: &RouteConfig) -> RouteMatcher {
        let hosts = route
            .hosts
            .iter()
            .map(|h| match h.strip_prefix('*') {
                Some(suffix) => HostPattern::Suffix(suffix.to_ascii_lowercase()),
                None => HostPattern::Exact(h.to_ascii_lowercase()),
            })
            .collect();
        let path = match (&route.path.exact, &route.path.prefix, &route.path.regex) {
            (Some(p), _, _) => PathPattern::Exact(p.clone()),
            (_, Some(p), _) => PathPattern::Prefix(p.clone()),
            (_, _, Some(r)) => PathPattern::Regex(
                Regex::new(&format!("^(?:{r})$")).expect("regex checked with the configuration"),
            ),
            _ => PathPattern::Any,
        };
        RouteMatcher {
            hosts,
            path,
            methods: route
                .methods
                .iter()
                .filter_map(|m| Method::from_bytes(m.to_ascii_uppercase().as_bytes()).ok())
                .collect(),
            headers: route
                .headers
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                .collect(),
        }
    }

    /// `host` is without its port; `path` without its query.
    pub fn matches(&self, host: &str, path: &str, method: &Method, headers: &HeaderMap) -> bool {
        let host_ok = self.hosts.is_empty()
            || self.hosts.iter().any(|pattern| match pattern {
                HostPattern::Exact(h) => host.eq_ignore_ascii_case(h),
                HostPattern::Suffix(s) => {
                    host.len() > s.len() && host[host.len() - s.len()..].eq_ignore_ascii_case(s)
                }
            });
        let path_ok = match &self.path {
            PathPattern::Any => true,
            PathPattern::Exact(p) => path == p,
            PathPattern::Prefix(p) => path.starts_with(p.as_str()),
            PathPattern::Regex(r) => r.is_match(path),
        };
        host_ok
            && path_ok
            && (self.methods.is_empty() || self.methods.contains(method))
            && self.headers.iter().all(|(name, value)| {
                headers
                    .get_all(name.as_str())
                    .iter()
                    .any(|v| v.as_bytes() == value.as_bytes())
            })
    }
}

/// The request's host without a port, from the URI (HTTP/2) or Host header.
pub fn request_host<'a>(uri: &'a hyper::Uri, headers: &'a HeaderMap) -> &'a str {
    let authority = uri
        .authority()
        .map(|a| a.as_str())
        .or_else(|| headers.get(hyper::header::HOST)?.to_str().ok())
        .unwrap_or("");
    strip_port(authority)
}

pub fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        // [v6]:port
        return authority
            .split(']')
            .next()
            .map_or(authority, |h| &authority[..h.len() + 1]);
    }
    authority
        .rsplit_once(':')
        .map_or(authority, |(host, _)| host)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GatewayConfig;

    fn route(yaml: &str) -> RouteMatcher {
        let config =
            GatewayConfig::parse(&format!("routes:\n  - name: r\n    respond: {{}}\n{yaml}"))
                .unwrap();
        RouteMatcher::new(&config.routes[0])
    }

    #[test]
    fn hosts_paths_methods_headers() {
        let none = HeaderMap::new();
        let r = route("    hosts: ['api.example.com', '*.example.org']\n    path: {prefix: /v1/}\n    methods: [get]\n");
        assert!(r.matches("api.example.com", "/v1/x", &Method::GET, &none));
        assert!(r.matches("a.b.example.org", "/v1/", &Method::GET, &none));
        assert!(
            !r.matches("example.org", "/v1/", &Method::GET, &none),
            "apex is not *."
        );
        assert!(!r.matches("api.example.com", "/v2/x", &Method::GET, &none));
        assert!(!r.matches("api.example.com", "/v1/x", &Method::POST, &none));

        let r = route("    path: {regex: '/users/[0-9]+'}\n    headers: {x-canary: 'yes'}\n");
        let mut canary = HeaderMap::new();
        canary.insert("x-canary", "yes".parse().unwrap());
        assert!(r.matches("h", "/users/42", &Method::GET, &canary));
        assert!(
            !r.matches("h", "/users/42/x", &Method::GET, &canary),
            "anchored"
        );
        assert!(!r.matches("h", "/users/42", &Method::GET, &none));

        let r = route("    path: {exact: /}\n");
        assert!(r.matches("h", "/", &Method::GET, &none));
        assert!(!r.matches("h", "/a", &Method::GET, &none));
    }

    #[test]
    fn host_without_port() {
        assert_eq!(strip_port("example.com:8080"), "example.com");
        assert_eq!(strip_port("example.com"), "example.com");
        assert_eq!(strip_port("[::1]:80"), "[::1]");
    }
}
