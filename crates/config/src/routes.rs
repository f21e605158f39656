//! `routes`: what a request must look like to match, its filter chain, and
//! its endpoint.

use std::collections::{BTreeMap, HashSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::plugins::{check_filters, FilterRef};
use crate::rewrite::{ReplacePrefix, Rewrite};

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// 1-64 letters, digits, `.`, `_` and `-`, beginning with a letter or digit.
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"))]
    pub name: String,
    /// `api.example.com` or `*.example.com`; empty matches any host.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Empty matches any path.
    #[serde(default)]
    pub path: PathMatch,
    /// Empty matches any method.
    #[serde(default)]
    pub methods: Vec<String>,
    /// Header name -> exact value every request must carry.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Query parameter -> exact value (percent-decoded) every request must
    /// carry.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub query: BTreeMap<String, String>,
    /// Header name -> regular expression one of its values must match
    /// whole (anchored).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub header_regex: BTreeMap<String, String>,
    /// Query parameter -> regular expression its (decoded) value must match
    /// whole (anchored).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub query_regex: BTreeMap<String, String>,
    /// Only requests that came over `https` (a TLS listener) or plain
    /// `http`; absent matches both. A route `{scheme: http, redirect:
    /// {scheme: https}}` sends plain requests to HTTPS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<Scheme>,
    /// Only requests that came to a listener of this node on one of these
    /// local ports; empty matches every listener.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
    /// The route's filter chain.
    #[serde(default)]
    pub plugins: Vec<FilterRef>,
    /// Endpoint: an upstream's name ...
    #[serde(default)]
    pub upstream: Option<String>,
    /// ... or an Extism function ...
    #[serde(default)]
    pub function: Option<FunctionEndpoint>,
    /// ... or a `wasi:http` component, which answers the request as
    /// `wasmtime serve` would (every path, method and header; bodies
    /// streamed) ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<ComponentEndpoint>,
    /// ... or a fixed answer ...
    #[serde(default)]
    pub respond: Option<FixedResponse>,
    /// ... or a redirect to the same request elsewhere (`{scheme: https}`:
    /// HTTP to HTTPS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect: Option<Redirect>,
    /// Requests this route serves at once; more are answered 503 with
    /// `Retry-After` at once instead of queueing. Unlimited when absent.
    #[serde(default)]
    pub max_concurrent_requests: Option<usize>,
    /// HTTP/1.1 upgrades (WebSocket) the route tunnels to its upstream.
    /// Default: WebSocket, idle for at most 5 minutes.
    #[serde(default, skip_serializing_if = "UpgradeConfig::is_default")]
    pub upgrade: UpgradeConfig,
    /// Whether this route's requests get access-log lines (when the node
    /// keeps a log: `access_log`). Default: yes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_log: Option<bool>,
    /// Headers changed on the request before its filters and endpoint see
    /// it (the Gateway API's RequestHeaderModifier).
    #[serde(default, skip_serializing_if = "HeaderEdits::is_empty")]
    pub request_headers: HeaderEdits,
    /// Headers changed on every response of the route, the gateway's own
    /// included (ResponseHeaderModifier).
    #[serde(default, skip_serializing_if = "HeaderEdits::is_empty")]
    pub response_headers: HeaderEdits,
    /// The URL changed before the filters and endpoint see it (path whole
    /// or by prefix, host; the Gateway API's URLRewrite).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<Rewrite>,
    /// Upstreams that get a copy of the route's requests (or a share of
    /// them), whose answers are dropped (the Gateway API's RequestMirror).
    /// Only a route whose endpoint is an upstream mirrors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mirror: Vec<MirrorConfig>,
    /// Cross-origin requests it allows (CORS): preflights answered by the
    /// gateway, answers to allowed origins marked so browsers let pages
    /// read them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cors: Option<CorsConfig>,
}
/// Cross-origin requests a route allows (CORS; the Gateway API's CORS
/// filter): browsers' preflights from these origins are answered by the
/// gateway, and the route's answers to them carry the headers that let the
/// page read them.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CorsConfig {
    /// `https://app.example.com`, `https://*.example.com` (any subdomain)
    /// or `*` (any origin).
    pub allow_origins: Vec<String>,
    /// Methods a preflight may ask for (`*`: any); GET, HEAD and POST are
    /// always allowed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_methods: Vec<String>,
    /// Request headers a preflight may ask for (`*`: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_headers: Vec<String>,
    /// Response headers the page may read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expose_headers: Vec<String>,
    /// How long a browser may keep a preflight's answer (default 5 s).
    #[serde(default = "five_seconds")]
    pub max_age_seconds: u32,
    /// Whether the page may send cookies and credentials
    /// (`Access-Control-Allow-Credentials: true`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_credentials: bool,
}

fn five_seconds() -> u32 {
    5
}

impl CorsConfig {
    /// Origins, methods and header names are ones HTTP allows.
    pub fn check(&self, at: &str, problem: &mut dyn FnMut(String, String)) {
        if self.allow_origins.is_empty() {
            problem(
                format!("{at}.allow_origins"),
                "name at least one origin (or `*`)".into(),
            );
        }
        for origin in &self.allow_origins {
            let (scheme, host) = origin.split_once("://").unwrap_or(("", ""));
            let host_ok = !host.is_empty()
                && !host.contains('/')
                && host.strip_prefix("*.").unwrap_or(host).find('*').is_none();
            if origin != "*" && (!matches!(scheme, "http" | "https") || !host_ok) {
                problem(
                    format!("{at}.allow_origins"),
                    format!("`{origin}`: an origin is `scheme://host[:port]`, its host may begin with `*.`, or `*`"),
                );
            }
        }
        for method in &self.allow_methods {
            if method != "*" && http::Method::from_bytes(method.as_bytes()).is_err() {
                problem(
                    format!("{at}.allow_methods"),
                    format!("`{method}` is not a method"),
                );
            }
        }
        for name in self.allow_headers.iter().chain(&self.expose_headers) {
            if name != "*" && http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                problem(
                    format!("{at}.allow_headers"),
                    format!("`{name}` is not a header name"),
                );
            }
        }
    }
}

/// A copy of a route's requests sent to another upstream.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MirrorConfig {
    pub upstream: String,
    /// The share of requests copied, 1-100 (default 100: every one).
    #[serde(default = "every_request")]
    pub percent: u32,
}

fn every_request() -> u32 {
    100
}

/// Header changes, applied in this order: `remove`, `set` (replaces every
/// value of the name), `add` (one more value).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HeaderEdits {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub add: BTreeMap<String, String>,
}

impl HeaderEdits {
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty() && self.set.is_empty() && self.add.is_empty()
    }

    /// Every name and value is one HTTP allows.
    fn check(&self, at: &str, problem: &mut dyn FnMut(String, String)) {
        let names = (self.remove.iter())
            .chain(self.set.keys())
            .chain(self.add.keys());
        for name in names {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                problem(at.to_string(), format!("`{name}` is not a header name"));
            }
        }
        for (name, value) in self.set.iter().chain(&self.add) {
            if http::HeaderValue::from_str(value).is_err() {
                problem(
                    format!("{at}.{name}"),
                    "not a header value (control characters?)".into(),
                );
            }
        }
    }
}

/// Which `Upgrade` protocols a route tunnels to its upstream once the
/// upstream answers `101 Switching Protocols`, and for how long. (Envoy's
/// `upgrade_configs`, APISIX's `enable_websocket`.)
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpgradeConfig {
    /// `Upgrade` tokens (case-insensitive) the route lets through, e.g.
    /// `websocket`; others are dropped as hop-by-hop fields. `[]` turns
    /// upgrades off. Default `[websocket]`.
    #[serde(default = "default_upgrade_protocols")]
    pub protocols: Vec<String>,
    /// A tunnel in which no byte has moved either way for this long is
    /// closed. Default 300000 (5 minutes).
    #[serde(default = "default_tunnel_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// A tunnel open this long is closed however busy. Absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_duration_ms: Option<u64>,
}

impl Default for UpgradeConfig {
    fn default() -> Self {
        UpgradeConfig {
            protocols: default_upgrade_protocols(),
            idle_timeout_ms: default_tunnel_idle_timeout_ms(),
            max_duration_ms: None,
        }
    }
}

impl UpgradeConfig {
    fn is_default(&self) -> bool {
        *self == UpgradeConfig::default()
    }

    /// Whether `protocol` (an `Upgrade` value's first token) is tunneled.
    pub fn allows(&self, protocol: &str) -> bool {
        self.protocols
            .iter()
            .any(|p| p.eq_ignore_ascii_case(protocol))
    }
}

fn default_upgrade_protocols() -> Vec<String> {
    vec!["websocket".to_string()]
}

fn default_tunnel_idle_timeout_ms() -> u64 {
    300_000
}

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    Http,
    Https,
}

/// At most one of `exact`, `prefix`, `regex`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathMatch {
    #[serde(default)]
    pub exact: Option<String>,
    #[serde(default)]
    pub prefix: Option<String>,
    /// Matched against the whole path (without the query).
    #[serde(default)]
    pub regex: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FunctionEndpoint {
    /// An Extism plugin declared in `plugins`.
    pub plugin: String,
    /// The function called (default: the last path segment names it).
    #[serde(default)]
    pub function: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ComponentEndpoint {
    /// A component (`wasi:http/proxy` world) declared in `plugins`.
    pub plugin: String,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FixedResponse {
    #[serde(default = "default_status")]
    pub status: u16,
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// A redirect: the request's own URL with the parts given here replaced.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Redirect {
    /// `https` or `http` (default: the request's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// Host (default: the request's, without its port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Port (default: none, the scheme's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Path and query (default: the request's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Instead of `path`: the request's path with a leading prefix
    /// replaced (whole segments; the query kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_prefix: Option<ReplacePrefix>,
    /// 301, 302, 303, 307 or 308 (default 301).
    #[serde(default = "default_redirect_status")]
    pub status: u16,
}

fn default_redirect_status() -> u16 {
    301
}

fn default_status() -> u16 {
    200
}

/// The names the routes may refer to.
pub(crate) struct Declared<'a> {
    pub plugins: &'a HashSet<&'a str>,
    pub upstreams: &'a HashSet<&'a str>,
}

/// Why a reference to `name` (an `upstream` or `plugin`) fails, and what
/// to do: declare it, or name one that is declared.
pub(crate) fn undeclared(kind: &str, name: &str, declared: &HashSet<&str>) -> String {
    const SHOWN: usize = 8;
    let mut names: Vec<&str> = declared.iter().copied().collect();
    names.sort_unstable();
    let section = format!("{kind}s");
    if names.is_empty() {
        return format!(
            "no {kind} named `{name}` in `{section}`, which is empty: declare it there"
        );
    }
    let more = match names.len().saturating_sub(SHOWN) {
        0 => String::new(),
        n => format!(" (and {n} more)"),
    };
    names.truncate(SHOWN);
    format!(
        "no {kind} named `{name}` in `{section}`: declare it there, or name one of `{}`{more}",
        names.join("`, `")
    )
}

/// One endpoint each, references, path and host patterns, methods.
pub(crate) fn check(
    routes: &[RouteConfig],
    declared: &Declared<'_>,
    problem: &mut dyn FnMut(String, String),
) {
    for (i, r) in routes.iter().enumerate() {
        let at = crate::names::entry("routes", i, &r.name);
        check_filters(
            &format!("{at}.plugins"),
            &r.plugins,
            declared.plugins,
            problem,
        );
        check_endpoint(&at, r, declared, problem);
        check_match(&at, r, problem);
        check_upgrade(&format!("{at}.upgrade"), &r.upgrade, problem);
        if let Some(cors) = &r.cors {
            cors.check(&format!("{at}.cors"), problem);
        }
        r.request_headers
            .check(&format!("{at}.request_headers"), problem);
        r.response_headers
            .check(&format!("{at}.response_headers"), problem);
        if let Some(rewrite) = &r.rewrite {
            rewrite.check(&format!("{at}.rewrite"), problem);
        }
        check_mirrors(&at, r, declared, problem);
    }
}

fn check_endpoint(
    at: &str,
    r: &RouteConfig,
    declared: &Declared<'_>,
    problem: &mut dyn FnMut(String, String),
) {
    let endpoints = [
        r.upstream.is_some(),
        r.function.is_some(),
        r.component.is_some(),
        r.respond.is_some(),
        r.redirect.is_some(),
    ];
    if endpoints.iter().filter(|&&e| e).count() != 1 {
        problem(
            at.to_string(),
            "a route needs exactly one endpoint: upstream, function, component, respond or redirect".into(),
        );
    }
    if let Some(redirect) = &r.redirect {
        if ![301, 302, 303, 307, 308].contains(&redirect.status) {
            problem(
                format!("{at}.redirect.status"),
                "must be 301, 302, 303, 307 or 308".into(),
            );
        }
        if redirect
            .scheme
            .as_deref()
            .is_some_and(|s| s != "http" && s != "https")
        {
            problem(
                format!("{at}.redirect.scheme"),
                "must be http or https".into(),
            );
        }
        if redirect
            .path
            .as_deref()
            .is_some_and(|p| !p.starts_with('/'))
        {
            problem(format!("{at}.redirect.path"), "must begin with /".into());
        }
        if let Some(prefix) = &redirect.replace_prefix {
            if redirect.path.is_some() {
                problem(
                    format!("{at}.redirect"),
                    "give path or replace_prefix, not both".into(),
                );
            }
            prefix.check(&format!("{at}.redirect.replace_prefix"), problem);
        }
    }
    if let Some(name) = &r.upstream {
        if !declared.upstreams.contains(name.as_str()) {
            problem(
                format!("{at}.upstream"),
                undeclared("upstream", name, declared.upstreams),
            );
        }
    }
    if let Some(function) = &r.function {
        if !declared.plugins.contains(function.plugin.as_str()) {
            problem(
                format!("{at}.function.plugin"),
                undeclared("plugin", &function.plugin, declared.plugins),
            );
        }
    }
    if let Some(component) = &r.component {
        if !declared.plugins.contains(component.plugin.as_str()) {
            problem(
                format!("{at}.component.plugin"),
                undeclared("plugin", &component.plugin, declared.plugins),
            );
        }
    }
    if let Some(respond) = &r.respond {
        if !(100..=999).contains(&respond.status) {
            problem(format!("{at}.respond.status"), "must be 100-999".into());
        }
    }
}

fn check_mirrors(
    at: &str,
    r: &RouteConfig,
    declared: &Declared<'_>,
    problem: &mut dyn FnMut(String, String),
) {
    if !r.mirror.is_empty() && r.upstream.is_none() {
        problem(
            format!("{at}.mirror"),
            "only a route to an upstream mirrors its requests".into(),
        );
    }
    for (j, m) in r.mirror.iter().enumerate() {
        if !declared.upstreams.contains(m.upstream.as_str()) {
            problem(
                format!("{at}.mirror[{j}].upstream"),
                undeclared("upstream", &m.upstream, declared.upstreams),
            );
        }
        if !(1..=100).contains(&m.percent) {
            problem(format!("{at}.mirror[{j}].percent"), "must be 1-100".into());
        }
    }
}

fn check_upgrade(at: &str, upgrade: &UpgradeConfig, problem: &mut dyn FnMut(String, String)) {
    for (i, protocol) in upgrade.protocols.iter().enumerate() {
        let token = !protocol.is_empty()
            && protocol
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~/".contains(&b));
        if !token {
            problem(
                format!("{at}.protocols[{i}]"),
                format!("`{protocol}` is not an Upgrade token (letters, digits, `-`, `.`, `/`)"),
            );
        } else if protocol.eq_ignore_ascii_case("h2c") {
            // An h2c upgrade is the connection's own business: the listener
            // speaks HTTP/2 to clients that start with its preface.
            problem(
                format!("{at}.protocols[{i}]"),
                "h2c cannot be tunneled: clients speak HTTP/2 to the listener directly".into(),
            );
        }
    }
    if upgrade.idle_timeout_ms == 0 {
        problem(format!("{at}.idle_timeout_ms"), "must be above 0".into());
    }
    if upgrade.max_duration_ms == Some(0) {
        problem(
            format!("{at}.max_duration_ms"),
            "must be above 0 (or absent: no limit)".into(),
        );
    }
}

fn check_match(at: &str, r: &RouteConfig, problem: &mut dyn FnMut(String, String)) {
    let path = &r.path;
    let set = [&path.exact, &path.prefix, &path.regex]
        .iter()
        .filter(|p| p.is_some())
        .count();
    if set > 1 {
        problem(
            format!("{at}.path"),
            "give one of exact, prefix or regex".into(),
        );
    }
    if let Some(pattern) = &path.regex {
        if let Err(e) = regex::Regex::new(pattern) {
            problem(format!("{at}.path.regex"), format!("invalid regex: {e}"));
        }
    }
    for (field, patterns) in [
        ("header_regex", &r.header_regex),
        ("query_regex", &r.query_regex),
    ] {
        for (name, pattern) in patterns {
            if let Err(e) = regex::Regex::new(pattern) {
                problem(
                    format!("{at}.{field}.{name}"),
                    format!("invalid regex: {e}"),
                );
            }
        }
    }
    for (j, host) in r.hosts.iter().enumerate() {
        if host.contains('*') && !(host.starts_with("*.") && host[2..].find('*').is_none()) {
            problem(
                format!("{at}.hosts[{j}]"),
                format!("`{host}`: only a leading `*.` wildcard is supported"),
            );
        }
    }
    for (j, method) in r.methods.iter().enumerate() {
        if http::Method::from_bytes(method.as_bytes()).is_err() {
            problem(
                format!("{at}.methods[{j}]"),
                format!("`{method}` is not an HTTP method"),
            );
        }
    }
}
