//! Gateway API resources to the gateway's own configuration: a pure
//! function of what the API server holds, so it is tested without one.
//!
//! - The GatewayClasses whose `controllerName` is this node's are its own,
//!   and so the Gateways of those classes.
//! - Each HTTPRoute attached (`parentRefs`) to one of those Gateways, and
//!   allowed by a listener of it (namespaces, hostnames), becomes routes:
//!   one per match of each rule (a rule without matches matches every
//!   path), ordered by the Gateway API's precedence, since the gateway takes
//!   the first route that matches.
//! - A rule's `backendRefs` (Services, by port) become one upstream whose
//!   nodes are the ready endpoints of the Services' EndpointSlices, each
//!   Service's share of the traffic its `weight`.
//! - Whatever is not served is said in the status (`status.rs`): the
//!   conditions the Gateway API defines, with their reasons.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::{
    Gateway, GatewayListeners, GatewayListenersAllowedRoutesNamespacesFrom,
};
use gateway_api::httproutes::{
    HttpRoute, HttpRouteRules, HttpRouteRulesMatches, HttpRouteRulesMatchesHeadersType,
    HttpRouteRulesMatchesPathType,
};
use gateway_api::referencegrants::ReferenceGrant;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use wasmgate_config::{
    FixedResponse, HeaderEdits, NodeConfig, PathMatch, PluginConfig, Redirect, RouteConfig,
    UpstreamConfig,
};

use crate::plugins::{RouteContext, WasmPlugins};
use crate::wasmplugin::WasmPlugin;

/// What the API server holds, as this node last saw it.
#[derive(Default)]
pub struct Snapshot {
    pub classes: Vec<GatewayClass>,
    pub gateways: Vec<Gateway>,
    pub routes: Vec<HttpRoute>,
    pub services: Vec<Service>,
    pub slices: Vec<EndpointSlice>,
    pub wasmplugins: Vec<WasmPlugin>,
    pub grants: Vec<ReferenceGrant>,
}

/// A condition to write: `type`, `status`, `reason`, `message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    pub kind: &'static str,
    pub ok: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Condition {
    fn yes(kind: &'static str, reason: &'static str, message: impl Into<String>) -> Condition {
        Condition {
            kind,
            ok: true,
            reason,
            message: message.into(),
        }
    }

    fn no(kind: &'static str, reason: &'static str, message: impl Into<String>) -> Condition {
        Condition {
            kind,
            ok: false,
            reason,
            message: message.into(),
        }
    }
}

/// The status of one HTTPRoute toward one of its parents.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteParentStatus {
    pub gateway_namespace: String,
    pub gateway: String,
    pub section_name: Option<String>,
    pub conditions: Vec<Condition>,
}

/// What the node serves, and what it says about each resource.
#[derive(Default)]
pub struct Translation {
    pub routes: Vec<RouteConfig>,
    pub upstreams: Vec<UpstreamConfig>,
    /// One per WasmPlugin that is not known broken.
    pub plugins: Vec<PluginConfig>,
    /// WasmPlugins: (namespace, name) -> generation, Accepted, how many
    /// HTTPRoutes it runs on.
    pub plugin_status: BTreeMap<(String, String), (Option<i64>, Condition, i64)>,
    /// GatewayClasses of this controller, by name.
    pub classes: Vec<String>,
    /// Gateways served: (namespace, name) -> routes attached per listener.
    pub gateways: BTreeMap<(String, String), Vec<(String, i32)>>,
    /// HTTPRoutes with a parent of ours: (namespace, name) -> generation,
    /// one status per such parent, and the `status.parents` entries of
    /// other controllers, kept as they are (the list is written whole).
    pub route_status: BTreeMap<(String, String), RouteStatus>,
}

/// An HTTPRoute's generation, our parents' statuses, other controllers'.
pub type RouteStatus = (Option<i64>, Vec<RouteParentStatus>, Vec<serde_json::Value>);

pub(crate) const GROUP: &str = "gateway.networking.k8s.io";

/// `broken`: WasmPlugins (by their plugin's name) that did not load on the
/// last try, and why.
pub fn translate(
    controller: &str,
    snapshot: &Snapshot,
    broken: &BTreeMap<String, String>,
) -> Translation {
    let wasmplugins = WasmPlugins::new(&snapshot.wasmplugins, broken);
    let mut out = Translation {
        classes: (snapshot.classes.iter())
            .filter(|c| c.spec.controller_name == controller)
            .map(|c| c.name_any())
            .collect(),
        plugins: wasmplugins.configs(),
        ..Translation::default()
    };
    let mut plugin_routes: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
    let ours: Vec<&Gateway> = (snapshot.gateways.iter())
        .filter(|g| out.classes.contains(&g.spec.gateway_class_name))
        .collect();
    let mut attached: HashMap<(String, String, String), i32> = HashMap::new();
    let mut served = Vec::new();
    for route in &snapshot.routes {
        let namespace = route.namespace().unwrap_or_default();
        let mut parents = Vec::new();
        let mut hosts_by_parent = Vec::new();
        let mut accepted_by = Vec::new();
        for parent in route.spec.parent_refs.iter().flatten() {
            let group = parent.group.as_deref().unwrap_or(GROUP);
            let kind = parent.kind.as_deref().unwrap_or("Gateway");
            let gateway_namespace = parent
                .namespace
                .clone()
                .unwrap_or_else(|| namespace.clone());
            let Some(gateway) = ours.iter().find(|g| {
                group == GROUP
                    && kind == "Gateway"
                    && g.name_any() == parent.name
                    && g.namespace().unwrap_or_default() == gateway_namespace
            }) else {
                continue; // another controller's parent: not ours to speak for
            };
            let listeners: Vec<&GatewayListeners> = (gateway.spec.listeners.iter())
                .filter(|l| parent.section_name.as_ref().is_none_or(|s| *s == l.name))
                .filter(|l| parent.port.is_none_or(|p| p == l.port))
                .collect();
            let mut status = RouteParentStatus {
                gateway_namespace: gateway_namespace.clone(),
                gateway: parent.name.clone(),
                section_name: parent.section_name.clone(),
                conditions: Vec::new(),
            };
            let allowed: Vec<&&GatewayListeners> = (listeners.iter())
                .filter(|l| allows_namespace(l, &gateway_namespace, &namespace))
                .collect();
            let hosts = route_hosts(
                route.spec.hostnames.as_deref().unwrap_or_default(),
                &allowed,
            );
            let accepted = if listeners.is_empty() {
                Condition::no(
                    "Accepted",
                    "NoMatchingParent",
                    "no listener of the Gateway matches the parentRef's sectionName and port",
                )
            } else if allowed.is_empty() {
                Condition::no(
                    "Accepted",
                    "NotAllowedByListeners",
                    format!(
                        "the Gateway's listeners do not allow routes from namespace `{namespace}`"
                    ),
                )
            } else if hosts.is_none() {
                Condition::no(
                    "Accepted",
                    "NoMatchingListenerHostname",
                    "none of the route's hostnames matches a listener's hostname",
                )
            } else if let Some(problem) = unsupported(route) {
                Condition::no("Accepted", "UnsupportedValue", problem)
            } else {
                for l in &allowed {
                    *attached
                        .entry((
                            gateway_namespace.clone(),
                            parent.name.clone(),
                            l.name.clone(),
                        ))
                        .or_default() += 1;
                }
                hosts_by_parent.push(hosts.clone().unwrap_or_default());
                accepted_by.push((gateway_namespace.clone(), parent.name.clone()));
                Condition::yes("Accepted", "Accepted", "served by wasmgate")
            };
            status.conditions.push(accepted);
            parents.push(status);
        }
        if parents.is_empty() {
            continue;
        }
        let resolved = if hosts_by_parent.is_empty() {
            None
        } else {
            // The hosts of every parent that accepted it (empty: any).
            let mut hosts: Vec<String> = hosts_by_parent.concat();
            if hosts_by_parent.iter().any(Vec::is_empty) {
                hosts.clear();
            }
            hosts.sort();
            hosts.dedup();
            let place = Place {
                namespace: &namespace,
                hosts,
                gateways: &accepted_by,
                plugins: &wasmplugins,
            };
            let used = &mut plugin_routes;
            Some(route_config(
                route,
                &place,
                snapshot,
                &mut out,
                &mut served,
                used,
            ))
        };
        let resolved_refs = match resolved {
            Some(Err(problem)) => problem,
            _ => Condition::yes("ResolvedRefs", "ResolvedRefs", "every backendRef resolved"),
        };
        for parent in &mut parents {
            parent.conditions.push(resolved_refs.clone());
        }
        let others = (route.status.iter())
            .flat_map(|s| s.parents.iter())
            .filter(|p| p.controller_name != controller)
            .filter_map(|p| serde_json::to_value(p).ok())
            .collect();
        out.route_status.insert(
            (namespace, route.name_any()),
            (route.metadata.generation, parents, others),
        );
    }
    served.sort_by(|a: &Ranked, b: &Ranked| a.rank.cmp(&b.rank));
    out.routes = served.into_iter().map(|r| r.route).collect();
    for (namespace, name, generation, plugin, broken) in wasmplugins.resources() {
        let attached = plugin_routes.get(plugin).map_or(0, |r| r.len() as i64);
        let condition = match broken {
            Some(reason) => Condition::no("Accepted", "Invalid", reason),
            None => Condition::yes(
                "Accepted",
                "Accepted",
                format!("loaded as plugin `{plugin}`; runs on {attached} HTTPRoute(s)"),
            ),
        };
        out.plugin_status
            .insert((namespace, name), (generation, condition, attached));
    }
    for gateway in ours {
        let key = (gateway.namespace().unwrap_or_default(), gateway.name_any());
        let listeners = (gateway.spec.listeners.iter())
            .map(|l| {
                let n = attached
                    .get(&(key.0.clone(), key.1.clone(), l.name.clone()))
                    .copied()
                    .unwrap_or(0);
                (l.name.clone(), n)
            })
            .collect();
        out.gateways.insert(key, listeners);
    }
    out
}

fn allows_namespace(listener: &GatewayListeners, gateway_ns: &str, route_ns: &str) -> bool {
    let from = (listener.allowed_routes.as_ref())
        .and_then(|a| a.namespaces.as_ref())
        .and_then(|n| n.from.clone());
    match from {
        Some(GatewayListenersAllowedRoutesNamespacesFrom::All) => true,
        // Selector needs the namespaces' labels, not watched yet.
        Some(GatewayListenersAllowedRoutesNamespacesFrom::Selector) => false,
        Some(GatewayListenersAllowedRoutesNamespacesFrom::Same) | None => gateway_ns == route_ns,
    }
}

/// The hosts the route serves under these listeners (empty: any host), or
/// None when its hostnames and the listeners' have nothing in common.
fn route_hosts(route_hosts: &[String], listeners: &[&&GatewayListeners]) -> Option<Vec<String>> {
    let listener_hosts: Vec<&str> = listeners
        .iter()
        .filter_map(|l| l.hostname.as_deref())
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

/// What of the route this node cannot serve yet, said as the reason.
fn unsupported(route: &HttpRoute) -> Option<String> {
    for (i, rule) in route.spec.rules.iter().flatten().enumerate() {
        for filter in rule.filters.iter().flatten() {
            let value = serde_json::to_value(filter).unwrap_or_default();
            let kind = value["type"].as_str().unwrap_or_default();
            if !matches!(
                kind,
                "RequestRedirect" | "RequestHeaderModifier" | "ResponseHeaderModifier"
            ) {
                return Some(format!(
                    "rules[{i}].filters: {kind} is not supported by wasmgate yet (RequestRedirect and the header modifiers are; WasmPlugins attach filters)"
                ));
            }
            if value["requestRedirect"]["path"]["type"] == "ReplacePrefixMatch" {
                return Some(format!("rules[{i}].filters: RequestRedirect with a ReplacePrefixMatch path is not supported by wasmgate yet (ReplaceFullPath is)"));
            }
        }
        for backend in rule.backend_refs.iter().flatten() {
            if backend.filters.as_ref().is_some_and(|f| !f.is_empty()) {
                return Some(format!(
                    "rules[{i}].backendRefs[].filters: not supported by wasmgate yet"
                ));
            }
        }
        for (j, m) in rule.matches.iter().flatten().enumerate() {
            if m.query_params.as_ref().is_some_and(|q| !q.is_empty()) {
                return Some(format!(
                    "rules[{i}].matches[{j}].queryParams: not supported by wasmgate yet"
                ));
            }
            if (m.headers.iter().flatten())
                .any(|h| h.r#type == Some(HttpRouteRulesMatchesHeadersType::RegularExpression))
            {
                return Some(format!("rules[{i}].matches[{j}].headers: RegularExpression is not supported by wasmgate yet"));
            }
        }
    }
    None
}

/// A rule's RequestRedirect filter as the gateway's redirect.
fn redirect(rule: &HttpRouteRules) -> Option<Redirect> {
    let filter = (rule.filters.iter().flatten())
        .map(|f| serde_json::to_value(f).unwrap_or_default())
        .find(|f| f["type"] == "RequestRedirect")?;
    let r = &filter["requestRedirect"];
    Some(Redirect {
        scheme: r["scheme"].as_str().map(str::to_string),
        host: r["hostname"].as_str().map(str::to_string),
        port: r["port"].as_u64().and_then(|p| u16::try_from(p).ok()),
        path: r["path"]["replaceFullPath"].as_str().map(str::to_string),
        // The Gateway API's default is 302.
        status: r["statusCode"].as_u64().map_or(302, |c| c as u16),
    })
}

/// A rule's `RequestHeaderModifier` or `ResponseHeaderModifier` (`field`)
/// as the route's header changes.
fn header_edits(rule: &HttpRouteRules, field: &str) -> HeaderEdits {
    let mut edits = HeaderEdits::default();
    for filter in rule.filters.iter().flatten() {
        let value = serde_json::to_value(filter).unwrap_or_default();
        let m = &value[field];
        let pairs = |list: &serde_json::Value| -> Vec<(String, String)> {
            (list.as_array().into_iter().flatten())
                .filter_map(|h| {
                    let name = h["name"].as_str()?.to_ascii_lowercase();
                    Some((name, h["value"].as_str()?.to_string()))
                })
                .collect()
        };
        edits.set.extend(pairs(&m["set"]));
        edits.add.extend(pairs(&m["add"]));
        let removed = (m["remove"].as_array().into_iter().flatten())
            .filter_map(|n| n.as_str().map(str::to_ascii_lowercase));
        edits.remove.extend(removed);
    }
    edits
}

/// A route with the key the Gateway API orders matches by.
struct Ranked {
    rank: (u8, u8, i64, i64, u8, String, String),
    route: RouteConfig,
}

/// Where an HTTPRoute is served: its namespace, its hosts (empty: any),
/// the Gateways that accepted it and the WasmPlugins that may apply.
struct Place<'a> {
    namespace: &'a str,
    hosts: Vec<String>,
    gateways: &'a [(String, String)],
    plugins: &'a WasmPlugins<'a>,
}

/// The routes and upstream of `route`'s rules (into `out` and `served`), or
/// the ResolvedRefs condition that says what did not resolve (the rules are
/// served all the same: an unresolved backend answers 500, as the Gateway
/// API asks). `used`: the HTTPRoutes each plugin runs on.
fn route_config(
    route: &HttpRoute,
    place: &Place,
    snapshot: &Snapshot,
    out: &mut Translation,
    served: &mut Vec<Ranked>,
    used: &mut BTreeMap<String, BTreeSet<(String, String)>>,
) -> Result<(), Condition> {
    let (namespace, name) = (place.namespace, route.name_any());
    let created = (route.metadata.creation_timestamp.as_ref()).map_or(0, |t| t.0.as_second());
    let variants = host_variants(route, place);
    let mut problem = None;
    for (i, rule) in route.spec.rules.iter().flatten().enumerate() {
        let base = entry_name(&format!("{namespace}.{name}.r{i}"));
        let endpoint = match (redirect(rule), backend(rule, namespace, snapshot)) {
            (Some(redirect), _) => Endpoint::Redirect(redirect),
            (None, Ok(nodes)) if nodes.is_empty() => {
                Endpoint::Respond(503, "no ready endpoints for this route's backends".into())
            }
            (None, Ok(nodes)) => {
                out.upstreams.push(UpstreamConfig {
                    name: base.clone(),
                    ..upstream(nodes)
                });
                Endpoint::Upstream(base.clone())
            }
            (None, Err(condition)) => {
                let message = condition.message.clone();
                problem.get_or_insert(condition);
                Endpoint::Respond(500, message)
            }
        };
        let request_headers = header_edits(rule, "requestHeaderModifier");
        let response_headers = header_edits(rule, "responseHeaderModifier");
        let default_match = [HttpRouteRulesMatches::default()];
        let matches = match rule.matches.as_deref() {
            Some(m) if !m.is_empty() => m,
            _ => &default_match,
        };
        for (j, m) in matches.iter().enumerate() {
            let (path, path_rank, length) = path_match(m);
            let headers: BTreeMap<String, String> = (m.headers.iter().flatten())
                .map(|h| (h.name.to_ascii_lowercase(), h.value.clone()))
                .collect();
            let methods: Vec<String> = m
                .method
                .as_ref()
                .and_then(|method| serde_json::to_value(method).ok())
                .and_then(|v| v.as_str().map(str::to_string))
                .into_iter()
                .collect();
            for (k, hosts) in variants.iter().enumerate() {
                let host_rank = match hosts.first() {
                    None => 2,
                    Some(h) if h.starts_with("*.") => 1,
                    Some(_) => 0,
                };
                let suffix = if k == 0 {
                    String::new()
                } else {
                    format!(".h{k}")
                };
                let mut config: RouteConfig = serde_json::from_value(
                    serde_json::json!({"name": entry_name(&format!("{base}.m{j}{suffix}"))}),
                )
                .expect("a route with defaults");
                config.hosts = hosts.clone();
                config.path = path.clone();
                config.methods = methods.clone();
                config.headers = headers.clone();
                config.request_headers = request_headers.clone();
                config.response_headers = response_headers.clone();
                let at = RouteContext {
                    namespace,
                    name: &name,
                    gateways: place.gateways,
                    host: hosts
                        .first()
                        .map(String::as_str)
                        .filter(|_| hosts.len() == 1),
                };
                let chain = place.plugins.chain(&at);
                let endpoint = match chain {
                    Ok((filters, plugins)) => {
                        for plugin in plugins {
                            let key = (namespace.to_string(), name.clone());
                            used.entry(plugin).or_default().insert(key);
                        }
                        config.plugins = filters;
                        endpoint.clone()
                    }
                    Err(reason) => Endpoint::Respond(500, reason),
                };
                match endpoint {
                    Endpoint::Upstream(upstream) => config.upstream = Some(upstream),
                    Endpoint::Redirect(redirect) => config.redirect = Some(redirect),
                    Endpoint::Respond(status, body) => {
                        config.respond = Some(FixedResponse {
                            status,
                            body: format!("{body}\n"),
                            headers: BTreeMap::new(),
                        })
                    }
                }
                served.push(Ranked {
                    rank: (
                        host_rank,
                        path_rank,
                        -length,
                        -(headers.len() as i64),
                        u8::from(methods.is_empty()),
                        format!("{created:020}"),
                        format!("{namespace}/{name}"),
                    ),
                    route: config,
                });
            }
        }
    }
    match problem {
        Some(condition) => Err(condition),
        None => Ok(()),
    }
}

/// The host lists the route is served under: its hosts as one list when no
/// WasmPlugin's match rule names a domain; otherwise one route per host,
/// plus one per named domain the route's hosts cover (with the any-host
/// route last), so that each host gets the chain its rules say.
fn host_variants(route: &HttpRoute, place: &Place) -> Vec<Vec<String>> {
    let at = RouteContext {
        namespace: place.namespace,
        name: &route.name_any(),
        gateways: place.gateways,
        host: None,
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

#[derive(Clone)]
enum Endpoint {
    Upstream(String),
    Redirect(Redirect),
    Respond(u16, String),
}

fn upstream(nodes: Vec<NodeConfig>) -> UpstreamConfig {
    let yaml = serde_json::json!({"name": "x", "nodes": nodes});
    serde_json::from_value(yaml).expect("an upstream with defaults")
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

fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The nodes of a rule's backendRefs, each Service's weight shared among
/// its ready endpoints.
fn backend(
    rule: &HttpRouteRules,
    namespace: &str,
    snapshot: &Snapshot,
) -> Result<Vec<NodeConfig>, Condition> {
    let mut nodes = Vec::new();
    for backend in rule.backend_refs.iter().flatten() {
        let group = backend.group.as_deref().unwrap_or("");
        let kind = backend.kind.as_deref().unwrap_or("Service");
        if !group.is_empty() || kind != "Service" {
            return Err(Condition::no(
                "ResolvedRefs",
                "InvalidKind",
                format!(
                    "backendRef {}: only Services are supported, not {group}/{kind}",
                    backend.name
                ),
            ));
        }
        let service_ns = backend.namespace.as_deref().unwrap_or(namespace);
        if service_ns != namespace && !granted(snapshot, namespace, service_ns, &backend.name) {
            return Err(Condition::no(
                "ResolvedRefs",
                "RefNotPermitted",
                format!(
                    "backendRef {}: Service `{}` in namespace `{service_ns}` needs a ReferenceGrant there from HTTPRoutes of namespace `{namespace}`",
                    backend.name, backend.name
                ),
            ));
        }
        let weight = backend.weight.unwrap_or(1);
        if weight == 0 {
            continue;
        }
        let Some(service) = (snapshot.services.iter())
            .find(|s| s.name_any() == backend.name && s.namespace().as_deref() == Some(service_ns))
        else {
            return Err(Condition::no(
                "ResolvedRefs",
                "BackendNotFound",
                format!(
                    "backendRef {}: no Service `{}` in namespace `{service_ns}`",
                    backend.name, backend.name
                ),
            ));
        };
        let Some(port) = backend.port else {
            return Err(Condition::no(
                "ResolvedRefs",
                "UnsupportedValue",
                format!(
                    "backendRef {}: a Service backend needs its `port`",
                    backend.name
                ),
            ));
        };
        let Some(service_port) = (service.spec.iter())
            .flat_map(|s| s.ports.iter().flatten())
            .find(|p| p.port == port)
        else {
            return Err(Condition::no(
                "ResolvedRefs",
                "BackendNotFound",
                format!(
                    "backendRef {}: the Service has no port {port}",
                    backend.name
                ),
            ));
        };
        let endpoints = ready_endpoints(
            snapshot,
            service_ns,
            &backend.name,
            service_port.name.as_deref(),
        );
        // The Service's share split among its endpoints (weights are whole
        // numbers: scaled by 1000 so that shares stay close).
        let n = endpoints.len().max(1) as u32;
        for address in endpoints {
            nodes.push(NodeConfig {
                address,
                weight: ((weight as u32) * 1000 / n).max(1),
            });
        }
    }
    Ok(nodes)
}

/// Whether a ReferenceGrant in `to_ns` lets HTTPRoutes of `from_ns` refer
/// to its Service `service` (a grant without a name covers every Service).
fn granted(snapshot: &Snapshot, from_ns: &str, to_ns: &str, service: &str) -> bool {
    (snapshot.grants.iter())
        .filter(|g| g.namespace().as_deref() == Some(to_ns))
        .any(|g| {
            let from = (g.spec.from.iter())
                .any(|f| f.group == GROUP && f.kind == "HTTPRoute" && f.namespace == from_ns);
            let to = (g.spec.to.iter()).any(|t| {
                t.group.is_empty()
                    && t.kind == "Service"
                    && t.name.as_deref().is_none_or(|n| n == service)
            });
            from && to
        })
}

/// `address:port` of every ready endpoint of Service `service`'s port named
/// `port_name`, from all its EndpointSlices.
fn ready_endpoints(
    snapshot: &Snapshot,
    namespace: &str,
    service: &str,
    port_name: Option<&str>,
) -> Vec<String> {
    let mut found = Vec::new();
    for slice in &snapshot.slices {
        let of_service = slice.namespace().as_deref() == Some(namespace)
            && slice
                .labels()
                .get("kubernetes.io/service-name")
                .map(String::as_str)
                == Some(service);
        if !of_service {
            continue;
        }
        let Some(port) = (slice.ports.iter().flatten())
            .find(|p| p.name.as_deref().unwrap_or("") == port_name.unwrap_or(""))
            .and_then(|p| p.port)
        else {
            continue;
        };
        for endpoint in &slice.endpoints {
            let ready = endpoint
                .conditions
                .as_ref()
                .and_then(|c| c.ready)
                .unwrap_or(true);
            if !ready {
                continue;
            }
            for address in &endpoint.addresses {
                found.push(if slice.address_type == "IPv6" {
                    format!("[{address}]:{port}")
                } else {
                    format!("{address}:{port}")
                });
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// A name within the configuration's rule (64 characters at most): long
/// ones keep their start and a hash of the whole.
pub(crate) fn entry_name(full: &str) -> String {
    let clean: String = full
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    if clean.len() <= 64 {
        return clean;
    }
    use sha2::Digest;
    let hash = hex::encode(&sha2::Sha256::digest(full.as_bytes())[..6]);
    format!("{}-{hash}", &clean[..51])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    fn snapshot(routes: serde_json::Value) -> Snapshot {
        Snapshot {
            classes: vec![parse(
                json!({"metadata": {"name": "c"}, "spec": {"controllerName": "me/x"}}),
            )],
            gateways: vec![parse(json!({"metadata": {"name": "g", "namespace": "ns"},
                "spec": {"gatewayClassName": "c", "listeners": [{"name": "web", "port": 80, "protocol": "HTTP", "hostname": "*.example.com"}]}}))],
            routes: routes
                .as_array()
                .unwrap()
                .iter()
                .cloned()
                .map(parse)
                .collect(),
            services: vec![parse(
                json!({"metadata": {"name": "s", "namespace": "ns"}, "spec": {"ports": [{"name": "http", "port": 80}]}}),
            )],
            slices: vec![parse(
                json!({"metadata": {"name": "s-1", "namespace": "ns", "labels": {"kubernetes.io/service-name": "s"}},
                "addressType": "IPv4", "ports": [{"name": "http", "port": 8080}],
                "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"], "conditions": {"ready": false}}]}),
            )],
            wasmplugins: Vec::new(),
            grants: Vec::new(),
        }
    }

    /// A Service of another namespace is reached only with a ReferenceGrant
    /// there that names the route's namespace (and the Service, if any).
    #[test]
    fn another_namespaces_service_needs_a_reference_grant() {
        let mut snap = snapshot(json!([
            {"metadata": {"name": "r", "namespace": "ns"},
             "spec": {"parentRefs": [{"name": "g"}], "rules": [
                {"backendRefs": [{"name": "db", "namespace": "data", "port": 80}]}]}}
        ]));
        snap.services.push(parse(
            json!({"metadata": {"name": "db", "namespace": "data"}, "spec": {"ports": [{"name": "http", "port": 80}]}}),
        ));
        snap.slices.push(parse(json!({
            "metadata": {"name": "db-1", "namespace": "data", "labels": {"kubernetes.io/service-name": "db"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 9000}],
            "endpoints": [{"addresses": ["10.0.1.1"]}]})));
        let resolved = |snap: &Snapshot| {
            let t = translate("me/x", snap, &BTreeMap::new());
            let (_, parents, _) = &t.route_status[&("ns".to_string(), "r".to_string())];
            let c = parents[0]
                .conditions
                .iter()
                .find(|c| c.kind == "ResolvedRefs")
                .unwrap();
            (
                c.ok,
                c.reason,
                t.upstreams.first().map(|u| u.nodes[0].address.clone()),
            )
        };
        assert_eq!(resolved(&snap), (false, "RefNotPermitted", None));
        let grant = |from_ns: &str, name: Option<&str>| -> ReferenceGrant {
            parse(
                json!({"metadata": {"name": "g", "namespace": "data"}, "spec": {
                "from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": from_ns}],
                "to": [{"group": "", "kind": "Service", "name": name}]}}),
            )
        };
        snap.grants = vec![grant("elsewhere", None), grant("ns", Some("other"))];
        assert_eq!(resolved(&snap).1, "RefNotPermitted");
        snap.grants = vec![grant("ns", Some("db"))];
        assert_eq!(
            resolved(&snap),
            (true, "ResolvedRefs", Some("10.0.1.1:9000".to_string()))
        );
    }

    /// A WasmPlugin's domain rule gets the host a route of its own, ahead
    /// of the wildcard, with the rule's configuration; a redirect filter
    /// becomes the route's redirect (302 unless said).
    #[test]
    fn plugin_domains_split_routes_by_host_and_redirects_translate() {
        let mut snap = snapshot(json!([
            {"metadata": {"name": "r", "namespace": "ns"},
             "spec": {"parentRefs": [{"name": "g"}], "rules": [
                {"matches": [{"path": {"type": "PathPrefix", "value": "/api"}}], "backendRefs": [{"name": "s", "port": 80}]},
                {"matches": [{"path": {"type": "Exact", "value": "/old"}}],
                 "filters": [{"type": "RequestRedirect", "requestRedirect": {"scheme": "https", "path": {"type": "ReplaceFullPath", "replaceFullPath": "/new"}}}]}]}}
        ]));
        snap.wasmplugins = vec![parse(json!({
            "metadata": {"name": "auth", "namespace": "ns", "generation": 3},
            "spec": {"url": "/p/auth.wasm", "defaultConfig": {"who": "any"},
                     "matchRules": [{"domain": ["api.example.com"], "config": {"who": "api"}}]}
        }))];
        let t = translate("me/x", &snap, &BTreeMap::new());
        assert_eq!(t.plugins.len(), 1);
        let api: Vec<&RouteConfig> = t.routes.iter().filter(|r| r.upstream.is_some()).collect();
        assert_eq!(api.len(), 2);
        assert_eq!(api[0].hosts, ["api.example.com"]);
        assert_eq!(api[0].plugins[0].conf, Some(json!({"who": "api"})));
        assert_eq!(api[1].hosts, ["*.example.com"]);
        assert_eq!(api[1].plugins[0].conf, Some(json!({"who": "any"})));
        let old = t.routes.iter().find(|r| r.redirect.is_some()).unwrap();
        let redirect = old.redirect.as_ref().unwrap();
        assert_eq!(
            (
                redirect.scheme.as_deref(),
                redirect.path.as_deref(),
                redirect.status
            ),
            (Some("https"), Some("/new"), 302)
        );
        let (generation, accepted, attached) = &t.plugin_status[&("ns".into(), "auth".into())];
        assert_eq!((*generation, accepted.ok, *attached), (Some(3), true, 1));
        // The plugin broken: its routes answer 500 with the reason; the
        // status says it.
        let broken = BTreeMap::from([("wp.ns.auth".to_string(), "no such file".to_string())]);
        let t = translate("me/x", &snap, &broken);
        assert!(t.plugins.is_empty());
        let failing = t
            .routes
            .iter()
            .find(|r| r.hosts == ["api.example.com"])
            .unwrap();
        let respond = failing.respond.as_ref().unwrap();
        assert_eq!(respond.status, 500);
        assert!(respond.body.contains("no such file"), "{}", respond.body);
        let (_, accepted, _) = &t.plugin_status[&("ns".into(), "auth".into())];
        assert_eq!((accepted.ok, accepted.reason), (false, "Invalid"));
    }

    fn route(
        name: &str,
        hostnames: serde_json::Value,
        rules: serde_json::Value,
    ) -> serde_json::Value {
        json!({"metadata": {"name": name, "namespace": "ns"},
               "spec": {"parentRefs": [{"name": "g"}], "hostnames": hostnames, "rules": rules}})
    }

    #[test]
    fn ready_endpoints_become_nodes_and_matches_are_ordered_by_precedence() {
        let snap = snapshot(json!([route(
            "a",
            json!(["api.example.com"]),
            json!([
                {"matches": [{"path": {"type": "PathPrefix", "value": "/"}}], "backendRefs": [{"name": "s", "port": 80}]},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/v1/users"}}], "backendRefs": [{"name": "s", "port": 80}]},
                {"matches": [{"path": {"type": "Exact", "value": "/v1"}}], "backendRefs": [{"name": "s", "port": 80}]}
            ])
        )]));
        let t = translate("me/x", &snap, &BTreeMap::new());
        let paths: Vec<String> = t
            .routes
            .iter()
            .map(|r| format!("{:?}/{:?}", r.path.exact, r.path.regex))
            .collect();
        assert!(paths[0].starts_with("Some(\"/v1\")"), "{paths:?}");
        assert!(paths[1].contains("v1/users"), "{paths:?}");
        assert_eq!(t.routes[2].path, PathMatch::default(), "`/` matches last");
        assert_eq!(t.routes[0].hosts, ["api.example.com"]);
        assert_eq!(
            t.upstreams[0].nodes.len(),
            1,
            "the endpoint that is not ready is left out"
        );
        assert_eq!(t.upstreams[0].nodes[0].address, "10.0.0.1:8080");
        assert_eq!(
            t.gateways[&("ns".into(), "g".into())],
            [("web".to_string(), 1)]
        );
    }

    /// Another controller's entry in a route's status is written back as
    /// it was; ours is not carried over twice.
    #[test]
    fn other_controllers_status_entries_are_kept() {
        let mut r = route(
            "shared",
            json!([]),
            json!([{"backendRefs": [{"name": "s", "port": 80}]}]),
        );
        let entry = |controller: &str| {
            json!({"parentRef": {"name": "g"}, "controllerName": controller,
                   "conditions": []})
        };
        r["status"] = json!({"parents": [entry("me/x"), entry("someone/else")]});
        let t = translate("me/x", &snapshot(json!([r])), &BTreeMap::new());
        let (_, ours, others) = &t.route_status[&("ns".to_string(), "shared".to_string())];
        assert_eq!(ours.len(), 1);
        assert_eq!(others.len(), 1);
        assert_eq!(others[0]["controllerName"], "someone/else");
    }

    #[test]
    fn what_is_not_served_is_said_with_the_gateway_api_reasons() {
        let snap = snapshot(json!([
            route(
                "other-host",
                json!(["api.other.org"]),
                json!([{"backendRefs": [{"name": "s", "port": 80}]}])
            ),
            route(
                "no-service",
                json!([]),
                json!([{"backendRefs": [{"name": "gone", "port": 80}]}])
            ),
            route(
                "wrong-port",
                json!([]),
                json!([{"backendRefs": [{"name": "s", "port": 81}]}])
            )
        ]));
        let t = translate("me/x", &snap, &BTreeMap::new());
        let reason = |name: &str, kind: &str| {
            let (_, parents, _) = &t.route_status[&("ns".to_string(), name.to_string())];
            let c = parents[0]
                .conditions
                .iter()
                .find(|c| c.kind == kind)
                .unwrap();
            (c.ok, c.reason)
        };
        assert_eq!(
            reason("other-host", "Accepted"),
            (false, "NoMatchingListenerHostname")
        );
        assert_eq!(
            reason("no-service", "ResolvedRefs"),
            (false, "BackendNotFound")
        );
        assert_eq!(
            reason("wrong-port", "ResolvedRefs"),
            (false, "BackendNotFound")
        );
        // Unresolved backends still get their routes, answering 500.
        assert!(t
            .routes
            .iter()
            .all(|r| r.respond.as_ref().is_some_and(|f| f.status == 500)));
        assert!(translate("someone/else", &snap, &BTreeMap::new())
            .routes
            .is_empty());
    }

    #[test]
    fn host_patterns_and_long_names() {
        assert!(host_matches("*.example.com", "a.example.com"));
        assert!(!host_matches("*.example.com", "example.com"));
        assert!(host_matches("API.example.com", "api.example.com"));
        let long = entry_name(&"x".repeat(100));
        assert_eq!(long.len(), 64);
        assert_ne!(long, entry_name(&"x".repeat(101)));
    }
}
