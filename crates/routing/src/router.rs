//! Route matching: host (exact or `*.` wildcard), path (exact, prefix or
//! regex), method, headers and query parameters (exact or by expression),
//! scheme and the listener's port. The first route in listing order that
//! matches wins, so specific routes go first. [`RouteIndex`] finds it without
//! walking the list: hosts and paths narrow the candidates, then the earliest
//! candidate that matches in full is the answer, the same one a walk finds.

use std::collections::HashMap;

use hyper::{HeaderMap, Method};
use regex::Regex;

use wasmgate_config::RouteConfig;

pub struct RouteMatcher {
    hosts: Vec<HostPattern>,
    path: PathPattern,
    methods: Vec<Method>,
    /// Headers one of whose values each must match (`headers`,
    /// `header_regex`).
    headers: Vec<(String, ValueMatch)>,
    /// Query parameters and what their (decoded) values must match
    /// (`query`, `query_regex`).
    query: Vec<(String, ValueMatch)>,
    /// `Some(true)`: only requests that came over TLS; `Some(false)`: only
    /// plain ones (`scheme:`).
    tls: Option<bool>,
    /// The node's local ports it is served on (`ports:`); empty: any.
    ports: Vec<u16>,
}

/// What a route is matched against.
pub struct RouteInput<'a> {
    /// Without its port.
    pub host: &'a str,
    /// Without its query.
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub method: &'a Method,
    pub headers: &'a HeaderMap,
    /// Whether it came on a TLS connection (`https`).
    pub tls: bool,
    /// The local port of the listener it came on.
    pub port: u16,
}

/// What a header's or query parameter's value must be.
enum ValueMatch {
    Exact(String),
    /// Anchored: the whole value.
    Regex(Regex),
}

impl ValueMatch {
    fn matches(&self, value: &[u8]) -> bool {
        match self {
            ValueMatch::Exact(wanted) => value == wanted.as_bytes(),
            ValueMatch::Regex(expression) => {
                std::str::from_utf8(value).is_ok_and(|v| expression.is_match(v))
            }
        }
    }
}

/// Exact values, then expressions, of a route's `names -> values` maps.
fn value_matches(
    exact: &std::collections::BTreeMap<String, String>,
    regex: &std::collections::BTreeMap<String, String>,
    name: fn(&str) -> String,
) -> Vec<(String, ValueMatch)> {
    let exact = (exact.iter()).map(|(k, v)| (name(k), ValueMatch::Exact(v.clone())));
    let regex = (regex.iter()).map(|(k, r)| (name(k), ValueMatch::Regex(anchored(r))));
    exact.chain(regex).collect()
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
            (_, _, Some(r)) => PathPattern::Regex(anchored(r)),
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
            headers: value_matches(&route.headers, &route.header_regex, |k| {
                k.to_ascii_lowercase()
            }),
            query: value_matches(&route.query, &route.query_regex, str::to_string),
            tls: route.scheme.map(|s| s == wasmgate_config::Scheme::Https),
            ports: route.ports.clone(),
        }
    }

    pub fn matches(&self, request: &RouteInput<'_>) -> bool {
        let RouteInput {
            host,
            path,
            query,
            method,
            headers,
            tls,
            port,
        } = *request;
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
            && self.tls.is_none_or(|wanted| wanted == tls)
            && (self.ports.is_empty() || self.ports.contains(&port))
            && (self.methods.is_empty() || self.methods.contains(method))
            && self.headers.iter().all(|(name, wanted)| {
                (headers.get_all(name.as_str()).iter()).any(|v| wanted.matches(v.as_bytes()))
            })
            && (self.query.is_empty() || query_matches(&self.query, query))
    }
}

/// A route's expression, matching whole values; checked with the
/// configuration, so a bad one here is a bug.
fn anchored(expression: &str) -> Regex {
    Regex::new(&format!("^(?:{expression})$")).expect("regex checked with the configuration")
}

/// Whether every wanted parameter is in `query` with a value that matches.
fn query_matches(wanted: &[(String, ValueMatch)], query: Option<&str>) -> bool {
    let Some(query) = query else {
        return false;
    };
    wanted.iter().all(|(name, value)| {
        form_urlencoded::parse(query.as_bytes())
            .any(|(n, v)| n == name.as_str() && value.matches(v.as_bytes()))
    })
}

/// Where to look for the routes a request may match, built once per
/// configuration. A route is filed under each of its hosts (exact ones by
/// name, `*.` ones by suffix, none: any host) and, within that, under its
/// exact path or its prefix (regex and "any path" routes: a short list that
/// is always checked). A lookup costs a few hash probes per host label and
/// per distinct prefix length, whatever the number of routes.
#[derive(Default)]
pub struct RouteIndex {
    by_host: HashMap<String, PathIndex>,
    /// Keys are `.example.com` for `*.example.com`.
    by_suffix: HashMap<String, PathIndex>,
    any_host: PathIndex,
}

#[derive(Default)]
struct PathIndex {
    exact: HashMap<String, Vec<usize>>,
    prefix: HashMap<String, Vec<usize>>,
    /// The distinct lengths of the prefixes, so a lookup probes only those.
    prefix_lengths: Vec<usize>,
    /// Regex and any-path routes.
    others: Vec<usize>,
}

impl PathIndex {
    fn insert(&mut self, path: &PathPattern, route: usize) {
        match path {
            PathPattern::Exact(p) => self.exact.entry(p.clone()).or_default().push(route),
            PathPattern::Prefix(p) => {
                self.prefix.entry(p.clone()).or_default().push(route);
                if !self.prefix_lengths.contains(&p.len()) {
                    self.prefix_lengths.push(p.len());
                }
            }
            PathPattern::Any | PathPattern::Regex(_) => self.others.push(route),
        }
    }

    /// Calls `candidate` with every route whose path pattern may match.
    fn candidates(&self, path: &str, candidate: &mut impl FnMut(usize)) {
        let mut each =
            |routes: Option<&Vec<usize>>| routes.into_iter().flatten().for_each(|&r| candidate(r));
        each(self.exact.get(path));
        for &len in &self.prefix_lengths {
            if let Some(prefix) = path.get(..len) {
                each(self.prefix.get(prefix));
            }
        }
        each(Some(&self.others));
    }
}

impl RouteIndex {
    /// The index of `matchers`, in listing order.
    pub fn new<'a>(matchers: impl IntoIterator<Item = &'a RouteMatcher>) -> RouteIndex {
        let mut index = RouteIndex::default();
        for (route, matcher) in matchers.into_iter().enumerate() {
            if matcher.hosts.is_empty() {
                index.any_host.insert(&matcher.path, route);
            }
            for host in &matcher.hosts {
                let paths = match host {
                    HostPattern::Exact(h) => index.by_host.entry(h.clone()).or_default(),
                    HostPattern::Suffix(s) => index.by_suffix.entry(s.clone()).or_default(),
                };
                paths.insert(&matcher.path, route);
            }
        }
        index
    }

    /// The first of `matchers` (the ones the index was built from) that
    /// matches, as `matchers.iter().position(|m| m.matches(...))` would find.
    pub fn find(
        &self,
        matchers: &[impl AsRef<RouteMatcher>],
        request: &RouteInput<'_>,
    ) -> Option<usize> {
        let lower;
        let host = if request.host.bytes().any(|b| b.is_ascii_uppercase()) {
            lower = request.host.to_ascii_lowercase();
            lower.as_str()
        } else {
            request.host
        };
        let path = request.path;
        let request = RouteInput { host, ..*request };
        let mut best: Option<usize> = None;
        let mut consider = |route: usize| {
            if best.is_none_or(|b| route < b) && matchers[route].as_ref().matches(&request) {
                best = Some(route);
            }
        };
        if let Some(paths) = self.by_host.get(host) {
            paths.candidates(path, &mut consider);
        }
        if !self.by_suffix.is_empty() {
            // Every proper suffix starting at a dot: `.b.example.org` and
            // `.example.org` and `.org` of `a.b.example.org`.
            for (i, _) in host.match_indices('.').filter(|(i, _)| *i > 0) {
                if let Some(paths) = self.by_suffix.get(&host[i..]) {
                    paths.candidates(path, &mut consider);
                }
            }
        }
        self.any_host.candidates(path, &mut consider);
        best
    }
}

impl AsRef<RouteMatcher> for RouteMatcher {
    fn as_ref(&self) -> &RouteMatcher {
        self
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
    use wasmgate_config::GatewayConfig;

    fn head<'a>(
        host: &'a str,
        path: &'a str,
        method: &'a Method,
        headers: &'a HeaderMap,
    ) -> RouteInput<'a> {
        RouteInput {
            host,
            path,
            query: None,
            method,
            headers,
            tls: false,
            port: 80,
        }
    }

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
        assert!(r.matches(&head("api.example.com", "/v1/x", &Method::GET, &none)));
        assert!(r.matches(&head("a.b.example.org", "/v1/", &Method::GET, &none)));
        assert!(
            !r.matches(&head("example.org", "/v1/", &Method::GET, &none)),
            "apex is not *."
        );
        assert!(!r.matches(&head("api.example.com", "/v2/x", &Method::GET, &none)));
        assert!(!r.matches(&head("api.example.com", "/v1/x", &Method::POST, &none)));

        let r = route("    path: {regex: '/users/[0-9]+'}\n    headers: {x-canary: 'yes'}\n");
        let mut canary = HeaderMap::new();
        canary.insert("x-canary", "yes".parse().unwrap());
        assert!(r.matches(&head("h", "/users/42", &Method::GET, &canary)));
        assert!(
            !r.matches(&head("h", "/users/42/x", &Method::GET, &canary)),
            "anchored"
        );
        assert!(!r.matches(&head("h", "/users/42", &Method::GET, &none)));

        let r = route("    path: {exact: /}\n");
        assert!(r.matches(&head("h", "/", &Method::GET, &none)));
        assert!(!r.matches(&head("h", "/a", &Method::GET, &none)));

        let r = route("    scheme: http\n");
        let plain = head("h", "/", &Method::GET, &none);
        assert!(r.matches(&plain));
        assert!(!r.matches(&RouteInput { tls: true, ..plain }));
        let r = route("    scheme: https\n");
        assert!(!r.matches(&plain));
        assert!(r.matches(&RouteInput { tls: true, ..plain }));

        // Expressions over headers and query parameters, whole values.
        let r =
            route("    header_regex: {x-tier: 'gold|silver'}\n    query_regex: {id: '[0-9]+'}\n");
        let mut silver = HeaderMap::new();
        silver.append("x-tier", "bronze".parse().unwrap());
        silver.append("x-tier", "silver".parse().unwrap());
        let with = |query, headers| RouteInput {
            query: Some(query),
            headers,
            ..plain
        };
        assert!(
            r.matches(&with("id=42", &silver)),
            "any value of the header"
        );
        assert!(!r.matches(&with("id=42x", &silver)), "the whole value");
        assert!(!r.matches(&with("id=42", &none)));
        let mut golden = HeaderMap::new();
        golden.insert("x-tier", "golden".parse().unwrap());
        assert!(!r.matches(&with("id=42", &golden)), "anchored");

        // The listener's local port.
        let r = route("    ports: [8080, 8443]\n");
        assert!(!r.matches(&plain), "port 80 is not one of them");
        assert!(r.matches(&RouteInput {
            port: 8443,
            ..plain
        }));

        // Query parameters, decoded, each with its exact value.
        let r = route("    query: {tier: gold, q: 'a b'}\n");
        let with = |query| RouteInput {
            query: Some(query),
            ..plain
        };
        assert!(r.matches(&with("x=1&tier=gold&q=a+b")));
        assert!(r.matches(&with("q=a%20b&tier=gold")));
        assert!(!r.matches(&with("tier=silver&q=a+b")));
        assert!(!r.matches(&with("tier=gold")));
        assert!(!r.matches(&plain), "no query at all");
    }

    /// The index finds the same route as a walk of the list, over many
    /// generated route sets and requests (hosts exact and wildcard, paths
    /// exact, prefix, regex and any, methods, headers, upper case).
    #[test]
    fn the_index_finds_what_a_walk_finds() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let hosts = [
            "a.example",
            "b.example",
            "x.a.example",
            "A.Example",
            "other",
        ];
        let paths = ["/", "/a", "/a/", "/a/b", "/ab", "/b/c", "/users/7", ""];
        let mut checked = 0;
        for _ in 0..300 {
            let mut yaml = String::from("routes:\n");
            for r in 0..1 + next(12) {
                yaml.push_str(&format!("  - name: r{r}\n    respond: {{}}\n"));
                match next(4) {
                    0 => {}
                    1 => yaml.push_str(&format!("    hosts: ['{}']\n", hosts[next(5)])),
                    2 => yaml.push_str("    hosts: ['*.example']\n"),
                    _ => yaml.push_str(&format!(
                        "    hosts: ['{}', '*.a.example']\n",
                        hosts[next(5)]
                    )),
                }
                match next(5) {
                    0 => {}
                    1 => yaml.push_str(&format!("    path: {{exact: '{}'}}\n", paths[next(7)])),
                    2 | 3 => {
                        yaml.push_str(&format!("    path: {{prefix: '{}'}}\n", &paths[next(7)]))
                    }
                    _ => yaml.push_str("    path: {regex: '/users/[0-9]+'}\n"),
                }
                if next(4) == 0 {
                    yaml.push_str("    methods: [post]\n");
                }
                if next(5) == 0 {
                    yaml.push_str("    headers: {x-canary: 'yes'}\n");
                }
            }
            let config = GatewayConfig::parse(&yaml).unwrap();
            let matchers: Vec<RouteMatcher> = config.routes.iter().map(RouteMatcher::new).collect();
            let index = RouteIndex::new(&matchers);
            for _ in 0..40 {
                let host = [
                    "a.example",
                    "B.EXAMPLE",
                    "x.a.example",
                    "y.x.a.example",
                    "other",
                    "example",
                    "",
                ][next(7)];
                let path = paths[next(8)];
                let method = [Method::GET, Method::POST][next(2)].clone();
                let mut headers = HeaderMap::new();
                if next(2) == 0 {
                    headers.insert("x-canary", "yes".parse().unwrap());
                }
                let walked = matchers
                    .iter()
                    .position(|m| m.matches(&head(host, path, &method, &headers)));
                let found = index.find(&matchers, &head(host, path, &method, &headers));
                assert_eq!(found, walked, "{host} {path} {method} in\n{yaml}");
                checked += 1;
            }
        }
        assert_eq!(checked, 12_000);
    }

    #[test]
    fn host_without_port() {
        assert_eq!(strip_port("example.com:8080"), "example.com");
        assert_eq!(strip_port("example.com"), "example.com");
        assert_eq!(strip_port("[::1]:80"), "[::1]");
    }
}
