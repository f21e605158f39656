//! `routes`: what a request must look like to match, its filter chain, and
//! its endpoint.

use std::collections::{BTreeMap, HashSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::plugins::{check_filters, FilterRef};

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
    /// The route's filter chain.
    #[serde(default)]
    pub plugins: Vec<FilterRef>,
    /// Endpoint: an upstream's name ...
    #[serde(default)]
    pub upstream: Option<String>,
    /// ... or an Extism function ...
    #[serde(default)]
    pub function: Option<FunctionEndpoint>,
    /// ... or a fixed answer.
    #[serde(default)]
    pub respond: Option<FixedResponse>,
    /// Requests this route serves at once; more are answered 503 with
    /// `Retry-After` at once instead of queueing. Unlimited when absent.
    #[serde(default)]
    pub max_concurrent_requests: Option<usize>,
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
pub struct FixedResponse {
    #[serde(default = "default_status")]
    pub status: u16,
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

fn default_status() -> u16 {
    200
}

/// The names the routes may refer to.
pub(crate) struct Declared<'a> {
    pub plugins: &'a HashSet<&'a str>,
    pub upstreams: &'a HashSet<&'a str>,
}

/// One endpoint each, references, path and host patterns, methods.
pub(crate) fn check(
    routes: &[RouteConfig],
    declared: &Declared<'_>,
    problem: &mut dyn FnMut(String, String),
) {
    for (i, r) in routes.iter().enumerate() {
        let at = format!("routes[{i}]");
        check_filters(
            &format!("{at}.plugins"),
            &r.plugins,
            declared.plugins,
            problem,
        );
        check_endpoint(&at, r, declared, problem);
        check_match(&at, r, problem);
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
        r.respond.is_some(),
    ];
    if endpoints.iter().filter(|&&e| e).count() != 1 {
        problem(
            at.to_string(),
            "a route needs exactly one endpoint: upstream, function or respond".into(),
        );
    }
    if let Some(name) = &r.upstream {
        if !declared.upstreams.contains(name.as_str()) {
            problem(
                format!("{at}.upstream"),
                format!("no upstream named `{name}` in `upstreams`"),
            );
        }
    }
    if let Some(function) = &r.function {
        if !declared.plugins.contains(function.plugin.as_str()) {
            problem(
                format!("{at}.function.plugin"),
                format!("no plugin named `{}` in `plugins`", function.plugin),
            );
        }
    }
    if let Some(respond) = &r.respond {
        if !(100..=999).contains(&respond.status) {
            problem(format!("{at}.respond.status"), "must be 100-999".into());
        }
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
