//! A route's rules to the node's routes (`route_config`): one route per
//! match of each rule (and per host, when WasmPlugins apply per domain),
//! each to its rule's endpoint (the upstream of its Services, a
//! WasmPlugin that serves it, a redirect, or a fixed answer when it cannot
//! be served) with its filters (`rule_filters.rs`) and plugin chain.

use std::collections::BTreeMap;

use wasmgate_config::{ComponentEndpoint, FixedResponse, FunctionEndpoint, RouteConfig};

use crate::backends::backend;
use crate::hosts::host_variants;
use crate::model::{Condition, Snapshot, Translation};
use crate::names::entry_name;
use crate::place::{Place, Used};
use crate::plugins::{RouteContext, WasmBackend, WasmPlugins};
use crate::ranking::Ranked;
use crate::route_view::{RouteKind, RouteView, RuleView};
use crate::rule_filters;

/// The routes and upstream of `route`'s rules (into `out` and `served`), or
/// the ResolvedRefs condition that says what did not resolve (the rules are
/// served all the same: an unresolved backend answers 500, as the Gateway
/// API asks). `used`: the routes each plugin runs on.
pub(crate) fn route_config(
    route: &RouteView,
    place: &Place,
    snapshot: &Snapshot,
    out: &mut Translation,
    served: &mut Vec<Ranked>,
    used: Used,
) -> Result<(), Condition> {
    let (namespace, name) = (route.namespace.as_str(), route.name.as_str());
    let variants = host_variants(route, place);
    let mut problem = None;
    // GRPCRoutes and HTTPRoutes of one name are apart in the configuration.
    let prefix = match route.kind {
        RouteKind::Http => format!("{namespace}.{name}"),
        RouteKind::Grpc => format!("grpc.{namespace}.{name}"),
    };
    for (i, rule) in route.rules.iter().enumerate() {
        let base = entry_name(&format!("{prefix}.r{i}"));
        let has_redirect = rule.filters.iter().any(|f| f["type"] == "RequestRedirect");
        let wasm =
            (rule.backends.iter()).any(|b| b.group.as_deref() == Some(crate::wasmplugin::GROUP));
        let resolved = match (has_redirect, wasm) {
            (true, _) => Ok(Endpoint::Redirect),
            // A WasmPlugin serves the rule itself.
            (false, true) => {
                wasm_backend(rule, namespace, place.plugins).map(|(endpoint, plugin)| {
                    let key = (route.kind, namespace.to_string(), name.to_string());
                    used.plugins.entry(plugin).or_default().insert(key);
                    endpoint
                })
            }
            (false, false) => backend(route.kind, &rule.backends, namespace, snapshot, place.tls)
                .map(|b| {
                    if let Some((policy, _)) = &b.tls {
                        for p in [*policy].iter().chain(place.tls.rivals(*policy)) {
                            let gateways = place.gateways.iter().cloned();
                            used.policies.entry(*p).or_default().extend(gateways);
                        }
                    }
                    if b.nodes.is_empty() {
                        return Endpoint::Respond(
                            503,
                            "no ready endpoints for this route's backends".into(),
                        );
                    }
                    match b.upstream(base.clone()) {
                        Ok(upstream) => {
                            out.upstreams.push(upstream);
                            Endpoint::Upstream(base.clone())
                        }
                        Err(why) => Endpoint::Respond(500, format!("BackendTLSPolicy: {why}")),
                    }
                }),
        };
        let endpoint = resolved.unwrap_or_else(|condition| {
            let message = condition.message.clone();
            problem.get_or_insert(condition);
            Endpoint::Respond(500, message)
        });
        let mirrors = match &endpoint {
            Endpoint::Upstream(_) => {
                rule_filters::mirrors(route, rule, &base, place, snapshot, out, &mut problem)
            }
            _ => Vec::new(),
        };
        let named: Vec<&str> = rule.extension_plugins().collect();
        let endpoint = match named.iter().find(|n| !place.plugins.exists(namespace, n)) {
            Some(missing) => {
                let condition = Condition::no(
                    "ResolvedRefs",
                    "ExtensionRefNotFound",
                    format!("an ExtensionRef filter names WasmPlugin `{namespace}/{missing}`, which does not exist: the rule answers 500"),
                );
                let message = condition.message.clone();
                problem.get_or_insert(condition);
                Endpoint::Respond(500, message)
            }
            None => endpoint,
        };
        let request_headers = rule_filters::header_edits(rule, "requestHeaderModifier");
        let response_headers = rule_filters::header_edits(rule, "responseHeaderModifier");
        for (j, m) in rule.matches.iter().enumerate() {
            for (k, hosts) in variants.iter().enumerate() {
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
                config.scheme = place.scheme;
                config.ports = place.ports.clone();
                config.path = m.path.clone();
                config.methods = m.methods.clone();
                config.headers = m.headers.clone();
                config.query = m.query.clone();
                config.header_regex = m.header_regex.clone();
                config.query_regex = m.query_regex.clone();
                config.rewrite = rule_filters::rewrite(rule, m.prefix.as_deref());
                config.mirror = mirrors.clone();
                config.request_headers = request_headers.clone();
                config.cors = (rule.filters.iter())
                    .find(|f| f["type"] == "CORS")
                    .map(crate::route_view::cors);
                config.response_headers = response_headers.clone();
                let at = RouteContext {
                    kind: route.kind,
                    namespace,
                    name,
                    gateways: place.gateways,
                    host: hosts
                        .first()
                        .map(String::as_str)
                        .filter(|_| hosts.len() == 1),
                    named: &named,
                };
                let chain = place.plugins.chain(&at);
                let endpoint = match chain {
                    Ok((filters, plugins)) => {
                        for plugin in plugins {
                            let key = (route.kind, namespace.to_string(), name.to_string());
                            used.plugins.entry(plugin).or_default().insert(key);
                        }
                        config.plugins = filters;
                        endpoint.clone()
                    }
                    Err(reason) => Endpoint::Respond(500, reason),
                };
                match endpoint {
                    Endpoint::Upstream(upstream) => config.upstream = Some(upstream),
                    Endpoint::Component(plugin) => {
                        config.component = Some(ComponentEndpoint { plugin })
                    }
                    Endpoint::Function(plugin, function) => {
                        config.function = Some(FunctionEndpoint { plugin, function })
                    }
                    Endpoint::Redirect => {
                        config.redirect = rule_filters::redirect(rule, m.prefix.as_deref())
                    }
                    Endpoint::Respond(status, why) => {
                        config.respond = Some(FixedResponse {
                            status,
                            body: public_reason(status, &why),
                            headers: BTreeMap::new(),
                        })
                    }
                }
                served.push(Ranked::new(route, m, hosts, config));
            }
        }
    }
    match problem {
        Some(condition) => Err(condition),
        None => Ok(()),
    }
}

#[derive(Clone)]
enum Endpoint {
    Upstream(String),
    /// A WasmPlugin of kind Component named in `backendRefs`.
    Component(String),
    /// A WasmPlugin of kind Extism, and its function.
    Function(String, Option<String>),
    /// The rule's RequestRedirect (made per match: a prefix replacement
    /// depends on the match's prefix).
    Redirect,
    /// A fixed answer, and why (for the statuses, not for clients).
    Respond(u16, String),
}

/// What a client is told of a rule that cannot be served: not why (a
/// plugin's URL, a registry and its user, a policy's CA), which is the
/// namespace owner's to read in the route's or WasmPlugin's status.
fn public_reason(status: u16, why: &str) -> String {
    tracing::debug!(status, why, "a rule answers a fixed error");
    match status {
        503 => "no ready endpoints for this route's backends\n".into(),
        _ => "this route cannot be served: its configuration is incomplete (its status in Kubernetes says why)\n".into(),
    }
}

/// A rule whose backendRef is a WasmPlugin (one, alone, of the route's
/// namespace): the endpoint it makes and the plugin's node name, or the
/// ResolvedRefs condition that says why it does not.
fn wasm_backend(
    rule: &RuleView,
    namespace: &str,
    plugins: &WasmPlugins,
) -> Result<(Endpoint, String), Condition> {
    let invalid = |message: String| Condition::no("ResolvedRefs", "InvalidKind", message);
    let [b] = rule.backends.as_slice() else {
        return Err(invalid(
            "backendRefs: a WasmPlugin serves a rule alone (one backendRef), not beside others"
                .into(),
        ));
    };
    if b.kind.as_deref() != Some("WasmPlugin") {
        return Err(invalid(format!(
            "backendRef {}: of group {}, only WasmPlugins are backends",
            b.name,
            crate::wasmplugin::GROUP
        )));
    }
    if b.namespace.as_deref().is_some_and(|ns| ns != namespace) {
        return Err(Condition::no(
            "ResolvedRefs",
            "RefNotPermitted",
            format!(
                "backendRef {}: a WasmPlugin backend is one of the route's namespace",
                b.name
            ),
        ));
    }
    match plugins.backend(namespace, &b.name) {
        Ok(WasmBackend::Component(plugin)) => Ok((Endpoint::Component(plugin.clone()), plugin)),
        Ok(WasmBackend::Function(plugin, function)) => {
            Ok((Endpoint::Function(plugin.clone(), function), plugin))
        }
        Err((reason, message)) => Err(Condition::no("ResolvedRefs", reason, message)),
    }
}
